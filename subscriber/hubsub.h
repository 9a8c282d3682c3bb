/*
 * hubsub.h - rssub as a WebSub subscriber (docs/protocol.md 5): the
 * callback HTTP server (evhttp on the caller's loop), subscribe / renew /
 * unsubscribe requests to hubs (rs_http, async), answers to verifications
 * of intent, X-Hub-Signature checks, and handing verified bodies over.
 * What a notification means, and persisting it, is the caller's business.
 */
#ifndef SUB_HUBSUB_H
#define SUB_HUBSUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"
#include "rs_time.h"

struct event_base;
struct rs_http;
struct hubsub;

/* The retry schedule (see hubsub_subscribe). */
#define HUBSUB_RETRY_MIN_MS 1000
#define HUBSUB_RETRY_MAX_MS (5 * 60 * 1000)      /* hub down, 5xx, 429 */
#define HUBSUB_RETRY_SLOW_MS (10 * 60 * 1000)    /* refused: 4xx, denied */
/* Unsubscribed callback paths remembered (answered 410); oldest forgotten. */
#define HUBSUB_GONE_MAX 1024

enum hubsub_state {
    HUBSUB_ACTIVE,        /* verified: the hub delivers; why = "lease N s".
                             Reported when a subscription becomes active,
                             not at each renewal (see hubsub_stats) */
    HUBSUB_DENIED,        /* the hub sent hub.mode=denied; why = hub.reason.
                             Retried after HUBSUB_RETRY_SLOW_MS */
    HUBSUB_FAILED,        /* a subscribe request failed (why says how),
                             or the hub never verified it; retried */
    HUBSUB_EXPIRED,       /* the lease ended before a renewal was
                             verified; deliveries stop, retried */
    HUBSUB_UNSUBSCRIBED,  /* after hubsub_unsubscribe: the hub verified it,
                             or we stopped asking (why says which) */
};

/* A notification whose signature verified. Valid during the callback. */
struct hubsub_msg {
    const char *topic;          /* the subscription's topic URI */
    const char *hub_url;        /* where we subscribed */
    const char *content_type;   /* as the hub sent it; NULL if absent */
    const char *id;             /* X-Hub-Id (rshub's stream id, for
                                   dropping repeats); NULL if absent */
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
    unsigned verify_wait_ms;       /* after the hub's 202, how long to wait
                                      for its verification before asking
                                      again; 0 = 60 s */
    /* A verified notification. Return 0 once it is durably taken (persist
     * it BEFORE returning): the hub is answered 204. Non-zero: 503, and the
     * hub delivers it again later (at least once, never lost by acking
     * early). Runs on the loop; may call hubsub_subscribe/_unsubscribe,
     * never hubsub_free. */
    int (*on_notification)(void *ud, const struct hubsub_msg *m);
    /* A subscription's state changed (for logs, metrics, status); why is a
     * one-line reason, never NULL. Same rules as on_notification. May be
     * NULL. */
    void (*on_state)(void *ud, const char *topic, enum hubsub_state st,
                     const char *why);
    void *ud;
};

/* Binds the callback listener. NULL on failure, with the reason in err
 * (when errsz > 0): bad options, cannot bind, out of memory. Strings in o
 * are copied. */
struct hubsub *hubsub_new(const struct hubsub_opts *o, char *err,
                          size_t errsz);

/* The bound port. */
int hubsub_port(const struct hubsub *h);

/* Closes the listener and forgets every subscription without
 * unsubscribing (leases run out at the hubs). Requests in flight are
 * cancelled; their rs_http contexts are released when rs_http completes
 * them, so call rs_http_free afterwards (or keep the loop running).
 * Calling it after rs_http_free is fine too, as long as the loop did not
 * run in between (a retry timer would use the freed client). Never from
 * inside a hubsub callback. NULL ok. */
void hubsub_free(struct hubsub *h);

/* Subscribe to topic at hub_url (absolute http(s) URLs) with a fresh
 * callback path (/cb/<32 hex>) and a fresh 32-byte secret. Asynchronous:
 * the outcome comes through on_state, never from inside this call.
 * Until freed or unsubscribed, the subscription is kept alive: renewed at
 * 80 % of the granted lease; a hub that is down, answers 5xx or 429, or
 * does not verify within verify_wait_ms is asked again after 1 s, 2 s,
 * 4 s ... HUBSUB_RETRY_MAX_MS (at least its Retry-After, up to an hour);
 * any other refusal (4xx, 3xx) and hub.mode=denied after
 * HUBSUB_RETRY_SLOW_MS. RS_EINVAL (not a URL), RS_ESTATE (topic already
 * subscribed), RS_ENOMEM, RS_EIO (no randomness). */
int hubsub_subscribe(struct hubsub *h, const char *hub_url,
                     const char *topic) RS_MUST_CHECK;

/* Stop taking the topic's notifications now (its callback path answers
 * 410 Gone from here on, which also makes a hub drop it) and ask the hub
 * to unsubscribe (verified; retried a few times). HUBSUB_UNSUBSCRIBED
 * follows (from the loop). RS_ENOTFOUND when the topic is not subscribed
 * (or already unsubscribed). */
int hubsub_unsubscribe(struct hubsub *h, const char *topic) RS_MUST_CHECK;

/* One subscription, for status pages. Strings belong to h and stay valid
 * until control returns to the loop. */
struct hubsub_info {
    const char *phase;          /* "requesting", "verifying", "backoff",
                                   "active", "unsubscribing", "gone" */
    bool active;                /* a verified lease is running */
    unsigned lease_seconds;     /* granted at the last verification */
    rs_time_t lease_end;        /* wall clock; RS_TIME_NONE if not active */
    rs_time_t next_attempt;     /* next request (renewal, retry, or giving
                                   up on a verification), wall clock;
                                   RS_TIME_NONE while a request is out */
    unsigned failures;          /* consecutive failed attempts */
    const char *callback;       /* the URL given to the hub */
    const char *hub_url;
};

/* The topic's subscription (a live one before an unsubscribed one).
 * RS_ENOTFOUND if none. */
int hubsub_info(const struct hubsub *h, const char *topic,
                struct hubsub_info *out) RS_MUST_CHECK;

struct hubsub_stats {
    uint64_t delivered;        /* taken by on_notification (204) */
    uint64_t refused;          /* on_notification said no (503) */
    uint64_t bad_signature;    /* missing or wrong signature: dropped, 204 */
    uint64_t not_found;        /* unknown path, unmatched verification (404) */
    uint64_t gone;             /* POSTs to an unsubscribed path (410) */
    uint64_t verified;         /* verifications answered with the challenge */
    uint64_t renewed;          /* verified renewals of an active lease */
    uint64_t denied;           /* hub.mode=denied received */
    uint64_t requests;         /* subscribe/unsubscribe requests sent */
    uint64_t request_failures; /* ... that failed or were refused */
    uint64_t expired;          /* leases that ran out */
    unsigned subscriptions;    /* live (not unsubscribed) */
    unsigned active;           /* ... with a running lease */
};

void hubsub_stats(const struct hubsub *h, struct hubsub_stats *out);

#endif
