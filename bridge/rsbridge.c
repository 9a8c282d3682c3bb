/*
 * rsbridge.c - the bridge daemon: push for pull-only ResourceSync Sources.
 * Configuration (options, [source NAME] sections, the Sources' names),
 * start-up (the state, the HTTP listener behind the guard, the two HTTP
 * clients, one poller per Source, the metrics), the ready file, signals
 * and the drain. Every decision lives in a module; this file wires them
 * (docs/bridge.md has the whole picture).
 *
 * Exit status: 0 clean shutdown, 1 runtime failure, 2 bad configuration or
 * command line.
 */
#include <errno.h>
#include <event2/event.h>
#include <event2/http.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RS_LOG_MODULE "rsbridge"
#include "poller.h"
#include "rs_alloc.h"
#include "rs_config.h"
#include "rs_daemon.h"
#include "rs_fnv.h"
#include "rs_http.h"
#include "rs_httpguard.h"
#include "rs_log.h"
#include "rs_metrics.h"
#include "rs_sock.h"
#include "rs_tokenfile.h"
#include "rs_url.h"
#include "site.h"
#include "store.h"

#define BRIDGE_MAX_SOURCES 10000
#define BRIDGE_NAME_MAX 200
#define BRIDGE_URL_MAX 4096

static struct {
    char **sources;
    char *hub;
    char *token_file;
    bool insecure_token_file;
    struct rs_config_hostport listen;
    char *public_url;
    int64_t interval_ms;
    int64_t idle_interval_ms;
    char *state;
    char *ready_file;
    struct rs_config_hostport metrics_listen;
    char *contact;
    int64_t timeout_ms;
    int64_t batch_ms;
    int64_t retry_max_ms;
    uint64_t max_notification;
    int64_t drain_ms;
    char *log_level;
    char *log_format;
    char *log_file;
    struct rs_httpguard_limits http_limits;
} conf;

static const struct rs_config_opt options[] = {
    RS_CONFIG_LIST("source", 0, &conf.sources, "URL", NULL,
                   "a pull-only Source to bridge: any URL discovery takes "
                   "(a site, its Source Description, a Capability List); "
                   "also [source NAME] sections in the config file"),
    RS_CONFIG_STRING("hub", 0, &conf.hub, "URL", NULL,
                     "the hub's publish URL, e.g. https://hub.example/hub "
                     "(required)"),
    RS_CONFIG_STRING("token-file", 0, &conf.token_file, "FILE", NULL,
                     "bearer token for the hub: the first line of FILE "
                     "(mode 600)"),
    RS_CONFIG_BOOL("insecure-token-file", 0, &conf.insecure_token_file,
                   "false", "accept a token file readable by group or others"),
    RS_CONFIG_HOSTPORT("listen", 'l', &conf.listen, "127.0.0.1:8090",
                       "HTTP address of the bridged documents, /sources and "
                       "/healthz"),
    RS_HTTPGUARD_CONFIG(&conf.http_limits, "60s"),
    RS_CONFIG_STRING("public-url", 0, &conf.public_url, "URL", NULL,
                     "the URL subscribers reach the bridge at (default "
                     "http://LISTEN; 127.0.0.1 for an any-address listen)"),
    RS_CONFIG_DURATION("interval", 0, &conf.interval_ms, "30s", 100,
                       86400000, "the shortest time between two polls of a "
                       "Source, and between two requests of one document"),
    RS_CONFIG_DURATION("idle-interval", 0, &conf.idle_interval_ms, "0", 0,
                       86400000, "polls slow down, doubling, to this while "
                       "a Source does not change (0: never)"),
    RS_CONFIG_STRING("state", 's', &conf.state, "DIR", NULL,
                     "state directory: bridge.db (SQLite) (required)"),
    RS_CONFIG_STRING("ready-file", 0, &conf.ready_file, "PATH", NULL,
                     "write {\"http\":PORT} here once every Source was read "
                     "once"),
    RS_CONFIG_HOSTPORT("metrics-listen", 0, &conf.metrics_listen, NULL,
                       "serve Prometheus metrics at http://HOST:PORT/metrics"),
    RS_CONFIG_STRING("contact", 0, &conf.contact, "TEXT", NULL,
                     "the operator's contact, in the User-Agent the Sources "
                     "see: rsbridge/VERSION (+TEXT)"),
    RS_CONFIG_DURATION("timeout", 0, &conf.timeout_ms, "60s", 1000, 3600000,
                       "one request to a Source"),
    RS_CONFIG_DURATION("batch", 0, &conf.batch_ms, "5ms", 0, 60000,
                       "changes within this window go out as one "
                       "notification"),
    RS_CONFIG_DURATION("retry-max", 0, &conf.retry_max_ms, "30s", 100,
                       3600000, "longest pause between retries to the hub"),
    RS_CONFIG_SIZE("max-notification", 0, &conf.max_notification, "4M", 4096,
                   52428800, "largest notification sent (stay under the "
                   "hub's --max-body)"),
    RS_CONFIG_DURATION("drain-time", 0, &conf.drain_ms, "5s", 0, 600000,
                       "on SIGTERM, how long to wait for notifications in "
                       "flight"),
    RS_CONFIG_LOG(&conf.log_level, &conf.log_format, &conf.log_file),
    RS_CONFIG_END,
};

/* A Source as configured: from --source (named by its host) or from a
 * [source NAME] section. */
struct src_conf {
    char name[BRIDGE_NAME_MAX + 1];
    char *url;
    int64_t interval_ms;          /* 0: --interval */
    bool from_section;
};

static struct src_conf *sconfs;
static size_t nsconfs, capsconfs;

struct bridge {
    struct event_base *base;
    struct evhttp *http;
    struct rs_httpguard *guard;
    int http_port;
    char *public_url;             /* without the final '/' */
    struct store *st;
    struct rs_http *src_http, *hub_http;
    struct poller **pollers;
    size_t npollers, nready;
    struct site *site;
    struct rs_daemon *daemon;
    struct rs_metrics *metrics;
    struct rs_metrics_server *mserver;
    int metrics_port;
    struct poller_metrics pm;
    char token[RS_TOKENFILE_MAX + 1];
    bool have_token;
    bool ready;
    int exit_code;
};

/* ------------------------------------------------------------ sections */

static struct src_conf *
sconf_add(void)
{
    if (nsconfs == BRIDGE_MAX_SOURCES)
        return NULL;
    if (nsconfs == capsconfs) {
        size_t ncap = capsconfs ? capsconfs * 2 : 8;
        struct src_conf *t = rs_realloc(sconfs, ncap * sizeof(*t));
        if (t == NULL)
            return NULL;
        sconfs = t;
        capsconfs = ncap;
    }
    struct src_conf *c = &sconfs[nsconfs++];
    memset(c, 0, sizeof(*c));
    return c;
}

static void
sconfs_free(void)
{
    for (size_t i = 0; i < nsconfs; i++)
        rs_free(sconfs[i].url);
    rs_free(sconfs);
    sconfs = NULL;
    nsconfs = capsconfs = 0;
}

static bool
name_ok(const char *name)
{
    size_t n = strlen(name);
    return n > 0 && n <= BRIDGE_NAME_MAX &&
           strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        "0123456789._-") == n &&
           strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

/* A Source URL with userinfo (user:password@host, rs_url_has_userinfo)
 * would be published as the bridged Capability List's rel="via", shown in
 * /sources and logged, and libcurl sends its Basic credentials only to the
 * first host: the bridge refuses it. */
#define USERINFO_REFUSED "credentials in a Source's URL (user:password@) " \
    "are not supported: they would be published to every mirror, and " \
    "the bridge has no option for a Source's credentials"

/* A section's duration: NUMBER with ms, s, m, h or d (as the options). */
static bool
parse_duration(const char *s, int64_t *ms)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || v < 0 || *s == '-' || *s == '+')
        return false;
    int64_t mult = strcmp(end, "ms") == 0 ? 1
                 : strcmp(end, "s") == 0  ? 1000
                 : strcmp(end, "m") == 0  ? 60000
                 : strcmp(end, "h") == 0  ? 3600000
                 : strcmp(end, "d") == 0  ? 86400000 : 0;
    if (mult == 0 || v > 86400000LL / mult)
        return false;
    *ms = (int64_t)v * mult;
    return true;
}

static const char *
on_section(void *ud, const char *type, const char *name, const char *key,
           const char *value, int line)
{
    (void)ud;
    (void)line;
    if (strcmp(type, "source") != 0)
        return "unknown section (expected [source NAME])";
    if (!name_ok(name))
        return "a Source's NAME is 1-200 of [A-Za-z0-9._-]";
    struct src_conf *c = NULL;
    for (size_t i = 0; i < nsconfs; i++)
        if (strcmp(sconfs[i].name, name) == 0)
            c = &sconfs[i];
    if (c == NULL) {
        if ((c = sconf_add()) == NULL)
            return "too many Sources";
        snprintf(c->name, sizeof(c->name), "%s", name);
        c->from_section = true;
    }
    if (strcmp(key, "url") == 0) {
        if (!rs_url_is_http(value))
            return "expected an absolute http(s) URL";
        if (rs_url_has_userinfo(value))
            return USERINFO_REFUSED;
        if (c->url != NULL)
            return "url given twice";
        if ((c->url = rs_strdup(value)) == NULL)
            return "out of memory";
    } else if (strcmp(key, "interval") == 0) {
        if (!parse_duration(value, &c->interval_ms) || c->interval_ms < 100)
            return "expected a duration of 100ms or more, such as 30s";
    } else {
        return "unknown key (expected url or interval)";
    }
    return NULL;
}

/* The name of a Source given by URL: its host, with _PORT when the port is
 * not the scheme's default; what is not [A-Za-z0-9._-] becomes '_'. */
static int
auto_name(const char *url, char *out, size_t len)
{
    char *origin = NULL;
    if (rs_url_origin(url, &origin) != 0)
        return RS_EINVAL;
    const char *h = strstr(origin, "://");
    bool https = strncmp(origin, "https", 5) == 0;
    h = h != NULL ? h + 3 : origin;
    char host[BRIDGE_NAME_MAX + 1];
    snprintf(host, sizeof(host), "%s", h);
    rs_free(origin);
    char *colon = strrchr(host, ':');
    if (colon != NULL && strchr(colon, ']') == NULL) {
        const char *port = colon + 1;
        *colon = '\0';
        if (strcmp(port, https ? "443" : "80") != 0) {
            size_t n = strlen(host);
            snprintf(host + n, sizeof(host) - n, "_%s", port);
        }
    }
    for (char *q = host; *q != '\0'; q++)
        if (strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                   "0123456789._-", *q) == NULL)
            *q = '_';
    snprintf(out, len, "%s", host);
    return name_ok(out) ? 0 : RS_EINVAL;
}

/* The Sources: the sections' first, then --source in order. A --source's
 * name is given once the state is open (sources_name): here it holds the
 * base, its host. */
static int
sources_build(void)
{
    size_t nsec = nsconfs;
    for (size_t i = 0; i < nsec; i++) {
        if (sconfs[i].url == NULL) {
            fprintf(stderr, "rsbridge: [source %s] has no url\n",
                    sconfs[i].name);
            return 2;
        }
    }
    for (size_t i = 0; conf.sources != NULL && conf.sources[i] != NULL; i++) {
        const char *url = conf.sources[i];
        char base[BRIDGE_NAME_MAX + 1];
        if (!rs_url_is_http(url) || auto_name(url, base, sizeof(base)) != 0) {
            fprintf(stderr, "rsbridge: --source %s: expected an absolute "
                    "http(s) URL\n", url);
            return 2;
        }
        if (rs_url_has_userinfo(url)) {
            /* not echoed: the password stays out of logs */
            fprintf(stderr, "rsbridge: --source: " USERINFO_REFUSED "\n");
            return 2;
        }
        struct src_conf *c = sconf_add();
        if (c == NULL) {
            fprintf(stderr, "rsbridge: more than %d Sources\n",
                    BRIDGE_MAX_SOURCES);
            return 2;
        }
        snprintf(c->name, sizeof(c->name), "%s", base);
        if ((c->url = rs_strdup(url)) == NULL)
            return 1;
    }
    if (nsconfs == 0) {
        fprintf(stderr, "rsbridge: no Source (--source URL, or [source NAME] "
                "sections)\nTry 'rsbridge --help'.\n");
        return 2;
    }
    return 0;
}

/* ------------------------------------------------------------- naming */

/*
 * A name, once given to a URL, stays with it while the state remembers
 * it: mirrors follow PUBLIC/s/NAME/, and a name handed to another URL
 * feeds them another Source (and drops the old one's rows). So the state
 * decides first, not the --source order: a --source whose URL the state
 * knows keeps the name it has there; a new one gets the first of HOST,
 * HOST-2, ... that neither the configuration nor the state gives another
 * URL. [source NAME] sections name explicitly and win - but one that
 * takes the name the state gives a URL still configured by --source is
 * refused: that URL would move to another name and its mirrors be fed
 * the section's Source, which no one asked for.
 */

/* Strings, each with an index (open addressing by FNV-1a; the strings
 * are not owned). One string may be in it more than once, with another
 * index: a URL the state gives several names. */
struct strset_slot {
    const char *key;              /* NULL: empty */
    size_t idx;
};

struct strset {
    struct strset_slot *slot;
    size_t cap;                   /* a power of two, over twice the count */
};

static bool
strset_init(struct strset *ss, size_t n)
{
    ss->cap = 16;
    while (ss->cap < 2 * n + 16)
        ss->cap *= 2;
    ss->slot = rs_calloc(ss->cap, sizeof(*ss->slot));
    return ss->slot != NULL;
}

static size_t
strset_next(const struct strset *ss, size_t i)
{
    return (i + 1) & (ss->cap - 1);
}

/* The first slot to look at for key. */
static size_t
strset_start(const struct strset *ss, const char *key)
{
    return (size_t)rs_fnv1a64(key) & (ss->cap - 1);
}

/* At most the count strset_init was given; key outlives the set. */
static void
strset_add(struct strset *ss, const char *key, size_t idx)
{
    size_t i = strset_start(ss, key);
    while (ss->slot[i].key != NULL)
        i = strset_next(ss, i);
    ss->slot[i] = (struct strset_slot){ key, idx };
}

static bool
strset_has(const struct strset *ss, const char *key)
{
    for (size_t i = strset_start(ss, key); ss->slot[i].key != NULL;
         i = strset_next(ss, i))
        if (strcmp(ss->slot[i].key, key) == 0)
            return true;
    return false;
}

/* What the state names: its Sources, in the order they were named. */
struct known {
    char *name, *url;
    bool taken;                   /* given to a Source of this run */
};

struct known_list {
    struct known *v;
    size_t n, cap;
};

static int
known_add(void *ud, const char *name, const char *url)
{
    struct known_list *kl = ud;
    if (kl->n == kl->cap) {
        size_t ncap = kl->cap ? kl->cap * 2 : 64;
        struct known *t = rs_realloc(kl->v, ncap * sizeof(*t));
        if (t == NULL)
            return RS_ENOMEM;
        kl->v = t;
        kl->cap = ncap;
    }
    struct known *k = &kl->v[kl->n];
    k->name = rs_strdup(name);
    k->url = rs_strdup(url);
    k->taken = false;
    if (k->name == NULL || k->url == NULL) {
        rs_free(k->name);
        rs_free(k->url);
        return RS_ENOMEM;
    }
    kl->n++;
    return 0;
}

static void
known_free(struct known_list *kl)
{
    for (size_t i = 0; i < kl->n; i++) {
        rs_free(kl->v[i].name);
        rs_free(kl->v[i].url);
    }
    rs_free(kl->v);
}

static bool
url_is_a_source_option(const char *url)
{
    for (size_t i = 0; i < nsconfs; i++)
        if (!sconfs[i].from_section && strcmp(sconfs[i].url, url) == 0)
            return true;
    return false;
}

/* The sections against the state: refused (2) when one takes the name
 * of a URL still given by --source; else a name handed over is said. */
static int
names_check_sections(const struct known_list *kl, const struct strset *names)
{
    for (size_t i = 0; i < nsconfs; i++) {
        const struct src_conf *c = &sconfs[i];
        if (!c->from_section)
            continue;
        for (size_t j = strset_start(names, c->name);
             names->slot[j].key != NULL; j = strset_next(names, j)) {
            const struct known *k = &kl->v[names->slot[j].idx];
            if (strcmp(k->name, c->name) != 0 || strcmp(k->url, c->url) == 0)
                continue;
            if (url_is_a_source_option(k->url)) {
                rs_log_kv(RS_LOG_ERROR, "a [source NAME] section takes the "
                          "name the state gives a --source: that Source "
                          "would move to another name and its mirrors be "
                          "fed this one. Name that URL with a section too "
                          "(by a name of your choosing), or choose another "
                          "name", "section", c->name, "url", c->url,
                          "name_of", k->url, NULL);
                return 2;
            }
            rs_log_kv(RS_LOG_WARN, "a [source NAME] section takes a name the "
                      "state gave another URL: that Source is forgotten, and "
                      "whoever follows the name now follows this one",
                      "section", c->name, "url", c->url, "was", k->url,
                      NULL);
        }
    }
    return 0;
}

/* The URL's oldest name in the state that this run has not given yet
 * (the same URL twice) and no section took (cfg: the names given); NULL:
 * none. */
static struct known *
known_of(struct known_list *kl, const struct strset *urls,
         const struct strset *cfg, const char *url)
{
    struct known *best = NULL;
    for (size_t i = strset_start(urls, url); urls->slot[i].key != NULL;
         i = strset_next(urls, i)) {
        struct known *k = &kl->v[urls->slot[i].idx];
        if (strcmp(k->url, url) == 0 && !k->taken &&
            !strset_has(cfg, k->name) && (best == NULL || k < best))
            best = k;
    }
    return best;
}

/* Name the --sources (their base is in name) with the state's help: 0,
 * 2 a section refused, 1 a failure (logged). */
static int
sources_name(struct store *st)
{
    struct known_list kl = { 0 };
    struct strset cfg = { 0 }, names = { 0 }, urls = { 0 };
    int rc = store_sources(st, known_add, &kl);
    if (rc != 0) {
        rs_log(RS_LOG_ERROR, "state: %s", rc == RS_ENOMEM ? "out of memory"
                                                          : store_errstr(st));
        rc = 1;
        goto out;
    }
    if (!strset_init(&cfg, nsconfs) || !strset_init(&names, kl.n) ||
        !strset_init(&urls, kl.n)) {
        rs_log(RS_LOG_ERROR, "naming the Sources: out of memory");
        rc = 1;
        goto out;
    }
    for (size_t i = 0; i < kl.n; i++) {
        strset_add(&names, kl.v[i].name, i);
        strset_add(&urls, kl.v[i].url, i);
    }
    if ((rc = names_check_sections(&kl, &names)) != 0)
        goto out;
    for (size_t i = 0; i < nsconfs; i++)
        if (sconfs[i].from_section)
            strset_add(&cfg, sconfs[i].name, i);
    for (size_t i = 0; i < nsconfs; i++) {
        struct src_conf *c = &sconfs[i];
        if (c->from_section)
            continue;
        struct known *k = known_of(&kl, &urls, &cfg, c->url);
        if (k != NULL) {
            k->taken = true;
            snprintf(c->name, sizeof(c->name), "%s", k->name);
        } else {
            /* a new URL: no name of the state's, so that none moves */
            char base[BRIDGE_NAME_MAX + 1];
            snprintf(base, sizeof(base), "%s", c->name);
            for (int n = 2; strset_has(&cfg, c->name) ||
                            strset_has(&names, c->name); n++)
                snprintf(c->name, sizeof(c->name), "%.*s-%d",
                         BRIDGE_NAME_MAX - 12, base, n);
        }
        strset_add(&cfg, c->name, i);
    }
    rc = 0;
out:
    rs_free(cfg.slot);
    rs_free(names.slot);
    rs_free(urls.slot);
    known_free(&kl);
    return rc;
}

/* ------------------------------------------------------------ start-up */

/* The hub token: the first line of --token-file (rs_tokenfile.h), into
 * buf (RS_TOKENFILE_MAX + 1 bytes). */
static int
read_token(char *buf, size_t len)
{
    char err[512];
    int rc = rs_tokenfile_read(conf.token_file, conf.insecure_token_file,
                               buf, len, err, sizeof(err));

    if (rc != 0) {
        rs_log(RS_LOG_ERROR, "token file %s", err);
        return rc;
    }
    return 0;
}

static int
setup_state(struct bridge *b)
{
    if (mkdir(conf.state, 0700) != 0 && errno != EEXIST) {
        rs_log(RS_LOG_ERROR, "--state %s: %s", conf.state, strerror(errno));
        return 2;
    }
    char path[BRIDGE_URL_MAX];
    snprintf(path, sizeof(path), "%s/bridge.db", conf.state);
    char err[600];
    int rc = store_open(path, &b->st, err, sizeof(err));
    if (rc != 0) {
        rs_log(RS_LOG_ERROR, "state: %s", err);
        return rc == RS_ESTATE || rc == RS_EINVAL ? 2 : 1;
    }
    if (!store_checkpointing(b->st))
        rs_log(RS_LOG_WARN, "no checkpoint thread: commits will checkpoint");
    return 0;
}

static int
setup_http(struct bridge *b)
{
    b->http = evhttp_new(b->base);
    if (b->http == NULL)
        return 1;
    evhttp_set_max_headers_size(b->http, 64 * 1024);
    evhttp_set_max_body_size(b->http, 64 * 1024);
    evhttp_set_allowed_methods(b->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS);
    struct rs_httpguard_opts go = {
        .base = b->base,
        .http = b->http,
        .name = "http",
        .limits = conf.http_limits,
        .metrics = b->metrics,
        .metrics_prefix = "rsbridge_http",
        .on_log = rs_httpguard_log_warn,
    };
    struct evhttp_bound_socket *bs;
    char err[300];
    if (rs_httpguard_listen(&go, conf.listen.host, conf.listen.port,
                            &b->guard, &bs, &b->http_port, err,
                            sizeof(err)) != 0) {
        rs_log(RS_LOG_ERROR, "HTTP listener: %s", err);
        return 1;
    }
    char buf[BRIDGE_URL_MAX];
    if (conf.public_url != NULL) {
        if (!rs_url_is_http(conf.public_url) ||
            strpbrk(conf.public_url, "?#") != NULL) {
            rs_log(RS_LOG_ERROR, "--public-url: expected an absolute http(s) "
                   "URL without query or fragment");
            return 2;
        }
        snprintf(buf, sizeof(buf), "%s", conf.public_url);
    } else if (rs_httpguard_local_url("http", conf.listen.host, b->http_port,
                                      buf, sizeof(buf)) != 0) {
        rs_log(RS_LOG_ERROR, "--listen: the host is too long for a URL");
        return 2;
    } else {
        rs_httpguard_warn_local_url(conf.listen.host, buf, "--public-url");
    }
    size_t n = strlen(buf);
    while (n > 0 && buf[n - 1] == '/')
        buf[--n] = '\0';
    b->public_url = rs_strdup(buf);
    return b->public_url != NULL ? 0 : 1;
}

static double
gauge_sources(void *ud)
{
    struct bridge *b = ud;
    return (double)b->npollers;
}

static double
gauge_pending(void *ud)
{
    struct bridge *b = ud;
    int64_t n = 0;
    for (size_t i = 0; i < b->npollers; i++) {
        struct poller_stats ps;
        poller_stats(b->pollers[i], &ps);
        n += ps.outbox.pending[0] + ps.outbox.pending[1];
    }
    return (double)n;
}

static double
gauge_published(void *ud)
{
    struct bridge *b = ud;
    int64_t n = 0;
    for (size_t i = 0; i < b->npollers; i++) {
        struct poller_stats ps;
        poller_stats(b->pollers[i], &ps);
        n += ps.outbox.accepted[0];
    }
    return (double)n;
}

/* The hub's health across the Sources' topics (outbox_stats): topics it
 * fails and retries, topics a 4xx stopped, POSTs failed since start. */
struct hub_health {
    int64_t failing, stopped;
    uint64_t failures;
};

static struct hub_health
hub_health(const struct bridge *b)
{
    struct hub_health h = { 0, 0, 0 };
    for (size_t i = 0; i < b->npollers; i++) {
        struct poller_stats ps;
        poller_stats(b->pollers[i], &ps);
        for (int k = 0; k < OUTBOX_LANES; k++) {
            h.failing += ps.outbox.hub_failing[k] && !ps.outbox.stopped[k];
            h.stopped += ps.outbox.stopped[k];
        }
        h.failures += ps.outbox.failures;
    }
    return h;
}

static double
gauge_hub_up(void *ud)
{
    struct hub_health h = hub_health(ud);
    return h.failing + h.stopped > 0 ? 0.0 : 1.0;
}

static double
gauge_hub_unavailable(void *ud)
{
    return (double)hub_health(ud).failing;
}

static double
gauge_hub_refused(void *ud)
{
    return (double)hub_health(ud).stopped;
}

static double
gauge_hub_failures(void *ud)
{
    return (double)hub_health(ud).failures;
}

static int
setup_metrics(struct bridge *b)
{
    struct rs_metrics *m = b->metrics = rs_metrics_new();
    if (m == NULL)
        return 1;
    struct poller_metrics *pm = &b->pm;
    int rc = 0;
    rc |= rs_metrics_register_counter(m, &pm->polls_ok, "rsbridge_polls_total",
                                      "Polls of the Sources, by result.",
                                      "result", "ok", NULL);
    rc |= rs_metrics_register_counter(m, &pm->polls_failed,
                                      "rsbridge_polls_total", "",
                                      "result", "failed", NULL);
    rc |= rs_metrics_register_counter(m, &pm->requests,
                                      "rsbridge_source_requests_total",
                                      "Requests to the Sources' documents.",
                                      NULL);
    rc |= rs_metrics_register_counter(m, &pm->not_modified,
                                      "rsbridge_source_not_modified_total",
                                      "Documents that stood as they were "
                                      "(304).", NULL);
    rc |= rs_metrics_register_counter(m, &pm->changes,
                                      "rsbridge_changes_total",
                                      "Changes put in the outboxes.", NULL);
    rc |= rs_metrics_register_counter(m, &pm->framework,
                                      "rsbridge_framework_total",
                                      "Framework events put in the outboxes.",
                                      NULL);
    rc |= rs_metrics_register_counter(m, &pm->rewritten,
                                      "rsbridge_history_rewritten_total",
                                      "Change List entries older than what "
                                      "was published, never seen: refused.",
                                      NULL);
    rc |= rs_metrics_register_counter(m, &pm->lost,
                                      "rsbridge_entries_lost_total",
                                      "Change List entries gone while their "
                                      "window still covers them.", NULL);
    rc |= rs_metrics_register_counter(m, &pm->late,
                                      "rsbridge_entries_late_total",
                                      "Change List entries published after "
                                      "newer ones (a list that moved under "
                                      "a forward walk).", NULL);
    rc |= rs_metrics_register_counter(m, &pm->skipped,
                                      "rsbridge_entries_skipped_total",
                                      "Malformed Resource List and Change "
                                      "List entries skipped (each read of "
                                      "their document): not published.",
                                      NULL);
    rc |= rs_metrics_register_gauge_fn(m, "rsbridge_sources",
                                       "Sources bridged.", gauge_sources, b,
                                       NULL);
    rc |= rs_metrics_register_gauge_fn(m, "rsbridge_outbox_pending",
                                       "Entries in the outboxes the hub has "
                                       "not accepted yet.", gauge_pending, b,
                                       NULL);
    rc |= rs_metrics_register_gauge_fn(m, "rsbridge_changes_published",
                                       "Changes the hub accepted (kept in "
                                       "the state across restarts).",
                                       gauge_published, b, NULL);
    rc |= rs_metrics_register_gauge_fn(m, "rsbridge_hub_up",
                                       "1 while the hub accepts every "
                                       "topic's notifications, 0 while a "
                                       "POST has failed since the last one "
                                       "it accepted (or a 4xx stopped a "
                                       "topic).", gauge_hub_up, b, NULL);
    rc |= rs_metrics_register_gauge_fn(m, "rsbridge_hub_failing_topics",
                                       "Topics whose notifications the hub "
                                       "is failing now, by reason: "
                                       "unavailable (no answer, 5xx, 429, "
                                       "408: retried), refused (a 4xx: "
                                       "stopped until SIGHUP).",
                                       gauge_hub_unavailable, b, "reason",
                                       "unavailable", NULL);
    rc |= rs_metrics_register_gauge_fn(m, "rsbridge_hub_failing_topics", "",
                                       gauge_hub_refused, b, "reason",
                                       "refused", NULL);
    rc |= rs_metrics_register_gauge_fn(m, "rsbridge_hub_post_failures",
                                       "POSTs to the hub that failed since "
                                       "start (grows only).",
                                       gauge_hub_failures, b, NULL);
    return rc != 0 ? 1 : 0;
}

static int
setup_metrics_server(struct bridge *b, const struct rs_config *cfg)
{
    if (!rs_config_is_set(cfg, "metrics-listen"))
        return 0;
    char err[300];
    b->mserver = rs_metrics_server_new(b->base, b->metrics,
                                       conf.metrics_listen.host,
                                       conf.metrics_listen.port, NULL,
                                       "rsbridge_http", err, sizeof(err));
    if (b->mserver == NULL) {
        rs_log_kv(RS_LOG_ERROR, "cannot serve metrics", "listen",
                  "--metrics-listen", "error", err, NULL);
        return 1;
    }
    b->metrics_port = rs_metrics_server_port(b->mserver);
    return 0;
}

/* Every Source was read once: say so (log, ready file); once. */
static void
on_poller_ready(void *ud)
{
    struct bridge *b = ud;
    if (++b->nready < b->npollers || b->ready)
        return;
    b->ready = true;
    char port[16], n[16];
    snprintf(port, sizeof(port), "%d", b->http_port);
    snprintf(n, sizeof(n), "%zu", b->npollers);
    rs_log_kv(RS_LOG_INFO, "serving", "http_port", port, "public",
              b->public_url, "sources", n, "hub", conf.hub, "state",
              conf.state, NULL);
    if (conf.ready_file == NULL)
        return;
    char ready[64];
    if (b->mserver != NULL)
        snprintf(ready, sizeof(ready), "{\"http\":%d,\"metrics\":%d}",
                 b->http_port, b->metrics_port);
    else
        snprintf(ready, sizeof(ready), "{\"http\":%d}", b->http_port);
    if (rs_ready_file_write(conf.ready_file, ready) != 0)
        rs_log(RS_LOG_WARN, "cannot write %s: %s", conf.ready_file,
               strerror(errno));
}

static int
setup_pollers(struct bridge *b)
{
    char ua[600];
    if (conf.contact != NULL)
        snprintf(ua, sizeof(ua), "rsbridge/" RS_VERSION " (+%s)",
                 conf.contact);
    else
        snprintf(ua, sizeof(ua), "rsbridge/" RS_VERSION);
    struct rs_http_opts so = {
        .max_conns = 256,
        .max_host_conns = 64,
        .user_agent = ua,
    };
    struct rs_http_opts ho = {
        .max_conns = 64,
        .max_host_conns = 16,
        .user_agent = "rsbridge/" RS_VERSION,
    };
    b->src_http = rs_http_new(b->base, &so);
    b->hub_http = rs_http_new(b->base, &ho);
    b->pollers = rs_calloc(nsconfs, sizeof(*b->pollers));
    if (b->src_http == NULL || b->hub_http == NULL || b->pollers == NULL)
        return 1;
    for (size_t i = 0; i < nsconfs; i++) {
        char bridged[BRIDGE_URL_MAX];
        snprintf(bridged, sizeof(bridged), "%s/s/%s/", b->public_url,
                 sconfs[i].name);
        int64_t iv = sconfs[i].interval_ms > 0 ? sconfs[i].interval_ms
                                               : conf.interval_ms;
        struct poller_opts po = {
            .base = b->base,
            .http = b->src_http,
            .hub_http = b->hub_http,
            .st = b->st,
            .name = sconfs[i].name,
            .url = sconfs[i].url,
            .bridged = bridged,
            .hub = conf.hub,
            .token = b->have_token ? b->token : NULL,
            .interval_ms = iv,
            .idle_interval_ms = conf.idle_interval_ms,
            .timeout_ms = (unsigned)conf.timeout_ms,
            .batch_ms = conf.batch_ms,
            .retry_max_ms = conf.retry_max_ms,
            .max_notification = (size_t)conf.max_notification,
            .metrics = &b->pm,
            .on_ready = on_poller_ready,
            .ud = b,
        };
        const char *err = NULL;
        b->pollers[i] = poller_new(&po, &err);
        if (b->pollers[i] == NULL) {
            rs_log_kv(RS_LOG_ERROR, "cannot follow a source", "source",
                      sconfs[i].name, "error", err, NULL);
            return 1;
        }
        b->npollers++;
    }
    struct site_opts sio = {
        .guard = b->guard,
        .pollers = b->pollers,
        .npollers = b->npollers,
    };
    b->site = site_new(&sio);
    return b->site != NULL ? 0 : 1;
}

/* -------------------------------------------------------------- signals */

/* The drain: no more polls; what is gathering goes to the hub now; what
 * the hub has not accepted when the drain ends stays in the outboxes for
 * the next start. */
static void
on_drain(void *ud)
{
    struct bridge *b = ud;
    rs_log(RS_LOG_INFO, "draining: waiting for notifications in flight");
    for (size_t i = 0; i < b->npollers; i++)
        poller_drain(b->pollers[i]);
}

static bool
on_drained(void *ud)
{
    struct bridge *b = ud;
    for (size_t i = 0; i < b->npollers; i++)
        if (!poller_idle(b->pollers[i]))
            return false;
    return true;
}

static void
on_stopped(void *ud, bool timed_out)
{
    struct bridge *b = ud;
    if (timed_out)
        rs_log(RS_LOG_WARN, "drain time over: what the hub did not accept "
               "waits in the outboxes");
    event_base_loopexit(b->base, NULL);
}

/* SIGHUP: --token-file is read again (a token fixed or rotated is used
 * from now on; one that cannot be read leaves the old one), then the
 * topics a 4xx stopped go again and the hub is asked for its channels. */
static void
reload_token(struct bridge *b)
{
    char t[RS_TOKENFILE_MAX + 1];
    if (conf.token_file == NULL || read_token(t, sizeof(t)) != 0) {
        if (conf.token_file != NULL)
            rs_log(RS_LOG_WARN, "SIGHUP: the hub token stays as it was");
        return;
    }
    if (strcmp(t, b->token) != 0) {
        size_t ok = 0;
        for (size_t i = 0; i < b->npollers; i++)
            ok += poller_set_token(b->pollers[i], t) == 0;
        memcpy(b->token, t, sizeof(b->token));
        rs_log_kv(ok == b->npollers ? RS_LOG_INFO : RS_LOG_ERROR,
                  "SIGHUP: a new hub token from the token file", "file",
                  conf.token_file, "taken_by", ok == b->npollers ? "all"
                  : "not all sources (out of memory)", NULL);
    }
    explicit_bzero(t, sizeof(t));
}

static void
on_reload(void *ud)
{
    struct bridge *b = ud;
    reload_token(b);
    for (size_t i = 0; i < b->npollers; i++)
        poller_reload(b->pollers[i]);
}

static int
setup(struct bridge *b, const struct rs_config *cfg)
{
    int rc;
    if (!rs_url_is_http(conf.hub)) {
        rs_log(RS_LOG_ERROR, "--hub: expected an absolute http(s) URL");
        return 2;
    }
    if (conf.token_file != NULL) {
        if (read_token(b->token, sizeof(b->token)) != 0)
            return 2;
        b->have_token = true;
    }
    if ((rc = setup_state(b)) != 0 || (rc = sources_name(b->st)) != 0)
        return rc;
    b->base = rs_daemon_base_new();
    if (b->base == NULL || setup_metrics(b) != 0)
        return 1;
    if ((rc = setup_http(b)) != 0)
        return rc;
    if (setup_metrics_server(b, cfg) != 0)
        return 1;
    if (setup_pollers(b) != 0)
        return 1;
    struct rs_daemon_opts dmo = {
        .base = b->base,
        .drain_ms = conf.drain_ms,
        .drain_tick_ms = 20,
        .on_drain = on_drain,
        .drained = on_drained,
        .on_stopped = on_stopped,
        .on_reload = on_reload,
        .ud = b,
    };
    if ((b->daemon = rs_daemon_new(&dmo)) == NULL)
        return 1;
    for (size_t i = 0; i < b->npollers; i++)
        poller_start(b->pollers[i]);
    return 0;
}

static void
teardown(struct bridge *b)
{
    /* Order: the pollers stop first (nothing new is asked for), then the
     * server, then the HTTP clients (they complete what is in flight as
     * cancelled), then what used them, then the state. */
    for (size_t i = 0; i < b->npollers; i++)
        poller_drain(b->pollers[i]);
    site_free(b->site);
    if (b->http != NULL)
        evhttp_free(b->http);
    rs_httpguard_free(b->guard);
    rs_metrics_server_free(b->mserver);
    rs_http_free(b->src_http);
    rs_http_free(b->hub_http);
    for (size_t i = 0; i < b->npollers; i++)
        poller_free(b->pollers[i]);
    rs_free(b->pollers);
    rs_daemon_free(b->daemon);
    store_free(b->st);
    if (b->base != NULL)
        event_base_free(b->base);
    rs_metrics_free(b->metrics);
    rs_free(b->public_url);
    explicit_bzero(b->token, sizeof(b->token));
}

int
main(int argc, char **argv)
{
    static struct bridge b;
    struct rs_config_info info = {
        .program = "rsbridge",
        .usage = "Usage: rsbridge --source URL [--source URL]... --hub URL "
                 "--state DIR [OPTION]...\n"
                 "Push for pull-only ResourceSync Sources: poll each Source "
                 "politely (one\nrequest in flight, conditional GETs, "
                 "--interval), find each change in its\nChange Lists (or its "
                 "Resource Lists), publish it once, in order, to the hub,\n"
                 "and serve each Source's bridged Source Description and "
                 "Capability Lists at\nPUBLIC/s/NAME/: mirrors run `rssub run "
                 "--source PUBLIC/s/NAME/`.\n"
                 "A config file (-c) takes the options as keys and [source "
                 "NAME] sections\n(url = URL, interval = DURATION).\n"
                 "Exit status: 0 clean shutdown, 1 runtime failure, 2 usage.",
        .opts = options,
        .on_section = on_section,
    };
    struct rs_config *cfg = rs_config_new(&info);
    if (cfg == NULL)
        return 1;
    int rc = rs_config_parse(cfg, argc, argv, NULL);
    if (rc == RS_CONFIG_WANT_HELP || rc == RS_CONFIG_WANT_VERSION) {
        rc = rc == RS_CONFIG_WANT_HELP ? rs_config_help(cfg, stdout)
                                       : rs_config_version(cfg, stdout);
        rs_config_free(cfg);
        sconfs_free();
        return rc == 0 ? 0 : 1;
    }
    if (rc != 0) {
        fprintf(stderr, "rsbridge: %s\nTry 'rsbridge --help'.\n",
                rs_config_errstr(cfg));
        rs_config_free(cfg);
        sconfs_free();
        return 2;
    }
    int code = 0;
    if (conf.hub == NULL || conf.state == NULL) {
        fprintf(stderr, "rsbridge: %s is required\nTry 'rsbridge --help'.\n",
                conf.hub == NULL ? "--hub" : "--state");
        code = 2;
    }
    if (code == 0)
        code = sources_build();
    char err[512];
    if (code == 0 && rs_log_setup("rsbridge", conf.log_level, conf.log_format,
                                  conf.log_file, err, sizeof(err)) != 0) {
        fprintf(stderr, "rsbridge: %s\n", err);
        code = 2;
    }
    if (code != 0) {
        rs_config_free(cfg);
        sconfs_free();
        return code;
    }
    signal(SIGPIPE, SIG_IGN);
    b.exit_code = setup(&b, cfg);
    if (b.exit_code == 0) {
        event_base_dispatch(b.base);
        rs_log(RS_LOG_INFO, "shutting down");
    }
    teardown(&b);
    rs_config_free(cfg);
    sconfs_free();
    rs_log_shutdown();
    return b.exit_code;
}
