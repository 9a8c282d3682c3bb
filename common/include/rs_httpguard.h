/*
 * rs_httpguard.h - keeps slow or greedy clients from holding an evhttp
 * server's connections: a deadline for each request head and one for its
 * body, scaled by its size, that incoming bytes do not push back; a cap on
 * connections at once, in all and per client address; counted refusals and
 * closures, and a log line at most once per client address per interval
 * (the caller writes it). The routes and what they answer stay the
 * caller's; rs_httpguard_listen makes the guard and binds the server, as
 * every daemon's listener does. Design: docs/internals/httpguard.md.
 */
#ifndef RS_HTTPGUARD_H
#define RS_HTTPGUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_config.h"
#include "rs_error.h"

struct event_base;
struct evhttp;
struct evhttp_request;
struct rs_metrics;
struct rs_httpguard;

/* Defaults of the limits (a zero field in rs_httpguard_limits). */
#define RS_HTTPGUARD_HEAD_MS 10000          /* 10 s for a request head */
#define RS_HTTPGUARD_BODY_MS 10000          /* grace before a body's rate */
#define RS_HTTPGUARD_BODY_RATE (64 * 1024)  /* bytes/s a body averages */
#define RS_HTTPGUARD_IDLE_MS 30000          /* keep-alive wait, write stall */
#define RS_HTTPGUARD_PER_ADDR 64            /* connections per address */
#define RS_HTTPGUARD_LOG_MS 60000           /* one line per address per */
#define RS_HTTPGUARD_LOG_BURST 20           /* lines per interval, overall */

/*
 * The limits, as the daemons' options set them (RS_HTTPGUARD_CONFIG). Times
 * are monotonic and counted by the guard, not reset by bytes:
 *
 *   - A request head (request line and headers) must be complete within
 *     head_ms of the connection opening, or, for a later request on a
 *     kept-alive connection, of its first byte.
 *   - A body must be complete within body_ms + its size / body_rate of the
 *     end of its head; while it arrives, it is cut as soon as it falls
 *     behind that pace (bytes so far / body_rate + body_ms), so a chunked
 *     body of unknown size is held to the same rule.
 *   - idle_ms is the socket's read and write timeout (evhttp's own is
 *     cleared), which bytes do reset: how long a kept-alive connection may
 *     wait for its next request, and how long a reply may wait for the
 *     client to read.
 *   - max_conns: connections at once. When it is reached, a connection
 *     waiting for a request head is closed to make room: the oldest whose
 *     address holds other connections too (among the 64 oldest), else the
 *     oldest; if no connection is waiting for one, the new connection is
 *     refused.
 *     0: a quarter of the process's descriptor limit (RLIMIT_NOFILE).
 *   - max_per_addr: connections at once from one client address (IPv4
 *     address, IPv6 /64); one more is refused. 0: no such cap (behind a
 *     reverse proxy every client has the proxy's address).
 *
 * Refused and deadline-closed connections get a best-effort "503" or
 * "408" reply with Connection: close, then are closed.
 *
 * A zero head_ms, body_ms, body_rate or idle_ms takes the default above;
 * max_conns 0 is the automatic cap and max_per_addr 0 no cap, so a program
 * without options starts from RS_HTTPGUARD_LIMITS_DEFAULT.
 */
struct rs_httpguard_limits {
    int64_t head_ms;
    int64_t body_ms;
    uint64_t body_rate;
    int64_t idle_ms;
    int64_t max_conns;
    int64_t max_per_addr;
};

#define RS_HTTPGUARD_LIMITS_DEFAULT                                         \
    { RS_HTTPGUARD_HEAD_MS, RS_HTTPGUARD_BODY_MS, RS_HTTPGUARD_BODY_RATE,    \
      RS_HTTPGUARD_IDLE_MS, 0, RS_HTTPGUARD_PER_ADDR }

/* The option rows of the limits for a daemon's table (rs_config.h), the
 * same names and ranges in every program. idle_def: the default of
 * --http-idle-time, as written in the file ("30s"). */
#define RS_HTTPGUARD_CONFIG(lim, idle_def)                                   \
    RS_CONFIG_DURATION("http-head-time", 0, &(lim)->head_ms, "10s", 100,     \
                       3600000, "time for a request's head (line and "       \
                       "headers), whatever bytes trickle in"),               \
    RS_CONFIG_DURATION("http-body-time", 0, &(lim)->body_ms, "10s", 100,     \
                       3600000, "time for a body, plus its size divided "    \
                       "by --http-body-rate"),                               \
    RS_CONFIG_SIZE("http-body-rate", 0, &(lim)->body_rate, "64K", 1,         \
                   1073741824, "bytes a second a body must average after "   \
                   "--http-body-time"),                                      \
    RS_CONFIG_DURATION("http-idle-time", 0, &(lim)->idle_ms, (idle_def),     \
                       100, 3600000, "time a kept-alive connection waits "   \
                       "for its next request, and a reply for the client "   \
                       "to read"),                                           \
    RS_CONFIG_INT("http-max-conns", 0, &(lim)->max_conns, "0", 0, 10000000,  \
                  "HTTP connections at once (0: a quarter of the "           \
                  "descriptor limit); when full, the one waiting longest "   \
                  "for a request head is closed"),                           \
    RS_CONFIG_INT("http-max-conns-per-addr", 0, &(lim)->max_per_addr, "64",  \
                  0, 10000000, "HTTP connections at once from one client "   \
                  "address or IPv6 /64 (0: no cap, e.g. behind a proxy)")

/* Why a connection was refused or closed by the guard. */
enum rs_httpguard_event {
    RS_HTTPGUARD_EV_PER_ADDR = 0,  /* refused: its address is at max_per_addr */
    RS_HTTPGUARD_EV_FULL,          /* refused: max_conns, none to make room */
    RS_HTTPGUARD_EV_EVICTED,       /* closed to make room (waited for a head) */
    RS_HTTPGUARD_EV_HEAD_TIMEOUT,  /* closed: its head was not done in time */
    RS_HTTPGUARD_EV_BODY_TIMEOUT,  /* closed: its body fell behind */
    RS_HTTPGUARD_EVENTS,
};

/* "per_address", "full", "evicted", "head_timeout", "body_timeout". */
const char *rs_httpguard_event_name(enum rs_httpguard_event ev);

/* What a log line reports; valid during the callback. */
struct rs_httpguard_note {
    const char *listener;           /* opts.name */
    enum rs_httpguard_event event;  /* this event */
    const char *addr;               /* the client's address or IPv6 /64 */
    uint64_t events;                /* guard events from addr since its last
                                       line, this one included */
    uint64_t unlogged;              /* events of other addresses not logged
                                       since the last line (burst cap) */
};

/* At most once per client address per log_ms, and at most
 * RS_HTTPGUARD_LOG_BURST times per log_ms in all. From the loop. */
typedef void (*rs_httpguard_log_cb)(void *ud,
                                    const struct rs_httpguard_note *n);

/* A ready-made on_log for the daemons: one WARN line through rs_log
 * ("http connection refused" or "http connection closed", with listener,
 * client, reason, client_events and others_unlogged). ud is unused. */
void rs_httpguard_log_warn(void *ud, const struct rs_httpguard_note *n);

typedef void (*rs_httpguard_request_cb)(struct evhttp_request *req,
                                        void *arg);

struct rs_httpguard_opts {
    struct event_base *base;
    /* The server to guard, before it has connections. From now on its
     * bufferevent callback (evhttp_set_bevcb), general request callback
     * (evhttp_set_gencb) and timeout (evhttp_set_timeout) are the guard's;
     * do not set them again: the handler is on_request or
     * rs_httpguard_set_handler, the timeout limits.idle_ms. */
    struct evhttp *http;
    const char *name;               /* "http": logs, the metrics' label */
    struct rs_httpguard_limits limits;   /* see above for zero fields */
    rs_httpguard_request_cb on_request;  /* NULL: 404 until one is set */
    void *request_arg;
    /* Registered here if given: PREFIX_connections{listener} (a gauge),
     * PREFIX_refused_total{listener,reason} (per_address, full) and
     * PREFIX_closed_total{listener,reason} (evicted, head_timeout,
     * body_timeout). */
    struct rs_metrics *metrics;
    const char *metrics_prefix;     /* "rshub_http" */
    rs_httpguard_log_cb on_log;     /* NULL: nothing is reported */
    void *log_ud;
    unsigned log_ms;                /* 0: RS_HTTPGUARD_LOG_MS */
};

/*
 * Guard o->http from now on (connections it already has are not). Strings
 * in o are copied. NULL on failure: out of memory, a negative limit, or a
 * metric that cannot be registered; *err (if err) then says which.
 */
struct rs_httpguard *rs_httpguard_new(const struct rs_httpguard_opts *o,
                                      const char **err);

struct evhttp_bound_socket;

/*
 * Guard o->http (rs_httpguard_new) and bind it to host:port (host NULL or
 * "": every IPv4 address; port 0: one the kernel picks): the listener
 * setup every daemon shares. *guard is set as soon as the guard is made,
 * so the caller's teardown frees it (after evhttp_free) whatever fails
 * after; *bound and *bound_port (the port the socket got) once bound. 0,
 * RS_ENOMEM (the guard could not be made: out of memory, a negative limit,
 * a metric not registered) or RS_EIO ("cannot listen on HOST:PORT: why"),
 * with the message in err.
 */
int rs_httpguard_listen(const struct rs_httpguard_opts *o, const char *host,
                        unsigned port, struct rs_httpguard **guard,
                        struct evhttp_bound_socket **bound, int *bound_port,
                        char *err, size_t errsz) RS_MUST_CHECK;

/* "SCHEME://HOST:PORT" (no slash after): where a client on this host
 * reaches a listener bound to host:port; a wildcard or empty host is
 * 127.0.0.1, an IPv6 one in brackets. 0, or -1 when buf is too small. */
int rs_httpguard_local_url(const char *scheme, const char *host, int port,
                           char *buf, size_t n);

/* host (of a listen address) binds every address: NULL, "", 0.0.0.0, ::.
 * A URL made from it reaches only this host. */
bool rs_httpguard_host_is_wildcard(const char *host);

/* A warning when url, made by rs_httpguard_local_url from host, is what
 * a daemon gives out and host is a wildcard: it names the option that
 * sets the real one. Nothing when host is not a wildcard. */
void rs_httpguard_warn_local_url(const char *host, const char *url,
                                 const char *option);

/* The request handler from now on (NULL: 404). */
void rs_httpguard_set_handler(struct rs_httpguard *g,
                              rs_httpguard_request_cb cb, void *arg);

struct rs_httpguard_stats {
    uint64_t accepted;              /* connections admitted */
    uint64_t events[RS_HTTPGUARD_EVENTS];
    uint64_t open;                  /* admitted and not yet closed */
    uint64_t addrs;                 /* client addresses among them */
    uint64_t max_conns;             /* the cap in force (0 resolved) */
};

void rs_httpguard_stats(const struct rs_httpguard *g,
                        struct rs_httpguard_stats *out);

/*
 * Call after evhttp_free of the guarded server (which closes its
 * connections; libevent finalizes their bufferevents later on the loop or
 * in event_base_free, and what the guard keeps for each is freed then),
 * and before event_base_free. The loop may run in between, and after: the
 * connections evhttp let go get nothing new to send (what evhttp had just
 * queued for them is dropped, as evhttp itself would) and call into nothing
 * freed. The rest of a reply that was being written can meet EPIPE on the
 * shut socket: a process serving HTTP with libevent ignores SIGPIPE.
 * rs_httpguard_free(NULL) is a no-op.
 */
void rs_httpguard_free(struct rs_httpguard *g);

#endif
