/*
 * ack.c - replicated acknowledgement (ack.h). One link of its own
 * (rshub-ack) carries probes: SET PREFIXack-probe:NODE, then WAIT N
 * timeout, pipelined. WAIT counts the replicas that hold the writes of the
 * connection it is sent on, so the probe gives this link a write that comes
 * after everything the barriers cover. Never on the tail link: its CLIENT
 * UNBLOCK could end a WAIT early. Never on the command link: a WAIT
 * blocks its connection, and page reads and CLIENT UNBLOCK must not queue
 * behind one. The argument: docs/internals/failover.md.
 */
#include <event2/event.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define RS_LOG_MODULE "ack"
#include "ack.h"
#include "rs_alloc.h"
#include "rs_log.h"
#include "rs_metrics.h"
#include "rs_time.h"

#define ACK_ADDR_MAX 280

/* One barrier waiting for the probe of its round. */
struct waiter {
    struct waiter *next;
    uint64_t round;                /* the probe that covers it */
    ack_cb cb;
    void *ud;
    char addr[ACK_ADDR_MAX];       /* "" = any server */
};

struct ack {
    struct ack_opts o;
    char *key;                     /* the probe key */
    struct rs_redis *link;
    struct event *ev_idle;
    struct waiter *head, *tail;    /* FIFO, rounds ascending */
    size_t nwaiting;
    uint64_t next_round;           /* the round new barriers join */
    bool probing;                  /* a round (SET + WAIT) is in flight */
    bool set_failed;               /* the round's SET was refused */
    struct timespec sent;          /* when the round went out */
    struct timespec last_wait;     /* when any WAIT was last answered */
    long long last_count;          /* replicas the last WAIT counted; -1 */
    bool short_now;                /* the last WAIT counted fewer than N
                                      (logged once per transition) */
    bool known;                    /* a WAIT has been answered */
    bool role_pending;             /* a ROLE is in flight */
    bool below_now;                /* the primary lists more replicas than
                                      --ack-replicas (said once) */
    struct timespec last_role;     /* when ROLE was last sent */
    struct ack_stats st;
    struct rs_metrics_histogram *m_wait;
    struct rs_metrics_counter *m_timeouts_pub, *m_timeouts_probe;
    struct rs_metrics_gauge *m_replicas;
};

/* ROLE is asked on READY and then every ACK_ROLE_EVERY_S. */
#define ACK_ROLE_EVERY_S 10

static double
elapsed(const struct timespec *from, const struct timespec *to)
{
    return (double)(to->tv_sec - from->tv_sec) +
           (double)(to->tv_nsec - from->tv_nsec) / 1e9;
}

/* ------------------------------------------------------------- outcomes */

/* Every WAIT's answer comes here: readiness, metrics, and one log line per
 * transition between "enough replicas" and "too few". */
static void
ack_note(struct ack *a, const char *which, int rc, long long got, double secs)
{
    char g[24], w[24], t[24];
    bool fell_short = rc != 0 || got < (long long)a->o.replicas;

    clock_gettime(CLOCK_MONOTONIC, &a->last_wait);
    a->last_count = rc == 0 ? got : -1;
    a->known = true;
    a->st.waits++;
    if (strcmp(which, "publish") == 0)
        rs_metrics_histogram_observe(a->m_wait, secs);
    if (fell_short) {
        a->st.timeouts++;
        rs_metrics_counter_inc(strcmp(which, "publish") == 0
                                   ? a->m_timeouts_pub : a->m_timeouts_probe);
    }
    if (fell_short == a->short_now)
        return;
    a->short_now = fell_short;
    snprintf(g, sizeof(g), "%lld", rc == 0 ? got : 0);
    snprintf(w, sizeof(w), "%u", a->o.replicas);
    snprintf(t, sizeof(t), "%ums", a->o.timeout_ms);
    if (fell_short)
        rs_log_kv(RS_LOG_WARN, "acknowledgement needs replicas: fewer "
                  "confirmed than --ack-replicas; publishes get 504 and "
                  "fan-out holds", "link", which, "confirmed", g,
                  "wanted", w, "timeout", t,
                  rc != 0 ? "error" : NULL, rs_strerror(rc), NULL);
    else
        rs_log_kv(RS_LOG_INFO, "acknowledgement needs replicas: confirmed "
                  "again", "link", which, "confirmed", g, "wanted", w, NULL);
}

void
ack_observe(struct ack *a, const char *which, int rc, long long got,
            double secs)
{
    if (rc != RS_ECANCELED)
        ack_note(a, which, rc, got, secs);
}

/* ---------------------------------------------------------------- probes */

static void probe_send(struct ack *a);

/* Answer the barriers of round `round`, oldest first. */
static void
round_done(struct ack *a, uint64_t round, int rc)
{
    while (a->head != NULL && a->head->round == round) {
        struct waiter *w = a->head;
        a->head = w->next;
        if (a->head == NULL)
            a->tail = NULL;
        a->nwaiting--;
        int wrc = rc;
        if (wrc == 0 && w->addr[0] != '\0' &&
            strcmp(w->addr, rs_redis_addr(a->link)) != 0) {
            /* the probe ran on another server: it says nothing of the
             * work it was to cover */
            wrc = ACK_EMOVED;
            a->st.moved++;
        }
        if (w->cb != NULL)
            w->cb(w->ud, wrc);
        rs_free(w);
    }
}

/* Queue a barrier for the next round (cb NULL: a probe for readiness). */
static int
waiter_push(struct ack *a, const char *addr, ack_cb cb, void *ud)
{
    struct waiter *w = rs_calloc(1, sizeof(*w));
    if (w == NULL)
        return RS_ENOMEM;
    w->round = a->next_round;
    w->cb = cb;
    w->ud = ud;
    snprintf(w->addr, sizeof(w->addr), "%s", addr != NULL ? addr : "");
    if (a->tail != NULL)
        a->tail->next = w;
    else
        a->head = w;
    a->tail = w;
    a->nwaiting++;
    return 0;
}

static void
on_probe_set(void *ud, int rc, const redisReply *r)
{
    struct ack *a = ud;
    if (rc == 0 && r->type == REDIS_REPLY_ERROR) {
        /* READONLY: this server is a replica now; the WAIT after it says
         * nothing of our writes */
        rs_log(RS_LOG_WARN, "probe refused: %.*s", (int)r->len, r->str);
        a->set_failed = true;
    }
}

static void
on_probe_wait(void *ud, int rc, const redisReply *r)
{
    struct ack *a = ud;
    struct timespec now;
    uint64_t round = a->next_round - 1;
    long long got = -1;

    a->probing = false;
    if (rc == RS_ECANCELED) {
        round_done(a, round, rc);
        return;
    }
    if (rc == 0 && r->type == REDIS_REPLY_INTEGER && !a->set_failed)
        got = r->integer;
    else if (rc == 0)
        rc = RS_EPROTO;
    clock_gettime(CLOCK_MONOTONIC, &now);
    ack_note(a, "probe", rc, got, elapsed(&a->sent, &now));
    if (rc == 0 && got < (long long)a->o.replicas)
        rc = ACK_ESHORT;
    round_done(a, round, rc);
    probe_send(a);   /* the next round, if barriers wait */
}

/* Send the next round when barriers wait and none is in flight. The round
 * number moves on at the send: barriers asked for from now on need the
 * next probe, whose write comes after their work. */
static void
probe_send(struct ack *a)
{
    char val[24];
    char tmo[16], n[16];

    if (a->probing || a->head == NULL ||
        rs_redis_state(a->link) != RS_REDIS_READY)
        return;
    snprintf(val, sizeof(val), "%llu", (unsigned long long)a->next_round);
    snprintf(n, sizeof(n), "%u", a->o.replicas);
    snprintf(tmo, sizeof(tmo), "%u", a->o.timeout_ms);
    const char *set[6] = { "SET", a->key, val, "PX", "600000", NULL };
    const char *wait[3] = { "WAIT", n, tmo };
    uint64_t round = a->next_round;
    int rc = rs_redis_cmd(a->link, 0, on_probe_set, a, 5, set, NULL);
    if (rc == 0) {
        a->set_failed = false;
        rc = rs_redis_cmd(a->link, a->o.timeout_ms + a->o.command_timeout_ms,
                          on_probe_wait, a, 3, wait, NULL);
        if (rc != 0)
            a->set_failed = true;   /* its answer is ignored: see below */
    }
    if (rc != 0) {
        /* the link refused (down, full): these barriers cannot be
         * confirmed now; their owners retry */
        a->next_round++;
        round_done(a, round, rc == RS_EAGAIN ? RS_EIO : rc);
        return;
    }
    a->next_round++;
    a->probing = true;
    a->st.probes++;
    clock_gettime(CLOCK_MONOTONIC, &a->sent);
}

int
ack_barrier(struct ack *a, const char *addr, ack_cb cb, void *ud)
{
    if (rs_redis_state(a->link) != RS_REDIS_READY)
        return RS_EAGAIN;
    int rc = waiter_push(a, addr, cb, ud);
    if (rc == 0)
        probe_send(a);
    return rc;
}

/* The replicas the primary lists (ROLE). With --ack-replicas below their
 * number a switchover or a false failover can lose notifications answered
 * 202 (docs/internals/failover.md, "Switchovers"): said once per
 * transition, and exported, so an operator learns it before a failover
 * does. */
static void
on_role(void *ud, int rc, const redisReply *r)
{
    struct ack *a = ud;
    a->role_pending = false;
    if (rc != 0 || r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        strcmp(r->element[0]->str, "master") != 0 ||
        r->element[2]->type != REDIS_REPLY_ARRAY)
        return;
    long long n = (long long)r->element[2]->elements;
    rs_metrics_gauge_set(a->m_replicas, n);
    bool below = n > (long long)a->o.replicas;
    if (below == a->below_now)
        return;
    a->below_now = below;
    char h[24], w[24];
    snprintf(h, sizeof(h), "%lld", n);
    snprintf(w, sizeof(w), "%u", a->o.replicas);
    if (below)
        rs_log_kv(RS_LOG_WARN, "--ack-replicas is below the primary's "
                  "replicas: a switchover or a false failover can lose "
                  "acknowledged notifications (docs/internals/failover.md)",
                  "replicas", h, "ack_replicas", w, NULL);
    else
        rs_log_kv(RS_LOG_INFO, "--ack-replicas covers every replica",
                  "replicas", h, "ack_replicas", w, NULL);
}

static void
role_check(struct ack *a)
{
    const char *argv[] = { "ROLE" };
    if (a->role_pending || rs_redis_state(a->link) != RS_REDIS_READY)
        return;
    if (rs_redis_cmd(a->link, 0, on_role, a, 1, argv, NULL) == 0) {
        a->role_pending = true;
        clock_gettime(CLOCK_MONOTONIC, &a->last_role);
    }
}

/* With nothing else waiting, a probe every idle_ms keeps readiness true to
 * the replicas of now (a replica that died while no publish came). */
static void
on_idle(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct ack *a = arg;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (elapsed(&a->last_role, &now) >= ACK_ROLE_EVERY_S)
        role_check(a);
    if (a->probing || elapsed(&a->last_wait, &now) * 1000 < a->o.idle_ms)
        return;
    if (rs_redis_state(a->link) != RS_REDIS_READY || a->head != NULL)
        return;
    if (waiter_push(a, NULL, NULL, NULL) == 0)
        probe_send(a);
}

/* ------------------------------------------------------------- lifecycle */

static void
on_link_state(void *ud, enum rs_redis_state st, const char *errstr)
{
    struct ack *a = ud;
    if (st == RS_REDIS_READY) {
        /* readiness is known from a WAIT of now, not of before */
        if (a->head == NULL && waiter_push(a, NULL, NULL, NULL) != 0)
            rs_log(RS_LOG_WARN, "cannot queue a probe");
        probe_send(a);
        role_check(a);
    }
    if (a->o.on_state != NULL)
        a->o.on_state(a->o.ud, "ack", st, errstr);
}

static int
ack_metrics(struct ack *a, struct rs_metrics *m)
{
    static const double lat[] = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                  0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                  1, 2.5, 5 };
    int rc = rs_metrics_register_histogram(
        m, &a->m_wait, "rshub_ack_wait_seconds",
        "WAIT on the publish link, from sent to answered (--ack-replicas).",
        lat, sizeof(lat) / sizeof(lat[0]), NULL);
    if (rc == 0)
        rc = rs_metrics_register_counter(
            m, &a->m_timeouts_pub, "rshub_ack_timeouts_total",
            "WAITs that counted fewer than --ack-replicas replicas within "
            "--ack-timeout (or failed), by link.", "link", "publish", NULL);
    if (rc == 0)
        rc = rs_metrics_register_counter(
            m, &a->m_timeouts_probe, "rshub_ack_timeouts_total",
            "WAITs that counted fewer than --ack-replicas replicas.", "link",
            "probe", NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge(
            m, &a->m_replicas, "rshub_redis_replicas",
            "Replicas the Redis primary lists (ROLE); --ack-replicas below "
            "this leaves a switchover free to lose acknowledged entries.",
            NULL);
    return rc;
}

struct ack *
ack_new(const struct ack_opts *o, const char **err)
{
    struct ack *a = rs_calloc(1, sizeof(*a));
    *err = "out of memory";
    if (a == NULL)
        return NULL;
    a->o = *o;
    if (a->o.idle_ms == 0)
        a->o.idle_ms = 2000;
    if (a->o.command_timeout_ms == 0)
        a->o.command_timeout_ms = 2000;
    a->last_count = -1;
    a->short_now = false;
    a->next_round = 1;
    clock_gettime(CLOCK_MONOTONIC, &a->last_wait);
    size_t kl = strlen(o->prefix) + strlen(o->node_id) + 16;
    a->key = rs_malloc(kl);
    if (a->key == NULL)
        goto fail;
    snprintf(a->key, kl, "%sack-probe:%s", o->prefix, o->node_id);
    if (o->metrics != NULL && ack_metrics(a, o->metrics) != 0) {
        *err = "cannot register the acknowledgement metrics";
        goto fail;
    }
    a->ev_idle = event_new(o->base, -1, EV_PERSIST, on_idle, a);
    struct timeval iv = rs_time_tv_ms(a->o.idle_ms);
    if (a->ev_idle == NULL || event_add(a->ev_idle, &iv) != 0)
        goto fail;
    struct rs_redis_opts ro = {
        .url = o->redis_url,
        .client_name = "rshub-ack",
        /* a command queued behind a WAIT (ROLE) waits for it first */
        .command_timeout_ms = a->o.command_timeout_ms + a->o.timeout_ms,
        .on_state = on_link_state,
        .ud = a,
    };
    a->link = rs_redis_new(o->base, &ro, err);
    if (a->link == NULL)
        goto fail;
    *err = NULL;
    return a;
fail:
    ack_free(a);
    return NULL;
}

void
ack_free(struct ack *a)
{
    if (a == NULL)
        return;
    rs_redis_free(a->link);   /* a round in flight: its barriers cancelled */
    while (a->head != NULL) {  /* barriers of no round yet */
        struct waiter *w = a->head;
        a->head = w->next;
        if (w->cb != NULL)
            w->cb(w->ud, RS_ECANCELED);
        rs_free(w);
    }
    if (a->ev_idle != NULL)
        event_free(a->ev_idle);
    rs_free(a->key);
    rs_free(a);
}

/* --------------------------------------------------------------- queries */

bool
ack_ok(const struct ack *a, const char **why)
{
    if (rs_redis_state(a->link) != RS_REDIS_READY) {
        *why = "the acknowledgement link (Redis) is down";
        return false;
    }
    if (!a->known) {
        *why = "no WAIT has confirmed the replicas yet";
        return false;
    }
    if (a->short_now) {
        *why = "fewer replicas than --ack-replicas confirm writes";
        return false;
    }
    return true;
}

long long
ack_last_count(const struct ack *a)
{
    return a->last_count;
}

unsigned
ack_replicas(const struct ack *a)
{
    return a->o.replicas;
}

unsigned
ack_timeout_ms(const struct ack *a)
{
    return a->o.timeout_ms;
}

void
ack_stats(const struct ack *a, struct ack_stats *out)
{
    *out = a->st;
    out->waiting = a->nwaiting;
}

const char *
ack_addr(const struct ack *a)
{
    return rs_redis_addr(a->link);
}
