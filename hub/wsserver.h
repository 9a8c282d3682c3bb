/*
 * wsserver.h - the WebSocket side of the hub: a listener on the main loop
 * that hands each accepted socket to one of N libwebsockets contexts, one
 * per service thread, each owning its connections (the WebSocket protocol
 * on them, RFC 6455, lws giving the raw bytes), their send queues and a
 * per-thread channel -> clients index. It runs the threads on the seam
 * (rs_seam.h) and talks to the main loop only through seam events (what
 * to send, whom to close; who joined, who left, who wants more replay,
 * whose queue drained). On the main loop it also keeps the per-address
 * limits: a token bucket for new connections (checked at accept) and the
 * count of replays each address has going (checked by fanout.c). Read
 * access is checked in the threads at the upgrade against the snapshot of
 * read credentials they hold (readauth.h), which the main loop replaces on
 * a reload. It knows nothing of Redis, and of topics only what that
 * snapshot says.
 */
#ifndef HUB_WSSERVER_H
#define HUB_WSSERVER_H

#include <stddef.h>
#include <stdint.h>

#include "seam.h"

struct event_base;
struct readauth;
struct readnote;
struct rs_metrics;

struct ws_server_opts {
    struct event_base *base;  /* the main loop, where the listener runs */
    const char *host;         /* NULL or "*" = every interface */
    int port;                 /* 0 = ephemeral; see ws_server_port() */
    unsigned threads;         /* 0 = one per CPU */
    size_t soft_limit;        /* queued bytes that start the soft timer; 0 = 1 MiB */
    unsigned soft_secs;       /* over soft_limit this long: cut; 0 = 10 */
    size_t hard_limit;        /* queued bytes that cut at once; 0 = 16 MiB */
    unsigned ping_secs;       /* keepalive ping interval; 0 = 30 */
    const struct seam_sink *to_main;  /* where JOIN/LEAVE/MORE/DRAINED go;
                                         read at each delivery */
    size_t queue_high;        /* live notification bytes waiting for one
                                 service thread above which ws_server_post
                                 says pause; 0 = 64 MiB */
    /* Per client address (seam.h: IPv4, or an IPv6 /64). 0 = no limit. */
    unsigned conn_rate;       /* new connections per second, sustained */
    unsigned conn_burst;      /* ... and at once; 0 = conn_rate */
    unsigned replays_per_addr;  /* replays going at once */
    size_t max_addrs;         /* addresses tracked; 0 = 65536; beyond it
                                 new addresses are not limited */
    struct rs_metrics *metrics;  /* registers its series here; may be NULL */
    struct readauth *auth;    /* read credentials (each thread takes a
                                 reference); NULL: every channel public */
    struct readnote *notes;   /* where refusals are noted; may be NULL;
                                 must outlive the server */
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
    uint64_t rate_refused;    /* refused at accept: address over its rate */
    uint64_t proto_fails;     /* closed 1002/1007 for breaking RFC 6455 */
    size_t addrs;             /* addresses the per-address limits track */
};

struct ws_server;

/* Creates the contexts, starts the threads and listens (accepting on the
 * main loop). NULL with *err set on failure. */
struct ws_server *ws_server_new(const struct ws_server_opts *o, const char **err);

int ws_server_port(const struct ws_server *s);
unsigned ws_server_threads(const struct ws_server *s);

#define WS_POST_PAUSE 1

/* Main loop: hand ev to service thread `thread` (ownership passes). 0, or
 * WS_POST_PAUSE when this SEAM_MSG took the live notifications waiting for
 * that thread over queue_high: it is queued all the same, and that thread
 * sends one SEAM_DRAINED once they are back under half; post no more live
 * notifications meanwhile (replays and control events are not paused). */
int ws_server_post(struct ws_server *s, unsigned thread, struct seam_ev *ev);

void ws_server_stats(const struct ws_server *s, struct ws_stats *out);

/* Main loop only: new read credentials (a reload). Each thread takes a
 * reference, checks its connections again as if they connected now and
 * closes those no longer let in with 4008; connections whose credential
 * expires are closed the same way, by the threads themselves. */
void ws_server_set_auth(struct ws_server *s, struct readauth *ra);

/* Main loop only. A client from addr starts a replay: 0, or RS_ETOOBIG
 * when its address has replays_per_addr going (then nothing is counted).
 * Every 0 is matched by one ws_server_replay_end. */
int ws_server_replay_begin(struct ws_server *s,
                           const struct seam_addr *addr) RS_MUST_CHECK;
void ws_server_replay_end(struct ws_server *s, const struct seam_addr *addr);

/* The address as text ("192.0.2.1", "2001:db8::/64"; "?" when unknown). */
void ws_server_addr_format(const struct seam_addr *addr, char *buf,
                           size_t len);

/* Close every connection with 1001, wait up to grace_ms for them to go,
 * stop and join the threads, free everything. NULL is a no-op. */
void ws_server_free(struct ws_server *s, unsigned grace_ms);

#endif
