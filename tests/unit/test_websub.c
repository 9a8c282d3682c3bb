/* test_websub.c - the WebSub requests of POST /hub (hub/websub.c) on a
 * real loop: a hub built from its real parts (backlog and store on a
 * private redis-server, HTTP client, network policy, deliverer) behind an
 * evhttp server, and a callback server on loopback. Subscribe: 202, the
 * verification GET, activation in the store; a wrong echo stores nothing
 * and gives the slot back; the caps (429); a denied network (403, never
 * contacted); a closed hub's unknown topic (404 and a denial notice);
 * unsubscribe; the form's 400s and what they count; a publish ping
 * fetched and appended. */
#include "testutil.h"
#include "tu_httpd.h"
#include "tu_proc.h"

#include <event2/buffer.h>
#include <event2/dns.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <string.h>

#include "backlog.h"
#include "deliver.h"
#include "fanout.h"
#include "hub.h"
#include "netpolicy.h"
#include "rs_alloc.h"
#include "rs_http.h"
#include "subs.h"
#include "topic.h"
#include "websub.h"

#define TOPIC_URI "http://t.test/t"

/* ------------------------------------------------------- callback server */

enum cb_answer {
    CB_ECHO = 0,              /* 200 with the challenge */
    CB_WRONG,                 /* 200 with something else */
};

struct cbsrv {
    struct evhttp *http;
    int port;
    enum cb_answer answer;
    unsigned gets;            /* verification and denial GETs */
    char mode[32], topic[128], challenge[80], lease[24], reason[128];
    unsigned feeds;           /* GET /feed (publish pings) */
};

static void
qcopy(char *dst, size_t n, struct evkeyvalq *q, const char *k)
{
    const char *v = evhttp_find_header(q, k);
    snprintf(dst, n, "%s", v != NULL ? v : "");
}

static void
on_cb_request(struct evhttp_request *req, void *arg)
{
    struct cbsrv *s = arg;
    const char *uri = evhttp_request_get_uri(req);
    struct evbuffer *out = evbuffer_new();
    assert_non_null(out);
    if (strcmp(uri, "/feed") == 0) {
        s->feeds++;
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                          "text/plain");
        evbuffer_add_printf(out, "pinged");
        evhttp_send_reply(req, 200, "OK", out);
        evbuffer_free(out);
        return;
    }
    struct evkeyvalq q;
    const char *query = strchr(uri, '?');
    memset(&q, 0, sizeof(q));
    assert_int_equal(evhttp_parse_query_str(query != NULL ? query + 1 : "", &q), 0);
    s->gets++;
    qcopy(s->mode, sizeof(s->mode), &q, "hub.mode");
    qcopy(s->topic, sizeof(s->topic), &q, "hub.topic");
    qcopy(s->challenge, sizeof(s->challenge), &q, "hub.challenge");
    qcopy(s->lease, sizeof(s->lease), &q, "hub.lease_seconds");
    qcopy(s->reason, sizeof(s->reason), &q, "hub.reason");
    evhttp_clear_headers(&q);
    evbuffer_add_printf(out, "%s", s->answer == CB_ECHO ? s->challenge : "nope");
    evhttp_send_reply(req, 200, "OK", out);
    evbuffer_free(out);
}

/* ---------------------------------------------------------------- fixture */

struct fx {
    struct tu_redis *redis;
    struct tu_loop loop;
    struct hub_conf conf;
    struct hub h;
    struct evhttp *front;     /* the hub's POST /hub */
    int front_port;
    struct rs_http *client;   /* the subscriber's requests */
    struct cbsrv cb;
    char cb_url[64];
};

static void
on_state(void *ud, const char *which, enum rs_redis_state st, const char *err)
{
    struct fx *f = ud;
    (void)err;
    if (strcmp(which, "command") == 0 && st == RS_REDIS_READY)
        subs_on_ready(f->h.subs);
}

static void
on_front(struct evhttp_request *req, void *arg)
{
    struct fx *f = arg;
    websub_handle(f->h.websub, req);
}

static bool
on_addr_ok(void *ud, const struct sockaddr *sa)
{
    return netpolicy_permits(ud, sa);
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

/* A hub: open (topics learnt) unless closed; caps per topic. */
static void
fx_start(struct fx *f, bool closed, long long per_topic)
{
    static unsigned n;
    char prefix[32];
    const char *err = NULL;
    struct hub *h = &f->h;
    f->conf.lease_min_ms = 60000;
    f->conf.lease_max_ms = 86400000;
    f->conf.lease_default_ms = 3600000;
    f->conf.verify_timeout_ms = 2000;
    f->conf.redis_timeout_ms = 2000;
    f->conf.max_subs_per_topic = per_topic;
    f->conf.max_body = 1 << 20;
    h->conf = &f->conf;
    h->base = f->loop.base;
    snprintf(prefix, sizeof(prefix), "w%u:", ++n);
    struct backlog_opts bo = { .redis_url = f->redis->url, .prefix = prefix,
                               .on_state = on_state, .ud = f };
    h->backlog = backlog_new(h->base, &bo, &err);
    h->subs = subs_new(h->backlog);
    h->topics = topics_new(!closed, 0, 0, 0);
    assert_non_null(h->backlog);
    assert_non_null(h->subs);
    assert_non_null(h->topics);
    if (closed)
        assert_int_equal(topics_add(h->topics, "t", TOPIC_URI, TOPIC_CHANGE, NULL,
                                    0, 0, &err), 0);
    h->np = netpolicy_new();
    assert_int_equal(netpolicy_allow(h->np, "127.0.0.0/8"), 0);
    struct rs_http_opts ho = { .addr_ok = on_addr_ok, .addr_ud = h->np };
    h->httpc = rs_http_new(h->base, &ho);
    h->dns = evdns_base_new(h->base, 0);   /* no resolver: literals only */
    struct fanout_opts fo = { .base = h->base, .backlog = h->backlog,
                              .topics = h->topics };
    h->fanout = fanout_new(&fo, &err);
    struct deliver_opts dopts = { .base = h->base, .backlog = h->backlog,
                                  .subs = h->subs, .fanout = h->fanout,
                                  .http = h->httpc, .topics = h->topics,
                                  .hub_url = "http://hub.test/hub",
                                  .node_id = "websub-test" };
    h->deliver = deliver_new(&dopts, &err);
    h->websub = websub_new(h);
    assert_non_null(h->httpc);
    assert_non_null(h->dns);
    assert_non_null(h->fanout);
    assert_non_null(h->deliver);
    assert_non_null(h->websub);
    f->front = evhttp_new(h->base);
    f->front_port = tu_httpd_listen(f->front);
    evhttp_set_gencb(f->front, on_front, f);
    f->cb.http = evhttp_new(h->base);
    f->cb.port = tu_httpd_listen(f->cb.http);
    evhttp_set_gencb(f->cb.http, on_cb_request, &f->cb);
    snprintf(f->cb_url, sizeof(f->cb_url), "http://127.0.0.1:%d/cb", f->cb.port);
    f->client = rs_http_new(h->base, NULL);
    assert_non_null(f->client);
    TU_LOOP_UNTIL(&f->loop, backlog_ready(h->backlog), 5000);
}

static int
setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->redis = *state;
    tu_loop_init(&f->loop);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    struct tu_redis *r = f->redis;
    struct hub *h = &f->h;
    rs_http_free(f->client);
    deliver_close(h->deliver);
    rs_http_free(h->httpc);
    evdns_base_free(h->dns, 1);
    backlog_free(h->backlog);
    deliver_free(h->deliver);
    fanout_free(h->fanout);
    websub_free(h->websub);
    websub_free(NULL);
    subs_free(h->subs);
    topics_free(h->topics);
    netpolicy_free(h->np);
    evhttp_free(f->front);
    evhttp_free(f->cb.http);
    tu_loop_cleanup(&f->loop);
    free(f);
    *state = r;
    return 0;
}

/* ---------------------------------------------------------------- helpers */

struct answer {
    bool done;
    long status;
    char body[256];
    char retry_after[16];
};

static void
on_answer(void *ud, struct rs_http_req *req, const struct rs_http_result *res)
{
    struct answer *a = ud;
    const char *ra = rs_http_req_header(req, "Retry-After");
    a->done = true;
    a->status = res->rc == 0 ? res->status : 0;
    snprintf(a->body, sizeof(a->body), "%.*s", (int)res->body_len,
             res->body != NULL ? res->body : "");
    snprintf(a->retry_after, sizeof(a->retry_after), "%s", ra != NULL ? ra : "");
}

/* POST form to the hub; its answer. */
static struct answer
post(struct fx *f, const char *form)
{
    struct answer a = { 0 };
    char url[64];
    const char *hdrs[] = { "Content-Type: application/x-www-form-urlencoded", NULL };
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/hub", f->front_port);
    struct rs_http_req_opts ro = { .method = "POST", .url = url, .headers = hdrs,
                                   .body = form, .body_len = strlen(form),
                                   .on_done = on_answer, .ud = &a };
    assert_int_equal(rs_http_request(f->client, &ro, NULL), 0);
    TU_LOOP_UNTIL(&f->loop, a.done, 5000);
    return a;
}

static struct answer
subscribe(struct fx *f, const char *mode, const char *callback, const char *extra)
{
    char form[512];
    snprintf(form, sizeof(form), "hub.mode=%s&hub.topic=%s&hub.callback=%s%s",
             mode, TOPIC_URI, callback, extra != NULL ? extra : "");
    return post(f, form);
}

struct loaded {
    bool done;
    int rc;
    size_t n;
    char cb[128], rec[256];
};

static void
on_load(void *ud, int rc, size_t n, const char *const *cbs,
        const char *const *recs, const struct msg_id *curs)
{
    struct loaded *l = ud;
    (void)curs;
    l->done = true;
    l->rc = rc;
    l->n = n;
    if (n > 0) {
        snprintf(l->cb, sizeof(l->cb), "%s", cbs[0]);
        snprintf(l->rec, sizeof(l->rec), "%s", recs[0]);
    }
}

/* The store's subscriptions of the topic (its name as the hub derived it). */
static struct loaded
stored(struct fx *f)
{
    struct loaded l = { 0 };
    const struct topic *t = topics_by_uri(f->h.topics, TOPIC_URI);
    assert_non_null(t);
    assert_int_equal(subs_load(f->h.subs, t->name, on_load, &l), 0);
    TU_LOOP_UNTIL(&f->loop, l.done, 5000);
    assert_int_equal(l.rc, 0);
    return l;
}

/* Load until the store holds n of the topic's subscriptions (the
 * activation the test did not wait for lands meanwhile); fails after 5 s. */
static struct loaded
stored_n(struct fx *f, size_t n)
{
    for (int i = 0; i < 100; i++) {
        struct loaded l = stored(f);
        if (l.n == n)
            return l;
        tu_loop_run_for(&f->loop, 50);
    }
    fail_msg("the store never held %zu subscriptions", n);
    return stored(f);
}

static struct websub_stats
wstats(struct fx *f)
{
    struct websub_stats st;
    websub_stats(f->h.websub, &st);
    return st;
}

/* ------------------------------------------------------------------ tests */

/* websub/subscribe_verified: 202 at once; the callback is asked with the
 * topic, a challenge and the lease the hub picked (clamped to its
 * minimum); on the echo the subscription is stored with its secret and
 * lease. */
static void
test_subscribe(void **state)
{
    struct fx *f = *state;
    fx_start(f, false, 0);
    struct answer a = subscribe(f, "subscribe", f->cb_url,
                                "&hub.secret=s3&hub.lease_seconds=5");
    assert_int_equal(a.status, 202);
    assert_string_equal(a.body, "accepted: verifying intent at the callback\n");
    TU_LOOP_UNTIL(&f->loop, wstats(f).verified == 1, 5000);
    assert_string_equal(f->cb.mode, "subscribe");
    assert_string_equal(f->cb.topic, TOPIC_URI);
    assert_int_equal(strlen(f->cb.challenge), 32);
    assert_string_equal(f->cb.lease, "60");
    struct loaded l = stored_n(f, 1);
    assert_string_equal(l.cb, f->cb_url);
    assert_non_null(strstr(l.rec, "\"secret\":\"s3\""));
    assert_non_null(strstr(l.rec, "\"state\":\"active\""));
    assert_int_equal(wstats(f).requests, 1);
    assert_int_equal(wstats(f).denied, 0);
}

/* websub/wrong_echo: a callback that does not echo the challenge is not
 * subscribed, and its slot under the cap is given back at once. */
static void
test_wrong_echo(void **state)
{
    struct fx *f = *state;
    fx_start(f, false, 1);
    f->cb.answer = CB_WRONG;
    assert_int_equal(subscribe(f, "subscribe", f->cb_url, NULL).status, 202);
    TU_LOOP_UNTIL(&f->loop, wstats(f).verify_failed == 1, 5000);
    assert_int_equal(stored(f).n, 0);
    f->cb.answer = CB_ECHO;
    char other[80];
    snprintf(other, sizeof(other), "%s2", f->cb_url);
    /* the cap is 1: this gets the slot only if the first one's was given
     * back (before the failure was counted) */
    assert_int_equal(subscribe(f, "subscribe", other, NULL).status, 202);
    TU_LOOP_UNTIL(&f->loop, wstats(f).verified == 1, 5000);
}

/* websub/caps_429: over --max-subs-per-topic, a request is refused at
 * once with 429 and counted; the callback is never asked. */
static void
test_caps(void **state)
{
    struct fx *f = *state;
    fx_start(f, false, 1);
    assert_int_equal(subscribe(f, "subscribe", f->cb_url, NULL).status, 202);
    stored_n(f, 1);
    char other[80];
    snprintf(other, sizeof(other), "%s2", f->cb_url);
    unsigned gets = f->cb.gets;
    struct answer a = subscribe(f, "subscribe", other, NULL);
    assert_int_equal(a.status, 429);
    assert_string_equal(a.body, "error: subscription limit reached (per topic)\n");
    assert_int_equal(wstats(f).denied, 1);
    /* a renewal of the stored one takes no slot */
    assert_int_equal(subscribe(f, "subscribe", f->cb_url, NULL).status, 202);
    TU_LOOP_UNTIL(&f->loop, wstats(f).verified == 2, 5000);
    assert_int_equal(f->cb.gets, gets + 1);
}

/* websub/denied_network: a callback in a denied network is refused (403)
 * and never contacted. */
static void
test_denied_network(void **state)
{
    struct fx *f = *state;
    fx_start(f, false, 0);
    struct answer a = subscribe(f, "subscribe", "http://10.1.2.3/cb", NULL);
    assert_int_equal(a.status, 403);
    assert_string_equal(a.body, "error: callback address 10.1.2.3 is in a denied "
                                "network\n");
    a = subscribe(f, "subscribe", "http://[::1]/cb", NULL);
    assert_int_equal(a.status, 403);
    assert_int_equal(wstats(f).denied, 2);
    assert_int_equal(f->cb.gets, 0);
}

/* websub/unknown_topic_told: a closed hub answers 404 for a topic it does
 * not carry and, the callback being permitted, tells it (hub.mode=denied). */
static void
test_unknown_topic(void **state)
{
    struct fx *f = *state;
    char form[256];
    fx_start(f, true, 0);
    snprintf(form, sizeof(form), "hub.mode=subscribe&hub.topic=http://other.test/"
             "&hub.callback=%s", f->cb_url);
    struct answer a = post(f, form);
    assert_int_equal(a.status, 404);
    assert_string_equal(a.body, "error: unknown topic http://other.test/\n");
    TU_LOOP_UNTIL(&f->loop, f->cb.gets == 1, 5000);
    assert_string_equal(f->cb.mode, "denied");
    assert_string_equal(f->cb.topic, "http://other.test/");
    assert_string_equal(f->cb.reason, "unknown topic");
}

/* websub/unsubscribe: verified like a subscribe (no lease), it removes
 * the stored subscription. */
static void
test_unsubscribe(void **state)
{
    struct fx *f = *state;
    fx_start(f, false, 0);
    assert_int_equal(subscribe(f, "subscribe", f->cb_url, NULL).status, 202);
    stored_n(f, 1);
    assert_int_equal(subscribe(f, "unsubscribe", f->cb_url, NULL).status, 202);
    stored_n(f, 0);
    assert_string_equal(f->cb.mode, "unsubscribe");
    assert_string_equal(f->cb.lease, "");
}

/* websub/form_errors: a form that breaks a rule is 400 with its reason
 * and counted as refused; one that is not a form is 400 and not counted. */
static void
test_form_errors(void **state)
{
    struct fx *f = *state;
    fx_start(f, false, 0);
    struct answer a = post(f, "hub.mode=subscribe&hub.topic=x");
    assert_int_equal(a.status, 400);
    assert_string_equal(a.body, "error: missing hub.callback\n");
    a = post(f, "hub.mode=subscribe&hub.topic=x%00&hub.callback=http://c.test/");
    assert_string_equal(a.body, "error: the form holds a NUL byte\n");
    assert_int_equal(wstats(f).denied, 2);
    a = post(f, "hub.mode");
    assert_int_equal(a.status, 400);
    assert_string_equal(a.body, "error: malformed form body\n");
    a = post(f, "hub.mode=publish&hub.url=ftp://x.test/");
    assert_int_equal(a.status, 400);
    assert_string_equal(a.body, "error: hub.url must be an absolute http(s) URL\n");
    assert_int_equal(wstats(f).denied, 2);
    assert_int_equal(wstats(f).requests, 4);
    assert_int_equal(f->cb.gets, 0);
}

/* websub/publish_ping: hub.mode=publish fetches the topic URL and appends
 * what came back to its stream. */
static void
test_publish_ping(void **state)
{
    struct fx *f = *state;
    char form[256], feed[64];
    fx_start(f, false, 0);
    snprintf(feed, sizeof(feed), "http://127.0.0.1:%d/feed", f->cb.port);
    snprintf(form, sizeof(form), "hub.mode=publish&hub.url=%s", feed);
    struct answer a = post(f, form);
    assert_int_equal(a.status, 202);
    assert_string_equal(a.body, "accepted: fetching 1 topic\n");
    TU_LOOP_UNTIL(&f->loop, wstats(f).pings == 1, 5000);
    assert_int_equal(f->cb.feeds, 1);
    assert_int_equal(wstats(f).ping_failed, 0);
}

int
main(void)
{
#define TW(name, fn) { name, fn, setup, teardown, NULL }
    const struct CMUnitTest tests[] = {
        TW("websub/subscribe_verified", test_subscribe),
        TW("websub/wrong_echo", test_wrong_echo),
        TW("websub/caps_429", test_caps),
        TW("websub/denied_network", test_denied_network),
        TW("websub/unknown_topic_told", test_unknown_topic),
        TW("websub/unsubscribe", test_unsubscribe),
        TW("websub/form_errors", test_form_errors),
        TW("websub/publish_ping", test_publish_ping),
    };
    return cmocka_run_group_tests_name("websub", tests, group_setup, group_teardown);
}
