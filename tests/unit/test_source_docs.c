/* test_source_docs.c - every document rssource writes (source/docs.c) and
 * the Resource List snapshots (source/snapshot.c), parsed back strictly
 * with proto: each list type, and the size boundaries 0, 1, 50,000 and
 * 50,001 entries (single list vs index and parts; notifications split
 * into several documents). */
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "changelog.h"
#include "docs.h"
#include "tree.h"
#include "rs_alloc.h"
#include "rs_parse.h"
#include "snapshot.h"
#include "state.h"

#define BASE "http://data.example.org/set/"

struct fx {
    char *dir;
    char db[4200];
    char rl[4200];
    struct state *st;
    struct docs *docs;
};

static int
fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    f->dir = tu_mkdtemp();
    snprintf(f->db, sizeof(f->db), "%s/state.db", f->dir);
    snprintf(f->rl, sizeof(f->rl), "%s/rl", f->dir);
    char err[256];
    if (state_open(f->db, false, &f->st, err, sizeof(err)) != 0)
        fail_msg("state_open: %s", err);
    const char *e;
    f->docs = docs_new(BASE, &e);
    assert_non_null(f->docs);
    *state = f;
    return 0;
}

static int
fx_teardown(void **state)
{
    struct fx *f = *state;
    docs_free(f->docs);
    state_free(f->st);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* ------------------------------------------------------------- helpers */

struct buf {
    char *p;
    size_t len, cap;
};

static int
buf_write(void *ud, const char *s, size_t n)
{
    struct buf *b = ud;
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

/* Parse strictly (warnings are errors) or fail the test (rs_doc_parse
 * feeds the parser in pieces: libxml2 refuses a single chunk of more than
 * 10 MB). */
static struct rs_doc *
parse(const char *p, size_t len)
{
    struct rs_parse_opts o = { .strict = true };
    struct rs_doc *doc = NULL;
    struct rs_diag d;
    if (rs_doc_parse(p, len, &o, &doc, &d) != 0)
        fail_msg("document refused, line %u: %s", d.line, d.msg);
    return doc;
}

static struct rs_doc *
parse_file(const char *path)
{
    size_t len = 0;
    char *buf = tu_read_file(path, &len);
    if (buf == NULL)
        fail_msg("cannot read %s", path);
    struct rs_doc *doc = parse(buf, len);
    free(buf);
    return doc;
}

static const char *
link_href(const struct rs_link *ln, size_t n, const char *rel)
{
    const struct rs_link *l = rs_links_find(ln, n, rel);
    return l != NULL ? l->href : NULL;
}

/* n resources r000000.. with fake digests, in one transaction. */
static void
add_resources(struct fx *f, int n)
{
    assert_int_equal(state_begin(f->st), 0);
    for (int i = 0; i < n; i++) {
        char path[32];
        snprintf(path, sizeof(path), "d/r%06d.txt", i);
        struct state_res r = { .path = path, .dev = 1, .ino = i + 10,
                               .size = i, .mtime_ns = 1700000000000000000LL,
                               .hashed = true, .type = "text/plain",
                               .first_seen = 1 };
        memset(r.md5, i & 0xff, 16);
        memset(r.sha256, 0xab, 32);
        assert_int_equal(state_res_put(f->st, &r), 0);
    }
    assert_int_equal(state_commit(f->st), 0);
}

static struct snapshot *
snap_new(struct fx *f, size_t page, bool next)
{
    struct snapshot_opts o = { .docs = f->docs, .st = f->st,
                               .state_path = f->db, .dir = f->rl,
                               .page_size = page, .next_links = next,
                               .keep = 3 };
    const char *err;
    struct snapshot *s = snapshot_new(&o, &err);
    if (s == NULL)
        fail_msg("snapshot_new: %s", err);
    return s;
}

static struct rs_doc *
snap_doc(struct snapshot *s, const char *name)
{
    char path[4400];
    if (snapshot_file(s, name, path, sizeof(path)) != 0)
        fail_msg("no file for %s", name);
    return parse_file(path);
}

/* ----------------------------------------------------------- documents */

/* docs/source_description: one entry, the Capability List. */
static void
test_source_description(void **state)
{
    struct fx *f = *state;
    struct buf b = { 0 };
    assert_int_equal(docs_source_description(f->docs, buf_write, &b, NULL), 0);
    struct rs_doc *d = parse(b.p, b.len);
    assert_int_equal(d->head.md.capability, RS_CAP_DESCRIPTION);
    assert_int_equal(d->nentries, 1);
    assert_string_equal(d->entries[0].loc,
                        BASE "resourcesync/capabilitylist.xml");
    assert_string_equal(docs_sd_url(f->docs), BASE ".well-known/resourcesync");
    rs_doc_free(d);
    free(b.p);
}

/* docs/capability_list: the Resource List, the Change List Index, and per
 * topic the WebSub entry with rel="hub" and the ws:// channel (alpha
 * spelling for change notifications). */
static void
test_capability_list(void **state)
{
    struct fx *f = *state;
    struct docs_channel ch[] = {
        { BASE "resourcesync/changes", RS_CAP_CHANGELIST_NOTIFICATION, false,
          "http://hub.example/hub" },
        { "ws://hub.example:81/channel/c", RS_CAP_CHANGELIST_NOTIFICATION,
          true, NULL },
        { BASE "resourcesync/framework", RS_CAP_FRAMEWORK_NOTIFICATION, false,
          "http://hub.example/hub" },
        { "ws://hub.example:81/channel/f", RS_CAP_FRAMEWORK_NOTIFICATION,
          false, NULL },
    };
    struct buf b = { 0 };
    assert_int_equal(docs_capability_list(f->docs, ch, 4, buf_write, &b,
                                          NULL), 0);
    struct rs_doc *d = parse(b.p, b.len);
    assert_int_equal(d->head.md.capability, RS_CAP_CAPABILITYLIST);
    assert_string_equal(link_href(d->head.links, d->head.nlinks, "up"),
                        BASE ".well-known/resourcesync");
    assert_int_equal(d->nentries, 6);
    assert_int_equal(d->entries[0].md.capability, RS_CAP_RESOURCELIST);
    assert_string_equal(d->entries[0].loc,
                        BASE "resourcesync/resourcelist.xml");
    assert_int_equal(d->entries[1].md.capability, RS_CAP_CHANGELIST);
    assert_string_equal(d->entries[1].loc,
                        BASE "resourcesync/changelist-index.xml");
    assert_string_equal(link_href(d->entries[2].links, d->entries[2].nlinks,
                                  "hub"), "http://hub.example/hub");
    assert_true(d->entries[3].md.capability_alpha);
    assert_non_null(strstr(b.p, "capability=\"change-notification\""));
    assert_int_equal(d->entries[5].md.capability,
                     RS_CAP_FRAMEWORK_NOTIFICATION);
    rs_doc_free(d);
    free(b.p);
}

static void
record(struct changelog *cl, const char *path, enum rs_change ch,
       rs_time_t now)
{
    struct state_change c = { .path = path, .change = ch, .size = -1,
                              .lastmod = RS_TIME_NONE };
    if (ch != RS_CHANGE_DELETED) {
        c.size = 5;
        c.hashed = true;
        memset(c.md5, 1, 16);
        memset(c.sha256, 2, 32);
        c.type = "text/plain";
        c.lastmod = now - 1000;
    }
    assert_int_equal(changelog_record(cl, &c, now), 0);
}

/* docs/changelist_and_index: a Change List holds its entries in order
 * with datetime, deleted ones without lastmod/hash; after a rotation the
 * index lists a closed list (with until) and the open one (without). */
static void
test_changelist(void **state)
{
    struct fx *f = *state;
    rs_time_t t0 = rs_time_now();
    struct changelog_opts co = { .max_entries = 3 };
    const char *e;
    struct changelog *cl = changelog_new(f->st, &co, t0, &e);
    assert_non_null(cl);
    assert_int_equal(state_begin(f->st), 0);
    record(cl, "a b.txt", RS_CHANGE_CREATED, t0 + 1);
    record(cl, "a b.txt", RS_CHANGE_UPDATED, t0 + 2);
    record(cl, "a b.txt", RS_CHANGE_DELETED, t0 + 3);
    record(cl, "next.txt", RS_CHANGE_CREATED, t0 + 4);
    assert_int_equal(state_commit(f->st), 0);

    struct buf b = { 0 };
    assert_int_equal(docs_changelist(f->docs, f->st, 1, buf_write, &b, NULL),
                     0);
    struct rs_doc *d = parse(b.p, b.len);
    assert_int_equal(d->head.md.capability, RS_CAP_CHANGELIST);
    assert_true(d->head.md.until != RS_TIME_NONE);
    assert_string_equal(link_href(d->head.links, d->head.nlinks, "index"),
                        BASE "resourcesync/changelist-index.xml");
    assert_int_equal(d->nentries, 3);
    assert_string_equal(d->entries[0].loc, BASE "a%20b.txt");
    assert_int_equal(d->entries[0].md.change, RS_CHANGE_CREATED);
    assert_int_equal(d->entries[0].md.length, 5);
    assert_int_equal(d->entries[0].md.hash.n, 2);
    assert_int_equal(d->entries[2].md.change, RS_CHANGE_DELETED);
    assert_true(d->entries[2].lastmod == RS_TIME_NONE);
    assert_int_equal(d->entries[2].md.hash.n, 0);
    assert_true(d->entries[0].md.datetime < d->entries[1].md.datetime);
    rs_doc_free(d);

    b.len = 0;
    assert_int_equal(docs_changelist(f->docs, f->st, 2, buf_write, &b, NULL),
                     0);
    d = parse(b.p, b.len);
    assert_true(d->head.md.until == RS_TIME_NONE);
    assert_int_equal(d->nentries, 1);
    rs_doc_free(d);
    assert_int_equal(docs_changelist(f->docs, f->st, 3, buf_write, &b, NULL),
                     RS_ENOTFOUND);

    b.len = 0;
    assert_int_equal(docs_changelist_index(f->docs, f->st, buf_write, &b,
                                           NULL), 0);
    d = parse(b.p, b.len);
    assert_int_equal(d->head.root, RS_ROOT_SITEMAPINDEX);
    assert_int_equal(d->head.md.from, t0);
    assert_int_equal(d->nentries, 2);
    assert_string_equal(d->entries[0].loc,
                        BASE "resourcesync/changelist-1.xml");
    assert_true(d->entries[0].md.until != RS_TIME_NONE);
    assert_true(d->entries[1].md.until == RS_TIME_NONE);
    assert_int_equal(d->entries[1].md.from, d->entries[0].md.until);
    rs_doc_free(d);
    free(b.p);
    changelog_free(cl);
}

/* Count the entries of a snapshot, checking each document strictly and
 * the path order across parts. */
static int64_t
walk_snapshot(struct snapshot *s, bool next, const char **prev_loc)
{
    struct rs_doc *top = snap_doc(s, DOCS_RESOURCELIST);
    const struct snapshot_info *i = snapshot_current(s);
    int64_t total = 0;
    char last[256] = "";
    if (i->parts == 0 || next) {
        /* a single list, or the first page of a chain */
        struct rs_doc *d = top;
        for (int64_t page = 1;; page++) {
            assert_int_equal(d->head.root, RS_ROOT_URLSET);
            assert_int_equal(d->head.md.capability, RS_CAP_RESOURCELIST);
            assert_true(d->head.md.at != RS_TIME_NONE);
            for (size_t k = 0; k < d->nentries; k++) {
                assert_true(strcmp(last, d->entries[k].loc) < 0);
                snprintf(last, sizeof(last), "%s", d->entries[k].loc);
            }
            total += (int64_t)d->nentries;
            const char *nx = link_href(d->head.links, d->head.nlinks, "next");
            char name[128] = "";
            if (nx != NULL)
                snprintf(name, sizeof(name), "%s", strrchr(nx, '/') + 1);
            if (page > 1)
                assert_non_null(link_href(d->head.links, d->head.nlinks,
                                          "prev"));
            if (d != top)
                rs_doc_free(d);
            if (name[0] == '\0')
                break;
            d = snap_doc(s, name);
        }
    } else {
        assert_int_equal(top->head.root, RS_ROOT_SITEMAPINDEX);
        assert_true(top->head.md.completed >= top->head.md.at);
        assert_int_equal((int64_t)top->nentries, i->parts);
        for (size_t p = 0; p < top->nentries; p++) {
            struct rs_doc *d = snap_doc(s, strrchr(top->entries[p].loc, '/') + 1);
            assert_string_equal(link_href(d->head.links, d->head.nlinks,
                                          "index"),
                                BASE "resourcesync/resourcelist-1.xml");
            assert_string_equal(link_href(d->head.links, d->head.nlinks, "up"),
                                BASE "resourcesync/capabilitylist.xml");
            assert_int_equal(d->head.md.at, top->head.md.at);
            for (size_t k = 0; k < d->nentries; k++) {
                assert_true(strcmp(last, d->entries[k].loc) < 0);
                snprintf(last, sizeof(last), "%s", d->entries[k].loc);
            }
            total += (int64_t)d->nentries;
            rs_doc_free(d);
        }
    }
    if (top->nentries > 0 && top->head.root == RS_ROOT_URLSET) {
        assert_int_equal(top->entries[0].md.length, 0);
        assert_int_equal(top->entries[0].md.hash.n, 2);
        assert_string_equal(top->entries[0].md.type, "text/plain");
    }
    rs_doc_free(top);
    (void)prev_loc;
    return total;
}

/* One boundary: n resources, page size 50,000. */
static void
resourcelist_boundary(struct fx *f, int n, int64_t want_parts)
{
    add_resources(f, n);
    struct snapshot *s = snap_new(f, RS_MAX_ENTRIES, false);
    assert_true(snapshot_stale(s));
    assert_int_equal(snapshot_build(s, rs_time_now()), 0);
    assert_false(snapshot_stale(s));
    const struct snapshot_info *i = snapshot_current(s);
    assert_int_equal(i->gen, 1);
    assert_int_equal(i->count, n);
    assert_int_equal(i->parts, want_parts);
    assert_int_equal(walk_snapshot(s, false, NULL), n);
    snapshot_free(s);
}

/* docs/resourcelist_0: an empty catalog is one valid, empty list. */
static void
test_rl_0(void **state)
{
    resourcelist_boundary(*state, 0, 0);
}

/* docs/resourcelist_1 */
static void
test_rl_1(void **state)
{
    resourcelist_boundary(*state, 1, 0);
}

/* docs/resourcelist_50000: exactly a page still fits one list. */
static void
test_rl_50000(void **state)
{
    resourcelist_boundary(*state, RS_MAX_ENTRIES, 0);
}

/* docs/resourcelist_50001: one more needs an index over two parts. */
static void
test_rl_50001(void **state)
{
    resourcelist_boundary(*state, RS_MAX_ENTRIES + 1, 2);
}

/* docs/resourcelist_next_links: rel="next"/"prev" pages instead of an
 * index, every entry once. */
static void
test_rl_next(void **state)
{
    struct fx *f = *state;
    add_resources(f, 5);
    struct snapshot *s = snap_new(f, 2, true);
    assert_int_equal(snapshot_build(s, rs_time_now()), 0);
    assert_int_equal(snapshot_current(s)->parts, 2);
    assert_int_equal(walk_snapshot(s, true, NULL), 5);
    snapshot_free(s);
}

/* snapshot/generations: each build is a new generation; the last three
 * stay readable, older ones are removed; a change makes it stale; the
 * state remembers the current generation across a restart. */
static void
test_generations(void **state)
{
    struct fx *f = *state;
    add_resources(f, 3);
    struct snapshot *s = snap_new(f, 2, false);
    char path[4400];
    assert_int_equal(snapshot_file(s, DOCS_RESOURCELIST, path, sizeof(path)),
                     RS_ENOTFOUND);
    for (int g = 1; g <= 4; g++)
        assert_int_equal(snapshot_build(s, rs_time_now()), 0);
    assert_int_equal(snapshot_current(s)->gen, 4);
    assert_int_equal(snapshot_file(s, "resourcelist-4.xml", path,
                                   sizeof(path)), 0);
    assert_int_equal(snapshot_file(s, "resourcelist-2-1.xml", path,
                                   sizeof(path)), 0);
    assert_int_equal(snapshot_file(s, "resourcelist-1.xml", path,
                                   sizeof(path)), RS_ENOTFOUND);
    assert_int_equal(snapshot_file(s, "resourcelist-5.xml", path,
                                   sizeof(path)), RS_ENOTFOUND);
    assert_int_equal(snapshot_file(s, "resourcelist-4-9.xml", path,
                                   sizeof(path)), RS_ENOTFOUND);
    assert_int_equal(snapshot_file(s, "resourcelist-04.xml", path,
                                   sizeof(path)), RS_ENOTFOUND);
    assert_int_equal(snapshot_file(s, "resourcelist-4.xml/../x", path,
                                   sizeof(path)), RS_ENOTFOUND);
    assert_false(snapshot_stale(s));
    snapshot_free(s);

    s = snap_new(f, 2, false);
    assert_int_equal(snapshot_current(s)->gen, 4);
    assert_false(snapshot_stale(s));
    const char *e;
    struct changelog_opts co = { .max_entries = 100 };
    struct changelog *cl = changelog_new(f->st, &co, rs_time_now(), &e);
    assert_int_equal(state_begin(f->st), 0);
    record(cl, "x", RS_CHANGE_CREATED, rs_time_now());
    assert_int_equal(state_commit(f->st), 0);
    assert_true(snapshot_stale(s));
    changelog_free(cl);
    snapshot_free(s);
    snapshot_free(NULL);
    docs_free(NULL);
}

/* docs/notification_split: 50,001 outstanding changes go out as a
 * document of 50,000 entries and one of 1; a byte budget cuts earlier
 * (but always sends at least one entry). */
static void
test_notification_split(void **state)
{
    struct fx *f = *state;
    rs_time_t t0 = rs_time_now();
    struct changelog_opts co = { .max_entries = RS_MAX_ENTRIES };
    const char *e;
    struct changelog *cl = changelog_new(f->st, &co, t0, &e);
    assert_int_equal(state_begin(f->st), 0);
    for (int i = 0; i <= RS_MAX_ENTRIES; i++) {
        char p[32];
        snprintf(p, sizeof(p), "n%06d", i);
        record(cl, p, RS_CHANGE_UPDATED, t0 + i);
    }
    assert_int_equal(state_commit(f->st), 0);
    struct buf b = { 0 };
    int64_t last;
    size_t n;
    assert_int_equal(docs_change_notification(f->docs, f->st, 0, 0,
                                              RS_MAX_DOC_BYTES, buf_write, &b,
                                              &last, &n, NULL), 0);
    assert_int_equal(n, RS_MAX_ENTRIES);
    assert_int_equal(last, RS_MAX_ENTRIES);
    struct rs_doc *d = parse(b.p, b.len);
    assert_int_equal(d->head.md.capability, RS_CAP_CHANGELIST_NOTIFICATION);
    assert_int_equal(d->nentries, RS_MAX_ENTRIES);
    rs_doc_free(d);
    b.len = 0;
    assert_int_equal(docs_change_notification(f->docs, f->st, last, 0,
                                              RS_MAX_DOC_BYTES, buf_write, &b,
                                              &last, &n, NULL), 0);
    assert_int_equal(n, 1);
    assert_int_equal(last, RS_MAX_ENTRIES + 1);
    d = parse(b.p, b.len);
    assert_int_equal(d->nentries, 1);
    assert_string_equal(d->entries[0].loc, BASE "n050000");
    rs_doc_free(d);
    b.len = 0;
    assert_int_equal(docs_change_notification(f->docs, f->st, last, 0,
                                              RS_MAX_DOC_BYTES, buf_write, &b,
                                              &last, &n, NULL), 0);
    assert_int_equal(n, 0);
    assert_int_equal(b.len, 0);

    /* a budget of 4 KiB: several documents, each within it */
    b.len = 0;
    assert_int_equal(docs_change_notification(f->docs, f->st, 0, 0, 4096,
                                              buf_write, &b, &last, &n, NULL),
                     0);
    assert_true(n > 1 && n < 20);
    assert_true(b.len <= 4096);
    assert_int_equal(last, (int64_t)n);
    d = parse(b.p, b.len);
    assert_int_equal(d->nentries, n);
    rs_doc_free(d);
    b.len = 0;
    assert_int_equal(docs_change_notification(f->docs, f->st, 0, 0, 10,
                                              buf_write, &b, &last, &n, NULL),
                     0);
    assert_int_equal(n, 1);
    free(b.p);
    changelog_free(cl);
}

/* docs/framework_notification: rotations and snapshots announce their
 * documents; parts carry rel="index"; the kind of change is one the
 * notification spec permits (checked by the strict parse). */
static void
test_framework(void **state)
{
    struct fx *f = *state;
    add_resources(f, 5);
    struct changelog_opts co = { .max_entries = 1 };
    const char *e;
    struct changelog *cl = changelog_new(f->st, &co, rs_time_now(), &e);
    assert_int_equal(state_begin(f->st), 0);
    record(cl, "x", RS_CHANGE_CREATED, rs_time_now());
    assert_int_equal(state_commit(f->st), 0);
    struct snapshot *s = snap_new(f, 2, false);
    assert_int_equal(snapshot_build(s, rs_time_now()), 0);
    struct buf b = { 0 };
    int64_t last;
    size_t n;
    assert_int_equal(docs_framework_notification(f->docs, f->st, 0, 0,
                                                 RS_MAX_DOC_BYTES, buf_write,
                                                 &b, &last, &n, NULL), 0);
    /* changelist-1 created, -1 updated, -2 created, 3 Resource List parts */
    assert_int_equal(n, 6);
    struct rs_doc *d = parse(b.p, b.len);
    assert_int_equal(d->head.md.capability, RS_CAP_FRAMEWORK_NOTIFICATION);
    assert_string_equal(d->entries[1].loc, BASE "resourcesync/changelist-1.xml");
    assert_int_equal(d->entries[1].md.change, RS_CHANGE_UPDATED);
    assert_int_equal(d->entries[3].md.capability, RS_CAP_RESOURCELIST);
    assert_string_equal(d->entries[3].loc,
                        BASE "resourcesync/resourcelist-1-1.xml");
    assert_string_equal(link_href(d->entries[3].links, d->entries[3].nlinks,
                                  "index"),
                        BASE "resourcesync/resourcelist-1.xml");
    rs_doc_free(d);
    free(b.p);
    /* delivered events can be forgotten */
    assert_int_equal(state_fw_trim(f->st, last), 0);
    b = (struct buf){ 0 };
    assert_int_equal(docs_framework_notification(f->docs, f->st, 0, 0,
                                                 RS_MAX_DOC_BYTES, buf_write,
                                                 &b, &last, &n, NULL), 0);
    assert_int_equal(n, 0);
    snapshot_free(s);
    changelog_free(cl);
}

/* docs/urls: the base gets its final '/', paths are percent-encoded,
 * bad bases are refused. */
static void
test_urls(void **state)
{
    (void)state;
    const char *e;
    struct docs *d = docs_new("https://h.example:8443/a/b", &e);
    assert_non_null(d);
    assert_string_equal(docs_base(d), "https://h.example:8443/a/b/");
    assert_string_equal(docs_base_path(d), "/a/b/");
    char u[DOCS_URL_MAX];
    assert_int_equal(docs_resource_url(d, "x y/\xc3\xa9.txt", u, sizeof(u)), 0);
    assert_string_equal(u, "https://h.example:8443/a/b/x%20y/%C3%A9.txt");
    assert_int_equal(docs_resource_url(d, "x", u, 10), RS_ETOOBIG);
    docs_free(d);
    d = docs_new("http://h.example", &e);
    assert_non_null(d);
    assert_string_equal(docs_base_path(d), "/");
    docs_free(d);
    assert_null(docs_new("ftp://h.example/", &e));
    assert_null(docs_new("http://h.example/?q=1", &e));
    assert_null(docs_new("/relative/", &e));
}

/* docs/base_url_refused: base URLs under which a Source could not serve
 * its own documents are refused with a message, and the longest one
 * taken still builds the <loc> of the longest path, every byte
 * percent-encoded. */
static void
test_base_url_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "http://h.example/a/../b/",   "http://h.example/a/./b/",
        "http://h.example/..",         "http://h.example/a/%2E%2e/",
        "http://h.example//",          "http://h.example/a//b/",
        "http://h.example/d\xc3\xa4t\xc3\xa4/", "http://h.example/a b/",
        "http://h.example/a%zz/",      "http://h.example/a%2/",
        "http://h.example/a\x01/",     "http://h.example/a\"b/",
    };
    const char *e;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct docs *d = docs_new(bad[i], &e);
        if (d != NULL)
            fail_msg("accepted %s", bad[i]);
        assert_non_null(e);
        assert_true(strncmp(e, "--base-url: ", 12) == 0);
    }
    static const char *const good[] = {
        "http://h.example/a..b/.x/x./", "http://h.example/d%C3%A4t%C3%A4/",
        "http://h.example:8080/a/b", "http://[::1]:8080/~u/a;b=c/@x:y/",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        struct docs *d = docs_new(good[i], &e);
        if (d == NULL)
            fail_msg("refused %s: %s", good[i], e);
        docs_free(d);
    }
    /* the longest base taken, and one byte more */
    char *base = malloc(DOCS_BASE_MAX + 2);
    assert_non_null(base);
    memset(base, 'x', DOCS_BASE_MAX + 1);
    memcpy(base, "http://h.example/", 17);
    base[DOCS_BASE_MAX - 1] = '/';
    base[DOCS_BASE_MAX] = '\0';
    struct docs *d = docs_new(base, &e);
    assert_non_null(d);
    base[DOCS_BASE_MAX] = 'x';
    base[DOCS_BASE_MAX + 1] = '\0';
    assert_null(docs_new(base, &e));
    free(base);
    char rel[TREE_PATH_MAX];
    memset(rel, ' ', sizeof(rel) - 1);
    rel[sizeof(rel) - 1] = '\0';
    char *u = malloc(DOCS_URL_MAX);
    assert_non_null(u);
    assert_int_equal(docs_resource_url(d, rel, u, DOCS_URL_MAX), 0);
    assert_int_equal(strlen(u), DOCS_BASE_MAX + 3 * (TREE_PATH_MAX - 1));
    free(u);
    docs_free(d);
}

#define TD(name, fn) { name, fn, fx_setup, fx_teardown, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TD("docs/source_description", test_source_description),
        TD("docs/capability_list", test_capability_list),
        TD("docs/changelist_and_index", test_changelist),
        TD("docs/resourcelist_0", test_rl_0),
        TD("docs/resourcelist_1", test_rl_1),
        TD("docs/resourcelist_50000", test_rl_50000),
        TD("docs/resourcelist_50001", test_rl_50001),
        TD("docs/resourcelist_next_links", test_rl_next),
        TD("snapshot/generations", test_generations),
        TD("docs/notification_split", test_notification_split),
        TD("docs/framework_notification", test_framework),
        TD("docs/urls", test_urls),
        TD("docs/base_url_refused", test_base_url_refused),
    };
    return cmocka_run_group_tests_name("source_docs", tests, NULL, NULL);
}
