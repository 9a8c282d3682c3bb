/*
 * deliver.c - WebSub content distribution (deliver.h).
 *
 * Each subscription is two small state machines, changed only through
 * sub_set and sub_set_feed, which log from -> to (diagrams in
 * docs/internals/websub.md):
 *   - its POST (enum dsub_state): IDLE -> [HOST_WAIT ->] POSTING -> IDLE on
 *     2xx, or -> RETRY_WAIT (backoff timer) -> IDLE; 410, --drop-failing,
 *     an expired lease, an unsubscribe or a lost lock -> REMOVING, freed
 *     once its POST and page read are over;
 *   - its feed (enum dsub_feed): LIVE (fed from the tail while caught up)
 *     -> BEHIND (start, queue full) -> READING (a page of the backlog after
 *     queued_to) -> LIVE or BEHIND. The rule that keeps the seam between
 *     pages and the tail gap-free is fanout.c's: a short page ends the lag
 *     only if the tail's head for the topic has not passed the page's last
 *     id; otherwise what the tail gave meanwhile is in the next page.
 * Both run at once: a page may be read while the head of the queue is
 * posted. On 2xx the cursor advances and is written to Redis within
 * 100 ms. Host slots are hostsched.c's, the wire format websubwire.c's,
 * the store subs.c's.
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RS_LOG_MODULE "websub"
#include "deliver.h"
#include "hostsched.h"
#include "rs_alloc.h"
#include "rs_backoff.h"
#include "rs_fnv.h"
#include "rs_log.h"
#include "rs_time.h"
#include "websubwire.h"

#define DELIVER_RETRY_FIRST_MS 1000
#define DELIVER_FLUSH_BATCH 256      /* cursors per script call */

/* An accepted notification as delivered: bytes as published. */
struct body {
    unsigned refs;
    struct msg_id id;
    uint64_t accepted_ms;     /* the id's time part: when Redis stored it */
    char *ctype;
    size_t len;
    char data[];
};

/* The POST side of a subscription. */
enum dsub_state {
    DS_IDLE = 0,              /* no POST, no timer: sub_kick picks the next
                                 step (nothing queued, lease over, or a POST
                                 that could not start: the tick retries) */
    DS_HOST_WAIT,             /* the head of the queue waits for a slot on
                                 the callback's host (slot is WAITING) */
    DS_POSTING,               /* one POST in flight (req; slot HOLDING) */
    DS_RETRY_WAIT,            /* the last POST failed: timer armed */
    DS_REMOVING,              /* detached from its topic (t NULL): freed by
                                 sub_reap once req and its page read end */
};

static const char *const dsub_state_names[] = {
    "idle", "host-wait", "posting", "retry-wait", "removing",
};

/* Where a subscription's queue is filled from. */
enum dsub_feed {
    FEED_BEHIND = 0,          /* refills from the backlog after queued_to */
    FEED_READING,             /* a page read is in flight */
    FEED_LIVE,                /* caught up: the tail's entries are queued */
};

static const char *const dsub_feed_names[] = { "behind", "reading", "live" };

/* Telling a subscriber that notifications it was never given are gone
 * (X-Hub-Gap). The state is in memory only: after a restart the cursor in
 * Redis is still before the trim mark, and the first page finds the gap
 * again. */
enum dsub_gap {
    GAP_NONE = 0,
    GAP_FOUND,                /* entries after gap_after were trimmed; none
                                 queued since */
    GAP_TELLING,              /* every POST from gap_first on carries
                                 X-Hub-Gap: gap_after until one gets 2xx */
};

struct dtopic;

struct dsub {
    struct deliver *d;
    struct dtopic *t;         /* NULL once REMOVING */
    enum dsub_state state;
    enum dsub_feed feed;
    enum dsub_gap gap;
    char *callback;
    char *host;               /* the callback's host: the store's per-host
                                 count */
    char *secret;             /* NULL: no signature */
    uint64_t expires_ms;
    bool failing;             /* as recorded in Redis (after --retry-window
                                 of failures); not a step: a failing one
                                 still retries */
    struct msg_id cursor;     /* last delivered (2xx) */
    struct msg_id saved;      /* last cursor written to Redis */
    struct msg_id queued_to;  /* newest id queued or delivered */
    struct body **q;          /* ring, queue_max slots */
    unsigned qhead, qlen;
    struct rs_http_req *req;  /* POSTING, and REMOVING until its on_done */
    struct hostsched_ticket slot;
    struct event *timer;      /* RETRY_WAIT */
    unsigned attempts;        /* failed POSTs since the last 2xx */
    uint64_t first_fail_ms;   /* rs_time_mono_ms; 0: not failing */
    uint64_t delivered;
    struct msg_id gap_after;  /* GAP_FOUND, GAP_TELLING */
    struct msg_id gap_first;  /* GAP_TELLING */
    unsigned load_gen;        /* the topic load that last listed it */
};

enum dtopic_load {
    LOAD_IDLE = 0,
    LOAD_RUNNING,             /* subs_load in flight */
    LOAD_AGAIN,               /* and another one asked meanwhile */
};

struct dtopic {
    struct deliver *d;
    char name[BACKLOG_NAME_MAX + 1];
    bool owned;               /* the delivery lock is ours */
    bool pinned;              /* in the fan-out's tail read */
    uint64_t lock_ok_ms;      /* rs_time_mono_ms when the lock was last
                                 ours for sure */
    enum dtopic_load load;
    unsigned load_gen;        /* loads completed */
    struct msg_id head;       /* newest id the tail gave for this topic */
    struct dsub **v;
    size_t n, cap;
};

struct deliver {
    struct deliver_opts o;
    struct dtopic **topics;
    size_t ntopics, cap;
    struct hostsched *hosts;
    /* 1 s doubling to --retry-max-delay, +-20 %, so that callbacks that
     * failed together do not retry together */
    struct rs_backoff backoff;
    struct event *ev_tick;    /* locks, leases, reloads */
    struct event *ev_flush;   /* cursors */
    struct deliver_stats st;
    bool ticking;             /* a tick's SMEMBERS is in flight */
    bool closing;
};

/* ---------------------------------------------------------------- helpers */

/* Milliseconds of the hub's clock, Redis's (backlog_now_ms): leases are
 * judged by it on every node alike. */
static uint64_t
now_ms(const struct deliver *d)
{
    return backlog_now_ms(d->o.backlog);
}

static void
body_unref(struct body *b)
{
    if (b != NULL && --b->refs == 0) {
        rs_free(b->ctype);
        rs_free(b);
    }
}

static struct body *
body_new(const struct backlog_entry *e)
{
    struct body *b = rs_malloc(sizeof(*b) + e->len + 1);
    if (b == NULL)
        return NULL;
    b->refs = 1;
    b->id = e->id;
    b->accepted_ms = e->id.ms;
    b->len = e->len;
    memcpy(b->data, e->body, e->len);
    b->data[e->len] = '\0';
    b->ctype = rs_strndup(e->ctype_len ? e->ctype : "application/xml",
                          e->ctype_len ? e->ctype_len : 15);
    if (b->ctype == NULL) {
        rs_free(b);
        return NULL;
    }
    return b;
}

/* ------------------------------------------------------------ the setters */

static void
sub_set(struct dsub *s, enum dsub_state to, const char *why)
{
    if (s->state == to)
        return;
    if (rs_log_enabled(RS_LOG_DEBUG))
        rs_log_kv(RS_LOG_DEBUG, "delivery state", "callback", s->callback,
                  "from", dsub_state_names[s->state], "to",
                  dsub_state_names[to], "why", why, NULL);
    s->state = to;
}

static void
sub_set_feed(struct dsub *s, enum dsub_feed to, const char *why)
{
    if (s->feed == to)
        return;
    if (rs_log_enabled(RS_LOG_DEBUG))
        rs_log_kv(RS_LOG_DEBUG, "delivery feed", "callback", s->callback,
                  "from", dsub_feed_names[s->feed], "to",
                  dsub_feed_names[to], "why", why, NULL);
    s->feed = to;
}

/* Does the POST of the head of s's queue carry X-Hub-Gap? (The same
 * answer while it is in flight: the head does not change, and gap_first,
 * set later, is newer than it.) */
static bool
sub_says_gap(const struct dsub *s)
{
    return s->gap == GAP_TELLING && s->qlen > 0 &&
           msg_id_cmp(s->q[s->qhead]->id, s->gap_first) >= 0;
}

/* ----------------------------------------------------------- subscriptions */

static void sub_kick(struct deliver *d, struct dsub *s);

static struct dtopic *
topic_find(const struct deliver *d, const char *name)
{
    for (size_t i = 0; i < d->ntopics; i++)
        if (strcmp(d->topics[i]->name, name) == 0)
            return d->topics[i];
    return NULL;
}

static struct dtopic *
topic_get(struct deliver *d, const char *name)
{
    struct dtopic *t = topic_find(d, name);
    if (t != NULL || !backlog_name_ok(name))
        return t;
    if (d->ntopics == d->cap) {
        size_t ncap = d->cap ? d->cap * 2 : 8;
        struct dtopic **nv = rs_realloc(d->topics, ncap * sizeof(*nv));
        if (nv == NULL)
            return NULL;
        d->topics = nv;
        d->cap = ncap;
    }
    t = rs_calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->d = d;
    snprintf(t->name, sizeof(t->name), "%s", name);
    d->topics[d->ntopics++] = t;
    return t;
}

static void
sub_drop_queue(struct dsub *s, unsigned queue_max)
{
    for (unsigned i = 0; i < s->qlen; i++)
        body_unref(s->q[(s->qhead + i) % queue_max]);
    s->qhead = s->qlen = 0;
}

/* Free s: nothing of it is outstanding (no POST, no page read), or the
 * loop that would run their callbacks is going away. */
static void
sub_free(struct deliver *d, struct dsub *s)
{
    hostsched_leave(d->hosts, &s->slot);
    sub_drop_queue(s, d->o.queue_max);
    if (s->timer != NULL)
        event_free(s->timer);
    rs_free(s->q);
    rs_free(s->callback);
    rs_free(s->host);
    rs_free(s->secret);
    rs_free(s);
}

/* A REMOVING subscription whose POST and page read are over is freed;
 * true if it was. */
static bool
sub_reap(struct dsub *s)
{
    if (s->state != DS_REMOVING || s->req != NULL || s->feed == FEED_READING)
        return false;
    sub_free(s->d, s);
    return true;
}

/* Detach s from its topic (-> REMOVING) and free it, or let its POST's
 * on_done or its page's callback do it. */
static void
sub_forget(struct deliver *d, struct dsub *s, const char *why)
{
    struct dtopic *t = s->t;
    for (size_t i = 0; i < t->n; i++) {
        if (t->v[i] == s) {
            t->v[i] = t->v[--t->n];
            break;
        }
    }
    d->st.subscriptions--;
    if (s->failing)
        d->st.failing--;
    s->t = NULL;
    if (s->state == DS_HOST_WAIT)
        hostsched_cancel(d->hosts, &s->slot);
    if (s->state == DS_RETRY_WAIT)
        event_del(s->timer);
    sub_set(s, DS_REMOVING, why);
    if (s->req != NULL)
        rs_http_cancel(s->req);   /* its on_done (from the loop) reaps s */
    else
        sub_reap(s);
}

static void on_retry(evutil_socket_t fd, short what, void *arg);
static bool on_admit(void *ud, struct hostsched_ticket *slot);

static struct dsub *
sub_new(struct deliver *d, struct dtopic *t, const char *callback,
        const struct subs_record *rec, struct msg_id cursor)
{
    struct dsub *s = rs_calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->d = d;
    s->callback = rs_strdup(callback);
    s->host = websubwire_callback_host(callback);
    s->q = rs_calloc(d->o.queue_max, sizeof(*s->q));
    s->timer = evtimer_new(d->o.base, on_retry, s);
    if (s->callback == NULL || s->host == NULL || s->q == NULL ||
        s->timer == NULL || hostsched_join(d->hosts, &s->slot, callback, s) != 0)
        goto fail;
    if (t->n == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 8;
        struct dsub **nv = rs_realloc(t->v, ncap * sizeof(*nv));
        if (nv == NULL)
            goto fail;
        t->v = nv;
        t->cap = ncap;
    }
    if (rec->secret != NULL && (s->secret = rs_strdup(rec->secret)) == NULL)
        goto fail;
    s->t = t;
    s->expires_ms = rec->expires_ms;
    s->failing = rec->failing;
    s->cursor = s->saved = s->queued_to = cursor;
    s->state = DS_IDLE;
    s->feed = FEED_BEHIND;      /* the first page says whether it is behind */
    s->load_gen = t->load_gen;
    t->v[t->n++] = s;
    d->st.subscriptions++;
    if (s->failing)
        d->st.failing++;
    return s;
fail:
    sub_free(d, s);
    return NULL;
}

static void
on_removed(void *ud, int rc, long long result)
{
    (void)ud;
    (void)result;
    if (rc != 0 && rc != RS_ECANCELED)
        rs_log(RS_LOG_WARN, "removing a subscription failed: %s", rs_strerror(rc));
}

/* Remove s from Redis and from memory. */
static void
sub_remove(struct deliver *d, struct dsub *s, const char *why)
{
    rs_log_kv(RS_LOG_INFO, "subscription removed", "topic", s->t->name,
              "callback", s->callback, "why", why, NULL);
    if (subs_remove(d->o.subs, s->t->name, s->callback, s->host, on_removed,
                    NULL) != 0)
        rs_log(RS_LOG_WARN, "cannot remove subscription %s now; the lease "
               "sweep will", s->callback);
    sub_forget(d, s, why);
}

/* ------------------------------------------------------------------- queue */

static bool
sub_enqueue(struct deliver *d, struct dsub *s, struct body *b)
{
    if (s->qlen == d->o.queue_max)
        return false;
    b->refs++;
    s->q[(s->qhead + s->qlen) % d->o.queue_max] = b;
    s->qlen++;
    s->queued_to = b->id;
    if (s->gap == GAP_FOUND) {
        s->gap = GAP_TELLING;
        s->gap_first = b->id;
    }
    return true;
}

static void
sub_pop(struct deliver *d, struct dsub *s)
{
    body_unref(s->q[s->qhead]);
    s->qhead = (s->qhead + 1) % d->o.queue_max;
    s->qlen--;
}

static void
on_page(void *ud, int rc, struct msg_id mark, const struct backlog_entry *e,
        size_t n)
{
    struct dsub *s = ud;
    struct deliver *d = s->d;
    sub_set_feed(s, FEED_BEHIND, "page read");
    if (sub_reap(s) || s->state == DS_REMOVING || rc != 0)
        return;   /* removed meanwhile; or Redis failed: the tick retries */
    struct dtopic *t = s->t;
    bool cut = false;
    if (d->o.replicated_only) {
        /* Only what N replicas hold (the fan-out's cursor): the rest comes
         * from the tail once confirmed. No cursor yet (the channel is
         * being activated): the tick reads again. The page is contiguous,
         * so nothing at or below the cursor is left out. */
        struct msg_id conf;
        if (!fanout_confirmed(d->o.fanout, t->name, &conf))
            return;
        while (n > 0 && msg_id_cmp(e[n - 1].id, conf) > 0) {
            n--;
            cut = true;
        }
    }
    d->st.pages++;
    if (msg_id_cmp(s->queued_to, mark) < 0 && !msg_id_is_zero(s->queued_to) &&
        s->gap == GAP_NONE) {
        /* WebSub has no gap signal of its own: the next deliveries carry
         * X-Hub-Gap until one is taken, so the subscriber pulls what was
         * lost; meanwhile go on from what the backlog still holds. */
        s->gap = GAP_FOUND;
        s->gap_after = s->queued_to;
        d->st.gaps++;
        char a[MSG_ID_BUFSZ], b[MSG_ID_BUFSZ];
        msg_id_format(s->queued_to, a);
        msg_id_format(mark, b);
        rs_log_kv(RS_LOG_ERROR, "subscription fell behind the backlog: "
                  "notifications were trimmed before delivery", "topic",
                  t->name, "callback", s->callback, "after", a,
                  "trimmed_through", b, NULL);
    }
    bool all_in = true;
    for (size_t i = 0; i < n && all_in; i++) {
        if (msg_id_cmp(e[i].id, s->queued_to) <= 0)
            continue;
        struct body *b = body_new(&e[i]);
        all_in = b != NULL && sub_enqueue(d, s, b);
        body_unref(b);
    }
    /* Caught up only if the page was short, all of it fitted in the queue,
     * and the tail has not gone past it meanwhile (what the tail gave is
     * then in the next page). */
    if (all_in && (n < d->o.queue_max || cut) &&
        msg_id_cmp(t->head, s->queued_to) <= 0)
        sub_set_feed(s, FEED_LIVE, "caught up with the tail");
    sub_kick(d, s);
}

/* BEHIND, with room for a page: read the next one. */
static void
sub_fetch(struct deliver *d, struct dsub *s)
{
    if (s->feed != FEED_BEHIND || s->qlen > d->o.queue_max / 2)
        return;
    if (backlog_page(d->o.backlog, s->t->name, s->queued_to, d->o.queue_max,
                     on_page, s) == 0)
        sub_set_feed(s, FEED_READING, "refill from the backlog");
}

/* ---------------------------------------------------------------- delivery */

static void on_posted(void *ud, struct rs_http_req *req,
                      const struct rs_http_result *res);

/* Start the POST of the head of s's queue (s holds a host slot): ->
 * POSTING, or false when it cannot start (the tick tries again). */
static bool
sub_post(struct deliver *d, struct dsub *s)
{
    struct body *b = s->q[s->qhead];
    const struct topic *tp = topics_by_name(d->o.topics, s->t->name);
    struct websubwire_post wp = {
        .ctype = b->ctype,
        .hub_url = d->o.hub_url,
        .topic_uri = tp != NULL ? tp->uri : "",
        .secret = s->secret,
        .body = b->data,
        .len = b->len,
        .id = b->id,
        .gap_after = sub_says_gap(s) ? &s->gap_after : NULL,
    };
    struct websubwire_headers h;
    websubwire_post_headers(&wp, &h);
    struct rs_http_req_opts ro = {
        .method = "POST",
        .url = s->callback,
        .headers = h.v,
        .body = b->data,
        .body_len = b->len,
        .body_borrowed = true,       /* b stays queued until on_done */
        .timeout_ms = d->o.delivery_timeout_ms,
        .max_body = 64 * 1024,       /* the answer's body is not used */
        .on_done = on_posted,
        .ud = s,
    };
    int rc = rs_http_request(d->o.http, &ro, &s->req);
    if (rc != 0) {
        s->req = NULL;
        rs_log(RS_LOG_WARN, "cannot start a delivery to %s: %s", s->callback,
               rs_strerror(rc));
        return false;
    }
    d->st.in_flight++;
    sub_set(s, DS_POSTING, "the head of the queue");
    return true;
}

/* A slot on s's host freed for it (from hostsched_release). */
static bool
on_admit(void *ud, struct hostsched_ticket *slot)
{
    (void)slot;
    struct dsub *s = ud;
    struct deliver *d = s->d;
    if (s->state != DS_HOST_WAIT)
        return false;
    if (d->closing || !sub_post(d, s)) {
        sub_set(s, DS_IDLE, "admitted, but the POST cannot start");
        return false;
    }
    return true;
}

static void
on_record_set(void *ud, int rc, long long result)
{
    (void)ud;
    (void)result;
    if (rc != 0 && rc != RS_ECANCELED)
        rs_log(RS_LOG_WARN, "cannot record a subscription state: %s",
               rs_strerror(rc));
}

static void
sub_set_failing(struct deliver *d, struct dsub *s, bool failing)
{
    if (s->failing == failing)
        return;
    s->failing = failing;
    if (failing)
        d->st.failing++;
    else
        d->st.failing--;
    struct subs_record r = { .secret = s->secret, .expires_ms = s->expires_ms,
                             .created_ms = 0, .failing = failing };
    char *js = subs_record_json(&r);
    if (js == NULL || subs_set_record(d->o.subs, s->t->name, s->callback, js,
                                      on_record_set, NULL) != 0)
        rs_log(RS_LOG_WARN, "cannot record state of %s", s->callback);
    rs_free(js);
}

static void
on_posted(void *ud, struct rs_http_req *req, const struct rs_http_result *res)
{
    (void)req;
    struct dsub *s = ud;
    struct deliver *d = s->d;
    s->req = NULL;
    d->st.in_flight--;
    /* the slot is free: the next one waiting on the host, healthy first */
    if (d->closing)
        hostsched_return(d->hosts, &s->slot);
    else
        hostsched_release(d->hosts, &s->slot);
    if (s->state == DS_REMOVING) {
        sub_reap(s);
        return;
    }
    if (res->rc == RS_ECANCELED || d->closing) {
        sub_set(s, DS_IDLE, "shutting down");
        return;
    }
    long st = res->rc == 0 ? res->status : 0;
    if (st >= 200 && st < 300) {
        bool told = sub_says_gap(s);
        d->st.delivered++;
        s->delivered++;
        s->cursor = s->q[s->qhead]->id;
        sub_pop(d, s);
        if (told)
            s->gap = GAP_NONE;   /* told: the subscriber pulls */
        s->attempts = 0;
        s->first_fail_ms = 0;
        if (s->failing)
            sub_set_failing(d, s, false);
        sub_set(s, DS_IDLE, "delivered");
        sub_kick(d, s);
        return;
    }
    if (st == 410) {
        d->st.removed_gone++;
        sub_remove(d, s, "the callback answered 410 Gone");
        return;
    }
    d->st.attempts_failed++;
    /* this node's own durations: its monotonic clock */
    uint64_t now = (uint64_t)rs_time_mono_ms();
    if (s->first_fail_ms == 0)
        s->first_fail_ms = now;
    s->attempts++;
    rs_log_kv(RS_LOG_WARN, "delivery failed", "callback", s->callback,
              "status", st ? (st >= 500 ? "5xx" : "4xx") : "none",
              "error", res->rc ? res->errstr : "", NULL);
    if (now - s->first_fail_ms >= d->o.retry_window_ms) {
        if (d->o.drop_failing) {
            d->st.removed_failing++;
            sub_remove(d, s, "failing for longer than the retry window");
            return;
        }
        sub_set_failing(d, s, true);
    }
    uint64_t delay = rs_backoff_delay(&d->backoff, s->attempts);
    struct timeval tv = rs_time_tv_ms((int64_t)delay);
    /* if the timer cannot be armed, IDLE: the next kick retries */
    sub_set(s, evtimer_add(s->timer, &tv) == 0 ? DS_RETRY_WAIT : DS_IDLE,
            "delivery failed");
}

static void
on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct dsub *s = arg;
    if (s->state != DS_RETRY_WAIT)
        return;
    sub_set(s, DS_IDLE, "backoff over");
    sub_kick(s->d, s);
}

/* Do the next thing s can do: post the head of its queue (or wait for a
 * slot on its host), and refill. */
static void
sub_kick(struct deliver *d, struct dsub *s)
{
    if (d->closing || s->state == DS_REMOVING || s->state == DS_POSTING ||
        s->state == DS_RETRY_WAIT || !s->t->owned)
        return;
    if (s->expires_ms != 0 && s->expires_ms <= now_ms(d))
        return;   /* expired: the lease sweep removes it */
    if (s->state == DS_IDLE && s->qlen > 0) {
        if (!hostsched_acquire(d->hosts, &s->slot, s->attempts > 0))
            sub_set(s, DS_HOST_WAIT, "the callback's host is at its cap");
        else if (!sub_post(d, s))
            hostsched_return(d->hosts, &s->slot);   /* the tick retries */
    }
    sub_fetch(d, s);
}

/* ---------------------------------------------------------------- tail */

void
deliver_on_entries(void *ud, const char *chan, const struct backlog_entry *e,
                   size_t n)
{
    struct deliver *d = ud;
    struct dtopic *t = topic_find(d, chan);
    if (t == NULL || n == 0)
        return;
    struct body **bodies = rs_calloc(n, sizeof(*bodies));
    for (size_t i = 0; bodies != NULL && i < n; i++)
        bodies[i] = body_new(&e[i]);
    if (msg_id_cmp(e[n - 1].id, t->head) > 0)
        t->head = e[n - 1].id;
    for (size_t k = 0; k < t->n; k++) {
        struct dsub *s = t->v[k];
        if (s->feed != FEED_LIVE)
            continue;   /* its next page covers these */
        for (size_t i = 0; i < n; i++) {
            if (msg_id_cmp(e[i].id, s->queued_to) <= 0)
                continue;
            if (bodies == NULL || bodies[i] == NULL || !sub_enqueue(d, s, bodies[i])) {
                /* full or out of memory: refill later */
                sub_set_feed(s, FEED_BEHIND, "queue full");
                break;
            }
        }
        sub_kick(d, s);
    }
    for (size_t i = 0; bodies != NULL && i < n; i++)
        body_unref(bodies[i]);
    rs_free(bodies);
}

/* --------------------------------------------------------- load & locks */

static void topic_load(struct deliver *d, struct dtopic *t);

static void
on_loaded(void *ud, int rc, size_t n, const char *const *callbacks,
          const char *const *records, const struct msg_id *cursors)
{
    struct dtopic *t = ud;
    struct deliver *d = t->d;
    bool again = t->load == LOAD_AGAIN;
    t->load = LOAD_IDLE;
    if (rc != 0 || !t->owned || d->closing) {
        if (rc != RS_ECANCELED && again && t->owned && !d->closing)
            topic_load(d, t);
        return;
    }
    t->load_gen++;
    for (size_t i = 0; i < n; i++) {
        struct subs_record rec;
        if (subs_record_parse(records[i], &rec) != 0) {
            rs_log(RS_LOG_WARN, "topic %s: bad subscription record for %s",
                   t->name, callbacks[i]);
            continue;
        }
        struct dsub *s = NULL;
        for (size_t k = 0; k < t->n && s == NULL; k++)
            if (strcmp(t->v[k]->callback, callbacks[i]) == 0)
                s = t->v[k];
        if (s == NULL) {
            s = sub_new(d, t, callbacks[i], &rec, cursors[i]);
        } else {
            /* Loaded again: at each subscribe to the topic and every lock
             * tick (subscriptions made on other nodes). A new lease or
             * secret is a re-subscription; position kept. */
            bool resub = rec.expires_ms != s->expires_ms ||
                         (rec.secret == NULL) != (s->secret == NULL) ||
                         (rec.secret != NULL &&
                          strcmp(rec.secret, s->secret) != 0);
            rs_free(s->secret);
            s->secret = rec.secret;
            rec.secret = NULL;
            s->expires_ms = rec.expires_ms;
            if (resub && s->state == DS_RETRY_WAIT) {
                /* the subscriber asked again (a restarted rssub answers
                 * a delivery signed with its old secret 503): what failed
                 * may work now, not after a backoff of up to minutes. Only
                 * then: a failing one reloaded at every tick would be
                 * retried at every tick, its stalls holding the host's
                 * slots from healthy ones. */
                event_del(s->timer);
                s->attempts = 0;
                sub_set(s, DS_IDLE, "re-subscribed");
            }
        }
        rs_free(rec.secret);
        if (s != NULL) {
            s->load_gen = t->load_gen;
            sub_kick(d, s);
        }
    }
    for (size_t i = 0; i < t->n;) {
        struct dsub *s = t->v[i];
        if (s->load_gen != t->load_gen)   /* unsubscribed, expired or
                                             removed elsewhere */
            sub_forget(d, s, "no longer in the store");
        else
            i++;
    }
    if (again)
        topic_load(d, t);
}

static void
topic_load(struct deliver *d, struct dtopic *t)
{
    if (t->load != LOAD_IDLE) {
        t->load = LOAD_AGAIN;
        return;
    }
    if (subs_load(d->o.subs, t->name, on_loaded, t) == 0)
        t->load = LOAD_RUNNING;
}

static void
topic_release(struct deliver *d, struct dtopic *t, const char *why)
{
    t->owned = false;
    while (t->n > 0)
        sub_forget(d, t->v[t->n - 1], why);
    if (t->pinned) {
        fanout_unpin(d->o.fanout, t->name);
        t->pinned = false;
    }
}

static void
on_locked(void *ud, int rc, long long ours)
{
    struct dtopic *t = ud;
    struct deliver *d = t->d;
    if (rc == RS_ECANCELED || d->closing)
        return;
    if (rc != 0) {
        /* Cannot tell whether the lock is still ours. Until two thirds of
         * its TTL have passed since we last held it for sure, nobody else
         * can have it: go on (dropping the topic reloads stale cursors and
         * repeats deliveries). After that, stop, to keep "at most one node
         * delivers a topic"; the next tick retries. */
        if (t->owned &&
            (uint64_t)rs_time_mono_ms() - t->lock_ok_ms >= d->o.lock_ttl_ms * 2 / 3)
            topic_release(d, t, "the delivery lock cannot be renewed");
        return;
    }
    if (ours == 1)
        t->lock_ok_ms = (uint64_t)rs_time_mono_ms();
    if (ours == 1 && !t->owned) {
        rs_log_kv(RS_LOG_INFO, "delivering topic", "topic", t->name, NULL);
        t->owned = true;
        if (!t->pinned && fanout_pin(d->o.fanout, t->name) == 0)
            t->pinned = true;
        topic_load(d, t);
    } else if (ours == 1) {
        topic_load(d, t);   /* pick up subscriptions made on other nodes */
    } else if (t->owned) {
        rs_log_kv(RS_LOG_WARN, "lost the delivery lock", "topic", t->name, NULL);
        topic_release(d, t, "another node holds the delivery lock");
    }
}

static void
on_sub_topics(void *ud, int rc, size_t n, const char *const *names)
{
    struct deliver *d = ud;
    d->ticking = false;
    if (rc != 0 || d->closing)
        return;
    /* topics without subscriptions any more: let go */
    for (size_t i = 0; i < d->ntopics; i++) {
        struct dtopic *t = d->topics[i];
        bool listed = false;
        for (size_t k = 0; k < n && !listed; k++)
            listed = strcmp(names[k], t->name) == 0;
        if (!listed && t->owned)
            topic_release(d, t, "the topic has no subscriptions");
    }
    for (size_t k = 0; k < n; k++) {
        struct dtopic *t = topic_get(d, names[k]);
        if (t == NULL)
            continue;
        if (subs_lock(d->o.subs, t->name, d->o.node_id, d->o.lock_ttl_ms,
                      on_locked, t) != 0 && t->owned)
            topic_release(d, t, "the delivery lock cannot be renewed");
    }
}

/* Expired leases: any node removes them (idempotent in Redis). */
static void
on_expired(void *ud, int rc, size_t n, const char *const *members)
{
    struct deliver *d = ud;
    if (rc != 0 || d->closing)
        return;
    for (size_t i = 0; i < n; i++) {
        const char *sp = strchr(members[i], ' ');
        if (sp == NULL)
            continue;
        char name[BACKLOG_NAME_MAX + 1];
        size_t nl = (size_t)(sp - members[i]);
        if (nl > BACKLOG_NAME_MAX)
            continue;
        memcpy(name, members[i], nl);
        name[nl] = '\0';
        const char *cb = sp + 1;
        char *host = websubwire_callback_host(cb);
        d->st.removed_expired++;
        rs_log_kv(RS_LOG_INFO, "lease expired", "topic", name, "callback", cb, NULL);
        if (subs_remove(d->o.subs, name, cb, host != NULL ? host : "", on_removed,
                        NULL) != 0)
            rs_log(RS_LOG_WARN, "cannot remove an expired subscription now");
        rs_free(host);
        struct dtopic *t = topic_find(d, name);
        for (size_t k = 0; t != NULL && k < t->n; k++) {
            if (strcmp(t->v[k]->callback, cb) == 0) {
                sub_forget(d, t->v[k], "lease expired");
                break;
            }
        }
    }
}

static void
deliver_tick(struct deliver *d)
{
    if (d->closing || !backlog_ready(d->o.backlog))
        return;
    if (!d->ticking && subs_topics(d->o.subs, on_sub_topics, d) == 0)
        d->ticking = true;
    if (subs_expired(d->o.subs, now_ms(d), 100, on_expired, d) != 0)
        rs_log(RS_LOG_DEBUG, "lease sweep skipped");
    /* subscriptions whose POST could not even start: try again */
    for (size_t i = 0; i < d->ntopics; i++)
        for (size_t k = 0; k < d->topics[i]->n; k++)
            sub_kick(d, d->topics[i]->v[k]);
}

static void
on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    deliver_tick(arg);
}

static void
on_cursors_saved(void *ud, int rc, long long n)
{
    (void)ud;
    (void)n;
    if (rc != 0 && rc != RS_ECANCELED)
        rs_log(RS_LOG_WARN, "cannot save delivery cursors: %s", rs_strerror(rc));
}

/* Write the cursors that moved since the last flush, one call per topic
 * (and per DELIVER_FLUSH_BATCH of them). */
static void
on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct deliver *d = arg;
    if (!backlog_ready(d->o.backlog))
        return;
    for (size_t i = 0; i < d->ntopics; i++) {
        struct dtopic *t = d->topics[i];
        const char *cbs[DELIVER_FLUSH_BATCH];
        struct msg_id ids[DELIVER_FLUSH_BATCH];
        size_t n = 0;
        for (size_t k = 0; k < t->n; k++) {
            struct dsub *s = t->v[k];
            if (msg_id_cmp(s->cursor, s->saved) == 0)
                continue;
            cbs[n] = s->callback;
            ids[n] = s->cursor;
            s->saved = s->cursor;
            if (++n == DELIVER_FLUSH_BATCH) {
                if (subs_save_cursors(d->o.subs, t->name, n, cbs, ids,
                                      on_cursors_saved, NULL) != 0)
                    rs_log(RS_LOG_WARN, "cannot save delivery cursors now");
                n = 0;
            }
        }
        if (n > 0 && subs_save_cursors(d->o.subs, t->name, n, cbs, ids,
                                       on_cursors_saved, NULL) != 0)
            rs_log(RS_LOG_WARN, "cannot save delivery cursors now");
    }
}

/* ---------------------------------------------------------------- public */

struct deliver *
deliver_new(const struct deliver_opts *o, const char **err)
{
    struct deliver *d = rs_calloc(1, sizeof(*d));
    *err = "out of memory";
    if (d == NULL)
        return NULL;
    d->o = *o;
    if (d->o.delivery_timeout_ms == 0)
        d->o.delivery_timeout_ms = 10000;
    if (d->o.retry_max_delay_ms == 0)
        d->o.retry_max_delay_ms = 600000;
    if (d->o.retry_window_ms == 0)
        d->o.retry_window_ms = 86400000;
    if (d->o.queue_max == 0)
        d->o.queue_max = 64;
    if (d->o.lock_ttl_ms == 0)
        d->o.lock_ttl_ms = 15000;
    if (d->o.host_conns == 0)
        d->o.host_conns = 8;
    d->backoff = (struct rs_backoff){ .first_ms = DELIVER_RETRY_FIRST_MS,
                                      .max_ms = d->o.retry_max_delay_ms,
                                      .below_pct = 20, .above_pct = 20 };
    rs_backoff_seed(&d->backoff, (uint64_t)rs_time_now() ^
                    rs_fnv1a64(o->node_id != NULL ? o->node_id : ""));
    d->hosts = hostsched_new(d->o.host_conns, on_admit);
    d->ev_tick = event_new(o->base, -1, EV_PERSIST, on_tick, d);
    d->ev_flush = event_new(o->base, -1, EV_PERSIST, on_flush, d);
    struct timeval tick = rs_time_tv_ms((int64_t)d->o.lock_ttl_ms / 3);
    struct timeval flush = rs_time_tv_ms(100);
    if (d->hosts == NULL || d->ev_tick == NULL || d->ev_flush == NULL ||
        event_add(d->ev_tick, &tick) != 0 || event_add(d->ev_flush, &flush) != 0) {
        deliver_free(d);
        return NULL;
    }
    *err = NULL;
    return d;
}

void
deliver_close(struct deliver *d)
{
    if (d != NULL)
        d->closing = true;
}

void
deliver_free(struct deliver *d)
{
    if (d == NULL)
        return;
    d->closing = true;
    if (d->ev_tick != NULL)
        event_free(d->ev_tick);
    if (d->ev_flush != NULL)
        event_free(d->ev_flush);
    for (size_t i = 0; i < d->ntopics; i++) {
        struct dtopic *t = d->topics[i];
        for (size_t k = 0; k < t->n; k++)
            sub_free(d, t->v[k]);
        rs_free(t->v);
        rs_free(t);
    }
    rs_free(d->topics);
    hostsched_free(d->hosts);
    rs_free(d);
}

void
deliver_kick(struct deliver *d)
{
    deliver_tick(d);
}

void
deliver_refresh(struct deliver *d, const char *topic)
{
    struct dtopic *t = topic_get(d, topic);
    if (t == NULL)
        return;
    if (t->owned)
        topic_load(d, t);
    else if (subs_lock(d->o.subs, t->name, d->o.node_id, d->o.lock_ttl_ms,
                       on_locked, t) != 0)
        rs_log(RS_LOG_DEBUG, "cannot try the delivery lock now");
}

void
deliver_stats(const struct deliver *d, struct deliver_stats *out)
{
    *out = d->st;
    uint64_t now = now_ms(d), lag = 0;
    for (size_t i = 0; i < d->ntopics; i++) {
        for (size_t k = 0; k < d->topics[i]->n; k++) {
            const struct dsub *s = d->topics[i]->v[k];
            if (s->qlen > 0 && now > s->q[s->qhead]->accepted_ms &&
                now - s->q[s->qhead]->accepted_ms > lag)
                lag = now - s->q[s->qhead]->accepted_ms;
        }
    }
    out->lag_max_ms = lag;
}

void
deliver_foreach(const struct deliver *d, const char *topic,
                void (*cb)(void *ud, const struct deliver_sub_info *si),
                void *ud)
{
    const struct dtopic *t = topic_find(d, topic);
    uint64_t now = now_ms(d);
    for (size_t k = 0; t != NULL && k < t->n; k++) {
        const struct dsub *s = t->v[k];
        struct deliver_sub_info si = {
            .callback = s->callback,
            .state = s->failing ? "failing" : s->attempts > 0 ? "retrying" : "active",
            .step = dsub_state_names[s->state],
            .cursor = s->cursor,
            .attempts = s->attempts,
            .delivered = s->delivered,
            .expires_ms = s->expires_ms,
        };
        if (s->qlen > 0 && now > s->q[s->qhead]->accepted_ms)
            si.lag_ms = now - s->q[s->qhead]->accepted_ms;
        cb(ud, &si);
    }
}
