/*
 * walk.c - one feed's documents for one poll (see walk.h). What the last
 * complete walk read (store's docs) is loaded into a small table first:
 * the validators to send, and what a 304 stands for (its rel="next", its
 * children). A stack of documents still to read drives the walk: forward,
 * an index's children come before its next page. From the tail: the first
 * page (every poll begins with the same document), then the last page the
 * last walk knew, the pages past it, and the pages between backwards.
 */
#include "walk.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reader.h"
#include "rs_alloc.h"
#include "rs_fnv.h"
#include "rs_time.h"
#include "store.h"
#include "uriset.h"

#define WALK_MAX_DOCS 100000
#define WALK_MAX_KIDS 50000       /* children of one index (its entries) */

enum pend_kind {
    PEND_FWD = 0,      /* forward: the top, an index's child, a next page */
    PEND_TOP,          /* from the tail: the first page, read first */
    PEND_TAIL,         /* ... the last page the last walk knew */
    PEND_BACK,         /* ... a known page before it, read backwards */
};

struct pend {
    char *url;
    char *parent;      /* the index that listed it, or NULL */
    int64_t rank;      /* -1: assign when read (forward walks) */
    int64_t chain_i;   /* TOP, TAIL, BACK: its place in the known chain */
    bool forward;      /* read after the page before it in its chain */
    enum pend_kind kind;
};

struct prior {
    char *url, *etag, *lastmod, *next, *parent;
    bool has_digest;
    uint8_t digest[STORE_DIGEST];
    int64_t rank;
};

struct kid {
    char *url;
    rs_time_t from;
    size_t ord;
};

struct walk {
    struct walk_opts o;
    struct event *ev_step;
    bool busy, freed, requesting;
    int64_t feed;
    char *top;
    /* what the last complete walk read */
    struct prior *pri;
    size_t npri, cappri;
    size_t *idx;                  /* open addressing into pri, by url */
    size_t idxcap;
    /* the known chain (tail-first walks), pri indexes from the top */
    size_t *chain;
    size_t nchain;
    /* the walk */
    uint8_t *read;                /* chain places read (tail-first walks) */
    char *top_next;               /* the first page's rel="next" as read */
    struct pend *stack;
    size_t nstack, capstack;
    struct uriset seen;
    int64_t next_rank;
    struct pend cur;              /* the document being read */
    bool cur_index;
    size_t cur_skipped;           /* entries of cur skipped as malformed */
    struct kid *kids;
    size_t nkids, capkids;
    struct walk_result res;
    char err[640];
};

static void walk_step(struct walk *w);

/* ------------------------------------------------------------- prior */

static void
prior_clear(struct walk *w)
{
    for (size_t i = 0; i < w->npri; i++) {
        struct prior *p = &w->pri[i];
        rs_free(p->url);
        rs_free(p->etag);
        rs_free(p->lastmod);
        rs_free(p->next);
        rs_free(p->parent);
    }
    w->npri = 0;
    rs_free(w->idx);
    w->idx = NULL;
    w->idxcap = 0;
    rs_free(w->chain);
    w->chain = NULL;
    w->nchain = 0;
}

static char *
dup_opt(const char *s, bool *fail)
{
    if (s == NULL)
        return NULL;
    char *d = rs_strdup(s);
    if (d == NULL)
        *fail = true;
    return d;
}

static int
prior_add(void *ud, const struct store_doc *d)
{
    struct walk *w = ud;
    if (w->npri >= (w->o.max_docs ? w->o.max_docs : WALK_MAX_DOCS))
        return 0;                 /* the rest go without validators */
    if (w->npri == w->cappri) {
        size_t ncap = w->cappri ? w->cappri * 2 : 16;
        struct prior *t = rs_realloc(w->pri, ncap * sizeof(*t));
        if (t == NULL)
            return RS_ENOMEM;
        w->pri = t;
        w->cappri = ncap;
    }
    bool fail = false;
    struct prior *p = &w->pri[w->npri];
    *p = (struct prior){
        .url = dup_opt(d->url, &fail),
        .etag = dup_opt(d->etag, &fail),
        .lastmod = dup_opt(d->last_modified, &fail),
        .next = dup_opt(d->next, &fail),
        .parent = dup_opt(d->parent, &fail),
        .has_digest = d->has_digest,
        .rank = d->rank,
    };
    memcpy(p->digest, d->digest, STORE_DIGEST);
    w->npri++;
    return fail ? RS_ENOMEM : 0;
}

static int
prior_index(struct walk *w)
{
    size_t cap = 16;
    while (cap < w->npri * 2)
        cap *= 2;
    w->idx = rs_malloc(cap * sizeof(*w->idx));
    if (w->idx == NULL)
        return RS_ENOMEM;
    w->idxcap = cap;
    for (size_t i = 0; i < cap; i++)
        w->idx[i] = SIZE_MAX;
    for (size_t i = 0; i < w->npri; i++) {
        size_t h = (size_t)rs_fnv1a64(w->pri[i].url) & (cap - 1);
        while (w->idx[h] != SIZE_MAX)
            h = (h + 1) & (cap - 1);
        w->idx[h] = i;
    }
    return 0;
}

static struct prior *
prior_find(struct walk *w, const char *url)
{
    if (w->idxcap == 0 || url == NULL)
        return NULL;
    size_t h = (size_t)rs_fnv1a64(url) & (w->idxcap - 1);
    while (w->idx[h] != SIZE_MAX) {
        struct prior *p = &w->pri[w->idx[h]];
        if (strcmp(p->url, url) == 0)
            return p;
        h = (h + 1) & (w->idxcap - 1);
    }
    return NULL;
}

/* The chain of pages from the top, as the last walk linked them: at
 * least two, each known, no page twice. */
static int
prior_chain(struct walk *w)
{
    struct prior *p = prior_find(w, w->top);
    if (p == NULL || p->next == NULL || p->parent != NULL)
        return 0;
    w->chain = rs_malloc((w->npri + 1) * sizeof(*w->chain));
    if (w->chain == NULL)
        return RS_ENOMEM;
    while (p != NULL) {
        size_t i = (size_t)(p - w->pri);
        for (size_t j = 0; j < w->nchain; j++)
            if (w->chain[j] == i) {
                w->nchain = 0;          /* a loop: walk forward */
                return 0;
            }
        w->chain[w->nchain++] = i;
        if (p->next == NULL)
            break;
        p = prior_find(w, p->next);
        if (p == NULL) {
            w->nchain = 0;              /* broken: walk forward */
            return 0;
        }
    }
    if (w->nchain < 2)
        w->nchain = 0;
    return 0;
}

/* -------------------------------------------------------------- stack */

static void
pend_free(struct pend *p)
{
    rs_free(p->url);
    rs_free(p->parent);
    p->url = p->parent = NULL;
}

/* Takes url and parent (rs_malloc'ed) whatever happens. */
static int
push(struct walk *w, char *url, char *parent, int64_t rank, int64_t chain_i,
     bool forward, enum pend_kind kind)
{
    if (w->nstack == w->capstack) {
        size_t ncap = w->capstack ? w->capstack * 2 : 16;
        struct pend *t = rs_realloc(w->stack, ncap * sizeof(*t));
        if (t == NULL) {
            rs_free(url);
            rs_free(parent);
            return RS_ENOMEM;
        }
        w->stack = t;
        w->capstack = ncap;
    }
    w->stack[w->nstack++] = (struct pend){ url, parent, rank, chain_i,
                                           forward, kind };
    return 0;
}

static int
push_copy(struct walk *w, const char *url, const char *parent, int64_t rank,
          int64_t chain_i, bool forward, enum pend_kind kind)
{
    bool fail = false;
    char *u = dup_opt(url, &fail), *p = dup_opt(parent, &fail);
    if (fail) {
        rs_free(u);
        rs_free(p);
        return RS_ENOMEM;
    }
    return push(w, u, p, rank, chain_i, forward, kind);
}

static void
walk_clear(struct walk *w)
{
    while (w->nstack > 0)
        pend_free(&w->stack[--w->nstack]);
    pend_free(&w->cur);
    for (size_t i = 0; i < w->nkids; i++)
        rs_free(w->kids[i].url);
    w->nkids = 0;
    uriset_clear(&w->seen);
    prior_clear(w);
    rs_free(w->top);
    w->top = NULL;
    rs_free(w->read);
    w->read = NULL;
    rs_free(w->top_next);
    w->top_next = NULL;
}

static void
walk_destroy(struct walk *w)
{
    walk_clear(w);
    rs_free(w->pri);
    rs_free(w->stack);
    rs_free(w->kids);
    if (w->ev_step != NULL)
        event_free(w->ev_step);
    rs_free(w);
}

/* The walk ends: on_done last (it may start the next walk). */
static void
walk_finish(struct walk *w, int rc)
{
    char err[sizeof(w->err)];
    snprintf(err, sizeof(err), "%s", rc != 0 ? w->err : "");
    struct walk_result res = w->res;
    walk_clear(w);
    w->busy = false;
    w->o.on_done(w->o.ud, rc, err, &res);
}

/* ---------------------------------------------------- reader callbacks */

static int
kid_add(struct walk *w, const char *loc, rs_time_t from)
{
    if (w->nkids >= WALK_MAX_KIDS)
        return RS_ETOOBIG;
    if (w->nkids == w->capkids) {
        size_t ncap = w->capkids ? w->capkids * 2 : 64;
        struct kid *t = rs_realloc(w->kids, ncap * sizeof(*t));
        if (t == NULL)
            return RS_ENOMEM;
        w->kids = t;
        w->capkids = ncap;
    }
    char *u = rs_strdup(loc);
    if (u == NULL)
        return RS_ENOMEM;
    w->kids[w->nkids] = (struct kid){ u, from, w->nkids };
    w->nkids++;
    return 0;
}

static int
on_head(void *ud, const struct rs_head *h)
{
    struct walk *w = ud;
    w->cur_index = h->root == RS_ROOT_SITEMAPINDEX;
    return 0;
}

static int
on_entry(void *ud, size_t idx, const struct rs_entry *e, const char *loc)
{
    struct walk *w = ud;
    w->res.entries++;
    if (w->cur_index) {
        int rc = kid_add(w, loc, e->has_md ? e->md.from : RS_TIME_NONE);
        if (rc != 0)
            snprintf(w->err, sizeof(w->err), "%s: %s", w->cur.url,
                     rc == RS_ETOOBIG ? "an index of too many documents"
                                      : "out of memory");
        return rc;
    }
    struct walk_doc d = { w->cur.url, w->cur.rank, w->cur.forward, NULL, 0 };
    return w->o.on_entry(w->o.ud, &d, idx, e, loc);
}

/*
 * An entry skipped by the parser. An index's child that cannot be read
 * fails the walk, as before: skipping it would leave a whole part
 * unread, and every resource in it would look deleted.
 */
static int
on_bad_entry(void *ud, const char *loc, unsigned line, const char *why)
{
    struct walk *w = ud;
    if (w->cur_index)
        return RS_EINVALID;       /* the reader's err says where and why */
    w->cur_skipped++;
    w->res.skipped++;
    struct walk_doc d = { w->cur.url, w->cur.rank, w->cur.forward, NULL,
                          w->cur_skipped };
    return w->o.on_bad_entry != NULL
               ? w->o.on_bad_entry(w->o.ud, &d, loc, line, why) : 0;
}

static void
on_chunk(void *ud)
{
    struct walk *w = ud;
    if (w->o.on_chunk != NULL)
        w->o.on_chunk(w->o.ud);
}

static int
cmp_kid(const void *a, const void *b)
{
    const struct kid *x = a, *y = b;
    if (x->from != y->from)
        return x->from < y->from ? -1 : 1;
    return x->ord < y->ord ? -1 : x->ord > y->ord;
}

/* An index was read (or stood as before): its children, on top, so they
 * come before its next page. */
static int
push_kids(struct walk *w, const char *parent)
{
    bool all_from = w->nkids > 0;
    for (size_t i = 0; i < w->nkids; i++)
        if (w->kids[i].from == RS_TIME_NONE)
            all_from = false;
    if (all_from)
        qsort(w->kids, w->nkids, sizeof(*w->kids), cmp_kid);
    int rc = 0;
    while (rc == 0 && w->nkids > 0) {
        struct kid *k = &w->kids[--w->nkids];
        char *par = rs_strdup(parent);
        if (par == NULL) {
            rs_free(k->url);
            return RS_ENOMEM;
        }
        rc = push(w, k->url, par, -1, -1, false, PEND_FWD);
    }
    while (w->nkids > 0)
        rs_free(w->kids[--w->nkids].url);
    return rc;
}

/* The children a 304 index stands for: those the last walk read under it,
 * in their order then. */
static int
kids_from_prior(struct walk *w, const char *parent)
{
    /* pri is in rank order (store_docs) */
    for (size_t i = 0; i < w->npri; i++) {
        struct prior *p = &w->pri[i];
        if (p->parent != NULL && strcmp(p->parent, parent) == 0) {
            int rc = kid_add(w, p->url, RS_TIME_NONE);
            if (rc != 0)
                return rc;
        }
    }
    return push_kids(w, parent);
}

static int
fail(struct walk *w, int rc, const char *fmt_what)
{
    snprintf(w->err, sizeof(w->err), "%s: %s", w->cur.url, fmt_what);
    return rc;
}

/* What comes after the document just read; next is its rel="next". */
/* From the tail: the known chain is read no further (the first page moved,
 * the last one is gone): the pages after the first, forwards, instead. */
static int
chain_abandon(struct walk *w)
{
    while (w->nstack > 0)
        pend_free(&w->stack[--w->nstack]);
    w->nchain = 0;
    if (w->top_next == NULL)
        return 0;
    return push_copy(w, w->top_next, NULL, 1, -1, true, PEND_FWD);
}

/* What comes after the document just read; next is its rel="next". */
static int
successors(struct walk *w, const char *next, bool is_index)
{
    struct pend *c = &w->cur;
    int rc = 0;
    if (c->kind == PEND_TOP) {
        rs_free(w->top_next);
        w->top_next = next != NULL ? rs_strdup(next) : NULL;
        if (next != NULL && w->top_next == NULL)
            return fail(w, RS_ENOMEM, "out of memory");
        /* still the chain the last walk knew? */
        const char *want = w->pri[w->chain[1]].url;
        if (next == NULL || strcmp(next, want) != 0)
            rc = chain_abandon(w);
        return rc != 0 ? fail(w, rc, "out of memory") : 0;
    }
    if (c->kind == PEND_BACK) {
        /* a page the last walk knew: it must still link to the one after */
        const char *want = w->pri[w->chain[c->chain_i + 1]].url;
        if (next == NULL || strcmp(next, want) != 0) {
            w->res.chain_moved = true;
            return fail(w, RS_ESTATE, "the pages no longer link as they "
                        "did: read again from the first next time");
        }
        return 0;
    }
    if (is_index) {
        if (next != NULL)
            rc = push_copy(w, next, c->parent, -1, -1, false, PEND_FWD);
        if (rc == 0)
            rc = push_kids(w, c->url);
    } else if (next != NULL) {
        rc = push_copy(w, next, c->parent, c->rank + 1, -1, true, PEND_FWD);
    }
    return rc != 0 ? fail(w, rc, "out of memory") : 0;
}

static void
on_read(void *ud, const struct reader_result *r)
{
    struct walk *w = ud;
    w->requesting = false;
    if (w->freed) {
        walk_destroy(w);
        return;
    }
    struct pend *c = &w->cur;
    int rc = r->rc;
    if (w->o.requested != NULL && rc != RS_ECANCELED)
        w->o.requested(w->o.ud, c->url);
    if (rc == RS_ECANCELED) {
        snprintf(w->err, sizeof(w->err), "%s: cancelled", c->url);
        walk_finish(w, rc);
        return;
    }
    if (rc == 0 && c->kind == PEND_TAIL &&
        (r->status == 404 || r->status == 410)) {
        /* the list shrank past the last page we knew: the pages after the
         * first, forwards */
        pend_free(c);
        if (chain_abandon(w) != 0) {
            snprintf(w->err, sizeof(w->err), "out of memory");
            walk_finish(w, RS_ENOMEM);
            return;
        }
        walk_step(w);
        return;
    }
    if (rc != 0) {
        snprintf(w->err, sizeof(w->err), "%s", r->err);
        w->res.status = r->status;
        w->res.retry_after_ms = r->retry_after_ms;
        walk_finish(w, rc);
        return;
    }
    struct prior *p = prior_find(w, c->url);
    if (!r->not_modified && r->status != 200) {
        w->res.status = r->status;
        w->res.retry_after_ms = r->retry_after_ms;
        snprintf(w->err, sizeof(w->err), "GET %s: HTTP %ld", c->url,
                 r->status);
        walk_finish(w, r->status == 404 || r->status == 410 ? RS_ENOTFOUND
                                                            : RS_EPROTO);
        return;
    }
    if (r->not_modified && p == NULL) {
        /* we sent no validator: a server that says 304 to nothing */
        snprintf(w->err, sizeof(w->err), "GET %s: 304 without a condition",
                 c->url);
        w->res.status = 304;
        walk_finish(w, RS_EPROTO);
        return;
    }
    struct store_doc sd = {
        .url = c->url,
        .parent = c->parent,
        .rank = c->rank,
    };
    const char *next;
    bool is_index;
    struct walk_doc wd = { c->url, c->rank, c->forward, r->doc,
                           w->cur_skipped };
    if (r->not_modified) {
        w->res.not_modified++;
        sd.etag = p->etag;
        sd.last_modified = p->lastmod;
        sd.has_digest = p->has_digest;
        memcpy(sd.digest, p->digest, STORE_DIGEST);
        sd.next = p->next;
        sd.notmod = true;
        next = p->next;
        /* an index that stands as it was: the children it had */
        is_index = false;
        for (size_t i = 0; i < w->npri && !is_index; i++)
            is_index = w->pri[i].parent != NULL &&
                       strcmp(w->pri[i].parent, c->url) == 0;
    } else {
        w->res.docs++;
        sd.etag = r->etag;
        sd.last_modified = r->last_modified;
        sd.has_digest = r->has_digest;
        memcpy(sd.digest, r->digest, STORE_DIGEST);
        sd.next = r->doc->next;
        next = r->doc->next;
        is_index = r->doc->root == RS_ROOT_SITEMAPINDEX;
        if (p == NULL || !p->has_digest || !r->has_digest ||
            memcmp(p->digest, r->digest, STORE_DIGEST) != 0)
            w->res.changed++;
        if (r->doc->from != RS_TIME_NONE &&
            (w->res.from == RS_TIME_NONE || r->doc->from < w->res.from))
            w->res.from = r->doc->from;
        if (c->parent == NULL && strcmp(c->url, w->top) == 0)
            w->res.at = r->doc->at;
        if (w->cur_skipped > 0) {
            /* a list with a hole: no validator, no digest - the next
             * walk reads it whole and meets the hole again, where a 304
             * would stand for its entries as a complete read of them */
            sd.etag = sd.last_modified = NULL;
            sd.has_digest = false;
        }
    }
    rc = store_doc_stage(w->o.st, w->feed, &sd);
    if (rc != 0) {
        snprintf(w->err, sizeof(w->err), "%s: %s", c->url,
                 store_errstr(w->o.st));
        walk_finish(w, rc);
        return;
    }
    rc = w->o.on_doc(w->o.ud, &wd, r->not_modified);
    if (rc == 0 && r->not_modified && is_index) {
        /* its next page under the children it had, as for a 200 */
        if (next != NULL)
            rc = push_copy(w, next, c->parent, -1, -1, false, PEND_FWD);
        if (rc == 0)
            rc = kids_from_prior(w, c->url);
    } else if (rc == 0) {
        rc = successors(w, next, is_index);
    }
    if (rc != 0) {
        if (w->err[0] == '\0')
            snprintf(w->err, sizeof(w->err), "%s: %s", c->url,
                     rs_strerror(rc));
        walk_finish(w, rc);
        return;
    }
    pend_free(c);
    walk_step(w);
}

/* --------------------------------------------------------------- steps */

static void
arm(struct walk *w, int64_t ms)
{
    struct timeval tv = rs_time_tv_ms(ms);
    evtimer_add(w->ev_step, &tv);
}

static void
walk_request(struct walk *w)
{
    struct pend *c = &w->cur;
    int64_t wait = w->o.wait_ms != NULL ? w->o.wait_ms(w->o.ud, c->url) : 0;
    if (wait > 0) {
        arm(w, wait);
        return;
    }
    struct prior *p = prior_find(w, c->url);
    struct reader_req q = {
        .url = c->url,
        .etag = p != NULL ? p->etag : NULL,
        .last_modified = p != NULL ? p->lastmod : NULL,
        .on_head = on_head,
        .on_entry = on_entry,
        .skip_bad_entries = true,
        .on_bad_entry = on_bad_entry,
        .on_chunk = on_chunk,
        .on_done = on_read,
        .ud = w,
    };
    w->cur_index = false;
    w->cur_skipped = 0;
    int rc = reader_get(w->o.rd, &q);
    if (rc != 0) {
        snprintf(w->err, sizeof(w->err), "GET %s: %s", c->url,
                 rs_strerror(rc));
        walk_finish(w, rc);
        return;
    }
    w->requesting = true;
}

/* The next document off the stack; the walk ends when there is none. */
static void
walk_step(struct walk *w)
{
    if (w->nstack == 0) {
        walk_finish(w, 0);
        return;
    }
    w->cur = w->stack[--w->nstack];
    int rc = uriset_add(&w->seen, w->cur.url);
    if (rc < 0) {
        snprintf(w->err, sizeof(w->err), "out of memory");
        walk_finish(w, rc);
        return;
    }
    if (rc == 1) {
        /* A list read short must not look complete: the walk fails. From
         * the tail, the known chain is the likely cause (a page gone that
         * the server answers with another, whose rel="next" leads back
         * into the chain): the next walk reads forwards, else every walk
         * would fail the same way, across restarts too. */
        if (w->read != NULL)
            w->res.chain_moved = true;
        snprintf(w->err, sizeof(w->err), "%s: read twice in one walk (the "
                 "documents loop or list a part twice)%s", w->cur.url,
                 w->read != NULL ? ": read again from the first next time"
                                 : "");
        walk_finish(w, RS_EINVALID);
        return;
    }
    size_t max = w->o.max_docs ? w->o.max_docs : WALK_MAX_DOCS;
    if (w->res.docs + w->res.not_modified >= max) {
        snprintf(w->err, sizeof(w->err), "more than %zu documents in one "
                 "walk (at %s)", max, w->cur.url);
        walk_finish(w, RS_ETOOBIG);
        return;
    }
    if (w->cur.rank < 0)
        w->cur.rank = w->next_rank;
    if (w->cur.rank >= w->next_rank)
        w->next_rank = w->cur.rank + 1;
    if (w->read != NULL && w->cur.chain_i >= 0) {
        /* an entry slips from a page onto the one before it only when
         * that one was read first */
        size_t i = (size_t)w->cur.chain_i;
        w->cur.forward = i > 0 && w->read[i - 1];
        w->read[i] = 1;
    }
    walk_request(w);
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct walk *w = arg;
    if (w->cur.url != NULL)
        walk_request(w);          /* waited for politeness */
    else
        walk_step(w);
}

/* ---------------------------------------------------------------- API */

struct walk *
walk_new(const struct walk_opts *o)
{
    struct walk *w = rs_calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->o = *o;
    w->ev_step = evtimer_new(o->base, on_timer, w);
    if (w->ev_step == NULL) {
        rs_free(w);
        return NULL;
    }
    return w;
}

void
walk_free(struct walk *w)
{
    if (w == NULL || w->freed)
        return;
    if (w->requesting) {
        w->freed = true;          /* the reader's on_done destroys us */
        reader_cancel(w->o.rd);
        return;
    }
    walk_destroy(w);
}

int
walk_start(struct walk *w, int64_t feed, const char *url)
{
    if (w->busy)
        return RS_ESTATE;
    w->feed = feed;
    w->res = (struct walk_result){ .retry_after_ms = -1,
                                   .from = RS_TIME_NONE,
                                   .at = RS_TIME_NONE };
    w->err[0] = '\0';
    w->next_rank = 0;
    w->top = rs_strdup(url);
    int rc = w->top != NULL ? 0 : RS_ENOMEM;
    if (rc == 0)
        rc = store_walk_clear(w->o.st, feed);
    if (rc == 0)
        rc = store_docs(w->o.st, feed, prior_add, w);
    if (rc == 0)
        rc = prior_index(w);
    if (rc == 0 && w->o.tail_first)
        rc = prior_chain(w);
    if (rc == 0) {
        if (w->nchain >= 2) {
            /* popped: the first page, the last, (pages past it,) then
             * the ones between from the end */
            size_t last = w->nchain - 1;
            w->read = rs_calloc(w->nchain, 1);
            if (w->read == NULL)
                rc = RS_ENOMEM;
            for (size_t i = 1; rc == 0 && i < last; i++)
                rc = push_copy(w, w->pri[w->chain[i]].url, NULL, (int64_t)i,
                               (int64_t)i, false, PEND_BACK);
            if (rc == 0)
                rc = push_copy(w, w->pri[w->chain[last]].url, NULL,
                               (int64_t)last, (int64_t)last, false, PEND_TAIL);
            if (rc == 0)
                rc = push_copy(w, w->pri[w->chain[0]].url, NULL, 0, 0, false,
                               PEND_TOP);
        } else {
            rc = push_copy(w, url, NULL, -1, -1, false, PEND_FWD);
        }
    }
    if (rc != 0) {
        walk_clear(w);
        return rc;
    }
    w->busy = true;
    arm(w, 0);
    return 0;
}

bool
walk_busy(const struct walk *w)
{
    return w->busy;
}
