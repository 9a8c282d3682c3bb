/*
 * push.h - the durable outbox: change records and framework events that
 * the hub has not yet accepted are sent to it as notifications (POST HUB,
 * Content-Type application/xml, Link rel="self" = the topic URI, a bearer
 * token), in order, one POST in flight per topic, gathered over a short
 * window into one document (split at RS_MAX_ENTRIES entries and at a byte
 * budget). The outbox is the state itself: each topic's watermark (the
 * last seq the hub accepted, state meta) only advances on a 2xx, so what
 * was not accepted survives restarts and is sent when the hub returns.
 * 5xx, 429 and connection failures are retried with backoff (Retry-After
 * honoured); 413 halves the batch; any other 4xx stops that topic with an
 * error until restart or SIGHUP. Documents are docs.c's; HTTP is rs_http's.
 */
#ifndef SOURCE_PUSH_H
#define SOURCE_PUSH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "docs.h"
#include "state.h"

struct event_base;
struct rs_http;

enum push_lane {
    PUSH_CHANGE = 0,     /* changelist-notification, the change topic */
    PUSH_FRAMEWORK,      /* framework-notification, the framework topic */
    PUSH_LANES,
};

struct push_opts {
    struct event_base *base;
    struct rs_http *http;       /* NULL with hub NULL */
    struct state *st;
    const struct docs *docs;
    const char *hub;            /* publish URL; NULL: no hub (the outbox is
                                   marked sent as it fills) */
    const char *topic[PUSH_LANES];
    const char *token;          /* bearer token, or NULL */
    int64_t batch_ms;           /* gathering window; 0: send at once */
    int64_t retry_max_ms;       /* longest pause between retries */
    size_t max_bytes;           /* per notification (the hub's max body) */
    unsigned timeout_ms;        /* per POST */
    /* A notification was accepted; channel is the hub's X-Hub-Channel
     * (or NULL). */
    void (*on_accepted)(void *ud, enum push_lane lane, const char *channel);
    void *ud;
};

/* Latency samples kept: detection of a change (its datetime) to the
 * hub's 2xx, for the newest accepted changes. */
#define PUSH_SAMPLES 65536

struct push_stats {
    uint64_t posts, accepted_docs, accepted_entries, retries, failures;
    int64_t backlog[PUSH_LANES];     /* changes / events not yet accepted */
    bool stopped[PUSH_LANES];
    uint64_t latency_n;              /* samples taken in all */
};

struct push;

struct push *push_new(const struct push_opts *o, const char **err);
/* Call after rs_http_free, which completes the POSTs in flight as
 * cancelled (nothing is lost: their rows stay in the outbox). NULL ok. */
void push_free(struct push *p);

/* Rows were committed: send them after the gathering window. */
void push_kick(struct push *p);
/* Send what is gathering now, without waiting for the window (drain). */
void push_flush(struct push *p);
/* Un-stop topics stopped by a 4xx and try again (SIGHUP). */
void push_resume(struct push *p);
/* Nothing in flight. */
bool push_idle(const struct push *p);

void push_get_stats(struct push *p, struct push_stats *out);
/* The latency (microseconds) below which a fraction q of the last
 * PUSH_SAMPLES accepted changes fell; -1 when none. */
int64_t push_latency_quantile(const struct push *p, double q);

#endif
