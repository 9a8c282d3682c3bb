/* hubsub.h - rssub as a WebSub subscriber (docs/protocol.md 5): callback
 * server (evhttp on the caller's loop), subscribe/renew/unsubscribe via
 * rs_http, verification answers, X-Hub-Signature checks, a probe of the
 * hub while a lease runs, handing verified bodies over. What a
 * notification means, and persisting it (the id key too), is not ours. */
#ifndef SUB_HUBSUB_H
#define SUB_HUBSUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"
#include "rs_time.h"

struct event_base;
struct rs_http;
struct rs_httpguard_limits;
struct rs_metrics;
struct hubsub;

/* The retry schedule (see hubsub_subscribe). */
#define HUBSUB_RETRY_MIN_MS 1000
#define HUBSUB_RETRY_MAX_MS (5 * 60 * 1000)      /* hub down, 5xx, 429 */
#define HUBSUB_RETRY_SLOW_MS (10 * 60 * 1000)    /* refused: 4xx, denied */
/* Unsubscribed subscriptions kept (hubsub_info says "gone"); older ones
 * are forgotten. Every unknown callback path is answered 410 anyway. */
#define HUBSUB_GONE_MAX 1024
/* hubsub_opts.id_key: hex digits (32 bytes) */
#define HUBSUB_KEY_HEX 64

/* Reported through on_state; every state but UNSUBSCRIBED is retried.
 * ACTIVE is reported when a subscription becomes active, and again when
 * it is fine after any other report (a renewal verified after failures,
 * a hub that answers its probe again), not at each renewal. */
enum hubsub_state {
    HUBSUB_ACTIVE,        /* became active (not each renewal); "lease N s" */
    HUBSUB_DENIED,        /* hub.mode=denied; why holds hub.reason */
    HUBSUB_FAILED,        /* a subscribe failed, or was never verified */
    HUBSUB_EXPIRED,       /* the lease ended before a renewal was verified */
    HUBSUB_UNREACHABLE,   /* the lease runs, but the hub has not answered
                             the probe (or said it is not ready) for
                             probe_grace_ms: it cannot deliver */
    HUBSUB_UNSUBSCRIBED,  /* the hub verified it, or we stopped asking */
};

/* A notification whose signature verified. Valid during the callback. */
struct hubsub_msg {
    const char *topic;          /* the subscription's topic URI */
    const char *hub_url;        /* where we subscribed */
    const char *content_type;   /* as the hub sent it; NULL if absent */
    const char *id;             /* X-Hub-Id (to drop repeats) or NULL */
    const char *gap_after;      /* X-Hub-Gap (rshub): notifications after
                                   this id were trimmed before delivery, so
                                   the subscriber must pull; NULL: none */
    const char *body;           /* the exact bytes; body[len] == '\0' */
    size_t len;
};

struct hubsub_opts {
    struct event_base *base;
    struct rs_http *http;          /* the caller's client for hub requests */
    const char *listen_host;       /* address to bind, e.g. "127.0.0.1" */
    int listen_port;               /* 0 = ephemeral (tests) */
    const char *callback_base;     /* public URL of the listener (NAT, proxy;
                                      its path is a prefix the proxy may or
                                      may not strip); NULL: http://HOST:PORT/ */
    unsigned lease_seconds;        /* asked for; 0 = let the hub choose */
    size_t max_body;               /* 0 = 10 MiB; larger POST -> 413 */
    unsigned verify_wait_ms;       /* 202 -> verification; 0 = 60 s */
    /* The callback listener's deadlines and connection caps (copied;
     * NULL: RS_HTTPGUARD_LIMITS_DEFAULT of rs_httpguard.h), and where its
     * counters go (rssub_http_*{listener="callback"}; NULL: nowhere). */
    const struct rs_httpguard_limits *http_limits;
    struct rs_metrics *metrics;
    /* Return 0 only once it is durably taken (persisted BEFORE returning):
     * 204. Non-zero: 503, the hub delivers it again later. Runs on the
     * loop; may call hubsub_subscribe/_unsubscribe, never hubsub_free. */
    int (*on_notification)(void *ud, const struct hubsub_msg *m);
    /* For logs, metrics, status; why: one line, never NULL. Same rules as
     * on_notification. May be NULL. */
    void (*on_state)(void *ud, const char *topic, enum hubsub_state st,
                     const char *why);
    void *ud;
    /* The hub's read credential: sent as "Authorization: Bearer TOKEN" on
     * subscribe and unsubscribe requests, to the hub URL the request goes
     * to and nowhere else (these requests follow no redirect). Copied;
     * NULL: none. */
    const char *hub_token;
    /* TLS client certificate (and key; NULL: in the certificate) shown to
     * the hubs subscribed at (rs_http_cred_add for each hub's origin;
     * an origin that has credentials already keeps them). Copied. */
    const char *client_cert, *client_key;
    /* HUBSUB_KEY_HEX hex digits the caller keeps in its state
     * (hubsub_key_new makes one). Each subscription's callback id is
     * derived from it, the hub URL and the topic, so a restart subscribes
     * with the same callback: the hub takes that as the same subscription
     * (rshub keeps its delivery position, and takes no slot under its
     * caps). The secret is new in each process: a delivery whose
     * signature does not verify before our subscribe is verified (signed
     * with the secret the process before us gave) is answered 503, to be
     * delivered again, not dropped. Two states, two keys: their callbacks
     * never collide. Until hubsub_settle, a POST to an unknown callback
     * path is answered 503 (it may be a subscription of ours from before
     * the restart, not asked for again yet), then 410. NULL: a random id
     * per subscription, and 410 at once. */
    const char *id_key;
    /* While a lease runs, GET the hub's readiness every probe_ms: the
     * URL "readyz" relative to the hub URL (rshub's /readyz: 503 while it
     * cannot take or deliver notifications). No answer, or a 5xx, for
     * probe_grace_ms is HUBSUB_UNREACHABLE; an answer after that (any
     * other status: a hub without such a page answers 404, and that it
     * answers is all a probe can tell of it) is HUBSUB_ACTIVE again.
     * 0: no probe. probe_grace_ms 0: failing at the first failed probe. */
    unsigned probe_ms;
    unsigned probe_grace_ms;
};

/* Binds the listener; strings in o are copied. NULL on failure (bad
 * options, cannot bind, out of memory), the reason in err if errsz > 0. */
struct hubsub *hubsub_new(const struct hubsub_opts *o, char *err,
                          size_t errsz);

int hubsub_port(const struct hubsub *h);    /* the bound port */

/* Closes the listener, forgets subscriptions (no unsubscribe: leases run
 * out) and cancels requests out; rs_http_free afterwards releases their
 * contexts. Before it is fine too if the loop does not run in between (a
 * timer would use the freed client). Not from a hubsub callback. NULL ok. */
void hubsub_free(struct hubsub *h);

/* A new id key for hubsub_opts.id_key: HUBSUB_KEY_HEX lowercase hex
 * digits and a NUL into out. RS_EIO: no randomness. */
int hubsub_key_new(char *out, size_t outsz) RS_MUST_CHECK;

/* Every subscription the caller wants is asked for (hubsub_subscribe):
 * POSTs to unknown callback paths are answered 410 from now on, so a hub
 * drops subscriptions a crashed process left behind (see id_key). */
void hubsub_settle(struct hubsub *h);

/* Subscribe to topic at hub_url with a callback path (/cb/<32 hex>),
 * fresh or derived from id_key, and a fresh 32-byte secret; outcomes via
 * on_state, never from inside this call.
 * Kept alive until freed or unsubscribed: renewed at 80 % of the lease;
 * hub down, 5xx, 429, no verification: again after 1 s, 2 s ... 5 min
 * (not before Retry-After, capped at 1 h); other refusals and denials
 * after 10 min. RS_EINVAL (hub_url not http(s), empty topic), RS_ESTATE
 * (topic already subscribed), RS_ENOMEM, RS_EIO (no randomness). */
int hubsub_subscribe(struct hubsub *h, const char *hub_url,
                     const char *topic) RS_MUST_CHECK;

/* From now on the path answers 410 (a hub then drops it too) unless the
 * topic is subscribed again (with id_key: the same path); the hub is
 * asked to unsubscribe (verified, a few tries), then UNSUBSCRIBED follows
 * from the loop. RS_ENOTFOUND: not subscribed (or already leaving). */
int hubsub_unsubscribe(struct hubsub *h, const char *topic) RS_MUST_CHECK;

/* One subscription, for status pages. Strings belong to h, valid until
 * control returns to the loop. Times are wall clock. */
struct hubsub_info {
    const char *phase;          /* requesting, verifying, backoff, active,
                                   unsubscribing, gone */
    bool active;                /* a verified lease is running */
    unsigned lease_seconds;     /* granted at the last verification */
    rs_time_t lease_end;        /* RS_TIME_NONE if not active */
    rs_time_t next_attempt;     /* renewal, retry, or end of a wait for
                                   verification; NONE while a request is out */
    unsigned failures;          /* consecutive failed attempts */
    const char *callback;       /* the URL given to the hub */
    const char *hub_url;
    /* The probe (probe_ms): "off" (no lease, or no probe), "ok",
     * "doubt" (failing, within probe_grace_ms), "down" (UNREACHABLE
     * reported); hub_why says why when not ok ("" otherwise). */
    const char *hub_state;
    const char *hub_why;
};

/* The topic's subscription (a live one first); RS_ENOTFOUND if none. */
int hubsub_info(const struct hubsub *h, const char *topic,
                struct hubsub_info *out) RS_MUST_CHECK;

struct hubsub_stats {
    uint64_t delivered, refused;     /* on_notification: 0 (204), not (503) */
    uint64_t bad_signature;          /* dropped, answered 204 all the same */
    uint64_t not_found, gone;        /* 404 (path, verification), 410 */
    uint64_t verified, renewed;      /* challenges echoed; renewals of those */
    uint64_t denied, expired;        /* hub.mode=denied; leases run out */
    uint64_t requests, request_failures;   /* (un)subscribe requests */
    uint64_t probes, probe_failures;       /* GETs of the hub's readiness */
    unsigned subscriptions, active;  /* live ones; with a running lease */
};

void hubsub_stats(const struct hubsub *h, struct hubsub_stats *out);

#endif
