/* test_bridge_clscan.c - rsbridge's change detection from Change Lists
 * (bridge/clscan.c, through bridge/walk.c and bridge/reader.c): real
 * walks over loopback of a programmable Source (test_bridge_src.h) into a
 * real SQLite state. Every Source shape: a Change List Index over closed
 * and open lists, a trailing window paged with ?page=N and regenerated on
 * every request (read from its tail, entries moving under the reader),
 * lists rewritten in place; history rewritten, entries lost, a window
 * shrunk; a feed replacing another (taken over from its position);
 * exactly once across a restart of the state and a walk that never
 * committed; a malformed entry skipped, not the list. */
#include "testutil.h"

#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clscan.h"
#include "reader.h"
#include "rs_http.h"
#include "rs_time.h"
#include "store.h"
#include "test_bridge_src.h"
#include "tu_httpd.h"
#include "walk.h"

#define MAXGOT 512

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
    struct clscan *cs;
    struct store_feed feed;
    bool done, staging;
    int rc;
    char err[700];
    struct walk_result wr;
    struct got got[MAXGOT];
    size_t ngot;
    struct got fw[64];
    size_t nfw;
    struct clscan_stats stats;
    /* the Source's trailing window: entries oldest first */
    struct {
        char loc[200];
        char change[16];
        int sec;                 /* datetime: 2025-01-01T00:00:00Z + sec */
        bool hidden;
    } e[200];
    size_t ne;
    int from_sec;                /* the window's declared `from` */
    size_t page;                 /* entries a page */
    int drop_on_tail;            /* hook: entries to drop when the tail
                                    page is asked for, once */
    char tail_key[64];
};

static void
dt_of(int sec, char *buf)
{
    assert_true(rs_time_format(1735689600LL * 1000000 + (rs_time_t)sec *
                               1000000, buf) > 0);
}

/* ---------------------------------------------------- the walk harness */

static int
on_entry(void *ud, const struct walk_doc *d, size_t idx,
         const struct rs_entry *e, const char *loc)
{
    struct fx *f = ud;
    if (!f->staging) {
        assert_int_equal(store_begin(f->st), 0);
        f->staging = true;
    }
    return clscan_entry(f->cs, d, idx, e, loc);
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
    (void)not_modified;
    close_staging(f);
    return clscan_doc(f->cs, d);
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
    assert_true(f->ngot < MAXGOT);
    struct got *g = &f->got[f->ngot++];
    snprintf(g->loc, sizeof(g->loc), "%s", c->loc);
    g->change = (int)c->change;
    g->dt = c->datetime;
    return 0;
}

static int
hook_framework(void *ud, enum rs_change change, const char *loc)
{
    struct fx *f = ud;
    assert_true(f->nfw < 64);
    struct got *g = &f->fw[f->nfw++];
    snprintf(g->loc, sizeof(g->loc), "%s", loc);
    g->change = (int)change;
    return 0;
}

/* Walk the feed at key, one that replaces prev (NULL: none); commit
 * when asked. Returns the walk's rc. */
static int
walk_feed_as(struct fx *f, const char *key, bool commit,
             const struct store_feed *prev)
{
    const char *url = tbs_url(f->src, key);
    assert_int_equal(store_feed_get(f->st, 1, STORE_FEED_CHANGES, url, 0,
                                    &f->feed), 0);
    clscan_begin(f->cs, f->feed.id);
    if (prev != NULL)
        clscan_replaces(f->cs, prev, false);
    f->done = false;
    assert_int_equal(walk_start(f->w, f->feed.id, url), 0);
    TU_LOOP_UNTIL(&f->l, f->done, 10000);
    if (f->rc != 0 || !commit)
        return f->rc;
    struct clscan_hooks h = { hook_change, hook_framework, f };
    assert_int_equal(clscan_commit(f->cs, &f->feed, &f->wr, rs_time_now(),
                                   &h, &f->stats), 0);
    return 0;
}

/* Walk the feed at key; commit when asked. Returns the walk's rc. */
static int
walk_feed(struct fx *f, const char *key, bool commit)
{
    return walk_feed_as(f, key, commit, NULL);
}

static void
open_state(struct fx *f)
{
    char err[256];
    assert_int_equal(store_open(f->db, &f->st, err, sizeof(err)), 0);
    f->cs = clscan_new(f->st);
    assert_non_null(f->cs);
    struct reader_opts ro = { .base = f->l.base, .http = f->http };
    f->rd = reader_new(&ro);
    assert_non_null(f->rd);
    struct walk_opts wo = {
        .base = f->l.base,
        .rd = f->rd,
        .st = f->st,
        .tail_first = true,
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
    assert_int_equal(id, 1);
}

static void
close_state(struct fx *f)
{
    walk_free(f->w);
    reader_free(f->rd);
    clscan_free(f->cs);
    store_free(f->st);
    f->w = NULL;
    f->rd = NULL;
    f->cs = NULL;
    f->st = NULL;
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
    f->page = 3;
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

/* ----------------------------------------- the trailing-window Source */

static void
win_add(struct fx *f, const char *name, const char *change, int sec)
{
    assert_true(f->ne < 200);
    snprintf(f->e[f->ne].loc, sizeof(f->e[0].loc), "%s/data/%s",
             f->src->origin, name);
    snprintf(f->e[f->ne].change, sizeof(f->e[0].change), "%s", change);
    f->e[f->ne].sec = sec;
    f->e[f->ne].hidden = false;
    f->ne++;
}

/* The window as pages of f->page entries, regenerated: /cl.xml is the
 * first, /cl.xml?page=N the others, each with from, until, next. */
static void
win_serve(struct fx *f)
{
    size_t vis[200], n = 0;
    for (size_t i = 0; i < f->ne; i++)
        if (!f->e[i].hidden)
            vis[n++] = i;
    size_t npages = n == 0 ? 1 : (n + f->page - 1) / f->page;
    for (size_t k = npages + 1; k < 40; k++) {
        char key[64];
        snprintf(key, sizeof(key), "/cl.xml?page=%zu", k);
        tbs_drop(f->src, key);
    }
    char from[RS_TIME_BUFSZ], until[RS_TIME_BUFSZ];
    dt_of(f->from_sec, from);
    dt_of(100000, until);
    for (size_t k = 1; k <= npages; k++) {
        static char body[65536];
        size_t off = (size_t)snprintf(body, sizeof(body),
                                      "<urlset " TBS_NS "><rs:md "
                                      "capability=\"changelist\" from=\"%s\" "
                                      "until=\"%s\"/>", from, until);
        if (k < npages)
            off += (size_t)snprintf(body + off, sizeof(body) - off,
                                    "<rs:ln rel=\"next\" href=\"{B}/cl.xml"
                                    "?page=%zu\"/>", k + 1);
        for (size_t j = (k - 1) * f->page; j < n && j < k * f->page; j++) {
            char dt[RS_TIME_BUFSZ], ent[1024];
            dt_of(f->e[vis[j]].sec, dt);
            tbs_change(ent, sizeof(ent), f->e[vis[j]].loc,
                       f->e[vis[j]].change, dt);
            off += (size_t)snprintf(body + off, sizeof(body) - off, "%s",
                                    ent);
        }
        snprintf(body + off, sizeof(body) - off, "</urlset>");
        char key[64];
        if (k == 1)
            snprintf(key, sizeof(key), "/cl.xml");
        else
            snprintf(key, sizeof(key), "/cl.xml?page=%zu", k);
        tbs_put(f->src, key, body);
    }
}

static bool
got_has(const struct fx *f, const char *name, int sec)
{
    char loc[200];
    snprintf(loc, sizeof(loc), "%s/data/%s", f->src->origin, name);
    rs_time_t dt = 1735689600LL * 1000000 + (rs_time_t)sec * 1000000;
    for (size_t i = 0; i < f->ngot; i++)
        if (strcmp(f->got[i].loc, loc) == 0 && f->got[i].dt == dt)
            return true;
    return false;
}

/* Published each once, in datetime order. */
static void
assert_once_in_order(const struct fx *f)
{
    for (size_t i = 1; i < f->ngot; i++) {
        assert_true(f->got[i - 1].dt <= f->got[i].dt);
        for (size_t j = 0; j < i; j++)
            assert_false(strcmp(f->got[i].loc, f->got[j].loc) == 0 &&
                         f->got[i].dt == f->got[j].dt);
    }
}

/* ------------------------------------------------------------- tests */

/* clscan/index: an index over a closed and an open list; the first walk
 * is the baseline; then new entries in the open list and a new list are
 * published in datetime order across lists, the new list is told, and
 * the closed list costs a 304. */
static void
test_index(void **state)
{
    struct fx *f = *state;
    char a[512], b[512], c[512], d[512], e[512], dt[5][RS_TIME_BUFSZ];
    for (int i = 0; i < 5; i++)
        dt_of(i * 10, dt[i]);
    tbs_change(a, sizeof(a), "{B}/data/a", "created", dt[0]);
    tbs_change(b, sizeof(b), "{B}/data/b", "created", dt[1]);
    tbs_change(c, sizeof(c), "{B}/data/c", "created", dt[2]);
    tbs_putf(f->src, "/cl1.xml", "<urlset " TBS_NS "><rs:md capability="
             "\"changelist\" from=\"%s\" until=\"%s\"/>%s%s</urlset>", dt[0],
             dt[1], a, b);
    tbs_putf(f->src, "/cl2.xml", "<urlset " TBS_NS "><rs:md capability="
             "\"changelist\" from=\"%s\"/>%s</urlset>", dt[1], c);
    tbs_putf(f->src, "/idx.xml", "<sitemapindex " TBS_NS "><rs:md "
             "capability=\"changelist\" from=\"%s\"/><sitemap><loc>{B}/cl1.xml"
             "</loc><rs:md capability=\"changelist\" from=\"%s\" until=\"%s\"/>"
             "</sitemap><sitemap><loc>{B}/cl2.xml</loc><rs:md capability="
             "\"changelist\" from=\"%s\"/></sitemap></sitemapindex>", dt[0],
             dt[0], dt[1], dt[1]);
    assert_int_equal(walk_feed(f, "/idx.xml", true), 0);
    assert_true(f->stats.baseline);
    assert_int_equal(f->ngot, 0);
    assert_int_equal(f->nfw, 0);
    assert_int_equal(f->stats.staged, 3);

    /* the open list gains one, a new list holds another, older than it */
    char x[1100];
    dt_of(25, dt[3]);
    dt_of(40, dt[4]);
    tbs_change(d, sizeof(d), "{B}/data/d", "updated", dt[4]);
    tbs_change(e, sizeof(e), "{B}/data/e", "deleted", dt[3]);
    snprintf(x, sizeof(x), "%s%s", c, e);
    tbs_putf(f->src, "/cl2.xml", "<urlset " TBS_NS "><rs:md capability="
             "\"changelist\" from=\"%s\" until=\"%s\"/>%s</urlset>", dt[1],
             dt[3], x);
    tbs_putf(f->src, "/cl3.xml", "<urlset " TBS_NS "><rs:md capability="
             "\"changelist\" from=\"%s\"/>%s</urlset>", dt[3], d);
    tbs_putf(f->src, "/idx.xml", "<sitemapindex " TBS_NS "><rs:md "
             "capability=\"changelist\" from=\"%s\"/><sitemap><loc>{B}/cl1.xml"
             "</loc><rs:md capability=\"changelist\" from=\"%s\" until=\"%s\"/>"
             "</sitemap><sitemap><loc>{B}/cl2.xml</loc><rs:md capability="
             "\"changelist\" from=\"%s\" until=\"%s\"/></sitemap><sitemap>"
             "<loc>{B}/cl3.xml</loc><rs:md capability=\"changelist\" from="
             "\"%s\"/></sitemap></sitemapindex>", dt[0], dt[0], dt[1], dt[1],
             dt[3], dt[3]);
    unsigned nm = f->src->not_modified;
    assert_int_equal(walk_feed(f, "/idx.xml", true), 0);
    assert_false(f->stats.baseline);
    assert_int_equal(f->ngot, 2);
    assert_true(got_has(f, "e", 25));          /* in datetime order */
    assert_true(got_has(f, "d", 40));
    assert_true(f->got[0].dt < f->got[1].dt);
    assert_int_equal(f->got[0].change, RS_CHANGE_DELETED);
    assert_int_equal(f->nfw, 1);                /* the new list, told */
    assert_int_equal(f->fw[0].change, RS_CHANGE_CREATED);
    assert_string_equal(f->fw[0].loc, tbs_url(f->src, "/cl3.xml"));
    assert_int_equal(f->src->not_modified, nm + 1);   /* cl1 */
    assert_int_equal(f->stats.rewritten + f->stats.lost, 0);

    /* nothing new: everything costs a 304, nothing is published */
    f->ngot = f->nfw = 0;
    nm = f->src->not_modified;
    assert_int_equal(walk_feed(f, "/idx.xml", true), 0);
    assert_int_equal(f->ngot, 0);
    assert_int_equal(f->src->not_modified, nm + 4);
}

/* clscan/tail_first: a paged trailing window read from its last page the
 * second time on: the first page, then the last known, the new pages,
 * the pages between backwards; what is new is published once, in
 * order. */
static void
test_tail_first(void **state)
{
    struct fx *f = *state;
    for (int i = 0; i < 7; i++) {
        char n[16];
        snprintf(n, sizeof(n), "r%d", i);
        win_add(f, n, "created", i);
    }
    win_serve(f);                        /* pages 1..3 */
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_true(f->stats.baseline);
    for (int i = 7; i < 12; i++) {
        char n[16];
        snprintf(n, sizeof(n), "r%d", i);
        win_add(f, n, i % 2 ? "updated" : "created", i);
    }
    win_serve(f);                        /* pages 1..4 */
    size_t first = f->src->nlog;
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    const char *want[] = { "GET /cl.xml", "GET /cl.xml?page=3",
                           "GET /cl.xml?page=4", "GET /cl.xml?page=2" };
    assert_int_equal(f->src->nlog - first, 4);
    for (size_t i = 0; i < 4; i++)
        assert_string_equal(f->src->log[first + i], want[i]);
    assert_int_equal(f->ngot, 5);
    for (int i = 7; i < 12; i++) {
        char n[16];
        snprintf(n, sizeof(n), "r%d", i);
        assert_true(got_has(f, n, i));
    }
    assert_once_in_order(f);
    assert_int_equal(f->stats.rewritten + f->stats.lost + f->stats.late, 0);
}

/* Drop the oldest entries when the tail page is asked for (once): every
 * later page's entries move towards the first page under the reader. */
static void
hook_drop(struct tbs *s, const char *key, void *ud)
{
    struct fx *f = ud;
    (void)s;
    if (f->drop_on_tail == 0 || strcmp(key, f->tail_key) != 0)
        return;
    for (size_t i = 0; i < f->ne && f->drop_on_tail > 0; i++)
        if (!f->e[i].hidden) {
            f->e[i].hidden = true;
            f->drop_on_tail--;
        }
    f->from_sec = 3;
    win_serve(f);
}

/* clscan/moving_under_the_reader: while the tail-first walk runs, the
 * window drops its oldest entries, so every page's entries move one
 * page towards the first: read backwards, no new entry slips past, and
 * the dropped ones fell out of the window (not lost). */
static void
test_moving(void **state)
{
    struct fx *f = *state;
    for (int i = 0; i < 9; i++) {
        char n[16];
        snprintf(n, sizeof(n), "m%d", i);
        win_add(f, n, "created", i);
    }
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);      /* baseline */
    for (int i = 9; i < 17; i++) {
        char n[16];
        snprintf(n, sizeof(n), "m%d", i);
        win_add(f, n, "updated", i);
    }
    win_serve(f);
    f->src->hook = hook_drop;
    f->src->hook_ud = f;
    f->drop_on_tail = 3;
    snprintf(f->tail_key, sizeof(f->tail_key), "/cl.xml?page=3");
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->ngot, 8);
    for (int i = 9; i < 17; i++) {
        char n[16];
        snprintf(n, sizeof(n), "m%d", i);
        assert_true(got_has(f, n, i));
    }
    assert_once_in_order(f);
    assert_int_equal(f->stats.lost + f->stats.rewritten, 0);
    /* again: nothing new, nothing twice */
    f->ngot = 0;
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->ngot, 0);
    assert_int_equal(f->stats.lost + f->stats.rewritten, 0);
}

/* clscan/late_in_a_forward_span: a forward walk (pages not known yet)
 * misses a new entry that moved onto a page it had read; the next walk
 * finds it older than the position but inside the span the forward walk
 * could miss: published then, once (not refused as rewritten). */
static void
test_late(void **state)
{
    struct fx *f = *state;
    f->page = 3;
    win_add(f, "q0", "created", 0);
    win_serve(f);                                   /* one page */
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    for (int i = 1; i < 9; i++) {
        char n[16];
        snprintf(n, sizeof(n), "q%d", i);
        win_add(f, n, "created", i);
    }
    win_serve(f);                                   /* three pages */
    /* when page 3 is asked for, the oldest leaves: q6, the first of page
     * 3, moves onto page 2, already read */
    f->src->hook = hook_drop;
    f->src->hook_ud = f;
    f->drop_on_tail = 1;
    snprintf(f->tail_key, sizeof(f->tail_key), "/cl.xml?page=3");
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->ngot, 7);
    assert_false(got_has(f, "q6", 6));
    f->src->hook = NULL;
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->ngot, 8);
    assert_true(got_has(f, "q6", 6));
    assert_int_equal(f->stats.late, 1);
    assert_int_equal(f->stats.rewritten, 0);
    /* once */
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->ngot, 8);
}

/* clscan/rewritten_history: an entry older than what was published that
 * was never seen is refused (not published), counted and told; entries
 * lost (gone while the window covers them) are counted and told; a
 * resource's entry replaced by a newer one (a list of last changes) is
 * not a loss. */
static void
test_rewritten(void **state)
{
    struct fx *f = *state;
    f->page = 50;
    for (int i = 0; i < 5; i++) {
        char n[16];
        snprintf(n, sizeof(n), "h%d", i);
        win_add(f, n, "created", i * 10);
    }
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    win_add(f, "h5", "created", 50);
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->ngot, 1);
    /* backdated among old ones */
    f->ngot = f->nfw = 0;
    win_add(f, "bogus", "updated", 15);
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->ngot, 0);
    assert_int_equal(f->stats.rewritten, 1);
    assert_int_equal(f->nfw, 1);
    assert_int_equal(f->fw[0].change, RS_CHANGE_UPDATED);
    assert_string_equal(f->fw[0].loc, tbs_url(f->src, "/cl.xml"));
    /* seen once: not told again */
    f->nfw = 0;
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->nfw, 0);
    assert_int_equal(f->stats.rewritten, 0);
    /* a published entry leaves while the window covers it: lost, once
     * two walks missed it (one may miss an entry that moved) */
    f->e[1].hidden = true;
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->stats.lost, 0);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->stats.lost, 1);
    assert_int_equal(f->nfw, 1);
    /* h3's entry replaced by a newer one of the same resource: published,
     * and the old one is no loss */
    f->nfw = f->ngot = 0;
    f->e[3].hidden = true;
    win_add(f, "h3", "updated", 60);
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->ngot, 1);
    assert_true(got_has(f, "h3", 60));
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->stats.lost, 0);
    assert_int_equal(f->nfw, 0);
}

/* The seconds after 2025-01-01 of 2088-05-18: a Source's clock that ran
 * ahead by decades. */
#define FUTURE_SEC 2000000000

/* clscan/future_entry: an entry dated far beyond our clock (a Source's
 * clock that ran ahead) is published, but does not move the position:
 * the real changes after it are published, not refused as history
 * rewritten, also once the Source dropped it. */
static void
test_future_entry(void **state)
{
    struct fx *f = *state;
    f->page = 50;
    for (int i = 0; i < 5; i++) {
        char n[16];
        snprintf(n, sizeof(n), "t%d", i);
        win_add(f, n, "created", i * 10);
    }
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);       /* baseline */
    win_add(f, "ahead", "updated", FUTURE_SEC);
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->ngot, 1);
    assert_true(got_has(f, "ahead", FUTURE_SEC));
    assert_true(f->feed.pos <= rs_time_now() + 60 * 1000000LL);
    /* a real change after it */
    win_add(f, "real", "updated", 50);
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->ngot, 2);
    assert_true(got_has(f, "real", 50));
    assert_int_equal(f->stats.rewritten, 0);
    /* the Source corrects its clock: the bogus entry goes */
    f->e[5].hidden = true;
    win_add(f, "real2", "updated", 60);
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    win_add(f, "real3", "created", 70);
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_true(got_has(f, "real2", 60) && got_has(f, "real3", 70));
    assert_int_equal(f->ngot, 4);
    assert_int_equal(f->stats.rewritten, 0);
}

/* clscan/future_position_recovers: a position already beyond the clock
 * in the state (written before future entries were kept from moving it)
 * is taken back to the newest entry published within the clock: the
 * next change is published, and one refused against the bogus position
 * that is still listed is published too, in order. */
static void
test_future_position(void **state)
{
    struct fx *f = *state;
    f->page = 50;
    for (int i = 0; i < 5; i++) {
        char n[16];
        snprintf(n, sizeof(n), "p%d", i);
        win_add(f, n, "created", i * 10);
    }
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);       /* baseline */
    /* the state as an older bridge left it: the position in 2088, and
     * p45 refused as history rewritten against it */
    f->feed.pos = 1735689600LL * 1000000 + (rs_time_t)FUTURE_SEC * 1000000;
    assert_int_equal(store_feed_put(f->st, &f->feed), 0);
    win_add(f, "p45", "created", 45);
    win_serve(f);
    char loc[200];
    snprintf(loc, sizeof(loc), "%s/data/p45", f->src->origin);
    rs_time_t dt45 = 1735689600LL * 1000000 + 45LL * 1000000;
    static const char sql[] =
        "INSERT INTO seen(feed, key, loc, dt, gen, first_gen, state, doc) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?5, 2, ?6)";
    sqlite3_stmt *q = store_stmt(f->st, sql);
    assert_non_null(q);
    sqlite3_bind_int64(q, 1, f->feed.id);
    sqlite3_bind_int64(q, 2, (int64_t)clscan_key(loc, RS_CHANGE_CREATED,
                                                 dt45));
    sqlite3_bind_text(q, 3, loc, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(q, 4, dt45);
    sqlite3_bind_int64(q, 5, f->feed.gen);
    sqlite3_bind_text(q, 6, tbs_url(f->src, "/cl.xml"), -1, SQLITE_TRANSIENT);
    assert_int_equal(store_exec(f->st, q, "a refused entry"), 0);
    win_add(f, "p50", "updated", 50);
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->stats.rewritten, 0);
    assert_int_equal(f->ngot, 2);
    assert_true(got_has(f, "p45", 45) && got_has(f, "p50", 50));
    assert_once_in_order(f);
    assert_true(f->feed.pos == 1735689600LL * 1000000 + 50LL * 1000000);
    /* and from there as ever */
    win_add(f, "p60", "updated", 60);
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->ngot, 3);
    assert_int_equal(f->stats.rewritten, 0);
}

/* clscan/window_shrunk: a trailing window that moves with the clock drops
 * its oldest entries quietly; one whose `from` jumps further than the
 * time that passed shrank, and what it dropped is lost. */
static void
test_shrunk(void **state)
{
    struct fx *f = *state;
    f->page = 50;
    for (int i = 0; i < 6; i++) {
        char n[16];
        snprintf(n, sizeof(n), "w%d", i);
        win_add(f, n, "created", i * 100);
    }
    f->from_sec = 0;
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    /* the window's from moves 1 s, and the entry before it leaves */
    f->e[0].hidden = true;
    f->from_sec = 1;
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->stats.lost, 0);
    assert_int_equal(f->nfw, 0);
    /* it jumps 300 s at once: shrunk (told when the next walk misses
     * them too) */
    f->e[1].hidden = f->e[2].hidden = true;
    f->from_sec = 301;
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->stats.lost, 0);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->stats.lost, 2);
    assert_int_equal(f->nfw, 1);
    assert_int_equal(f->ngot, 0);
}

/* clscan/exactly_once_across_restarts: a walk that never committed (the
 * process died) leaves nothing behind, and the next process publishes
 * its changes once; a committed walk read again by a new process
 * publishes nothing. */
static void
test_restart(void **state)
{
    struct fx *f = *state;
    f->page = 4;
    for (int i = 0; i < 6; i++) {
        char n[16];
        snprintf(n, sizeof(n), "k%d", i);
        win_add(f, n, "created", i);
    }
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    for (int i = 6; i < 10; i++) {
        char n[16];
        snprintf(n, sizeof(n), "k%d", i);
        win_add(f, n, "updated", i);
    }
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", false), 0);   /* staged only */
    close_state(f);                                          /* "kill -9" */
    open_state(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->ngot, 4);
    assert_once_in_order(f);
    close_state(f);
    open_state(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->ngot, 4);
    assert_int_equal(f->stats.rewritten + f->stats.lost, 0);
}

/* clscan/a_walk_that_fails_commits_nothing: a page answering 503 fails
 * the walk; nothing is published until a walk completes. */
static void
test_failed_walk(void **state)
{
    struct fx *f = *state;
    f->page = 2;
    for (int i = 0; i < 4; i++) {
        char n[16];
        snprintf(n, sizeof(n), "z%d", i);
        win_add(f, n, "created", i);
    }
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    win_add(f, "z4", "created", 4);
    win_add(f, "z5", "created", 5);
    win_serve(f);
    tbs_status(f->src, "/cl.xml?page=3", 503, "Retry-After: 7\n");
    assert_int_equal(walk_feed(f, "/cl.xml", true), RS_EPROTO);
    assert_int_equal(f->wr.status, 503);
    assert_int_equal(f->wr.retry_after_ms, 7000);
    tbs_status(f->src, "/cl.xml?page=3", 0, NULL);
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->ngot, 2);
    assert_true(got_has(f, "z4", 4) && got_has(f, "z5", 5));
}

/* clscan/next_unresolved: a Change List page whose rel="next" href is not
 * an http(s) URL fails the walk (the page and the href named), first walk
 * or a known chain's: a walk read short must not look complete. */
static void
test_next_unresolved(void **state)
{
    struct fx *f = *state;
    f->page = 2;
    for (int i = 0; i < 5; i++) {
        char n[16];
        snprintf(n, sizeof(n), "n%d", i);
        win_add(f, n, "created", i);
    }
    win_serve(f);
    /* page 2 links to a next page no client can ask for */
    struct tbs_doc *d = tbs_find(f->src, "/cl.xml?page=2");
    assert_non_null(d);
    char *p = d != NULL ? strstr(d->body, "/cl.xml?page=3") : NULL;
    assert_non_null(p);
    char *q = d != NULL ? strstr(d->body, "href=\"") : NULL;
    assert_non_null(q);
    if (d == NULL || p == NULL || q == NULL)
        return;      /* failed above; the optimiser cannot know that */
    char body[8192];
    snprintf(body, sizeof(body), "%.*shref=\"http://bad host/cl.xml?page=3%s",
             (int)(q - d->body), d->body, p + strlen("/cl.xml?page=3"));
    tbs_put(f->src, "/cl.xml?page=2", body);
    int rc = walk_feed(f, "/cl.xml", false);
    assert_int_equal(rc, RS_EINVALID);
    assert_non_null(strstr(f->err, "/cl.xml?page=2"));
    assert_non_null(strstr(f->err, "bad host"));
    /* served whole again: the baseline, then a chain known (tail first) */
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_true(f->stats.baseline);
    tbs_put(f->src, "/cl.xml?page=2", body);
    assert_int_equal(walk_feed(f, "/cl.xml", true), RS_EINVALID);
    assert_non_null(strstr(f->err, "bad host"));
}

/* clscan/key: an entry's identity is its loc, change and datetime. */
static void
test_key(void **state)
{
    (void)state;
    uint64_t a = clscan_key("http://x/a", RS_CHANGE_CREATED, 1);
    assert_true(a == clscan_key("http://x/a", RS_CHANGE_CREATED, 1));
    assert_true(a != clscan_key("http://x/a", RS_CHANGE_UPDATED, 1));
    assert_true(a != clscan_key("http://x/a", RS_CHANGE_CREATED, 2));
    assert_true(a != clscan_key("http://x/b", RS_CHANGE_CREATED, 1));
    clscan_free(NULL);
}

/* store/checkpointer: the store's WAL is checkpointed by a thread of its
 * own (rs_sqlckpt, as rssub's ledger: 1000 frames committed wake it),
 * not by commits on the loop every poller waits on; the thread blocks
 * signals. */
static void
test_store_checkpointer(void **state)
{
    struct fx *f = *state;
    struct stat st;
    int others = 0;

    assert_true(store_checkpointing(f->st));
    assert_int_equal(store_begin(f->st), 0);
    assert_int_equal(store_exec_sql(f->st, "CREATE TABLE bulk(b BLOB); "
                     "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
                     "FROM n WHERE i < 6000) INSERT INTO bulk "
                     "SELECT randomblob(1000) FROM n"), 0);
    assert_int_equal(store_commit(f->st), 0);
    for (int i = 0; i < 300; i++) {
        assert_int_equal(stat(f->db, &st), 0);
        if (st.st_size > 4 * 1024 * 1024)
            break;
        usleep(10000);
    }
    assert_true(st.st_size > 4 * 1024 * 1024);   /* checkpointed */
    assert_int_equal(tu_threads_unblocked(SIGTERM, &others), 0);
    assert_true(others >= 1);
}

/* A plain Change List at key declaring from T0 + from_sec: each of
 * names (NULL-ended) created at the second of secs. */
static void
cl_serve(struct fx *f, const char *key, int from_sec,
         const char *const *names, const int *secs)
{
    static char body[16384];
    char from[RS_TIME_BUFSZ];
    dt_of(from_sec, from);
    size_t off = (size_t)snprintf(body, sizeof(body), "<urlset " TBS_NS
                                  "><rs:md capability=\"changelist\" "
                                  "from=\"%s\"/>", from);
    for (size_t i = 0; names[i] != NULL; i++) {
        char dt[RS_TIME_BUFSZ], loc[256], ent[1024];
        dt_of(secs[i], dt);
        snprintf(loc, sizeof(loc), "%s/data/%s", f->src->origin, names[i]);
        tbs_change(ent, sizeof(ent), loc, "created", dt);
        off += (size_t)snprintf(body + off, sizeof(body) - off, "%s", ent);
    }
    snprintf(body + off, sizeof(body) - off, "</urlset>");
    tbs_put(f->src, key, body);
}

static int
seen_rows(struct fx *f, int64_t feed)
{
    sqlite3_stmt *q = store_stmt(f->st, "SELECT (SELECT count(*) FROM seen "
                                 "WHERE feed = ?1) + (SELECT count(*) FROM "
                                 "docs WHERE feed = ?1)");
    assert_non_null(q);
    sqlite3_bind_int64(q, 1, feed);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    int n = sqlite3_column_int(q, 0);
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return n;
}

/* clscan/replaced: a feed replacing another (a Capability List that names
 * another Change List) is no baseline: what the old one had is taken as
 * it took it (published, or refused as history rewritten: not told
 * again), what it did not have is published from its position on (at
 * exactly it too); older, within its window, history rewritten; below
 * its window, taken silently. The old feed's rows go. A new list whose
 * window begins after the position cannot tell what changed between:
 * said (unsure, "updated"), what it has published. */
static void
test_replaced(void **state)
{
    struct fx *f = *state;
    f->page = 50;
    f->from_sec = 10;
    win_add(f, "a", "created", 10);
    win_add(f, "b", "created", 20);
    win_add(f, "c", "created", 30);
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_true(f->stats.baseline);
    win_add(f, "d", "created", 40);
    win_add(f, "bogus", "created", 25);
    win_serve(f);
    f->nfw = 0;
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->ngot, 1);
    assert_int_equal(f->stats.rewritten, 1);     /* bogus: refused */
    struct store_feed *old = malloc(sizeof(*old));
    assert_non_null(old);
    *old = f->feed;
    assert_true(old->pos == 1735689600LL * 1000000 + 40LL * 1000000);

    static const char *const n2[] = { "old", "a", "mid", "bogus", "d", "e",
                                      "g", NULL };
    static const int s2[] = { 5, 10, 15, 25, 40, 40, 50 };
    cl_serve(f, "/cl2.xml", 5, n2, s2);
    f->ngot = f->nfw = 0;
    assert_int_equal(walk_feed_as(f, "/cl2.xml", true, old), 0);
    assert_false(f->stats.baseline);
    assert_true(f->stats.replaced);
    assert_false(f->stats.unsure);
    assert_int_equal(f->ngot, 2);
    assert_true(got_has(f, "e", 40));
    assert_true(got_has(f, "g", 50));
    assert_int_equal(f->stats.rewritten, 1);     /* mid */
    assert_int_equal(f->nfw, 1);
    assert_int_equal(f->fw[0].change, RS_CHANGE_UPDATED);
    assert_string_equal(f->fw[0].loc, tbs_url(f->src, "/cl2.xml"));
    assert_int_equal(seen_rows(f, old->id), 0);
    struct store_feed *cl2 = malloc(sizeof(*cl2));
    assert_non_null(cl2);
    *cl2 = f->feed;
    assert_true(cl2->pos == 1735689600LL * 1000000 + 50LL * 1000000);

    /* its next walk: an ordinary one */
    f->ngot = f->nfw = 0;
    assert_int_equal(walk_feed(f, "/cl2.xml", true), 0);
    assert_false(f->stats.replaced);
    assert_int_equal(f->ngot + f->nfw, 0);

    /* replaced by a list whose window begins after the position */
    static const char *const n3[] = { "h", NULL };
    static const int s3[] = { 70 };
    cl_serve(f, "/cl3.xml", 60, n3, s3);
    assert_int_equal(walk_feed_as(f, "/cl3.xml", true, cl2), 0);
    assert_true(f->stats.replaced);
    assert_true(f->stats.unsure);
    assert_int_equal(f->ngot, 1);
    assert_true(got_has(f, "h", 70));
    assert_int_equal(f->nfw, 1);
    assert_string_equal(f->fw[0].loc, tbs_url(f->src, "/cl3.xml"));
    free(old);
    free(cl2);
}

/* clscan/bad_entry: a Change List with a malformed entry (a raw space in
 * its <loc>) among good ones is read, not failed: the good ones are
 * published, the bad one is not, the position moves past it. An entry
 * seen before that turns malformed is no vanished entry: not lost, not
 * told, and its neighbours are not published again; fixed, it is the
 * entry it was (nothing published). An index whose child cannot be read
 * still fails the walk. */
static void
test_bad_entry(void **state)
{
    struct fx *f = *state;
    f->page = 50;
    win_add(f, "g0", "created", 0);
    win_add(f, "g1", "created", 10);
    win_add(f, "g2", "created", 20);
    win_serve(f);
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_true(f->stats.baseline);
    f->ngot = f->nfw = 0;
    win_add(f, "n1", "created", 30);
    win_add(f, "ba d", "updated", 40);
    win_add(f, "n2", "created", 50);
    win_serve(f);
    if (walk_feed(f, "/cl.xml", true) != 0)
        fail_msg("a bad entry failed the walk: %s", f->err);
    assert_int_equal(f->wr.skipped, 1);
    assert_int_equal(f->ngot, 2);
    assert_true(got_has(f, "n1", 30));
    assert_true(got_has(f, "n2", 50));
    assert_int_equal(f->nfw, 0);
    assert_true(f->feed.pos ==
                1735689600LL * 1000000 + (rs_time_t)50 * 1000000);
    /* g1, seen and published, turns malformed: two walks (what judges an
     * entry lost) say nothing, publish nothing */
    char good[200];
    snprintf(good, sizeof(good), "%s", f->e[1].loc);
    snprintf(f->e[1].loc, sizeof(f->e[1].loc), "%s/data/g 1",
             f->src->origin);
    win_serve(f);
    for (int i = 0; i < 2; i++) {
        f->ngot = f->nfw = 0;
        assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
        assert_int_equal(f->wr.skipped, 2);
        assert_int_equal(f->ngot, 0);
        assert_int_equal(f->nfw, 0);
        assert_int_equal(f->stats.lost, 0);
        assert_int_equal(f->stats.rewritten, 0);
    }
    /* fixed: the entry it was, nothing new */
    snprintf(f->e[1].loc, sizeof(f->e[1].loc), "%s", good);
    win_serve(f);
    f->ngot = f->nfw = 0;
    assert_int_equal(walk_feed(f, "/cl.xml", true), 0);
    assert_int_equal(f->wr.skipped, 1);
    assert_int_equal(f->ngot, 0);
    assert_int_equal(f->nfw, 0);
    assert_int_equal(f->stats.lost, 0);
    /* an index's child that cannot be read fails the walk, as before */
    char dt[RS_TIME_BUFSZ];
    dt_of(0, dt);
    tbs_putf(f->src, "/cli.xml", "<sitemapindex " TBS_NS "><rs:md "
             "capability=\"changelist\" from=\"%s\"/><sitemap><loc>"
             "{B}/cl.xml</loc></sitemap><sitemap><loc>{B}/c l2.xml</loc>"
             "</sitemap></sitemapindex>", dt);
    assert_int_not_equal(walk_feed(f, "/cli.xml", false), 0);
    assert_non_null(strstr(f->err, "cli.xml"));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key),
        cmocka_unit_test_setup_teardown(test_store_checkpointer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_index, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tail_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_moving, setup, teardown),
        cmocka_unit_test_setup_teardown(test_late, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rewritten, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shrunk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_future_entry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_future_position, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_replaced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_walk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_next_unresolved, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bad_entry, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
