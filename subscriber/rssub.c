/*
 * rssub.c - the subscriber: configuration, the four commands (run, sync,
 * audit, status), and the session that strings the modules together:
 * discovery -> pulls (baseline, incremental, reconcile) -> following push
 * channels, with gaps and framework notifications turned back into pulls.
 * Every mechanism lives in a module (docs/subscriber.md has the picture);
 * this file decides when each runs.
 *
 * Exit status: 0 success (audit: in sync), 1 failure (audit: differences;
 * sync: resources that could not be mirrored), 2 usage or configuration,
 * 3 audit or status could not complete.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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
#include "rs_config.h"
#include "rs_http.h"
#include "rs_httpguard.h"
#include "rs_log.h"
#include "rs_metrics.h"
#include "rs_sock.h"
#include "rs_url.h"
#include "stray.h"
#include "wsclient.h"

#define RSSUB_MAX_SETS 16
#define RSSUB_PROGRESS_MS 250
#define RSSUB_READY_TICK_MS 200   /* run: is the first sync applied yet? */
#define RSSUB_RECONCILE_MIN_MS (60 * 1000)   /* framework-triggered */
/* A channel replays from this long before a pull began: the hub's ids are
 * its clock, the Source's change times are the Source's. */
#define RSSUB_MARK_MARGIN_US (60 * 1000000LL)

enum cmd { CMD_RUN, CMD_SYNC, CMD_AUDIT, CMD_STATUS };

static struct {
    char *source;
    char *mirror;
    char *state;
    char **sets;
    char **prefixes;
    char **maps;
    char **channels;
    int64_t parallel;
    int64_t host_conns;
    int64_t rate;
    int64_t retries;
    int64_t timeout_ms;
    uint64_t max_body;
    char *fsync;
    char *attic;
    bool sync_full;
    bool dump;
    bool strict;
    bool push;
    char *transport;
    struct rs_config_hostport callback_listen;
    char *callback_url;
    int64_t lease_ms;
    int64_t poll_ms;
    int64_t push_timeout_ms;
    int64_t pull_ms;
    int64_t audit_ms;
    bool audit_fix;
    bool fix;
    int64_t max_delete;
    int64_t max_delete_share;
    bool force_delete;
    bool deep;
    struct rs_config_hostport metrics_listen;
    struct rs_httpguard_limits http_limits;   /* --metrics-listen's */
    char *ready_file;
    int64_t drain_ms;
    bool progress;
    char *log_level;
    char *log_format;
    char *log_file;
} conf;

static const struct rs_config_opt options[] = {
    RS_CONFIG_STRING("source", 's', &conf.source, "URL", NULL,
                     "the Source: a site root, Source Description, "
                     "Capability List, or any of its resources (required)"),
    RS_CONFIG_STRING("mirror", 'm', &conf.mirror, "DIR", NULL,
                     "the mirror directory (required)"),
    RS_CONFIG_STRING("state", 0, &conf.state, "FILE", NULL,
                     "state database (default MIRROR's parent/.NAME.rssub.db; "
                     "never inside the mirror)"),
    RS_CONFIG_LIST("set", 0, &conf.sets, "CAPLIST", NULL,
                   "follow only this Capability List (its URL, or a part of "
                   "it); default: all"),
    RS_CONFIG_LIST("prefix", 0, &conf.prefixes, "URI", NULL,
                   "resources may live under this URI prefix (default: the "
                   "Source's origin)"),
    RS_CONFIG_LIST("map", 0, &conf.maps, "URI_PREFIX=DIR", NULL,
                   "mirror resources under URI_PREFIX into DIR (relative to "
                   "the mirror)"),
    RS_CONFIG_LIST("channel", 0, &conf.channels, "WS_URI", NULL,
                   "the change channel's WebSocket URI(s), tried in turn "
                   "(default: from the Capability List)"),
    RS_CONFIG_INT("parallel", 'j', &conf.parallel, "32", 1, 4096,
                  "resources fetched at once"),
    RS_CONFIG_INT("host-conns", 0, &conf.host_conns, "8", 1, 1024,
                  "connections to one host"),
    RS_CONFIG_INT("rate", 0, &conf.rate, "0", 0, 1000000,
                  "fetches per second at most (0: no limit)"),
    RS_CONFIG_INT("retries", 0, &conf.retries, "5", 1, 1000,
                  "attempts at one resource before it is reported failed"),
    RS_CONFIG_DURATION("timeout", 0, &conf.timeout_ms, "2m", 1000, 86400000,
                       "longest fetch of one resource or document"),
    RS_CONFIG_SIZE("max-resource", 0, &conf.max_body, "1G", 0, 0,
                   "largest resource mirrored"),
    RS_CONFIG_STRING("fsync", 0, &conf.fsync, "POLICY", "file",
                     "none, file (each file before it replaces the old "
                     "one) or full (and its directory)"),
    RS_CONFIG_STRING("attic", 0, &conf.attic, "DIR", NULL,
                     "move deleted resources here instead of deleting them"),
    RS_CONFIG_BOOL("dump", 0, &conf.dump, "false",
                   "make the baseline from the Source's Resource Dump when it "
                   "offers one (then fetch what the dump lacks)"),
    RS_CONFIG_BOOL("sync-full", 0, &conf.sync_full, "false",
                   "fsync the state database at every commit (power-loss "
                   "safe; a crash of the process is safe without it)"),
    RS_CONFIG_BOOL("strict", 0, &conf.strict, "false",
                   "treat document warnings as errors"),
    RS_CONFIG_STRING("transport", 0, &conf.transport, "KIND", "auto",
                     "how changes come: auto (WebSocket, else WebSub with "
                     "--callback-listen, else polling), websocket, websub or "
                     "poll"),
    RS_CONFIG_BOOL("push", 0, &conf.push, "true",
                   "follow push channels (--no-push: poll Change Lists)"),
    RS_CONFIG_HOSTPORT("callback-listen", 0, &conf.callback_listen, NULL,
                       "receive WebSub notifications here (used when the "
                       "Source offers WebSub and no WebSocket channel)"),
    RS_CONFIG_STRING("callback-url", 0, &conf.callback_url, "URL", NULL,
                     "public URL of --callback-listen (default "
                     "http://HOST:PORT/)"),
    RS_CONFIG_DURATION("lease", 0, &conf.lease_ms, "1d", 0, 0,
                       "WebSub lease asked for (0: the hub's choice)"),
    RS_CONFIG_DURATION("poll-interval", 0, &conf.poll_ms, "30s", 100, 86400000,
                       "without push, pull Change Lists this often; with or "
                       "without, read the Capability List again this often "
                       "(channels come and go)"),
    RS_CONFIG_DURATION("push-timeout", 0, &conf.push_timeout_ms, "30s", 0,
                       86400000, "a WebSocket channel down this long: poll "
                       "Change Lists (every --poll-interval) until it is back"),
    RS_CONFIG_DURATION("pull-interval", 0, &conf.pull_ms, "10m", 0, 0,
                       "with push, also pull Change Lists this often, as a "
                       "safety net (0: never)"),
    RS_CONFIG_DURATION("audit-interval", 0, &conf.audit_ms, "0", 0, 0,
                       "run: compare with the Resource List this often "
                       "(0: never)"),
    RS_CONFIG_BOOL("audit-fix", 0, &conf.audit_fix, "false",
                   "run: repair what a periodic audit finds"),
    RS_CONFIG_BOOL("fix", 0, &conf.fix, "false",
                   "audit: repair the differences (fetch, delete)"),
    RS_CONFIG_INT("max-delete", 0, &conf.max_delete, "0", 0, INT64_MAX,
                  "a reconcile or --fix whose Resource List leaves out more "
                  "than N mirrored resources deletes none of them (0: no "
                  "count limit)"),
    RS_CONFIG_INT("max-delete-share", 0, &conf.max_delete_share, "50", 0,
                  100, "...nor when it leaves out more than this percent of "
                  "the mirror (0: no share limit)"),
    RS_CONFIG_BOOL("force-delete", 0, &conf.force_delete, "false",
                   "delete whatever the Resource List leaves out, past "
                   "--max-delete and --max-delete-share"),
    RS_CONFIG_BOOL("deep", 0, &conf.deep, "false",
                   "audit: hash every mirrored file (default: sizes and "
                   "the recorded hashes)"),
    RS_CONFIG_HOSTPORT("metrics-listen", 0, &conf.metrics_listen, NULL,
                       "serve Prometheus metrics at http://HOST:PORT/metrics"),
    RS_HTTPGUARD_CONFIG(&conf.http_limits, "30s"),
    RS_CONFIG_STRING("ready-file", 0, &conf.ready_file, "PATH", NULL,
                     "run: write {\"metrics\":PORT} here once the first "
                     "sync is done and push is followed"),
    RS_CONFIG_DURATION("drain-time", 0, &conf.drain_ms, "10s", 0, 600000,
                       "on SIGTERM, how long to let fetches in flight finish"),
    RS_CONFIG_BOOL("progress", 0, &conf.progress, "true",
                   "a progress line on a terminal"),
    RS_CONFIG_LOG(&conf.log_level, &conf.log_format, &conf.log_file),
    RS_CONFIG_END,
};

/* How a set's changes come now. Push is preferred (WebSocket, then
 * WebSub); polling Change Lists stands in while push cannot give a
 * gap-free stream: no channel offered (yet), the channel down longer than
 * --push-timeout, a WebSub subscription refused. Every change goes
 * through set_transport, which logs it with its reason. */
enum transport { TR_NONE, TR_WEBSOCKET, TR_WEBSUB, TR_POLL, TR_COUNT };

static const char *const transport_names[TR_COUNT] = {
    "none", "websocket", "websub", "poll"
};

/* One Capability List followed. */
struct set {
    struct discovery_set *d;      /* in sub.disc; replaced when the list
                                     is read again and offers otherwise */
    char *key;                    /* positions: "<caplist>" */
    char *source_key;             /* "<caplist>#source" */
    struct follow *follow;
    struct capwatch *cw;          /* run: re-reads the Capability List */
    enum transport tr;
    char *websub_topic[2];        /* subscribed by WebSub (copies), or NULL */
    bool websub_failing;          /* the change topic's subscription was
                                     refused, failed or expired */
    rs_time_t covered;            /* when the last pull that read the
                                     Source to the end began: a channel
                                     taken up later replays from before it */
    bool baselined;
    bool dumped;                  /* --dump: the dump was unpacked */
};

enum pull_why { WHY_START, WHY_GAP, WHY_FRAMEWORK, WHY_POLL, WHY_AUDIT };

struct job_q {
    int set;
    enum pull_kind kind;
    enum pull_why why;
    rs_time_t since;              /* CHANGES: read from no later than this
                                     (RS_TIME_NONE: the set's mark) */
};

struct sub {
    enum cmd cmd;
    struct event_base *base;
    struct rs_http *http;
    struct ledger *ledger;
    struct mirror *mirror;
    struct pathmap *pathmap;
    struct apply *apply;
    struct pull *pull;
    struct dump *dump;
    struct discovery *discovery;
    struct discovery_result *disc;
    struct wsclient *ws;
    struct hubsub *hubsub;
    struct set sets[RSSUB_MAX_SETS];
    size_t nsets;
    struct job_q q[64];
    size_t nq;
    int pulling;                  /* set index of the pull under way, -1 */
    enum pull_why pull_why;
    rs_time_t pull_mark;          /* when the first pulls began */
    rs_time_t pull_started;       /* when the pull under way began */
    bool started;                 /* first round of pulls done */
    int64_t first_round_seq;      /* run: the todo rows up to this seq are
                                     what the first pulls queued; -1 until
                                     they are done */
    bool draining;
    bool audit_dirty;             /* audit found differences */
    bool deletions_held;          /* a reconcile hit the --max-delete valve */
    bool strays_due;              /* run: the periodic audit's last step */
    bool failed;                  /* a pull failed */
    int64_t drain_waited_ms;
    unsigned unsubscribing;       /* WebSub unsubscriptions not confirmed */
    uint64_t refused;             /* URIs refused by this run */
    bool readonly;                /* a report-only audit: applies nothing */
    int64_t pull_backoff_ms;      /* run: after a failed pull */
    int retry_set;
    enum pull_kind retry_kind;
    rs_time_t last_reconcile;
    char *state_path;
    struct event *ev_sig[3], *ev_poll, *ev_pull, *ev_audit, *ev_progress,
        *ev_drain, *ev_retry_pull, *ev_ready;
    struct evhttp *mhttp;
    struct rs_httpguard *mguard;  /* mhttp's deadlines and caps */
    int metrics_port;
    struct rs_metrics *metrics;
    struct rs_metrics_counter *m_applied[APPLY_OUTCOMES];
    struct rs_metrics_counter *m_transport[TR_COUNT];
    struct rs_metrics_counter *m_fallback[4];
    struct rs_metrics_counter *m_notifications;
    struct rs_metrics_counter *m_strays;
    struct rs_metrics_counter *m_held;
    rs_time_t counted_at;         /* todo_counts' cache (metrics) */
    int64_t count_pending, count_failed;
    uint64_t listed;              /* entries read by pulls (progress) */
    uint64_t listed_before;       /* ... by the pulls before this one */
    bool tty;
    int exit_code;
};

static void run_queue(struct sub *s);
static void mark_first_round(struct sub *s);
static struct sub *the_sub;          /* one per process, for set callbacks */
static struct rs_config *the_cfg;

/* ------------------------------------------------------------- helpers */

static bool
list_empty(char *const *l)
{
    return l == NULL || l[0] == NULL;
}

static const char *
cmd_name(enum cmd c)
{
    static const char *const n[] = { "run", "sync", "audit", "status" };
    return n[c];
}

static char *
default_state_path(const char *mirror)
{
    char a[PATH_MAX], b[PATH_MAX], *path;
    size_t n;

    snprintf(a, sizeof(a), "%s", mirror);
    n = strlen(a);
    while (n > 1 && a[n - 1] == '/')
        a[--n] = '\0';
    snprintf(b, sizeof(b), "%s", a);
    n = strlen(dirname(a)) + strlen(basename(b)) + 16;
    if ((path = rs_malloc(n)) == NULL)
        return NULL;
    snprintf(a, sizeof(a), "%s", mirror);
    snprintf(b, sizeof(b), "%s", mirror);
    while (strlen(a) > 1 && a[strlen(a) - 1] == '/') {
        a[strlen(a) - 1] = '\0';
        b[strlen(b) - 1] = '\0';
    }
    if (snprintf(path, n, "%s/.%s.rssub.db", dirname(a), basename(b)) >=
        (int)n) {
        rs_free(path);
        return NULL;
    }
    return path;
}

/* Is path (existing or not) inside dir? Compared on real paths of the
 * parents, so "mirror/../x" and symlinked spellings are seen through. */
static bool
path_inside(const char *path, const char *dir)
{
    char p[PATH_MAX], d[PATH_MAX + 2], rp[PATH_MAX], rd[PATH_MAX];
    size_t n;

    snprintf(p, sizeof(p), "%s", path);
    if (realpath(dir, rd) == NULL)
        return false;
    if (realpath(dirname(p), rp) == NULL)
        return false;
    snprintf(d, sizeof(d), "%s/", rd);
    n = strlen(d);
    return strcmp(rp, rd) == 0 || strncmp(rp, d, n) == 0;
}

/* A state write or read that failed where the caller can go on: said
 * once in the log, and the next commit or start redoes the work. */
static void
state_warn(struct sub *s, int rc, const char *what)
{
    if (rc < 0)
        rs_log_kv(RS_LOG_ERROR, "state", "what", what, "error",
                  ledger_errstr(s->ledger), NULL);
}

static void
set_last_error(struct sub *s, const char *what)
{
    char now[RS_TIME_BUFSZ];

    rs_time_format(rs_time_now(), now);
    if (s->ledger == NULL || apply_txn(s->apply) != 0)
        return;
    state_warn(s, ledger_meta_set(s->ledger, "last_error", what),
               "last error");
    state_warn(s, ledger_meta_set(s->ledger, "last_error_at", now),
               "last error");
}

static rs_time_t
source_dt(struct sub *s, struct set *st)
{
    rs_time_t dt = RS_TIME_NONE;
    char *id = NULL;

    if (ledger_pos_get(s->ledger, st->source_key, &id, &dt) != 0)
        dt = RS_TIME_NONE;
    rs_free(id);
    return dt;
}

static void
raise_source_dt(struct sub *s, struct set *st, rs_time_t dt)
{
    rs_time_t cur = source_dt(s, st);

    if (dt == RS_TIME_NONE || (cur != RS_TIME_NONE && cur >= dt))
        return;
    if (apply_txn(s->apply) == 0)
        state_warn(s, ledger_pos_set(s->ledger, st->source_key, NULL, dt),
                   "position");
}

/* ----------------------------------------------------------- progress */

static void
on_progress_tick(evutil_socket_t fd, short what, void *arg)
{
    struct sub *s = arg;
    struct apply_stats as;
    uint64_t done;

    (void)fd;
    (void)what;
    apply_stats(s->apply, &as);
    done = as.outcomes[APPLY_CREATED] + as.outcomes[APPLY_UPDATED] +
           as.outcomes[APPLY_DELETED] + as.outcomes[APPLY_UNCHANGED];
    fprintf(stderr, "\r%s: listed %llu, applied %llu, failed %llu, "
            "%.1f MB, in flight %u   ", cmd_name(s->cmd),
            (unsigned long long)s->listed, (unsigned long long)done,
            (unsigned long long)as.outcomes[APPLY_FAILED],
            (double)as.bytes / 1e6, as.in_flight);
    fflush(stderr);
}

static void
progress_end(struct sub *s)
{
    if (s->ev_progress != NULL && evtimer_pending(s->ev_progress, NULL)) {
        event_del(s->ev_progress);
        on_progress_tick(-1, 0, s);
        fputc('\n', stderr);
    }
}

/* ---------------------------------------------------------- the end */

static void
finish(struct sub *s, int code)
{
    s->exit_code = code;
    progress_end(s);
    event_base_loopexit(s->base, NULL);
}

static void
summary(struct sub *s, const char *msg)
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
queue_pull_since(struct sub *s, int set, enum pull_kind kind,
                 enum pull_why why, rs_time_t since)
{
    for (size_t i = 0; i < s->nq; i++) {
        struct job_q *q = &s->q[i];
        if (q->set == set && q->kind == kind) {
            /* One pull serves both: from the earlier of the two. */
            if (since != RS_TIME_NONE &&
                (q->since == RS_TIME_NONE || since < q->since))
                q->since = since;
            return;
        }
    }
    if (s->nq == sizeof(s->q) / sizeof(s->q[0]))
        return;
    s->q[s->nq++] = (struct job_q){ set, kind, why, since };
    if (s->pulling < 0)
        run_queue(s);
}

static void
queue_pull(struct sub *s, int set, enum pull_kind kind, enum pull_why why)
{
    queue_pull_since(s, set, kind, why, RS_TIME_NONE);
}

static void
on_pull_progress(void *ud, uint64_t entries)
{
    struct sub *s = ud;

    s->listed = s->listed_before + entries;
}

static void
on_diff(void *ud, const char *uri, const char *what)
{
    struct sub *s = ud;

    if (strcmp(what, "refused") == 0) {
        /* Listed, but not for this mirror (--prefix, --map, an unsafe
         * path): said, and not a difference. */
        rs_log_kv(RS_LOG_WARN, "audit: listed but refused here", "uri", uri,
                  NULL);
        return;
    }
    s->audit_dirty = true;
    if (s->cmd == CMD_AUDIT)
        printf("%s %s\n", what, uri);
    else
        rs_log_kv(RS_LOG_WARN, "audit: differs", "uri", uri, "what", what,
                  NULL);
}

/* ------------------------------------------------------------- strays */

/* A report-only audit beside a running daemon (ledger_writer_pid) may see
 * a file it renamed into place before it committed the file's row: files
 * that changed this recently are not judged then. */
#define RSSUB_STRAY_SETTLE_US (60 * 1000000LL)

struct stray_run {
    struct sub *s;
    bool fix;
    uint64_t removed, kept;
};

static int
on_stray(void *ud, const char *rel, const struct stat *st)
{
    struct stray_run *sr = ud;
    struct sub *s = sr->s;
    int rc;

    (void)st;
    if (s->cmd == CMD_AUDIT)
        printf("stray %s\n", rel);
    else
        rs_log_kv(RS_LOG_WARN, "audit: stray file", "path", rel, "fix",
                  sr->fix ? "remove" : "no", NULL);
    if (!sr->fix)
        return 0;
    if ((rc = mirror_remove(s->mirror, rel)) == 0 || rc == RS_ENOTFOUND) {
        sr->removed++;
        return 0;
    }
    sr->kept++;
    rs_log_kv(RS_LOG_ERROR, "cannot remove a stray file", "path", rel,
              "error", mirror_errstr(s->mirror), NULL);
    return 0;
}

/* An audit's last step: files in the mirror that no resource accounts
 * for (stray.h), reported, and removed (or moved to the attic) with fix.
 * False when it could not be completed. */
static bool
check_strays(struct sub *s, bool fix)
{
    struct stray_run sr = { .s = s, .fix = fix && !s->readonly };
    struct stray_stats st;
    char n[4][24];
    rs_time_t not_before = s->readonly && ledger_writer_pid(s->state_path)
                           ? rs_time_now() - RSSUB_STRAY_SETTLE_US
                           : RS_TIME_NONE;
    int rc;

    if (!s->readonly && apply_txn(s->apply) != 0)
        return false;
    rc = stray_scan(s->ledger, s->mirror, not_before, on_stray, &sr, &st);
    rs_metrics_counter_add(s->m_strays, st.strays);
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
                  rs_strerror(rc), "state", ledger_errstr(s->ledger),
                  "mirror", mirror_errstr(s->mirror), NULL);
        return false;
    }
    return sr.kept == 0;
}

static void after_pulls(struct sub *s);

static void
on_retry_pull(evutil_socket_t fd, short what, void *arg)
{
    struct sub *s = arg;

    (void)fd;
    (void)what;
    queue_pull(s, s->retry_set, s->retry_kind, WHY_START);
}

static void
retry_pull_later(struct sub *s, int set, enum pull_kind kind)
{
    struct timeval tv;

    s->pull_backoff_ms = s->pull_backoff_ms == 0 ? 1000
                         : s->pull_backoff_ms * 2 > 300000 ? 300000
                         : s->pull_backoff_ms * 2;
    tv.tv_sec = s->pull_backoff_ms / 1000;
    tv.tv_usec = (s->pull_backoff_ms % 1000) * 1000;
    s->retry_set = set;
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

static void
on_pull_done(void *ud, int rc, const char *err, const struct pull_report *r)
{
    struct sub *s = ud;
    struct set *st = &s->sets[s->pulling];
    char n[5][24];

    s->pulling = -1;
    s->listed_before += r->entries;
    if (rc != 0) {
        rs_log_kv(RS_LOG_ERROR, "pull failed", "caplist", st->d->caplist,
                  "error", err, NULL);
        set_last_error(s, err);
        s->failed = true;
        if (s->cmd != CMD_RUN) {
            s->nq = 0;
            finish(s, s->cmd == CMD_AUDIT ? 3 : 1);
            return;
        }
        /* The daemon tries again, backing off (the Source may be down);
         * it is not ready before a first round of pulls succeeded. */
        retry_pull_later(s, (int)(st - s->sets), r->kind);
        run_queue(s);
        return;
    }
    s->failed = false;
    s->pull_backoff_ms = 0;
    if (r->kind != PULL_AUDIT)
        st->covered = s->pull_started;
    /* A channel closed for a gap waits for this: it replays from a moment
     * before the pull began, so nothing falls between pull and push. The
     * reconcile a too-short Change List asks for comes first. */
    if (st->follow != NULL && r->kind != PULL_AUDIT &&
        (r->kind != PULL_CHANGES || r->reached_back || !st->baselined))
        follow_resume(st->follow, s->pull_started - RSSUB_MARK_MARGIN_US);
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
    if (r->deletions_held > 0) {
        char h[24], live[24];
        snprintf(h, sizeof(h), "%llu", (unsigned long long)r->deletions_held);
        snprintf(live, sizeof(live), "%lld", (long long)r->mirror_live);
        rs_log_kv(RS_LOG_ERROR, "the resource list leaves out too much of "
                  "the mirror: deleting none of it (a broken Source must not "
                  "wipe a mirror; --force-delete, --max-delete and "
                  "--max-delete-share decide)", "caplist", st->d->caplist,
                  "would_delete", h, "mirror_live", r->mirror_live >= 0 ? live : "-", NULL);
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
        queue_pull(s, (int)(st - s->sets), PULL_RECONCILE, s->pull_why);
    } else if (r->kind == PULL_CHANGES) {
        raise_source_dt(s, st, r->newest);
    } else if (r->kind == PULL_RECONCILE) {
        raise_source_dt(s, st, r->newest);
        if (apply_txn(s->apply) == 0 &&
            ledger_meta_set(s->ledger, st->key, "baselined") == 0)
            st->baselined = true;
        s->last_reconcile = rs_time_now();
    }
    if (apply_flush(s->apply) != 0)
        rs_log_kv(RS_LOG_ERROR, "cannot save state", "error",
                  ledger_errstr(s->ledger), NULL);
    run_queue(s);                     /* the next pull, or after_pulls */
    mark_first_round(s);
}

static void
run_queue(struct sub *s)
{
    struct job_q j;
    struct set *st;
    const char *url;
    rs_time_t since = RS_TIME_NONE;
    int rc;

    while (s->pulling < 0 && s->nq > 0 && !s->draining) {
        j = s->q[0];
        memmove(s->q, s->q + 1, --s->nq * sizeof(s->q[0]));
        st = &s->sets[j.set];
        if (j.kind == PULL_CHANGES && (!st->baselined ||
                                       st->d->changelist == NULL)) {
            if (st->d->changelist == NULL && st->baselined)
                rs_log_kv(RS_LOG_INFO, "no change list: reconciling with the "
                          "resource list", "caplist", st->d->caplist, NULL);
            j.kind = PULL_RECONCILE;
        }
        if (j.kind == PULL_CHANGES) {
            url = st->d->changelist;
            since = source_dt(s, st);
            /* A seam pull reads from where the mark stood when it was
             * asked for: push may have moved the mark since. */
            if (j.since != RS_TIME_NONE && since != RS_TIME_NONE &&
                j.since < since)
                since = j.since;
            if (since == RS_TIME_NONE)
                j.kind = PULL_RECONCILE;
        }
        if (j.kind != PULL_CHANGES) {
            url = st->d->resourcelist;
            if (url == NULL) {
                rs_log_kv(RS_LOG_ERROR, "the capability list offers no "
                          "resource list", "caplist", st->d->caplist, NULL);
                s->failed = true;
                continue;
            }
            if (j.kind == PULL_RECONCILE && st->baselined)
                rs_metrics_counter_inc(s->m_fallback[1]);
        }
        if (j.why == WHY_POLL && j.kind == PULL_CHANGES)
            rs_metrics_counter_inc(s->m_fallback[3]);
        s->pull_why = j.why;
        s->pulling = j.set;
        s->pull_started = rs_time_now();
        if (j.kind == PULL_RECONCILE && !st->baselined && conf.dump &&
            !st->dumped && st->d->resourcedump != NULL) {
            /* The dump first; the reconcile is queued again after it and
             * fetches only what the dump did not hold. */
            memmove(s->q + 1, s->q, s->nq * sizeof(s->q[0]));
            s->q[0] = j;
            s->nq++;
            if ((rc = dump_start(s->dump, st->d->resourcedump)) == 0) {
                rs_log_kv(RS_LOG_INFO, "unpacking the resource dump", "url",
                          st->d->resourcedump, NULL);
                return;
            }
            memmove(s->q, s->q + 1, --s->nq * sizeof(s->q[0]));
            st->dumped = true;
            rs_log_kv(RS_LOG_WARN, "cannot start the dump", "error",
                      rs_strerror(rc), NULL);
        }
        rc = pull_start(s->pull, j.kind, url,
                        j.kind != PULL_CHANGES ? st->d->changelist : NULL,
                        since);
        if (rc != 0) {
            s->pulling = -1;
            rs_log_kv(RS_LOG_ERROR, "cannot start a pull", "url", url,
                      "error", rs_strerror(rc), NULL);
            s->failed = true;
            continue;
        }
        rs_log_kv(RS_LOG_INFO, j.kind == PULL_CHANGES ? "pulling change lists"
                  : j.kind == PULL_AUDIT ? "auditing" : "pulling resource list",
                  "url", url, NULL);
    }
    if (s->pulling < 0 && s->nq == 0)
        after_pulls(s);
}

static void
on_dump_problem(void *ud, const char *uri, const char *why)
{
    (void)ud;
    rs_log_kv(RS_LOG_WARN, "not taken from the dump (fetched instead)", "uri",
              uri, "why", why, NULL);
}

static void
on_dump_done(void *ud, int rc, const char *err, const struct dump_report *r)
{
    struct sub *s = ud;
    struct set *st = &s->sets[s->pulling];
    char n[4][24];

    s->pulling = -1;
    st->dumped = true;
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
    state_warn(s, apply_flush(s->apply), "commit");
    run_queue(s);
}

/* ----------------------------------------------------- push channels */

static int
set_of_follow(struct sub *s, const char *topic)
{
    for (size_t i = 0; i < s->nsets; i++)
        for (int k = 0; k < 2; k++)
            if ((s->sets[i].websub_topic[k] != NULL &&
                 strcmp(s->sets[i].websub_topic[k], topic) == 0) ||
                (s->sets[i].d->topic[k] != NULL &&
                 strcmp(s->sets[i].d->topic[k], topic) == 0))
                return (int)i;
    return -1;
}

static bool
want_ws(void)
{
    return conf.push && (strcmp(conf.transport, "auto") == 0 ||
                         strcmp(conf.transport, "websocket") == 0);
}

static bool
want_websub(void)
{
    return conf.push && (strcmp(conf.transport, "auto") == 0 ||
                         strcmp(conf.transport, "websub") == 0);
}

/* The WebSocket URIs of a set's channel kind k, as far as we follow them:
 * --channel overrides the first set's change channel; NULL-ended, in
 * buf (2 slots) or the configuration. */
static const char *const *
set_ws_uris(struct sub *s, struct set *st, int k, const char **buf)
{
    buf[0] = buf[1] = NULL;
    if (!want_ws() || s->ws == NULL)
        return buf;
    if (k == DISCOVERY_CHANGE && st == &s->sets[0] &&
        !list_empty(conf.channels))
        return (const char *const *)conf.channels;
    buf[0] = st->d->ws[k];
    return buf;
}

/* Where a channel taken up now replays from: a moment before the last
 * pull that covered the Source began (docs/subscriber.md). */
static rs_time_t
set_mark(struct sub *s, struct set *st)
{
    rs_time_t t = st->covered != RS_TIME_NONE ? st->covered : s->pull_mark;

    return t - RSSUB_MARK_MARGIN_US;
}

/* The one place a set's transport changes: logged once, with why, and
 * counted. Polling takes over at once (it does not wait a poll interval). */
static void
set_transport(struct sub *s, struct set *st, enum transport to,
              const char *why)
{
    enum transport from = st->tr;
    const char *buf[2], *ck = NULL, *cv = NULL;

    if (from == to)
        return;
    st->tr = to;
    rs_metrics_counter_inc(s->m_transport[to]);
    if (to == TR_WEBSOCKET) {
        ck = "websocket";
        cv = set_ws_uris(s, st, DISCOVERY_CHANGE, buf)[0];
    } else if (to == TR_WEBSUB) {
        ck = "websub";
        cv = st->websub_topic[DISCOVERY_CHANGE];
    }
    rs_log_kv(RS_LOG_INFO, to == TR_POLL ? "polling change lists"
              : "following", "caplist", st->d->caplist, "from",
              transport_names[from], "to", transport_names[to], "reason",
              why, cv != NULL ? ck : NULL, cv, NULL);
    if (to == TR_POLL && from != TR_NONE && s->started)
        queue_pull(s, (int)(st - s->sets), PULL_CHANGES, WHY_POLL);
}

/* Which transport the set can use now, from what its Capability List
 * offers and how its channels fare; why says so in a phrase. */
static enum transport
transport_now(struct sub *s, struct set *st, const char **why)
{
    const char *buf[2];
    struct follow_stats fs;

    if (set_ws_uris(s, st, DISCOVERY_CHANGE, buf)[0] != NULL) {
        follow_stats(st->follow, &fs);
        if (fs.connected[DISCOVERY_CHANGE]) {
            *why = "channel connected";
            return TR_WEBSOCKET;
        }
        /* Connecting or reconnecting: trusted for --push-timeout, then
         * polling stands in until the channel is back. */
        if (fs.down_since == RS_TIME_NONE ||
            rs_time_now() - fs.down_since <=
            (rs_time_t)conf.push_timeout_ms * 1000) {
            *why = "channel offered, connecting";
            return st->tr == TR_POLL ? TR_POLL : TR_WEBSOCKET;
        }
        *why = "channel down longer than --push-timeout";
        return TR_POLL;
    }
    if (st->websub_topic[DISCOVERY_CHANGE] != NULL) {
        *why = st->websub_failing ? "websub subscription not active"
                                  : "websub subscription";
        return st->websub_failing ? TR_POLL : TR_WEBSUB;
    }
    *why = !conf.push ? "--no-push"
         : strcmp(conf.transport, "poll") == 0 ? "--transport poll"
         : st->d->topic[DISCOVERY_CHANGE] != NULL && want_websub()
           ? "no websocket channel offered; websub needs --callback-listen"
         : "no push channel offered";
    return TR_POLL;
}

static void
transport_update(struct sub *s, struct set *st)
{
    const char *why = "";
    enum transport to;

    if (st->follow == NULL)
        return;                       /* draining */
    to = transport_now(s, st, &why);
    set_transport(s, st, to, why);
}

/* Subscribe by WebSub where the set should (no WebSocket channel, a
 * topic offered, a callback listener), and drop subscriptions that
 * should not be (a channel came, the topic moved or went). */
static void
websub_update(struct sub *s, struct set *st)
{
    const char *buf[2];
    bool ws = set_ws_uris(s, st, DISCOVERY_CHANGE, buf)[0] != NULL;

    for (int k = 0; k < 2; k++) {
        const char *want = !ws && want_websub() && s->hubsub != NULL
                           ? st->d->topic[k] : NULL;
        char *have = st->websub_topic[k];

        if (have != NULL && want != NULL && strcmp(have, want) == 0)
            continue;
        if (have != NULL) {
            if (hubsub_unsubscribe(s->hubsub, have) == 0)
                s->unsubscribing++;
            rs_free(have);
            st->websub_topic[k] = NULL;
        }
        if (want == NULL)
            continue;
        if (hubsub_subscribe(s->hubsub, st->d->hub[k], want) != 0 ||
            (st->websub_topic[k] = rs_strdup(want)) == NULL) {
            rs_log_kv(RS_LOG_WARN, "cannot subscribe by websub", "topic",
                      want, "hub", st->d->hub[k], NULL);
            continue;
        }
        if (k == DISCOVERY_CHANGE)
            st->websub_failing = false;
        rs_log_kv(RS_LOG_INFO, "subscribing by websub", "caplist",
                  st->d->caplist, "topic", want, "hub", st->d->hub[k], NULL);
    }
}

static void
on_follow_gap(void *ud, const char *why)
{
    struct set *st = ud;
    struct sub *s = the_sub;

    rs_log_kv(RS_LOG_WARN, "gap in the channel: pulling change lists",
              "caplist", st->d->caplist, "why", why, NULL);
    rs_metrics_counter_inc(s->m_fallback[0]);
    queue_pull_since(s, (int)(st - s->sets), PULL_CHANGES, WHY_GAP,
                     source_dt(s, st));
}

static void
on_follow_live(void *ud)
{
    struct set *st = ud;
    struct sub *s = the_sub;

    rs_log_kv(RS_LOG_INFO, "channel live again: pulling change lists to "
              "cover the seam", "caplist", st->d->caplist, NULL);
    queue_pull_since(s, (int)(st - s->sets), PULL_CHANGES, WHY_GAP,
                     source_dt(s, st));
}

static void
on_follow_framework(void *ud, enum rs_capability cap, enum rs_change ch,
                    const char *loc)
{
    struct set *st = ud;
    struct sub *s = the_sub;
    int i = (int)(st - s->sets);

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
        queue_pull(s, i, PULL_CHANGES, WHY_FRAMEWORK);
        break;
    case RS_CAP_RESOURCELIST:
        /* A new snapshot: reconcile, but not more often than a minute
         * (a busy Source publishes them often; changes cover the rest). */
        if (rs_time_now() - s->last_reconcile >
            (rs_time_t)RSSUB_RECONCILE_MIN_MS * 1000)
            queue_pull(s, i, PULL_RECONCILE, WHY_FRAMEWORK);
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
    else
        rs_log_kv(RS_LOG_WARN, "channel closed", "uri", uri, "peer", peer,
                  "code", c, "reason", why, NULL);
    transport_update(the_sub, st);
}

static int
on_websub(void *ud, const struct hubsub_msg *m)
{
    struct sub *s = ud;
    int i = set_of_follow(s, m->topic);
    int rc;

    if (i < 0)
        return 0;                    /* not a topic of ours: drop it */
    if (s->sets[i].follow == NULL)
        return 1;                    /* stopping: 503, the hub keeps it */
    /* X-Hub-Id is not used to drop repeats: a delivery answered 503 comes
     * again with the same id, and must be taken then. Repeats are cheap:
     * the per-resource rules skip what the mirror holds. */
    rc = follow_take(s->sets[i].follow, m->body, m->len, "push");
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
        on_follow_gap(&s->sets[i], why);
    }
    return rc != 0;
}

static void
on_websub_state(void *ud, const char *topic, enum hubsub_state hs,
                const char *why)
{
    static const char *const names[] = { "active", "denied", "failed",
                                         "expired", "unsubscribed" };
    struct sub *s = ud;
    int i = set_of_follow(s, topic);

    rs_log_kv(hs == HUBSUB_ACTIVE || hs == HUBSUB_UNSUBSCRIBED
              ? RS_LOG_INFO : RS_LOG_WARN,
              "websub subscription", "topic", topic, "state", names[hs],
              "why", why, NULL);
    if (hs == HUBSUB_UNSUBSCRIBED && s->unsubscribing > 0)
        s->unsubscribing--;
    if (i < 0)
        return;
    struct set *st = &s->sets[i];
    const char *change = st->websub_topic[DISCOVERY_CHANGE];
    if (change != NULL && strcmp(change, topic) == 0 &&
        hs != HUBSUB_UNSUBSCRIBED) {
        st->websub_failing = hs != HUBSUB_ACTIVE;
        transport_update(s, st);
    }
    /* Until the hub verified us, nothing was delivered: what changed
     * before (since the pull at start, or while the lease had run out)
     * comes from the Change Lists. */
    if (hs == HUBSUB_ACTIVE)
        queue_pull(s, i, PULL_CHANGES, WHY_GAP);
}

/* The set's Capability List offers something else now: its channels are
 * taken up, moved or dropped, then the transport follows. */
static void
on_caplist_change(void *ud, struct discovery_set *now)
{
    struct set *st = ud;
    struct sub *s = the_sub;
    const char *buf[2];
    rs_time_t mark = set_mark(s, st);
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
        rc = follow_set_uris(st->follow, k, set_ws_uris(s, st, k, buf),
                             mark);
    if (rc != 0)
        rs_log_kv(RS_LOG_ERROR, "cannot follow the new channels", "error",
                  rs_strerror(rc), NULL);
    websub_update(s, st);
    transport_update(s, st);
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
setup_follow(struct sub *s)
{
    for (size_t i = 0; i < s->nsets; i++) {
        struct set *st = &s->sets[i];
        const char *chg[2], *fw[2];
        char err[256];
        struct follow_opts fo = {
            .base = s->base,
            .ledger = s->ledger,
            .apply = s->apply,
            .ws = s->ws,
            .key = st->key,
            .change_ws = set_ws_uris(s, st, DISCOVERY_CHANGE, chg),
            .framework_ws = set_ws_uris(s, st, DISCOVERY_FRAMEWORK, fw),
            .on_gap = on_follow_gap,
            .on_live = on_follow_live,
            .on_framework = on_follow_framework,
            .on_channel = on_follow_channel,
            .ud = st,
        };
        struct capwatch_opts co = {
            .base = s->base,
            .http = s->http,
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
        websub_update(s, st);
        transport_update(s, st);
    }
    return 0;
}

/* ----------------------------------------------------------- timers */

static void
on_poll(evutil_socket_t fd, short what, void *arg)
{
    struct sub *s = arg;

    (void)fd;
    (void)what;
    for (size_t i = 0; i < s->nsets; i++) {
        struct set *st = &s->sets[i];

        /* A hub out of reach must not stall the mirror. */
        transport_update(s, st);
        if (st->tr == TR_POLL)
            queue_pull(s, (int)i, PULL_CHANGES, WHY_POLL);
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
    struct sub *s = arg;

    (void)fd;
    (void)what;
    for (size_t i = 0; i < s->nsets; i++) {
        if (s->sets[i].tr != TR_POLL)
            queue_pull(s, (int)i, PULL_CHANGES, WHY_POLL);
    }
}

static void
on_audit_timer(evutil_socket_t fd, short what, void *arg)
{
    struct sub *s = arg;

    (void)fd;
    (void)what;
    s->strays_due = true;
    for (size_t i = 0; i < s->nsets; i++)
        queue_pull(s, (int)i, conf.audit_fix ? PULL_RECONCILE : PULL_AUDIT,
                   WHY_AUDIT);
}

/* ----------------------------------------------------------- idle */

static int
write_ready(struct sub *s)
{
    char tmp[PATH_MAX];
    FILE *f;

    snprintf(tmp, sizeof(tmp), "%s.tmp", conf.ready_file);
    if ((f = fopen(tmp, "w")) == NULL)
        return -1;
    fprintf(f, "{\"metrics\":%d}\n", s->metrics_port);
    if (fclose(f) != 0 || rename(tmp, conf.ready_file) != 0)
        return -1;
    return 0;
}

/* run: the first sync is applied; say so (log, ready-file). */
static void
become_ready(struct sub *s)
{
    s->started = true;
    if (s->ev_ready != NULL)
        event_del(s->ev_ready);
    progress_end(s);
    summary(s, "synced");
    if (conf.ready_file != NULL && write_ready(s) != 0)
        rs_log_kv(RS_LOG_WARN, "cannot write the ready file", "path",
                  conf.ready_file, "error", strerror(errno), NULL);
}

/* run: while the Source keeps changing, the appliers may never run out of
 * work; the first sync is applied once no due row it queued is left
 * (rows waiting for a retry do not hold it, as in on_apply_idle). */
static void
on_ready_tick(evutil_socket_t fd, short what, void *arg)
{
    struct sub *s = arg;
    bool any = true;

    (void)fd;
    (void)what;
    if (s->started || s->failed || s->draining)
        return;
    if (ledger_todo_due_upto(s->ledger, s->first_round_seq, rs_time_now(),
                             &any) == 0 && !any)
        become_ready(s);
}

/* run: the pulls that make the first sync are over when nothing but
 * periodic polls is under way or queued (with --poll-interval shorter than
 * a pull, the queue is never empty); then the todo rows they queued are
 * marked, and on_ready_tick waits for them. */
static void
mark_first_round(struct sub *s)
{
    static const struct timeval tick = { 0, RSSUB_READY_TICK_MS * 1000 };

    if (s->cmd != CMD_RUN || s->started || s->failed ||
        s->first_round_seq >= 0 || s->ev_ready == NULL)
        return;
    if (s->pulling >= 0 && s->pull_why != WHY_POLL)
        return;
    for (size_t i = 0; i < s->nq; i++)
        if (s->q[i].why != WHY_POLL)
            return;
    if (ledger_todo_max_seq(s->ledger, &s->first_round_seq) == 0)
        event_add(s->ev_ready, &tick);
}

/* Pulls queued are done and the appliers have nothing left: the end of
 * sync and audit, the start of following for run. */
static void
on_apply_idle(void *ud, bool retrying)
{
    struct sub *s = ud;
    int64_t failed = 0, due = 0, waiting = 0;

    if (s->pulling >= 0 || s->nq > 0)
        return;
    if (s->draining) {
        finish(s, 0);
        return;
    }
    /* The daemon is ready with retries still waiting (a Source that
     * churns always has some); sync and audit wait for them. */
    if (s->cmd != CMD_RUN && retrying && !s->readonly)
        return;
    if (s->cmd == CMD_RUN) {
        if (!s->started && !s->failed)
            become_ready(s);
        return;
    }
    if (s->cmd == CMD_AUDIT) {
        struct apply_stats as;
        apply_stats(s->apply, &as);
        progress_end(s);
        state_warn(s, ledger_todo_count(s->ledger, rs_time_now(), &due,
                                        &waiting, &failed), "count");
        if (failed > 0) {
            printf("failed %lld resources could not be mirrored\n",
                   (long long)failed);
            s->audit_dirty = true;
        }
        if (s->readonly && due + waiting > 0) {
            printf("pending %lld changes not applied yet\n",
                   (long long)(due + waiting));
            s->audit_dirty = true;
        }
        if (!s->failed && !check_strays(s, conf.fix))
            s->failed = true;
        finish(s, s->failed ? 3
                  : (s->audit_dirty && !conf.fix) || s->deletions_held ? 1
                  : 0);
        return;
    }
    progress_end(s);
    state_warn(s, ledger_todo_count(s->ledger, rs_time_now(), &due, &waiting,
                                    &failed), "count");
    summary(s, "synced");
    if (failed > 0)
        state_warn(s, ledger_todo_each_failed(s->ledger, on_failed_row, s),
                   "failed rows");
    /* A refused URI is not kept as a failure, but a sync that met one
     * says so in its exit status: the Source lists what cannot be
     * mirrored here (or --prefix is missing). */
    finish(s, s->failed || failed > 0 || s->refused > 0 ||
              s->deletions_held ? 1 : 0);
}

static void
after_pulls(struct sub *s)
{
    bool waiting = false;

    if (s->pulling >= 0 || s->nq > 0)
        return;
    mark_first_round(s);
    if (s->strays_due && s->cmd == CMD_RUN && !s->draining) {
        /* Pending changes need not wait: what a job wrote, it recorded in
         * the same step, through this connection. */
        s->strays_due = false;
        (void)check_strays(s, conf.audit_fix);
    }
    if (s->readonly)
        on_apply_idle(s, false);
    else if (apply_idle(s->apply, &waiting))
        on_apply_idle(s, waiting);
    else
        apply_kick(s->apply);
}

/* ------------------------------------------------------------- metrics */

/* The todo table's counts for the gauges of one scrape: counting is a scan
 * of the table (a million rows during a large baseline), so it is done
 * once and shared by the gauges that need it, for up to a second. */
static int
todo_counts(struct sub *s, int64_t *pending, int64_t *failed)
{
    rs_time_t now = rs_time_now();
    int64_t due = 0, waiting = 0, f = 0;

    if (s->counted_at == RS_TIME_NONE || now - s->counted_at > 1000000 ||
        now < s->counted_at) {
        if (ledger_todo_count(s->ledger, now, &due, &waiting, &f) != 0)
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
    struct sub *s = ud;
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
    apply_stats(((struct sub *)ud)->apply, &as);
    return (double)as.bytes;
}

static double
gauge_requests(void *ud)
{
    struct apply_stats as;
    apply_stats(((struct sub *)ud)->apply, &as);
    return (double)as.requests;
}

static double
gauge_connected(void *ud)
{
    struct sub *s = ud;
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

static void
on_metrics_request(struct evhttp_request *req, void *arg)
{
    struct sub *s = arg;
    struct evbuffer *out = evhttp_request_get_output_buffer(req);
    char *buf = NULL;
    size_t cap = 0, len = 0;

    if (strcmp(evhttp_request_get_uri(req), "/metrics") != 0) {
        evhttp_send_error(req, 404, NULL);
        return;
    }
    if (rs_metrics_render(s->metrics, &buf, &cap, &len) != 0) {
        evhttp_send_error(req, 500, NULL);
        rs_free(buf);
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      RS_METRICS_CONTENT_TYPE);
    evbuffer_add(out, buf, len);
    rs_free(buf);
    evhttp_send_reply(req, 200, "OK", NULL);
}

static int
setup_metrics(struct sub *s)
{
    static const char *const why[4] = { "gap", "reconcile", "too_old", "poll" };
    int rc = 0;

    if ((s->metrics = rs_metrics_new()) == NULL)
        return RS_ENOMEM;
    for (int o = 0; o < APPLY_OUTCOMES && rc == 0; o++)
        rc = rs_metrics_register_counter(s->metrics, &s->m_applied[o],
            "rssub_changes_applied_total", "Resource changes handled, by "
            "outcome.", "outcome", apply_outcome_name(o), NULL);
    for (int w = 0; w < 4 && rc == 0; w++)
        rc = rs_metrics_register_counter(s->metrics, &s->m_fallback[w],
            "rssub_fallbacks_total", "Pulls push could not spare: gaps, "
            "reconciles, change lists too short, polls.", "reason", why[w],
            NULL);
    for (int t = TR_WEBSOCKET; t < TR_COUNT && rc == 0; t++)
        rc = rs_metrics_register_counter(s->metrics, &s->m_transport[t],
            "rssub_transport_changes_total", "Capability Lists that changed "
            "how they are followed, by the transport taken up.", "to",
            transport_names[t], NULL);
    if (rc == 0)
        rc = rs_metrics_register_counter(s->metrics, &s->m_held,
            "rssub_deletions_held_total", "Deletions a Resource List asked "
            "for that --max-delete or --max-delete-share held back.", NULL);
    if (rc == 0)
        rc = rs_metrics_register_counter(s->metrics, &s->m_strays,
            "rssub_audit_strays_total", "Files in the mirror no resource "
            "accounts for, found by audits.", NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(s->metrics, "rssub_fetch_bytes",
            "Resource bytes written to the mirror (a counter).",
            gauge_bytes, s, NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(s->metrics, "rssub_fetch_requests",
            "Resource GETs started (a counter).", gauge_requests, s, NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(s->metrics, "rssub_pending",
            "Changes queued, not yet applied.", gauge_pending, s, NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(s->metrics, "rssub_failed",
            "Resources given up on (see rssub status).", gauge_failed, s,
            NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(s->metrics, "rssub_lag_seconds",
            "Age of the newest applied change while changes wait.",
            gauge_lag, s, NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(s->metrics, "rssub_channels_up",
            "WebSocket change channels connected.", gauge_connected, s, NULL);
    if (rc != 0 || !rs_config_is_set(the_cfg, "metrics-listen"))
        return rc;
    s->mhttp = evhttp_new(s->base);
    if (s->mhttp == NULL)
        return RS_ENOMEM;
    evhttp_set_max_headers_size(s->mhttp, 16 * 1024);
    evhttp_set_allowed_methods(s->mhttp, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    struct rs_httpguard_opts go = {
        .base = s->base,
        .http = s->mhttp,
        .name = "metrics",
        .limits = conf.http_limits,
        .on_request = on_metrics_request,
        .request_arg = s,
        .metrics = s->metrics,
        .metrics_prefix = "rssub_http",
        .on_log = rs_httpguard_log_warn,
    };
    s->mguard = rs_httpguard_new(&go, NULL);
    if (s->mguard == NULL)
        return RS_ENOMEM;
    struct evhttp_bound_socket *bs = evhttp_bind_socket_with_handle(
        s->mhttp, conf.metrics_listen.host[0] ? conf.metrics_listen.host
                                              : "0.0.0.0",
        conf.metrics_listen.port);
    if (bs == NULL)
        return RS_EIO;
    s->metrics_port = rs_sock_port(evhttp_bound_socket_get_fd(bs));
    return 0;
}

/* ---------------------------------------------------- apply results */

static void
on_result(void *ud, const char *uri, enum apply_outcome o, const char *what)
{
    struct sub *s = ud;

    rs_metrics_counter_inc(s->m_applied[o]);
    switch (o) {
    case APPLY_FAILED:
        rs_log_kv(RS_LOG_ERROR, "resource failed", "uri", uri, "error", what,
                  NULL);
        set_last_error(s, what);
        break;
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

static void
on_state_error(void *ud, const char *what)
{
    struct sub *s = ud;

    (void)s;
    rs_log_kv(RS_LOG_ERROR, "cannot save state (the work is redone)",
              "error", what, NULL);
}

/* -------------------------------------------------------- discovery */

static bool
set_wanted(const char *caplist)
{
    if (list_empty(conf.sets))
        return true;
    for (char **p = conf.sets; *p != NULL; p++)
        if (strcmp(*p, caplist) == 0 || strstr(caplist, *p) != NULL)
            return true;
    return false;
}

static int
add_prefix(struct pathmap *pm, const char *url)
{
    const char *why = NULL;
    char *origin = NULL;
    int rc;

    if ((rc = rs_url_origin(url, &origin)) != 0)
        return rc;
    rc = pathmap_add_prefix(pm, origin, &why);
    if (rc != 0)
        rs_log_kv(RS_LOG_ERROR, "bad prefix", "prefix", origin, "error",
                  why != NULL ? why : rs_strerror(rc), NULL);
    rs_free(origin);
    return rc;
}

static int
setup_pathmap(struct sub *s)
{
    const char *why = NULL;
    int rc = 0;

    if ((s->pathmap = pathmap_new()) == NULL)
        return RS_ENOMEM;
    for (char **m = conf.maps; m != NULL && *m != NULL && rc == 0; m++) {
        char *eq = strrchr(*m, '=');
        if (eq == NULL) {
            rs_log_kv(RS_LOG_ERROR, "--map wants URI_PREFIX=DIR", "map", *m,
                      NULL);
            return RS_EINVAL;
        }
        *eq = '\0';
        rc = pathmap_add_map(s->pathmap, *m, eq + 1, &why);
        *eq = '=';
        if (rc != 0)
            rs_log_kv(RS_LOG_ERROR, "bad --map", "map", *m, "error",
                      why != NULL ? why : rs_strerror(rc), NULL);
    }
    for (char **p = conf.prefixes; p != NULL && *p != NULL && rc == 0; p++) {
        rc = pathmap_add_prefix(s->pathmap, *p, &why);
        if (rc != 0)
            rs_log_kv(RS_LOG_ERROR, "bad --prefix", "prefix", *p, "error",
                      why != NULL ? why : rs_strerror(rc), NULL);
    }
    if (rc == 0 && list_empty(conf.prefixes) && list_empty(conf.maps))
        rc = add_prefix(s->pathmap, conf.source);
    return rc;
}

static void
on_discovered(void *ud, int rc, const char *err, struct discovery_result *res)
{
    struct sub *s = ud;
    char *val = NULL;

    if (rc != 0) {
        rs_log_kv(RS_LOG_ERROR, "discovery failed", "source", conf.source,
                  "error", err, NULL);
        set_last_error(s, err);
        finish(s, s->cmd == CMD_AUDIT ? 3 : 1);
        return;
    }
    s->disc = res;
    for (size_t i = 0; i < res->nsets && s->nsets < RSSUB_MAX_SETS; i++) {
        struct discovery_set *d = &res->sets[i];
        struct set *st = &s->sets[s->nsets];
        char key[2048];

        if (!set_wanted(d->caplist))
            continue;
        st->d = d;
        st->covered = RS_TIME_NONE;
        snprintf(key, sizeof(key), "%s%s", d->caplist, FOLLOW_POS_SOURCE);
        st->key = rs_strdup(d->caplist);
        st->source_key = rs_strdup(key);
        if (st->key == NULL || st->source_key == NULL) {
            finish(s, 1);
            return;
        }
        if (ledger_meta_get(s->ledger, st->key, &val) == 0)
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
                  conf.source, NULL);
        finish(s, 2);
        return;
    }
    if (s->tty && conf.progress && s->cmd != CMD_RUN) {
        struct timeval tv = { 0, RSSUB_PROGRESS_MS * 1000 };
        s->ev_progress = event_new(s->base, -1, EV_PERSIST, on_progress_tick,
                                   s);
        if (s->ev_progress != NULL)
            event_add(s->ev_progress, &tv);
    }
    s->pull_mark = rs_time_now();
    if (s->cmd == CMD_RUN) {
        struct timeval poll = { conf.poll_ms / 1000,
                                (conf.poll_ms % 1000) * 1000 };
        if (setup_follow(s) != 0) {
            finish(s, 1);
            return;
        }
        /* Channels first, from a moment before the pulls: whatever
         * changes while the pulls run is replayed (docs/subscriber.md). */
        for (size_t i = 0; i < s->nsets; i++)
            follow_start(s->sets[i].follow,
                         s->pull_mark - RSSUB_MARK_MARGIN_US);
        event_add(s->ev_poll, &poll);
        if (conf.pull_ms > 0) {
            struct timeval tv = { conf.pull_ms / 1000,
                                  (conf.pull_ms % 1000) * 1000 };
            event_add(s->ev_pull, &tv);
        }
        if (conf.audit_ms > 0) {
            struct timeval tv = { conf.audit_ms / 1000,
                                  (conf.audit_ms % 1000) * 1000 };
            event_add(s->ev_audit, &tv);
        }
    }
    for (size_t i = 0; i < s->nsets; i++) {
        enum pull_kind k = PULL_CHANGES;
        if (s->cmd == CMD_AUDIT)
            k = conf.fix ? PULL_RECONCILE : PULL_AUDIT;
        queue_pull(s, (int)i, k, WHY_START);
    }
}

/* ---------------------------------------------------------- signals */

static void
on_drain_tick(evutil_socket_t fd, short what, void *arg)
{
    struct sub *s = arg;
    struct timeval tv = { 0, 50000 };

    struct apply_stats as;
    bool done;

    (void)fd;
    (void)what;
    apply_stats(s->apply, &as);
    done = as.in_flight == 0 && s->unsubscribing == 0;
    if (done || s->drain_waited_ms >= conf.drain_ms) {
        if (as.in_flight > 0)
            rs_log_kv(RS_LOG_WARN, "drain time over: fetches in flight are "
                      "dropped (they are redone at the next start)", NULL);
        else if (!done)
            rs_log_kv(RS_LOG_WARN, "drain time over: a hub did not confirm "
                      "the WebSub unsubscription (its lease will end)", NULL);
        state_warn(s, apply_flush(s->apply), "commit");
        finish(s, s->exit_code);
        return;
    }
    s->drain_waited_ms += 50;
    evtimer_add(s->ev_drain, &tv);
}

static void
on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct sub *s = arg;

    (void)what;
    if (sig == SIGHUP) {
        if (rs_log_reopen() != 0)
            rs_log(RS_LOG_WARN, "cannot reopen the log file");
        return;
    }
    if (s->draining) {
        event_base_loopexit(s->base, NULL);   /* second signal: now */
        return;
    }
    rs_log_kv(RS_LOG_INFO, "stopping: finishing writes in flight", NULL);
    s->draining = true;
    s->exit_code = s->cmd == CMD_RUN ? 0 : 1;
    for (size_t i = 0; i < s->nsets; i++) {
        struct set *st = &s->sets[i];

        follow_free(st->follow);
        st->follow = NULL;
        capwatch_free(st->cw);
        st->cw = NULL;
        /* The next start subscribes afresh (and pulls what it missed):
         * tell the hub to stop delivering to this callback now, best
         * effort within the drain, rather than have it retry a path that
         * answers 410 until the lease ends. */
        for (int k = 0; k < 2; k++) {
            if (st->websub_topic[k] != NULL && s->hubsub != NULL &&
                hubsub_unsubscribe(s->hubsub, st->websub_topic[k]) == 0)
                s->unsubscribing++;
            rs_free(st->websub_topic[k]);
            st->websub_topic[k] = NULL;
        }
    }
    if (s->pulling >= 0) {
        pull_free(s->pull);          /* abandoned: the next start redoes it */
        s->pull = NULL;
        s->pulling = -1;
    }
    s->nq = 0;
    apply_pause(s->apply, true);
    on_drain_tick(-1, 0, s);
}

/* ------------------------------------------------------- setup/teardown */

static int
setup_log(void)
{
    char err[512];

    if (rs_log_setup("rssub", conf.log_level, conf.log_format, conf.log_file,
                     err, sizeof(err)) != 0) {
        fprintf(stderr, "rssub: %s\n", err);
        return -1;
    }
    return 0;
}

static int
open_state(struct sub *s, bool readonly)
{
    char err[512];

    s->state_path = conf.state != NULL ? rs_strdup(conf.state)
                                       : default_state_path(conf.mirror);
    if (s->state_path == NULL)
        return 1;
    if (path_inside(s->state_path, conf.mirror)) {
        rs_log_kv(RS_LOG_ERROR, "the state must not be inside the mirror",
                  "state", s->state_path, "mirror", conf.mirror, NULL);
        return 2;
    }
    s->ledger = ledger_open(s->state_path,
                            readonly ? LEDGER_READONLY
                            : conf.sync_full ? LEDGER_SYNC_FULL : 0,
                            err, sizeof(err));
    if (s->ledger == NULL) {
        rs_log_kv(RS_LOG_ERROR, "cannot open the state", "state",
                  s->state_path, "error", err, NULL);
        return readonly ? 3 : 1;
    }
    return 0;
}

static int
check_source(struct sub *s, bool readonly)
{
    char *val = NULL;
    int rc = ledger_meta_get(s->ledger, "source", &val);

    if (rc == RS_ENOTFOUND && readonly)
        return 0;
    if (rc == RS_ENOTFOUND) {
        rc = ledger_meta_set(s->ledger, "source", conf.source);
        return rc == 0 ? 0 : 1;
    }
    if (rc != 0)
        return 1;
    if (strcmp(val, conf.source) != 0) {
        rs_log_kv(RS_LOG_ERROR, "this state belongs to another source: "
                  "use another --state or mirror", "state", s->state_path,
                  "its_source", val, "source", conf.source, NULL);
        rs_free(val);
        return 2;
    }
    rs_free(val);
    return 0;
}

static int
setup(struct sub *s)
{
    struct mirror_opts mo = { .attic = conf.attic };
    struct rs_http_opts ho = {
        .max_host_conns = (unsigned)conf.host_conns,
        .max_conns = (unsigned)(conf.parallel + 16),
    };
    char err[512];
    size_t swept = 0;
    int rc;

    if (mirror_fsync_from(conf.fsync, &mo.fsync) != 0) {
        rs_log_kv(RS_LOG_ERROR, "--fsync is none, file or full", "fsync",
                  conf.fsync, NULL);
        return 2;
    }
    if ((s->base = event_base_new()) == NULL)
        return 1;
    /* A report-only audit reads the state beside a running daemon and
     * changes nothing, in the state or the mirror. */
    bool readonly = s->readonly = s->cmd == CMD_AUDIT && !conf.fix;
    if ((rc = open_state(s, readonly)) != 0)
        return rc;
    if ((rc = check_source(s, readonly)) != 0)
        return rc;
    if (s->cmd != CMD_AUDIT || conf.fix) {
        /* What failed before gets another chance: the Source may have
         * been fixed since. */
        int64_t n = 0;
        if (ledger_todo_requeue_failed(s->ledger, 0, &n) != 0) {
            rs_log_kv(RS_LOG_ERROR, "cannot read the state", "error",
                      ledger_errstr(s->ledger), NULL);
            return 1;
        }
        if (n > 0) {
            char c[24];
            snprintf(c, sizeof(c), "%lld", (long long)n);
            rs_log_kv(RS_LOG_INFO, "retrying resources that failed before",
                      "count", c, NULL);
        }
    }
    s->mirror = mirror_open(conf.mirror, &mo, err, sizeof(err));
    if (s->mirror == NULL) {
        rs_log_kv(RS_LOG_ERROR, "cannot open the mirror", "mirror",
                  conf.mirror, "error", err, NULL);
        return 1;
    }
    if (!readonly && mirror_sweep_temps(s->mirror, &swept) == 0 && swept > 0) {
        char n[24];
        snprintf(n, sizeof(n), "%zu", swept);
        rs_log_kv(RS_LOG_INFO, "removed temporary files of an interrupted "
                  "run", "count", n, NULL);
    }
    if ((rc = setup_pathmap(s)) != 0)
        return rc == RS_ENOMEM ? 1 : 2;
    if ((s->http = rs_http_new(s->base, &ho)) == NULL)
        return 1;
    struct apply_opts ao = {
        .base = s->base,
        .http = s->http,
        .ledger = s->ledger,
        .mirror = s->mirror,
        .pathmap = s->pathmap,
        .parallel = (unsigned)conf.parallel,
        .rate = (double)conf.rate,
        .retries = (unsigned)conf.retries,
        .timeout_ms = (unsigned)conf.timeout_ms,
        .max_body = conf.max_body,
        .on_result = on_result,
        .on_idle = on_apply_idle,
        .on_state_error = on_state_error,
        .ud = s,
    };
    if ((s->apply = apply_new(&ao, err, sizeof(err))) == NULL) {
        rs_log_kv(RS_LOG_ERROR, "cannot start", "error", err, NULL);
        return 1;
    }
    /* A report-only audit reads; the changes a daemon left pending are
     * reported, never applied from here. */
    if (readonly)
        apply_pause(s->apply, true);
    struct pull_opts po = {
        .base = s->base,
        .http = s->http,
        .ledger = s->ledger,
        .mirror = s->mirror,
        .apply = s->apply,
        .strict = conf.strict,
        .deep = conf.deep,
        .readonly = readonly,
        .pathmap = s->pathmap,
        .max_delete = (uint64_t)conf.max_delete,
        .max_delete_share = (unsigned)conf.max_delete_share,
        .force_delete = conf.force_delete,
        .on_diff = on_diff,
        .on_progress = on_pull_progress,
        .on_done = on_pull_done,
        .ud = s,
    };
    if ((s->pull = pull_new(&po)) == NULL)
        return 1;
    {
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", s->state_path);
        struct dump_opts dumo = {
            .base = s->base,
            .http = s->http,
            .ledger = s->ledger,
            .mirror = s->mirror,
            .pathmap = s->pathmap,
            .apply = s->apply,
            .tmpdir = dirname(dir),
            .max_package = 0,
            .on_problem = on_dump_problem,
            .on_done = on_dump_done,
            .ud = s,
        };
        if ((s->dump = dump_new(&dumo)) == NULL)
            return 1;
    }
    s->discovery = discovery_new(s->base, s->http, on_discovered, s);
    if (s->discovery == NULL)
        return 1;
    if (setup_metrics(s) != 0) {
        rs_log_kv(RS_LOG_ERROR, "cannot serve metrics", "listen",
                  "--metrics-listen", "error", strerror(errno), NULL);
        return 1;
    }
    if (strcmp(conf.transport, "auto") != 0 &&
        strcmp(conf.transport, "websocket") != 0 &&
        strcmp(conf.transport, "websub") != 0 &&
        strcmp(conf.transport, "poll") != 0) {
        rs_log_kv(RS_LOG_ERROR, "--transport is auto, websocket, websub or "
                  "poll", "transport", conf.transport, NULL);
        return 2;
    }
    if (strcmp(conf.transport, "websub") == 0 &&
        !rs_config_is_set(the_cfg, "callback-listen")) {
        rs_log_kv(RS_LOG_ERROR, "--transport websub needs --callback-listen",
                  NULL);
        return 2;
    }
    if (s->cmd == CMD_RUN && conf.push) {
        struct wsclient_opts wo = { .base = s->base };
        s->ws = wsclient_new(&wo, err, sizeof(err));
        if (s->ws == NULL) {
            rs_log_kv(RS_LOG_ERROR, "cannot start the websocket client",
                      "error", err, NULL);
            return 1;
        }
        if (rs_config_is_set(the_cfg, "callback-listen")) {
            struct hubsub_opts hso = {
                .base = s->base,
                .http = s->http,
                .listen_host = conf.callback_listen.host[0]
                               ? conf.callback_listen.host : "0.0.0.0",
                .listen_port = conf.callback_listen.port,
                .callback_base = conf.callback_url,
                .lease_seconds = (unsigned)(conf.lease_ms / 1000),
                .on_notification = on_websub,
                .on_state = on_websub_state,
                .ud = s,
            };
            s->hubsub = hubsub_new(&hso, err, sizeof(err));
            if (s->hubsub == NULL) {
                rs_log_kv(RS_LOG_ERROR, "cannot receive websub callbacks",
                          "error", err, NULL);
                return 1;
            }
        }
    }
    s->ev_poll = event_new(s->base, -1, EV_PERSIST, on_poll, s);
    s->ev_pull = event_new(s->base, -1, EV_PERSIST, on_safety_pull, s);
    s->ev_audit = event_new(s->base, -1, EV_PERSIST, on_audit_timer, s);
    s->ev_drain = evtimer_new(s->base, on_drain_tick, s);
    s->ev_retry_pull = evtimer_new(s->base, on_retry_pull, s);
    s->ev_ready = event_new(s->base, -1, EV_PERSIST, on_ready_tick, s);
    s->ev_sig[0] = evsignal_new(s->base, SIGTERM, on_signal, s);
    s->ev_sig[1] = evsignal_new(s->base, SIGINT, on_signal, s);
    s->ev_sig[2] = evsignal_new(s->base, SIGHUP, on_signal, s);
    for (int i = 0; i < 3; i++)
        if (s->ev_sig[i] == NULL || event_add(s->ev_sig[i], NULL) != 0)
            return 1;
    if (s->ev_poll == NULL || s->ev_pull == NULL || s->ev_audit == NULL ||
        s->ev_drain == NULL || s->ev_retry_pull == NULL || s->ev_ready == NULL)
        return 1;
    if ((rc = discovery_start(s->discovery, conf.source)) != 0) {
        rs_log_kv(RS_LOG_ERROR, "bad --source", "source", conf.source,
                  "error", rs_strerror(rc), NULL);
        return 2;
    }
    return 0;
}

static void
teardown(struct sub *s)
{
    for (size_t i = 0; i < s->nsets; i++) {
        follow_free(s->sets[i].follow);
        capwatch_free(s->sets[i].cw);
        rs_free(s->sets[i].websub_topic[0]);
        rs_free(s->sets[i].websub_topic[1]);
        rs_free(s->sets[i].key);
        rs_free(s->sets[i].source_key);
    }
    hubsub_free(s->hubsub);
    wsclient_free(s->ws);
    discovery_free(s->discovery);
    dump_free(s->dump);
    pull_free(s->pull);
    apply_free(s->apply);
    rs_http_free(s->http);          /* canceled jobs end here */
    discovery_result_free(s->disc);
    pathmap_free(s->pathmap);
    mirror_close(s->mirror);
    ledger_close(s->ledger);
    if (s->mhttp != NULL)
        evhttp_free(s->mhttp);
    rs_httpguard_free(s->mguard);   /* after evhttp_free */
    rs_metrics_free(s->metrics);
    struct event *evs[] = { s->ev_sig[0], s->ev_sig[1], s->ev_sig[2],
                            s->ev_poll, s->ev_pull, s->ev_audit,
                            s->ev_progress, s->ev_drain, s->ev_retry_pull,
                            s->ev_ready };
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
        if (evs[i] != NULL)
            event_free(evs[i]);
    rs_free(s->state_path);
    if (s->base != NULL)
        event_base_free(s->base);
}

/* ----------------------------------------------------------- status */

static int
print_pos(void *ud, const struct ledger_pos *p)
{
    char a[RS_TIME_BUFSZ], b[RS_TIME_BUFSZ];

    (void)ud;
    if (rs_time_format(p->dt, a) == 0)
        snprintf(a, sizeof(a), "-");
    if (rs_time_format(p->updated_at, b) == 0)
        snprintf(b, sizeof(b), "-");
    /* The age of the newest change taken: how far behind the Source the
     * mirror could be, at most, when nothing is pending. */
    if (p->dt != RS_TIME_NONE)
        printf("position %s id=%s change=%s updated=%s age=%.1fs\n",
               p->channel, p->id != NULL ? p->id : "-", a, b,
               (double)(rs_time_now() - p->dt) / 1e6);
    else
        printf("position %s id=%s change=- updated=%s\n", p->channel,
               p->id != NULL ? p->id : "-", b);
    return 0;
}

static int
cmd_status(struct sub *s)
{
    int64_t live = 0, tomb = 0, due = 0, waiting = 0, failed = 0;
    char *val = NULL;
    int rc = open_state(s, true);

    if (rc != 0)
        return rc;
    printf("state %s\n", s->state_path);
    if (ledger_meta_get(s->ledger, "source", &val) == 0)
        printf("source %s\n", val);
    rs_free(val);
    val = NULL;
    if (ledger_res_count(s->ledger, &live, &tomb) != 0 ||
        ledger_todo_count(s->ledger, rs_time_now(), &due, &waiting,
                          &failed) != 0) {
        fprintf(stderr, "rssub: cannot read the state: %s\n",
                ledger_errstr(s->ledger));
        return 3;
    }
    printf("resources %lld\ndeleted %lld\npending %lld\nretrying %lld\n"
           "failed %lld\n", (long long)live, (long long)tomb, (long long)due,
           (long long)waiting, (long long)failed);
    if (ledger_pos_each(s->ledger, print_pos, s) != 0)
        return 3;
    if (ledger_meta_get(s->ledger, "last_error", &val) == 0) {
        char *at = NULL;
        if (ledger_meta_get(s->ledger, "last_error_at", &at) != 0)
            at = NULL;
        printf("last_error %s %s\n", at != NULL ? at : "-", val);
        rs_free(at);
    }
    rs_free(val);
    if (failed > 0 &&
        ledger_todo_each_failed(s->ledger, on_failed_row, s) != 0)
        return 3;
    return 0;
}

/* ------------------------------------------------------------- main */

static int
parse_cmd(const char *a, enum cmd *out)
{
    static const char *const names[] = { "run", "sync", "audit", "status" };

    for (int i = 0; i < 4; i++) {
        if (strcmp(a, names[i]) == 0) {
            *out = (enum cmd)i;
            return 0;
        }
    }
    return -1;
}

int
main(int argc, char **argv)
{
    static struct sub s = { .pulling = -1, .first_round_seq = -1 };
    struct rs_config_info info = {
        .program = "rssub",
        .usage = "Usage: rssub COMMAND --source URL --mirror DIR [OPTION]...\n"
                 "Keep DIR a mirror of a ResourceSync Source. Commands:\n"
                 "  run     the daemon: sync, then follow the Source's push\n"
                 "          channels (WebSocket, WebSub) or poll its Change\n"
                 "          Lists, pulling again whenever push has a gap\n"
                 "  sync    baseline (first time) or incremental pull, then exit\n"
                 "  audit   compare with the Resource List; print the differing\n"
                 "          URIs (--fix repairs them)\n"
                 "  status  where the mirror stands: positions, pending, failed\n"
                 "Exit status: 0 success (audit: in sync), 1 failure (audit:\n"
                 "differences; sync: resources not mirrored), 2 usage, 3 audit\n"
                 "or status could not complete.",
        .opts = options,
    };
    struct rs_config *cfg;
    int rc;

    the_sub = &s;
    if (argc >= 2 && argv[1][0] != '-' && parse_cmd(argv[1], &s.cmd) != 0) {
        fprintf(stderr, "rssub: unknown command '%s'\nTry 'rssub --help'.\n",
                argv[1]);
        return 2;
    }
    if ((cfg = rs_config_new(&info)) == NULL)
        return 1;
    the_cfg = cfg;
    if (argc >= 2 && argv[1][0] != '-') {
        argv[1] = argv[0];
        argv++;
        argc--;
    } else {
        s.cmd = (enum cmd)-1;
    }
    rc = rs_config_parse(cfg, argc, argv, NULL);
    if (rc == RS_CONFIG_WANT_HELP || rc == RS_CONFIG_WANT_VERSION) {
        rc = rc == RS_CONFIG_WANT_HELP ? rs_config_help(cfg, stdout)
                                       : rs_config_version(cfg, stdout);
        rs_config_free(cfg);
        return rc == 0 ? 0 : 1;
    }
    if (rc != 0 || (int)s.cmd < 0 || conf.mirror == NULL ||
        (conf.source == NULL && s.cmd != CMD_STATUS)) {
        fprintf(stderr, "rssub: %s\nTry 'rssub --help'.\n",
                rc != 0 ? rs_config_errstr(cfg)
                : (int)s.cmd < 0 ? "a command is required (run, sync, audit, "
                                   "status)"
                : conf.mirror == NULL ? "--mirror is required"
                : "--source is required");
        rs_config_free(cfg);
        return 2;
    }
    if (setup_log() != 0) {
        rs_config_free(cfg);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    s.tty = isatty(STDERR_FILENO);
    if (s.cmd == CMD_STATUS) {
        s.exit_code = cmd_status(&s);
    } else if ((s.exit_code = setup(&s)) == 0) {
        event_base_dispatch(s.base);
    }
    teardown(&s);
    rs_config_free(cfg);
    rs_log_shutdown();
    return s.exit_code;
}
