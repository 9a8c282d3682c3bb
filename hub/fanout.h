/*
 * fanout.h - the main-loop side of WebSocket channels: one entry per
 * channel with its live cursor (the last stream id dispatched), per-thread
 * subscriber counts, the tail loop that reads new entries from Redis
 * (whichever node accepted them) and hands them to the service threads,
 * and the replay of backlogs to clients that resume with since=ID: a queue
 * of page reads, a few in flight at once per node, none for a client that
 * has gone. It handles the service threads' events (its inbox, a seam
 * sink) and pauses the tail while a thread is behind; the threads, their
 * sockets and the seam itself are wsserver.c's.
 */
#ifndef HUB_FANOUT_H
#define HUB_FANOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backlog.h"
#include "seam.h"
#include "topic.h"
#include "wsserver.h"

struct ack;
struct event_base;
struct fanout;
struct rs_metrics;

/* Every batch of new entries the tail read for a channel, in stream order
 * (valid during the call). WebSub delivery listens here. */
typedef void (*fanout_entries_cb)(void *ud, const char *chan,
                                  const struct backlog_entry *e, size_t n);

struct fanout_opts {
    struct event_base *base;
    struct backlog *backlog;
    struct topics *topics;
    unsigned page_size;          /* replay page, entries; 0 = 256 */
    size_t page_bytes;           /* and bytes (one entry at least); 0 = 512 KiB */
    unsigned replay_reads;       /* replay pages read from Redis at once;
                                    the others wait in a queue; 0 = 4 */
    struct rs_metrics *metrics;  /* registers its series here; may be NULL */
    size_t max_channels;         /* 0 = 100000 */
    unsigned tail_count;         /* entries per XREAD; 0 = 1000 */
    unsigned idle_secs;          /* drop a channel from the tail set after
                                    this long without subscribers; 0 = 60 */
    /* --ack-replicas > 0: deliver only what N replicas hold. Each tail
     * batch is held until an ack barrier confirms it (dropped, and read
     * again from the cursors, when it cannot); a channel's first cursor is
     * confirmed the same way, and replay pages stop at the cursor. NULL:
     * what the tail reads goes out at once. */
    struct ack *ack;
};

struct fanout_stats {
    uint64_t dispatched;         /* notifications handed to service threads */
    uint64_t replayed;           /* notifications sent from the backlog */
    uint64_t gaps;               /* clients or channels closed with 4001 */
    uint64_t bad_entries;        /* stream entries that could not be framed */
    uint64_t tail_reads;
    size_t channels_active;
    uint64_t replay_pages;       /* replay pages read from Redis */
    uint64_t replay_cancelled;   /* replays dropped because the client left
                                    before its next page was read */
    uint64_t replay_refused;     /* replays refused: address over its cap */
    uint64_t since_future;       /* since beyond the newest id: read as now */
    size_t replay_queued;        /* page reads waiting for a slot */
    size_t replay_reading;       /* page reads in flight */
    size_t replays;              /* clients replaying (not yet live) */
    uint64_t tail_pauses;        /* tail reads held back: a service thread
                                    had over its queue_high waiting */
    unsigned tail_holds;         /* such holds now (0: the tail runs) */
    unsigned ack_holds;          /* tail batches held for replication now */
    uint64_t ack_released;       /* batches confirmed and delivered */
    uint64_t ack_dropped;        /* batches dropped unconfirmed (read again) */
};

/* The sink wsserver delivers its threads' events to must be
 * fanout_inbox(); so create the fanout first, then the server, then
 * fanout_attach(). */
struct fanout *fanout_new(const struct fanout_opts *o, const char **err);
const struct seam_sink *fanout_inbox(struct fanout *f);
void fanout_attach(struct fanout *f, struct ws_server *ws);

/* Re-read the tail when the set of active channels changed or Redis came
 * back (called by the owner on link state changes). */
void fanout_kick(struct fanout *f);

/* Set the entries hook (after creation: the listener needs the fan-out). */
void fanout_on_entries(struct fanout *f, fanout_entries_cb cb, void *ud);

/* Keep a channel in this node's tail read whatever its WebSocket
 * subscribers (WebSub delivery needs its entries); counted. */
int fanout_pin(struct fanout *f, const char *name) RS_MUST_CHECK;
void fanout_unpin(struct fanout *f, const char *name);

/* The newest id of a channel this node has delivered (its cursor): with
 * --ack-replicas, every id up to it is known to be replicated. false when
 * the channel is not active on this node. */
bool fanout_confirmed(const struct fanout *f, const char *name,
                      struct msg_id *out);

/* Close every subscriber of every channel on this node with code and
 * reason (the hub cannot deliver: they are to pull meanwhile). */
void fanout_close_every(struct fanout *f, uint16_t code, const char *reason);
/* From now on close every new subscriber with code and reason (a string
 * that outlives the setting, e.g. a literal) once its channel is known;
 * code 0: take them again. For a backlog that cannot be read: a client
 * the hub took as live would call itself so and wait. */
void fanout_refuse_joins(struct fanout *f, uint16_t code, const char *reason);

/* Live subscribers of a channel on this node. */
size_t fanout_subscribers(const struct fanout *f, const char *name);
void fanout_stats(const struct fanout *f, struct fanout_stats *out);

/* Stop the tail loop and forget everything; call after ws_server_free. */
void fanout_free(struct fanout *f);

#endif
