/* test_docwalk.c - client/docwalk.c (streamed walks over
 * ResourceSync documents) against a real evhttp server (tu_httpd.h) on
 * 127.0.0.1 on the walk's own event_base, serving a per-test table (path ->
 * status, headers, body, failures before success, stalls, paced chunks)
 * and counting requests per path, plus a raw TCP peer for a body cut short.
 * Every callback is logged in order; every test runs under a watchdog and
 * ends with nothing left on the loop, clean under ASan. */
#include "testutil.h"
#include "tu_httpd.h"

#include <curl/curl.h>
#include <event2/event.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "docwalk.h"
#include "rs_alloc.h"
#include "rs_http.h"

#define WATCHDOG_MS 20000u
#define LOG_MAX 8192
#define BIG_ENTRIES 45000u            /* ~6 MB, under RS_MAX_ENTRIES */

/* Documents; {B} stands for http://127.0.0.1:PORT of the test's server. */
#define XMLDECL "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
#define NS "xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" " \
           "xmlns:rs=\"http://www.openarchives.org/rs/terms/\""
#define URLSET XMLDECL "<urlset " NS ">\n"
#define INDEX XMLDECL "<sitemapindex " NS ">\n"
#define RL_MD \
    "<rs:md capability=\"resourcelist\" at=\"2013-01-03T09:00:00Z\"/>\n"
#define URL(loc) "<url><loc>" loc "</loc></url>\n"
#define KID(loc) "<sitemap><loc>" loc "</loc></sitemap>\n"
#define NEXT(href) "<rs:ln rel=\"next\" href=\"" href "\"/>\n"
#define END_URLSET "</urlset>\n"
#define END_INDEX "</sitemapindex>\n"

/* ------------------------------------------------------------ fixture */

enum free_in { FREE_NONE, FREE_ON_HEAD, FREE_ON_ENTRY, FREE_ON_CHILD,
               FREE_ON_DOC_END, FREE_ON_DONE };

struct fixture {
    struct tu_loop loop;
    struct tu_httpd *srv;
    size_t entries_at_paced_end; /* entries the walk had when the server
                                    queued the last paced byte */
    struct tu_raw *raw;         /* or NULL */
    /* the client */
    struct rs_http *h;
    struct docwalk *w;
    struct docwalk_opts o;
    /* what the walk reported, in order: "H path", "E path", "C path",
     * "D path", separated by spaces ({B} stripped) */
    char log[LOG_MAX];
    bool quiet;                 /* do not log entries (big documents) */
    unsigned n_head, n_entry, n_child, n_docend, n_done;
    int done_rc;
    char done_err[600];
    char last_loc[256], last_raw_loc[256];
    /* behaviour of the callbacks */
    const char *skip_head;      /* on_head: DOCWALK_SKIP for this path */
    const char *fail_head;      /* on_head: head_rc for this path */
    int head_rc;
    const char *skip_child;     /* on_child: 0 for this path */
    const char *fail_child;     /* on_child: -EINVAL-ish for this path */
    unsigned fail_entry_at;     /* on_entry: RS_EIO at this entry (1-based) */
    enum free_in free_in;
    unsigned free_at;           /* ... at this call (1-based) of it */
    const char *restart_url;    /* on_done: start this walk (once) */
    int restart_rc;
    bool no_child_cb;           /* walk_new: on_child = NULL */
    const char *start_in_head;  /* on_head: try to start this walk */
    int start_in_head_rc;
    bool busy_in_head;
};

static uint64_t
now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* --------------------------------------------------------- the walker */

static const char *
short_url(struct fixture *f, const char *url)
{
    size_t n = strlen(f->srv->origin);
    return strncmp(url, f->srv->origin, n) == 0 ? url + n : url;
}

static void
log_add(struct fixture *f, char what, const char *url)
{
    size_t n = strlen(f->log);

    if (f->quiet)
        return;
    snprintf(f->log + n, sizeof(f->log) - n, "%s%c %s", n > 0 ? " " : "",
             what, short_url(f, url));
}

static bool
is_path(struct fixture *f, const char *url, const char *path)
{
    return path != NULL && strcmp(short_url(f, url), path) == 0;
}

/* Free the walk from inside a callback when told to: it must not call
 * anything of ours again. */
static bool
maybe_free(struct fixture *f, enum free_in where, unsigned n)
{
    if (f->free_in != where || f->free_at != n)
        return false;
    docwalk_free(f->w);
    f->w = NULL;
    return true;
}

static int
on_head(void *ud, const char *url, const struct rs_head *h)
{
    struct fixture *f = ud;

    assert_non_null(h);
    f->n_head++;
    log_add(f, 'H', url);
    if (maybe_free(f, FREE_ON_HEAD, f->n_head))
        return 0;
    if (f->start_in_head != NULL) {
        f->busy_in_head = docwalk_busy(f->w);
        f->start_in_head_rc = docwalk_start(f->w, f->start_in_head);
        f->start_in_head = NULL;
    }
    if (is_path(f, url, f->skip_head))
        return DOCWALK_SKIP;
    if (is_path(f, url, f->fail_head))
        return f->head_rc;
    return 0;
}

static int
on_entry(void *ud, const char *url, const struct rs_entry *e,
         const char *loc)
{
    struct fixture *f = ud;

    assert_non_null(url);
    f->n_entry++;
    log_add(f, 'E', loc);
    snprintf(f->last_loc, sizeof(f->last_loc), "%s", loc);
    snprintf(f->last_raw_loc, sizeof(f->last_raw_loc), "%s", e->loc);
    if (maybe_free(f, FREE_ON_ENTRY, f->n_entry))
        return 0;
    if (f->fail_entry_at != 0 && f->n_entry == f->fail_entry_at)
        return RS_EIO;
    return 0;
}

static int
on_child(void *ud, const char *index_url, const struct rs_entry *e,
         const char *loc)
{
    struct fixture *f = ud;

    assert_non_null(index_url);
    assert_non_null(e);
    f->n_child++;
    log_add(f, 'C', loc);
    if (maybe_free(f, FREE_ON_CHILD, f->n_child))
        return 1;
    if (is_path(f, loc, f->skip_child))
        return 0;
    if (is_path(f, loc, f->fail_child))
        return RS_EDENIED;
    return 1;
}

static void
on_doc_end(void *ud, const char *url, const struct rs_head *h)
{
    struct fixture *f = ud;

    assert_non_null(h);
    f->n_docend++;
    log_add(f, 'D', url);
    maybe_free(f, FREE_ON_DOC_END, f->n_docend);
}

static void
on_done(void *ud, int rc, const char *err)
{
    struct fixture *f = ud;

    assert_non_null(err);
    f->n_done++;
    f->done_rc = rc;
    snprintf(f->done_err, sizeof(f->done_err), "%s", err);
    assert_true((rc == 0) == (err[0] == '\0'));
    if (f->w != NULL)
        assert_false(docwalk_busy(f->w));
    if (maybe_free(f, FREE_ON_DONE, f->n_done))
        return;
    if (f->restart_url != NULL) {
        const char *u = f->restart_url;
        f->restart_url = NULL;
        f->restart_rc = docwalk_start(f->w, u);
    }
}

static void
walk_new(struct fixture *f)
{
    f->o.base = f->loop.base;
    f->o.http = f->h;
    f->o.on_head = on_head;
    f->o.on_entry = on_entry;
    f->o.on_child = f->no_child_cb ? NULL : on_child;
    f->o.on_doc_end = on_doc_end;
    f->o.on_done = on_done;
    f->o.ud = f;
    f->w = docwalk_new(&f->o);
    assert_non_null(f->w);
}

/* Forget what the last walk logged. */
static void
log_reset(struct fixture *f)
{
    f->log[0] = '\0';
    f->n_head = f->n_entry = f->n_child = f->n_docend = f->n_done = 0;
    f->done_rc = 1;
    f->done_err[0] = '\0';
}

/* Walk from {B}path to the end; on_done ran exactly once. */
static void
walk(struct fixture *f, const char *path)
{
    unsigned before;

    log_reset(f);
    before = f->n_done;
    assert_int_equal(docwalk_start(f->w, tu_httpd_url(f->srv, path)), 0);
    assert_true(docwalk_busy(f->w));
    assert_int_equal(f->n_done, before);       /* never inside start */
    TU_LOOP_UNTIL(&f->loop, f->n_done == 1, WATCHDOG_MS);
    assert_false(docwalk_busy(f->w));
}

/* The server queued a paced reply's last byte: how far has the walk got? */
static void
on_paced_end(void *ud)
{
    struct fixture *f = ud;
    f->entries_at_paced_end = f->n_entry;
}

/* ------------------------------------------------- setup / teardown */

static int
setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    tu_loop_init(&f->loop);
    f->srv = tu_httpd_new(f->loop.base);
    /* a route naming no Content-Type is served as XML */
    f->srv->default_ctype = "application/xml";
    f->srv->on_paced_end = on_paced_end;
    f->srv->ud = f;
    f->h = rs_http_new(f->loop.base, NULL);
    assert_non_null(f->h);
    *state = f;
    return 0;
}

/* The walk, then the client (completing whatever is in flight), then the
 * peers; after that the loop must hold nothing at all. */
static int
teardown(void **state)
{
    struct fixture *f = *state;
    struct rs_http_stats st;

    tu_alloc_fail_at(0);
    docwalk_free(f->w);
    f->w = NULL;
    rs_http_stats(f->h, &st);
    rs_http_free(f->h);
    f->h = NULL;
    tu_httpd_free(f->srv);
    tu_raw_free(f->raw);
    tu_loop_cleanup(&f->loop);
    free(f);
    return 0;
}

/* Serve body at {B}path: 200, application/xml. */
static struct tu_route *
serve(struct fixture *f, const char *path, const char *body)
{
    return tu_httpd_add(f->srv, path, 0, NULL, body);
}

/* ------------------------------------------------------------- tests */

/* docwalk/api_edges: free(NULL) is a no-op; start refuses non-http(s) URLs
 * without ever calling on_done; new/start report allocation failure. */
static void
test_api_edges(void **state)
{
    struct fixture *f = *state;
    unsigned long n;

    docwalk_free(NULL);
    walk_new(f);
    assert_false(docwalk_busy(f->w));
    assert_int_equal(docwalk_docs(f->w), 0);
    assert_int_equal(docwalk_entries(f->w), 0);
    assert_int_equal(docwalk_start(f->w, "ftp://127.0.0.1/x.xml"), RS_EINVAL);
    assert_int_equal(docwalk_start(f->w, "/relative.xml"), RS_EINVAL);
    assert_int_equal(docwalk_start(f->w, "file:///etc/passwd"), RS_EINVAL);
    assert_int_equal(docwalk_start(f->w, ""), RS_EINVAL);
    assert_false(docwalk_busy(f->w));
    tu_loop_run_for(&f->loop, 50);
    assert_int_equal(f->n_done, 0);
    assert_int_equal(f->srv->misses, 0);
    docwalk_free(f->w);
    f->w = NULL;

    /* docwalk_new: every allocation it makes may fail. */
    for (n = 1; n < 20; n++) {
        struct docwalk *w;
        tu_alloc_fail_at(n);
        w = docwalk_new(&f->o);
        tu_alloc_fail_at(0);
        if (w != NULL) {
            docwalk_free(w);
            break;
        }
    }
    assert_true(n > 1 && n < 20);
    /* docwalk_start: ENOMEM leaves the walk idle and usable. */
    walk_new(f);
    serve(f, "/rl.xml", URLSET RL_MD URL("{B}/r1") END_URLSET);
    for (n = 1; n < 20; n++) {
        int rc;
        tu_alloc_fail_at(n);
        rc = docwalk_start(f->w, tu_httpd_url(f->srv, "/rl.xml"));
        tu_alloc_fail_at(0);
        if (rc == 0)
            break;
        assert_int_equal(rc, RS_ENOMEM);
        assert_false(docwalk_busy(f->w));
    }
    assert_true(n > 1 && n < 20);
    TU_LOOP_UNTIL(&f->loop, f->n_done == 1, WATCHDOG_MS);
    assert_int_equal(f->done_rc, 0);
    assert_int_equal(f->n_entry, 1);
}

/* docwalk/resourcelist: one list, entries in document order, head before
 * and doc_end after them, one request with an XML Accept header. */
static void
test_resourcelist(void **state)
{
    struct fixture *f = *state;

    serve(f, "/rl.xml",
          URLSET RL_MD URL("{B}/r1") URL("{B}/r2") URL("{B}/r3")
              END_URLSET);
    walk_new(f);
    walk(f, "/rl.xml");
    assert_int_equal(f->done_rc, 0);
    assert_string_equal(f->done_err, "");
    assert_string_equal(f->log, "H /rl.xml E /r1 E /r2 E /r3 D /rl.xml");
    assert_int_equal(docwalk_docs(f->w), 1);
    assert_int_equal(docwalk_entries(f->w), 3);
    assert_int_equal(tu_httpd_hits(f->srv, "/rl.xml"), 1);
    assert_non_null(strstr(f->srv->accept, "application/xml"));
    assert_int_equal(f->srv->misses, 0);
}

/* docwalk/index_three_parts: an index's children are visited each once,
 * in document order, after the index's own end. */
static void
test_index_three_parts(void **state)
{
    struct fixture *f = *state;

    serve(f, "/idx.xml",
          INDEX RL_MD KID("{B}/p1.xml") KID("{B}/p2.xml")
              KID("{B}/p3.xml") END_INDEX);
    serve(f, "/p1.xml", URLSET RL_MD URL("{B}/a1") URL("{B}/a2") END_URLSET);
    serve(f, "/p2.xml", URLSET RL_MD URL("{B}/b1") END_URLSET);
    serve(f, "/p3.xml", URLSET RL_MD URL("{B}/c1") END_URLSET);
    walk_new(f);
    walk(f, "/idx.xml");
    assert_int_equal(f->done_rc, 0);
    assert_string_equal(f->log,
                        "H /idx.xml C /p1.xml C /p2.xml C /p3.xml D /idx.xml "
                        "H /p1.xml E /a1 E /a2 D /p1.xml "
                        "H /p2.xml E /b1 D /p2.xml "
                        "H /p3.xml E /c1 D /p3.xml");
    assert_int_equal(tu_httpd_hits(f->srv, "/idx.xml"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/p1.xml"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/p2.xml"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/p3.xml"), 1);
    assert_int_equal(docwalk_docs(f->w), 4);
    /* the index's 3 children count as entries read, too */
    assert_int_equal(docwalk_entries(f->w), 3 + 4);

    /* on_child NULL: every child is visited. */
    docwalk_free(f->w);
    f->no_child_cb = true;
    walk_new(f);
    walk(f, "/idx.xml");
    assert_int_equal(f->done_rc, 0);
    assert_string_equal(f->log,
                        "H /idx.xml D /idx.xml H /p1.xml E /a1 E /a2 D /p1.xml "
                        "H /p2.xml E /b1 D /p2.xml H /p3.xml E /c1 D /p3.xml");
    assert_int_equal(tu_httpd_hits(f->srv, "/p3.xml"), 2);
}

/* docwalk/changelist_index_from_order: children that all carry rs:md from
 * are visited oldest first, whatever their order in the index. */
static void
test_changelist_index_from_order(void **state)
{
    struct fixture *f = *state;

#define CL_KID(loc, from)                                                    \
    "<sitemap><loc>" loc "</loc><rs:md from=\"" from "\"/></sitemap>\n"
#define CL(from, loc, lastmod)                                               \
    URLSET "<rs:md capability=\"changelist\" from=\"" from "\"/>\n"          \
    "<url><loc>" loc "</loc><lastmod>" lastmod "</lastmod>"                  \
    "<rs:md change=\"updated\"/></url>\n" END_URLSET

    serve(f, "/clidx.xml",
          INDEX "<rs:md capability=\"changelist\" "
                "from=\"2013-01-01T00:00:00Z\"/>\n"
          CL_KID("{B}/c3.xml", "2013-01-03T00:00:00Z")
          CL_KID("{B}/c1.xml", "2013-01-01T00:00:00Z")
          CL_KID("{B}/c2.xml", "2013-01-02T00:00:00Z") END_INDEX);
    serve(f, "/c1.xml",
          CL("2013-01-01T00:00:00Z", "{B}/x1", "2013-01-01T10:00:00Z"));
    serve(f, "/c2.xml",
          CL("2013-01-02T00:00:00Z", "{B}/x2", "2013-01-02T10:00:00Z"));
    serve(f, "/c3.xml",
          CL("2013-01-03T00:00:00Z", "{B}/x3", "2013-01-03T10:00:00Z"));
    walk_new(f);
    walk(f, "/clidx.xml");
    assert_int_equal(f->done_rc, 0);
    assert_string_equal(f->log,
                        "H /clidx.xml C /c3.xml C /c1.xml C /c2.xml "
                        "D /clidx.xml H /c1.xml E /x1 D /c1.xml "
                        "H /c2.xml E /x2 D /c2.xml H /c3.xml E /x3 D /c3.xml");

    /* One child without from: document order for all of them. */
    serve(f, "/clidx2.xml",
          INDEX "<rs:md capability=\"changelist\" "
                "from=\"2013-01-01T00:00:00Z\"/>\n"
          CL_KID("{B}/c3.xml", "2013-01-03T00:00:00Z")
          KID("{B}/c1.xml")
          CL_KID("{B}/c2.xml", "2013-01-02T00:00:00Z") END_INDEX);
    walk(f, "/clidx2.xml");
    assert_int_equal(f->done_rc, 0);
    assert_string_equal(f->log,
                        "H /clidx2.xml C /c3.xml C /c1.xml C /c2.xml "
                        "D /clidx2.xml H /c3.xml E /x3 D /c3.xml "
                        "H /c1.xml E /x1 D /c1.xml H /c2.xml E /x2 D /c2.xml");
#undef CL
#undef CL_KID
}

/* docwalk/next_pages: rel="next" is followed to the last page, whether the
 * link comes before the entries or after them; an index's children come
 * before the index's own next page. */
static void
test_next_pages(void **state)
{
    struct fixture *f = *state;

    serve(f, "/p1.xml",
          URLSET NEXT("{B}/p2.xml") RL_MD URL("{B}/a") URL("{B}/b")
              END_URLSET);
    serve(f, "/p2.xml",
          URLSET RL_MD URL("{B}/c") URL("{B}/d") NEXT("{B}/p3.xml")
              END_URLSET);
    /* relative next: resolved against the page's URL */
    serve(f, "/p3.xml",
          URLSET RL_MD NEXT("sub/../p4.xml") URL("{B}/e") END_URLSET);
    serve(f, "/p4.xml", URLSET RL_MD URL("{B}/f") END_URLSET);
    walk_new(f);
    walk(f, "/p1.xml");
    assert_int_equal(f->done_rc, 0);
    assert_string_equal(f->log,
                        "H /p1.xml E /a E /b D /p1.xml "
                        "H /p2.xml E /c E /d D /p2.xml "
                        "H /p3.xml E /e D /p3.xml H /p4.xml E /f D /p4.xml");
    assert_int_equal(docwalk_docs(f->w), 4);
    assert_int_equal(docwalk_entries(f->w), 6);
    for (const char *const *p = (const char *const[]){ "/p1.xml", "/p2.xml",
                                                      "/p3.xml", "/p4.xml",
                                                      NULL };
         *p != NULL; p++)
        assert_int_equal(tu_httpd_hits(f->srv, *p), 1);

    /* index page 1 (children k1, k2) -> index page 2 (child k3) */
    serve(f, "/i1.xml",
          INDEX RL_MD KID("{B}/k1.xml") KID("{B}/k2.xml")
              NEXT("{B}/i2.xml") END_INDEX);
    serve(f, "/i2.xml", INDEX RL_MD KID("{B}/k3.xml") END_INDEX);
    serve(f, "/k1.xml", URLSET RL_MD URL("{B}/1") END_URLSET);
    serve(f, "/k2.xml", URLSET RL_MD URL("{B}/2") END_URLSET);
    serve(f, "/k3.xml", URLSET RL_MD URL("{B}/3") END_URLSET);
    walk(f, "/i1.xml");
    assert_int_equal(f->done_rc, 0);
    assert_string_equal(f->log,
                        "H /i1.xml C /k1.xml C /k2.xml D /i1.xml "
                        "H /k1.xml E /1 D /k1.xml H /k2.xml E /2 D /k2.xml "
                        "H /i2.xml C /k3.xml D /i2.xml "
                        "H /k3.xml E /3 D /k3.xml");
}

/* docwalk/loops: a next page pointing back, a page whose next is itself,
 * an index listing itself, a child listed twice, and an index below
 * pointing back at the top each fail the walk (RS_EINVALID, naming the
 * document), without reading anything twice: a list read short must not
 * look whole (it would delete what it left out). */
static void
test_loops(void **state)
{
    struct fixture *f = *state;

    serve(f, "/p1.xml",
          URLSET RL_MD URL("{B}/a") NEXT("{B}/p2.xml") END_URLSET);
    serve(f, "/p2.xml",
          URLSET RL_MD URL("{B}/b") NEXT("{B}/p1.xml") END_URLSET);
    walk_new(f);
    walk(f, "/p1.xml");
    assert_int_equal(f->done_rc, RS_EINVALID);
    assert_non_null(strstr(f->done_err, "/p1.xml: read twice in one walk"));
    assert_int_equal(tu_httpd_hits(f->srv, "/p1.xml"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/p2.xml"), 1);

    /* a page whose next is itself */
    serve(f, "/self.xml",
          URLSET RL_MD URL("{B}/s") NEXT("{B}/self.xml") END_URLSET);
    walk(f, "/self.xml");
    assert_int_equal(f->done_rc, RS_EINVALID);
    assert_int_equal(tu_httpd_hits(f->srv, "/self.xml"), 1);

    /* an index listing itself */
    serve(f, "/me.xml", INDEX RL_MD KID("{B}/a.xml") KID("{B}/me.xml")
                            END_INDEX);
    serve(f, "/a.xml", URLSET RL_MD URL("{B}/1") END_URLSET);
    walk(f, "/me.xml");
    assert_int_equal(f->done_rc, RS_EINVALID);
    assert_non_null(strstr(f->done_err, "/me.xml: read twice"));
    assert_int_equal(tu_httpd_hits(f->srv, "/me.xml"), 1);

    /* a child listed twice */
    serve(f, "/twice.xml", INDEX RL_MD KID("{B}/a.xml") KID("{B}/a.xml")
                               END_INDEX);
    walk(f, "/twice.xml");
    assert_int_equal(f->done_rc, RS_EINVALID);
    assert_non_null(strstr(f->done_err, "/a.xml: read twice"));

    /* A -> B -> A */
    serve(f, "/idx.xml", INDEX RL_MD KID("{B}/b.xml") END_INDEX);
    serve(f, "/b.xml", INDEX RL_MD KID("{B}/idx.xml") END_INDEX);
    walk(f, "/idx.xml");
    assert_int_equal(f->done_rc, RS_EINVALID);
    assert_int_equal(tu_httpd_hits(f->srv, "/idx.xml"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/b.xml"), 1);

    /* the walk after a failed one starts clean */
    serve(f, "/ok.xml", URLSET RL_MD URL("{B}/ok") END_URLSET);
    walk(f, "/ok.xml");
    assert_int_equal(f->done_rc, 0);
}

/* docwalk/max_docs: the walk stops with RS_ETOOBIG before reading one
 * document more than allowed, and says so. */
static void
test_max_docs(void **state)
{
    struct fixture *f = *state;

    serve(f, "/idx.xml",
          INDEX RL_MD KID("{B}/a.xml") KID("{B}/b.xml") KID("{B}/c.xml")
              END_INDEX);
    serve(f, "/a.xml", URLSET RL_MD URL("{B}/1") END_URLSET);
    serve(f, "/b.xml", URLSET RL_MD URL("{B}/2") END_URLSET);
    serve(f, "/c.xml", URLSET RL_MD URL("{B}/3") END_URLSET);
    f->o.max_docs = 2;
    walk_new(f);
    walk(f, "/idx.xml");
    assert_int_equal(f->done_rc, RS_ETOOBIG);
    assert_non_null(strstr(f->done_err, "more than 2 documents"));
    assert_non_null(strstr(f->done_err, tu_httpd_url(f->srv, "/b.xml")));
    assert_int_equal(tu_httpd_hits(f->srv, "/a.xml"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/b.xml"), 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/c.xml"), 0);
    assert_int_equal(docwalk_docs(f->w), 2);

    /* exactly max_docs documents is fine */
    f->o.max_docs = 4;
    docwalk_free(f->w);
    walk_new(f);
    walk(f, "/idx.xml");
    assert_int_equal(f->done_rc, 0);
    assert_int_equal(docwalk_docs(f->w), 4);
}

/* docwalk/on_head_skip: DOCWALK_SKIP skips a document's entries, children
 * and next page; a negative return aborts the walk with that error. */
static void
test_on_head_skip(void **state)
{
    struct fixture *f = *state;

    serve(f, "/idx.xml",
          INDEX RL_MD KID("{B}/a.xml") KID("{B}/b.xml") KID("{B}/c.xml")
              END_INDEX);
    serve(f, "/a.xml", URLSET RL_MD URL("{B}/1") END_URLSET);
    serve(f, "/b.xml",
          URLSET RL_MD NEXT("{B}/b2.xml") URL("{B}/2") URL("{B}/2b")
              END_URLSET);
    serve(f, "/b2.xml", URLSET RL_MD URL("{B}/22") END_URLSET);
    serve(f, "/c.xml", URLSET RL_MD URL("{B}/3") END_URLSET);
    /* a skipped child index: its children are not read either */
    serve(f, "/ci.xml", INDEX RL_MD KID("{B}/a.xml") END_INDEX);
    f->skip_head = "/b.xml";
    walk_new(f);
    walk(f, "/idx.xml");
    assert_int_equal(f->done_rc, 0);
    assert_string_equal(f->log,
                        "H /idx.xml C /a.xml C /b.xml C /c.xml D /idx.xml "
                        "H /a.xml E /1 D /a.xml H /b.xml "
                        "H /c.xml E /3 D /c.xml");
    assert_int_equal(tu_httpd_hits(f->srv, "/b.xml"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/b2.xml"), 0);

    f->skip_head = "/ci.xml";
    walk(f, "/ci.xml");
    assert_int_equal(f->done_rc, 0);
    assert_string_equal(f->log, "H /ci.xml");
    /* only from the first walk */
    assert_int_equal(tu_httpd_hits(f->srv, "/a.xml"), 1);

    /* abort */
    f->skip_head = NULL;
    f->fail_head = "/b.xml";
    f->head_rc = RS_EDENIED;
    walk(f, "/idx.xml");
    assert_int_equal(f->done_rc, RS_EDENIED);
    assert_non_null(strstr(f->done_err, tu_httpd_url(f->srv, "/b.xml")));
    /* not reached this time */
    assert_int_equal(tu_httpd_hits(f->srv, "/c.xml"), 1);
    assert_null(strstr(f->log, "H /c.xml"));
}

/* docwalk/on_child_skip: on_child 0 skips a child, negative aborts. */
static void
test_on_child_skip(void **state)
{
    struct fixture *f = *state;

    serve(f, "/idx.xml",
          INDEX RL_MD KID("{B}/a.xml") KID("{B}/b.xml") KID("{B}/c.xml")
              END_INDEX);
    serve(f, "/a.xml", URLSET RL_MD URL("{B}/1") END_URLSET);
    serve(f, "/b.xml", URLSET RL_MD URL("{B}/2") END_URLSET);
    serve(f, "/c.xml", URLSET RL_MD URL("{B}/3") END_URLSET);
    f->skip_child = "/b.xml";
    walk_new(f);
    walk(f, "/idx.xml");
    assert_int_equal(f->done_rc, 0);
    assert_string_equal(f->log,
                        "H /idx.xml C /a.xml C /b.xml C /c.xml D /idx.xml "
                        "H /a.xml E /1 D /a.xml H /c.xml E /3 D /c.xml");
    assert_int_equal(tu_httpd_hits(f->srv, "/b.xml"), 0);

    f->skip_child = NULL;
    f->fail_child = "/b.xml";
    walk(f, "/idx.xml");
    assert_int_equal(f->done_rc, RS_EDENIED);
    assert_non_null(strstr(f->done_err, "stopped by the reader"));
    /* the index is abandoned: none of its children is read */
    assert_string_equal(f->log, "H /idx.xml C /a.xml C /b.xml");
    assert_int_equal(tu_httpd_hits(f->srv, "/a.xml"), 1);

    /* on_entry's error aborts too */
    f->fail_child = NULL;
    f->fail_entry_at = 2;
    walk(f, "/idx.xml");
    assert_int_equal(f->done_rc, RS_EIO);
    assert_non_null(strstr(f->done_err, tu_httpd_url(f->srv, "/b.xml")));
    assert_int_equal(tu_httpd_hits(f->srv, "/c.xml"), 1);
}

/* docwalk/loc_resolution: on_entry gets e->loc as written and loc resolved
 * against the document (dot segments, an empty path); a relative <loc> is
 * refused by the parser (Sitemaps locs are absolute), naming the line. */
static void
test_loc_resolution(void **state)
{
    struct fixture *f = *state;

    serve(f, "/dir/rl.xml", URLSET RL_MD URL("{B}/x/../y/./z") END_URLSET);
    serve(f, "/dir/bare.xml",
          URLSET RL_MD URL("http://example.com") END_URLSET);
    serve(f, "/dir/rel.xml",
          URLSET RL_MD URL("{B}/ok") "<url><loc>res1</loc></url>\n"
              END_URLSET);
    serve(f, "/dir/ridx.xml", INDEX RL_MD KID("part1.xml") END_INDEX);
    walk_new(f);
    walk(f, "/dir/rl.xml");
    assert_int_equal(f->done_rc, 0);
    assert_string_equal(f->last_loc, tu_httpd_url(f->srv, "/y/z"));
    assert_string_equal(f->last_raw_loc, tu_httpd_url(f->srv, "/x/../y/./z"));

    walk(f, "/dir/bare.xml");
    assert_int_equal(f->done_rc, 0);
    assert_string_equal(f->last_loc, "http://example.com/");
    assert_string_equal(f->last_raw_loc, "http://example.com");

    walk(f, "/dir/rel.xml");
    assert_int_equal(f->done_rc, RS_EINVALID);
    assert_int_equal(f->n_entry, 1);
    assert_non_null(
        strstr(f->done_err, tu_httpd_url(f->srv, "/dir/rel.xml:5:")));
    assert_non_null(strstr(f->done_err, "res1"));

    walk(f, "/dir/ridx.xml");
    assert_int_equal(f->done_rc, RS_EINVALID);
    assert_int_equal(f->n_child, 0);
    assert_non_null(strstr(f->done_err, "part1.xml"));
    assert_int_equal(f->srv->misses, 0);
}

/* docwalk/non_http_loc: a <loc>, child or next page that is not http(s)
 * ends the walk with an error naming it, and nothing is fetched for it. */
static void
test_non_http_loc(void **state)
{
    struct fixture *f = *state;

    serve(f, "/rl.xml",
          URLSET RL_MD URL("{B}/1") URL("ftp://example.com/x")
              URL("{B}/3") END_URLSET);
    serve(f, "/idx.xml",
          INDEX RL_MD KID("{B}/a.xml") KID("file:///etc/passwd")
              END_INDEX);
    serve(f, "/a.xml", URLSET RL_MD URL("{B}/1") END_URLSET);
    serve(f, "/nx.xml",
          URLSET RL_MD URL("{B}/1") NEXT("file:///etc/passwd")
              END_URLSET);
    walk_new(f);
    walk(f, "/rl.xml");
    assert_int_equal(f->done_rc, RS_EINVALID);
    assert_int_equal(f->n_entry, 1);
    assert_non_null(strstr(f->done_err, tu_httpd_url(f->srv, "/rl.xml")));
    assert_non_null(strstr(f->done_err, "ftp://example.com/x"));

    walk(f, "/idx.xml");
    assert_int_equal(f->done_rc, RS_EINVALID);
    assert_non_null(strstr(f->done_err, "file:///etc/passwd"));
    assert_int_equal(tu_httpd_hits(f->srv, "/a.xml"), 0);

    walk(f, "/nx.xml");
    assert_int_equal(f->done_rc, RS_EINVAL);
    assert_non_null(strstr(f->done_err, "file:///etc/passwd"));
    assert_int_equal(f->srv->misses, 0);
}

/* docwalk/not_found: a 404 (or 410) document ends the walk with
 * RS_ENOTFOUND and its URL, without retries; other 4xx are RS_EPROTO. */
static void
test_not_found(void **state)
{
    struct fixture *f = *state;

    serve(f, "/idx.xml",
          INDEX RL_MD KID("{B}/a.xml") KID("{B}/missing.xml")
              KID("{B}/c.xml") END_INDEX);
    serve(f, "/a.xml", URLSET RL_MD URL("{B}/1") END_URLSET);
    serve(f, "/c.xml", URLSET RL_MD URL("{B}/3") END_URLSET);
    tu_httpd_add(f->srv, "/gone.xml", 410, NULL, "gone");
    tu_httpd_add(f->srv, "/denied.xml", 403, NULL, "<html>no</html>");
    walk_new(f);
    walk(f, "/idx.xml");
    assert_int_equal(f->done_rc, RS_ENOTFOUND);
    assert_non_null(strstr(f->done_err, tu_httpd_url(f->srv, "/missing.xml")));
    assert_non_null(strstr(f->done_err, "404"));
    assert_int_equal(f->srv->misses, 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/c.xml"), 0);

    walk(f, "/gone.xml");
    assert_int_equal(f->done_rc, RS_ENOTFOUND);
    assert_non_null(strstr(f->done_err, "410"));
    assert_int_equal(tu_httpd_hits(f->srv, "/gone.xml"), 1);
    assert_int_equal(f->n_head, 0);

    walk(f, "/denied.xml");
    assert_int_equal(f->done_rc, RS_EPROTO);
    assert_non_null(strstr(f->done_err, "403"));
    assert_int_equal(tu_httpd_hits(f->srv, "/denied.xml"), 1);
}

/* docwalk/retry_after: a 503 twice then 200 is retried and succeeds;
 * Retry-After sets the wait (1 s: the walk takes two seconds; 0: it takes
 * less than the 500 ms default backoff). */
static void
test_retry_after(void **state)
{
    struct fixture *f = *state;
    struct tu_route *r;
    uint64_t t0, el;

    r = serve(f, "/slow.xml",
              URLSET RL_MD URL("{B}/1") URL("{B}/2") END_URLSET);
    tu_httpd_fail(f->srv, r, 2, 503, "Retry-After: 1");
    walk_new(f);
    t0 = now_us();
    walk(f, "/slow.xml");
    el = now_us() - t0;
    assert_int_equal(f->done_rc, 0);
    assert_int_equal(r->hits, 3);
    assert_int_equal(f->n_entry, 2);
    assert_int_equal(f->n_head, 1);     /* error pages are not parsed */
    assert_int_equal(docwalk_docs(f->w), 1);
    assert_true(el >= 1900000);
    assert_true(el < 5000000);

    r = serve(f, "/quick.xml", URLSET RL_MD URL("{B}/1") END_URLSET);
    tu_httpd_fail(f->srv, r, 2, 503, "Retry-After: 0");
    t0 = now_us();
    walk(f, "/quick.xml");
    el = now_us() - t0;
    assert_int_equal(f->done_rc, 0);
    assert_int_equal(r->hits, 3);
    assert_true(el < 450000);

    /* no Retry-After: the default backoff, 500 ms then 1 s */
    r = serve(f, "/backoff.xml", URLSET RL_MD URL("{B}/1") END_URLSET);
    tu_httpd_fail(f->srv, r, 2, 500, NULL);
    t0 = now_us();
    walk(f, "/backoff.xml");
    el = now_us() - t0;
    assert_int_equal(f->done_rc, 0);
    assert_int_equal(r->hits, 3);
    assert_true(el >= 1400000);
}

/* docwalk/retries_exhausted: a document failing more times than allowed
 * ends the walk with the last status after exactly retries + 1 requests;
 * 429 is retried too. */
static void
test_retries_exhausted(void **state)
{
    struct fixture *f = *state;
    struct tu_route *r;

    r = serve(f, "/down.xml", URLSET RL_MD END_URLSET);
    tu_httpd_fail(f->srv, r, 100, 503, "Retry-After: 0");
    f->o.retries = 2;
    walk_new(f);
    walk(f, "/down.xml");
    assert_int_equal(f->done_rc, RS_EPROTO);
    assert_non_null(strstr(f->done_err, "503"));
    assert_non_null(strstr(f->done_err, tu_httpd_url(f->srv, "/down.xml")));
    assert_int_equal(r->hits, 3);

    /* the next walk starts from a fresh attempt count */
    r = serve(f, "/busy.xml", URLSET RL_MD URL("{B}/1") END_URLSET);
    tu_httpd_fail(f->srv, r, 2, 429, "Retry-After: 0");
    walk(f, "/busy.xml");
    assert_int_equal(f->done_rc, 0);
    assert_int_equal(r->hits, 3);

    /* the default is 3 retries */
    docwalk_free(f->w);
    f->o.retries = 0;
    walk_new(f);
    r = serve(f, "/down2.xml", URLSET RL_MD END_URLSET);
    tu_httpd_fail(f->srv, r, 100, 502, "Retry-After: 0");
    walk(f, "/down2.xml");
    assert_int_equal(f->done_rc, RS_EPROTO);
    assert_int_equal(r->hits, 4);
}

/* docwalk/cut_after_entries: a transfer that fails after entries were
 * delivered is not retried (the reader has acted on them); the error
 * names the document. */
static void
test_cut_after_entries(void **state)
{
    struct fixture *f = *state;
    char url[128], *reply;
    size_t len;

    /* {B}: the evhttp server, which the entries name */
    reply = tu_httpd_expand(f->srv,
                            "HTTP/1.1 200 OK\r\n"
                            "Content-Type: application/xml\r\n"
                            "Content-Length: 100000\r\n\r\n"
                            URLSET RL_MD URL("{B}/1") URL("{B}/2") "<url><loc>",
                            &len);
    f->raw = tu_raw_new(f->loop.base, reply, len);
    free(reply);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/cut.xml", f->raw->port);
    walk_new(f);
    log_reset(f);
    assert_int_equal(docwalk_start(f->w, url), 0);
    TU_LOOP_UNTIL(&f->loop, f->n_done == 1, WATCHDOG_MS);
    assert_int_equal(f->done_rc, RS_EIO);
    assert_int_equal(f->n_entry, 2);
    assert_int_equal(f->raw->accepts, 1);
    assert_non_null(strstr(f->done_err, url));
    assert_int_equal(f->n_docend, 0);
}

/* docwalk/later_page_retried: a 500 on a later page, before any of that
 * page's entries, is retried although earlier pages had entries. */
static void
test_later_page_retried(void **state)
{
    struct fixture *f = *state;
    struct tu_route *r;

    serve(f, "/p1.xml",
          URLSET RL_MD URL("{B}/a") NEXT("{B}/p2.xml") END_URLSET);
    r = serve(f, "/p2.xml", URLSET RL_MD URL("{B}/b") END_URLSET);
    tu_httpd_fail(f->srv, r, 1, 500, "Retry-After: 0");
    walk_new(f);
    walk(f, "/p1.xml");
    assert_int_equal(f->done_rc, 0);
    assert_int_equal(r->hits, 2);
    assert_string_equal(f->log, "H /p1.xml E /a D /p1.xml "
                                "H /p2.xml E /b D /p2.xml");
}

/* docwalk/timeout: a server that never answers is a timeout, retried,
 * then RS_ETIMEDOUT. */
static void
test_timeout(void **state)
{
    struct fixture *f = *state;
    struct tu_route *r;
    uint64_t t0, el;

    r = serve(f, "/stall.xml", NULL);
    r->never = true;
    f->o.timeout_ms = 300;
    f->o.retries = 1;
    walk_new(f);
    t0 = now_us();
    walk(f, "/stall.xml");
    el = now_us() - t0;
    assert_int_equal(f->done_rc, RS_ETIMEDOUT);
    assert_int_equal(r->hits, 2);
    assert_non_null(strstr(f->done_err, tu_httpd_url(f->srv, "/stall.xml")));
    assert_true(el >= 600000);
}

/* docwalk/malformed: XML that is not well-formed, an HTML page served with
 * 200, an empty body and a truncated document fail with the URL (and the
 * line, where there is one) in the error; strict turns warnings into
 * errors. */
static void
test_malformed(void **state)
{
    struct fixture *f = *state;

    serve(f, "/bad.xml",
          URLSET RL_MD           /* lines 1-3 */
          URL("{B}/1")           /* line 4 */
          "<url><loc>{B}/2</loc></urlx>\n"  /* line 5 */
          END_URLSET);
    tu_httpd_add(f->srv, "/page.html", 0, "Content-Type: text/html",
                 "<!DOCTYPE html>\n<html><body>hello</body></html>\n");
    serve(f, "/empty.xml", "");
    serve(f, "/short.xml", URLSET RL_MD URL("{B}/1"));
    serve(f, "/unordered.xml",
          URLSET "<rs:md capability=\"changelist\" "
                 "from=\"2013-01-01T00:00:00Z\"/>\n"
          "<url><loc>{B}/1</loc><lastmod>2013-01-05T00:00:00Z</lastmod>"
          "<rs:md change=\"updated\"/></url>\n"
          "<url><loc>{B}/2</loc><lastmod>2013-01-04T00:00:00Z</lastmod>"
          "<rs:md change=\"updated\"/></url>\n" END_URLSET);
    walk_new(f);
    walk(f, "/bad.xml");
    assert_int_equal(f->done_rc, RS_EPARSE);
    assert_int_equal(f->n_entry, 1);
    assert_non_null(strstr(f->done_err, tu_httpd_url(f->srv, "/bad.xml:5:")));

    walk(f, "/page.html");
    assert_int_equal(f->done_rc, RS_EINVALID);
    assert_non_null(strstr(f->done_err, tu_httpd_url(f->srv, "/page.html")));
    assert_int_equal(f->n_entry, 0);

    walk(f, "/empty.xml");
    assert_int_equal(f->done_rc, RS_EPARSE);
    assert_non_null(strstr(f->done_err, tu_httpd_url(f->srv, "/empty.xml")));

    walk(f, "/short.xml");
    assert_int_equal(f->done_rc, RS_EPARSE);
    assert_non_null(strstr(f->done_err, tu_httpd_url(f->srv, "/short.xml")));
    assert_int_equal(f->n_entry, 1);
    assert_int_equal(f->n_docend, 0);
    /* a document the parser refused is not retried */
    assert_int_equal(tu_httpd_hits(f->srv, "/short.xml"), 1);

    walk(f, "/unordered.xml");
    assert_int_equal(f->done_rc, 0);
    assert_int_equal(f->n_entry, 2);
    docwalk_free(f->w);
    f->o.strict = true;
    walk_new(f);
    walk(f, "/unordered.xml");
    assert_int_equal(f->done_rc, RS_EINVALID);
    assert_non_null(
        strstr(f->done_err, tu_httpd_url(f->srv, "/unordered.xml:5:")));
    assert_int_equal(f->n_entry, 1);
}

/* docwalk/big_streamed: a ~6 MB list sent in slices is parsed as it
 * arrives (entries reach the reader before the server has sent the end)
 * and every entry is delivered. */
static void
test_big_streamed(void **state)
{
    struct fixture *f = *state;
    size_t cap = (size_t)BIG_ENTRIES * 120 + 4096, n = 0;
    char *doc = malloc(cap);
    struct tu_route *r;

    assert_non_null(doc);
    n += (size_t)snprintf(doc + n, cap - n, "%s", URLSET RL_MD);
    for (unsigned i = 0; i < BIG_ENTRIES; i++)
        n += (size_t)snprintf(doc + n, cap - n,
                              "<url><loc>{B}/res/%08u</loc>"
                              "<lastmod>2013-01-02T13:00:00Z</lastmod>"
                              "<rs:md length=\"%u\"/></url>\n",
                              i, i);
    n += (size_t)snprintf(doc + n, cap - n, "%s", END_URLSET);
    assert_true(n < cap);
    r = serve(f, "/big.xml", doc);
    free(doc);
    assert_true(r->body_len > 5u * 1024 * 1024);
    r->pace = 256 * 1024;
    f->quiet = true;
    walk_new(f);
    walk(f, "/big.xml");
    assert_int_equal(f->done_rc, 0);
    assert_int_equal(f->n_entry, BIG_ENTRIES);
    assert_int_equal(docwalk_entries(f->w), BIG_ENTRIES);
    assert_int_equal(f->n_docend, 1);
    assert_int_equal(r->hits, 1);
    assert_true(f->entries_at_paced_end > 0);
    assert_true(f->entries_at_paced_end < BIG_ENTRIES);
    assert_string_equal(short_url(f, f->last_loc), "/res/00044999");
}

/* One free-from-a-callback case: the walk stops at once, on_done never
 * runs (unless freed from it), nothing is left behind. */
static void
free_case(struct fixture *f, enum free_in where, unsigned at,
          const char *start, const char *want_log)
{
    f->free_in = where;
    f->free_at = at;
    walk_new(f);
    log_reset(f);
    assert_int_equal(docwalk_start(f->w, tu_httpd_url(f->srv, start)), 0);
    TU_LOOP_UNTIL(&f->loop, f->w == NULL, WATCHDOG_MS);
    tu_loop_run_for(&f->loop, 30);
    tu_loop_drain(&f->loop, f->h, WATCHDOG_MS);
    assert_int_equal(f->n_done, where == FREE_ON_DONE ? 1 : 0);
    assert_string_equal(f->log, want_log);
    f->free_in = FREE_NONE;
}

/* docwalk/free_in_callbacks: docwalk_free from inside on_head, on_entry,
 * on_child, on_doc_end and on_done (ASan sees any use after free). */
static void
test_free_in_callbacks(void **state)
{
    struct fixture *f = *state;

    serve(f, "/idx.xml",
          INDEX RL_MD KID("{B}/a.xml") KID("{B}/b.xml") END_INDEX);
    serve(f, "/a.xml",
          URLSET RL_MD URL("{B}/1") URL("{B}/2") URL("{B}/3")
              END_URLSET);
    serve(f, "/b.xml", URLSET RL_MD END_URLSET);
    serve(f, "/empty.xml", URLSET RL_MD END_URLSET);

    free_case(f, FREE_ON_HEAD, 1, "/idx.xml", "H /idx.xml");
    free_case(f, FREE_ON_HEAD, 2, "/idx.xml",
              "H /idx.xml C /a.xml C /b.xml D /idx.xml H /a.xml");
    free_case(f, FREE_ON_ENTRY, 2, "/a.xml", "H /a.xml E /1 E /2");
    free_case(f, FREE_ON_ENTRY, 3, "/a.xml", "H /a.xml E /1 E /2 E /3");
    free_case(f, FREE_ON_CHILD, 1, "/idx.xml", "H /idx.xml C /a.xml");
    free_case(f, FREE_ON_DOC_END, 1, "/idx.xml",
              "H /idx.xml C /a.xml C /b.xml D /idx.xml");
    free_case(f, FREE_ON_DOC_END, 1, "/a.xml",
              "H /a.xml E /1 E /2 E /3 D /a.xml");
    /* an empty list: its head comes at the end of the document */
    free_case(f, FREE_ON_HEAD, 1, "/empty.xml", "H /empty.xml");
    free_case(f, FREE_ON_DONE, 1, "/idx.xml",
              "H /idx.xml C /a.xml C /b.xml D /idx.xml "
              "H /a.xml E /1 E /2 E /3 D /a.xml H /b.xml D /b.xml");
    /* on_done with an error */
    free_case(f, FREE_ON_DONE, 1, "/nothere.xml", "");

    /* free while a retry is waiting on its timer */
    {
        struct tu_route *r = serve(f, "/later.xml",
                                URLSET RL_MD END_URLSET);
        tu_httpd_fail(f->srv, r, 5, 503, "Retry-After: 5");
        walk_new(f);
        assert_int_equal(
            docwalk_start(f->w, tu_httpd_url(f->srv, "/later.xml")), 0);
        TU_LOOP_UNTIL(&f->loop, r->hits == 1, WATCHDOG_MS);
        tu_loop_run_for(&f->loop, 50);
        assert_true(docwalk_busy(f->w));
        docwalk_free(f->w);
        f->w = NULL;
        tu_loop_drain(&f->loop, f->h, WATCHDOG_MS);
        assert_int_equal(r->hits, 1);
    }
    /* free while the request is in flight, from outside any callback */
    {
        struct tu_route *r = serve(f, "/stall.xml", NULL);
        r->never = true;
        walk_new(f);
        log_reset(f);
        assert_int_equal(
            docwalk_start(f->w, tu_httpd_url(f->srv, "/stall.xml")), 0);
        TU_LOOP_UNTIL(&f->loop, r->hits == 1, WATCHDOG_MS);
        docwalk_free(f->w);
        f->w = NULL;
        tu_loop_drain(&f->loop, f->h, WATCHDOG_MS);
        assert_int_equal(f->n_done, 0);
    }
    /* free before the walk's first step ran */
    {
        unsigned before = tu_httpd_hits(f->srv, "/a.xml");
        walk_new(f);
        assert_int_equal(docwalk_start(f->w, tu_httpd_url(f->srv, "/a.xml")),
                         0);
        docwalk_free(f->w);
        f->w = NULL;
        tu_loop_run_for(&f->loop, 30);
        assert_int_equal(tu_httpd_hits(f->srv, "/a.xml"), before);
    }
}

/* docwalk/busy_and_restart: a second start while busy is RS_ESTATE and
 * leaves the first walk alone; after on_done a new walk works, from
 * outside or from inside on_done, and counts afresh. */
static void
test_busy_and_restart(void **state)
{
    struct fixture *f = *state;

    serve(f, "/a.xml", URLSET RL_MD URL("{B}/1") URL("{B}/2") END_URLSET);
    serve(f, "/b.xml", URLSET RL_MD URL("{B}/3") END_URLSET);
    walk_new(f);
    log_reset(f);
    assert_int_equal(docwalk_start(f->w, tu_httpd_url(f->srv, "/a.xml")), 0);
    assert_int_equal(docwalk_start(f->w, tu_httpd_url(f->srv, "/b.xml")),
                     RS_ESTATE);
    assert_int_equal(docwalk_start(f->w, "ftp://x/"), RS_ESTATE);
    f->start_in_head = "http://127.0.0.1:1/b.xml";
    TU_LOOP_UNTIL(&f->loop, f->n_done == 1, WATCHDOG_MS);
    assert_null(f->start_in_head);
    assert_true(f->busy_in_head);
    assert_int_equal(f->start_in_head_rc, RS_ESTATE);
    assert_int_equal(f->done_rc, 0);
    assert_string_equal(f->log, "H /a.xml E /1 E /2 D /a.xml");
    assert_int_equal(tu_httpd_hits(f->srv, "/b.xml"), 0);
    assert_int_equal(docwalk_entries(f->w), 2);

    /* the same URL again: the seen set was cleared */
    walk(f, "/a.xml");
    assert_int_equal(f->done_rc, 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/a.xml"), 2);
    walk(f, "/b.xml");
    assert_int_equal(f->done_rc, 0);
    assert_int_equal(docwalk_docs(f->w), 1);
    assert_int_equal(docwalk_entries(f->w), 1);

    /* restart from on_done, after a failure */
    {
        static char again[128];
        snprintf(again, sizeof(again), "%s", tu_httpd_url(f->srv, "/a.xml"));
        f->restart_url = again;
    }
    log_reset(f);
    assert_int_equal(docwalk_start(f->w, tu_httpd_url(f->srv, "/missing.xml")),
                     0);
    TU_LOOP_UNTIL(&f->loop, f->n_done == 1, WATCHDOG_MS);
    assert_int_equal(f->done_rc, RS_ENOTFOUND);
    assert_int_equal(f->restart_rc, 0);
    assert_true(docwalk_busy(f->w));
    TU_LOOP_UNTIL(&f->loop, f->n_done == 2, WATCHDOG_MS);
    assert_int_equal(f->done_rc, 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/a.xml"), 3);
    assert_int_equal(docwalk_entries(f->w), 2);
}

/* docwalk/alloc_failures: the Nth allocation fails, for every N through a
 * two-document walk: each run either refuses to start or ends in exactly
 * one on_done (RS_ENOMEM or success), with nothing leaked. */
static void
test_alloc_failures(void **state)
{
    struct fixture *f = *state;
    unsigned long n, total, ok_runs = 0, enomem = 0;

    serve(f, "/idx.xml", INDEX RL_MD KID("{B}/a.xml") END_INDEX);
    serve(f, "/a.xml", URLSET RL_MD URL("{B}/1") URL("{B}/2") END_URLSET);
    /* How many allocations a clean walk makes (start to on_done). */
    walk_new(f);
    log_reset(f);
    tu_alloc_fail_at(ULONG_MAX);
    assert_int_equal(docwalk_start(f->w, tu_httpd_url(f->srv, "/idx.xml")), 0);
    TU_LOOP_UNTIL(&f->loop, f->n_done == 1, WATCHDOG_MS);
    total = tu_alloc_count();
    tu_alloc_fail_at(0);
    assert_int_equal(f->done_rc, 0);
    docwalk_free(f->w);
    f->w = NULL;
    assert_true(total > 10);
    for (n = 1; n <= total + 1; n++) {
        int rc;

        walk_new(f);
        log_reset(f);
        tu_alloc_fail_at(n);
        rc = docwalk_start(f->w, tu_httpd_url(f->srv, "/idx.xml"));
        if (rc != 0) {
            tu_alloc_fail_at(0);
            assert_int_equal(rc, RS_ENOMEM);
        } else {
            TU_LOOP_UNTIL(&f->loop, f->n_done == 1, WATCHDOG_MS);
            tu_alloc_fail_at(0);
            if (f->done_rc == 0) {
                assert_int_equal(f->n_entry, 2);
                ok_runs++;
            } else {
                /* out of memory is said as such, never as a bad document */
                assert_int_equal(f->done_rc, RS_ENOMEM);
                enomem++;
            }
        }
        docwalk_free(f->w);
        f->w = NULL;
        tu_loop_drain(&f->loop, f->h, WATCHDOG_MS);
    }
    assert_true(ok_runs >= 1);          /* at least the run past the end */
    assert_true(enomem > 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        { "docwalk/api_edges", test_api_edges, setup, teardown, NULL },
        { "docwalk/resourcelist", test_resourcelist, setup, teardown, NULL },
        { "docwalk/index_three_parts", test_index_three_parts, setup,
          teardown, NULL },
        { "docwalk/changelist_index_from_order",
          test_changelist_index_from_order, setup, teardown, NULL },
        { "docwalk/next_pages", test_next_pages, setup, teardown, NULL },
        { "docwalk/loops", test_loops, setup, teardown, NULL },
        { "docwalk/max_docs", test_max_docs, setup, teardown, NULL },
        { "docwalk/on_head_skip", test_on_head_skip, setup, teardown, NULL },
        { "docwalk/on_child_skip", test_on_child_skip, setup, teardown,
          NULL },
        { "docwalk/loc_resolution", test_loc_resolution, setup, teardown,
          NULL },
        { "docwalk/non_http_loc", test_non_http_loc, setup, teardown, NULL },
        { "docwalk/not_found", test_not_found, setup, teardown, NULL },
        { "docwalk/retry_after", test_retry_after, setup, teardown, NULL },
        { "docwalk/retries_exhausted", test_retries_exhausted, setup,
          teardown, NULL },
        { "docwalk/cut_after_entries", test_cut_after_entries, setup,
          teardown, NULL },
        { "docwalk/later_page_retried", test_later_page_retried, setup,
          teardown, NULL },
        { "docwalk/timeout", test_timeout, setup, teardown, NULL },
        { "docwalk/malformed", test_malformed, setup, teardown, NULL },
        { "docwalk/big_streamed", test_big_streamed, setup, teardown, NULL },
        { "docwalk/free_in_callbacks", test_free_in_callbacks, setup,
          teardown, NULL },
        { "docwalk/busy_and_restart", test_busy_and_restart, setup,
          teardown, NULL },
        { "docwalk/alloc_failures", test_alloc_failures, setup, teardown,
          NULL },
    };
    int rc;

    signal(SIGPIPE, SIG_IGN);
    unsetenv("http_proxy");
    unsetenv("HTTP_PROXY");
    unsetenv("all_proxy");
    unsetenv("ALL_PROXY");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rc = cmocka_run_group_tests_name("docwalk", tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
