/* test_sub_hubsub.c - subscriber/hubsub.c (rssub as a WebSub subscriber)
 * against a REAL rshub and a private redis-server, both started from this
 * build tree on loopback in a temp dir and stopped by PID (tu_hub.h):
 * subscribe -> verified -> publish -> the exact bytes; forged and missing
 * signatures; 503 and redelivery; unsubscribe and 410; renewal under short
 * leases; a hub that is down at subscribe time; the probe of a hub that goes
 * down and comes back. A scripted hub on the test's own
 * loop covers what rshub will not do on demand: 4xx/429/5xx answers, no
 * verification, a lease that runs out, a known secret (signature variants),
 * a readiness page that says 503 or is missing; callback ids derived from
 * a key (the same across a restart) and 410 for unknown callback paths.
 * Every test runs the loop under a watchdog and ends with nothing left
 * registered on it, clean under ASan. */
#include "testutil.h"
#include "tu_hub.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <limits.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hubsub.h"
#include "rs_alloc.h"
#include "rs_http.h"

#define NOTIF "valid/notif-2017-changelist-notification.xml"
#define T_BASE "http://example.com/hubsub/"
#define MAXN 16
#define MAXS 64
#define FH_MAX 64

/* ------------------------------------------------------------- processes */

/* One rshub and Redis for the whole group (tu_hub.h); a test may start a
 * hub of its own on that Redis (fx->extra_hub). */
static int
grp_setup(void **state)
{
    *state = tu_hub_new(NULL);
    return 0;
}

static int
grp_teardown(void **state)
{
    tu_hub_free(*state);
    return 0;
}

/* ---------------------------------------------------------------- fixture */

struct note {
    char *body;
    size_t len;
    char ctype[128];
    char id[64];
    char gap[64];             /* X-Hub-Gap, "" if absent */
    char topic[256];
};

struct resp {
    bool done;
    int rc;
    long status;
    char *body;
    size_t len;
    char id[64];
};

/* What the scripted hub does with one subscribe/unsubscribe request. */
struct fh_act {
    int status;               /* 0: 202 */
    const char *retry_after;  /* header, or NULL */
    unsigned verify_lease;    /* > 0: after answering, verify with it */
    bool hold;                /* never answer */
};

struct fh_req {
    char mode[16];
    char topic[512];
    char callback[512];
    char secret[256];
    char lease[16];
    rs_time_t at;
};

struct fx {
    struct tu_hub *g;
    struct event_base *base;
    struct rs_http *http;
    struct hubsub *hs;
    struct event *tick, *watchdog;
    bool (*done)(struct fx *);
    int want;
    /* on_notification */
    struct note notes[MAXN];
    int nnotes;
    int refuse;               /* refuse this many first */
    bool unsub_in_note;       /* unsubscribe from inside the callback */
    /* on_state */
    enum hubsub_state states[MAXS];   /* the first MAXS reports */
    char whys[MAXS][600];
    char last_why[600];
    int nstates;              /* all reports */
    int nstate[HUBSUB_UNSUBSCRIBED + 1];
    int nactive;
    const int *counted;       /* what wait_count waits on, against want */
    bool unsub_on_active;     /* unsubscribe from inside on_state */
    struct resp *resp;        /* the test's own request in flight */
    /* the scripted hub */
    struct evhttp *fake;
    char fake_url[64];
    struct fh_act script[FH_MAX];
    int nscript;
    struct fh_act fh_default;
    struct fh_req fh[FH_MAX];
    int nfh;
    int fh_verified, fh_verify_failed;
    int readyz;               /* GET /readyz: this status (0: 404) */
    int nreadyz;              /* ...asked so far (not in nfh) */
    pid_t extra_hub;          /* a hub of the test's own, or 0 */
    /* raw socket exchange */
    char raw[8192];
    size_t nraw;
    bool raw_eof;
};

static int
on_note(void *ud, const struct hubsub_msg *m)
{
    struct fx *f = ud;
    if (f->refuse > 0) {
        f->refuse--;
        return 1;
    }
    assert_true(f->nnotes < MAXN);
    struct note *n = &f->notes[f->nnotes++];
    assert_int_equal(m->body[m->len], '\0');
    n->body = malloc(m->len + 1);
    memcpy(n->body, m->body, m->len + 1);
    n->len = m->len;
    snprintf(n->ctype, sizeof(n->ctype), "%s",
             m->content_type != NULL ? m->content_type : "");
    snprintf(n->id, sizeof(n->id), "%s", m->id != NULL ? m->id : "");
    snprintf(n->gap, sizeof(n->gap), "%s",
             m->gap_after != NULL ? m->gap_after : "");
    snprintf(n->topic, sizeof(n->topic), "%s", m->topic);
    if (f->unsub_in_note)
        assert_int_equal(hubsub_unsubscribe(f->hs, m->topic), 0);
    return 0;
}

static void
on_state(void *ud, const char *topic, enum hubsub_state st, const char *why)
{
    struct fx *f = ud;
    assert_non_null(why);
    assert_true(st >= HUBSUB_ACTIVE && st <= HUBSUB_UNSUBSCRIBED);
    if (f->nstates < MAXS) {
        f->states[f->nstates] = st;
        snprintf(f->whys[f->nstates], sizeof(f->whys[0]), "%s", why);
    }
    snprintf(f->last_why, sizeof(f->last_why), "%s", why);
    f->nstates++;
    f->nstate[st]++;
    if (st == HUBSUB_ACTIVE) {
        f->nactive++;
        if (f->unsub_on_active)
            assert_int_equal(hubsub_unsubscribe(f->hs, topic), 0);
    }
}

/* How many times st was reported. */
static int
count_state(const struct fx *f, enum hubsub_state st)
{
    return f->nstate[st];
}

/* ------------------------------------------------------------------ loop */

static void
on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct fx *f = arg;
    if (f->done != NULL && f->done(f))
        event_base_loopbreak(f->base);
}

static void
on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(((struct fx *)arg)->base);
}

/* Run the loop until done(f) (NULL: for ms), at most ms; done's verdict. */
static bool
fx_run(struct fx *f, bool (*done)(struct fx *), int ms)
{
    if (done != NULL && done(f))
        return true;
    f->done = done;
    struct timeval wd = { ms / 1000, (ms % 1000) * 1000 }, tk = { 0, 5000 };
    evtimer_add(f->watchdog, &wd);
    event_add(f->tick, &tk);
    event_base_dispatch(f->base);
    evtimer_del(f->watchdog);
    event_del(f->tick);
    f->done = NULL;
    return done == NULL || done(f);
}

/* *f->counted reached f->want (wait_count) */
static bool
count_reached(struct fx *f)
{
    return *f->counted >= f->want;
}

static bool
resp_done(struct fx *f)
{
    return f->resp != NULL && f->resp->done;
}

/* Run the loop until *count reaches n, at most ms; else fail: "N what
 * within ms, want n" and, when given, the last state report's why. */
static void
wait_count(struct fx *f, const int *count, int n, int ms, const char *what,
           bool with_why)
{
    f->want = n;
    f->counted = count;
    if (!fx_run(f, count_reached, ms))
        fail_msg("%d %s within %d ms, want %d%s%s%s", *count, what, ms, n,
                 with_why ? " (last: " : "",
                 with_why ? (f->nstates > 0 ? f->last_why : "none") : "",
                 with_why ? ")" : "");
}

static void
wait_states(struct fx *f, int n, int ms)
{
    wait_count(f, &f->nstates, n, ms, "state reports", false);
}

static void
wait_active(struct fx *f, int n, int ms)
{
    wait_count(f, &f->nactive, n, ms, "activations", true);
}

static void
wait_notes(struct fx *f, int n, int ms)
{
    wait_count(f, &f->nnotes, n, ms, "notifications", false);
}

static void
wait_fh(struct fx *f, int n, int ms)
{
    wait_count(f, &f->nfh, n, ms, "requests at the scripted hub", false);
}

/* The scripted hub's verifications answered with the challenge: the
 * subscriber reports its state when it answers one, a moment before the
 * hub's side has read that answer. */
static void
wait_verified(struct fx *f, int n, int ms)
{
    wait_count(f, &f->fh_verified, n, ms, "verifications answered", false);
}

/* ----------------------------------------------------- the test's requests */

static void
on_resp(void *ud, struct rs_http_req *req, const struct rs_http_result *res)
{
    struct resp *r = ud;
    r->done = true;
    r->rc = res->rc;
    r->status = res->status;
    if (res->body != NULL) {
        r->body = malloc(res->body_len + 1);
        memcpy(r->body, res->body, res->body_len);
        r->body[res->body_len] = '\0';
        r->len = res->body_len;
    }
    const char *id = rs_http_req_header(req, "X-Hub-Id");
    snprintf(r->id, sizeof(r->id), "%s", id != NULL ? id : "");
}

/* One request from the test, the loop running meanwhile; the status (0
 * when no answer). r->body is the caller's to free. */
static long
fx_http(struct fx *f, const char *method, const char *url,
        const char *const *hdrs, const char *body, size_t len, struct resp *r)
{
    memset(r, 0, sizeof(*r));
    struct rs_http_req_opts ro = {
        .method = method, .url = url, .headers = hdrs, .body = body,
        .body_len = len, .timeout_ms = 10000, .on_done = on_resp, .ud = r,
    };
    assert_int_equal(rs_http_request(f->http, &ro, NULL), 0);
    f->resp = r;
    assert_true(fx_run(f, resp_done, 15000));
    f->resp = NULL;
    return r->status;
}

static long
fx_get(struct fx *f, const char *url, char **body)
{
    struct resp r;
    long st = fx_http(f, "GET", url, NULL, NULL, 0, &r);
    if (body != NULL)
        *body = r.body;
    else
        free(r.body);
    return st;
}

/* POST to url with an X-Hub-Signature header (NULL: none). */
static long
fx_post(struct fx *f, const char *url, const char *sig, const char *body,
        size_t len)
{
    char sh[2600];   /* the longest signature a test sends, and room */
    snprintf(sh, sizeof(sh), "X-Hub-Signature: %s", sig != NULL ? sig : "");
    const char *hdrs[] = { "Content-Type: application/xml", "Expect:",
                           sig != NULL ? sh : NULL, NULL };
    struct resp r;
    long st = fx_http(f, "POST", url, hdrs, body, len, &r);
    free(r.body);
    return st;
}

/* Publish a notification to rshub for topic; its X-Hub-Id into id. */
static void
fx_publish(struct fx *f, const char *hub, const char *topic, const char *body,
           size_t len, char *id, size_t idsz)
{
    char link[1024];
    snprintf(link, sizeof(link), "Link: <%s>; rel=\"self\", <%s>; rel=\"hub\"",
             topic, hub);
    const char *hdrs[] = { "Content-Type: application/xml", link, "Expect:",
                           NULL };
    struct resp r;
    long st = fx_http(f, "POST", hub, hdrs, body, len, &r);
    if (st != 202)
        fail_msg("publish: %ld %s", st, r.body != NULL ? r.body : "");
    snprintf(id, idsz, "%s", r.id);
    free(r.body);
}

/* Wait until rshub lists callback among the subscriptions it delivers
 * (activation is stored after our answer to its verification). */
static void
fx_hub_lists(struct fx *f, int hub_port, const char *callback, bool want)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/topics", hub_port);
    for (int i = 0; i < 200; i++) {
        char *body = NULL;
        long st = fx_get(f, url, &body);
        bool has = st == 200 && body != NULL && strstr(body, callback) != NULL;
        free(body);
        if (has == want)
            return;
        fx_run(f, NULL, 50);
    }
    fail_msg("rshub %s %s", want ? "never listed" : "still lists", callback);
}

static void
hmac_sig(const char *alg, const EVP_MD *md, const char *key, const char *body,
         size_t len, char *out, size_t outsz)
{
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int dl = 0;
    assert_non_null(HMAC(md, key, (int)strlen(key), (const unsigned char *)body,
                         len, d, &dl));
    size_t n = (size_t)snprintf(out, outsz, "%s=", alg);
    for (unsigned i = 0; i < dl && n + 3 <= outsz; i++)
        n += (size_t)snprintf(out + n, outsz - n, "%02x", d[i]);
}

/* ------------------------------------------------------ raw socket exchange */

static void
on_raw(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct fx *f = arg;
    ssize_t n = read(fd, f->raw + f->nraw, sizeof(f->raw) - 1 - f->nraw);
    if (n > 0)
        f->nraw += (size_t)n;
    else if (n == 0 || (errno != EAGAIN && errno != EINTR))
        f->raw_eof = true;
    f->raw[f->nraw] = '\0';
}

static bool
raw_done(struct fx *f)
{
    return f->raw_eof;
}

/* Send bytes to our callback server as they are, read until it closes;
 * the status of the (first) response, 0 when none came. */
static int
fx_raw(struct fx *f, const char *req, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET,
                              .sin_port = htons((uint16_t)hubsub_port(f->hs)),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(write(fd, req, len), (ssize_t)len);
    evutil_make_socket_nonblocking(fd);
    f->nraw = 0;
    f->raw[0] = '\0';
    f->raw_eof = false;
    struct event *ev = event_new(f->base, fd, EV_READ | EV_PERSIST, on_raw, f);
    event_add(ev, NULL);
    fx_run(f, raw_done, 5000);
    event_free(ev);
    close(fd);
    int st = 0;
    if (strncmp(f->raw, "HTTP/1.", 7) == 0 && f->nraw > 12)
        st = (int)strtol(f->raw + 9, NULL, 10);
    return st;
}

/* ------------------------------------------------------- the scripted hub */

static void
on_fh_verified(void *ud, struct rs_http_req *req,
               const struct rs_http_result *res)
{
    (void)req;
    struct fx *f = ud;
    if (res->rc == 0 && res->status == 200 && res->body_len == 8 &&
        memcmp(res->body, "ch4ll3ng", 8) == 0)
        f->fh_verified++;
    else if (res->rc != RS_ECANCELED)
        f->fh_verify_failed++;
}

static void
fh_verify(struct fx *f, const struct fh_req *r, unsigned lease)
{
    char *topic = evhttp_encode_uri(r->topic);
    char url[1200];
    snprintf(url, sizeof(url),
             "%s?hub.mode=%s&hub.topic=%s&hub.challenge=ch4ll3ng"
             "&hub.lease_seconds=%u", r->callback, r->mode, topic, lease);
    free(topic);
    struct rs_http_req_opts ro = { .url = url, .timeout_ms = 5000,
                                   .on_done = on_fh_verified, .ud = f };
    assert_int_equal(rs_http_request(f->http, &ro, NULL), 0);
}

static void
fh_field(struct evkeyvalq *q, const char *key, char *out, size_t outsz)
{
    const char *v = evhttp_find_header(q, key);
    snprintf(out, outsz, "%s", v != NULL ? v : "");
}

static void
on_fake(struct evhttp_request *req, void *arg)
{
    struct fx *f = arg;
    const char *uri = evhttp_request_get_uri(req);
    if (evhttp_request_get_command(req) == EVHTTP_REQ_GET &&
        strcmp(uri, "/readyz") == 0) {
        /* the probe: rshub's words for a Redis that is down */
        struct evbuffer *b = evbuffer_new();
        int st = f->readyz != 0 ? f->readyz : 404;
        evbuffer_add_printf(b, "%s", st == 200 ? "ready"
                            : st == 503 ? "redis unavailable" : "not found");
        f->nreadyz++;
        evhttp_send_reply(req, st, "Scripted", b);
        evbuffer_free(b);
        return;
    }
    struct fh_req *r = &f->fh[f->nfh < FH_MAX ? f->nfh : FH_MAX - 1];
    struct fh_act a = f->nfh < f->nscript ? f->script[f->nfh] : f->fh_default;
    f->nfh++;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    char *body = calloc(1, n + 1);
    evbuffer_copyout(in, body, n);
    struct evkeyvalq q;
    memset(&q, 0, sizeof(q));
    assert_int_equal(evhttp_parse_query_str(body, &q), 0);
    free(body);
    fh_field(&q, "hub.mode", r->mode, sizeof(r->mode));
    fh_field(&q, "hub.topic", r->topic, sizeof(r->topic));
    fh_field(&q, "hub.callback", r->callback, sizeof(r->callback));
    fh_field(&q, "hub.secret", r->secret, sizeof(r->secret));
    fh_field(&q, "hub.lease_seconds", r->lease, sizeof(r->lease));
    evhttp_clear_headers(&q);
    r->at = rs_time_now();
    if (a.hold)
        return;   /* evhttp_free discards it */
    if (a.retry_after != NULL)
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          "Retry-After", a.retry_after);
    evhttp_send_reply(req, a.status != 0 ? a.status : 202, "Scripted", NULL);
    if (a.verify_lease > 0)
        fh_verify(f, r, a.verify_lease);
}

/* ------------------------------------------------------- setup, teardown */

static int
fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    f->g = *state;
    f->base = event_base_new();
    f->http = rs_http_new(f->base, NULL);
    f->tick = event_new(f->base, -1, EV_PERSIST, on_tick, f);
    f->watchdog = evtimer_new(f->base, on_watchdog, f);
    f->fake = evhttp_new(f->base);
    evhttp_set_gencb(f->fake, on_fake, f);
    struct evhttp_bound_socket *bs =
        evhttp_bind_socket_with_handle(f->fake, "127.0.0.1", 0);
    assert_non_null(bs);
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    assert_int_equal(getsockname(evhttp_bound_socket_get_fd(bs),
                                 (struct sockaddr *)&sa, &sl), 0);
    snprintf(f->fake_url, sizeof(f->fake_url), "http://127.0.0.1:%d/hub",
             ntohs(sa.sin_port));
    assert_non_null(f->http);
    *state = f;
    return 0;
}

static int
fx_teardown(void **state)
{
    struct fx *f = *state;
    struct tu_hub *g = f->g;
    tu_proc_stop(f->extra_hub);
    hubsub_free(f->hs);          /* the documented order: before rs_http */
    rs_http_free(f->http);
    evhttp_free(f->fake);
    event_free(f->tick);
    event_free(f->watchdog);
    event_base_loop(f->base, EVLOOP_NONBLOCK);   /* deferred frees */
    assert_int_equal(event_base_get_num_events(f->base,
                                               EVENT_BASE_COUNT_ADDED), 0);
    event_base_free(f->base);
    for (int i = 0; i < f->nnotes; i++)
        free(f->notes[i].body);
    free(f);
    *state = g;
    return 0;
}

static void
fx_hubsub_opts(struct fx *f, struct hubsub_opts *o)
{
    *o = (struct hubsub_opts){
        .base = f->base, .http = f->http, .listen_host = "127.0.0.1",
        .listen_port = 0, .on_notification = on_note, .on_state = on_state,
        .ud = f,
    };
}

static void
fx_hubsub_with(struct fx *f, const struct hubsub_opts *o)
{
    char err[256] = "";
    f->hs = hubsub_new(o, err, sizeof(err));
    if (f->hs == NULL)
        fail_msg("hubsub_new: %s", err);
}

static void
fx_hubsub(struct fx *f)
{
    struct hubsub_opts o;
    fx_hubsub_opts(f, &o);
    fx_hubsub_with(f, &o);
}

static void
fx_info(struct fx *f, const char *topic, struct hubsub_info *in)
{
    assert_int_equal(hubsub_info(f->hs, topic, in), 0);
}

/* Seconds from now to the next attempt. */
static double
next_in(struct fx *f, const char *topic)
{
    struct hubsub_info in;
    fx_info(f, topic, &in);
    assert_true(in.next_attempt != RS_TIME_NONE);
    return (double)(in.next_attempt - rs_time_now()) / 1e6;
}

/* Query string value encoding for the test's hand-made verifications. */
static void
cb_query(char *out, size_t outsz, const char *callback, const char *query)
{
    snprintf(out, outsz, "%s%s%s", callback, query != NULL ? "?" : "",
             query != NULL ? query : "");
}

/* ------------------------------------------------------------------ tests */

/* hubsub/options: hubsub_new refuses incomplete options, a bad callback
 * base and a port in use, saying why; hubsub_free(NULL) is a no-op;
 * callback URLs are callback_base + cb/<32 hex>, fresh per subscription;
 * subscribe/unsubscribe/info check their arguments; nothing is reported
 * from inside hubsub_subscribe. */
static void
test_options(void **state)
{
    struct fx *f = *state;
    struct hubsub_opts o;
    char err[256];
    hubsub_free(NULL);
    assert_null(hubsub_new(NULL, err, sizeof(err)));
    fx_hubsub_opts(f, &o);
    o.on_notification = NULL;
    assert_null(hubsub_new(&o, err, sizeof(err)));
    assert_non_null(strstr(err, "required"));
    fx_hubsub_opts(f, &o);
    o.listen_port = 70000;
    assert_null(hubsub_new(&o, err, sizeof(err)));
    fx_hubsub_opts(f, &o);
    o.listen_host = NULL;
    assert_null(hubsub_new(&o, NULL, 0));
    fx_hubsub_opts(f, &o);
    o.callback_base = "ftp://example.com/x/";
    assert_null(hubsub_new(&o, err, sizeof(err)));
    assert_non_null(strstr(err, "callback base"));

    fx_hubsub(f);
    assert_true(hubsub_port(f->hs) > 0);
    fx_hubsub_opts(f, &o);
    o.listen_port = hubsub_port(f->hs);
    err[0] = '\0';
    assert_null(hubsub_new(&o, err, sizeof(err)));
    assert_non_null(strstr(err, "cannot listen"));

    fx_hubsub_opts(f, &o);
    o.callback_base = "https://pub.example/rssub";
    struct hubsub *h2 = hubsub_new(&o, err, sizeof(err));
    assert_non_null(h2);
    assert_int_equal(hubsub_subscribe(h2, f->fake_url, T_BASE "opt"), 0);
    struct hubsub_info in;
    assert_int_equal(hubsub_info(h2, T_BASE "opt", &in), 0);
    const char *pre = "https://pub.example/rssub/cb/";
    assert_int_equal(strncmp(in.callback, pre, strlen(pre)), 0);
    assert_int_equal(strlen(in.callback), strlen(pre) + 32);
    assert_int_equal(strspn(in.callback + strlen(pre), "0123456789abcdef"), 32);
    hubsub_free(h2);   /* with its first attempt still scheduled */

    const char *TA = T_BASE "a";
    assert_int_equal(hubsub_subscribe(f->hs, "not a url", TA), RS_EINVAL);
    assert_int_equal(hubsub_subscribe(f->hs, "ws://h/hub", TA), RS_EINVAL);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, ""), RS_EINVAL);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, NULL), RS_EINVAL);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T_BASE "a"), 0);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, TA), RS_ESTATE);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T_BASE "b"), 0);
    assert_int_equal(hubsub_unsubscribe(f->hs, T_BASE "nope"), RS_ENOTFOUND);
    assert_int_equal(hubsub_info(f->hs, T_BASE "nope", &in), RS_ENOTFOUND);
    assert_int_equal(f->nstates, 0);
    struct hubsub_info ia, ib;
    fx_info(f, T_BASE "a", &ia);
    fx_info(f, T_BASE "b", &ib);
    assert_string_equal(ia.phase, "requesting");
    assert_false(ia.active);
    assert_true(ia.lease_end == RS_TIME_NONE);
    assert_int_equal(ia.failures, 0);
    assert_string_equal(ia.hub_url, f->fake_url);
    char want[64];
    snprintf(want, sizeof(want), "http://127.0.0.1:%d/cb/", hubsub_port(f->hs));
    assert_int_equal(strncmp(ia.callback, want, strlen(want)), 0);
    assert_string_not_equal(ia.callback, ib.callback);
    struct hubsub_stats st;
    hubsub_stats(f->hs, &st);
    assert_int_equal(st.subscriptions, 2);
    assert_int_equal(st.active, 0);
}

/* hubsub/alloc_failures: every allocation of hubsub_new and
 * hubsub_subscribe failing in turn gives NULL / RS_ENOMEM and leaks
 * nothing (ASan); a failure while sending the request is a FAILED report
 * and a retry, not a crash. */
static void
test_alloc_failures(void **state)
{
    struct fx *f = *state;
    struct hubsub_opts o;
    fx_hubsub_opts(f, &o);
    bool made = false;
    for (unsigned long n = 1; n < 100 && !made; n++) {
        tu_alloc_fail_at(n);
        struct hubsub *h = hubsub_new(&o, NULL, 0);
        tu_alloc_fail_at(0);
        if (h == NULL)
            continue;
        made = true;
        f->hs = h;
    }
    assert_true(made);
    bool subscribed = false;
    for (unsigned long n = 1; n < 100 && !subscribed; n++) {
        tu_alloc_fail_at(n);
        int rc = hubsub_subscribe(f->hs, f->fake_url, T_BASE "alloc");
        tu_alloc_fail_at(0);
        assert_true(rc == 0 || rc == RS_ENOMEM);
        subscribed = rc == 0;
    }
    assert_true(subscribed);
    /* the first attempt runs from the loop: make its first allocation fail */
    tu_alloc_fail_at(1);
    fx_run(f, NULL, 1);
    tu_alloc_fail_at(0);
    wait_states(f, 1, 2000);
    assert_int_equal(f->states[0], HUBSUB_FAILED);
    assert_non_null(strstr(f->whys[0], "out of memory"));
    f->fh_default = (struct fh_act){ .status = 202 };
    wait_fh(f, 1, 3000);   /* the retry went out */
    assert_string_equal(f->fh[0].mode, "subscribe");
}

/* hubsub/deliver: against rshub: subscribe -> verified (ACTIVE with the
 * hub's default lease) -> publish -> on_notification gets the exact bytes,
 * the Content-Type and X-Hub-Id; POSTs with a wrong, missing, malformed or
 * unknown-algorithm signature are answered 204 and dropped. */
static void
test_deliver(void **state)
{
    struct fx *f = *state;
    const char *T = T_BASE "deliver";
    fx_hubsub(f);
    assert_int_equal(hubsub_subscribe(f->hs, f->g->hub_url, T), 0);
    wait_active(f, 1, 15000);
    assert_int_equal(f->nstates, 1);
    assert_int_equal(f->states[0], HUBSUB_ACTIVE);
    assert_string_equal(f->whys[0], "lease 864000 s");   /* rshub's 10 d */
    struct hubsub_info in;
    fx_info(f, T, &in);
    assert_true(in.active);
    assert_string_equal(in.phase, "active");
    assert_int_equal(in.lease_seconds, 864000);
    double renew = (double)(in.next_attempt - rs_time_now()) / 1e6;
    assert_true(renew > 0.79 * 864000 && renew <= 0.8 * 864000);
    fx_hub_lists(f, f->g->hub_port, in.callback, true);

    size_t len;
    char *body = tu_read_data(NOTIF, &len);
    char id[64];
    fx_publish(f, f->g->hub_url, T, body, len, id, sizeof(id));
    wait_notes(f, 1, 10000);
    assert_int_equal(f->notes[0].len, len);
    assert_memory_equal(f->notes[0].body, body, len);
    assert_string_equal(f->notes[0].ctype, "application/xml");
    assert_string_equal(f->notes[0].id, id);
    assert_string_equal(f->notes[0].gap, "");   /* nothing was trimmed */
    assert_string_equal(f->notes[0].topic, T);

    char sig[300];
    hmac_sig("sha256", EVP_sha256(), "not the secret", body, len, sig,
             sizeof(sig));
    assert_int_equal(fx_post(f, in.callback, sig, body, len), 204);
    assert_int_equal(fx_post(f, in.callback, NULL, body, len), 204);
    assert_int_equal(fx_post(f, in.callback, "sha256=zz", body, len), 204);
    assert_int_equal(fx_post(f, in.callback,
                             "md5=00112233445566778899aabbccddeeff", body, len),
                     204);
    fx_run(f, NULL, 200);
    assert_int_equal(f->nnotes, 1);
    struct hubsub_stats st;
    hubsub_stats(f->hs, &st);
    assert_int_equal(st.bad_signature, 4);
    assert_int_equal(st.delivered, 1);
    assert_int_equal(st.verified, 1);
    assert_int_equal(st.requests, 1);
    assert_int_equal(st.request_failures, 0);
    assert_int_equal(st.subscriptions, 1);
    assert_int_equal(st.active, 1);
    free(body);
}

/* hubsub/refused_redelivered: on_notification saying no is answered 503,
 * and rshub delivers the same notification (same bytes, same X-Hub-Id)
 * again later: nothing acknowledged before the caller took it. */
static void
test_refused_redelivered(void **state)
{
    struct fx *f = *state;
    const char *T = T_BASE "refuse";
    fx_hubsub(f);
    assert_int_equal(hubsub_subscribe(f->hs, f->g->hub_url, T), 0);
    wait_active(f, 1, 15000);
    struct hubsub_info in;
    fx_info(f, T, &in);
    fx_hub_lists(f, f->g->hub_port, in.callback, true);
    f->refuse = 1;
    size_t len;
    char *body = tu_read_data(NOTIF, &len);
    char id[64];
    fx_publish(f, f->g->hub_url, T, body, len, id, sizeof(id));
    wait_notes(f, 1, 15000);
    assert_int_equal(f->refuse, 0);
    assert_int_equal(f->notes[0].len, len);
    assert_memory_equal(f->notes[0].body, body, len);
    assert_string_equal(f->notes[0].id, id);
    struct hubsub_stats st;
    hubsub_stats(f->hs, &st);
    assert_int_equal(st.refused, 1);
    assert_int_equal(st.delivered, 1);
    free(body);
}

/* hubsub/unsubscribe: after hubsub_unsubscribe the path answers 410 at
 * once, rshub verifies the unsubscribe (UNSUBSCRIBED) and drops the
 * subscription, later verifications are 404, publishing delivers nothing;
 * subscribing again gets a new path and works. */
static void
test_unsubscribe(void **state)
{
    struct fx *f = *state;
    const char *T = T_BASE "unsub";
    fx_hubsub(f);
    assert_int_equal(hubsub_subscribe(f->hs, f->g->hub_url, T), 0);
    wait_active(f, 1, 15000);
    struct hubsub_info in;
    fx_info(f, T, &in);
    char cb1[300];
    snprintf(cb1, sizeof(cb1), "%s", in.callback);
    fx_hub_lists(f, f->g->hub_port, cb1, true);

    assert_int_equal(hubsub_unsubscribe(f->hs, T), 0);
    fx_info(f, T, &in);
    assert_string_equal(in.phase, "unsubscribing");
    assert_false(in.active);
    assert_int_equal(fx_post(f, cb1, "sha256=00", "x", 1), 410);
    wait_states(f, 2, 15000);
    assert_int_equal(f->states[1], HUBSUB_UNSUBSCRIBED);
    assert_string_equal(f->whys[1], "unsubscribed: verified by the hub");
    fx_hub_lists(f, f->g->hub_port, cb1, false);
    fx_info(f, T, &in);
    assert_string_equal(in.phase, "gone");
    assert_int_equal(hubsub_unsubscribe(f->hs, T), RS_ENOTFOUND);
    char url[600];
    cb_query(url, sizeof(url), cb1,
             "hub.mode=unsubscribe"
             "&hub.topic=http%3A%2F%2Fexample.com%2Fhubsub%2Funsub"
             "&hub.challenge=again");
    assert_int_equal(fx_get(f, url, NULL), 404);

    size_t len;
    char *body = tu_read_data(NOTIF, &len);
    char id[64];
    fx_publish(f, f->g->hub_url, T, body, len, id, sizeof(id));
    fx_run(f, NULL, 1500);
    assert_int_equal(f->nnotes, 0);

    assert_int_equal(hubsub_subscribe(f->hs, f->g->hub_url, T), 0);
    wait_active(f, 2, 15000);
    fx_info(f, T, &in);
    assert_string_not_equal(in.callback, cb1);
    assert_string_equal(in.phase, "active");
    fx_hub_lists(f, f->g->hub_port, in.callback, true);
    fx_publish(f, f->g->hub_url, T, body, len, id, sizeof(id));
    wait_notes(f, 1, 10000);
    assert_string_equal(f->notes[0].id, id);
    assert_int_equal(fx_post(f, cb1, NULL, "x", 1), 410);
    struct hubsub_stats st;
    hubsub_stats(f->hs, &st);
    assert_int_equal(st.gone, 2);
    assert_int_equal(st.subscriptions, 1);
    free(body);
}

/* hubsub/renew: with rshub granting a 2 s lease, the subscription is
 * renewed at 80 % again and again (one ACTIVE report, no EXPIRED), and the
 * hub still delivers long after the first lease would have run out. */
static void
test_renew(void **state)
{
    struct fx *f = *state;
    const char *T = T_BASE "renew";
    struct hubsub_opts o;
    fx_hubsub_opts(f, &o);
    o.lease_seconds = 2;
    fx_hubsub_with(f, &o);
    assert_int_equal(hubsub_subscribe(f->hs, f->g->hub_url, T), 0);
    wait_active(f, 1, 15000);
    assert_string_equal(f->whys[0], "lease 2 s");
    double next = next_in(f, T);
    assert_true(next > 1.0 && next <= 1.6);
    fx_run(f, NULL, 5000);
    struct hubsub_stats st;
    hubsub_stats(f->hs, &st);
    assert_true(st.renewed >= 2);
    assert_int_equal(st.expired, 0);
    assert_int_equal(f->nstates, 1);
    struct hubsub_info in;
    fx_info(f, T, &in);
    assert_true(in.active);
    fx_hub_lists(f, f->g->hub_port, in.callback, true);
    size_t len;
    char *body = tu_read_data(NOTIF, &len);
    char id[64];
    fx_publish(f, f->g->hub_url, T, body, len, id, sizeof(id));
    wait_notes(f, 1, 10000);
    assert_string_equal(f->notes[0].id, id);
    free(body);
}

/* Hold 127.0.0.1:port bound but not listening (connections to it are
 * refused, as to a hub that is down), so that no other program on the
 * machine takes the port before the hub comes back on it. */
static int
hold_port(int port)
{
    struct sockaddr_in a = { .sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port) };
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one,
                                sizeof(one)), 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* hubsub/hub_down_then_up: a hub that is down at subscribe time is a
 * FAILED report and a retry with backoff; once the hub is up the
 * subscription becomes active and delivers. */
static void
test_hub_down_then_up(void **state)
{
    struct fx *f = *state;
    const char *T = T_BASE "down";
    /* a port a hub had a moment ago, with nothing listening on it now */
    int port = tu_hub_spawn(f->g, 0, "rshub2:", NULL, &f->extra_hub, NULL);
    tu_proc_stop(f->extra_hub);
    f->extra_hub = 0;
    int held = hold_port(port);
    char hub[64];
    snprintf(hub, sizeof(hub), "http://127.0.0.1:%d/hub", port);
    fx_hubsub(f);
    assert_int_equal(hubsub_subscribe(f->hs, hub, T), 0);
    wait_states(f, 1, 10000);
    assert_int_equal(f->states[0], HUBSUB_FAILED);
    assert_non_null(strstr(f->whys[0], "hub unreachable"));
    double next = next_in(f, T);
    assert_true(next > 0.5 && next <= 1.11);
    wait_states(f, 2, 10000);   /* the second try fails too: 2 s now */
    assert_int_equal(f->states[1], HUBSUB_FAILED);
    next = next_in(f, T);
    assert_true(next > 1.2 && next <= 2.21);
    close(held);
    assert_int_equal(tu_hub_spawn(f->g, port, "rshub2:", NULL, &f->extra_hub,
                                  NULL), port);
    wait_active(f, 1, 20000);
    struct hubsub_info in;
    fx_info(f, T, &in);
    assert_int_equal(in.failures, 0);
    fx_hub_lists(f, port, in.callback, true);
    size_t len;
    char *body = tu_read_data(NOTIF, &len);
    char id[64];
    fx_publish(f, hub, T, body, len, id, sizeof(id));
    wait_notes(f, 1, 10000);
    assert_memory_equal(f->notes[0].body, body, len);
    free(body);
}

/* hubsub/verification: a verification is answered with the exact
 * challenge (200, text/plain) only for a pending subscribe with the same
 * topic and a lease; any other GET (unknown topic or path, no challenge, a
 * bad lease, other modes, while already active) is 404; a denial is
 * answered 200 and reported, with a slow retry; other methods 501. */
static void
test_verification(void **state)
{
    struct fx *f = *state;
    const char *T = T_BASE "verify";
    const char *TQ = "hub.topic=http%3A%2F%2Fexample.com%2Fhubsub%2Fverify";
    fx_hubsub(f);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T), 0);
    wait_fh(f, 1, 5000);
    fx_run(f, NULL, 50);
    struct hubsub_info in;
    fx_info(f, T, &in);
    assert_string_equal(in.phase, "verifying");
    assert_string_equal(f->fh[0].mode, "subscribe");
    assert_string_equal(f->fh[0].topic, T);
    assert_string_equal(f->fh[0].callback, in.callback);
    assert_string_equal(f->fh[0].lease, "");   /* the hub chooses */
    assert_int_equal(strlen(f->fh[0].secret), 64);
    assert_int_equal(strspn(f->fh[0].secret, "0123456789abcdef"), 64);

    static const char *const refused[] = {
        "hub.mode=subscribe&hub.topic=http%3A%2F%2Fother.example%2F"
        "&hub.challenge=c&hub.lease_seconds=60",
        "hub.mode=subscribe&@&hub.lease_seconds=60",
        "hub.mode=subscribe&@&hub.challenge=&hub.lease_seconds=60",
        "hub.mode=subscribe&@&hub.challenge=c",
        "hub.mode=subscribe&@&hub.challenge=c&hub.lease_seconds=abc",
        "hub.mode=subscribe&@&hub.challenge=c&hub.lease_seconds=0",
        "hub.mode=subscribe&@&hub.challenge=c&hub.lease_seconds=-5",
        "hub.mode=subscribe&@&hub.challenge=c&hub.lease_seconds=60s",
        "hub.mode=unsubscribe&@&hub.challenge=c",
        "hub.mode=publish&@&hub.challenge=c&hub.lease_seconds=60",
        "@&hub.challenge=c&hub.lease_seconds=60",
        "hub.mode=denied&hub.topic=http%3A%2F%2Fother.example%2F",
        "",
        NULL,
    };
    char q[600], url[1200];
    int n404 = 0;
    for (int i = 0; refused[i] != NULL; i++) {
        size_t qn = 0;   /* '@' stands for the topic parameter */
        for (const char *p = refused[i]; *p != '\0' && qn + 80 < sizeof(q);
             p++) {
            if (*p == '@')
                qn += (size_t)snprintf(q + qn, sizeof(q) - qn, "%s", TQ);
            else
                q[qn++] = *p;
        }
        q[qn] = '\0';
        cb_query(url, sizeof(url), in.callback, q[0] != '\0' ? q : NULL);
        if (fx_get(f, url, NULL) != 404)
            fail_msg("GET %s: not 404", url);
        n404++;
    }
    char base[200];
    snprintf(base, sizeof(base), "http://127.0.0.1:%d/", hubsub_port(f->hs));
    static const char *const paths[] = {
        "", "cb/", "cb/00000000000000000000000000000000", "favicon.ico",
        "cb/0123456789abcdef0123456789abcde", NULL,
    };
    for (int i = 0; paths[i] != NULL; i++) {
        snprintf(url, sizeof(url), "%s%s", base, paths[i]);
        assert_int_equal(fx_get(f, url, NULL), 404);
        n404++;
    }
    /* the id upper-cased is another path */
    snprintf(url, sizeof(url), "%s", in.callback);
    for (char *p = strrchr(url, '/'); *p != '\0'; p++)
        if (*p >= 'a' && *p <= 'f')
            *p = (char)(*p - 'a' + 'A');
    if (strcmp(url, in.callback) != 0) {
        assert_int_equal(fx_get(f, url, NULL), 404);
        n404++;
    }
    assert_int_equal(f->nstates, 0);

    snprintf(q, sizeof(q), "hub.mode=subscribe&%s&hub.challenge=c%%2Bh%%20x-1"
             "&hub.lease_seconds=60", TQ);
    cb_query(url, sizeof(url), in.callback, q);
    struct resp r;
    assert_int_equal(fx_http(f, "GET", url, NULL, NULL, 0, &r), 200);
    assert_int_equal(r.len, 7);
    assert_memory_equal(r.body, "c+h x-1", 7);
    free(r.body);
    assert_int_equal(f->nstates, 1);
    assert_int_equal(f->states[0], HUBSUB_ACTIVE);
    assert_string_equal(f->whys[0], "lease 60 s");
    fx_info(f, T, &in);
    assert_true(in.active);
    assert_int_equal(in.lease_seconds, 60);
    /* not pending any more */
    assert_int_equal(fx_get(f, url, NULL), 404);
    n404++;

    snprintf(q, sizeof(q), "hub.mode=denied&%s&hub.reason=no+such+topic", TQ);
    cb_query(url, sizeof(url), in.callback, q);
    assert_int_equal(fx_get(f, url, NULL), 200);
    assert_int_equal(f->nstates, 2);
    assert_int_equal(f->states[1], HUBSUB_DENIED);
    assert_non_null(strstr(f->whys[1], "no such topic"));
    fx_info(f, T, &in);
    assert_false(in.active);
    assert_string_equal(in.phase, "backoff");
    double next = next_in(f, T);
    assert_true(next > 595 && next <= 600);

    /* PUT and friends: refused before our handler (libevent: 501) */
    char raw[600];
    const char *path = strstr(in.callback + 7, "/");
    int rl = snprintf(raw, sizeof(raw), "PUT %s HTTP/1.1\r\nHost: x\r\n"
                      "Content-Length: 1\r\nConnection: close\r\n\r\nx", path);
    assert_int_equal(fx_raw(f, raw, (size_t)rl), 501);
    struct hubsub_stats st;
    hubsub_stats(f->hs, &st);
    assert_int_equal(st.not_found, n404);
    assert_int_equal(st.verified, 1);
    assert_int_equal(st.denied, 1);
}

/* hubsub/signatures: with the secret the scripted hub was given, POSTs
 * signed sha1, sha256, sha384, sha512 (any case) are taken, even before
 * the subscription is verified; binary and empty bodies come through
 * exactly; wrong key, other body, short or long hex, no '=', unknown
 * algorithm are dropped with 204. on_notification may unsubscribe. */
static void
test_signatures(void **state)
{
    struct fx *f = *state;
    const char *T = T_BASE "sig";
    fx_hubsub(f);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T), 0);
    wait_fh(f, 1, 5000);
    struct hubsub_info in;
    fx_info(f, T, &in);
    const char *key = f->fh[0].secret;
    const char body[] = "bin\0ary\xff body";
    size_t len = sizeof(body) - 1;
    char sig[300];
    static const struct {
        const char *name;
        const EVP_MD *(*md)(void);
    } algs[] = { { "sha1", EVP_sha1 }, { "sha256", EVP_sha256 },
                 { "sha384", EVP_sha384 }, { "sha512", EVP_sha512 } };
    for (int i = 0; i < 4; i++) {
        hmac_sig(algs[i].name, algs[i].md(), key, body, len, sig, sizeof(sig));
        assert_int_equal(fx_post(f, in.callback, sig, body, len), 204);
        assert_int_equal(f->nnotes, i + 1);
        assert_int_equal(f->notes[i].len, len);
        assert_memory_equal(f->notes[i].body, body, len);
        assert_string_equal(f->notes[i].topic, T);
        assert_string_equal(f->notes[i].id, "");
    }
    hmac_sig("SHA256", EVP_sha256(), key, body, len, sig, sizeof(sig));
    for (char *p = sig; *p != '\0'; p++)
        if (*p >= 'a' && *p <= 'f')
            *p = (char)(*p - 'a' + 'A');
    assert_int_equal(fx_post(f, in.callback, sig, body, len), 204);
    assert_int_equal(f->nnotes, 5);
    hmac_sig("sha256", EVP_sha256(), key, "", 0, sig, sizeof(sig));
    assert_int_equal(fx_post(f, in.callback, sig, "", 0), 204);
    assert_int_equal(f->nnotes, 6);
    assert_int_equal(f->notes[5].len, 0);

    char bad[8][300];
    hmac_sig("sha256", EVP_sha256(), "wrong key", body, len, bad[0], 300);
    hmac_sig("sha256", EVP_sha256(), key, "other body", 10, bad[1], 300);
    hmac_sig("sha256", EVP_sha256(), key, body, len, bad[2], 300);
    bad[2][strlen(bad[2]) - 1] = '\0';                    /* one hex short */
    hmac_sig("sha256", EVP_sha256(), key, body, len, bad[3], 300);
    snprintf(bad[3] + strlen(bad[3]), 2, "0");            /* one too many */
    hmac_sig("sha256", EVP_sha256(), key, body, len, bad[4], 300);
    memmove(bad[4] + 6, bad[4] + 7, strlen(bad[4] + 7) + 1); /* no '=' */
    hmac_sig("md5", EVP_md5(), key, body, len, bad[5], 300);
    hmac_sig("sha1", EVP_sha256(), key, body, len, bad[6], 300); /* as sha1 */
    hmac_sig("sha256", EVP_sha256(), key, body, len, bad[7], 300);
    bad[7][10] = 'g';                                     /* not hex */
    for (int i = 0; i < 8; i++)
        assert_int_equal(fx_post(f, in.callback, bad[i], body, len), 204);
    assert_int_equal(fx_post(f, in.callback, NULL, body, len), 204);
    assert_int_equal(f->nnotes, 6);

    /* the caller unsubscribes from inside on_notification */
    f->unsub_in_note = true;
    hmac_sig("sha512", EVP_sha512(), key, body, len, sig, sizeof(sig));
    assert_int_equal(fx_post(f, in.callback, sig, body, len), 204);
    assert_int_equal(f->nnotes, 7);
    assert_int_equal(fx_post(f, in.callback, sig, body, len), 410);
    struct hubsub_stats st;
    hubsub_stats(f->hs, &st);
    assert_int_equal(st.delivered, 7);
    assert_int_equal(st.bad_signature, 9);
    assert_int_equal(st.gone, 1);
    wait_fh(f, 2, 5000);
    assert_string_equal(f->fh[1].mode, "unsubscribe");
    assert_string_equal(f->fh[1].callback, in.callback);
    assert_string_equal(f->fh[1].secret, "");
}

/* hubsub/oversize: a POST over max_body is refused 413, by Content-Length
 * and when chunked, and never reaches on_notification; one of exactly
 * max_body bytes does. */
static void
test_oversize(void **state)
{
    struct fx *f = *state;
    const char *T = T_BASE "big";
    struct hubsub_opts o;
    fx_hubsub_opts(f, &o);
    o.max_body = 4096;
    fx_hubsub_with(f, &o);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T), 0);
    wait_fh(f, 1, 5000);
    struct hubsub_info in;
    fx_info(f, T, &in);
    char *big = malloc(5000);
    memset(big, 'x', 5000);
    char sig[300];
    const char *key = f->fh[0].secret;
    hmac_sig("sha256", EVP_sha256(), key, big, 4097, sig, sizeof(sig));
    assert_int_equal(fx_post(f, in.callback, sig, big, 4097), 413);
    assert_int_equal(f->nnotes, 0);
    hmac_sig("sha256", EVP_sha256(), key, big, 4096, sig, sizeof(sig));
    assert_int_equal(fx_post(f, in.callback, sig, big, 4096), 204);
    assert_int_equal(f->nnotes, 1);
    assert_int_equal(f->notes[0].len, 4096);

    /* chunked: 6 chunks of 1000 bytes */
    const char *path = strstr(in.callback + 7, "/");
    char *raw = malloc(8192);
    int n = snprintf(raw, 8192, "POST %s HTTP/1.1\r\nHost: x\r\n"
                     "Transfer-Encoding: chunked\r\n"
                     "X-Hub-Signature: %s\r\n\r\n",
                     path, sig);
    for (int i = 0; i < 6; i++) {
        n += snprintf(raw + n, 8192 - (size_t)n, "3e8\r\n");
        memset(raw + n, 'y', 1000);
        n += 1000;
        n += snprintf(raw + n, 8192 - (size_t)n, "\r\n");
    }
    n += snprintf(raw + n, 8192 - (size_t)n, "0\r\n\r\n");
    assert_int_equal(fx_raw(f, raw, (size_t)n), 413);
    assert_int_equal(f->nnotes, 1);
    free(raw);
    free(big);
}

/* hubsub/retry_schedule: a 503 is retried after 1 s (+-10 %), a 429 not
 * before its Retry-After, a 400 after 10 minutes; each is a FAILED report
 * with the hub's status; every attempt carries the same callback, secret
 * and the lease asked for. */
static void
test_retry_schedule(void **state)
{
    struct fx *f = *state;
    const char *T = T_BASE "retry";
    f->script[0] = (struct fh_act){ .status = 503 };
    f->script[1] = (struct fh_act){ .status = 429, .retry_after = "3" };
    f->script[2] = (struct fh_act){ .status = 400 };
    f->nscript = 3;
    struct hubsub_opts o;
    fx_hubsub_opts(f, &o);
    o.lease_seconds = 120;
    fx_hubsub_with(f, &o);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T), 0);
    wait_states(f, 1, 5000);
    assert_int_equal(f->states[0], HUBSUB_FAILED);
    assert_non_null(strstr(f->whys[0], "the hub answered 503"));
    double next = next_in(f, T);
    assert_true(next > 0.5 && next <= 1.1);
    wait_states(f, 2, 5000);
    assert_non_null(strstr(f->whys[1], "the hub answered 429"));
    double gap = (double)(f->fh[1].at - f->fh[0].at) / 1e6;
    assert_true(gap >= 0.89 && gap < 2.5);
    next = next_in(f, T);
    assert_true(next > 2.5 && next <= 3.0);
    wait_states(f, 3, 6000);
    assert_non_null(strstr(f->whys[2], "the hub answered 400"));
    gap = (double)(f->fh[2].at - f->fh[1].at) / 1e6;
    assert_true(gap >= 2.99 && gap < 4.5);
    next = next_in(f, T);
    assert_true(next > 595 && next <= 600);
    struct hubsub_info in;
    fx_info(f, T, &in);
    assert_int_equal(in.failures, 3);
    assert_string_equal(in.phase, "backoff");
    for (int i = 0; i < 3; i++) {
        assert_string_equal(f->fh[i].mode, "subscribe");
        assert_string_equal(f->fh[i].callback, in.callback);
        assert_string_equal(f->fh[i].secret, f->fh[0].secret);
        assert_string_equal(f->fh[i].lease, "120");
    }
    struct hubsub_stats st;
    hubsub_stats(f->hs, &st);
    assert_int_equal(st.requests, 3);
    assert_int_equal(st.request_failures, 3);
}

/* hubsub/verify_timeout: a hub that says 202 but never verifies is asked
 * again (FAILED, then a new request); an unsubscribe it never verifies
 * ends the subscription anyway (UNSUBSCRIBED, path 410). */
static void
test_verify_timeout(void **state)
{
    struct fx *f = *state;
    const char *T = T_BASE "noverify";
    struct hubsub_opts o;
    fx_hubsub_opts(f, &o);
    o.verify_wait_ms = 300;
    fx_hubsub_with(f, &o);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T), 0);
    wait_states(f, 1, 3000);
    assert_int_equal(f->states[0], HUBSUB_FAILED);
    assert_non_null(strstr(f->whys[0], "did not verify"));
    wait_fh(f, 2, 3000);
    assert_string_equal(f->fh[1].mode, "subscribe");
    assert_int_equal(hubsub_unsubscribe(f->hs, T), 0);
    wait_states(f, 2, 3000);
    assert_int_equal(f->states[1], HUBSUB_UNSUBSCRIBED);
    assert_non_null(strstr(f->whys[1], "did not verify the unsubscribe"));
    assert_string_equal(f->fh[2].mode, "unsubscribe");
    struct hubsub_info in;
    fx_info(f, T, &in);
    assert_string_equal(in.phase, "gone");
    assert_int_equal(fx_post(f, in.callback, NULL, "x", 1), 410);
}

/* hubsub/expiry: a lease whose renewals all fail runs out: EXPIRED, not
 * active, the retries go on, and a later verification makes it ACTIVE
 * again. */
static void
test_expiry(void **state)
{
    struct fx *f = *state;
    const char *T = T_BASE "expiry";
    f->script[0] = (struct fh_act){ .status = 202, .verify_lease = 1 };
    f->nscript = 1;
    f->fh_default = (struct fh_act){ .status = 500 };
    fx_hubsub(f);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T), 0);
    wait_active(f, 1, 5000);
    wait_verified(f, 1, 5000);
    assert_int_equal(f->fh_verified, 1);
    struct hubsub_info in;
    fx_info(f, T, &in);
    assert_true(in.active);
    double left = (double)(in.lease_end - rs_time_now()) / 1e6;
    assert_true(left > 0.5 && left <= 1.0);
    for (int i = 0; i < 300 && count_state(f, HUBSUB_EXPIRED) == 0; i++)
        fx_run(f, NULL, 10);
    assert_int_equal(count_state(f, HUBSUB_EXPIRED), 1);
    assert_true(count_state(f, HUBSUB_FAILED) >= 1);   /* the renewal */
    fx_info(f, T, &in);
    assert_false(in.active);
    assert_true(in.lease_end == RS_TIME_NONE);
    f->fh_default = (struct fh_act){ .status = 202, .verify_lease = 30 };
    wait_active(f, 2, 10000);
    fx_info(f, T, &in);
    assert_true(in.active);
    assert_int_equal(in.lease_seconds, 30);
    struct hubsub_stats st;
    hubsub_stats(f->hs, &st);
    assert_int_equal(st.expired, 1);
    assert_int_equal(st.renewed, 0);
}

/* hubsub/unsub_from_on_state: on_state may unsubscribe the topic it is
 * told about; the hub then gets an unsubscribe (no secret) for the same
 * callback, verifies it, and UNSUBSCRIBED follows. */
static void
test_unsub_from_on_state(void **state)
{
    struct fx *f = *state;
    const char *T = T_BASE "reent";
    f->fh_default = (struct fh_act){ .status = 202, .verify_lease = 60 };
    f->unsub_on_active = true;
    fx_hubsub(f);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T), 0);
    wait_states(f, 2, 5000);
    assert_int_equal(f->states[0], HUBSUB_ACTIVE);
    assert_int_equal(f->states[1], HUBSUB_UNSUBSCRIBED);
    assert_string_equal(f->whys[1], "unsubscribed: verified by the hub");
    assert_int_equal(f->nfh, 2);
    assert_string_equal(f->fh[1].mode, "unsubscribe");
    assert_string_equal(f->fh[1].callback, f->fh[0].callback);
    assert_string_equal(f->fh[1].secret, "");
    wait_verified(f, 2, 5000);
    assert_int_equal(f->fh_verified, 2);
}

/* hubsub/gone_cap: unsubscribed paths are kept up to HUBSUB_GONE_MAX of
 * them; older ones are forgotten, so churn cannot grow memory (and are
 * answered 410 as any unknown callback path). */
static void
test_gone_cap(void **state)
{
    struct fx *f = *state;
    const char *T = T_BASE "churn";
    f->fh_default = (struct fh_act){ .status = 202, .verify_lease = 60 };
    fx_hubsub(f);
    char first[300] = "", last[300] = "";
    for (int i = 0; i < HUBSUB_GONE_MAX + 2; i++) {
        assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T), 0);
        struct hubsub_info in;
        fx_info(f, T, &in);
        snprintf(i == 0 ? first : last, sizeof(first), "%s", in.callback);
        /* before the first attempt: only the unsubscribe goes out */
        assert_int_equal(hubsub_unsubscribe(f->hs, T), 0);
        wait_states(f, i + 1, 5000);
    }
    assert_int_equal(count_state(f, HUBSUB_UNSUBSCRIBED), HUBSUB_GONE_MAX + 2);
    fx_run(f, NULL, 1);   /* the reap */
    /* forgotten, and unknown: 410 all the same (the hub drops it) */
    assert_int_equal(fx_post(f, first, NULL, "x", 1), 410);
    assert_int_equal(fx_post(f, last, NULL, "x", 1), 410);
    struct hubsub_stats st;
    hubsub_stats(f->hs, &st);
    assert_int_equal(st.subscriptions, 0);
    assert_int_equal(f->nfh, HUBSUB_GONE_MAX + 2);
}

/* hubsub/free_in_flight: freeing with a request out is safe in both
 * orders: hubsub_free then rs_http_free (the cancelled request's context
 * is released by rs_http), and rs_http_free then hubsub_free. */
static void
test_free_in_flight(void **state)
{
    struct fx *f = *state;
    f->fh_default = (struct fh_act){ .hold = true };
    fx_hubsub(f);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T_BASE "f1"), 0);
    wait_fh(f, 1, 5000);
    hubsub_free(f->hs);     /* rs_http_free in the teardown */
    f->hs = NULL;

    struct rs_http *h2 = rs_http_new(f->base, NULL);
    struct hubsub_opts o;
    fx_hubsub_opts(f, &o);
    o.http = h2;
    struct hubsub *hs2 = hubsub_new(&o, NULL, 0);
    assert_non_null(hs2);
    assert_int_equal(hubsub_subscribe(hs2, f->fake_url, T_BASE "f2"), 0);
    wait_fh(f, 2, 5000);
    rs_http_free(h2);       /* the request ends cancelled: no retry */
    struct hubsub_info in;
    assert_int_equal(hubsub_info(hs2, T_BASE "f2", &in), 0);
    assert_string_equal(in.phase, "requesting");
    hubsub_free(hs2);
    assert_int_equal(f->nstates, 0);
}


/* The callback id of a URL (its last 32 characters). */
static const char *
cb_id(const char *callback)
{
    size_t n = strlen(callback);
    assert_true(n > 32);
    return callback + n - 32;
}

/* hubsub/unknown_path_410: a POST to a callback path no subscription has
 * (a crashed process's leftover) is answered 410, so the hub drops it at
 * its next delivery; with an id key only once hubsub_settle said every
 * wanted subscription is asked for (503 before: it may be ours from
 * before a restart); other paths stay 404. */
static void
test_unknown_path_410(void **state)
{
    struct fx *f = *state;
    char url[200];
    fx_hubsub(f);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/cb/%s",
             hubsub_port(f->hs), "0123456789abcdef0123456789abcdef");
    assert_int_equal(fx_post(f, url, "sha256=00", "x", 1), 410);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/other",
             hubsub_port(f->hs));
    assert_int_equal(fx_post(f, url, NULL, "x", 1), 404);
    hubsub_free(f->hs);

    struct hubsub_opts o;
    fx_hubsub_opts(f, &o);
    o.id_key = "00112233445566778899aabbccddeeff"
               "00112233445566778899aabbccddeeff";
    fx_hubsub_with(f, &o);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/x/cb/%s",
             hubsub_port(f->hs), "0123456789abcdef0123456789abcdef");
    assert_int_equal(fx_post(f, url, "sha256=00", "x", 1), 503);
    hubsub_settle(f->hs);
    assert_int_equal(fx_post(f, url, "sha256=00", "x", 1), 410);
    struct hubsub_stats st;
    hubsub_stats(f->hs, &st);
    assert_int_equal(st.gone, 1);
    assert_int_equal(f->nnotes, 0);
}

/* hubsub/key_same_subscription: with an id key, the callback id follows
 * from the key, the hub and the topic: a second hubsub (a restart) with
 * the same key subscribes with the same callback (and a secret of its
 * own); a delivery signed with the secret the first one gave is answered
 * 503 until its subscription is verified (the hub delivers it again, with
 * the new secret), one signed with the new secret is taken; after the
 * verification too (a delivery signed before it may still come: a 2xx
 * would lose it). Another topic, hub
 * or key gives another path. A key that is not 64 hex digits is
 * refused. */
static void
test_key_same_subscription(void **state)
{
    struct fx *f = *state;
    const char *T = T_BASE "keyed";
    static const char K1[] = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
                             "0f1e2d3c4b5a69788796a5b4c3d2e1f0";
    char k2[HUBSUB_KEY_HEX + 1], err[256] = "";
    struct hubsub_opts o;
    assert_int_equal(hubsub_key_new(k2, sizeof(k2)), 0);
    assert_int_equal(strlen(k2), HUBSUB_KEY_HEX);
    assert_int_equal(strspn(k2, "0123456789abcdef"), HUBSUB_KEY_HEX);
    assert_int_equal(hubsub_key_new(k2, HUBSUB_KEY_HEX), RS_EINVAL);
    fx_hubsub_opts(f, &o);
    o.id_key = "0f1e2d";
    assert_null(hubsub_new(&o, err, sizeof(err)));
    assert_non_null(strstr(err, "id key"));

    fx_hubsub_opts(f, &o);
    o.id_key = K1;
    f->fh_default = (struct fh_act){ .status = 202, .verify_lease = 60 };
    fx_hubsub_with(f, &o);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T), 0);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T_BASE "other"), 0);
    wait_active(f, 2, 5000);
    struct hubsub_info in;
    fx_info(f, T, &in);
    char id1[33];
    snprintf(id1, sizeof(id1), "%s", cb_id(in.callback));
    assert_int_equal(f->nfh, 2);
    int first = strcmp(f->fh[0].topic, T) == 0 ? 0 : 1;
    char secret[256];
    snprintf(secret, sizeof(secret), "%s", f->fh[first].secret);
    assert_string_not_equal(cb_id(f->fh[0].callback), cb_id(f->fh[1].callback));
    assert_string_not_equal(f->fh[0].secret, f->fh[1].secret);
    hubsub_free(f->hs);      /* the process is gone; the hub keeps it */
    f->hs = NULL;

    /* the next process: same key, the hub still delivering to the path */
    f->fh_default = (struct fh_act){ .hold = true };
    fx_hubsub_with(f, &o);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T), 0);
    fx_info(f, T, &in);
    assert_string_equal(cb_id(in.callback), id1);
    wait_fh(f, 3, 5000);
    assert_string_equal(cb_id(f->fh[2].callback), id1);
    assert_string_not_equal(f->fh[2].secret, secret);
    size_t len;
    char *body = tu_read_data(NOTIF, &len);
    char sig[200], sig2[200];
    hmac_sig("sha256", EVP_sha256(), secret, body, len, sig, sizeof(sig));
    hmac_sig("sha256", EVP_sha256(), f->fh[2].secret, body, len, sig2,
             sizeof(sig2));
    assert_int_equal(fx_post(f, in.callback, sig, body, len), 503);
    assert_int_equal(f->nnotes, 0);
    assert_int_equal(fx_post(f, in.callback, sig2, body, len), 204);
    assert_int_equal(f->nnotes, 1);
    assert_memory_equal(f->notes[0].body, body, len);
    char q[400], url[900];
    snprintf(q, sizeof(q), "hub.mode=subscribe&hub.topic=%s"
             "&hub.challenge=c&hub.lease_seconds=60",
             "http%3A%2F%2Fexample.com%2Fhubsub%2Fkeyed");
    cb_query(url, sizeof(url), in.callback, q);
    assert_int_equal(fx_get(f, url, NULL), 200);
    /* verified, the old secret's signature still gets 503, not a 2xx
     * that would lose it: it may be the hub's, in flight */
    assert_int_equal(fx_post(f, in.callback, sig, body, len), 503);
    assert_int_equal(f->nnotes, 1);
    free(body);
    hubsub_free(f->hs);
    f->hs = NULL;

    /* another hub URL, another key: other paths */
    o.id_key = k2;
    f->fh_default = (struct fh_act){ .hold = true };
    fx_hubsub_with(f, &o);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T), 0);
    fx_info(f, T, &in);
    assert_string_not_equal(cb_id(in.callback), id1);
    hubsub_free(f->hs);
    f->hs = NULL;
    o.id_key = K1;
    fx_hubsub_with(f, &o);
    char hub2[128];
    snprintf(hub2, sizeof(hub2), "%s2", f->fake_url);
    assert_int_equal(hubsub_subscribe(f->hs, hub2, T), 0);
    fx_info(f, T, &in);
    assert_string_not_equal(cb_id(in.callback), id1);
}

/* hubsub/key_resubscribe_same_path: with an id key a topic subscribed
 * again after an unsubscribe has the path of the one that left; the live
 * subscription answers on it, not the 410 of the one that left. */
static void
test_key_resubscribe_same_path(void **state)
{
    struct fx *f = *state;
    const char *T = T_BASE "again";
    struct hubsub_opts o;
    fx_hubsub_opts(f, &o);
    o.id_key = "00112233445566778899aabbccddeeff"
               "00112233445566778899aabbccddeeff";
    f->fh_default = (struct fh_act){ .status = 202, .verify_lease = 60 };
    fx_hubsub_with(f, &o);
    hubsub_settle(f->hs);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T), 0);
    wait_active(f, 1, 5000);
    assert_int_equal(hubsub_unsubscribe(f->hs, T), 0);
    wait_count(f, &f->nstate[HUBSUB_UNSUBSCRIBED], 1, 5000, "unsubscribed",
               true);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T), 0);
    wait_active(f, 2, 5000);
    struct hubsub_info in;
    fx_info(f, T, &in);
    assert_string_equal(in.phase, "active");
    assert_string_equal(f->fh[0].callback, f->fh[2].callback);
    size_t len;
    char *body = tu_read_data(NOTIF, &len);
    char sig[200];
    hmac_sig("sha256", EVP_sha256(), f->fh[2].secret, body, len, sig,
             sizeof(sig));
    assert_int_equal(fx_post(f, in.callback, sig, body, len), 204);
    assert_int_equal(f->nnotes, 1);
    free(body);
}

/* hubsub/probe_not_ready: while a lease runs the hub's readiness page is
 * probed; a 503 ("redis unavailable") for probe_grace_ms is UNREACHABLE
 * with the hub's words, reported once; a 404 after that (a hub without
 * such a page: it answers, which is all it can tell) is ACTIVE again.
 * No probe while no lease runs. */
static void
test_probe_not_ready(void **state)
{
    struct fx *f = *state;
    const char *T = T_BASE "probe";
    struct hubsub_opts o;
    fx_hubsub_opts(f, &o);
    o.probe_ms = 100;
    o.probe_grace_ms = 400;
    f->fh_default = (struct fh_act){ .status = 202, .verify_lease = 60 };
    f->readyz = 200;
    fx_hubsub_with(f, &o);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T), 0);
    fx_run(f, NULL, 50);
    assert_int_equal(f->nreadyz, 0);
    wait_active(f, 1, 5000);
    wait_count(f, &f->nreadyz, 3, 3000, "probes", false);
    struct hubsub_info in;
    fx_info(f, T, &in);
    assert_string_equal(in.hub_state, "ok");
    assert_int_equal(f->nstates, 1);

    f->readyz = 503;
    rs_time_t t0 = rs_time_now();
    wait_count(f, &f->nstate[HUBSUB_UNREACHABLE], 1, 3000, "unreachable",
               true);
    double took = (double)(rs_time_now() - t0) / 1e6;
    assert_true(took >= 0.3 && took < 1.5);
    assert_non_null(strstr(f->last_why,
                           "the hub is not ready: 503 redis unavailable"));
    fx_info(f, T, &in);
    assert_string_equal(in.hub_state, "down");
    assert_non_null(strstr(in.hub_why, "503"));
    assert_true(in.active);               /* the lease still runs */
    fx_run(f, NULL, 400);
    assert_int_equal(count_state(f, HUBSUB_UNREACHABLE), 1);

    f->readyz = 404;
    wait_active(f, 2, 3000);
    assert_string_equal(f->last_why, "the hub answers again");
    fx_info(f, T, &in);
    assert_string_equal(in.hub_state, "ok");
    assert_string_equal(in.hub_why, "");
    struct hubsub_stats st;
    hubsub_stats(f->hs, &st);
    assert_true(st.probes >= 6);
    assert_true(st.probe_failures >= 1);
    assert_int_equal(f->nfh, 1);          /* no subscribe meanwhile */

    assert_int_equal(hubsub_unsubscribe(f->hs, T), 0);
    int n = f->nreadyz;
    fx_run(f, NULL, 300);
    assert_int_equal(f->nreadyz, n);      /* no lease, no probe */
}

/* hubsub/renewal_recovers: a renewal that fails is reported FAILED; the
 * renewal verified after it (the lease never ran out) is reported ACTIVE
 * again, or the caller would take the subscription for failing for
 * good. */
static void
test_renewal_recovers(void **state)
{
    struct fx *f = *state;
    const char *T = T_BASE "renewfail";
    f->script[0] = (struct fh_act){ .status = 202, .verify_lease = 2 };
    f->nscript = 1;
    f->fh_default = (struct fh_act){ .status = 500 };
    fx_hubsub(f);
    assert_int_equal(hubsub_subscribe(f->hs, f->fake_url, T), 0);
    wait_active(f, 1, 5000);
    wait_count(f, &f->nstate[HUBSUB_FAILED], 1, 5000, "failed renewals",
               false);
    struct hubsub_info in;
    fx_info(f, T, &in);
    assert_true(in.active);
    assert_string_equal(in.phase, "backoff");
    /* the hub verifies the renewal after all (one it took late) */
    char q[400], url[900];
    snprintf(q, sizeof(q), "hub.mode=subscribe&hub.topic=%s"
             "&hub.challenge=late&hub.lease_seconds=60",
             "http%3A%2F%2Fexample.com%2Fhubsub%2Frenewfail");
    cb_query(url, sizeof(url), in.callback, q);
    assert_int_equal(fx_get(f, url, NULL), 200);
    assert_int_equal(f->nactive, 2);
    assert_int_equal(count_state(f, HUBSUB_EXPIRED), 0);
}

/* hubsub/probe_hub_down: against rshub: stopped, the hub is UNREACHABLE
 * within probe_grace_ms and a probe; restarted on the same port (and
 * store), ACTIVE again, and it delivers. */
static void
test_probe_hub_down(void **state)
{
    struct fx *f = *state;
    const char *T = T_BASE "probedown";
    /* a restarted hub (a new node) waits out the old one's delivery lock */
    static const char *const args[] = { "--delivery-lock-ttl", "2s", NULL };
    int port = tu_hub_spawn(f->g, 0, "rshub3:", args, &f->extra_hub, NULL);
    char hub[64];
    snprintf(hub, sizeof(hub), "http://127.0.0.1:%d/hub", port);
    struct hubsub_opts o;
    fx_hubsub_opts(f, &o);
    o.probe_ms = 200;
    o.probe_grace_ms = 600;
    fx_hubsub_with(f, &o);
    assert_int_equal(hubsub_subscribe(f->hs, hub, T), 0);
    wait_active(f, 1, 15000);
    struct hubsub_info in;
    fx_info(f, T, &in);
    fx_hub_lists(f, port, in.callback, true);
    fx_run(f, NULL, 500);
    assert_int_equal(f->nstates, 1);      /* a ready hub: nothing to say */

    tu_proc_stop(f->extra_hub);
    f->extra_hub = 0;
    int held = hold_port(port);
    wait_count(f, &f->nstate[HUBSUB_UNREACHABLE], 1, 5000, "unreachable",
               true);
    assert_true(strstr(f->last_why, "hub unreachable") != NULL ||
                strstr(f->last_why, "not ready") != NULL);
    close(held);
    assert_int_equal(tu_hub_spawn(f->g, port, "rshub3:", args,
                                  &f->extra_hub, NULL), port);
    wait_active(f, 2, 10000);
    size_t len;
    char *body = tu_read_data(NOTIF, &len);
    char id[64];
    fx_publish(f, hub, T, body, len, id, sizeof(id));
    wait_notes(f, 1, 10000);
    assert_string_equal(f->notes[0].id, id);
    free(body);
}

#define TEST(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int
main(void)
{
    /* a client that resets mid-reply must not kill the test's servers */
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        TEST(test_options),
        TEST(test_alloc_failures),
        TEST(test_deliver),
        TEST(test_refused_redelivered),
        TEST(test_unsubscribe),
        TEST(test_renew),
        TEST(test_hub_down_then_up),
        TEST(test_verification),
        TEST(test_signatures),
        TEST(test_oversize),
        TEST(test_retry_schedule),
        TEST(test_verify_timeout),
        TEST(test_expiry),
        TEST(test_unsub_from_on_state),
        TEST(test_gone_cap),
        TEST(test_free_in_flight),
        TEST(test_unknown_path_410),
        TEST(test_key_same_subscription),
        TEST(test_key_resubscribe_same_path),
        TEST(test_probe_not_ready),
        TEST(test_renewal_recovers),
        TEST(test_probe_hub_down),
    };
    return cmocka_run_group_tests(tests, grp_setup, grp_teardown);
}
