/*
 * deliver.h - WebSub content distribution: for every subscription of the
 * topics this node owns (a lock in Redis per topic), POST each notification
 * to the callback, in order, one at a time, and advance its cursor on 2xx.
 * Live entries come from the fan-out's tail read; a subscription that is
 * behind (after a restart, a retry, an overflow) refills from the backlog
 * page by page. Retries back off per subscription, so a dead callback never
 * delays another. It owns the in-memory subscriptions, their states and
 * timers; the store is subs.c, host slots hostsched.c, the wire format
 * websubwire.c, HTTP rs_http.
 */
#ifndef HUB_DELIVER_H
#define HUB_DELIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backlog.h"
#include "fanout.h"
#include "rs_http.h"
#include "subs.h"
#include "topic.h"

struct event_base;
struct deliver;

struct deliver_opts {
    struct event_base *base;
    struct backlog *backlog;
    struct subs *subs;
    struct fanout *fanout;
    struct rs_http *http;
    struct topics *topics;
    const char *hub_url;
    const char *node_id;            /* unique per process */
    unsigned delivery_timeout_ms;   /* 0 = 10000 */
    uint64_t retry_max_delay_ms;    /* 0 = 600000 */
    uint64_t retry_window_ms;       /* 0 = 86400000 */
    bool drop_failing;
    unsigned queue_max;             /* per subscription; 0 = 64 */
    unsigned lock_ttl_ms;           /* 0 = 15000 */
    unsigned host_conns;            /* the HTTP client's per-host cap; 0 = 8 */
    /* --ack-replicas > 0: catch-up pages deliver only up to the fan-out's
     * cursor of the topic (fanout_confirmed), which holds replicated ids
     * only; the rest comes from the tail once confirmed. */
    bool replicated_only;
};

struct deliver_stats {
    uint64_t delivered;             /* 2xx answers */
    uint64_t attempts_failed;       /* non-2xx, timeouts, connection errors */
    uint64_t removed_gone;          /* 410 */
    uint64_t removed_failing;       /* --drop-failing */
    uint64_t removed_expired;       /* leases */
    uint64_t pages;                 /* backlog refills */
    uint64_t gaps;                  /* refills that found notifications a
                                       subscription had not been given
                                       trimmed (told with X-Hub-Gap) */
    size_t subscriptions;           /* delivered by this node */
    size_t failing;
    size_t in_flight;
    uint64_t lag_max_ms;            /* oldest undelivered notification */
};

struct deliver_sub_info {
    const char *callback;
    const char *state;              /* "active", "retrying", "failing" */
    const char *step;               /* its POST: "idle", "host-wait",
                                       "posting", "retry-wait" */
    struct msg_id cursor;
    unsigned attempts;
    uint64_t delivered;
    uint64_t lag_ms;                /* age of the oldest undelivered one known */
    uint64_t expires_ms;
};

struct deliver *deliver_new(const struct deliver_opts *o, const char **err);
/* Stop starting anything (before freeing the HTTP client and Redis, whose
 * cancelled callbacks then find nothing to do); then free. */
void deliver_close(struct deliver *d);
void deliver_free(struct deliver *d);

/* The fan-out's entries hook (fanout_opts.on_entries). */
void deliver_on_entries(void *ud, const char *chan,
                        const struct backlog_entry *e, size_t n);

/* Redis is (again) ready: take locks and load now, not at the next tick. */
void deliver_kick(struct deliver *d);
/* A subscription of topic changed (websub.c): reload it if we own it. */
void deliver_refresh(struct deliver *d, const char *topic);

void deliver_stats(const struct deliver *d, struct deliver_stats *out);
/* Each subscription of topic this node delivers. */
void deliver_foreach(const struct deliver *d, const char *topic,
                     void (*cb)(void *ud, const struct deliver_sub_info *si),
                     void *ud);

#endif
