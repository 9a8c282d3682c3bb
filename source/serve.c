/*
 * serve.c - the HTTP handlers of rssource (see serve.h). Layers: replies,
 * the router, generated documents, Resource List snapshots (including
 * requests parked while a fresh one is built), and resources with their
 * conditional-request logic.
 */
#include "serve.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define RS_LOG_MODULE "serve"
#include "changelog.h"
#include "mime.h"
#include "rs_alloc.h"
#include "rs_httpguard.h"
#include "rs_log.h"

#define SERVE_PARK_MAX 256        /* requests waiting for a Resource List */
#define SERVE_XML "application/xml"

struct serve {
    struct serve_opts o;
    /* SHA-256 of the read token: requests' tokens are hashed and compared
     * with CRYPTO_memcmp, so neither the token's bytes nor its length
     * show in the time a refusal takes. */
    unsigned char token_sha[SHA256_DIGEST_LENGTH];
    bool have_token;
    struct evhttp_request *parked[SERVE_PARK_MAX];
    size_t nparked;
    struct serve_stats stats;
};

/* --------------------------------------------------------------- replies */

static void
reply_text(struct serve *s, struct evhttp_request *req, int code,
           const char *reason, const char *text)
{
    if (code == 404)
        s->stats.not_found++;
    struct evbuffer *b = evbuffer_new();
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; charset=utf-8");
    if (b != NULL)
        evbuffer_add_printf(b, "%s\n", text);
    evhttp_send_reply(req, code, reason, b);
    if (b != NULL)
        evbuffer_free(b);
}

static void
not_found(struct serve *s, struct evhttp_request *req)
{
    reply_text(s, req, 404, "Not Found", "not found");
}

static int
evb_write(void *ud, const char *buf, size_t len)
{
    return evbuffer_add(ud, buf, len) == 0 ? 0 : RS_ENOMEM;
}

/* HEAD: the headers a GET would get, no body. evhttp computes
 * Content-Length from the body it sends, so set it here. */
static void
send_body(struct serve *s, struct evhttp_request *req, struct evbuffer *b)
{
    (void)s;
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
        char len[32];
        snprintf(len, sizeof(len), "%zu", evbuffer_get_length(b));
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          "Content-Length", len);
        evbuffer_drain(b, evbuffer_get_length(b));
    }
    evhttp_send_reply(req, 200, "OK", b);
}

/* ----------------------------------------------------- generated documents */

enum doc_kind { DOC_SD, DOC_CAPLIST, DOC_CLINDEX, DOC_CLIST };

static void
serve_doc(struct serve *s, struct evhttp_request *req, enum doc_kind kind,
          int64_t num)
{
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        reply_text(s, req, 500, "Internal Server Error", "out of memory");
        return;
    }
    char err[256] = "";
    int rc;
    switch (kind) {
    case DOC_SD:
        rc = docs_source_description(s->o.docs, evb_write, b, err);
        break;
    case DOC_CAPLIST: {
        size_t n = 0;
        const struct docs_channel *ch =
            s->o.channels != NULL ? s->o.channels(s->o.channels_ud, &n) : NULL;
        rc = docs_capability_list(s->o.docs, ch, n, evb_write, b, err);
        break;
    }
    case DOC_CLINDEX:
        rc = docs_changelist_index(s->o.docs, s->o.st, evb_write, b, err);
        break;
    default:
        rc = docs_changelist(s->o.docs, s->o.st, num, evb_write, b, err);
        break;
    }
    if (rc == RS_ENOTFOUND) {
        not_found(s, req);
    } else if (rc != 0) {
        rs_log_kv(RS_LOG_ERROR, "document generation failed", "error",
                  err[0] != '\0' ? err : rs_strerror(rc), NULL);
        reply_text(s, req, 500, "Internal Server Error", "document failed");
    } else {
        s->stats.documents++;
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          "Content-Type", SERVE_XML);
        send_body(s, req, b);
    }
    evbuffer_free(b);
}

/* "changelist-N.xml" -> N (> 0), or 0. */
static int64_t
changelist_num(const char *name)
{
    static const char pre[] = "changelist-";
    if (strncmp(name, pre, sizeof(pre) - 1) != 0)
        return 0;
    const char *p = name + sizeof(pre) - 1;
    if (*p < '1' || *p > '9')
        return 0;
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (errno != 0 || strcmp(end, ".xml") != 0)
        return 0;
    return v;
}

/* --------------------------------------------------- Resource List files */

static void
serve_file(struct serve *s, struct evhttp_request *req, const char *path,
           const char *ctype)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        not_found(s, req);
        return;
    }
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        close(fd);
        reply_text(s, req, 500, "Internal Server Error", "out of memory");
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      ctype);
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
        char len[32];
        snprintf(len, sizeof(len), "%lld", (long long)st.st_size);
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          "Content-Length", len);
        close(fd);
    } else if (st.st_size > 0) {
        /* evbuffer_add_file owns fd from here (sendfile or mmap) */
        if (evbuffer_add_file(b, fd, 0, st.st_size) != 0) {
            evbuffer_free(b);
            reply_text(s, req, 500, "Internal Server Error", "cannot read");
            return;
        }
    } else {
        close(fd);
    }
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

static void
serve_snapshot(struct serve *s, struct evhttp_request *req, const char *name)
{
    char path[4400];
    if (snapshot_file(s->o.snap, name, path, sizeof(path)) != 0) {
        if (strcmp(name, DOCS_RESOURCELIST) == 0)
            reply_text(s, req, 503, "Service Unavailable",
                       "the Resource List is being built");
        else
            not_found(s, req);
        return;
    }
    s->stats.documents++;
    serve_file(s, req, path, SERVE_XML);
}

/* The top Resource List: when the snapshot misses changes and is older
 * than the refresh interval, a new one is built first and this request
 * waits for it, so a Destination that asks gets a current catalog. */
static void
serve_resourcelist(struct serve *s, struct evhttp_request *req)
{
    const struct snapshot_info *cur = snapshot_current(s->o.snap);
    bool due = cur->gen == 0 ||
               rs_time_now() - cur->at >= s->o.rl_refresh_ms * 1000;
    if (snapshot_building(s->o.snap) ||
        (due && snapshot_stale(s->o.snap))) {
        if (!snapshot_building(s->o.snap)) {
            int rc = snapshot_build_async(s->o.snap);
            if (rc != 0)
                rs_log(RS_LOG_ERROR, "Resource List build: %s",
                       rs_strerror(rc));
        }
        if (snapshot_building(s->o.snap) && s->nparked < SERVE_PARK_MAX) {
            s->parked[s->nparked++] = req;
            return;
        }
    }
    serve_snapshot(s, req, DOCS_RESOURCELIST);
}

void
serve_snapshot_done(struct serve *s, int rc)
{
    (void)rc;
    size_t n = s->nparked;
    s->nparked = 0;
    for (size_t i = 0; i < n; i++)
        serve_snapshot(s, s->parked[i], DOCS_RESOURCELIST);
}

/* ------------------------------------------------------------- resources */

static void
http_date(time_t t, char *buf, size_t len)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    static const char days[7][4] = { "Sun", "Mon", "Tue", "Wed", "Thu",
                                     "Fri", "Sat" };
    static const char mons[12][4] = { "Jan", "Feb", "Mar", "Apr", "May",
                                      "Jun", "Jul", "Aug", "Sep", "Oct",
                                      "Nov", "Dec" };
    snprintf(buf, len, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday],
             tm.tm_mday, mons[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour,
             tm.tm_min, tm.tm_sec);
}

/* IMF-fixdate only (RFC 9110 5.6.7); -1 when it is not one. */
static time_t
parse_http_date(const char *s)
{
    static const char mons[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    char wd[4], mon[4];
    int day, year, h, m, sec;
    if (sscanf(s, "%3[A-Za-z], %2d %3[A-Za-z] %4d %2d:%2d:%2d GMT", wd, &day,
               mon, &year, &h, &m, &sec) != 7)
        return -1;
    const char *p = strstr(mons, mon);
    if (p == NULL || (p - mons) % 3 != 0 || day < 1 || day > 31 || h > 23 ||
        m > 59 || sec > 60)
        return -1;
    struct tm tm = { .tm_year = year - 1900, .tm_mon = (int)(p - mons) / 3,
                     .tm_mday = day, .tm_hour = h, .tm_min = m,
                     .tm_sec = sec };
    return timegm(&tm);
}

/* Does an If-None-Match list name etag? Weak comparison (RFC 9110
 * 13.1.2): W/ prefixes are ignored. */
static bool
etag_listed(const char *list, const char *etag)
{
    size_t n = strlen(etag);
    const char *p = list;
    while (*p != '\0') {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (*p == '*')
            return true;
        if (strncmp(p, "W/", 2) == 0)
            p += 2;
        if (strncmp(p, etag, n) == 0 &&
            (p[n] == '\0' || p[n] == ',' || p[n] == ' ' || p[n] == '\t'))
            return true;
        while (*p != '\0' && *p != ',')
            p++;
    }
    return false;
}

static void
serve_resource(struct serve *s, struct evhttp_request *req, const char *upath)
{
    char rel[TREE_PATH_MAX];
    struct stat st;
    if (tree_url_decode(upath, rel, sizeof(rel)) != 0) {
        not_found(s, req);
        return;
    }
    int fd = tree_open_file(s->o.tree, rel, &st);
    if (fd < 0) {
        not_found(s, req);
        return;
    }
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    /* The ETag changes whenever the catalog would see a change: the same
     * identity that keys the hash cache. */
    char etag[96], lm[64], link[DOCS_URL_MAX + 32];
    int64_t mns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    snprintf(etag, sizeof(etag), "\"%" PRIx64 "-%" PRIx64 "-%" PRIx64 "\"",
             (uint64_t)st.st_ino, (uint64_t)st.st_size, (uint64_t)mns);
    http_date(st.st_mtim.tv_sec, lm, sizeof(lm));
    snprintf(link, sizeof(link), "<%s>; rel=\"resourcesync\"",
             docs_caplist_url(s->o.docs));
    evhttp_add_header(out, "ETag", etag);
    evhttp_add_header(out, "Last-Modified", lm);
    evhttp_add_header(out, "Link", link);

    const char *inm = evhttp_find_header(in, "If-None-Match");
    const char *ims = evhttp_find_header(in, "If-Modified-Since");
    bool not_modified = false;
    if (inm != NULL) {
        not_modified = etag_listed(inm, etag);
    } else if (ims != NULL) {
        time_t t = parse_http_date(ims);
        not_modified = t >= 0 && st.st_mtim.tv_sec <= t;
    }
    if (not_modified) {
        close(fd);
        s->stats.not_modified++;
        evhttp_send_reply(req, 304, "Not Modified", NULL);
        return;
    }
    evhttp_add_header(out, "Content-Type", mime_type_of(rel));
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        close(fd);
        reply_text(s, req, 500, "Internal Server Error", "out of memory");
        return;
    }
    s->stats.resources++;
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
        char len[32];
        snprintf(len, sizeof(len), "%lld", (long long)st.st_size);
        evhttp_add_header(out, "Content-Length", len);
        close(fd);
    } else if (st.st_size > 0) {
        if (evbuffer_add_file(b, fd, 0, st.st_size) != 0) {
            evbuffer_free(b);
            reply_text(s, req, 500, "Internal Server Error", "cannot read");
            return;
        }
    } else {
        close(fd);
    }
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

/* ---------------------------------------------------------------- router */

static void
route_docs(struct serve *s, struct evhttp_request *req, const char *name)
{
    int64_t num;
    if (strcmp(name, DOCS_CAPLIST) == 0) {
        serve_doc(s, req, DOC_CAPLIST, 0);
    } else if (strcmp(name, DOCS_RESOURCELIST) == 0) {
        serve_resourcelist(s, req);
    } else if (strncmp(name, "resourcelist-", 13) == 0) {
        serve_snapshot(s, req, name);
    } else if (strcmp(name, CHANGELOG_INDEX_NAME) == 0) {
        serve_doc(s, req, DOC_CLINDEX, 0);
    } else if (strcmp(name, DOCS_CHANGELIST) == 0) {
        struct state_clist cl;
        if (state_clist_current(s->o.st, &cl) != 0)
            not_found(s, req);
        else
            serve_doc(s, req, DOC_CLIST, cl.num);
    } else if ((num = changelist_num(name)) > 0) {
        serve_doc(s, req, DOC_CLIST, num);
    } else {
        not_found(s, req);
    }
}

/* With a read token: may req be served? If not, it is answered here. */
static bool
authorized(struct serve *s, struct evhttp_request *req)
{
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    const char *v = evhttp_find_header(in, "Authorization");
    unsigned char got[SHA256_DIGEST_LENGTH];

    if (!s->have_token)
        return true;
    if (v == NULL || strncasecmp(v, "Bearer ", 7) != 0) {
        s->stats.unauthorized++;
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          "WWW-Authenticate", "Bearer realm=\"rssource\"");
        reply_text(s, req, 401, "Unauthorized", "a bearer token is needed");
        return false;
    }
    v += 7;
    while (*v == ' ')
        v++;
    SHA256((const unsigned char *)v, strlen(v), got);
    if (CRYPTO_memcmp(got, s->token_sha, sizeof(got)) != 0) {
        s->stats.forbidden++;
        reply_text(s, req, 403, "Forbidden", "this token may not read here");
        return false;
    }
    return true;
}

static void
on_request(struct evhttp_request *req, void *arg)
{
    struct serve *s = arg;
    s->stats.requests++;
    if (!authorized(s, req))
        return;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          "GET, HEAD");
        reply_text(s, req, 405, "Method Not Allowed", "method not allowed");
        return;
    }
    const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
    const char *path = u != NULL ? evhttp_uri_get_path(u) : NULL;
    if (path == NULL || path[0] != '/') {
        not_found(s, req);
        return;
    }
    /* discovery at the host's root, whatever the base path */
    if (strcmp(path, "/" DOCS_WELL_KNOWN) == 0) {
        serve_doc(s, req, DOC_SD, 0);
        return;
    }
    const char *bp = docs_base_path(s->o.docs);
    size_t bl = strlen(bp);
    if (strncmp(path, bp, bl) != 0) {
        not_found(s, req);
        return;
    }
    const char *rest = path + bl;
    if (strcmp(rest, DOCS_WELL_KNOWN) == 0) {
        serve_doc(s, req, DOC_SD, 0);
    } else if (strncmp(rest, DOCS_DIR, sizeof(DOCS_DIR) - 1) == 0) {
        route_docs(s, req, rest + sizeof(DOCS_DIR) - 1);
    } else {
        serve_resource(s, req, rest);
    }
}

/* ------------------------------------------------------------- lifecycle */

struct serve *
serve_new(const struct serve_opts *o)
{
    struct serve *s = rs_calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->o = *o;
    s->o.read_token = NULL;
    if (o->read_token != NULL) {
        SHA256((const unsigned char *)o->read_token, strlen(o->read_token),
               s->token_sha);
        s->have_token = true;
    }
    rs_httpguard_set_handler(o->guard, on_request, s);
    return s;
}

void
serve_free(struct serve *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->nparked; i++)
        reply_text(s, s->parked[i], 503, "Service Unavailable",
                   "shutting down");
    rs_httpguard_set_handler(s->o.guard, NULL, NULL);
    rs_free(s);
}

const struct serve_stats *
serve_stats(const struct serve *s)
{
    return &s->stats;
}
