/*
 * rssource.c - the Source daemon: configuration, start-up (state, the
 * start-up scan that reports what changed while it was down, the first
 * Resource List), the glue between watch -> catalog -> push, the
 * periodic policy tick, signals and drain. Every decision lives in a
 * module; this file wires them (docs/source.md has the whole picture).
 *
 * Exit status: 0 clean shutdown, 1 runtime failure, 2 bad configuration or
 * command line.
 */
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
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
#include <time.h>
#include <unistd.h>

#define RS_LOG_MODULE "rssource"
#include "catalog.h"
#include "changedump.h"
#include "changelog.h"
#include "channels.h"
#include "dumpw.h"
#include "docs.h"
#include "hashwork.h"
#include "push.h"
#include "rs_alloc.h"
#include "rs_backoff.h"
#include "rs_config.h"
#include "rs_daemon.h"
#include "rs_http.h"
#include "rs_httpguard.h"
#include "rs_log.h"
#include "rs_sock.h"
#include "rs_time.h"
#include "rs_tokenfile.h"
#include "rs_url.h"
#include "serve.h"
#include "snapshot.h"
#include "state.h"
#include "tree.h"
#include "watch.h"

#define RSSOURCE_TICK_MS 10000
/* Rescan period when the inotify watch limit left directories unwatched. */
#define RSSOURCE_UNWATCHED_MS (10 * 60 * 1000)
/* At start-up with --hub, serving waits for the hub to name our channels,
 * at most this long (see serve_start). */
#define RSSOURCE_HUB_WAIT_MS 2000
/* Skipped paths logged one by one, per scan or per minute (on_problem). */
#define RSSOURCE_PROBLEMS_LOGGED 10
#define RSSOURCE_PROBLEMS_WINDOW_MS 60000

static struct {
    char *dir;
    char *base_url;
    struct rs_config_hostport listen;
    char *hub;
    char *topic_base;
    char *change_topic;
    char *framework_topic;
    char *token_file;
    char *read_token_file;
    char *access_log;
    bool insecure_token_file;
    char *state;
    int64_t page_size;
    char *rl_paging;
    int64_t rl_refresh_ms;
    bool dump;
    int64_t dump_interval_ms;
    uint64_t dump_max_bytes;
    int64_t dump_max_files;
    uint64_t cdump_max_bytes;
    int64_t cl_max_age_ms;
    int64_t cl_retain_ms;
    int64_t settle_ms;
    int64_t batch_ms;
    int64_t retry_max_ms;
    uint64_t max_notification;
    int64_t rescan_ms;
    int64_t rescan_step;
    char **excludes;
    bool follow_symlinks;
    int64_t drain_ms;
    char *log_level;
    char *log_format;
    char *log_file;
    char *ready_file;
    struct rs_httpguard_limits http_limits;
} conf;

static const struct rs_config_opt options[] = {
    RS_CONFIG_STRING("dir", 'd', &conf.dir, "DIR", NULL,
                     "the directory to serve (required)"),
    RS_CONFIG_STRING("base-url", 'b', &conf.base_url, "URL", NULL,
                     "public URL of DIR: the file DIR/a/b is BASE-URL + a/b "
                     "(default http://LISTEN/; 127.0.0.1 for an any-address "
                     "listen)"),
    RS_CONFIG_HOSTPORT("listen", 'l', &conf.listen, "127.0.0.1:8080",
                       "HTTP address"),
    RS_HTTPGUARD_CONFIG(&conf.http_limits, "60s"),
    RS_CONFIG_STRING("hub", 0, &conf.hub, "URL", NULL,
                     "the hub's publish URL (e.g. https://hub.example/hub); "
                     "none: no push"),
    RS_CONFIG_STRING("topic-base", 0, &conf.topic_base, "URL", NULL,
                     "topics are TOPIC-BASE + changes and + framework "
                     "(default BASE-URL + resourcesync/)"),
    RS_CONFIG_STRING("change-topic", 0, &conf.change_topic, "URI", NULL,
                     "topic URI of change notifications"),
    RS_CONFIG_STRING("framework-topic", 0, &conf.framework_topic, "URI", NULL,
                     "topic URI of framework notifications"),
    RS_CONFIG_STRING("token-file", 0, &conf.token_file, "FILE", NULL,
                     "bearer token for the hub: the first line of FILE "
                     "(mode 600)"),
    RS_CONFIG_STRING("read-token-file", 0, &conf.read_token_file, "FILE",
                     NULL, "readers need this bearer token (the first line "
                     "of FILE, mode 600) for every document and file: 401 "
                     "without, 403 with another"),
    RS_CONFIG_STRING("access-log", 0, &conf.access_log, "FILE", NULL,
                     "append a line per reply to FILE: time, method, URI, "
                     "status, body bytes (reopened on SIGHUP)"),
    RS_CONFIG_BOOL("insecure-token-file", 0, &conf.insecure_token_file,
                   "false", "accept a token file readable by group or others"),
    RS_CONFIG_STRING("state", 's', &conf.state, "DIR", NULL,
                     "state directory (default DIR's parent/.NAME.rssource; "
                     "never inside DIR)"),
    RS_CONFIG_INT("page-size", 0, &conf.page_size, "50000", 1, 50000,
                  "entries per Resource List part and per Change List"),
    RS_CONFIG_STRING("resourcelist-paging", 0, &conf.rl_paging, "MODE",
                     "index", "index (a Resource List Index) or next "
                     "(rel=\"next\" pages)"),
    RS_CONFIG_DURATION("resourcelist-refresh", 0, &conf.rl_refresh_ms, "1m",
                       0, 86400000, "rebuild a Resource List missing "
                       "changes at most this often (0: on every request)"),
    RS_CONFIG_BOOL("dump", 0, &conf.dump, "false",
                   "publish a Resource Dump (ZIP packages of every file, in "
                   "the state directory: as much disk again as the tree, "
                   "twice while a new one is built) and a Change Dump of "
                   "each closed Change List"),
    RS_CONFIG_DURATION("dump-interval", 0, &conf.dump_interval_ms, "10m", 0,
                       0, "rebuild a Resource Dump missing changes at most "
                       "this often (a failed build: again after 1 s, "
                       "doubling up to this, or 1m when 0)"),
    RS_CONFIG_SIZE("dump-max-bytes", 0, &conf.dump_max_bytes, "64M", 4096,
                   UINT64_C(1) << 40, "content bytes per dump package (a "
                   "larger file goes alone; the first three: 1/8, 1/4 and "
                   "1/2 of it, not below 4M)"),
    RS_CONFIG_INT("dump-max-files", 0, &conf.dump_max_files, "20000", 1,
                  50000, "files per dump package (the first three: 1/8, "
                  "1/4 and 1/2 of it, not below 1000)"),
    RS_CONFIG_SIZE("changedump-max-bytes", 0, &conf.cdump_max_bytes, "1G",
                   4096, UINT64_C(1) << 42, "disk for the content --dump "
                   "captures for the Change Dumps of lists not yet packed "
                   "(past it, a list gets none)"),
    RS_CONFIG_DURATION("changelist-max-age", 0, &conf.cl_max_age_ms, "1d", 0,
                       0, "close a non-empty Change List this old (0: never)"),
    RS_CONFIG_DURATION("changelist-retain", 0, &conf.cl_retain_ms, "30d", 0, 0,
                       "drop closed Change Lists this long after they "
                       "closed, once the Resource List and Dump served are "
                       "newer (0: keep)"),
    RS_CONFIG_DURATION("settle", 0, &conf.settle_ms, "1s", 0, 3600000,
                       "quiet time before a file changed without being "
                       "closed is announced"),
    RS_CONFIG_DURATION("batch", 0, &conf.batch_ms, "5ms", 0, 60000,
                       "changes within this window go out as one "
                       "notification"),
    RS_CONFIG_DURATION("retry-max", 0, &conf.retry_max_ms, "30s", 100,
                       3600000, "longest pause between retries to the hub"),
    RS_CONFIG_SIZE("max-notification", 0, &conf.max_notification, "4M", 4096,
                   52428800, "largest notification sent (stay under the "
                   "hub's --max-body)"),
    RS_CONFIG_DURATION("rescan-interval", 0, &conf.rescan_ms, "0", 0, 0,
                       "also rescan the whole tree this often (0: only at "
                       "start and after lost events)"),
    RS_CONFIG_INT("rescan-step", 0, &conf.rescan_step, "250", 1, 1000000,
                  "files a rescan walks per loop turn, between which GETs "
                  "and changes are served"),
    RS_CONFIG_LIST("exclude", 'x', &conf.excludes, "PATTERN", NULL,
                   "never list or serve paths matching this fnmatch pattern "
                   "(with '/': the whole path, else any name; a trailing "
                   "'/' is dropped)"),
    RS_CONFIG_BOOL("follow-symlinks", 0, &conf.follow_symlinks, "false",
                   "list and serve what symlinks point to, wherever it is"),
    RS_CONFIG_DURATION("drain-time", 0, &conf.drain_ms, "5s", 0, 600000,
                       "on SIGTERM, how long to wait for notifications in "
                       "flight"),
    RS_CONFIG_LOG(&conf.log_level, &conf.log_format, &conf.log_file),
    RS_CONFIG_STRING("ready-file", 0, &conf.ready_file, "PATH", NULL,
                     "write {\"http\":PORT} here once serving"),
    RS_CONFIG_END,
};

/* Everything the daemon owns; one per process. */
struct src {
    struct event_base *base;
    struct evhttp *http;
    struct evconnlistener *listener;   /* the HTTP socket's; evhttp owns it */
    struct rs_httpguard *guard;        /* deadlines and caps of http */
    int http_port;
    struct tree *tree;
    struct state *st;
    struct docs *docs;
    struct changelog *cl;
    struct catalog *cat;
    struct watch *watch;
    struct hashwork *hashwork;    /* large files' digests, off the loop */
    struct snapshot *snap;
    struct dumpw *dump;                /* --dump, or NULL */
    struct changedump *cdump;          /* --dump, or NULL */
    struct event *ev_dump;
    struct docs_channel caps[2 * PUSH_LANES + 2];   /* for the caplist */
    char dump_url[DOCS_URL_MAX];
    char cdump_url[DOCS_URL_MAX];
    struct serve *serve;
    struct rs_http *httpc;
    struct push *push;
    struct channels *channels;
    struct event *ev_tick, *ev_rescan, *ev_hubwait;
    struct rs_daemon *daemon;     /* signals and the drain */
    char *state_dir, *state_db, *rl_dir, *dump_dir;
    char *topic[PUSH_LANES];
    char token[RS_TOKENFILE_MAX + 1];
    bool have_token;
    char read_token[RS_TOKENFILE_MAX + 1];   /* --read-token-file, or "" */
    FILE *access;            /* --access-log, line buffered; or NULL */
    bool serving;            /* the listener accepts; the ready-file is out */
    double started;          /* mono_s() when setup began */
    bool rescan_due;         /* a rescan is to start (after the one going) */
    bool catching_up;        /* the start-up rescan has not ended: what
                                changed while stopped is not all found */
    struct catalog_stats scan_base;  /* catalog_stats as the rescan began */
    bool unwatched;          /* some directory has no inotify watch */
    int64_t last_rescan_us;  /* when the last rescan ended */
    int64_t rescan_started_us;
    int rescan_failures;     /* failed rescans since the last that ended */
    unsigned problems_logged;    /* on_problem lines since the summary */
    uint64_t problems_quiet;     /* problems not logged since then */
    int64_t problems_since_us;   /* mono: the last summary */
    int exit_code;
};

/* ----------------------------------------------------------------- glue */

static void
kick(struct src *s)
{
    if (s->push != NULL)
        push_kick(s->push);
}

/* Problems not logged one by one since the last summary: how many. */
static void
problems_summary(struct src *s)
{
    if (s->problems_quiet > 0) {
        char n[32];
        snprintf(n, sizeof(n), "%llu", (unsigned long long)s->problems_quiet);
        rs_log_kv(RS_LOG_WARN, "more paths skipped than logged one by one",
                  "count", n, NULL);
    }
    s->problems_quiet = 0;
    s->problems_logged = 0;
    s->problems_since_us = rs_time_mono_us();
}

/* Every skipped path is a warning, but a tree of a million bad names is
 * not a million lines: the first RSSOURCE_PROBLEMS_LOGGED of a scan (or
 * of a minute), then their count (at the scan's end, or with the next
 * one after the minute). */
static void
on_problem(void *ud, const char *rel, const char *what, int errnum)
{
    struct src *s = ud;
    if (rs_time_mono_us() - s->problems_since_us >=
        RSSOURCE_PROBLEMS_WINDOW_MS * 1000)
        problems_summary(s);
    if (s->problems_logged >= RSSOURCE_PROBLEMS_LOGGED) {
        s->problems_quiet++;
        return;
    }
    s->problems_logged++;
    /* the path last: a long one is cut at the log's line limit */
    if (errnum != 0)
        rs_log_kv(RS_LOG_WARN, "skipped", "what", what, "error",
                  strerror(errnum), "path", rel, NULL);
    else
        rs_log_kv(RS_LOG_WARN, "skipped", "what", what, "path", rel, NULL);
}

/* What a scan found: the catalog's counts since base (the counts as it
 * began; batches observed between a rescan's steps count too). */
static void
log_scan(struct src *s, const char *what, const struct catalog_stats *base,
         double secs)
{
    const struct catalog_stats *cs = catalog_stats(s->cat);
    char f[32], h[32], hb[32], ch[32], cr[32], up[32], de[32], t[32], pr[32];
#define SCAN_N(buf, field) \
    snprintf(buf, sizeof(buf), "%llu", \
             (unsigned long long)(cs->field - base->field))
    SCAN_N(f, files);
    SCAN_N(h, hashed);
    SCAN_N(hb, hashed_bytes);
    SCAN_N(ch, cache_hits);
    SCAN_N(cr, created);
    SCAN_N(up, updated);
    SCAN_N(de, deleted);
    SCAN_N(pr, problems);
#undef SCAN_N
    snprintf(t, sizeof(t), "%.3f", secs);
    rs_log_kv(RS_LOG_INFO, what, "files", f, "hashed", h, "hashed_bytes", hb,
              "cache_hits", ch, "created", cr, "updated", up, "deleted", de,
              "problems", pr, "seconds", t, NULL);
    problems_summary(s);
}

/* Rescans come every --rescan-interval, or every RSSOURCE_UNWATCHED_MS
 * at least while the kernel's limit left directories unwatched: 0, none. */
static int64_t
rescan_every_ms(const struct src *s)
{
    int64_t every_ms = conf.rescan_ms;
    if (s->unwatched && (every_ms == 0 || every_ms > RSSOURCE_UNWATCHED_MS))
        every_ms = RSSOURCE_UNWATCHED_MS;
    return every_ms;
}

/* Run on_rescan at the next loop turn, after what is ready now. */
static void
rescan_next_turn(struct src *s)
{
    static const struct timeval zero = { 0, 0 };
    event_add(s->ev_rescan, &zero);
}

/* After a failed rescan, the next waits 1 s, doubling to a minute: the
 * events it was to make up for are lost, so it is tried again even
 * without --rescan-interval, but a storage that stays broken (a full disk)
 * is not walked in a loop. */
static const struct rs_backoff RESCAN_RETRY = { .first_ms = 1000,
                                                .max_ms = 60000 };

/* How long after the last rescan ended the next is due: the retry's
 * wait after a failure, or the periodic one's (if sooner); 0: none. */
static int64_t
rescan_wait_ms(const struct src *s)
{
    int64_t every_ms = rescan_every_ms(s);
    if (s->rescan_failures > 0) {
        int64_t retry_ms = (int64_t)rs_backoff_base(
            &RESCAN_RETRY, (unsigned)s->rescan_failures);
        if (every_ms <= 0 || every_ms > retry_ms)
            every_ms = retry_ms;
    }
    return every_ms;
}

/* What comes next when no rescan is walking: one asked for, at once; one
 * that failed, after its wait; or the periodic one, every_ms after the
 * last ended. */
static void
arm_rescan(struct src *s)
{
    if (s->ev_rescan == NULL || catalog_scanning(s->cat))
        return;   /* started yet; or the walk's end arms it */
    if (s->rescan_due && s->rescan_failures == 0) {
        rescan_next_turn(s);
        return;
    }
    int64_t every_ms = rescan_wait_ms(s);
    if (every_ms <= 0)
        return;
    int64_t left_us = s->last_rescan_us + every_ms * 1000 - rs_time_mono_us();
    if (left_us < 0)
        left_us = 0;
    struct timeval tv = rs_time_tv_us(left_us);
    event_add(s->ev_rescan, &tv);
}

static int
on_scan_dir(void *ud, const char *rel)
{
    struct src *s = ud;
    int rc = s->watch != NULL ? watch_add_dir(s->watch, rel) : 0;
    /* No watch (the kernel's limit): keep scanning; periodic rescans
     * cover what is not watched. */
    if (rc == RS_ETOOBIG && !s->unwatched) {
        s->unwatched = true;
        arm_rescan(s);
    }
    return rc == RS_ENOMEM ? rc : 0;
}

/* A rescan asked for while one is walking comes after it: what was lost
 * may lie where the walk has passed. */
static void
schedule_rescan(struct src *s, const char *why)
{
    if (s->rescan_due)
        return;
    rs_log_kv(RS_LOG_WARN, catalog_scanning(s->cat)
                               ? "rescanning the whole tree again after this one"
                               : "rescanning the whole tree", "why", why, NULL);
    s->rescan_due = true;
    arm_rescan(s);
}

static void
on_retry(void *ud, const char *rel)
{
    struct src *s = ud;
    if (watch_retry(s->watch, rel) != 0)
        schedule_rescan(s, "cannot hold a path being written");
}

static void
on_batch(void *ud, const char *const *paths, size_t n)
{
    struct src *s = ud;
    uint64_t before = catalog_changes(s->cat);
    int rc = catalog_observe_batch(s->cat, paths, n, rs_time_now(), on_retry,
                                   s);
    if (rc != 0) {
        rs_log_kv(RS_LOG_ERROR, "cannot record changes", "error",
                  rs_strerror(rc), "state", state_errstr(s->st), NULL);
        schedule_rescan(s, "a batch failed");
        return;
    }
    if (catalog_changes(s->cat) != before)
        kick(s);
}

/* A large file's digests are read on hashwork's thread; the loop goes on
 * serving and pushing meanwhile. */
static bool
on_defer_hash(void *ud, const char *rel)
{
    struct src *s = ud;
    return s->hashwork != NULL && hashwork_submit(s->hashwork, rel) == 0;
}

/* Its digests are in: observed again, the file is recorded with them
 * (its identity unchanged) or sent again (changed meanwhile). */
static void
on_hashed(void *ud, const struct hashwork_result *r)
{
    struct src *s = ud;
    if (r->rc == RS_EIO) {
        /* unreadable: not catalogued, as when it is read on the loop */
        on_problem(s, r->rel, "read", EIO);
        return;
    }
    if (r->rc == RS_EAGAIN || r->rc == RS_ENOMEM) {
        on_retry(s, r->rel);     /* still being written: after it settles */
        return;
    }
    if (r->rc == 0)
        catalog_digests_known(s->cat, &r->st, r->md5, r->sha256);
    on_batch(s, &r->rel, 1);
}

static void
on_watch_rescan(void *ud, const char *why)
{
    schedule_rescan(ud, why);
}

static void
on_root_gone(void *ud)
{
    struct src *s = ud;
    rs_log(RS_LOG_ERROR, "the served directory was deleted or moved away");
    s->exit_code = 1;
    event_base_loopexit(s->base, NULL);
}

/* A rescan walks --rescan-step files a loop turn, so that GETs,
 * the watch's batches and the push go on meanwhile (a tree of millions of
 * files takes minutes); its changes are pushed as each step commits. */
static void
on_rescan(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct src *s = arg;
    int rc = 0;
    if (!catalog_scanning(s->cat)) {
        if (!s->rescan_due || s->catching_up)
            rs_log_kv(RS_LOG_INFO, "rescanning the whole tree", "why",
                      s->rescan_failures > 0 ? "the last rescan failed"
                      : s->catching_up ? "start-up: what changed while stopped"
                      : s->unwatched   ? "directories without a watch"
                                       : "--rescan-interval", NULL);
        s->rescan_due = false;
        s->rescan_started_us = rs_time_mono_us();
        s->scan_base = *catalog_stats(s->cat);
        rc = catalog_scan_start(s->cat, true);
    }
    uint64_t before = catalog_changes(s->cat);
    if (rc == 0)
        rc = catalog_scan_step(s->cat, (size_t)conf.rescan_step,
                               rs_time_now());
    if (catalog_changes(s->cat) != before)
        kick(s);
    if (rc == 0) {
        rescan_next_turn(s);
        return;
    }
    s->last_rescan_us = rs_time_mono_us();
    if (rc < 0) {
        s->rescan_failures++;
        char t[32];
        snprintf(t, sizeof(t), "%.3g", (double)rescan_wait_ms(s) / 1e3);
        rs_log_kv(RS_LOG_ERROR, "rescan failed", "error", rs_strerror(rc),
                  "state", state_errstr(s->st), "retry_in_seconds", t, NULL);
    } else if (s->catching_up) {
        s->rescan_failures = 0;
        s->catching_up = false;
        log_scan(s, "start-up scan", &s->scan_base,
                 (double)(s->last_rescan_us - s->rescan_started_us) / 1e6);
        serve_hold_resourcelist(s->serve, false);
    } else {
        s->rescan_failures = 0;
        char t[32];
        snprintf(t, sizeof(t), "%.3f",
                 (double)(s->last_rescan_us - s->rescan_started_us) / 1e6);
        rs_log_kv(RS_LOG_INFO, "rescan done", "seconds", t, NULL);
    }
    arm_rescan(s);
}

static void
on_snapshot_done(void *ud, int rc)
{
    struct src *s = ud;
    if (rc == 0) {
        const struct snapshot_info *i = snapshot_current(s->snap);
        char g[32], c[32], t[32];
        snprintf(g, sizeof(g), "%lld", (long long)i->gen);
        snprintf(c, sizeof(c), "%lld", (long long)i->count);
        snprintf(t, sizeof(t), "%.3f", (double)(i->completed - i->at) / 1e6);
        rs_log_kv(RS_LOG_INFO, "Resource List published", "generation", g,
                  "resources", c, "seconds", t, NULL);
        kick(s);
    } else {
        rs_log_kv(RS_LOG_ERROR, "Resource List build failed", "error",
                  rs_strerror(rc), NULL);
    }
    if (s->serve != NULL)
        serve_snapshot_done(s->serve, rc);
}

static void
on_accepted(void *ud, enum push_lane lane, const char *channel)
{
    struct src *s = ud;
    if (s->channels != NULL)
        channels_on_accepted(s->channels, lane, channel);
}

static void
on_channels_change(void *ud)
{
    struct src *s = ud;
    /* The Capability List changed: tell the framework topic. */
    struct state_fw f = {
        .dt = rs_time_now(),
        .name = DOCS_CAPLIST,
        .cap = RS_CAP_CAPABILITYLIST,
        .change = RS_CHANGE_UPDATED,
    };
    if (state_fw_add(s->st, &f) == 0)
        kick(s);
}

static void serve_start(struct src *s, const char *channels);

static void
on_channels_settled(void *ud)
{
    serve_start(ud, "asked");
}

static void
on_hubwait(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    serve_start(arg, "wait_expired");
}

/* The oldest `at` of the Resource List and the Resource Dump served:
 * the Change Lists must reach back to it (docs/source.md 5, Retention). */
static rs_time_t
served_at(const struct src *s)
{
    rs_time_t at = RS_TIME_NONE;
    const struct snapshot_info *rl = snapshot_current(s->snap);
    if (rl->gen > 0)
        at = rl->at;
    if (s->dump != NULL && dumpw_current(s->dump)->gen > 0) {
        rs_time_t d = dumpw_current(s->dump)->at;
        if (at == RS_TIME_NONE || d < at)
            at = d;
    }
    return at;
}

static void
on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct src *s = arg;
    int64_t pushed = 0;
    if (state_meta_get(s->st, "push.change", &pushed) != 0)
        pushed = 0;
    rs_time_t now = rs_time_now();
    int rc = changelog_tick(s->cl, now, pushed, served_at(s));
    if (rc != 0)
        rs_log_kv(RS_LOG_ERROR, "Change List policy failed", "error",
                  state_errstr(s->st), NULL);
    /* Lists past --changelist-retain wait for a newer Resource List. It is
     * otherwise built only when asked for: without a reader the lists
     * would be kept for ever. --resourcelist-refresh still bounds how often
     * it is built; the dump has its own schedule (on_dump_tick). */
    const struct snapshot_info *rl = snapshot_current(s->snap);
    if (rc == 0 && changelog_held(s->cl) && !s->catching_up &&
        !snapshot_building(s->snap) &&
        now - rl->at >= conf.rl_refresh_ms * 1000 &&
        snapshot_stale(s->snap)) {
        rs_log(RS_LOG_INFO, "building a Resource List: Change Lists past "
               "--changelist-retain are kept until it is newer");
        if ((rc = snapshot_build_async(s->snap)) != 0)
            rs_log_kv(RS_LOG_ERROR, "Resource List build failed", "error",
                      rs_strerror(rc), NULL);
    }
    kick(s);
}

/* Lists are never dropped while the Resource List or Dump served is
 * older than they are (on_tick): with a retention shorter than the time
 * between rebuilds, they are kept longer than --changelist-retain says.
 * Said once, at start, so that the disk it takes is no surprise. */
static void
warn_retain(void)
{
    char r[32], i[32];
    snprintf(r, sizeof(r), "%.3g", (double)conf.cl_retain_ms / 1e3);
    if (conf.cl_retain_ms > 0 && conf.cl_retain_ms < conf.rl_refresh_ms) {
        snprintf(i, sizeof(i), "%.3g", (double)conf.rl_refresh_ms / 1e3);
        rs_log_kv(RS_LOG_WARN, "Change Lists are kept past "
                  "--changelist-retain until a newer Resource List is built "
                  "(at most --resourcelist-refresh apart)", "retain_seconds",
                  r, "refresh_seconds", i, NULL);
    }
    if (conf.dump && conf.cl_retain_ms > 0 &&
        conf.cl_retain_ms < conf.dump_interval_ms) {
        snprintf(i, sizeof(i), "%.3g", (double)conf.dump_interval_ms / 1e3);
        rs_log_kv(RS_LOG_WARN, "Change Lists are kept past "
                  "--changelist-retain until a newer Resource Dump is built "
                  "(--dump-interval apart)", "retain_seconds", r,
                  "dump_interval_seconds", i, NULL);
    }
}

/* Seconds from now to at, for a log line, into buf (24 bytes). */
static const char *
retry_in(rs_time_t at, char *buf)
{
    rs_time_t d = at == RS_TIME_NONE ? 0 : at - rs_time_now();
    snprintf(buf, 24, "%.3g", d > 0 ? (double)d / 1e6 : 0.0);
    return buf;
}

/* --dump: the Change Dump of each closed Change List (built on a thread
 * of its own; this looks every second). */
static void
cdump_tick(struct src *s)
{
    char n[24];
    int rc = changedump_tick(s->cdump);

    if (rc == CHANGEDUMP_PUBLISHED) {
        snprintf(n, sizeof(n), "%lld",
                 (long long)changedump_packages(s->cdump));
        rs_log_kv(RS_LOG_INFO, "change dump published", "packages", n, NULL);
    } else if (rc == CHANGEDUMP_SKIPPED) {
        rs_log_kv(RS_LOG_WARN, "no change dump for a Change List", "why",
                  changedump_errstr(s->cdump), NULL);
    } else if (rc < 0) {
        rs_log_kv(RS_LOG_ERROR, "change dump failed", "error",
                  changedump_errstr(s->cdump), "retry_in_seconds",
                  retry_in(changedump_retry_at(s->cdump), n), NULL);
    }
}

static void
on_cdump_skip(void *ud, int64_t list, const char *why)
{
    (void)ud;
    char n[24];
    snprintf(n, sizeof(n), "%lld", (long long)list);
    rs_log_kv(RS_LOG_WARN, "change dump capture stopped: this Change List "
              "will have no Change Dump", "list", n, "why", why, NULL);
}

/* --dump: publish a build that ended; start one when the dump misses
 * changes and is --dump-interval old (or there is none). Builds run on
 * their own thread; this only looks every second. */
static void
on_dump_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct src *s = arg;
    const struct dumpw_info *cur = dumpw_current(s->dump);
    char n[3][24];
    int rc = dumpw_poll(s->dump);

    cdump_tick(s);
    if (rc == 1) {
        snprintf(n[0], 24, "%lld", (long long)cur->gen);
        snprintf(n[1], 24, "%lld", (long long)cur->files);
        snprintf(n[2], 24, "%lld", (long long)cur->packages);
        rs_log_kv(RS_LOG_INFO, "resource dump published", "generation", n[0],
                  "files", n[1], "packages", n[2], NULL);
    } else if (rc < 0) {
        rs_log_kv(RS_LOG_ERROR, "resource dump failed", "error",
                  dumpw_errstr(s->dump), "retry_in_seconds",
                  retry_in(dumpw_retry_at(s->dump), n[0]), NULL);
    }
    /* Not from a tree the start-up rescan has not all looked at yet. */
    if (s->catching_up || !dumpw_due(s->dump, rs_time_now()))
        return;
    if ((rc = dumpw_start(s->dump)) != 0)
        rs_log_kv(RS_LOG_ERROR, "cannot start a resource dump", "error",
                  dumpw_errstr(s->dump), "retry_in_seconds",
                  retry_in(dumpw_retry_at(s->dump), n[0]), NULL);
}

/* The Capability List's entries besides the Resource List and the Change
 * Lists: the hub's channels, and the Resource Dump once there is one. */
static const struct docs_channel *
caplist_entries(void *ud, size_t *n)
{
    struct src *s = ud;
    const struct docs_channel *ch;
    size_t k = 0;

    if (s->channels != NULL) {
        ch = channels_get(s->channels, &k);
        if (k > 2 * PUSH_LANES)
            k = 2 * PUSH_LANES;
        memcpy(s->caps, ch, k * sizeof(*ch));
    }
    if (s->dump != NULL && dumpw_current(s->dump)->gen > 0)
        s->caps[k++] = (struct docs_channel){
            .loc = s->dump_url, .cap = RS_CAP_RESOURCEDUMP };
    if (s->cdump != NULL && changedump_packages(s->cdump) > 0)
        s->caps[k++] = (struct docs_channel){
            .loc = s->cdump_url, .cap = RS_CAP_CHANGEDUMP };
    *n = k;
    return s->caps;
}

/* -------------------------------------------------------------- signals */

/* The drain (rs_daemon runs it): what is still gathering goes out now;
 * what the hub has not accepted when the drain ends stays in the outbox
 * for the next start. */
static void
on_drain(void *ud)
{
    struct src *s = ud;

    rs_log(RS_LOG_INFO, "draining: waiting for notifications in flight");
    if (s->push != NULL)
        push_flush(s->push);
}

static bool
on_drained(void *ud)
{
    struct src *s = ud;

    return s->push == NULL || push_idle(s->push);
}

static void
on_stopped(void *ud, bool timed_out)
{
    struct src *s = ud;

    (void)timed_out;
    event_base_loopexit(s->base, NULL);
}

/* The request target as the access log writes it: bytes below 0x21
 * (controls, space: the fields are space-separated), 0x7f and above
 * (C1 controls such as 0x9b, a terminal's CSI) and the backslash become
 * \xHH, so that a line is one line and cannot drive a terminal that
 * shows it. */
static void
access_put_uri(FILE *f, const char *uri)
{
    static const char hex[] = "0123456789abcdef";
    for (const unsigned char *p = (const unsigned char *)uri; *p; p++) {
        if (*p > 0x20 && *p < 0x7f && *p != '\\') {
            putc(*p, f);
        } else {
            putc('\\', f);
            putc('x', f);
            putc(hex[*p >> 4], f);
            putc(hex[*p & 15], f);
        }
    }
}

/* --access-log: "TIME METHOD URI STATUS BYTES", one reply a line. */
static void
on_access(void *ud, const char *method, const char *uri, int status,
          size_t bytes)
{
    struct src *s = ud;

    if (s->access == NULL)
        return;
    fprintf(s->access, "%.6f %s ", (double)rs_time_now() / 1e6, method);
    access_put_uri(s->access, uri);
    fprintf(s->access, " %d %zu\n", status, bytes);
}

static int
access_open(struct src *s)
{
    FILE *f;

    if (conf.access_log == NULL)
        return 0;
    if ((f = fopen(conf.access_log, "ae")) == NULL) {
        rs_log(RS_LOG_ERROR, "--access-log %s: %s", conf.access_log,
               strerror(errno));
        return -1;
    }
    setvbuf(f, NULL, _IOLBF, 0);
    if (s->access != NULL)
        fclose(s->access);
    s->access = f;
    return 0;
}

/* SIGHUP: the outbox tries the hub again now, and the channels are asked
 * for again; the access log is reopened (rotation). */
static void
on_reload(void *ud)
{
    struct src *s = ud;

    (void)access_open(s);
    if (s->push != NULL)
        push_resume(s->push);
    if (s->channels != NULL)
        channels_refresh(s->channels);
}

/* ------------------------------------------------------------ start-up */

static int
setup_log(void)
{
    char err[512];

    if (rs_log_setup("rssource", conf.log_level, conf.log_format,
                     conf.log_file, err, sizeof(err)) != 0) {
        fprintf(stderr, "rssource: %s\n", err);
        return 2;
    }
    return 0;
}

/* The hub token: the first line of --token-file (rs_tokenfile.h). */
static int
read_token(struct src *s)
{
    char err[512];
    int rc = rs_tokenfile_read(conf.token_file, conf.insecure_token_file,
                               s->token, sizeof(s->token), err,
                               sizeof(err));

    if (rc != 0) {
        rs_log(RS_LOG_ERROR, "token file %s", err);
        return rc;
    }
    s->have_token = true;
    return 0;
}

static char *
join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = rs_malloc(n);
    if (p != NULL)
        snprintf(p, n, "%s/%s", a, b);
    return p;
}

/* The state directory: --state, or a hidden sibling of the served
 * directory. Never inside it: the state would be served, and its writes
 * would be changes. */
static int
setup_state_dir(struct src *s)
{
    const char *root = tree_root(s->tree);
    if (conf.state != NULL) {
        s->state_dir = rs_strdup(conf.state);
    } else {
        char *a = rs_strdup(root), *b = rs_strdup(root);
        if (a == NULL || b == NULL) {
            rs_free(a);
            rs_free(b);
            return RS_ENOMEM;
        }
        const char *parent = dirname(a), *name = basename(b);
        size_t n = strlen(parent) + strlen(name) + 16;
        s->state_dir = rs_malloc(n);
        if (s->state_dir != NULL)
            snprintf(s->state_dir, n, "%s/.%s.rssource",
                     strcmp(parent, "/") == 0 ? "" : parent, name);
        rs_free(a);
        rs_free(b);
    }
    if (s->state_dir == NULL)
        return RS_ENOMEM;
    bool made = mkdir(s->state_dir, 0700) == 0;
    if (!made && errno != EEXIST) {
        rs_log(RS_LOG_ERROR, "state directory %s: %s%s", s->state_dir,
               strerror(errno), conf.state == NULL ? " (use --state DIR)" : "");
        return RS_EIO;
    }
    char *real = realpath(s->state_dir, NULL);
    if (real == NULL) {
        rs_log(RS_LOG_ERROR, "state directory %s: %s", s->state_dir,
               strerror(errno));
        return RS_EIO;
    }
    size_t rl = strlen(root);
    bool inside = strncmp(real, root, rl) == 0 &&
                  (real[rl] == '\0' || real[rl] == '/' || rl == 1);
    free(real);
    if (inside) {
        rs_log(RS_LOG_ERROR, "the state directory %s is inside --dir %s",
               s->state_dir, root);
        if (made)
            (void)rmdir(s->state_dir);    /* leave the tree as it was */
        return RS_EINVAL;
    }
    s->state_db = join(s->state_dir, "state.db");
    s->rl_dir = join(s->state_dir, "resourcelists");
    s->dump_dir = join(s->state_dir, "dumps");
    return s->state_db != NULL && s->rl_dir != NULL && s->dump_dir != NULL
           ? 0 : RS_ENOMEM;
}

static int
setup_http(struct src *s)
{
    s->http = evhttp_new(s->base);
    if (s->http == NULL)
        return RS_ENOMEM;
    evhttp_set_max_headers_size(s->http, 64 * 1024);
    evhttp_set_max_body_size(s->http, 64 * 1024);
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS);
    struct rs_httpguard_opts go = {
        .base = s->base,
        .http = s->http,
        .name = "http",
        .limits = conf.http_limits,
        .on_log = rs_httpguard_log_warn,
    };
    struct evhttp_bound_socket *bs;
    char err[300];
    int rc = rs_httpguard_listen(&go, conf.listen.host, conf.listen.port,
                                 &s->guard, &bs, &s->http_port, err,
                                 sizeof(err));
    if (rc != 0) {
        rs_log(RS_LOG_ERROR, "HTTP listener: %s", err);
        return rc;
    }
    s->listener = evhttp_bound_socket_get_listener(bs);
    if (conf.base_url == NULL) {
        char url[600], buf[sizeof(url) + 1];
        if (rs_httpguard_local_url("http", conf.listen.host, s->http_port, url,
                                   sizeof(url)) != 0) {
            rs_log(RS_LOG_ERROR, "--listen: the host is too long for a URL");
            return RS_ETOOBIG;
        }
        rs_httpguard_warn_local_url(conf.listen.host, url, "--base-url");
        snprintf(buf, sizeof(buf), "%s/", url);
        conf.base_url = rs_strdup(buf);
        if (conf.base_url == NULL)
            return RS_ENOMEM;
    }
    return 0;
}

static int
setup_topics(struct src *s)
{
    const char *names[PUSH_LANES] = { "changes", "framework" };
    char *given[PUSH_LANES] = { conf.change_topic, conf.framework_topic };
    for (int k = 0; k < PUSH_LANES; k++) {
        if (given[k] != NULL) {
            s->topic[k] = rs_strdup(given[k]);
        } else {
            char base[DOCS_URL_MAX];
            if (conf.topic_base != NULL) {
                size_t n = strlen(conf.topic_base);
                snprintf(base, sizeof(base), "%s%s", conf.topic_base,
                         n > 0 && conf.topic_base[n - 1] == '/' ? "" : "/");
            } else if (docs_url(s->docs, "", base, sizeof(base)) != 0) {
                return RS_ETOOBIG;
            }
            size_t n = strlen(base) + strlen(names[k]) + 1;
            s->topic[k] = rs_malloc(n);
            if (s->topic[k] != NULL)
                snprintf(s->topic[k], n, "%s%s", base, names[k]);
        }
        if (s->topic[k] == NULL)
            return RS_ENOMEM;
        if (!rs_url_is_http(s->topic[k])) {
            rs_log(RS_LOG_ERROR, "topic %s is not an absolute http(s) URI",
                   s->topic[k]);
            return RS_EINVAL;
        }
    }
    return 0;
}

static double
mono_s(void)
{
    return (double)rs_time_mono_us() / 1e6;
}

/* Does the directory hold any entry at all? */
static bool
dir_has_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    bool any = false;

    if (d == NULL)
        return true;              /* cannot tell: the scan will say */
    while (!any && (e = readdir(d)) != NULL)
        any = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return any;
}

/* Is some of the first STATE_SAMPLE files the state lists in the tree? */
#define STATE_SAMPLE 16
static bool
state_meets_tree(struct src *s)
{
    struct state_iter *it = NULL;
    struct state_res r;
    struct stat sb;
    bool met = false;
    int n = 0;

    if (state_res_iter(s->st, "", &it) != 0)
        return true;              /* cannot tell: the scan will say */
    while (!met && n++ < STATE_SAMPLE && state_res_next(it, &r) == 1)
        met = tree_stat(s->tree, r.path, &sb) == 0;
    state_iter_free(it);
    return met;
}

/*
 * A restart compares the tree with the state and publishes the
 * difference. Two mistakes would make that difference "every file
 * deleted", pushed to every mirror: a directory whose filesystem is not
 * mounted (an empty mount point), and a --state of another directory.
 * Neither is served: 1 for the first (systemd tries again; the mount may
 * come), 2 for the second. A directory that moved keeps its state.
 */
static int
check_state_tree(struct src *s)
{
    const char *root = tree_root(s->tree);
    char was[PATH_MAX + 1], n[24];
    int64_t count = state_res_count(s->st);
    int rc = state_meta_get_text(s->st, "root", was, sizeof(was));

    snprintf(n, sizeof(n), "%lld", (long long)count);
    if (count > 0 && !dir_has_entries(root)) {
        rs_log_kv(RS_LOG_ERROR, "--dir is empty while the state lists "
                  "files: not publishing their deletion (is its filesystem "
                  "mounted? to serve it empty, remove the state)", "dir",
                  root, "state", s->state_dir, "files", n, NULL);
        return 1;
    }
    if (rc == 0 && strcmp(was, root) != 0) {
        if (count > 0 && !state_meets_tree(s)) {
            rs_log_kv(RS_LOG_ERROR, "this state is of another directory: "
                      "none of the files it lists is in --dir (use another "
                      "--state)", "dir", root, "its_dir", was, "state",
                      s->state_dir, "files", n, NULL);
            return 2;
        }
        rs_log_kv(RS_LOG_INFO, "the served directory moved", "dir", root,
                  "was", was, NULL);
    } else if (rc == 0) {
        return 0;
    } else if (rc != RS_ENOTFOUND && rc != RS_ETOOBIG) {
        rs_log_kv(RS_LOG_ERROR, "state: cannot read it", "error",
                  state_errstr(s->st), NULL);
        return 1;
    }
    if (state_meta_set_text(s->st, "root", root) != 0) {
        rs_log_kv(RS_LOG_ERROR, "state: cannot write it", "error",
                  state_errstr(s->st), NULL);
        return 1;
    }
    return 0;
}

/*
 * The catalog at start-up. A first start records the baseline (no
 * changes) before serving: there is nothing to serve until it is made.
 * A later start serves the last state at once, and what changed while
 * stopped is found by a rescan in steps (on_rescan), its changes pushed as
 * each step commits: a restart over millions of files is not minutes
 * without a Source. Until that rescan ends the Resource List kept is
 * served as it is (its `at` is from before the stop; one built now would
 * state at now what was only partly looked at).
 */
static int
startup_scan(struct src *s)
{
    int64_t baselined = 0;
    if (state_meta_get(s->st, "baseline", &baselined) != 0)
        baselined = 0;
    double t0 = mono_s();
    int rc;
    if (baselined) {
        s->catching_up = true;
        s->rescan_due = true;    /* setup's arm_rescan starts it */
    } else {
        struct catalog_stats base = *catalog_stats(s->cat);
        rc = catalog_scan(s->cat, "", false, rs_time_now());
        if (rc != 0) {
            rs_log_kv(RS_LOG_ERROR, "baseline scan failed", "error",
                      rs_strerror(rc), "state", state_errstr(s->st), NULL);
            return rc;
        }
        if (state_meta_set(s->st, "baseline", 1) != 0)
            return RS_EIO;
        log_scan(s, "baseline scan", &base, mono_s() - t0);
        s->last_rescan_us = rs_time_mono_us();
    }
    if (baselined ? !snapshot_fits(s->snap) : snapshot_stale(s->snap)) {
        t0 = mono_s();
        rc = snapshot_build(s->snap, rs_time_now());
        if (rc != 0) {
            rs_log_kv(RS_LOG_ERROR, "Resource List build failed", "error",
                      rs_strerror(rc), NULL);
            return rc;
        }
        char g[32], c[32], t[32];
        snprintf(g, sizeof(g), "%lld",
                 (long long)snapshot_current(s->snap)->gen);
        snprintf(c, sizeof(c), "%lld",
                 (long long)snapshot_current(s->snap)->count);
        snprintf(t, sizeof(t), "%.3f", mono_s() - t0);
        rs_log_kv(RS_LOG_INFO, "Resource List published", "generation", g,
                  "resources", c, "seconds", t, NULL);
    }
    return 0;
}

/*
 * Start answering HTTP and say so (log, ready-file); once. With --hub this
 * waits until the hub has named our channels (or refused, or cannot be
 * reached), at most RSSOURCE_HUB_WAIT_MS: the first Capability List served
 * then carries the hub's ws:// channels, so a subscriber started right
 * after rssource chooses push, not polling. Meanwhile the socket listens
 * (the kernel queues connections) and nothing else waits: the watch,
 * the outbox and the hub's answers run on the loop.
 */
static void
serve_start(struct src *s, const char *channels)
{
    if (s->serving)
        return;
    s->serving = true;
    if (s->ev_hubwait != NULL)
        event_del(s->ev_hubwait);
    if (s->listener != NULL && evconnlistener_enable(s->listener) != 0) {
        rs_log(RS_LOG_ERROR, "cannot accept HTTP connections");
        s->exit_code = 1;
        event_base_loopexit(s->base, NULL);
        return;
    }
    char port[16], pending[32], waited[32];
    snprintf(port, sizeof(port), "%d", s->http_port);
    struct push_stats ps;
    push_get_stats(s->push, &ps);
    snprintf(pending, sizeof(pending), "%lld", (long long)ps.backlog[0]);
    snprintf(waited, sizeof(waited), "%.3f", mono_s() - s->started);
    rs_log_kv(RS_LOG_INFO, "serving", "dir", tree_root(s->tree), "base",
              docs_base(s->docs), "http_port", port, "hub",
              conf.hub != NULL ? conf.hub : "none", "change_topic",
              s->topic[0], "state", s->state_dir, "unpushed", pending,
              "hub_channels", channels, "startup_seconds", waited, NULL);
    char ready[32];
    snprintf(ready, sizeof(ready), "{\"http\":%d}", s->http_port);
    if (conf.ready_file != NULL &&
        rs_ready_file_write(conf.ready_file, ready) != 0)
        rs_log(RS_LOG_WARN, "cannot write %s", conf.ready_file);
}

static int
setup(struct src *s)
{
    char err[512];
    const char *e;
    int rc;
    s->started = mono_s();
    struct tree_opts to = {
        .dir = conf.dir,
        .excludes = (const char *const *)conf.excludes,
        .follow_symlinks = conf.follow_symlinks,
    };
    if (tree_open(&to, &s->tree, err, sizeof(err)) != 0) {
        rs_log(RS_LOG_ERROR, "--dir: %s", err);
        return 2;
    }
    if (conf.read_token_file != NULL &&
        rs_tokenfile_read(conf.read_token_file, conf.insecure_token_file,
                          s->read_token, sizeof(s->read_token), err,
                          sizeof(err)) != 0) {
        rs_log(RS_LOG_ERROR, "read token file %s", err);
        return 2;
    }
    if (conf.token_file != NULL && read_token(s) != 0)
        return 2;
    if (setup_state_dir(s) != 0)
        return 2;
    if (state_open(s->state_db, false, &s->st, err, sizeof(err)) != 0) {
        rs_log(RS_LOG_ERROR, "state: %s", err);
        return 2;
    }
    if ((rc = check_state_tree(s)) != 0)
        return rc;
    if (state_checkpointer_start(s->st, 1000) != 0)
        rs_log(RS_LOG_WARN, "no checkpoint thread: commits will checkpoint");
    s->base = rs_daemon_base_new();
    if (s->base == NULL || setup_http(s) != 0)
        return 1;
    s->docs = docs_new(conf.base_url, &e);
    if (s->docs == NULL) {
        rs_log(RS_LOG_ERROR, "%s", e);
        return 2;
    }
    if (setup_topics(s) != 0)
        return 2;
    warn_retain();
    struct changelog_opts co = {
        .max_entries = conf.page_size,
        .max_age_ms = conf.cl_max_age_ms,
        .retain_ms = conf.cl_retain_ms,
    };
    s->cl = changelog_new(s->st, &co, rs_time_now(), &e);
    if (s->cl == NULL) {
        rs_log(RS_LOG_ERROR, "change log: %s", e);
        return 1;
    }
    struct watch_opts wo = {
        .base = s->base,
        .tree = s->tree,
        .settle_ms = conf.settle_ms,
        .on_batch = on_batch,
        .on_rescan = on_watch_rescan,
        .on_root_gone = on_root_gone,
        .on_problem = on_problem,
        .ud = s,
    };
    s->watch = watch_new(&wo, &e);
    if (s->watch == NULL) {
        rs_log(RS_LOG_ERROR, "watch: %s", e);
        return 1;
    }
    struct hashwork_opts hwo = {
        .base = s->base,
        .tree = s->tree,
        .on_hashed = on_hashed,
        .ud = s,
    };
    s->hashwork = hashwork_new(&hwo, &e);
    if (s->hashwork == NULL) {
        rs_log(RS_LOG_ERROR, "hashing thread: %s", e);
        return 1;
    }
    if (conf.dump) {
        struct changedump_opts cdo = {
            .docs = s->docs,
            .st = s->st,
            .state_path = s->state_db,
            .dir = s->dump_dir,
            .max_spool = conf.cdump_max_bytes,
            .max_bytes = conf.dump_max_bytes,
            .max_files = (size_t)conf.dump_max_files,
            .on_skip = on_cdump_skip,
            .ud = s,
        };
        if (docs_url(s->docs, CHANGEDUMP_DOC, s->cdump_url,
                     sizeof(s->cdump_url)) != 0) {
            rs_log(RS_LOG_ERROR, "--base-url: too long");
            return 2;
        }
        s->cdump = changedump_new(&cdo, &e);
        if (s->cdump == NULL) {
            rs_log(RS_LOG_ERROR, "Change Dump: %s", e);
            return 1;
        }
    }
    struct catalog_opts cao = {
        .tree = s->tree,
        .st = s->st,
        .state_path = s->state_db,
        .cl = s->cl,
        .cdump = s->cdump,
        .hooks = { .on_dir = on_scan_dir, .on_problem = on_problem,
                   .defer_hash = on_defer_hash, .ud = s },
    };
    s->cat = catalog_new(&cao);
    if (s->cat == NULL)
        return 1;
    if (strcmp(conf.rl_paging, "index") != 0 &&
        strcmp(conf.rl_paging, "next") != 0) {
        rs_log(RS_LOG_ERROR, "--resourcelist-paging: expected index or next");
        return 2;
    }
    struct snapshot_opts so = {
        .docs = s->docs,
        .st = s->st,
        .state_path = s->state_db,
        .dir = s->rl_dir,
        .page_size = (size_t)conf.page_size,
        .next_links = strcmp(conf.rl_paging, "next") == 0,
        .keep = 3,
        .base = s->base,
        .on_done = on_snapshot_done,
        .ud = s,
    };
    s->snap = snapshot_new(&so, &e);
    if (s->snap == NULL) {
        rs_log(RS_LOG_ERROR, "Resource List: %s", e);
        return 1;
    }
    if (startup_scan(s) != 0)
        return 1;
    if (conf.dump) {
        struct dumpw_opts dwo = {
            .docs = s->docs,
            .tree = s->tree,
            .st = s->st,
            .state_path = s->state_db,
            .dir = s->dump_dir,
            .max_bytes = conf.dump_max_bytes,
            .max_files = (size_t)conf.dump_max_files,
            .interval_ms = conf.dump_interval_ms,
        };
        if (docs_url(s->docs, DUMPW_DOC, s->dump_url,
                     sizeof(s->dump_url)) != 0) {
            rs_log(RS_LOG_ERROR, "--base-url: too long");
            return 2;
        }
        s->dump = dumpw_new(&dwo, &e);
        s->ev_dump = event_new(s->base, -1, EV_PERSIST, on_dump_tick, s);
        struct timeval every = { 1, 0 };
        if (s->dump == NULL || s->ev_dump == NULL ||
            event_add(s->ev_dump, &every) != 0) {
            rs_log(RS_LOG_ERROR, "Resource Dump: %s",
                   s->dump == NULL ? e : "cannot add its timer");
            return 1;
        }
        on_dump_tick(-1, 0, s);
    }
    if (conf.hub != NULL) {
        if (!rs_url_is_http(conf.hub)) {
            rs_log(RS_LOG_ERROR, "--hub: expected an absolute http(s) URL");
            return 2;
        }
        struct rs_http_opts ho = {
            .max_conns = 8,
            .max_host_conns = 4,
            .user_agent = "rssource/" RS_VERSION " (ResourceSync Source)",
        };
        s->httpc = rs_http_new(s->base, &ho);
        if (s->httpc == NULL)
            return 1;
        struct channels_opts cho = {
            .base = s->base,
            .http = s->httpc,
            .hub = conf.hub,
            .topic = { s->topic[0], s->topic[1] },
            .token = s->have_token ? s->token : NULL,
            .on_change = on_channels_change,
            .on_settled = on_channels_settled,
            .ud = s,
        };
        s->channels = channels_new(&cho, &e);
        if (s->channels == NULL) {
            rs_log(RS_LOG_ERROR, "%s", e);
            return 2;
        }
    }
    struct push_opts po = {
        .base = s->base,
        .http = s->httpc,
        .st = s->st,
        .docs = s->docs,
        .hub = conf.hub,
        .topic = { s->topic[0], s->topic[1] },
        .token = s->have_token ? s->token : NULL,
        .batch_ms = conf.batch_ms,
        .retry_max_ms = conf.retry_max_ms,
        .max_bytes = (size_t)conf.max_notification,
        .timeout_ms = 10000,
        .on_accepted = on_accepted,
        .ud = s,
    };
    s->push = push_new(&po, &e);
    if (s->push == NULL) {
        rs_log(RS_LOG_ERROR, "push: %s", e);
        return 1;
    }
    struct serve_opts sv = {
        .guard = s->guard,
        .tree = s->tree,
        .docs = s->docs,
        .st = s->st,
        .snap = s->snap,
        .rl_refresh_ms = conf.rl_refresh_ms,
        .channels = caplist_entries,
        .channels_ud = s,
        .dump = s->dump,
        .cdump = s->cdump,
        .read_token = s->read_token[0] != '\0' ? s->read_token : NULL,
        .on_access = conf.access_log != NULL ? on_access : NULL,
        .access_ud = s,
    };
    if (access_open(s) != 0)
        return 1;
    s->serve = serve_new(&sv);
    if (s->serve == NULL)
        return 1;
    serve_hold_resourcelist(s->serve, s->catching_up);
    s->ev_rescan = event_new(s->base, -1, 0, on_rescan, s);
    arm_rescan(s);
    s->ev_tick = event_new(s->base, -1, EV_PERSIST, on_tick, s);
    struct timeval tick = rs_time_tv_ms(RSSOURCE_TICK_MS);
    if (s->ev_rescan == NULL || s->ev_tick == NULL ||
        event_add(s->ev_tick, &tick) != 0)
        return 1;
    struct rs_daemon_opts dmo = {
        .base = s->base,
        .drain_ms = conf.drain_ms,
        .drain_tick_ms = 20,
        .on_drain = on_drain,
        .drained = on_drained,
        .on_stopped = on_stopped,
        .on_reload = on_reload,
        .ud = s,
    };
    if ((s->daemon = rs_daemon_new(&dmo)) == NULL)
        return 1;
    if (s->channels != NULL) {
        /* Ask the hub before serving; serve_start says why. */
        struct timeval wait = rs_time_tv_ms(RSSOURCE_HUB_WAIT_MS);
        s->ev_hubwait = evtimer_new(s->base, on_hubwait, s);
        if (s->ev_hubwait == NULL || evconnlistener_disable(s->listener) != 0 ||
            evtimer_add(s->ev_hubwait, &wait) != 0)
            return 1;
        channels_refresh(s->channels);
    }
    kick(s);          /* what changed while down, and what was queued */
    return 0;
}

static void
teardown(struct src *s)
{
    /* Order: the server (parked requests answered) before evhttp; the
     * HTTP client before push and channels (it completes their requests
     * as cancelled); readers before the writer's state. */
    serve_free(s->serve);
    if (s->access != NULL)
        fclose(s->access);
    s->access = NULL;
    if (s->http != NULL)
        evhttp_free(s->http);
    rs_httpguard_free(s->guard);
    watch_free(s->watch);
    hashwork_free(s->hashwork);
    rs_http_free(s->httpc);
    if (s->push != NULL) {
        struct push_stats ps;
        push_get_stats(s->push, &ps);
        if (ps.latency_n > 0) {
            char p50[32], p99[32], n[32];
            snprintf(p50, sizeof(p50), "%.3f",
                     (double)push_latency_quantile(s->push, 0.50) / 1000.0);
            snprintf(p99, sizeof(p99), "%.3f",
                     (double)push_latency_quantile(s->push, 0.99) / 1000.0);
            snprintf(n, sizeof(n), "%llu", (unsigned long long)ps.latency_n);
            rs_log_kv(RS_LOG_INFO, "push latency (change detected to hub "
                      "accepted)", "p50_ms", p50, "p99_ms", p99, "changes", n,
                      NULL);
        }
    }
    push_free(s->push);
    channels_free(s->channels);
    snapshot_free(s->snap);
    dumpw_free(s->dump);          /* waits for a build under way */
    if (s->ev_dump != NULL)
        event_free(s->ev_dump);
    catalog_free(s->cat);
    changedump_free(s->cdump);    /* likewise */
    changelog_free(s->cl);
    state_free(s->st);
    docs_free(s->docs);
    tree_free(s->tree);
    rs_daemon_free(s->daemon);
    if (s->ev_tick != NULL)
        event_free(s->ev_tick);
    if (s->ev_rescan != NULL)
        event_free(s->ev_rescan);
    if (s->ev_hubwait != NULL)
        event_free(s->ev_hubwait);
    if (s->base != NULL)
        event_base_free(s->base);
    for (int k = 0; k < PUSH_LANES; k++)
        rs_free(s->topic[k]);
    rs_free(s->state_dir);
    rs_free(s->state_db);
    rs_free(s->rl_dir);
    rs_free(s->dump_dir);
    explicit_bzero(s->token, sizeof(s->token));
    explicit_bzero(s->read_token, sizeof(s->read_token));
}

int
main(int argc, char **argv)
{
    static struct src s;
    struct rs_config_info info = {
        .program = "rssource",
        .usage = "Usage: rssource --dir DIR [OPTION]...\n"
                 "Serve DIR as a ResourceSync Source: the Source Description at\n"
                 "/.well-known/resourcesync, a Capability List, Resource Lists,\n"
                 "Change Lists and the files themselves; watch DIR and push every\n"
                 "change to a hub (--hub) as a notification.\n"
                 "Exit status: 0 clean shutdown, 1 runtime failure, 2 usage.",
        .opts = options,
    };

    rs_tz_pin();
    struct rs_config *cfg = rs_config_new(&info);
    if (cfg == NULL)
        return 1;
    int rc = rs_config_parse(cfg, argc, argv, NULL);
    if (rc == RS_CONFIG_WANT_HELP || rc == RS_CONFIG_WANT_VERSION) {
        rc = rc == RS_CONFIG_WANT_HELP ? rs_config_help(cfg, stdout)
                                       : rs_config_version(cfg, stdout);
        rs_config_free(cfg);
        return rc == 0 ? 0 : 1;
    }
    if (rc != 0) {
        fprintf(stderr, "rssource: %s\nTry 'rssource --help'.\n",
                rs_config_errstr(cfg));
        rs_config_free(cfg);
        return 2;
    }
    if (conf.dir == NULL) {
        fprintf(stderr, "rssource: --dir is required\nTry 'rssource --help'.\n");
        rs_config_free(cfg);
        return 2;
    }
    if (setup_log() != 0) {
        rs_config_free(cfg);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    s.exit_code = setup(&s);
    if (s.exit_code == 0) {
        if (s.channels == NULL)
            serve_start(&s, "none");
        event_base_dispatch(s.base);
        rs_log(RS_LOG_INFO, "shutting down");
    }
    teardown(&s);
    rs_config_free(cfg);
    rs_log_shutdown();
    return s.exit_code;
}
