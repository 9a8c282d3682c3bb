/*
 * sentinel.c - the Sentinels of one named master (rs_sentinel.h): asking
 * them in turn for the primary's address, and one pub/sub subscription to
 * +switch-master that moves on to the next Sentinel when its own goes away.
 * Each is a small state machine over short-lived hiredis async connections
 * on the caller's libevent loop. Connecting to the primary, its handshake
 * and ROLE are rs_redis's (redis.c).
 */
#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rs_alloc.h"
#include "rs_backoff.h"
#include "rs_sentinel.h"
#include "rs_time.h"

#define SN_TIMEOUT_MS 2000u
#define SN_RETRY_MIN_MS 50u
#define SN_RETRY_MAX_MS 2000u
#define SN_CHANNEL "+switch-master"

static const char sn_oom[] = "out of memory";

struct sn_node {
    char *host;
    int port;
};

/* The watch: one subscription to +switch-master at a time. */
enum sn_watch {
    SN_WATCH_OFF,           /* no on_switch given, or freed */
    SN_WATCH_WAIT,          /* timer: the next Sentinel to try */
    SN_WATCH_CONNECTING,    /* connect + AUTH + SUBSCRIBE in flight, timer */
    SN_WATCH_SUBSCRIBED,    /* confirmed; messages arrive */
};

struct rs_sentinel {
    struct event_base *base;
    struct sn_node nodes[RS_SENTINEL_MAX_NODES];
    size_t n_nodes;
    char *master;
    char *user;
    char *password;
    unsigned timeout_ms;
    void (*on_switch)(void *ud, const char *host, int port);
    void *ud;

    /* Resolve: cb non-NULL while one is in flight. ask is the connection
     * to the Sentinel asked now (ask->data points here while we care, as
     * in redis.c: NULL marks every later hiredis callback on it stale). */
    rs_sentinel_resolve_cb cb;
    void *cb_ud;
    redisAsyncContext *ask;
    struct event *ask_timer;    /* the deferred start, then each timeout */
    size_t ask_first;           /* the Sentinel that answered last */
    size_t asked;               /* Sentinels tried in this resolve */
    size_t ask_cur;             /* index of the one asked now */
    char why[200];              /* the last Sentinel's failure */

    enum sn_watch watch;
    redisAsyncContext *wac;     /* same data convention as ask */
    struct event *watch_timer;
    size_t watch_cur;
    unsigned watch_failures;    /* since the last SUBSCRIBED */
    struct rs_backoff watch_backoff;
    char watch_addr[300];

    /* Frames of ours that may touch s after calling out hold it; a freed
     * object is released by the last of them. */
    unsigned depth;
    bool closed;
};

static void sn_ask_next(struct rs_sentinel *s);
static void sn_watch_fail(struct rs_sentinel *s, const char *why);

/* ------------------------------------------------------------- utilities */

static int
sn_timer_arm(struct event *ev, uint64_t ms)
{
    struct timeval tv = rs_time_tv_ms(ms);

    return event_add(ev, &tv) == 0 ? 0 : RS_ENOMEM;
}

static void
sn_hold(struct rs_sentinel *s)
{
    s->depth++;
}

static void
sn_destroy(struct rs_sentinel *s)
{
    size_t i;

    if (s->ask_timer != NULL)
        event_free(s->ask_timer);
    if (s->watch_timer != NULL)
        event_free(s->watch_timer);
    for (i = 0; i < s->n_nodes; i++)
        rs_free(s->nodes[i].host);
    rs_free(s->master);
    rs_free(s->user);
    rs_free(s->password);
    rs_free(s);
}

static void
sn_release(struct rs_sentinel *s)
{
    s->depth--;
    if (s->depth == 0 && s->closed)
        sn_destroy(s);
}

/* Drop a hiredis context we own; inside its own callback hiredis defers
 * the free until the callback returns. Its NULL-reply callbacks and
 * onDisconnect then see data NULL and do nothing. */
static void
sn_ctx_close(redisAsyncContext **pac)
{
    redisAsyncContext *ac = *pac;

    if (ac == NULL)
        return;
    *pac = NULL;
    ac->data = NULL;
    redisAsyncFree(ac);
}

/* Forget a context hiredis is tearing down itself. */
static void
sn_ctx_detach(redisAsyncContext **pac)
{
    if (*pac != NULL) {
        (*pac)->data = NULL;
        *pac = NULL;
    }
}

/* A connection to node i with AUTH queued when configured; NULL with why
 * set when it cannot even start. */
static redisAsyncContext *
sn_connect(struct rs_sentinel *s, size_t i, char *why, size_t whysz,
           void (*on_connect)(const redisAsyncContext *, int),
           void (*on_disconnect)(const redisAsyncContext *, int),
           void (*on_auth)(redisAsyncContext *, void *, void *))
{
    const struct sn_node *n = &s->nodes[i];
    redisAsyncContext *ac = redisAsyncConnect(n->host, n->port);

    if (ac == NULL) {
        snprintf(why, whysz, "%s:%d: %s", n->host, n->port, sn_oom);
        return NULL;
    }
    if (ac->err != 0) {
        snprintf(why, whysz, "%s:%d: %s", n->host, n->port, ac->c.errstr);
        redisAsyncFree(ac);
        return NULL;
    }
    if (redisLibeventAttach(ac, s->base) != REDIS_OK) {
        snprintf(why, whysz, "%s:%d: cannot attach to the event loop",
                 n->host, n->port);
        redisAsyncFree(ac);
        return NULL;
    }
    ac->data = s;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    if (s->password != NULL) {
        const char *argv[3];
        int argc = 0;

        argv[argc++] = "AUTH";
        if (s->user != NULL)
            argv[argc++] = s->user;
        argv[argc++] = s->password;
        if (redisAsyncCommandArgv(ac, on_auth, NULL, argc, argv, NULL)
            != REDIS_OK) {
            snprintf(why, whysz, "%s:%d: %s", n->host, n->port, sn_oom);
            ac->data = NULL;
            redisAsyncFree(ac);
            return NULL;
        }
    }
    return ac;
}

/* The reason hiredis gives for a lost connection, or a plain one. */
static const char *
sn_ctx_err(const redisAsyncContext *ac)
{
    if (ac->c.err != 0 && ac->c.errstr[0] != '\0')
        return ac->c.errstr;
    return "connection closed";
}

/* -------------------------------------------------------------- resolving */

/* Hand the answer over; the resolve is over before the callback runs, so
 * the callback may start the next one (or free s). */
static void
sn_ask_done(struct rs_sentinel *s, int rc, const char *host, int port,
            const char *errstr)
{
    rs_sentinel_resolve_cb cb = s->cb;
    void *ud = s->cb_ud;

    event_del(s->ask_timer);
    sn_ctx_close(&s->ask);
    s->cb = NULL;
    s->cb_ud = NULL;
    s->asked = 0;
    if (cb != NULL)
        cb(ud, rc, host, port, errstr);
}

/* The Sentinel asked now failed (why is set): on to the next. */
static void
sn_ask_failed(struct rs_sentinel *s, bool hiredis_frees)
{
    if (hiredis_frees)
        sn_ctx_detach(&s->ask);
    else
        sn_ctx_close(&s->ask);
    event_del(s->ask_timer);
    sn_ask_next(s);
}

static void
sn_on_ask_connect(const redisAsyncContext *ac, int status)
{
    struct rs_sentinel *s = ac->data;
    const struct sn_node *n;

    if (s == NULL || status == REDIS_OK)
        return;
    n = &s->nodes[s->ask_cur];
    sn_hold(s);
    snprintf(s->why, sizeof(s->why), "%s:%d: %s", n->host, n->port,
             sn_ctx_err(ac));
    sn_ask_failed(s, true);
    sn_release(s);
}

static void
sn_on_ask_disconnect(const redisAsyncContext *ac, int status)
{
    sn_on_ask_connect(ac, status == REDIS_OK ? REDIS_ERR : status);
}

static void
sn_on_ask_auth(redisAsyncContext *ac, void *reply_, void *privdata)
{
    struct rs_sentinel *s = ac->data;
    const redisReply *reply = reply_;
    const struct sn_node *n;

    (void)privdata;
    if (s == NULL || (reply != NULL && reply->type != REDIS_REPLY_ERROR))
        return;
    n = &s->nodes[s->ask_cur];
    sn_hold(s);
    if (reply == NULL)
        snprintf(s->why, sizeof(s->why), "%s:%d: %s", n->host, n->port,
                 sn_ctx_err(ac));
    else
        snprintf(s->why, sizeof(s->why), "%s:%d: AUTH failed: %s", n->host,
                 n->port, reply->str);
    sn_ask_failed(s, reply == NULL);
    sn_release(s);
}

/* [host, port] wins; nil means this Sentinel does not monitor the name. */
static void
sn_on_ask_reply(redisAsyncContext *ac, void *reply_, void *privdata)
{
    struct rs_sentinel *s = ac->data;
    const redisReply *reply = reply_;
    const struct sn_node *n;
    char host[256];
    long port = 0;

    (void)privdata;
    if (s == NULL)
        return;
    n = &s->nodes[s->ask_cur];
    sn_hold(s);
    if (reply == NULL) {
        snprintf(s->why, sizeof(s->why), "%s:%d: %s", n->host, n->port,
                 sn_ctx_err(ac));
        sn_ask_failed(s, true);
        goto out;
    }
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
        reply->element[0]->type == REDIS_REPLY_STRING &&
        reply->element[1]->type == REDIS_REPLY_STRING &&
        reply->element[0]->len > 0 && reply->element[0]->len < sizeof(host)) {
        char *end;

        memcpy(host, reply->element[0]->str, reply->element[0]->len);
        host[reply->element[0]->len] = '\0';
        port = strtol(reply->element[1]->str, &end, 10);
        if (*end == '\0' && port > 0 && port <= 65535 &&
            strlen(host) == reply->element[0]->len) {
            s->ask_first = s->ask_cur;
            sn_ask_done(s, 0, host, (int)port, NULL);
            goto out;
        }
    }
    if (reply->type == REDIS_REPLY_NIL)
        snprintf(s->why, sizeof(s->why), "%s:%d does not know master '%s'",
                 n->host, n->port, s->master);
    else if (reply->type == REDIS_REPLY_ERROR)
        snprintf(s->why, sizeof(s->why), "%s:%d: %s", n->host, n->port,
                 reply->str);
    else
        snprintf(s->why, sizeof(s->why), "%s:%d: unexpected reply",
                 n->host, n->port);
    sn_ask_failed(s, false);
out:
    sn_release(s);
}

/* Ask the next Sentinel not yet asked in this resolve, or report that none
 * gave an address. */
static void
sn_ask_next(struct rs_sentinel *s)
{
    const char *argv[3] = { "SENTINEL", "get-master-addr-by-name", s->master };

    while (s->asked < s->n_nodes) {
        s->ask_cur = (s->ask_first + s->asked) % s->n_nodes;
        s->asked++;
        s->ask = sn_connect(s, s->ask_cur, s->why, sizeof(s->why),
                            sn_on_ask_connect, sn_on_ask_disconnect,
                            sn_on_ask_auth);
        if (s->ask == NULL)
            continue;
        if (redisAsyncCommandArgv(s->ask, sn_on_ask_reply, NULL, 3, argv,
                                  NULL) != REDIS_OK ||
            sn_timer_arm(s->ask_timer, s->timeout_ms) != 0) {
            snprintf(s->why, sizeof(s->why), "%s", sn_oom);
            sn_ctx_close(&s->ask);
            continue;
        }
        return;
    }
    {
        char err[400];

        snprintf(err, sizeof(err),
                 "no Sentinel gave the address of master '%s' (%zu asked; "
                 "last: %s)", s->master, s->n_nodes, s->why);
        sn_ask_done(s, RS_ENOTFOUND, NULL, 0, err);
    }
}

static void
sn_on_ask_timer(evutil_socket_t fd, short what, void *arg)
{
    struct rs_sentinel *s = arg;
    const struct sn_node *n;

    (void)fd;
    (void)what;
    if (s->cb == NULL)
        return;
    sn_hold(s);
    if (s->ask == NULL) {
        /* The start, deferred out of rs_sentinel_resolve(). */
        sn_ask_next(s);
    } else {
        n = &s->nodes[s->ask_cur];
        snprintf(s->why, sizeof(s->why), "%s:%d: no answer within %u ms",
                 n->host, n->port, s->timeout_ms);
        sn_ask_failed(s, false);
    }
    sn_release(s);
}

/* ------------------------------------------------------------- the watch */

static void
sn_watch_set(struct rs_sentinel *s, enum sn_watch to)
{
    s->watch = to;
    if (to == SN_WATCH_SUBSCRIBED)
        snprintf(s->watch_addr, sizeof(s->watch_addr), "%s:%d",
                 s->nodes[s->watch_cur].host, s->nodes[s->watch_cur].port);
    else
        s->watch_addr[0] = '\0';
}

/* "+switch-master NAME OLDIP OLDPORT NEWIP NEWPORT": ours → on_switch. */
static void
sn_watch_message(struct rs_sentinel *s, const char *msg, size_t len)
{
    char buf[600], *f[5], *save = NULL, *tok, *end;
    size_t nf = 0;
    long port;

    if (len >= sizeof(buf))
        return;
    memcpy(buf, msg, len);
    buf[len] = '\0';
    for (tok = strtok_r(buf, " ", &save); tok != NULL && nf < 5;
         tok = strtok_r(NULL, " ", &save))
        f[nf++] = tok;
    if (nf != 5 || strcmp(f[0], s->master) != 0)
        return;
    port = strtol(f[4], &end, 10);
    if (*end != '\0' || port <= 0 || port > 65535)
        return;
    if (s->on_switch != NULL)
        s->on_switch(s->ud, f[3], (int)port);
}

static void
sn_on_watch_msg(redisAsyncContext *ac, void *reply_, void *privdata)
{
    struct rs_sentinel *s = ac->data;
    const redisReply *reply = reply_;
    const redisReply *kind;

    (void)privdata;
    if (s == NULL)
        return;
    sn_hold(s);
    if (reply == NULL) {
        sn_ctx_detach(&s->wac);
        sn_watch_fail(s, sn_ctx_err(ac));
        goto out;
    }
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 ||
        reply->element[0]->type != REDIS_REPLY_STRING)
        goto out;
    kind = reply->element[0];
    if (strcmp(kind->str, "subscribe") == 0) {
        event_del(s->watch_timer);
        s->watch_failures = 0;
        sn_watch_set(s, SN_WATCH_SUBSCRIBED);
    } else if (strcmp(kind->str, "message") == 0 &&
               reply->element[2]->type == REDIS_REPLY_STRING) {
        sn_watch_message(s, reply->element[2]->str, reply->element[2]->len);
    }
out:
    sn_release(s);
}

static void
sn_on_watch_connect(const redisAsyncContext *ac, int status)
{
    struct rs_sentinel *s = ac->data;

    if (s == NULL || status == REDIS_OK)
        return;
    sn_hold(s);
    sn_ctx_detach(&s->wac);
    sn_watch_fail(s, sn_ctx_err(ac));
    sn_release(s);
}

static void
sn_on_watch_disconnect(const redisAsyncContext *ac, int status)
{
    sn_on_watch_connect(ac, status == REDIS_OK ? REDIS_ERR : status);
}

static void
sn_on_watch_auth(redisAsyncContext *ac, void *reply_, void *privdata)
{
    struct rs_sentinel *s = ac->data;
    const redisReply *reply = reply_;

    (void)privdata;
    if (s == NULL || reply == NULL || reply->type != REDIS_REPLY_ERROR)
        return;     /* a NULL reply: the subscription's callback handles it */
    sn_hold(s);
    sn_ctx_close(&s->wac);
    sn_watch_fail(s, reply->str);
    sn_release(s);
}

/* Subscribe on watch_cur, bounded by the timeout. */
static void
sn_watch_start(struct rs_sentinel *s)
{
    const char *argv[2] = { "SUBSCRIBE", SN_CHANNEL };
    char why[300];

    s->wac = sn_connect(s, s->watch_cur, why, sizeof(why),
                        sn_on_watch_connect, sn_on_watch_disconnect,
                        sn_on_watch_auth);
    if (s->wac == NULL) {
        sn_watch_fail(s, why);
        return;
    }
    /* Best effort: without it a vanished host is noticed late, not never
     * (the primary's own link still sees the failover). */
    /* TCP keepalive (hiredis's 15 s): a subscriber sends nothing, so a
     * Sentinel host that vanished without a FIN is noticed only this way. */
    (void)redisEnableKeepAlive(&s->wac->c);
    if (redisAsyncCommandArgv(s->wac, sn_on_watch_msg, NULL, 2, argv, NULL)
        != REDIS_OK ||
        sn_timer_arm(s->watch_timer, s->timeout_ms) != 0) {
        sn_ctx_close(&s->wac);
        sn_watch_fail(s, sn_oom);
        return;
    }
    sn_watch_set(s, SN_WATCH_CONNECTING);
}

/* The watch's Sentinel went away or never answered: the next one, after a
 * delay that doubles with each round through all of them. The context is
 * already closed or detached. */
static void
sn_watch_fail(struct rs_sentinel *s, const char *why)
{
    unsigned round;

    (void)why;  /* the watch is best effort; the link reports its own */
    if (s->closed || s->watch == SN_WATCH_OFF)
        return;
    s->watch_failures++;
    s->watch_cur = (s->watch_cur + 1) % s->n_nodes;
    round = (unsigned)((s->watch_failures + s->n_nodes - 1) / s->n_nodes);
    sn_watch_set(s, SN_WATCH_WAIT);
    if (sn_timer_arm(s->watch_timer,
                     rs_backoff_delay(&s->watch_backoff, round)) != 0) {
        /* No timer, no retry: the watch stays off; the link still
         * follows lost connections and READONLY. */
        sn_watch_set(s, SN_WATCH_OFF);
    }
}

static void
sn_on_watch_timer(evutil_socket_t fd, short what, void *arg)
{
    struct rs_sentinel *s = arg;

    (void)fd;
    (void)what;
    sn_hold(s);
    switch (s->watch) {
    case SN_WATCH_WAIT:
        sn_watch_start(s);
        break;
    case SN_WATCH_CONNECTING:
        sn_ctx_close(&s->wac);
        sn_watch_fail(s, "no subscription within the timeout");
        break;
    case SN_WATCH_OFF:
    case SN_WATCH_SUBSCRIBED:
        break;
    }
    sn_release(s);
}

/* ------------------------------------------------------------- public API */

struct rs_sentinel *
rs_sentinel_new(struct event_base *base, const struct rs_sentinel_opts *opts,
                const char **errstr)
{
    struct rs_sentinel *s = NULL;
    const char *err = NULL;
    size_t i;

    if (base == NULL || opts == NULL || opts->master == NULL ||
        opts->master[0] == '\0') {
        err = "no event base, options or master name given";
        goto out;
    }
    if (opts->n_nodes == 0 || opts->nodes == NULL) {
        err = "no Sentinel given";
        goto out;
    }
    if (opts->n_nodes > RS_SENTINEL_MAX_NODES) {
        err = "too many Sentinels (at most 16)";
        goto out;
    }
    for (i = 0; i < opts->n_nodes; i++) {
        if (opts->nodes[i].host == NULL || opts->nodes[i].host[0] == '\0' ||
            opts->nodes[i].port <= 0 || opts->nodes[i].port > 65535) {
            err = "a Sentinel needs a host and a port in 1..65535";
            goto out;
        }
    }
    s = rs_calloc(1, sizeof(*s));
    if (s == NULL) {
        err = sn_oom;
        goto out;
    }
    s->base = base;
    s->timeout_ms = opts->timeout_ms ? opts->timeout_ms : SN_TIMEOUT_MS;
    s->on_switch = opts->on_switch;
    s->ud = opts->ud;
    s->watch_backoff = (struct rs_backoff){
        .first_ms = opts->retry_min_ms ? opts->retry_min_ms : SN_RETRY_MIN_MS,
        .max_ms = opts->retry_max_ms ? opts->retry_max_ms : SN_RETRY_MAX_MS,
        .below_pct = 25,
    };
    rs_backoff_seed(&s->watch_backoff, rs_time_mono_us() ^ (uint64_t)(uintptr_t)s ^
                                       ((uint64_t)getpid() << 32));
    for (i = 0; i < opts->n_nodes; i++) {
        s->nodes[i].host = rs_strdup(opts->nodes[i].host);
        if (s->nodes[i].host == NULL) {
            err = sn_oom;
            goto out;
        }
        s->nodes[i].port = opts->nodes[i].port;
        s->n_nodes++;
    }
    s->master = rs_strdup(opts->master);
    if (s->master == NULL ||
        (opts->user != NULL && (s->user = rs_strdup(opts->user)) == NULL) ||
        (opts->password != NULL &&
         (s->password = rs_strdup(opts->password)) == NULL)) {
        err = sn_oom;
        goto out;
    }
    s->ask_timer = evtimer_new(base, sn_on_ask_timer, s);
    s->watch_timer = evtimer_new(base, sn_on_watch_timer, s);
    if (s->ask_timer == NULL || s->watch_timer == NULL) {
        err = sn_oom;
        goto out;
    }
    if (s->on_switch != NULL) {
        if (sn_timer_arm(s->watch_timer, 0) != 0) {
            err = sn_oom;
            goto out;
        }
        s->watch = SN_WATCH_WAIT;
    }
out:
    if (err != NULL) {
        if (s != NULL)
            sn_destroy(s);
        s = NULL;
    }
    if (errstr != NULL)
        *errstr = err;
    return s;
}

int
rs_sentinel_resolve(struct rs_sentinel *s, rs_sentinel_resolve_cb cb,
                    void *ud)
{
    if (s == NULL || cb == NULL || s->closed)
        return RS_EINVAL;
    if (s->cb != NULL)
        return RS_ESTATE;
    /* Start on the loop's next turn: the callback never runs in here. */
    if (sn_timer_arm(s->ask_timer, 0) != 0)
        return RS_ENOMEM;
    s->cb = cb;
    s->cb_ud = ud;
    s->asked = 0;
    s->why[0] = '\0';
    return 0;
}

bool
rs_sentinel_watching(const struct rs_sentinel *s)
{
    return s != NULL && s->watch == SN_WATCH_SUBSCRIBED;
}

const char *
rs_sentinel_watch_addr(const struct rs_sentinel *s)
{
    return s != NULL ? s->watch_addr : "";
}

void
rs_sentinel_free(struct rs_sentinel *s)
{
    if (s == NULL || s->closed)
        return;
    sn_hold(s);
    s->closed = true;
    s->on_switch = NULL;
    s->watch = SN_WATCH_OFF;
    event_del(s->watch_timer);
    sn_ctx_close(&s->wac);
    sn_ask_done(s, RS_ECANCELED, NULL, 0, NULL);
    sn_release(s);
}
