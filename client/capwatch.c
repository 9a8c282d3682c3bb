/*
 * capwatch.c - one conditional GET at a time of a Capability List
 * (If-None-Match with the last ETag, else If-Modified-Since with the last
 * Last-Modified), parsed whole (a Capability List is small) and compared
 * with the last offer seen. A request that comes while a read is out sets
 * `again`: the list is read once more after it, so a notification that
 * arrives during a read is never answered with the older copy.
 */
#include <event2/event.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "capwatch.h"
#include "rs_alloc.h"
#include "rs_doc.h"
#include "rs_http.h"
#include "rs_parse.h"

#define CW_TIMEOUT_MS 30000
#define CW_MAX_BODY (8u << 20)   /* as discovery: a list of lists is small */
#define CW_VALIDATOR_MAX 512     /* longer ETags are not sent back */

struct capwatch {
    struct capwatch_opts o;
    struct discovery_set last;   /* the offer last seen */
    char *etag, *last_modified;  /* validators of the last 200 */
    struct event *ev_read;
    struct rs_http_req *req;
    bool again;                  /* asked while a read was out */
    bool freed;                  /* capwatch_free with a request out: its
                                    on_done destroys cw */
    struct capwatch_stats st;
};

static void
cw_destroy(struct capwatch *cw)
{
    discovery_set_clear(&cw->last);
    rs_free(cw->etag);
    rs_free(cw->last_modified);
    if (cw->ev_read != NULL)
        event_free(cw->ev_read);
    rs_free(cw);
}

__attribute__((format(printf, 2, 3))) static void
cw_error(struct capwatch *cw, const char *fmt, ...)
{
    char why[600];
    va_list ap;

    cw->st.errors++;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (cw->o.on_error != NULL)
        cw->o.on_error(cw->o.ud, why);
}

static void
keep_validator(char **dst, const char *v)
{
    rs_free(*dst);
    *dst = NULL;
    if (v != NULL && strlen(v) < CW_VALIDATOR_MAX)
        *dst = rs_strdup(v);          /* NULL when out of memory: no harm */
}

/* A 200: parse, check it is a Capability List, compare, hand over. */
static void
cw_take(struct capwatch *cw, struct rs_http_req *req,
        const struct rs_http_result *res)
{
    struct rs_parse_opts po = { .gunzip = true };
    struct rs_doc *doc = NULL;
    struct rs_diag diag;
    struct discovery_set now;
    const char *base = res->effective_url ? res->effective_url
                                          : cw->last.caplist;

    if (rs_doc_parse(res->body, res->body_len, &po, &doc, &diag) != 0) {
        cw_error(cw, "not a ResourceSync document (line %u: %s)", diag.line,
                 diag.msg);
        return;
    }
    if (doc->head.md.capability != RS_CAP_CAPABILITYLIST) {
        cw_error(cw, "a %s where the Capability List %s was",
                 rs_capability_name(doc->head.md.capability),
                 cw->last.caplist);
        rs_doc_free(doc);
        return;
    }
    if (discovery_set_read(&now, base, doc) != 0) {
        rs_doc_free(doc);
        cw_error(cw, "out of memory");
        return;
    }
    rs_doc_free(doc);
    /* Positions are keyed by the URL watched, not by where it moved. */
    char *url = rs_strdup(cw->last.caplist);
    if (url == NULL) {
        discovery_set_clear(&now);
        cw_error(cw, "out of memory");
        return;
    }
    rs_free(now.caplist);
    now.caplist = url;
    keep_validator(&cw->etag, rs_http_req_header(req, "ETag"));
    keep_validator(&cw->last_modified,
                   rs_http_req_header(req, "Last-Modified"));
    if (discovery_set_same(&now, &cw->last)) {
        discovery_set_clear(&now);
        return;
    }
    struct discovery_set copy;
    if (discovery_set_copy(&copy, &now) != 0) {
        discovery_set_clear(&now);
        cw_error(cw, "out of memory");
        return;
    }
    discovery_set_clear(&cw->last);
    cw->last = copy;
    cw->st.changes++;
    cw->o.on_change(cw->o.ud, &now);
    discovery_set_clear(&now);     /* unless the callee took it (zeroed) */
}

static void
on_read_done(void *ud, struct rs_http_req *req,
             const struct rs_http_result *res)
{
    struct capwatch *cw = ud;

    cw->req = NULL;
    if (cw->freed) {
        cw_destroy(cw);
        return;
    }
    if (res->rc == RS_ECANCELED)
        return;
    if (res->rc != 0) {
        cw_error(cw, "GET %s: %s", cw->last.caplist, res->errstr);
    } else if (res->status == 304) {
        cw->st.not_modified++;
    } else if (res->status < 200 || res->status > 299) {
        cw_error(cw, "GET %s: HTTP %ld", cw->last.caplist, res->status);
    } else {
        cw_take(cw, req, res);
    }
    if (cw->again) {
        struct timeval now = { 0, 0 };
        cw->again = false;
        evtimer_add(cw->ev_read, &now);
    }
}

static void
on_read(evutil_socket_t fd, short what, void *arg)
{
    struct capwatch *cw = arg;
    char cond[CW_VALIDATOR_MAX + 32];
    const char *hdrs[3] = {
        "Accept: application/xml, text/xml;q=0.9, */*;q=0.1", NULL, NULL
    };
    struct rs_http_req_opts ro = {
        .url = cw->last.caplist,
        .headers = hdrs,
        .timeout_ms = cw->o.timeout_ms ? cw->o.timeout_ms : CW_TIMEOUT_MS,
        .max_body = CW_MAX_BODY,
        .max_redirects = 5,
        .on_done = on_read_done,
        .ud = cw,
    };
    int rc;

    (void)fd;
    (void)what;
    if (cw->req != NULL) {
        cw->again = true;
        return;
    }
    if (cw->etag != NULL) {
        snprintf(cond, sizeof(cond), "If-None-Match: %s", cw->etag);
        hdrs[1] = cond;
    } else if (cw->last_modified != NULL) {
        snprintf(cond, sizeof(cond), "If-Modified-Since: %s",
                 cw->last_modified);
        hdrs[1] = cond;
    }
    cw->st.reads++;
    rc = rs_http_request(cw->o.http, &ro, &cw->req);
    if (rc != 0) {
        cw->req = NULL;
        cw_error(cw, "GET %s: %s", cw->last.caplist, rs_strerror(rc));
    }
}

/* ---------------------------------------------------------------- API */

struct capwatch *
capwatch_new(const struct capwatch_opts *o,
             const struct discovery_set *current)
{
    struct capwatch *cw = rs_calloc(1, sizeof(*cw));

    if (cw == NULL)
        return NULL;
    cw->o = *o;
    if (discovery_set_copy(&cw->last, current) != 0 ||
        (cw->ev_read = evtimer_new(o->base, on_read, cw)) == NULL) {
        cw_destroy(cw);
        return NULL;
    }
    return cw;
}

void
capwatch_free(struct capwatch *cw)
{
    if (cw == NULL || cw->freed)
        return;
    if (cw->req != NULL) {
        cw->freed = true;
        rs_http_cancel(cw->req);
        return;
    }
    cw_destroy(cw);
}

void
capwatch_check(struct capwatch *cw)
{
    struct timeval now = { 0, 0 };

    if (cw->req != NULL) {
        cw->again = true;
        return;
    }
    if (!evtimer_pending(cw->ev_read, NULL))
        evtimer_add(cw->ev_read, &now);
}

void
capwatch_stats(const struct capwatch *cw, struct capwatch_stats *out)
{
    *out = cw->st;
}
