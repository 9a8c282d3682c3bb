/*
 * docs.c - the documents rssource publishes, written with rs_writer (see
 * docs.h). Layers: the URL layout, entries from catalog and change rows,
 * then one function per document.
 */
#include "docs.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "changelog.h"
#include "rs_alloc.h"
#include "rs_url.h"
#include "tree.h"

struct docs {
    char *base;          /* ends with '/' */
    char *base_path;     /* its path: "/" or "/data/" */
    char *rs;            /* BASE/resourcesync/ */
    char *sd;            /* BASE/.well-known/resourcesync */
    char *caplist;
    char *clindex;
};

/* Compact output: these documents are generated for every request, and
 * indentation costs a fifth of their bytes. */
static const struct rs_write_opts docs_wopts = { .pretty = true };

/* -------------------------------------------------------------- layout */

static char *
cat2(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 1;
    char *s = rs_malloc(n);
    if (s != NULL)
        snprintf(s, n, "%s%s", a, b);
    return s;
}

_Static_assert(DOCS_BASE_MAX + 3 * (TREE_PATH_MAX - 1) + 1 <= DOCS_URL_MAX,
               "a resource's <loc> must always fit in DOCS_URL_MAX");

static bool
base_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
           (c >= 'A' && c <= 'F');
}

/* Is the n bytes at seg "." or "..", also spelt %2E? */
static bool
base_dot_segment(const char *seg, size_t n)
{
    size_t dots = 0;
    for (size_t i = 0; i < n; dots++) {
        if (seg[i] == '.')
            i++;
        else if (n - i >= 3 && seg[i] == '%' && seg[i + 1] == '2' &&
                 (seg[i + 2] == 'e' || seg[i + 2] == 'E'))
            i += 3;
        else
            return false;
    }
    return dots == 1 || dots == 2;
}

/* Why rssource could not serve its documents under base (which ends with
 * '/'), for the operator; NULL when it can. */
static const char *
base_problem(const char *base)
{
    if (strlen(base) > DOCS_BASE_MAX)
        return "--base-url: longer than 2048 bytes; give a shorter URL";
    for (const char *p = base; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        if (c <= 0x20 || c >= 0x7f || strchr("\"<>\\^`{|}", c) != NULL)
            return "--base-url: a space, control character, non-ASCII "
                   "byte or one of \"<>\\^`{|} is not allowed in a URL; "
                   "percent-encode it (each UTF-8 byte as %XX)";
        if (c == '%' && !(base_hex(p[1]) && base_hex(p[2])))
            return "--base-url: a '%' not followed by two hex digits; "
                   "write a literal '%' as %25";
    }
    const char *path = strstr(base, "://");
    path = path != NULL ? strchr(path + 3, '/') : NULL;
    if (path == NULL)
        return NULL;
    for (const char *seg = path + 1; *seg != '\0';) {
        const char *slash = strchr(seg, '/');
        size_t n = slash != NULL ? (size_t)(slash - seg) : strlen(seg);
        if (n == 0)
            return "--base-url: an empty path segment (\"//\"), which HTTP "
                   "servers read as the start of a host name; give the path "
                   "without it";
        if (base_dot_segment(seg, n))
            return "--base-url: a \".\" or \"..\" path segment, which "
                   "clients remove before they ask; give the path it leads "
                   "to (/b/ for /a/../b/)";
        seg += n + (slash != NULL);
    }
    return NULL;
}

struct docs *
docs_new(const char *base_url, const char **err)
{
    *err = "out of memory";
    if (!rs_url_is_http(base_url) || strpbrk(base_url, "?#") != NULL) {
        *err = "--base-url: expected an absolute http(s) URL without query "
               "or fragment";
        return NULL;
    }
    struct docs *d = rs_calloc(1, sizeof(*d));
    if (d == NULL)
        return NULL;
    size_t n = strlen(base_url);
    d->base = cat2(base_url, n > 0 && base_url[n - 1] == '/' ? "" : "/");
    if (d->base == NULL)
        goto fail;
    if ((*err = base_problem(d->base)) != NULL) {
        docs_free(d);
        return NULL;
    }
    *err = "out of memory";
    const char *p = strstr(d->base, "://");
    p = p != NULL ? strchr(p + 3, '/') : NULL;
    d->base_path = rs_strdup(p != NULL ? p : "/");
    d->rs = cat2(d->base, DOCS_DIR);
    d->sd = cat2(d->base, DOCS_WELL_KNOWN);
    if (d->base_path == NULL || d->rs == NULL || d->sd == NULL)
        goto fail;
    d->caplist = cat2(d->rs, DOCS_CAPLIST);
    d->clindex = cat2(d->rs, CHANGELOG_INDEX_NAME);
    if (d->caplist == NULL || d->clindex == NULL)
        goto fail;
    *err = NULL;
    return d;
fail:
    docs_free(d);
    return NULL;
}

void
docs_free(struct docs *d)
{
    if (d == NULL)
        return;
    rs_free(d->base);
    rs_free(d->base_path);
    rs_free(d->rs);
    rs_free(d->sd);
    rs_free(d->caplist);
    rs_free(d->clindex);
    rs_free(d);
}

const char *docs_base(const struct docs *d) { return d->base; }
const char *docs_base_path(const struct docs *d) { return d->base_path; }
const char *docs_caplist_url(const struct docs *d) { return d->caplist; }
const char *docs_sd_url(const struct docs *d) { return d->sd; }

int
docs_url(const struct docs *d, const char *name, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s%s", d->rs, name);
    return n >= 0 && (size_t)n < len ? 0 : RS_ETOOBIG;
}

int
docs_resource_url(const struct docs *d, const char *rel, char *buf,
                  size_t len)
{
    size_t bl = strlen(d->base);
    if (bl >= len)
        return RS_ETOOBIG;
    memcpy(buf, d->base, bl);
    int n = tree_url_encode(rel, buf + bl, len - bl);
    return n < 0 ? n : 0;
}

void
docs_hashes(const uint8_t md5[16], const uint8_t sha256[32],
            struct rs_hashes *out)
{
    memset(out, 0, sizeof(*out));
    out->n = 2;
    out->d[0].algo = RS_HASH_MD5;
    snprintf(out->d[0].name, sizeof(out->d[0].name), "md5");
    out->d[0].len = 16;
    memcpy(out->d[0].bytes, md5, 16);
    out->d[1].algo = RS_HASH_SHA256;
    snprintf(out->d[1].name, sizeof(out->d[1].name), "sha-256");
    out->d[1].len = 32;
    memcpy(out->d[1].bytes, sha256, 32);
}

/* ------------------------------------------------------------- writing */

struct wr {
    struct rs_writer *w;
    char *errstr;
};

static int
wr_open(struct wr *x, rs_write_cb cb, void *ud, char *errstr)
{
    x->errstr = errstr;
    x->w = rs_writer_new(cb, ud, &docs_wopts);
    if (x->w == NULL && errstr != NULL)
        snprintf(errstr, 256, "out of memory");
    return x->w != NULL ? 0 : RS_ENOMEM;
}

/* Finish: end the document if rc is still 0; keep the writer's reason. */
static int
wr_close(struct wr *x, int rc)
{
    if (rc == 0)
        rc = rs_writer_end(x->w);
    if (rc != 0 && x->errstr != NULL && x->errstr[0] == '\0')
        snprintf(x->errstr, 256, "%s", rs_writer_errstr(x->w));
    rs_writer_free(x->w);
    return rc;
}

static void
link_init(struct rs_link *ln, const char *rel, const char *href)
{
    rs_link_init(ln);
    ln->rel = rel;
    ln->href = href;
}

static void
head_init(struct rs_head *h, enum rs_root root, enum rs_capability cap)
{
    rs_head_init(h);
    h->root = root;
    h->has_md = true;
    h->md.capability = cap;
}

void
docs_head_up(const struct docs *d, enum rs_root root, enum rs_capability cap,
             struct rs_head *h, struct rs_link *up)
{
    link_init(up, "up", d->caplist);
    head_init(h, root, cap);
    h->links = up;
    h->nlinks = 1;
}

/* ----------------------------------------------------------- entries */

int
docs_resource_entry(const struct docs *d, const struct state_res *r,
                    struct rs_entry *e, char *loc)
{
    int rc = docs_resource_url(d, r->path, loc, DOCS_URL_MAX);
    if (rc != 0)
        return rc;
    rs_entry_init(e);
    e->loc = loc;
    e->lastmod = r->mtime_ns / 1000;
    e->has_md = true;
    e->md.length = r->size;
    e->md.type = r->type;
    if (r->hashed)
        docs_hashes(r->md5, r->sha256, &e->md.hash);
    return 0;
}

int
docs_change_entry(const struct docs *d, const struct state_change *c,
                  struct rs_entry *e, char *loc)
{
    int rc = docs_resource_url(d, c->path, loc, DOCS_URL_MAX);
    if (rc != 0)
        return rc;
    rs_entry_init(e);
    e->loc = loc;
    e->has_md = true;
    e->md.change = c->change;
    e->md.datetime = c->dt;
    if (c->change != RS_CHANGE_DELETED) {
        e->lastmod = c->lastmod;
        e->md.length = c->size;
        e->md.type = c->type;
        if (c->hashed)
            docs_hashes(c->md5, c->sha256, &e->md.hash);
    }
    return 0;
}

/* What an entry may add to a notification, at most: the loc, the type,
 * and the fixed parts (lastmod, datetime, both digests, markup). */
static size_t
entry_bytes(const char *loc, const char *type)
{
    return strlen(loc) + (type != NULL ? strlen(type) : 0) + 400;
}

/* Start a notification of capability cap: a urlset whose rel="up" is the
 * Capability List. x->w is NULL when nothing could be opened (rc says
 * why); otherwise finish it with wr_close(x, rc), rc possibly an error of
 * the start. */
#define NOTIF_HEAD_BYTES 600    /* declaration, root, rs:ln, rs:md */

static int
notif_open(const struct docs *d, enum rs_capability cap, rs_write_cb cb,
           void *ud, char *errstr, struct wr *x)
{
    struct rs_link up;
    struct rs_head h;
    int rc = wr_open(x, cb, ud, errstr);

    if (rc != 0)
        return rc;
    link_init(&up, "up", d->caplist);
    head_init(&h, RS_ROOT_URLSET, cap);
    h.links = &up;
    h.nlinks = 1;
    return rs_writer_begin(x->w, &h);
}

/* --------------------------------------------------------- documents */

int
docs_source_description(const struct docs *d, rs_write_cb cb, void *ud,
                        char *errstr)
{
    struct wr x;
    int rc = wr_open(&x, cb, ud, errstr);
    if (rc != 0)
        return rc;
    struct rs_head h;
    head_init(&h, RS_ROOT_URLSET, RS_CAP_DESCRIPTION);
    struct rs_entry e;
    rs_entry_init(&e);
    e.loc = d->caplist;
    e.has_md = true;
    e.md.capability = RS_CAP_CAPABILITYLIST;
    rc = rs_writer_begin(x.w, &h);
    if (rc == 0)
        rc = rs_writer_entry(x.w, &e);
    return wr_close(&x, rc);
}

int
docs_capability_list(const struct docs *d, const struct docs_channel *ch,
                     size_t nch, rs_write_cb cb, void *ud, char *errstr)
{
    struct wr x;
    int rc = wr_open(&x, cb, ud, errstr);
    if (rc != 0)
        return rc;
    char rl[DOCS_URL_MAX];
    struct rs_link up;
    link_init(&up, "up", d->sd);
    struct rs_head h;
    head_init(&h, RS_ROOT_URLSET, RS_CAP_CAPABILITYLIST);
    h.links = &up;
    h.nlinks = 1;
    rc = docs_url(d, DOCS_RESOURCELIST, rl, sizeof(rl));
    if (rc == 0)
        rc = rs_writer_begin(x.w, &h);
    struct rs_entry e;
    if (rc == 0) {
        rs_entry_init(&e);
        e.loc = rl;
        e.has_md = true;
        e.md.capability = RS_CAP_RESOURCELIST;
        rc = rs_writer_entry(x.w, &e);
    }
    if (rc == 0) {
        /* the Change List Index: every Change List, open and closed */
        rs_entry_init(&e);
        e.loc = d->clindex;
        e.has_md = true;
        e.md.capability = RS_CAP_CHANGELIST;
        rc = rs_writer_entry(x.w, &e);
    }
    for (size_t i = 0; rc == 0 && i < nch; i++) {
        struct rs_link hub;
        rs_entry_init(&e);
        e.loc = ch[i].loc;
        e.has_md = true;
        e.md.capability = ch[i].cap;
        e.md.capability_alpha = ch[i].alpha;
        if (ch[i].hub != NULL) {
            link_init(&hub, "hub", ch[i].hub);
            e.links = &hub;
            e.nlinks = 1;
        }
        rc = rs_writer_entry(x.w, &e);
    }
    return wr_close(&x, rc);
}

int
docs_changelist(const struct docs *d, struct state *st, int64_t num,
                rs_write_cb cb, void *ud, char *errstr)
{
    int64_t last;
    return docs_changelist_after(d, st, num, 0, cb, ud, &last, errstr);
}

int
docs_changelist_after(const struct docs *d, struct state *st, int64_t num,
                      int64_t after, rs_write_cb cb, void *ud, int64_t *last,
                      char *errstr)
{
    struct state_clist cl;
    *last = after;
    int rc = state_clist_get(st, num, &cl);
    if (rc != 0)
        return rc;
    if (after > 0) {
        /* The rest of the list after a change of its own: a Change List
         * of the period since that change, so its from is the change's
         * datetime (nothing it leaves out is later). */
        int64_t list;
        rs_time_t dt;
        rc = state_change_at(st, after, &list, &dt);
        if (rc != 0)
            return rc;
        if (list != num)
            return RS_ENOTFOUND;
        cl.from = dt;
    }
    struct state_iter *it;
    rc = state_change_iter(st, num, after, 0, &it);
    if (rc != 0)
        return rc;
    struct wr x;
    rc = wr_open(&x, cb, ud, errstr);
    if (rc != 0) {
        state_iter_free(it);
        return rc;
    }
    struct rs_link links[2];
    link_init(&links[0], "up", d->caplist);
    link_init(&links[1], "index", d->clindex);
    struct rs_head h;
    head_init(&h, RS_ROOT_URLSET, RS_CAP_CHANGELIST);
    h.links = links;
    h.nlinks = 2;
    h.md.from = cl.from;
    h.md.until = cl.until;
    rc = rs_writer_begin(x.w, &h);
    char *loc = rc == 0 ? rs_malloc(DOCS_URL_MAX) : NULL;
    if (rc == 0 && loc == NULL)
        rc = RS_ENOMEM;
    struct state_change c;
    while (rc == 0) {
        int step = state_change_next(it, &c);
        if (step <= 0) {
            rc = step;
            break;
        }
        struct rs_entry e;
        rc = docs_change_entry(d, &c, &e, loc);
        if (rc == 0)
            rc = rs_writer_entry(x.w, &e);
        if (rc == 0)
            *last = c.seq;
    }
    rs_free(loc);
    state_iter_free(it);
    return wr_close(&x, rc);
}

int
docs_changelist_index(const struct docs *d, struct state *st, rs_write_cb cb,
                      void *ud, char *errstr)
{
    struct state_iter *it;
    int rc = state_clist_iter(st, &it);
    if (rc != 0)
        return rc;
    struct state_clist first;
    int step = state_clist_next(it, &first);
    state_iter_free(it);
    if (step < 0)
        return step;
    rc = state_clist_iter(st, &it);
    if (rc != 0)
        return rc;
    struct wr x;
    rc = wr_open(&x, cb, ud, errstr);
    if (rc != 0) {
        state_iter_free(it);
        return rc;
    }
    struct rs_link up;
    link_init(&up, "up", d->caplist);
    struct rs_head h;
    head_init(&h, RS_ROOT_SITEMAPINDEX, RS_CAP_CHANGELIST);
    h.links = &up;
    h.nlinks = 1;
    h.md.from = step == 1 ? first.from : rs_time_now();
    rc = rs_writer_begin(x.w, &h);
    struct state_clist cl;
    while (rc == 0) {
        char name[CHANGELOG_NAME_MAX], loc[DOCS_URL_MAX];
        step = state_clist_next(it, &cl);
        if (step <= 0) {
            rc = step;
            break;
        }
        changelog_name(cl.num, name);
        rc = docs_url(d, name, loc, sizeof(loc));
        struct rs_entry e;
        rs_entry_init(&e);
        e.loc = loc;
        e.has_md = true;
        e.md.from = cl.from;
        e.md.until = cl.until;
        if (rc == 0)
            rc = rs_writer_entry(x.w, &e);
    }
    state_iter_free(it);
    return wr_close(&x, rc);
}

int
docs_change_notification(const struct docs *d, struct state *st,
                         int64_t after, size_t max_entries, size_t max_bytes,
                         rs_write_cb cb, void *ud, int64_t *last, size_t *n,
                         char *errstr)
{
    *n = 0;
    *last = after;
    if (max_entries == 0 || max_entries > RS_MAX_ENTRIES)
        max_entries = RS_MAX_ENTRIES;
    struct state_iter *it;
    int rc = state_change_iter(st, 0, after, (int64_t)max_entries, &it);
    if (rc != 0)
        return rc;
    struct state_change c;
    int step = state_change_next(it, &c);
    if (step <= 0) {
        state_iter_free(it);
        return step;
    }
    struct wr x;
    rc = notif_open(d, RS_CAP_CHANGELIST_NOTIFICATION, cb, ud, errstr, &x);
    if (x.w == NULL) {
        state_iter_free(it);
        return rc;
    }
    char *loc = rc == 0 ? rs_malloc(DOCS_URL_MAX) : NULL;
    if (rc == 0 && loc == NULL)
        rc = RS_ENOMEM;
    size_t bytes = NOTIF_HEAD_BYTES;
    while (rc == 0 && step == 1) {
        struct rs_entry e;
        rc = docs_change_entry(d, &c, &e, loc);
        if (rc != 0)
            break;
        size_t eb = entry_bytes(loc, c.type);
        if (*n > 0 && bytes + eb > max_bytes)
            break;
        rc = rs_writer_entry(x.w, &e);
        if (rc != 0)
            break;
        bytes += eb;
        (*n)++;
        *last = c.seq;
        step = state_change_next(it, &c);
        if (step < 0)
            rc = step;
    }
    rs_free(loc);
    state_iter_free(it);
    return wr_close(&x, rc);
}

int
docs_framework_notification(const struct docs *d, struct state *st,
                            int64_t after, size_t max_entries,
                            size_t max_bytes, rs_write_cb cb, void *ud,
                            int64_t *last, size_t *n, char *errstr)
{
    *n = 0;
    *last = after;
    if (max_entries == 0 || max_entries > RS_MAX_ENTRIES)
        max_entries = RS_MAX_ENTRIES;
    struct state_iter *it;
    int rc = state_fw_iter(st, after, (int64_t)max_entries, &it);
    if (rc != 0)
        return rc;
    struct state_fw f;
    int step = state_fw_next(it, &f);
    if (step <= 0) {
        state_iter_free(it);
        return step;
    }
    struct wr x;
    rc = notif_open(d, RS_CAP_FRAMEWORK_NOTIFICATION, cb, ud, errstr, &x);
    if (x.w == NULL) {
        state_iter_free(it);
        return rc;
    }
    size_t bytes = NOTIF_HEAD_BYTES;
    while (rc == 0 && step == 1) {
        char loc[DOCS_URL_MAX], idx[DOCS_URL_MAX];
        struct rs_link ln;
        struct rs_entry e;
        rs_entry_init(&e);
        rc = docs_url(d, f.name, loc, sizeof(loc));
        if (rc == 0 && f.index != NULL)
            rc = docs_url(d, f.index, idx, sizeof(idx));
        if (rc != 0)
            break;
        size_t eb = entry_bytes(loc, f.index != NULL ? idx : NULL);
        if (*n > 0 && bytes + eb > max_bytes)
            break;
        e.loc = loc;
        e.has_md = true;
        e.md.capability = f.cap;
        e.md.change = f.change;
        e.md.datetime = f.dt;
        if (f.index != NULL) {
            link_init(&ln, "index", idx);
            e.links = &ln;
            e.nlinks = 1;
        }
        rc = rs_writer_entry(x.w, &e);
        if (rc != 0)
            break;
        bytes += eb;
        (*n)++;
        *last = f.seq;
        step = state_fw_next(it, &f);
        if (step < 0)
            rc = step;
    }
    state_iter_free(it);
    return wr_close(&x, rc);
}
