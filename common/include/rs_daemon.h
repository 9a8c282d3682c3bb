/*
 * rs_daemon.h - what the daemons (rshub, rssource, rssub, and the bridge
 * to come) do alike: the signals - SIGTERM or SIGINT begins a drain, a
 * second one stops at once, SIGHUP reopens the log and then lets the
 * program reload -, the drain itself (a tick that asks the program whether
 * its work in flight is done, bounded by a drain time), the ready file (a
 * small JSON object written atomically) and a metrics listener (GET
 * /metrics behind the HTTP guard, and the routes a program adds: a
 * dashboard). What draining and reloading mean is the program's.
 */
#ifndef RS_DAEMON_H
#define RS_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"
#include "rs_httpguard.h"

struct event_base;
struct evhttp_request;
struct rs_metrics;
struct rs_daemon;
struct rs_metrics_server;

struct rs_daemon_opts {
    struct event_base *base;
    int64_t drain_ms;              /* the longest drain */
    unsigned drain_tick_ms;        /* how often drained is asked; 0 = 50 */
    /* The first SIGTERM or SIGINT (or rs_daemon_drain): stop taking work,
     * push out what is gathered. May be NULL. */
    void (*on_drain)(void *ud);
    /* Asked each tick while draining: is the work in flight done? NULL:
     * done at once. */
    bool (*drained)(void *ud);
    /* The drain is over - done, past drain_ms (timed_out), or a second
     * signal (timed_out) -: end the loop. Exactly once. */
    void (*on_stopped)(void *ud, bool timed_out);
    /* SIGHUP, after the log file was reopened. May be NULL. */
    void (*on_reload)(void *ud);
    void *ud;
};

/* The loop of rssource, rssub and rsbridge (rshub.c says why not its):
 * epoll's changes are applied once per loop turn, so an fd whose events
 * are switched off and on again within a turn (libcurl's sockets between
 * two requests, evhttp's between a request and its reply) costs no system
 * call. None of our fds given to the loop is a dup(), which that mode must
 * not be given. NULL when out of memory. */
struct event_base *rs_daemon_base_new(void);

/* Takes SIGTERM, SIGINT and SIGHUP on base. NULL when out of memory. */
struct rs_daemon *rs_daemon_new(const struct rs_daemon_opts *o);
void rs_daemon_free(struct rs_daemon *d);        /* NULL ok */

/* Begin the drain as a signal would (a fatal condition, a test). */
void rs_daemon_drain(struct rs_daemon *d);
bool rs_daemon_draining(const struct rs_daemon *d);

/* Write json (one object, a newline is added) to path, atomically: a
 * temporary file beside it, then rename. RS_EIO on failure (errno says). */
int rs_ready_file_write(const char *path, const char *json) RS_MUST_CHECK;

/* Name the local time zone in TZ when it is unset (":/etc/localtime", the
 * zone glibc uses then anyway). With TZ unset, glibc stats /etc/localtime
 * at every mktime() and localtime(); libzip calls them for every member of
 * a package, a tenth of a dump's unpacking. Call first thing in main. */
void rs_tz_pin(void);

/* Called first in a thread the program starts: every signal is left to
 * the loop's thread, whose events take them (a signal delivered to a
 * worker would interrupt its syscalls and bypass the loop's handling). */
void rs_thread_signals_to_loop(void);

/* A metrics listener: GET or HEAD /metrics answers m rendered (Prometheus
 * text), anything else 404, behind the HTTP guard with limits (NULL: the
 * defaults); its own counters go to m as PREFIX_* {listener="metrics"}.
 * host NULL or "": all addresses. NULL on failure, the reason in err. */
struct rs_metrics_server *rs_metrics_server_new(
    struct event_base *base, struct rs_metrics *m, const char *host, int port,
    const struct rs_httpguard_limits *limits, const char *prefix, char *err,
    size_t errsz);
/* More GET (and HEAD) routes on the listener, such as a dashboard: path
 * ending in '/' is a prefix (itself and every path below it), any other
 * path is matched exactly; /metrics stays the listener's. cb answers req;
 * rpath is the request's path without its query. path is borrowed (a
 * literal). RS_ETOOBIG past RS_METRICS_SERVER_ROUTES routes, RS_EINVAL
 * for a path not starting with '/'. */
#define RS_METRICS_SERVER_ROUTES 8
typedef void (*rs_metrics_server_route_cb)(struct evhttp_request *req,
                                           const char *rpath, void *ud);
int rs_metrics_server_route(struct rs_metrics_server *ms, const char *path,
                            rs_metrics_server_route_cb cb,
                            void *ud) RS_MUST_CHECK;
/* The port bound (the kernel's choice for port 0). */
int rs_metrics_server_port(const struct rs_metrics_server *ms);
void rs_metrics_server_free(struct rs_metrics_server *ms);  /* NULL ok */

#endif
