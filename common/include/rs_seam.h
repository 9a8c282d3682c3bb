/*
 * rs_seam.h - the one place where a libevent loop meets libwebsockets service
 * threads (Debian's lws 4.1 has no libevent loop and one thread per context,
 * so each context gets a thread of its own). It owns both ends: a locked FIFO
 * towards each thread and one towards the loop, the eventfd that wakes the
 * loop (registered on it here), lws_cancel_service() that wakes a thread, the
 * threads' lives (start, stop request, exit, join), the byte accounting with
 * its flow control, reference counts of objects the threads share read-only,
 * and counters a thread writes and the loop reads. What an item means is the
 * caller's; rshub's service threads (hub/wsserver.c) and rssub's WebSocket
 * client (subscriber/wsclient.c) are built on it.
 *
 * What crosses, and why it is safe (the contract for every user):
 *  - Items, through a FIFO. Each end has one mutex; push, mark, seal, take
 *    and pop hold it. Everything the producer wrote before a push (the item
 *    and whatever it points to) is visible to the consumer after its take:
 *    the mutex orders them. From then on the item is the consumer's, and the
 *    producer does not touch it again.
 *  - Flow state (struct rs_seam_flow) and an item's charge, under the mutex
 *    of the end the item was pushed to, only through the calls below.
 *  - Objects published once and then only read (a shared frame): written
 *    before the push that hands out the first reference, never after; their
 *    reference count (struct rs_seam_ref) is atomic.
 *  - Counters (rs_seam_count): relaxed atomics, for statistics and the
 *    least-loaded choice, never for synchronisation.
 *  - Configuration written before rs_seam_start: read-only afterwards
 *    (pthread_create orders it).
 * Nothing else is shared; a field a thread owns says so where it is declared.
 *
 * Wake-ups: a push or mark that makes a FIFO non-empty wakes its consumer
 * once (the eventfd for the loop, lws_cancel_service for a thread), so a
 * burst costs one lock per item and one wake-up per batch. A thread's
 * consumer takes its items in LWS_CALLBACK_EVENT_WAIT_CANCELLED; the loop's
 * are handed to on_loop. A thread that is not started yet is woken when it
 * starts; one that was joined is never woken again (its context may be gone).
 *
 * Bounds: items that carry bytes (it->bytes) are charged to their end from
 * push until the consumer calls rs_seam_done; those with a flow are also
 * charged to it, and a push that takes a flow over its high mark tells the
 * producer to pause, rs_seam_done tells when it is back at half. Producers
 * honour it (rshub's tail read waits, rssub's reading stops), so what waits
 * is bounded by the high mark plus one producer batch. Items without bytes
 * (control: join, leave, close...) are bounded by their producers, one or
 * a few per connection.
 */
#ifndef RS_SEAM_H
#define RS_SEAM_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"

struct event_base;
struct lws_context;
struct rs_seam;

#define RS_SEAM_LOOP UINT_MAX        /* the loop's end, where an end is named */
#define RS_SEAM_THREADS_MAX 1024
#define RS_SEAM_COUNTERS 16          /* counter slots per end */
#define RS_SEAM_PAUSE 1              /* rs_seam_push: the flow is over its mark */

/* Bytes one producer has waiting at one end: paused above high, resumed at
 * or below high / 2. Set up with rs_seam_flow_init; then only the seam
 * touches it, under the lock of the end its items go to. */
struct rs_seam_flow {
    size_t high;
    size_t bytes;
    bool paused;
};

/* Embed one in each thing that crosses; zero it (or rs_seam_item_init)
 * before its first push or mark. Fields are the seam's, except bytes and
 * flow (set before the push) and next (the list rs_seam_take returns). */
struct rs_seam_item {
    struct rs_seam_item *next;       /* rs_seam_take: the next item, or NULL */
    struct rs_seam_item *prev;
    size_t bytes;                    /* charged from push to rs_seam_done */
    struct rs_seam_flow *flow;       /* NULL: charged to the end only */
    unsigned bits;                   /* rs_seam_mark's requests */
    uint8_t state;                   /* free, queued or sealed */
    bool charged;
};

/* The loop's end: items taken in one wake-up, oldest first (linked by
 * next); the callee owns them. */
typedef void (*rs_seam_loop_cb)(void *ud, struct rs_seam_item *list);
/* Frees an item nobody will take (rs_seam_free with items queued). */
typedef void (*rs_seam_drop_cb)(void *ud, struct rs_seam_item *it);

struct rs_seam_opts {
    struct event_base *base;         /* the loop; on_loop runs on it */
    unsigned threads;                /* 1 .. RS_SEAM_THREADS_MAX */
    rs_seam_loop_cb on_loop;         /* required */
    rs_seam_drop_cb on_drop;         /* NULL: dropped items are forgotten */
    void *ud;                        /* for both */
    const char *name;                /* in log lines; NULL = "seam" */
};

struct rs_seam_stats {
    size_t items;                    /* queued now */
    size_t bytes;                    /* charged now: pushed, not yet done */
    size_t bytes_peak;               /* the most ever charged at once */
    uint64_t pushed;                 /* items queued, ever (push and mark) */
    uint64_t wakes;                  /* wake-ups sent to this end */
    uint64_t pauses;                 /* pushes that paused a flow */
};

/* ------------------------------------------------------------ lifecycle */

/* The ends and the loop's eventfd (added to base). NULL on RS_ENOMEM, bad
 * options or no eventfd; *rc (may be NULL) says which. */
struct rs_seam *rs_seam_new(const struct rs_seam_opts *o, int *rc);

/* Start thread t: it runs lws_service(ctx) until it is made to exit. ctx is
 * created by the caller, with this thread's consumer in its protocol
 * callback; it must outlive rs_seam_join. RS_ESTATE when t was started
 * before, RS_EIO when no thread could be made (then t never runs). */
int rs_seam_start(struct rs_seam *s, unsigned t,
                  struct lws_context *ctx) RS_MUST_CHECK;

/* Ask thread t to stop: its next rs_seam_take or rs_seam_pop reports it,
 * after every item queued before this call. What stopping means (closing
 * connections first) is the thread's; it calls rs_seam_exit when done. */
void rs_seam_stop(struct rs_seam *s, unsigned t);

/* Thread t leaves its service loop at the end of the current round. From
 * any thread; a no-op once t was joined (lws_context_destroy may call back
 * into code that asks). */
void rs_seam_exit(struct rs_seam *s, unsigned t);

/* False once thread t was made to exit (or before it started). */
bool rs_seam_running(struct rs_seam *s, unsigned t);

/* The loop thread, without concurrent rs_seam_start: wait until every
 * started thread has exited by itself, up to grace_ms in all (negative: as
 * long as it takes), then make the rest exit and join them all. Afterwards
 * no thread is woken again, and the contexts may be destroyed (their
 * callbacks may still push to the loop's end). Idempotent. */
void rs_seam_join(struct rs_seam *s, int grace_ms);

/* Joins (grace 0), hands every item still queued at any end to on_drop,
 * closes the eventfd. The loop thread. NULL is a no-op. */
void rs_seam_free(struct rs_seam *s);

/* ---------------------------------------------------------------- items */

void rs_seam_item_init(struct rs_seam_item *it, size_t bytes,
                       struct rs_seam_flow *flow);
void rs_seam_flow_init(struct rs_seam_flow *f, size_t high);

/* Queue it at end `to` (a thread index or RS_SEAM_LOOP); ownership passes.
 * 0, or RS_SEAM_PAUSE when it took its flow over the high mark (queued all
 * the same: produce no more for that flow until rs_seam_done says so).
 * RS_ESTATE: it is queued already or sealed; RS_EINVAL: no such end. On an
 * error nothing is queued and it stays the caller's. */
int rs_seam_push(struct rs_seam *s, unsigned to,
                 struct rs_seam_item *it) RS_MUST_CHECK;

/* Requests that coalesce: OR bits into it and queue it unless it is queued
 * already (it keeps its place). Not charged. RS_ESTATE once it is sealed
 * (the consumer is done with it); RS_EINVAL: no such end. The item stays
 * the caller's: it is taken back by rs_seam_pop. */
int rs_seam_mark(struct rs_seam *s, unsigned to, struct rs_seam_item *it,
                 unsigned bits) RS_MUST_CHECK;

/* The consumer is done with it for good: out of the FIFO (uncharged if it
 * was queued), and every later mark refused. */
void rs_seam_seal(struct rs_seam *s, unsigned at, struct rs_seam_item *it);

/* The consumer at end `at` takes every queued item, oldest first, linked by
 * next (NULL: none). *stop (may be NULL) is set when a stop was asked for
 * before this call, once per request; every item queued before the request
 * is in this list or an earlier one. */
struct rs_seam_item *rs_seam_take(struct rs_seam *s, unsigned at, bool *stop);

/* The consumer takes the oldest item alone, with the bits marked on it
 * (cleared on it); NULL when none is queued. *stop (may be NULL) is set
 * when a stop was asked for, once per request, whatever is still queued. */
struct rs_seam_item *rs_seam_pop(struct rs_seam *s, unsigned at,
                                 unsigned *bits, bool *stop);

/* The consumer at end `at` is done with the bytes of it (before freeing it):
 * uncharged from the end and its flow. True when that flow is paused and
 * now at or below half its high mark: the producer may resume (the flow
 * stays paused until rs_seam_flow_resume). A second call is a no-op. */
bool rs_seam_done(struct rs_seam *s, unsigned at, struct rs_seam_item *it);

/* The producer resumes flow f (its items go to end `at`): true when it was
 * paused. */
bool rs_seam_flow_resume(struct rs_seam *s, unsigned at,
                         struct rs_seam_flow *f);
bool rs_seam_flow_paused(struct rs_seam *s, unsigned at,
                         const struct rs_seam_flow *f);

void rs_seam_stats(struct rs_seam *s, unsigned at, struct rs_seam_stats *out);

/* ---------------------------------------------- shared read-only objects */

/* A reference count for an object published to other threads and never
 * written after: init to one, get for each holder, put for each release;
 * the put that returns true was the last (free it then). */
struct rs_seam_ref {
    atomic_uint n;
};

void rs_seam_ref_init(struct rs_seam_ref *r);
void rs_seam_ref_get(struct rs_seam_ref *r);
bool rs_seam_ref_put(struct rs_seam_ref *r);

/* ------------------------------------------------------------- counters */

/* Counter k (< RS_SEAM_COUNTERS) of end `at`, written by whichever thread
 * counts there, read by any: add delta (negative to take back). */
void rs_seam_count(struct rs_seam *s, unsigned at, unsigned k, int64_t delta);
uint64_t rs_seam_counter(const struct rs_seam *s, unsigned at, unsigned k);
/* Counter k summed over every end (threads and loop). */
uint64_t rs_seam_counter_sum(const struct rs_seam *s, unsigned k);

#endif
