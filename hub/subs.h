/*
 * subs.h - the WebSub subscription store: the Redis keys of docs/protocol.md
 * section 7 that hold subscriptions, their delivery cursors, their leases,
 * per-host counts, the slots reserved for subscriptions being verified and
 * the per-topic delivery lock. Every multi-key change is one Lua script, so
 * a crash never leaves a subscription half-stored, and the caps are checked
 * and taken in the same script, so no number of requests at once, on any
 * number of nodes, gets past them. Plain callbacks with rs_redis's
 * contract; the caps' values are the caller's.
 */
#ifndef HUB_SUBS_H
#define HUB_SUBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backlog.h"
#include "msg.h"

struct subs;

struct subs *subs_new(struct backlog *b);
void subs_free(struct subs *s);
/* Load the scripts on the command link (call when it becomes READY). */
void subs_on_ready(struct subs *s);

typedef void (*subs_done_cb)(void *ud, int rc, long long result);

/* Longest callback host the store takes (a DNS name is at most 253). */
#define SUBS_HOST_MAX 255

/* The caps a new subscription is held to (0: none), and how long a slot
 * reserved for one stays reserved (ms) if it is neither stored nor
 * released: the most its verification and activation can take, so that a
 * reservation whose node died is given back. */
struct subs_caps {
    long long per_topic;
    long long per_host;
    unsigned hold_ms;
};

/* Results of subs_reserve (and the refusals of subs_put). */
enum subs_slot {
    SUBS_HOST_FULL = -2,     /* --max-subs-per-host reached */
    SUBS_TOPIC_FULL = -1,    /* --max-subs-per-topic reached */
    SUBS_EXISTS = 0,         /* stored already: a renewal takes no slot */
    SUBS_RESERVED = 1,       /* a slot is held for it until stored, released
                                or hold_ms pass */
};

/*
 * Reserve a slot for new subscription (topic, callback) of host when the
 * request is accepted: counted against the caps are the stored
 * subscriptions and the live reservations (those whose hold_ms have not
 * passed, by Redis's clock). A request for a pair that holds a reservation
 * already shares it. result: an enum subs_slot.
 */
int subs_reserve(struct subs *s, const char *topic, const char *callback,
                 const char *host, const struct subs_caps *caps,
                 subs_done_cb cb, void *ud) RS_MUST_CHECK;

/* Give a reservation back (verification failed or was refused); cb may be
 * NULL. result: 1 released, 0 there was none. */
int subs_release(struct subs *s, const char *topic, const char *callback,
                 const char *host, subs_done_cb cb, void *ud) RS_MUST_CHECK;

/*
 * Store or update subscription (topic, callback) with its JSON record and
 * lease expiry; its reservation, if any, becomes the subscription. cursor
 * is the delivery position of a new subscription (an existing one keeps
 * its own). host is the callback's host, for the per-host count. A new one
 * whose reservation is gone (it ran out) is stored only if the caps still
 * have room. result: 1 new, 0 updated, SUBS_TOPIC_FULL or SUBS_HOST_FULL
 * (nothing stored).
 */
int subs_put(struct subs *s, const char *topic, const char *callback,
             const char *json, uint64_t expires_ms, struct msg_id cursor,
             const char *host, const struct subs_caps *caps, subs_done_cb cb,
             void *ud) RS_MUST_CHECK;

/* Remove it; result: 1 removed, 0 was not there. */
int subs_remove(struct subs *s, const char *topic, const char *callback,
                const char *host, subs_done_cb cb, void *ud) RS_MUST_CHECK;

/* Mark failing or active again (rewrites the JSON record). */
int subs_set_record(struct subs *s, const char *topic, const char *callback,
                    const char *json, subs_done_cb cb, void *ud) RS_MUST_CHECK;

/* Every subscription of topic: callbacks[i], records[i] (JSON), cursors[i]
 * ("0-0" when missing). */
typedef void (*subs_load_cb)(void *ud, int rc, size_t n,
                             const char *const *callbacks,
                             const char *const *records,
                             const struct msg_id *cursors);
int subs_load(struct subs *s, const char *topic, subs_load_cb cb,
              void *ud) RS_MUST_CHECK;

/* Topics that have subscriptions. */
typedef void (*subs_names_cb)(void *ud, int rc, size_t n,
                              const char *const *names);
int subs_topics(struct subs *s, subs_names_cb cb, void *ud) RS_MUST_CHECK;

/* Up to limit leases expired at now_ms, as "TOPIC CALLBACK" members. */
int subs_expired(struct subs *s, uint64_t now_ms, unsigned limit,
                 subs_names_cb cb, void *ud) RS_MUST_CHECK;

/* The record stored for each subscription (JSON:
 * {"secret","expires","created","state"}). */
struct subs_record {
    char *secret;                   /* NULL: none (rs_free'd by the caller
                                       of subs_record_parse) */
    uint64_t expires_ms;
    uint64_t created_ms;
    bool failing;                   /* "state": "failing" (else "active") */
};
/* r as JSON (rs_free), or NULL when out of memory. */
char *subs_record_json(const struct subs_record *r);
/* Read a record; RS_EINVAL when it is not one ("expires" is required),
 * RS_ENOMEM. *r is zeroed first. */
int subs_record_parse(const char *json, struct subs_record *r) RS_MUST_CHECK;

/* Take or renew the delivery lock of topic for node; result 1 = ours. */
int subs_lock(struct subs *s, const char *topic, const char *node,
              unsigned ttl_ms, subs_done_cb cb, void *ud) RS_MUST_CHECK;

/* Record delivery cursors: n callbacks of topic with their ids. */
int subs_save_cursors(struct subs *s, const char *topic, size_t n,
                      const char *const *callbacks, const struct msg_id *ids,
                      subs_done_cb cb, void *ud) RS_MUST_CHECK;

#endif
