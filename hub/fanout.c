/*
 * fanout.c - channels on the main loop (fanout.h). Live delivery is driven
 * from Redis: one blocking XREAD over every active channel, so what any
 * node accepted reaches this node's subscribers, in stream order. Replay is
 * pulled by each client's service thread page by page; each page carries
 * the trim mark, so "gone from the backlog" is detected, never skipped.
 *
 * The seam rule that keeps the join gap-free: main counts a client in a
 * channel when it sends ATTACH, and every live message it posts afterwards
 * follows that ATTACH in the thread's FIFO. A live client skips ids <= the
 * cursor it attached at; a replaying one ignores live messages until the
 * page that reaches the cursor, then skips ids <= that page's last id.
 */
#include <event2/event.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RS_LOG_MODULE "fanout"
#include "fanout.h"
#include "rs_alloc.h"
#include "rs_log.h"

enum chan_state {
    CH_IDLE = 0,
    CH_ACTIVATING,
    CH_ACTIVE,
};

struct join {
    struct join *next;
    unsigned thread;
    uint64_t client;
    bool has_since;
    struct msg_id since;
};

struct chan {
    unsigned idx;
    char name[BACKLOG_NAME_MAX + 1];
    enum chan_state state;
    struct msg_id cursor;          /* last id dispatched */
    unsigned *subs;                /* per service thread */
    size_t total;
    struct join *joins;            /* waiting for activation */
    unsigned pins;                 /* holders other than WebSocket clients */
    time_t idle_since;             /* monotonic seconds; 0 = has subscribers */
};

struct batch_item {
    unsigned chan;
    struct msg_id before;          /* cursor before this tail read */
    struct msg_id first;           /* first id the read returned */
};

struct fanout {
    struct fanout_opts o;
    struct ws_server *ws;
    unsigned nthreads;
    struct seam_queue inbox;
    int efd;
    struct event *ev_inbox;
    struct event *ev_timer;
    struct chan **chans;
    size_t nchans, cap;
    bool tail_inflight;
    bool marks_inflight;
    struct batch_item *batch;
    size_t nbatch, batchcap;
    fanout_entries_cb on_entries;
    void *entries_ud;
    const char **tail_names;       /* scratch for the XREAD arguments */
    struct msg_id *tail_after;
    size_t tail_cap;
    struct fanout_stats st;
};

/* One replay page in flight. */
struct page_req {
    struct fanout *f;
    unsigned chan;
    unsigned thread;
    uint64_t client;
    struct msg_id after;
};

struct info_req {
    struct fanout *f;
    unsigned chan;
};

static void fanout_tail(struct fanout *f);

static time_t
mono_secs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec;
}

/* ------------------------------------------------------------- channels */

static struct chan *
chan_find(const struct fanout *f, const char *name)
{
    for (size_t i = 0; i < f->nchans; i++)
        if (strcmp(f->chans[i]->name, name) == 0)
            return f->chans[i];
    return NULL;
}

static struct chan *
chan_get(struct fanout *f, const char *name)
{
    struct chan *ch = chan_find(f, name);
    if (ch != NULL)
        return ch;
    if (f->nchans >= f->o.max_channels)
        return NULL;   /* open mode must not grow without bound */
    if (f->nchans == f->cap) {
        size_t ncap = f->cap ? f->cap * 2 : 16;
        struct chan **nv = rs_realloc(f->chans, ncap * sizeof(*nv));
        if (nv == NULL)
            return NULL;
        f->chans = nv;
        f->cap = ncap;
    }
    ch = rs_calloc(1, sizeof(*ch));
    if (ch == NULL)
        return NULL;
    ch->subs = rs_calloc(f->nthreads ? f->nthreads : 1, sizeof(*ch->subs));
    if (ch->subs == NULL) {
        rs_free(ch);
        return NULL;
    }
    ch->idx = (unsigned)f->nchans;
    snprintf(ch->name, sizeof(ch->name), "%s", name);
    f->chans[f->nchans++] = ch;
    return ch;
}

static void
post_close(struct fanout *f, unsigned thread, uint64_t client, unsigned chan,
           uint16_t code, const char *reason)
{
    struct seam_ev *ev = seam_ev_new(SEAM_CLOSE);
    if (ev == NULL)
        return;
    ev->client = client;
    ev->chan = chan;
    ev->code = code;
    snprintf(ev->text, sizeof(ev->text), "%s", reason);
    ws_server_post(f->ws, thread, ev);
}

/* Close every client of ch on every thread (a gap in the live stream). */
static void
chan_close_all(struct fanout *f, struct chan *ch, uint16_t code,
               const char *reason)
{
    for (unsigned t = 0; t < f->nthreads; t++)
        if (ch->subs[t] > 0)
            post_close(f, t, 0, ch->idx, code, reason);
}

/* --------------------------------------------------------------- replay */

static void replay_request(struct fanout *f, struct chan *ch, unsigned thread,
                           uint64_t client, struct msg_id after);

static void
on_page(void *ud, int rc, struct msg_id mark, const struct backlog_entry *e,
        size_t n)
{
    struct page_req *q = ud;
    struct fanout *f = q->f;
    struct chan *ch = f->chans[q->chan];
    char a[MSG_ID_BUFSZ], b[MSG_ID_BUFSZ], reason[SEAM_TEXT];

    if (rc == RS_ECANCELED)
        goto out;
    if (rc != 0) {
        post_close(f, q->thread, q->client, ch->idx, 4003,
                   "backlog unavailable; retry later with since");
        goto out;
    }
    if (!msg_id_is_zero(q->after) && msg_id_cmp(q->after, mark) < 0) {
        msg_id_format(q->after, a);
        msg_id_format(mark, b);
        snprintf(reason, sizeof(reason),
                 "gap: since=%s is older than the backlog (trimmed through %s)",
                 a, b);
        f->st.gaps++;
        post_close(f, q->thread, q->client, ch->idx, 4001, reason);
        goto out;
    }
    struct seam_ev *ev = seam_ev_new(SEAM_REPLAY);
    if (ev == NULL || (n > 0 && (ev->msgs = rs_calloc(n, sizeof(*ev->msgs))) == NULL)) {
        seam_ev_free(ev);
        post_close(f, q->thread, q->client, ch->idx, 1011, "out of memory");
        goto out;
    }
    /* A page is also bounded in bytes (one entry at least), so a backlog of
     * large notifications never floods a resuming client's queue. */
    size_t bytes = 0;
    for (size_t i = 0; i < n && (i == 0 || bytes + e[i].len <= f->o.page_bytes); i++) {
        int mrc;
        ev->msgs[i] = msg_new(e[i].id, ch->idx, e[i].body, e[i].len, &mrc);
        if (ev->msgs[i] == NULL) {
            seam_ev_free(ev);
            post_close(f, q->thread, q->client, ch->idx, 1011, "out of memory");
            goto out;
        }
        bytes += e[i].len;
        ev->nmsgs++;
    }
    f->st.replayed += ev->nmsgs;
    ev->client = q->client;
    ev->chan = ch->idx;
    ev->id = ev->nmsgs > 0 ? e[ev->nmsgs - 1].id : q->after;
    /* Done when the backlog is exhausted (a short page, all of it sent) and
     * the live cursor has not gone past what this page covers: live
     * messages <= id are then skipped. */
    ev->flag = n < f->o.page_size && ev->nmsgs == n &&
               msg_id_cmp(ch->cursor, ev->id) <= 0;
    ws_server_post(f->ws, q->thread, ev);
out:
    rs_free(q);
}

static void
replay_request(struct fanout *f, struct chan *ch, unsigned thread,
               uint64_t client, struct msg_id after)
{
    struct page_req *q = rs_malloc(sizeof(*q));
    if (q == NULL) {
        post_close(f, thread, client, ch->idx, 1011, "out of memory");
        return;
    }
    q->f = f;
    q->chan = ch->idx;
    q->thread = thread;
    q->client = client;
    q->after = after;
    if (backlog_page(f->o.backlog, ch->name, after, f->o.page_size, on_page,
                     q) != 0) {
        rs_free(q);
        post_close(f, thread, client, ch->idx, 4003,
                   "backlog unavailable; retry later with since");
    }
}

/* ----------------------------------------------------------------- joins */

static void
join_process(struct fanout *f, struct chan *ch, struct join *j)
{
    struct seam_ev *ev = seam_ev_new(SEAM_ATTACH);
    if (ev == NULL) {
        post_close(f, j->thread, j->client, ch->idx, 1011, "out of memory");
        return;
    }
    ch->subs[j->thread]++;
    ch->total++;
    ch->idle_since = 0;
    ev->client = j->client;
    ev->chan = ch->idx;
    ev->flag = j->has_since;
    ev->id = j->has_since ? j->since : ch->cursor;
    ws_server_post(f->ws, j->thread, ev);
    if (j->has_since)
        replay_request(f, ch, j->thread, j->client, j->since);
}

static void
chan_fail_joins(struct fanout *f, struct chan *ch)
{
    struct join *j = ch->joins;
    ch->joins = NULL;
    while (j != NULL) {
        struct join *next = j->next;
        post_close(f, j->thread, j->client, ch->idx, 4003,
                   "backlog unavailable; retry later");
        rs_free(j);
        j = next;
    }
}

static void
on_chan_info(void *ud, int rc, const struct backlog_info *info)
{
    struct info_req *q = ud;
    struct fanout *f = q->f;
    struct chan *ch = f->chans[q->chan];
    rs_free(q);
    if (rc == RS_ECANCELED)
        return;
    if (rc != 0) {
        rs_log(RS_LOG_WARN, "cannot activate channel %s: %s", ch->name,
               rs_strerror(rc));
        ch->state = CH_IDLE;
        chan_fail_joins(f, ch);
        return;
    }
    ch->cursor = info->last_generated;
    ch->state = CH_ACTIVE;
    struct join *j = ch->joins;
    ch->joins = NULL;
    /* joins were pushed at the head; process them oldest first */
    struct join *rev = NULL;
    while (j != NULL) {
        struct join *next = j->next;
        j->next = rev;
        rev = j;
        j = next;
    }
    while (rev != NULL) {
        struct join *next = rev->next;
        join_process(f, ch, rev);
        rs_free(rev);
        rev = next;
    }
    fanout_kick(f);
}

static void
chan_activate(struct fanout *f, struct chan *ch)
{
    struct info_req *q = rs_malloc(sizeof(*q));
    ch->state = CH_ACTIVATING;
    if (q != NULL) {
        q->f = f;
        q->chan = ch->idx;
        if (backlog_info(f->o.backlog, ch->name, on_chan_info, q) == 0)
            return;
        rs_free(q);
    }
    ch->state = CH_IDLE;
    chan_fail_joins(f, ch);
}

static void
on_join(struct fanout *f, struct seam_ev *ev)
{
    const char *name = ev->text;
    bool known = topics_by_name(f->o.topics, name) != NULL ||
                 (topics_open(f->o.topics) && backlog_name_ok(name));
    if (!known) {
        post_close(f, ev->thread, ev->client, SEAM_NO_CHAN, 4004,
                   "unknown channel");
        return;
    }
    struct chan *ch = chan_get(f, name);
    struct join *j = rs_malloc(sizeof(*j));
    if (ch == NULL || j == NULL) {
        rs_free(j);
        post_close(f, ev->thread, ev->client, SEAM_NO_CHAN, 1013,
                   f->nchans >= f->o.max_channels ? "too many channels on this hub"
                                                  : "out of memory");
        return;
    }
    j->thread = ev->thread;
    j->client = ev->client;
    j->has_since = ev->flag;
    j->since = ev->id;
    if (ch->state == CH_ACTIVE) {
        join_process(f, ch, j);
        rs_free(j);
        return;
    }
    j->next = ch->joins;
    ch->joins = j;
    if (ch->state == CH_IDLE)
        chan_activate(f, ch);
}

static void
on_leave(struct fanout *f, struct seam_ev *ev)
{
    if (ev->chan >= f->nchans)
        return;
    struct chan *ch = f->chans[ev->chan];
    if (ev->thread < f->nthreads && ch->subs[ev->thread] > 0) {
        ch->subs[ev->thread]--;
        ch->total--;
    }
    if (ch->total == 0)
        ch->idle_since = mono_secs();
}

static void
on_more(struct fanout *f, struct seam_ev *ev)
{
    if (ev->chan >= f->nchans)
        return;
    replay_request(f, f->chans[ev->chan], ev->thread, ev->client, ev->id);
}

static void
on_inbox(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct fanout *f = arg;
    seam_eventfd_drain(fd);
    struct seam_ev *ev = seam_take(&f->inbox);
    while (ev != NULL) {
        struct seam_ev *next = ev->next;
        switch (ev->type) {
        case SEAM_JOIN: on_join(f, ev); break;
        case SEAM_LEAVE: on_leave(f, ev); break;
        case SEAM_MORE: on_more(f, ev); break;
        default: break;
        }
        seam_ev_free(ev);
        ev = next;
    }
}

/* ------------------------------------------------------------------ tail */

static void
dispatch(struct fanout *f, struct chan *ch, const struct backlog_entry *e)
{
    if (msg_id_cmp(e->id, ch->cursor) <= 0)
        return;
    int rc;
    struct msg *m = msg_new(e->id, ch->idx, e->body, e->len, &rc);
    if (m == NULL) {
        f->st.bad_entries++;
        rs_log(RS_LOG_ERROR, "channel %s: cannot frame an entry: %s",
               ch->name, rs_strerror(rc));
        return;   /* the cursor stays: the next read retries it */
    }
    for (unsigned t = 0; t < f->nthreads; t++) {
        if (ch->subs[t] == 0)
            continue;
        struct seam_ev *ev = seam_ev_new(SEAM_MSG);
        if (ev == NULL)
            continue;
        ev->m = msg_ref(m);
        ws_server_post(f->ws, t, ev);
    }
    msg_unref(m);
    ch->cursor = e->id;
    f->st.dispatched++;
}

/*
 * Was anything after `before` trimmed before the tail read it? At the XREAD,
 * no entry existed between `before` and the batch's first id `first` (it
 * would have been returned), and ids only grow; so there is a hole exactly
 * when some trim deleted through an id L with before < L < first. Trims
 * that deleted entries we had already read (L >= first) are no hole. If
 * the log does not reach back to `before`, assume the worst.
 */
static bool
trims_hole(const struct backlog_trimlog *log, struct msg_id before,
           struct msg_id first)
{
    for (size_t k = 0; k < log->n; k++)
        if (msg_id_cmp(before, log->ids[k]) < 0 && msg_id_cmp(log->ids[k], first) < 0)
            return true;
    return log->n == BACKLOG_TRIMLOG_MAX &&
           msg_id_cmp(before, log->ids[log->n - 1]) < 0;
}

static void
on_trims(void *ud, int rc, const struct backlog_trimlog *logs, size_t n)
{
    struct fanout *f = ud;
    f->marks_inflight = false;
    if (rc == RS_ECANCELED)
        return;
    for (size_t i = 0; rc == 0 && i < n && i < f->nbatch; i++) {
        struct chan *ch = f->chans[f->batch[i].chan];
        if (!trims_hole(&logs[i], f->batch[i].before, f->batch[i].first))
            continue;
        char a[MSG_ID_BUFSZ], b[MSG_ID_BUFSZ], reason[SEAM_TEXT];
        msg_id_format(f->batch[i].before, a);
        msg_id_format(f->batch[i].first, b);
        snprintf(reason, sizeof(reason),
                 "gap: entries between %s and %s were trimmed before delivery", a, b);
        rs_log(RS_LOG_ERROR, "channel %s: %s", ch->name, reason);
        f->st.gaps++;
        chan_close_all(f, ch, 4001, reason);
    }
    f->nbatch = 0;
    fanout_tail(f);
}

static void
on_tail(void *ud, int rc, const char *name, const struct backlog_entry *e,
        size_t n)
{
    struct fanout *f = ud;
    if (name != NULL) {
        struct chan *ch = chan_find(f, name);
        if (ch == NULL || n == 0)
            return;
        if (f->nbatch == f->batchcap) {
            size_t ncap = f->batchcap ? f->batchcap * 2 : 16;
            struct batch_item *nb = rs_realloc(f->batch, ncap * sizeof(*nb));
            if (nb != NULL) {
                f->batch = nb;
                f->batchcap = ncap;
            }
        }
        if (f->nbatch < f->batchcap) {
            f->batch[f->nbatch].chan = ch->idx;
            f->batch[f->nbatch].before = ch->cursor;
            f->batch[f->nbatch].first = e[0].id;
            f->nbatch++;
        }
        for (size_t i = 0; i < n; i++)
            dispatch(f, ch, &e[i]);
        if (f->on_entries != NULL)
            f->on_entries(f->entries_ud, ch->name, e, n);
        return;
    }
    f->tail_inflight = false;
    if (rc == RS_ECANCELED)
        return;
    if (rc != 0) {
        f->nbatch = 0;
        return;   /* the link is down; fanout_kick or the timer restarts */
    }
    if (f->nbatch > 0) {
        const char *names[64];
        size_t k = f->nbatch < 64 ? f->nbatch : 64;
        f->nbatch = k;
        for (size_t i = 0; i < k; i++)
            names[i] = f->chans[f->batch[i].chan]->name;
        if (backlog_trims(f->o.backlog, names, k, on_trims, f) == 0) {
            f->marks_inflight = true;
            return;
        }
        f->nbatch = 0;
    }
    fanout_tail(f);
}

static void
fanout_tail(struct fanout *f)
{
    if (f->tail_inflight || f->marks_inflight || f->ws == NULL)
        return;
    if (f->tail_cap < f->nchans) {
        const char **nn = rs_realloc(f->tail_names, f->nchans * sizeof(*nn));
        if (nn != NULL)
            f->tail_names = nn;
        struct msg_id *na = rs_realloc(f->tail_after, f->nchans * sizeof(*na));
        if (na != NULL)
            f->tail_after = na;
        if (nn == NULL || na == NULL)
            return;   /* the timer retries */
        f->tail_cap = f->nchans;
    }
    size_t n = 0;
    for (size_t i = 0; i < f->nchans; i++) {
        if (f->chans[i]->state != CH_ACTIVE)
            continue;
        f->tail_names[n] = f->chans[i]->name;
        f->tail_after[n] = f->chans[i]->cursor;
        n++;
    }
    f->st.channels_active = n;
    if (n == 0)
        return;
    if (backlog_tail_read(f->o.backlog, f->tail_names, f->tail_after, n, 5000,
                          f->o.tail_count, on_tail, f) == 0) {
        f->tail_inflight = true;
        f->st.tail_reads++;
    }
}

void
fanout_kick(struct fanout *f)
{
    if (f->tail_inflight)
        backlog_tail_interrupt(f->o.backlog);   /* re-read with the new set */
    else
        fanout_tail(f);
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct fanout *f = arg;
    time_t now = mono_secs();
    bool changed = false;
    for (size_t i = 0; i < f->nchans; i++) {
        struct chan *ch = f->chans[i];
        if (ch->state == CH_IDLE && ch->pins > 0)
            chan_activate(f, ch);
        if (ch->state == CH_ACTIVE && ch->total == 0 && ch->pins == 0 &&
            ch->idle_since != 0 &&
            now - ch->idle_since >= (time_t)f->o.idle_secs) {
            ch->state = CH_IDLE;
            changed = true;
        }
    }
    if (changed)
        fanout_kick(f);
    else
        fanout_tail(f);   /* restarts the loop after a Redis outage */
}

/* ------------------------------------------------------------- lifecycle */

struct fanout *
fanout_new(const struct fanout_opts *o, const char **err)
{
    struct fanout *f = rs_calloc(1, sizeof(*f));
    *err = "out of memory";
    if (f == NULL)
        return NULL;
    f->o = *o;
    if (f->o.page_size == 0)
        f->o.page_size = 256;
    if (f->o.tail_count == 0)
        f->o.tail_count = 1000;
    if (f->o.idle_secs == 0)
        f->o.idle_secs = 60;
    if (f->o.page_bytes == 0)
        f->o.page_bytes = 512 * 1024;
    if (f->o.max_channels == 0)
        f->o.max_channels = 100000;
    f->efd = seam_eventfd_new();
    if (f->efd < 0) {
        *err = "cannot create an eventfd";
        rs_free(f);
        return NULL;
    }
    if (seam_queue_init(&f->inbox, seam_eventfd_wake, &f->efd) != 0) {
        close(f->efd);
        rs_free(f);
        return NULL;
    }
    f->ev_inbox = event_new(o->base, f->efd, EV_READ | EV_PERSIST, on_inbox, f);
    f->ev_timer = event_new(o->base, -1, EV_PERSIST, on_timer, f);
    struct timeval one = { 1, 0 };
    if (f->ev_inbox == NULL || f->ev_timer == NULL ||
        event_add(f->ev_inbox, NULL) != 0 || event_add(f->ev_timer, &one) != 0) {
        fanout_free(f);
        return NULL;
    }
    *err = NULL;
    return f;
}

struct seam_queue *
fanout_inbox(struct fanout *f)
{
    return &f->inbox;
}

void
fanout_attach(struct fanout *f, struct ws_server *ws)
{
    f->ws = ws;
    f->nthreads = ws_server_threads(ws);
}

void
fanout_on_entries(struct fanout *f, fanout_entries_cb cb, void *ud)
{
    f->on_entries = cb;
    f->entries_ud = ud;
}

int
fanout_pin(struct fanout *f, const char *name)
{
    struct chan *ch = chan_get(f, name);
    if (ch == NULL)
        return RS_ENOMEM;
    ch->pins++;
    ch->idle_since = 0;
    if (ch->state == CH_IDLE)
        chan_activate(f, ch);   /* a failure is retried by the timer */
    return 0;
}

void
fanout_unpin(struct fanout *f, const char *name)
{
    struct chan *ch = chan_find(f, name);
    if (ch == NULL || ch->pins == 0)
        return;
    if (--ch->pins == 0 && ch->total == 0)
        ch->idle_since = mono_secs();
}

size_t
fanout_subscribers(const struct fanout *f, const char *name)
{
    const struct chan *ch = chan_find(f, name);
    return ch != NULL ? ch->total : 0;
}

void
fanout_stats(const struct fanout *f, struct fanout_stats *out)
{
    *out = f->st;
}

void
fanout_free(struct fanout *f)
{
    if (f == NULL)
        return;
    if (f->ev_inbox != NULL)
        event_free(f->ev_inbox);
    if (f->ev_timer != NULL)
        event_free(f->ev_timer);
    for (size_t i = 0; i < f->nchans; i++) {
        struct join *j = f->chans[i]->joins;
        while (j != NULL) {
            struct join *next = j->next;
            rs_free(j);
            j = next;
        }
        rs_free(f->chans[i]->subs);
        rs_free(f->chans[i]);
    }
    rs_free(f->chans);
    rs_free(f->batch);
    rs_free(f->tail_names);
    rs_free(f->tail_after);
    seam_queue_cleanup(&f->inbox);
    close(f->efd);
    rs_free(f);
}
