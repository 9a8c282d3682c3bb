/*
 * hostsched.h - per-host admission of the hub's outgoing POSTs (WebSub
 * deliveries). A host is a callback origin (scheme://host:port), the unit
 * of the HTTP client's per-host connection cap. At most `conns` POSTs are
 * in flight to one host, and callers whose last attempt failed ("suspect")
 * hold at most suspect_cap of them (a quarter of the slots, one at least,
 * stays free of them), so retries of stalled or failing callbacks never
 * starve a healthy one on the same host. Callers over a cap wait in FIFO
 * order, healthy ones first: we never hand the HTTP client more than its
 * cap for a host, since beyond it curl queues FIFO and a healthy POST
 * would wait behind suspect ones. No I/O, no timers: it counts and queues,
 * and the caller starts its work when admitted.
 */
#ifndef HUB_HOSTSCHED_H
#define HUB_HOSTSCHED_H

#include <stdbool.h>
#include <stddef.h>

#include "rs_error.h"

struct hostsched;
struct hostsched_host;

enum hostsched_state {
    HOSTSCHED_OUT = 0,           /* neither waiting nor holding a slot */
    HOSTSCHED_WAITING,           /* in its host's queue */
    HOSTSCHED_HOLDING,           /* holds one of its host's slots */
};

/* One per caller (a subscription), embedded in it; zero it, then join.
 * The fields are the scheduler's: read state, write nothing. */
struct hostsched_ticket {
    struct hostsched_host *host; /* NULL until joined */
    enum hostsched_state state;
    bool suspect;                /* the class it waits or holds in */
    struct hostsched_ticket *next;   /* in the host's queue */
    void *ud;                    /* the caller's, given to hostsched_join */
};

/* A waiting ticket's turn came (from inside hostsched_release): the slot is
 * held for it. Return true when the work started (the slot stays held until
 * hostsched_release); false declines it (the ticket is OUT, and the slot
 * goes to the next one waiting). */
typedef bool (*hostsched_admit_cb)(void *ud, struct hostsched_ticket *t);

/* conns: slots per host (0 = 8). NULL on allocation failure. */
struct hostsched *hostsched_new(unsigned conns, hostsched_admit_cb admit);
/* Frees every host; tickets still joined must not be used after. NULL ok. */
void hostsched_free(struct hostsched *hs);

unsigned hostsched_conns(const struct hostsched *hs);
unsigned hostsched_suspect_cap(const struct hostsched *hs);
/* Hosts with at least one ticket joined. */
size_t hostsched_hosts(const struct hostsched *hs);

/* Tie an OUT, unjoined ticket to the host of url (the host is kept while a
 * ticket refers to it); ud is given back to the admit callback. RS_EINVAL
 * (not a URL with a host), RS_ENOMEM. */
int hostsched_join(struct hostsched *hs, struct hostsched_ticket *t,
                   const char *url, void *ud) RS_MUST_CHECK;
/* Untie t, whatever its state (a held slot is given back, no one admitted:
 * for teardown). A ticket never joined is a no-op. */
void hostsched_leave(struct hostsched *hs, struct hostsched_ticket *t);

/* Ask for a slot for an OUT ticket: true = held now (start the work);
 * false = t waits in its class, and the admit callback says when. A ticket
 * that is not OUT is left as it is (false when waiting, true holding). */
bool hostsched_acquire(struct hostsched *hs, struct hostsched_ticket *t,
                       bool suspect);
/* Stop waiting (a no-op unless WAITING). */
void hostsched_cancel(struct hostsched *hs, struct hostsched_ticket *t);
/* The work of a HOLDING ticket ended: the slot is free, and those waiting
 * are admitted (healthy first; suspect ones while under their cap) until
 * the host is full or none waits. */
void hostsched_release(struct hostsched *hs, struct hostsched_ticket *t);
/* Give a HOLDING ticket's slot back without admitting anyone: its work
 * never started (a failure that others would meet too; they are retried
 * later), or the caller is shutting down. */
void hostsched_return(struct hostsched *hs, struct hostsched_ticket *t);

/* Slots held on t's host (all, and suspect ones), for tests and status. */
unsigned hostsched_inflight(const struct hostsched_ticket *t);
unsigned hostsched_suspect_inflight(const struct hostsched_ticket *t);

#endif
