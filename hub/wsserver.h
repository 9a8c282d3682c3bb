/*
 * wsserver.h - the WebSocket side of the hub: a listener on the main loop
 * that hands each accepted socket to one of N libwebsockets contexts, one
 * per service thread, each owning its connections, their send queues and a
 * per-thread channel -> clients index. It talks to the main loop only through seam events (what
 * to send, whom to close; who joined, who left, who wants more replay). It
 * knows nothing of Redis or topics.
 */
#ifndef HUB_WSSERVER_H
#define HUB_WSSERVER_H

#include <stddef.h>
#include <stdint.h>

#include "seam.h"

struct event_base;

struct ws_server_opts {
    struct event_base *base;  /* the main loop, where the listener runs */
    const char *host;         /* NULL or "*" = every interface */
    int port;                 /* 0 = ephemeral; see ws_server_port() */
    unsigned threads;         /* 0 = one per CPU */
    size_t soft_limit;        /* queued bytes that start the soft timer; 0 = 1 MiB */
    unsigned soft_secs;       /* over soft_limit this long: cut; 0 = 10 */
    size_t hard_limit;        /* queued bytes that cut at once; 0 = 16 MiB */
    unsigned ping_secs;       /* keepalive ping interval; 0 = 30 */
    struct seam_queue *to_main;  /* where JOIN/LEAVE/MORE go */
};

struct ws_stats {
    uint64_t accepted;        /* connections established, ever */
    uint64_t open;            /* connections open now */
    uint64_t frames;          /* notifications written */
    uint64_t bytes;           /* bytes handed to the kernel */
    uint64_t writes;          /* write calls (frames/writes = batching) */
    uint64_t slow_drops;      /* clients cut for falling behind */
    uint64_t closed_gap;      /* clients closed with 4001 */
    uint64_t refused;         /* accepts that failed (EMFILE, ...) */
};

struct ws_server;

/* Creates the contexts, starts the threads and listens (accepting on the
 * main loop). NULL with *err set on failure. */
struct ws_server *ws_server_new(const struct ws_server_opts *o, const char **err);

int ws_server_port(const struct ws_server *s);
unsigned ws_server_threads(const struct ws_server *s);

/* Hand ev to service thread `thread` (ownership passes). Thread-safe. */
void ws_server_post(struct ws_server *s, unsigned thread, struct seam_ev *ev);

void ws_server_stats(const struct ws_server *s, struct ws_stats *out);

/* Close every connection with 1001, wait up to grace_ms for them to go,
 * stop and join the threads, free everything. NULL is a no-op. */
void ws_server_free(struct ws_server *s, unsigned grace_ms);

#endif
