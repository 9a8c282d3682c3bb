/*
 * fanout.c - channels on the main loop (fanout.h). Live delivery is driven
 * from Redis: one blocking XREAD over every active channel, so what any
 * node accepted reaches this node's subscribers, in stream order. Replay is
 * pulled by each client's service thread page by page; each page carries
 * the trim mark, so "gone from the backlog" is detected, never skipped.
 *
 * Replay is the one thing anonymous clients can make Redis do at will, so
 * it is scheduled: every page read waits in one FIFO and at most
 * replay_reads run at once per node, whatever the number of clients (a
 * queue, not a fan-out); a page is bounded in bytes by the page script; a
 * client that leaves is dropped from the queue, so nothing is read for it
 * after it has gone; and reads are started only after a whole inbox batch
 * is handled, so a client that connects and hangs up at once costs no
 * read at all (docs/internals/fanout.md, "Replay under load").
 *
 * The seam rule that keeps the join gap-free: main counts a client in a
 * channel when it sends ATTACH, and every live message it posts afterwards
 * follows that ATTACH in the thread's FIFO. A live client skips ids <= the
 * cursor it attached at; a replaying one ignores live messages until the
 * page that reaches the cursor, then skips ids <= that page's last id.
 *
 * The tail is also what bounds the live messages waiting for the service
 * threads: when a post says a thread's queue is over its mark, no further
 * XREAD starts until that thread says DRAINED. Nothing is lost meanwhile:
 * the entries wait in Redis and the cursors stay where they are.
 *
 * With --ack-replicas (o.ack), nothing goes out that a failover could
 * lose: a tail batch is copied and held until an ack barrier (a probe
 * write and WAIT on the ack link, after the XREAD) says N replicas hold
 * it, then released whole; a batch that cannot be confirmed is dropped and
 * read again from the cursors, which did not move. So a cursor only ever
 * holds a replicated id, and replay pages stop at it
 * (docs/internals/failover.md).
 */
#include <event2/event.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define RS_LOG_MODULE "fanout"
#include "ack.h"
#include "fanout.h"
#include "rs_alloc.h"
#include "rs_log.h"
#include "rs_metrics.h"
#include "rs_mix.h"
#include "rs_strmap.h"
#include "rs_time.h"

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
    struct seam_addr addr;
};

enum replay_state {
    RP_JOINING = 0,   /* JOIN seen; waiting for the channel to activate */
    RP_QUEUED,        /* waiting for a page read slot */
    RP_READING,       /* its page read is in flight */
    RP_DRAINING,      /* page handed over; waiting for the client's MORE */
};

/* One client in replay mode, from its JOIN until its last page or its
 * LEAVE. Indexed by client id (LEAVE and MORE find it); queued in the FIFO
 * while RP_QUEUED. A record whose read is in flight is owned by that read
 * once the client left (gone): the read's callback frees it. */
struct replay {
    struct replay *hnext;          /* client map chain */
    struct replay *prev, *next;    /* FIFO links; valid while RP_QUEUED */
    uint64_t client;
    unsigned thread;
    unsigned chan;                 /* SEAM_NO_CHAN while RP_JOINING */
    enum replay_state state;
    bool gone;                     /* left while RP_READING */
    bool empty_once;               /* the last page was empty, the cursor
                                      past it */
    struct msg_id after;           /* the next page: ids after this */
    struct seam_addr addr;         /* counted in the per-address cap */
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

/* One channel's part of a held tail batch: held[off .. off + n). */
struct held_seg {
    unsigned chan;
    size_t off, n;
};

struct fanout {
    struct fanout_opts o;
    struct ws_server *ws;
    unsigned nthreads;
    struct seam_sink inbox;        /* the service threads' events come here */
    unsigned tail_holds;           /* pauses not yet DRAINED: the tail waits */
    struct event *ev_timer;
    struct chan **chans;
    size_t nchans, cap;
    struct rs_strmap by_name;      /* chans by name (their own strings) */
    uint16_t refuse_code;          /* fanout_refuse_joins; 0: none */
    const char *refuse_why;
    bool tail_inflight;
    bool marks_inflight;
    struct batch_item *batch;
    size_t nbatch, batchcap;
    fanout_entries_cb on_entries;
    void *entries_ud;
    const char **tail_names;       /* scratch for the XREAD arguments */
    struct msg_id *tail_after;
    size_t tail_cap;
    /* replay: client id -> record (chained; power-of-two buckets), and
     * the FIFO of records waiting for a read slot */
    struct replay **rmap;
    size_t rmap_cap;
    struct replay *rq_head, *rq_tail;
    /* --ack-replicas: the tail batch held for its barrier. Entries are
     * copies (body and content type in one block each, owned here); at
     * most one batch (tail_count entries), as the next read waits. */
    struct backlog_entry *held;
    char **held_blk;               /* held[i]'s body and ctype block */
    size_t nheld, heldcap;
    struct held_seg *segs;
    size_t nsegs, segcap;
    bool held_bad;                 /* a copy failed: drop, read again */
    bool ack_inflight;             /* the barrier for it is in flight */
    char held_addr[280];           /* the server the XREAD ran on */
    struct fanout_stats st;
    struct rs_metrics_counter *m_pages, *m_cancelled, *m_refused, *m_future;
};

struct info_req {
    struct fanout *f;
    unsigned chan;
    struct msg_id cursor;          /* --ack-replicas: waits for its barrier */
};

static void fanout_tail(struct fanout *f);

static time_t
mono_secs(void)
{
    return (time_t)(rs_time_mono_us() / 1000000);
}

/* ------------------------------------------------------------- channels */

static struct chan *
chan_find(const struct fanout *f, const char *name)
{
    return rs_strmap_get(&f->by_name, name);
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
    if (strlen(name) >= sizeof(ch->name))
        return NULL;   /* longer than a backlog name may be */
    ch = rs_calloc(1, sizeof(*ch));
    if (ch == NULL)
        return NULL;
    ch->subs = rs_calloc(f->nthreads ? f->nthreads : 1, sizeof(*ch->subs));
    snprintf(ch->name, sizeof(ch->name), "%s", name);
    if (ch->subs == NULL || rs_strmap_put(&f->by_name, ch->name, ch) != 0) {
        rs_free(ch->subs);
        rs_free(ch);
        return NULL;
    }
    ch->idx = (unsigned)f->nchans;
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

void
fanout_close_every(struct fanout *f, uint16_t code, const char *reason)
{
    for (size_t i = 0; i < f->nchans; i++)
        chan_close_all(f, f->chans[i], code, reason);
}

void
fanout_refuse_joins(struct fanout *f, uint16_t code, const char *reason)
{
    f->refuse_code = code;
    f->refuse_why = reason;
}

/* --------------------------------------------------------------- replay */

static size_t
rmap_slot(const struct fanout *f, uint64_t client)
{
    return (size_t)rs_mix64(client) & (f->rmap_cap - 1);
}

static struct replay *
replay_find(const struct fanout *f, uint64_t client)
{
    if (f->rmap_cap == 0)
        return NULL;
    for (struct replay *r = f->rmap[rmap_slot(f, client)]; r; r = r->hnext)
        if (r->client == client)
            return r;
    return NULL;
}

/* Index r by its client; the map doubles when it holds more records than
 * buckets, so chains stay short. Records are bounded by connections. */
static int
replay_index(struct fanout *f, struct replay *r)
{
    if (f->st.replays >= f->rmap_cap) {
        size_t ncap = f->rmap_cap ? f->rmap_cap * 2 : 64;
        struct replay **nm = rs_calloc(ncap, sizeof(*nm));
        if (nm == NULL)
            return RS_ENOMEM;
        size_t ocap = f->rmap_cap;
        struct replay **om = f->rmap;
        f->rmap = nm;
        f->rmap_cap = ncap;
        for (size_t i = 0; i < ocap; i++) {
            struct replay *x = om[i];
            while (x != NULL) {
                struct replay *next = x->hnext;
                size_t j = rmap_slot(f, x->client);
                x->hnext = nm[j];
                nm[j] = x;
                x = next;
            }
        }
        rs_free(om);
    }
    size_t j = rmap_slot(f, r->client);
    r->hnext = f->rmap[j];
    f->rmap[j] = r;
    f->st.replays++;
    return 0;
}

static void
replay_unindex(struct fanout *f, struct replay *r)
{
    struct replay **pp = &f->rmap[rmap_slot(f, r->client)];
    while (*pp != NULL && *pp != r)
        pp = &(*pp)->hnext;
    if (*pp == r) {
        *pp = r->hnext;
        f->st.replays--;
    }
}

static void
rq_push(struct fanout *f, struct replay *r)
{
    r->state = RP_QUEUED;
    r->next = NULL;
    r->prev = f->rq_tail;
    if (f->rq_tail != NULL)
        f->rq_tail->next = r;
    else
        f->rq_head = r;
    f->rq_tail = r;
    f->st.replay_queued++;
}

static void
rq_unlink(struct fanout *f, struct replay *r)
{
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        f->rq_head = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    else
        f->rq_tail = r->prev;
    r->prev = r->next = NULL;
    f->st.replay_queued--;
}

/* The replay is over (done, failed, or the client left): forget the
 * client and give its address's slot back. A record whose read is in
 * flight is only marked; the read's callback frees it. */
static void
replay_end(struct fanout *f, struct replay *r)
{
    replay_unindex(f, r);
    if (f->ws != NULL)
        ws_server_replay_end(f->ws, &r->addr);
    if (r->state == RP_QUEUED)
        rq_unlink(f, r);
    if (r->state == RP_READING) {
        r->gone = true;
        return;
    }
    rs_free(r);
}

struct page_req {
    struct fanout *f;
    struct replay *r;
};

static void
page_handle(struct page_req *q, int rc, struct msg_id mark,
            const struct backlog_entry *e, size_t n)
{
    struct fanout *f = q->f;
    struct replay *r = q->r;
    struct chan *ch = f->chans[r->chan];
    char a[MSG_ID_BUFSZ], b[MSG_ID_BUFSZ], reason[SEAM_TEXT];

    rs_free(q);
    f->st.replay_reading--;
    if (rc == RS_ECANCELED) {
        /* Shutting down: the WebSocket server is already gone, so neither
         * post nor give the address's slot back. */
        if (!r->gone)
            replay_unindex(f, r);
        rs_free(r);
        return;
    }
    if (r->gone) {
        /* It left while this page was read: Redis did the work, nobody
         * gets it. Counted, so a flood of such clients shows. */
        f->st.replay_cancelled++;
        rs_metrics_counter_inc(f->m_cancelled);
        rs_free(r);
        return;
    }
    r->state = RP_DRAINING;
    if (rc != 0) {
        post_close(f, r->thread, r->client, ch->idx, 4003,
                   "backlog unavailable; retry later with since");
        replay_end(f, r);
        return;
    }
    if (!msg_id_is_zero(r->after) && msg_id_cmp(r->after, mark) < 0) {
        msg_id_format(r->after, a);
        msg_id_format(mark, b);
        snprintf(reason, sizeof(reason),
                 "gap: since=%s is older than the backlog (trimmed through %s)",
                 a, b);
        f->st.gaps++;
        post_close(f, r->thread, r->client, ch->idx, 4001, reason);
        replay_end(f, r);
        return;
    }
    /* --ack-replicas: what is past the cursor may not be replicated yet;
     * it comes live (or in the next page) once it is. The entries up to
     * the cursor are all here (a page is contiguous), so the done rule
     * below holds as it is. */
    while (f->o.ack != NULL && n > 0 && msg_id_cmp(e[n - 1].id, ch->cursor) > 0)
        n--;
    /* An empty page with the cursor past it is a read that ran before
     * entries the tail has already seen, so the next read finds them. Two
     * in a row mean entries this node delivered are gone from Redis
     * without a trim mark (the stream was deleted): a gap. */
    bool behind = n == 0 && msg_id_cmp(ch->cursor, r->after) > 0;
    if (behind && r->empty_once) {
        msg_id_format(r->after, a);
        msg_id_format(ch->cursor, b);
        snprintf(reason, sizeof(reason),
                 "gap: entries between %s and %s are gone from the backlog", a, b);
        f->st.gaps++;
        post_close(f, r->thread, r->client, ch->idx, 4001, reason);
        replay_end(f, r);
        return;
    }
    r->empty_once = behind;
    struct seam_ev *ev = seam_ev_new(SEAM_REPLAY);
    if (ev == NULL || (n > 0 && (ev->msgs = rs_calloc(n, sizeof(*ev->msgs))) == NULL)) {
        seam_ev_free(ev);
        post_close(f, r->thread, r->client, ch->idx, 1011, "out of memory");
        replay_end(f, r);
        return;
    }
    /* The page script bounded the page in bytes already (one entry at
     * least), so all of it goes. */
    for (size_t i = 0; i < n; i++) {
        int mrc;
        ev->msgs[i] = msg_new(e[i].id, ch->idx, e[i].body, e[i].len, &mrc);
        if (ev->msgs[i] == NULL) {
            seam_ev_free(ev);
            post_close(f, r->thread, r->client, ch->idx, 1011, "out of memory");
            replay_end(f, r);
            return;
        }
        ev->nmsgs++;
    }
    f->st.replayed += ev->nmsgs;
    ev->client = r->client;
    ev->chan = ch->idx;
    ev->id = n > 0 ? e[n - 1].id : r->after;
    /* Done once the live cursor has not gone past what this page covers:
     * every live message the client ignored so far is <= the cursor, so
     * it was in the pages, and live messages <= id are skipped from now
     * on. Whether the page was full does not matter (a page may be short
     * for its bytes while more follow). */
    ev->flag = msg_id_cmp(ch->cursor, ev->id) <= 0;
    r->after = ev->id;
    bool done = ev->flag;
    ws_server_post(f->ws, r->thread, ev);
    if (done)
        replay_end(f, r);
}

static void replay_pump(struct fanout *f);

static void
on_page(void *ud, int rc, struct msg_id mark, const struct backlog_entry *e,
        size_t n)
{
    struct page_req *q = ud;
    struct fanout *f = q->f;
    page_handle(q, rc, mark, e, n);
    if (rc != RS_ECANCELED)
        replay_pump(f);   /* a slot is free */
}

/* Start queued page reads while slots are free. Called once per inbox
 * batch and after each read, never from inside an event handler, so that
 * a LEAVE in the same batch as its JOIN or MORE cancels the read first. */
static void
replay_pump(struct fanout *f)
{
    while (f->rq_head != NULL && f->st.replay_reading < f->o.replay_reads) {
        struct replay *r = f->rq_head;
        rq_unlink(f, r);
        struct page_req *q = rs_malloc(sizeof(*q));
        struct chan *ch = f->chans[r->chan];
        int rc = RS_ENOMEM;
        if (q != NULL) {
            q->f = f;
            q->r = r;
            rc = backlog_page_bytes(f->o.backlog, ch->name, r->after,
                                    f->o.page_size, f->o.page_bytes, on_page, q);
        }
        if (rc != 0) {
            rs_free(q);
            r->state = RP_DRAINING;
            post_close(f, r->thread, r->client, ch->idx,
                       rc == RS_ENOMEM ? 1011 : 4003,
                       rc == RS_ENOMEM ? "out of memory"
                                       : "backlog unavailable; retry later with since");
            replay_end(f, r);
            continue;
        }
        r->state = RP_READING;
        f->st.replay_reading++;
        f->st.replay_pages++;
        rs_metrics_counter_inc(f->m_pages);
    }
}

static void
addr_format(const struct seam_addr *a, char *buf, size_t len)
{
    ws_server_addr_format(a, buf, len);
}

/* ----------------------------------------------------------------- joins */

static void
join_process(struct fanout *f, struct chan *ch, struct join *j)
{
    struct replay *r = NULL;
    bool replay = j->has_since, as_now = false;
    if (replay) {
        r = replay_find(f, j->client);
        if (r == NULL)
            return;   /* it left before the channel was ready: no attach */
    }
    /* A since beyond the newest id this node has seen cannot be a position
     * a client was given (or is one a moment ahead of this node's tail):
     * read it as "now" rather than hold live messages back until the
     * clock passes it. The client gets everything after the cursor, which
     * includes all after since; what it already has it drops as repeats. */
    if (replay && msg_id_cmp(j->since, ch->cursor) > 0) {
        char a[MSG_ID_BUFSZ], b[MSG_ID_BUFSZ], who[64];
        msg_id_format(j->since, a);
        msg_id_format(ch->cursor, b);
        addr_format(&j->addr, who, sizeof(who));
        rs_log_kv(RS_LOG_INFO, "since is beyond the newest id: read as now",
                  "channel", ch->name, "since", a, "newest", b, "client", who,
                  NULL);
        f->st.since_future++;
        rs_metrics_counter_inc(f->m_future);
        replay_end(f, r);
        r = NULL;
        replay = false;
        as_now = true;
    }
    struct seam_ev *ev = seam_ev_new(SEAM_ATTACH);
    if (ev == NULL) {
        post_close(f, j->thread, j->client, ch->idx, 1011, "out of memory");
        if (r != NULL)
            replay_end(f, r);
        return;
    }
    ch->subs[j->thread]++;
    ch->total++;
    ch->idle_since = 0;
    ev->client = j->client;
    ev->chan = ch->idx;
    ev->flag = replay;
    ev->code = as_now ? SEAM_AS_NOW : 0;
    ev->id = replay ? j->since : ch->cursor;
    ws_server_post(f->ws, j->thread, ev);
    if (r != NULL) {
        r->chan = ch->idx;
        r->after = j->since;
        rq_push(f, r);   /* read by replay_pump at the end of the batch */
    }
}

static void
chan_fail_joins(struct fanout *f, struct chan *ch)
{
    struct join *j = ch->joins;
    ch->joins = NULL;
    while (j != NULL) {
        struct join *next = j->next;
        struct replay *r = j->has_since ? replay_find(f, j->client) : NULL;
        if (!j->has_since || r != NULL)
            post_close(f, j->thread, j->client, ch->idx, 4003,
                       "backlog unavailable; retry later");
        if (r != NULL)
            replay_end(f, r);
        rs_free(j);
        j = next;
    }
}

/* The channel's first cursor is known (and, with --ack-replicas,
 * confirmed): live from there. */
static void
chan_activated(struct fanout *f, struct chan *ch, int rc, struct msg_id cursor)
{
    if (rc != 0) {
        rs_log(RS_LOG_WARN, "cannot activate channel %s: %s", ch->name,
               rc == ACK_ESHORT ? "fewer replicas than --ack-replicas "
                                  "confirmed its newest id"
                                : rs_strerror(rc));
        ch->state = CH_IDLE;
        chan_fail_joins(f, ch);
        return;
    }
    ch->cursor = cursor;
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
    replay_pump(f);
}

static void
on_chan_confirmed(void *ud, int rc)
{
    struct info_req *q = ud;
    struct fanout *f = q->f;
    struct chan *ch = f->chans[q->chan];
    struct msg_id cursor = q->cursor;
    rs_free(q);
    if (rc != RS_ECANCELED)
        chan_activated(f, ch, rc, cursor);
}

static void
on_chan_info(void *ud, int rc, const struct backlog_info *info)
{
    struct info_req *q = ud;
    struct fanout *f = q->f;
    struct chan *ch = f->chans[q->chan];
    if (rc == RS_ECANCELED) {
        rs_free(q);
        return;
    }
    /* --ack-replicas: a replaying client gets pages up to the cursor, so
     * the cursor must be an id N replicas hold before anyone reads up to
     * it; a probe after this read confirms it. */
    if (rc == 0 && f->o.ack != NULL) {
        q->cursor = info->last_generated;
        rc = ack_barrier(f->o.ack, backlog_cmd_addr(f->o.backlog),
                         on_chan_confirmed, q);
        if (rc == 0)
            return;
    }
    rs_free(q);
    chan_activated(f, ch, rc, rc == 0 ? info->last_generated
                                      : (struct msg_id){ 0, 0 });
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
    if (f->refuse_code != 0) {
        post_close(f, ev->thread, ev->client, SEAM_NO_CHAN, f->refuse_code,
                   f->refuse_why);
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
    j->addr = ev->addr;
    if (j->has_since) {
        /* One replay slot of its address from now until it is live or
         * gone; an address over its cap is told to come back later. */
        struct replay *r = NULL;
        int rc = ws_server_replay_begin(f->ws, &ev->addr);
        if (rc == 0) {
            r = rs_calloc(1, sizeof(*r));
            if (r != NULL) {
                r->client = ev->client;
                r->thread = ev->thread;
                r->chan = SEAM_NO_CHAN;
                r->addr = ev->addr;
                r->state = RP_JOINING;
            }
            if (r == NULL || replay_index(f, r) != 0) {
                rs_free(r);
                r = NULL;
                ws_server_replay_end(f->ws, &ev->addr);
            }
        }
        if (r == NULL) {
            rs_free(j);
            if (rc != 0) {
                f->st.replay_refused++;
                rs_metrics_counter_inc(f->m_refused);
            }
            post_close(f, ev->thread, ev->client, SEAM_NO_CHAN, 1013,
                       rc != 0 ? "too many replays from this address; retry later"
                               : "out of memory");
            return;
        }
    }
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
    struct replay *r = replay_find(f, ev->client);
    if (r != NULL) {
        /* Nothing more is read for it; a read in flight is let finish and
         * thrown away (Redis cannot cancel one command). */
        if (r->state != RP_READING) {
            f->st.replay_cancelled++;
            rs_metrics_counter_inc(f->m_cancelled);
        }
        replay_end(f, r);
    }
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
    struct replay *r = replay_find(f, ev->client);
    if (r == NULL || r->state != RP_DRAINING)
        return;
    r->after = ev->id;
    rq_push(f, r);
}

/* A thread's live queue is back under half its mark (ws_server_post said
 * pause earlier, once per DRAINED): the tail reads again when none holds. */
static void
on_drained(struct fanout *f)
{
    if (f->tail_holds > 0 && --f->tail_holds == 0)
        fanout_tail(f);
}

static void
on_inbox(void *ud, struct seam_ev *ev)
{
    struct fanout *f = ud;
    while (ev != NULL) {
        struct seam_ev *next = seam_ev_next(ev);
        switch (ev->type) {
        case SEAM_JOIN: on_join(f, ev); break;
        case SEAM_LEAVE: on_leave(f, ev); break;
        case SEAM_MORE: on_more(f, ev); break;
        case SEAM_DRAINED: on_drained(f); break;
        default: break;
        }
        seam_ev_free(ev);
        ev = next;
    }
    replay_pump(f);
}

/* ------------------------------------------------------------------ tail */

static void
held_clear(struct fanout *f)
{
    for (size_t i = 0; i < f->nheld; i++)
        rs_free(f->held_blk[i]);   /* body and ctype: one block */
    f->nheld = 0;
    f->nsegs = 0;
    f->held_bad = false;
}

/* Copy one stream's part of a tail batch into the held batch. */
static void
held_add(struct fanout *f, struct chan *ch, const struct backlog_entry *e,
         size_t n)
{
    if (f->held_bad)
        return;
    if (f->nsegs == f->segcap) {
        size_t ncap = f->segcap ? f->segcap * 2 : 16;
        struct held_seg *ns = rs_realloc(f->segs, ncap * sizeof(*ns));
        if (ns == NULL)
            goto bad;
        f->segs = ns;
        f->segcap = ncap;
    }
    if (f->nheld + n > f->heldcap) {
        size_t ncap = f->heldcap ? f->heldcap : 64;
        while (ncap < f->nheld + n)
            ncap *= 2;
        struct backlog_entry *nh = rs_realloc(f->held, ncap * sizeof(*nh));
        if (nh == NULL)
            goto bad;
        f->held = nh;
        char **nb = rs_realloc(f->held_blk, ncap * sizeof(*nb));
        if (nb == NULL)
            goto bad;
        f->held_blk = nb;
        f->heldcap = ncap;
    }
    f->segs[f->nsegs].chan = ch->idx;
    f->segs[f->nsegs].off = f->nheld;
    f->segs[f->nsegs].n = n;
    f->nsegs++;
    for (size_t i = 0; i < n; i++) {
        char *blk = rs_malloc(e[i].len + e[i].ctype_len + 2);
        if (blk == NULL)
            goto bad;
        memcpy(blk, e[i].body, e[i].len);
        blk[e[i].len] = '\0';
        memcpy(blk + e[i].len + 1, e[i].ctype, e[i].ctype_len);
        blk[e[i].len + 1 + e[i].ctype_len] = '\0';
        f->held_blk[f->nheld] = blk;
        struct backlog_entry *h = &f->held[f->nheld++];
        h->id = e[i].id;
        h->body = blk;
        h->len = e[i].len;
        h->ctype = blk + e[i].len + 1;
        h->ctype_len = e[i].ctype_len;
    }
    return;
bad:
    f->held_bad = true;   /* the whole batch is read again */
}

static void dispatch(struct fanout *f, struct chan *ch,
                     const struct backlog_entry *e);

/* The held batch's barrier answered: all of it goes out, in stream order
 * per channel, or none of it (the cursors did not move, so the next read
 * returns it again; the timer restarts the tail, so an outage costs one
 * read a second, not a loop). */
static void
on_held_confirmed(void *ud, int rc)
{
    struct fanout *f = ud;
    f->ack_inflight = false;
    if (rc == RS_ECANCELED)
        return;   /* fanout_free clears the batch */
    if (rc != 0) {
        f->st.ack_dropped++;
        rs_log(RS_LOG_DEBUG, "tail batch of %zu entries not confirmed on "
               "--ack-replicas replicas (%s): held back, read again",
               f->nheld, rc == ACK_ESHORT ? "too few replicas"
                         : rc == ACK_EMOVED ? "the primary changed"
                                            : rs_strerror(rc));
        held_clear(f);
        return;
    }
    f->st.ack_released++;
    for (size_t s = 0; s < f->nsegs; s++) {
        struct chan *ch = f->chans[f->segs[s].chan];
        const struct backlog_entry *e = f->held + f->segs[s].off;
        size_t n = f->segs[s].n;
        for (size_t i = 0; i < n; i++)
            dispatch(f, ch, &e[i]);
        if (f->on_entries != NULL)
            f->on_entries(f->entries_ud, ch->name, e, n);
    }
    held_clear(f);
    fanout_tail(f);
}

/* The read (and its trim check) is over: hold its batch for the barrier,
 * or read on. */
static void
tail_next(struct fanout *f)
{
    if (f->nheld == 0 && !f->held_bad) {
        fanout_tail(f);
        return;
    }
    if (f->held_bad) {
        rs_log(RS_LOG_WARN, "out of memory holding a tail batch: read again");
        f->st.ack_dropped++;
        held_clear(f);
        return;   /* the timer restarts the tail */
    }
    int rc = ack_barrier(f->o.ack, f->held_addr, on_held_confirmed, f);
    if (rc == 0) {
        f->ack_inflight = true;
        return;
    }
    f->st.ack_dropped++;
    held_clear(f);   /* the ack link is down: the timer reads again */
}

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
        if (ws_server_post(f->ws, t, ev) == WS_POST_PAUSE) {
            /* this batch goes out whole; the next read waits */
            f->tail_holds++;
            f->st.tail_pauses++;
        }
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
    tail_next(f);
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
        if (f->o.ack != NULL) {
            held_add(f, ch, e, n);
            return;
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
        if (f->nheld > 0 || f->held_bad)
            f->st.ack_dropped++;
        held_clear(f);   /* what the lost link read goes unconfirmed */
        return;   /* the link is down; fanout_kick or the timer restarts */
    }
    if (f->nheld > 0)
        snprintf(f->held_addr, sizeof(f->held_addr), "%s",
                 backlog_tail_addr(f->o.backlog));
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
    tail_next(f);
}

static void
fanout_tail(struct fanout *f)
{
    if (f->tail_inflight || f->marks_inflight || f->ack_inflight ||
        f->ws == NULL || f->tail_holds > 0)
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

bool
fanout_confirmed(const struct fanout *f, const char *name, struct msg_id *out)
{
    const struct chan *ch = chan_find(f, name);
    if (ch == NULL || ch->state != CH_ACTIVE)
        return false;
    *out = ch->cursor;
    return true;
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

static double
gauge_queued(void *ud)
{
    return (double)((struct fanout *)ud)->st.replay_queued;
}

static double
gauge_reading(void *ud)
{
    return (double)((struct fanout *)ud)->st.replay_reading;
}

static double
gauge_replays(void *ud)
{
    return (double)((struct fanout *)ud)->st.replays;
}

/* Its own series: counted where they happen (main loop), rendered by the
 * status page. */
static int
fanout_metrics(struct fanout *f, struct rs_metrics *m)
{
    int rc = rs_metrics_register_counter(m, &f->m_pages, "rshub_replay_pages_total",
                                         "Replay pages read from Redis.", NULL);
    if (rc == 0)
        rc = rs_metrics_register_counter(
            m, &f->m_cancelled, "rshub_replay_cancelled_total",
            "Replays ended by the client leaving before their last page "
            "(reads not made, or thrown away).", NULL);
    if (rc == 0)
        rc = rs_metrics_register_counter(
            m, &f->m_refused, "rshub_ws_replays_refused_total",
            "Replays refused with close 1013: the client's address had "
            "--ws-replays-per-addr replays going.", NULL);
    if (rc == 0)
        rc = rs_metrics_register_counter(
            m, &f->m_future, "rshub_ws_since_future_total",
            "Clients whose since was beyond the newest id: attached as now.",
            NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(
            m, "rshub_replay_queued",
            "Replay page reads waiting for a slot (--replay-concurrency).",
            gauge_queued, f, NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(m, "rshub_replay_reading",
                                          "Replay page reads in flight.",
                                          gauge_reading, f, NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(m, "rshub_replays",
                                          "Clients replaying the backlog.",
                                          gauge_replays, f, NULL);
    return rc;
}

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
    if (f->o.replay_reads == 0)
        f->o.replay_reads = 4;
    if (o->metrics != NULL && fanout_metrics(f, o->metrics) != 0) {
        *err = "cannot register the fan-out metrics";
        rs_free(f);
        return NULL;
    }
    f->inbox.cb = on_inbox;
    f->inbox.ud = f;
    f->ev_timer = event_new(o->base, -1, EV_PERSIST, on_timer, f);
    struct timeval one = { 1, 0 };
    if (f->ev_timer == NULL || event_add(f->ev_timer, &one) != 0) {
        fanout_free(f);
        return NULL;
    }
    *err = NULL;
    return f;
}

const struct seam_sink *
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
    out->tail_holds = f->tail_holds;
    out->ack_holds = f->ack_inflight ? 1 : 0;
}

void
fanout_free(struct fanout *f)
{
    if (f == NULL)
        return;
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
    rs_strmap_clear(&f->by_name);
    /* Reads in flight were cancelled by backlog_free (called first),
     * whose callbacks freed their records; what is left is indexed. */
    for (size_t i = 0; i < f->rmap_cap; i++) {
        struct replay *r = f->rmap[i];
        while (r != NULL) {
            struct replay *next = r->hnext;
            rs_free(r);
            r = next;
        }
    }
    rs_free(f->rmap);
    held_clear(f);
    rs_free(f->held);
    rs_free(f->held_blk);
    rs_free(f->segs);
    rs_free(f->batch);
    rs_free(f->tail_names);
    rs_free(f->tail_after);
    rs_free(f);
}
