/*
 * hubsub.c - rssub as a WebSub subscriber (hubsub.h). Layers: helpers
 * (randomness, ids derived from the caller's key, form encoding,
 * signatures), the subscription state machine (requests to hubs,
 * retry/renewal/lease timers), the probe of the hub while a lease runs
 * (a machine of its own per subscription), and the callback server
 * (verification of intent, content distribution). Persisting what arrives
 * is the caller's; the HTTP client is rs_http's.
 */
#include "hubsub.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#define RS_LOG_MODULE "hubsub"
#include "rs_alloc.h"
#include "rs_backoff.h"
#include "rs_hex.h"
#include "rs_http.h"
#include "rs_httpguard.h"
#include "rs_log.h"
#include "rs_retry_after.h"
#include "rs_sock.h"
#include "rs_time.h"
#include "rs_url.h"

#define HUBSUB_ID_BYTES 16               /* callback path: /cb/<32 hex> */
#define HUBSUB_ID_HEX (2 * HUBSUB_ID_BYTES)
#define HUBSUB_SECRET_BYTES 32           /* hub.secret: 64 hex (< 200) */
#define HUBSUB_CB_PREFIX "/cb/"
#define HUBSUB_MAX_BODY ((size_t)10 << 20)
#define HUBSUB_VERIFY_WAIT_MS 60000u
#define HUBSUB_REQ_TIMEOUT_MS 30000u     /* one request to a hub */
#define HUBSUB_MAX_HEADERS 65536
#define HUBSUB_RETRY_AFTER_MAX_MS (3600u * 1000u)
#define HUBSUB_UNSUB_TRIES 4             /* then the 410s do the job */
#define HUBSUB_LEASE_MAX_S (366u * 24u * 3600u)
#define HUBSUB_CHALLENGE_MAX 1024
#define HUBSUB_TOPIC_MAX 8192
#define HUBSUB_WHY_MAX 512
#define HUBSUB_PROBE_TIMEOUT_MIN_MS 1000u
#define HUBSUB_PROBE_TIMEOUT_MAX_MS 10000u
#define HUBSUB_PROBE_MIN_GAP_MS 100u     /* between two probes, at least */
#define HUBSUB_PROBE_MAX_BODY 4096       /* a readiness page is a word */

/* Where a subscription is. Subscribing: NEW -> REQUESTING -> VERIFYING ->
 * IDLE (active; the timer renews: -> REQUESTING), with -> BACKOFF on any
 * failure (the timer tries again). Leaving: UNSUB_REQUESTING ->
 * UNSUB_VERIFYING -> GONE, with UNSUB_BACKOFF between tries. From
 * UNSUB_REQUESTING on, the callback path answers 410. */
enum sub_phase {
    SUB_NEW,              /* timer (0 ms): the first request */
    SUB_REQUESTING,       /* subscribe request out (s->call) */
    SUB_VERIFYING,        /* the hub said 2xx; timer: give up waiting */
    SUB_BACKOFF,          /* timer: try again */
    SUB_IDLE,             /* active; timer: renew */
    SUB_UNSUB_REQUESTING, /* unsubscribe request out */
    SUB_UNSUB_VERIFYING,  /* timer: stop waiting */
    SUB_UNSUB_BACKOFF,    /* timer: ask again */
    SUB_GONE,             /* no timer, no request; kept for the 410 */
};

static const char *const phase_names[] = {
    [SUB_NEW] = "requesting",       [SUB_REQUESTING] = "requesting",
    [SUB_VERIFYING] = "verifying",  [SUB_BACKOFF] = "backoff",
    [SUB_IDLE] = "active",          [SUB_UNSUB_REQUESTING] = "unsubscribing",
    [SUB_UNSUB_VERIFYING] = "unsubscribing",
    [SUB_UNSUB_BACKOFF] = "unsubscribing", [SUB_GONE] = "gone",
};

/* Whether the hub can deliver, as its probe says (hubsub_opts.probe_ms):
 * OFF while no lease runs; OK -> DOUBT at a failed probe -> DOWN once the
 * hub has not answered well for probe_grace_ms (UNREACHABLE reported);
 * any good answer -> OK (ACTIVE reported when it was DOWN). Apart from
 * enum sub_phase: a renewal and a probe fail or succeed independently. */
enum probe_state { PROBE_OFF, PROBE_OK, PROBE_DOUBT, PROBE_DOWN };

static const char *const probe_names[] = {
    [PROBE_OFF] = "off", [PROBE_OK] = "ok", [PROBE_DOUBT] = "doubt",
    [PROBE_DOWN] = "down",
};

struct sub;

/* One request to a hub. It outlives its subscription when detached: the
 * subscription moved on (or was freed) and rs_http will still run on_done
 * once, which then only frees this. */
struct call {
    struct sub *s;               /* NULL once detached */
    struct rs_http_req *req;
};

struct sub {
    struct hubsub *h;
    struct sub *next;            /* h->subs, oldest first */
    enum sub_phase phase;
    char *hub_url;
    char *topic;
    char *callback;              /* cb_base + "cb/" + id */
    char id[HUBSUB_ID_HEX + 1];
    char secret[2 * HUBSUB_SECRET_BYTES + 1];
    struct call *call;           /* the request out, or NULL */
    struct event *timer;         /* the phase's timer (see enum sub_phase) */
    struct event *lease_timer;   /* armed while active */
    rs_time_t next_attempt;      /* wall clock of timer; RS_TIME_NONE */
    bool active;                 /* a verified lease runs (lease_timer) */
    unsigned lease_s;            /* granted at the last verification */
    rs_time_t lease_end;         /* wall clock; RS_TIME_NONE if !active */
    unsigned fails;              /* consecutive; 0 after a verification */
    bool verified;               /* a subscribe was verified in this
                                    process (its secret is the hub's) */
    bool told_bad;               /* the last on_state report was not
                                    ACTIVE: the next good news is told */
    /* the probe (enum probe_state); its timer runs while a lease does */
    enum probe_state probe;
    char *probe_url;             /* "readyz" relative to hub_url */
    struct call *probe_call;     /* the GET out, or NULL */
    struct event *probe_timer;
    int64_t hub_ok_us;           /* monotonic: the hub's last good word (a
                                    probe answered, a verification) */
    char hub_why[HUBSUB_WHY_MAX];   /* why not OK; "" when OK */
};

struct hubsub {
    struct hubsub_opts o;        /* listen_host, callback_base: see below */
    char *listen_host;
    char *cb_base;               /* public base URL, ends with '/' */
    char *auth_hdr;              /* "Authorization: Bearer ..." or NULL */
    char *client_cert, *client_key;
    struct evhttp *http;
    struct rs_httpguard *guard;  /* http's deadlines and caps */
    int port;
    struct sub *subs, *tail;     /* oldest first, GONE ones included */
    unsigned ngone;              /* subs in SUB_GONE */
    struct event *reap;          /* frees GONE subs over HUBSUB_GONE_MAX
                                    at a safe point (no callback of ours on
                                    the stack) */
    /* 1 s, 2 s, 4 s ... HUBSUB_RETRY_MAX_MS, each +-10 %, so that
     * subscribers that lost the same hub do not all come back in the same
     * second */
    struct rs_backoff backoff;
    struct hubsub_stats st;      /* subscriptions/active computed on read */
    unsigned char key[HUBSUB_KEY_HEX / 2];   /* id_key's bytes */
    bool keyed;                  /* id_key given: ids are derived */
    bool settled;                /* unknown paths: 410 (else 503) */
};

/* ---------------------------------------------------------------- helpers */

static int
random_hex(char *out, size_t nbytes)
{
    unsigned char rnd[64];
    if (nbytes > sizeof(rnd) || RAND_bytes(rnd, (int)nbytes) != 1)
        return RS_EIO;
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < nbytes; i++) {
        out[2 * i] = hex[rnd[i] >> 4];
        out[2 * i + 1] = hex[rnd[i] & 15];
    }
    out[2 * nbytes] = '\0';
    OPENSSL_cleanse(rnd, sizeof(rnd));
    return 0;
}

int
hubsub_key_new(char *out, size_t outsz)
{
    if (out == NULL || outsz < HUBSUB_KEY_HEX + 1)
        return RS_EINVAL;
    return random_hex(out, HUBSUB_KEY_HEX / 2);
}

/* hex (exactly 2 * n digits) into n bytes; false if it is not that */
static bool
key_parse(const char *hex, unsigned char *out, size_t n)
{
    if (strlen(hex) != 2 * n)
        return false;
    for (size_t i = 0; i < 2 * n; i++) {
        char c = hex[i];
        int v = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (v < 0)
            return false;
        if (i % 2 == 0)
            out[i / 2] = (unsigned char)(v << 4);
        else
            out[i / 2] |= (unsigned char)v;
    }
    return true;
}

/* HMAC-SHA256(key, label NUL hub_url NUL topic) as hex, nbytes of it:
 * the same (key, hub, topic) give the same callback id in every process,
 * and one id tells nothing of another, or of the key. */
static int
derive_hex(const struct hubsub *h, const char *label, const char *hub_url,
           const char *topic, char *out, size_t nbytes)
{
    size_t ll = strlen(label) + 1, hl = strlen(hub_url) + 1,
           tl = strlen(topic);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdl = 0;
    char *msg = rs_malloc(ll + hl + tl);

    if (msg == NULL)
        return RS_ENOMEM;
    memcpy(msg, label, ll);
    memcpy(msg + ll, hub_url, hl);
    memcpy(msg + ll + hl, topic, tl);
    unsigned char *r = HMAC(EVP_sha256(), h->key, (int)sizeof(h->key),
                            (const unsigned char *)msg, ll + hl + tl, md,
                            &mdl);
    rs_free(msg);
    if (r == NULL || mdl < nbytes)
        return RS_EIO;
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < nbytes; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[2 * nbytes] = '\0';
    OPENSSL_cleanse(md, sizeof(md));
    return 0;
}

/* Renew at 80 % of the lease: room for a few retries before it ends. */
static uint64_t
renew_ms(unsigned lease_s)
{
    uint64_t ms = (uint64_t)lease_s * 800;
    return ms < 500 ? 500 : ms;
}

/* Retry-After (delta-seconds or an HTTP-date): ms, capped, or 0. */
static uint64_t
retry_after_ms(const char *v)
{
    uint64_t ms = 0;

    if (v == NULL || rs_retry_after_parse(v, (int64_t)time(NULL), &ms) != 0)
        return 0;
    return ms > HUBSUB_RETRY_AFTER_MAX_MS ? HUBSUB_RETRY_AFTER_MAX_MS : ms;
}

/* application/x-www-form-urlencoded from key, value pairs (NULL-ended);
 * a NULL value skips its pair. */
static char *
form_encode(const char *const *kv)
{
    size_t cap = 1;
    for (size_t i = 0; kv[i] != NULL; i += 2)
        if (kv[i + 1] != NULL)
            cap += strlen(kv[i]) * 3 + strlen(kv[i + 1]) * 3 + 2;
    char *out = rs_malloc(cap);
    if (out == NULL)
        return NULL;
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (size_t i = 0; kv[i] != NULL; i += 2) {
        if (kv[i + 1] == NULL)
            continue;
        if (n > 0)
            out[n++] = '&';
        for (int k = 0; k < 2; k++) {
            for (const unsigned char *p = (const unsigned char *)kv[i + k];
                 *p != '\0'; p++) {
                if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' ||
                    *p == '_' || *p == '~') {
                    out[n++] = (char)*p;
                } else {
                    out[n++] = '%';
                    out[n++] = hex[*p >> 4];
                    out[n++] = hex[*p & 15];
                }
            }
            if (k == 0)
                out[n++] = '=';
        }
    }
    out[n] = '\0';
    return out;
}

/* X-Hub-Signature: METHOD=HEX with METHOD sha1, sha256, sha384 or sha512,
 * HMAC over the exact body keyed with the secret we gave the hub. The
 * comparison takes the same time wherever the first wrong byte is. */
static bool
sig_ok(const char *secret, const char *hdr, const char *body, size_t len)
{
    static const struct {
        const char *name;
        const EVP_MD *(*md)(void);
    } algs[] = {
        { "sha1", EVP_sha1 },
        { "sha256", EVP_sha256 },
        { "sha384", EVP_sha384 },
        { "sha512", EVP_sha512 },
    };
    if (hdr == NULL)
        return false;
    while (*hdr == ' ' || *hdr == '\t')
        hdr++;
    const char *eq = strchr(hdr, '=');
    if (eq == NULL)
        return false;
    const EVP_MD *md = NULL;
    for (size_t i = 0; i < sizeof(algs) / sizeof(algs[0]); i++)
        if (strlen(algs[i].name) == (size_t)(eq - hdr) &&
            strncasecmp(algs[i].name, hdr, (size_t)(eq - hdr)) == 0)
            md = algs[i].md();
    if (md == NULL)
        return false;
    const char *hex = eq + 1;
    size_t hl = strlen(hex);
    while (hl > 0 && (hex[hl - 1] == ' ' || hex[hl - 1] == '\t'))
        hl--;
    int mdlen = EVP_MD_size(md);
    if (mdlen <= 0 || mdlen > EVP_MAX_MD_SIZE || hl != 2 * (size_t)mdlen)
        return false;
    unsigned char got[EVP_MAX_MD_SIZE], want[EVP_MAX_MD_SIZE];
    for (int i = 0; i < mdlen; i++) {
        int hi = rs_hexval((unsigned char)hex[2 * i]);
        int lo = rs_hexval((unsigned char)hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        got[i] = (unsigned char)(hi << 4 | lo);
    }
    unsigned int wl = 0;
    if (HMAC(md, secret, (int)strlen(secret), (const unsigned char *)body,
             len, want, &wl) == NULL || wl != (unsigned)mdlen)
        return false;
    return CRYPTO_memcmp(got, want, (size_t)mdlen) == 0;
}

static void
reply_text(struct evhttp_request *req, int code, const char *reason,
           const char *text)
{
    struct evbuffer *b = evbuffer_new();
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; charset=utf-8");
    if (b != NULL)
        evbuffer_add(b, text, strlen(text));
    evhttp_send_reply(req, code, reason, b);
    if (b != NULL)
        evbuffer_free(b);
}

/* ------------------------------------------------------ the state machine */

static void sub_attempt(struct sub *s);
static void unsub_attempt(struct sub *s);

static void
sub_set_phase(struct sub *s, enum sub_phase p)
{
    if (s->phase == p)
        return;
    rs_log_kv(RS_LOG_DEBUG, "subscription", "topic", s->topic, "from",
              phase_names[s->phase], "to", phase_names[p], NULL);
    if (p == SUB_GONE)
        s->h->ngone++;
    s->phase = p;
}

__attribute__((format(printf, 3, 4))) static void
sub_report(struct sub *s, enum hubsub_state st, const char *fmt, ...)
{
    struct hubsub *h = s->h;
    if (h->o.on_state == NULL) {
        s->told_bad = st != HUBSUB_ACTIVE;
        return;
    }
    char why[HUBSUB_WHY_MAX];
    va_list ap;
    s->told_bad = st != HUBSUB_ACTIVE;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    h->o.on_state(h->o.ud, s->topic, st, why);
}

static void
sub_arm(struct sub *s, uint64_t ms)
{
    struct timeval tv = rs_time_tv_ms(ms);
    evtimer_add(s->timer, &tv);
    s->next_attempt = rs_time_now() + (rs_time_t)ms * 1000;
}

static void
sub_disarm(struct sub *s)
{
    evtimer_del(s->timer);
    s->next_attempt = RS_TIME_NONE;
}

static void probe_stop(struct sub *s);

static void
sub_lease_stop(struct sub *s)
{
    evtimer_del(s->lease_timer);
    s->active = false;
    s->lease_end = RS_TIME_NONE;
    probe_stop(s);   /* no lease: the hub owes us nothing */
}

/* Let go of the request out, if any: its on_done will only free the call. */
static void
sub_detach(struct sub *s)
{
    if (s->call == NULL)
        return;
    s->call->s = NULL;
    rs_http_cancel(s->call->req);
    s->call = NULL;
}

static void on_hub_answer(void *ud, struct rs_http_req *req,
                          const struct rs_http_result *res);

/* ------------------------------------------------------ the hub's probe */

/* A lease says the hub will deliver; nothing says when it cannot (down,
 * or up without its store). Without the probe a WebSub mirror learnt
 * that only at the next renewal or safety pull, showing itself live all
 * along. */

static void
probe_set(struct sub *s, enum probe_state to, const char *why)
{
    if (s->probe == to)
        return;
    rs_log_kv(to == PROBE_DOWN || s->probe == PROBE_DOWN ? RS_LOG_INFO
              : RS_LOG_DEBUG, "websub hub probe", "topic", s->topic, "hub",
              s->hub_url, "from", probe_names[s->probe], "to",
              probe_names[to], "why", why, NULL);
    s->probe = to;
}

static void
probe_detach(struct sub *s)
{
    if (s->probe_call == NULL)
        return;
    s->probe_call->s = NULL;
    rs_http_cancel(s->probe_call->req);
    s->probe_call = NULL;
}

static void
probe_arm(struct sub *s, uint64_t ms)
{
    struct timeval tv = rs_time_tv_ms(ms);
    evtimer_add(s->probe_timer, &tv);
}

/* A verified lease: the hub answered just now; probe from here on. */
static void
probe_start(struct sub *s)
{
    if (s->h->o.probe_ms == 0 || s->probe_timer == NULL)
        return;
    s->hub_ok_us = rs_time_mono_us();
    s->hub_why[0] = '\0';
    probe_set(s, PROBE_OK, "the hub verified the subscription");
    if (s->probe_call == NULL)
        probe_arm(s, s->h->o.probe_ms);
}

static void
probe_stop(struct sub *s)
{
    probe_detach(s);
    if (s->probe_timer != NULL)
        evtimer_del(s->probe_timer);
    s->hub_why[0] = '\0';
    probe_set(s, PROBE_OFF, "no lease");
}

/* The hub answered well: it can deliver again if it could not. */
static void
probe_good(struct sub *s)
{
    bool was_down = s->probe == PROBE_DOWN;
    s->hub_ok_us = rs_time_mono_us();
    s->hub_why[0] = '\0';
    probe_set(s, PROBE_OK, "the hub answers");
    probe_arm(s, s->h->o.probe_ms);
    /* A renewal that failed while the hub was down waits for its backoff
     * (up to minutes): try it now, the hub is back. Its verification
     * tells the good news; until then the subscription is not fine. */
    if (was_down && s->phase == SUB_BACKOFF) {
        sub_attempt(s);
        return;
    }
    if (was_down && s->fails == 0 && s->told_bad)
        sub_report(s, HUBSUB_ACTIVE, "the hub answers again");
}

static void
probe_bad(struct sub *s, const char *why)
{
    struct hubsub *h = s->h;
    int64_t now = rs_time_mono_us();
    int64_t left = s->hub_ok_us + (int64_t)h->o.probe_grace_ms * 1000 - now;

    h->st.probe_failures++;
    snprintf(s->hub_why, sizeof(s->hub_why), "%s", why);
    if (left > 0) {
        probe_set(s, PROBE_DOUBT, why);
        /* the deciding probe at the end of the grace, not a period late */
        uint64_t next = (uint64_t)(left / 1000);
        if (next > h->o.probe_ms)
            next = h->o.probe_ms;
        probe_arm(s, next < HUBSUB_PROBE_MIN_GAP_MS ? HUBSUB_PROBE_MIN_GAP_MS
                                                    : next);
        return;
    }
    probe_arm(s, h->o.probe_ms);
    if (s->probe == PROBE_DOWN)
        return;
    probe_set(s, PROBE_DOWN, why);
    sub_report(s, HUBSUB_UNREACHABLE, "%.400s (for %.1f s)", why,
               (double)(now - s->hub_ok_us) / 1e6);
}

static void
on_probe_done(void *ud, struct rs_http_req *req,
              const struct rs_http_result *res)
{
    (void)req;
    struct call *c = ud;
    struct sub *s = c->s;
    rs_free(c);
    if (s == NULL)
        return;
    s->probe_call = NULL;
    if (res->rc == RS_ECANCELED)
        return;                    /* rs_http is being freed */
    /* Any answer but a 5xx says the hub serves: a hub with no readiness
     * page answers 404, one that wants a method 405, and so on. A 5xx is
     * the hub (or the proxy in front of it) saying it cannot. */
    if ((res->rc == 0 && res->status < 500) || res->rc == RS_ETOOBIG) {
        probe_good(s);
        return;
    }
    char why[HUBSUB_WHY_MAX];
    if (res->rc != 0) {
        snprintf(why, sizeof(why), "hub unreachable: %.300s", res->errstr);
    } else {
        /* the hub's one-line reason, printable bytes only */
        char line[200];
        size_t n = 0;
        for (size_t i = 0; i < res->body_len && n + 1 < sizeof(line); i++) {
            unsigned char ch = (unsigned char)res->body[i];
            if (ch == '\n' || ch == '\r')
                break;
            line[n++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
        }
        line[n] = '\0';
        snprintf(why, sizeof(why), "the hub is not ready: %ld%s%s",
                 res->status, n > 0 ? " " : "", line);
    }
    probe_bad(s, why);
}

static void
on_probe_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct sub *s = arg;
    struct hubsub *h = s->h;
    if (s->probe == PROBE_OFF || s->probe_call != NULL)
        return;
    unsigned tmo = h->o.probe_ms;
    if (tmo < HUBSUB_PROBE_TIMEOUT_MIN_MS)
        tmo = HUBSUB_PROBE_TIMEOUT_MIN_MS;
    if (tmo > HUBSUB_PROBE_TIMEOUT_MAX_MS)
        tmo = HUBSUB_PROBE_TIMEOUT_MAX_MS;
    struct call *c = rs_calloc(1, sizeof(*c));
    struct rs_http_req_opts ro = {
        .url = s->probe_url,
        .timeout_ms = tmo,
        .max_body = HUBSUB_PROBE_MAX_BODY,
        .own_refusal = true,   /* a 401 here is no word on the Source */
        .on_done = on_probe_done,
        .ud = c,
    };
    int rc = c != NULL ? rs_http_request(h->o.http, &ro, &c->req)
                       : RS_ENOMEM;
    if (rc != 0) {
        char why[128];
        rs_free(c);
        snprintf(why, sizeof(why), "cannot probe the hub: %s",
                 rs_strerror(rc));
        probe_bad(s, why);
        return;
    }
    c->s = s;
    s->probe_call = c;
    h->st.probes++;
}

/* POST the subscribe (or unsubscribe) request to the hub. */
static int
sub_send(struct sub *s, bool unsub)
{
    struct hubsub *h = s->h;
    char lease[16];
    snprintf(lease, sizeof(lease), "%u", h->o.lease_seconds);
    const char *kv[] = {
        "hub.mode", unsub ? "unsubscribe" : "subscribe",
        "hub.topic", s->topic,
        "hub.callback", s->callback,
        "hub.secret", unsub ? NULL : s->secret,
        "hub.lease_seconds", unsub || h->o.lease_seconds == 0 ? NULL : lease,
        NULL,
    };
    const char *hdrs[] = {
        "Content-Type: application/x-www-form-urlencoded",
        "Expect:",   /* no 100-continue round trip for a small form */
        h->auth_hdr,
        NULL,
    };
    if (h->client_cert != NULL) {
        /* The first request to a hub tells the client which certificate
         * its origin gets; an origin that has credentials keeps them. */
        struct rs_http_cred cr = { .origin = s->hub_url, .realm = "hub",
                                   .client_cert = h->client_cert,
                                   .client_key = h->client_key };
        int crc = rs_http_cred_add(h->o.http, &cr);
        if (crc != 0 && crc != RS_ESTATE)
            return crc;
    }
    char *body = form_encode(kv);
    struct call *c = rs_calloc(1, sizeof(*c));
    int rc = RS_ENOMEM;
    if (body == NULL || c == NULL)
        goto out;
    struct rs_http_req_opts ro = {
        .method = "POST",
        .url = s->hub_url,
        .headers = hdrs,
        .body = body,
        .body_len = strlen(body),
        .timeout_ms = HUBSUB_REQ_TIMEOUT_MS,
        .max_body = 64 * 1024,
        .on_done = on_hub_answer,
        .ud = c,
    };
    rc = rs_http_request(h->o.http, &ro, &c->req);
    if (rc != 0)
        goto out;
    c->s = s;
    s->call = c;
    c = NULL;
    h->st.requests++;
out:
    rs_free(c);
    rs_free(body);
    return rc;
}

/* A subscribe attempt failed: try again after the backoff (slow: after
 * HUBSUB_RETRY_SLOW_MS), not before min_ms. */
static void
sub_failed(struct sub *s, bool slow, uint64_t min_ms, const char *why)
{
    struct hubsub *h = s->h;
    s->fails++;
    h->st.request_failures++;
    uint64_t ms = slow ? HUBSUB_RETRY_SLOW_MS : rs_backoff_delay(&h->backoff, s->fails);
    if (ms < min_ms)
        ms = min_ms;
    sub_set_phase(s, SUB_BACKOFF);
    sub_arm(s, ms);
    sub_report(s, HUBSUB_FAILED, "%s; next try in %.1f s", why,
               (double)ms / 1000.0);
}

static void
sub_gone(struct sub *s, const char *why)
{
    struct hubsub *h = s->h;
    sub_detach(s);
    sub_disarm(s);
    sub_lease_stop(s);
    sub_set_phase(s, SUB_GONE);
    if (h->ngone > HUBSUB_GONE_MAX)
        event_active(h->reap, EV_TIMEOUT, 0);
    sub_report(s, HUBSUB_UNSUBSCRIBED, "%s", why);
}

static void
unsub_failed(struct sub *s, const char *why)
{
    struct hubsub *h = s->h;
    s->fails++;
    h->st.request_failures++;
    if (s->fails >= HUBSUB_UNSUB_TRIES) {
        char msg[HUBSUB_WHY_MAX];
        snprintf(msg, sizeof(msg),
                 "the hub did not take the unsubscribe (%s); its deliveries "
                 "are answered 410", why);
        sub_gone(s, msg);
        return;
    }
    sub_set_phase(s, SUB_UNSUB_BACKOFF);
    sub_arm(s, rs_backoff_delay(&h->backoff, s->fails));
}

static void
sub_attempt(struct sub *s)
{
    sub_detach(s);
    sub_disarm(s);
    sub_set_phase(s, SUB_REQUESTING);
    int rc = sub_send(s, false);
    if (rc != 0) {
        char why[128];
        snprintf(why, sizeof(why), "cannot send the request: %s",
                 rs_strerror(rc));
        sub_failed(s, false, 0, why);
    }
}

static void
unsub_attempt(struct sub *s)
{
    sub_detach(s);
    sub_disarm(s);
    sub_set_phase(s, SUB_UNSUB_REQUESTING);
    int rc = sub_send(s, true);
    if (rc != 0)
        unsub_failed(s, rs_strerror(rc));
}

/* What went wrong with a request, in one line. */
static void
describe_failure(const struct rs_http_result *res, char *out, size_t outsz)
{
    if (res->rc != 0) {
        snprintf(out, outsz, "hub unreachable: %s", res->errstr);
        return;
    }
    /* the hub's one-line reason, printable bytes only */
    char line[200];
    size_t n = 0;
    for (size_t i = 0; i < res->body_len && n + 1 < sizeof(line); i++) {
        unsigned char c = (unsigned char)res->body[i];
        if (c == '\n' || c == '\r')
            break;
        line[n++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    line[n] = '\0';
    snprintf(out, outsz, "the hub answered %ld%s%s", res->status,
             n > 0 ? ": " : "", line);
}

static void
on_hub_answer(void *ud, struct rs_http_req *req,
              const struct rs_http_result *res)
{
    struct call *c = ud;
    struct sub *s = c->s;
    rs_free(c);
    if (s == NULL)
        return;
    s->call = NULL;
    /* rs_http is being freed: nothing more may be sent */
    if (res->rc == RS_ECANCELED)
        return;
    /* a verification that beat the hub's answer moved the phase on */
    if (s->phase != SUB_REQUESTING && s->phase != SUB_UNSUB_REQUESTING)
        return;
    bool unsub = s->phase == SUB_UNSUB_REQUESTING;
    long st = res->rc == 0 ? res->status : 0;
    if (st >= 200 && st < 300) {
        sub_set_phase(s, unsub ? SUB_UNSUB_VERIFYING : SUB_VERIFYING);
        sub_arm(s, s->h->o.verify_wait_ms);
        return;
    }
    char why[300];
    describe_failure(res, why, sizeof(why));
    if (unsub) {
        unsub_failed(s, why);
        return;
    }
    /* the hub is down or busy: soon; it refused us: slowly */
    bool slow = st >= 300 && st < 500 && st != 408 && st != 429;
    sub_failed(s, slow, retry_after_ms(rs_http_req_header(req, "Retry-After")),
               why);
}

static void
on_sub_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct sub *s = arg;
    char why[128];
    s->next_attempt = RS_TIME_NONE;
    switch (s->phase) {
    case SUB_NEW:
    case SUB_BACKOFF:
    case SUB_IDLE:           /* renewal */
        sub_attempt(s);
        break;
    case SUB_VERIFYING:
        snprintf(why, sizeof(why), "the hub did not verify within %u ms",
                 s->h->o.verify_wait_ms);
        sub_failed(s, false, 0, why);
        break;
    case SUB_UNSUB_BACKOFF:
        unsub_attempt(s);
        break;
    case SUB_UNSUB_VERIFYING:
        sub_gone(s, "the hub did not verify the unsubscribe; its deliveries "
                    "are answered 410");
        break;
    case SUB_REQUESTING:
    case SUB_UNSUB_REQUESTING:
    case SUB_GONE:
        break;
    }
}

static void
on_lease_end(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct sub *s = arg;
    if (!s->active)
        return;
    sub_lease_stop(s);
    s->h->st.expired++;
    sub_report(s, HUBSUB_EXPIRED,
               "the lease of %u s ended before a renewal was verified",
               s->lease_s);
    /* the callback may have unsubscribed; a renewal may be out already */
    if (s->phase == SUB_IDLE)
        sub_attempt(s);
}

/* The hub confirmed our subscribe with a lease of lease_s seconds. */
static void
sub_verified(struct sub *s, unsigned lease_s)
{
    struct hubsub *h = s->h;
    bool was = s->active;
    if (lease_s > HUBSUB_LEASE_MAX_S)
        lease_s = HUBSUB_LEASE_MAX_S;
    sub_disarm(s);
    evtimer_del(s->lease_timer);
    s->active = true;
    s->lease_s = lease_s;
    s->lease_end = rs_time_now() + (rs_time_t)lease_s * 1000000;
    struct timeval tv = { (time_t)lease_s, 0 };
    evtimer_add(s->lease_timer, &tv);
    s->fails = 0;
    s->verified = true;
    h->st.verified++;
    if (was)
        h->st.renewed++;
    sub_set_phase(s, SUB_IDLE);
    sub_arm(s, renew_ms(lease_s));
    probe_start(s);
    /* A renewal verified after failures (or after the probe found the
     * hub down) is good news to tell: the caller took those for a
     * subscription that cannot deliver. */
    if (!was || s->told_bad)
        sub_report(s, HUBSUB_ACTIVE, "lease %u s", lease_s);
}

static void
sub_denied(struct sub *s, const char *reason)
{
    struct hubsub *h = s->h;
    h->st.denied++;
    sub_detach(s);
    sub_lease_stop(s);
    s->fails++;
    sub_set_phase(s, SUB_BACKOFF);
    sub_arm(s, HUBSUB_RETRY_SLOW_MS);
    sub_report(s, HUBSUB_DENIED, "%.300s; next try in %u s", reason,
               HUBSUB_RETRY_SLOW_MS / 1000);
}

static void
sub_free(struct sub *s)
{
    if (s == NULL)
        return;
    sub_detach(s);
    probe_detach(s);
    if (s->timer != NULL)
        event_free(s->timer);
    if (s->lease_timer != NULL)
        event_free(s->lease_timer);
    if (s->probe_timer != NULL)
        event_free(s->probe_timer);
    rs_free(s->probe_url);
    rs_free(s->hub_url);
    rs_free(s->topic);
    rs_free(s->callback);
    OPENSSL_cleanse(s->secret, sizeof(s->secret));
    rs_free(s);
}

static void
on_reap(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct hubsub *h = arg;
    struct sub **pp = &h->subs, *prev = NULL;
    while (*pp != NULL && h->ngone > HUBSUB_GONE_MAX) {
        struct sub *s = *pp;
        if (s->phase != SUB_GONE) {
            prev = s;
            pp = &s->next;
            continue;
        }
        *pp = s->next;
        if (h->tail == s)
            h->tail = prev;
        h->ngone--;
        sub_free(s);
    }
}

static bool
sub_live(const struct sub *s)
{
    return s->phase < SUB_UNSUB_REQUESTING;
}

static struct sub *
sub_by_topic(const struct hubsub *h, const char *topic, bool live_only)
{
    struct sub *found = NULL;
    for (struct sub *s = h->subs; s != NULL; s = s->next) {
        if (strcmp(s->topic, topic) != 0)
            continue;
        if (sub_live(s))
            return s;
        if (!live_only)
            found = s;   /* the newest unsubscribed one */
    }
    return found;
}

/* Does path end in /cb/<32 hex>? The prefix is whatever a proxy in
 * front of us leaves of callback_base's path. */
static bool
path_is_callback(const char *path)
{
    size_t pl = strlen(path), want = strlen(HUBSUB_CB_PREFIX) + HUBSUB_ID_HEX;
    return pl >= want &&
           memcmp(path + pl - want, HUBSUB_CB_PREFIX,
                  strlen(HUBSUB_CB_PREFIX)) == 0 &&
           strspn(path + pl - HUBSUB_ID_HEX, "0123456789abcdef") ==
               HUBSUB_ID_HEX;
}

/* The subscription of a callback path (path_is_callback): the live one
 * when there is one, since with id_key a topic subscribed again after an
 * unsubscribe has the path of the one that left. */
static struct sub *
sub_by_path(const struct hubsub *h, const char *path)
{
    if (!path_is_callback(path))
        return NULL;
    const char *id = path + strlen(path) - HUBSUB_ID_HEX;
    struct sub *found = NULL;
    for (struct sub *s = h->subs; s != NULL; s = s->next) {
        if (CRYPTO_memcmp(s->id, id, HUBSUB_ID_HEX) != 0)
            continue;
        if (sub_live(s))
            return s;
        found = s;
    }
    return found;
}

/* ----------------------------------------------------- the callback server */

static void
not_found(struct hubsub *h, struct evhttp_request *req)
{
    h->st.not_found++;
    reply_text(req, 404, "Not Found", "not found\n");
}

/* GET CALLBACK?hub.mode=...: verification of intent, or a denial. */
static void
on_verify(struct hubsub *h, struct sub *s, struct evhttp_request *req,
          const char *query)
{
    struct evkeyvalq q;
    memset(&q, 0, sizeof(q));   /* evhttp_parse_query_str initialises it */
    if (query == NULL || evhttp_parse_query_str(query, &q) != 0) {
        evhttp_clear_headers(&q);
        not_found(h, req);
        return;
    }
    const char *mode = evhttp_find_header(&q, "hub.mode");
    const char *topic = evhttp_find_header(&q, "hub.topic");
    const char *challenge = evhttp_find_header(&q, "hub.challenge");
    const char *lease = evhttp_find_header(&q, "hub.lease_seconds");
    const char *reason = evhttp_find_header(&q, "hub.reason");
    bool sub_mode = mode != NULL && strcmp(mode, "subscribe") == 0;
    bool unsub_mode = mode != NULL && strcmp(mode, "unsubscribe") == 0;
    bool deny_mode = mode != NULL && strcmp(mode, "denied") == 0;
    if (topic == NULL || strcmp(topic, s->topic) != 0 || s->phase == SUB_GONE ||
        !(sub_mode || unsub_mode || deny_mode)) {
        evhttp_clear_headers(&q);
        not_found(h, req);
        return;
    }
    if (deny_mode) {
        char why[320];
        bool given = reason != NULL && reason[0] != '\0';
        snprintf(why, sizeof(why), "denied by the hub: %.300s",
                 given ? reason : "no reason given");
        evhttp_clear_headers(&q);
        reply_text(req, 200, "OK", "ok\n");
        if (sub_live(s))   /* when leaving, a denial changes nothing */
            sub_denied(s, why);
        return;
    }
    bool pending = sub_mode ? (s->phase == SUB_REQUESTING ||
                               s->phase == SUB_VERIFYING ||
                               s->phase == SUB_BACKOFF)
                            : (s->phase == SUB_UNSUB_REQUESTING ||
                               s->phase == SUB_UNSUB_VERIFYING ||
                               s->phase == SUB_UNSUB_BACKOFF);
    bool ok = pending && challenge != NULL && challenge[0] != '\0' &&
              strlen(challenge) <= HUBSUB_CHALLENGE_MAX;
    unsigned long long lease_s = 0;
    if (ok && sub_mode) {
        /* WebSub: REQUIRED in a subscribe verification; whole seconds */
        size_t n = lease != NULL ? strspn(lease, "0123456789") : 0;
        ok = n > 0 && n <= 12 && lease[n] == '\0';
        if (ok)
            lease_s = strtoull(lease, NULL, 10);
        ok = ok && lease_s > 0;
    }
    if (!ok) {
        evhttp_clear_headers(&q);
        not_found(h, req);
        return;
    }
    reply_text(req, 200, "OK", challenge);
    evhttp_clear_headers(&q);
    if (sub_mode) {
        sub_verified(s, lease_s > HUBSUB_LEASE_MAX_S ? HUBSUB_LEASE_MAX_S
                                                     : (unsigned)lease_s);
    } else {
        h->st.verified++;
        sub_gone(s, "unsubscribed: verified by the hub");
    }
}

/* POST CALLBACK: content distribution. */
static void
on_content(struct hubsub *h, struct sub *s, struct evhttp_request *req)
{
    if (!sub_live(s)) {
        h->st.gone++;
        reply_text(req, 410, "Gone", "unsubscribed\n");
        return;
    }
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    const char *body = NULL;
    /* a terminating NUL (not counted) for callers that parse text */
    if (evbuffer_add(in, "", 1) == 0)
        body = (const char *)evbuffer_pullup(in, -1);
    if (body == NULL) {
        reply_text(req, 503, "Service Unavailable", "out of memory\n");
        return;
    }
    struct evkeyvalq *hd = evhttp_request_get_input_headers(req);
    if (!sig_ok(s->secret, evhttp_find_header(hd, "X-Hub-Signature"), body,
                len) && h->keyed) {
        /* A path outlives its secrets (id_key): a process before us, or
         * this one's subscription before an unsubscribe and a subscribe
         * again, gave the hub another secret, and a delivery signed with
         * it may come after ours is verified (it was in flight). Dropped
         * with a 2xx, as WebSub allows, it would be lost: the hub's own
         * changes are in it. Answered 503, the hub sends it again, signed
         * with the secret it holds then; a forger learns only that his
         * signature is wrong, which he knew. */
        h->st.bad_signature++;
        h->st.refused++;
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          "Retry-After", "1");
        reply_text(req, 503, "Service Unavailable",
                   s->verified ? "signature does not match: send it again, "
                                 "signed with the secret verified last\n"
                               : "not verified yet, retry\n");
        return;
    }
    if (!sig_ok(s->secret, evhttp_find_header(hd, "X-Hub-Signature"), body,
                len)) {
        /* WebSub: drop it, but answer 2xx, so a forger learns nothing */
        h->st.bad_signature++;
        rs_log_kv(RS_LOG_DEBUG, "dropped a notification: bad signature",
                  "topic", s->topic, NULL);
        evhttp_send_reply(req, 204, "No Content", NULL);
        return;
    }
    struct hubsub_msg m = {
        .topic = s->topic,
        .hub_url = s->hub_url,
        .content_type = evhttp_find_header(hd, "Content-Type"),
        .id = evhttp_find_header(hd, "X-Hub-Id"),
        .gap_after = evhttp_find_header(hd, "X-Hub-Gap"),
        .body = body,
        .len = len,
    };
    if (h->o.on_notification(h->o.ud, &m) != 0) {
        h->st.refused++;
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          "Retry-After", "1");
        reply_text(req, 503, "Service Unavailable", "not taken, retry\n");
        return;
    }
    h->st.delivered++;
    evhttp_send_reply(req, 204, "No Content", NULL);
}

static void
on_request(struct evhttp_request *req, void *arg)
{
    struct hubsub *h = arg;
    const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
    const char *path = u != NULL ? evhttp_uri_get_path(u) : NULL;
    struct sub *s = path != NULL ? sub_by_path(h, path) : NULL;
    if (s == NULL && path != NULL && path_is_callback(path) &&
        evhttp_request_get_command(req) == EVHTTP_REQ_POST) {
        /* A delivery to a subscription we do not have: one a process
         * before us left (crashed, or its state is gone). 410 makes the
         * hub drop it now, not retry it until its lease ends. Until the
         * caller has asked for what it wants, it may be one of ours from
         * before a restart (id_key), to be taken once subscribed. */
        if (h->settled) {
            h->st.gone++;
            reply_text(req, 410, "Gone", "no such subscription\n");
        } else {
            h->st.refused++;
            evhttp_add_header(evhttp_request_get_output_headers(req),
                              "Retry-After", "5");
            reply_text(req, 503, "Service Unavailable",
                       "starting, retry\n");
        }
        return;
    }
    if (s == NULL) {
        not_found(h, req);
        return;
    }
    switch (evhttp_request_get_command(req)) {
    case EVHTTP_REQ_GET:
        on_verify(h, s, req, evhttp_uri_get_query(u));
        break;
    case EVHTTP_REQ_POST:
        on_content(h, s, req);
        break;
    default:   /* evhttp refuses other methods before us (501) */
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          "GET, POST");
        reply_text(req, 405, "Method Not Allowed", "GET or POST\n");
        break;
    }
}

/* -------------------------------------------------------------------- API */

__attribute__((format(printf, 3, 4))) static void
set_err(char *err, size_t errsz, const char *fmt, ...)
{
    if (err == NULL || errsz == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errsz, fmt, ap);
    va_end(ap);
}

static char *
make_cb_base(const struct hubsub_opts *o, int port)
{
    char *out;
    if (o->callback_base != NULL) {
        size_t n = strlen(o->callback_base);
        bool slash = n > 0 && o->callback_base[n - 1] == '/';
        out = rs_malloc(n + 2);
        if (out != NULL)
            snprintf(out, n + 2, "%s%s", o->callback_base, slash ? "" : "/");
        return out;
    }
    size_t n = strlen(o->listen_host) + 32;
    out = rs_malloc(n);
    if (out != NULL) {
        bool v6 = strchr(o->listen_host, ':') != NULL;
        snprintf(out, n, "http://%s%s%s:%d/", v6 ? "[" : "", o->listen_host,
                 v6 ? "]" : "", port);
    }
    return out;
}

struct hubsub *
hubsub_new(const struct hubsub_opts *o, char *err, size_t errsz)
{
    if (o == NULL || o->base == NULL || o->http == NULL ||
        o->on_notification == NULL || o->listen_host == NULL ||
        o->listen_host[0] == '\0' || o->listen_port < 0 ||
        o->listen_port > 65535) {
        set_err(err, errsz, "hubsub: base, http, on_notification, "
                "listen_host and a port 0..65535 are required");
        return NULL;
    }
    if (o->callback_base != NULL && !rs_url_is_http(o->callback_base)) {
        set_err(err, errsz, "hubsub: the callback base %.200s is not an "
                "absolute http(s) URL", o->callback_base);
        return NULL;
    }
    unsigned char key[HUBSUB_KEY_HEX / 2];
    if (o->id_key != NULL && !key_parse(o->id_key, key, sizeof(key))) {
        set_err(err, errsz, "hubsub: the id key is not %d hex digits",
                HUBSUB_KEY_HEX);
        return NULL;
    }
    struct hubsub *h = rs_calloc(1, sizeof(*h));
    if (h == NULL)
        goto nomem;
    h->o = *o;
    h->o.id_key = NULL;          /* copied into h->key */
    h->keyed = o->id_key != NULL;
    h->settled = !h->keyed;      /* random ids: no path is ours from before */
    if (h->keyed)
        memcpy(h->key, key, sizeof(key));
    OPENSSL_cleanse(key, sizeof(key));
    h->o.callback_base = NULL;
    h->o.http_limits = NULL;     /* copied into the guard below */
    h->o.hub_token = h->o.client_cert = h->o.client_key = NULL;
    if (o->hub_token != NULL) {
        size_t n = strlen(o->hub_token) + sizeof("Authorization: Bearer ");
        if ((h->auth_hdr = rs_malloc(n)) == NULL)
            goto nomem;
        snprintf(h->auth_hdr, n, "Authorization: Bearer %s", o->hub_token);
    }
    if ((o->client_cert != NULL &&
         (h->client_cert = rs_strdup(o->client_cert)) == NULL) ||
        (o->client_key != NULL &&
         (h->client_key = rs_strdup(o->client_key)) == NULL))
        goto nomem;
    if (h->o.max_body == 0)
        h->o.max_body = HUBSUB_MAX_BODY;
    if (h->o.verify_wait_ms == 0)
        h->o.verify_wait_ms = HUBSUB_VERIFY_WAIT_MS;
    h->listen_host = rs_strdup(o->listen_host);
    if (h->listen_host == NULL)
        goto nomem;
    h->o.listen_host = h->listen_host;
    uint64_t seed;
    if (RAND_bytes((unsigned char *)&seed, sizeof(seed)) != 1)
        seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)h;
    h->backoff = (struct rs_backoff){ .first_ms = HUBSUB_RETRY_MIN_MS,
                                      .max_ms = HUBSUB_RETRY_MAX_MS,
                                      .below_pct = 10, .above_pct = 10,
                                      .clamp = 1 };
    rs_backoff_seed(&h->backoff, seed);
    h->reap = event_new(o->base, -1, 0, on_reap, h);
    h->http = evhttp_new(o->base);
    if (h->reap == NULL || h->http == NULL)
        goto nomem;
    evhttp_set_max_body_size(h->http, (ev_ssize_t)h->o.max_body);
    evhttp_set_max_headers_size(h->http, HUBSUB_MAX_HEADERS);
    evhttp_set_allowed_methods(h->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST);
    static const struct rs_httpguard_limits def = RS_HTTPGUARD_LIMITS_DEFAULT;
    struct rs_httpguard_opts go = {
        .base = o->base,
        .http = h->http,
        .name = "callback",
        .limits = o->http_limits != NULL ? *o->http_limits : def,
        .on_request = on_request,
        .request_arg = h,
        .metrics = o->metrics,
        .metrics_prefix = "rssub_http",
        .on_log = rs_httpguard_log_warn,
    };
    struct evhttp_bound_socket *bs;
    char why[300];
    if (rs_httpguard_listen(&go, o->listen_host, (unsigned)o->listen_port,
                            &h->guard, &bs, &h->port, why,
                            sizeof(why)) != 0) {
        set_err(err, errsz, "hubsub: %s", why);
        hubsub_free(h);
        return NULL;
    }
    h->cb_base = make_cb_base(o, h->port);
    if (h->cb_base == NULL)
        goto nomem;
    return h;
nomem:
    set_err(err, errsz, "hubsub: out of memory");
    hubsub_free(h);
    return NULL;
}

int
hubsub_port(const struct hubsub *h)
{
    return h->port;
}

void
hubsub_free(struct hubsub *h)
{
    if (h == NULL)
        return;
    struct sub *s = h->subs;
    while (s != NULL) {
        struct sub *next = s->next;
        sub_free(s);
        s = next;
    }
    if (h->http != NULL)
        evhttp_free(h->http);
    rs_httpguard_free(h->guard);   /* after evhttp_free */
    if (h->reap != NULL)
        event_free(h->reap);
    rs_free(h->listen_host);
    rs_free(h->cb_base);
    if (h->auth_hdr != NULL) {
        explicit_bzero(h->auth_hdr, strlen(h->auth_hdr));
        rs_free(h->auth_hdr);
    }
    rs_free(h->client_cert);
    rs_free(h->client_key);
    OPENSSL_cleanse(h->key, sizeof(h->key));
    rs_free(h);
}

void
hubsub_settle(struct hubsub *h)
{
    if (h != NULL)
        h->settled = true;
}

int
hubsub_subscribe(struct hubsub *h, const char *hub_url, const char *topic)
{
    if (h == NULL || hub_url == NULL || topic == NULL || topic[0] == '\0' ||
        strlen(topic) > HUBSUB_TOPIC_MAX || !rs_url_is_http(hub_url))
        return RS_EINVAL;
    if (sub_by_topic(h, topic, true) != NULL)
        return RS_ESTATE;
    int rc = RS_ENOMEM;
    struct sub *s = rs_calloc(1, sizeof(*s));
    if (s == NULL)
        return RS_ENOMEM;
    s->h = h;
    s->phase = SUB_NEW;
    s->next_attempt = RS_TIME_NONE;
    s->lease_end = RS_TIME_NONE;
    /* The secret is new in every process: it is not kept anywhere (a
     * state file others may read would let them sign deliveries). */
    if (h->keyed) {
        rc = derive_hex(h, "callback", hub_url, topic, s->id,
                        HUBSUB_ID_BYTES);
        if (rc != 0)
            goto fail;
        rc = RS_ENOMEM;
    } else if (random_hex(s->id, HUBSUB_ID_BYTES) != 0) {
        rc = RS_EIO;
        goto fail;
    }
    if (random_hex(s->secret, HUBSUB_SECRET_BYTES) != 0) {
        rc = RS_EIO;
        goto fail;
    }
    if (rs_url_resolve(hub_url, "readyz", &s->probe_url) != 0)
        goto fail;
    size_t cl = strlen(h->cb_base) + strlen(HUBSUB_CB_PREFIX) + HUBSUB_ID_HEX;
    s->hub_url = rs_strdup(hub_url);
    s->topic = rs_strdup(topic);
    s->callback = rs_malloc(cl);
    s->timer = evtimer_new(h->o.base, on_sub_timer, s);
    s->lease_timer = evtimer_new(h->o.base, on_lease_end, s);
    s->probe_timer = evtimer_new(h->o.base, on_probe_timer, s);
    if (s->hub_url == NULL || s->topic == NULL || s->callback == NULL ||
        s->timer == NULL || s->lease_timer == NULL || s->probe_timer == NULL)
        goto fail;
    /* cb_base ends with '/': skip the prefix's own */
    snprintf(s->callback, cl, "%s%s%s", h->cb_base, HUBSUB_CB_PREFIX + 1,
             s->id);
    if (h->tail != NULL)
        h->tail->next = s;
    else
        h->subs = s;
    h->tail = s;
    /* from the loop, so that on_state never runs inside this call */
    sub_arm(s, 0);
    return 0;
fail:
    sub_free(s);
    return rc;
}

int
hubsub_unsubscribe(struct hubsub *h, const char *topic)
{
    struct sub *s = h != NULL && topic != NULL ? sub_by_topic(h, topic, true)
                                               : NULL;
    if (s == NULL)
        return RS_ENOTFOUND;
    sub_lease_stop(s);
    s->fails = 0;
    unsub_attempt(s);
    return 0;
}

int
hubsub_info(const struct hubsub *h, const char *topic, struct hubsub_info *out)
{
    const struct sub *s = h != NULL && topic != NULL
                              ? sub_by_topic(h, topic, false) : NULL;
    if (s == NULL)
        return RS_ENOTFOUND;
    *out = (struct hubsub_info){
        .phase = phase_names[s->phase],
        .active = s->active,
        .lease_seconds = s->lease_s,
        .lease_end = s->lease_end,
        .next_attempt = s->next_attempt,
        .failures = s->fails,
        .callback = s->callback,
        .hub_url = s->hub_url,
        .hub_state = probe_names[s->probe],
        .hub_why = s->hub_why,
    };
    return 0;
}

void
hubsub_stats(const struct hubsub *h, struct hubsub_stats *out)
{
    *out = h->st;
    out->subscriptions = 0;
    out->active = 0;
    for (const struct sub *s = h->subs; s != NULL; s = s->next) {
        if (sub_live(s))
            out->subscriptions++;
        if (s->active)
            out->active++;
    }
}
