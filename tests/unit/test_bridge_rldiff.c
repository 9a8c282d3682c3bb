/* test_bridge_rldiff.c - rsbridge's change detection for Sources with
 * only Resource Lists (bridge/rldiff.c, through bridge/walk.c): real
 * walks over loopback of a programmable Source (test_bridge_src.h) into a
 * real SQLite state. A plain list, an index over parts (a part answering
 * 304 stands for its entries), rel="next" pages; created, updated and
 * deleted with the best datetime; a resource a several-document walk did
 * not meet, asked about (gone, there, no answer); exactly once across a
 * walk that never committed; a resource listed twice taken by one rule,
 * whatever the order of its entries; a list with a malformed entry
 * skipped deletes nothing. */
#include "testutil.h"

#include <event2/event.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reader.h"
#include "rldiff.h"
#include "rs_http.h"
#include "rs_time.h"
#include "store.h"
#include "test_bridge_src.h"
#include "tu_httpd.h"
#include "walk.h"

struct got {
    char loc[200];
    int change;
    rs_time_t dt;
};

struct fx {
    struct tu_loop l;
    struct tbs *src;
    struct rs_http *http;
    struct reader *rd;
    struct walk *w;
    char *dir;
    char db[600];
    struct store *st;
    struct rldiff *rdf;
    struct store_feed feed;
    bool done, staging;
    int rc;
    char err[700];
    struct walk_result wr;
    struct got got[256];
    size_t ngot;
    struct rldiff_stats stats;
    rs_time_t started;
};

static rs_time_t
t_of(int sec)
{
    return 1735689600LL * 1000000 + (rs_time_t)sec * 1000000;
}

static void
dt_of(int sec, char *buf)
{
    assert_true(rs_time_format(t_of(sec), buf) > 0);
}

static int
on_entry(void *ud, const struct walk_doc *d, size_t idx,
         const struct rs_entry *e, const char *loc)
{
    struct fx *f = ud;
    if (!f->staging) {
        assert_int_equal(store_begin(f->st), 0);
        f->staging = true;
    }
    return rldiff_entry(f->rdf, d, idx, e, loc);
}

static void
close_staging(struct fx *f)
{
    if (f->staging) {
        assert_int_equal(store_commit(f->st), 0);
        f->staging = false;
    }
}

static int
on_doc(void *ud, const struct walk_doc *d, bool not_modified)
{
    struct fx *f = ud;
    close_staging(f);
    return rldiff_doc(f->rdf, d, not_modified);
}

static void
on_chunk(void *ud)
{
    close_staging(ud);
}

static void
on_done(void *ud, int rc, const char *err, const struct walk_result *wr)
{
    struct fx *f = ud;
    close_staging(f);
    snprintf(f->err, sizeof(f->err), "%s", err);
    f->rc = rc;
    f->wr = *wr;
    f->done = true;
}

static int
hook_change(void *ud, const struct clscan_change *c)
{
    struct fx *f = ud;
    assert_true(f->ngot < 256);
    struct got *g = &f->got[f->ngot++];
    snprintf(g->loc, sizeof(g->loc), "%s", c->loc);
    g->change = (int)c->change;
    g->dt = c->datetime;
    return 0;
}

/* Walk the Resource List at key (staged only): the walk's rc. */
static int
walk_rl_rc(struct fx *f, const char *key)
{
    const char *url = tbs_url(f->src, key);
    assert_int_equal(store_feed_get(f->st, 1, STORE_FEED_RESOURCES, url, 0,
                                    &f->feed), 0);
    rldiff_begin(f->rdf, f->feed.id);
    f->done = false;
    f->started = rs_time_now();
    assert_int_equal(walk_start(f->w, f->feed.id, url), 0);
    TU_LOOP_UNTIL(&f->l, f->done, 10000);
    return f->rc;
}

/* Walk the Resource List at key (staged only): it must succeed. */
static void
walk_rl(struct fx *f, const char *key)
{
    int rc = walk_rl_rc(f, key);
    if (rc != 0)
        fail_msg("walk of %s failed: %s", key, f->err);
}

static void
commit(struct fx *f, bool checked)
{
    struct rldiff_hooks h = { .on_change = hook_change, .ud = f };
    f->ngot = 0;
    assert_int_equal(rldiff_commit(f->rdf, &f->feed, &f->wr, f->started,
                                   checked, &h, &f->stats), 0);
}

static void
open_state(struct fx *f)
{
    char err[256];
    assert_int_equal(store_open(f->db, &f->st, err, sizeof(err)), 0);
    f->rdf = rldiff_new(f->st);
    assert_non_null(f->rdf);
    struct reader_opts ro = { .base = f->l.base, .http = f->http };
    f->rd = reader_new(&ro);
    assert_non_null(f->rd);
    struct walk_opts wo = {
        .base = f->l.base,
        .rd = f->rd,
        .st = f->st,
        .on_entry = on_entry,
        .on_doc = on_doc,
        .on_chunk = on_chunk,
        .on_done = on_done,
        .ud = f,
    };
    f->w = walk_new(&wo);
    assert_non_null(f->w);
    int64_t id;
    bool fresh;
    assert_int_equal(store_source(f->st, "src", "http://src/", &id, &fresh),
                     0);
}

static void
close_state(struct fx *f)
{
    walk_free(f->w);
    reader_free(f->rd);
    rldiff_free(f->rdf);
    store_free(f->st);
}

static int
setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    tu_loop_init(&f->l);
    f->src = tbs_new(f->l.base);
    struct rs_http_opts ho = { .user_agent = "rsbridge-test" };
    f->http = rs_http_new(f->l.base, &ho);
    assert_non_null(f->http);
    f->dir = tu_mkdtemp();
    snprintf(f->db, sizeof(f->db), "%s/bridge.db", f->dir);
    open_state(f);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    rs_http_free(f->http);
    close_state(f);
    tbs_free(f->src);
    tu_loop_cleanup(&f->l);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* A Resource List entry: name, lastmod second, md5 digit. */
struct res {
    const char *name;
    int sec;
    char md5;
};

static void
entries(char *buf, size_t len, const struct res *r, size_t n)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        char dt[RS_TIME_BUFSZ], h[33];
        dt_of(r[i].sec, dt);
        memset(h, r[i].md5, 32);
        h[32] = '\0';
        off += (size_t)snprintf(buf + off, len - off,
                                "<url><loc>{B}/data/%s</loc><lastmod>%s"
                                "</lastmod><rs:md hash=\"md5:%s\" length="
                                "\"5\"/></url>", r[i].name, dt, h);
    }
}

static void
serve_list(struct fx *f, const char *key, int at, const char *next,
           const struct res *r, size_t n)
{
    char e[16384], a[RS_TIME_BUFSZ], nx[256] = "";
    entries(e, sizeof(e), r, n);
    dt_of(at, a);
    if (next != NULL)
        snprintf(nx, sizeof(nx), "<rs:ln rel=\"next\" href=\"{B}%s\"/>", next);
    tbs_putf(f->src, key, "<urlset " TBS_NS "><rs:md capability="
             "\"resourcelist\" at=\"%s\"/>%s%s</urlset>", a, nx, e);
}

static const struct got *
got_of(const struct fx *f, const char *name)
{
    char loc[200];
    snprintf(loc, sizeof(loc), "%s/data/%s", f->src->origin, name);
    for (size_t i = 0; i < f->ngot; i++)
        if (strcmp(f->got[i].loc, loc) == 0)
            return &f->got[i];
    return NULL;
}

/* got_must: the change published for NAME; a test failure when there is
 * none (a zeroed change is returned so that -O2's null-dereference
 * analysis sees no NULL reach the caller's field access). */
static const struct got *
got_must(const struct fx *f, const char *name)
{
    static const struct got none;
    const struct got *g = got_of(f, name);
    if (g == NULL) {
        fail_msg("no change published for %s", name);
        return &none;
    }
    return g;
}

/* ------------------------------------------------------------- tests */

/* rldiff/list: the first read is the baseline; then created (its
 * lastmod), updated (a new hash, its newer lastmod; the same hash with
 * another lastmod is no change), deleted (the list's at); a list read
 * again unchanged (304) publishes nothing. */
static void
test_list(void **state)
{
    struct fx *f = *state;
    struct res v1[] = { { "a", 1, '1' }, { "b", 2, '2' }, { "c", 3, '3' },
                        { "d", 4, '4' } };
    serve_list(f, "/rl.xml", 10, NULL, v1, 4);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_true(f->stats.baseline);
    assert_int_equal(f->ngot, 0);
    struct res v2[] = { { "a", 1, '1' }, { "b", 20, '9' }, { "d", 21, '4' },
                        { "e", 22, '5' } };
    serve_list(f, "/rl.xml", 30, NULL, v2, 4);
    walk_rl(f, "/rl.xml");
    assert_false(rldiff_needs_checks(&f->feed, &f->wr));   /* one document */
    commit(f, false);
    assert_int_equal(f->ngot, 3);
    const struct got *g = got_must(f, "b");
    assert_int_equal(g->change, RS_CHANGE_UPDATED);
    assert_true(g->dt == t_of(20));
    g = got_must(f, "e");
    assert_int_equal(g->change, RS_CHANGE_CREATED);
    assert_true(g->dt == t_of(22));
    g = got_must(f, "c");
    assert_int_equal(g->change, RS_CHANGE_DELETED);
    assert_true(g->dt == t_of(30));
    assert_null(got_of(f, "d"));              /* same hash: no change */
    assert_int_equal(f->stats.created + f->stats.updated + f->stats.deleted,
                     3);
    /* read again: a 304, nothing */
    unsigned nm = f->src->not_modified;
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_true(f->stats.unchanged);
    assert_int_equal(f->ngot, 0);
    assert_int_equal(f->src->not_modified, nm + 1);
}

/* rldiff/index_parts: an index over two parts; a part answering 304
 * stands for its entries (nothing deleted), the other's changes are
 * found. */
static void
test_index(void **state)
{
    struct fx *f = *state;
    struct res p1[] = { { "a", 1, '1' }, { "b", 2, '2' } };
    struct res p2[] = { { "c", 3, '3' }, { "d", 4, '4' } };
    serve_list(f, "/rl-1.xml", 10, NULL, p1, 2);
    serve_list(f, "/rl-2.xml", 10, NULL, p2, 2);
    tbs_put(f->src, "/rl.xml", "<sitemapindex " TBS_NS "><rs:md capability="
            "\"resourcelist\" at=\"2025-01-01T00:00:10Z\"/><sitemap><loc>"
            "{B}/rl-1.xml</loc></sitemap><sitemap><loc>{B}/rl-2.xml</loc>"
            "</sitemap></sitemapindex>");
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_true(f->stats.baseline);
    struct res p2b[] = { { "c", 3, '3' }, { "x", 40, '7' } };
    serve_list(f, "/rl-2.xml", 10, NULL, p2b, 2);
    unsigned nm = f->src->not_modified;
    walk_rl(f, "/rl.xml");
    assert_int_equal(f->src->not_modified, nm + 2);   /* index, part 1 */
    assert_false(rldiff_needs_checks(&f->feed, &f->wr));
    commit(f, false);
    assert_int_equal(f->ngot, 2);
    assert_int_equal(got_must(f, "x")->change, RS_CHANGE_CREATED);
    assert_int_equal(got_must(f, "d")->change, RS_CHANGE_DELETED);
    assert_null(got_of(f, "a"));
    assert_null(got_of(f, "b"));
}

static int
collect(void *ud, const char *loc)
{
    char (*out)[200] = ud;
    for (int i = 0; i < 8; i++)
        if (out[i][0] == '\0') {
            snprintf(out[i], 200, "%s", loc);
            return 0;
        }
    return 0;
}

/* rldiff/pages_checked: a walk that read several pages whole may have met
 * a list moving under it: a resource it did not meet is asked about. 404:
 * deleted now; 2xx: kept; no answer: kept, and deleted when the next walk
 * does not meet it either. */
static void
test_checked(void **state)
{
    struct fx *f = *state;
    struct res a[] = { { "a", 1, '1' }, { "b", 2, '2' } };
    struct res b[] = { { "c", 3, '3' }, { "d", 4, '4' } };
    struct res c[] = { { "e", 5, '5' } };
    serve_list(f, "/rl.xml", 10, "/rl.xml?page=2", a, 2);
    serve_list(f, "/rl.xml?page=2", 10, "/rl.xml?page=3", b, 2);
    serve_list(f, "/rl.xml?page=3", 10, NULL, c, 1);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    /* b, d and e no longer met; a new one on every page */
    struct res a2[] = { { "a", 1, '1' }, { "f", 50, '6' } };
    struct res b2[] = { { "c", 3, '3' }, { "g", 51, '7' } };
    struct res c2[] = { { "h", 52, '8' } };
    serve_list(f, "/rl.xml", 60, "/rl.xml?page=2", a2, 2);
    serve_list(f, "/rl.xml?page=2", 60, "/rl.xml?page=3", b2, 2);
    serve_list(f, "/rl.xml?page=3", 60, NULL, c2, 1);
    walk_rl(f, "/rl.xml");
    assert_true(rldiff_needs_checks(&f->feed, &f->wr));
    char gone[8][200];
    memset(gone, 0, sizeof(gone));
    assert_int_equal(rldiff_gone(f->rdf, RLDIFF_CHECKS, collect, gone), 0);
    assert_non_null(strstr(gone[0], "/data/b"));
    assert_non_null(strstr(gone[1], "/data/d"));
    assert_non_null(strstr(gone[2], "/data/e"));
    assert_int_equal(gone[3][0], '\0');
    assert_int_equal(rldiff_checked(f->rdf, gone[0], RLDIFF_GONE), 0);
    assert_int_equal(rldiff_checked(f->rdf, gone[1], RLDIFF_THERE), 0);
    assert_int_equal(rldiff_checked(f->rdf, gone[2], RLDIFF_UNKNOWN), 0);
    commit(f, true);
    assert_int_equal(f->stats.created, 3);
    assert_int_equal(f->stats.deleted, 1);
    assert_int_equal(got_must(f, "b")->change, RS_CHANGE_DELETED);
    assert_true(got_must(f, "b")->dt == t_of(60));
    assert_null(got_of(f, "d"));
    assert_null(got_of(f, "e"));
    assert_int_equal(f->stats.kept, 2);
    /* the next walk: d is there again (it had moved), e still missing and
     * no answer: deleted now */
    struct res b3[] = { { "c", 3, '3' }, { "d", 4, '4' }, { "g", 51, '7' } };
    serve_list(f, "/rl.xml?page=2", 61, "/rl.xml?page=3", b3, 3);
    walk_rl(f, "/rl.xml");
    assert_true(rldiff_needs_checks(&f->feed, &f->wr) ||
                f->wr.docs == 1);
    commit(f, true);
    assert_int_equal(f->ngot, 1);
    assert_int_equal(got_must(f, "e")->change, RS_CHANGE_DELETED);
    assert_null(got_of(f, "d"));
}

/* rldiff/exactly_once: a walk staged but never committed leaves nothing
 * behind (the next process diffs again, once); a committed one read again
 * publishes nothing. */
static void
test_restart(void **state)
{
    struct fx *f = *state;
    struct res v1[] = { { "a", 1, '1' }, { "b", 2, '2' } };
    serve_list(f, "/rl.xml", 10, NULL, v1, 2);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    struct res v2[] = { { "a", 5, '5' }, { "c", 6, '6' } };
    serve_list(f, "/rl.xml", 20, NULL, v2, 2);
    walk_rl(f, "/rl.xml");                 /* staged: "kill -9" now */
    close_state(f);
    open_state(f);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_int_equal(f->ngot, 3);
    close_state(f);
    open_state(f);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_int_equal(f->ngot, 0);
    rldiff_free(NULL);
}

/* rldiff/duplicates: a list naming one resource twice (malformed) is
 * read by one rule - the entry with the newest lastmod - so the two
 * entries swapped between two reads publish nothing, and a real change
 * of the winner is one "updated"; across an index, a part answering 304
 * stands for the winner it held against a duplicate read in another. */
static void
test_duplicates(void **state)
{
    struct fx *f = *state;
    struct res v1[] = { { "a", 1, '1' }, { "x", 5, '5' }, { "x", 3, '3' },
                        { "b", 2, '2' } };
    serve_list(f, "/rl.xml", 10, NULL, v1, 4);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_true(f->stats.baseline);
    struct res v2[] = { { "a", 1, '1' }, { "x", 3, '3' }, { "x", 5, '5' },
                        { "b", 2, '2' } };
    serve_list(f, "/rl.xml", 20, NULL, v2, 4);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_false(f->stats.unchanged);         /* read whole: a new body */
    if (f->ngot != 0)
        fail_msg("%zu changes published for entries swapped, the first "
                 "%s (%d)", f->ngot, f->got[0].loc, f->got[0].change);
    assert_int_equal(f->stats.duplicates, 1);
    /* the older entry gets newer than the winner: a real change, once */
    struct res v3[] = { { "a", 1, '1' }, { "x", 7, '7' }, { "x", 5, '5' },
                        { "b", 2, '2' } };
    serve_list(f, "/rl.xml", 30, NULL, v3, 4);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_int_equal(f->ngot, 1);
    assert_int_equal(got_must(f, "x")->change, RS_CHANGE_UPDATED);
    assert_true(got_must(f, "x")->dt == t_of(7));
    /* equal lastmods: the whole entry decides, not the order */
    struct res v4[] = { { "a", 1, '1' }, { "x", 7, '7' }, { "x", 7, '8' },
                        { "b", 2, '2' } };
    serve_list(f, "/rl.xml", 40, NULL, v4, 4);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    size_t n4 = f->ngot;
    struct res v5[] = { { "a", 1, '1' }, { "x", 7, '8' }, { "x", 7, '7' },
                        { "b", 2, '2' } };
    serve_list(f, "/rl.xml", 50, NULL, v5, 4);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_true(n4 <= 1);
    assert_int_equal(f->ngot, 0);
}

/* rldiff/duplicates_index: a resource in two parts of an index; the part
 * holding the winner answers 304 after the other was read again: it
 * stands for the winner, nothing is published for the resource. */
static void
test_duplicates_index(void **state)
{
    struct fx *f = *state;
    struct res p1[] = { { "x", 3, '3' }, { "a", 1, '1' } };
    struct res p2[] = { { "x", 5, '5' }, { "b", 2, '2' } };
    serve_list(f, "/rl-1.xml", 10, NULL, p1, 2);
    serve_list(f, "/rl-2.xml", 10, NULL, p2, 2);
    tbs_put(f->src, "/rl.xml", "<sitemapindex " TBS_NS "><rs:md capability="
            "\"resourcelist\" at=\"2025-01-01T00:00:10Z\"/><sitemap><loc>"
            "{B}/rl-1.xml</loc></sitemap><sitemap><loc>{B}/rl-2.xml</loc>"
            "</sitemap></sitemapindex>");
    walk_rl(f, "/rl.xml");
    commit(f, false);
    struct res p1b[] = { { "x", 3, '3' }, { "a", 1, '1' }, { "c", 9, '9' } };
    serve_list(f, "/rl-1.xml", 20, NULL, p1b, 3);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_int_equal(f->ngot, 1);
    assert_int_equal(got_must(f, "c")->change, RS_CHANGE_CREATED);
}

/* rldiff/next_unresolved: a page whose rel="next" href is not an http(s)
 * URL (a raw space in it, another scheme) cannot be followed: the walk
 * fails, naming the page and the href, instead of ending short - read
 * short, the resources of the pages not read would be published as
 * deleted. An index child that is not an http(s) URL fails it too. */
static void
test_next_unresolved(void **state)
{
    struct fx *f = *state;
    struct res a[] = { { "a", 1, '1' }, { "b", 2, '2' } };
    struct res b[] = { { "c", 3, '3' }, { "d", 4, '4' } };
    struct res c[] = { { "e", 5, '5' } };
    serve_list(f, "/rl.xml", 10, "/rl.xml?page=2", a, 2);
    serve_list(f, "/rl.xml?page=2", 10, "/rl.xml?page=3", b, 2);
    serve_list(f, "/rl.xml?page=3", 10, NULL, c, 1);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_true(f->stats.baseline);
    static const char *const bad[] = { "http://bad host/rl.xml?page=3",
                                       "ftp://127.0.0.1/rl.xml?page=3" };
    for (size_t i = 0; i < 2; i++) {
        char e[4096], nx[256];
        entries(e, sizeof(e), b, 2);
        snprintf(nx, sizeof(nx), "%s", bad[i]);
        tbs_putf(f->src, "/rl.xml?page=2", "<urlset " TBS_NS "><rs:md "
                 "capability=\"resourcelist\" at=\"2025-01-01T00:00:20Z\"/>"
                 "<rs:ln rel=\"next\" href=\"%s\"/>%s</urlset>", nx, e);
        int rc = walk_rl_rc(f, "/rl.xml");
        if (rc == 0) {
            /* what the bug did: pages 1-2 only, e looks deleted */
            commit(f, false);
            fail_msg("a walk whose next page cannot be followed ended "
                     "short (%zu changes published, the first %s %d)",
                     f->ngot, f->ngot > 0 ? f->got[0].loc : "-",
                     f->ngot > 0 ? f->got[0].change : 0);
        }
        assert_int_equal(rc, RS_EINVALID);
        assert_non_null(strstr(f->err, "/rl.xml?page=2"));
        assert_non_null(strstr(f->err, "rel=\"next\""));
        assert_non_null(strstr(f->err, i == 0 ? "bad host" : "ftp://"));
    }
    /* fixed: the walk goes on, nothing was lost meanwhile */
    serve_list(f, "/rl.xml?page=2", 10, "/rl.xml?page=3", b, 2);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_int_equal(f->ngot, 0);
    /* an index whose child is not an http(s) URL fails the walk too */
    serve_list(f, "/p1.xml", 10, NULL, a, 2);
    tbs_put(f->src, "/ix.xml", "<sitemapindex " TBS_NS "><rs:md capability="
            "\"resourcelist\" at=\"2025-01-01T00:00:10Z\"/><sitemap><loc>"
            "{B}/p1.xml</loc></sitemap><sitemap><loc>ftp://127.0.0.1/p2.xml"
            "</loc></sitemap></sitemapindex>");
    assert_int_equal(walk_rl_rc(f, "/ix.xml"), RS_EINVALID);
    assert_non_null(strstr(f->err, "/ix.xml"));
    assert_non_null(strstr(f->err, "p2.xml"));
}

static void
serve_index(struct fx *f)
{
    tbs_put(f->src, "/rl.xml", "<sitemapindex " TBS_NS "><rs:md capability="
            "\"resourcelist\" at=\"2025-01-01T00:00:10Z\"/><sitemap><loc>"
            "{B}/rl-1.xml</loc></sitemap><sitemap><loc>{B}/rl-2.xml</loc>"
            "</sitemap></sitemapindex>");
}

/* rldiff/duplicates_loser_304: a resource in two parts of an index; the
 * winner's part drops it while the loser's part answers 304: the
 * resource is still listed (in the loser's part), so it is not deleted -
 * the loser's entry stands now (an update: another hash). Then the
 * winner's part lists it again: it wins again (one update), and never a
 * deletion. */
static void
test_duplicates_loser_304(void **state)
{
    struct fx *f = *state;
    struct res p1[] = { { "x", 3, '3' }, { "a", 1, '1' } };
    struct res p2[] = { { "x", 5, '5' }, { "b", 2, '2' } };
    serve_list(f, "/rl-1.xml", 10, NULL, p1, 2);
    serve_list(f, "/rl-2.xml", 10, NULL, p2, 2);
    serve_index(f);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_true(f->stats.baseline);
    /* the winner's part drops x; the loser's part stands (304) */
    struct res p2b[] = { { "b", 2, '2' } };
    serve_list(f, "/rl-2.xml", 20, NULL, p2b, 1);
    unsigned nm = f->src->not_modified;
    walk_rl(f, "/rl.xml");
    assert_int_equal(f->src->not_modified, nm + 2);   /* index, part 1 */
    commit(f, false);
    const struct got *g = got_of(f, "x");
    if (g != NULL && g->change == RS_CHANGE_DELETED)
        fail_msg("x deleted while the Source still lists it (part 1)");
    assert_int_equal(f->ngot, 1);
    assert_int_equal(got_must(f, "x")->change, RS_CHANGE_UPDATED);
    /* read again as it is: nothing */
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_int_equal(f->ngot, 0);
    /* x back in part 2 (the newer entry): it stands again, once */
    serve_list(f, "/rl-2.xml", 30, NULL, p2, 2);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_int_equal(f->ngot, 1);
    assert_int_equal(got_must(f, "x")->change, RS_CHANGE_UPDATED);
    assert_true(got_must(f, "x")->dt == t_of(5));
    /* and part 2 drops it again: part 1 still stands for its entry */
    serve_list(f, "/rl-2.xml", 40, NULL, p2b, 1);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_int_equal(f->ngot, 1);
    assert_int_equal(got_must(f, "x")->change, RS_CHANGE_UPDATED);
    /* across a restart of the state too: the loser is kept in it */
    close_state(f);
    open_state(f);
    serve_list(f, "/rl-2.xml", 50, NULL, p2, 2);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_int_equal(f->ngot, 1);
    serve_list(f, "/rl-2.xml", 60, NULL, p2b, 1);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_int_equal(f->ngot, 1);
    assert_int_equal(got_must(f, "x")->change, RS_CHANGE_UPDATED);
}

static void
sql_exec(const char *db, const char *sql)
{
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    char *msg = NULL;
    if (sqlite3_exec(h, sql, NULL, NULL, &msg) != SQLITE_OK)
        fail_msg("%s: %s", sql, msg != NULL ? msg : "?");
    sqlite3_close(h);
}

static int64_t
sql_int(const char *db, const char *sql)
{
    sqlite3 *h = NULL;
    sqlite3_stmt *q = NULL;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &q, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(h);
    return v;
}

/* rldiff/schema_2: a state of schema 2 (no feeds.diffed, no rldup) opens
 * and is migrated: a list diffed before is diffed on (no new baseline:
 * its changes are published), its parts read whole once (their
 * documents forgotten, so that the entries losing to another of their
 * loc are learned); the state is schema 3. */
static void
test_schema_2(void **state)
{
    struct fx *f = *state;
    struct res p1[] = { { "x", 3, '3' }, { "a", 1, '1' } };
    struct res p2[] = { { "x", 5, '5' }, { "b", 2, '2' } };
    serve_list(f, "/rl-1.xml", 10, NULL, p1, 2);
    serve_list(f, "/rl-2.xml", 10, NULL, p2, 2);
    serve_index(f);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    close_state(f);
    /* what a schema-2 bridge left */
    sql_exec(f->db, "DROP TABLE rldup; DROP TABLE rldupwalk; "
             "ALTER TABLE feeds DROP COLUMN diffed; PRAGMA user_version=2;");
    open_state(f);
    assert_int_equal(sql_int(f->db, "PRAGMA user_version"), 3);
    assert_int_equal(sql_int(f->db, "SELECT count(*) FROM docs"), 0);
    /* part 2 drops x: read whole, part 1's x stands; c created */
    struct res p2b[] = { { "b", 2, '2' }, { "c", 7, '7' } };
    serve_list(f, "/rl-2.xml", 20, NULL, p2b, 2);
    unsigned nm = f->src->not_modified;
    walk_rl(f, "/rl.xml");
    assert_int_equal(f->src->not_modified, nm);
    commit(f, false);
    assert_false(f->stats.baseline);
    assert_int_equal(f->ngot, 2);
    assert_int_equal(got_must(f, "c")->change, RS_CHANGE_CREATED);
    assert_int_equal(got_must(f, "x")->change, RS_CHANGE_UPDATED);
}

/* rldiff/bad_entry_holds: a Resource List with a malformed entry (a raw
 * space in B's <loc>) is read, not failed, but it is a list with a hole:
 * the resources it does not list (B, whose entry was skipped, and C)
 * are not deleted - held in the state - while its other changes go out;
 * a read with the hole still there (the list re-read whole, not a 304)
 * holds them again; a complete read without B and C deletes both. */
static void
test_bad_entry_holds(void **state)
{
    struct fx *f = *state;
    struct res v1[] = { { "a", 1, '1' }, { "b", 2, '2' }, { "c", 3, '3' } };
    serve_list(f, "/rl.xml", 10, NULL, v1, 3);
    walk_rl(f, "/rl.xml");
    commit(f, false);
    assert_true(f->stats.baseline);
    struct res v2[] = { { "a", 5, '9' }, { "b d", 2, '2' } };
    serve_list(f, "/rl.xml", 20, NULL, v2, 2);
    if (walk_rl_rc(f, "/rl.xml") != 0)
        fail_msg("a bad entry failed the walk: %s", f->err);
    assert_int_equal(f->wr.skipped, 1);
    assert_false(rldiff_needs_checks(&f->feed, &f->wr));
    commit(f, false);
    assert_int_equal(f->ngot, 1);
    assert_int_equal(got_must(f, "a")->change, RS_CHANGE_UPDATED);
    assert_null(got_of(f, "b"));
    assert_null(got_of(f, "c"));
    assert_int_equal(f->stats.deleted, 0);
    assert_int_equal(f->stats.held, 2);
    /* the same list again: read whole (no 304 standing for a hole), held */
    unsigned nm = f->src->not_modified;
    walk_rl(f, "/rl.xml");
    assert_int_equal(f->src->not_modified, nm);
    assert_int_equal(f->wr.skipped, 1);
    commit(f, false);
    assert_int_equal(f->ngot, 0);
    assert_int_equal(f->stats.held, 2);
    /* complete, without B and C: both deleted */
    struct res v3[] = { { "a", 5, '9' } };
    serve_list(f, "/rl.xml", 30, NULL, v3, 1);
    walk_rl(f, "/rl.xml");
    assert_int_equal(f->wr.skipped, 0);
    commit(f, false);
    assert_int_equal(f->ngot, 2);
    assert_int_equal(got_must(f, "b")->change, RS_CHANGE_DELETED);
    assert_int_equal(got_must(f, "c")->change, RS_CHANGE_DELETED);
    assert_null(got_of(f, "a"));
}

/* rldiff/bad_entry_index: a hole in one part of an index holds what a
 * part read whole without it no longer lists (no part answering 304 then
 * carries it as listed: the next complete walk deletes it); an index
 * whose own child entry cannot be read fails the walk, as before. */
static void
test_bad_entry_index(void **state)
{
    struct fx *f = *state;
    struct res p1[] = { { "a", 1, '1' }, { "b", 2, '2' } };
    struct res p2[] = { { "c", 3, '3' }, { "d", 4, '4' } };
    serve_list(f, "/rl-1.xml", 10, NULL, p1, 2);
    serve_list(f, "/rl-2.xml", 10, NULL, p2, 2);
    tbs_put(f->src, "/rl.xml", "<sitemapindex " TBS_NS "><rs:md capability="
            "\"resourcelist\" at=\"2025-01-01T00:00:10Z\"/><sitemap><loc>"
            "{B}/rl-1.xml</loc></sitemap><sitemap><loc>{B}/rl-2.xml</loc>"
            "</sitemap></sitemapindex>");
    walk_rl(f, "/rl.xml");
    commit(f, false);
    /* part 1: b malformed; part 2: d gone */
    struct res p1b[] = { { "a", 1, '1' }, { "b b", 2, '2' } };
    struct res p2b[] = { { "c", 3, '3' } };
    serve_list(f, "/rl-1.xml", 20, NULL, p1b, 2);
    serve_list(f, "/rl-2.xml", 20, NULL, p2b, 1);
    walk_rl(f, "/rl.xml");
    assert_int_equal(f->wr.skipped, 1);
    assert_false(rldiff_needs_checks(&f->feed, &f->wr));
    commit(f, false);
    assert_int_equal(f->ngot, 0);
    assert_int_equal(f->stats.held, 2);
    /* part 1 fixed, part 2 answers 304: d is not carried, it is gone */
    serve_list(f, "/rl-1.xml", 30, NULL, p1, 2);
    walk_rl(f, "/rl.xml");
    assert_int_equal(f->wr.skipped, 0);
    commit(f, false);
    assert_int_equal(f->ngot, 1);
    assert_int_equal(got_must(f, "d")->change, RS_CHANGE_DELETED);
    /* an index child that cannot be read: the walk fails */
    tbs_put(f->src, "/rl.xml", "<sitemapindex " TBS_NS "><rs:md capability="
            "\"resourcelist\" at=\"2025-01-01T00:00:40Z\"/><sitemap><loc>"
            "{B}/rl-1.xml</loc></sitemap><sitemap><loc>{B}/rl 2.xml</loc>"
            "</sitemap></sitemapindex>");
    assert_int_not_equal(walk_rl_rc(f, "/rl.xml"), 0);
    assert_non_null(strstr(f->err, "rl.xml"));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_index, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicates_index, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_next_unresolved, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_duplicates_loser_304, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_schema_2, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_entry_holds, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bad_entry_index, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
