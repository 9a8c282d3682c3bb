/*
 * seam.h - the only place where the hub's threads meet: the main libevent
 * loop (ingest, Redis, channel cursors) and the libwebsockets service
 * threads (sockets, per-connection queues). Each direction is a locked
 * FIFO of events plus a wake-up: an eventfd the main loop watches, and
 * lws_cancel_service() for a service thread (called by wsserver.c through
 * the wake hook). Messages cross as refcounted struct msg (msg.h);
 * nothing else is shared.
 */
#ifndef HUB_SEAM_H
#define HUB_SEAM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "msg.h"

#define SEAM_NO_CHAN 0xffffffffu
#define SEAM_TEXT 160

/* A client's address as the per-address limits count it: IPv4 as an
 * IPv4-mapped IPv6 address, IPv6 cut to its /64 (one host is often given a
 * whole /64). All zero when unknown. */
struct seam_addr {
    uint8_t b[16];
};

enum seam_type {
    /* main -> service thread */
    SEAM_MSG = 1,   /* live notification m for channel m->chan */
    SEAM_ATTACH,    /* client joins chan; flag: replay mode, else live
                       after id (skip everything <= id) */
    SEAM_REPLAY,    /* client: msgs[0..n) in order; id = last id covered;
                       flag: done, switch to live skipping <= id */
    SEAM_CLOSE,     /* client (0: every client of chan): close with code
                       and text as reason */
    SEAM_STOP,      /* thread: close every client with 1001 and exit */
    SEAM_ADOPT,     /* thread: take the accepted socket fd */
    /* service thread -> main */
    SEAM_JOIN,      /* client connected to channel name `text`; flag: since
                       given as id; addr: where from */
    SEAM_LEAVE,     /* client gone; chan is SEAM_NO_CHAN if never attached */
    SEAM_MORE,      /* client drained its replay: send more after id */
};

struct seam_ev {
    struct seam_ev *next;
    enum seam_type type;
    unsigned thread;          /* service thread index */
    uint64_t client;          /* client id, unique in the process */
    unsigned chan;
    struct msg_id id;
    bool flag;
    uint16_t code;
    struct seam_addr addr;    /* SEAM_ADOPT, SEAM_JOIN: the peer */
    int fd;                   /* SEAM_ADOPT: owned by the event until adopted */
    struct msg *m;            /* SEAM_MSG: one reference owned by the event */
    struct msg **msgs;        /* SEAM_REPLAY: references owned by the event */
    size_t nmsgs;
    char text[SEAM_TEXT];
};

/* A locked FIFO with a wake-up hook run after a push that made it
 * non-empty (one wake per batch, not per event). */
struct seam_queue {
    pthread_mutex_t mu;
    struct seam_ev *head, *tail;
    void (*wake)(void *ud);
    void *wake_ud;
};

int seam_queue_init(struct seam_queue *q, void (*wake)(void *), void *ud);
/* Frees every event still queued (with its message references). */
void seam_queue_cleanup(struct seam_queue *q);
/* Push ev (ownership passes to the queue); wakes the consumer when the
 * queue was empty. */
void seam_push(struct seam_queue *q, struct seam_ev *ev);
/* Take every queued event, oldest first, as a list the caller owns. */
struct seam_ev *seam_take(struct seam_queue *q);

/* calloc'ed event of type t; NULL on ENOMEM. */
struct seam_ev *seam_ev_new(enum seam_type t);
/* Frees ev and the message references it still owns. */
void seam_ev_free(struct seam_ev *ev);

/* An eventfd for waking the main loop; the wake hook for its queue. */
int seam_eventfd_new(void);
void seam_eventfd_wake(void *fdp);       /* ud: int * */
void seam_eventfd_drain(int fd);

#endif
