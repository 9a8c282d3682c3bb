/* test_bridge_poller.c - one Source's poller (bridge/poller.c) against a
 * programmable Source on loopback (test_bridge_src.h) that holds its
 * answers back: one request in flight, no document asked for again within
 * --interval of its last answer, conditional GETs, a 503's Retry-After
 * honoured, errors counted and polling going on once the Source is well
 * again, garbage publishing nothing, an empty Resource List watched
 * head-only read well. The hub is unreachable: nothing here is about
 * publishing. */
#include "testutil.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poller.h"
#include "rs_http.h"
#include "rs_time.h"
#include "store.h"
#include "test_bridge_src.h"
#include "tu_httpd.h"

#define INTERVAL_MS 300

struct fx {
    struct tu_loop l;
    struct tbs *src;
    char *dir;
    struct store *st;
    struct rs_http *http, *hub_http;
    struct poller *p;
    int ready;
};

static void
on_ready(void *ud)
{
    struct fx *f = ud;
    f->ready++;
}

static void
serve(struct fx *f, int n)
{
    char body[8192], e[512];
    size_t off = 0;
    body[0] = '\0';
    for (int i = 0; i < n; i++) {
        char dt[RS_TIME_BUFSZ], loc[64];
        assert_true(rs_time_format(1735689600LL * 1000000 +
                                   (rs_time_t)i * 1000000, dt) > 0);
        snprintf(loc, sizeof(loc), "{B}/data/r%d", i);
        tbs_change(e, sizeof(e), loc, "created", dt);
        off += (size_t)snprintf(body + off, sizeof(body) - off, "%s", e);
    }
    tbs_putf(f->src, "/cl.xml", "<urlset " TBS_NS "><rs:md capability="
             "\"changelist\" from=\"2025-01-01T00:00:00Z\"/>%s</urlset>",
             body);
}

static const char CAPLIST[] =
    "<urlset " TBS_NS "><rs:md capability=\"capabilitylist\"/>"
    "<url><loc>{B}/cl.xml</loc><rs:md capability=\"changelist\"/>"
    "</url></urlset>";
/* A Capability List that names a Resource List too (watched head-only). */
static const char CAPLIST_RL[] =
    "<urlset " TBS_NS "><rs:md capability=\"capabilitylist\"/>"
    "<url><loc>{B}/rl.xml</loc><rs:md capability=\"resourcelist\"/></url>"
    "<url><loc>{B}/cl.xml</loc><rs:md capability=\"changelist\"/>"
    "</url></urlset>";

/* A poller on the Source, started, read once: a start of the bridge. */
static void
poller_up(struct fx *f)
{
    struct rs_http_opts ho = { .user_agent = "rsbridge/test" };
    f->http = rs_http_new(f->l.base, &ho);
    f->hub_http = rs_http_new(f->l.base, &ho);
    assert_true(f->http != NULL && f->hub_http != NULL);
    struct poller_opts po = {
        .base = f->l.base,
        .http = f->http,
        .hub_http = f->hub_http,
        .st = f->st,
        .name = "src",
        .url = tbs_url(f->src, "/caplist.xml"),
        .bridged = "http://bridge.example/s/src/",
        .hub = "http://127.0.0.1:1/hub",
        .interval_ms = INTERVAL_MS,
        .timeout_ms = 5000,
        .batch_ms = 1,
        .retry_max_ms = 1000,
        .on_ready = on_ready,
        .ud = f,
    };
    const char *perr = NULL;
    f->ready = 0;
    f->p = poller_new(&po, &perr);
    assert_non_null(f->p);
    poller_start(f->p);
    TU_LOOP_UNTIL(&f->l, f->ready == 1, 10000);
}

/* The poller stopped and gone (the state stays): an end of the bridge. */
static void
poller_down(struct fx *f)
{
    /* the answer held back goes out, later ones at once: then stop */
    int hold = f->src->hold_ms;
    f->src->hold_ms = 0;
    TU_LOOP_UNTIL(&f->l, f->src->inflight == 0, 3000);
    poller_drain(f->p);
    rs_http_free(f->http);
    rs_http_free(f->hub_http);
    poller_free(f->p);
    f->p = NULL;
    tu_loop_settle(&f->l);
    f->src->hold_ms = hold;
}

static int
setup_with(void **state, const char *caplist)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    tu_loop_init(&f->l);
    f->src = tbs_new(f->l.base);
    f->src->hold_ms = 100;
    tbs_put(f->src, "/caplist.xml", caplist);
    tbs_put(f->src, "/rl.xml",
            "<urlset " TBS_NS "><rs:md capability=\"resourcelist\" "
            "at=\"2025-01-01T00:00:00Z\"/></urlset>");
    serve(f, 2);
    f->dir = tu_mkdtemp();
    char db[600], err[256];
    snprintf(db, sizeof(db), "%s/bridge.db", f->dir);
    assert_int_equal(store_open(db, &f->st, err, sizeof(err)), 0);
    poller_up(f);
    *state = f;
    return 0;
}

static int
setup(void **state)
{
    return setup_with(state, CAPLIST);
}

static int
setup_rl(void **state)
{
    return setup_with(state, CAPLIST_RL);
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    poller_down(f);
    store_free(f->st);
    tu_loop_settle(&f->l);
    tbs_free(f->src);
    tu_loop_cleanup(&f->l);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* poller/polite: one request in flight; no document asked for again
 * within --interval of the answer to its last request (counted from the
 * answer: a Source counts from when a request arrived, and a request may
 * leave a busy loop later than it was made); conditional GETs, and 304s
 * for what did not change. */
static void
test_polite(void **state)
{
    struct fx *f = *state;
    tu_loop_run_for(&f->l, 2500);
    assert_int_equal(f->src->max_inflight, 1);
    unsigned polls = tbs_count(f->src, "GET /cl.xml");
    assert_true(polls >= 3);
    for (size_t i = 0; i < f->src->nlog; i++) {
        for (size_t j = i + 1; j < f->src->nlog; j++) {
            if (strcmp(f->src->log[i], f->src->log[j]) != 0)
                continue;
            double gap = f->src->t0[j] - f->src->t1[i];
            if (gap < INTERVAL_MS / 1000.0 - 0.01)
                fail_msg("%s asked for again %.3f s after its answer",
                         f->src->log[j], gap);
            break;
        }
    }
    assert_true(f->src->not_modified >= polls - 1);
    struct poller_stats ps;
    poller_stats(f->p, &ps);
    assert_int_equal(ps.errors, 0);
    assert_true(ps.polls >= 3);
}

/* poller/retry_after: a 503 with Retry-After: 1 is a failed poll
 * (counted, its reason kept), and no request follows before a second has
 * passed; once the Source is well again, polls go on and the new entries
 * are found. */
static void
test_retry_after(void **state)
{
    struct fx *f = *state;
    tu_loop_run_for(&f->l, 400);
    tbs_status(f->src, "/cl.xml", 503, "Retry-After: 1\n");
    size_t from = f->src->nlog;
    struct poller_stats ps;
    tu_loop_arm(&f->l, 5000);
    do {
        event_base_loop(f->l.base, EVLOOP_ONCE);
        poller_stats(f->p, &ps);
    } while (ps.errors == 0 && !f->l.expired);
    tu_loop_disarm(&f->l);
    assert_int_equal(ps.errors, 1);
    assert_non_null(ps.last_error);
    assert_non_null(strstr(ps.last_error, "503"));
    tbs_status(f->src, "/cl.xml", 0, NULL);
    serve(f, 4);
    tu_loop_run_for(&f->l, 2000);
    size_t k = from;
    while (k < f->src->nlog && strcmp(f->src->log[k], "GET /cl.xml") != 0)
        k++;
    assert_true(k + 1 < f->src->nlog);
    double gap = f->src->t0[k + 1] - f->src->t1[k];
    if (gap < 0.99)
        fail_msg("the next request %.3f s after a Retry-After of 1 s", gap);
    poller_stats(f->p, &ps);
    assert_int_equal(ps.errors, 1);
    assert_true(ps.last_change != RS_TIME_NONE);   /* r2, r3 found */
    assert_int_equal(ps.outbox.pending[OUTBOX_CHANGE], 2);
}

/* poller/garbage: a document that is not ResourceSync fails the poll and
 * publishes nothing; polling goes on. */
static void
test_garbage(void **state)
{
    struct fx *f = *state;
    tbs_put(f->src, "/cl.xml", "\x01garbage<<<not xml");
    struct poller_stats ps;
    tu_loop_arm(&f->l, 5000);
    do {
        event_base_loop(f->l.base, EVLOOP_ONCE);
        poller_stats(f->p, &ps);
    } while (ps.errors == 0 && !f->l.expired);
    tu_loop_disarm(&f->l);
    assert_int_equal(ps.errors, 1);
    assert_int_equal(ps.outbox.pending[OUTBOX_CHANGE], 0);
    serve(f, 3);
    tu_loop_arm(&f->l, 5000);
    do {
        event_base_loop(f->l.base, EVLOOP_ONCE);
        poller_stats(f->p, &ps);
    } while (ps.outbox.pending[OUTBOX_CHANGE] == 0 && !f->l.expired);
    tu_loop_disarm(&f->l);
    assert_int_equal(ps.outbox.pending[OUTBOX_CHANGE], 1);
    assert_string_equal(poller_name(f->p), "src");
}

/* poller/empty_resource_list: the Resource List of a Capability List
 * with a Change List is watched head-only; one without entries (its head
 * comes with its end, at the parser's finish) is read well, not a failed
 * poll. */
static void
test_empty_resource_list(void **state)
{
    struct fx *f = *state;
    tu_loop_run_for(&f->l, 4 * INTERVAL_MS);
    assert_true(tbs_count(f->src, "GET /rl.xml") >= 2);
    struct poller_stats ps;
    poller_stats(f->p, &ps);
    if (ps.errors != 0)
        fail_msg("%llu failed polls: %s", (unsigned long long)ps.errors,
                 ps.last_error);
    assert_true(ps.polls >= 2);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_polite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retry_after, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_resource_list, setup_rl,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
