/*
 * docwalk.c - one ResourceSync document at a time, streamed from rs_http
 * into rs_parser; indexes and rel="next" pages push more documents on a
 * stack so a walk reads a tree of documents depth first, children in
 * order, without holding more than one document's index in memory.
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "docwalk.h"
#include "rs_alloc.h"
#include "rs_backoff.h"
#include "rs_http.h"
#include "rs_parse.h"
#include "rs_retry_after.h"
#include "rs_time.h"
#include "rs_url.h"
#include "uriset.h"

#define DW_TIMEOUT_MS 300000
#define DW_RETRIES 3
#define DW_MAX_DOCS 100000
#define DW_BACKOFF_MS 500
#define DW_RETRY_AFTER_MAX_S 60

/* A document that could not be had: 0.5 s, 1 s, 2 s ... (DW_RETRIES). */
static const struct rs_backoff DW_BACKOFF = { .first_ms = DW_BACKOFF_MS };

struct dw_kid {
    char *loc;
    rs_time_t from;
    size_t ord;
};

struct docwalk {
    struct docwalk_opts o;
    struct event *ev_step;       /* runs the next document (also retries) */
    bool busy;
    bool in_cb;                  /* inside one of our loop callbacks */
    bool freed;                  /* docwalk_free ran while in_cb or while a
                                    request was out: destroy when back */
    bool retrying;               /* the stack's top is a document to retry */
    char **stack;                /* documents still to read; top read next */
    size_t nstack, capstack;
    struct uriset seen;          /* documents read: one read twice is a
                                    loop, and fails the walk */
    /* the current document */
    char *url;
    struct rs_parser *p;
    struct rs_http_req *req;
    struct rs_http_req *hreq;    /* the response being read: headers for
                                    docwalk_header, during callbacks */
    char *cond, *cond_url;       /* docwalk_start_cond: the header, for
                                    the first document only */
    unsigned attempt;
    size_t doc_entries;
    bool is_index;
    bool skip;                   /* on_head said DOCWALK_SKIP */
    int cb_rc;                   /* a callback's error stopping the parse */
    char *next;
    struct dw_kid *kids;
    size_t nkids, capkids;
    long retry_after_s;
    size_t docs, entries;
    char err[512];
};

static void dw_step(struct docwalk *w);

/* ------------------------------------------------------------- stack */

/* Takes url (rs_malloc'ed) whatever happens. */
static int
dw_push(struct docwalk *w, char *url)
{
    if (w->nstack == w->capstack) {
        size_t ncap = w->capstack ? w->capstack * 2 : 16;
        char **t = rs_realloc(w->stack, ncap * sizeof(*t));
        if (t == NULL) {
            rs_free(url);
            return RS_ENOMEM;
        }
        w->stack = t;
        w->capstack = ncap;
    }
    w->stack[w->nstack++] = url;
    return 0;
}

static void
dw_doc_reset(struct docwalk *w)
{
    rs_parser_free(w->p);
    w->p = NULL;
    for (size_t i = 0; i < w->nkids; i++)
        rs_free(w->kids[i].loc);
    w->nkids = 0;
    rs_free(w->next);
    w->next = NULL;
    w->doc_entries = 0;
    w->is_index = false;
    w->skip = false;
    w->cb_rc = 0;
    w->retry_after_s = -1;
}

static void
dw_clear(struct docwalk *w)
{
    dw_doc_reset(w);
    while (w->nstack > 0)
        rs_free(w->stack[--w->nstack]);
    rs_free(w->url);
    w->url = NULL;
    rs_free(w->cond);
    rs_free(w->cond_url);
    w->cond = w->cond_url = NULL;
    uriset_clear(&w->seen);
}

static void
dw_destroy(struct docwalk *w)
{
    dw_clear(w);
    rs_free(w->stack);
    rs_free(w->kids);
    if (w->ev_step != NULL)
        event_free(w->ev_step);
    rs_free(w);
}

/* The walk ends: on_done last, since it may free w. */
static void
dw_finish(struct docwalk *w, int rc)
{
    char err[sizeof(w->err)];

    snprintf(err, sizeof(err), "%s", rc == 0 ? "" : w->err);
    dw_clear(w);
    w->busy = false;
    w->o.on_done(w->o.ud, rc, err);
}

/* Remember why the walk fails: "URL: WHAT[ DETAIL]". */
static int
dw_fail(struct docwalk *w, int rc, const char *what, const char *detail)
{
    snprintf(w->err, sizeof(w->err), "%s: %s%s%s", w->url, what,
             detail != NULL ? " " : "", detail != NULL ? detail : "");
    return rc;
}

/* ----------------------------------------------------- parser callbacks */

static int
dw_on_head(void *ud, const struct rs_head *h)
{
    struct docwalk *w = ud;
    int rc;

    w->is_index = h->root == RS_ROOT_SITEMAPINDEX;
    if (w->o.on_head == NULL)
        return 0;
    rc = w->o.on_head(w->o.ud, w->url, h);
    if (w->freed)
        return 1;
    if (rc == DOCWALK_SKIP) {
        w->skip = true;
        return 1;
    }
    if (rc < 0) {
        w->cb_rc = rc;
        dw_fail(w, rc, "stopped by the reader:", rs_strerror(rc));
        return 1;
    }
    return 0;
}

static int
dw_kid_add(struct docwalk *w, char *loc, rs_time_t from)
{
    if (w->nkids == w->capkids) {
        size_t ncap = w->capkids ? w->capkids * 2 : 64;
        struct dw_kid *t = rs_realloc(w->kids, ncap * sizeof(*t));
        if (t == NULL) {
            rs_free(loc);
            return RS_ENOMEM;
        }
        w->kids = t;
        w->capkids = ncap;
    }
    w->kids[w->nkids] = (struct dw_kid){ loc, from, w->nkids };
    w->nkids++;
    return 0;
}

static int
dw_on_entry(void *ud, const struct rs_entry *e)
{
    struct docwalk *w = ud;
    char *loc = NULL;
    int rc;

    rc = rs_url_resolve(w->url, e->loc, &loc);
    if (rc == RS_ENOMEM) {
        w->cb_rc = dw_fail(w, rc, "out of memory", NULL);
        return 1;
    }
    if (rc != 0 || !rs_url_is_http(loc)) {
        rs_free(loc);
        w->cb_rc = dw_fail(w, RS_EINVALID, "an entry's <loc> is not an "
                           "http(s) URL:", e->loc);
        return 1;
    }
    w->doc_entries++;
    w->entries++;
    if (w->is_index) {
        rc = w->o.on_child != NULL ? w->o.on_child(w->o.ud, w->url, e, loc) : 1;
        if (w->freed) {
            rs_free(loc);
            return 1;
        }
        if (rc == 1)
            rc = dw_kid_add(w, loc, e->has_md ? e->md.from : RS_TIME_NONE);
        else
            rs_free(loc);
    } else {
        rc = w->o.on_entry(w->o.ud, w->url, e, loc);
        rs_free(loc);
        if (w->freed)
            return 1;
    }
    if (rc < 0) {
        w->cb_rc = dw_fail(w, rc, "stopped by the reader:", rs_strerror(rc));
        return 1;
    }
    return 0;
}

/* skip_bad_entries: an entry the parser skipped. */
static int
dw_on_bad_entry(void *ud, const struct rs_entry *e, unsigned line,
                const char *msg)
{
    struct docwalk *w = ud;
    int rc;

    if (w->o.on_bad_entry == NULL)
        return 0;
    rc = w->o.on_bad_entry(w->o.ud, w->url, e, line, msg);
    if (w->freed)
        return 1;
    if (rc < 0) {
        w->cb_rc = dw_fail(w, rc, "stopped by the reader:", rs_strerror(rc));
        return 1;
    }
    return 0;
}

static int
dw_on_end(void *ud, const struct rs_head *h)
{
    struct docwalk *w = ud;
    const struct rs_link *next = rs_links_find(h->links, h->nlinks, "next");
    int rc = 0;

    if (next != NULL)
        rc = rs_url_resolve(w->url, next->href, &w->next);
    if (rc == RS_ENOMEM) {
        w->cb_rc = dw_fail(w, rc, "out of memory", NULL);
        return 1;
    }
    if (rc != 0) {
        w->cb_rc = dw_fail(w, RS_EINVALID, "bad rel=\"next\"", next->href);
        return 1;
    }
    if (w->o.on_doc_end != NULL)
        w->o.on_doc_end(w->o.ud, w->url, h);
    return w->freed ? 1 : 0;
}

/* ------------------------------------------------------------- fetching */

static int
dw_on_data(void *ud, struct rs_http_req *req, const char *buf, size_t len)
{
    struct docwalk *w = ud;
    long status = rs_http_req_status(req);
    int rc;

    if (w->freed)
        return 1;
    if (status < 200 || status > 299)
        return 0;                     /* an error page: on_done reports it */
    w->hreq = req;
    rc = rs_parser_feed(w->p, buf, len);
    w->hreq = NULL;
    if (rc != 0 && w->cb_rc == 0 && !w->skip && !w->freed) {
        const struct rs_diag *d = rs_parser_error(w->p);
        char line[32] = "";
        if (d != NULL && d->line > 0)
            snprintf(line, sizeof(line), ":%u", d->line);
        snprintf(w->err, sizeof(w->err), "%s%s: %s", w->url, line,
                 d != NULL ? d->msg : rs_strerror(rc));
        w->cb_rc = rc;
    }
    return rc != 0;
}

static int
dw_cmp_kid(const void *a, const void *b)
{
    const struct dw_kid *x = a, *y = b;

    if (x->from != y->from)
        return x->from < y->from ? -1 : 1;
    return x->ord < y->ord ? -1 : x->ord > y->ord;
}

/* The document was read: queue its next page, then its children on top
 * so they come first. */
static int
dw_doc_done(struct docwalk *w)
{
    bool all_from = w->nkids > 0;
    int rc = 0;

    w->docs++;
    if (w->next != NULL) {
        rc = dw_push(w, w->next);
        w->next = NULL;
        if (rc != 0)
            return dw_fail(w, rc, "out of memory", NULL);
    }
    for (size_t i = 0; i < w->nkids; i++)
        if (w->kids[i].from == RS_TIME_NONE)
            all_from = false;
    if (all_from)
        qsort(w->kids, w->nkids, sizeof(*w->kids), dw_cmp_kid);
    while (w->nkids > 0) {
        struct dw_kid *k = &w->kids[--w->nkids];
        if ((rc = dw_push(w, k->loc)) != 0)
            return dw_fail(w, rc, "out of memory", NULL);
    }
    return 0;
}

static bool
dw_retryable(const struct rs_http_result *res)
{
    if (res->rc == RS_ETIMEDOUT || res->rc == RS_EIO)
        return true;
    return res->rc == 0 && (res->status >= 500 || res->status == 429 ||
                            res->status == 408);
}

static void
dw_handle_done(struct docwalk *w, struct rs_http_req *req,
               const struct rs_http_result *res)
{
    const char *ra;
    int rc;

    ra = rs_http_req_header(req, "Retry-After");
    w->retry_after_s = -1;
    uint64_t ra_ms;
    if (ra != NULL && rs_retry_after_parse(ra, (int64_t)time(NULL), &ra_ms) == 0)
        w->retry_after_s = ra_ms / 1000 < DW_RETRY_AFTER_MAX_S
                           ? (long)(ra_ms / 1000) : DW_RETRY_AFTER_MAX_S;
    if (res->rc == 0 && res->status == 304 && w->cond != NULL &&
        strcmp(w->url, w->cond_url) == 0) {
        /* Unchanged since the validator: read, with nothing new. */
        w->docs++;
        w->attempt = 0;
        dw_doc_reset(w);
        if (w->o.on_not_modified != NULL)
            w->o.on_not_modified(w->o.ud, w->url);
        if (w->freed)
            return;
        dw_step(w);
        return;
    }
    if (w->skip && res->rc == RS_ESTOPPED) {
        w->docs++;
        w->attempt = 0;
        dw_doc_reset(w);
        dw_step(w);
        return;
    }
    if (w->cb_rc != 0) {
        dw_finish(w, w->cb_rc);
        return;
    }
    if (dw_retryable(res) && w->doc_entries == 0 &&
        w->attempt < (w->o.retries ? w->o.retries : DW_RETRIES)) {
        long ms = (long)rs_backoff_base(&DW_BACKOFF, w->attempt + 1);
        if (w->retry_after_s >= 0)
            ms = 1000 * (w->retry_after_s < DW_RETRY_AFTER_MAX_S
                         ? w->retry_after_s : DW_RETRY_AFTER_MAX_S);
        struct timeval tv = rs_time_tv_ms(ms);
        w->attempt++;
        dw_doc_reset(w);
        /* Back on the stack, still marked seen: the step knows a retry. */
        if (dw_push(w, w->url) != 0) {
            w->url = NULL;
            snprintf(w->err, sizeof(w->err), "out of memory");
            dw_finish(w, RS_ENOMEM);
            return;
        }
        w->url = NULL;
        w->retrying = true;
        evtimer_add(w->ev_step, &tv);
        return;
    }
    if (res->rc != 0) {
        snprintf(w->err, sizeof(w->err), "GET %s: %s", w->url, res->errstr);
        dw_finish(w, res->rc);
        return;
    }
    if (res->status < 200 || res->status > 299) {
        snprintf(w->err, sizeof(w->err), "GET %s: HTTP %ld", w->url,
                 res->status);
        dw_finish(w, res->status == 404 || res->status == 410
                     ? RS_ENOTFOUND : RS_EPROTO);
        return;
    }
    w->hreq = req;
    rc = rs_parser_finish(w->p);
    w->hreq = NULL;
    if (w->freed)
        return;
    if (rc != 0 && w->cb_rc == 0 && !w->skip) {
        const struct rs_diag *d = rs_parser_error(w->p);
        char line[32] = "";
        if (d != NULL && d->line > 0)
            snprintf(line, sizeof(line), ":%u", d->line);
        snprintf(w->err, sizeof(w->err), "%s%s: %s", w->url, line,
                 d != NULL ? d->msg : rs_strerror(rc));
        dw_finish(w, rc);
        return;
    }
    if (w->cb_rc != 0) {
        dw_finish(w, w->cb_rc);
        return;
    }
    if (!w->skip && (rc = dw_doc_done(w)) != 0) {
        dw_finish(w, rc);
        return;
    }
    w->attempt = 0;
    dw_doc_reset(w);
    dw_step(w);
}

static void
dw_on_http_done(void *ud, struct rs_http_req *req,
                const struct rs_http_result *res)
{
    struct docwalk *w = ud;

    w->req = NULL;
    if (!w->freed) {
        w->in_cb = true;
        dw_handle_done(w, req, res);
        w->in_cb = false;
    }
    if (w->freed)
        dw_destroy(w);
}

static void
dw_step(struct docwalk *w)
{
    struct rs_parse_opts po = {
        .strict = w->o.strict,
        .gunzip = true,
        .skip_bad_entries = w->o.skip_bad_entries,
        .on_bad_entry = dw_on_bad_entry,
        .warning_ud = w,
    };
    struct rs_parser_cbs cbs = { dw_on_head, dw_on_entry, dw_on_end };
    struct rs_http_req_opts ro = {
        .url = NULL,
        .timeout_ms = w->o.timeout_ms ? w->o.timeout_ms : DW_TIMEOUT_MS,
        .max_body = RS_MAX_DOC_BYTES,
        .max_redirects = 5,
        .on_data = dw_on_data,
        .on_done = dw_on_http_done,
        .ud = w,
        .accept_encoding = true,
    };
    const char *hdrs[] = {
        "Accept: application/xml, text/xml;q=0.9, */*;q=0.1", NULL, NULL
    };
    int rc;

    for (;;) {
        rs_free(w->url);
        w->url = NULL;
        if (w->nstack == 0) {
            dw_finish(w, 0);
            return;
        }
        w->url = w->stack[--w->nstack];
        if (w->retrying) {
            w->retrying = false;       /* already marked seen */
            break;
        }
        rc = uriset_add(&w->seen, w->url);
        if (rc == 0)
            break;
        if (rc < 0) {
            snprintf(w->err, sizeof(w->err), "out of memory");
            dw_finish(w, rc);
            return;
        }
        /* Read already: the documents loop (an index listing itself or
         * an ancestor, a rel="next" back to an earlier page) or list a
         * part twice. Skipping it would make the list look shorter than
         * the Source says, and a short list deletes; the walk fails. */
        dw_fail(w, RS_EINVALID, "read twice in one walk: the documents "
                "loop (an index listing itself or an ancestor, a rel=\"next\" "
                "back to an earlier page) or list a part twice", NULL);
        dw_finish(w, RS_EINVALID);
        return;
    }
    if (w->docs >= (w->o.max_docs ? w->o.max_docs : DW_MAX_DOCS)) {
        snprintf(w->err, sizeof(w->err), "more than %zu documents in one "
                 "walk (at %s)", w->docs, w->url);
        dw_finish(w, RS_ETOOBIG);
        return;
    }
    w->p = rs_parser_new(&po, &cbs, w);
    ro.url = w->url;
    if (w->cond != NULL && strcmp(w->url, w->cond_url) == 0)
        hdrs[1] = w->cond;
    ro.headers = hdrs;
    if (w->p == NULL) {
        snprintf(w->err, sizeof(w->err), "out of memory");
        dw_finish(w, RS_ENOMEM);
        return;
    }
    rc = rs_http_request(w->o.http, &ro, &w->req);
    if (rc != 0) {
        snprintf(w->err, sizeof(w->err), "GET %s: %s", w->url,
                 rs_strerror(rc));
        dw_finish(w, rc);
    }
}

static void
dw_on_step(evutil_socket_t fd, short what, void *arg)
{
    struct docwalk *w = arg;

    (void)fd;
    (void)what;
    w->in_cb = true;
    dw_step(w);
    w->in_cb = false;
    if (w->freed && w->req == NULL)
        dw_destroy(w);
}

/* ---------------------------------------------------------------- API */

struct docwalk *
docwalk_new(const struct docwalk_opts *o)
{
    struct docwalk *w = rs_calloc(1, sizeof(*w));

    if (w == NULL)
        return NULL;
    w->o = *o;
    w->ev_step = evtimer_new(o->base, dw_on_step, w);
    if (w->ev_step == NULL) {
        rs_free(w);
        return NULL;
    }
    return w;
}

void
docwalk_free(struct docwalk *w)
{
    if (w == NULL || w->freed)
        return;
    if (w->req != NULL) {
        /* Its on_done frees us: we may be inside its on_data. */
        w->freed = true;
        rs_http_cancel(w->req);
        return;
    }
    if (w->in_cb) {
        w->freed = true;
        return;
    }
    dw_destroy(w);
}

int
docwalk_start(struct docwalk *w, const char *url)
{
    return docwalk_start_cond(w, url, NULL);
}

int
docwalk_start_cond(struct docwalk *w, const char *url, const char *cond)
{
    struct timeval now = { 0, 0 };
    char *u;
    int rc;

    if (w->busy)
        return RS_ESTATE;
    if (!rs_url_is_http(url))
        return RS_EINVAL;
    if ((u = rs_strdup(url)) == NULL)
        return RS_ENOMEM;
    if (cond != NULL &&
        ((w->cond = rs_strdup(cond)) == NULL ||
         (w->cond_url = rs_strdup(url)) == NULL)) {
        rs_free(u);
        rs_free(w->cond);
        w->cond = NULL;
        return RS_ENOMEM;
    }
    if ((rc = dw_push(w, u)) != 0)
        return rc;
    w->busy = true;
    w->docs = w->entries = 0;
    w->attempt = 0;
    w->retrying = false;
    w->err[0] = '\0';
    evtimer_add(w->ev_step, &now);
    return 0;
}

const char *
docwalk_header(const struct docwalk *w, const char *name)
{
    return w->hreq != NULL ? rs_http_req_header(w->hreq, name) : NULL;
}

void
docwalk_links(const struct docwalk *w,
              void (*cb)(void *ud, const char *value), void *ud)
{
    if (w->hreq != NULL)
        rs_http_req_headers(w->hreq, "Link", cb, ud);
}

bool
docwalk_busy(const struct docwalk *w)
{
    return w->busy;
}

size_t
docwalk_docs(const struct docwalk *w)
{
    return w->docs;
}

size_t
docwalk_entries(const struct docwalk *w)
{
    return w->entries;
}
