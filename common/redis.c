/*
 * redis.c - one Redis link (rs_redis.h): hiredis async on libevent through
 * hiredis's own adapter, the link's state machine (resolve through the
 * Sentinels, connect + handshake, ready, down + backoff), per-command
 * deadlines, and our own FIFO of accepted commands, which is what makes
 * every reply callback run exactly once whatever hiredis does on teardown.
 * Talking to the Sentinels themselves is sentinel.c's.
 */
#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define RS_LOG_MODULE "redis"
#include "rs_alloc.h"
#include "rs_backoff.h"
#include "rs_hex.h"
#include "rs_log.h"
#include "rs_redis.h"
#include "rs_sentinel.h"
#include "rs_time.h"

#include <curl/curl.h>

#define REDIS_DEFAULT_PORT 6379
#define REDIS_CONNECT_TIMEOUT_MS 2000u
#define REDIS_COMMAND_TIMEOUT_MS 5000u
#define REDIS_BACKOFF_MIN_MS 50u
#define REDIS_BACKOFF_MAX_MS 2000u
#define REDIS_MAX_PENDING 100000u

static const char redis_oom[] = "out of memory";

/*
 * One accepted command. It sits in the FIFO from rs_redis_cmd() until its
 * callback runs; replies arrive in FIFO order because one connection
 * answers in order. Commands with a deadline may also sit in the minima
 * queue (below).
 */
struct redis_cmd {
    struct redis_cmd *next;     /* FIFO: the next younger command */
    struct redis_cmd *mq_prev;  /* minima queue links; valid when in_mq */
    struct redis_cmd *mq_next;
    rs_redis_reply_cb cb;
    void *ud;
    uint64_t sent_us;           /* monotonic clock when accepted */
    uint64_t deadline_us;       /* sent_us + timeout; unused without one */
    unsigned timeout_ms;        /* RS_REDIS_NO_TIMEOUT: guards itself */
    bool in_mq;
};

/* The steps of the handshake, pipelined in this order after connect. */
enum redis_hello {
    REDIS_HELLO_AUTH,
    REDIS_HELLO_SELECT,
    REDIS_HELLO_SETNAME,
    REDIS_HELLO_PING,
    REDIS_HELLO_ROLE,           /* sentinel:// only: is it the primary? */
};
static const char *const redis_hello_name[] = {
    "AUTH", "SELECT", "CLIENT SETNAME", "PING", "ROLE",
};
static const char *const redis_hello_expect[] = { "OK", "OK", "OK", "PONG",
                                                  NULL };

struct rs_redis {
    struct event_base *base;
    enum rs_redis_state state;
    /* The live hiredis context: non-NULL only while CONNECTING with an
     * attempt in flight, or READY. ac->data points back here while we own
     * it; we set ac->data to NULL the moment we stop caring, so every later
     * hiredis callback on that context (NULL replies during its teardown,
     * onDisconnect) is recognised as stale and ignored. */
    redisAsyncContext *ac;
    /* CONNECTING: the connect+handshake deadline (or, before the first
     * attempt, a zero delay so no callback runs inside rs_redis_new());
     * DOWN: the backoff delay. */
    struct event *state_timer;
    /* Fires at (or before) the earliest deadline of pending commands;
     * cmd_timer_due_us is that time, 0 when not armed. */
    struct event *cmd_timer;
    uint64_t cmd_timer_due_us;

    /* Where to: exactly one of path (unix socket) or host is set; with
     * sentinel non-NULL, host and port are the last primary the Sentinels
     * named (NULL before the first answer). */
    char *path;
    char *host;
    int port;
    /* sentinel:// only: the Sentinels of master (its name). */
    struct rs_sentinel *sentinel;
    char *master;
    /* "host:port" or the unix path of the node connected to or last tried
     * ("" before the first attempt); primary: the last one the link was
     * READY on in sentinel mode, which is what a failover changes. */
    char addr[300];
    char primary[300];
    char *user;                 /* NULL: AUTH with the password only */
    char *password;             /* NULL: no AUTH */
    char *client_name;          /* NULL: no CLIENT SETNAME */
    unsigned long db;           /* 0: no SELECT */

    unsigned connect_timeout_ms;
    unsigned command_timeout_ms;
    unsigned backoff_min_ms;
    unsigned backoff_max_ms;
    size_t max_pending;
    void (*on_state)(void *ud, enum rs_redis_state st, const char *errstr);
    void *ud;

    unsigned hello_left;        /* handshake replies still to come */
    unsigned failures;          /* failed attempts since READY; backoff */
    bool ever_ready;
    bool in_on_state;           /* on_state is never re-entered */
    /* reconnects: backoff_min doubling to backoff_max, each up to a
     * quarter under, so that clients of one Redis do not return at once */
    struct rs_backoff backoff;

    /* Every accepted command whose callback has not run, oldest first. */
    struct redis_cmd *head, *tail;
    /* Minima queue over the commands with a deadline: FIFO order, deadlines
     * strictly increasing, so mq_head holds the earliest deadline of all
     * pending commands (per-command timeouts differ, so that is not always
     * the FIFO head). A command dropped from it is followed by a younger
     * one with an earlier or equal deadline, which times out (and takes
     * the whole pipeline down) no later. O(1) amortised per command. */
    struct redis_cmd *mq_head, *mq_tail;

    /* Frames of ours on the stack that may still touch this object. The
     * object is freed only when it is CLOSED and depth drops to 0: nothing
     * is freed under a running callback. */
    unsigned depth;
    struct rs_redis_stats stats;
    char errstr[256];
};

static void redis_connecting(struct rs_redis *r);
static bool redis_name_ok(const char *name);
static void redis_on_switch(void *ud, const char *host, int port);

/* ------------------------------------------------------------- utilities */

static struct timeval
redis_tv_us(uint64_t us)
{
    struct timeval tv;
    tv.tv_sec = (time_t)(us / 1000000u);
    tv.tv_usec = (suseconds_t)(us % 1000000u);
    return tv;
}

/* Parse an unsigned decimal of exactly len digits, at most max. */
static int
redis_parse_ulong(const char *s, size_t len, unsigned long max,
                  unsigned long *out)
{
    unsigned long v = 0;
    size_t i;

    if (len == 0 || len > 10)
        return RS_EINVAL;
    for (i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return RS_EINVAL;
        v = v * 10 + (unsigned long)(s[i] - '0');
    }
    if (v > max)
        return RS_EINVAL;
    *out = v;
    return 0;
}

/* Percent-decode s[0..len) into a new string. Embedded NULs are refused:
 * every decoded part ends up in a C string. */
static int
redis_pct_decode(const char *s, size_t len, char **out)
{
    char *d = rs_malloc(len + 1);
    size_t i, n = 0;
    int rc = 0;

    if (d == NULL) {
        rc = RS_ENOMEM;
        goto out;
    }
    for (i = 0; i < len; i++) {
        char c = s[i];
        if (c == '%') {
            int hi, lo;
            if (i + 2 >= len) {
                rc = RS_EINVAL;
                goto out;
            }
            hi = rs_hexval(s[i + 1]);
            lo = rs_hexval(s[i + 2]);
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
                rc = RS_EINVAL;
                goto out;
            }
            c = (char)(hi * 16 + lo);
            i += 2;
        }
        d[n++] = c;
    }
    d[n] = '\0';
    *out = d;
    d = NULL;
out:
    rs_free(d);
    return rc;
}

/* ------------------------------------------------------------ URL parsing */

/* Percent-decode one URL parameter's value into *out (NULL when empty);
 * what names the parameter in the reasons given. */
static const char *
redis_query_str(const char *v, size_t vlen, char **out, const char *twice,
                const char *bad)
{
    int rc;

    if (*out != NULL)
        return twice;
    rc = redis_pct_decode(v, vlen, out);
    if (rc == RS_ENOMEM)
        return redis_oom;
    if (rc != 0)
        return bad;
    if ((*out)[0] == '\0') {
        rs_free(*out);
        *out = NULL;
    }
    return NULL;
}

/* ?db=N&password=P, shared by all URL forms; sentinel:// also takes
 * sentinel-user and sentinel-password (s_user, s_pass non-NULL). q is raw
 * (still encoded). */
static const char *
redis_parse_query(struct rs_redis *r, const char *q, bool *db_seen,
                  char **s_user, char **s_pass)
{
    const char *p = q;

    while (*p != '\0') {
        const char *amp = strchr(p, '&');
        size_t seglen = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', seglen);
        size_t klen = eq ? (size_t)(eq - p) : seglen;
        const char *v = eq ? eq + 1 : p + seglen;
        size_t vlen = (size_t)(p + seglen - v);

        if (seglen == 0) {
            p = amp ? amp + 1 : p + seglen;
            continue;
        }
        if (eq == NULL)
            return "URL parameter without a value";
        if (klen == 2 && memcmp(p, "db", 2) == 0) {
            if (*db_seen)
                return "database given twice in the URL";
            if (redis_parse_ulong(v, vlen, INT_MAX, &r->db) != 0)
                return "URL database must be a decimal number";
            *db_seen = true;
        } else if (klen == 8 && memcmp(p, "password", 8) == 0) {
            const char *err = redis_query_str(
                v, vlen, &r->password, "password given twice in the URL",
                "bad percent-encoding in the URL password");
            if (err != NULL)
                return err;
        } else if (s_pass != NULL && klen == 17 &&
                   memcmp(p, "sentinel-password", 17) == 0) {
            const char *err = redis_query_str(
                v, vlen, s_pass, "sentinel-password given twice in the URL",
                "bad percent-encoding in the URL's sentinel-password");
            if (err != NULL)
                return err;
        } else if (s_user != NULL && klen == 13 &&
                   memcmp(p, "sentinel-user", 13) == 0) {
            const char *err = redis_query_str(
                v, vlen, s_user, "sentinel-user given twice in the URL",
                "bad percent-encoding in the URL's sentinel-user");
            if (err != NULL)
                return err;
        } else if (s_pass != NULL) {
            return "unknown URL parameter (db, password, sentinel-user and "
                   "sentinel-password are known)";
        } else {
            return "unknown URL parameter (only db and password are known)";
        }
        p = amp ? amp + 1 : p + seglen;
    }
    return NULL;
}

/* unix:///absolute/path[?query]: curl would take the first path segment
 * for a host, so this form is split by hand; it has no authority. */
static const char *
redis_parse_unix(struct rs_redis *r, const char *url)
{
    const char *p = url + strlen("unix://");
    size_t plen = strcspn(p, "?#");
    bool db_seen = false;
    int rc;

    if (p[plen] == '#')
        return "URL fragments are not allowed";
    if (plen == 0 || p[0] != '/')
        return "unix:// URL needs an absolute path (unix:///path)";
    rc = redis_pct_decode(p, plen, &r->path);
    if (rc == RS_ENOMEM)
        return redis_oom;
    if (rc != 0)
        return "bad percent-encoding in the unix socket path";
    if (strlen(r->path) >= sizeof(((struct sockaddr_un *)NULL)->sun_path))
        return "unix socket path too long";
    if (p[plen] == '?') {
        const char *q = p + plen + 1;
        if (strchr(q, '#') != NULL)
            return "URL fragments are not allowed";
        return redis_parse_query(r, q, &db_seen, NULL, NULL);
    }
    return NULL;
}

static const char *
redis_parse_tcp(struct rs_redis *r, const char *url)
{
    const char *err = NULL;
    CURLU *u = NULL;
    CURLUcode uc;
    char *scheme = NULL, *user = NULL, *pass = NULL, *host = NULL;
    char *port = NULL, *path = NULL, *query = NULL, *frag = NULL;
    const char *after = strstr(url, "://");
    bool db_seen = false;
    size_t hlen;

    /* curl reads "redis:///3" as host 0.0.0.3; an empty authority is a
     * mistake here, never a default. */
    if (after == NULL || after[3] == '\0' || strchr("/?#", after[3]) != NULL) {
        err = "redis:// URL has no host";
        goto out;
    }
    u = curl_url();
    if (u == NULL) {
        err = redis_oom;
        goto out;
    }
    uc = curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME);
    if (uc == CURLUE_OUT_OF_MEMORY) {
        err = redis_oom;
        goto out;
    }
    if (uc == CURLUE_BAD_PORT_NUMBER) {
        err = "bad port in redis:// URL";
        goto out;
    }
    if (uc != CURLUE_OK) {
        err = "malformed redis:// URL";
        goto out;
    }
    if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK) {
        err = "malformed redis:// URL";
        goto out;
    }
    if (strcmp(scheme, "rediss") == 0) {
        err = "rediss:// (TLS) is not supported: Debian's hiredis 0.14 has "
              "no TLS; reach Redis through a TLS tunnel ending on loopback "
              "(stunnel, spiped) and give its redis://127.0.0.1:PORT";
        goto out;
    }
    if (strcmp(scheme, "redis") != 0) {
        err = "URL scheme must be redis://, unix:// or sentinel://";
        goto out;
    }
    if (curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0) == CURLUE_OK) {
        err = "URL fragments are not allowed";
        goto out;
    }

    /* Decoding fails for bad escapes and for %00, which would otherwise
     * cut a password short without a word. */
    uc = curl_url_get(u, CURLUPART_USER, &user, CURLU_URLDECODE);
    if (uc != CURLUE_OK && uc != CURLUE_NO_USER) {
        err = uc == CURLUE_OUT_OF_MEMORY ? redis_oom
                                         : "bad user name in redis:// URL";
        goto out;
    }
    uc = curl_url_get(u, CURLUPART_PASSWORD, &pass, CURLU_URLDECODE);
    if (uc != CURLUE_OK && uc != CURLUE_NO_PASSWORD) {
        err = uc == CURLUE_OUT_OF_MEMORY ? redis_oom
                                         : "bad password in redis:// URL";
        goto out;
    }
    if (user != NULL && user[0] != '\0') {
        r->user = rs_strdup(user);
        if (r->user == NULL) {
            err = redis_oom;
            goto out;
        }
    }
    if (pass != NULL && pass[0] != '\0') {
        r->password = rs_strdup(pass);
        if (r->password == NULL) {
            err = redis_oom;
            goto out;
        }
    }

    if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
        err = "redis:// URL has no host";
        goto out;
    }
    /* IPv6 literals come back bracketed; hiredis wants them bare. */
    hlen = strlen(host);
    if (hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']')
        r->host = rs_strndup(host + 1, hlen - 2);
    else
        r->host = rs_strdup(host);
    if (r->host == NULL) {
        err = redis_oom;
        goto out;
    }

    uc = curl_url_get(u, CURLUPART_PORT, &port, 0);
    if (uc == CURLUE_OK) {
        unsigned long v;
        if (redis_parse_ulong(port, strlen(port), 65535, &v) != 0 || v == 0) {
            err = "bad port in redis:// URL";
            goto out;
        }
        r->port = (int)v;
    } else if (uc == CURLUE_NO_PORT) {
        r->port = REDIS_DEFAULT_PORT;
    } else {
        err = "bad port in redis:// URL";
        goto out;
    }

    if (curl_url_get(u, CURLUPART_PATH, &path, 0) == CURLUE_OK &&
        path[0] == '/' && path[1] != '\0') {
        if (redis_parse_ulong(path + 1, strlen(path + 1), INT_MAX, &r->db)
            != 0) {
            err = "redis:// URL path must be a database number (/N)";
            goto out;
        }
        db_seen = true;
    }
    if (curl_url_get(u, CURLUPART_QUERY, &query, 0) == CURLUE_OK)
        err = redis_parse_query(r, query, &db_seen, NULL, NULL);
out:
    curl_free(scheme);
    curl_free(user);
    curl_free(pass);
    curl_free(host);
    curl_free(port);
    curl_free(path);
    curl_free(query);
    curl_free(frag);
    curl_url_cleanup(u);
    return err;
}

/* redis_pct_decode with its failure as a reason: out of memory, or bad. */
static const char *
redis_decode_part(const char *s, size_t len, char **out, const char *bad)
{
    int rc = redis_pct_decode(s, len, out);

    if (rc == RS_ENOMEM)
        return redis_oom;
    return rc != 0 ? bad : NULL;
}

/* One "HOST[:PORT]" or "[V6]:PORT" of a sentinel:// authority, s[0..len),
 * into node (its host malloc'ed into *hostp, which the caller frees). */
static const char *
redis_parse_sentinel_node(const char *s, size_t len, char **hostp,
                          struct rs_sentinel_node *node)
{
    const char *hs = s, *colon = NULL;
    size_t hlen = len;
    unsigned long port = RS_SENTINEL_DEFAULT_PORT;
    char *host;
    const char *err;

    if (len > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (close == NULL)
            return "bad IPv6 address in sentinel:// URL";
        hs = s + 1;
        hlen = (size_t)(close - hs);
        if (close + 1 < s + len) {
            if (close[1] != ':')
                return "bad IPv6 address in sentinel:// URL";
            colon = close + 1;
        }
    } else {
        colon = memchr(s, ':', len);
        if (colon != NULL)
            hlen = (size_t)(colon - s);
    }
    if (hlen == 0)
        return "empty Sentinel host in sentinel:// URL";
    if (colon != NULL &&
        (redis_parse_ulong(colon + 1, (size_t)(s + len - colon - 1), 65535,
                           &port) != 0 || port == 0))
        return "bad Sentinel port in sentinel:// URL";
    err = redis_decode_part(hs, hlen, &host,
                            "bad Sentinel host in sentinel:// URL");
    if (err != NULL)
        return err;
    *hostp = host;
    node->host = host;
    node->port = (int)port;
    return NULL;
}

/*
 * sentinel://[[user]:password@]H[:P][,H[:P]...]/MASTER[?query]. curl takes
 * one host per URL, so the authority is split here; the user and password
 * are the Redis node's (as in redis://), the Sentinels' own come in the
 * query. Builds r->sentinel, whose watch calls redis_on_switch.
 */
static const char *
redis_parse_sentinel(struct rs_redis *r, const char *url)
{
    struct rs_sentinel_node nodes[RS_SENTINEL_MAX_NODES];
    char *hosts[RS_SENTINEL_MAX_NODES];
    struct rs_sentinel_opts so;
    size_t n = 0, i, alen, plen;
    const char *auth = url + strlen("sentinel://");
    const char *at, *p, *end, *name;
    char *s_user = NULL, *s_pass = NULL;
    bool db_seen = false;
    const char *err = NULL;

    memset(nodes, 0, sizeof(nodes));
    memset(hosts, 0, sizeof(hosts));
    alen = strcspn(auth, "/?#");
    if (auth[alen] != '/') {
        err = "sentinel:// URL needs a master name (sentinel://H:P/NAME)";
        goto out;
    }
    /* The last '@' ends the user info: a password may hold '@'s (encoded
     * or not), a host never does. */
    at = NULL;
    for (p = auth; p < auth + alen; p++) {
        if (*p == '@')
            at = p;
    }
    if (at != NULL) {
        const char *colon = memchr(auth, ':', (size_t)(at - auth));
        size_t ulen = colon ? (size_t)(colon - auth) : (size_t)(at - auth);

        if (ulen > 0) {
            err = redis_decode_part(auth, ulen, &r->user,
                                    "bad user name in sentinel:// URL");
            if (err != NULL)
                goto out;
        }
        if (colon != NULL && colon + 1 < at) {
            err = redis_decode_part(colon + 1, (size_t)(at - colon - 1),
                                    &r->password,
                                    "bad password in sentinel:// URL");
            if (err != NULL)
                goto out;
        }
        p = at + 1;
    } else {
        p = auth;
    }
    end = auth + alen;
    if (p == end) {
        err = "sentinel:// URL names no Sentinel";
        goto out;
    }
    while (p <= end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;

        if (n == RS_SENTINEL_MAX_NODES) {
            err = "too many Sentinels in sentinel:// URL (at most 16)";
            goto out;
        }
        err = redis_parse_sentinel_node(p, (size_t)(stop - p), &hosts[n],
                                        &nodes[n]);
        if (err != NULL)
            goto out;
        n++;
        p = stop + 1;
    }

    name = auth + alen + 1;
    plen = strcspn(name, "?#");
    if (name[plen] == '#' || strchr(name, '#') != NULL) {
        err = "URL fragments are not allowed";
        goto out;
    }
    if (plen == 0) {
        err = "sentinel:// URL needs a master name (sentinel://H:P/NAME)";
        goto out;
    }
    err = redis_decode_part(name, plen, &r->master,
                            "bad master name in sentinel:// URL");
    if (err != NULL)
        goto out;
    if (!redis_name_ok(r->master) || strchr(r->master, '/') != NULL) {
        err = "bad master name in sentinel:// URL (printable, no spaces "
              "or slashes)";
        goto out;
    }
    if (name[plen] == '?') {
        err = redis_parse_query(r, name + plen + 1, &db_seen, &s_user,
                                &s_pass);
        if (err != NULL)
            goto out;
    }
    if (s_user != NULL && s_pass == NULL) {
        err = "sentinel-user in the URL needs a sentinel-password";
        goto out;
    }

    memset(&so, 0, sizeof(so));
    so.nodes = nodes;
    so.n_nodes = n;
    so.master = r->master;
    so.user = s_user;
    so.password = s_pass;
    so.timeout_ms = r->connect_timeout_ms;
    so.retry_min_ms = r->backoff_min_ms;
    so.retry_max_ms = r->backoff_max_ms;
    so.on_switch = redis_on_switch;
    so.ud = r;
    r->sentinel = rs_sentinel_new(r->base, &so, &err);
out:
    for (i = 0; i < RS_SENTINEL_MAX_NODES; i++)
        rs_free(hosts[i]);
    rs_free(s_user);
    rs_free(s_pass);
    return err;
}

/* Fills r's target fields; NULL on success, else a static reason. */
static const char *
redis_parse_url(struct rs_redis *r, const char *url)
{
    const char *err;

    if (url == NULL || url[0] == '\0')
        return "no Redis URL given";
    if (strncasecmp(url, "unix://", 7) == 0)
        err = redis_parse_unix(r, url);
    else if (strncasecmp(url, "sentinel://", 11) == 0)
        err = redis_parse_sentinel(r, url);
    else
        err = redis_parse_tcp(r, url);
    if (err == NULL && r->user != NULL && r->password == NULL)
        err = "a user name in the URL needs a password";
    return err;
}

/* CLIENT SETNAME refuses spaces and anything outside printable ASCII; a
 * name that can never be set would keep the link down forever, so it is
 * refused up front. */
static bool
redis_name_ok(const char *name)
{
    const char *p;

    if (name[0] == '\0')
        return false;
    for (p = name; *p != '\0'; p++) {
        if (*p < '!' || *p > '~')
            return false;
    }
    return true;
}

/* ------------------------------------------------------ the command FIFO */

static void
redis_mq_unlink(struct rs_redis *r, struct redis_cmd *c)
{
    if (c->mq_prev != NULL)
        c->mq_prev->mq_next = c->mq_next;
    else
        r->mq_head = c->mq_next;
    if (c->mq_next != NULL)
        c->mq_next->mq_prev = c->mq_prev;
    else
        r->mq_tail = c->mq_prev;
    c->mq_prev = c->mq_next = NULL;
    c->in_mq = false;
}

static void
redis_mq_push(struct rs_redis *r, struct redis_cmd *c)
{
    while (r->mq_tail != NULL && r->mq_tail->deadline_us >= c->deadline_us)
        redis_mq_unlink(r, r->mq_tail);
    c->mq_prev = r->mq_tail;
    c->mq_next = NULL;
    if (r->mq_tail != NULL)
        r->mq_tail->mq_next = c;
    else
        r->mq_head = c;
    r->mq_tail = c;
    c->in_mq = true;
}

static void
redis_fifo_push(struct rs_redis *r, struct redis_cmd *c)
{
    c->next = NULL;
    if (r->tail != NULL)
        r->tail->next = c;
    else
        r->head = c;
    r->tail = c;
    if (c->timeout_ms != RS_REDIS_NO_TIMEOUT)
        redis_mq_push(r, c);
    r->stats.pending++;
}

/* Detach the oldest command. If it is in the minima queue it is that
 * queue's head, being the oldest of all. */
static struct redis_cmd *
redis_fifo_pop(struct rs_redis *r)
{
    struct redis_cmd *c = r->head;

    if (c == NULL)
        return NULL;
    r->head = c->next;
    if (r->head == NULL)
        r->tail = NULL;
    if (c->in_mq)
        redis_mq_unlink(r, c);
    r->stats.pending--;
    return c;
}

/* ---------------------------------------------------------------- timers */

static int
redis_cmd_timer_arm(struct rs_redis *r, uint64_t due_us)
{
    uint64_t now = rs_time_mono_us();
    struct timeval tv = redis_tv_us(due_us > now ? due_us - now : 0);

    if (event_add(r->cmd_timer, &tv) != 0)
        return RS_ENOMEM;
    r->cmd_timer_due_us = due_us;
    return 0;
}

static void
redis_cmd_timer_stop(struct rs_redis *r)
{
    event_del(r->cmd_timer);
    r->cmd_timer_due_us = 0;
}

static int
redis_state_timer_arm(struct rs_redis *r, uint64_t ms)
{
    struct timeval tv = redis_tv_us(ms * 1000u);

    if (event_add(r->state_timer, &tv) != 0)
        return RS_ENOMEM;
    return 0;
}


/* ------------------------------------------------------ the state machine */

/* Frames of ours that may touch r after calling out to user code hold it;
 * the last release of a CLOSED object frees it. */
static void
redis_hold(struct rs_redis *r)
{
    r->depth++;
}

static void
redis_destroy(struct rs_redis *r)
{
    if (r->state_timer != NULL)
        event_free(r->state_timer);
    if (r->cmd_timer != NULL)
        event_free(r->cmd_timer);
    rs_sentinel_free(r->sentinel);
    rs_free(r->master);
    rs_free(r->path);
    rs_free(r->host);
    rs_free(r->user);
    rs_free(r->password);
    rs_free(r->client_name);
    rs_free(r);
}

static void
redis_release(struct rs_redis *r)
{
    r->depth--;
    if (r->depth == 0 && r->state == RS_REDIS_CLOSED)
        redis_destroy(r);
}

static bool
redis_closed(const struct rs_redis *r)
{
    return r->state == RS_REDIS_CLOSED;
}

/* The one place the state changes. The library does not print, so the
 * from -> to transition is reported through on_state (which knows the
 * previous state it was told). */
static void
redis_set_state(struct rs_redis *r, enum rs_redis_state to, const char *why)
{
    if (r->state == to)
        return;
    r->state = to;
    if (r->on_state == NULL || r->in_on_state)
        return;
    r->in_on_state = true;
    r->on_state(r->ud, to, to == RS_REDIS_DOWN ? why : NULL);
    r->in_on_state = false;
}

static void redis_set_errstr(struct rs_redis *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
redis_set_errstr(struct rs_redis *r, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(r->errstr, sizeof(r->errstr), fmt, ap);
    va_end(ap);
}

/* Run each pending callback once, oldest first: rc for all of them except
 * timed_out, which gets RS_ETIMEDOUT. A callback may free r (CLOSED) or
 * issue commands (refused: we are not READY), so the FIFO is re-read after
 * every call and the loop ends when it is empty. */
static void
redis_fail_pending(struct rs_redis *r, const struct redis_cmd *timed_out,
                   int rc)
{
    for (;;) {
        struct redis_cmd *c = redis_fifo_pop(r);
        rs_redis_reply_cb cb;
        void *ud;
        int crc;

        if (c == NULL)
            break;
        cb = c->cb;
        ud = c->ud;
        crc = c == timed_out ? RS_ETIMEDOUT : rc;
        rs_free(c);
        r->stats.failures++;
        cb(ud, crc, NULL);
    }
}

/* Forget the hiredis context without freeing it: hiredis is tearing it
 * down itself (connect failure, EOF, I/O or protocol error). */
static void
redis_link_detach(struct rs_redis *r)
{
    if (r->ac != NULL) {
        r->ac->data = NULL;
        r->ac = NULL;
    }
}

/* Drop the hiredis context ourselves. Inside one of its callbacks hiredis
 * defers the free (REDIS_IN_CALLBACK) until that callback returns; either
 * way the pending hiredis callbacks it runs with NULL replies, and its
 * onDisconnect, find ac->data NULL and do nothing: our FIFO is failed by
 * us, once. */
static void
redis_link_close(struct rs_redis *r)
{
    redisAsyncContext *ac = r->ac;

    if (ac == NULL)
        return;
    ac->data = NULL;
    r->ac = NULL;
    redisAsyncFree(ac);
}

/* DOWN: the link is already detached or closed. Report, start the backoff,
 * then fail what was in flight (RS_EIO; timed_out gets RS_ETIMEDOUT). */
static void
redis_down(struct rs_redis *r, const struct redis_cmd *timed_out)
{
    uint64_t delay;

    event_del(r->state_timer);
    redis_cmd_timer_stop(r);
    r->hello_left = 0;
    r->failures++;
    redis_set_state(r, RS_REDIS_DOWN, r->errstr);
    if (redis_closed(r))
        return;
    delay = rs_backoff_delay(&r->backoff, r->failures);
    if (redis_state_timer_arm(r, delay) != 0) {
        /* Without a timer nothing would ever retry; say so. */
        snprintf(r->errstr, sizeof(r->errstr),
                 "cannot arm the reconnect timer: out of memory");
    }
    redis_fail_pending(r, timed_out, RS_EIO);
}

/* hiredis lost the connection on its own and is freeing the context. */
static void
redis_lost(struct rs_redis *r)
{
    const char *why = "connection closed";

    if (r->ac != NULL && r->ac->c.err != 0 && r->ac->c.errstr[0] != '\0')
        why = r->ac->c.errstr;
    if (r->state == RS_REDIS_CONNECTING)
        redis_set_errstr(r, "connect to %s failed: %s",
                         r->path ? r->path : r->host, why);
    else
        redis_set_errstr(r, "connection to %s lost: %s",
                         r->path ? r->path : r->host, why);
    redis_link_detach(r);
    redis_down(r, NULL);
}

/* We give up on the connection (timeout, failed handshake step, a reply
 * that does not match our FIFO): close it and go DOWN. r->errstr is set. */
static void
redis_reset(struct rs_redis *r, const struct redis_cmd *timed_out)
{
    redis_link_close(r);
    redis_down(r, timed_out);
}

static void
redis_ready(struct rs_redis *r)
{
    event_del(r->state_timer);
    r->failures = 0;
    if (r->ever_ready)
        r->stats.reconnects++;
    r->ever_ready = true;
    if (r->sentinel != NULL) {
        /* Counted where ROLE said master, not where a Sentinel named an
         * address: one that lags behind can name the old primary. */
        if (r->primary[0] != '\0' && strcmp(r->primary, r->addr) != 0) {
            r->stats.failovers++;
            /* debug: every link of a process sees the same change, and
             * the program logs it once (rshub: its publish link's) */
            rs_log_kv(RS_LOG_DEBUG, "redis primary changed", "from",
                      r->primary, "to", r->addr, "master", r->master, "link",
                      r->client_name, NULL);
        }
        snprintf(r->primary, sizeof(r->primary), "%s", r->addr);
    }
    redis_set_state(r, RS_REDIS_READY, NULL);
}

/* ------------------------------------------------------ hiredis callbacks */

/* sentinel:// only: an error reply that says this node is not (or not
 * yet) a usable primary: READONLY (a replica now), MASTERDOWN (a replica
 * cut off from its primary), LOADING (restarted, reading its data). why
 * gets the word. Only the top-level reply is looked at. */
static bool
redis_reply_moved(const struct rs_redis *r, const redisReply *reply,
                  char *why, size_t whysz)
{
    static const char *const words[] = { "READONLY", "MASTERDOWN",
                                         "LOADING" };
    size_t i;

    if (r->sentinel == NULL || reply->type != REDIS_REPLY_ERROR ||
        reply->str == NULL)
        return false;
    for (i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        size_t n = strlen(words[i]);

        if (reply->len >= n && strncmp(reply->str, words[i], n) == 0 &&
            (reply->len == n || reply->str[n] == ' ')) {
            snprintf(why, whysz, "%s", words[i]);
            return true;
        }
    }
    return false;
}


static void
redis_on_connect(const redisAsyncContext *ac, int status)
{
    struct rs_redis *r = ac->data;

    /* Success needs nothing: the handshake is queued already. On failure
     * hiredis frees the context right after we return, so it must not be
     * freed here. */
    if (r == NULL || status == REDIS_OK)
        return;
    redis_hold(r);
    redis_lost(r);
    redis_release(r);
}

static void
redis_on_disconnect(const redisAsyncContext *ac, int status)
{
    struct rs_redis *r = ac->data;

    (void)status;
    if (r == NULL)
        return;
    redis_hold(r);
    redis_lost(r);
    redis_release(r);
}

static void
redis_on_hello_reply(redisAsyncContext *ac, void *reply_, void *privdata)
{
    struct rs_redis *r = ac->data;
    const redisReply *reply = reply_;
    unsigned step = (unsigned)(uintptr_t)privdata;

    if (r == NULL)
        return;
    redis_hold(r);
    if (reply == NULL) {
        redis_lost(r);
        goto out;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        redis_set_errstr(r, "%s failed: %s", redis_hello_name[step],
                         reply->str);
        redis_reset(r, NULL);
        goto out;
    }
    if (step == REDIS_HELLO_ROLE) {
        /* A replica, or a primary being demoted that a Sentinel still
         * names: ask again after the backoff. */
        const char *role = "?";

        if (reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
            reply->element[0]->type == REDIS_REPLY_STRING)
            role = reply->element[0]->str;
        if (strcmp(role, "master") != 0) {
            redis_set_errstr(r, "%s is not the primary of '%s' (ROLE: %s)",
                             r->addr, r->master, role);
            redis_reset(r, NULL);
            goto out;
        }
    } else if (reply->type != REDIS_REPLY_STATUS ||
               strcmp(reply->str, redis_hello_expect[step]) != 0) {
        redis_set_errstr(r, "%s: unexpected reply from %s",
                         redis_hello_name[step], r->path ? r->path : r->host);
        redis_reset(r, NULL);
        goto out;
    }
    r->hello_left--;
    if (r->hello_left == 0)
        redis_ready(r);
out:
    redis_release(r);
}

static void
redis_on_reply(redisAsyncContext *ac, void *reply_, void *privdata)
{
    struct rs_redis *r = ac->data;
    const redisReply *reply = reply_;
    struct redis_cmd *c;
    rs_redis_reply_cb cb;
    void *ud;
    uint64_t rtt;
    bool moved;
    char why[24];

    if (r == NULL)
        return;
    redis_hold(r);
    if (reply == NULL) {
        redis_lost(r);
        goto out;
    }
    /* Kept before the callback: the reply is hiredis's, and the caller
     * sees it first. */
    moved = redis_reply_moved(r, reply, why, sizeof(why));
    /* hiredis answers in the order it sent; if its callback list and our
     * FIFO ever disagree (e.g. it failed to record a callback when out of
     * memory) every later reply would go to the wrong caller. */
    if (privdata == NULL || privdata != r->head) {
        redis_set_errstr(r, "reply order lost on %s; link reset",
                         r->path ? r->path : r->host);
        redis_reset(r, NULL);
        goto out;
    }
    c = redis_fifo_pop(r);
    rtt = rs_time_mono_us() - c->sent_us;
    r->stats.replies++;
    r->stats.rtt_us_sum += rtt;
    if (rtt > r->stats.rtt_us_max)
        r->stats.rtt_us_max = rtt;
    if (r->head == NULL)
        redis_cmd_timer_stop(r);
    cb = c->cb;
    ud = c->ud;
    rs_free(c);
    cb(ud, 0, reply);
    if (moved && !redis_closed(r) && r->state == RS_REDIS_READY &&
        r->ac == ac) {
        redis_set_errstr(r, "%s answered %s: asking the Sentinels again",
                         r->addr, why);
        redis_reset(r, NULL);
    }
out:
    redis_release(r);
}

/* ----------------------------------------------------------- the states */

static int
redis_hello_send(struct rs_redis *r, enum redis_hello step, int argc,
                 const char **argv)
{
    if (redisAsyncCommandArgv(r->ac, redis_on_hello_reply,
                              (void *)(uintptr_t)step, argc, argv, NULL)
        != REDIS_OK)
        return RS_ENOMEM;
    r->hello_left++;
    return 0;
}

/* AUTH, SELECT, CLIENT SETNAME as configured, then PING, pipelined: one
 * round trip, and the PING proves a Redis answers even when nothing else
 * is sent. */
static int
redis_hello_queue(struct rs_redis *r)
{
    const char *argv[3];
    char dbbuf[24];
    int rc = 0;

    r->hello_left = 0;
    if (r->password != NULL) {
        int argc = 0;
        argv[argc++] = "AUTH";
        if (r->user != NULL)
            argv[argc++] = r->user;
        argv[argc++] = r->password;
        rc = redis_hello_send(r, REDIS_HELLO_AUTH, argc, argv);
        if (rc != 0)
            goto out;
    }
    if (r->db != 0) {
        snprintf(dbbuf, sizeof(dbbuf), "%lu", r->db);
        argv[0] = "SELECT";
        argv[1] = dbbuf;
        rc = redis_hello_send(r, REDIS_HELLO_SELECT, 2, argv);
        if (rc != 0)
            goto out;
    }
    if (r->client_name != NULL) {
        argv[0] = "CLIENT";
        argv[1] = "SETNAME";
        argv[2] = r->client_name;
        rc = redis_hello_send(r, REDIS_HELLO_SETNAME, 3, argv);
        if (rc != 0)
            goto out;
    }
    argv[0] = "PING";
    rc = redis_hello_send(r, REDIS_HELLO_PING, 1, argv);
    if (rc != 0 || r->sentinel == NULL)
        goto out;
    argv[0] = "ROLE";
    rc = redis_hello_send(r, REDIS_HELLO_ROLE, 1, argv);
out:
    return rc;
}

/* CONNECTING: start one attempt. hiredis 0.14 has no connect timeout, so
 * the state timer bounds connect and handshake together. Note that a host
 * name is resolved by hiredis with a blocking getaddrinfo(). */
static void
redis_connecting(struct rs_redis *r)
{
    const char *where = r->path ? r->path : r->host;
    redisAsyncContext *ac;

    if (r->path != NULL)
        snprintf(r->addr, sizeof(r->addr), "%s", r->path);
    else if (strchr(r->host, ':') != NULL)
        snprintf(r->addr, sizeof(r->addr), "[%s]:%d", r->host, r->port);
    else
        snprintf(r->addr, sizeof(r->addr), "%s:%d", r->host, r->port);
    redis_set_state(r, RS_REDIS_CONNECTING, NULL);
    if (redis_closed(r))
        return;
    if (r->path != NULL)
        ac = redisAsyncConnectUnix(r->path);
    else
        ac = redisAsyncConnect(r->host, r->port);
    if (ac == NULL) {
        redis_set_errstr(r, "connect to %s failed: %s", where, redis_oom);
        redis_down(r, NULL);
        return;
    }
    if (ac->err != 0) {
        redis_set_errstr(r, "connect to %s failed: %s", where, ac->c.errstr);
        redisAsyncFree(ac);
        redis_down(r, NULL);
        return;
    }
    if (redisLibeventAttach(ac, r->base) != REDIS_OK) {
        redis_set_errstr(r, "connect to %s failed: %s", where,
                         "cannot attach to the event loop");
        redisAsyncFree(ac);
        redis_down(r, NULL);
        return;
    }
    ac->data = r;
    r->ac = ac;
    redisAsyncSetConnectCallback(ac, redis_on_connect);
    redisAsyncSetDisconnectCallback(ac, redis_on_disconnect);
    if (redis_hello_queue(r) != 0 ||
        redis_state_timer_arm(r, r->connect_timeout_ms) != 0) {
        redis_set_errstr(r, "connect to %s failed: %s", where, redis_oom);
        redis_reset(r, NULL);
        return;
    }
}

static void
redis_on_resolved(void *ud, int rc, const char *host, int port,
                  const char *errstr)
{
    struct rs_redis *r = ud;
    char *h;

    if (rc == RS_ECANCELED || redis_closed(r))
        return;
    redis_hold(r);
    if (r->state != RS_REDIS_RESOLVING)
        goto out;
    if (rc != 0) {
        redis_set_errstr(r, "%s", errstr);
        redis_down(r, NULL);
        goto out;
    }
    h = rs_strdup(host);
    if (h == NULL) {
        redis_set_errstr(r, "resolving '%s': %s", r->master, redis_oom);
        redis_down(r, NULL);
        goto out;
    }
    rs_free(r->host);
    r->host = h;
    r->port = port;
    redis_connecting(r);
out:
    redis_release(r);
}

/* RESOLVING (sentinel:// only): ask the Sentinels where the primary is;
 * redis_on_resolved goes on to CONNECTING, or DOWN. Each Sentinel asked
 * is bounded by the connect timeout, so this state is too. */
static void
redis_resolving(struct rs_redis *r)
{
    int rc;

    redis_set_state(r, RS_REDIS_RESOLVING, NULL);
    if (redis_closed(r))
        return;
    rc = rs_sentinel_resolve(r->sentinel, redis_on_resolved, r);
    if (rc != 0) {
        redis_set_errstr(r, "cannot ask the Sentinels of '%s': %s",
                         r->master, rs_strerror(rc));
        redis_down(r, NULL);
    }
}

/* A Sentinel announced +switch-master for our master. A link on another
 * node drops (its pending commands get RS_EIO) and asks again at once; a
 * link waiting out its backoff stops waiting. Nothing to do while a
 * resolve is in flight: ROLE checks whatever it finds. */
static void
redis_on_switch(void *ud, const char *host, int port)
{
    struct rs_redis *r = ud;
    char to[300];

    if (redis_closed(r))
        return;
    redis_hold(r);
    if (strchr(host, ':') != NULL)
        snprintf(to, sizeof(to), "[%s]:%d", host, port);
    else
        snprintf(to, sizeof(to), "%s:%d", host, port);
    switch (r->state) {
    case RS_REDIS_CONNECTING:
    case RS_REDIS_READY:
        if (strcmp(to, r->addr) == 0)
            break;
        redis_set_errstr(r, "Sentinel: the primary of '%s' moved from %s "
                            "to %s", r->master, r->addr, to);
        redis_reset(r, NULL);
        if (!redis_closed(r) && r->state == RS_REDIS_DOWN)
            (void)redis_state_timer_arm(r, 0);
        break;
    case RS_REDIS_DOWN:
        (void)redis_state_timer_arm(r, 0);
        break;
    case RS_REDIS_RESOLVING:
    case RS_REDIS_CLOSED:
        break;
    }
    redis_release(r);
}

static void
redis_on_state_timer(evutil_socket_t fd, short what, void *arg)
{
    struct rs_redis *r = arg;

    (void)fd;
    (void)what;
    redis_hold(r);
    switch (r->state) {
    case RS_REDIS_CONNECTING:
        if (r->ac == NULL) {
            /* The first attempt, deferred out of rs_redis_new(). */
            redis_connecting(r);
            break;
        }
        redis_set_errstr(r, "connect to %s timed out after %u ms",
                         r->path ? r->path : r->host, r->connect_timeout_ms);
        redis_reset(r, NULL);
        break;
    case RS_REDIS_DOWN:
        if (r->sentinel != NULL)
            redis_resolving(r);
        else
            redis_connecting(r);
        break;
    case RS_REDIS_RESOLVING:
        /* The first resolve, deferred out of rs_redis_new(); the state
         * timer is not armed while a resolve is in flight. */
        redis_resolving(r);
        break;
    case RS_REDIS_READY:
    case RS_REDIS_CLOSED:
        break;
    }
    redis_release(r);
}

/* The minima queue's head has the earliest deadline. Redis cannot cancel
 * one command, and a late reply would be taken for the next command's, so
 * a timeout resets the whole connection. */
static void
redis_on_cmd_timer(evutil_socket_t fd, short what, void *arg)
{
    struct rs_redis *r = arg;
    struct redis_cmd *c = r->mq_head;

    (void)fd;
    (void)what;
    redis_hold(r);
    r->cmd_timer_due_us = 0;
    if (c == NULL || r->state != RS_REDIS_READY)
        goto out;
    if (c->deadline_us > (uint64_t)rs_time_mono_us()) {
        if (redis_cmd_timer_arm(r, c->deadline_us) == 0)
            goto out;
        /* An unguarded command could wait forever: give up the link. */
        redis_set_errstr(r, "cannot arm the command timer: %s", redis_oom);
        redis_reset(r, NULL);
        goto out;
    }
    redis_set_errstr(r, "command timed out after %u ms on %s", c->timeout_ms,
                     r->path ? r->path : r->host);
    redis_reset(r, c);
out:
    redis_release(r);
}

/* ------------------------------------------------------------- public API */

struct rs_redis *
rs_redis_new(struct event_base *base, const struct rs_redis_opts *opts,
             const char **errstr)
{
    struct rs_redis *r = NULL;
    const char *err = NULL;

    if (base == NULL || opts == NULL) {
        err = "no event base or options given";
        goto out;
    }
    r = rs_calloc(1, sizeof(*r));
    if (r == NULL) {
        err = redis_oom;
        goto out;
    }
    r->base = base;
    r->state = RS_REDIS_CONNECTING;
    r->connect_timeout_ms = opts->connect_timeout_ms
                                ? opts->connect_timeout_ms
                                : REDIS_CONNECT_TIMEOUT_MS;
    r->command_timeout_ms = opts->command_timeout_ms
                                ? opts->command_timeout_ms
                                : REDIS_COMMAND_TIMEOUT_MS;
    r->backoff_min_ms = opts->backoff_min_ms ? opts->backoff_min_ms
                                             : REDIS_BACKOFF_MIN_MS;
    r->backoff_max_ms = opts->backoff_max_ms ? opts->backoff_max_ms
                                             : REDIS_BACKOFF_MAX_MS;
    r->max_pending = opts->max_pending ? opts->max_pending
                                       : REDIS_MAX_PENDING;
    r->on_state = opts->on_state;
    r->ud = opts->ud;
    if (r->backoff_min_ms > r->backoff_max_ms) {
        err = "backoff_min_ms is above backoff_max_ms";
        goto out;
    }
    r->backoff = (struct rs_backoff){ .first_ms = r->backoff_min_ms,
                                      .max_ms = r->backoff_max_ms,
                                      .below_pct = 25 };
    rs_backoff_seed(&r->backoff, rs_time_mono_us() ^ (uint64_t)(uintptr_t)r ^
                                 ((uint64_t)getpid() << 32));
    if (opts->client_name != NULL) {
        if (!redis_name_ok(opts->client_name)) {
            err = "client_name must be printable ASCII without spaces";
            goto out;
        }
        r->client_name = rs_strdup(opts->client_name);
        if (r->client_name == NULL) {
            err = redis_oom;
            goto out;
        }
    }
    err = redis_parse_url(r, opts->url);
    if (err != NULL)
        goto out;
    if (r->sentinel != NULL)
        r->state = RS_REDIS_RESOLVING;
    r->state_timer = evtimer_new(base, redis_on_state_timer, r);
    r->cmd_timer = evtimer_new(base, redis_on_cmd_timer, r);
    if (r->state_timer == NULL || r->cmd_timer == NULL) {
        err = redis_oom;
        goto out;
    }
    /* Connect on the loop's next turn rather than here, so that no
     * callback runs before the caller holds the object. */
    if (redis_state_timer_arm(r, 0) != 0) {
        err = redis_oom;
        goto out;
    }
out:
    if (err != NULL) {
        if (r != NULL)
            redis_destroy(r);
        r = NULL;
    }
    if (errstr != NULL)
        *errstr = err;
    return r;
}

/* Commands that would change how replies arrive on this connection (so
 * our FIFO would no longer match them) or undo what the handshake set up
 * and a reconnect restores. */
static bool
redis_cmd_refused(int argc, const char **argv, const size_t *argvlen)
{
    static const char *const refused[] = {
        "subscribe", "psubscribe", "ssubscribe", "unsubscribe",
        "punsubscribe", "sunsubscribe", "monitor", "sync", "psync",
        "hello", "reset", "auth", "select",
    };
    size_t len = argvlen ? argvlen[0] : strlen(argv[0]);
    size_t i;

    for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        if (len == strlen(refused[i]) &&
            strncasecmp(argv[0], refused[i], len) == 0)
            return true;
    }
    /* CLIENT REPLY OFF|SKIP silences replies the FIFO waits for. */
    if (len == 6 && strncasecmp(argv[0], "client", 6) == 0 && argc >= 2) {
        size_t len1 = argvlen ? argvlen[1] : strlen(argv[1]);
        if (len1 == 5 && strncasecmp(argv[1], "reply", 5) == 0)
            return true;
    }
    return false;
}

int
rs_redis_cmd(struct rs_redis *r, unsigned timeout_ms, rs_redis_reply_cb cb,
             void *ud, int argc, const char **argv, const size_t *argvlen)
{
    struct redis_cmd *c = NULL;
    int rc;

    if (r == NULL || cb == NULL || argc < 1 || argv == NULL ||
        argv[0] == NULL) {
        rc = RS_EINVAL;
        goto out;
    }
    if (r->state != RS_REDIS_READY || r->ac == NULL) {
        rc = RS_EAGAIN;
        goto out;
    }
    if (redis_cmd_refused(argc, argv, argvlen)) {
        rc = RS_EINVAL;
        goto out;
    }
    if (r->stats.pending >= r->max_pending) {
        rc = RS_ETOOBIG;
        goto out;
    }
    c = rs_calloc(1, sizeof(*c));
    if (c == NULL) {
        rc = RS_ENOMEM;
        goto out;
    }
    c->cb = cb;
    c->ud = ud;
    c->timeout_ms = timeout_ms ? timeout_ms : r->command_timeout_ms;
    c->sent_us = rs_time_mono_us();
    if (c->timeout_ms != RS_REDIS_NO_TIMEOUT) {
        c->deadline_us = c->sent_us + (uint64_t)c->timeout_ms * 1000u;
        /* Arm before sending: once hiredis has the command it is too late
         * to refuse it. The minima queue head can only move earlier by
         * this push, so arming for this deadline when it is the earliest
         * keeps "timer fires at or before the earliest deadline". */
        if ((r->cmd_timer_due_us == 0 ||
             c->deadline_us < r->cmd_timer_due_us) &&
            redis_cmd_timer_arm(r, c->deadline_us) != 0) {
            rc = RS_ENOMEM;
            goto out;
        }
    }
    if (redisAsyncCommandArgv(r->ac, redis_on_reply, c, argc, argv, argvlen)
        != REDIS_OK) {
        rc = RS_ENOMEM;
        goto out;
    }
    redis_fifo_push(r, c);
    r->stats.commands++;
    c = NULL;
    rc = 0;
out:
    rs_free(c);
    return rc;
}

enum rs_redis_state
rs_redis_state(const struct rs_redis *r)
{
    return r ? r->state : RS_REDIS_CLOSED;
}

const char *
rs_redis_errstr(const struct rs_redis *r)
{
    return r ? r->errstr : "";
}

void
rs_redis_stats(const struct rs_redis *r, struct rs_redis_stats *out)
{
    if (out == NULL)
        return;
    if (r == NULL) {
        memset(out, 0, sizeof(*out));
        return;
    }
    *out = r->stats;
}

/* CLOSED: close the link, stop the timers, cancel what is pending. When
 * this runs under one of r's own callbacks (which the header forbids, but
 * a chain through another object's callbacks can get there) the memory is
 * released by the outermost frame instead, on its way out. */
void
rs_redis_free(struct rs_redis *r)
{
    if (r == NULL || r->state == RS_REDIS_CLOSED)
        return;
    redis_hold(r);
    redis_link_close(r);
    event_del(r->state_timer);
    redis_cmd_timer_stop(r);
    redis_set_state(r, RS_REDIS_CLOSED, NULL);
    /* A resolve in flight is cancelled (redis_on_resolved ignores it), and
     * the watch's callbacks stop here. */
    rs_sentinel_free(r->sentinel);
    r->sentinel = NULL;
    redis_fail_pending(r, NULL, RS_ECANCELED);
    redis_release(r);
}

const char *
rs_redis_addr(const struct rs_redis *r)
{
    return r ? r->addr : "";
}
