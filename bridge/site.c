/*
 * site.c - rsbridge's HTTP handlers (see site.h): the router, the bridged
 * documents, GET /sources, and the replies (ETag, 304, 503 while a Source
 * has not been read yet).
 */
#include "site.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RS_LOG_MODULE "site"
#include "outbox.h"
#include "poller.h"
#include "rs_alloc.h"
#include "rs_fnv.h"
#include "rs_httpguard.h"
#include "rs_log.h"
#include "rs_url.h"
#include "rs_write.h"

#define SITE_URL_MAX 8192
#define SITE_XML "application/xml"

struct site {
    struct site_opts o;
    struct site_stats st;
};

/* ------------------------------------------------------------ writing */

struct buf {
    char *p;
    size_t len, cap;
};

static int
buf_write(void *ud, const char *data, size_t len)
{
    struct buf *b = ud;
    if (len == 0)
        return 0;
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + len + 1)
            cap *= 2;
        char *t = rs_realloc(b->p, cap);
        if (t == NULL)
            return RS_ENOMEM;
        b->p = t;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, len);
    b->len += len;
    b->p[b->len] = '\0';
    return 0;
}

static void
link_set(struct rs_link *ln, const char *rel, const char *href)
{
    rs_link_init(ln);
    ln->rel = rel;
    ln->href = href;
}

int
site_description(const struct poller *p, char **out, size_t *len)
{
    if (!poller_ready(p))
        return RS_EAGAIN;
    struct buf b = { 0 };
    struct rs_writer *w = rs_writer_new(buf_write, &b, NULL);
    if (w == NULL)
        return RS_ENOMEM;
    struct rs_head h;
    rs_head_init(&h);
    h.root = RS_ROOT_URLSET;
    h.has_md = true;
    h.md.capability = RS_CAP_DESCRIPTION;
    int rc = rs_writer_begin(w, &h);
    for (size_t i = 0; rc == 0 && i < poller_ncaps(p); i++) {
        struct poller_cap c;
        char loc[SITE_URL_MAX];
        if (!poller_cap(p, i, &c) || c.doc == NULL)
            continue;
        if ((rc = outbox_caplist_url(poller_bridged(p), c.k, loc,
                                     sizeof(loc))) != 0)
            break;
        struct rs_entry e;
        rs_entry_init(&e);
        e.loc = loc;
        e.has_md = true;
        e.md.capability = RS_CAP_CAPABILITYLIST;
        rc = rs_writer_entry(w, &e);
    }
    if (rc == 0)
        rc = rs_writer_end(w);
    rs_writer_free(w);
    if (rc != 0) {
        rs_free(b.p);
        return rc;
    }
    *out = b.p;
    *len = b.len;
    return 0;
}

/* Is e one of the original's own notification entries? A pull-only
 * Source has none; the bridge's channels replace any it had. */
static bool
is_notification_entry(const struct rs_entry *e)
{
    if (strncmp(e->loc, "ws://", 5) == 0 || strncmp(e->loc, "wss://", 6) == 0)
        return true;
    return e->has_md && rs_capability_is_notification(e->md.capability);
}

/* Write the bridged Capability List; lenient: entries checked as a
 * reader checks them (an original's entry a strict writer refuses is
 * still the Source's). */
static int
caplist_write(const struct poller *p, const struct poller_cap *c,
              const char *self_sd, bool lenient, struct buf *b)
{
    struct rs_write_opts wo = { .pretty = true, .lenient = lenient };
    struct rs_writer *w = rs_writer_new(buf_write, b, &wo);
    if (w == NULL)
        return RS_ENOMEM;
    struct rs_link links[2];
    link_set(&links[0], "up", self_sd);
    link_set(&links[1], "via", c->url);
    struct rs_head h;
    rs_head_init(&h);
    h.root = RS_ROOT_URLSET;
    h.has_md = true;
    h.md.capability = RS_CAP_CAPABILITYLIST;
    h.links = links;
    h.nlinks = 2;
    int rc = rs_writer_begin(w, &h);
    const struct rs_doc *d = c->doc;
    for (size_t i = 0; rc == 0 && i < d->nentries; i++) {
        const struct rs_entry *oe = &d->entries[i];
        if (is_notification_entry(oe))
            continue;
        /* the original's URLs, absolute: relative ones would read as the
         * bridge's */
        struct rs_entry e = *oe;
        char *loc = NULL;
        struct rs_link *ln = NULL;
        char **hrefs = NULL;
        if (rs_url_resolve(c->url, oe->loc, &loc) != 0) {
            rs_free(loc);
            continue;
        }
        e.loc = loc;
        if (oe->nlinks > 0) {
            ln = rs_calloc(oe->nlinks, sizeof(*ln));
            hrefs = rs_calloc(oe->nlinks, sizeof(*hrefs));
            if (ln == NULL || hrefs == NULL)
                rc = RS_ENOMEM;
            for (size_t j = 0; rc == 0 && j < oe->nlinks; j++) {
                ln[j] = oe->links[j];
                if (rs_url_resolve(c->url, oe->links[j].href, &hrefs[j]) == 0)
                    ln[j].href = hrefs[j];
            }
            e.links = ln;
        }
        if (rc == 0)
            rc = rs_writer_entry(w, &e);
        for (size_t j = 0; hrefs != NULL && j < oe->nlinks; j++)
            rs_free(hrefs[j]);
        rs_free(hrefs);
        rs_free(ln);
        rs_free(loc);
    }
    /* the bridge's channels, as rssource advertises its own: per topic
     * the WebSub entry, then the hub's WebSocket channel */
    for (int k = 0; rc == 0 && k < OUTBOX_LANES; k++) {
        enum rs_capability cap = k == OUTBOX_CHANGE
                                     ? RS_CAP_CHANGELIST_NOTIFICATION
                                     : RS_CAP_FRAMEWORK_NOTIFICATION;
        struct rs_link hub;
        struct rs_entry e;
        rs_entry_init(&e);
        e.loc = poller_topic(p, (enum outbox_lane)k);
        e.has_md = true;
        e.md.capability = cap;
        link_set(&hub, "hub", poller_hub(p, (enum outbox_lane)k));
        e.links = &hub;
        e.nlinks = 1;
        rc = rs_writer_entry(w, &e);
        const char *ws = poller_ws(p, (enum outbox_lane)k);
        if (rc == 0 && ws != NULL) {
            rs_entry_init(&e);
            e.loc = ws;
            e.has_md = true;
            e.md.capability = cap;
            /* the 2013 draft names the ws:// change channel
             * "change-notification" (docs/protocol.md 6) */
            e.md.capability_alpha = k == OUTBOX_CHANGE;
            rc = rs_writer_entry(w, &e);
        }
    }
    if (rc == 0)
        rc = rs_writer_end(w);
    if (rc != 0 && !lenient)
        rs_log_kv(RS_LOG_DEBUG, "a bridged Capability List written as a "
                  "reader checks it", "caplist", c->url, "why",
                  rs_writer_errstr(w), NULL);
    rs_writer_free(w);
    return rc;
}

int
site_caplist(const struct poller *p, int64_t k, char **out, size_t *len)
{
    struct poller_cap c;
    if (!poller_cap_k(p, k, &c))
        return RS_ENOTFOUND;
    if (c.doc == NULL)
        return RS_EAGAIN;
    char sd[SITE_URL_MAX];
    int n = snprintf(sd, sizeof(sd), "%s.well-known/resourcesync",
                     poller_bridged(p));
    if (n < 0 || (size_t)n >= sizeof(sd))
        return RS_ETOOBIG;
    struct buf b = { 0 };
    int rc = caplist_write(p, &c, sd, false, &b);
    if (rc != 0 && rc != RS_ENOMEM) {
        b.len = 0;
        rc = caplist_write(p, &c, sd, true, &b);
    }
    if (rc != 0) {
        rs_free(b.p);
        return rc;
    }
    *out = b.p;
    *len = b.len;
    return 0;
}

/* ------------------------------------------------------------ replies */

static void
reply_text(struct site *s, struct evhttp_request *req, int code,
           const char *reason, const char *text)
{
    struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
    struct evbuffer *b = evbuffer_new();
    evhttp_add_header(oh, "Content-Type", "text/plain; charset=utf-8");
    if (code == 404)
        s->st.not_found++;
    if (code == 503) {
        s->st.unavailable++;
        evhttp_add_header(oh, "Retry-After", "1");
    }
    if (code == 405)
        evhttp_add_header(oh, "Allow", "GET, HEAD");
    if (b != NULL && evhttp_request_get_command(req) != EVHTTP_REQ_HEAD)
        evbuffer_add_printf(b, "%s\n", text);
    evhttp_send_reply(req, code, reason, b);
    if (b != NULL)
        evbuffer_free(b);
}

/* Does If-None-Match name etag (a list, weak or strong, or "*")? */
static bool
etag_matches(const char *inm, const char *etag)
{
    if (inm == NULL)
        return false;
    size_t n = strlen(etag);
    const char *q = inm;
    while (*q != '\0') {
        while (*q == ' ' || *q == '\t' || *q == ',')
            q++;
        if (*q == '*')
            return true;
        if (strncmp(q, "W/", 2) == 0)
            q += 2;
        if (strncmp(q, etag, n) == 0 &&
            (q[n] == '\0' || q[n] == ',' || q[n] == ' ' || q[n] == '\t'))
            return true;
        while (*q != '\0' && *q != ',')
            q++;
    }
    return false;
}

/* A document, with its ETag; 304 when the client holds it. */
static void
reply_doc(struct site *s, struct evhttp_request *req, const char *ctype,
          const char *body, size_t len)
{
    struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)body[i]) * 1099511628211ull;
    char etag[40];
    snprintf(etag, sizeof(etag), "\"%016llx\"", (unsigned long long)h);
    evhttp_add_header(oh, "ETag", etag);
    evhttp_add_header(oh, "Cache-Control", "no-cache");
    const char *inm = evhttp_find_header(evhttp_request_get_input_headers(req),
                                         "If-None-Match");
    if (etag_matches(inm, etag)) {
        s->st.not_modified++;
        evhttp_send_reply(req, 304, "Not Modified", NULL);
        return;
    }
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        reply_text(s, req, 500, "Internal Server Error", "out of memory");
        return;
    }
    evhttp_add_header(oh, "Content-Type", ctype);
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
        char n[32];
        snprintf(n, sizeof(n), "%zu", len);
        evhttp_add_header(oh, "Content-Length", n);
    } else {
        evbuffer_add(b, body, len);
    }
    s->st.documents++;
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

/* ------------------------------------------------------------ /sources */

static json_t *
json_time(rs_time_t t)
{
    char buf[RS_TIME_BUFSZ];
    if (t == RS_TIME_NONE || rs_time_format(t, buf) == 0)
        return json_null();
    return json_string(buf);
}

static void
serve_sources(struct site *s, struct evhttp_request *req)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr != NULL && i < s->o.npollers; i++) {
        const struct poller *p = s->o.pollers[i];
        struct poller_stats ps;
        poller_stats(p, &ps);
        json_t *o = json_object();
        if (o == NULL)
            continue;
        json_object_set_new(o, "name", json_string(poller_name(p)));
        json_object_set_new(o, "source", json_string(poller_url(p)));
        json_object_set_new(o, "url", json_string(poller_bridged(p)));
        json_object_set_new(o, "topic",
                            json_string(poller_topic(p, OUTBOX_CHANGE)));
        json_object_set_new(o, "framework_topic",
                            json_string(poller_topic(p, OUTBOX_FRAMEWORK)));
        json_object_set_new(o, "state", json_string(poller_state(p)));
        json_object_set_new(o, "last_poll", json_time(ps.last_poll));
        json_object_set_new(o, "last_change", json_time(ps.last_change));
        json_object_set_new(o, "changes_published",
                            json_integer(ps.outbox.accepted[OUTBOX_CHANGE]));
        json_object_set_new(o, "framework_published",
                            json_integer(
                                ps.outbox.accepted[OUTBOX_FRAMEWORK]));
        json_object_set_new(o, "pending",
                            json_integer(ps.outbox.pending[OUTBOX_CHANGE] +
                                         ps.outbox.pending[OUTBOX_FRAMEWORK]));
        json_object_set_new(o, "errors", json_integer((json_int_t)ps.errors));
        json_object_set_new(o, "entries_skipped",
                            json_integer((json_int_t)ps.entries_skipped));
        json_object_set_new(o, "last_error",
                            ps.last_error != NULL
                                ? json_string(ps.last_error) : json_null());
        json_object_set_new(o, "polls", json_integer((json_int_t)ps.polls));
        json_object_set_new(o, "hub_stopped",
                            json_boolean(ps.outbox.stopped[0] ||
                                         ps.outbox.stopped[1]));
        /* the hub failing this Source's publishes (not its polls: those
         * are errors above); cleared when the hub accepts one again */
        json_object_set_new(o, "hub_failing",
                            json_boolean(ps.outbox.hub_failing[0] ||
                                         ps.outbox.hub_failing[1]));
        json_object_set_new(o, "hub_failing_since",
                            json_time(ps.outbox.hub_failing_since));
        json_object_set_new(o, "hub_failures",
                            json_integer(
                                (json_int_t)ps.outbox.hub_failures));
        json_object_set_new(o, "hub_last_error",
                            ps.outbox.hub_error[0] != '\0'
                                ? json_string(ps.outbox.hub_error)
                                : json_null());
        json_array_append_new(arr, o);
    }
    char *text = arr != NULL ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    if (text == NULL) {
        reply_text(s, req, 500, "Internal Server Error", "out of memory");
        return;
    }
    struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
    struct evbuffer *b = evbuffer_new();
    evhttp_add_header(oh, "Content-Type", "application/json");
    evhttp_add_header(oh, "Cache-Control", "no-store");
    if (b != NULL && evhttp_request_get_command(req) != EVHTTP_REQ_HEAD) {
        evbuffer_add(b, text, strlen(text));
        evbuffer_add(b, "\n", 1);
    }
    evhttp_send_reply(req, 200, "OK", b);
    if (b != NULL)
        evbuffer_free(b);
    free(text);
}

/* ------------------------------------------------------------- router */

static const struct poller *
find_source(struct site *s, const char *name, size_t n)
{
    for (size_t i = 0; i < s->o.npollers; i++) {
        const char *pn = poller_name(s->o.pollers[i]);
        if (strlen(pn) == n && memcmp(pn, name, n) == 0)
            return s->o.pollers[i];
    }
    return NULL;
}

/* "K.xml" -> K >= 0, or -1. */
static int64_t
caplist_num(const char *name)
{
    size_t n = strspn(name, "0123456789");
    if (n == 0 || n > 9 || strcmp(name + n, ".xml") != 0)
        return -1;
    return strtoll(name, NULL, 10);
}

static void
serve_source(struct site *s, struct evhttp_request *req, const char *rest)
{
    size_t n = strcspn(rest, "/");
    const struct poller *p = find_source(s, rest, n);
    if (p == NULL) {
        reply_text(s, req, 404, "Not Found", "no such source");
        return;
    }
    const char *sub = rest[n] == '/' ? rest + n + 1 : "";
    char *doc = NULL;
    size_t len = 0;
    int rc;
    if (sub[0] == '\0' || strcmp(sub, ".well-known/resourcesync") == 0) {
        rc = site_description(p, &doc, &len);
    } else if (strncmp(sub, "capabilitylist/", 15) == 0 &&
               caplist_num(sub + 15) >= 0) {
        rc = site_caplist(p, caplist_num(sub + 15), &doc, &len);
    } else {
        reply_text(s, req, 404, "Not Found", "not found");
        return;
    }
    if (rc == RS_EAGAIN) {
        reply_text(s, req, 503, "Service Unavailable",
                   "not read from the source yet");
    } else if (rc == RS_ENOTFOUND) {
        reply_text(s, req, 404, "Not Found", "no such capability list");
    } else if (rc != 0) {
        rs_log_kv(RS_LOG_ERROR, "a bridged document failed", "source",
                  poller_name(p), "error", rs_strerror(rc), NULL);
        reply_text(s, req, 500, "Internal Server Error", "document failed");
    } else {
        reply_doc(s, req, SITE_XML, doc, len);
    }
    rs_free(doc);
}

static void
on_request(struct evhttp_request *req, void *arg)
{
    struct site *s = arg;
    s->st.requests++;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
        reply_text(s, req, 405, "Method Not Allowed", "GET or HEAD only");
        return;
    }
    const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
    const char *path = u != NULL ? evhttp_uri_get_path(u) : NULL;
    if (path == NULL || path[0] != '/') {
        reply_text(s, req, 400, "Bad Request", "bad path");
        return;
    }
    if (strcmp(path, "/healthz") == 0)
        reply_text(s, req, 200, "OK", "ok");
    else if (strcmp(path, "/sources") == 0)
        serve_sources(s, req);
    else if (strncmp(path, "/s/", 3) == 0)
        serve_source(s, req, path + 3);
    else
        reply_text(s, req, 404, "Not Found", "not found");
}

/* ---------------------------------------------------------------- API */

struct site *
site_new(const struct site_opts *o)
{
    struct site *s = rs_calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->o = *o;
    rs_httpguard_set_handler(o->guard, on_request, s);
    return s;
}

void
site_free(struct site *s)
{
    if (s == NULL)
        return;
    rs_httpguard_set_handler(s->o.guard, NULL, NULL);
    rs_free(s);
}

void
site_stats(const struct site *s, struct site_stats *out)
{
    *out = s->st;
}
