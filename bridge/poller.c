/*
 * poller.c - one Source's poller (see poller.h). The state machine, one
 * setter (poll_set) logging from -> to:
 *
 *   idle --start--> discovering --Capability Lists found--> changes
 *   changes | resources --each feed walked and committed--> ...
 *   resources --a walk that may have missed resources--> checking --> ...
 *   ... --the feeds done--> capabilities (when due) --> waiting
 *   waiting --interval (longer while idle)--> changes | resources
 *   any --a failure--> backoff --backoff, Retry-After--> discovering |
 *                                                         changes
 *   any --drain--> stopped
 *
 * The Source Description and Capability Lists are read at the end of a
 * poll, not at its start: in the first poll discovery has just read them,
 * and a poll reads no document twice.
 *
 * A poll is a sequence of steps, each one request (one in flight per
 * Source) or a walk of requests; each step function issues its request,
 * or arms the timer when politeness asks it to wait, and the answer's
 * callback moves to the next step.
 */
#include "poller.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RS_LOG_MODULE "poller"
#include "clscan.h"
#include "discovery.h"
#include "reader.h"
#include "rldiff.h"
#include "rs_alloc.h"
#include "rs_backoff.h"
#include "rs_channels.h"
#include "rs_fnv.h"
#include "rs_log.h"
#include "rs_metrics.h"
#include "rs_parse.h"
#include "rs_time.h"
#include "rs_url.h"
#include "store.h"
#include "walk.h"

#define POLLER_MAX_CAPS 64            /* Capability Lists of one Source */
#define POLLER_MAX_JOBS (2 * POLLER_MAX_CAPS)
#define POLLER_CAPS_EVERY_MS 60000    /* SD and Capability Lists read again */
#define POLLER_RL_FW_MIN_MS 60000     /* one "resourcelist created" a minute */
#define POLLER_BACKOFF_MAX_MS 60000
#define POLLER_RETRY_AFTER_MAX_MS (86400LL * 1000)
#define POLLER_HUB_WAIT_MS 2000       /* ready without the hub's channels */
#define POLLER_REQLOG_MAX (1u << 20)  /* documents remembered (politeness) */
#define POLLER_URL_MAX 8192
#define POLLER_SKIP_LOGS 10           /* malformed entries told one by one,
                                         each read of a document */
/* Polls in a row that failed on a feed's garbled document before the
 * Capability Lists are looked for again (a Source that moved its lists
 * may answer the old URL with an HTML page rather than a 404). */
#define POLLER_GARBLED_REDISCOVER 3

enum poll_state {
    PS_IDLE = 0,
    PS_DISCOVERING,
    PS_CAPABILITIES,
    PS_CHANGES,
    PS_RESOURCES,
    PS_CHECKING,
    PS_WAITING,
    PS_BACKOFF,
    PS_STOPPED,
};

static const char *const poll_state_names[] = {
    "idle", "discovering", "capabilities", "changes", "resources",
    "checking", "waiting", "backoff", "stopped",
};

struct cap {
    int64_t k;                    /* -1: not numbered yet (below) */
    char *url;                    /* where it is read (redirects followed) */
    char *alias;                  /* the URL the Source Description names
                                     it by, when that redirects to url */
    struct rs_doc *doc;           /* the original, as last read */
    char *changes, *resources;    /* what it names (absolute), or NULL */
    bool gone;                    /* no longer in the Source Description */
    bool listed;                  /* in the Source Description last read */
};
/* A URL the Source Description names that no Capability List is known by
 * is not numbered (k -1, not served) until it is read: where redirects
 * lead tells whether it is one already known (discovery gives the URLs
 * redirects led to, the Source Description the URLs it names) - a
 * Capability List keeps one number, however it is reached. */

enum job_kind { JOB_CHANGES, JOB_RESOURCES, JOB_RLHEAD };

struct job {
    enum job_kind kind;
    int64_t k;
    char *url;
};

struct reqslot {
    uint64_t h;                   /* 0: empty */
    int64_t ms;                   /* monotonic, when last requested */
};

typedef void (*step_fn)(struct poller *p);

struct poller {
    struct poller_opts o;         /* strings below are our copies */
    char *name, *url, *bridged, *hub, *token;
    char *topic[OUTBOX_LANES];
    enum poll_state state;
    int64_t src;
    struct reader *rd;
    struct walk *clw, *rlw;
    struct clscan *cs;
    struct rldiff *rdf;
    struct discovery *disc;
    struct outbox *ob;
    struct rs_channels *ch;
    struct event *timer;          /* waiting, backoff, a polite wait */
    step_fn resume;               /* what the timer runs */
    struct event *hub_wait;
    struct event *ask_timer;      /* the first held ask to reconcile */
    struct store_feed *askf;      /* scratch: a Resource List's feed */
    bool asks_held;               /* this commit held an ask */
    /* the Source */
    struct cap caps[POLLER_MAX_CAPS];
    size_t ncaps;
    char *description;            /* its Source Description, or NULL */
    bool discovered;
    bool sd_first;                /* the Source Description's first read */
    bool gone_pending;            /* the Capability Lists it no longer
                                     names are told once the ones not
                                     numbered yet were read */
    int64_t caps_read_ms;         /* monotonic; 0: never */
    bool sd_read;                 /* the SD was read by this process */
    /* the poll under way */
    int64_t poll_ms;              /* monotonic start */
    rs_time_t poll_started;       /* wall clock start */
    long item;                    /* capabilities: -1 the SD; checks */
    struct job jobs[POLLER_MAX_JOBS];
    size_t njobs, job;
    struct store_feed *feed;      /* the current job's feed */
    struct store_feed *prevf;     /* scratch: the Change List it replaces */
    struct store_feed *rlf;       /* scratch: its Resource List's feed */
    struct walk_result wres;
    char **checks;                /* resources to ask about */
    size_t nchecks;
    bool staging;                 /* a staging transaction is open */
    bool found;                   /* this poll found something */
    /* politeness */
    struct reqslot *reqlog;
    size_t reqcap, reqn;
    int64_t cur_interval_ms;
    unsigned fails;
    unsigned garbled;             /* polls in a row failed on a feed's
                                     unparseable document */
    struct rs_backoff backoff;
    /* readiness */
    bool first_done, channels_settled, hub_waited, ready_told;
    /* stats */
    rs_time_t last_poll, last_change;
    uint64_t polls, errors;
    uint64_t skipped;             /* entries skipped as malformed */
    char *last_error;
};

static void poll_begin(struct poller *p);
static void caps_step(struct poller *p);
static void job_step(struct poller *p);
static void checks_step(struct poller *p);
static void rlhead_step(struct poller *p);
static void caps_begin(struct poller *p);
static int ask_reconcile(struct poller *p, int64_t k, const char *changelist);

/* ----------------------------------------------------------- plumbing */

static void
poll_set(struct poller *p, enum poll_state to)
{
    if (p->state != to)
        rs_log_kv(RS_LOG_DEBUG, "poller state", "source", p->name, "from",
                  poll_state_names[p->state], "to", poll_state_names[to],
                  NULL);
    p->state = to;
}

static void
arm(struct poller *p, int64_t ms, step_fn fn)
{
    if (ms < 0)
        ms = 0;
    struct timeval tv = rs_time_tv_ms(ms);
    p->resume = fn;
    evtimer_add(p->timer, &tv);
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct poller *p = arg;
    step_fn fn = p->resume;
    p->resume = NULL;
    if (fn != NULL && p->state != PS_STOPPED)
        fn(p);
}

static void
count(struct rs_metrics_counter *c, uint64_t n)
{
    if (c != NULL && n > 0)
        rs_metrics_counter_add(c, n);
}

#define METRIC(p, m) ((p)->o.metrics != NULL ? (p)->o.metrics->m : NULL)

/* ---------------------------------------------------------- politeness */

static struct reqslot *
reqlog_find(struct poller *p, uint64_t h, bool add)
{
    if (p->reqcap == 0 || (add && p->reqn * 2 >= p->reqcap)) {
        if (!add)
            return NULL;
        size_t ncap = p->reqcap ? p->reqcap * 2 : 256;
        if (ncap > POLLER_REQLOG_MAX) {
            /* full: forget the oldest half of the time (all of it) */
            memset(p->reqlog, 0, p->reqcap * sizeof(*p->reqlog));
            p->reqn = 0;
        } else {
            struct reqslot *t = rs_calloc(ncap, sizeof(*t));
            if (t == NULL)
                return NULL;
            for (size_t i = 0; i < p->reqcap; i++) {
                if (p->reqlog[i].h == 0)
                    continue;
                size_t j = (size_t)p->reqlog[i].h & (ncap - 1);
                while (t[j].h != 0)
                    j = (j + 1) & (ncap - 1);
                t[j] = p->reqlog[i];
            }
            rs_free(p->reqlog);
            p->reqlog = t;
            p->reqcap = ncap;
        }
    }
    size_t j = (size_t)h & (p->reqcap - 1);
    while (p->reqlog[j].h != 0) {
        if (p->reqlog[j].h == h)
            return &p->reqlog[j];
        j = (j + 1) & (p->reqcap - 1);
    }
    if (!add)
        return NULL;
    p->reqlog[j].h = h;
    p->reqn++;
    return &p->reqlog[j];
}

static uint64_t
url_hash(const char *url)
{
    uint64_t h = rs_fnv1a64(url);
    return h != 0 ? h : 1;
}

/* A request for url was answered (or failed). The next one waits
 * --interval from here: from its answer, not from its start, since a
 * request may leave the loop later than it was made, and a Source counts
 * from when it arrived. */
static void
requested(struct poller *p, const char *url)
{
    struct reqslot *s = reqlog_find(p, url_hash(url), true);
    if (s != NULL)
        s->ms = rs_time_mono_ms();
    count(METRIC(p, requests), 1);
}

/* How long before url may be asked for again: --interval after the last
 * time (per document, so that a poll that took long does not make the
 * next one come early for its first documents). */
static int64_t
wait_ms(struct poller *p, const char *url)
{
    struct reqslot *s = reqlog_find(p, url_hash(url), false);
    if (s == NULL)
        return 0;
    int64_t w = s->ms + p->o.interval_ms - rs_time_mono_ms();
    return w > 0 ? w : 0;
}

static int64_t
walk_wait_ms(void *ud, const char *url)
{
    return wait_ms(ud, url);
}

static void
walk_requested(void *ud, const char *url)
{
    requested(ud, url);
}

/* ------------------------------------------------------------ readiness */

static void
check_ready(struct poller *p)
{
    if (p->ready_told || !p->first_done ||
        !(p->channels_settled || p->hub_waited))
        return;
    p->ready_told = true;
    if (p->hub_wait != NULL)
        event_del(p->hub_wait);
    if (p->o.on_ready != NULL)
        p->o.on_ready(p->o.ud);
}

static void
on_hub_wait(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct poller *p = arg;
    p->hub_waited = true;
    check_ready(p);
}

static void
on_channels_settled(void *ud)
{
    struct poller *p = ud;
    p->channels_settled = true;
    check_ready(p);
}

static void
on_channels_change(void *ud)
{
    struct poller *p = ud;
    /* The bridged Capability Lists changed: their readers are told. */
    if (p->state == PS_STOPPED || store_in_txn(p->o.st))
        return;
    int rc = store_begin(p->o.st);
    for (size_t i = 0; rc == 0 && i < p->ncaps; i++) {
        char loc[POLLER_URL_MAX];
        if (p->caps[i].gone || p->caps[i].doc == NULL ||
            outbox_caplist_url(p->bridged, p->caps[i].k, loc,
                               sizeof(loc)) != 0)
            continue;
        struct outbox_item it = {
            .k = p->caps[i].k,
            .loc = loc,
            .change = RS_CHANGE_UPDATED,
            .cap = RS_CAP_CAPABILITYLIST,
            .datetime = rs_time_now(),
            .lastmod = RS_TIME_NONE,
            .length = -1,
        };
        rc = outbox_add(p->ob, OUTBOX_FRAMEWORK, &it);
    }
    if (rc == 0)
        rc = store_commit(p->o.st);
    if (rc != 0) {
        store_rollback(p->o.st);
        return;
    }
    outbox_kick(p->ob);
}

static void
on_accepted(void *ud, enum outbox_lane lane, const char *channel)
{
    struct poller *p = ud;
    rs_channels_on_accepted(p->ch, (enum rs_channels_kind)lane, channel);
}

/* ----------------------------------------------------------- the poll */

static void
staging_close(struct poller *p)
{
    if (!p->staging)
        return;
    p->staging = false;
    if (store_commit(p->o.st) != 0)
        rs_log_kv(RS_LOG_ERROR, "cannot stage what was read", "source",
                  p->name, "error", store_errstr(p->o.st), NULL);
}

static void
set_error(struct poller *p, const char *why)
{
    char *e = rs_strdup(why);
    if (e != NULL) {
        rs_free(p->last_error);
        p->last_error = e;
    }
}

/* The poll failed: back off (at least Retry-After), then poll again. */
static void
poll_fail(struct poller *p, long status, int64_t retry_after_ms,
          const char *why)
{
    if (p->state == PS_STOPPED)
        return;
    staging_close(p);
    p->errors++;
    count(METRIC(p, polls_failed), 1);
    set_error(p, why);
    int64_t ms = (int64_t)rs_backoff_delay(&p->backoff, ++p->fails);
    if (retry_after_ms >= 0) {
        if (retry_after_ms > POLLER_RETRY_AFTER_MAX_MS)
            retry_after_ms = POLLER_RETRY_AFTER_MAX_MS;
        if (retry_after_ms > ms)
            ms = retry_after_ms;
    }
    char st[16], wait[32];
    snprintf(st, sizeof(st), "%ld", status);
    snprintf(wait, sizeof(wait), "%.3f", (double)ms / 1000.0);
    rs_log_kv(RS_LOG_WARN, "poll failed, will retry", "source", p->name,
              "status", st, "retry_in_s", wait, "error", why, NULL);
    p->first_done = true;
    poll_set(p, PS_BACKOFF);
    arm(p, ms, poll_begin);
    check_ready(p);
}

static void
poll_done(struct poller *p)
{
    p->fails = 0;
    p->garbled = 0;
    p->polls++;
    count(METRIC(p, polls_ok), 1);
    p->last_poll = rs_time_now();
    p->first_done = true;
    /* faster while changes come, slower (within bounds) while idle */
    if (p->found || p->o.idle_interval_ms <= p->o.interval_ms) {
        p->cur_interval_ms = p->o.interval_ms;
    } else {
        p->cur_interval_ms *= 2;
        if (p->cur_interval_ms > p->o.idle_interval_ms)
            p->cur_interval_ms = p->o.idle_interval_ms;
    }
    poll_set(p, PS_WAITING);
    arm(p, p->poll_ms + p->cur_interval_ms - rs_time_mono_ms(), poll_begin);
    check_ready(p);
}

/* ------------------------------------------------------------ outbox */

static int
add_change(void *ud, const struct clscan_change *c)
{
    struct poller *p = ud;
    struct outbox_item it = {
        .k = p->jobs[p->job].k,
        .loc = c->loc,
        .change = c->change,
        .datetime = c->datetime,
        .lastmod = c->lastmod,
        .hash = c->hash,
        .length = c->length,
        .type = c->type,
    };
    p->found = true;
    p->last_change = rs_time_now();
    count(METRIC(p, changes), 1);
    return outbox_add(p->ob, OUTBOX_CHANGE, &it);
}

static int
add_framework(struct poller *p, int64_t k, enum rs_capability cap,
              enum rs_change change, const char *loc)
{
    struct outbox_item it = {
        .k = k,
        .loc = loc,
        .change = change,
        .cap = cap,
        .datetime = rs_time_now(),
        .lastmod = RS_TIME_NONE,
        .length = -1,
    };
    p->found = true;
    count(METRIC(p, framework), 1);
    rs_log_kv(RS_LOG_INFO, "framework notification", "source", p->name,
              "capability", rs_capability_name(cap), "change",
              rs_change_name(change), "loc", loc, NULL);
    return outbox_add(p->ob, OUTBOX_FRAMEWORK, &it);
}

/* clscan's framework events; history rewritten or entries lost (updated)
 * also ask the mirrors to reconcile. */
static int
add_cl_framework(void *ud, enum rs_change change, const char *loc)
{
    struct poller *p = ud;
    int64_t k = p->jobs[p->job].k;
    int rc = add_framework(p, k, RS_CAP_CHANGELIST, change, loc);
    if (rc == 0 && change == RS_CHANGE_UPDATED)
        rc = ask_reconcile(p, k, loc);
    return rc;
}

/* ------------------------------------------------- asks to reconcile */

/*
 * A Resource List's "created" framework notification is the spec's way of
 * asking Destinations to reconcile (rssub does, reading the original
 * list), so it goes at most once a minute per list (fw_at in the list's
 * feed). Two things send one: the list regenerated - told when its minute
 * is up, else not at all (the changes are in the Change Lists) - and
 * history rewritten or entries lost at the Change Lists of its Capability
 * List: the one way a mirror learns of what the bridge may not publish,
 * so within the minute the ask is held, not dropped. A held ask is the
 * feed's ask_due in the state, written in the transaction of the walk
 * that found the rewrite; ask_timer sends it when due, in the transaction
 * that clears it: it survives a kill -9 and goes out once per due time
 * (the outbox's rules do the rest). Rewrites while one is held join it.
 */

static bool
rl_minute_up(rs_time_t fw_at, rs_time_t now)
{
    /* a clock set back does not hold the lists for that long */
    return fw_at == RS_TIME_NONE || now < fw_at ||
           now - fw_at >= (rs_time_t)POLLER_RL_FW_MIN_MS * 1000;
}

/* Resource List url of Capability List k: its "created", inside the
 * caller's transaction, when its minute is up; else, to ask the mirrors to
 * reconcile (reconcile), held until it is (p->asks_held). */
static int
rl_tell(struct poller *p, int64_t k, const char *url, bool reconcile)
{
    struct store_feed *f = p->askf;
    int rc = store_feed_get(p->o.st, p->src, STORE_FEED_RESOURCES, url, k, f);
    if (rc != 0)
        return rc;
    rs_time_t now = rs_time_now();
    if (rl_minute_up(f->fw_at, now)) {
        rc = add_framework(p, k, RS_CAP_RESOURCELIST, RS_CHANGE_CREATED, url);
        if (rc == 0)        /* it answers a held ask too */
            rc = store_feed_told(p->o.st, f->id, now, RS_TIME_NONE);
        return rc;
    }
    if (!reconcile)
        return 0;
    bool joins = f->ask_due != RS_TIME_NONE;
    rs_time_t due = joins ? f->ask_due
                          : f->fw_at + (rs_time_t)POLLER_RL_FW_MIN_MS * 1000;
    char t[RS_TIME_BUFSZ];
    rs_time_format(due, t);
    rs_log_kv(RS_LOG_INFO, "ask to reconcile waits for the resource list's "
              "minute", "source", p->name, "resourcelist", url, "due", t,
              "joins_held", joins ? "1" : "0", NULL);
    if (joins)
        return 0;
    p->asks_held = true;
    return store_feed_told(p->o.st, f->id, f->fw_at, due);
}

/* History rewritten or entries lost at changelist, of Capability List k:
 * ask the mirrors to reconcile with its Resource List. */
static int
ask_reconcile(struct poller *p, int64_t k, const char *changelist)
{
    const char *rl = NULL;
    for (size_t i = 0; i < p->ncaps && rl == NULL; i++)
        if (p->caps[i].k == k && !p->caps[i].gone)
            rl = p->caps[i].resources;
    if (rl == NULL) {
        rs_log_kv(RS_LOG_INFO, "no resource list to ask mirrors to "
                  "reconcile with: the capability list names none",
                  "source", p->name, "changelist", changelist, NULL);
        return 0;
    }
    return rl_tell(p, k, rl, true);
}

/* The timer on the first held ask (none: not armed). */
static void
asks_arm(struct poller *p)
{
    event_del(p->ask_timer);
    int rc = store_ask_next(p->o.st, p->src, p->askf);
    if (rc == RS_ENOTFOUND)
        return;
    int64_t ms = 1000;            /* the state failed: try again */
    if (rc == 0) {
        rs_time_t us = p->askf->ask_due - rs_time_now();
        ms = us > 0 ? (int64_t)((us + 999) / 1000) : 0;
    } else {
        rs_log_kv(RS_LOG_ERROR, "cannot read the asks to reconcile",
                  "source", p->name, "error", store_errstr(p->o.st), NULL);
    }
    struct timeval tv = rs_time_tv_ms(ms);
    evtimer_add(p->ask_timer, &tv);
}

/* Send the held asks that are due, each in the transaction that clears
 * it. */
static void
on_ask_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct poller *p = arg;
    if (p->state == PS_STOPPED)
        return;
    if (store_in_txn(p->o.st)) {  /* a walk's staging: the next turn */
        struct timeval tv = { 0, 50000 };
        evtimer_add(p->ask_timer, &tv);
        return;
    }
    bool sent = false;
    for (size_t n = 0; n < POLLER_MAX_JOBS; n++) {
        struct store_feed *f = p->askf;
        int rc = store_ask_next(p->o.st, p->src, f);
        if (rc == RS_ENOTFOUND)
            break;
        rs_time_t now = rs_time_now();
        if (rc == 0 && f->ask_due > now)
            break;
        if (rc == 0)
            rc = store_begin(p->o.st);
        if (rc == 0) {
            rc = add_framework(p, f->k, RS_CAP_RESOURCELIST,
                               RS_CHANGE_CREATED, f->url);
            if (rc == 0)
                rc = store_feed_told(p->o.st, f->id, now, RS_TIME_NONE);
            if (rc == 0)
                rc = store_commit(p->o.st);
            else
                store_rollback(p->o.st);
        }
        if (rc != 0) {
            rs_log_kv(RS_LOG_ERROR, "cannot send an ask to reconcile",
                      "source", p->name, "error", store_errstr(p->o.st),
                      NULL);
            break;
        }
        sent = true;
    }
    if (sent)
        outbox_kick(p->ob);
    asks_arm(p);
}

/* ------------------------------------------------------- discovering */

/* The Capability List known by url (where it is read, or the URL that
 * redirects there), numbered or not; NULL: none. */
static struct cap *
cap_find(struct poller *p, const char *url)
{
    for (size_t i = 0; i < p->ncaps; i++)
        if (strcmp(p->caps[i].url, url) == 0 ||
            (p->caps[i].alias != NULL && strcmp(p->caps[i].alias, url) == 0))
            return &p->caps[i];
    return NULL;
}

static void
cap_clear(struct cap *c)
{
    rs_free(c->url);
    rs_free(c->alias);
    rs_doc_free(c->doc);
    rs_free(c->changes);
    rs_free(c->resources);
    memset(c, 0, sizeof(*c));
}

/* Numbered: its k from the state (a new one for a URL never seen). */
static struct cap *
cap_add(struct poller *p, const char *url)
{
    struct cap *found = cap_find(p, url);
    if (found != NULL && found->k >= 0) {
        found->gone = false;
        return found;
    }
    if (found == NULL && p->ncaps == POLLER_MAX_CAPS)
        return NULL;
    struct store_feed f;
    if (store_feed_get(p->o.st, p->src, STORE_FEED_CAPLIST, url, 0, &f) != 0)
        return NULL;
    if (found != NULL) {          /* named, not read yet: found here */
        found->k = f.k;
        found->gone = false;
        return found;
    }
    struct cap *c = &p->caps[p->ncaps];
    /* listed until a Source Description read says otherwise */
    *c = (struct cap){ .k = f.k, .url = rs_strdup(url), .listed = true };
    if (c->url == NULL)
        return NULL;
    p->ncaps++;
    return c;
}

static void
on_discovered(void *ud, int rc, const char *err, struct discovery_result *res)
{
    struct poller *p = ud;
    if (p->state == PS_STOPPED) {
        discovery_result_free(res);
        return;
    }
    if (rc != 0) {
        poll_fail(p, 0, -1, err);
        return;
    }
    /* what discovery read counts as read now: the Source Description and
     * the Capability Lists are read again, whole, at the end of this poll
     * (their entries are served), not within --interval */
    requested(p, p->url);
    rs_free(p->description);
    p->description = NULL;
    if (res->description != NULL) {
        p->description = rs_strdup(res->description);
        requested(p, res->description);
    }
    bool any = false;
    for (size_t i = 0; i < res->nsets; i++) {
        const struct discovery_set *ds = &res->sets[i];
        requested(p, ds->caplist);
        struct cap *c = cap_add(p, ds->caplist);
        if (c == NULL)
            continue;
        any = true;
        /* what the lists name, until the poll's end reads them whole:
         * discovery has just read them (one held may have changed: a
         * feed gone is why discovery runs again) */
        rs_free(c->changes);
        rs_free(c->resources);
        c->changes = ds->changelist != NULL ? rs_strdup(ds->changelist)
                                            : NULL;
        c->resources = ds->resourcelist != NULL ? rs_strdup(ds->resourcelist)
                                                : NULL;
    }
    discovery_result_free(res);
    if (!any) {
        poll_fail(p, 0, -1, "no Capability List could be kept");
        return;
    }
    p->discovered = true;
    char n[16];
    snprintf(n, sizeof(n), "%zu", p->ncaps);
    rs_log_kv(RS_LOG_INFO, "source discovered", "source", p->name, "url",
              p->url, "capability_lists", n, "description",
              p->description != NULL ? p->description : "", NULL);
    p->caps_read_ms = 0;
    p->sd_read = false;
    p->njobs = p->job = 0;
    job_step(p);
}

/* ----------------------------------------------------- capabilities */

struct one_doc {
    char *etag, *lastmod;
    bool has_digest;
    uint8_t digest[STORE_DIGEST];
};

static int
one_doc_cb(void *ud, const struct store_doc *d)
{
    struct one_doc *o = ud;
    rs_free(o->etag);
    rs_free(o->lastmod);
    o->etag = d->etag != NULL ? rs_strdup(d->etag) : NULL;
    o->lastmod = d->last_modified != NULL ? rs_strdup(d->last_modified)
                                          : NULL;
    o->has_digest = d->has_digest;
    memcpy(o->digest, d->digest, STORE_DIGEST);
    return 0;
}

static void
one_doc_clear(struct one_doc *o)
{
    rs_free(o->etag);
    rs_free(o->lastmod);
    memset(o, 0, sizeof(*o));
}

/* A single-document feed's record of url, and whether a 200 changed it:
 * validators and digest staged and committed with the feed, inside the
 * caller's transaction. */
static int
doc_record(struct poller *p, struct store_feed *f, const char *url,
           const struct reader_result *r, bool *changed)
{
    struct one_doc old = { 0 };
    int rc = store_docs(p->o.st, f->id, one_doc_cb, &old);
    if (rc == 0) {
        *changed = !old.has_digest || !r->has_digest ||
                   memcmp(old.digest, r->digest, STORE_DIGEST) != 0;
        struct store_doc d = {
            .url = url,
            .etag = r->etag,
            .last_modified = r->last_modified,
            .has_digest = r->has_digest,
        };
        memcpy(d.digest, r->digest, STORE_DIGEST);
        rc = store_doc_stage(p->o.st, f->id, &d);
    }
    if (rc == 0)
        rc = store_docs_commit(p->o.st, f->id, NULL, NULL);
    one_doc_clear(&old);
    return rc;
}

static char *
resolve(const char *base, const char *ref)
{
    char *u = NULL;
    if (rs_url_resolve(base, ref, &u) != 0 || !rs_url_is_http(u)) {
        rs_free(u);
        return NULL;
    }
    return u;
}

/* The Capability Lists the Source Description no longer names: gone,
 * told (inside the caller's transaction). */
static int
caps_gone(struct poller *p)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < p->ncaps; i++) {
        if (p->caps[i].listed || p->caps[i].gone || p->caps[i].k < 0)
            continue;
        p->caps[i].gone = true;
        char loc[POLLER_URL_MAX];
        if (outbox_caplist_url(p->bridged, p->caps[i].k, loc,
                               sizeof(loc)) == 0)
            rc = add_framework(p, p->caps[i].k, RS_CAP_CAPABILITYLIST,
                               RS_CHANGE_DELETED, loc);
    }
    return rc;
}

/* The Source Description read: the Capability Lists it names now. One
 * named by a URL no Capability List is known by waits, not numbered,
 * for its read (cap_number); so does the judgement of the ones no longer
 * named. */
static int
take_description(struct poller *p, const struct rs_doc *doc, bool first)
{
    for (size_t i = 0; i < p->ncaps; i++)
        p->caps[i].listed = false;
    p->sd_first = first;
    bool unknown = false;
    for (size_t i = 0; i < doc->nentries; i++) {
        const struct rs_entry *e = &doc->entries[i];
        if (e->has_md && e->md.capability != RS_CAP_CAPABILITYLIST &&
            e->md.capability != RS_CAP_NONE)
            continue;
        char *u = resolve(p->description, e->loc);
        if (u == NULL)
            continue;
        struct cap *c = cap_find(p, u);
        if (c == NULL && p->ncaps < POLLER_MAX_CAPS) {
            c = &p->caps[p->ncaps];
            *c = (struct cap){ .k = -1, .url = u };
            u = NULL;
            p->ncaps++;
        }
        rs_free(u);
        if (c == NULL)
            continue;
        c->listed = true;
        if (c->k >= 0)
            c->gone = false;
        else
            unknown = true;
    }
    p->gone_pending = unknown;
    return unknown ? 0 : caps_gone(p);
}

/* Capability List i, not numbered, was read at effective (NULL: where it
 * was asked for): the one known there, which takes the URL as its alias
 * (i is dropped, *dropped set: i then names the one after it), or a new
 * one, numbered and told. Inside the caller's transaction. The
 * Capability List to record the read as, or NULL (*rc: out of memory,
 * the state). */
static struct cap *
cap_number(struct poller *p, size_t i, const char *effective, bool *dropped,
           int *rc)
{
    struct cap *c = &p->caps[i];
    *dropped = false;
    const char *at = effective != NULL ? effective : c->url;
    struct cap *t = cap_find(p, at);
    if (t != NULL && t != c && t->k >= 0) {
        if (strcmp(t->url, c->url) != 0 &&
            (t->alias == NULL || strcmp(t->alias, c->url) != 0)) {
            rs_free(t->alias);
            t->alias = c->url;
            c->url = NULL;
        }
        t->listed = true;
        t->gone = false;
        size_t ti = (size_t)(t - p->caps);
        cap_clear(c);
        memmove(c, c + 1, (p->ncaps - i - 1) * sizeof(*c));
        p->ncaps--;
        memset(&p->caps[p->ncaps], 0, sizeof(*c));
        if (ti > i)
            ti--;
        *dropped = true;
        return &p->caps[ti];
    }
    if (effective != NULL) {
        char *u = rs_strdup(effective);
        if (u == NULL) {
            *rc = RS_ENOMEM;
            return NULL;
        }
        c->alias = c->url;
        c->url = u;
    }
    struct store_feed f;
    *rc = store_feed_get(p->o.st, p->src, STORE_FEED_CAPLIST, c->url, 0, &f);
    if (*rc != 0)
        return NULL;
    c->k = f.k;
    c->gone = false;
    if (!p->sd_first) {
        char loc[POLLER_URL_MAX];
        if (outbox_caplist_url(p->bridged, c->k, loc, sizeof(loc)) == 0)
            *rc = add_framework(p, c->k, RS_CAP_CAPABILITYLIST,
                                RS_CHANGE_CREATED, loc);
    }
    return *rc == 0 ? c : NULL;
}

/* A Capability List read: what it names. */
static void
take_caplist(struct cap *c, struct rs_doc *doc)
{
    rs_doc_free(c->doc);
    c->doc = doc;
    rs_free(c->changes);
    rs_free(c->resources);
    c->changes = c->resources = NULL;
    for (size_t i = 0; i < doc->nentries; i++) {
        const struct rs_entry *e = &doc->entries[i];
        if (!e->has_md)
            continue;
        if (e->md.capability == RS_CAP_CHANGELIST && c->changes == NULL)
            c->changes = resolve(c->url, e->loc);
        else if (e->md.capability == RS_CAP_RESOURCELIST &&
                 c->resources == NULL)
            c->resources = resolve(c->url, e->loc);
    }
}

static void
on_cap_read(void *ud, const struct reader_result *r)
{
    struct poller *p = ud;
    if (p->state == PS_STOPPED)
        return;
    const char *url = p->item < 0 ? p->description : p->caps[p->item].url;
    requested(p, url);
    char why[700];
    if (r->rc != 0 || (r->status != 200 && !r->not_modified)) {
        if (r->rc == 0)
            snprintf(why, sizeof(why), "GET %s: HTTP %ld", url, r->status);
        else
            snprintf(why, sizeof(why), "%s", r->err);
        if (r->status == 404 || r->status == 410)
            p->discovered = false;        /* moved: find it again */
        poll_fail(p, r->status, r->retry_after_ms, why);
        return;
    }
    if (r->not_modified) {
        p->item++;
        caps_step(p);
        return;
    }
    struct rs_parse_opts po = { .gunzip = true };
    struct rs_doc *doc = NULL;
    struct rs_diag diag;
    if (rs_doc_parse(r->body, r->body_len, &po, &doc, &diag) != 0) {
        snprintf(why, sizeof(why), "%s:%u: %s", url, diag.line, diag.msg);
        poll_fail(p, 200, -1, why);
        return;
    }
    enum rs_capability want = p->item < 0 ? RS_CAP_DESCRIPTION
                                          : RS_CAP_CAPABILITYLIST;
    if (doc->head.md.capability != want) {
        snprintf(why, sizeof(why), "%s: a %s where a %s was", url,
                 rs_capability_name(doc->head.md.capability),
                 rs_capability_name(want));
        rs_doc_free(doc);
        poll_fail(p, 200, -1, why);
        return;
    }
    struct store_feed f;
    enum store_feed_kind kind = p->item < 0 ? STORE_FEED_DESCRIPTION
                                            : STORE_FEED_CAPLIST;
    struct cap *c = p->item < 0 ? NULL : &p->caps[p->item];
    bool changed = false, dropped = false;
    int rc = store_begin(p->o.st);
    if (rc == 0) {
        if (c != NULL && c->k < 0) {
            /* where it led says which Capability List it is */
            if (r->effective_url != NULL)
                requested(p, r->effective_url);
            c = cap_number(p, (size_t)p->item, r->effective_url, &dropped,
                           &rc);
            url = c != NULL ? c->url : NULL;
        }
        if (rc == 0)
            rc = store_feed_get(p->o.st, p->src, kind, url, 0, &f);
        if (rc == 0)
            rc = doc_record(p, &f, url, r, &changed);
        if (rc == 0 && c == NULL && (changed || f.gen == 0))
            rc = take_description(p, doc, f.gen == 0);
        if (rc == 0 && c != NULL && changed && f.gen > 0) {
            char loc[POLLER_URL_MAX];
            rc = outbox_caplist_url(p->bridged, c->k, loc, sizeof(loc));
            if (rc == 0)
                rc = add_framework(p, c->k, RS_CAP_CAPABILITYLIST,
                                   RS_CHANGE_UPDATED, loc);
        }
        f.gen++;
        if (rc == 0)
            rc = store_feed_put(p->o.st, &f);
        if (rc == 0)
            rc = store_commit(p->o.st);
        else
            store_rollback(p->o.st);
    }
    if (rc != 0) {
        rs_doc_free(doc);
        snprintf(why, sizeof(why), "state: %s", store_errstr(p->o.st));
        poll_fail(p, 0, -1, why);
        return;
    }
    if (c == NULL) {
        rs_doc_free(doc);
        p->sd_read = true;
    } else {
        take_caplist(c, doc);
    }
    outbox_kick(p->ob);
    if (!dropped)
        p->item++;
    caps_step(p);
}

/* The Capability Lists not numbered when the Source Description was read
 * are: the ones it no longer names are told now. */
static int
caps_settle(struct poller *p)
{
    if (!p->gone_pending)
        return 0;
    int rc = store_begin(p->o.st);
    if (rc != 0)
        return rc;
    rc = caps_gone(p);
    if (rc == 0)
        rc = store_commit(p->o.st);
    else
        store_rollback(p->o.st);
    if (rc == 0) {
        p->gone_pending = false;
        outbox_kick(p->ob);
    }
    return rc;
}

static void
caps_step(struct poller *p)
{
    while (p->item >= 0 && (size_t)p->item < p->ncaps &&
           p->caps[p->item].gone)
        p->item++;
    if (p->item >= 0 && (size_t)p->item >= p->ncaps) {
        if (caps_settle(p) != 0) {
            char why[600];
            snprintf(why, sizeof(why), "state: %s", store_errstr(p->o.st));
            poll_fail(p, 0, -1, why);
            return;
        }
        p->caps_read_ms = rs_time_mono_ms();
        poll_done(p);
        return;
    }
    const char *url = p->item < 0 ? p->description : p->caps[p->item].url;
    int64_t w = wait_ms(p, url);
    if (w > 0) {
        arm(p, w, caps_step);
        return;
    }
    /* validators only for what is held: a list read before this process
     * started is read whole once, since its entries are served */
    struct one_doc old = { 0 };
    bool held = p->item < 0 ? p->sd_read : p->caps[p->item].doc != NULL;
    struct store_feed f;
    if (held &&
        store_feed_get(p->o.st, p->src, p->item < 0 ? STORE_FEED_DESCRIPTION
                                                    : STORE_FEED_CAPLIST,
                       url, 0, &f) == 0)
        if (store_docs(p->o.st, f.id, one_doc_cb, &old) != 0)
            one_doc_clear(&old);    /* read whole, unconditionally */
    struct reader_req q = {
        .url = url,
        .etag = old.etag,
        .last_modified = old.lastmod,
        .keep_body = true,
        .on_done = on_cap_read,
        .ud = p,
    };
    int rc = reader_get(p->rd, &q);
    one_doc_clear(&old);
    if (rc != 0) {
        char why[600];
        snprintf(why, sizeof(why), "GET %s: %s", url, rs_strerror(rc));
        poll_fail(p, 0, -1, why);
    }
}

/* ------------------------------------------------------------- feeds */

static bool
job_add(struct poller *p, enum job_kind kind, int64_t k, const char *url)
{
    for (size_t i = 0; i < p->njobs; i++)
        if (p->jobs[i].kind == kind && strcmp(p->jobs[i].url, url) == 0)
            return true;
    if (p->njobs == POLLER_MAX_JOBS)
        return false;
    char *u = rs_strdup(url);
    if (u == NULL)
        return false;
    p->jobs[p->njobs++] = (struct job){ kind, k, u };
    return true;
}

static void
jobs_clear(struct poller *p)
{
    for (size_t i = 0; i < p->njobs; i++)
        rs_free(p->jobs[i].url);
    p->njobs = 0;
    p->job = 0;
}

/* The Change Lists never walked first, in order: one that takes over from
 * a list another Capability List still follows (cl_replaces) takes the
 * position that list had when the switch was noticed, at the end of the
 * last poll - not one its walk in this poll moved past the entries the
 * new list holds. The state failing here only leaves the order as it is
 * (the walk then fails on it). */
static void
jobs_new_first(struct poller *p)
{
    size_t n = 0;
    for (size_t i = 0; i < p->njobs; i++) {
        if (p->jobs[i].kind != JOB_CHANGES ||
            store_feed_get(p->o.st, p->src, STORE_FEED_CHANGES,
                           p->jobs[i].url, p->jobs[i].k, p->feed) != 0 ||
            p->feed->gen > 0)
            continue;
        struct job j = p->jobs[i];
        memmove(&p->jobs[n + 1], &p->jobs[n], (i - n) * sizeof(j));
        p->jobs[n++] = j;
    }
}

static void
jobs_plan(struct poller *p)
{
    jobs_clear(p);
    for (size_t i = 0; i < p->ncaps; i++) {
        struct cap *c = &p->caps[i];
        if (c->gone)
            continue;
        if (c->changes != NULL)
            job_add(p, JOB_CHANGES, c->k, c->changes);
        else if (c->resources != NULL)
            job_add(p, JOB_RESOURCES, c->k, c->resources);
    }
    jobs_new_first(p);
    /* a Change List's Source: its Resource List watched (head only) */
    for (size_t i = 0; i < p->ncaps; i++) {
        struct cap *c = &p->caps[i];
        if (!c->gone && c->changes != NULL && c->resources != NULL)
            job_add(p, JOB_RLHEAD, c->k, c->resources);
    }
}

/*
 * A feed's walk failed. A feed that is gone (404, 410) or keeps answering
 * what is not a list may have moved: the Capability Lists are read in
 * the next poll (discovery, after the backoff - the Source Description
 * and Capability Lists are asked for no sooner than any document), which
 * then walks what they name now. Read only after a successful poll, they
 * would otherwise never be read again.
 */
static void
walk_failed(struct poller *p, int rc, const char *err,
            const struct walk_result *wr)
{
    if (wr->chain_moved && store_docs_forget(p->o.st, p->feed->id) != 0)
        rs_log_kv(RS_LOG_ERROR, "cannot forget the pages of a list",
                  "source", p->name, "error", store_errstr(p->o.st), NULL);
    bool garbled = wr->status == 200 &&
                   (rc == RS_EPARSE || rc == RS_EINVALID);
    p->garbled = garbled ? p->garbled + 1 : 0;
    if (rc == RS_ENOTFOUND || p->garbled >= POLLER_GARBLED_REDISCOVER) {
        rs_log_kv(RS_LOG_INFO, "a feed is gone or garbled: its capability "
                  "lists are looked for again", "source", p->name, "feed",
                  p->feed->url, NULL);
        p->discovered = false;
        p->garbled = 0;
    }
    char why[700];
    snprintf(why, sizeof(why), "%s", err[0] != '\0' ? err : rs_strerror(rc));
    poll_fail(p, wr->status, wr->retry_after_ms, why);
}

static int
on_walk_entry(void *ud, const struct walk_doc *d, size_t idx,
              const struct rs_entry *e, const char *loc)
{
    struct poller *p = ud;
    if (!p->staging) {
        int rc = store_begin(p->o.st);
        if (rc != 0)
            return rc;
        p->staging = true;
    }
    return p->jobs[p->job].kind == JOB_CHANGES
               ? clscan_entry(p->cs, d, idx, e, loc)
               : rldiff_entry(p->rdf, d, idx, e, loc);
}

/*
 * A malformed entry of a Resource List or Change List, skipped: the rest
 * of the list is read and published (one bad entry no longer stops the
 * Source), this one is not; a Resource List walk with one deletes nothing
 * (rldiff.h), a Change List's rows in its document stand (clscan.h).
 * Told each time its document is read - at most POLLER_SKIP_LOGS a
 * document, the rest summed up at its end - and counted.
 */
static int
on_walk_bad_entry(void *ud, const struct walk_doc *d, const char *loc,
                  unsigned line, const char *why)
{
    struct poller *p = ud;
    p->skipped++;
    count(METRIC(p, skipped), 1);
    if (d->skipped > POLLER_SKIP_LOGS)
        return 0;
    char ln[16];
    snprintf(ln, sizeof(ln), "%u", line);
    rs_log_kv(RS_LOG_WARN, "a malformed entry skipped: not published, the "
              "rest of the list is read", "source", p->name, "document",
              d->url, "line", ln, "loc", loc != NULL ? loc : "-", "error",
              why, NULL);
    return 0;
}

static int
on_walk_doc(void *ud, const struct walk_doc *d, bool not_modified)
{
    struct poller *p = ud;
    staging_close(p);
    if (d->skipped > POLLER_SKIP_LOGS) {
        char n[24];
        snprintf(n, sizeof(n), "%zu", d->skipped - POLLER_SKIP_LOGS);
        rs_log_kv(RS_LOG_WARN, "more malformed entries skipped, not told "
                  "one by one", "source", p->name, "document", d->url,
                  "more", n, NULL);
    }
    if (not_modified)
        count(METRIC(p, not_modified), 1);
    return p->jobs[p->job].kind == JOB_CHANGES
               ? clscan_doc(p->cs, d)
               : rldiff_doc(p->rdf, d, not_modified);
}

static void
on_walk_chunk(void *ud)
{
    staging_close(ud);
}

/*
 * The first diff of a Resource List (a baseline) after its Capability
 * List's Change List was followed (it names none now): the Change List
 * published what it held up to its position; the list, read now, may
 * hold changes made after that, which no diff can tell from what was
 * there before (a list has no history). Publishing its entries as
 * created would flood every mirror with what they have; publishing none
 * loses those changes. So, as for a Change List replaced by one that
 * does not reach back (docs/bridge.md 4), the mirrors are asked to
 * reconcile with the list - unless the list is no newer than the
 * position (its `at`), when the Change List gave all it holds.
 */
static int
rl_baseline(void *ud, const struct store_feed *f, const struct walk_result *wr)
{
    struct poller *p = ud;
    int64_t k = p->jobs[p->job].k;
    struct store_feed *cl = p->prevf;        /* free in a Resource List job */
    int rc = store_feed_last(p->o.st, p->src, STORE_FEED_CHANGES, k, -1, cl);
    if (rc == RS_ENOTFOUND)
        return 0;                            /* a first baseline */
    if (rc != 0)
        return rc;
    if (wr->at != RS_TIME_NONE && cl->pos != RS_TIME_NONE && wr->at <= cl->pos)
        return 0;
    rs_log_kv(RS_LOG_INFO, "a resource list followed after its change "
              "list: its baseline may hold changes the change list did not "
              "give, the mirrors are asked to reconcile", "source", p->name,
              "resourcelist", f->url, "changelist", cl->url, NULL);
    return rl_tell(p, k, f->url, true);
}

static void
rl_commit(struct poller *p, bool checked)
{
    struct rldiff_hooks h = { .on_change = add_change,
                              .on_baseline = rl_baseline, .ud = p };
    struct rldiff_stats rs;
    struct store_feed *f = p->feed;
    p->asks_held = false;
    int rc = rldiff_commit(p->rdf, f, &p->wres, p->poll_started, checked,
                           &h, &rs);
    if (p->asks_held)
        asks_arm(p);
    if (rc != 0) {
        char why[700];
        snprintf(why, sizeof(why), "%.300s: cannot record the Resource List: %.300s",
                 f->url, store_errstr(p->o.st));
        poll_fail(p, 0, -1, why);
        return;
    }
    if (p->wres.skipped > 0 && !rs.baseline && !rs.unchanged) {
        char sk[24], held[24];
        snprintf(sk, sizeof(sk), "%zu", p->wres.skipped);
        snprintf(held, sizeof(held), "%llu", (unsigned long long)rs.held);
        rs_log_kv(RS_LOG_WARN, "a resource list read with malformed entries "
                  "skipped: no deletion published, the resources it did not "
                  "list are held until a read without any", "source",
                  p->name, "resourcelist", f->url, "skipped", sk, "held", held,
                  NULL);
    }
    uint64_t n = rs.created + rs.updated + rs.deleted;
    if (n > 0 || rs.baseline) {
        char c[24], u[24], d[24], k[24];
        snprintf(c, sizeof(c), "%llu", (unsigned long long)rs.created);
        snprintf(u, sizeof(u), "%llu", (unsigned long long)rs.updated);
        snprintf(d, sizeof(d), "%llu", (unsigned long long)rs.deleted);
        snprintf(k, sizeof(k), "%llu", (unsigned long long)rs.kept);
        rs_log_kv(rs.baseline ? RS_LOG_INFO : RS_LOG_DEBUG,
                  rs.baseline ? "resource list baseline" : "resource list "
                  "changed", "source", p->name, "resourcelist", f->url,
                  "created", c, "updated", u, "deleted", d, "kept", k, NULL);
    }
    /* a regenerated Resource List, told at most once a minute */
    if (n > 0) {
        rc = store_begin(p->o.st);
        if (rc == 0)
            rc = rl_tell(p, p->jobs[p->job].k, f->url, false);
        if (rc == 0)
            rc = store_commit(p->o.st);
        else
            store_rollback(p->o.st);
    }
    outbox_kick(p->ob);
    p->job++;
    job_step(p);
}

static int
check_add(void *ud, const char *loc)
{
    struct poller *p = ud;
    char *l = rs_strdup(loc);
    if (l == NULL)
        return RS_ENOMEM;
    p->checks[p->nchecks++] = l;
    return 0;
}

static void
checks_clear(struct poller *p)
{
    for (size_t i = 0; i < p->nchecks; i++)
        rs_free(p->checks[i]);
    p->nchecks = 0;
}

static void
on_walk_done(void *ud, int rc, const char *err, const struct walk_result *wr)
{
    struct poller *p = ud;
    staging_close(p);
    if (p->state == PS_STOPPED)
        return;
    if (rc != 0) {
        walk_failed(p, rc, err, wr);
        return;
    }
    p->wres = *wr;
    struct store_feed *f = p->feed;
    if (p->jobs[p->job].kind == JOB_CHANGES) {
        struct clscan_hooks h = { add_change, add_cl_framework, p };
        struct clscan_stats cs;
        p->asks_held = false;
        rc = clscan_commit(p->cs, f, wr, p->poll_started, &h, &cs);
        if (p->asks_held)
            asks_arm(p);
        if (rc != 0) {
            char why[700];
            snprintf(why, sizeof(why), "%.300s: cannot record the Change "
                     "Lists: %.300s", f->url, store_errstr(p->o.st));
            poll_fail(p, 0, -1, why);
            return;
        }
        count(METRIC(p, rewritten), cs.rewritten);
        count(METRIC(p, lost), cs.lost);
        count(METRIC(p, late), cs.late);
        if (cs.replaced) {
            char n[24];
            snprintf(n, sizeof(n), "%llu", (unsigned long long)cs.published);
            rs_log_kv(RS_LOG_INFO, "a change list replaces another: taken "
                      "over from its position, no baseline", "source",
                      p->name, "changelist", f->url, "replaces",
                      p->prevf->url, "published", n, "unsure",
                      cs.unsure ? "1" : "0", NULL);
        }
        if (cs.baseline || cs.published > 0 || cs.rewritten || cs.lost) {
            char n[24], r[24], l[24], s[24];
            snprintf(n, sizeof(n), "%llu", (unsigned long long)cs.published);
            snprintf(r, sizeof(r), "%llu", (unsigned long long)cs.rewritten);
            snprintf(l, sizeof(l), "%llu", (unsigned long long)cs.lost);
            snprintf(s, sizeof(s), "%llu", (unsigned long long)cs.staged);
            rs_log_kv(cs.baseline || cs.rewritten || cs.lost ? RS_LOG_INFO
                                                             : RS_LOG_DEBUG,
                      cs.baseline ? "change lists baseline"
                                  : "change lists read", "source", p->name,
                      "changelist", f->url, "entries", s, "published", n,
                      "rewritten", r, "lost", l, NULL);
        }
        outbox_kick(p->ob);
        p->job++;
        job_step(p);
        return;
    }
    if (rldiff_needs_checks(f, wr)) {
        checks_clear(p);
        if (rldiff_gone(p->rdf, RLDIFF_CHECKS, check_add, p) != 0) {
            poll_fail(p, 0, -1, "cannot list the resources gone");
            return;
        }
        if (p->nchecks > 0) {
            poll_set(p, PS_CHECKING);
            p->item = 0;
            checks_step(p);
            return;
        }
    }
    rl_commit(p, false);
}

static void
on_check(void *ud, const struct reader_result *r)
{
    struct poller *p = ud;
    if (p->state == PS_STOPPED)
        return;
    requested(p, p->checks[p->item]);
    if (r->rc == 0 && (r->status == 429 || r->status == 503)) {
        char why[600];
        snprintf(why, sizeof(why), "HEAD %s: HTTP %ld", p->checks[p->item],
                 r->status);
        poll_fail(p, r->status, r->retry_after_ms, why);
        return;
    }
    enum rldiff_check what = RLDIFF_UNKNOWN;
    if (r->rc == 0 && (r->status == 404 || r->status == 410))
        what = RLDIFF_GONE;
    else if (r->rc == 0 && r->status >= 200 && r->status < 300)
        what = RLDIFF_THERE;
    if (rldiff_checked(p->rdf, p->checks[p->item], what) != 0) {
        poll_fail(p, 0, -1, "out of memory");
        return;
    }
    p->item++;
    checks_step(p);
}

static void
checks_step(struct poller *p)
{
    if ((size_t)p->item >= p->nchecks) {
        checks_clear(p);
        poll_set(p, PS_RESOURCES);
        rl_commit(p, true);
        return;
    }
    const char *url = p->checks[p->item];
    int64_t w = wait_ms(p, url);
    if (w > 0) {
        arm(p, w, checks_step);
        return;
    }
    struct reader_req q = { .url = url, .head = true, .on_done = on_check,
                            .ud = p };
    if (reader_get(p->rd, &q) != 0) {
        p->item++;                /* not asked: kept, decided next time */
        arm(p, 0, checks_step);
    }
}

static void
on_rlhead(void *ud, const struct reader_result *r)
{
    struct poller *p = ud;
    if (p->state == PS_STOPPED)
        return;
    struct store_feed *f = p->feed;
    requested(p, f->url);
    char why[700];
    if (r->rc != 0 || (r->status != 200 && !r->not_modified)) {
        if (r->rc == 0)
            snprintf(why, sizeof(why), "GET %.600s: HTTP %ld", f->url,
                     r->status);
        else
            snprintf(why, sizeof(why), "%s", r->err);
        poll_fail(p, r->status, r->retry_after_ms, why);
        return;
    }
    if (r->not_modified) {
        count(METRIC(p, not_modified), 1);
        p->job++;
        job_step(p);
        return;
    }
    struct one_doc old = { 0 };
    int rc = store_docs(p->o.st, f->id, one_doc_cb, &old);
    rs_time_t at = r->doc->at;
    bool regen = f->gen > 0 &&
                 (at != RS_TIME_NONE
                      ? at != f->at
                      : (r->etag != NULL &&
                         (old.etag == NULL || strcmp(old.etag, r->etag) != 0)));
    one_doc_clear(&old);
    if (rc == 0)
        rc = store_begin(p->o.st);
    if (rc == 0) {
        struct store_doc d = {
            .url = f->url,
            .etag = r->etag,
            .last_modified = r->last_modified,
        };
        rc = store_doc_stage(p->o.st, f->id, &d);
        if (rc == 0)
            rc = store_docs_commit(p->o.st, f->id, NULL, NULL);
        if (rc == 0 && regen)   /* told at most once a minute */
            rc = rl_tell(p, p->jobs[p->job].k, f->url, false);
        f->gen++;
        f->at = at;
        /* the poll's start, as its Change List's walk: a watched list is
         * never "read after" it (rl_handover) */
        f->walked = p->poll_started;
        /* its rows (if a diff left any) are not the list's any more: the
         * next diff of it, if its Change List goes, is a baseline */
        f->diffed = RS_TIME_NONE;
        if (rc == 0)
            rc = store_feed_put(p->o.st, f);
        if (rc == 0)
            rc = store_commit(p->o.st);
        else
            store_rollback(p->o.st);
    }
    if (rc != 0) {
        snprintf(why, sizeof(why), "state: %s", store_errstr(p->o.st));
        poll_fail(p, 0, -1, why);
        return;
    }
    outbox_kick(p->ob);
    p->job++;
    job_step(p);
}

static void
rlhead_step(struct poller *p)
{
    struct store_feed *f = p->feed;
    int64_t w = wait_ms(p, f->url);
    if (w > 0) {
        arm(p, w, rlhead_step);
        return;
    }
    struct one_doc old = { 0 };
    if (store_docs(p->o.st, f->id, one_doc_cb, &old) != 0)
        one_doc_clear(&old);        /* read whole, unconditionally */
    struct reader_req q = {
        .url = f->url,
        .etag = old.etag,
        .last_modified = old.lastmod,
        .head_only = true,
        .on_done = on_rlhead,
        .ud = p,
    };
    int rc = reader_get(p->rd, &q);
    one_doc_clear(&old);
    if (rc != 0)
        poll_fail(p, 0, -1, rs_strerror(rc));
}

/* Does a Capability List name the Change List url (is it followed)? */
static bool
cl_named(const struct poller *p, const char *url)
{
    for (size_t i = 0; i < p->ncaps; i++)
        if (!p->caps[i].gone && p->caps[i].changes != NULL &&
            strcmp(p->caps[i].changes, url) == 0)
            return true;
    return false;
}

/*
 * Capability List k's Resource List feed, when it was diffed (followed
 * for changes: it holds rows) after `after` (RS_TIME_NONE: ever): the
 * time its changes were published up to (*upto: the list's `at`, else
 * the start of its last walk); RS_TIME_NONE otherwise. A Resource List
 * only watched (a Capability List with a Change List) is read in the
 * same poll as the Change List, after it, with the poll's start as its
 * walk's (on_rlhead), so it is never read after it.
 */
static int
rl_handover(struct poller *p, int64_t k, rs_time_t after, rs_time_t *upto)
{
    *upto = RS_TIME_NONE;
    const char *url = NULL;
    for (size_t i = 0; i < p->ncaps && url == NULL; i++)
        if (p->caps[i].k == k && !p->caps[i].gone)
            url = p->caps[i].resources;
    if (url == NULL)
        return 0;
    struct store_feed *r = p->rlf;
    int rc = store_feed_get(p->o.st, p->src, STORE_FEED_RESOURCES, url, k, r);
    if (rc != 0 || r->gen == 0 || r->walked == RS_TIME_NONE ||
        r->diffed == RS_TIME_NONE ||
        (after != RS_TIME_NONE && r->walked <= after))
        return rc;
    bool rows = false;
    if ((rc = rldiff_has_rows(p->rdf, r->id, &rows)) != 0 || !rows)
        return rc;
    *upto = r->at != RS_TIME_NONE ? r->at : r->walked;
    return 0;
}

/*
 * A Capability List that names another Change List than before (a Source
 * that renamed or rotated its list) must not lose the changes made while
 * it switched, as a baseline of the new list would: the new feed takes
 * over from the old one's position (clscan_replaces). The old one is the
 * feed of the same Capability List (k) walked last - after this one, if
 * this one was walked before (a list named again). One another
 * Capability List still names is still followed: the new feed takes over
 * from it at its own first walk only (the old one walks on, and would
 * otherwise be "walked after" it at every poll), and its rows stay its
 * own. Jobs of feeds never walked go first in a poll (jobs_plan), so the
 * position taken over is the one the old feed had when the switch was
 * noticed, not one its walk in this poll moved on.
 *
 * A Capability List followed through its Resource List for a while (it
 * named no Change List) published its changes from the diffs of that
 * list: a Change List named again (or for the first time) takes over
 * from the later of the old feed's position and the time the Resource
 * List's last diff published up to, and takes what is older silently -
 * else what the diffs published would be published again.
 *
 * Decided from the state at each walk, so a restart between the switch
 * and the new list's first walk changes nothing. *keep: the feed replaced
 * keeps its rows.
 */
static int
cl_replaces(struct poller *p, const struct store_feed *f, bool *yes,
            bool *keep)
{
    *yes = *keep = false;
    struct store_feed *prev = p->prevf;
    bool have = false;
    int rc = store_feed_last(p->o.st, p->src, STORE_FEED_CHANGES, f->k,
                             f->id, prev);
    if (rc != 0 && rc != RS_ENOTFOUND)
        return rc;
    if (rc == 0 && (f->gen == 0 || prev->walked > f->walked)) {
        have = true;
        if (cl_named(p, prev->url)) {
            have = f->gen == 0;
            *keep = true;
        }
    }
    rs_time_t after = have ? prev->walked
                           : f->gen > 0 ? f->walked : RS_TIME_NONE;
    rs_time_t upto;
    if ((rc = rl_handover(p, f->k, after, &upto)) != 0)
        return rc;
    if (upto != RS_TIME_NONE && !have) {
        /* no other Change List to take over from: the Resource List's
         * diffs stand for one without rows (id -1), from this feed's own
         * position if it had one (a list named again: its rows go, what
         * is older than the position is taken silently) */
        struct store_feed *r = p->rlf;
        *prev = (struct store_feed){ .id = -1, .src = p->src,
                                     .kind = STORE_FEED_CHANGES, .k = f->k,
                                     .pos = f->gen > 0 ? f->pos : RS_TIME_NONE,
                                     .walked = r->walked,
                                     .at = RS_TIME_NONE,
                                     .fw_at = RS_TIME_NONE,
                                     .ask_due = RS_TIME_NONE,
                                     .diffed = RS_TIME_NONE };
        snprintf(prev->url, sizeof(prev->url), "%s", r->url);
        if (prev->pos == RS_TIME_NONE || prev->pos < upto)
            prev->pos = upto;
        prev->win_from = prev->pos;
        *keep = true;
        have = true;
    } else if (upto != RS_TIME_NONE) {
        /* the diffs published up to upto: newer entries are new, older
         * ones the old feed lacked were the diffs' (taken silently, as
         * below the window taken over) */
        if (prev->pos == RS_TIME_NONE || prev->pos < upto)
            prev->pos = upto;
        if (prev->win_from == RS_TIME_NONE || prev->win_from < upto)
            prev->win_from = upto;
    }
    if (!have)
        return 0;
    /* a list named again: what it held then is older than what the one
     * replaced holds now - read it whole (its rows go at the commit) */
    if (f->gen > 0 && (rc = store_docs_forget(p->o.st, f->id)) != 0)
        return rc;
    *yes = true;
    return 0;
}

static void
job_step(struct poller *p)
{
    if (p->njobs == 0 && p->job == 0)
        jobs_plan(p);
    if (p->job >= p->njobs) {
        jobs_clear(p);
        caps_begin(p);
        return;
    }
    struct job *j = &p->jobs[p->job];
    enum store_feed_kind kind = j->kind == JOB_CHANGES ? STORE_FEED_CHANGES
                                                       : STORE_FEED_RESOURCES;
    int rc = store_feed_get(p->o.st, p->src, kind, j->url, j->k, p->feed);
    if (rc != 0) {
        poll_fail(p, 0, -1, store_errstr(p->o.st));
        return;
    }
    if (j->kind == JOB_RLHEAD) {
        poll_set(p, PS_RESOURCES);
        rlhead_step(p);
        return;
    }
    if (j->kind == JOB_CHANGES) {
        poll_set(p, PS_CHANGES);
        clscan_begin(p->cs, p->feed->id);
        bool replaces = false, keep = false;
        rc = cl_replaces(p, p->feed, &replaces, &keep);
        if (rc == 0 && replaces)
            clscan_replaces(p->cs, p->prevf, keep);
        if (rc == 0)
            rc = walk_start(p->clw, p->feed->id, j->url);
    } else {
        poll_set(p, PS_RESOURCES);
        rldiff_begin(p->rdf, p->feed->id);
        /* a list only watched so far (its Capability List had a Change
         * List): its documents are its head's, its rows none or an old
         * diff's - read it whole, its first diff a baseline (rldiff.h) */
        if (p->feed->gen > 0 && p->feed->diffed == RS_TIME_NONE)
            rc = store_docs_forget(p->o.st, p->feed->id);
        if (rc == 0)
            rc = walk_start(p->rlw, p->feed->id, j->url);
    }
    if (rc != 0) {
        char why[600];
        snprintf(why, sizeof(why), "%s: %s", j->url,
                 rc == RS_EIO ? store_errstr(p->o.st) : rs_strerror(rc));
        poll_fail(p, 0, -1, why);
    }
}

/* ------------------------------------------------------------ polling */

static void
poll_begin(struct poller *p)
{
    if (p->state == PS_STOPPED)
        return;
    p->poll_ms = rs_time_mono_ms();
    p->poll_started = rs_time_now();
    p->found = false;
    jobs_clear(p);
    checks_clear(p);
    if (!p->discovered) {
        poll_set(p, PS_DISCOVERING);
        int rc = discovery_start(p->disc, p->url);
        if (rc != 0)
            poll_fail(p, 0, -1, rs_strerror(rc));
        return;
    }
    job_step(p);
}

/* The feeds are done: the Source Description and the Capability Lists,
 * when they are due (a minute since, or one not held). */
static void
caps_begin(struct poller *p)
{
    bool all = true;
    for (size_t i = 0; i < p->ncaps; i++)
        if (!p->caps[i].gone && p->caps[i].doc == NULL)
            all = false;
    if (all && p->caps_read_ms != 0 &&
        rs_time_mono_ms() - p->caps_read_ms < POLLER_CAPS_EVERY_MS) {
        poll_done(p);
        return;
    }
    poll_set(p, PS_CAPABILITIES);
    p->item = p->description != NULL ? -1 : 0;
    caps_step(p);
}

/* ---------------------------------------------------------------- API */

static char *
dup_s(const char *s, bool *fail)
{
    if (s == NULL)
        return NULL;
    char *d = rs_strdup(s);
    if (d == NULL)
        *fail = true;
    return d;
}

struct poller *
poller_new(const struct poller_opts *o, const char **err)
{
    *err = "out of memory";
    struct poller *p = rs_calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->o = *o;
    bool fail = false;
    p->name = dup_s(o->name, &fail);
    p->url = dup_s(o->url, &fail);
    p->bridged = dup_s(o->bridged, &fail);
    p->hub = dup_s(o->hub, &fail);
    p->token = dup_s(o->token, &fail);
    if (fail)
        goto fail;
    for (int k = 0; k < OUTBOX_LANES; k++) {
        size_t n = strlen(o->bridged) + 16;
        p->topic[k] = rs_malloc(n);
        if (p->topic[k] == NULL)
            goto fail;
        snprintf(p->topic[k], n, "%s%s", o->bridged,
                 k == OUTBOX_CHANGE ? "changes" : "framework");
    }
    p->feed = rs_malloc(sizeof(*p->feed));
    p->prevf = rs_malloc(sizeof(*p->prevf));
    p->rlf = rs_malloc(sizeof(*p->rlf));
    p->askf = rs_malloc(sizeof(*p->askf));
    p->checks = rs_calloc(RLDIFF_CHECKS, sizeof(*p->checks));
    if (p->feed == NULL || p->prevf == NULL || p->rlf == NULL ||
        p->askf == NULL || p->checks == NULL)
        goto fail;
    p->cur_interval_ms = o->interval_ms;
    p->backoff = (struct rs_backoff){
        .first_ms = (uint64_t)(o->interval_ms > 0 ? o->interval_ms : 1000),
        .max_ms = (uint64_t)(o->interval_ms > POLLER_BACKOFF_MAX_MS
                                 ? o->interval_ms : POLLER_BACKOFF_MAX_MS),
        .below_pct = 20, .above_pct = 20, .clamp = 1,
    };
    rs_backoff_seed(&p->backoff, (uint64_t)rs_time_now() ^
                                     (uint64_t)getpid() << 32 ^
                                     rs_fnv1a64(o->name));
    p->last_poll = p->last_change = RS_TIME_NONE;
    bool fresh;
    if (store_source(o->st, o->name, o->url, &p->src, &fresh) != 0) {
        *err = "the state cannot hold the Source";
        goto fail;
    }
    if (fresh)
        rs_log_kv(RS_LOG_INFO, "a new source: its first read is its "
                  "baseline", "source", o->name, "url", o->url, NULL);
    struct reader_opts ro = { .base = o->base, .http = o->http,
                              .timeout_ms = o->timeout_ms };
    p->rd = reader_new(&ro);
    p->cs = clscan_new(o->st);
    p->rdf = rldiff_new(o->st);
    p->disc = discovery_new(o->base, o->http, on_discovered, p);
    p->timer = evtimer_new(o->base, on_timer, p);
    p->hub_wait = evtimer_new(o->base, on_hub_wait, p);
    p->ask_timer = evtimer_new(o->base, on_ask_timer, p);
    if (p->rd == NULL || p->cs == NULL || p->rdf == NULL || p->disc == NULL ||
        p->timer == NULL || p->hub_wait == NULL || p->ask_timer == NULL)
        goto fail;
    struct walk_opts wo = {
        .base = o->base,
        .rd = p->rd,
        .st = o->st,
        .tail_first = true,
        .wait_ms = walk_wait_ms,
        .requested = walk_requested,
        .on_entry = on_walk_entry,
        .on_bad_entry = on_walk_bad_entry,
        .on_doc = on_walk_doc,
        .on_chunk = on_walk_chunk,
        .on_done = on_walk_done,
        .ud = p,
    };
    p->clw = walk_new(&wo);
    wo.tail_first = false;
    p->rlw = walk_new(&wo);
    if (p->clw == NULL || p->rlw == NULL)
        goto fail;
    struct outbox_opts oo = {
        .base = o->base,
        .http = o->hub_http,
        .st = o->st,
        .src = p->src,
        .name = o->name,
        .hub = o->hub,
        .topic = { p->topic[0], p->topic[1] },
        .token = o->token,
        .bridged = o->bridged,
        .batch_ms = o->batch_ms,
        .retry_max_ms = o->retry_max_ms,
        .max_bytes = o->max_notification,
        .timeout_ms = 10000,
        .on_accepted = on_accepted,
        .ud = p,
    };
    p->ob = outbox_new(&oo, err);
    if (p->ob == NULL)
        goto fail;
    struct rs_channels_opts co = {
        .base = o->base,
        .http = o->hub_http,
        .hub = o->hub,
        .topic = { p->topic[0], p->topic[1] },
        .token = o->token,
        .on_change = on_channels_change,
        .on_settled = on_channels_settled,
        .ud = p,
    };
    p->ch = rs_channels_new(&co, err);
    if (p->ch == NULL)
        goto fail;
    *err = NULL;
    return p;
fail:
    poller_free(p);
    return NULL;
}

void
poller_free(struct poller *p)
{
    if (p == NULL)
        return;
    walk_free(p->clw);
    walk_free(p->rlw);
    discovery_free(p->disc);
    reader_free(p->rd);
    clscan_free(p->cs);
    rldiff_free(p->rdf);
    outbox_free(p->ob);
    rs_channels_free(p->ch);
    if (p->timer != NULL)
        event_free(p->timer);
    if (p->hub_wait != NULL)
        event_free(p->hub_wait);
    if (p->ask_timer != NULL)
        event_free(p->ask_timer);
    for (size_t i = 0; i < p->ncaps; i++)
        cap_clear(&p->caps[i]);
    jobs_clear(p);
    if (p->checks != NULL)
        checks_clear(p);
    rs_free(p->checks);
    rs_free(p->feed);
    rs_free(p->prevf);
    rs_free(p->rlf);
    rs_free(p->askf);
    rs_free(p->reqlog);
    rs_free(p->description);
    rs_free(p->last_error);
    for (int k = 0; k < OUTBOX_LANES; k++)
        rs_free(p->topic[k]);
    rs_free(p->name);
    rs_free(p->url);
    rs_free(p->bridged);
    rs_free(p->hub);
    if (p->token != NULL)
        explicit_bzero(p->token, strlen(p->token));
    rs_free(p->token);
    rs_free(p);
}

void
poller_start(struct poller *p)
{
    if (p->state != PS_IDLE)
        return;
    struct timeval tv = rs_time_tv_ms(POLLER_HUB_WAIT_MS);
    evtimer_add(p->hub_wait, &tv);
    rs_channels_refresh(p->ch);
    outbox_kick(p->ob);          /* what waited in the outbox */
    asks_arm(p);                 /* an ask held before a restart */
    poll_begin(p);
}

void
poller_drain(struct poller *p)
{
    if (p->state == PS_STOPPED)
        return;
    poll_set(p, PS_STOPPED);
    event_del(p->timer);
    event_del(p->ask_timer);     /* a held ask stays in the state */
    staging_close(p);
    /* a walk or a read under way is abandoned: what it staged is
     * scratch, and nothing of it was committed */
    if (walk_busy(p->clw)) {
        walk_free(p->clw);
        p->clw = NULL;
    }
    if (walk_busy(p->rlw)) {
        walk_free(p->rlw);
        p->rlw = NULL;
    }
    discovery_free(p->disc);
    p->disc = NULL;
    if (reader_busy(p->rd))
        reader_cancel(p->rd);
    outbox_flush(p->ob);
}

bool
poller_idle(const struct poller *p)
{
    return outbox_idle(p->ob);
}

void
poller_reload(struct poller *p)
{
    outbox_resume(p->ob);
    rs_channels_refresh(p->ch);
}

int
poller_set_token(struct poller *p, const char *token)
{
    char *t = NULL;
    if (token != NULL && (t = rs_strdup(token)) == NULL)
        return RS_ENOMEM;
    int rc = outbox_set_token(p->ob, token);
    if (rc == 0)
        rc = rs_channels_set_token(p->ch, token);   /* its lookups too */
    if (rc != 0) {
        rs_free(t);
        return rc;
    }
    if (p->token != NULL)
        explicit_bzero(p->token, strlen(p->token));
    rs_free(p->token);
    p->token = t;
    return 0;
}

/* ------------------------------------------------------------ queries */

const char *poller_name(const struct poller *p) { return p->name; }
const char *poller_url(const struct poller *p) { return p->url; }
const char *poller_bridged(const struct poller *p) { return p->bridged; }

const char *
poller_topic(const struct poller *p, enum outbox_lane lane)
{
    return p->topic[lane];
}

const char *
poller_state(const struct poller *p)
{
    return poll_state_names[p->state];
}

bool
poller_ready(const struct poller *p)
{
    for (size_t i = 0; i < p->ncaps; i++)
        if (!p->caps[i].gone && p->caps[i].doc != NULL)
            return true;
    return false;
}

size_t
poller_ncaps(const struct poller *p)
{
    return p->ncaps;
}

bool
poller_cap(const struct poller *p, size_t i, struct poller_cap *out)
{
    if (i >= p->ncaps || p->caps[i].gone || p->caps[i].k < 0)
        return false;
    *out = (struct poller_cap){ p->caps[i].k, p->caps[i].url,
                                p->caps[i].doc };
    return true;
}

bool
poller_cap_k(const struct poller *p, int64_t k, struct poller_cap *out)
{
    for (size_t i = 0; i < p->ncaps; i++)
        if (p->caps[i].k == k)
            return poller_cap(p, i, out);
    return false;
}

const char *
poller_ws(const struct poller *p, enum outbox_lane lane)
{
    return rs_channels_ws(p->ch, (enum rs_channels_kind)lane);
}

const char *
poller_hub(const struct poller *p, enum outbox_lane lane)
{
    return rs_channels_hub(p->ch, (enum rs_channels_kind)lane);
}

void
poller_stats(const struct poller *p, struct poller_stats *out)
{
    *out = (struct poller_stats){
        .last_poll = p->last_poll,
        .last_change = p->last_change,
        .polls = p->polls,
        .errors = p->errors,
        .entries_skipped = p->skipped,
        .last_error = p->last_error,
    };
    outbox_stats(p->ob, &out->outbox);
}
