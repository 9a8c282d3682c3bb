/*
 * test_write.c - the serializer (rs_write.h): exact bytes for every document
 * type, escaping and refusals, strict checking with its messages, limits,
 * callback and allocation failures, and parse -> write -> parse round trips.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rs_alloc.h"
#include "rs_doc.h"
#include "rs_error.h"
#include "rs_hash.h"
#include "rs_parse.h"
#include "rs_time.h"
#include "rs_write.h"

/* ------------------------------------------------------------ fixtures */

#define TD_MAXE 8
#define TD_MAXL 4

/* A hand-built document. Pointers go into the struct itself, so a tdoc is
 * never copied. */
struct tdoc {
    struct rs_head head;
    struct rs_link hl[TD_MAXL];
    struct rs_entry e[TD_MAXE];
    struct rs_link el[TD_MAXE][TD_MAXL];
    size_t n;
};

static rs_time_t
tm(const char *s)
{
    rs_time_t t = RS_TIME_NONE;
    if (rs_time_parse(s, strlen(s), &t) != 0)
        fail_msg("bad test datetime %s", s);
    return t;
}

static struct rs_hashes
hs(const char *s)
{
    struct rs_hashes h;
    memset(&h, 0, sizeof(h));
    if (rs_hashes_parse(s, strlen(s), &h) != 0)
        fail_msg("bad test hash %s", s);
    return h;
}

static void
td_init(struct tdoc *d, enum rs_root root, enum rs_capability cap)
{
    memset(d, 0, sizeof(*d));
    rs_head_init(&d->head);
    d->head.root = root;
    d->head.has_md = true;
    d->head.md.capability = cap;
    d->head.links = d->hl;
}

static struct rs_link *
td_hlink(struct tdoc *d, const char *rel, const char *href)
{
    assert_true(d->head.nlinks < TD_MAXL);
    struct rs_link *l = &d->hl[d->head.nlinks++];
    rs_link_init(l);
    l->rel = rel;
    l->href = href;
    return l;
}

static struct rs_entry *
td_entry(struct tdoc *d, const char *loc)
{
    assert_true(d->n < TD_MAXE);
    struct rs_entry *e = &d->e[d->n];
    rs_entry_init(e);
    e->loc = loc;
    e->links = d->el[d->n];
    d->n++;
    return e;
}

static struct rs_link *
td_elink(struct tdoc *d, struct rs_entry *e, const char *rel, const char *href)
{
    size_t i = (size_t)(e - d->e);
    assert_true(e->nlinks < TD_MAXL);
    struct rs_link *l = &d->el[i][e->nlinks++];
    rs_link_init(l);
    l->rel = rel;
    l->href = href;
    return l;
}

static const char up_caplist[] =
    "http://example.com/dataset1/capabilitylist.xml";

/* Collects streamed bytes (plain malloc: allocation-failure tests count
 * only the library's allocations). Can fail its fail_at-th call. */
struct sink {
    char *buf;
    size_t len, cap;
    bool keep;          /* false: count bytes only */
    unsigned calls;
    unsigned fail_at;   /* 1-based; 0 = never */
    int fail_rc;
    size_t max_chunk;
};

static int
sink_cb(void *ud, const char *buf, size_t len)
{
    struct sink *s = ud;
    s->calls++;
    if (s->fail_at != 0 && s->calls == s->fail_at)
        return s->fail_rc;
    assert_true(len > 0);
    if (len > s->max_chunk)
        s->max_chunk = len;
    if (s->keep) {
        if (s->len + len + 1 > s->cap) {
            size_t ncap = s->cap ? s->cap : 4096;
            while (ncap < s->len + len + 1)
                ncap *= 2;
            char *nb = realloc(s->buf, ncap);
            assert_non_null(nb);
            s->buf = nb;
            s->cap = ncap;
        }
        memcpy(s->buf + s->len, buf, len);
        s->len += len;
        s->buf[s->len] = '\0';
    } else {
        s->len += len;
    }
    return 0;
}

/* Write d with rs_write_buf; fails the test on error. */
static char *
td_write(const struct tdoc *d, const struct rs_write_opts *opts, size_t *len)
{
    char *out = NULL;
    size_t n = 0;
    int rc = rs_write_buf(&d->head, d->e, d->n, opts, &out, &n);
    if (rc != 0)
        fail_msg("rs_write_buf: %s", rs_strerror(rc));
    assert_non_null(out);
    assert_int_equal(strlen(out), n);
    if (len != NULL)
        *len = n;
    return out;
}

/* Write d through the streaming writer; returns the error, *errstr set. */
static int
td_stream(const struct tdoc *d, const struct rs_write_opts *opts,
          struct sink *s, char *errstr, size_t errlen)
{
    struct rs_writer *w = rs_writer_new(sink_cb, s, opts);
    assert_non_null(w);
    int rc = rs_writer_begin(w, &d->head);
    for (size_t i = 0; rc == 0 && i < d->n; i++)
        rc = rs_writer_entry(w, &d->e[i]);
    if (rc == 0)
        rc = rs_writer_end(w);
    if (errstr != NULL)
        snprintf(errstr, errlen, "%s", rs_writer_errstr(w));
    rs_writer_free(w);
    return rc;
}

/* ------------------------------------------------------ model comparison */

static void
same_str(const char *a, const char *b, const char *what)
{
    if (a == NULL && b == NULL)
        return;
    if (a == NULL || b == NULL || strcmp(a, b) != 0)
        fail_msg("%s differs: \"%s\" vs \"%s\"", what, a ? a : "(null)",
                 b ? b : "(null)");
}

static void
same_time(rs_time_t a, rs_time_t b, const char *what)
{
    if (a != b)
        fail_msg("%s differs: %lld vs %lld", what, (long long)a, (long long)b);
}

static void
same_hashes(const struct rs_hashes *a, const struct rs_hashes *b,
            const char *what)
{
    if (a->n != b->n)
        fail_msg("%s: %u digests vs %u", what, a->n, b->n);
    for (unsigned i = 0; i < a->n; i++) {
        const struct rs_digest *x = &a->d[i], *y = &b->d[i];
        if (x->algo != y->algo || strcmp(x->name, y->name) != 0 ||
            x->len != y->len || memcmp(x->bytes, y->bytes, x->len) != 0)
            fail_msg("%s: digest %u differs (%s vs %s)", what, i, x->name,
                     y->name);
    }
}

static void
same_md(const struct rs_md *a, const struct rs_md *b, const char *what)
{
    char w[96];
    if (a->capability != b->capability)
        fail_msg("%s capability: %d vs %d", what, a->capability, b->capability);
    if (a->capability_alpha != b->capability_alpha)
        fail_msg("%s capability_alpha differs", what);
    snprintf(w, sizeof(w), "%s capability_other", what);
    same_str(a->capability_other, b->capability_other, w);
    if (a->change != b->change)
        fail_msg("%s change: %d vs %d", what, a->change, b->change);
    snprintf(w, sizeof(w), "%s at", what);
    same_time(a->at, b->at, w);
    snprintf(w, sizeof(w), "%s completed", what);
    same_time(a->completed, b->completed, w);
    snprintf(w, sizeof(w), "%s from", what);
    same_time(a->from, b->from, w);
    snprintf(w, sizeof(w), "%s until", what);
    same_time(a->until, b->until, w);
    snprintf(w, sizeof(w), "%s datetime", what);
    same_time(a->datetime, b->datetime, w);
    if (a->length != b->length)
        fail_msg("%s length: %lld vs %lld", what, (long long)a->length,
                 (long long)b->length);
    snprintf(w, sizeof(w), "%s type", what);
    same_str(a->type, b->type, w);
    snprintf(w, sizeof(w), "%s encoding", what);
    same_str(a->encoding, b->encoding, w);
    snprintf(w, sizeof(w), "%s path", what);
    same_str(a->path, b->path, w);
    snprintf(w, sizeof(w), "%s hash", what);
    same_hashes(&a->hash, &b->hash, w);
}

static void
same_links(const struct rs_link *a, size_t na, const struct rs_link *b,
           size_t nb, const char *what)
{
    char w[96];
    if (na != nb)
        fail_msg("%s: %zu links vs %zu", what, na, nb);
    for (size_t i = 0; i < na; i++) {
        const struct rs_link *x = &a[i], *y = &b[i];
        snprintf(w, sizeof(w), "%s link %zu rel", what, i);
        same_str(x->rel, y->rel, w);
        snprintf(w, sizeof(w), "%s link %zu href", what, i);
        same_str(x->href, y->href, w);
        snprintf(w, sizeof(w), "%s link %zu type", what, i);
        same_str(x->type, y->type, w);
        snprintf(w, sizeof(w), "%s link %zu encoding", what, i);
        same_str(x->encoding, y->encoding, w);
        snprintf(w, sizeof(w), "%s link %zu path", what, i);
        same_str(x->path, y->path, w);
        if (x->pri != y->pri)
            fail_msg("%s link %zu pri: %u vs %u", what, i, x->pri, y->pri);
        if (x->length != y->length)
            fail_msg("%s link %zu length differs", what, i);
        snprintf(w, sizeof(w), "%s link %zu modified", what, i);
        same_time(x->modified, y->modified, w);
        snprintf(w, sizeof(w), "%s link %zu hash", what, i);
        same_hashes(&x->hash, &y->hash, w);
    }
}

static void
same_head(const struct rs_head *a, const struct rs_head *b)
{
    if (a->root != b->root)
        fail_msg("root: %d vs %d", a->root, b->root);
    if (a->has_md != b->has_md)
        fail_msg("root has_md differs");
    same_md(&a->md, &b->md, "root rs:md");
    same_links(a->links, a->nlinks, b->links, b->nlinks, "root");
    same_str(a->hub_id, b->hub_id, "hub_id");
    same_str(a->hub_topic, b->hub_topic, "hub_topic");
}

/* Every field but line (where the parser found it). */
static void
same_entry(const struct rs_entry *a, const struct rs_entry *b, size_t i)
{
    char w[64];
    snprintf(w, sizeof(w), "entry %zu loc", i + 1);
    same_str(a->loc, b->loc, w);
    snprintf(w, sizeof(w), "entry %zu lastmod", i + 1);
    same_time(a->lastmod, b->lastmod, w);
    if (a->changefreq != b->changefreq)
        fail_msg("entry %zu changefreq differs", i + 1);
    if (a->has_md != b->has_md)
        fail_msg("entry %zu has_md differs", i + 1);
    snprintf(w, sizeof(w), "entry %zu rs:md", i + 1);
    same_md(&a->md, &b->md, w);
    snprintf(w, sizeof(w), "entry %zu", i + 1);
    same_links(a->links, a->nlinks, b->links, b->nlinks, w);
}

static void
same_doc(const struct rs_head *h, const struct rs_entry *e, size_t n,
         const struct rs_doc *doc)
{
    same_head(h, &doc->head);
    if (n != doc->nentries)
        fail_msg("%zu entries vs %zu", n, doc->nentries);
    for (size_t i = 0; i < n; i++)
        same_entry(&e[i], &doc->entries[i], i);
}

/* ------------------------------------------------------ document builders */

#define XDECL "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
#define NS " xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\"" \
           " xmlns:rs=\"http://www.openarchives.org/rs/terms/\""
#define URLSET XDECL "<urlset" NS ">\n"
#define INDEX XDECL "<sitemapindex" NS ">\n"
#define UP "  <rs:ln rel=\"up\" href=\"http://example.com/dataset1/capabilitylist.xml\"/>\n"
#define MD5A "md5:1584abdf8ebdc9802ac0c6a7402c03b6"
#define MD5B "md5:1e0d5cb8ef6ba40c99b14c0237be735e"
#define SHA256B "sha-256:854f61290e2e197a11bc91063afce22e43f8ccc655237050ace766adc68dc784"

static void
build_source_description(struct tdoc *d)
{
    td_init(d, RS_ROOT_URLSET, RS_CAP_DESCRIPTION);
    td_hlink(d, "describedby", "http://example.com/info_about_source.xml");
    struct rs_entry *e =
        td_entry(d, "http://example.com/dataset1/capabilitylist.xml");
    e->has_md = true;
    e->md.capability = RS_CAP_CAPABILITYLIST;
    td_elink(d, e, "describedby",
             "http://example.com/info_about_set1_of_resources.xml");
}

static const char exp_source_description[] =
    URLSET
    "  <rs:ln rel=\"describedby\" href=\"http://example.com/info_about_source.xml\"/>\n"
    "  <rs:md capability=\"description\"/>\n"
    "  <url>\n"
    "    <loc>http://example.com/dataset1/capabilitylist.xml</loc>\n"
    "    <rs:md capability=\"capabilitylist\"/>\n"
    "    <rs:ln rel=\"describedby\" href=\"http://example.com/info_about_set1_of_resources.xml\"/>\n"
    "  </url>\n"
    "</urlset>\n";

static void
build_capability_list(struct tdoc *d)
{
    td_init(d, RS_ROOT_URLSET, RS_CAP_CAPABILITYLIST);
    td_hlink(d, "describedby",
             "http://example.com/info_about_set1_of_resources.xml");
    td_hlink(d, "up", "http://example.com/source_description.xml");
    struct rs_entry *e =
        td_entry(d, "http://example.com/dataset1/resourcelist.xml");
    e->has_md = true;
    e->md.capability = RS_CAP_RESOURCELIST;
    e = td_entry(d, "http://example.com/dataset1/changelist.xml");
    e->has_md = true;
    e->md.capability = RS_CAP_CHANGELIST;
    /* WebSub (2017): the topic, and the hub to subscribe at. */
    e = td_entry(d, "https://example.com/topics/dataset1/changes");
    e->has_md = true;
    e->md.capability = RS_CAP_CHANGELIST_NOTIFICATION;
    td_elink(d, e, "hub", "https://hub.example.com/");
    /* WebSocket channel (2013 alpha draft). */
    e = td_entry(d, "ws://example.com/channels/dataset1/"
                    "framework_notification_channel");
    e->has_md = true;
    e->md.capability = RS_CAP_FRAMEWORK_NOTIFICATION;
}

static const char exp_capability_list[] =
    URLSET
    "  <rs:ln rel=\"describedby\" href=\"http://example.com/info_about_set1_of_resources.xml\"/>\n"
    "  <rs:ln rel=\"up\" href=\"http://example.com/source_description.xml\"/>\n"
    "  <rs:md capability=\"capabilitylist\"/>\n"
    "  <url>\n"
    "    <loc>http://example.com/dataset1/resourcelist.xml</loc>\n"
    "    <rs:md capability=\"resourcelist\"/>\n"
    "  </url>\n"
    "  <url>\n"
    "    <loc>http://example.com/dataset1/changelist.xml</loc>\n"
    "    <rs:md capability=\"changelist\"/>\n"
    "  </url>\n"
    "  <url>\n"
    "    <loc>https://example.com/topics/dataset1/changes</loc>\n"
    "    <rs:md capability=\"changelist-notification\"/>\n"
    "    <rs:ln rel=\"hub\" href=\"https://hub.example.com/\"/>\n"
    "  </url>\n"
    "  <url>\n"
    "    <loc>ws://example.com/channels/dataset1/framework_notification_channel</loc>\n"
    "    <rs:md capability=\"framework-notification\"/>\n"
    "  </url>\n"
    "</urlset>\n";

static void
build_alpha_capability(struct tdoc *d)
{
    td_init(d, RS_ROOT_URLSET, RS_CAP_CAPABILITYLIST);
    td_hlink(d, "up", "http://example.com/source_description.xml");
    struct rs_entry *e =
        td_entry(d, "ws://example.com/channels/dataset1/"
                    "change_notification_channel");
    e->has_md = true;
    e->md.capability = RS_CAP_CHANGELIST_NOTIFICATION;
    e->md.capability_alpha = true;
}

static const char exp_alpha_capability[] =
    URLSET
    "  <rs:ln rel=\"up\" href=\"http://example.com/source_description.xml\"/>\n"
    "  <rs:md capability=\"capabilitylist\"/>\n"
    "  <url>\n"
    "    <loc>ws://example.com/channels/dataset1/change_notification_channel</loc>\n"
    "    <rs:md capability=\"change-notification\"/>\n"
    "  </url>\n"
    "</urlset>\n";

static void
build_resource_list(struct tdoc *d)
{
    td_init(d, RS_ROOT_URLSET, RS_CAP_RESOURCELIST);
    td_hlink(d, "up", up_caplist);
    td_hlink(d, "index", "http://example.com/dataset1/resourcelist-index.xml");
    d->head.md.at = tm("2013-01-03T09:00:00Z");
    d->head.md.completed = tm("2013-01-03T09:01:00Z");
    struct rs_entry *e = td_entry(d, "http://example.com/res1");
    e->lastmod = tm("2013-01-02T13:00:00Z");
    e->changefreq = RS_FREQ_DAILY;
    e->has_md = true;
    e->md.hash = hs(MD5A);
    e->md.length = 8876;
    e->md.type = "text/html";
    e->md.encoding = "gzip";
    struct rs_link *l =
        td_elink(d, e, "duplicate", "http://mirror.example.com/res1");
    l->pri = 1;
    l->modified = tm("2013-01-03T18:00:00Z");
    l->hash = hs(MD5A);
    l->length = 8876;
    l->type = "text/html";
    l->encoding = "gzip";
    l->path = "/mirror/res1";
    e = td_entry(d, "http://example.com/res2");
    e->lastmod = tm("2013-01-02T14:00:00.5Z");
    e->has_md = true;
    e->md.hash = hs(MD5B " " SHA256B);
    e->md.length = 0;
    e->md.type = "application/pdf";
    e = td_entry(d, "http://example.com/res3");
}

static const char exp_resource_list[] =
    URLSET
    UP
    "  <rs:ln rel=\"index\" href=\"http://example.com/dataset1/resourcelist-index.xml\"/>\n"
    "  <rs:md capability=\"resourcelist\" at=\"2013-01-03T09:00:00Z\" completed=\"2013-01-03T09:01:00Z\"/>\n"
    "  <url>\n"
    "    <loc>http://example.com/res1</loc>\n"
    "    <lastmod>2013-01-02T13:00:00Z</lastmod>\n"
    "    <changefreq>daily</changefreq>\n"
    "    <rs:md hash=\"" MD5A "\" length=\"8876\" type=\"text/html\" encoding=\"gzip\"/>\n"
    "    <rs:ln rel=\"duplicate\" href=\"http://mirror.example.com/res1\" pri=\"1\" modified=\"2013-01-03T18:00:00Z\" hash=\"" MD5A "\" length=\"8876\" type=\"text/html\" encoding=\"gzip\" path=\"/mirror/res1\"/>\n"
    "  </url>\n"
    "  <url>\n"
    "    <loc>http://example.com/res2</loc>\n"
    "    <lastmod>2013-01-02T14:00:00.5Z</lastmod>\n"
    "    <rs:md hash=\"" MD5B " " SHA256B "\" length=\"0\" type=\"application/pdf\"/>\n"
    "  </url>\n"
    "  <url>\n"
    "    <loc>http://example.com/res3</loc>\n"
    "  </url>\n"
    "</urlset>\n";

static void
build_resource_list_index(struct tdoc *d)
{
    td_init(d, RS_ROOT_SITEMAPINDEX, RS_CAP_RESOURCELIST);
    td_hlink(d, "up", up_caplist);
    d->head.md.at = tm("2013-01-03T09:00:00Z");
    d->head.md.completed = tm("2013-01-03T09:10:00Z");
    struct rs_entry *e = td_entry(d, "http://example.com/resourcelist1.xml");
    e->has_md = true;
    e->md.at = tm("2013-01-03T09:00:00Z");
    e = td_entry(d, "http://example.com/resourcelist2.xml");
    e->has_md = true;
    e->md.at = tm("2013-01-03T09:03:00Z");
    e->md.completed = tm("2013-01-03T09:07:00Z");
}

static const char exp_resource_list_index[] =
    INDEX
    UP
    "  <rs:md capability=\"resourcelist\" at=\"2013-01-03T09:00:00Z\" completed=\"2013-01-03T09:10:00Z\"/>\n"
    "  <sitemap>\n"
    "    <loc>http://example.com/resourcelist1.xml</loc>\n"
    "    <rs:md at=\"2013-01-03T09:00:00Z\"/>\n"
    "  </sitemap>\n"
    "  <sitemap>\n"
    "    <loc>http://example.com/resourcelist2.xml</loc>\n"
    "    <rs:md at=\"2013-01-03T09:03:00Z\" completed=\"2013-01-03T09:07:00Z\"/>\n"
    "  </sitemap>\n"
    "</sitemapindex>\n";

/* PROTOCOL.md's Change List (1.1) example. */
static void
build_change_list(struct tdoc *d)
{
    td_init(d, RS_ROOT_URLSET, RS_CAP_CHANGELIST);
    td_hlink(d, "up", up_caplist);
    d->head.md.from = tm("2013-01-02T00:00:00Z");
    d->head.md.until = tm("2013-01-03T00:00:00Z");
    struct rs_entry *e = td_entry(d, "http://example.com/res1.pdf");
    e->lastmod = tm("2013-01-02T13:00:00Z");
    e->has_md = true;
    e->md.change = RS_CHANGE_UPDATED;
    e->md.datetime = tm("2013-01-02T13:00:00Z");
    e->md.hash = hs(MD5A);
    e->md.length = 8876;
    e->md.type = "application/pdf";
    e = td_entry(d, "http://example.com/res2.pdf");
    e->has_md = true;
    e->md.change = RS_CHANGE_DELETED;
    e->md.datetime = tm("2013-01-02T14:00:00Z");
}

static const char exp_change_list[] =
    URLSET
    UP
    "  <rs:md capability=\"changelist\" from=\"2013-01-02T00:00:00Z\" until=\"2013-01-03T00:00:00Z\"/>\n"
    "  <url>\n"
    "    <loc>http://example.com/res1.pdf</loc>\n"
    "    <lastmod>2013-01-02T13:00:00Z</lastmod>\n"
    "    <rs:md change=\"updated\" datetime=\"2013-01-02T13:00:00Z\" hash=\"" MD5A "\" length=\"8876\" type=\"application/pdf\"/>\n"
    "  </url>\n"
    "  <url>\n"
    "    <loc>http://example.com/res2.pdf</loc>\n"
    "    <rs:md change=\"deleted\" datetime=\"2013-01-02T14:00:00Z\"/>\n"
    "  </url>\n"
    "</urlset>\n";

static const char exp_change_list_compact[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
    "<urlset" NS ">"
    "<rs:ln rel=\"up\" href=\"http://example.com/dataset1/capabilitylist.xml\"/>"
    "<rs:md capability=\"changelist\" from=\"2013-01-02T00:00:00Z\" until=\"2013-01-03T00:00:00Z\"/>"
    "<url>"
    "<loc>http://example.com/res1.pdf</loc>"
    "<lastmod>2013-01-02T13:00:00Z</lastmod>"
    "<rs:md change=\"updated\" datetime=\"2013-01-02T13:00:00Z\" hash=\"" MD5A "\" length=\"8876\" type=\"application/pdf\"/>"
    "</url>"
    "<url>"
    "<loc>http://example.com/res2.pdf</loc>"
    "<rs:md change=\"deleted\" datetime=\"2013-01-02T14:00:00Z\"/>"
    "</url>"
    "</urlset>\n";

static void
build_change_list_index(struct tdoc *d)
{
    td_init(d, RS_ROOT_SITEMAPINDEX, RS_CAP_CHANGELIST);
    td_hlink(d, "up", up_caplist);
    d->head.md.from = tm("2013-01-01T00:00:00Z");
    struct rs_entry *e =
        td_entry(d, "http://example.com/20130101-changelist.xml");
    e->has_md = true;
    e->md.from = tm("2013-01-01T00:00:00Z");
    e->md.until = tm("2013-01-02T00:00:00Z");
    e = td_entry(d, "http://example.com/20130102-changelist.xml");
    e->has_md = true;
    e->md.from = tm("2013-01-02T00:00:00Z");
}

static const char exp_change_list_index[] =
    INDEX
    UP
    "  <rs:md capability=\"changelist\" from=\"2013-01-01T00:00:00Z\"/>\n"
    "  <sitemap>\n"
    "    <loc>http://example.com/20130101-changelist.xml</loc>\n"
    "    <rs:md from=\"2013-01-01T00:00:00Z\" until=\"2013-01-02T00:00:00Z\"/>\n"
    "  </sitemap>\n"
    "  <sitemap>\n"
    "    <loc>http://example.com/20130102-changelist.xml</loc>\n"
    "    <rs:md from=\"2013-01-02T00:00:00Z\"/>\n"
    "  </sitemap>\n"
    "</sitemapindex>\n";

static void
build_resource_dump(struct tdoc *d)
{
    td_init(d, RS_ROOT_URLSET, RS_CAP_RESOURCEDUMP);
    td_hlink(d, "up", up_caplist);
    d->head.md.at = tm("2013-01-03T09:00:00Z");
    d->head.md.completed = tm("2013-01-03T09:04:00Z");
    struct rs_entry *e =
        td_entry(d, "http://example.com/resourcedump-part1.zip");
    e->has_md = true;
    e->md.type = "application/zip";
    e->md.length = 4765;
    e->md.at = tm("2013-01-03T09:00:00Z");
    e->md.completed = tm("2013-01-03T09:02:00Z");
    struct rs_link *l =
        td_elink(d, e, "contents",
                 "http://example.com/resourcedump_manifest-part1.xml");
    l->type = "application/xml";
}

static const char exp_resource_dump[] =
    URLSET
    UP
    "  <rs:md capability=\"resourcedump\" at=\"2013-01-03T09:00:00Z\" completed=\"2013-01-03T09:04:00Z\"/>\n"
    "  <url>\n"
    "    <loc>http://example.com/resourcedump-part1.zip</loc>\n"
    "    <rs:md at=\"2013-01-03T09:00:00Z\" completed=\"2013-01-03T09:02:00Z\" length=\"4765\" type=\"application/zip\"/>\n"
    "    <rs:ln rel=\"contents\" href=\"http://example.com/resourcedump_manifest-part1.xml\" type=\"application/xml\"/>\n"
    "  </url>\n"
    "</urlset>\n";

static void
build_resource_dump_manifest(struct tdoc *d)
{
    td_init(d, RS_ROOT_URLSET, RS_CAP_RESOURCEDUMP_MANIFEST);
    td_hlink(d, "up", up_caplist);
    d->head.md.at = tm("2013-01-03T09:00:00Z");
    d->head.md.completed = tm("2013-01-03T09:02:00Z");
    struct rs_entry *e = td_entry(d, "http://example.com/res1");
    e->lastmod = tm("2013-01-02T13:00:00Z");
    e->has_md = true;
    e->md.hash = hs(MD5A);
    e->md.length = 8876;
    e->md.type = "text/html";
    e->md.path = "/resources/res1";
    e = td_entry(d, "http://example.com/res2");
    e->lastmod = tm("2013-01-02T14:00:00Z");
    e->has_md = true;
    e->md.hash = hs(MD5B " " SHA256B);
    e->md.length = 14599;
    e->md.type = "application/pdf";
    e->md.path = "/resources/res2";
}

static const char exp_resource_dump_manifest[] =
    URLSET
    UP
    "  <rs:md capability=\"resourcedump-manifest\" at=\"2013-01-03T09:00:00Z\" completed=\"2013-01-03T09:02:00Z\"/>\n"
    "  <url>\n"
    "    <loc>http://example.com/res1</loc>\n"
    "    <lastmod>2013-01-02T13:00:00Z</lastmod>\n"
    "    <rs:md hash=\"" MD5A "\" length=\"8876\" type=\"text/html\" path=\"/resources/res1\"/>\n"
    "  </url>\n"
    "  <url>\n"
    "    <loc>http://example.com/res2</loc>\n"
    "    <lastmod>2013-01-02T14:00:00Z</lastmod>\n"
    "    <rs:md hash=\"" MD5B " " SHA256B "\" length=\"14599\" type=\"application/pdf\" path=\"/resources/res2\"/>\n"
    "  </url>\n"
    "</urlset>\n";

static void
build_change_dump(struct tdoc *d)
{
    td_init(d, RS_ROOT_URLSET, RS_CAP_CHANGEDUMP);
    td_hlink(d, "up", up_caplist);
    d->head.md.from = tm("2013-01-01T00:00:00Z");
    d->head.md.until = tm("2013-01-02T00:00:00Z");
    struct rs_entry *e =
        td_entry(d, "http://example.com/20130101-changedump.zip");
    e->lastmod = tm("2013-01-01T23:59:59Z");
    e->has_md = true;
    e->md.type = "application/zip";
    e->md.length = 3109;
    e->md.from = tm("2013-01-01T00:00:00Z");
    e->md.until = tm("2013-01-02T00:00:00Z");
    td_elink(d, e, "contents",
             "http://example.com/20130101-changedump-manifest.xml")->type =
        "application/xml";
}

static const char exp_change_dump[] =
    URLSET
    UP
    "  <rs:md capability=\"changedump\" from=\"2013-01-01T00:00:00Z\" until=\"2013-01-02T00:00:00Z\"/>\n"
    "  <url>\n"
    "    <loc>http://example.com/20130101-changedump.zip</loc>\n"
    "    <lastmod>2013-01-01T23:59:59Z</lastmod>\n"
    "    <rs:md from=\"2013-01-01T00:00:00Z\" until=\"2013-01-02T00:00:00Z\" length=\"3109\" type=\"application/zip\"/>\n"
    "    <rs:ln rel=\"contents\" href=\"http://example.com/20130101-changedump-manifest.xml\" type=\"application/xml\"/>\n"
    "  </url>\n"
    "</urlset>\n";

static void
build_change_dump_manifest(struct tdoc *d)
{
    td_init(d, RS_ROOT_URLSET, RS_CAP_CHANGEDUMP_MANIFEST);
    td_hlink(d, "up", up_caplist);
    d->head.md.from = tm("2013-01-01T00:00:00Z");
    d->head.md.until = tm("2013-01-02T00:00:00Z");
    struct rs_entry *e = td_entry(d, "http://example.com/res7.html");
    e->lastmod = tm("2013-01-01T12:00:00Z");
    e->has_md = true;
    e->md.change = RS_CHANGE_CREATED;
    e->md.path = "/changes/res7.html";
    e->md.hash = hs(MD5A);
    e->md.length = 5000;
    e->md.type = "text/html";
    e = td_entry(d, "http://example.com/res9.pdf");
    e->lastmod = tm("2013-01-01T13:00:00Z");
    e->has_md = true;
    e->md.change = RS_CHANGE_DELETED;
    e->md.path = "/changes/res9.pdf";
}

static const char exp_change_dump_manifest[] =
    URLSET
    UP
    "  <rs:md capability=\"changedump-manifest\" from=\"2013-01-01T00:00:00Z\" until=\"2013-01-02T00:00:00Z\"/>\n"
    "  <url>\n"
    "    <loc>http://example.com/res7.html</loc>\n"
    "    <lastmod>2013-01-01T12:00:00Z</lastmod>\n"
    "    <rs:md change=\"created\" hash=\"" MD5A "\" length=\"5000\" type=\"text/html\" path=\"/changes/res7.html\"/>\n"
    "  </url>\n"
    "  <url>\n"
    "    <loc>http://example.com/res9.pdf</loc>\n"
    "    <lastmod>2013-01-01T13:00:00Z</lastmod>\n"
    "    <rs:md change=\"deleted\" path=\"/changes/res9.pdf\"/>\n"
    "  </url>\n"
    "</urlset>\n";

/* PROTOCOL.md's change notification example. */
static void
build_change_notification(struct tdoc *d)
{
    td_init(d, RS_ROOT_URLSET, RS_CAP_CHANGELIST_NOTIFICATION);
    td_hlink(d, "up", up_caplist);
    struct rs_entry *e = td_entry(d, "http://example.com/res1");
    e->lastmod = tm("2013-01-02T13:03:00Z");
    e->has_md = true;
    e->md.change = RS_CHANGE_UPDATED;
    e->md.datetime = tm("2013-01-02T13:03:00Z");
    e->md.hash = hs(MD5A);
    e->md.length = 8876;
    e->md.type = "text/html";
}

static const char exp_change_notification[] =
    URLSET
    UP
    "  <rs:md capability=\"changelist-notification\"/>\n"
    "  <url>\n"
    "    <loc>http://example.com/res1</loc>\n"
    "    <lastmod>2013-01-02T13:03:00Z</lastmod>\n"
    "    <rs:md change=\"updated\" datetime=\"2013-01-02T13:03:00Z\" hash=\"" MD5A "\" length=\"8876\" type=\"text/html\"/>\n"
    "  </url>\n"
    "</urlset>\n";

/* The notification draft's Example 5.2. */
static void
build_framework_notification(struct tdoc *d)
{
    td_init(d, RS_ROOT_URLSET, RS_CAP_FRAMEWORK_NOTIFICATION);
    td_hlink(d, "up", up_caplist);
    struct rs_entry *e =
        td_entry(d, "http://example.com/dataset1/resourcelist.xml");
    e->has_md = true;
    e->md.capability = RS_CAP_RESOURCELIST;
    e->md.change = RS_CHANGE_CREATED;
    td_elink(d, e, "index",
             "http://example.com/dataset1/resourcelist-index.xml");
    e = td_entry(d, "http://example.com/dataset1/resourcedump.xml");
    e->has_md = true;
    e->md.capability = RS_CAP_RESOURCEDUMP;
    e->md.change = RS_CHANGE_CREATED;
    e = td_entry(d, "http://example.com/dataset1/changelist.xml");
    e->has_md = true;
    e->md.capability = RS_CAP_CHANGELIST;
    e->md.change = RS_CHANGE_UPDATED;
}

static const char exp_framework_notification[] =
    URLSET
    UP
    "  <rs:md capability=\"framework-notification\"/>\n"
    "  <url>\n"
    "    <loc>http://example.com/dataset1/resourcelist.xml</loc>\n"
    "    <rs:md capability=\"resourcelist\" change=\"created\"/>\n"
    "    <rs:ln rel=\"index\" href=\"http://example.com/dataset1/resourcelist-index.xml\"/>\n"
    "  </url>\n"
    "  <url>\n"
    "    <loc>http://example.com/dataset1/resourcedump.xml</loc>\n"
    "    <rs:md capability=\"resourcedump\" change=\"created\"/>\n"
    "  </url>\n"
    "  <url>\n"
    "    <loc>http://example.com/dataset1/changelist.xml</loc>\n"
    "    <rs:md capability=\"changelist\" change=\"updated\"/>\n"
    "  </url>\n"
    "</urlset>\n";

static void
build_hub_annotated(struct tdoc *d)
{
    build_change_notification(d);
    d->head.hub_id = "1700000000000-0";
    d->head.hub_topic = "http://example.com/dataset1/changes?a=1&b=2";
}

static const char exp_hub_annotated[] =
    XDECL
    "<urlset" NS " xmlns:hub=\"urn:x-rshub:1\" hub:id=\"1700000000000-0\""
    " hub:topic=\"http://example.com/dataset1/changes?a=1&amp;b=2\">\n"
    UP
    "  <rs:md capability=\"changelist-notification\"/>\n"
    "  <url>\n"
    "    <loc>http://example.com/res1</loc>\n"
    "    <lastmod>2013-01-02T13:03:00Z</lastmod>\n"
    "    <rs:md change=\"updated\" datetime=\"2013-01-02T13:03:00Z\" hash=\"" MD5A "\" length=\"8876\" type=\"text/html\"/>\n"
    "  </url>\n"
    "</urlset>\n";

/* Markup characters everywhere a string goes, whitespace that attribute
 * normalisation would flatten, and non-ASCII text. */
static void
build_escapes(struct tdoc *d)
{
    td_init(d, RS_ROOT_URLSET, RS_CAP_RESOURCELIST);
    td_hlink(d, "up", "http://example.com/caps.xml?x=<1>&y=\"2\"");
    d->head.md.at = tm("2013-01-03T09:00:00Z");
    /* a URI holds '&' and '\'' unescaped, never '<', '>' or '"' */
    struct rs_entry *e = td_entry(d, "http://example.com/a?x=1&y=2&z='q'");
    e->has_md = true;
    e->md.type = "text/plain;\tq=\"a&b\"\n<x>\r'";
    e->md.path = "/r\xC3\xA9sum\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80";
    e->md.encoding = "  two  spaces  ";
    td_elink(d, e, "alternate", "http://example.com/a.txt#\t\n")->type =
        "a>b";
}

static const char exp_escapes[] =
    URLSET
    "  <rs:ln rel=\"up\" href=\"http://example.com/caps.xml?x=&lt;1&gt;&amp;y=&quot;2&quot;\"/>\n"
    "  <rs:md capability=\"resourcelist\" at=\"2013-01-03T09:00:00Z\"/>\n"
    "  <url>\n"
    "    <loc>http://example.com/a?x=1&amp;y=2&amp;z='q'</loc>\n"
    "    <rs:md type=\"text/plain;&#9;q=&quot;a&amp;b&quot;&#10;&lt;x&gt;&#13;'\""
    " encoding=\"  two  spaces  \""
    " path=\"/r\xC3\xA9sum\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"/>\n"
    "    <rs:ln rel=\"alternate\" href=\"http://example.com/a.txt#&#9;&#10;\" type=\"a&gt;b\"/>\n"
    "  </url>\n"
    "</urlset>\n";

struct wcase {
    const char *name;
    void (*build)(struct tdoc *d);
    const char *expect;     /* pretty, with the declaration */
};

static const struct wcase cases[] = {
    { "source description", build_source_description, exp_source_description },
    { "capability list", build_capability_list, exp_capability_list },
    { "alpha capability", build_alpha_capability, exp_alpha_capability },
    { "resource list", build_resource_list, exp_resource_list },
    { "resource list index", build_resource_list_index,
      exp_resource_list_index },
    { "change list", build_change_list, exp_change_list },
    { "change list index", build_change_list_index, exp_change_list_index },
    { "resource dump", build_resource_dump, exp_resource_dump },
    { "resource dump manifest", build_resource_dump_manifest,
      exp_resource_dump_manifest },
    { "change dump", build_change_dump, exp_change_dump },
    { "change dump manifest", build_change_dump_manifest,
      exp_change_dump_manifest },
    { "change notification", build_change_notification,
      exp_change_notification },
    { "framework notification", build_framework_notification,
      exp_framework_notification },
    { "hub annotated", build_hub_annotated, exp_hub_annotated },
    { "escapes", build_escapes, exp_escapes },
};

#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* Exact bytes from rs_write_buf, and the same bytes streamed. */
static void
expect_case(const char *name)
{
    const struct wcase *c = NULL;
    for (size_t i = 0; i < NCASES; i++)
        if (strcmp(cases[i].name, name) == 0)
            c = &cases[i];
    assert_non_null(c);
    struct tdoc d;
    c->build(&d);
    size_t len;
    char *out = td_write(&d, NULL, &len);
    assert_string_equal(out, c->expect);
    assert_int_equal(len, strlen(c->expect));

    struct sink s = { .keep = true };
    char err[400];
    int rc = td_stream(&d, NULL, &s, err, sizeof(err));
    if (rc != 0)
        fail_msg("%s: stream: %s", name, err);
    assert_int_equal(s.len, len);
    assert_memory_equal(s.buf, out, len);
    assert_int_equal(s.calls, 1);
    free(s.buf);
    rs_free(out);
}

/* ------------------------------------------------------ document types */

/* write/source_description: root rs:ln before rs:md, capabilitylist
 * entries with their own describedby link. */
static void
test_source_description(void **state)
{
    (void)state;
    expect_case("source description");
}

/* write/capability_list: a WebSub channel (https topic + rel="hub") and a
 * ws:// channel are written beside the pull capabilities. */
static void
test_capability_list(void **state)
{
    (void)state;
    expect_case("capability list");
}

/* write/alpha_capability: a 2013-style entry keeps its
 * "change-notification" spelling. */
static void
test_alpha_capability(void **state)
{
    (void)state;
    expect_case("alpha capability");
}

/* write/resource_list: at/completed, lastmod, changefreq, every rs:md and
 * rs:ln attribute in the fixed order, fractional seconds, two-algorithm
 * hashes, length 0 written, an entry with nothing but <loc>. */
static void
test_resource_list(void **state)
{
    (void)state;
    expect_case("resource list");
}

/* write/resource_list_index: <sitemapindex> with <sitemap> entries. */
static void
test_resource_list_index(void **state)
{
    (void)state;
    expect_case("resource list index");
}

/* write/change_list: the 1.1 Change List of PROTOCOL.md, with datetime. */
static void
test_change_list(void **state)
{
    (void)state;
    expect_case("change list");
}

/* write/change_list_index: index entries carry from/until. */
static void
test_change_list_index(void **state)
{
    (void)state;
    expect_case("change list index");
}

/* write/resource_dump: package entries with a rel="contents" manifest
 * link. */
static void
test_resource_dump(void **state)
{
    (void)state;
    expect_case("resource dump");
}

/* write/resource_dump_manifest: entries carry path. */
static void
test_resource_dump_manifest(void **state)
{
    (void)state;
    expect_case("resource dump manifest");
}

/* write/change_dump: from/until on the root and on each package. */
static void
test_change_dump(void **state)
{
    (void)state;
    expect_case("change dump");
}

/* write/change_dump_manifest: change and path together. */
static void
test_change_dump_manifest(void **state)
{
    (void)state;
    expect_case("change dump manifest");
}

/* write/change_notification: the change notification of PROTOCOL.md 3. */
static void
test_change_notification(void **state)
{
    (void)state;
    expect_case("change notification");
}

/* write/framework_notification: capability + change per entry and the
 * rel="index" link of a document under an index. */
static void
test_framework_notification(void **state)
{
    (void)state;
    expect_case("framework notification");
}

/* write/hub_annotation: hub_id/hub_topic add xmlns:hub and the two
 * attributes on the root, escaped like any other value. */
static void
test_hub_annotation(void **state)
{
    (void)state;
    expect_case("hub annotated");
}

/* write/escapes: & < > " in text and attributes, tab/LF/CR in attributes
 * as character references, non-ASCII UTF-8 copied unchanged. */
static void
test_escapes(void **state)
{
    (void)state;
    expect_case("escapes");
}

/* -------------------------------------------------------------- layout */

/* write/compact: pretty off leaves no whitespace between elements but ends
 * with a newline; no_decl drops the declaration in both modes. */
static void
test_compact(void **state)
{
    (void)state;
    struct tdoc d;
    build_change_list(&d);
    struct rs_write_opts o = { .pretty = false };
    char *out = td_write(&d, &o, NULL);
    assert_string_equal(out, exp_change_list_compact);
    rs_free(out);

    o.no_decl = true;
    out = td_write(&d, &o, NULL);
    assert_string_equal(out, exp_change_list_compact + strlen(XDECL) - 1);
    rs_free(out);

    o.pretty = true;
    out = td_write(&d, &o, NULL);
    assert_string_equal(out, exp_change_list + strlen(XDECL));
    rs_free(out);
}

/* write/byte_stable: the same model gives the same bytes every time, and
 * rs_doc_write of a hand-made rs_doc equals rs_write_buf. */
static void
test_byte_stable(void **state)
{
    (void)state;
    for (size_t i = 0; i < NCASES; i++) {
        struct tdoc d;
        cases[i].build(&d);
        size_t n1, n2;
        char *a = td_write(&d, NULL, &n1);
        char *b = td_write(&d, NULL, &n2);
        assert_int_equal(n1, n2);
        assert_memory_equal(a, b, n1);
        struct rs_doc doc = { .head = d.head, .entries = d.e,
                              .nentries = d.n };
        char *c = NULL;
        size_t n3 = 0;
        assert_int_equal(rs_doc_write(&doc, NULL, &c, &n3), 0);
        assert_int_equal(n3, n1);
        assert_memory_equal(a, c, n1);
        rs_free(a);
        rs_free(b);
        rs_free(c);
    }
}

/* ------------------------------------------------------------- refusals */

/* Write a one-entry Resource List whose entry has md.type = type (or loc
 * = loc); returns the error and its message. */
static int
write_one(const char *loc, const char *type, char *err, size_t errlen)
{
    struct tdoc d;
    td_init(&d, RS_ROOT_URLSET, RS_CAP_RESOURCELIST);
    td_hlink(&d, "up", up_caplist);
    d.head.md.at = tm("2013-01-03T09:00:00Z");
    struct rs_entry *e = td_entry(&d, loc);
    e->has_md = type != NULL;
    e->md.type = type;
    struct sink s = { .keep = true };
    int rc = td_stream(&d, NULL, &s, err, errlen);
    if (rc != 0)
        assert_int_equal(s.calls, 0);   /* nothing partial was handed out */
    free(s.buf);

    /* rs_write_buf agrees and hands out nothing. */
    char *out = (char *)1;
    size_t n = 1;
    assert_int_equal(rs_write_buf(&d.head, d.e, d.n, NULL, &out, &n), rc);
    if (rc != 0) {
        assert_null(out);
        assert_int_equal(n, 0);
    }
    rs_free(rc == 0 ? out : NULL);
    return rc;
}

/* write/refuse_invalid_utf8: malformed, overlong, surrogate, truncated and
 * out-of-range sequences are refused in attributes and in <loc>, naming
 * the field; valid sequences up to U+10FFFF pass. */
static void
test_refuse_invalid_utf8(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "\x80", "\xBF", "\xC0\xAF", "\xC1\xBF", "\xC3", "\xC3\x28",
        "\xE0\x80\xAF", "\xE0\x9F\xBF", "\xE2\x82", "\xE2\x28\xA1",
        "\xED\xA0\x80", "\xED\xBF\xBF", "\xF0\x8F\xBF\xBF",
        "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xF0\x9F\x98",
        "\xFE", "\xFF",
    };
    static const char *const good[] = {
        "\xC2\x80", "\xC3\xA9", "\xDF\xBF", "\xE0\xA0\x80", "\xE2\x82\xAC",
        "\xED\x9F\xBF", "\xEE\x80\x80", "\xEF\xBF\xBD", "\xF0\x90\x80\x80",
        "\xF0\x9F\x98\x80", "\xF4\x8F\xBF\xBF", "\x7F",
    };
    char err[400], val[64], loc[96];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(val, sizeof(val), "text/%s", bad[i]);
        assert_int_equal(write_one("http://example.com/r", val, err,
                                   sizeof(err)), RS_EINVAL);
        if (strncmp(err, "entry 1: rs:md type is not valid UTF-8", 38) != 0)
            fail_msg("bad[%zu]: errstr \"%s\"", i, err);
        snprintf(loc, sizeof(loc), "http://example.com/%s", bad[i]);
        assert_int_equal(write_one(loc, NULL, err, sizeof(err)), RS_EINVAL);
        if (strncmp(err, "entry 1: <loc> is not valid UTF-8", 33) != 0)
            fail_msg("bad[%zu] in loc: errstr \"%s\"", i, err);
    }
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        snprintf(val, sizeof(val), "text/%s;x", good[i]);
        if (write_one("http://example.com/r", val, err, sizeof(err)) != 0)
            fail_msg("good[%zu] refused: %s", i, err);
    }
    /* The offset points at the offending byte. */
    assert_int_equal(write_one("http://example.com/r", "ab\xC3\xA9\xFF", err,
                               sizeof(err)), RS_EINVAL);
    assert_string_equal(err, "entry 1: rs:md type is not valid UTF-8 (byte "
                        "0xFF at offset 4)");
}

/* write/refuse_control_chars: C0 controls other than tab/LF/CR, and
 * U+FFFE/U+FFFF, are refused with the code point named. */
static void
test_refuse_control_chars(void **state)
{
    (void)state;
    char err[400], val[32];
    for (int c = 1; c < 0x20; c++) {
        snprintf(val, sizeof(val), "a%cb", c);
        int rc = write_one("http://example.com/r", val, err, sizeof(err));
        if (c == '\t' || c == '\n' || c == '\r') {
            assert_int_equal(rc, 0);
            continue;
        }
        assert_int_equal(rc, RS_EINVAL);
        char want[128];
        snprintf(want, sizeof(want), "entry 1: rs:md type contains control "
                 "character U+%04X, which XML 1.0 cannot carry", c);
        assert_string_equal(err, want);
    }
    assert_int_equal(write_one("http://example.com/r", "x\xEF\xBF\xBE", err,
                               sizeof(err)), RS_EINVAL);
    assert_string_equal(err, "entry 1: rs:md type contains U+FFFE, which "
                        "XML 1.0 cannot carry");
    assert_int_equal(write_one("http://example.com/r\xEF\xBF\xBF", NULL, err,
                               sizeof(err)), RS_EINVAL);
    assert_string_equal(err, "entry 1: <loc> contains U+FFFF, which XML 1.0 "
                        "cannot carry");

    /* In the head the message says root. */
    struct tdoc d;
    build_change_notification(&d);
    d.head.hub_id = "id\x01";
    struct sink s = { .keep = true };
    assert_int_equal(td_stream(&d, NULL, &s, err, sizeof(err)), RS_EINVAL);
    assert_string_equal(err, "root: hub:id contains control character "
                        "U+0001, which XML 1.0 cannot carry");
    assert_int_equal(s.calls, 0);
    free(s.buf);
}

/* Stream d; expect rc and an errstr starting with prefix and containing
 * what. */
static void
expect_refused(const struct tdoc *d, int rc, const char *prefix,
               const char *what)
{
    struct sink s = { .keep = true };
    char err[400];
    assert_int_equal(td_stream(d, NULL, &s, err, sizeof(err)), rc);
    if (strncmp(err, prefix, strlen(prefix)) != 0 || strstr(err, what) == NULL)
        fail_msg("errstr \"%s\", expected \"%s...%s...\"", err, prefix, what);
    assert_int_equal(s.calls, 0);
    free(s.buf);
}

/* write/refuse_invalid_docs: what the strict check refuses is not written,
 * and errstr names the entry and the rule: a missing <loc>, a relative
 * <loc>, a Change List entry without change, a head without rs:md. */
static void
test_refuse_invalid_docs(void **state)
{
    (void)state;
    struct tdoc d;

    build_resource_list(&d);
    d.e[1].loc = NULL;
    expect_refused(&d, RS_EINVALID, "entry 2: ", "without <loc>");

    build_resource_list(&d);
    d.e[2].loc = "res3.html";
    expect_refused(&d, RS_EINVALID, "entry 3: ",
                   "<loc> \"res3.html\" is not an absolute http(s) URI");

    build_change_list(&d);
    d.e[1].md.change = RS_CHANGE_NONE;
    expect_refused(&d, RS_EINVALID, "entry 2: ",
                   "has no change attribute");

    build_change_list(&d);
    d.e[0].has_md = false;
    expect_refused(&d, RS_EINVALID, "entry 1: ", "has no change attribute");

    build_change_list(&d);
    d.head.has_md = false;
    expect_refused(&d, RS_EINVALID, "root: ", "has no <rs:md>");

    /* ws:// is only for notification channels in a Capability List. */
    build_resource_list(&d);
    d.e[0].loc = "ws://example.com/res1";
    expect_refused(&d, RS_EINVALID, "entry 1: ", "not an absolute http(s)");
}

/* write/strict_and_lenient: what is only a warning when reading (a missing
 * rel="up", checked when the document ends since links may come last) is
 * refused by default, with nothing handed out, and written with lenient
 * set; extension capabilities are not even a warning. */
static void
test_strict_and_lenient(void **state)
{
    (void)state;
    struct tdoc d;
    build_change_list(&d);
    d.head.nlinks = 0;
    expect_refused(&d, RS_EINVALID, "changelist: ", "rel=\"up\"");
    struct rs_write_opts o = { .pretty = true, .lenient = true };
    char *out = td_write(&d, &o, NULL);
    assert_non_null(strstr(out, "<rs:md capability=\"changelist\""));
    assert_null(strstr(out, "rel=\"up\""));
    rs_free(out);

    /* An extension capability on a Capability List entry (the archives'
     * resourcelist-archive, say) is written verbatim, strict or not. */
    build_capability_list(&d);
    d.e[0].md.capability = RS_CAP_OTHER;
    d.e[0].md.capability_other = "archive&co";
    out = td_write(&d, NULL, NULL);
    assert_non_null(strstr(out, "<rs:md capability=\"archive&amp;co\"/>"));
    rs_free(out);
}

/* write/new_rules: the writer refuses what the spec forbids and a reader
 * only tolerates: a Capability List naming a capability twice (a
 * WebSocket channel and a WebSub topic of one capability are two, not one
 * twice), a Change List newest first, a deletion without a time; and a
 * model read from "changelistindex" is written as the spec spells it. */
static void
test_new_rules(void **state)
{
    (void)state;
    struct tdoc d;
    build_capability_list(&d);
    struct rs_entry *e = td_entry(&d, "http://example.com/dataset1/cl2.xml");
    e->has_md = true;
    e->md.capability = RS_CAP_CHANGELIST;
    expect_refused(&d, RS_EINVALID, "entry 5: ", "listed twice");
    build_capability_list(&d);
    e = td_entry(&d, "ws://example.com/channels/dataset1/changes");
    e->has_md = true;
    e->md.capability = RS_CAP_CHANGELIST_NOTIFICATION;
    char *out = td_write(&d, NULL, NULL);
    rs_free(out);

    build_change_list(&d);
    d.e[1].md.datetime = tm("2013-01-02T12:00:00Z");
    expect_refused(&d, RS_EINVALID, "entry 2: ", "chronological");
    struct rs_write_opts lenient = { .pretty = true, .lenient = true };
    out = td_write(&d, &lenient, NULL);
    rs_free(out);

    build_change_list(&d);
    d.e[1].md.datetime = RS_TIME_NONE;
    expect_refused(&d, RS_EINVALID, "entry 2: ", "deleted");

    build_change_list(&d);
    d.head.root = RS_ROOT_SITEMAPINDEX;
    d.head.md.capability_index_alias = true;
    for (size_t i = 0; i < d.n; i++) {
        d.e[i].has_md = true;
        rs_md_init(&d.e[i].md);
        d.e[i].lastmod = RS_TIME_NONE;
    }
    out = td_write(&d, NULL, NULL);
    assert_non_null(strstr(out, "<rs:md capability=\"changelist\""));
    assert_null(strstr(out, "changelistindex"));
    rs_free(out);
}

/* write/refuse_unwritable_values: values the model can hold but XML cannot
 * show (a year past 9999, a negative length, an unknown enum) are refused,
 * not written wrongly. */
static void
test_refuse_unwritable_values(void **state)
{
    (void)state;
    struct tdoc d;
    build_resource_list(&d);
    d.e[0].lastmod = tm("9999-12-31T23:59:59Z") + 1000000;
    expect_refused(&d, RS_EINVAL, "entry 1: ", "<lastmod> is outside years");

    build_resource_list(&d);
    d.e[1].md.length = -2;
    expect_refused(&d, RS_EINVAL, "entry 2: ", "rs:md length is negative");

    build_resource_list(&d);
    d.e[1].changefreq = (enum rs_changefreq)42;
    expect_refused(&d, RS_EINVAL, "entry 2: ", "<changefreq> 42");
}

/* ---------------------------------------------------------------- limits */

/* Stream a Resource List of n entries, compact, counting bytes only. */
static int
stream_n(size_t n, const char *pad, char *err, size_t errlen, size_t *at,
         struct sink *s)
{
    struct tdoc d;
    td_init(&d, RS_ROOT_URLSET, RS_CAP_RESOURCELIST);
    td_hlink(&d, "up", up_caplist);
    d.head.md.at = tm("2013-01-03T09:00:00Z");
    struct rs_write_opts o = { .pretty = false };
    struct rs_writer *w = rs_writer_new(sink_cb, s, &o);
    assert_non_null(w);
    char loc[2048];
    struct rs_entry e;
    rs_entry_init(&e);
    e.loc = loc;
    int rc = rs_writer_begin(w, &d.head);
    size_t i;
    for (i = 0; rc == 0 && i < n; i++) {
        snprintf(loc, sizeof(loc), "http://example.com/r/%zu%s", i, pad);
        rc = rs_writer_entry(w, &e);
    }
    *at = i;
    if (rc == 0)
        rc = rs_writer_end(w);
    snprintf(err, errlen, "%s", rs_writer_errstr(w));
    rs_writer_free(w);
    return rc;
}

/* write/entry_limit: 50,000 entries stream in 64 KiB chunks; the
 * 50,001st is refused with RS_ETOOBIG and nothing more is flushed. */
static void
test_entry_limit(void **state)
{
    (void)state;
    char err[400];
    size_t at;
    struct sink s = { .keep = false };
    assert_int_equal(stream_n(RS_MAX_ENTRIES, "", err, sizeof(err), &at, &s),
                     0);
    assert_int_equal(s.max_chunk, 65536);
    assert_true(s.len > 1000000);

    memset(&s, 0, sizeof(s));
    assert_int_equal(stream_n(RS_MAX_ENTRIES + 1, "", err, sizeof(err), &at,
                              &s), RS_ETOOBIG);
    assert_int_equal(at, RS_MAX_ENTRIES + 1);
    assert_true(strncmp(err, "entry 50001: ", 13) == 0);
    assert_non_null(strstr(err, "50000"));
}

/* write/size_limit: a document past 50 MB (RS_MAX_DOC_BYTES) is refused
 * with RS_ETOOBIG before the whole of it is written. */
static void
test_size_limit(void **state)
{
    (void)state;
    char pad[1101];
    memset(pad, 'x', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    char err[400];
    size_t at;
    struct sink s = { .keep = false };
    assert_int_equal(stream_n(RS_MAX_ENTRIES, pad, err, sizeof(err), &at, &s),
                     RS_ETOOBIG);
    assert_true(at < RS_MAX_ENTRIES);
    assert_non_null(strstr(err, "document exceeds 52428800 bytes"));
    assert_true(s.len <= RS_MAX_DOC_BYTES);
}

/* ------------------------------------------------------ callback contract */

/* write/callback_failure: the callback's error stops the writer; the call
 * that flushed returns it and so does every later call, without calling
 * the callback again. A positive return becomes RS_ESTOPPED. */
static void
test_callback_failure(void **state)
{
    (void)state;
    struct tdoc d;
    build_change_list(&d);

    struct sink s = { .keep = true, .fail_at = 1, .fail_rc = RS_EIO };
    struct rs_writer *w = rs_writer_new(sink_cb, &s, NULL);
    assert_non_null(w);
    assert_int_equal(rs_writer_begin(w, &d.head), 0);
    assert_int_equal(rs_writer_entry(w, &d.e[0]), 0);
    assert_int_equal(rs_writer_end(w), RS_EIO);
    assert_string_equal(rs_writer_errstr(w),
                        "write callback failed: I/O error");
    assert_int_equal(rs_writer_end(w), RS_EIO);
    assert_int_equal(rs_writer_entry(w, &d.e[1]), RS_EIO);
    assert_int_equal(rs_writer_begin(w, &d.head), RS_EIO);
    assert_int_equal(s.calls, 1);
    rs_writer_free(w);

    memset(&s, 0, sizeof(s));
    s.fail_at = 1;
    s.fail_rc = 7;
    assert_int_equal(td_stream(&d, NULL, &s, NULL, 0), RS_ESTOPPED);

    /* Mid-stream: the entry that fills the buffer gets the error. */
    char err[400];
    size_t at;
    memset(&s, 0, sizeof(s));
    s.fail_at = 2;
    s.fail_rc = RS_EIO;
    assert_int_equal(stream_n(10000, "", err, sizeof(err), &at, &s), RS_EIO);
    assert_true(at > 1000 && at < 10000);
    assert_int_equal(s.calls, 2);
    assert_int_equal(s.len, 65536);
}

/* write/state_errors: entries before begin, end twice, begin twice are
 * RS_ESTATE, sticky like any error; rs_writer_free(NULL) is a no-op. */
static void
test_state_errors(void **state)
{
    (void)state;
    struct tdoc d;
    build_change_list(&d);
    struct sink s = { .keep = true };

    struct rs_writer *w = rs_writer_new(sink_cb, &s, NULL);
    assert_string_equal(rs_writer_errstr(w), "");
    assert_int_equal(rs_writer_entry(w, &d.e[0]), RS_ESTATE);
    assert_int_equal(rs_writer_begin(w, &d.head), RS_ESTATE);
    assert_non_null(strstr(rs_writer_errstr(w), "before rs_writer_begin"));
    rs_writer_free(w);

    w = rs_writer_new(sink_cb, &s, NULL);
    assert_int_equal(rs_writer_begin(w, &d.head), 0);
    assert_int_equal(rs_writer_begin(w, &d.head), RS_ESTATE);
    rs_writer_free(w);

    w = rs_writer_new(sink_cb, &s, NULL);
    assert_int_equal(rs_writer_begin(w, &d.head), 0);
    assert_int_equal(rs_writer_end(w), 0);
    assert_int_equal(rs_writer_end(w), RS_ESTATE);
    assert_int_equal(rs_writer_entry(w, &d.e[0]), RS_ESTATE);
    rs_writer_free(w);

    assert_null(rs_writer_new(NULL, NULL, NULL));
    rs_writer_free(NULL);
    free(s.buf);
}

/* write/alloc_failure: failing the Nth allocation, for every N, makes
 * rs_doc_write return RS_ENOMEM with nothing handed out and nothing
 * leaked (ASan); once enough allocations succeed the bytes are right. */
static void
test_alloc_failure(void **state)
{
    (void)state;
    /* 300 entries: several reallocations of the output buffer. */
    static struct rs_entry es[300];
    static char locs[300][48];
    struct tdoc d;
    build_resource_list(&d);
    for (size_t i = 0; i < 300; i++) {
        es[i] = d.e[i % d.n];
        snprintf(locs[i], sizeof(locs[i]), "http://example.com/res/%zu", i);
        es[i].loc = locs[i];
    }
    struct rs_doc doc = { .head = d.head, .entries = es, .nentries = 300 };
    char *want = NULL;
    size_t wantlen = 0;
    assert_int_equal(rs_doc_write(&doc, NULL, &want, &wantlen), 0);

    unsigned long n;
    for (n = 1; n < 1000; n++) {
        char *out = (char *)1;
        size_t len = 1;
        tu_alloc_fail_at(n);
        int rc = rs_doc_write(&doc, NULL, &out, &len);
        tu_alloc_fail_at(0);
        if (rc == 0) {
            assert_int_equal(len, wantlen);
            assert_memory_equal(out, want, len);
            rs_free(out);
            break;
        }
        assert_int_equal(rc, RS_ENOMEM);
        assert_null(out);
        assert_int_equal(len, 0);
    }
    assert_true(n > 3 && n < 1000);   /* writer, buffer, reallocations */

    tu_alloc_fail_at(1);
    struct rs_writer *w = rs_writer_new(sink_cb, NULL, NULL);
    tu_alloc_fail_at(0);
    assert_null(w);
    rs_free(want);
}

/* ------------------------------------------------------------ round trip */

/* Parse buf strictly into a document; fails the test on error. */
static struct rs_doc *
parse_strict(const char *buf, size_t len, const char *name)
{
    struct rs_parse_opts po = { .strict = true };
    struct rs_doc *doc = NULL;
    struct rs_diag diag;
    memset(&diag, 0, sizeof(diag));
    int rc = rs_doc_parse(buf, len, &po, &doc, &diag);
    if (rc != 0)
        fail_msg("%s: parse: %s (line %u: %s)", name, rs_strerror(rc),
                 diag.line, diag.msg);
    return doc;
}

/* model -> write -> parse gives the model back; write of the parsed doc
 * gives the same bytes; parse again gives the same model. */
static void
roundtrip(const struct wcase *c, const struct rs_write_opts *opts)
{
    struct tdoc d;
    c->build(&d);
    size_t len1, len2;
    char *out1 = td_write(&d, opts, &len1);
    struct rs_doc *doc1 = parse_strict(out1, len1, c->name);
    same_doc(&d.head, d.e, d.n, doc1);

    char *out2 = NULL;
    assert_int_equal(rs_doc_write(doc1, opts, &out2, &len2), 0);
    if (len1 != len2 || memcmp(out1, out2, len1) != 0)
        fail_msg("%s: rewrite differs:\n%s\n---\n%s", c->name, out1, out2);
    struct rs_doc *doc2 = parse_strict(out2, len2, c->name);
    same_doc(&doc1->head, doc1->entries, doc1->nentries, doc2);

    rs_doc_free(doc1);
    rs_doc_free(doc2);
    rs_free(out1);
    rs_free(out2);
}

/* write/roundtrip: every document written above, pretty and compact,
 * parses back (strictly) into the same model field by field, and writing
 * the parsed model reproduces the bytes. */
static void
test_roundtrip(void **state)
{
    (void)state;
    struct rs_write_opts compact = { .pretty = false };
    for (size_t i = 0; i < NCASES; i++) {
        roundtrip(&cases[i], NULL);
        roundtrip(&cases[i], &compact);
    }
}

/* write/roundtrip_parsed_spec: a document in the spec's own layout
 * (attributes wrapped over lines, rs:md before rs:ln at root) is written
 * in our canonical form and reads back into the same model. */
static void
test_roundtrip_parsed_spec(void **state)
{
    (void)state;
    static const char src[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\"\n"
        "        xmlns:rs=\"http://www.openarchives.org/rs/terms/\">\n"
        "   <rs:md capability=\"changelist-notification\"/>\n"
        "   <rs:ln rel=\"up\"\n"
        "          href=\"http://example.com/dataset1/capabilitylist.xml\"/>\n"
        "   <url>\n"
        "      <loc>http://example.com/res2</loc>\n"
        "      <lastmod>2013-01-02T13:23:00Z</lastmod>\n"
        "      <rs:md change=\"updated\"\n"
        "             hash=\"md5:1e0d5cb8ef6ba40c99b14c0237be735e \n"
        "             sha-256:854f61290e2e197a11bc91063afce22e43f8ccc655237050ace766adc68dc784\"\n"
        "             length=\"14599\"\n"
        "             type=\"application/pdf\"/>\n"
        "   </url>\n"
        "</urlset>\n";
    struct rs_doc *doc = parse_strict(src, strlen(src), "spec example");
    char *out = NULL;
    size_t len;
    assert_int_equal(rs_doc_write(doc, NULL, &out, &len), 0);
    assert_string_equal(out,
        URLSET
        UP
        "  <rs:md capability=\"changelist-notification\"/>\n"
        "  <url>\n"
        "    <loc>http://example.com/res2</loc>\n"
        "    <lastmod>2013-01-02T13:23:00Z</lastmod>\n"
        "    <rs:md change=\"updated\" hash=\"" MD5B " " SHA256B "\" length=\"14599\" type=\"application/pdf\"/>\n"
        "  </url>\n"
        "</urlset>\n");
    struct rs_doc *doc2 = parse_strict(out, len, "spec example rewritten");
    same_doc(&doc->head, doc->entries, doc->nentries, doc2);
    rs_doc_free(doc);
    rs_doc_free(doc2);
    rs_free(out);
}

/* write/entries_only: a fragment of entries - no declaration, root, head
 * or closing tag - that parses back to the same entries once wrapped in a
 * document of the head's kind; the head is still checked (a head the
 * checker refuses refuses the fragment). */
static void
test_entries_only(void **state)
{
    struct rs_write_opts wo = { .pretty = true, .lenient = true,
                                .entries_only = true };
    struct rs_head head;
    struct rs_entry e[2];
    struct rs_link hub;
    char *out = NULL, *doc;
    size_t len = 0;
    struct rs_doc *d = NULL;

    (void)state;
    rs_head_init(&head);
    head.root = RS_ROOT_URLSET;
    head.has_md = true;
    head.md.capability = RS_CAP_CAPABILITYLIST;
    for (int i = 0; i < 2; i++) {
        rs_entry_init(&e[i]);
        e[i].has_md = true;
        e[i].md.capability = RS_CAP_CHANGELIST_NOTIFICATION;
    }
    e[0].loc = "ws://hub.example/channel/a";
    e[0].md.capability_alpha = true;
    rs_link_init(&hub);
    hub.rel = "hub";
    hub.href = "http://hub.example/hub?x=1&y=2";
    e[1].loc = "http://example.com/changes";
    e[1].links = &hub;
    e[1].nlinks = 1;
    assert_int_equal(rs_write_buf(&head, e, 2, &wo, &out, &len), 0);
    assert_null(strstr(out, "<?xml"));
    assert_null(strstr(out, "urlset"));
    assert_null(strstr(out, "capabilitylist"));
    assert_int_equal(strncmp(out, "<url>", 5), 0);
    assert_non_null(strstr(out, "href=\"http://hub.example/hub?x=1&amp;y=2\""));
    size_t dl = len + 256;
    doc = malloc(dl);
    assert_non_null(doc);
    snprintf(doc, dl, "<urlset xmlns=\"" RS_NS_SITEMAP "\" xmlns:rs=\""
             RS_NS_RS "\"><rs:md capability=\"capabilitylist\"/>%s</urlset>",
             out);
    assert_int_equal(rs_doc_parse(doc, strlen(doc), NULL, &d, NULL), 0);
    assert_int_equal(d->nentries, 2);
    assert_string_equal(d->entries[0].loc, "ws://hub.example/channel/a");
    assert_true(d->entries[0].md.capability_alpha);
    assert_string_equal(d->entries[1].links[0].href,
                        "http://hub.example/hub?x=1&y=2");
    rs_doc_free(d);
    free(doc);
    rs_free(out);
    out = NULL;
    head.md.capability = RS_CAP_NONE;     /* no capability: refused */
    assert_int_not_equal(rs_write_buf(&head, e, 2, &wo, &out, &len), 0);
    rs_free(out);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entries_only),
        cmocka_unit_test(test_source_description),
        cmocka_unit_test(test_capability_list),
        cmocka_unit_test(test_alpha_capability),
        cmocka_unit_test(test_resource_list),
        cmocka_unit_test(test_resource_list_index),
        cmocka_unit_test(test_change_list),
        cmocka_unit_test(test_change_list_index),
        cmocka_unit_test(test_resource_dump),
        cmocka_unit_test(test_resource_dump_manifest),
        cmocka_unit_test(test_change_dump),
        cmocka_unit_test(test_change_dump_manifest),
        cmocka_unit_test(test_change_notification),
        cmocka_unit_test(test_framework_notification),
        cmocka_unit_test(test_hub_annotation),
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_compact),
        cmocka_unit_test(test_byte_stable),
        cmocka_unit_test(test_refuse_invalid_utf8),
        cmocka_unit_test(test_refuse_control_chars),
        cmocka_unit_test(test_refuse_invalid_docs),
        cmocka_unit_test(test_strict_and_lenient),
        cmocka_unit_test(test_new_rules),
        cmocka_unit_test(test_refuse_unwritable_values),
        cmocka_unit_test(test_entry_limit),
        cmocka_unit_test(test_size_limit),
        cmocka_unit_test(test_callback_failure),
        cmocka_unit_test(test_state_errors),
        cmocka_unit_test(test_alloc_failure),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_roundtrip_parsed_spec),
    };
    return cmocka_run_group_tests_name("write", tests, NULL, NULL);
}
