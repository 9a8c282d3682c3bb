/*
 * rssub.c - the subscriber program: configuration, the four commands
 * (run, sync, audit, status), the state file and the mirror opened for
 * them, the metrics listener and signals. What runs when - discovery,
 * pulls, following push, falling back - is the session's (session.c);
 * every mechanism lives in a module (docs/subscriber.md has the picture).
 *
 * Exit status: 0 success (audit: in sync), 1 failure (audit: differences;
 * sync: resources that could not be mirrored), 2 usage or configuration,
 * 3 audit or status could not complete.
 */
#include <errno.h>
#include <event2/event.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define RS_LOG_MODULE "rssub"
/* meta: the WebSub id key of this state (websub_key) */
#define RSSUB_META_WEBSUB_KEY "websub_key"
/* Files of the state looked for in the mirror at start (mirror_sample):
 * cheap, and enough to tell a mirror that is not the one the state
 * describes (missing, emptied, another directory) from one that lost a
 * file or two (the reconciles and audits find those). */
#define RSSUB_SAMPLE 16
#include "follow.h"
#include "hubsub.h"
#include "ledger.h"
#include "mirror.h"
#include "pathmap.h"
#include "rs_alloc.h"
#include "rs_config.h"
#include "rs_daemon.h"
#include "rs_http.h"
#include "rs_httpguard.h"
#include "rs_log.h"
#include "rs_metrics.h"
#include "rs_tokenfile.h"
#include "rs_url.h"
#include "session.h"
#include "statusjson.h"
#include "wsclient.h"

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
    int64_t dump_threads;
    bool strict;
    bool push;
    char *transport;
    struct rs_config_hostport callback_listen;
    char *callback_url;
    int64_t lease_ms;
    int64_t poll_ms;
    int64_t push_timeout_ms;
    int64_t pull_ms;
    int64_t reconcile_min_ms;
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
    char *source_token_file;
    char *header_file;
    char *netrc_file;
    char *cacert;
    char *client_cert;
    char *client_key;
    char *hub_token_file;
    bool insecure_token_file;
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
                   "origins of the Capability Lists' documents)"),
    RS_CONFIG_LIST("map", 0, &conf.maps, "URI_PREFIX=DIR", NULL,
                   "mirror resources under URI_PREFIX into DIR (relative to "
                   "the mirror)"),
    RS_CONFIG_STRING("source-token-file", 0, &conf.source_token_file, "FILE",
                     NULL, "send the bearer token on the first line of FILE "
                     "(mode 600) to the Source's origin (--source's scheme, "
                     "host and port), never elsewhere"),
    RS_CONFIG_STRING("header-file", 0, &conf.header_file, "FILE", NULL,
                     "send these headers (one 'Name: value' a line, mode "
                     "600) to the Source's origin, never elsewhere"),
    RS_CONFIG_STRING("netrc-file", 0, &conf.netrc_file, "FILE", NULL,
                     "basic auth for the Source's origin from this netrc "
                     "(mode 600)"),
    RS_CONFIG_STRING("cacert", 0, &conf.cacert, "FILE", NULL,
                     "check https and wss peers against the CAs in this PEM "
                     "file instead of the system's"),
    RS_CONFIG_STRING("client-cert", 0, &conf.client_cert, "FILE", NULL,
                     "TLS client certificate (PEM) for the Source's origin "
                     "and the hubs"),
    RS_CONFIG_STRING("client-key", 0, &conf.client_key, "FILE", NULL,
                     "its private key (PEM, mode 600; default: in "
                     "--client-cert)"),
    RS_CONFIG_STRING("hub-token-file", 0, &conf.hub_token_file, "FILE", NULL,
                     "send the bearer token on the first line of FILE "
                     "(mode 600) to the hubs: WebSocket upgrades and WebSub "
                     "subscribe and unsubscribe requests"),
    RS_CONFIG_BOOL("insecure-token-file", 0, &conf.insecure_token_file,
                   "false", "accept token, header, netrc and key files "
                   "readable by group or others"),
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
                       "longest fetch of one resource or document, and "
                       "longest silence of a dump package's download"),
    RS_CONFIG_SIZE("max-resource", 0, &conf.max_body, "1G", 1, INT64_MAX,
                   "largest resource mirrored"),
    RS_CONFIG_STRING("fsync", 0, &conf.fsync, "POLICY", "file",
                     "none, file (each file before it replaces the old "
                     "one; a dump's package all at once, one syncfs) or "
                     "full (and its directory)"),
    RS_CONFIG_STRING("attic", 0, &conf.attic, "DIR", NULL,
                     "move deleted resources here instead of deleting them"),
    RS_CONFIG_BOOL("dump", 0, &conf.dump, "false",
                   "make the baseline from the Source's Resource Dump, and "
                   "catch up from its Change Dump, when it offers them (then "
                   "fetch what the dumps lack)"),
    RS_CONFIG_INT("dump-threads", 0, &conf.dump_threads, "0", 0, 16,
                  "threads a dump's package is written into the mirror "
                  "with (0: one per CPU)"),
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
                       86400000, "a WebSocket channel down, or a WebSub hub "
                       "not answering or not ready, this long: poll Change "
                       "Lists (every --poll-interval) until it is back"),
    RS_CONFIG_DURATION("pull-interval", 0, &conf.pull_ms, "10m", 0, 0,
                       "with push, also pull Change Lists this often, as a "
                       "safety net (0: never)"),
    RS_CONFIG_DURATION("reconcile-min-interval", 0, &conf.reconcile_min_ms,
                       "1m", 0, 0, "run: a new Resource List announced: "
                       "reconcile, at most this often (one announced sooner "
                       "waits its turn)"),
    RS_CONFIG_DURATION("audit-interval", 0, &conf.audit_ms, "0", 0, 0,
                       "run: compare with the Resource List this often "
                       "(0: never)"),
    RS_CONFIG_BOOL("audit-fix", 0, &conf.audit_fix, "false",
                   "run: repair what a periodic audit finds"),
    RS_CONFIG_BOOL("fix", 0, &conf.fix, "false",
                   "audit: repair the differences (fetch, delete)"),
    RS_CONFIG_INT("max-delete", 0, &conf.max_delete, "0", 0, INT64_MAX,
                  "a reconcile or --fix whose Resource List leaves out more "
                  "than N mirrored resources deletes none of them, nor does "
                  "a --fix that finds more than N stray files (0: no count "
                  "limit)"),
    RS_CONFIG_INT("max-delete-share", 0, &conf.max_delete_share, "50", 0,
                  100, "...nor when it leaves out (or finds stray) more than "
                  "this percent of the mirror (0: no share limit)"),
    RS_CONFIG_BOOL("force-delete", 0, &conf.force_delete, "false",
                   "delete whatever the Resource List leaves out, and every "
                   "stray file, past --max-delete and --max-delete-share"),
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

/* The program: what it opened for its command, and the session. */
struct rssub {
    enum cmd cmd;
    const struct rs_config *cfg;
    struct event_base *base;
    struct rs_http *http;
    struct ledger *ledger;
    struct mirror *mirror;
    struct pathmap *pathmap;
    struct wsclient *ws;
    struct hubsub *hubsub;
    struct session *session;
    char *state_path;
    bool state_made;              /* open_state created it */
    bool state_unmake;            /* refused before it held anything:
                                     teardown removes it */
    struct rs_daemon *daemon;     /* signals and the drain */
    struct rs_metrics_server *mserver;  /* --metrics-listen */
    struct statusjson *sj;        /* its dashboard (/ui/, /status.json) */
    int metrics_port;
    struct rs_metrics *metrics;
    bool tty;
    int exit_code;
    bool refill;                  /* the mirror holds none of the state's
                                     files: the session fetches all */
    /* Credentials (setup_creds); wiped at teardown */
    char *source_hdrs[RS_HTTP_MAX_CRED_HEADERS + 1];  /* NULL-terminated */
    size_t nsource_hdrs;
    char hub_token[RS_TOKENFILE_MAX + 1];            /* "" none */
};

/* ------------------------------------------------------------- helpers */

static bool
list_empty(char *const *l)
{
    return l == NULL || l[0] == NULL;
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

/* ------------------------------------------------------------- metrics */

/* The metrics listener (--metrics-listen); the families are the
 * session's. */
static int
setup_metrics(struct rssub *s)
{
    char err[512];

    if (!rs_config_is_set(s->cfg, "metrics-listen"))
        return 0;
    s->mserver = rs_metrics_server_new(s->base, s->metrics,
                                       conf.metrics_listen.host,
                                       conf.metrics_listen.port,
                                       &conf.http_limits, "rssub_http", err,
                                       sizeof(err));
    if (s->mserver == NULL) {
        rs_log_kv(RS_LOG_ERROR, "cannot serve metrics", "listen",
                  "--metrics-listen", "error", err, NULL);
        return 1;
    }
    s->metrics_port = rs_metrics_server_port(s->mserver);
    if ((s->sj = statusjson_new(s->session, s->ledger)) == NULL ||
        rs_metrics_server_route(s->mserver, "/ui", statusjson_route,
                                s->sj) != 0 ||
        rs_metrics_server_route(s->mserver, "/ui/", statusjson_route,
                                s->sj) != 0 ||
        rs_metrics_server_route(s->mserver, "/status.json",
                                statusjson_route, s->sj) != 0)
        return 1;
    return 0;
}

static void
on_applied(void *ud, const char *uri, int outcome, const char *what)
{
    struct rssub *s = ud;

    if (s->sj != NULL)
        statusjson_note(s->sj, uri, outcome, what);
}

/* ---------------------------------------------------- session glue */

static void
on_session_end(void *ud, int exit_code)
{
    struct rssub *s = ud;

    s->exit_code = exit_code;
    event_base_loopexit(s->base, NULL);
}

static int
on_websub(void *ud, const struct hubsub_msg *m)
{
    struct rssub *s = ud;

    return s->session != NULL ? session_websub_delivery(s->session, m) : 1;
}

static void
on_websub_state(void *ud, const char *topic, enum hubsub_state st,
                const char *why)
{
    struct rssub *s = ud;

    if (s->session != NULL)
        session_websub_state(s->session, topic, st, why);
}

/* The drain, as rs_daemon runs it: the session's. */
static void
on_drain(void *ud)
{
    session_drain(((struct rssub *)ud)->session);
}

static bool
on_drained(void *ud)
{
    return session_drained(((struct rssub *)ud)->session);
}

static void
on_stopped(void *ud, bool timed_out)
{
    session_stop(((struct rssub *)ud)->session, timed_out);
}

/* ------------------------------------------------------- setup/teardown */

static int
setup_pathmap(struct rssub *s)
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
    /* Neither given: the session allows the origins of the Capability
     * Lists' documents once it has found them (session.h). */
    return rc;
}

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
open_state(struct rssub *s, bool readonly)
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
    s->state_made = !readonly && access(s->state_path, F_OK) != 0 &&
                    errno == ENOENT;
    s->ledger = ledger_open(s->state_path,
                            readonly ? LEDGER_READONLY
                            : conf.sync_full ? LEDGER_SYNC_FULL : 0,
                            err, sizeof(err));
    if (s->ledger == NULL) {
        rs_log_kv(RS_LOG_ERROR, "cannot open the state", "state",
                  s->state_path, "error", err, NULL);
        /* audit (with --fix too) and status promise 3 for "could not
         * complete" */
        return readonly || s->cmd == CMD_AUDIT ? 3 : 1;
    }
    if (!readonly && !ledger_checkpointing(s->ledger))
        rs_log_kv(RS_LOG_WARN, "no checkpoint thread: commits will "
                  "checkpoint", "state", s->state_path, NULL);
    return 0;
}

static int
check_source(struct rssub *s, bool readonly)
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

/* A state written before rssub took a Source's times past our clock as of
 * now may hold such times as marks: every real change after them looked
 * older and was skipped. Once per state they are cleared, and the next
 * pull reconciles with the Resource List. */
static int
clear_future(struct rssub *s)
{
    int64_t n = 0;
    char c[24];

    if (ledger_clear_future(s->ledger, rs_time_now() + RS_TIME_SKEW_US,
                            FOLLOW_POS_SOURCE, &n) != 0) {
        rs_log_kv(RS_LOG_ERROR, "cannot read the state", "error",
                  ledger_errstr(s->ledger), NULL);
        return 1;
    }
    if (n == 0)
        return 0;
    snprintf(c, sizeof(c), "%lld", (long long)n);
    rs_log_kv(RS_LOG_WARN, "the state held change times in the future (a "
              "Source's clock, taken as they were by an earlier rssub): "
              "cleared; reconciling with the resource list", "count", c,
              NULL);
    return 0;
}

/* Say it in the state too, for `rssub status` (last_error): a refusal at
 * start leaves no daemon to ask. Best effort: the log has it anyway. */
static void
note_last_error(struct rssub *s, const char *what)
{
    char now[RS_TIME_BUFSZ];

    rs_time_format(rs_time_now(), now);
    if (ledger_meta_set(s->ledger, "last_error", what) != 0 ||
        ledger_meta_set(s->ledger, "last_error_at", now) != 0)
        rs_log_kv(RS_LOG_WARN, "cannot record the error in the state",
                  "error", ledger_errstr(s->ledger), NULL);
}

/* The first RSSUB_SAMPLE live files the state lists (uri order), and how
 * many of them the mirror has (when s->mirror is open). */
struct sample {
    struct rssub *s;
    size_t listed, present;
};

static int
on_sample_row(void *ud, const struct ledger_res *r)
{
    struct sample *sa = ud;
    struct stat st;

    if (r->path == NULL || r->path[0] == '\0')
        return 0;
    sa->listed++;
    if (sa->s->mirror != NULL &&
        mirror_stat(sa->s->mirror, r->path, &st) == 0)
        sa->present++;
    return sa->listed >= RSSUB_SAMPLE ? 1 : 0;
}

static int
mirror_sample(struct rssub *s, struct sample *sa)
{
    *sa = (struct sample){ .s = s };
    if (ledger_res_each(s->ledger, false, -1, on_sample_row, sa) < 0) {
        rs_log_kv(RS_LOG_ERROR, "cannot read the state", "error",
                  ledger_errstr(s->ledger), NULL);
        return -1;
    }
    return 0;
}

/*
 * The mirror directory, opened for the command, and judged against the
 * state (docs/subscriber.md, "The mirror and its state"):
 *  - missing while the state lists files: refused (1, audit 3), never made
 *    afresh: the likely cause is a file system that did not mount, or a
 *    directory moved, and filling the one below would hide it (rssource
 *    refuses an empty --dir whose state lists files, likewise);
 *  - present but holding none of a sample of them: an error, and the
 *    session fetches everything again (s->refill) instead of calling an
 *    empty mirror synced;
 *  - a writer (run, sync, audit --fix) locks it: one writer per mirror, as
 *    per state; two rssubs sharing a mirror would each take the other's
 *    files for strays and delete them.
 */
static int
open_mirror(struct rssub *s, struct mirror_opts *mo, bool readonly)
{
    int fail = s->cmd == CMD_AUDIT ? 3 : 1;
    char err[512], msg[PATH_MAX + 200];
    struct sample sa;
    struct stat st;

    if (mirror_sample(s, &sa) != 0)
        return fail;
    mo->no_create = sa.listed > 0;
    if (sa.listed > 0 && lstat(conf.mirror, &st) != 0 && errno == ENOENT) {
        rs_log_kv(RS_LOG_ERROR, "the mirror directory is missing, and the "
                  "state lists files in it: refusing to start with an empty "
                  "one (a file system not mounted? the directory moved?); "
                  "mount it or move it back, or create it empty to have "
                  "everything fetched again", "mirror", conf.mirror,
                  "state", s->state_path, NULL);
        snprintf(msg, sizeof(msg), "the mirror directory %s is missing "
                 "(refused to start)", conf.mirror);
        if (!readonly)
            note_last_error(s, msg);
        return fail;
    }
    s->mirror = mirror_open(conf.mirror, mo, err, sizeof(err));
    if (s->mirror == NULL) {
        rs_log_kv(RS_LOG_ERROR, "cannot open the mirror", "mirror",
                  conf.mirror, "error", err, NULL);
        s->state_unmake = s->state_made;
        return fail;
    }
    long holder = 0;
    int rc = readonly ? 0 : mirror_lock(s->mirror, &holder);
    if (rc != 0) {
        char pid[24] = "-";
        if (holder > 0)
            snprintf(pid, sizeof(pid), "%ld", holder);
        rs_log_kv(RS_LOG_ERROR, rc == RS_ESTATE
                  ? "the mirror is in use by another rssub (one writer per "
                    "mirror: give each instance a mirror of its own)"
                  : "cannot lock the mirror", "mirror",
                  mirror_root(s->mirror), "pid", pid, "error",
                  mirror_errstr(s->mirror), NULL);
        s->state_unmake = s->state_made;
        return fail;
    }
    if (sa.listed == 0 || mirror_sample(s, &sa) != 0 || sa.present > 0)
        return 0;
    char n[24];
    snprintf(n, sizeof(n), "%zu", sa.listed);
    rs_log_kv(RS_LOG_ERROR, readonly
              ? "the mirror holds none of the files the state lists "
                "(emptied, or another directory)"
              : "the mirror holds none of the files the state lists "
                "(emptied, or another directory): fetching everything again",
              "mirror", mirror_root(s->mirror), "sampled", n, NULL);
    if (!readonly) {
        snprintf(msg, sizeof(msg), "the mirror %s held none of the files "
                 "the state lists: fetched everything again",
                 mirror_root(s->mirror));
        note_last_error(s, msg);
    }
    s->refill = true;
    return 0;
}

static enum session_transport
transport_from(const char *t)
{
    return strcmp(t, "websocket") == 0 ? TRANSPORT_WEBSOCKET
         : strcmp(t, "websub") == 0 ? TRANSPORT_WEBSUB
         : strcmp(t, "poll") == 0 ? TRANSPORT_POLL : TRANSPORT_AUTO;
}

static int
check_transport(const struct rssub *s)
{
    if (strcmp(conf.transport, "auto") != 0 &&
        strcmp(conf.transport, "websocket") != 0 &&
        strcmp(conf.transport, "websub") != 0 &&
        strcmp(conf.transport, "poll") != 0) {
        rs_log_kv(RS_LOG_ERROR, "--transport is auto, websocket, websub or "
                  "poll", "transport", conf.transport, NULL);
        return 2;
    }
    if (strcmp(conf.transport, "websub") == 0 &&
        !rs_config_is_set(s->cfg, "callback-listen")) {
        rs_log_kv(RS_LOG_ERROR, "--transport websub needs --callback-listen",
                  NULL);
        return 2;
    }
    return 0;
}

/* The WebSub id key (hubsub_opts.id_key) of this state, made and kept
 * at its first use: a restart subscribes with the callback and secret it
 * had, so the hub's subscription is the same one (no stale one left
 * behind, none counted twice against the hub's caps). */
static int
websub_key(struct rssub *s, char *key, size_t keysz)
{
    char *val = NULL;
    int rc = ledger_meta_get(s->ledger, RSSUB_META_WEBSUB_KEY, &val);

    if (rc == 0 && strlen(val) == HUBSUB_KEY_HEX) {
        snprintf(key, keysz, "%s", val);
        explicit_bzero(val, strlen(val));
        rs_free(val);
        return 0;
    }
    if (val != NULL)
        explicit_bzero(val, strlen(val));
    rs_free(val);
    if (rc != 0 && rc != RS_ENOTFOUND)
        return rc;
    /* none yet, or not one of ours: a new one (the hub's subscriptions
     * of the old callbacks, if any, are answered 410 and dropped) */
    if ((rc = hubsub_key_new(key, keysz)) != 0)
        return rc;
    return ledger_meta_set(s->ledger, RSSUB_META_WEBSUB_KEY, key);
}

/* How often the hub is probed while following by WebSub: three times a
 * --push-timeout, so a hub that stops answering is told within about
 * that (1 s to a minute apart). */
static unsigned
websub_probe_ms(void)
{
    int64_t ms = conf.push_timeout_ms / 3;

    return (unsigned)(ms < 1000 ? 1000 : ms > 60000 ? 60000 : ms);
}

/* run with push: the WebSocket client and, with --callback-listen, the
 * WebSub callback server. */
static int
setup_push(struct rssub *s)
{
    struct wsclient_opts wo = {
        .base = s->base,
        .ca_file = conf.cacert,
        .client_cert = conf.client_cert,
        .client_key = conf.client_key,
        .bearer = s->hub_token[0] != '\0' ? s->hub_token : NULL,
    };
    char err[512];

    s->ws = wsclient_new(&wo, err, sizeof(err));
    if (s->ws == NULL) {
        rs_log_kv(RS_LOG_ERROR, "cannot start the websocket client", "error",
                  err, NULL);
        return 1;
    }
    if (!rs_config_is_set(s->cfg, "callback-listen"))
        return 0;
    char key[HUBSUB_KEY_HEX + 1];
    int rc = websub_key(s, key, sizeof(key));
    if (rc != 0) {
        rs_log_kv(RS_LOG_ERROR, "cannot keep the websub callback id in the "
                  "state", "error", rs_strerror(rc), "state_error",
                  ledger_errstr(s->ledger), NULL);
        return 1;
    }
    struct hubsub_opts hso = {
        .base = s->base,
        .http = s->http,
        .listen_host = conf.callback_listen.host[0]
                       ? conf.callback_listen.host : "0.0.0.0",
        .listen_port = conf.callback_listen.port,
        .callback_base = conf.callback_url,
        .lease_seconds = (unsigned)(conf.lease_ms / 1000),
        .http_limits = &conf.http_limits,
        .metrics = s->metrics,
        .on_notification = on_websub,
        .on_state = on_websub_state,
        .ud = s,
        .hub_token = s->hub_token[0] != '\0' ? s->hub_token : NULL,
        .client_cert = conf.client_cert,
        .client_key = conf.client_key,
        .id_key = key,
        .probe_ms = websub_probe_ms(),
        .probe_grace_ms = (unsigned)conf.push_timeout_ms,
    };
    s->hubsub = hubsub_new(&hso, err, sizeof(err));
    explicit_bzero(key, sizeof(key));
    if (s->hubsub == NULL) {
        rs_log_kv(RS_LOG_ERROR, "cannot receive websub callbacks", "error",
                  err, NULL);
        return 1;
    }
    return 0;
}

static int
setup_session(struct rssub *s, bool readonly)
{
    struct session_opts so = {
        .cmd = s->cmd == CMD_RUN ? SESSION_RUN
             : s->cmd == CMD_SYNC ? SESSION_SYNC : SESSION_AUDIT,
        .c = {
            .source = conf.source,
            .sets = conf.sets,
            .channels = conf.channels,
            .push = conf.push,
            .transport = transport_from(conf.transport),
            .dump = conf.dump,
            .dump_threads = (unsigned)conf.dump_threads,
            .strict = conf.strict,
            .deep = conf.deep,
            .fix = conf.fix,
            .readonly = readonly,
            .poll_ms = conf.poll_ms,
            .push_timeout_ms = conf.push_timeout_ms,
            .pull_ms = conf.pull_ms,
            .reconcile_min_ms = conf.reconcile_min_ms,
            .audit_ms = conf.audit_ms,
            .audit_fix = conf.audit_fix,
            .max_delete = (uint64_t)conf.max_delete,
            .max_delete_share = (unsigned)conf.max_delete_share,
            .force_delete = conf.force_delete,
            .parallel = (unsigned)conf.parallel,
            .retries = (unsigned)conf.retries,
            .timeout_ms = (unsigned)conf.timeout_ms,
            .rate = (double)conf.rate,
            .max_body = conf.max_body,
            .ready_file = conf.ready_file,
            .state_path = s->state_path,
            .progress = s->tty && conf.progress,
            .refill = s->refill,
        },
        .base = s->base,
        .http = s->http,
        .ledger = s->ledger,
        .mirror = s->mirror,
        .pathmap = s->pathmap,
        .default_prefixes = list_empty(conf.prefixes) && list_empty(conf.maps)
                            ? s->pathmap : NULL,
        .ws = s->ws,
        .hubsub = s->hubsub,
        .metrics = s->metrics,
        .on_end = on_session_end,
        .on_applied = on_applied,
        .ud = s,
    };
    char err[512];

    s->session = session_new(&so, err, sizeof(err));
    if (s->session == NULL) {
        rs_log_kv(RS_LOG_ERROR, "cannot start", "error", err, NULL);
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------- credentials */

/* Headers of ours or of the transport's: a header file cannot set them. */
static bool
header_owned(const char *name, size_t n)
{
    static const char *const owned[] = {
        "host", "content-length", "transfer-encoding", "connection",
        "expect", "upgrade", "te", "trailer", "keep-alive",
        "proxy-connection", "if-none-match", "if-modified-since", "range",
        "accept-encoding",
    };
    for (size_t i = 0; i < sizeof(owned) / sizeof(owned[0]); i++)
        if (strlen(owned[i]) == n && strncasecmp(owned[i], name, n) == 0)
            return true;
    return false;
}

static bool
is_tchar(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static int
add_source_header(struct rssub *s, const char *line, size_t len)
{
    if (s->nsource_hdrs >= RS_HTTP_MAX_CRED_HEADERS)
        return RS_ETOOBIG;
    if ((s->source_hdrs[s->nsource_hdrs] = rs_malloc(len + 1)) == NULL)
        return RS_ENOMEM;
    memcpy(s->source_hdrs[s->nsource_hdrs], line, len);
    s->source_hdrs[s->nsource_hdrs++][len] = '\0';
    return 0;
}

/* --header-file: "Name: value" lines; blank lines and # comments skipped,
 * a CRLF line end taken as LF. A CR anywhere else, a name that is not a
 * token, a header we own (Host, Content-Length...) are refused, naming
 * the line. */
static int
read_header_file(struct rssub *s, bool have_auth)
{
    char err[512], *text = NULL, *line, *next;
    unsigned lineno = 0;
    int rc;

    rc = rs_tokenfile_read_text(conf.header_file, conf.insecure_token_file,
                                64 * 1024, &text, NULL, err, sizeof(err));
    if (rc != 0) {
        rs_log_kv(RS_LOG_ERROR, "cannot use --header-file", "error", err,
                  NULL);
        return 2;
    }
    for (line = text; line != NULL && rc == 0; line = next) {
        size_t len, n = 0;
        const char *why = NULL;
        char ln[16];

        lineno++;
        next = strchr(line, '\n');
        len = next != NULL ? (size_t)(next - line) : strlen(line);
        if (next != NULL)
            next++;
        if (len > 0 && line[len - 1] == '\r')
            len--;
        while (n < len && is_tchar(line[n]))
            n++;
        if (len == 0 || line[0] == '#')
            continue;
        if (memchr(line, '\r', len) != NULL)
            why = "a CR inside a line";
        else if (n == 0 || n >= len || line[n] != ':')
            why = "not 'Name: value'";
        else if (header_owned(line, n))
            why = "a header rssub sets itself";
        else if (have_auth && n == 13 &&
                 strncasecmp(line, "authorization", 13) == 0)
            why = "Authorization, and --source-token-file gives one";
        else if (add_source_header(s, line, len) != 0)
            why = "too many headers (32 at most)";
        if (why != NULL) {
            snprintf(ln, sizeof(ln), "%u", lineno);
            rs_log_kv(RS_LOG_ERROR, "cannot use --header-file", "file",
                      conf.header_file, "line", ln, "error", why, NULL);
            rc = 2;
        }
    }
    rs_tokenfile_text_free(text);
    return rc;
}

static int
check_secret_file(const char *opt, const char *path)
{
    char err[512];

    if (path == NULL ||
        rs_tokenfile_check(path, conf.insecure_token_file, err,
                           sizeof(err)) == 0)
        return 0;
    rs_log_kv(RS_LOG_ERROR, "cannot use the file", "option", opt, "error",
              err, NULL);
    return 2;
}

/* The credentials of the options, checked before anything connects: the
 * Source's go to its origin only (rs_http_cred_add; an entry even without
 * any, so that a 401/403 from it is told to the session), the hub token
 * to the WebSocket client and hubsub. */
static int
setup_creds(struct rssub *s)
{
    char err[512];
    int rc;

    if (conf.source_token_file != NULL) {
        char tok[RS_TOKENFILE_MAX + 1], hdr[RS_TOKENFILE_MAX + 32];
        rc = rs_tokenfile_read(conf.source_token_file,
                               conf.insecure_token_file, tok, sizeof(tok),
                               err, sizeof(err));
        if (rc != 0) {
            rs_log_kv(RS_LOG_ERROR, "cannot use --source-token-file",
                      "error", err, NULL);
            return 2;
        }
        snprintf(hdr, sizeof(hdr), "Authorization: Bearer %s", tok);
        rc = add_source_header(s, hdr, strlen(hdr));
        explicit_bzero(tok, sizeof(tok));
        explicit_bzero(hdr, sizeof(hdr));
        if (rc != 0)
            return 1;
    }
    if (conf.header_file != NULL &&
        (rc = read_header_file(s, conf.source_token_file != NULL)) != 0)
        return rc;
    if (conf.hub_token_file != NULL &&
        rs_tokenfile_read(conf.hub_token_file, conf.insecure_token_file,
                          s->hub_token, sizeof(s->hub_token), err,
                          sizeof(err)) != 0) {
        rs_log_kv(RS_LOG_ERROR, "cannot use --hub-token-file", "error", err,
                  NULL);
        return 2;
    }
    if (conf.client_key != NULL && conf.client_cert == NULL) {
        rs_log_kv(RS_LOG_ERROR, "--client-key needs --client-cert", NULL);
        return 2;
    }
    if ((rc = check_secret_file("--netrc-file", conf.netrc_file)) != 0 ||
        (rc = check_secret_file(conf.client_key != NULL ? "--client-key"
                                : "--client-cert", conf.client_key != NULL
                                ? conf.client_key : conf.client_cert)) != 0)
        return rc;
    const char *readable[] = { conf.cacert, conf.client_cert };
    for (size_t i = 0; i < 2; i++) {
        if (readable[i] != NULL && access(readable[i], R_OK) != 0) {
            rs_log_kv(RS_LOG_ERROR, "cannot read the file", "file",
                      readable[i], "error", strerror(errno), NULL);
            return 2;
        }
    }
    return 0;
}

static void
on_http_refused(void *ud, const char *realm, const char *url, long status)
{
    struct rssub *s = ud;

    if (s->session != NULL && strcmp(realm, "source") == 0)
        session_source_refused(s->session, url, status);
}

static int
add_source_cred(struct rssub *s)
{
    struct rs_http_cred cr = {
        .origin = conf.source,
        .realm = "source",
        .headers = (const char *const *)s->source_hdrs,
        .netrc_file = conf.netrc_file,
        .client_cert = conf.client_cert,
        .client_key = conf.client_key,
    };
    int rc = rs_http_cred_add(s->http, &cr);

    if (rc != 0) {
        rs_log_kv(RS_LOG_ERROR, "bad --source", "source", conf.source,
                  "error", rs_strerror(rc), NULL);
        return rc == RS_ENOMEM ? 1 : 2;
    }
    return 0;
}

static int
setup(struct rssub *s)
{
    struct mirror_opts mo = { .attic = conf.attic };
    struct rs_http_opts ho = {
        .max_host_conns = (unsigned)conf.host_conns,
        .max_conns = (unsigned)(conf.parallel + 16),
        .ca_file = conf.cacert,
        .on_refused = on_http_refused,
        .refused_ud = s,
    };
    size_t swept = 0;
    int rc;

    if (mirror_fsync_from(conf.fsync, &mo.fsync) != 0) {
        rs_log_kv(RS_LOG_ERROR, "--fsync is none, file or full", "fsync",
                  conf.fsync, NULL);
        return 2;
    }
    if ((rc = check_transport(s)) != 0)
        return rc;
    if ((rc = setup_creds(s)) != 0)
        return rc;
    if ((s->base = rs_daemon_base_new()) == NULL)
        return 1;
    /* A report-only audit reads the state beside a running daemon and
     * changes nothing, in the state or the mirror. */
    bool readonly = s->cmd == CMD_AUDIT && !conf.fix;
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
        if ((rc = clear_future(s)) != 0)
            return rc;
    }
    if ((rc = open_mirror(s, &mo, readonly)) != 0)
        return rc;
    if (!readonly && mirror_sweep_temps(s->mirror, &swept) == 0 && swept > 0) {
        char n[24];
        snprintf(n, sizeof(n), "%zu", swept);
        rs_log_kv(RS_LOG_INFO, "removed what an interrupted run left in "
                  "the mirror (temporary files, a dump's stage)", "count", n,
                  NULL);
    }
    if ((rc = setup_pathmap(s)) != 0)
        return rc == RS_ENOMEM ? 1 : 2;
    if ((s->http = rs_http_new(s->base, &ho)) == NULL ||
        (s->metrics = rs_metrics_new()) == NULL)
        return 1;
    if ((rc = add_source_cred(s)) != 0)
        return rc;
    if (s->cmd == CMD_RUN && conf.push && (rc = setup_push(s)) != 0)
        return rc;
    if ((rc = setup_session(s, readonly)) != 0)
        return rc;
    /* An audit serves no metrics: it runs beside the daemon (report-only)
     * and would find the daemon's --metrics-listen port taken, the two
     * sharing one config file; and a one-shot's numbers are its output
     * and exit status. */
    if (s->cmd != CMD_AUDIT && setup_metrics(s) != 0)
        return 1;
    session_set_metrics_port(s->session, s->metrics_port);
    struct rs_daemon_opts dmo = {
        .base = s->base,
        .drain_ms = conf.drain_ms,
        .on_drain = on_drain,
        .drained = on_drained,
        .on_stopped = on_stopped,
        .ud = s,
    };
    if ((s->daemon = rs_daemon_new(&dmo)) == NULL)
        return 1;
    if ((rc = session_start(s->session)) != 0) {
        rs_log_kv(RS_LOG_ERROR, "bad --source", "source", conf.source,
                  "error", rs_strerror(rc), NULL);
        return 2;
    }
    return 0;
}

/* A state this run created for a mirror it then refused holds nothing
 * of it: left, it would sit beside the wrong directory. */
static void
unmake_state(const char *path)
{
    static const char *const ext[] = { "", "-wal", "-shm", ".lock" };
    char p[PATH_MAX];

    for (size_t i = 0; i < sizeof(ext) / sizeof(ext[0]); i++)
        if (snprintf(p, sizeof(p), "%s%s", path, ext[i]) < (int)sizeof(p))
            (void)unlink(p);
}

static void
teardown(struct rssub *s)
{
    /* The session first (its objects hold requests on the client and
     * subscriptions on hubsub), then what it used. */
    session_free(s->session);
    hubsub_free(s->hubsub);
    wsclient_free(s->ws);
    rs_http_free(s->http);          /* canceled jobs end here */
    pathmap_free(s->pathmap);
    mirror_close(s->mirror);
    ledger_close(s->ledger);
    if (s->state_unmake)
        unmake_state(s->state_path);
    rs_metrics_server_free(s->mserver);
    statusjson_free(s->sj);         /* the listener's routes used it */
    rs_metrics_free(s->metrics);
    rs_daemon_free(s->daemon);
    rs_free(s->state_path);
    if (s->base != NULL)
        event_base_free(s->base);
    for (size_t i = 0; i < s->nsource_hdrs; i++) {
        explicit_bzero(s->source_hdrs[i], strlen(s->source_hdrs[i]));
        rs_free(s->source_hdrs[i]);
    }
    explicit_bzero(s->hub_token, sizeof(s->hub_token));
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
cmd_status(struct rssub *s)
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
    /* How each list is followed, as the daemon last recorded it: the
     * positions alone said nothing of a WebSub mirror (its deliveries do
     * not move #source) nor of a push that stopped working. */
    long pid = ledger_writer_pid(s->state_path);
    if (pid > 0)
        printf("daemon running pid=%ld\n", pid);
    else
        printf("daemon stopped\n");
    if (ledger_meta_get(s->ledger, SESSION_META_FOLLOW, &val) == 0) {
        const char *line = val;
        while (*line != '\0') {
            size_t n = strcspn(line, "\n");
            printf("follow %.*s%s\n", (int)n, line,
                   pid > 0 ? "" : " (when it stopped)");
            line += n + (line[n] == '\n');
        }
    }
    rs_free(val);
    val = NULL;
    if (ledger_meta_get(s->ledger, "last_error", &val) == 0) {
        char *at = NULL;
        if (ledger_meta_get(s->ledger, "last_error_at", &at) != 0)
            at = NULL;
        printf("last_error %s %s\n", at != NULL ? at : "-", val);
        rs_free(at);
    }
    rs_free(val);
    if (failed > 0 && session_log_failed(s->ledger) != 0)
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
    static struct rssub s;
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

    rs_tz_pin();
    struct rs_config *cfg;
    int rc;

    if (argc >= 2 && argv[1][0] != '-' && parse_cmd(argv[1], &s.cmd) != 0) {
        fprintf(stderr, "rssub: unknown command '%s'\nTry 'rssub --help'.\n",
                argv[1]);
        return 2;
    }
    if ((cfg = rs_config_new(&info)) == NULL)
        return 1;
    s.cfg = cfg;
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
    } else if (s.cmd == CMD_AUDIT && s.exit_code == 1) {
        /* audit's 1 means differences: a setup that failed is "could not
         * complete" */
        s.exit_code = 3;
    }
    teardown(&s);
    rs_config_free(cfg);
    rs_log_shutdown();
    return s.exit_code;
}
