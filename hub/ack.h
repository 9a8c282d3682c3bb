/*
 * ack.h - replicated acknowledgement (--ack-replicas N): whether N replicas
 * hold what this node has written or read. It owns a Redis link of its own
 * (rshub-ack) for probes, a probe write plus WAIT that covers every write
 * (or read) whose reply came before it on the same server; the barriers
 * waiting for one, in group commits; the state /readyz reports, the
 * metrics and the log lines of WAITs falling short or recovering. The
 * publish link's own WAIT is backlog.c's, which reports it here. Why this
 * keeps a failover from losing what anyone saw: docs/internals/failover.md.
 */
#ifndef HUB_ACK_H
#define HUB_ACK_H

#include <stdbool.h>
#include <stdint.h>

#include "rs_redis.h"

struct event_base;
struct rs_metrics;
struct ack;

/* rc of a barrier whose probe WAIT got fewer than N replicas in time, and
 * of a publish stored but not confirmed (backlog.h): what it covers may
 * be lost by a failover. */
#define ACK_ESHORT (-100)
/* rc of a barrier whose probe ran on another server than the one the
 * covered work was done on (the primary changed in between). */
#define ACK_EMOVED (-101)

struct ack_opts {
    struct event_base *base;
    const char *redis_url;
    const char *prefix;              /* key prefix ("rshub:") */
    const char *node_id;             /* the probe key is PREFIXack-probe:NODE */
    unsigned replicas;               /* N >= 1 */
    unsigned timeout_ms;             /* the WAIT's timeout */
    unsigned command_timeout_ms;     /* the link's other commands */
    unsigned idle_ms;                /* a probe when no WAIT ran for this
                                        long (readiness); 0 = 2000 */
    struct rs_metrics *metrics;      /* may be NULL */
    /* the probe link's state changes, as backlog_opts.on_state ("ack") */
    void (*on_state)(void *ud, const char *which, enum rs_redis_state st,
                     const char *errstr);
    void *ud;
};

/* rc 0: confirmed on N replicas; ACK_ESHORT, ACK_EMOVED, RS_EIO,
 * RS_ETIMEDOUT, RS_EPROTO; RS_ECANCELED at ack_free. */
typedef void (*ack_cb)(void *ud, int rc);

struct ack *ack_new(const struct ack_opts *o, const char **err);
/* Pending barriers get RS_ECANCELED. ack_free(NULL) is a no-op. */
void ack_free(struct ack *a);

/*
 * Call cb once every command whose reply reached this process before this
 * call, on a link to the server at addr (rs_redis_addr of that link when
 * its reply came; NULL or "" when not known), is held by N replicas: a
 * probe write on the ack link, then WAIT N timeout. Replication is one
 * ordered stream per primary, and the probe runs after those commands, so
 * a WAIT that counts N for the probe counts N for them. Barriers asked for
 * while a probe is in flight share the next one (one probe in flight at a
 * time). The probe must run on the same server: when the ack link is
 * connected to another address, cb gets ACK_EMOVED. Returns 0 (cb will
 * run) or RS_EAGAIN (the ack link is not READY), RS_ENOMEM.
 */
int ack_barrier(struct ack *a, const char *addr, ack_cb cb, void *ud) RS_MUST_CHECK;

/* A WAIT's outcome on another link (which: "publish"): rc 0 with the
 * replicas it counted, or the link's error; secs from sending to answer.
 * Feeds readiness, the metrics and the log lines. */
void ack_observe(struct ack *a, const char *which, int rc, long long got,
                 double secs);

/* The last WAIT (any link) counted N replicas and the ack link is READY;
 * else *why (static) says what is missing. */
bool ack_ok(const struct ack *a, const char **why);

/* The replicas the last WAIT counted (-1: none yet, or it failed). */
long long ack_last_count(const struct ack *a);

unsigned ack_replicas(const struct ack *a);
unsigned ack_timeout_ms(const struct ack *a);

struct ack_stats {
    uint64_t waits;          /* WAITs answered, every link */
    uint64_t timeouts;       /* ...that counted fewer than N */
    uint64_t probes;         /* probe rounds sent */
    uint64_t moved;          /* barriers refused: another server */
    size_t waiting;          /* barriers waiting now */
};
void ack_stats(const struct ack *a, struct ack_stats *out);

/* "host:port" the ack link is (or last was) connected to. */
const char *ack_addr(const struct ack *a);

#endif
