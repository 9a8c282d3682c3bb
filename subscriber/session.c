/*
 * session.c - the sync engine of one rssub session (session.h). Three
 * kinds of state, each changed in one place that logs it:
 *
 * - the session (session_set): idle -> discovering -> pulling ->
 *   applying -> ready (run) or done (sync, audit); draining from any;
 * - each Capability List's activity (set_phase): waiting, dump,
 *   baseline, catch-up (Change Lists), gap pull, reconcile, audit;
 * - each Capability List's transport (set_transport): websocket,
 *   websub, poll.
 *
 * One pull runs at a time, from a small queue (one entry per list and
 * kind: two asks for the same pull are one pull, from the earlier time).
 * Every mechanism lives in a module; this file decides when each runs.
 */
#include <errno.h>
#include <event2/event.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RS_LOG_MODULE "rssub"
#include "apply.h"
#include "capwatch.h"
#include "discovery.h"
#include "dump.h"
#include "follow.h"
#include "hubsub.h"
#include "ledger.h"
#include "mirror.h"
#include "pathmap.h"
#include "pull.h"
#include "rs_alloc.h"
#include "rs_backoff.h"
#include "rs_fnv.h"
#include "rs_http.h"
#include "rs_log.h"
#include "rs_metrics.h"
#include "rs_time.h"
#include "rs_url.h"
#include "rs_wsclose.h"
#include "session.h"
#include "stray.h"
#include "wsclient.h"

#define SESSION_MAX_SETS 16
#define SESSION_PROGRESS_MS 250
#define SESSION_READY_TICK_MS 200   /* run: is the first sync applied yet? */
/* A channel replays from this long before a pull began: the hub's ids are
 * its clock, the Source's change times are the Source's. */
#define SESSION_MARK_MARGIN_US (60 * 1000000LL)
/* After a failed pull (the Source may be down): 1 s doubling to 5 min. */
static const struct rs_backoff SESSION_PULL_BACKOFF = { .first_ms = 1000,
                                                        .max_ms = 300000 };
/* A report-only audit beside a running daemon (ledger_writer_pid) may see
 * a file it renamed into place before it committed the file's row: files
 * that changed this recently are not judged then. */
#define SESSION_STRAY_SETTLE_US (60 * 1000000LL)
/* Resources refused (401, 403), each a different one, with no fetch
 * going through for a while: the Source refuses us, not them (a token
 * revoked halfway). Fewer, or a shorter while (a forbidden directory
 * listed in one run, its fetches answered together), are those
 * resources' own failures. */
#define SESSION_REFUSED_SPELL 8
#define SESSION_REFUSED_SPELL_US (2 * 1000000LL)

/* ----------------------------------------------------------------- states */

enum session_state {
    SESSION_IDLE,          /* made, not started */
    SESSION_DISCOVERING,   /* looking for the Capability Lists */
    SESSION_PULLING,       /* the first round of pulls (run), the pulls
                              (sync, audit) */
    SESSION_APPLYING,      /* their todo rows are being applied */
    SESSION_READY,         /* run: the first sync is applied; following */
    SESSION_DRAINING,      /* stopping: writes in flight finish */
    SESSION_DONE,          /* on_end has run */
};

static const char *const session_state_names[] = {
    "idle", "discovering", "pulling", "applying", "ready", "draining", "done"
};

/* What a Capability List is doing now. */
enum set_phase {
    SET_WAITING,           /* nothing under way for it */
    SET_DUMP,              /* unpacking its Resource Dump */
    SET_BASELINE,          /* reading its Resource List the first time */
    SET_CATCHUP,           /* reading its Change Lists */
    SET_GAP_PULL,          /* ...after a gap in push */
    SET_RECONCILE,         /* reading its Resource List again */
    SET_AUDIT,             /* comparing the mirror with it */
};

static const char *const set_phase_names[] = {
    "waiting", "dump", "baseline", "catch-up", "gap pull", "reconcile",
    "audit"
};

/* How a set's changes come now. Push is preferred (WebSocket, then
 * WebSub); polling Change Lists stands in while push cannot give a
 * gap-free stream: no channel offered (yet), the channel down longer than
 * --push-timeout, a WebSub subscription refused. */
enum transport { TR_NONE, TR_WEBSOCKET, TR_WEBSUB, TR_POLL, TR_COUNT };

static const char *const transport_names[TR_COUNT] = {
    "none", "websocket", "websub", "poll"
};

enum pull_why { WHY_START, WHY_GAP, WHY_FRAMEWORK, WHY_POLL, WHY_AUDIT };

/* Whether the Source lets us read, a machine of its own (access_set):
 * a 401 or 403 can come in any session state, from discovery, a pull or
 * a fetch. refused: the last word from the Source's origin was one of
 * those; ok: a discovery or a pull went through since. */
enum access { ACCESS_UNKNOWN, ACCESS_OK, ACCESS_REFUSED, ACCESS_COUNT };

static const char *const access_names[ACCESS_COUNT] = {
    "unknown", "ok", "refused"
};

/* One Capability List followed. */
struct set {
    struct session *s;
    struct discovery_set *d;      /* in s->disc; replaced when the list is
                                     read again and offers otherwise */
    char *key;                    /* positions: "<caplist>" */
    char *source_key;             /* "<caplist>#source" */
    enum set_phase phase;
    enum transport tr;
    struct follow *follow;        /* run */
    struct event *ev_push_to;     /* run: --push-timeout after a channel
                                     went down, the transport is judged
                                     again (not at the next poll tick) */
    struct capwatch *cw;          /* run: re-reads the Capability List */
    char *websub_topic[2];        /* subscribed by WebSub (copies), or NULL */
    bool websub_failing;          /* the change topic's subscription was
                                     refused, failed or expired, or its
                                     hub does not answer its probe */
    char websub_why[320];         /* hubsub's last word on it */
    rs_time_t tr_since;           /* when tr was taken up (wall clock) */
    char tr_why[320];             /* why tr (set_transport's why) */
    rs_time_t covered;            /* when the last pull that read the
                                     Source to the end began: a channel
                                     taken up later replays from before it */
    bool baselined;               /* persisted (ledger meta KEY) */
    bool dumped;                  /* --dump: the dump was unpacked */
    rs_time_t dump_at;            /* a complete Resource Dump's at: the
                                     baseline's Change Lists are read from
                                     it, not the Resource List
                                     (RS_TIME_NONE: reconcile) */
    bool reconcile_owed;          /* a new Resource List was announced
                                     within --reconcile-min-interval of
                                     the last reconcile: reconcile when it
                                     is up (ev_reconcile) */
};

struct job_q {
    struct set *set;
    enum pull_kind kind;
    enum pull_why why;
    rs_time_t since;              /* CHANGES: read from no later than this
                                     (RS_TIME_NONE: the set's mark) */
    bool changedumped;            /* CHANGES: the Change Dump was tried */
};

struct session {
    struct session_opts o;
    enum session_state state;
    struct apply *apply;
    struct pull *pull;
    struct dump *dump;
    bool dumping_changes;         /* the dump under way is a Change Dump */
    struct discovery *discovery;
    struct discovery_result *disc;
    struct set sets[SESSION_MAX_SETS];
    size_t nsets;
    struct job_q q[64];
    size_t nq;
    struct set *pulling;          /* the set whose pull is under way */
    enum pull_why pull_why;
    rs_time_t pull_dump_at;       /* the pull under way reads the Change
                                     Lists after a dump from its at
                                     (RS_TIME_NONE: it does not) */
    rs_time_t pull_mark;          /* when the first pulls began */
    rs_time_t pull_started;       /* when the pull under way began */
    bool pull_failed;             /* the last pull failed: not ready */
    int64_t first_round_seq;      /* APPLYING (run): the todo rows up to
                                     this seq are what the first pulls
                                     queued */
    bool audit_dirty;             /* audit found differences */
    bool deletions_held;          /* a reconcile hit the --max-delete valve */
    bool strays_due;              /* run: the periodic audit's last step */
    uint64_t skipped;             /* malformed entries skipped (pull.h) */
    bool list_holed;              /* the last reconcile or audit skipped
                                     entries: its list has a hole, so no
                                     stray file is removed on its word */
    unsigned unsubscribing;       /* WebSub unsubscriptions not confirmed */
    uint64_t refused;             /* URIs refused by this session */
    uint64_t refused_res[SESSION_REFUSED_SPELL];   /* FNV-1a of the URIs */
    unsigned refused_spell;       /* ...refused (401/403) since a fetch
                                     last went through */
    rs_time_t refused_since;      /* the first of them */
    unsigned pull_fails;          /* run: failed pulls in a row */
    enum access access;
    /* the first refused discovery probe of this refusal spell, said when
     * discovery finds nothing (once per spell in run) */
    char refused_url[1024];
    long refused_status;
    bool refusal_told;
    unsigned disc_fails;          /* run: discoveries refused in a row */
    struct set *retry_set;
    enum pull_kind retry_kind;
    rs_time_t last_reconcile;
    int exit_code;
    struct event *ev_root;        /* SESSION_ROOT_CHECK_MS, writers */
    struct event *ev_poll, *ev_pull, *ev_audit, *ev_progress,
        *ev_retry_pull, *ev_ready, *ev_end, *ev_reconcile, *ev_retry_disc,
        *ev_state;    /* commits failed: pull what the lost batches took in */
    int metrics_port;
    struct rs_metrics_counter *m_applied[APPLY_OUTCOMES];
    struct rs_metrics_counter *m_fallback[4];
    struct rs_metrics_counter *m_strays;
    struct rs_metrics_counter *m_held;
    struct rs_metrics_counter *m_skipped;
    struct rs_metrics_counter *m_transport[TR_COUNT];
    struct rs_metrics_counter *m_refused;
    struct rs_metrics_counter *m_state_errors;
    struct rs_metrics_gauge *m_access[ACCESS_COUNT];
    rs_time_t counted_at;         /* todo_counts' cache (metrics) */
    int64_t count_pending, count_failed;
    uint64_t listed;              /* entries read by pulls (progress) */
    uint64_t listed_before;       /* ... by the pulls before this one */
};

static void run_queue(struct session *s);
static void follow_record(struct session *s);
static void mark_first_round(struct session *s);
static void after_pulls(struct session *s);

static void
session_set(struct session *s, enum session_state to, const char *why)
{
    if (s->state == to)
        return;
    rs_log_kv(to == SESSION_READY || to == SESSION_DRAINING ? RS_LOG_INFO
              : RS_LOG_DEBUG, "session", "from", session_state_names[s->state],
              "to", session_state_names[to], "why", why, NULL);
    s->state = to;
}

static void
set_phase(struct set *st, enum set_phase to, const char *why)
{
    if (st->phase == to)
        return;
    if (rs_log_enabled(RS_LOG_DEBUG))
        rs_log_kv(RS_LOG_DEBUG, "capability list", "caplist",
                  st->d->caplist, "from", set_phase_names[st->phase], "to",
                  set_phase_names[to], "why", why, NULL);
    st->phase = to;
}

static void
access_set(struct session *s, enum access to, const char *why)
{
    if (s->access == to)
        return;
    rs_log_kv(to == ACCESS_REFUSED || s->access == ACCESS_REFUSED
              ? RS_LOG_INFO : RS_LOG_DEBUG, "source access", "from",
              access_names[s->access], "to", access_names[to], "why", why,
              NULL);
    rs_metrics_gauge_set(s->m_access[s->access], 0);
    rs_metrics_gauge_set(s->m_access[to], 1);
    s->access = to;
    if (to != ACCESS_REFUSED) {
        s->refused_url[0] = '\0';
        s->refusal_told = false;
    }
}

/* ------------------------------------------------------------- helpers */

static bool
list_empty(char *const *l)
{
    return l == NULL || l[0] == NULL;
}

static const char *
cmd_name(enum session_cmd c)
{
    static const char *const n[] = { "run", "sync", "audit" };
    return n[c];
}

/* A state write or read that failed where the caller can go on: said
 * once in the log, and the next commit or start redoes the work. */
static void
state_warn(struct session *s, int rc, const char *what)
{
    if (rc < 0)
        rs_log_kv(RS_LOG_ERROR, "state", "what", what, "error",
                  ledger_errstr(s->o.ledger), NULL);
}

static void
set_last_error(struct session *s, const char *what)
{
    char now[RS_TIME_BUFSZ];

    rs_time_format(rs_time_now(), now);
    if (s->o.c.readonly || apply_txn(s->apply) != 0)
        return;
    state_warn(s, ledger_meta_set(s->o.ledger, "last_error", what),
               "last error");
    state_warn(s, ledger_meta_set(s->o.ledger, "last_error_at", now),
               "last error");
}

static rs_time_t
source_dt(struct set *st)
{
    rs_time_t dt = RS_TIME_NONE;
    char *id = NULL;

    if (ledger_pos_get(st->s->o.ledger, st->source_key, &id, &dt) != 0)
        dt = RS_TIME_NONE;
    rs_free(id);
    return dt;
}

static void
raise_source_dt(struct set *st, rs_time_t dt)
{
    struct session *s = st->s;
    rs_time_t cur = source_dt(st);

    if (dt == RS_TIME_NONE || (cur != RS_TIME_NONE && cur >= dt))
        return;
    if (apply_txn(s->apply) == 0)
        state_warn(s, ledger_pos_set(s->o.ledger, st->source_key, NULL, dt),
                   "position");
}

/* Does the mirror hold resources of this Source (the state is of one
 * Source: rssub.c's check_source)? */
static bool
mirror_holds_some(struct session *s)
{
    int64_t live = 0;

    return ledger_res_count(s->o.ledger, &live, NULL) == 0 && live > 0;
}

/* The set's mirror is a baseline of it (persisted: a restart pulls only
 * what changed). */
static void
mark_baselined(struct set *st)
{
    struct session *s = st->s;

    if (apply_txn(s->apply) == 0 &&
        ledger_meta_set(s->o.ledger, st->key, "baselined") == 0)
        st->baselined = true;
}

/* ----------------------------------------------------------- progress */

static void
on_progress_tick(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;
    struct apply_stats as;
    uint64_t done;

    (void)fd;
    (void)what;
    apply_stats(s->apply, &as);
    done = as.outcomes[APPLY_CREATED] + as.outcomes[APPLY_UPDATED] +
           as.outcomes[APPLY_DELETED] + as.outcomes[APPLY_UNCHANGED];
    fprintf(stderr, "\r%s: listed %llu, applied %llu, failed %llu, "
            "%.1f MB, in flight %u   ", cmd_name(s->o.cmd),
            (unsigned long long)s->listed, (unsigned long long)done,
            (unsigned long long)as.outcomes[APPLY_FAILED],
            (double)as.bytes / 1e6, as.in_flight);
    fflush(stderr);
}

static void
progress_end(struct session *s)
{
    if (s->ev_progress != NULL && evtimer_pending(s->ev_progress, NULL)) {
        event_del(s->ev_progress);
        on_progress_tick(-1, 0, s);
        fputc('\n', stderr);
    }
}

/* ---------------------------------------------------------- the end */

/* on_end runs from the loop, never inside a module's callback. */
static void
on_end_event(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;

    (void)fd;
    (void)what;
    s->o.on_end(s->o.ud, s->exit_code);
}

static void
finish(struct session *s, int code)
{
    struct timeval now = { 0, 0 };

    if (s->state == SESSION_DONE)
        return;
    s->exit_code = code;
    progress_end(s);
    session_set(s, SESSION_DONE, "finished");
    evtimer_add(s->ev_end, &now);
}

static void
summary(struct session *s, const char *msg)
{
    struct apply_stats as;
    char c[24], u[24], d[24], f[24], b[24], sec[32];
    double secs;

    apply_stats(s->apply, &as);
    secs = (double)(rs_time_now() - s->pull_mark) / 1e6;
    snprintf(c, sizeof(c), "%llu", (unsigned long long)
             (as.outcomes[APPLY_CREATED] + as.outcomes[APPLY_UPDATED]));
    snprintf(u, sizeof(u), "%llu",
             (unsigned long long)as.outcomes[APPLY_UNCHANGED]);
    snprintf(d, sizeof(d), "%llu",
             (unsigned long long)as.outcomes[APPLY_DELETED]);
    snprintf(f, sizeof(f), "%llu",
             (unsigned long long)as.outcomes[APPLY_FAILED]);
    snprintf(b, sizeof(b), "%llu", (unsigned long long)as.bytes);
    snprintf(sec, sizeof(sec), "%.3f", secs);
    rs_log_kv(RS_LOG_INFO, msg, "fetched", c, "unchanged", u, "deleted", d,
              "failed", f, "bytes", b, "seconds", sec, NULL);
}

/* List the resources that could not be mirrored. */
static int
on_failed_row(void *ud, const struct ledger_todo *t)
{
    (void)ud;
    rs_log_kv(RS_LOG_ERROR, "not mirrored", "uri", t->uri, "error",
              t->last_error != NULL ? t->last_error : "", NULL);
    return 0;
}

/* ------------------------------------------------------------- pulls */

static void
queue_pull_since(struct set *st, enum pull_kind kind, enum pull_why why,
                 rs_time_t since)
{
    struct session *s = st->s;

    for (size_t i = 0; i < s->nq; i++) {
        struct job_q *q = &s->q[i];
        if (q->set == st && q->kind == kind) {
            /* One pull serves both: from the earlier of the two. */
            if (since != RS_TIME_NONE &&
                (q->since == RS_TIME_NONE || since < q->since))
                q->since = since;
            return;
        }
    }
    if (s->nq == sizeof(s->q) / sizeof(s->q[0]))
        return;
    s->q[s->nq++] = (struct job_q){ .set = st, .kind = kind, .why = why,
                                    .since = since };
    if (s->pulling == NULL)
        run_queue(s);
}

static void
queue_pull(struct set *st, enum pull_kind kind, enum pull_why why)
{
    queue_pull_since(st, kind, why, RS_TIME_NONE);
}

static void
on_pull_progress(void *ud, uint64_t entries)
{
    struct session *s = ud;

    s->listed = s->listed_before + entries;
}

static void
on_diff(void *ud, const char *uri, const char *what)
{
    struct session *s = ud;

    if (strcmp(what, "refused") == 0) {
        /* Listed, but not for this mirror (--prefix, --map, an unsafe
         * path): said, and not a difference. */
        rs_log_kv(RS_LOG_WARN, "audit: listed but refused here", "uri", uri,
                  NULL);
        return;
    }
    s->audit_dirty = true;
    if (s->o.cmd == SESSION_AUDIT)
        printf("%s %s\n", what, uri);
    else
        rs_log_kv(RS_LOG_WARN, "audit: differs", "uri", uri, "what", what,
                  NULL);
}

/* ------------------------------------------------------------- strays */

struct stray_run {
    struct session *s;
    bool report;                  /* the first walk tells each one */
    bool fix;                     /* the second removes them */
    uint64_t removed, kept;
};

static int
on_stray(void *ud, const char *rel, const struct stat *st)
{
    struct stray_run *sr = ud;
    struct session *s = sr->s;
    int rc;

    (void)st;
    if (sr->report && s->o.cmd == SESSION_AUDIT)
        printf("stray %s\n", rel);
    else if (sr->report)
        rs_log_kv(RS_LOG_WARN, "audit: stray file", "path", rel, NULL);
    if (!sr->fix)
        return 0;
    if ((rc = mirror_remove(s->o.mirror, rel)) == 0 || rc == RS_ENOTFOUND) {
        sr->removed++;
        return 0;
    }
    sr->kept++;
    rs_log_kv(RS_LOG_ERROR, "cannot remove a stray file", "path", rel,
              "error", mirror_errstr(s->o.mirror), NULL);
    return 0;
}

/* The valve of a reconcile (pull.c's deletions_allowed), for stray files:
 * a --mirror that names the wrong directory, or a mapping changed, must
 * not empty it on an audit --fix. */
static bool
strays_allowed(const struct session *s, const struct stray_stats *st)
{
    if (s->o.c.force_delete)
        return true;
    if (s->o.c.max_delete > 0 && st->strays > s->o.c.max_delete)
        return false;
    return s->o.c.max_delete_share == 0 ||
           (double)st->strays * 100.0 <=
               (double)st->files * (double)s->o.c.max_delete_share;
}

/* An audit's last step: files in the mirror that no resource accounts
 * for (stray.h), reported, and removed (or moved to the attic) with fix,
 * in a second walk, when the valve allows (strays_allowed). False when it
 * could not be completed. */
static bool
check_strays(struct session *s, bool fix)
{
    bool readonly = s->o.c.readonly;
    struct stray_run sr = { .s = s, .report = true };
    struct stray_stats st;
    char n[4][24];
    rs_time_t not_before = readonly && s->o.c.state_path != NULL &&
                           ledger_writer_pid(s->o.c.state_path)
                           ? rs_time_now() - SESSION_STRAY_SETTLE_US
                           : RS_TIME_NONE;
    int rc;

    if (!readonly && apply_txn(s->apply) != 0)
        return false;
    rc = stray_scan(s->o.ledger, s->o.mirror, not_before, on_stray, &sr, &st);
    rs_metrics_counter_add(s->m_strays, st.strays);
    if (rc == 0 && fix && !readonly && st.strays > 0) {
        if (s->list_holed) {
            /* A file a skipped entry stands for has no row: it looks
             * stray, and is not (log_skipped). */
            rs_log_kv(RS_LOG_ERROR, "the resource list had malformed "
                      "entries skipped: removing no stray file this run",
                      NULL);
        } else if (strays_allowed(s, &st)) {
            struct stray_stats again;
            sr.report = false;
            sr.fix = true;
            rc = stray_scan(s->o.ledger, s->o.mirror, not_before, on_stray,
                            &sr, &again);
        } else {
            snprintf(n[0], 24, "%llu", (unsigned long long)st.strays);
            snprintf(n[1], 24, "%llu", (unsigned long long)st.files);
            rs_log_kv(RS_LOG_ERROR, "the mirror holds more stray files than "
                      "--max-delete or --max-delete-share allow: removing "
                      "none of them (is --mirror the right directory? "
                      "--force-delete removes them)", "strays", n[0],
                      "files", n[1], NULL);
            rs_metrics_counter_add(s->m_held, st.strays);
            s->deletions_held = true;
            set_last_error(s, "stray files held back by "
                           "--max-delete(-share)");
        }
    }
    if (st.strays > sr.removed)
        s->audit_dirty = true;
    snprintf(n[0], 24, "%llu", (unsigned long long)st.files);
    snprintf(n[1], 24, "%llu", (unsigned long long)st.strays);
    snprintf(n[2], 24, "%llu", (unsigned long long)sr.removed);
    snprintf(n[3], 24, "%llu", (unsigned long long)st.recent);
    rs_log_kv(st.strays > 0 ? RS_LOG_WARN : RS_LOG_INFO, "mirror walked for "
              "stray files", "files", n[0], "strays", n[1], "removed", n[2],
              "too_recent_to_judge", n[3], NULL);
    if (rc != 0) {
        rs_log_kv(RS_LOG_ERROR, "cannot look for stray files", "error",
                  rs_strerror(rc), "state", ledger_errstr(s->o.ledger),
                  "mirror", mirror_errstr(s->o.mirror), NULL);
        return false;
    }
    return sr.kept == 0;
}

static void
on_retry_pull(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;

    (void)fd;
    (void)what;
    queue_pull(s->retry_set, s->retry_kind, WHY_START);
}

static void
retry_pull_later(struct set *st, enum pull_kind kind)
{
    struct session *s = st->s;
    struct timeval tv;

    tv = rs_time_tv_ms((int64_t)rs_backoff_base(&SESSION_PULL_BACKOFF,
                                        ++s->pull_fails));
    s->retry_set = st;
    s->retry_kind = kind;
    evtimer_add(s->ev_retry_pull, &tv);
}

/* A reconcile or audit read: what it found, and what its judgement
 * rests on - the Resource List's age, and whether Change Lists brought
 * it forward (docs/subscriber.md, Audit). */
static void
log_snapshot_read(struct set *st, const struct pull_report *r,
                  char n[][24])
{
    char at[RS_TIME_BUFSZ] = "-", age[32] = "-", ch[24], ex[24], rc[24];

    if (r->snapshot != RS_TIME_NONE) {
        rs_time_format(r->snapshot, at);
        snprintf(age, sizeof(age), "%.0f",
                 (double)(rs_time_now() - r->snapshot) / 1e6);
    }
    snprintf(ch, sizeof(ch), "%llu", (unsigned long long)r->changes);
    snprintf(ex, sizeof(ex), "%llu", (unsigned long long)r->explained);
    snprintf(rc, sizeof(rc), "%llu", (unsigned long long)r->recent);
    rs_log_kv(RS_LOG_INFO, r->kind == PULL_AUDIT ? "audited"
              : "resource list read", "caplist", st->d->caplist, "entries",
              n[0], "added", n[1], "updated", n[2], "deleted", n[3],
              "unchanged", n[4], "resourcelist_at", at, "age_seconds", age,
              "changes_since", ch, "brought_forward", ex,
              "too_recent_to_judge", rc, NULL);
    if (r->changes_error[0] != '\0')
        rs_log_kv(RS_LOG_WARN, "the resource list is judged alone",
                  "caplist", st->d->caplist, "why", r->changes_error, NULL);
    else if (st->d->changelist == NULL)
        rs_log_kv(RS_LOG_INFO, "no change list: the resource list is judged "
                  "alone; resources the mirror changed after it are too "
                  "recent to judge", "caplist", st->d->caplist,
                  "age_seconds", age, NULL);
    else if (r->changes_read && !r->changes_reach_back)
        rs_log_kv(RS_LOG_WARN, "the change lists do not reach back to the "
                  "resource list: changes in between are too recent to "
                  "judge", "caplist", st->d->caplist, NULL);
}

/* One malformed entry of a Source's document, skipped (pull.h): told
 * once per read of the document, where and why. */
static void
on_pull_bad_entry(void *ud, const char *url, unsigned line, const char *loc,
                  const char *why)
{
    struct session *s = ud;
    char l[16];

    snprintf(l, sizeof(l), "%u", line);
    rs_log_kv(RS_LOG_WARN, "skipped a malformed entry", "url", url, "line", l,
              "loc", loc != NULL ? loc : "-", "why", why, NULL);
    s->skipped++;
    rs_metrics_counter_inc(s->m_skipped);
}

/* A pull that skipped malformed entries: say what that cost, and, for a
 * Resource List, that nothing was deleted on its word. */
static void
log_skipped(struct session *s, struct set *st, const struct pull_report *r)
{
    char n[24], d[24], msg[160];

    if (r->kind != PULL_CHANGES)
        s->list_holed = r->skipped > 0;
    if (r->skipped == 0)
        return;
    snprintf(n, sizeof(n), "%llu", (unsigned long long)r->skipped);
    snprintf(d, sizeof(d), "%llu", (unsigned long long)r->deletions_unjudged);
    if (r->kind == PULL_CHANGES) {
        rs_log_kv(RS_LOG_WARN, "malformed entries of the change lists "
                  "skipped: the rest was applied", "caplist", st->d->caplist,
                  "skipped", n, NULL);
    } else {
        rs_log_kv(RS_LOG_ERROR, "malformed entries skipped: the resource "
                  "list (or the change lists read with it) has a hole that "
                  "may be any resource, so nothing is deleted on its word "
                  "this run", "caplist", st->d->caplist, "skipped", n,
                  "not_deleted", d, NULL);
        if (r->kind == PULL_AUDIT)
            s->audit_dirty = true;
    }
    snprintf(msg, sizeof(msg), "%s malformed entries skipped in the "
             "Source's documents%s", n, r->kind == PULL_CHANGES ? ""
             : " (no deletions from that resource list)");
    set_last_error(s, msg);
}

static void
on_pull_done(void *ud, int rc, const char *err, const struct pull_report *r)
{
    struct session *s = ud;
    struct set *st = s->pulling;
    rs_time_t dump_at = s->pull_dump_at;
    char n[5][24];

    s->pulling = NULL;
    s->pull_dump_at = RS_TIME_NONE;
    set_phase(st, SET_WAITING, rc == 0 ? "pull done" : "pull failed");
    s->listed_before += r->entries;
    if (rc != 0) {
        rs_log_kv(RS_LOG_ERROR, "pull failed", "caplist", st->d->caplist,
                  "error", err, NULL);
        set_last_error(s, err);
        s->pull_failed = true;
        if (s->o.cmd != SESSION_RUN) {
            s->nq = 0;
            finish(s, s->o.cmd == SESSION_AUDIT ? 3 : 1);
            return;
        }
        /* The daemon tries again, backing off (the Source may be down);
         * it is not ready before a first round of pulls succeeded. */
        retry_pull_later(st, r->kind);
        run_queue(s);
        return;
    }
    s->pull_failed = false;
    s->pull_fails = 0;
    access_set(s, ACCESS_OK, "pull done");
    if (r->kind != PULL_AUDIT)
        st->covered = s->pull_started;
    /* A channel closed for a gap waits for this: it replays from a moment
     * before the pull began, so nothing falls between pull and push. The
     * reconcile a too-short Change List asks for comes first. */
    if (st->follow != NULL && r->kind != PULL_AUDIT &&
        (r->kind != PULL_CHANGES || r->reached_back || !st->baselined))
        follow_resume(st->follow, s->pull_started - SESSION_MARK_MARGIN_US);
    snprintf(n[0], 24, "%llu", (unsigned long long)r->entries);
    snprintf(n[1], 24, "%llu", (unsigned long long)r->added);
    snprintf(n[2], 24, "%llu", (unsigned long long)r->updated);
    snprintf(n[3], 24, "%llu", (unsigned long long)r->deleted);
    snprintf(n[4], 24, "%llu", (unsigned long long)r->unchanged);
    if (r->kind == PULL_CHANGES)
        rs_log_kv(RS_LOG_INFO, "change lists read", "caplist",
                  st->d->caplist, "entries", n[0], "added", n[1], "updated",
                  n[2], "deleted", n[3], "unchanged", n[4], NULL);
    else
        log_snapshot_read(st, r, n);
    log_skipped(s, st, r);
    if (r->future > 0) {
        char f[24];
        snprintf(f, sizeof(f), "%llu", (unsigned long long)r->future);
        rs_log_kv(RS_LOG_WARN, "times in the future in the Source's "
                  "documents: taken as of now (is its clock wrong?)",
                  "caplist", st->d->caplist, "count", f, NULL);
    }
    if (r->deletions_held > 0) {
        char h[24], live[24];
        snprintf(h, sizeof(h), "%llu", (unsigned long long)r->deletions_held);
        snprintf(live, sizeof(live), "%lld", (long long)r->mirror_live);
        rs_log_kv(RS_LOG_ERROR, "the resource list leaves out too much of "
                  "the mirror: deleting none of it (a broken Source must not "
                  "wipe a mirror; --force-delete, --max-delete and "
                  "--max-delete-share decide)", "caplist", st->d->caplist,
                  "would_delete", h, "mirror_live",
                  r->mirror_live >= 0 ? live : "-", NULL);
        rs_metrics_counter_add(s->m_held, r->deletions_held);
        s->deletions_held = true;
        set_last_error(s, "deletions held back by --max-delete(-share)");
    }
    if (r->kind == PULL_CHANGES && !r->reached_back) {
        /* What happened before the oldest Change List is unknown. */
        rs_log_kv(RS_LOG_WARN, "change lists do not reach back far enough: "
                  "reconciling with the resource list", "caplist",
                  st->d->caplist, NULL);
        rs_metrics_counter_inc(s->m_fallback[2]);
        queue_pull(st, PULL_RECONCILE, s->pull_why);
    } else if (r->kind == PULL_CHANGES) {
        if (dump_at != RS_TIME_NONE) {
            /* The dump and the Change Lists since its at: a baseline. */
            raise_source_dt(st, dump_at);
            mark_baselined(st);
            rs_log_kv(RS_LOG_INFO, "baseline from the resource dump and the "
                      "change lists since", "caplist", st->d->caplist, NULL);
        }
        raise_source_dt(st, r->newest);
    } else if (r->kind == PULL_RECONCILE) {
        raise_source_dt(st, r->newest);
        mark_baselined(st);
        s->last_reconcile = rs_time_now();
    }
    apply_commit(s->apply);
    run_queue(s);                     /* the next pull, or after_pulls */
    mark_first_round(s);
}

/* Begin the dump of st (the reconcile j waits behind it); false when it
 * cannot be started (the reconcile then fetches everything). */
static bool
start_dump(struct session *s, struct set *st, const struct job_q *j)
{
    int rc;

    /* The reconcile is queued again after the dump and fetches only what
     * it did not hold. */
    memmove(s->q + 1, s->q, s->nq * sizeof(s->q[0]));
    s->q[0] = *j;
    s->nq++;
    if ((rc = dump_start(s->dump, st->d->resourcedump)) == 0) {
        set_phase(st, SET_DUMP, "--dump, first sync");
        rs_log_kv(RS_LOG_INFO, "unpacking the resource dump", "url",
                  st->d->resourcedump, NULL);
        return true;
    }
    memmove(s->q, s->q + 1, --s->nq * sizeof(s->q[0]));
    st->dumped = true;
    rs_log_kv(RS_LOG_WARN, "cannot start the dump", "error", rs_strerror(rc),
              NULL);
    return false;
}

/* Begin a catch-up of st from its Change Dump, from since; the pull of
 * the Change Lists j waits behind it and reads what the packages did not
 * give (an entry the dump applied is found held). False when it cannot be
 * started (the Change Lists then give everything). */
static bool
start_changedump(struct session *s, struct set *st, const struct job_q *j,
                 rs_time_t since)
{
    char t[RS_TIME_BUFSZ];
    int rc;

    memmove(s->q + 1, s->q, s->nq * sizeof(s->q[0]));
    s->q[0] = *j;
    s->q[0].changedumped = true;
    s->q[0].since = since;
    s->nq++;
    if ((rc = dump_start_changes(s->dump, st->d->changedump, since)) == 0) {
        s->dumping_changes = true;
        set_phase(st, SET_DUMP, "--dump, catch-up");
        rs_time_format(since, t);
        rs_log_kv(RS_LOG_INFO, "unpacking the change dump", "url",
                  st->d->changedump, "since", t, NULL);
        return true;
    }
    memmove(s->q, s->q + 1, --s->nq * sizeof(s->q[0]));
    rs_log_kv(RS_LOG_WARN, "cannot start the change dump", "error",
              rs_strerror(rc), NULL);
    return false;
}

static void
run_queue(struct session *s)
{
    struct job_q j;
    struct set *st;
    const char *url;
    rs_time_t since = RS_TIME_NONE;
    int rc;

    while (s->pulling == NULL && s->nq > 0 &&
           s->state != SESSION_DRAINING && s->state != SESSION_DONE) {
        j = s->q[0];
        memmove(s->q, s->q + 1, --s->nq * sizeof(s->q[0]));
        st = j.set;
        s->pull_dump_at = RS_TIME_NONE;
        if (j.kind == PULL_RECONCILE && !st->baselined &&
            st->dump_at != RS_TIME_NONE) {
            /* The baseline's last step after a complete dump: the
             * Change Lists from its at. Once: if they do not reach back
             * that far, the reconcile they ask for reads the list. */
            j.kind = PULL_CHANGES;
            s->pull_dump_at = st->dump_at;
            st->dump_at = RS_TIME_NONE;
        }
        if (j.kind == PULL_CHANGES && s->pull_dump_at == RS_TIME_NONE &&
            (!st->baselined || st->d->changelist == NULL)) {
            if (st->d->changelist == NULL && st->baselined)
                rs_log_kv(RS_LOG_INFO, "no change list: reconciling with the "
                          "resource list", "caplist", st->d->caplist, NULL);
            j.kind = PULL_RECONCILE;
        }
        if (j.kind == PULL_CHANGES) {
            url = st->d->changelist;
            since = source_dt(st);
            /* A seam pull reads from where the mark stood when it was
             * asked for: push may have moved the mark since. */
            if (j.since != RS_TIME_NONE && since != RS_TIME_NONE &&
                j.since < since)
                since = j.since;
            if (s->pull_dump_at != RS_TIME_NONE)
                since = s->pull_dump_at;
            if (since == RS_TIME_NONE)
                j.kind = PULL_RECONCILE;
        }
        if (j.kind != PULL_CHANGES) {
            url = st->d->resourcelist;
            if (url == NULL) {
                rs_log_kv(RS_LOG_ERROR, "the capability list offers no "
                          "resource list", "caplist", st->d->caplist, NULL);
                s->pull_failed = true;
                continue;
            }
            if (j.kind == PULL_RECONCILE && st->baselined)
                rs_metrics_counter_inc(s->m_fallback[1]);
        }
        if (j.why == WHY_POLL && j.kind == PULL_CHANGES)
            rs_metrics_counter_inc(s->m_fallback[3]);
        s->pull_why = j.why;
        s->pulling = st;
        s->pull_started = rs_time_now();
        /* Counted from the start too: a Resource List announced while this
         * one is read would otherwise queue a second read right behind. */
        if (j.kind == PULL_RECONCILE) {
            s->last_reconcile = s->pull_started;
            st->reconcile_owed = false;   /* this read serves it */
        }
        if (j.kind == PULL_RECONCILE && !st->baselined && s->o.c.dump &&
            !st->dumped && st->d->resourcedump != NULL &&
            start_dump(s, st, &j))
            return;
        /* A catch-up after an absence or a gap: the Change Dump's
         * packages since the mark instead of a request per change. */
        if (j.kind == PULL_CHANGES && s->o.c.dump && !j.changedumped &&
            s->pull_dump_at == RS_TIME_NONE &&
            st->d->changedump != NULL && since != RS_TIME_NONE &&
            (j.why == WHY_START || j.why == WHY_GAP) &&
            start_changedump(s, st, &j, since))
            return;
        rc = pull_start(s->pull, j.kind, url,
                        j.kind != PULL_CHANGES ? st->d->changelist : NULL,
                        since);
        if (rc != 0) {
            s->pulling = NULL;
            rs_log_kv(RS_LOG_ERROR, "cannot start a pull", "url", url,
                      "error", rs_strerror(rc), NULL);
            s->pull_failed = true;
            continue;
        }
        set_phase(st, j.kind == PULL_AUDIT ? SET_AUDIT
                  : j.kind == PULL_RECONCILE
                    ? (st->baselined ? SET_RECONCILE : SET_BASELINE)
                  : j.why == WHY_GAP ? SET_GAP_PULL : SET_CATCHUP,
                  j.why == WHY_START ? "start" : j.why == WHY_GAP ? "gap"
                  : j.why == WHY_FRAMEWORK ? "framework notification"
                  : j.why == WHY_POLL ? "poll" : "audit");
        rs_log_kv(RS_LOG_INFO, j.kind == PULL_CHANGES ? "pulling change lists"
                  : j.kind == PULL_AUDIT ? "auditing" : "pulling resource list",
                  "url", url, NULL);
    }
    if (s->pulling == NULL && s->nq == 0)
        after_pulls(s);
}

static void
on_dump_problem(void *ud, const char *uri, const char *why, bool refused)
{
    struct session *s = ud;

    /* A refused URI is not for this mirror: nothing fetches it either. */
    if (refused)
        rs_log_kv(RS_LOG_WARN, "not taken from the dump, and not mirrored "
                  "(refused)", "uri", uri, "why", why, NULL);
    else
        rs_log_kv(RS_LOG_WARN, s->dumping_changes
                  ? "not taken from the dump (left to the change lists, "
                    "which fetch it)"
                  : "not taken from the dump (fetched instead)", "uri", uri,
                  "why", why, NULL);
}

static void
on_changedump_done(struct session *s, struct set *st, int rc, const char *err,
                   const struct dump_report *r)
{
    char n[6][24];

    set_phase(st, SET_WAITING, "change dump done");
    snprintf(n[0], 24, "%llu", (unsigned long long)r->packages);
    snprintf(n[1], 24, "%llu", (unsigned long long)r->written);
    snprintf(n[2], 24, "%llu", (unsigned long long)r->deleted);
    snprintf(n[3], 24, "%llu", (unsigned long long)r->superseded);
    snprintf(n[4], 24, "%llu", (unsigned long long)r->failed);
    snprintf(n[5], 24, "%llu", (unsigned long long)r->bytes);
    if (rc != 0)
        rs_log_kv(RS_LOG_WARN, "change dump failed: reading the change lists "
                  "instead", "error", err, NULL);
    else
        rs_log_kv(RS_LOG_INFO, "change dump unpacked", "packages", n[0],
                  "written", n[1], "deleted", n[2], "superseded", n[3],
                  "failed", n[4], "bytes", n[5], NULL);
    apply_commit(s->apply);
    run_queue(s);
}

static void
on_dump_done(void *ud, int rc, const char *err, const struct dump_report *r)
{
    struct session *s = ud;
    struct set *st = s->pulling;
    char n[4][24];

    s->pulling = NULL;
    if (s->dumping_changes) {
        s->dumping_changes = false;
        on_changedump_done(s, st, rc, err, r);
        return;
    }
    st->dumped = true;
    set_phase(st, SET_WAITING, "dump done");
    snprintf(n[0], 24, "%llu", (unsigned long long)r->packages);
    snprintf(n[1], 24, "%llu", (unsigned long long)r->written);
    snprintf(n[2], 24, "%llu", (unsigned long long)r->failed);
    snprintf(n[3], 24, "%llu", (unsigned long long)r->bytes);
    if (rc != 0)
        rs_log_kv(RS_LOG_WARN, "resource dump failed: fetching the resources "
                  "instead", "error", err, NULL);
    else
        rs_log_kv(RS_LOG_INFO, "resource dump unpacked", "packages", n[0],
                  "written", n[1], "failed", n[2], "bytes", n[3], NULL);
    if (r->reread)
        rs_log_kv(RS_LOG_INFO, "a package of the resource dump was gone: "
                  "its newer generation was read", "caplist",
                  st->d->caplist, NULL);
    if (r->at_future)
        rs_log_kv(RS_LOG_WARN, "the resource dump's at is in the future (is "
                  "the Source's clock wrong?): it is taken to have none, and "
                  "the resource list decides", "caplist", st->d->caplist,
                  NULL);
    /* A complete dump into an empty ledger is the Source as of its at
     * (core 4: a baseline, then the changes since): the Change Lists from
     * there finish the baseline, and the Resource List, which says nothing
     * the two do not, is not read. Anything less (a member that failed, resources
     * the ledger held before, no Change List, no at) and the reconcile
     * decides, fetching only what the mirror lacks. */
    if (rc == 0 && r->failed == 0 && r->at != RS_TIME_NONE &&
        r->fresh && st->d->changelist != NULL)
        st->dump_at = r->at;
    apply_commit(s->apply);
    run_queue(s);
}

/* ----------------------------------------------------- push channels */

static struct set *
set_of_topic(struct session *s, const char *topic)
{
    for (size_t i = 0; i < s->nsets; i++)
        for (int k = 0; k < 2; k++)
            if ((s->sets[i].websub_topic[k] != NULL &&
                 strcmp(s->sets[i].websub_topic[k], topic) == 0) ||
                (s->sets[i].d->topic[k] != NULL &&
                 strcmp(s->sets[i].d->topic[k], topic) == 0))
                return &s->sets[i];
    return NULL;
}

static bool
want_ws(const struct session *s)
{
    return s->o.c.push && (s->o.c.transport == TRANSPORT_AUTO ||
                           s->o.c.transport == TRANSPORT_WEBSOCKET);
}

static bool
want_websub(const struct session *s)
{
    return s->o.c.push && (s->o.c.transport == TRANSPORT_AUTO ||
                           s->o.c.transport == TRANSPORT_WEBSUB);
}

/* The WebSocket URIs of a set's channel kind k, as far as we follow them:
 * --channel overrides the first set's change channel; NULL-ended, in
 * buf (2 slots) or the configuration. */
static const char *const *
set_ws_uris(const struct set *st, int k, const char **buf)
{
    struct session *s = st->s;

    buf[0] = buf[1] = NULL;
    if (!want_ws(s) || s->o.ws == NULL)
        return buf;
    if (k == DISCOVERY_CHANGE && st == &s->sets[0] &&
        !list_empty(s->o.c.channels))
        return (const char *const *)s->o.c.channels;
    buf[0] = st->d->ws[k];
    return buf;
}

/* Where a channel taken up now replays from: a moment before the last
 * pull that covered the Source began (docs/subscriber.md). */
static rs_time_t
set_mark(struct set *st)
{
    rs_time_t t = st->covered != RS_TIME_NONE ? st->covered
                                              : st->s->pull_mark;

    return t - SESSION_MARK_MARGIN_US;
}

/* Whether push works for a set: "ok" (it follows by push), "failing"
 * (push is offered and wanted, but polling stands in), "none" (nothing
 * to push with: not offered, not wanted, no callback listener). */
static const char *
set_push_word(const struct set *st)
{
    const char *buf[2];

    if (st->tr == TR_WEBSOCKET || st->tr == TR_WEBSUB)
        return "ok";
    if (set_ws_uris(st, DISCOVERY_CHANGE, buf)[0] != NULL ||
        st->websub_topic[DISCOVERY_CHANGE] != NULL)
        return "failing";
    return "none";
}

/* How each set follows, for `rssub status` (a process of its own that
 * can only read the state): meta SESSION_META_FOLLOW, one line a set,
 * "CAPLIST transport=T push=P since=TIME reason=\"WHY\"", rewritten at
 * each change of transport or of a WebSub subscription's state. Not
 * worth failing anything for: a write that fails is logged. */
static void
follow_record(struct session *s)
{
    char *val;
    size_t cap = 1, n = 0;
    int rc;

    if (s->o.cmd != SESSION_RUN || s->o.c.readonly)
        return;
    for (size_t i = 0; i < s->nsets; i++)
        cap += strlen(s->sets[i].d->caplist) + sizeof(s->sets[i].tr_why) +
               RS_TIME_BUFSZ + 64;
    if ((val = rs_malloc(cap)) == NULL)
        return;
    val[0] = '\0';
    for (size_t i = 0; i < s->nsets; i++) {
        const struct set *st = &s->sets[i];
        char since[RS_TIME_BUFSZ], why[sizeof(st->tr_why)];
        size_t k = 0;

        if (rs_time_format(st->tr_since, since) == 0)
            snprintf(since, sizeof(since), "-");
        /* quoted: no quote or line break inside */
        for (const char *p = st->tr_why; *p != '\0' && k + 1 < sizeof(why);
             p++)
            why[k++] = *p == '"' ? '\'' : *p == '\n' ? ' ' : *p;
        why[k] = '\0';
        n += (size_t)snprintf(val + n, cap - n,
                              "%s transport=%s push=%s since=%s "
                              "reason=\"%s\"\n", st->d->caplist,
                              transport_names[st->tr], set_push_word(st),
                              since, why);
    }
    rc = ledger_meta_set(s->o.ledger, SESSION_META_FOLLOW, val);
    if (rc != 0)
        rs_log_kv(RS_LOG_WARN, "cannot record how the mirror follows (for "
                  "rssub status)", "error", ledger_errstr(s->o.ledger),
                  NULL);
    rs_free(val);
}

/* The one place a set's transport changes: logged once, with why, and
 * counted. Polling takes over at once (it does not wait a poll interval). */
static void
set_transport(struct set *st, enum transport to, const char *why)
{
    struct session *s = st->s;
    enum transport from = st->tr;
    const char *buf[2], *ck = NULL, *cv = NULL;

    if (from == to)
        return;
    st->tr = to;
    st->tr_since = rs_time_now();
    snprintf(st->tr_why, sizeof(st->tr_why), "%s", why);
    rs_metrics_counter_inc(s->m_transport[to]);
    if (to == TR_WEBSOCKET) {
        ck = "websocket";
        cv = set_ws_uris(st, DISCOVERY_CHANGE, buf)[0];
    } else if (to == TR_WEBSUB) {
        ck = "websub";
        cv = st->websub_topic[DISCOVERY_CHANGE];
    }
    rs_log_kv(RS_LOG_INFO, to == TR_POLL ? "polling change lists"
              : "following", "caplist", st->d->caplist, "from",
              transport_names[from], "to", transport_names[to], "reason",
              why, cv != NULL ? ck : NULL, cv, NULL);
    if (to == TR_POLL && from != TR_NONE && s->state == SESSION_READY)
        queue_pull(st, PULL_CHANGES, WHY_POLL);
    follow_record(s);
}

/* Which transport the set can use now, from what its Capability List
 * offers and how its channels fare; why says so in a phrase. */
static enum transport
transport_now(struct set *st, const char **why)
{
    const struct session *s = st->s;
    const char *buf[2];
    struct follow_stats fs;

    if (set_ws_uris(st, DISCOVERY_CHANGE, buf)[0] != NULL) {
        follow_stats(st->follow, &fs);
        if (fs.connected[DISCOVERY_CHANGE]) {
            *why = "channel connected";
            return TR_WEBSOCKET;
        }
        /* Connecting or reconnecting: trusted for --push-timeout, then
         * polling stands in until the channel is back. */
        if (fs.down_since_us == 0 ||
            rs_time_mono_us() - fs.down_since_us <=
            s->o.c.push_timeout_ms * 1000) {
            *why = "channel offered, connecting";
            return st->tr == TR_POLL ? TR_POLL : TR_WEBSOCKET;
        }
        *why = "channel down longer than --push-timeout";
        return TR_POLL;
    }
    if (st->websub_topic[DISCOVERY_CHANGE] != NULL) {
        *why = !st->websub_failing ? "websub subscription"
             : st->websub_why[0] != '\0' ? st->websub_why
             : "websub subscription not active";
        return st->websub_failing ? TR_POLL : TR_WEBSUB;
    }
    *why = !s->o.c.push ? "--no-push"
         : s->o.c.transport == TRANSPORT_POLL ? "--transport poll"
         : st->d->topic[DISCOVERY_CHANGE] != NULL && want_websub(s)
           ? "no websocket channel offered; websub needs --callback-listen"
         : "no push channel offered";
    return TR_POLL;
}

static void
transport_update(struct set *st)
{
    const char *why = "";
    enum transport to;

    if (st->follow == NULL)
        return;                       /* draining */
    to = transport_now(st, &why);
    set_transport(st, to, why);
}

/* Subscribe by WebSub where the set should (no WebSocket channel, a
 * topic offered, a callback listener), and drop subscriptions that
 * should not be (a channel came, the topic moved or went). */
static void
websub_update(struct set *st)
{
    struct session *s = st->s;
    const char *buf[2];
    bool ws = set_ws_uris(st, DISCOVERY_CHANGE, buf)[0] != NULL;

    for (int k = 0; k < 2; k++) {
        const char *want = !ws && want_websub(s) && s->o.hubsub != NULL
                           ? st->d->topic[k] : NULL;
        char *have = st->websub_topic[k];

        if (have != NULL && want != NULL && strcmp(have, want) == 0)
            continue;
        if (have != NULL) {
            if (hubsub_unsubscribe(s->o.hubsub, have) == 0)
                s->unsubscribing++;
            rs_free(have);
            st->websub_topic[k] = NULL;
        }
        if (want == NULL)
            continue;
        if (hubsub_subscribe(s->o.hubsub, st->d->hub[k], want) != 0 ||
            (st->websub_topic[k] = rs_strdup(want)) == NULL) {
            rs_log_kv(RS_LOG_WARN, "cannot subscribe by websub", "topic",
                      want, "hub", st->d->hub[k], NULL);
            continue;
        }
        if (k == DISCOVERY_CHANGE) {
            st->websub_failing = false;
            st->websub_why[0] = '\0';
        }
        rs_log_kv(RS_LOG_INFO, "subscribing by websub", "caplist",
                  st->d->caplist, "topic", want, "hub", st->d->hub[k], NULL);
    }
}

/* Margin past --push-timeout: transport_now compares with <=. */
#define SESSION_PUSH_TO_SLACK_MS 50

static void on_push_timeout(evutil_socket_t fd, short what, void *arg);

/* Judge the transport again when the change channel, down since
 * follow_stats' down_since_us, reaches --push-timeout (each failed
 * reconnect calls this again: the deadline is the outage's, not moved). */
static void
push_timeout_arm(struct set *st)
{
    struct follow_stats fs;
    int64_t left;

    follow_stats(st->follow, &fs);
    if (fs.down_since_us == 0)
        return;
    left = fs.down_since_us + st->s->o.c.push_timeout_ms * 1000 -
           rs_time_mono_us();
    if (left < 0)
        left = 0;
    if (st->ev_push_to == NULL &&
        (st->ev_push_to = evtimer_new(st->s->o.base, on_push_timeout,
                                      st)) == NULL)
        return;                       /* the poll tick judges it then */
    struct timeval tv = rs_time_tv_ms((unsigned)(left / 1000) +
                                      SESSION_PUSH_TO_SLACK_MS);
    evtimer_add(st->ev_push_to, &tv);
}

static void
on_push_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct set *st = arg;

    (void)fd;
    (void)what;
    transport_update(st);
}

static void
on_follow_gap(void *ud, const char *why)
{
    struct set *st = ud;

    rs_log_kv(RS_LOG_WARN, "gap in the channel: pulling change lists",
              "caplist", st->d->caplist, "why", why, NULL);
    rs_metrics_counter_inc(st->s->m_fallback[0]);
    queue_pull_since(st, PULL_CHANGES, WHY_GAP, source_dt(st));
}

static void
on_follow_live(void *ud)
{
    struct set *st = ud;

    rs_log_kv(RS_LOG_INFO, "channel live again: pulling change lists to "
              "cover the seam", "caplist", st->d->caplist, NULL);
    queue_pull_since(st, PULL_CHANGES, WHY_GAP, source_dt(st));
}

/* Queue the reconciles owed once --reconcile-min-interval has passed
 * since the last one began; until then, wait for it. */
static void
reconcile_owed_run(struct session *s)
{
    rs_time_t wait = s->last_reconcile +
                     (rs_time_t)s->o.c.reconcile_min_ms * 1000 - rs_time_now();

    if (s->state == SESSION_DRAINING || s->state == SESSION_DONE)
        return;
    if (wait > 0) {
        if (!evtimer_pending(s->ev_reconcile, NULL)) {
            struct timeval tv = rs_time_tv_ms(wait / 1000 + 1);
            char in[24];

            snprintf(in, sizeof(in), "%.1f", (double)wait / 1e6);
            rs_log_kv(RS_LOG_INFO, "new resource list: reconciling when "
                      "--reconcile-min-interval has passed since the last "
                      "reconcile", "in_seconds", in, NULL);
            evtimer_add(s->ev_reconcile, &tv);
        }
        return;
    }
    for (size_t i = 0; i < s->nsets; i++)
        if (s->sets[i].reconcile_owed)
            queue_pull(&s->sets[i], PULL_RECONCILE, WHY_FRAMEWORK);
}

static void
on_reconcile_due(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    reconcile_owed_run(arg);
}

static void
on_follow_framework(void *ud, enum rs_capability cap, enum rs_change ch,
                    const char *loc)
{
    struct set *st = ud;
    struct session *s = st->s;

    rs_log_kv(RS_LOG_INFO, "framework notification", "capability",
              rs_capability_name(cap), "change", rs_change_name(ch), "loc",
              loc, NULL);
    switch (cap) {
    case RS_CAP_CHANGELIST:
        /* A gap-free WebSocket channel already brought every change the
         * new or closed Change List holds; otherwise pull it. */
        if (st->follow != NULL) {
            struct follow_stats fs;
            follow_stats(st->follow, &fs);
            if (fs.connected[DISCOVERY_CHANGE])
                break;
        }
        queue_pull(st, PULL_CHANGES, WHY_FRAMEWORK);
        break;
    case RS_CAP_RESOURCELIST:
        /* A new snapshot: reconcile, but not more often than
         * --reconcile-min-interval (a busy Source publishes them often).
         * One announced sooner is owed, not dropped: a bridge announces
         * one when the Source rewrote its history, which no change
         * brings. */
        st->reconcile_owed = true;
        reconcile_owed_run(s);
        break;
    case RS_CAP_CAPABILITYLIST:
        /* Its channels or documents may have moved: read it again. */
        if (st->cw != NULL && strcmp(loc, st->d->caplist) == 0)
            capwatch_check(st->cw);
        break;
    default:
        break;
    }
}

static void
on_follow_channel(void *ud, const char *uri, const char *peer, bool up,
                  int code, const char *why)
{
    struct set *st = ud;
    char c[16];

    snprintf(c, sizeof(c), "%d", code);
    if (peer == NULL)
        peer = "-";
    if (up)
        rs_log_kv(RS_LOG_INFO, "channel connected", "uri", uri, "peer", peer,
                  NULL);
    else if (code == WSCLIENT_UNAUTHORIZED || code == WSCLIENT_FORBIDDEN ||
             code == RS_WSCLOSE_REVOKED)
        /* follow.c tells this once per spell and retries slowly */
        rs_log_kv(RS_LOG_WARN, "the hub refuses the channel (see "
                  "--hub-token-file): retrying slowly, polling stands in",
                  "uri", uri, "peer", peer, "code", c, "reason", why, NULL);
    else
        rs_log_kv(RS_LOG_WARN, "channel closed", "uri", uri, "peer", peer,
                  "code", c, "reason", why, NULL);
    transport_update(st);
    /* Polling stands in once the channel has been down --push-timeout:
     * judged then, not at the next poll tick (up to --poll-interval more),
     * nor at the next reconnect's event (a backoff of up to 30 s). */
    if (!up && st->tr != TR_POLL)
        push_timeout_arm(st);
}

int
session_websub_delivery(struct session *s, const struct hubsub_msg *m)
{
    struct set *st = set_of_topic(s, m->topic);
    int rc;

    if (st == NULL)
        return 0;                    /* not a topic of ours: drop it */
    if (st->follow == NULL)
        return 1;                    /* stopping: 503, the hub keeps it */
    /* X-Hub-Id is not used to drop repeats: a delivery answered 503 comes
     * again with the same id, and must be taken then. Repeats are cheap:
     * the per-resource rules skip what the mirror holds. */
    rc = follow_take(st->follow, m->body, m->len, "push");
    if (rc == RS_EINVALID) {
        rs_log_kv(RS_LOG_WARN, "refused a notification that is not one",
                  "topic", m->topic, NULL);
        return 0;                    /* redelivering it would not help */
    }
    if (rc == 0)
        rc = apply_flush(s->apply);  /* durable before the hub hears 2xx */
    if (rc == 0 && m->gap_after != NULL) {
        /* The hub trimmed what it had not delivered to us: what came
         * between is in the Change Lists (WebSub never moves the mark
         * they are read from). */
        char why[256];
        snprintf(why, sizeof(why), "%s: notifications after %.64s were "
                 "trimmed before delivery (X-Hub-Gap)", m->hub_url,
                 m->gap_after);
        on_follow_gap(st, why);
    }
    return rc != 0;
}

void
session_websub_state(struct session *s, const char *topic,
                     enum hubsub_state hs, const char *why)
{
    static const char *const names[] = { "active", "denied", "failed",
                                         "expired", "unreachable",
                                         "unsubscribed" };
    struct set *st = set_of_topic(s, topic);

    rs_log_kv(hs == HUBSUB_ACTIVE || hs == HUBSUB_UNSUBSCRIBED
              ? RS_LOG_INFO : RS_LOG_WARN,
              "websub subscription", "topic", topic, "state", names[hs],
              "why", why, NULL);
    if (hs == HUBSUB_UNSUBSCRIBED && s->unsubscribing > 0)
        s->unsubscribing--;
    if (st == NULL)
        return;
    const char *change = st->websub_topic[DISCOVERY_CHANGE];
    if (change != NULL && strcmp(change, topic) == 0 &&
        hs != HUBSUB_UNSUBSCRIBED) {
        st->websub_failing = hs != HUBSUB_ACTIVE;
        if (st->websub_failing)
            snprintf(st->websub_why, sizeof(st->websub_why),
                     "websub %s: %.280s", names[hs], why);
        else
            st->websub_why[0] = '\0';
        transport_update(st);
        follow_record(s);
    }
    /* Until the hub verified us, nothing was delivered: what changed
     * before (since the pull at start, while the lease had run out, or
     * while the hub could not deliver) comes from the Change Lists. The
     * hub delivers what it holds for us from its cursor as well: a change
     * that comes both ways is applied once (the per-resource rules skip
     * what the mirror holds, and an older change). */
    if (hs == HUBSUB_ACTIVE)
        queue_pull(st, PULL_CHANGES, WHY_GAP);
}

/* The set's Capability List offers something else now: its channels are
 * taken up, moved or dropped, then the transport follows. */
static void
on_caplist_change(void *ud, struct discovery_set *now)
{
    struct set *st = ud;
    const char *buf[2];
    rs_time_t mark = set_mark(st);
    int rc = 0;

    rs_log_kv(RS_LOG_INFO, "capability list changed", "url", now->caplist,
              "resourcelist", now->resourcelist ? now->resourcelist : "-",
              "changelist", now->changelist ? now->changelist : "-",
              "websocket", now->ws[0] ? now->ws[0] : "-",
              "websub", now->topic[0] ? now->topic[0] : "-", NULL);
    discovery_set_clear(st->d);
    *st->d = *now;                    /* taken: now is left empty */
    memset(now, 0, sizeof(*now));
    if (st->follow == NULL)
        return;                       /* draining */
    for (int k = 0; k < 2 && rc == 0; k++)
        rc = follow_set_uris(st->follow, k, set_ws_uris(st, k, buf), mark);
    if (rc != 0)
        rs_log_kv(RS_LOG_ERROR, "cannot follow the new channels", "error",
                  rs_strerror(rc), NULL);
    websub_update(st);
    transport_update(st);
}

static void
on_caplist_error(void *ud, const char *why)
{
    struct set *st = ud;

    rs_log_kv(RS_LOG_WARN, "cannot read the capability list again (kept "
              "as it was)", "caplist", st->d->caplist, "error", why, NULL);
}

/* Set up how each set is followed: its channels from the Capability
 * List, WebSub where no WebSocket channel is offered, and a watch on the
 * list that takes up channels as they come and go. */
static int
setup_follow(struct session *s)
{
    for (size_t i = 0; i < s->nsets; i++) {
        struct set *st = &s->sets[i];
        const char *chg[2], *fw[2];
        char err[256];
        struct follow_opts fo = {
            .base = s->o.base,
            .ledger = s->o.ledger,
            .apply = s->apply,
            .ws = s->o.ws,
            .key = st->key,
            .change_ws = set_ws_uris(st, DISCOVERY_CHANGE, chg),
            .framework_ws = set_ws_uris(st, DISCOVERY_FRAMEWORK, fw),
            .on_gap = on_follow_gap,
            .on_live = on_follow_live,
            .on_framework = on_follow_framework,
            .on_channel = on_follow_channel,
            .ud = st,
        };
        struct capwatch_opts co = {
            .base = s->o.base,
            .http = s->o.http,
            .on_change = on_caplist_change,
            .on_error = on_caplist_error,
            .ud = st,
        };
        st->follow = follow_new(&fo, err, sizeof(err));
        if (st->follow == NULL) {
            rs_log_kv(RS_LOG_ERROR, "cannot follow", "error", err, NULL);
            return -1;
        }
        if ((st->cw = capwatch_new(&co, st->d)) == NULL)
            return -1;
        websub_update(st);
        transport_update(st);
    }
    return 0;
}

/* ----------------------------------------------------------- timers */

/* Is the mirror's path still the directory we hold (session.h,
 * SESSION_ROOT_CHECK_MS)? If not, the session ends with an error: the
 * service manager restarts rssub, and the start looks at what the path
 * names then (missing: refused; empty: refilled). false once ended. */
static bool
root_ok(struct session *s)
{
    char why[MIRROR_PATH_MAX + 300];

    if (s->state == SESSION_DONE)
        return false;
    if (s->o.c.readonly || mirror_check_root(s->o.mirror) == 0)
        return true;
    snprintf(why, sizeof(why), "the mirror directory moved or was removed "
             "while rssub ran: %s", mirror_errstr(s->o.mirror));
    rs_log_kv(RS_LOG_ERROR, "the mirror directory is no longer where it "
              "was configured: stopping, writing nothing more into it (a "
              "restart checks what the path names then)", "mirror",
              mirror_root(s->o.mirror), "error",
              mirror_errstr(s->o.mirror), NULL);
    set_last_error(s, why);
    apply_pause(s->apply, true);
    apply_commit(s->apply);          /* the batch, and last_error, kept */
    finish(s, s->o.cmd == SESSION_AUDIT ? 3 : 1);
    return false;
}

static void
on_root_check(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)root_ok(arg);
}

static void
on_poll(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;

    (void)fd;
    (void)what;
    if (!root_ok(s))
        return;
    for (size_t i = 0; i < s->nsets; i++) {
        struct set *st = &s->sets[i];

        /* A hub out of reach must not stall the mirror. */
        transport_update(st);
        if (st->tr == TR_POLL)
            queue_pull(st, PULL_CHANGES, WHY_POLL);
        /* A channel may have come (a hub that learned the topic, a Source
         * that added one), moved or gone since: an unchanged list costs a
         * 304 once per poll interval. */
        if (st->cw != NULL)
            capwatch_check(st->cw);
    }
}

static void
on_safety_pull(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;

    (void)fd;
    (void)what;
    for (size_t i = 0; i < s->nsets; i++)
        if (s->sets[i].tr != TR_POLL)
            queue_pull(&s->sets[i], PULL_CHANGES, WHY_POLL);
}

static void
on_audit_timer(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;

    (void)fd;
    (void)what;
    /* An audit of a directory that is no longer the mirror would find
     * it in sync, and its --audit-fix would write into it. */
    if (!root_ok(s))
        return;
    s->strays_due = true;
    for (size_t i = 0; i < s->nsets; i++)
        queue_pull(&s->sets[i], s->o.c.audit_fix ? PULL_RECONCILE : PULL_AUDIT,
                   WHY_AUDIT);
}

/* ----------------------------------------------------------- idle */

static int
write_ready(struct session *s)
{
    char tmp[PATH_MAX];
    FILE *f;

    snprintf(tmp, sizeof(tmp), "%s.tmp", s->o.c.ready_file);
    if ((f = fopen(tmp, "w")) == NULL)
        return -1;
    fprintf(f, "{\"metrics\":%d}\n", s->metrics_port);
    if (fclose(f) != 0 || rename(tmp, s->o.c.ready_file) != 0)
        return -1;
    return 0;
}

/* run: the first sync is applied; say so (log, ready-file). */
static void
become_ready(struct session *s)
{
    session_set(s, SESSION_READY, "the first sync is applied");
    if (s->ev_ready != NULL)
        event_del(s->ev_ready);
    progress_end(s);
    summary(s, "synced");
    if (s->o.c.ready_file != NULL && write_ready(s) != 0)
        rs_log_kv(RS_LOG_WARN, "cannot write the ready file", "path",
                  s->o.c.ready_file, "error", strerror(errno), NULL);
}

/* run: while the Source keeps changing, the appliers may never run out of
 * work; the first sync is applied once no due row it queued is left
 * (rows waiting for a retry do not hold it, as in on_apply_idle). */
static void
on_ready_tick(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;
    bool any = true;

    (void)fd;
    (void)what;
    if (s->state != SESSION_APPLYING || s->pull_failed)
        return;
    if (ledger_todo_due_upto(s->o.ledger, s->first_round_seq, rs_time_now(),
                             &any) == 0 && !any)
        become_ready(s);
}

/* run: the pulls that make the first sync are over when nothing but
 * periodic polls is under way or queued (with --poll-interval shorter than
 * a pull, the queue is never empty); then the todo rows they queued are
 * marked, and on_ready_tick waits for them. */
static void
mark_first_round(struct session *s)
{
    struct timeval tick = rs_time_tv_ms(SESSION_READY_TICK_MS);

    if (s->o.cmd != SESSION_RUN || s->state != SESSION_PULLING ||
        s->pull_failed)
        return;
    if (s->pulling != NULL && s->pull_why != WHY_POLL)
        return;
    for (size_t i = 0; i < s->nq; i++)
        if (s->q[i].why != WHY_POLL)
            return;
    if (ledger_todo_max_seq(s->o.ledger, &s->first_round_seq) != 0)
        return;
    session_set(s, SESSION_APPLYING, "the first pulls are done");
    event_add(s->ev_ready, &tick);
}

/* Pulls queued are done and the appliers have nothing left: the end of
 * sync and audit, the start of following for run. */
static void
on_apply_idle(void *ud, bool retrying)
{
    struct session *s = ud;
    int64_t failed = 0, due = 0, waiting = 0;

    if (s->pulling != NULL || s->nq > 0 || s->state == SESSION_DONE ||
        s->state == SESSION_DISCOVERING || s->state == SESSION_IDLE)
        return;
    if (s->state == SESSION_DRAINING)
        return;                       /* rs_daemon's drain ends it */
    /* The daemon is ready with retries still waiting (a Source that
     * churns always has some); sync and audit wait for them. */
    if (s->o.cmd != SESSION_RUN && retrying && !s->o.c.readonly)
        return;
    if (s->o.cmd == SESSION_RUN) {
        if ((s->state == SESSION_PULLING || s->state == SESSION_APPLYING) &&
            !s->pull_failed)
            become_ready(s);
        return;
    }
    if (s->o.cmd == SESSION_AUDIT) {
        progress_end(s);
        state_warn(s, ledger_todo_count(s->o.ledger, rs_time_now(), &due,
                                        &waiting, &failed), "count");
        if (failed > 0) {
            printf("failed %lld resources could not be mirrored\n",
                   (long long)failed);
            s->audit_dirty = true;
        }
        if (s->o.c.readonly && due + waiting > 0) {
            printf("pending %lld changes not applied yet\n",
                   (long long)(due + waiting));
            s->audit_dirty = true;
        }
        if (!s->pull_failed && !check_strays(s, s->o.c.fix))
            s->pull_failed = true;
        finish(s, s->pull_failed ? 3
                  : (s->audit_dirty && !s->o.c.fix) || s->deletions_held ? 1
                  : 0);
        return;
    }
    progress_end(s);
    state_warn(s, ledger_todo_count(s->o.ledger, rs_time_now(), &due,
                                    &waiting, &failed), "count");
    summary(s, "synced");
    if (failed > 0)
        state_warn(s, session_log_failed(s->o.ledger), "failed rows");
    /* A refused URI is not kept as a failure, but a sync that met one
     * says so in its exit status: the Source lists what cannot be
     * mirrored here (or --prefix is missing). */
    finish(s, s->pull_failed || failed > 0 || s->refused > 0 ||
              s->skipped > 0 || s->deletions_held ? 1 : 0);
}

static void
after_pulls(struct session *s)
{
    bool waiting = false;

    if (s->pulling != NULL || s->nq > 0)
        return;
    if (s->o.cmd != SESSION_RUN && s->state == SESSION_PULLING)
        session_set(s, SESSION_APPLYING, "the pulls are done");
    mark_first_round(s);
    if (s->strays_due && s->o.cmd == SESSION_RUN &&
        s->state != SESSION_DRAINING) {
        /* Pending changes need not wait: what a job wrote, it recorded in
         * the same step, through this connection. */
        s->strays_due = false;
        (void)check_strays(s, s->o.c.audit_fix);
    }
    if (s->o.c.readonly)
        on_apply_idle(s, false);
    else if (apply_idle(s->apply, &waiting))
        on_apply_idle(s, waiting);
    else
        apply_kick(s->apply);
}

/* ---------------------------------------------------- apply results */

static void on_resource_refused(void *ud, const char *uri, long status);

static void
on_result(void *ud, const char *uri, enum apply_outcome o, const char *what)
{
    struct session *s = ud;

    rs_metrics_counter_inc(s->m_applied[o]);
    if (s->o.on_applied != NULL)
        s->o.on_applied(s->o.ud, uri, (int)o, what);
    switch (o) {
    case APPLY_CREATED:
    case APPLY_UPDATED:
        s->refused_spell = 0;         /* the Source lets us read */
        break;
    case APPLY_FAILED: {
        char both[LEDGER_TEXT_MAX];
        rs_log_kv(RS_LOG_ERROR, "resource failed", "uri", uri, "error", what,
                  NULL);
        /* status shows it long after: which resource, not only why */
        snprintf(both, sizeof(both), "%.1000s: %s", uri, what);
        set_last_error(s, both);
        break;
    }
    case APPLY_REFUSED:
        rs_log_kv(RS_LOG_ERROR, "resource refused", "uri", uri, "error", what,
                  NULL);
        s->refused++;
        break;
    case APPLY_RETRY:
        /* Routine under churn (a file changed again between its
         * notification and the fetch: the next change wins); the failure
         * after the last retry is what an operator must see. */
        rs_log_kv(RS_LOG_INFO, "resource will be retried", "uri", uri,
                  "error", what, NULL);
        break;
    default:
        if (rs_log_enabled(RS_LOG_DEBUG))
            rs_log_kv(RS_LOG_DEBUG, apply_outcome_name(o), "uri", uri, NULL);
        break;
    }
}

/* A batch could not be committed (a full disk, an I/O error): apply
 * redoes its todo rows. What it took in is taken in again: the channels
 * replay from the positions saved, and, once the wait is over, the Change
 * Lists are read from the mark saved (a pull's changes, and those of a
 * channel whose position the hub no longer keeps). The wait doubles while
 * commits fail, so a full disk is neither fetched for nor pulled in a
 * loop. A one-shot command stops: exit 1, what was saved stands. */
static void
on_state_error(void *ud, const char *what)
{
    struct session *s = ud;
    int64_t ms = apply_state_retry_ms(s->apply);
    char t[24];

    snprintf(t, sizeof(t), "%lld", (long long)(ms / 1000));
    rs_metrics_counter_inc(s->m_state_errors);
    if (s->state == SESSION_DONE || s->state == SESSION_DRAINING ||
        s->ev_state == NULL) {     /* stopping, or session_new failed */
        rs_log_kv(RS_LOG_ERROR, "cannot save state (the next start redoes "
                  "the work)", "error", what, NULL);
        return;
    }
    if (s->o.cmd != SESSION_RUN) {
        rs_log_kv(RS_LOG_ERROR, "cannot save state: stopping (what was "
                  "saved stands; run again)", "error", what, NULL);
        s->nq = 0;
        finish(s, 1);
        return;
    }
    rs_log_kv(RS_LOG_ERROR, "cannot save state: its changes are taken in "
              "again", "error", what, "retry_in_seconds", t, NULL);
    for (size_t i = 0; i < s->nsets; i++)
        if (s->sets[i].follow != NULL)
            follow_rewind(s->sets[i].follow, (unsigned)ms);
    if (!evtimer_pending(s->ev_state, NULL)) {
        struct timeval tv = rs_time_tv_ms(ms);
        evtimer_add(s->ev_state, &tv);
    }
}

static void
on_state_retry(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;

    (void)fd;
    (void)what;
    if (s->state == SESSION_DONE || s->state == SESSION_DRAINING)
        return;
    for (size_t i = 0; i < s->nsets; i++)
        queue_pull_since(&s->sets[i], PULL_CHANGES, WHY_GAP,
                         source_dt(&s->sets[i]));
}

/* ------------------------------------------------------------- metrics */

/* The todo table's counts for the gauges of one scrape: counting is a scan
 * of the table (a million rows during a large baseline), so it is done
 * once and shared by the gauges that need it, for up to a second. */
static int
todo_counts(struct session *s, int64_t *pending, int64_t *failed)
{
    rs_time_t now = rs_time_now();
    int64_t due = 0, waiting = 0, f = 0;

    if (s->counted_at == RS_TIME_NONE || now - s->counted_at > 1000000 ||
        now < s->counted_at) {
        if (ledger_todo_count(s->o.ledger, now, &due, &waiting, &f) != 0)
            return -1;
        s->count_pending = due + waiting;
        s->count_failed = f;
        s->counted_at = now;
    }
    *pending = s->count_pending;
    *failed = s->count_failed;
    return 0;
}

static double
gauge_pending(void *ud)
{
    int64_t pending, failed;

    return todo_counts(ud, &pending, &failed) != 0 ? -1 : (double)pending;
}

static double
gauge_failed(void *ud)
{
    int64_t pending, failed;

    return todo_counts(ud, &pending, &failed) != 0 ? -1 : (double)failed;
}

/* Lag: how old the newest applied change is while changes wait; 0 when
 * the mirror holds everything it was told of. */
static double
gauge_lag(void *ud)
{
    struct session *s = ud;
    struct apply_stats as;

    if (gauge_pending(ud) <= 0)
        return 0;
    apply_stats(s->apply, &as);
    if (as.last_change_dt == RS_TIME_NONE)
        return 0;
    return (double)(rs_time_now() - as.last_change_dt) / 1e6;
}

static double
gauge_bytes(void *ud)
{
    struct apply_stats as;
    apply_stats(((struct session *)ud)->apply, &as);
    return (double)as.bytes;
}

static double
gauge_requests(void *ud)
{
    struct apply_stats as;
    apply_stats(((struct session *)ud)->apply, &as);
    return (double)as.requests;
}

static double
gauge_saved(void *ud)
{
    struct apply_stats as;
    apply_stats(((struct session *)ud)->apply, &as);
    return (double)(as.newer_answers + as.kept_answers);
}

static double
gauge_connected(void *ud)
{
    struct session *s = ud;
    double n = 0;

    for (size_t i = 0; i < s->nsets; i++) {
        struct follow_stats fs;
        if (s->sets[i].follow == NULL)
            continue;
        follow_stats(s->sets[i].follow, &fs);
        n += fs.connected[0];
    }
    return n;
}

static int
register_metrics(struct session *s, struct rs_metrics *m)
{
    static const char *const why[4] = { "gap", "reconcile", "too_old", "poll" };
    int rc = 0;

    for (int o = 0; o < APPLY_OUTCOMES && rc == 0; o++)
        rc = rs_metrics_register_counter(m, &s->m_applied[o],
            "rssub_changes_applied_total", "Resource changes handled, by "
            "outcome.", "outcome", apply_outcome_name(o), NULL);
    for (int w = 0; w < 4 && rc == 0; w++)
        rc = rs_metrics_register_counter(m, &s->m_fallback[w],
            "rssub_fallbacks_total", "Pulls push could not spare: gaps, "
            "reconciles, change lists too short, polls.", "reason", why[w],
            NULL);
    for (int t = TR_WEBSOCKET; t < TR_COUNT && rc == 0; t++)
        rc = rs_metrics_register_counter(m, &s->m_transport[t],
            "rssub_transport_changes_total", "Capability Lists that changed "
            "how they are followed, by the transport taken up.", "to",
            transport_names[t], NULL);
    if (rc == 0)
        rc = rs_metrics_register_counter(m, &s->m_held,
            "rssub_deletions_held_total", "Deletions a Resource List asked "
            "for that --max-delete or --max-delete-share held back.", NULL);
    if (rc == 0)
        rc = rs_metrics_register_counter(m, &s->m_skipped,
            "rssub_entries_skipped_total", "Entries of the Source's lists "
            "skipped as malformed (a <loc> that is not an http(s) URI, a bad "
            "datetime): the rest was read; a Resource List with one deletes "
            "nothing.", NULL);
    if (rc == 0)
        rc = rs_metrics_register_counter(m, &s->m_refused,
            "rssub_source_auth_failures_total", "Responses 401 or 403 from "
            "the Source's origin.", NULL);
    for (int a = 0; a < ACCESS_COUNT && rc == 0; a++)
        rc = rs_metrics_register_gauge(m, &s->m_access[a],
            "rssub_source_access", "1 for the state of the Source's access: "
            "unknown, ok, refused (401 or 403 since the last discovery or "
            "pull that went through).", "state", access_names[a], NULL);
    if (rc == 0)
        rs_metrics_gauge_set(s->m_access[ACCESS_UNKNOWN], 1);
    if (rc == 0)
        rc = rs_metrics_register_counter(m, &s->m_state_errors,
            "rssub_state_errors_total", "Batches of the state that could "
            "not be committed (a full disk, an I/O error): their changes "
            "are taken in again.", NULL);
    if (rc == 0)
        rc = rs_metrics_register_counter(m, &s->m_strays,
            "rssub_audit_strays_total", "Files in the mirror no resource "
            "accounts for, found by audits.", NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(m, "rssub_fetch_bytes",
            "Resource bytes written to the mirror (a counter).",
            gauge_bytes, s, NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(m, "rssub_fetch_requests",
            "Resource GETs started (a counter).", gauge_requests, s, NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(m, "rssub_fetch_saved",
            "Changes applied with the answer to an older change's GET: the "
            "resource had changed again (a counter).", gauge_saved, s, NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(m, "rssub_pending",
            "Changes queued, not yet applied.", gauge_pending, s, NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(m, "rssub_failed",
            "Resources given up on (see rssub status).", gauge_failed, s,
            NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(m, "rssub_lag_seconds",
            "Age of the newest applied change while changes wait.",
            gauge_lag, s, NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(m, "rssub_channels_up",
            "WebSocket change channels connected.", gauge_connected, s, NULL);
    return rc;
}

/* -------------------------------------------------------- discovery */

static bool
set_wanted(const struct session *s, const char *caplist)
{
    if (list_empty(s->o.c.sets))
        return true;
    for (char *const *p = s->o.c.sets; *p != NULL; p++)
        if (strcmp(*p, caplist) == 0 || strstr(caplist, *p) != NULL)
            return true;
    return false;
}

/* run: channels first, from a moment before the pulls (whatever changes
 * while the pulls run is replayed, docs/subscriber.md), then the timers. */
static int
start_following(struct session *s)
{
    struct timeval poll = rs_time_tv_ms(s->o.c.poll_ms);

    if (setup_follow(s) != 0)
        return -1;
    /* Every WebSub subscription wanted is asked for: a delivery to any
     * other callback path is a leftover, answered 410 from now on. */
    hubsub_settle(s->o.hubsub);
    for (size_t i = 0; i < s->nsets; i++)
        follow_start(s->sets[i].follow,
                     s->pull_mark - SESSION_MARK_MARGIN_US);
    event_add(s->ev_poll, &poll);
    if (s->o.c.pull_ms > 0) {
        struct timeval tv = rs_time_tv_ms(s->o.c.pull_ms);
        event_add(s->ev_pull, &tv);
    }
    if (s->o.c.audit_ms > 0) {
        struct timeval tv = rs_time_tv_ms(s->o.c.audit_ms);
        event_add(s->ev_audit, &tv);
    }
    return 0;
}

static int
allow_origin(struct session *s, const char *url, unsigned *added)
{
    const char *why = NULL;
    char *origin = NULL;
    int rc;

    if (url == NULL)
        return 0;
    if ((rc = rs_url_origin(url, &origin)) != 0)
        return rc == RS_ENOMEM ? rc : 0;   /* not http(s): nothing to allow */
    rc = pathmap_add_prefix(s->o.default_prefixes, origin, &why);
    if (rc != 0)
        rs_log_kv(RS_LOG_ERROR, "cannot allow the origin", "origin", origin,
                  "error", why != NULL ? why : rs_strerror(rc), NULL);
    else
        (*added)++;
    rs_free(origin);
    return rc;
}

/* Without --prefix or --map: resources may come from where the Capability
 * Lists' documents are - a Capability List that names lists on another
 * origin is trusted to speak for it (a bridge does: its lists are the
 * original Source's) - else from the --source URL's origin. Fixed here,
 * once: a prefix added later would move files already mirrored. */
static int
set_default_prefixes(struct session *s)
{
    unsigned added = 0;
    int rc = 0;

    for (size_t i = 0; i < s->nsets && rc == 0; i++) {
        const struct discovery_set *d = s->sets[i].d;
        const char *docs[] = { d->resourcelist, d->changelist,
                               d->resourcedump, d->changedump };
        for (size_t k = 0; k < 4 && rc == 0; k++)
            rc = allow_origin(s, docs[k], &added);
    }
    if (rc == 0 && added == 0)
        rc = allow_origin(s, s->o.c.source, &added);
    return rc;
}

static void
on_retry_discovery(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;

    (void)fd;
    (void)what;
    if (s->state != SESSION_DISCOVERING)
        return;
    if (discovery_start(s->discovery, s->o.c.source) != 0)
        finish(s, 1);
}

static void
on_discovered(void *ud, int rc, const char *err, struct discovery_result *res)
{
    struct session *s = ud;
    char *val = NULL;

    if (rc != 0) {
        rs_log_kv(RS_LOG_ERROR, "discovery failed", "source", s->o.c.source,
                  "error", err, NULL);
        if (s->access == ACCESS_REFUSED &&
            (s->o.cmd != SESSION_RUN || !s->refusal_told)) {
            char st[16];
            snprintf(st, sizeof(st), "%ld", s->refused_status);
            rs_log_kv(RS_LOG_ERROR, "the source refused access (see "
                      "--source-token-file, --header-file, --netrc-file, "
                      "--client-cert)", "url", s->refused_url, "status", st,
                      NULL);
            s->refusal_told = true;
        }
        set_last_error(s, s->access == ACCESS_REFUSED
                              ? "the source refused access" : err);
        if (s->o.cmd == SESSION_RUN && s->state == SESSION_DISCOVERING &&
            (s->access == ACCESS_REFUSED || mirror_holds_some(s))) {
            /* Credentials can be fixed at the Source's end (a token
             * granted, a list made public), and a Source this mirror
             * holds resources of may be down for a while: try again,
             * backing off. A first start that cannot find its Source
             * ends, so that a wrong --source is told at once. */
            struct timeval tv = rs_time_tv_ms((int64_t)rs_backoff_base(
                &SESSION_PULL_BACKOFF, ++s->disc_fails));
            char secs[24];
            snprintf(secs, sizeof(secs), "%.1f",
                     (double)tv.tv_sec + (double)tv.tv_usec / 1e6);
            rs_log_kv(RS_LOG_WARN, "will discover the source again",
                      "in_seconds", secs, NULL);
            evtimer_add(s->ev_retry_disc, &tv);
            return;
        }
        finish(s, s->o.cmd == SESSION_AUDIT ? 3 : 1);
        return;
    }
    s->disc_fails = 0;
    access_set(s, ACCESS_OK, "capability lists found");
    s->disc = res;
    for (size_t i = 0; i < res->nsets && s->nsets < SESSION_MAX_SETS; i++) {
        struct discovery_set *d = &res->sets[i];
        struct set *st = &s->sets[s->nsets];
        char key[2048];

        if (!set_wanted(s, d->caplist))
            continue;
        st->s = s;
        st->d = d;
        st->covered = RS_TIME_NONE;
        st->dump_at = RS_TIME_NONE;
        st->tr_since = RS_TIME_NONE;
        snprintf(key, sizeof(key), "%s%s", d->caplist, FOLLOW_POS_SOURCE);
        st->key = rs_strdup(d->caplist);
        st->source_key = rs_strdup(key);
        if (st->key == NULL || st->source_key == NULL) {
            finish(s, 1);
            return;
        }
        if (ledger_meta_get(s->o.ledger, st->key, &val) == 0)
            st->baselined = true;
        rs_free(val);
        val = NULL;
        rs_log_kv(RS_LOG_INFO, "capability list", "url", d->caplist,
                  "resourcelist", d->resourcelist ? d->resourcelist : "-",
                  "changelist", d->changelist ? d->changelist : "-",
                  "websocket", d->ws[0] ? d->ws[0] : "-",
                  "websub", d->topic[0] ? d->topic[0] : "-", NULL);
        s->nsets++;
    }
    if (s->nsets == 0) {
        rs_log_kv(RS_LOG_ERROR, "no capability list matches --set", "source",
                  s->o.c.source, NULL);
        finish(s, 2);
        return;
    }
    if (s->o.default_prefixes != NULL && set_default_prefixes(s) != 0) {
        finish(s, 2);
        return;
    }
    if (s->o.c.progress && s->o.cmd != SESSION_RUN) {
        struct timeval tv = rs_time_tv_ms(SESSION_PROGRESS_MS);
        s->ev_progress = event_new(s->o.base, -1, EV_PERSIST,
                                   on_progress_tick, s);
        if (s->ev_progress != NULL)
            event_add(s->ev_progress, &tv);
    }
    s->pull_mark = rs_time_now();
    session_set(s, SESSION_PULLING, "capability lists found");
    if (s->o.cmd == SESSION_RUN && start_following(s) != 0) {
        finish(s, 1);
        return;
    }
    for (size_t i = 0; i < s->nsets; i++) {
        enum pull_kind k = s->o.c.refill ? PULL_RECONCILE : PULL_CHANGES;
        if (s->o.cmd == SESSION_AUDIT)
            k = s->o.c.fix ? PULL_RECONCILE : PULL_AUDIT;
        queue_pull(&s->sets[i], k, WHY_START);
    }
}

/* ---------------------------------------------------------- draining */

void
session_drain(struct session *s)
{
    if (s->state == SESSION_DONE || s->state == SESSION_DRAINING)
        return;
    rs_log_kv(RS_LOG_INFO, "stopping: finishing writes in flight", NULL);
    session_set(s, SESSION_DRAINING, "asked to stop");
    s->exit_code = s->o.cmd == SESSION_RUN ? 0 : 1;
    for (size_t i = 0; i < s->nsets; i++) {
        struct set *st = &s->sets[i];

        follow_free(st->follow);
        st->follow = NULL;
        if (st->ev_push_to != NULL)
            event_free(st->ev_push_to);
        st->ev_push_to = NULL;
        capwatch_free(st->cw);
        st->cw = NULL;
        /* The next start subscribes afresh (and pulls what it missed):
         * tell the hub to stop delivering to this callback now, best
         * effort within the drain, rather than have it retry a path that
         * answers 410 until the lease ends. */
        for (int k = 0; k < 2; k++) {
            if (st->websub_topic[k] != NULL && s->o.hubsub != NULL &&
                hubsub_unsubscribe(s->o.hubsub, st->websub_topic[k]) == 0)
                s->unsubscribing++;
            rs_free(st->websub_topic[k]);
            st->websub_topic[k] = NULL;
        }
    }
    if (s->pulling != NULL) {
        /* Say what is left unfinished: a mirror stopped in its baseline
         * lacks part of the Source, and nothing else would say so. */
        if (s->pulling->phase == SET_DUMP && !s->dumping_changes)
            rs_log_kv(RS_LOG_WARN, "stopped during the baseline from the "
                      "resource dump: the mirror is incomplete (the next "
                      "start finishes the baseline)", "caplist",
                      s->pulling->d->caplist, NULL);
        else if (s->pulling->phase == SET_DUMP)
            rs_log_kv(RS_LOG_WARN, "stopped during the catch-up from the "
                      "change dump: the mirror is behind (the next start "
                      "catches up)", "caplist", s->pulling->d->caplist, NULL);
        else if (!s->pulling->baselined)
            rs_log_kv(RS_LOG_WARN, "stopped during the baseline: the mirror "
                      "is incomplete (the next start finishes it)",
                      "caplist", s->pulling->d->caplist, NULL);
        pull_free(s->pull);          /* abandoned: the next start redoes it */
        s->pull = NULL;
        /* likewise a dump under way: its on_done would find no set
         * pulling, and it would go on writing into the mirror */
        dump_free(s->dump);
        s->dump = NULL;
        set_phase(s->pulling, SET_WAITING, "stopping");
        s->pulling = NULL;
    }
    s->nq = 0;
    apply_pause(s->apply, true);
}

bool
session_drained(struct session *s)
{
    struct apply_stats as;

    apply_stats(s->apply, &as);
    return as.in_flight == 0 && s->unsubscribing == 0;
}

void
session_stop(struct session *s, bool timed_out)
{
    struct apply_stats as;

    if (s->state == SESSION_DONE)
        return;
    apply_stats(s->apply, &as);
    if (timed_out && as.in_flight > 0)
        rs_log_kv(RS_LOG_WARN, "stopping now: fetches in flight are dropped "
                  "(they are redone at the next start)", NULL);
    else if (timed_out && s->unsubscribing > 0)
        rs_log_kv(RS_LOG_WARN, "stopping now: a hub did not confirm the "
                  "WebSub unsubscription (its lease will end)", NULL);
    apply_commit(s->apply);
    finish(s, s->state == SESSION_DRAINING ? s->exit_code : 1);
}

/* ---------------------------------------------------------------- API */

struct session *
session_new(const struct session_opts *o, char *err, size_t errsz)
{
    struct session *s = rs_calloc(1, sizeof(*s));

    if (s == NULL) {
        snprintf(err, errsz, "out of memory");
        return NULL;
    }
    s->o = *o;
    s->first_round_seq = -1;
    s->counted_at = RS_TIME_NONE;
    s->pull_dump_at = RS_TIME_NONE;
    struct apply_opts ao = {
        .base = o->base,
        .http = o->http,
        .ledger = o->ledger,
        .mirror = o->mirror,
        .pathmap = o->pathmap,
        .parallel = o->c.parallel,
        .rate = o->c.rate,
        .retries = o->c.retries,
        .timeout_ms = o->c.timeout_ms,
        .max_body = o->c.max_body,
        .on_result = on_result,
        .on_refused = on_resource_refused,
        .on_idle = on_apply_idle,
        .on_state_error = on_state_error,
        .ud = s,
    };
    if ((s->apply = apply_new(&ao, err, errsz)) == NULL)
        goto fail;
    /* A report-only audit reads; the changes a daemon left pending are
     * reported, never applied from here. */
    if (o->c.readonly)
        apply_pause(s->apply, true);
    struct pull_opts po = {
        .base = o->base,
        .http = o->http,
        .ledger = o->ledger,
        .mirror = o->mirror,
        .apply = s->apply,
        .strict = o->c.strict,
        .deep = o->c.deep,
        .readonly = o->c.readonly,
        .pathmap = o->pathmap,
        .max_delete = o->c.max_delete,
        .max_delete_share = o->c.max_delete_share,
        .force_delete = o->c.force_delete,
        .on_diff = on_diff,
        .on_progress = on_pull_progress,
        .on_bad_entry = on_pull_bad_entry,
        .on_done = on_pull_done,
        .ud = s,
    };
    struct dump_opts dumo = {
        .base = o->base,
        .http = o->http,
        .ledger = o->ledger,
        .mirror = o->mirror,
        .pathmap = o->pathmap,
        .apply = s->apply,
        .tmpbase = o->c.state_path != NULL ? o->c.state_path : "./.rssub",
        .max_package = 0,
        .threads = o->c.dump_threads,
        /* --timeout bounds a package's silence, not its length: a
         * package may take long, a Source that stopped sending must not
         * hold the baseline forever */
        .stall_ms = o->c.timeout_ms,
        .on_problem = on_dump_problem,
        .on_done = on_dump_done,
        .ud = s,
    };
    if ((s->pull = pull_new(&po)) == NULL ||
        (s->dump = dump_new(&dumo)) == NULL ||
        (s->discovery = discovery_new(o->base, o->http, on_discovered,
                                      s)) == NULL) {
        snprintf(err, errsz, "out of memory");
        goto fail;
    }
    s->ev_poll = event_new(o->base, -1, EV_PERSIST, on_poll, s);
    s->ev_pull = event_new(o->base, -1, EV_PERSIST, on_safety_pull, s);
    s->ev_audit = event_new(o->base, -1, EV_PERSIST, on_audit_timer, s);
    s->ev_root = event_new(o->base, -1, EV_PERSIST, on_root_check, s);
    s->ev_retry_pull = evtimer_new(o->base, on_retry_pull, s);
    s->ev_ready = event_new(o->base, -1, EV_PERSIST, on_ready_tick, s);
    s->ev_end = evtimer_new(o->base, on_end_event, s);
    s->ev_reconcile = evtimer_new(o->base, on_reconcile_due, s);
    s->ev_retry_disc = evtimer_new(o->base, on_retry_discovery, s);
    s->ev_state = evtimer_new(o->base, on_state_retry, s);
    if (s->ev_state == NULL || s->ev_retry_disc == NULL || s->ev_poll == NULL || s->ev_pull == NULL || s->ev_audit == NULL ||
        s->ev_root == NULL || s->ev_retry_pull == NULL || s->ev_reconcile == NULL ||
        s->ev_ready == NULL || s->ev_end == NULL) {
        snprintf(err, errsz, "out of memory");
        goto fail;
    }
    if (o->metrics != NULL && register_metrics(s, o->metrics) != 0) {
        snprintf(err, errsz, "cannot register metrics");
        goto fail;
    }
    return s;
fail:
    session_free(s);
    return NULL;
}

void
session_free(struct session *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->nsets; i++) {
        follow_free(s->sets[i].follow);
        s->sets[i].follow = NULL;     /* apply_free may tell a failure */
        if (s->sets[i].ev_push_to != NULL)
            event_free(s->sets[i].ev_push_to);
        capwatch_free(s->sets[i].cw);
        rs_free(s->sets[i].websub_topic[0]);
        rs_free(s->sets[i].websub_topic[1]);
        rs_free(s->sets[i].key);
        rs_free(s->sets[i].source_key);
    }
    discovery_free(s->discovery);
    dump_free(s->dump);
    pull_free(s->pull);
    apply_free(s->apply);
    discovery_result_free(s->disc);
    struct event *evs[] = { s->ev_poll, s->ev_pull, s->ev_audit,
                            s->ev_root, s->ev_progress, s->ev_retry_pull,
                            s->ev_ready, s->ev_end, s->ev_reconcile,
                            s->ev_retry_disc, s->ev_state };
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
        if (evs[i] != NULL)
            event_free(evs[i]);
    rs_free(s);
}

int
session_start(struct session *s)
{
    int rc;

    if (s->state != SESSION_IDLE)
        return RS_ESTATE;
    if ((rc = discovery_start(s->discovery, s->o.c.source)) != 0)
        return rc;
    if (!s->o.c.readonly) {
        struct timeval tv = rs_time_tv_ms(SESSION_ROOT_CHECK_MS);
        event_add(s->ev_root, &tv);
    }
    session_set(s, SESSION_DISCOVERING, s->o.c.source);
    return 0;
}

static void source_refused(struct session *s, const char *url, long status);

/* One resource answered 401 or 403: its own failure (apply retries it,
 * then reports it failed), unless SESSION_REFUSED_SPELL different ones
 * were refused and no fetch went through for SESSION_REFUSED_SPELL_US. */
static void
on_resource_refused(void *ud, const char *uri, long status)
{
    struct session *s = ud;
    uint64_t h = rs_fnv1a64(uri);

    rs_metrics_counter_inc(s->m_refused);
    if (s->refused_spell == 0)
        s->refused_since = rs_time_now();
    bool again = false;               /* a retry of one refused already */
    for (unsigned i = 0; i < s->refused_spell; i++)
        again = again || s->refused_res[i] == h;
    if (!again && s->refused_spell < SESSION_REFUSED_SPELL)
        s->refused_res[s->refused_spell++] = h;
    if (s->refused_spell < SESSION_REFUSED_SPELL ||
        rs_time_now() - s->refused_since < SESSION_REFUSED_SPELL_US)
        return;
    s->refused_spell = 0;
    source_refused(s, uri, status);
}

void
session_source_refused(struct session *s, const char *url, long status)
{
    rs_metrics_counter_inc(s->m_refused);
    source_refused(s, url, status);
}

static void
source_refused(struct session *s, const char *url, long status)
{
    char st[16];

    if (s->state == SESSION_DONE)
        return;
    snprintf(st, sizeof(st), "%ld", status);
    /* Discovery probes several URLs: a site root a web server refuses
     * (nginx answers 403 for a directory without an index) while
     * /.well-known/resourcesync is readable is no reason to stop. The
     * refusal is remembered; on_discovered says it if nothing is found. */
    if (s->state == SESSION_DISCOVERING) {
        rs_log_kv(RS_LOG_DEBUG, "a discovery probe was refused; trying the "
                  "others", "url", url, "status", st, NULL);
        access_set(s, ACCESS_REFUSED, status == 401 ? "401" : "403");
        if (s->refused_url[0] == '\0') {
            snprintf(s->refused_url, sizeof(s->refused_url), "%s", url);
            s->refused_status = status;
        }
        return;
    }
    /* Said once per refusal spell in run (the backoff repeats it at most
     * once per retry in the pull and discovery errors), always in sync and
     * audit, which end here: waiting out --retries would not help. */
    if (s->o.cmd != SESSION_RUN || s->access != ACCESS_REFUSED)
        rs_log_kv(RS_LOG_ERROR, "the source refused access (see "
                  "--source-token-file, --header-file, --netrc-file, "
                  "--client-cert)", "url", url, "status", st, NULL);
    access_set(s, ACCESS_REFUSED, status == 401 ? "401" : "403");
    if (s->o.cmd != SESSION_RUN) {
        set_last_error(s, "the source refused access");
        s->nq = 0;
        finish(s, s->o.cmd == SESSION_AUDIT ? 3 : 1);
    }
}

int
session_log_failed(struct ledger *l)
{
    return ledger_todo_each_failed(l, on_failed_row, NULL);
}

void
session_set_metrics_port(struct session *s, int port)
{
    s->metrics_port = port;
}

void
session_info(struct session *s, struct session_info *out)
{
    out->state = session_state_names[s->state];
    out->source = s->o.c.source;
    out->lists = s->nsets;
    out->pulling = s->pulling != NULL ? s->pulling->d->caplist : NULL;
    if (todo_counts(s, &out->pending, &out->failed) != 0)
        out->pending = out->failed = -1;
    out->lag_s = gauge_lag(s);
}

int
session_list_info(const struct session *s, size_t i,
                  struct session_list_info *out)
{
    const struct set *st;
    struct follow_stats fs;

    if (i >= s->nsets)
        return RS_ENOTFOUND;
    st = &s->sets[i];
    out->caplist = st->d->caplist;
    out->phase = set_phase_names[st->phase];
    out->transport = transport_names[st->tr];
    out->channel_up = false;
    if (st->follow != NULL) {
        follow_stats(st->follow, &fs);
        out->channel_up = fs.connected[0];
    }
    out->websub_failing = st->websub_failing;
    out->baselined = st->baselined;
    out->push = set_push_word(st);
    out->why = st->tr_why;
    out->since = st->tr_since;
    return 0;
}
