/*
 * backlog.h - the hub's Redis layout (docs/protocol.md 7) and the typed
 * operations on it: append a notification (exactly bounded, with the trim
 * mark; at most once per publish id when the publisher gives one), read
 * a page of replay with the trim mark atomically, stream info,
 * the blocking tail read (XREAD) that drives live fan-out on every node,
 * the topic registry. Three Redis links: one for publishes (appends and
 * topic claims, so that they never queue behind other work), one for
 * other commands, one for the blocking tail. It knows nothing of
 * WebSockets or HTTP.
 */
#ifndef HUB_BACKLOG_H
#define HUB_BACKLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "msg.h"
#include "rs_redis.h"

struct event_base;
struct backlog;

#define BACKLOG_NAME_MAX 100   /* channel names: [A-Za-z0-9._-], 1..100 */
#define BACKLOG_PAGE_BYTES (512 * 1024)  /* default page budget */

struct backlog_opts {
    const char *redis_url;
    const char *prefix;              /* key prefix; NULL = "rshub:" */
    unsigned command_timeout_ms;     /* 0 = 2000 */
    size_t page_bytes;               /* page budget, body bytes; 0 =
                                        BACKLOG_PAGE_BYTES */
    /* link state changes, for readiness and logs; which = "command",
     * "publish" or "tail" */
    void (*on_state)(void *ud, const char *which, enum rs_redis_state st,
                     const char *errstr);
    void *ud;
    /* --ack-replicas: 0 = appends are answered as Redis answers them.
     * N > 0: an append's callback waits for WAIT N ack_timeout_ms on the
     * publish link (group commit: one WAIT answers every append answered
     * before it on that connection); fewer than N -> rc ACK_ESHORT (ack.h)
     * with the id stored. on_wait hears every WAIT's outcome (which =
     * "publish"; rc 0 with the replicas counted, or the link's error). */
    unsigned ack_replicas;
    unsigned ack_timeout_ms;
    void (*on_wait)(void *ud, const char *which, int rc, long long got,
                    double secs);
    /* The newest id the owner knows a channel's stream held (the appends
     * and tail reads of this node), zero for none; NULL: none known. An
     * append that finds neither the stream nor its trim mark in Redis
     * makes it the trim mark: Redis lost the backlog (docs/protocol.md 7). */
    struct msg_id (*known)(void *ud, const char *chan);
};

struct backlog_entry {
    struct msg_id id;
    const char *body;                /* valid during the callback only */
    size_t len;
    const char *ctype;
    size_t ctype_len;
};

struct backlog_info {
    bool exists;
    uint64_t length;
    struct msg_id first, last;       /* zero when empty */
    struct msg_id last_generated;    /* the stream's last id ever (0-0 if none) */
    struct msg_id mark;              /* newest id ever trimmed (0-0 if none) */
};

/* Callbacks follow rs_redis's contract: exactly once per accepted call,
 * never when the call returned an error. rc: 0, RS_EIO / RS_ETIMEDOUT /
 * RS_ECANCELED from the link, RS_EPROTO for an unexpected reply; appends
 * also ACK_ESHORT (stored as id, not confirmed on --ack-replicas
 * replicas: backlog_ack_count says how many were). */
typedef void (*backlog_append_cb)(void *ud, int rc, struct msg_id id);
typedef void (*backlog_page_cb)(void *ud, int rc, struct msg_id mark,
                                const struct backlog_entry *e, size_t n);
typedef void (*backlog_info_cb)(void *ud, int rc, const struct backlog_info *info);
/* One call per stream in the XREAD reply (chan is the channel name), then
 * one final call with chan == NULL (rc says how the read ended; a timeout
 * of the BLOCK or an interrupt is rc == 0 with nothing before it). */
typedef void (*backlog_tail_cb)(void *ud, int rc, const char *chan,
                                const struct backlog_entry *e, size_t n);
#define BACKLOG_TRIMLOG_MAX 32
/* A channel's last trim points, newest first: each the id of the newest
 * entry one trim deleted. */
struct backlog_trimlog {
    size_t n;
    struct msg_id ids[BACKLOG_TRIMLOG_MAX];
};
typedef void (*backlog_trims_cb)(void *ud, int rc,
                                 const struct backlog_trimlog *logs, size_t n);
typedef void (*backlog_topics_cb)(void *ud, int rc, const char *const *names,
                                  const char *const *values, size_t n);
typedef void (*backlog_done_cb)(void *ud, int rc);

struct backlog *backlog_new(struct event_base *base,
                            const struct backlog_opts *o, const char **err);
void backlog_free(struct backlog *b);    /* pending callbacks: RS_ECANCELED */

/* The command and publish links are READY. */
bool backlog_ready(const struct backlog *b);
bool backlog_tail_ready(const struct backlog *b); /* tail link READY */
void backlog_stats(const struct backlog *b, struct rs_redis_stats *out);
void backlog_publish_stats(const struct backlog *b, struct rs_redis_stats *out);

/* The replicas the publish link's last WAIT counted (-1: none yet, or it
 * failed). */
long long backlog_ack_count(const struct backlog *b);

/* What Redis said when it last answered an append with an error (out of
 * memory under maxmemory, writes stopped after a failed save, a replica):
 * read in the append's callback, whose rc is then RS_EPROTO. "" when the
 * RS_EPROTO was a reply of the wrong shape. */
const char *backlog_append_error(const struct backlog *b);

/* Redis's words if it refused the last append within BACKLOG_REFUSING_US
 * (no append succeeded since), else NULL: /readyz's "not ready" while
 * Redis is reachable but takes no writes (out of memory, a replica after
 * a failover, writes stopped after a failed save). Bounded in time, so
 * that a node a load balancer stopped sending publishes to is tried
 * again. */
#define BACKLOG_REFUSING_US (10 * 1000000LL)
const char *backlog_refusing(const struct backlog *b);

/*
 * The hub's clock: Redis's (the server the command link reaches), as
 * this node estimates it. A notification's id carries Redis's time, and
 * every node shares one Redis, so ages (the backlog's age bound) and
 * leases (WebSub) are judged by it: a node whose own clock is off (no NTP,
 * a wrong RTC, a VM resumed) would otherwise trim backlogs or expire
 * leases of every node. backlog_clock_sync asks Redis for TIME (at each
 * connect of the command link, and whenever the hub asks: its janitor,
 * every 10 s); until the first answer the node's own clock stands.
 * backlog_now_ms: milliseconds since the epoch; backlog_clock_offset_ms:
 * Redis's minus ours, as last measured.
 */
void backlog_clock_sync(struct backlog *b);
uint64_t backlog_now_ms(const struct backlog *b);
int64_t backlog_clock_offset_ms(const struct backlog *b);

/* "host:port" (or the unix path) each link is, or last was, connected to
 * (rs_redis_addr): a reply's server, read in its callback. */
const char *backlog_addr(const struct backlog *b);       /* publish link */
const char *backlog_cmd_addr(const struct backlog *b);   /* command link */
const char *backlog_tail_addr(const struct backlog *b);  /* tail link */

/* The command link and key prefix, for other stores of the hub's Redis
 * layout (subs.c). */
struct rs_redis *backlog_redis(struct backlog *b);
const char *backlog_prefix(const struct backlog *b);

/* Is name a valid channel name? */
bool backlog_name_ok(const char *name);

/* Append body to channel's stream; keep at most max_entries (0 =
 * unbounded), on the publish link. The callback's id is the stream id
 * Redis assigned: the notification is then stored. */
int backlog_append(struct backlog *b, const char *chan, const char *body,
                   size_t len, const char *ctype, uint64_t max_entries,
                   backlog_append_cb cb, void *ud) RS_MUST_CHECK;

/* backlog_append, once per publish id (docs/protocol.md 3): in the same
 * script, the append runs only if seq is above the highest seq stored
 * for key on this channel, and then that seq and the new id are recorded
 * for key. Otherwise nothing is appended, and the callback gets
 * duplicate = true with the id of the entry that recorded the highest
 * seq. The channel keeps at most max_keys keys (>= 1). A key it does not
 * hold yet pushes out the least recently used ones (a duplicate counts as
 * a use). key: rs_pubid_key_ok; seq 1..RS_PUBID_SEQ_MAX. On the publish
 * link, like backlog_append. */
typedef void (*backlog_append_once_cb)(void *ud, int rc, struct msg_id id,
                                       bool duplicate);
int backlog_append_once(struct backlog *b, const char *chan, const char *body,
                        size_t len, const char *ctype, uint64_t max_entries,
                        const char *key, uint64_t seq, uint64_t max_keys,
                        backlog_append_once_cb cb, void *ud) RS_MUST_CHECK;

/* Up to count entries with id > after ("since=0" reads from the oldest),
 * with the trim mark read atomically with them. The page also stops
 * before the entry that would take the bodies past max_bytes (the first
 * entry is always included): a page can be short while more entries
 * follow. max_bytes 0 = the backlog's page_bytes. */
int backlog_page_bytes(struct backlog *b, const char *chan,
                       struct msg_id after, unsigned count, size_t max_bytes,
                       backlog_page_cb cb, void *ud) RS_MUST_CHECK;
int backlog_page(struct backlog *b, const char *chan, struct msg_id after,
                 unsigned count, backlog_page_cb cb, void *ud) RS_MUST_CHECK;

int backlog_info(struct backlog *b, const char *chan, backlog_info_cb cb,
                 void *ud) RS_MUST_CHECK;

/* Trim entries older than min_ms (milliseconds since the epoch). */
int backlog_trim_age(struct backlog *b, const char *chan, uint64_t min_ms,
                     backlog_done_cb cb, void *ud) RS_MUST_CHECK;

/* XREAD BLOCK block_ms COUNT count on the tail link, for n channels after
 * their cursors. */
int backlog_tail_read(struct backlog *b, const char *const *chans,
                      const struct msg_id *after, size_t n, unsigned block_ms,
                      unsigned count, backlog_tail_cb cb, void *ud) RS_MUST_CHECK;

/* Wake the tail read in flight now (CLIENT UNBLOCK on the command link);
 * the read then ends with rc 0 and no entries. The two links have no order
 * between them: a CLIENT UNBLOCK that reaches Redis before the XREAD finds
 * nothing blocked, so it is sent again (1 ms, doubling to 64 ms) for as
 * long as that read is in flight. A no-op when no read is in flight. */
void backlog_tail_interrupt(struct backlog *b);

/* The trim logs of n channels, on the tail link (so that it runs after the
 * XREAD it checks). */
int backlog_trims(struct backlog *b, const char *const *chans, size_t n,
                  backlog_trims_cb cb, void *ud) RS_MUST_CHECK;

/* Topic registry. claim: store value for name unless a record exists;
 * the callback gets the record that holds (ours or the first node's). On
 * the publish link: the first publish to a topic claims it. */
typedef void (*backlog_value_cb)(void *ud, int rc, const char *value,
                                 size_t len);
int backlog_topic_claim(struct backlog *b, const char *name, const char *value,
                        backlog_value_cb cb, void *ud) RS_MUST_CHECK;
int backlog_topics(struct backlog *b, backlog_topics_cb cb, void *ud) RS_MUST_CHECK;

#endif
