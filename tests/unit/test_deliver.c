/* test_deliver.c - WebSub content distribution (hub/deliver.c) on a real
 * loop with a private redis-server, the hub's real backlog, store and HTTP
 * client, and a callback server on loopback: order and X-Hub-Id, the
 * signature, cursors saved, retries with backoff, 410, the per-host slots
 * (healthy first), X-Hub-Gap after a trim, expired leases, overflow and
 * refill, the delivery lock, failing and --drop-failing, and a
 * subscription removed with its POST and a page read both in flight.
 * The fan-out's tail is not started (no WebSocket threads): the tests hand
 * live entries to deliver_on_entries as it would. Every test ends with
 * nothing left on the loop. */
#include "testutil.h"
#include "tu_httpd.h"
#include "tu_proc.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backlog.h"
#include "deliver.h"
#include "fanout.h"
#include "rs_alloc.h"
#include "rs_http.h"
#include "rs_time.h"
#include "subs.h"
#include "topic.h"
#include "websubwire.h"

#define TOPIC_URI "http://t.test/t"
#define HUB_URL "http://hub.test/hub"
#define NREQ 256

/* ------------------------------------------------------- callback server */

struct cbpath {
    char path[32];
    int status;               /* 0: 200 */
    unsigned fail_n;          /* the first fail_n get fail_status */
    int fail_status;
    bool stall;               /* never answer */
    unsigned hits;
};

struct cbreq {
    char path[32];
    char id[48], gap[48], sig[160], ctype[64], link[128];
    char body[128];
    double at;                /* monotonic seconds */
};

struct cbsrv {
    struct evhttp *http;
    int port;
    struct cbpath paths[8];
    size_t npaths;
    struct cbreq reqs[NREQ];
    size_t nreqs;
};

static double
mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
hdr_copy(char *dst, size_t n, struct evkeyvalq *h, const char *name)
{
    const char *v = evhttp_find_header(h, name);
    snprintf(dst, n, "%s", v != NULL ? v : "");
}

static void
on_cb_request(struct evhttp_request *req, void *arg)
{
    struct cbsrv *s = arg;
    const char *uri = evhttp_request_get_uri(req);
    struct cbpath *p = NULL;
    for (size_t i = 0; i < s->npaths && p == NULL; i++)
        if (strcmp(s->paths[i].path, uri) == 0)
            p = &s->paths[i];
    if (p == NULL) {
        evhttp_send_reply(req, 404, "Not Found", NULL);
        return;
    }
    p->hits++;
    if (s->nreqs < NREQ) {
        struct cbreq *r = &s->reqs[s->nreqs++];
        struct evkeyvalq *h = evhttp_request_get_input_headers(req);
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t n = evbuffer_get_length(in);
        memset(r, 0, sizeof(*r));
        snprintf(r->path, sizeof(r->path), "%s", uri);
        hdr_copy(r->id, sizeof(r->id), h, "X-Hub-Id");
        hdr_copy(r->gap, sizeof(r->gap), h, "X-Hub-Gap");
        hdr_copy(r->sig, sizeof(r->sig), h, "X-Hub-Signature");
        hdr_copy(r->ctype, sizeof(r->ctype), h, "Content-Type");
        hdr_copy(r->link, sizeof(r->link), h, "Link");
        evbuffer_copyout(in, r->body, n < sizeof(r->body) - 1 ? n : sizeof(r->body) - 1);
        r->at = mono_s();
    }
    if (p->stall)
        return;   /* the client times out; evhttp frees it with the connection */
    int st = p->hits <= p->fail_n ? p->fail_status : p->status ? p->status : 200;
    evhttp_send_reply(req, st, "X", NULL);
}

static struct cbpath *
cb_path(struct cbsrv *s, const char *path)
{
    assert_true(s->npaths < 8);
    struct cbpath *p = &s->paths[s->npaths++];
    memset(p, 0, sizeof(*p));
    snprintf(p->path, sizeof(p->path), "%s", path);
    return p;
}

/* Requests for path, in order of arrival, into out (up to max). */
static size_t
cb_reqs(const struct cbsrv *s, const char *path, const struct cbreq **out,
        size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < s->nreqs && n < max; i++)
        if (strcmp(s->reqs[i].path, path) == 0)
            out[n++] = &s->reqs[i];
    return n;
}

/* ---------------------------------------------------------------- fixture */

struct fx {
    struct tu_redis *redis;
    struct tu_loop loop;
    struct backlog *b;
    struct subs *subs;
    struct topics *topics;
    struct fanout *fanout;
    struct rs_http *http;
    struct deliver *d;
    struct cbsrv srv;
    char url[64];             /* http://127.0.0.1:PORT */
};

static void
on_state(void *ud, const char *which, enum rs_redis_state st, const char *err)
{
    struct fx *f = ud;
    (void)err;
    if (strcmp(which, "command") == 0 && st == RS_REDIS_READY)
        subs_on_ready(f->subs);
}

static int
group_setup(void **state)
{
    struct tu_redis *r = calloc(1, sizeof(*r));
    tu_redis_start(r);
    *state = r;
    return 0;
}

static int
group_teardown(void **state)
{
    tu_redis_stop(*state);
    free(*state);
    return 0;
}

static int
setup(void **state)
{
    static unsigned n;
    struct fx *f = calloc(1, sizeof(*f));
    char prefix[32];
    const char *err = NULL;
    assert_non_null(f);
    f->redis = *state;
    tu_loop_init(&f->loop);
    snprintf(prefix, sizeof(prefix), "d%u:", ++n);   /* a fresh key space */
    struct backlog_opts bo = { .redis_url = f->redis->url, .prefix = prefix,
                               .on_state = on_state, .ud = f };
    f->b = backlog_new(f->loop.base, &bo, &err);
    assert_non_null(f->b);
    f->subs = subs_new(f->b);
    f->topics = topics_new(false, 0, 0, 0);
    assert_non_null(f->subs);
    assert_non_null(f->topics);
    assert_int_equal(topics_add(f->topics, "t", TOPIC_URI, TOPIC_CHANGE, NULL, 0, 0,
                                &err), 0);
    struct fanout_opts fo = { .base = f->loop.base, .backlog = f->b,
                              .topics = f->topics };
    f->fanout = fanout_new(&fo, &err);
    assert_non_null(f->fanout);
    f->srv.http = evhttp_new(f->loop.base);
    assert_non_null(f->srv.http);
    f->srv.port = tu_httpd_listen(f->srv.http);
    evhttp_set_gencb(f->srv.http, on_cb_request, &f->srv);
    snprintf(f->url, sizeof(f->url), "http://127.0.0.1:%d", f->srv.port);
    TU_LOOP_UNTIL(&f->loop, backlog_ready(f->b), 5000);
    *state = f;
    return 0;
}

/* The deliverer under test, with o's options over the test defaults. */
static void
fx_start(struct fx *f, const struct deliver_opts *o)
{
    struct deliver_opts d = *o;
    const char *err = NULL;
    struct rs_http_opts ho = { .max_host_conns = o->host_conns ? o->host_conns : 8 };
    f->http = rs_http_new(f->loop.base, &ho);
    assert_non_null(f->http);
    d.base = f->loop.base;
    d.backlog = f->b;
    d.subs = f->subs;
    d.fanout = f->fanout;
    d.http = f->http;
    d.topics = f->topics;
    d.hub_url = HUB_URL;
    d.node_id = "node-under-test";
    if (d.lock_ttl_ms == 0)
        d.lock_ttl_ms = 1500;            /* a tick every 500 ms */
    if (d.retry_max_delay_ms == 0)
        d.retry_max_delay_ms = 100;      /* retries within the test */
    if (d.delivery_timeout_ms == 0)
        d.delivery_timeout_ms = 2000;
    f->d = deliver_new(&d, &err);
    assert_non_null(f->d);
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    struct tu_redis *r = f->redis;
    /* the order rshub keeps: stop starting, then the HTTP client and Redis
     * (their cancelled callbacks find nothing to do), then free */
    deliver_close(f->d);
    rs_http_free(f->http);
    backlog_free(f->b);
    deliver_free(f->d);
    fanout_free(f->fanout);
    deliver_free(NULL);
    subs_free(f->subs);
    topics_free(f->topics);
    evhttp_free(f->srv.http);
    tu_loop_cleanup(&f->loop);
    free(f);
    *state = r;
    return 0;
}

/* ---------------------------------------------------------------- helpers */

struct res {
    bool done;
    int rc;
    long long v;
    struct msg_id id;
    size_t n;
    char items[8][200];
};

static void
on_int(void *ud, int rc, long long v)
{
    struct res *r = ud;
    r->done = true;
    r->rc = rc;
    r->v = v;
}

static void
on_appended(void *ud, int rc, struct msg_id id)
{
    struct res *r = ud;
    r->done = true;
    r->rc = rc;
    r->id = id;
}

static void
on_load(void *ud, int rc, size_t n, const char *const *cbs,
        const char *const *recs, const struct msg_id *curs)
{
    struct res *r = ud;
    r->done = true;
    r->rc = rc;
    r->n = n;
    for (size_t i = 0; i < n && i < 8; i++) {
        char id[MSG_ID_BUFSZ];
        msg_id_format(curs[i], id);
        snprintf(r->items[i], sizeof(r->items[i]), "%s|%s|%s", cbs[i], recs[i], id);
    }
}

#define WAIT_OK(f, r)                                                       \
    do {                                                                    \
        TU_LOOP_UNTIL(&(f)->loop, (r)->done, 5000);                         \
        assert_int_equal((r)->rc, 0);                                       \
    } while (0)

/* Append body to the topic's stream (keeping max entries; 0: all). */
static struct msg_id
append(struct fx *f, const char *body, uint64_t max)
{
    struct res r = { 0 };
    assert_int_equal(backlog_append(f->b, "t", body, strlen(body), "application/xml",
                                    max, on_appended, &r), 0);
    WAIT_OK(f, &r);
    return r.id;
}

/* Hand one entry to the deliverer as the fan-out's tail would. */
static void
live(struct fx *f, struct msg_id id, const char *body)
{
    struct backlog_entry e = { .id = id, .body = body, .len = strlen(body),
                               .ctype = "application/xml", .ctype_len = 15 };
    deliver_on_entries(f->d, "t", &e, 1);
}

/* Store a subscription of path on the callback server. */
static void
subscribe(struct fx *f, const char *path, const char *secret,
          uint64_t expires_ms, struct msg_id cursor)
{
    char cb[128];
    struct res r = { 0 };
    char sec[64] = "";
    snprintf(sec, sizeof(sec), "%s", secret != NULL ? secret : "");
    struct subs_record rec = { .secret = secret != NULL ? sec : NULL,
                               .expires_ms = expires_ms, .created_ms = 1 };
    char *js = subs_record_json(&rec);
    struct subs_caps caps = { 0, 0, 60000 };
    snprintf(cb, sizeof(cb), "%s%s", f->url, path);
    assert_int_equal(subs_put(f->subs, "t", cb, js, expires_ms, cursor, "127.0.0.1",
                              &caps, on_int, &r), 0);
    rs_free(js);
    WAIT_OK(f, &r);
}

static uint64_t
far_future(void)
{
    return (uint64_t)(rs_time_now() / 1000) + 3600 * 1000;
}

static void
load(struct fx *f, struct res *r)
{
    memset(r, 0, sizeof(*r));
    assert_int_equal(subs_load(f->subs, "t", on_load, r), 0);
    WAIT_OK(f, r);
}

/* Load until the store shows what want says (a Redis write the test did
 * not wait for lands meanwhile); fails after 5 s. */
static void
load_until(struct fx *f, struct res *r, bool (*want)(const struct res *r))
{
    for (int i = 0; i < 100; i++) {
        load(f, r);
        if (want(r))
            return;
        tu_loop_run_for(&f->loop, 50);
    }
    fail_msg("the store never showed what the test waits for");
}

static bool
no_subs(const struct res *r)
{
    return r->n == 0;
}

static bool
marked_failing(const struct res *r)
{
    return r->n == 1 && strstr(r->items[0], "\"failing\"") != NULL;
}

static bool
marked_active(const struct res *r)
{
    return r->n == 1 && strstr(r->items[0], "\"active\"") != NULL;
}

static struct deliver_stats
stats(struct fx *f)
{
    struct deliver_stats st;
    deliver_stats(f->d, &st);
    return st;
}

/* The deliverer's view of each of its subscriptions of "t". */
struct infos {
    size_t n;
    struct {
        char callback[128], state[16], step[16];
        struct msg_id cursor;
        unsigned attempts;
        uint64_t delivered;
    } v[8];
};

static void
on_info(void *ud, const struct deliver_sub_info *si)
{
    struct infos *in = ud;
    if (in->n == 8)
        return;
    snprintf(in->v[in->n].callback, sizeof(in->v[0].callback), "%s", si->callback);
    snprintf(in->v[in->n].state, sizeof(in->v[0].state), "%s", si->state);
    snprintf(in->v[in->n].step, sizeof(in->v[0].step), "%s", si->step);
    in->v[in->n].cursor = si->cursor;
    in->v[in->n].attempts = si->attempts;
    in->v[in->n].delivered = si->delivered;
    in->n++;
}

static struct infos
infos(struct fx *f)
{
    struct infos in = { 0 };
    deliver_foreach(f->d, "t", on_info, &in);
    return in;
}

static void
id_str(struct msg_id id, char *buf)
{
    msg_id_format(id, buf);
}

/* ------------------------------------------------------------------ tests */

/* deliver/in_order: what the backlog holds after the cursor is posted in
 * order (a page), then live entries; each POST has the body as published,
 * its content type, the Link pair and X-Hub-Id, no signature and no gap;
 * the cursor reaches Redis within the flush; the counters agree. */
static void
test_in_order(void **state)
{
    struct fx *f = *state;
    struct deliver_opts o = { 0 };
    struct msg_id id[5];
    char want[MSG_ID_BUFSZ];
    const char *bodies[5] = { "<a/>", "<b/>", "<c/>", "<d/>", "<e/>" };
    fx_start(f, &o);
    cb_path(&f->srv, "/a");
    for (int i = 0; i < 3; i++)
        id[i] = append(f, bodies[i], 0);
    subscribe(f, "/a", NULL, far_future(), (struct msg_id){ 0, 0 });
    deliver_refresh(f->d, "t");
    TU_LOOP_UNTIL(&f->loop, f->srv.nreqs == 3 && stats(f).in_flight == 0, 5000);
    for (int i = 3; i < 5; i++) {
        id[i] = append(f, bodies[i], 0);
        live(f, id[i], bodies[i]);
    }
    TU_LOOP_UNTIL(&f->loop, stats(f).delivered == 5, 5000);
    const struct cbreq *r[8];
    assert_int_equal(cb_reqs(&f->srv, "/a", r, 8), 5);
    for (int i = 0; i < 5; i++) {
        id_str(id[i], want);
        assert_string_equal(r[i]->id, want);
        assert_string_equal(r[i]->body, bodies[i]);
        assert_string_equal(r[i]->ctype, "application/xml");
        assert_string_equal(r[i]->link, "<" HUB_URL ">; rel=\"hub\", <" TOPIC_URI
                                        ">; rel=\"self\"");
        assert_string_equal(r[i]->sig, "");
        assert_string_equal(r[i]->gap, "");
    }
    struct infos in = infos(f);
    assert_int_equal(in.n, 1);
    assert_string_equal(in.v[0].state, "active");
    assert_string_equal(in.v[0].step, "idle");
    assert_int_equal(in.v[0].delivered, 5);
    assert_int_equal(msg_id_cmp(in.v[0].cursor, id[4]), 0);
    struct deliver_stats st = stats(f);
    assert_int_equal(st.subscriptions, 1);
    assert_int_equal(st.attempts_failed, 0);
    assert_true(st.pages >= 1);
    tu_loop_run_for(&f->loop, 300);   /* the cursor flush runs every 100 ms */
    struct res l;
    load(f, &l);
    id_str(id[4], want);
    assert_int_equal(l.n, 1);
    assert_non_null(strstr(l.items[0], want));
}

/* deliver/signed: with a secret, X-Hub-Signature is the HMAC-SHA256 of the
 * exact body. */
static void
test_signed(void **state)
{
    struct fx *f = *state;
    struct deliver_opts o = { 0 };
    char sig[WEBSUBWIRE_SIG_BUFSZ];
    fx_start(f, &o);
    cb_path(&f->srv, "/s");
    append(f, "<signed/>", 0);
    subscribe(f, "/s", "k3y", far_future(), (struct msg_id){ 0, 0 });
    deliver_refresh(f->d, "t");
    TU_LOOP_UNTIL(&f->loop, stats(f).delivered == 1, 5000);
    websubwire_signature("k3y", "<signed/>", 9, sig);
    assert_string_equal(f->srv.reqs[0].sig, sig);
}

/* deliver/retry_backoff: a failing callback gets the same notification
 * again after the backoff (about 100 ms here, never at once), shows as
 * retrying while it waits, and then everything in order. */
static void
test_retry(void **state)
{
    struct fx *f = *state;
    struct deliver_opts o = { 0 };
    fx_start(f, &o);
    struct cbpath *p = cb_path(&f->srv, "/r");
    p->fail_n = 2;
    p->fail_status = 500;
    struct msg_id a = append(f, "<1/>", 0), b = append(f, "<2/>", 0);
    subscribe(f, "/r", NULL, far_future(), (struct msg_id){ 0, 0 });
    deliver_refresh(f->d, "t");
    TU_LOOP_UNTIL(&f->loop, stats(f).attempts_failed == 1, 5000);
    struct infos in = infos(f);
    assert_string_equal(in.v[0].state, "retrying");
    assert_string_equal(in.v[0].step, "retry-wait");
    assert_int_equal(in.v[0].attempts, 1);
    TU_LOOP_UNTIL(&f->loop, stats(f).delivered == 2, 5000);
    const struct cbreq *r[8];
    char ida[MSG_ID_BUFSZ], idb[MSG_ID_BUFSZ];
    id_str(a, ida);
    id_str(b, idb);
    assert_int_equal(cb_reqs(&f->srv, "/r", r, 8), 4);
    assert_string_equal(r[0]->id, ida);
    assert_string_equal(r[1]->id, ida);
    assert_string_equal(r[2]->id, ida);
    assert_string_equal(r[3]->id, idb);
    for (int i = 1; i < 3; i++)   /* 100 ms +-20 % */
        assert_true(r[i]->at - r[i - 1]->at >= 0.075);
    assert_int_equal(stats(f).attempts_failed, 2);
    in = infos(f);
    assert_string_equal(in.v[0].state, "active");
    assert_int_equal(in.v[0].attempts, 0);
}

/* deliver/resubscribe_retries_at_once: a subscription waiting out its
 * backoff (1 s here) is retried as soon as its subscriber subscribes
 * again (a restart with a new secret), not when the backoff ends; the
 * topic loaded again without a new subscribe (every lock tick) leaves
 * the backoff as it is. */
static void
test_resubscribe_retry(void **state)
{
    struct fx *f = *state;
    struct deliver_opts o = { .retry_max_delay_ms = 60000 };
    fx_start(f, &o);
    struct cbpath *p = cb_path(&f->srv, "/r");
    p->fail_n = 1;
    p->fail_status = 503;
    append(f, "<1/>", 0);
    subscribe(f, "/r", "old-secret", far_future(), (struct msg_id){ 0, 0 });
    deliver_refresh(f->d, "t");
    TU_LOOP_UNTIL(&f->loop, stats(f).attempts_failed == 1, 5000);
    assert_string_equal(infos(f).v[0].step, "retry-wait");
    /* loaded again without a new subscribe (every lock tick does): the
     * backoff stands */
    deliver_refresh(f->d, "t");
    tu_loop_run_for(&f->loop, 300);
    assert_string_equal(infos(f).v[0].step, "retry-wait");
    const struct cbreq *r[4];
    assert_int_equal(cb_reqs(&f->srv, "/r", r, 4), 1);
    subscribe(f, "/r", "new-secret", far_future(), (struct msg_id){ 0, 0 });
    deliver_refresh(f->d, "t");
    TU_LOOP_UNTIL(&f->loop, stats(f).delivered == 1, 5000);
    assert_int_equal(cb_reqs(&f->srv, "/r", r, 4), 2);
    assert_true(r[1]->at - r[0]->at < 0.5);     /* the backoff: 0.8-1.2 s */
    assert_int_equal(infos(f).v[0].attempts, 0);
}

/* deliver/gone_removes: 410 removes the subscription, from Redis too; it
 * gets nothing more. */
static void
test_gone(void **state)
{
    struct fx *f = *state;
    struct deliver_opts o = { 0 };
    fx_start(f, &o);
    cb_path(&f->srv, "/g")->status = 410;
    append(f, "<1/>", 0);
    subscribe(f, "/g", NULL, far_future(), (struct msg_id){ 0, 0 });
    deliver_refresh(f->d, "t");
    TU_LOOP_UNTIL(&f->loop, stats(f).removed_gone == 1, 5000);
    assert_int_equal(stats(f).subscriptions, 0);
    assert_int_equal(infos(f).n, 0);
    struct res l;
    load_until(f, &l, no_subs);
    live(f, append(f, "<2/>", 0), "<2/>");
    tu_loop_run_for(&f->loop, 200);
    assert_int_equal(f->srv.paths[0].hits, 1);
}

/* deliver/host_slots_healthy_first: two slots on one host; of three
 * subscriptions the third waits for a slot (host-wait); once the two
 * stalling ones have timed out they are suspect and hold one slot at
 * most, so the healthy one gets through while they keep stalling, and
 * never more than two POSTs are in flight. */
static void
test_host_slots(void **state)
{
    struct fx *f = *state;
    struct deliver_opts o = { .host_conns = 2, .delivery_timeout_ms = 300 };
    fx_start(f, &o);
    cb_path(&f->srv, "/s1")->stall = true;
    cb_path(&f->srv, "/s2")->stall = true;
    append(f, "<1/>", 0);
    subscribe(f, "/s1", NULL, far_future(), (struct msg_id){ 0, 0 });
    subscribe(f, "/s2", NULL, far_future(), (struct msg_id){ 0, 0 });
    deliver_refresh(f->d, "t");
    TU_LOOP_UNTIL(&f->loop, f->srv.nreqs == 2, 5000);
    cb_path(&f->srv, "/h");
    subscribe(f, "/h", NULL, far_future(), (struct msg_id){ 0, 0 });
    deliver_refresh(f->d, "t");
    TU_LOOP_UNTIL(&f->loop, infos(f).n == 3, 5000);
    tu_loop_run_for(&f->loop, 50);
    struct infos in = infos(f);
    for (size_t i = 0; i < 3; i++) {
        bool healthy = strstr(in.v[i].callback, "/h") != NULL;
        /* the stalled ones may have timed out and be waiting to retry */
        if (healthy)
            assert_string_equal(in.v[i].step, stats(f).delivered ? "idle" : "host-wait");
    }
    tu_loop_arm(&f->loop, 5000);
    unsigned max_inflight = 0;
    while (stats(f).delivered == 0 && !f->loop.expired) {
        event_base_loop(f->loop.base, EVLOOP_ONCE);
        if (stats(f).in_flight > max_inflight)
            max_inflight = (unsigned)stats(f).in_flight;
    }
    tu_loop_disarm(&f->loop);
    assert_int_equal(stats(f).delivered, 1);
    assert_true(max_inflight <= 2);
    assert_true(stats(f).attempts_failed >= 2);
    assert_int_equal(f->srv.paths[2].hits, 1);
}

struct info {
    bool done;
    struct backlog_info info;
};

static void
on_info_done(void *ud, int rc, const struct backlog_info *info)
{
    struct info *in = ud;
    assert_int_equal(rc, 0);
    in->info = *info;
    in->done = true;
}

/* deliver/gap_told: a subscription whose next notifications were trimmed
 * is told with X-Hub-Gap (the last id it was given) on the first delivery
 * after the gap and on every retry of it, until one is taken. */
static void
test_gap(void **state)
{
    struct fx *f = *state;
    struct deliver_opts o = { 0 };
    fx_start(f, &o);
    struct cbpath *p = cb_path(&f->srv, "/gap");
    p->fail_n = 1;
    p->fail_status = 503;
    struct msg_id first = append(f, "<0/>", 0);
    /* bounded to 3 entries, trimmed in batches once past 3 + 64: most go,
     * a few stay */
    for (int i = 0; i < 69; i++)
        append(f, "<n/>", 3);
    struct info in = { 0 };
    assert_int_equal(backlog_info(f->b, "t", on_info_done, &in), 0);
    TU_LOOP_UNTIL(&f->loop, in.done, 5000);
    size_t n = (size_t)in.info.length;
    assert_true(n >= 3 && n <= 6);
    assert_true(msg_id_cmp(in.info.mark, first) > 0);
    subscribe(f, "/gap", NULL, far_future(), first);
    deliver_refresh(f->d, "t");
    TU_LOOP_UNTIL(&f->loop, stats(f).delivered == n, 5000);
    const struct cbreq *r[8];
    char want[MSG_ID_BUFSZ], gap[MSG_ID_BUFSZ];
    id_str(first, gap);
    assert_int_equal(cb_reqs(&f->srv, "/gap", r, 8), n + 1);
    id_str(in.info.first, want);
    assert_string_equal(r[0]->id, want);
    assert_string_equal(r[0]->gap, gap);
    assert_string_equal(r[1]->id, want);   /* the retry says it again */
    assert_string_equal(r[1]->gap, gap);
    for (size_t i = 2; i < n + 1; i++)
        assert_string_equal(r[i]->gap, "");
    assert_int_equal(stats(f).gaps, 1);
}

/* deliver/expired_lease: a subscription whose lease is over gets nothing
 * and is removed by the sweep. */
static void
test_expired(void **state)
{
    struct fx *f = *state;
    struct deliver_opts o = { 0 };
    fx_start(f, &o);
    cb_path(&f->srv, "/x");
    append(f, "<1/>", 0);
    subscribe(f, "/x", NULL, (uint64_t)(rs_time_now() / 1000) - 1000,
              (struct msg_id){ 0, 0 });
    deliver_refresh(f->d, "t");
    deliver_kick(f->d);
    TU_LOOP_UNTIL(&f->loop, stats(f).removed_expired == 1, 5000);
    struct res l;
    load_until(f, &l, no_subs);
    /* a load answered before the sweep's removal may have brought it back
     * in memory: the next reload (each tick) lets it go */
    TU_LOOP_UNTIL(&f->loop, stats(f).subscriptions == 0, 5000);
    assert_int_equal(f->srv.paths[0].hits, 0);
}

/* deliver/overflow_refills: live entries that do not fit the queue (4)
 * while the callback fails are read back from the backlog; all arrive
 * once, in order. */
static void
test_overflow(void **state)
{
    struct fx *f = *state;
    struct deliver_opts o = { .queue_max = 4 };
    fx_start(f, &o);
    struct cbpath *p = cb_path(&f->srv, "/o");
    p->fail_n = 1;
    p->fail_status = 500;
    subscribe(f, "/o", NULL, far_future(), (struct msg_id){ 0, 0 });
    deliver_refresh(f->d, "t");
    TU_LOOP_UNTIL(&f->loop, stats(f).pages >= 1, 5000);   /* empty: live */
    struct msg_id id[10];
    for (int i = 0; i < 10; i++) {
        id[i] = append(f, "<o/>", 0);
        live(f, id[i], "<o/>");
    }
    TU_LOOP_UNTIL(&f->loop, stats(f).delivered == 10, 5000);
    const struct cbreq *r[16];
    assert_int_equal(cb_reqs(&f->srv, "/o", r, 16), 11);
    for (int i = 0; i < 10; i++) {
        char want[MSG_ID_BUFSZ];
        id_str(id[i], want);
        assert_string_equal(r[i + 1]->id, want);
    }
    assert_true(stats(f).pages >= 2);
}

/* deliver/lock_held_elsewhere: while another node holds the topic's
 * delivery lock this one delivers nothing; when it runs out, this one
 * takes the topic over from the stored cursor. */
static void
test_lock_elsewhere(void **state)
{
    struct fx *f = *state;
    struct deliver_opts o = { 0 };
    struct res r = { 0 };
    fx_start(f, &o);
    cb_path(&f->srv, "/l");
    assert_int_equal(subs_lock(f->subs, "t", "other-node", 800, on_int, &r), 0);
    WAIT_OK(f, &r);
    append(f, "<1/>", 0);
    subscribe(f, "/l", NULL, far_future(), (struct msg_id){ 0, 0 });
    deliver_refresh(f->d, "t");
    tu_loop_run_for(&f->loop, 400);
    assert_int_equal(f->srv.paths[0].hits, 0);
    assert_int_equal(infos(f).n, 0);
    TU_LOOP_UNTIL(&f->loop, stats(f).delivered == 1, 5000);
}

/* deliver/failing_marked: after the retry window of failures the
 * subscription is recorded failing (and still retried); a 2xx makes it
 * active again. */
static void
test_failing(void **state)
{
    struct fx *f = *state;
    struct deliver_opts o = { .retry_window_ms = 250 };
    fx_start(f, &o);
    struct cbpath *p = cb_path(&f->srv, "/f");
    p->fail_n = 5;
    p->fail_status = 500;
    append(f, "<1/>", 0);
    subscribe(f, "/f", NULL, far_future(), (struct msg_id){ 0, 0 });
    deliver_refresh(f->d, "t");
    TU_LOOP_UNTIL(&f->loop, stats(f).failing == 1, 5000);
    assert_string_equal(infos(f).v[0].state, "failing");
    struct res l;
    load_until(f, &l, marked_failing);
    TU_LOOP_UNTIL(&f->loop, stats(f).delivered == 1, 5000);
    assert_int_equal(stats(f).failing, 0);
    load_until(f, &l, marked_active);
}

/* deliver/drop_failing: with --drop-failing, the retry window over, the
 * subscription is removed instead. */
static void
test_drop_failing(void **state)
{
    struct fx *f = *state;
    struct deliver_opts o = { .retry_window_ms = 250, .drop_failing = true };
    fx_start(f, &o);
    cb_path(&f->srv, "/f")->status = 500;
    append(f, "<1/>", 0);
    subscribe(f, "/f", NULL, far_future(), (struct msg_id){ 0, 0 });
    deliver_refresh(f->d, "t");
    TU_LOOP_UNTIL(&f->loop, stats(f).removed_failing == 1, 5000);
    struct res l;
    load_until(f, &l, no_subs);
    unsigned hits = f->srv.paths[0].hits;
    tu_loop_run_for(&f->loop, 300);
    assert_int_equal(f->srv.paths[0].hits, hits);
}

/* deliver/removed_mid_post_and_page: a subscription removed (here: gone
 * from the store at a reload) while its POST and a page read are both in
 * flight, the page answered first, is freed once both are over, touches
 * nothing of its topic meanwhile, and leaves nothing behind. (A page
 * callback used to read the topic of a subscription already detached.) */
static void
test_removed_mid_flight(void **state)
{
    struct fx *f = *state;
    struct deliver_opts o = { .queue_max = 4 };
    struct res r = { 0 };
    fx_start(f, &o);
    cb_path(&f->srv, "/st")->stall = true;
    subscribe(f, "/st", NULL, far_future(), (struct msg_id){ 0, 0 });
    deliver_refresh(f->d, "t");
    TU_LOOP_UNTIL(&f->loop, stats(f).pages == 1, 5000);   /* empty: live */
    char cb[128];
    snprintf(cb, sizeof(cb), "%s/st", f->url);
    assert_int_equal(subs_remove(f->subs, "t", cb, "127.0.0.1", on_int, &r), 0);
    WAIT_OK(f, &r);
    /* In one turn: the reload (its answer removes the subscription), then
     * two live entries of which the second cannot be queued (its 4th
     * allocation fails: the bodies' array, two for the first body, the
     * second body), so the subscription posts the first and reads a page
     * after it - behind the reload on the same Redis link. */
    deliver_refresh(f->d, "t");
    uint64_t now = (uint64_t)(rs_time_now() / 1000);
    struct backlog_entry e[2] = {
        { .id = { now, 0 }, .body = "<1/>", .len = 4, .ctype = "application/xml",
          .ctype_len = 15 },
        { .id = { now, 1 }, .body = "<2/>", .len = 4, .ctype = "application/xml",
          .ctype_len = 15 },
    };
    tu_alloc_fail_at(4);
    deliver_on_entries(f->d, "t", e, 2);
    tu_alloc_fail_at(0);
    assert_int_equal(stats(f).in_flight, 1);
    TU_LOOP_UNTIL(&f->loop, stats(f).subscriptions == 0 && stats(f).in_flight == 0,
                  5000);
    assert_int_equal(stats(f).pages, 1);   /* the second: for no one */
    assert_int_equal(infos(f).n, 0);
}

int
main(void)
{
#define TD(name, fn) { name, fn, setup, teardown, NULL }
    const struct CMUnitTest tests[] = {
        TD("deliver/in_order", test_in_order),
        TD("deliver/signed", test_signed),
        TD("deliver/retry_backoff", test_retry),
        TD("deliver/resubscribe_retries_at_once", test_resubscribe_retry),
        TD("deliver/gone_removes", test_gone),
        TD("deliver/host_slots_healthy_first", test_host_slots),
        TD("deliver/gap_told", test_gap),
        TD("deliver/expired_lease", test_expired),
        TD("deliver/overflow_refills", test_overflow),
        TD("deliver/lock_held_elsewhere", test_lock_elsewhere),
        TD("deliver/failing_marked", test_failing),
        TD("deliver/drop_failing", test_drop_failing),
        TD("deliver/removed_mid_post_and_page", test_removed_mid_flight),
    };
    return cmocka_run_group_tests_name("deliver", tests, group_setup, group_teardown);
}
