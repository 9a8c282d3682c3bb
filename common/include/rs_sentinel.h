/*
 * rs_sentinel.h - finds the current primary of a named master through a
 * list of Redis Sentinels, and tells when it changes: asks each Sentinel in
 * turn (SENTINEL get-master-addr-by-name), and keeps one subscription to
 * +switch-master on a reachable Sentinel, moving on to the next one when it
 * goes away. It owns its hiredis connections to the Sentinels and their
 * timers; connecting to the primary and checking its ROLE is the caller's
 * (rs_redis, which builds one of these for a sentinel:// URL).
 *
 * hiredis 0.14 writes with write(2): the process must ignore SIGPIPE.
 */
#ifndef RS_SENTINEL_H
#define RS_SENTINEL_H

#include <stdbool.h>
#include <stddef.h>

#include "rs_error.h"

struct event_base;
struct rs_sentinel;

/* A sentinel:// URL names at most this many Sentinels: a deployment has
 * three or five, and each one asked can cost a connect timeout. */
#define RS_SENTINEL_MAX_NODES 16
#define RS_SENTINEL_DEFAULT_PORT 26379

struct rs_sentinel_node {
    const char *host;           /* IP address or name (resolved blocking) */
    int port;                   /* 1..65535 */
};

struct rs_sentinel_opts {
    const struct rs_sentinel_node *nodes;   /* copied */
    size_t n_nodes;                          /* 1..RS_SENTINEL_MAX_NODES */
    const char *master;          /* the name in "sentinel monitor NAME ..." */
    const char *user;            /* AUTH user to the Sentinels; may be NULL */
    const char *password;        /* AUTH to the Sentinels; NULL: none */
    unsigned timeout_ms;         /* per Sentinel: connect + answer; 0 = 2000 */
    unsigned retry_min_ms;       /* watch: delay before the next Sentinel */
    unsigned retry_max_ms;       /*  doubles per round of all; 0 = 50, 2000 */
    /* A +switch-master message for our master: the new primary's address
     * (host valid only during the call). NULL: no watch is kept. The
     * object may be freed from inside (it is then freed on the way out). */
    void (*on_switch)(void *ud, const char *host, int port);
    void *ud;
};

/* Copies opts; the watch (when on_switch is given) starts on the loop's
 * next turn. NULL on allocation failure or unusable options (then *errstr,
 * when given, points to a static explanation). */
struct rs_sentinel *rs_sentinel_new(struct event_base *base,
                                    const struct rs_sentinel_opts *opts,
                                    const char **errstr);

/*
 * The answer to rs_sentinel_resolve(), run exactly once, never inside
 * rs_sentinel_resolve():
 *   rc == 0             host:port is the primary a Sentinel named (host
 *                       valid only during the call);
 *   rc == RS_ENOTFOUND  no Sentinel named one; errstr (valid during the
 *                       call) names the master, how many Sentinels were
 *                       asked and the last one's reason;
 *   rc == RS_ECANCELED  rs_sentinel_free() ran first (host, errstr NULL).
 * The object may be freed from inside.
 */
typedef void (*rs_sentinel_resolve_cb)(void *ud, int rc, const char *host,
                                       int port, const char *errstr);

/* Ask the Sentinels, one at a time, each within timeout_ms, starting with
 * the last one that answered; the first address wins. 0 (cb will run),
 * RS_ESTATE while a resolve is in flight, RS_ENOMEM. */
int rs_sentinel_resolve(struct rs_sentinel *s, rs_sentinel_resolve_cb cb,
                        void *ud) RS_MUST_CHECK;

/* The watch is subscribed now; "host:port" of its Sentinel ("" when not). */
bool rs_sentinel_watching(const struct rs_sentinel *s);
const char *rs_sentinel_watch_addr(const struct rs_sentinel *s);

/* Closes every Sentinel connection; a resolve in flight gets its callback
 * with RS_ECANCELED before this returns, and on_switch never runs again.
 * Safe from inside this object's callbacks (memory goes on the way out).
 * rs_sentinel_free(NULL) is a no-op. */
void rs_sentinel_free(struct rs_sentinel *s);

#endif
