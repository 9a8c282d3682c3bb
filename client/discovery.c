/*
 * discovery.c - a queue of probes (URLs to look at and what they may be),
 * read one at a time: every answer can name more (Link headers, HTML links,
 * a Source Description's entries, a list's rel="up", robots.txt Sitemap
 * lines). When the queue runs dry without a Capability List, the site's
 * /.well-known/resourcesync and robots.txt are tried once.
 */
#include <event2/event.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "discovery.h"
#include "rs_alloc.h"
#include "rs_discover.h"
#include "rs_doc.h"
#include "rs_http.h"
#include "rs_parse.h"
#include "rs_url.h"

#define DISC_MAX_PROBES 64
#define DISC_MAX_BODY (8u << 20)
#define DISC_TIMEOUT_MS 30000

enum probe_kind { PROBE_ANY, PROBE_ROBOTS };

struct probe {
    char *url;
    enum probe_kind kind;
};

struct discovery {
    struct event_base *base;
    struct rs_http *http;
    discovery_done_cb cb;
    void *ud;
    struct event *ev_start;
    struct rs_http_req *req;
    bool busy, fallback_done;
    bool freed;                   /* discovery_free ran while req was out:
                                     its on_done frees d */
    char *start;
    struct probe probes[DISC_MAX_PROBES];
    size_t nprobes, next;         /* probes[next..nprobes) still to read */
    struct discovery_result *res;
    char notes[1024];             /* what was tried, for the error */
};

/* ------------------------------------------------------------- result */

void
discovery_result_free(struct discovery_result *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->nsets; i++)
        discovery_set_clear(&r->sets[i]);
    rs_free(r->sets);
    rs_free(r->description);
    rs_free(r);
}

static void
note(struct discovery *d, const char *url, const char *what)
{
    size_t n = strlen(d->notes);

    if (n + 8 < sizeof(d->notes))
        snprintf(d->notes + n, sizeof(d->notes) - n, "%s%s: %s",
                 n > 0 ? "; " : "", url, what);
}

/* Queue url (resolved against base when base is not NULL). */
static int
probe_add(struct discovery *d, const char *base, const char *ref,
          enum probe_kind kind)
{
    char *url = NULL;
    int rc;

    if (base != NULL) {
        rc = rs_url_resolve(base, ref, &url);
        if (rc == RS_ENOMEM)
            return rc;
        if (rc != 0)
            return 0;                   /* not a URL: ignore it */
    } else if ((url = rs_strdup(ref)) == NULL) {
        return RS_ENOMEM;
    }
    if (url == NULL)
        return RS_ENOMEM;
    if (!rs_url_is_http(url)) {
        rs_free(url);
        return 0;
    }
    for (size_t i = 0; i < d->nprobes; i++) {
        if (strcmp(d->probes[i].url, url) == 0) {
            rs_free(url);
            return 0;
        }
    }
    if (d->nprobes == DISC_MAX_PROBES) {
        rs_free(url);
        return 0;
    }
    d->probes[d->nprobes++] = (struct probe){ url, kind };
    return 0;
}

/* --------------------------------------------------- reading documents */

static int
dup_abs(const char *base, const char *ref, char **out)
{
    if (*out != NULL)
        return 0;                      /* the first one counts */
    return rs_url_resolve(base, ref, out);
}

/* ------------------------------------------------------------ sets */

void
discovery_set_clear(struct discovery_set *s)
{
    if (s == NULL)
        return;
    rs_free(s->caplist);
    rs_free(s->resourcelist);
    rs_free(s->resourcedump);
    rs_free(s->changelist);
    rs_free(s->changedump);
    for (int k = 0; k < 2; k++) {
        rs_free(s->ws[k]);
        rs_free(s->topic[k]);
        rs_free(s->hub[k]);
    }
    memset(s, 0, sizeof(*s));
}

int
discovery_set_read(struct discovery_set *s, const char *url,
                   const struct rs_doc *doc)
{
    int rc = 0;

    memset(s, 0, sizeof(*s));
    if ((s->caplist = rs_strdup(url)) == NULL)
        return RS_ENOMEM;
    for (size_t i = 0; i < doc->nentries && rc == 0; i++) {
        const struct rs_entry *e = &doc->entries[i];
        bool ws = strncmp(e->loc, "ws://", 5) == 0 ||
                  strncmp(e->loc, "wss://", 6) == 0;
        const struct rs_link *hub;
        int k;

        if (!e->has_md)
            continue;
        switch (e->md.capability) {
        case RS_CAP_RESOURCELIST:
            rc = dup_abs(url, e->loc, &s->resourcelist);
            break;
        case RS_CAP_RESOURCEDUMP:
            rc = dup_abs(url, e->loc, &s->resourcedump);
            break;
        case RS_CAP_CHANGELIST:
            rc = dup_abs(url, e->loc, &s->changelist);
            break;
        case RS_CAP_CHANGEDUMP:
            rc = dup_abs(url, e->loc, &s->changedump);
            break;
        case RS_CAP_CHANGELIST_NOTIFICATION:
        case RS_CAP_FRAMEWORK_NOTIFICATION:
            k = e->md.capability == RS_CAP_CHANGELIST_NOTIFICATION
                ? DISCOVERY_CHANGE : DISCOVERY_FRAMEWORK;
            if (ws) {
                if (s->ws[k] == NULL && (s->ws[k] = rs_strdup(e->loc)) == NULL)
                    rc = RS_ENOMEM;
                break;
            }
            hub = rs_links_find(e->links, e->nlinks, "hub");
            if (hub == NULL || s->topic[k] != NULL)
                break;
            if ((rc = rs_url_resolve(url, e->loc, &s->topic[k])) == 0)
                rc = rs_url_resolve(url, hub->href, &s->hub[k]);
            break;
        default:
            break;
        }
        if (rc == RS_EINVAL)
            rc = 0;                    /* an unusable entry is skipped */
    }
    if (rc != 0)
        discovery_set_clear(s);
    return rc;
}

static int
dup_or_null(const char *v, char **out)
{
    *out = NULL;
    if (v != NULL && (*out = rs_strdup(v)) == NULL)
        return RS_ENOMEM;
    return 0;
}

int
discovery_set_copy(struct discovery_set *dst, const struct discovery_set *src)
{
    int rc;

    memset(dst, 0, sizeof(*dst));
    rc = dup_or_null(src->caplist, &dst->caplist);
    if (rc == 0)
        rc = dup_or_null(src->resourcelist, &dst->resourcelist);
    if (rc == 0)
        rc = dup_or_null(src->resourcedump, &dst->resourcedump);
    if (rc == 0)
        rc = dup_or_null(src->changelist, &dst->changelist);
    if (rc == 0)
        rc = dup_or_null(src->changedump, &dst->changedump);
    for (int k = 0; k < 2 && rc == 0; k++) {
        rc = dup_or_null(src->ws[k], &dst->ws[k]);
        if (rc == 0)
            rc = dup_or_null(src->topic[k], &dst->topic[k]);
        if (rc == 0)
            rc = dup_or_null(src->hub[k], &dst->hub[k]);
    }
    if (rc != 0)
        discovery_set_clear(dst);
    return rc;
}

static bool
same_str(const char *a, const char *b)
{
    return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

bool
discovery_set_same(const struct discovery_set *a,
                   const struct discovery_set *b)
{
    if (!same_str(a->caplist, b->caplist) ||
        !same_str(a->resourcelist, b->resourcelist) ||
        !same_str(a->resourcedump, b->resourcedump) ||
        !same_str(a->changelist, b->changelist) ||
        !same_str(a->changedump, b->changedump))
        return false;
    for (int k = 0; k < 2; k++)
        if (!same_str(a->ws[k], b->ws[k]) ||
            !same_str(a->topic[k], b->topic[k]) ||
            !same_str(a->hub[k], b->hub[k]))
            return false;
    return true;
}

static int
read_caplist(struct discovery *d, const char *url, const struct rs_doc *doc)
{
    struct discovery_result *r = d->res;
    struct discovery_set *t;
    int rc;

    for (size_t i = 0; i < r->nsets; i++)
        if (strcmp(r->sets[i].caplist, url) == 0)
            return 0;
    t = rs_realloc(r->sets, (r->nsets + 1) * sizeof(*t));
    if (t == NULL)
        return RS_ENOMEM;
    r->sets = t;
    if ((rc = discovery_set_read(&r->sets[r->nsets], url, doc)) != 0)
        return rc;
    r->nsets++;
    return 0;
}

static int
read_doc(struct discovery *d, const char *url,
         const char *body, size_t len)
{
    struct rs_parse_opts po = { .gunzip = true };
    struct rs_doc *doc = NULL;
    struct rs_diag diag;
    const struct rs_link *up;
    int rc;

    rc = rs_doc_parse(body, len, &po, &doc, &diag);
    if (rc == RS_ENOMEM)
        return rc;
    if (rc != 0) {
        char msg[300];
        snprintf(msg, sizeof(msg), "not a ResourceSync document (line %u: "
                 "%s)", diag.line, diag.msg);
        note(d, url, msg);
        return 0;
    }
    switch (doc->head.md.capability) {
    case RS_CAP_DESCRIPTION:
        if (d->res->description == NULL &&
            (d->res->description = rs_strdup(url)) == NULL) {
            rc = RS_ENOMEM;
            break;
        }
        rc = 0;
        for (size_t i = 0; i < doc->nentries && rc == 0; i++)
            rc = probe_add(d, url, doc->entries[i].loc, PROBE_ANY);
        if (doc->nentries == 0)
            note(d, url, "a Source Description without Capability Lists");
        break;
    case RS_CAP_CAPABILITYLIST:
        rc = read_caplist(d, url, doc);
        break;
    default:
        /* A list or dump: its Capability List is up. */
        up = rs_links_find(doc->head.links, doc->head.nlinks, "up");
        rc = 0;
        if (up != NULL)
            rc = probe_add(d, url, up->href, PROBE_ANY);
        else
            note(d, url, "a ResourceSync document without rel=\"up\"");
        break;
    }
    rs_doc_free(doc);
    return rc;
}

/* Links found in a header, a page or robots.txt, resolved against base;
 * a malformed one is skipped, running out of memory is remembered. */
struct link_ctx {
    struct discovery *d;
    const char *base;
    int rc;
};

static int
on_weblink(void *ud, const struct rs_weblink *l)
{
    struct link_ctx *c = ud;

    if (rs_rel_has(l->rel, "resourcesync"))
        c->rc = probe_add(c->d, c->base, l->target, PROBE_ANY);
    return c->rc != 0;
}

static int
on_sitemap(void *ud, const char *url)
{
    struct link_ctx *c = ud;

    c->rc = probe_add(c->d, c->base, url, PROBE_ANY);
    return c->rc != 0;
}

static void
on_link_value(void *ud, const char *value)
{
    struct link_ctx *c = ud;

    if (c->rc == 0 &&
        rs_link_header_parse(value, strlen(value), on_weblink, ud) == RS_ENOMEM)
        c->rc = RS_ENOMEM;
}

static bool
looks_xml(const char *ct, const char *body, size_t len)
{
    while (len > 0 && (*body == ' ' || *body == '\n' || *body == '\r' ||
                       *body == '\t' || (unsigned char)*body == 0xef ||
                       (unsigned char)*body == 0xbb ||
                       (unsigned char)*body == 0xbf)) {
        body++;
        len--;
    }
    if (ct != NULL && (strstr(ct, "xml") != NULL))
        return true;
    return len > 5 && (memcmp(body, "<?xml", 5) == 0 ||
                       memcmp(body, "<urlset", 7 <= len ? 7 : len) == 0 ||
                       (len > 13 && memcmp(body, "<sitemapindex", 13) == 0));
}

/* ----------------------------------------------------------- the loop */

static void probe_next(struct discovery *d);

static void
disc_destroy(struct discovery *d)
{
    event_free(d->ev_start);
    for (size_t i = 0; i < d->nprobes; i++)
        rs_free(d->probes[i].url);
    discovery_result_free(d->res);
    rs_free(d->start);
    rs_free(d);
}

static void
finish(struct discovery *d, int rc, const char *err)
{
    struct discovery_result *res = d->res;

    d->res = NULL;
    d->busy = false;
    for (size_t i = 0; i < d->nprobes; i++)
        rs_free(d->probes[i].url);
    d->nprobes = d->next = 0;
    if (rc != 0) {
        discovery_result_free(res);
        res = NULL;
    }
    d->cb(d->ud, rc, err, res);
}

static void
on_probe_done(void *ud, struct rs_http_req *req,
              const struct rs_http_result *res)
{
    struct discovery *d = ud;
    const struct probe *p;
    const char *url;
    struct link_ctx lc;
    char msg[300];
    int rc = 0;

    d->req = NULL;
    if (d->freed) {
        disc_destroy(d);          /* discovery_free: no callback */
        return;
    }
    p = &d->probes[d->next - 1];
    if (res->rc == RS_ECANCELED) {
        /* rs_http_free under us: the callback still runs, once */
        char err[1200];
        snprintf(err, sizeof(err), "discovery from %s cancelled at %s",
                 d->start, p->url);
        finish(d, RS_ECANCELED, err);
        return;
    }
    url = res->effective_url ? res->effective_url : p->url;
    lc = (struct link_ctx){ d, url, 0 };
    if (res->rc != 0 && res->rc != RS_ETOOBIG) {
        note(d, p->url, res->errstr);
        probe_next(d);
        return;
    }
    rs_http_req_headers(req, "Link", on_link_value, &lc);
    if (lc.rc != 0) {
        finish(d, lc.rc, "out of memory");
        return;
    }
    if (res->status < 200 || res->status > 299) {
        snprintf(msg, sizeof(msg), "HTTP %ld", res->status);
        note(d, p->url, msg);
    } else if (res->rc == RS_ETOOBIG) {
        note(d, p->url, "too large to be a discovery document");
    } else if (p->kind == PROBE_ROBOTS) {
        if (rs_robots_sitemaps(res->body, res->body_len, on_sitemap, &lc) ==
            RS_ENOMEM)
            rc = RS_ENOMEM;
    } else if (looks_xml(res->content_type, res->body, res->body_len)) {
        rc = read_doc(d, url, res->body, res->body_len);
    } else if (rs_html_links(res->body, res->body_len, on_weblink, &lc) ==
               RS_ENOMEM) {
        rc = RS_ENOMEM;
    }
    if (rc == 0)
        rc = lc.rc;
    if (rc != 0) {
        finish(d, rc, "out of memory");
        return;
    }
    probe_next(d);
}

static void
probe_next(struct discovery *d)
{
    struct rs_http_req_opts ro = {
        .timeout_ms = DISC_TIMEOUT_MS,
        .max_body = DISC_MAX_BODY,
        .max_redirects = 5,
        .on_done = on_probe_done,
        .ud = d,
    };
    static const char *const hdrs[] = {
        "Accept: application/xml, text/xml;q=0.9, text/html;q=0.5, */*;q=0.1",
        NULL
    };
    int rc;

    if (d->next == d->nprobes && d->res->nsets == 0 && !d->fallback_done) {
        char *origin = NULL;
        d->fallback_done = true;
        rc = rs_url_origin(d->start, &origin);
        if (rc == RS_ENOMEM) {
            finish(d, rc, "out of memory");
            return;
        }
        if (rc == 0) {
            rc = probe_add(d, origin, "/.well-known/resourcesync", PROBE_ANY);
            if (rc == 0)
                rc = probe_add(d, origin, "/robots.txt", PROBE_ROBOTS);
            rs_free(origin);
            if (rc != 0) {
                finish(d, rc, "out of memory");
                return;
            }
        }
    }
    if (d->next == d->nprobes) {
        char err[1200];
        if (d->res->nsets > 0) {
            finish(d, 0, "");
            return;
        }
        snprintf(err, sizeof(err), "no Capability List found from %s (%s)",
                 d->start, d->notes);
        finish(d, RS_ENOTFOUND, err);
        return;
    }
    ro.url = d->probes[d->next++].url;
    ro.headers = hdrs;
    rc = rs_http_request(d->http, &ro, &d->req);
    if (rc != 0) {
        note(d, ro.url, rs_strerror(rc));
        probe_next(d);
    }
}

static void
on_start(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    probe_next(arg);
}

/* ---------------------------------------------------------------- API */

struct discovery *
discovery_new(struct event_base *base, struct rs_http *http,
              discovery_done_cb cb, void *ud)
{
    struct discovery *d = rs_calloc(1, sizeof(*d));

    if (d == NULL)
        return NULL;
    d->base = base;
    d->http = http;
    d->cb = cb;
    d->ud = ud;
    if ((d->ev_start = evtimer_new(base, on_start, d)) == NULL) {
        rs_free(d);
        return NULL;
    }
    return d;
}

void
discovery_free(struct discovery *d)
{
    if (d == NULL || d->freed)
        return;
    if (d->req != NULL) {
        /* Its on_done (from the loop, or from rs_http_free) frees d. */
        d->freed = true;
        rs_http_cancel(d->req);
        return;
    }
    disc_destroy(d);
}

int
discovery_start(struct discovery *d, const char *url)
{
    struct timeval now = { 0, 0 };
    int rc;

    if (d->busy)
        return RS_ESTATE;
    if (!rs_url_is_http(url))
        return RS_EINVAL;
    rs_free(d->start);
    d->notes[0] = '\0';
    d->fallback_done = false;
    if ((d->start = rs_strdup(url)) == NULL ||
        (d->res = rs_calloc(1, sizeof(*d->res))) == NULL)
        return RS_ENOMEM;
    if ((rc = probe_add(d, NULL, url, PROBE_ANY)) != 0) {
        discovery_result_free(d->res);   /* a later start allocates anew */
        d->res = NULL;
        return rc;
    }
    d->busy = true;
    evtimer_add(d->ev_start, &now);
    return 0;
}
