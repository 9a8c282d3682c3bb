/*
 * rshub.c - the hub daemon: configuration, start-up, the HTTP router, the
 * janitor that applies backlog age bounds, signals and graceful drain.
 * Exit codes: 0 clean shutdown, 1 runtime failure, 2 bad configuration or
 * command line.
 */
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RS_LOG_MODULE "rshub"
#include <event2/dns.h>
#include <openssl/rand.h>

#include "acceptguard.h"
#include "ack.h"
#include "deliver.h"
#include "hub.h"
#include "ingest.h"
#include "netpolicy.h"
#include "readauth.h"
#include "readnote.h"
#include "reply.h"
#include "rs_alloc.h"
#include "rs_daemon.h"
#include "rs_http.h"
#include "rs_httpguard.h"
#include "rs_log.h"
#include "rs_sock.h"
#include "rs_strmap.h"
#include "rs_tokenfile.h"
#include "rs_url.h"
#include "status.h"
#include "subs.h"
#include "ui.h"
#include "websub.h"

static struct hub_conf conf;
/* The HTTP listeners' guard (rs_httpguard.h) and the publisher listener:
 * their own options, kept out of hub_conf (no handler needs them). */
static struct rs_httpguard_limits http_limits;
static struct rs_config_hostport publish_listen;

/* --redis may hold passwords: a secret option (never echoed by the config
 * module), its default given here rather than in the table, which would
 * show it as <secret>; what rshub logs is redis_url_shown()'s. */
#define RSHUB_REDIS_DEFAULT "redis://127.0.0.1:6379"
static char redis_default[] = RSHUB_REDIS_DEFAULT;

static const struct rs_config_opt options[] = {
    RS_CONFIG_HOSTPORT("listen", 'l', &conf.listen, "127.0.0.1:8080",
                       "HTTP address (publish, WebSub, status)"),
    RS_CONFIG_HOSTPORT("publish-listen", 0, &publish_listen, NULL,
                       "a second HTTP address with connection caps of its "
                       "own, for Sources and health checks (same routes)"),
    RS_CONFIG_HOSTPORT("ws-listen", 'w', &conf.ws_listen, NULL,
                       "WebSocket address (default: listen host, port + 1; "
                       "port 0 if listen port is 0)"),
    { .name = "redis", .letter = 'r', .type = RS_CONFIG_TYPE_STRING,
      .dest = RS_CONFIG_CHECK_(char **, &conf.redis), .metavar = "URL",
      .secret = true,
      .help = "Redis: redis://[[USER]:PASSWORD@]HOST:PORT[/DB], "
              "unix:///PATH, or sentinel://[[USER]:PASSWORD@]HOST[:PORT]"
              "[,HOST[:PORT]...]/MASTER[?db=N&sentinel-password=P] "
              "(no rediss://: hiredis 0.14 has no TLS) (default: "
              RSHUB_REDIS_DEFAULT ")" },
    RS_CONFIG_STRING("redis-prefix", 0, &conf.prefix, "PREFIX", "rshub:",
                     "prefix of every Redis key"),
    RS_CONFIG_DURATION("redis-timeout", 0, &conf.redis_timeout_ms, "2s", 10,
                       600000, "Redis command timeout"),
    RS_CONFIG_INT("ack-replicas", 0, &conf.ack_replicas, "0", 0, 16,
                  "answer a publish 202, and deliver a notification, only "
                  "once this many Redis replicas hold it (WAIT); 0: as soon "
                  "as the primary has it"),
    RS_CONFIG_DURATION("ack-timeout", 0, &conf.ack_timeout_ms, "1s", 10,
                       60000, "how long to wait for --ack-replicas; then "
                       "the publish gets 504 and fan-out holds"),
    RS_CONFIG_STRING("public-url", 0, &conf.public_url, "URL", NULL,
                     "base of advertised http URIs (default http://LISTEN; "
                     "127.0.0.1 for an any-address listen)"),
    RS_CONFIG_STRING("ws-public-url", 0, &conf.ws_public_url, "URL", NULL,
                     "base of advertised WebSocket URIs (default "
                     "ws://WS-LISTEN; 127.0.0.1 for an any-address listen)"),
    RS_CONFIG_BOOL("open", 0, &conf.open, "false",
                   "accept any topic without a token (development)"),
    RS_CONFIG_STRING("read-token-file", 0, &conf.read_token_file, "FILE",
                     NULL, "read tokens (one a line) that open-mode topics "
                     "then require to be read (channels, WebSub)"),
    RS_CONFIG_STRING("admin-token-file", 0, &conf.admin_token_file, "FILE",
                     NULL, "admin tokens (one a line): read every topic, "
                     "see every topic in /topics"),
    RS_CONFIG_STRING("read-jwt-secret-file", 0, &conf.read_jwt_secret_file,
                     "FILE", NULL, "HS256 secret (the first line, 32 bytes "
                     "or more) of signed read tokens (JWT)"),
    RS_CONFIG_STRING("read-jwt-public-key-file", 0,
                     &conf.read_jwt_public_key_file, "FILE", NULL,
                     "PEM public key of signed read tokens (JWT): RSA for "
                     "RS256, EC P-256 for ES256"),
    RS_CONFIG_BOOL("insecure-token-file", 0, &conf.insecure_token_file,
                   "false", "accept token and secret files that group or "
                   "others may read"),
    RS_CONFIG_INT("max-topics", 0, &conf.max_topics, "100000", 1, 10000000,
                  "topics, and WebSocket channels, a node holds (open mode: "
                  "publishing to or registering one more is refused)"),
    RS_CONFIG_SIZE("max-body", 0, &conf.max_body, "10M", 1024, 52428800,
                   "largest notification accepted"),
    RS_HTTPGUARD_CONFIG(&http_limits, "30s"),
    RS_CONFIG_INT("backlog-max", 0, &conf.backlog_max, "100000", 0,
                  1000000000, "default bound of each backlog, entries (0: none)"),
    RS_CONFIG_DURATION("backlog-max-age", 0, &conf.backlog_max_age_ms, "7d", 0,
                       0, "default age bound of each backlog (0: none)"),
    RS_CONFIG_INT("ws-threads", 0, &conf.ws_threads, "0", 0, 64,
                  "WebSocket service threads (0: one per CPU)"),
    RS_CONFIG_SIZE("ws-soft-limit", 0, &conf.ws_soft_limit, "1M", 4096, INT64_MAX,
                   "queued bytes per client that start the slow-consumer timer"),
    RS_CONFIG_DURATION("ws-soft-time", 0, &conf.ws_soft_ms, "10s", 1000, 86400000,
                       "time over the soft limit before a client is cut"),
    RS_CONFIG_SIZE("ws-hard-limit", 0, &conf.ws_hard_limit, "16M", 4096, INT64_MAX,
                   "queued bytes per client that cut it at once"),
    RS_CONFIG_DURATION("ws-ping", 0, &conf.ws_ping_ms, "30s", 1000, 3600000,
                       "WebSocket keepalive ping interval"),
    RS_CONFIG_INT("ws-conn-rate", 0, &conf.ws_conn_rate, "200", 0, 1000000,
                  "new WebSocket connections per second per client address; "
                  "more are refused with 429 (0: no limit)"),
    RS_CONFIG_INT("ws-conn-burst", 0, &conf.ws_conn_burst, "2000", 1, 1000000,
                  "new WebSocket connections a client address may open at once"),
    RS_CONFIG_INT("ws-replays-per-addr", 0, &conf.ws_replays_per_addr, "16", 0,
                  1000000, "replays (since=) a client address may have going; "
                  "more are closed with 1013 (0: no limit)"),
    RS_CONFIG_INT("replay-concurrency", 0, &conf.replay_concurrency, "4", 1, 1024,
                  "replay pages read from Redis at once on this node; the "
                  "others wait their turn"),
    RS_CONFIG_DURATION("drain-time", 0, &conf.drain_ms, "5s", 0, 600000,
                       "on SIGTERM, how long to wait for in-flight work"),
    RS_CONFIG_LIST("callback-allow", 0, &conf.callback_allow, "CIDR", NULL,
                   "permit WebSub callbacks in this network (wins over the "
                   "deny list)"),
    RS_CONFIG_LIST("callback-deny", 0, &conf.callback_deny, "CIDR", NULL,
                   "also refuse callbacks in this network (loopback, private "
                   "and link-local ranges are always denied unless allowed)"),
    RS_CONFIG_DURATION("lease-min", 0, &conf.lease_min_ms, "1m", 1000, INT64_MAX,
                       "shortest WebSub lease granted"),
    RS_CONFIG_DURATION("lease-max", 0, &conf.lease_max_ms, "30d", 1000, INT64_MAX,
                       "longest WebSub lease granted"),
    RS_CONFIG_DURATION("lease-default", 0, &conf.lease_default_ms, "10d", 1000, INT64_MAX,
                       "lease when the subscriber asks for none"),
    RS_CONFIG_DURATION("verify-timeout", 0, &conf.verify_timeout_ms, "10s", 100,
                       300000, "time for a callback to answer a verification"),
    RS_CONFIG_DURATION("delivery-timeout", 0, &conf.delivery_timeout_ms, "10s",
                       100, 300000, "time for a callback to answer a delivery"),
    RS_CONFIG_DURATION("delivery-lock-ttl", 0, &conf.delivery_lock_ms, "15s",
                       1000, 3600000, "a topic's WebSub delivery lock (renewed "
                       "every third of it): how long a dead node's topics "
                       "wait before another node delivers them"),
    RS_CONFIG_DURATION("retry-max-delay", 0, &conf.retry_max_delay_ms, "10m", 100,
                       INT64_MAX, "longest pause between delivery retries"),
    RS_CONFIG_DURATION("retry-window", 0, &conf.retry_window_ms, "1d", 1000, INT64_MAX,
                       "failing this long marks a subscription failing"),
    RS_CONFIG_BOOL("drop-failing", 0, &conf.drop_failing, "false",
                   "remove subscriptions failing longer than the retry window"),
    RS_CONFIG_INT("max-subs-per-topic", 0, &conf.max_subs_per_topic, "10000", 0,
                  100000000, "WebSub subscriptions per topic (0: no cap)"),
    RS_CONFIG_INT("max-subs-per-host", 0, &conf.max_subs_per_host, "1000", 0,
                  100000000, "WebSub subscriptions per callback host (0: no cap)"),
    RS_CONFIG_INT("delivery-host-conns", 0, &conf.delivery_host_conns, "8", 1, 1024,
                  "parallel connections to one callback host"),
    RS_CONFIG_INT("publish-ids-per-topic", 0, &conf.publish_ids_per_topic,
                  "10000", 1, 100000000,
                  "X-Publish-Id KEYs remembered per topic; past it the least "
                  "recently used KEY is forgotten (its next resend is stored)"),
    RS_CONFIG_LOG(&conf.log_level, &conf.log_format, &conf.log_file),
    RS_CONFIG_STRING("ready-file", 0, &conf.ready_file, "PATH", NULL,
                     "write {\"http\":PORT,\"ws\":PORT} here once listening "
                     "(and \"publish\":PORT with --publish-listen)"),
    RS_CONFIG_END,
};

/* ---------------------------------------------------------- [topic NAME] */

struct topic_conf {
    char name[BACKLOG_NAME_MAX + 1];
    int line;                  /* of its first key: where errors point */
    char *uri;
    enum topic_kind kind;
    char **tokens;
    size_t ntokens;
    char **read_tokens;        /* read-token lines: the topic is private */
    size_t nread_tokens;
    bool read_private;         /* read-private = true: JWT and admin only */
    int64_t max_entries;       /* -1 = default */
    int64_t max_age_ms;        /* -1 = default */
    /* the line of each scalar key, 0 until given: once per section */
    int uri_line, kind_line, private_line, max_line, age_line;
    struct topic_conf *next;
};

/* A file's sections, indexed: a bridge's Sources are a topic each, and a
 * file may hold as many as --max-topics allows. */
struct topic_confs {
    struct topic_conf *head;
    struct rs_strmap by_name, by_uri;   /* keys: the sections' own */
};

/* The sections as read at start-up; a reload reads them again into a list
 * of its own (on_section's ud says which) and keeps only the read keys. */
static struct topic_confs topic_confs;

static struct topic_conf *
topic_conf_get(struct topic_confs *list, const char *name, int line)
{
    struct topic_conf *t = rs_strmap_get(&list->by_name, name);
    if (t != NULL)
        return t;
    t = rs_calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->line = line;
    t->kind = TOPIC_CHANGE;
    t->max_entries = -1;
    t->max_age_ms = -1;
    if (rs_strmap_put(&list->by_name, t->name, t) != 0) {
        rs_free(t);
        return NULL;
    }
    t->next = list->head;
    list->head = t;
    return t;
}

static bool
strv_push(char ***v, size_t *n, const char *s)
{
    char **nv = rs_realloc(*v, (*n + 2) * sizeof(*nv));
    if (nv == NULL)
        return false;
    *v = nv;
    if ((nv[*n] = rs_strdup(s)) == NULL)
        return false;
    nv[++*n] = NULL;
    return true;
}

/* on_section's messages that name a line or a value: the config module
 * copies them before the next call. */
static char section_why[200];

/* A scalar key given a second time in its section: the first one's line. */
static const char *
section_once(int *seen, int line)
{
    if (*seen != 0) {
        snprintf(section_why, sizeof(section_why), "already set at line %d",
                 *seen);
        return section_why;
    }
    *seen = line;
    return NULL;
}

/* The row of an option of the table, so that a topic's backlog bounds
 * take exactly the values (and range) the global options take. */
static const struct rs_config_opt *
option_row(const char *name)
{
    const struct rs_config_opt *o = options;
    while (o->name != NULL && strcmp(o->name, name) != 0)
        o++;
    return o;
}

/* A boolean as every option takes one: true/false, yes/no, on/off, 1/0. */
static const struct rs_config_opt read_private_row = {
    .name = "read-private", .type = RS_CONFIG_TYPE_BOOL,
};

static const char *
on_section_uri(struct topic_confs *list, struct topic_conf *t,
               const char *value)
{
    const char *why = NULL;
    if (!topic_uri_ok(value, &why))
        return why;
    if (!rs_url_is_http(value))
        return "expected an absolute http(s) URI";
    const struct topic_conf *o = rs_strmap_get(&list->by_uri, value);
    if (o != NULL) {        /* t has none yet: section_once saw to it */
        snprintf(section_why, sizeof(section_why),
                 "already the uri of [topic %s] (line %d)", o->name,
                 o->uri_line);
        return section_why;
    }
    t->uri = rs_strdup(value);
    if (t->uri == NULL || rs_strmap_put(&list->by_uri, t->uri, t) != 0) {
        rs_free(t->uri);
        t->uri = NULL;
        return "out of memory";
    }
    return NULL;
}

/* value parsed as option row o takes it: NULL, or what it expected. */
static const char *
section_value(const struct rs_config_opt *o, const char *value, void *out)
{
    if (rs_config_opt_parse(o, value, out, section_why,
                            sizeof(section_why)) != 0)
        return section_why;
    return NULL;
}

static const char *
on_section(void *ud, const char *type, const char *name, const char *key,
           const char *value, int line)
{
    struct topic_confs *list = ud;
    const char *why = NULL;
    if (strcmp(type, "topic") != 0)
        return "unknown section (expected [topic NAME])";
    if (!backlog_name_ok(name))
        return "topic name must be 1-100 characters of [A-Za-z0-9._-]";
    struct topic_conf *t = topic_conf_get(list, name, line);
    if (t == NULL)
        return "out of memory";
    if (strcmp(key, "uri") == 0) {
        why = section_once(&t->uri_line, line);
        if (why == NULL)
            why = on_section_uri(list, t, value);
    } else if (strcmp(key, "kind") == 0) {
        why = section_once(&t->kind_line, line);
        if (why == NULL && topic_kind_from(value, &t->kind) != 0)
            why = "expected change, framework or any";
    } else if (strcmp(key, "token") == 0) {
        if (value[0] == '\0')
            why = "empty: no publisher could send it";
        else if (!strv_push(&t->tokens, &t->ntokens, value))
            why = "out of memory";
    } else if (strcmp(key, "read-token") == 0) {
        if (value[0] == '\0' || strlen(value) > READAUTH_TOKEN_MAX ||
            strpbrk(value, " \t") != NULL)
            why = "expected a token without white space";
        else if (!strv_push(&t->read_tokens, &t->nread_tokens, value))
            why = "out of memory";
    } else if (strcmp(key, "read-private") == 0) {
        why = section_once(&t->private_line, line);
        if (why == NULL)
            why = section_value(&read_private_row, value, &t->read_private);
    } else if (strcmp(key, "backlog-max") == 0) {
        why = section_once(&t->max_line, line);
        if (why == NULL)
            why = section_value(option_row("backlog-max"), value,
                                &t->max_entries);
    } else if (strcmp(key, "backlog-max-age") == 0) {
        why = section_once(&t->age_line, line);
        if (why == NULL)
            why = section_value(option_row("backlog-max-age"), value,
                                &t->max_age_ms);
    } else {
        why = "unknown key (uri, kind, token, read-token, read-private, "
              "backlog-max, backlog-max-age)";
    }
    return why;
}

static void
topic_confs_free_list(struct topic_confs *list)
{
    rs_strmap_clear(&list->by_name);
    rs_strmap_clear(&list->by_uri);
    while (list->head != NULL) {
        struct topic_conf *t = list->head, *next = t->next;
        for (size_t i = 0; i < t->ntokens; i++)
            rs_free(t->tokens[i]);
        rs_free(t->tokens);
        for (size_t i = 0; i < t->nread_tokens; i++) {
            explicit_bzero(t->read_tokens[i], strlen(t->read_tokens[i]));
            rs_free(t->read_tokens[i]);
        }
        rs_free(t->read_tokens);
        rs_free(t->uri);
        rs_free(t);
        list->head = next;
    }
}

static void
topic_confs_free(void)
{
    topic_confs_free_list(&topic_confs);
}

/* ------------------------------------------------------ read credentials */

/* The config file named on the command line, for reloads (NULL: none). */
static char *config_path;

static void
note_config_path(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (strcmp(a, "--") == 0)
            break;
        if ((strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) && i + 1 < argc)
            v = argv[++i];
        else if (strncmp(a, "--config=", 9) == 0)
            v = a + 9;
        else if (strncmp(a, "-c", 2) == 0 && a[2] != '\0')
            v = a + 2;
        if (v != NULL) {
            rs_free(config_path);
            config_path = rs_strdup(v);
        }
    }
}

/* The snapshot of read credentials: the configured topics' read keys from
 * list, then the files. NULL with err set. */
static struct readauth *
readauth_build(const struct hub *h, struct topic_confs *list, char *err,
               size_t errsz)
{
    struct readauth *ra = readauth_new(conf.open);
    char *buf = NULL;
    size_t len = 0;
    int rc = ra != NULL ? 0 : RS_ENOMEM;
    snprintf(err, errsz, "out of memory");
    for (size_t i = 0; rc == 0 && i < topics_count(h->topics); i++) {
        const struct topic *t = topics_at(h->topics, i);
        if (!t->configured)
            continue;
        const struct topic_conf *tc = rs_strmap_get(&list->by_name, t->name);
        rc = readauth_topic(ra, t->name, t->uri, tc != NULL && tc->read_private);
        for (size_t k = 0; rc == 0 && tc != NULL && k < tc->nread_tokens; k++)
            rc = readauth_topic_token(ra, t->name, tc->read_tokens[k]);
    }
    for (struct topic_conf *tc = list->head; rc == 0 && tc != NULL;
         tc = tc->next)
        if (topics_by_name(h->topics, tc->name) == NULL)
            rs_log(RS_LOG_WARN, "[topic %s] is new: topics are read at "
                   "start-up only (its read keys wait for a restart)", tc->name);
    if (rc == 0 && conf.read_token_file != NULL)
        rc = readauth_read_tokens(conf.read_token_file, conf.insecure_token_file,
                                  readauth_hub_token, ra, err, errsz);
    if (rc == 0 && conf.admin_token_file != NULL)
        rc = readauth_read_tokens(conf.admin_token_file,
                                  conf.insecure_token_file,
                                  readauth_admin_token, ra, err, errsz);
    if (rc == 0 && conf.read_jwt_secret_file != NULL) {
        rc = rs_tokenfile_read_text(conf.read_jwt_secret_file,
                                    conf.insecure_token_file,
                                    READAUTH_FILE_MAX, &buf, &len, err, errsz);
        if (rc == 0) {
            size_t n = strcspn(buf, "\r\n");
            rc = readauth_jwt_secret(ra, buf, n);
            if (rc != 0)
                snprintf(err, errsz, "%s: the secret (its first line) must "
                         "be %d bytes or more", conf.read_jwt_secret_file,
                         READAUTH_SECRET_MIN);
            rs_tokenfile_text_free(buf);
            buf = NULL;
        }
    }
    if (rc == 0 && conf.read_jwt_public_key_file != NULL) {
        /* a public key: anyone may read it */
        rc = rs_tokenfile_read_text(conf.read_jwt_public_key_file, true,
                                    READAUTH_FILE_MAX, &buf, &len, err, errsz);
        const char *why = NULL;
        if (rc == 0 && (rc = readauth_jwt_public_key(ra, buf, len, &why)) != 0)
            snprintf(err, errsz, "%s: %s", conf.read_jwt_public_key_file,
                     why != NULL ? why : "out of memory");
        rs_tokenfile_text_free(buf);
    }
    if (rc != 0) {
        readauth_unref(ra);
        return NULL;
    }
    return ra;
}

/* A scratch copy of the option table, for a reload's second parse of the
 * file: every value lands in scratch and is thrown away; only the topic
 * sections are kept. */
union opt_scratch {
    char *s;
    int64_t i;
    uint64_t u;
    bool b;
    struct rs_config_hostport hp;
    char **l;
};

static int
reread_sections(struct topic_confs *list, char *err, size_t errsz)
{
    size_t n = 0;
    while (options[n].name != NULL)
        n++;
    struct rs_config_opt *opts = rs_calloc(n + 1, sizeof(*opts));
    union opt_scratch *scratch = rs_calloc(n + 1, sizeof(*scratch));
    struct rs_config *cfg = NULL;
    int rc = RS_ENOMEM;
    snprintf(err, errsz, "out of memory");
    if (opts == NULL || scratch == NULL)
        goto out;
    for (size_t i = 0; i <= n; i++) {
        opts[i] = options[i];
        if (i < n)
            opts[i].dest = &scratch[i];
    }
    struct rs_config_info info = {
        .program = "rshub",
        .opts = opts,
        .on_section = on_section,
        .section_ud = list,
    };
    char prog[] = "rshub", copt[] = "-c";
    char *argv[] = { prog, copt, config_path, NULL };
    cfg = rs_config_new(&info);
    if (cfg == NULL)
        goto out;
    rc = rs_config_parse(cfg, 3, argv, NULL);
    if (rc != 0)
        snprintf(err, errsz, "%s", rs_config_errstr(cfg));
out:
    rs_config_free(cfg);   /* frees what it stored in scratch */
    rs_free(scratch);
    rs_free(opts);
    return rc;
}

/* SIGHUP: the read credentials again (topic sections' read keys, the
 * token, secret and key files); other options and the topic set wait for
 * a restart. A bad file keeps the credentials in force. */
static void
on_reload(void *ud)
{
    struct hub *h = ud;
    struct topic_confs fresh = { 0 };
    char err[512];
    int rc = 0;
    if (config_path != NULL)
        rc = reread_sections(&fresh, err, sizeof(err));
    struct readauth *ra = rc == 0 ? readauth_build(h, config_path != NULL
                                                       ? &fresh : &topic_confs,
                                                   err, sizeof(err))
                                  : NULL;
    topic_confs_free_list(&fresh);
    if (ra == NULL) {
        rs_log_kv(RS_LOG_ERROR, "reload: read credentials kept as they were",
                  "error", err, NULL);
        return;
    }
    readauth_unref(h->readauth);
    h->readauth = ra;
    if (h->ws != NULL)
        ws_server_set_auth(h->ws, ra);
    rs_log(RS_LOG_INFO, "reload: read credentials in force again");
}

/* --------------------------------------------------------------- router */

static void
on_http(struct evhttp_request *req, void *arg)
{
    struct hub *h = arg;
    const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
    const char *path = u != NULL ? evhttp_uri_get_path(u) : NULL;
    if (path == NULL || path[0] == '\0')
        path = "/";
    if (strcmp(path, "/hub") == 0) {
        ingest_handle(h, req);
        return;
    }
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if (cmd == EVHTTP_REQ_POST && strcmp(path, "/topics") == 0) {
        ingest_register(h, req);
        return;
    }
    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          "GET, HEAD");
        reply_text(req, 405, "Method Not Allowed", "error: method not allowed");
        return;
    }
    if (!status_handle(h, req, path) && !ui_handle(h, req, path))
        reply_text(req, 404, "Not Found", "error: no such resource");
}

/* ---------------------------------------------------------------- janitor */

static void
on_trimmed(void *ud, int rc)
{
    (void)ud;
    if (rc != 0 && rc != RS_ECANCELED)
        rs_log(RS_LOG_WARN, "age trim failed: %s", rs_strerror(rc));
}

/* Redis away this long: this node's WebSocket subscribers are closed
 * (on_janitor, which runs every 10 s: closed 10-20 s into an outage). */
#define HUB_STALL_CLOSE_US (10 * 1000000LL)
#define HUB_REDIS_DOWN_CLOSE "backlog unavailable (Redis down): pull " \
    "meanwhile, resume later with since"
#define HUB_LINK_DOWN_LOG_US (60 * 1000000LL)

static void
on_janitor(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct hub *h = arg;
    if (h->redis_down_since != 0 &&
        rs_time_mono_us() - h->redis_down_since >= HUB_STALL_CLOSE_US &&
        h->fanout != NULL) {
        /* Nothing can be published or delivered while Redis is away (a
         * publish is refused, and the Source retries): a subscriber kept
         * attached would call itself live and wait. Closed "backlog
         * unavailable", it pulls from the Source meanwhile and resumes
         * with since= once Redis is back. */
        rs_log(RS_LOG_WARN, "redis down for %lld s: closing this node's "
               "WebSocket subscribers (4003), which pull meanwhile",
               (long long)((rs_time_mono_us() - h->redis_down_since) /
                           1000000));
        fanout_close_every(h->fanout, 4003, HUB_REDIS_DOWN_CLOSE);
        /* and those that come back meanwhile: accepted as live (a since
         * the node holds nothing up to is "now"), each would call itself
         * so for 10 s and never reach its --push-timeout */
        fanout_refuse_joins(h->fanout, 4003, HUB_REDIS_DOWN_CLOSE);
    }
    if (!backlog_ready(h->backlog))
        return;
    backlog_clock_sync(h->backlog);
    /* Redis's clock, the one the ids carry: a node whose own clock is
     * ahead would otherwise cut every node's backlog short */
    uint64_t now_ms = backlog_now_ms(h->backlog);
    for (size_t i = 0; i < topics_count(h->topics); i++) {
        const struct topic *t = topics_at(h->topics, i);
        if (t->max_age_ms == 0 || t->max_age_ms >= now_ms)
            continue;
        if (backlog_trim_age(h->backlog, t->name, now_ms - t->max_age_ms,
                             on_trimmed, NULL) != 0)
            break;
    }
}

/* The primary the publish link reached, logged once per change (every
 * link follows a failover by itself; the publish link is the one whose
 * writes count). */
static char primary_addr[280];

static void
note_primary(const char *addr)
{
    if (addr == NULL || addr[0] == '\0' || strcmp(addr, primary_addr) == 0)
        return;
    if (primary_addr[0] != '\0')
        rs_log_kv(RS_LOG_WARN, "redis primary changed", "from", primary_addr,
                  "to", addr, NULL);
    snprintf(primary_addr, sizeof(primary_addr), "%s", addr);
}

/* The newest id of a channel this node knows existed: its own appends and
 * what its tail read (the channel's cursor, while it is active here). */
static struct msg_id
on_backlog_known(void *ud, const char *chan)
{
    struct hub *h = ud;
    struct topic *t = topics_by_name(h->topics, chan);
    struct msg_id known = { 0, 0 }, cur;

    if (t != NULL)
        known = t->appended;
    if (h->fanout != NULL && fanout_confirmed(h->fanout, chan, &cur) &&
        msg_id_cmp(cur, known) > 0)
        known = cur;
    return known;
}

static int
link_index(const char *which)
{
    return strcmp(which, "command") == 0 ? 0
         : strcmp(which, "publish") == 0 ? 1 : 2;
}

static void
on_backlog_state(void *ud, const char *which, enum rs_redis_state st,
                 const char *errstr)
{
    struct hub *h = ud;
    int64_t *told = &h->link_down_told[link_index(which)];
    int64_t now = rs_time_mono_us();
    if (st == RS_REDIS_READY) {
        if (backlog_ready(h->backlog) && backlog_tail_ready(h->backlog)) {
            h->redis_down_since = 0;
            if (h->fanout != NULL)
                fanout_refuse_joins(h->fanout, 0, NULL);
        }
        *told = 0;
        rs_log_kv(RS_LOG_INFO, "redis link ready", "link", which, NULL);
        if (strcmp(which, "publish") == 0)
            note_primary(backlog_addr(h->backlog));
        if (strcmp(which, "command") == 0 && h->subs != NULL) {
            subs_on_ready(h->subs);   /* its scripts, before anything else */
            deliver_kick(h->deliver);
        }
        if (h->fanout != NULL)
            fanout_kick(h->fanout);
        if (strcmp(which, "command") == 0 && topics_open(h->topics))
            hub_reload_topics(h, NULL, NULL);
    } else if (st == RS_REDIS_DOWN) {
        if (h->redis_down_since == 0)
            h->redis_down_since = now;
        /* each failed reconnect says it again: once, then once a minute */
        if (*told == 0 || now - *told >= HUB_LINK_DOWN_LOG_US) {
            rs_log_kv(RS_LOG_WARN, *told == 0 ? "redis link down"
                      : "redis link still down", "link", which, "error",
                      errstr != NULL ? errstr : "", NULL);
            *told = now;
        }
    }
}

/* ---------------------------------------------------------------- signals */

#define RS_HUB_FLUSH_US 200000    /* after the drain: answers written */

/* The drain (rs_daemon runs it): new publishes are refused (503) and
 * /readyz says so; the loop ends once the publishes in flight have their
 * answer from Redis, or the drain time is up. */
static void
on_ack_wait(void *ud, const char *which, int rc, long long got, double secs)
{
    struct hub *h = ud;
    if (h->ack != NULL)
        ack_observe(h->ack, which, rc, got, secs);
}

static void
on_drain(void *ud)
{
    struct hub *h = ud;

    rs_log(RS_LOG_INFO, "draining: waiting for %u publishes in flight",
           h->inflight);
    h->draining = true;
}

static bool
on_drained(void *ud)
{
    return ((struct hub *)ud)->inflight == 0;
}

static void
on_stopped(void *ud, bool timed_out)
{
    struct hub *h = ud;

    if (timed_out && h->inflight > 0)
        rs_log(RS_LOG_WARN, "stopping with %u publishes unanswered (their "
               "publishers retry)", h->inflight);
    /* A publish answered by Redis in this very loop turn has its 202
     * queued, not yet written: evhttp writes on the socket's next write
     * event. Ending the loop now would close the connection on it (the
     * publisher sees no answer, and publishes again). A short turn more
     * lets those writes out; new publishes meanwhile get 503. */
    struct timeval flush = { 0, timed_out ? 0 : RS_HUB_FLUSH_US };
    event_base_loopexit(h->base, &flush);
}

/* ------------------------------------------------------------------- main */

static int
setup_log(void)
{
    char err[512];

    if (rs_log_setup("rshub", conf.log_level, conf.log_format, conf.log_file,
                     err, sizeof(err)) != 0) {
        fprintf(stderr, "rshub: %s\n", err);
        return 2;
    }
    return 0;
}

static int
setup_topics(struct hub *h)
{
    h->topics = topics_new(conf.open, (uint64_t)conf.backlog_max,
                           (uint64_t)conf.backlog_max_age_ms,
                           (size_t)conf.max_topics);
    if (h->topics == NULL)
        return RS_ENOMEM;
    /* sections come only from the file: config_path is set */
    const char *file = config_path != NULL ? config_path : "config";
    bool told = conf.insecure_token_file || config_path == NULL;
    for (struct topic_conf *t = topic_confs.head; t != NULL; t = t->next) {
        const char *why;
        /* A file of tokens others can read: told (a token file is refused
         * for it; a configuration is not, so that an upgrade does not stop
         * a hub whose file was always so) */
        if (!told && (t->ntokens > 0 || t->nread_tokens > 0)) {
            char err[512];
            told = true;
            if (rs_tokenfile_check(config_path, false, err, sizeof(err)) ==
                RS_EDENIED)
                rs_log(RS_LOG_WARN, "%s; its [topic %s] holds tokens", err,
                       t->name);
        }
        if (t->uri == NULL) {
            rs_log(RS_LOG_ERROR, "%s:%d: [topic %s] has no uri", file,
                   t->line, t->name);
            return RS_EINVAL;
        }
        uint64_t me = t->max_entries >= 0 ? (uint64_t)t->max_entries
                                          : (uint64_t)conf.backlog_max;
        uint64_t ma = t->max_age_ms >= 0 ? (uint64_t)t->max_age_ms
                                         : (uint64_t)conf.backlog_max_age_ms;
        if (topics_add(h->topics, t->name, t->uri, t->kind,
                       (const char *const *)t->tokens, me, ma, &why) != 0) {
            rs_log(RS_LOG_ERROR, "%s:%d: [topic %s] %s", file, t->line,
                   t->name, why);
            return RS_EINVAL;
        }
    }
    if (topics_count(h->topics) == 0 && !conf.open)
        rs_log(RS_LOG_WARN, "no topics configured and not --open: every publish "
                            "will be refused");
    return 0;
}

static bool
on_addr_ok(void *ud, const struct sockaddr *sa)
{
    return netpolicy_permits(ud, sa);
}

/* WebSub: policy, DNS, HTTP client, store, request handler. */
static int
setup_websub(struct hub *h)
{
    unsigned char rnd[16];
    if (h->node_id[0] == '\0') {   /* else set for the ack probe already */
        if (RAND_bytes(rnd, sizeof(rnd)) != 1)
            return RS_EIO;
        for (int i = 0; i < 16; i++)
            snprintf(h->node_id + 2 * i, 3, "%02x", rnd[i]);
    }
    h->np = netpolicy_new();
    if (h->np == NULL)
        return RS_ENOMEM;
    for (char **c = conf.callback_allow; c != NULL && *c != NULL; c++) {
        if (netpolicy_allow(h->np, *c) != 0) {
            rs_log(RS_LOG_ERROR, "--callback-allow: expected ADDR/BITS, got '%s'", *c);
            return RS_EINVAL;
        }
    }
    for (char **c = conf.callback_deny; c != NULL && *c != NULL; c++) {
        if (netpolicy_deny(h->np, *c) != 0) {
            rs_log(RS_LOG_ERROR, "--callback-deny: expected ADDR/BITS, got '%s'", *c);
            return RS_EINVAL;
        }
    }
    if (conf.lease_min_ms > conf.lease_max_ms) {
        rs_log(RS_LOG_ERROR, "--lease-min is longer than --lease-max");
        return RS_EINVAL;
    }
    h->dns = evdns_base_new(h->base, EVDNS_BASE_INITIALIZE_NAMESERVERS);
    if (h->dns == NULL)   /* no resolv.conf: literals and /etc/hosts only */
        h->dns = evdns_base_new(h->base, 0);
    struct rs_http_opts ho = {
        .max_conns = 4096,
        .max_host_conns = (unsigned)conf.delivery_host_conns,
        .user_agent = "rshub/" RS_VERSION " (WebSub hub; ResourceSync)",
        .addr_ok = on_addr_ok,       /* every connection, after DNS */
        .addr_ud = h->np,
    };
    h->httpc = rs_http_new(h->base, &ho);
    h->subs = subs_new(h->backlog);
    h->websub = websub_new(h);
    if (h->dns == NULL || h->httpc == NULL || h->subs == NULL || h->websub == NULL)
        return RS_ENOMEM;
    return 0;
}

/* SCHEME://HOST:PORT of a listener, for the URLs the hub advertises when
 * no public one is given. A wildcard host cannot be advertised (0.0.0.0
 * is no address a subscriber elsewhere can reach): 127.0.0.1, and a
 * warning naming the option that says the real one. */
static char *
default_url(const char *scheme, const struct rs_config_hostport *hp, int port,
            const char *option)
{
    char buf[600];
    if (rs_httpguard_local_url(scheme, hp->host, port, buf, sizeof(buf)) != 0) {
        rs_log(RS_LOG_ERROR, "the listen host is too long for a URL; set %s",
               option);
        return NULL;
    }
    rs_httpguard_warn_local_url(hp->host, buf, option);
    return rs_strdup(buf);
}

static void
strip_slash(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '/')
        s[--n] = '\0';
}

/* ------------------------------------------------- the Redis URL, shown */

/* Query keys of a Redis URL whose values are no secret (common/redis.c
 * knows these and password, sentinel-password). */
static bool
redis_query_key_plain(const char *k, size_t klen)
{
    return (klen == 2 && memcmp(k, "db", 2) == 0) ||
           (klen == 13 && memcmp(k, "sentinel-user", 13) == 0);
}

/* Does p start "KEY=" for a key the Redis URL parser knows? An '&' before
 * anything else is part of a value (a password may hold one). */
static bool
redis_query_key_known(const char *p)
{
    static const char *const keys[] = { "db=", "password=", "sentinel-user=",
                                        "sentinel-password=" };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (strncmp(p, keys[i], strlen(keys[i])) == 0)
            return true;
    return false;
}

/* What redis_url_shown hides: a value (KEY=VALUE), or a parameter
 * without '=' (malformed, and perhaps a password gone astray). */
#define REDIS_MASK_VALUE 1
#define REDIS_MASK_BARE 2

/* Mark the query's secrets in mask: every value but db's and
 * sentinel-user's (an unknown key's too: the parse refuses it, and the
 * message must not show what may be a password), and bare parameters. */
static void
redis_query_mask(const char *q, unsigned char *mask)
{
    const char *p = q;
    while (*p != '\0') {
        const char *end = p;
        while (*end != '\0' && !(*end == '&' && redis_query_key_known(end + 1)))
            end++;
        const char *eq = memchr(p, '=', (size_t)(end - p));
        if (eq == NULL)
            memset(mask + (p - q), REDIS_MASK_BARE, (size_t)(end - p));
        else if (!redis_query_key_plain(p, (size_t)(eq - p)))
            memset(mask + (eq + 1 - q), REDIS_MASK_VALUE,
                   (size_t)(end - eq - 1));
        p = *end == '&' ? end + 1 : end;
    }
}

/*
 * The Redis URL as rshub logs and prints it: the user info's password
 * (all of the user info when it has no ':'), and password=,
 * sentinel-password= and other unknown query values, each as ***:
 * "redis://:***@127.0.0.1:6379". A URL whose '@' cannot be placed (a raw
 * '/', '?' or '#' in a password) shows no more than its scheme, so that no
 * mistake in it puts a password in the log. NULL when out of memory.
 */
static char *
redis_url_shown(const char *url)
{
    size_t len = strlen(url);
    unsigned char *mask = rs_calloc(len + 1, 1);
    char *out = rs_malloc(3 * len + 1);   /* a masked byte: at most *** */
    if (mask == NULL || out == NULL) {
        rs_free(mask);
        rs_free(out);
        return NULL;
    }
    const char *sep = strstr(url, "://");
    size_t start = sep != NULL ? (size_t)(sep - url) + 3 : 0;
    size_t auth_end = start + strcspn(url + start, "/?#");
    const char *q = strchr(url + start, '?');
    if (q != NULL)
        redis_query_mask(q + 1, mask + (q + 1 - url));
    if (strncasecmp(url, "unix://", 7) != 0) {   /* no user info there */
        const char *at = NULL;
        for (size_t i = start; i < auth_end; i++)
            if (url[i] == '@')
                at = url + i;
        if (at != NULL) {
            const char *colon = memchr(url + start, ':',
                                       (size_t)(at - url) - start);
            size_t from = colon != NULL ? (size_t)(colon + 1 - url) : start;
            memset(mask + from, REDIS_MASK_VALUE, (size_t)(at - url) - from);
        }
        /* an '@' past the authority, not in a query value: user info cut
         * short by a raw '/', '?' or '#' */
        for (size_t i = auth_end; i < len; i++)
            if (url[i] == '@' && mask[i] != REDIS_MASK_VALUE) {
                memset(mask + start, REDIS_MASK_VALUE, len - start);
                break;
            }
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (!mask[i])
            out[n++] = url[i];
        else if (i == 0 || !mask[i - 1]) {
            memcpy(out + n, "***", 3);
            n += 3;
        }
    }
    out[n] = '\0';
    rs_free(mask);
    return out;
}

/* ---------------------------------------------------------- listeners */

/* One HTTP listener: evhttp, its guard (deadlines, connection caps) and
 * its accept guard (EMFILE); torn down in that order after evhttp_free. */
struct http_listener {
    struct evhttp *http;
    struct rs_httpguard *guard;
    struct acceptguard *accept;
    int port;
};

static int
http_listen(struct hub *h, struct http_listener *l,
            const struct rs_config_hostport *hp, const char *name)
{
    l->http = evhttp_new(h->base);
    if (l->http == NULL)
        return RS_ENOMEM;
    evhttp_set_max_body_size(l->http, (ev_ssize_t)conf.max_body);
    evhttp_set_max_headers_size(l->http, 64 * 1024);
    evhttp_set_allowed_methods(l->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST |
                                        EVHTTP_REQ_HEAD);
    struct rs_httpguard_opts go = {
        .base = h->base,
        .http = l->http,
        .name = name,
        .limits = http_limits,
        .on_request = on_http,
        .request_arg = h,
        .metrics = h->metrics,
        .metrics_prefix = "rshub_http",
        .on_log = rs_httpguard_log_warn,
    };
    struct evhttp_bound_socket *bs;
    char err[300];
    int rc = rs_httpguard_listen(&go, hp->host, hp->port, &l->guard, &bs,
                                 &l->port, err, sizeof(err));
    if (rc != 0) {
        rs_log(RS_LOG_ERROR, "%s listener: %s", name, err);
        return rc;
    }
    l->accept = acceptguard_new(h->base, evhttp_bound_socket_get_listener(bs),
                                name);
    return l->accept != NULL ? 0 : RS_ENOMEM;
}

static void
http_listener_close(struct http_listener *l)
{
    acceptguard_free(l->accept);
    if (l->http != NULL)
        evhttp_free(l->http);
    rs_httpguard_free(l->guard);   /* after evhttp_free: rs_httpguard.h */
    memset(l, 0, sizeof(*l));
}

int
main(int argc, char **argv)
{
    int exit_code = 1;
    struct hub h;
    struct rs_daemon *daemon = NULL;  /* signals and the drain */
    struct event *ev_janitor = NULL;
    struct http_listener main_l, pub_l;
    char *redis_shown = NULL;   /* conf.redis without its passwords */
    memset(&main_l, 0, sizeof(main_l));
    memset(&pub_l, 0, sizeof(pub_l));
    pub_l.port = -1;
    memset(&h, 0, sizeof(h));
    h.conf = &conf;

    struct rs_config_info info = {
        .program = "rshub",
        .usage = "Usage: rshub [OPTION]...\n"
                 "The ResourceSync notification hub: Sources POST notifications to\n"
                 "/hub; they are stored in Redis, then sent to WebSocket channels.\n"
                 "Topics come from [topic NAME] sections of the config file (uri,\n"
                 "kind, token, read-token, read-private, backlog-max,\n"
                 "backlog-max-age), or from --open. SIGHUP reopens the log file\n"
                 "and reloads the read credentials.\n"
                 "Exit status: 0 clean shutdown, 1 runtime failure, 2 usage.",
        .opts = options,
        .on_section = on_section,
        .section_ud = &topic_confs,
    };
    note_config_path(argc, argv);
    struct rs_config *cfg = rs_config_new(&info);
    if (cfg == NULL)
        return 1;
    int rc = rs_config_parse(cfg, argc, argv, NULL);
    if (rc == RS_CONFIG_WANT_HELP || rc == RS_CONFIG_WANT_VERSION) {
        rc = rc == RS_CONFIG_WANT_HELP ? rs_config_help(cfg, stdout)
                                       : rs_config_version(cfg, stdout);
        rs_config_free(cfg);
        topic_confs_free();
        rs_free(config_path);
        return rc == 0 ? 0 : 1;
    }
    if (rc != 0) {
        fprintf(stderr, "rshub: %s\nTry 'rshub --help'.\n", rs_config_errstr(cfg));
        rs_config_free(cfg);
        topic_confs_free();
        rs_free(config_path);
        return 2;
    }
    if (conf.redis == NULL)
        conf.redis = redis_default;
    if (setup_log() != 0) {
        exit_code = 2;
        goto out;
    }
    redis_shown = redis_url_shown(conf.redis);
    if (redis_shown == NULL)
        goto out;
    /* URLs a client cannot use: said now, not found by the first
     * subscriber */
    const char *clash = NULL;
    if (conf.public_url != NULL && !rs_url_is_http(conf.public_url))
        clash = "--public-url: expected an absolute http(s) URL, what "
                "publishers and subscribers reach the hub at";
    else if (conf.ws_public_url != NULL &&
             strncasecmp(conf.ws_public_url, "ws://", 5) != 0 &&
             strncasecmp(conf.ws_public_url, "wss://", 6) != 0)
        clash = "--ws-public-url: expected a ws:// or wss:// URL, what "
                "WebSocket subscribers connect to";
    if (clash != NULL) {
        rs_log(RS_LOG_ERROR, "%s", clash);
        exit_code = 2;
        goto out;
    }
    /* the WebSocket default port follows the HTTP one: none past 65535 */
    if (!rs_config_is_set(cfg, "ws-listen") &&
        conf.listen.port == UINT16_MAX) {
        rs_log(RS_LOG_ERROR, "the WebSocket port (--listen's port + 1) "
               "would be 65536: give --ws-listen");
        exit_code = 2;
        goto out;
    }
    signal(SIGPIPE, SIG_IGN);
    if (conf.ws_soft_limit >= conf.ws_hard_limit)
        rs_log(RS_LOG_WARN, "--ws-soft-limit (%" PRIu64 " bytes) is not below "
               "--ws-hard-limit (%" PRIu64 "): a slow client is cut at the "
               "hard limit at once, never given --ws-soft-time",
               conf.ws_soft_limit, conf.ws_hard_limit);
    if (setup_topics(&h) != 0) {
        exit_code = 2;
        goto out;
    }
    char raerr[512];
    h.readauth = readauth_build(&h, &topic_confs, raerr, sizeof(raerr));
    if (h.readauth == NULL) {
        rs_log(RS_LOG_ERROR, "read credentials: %s", raerr);
        exit_code = 2;
        goto out;
    }

    /* libevent's default, not rs_daemon_base_new's changelist: its gain
     * was measured on the daemons that fetch and serve files, not here;
     * and at 1,000 subscribers and 5,000 publishes/s (an overload) rshub
     * with it cut 747-1,000 slow subscribers in six rounds (median 980),
     * without it 0-1,000 (median 500): bench_noregress, fanout 5000, its
     * deliveries/s within their noise. */
    h.base = event_base_new();
    h.metrics = rs_metrics_new();
    if (h.base == NULL || h.metrics == NULL)
        goto out;
    h.readnote = readnote_new(h.metrics);
    if (h.readnote == NULL)
        goto out;

    const char *err = NULL;
    /* a replay page must fit under both client limits */
    size_t page_bytes = (size_t)((conf.ws_soft_limit < conf.ws_hard_limit
                                  ? conf.ws_soft_limit : conf.ws_hard_limit) / 2);
    struct backlog_opts bo = {
        .redis_url = conf.redis,
        .prefix = conf.prefix,
        .command_timeout_ms = (unsigned)conf.redis_timeout_ms,
        .page_bytes = page_bytes,
        .on_state = on_backlog_state,
        .ud = &h,
        .ack_replicas = (unsigned)conf.ack_replicas,
        .ack_timeout_ms = (unsigned)conf.ack_timeout_ms,
        .on_wait = on_ack_wait,
        .known = on_backlog_known,
    };
    h.backlog = backlog_new(h.base, &bo, &err);
    if (h.backlog == NULL) {
        rs_log(RS_LOG_ERROR, "redis %s: %s", redis_shown, err);
        exit_code = 2;
        goto out;
    }
    if (conf.ack_replicas > 0) {
        /* the probe key names the node: WebSub's node id, set here first */
        unsigned char rnd[16];
        if (RAND_bytes(rnd, sizeof(rnd)) != 1)
            goto out;
        for (int i = 0; i < 16; i++)
            snprintf(h.node_id + 2 * i, 3, "%02x", rnd[i]);
        struct ack_opts ao = {
            .base = h.base,
            .redis_url = conf.redis,
            .prefix = conf.prefix,
            .node_id = h.node_id,
            .replicas = (unsigned)conf.ack_replicas,
            .timeout_ms = (unsigned)conf.ack_timeout_ms,
            .command_timeout_ms = (unsigned)conf.redis_timeout_ms,
            .metrics = h.metrics,
            .on_state = on_backlog_state,
            .ud = &h,
        };
        h.ack = ack_new(&ao, &err);
        if (h.ack == NULL) {
            rs_log(RS_LOG_ERROR, "redis %s: %s", redis_shown, err);
            exit_code = 2;
            goto out;
        }
    }
    struct fanout_opts fo = {
        .base = h.base,
        .backlog = h.backlog,
        .topics = h.topics,
        .max_channels = (size_t)conf.max_topics,
        .page_bytes = page_bytes,
        .replay_reads = (unsigned)conf.replay_concurrency,
        .metrics = h.metrics,
        .ack = h.ack,
    };
    h.fanout = fanout_new(&fo, &err);
    if (h.fanout == NULL) {
        rs_log(RS_LOG_ERROR, "fan-out: %s", err);
        goto out;
    }
    if (setup_websub(&h) != 0) {
        exit_code = 2;
        goto out;
    }

    /* HTTP first: the WebSocket default port follows it. */
    if (http_listen(&h, &main_l, &conf.listen, "http") != 0)
        goto out;
    h.http = main_l.http;
    h.http_port = main_l.port;
    if (rs_config_is_set(cfg, "publish-listen") &&
        http_listen(&h, &pub_l, &publish_listen, "publish") != 0)
        goto out;

    struct rs_config_hostport wl = conf.ws_listen;
    if (!rs_config_is_set(cfg, "ws-listen")) {
        wl = conf.listen;
        wl.port = conf.listen.port == 0 ? 0 : (uint16_t)(conf.listen.port + 1);
    }
    struct ws_server_opts wo = {
        .base = h.base,
        .host = wl.host[0] != '\0' ? wl.host : NULL,
        .port = wl.port,
        .threads = (unsigned)conf.ws_threads,
        .soft_limit = conf.ws_soft_limit,
        .soft_secs = (unsigned)((conf.ws_soft_ms + 999) / 1000),
        .hard_limit = conf.ws_hard_limit,
        .ping_secs = (unsigned)((conf.ws_ping_ms + 999) / 1000),
        .to_main = fanout_inbox(h.fanout),
        .conn_rate = (unsigned)conf.ws_conn_rate,
        .conn_burst = (unsigned)conf.ws_conn_burst,
        .replays_per_addr = (unsigned)conf.ws_replays_per_addr,
        .metrics = h.metrics,
        .auth = h.readauth,
        .notes = h.readnote,
    };
    h.ws = ws_server_new(&wo, &err);
    if (h.ws == NULL) {
        rs_log(RS_LOG_ERROR, "WebSocket listener %s:%u: %s",
               wo.host ? wo.host : "*", wl.port, err);
        goto out;
    }
    h.ws_port = ws_server_port(h.ws);
    fanout_attach(h.fanout, h.ws);

    if (conf.public_url == NULL)
        conf.public_url = default_url("http", &conf.listen, h.http_port,
                                      "--public-url");
    if (conf.ws_public_url == NULL)
        conf.ws_public_url = default_url("ws", &wl, h.ws_port,
                                         "--ws-public-url");
    if (conf.public_url == NULL || conf.ws_public_url == NULL)
        goto out;
    strip_slash(conf.public_url);
    strip_slash(conf.ws_public_url);
    size_t hl = strlen(conf.public_url) + 8;
    h.hub_url = rs_malloc(hl);
    if (h.hub_url == NULL)
        goto out;
    snprintf(h.hub_url, hl, "%s/hub", conf.public_url);
    struct deliver_opts dopts = {
        .base = h.base,
        .backlog = h.backlog,
        .subs = h.subs,
        .fanout = h.fanout,
        .http = h.httpc,
        .topics = h.topics,
        .hub_url = h.hub_url,
        .node_id = h.node_id,
        .delivery_timeout_ms = (unsigned)conf.delivery_timeout_ms,
        .lock_ttl_ms = (unsigned)conf.delivery_lock_ms,
        .retry_max_delay_ms = (uint64_t)conf.retry_max_delay_ms,
        .retry_window_ms = (uint64_t)conf.retry_window_ms,
        .drop_failing = conf.drop_failing,
        .host_conns = (unsigned)conf.delivery_host_conns,
        .replicated_only = h.ack != NULL,
    };
    h.deliver = deliver_new(&dopts, &err);
    if (h.deliver == NULL) {
        rs_log(RS_LOG_ERROR, "WebSub delivery: %s", err);
        goto out;
    }
    fanout_on_entries(h.fanout, deliver_on_entries, h.deliver);
    if (status_metrics_init(&h) != 0)
        goto out;

    struct rs_daemon_opts dmo = {
        .base = h.base,
        .drain_ms = conf.drain_ms,
        .on_drain = on_drain,
        .drained = on_drained,
        .on_stopped = on_stopped,
        .on_reload = on_reload,
        .ud = &h,
    };
    if ((daemon = rs_daemon_new(&dmo)) == NULL)
        goto out;
    struct timeval ten = { 10, 0 };
    ev_janitor = event_new(h.base, -1, EV_PERSIST, on_janitor, &h);
    if (ev_janitor == NULL || event_add(ev_janitor, &ten) != 0)
        goto out;

    char hp[32], wp[32];
    char pp[32];
    snprintf(hp, sizeof(hp), "%d", h.http_port);
    snprintf(wp, sizeof(wp), "%d", h.ws_port);
    snprintf(pp, sizeof(pp), "%d", pub_l.port);
    rs_log_kv(RS_LOG_INFO, "listening", "http_port", hp, "ws_port", wp,
              "publish_port", pub_l.http != NULL ? pp : "none",
              "hub", h.hub_url, "ws", conf.ws_public_url, "redis", redis_shown,
              "mode", conf.open ? "open" : "closed", NULL);
    char ready[96];
    if (pub_l.http != NULL)
        snprintf(ready, sizeof(ready), "{\"http\":%d,\"ws\":%d,\"publish\":%d}",
                 h.http_port, h.ws_port, pub_l.port);
    else
        snprintf(ready, sizeof(ready), "{\"http\":%d,\"ws\":%d}", h.http_port,
                 h.ws_port);
    if (conf.ready_file != NULL &&
        rs_ready_file_write(conf.ready_file, ready) != 0)
        rs_log(RS_LOG_WARN, "cannot write %s", conf.ready_file);

    event_base_dispatch(h.base);
    rs_log(RS_LOG_INFO, "shutting down");
    exit_code = 0;
out:
    /* Order matters: threads stop first; then every source of callbacks
     * (HTTP client, DNS, Redis) is freed while what their cancelled
     * callbacks touch (deliveries, WebSub requests, fan-out) still lives. */
    ws_server_free(h.ws, 2000);
    http_listener_close(&pub_l);
    http_listener_close(&main_l);
    h.http = NULL;
    deliver_close(h.deliver);
    rs_http_free(h.httpc);
    if (h.dns != NULL)
        evdns_base_free(h.dns, 1);
    backlog_free(h.backlog);
    ack_free(h.ack);
    deliver_free(h.deliver);
    websub_free(h.websub);
    subs_free(h.subs);
    netpolicy_free(h.np);
    fanout_free(h.fanout);
    topics_free(h.topics);
    rs_daemon_free(daemon);
    if (ev_janitor != NULL)
        event_free(ev_janitor);
    status_metrics_free(&h);
    rs_metrics_free(h.metrics);
    rs_free(h.hub_url);
    if (h.base != NULL)
        event_base_free(h.base);
    readauth_unref(h.readauth);
    readnote_free(h.readnote);
    rs_free(redis_shown);
    rs_config_free(cfg);
    topic_confs_free();
    rs_free(config_path);
    rs_log_shutdown();
    return exit_code;
}
