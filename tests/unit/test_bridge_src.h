/*
 * test_bridge_src.h - what rsbridge's unit tests read: a programmable
 * pull-only Source on the test's loop (an evhttp server on 127.0.0.1)
 * serving documents by path and query, with a strong ETag and 304s,
 * statuses and headers on demand, HEAD, a log of what was asked, the
 * requests in flight at once (replies may be held back), and a hook run
 * on each request (to change the documents under a reader). Plus writers
 * of the documents the tests serve. Header-only: each test_bridge_*.c is
 * its own program.
 */
#ifndef TEST_BRIDGE_SRC_H
#define TEST_BRIDGE_SRC_H

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "tu_httpd.h"

#define TBS_DOCS 128
#define TBS_LOG 1024

struct tbs_doc {
    char key[512];             /* path, or path?query */
    char *body;
    size_t len;
    int status;                /* 0: 200 */
    char headers[256];         /* "Name: value\n"... */
    bool no_etag;
    unsigned hits;
};

struct tbs;
typedef void (*tbs_hook)(struct tbs *s, const char *key, void *ud);

struct tbs {
    struct event_base *base;
    struct evhttp *http;
    int port;
    char origin[64];
    struct tbs_doc docs[TBS_DOCS];
    size_t ndocs;
    char log[TBS_LOG][160];    /* "GET key" / "HEAD key" */
    double t0[TBS_LOG];        /* when each came (s, monotonic) */
    double t1[TBS_LOG];        /* when it was answered */
    size_t nlog;
    unsigned requests, not_modified;
    int hold_ms;               /* > 0: each reply waits this long */
    unsigned inflight, max_inflight;
    tbs_hook hook;
    void *hook_ud;
};

struct tbs_held {
    struct tbs *s;
    size_t logi;               /* its line in the log, or TBS_LOG */
    struct evhttp_request *req;
    struct event *ev;
    int status;
    char *body;
    size_t len;
    char headers[512];
};

static inline double
tbs_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline char *
tbs_expand(const struct tbs *s, const char *t, size_t *len)
{
    size_t n = strlen(t) + 1, ol = strlen(s->origin);
    for (const char *p = t; (p = strstr(p, "{B}")) != NULL; p += 3)
        n += ol;
    char *out = malloc(n);
    assert_non_null(out);
    size_t o = 0;
    while (*t != '\0') {
        if (strncmp(t, "{B}", 3) == 0) {
            memcpy(out + o, s->origin, ol);
            o += ol;
            t += 3;
        } else {
            out[o++] = *t++;
        }
    }
    out[o] = '\0';
    if (len != NULL)
        *len = o;
    return out;
}

static inline struct tbs_doc *
tbs_find(struct tbs *s, const char *key)
{
    for (size_t i = 0; i < s->ndocs; i++)
        if (strcmp(s->docs[i].key, key) == 0)
            return &s->docs[i];
    return NULL;
}

/* Serve body (with {B} the origin) at key (path[?query]); replaces. */
static inline struct tbs_doc *
tbs_put(struct tbs *s, const char *key, const char *body)
{
    struct tbs_doc *d = tbs_find(s, key);
    if (d == NULL) {
        assert_true(s->ndocs < TBS_DOCS);
        d = &s->docs[s->ndocs++];
        memset(d, 0, sizeof(*d));
        snprintf(d->key, sizeof(d->key), "%s", key);
    }
    free(d->body);
    d->body = tbs_expand(s, body, &d->len);
    return d;
}

/* The same, the body built with printf. */
static inline struct tbs_doc *
tbs_putf(struct tbs *s, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline struct tbs_doc *
tbs_putf(struct tbs *s, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    assert_true(n >= 0);
    char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    va_start(ap, fmt);
    vsnprintf(b, (size_t)n + 1, fmt, ap);
    va_end(ap);
    struct tbs_doc *d = tbs_put(s, key, b);
    free(b);
    return d;
}

static inline void
tbs_drop(struct tbs *s, const char *key)
{
    struct tbs_doc *d = tbs_find(s, key);
    if (d == NULL)
        return;
    free(d->body);
    *d = s->docs[--s->ndocs];
}

/* Answer key with status (and "Name: value\n" headers) from now on. */
static inline void
tbs_status(struct tbs *s, const char *key, int status, const char *headers)
{
    struct tbs_doc *d = tbs_find(s, key);
    if (d == NULL)
        d = tbs_put(s, key, "");
    d->status = status;
    snprintf(d->headers, sizeof(d->headers), "%s", headers ? headers : "");
}

static inline const char *
tbs_url(struct tbs *s, const char *key)
{
    static char buf[4][600];
    static int which;
    which = (which + 1) % 4;
    snprintf(buf[which], sizeof(buf[which]), "%s%s", s->origin, key);
    return buf[which];
}

/* How many requests the log holds for "GET key" (or "HEAD key"). */
static inline unsigned
tbs_count(const struct tbs *s, const char *line)
{
    unsigned n = 0;
    for (size_t i = 0; i < s->nlog; i++)
        n += strcmp(s->log[i], line) == 0;
    return n;
}

static inline void
tbs_add_headers(struct evkeyvalq *out, const char *lines)
{
    const char *p = lines;
    while (p != NULL && *p != '\0') {
        const char *eol = strchr(p, '\n');
        if (eol == NULL)
            eol = p + strlen(p);
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon != NULL) {
            char name[128], value[256];
            snprintf(name, sizeof(name), "%.*s", (int)(colon - p), p);
            colon++;
            while (*colon == ' ')
                colon++;
            snprintf(value, sizeof(value), "%.*s", (int)(eol - colon), colon);
            evhttp_add_header(out, name, value);
        }
        p = *eol == '\n' ? eol + 1 : eol;
    }
}

static inline void
tbs_send(struct tbs *s, struct evhttp_request *req, int status,
         const char *headers, const char *body, size_t len, size_t logi)
{
    if (logi < TBS_LOG)
        s->t1[logi] = tbs_now();
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    tbs_add_headers(evhttp_request_get_output_headers(req), headers);
    if (body != NULL && evhttp_request_get_command(req) != EVHTTP_REQ_HEAD)
        evbuffer_add(b, body, len);
    evhttp_send_reply(req, status, "Status", b);
    evbuffer_free(b);
    s->inflight--;
}

static inline void
tbs_on_held(evutil_socket_t fd, short what, void *arg)
{
    struct tbs_held *h = arg;
    (void)fd;
    (void)what;
    tbs_send(h->s, h->req, h->status, h->headers, h->body, h->len,
             h->logi);
    event_free(h->ev);
    free(h->body);
    free(h);
}

static inline void
tbs_reply(struct tbs *s, struct evhttp_request *req, int status,
          const char *headers, const char *body, size_t len)
{
    size_t logi = s->nlog > 0 ? s->nlog - 1 : TBS_LOG;
    if (s->hold_ms <= 0) {
        tbs_send(s, req, status, headers, body, len, logi);
        return;
    }
    struct tbs_held *h = calloc(1, sizeof(*h));
    assert_non_null(h);
    h->s = s;
    h->logi = logi;
    h->req = req;
    h->status = status;
    snprintf(h->headers, sizeof(h->headers), "%s", headers ? headers : "");
    if (body != NULL) {
        h->body = malloc(len + 1);
        assert_non_null(h->body);
        memcpy(h->body, body, len);
        h->len = len;
    }
    h->ev = evtimer_new(s->base, tbs_on_held, h);
    struct timeval tv = { s->hold_ms / 1000, (s->hold_ms % 1000) * 1000 };
    evtimer_add(h->ev, &tv);
}

static inline void
tbs_on_request(struct evhttp_request *req, void *arg)
{
    struct tbs *s = arg;
    const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
    const char *path = evhttp_uri_get_path(u), *query = evhttp_uri_get_query(u);
    char key[512];
    snprintf(key, sizeof(key), "%s%s%s", path ? path : "/",
             query ? "?" : "", query ? query : "");
    bool head = evhttp_request_get_command(req) == EVHTTP_REQ_HEAD;
    s->requests++;
    if (++s->inflight > s->max_inflight)
        s->max_inflight = s->inflight;
    if (s->nlog < TBS_LOG) {
        s->t0[s->nlog] = tbs_now();
        s->t1[s->nlog] = 0;
        snprintf(s->log[s->nlog++], sizeof(s->log[0]), "%s %.150s",
                 head ? "HEAD" : "GET", key);
    }
    if (s->hook != NULL)
        s->hook(s, key, s->hook_ud);
    struct tbs_doc *d = tbs_find(s, key);
    if (d == NULL) {
        tbs_reply(s, req, 404, NULL, "not found\n", 10);
        return;
    }
    d->hits++;
    if (d->status != 0 && d->status != 200) {
        tbs_reply(s, req, d->status, d->headers, "status\n", 7);
        return;
    }
    char hdrs[512] = "Content-Type: application/xml\n";
    if (!d->no_etag) {
        uint64_t h = 1469598103934665603ull;
        for (size_t i = 0; i < d->len; i++)
            h = (h ^ (unsigned char)d->body[i]) * 1099511628211ull;
        char etag[40];
        snprintf(etag, sizeof(etag), "\"%016llx\"", (unsigned long long)h);
        size_t n = strlen(hdrs);
        snprintf(hdrs + n, sizeof(hdrs) - n, "ETag: %s\n%s", etag, d->headers);
        const char *inm = evhttp_find_header(
            evhttp_request_get_input_headers(req), "If-None-Match");
        if (inm != NULL && strcmp(inm, etag) == 0) {
            s->not_modified++;
            tbs_reply(s, req, 304, hdrs, NULL, 0);
            return;
        }
    }
    tbs_reply(s, req, 200, hdrs, d->body, d->len);
}

static inline struct tbs *
tbs_new(struct event_base *base)
{
    struct tbs *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->base = base;
    s->http = evhttp_new(base);
    assert_non_null(s->http);
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    evhttp_set_gencb(s->http, tbs_on_request, s);
    s->port = tu_httpd_listen(s->http);
    snprintf(s->origin, sizeof(s->origin), "http://127.0.0.1:%d", s->port);
    return s;
}

static inline void
tbs_free(struct tbs *s)
{
    if (s == NULL)
        return;
    evhttp_free(s->http);
    for (size_t i = 0; i < s->ndocs; i++)
        free(s->docs[i].body);
    free(s);
}

/* ---------------------------------------------------------- documents */

#define TBS_NS "xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" " \
               "xmlns:rs=\"http://www.openarchives.org/rs/terms/\""

/* A change entry: <url> with lastmod, change, datetime, hash, length. */
static inline void
tbs_change(char *buf, size_t len, const char *loc, const char *change,
           const char *dt)
{
    if (strcmp(change, "deleted") == 0)
        snprintf(buf, len, "<url><loc>%s</loc><rs:md change=\"deleted\" "
                 "datetime=\"%s\"/></url>", loc, dt);
    else
        snprintf(buf, len, "<url><loc>%s</loc><lastmod>%s</lastmod>"
                 "<rs:md change=\"%s\" datetime=\"%s\" hash=\"md5:"
                 "00112233445566778899aabbccddeeff\" length=\"12\" "
                 "type=\"text/plain\"/></url>", loc, dt, change, dt);
}

#endif
