/* test_source_push.c - the durable outbox (source/push.c) against a small
 * programmable hub on loopback (an evhttp server on the same loop that
 * answers from a script): batching into one document, the headers of a
 * publish, retries on 503 with the same document, splitting on 413,
 * stopping on 403 and resuming, order, and the watermark that advances
 * only on 2xx; X-Publish-Id on every POST, its KEY kept in the state,
 * and resends after a restart cut so that none spans a SEQ the hub may
 * hold. Each test runs the loop under a watchdog. */
#include "testutil.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "changelog.h"
#include "channels.h"
#include "docs.h"
#include "push.h"
#include "rs_http.h"
#include "rs_pubid.h"
#include "serve.h"
#include "state.h"

#define BASE "http://src.example/"
#define TOPIC BASE "resourcesync/changes"
#define MAXPOSTS 16
#define SCRIPT_DUP 1202

struct post {
    int status;               /* what the fake hub answered */
    int entries;              /* <url> elements in the body */
    char link[512];
    char auth[128];
    char ctype[64];
    char first_loc[256];
    char pubid[128];          /* X-Publish-Id */
};

struct fx {
    char *dir;
    char db[4200];
    struct state *st;
    struct docs *docs;
    struct changelog *cl;
    struct event_base *base;
    struct evhttp *srv;
    int port;
    char hub[64];
    struct rs_http *http;
    struct push *push;
    int script[MAXPOSTS];     /* statuses to answer, in order; then 202;
                                 SCRIPT_DUP: 202 with X-Hub-Duplicate */
    int nscript;
    struct post posts[MAXPOSTS];
    int nposts;
    struct event *poll, *watchdog;
    int64_t want_pushed;      /* stop the loop once the watermark is here */
    int want_posts;           /* ...or once this many POSTs came */
    int npaths;
};

static void
on_hub(struct evhttp_request *req, void *arg)
{
    struct fx *f = arg;
    struct post *p = &f->posts[f->nposts < MAXPOSTS ? f->nposts : MAXPOSTS - 1];
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    const char *h;
    memset(p, 0, sizeof(*p));
    h = evhttp_find_header(in, "Link");
    snprintf(p->link, sizeof(p->link), "%s", h != NULL ? h : "");
    h = evhttp_find_header(in, "Authorization");
    snprintf(p->auth, sizeof(p->auth), "%s", h != NULL ? h : "");
    h = evhttp_find_header(in, "Content-Type");
    snprintf(p->ctype, sizeof(p->ctype), "%s", h != NULL ? h : "");
    h = evhttp_find_header(in, "X-Publish-Id");
    snprintf(p->pubid, sizeof(p->pubid), "%s", h != NULL ? h : "");
    struct evbuffer *b = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(b);
    char *body = calloc(1, n + 1);
    evbuffer_copyout(b, body, n);
    for (const char *q = strstr(body, "<url>"); q != NULL;
         q = strstr(q + 1, "<url>"))
        p->entries++;
    const char *loc = strstr(body, "<loc>");
    if (loc != NULL)
        snprintf(p->first_loc, sizeof(p->first_loc), "%.*s",
                 (int)strcspn(loc + 5, "<"), loc + 5);
    free(body);
    p->status = f->nposts < f->nscript ? f->script[f->nposts] : 202;
    f->nposts++;
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    if (p->status == 503)
        evhttp_add_header(out, "Retry-After", "0");
    if (p->status == SCRIPT_DUP) {
        evhttp_add_header(out, "X-Hub-Duplicate", "1");
        p->status = 202;
    }
    if (p->status == 202)
        evhttp_add_header(out, "X-Hub-Id", "1-0");
    evhttp_send_reply(req, p->status, "Scripted", NULL);
}

static int64_t
pushed(struct fx *f)
{
    int64_t v = 0;
    if (state_meta_get(f->st, "push.change", &v) != 0)
        return -1;
    return v;
}

static void
on_poll(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct fx *f = arg;
    if ((f->want_pushed > 0 && pushed(f) >= f->want_pushed) ||
        (f->want_posts > 0 && f->nposts >= f->want_posts))
        event_base_loopbreak(f->base);
}

static void
on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(((struct fx *)arg)->base);
}

/* Run the loop until the watermark reaches want_pushed or want_posts
 * POSTs came (0: not waited for), at most ms. */
static void
fx_run_ms(struct fx *f, int64_t want_pushed, int want_posts, int ms)
{
    f->want_pushed = want_pushed;
    f->want_posts = want_posts;
    struct timeval wd = { ms / 1000, (ms % 1000) * 1000 }, tick = { 0, 2000 };
    evtimer_add(f->watchdog, &wd);
    event_add(f->poll, &tick);
    event_base_dispatch(f->base);
    evtimer_del(f->watchdog);
    event_del(f->poll);
}

static void
fx_run(struct fx *f, int64_t want_pushed, int want_posts)
{
    fx_run_ms(f, want_pushed, want_posts, 5000);
}

static void
fx_push(struct fx *f, const char *hub, const char *token)
{
    struct push_opts po = {
        .base = f->base, .http = f->http, .st = f->st, .docs = f->docs,
        .hub = hub, .topic = { TOPIC, BASE "resourcesync/framework" },
        .token = token, .batch_ms = 5, .retry_max_ms = 200,
        .max_bytes = RS_MAX_DOC_BYTES, .timeout_ms = 2000,
    };
    const char *err;
    f->push = push_new(&po, &err);
    assert_non_null(f->push);
}

static int
fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    f->dir = tu_mkdtemp();
    snprintf(f->db, sizeof(f->db), "%s/state.db", f->dir);
    char err[256];
    if (state_open(f->db, false, &f->st, err, sizeof(err)) != 0)
        fail_msg("state_open: %s", err);
    const char *e;
    f->docs = docs_new(BASE, &e);
    struct changelog_opts co = { .max_entries = 1000 };
    f->cl = changelog_new(f->st, &co, rs_time_now(), &e);
    f->base = event_base_new();
    f->srv = evhttp_new(f->base);
    evhttp_set_gencb(f->srv, on_hub, f);
    struct evhttp_bound_socket *bs =
        evhttp_bind_socket_with_handle(f->srv, "127.0.0.1", 0);
    assert_non_null(bs);
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    assert_int_equal(getsockname(evhttp_bound_socket_get_fd(bs),
                                 (struct sockaddr *)&sa, &sl), 0);
    f->port = ntohs(sa.sin_port);
    snprintf(f->hub, sizeof(f->hub), "http://127.0.0.1:%d/hub", f->port);
    f->http = rs_http_new(f->base, NULL);
    f->poll = event_new(f->base, -1, EV_PERSIST, on_poll, f);
    f->watchdog = evtimer_new(f->base, on_watchdog, f);
    assert_non_null(f->docs);
    assert_non_null(f->cl);
    assert_non_null(f->http);
    *state = f;
    return 0;
}

static int
fx_teardown(void **state)
{
    struct fx *f = *state;
    rs_http_free(f->http);       /* completes what is in flight first */
    push_free(f->push);
    evhttp_free(f->srv);
    event_free(f->poll);
    event_free(f->watchdog);
    /* bufferevents are finalized from the loop: one more turn */
    event_base_loop(f->base, EVLOOP_NONBLOCK);
    assert_int_equal(event_base_get_num_events(f->base,
                                               EVENT_BASE_COUNT_ADDED), 0);
    event_base_free(f->base);
    changelog_free(f->cl);
    docs_free(f->docs);
    state_free(f->st);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* Record n changes (p0, p1, ...) in one transaction. */
static void
fx_changes(struct fx *f, int n)
{
    assert_int_equal(state_begin(f->st), 0);
    for (int i = 0; i < n; i++) {
        char p[32];
        snprintf(p, sizeof(p), "p%d", f->npaths++);
        struct state_change c = { .path = p, .change = RS_CHANGE_CREATED,
                                  .size = 1, .type = "text/plain",
                                  .lastmod = rs_time_now() };
        assert_int_equal(changelog_record(f->cl, &c, rs_time_now()), 0);
    }
    assert_int_equal(state_commit(f->st), 0);
}

/* push/batched_in_order: changes committed together go out as one
 * changelist-notification with the publish headers of docs/protocol.md
 * 3; later ones in the next POST; the watermark follows each 202. */
static void
test_batched(void **state)
{
    struct fx *f = *state;
    fx_push(f, f->hub, "t0ken");
    assert_int_equal(pushed(f), 0);
    fx_changes(f, 3);
    push_kick(f->push);
    fx_run(f, 3, 0);
    assert_int_equal(pushed(f), 3);
    assert_int_equal(f->nposts, 1);
    assert_int_equal(f->posts[0].entries, 3);
    assert_string_equal(f->posts[0].first_loc, BASE "p0");
    assert_string_equal(f->posts[0].ctype, "application/xml");
    assert_string_equal(f->posts[0].auth, "Bearer t0ken");
    char want[256];
    snprintf(want, sizeof(want), "<%s>; rel=\"self\", <%s>; rel=\"hub\"",
             TOPIC, f->hub);
    assert_string_equal(f->posts[0].link, want);
    fx_changes(f, 2);
    push_kick(f->push);
    fx_run(f, 5, 0);
    assert_int_equal(f->nposts, 2);
    assert_int_equal(f->posts[1].entries, 2);
    assert_string_equal(f->posts[1].first_loc, BASE "p3");
    assert_true(push_idle(f->push));
    struct push_stats ps;
    push_get_stats(f->push, &ps);
    assert_int_equal(ps.accepted_docs, 2);
    assert_int_equal(ps.accepted_entries, 5);
    assert_int_equal(ps.backlog[PUSH_CHANGE], 0);
    assert_int_equal(ps.latency_n, 5);
    assert_true(push_latency_quantile(f->push, 0.5) >= 0);
}

/* push/retry_same_document: 503 (and Retry-After) are retried with the
 * same entries until accepted; the watermark moves only then. */
static void
test_retry(void **state)
{
    struct fx *f = *state;
    f->script[0] = 503;
    f->script[1] = 500;
    f->nscript = 2;
    fx_push(f, f->hub, NULL);
    fx_changes(f, 4);
    push_kick(f->push);
    fx_run(f, 0, 1);
    assert_int_equal(pushed(f), 0);
    fx_run(f, 4, 0);
    assert_int_equal(pushed(f), 4);
    assert_int_equal(f->nposts, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(f->posts[i].entries, 4);
        assert_string_equal(f->posts[i].first_loc, BASE "p0");
        assert_string_equal(f->posts[i].auth, "");
    }
    struct push_stats ps;
    push_get_stats(f->push, &ps);
    assert_int_equal(ps.retries, 2);
    assert_int_equal(ps.failures, 2);
}

/* push/split_on_413: a notification the hub finds too big is sent again
 * in halves, in order. */
static void
test_413(void **state)
{
    struct fx *f = *state;
    f->script[0] = 413;
    f->nscript = 1;
    fx_push(f, f->hub, NULL);
    fx_changes(f, 10);
    push_kick(f->push);
    fx_run(f, 10, 0);
    assert_int_equal(pushed(f), 10);
    assert_int_equal(f->nposts, 3);
    assert_int_equal(f->posts[0].entries, 10);
    assert_int_equal(f->posts[1].entries, 5);
    assert_string_equal(f->posts[1].first_loc, BASE "p0");
    assert_int_equal(f->posts[2].entries, 5);
    assert_string_equal(f->posts[2].first_loc, BASE "p5");
}

/* push/stop_on_403: a refusal stops the topic (no retry storm), keeps
 * the outbox, and push_resume (SIGHUP) tries again. */
static void
test_403(void **state)
{
    struct fx *f = *state;
    f->script[0] = 403;
    f->nscript = 1;
    fx_push(f, f->hub, "wrong");
    fx_changes(f, 2);
    push_kick(f->push);
    fx_run(f, 0, 1);
    fx_run_ms(f, 0, 2, 500);         /* nothing more comes: the watchdog */
    assert_int_equal(f->nposts, 1);
    assert_int_equal(pushed(f), 0);
    struct push_stats ps;
    push_get_stats(f->push, &ps);
    assert_true(ps.stopped[PUSH_CHANGE]);
    assert_int_equal(ps.backlog[PUSH_CHANGE], 2);
    push_resume(f->push);
    fx_run(f, 2, 0);
    assert_int_equal(pushed(f), 2);
    assert_int_equal(f->nposts, 2);
}

/* push/hub_down_then_up: with nothing listening the outbox waits;
 * once the hub answers it drains in order. */
static void
test_hub_down(void **state)
{
    struct fx *f = *state;
    fx_push(f, "http://127.0.0.1:1/hub", NULL);
    fx_changes(f, 3);
    push_kick(f->push);
    fx_run_ms(f, 0, 1, 500);         /* nothing can arrive: watchdog */
    assert_int_equal(pushed(f), 0);
    struct push_stats ps;
    push_get_stats(f->push, &ps);
    assert_true(ps.retries >= 1);
    /* a restart pointed at a working hub sends what was queued */
    rs_http_free(f->http);
    push_free(f->push);
    f->http = rs_http_new(f->base, NULL);
    fx_push(f, f->hub, NULL);
    push_kick(f->push);
    fx_run(f, 3, 0);
    assert_int_equal(pushed(f), 3);
    assert_int_equal(f->posts[0].entries, 3);
}

/* "KEY:SEQ" of post i: the SEQ, and the KEY into key (64 + 1). */
static long long
post_seq(struct fx *f, int i, char *key)
{
    const char *v = f->posts[i].pubid;
    const char *c = strchr(v, ':');
    if (c == NULL)
        fail_msg("post %d has no X-Publish-Id KEY:SEQ (\"%s\")", i, v);
    snprintf(key, 65, "%.*s", (int)(c - v), v);
    return strtoll(c + 1, NULL, 10);
}

/* Stop as if killed: the POST in flight is dropped, nothing is recorded
 * after it (rs_http_free cancels it), then start again on the same state. */
static void
fx_restart(struct fx *f, const char *hub)
{
    rs_http_free(f->http);
    push_free(f->push);
    f->http = rs_http_new(f->base, NULL);
    assert_non_null(f->http);
    fx_push(f, hub, NULL);
}

/* push/publish_id: every POST says X-Publish-Id: KEY:SEQ, SEQ the last
 * seq it carries; the KEY is drawn once, kept in the state across
 * restarts, and each topic has its own; a duplicate answer (202 with
 * X-Hub-Duplicate) moves the watermark like any 2xx. */
static void
test_publish_id(void **state)
{
    struct fx *f = *state;
    char key[65], key2[65], stored[80];
    f->script[0] = 202;
    f->script[1] = SCRIPT_DUP;
    f->nscript = 2;
    fx_push(f, f->hub, NULL);
    fx_changes(f, 3);
    push_kick(f->push);
    fx_run(f, 3, 0);
    assert_int_equal(post_seq(f, 0, key), 3);
    assert_int_equal(strlen(key), RS_PUBID_NEWKEY_LEN);
    assert_int_equal(state_meta_get_text(f->st, "push.change.key", stored,
                                         sizeof(stored)), 0);
    assert_string_equal(stored, key);
    assert_int_equal(state_meta_get_text(f->st, "push.framework.key", stored,
                                         sizeof(stored)), 0);
    assert_string_not_equal(stored, key);
    fx_changes(f, 2);
    push_kick(f->push);
    fx_run(f, 5, 0);
    assert_int_equal(pushed(f), 5);    /* the duplicate answer: accepted */
    assert_int_equal(post_seq(f, 1, key2), 5);
    assert_string_equal(key2, key);
    fx_restart(f, f->hub);
    fx_changes(f, 1);
    push_kick(f->push);
    fx_run(f, 6, 0);
    assert_int_equal(f->nposts, 3);
    assert_int_equal(post_seq(f, 2, key2), 6);
    assert_string_equal(key2, key);
}

/* push/resend_never_spans: a 413 halves a batch of 10 to 5; the hub
 * stores those 5 but the process dies before its 202 is recorded (here:
 * 504, then a restart). After the restart, with 5 more changes waiting,
 * the first POST ends at 5 again (a duplicate for the hub), then 10, then
 * 15: none spans a SEQ the hub may hold, so none stores a change twice.
 * (Sent as one batch, 1..15 with SEQ 15, it would be stored whole.) */
static void
test_resend_never_spans(void **state)
{
    struct fx *f = *state;
    char key[65];
    f->script[0] = 413;
    f->script[1] = 504;
    f->script[2] = SCRIPT_DUP;
    f->nscript = 3;
    fx_push(f, f->hub, NULL);
    fx_changes(f, 10);
    push_kick(f->push);
    fx_run(f, 0, 2);
    assert_int_equal(f->nposts, 2);
    assert_int_equal(post_seq(f, 0, key), 10);
    assert_int_equal(f->posts[1].entries, 5);
    assert_int_equal(post_seq(f, 1, key), 5);
    assert_int_equal(pushed(f), 0);
    fx_restart(f, f->hub);
    fx_changes(f, 5);
    push_kick(f->push);
    fx_run(f, 15, 0);
    assert_int_equal(pushed(f), 15);
    assert_int_equal(f->nposts, 5);
    assert_int_equal(post_seq(f, 2, key), 5);
    assert_int_equal(f->posts[2].entries, 5);
    assert_string_equal(f->posts[2].first_loc, BASE "p0");
    assert_int_equal(post_seq(f, 3, key), 10);
    assert_int_equal(f->posts[3].entries, 5);
    assert_string_equal(f->posts[3].first_loc, BASE "p5");
    assert_int_equal(post_seq(f, 4, key), 15);
    assert_int_equal(f->posts[4].entries, 5);
    assert_string_equal(f->posts[4].first_loc, BASE "p10");
    /* every mark passed: the next batch is whole again */
    char marks[64];
    assert_int_equal(state_meta_get_text(f->st, "push.change.sent", marks,
                                         sizeof(marks)), 0);
    assert_string_equal(marks, "");
}

/* push/no_hub: without a hub the watermark just follows the change log;
 * the _free functions take NULL. */
static void
test_no_hub(void **state)
{
    struct fx *f = *state;
    fx_push(f, NULL, NULL);
    fx_changes(f, 3);
    push_kick(f->push);
    assert_int_equal(pushed(f), 3);
    assert_int_equal(f->nposts, 0);
    push_free(NULL);
    channels_free(NULL);
    serve_free(NULL);
}

#define TP(name, fn) { name, fn, fx_setup, fx_teardown, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TP("push/batched_in_order", test_batched),
        TP("push/retry_same_document", test_retry),
        TP("push/split_on_413", test_413),
        TP("push/stop_on_403", test_403),
        TP("push/hub_down_then_up", test_hub_down),
        TP("push/publish_id", test_publish_id),
        TP("push/resend_never_spans", test_resend_never_spans),
        TP("push/no_hub", test_no_hub),
    };
    return cmocka_run_group_tests_name("source_push", tests, NULL, NULL);
}
