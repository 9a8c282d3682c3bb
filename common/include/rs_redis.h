/*
 * rs_redis.h - one Redis connection driven by a libevent loop (hiredis async
 * and its libevent adapter underneath), with an explicit state machine that
 * connects, authenticates, selects the database, and reconnects with backoff
 * by itself. It owns the connection and its timers; what the commands mean
 * is the caller's business.
 *
 * With a sentinel:// URL it also finds the primary through the Sentinels
 * (rs_sentinel.h), checks its ROLE, and follows a failover by itself: a
 * +switch-master from a Sentinel, a lost connection, or a READONLY,
 * MASTERDOWN or LOADING error reply drop the link and ask again.
 *
 * Commands are never queued while the link is down: rs_redis_cmd() fails at
 * once with RS_EAGAIN, so a caller can answer "503, nothing stored" rather
 * than promise something it cannot keep.
 *
 * hiredis 0.14 writes with write(2): the process must ignore SIGPIPE.
 */
#ifndef RS_REDIS_H
#define RS_REDIS_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"

struct event_base;
struct rs_redis;

enum rs_redis_state {
    RS_REDIS_CONNECTING = 1,  /* TCP/unix connect, AUTH, SELECT, SETNAME
                                 (and ROLE for sentinel://) in flight */
    RS_REDIS_READY,           /* commands accepted */
    RS_REDIS_DOWN,            /* lost or refused; waiting for the backoff timer */
    RS_REDIS_CLOSED,          /* rs_redis_free() is running */
    RS_REDIS_RESOLVING,       /* sentinel:// only: asking the Sentinels */
};

#define RS_REDIS_NO_TIMEOUT 0xffffffffu

struct rs_redis_opts {
    /* redis://[[user]:password@]host[:port][/db], unix:///path[?db=N]
     * (password also as ?password=), or
     * sentinel://[[user]:password@]H[:P][,H[:P]...]/MASTER[?db=N&
     *   sentinel-user=U&sentinel-password=P]: at most 16 Sentinels (port
     * 26379 by default); user and password are the Redis node's, the
     * Sentinels' own AUTH comes in the query. rediss:// is refused (the
     * hiredis we build on has no TLS). */
    const char *url;
    const char *client_name;        /* CLIENT SETNAME; may be NULL */
    unsigned connect_timeout_ms;    /* 0 = 2000 */
    unsigned command_timeout_ms;    /* default per command; 0 = 5000 */
    unsigned backoff_min_ms;        /* 0 = 50; doubles per failure, with jitter */
    unsigned backoff_max_ms;        /* 0 = 2000 */
    size_t max_pending;             /* commands in flight; 0 = 100000 */
    /* Called on every state change (not re-entrantly; the object may not be
     * freed from inside). errstr says why for DOWN, else NULL. */
    void (*on_state)(void *ud, enum rs_redis_state st, const char *errstr);
    void *ud;
};

/*
 * A reply callback runs exactly once per accepted command:
 *   rc == 0            reply is the server's answer (which may be an error
 *                      reply: check reply->type == REDIS_REPLY_ERROR);
 *   rc == RS_EIO       the connection was lost before the answer;
 *   rc == RS_ETIMEDOUT no answer within the command's timeout (the
 *                      connection is then reset: Redis cannot cancel one
 *                      command, and later replies would be misattributed);
 *   rc == RS_ECANCELED rs_redis_free() ran first.
 * reply is NULL whenever rc != 0, and valid only during the call.
 */
typedef void (*rs_redis_reply_cb)(void *ud, int rc, const redisReply *reply);

/* Starts connecting at once (on the loop's next turn: no callback runs
 * inside rs_redis_new(); the object starts CONNECTING, or RESOLVING for
 * sentinel://). NULL on allocation
 * failure, a URL it cannot parse or unusable options (then *errstr, when
 * given, points to a static explanation). */
struct rs_redis *rs_redis_new(struct event_base *base,
                              const struct rs_redis_opts *opts,
                              const char **errstr);

/*
 * Send one command, binary-safe (argvlen may be NULL for C strings).
 * timeout_ms: 0 = the default, RS_REDIS_NO_TIMEOUT for blocking commands
 * (XREAD BLOCK) that guard themselves. Returns 0 (cb will run), RS_EAGAIN
 * when not READY, RS_ETOOBIG when max_pending commands are in flight,
 * RS_ENOMEM, RS_EINVAL for bad arguments or a refused command: those that
 * change how replies arrive on the connection ([P|S][UN]SUBSCRIBE, MONITOR,
 * SYNC, PSYNC, HELLO, CLIENT REPLY) or undo what the link restores on
 * reconnect (AUTH, SELECT, RESET).
 */
int rs_redis_cmd(struct rs_redis *r, unsigned timeout_ms, rs_redis_reply_cb cb,
                 void *ud, int argc, const char **argv,
                 const size_t *argvlen) RS_MUST_CHECK;

enum rs_redis_state rs_redis_state(const struct rs_redis *r);

/* Last error text of the link ("" when none). */
const char *rs_redis_errstr(const struct rs_redis *r);

/* "host:port" ("[v6]:port") or the unix path of the node the link is
 * connected to, or was last (being READY says it is the primary now); ""
 * before the first connect. Valid until the next loop turn. */
const char *rs_redis_addr(const struct rs_redis *r);

struct rs_redis_stats {
    uint64_t commands;       /* accepted */
    uint64_t replies;        /* answered with rc == 0 */
    uint64_t failures;       /* callbacks with rc != 0 */
    uint64_t reconnects;     /* READY reached after the first time */
    uint64_t rtt_us_sum;     /* sum of round trips of answered commands */
    uint64_t rtt_us_max;
    uint64_t failovers;      /* READY on a primary other than the last one
                                (sentinel:// only; each is logged once,
                                "redis primary changed from=A to=B") */
    size_t pending;          /* in flight now */
};
void rs_redis_stats(const struct rs_redis *r, struct rs_redis_stats *out);

/* Closes the link; every pending callback runs with RS_ECANCELED before this
 * returns. Must not be called from inside one of this object's callbacks.
 * rs_redis_free(NULL) is a no-op. */
void rs_redis_free(struct rs_redis *r);

#endif
