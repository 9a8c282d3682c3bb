/* test_publisher.c - one topic's outbox sender (common/publisher.c)
 * against a small programmable hub on the test's loop, with an outbox of
 * the test's own (an array): the gathering window, X-Publish-Id KEY:SEQ,
 * the marks (recorded before each POST; no batch past the smallest; one
 * with nothing left up to it moves the watermark), 413 halving, a record
 * that fails sending the same entries again, a 4xx stopping the topic,
 * flush, and the NULL no-ops. */
#include "testutil.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rs_http.h"
#include "rs_pubid.h"
#include "rs_publisher.h"
#include "tu_httpd.h"

#define KEY "k3y"
#define MAXPOSTS 16

struct fx {
    struct tu_loop l;
    struct rs_http *http;
    struct evhttp *hub;
    char hub_url[64];
    struct rs_publisher *p;
    /* the outbox: entries 1..head, some missing (holes) */
    int64_t head;
    bool hole[64];
    int64_t pushed;
    int64_t marks[RS_PUBLISHER_MARKS];
    size_t nmarks;
    int marks_calls;
    bool fail_record;             /* accepted() fails once */
    int accepted_calls;
    /* the hub */
    int script[MAXPOSTS];
    int nscript;
    struct {
        uint64_t seq;
        int entries;
        int status;
    } posts[MAXPOSTS];
    int nposts;
};

static void
on_hub(struct evhttp_request *req, void *arg)
{
    struct fx *f = arg;
    assert_true(f->nposts < MAXPOSTS);
    int k = f->nposts++;
    const char *v = evhttp_find_header(evhttp_request_get_input_headers(req),
                                       "X-Publish-Id");
    struct rs_pubid id;
    const char *why;
    assert_non_null(v);
    assert_int_equal(rs_pubid_parse(v, &id, &why), 0);
    assert_string_equal(id.key, KEY);
    f->posts[k].seq = id.seq;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    char *body = malloc(len + 1);
    assert_non_null(body);
    evbuffer_copyout(in, body, len);
    body[len] = '\0';
    int n = 0;
    for (const char *q = body; (q = strstr(q, "<e>")) != NULL; q++)
        n++;
    free(body);
    f->posts[k].entries = n;
    int status = k < f->nscript ? f->script[k] : 202;
    f->posts[k].status = status;
    struct evbuffer *b = evbuffer_new();
    evhttp_send_reply(req, status, "Status", b);
    evbuffer_free(b);
}

/* ------------------------------------------------- the test's outbox */

static int64_t
cb_head(void *ud)
{
    struct fx *f = ud;
    return f->head;
}

static int64_t
cb_count(void *ud, int64_t after, int64_t upto)
{
    struct fx *f = ud;
    int64_t n = 0;
    for (int64_t s = after + 1; s <= upto && s <= f->head; s++)
        n += !f->hole[s];
    return n;
}

static int
cb_build(void *ud, int64_t after, size_t max_entries, size_t max_bytes,
         rs_write_cb cb, void *cbud, int64_t *last, size_t *n, char *err)
{
    struct fx *f = ud;
    (void)max_bytes;
    (void)err;
    *n = 0;
    *last = after;
    int rc = 0;
    for (int64_t s = after + 1; s <= f->head && *n < max_entries; s++) {
        if (f->hole[s])
            continue;
        if (*n == 0)
            rc = cb(cbud, "<doc>", 5);
        if (rc == 0)
            rc = cb(cbud, "<e>", 3);
        (*n)++;
        *last = s;
    }
    if (rc == 0 && *n > 0)
        rc = cb(cbud, "</doc>", 6);
    return rc;
}

static int
cb_accepted(void *ud, int64_t before, int64_t last, size_t n,
            const char *channel, const int64_t *marks, size_t nmarks)
{
    struct fx *f = ud;
    (void)before;
    (void)n;
    (void)channel;
    if (f->fail_record) {
        f->fail_record = false;
        return RS_EIO;
    }
    f->accepted_calls++;
    f->pushed = last;
    memcpy(f->marks, marks, nmarks * sizeof(*marks));
    f->nmarks = nmarks;
    return 0;
}

static int
cb_marks(void *ud, const int64_t *marks, size_t nmarks)
{
    struct fx *f = ud;
    f->marks_calls++;
    memcpy(f->marks, marks, nmarks * sizeof(*marks));
    f->nmarks = nmarks;
    return 0;
}

static void
pub_open(struct fx *f, int64_t pushed, const int64_t *sent, size_t nsent)
{
    struct rs_publisher_opts o = {
        .base = f->l.base,
        .http = f->http,
        .hub = f->hub_url,
        .topic = "http://src.example/changes",
        .publish_key = KEY,
        .name = "test",
        .batch_ms = 5,
        .retry_max_ms = 200,
        .pushed = pushed,
        .sent = sent,
        .nsent = nsent,
        .head = cb_head,
        .count = cb_count,
        .build = cb_build,
        .accepted = cb_accepted,
        .marks = cb_marks,
        .ud = f,
    };
    const char *err = NULL;
    f->p = rs_publisher_new(&o, &err);
    assert_non_null(f->p);
    f->pushed = pushed;
}

static int
setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    tu_loop_init(&f->l);
    struct rs_http_opts ho = { .user_agent = "test" };
    f->http = rs_http_new(f->l.base, &ho);
    assert_non_null(f->http);
    f->hub = evhttp_new(f->l.base);
    assert_non_null(f->hub);
    evhttp_set_gencb(f->hub, on_hub, f);
    snprintf(f->hub_url, sizeof(f->hub_url), "http://127.0.0.1:%d/hub",
             tu_httpd_listen(f->hub));
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    rs_http_free(f->http);
    rs_publisher_free(f->p);
    evhttp_free(f->hub);
    tu_loop_cleanup(&f->l);
    free(f);
    return 0;
}

static bool
settled(struct fx *f)
{
    return f->pushed == f->head && rs_publisher_idle(f->p);
}

/* ------------------------------------------------------------- tests */

/* publisher/gather: entries added together go out as one POST after the
 * window, X-Publish-Id KEY:SEQ its last seq, its mark recorded first and
 * dropped with the watermark. */
static void
test_gather(void **state)
{
    struct fx *f = *state;
    pub_open(f, 0, NULL, 0);
    f->head = 4;
    rs_publisher_kick(f->p);
    rs_publisher_kick(f->p);
    TU_LOOP_UNTIL(&f->l, settled(f), 5000);
    assert_int_equal(f->nposts, 1);
    assert_true(f->posts[0].seq == 4);
    assert_int_equal(f->posts[0].entries, 4);
    assert_int_equal(f->marks_calls, 1);
    assert_int_equal(f->nmarks, 0);
    assert_int_equal(rs_publisher_pushed(f->p), 4);
    struct rs_publisher_stats st;
    rs_publisher_stats(f->p, &st);
    assert_int_equal(st.accepted_entries, 4);
    assert_int_equal(st.posts, 1);
}

/* publisher/marks: a mark from before a restart bounds the resend: 1..3
 * again (the hub may hold them), then the rest; a mark with nothing left
 * up to it (entries gone) moves the watermark without a POST. */
static void
test_marks(void **state)
{
    struct fx *f = *state;
    int64_t sent[] = { 9, 3 };
    f->head = 6;
    pub_open(f, 0, sent, 2);        /* 9 is above head: only 3 is kept */
    rs_publisher_kick(f->p);
    TU_LOOP_UNTIL(&f->l, settled(f), 5000);
    assert_int_equal(f->nposts, 2);
    assert_true(f->posts[0].seq == 3);
    assert_int_equal(f->posts[0].entries, 3);
    assert_true(f->posts[1].seq == 6);
    assert_int_equal(f->posts[1].entries, 3);
    rs_publisher_free(f->p);
    /* 7 and 8 are gone from the outbox, a mark at 8 remains */
    f->hole[7] = f->hole[8] = true;
    f->head = 10;
    int64_t sent2[] = { 8 };
    pub_open(f, 6, sent2, 1);
    rs_publisher_kick(f->p);
    TU_LOOP_UNTIL(&f->l, settled(f), 5000);
    assert_int_equal(f->nposts, 3);
    assert_true(f->posts[2].seq == 10);
    assert_int_equal(f->posts[2].entries, 2);
}

/* publisher/413_and_failed_record: a 413 halves the batch; a 2xx whose
 * record fails is sent again (same SEQ) after a backoff. */
static void
test_split(void **state)
{
    struct fx *f = *state;
    pub_open(f, 0, NULL, 0);
    f->script[0] = 413;
    f->nscript = 1;
    f->head = 8;
    f->fail_record = true;
    rs_publisher_kick(f->p);
    TU_LOOP_UNTIL(&f->l, settled(f), 5000);
    assert_int_equal(f->posts[0].status, 413);
    assert_int_equal(f->posts[0].entries, 8);
    assert_int_equal(f->posts[1].entries, 4);       /* halved */
    assert_true(f->posts[2].seq == f->posts[1].seq);  /* record failed */
    assert_true(f->posts[f->nposts - 1].seq == 8);
    assert_int_equal(f->pushed, 8);
}

/* publisher/stopped: a 401 stops the topic; nothing is sent until
 * resumed, and then not past the refused POST's mark first; flush sends
 * what is gathering at once. */
static void
test_stopped(void **state)
{
    struct fx *f = *state;
    pub_open(f, 0, NULL, 0);
    f->script[0] = 401;
    f->nscript = 1;
    f->head = 2;
    rs_publisher_kick(f->p);
    TU_LOOP_UNTIL(&f->l, f->nposts == 1 && rs_publisher_idle(f->p), 5000);
    tu_loop_run_for(&f->l, 300);
    struct rs_publisher_stats st;
    rs_publisher_stats(f->p, &st);
    assert_true(st.stopped);
    assert_int_equal(f->nposts, 1);
    f->head = 3;
    rs_publisher_kick(f->p);
    tu_loop_run_for(&f->l, 100);
    assert_int_equal(f->nposts, 1);
    rs_publisher_resume(f->p);
    TU_LOOP_UNTIL(&f->l, settled(f), 5000);
    /* the refused POST's mark bounds the first batch after it */
    assert_true(f->posts[1].seq == 2);
    assert_true(f->posts[2].seq == 3);
    f->head = 4;
    rs_publisher_kick(f->p);         /* gathering ... */
    rs_publisher_flush(f->p);        /* ... sent now */
    assert_false(rs_publisher_idle(f->p));
    TU_LOOP_UNTIL(&f->l, settled(f), 5000);
}

/* publisher/bad_options: a KEY outside [A-Za-z0-9._-], or no outbox, is
 * refused; free(NULL) is a no-op. */
static void
test_options(void **state)
{
    struct fx *f = *state;
    struct rs_publisher_opts o = {
        .base = f->l.base, .http = f->http, .hub = f->hub_url,
        .topic = "http://t/", .publish_key = "a b", .head = cb_head,
        .build = cb_build, .accepted = cb_accepted, .marks = cb_marks,
    };
    const char *err = NULL;
    assert_null(rs_publisher_new(&o, &err));
    assert_non_null(err);
    o.publish_key = KEY;
    o.marks = NULL;
    assert_null(rs_publisher_new(&o, &err));
    o.marks = cb_marks;
    o.build = NULL;
    assert_null(rs_publisher_new(&o, &err));
    rs_publisher_free(NULL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gather, setup, teardown),
        cmocka_unit_test_setup_teardown(test_marks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stopped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_options, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
