/*
 * serve.c - the HTTP handlers of rssource (see serve.h). Layers: replies,
 * the router, generated documents, Resource List snapshots (including
 * requests parked while a fresh one is built), and resources with their
 * conditional-request logic. Documents carry validators too: a Change
 * List's ETag is its version (number, from, until, count), the index's the
 * set of lists, a Resource List file's its identity, the Source
 * Description's and Capability List's a hash of their bytes; a Change List also
 * names, in a Link header, where its next read can start (?after=SEQ).
 */
#include "serve.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <sys/queue.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
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
/* What a document's ETag hashes besides its version: the form of the
 * documents this build writes (bump it when their bytes change). */
#define SERVE_DOC_FORMAT "rssource-docs-1"

struct serve {
    struct serve_opts o;
    /* SHA-256 of the read token: requests' tokens are hashed and compared
     * with CRYPTO_memcmp, so neither the token's bytes nor its length
     * show in the time a refusal takes. */
    unsigned char token_sha[SHA256_DIGEST_LENGTH];
    bool have_token;
    struct evhttp_request *parked[SERVE_PARK_MAX];
    size_t nparked;
    bool hold_rl;                  /* serve_hold_resourcelist */
    /* The Change List Index's Last-Modified: when this process first saw
     * its current set of lists (hash idx_tag), in us. Retention drops a
     * list at no datetime of its own, so no column says it. */
    char idx_tag[24];
    rs_time_t idx_since;
    struct serve_stats stats;
};

static void access_note(struct serve *s, struct evhttp_request *req, int code,
                        size_t bytes);

/* Every reply goes out here: counted, and told to the access hook. */
static void
send_reply(struct serve *s, struct evhttp_request *req, int code,
           const char *reason, struct evbuffer *b)
{
    size_t n = b != NULL ? evbuffer_get_length(b) : 0;
    access_note(s, req, code, n);
    s->stats.bytes += n;
    evhttp_send_reply(req, code, reason, b);
}

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
    send_reply(s, req, code, reason, b);
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
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
        char len[32];
        snprintf(len, sizeof(len), "%zu", evbuffer_get_length(b));
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          "Content-Length", len);
        evbuffer_drain(b, evbuffer_get_length(b));
    }
    send_reply(s, req, 200, "OK", b);
}

/* ------------------------------------------------- conditional requests */

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

/* A document's strong ETag: 64 bits of SHA-256 over the base URL, the
 * documents' format and what names the document's version. Equal tags
 * mean equal bytes for one URL. */
static void
doc_etag(const struct serve *s, const unsigned char *version, size_t len,
         char out[24])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    const char *base = docs_base(s->o.docs);
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    uint64_t v = 0;

    /* Out of memory: a tag from the version alone is still one. */
    if (c == NULL || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1 ||
        EVP_DigestUpdate(c, base, strlen(base)) != 1 ||
        EVP_DigestUpdate(c, "\n" SERVE_DOC_FORMAT "\n",
                         sizeof(SERVE_DOC_FORMAT) + 1) != 1 ||
        EVP_DigestUpdate(c, version, len) != 1 ||
        EVP_DigestFinal_ex(c, md, NULL) != 1) {
        memset(md, 0, sizeof(md));
        for (size_t i = 0; i < len; i++)
            md[i % 8] ^= version[i];
    }
    EVP_MD_CTX_free(c);
    for (int i = 0; i < 8; i++)
        v = v << 8 | md[i];
    snprintf(out, 24, "\"%016" PRIx64 "\"", v);
}

/* The validators of a document's reply; true when req was answered 304
 * here. lm (us; RS_TIME_NONE: none) is sent, and If-Modified-Since is
 * honoured, only once its second is over: a change later in the same
 * second would carry the same Last-Modified, and a client holding it
 * would be told nothing changed. The ETag has no such blind spot. */
static bool
doc_validators(struct serve *s, struct evhttp_request *req, const char *etag,
               rs_time_t lm)
{
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    bool settled = lm != RS_TIME_NONE && lm >= 0 &&
                   lm / 1000000 < rs_time_now() / 1000000;
    char date[64];

    evhttp_add_header(out, "ETag", etag);
    if (settled) {
        http_date((time_t)(lm / 1000000), date, sizeof(date));
        evhttp_add_header(out, "Last-Modified", date);
    }
    const char *inm = evhttp_find_header(in, "If-None-Match");
    const char *ims = evhttp_find_header(in, "If-Modified-Since");
    bool not_modified = false;
    if (inm != NULL) {
        not_modified = etag_listed(inm, etag);
    } else if (ims != NULL && settled) {
        time_t t = parse_http_date(ims);
        not_modified = t >= 0 && lm / 1000000 <= (int64_t)t;
    }
    if (!not_modified)
        return false;
    s->stats.not_modified++;
    send_reply(s, req, 304, "Not Modified", NULL);
    return true;
}

/* The index's validators: its tag hashes every list's number, from and
 * until (what its entries say); Last-Modified is when this process first
 * saw that set. 0 or the state's error. */
static int
index_validators(struct serve *s, char etag[24], rs_time_t *lm)
{
    struct state_iter *it;
    struct state_clist cl;
    /* FNV-1a over the lists: doc_etag hashes the result with the rest */
    uint64_t h = 0xcbf29ce484222325ULL;
    int rc = state_clist_iter(s->o.st, &it);
    int step;

    if (rc != 0)
        return rc;
    while ((step = state_clist_next(it, &cl)) == 1) {
        int64_t v[3] = { cl.num, cl.from, cl.until };
        const unsigned char *p = (const unsigned char *)v;
        for (size_t i = 0; i < sizeof(v); i++)
            h = (h ^ p[i]) * 0x100000001b3ULL;
    }
    state_iter_free(it);
    if (step < 0)
        return step;
    doc_etag(s, (const unsigned char *)&h, sizeof(h), etag);
    if (strcmp(etag, s->idx_tag) != 0) {
        snprintf(s->idx_tag, sizeof(s->idx_tag), "%s", etag);
        s->idx_since = rs_time_now();
    }
    *lm = s->idx_since;
    return 0;
}

/* A Change List's validators: its version is its number, from, until and
 * count (changes are only ever added to the open list, and a closed list
 * never changes), so the tag moves exactly when an entry is added or the
 * list is closed. The same tag serves every ?after= of the list: a reader
 * that read it up to its end sends that tag with the continuation and is
 * answered 304 while nothing was added. Last-Modified: the newest change
 * (until once closed, from while empty). */
static int
clist_validators(struct serve *s, int64_t num, char etag[24], rs_time_t *lm)
{
    struct state_clist cl;
    int64_t seq;
    rs_time_t dt;
    int rc = state_clist_get(s->o.st, num, &cl);

    if (rc != 0)
        return rc;
    int64_t v[4] = { cl.num, cl.from, cl.until, cl.count };
    doc_etag(s, (const unsigned char *)v, sizeof(v), etag);
    if (cl.until != RS_TIME_NONE) {
        *lm = cl.until;
        return 0;
    }
    rc = state_clist_last(s->o.st, num, &seq, &dt);
    if (rc == RS_ENOTFOUND) {
        *lm = cl.from;
        return 0;
    }
    *lm = dt;
    return rc;
}

/* ----------------------------------------------------- generated documents */

enum doc_kind { DOC_SD, DOC_CAPLIST, DOC_CLINDEX, DOC_CLIST };

#define SERVE_AFTER_REL "urn:rspush:changes-after"

/* An open Change List names where a reader that has it all reads on:
 * Link: <changelist-N.xml?after=LAST>; rel="urn:rspush:changes-after". */
static void
add_after_link(struct serve *s, struct evhttp_request *req, int64_t num,
               int64_t last)
{
    char name[CHANGELOG_NAME_MAX], url[DOCS_URL_MAX], link[DOCS_URL_MAX + 80];

    changelog_name(num, name);
    if (docs_url(s->o.docs, name, url, sizeof(url)) != 0)
        return;
    snprintf(link, sizeof(link), "<%s?after=%" PRId64 ">; rel=\"%s\"", url,
             last, SERVE_AFTER_REL);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Link", link);
}

/* num: DOC_CLIST's list; after: its ?after= (0: the whole list). */
static void
serve_doc(struct serve *s, struct evhttp_request *req, enum doc_kind kind,
          int64_t num, int64_t after)
{
    char err[256] = "", etag[24];
    rs_time_t lm = RS_TIME_NONE;
    int64_t last = 0;
    int rc = 0;

    if (kind == DOC_CLINDEX)
        rc = index_validators(s, etag, &lm);
    else if (kind == DOC_CLIST)
        rc = clist_validators(s, num, etag, &lm);
    if (rc == RS_ENOTFOUND) {
        not_found(s, req);
        return;
    }
    if (rc != 0) {
        rs_log_kv(RS_LOG_ERROR, "document validators failed", "error",
                  rs_strerror(rc), NULL);
        reply_text(s, req, 500, "Internal Server Error", "document failed");
        return;
    }
    if ((kind == DOC_CLINDEX || kind == DOC_CLIST) &&
        doc_validators(s, req, etag, lm))
        return;
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        reply_text(s, req, 500, "Internal Server Error", "out of memory");
        return;
    }
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
        rc = docs_changelist_after(s->o.docs, s->o.st, num, after, evb_write,
                                   b, &last, err);
        break;
    }
    if (rc == RS_ENOTFOUND) {
        /* DOC_CLIST: ?after= names no change of this list */
        evhttp_remove_header(evhttp_request_get_output_headers(req), "ETag");
        evhttp_remove_header(evhttp_request_get_output_headers(req),
                             "Last-Modified");
        not_found(s, req);
    } else if (rc != 0) {
        rs_log_kv(RS_LOG_ERROR, "document generation failed", "error",
                  err[0] != '\0' ? err : rs_strerror(rc), NULL);
        reply_text(s, req, 500, "Internal Server Error", "document failed");
    } else {
        if (kind == DOC_SD || kind == DOC_CAPLIST) {
            /* Small and made from configuration and the hub's answer:
             * their bytes are their version. */
            size_t n = evbuffer_get_length(b);
            const unsigned char *bytes = evbuffer_pullup(b, -1);
            doc_etag(s, bytes != NULL ? bytes : (const unsigned char *)"",
                     bytes != NULL ? n : 0, etag);
            if (doc_validators(s, req, etag, RS_TIME_NONE)) {
                evbuffer_free(b);
                return;
            }
        }
        s->stats.documents++;
        if (kind == DOC_CLIST) {
            struct state_clist cl;
            if (state_clist_get(s->o.st, num, &cl) == 0 &&
                cl.until == RS_TIME_NONE)
                add_after_link(s, req, num, last);
        }
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

/* Files up to this size are read into the reply; larger ones go by
 * evbuffer_add_file (sendfile). At 5,000 changes/s of small files, each
 * file segment's set-up and release cost more than the read. */
#define SERVE_INLINE_MAX (64 * 1024)

/* The body of a regular file of size bytes into b; owns and closes fd. A
 * file that shrank meanwhile gives what it still holds (Content-Length is
 * the buffer's), one that grew its first size bytes, as sendfile would.
 * 0, or -1 when it could not be read. */
static int
body_from_fd(struct evbuffer *b, int fd, off_t size)
{
    if (size > SERVE_INLINE_MAX)
        return evbuffer_add_file(b, fd, 0, size);   /* owns fd */
    off_t got = 0;
    while (got < size) {
        int n = evbuffer_read(b, fd, (int)(size - got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            close(fd);
            return -1;
        }
        if (n == 0)
            break;
        got += n;
    }
    close(fd);
    return 0;
}

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
    /* A snapshot file is written once and never changes: its identity
     * is its version. */
    char etag[24];
    int64_t id[3] = { (int64_t)st.st_ino, (int64_t)st.st_size,
                      tree_mtime_ns(&st) };
    doc_etag(s, (const unsigned char *)id, sizeof(id), etag);
    if (doc_validators(s, req, etag, tree_mtime_ns(&st) / 1000)) {
        close(fd);
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
        /* body_from_fd owns fd from here */
        if (body_from_fd(b, fd, st.st_size) != 0) {
            evbuffer_free(b);
            reply_text(s, req, 500, "Internal Server Error", "cannot read");
            return;
        }
    } else {
        close(fd);
    }
    send_reply(s, req, 200, "OK", b);
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
               (!s->hold_rl &&
                rs_time_now() - cur->at >= s->o.rl_refresh_ms * 1000);
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

/* A file of the Resource Dump or the Change Dump (an fd opened now keeps
 * serving it when a later generation or the retention removes it). */
static void
serve_dump(struct serve *s, struct evhttp_request *req, const char *name)
{
    char path[4400];
    const char *ctype;
    bool change = strncmp(name, "changedump", 10) == 0;

    if (change ? s->o.cdump == NULL ||
                     changedump_file(s->o.cdump, name, path, sizeof(path),
                                     &ctype) != 0
               : s->o.dump == NULL ||
                     dumpw_file(s->o.dump, name, path, sizeof(path),
                                &ctype) != 0) {
        not_found(s, req);
        return;
    }
    s->stats.documents++;
    serve_file(s, req, path, ctype);
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

void
serve_hold_resourcelist(struct serve *s, bool hold)
{
    s->hold_rl = hold;
}

/* ------------------------------------------------------------- resources */

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
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    /* The ETag changes whenever the catalog would see a change: the same
     * identity that keys the hash cache. */
    char etag[96], link[DOCS_URL_MAX + 32];
    int64_t mns = tree_mtime_ns(&st);
    snprintf(etag, sizeof(etag), "\"%" PRIx64 "-%" PRIx64 "-%" PRIx64 "\"",
             (uint64_t)st.st_ino, (uint64_t)st.st_size, (uint64_t)mns);
    snprintf(link, sizeof(link), "<%s>; rel=\"resourcesync\"",
             docs_caplist_url(s->o.docs));
    evhttp_add_header(out, "Link", link);
    /* The documents' rule: Last-Modified is sent, and If-Modified-Since
     * honoured, only once the mtime's second is over. A file rewritten
     * later in that second has the same date, and a client holding it
     * was answered 304 with stale bytes; the ETag tells them apart. */
    if (doc_validators(s, req, etag, mns / 1000)) {
        close(fd);
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
        if (body_from_fd(b, fd, st.st_size) != 0) {
            evbuffer_free(b);
            reply_text(s, req, 500, "Internal Server Error", "cannot read");
            return;
        }
    } else {
        close(fd);
    }
    send_reply(s, req, 200, "OK", b);
    evbuffer_free(b);
}

/* ---------------------------------------------------------------- router */

/* A Change List's ?after=SEQ: 0 without one, -1 when malformed. Other
 * parameters are ignored. */
static int64_t
query_after(struct evhttp_request *req)
{
    const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
    const char *q = u != NULL ? evhttp_uri_get_query(u) : NULL;
    struct evkeyvalq kv;
    int64_t after = 0;

    if (q == NULL)
        return 0;
    TAILQ_INIT(&kv);
    if (evhttp_parse_query_str(q, &kv) != 0)
        return -1;
    const char *v = evhttp_find_header(&kv, "after");
    if (v != NULL) {
        char *end;
        errno = 0;
        long long n = strtoll(v, &end, 10);
        after = errno != 0 || end == v || *end != '\0' || n < 0 ? -1 : n;
    }
    evhttp_clear_headers(&kv);
    return after;
}

static void
route_docs(struct serve *s, struct evhttp_request *req, const char *name)
{
    int64_t num = 0;
    if (strcmp(name, DOCS_CAPLIST) == 0) {
        serve_doc(s, req, DOC_CAPLIST, 0, 0);
    } else if (strcmp(name, DOCS_RESOURCELIST) == 0) {
        serve_resourcelist(s, req);
    } else if (strncmp(name, "resourcelist-", 13) == 0) {
        serve_snapshot(s, req, name);
    } else if (strncmp(name, "resourcedump", 12) == 0 ||
               strncmp(name, "changedump", 10) == 0) {
        serve_dump(s, req, name);
    } else if (strcmp(name, CHANGELOG_INDEX_NAME) == 0) {
        serve_doc(s, req, DOC_CLINDEX, 0, 0);
    } else if (strcmp(name, DOCS_CHANGELIST) == 0 ||
               (num = changelist_num(name)) > 0) {
        int64_t after = query_after(req);
        struct state_clist cl;
        if (after < 0) {
            reply_text(s, req, 400, "Bad Request",
                       "after: expected the seq of a change");
            return;
        }
        if (strcmp(name, DOCS_CHANGELIST) == 0) {
            if (state_clist_current(s->o.st, &cl) != 0) {
                not_found(s, req);
                return;
            }
            num = cl.num;
        }
        serve_doc(s, req, DOC_CLIST, num, after);
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
    /* "//name/a.txt" is an origin-form target to HTTP (RFC 9112 3.2.1:
     * an empty first segment), but evhttp reads "//name" as an authority
     * and hands over the path "/a.txt": every file would answer under
     * any number of alias URLs. No URL of ours starts with "//". */
    const char *target = evhttp_request_get_uri(req);
    if (target != NULL && target[0] == '/' && target[1] == '/') {
        not_found(s, req);
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
        serve_doc(s, req, DOC_SD, 0, 0);
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
        serve_doc(s, req, DOC_SD, 0, 0);
    } else if (strncmp(rest, DOCS_DIR, sizeof(DOCS_DIR) - 1) == 0) {
        route_docs(s, req, rest + sizeof(DOCS_DIR) - 1);
    } else {
        serve_resource(s, req, rest);
    }
}

/* ------------------------------------------------------------ access hook */

static void
access_note(struct serve *s, struct evhttp_request *req, int code,
            size_t bytes)
{
    if (s->o.on_access == NULL)
        return;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    const char *uri = evhttp_request_get_uri(req);
    s->o.on_access(s->o.access_ud, cmd == EVHTTP_REQ_GET ? "GET"
                   : cmd == EVHTTP_REQ_HEAD ? "HEAD" : "OTHER",
                   uri != NULL ? uri : "-", code, bytes);
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
