/* test_bridge_outbox.c - one Source's durable outbox (bridge/outbox.c on
 * common/rs_publisher): entries sent in order, one POST in flight per
 * topic, gathered into notifications whose rs:ln rel="up" is the bridged
 * Capability List and whose entries are the originals; X-Publish-Id
 * KEY:SEQ; a 503's Retry-After honoured; a 4xx stopping the topic until
 * resumed, or until a new token is set (at once, or once the POST in
 * flight was answered); against a small programmable hub on the test's
 * loop. And the
 * resend after a crash between a real rshub's 202 and the record of it:
 * the hub stores it once (tu_hub). */
#include "testutil.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "outbox.h"
#include "rs_fetch.h"
#include "rs_http.h"
#include "rs_parse.h"
#include "rs_pubid.h"
#include "rs_time.h"
#include "store.h"
#include "tu_httpd.h"
#include "tu_hub.h"

#define BRIDGED "http://bridge.example/s/src/"
#define MAXPOSTS 32

struct post {
    char pubid[128];
    char link[512];
    char auth[128];
    int entries;
    char first_loc[200], last_loc[200];
    char up[200];
    int status;
    double t;                 /* when it came (s) */
};

struct fx {
    struct tu_loop l;
    char *dir;
    char db[600];
    struct store *st;
    struct rs_http *http;
    struct outbox *ob;
    /* the programmable hub */
    struct evhttp *hub;
    int hub_port;
    char hub_url[64];
    int script[MAXPOSTS];     /* statuses, in order; then 202 */
    char script_hdr[MAXPOSTS][64];
    int nscript;
    int hold_ms;
    int inflight, max_inflight;
    struct post posts[MAXPOSTS];
    int nposts;
    int accepted_calls;
};

static double
now_s(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

struct held {
    struct fx *f;
    struct evhttp_request *req;
    struct event *ev;
    int status;
    char hdr[64];
};

static void
hub_answer(struct fx *f, struct evhttp_request *req, int status,
           const char *hdr)
{
    struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    if (status == 202) {
        char id[32];
        snprintf(id, sizeof(id), "%d-0", f->nposts);
        evhttp_add_header(oh, "X-Hub-Id", id);
        evbuffer_add_printf(b, "accepted %s\n", id);
    } else {
        evbuffer_add_printf(b, "error: scripted %d\n", status);
    }
    if (hdr != NULL && hdr[0] != '\0') {
        char name[32];
        const char *colon = strchr(hdr, ':');
        snprintf(name, sizeof(name), "%.*s", (int)(colon - hdr), hdr);
        evhttp_add_header(oh, name, colon + 2);
    }
    evhttp_send_reply(req, status, "Status", b);
    evbuffer_free(b);
    f->inflight--;
}

static void
on_held(evutil_socket_t fd, short what, void *arg)
{
    struct held *h = arg;
    (void)fd;
    (void)what;
    hub_answer(h->f, h->req, h->status, h->hdr);
    event_free(h->ev);
    free(h);
}

/* The notification's entries: count, first and last loc, rel="up". */
static void
parse_body(struct post *p, const char *body, size_t len)
{
    struct rs_doc *doc = NULL;
    struct rs_diag diag;
    struct rs_parse_opts po = { .strict = true };
    assert_int_equal(rs_doc_parse(body, len, &po, &doc, &diag), 0);
    p->entries = (int)doc->nentries;
    if (doc->nentries > 0) {
        snprintf(p->first_loc, sizeof(p->first_loc), "%s",
                 doc->entries[0].loc);
        snprintf(p->last_loc, sizeof(p->last_loc), "%s",
                 doc->entries[doc->nentries - 1].loc);
    }
    const struct rs_link *up = rs_links_find(doc->head.links,
                                             doc->head.nlinks, "up");
    if (up != NULL)
        snprintf(p->up, sizeof(p->up), "%s", up->href);
    rs_doc_free(doc);
}

static void
on_hub(struct evhttp_request *req, void *arg)
{
    struct fx *f = arg;
    assert_true(f->nposts < MAXPOSTS);
    struct post *p = &f->posts[f->nposts];
    struct evkeyvalq *ih = evhttp_request_get_input_headers(req);
    const char *v;
    memset(p, 0, sizeof(*p));
    p->t = now_s();
    if ((v = evhttp_find_header(ih, "X-Publish-Id")) != NULL)
        snprintf(p->pubid, sizeof(p->pubid), "%s", v);
    if ((v = evhttp_find_header(ih, "Link")) != NULL)
        snprintf(p->link, sizeof(p->link), "%s", v);
    if ((v = evhttp_find_header(ih, "Authorization")) != NULL)
        snprintf(p->auth, sizeof(p->auth), "%s", v);
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    char *body = malloc(len + 1);
    assert_non_null(body);
    evbuffer_copyout(in, body, len);
    body[len] = '\0';
    parse_body(p, body, len);
    free(body);
    int k = f->nposts++;
    p->status = k < f->nscript ? f->script[k] : 202;
    const char *hdr = k < f->nscript ? f->script_hdr[k] : "";
    if (++f->inflight > f->max_inflight)
        f->max_inflight = f->inflight;
    if (f->hold_ms <= 0) {
        hub_answer(f, req, p->status, hdr);
        return;
    }
    struct held *h = calloc(1, sizeof(*h));
    assert_non_null(h);
    h->f = f;
    h->req = req;
    h->status = p->status;
    snprintf(h->hdr, sizeof(h->hdr), "%s", hdr);
    h->ev = evtimer_new(f->l.base, on_held, h);
    struct timeval tv = { 0, f->hold_ms * 1000 };
    evtimer_add(h->ev, &tv);
}

static void
on_accepted(void *ud, enum outbox_lane lane, const char *channel)
{
    struct fx *f = ud;
    (void)lane;
    (void)channel;
    f->accepted_calls++;
}

static void
ob_open(struct fx *f, const char *hub, const char *token)
{
    struct outbox_opts o = {
        .base = f->l.base,
        .http = f->http,
        .st = f->st,
        .src = 1,
        .name = "src",
        .hub = hub,
        .topic = { BRIDGED "changes", BRIDGED "framework" },
        .token = token,
        .bridged = BRIDGED,
        .batch_ms = 5,
        .retry_max_ms = 5000,
        .on_accepted = on_accepted,
        .ud = f,
    };
    const char *err = NULL;
    f->ob = outbox_new(&o, &err);
    assert_non_null(f->ob);
}

static int
setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    tu_loop_init(&f->l);
    f->dir = tu_mkdtemp();
    snprintf(f->db, sizeof(f->db), "%s/bridge.db", f->dir);
    char err[256];
    assert_int_equal(store_open(f->db, &f->st, err, sizeof(err)), 0);
    int64_t id;
    bool fresh;
    assert_int_equal(store_source(f->st, "src", "http://src/", &id, &fresh),
                     0);
    struct rs_http_opts ho = { .user_agent = "rsbridge-test" };
    f->http = rs_http_new(f->l.base, &ho);
    assert_non_null(f->http);
    f->hub = evhttp_new(f->l.base);
    assert_non_null(f->hub);
    evhttp_set_gencb(f->hub, on_hub, f);
    f->hub_port = tu_httpd_listen(f->hub);
    snprintf(f->hub_url, sizeof(f->hub_url), "http://127.0.0.1:%d/hub",
             f->hub_port);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    rs_http_free(f->http);
    outbox_free(f->ob);
    evhttp_free(f->hub);
    store_free(f->st);
    tu_loop_cleanup(&f->l);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* Add n change entries "e<first>".."e<first+n-1>", in one transaction. */
static void
add(struct fx *f, int first, int n, int64_t k)
{
    assert_int_equal(store_begin(f->st), 0);
    for (int i = first; i < first + n; i++) {
        char loc[64];
        snprintf(loc, sizeof(loc), "http://src.example/data/e%d", i);
        struct outbox_item it = {
            .k = k,
            .loc = loc,
            .change = RS_CHANGE_UPDATED,
            .datetime = 1735689600LL * 1000000 + i,
            .lastmod = 1735689600LL * 1000000 + i,
            .hash = "md5:00112233445566778899aabbccddeeff",
            .length = 10,
            .type = "text/plain",
        };
        assert_int_equal(outbox_add(f->ob, OUTBOX_CHANGE, &it), 0);
    }
    assert_int_equal(store_commit(f->st), 0);
}

static int64_t
pending(struct fx *f)
{
    struct outbox_stats s;
    outbox_stats(f->ob, &s);
    return s.pending[OUTBOX_CHANGE];
}

static uint64_t
seq_of(const struct post *p, char *key)
{
    struct rs_pubid id;
    const char *why;
    assert_int_equal(rs_pubid_parse(p->pubid, &id, &why), 0);
    if (key != NULL)
        snprintf(key, RS_PUBID_KEY_MAX + 1, "%s", id.key);
    return id.seq;
}

/* ------------------------------------------------------------- tests */

/* outbox/in_order: entries added while a POST is in flight wait for it:
 * one POST at a time, contiguous batches in order, X-Publish-Id KEY:SEQ
 * the last seq of each, rel="up" the bridged Capability List of the
 * batch (one per notification), the bearer token; everything accepted,
 * nothing pending, the count kept. */
static void
test_in_order(void **state)
{
    struct fx *f = *state;
    ob_open(f, f->hub_url, "s3cret");
    f->hold_ms = 80;
    add(f, 1, 5, 0);
    outbox_kick(f->ob);
    TU_LOOP_UNTIL(&f->l, f->nposts == 1, 5000);
    add(f, 6, 3, 0);
    add(f, 9, 2, 1);                 /* another Capability List */
    outbox_kick(f->ob);
    TU_LOOP_UNTIL(&f->l, pending(f) == 0 && outbox_idle(f->ob), 10000);
    assert_int_equal(f->max_inflight, 1);
    assert_int_equal(f->nposts, 3);
    char key0[RS_PUBID_KEY_MAX + 1], key[RS_PUBID_KEY_MAX + 1];
    assert_true(seq_of(&f->posts[0], key0) == 5);
    assert_int_equal(f->posts[0].entries, 5);
    assert_string_equal(f->posts[0].first_loc, "http://src.example/data/e1");
    assert_string_equal(f->posts[0].up,
                        BRIDGED "capabilitylist/0.xml");
    assert_true(seq_of(&f->posts[1], key) == 8);
    assert_string_equal(key, key0);
    assert_int_equal(f->posts[1].entries, 3);
    assert_string_equal(f->posts[1].first_loc, "http://src.example/data/e6");
    assert_true(seq_of(&f->posts[2], NULL) == 10);
    assert_string_equal(f->posts[2].up,
                        BRIDGED "capabilitylist/1.xml");
    assert_non_null(strstr(f->posts[0].link, "<" BRIDGED "changes>; "
                           "rel=\"self\""));
    assert_string_equal(f->posts[0].auth, "Bearer s3cret");
    struct outbox_stats s;
    outbox_stats(f->ob, &s);
    assert_int_equal(s.accepted[OUTBOX_CHANGE], 10);
    assert_int_equal(f->accepted_calls, 3);
    /* a new process finds the same KEY and nothing to send */
    outbox_free(f->ob);
    ob_open(f, f->hub_url, NULL);
    outbox_stats(f->ob, &s);
    assert_int_equal(s.pending[OUTBOX_CHANGE], 0);
    assert_int_equal(s.accepted[OUTBOX_CHANGE], 10);
    add(f, 11, 1, 0);
    outbox_kick(f->ob);
    TU_LOOP_UNTIL(&f->l, f->nposts == 4 && outbox_idle(f->ob), 5000);
    assert_true(seq_of(&f->posts[3], key) == 11);
    assert_string_equal(key, key0);
}

/* outbox/retry_after: a 503 with Retry-After: 1 is sent again no sooner,
 * with the same X-Publish-Id; a 403 stops the topic (the entries wait)
 * until it is resumed. */
static void
test_retry(void **state)
{
    struct fx *f = *state;
    ob_open(f, f->hub_url, NULL);
    f->script[0] = 503;
    snprintf(f->script_hdr[0], sizeof(f->script_hdr[0]), "Retry-After: 1");
    f->script[1] = 202;
    f->script[2] = 403;
    f->script[3] = 202;
    f->nscript = 4;
    add(f, 1, 2, 0);
    outbox_kick(f->ob);
    TU_LOOP_UNTIL(&f->l, f->nposts == 2 && outbox_idle(f->ob), 5000);
    assert_true(f->posts[1].t - f->posts[0].t >= 0.95);
    assert_string_equal(f->posts[0].pubid, f->posts[1].pubid);
    assert_int_equal(pending(f), 0);
    add(f, 3, 1, 0);
    outbox_kick(f->ob);
    TU_LOOP_UNTIL(&f->l, f->nposts == 3 && outbox_idle(f->ob), 5000);
    tu_loop_run_for(&f->l, 300);
    struct outbox_stats s;
    outbox_stats(f->ob, &s);
    assert_true(s.stopped[OUTBOX_CHANGE]);
    assert_int_equal(s.pending[OUTBOX_CHANGE], 1);
    assert_int_equal(f->nposts, 3);
    outbox_resume(f->ob);
    TU_LOOP_UNTIL(&f->l, f->nposts == 4 && outbox_idle(f->ob), 5000);
    outbox_stats(f->ob, &s);
    assert_false(s.stopped[OUTBOX_CHANGE]);
    assert_int_equal(s.pending[OUTBOX_CHANGE], 0);
}

/* outbox/new_token: a new token (SIGHUP read the token file again) is on
 * every POST from then on: a topic a 403 stopped goes again with it at
 * outbox_resume (what SIGHUP calls next); a POST in flight when the token
 * changed that the hub refuses (403, the old token) is sent again at once
 * with the new one, not stopped until another SIGHUP. The same
 * X-Publish-Id KEY, its seqs going on, nothing pending. */
static void
test_new_token(void **state)
{
    struct fx *f = *state;
    ob_open(f, f->hub_url, "wrong");
    f->script[0] = 403;
    f->script[1] = 202;
    f->script[2] = 403;           /* the POST in flight when rotated */
    f->nscript = 3;
    add(f, 1, 1, 0);
    outbox_kick(f->ob);
    TU_LOOP_UNTIL(&f->l, f->nposts == 1 && outbox_idle(f->ob), 5000);
    tu_loop_run_for(&f->l, 100);
    struct outbox_stats s;
    outbox_stats(f->ob, &s);
    assert_true(s.stopped[OUTBOX_CHANGE]);
    assert_string_equal(f->posts[0].auth, "Bearer wrong");
    assert_int_equal(outbox_set_token(f->ob, "right"), 0);
    outbox_resume(f->ob);
    TU_LOOP_UNTIL(&f->l, f->nposts == 2 && outbox_idle(f->ob), 5000);
    assert_string_equal(f->posts[1].auth, "Bearer right");
    assert_int_equal(pending(f), 0);
    outbox_stats(f->ob, &s);
    assert_false(s.stopped[OUTBOX_CHANGE]);
    /* rotated while a POST is in flight, which the hub refuses */
    f->hold_ms = 300;
    add(f, 2, 1, 0);
    outbox_kick(f->ob);
    TU_LOOP_UNTIL(&f->l, f->nposts == 3, 5000);
    assert_false(outbox_idle(f->ob));
    assert_int_equal(outbox_set_token(f->ob, "rotated"), 0);
    TU_LOOP_UNTIL(&f->l, pending(f) == 0 && outbox_idle(f->ob), 5000);
    assert_int_equal(f->nposts, 4);
    assert_string_equal(f->posts[2].auth, "Bearer right");
    assert_string_equal(f->posts[3].auth, "Bearer rotated");
    outbox_stats(f->ob, &s);
    assert_false(s.stopped[OUTBOX_CHANGE]);
    char key0[RS_PUBID_KEY_MAX + 1], key[RS_PUBID_KEY_MAX + 1];
    assert_true(seq_of(&f->posts[1], key0) == 1);
    assert_true(seq_of(&f->posts[3], key) == 2);
    assert_string_equal(key, key0);
    assert_int_equal(outbox_set_token(f->ob, NULL), 0);
}

/* outbox/framework: framework events go to the framework topic, with
 * their capability and change. */
static void
test_framework(void **state)
{
    struct fx *f = *state;
    ob_open(f, f->hub_url, NULL);
    assert_int_equal(store_begin(f->st), 0);
    struct outbox_item it = {
        .k = 0,
        .loc = "http://src.example/resourcesync/changelist-2.xml",
        .change = RS_CHANGE_CREATED,
        .cap = RS_CAP_CHANGELIST,
        .datetime = rs_time_now(),
        .lastmod = RS_TIME_NONE,
        .length = -1,
    };
    assert_int_equal(outbox_add(f->ob, OUTBOX_FRAMEWORK, &it), 0);
    assert_int_equal(store_commit(f->st), 0);
    outbox_kick(f->ob);
    TU_LOOP_UNTIL(&f->l, f->nposts == 1 && outbox_idle(f->ob), 5000);
    assert_non_null(strstr(f->posts[0].link, "<" BRIDGED "framework>"));
    assert_int_equal(f->posts[0].entries, 1);
    struct outbox_stats s;
    outbox_stats(f->ob, &s);
    assert_int_equal(s.accepted[OUTBOX_FRAMEWORK], 1);
    assert_int_equal(s.pending[OUTBOX_FRAMEWORK], 0);
}

/* The backlog length of topic at a real hub (GET /topics), or -1. */
struct acc {
    char buf[65536];
    size_t len;
};

static int
acc_body(void *ud, const char *buf, size_t len)
{
    struct acc *a = ud;
    if (len > sizeof(a->buf) - 1 - a->len)
        return RS_ETOOBIG;
    memcpy(a->buf + a->len, buf, len);
    a->len += len;
    a->buf[a->len] = '\0';
    return 0;
}

static long
hub_backlog(const struct tu_hub *g, const char *topic)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/topics", g->hub_port);
    struct acc *a = calloc(1, sizeof(*a));
    assert_non_null(a);
    struct rs_fetch_result res;
    struct rs_fetch_opts fo = { 0 };
    int rc = rs_fetch(url, &fo, acc_body, a, &res);
    rs_fetch_result_cleanup(&res);
    long n = -1;
    if (rc == 0) {
        json_error_t jerr;
        json_t *arr = json_loads(a->buf, 0, &jerr);
        size_t i;
        json_t *t;
        json_array_foreach(arr, i, t) {
            const char *tp = json_string_value(json_object_get(t, "topic"));
            if (tp != NULL && strcmp(tp, topic) == 0)
                n = (long)json_integer_value(json_object_get(
                    json_object_get(t, "backlog"), "length"));
        }
        json_decref(arr);
    }
    free(a);
    return n;
}

/* outbox/resend_after_a_crash: a real rshub accepted entries 1..3, and the
 * process died before recording it (the watermark still 0, the mark of
 * the POST recorded before it went out); entries 4..5 came meanwhile.
 * The next process sends 1..3 again - not past the mark - and the hub
 * stores nothing new (X-Hub-Duplicate); then 4..5, stored once. */
static void
test_resend(void **state)
{
    struct fx *f = *state;
    struct tu_hub *g = tu_hub_new(NULL);
    ob_open(f, g->hub_url, NULL);
    add(f, 1, 3, 0);
    outbox_kick(f->ob);
    TU_LOOP_UNTIL(&f->l, pending(f) == 0 && outbox_idle(f->ob), 10000);
    const char *topic = BRIDGED "changes";
    assert_int_equal(hub_backlog(g, topic), 1);
    outbox_free(f->ob);
    f->ob = NULL;
    /* the state as kill -9 left it: the rows, the mark, no watermark */
    assert_int_equal(store_exec_sql(f->st,
        "INSERT INTO outbox(src, lane, seq, k, loc, change, cap, dt) "
        "VALUES (1, 0, 1, 0, 'http://src.example/data/e1', 2, 0, 1), "
        "(1, 0, 2, 0, 'http://src.example/data/e2', 2, 0, 2), "
        "(1, 0, 3, 0, 'http://src.example/data/e3', 2, 0, 3); "
        "UPDATE lanes SET pushed = 0, sent = '3' WHERE src = 1 AND "
        "lane = 0"), 0);
    ob_open(f, g->hub_url, NULL);
    add(f, 4, 2, 0);
    outbox_kick(f->ob);
    TU_LOOP_UNTIL(&f->l, pending(f) == 0 && outbox_idle(f->ob), 10000);
    struct outbox_stats s;
    outbox_stats(f->ob, &s);
    assert_int_equal(s.duplicates, 1);
    assert_int_equal(hub_backlog(g, topic), 2);
    rs_http_free(f->http);
    f->http = NULL;
    tu_hub_free(g);
}

/* outbox/free_null: outbox_free(NULL) is a no-op. */
static void
test_free_null(void **state)
{
    (void)state;
    outbox_free(NULL);
    char buf[64];
    assert_int_equal(outbox_caplist_url("http://b/s/x/", 3, buf,
                                        sizeof(buf)), 0);
    assert_string_equal(buf, "http://b/s/x/capabilitylist/3.xml");
    assert_int_equal(outbox_caplist_url("http://b/s/x/", 3, buf, 8),
                     RS_ETOOBIG);
}

/* outbox/hub_health: a failed POST makes the topic's hub failing (since
 * the POST that failed, the reason's class, the failures counted) until
 * the hub accepts one again, which clears it; a 4xx that stops the topic
 * is failing too, as refused, until a POST after the resume is
 * accepted. */
static void
test_hub_health(void **state)
{
    struct fx *f = *state;
    ob_open(f, f->hub_url, NULL);
    struct outbox_stats s;
    outbox_stats(f->ob, &s);
    assert_false(s.hub_failing[OUTBOX_CHANGE]);
    assert_string_equal(s.hub_error, "");
    assert_true(s.hub_failing_since == RS_TIME_NONE);
    f->script[0] = 503;
    snprintf(f->script_hdr[0], sizeof(f->script_hdr[0]), "Retry-After: 1");
    f->script[1] = 202;
    f->script[2] = 403;
    f->script[3] = 202;
    f->nscript = 4;
    rs_time_t t0 = rs_time_now();
    add(f, 1, 1, 0);
    outbox_kick(f->ob);
    TU_LOOP_UNTIL(&f->l, f->nposts == 1 && outbox_idle(f->ob), 5000);
    tu_loop_run_for(&f->l, 200);          /* within the Retry-After */
    outbox_stats(f->ob, &s);
    assert_true(s.hub_failing[OUTBOX_CHANGE]);
    assert_false(s.hub_failing[OUTBOX_FRAMEWORK]);
    assert_int_equal(s.hub_failures, 1);
    assert_non_null(strstr(s.hub_error, "HTTP 503: "));
    assert_non_null(strstr(s.hub_error, "(retrying)"));
    assert_true(s.hub_failing_since >= t0 &&
                s.hub_failing_since <= rs_time_now());
    TU_LOOP_UNTIL(&f->l, f->nposts == 2 && outbox_idle(f->ob), 5000);
    outbox_stats(f->ob, &s);
    assert_int_equal(pending(f), 0);
    assert_false(s.hub_failing[OUTBOX_CHANGE]);
    assert_string_equal(s.hub_error, "");
    assert_true(s.hub_failing_since == RS_TIME_NONE);
    assert_int_equal(s.failures, 1);
    /* refused: stopped, failing as refused until accepted again */
    add(f, 2, 1, 0);
    outbox_kick(f->ob);
    TU_LOOP_UNTIL(&f->l, f->nposts == 3 && outbox_idle(f->ob), 5000);
    tu_loop_run_for(&f->l, 100);
    outbox_stats(f->ob, &s);
    assert_true(s.stopped[OUTBOX_CHANGE]);
    assert_true(s.hub_failing[OUTBOX_CHANGE]);
    assert_non_null(strstr(s.hub_error, "HTTP 403: "));
    assert_non_null(strstr(s.hub_error, "(refused"));
    assert_true(s.hub_failing_since != RS_TIME_NONE);
    outbox_resume(f->ob);
    TU_LOOP_UNTIL(&f->l, f->nposts == 4 && outbox_idle(f->ob), 5000);
    outbox_stats(f->ob, &s);
    assert_false(s.hub_failing[OUTBOX_CHANGE]);
    assert_string_equal(s.hub_error, "");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_free_null),
        cmocka_unit_test_setup_teardown(test_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hub_health, setup, teardown),
        cmocka_unit_test_setup_teardown(test_new_token, setup, teardown),
        cmocka_unit_test_setup_teardown(test_framework, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resend, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
