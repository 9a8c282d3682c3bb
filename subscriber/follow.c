/*
 * follow.c - one struct chan per channel (change, framework), each with
 * its WebSocket URIs, its position (the last hub id taken, in the
 * ledger) and its reconnect timer. Messages are parsed whole (one
 * notification is one document), checked against the position, and
 * offered; the position moves in the same batch.
 *
 * A channel is a small state machine, changed only by chan_set:
 *
 *   OFF --start/uris--> CONNECTING --open--> JOINING --a message, or
 *       FOLLOW_SETTLE_MS without a close--> OPEN
 *   CONNECTING/JOINING/OPEN --close 1001, 4002, 4003, 1013, network--> BACKOFF
 *   CONNECTING/JOINING/OPEN --close 4004--> BACKOFF (longer)
 *   CONNECTING/JOINING/OPEN --upgrade 401/403, close 4008--> BACKOFF
 *       (slow: our credential, which a retry sends again unchanged)
 *   CONNECTING/JOINING/OPEN --close 4001, 4005--> GAP --follow_resume-->
 *       CONNECTING
 *   BACKOFF --timer--> CONNECTING
 *   any --no URIs--> OFF
 *
 * How a connection replays is its own field: from the id held, from a
 * time mark, or live (then the seam needs a pull once it is open).
 *
 * A refusal of our credential (the hub answers the upgrade 401 or 403, or
 * closes with 4008 when a reload or the token's expiry withdrew it) is
 * told to the caller once per spell, which ends when the channel opens or
 * its URIs change: retrying cannot help until the hub's configuration
 * does, so the retries are slow and quiet (polling stands in, past
 * --push-timeout).
 *
 * JOINING: rshub accepts the upgrade, then refuses the channel with a
 * close (4001, 4003, 4004, 4005, 1013) a few milliseconds later. Such a
 * connection was never up: the backoff keeps growing and down_since_us keeps
 * the first failure (so --push-timeout can hand over to polling).
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RS_LOG_MODULE "follow"
#include "apply.h"
#include "discovery.h"
#include "follow.h"
#include "ledger.h"
#include "rs_alloc.h"
#include "rs_log.h"
#include "rs_parse.h"
#include "rs_time.h"
#include "rs_url.h"
#include "rs_wsclose.h"
#include "wsclient.h"

#define FOLLOW_BACKOFF_MIN_MS 100
#define FOLLOW_BACKOFF_MAX_MS 30000
#define FOLLOW_UNKNOWN_MIN_MS 1000   /* 4004: the hub may learn it soon */
#define FOLLOW_UNKNOWN_MAX_MS 60000
#define FOLLOW_REFUSED_MIN_MS 5000   /* 401, 403, 4008: our credential */
#define FOLLOW_REFUSED_MAX_MS 300000
#define FOLLOW_SETTLE_MS 2000        /* open this long without a close, or
                                        a message: the hub serves it */

enum chan_state { CH_OFF, CH_CONNECTING, CH_JOINING, CH_OPEN, CH_BACKOFF,
                  CH_GAP };

static const char *const chan_state_names[] = {
    "off", "connecting", "joining", "open", "backoff", "gap"
};

/* Where the next connection replays from. */
enum chan_replay {
    REPLAY_ID,        /* since= the id held (none: from the mark) */
    REPLAY_MARK,      /* since= a time mark, after a gap */
    REPLAY_LIVE,      /* no since: even the mark was older than the
                         backlog; the caller pulls once it is open */
};

struct chan {
    struct follow *f;
    int kind;                        /* DISCOVERY_CHANGE, _FRAMEWORK */
    enum chan_state state;
    enum chan_replay replay;
    char **uris;
    size_t nuris, cur;
    char *poskey;
    char *last_id;                   /* NULL: none yet */
    rs_time_t mark;                  /* replay from here when no id */
    struct wsclient_conn *conn;      /* CONNECTING, JOINING, OPEN */
    struct event *ev_retry;          /* BACKOFF */
    struct event *ev_settle;         /* JOINING */
    unsigned backoff_ms;
    unsigned gap_resumes;            /* resumes since a message came */
    bool refused;                    /* a refusal (401, 403, 4008) was told
                                        in this spell */
};

struct follow {
    struct follow_opts o;
    struct chan ch[2];
    char *source_key;                /* KEY FOLLOW_POS_SOURCE */
    rs_time_t source_dt;             /* its datetime */
    struct follow_stats st;
};

static void
chan_set(struct chan *c, enum chan_state to, const char *why)
{
    struct follow *f = c->f;

    if (c->state == to)
        return;
    if (rs_log_enabled(RS_LOG_DEBUG))
        rs_log_kv(RS_LOG_DEBUG, "channel", "kind",
                  c->kind == DISCOVERY_CHANGE ? "change" : "framework",
                  "from", chan_state_names[c->state], "to",
                  chan_state_names[to], "why", why, NULL);
    c->state = to;
    f->st.connected[c->kind] = to == CH_OPEN;
    if (c->kind != DISCOVERY_CHANGE)
        return;
    /* down_since_us: when the change channel last stopped being open
     * while followed (0: open, or not followed) */
    if (to == CH_OPEN || to == CH_OFF)
        f->st.down_since_us = 0;
    else if (f->st.down_since_us == 0)
        f->st.down_since_us = rs_time_mono_us();
}

int
follow_id_cmp(const char *a, const char *b)
{
    unsigned long long am, as = 0, bm, bs = 0;
    char *e;

    am = strtoull(a, &e, 10);
    if (*e == '-')
        as = strtoull(e + 1, NULL, 10);
    bm = strtoull(b, &e, 10);
    if (*e == '-')
        bs = strtoull(e + 1, NULL, 10);
    if (am != bm)
        return am < bm ? -1 : 1;
    return as < bs ? -1 : as > bs;
}

/* ------------------------------------------------------------ messages */

/* Queue the changes of one notification document. c: the WebSocket channel
 * it came on (its hub id is checked and becomes the position), or NULL
 * (WebSub: no position, no mark moved). */
static int
take_doc(struct follow *f, struct chan *c, const char *buf, size_t len,
         const char *origin)
{
    struct rs_parse_opts po = { 0 };
    struct rs_doc *doc = NULL;
    struct rs_diag diag;
    enum rs_capability cap;
    rs_time_t newest = RS_TIME_NONE;
    const char *id;
    int rc;

    if (rs_doc_parse(buf, len, &po, &doc, &diag) != 0) {
        f->st.invalid++;
        return RS_EINVALID;
    }
    cap = doc->head.md.capability;
    if (!rs_capability_is_notification(cap)) {
        f->st.invalid++;
        rs_doc_free(doc);
        return RS_EINVALID;
    }
    id = doc->head.hub_id;
    if (c != NULL && id != NULL && c->last_id != NULL &&
        follow_id_cmp(id, c->last_id) <= 0) {
        f->st.duplicates++;
        rs_doc_free(doc);
        return 0;
    }
    f->st.last_message = rs_time_now();
    if ((rc = apply_txn(f->o.apply)) != 0) {
        rs_doc_free(doc);
        return rc;
    }
    for (size_t i = 0; i < doc->nentries; i++) {
        const struct rs_entry *e = &doc->entries[i];
        struct ledger_todo t;
        char hbuf[RS_HASHES_BUFSZ];

        if (!rs_url_is_http(e->loc)) {
            f->st.invalid++;
            continue;
        }
        if (cap == RS_CAP_FRAMEWORK_NOTIFICATION) {
            if (f->o.on_framework != NULL && e->has_md)
                f->o.on_framework(f->o.ud, e->md.capability, e->md.change,
                                  e->loc);
            continue;
        }
        bool future = apply_todo_from_entry(e, e->loc, origin, &t, hbuf);
        if (future)
            f->st.future++;
        if (future && (f->st.future & (f->st.future - 1)) == 0) {
            /* the 1st, 2nd, 4th...: a flood of them is not a flood of
             * lines */
            char dt[RS_TIME_BUFSZ], n[24];
            rs_time_format(e->md.datetime != RS_TIME_NONE ? e->md.datetime
                                                          : e->lastmod, dt);
            snprintf(n, sizeof(n), "%llu", (unsigned long long)f->st.future);
            rs_log_kv(RS_LOG_WARN, "a change dated in the future: taken as "
                      "of now (the Source's clock, or a publisher, is "
                      "wrong)", "loc", e->loc, "datetime", dt, "origin",
                      origin, "count", n, NULL);
        }
        if (t.change_dt != RS_TIME_NONE && t.change_dt > newest)
            newest = t.change_dt;
        if ((rc = apply_offer(f->o.apply, &t)) < 0) {
            rs_doc_free(doc);
            return rc;
        }
    }
    if (cap == RS_CAP_FRAMEWORK_NOTIFICATION)
        f->st.framework++;
    else
        f->st.notifications++;
    rc = 0;
    if (c != NULL && id != NULL) {
        char *nid = rs_strdup(id);
        if (nid == NULL) {
            rs_doc_free(doc);
            return RS_ENOMEM;
        }
        rs_free(c->last_id);
        c->last_id = nid;
        c->gap_resumes = 0;
        rc = ledger_pos_set(f->o.ledger, c->poskey, nid, newest);
    }
    /* Only a channel that reports its gaps (WebSocket: 4001) may move the
     * "everything up to here" mark: a WebSub delivery can follow one the
     * hub dropped, and the next Change List pull must still reach back to
     * it. */
    if (rc == 0 && c != NULL && newest != RS_TIME_NONE &&
        (f->source_dt == RS_TIME_NONE || newest > f->source_dt)) {
        f->source_dt = newest;
        rc = ledger_pos_set(f->o.ledger, f->source_key, NULL, newest);
    }
    rs_doc_free(doc);
    apply_kick(f->o.apply);
    return rc;
}

int
follow_take(struct follow *f, const char *body, size_t len, const char *origin)
{
    return take_doc(f, NULL, body, len, origin);
}

/* --------------------------------------------------------- connections */

static void chan_connect(struct chan *c);

static void
chan_backoff(struct chan *c, unsigned ms, const char *why)
{
    struct timeval tv = rs_time_tv_ms(ms);

    chan_set(c, CH_BACKOFF, why);
    evtimer_add(c->ev_retry, &tv);
}

/* JOINING -> OPEN: the hub serves the channel. */
static void
chan_open(struct chan *c)
{
    bool seam = c->replay == REPLAY_LIVE;

    if (c->state != CH_JOINING)
        return;
    evtimer_del(c->ev_settle);
    c->backoff_ms = FOLLOW_BACKOFF_MIN_MS;
    c->replay = REPLAY_ID;
    c->refused = false;
    chan_set(c, CH_OPEN, "connected");
    if (c->f->o.on_channel != NULL)
        c->f->o.on_channel(c->f->o.ud, c->uris[c->cur],
                           wsclient_conn_peer(c->conn), true, 0, "");
    /* Live from here; what came before the connection opened comes from
     * the pull this asks for. */
    if (seam && c->f->o.on_live != NULL)
        c->f->o.on_live(c->f->o.ud);
}

static void
on_settle(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    chan_open(arg);
}

static void
on_ws_open(void *ud, struct wsclient_conn *conn)
{
    struct chan *c = ud;
    struct timeval tv = rs_time_tv_ms(FOLLOW_SETTLE_MS);

    /* Resumed from an id the hub gave us, which it no longer holds (its
     * Redis lost the backlog; a node behind the others): it attached us
     * live, and what came between cannot be told. A pull covers it, as
     * after a resume from a mark too old (chan_open's seam). A time mark
     * beyond the newest is a topic with nothing yet: no pull. */
    if (c->replay == REPLAY_ID && c->last_id != NULL &&
        wsclient_conn_since_now(conn))
        c->replay = REPLAY_LIVE;
    chan_set(c, CH_JOINING, "upgraded");
    evtimer_add(c->ev_settle, &tv);
}

static void
on_ws_message(void *ud, struct wsclient_conn *conn, const char *buf,
              size_t len)
{
    struct chan *c = ud;

    (void)conn;
    chan_open(c);
    (void)take_doc(c->f, c, buf, len, "push");
}

static bool
is_refusal(int code)
{
    return code == WSCLIENT_UNAUTHORIZED || code == WSCLIENT_FORBIDDEN ||
           code == RS_WSCLOSE_REVOKED;
}

static void
on_ws_close(void *ud, struct wsclient_conn *conn, int code, const char *reason)
{
    struct chan *c = ud;
    struct follow *f = c->f;
    unsigned max = f->o.reconnect_max_ms ? f->o.reconnect_max_ms
                                         : FOLLOW_BACKOFF_MAX_MS;
    char why[300];

    c->conn = NULL;
    evtimer_del(c->ev_settle);
    if (code == WSCLIENT_CANCELLED) {  /* wsclient_free: we are stopping */
        chan_set(c, CH_OFF, "stopping");
        return;
    }
    /* refused again (4008, then 403 at the retry), nothing opened
     * between: quiet */
    if (f->o.on_channel != NULL && !(is_refusal(code) && c->refused))
        f->o.on_channel(f->o.ud, c->uris[c->cur], wsclient_conn_peer(conn),
                        false, code, reason);
    snprintf(why, sizeof(why), "%s closed %d: %s", c->uris[c->cur], code,
             reason);
    if (is_refusal(code)) {
        /* Another node may already hold a reloaded configuration. */
        c->refused = true;
        c->cur = (c->cur + 1) % c->nuris;
        if (c->backoff_ms < FOLLOW_REFUSED_MIN_MS)
            c->backoff_ms = FOLLOW_REFUSED_MIN_MS;
        chan_backoff(c, c->backoff_ms, why);
        c->backoff_ms = c->backoff_ms * 2 > FOLLOW_REFUSED_MAX_MS
                        ? FOLLOW_REFUSED_MAX_MS : c->backoff_ms * 2;
        return;
    }
    switch (code) {
    case RS_WSCLOSE_GAP:               /* our position is gone */
    case RS_WSCLOSE_BAD_SINCE:         /* the hub refuses it: start over */
        f->st.gaps++;
        chan_set(c, CH_GAP, why);
        if (f->o.on_gap != NULL)
            f->o.on_gap(f->o.ud, why);
        return;                        /* follow_resume reconnects */
    case RS_WSCLOSE_UNKNOWN_CHANNEL:
        /* The hub does not know the channel yet (an open-mode hub learns
         * a topic at its first publish): look again soon, then less
         * often. */
        if (c->backoff_ms < FOLLOW_UNKNOWN_MIN_MS)
            c->backoff_ms = FOLLOW_UNKNOWN_MIN_MS;
        chan_backoff(c, c->backoff_ms, why);
        c->backoff_ms = c->backoff_ms * 2 > FOLLOW_UNKNOWN_MAX_MS
                        ? FOLLOW_UNKNOWN_MAX_MS : c->backoff_ms * 2;
        return;
    default:
        /* Hub restart (1001), slow consumer (4002), Redis down (4003),
         * full (1013), network: another node, after a pause. */
        c->cur = (c->cur + 1) % c->nuris;
        chan_backoff(c, c->backoff_ms, why);
        c->backoff_ms = c->backoff_ms * 2 > max ? max : c->backoff_ms * 2;
        return;
    }
}

static void
chan_connect(struct chan *c)
{
    static const struct wsclient_cbs cbs = { on_ws_open, on_ws_message,
                                             on_ws_close };
    const char *uri;
    char url[4096], since[64] = "";

    if (c->conn != NULL || c->f->o.ws == NULL || c->nuris == 0)
        return;
    uri = c->uris[c->cur];
    if (c->replay == REPLAY_ID && c->last_id != NULL)
        snprintf(since, sizeof(since), "since=%s", c->last_id);
    else if (c->replay != REPLAY_LIVE && c->mark != RS_TIME_NONE)
        snprintf(since, sizeof(since), "since=%lld-0",
                 (long long)(c->mark / 1000));
    snprintf(url, sizeof(url), "%s%s%s", uri,
             since[0] == '\0' ? "" : strchr(uri, '?') ? "&" : "?", since);
    c->f->st.reconnects++;
    if (wsclient_connect(c->f->o.ws, url, &cbs, c, &c->conn) != 0) {
        c->conn = NULL;
        chan_backoff(c, c->backoff_ms, "cannot start a connection");
        return;
    }
    chan_set(c, CH_CONNECTING, uri);
}

static void
on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    chan_connect(arg);
}

static void
chan_free_uris(struct chan *c)
{
    for (size_t i = 0; i < c->nuris; i++)
        rs_free(c->uris[i]);
    rs_free(c->uris);
    c->uris = NULL;
    c->nuris = c->cur = 0;
}

/* Replace the channel's URIs with a copy of uris (NULL-ended, may be NULL
 * or empty). On RS_ENOMEM the channel has none. */
static int
chan_set_uris(struct chan *c, const char *const *uris)
{
    size_t n = 0;

    chan_free_uris(c);
    while (uris != NULL && uris[n] != NULL)
        n++;
    if (n == 0)
        return 0;
    if ((c->uris = rs_calloc(n, sizeof(*c->uris))) == NULL)
        return RS_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if ((c->uris[i] = rs_strdup(uris[i])) == NULL) {
            c->nuris = i;
            chan_free_uris(c);
            return RS_ENOMEM;
        }
    }
    c->nuris = n;
    return 0;
}

static bool
chan_same_uris(const struct chan *c, const char *const *uris)
{
    size_t n = 0;

    for (; uris != NULL && uris[n] != NULL; n++)
        if (n >= c->nuris || strcmp(c->uris[n], uris[n]) != 0)
            return false;
    return n == c->nuris;
}

static int
chan_init(struct follow *f, struct chan *c, int kind, const char *const *uris,
          const char *key_base)
{
    char key[2048];

    c->f = f;
    c->kind = kind;
    c->mark = RS_TIME_NONE;
    c->backoff_ms = FOLLOW_BACKOFF_MIN_MS;
    if (chan_set_uris(c, uris) != 0)
        return RS_ENOMEM;
    snprintf(key, sizeof(key), "%s#%s", key_base,
             kind == DISCOVERY_CHANGE ? "change" : "framework");
    if ((c->poskey = rs_strdup(key)) == NULL)
        return RS_ENOMEM;
    if ((c->ev_retry = evtimer_new(f->o.base, on_retry, c)) == NULL ||
        (c->ev_settle = evtimer_new(f->o.base, on_settle, c)) == NULL)
        return RS_ENOMEM;
    return 0;
}

static void
chan_clear(struct chan *c)
{
    if (c->conn != NULL)
        wsclient_conn_close(c->conn);
    if (c->ev_retry != NULL)
        event_free(c->ev_retry);
    if (c->ev_settle != NULL)
        event_free(c->ev_settle);
    chan_free_uris(c);
    rs_free(c->poskey);
    rs_free(c->last_id);
}

/* ---------------------------------------------------------------- API */

struct follow *
follow_new(const struct follow_opts *o, char *err, size_t errsz)
{
    struct follow *f = rs_calloc(1, sizeof(*f));
    char *id = NULL;
    int rc;

    if (f == NULL) {
        snprintf(err, errsz, "out of memory");
        return NULL;
    }
    f->o = *o;
    f->o.key = NULL;                  /* copied into each channel's key */
    f->o.change_ws = f->o.framework_ws = NULL;
    f->source_dt = RS_TIME_NONE;
    f->st.down_since_us = 0;
    rc = chan_init(f, &f->ch[DISCOVERY_CHANGE], DISCOVERY_CHANGE,
                   o->change_ws, o->key);
    if (rc == 0)
        rc = chan_init(f, &f->ch[DISCOVERY_FRAMEWORK], DISCOVERY_FRAMEWORK,
                       o->framework_ws, o->key);
    if (rc == 0) {
        size_t n = strlen(o->key) + sizeof(FOLLOW_POS_SOURCE);
        if ((f->source_key = rs_malloc(n)) == NULL)
            rc = RS_ENOMEM;
        else
            snprintf(f->source_key, n, "%s%s", o->key, FOLLOW_POS_SOURCE);
    }
    if (rc != 0) {
        snprintf(err, errsz, "out of memory");
        follow_free(f);
        return NULL;
    }
    rc = ledger_pos_get(o->ledger, f->source_key, &id, &f->source_dt);
    rs_free(id);
    if (rc != 0 && rc != RS_ENOTFOUND) {
        snprintf(err, errsz, "state: %s", ledger_errstr(o->ledger));
        follow_free(f);
        return NULL;
    }
    return f;
}

void
follow_free(struct follow *f)
{
    if (f == NULL)
        return;
    chan_clear(&f->ch[0]);
    chan_clear(&f->ch[1]);
    rs_free(f->source_key);
    rs_free(f);
}

void
follow_start(struct follow *f, rs_time_t mark)
{
    for (int k = 0; k < 2; k++) {
        struct chan *c = &f->ch[k];
        rs_time_t dt;
        char *id = NULL;

        if (c->nuris == 0)
            continue;
        if (ledger_pos_get(f->o.ledger, c->poskey, &id, &dt) == 0 &&
            id != NULL) {
            rs_free(c->last_id);
            c->last_id = id;
        } else {
            rs_free(id);
        }
        c->mark = mark;
        c->replay = REPLAY_ID;
        chan_connect(c);
    }
}

void
follow_resume(struct follow *f, rs_time_t mark)
{
    for (int k = 0; k < 2; k++) {
        struct chan *c = &f->ch[k];

        if (c->state != CH_GAP)
            continue;
        rs_free(c->last_id);
        c->last_id = NULL;
        /* Replay from the mark the first time; if even that is older than
         * the backlog (a hub keeping very little), go live and pull once
         * the connection is open: no moment is left uncovered. */
        if (c->gap_resumes++ == 0) {
            c->mark = mark;
            c->replay = REPLAY_MARK;
        } else {
            c->mark = RS_TIME_NONE;
            c->replay = REPLAY_LIVE;
        }
        chan_connect(c);
    }
}

void
follow_rewind(struct follow *f, unsigned wait_ms)
{
    char *id = NULL;
    rs_time_t dt = RS_TIME_NONE;
    int rc = ledger_pos_get(f->o.ledger, f->source_key, &id, &dt);

    rs_free(id);
    if (rc == 0 || rc == RS_ENOTFOUND)
        f->source_dt = rc == 0 ? dt : RS_TIME_NONE;
    for (int k = 0; k < 2; k++) {
        struct chan *c = &f->ch[k];

        /* GAP: follow_resume replays it from a mark */
        if (c->nuris == 0 || c->state == CH_OFF || c->state == CH_GAP)
            continue;
        id = NULL;
        rc = ledger_pos_get(f->o.ledger, c->poskey, &id, &dt);
        if (rc != 0 && rc != RS_ENOTFOUND) {
            rs_free(id);
            continue;     /* cannot read it either: the caller's pull */
        }
        if (id != NULL && c->last_id != NULL && strcmp(id, c->last_id) == 0) {
            rs_free(id);
            continue;     /* nothing of this channel was lost */
        }
        rs_free(c->last_id);
        c->last_id = id;  /* NULL: from the mark it started from */
        c->replay = REPLAY_ID;
        if (c->conn != NULL) {
            wsclient_conn_close(c->conn);     /* no callback from it after */
            c->conn = NULL;
        }
        evtimer_del(c->ev_settle);
        evtimer_del(c->ev_retry);
        chan_backoff(c, wait_ms, "the state could not be saved: replaying "
                     "from the position saved");
    }
}

int
follow_set_uris(struct follow *f, int kind, const char *const *uris,
                rs_time_t mark)
{
    struct chan *c = &f->ch[kind];
    int rc = 0;

    if (chan_same_uris(c, uris))
        return 0;
    if (c->conn != NULL) {
        wsclient_conn_close(c->conn);     /* no callback from it after */
        c->conn = NULL;
    }
    evtimer_del(c->ev_retry);
    evtimer_del(c->ev_settle);
    chan_set(c, CH_OFF, "its URIs changed");
    c->gap_resumes = 0;
    c->refused = false;
    c->backoff_ms = FOLLOW_BACKOFF_MIN_MS;
    /* The id taken belongs to the stream of the channel left behind; the
     * new one replays from a time (hub ids are times, docs/protocol.md
     * 2), which the caller's pulls cover up to. */
    rs_free(c->last_id);
    c->last_id = NULL;
    c->mark = mark;
    c->replay = REPLAY_MARK;
    if ((rc = apply_txn(f->o.apply)) == 0)
        rc = ledger_pos_set(f->o.ledger, c->poskey, NULL, RS_TIME_NONE);
    if (chan_set_uris(c, uris) != 0 && rc == 0)
        rc = RS_ENOMEM;
    chan_connect(c);
    return rc;
}

void
follow_stats(const struct follow *f, struct follow_stats *out)
{
    *out = f->st;
}
