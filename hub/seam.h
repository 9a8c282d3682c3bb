/*
 * seam.h - what the hub's main loop and its WebSocket service threads say to
 * each other: one event type for both directions and the client address the
 * per-address limits count. The crossing itself (FIFOs, wake-ups, the
 * threads, byte accounting) is common/seam.c's (rs_seam.h), run by
 * wsserver.c; an event is an rs_seam item. Notifications ride in events as
 * refcounted struct msg (msg.h).
 */
#ifndef HUB_SEAM_H
#define HUB_SEAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "msg.h"
#include "rs_seam.h"

struct readauth;

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
    SEAM_ADOPT,     /* thread: take the accepted socket fd */
    SEAM_AUTH,      /* thread: the read credentials now in force (auth) */
    /* service thread -> main */
    SEAM_JOIN,      /* client connected to channel name `text`; flag: since
                       given as id; addr: where from */
    SEAM_LEAVE,     /* client gone; chan is SEAM_NO_CHAN if never attached */
    SEAM_MORE,      /* client drained its replay: send more after id */
    SEAM_DRAINED,   /* the thread's live notifications waiting are back
                       under half its queue_high (ws_server_post paused) */
};

struct seam_ev {
    struct rs_seam_item item;
    enum seam_type type;
    unsigned thread;          /* service thread index */
    uint64_t client;          /* client id, unique in the process */
    unsigned chan;
    struct msg_id id;
    bool flag;
    uint16_t code;            /* a close's; SEAM_ATTACH: SEAM_AS_NOW or 0 */
    struct seam_addr addr;    /* SEAM_ADOPT, SEAM_JOIN: the peer */
    int fd;                   /* SEAM_ADOPT: owned by the event until adopted */
    struct msg *m;            /* SEAM_MSG: one reference owned by the event */
    struct msg **msgs;        /* SEAM_REPLAY: references owned by the event */
    struct readauth *auth;    /* SEAM_AUTH: one reference owned by the event */
    size_t nmsgs;
    char text[SEAM_TEXT];
};

/* SEAM_ATTACH: the client's since was beyond the newest id, read as now:
 * its 101 says so (X-Hub-Since: now). */
#define SEAM_AS_NOW 1

/* Where the service threads' events go on the main loop: every event taken
 * in one wake-up, oldest first (seam_ev_next); the callee frees each. */
typedef void (*seam_sink_cb)(void *ud, struct seam_ev *list);

struct seam_sink {
    seam_sink_cb cb;
    void *ud;
};

/* calloc'ed event of type t; NULL on ENOMEM. */
struct seam_ev *seam_ev_new(enum seam_type t);
/* Frees ev and the message references (and descriptor) it still owns.
 * NULL is a no-op. */
void seam_ev_free(struct seam_ev *ev);

/* The event an item is (NULL for NULL), and the next one in a list. */
struct seam_ev *seam_ev_of(struct rs_seam_item *it);
struct seam_ev *seam_ev_next(const struct seam_ev *ev);

/* rs_seam's on_drop: frees an event nobody took. */
void seam_ev_drop(void *ud, struct rs_seam_item *it);

#endif
