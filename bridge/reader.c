/*
 * reader.c - one conditional GET (or HEAD) at a time (see reader.h): the
 * body of a 200 goes through a SHA-256 and proto's streaming parser as it
 * arrives; an error page (any other status) is not parsed. The parser's
 * head is copied into struct reader_doc when it ends, so that a root
 * rel="next" written after the entries counts too.
 */
#include "reader.h"

#include <event2/event.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "rs_alloc.h"
#include "rs_hash.h"
#include "rs_http.h"
#include "rs_parse.h"
#include "rs_retry_after.h"
#include "rs_time.h"
#include "rs_url.h"

#define READER_TIMEOUT_MS 60000
#define READER_VALIDATOR_MAX 512   /* longer validators are not sent back */

struct reader {
    struct reader_opts o;
    struct reader_req q;          /* the request under way */
    char *url;                    /* q.url, ours */
    struct rs_http_req *req;
    struct rs_parser *p;
    struct rs_hasher *hasher;
    bool busy;
    bool freed;                   /* reader_free with a request out */
    bool head_seen;
    int cb_rc;                    /* a user callback's error */
    size_t entries;
    size_t skipped;               /* entries skipped (q.skip_bad_entries) */
    struct reader_doc doc;
    char *body;                   /* keep_body */
    size_t len, cap;
    char err[640];
};

static void
doc_reset(struct reader_doc *d)
{
    rs_free(d->next);
    memset(d, 0, sizeof(*d));
    d->at = d->completed = d->from = d->until = RS_TIME_NONE;
}

static void
rd_reset(struct reader *r)
{
    rs_parser_free(r->p);
    r->p = NULL;
    rs_hasher_free(r->hasher);
    r->hasher = NULL;
    rs_free(r->url);
    r->url = NULL;
    doc_reset(&r->doc);
    r->len = 0;
    r->entries = 0;
    r->skipped = 0;
    r->head_seen = false;
    r->cb_rc = 0;
    r->busy = false;
}

static void
rd_destroy(struct reader *r)
{
    rd_reset(r);
    rs_free(r->body);
    rs_free(r);
}

/* ---------------------------------------------------- parser callbacks */

/*
 * The root's rel="next" is where the list goes on: a walk that cannot
 * follow it would end short, and a Resource List read short makes every
 * resource of the pages not read look deleted. So an href that does not
 * resolve to an http(s) URL fails the read (RS_EINVALID, the document and
 * the href in err) - unless only the head was asked for, which follows no
 * page.
 */
static int
doc_take_head(struct reader *r, const struct rs_head *h)
{
    r->doc.root = h->root;
    r->doc.cap = h->md.capability;
    r->doc.at = h->md.at;
    r->doc.completed = h->md.completed;
    r->doc.from = h->md.from;
    r->doc.until = h->md.until;
    const struct rs_link *next = rs_links_find(h->links, h->nlinks, "next");
    if (next == NULL || r->doc.next != NULL || r->q.head_only)
        return 0;
    char *u = NULL;
    int rc = next->href != NULL ? rs_url_resolve(r->url, next->href, &u)
                                : RS_EINVAL;
    if (rc == RS_ENOMEM) {
        r->cb_rc = rc;
        snprintf(r->err, sizeof(r->err), "out of memory");
        return rc;
    }
    if (rc != 0 || !rs_url_is_http(u)) {
        rs_free(u);
        r->cb_rc = RS_EINVALID;
        snprintf(r->err, sizeof(r->err), "%.300s: its rel=\"next\" href is "
                 "not an http(s) URL, the pages after it cannot be read: "
                 "%.200s", r->url, next->href != NULL ? next->href : "");
        return r->cb_rc;
    }
    r->doc.next = u;
    return 0;
}

static int
on_head(void *ud, const struct rs_head *h)
{
    struct reader *r = ud;
    r->head_seen = true;
    if (doc_take_head(r, h) != 0)
        return 1;
    if (r->q.on_head != NULL) {
        int rc = r->q.on_head(r->q.ud, h);
        if (rc != 0) {
            r->cb_rc = rc < 0 ? rc : RS_ESTOPPED;
            snprintf(r->err, sizeof(r->err), "%s: stopped: %s", r->url,
                     rs_strerror(r->cb_rc));
            return 1;
        }
    }
    return r->q.head_only ? 1 : 0;
}

/* An entry skipped (q.skip_bad_entries): told to the caller, who may
 * still stop the read (an index's child). 0 goes on, 1 stops. */
static int
skip_entry(struct reader *r, const char *loc, unsigned line, const char *why)
{
    r->skipped++;
    int rc = r->q.on_bad_entry != NULL
                 ? r->q.on_bad_entry(r->q.ud, loc, line, why) : 0;
    if (rc == 0)
        return 0;
    r->cb_rc = rc < 0 ? rc : RS_ESTOPPED;
    snprintf(r->err, sizeof(r->err), "%s:%u: %.300s", r->url, line, why);
    return 1;
}

static int
on_bad_entry(void *ud, const struct rs_entry *e, unsigned line,
             const char *msg)
{
    return skip_entry(ud, e->loc, line, msg);
}

static int
on_entry(void *ud, const struct rs_entry *e)
{
    struct reader *r = ud;
    char *loc = NULL;
    int rc = rs_url_resolve(r->url, e->loc, &loc);
    if (rc == RS_ENOMEM) {
        r->cb_rc = rc;
        snprintf(r->err, sizeof(r->err), "out of memory");
        return 1;
    }
    if (rc != 0 || !rs_url_is_http(loc)) {
        rs_free(loc);
        if (r->q.skip_bad_entries)
            return skip_entry(r, e->loc, e->line, "<loc> is not an "
                              "http(s) URL");
        r->cb_rc = RS_EINVALID;
        snprintf(r->err, sizeof(r->err), "%s:%u: <loc> is not an http(s) "
                 "URL: %.200s", r->url, e->line, e->loc);
        return 1;
    }
    rc = r->q.on_entry != NULL ? r->q.on_entry(r->q.ud, r->entries, e, loc)
                               : 0;
    rs_free(loc);
    r->entries++;
    if (rc < 0) {
        r->cb_rc = rc;
        snprintf(r->err, sizeof(r->err), "%s: stopped: %s", r->url,
                 rs_strerror(rc));
        return 1;
    }
    return 0;
}

static int
on_end(void *ud, const struct rs_head *h)
{
    struct reader *r = ud;
    return doc_take_head(r, h) != 0 ? 1 : 0;
}

/* ------------------------------------------------------------ transfer */

static int
keep(struct reader *r, const char *buf, size_t len)
{
    if (len > READER_BODY_MAX - r->len)
        return RS_ETOOBIG;
    if (r->len + len > r->cap) {
        size_t cap = r->cap != 0 ? r->cap : 16384;
        while (cap < r->len + len)
            cap *= 2;
        char *b = rs_realloc(r->body, cap + 1);
        if (b == NULL)
            return RS_ENOMEM;
        r->body = b;
        r->cap = cap;
    }
    memcpy(r->body + r->len, buf, len);
    r->len += len;
    r->body[r->len] = '\0';
    return 0;
}

static void
parse_error(struct reader *r, int rc)
{
    const struct rs_diag *d = rs_parser_error(r->p);
    char line[32] = "";
    if (d != NULL && d->line > 0)
        snprintf(line, sizeof(line), ":%u", d->line);
    snprintf(r->err, sizeof(r->err), "%s%s: %s", r->url, line,
             d != NULL ? d->msg : rs_strerror(rc));
}

static int
on_data(void *ud, struct rs_http_req *req, const char *buf, size_t len)
{
    struct reader *r = ud;
    if (r->freed)
        return 1;
    long status = rs_http_req_status(req);
    if (status != 200 || r->p == NULL)
        return 0;                    /* an error page: on_done reports it */
    if (len == 0)
        return 0;
    if (rs_hasher_update(r->hasher, buf, len) != 0) {
        r->cb_rc = RS_ENOMEM;
        snprintf(r->err, sizeof(r->err), "out of memory");
        return 1;
    }
    if (r->q.keep_body) {
        int rc = keep(r, buf, len);
        if (rc != 0) {
            r->cb_rc = rc;
            snprintf(r->err, sizeof(r->err), "%s: over %u bytes", r->url,
                     READER_BODY_MAX);
            return 1;
        }
    }
    int rc = rs_parser_feed(r->p, buf, len);
    if (r->q.on_chunk != NULL)
        r->q.on_chunk(r->q.ud);
    if (rc != 0 && r->cb_rc == 0 && !(r->q.head_only && r->head_seen)) {
        parse_error(r, rc);
        r->cb_rc = rc;
    }
    return rc != 0;
}

static void
keep_validator(const char *v, const char **out)
{
    *out = v != NULL && strlen(v) < READER_VALIDATOR_MAX ? v : NULL;
}

static void
on_http_done(void *ud, struct rs_http_req *req, const struct rs_http_result *res)
{
    struct reader *r = ud;
    r->req = NULL;
    if (r->freed) {
        rd_destroy(r);
        return;
    }
    struct reader_result out = {
        .rc = res->rc,
        .status = res->status,
        .retry_after_ms = -1,
    };
    bool parsed = false;
    if (res->rc == 0 || res->rc == RS_ESTOPPED) {
        keep_validator(rs_http_req_header(req, "ETag"), &out.etag);
        keep_validator(rs_http_req_header(req, "Last-Modified"),
                       &out.last_modified);
        const char *ra = rs_http_req_header(req, "Retry-After");
        uint64_t ms;
        if (ra != NULL &&
            rs_retry_after_parse(ra, rs_time_now() / 1000000, &ms) == 0)
            out.retry_after_ms = (int64_t)ms;
    }
    if (r->q.head_only && r->head_seen && r->cb_rc == 0 &&
        (res->rc == RS_ESTOPPED || res->rc == 0)) {
        out.rc = 0;                  /* stopped after the head, as asked */
        parsed = true;
    } else if (r->cb_rc != 0) {
        out.rc = r->cb_rc;
    } else if (res->rc != 0) {
        snprintf(r->err, sizeof(r->err), "%s %s: %s",
                 r->q.head ? "HEAD" : "GET", r->url, res->errstr);
    } else if (res->status == 304) {
        out.not_modified = true;
    } else if (res->status == 200 && r->p != NULL) {
        int rc = rs_parser_finish(r->p);
        if (rc != 0 && r->q.head_only && r->head_seen && r->cb_rc == 0) {
            /* a list without entries: its head comes with its end, which
             * the parser holds until the finish, and stops there */
            parsed = true;
        } else if (rc != 0 && r->cb_rc == 0) {
            parse_error(r, rc);
            out.rc = rc;
        } else if (r->cb_rc != 0) {
            out.rc = r->cb_rc;
        } else {
            struct rs_hashes h;
            const struct rs_digest *d = NULL;
            if (rs_hasher_final(r->hasher, &h) == 0)
                d = rs_hashes_find(&h, RS_HASH_SHA256);
            if (d != NULL && d->len == READER_DIGEST) {
                out.has_digest = true;
                memcpy(out.digest, d->bytes, READER_DIGEST);
            }
            parsed = true;
        }
    }
    out.entries = r->entries;
    out.skipped = r->skipped;
    /* res is the client's until this callback returns */
    if (res->effective_url != NULL && r->url != NULL &&
        strcmp(res->effective_url, r->url) != 0)
        out.effective_url = res->effective_url;
    /* Hand over what was read, and make the reader free for the next
     * request before on_done: the caller chains it from there. */
    struct reader_doc doc = r->doc;
    memset(&r->doc, 0, sizeof(r->doc));
    char *body = r->body;
    size_t blen = r->len, bcap = r->cap;
    r->body = NULL;
    r->len = r->cap = 0;
    char err[sizeof(r->err)];
    snprintf(err, sizeof(err), "%s", out.rc != 0 ? r->err : "");
    struct reader_req q = r->q;
    rd_reset(r);
    if (parsed)
        out.doc = &doc;
    if (q.keep_body && parsed && !q.head_only) {
        out.body = body != NULL ? body : "";
        out.body_len = blen;
    }
    out.err = err;
    q.on_done(q.ud, &out);
    rs_free(doc.next);
    if (r->body == NULL) {
        r->body = body;               /* its buffer, for the next one */
        r->cap = bcap;
    } else {
        rs_free(body);
    }
}

/* ---------------------------------------------------------------- API */

struct reader *
reader_new(const struct reader_opts *o)
{
    struct reader *r = rs_calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->o = *o;
    doc_reset(&r->doc);
    return r;
}

void
reader_free(struct reader *r)
{
    if (r == NULL || r->freed)
        return;
    if (r->req != NULL) {
        /* rs_http completes it from the loop; its on_done destroys us */
        r->freed = true;
        rs_http_cancel(r->req);
        return;
    }
    rd_destroy(r);
}

int
reader_get(struct reader *r, const struct reader_req *q)
{
    if (r->busy || r->freed)
        return RS_ESTATE;
    if (q->url == NULL || !rs_url_is_http(q->url) || q->on_done == NULL)
        return RS_EINVAL;
    r->q = *q;
    r->err[0] = '\0';
    r->url = rs_strdup(q->url);
    if (r->url == NULL)
        return RS_ENOMEM;
    r->q.url = r->url;
    char cond[READER_VALIDATOR_MAX + 32];
    const char *hdrs[3] = {
        "Accept: application/xml, text/xml;q=0.9, */*;q=0.1", NULL, NULL
    };
    if (q->etag != NULL && strlen(q->etag) < READER_VALIDATOR_MAX) {
        snprintf(cond, sizeof(cond), "If-None-Match: %s", q->etag);
        hdrs[1] = cond;
    } else if (q->last_modified != NULL &&
               strlen(q->last_modified) < READER_VALIDATOR_MAX) {
        snprintf(cond, sizeof(cond), "If-Modified-Since: %s",
                 q->last_modified);
        hdrs[1] = cond;
    }
    if (!q->head) {
        struct rs_parse_opts po = {
            .max_bytes = r->o.max_bytes,
            .max_entries = r->o.max_entries,
            .gunzip = true,
            .skip_bad_entries = q->skip_bad_entries,
            .on_bad_entry = on_bad_entry,
            .warning_ud = r,
        };
        struct rs_parser_cbs cbs = { on_head, on_entry, on_end };
        r->p = rs_parser_new(&po, &cbs, r);
        r->hasher = rs_hasher_new(1u << RS_HASH_SHA256);
        if (r->p == NULL || r->hasher == NULL) {
            rd_reset(r);
            return RS_ENOMEM;
        }
    }
    struct rs_http_req_opts ro = {
        .method = q->head ? "HEAD" : NULL,
        .url = r->url,
        .headers = hdrs,
        .timeout_ms = r->o.timeout_ms ? r->o.timeout_ms : READER_TIMEOUT_MS,
        .max_body = q->head ? 65536
                            : (r->o.max_bytes ? r->o.max_bytes
                                              : RS_MAX_DOC_BYTES),
        .max_redirects = 5,
        .on_data = q->head ? NULL : on_data,
        .on_done = on_http_done,
        .ud = r,
        .accept_encoding = true,
    };
    r->busy = true;
    int rc = rs_http_request(r->o.http, &ro, &r->req);
    if (rc != 0) {
        r->req = NULL;
        rd_reset(r);
    }
    return rc;
}

bool
reader_busy(const struct reader *r)
{
    return r->busy;
}

void
reader_cancel(struct reader *r)
{
    if (r->req != NULL)
        rs_http_cancel(r->req);
}
