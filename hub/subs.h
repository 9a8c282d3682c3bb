/*
 * subs.h - the WebSub subscription store: the Redis keys of docs/protocol.md
 * section 7 that hold subscriptions, their delivery cursors, their leases,
 * per-host counts and the per-topic delivery lock. Every multi-key change
 * is one Lua script, so a crash never leaves a subscription half-stored.
 * Plain callbacks with rs_redis's contract; no policy here.
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

/*
 * Store or update subscription (topic, callback) with its JSON record and
 * lease expiry. cursor is the delivery position of a new subscription (an
 * existing one keeps its own). host is the callback's host, for the
 * per-host count. result: 1 new, 0 updated.
 */
int subs_put(struct subs *s, const char *topic, const char *callback,
             const char *json, uint64_t expires_ms, struct msg_id cursor,
             const char *host, subs_done_cb cb, void *ud) RS_MUST_CHECK;

/* Remove it; result: 1 removed, 0 was not there. */
int subs_remove(struct subs *s, const char *topic, const char *callback,
                const char *host, subs_done_cb cb, void *ud) RS_MUST_CHECK;

/* Mark failing or active again (rewrites the JSON record). */
int subs_set_record(struct subs *s, const char *topic, const char *callback,
                    const char *json, subs_done_cb cb, void *ud) RS_MUST_CHECK;

/* Counts for the caps: subscriptions of topic, of host, and whether the
 * pair exists already. */
typedef void (*subs_counts_cb)(void *ud, int rc, long long topic_n,
                               long long host_n, bool exists);
int subs_counts(struct subs *s, const char *topic, const char *callback,
                const char *host, subs_counts_cb cb, void *ud) RS_MUST_CHECK;

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

/* Take or renew the delivery lock of topic for node; result 1 = ours. */
int subs_lock(struct subs *s, const char *topic, const char *node,
              unsigned ttl_ms, subs_done_cb cb, void *ud) RS_MUST_CHECK;

/* Record delivery cursors: n callbacks of topic with their ids. */
int subs_save_cursors(struct subs *s, const char *topic, size_t n,
                      const char *const *callbacks, const struct msg_id *ids,
                      subs_done_cb cb, void *ud) RS_MUST_CHECK;

#endif
