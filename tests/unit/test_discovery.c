/* test_discovery.c - client/discovery.c (finding a Source's
 * Capability Lists) against a real evhttp server (tu_httpd.h) on 127.0.0.1
 * on the discovery's own event_base, serving a per-test table (path or path
 * prefix -> status, headers, body, stalls) and counting requests per path:
 * Capability Lists, Source Descriptions, site roots falling back to
 * /.well-known/resourcesync and robots.txt, HTML <link>, Link headers,
 * rel="up", and the hostile cases (loops, 500s, garbage, too many, too
 * big, the client going away). Every test runs under a watchdog and ends
 * with nothing left on the loop, clean under ASan. */
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

#include "discovery.h"
#include "rs_alloc.h"
#include "rs_http.h"

#define WATCHDOG_MS 20000u

/* Documents; {B} stands for http://127.0.0.1:PORT of the test's server. */
#define XMLDECL "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
#define NS "xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" " \
           "xmlns:rs=\"http://www.openarchives.org/rs/terms/\""
#define URLSET XMLDECL "<urlset " NS ">\n"
#define END_URLSET "</urlset>\n"
#define CAP(loc, cap) \
    "<url><loc>" loc "</loc><rs:md capability=\"" cap "\"/></url>\n"
#define CAPLIST(entries) \
    URLSET "<rs:md capability=\"capabilitylist\"/>\n" entries END_URLSET
#define DESCRIPTION(entries) \
    URLSET "<rs:md capability=\"description\"/>\n" entries END_URLSET
/* A Capability List offering only a Resource List */
#define SIMPLE_CAPLIST CAPLIST(CAP("{B}/rl.xml", "resourcelist"))
#define CT_XML "Content-Type: application/xml"
#define CT_HTML "Content-Type: text/html"
#define CT_TEXT "Content-Type: text/plain"

/* ------------------------------------------------------------ fixture */

struct fixture {
    struct tu_loop loop;
    struct tu_httpd *srv;
    /* the client */
    struct rs_http *h;
    struct discovery *d;
    unsigned n_done;
    int done_rc;
    char done_err[2048];
    struct discovery_result *res;   /* the last result, ours to free */
    bool restart_in_cb;         /* start again from the callback: refused */
    int restart_rc;
};

/* ------------------------------------------------------- the discovery */

static void
on_done(void *ud, int rc, const char *err, struct discovery_result *res)
{
    struct fixture *f = ud;

    f->n_done++;
    f->done_rc = rc;
    assert_non_null(err);
    snprintf(f->done_err, sizeof(f->done_err), "%s", err);
    if (rc == 0) {
        assert_non_null(res);
        assert_true(res->nsets >= 1);
        assert_non_null(res->sets);
    } else {
        assert_null(res);
        assert_true(err[0] != '\0');
    }
    discovery_result_free(f->res);
    f->res = res;
    if (f->restart_in_cb) {
        f->restart_in_cb = false;
        f->restart_rc = discovery_start(f->d, "http://127.0.0.1:1/");
    }
}

static void
disc_new(struct fixture *f)
{
    f->d = discovery_new(f->loop.base, f->h, on_done, f);
    assert_non_null(f->d);
}

/* Discover from {B}path (or an absolute URL) to the callback, which runs
 * exactly once and never inside start. */
static void
discover(struct fixture *f, const char *path)
{
    unsigned before = f->n_done;
    const char *url = path[0] == '/' ? tu_httpd_url(f->srv, path) : path;

    assert_int_equal(discovery_start(f->d, url), 0);
    assert_int_equal(f->n_done, before);
    TU_LOOP_UNTIL(&f->loop, f->n_done == before + 1, WATCHDOG_MS);
    tu_loop_run_for(&f->loop, 20);     /* and not again */
    assert_int_equal(f->n_done, before + 1);
}

static void
assert_str(const char *got, const char *want)
{
    if (want == NULL) {
        assert_null(got);
        return;
    }
    assert_non_null(got);
    assert_string_equal(got, want);
}

/* The set holds the caplist and the resourcelist at {B}paths, and nothing
 * else (a set as SIMPLE_CAPLIST gives). */
static void
assert_simple_set(struct fixture *f, const struct discovery_set *s,
                  const char *caplist)
{
    assert_str(s->caplist, tu_httpd_url(f->srv, caplist));
    assert_str(s->resourcelist, tu_httpd_url(f->srv, "/rl.xml"));
    assert_null(s->resourcedump);
    assert_null(s->changelist);
    assert_null(s->changedump);
    for (int k = 0; k < 2; k++) {
        assert_null(s->ws[k]);
        assert_null(s->topic[k]);
        assert_null(s->hub[k]);
    }
}

/* ------------------------------------------------- setup / teardown */

static int
setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    tu_loop_init(&f->loop);
    f->srv = tu_httpd_new(f->loop.base);
    f->h = rs_http_new(f->loop.base, NULL);
    assert_non_null(f->h);
    *state = f;
    return 0;
}

/* The discovery, then the client (completing whatever is in flight), then
 * the server; after that the loop must hold nothing at all. */
static int
teardown(void **state)
{
    struct fixture *f = *state;

    tu_alloc_fail_at(0);
    discovery_free(f->d);
    discovery_result_free(f->res);
    rs_http_free(f->h);
    tu_httpd_free(f->srv);
    tu_loop_cleanup(&f->loop);
    free(f);
    return 0;
}

/* ------------------------------------------------------------- tests */

/* discovery/api_edges: NULLs are no-ops; start refuses non-http(s) URLs
 * and a second start while busy, without a callback; a discovery can be
 * started again after its callback (not from inside it). */
static void
test_api_edges(void **state)
{
    struct fixture *f = *state;
    unsigned long n;

    discovery_free(NULL);
    discovery_result_free(NULL);
    disc_new(f);
    assert_int_equal(discovery_start(f->d, "ftp://127.0.0.1/"), RS_EINVAL);
    assert_int_equal(discovery_start(f->d, "/cl.xml"), RS_EINVAL);
    assert_int_equal(discovery_start(f->d, "ws://127.0.0.1:9/x"), RS_EINVAL);
    tu_loop_run_for(&f->loop, 30);
    assert_int_equal(f->n_done, 0);
    assert_int_equal(f->srv->requests, 0);

    tu_httpd_add(f->srv, "/cl.xml", 0, CT_XML, SIMPLE_CAPLIST);
    assert_int_equal(discovery_start(f->d, tu_httpd_url(f->srv, "/cl.xml")), 0);
    assert_int_equal(discovery_start(f->d, tu_httpd_url(f->srv, "/cl.xml")),
                     RS_ESTATE);
    f->restart_in_cb = true;
    TU_LOOP_UNTIL(&f->loop, f->n_done == 1, WATCHDOG_MS);
    assert_int_equal(f->done_rc, 0);
    /* the callback may start the next discovery */
    assert_int_equal(f->restart_rc, 0);
    TU_LOOP_UNTIL(&f->loop, f->n_done == 2, WATCHDOG_MS);
    assert_int_equal(f->done_rc, RS_ENOTFOUND);
    assert_non_null(strstr(f->done_err, "http://127.0.0.1:1/"));
    /* and again, from outside */
    discover(f, "/cl.xml");
    assert_int_equal(f->done_rc, 0);
    assert_int_equal(f->res->nsets, 1);
    assert_simple_set(f, &f->res->sets[0], "/cl.xml");
    assert_int_equal(tu_httpd_hits(f->srv, "/cl.xml"), 2);

    /* discovery_new under allocation failure */
    for (n = 1; n < 10; n++) {
        struct discovery *d;
        tu_alloc_fail_at(n);
        d = discovery_new(f->loop.base, f->h, on_done, f);
        tu_alloc_fail_at(0);
        if (d != NULL) {
            discovery_free(d);
            break;
        }
    }
    assert_true(n > 1 && n < 10);
}

/* discovery/from_caplist: every capability a Capability List offers lands
 * in its field: lists and dumps (the first of each), ws:// and wss://
 * channels by kind (alpha "change-notification" spelling too), WebSub
 * topics with their rel="hub" (resolved against the list). Nothing else is
 * fetched. */
static void
test_from_caplist(void **state)
{
    struct fixture *f = *state;
    const struct discovery_set *s;

    tu_httpd_add(f->srv, "/ds/cl.xml", 0, CT_XML,
                 URLSET
                 "<rs:ln rel=\"up\" href=\"{B}/.well-known/resourcesync\"/>\n"
                 "<rs:md capability=\"capabilitylist\"/>\n"
                 CAP("{B}/ds/rl.xml", "resourcelist")
                 CAP("{B}/ds/rl-second.xml", "resourcelist")
                 CAP("{B}/ds/rd.xml", "resourcedump")
                 CAP("{B}/ds/changes.xml", "changelist")
                 CAP("{B}/ds/cd.xml", "changedump")
                 /* an http notification without a hub is no WebSub topic */
                 CAP("{B}/ds/topic/nohub", "changelist-notification")
                 CAP("ws://127.0.0.1:9/channel/changes", "change-notification")
                 CAP("wss://hub.example:8443/channel/fw",
                     "framework-notification")
                 CAP("ws://127.0.0.1:9/channel/second", "change-notification")
                 "<url><loc>{B}/ds/topic/changes</loc>"
                 "<rs:md capability=\"changelist-notification\"/>"
                 "<rs:ln rel=\"hub\" href=\"../hub\"/></url>\n"
                 "<url><loc>{B}/ds/topic/fw</loc>"
                 "<rs:md capability=\"framework-notification\"/>"
                 "<rs:ln rel=\"hub\" href=\"https://hub.example/websub\"/>"
                 "</url>\n"
                 END_URLSET);
    disc_new(f);
    discover(f, "/ds/cl.xml");
    assert_int_equal(f->done_rc, 0);
    assert_string_equal(f->done_err, "");
    assert_null(f->res->description);
    assert_int_equal(f->res->nsets, 1);
    s = &f->res->sets[0];
    assert_str(s->caplist, tu_httpd_url(f->srv, "/ds/cl.xml"));
    assert_str(s->resourcelist, tu_httpd_url(f->srv, "/ds/rl.xml"));
    assert_str(s->resourcedump, tu_httpd_url(f->srv, "/ds/rd.xml"));
    assert_str(s->changelist, tu_httpd_url(f->srv, "/ds/changes.xml"));
    assert_str(s->changedump, tu_httpd_url(f->srv, "/ds/cd.xml"));
    assert_str(s->ws[DISCOVERY_CHANGE], "ws://127.0.0.1:9/channel/changes");
    assert_str(s->ws[DISCOVERY_FRAMEWORK],
               "wss://hub.example:8443/channel/fw");
    assert_str(s->topic[DISCOVERY_CHANGE],
               tu_httpd_url(f->srv, "/ds/topic/changes"));
    assert_str(s->hub[DISCOVERY_CHANGE], tu_httpd_url(f->srv, "/hub"));
    assert_str(s->topic[DISCOVERY_FRAMEWORK],
               tu_httpd_url(f->srv, "/ds/topic/fw"));
    assert_str(s->hub[DISCOVERY_FRAMEWORK], "https://hub.example/websub");
    assert_int_equal(tu_httpd_hits(f->srv, "/ds/cl.xml"), 1);
    assert_int_equal(f->srv->requests, 1);   /* up, well-known: not needed */
    assert_non_null(strstr(f->srv->accept, "application/xml"));

    /* the same list served as text/plain, with a BOM or without an XML
     * declaration: still read as XML */
    tu_httpd_add(f->srv, "/plain/cl.xml", 0, CT_TEXT,
                 "\xef\xbb\xbf" SIMPLE_CAPLIST);
    discover(f, "/plain/cl.xml");
    assert_int_equal(f->done_rc, 0);
    assert_simple_set(f, &f->res->sets[0], "/plain/cl.xml");
    tu_httpd_add(f->srv, "/bare/cl.xml", 0, NULL,
                 "<urlset " NS "><rs:md capability=\"capabilitylist\"/>"
                 CAP("{B}/rl.xml", "resourcelist") END_URLSET);
    discover(f, "/bare/cl.xml");
    assert_int_equal(f->done_rc, 0);
    assert_simple_set(f, &f->res->sets[0], "/bare/cl.xml");
}

/* discovery/from_description: a Source Description listing two Capability
 * Lists gives two sets, in its order, and names itself. */
static void
test_from_description(void **state)
{
    struct fixture *f = *state;

    tu_httpd_add(f->srv, "/.well-known/resourcesync", 0, CT_XML,
                 DESCRIPTION(CAP("{B}/s1/cl.xml", "capabilitylist")
                             CAP("{B}/s2/cl.xml", "capabilitylist")));
    tu_httpd_add(f->srv, "/s1/cl.xml", 0, CT_XML,
                 CAPLIST(CAP("{B}/s1/rl.xml", "resourcelist")));
    tu_httpd_add(f->srv, "/s2/cl.xml", 0, CT_XML,
                 CAPLIST(CAP("{B}/s2/changes.xml", "changelist")
                         CAP("ws://127.0.0.1:9/channel/s2",
                             "change-notification")));
    disc_new(f);
    discover(f, "/.well-known/resourcesync");
    assert_int_equal(f->done_rc, 0);
    assert_str(f->res->description,
               tu_httpd_url(f->srv, "/.well-known/resourcesync"));
    assert_int_equal(f->res->nsets, 2);
    assert_str(f->res->sets[0].caplist, tu_httpd_url(f->srv, "/s1/cl.xml"));
    assert_str(f->res->sets[0].resourcelist,
               tu_httpd_url(f->srv, "/s1/rl.xml"));
    assert_null(f->res->sets[0].changelist);
    assert_str(f->res->sets[1].caplist, tu_httpd_url(f->srv, "/s2/cl.xml"));
    assert_null(f->res->sets[1].resourcelist);
    assert_str(f->res->sets[1].changelist,
               tu_httpd_url(f->srv, "/s2/changes.xml"));
    assert_str(f->res->sets[1].ws[DISCOVERY_CHANGE],
               "ws://127.0.0.1:9/channel/s2");
    assert_int_equal(tu_httpd_hits(f->srv, "/s1/cl.xml"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/s2/cl.xml"), 1);
    assert_int_equal(f->srv->misses, 0);     /* robots.txt not needed */
}

/* discovery/site_root_fallback: a site root whose page names nothing falls
 * back to /.well-known/resourcesync. */
static void
test_site_root_fallback(void **state)
{
    struct fixture *f = *state;

    tu_httpd_add(f->srv, "/", 0, CT_HTML,
                 "<!DOCTYPE html>\n<html><head><title>Home</title>"
                 "<link rel=\"stylesheet\" href=\"/s.css\"></head>"
                 "<body><a href=\"/cl.xml\">not a link element</a></body>"
                 "</html>\n");
    tu_httpd_add(f->srv, "/.well-known/resourcesync", 0, CT_XML,
                 DESCRIPTION(CAP("{B}/cl.xml", "capabilitylist")));
    tu_httpd_add(f->srv, "/cl.xml", 0, CT_XML, SIMPLE_CAPLIST);
    disc_new(f);
    discover(f, "/");
    assert_int_equal(f->done_rc, 0);
    assert_int_equal(f->res->nsets, 1);
    assert_simple_set(f, &f->res->sets[0], "/cl.xml");
    assert_str(f->res->description,
               tu_httpd_url(f->srv, "/.well-known/resourcesync"));
    assert_int_equal(tu_httpd_hits(f->srv, "/"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/.well-known/resourcesync"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/cl.xml"), 1);

    /* a deep start URL falls back to its origin's well-known */
    discover(f, "/some/where/deep.html?q=1");
    assert_int_equal(f->done_rc, 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/.well-known/resourcesync"), 2);
}

/* discovery/html_link: <link rel="resourcesync" href=...> in an HTML page
 * (relative, resolved against the page), other links ignored; the
 * fallback is not needed. */
static void
test_html_link(void **state)
{
    struct fixture *f = *state;

    tu_httpd_add(f->srv, "/site/page.html", 0, CT_HTML,
                 "<!DOCTYPE html>\n<html><head>"
                 "<link rel=\"stylesheet\" href=\"/other.xml\">\n"
                 "<link rel=\"alternate ResourceSync\" href=\"../cl.xml\">\n"
                 "</head><body>hello</body></html>\n");
    tu_httpd_add(f->srv, "/cl.xml", 0, CT_XML, SIMPLE_CAPLIST);
    disc_new(f);
    discover(f, "/site/page.html");
    assert_int_equal(f->done_rc, 0);
    assert_simple_set(f, &f->res->sets[0], "/cl.xml");
    assert_int_equal(f->srv->requests, 2);
    assert_int_equal(f->srv->misses, 0);
}

/* discovery/link_header: any resource whose Link header says
 * rel="resourcesync" leads to the Capability List (resolved against the
 * resource's URL, after redirects). */
static void
test_link_header(void **state)
{
    struct fixture *f = *state;

    tu_httpd_add(f->srv, "/res/a.txt", 0,
                 CT_TEXT "\n"
                 "Link: <http://127.0.0.1:1/x>; rel=\"describedby\"\n"
                 "Link: <../cl.xml>; rel=\"resourcesync\"",
                 "just some text\n");
    tu_httpd_add(f->srv, "/moved/deep/b.txt", 302, "Location: {B}/res/a.txt",
                 "moved");
    tu_httpd_add(f->srv, "/go", 301, "Location: {B}/real/cl.xml", "moved");
    tu_httpd_add(f->srv, "/real/cl.xml", 0, CT_XML,
                 CAPLIST("<url><loc>{B}/real/t</loc>"
                         "<rs:md capability=\"changelist-notification\"/>"
                         "<rs:ln rel=\"hub\" href=\"hub\"/></url>\n"));
    tu_httpd_add(f->srv, "/cl.xml", 0, CT_XML, SIMPLE_CAPLIST);
    disc_new(f);
    discover(f, "/res/a.txt");
    assert_int_equal(f->done_rc, 0);
    assert_simple_set(f, &f->res->sets[0], "/cl.xml");
    assert_int_equal(f->srv->requests, 2);

    /* ../cl.xml is resolved against where the redirect landed */
    discover(f, "/moved/deep/b.txt");
    assert_int_equal(f->done_rc, 0);
    assert_simple_set(f, &f->res->sets[0], "/cl.xml");
    /* a redirected Capability List is named by its final URL, and its
     * relative hub is resolved against that */
    discover(f, "/go");
    assert_int_equal(f->done_rc, 0);
    assert_str(f->res->sets[0].caplist, tu_httpd_url(f->srv, "/real/cl.xml"));
    assert_str(f->res->sets[0].topic[DISCOVERY_CHANGE],
               tu_httpd_url(f->srv, "/real/t"));
    assert_str(f->res->sets[0].hub[DISCOVERY_CHANGE],
               tu_httpd_url(f->srv, "/real/hub"));
    assert_int_equal(f->srv->misses, 0);
}

/* discovery/resourcelist_up: a Resource List points rel="up" at its
 * Capability List. */
static void
test_resourcelist_up(void **state)
{
    struct fixture *f = *state;

    tu_httpd_add(f->srv, "/rl.xml", 0, CT_XML,
                 URLSET "<rs:ln rel=\"up\" href=\"{B}/cl.xml\"/>\n"
                 "<rs:md capability=\"resourcelist\" "
                 "at=\"2013-01-03T09:00:00Z\"/>\n"
                 "<url><loc>{B}/r1</loc></url>\n" END_URLSET);
    tu_httpd_add(f->srv, "/cl.xml", 0, CT_XML, SIMPLE_CAPLIST);
    disc_new(f);
    discover(f, "/rl.xml");
    assert_int_equal(f->done_rc, 0);
    assert_int_equal(f->res->nsets, 1);
    assert_simple_set(f, &f->res->sets[0], "/cl.xml");
    assert_null(f->res->description);
    assert_int_equal(f->srv->requests, 2);
}

/* discovery/robots_sitemap: nothing at the start or the well-known URI,
 * robots.txt's Sitemap: lines name the Capability List. */
static void
test_robots_sitemap(void **state)
{
    struct fixture *f = *state;

    tu_httpd_add(f->srv, "/robots.txt", 0, CT_TEXT,
                 "# robots\r\nUser-agent: *\r\nDisallow: /private\r\n"
                 "sitemap: not a url at all\r\n"
                 "Sitemap: {B}/cl.xml\r\n");
    tu_httpd_add(f->srv, "/cl.xml", 0, CT_XML, SIMPLE_CAPLIST);
    disc_new(f);
    discover(f, "/start.html");
    assert_int_equal(f->done_rc, 0);
    assert_simple_set(f, &f->res->sets[0], "/cl.xml");
    assert_int_equal(tu_httpd_hits(f->srv, "/robots.txt"), 1);
    assert_int_equal(f->srv->misses, 2);     /* /start.html, the well-known */
}

/* discovery/nothing_found: every probe 404 (or not ResourceSync) ->
 * RS_ENOTFOUND, and the error names each URL tried and what it gave. */
static void
test_nothing_found(void **state)
{
    struct fixture *f = *state;

    disc_new(f);
    discover(f, "/nothing.html");
    assert_int_equal(f->done_rc, RS_ENOTFOUND);
    assert_null(f->res);
    assert_non_null(strstr(f->done_err, tu_httpd_url(f->srv, "/nothing.html")));
    assert_non_null(
        strstr(f->done_err,
               tu_httpd_url(f->srv, "/.well-known/resourcesync: HTTP 404")));
    assert_non_null(
        strstr(f->done_err, tu_httpd_url(f->srv, "/robots.txt: HTTP 404")));
    assert_int_equal(f->srv->misses, 3);

    /* an XML page that is no ResourceSync document; a list without up;
     * a Source Description listing nothing */
    tu_httpd_add(f->srv, "/feed.xml", 0, CT_XML,
                 XMLDECL "<rss version=\"2.0\"><channel/></rss>\n");
    tu_httpd_add(f->srv, "/.well-known/resourcesync", 0, CT_XML,
                 DESCRIPTION(""));
    tu_httpd_add(f->srv, "/robots.txt", 0, CT_TEXT,
                 "Sitemap: {B}/lonely.xml\n");
    tu_httpd_add(f->srv, "/lonely.xml", 0, CT_XML,
                 URLSET "<rs:md capability=\"resourcelist\" "
                 "at=\"2013-01-03T09:00:00Z\"/>\n" END_URLSET);
    discover(f, "/feed.xml");
    assert_int_equal(f->done_rc, RS_ENOTFOUND);
    assert_non_null(strstr(f->done_err, "not a ResourceSync document"));
    assert_non_null(strstr(f->done_err, "without Capability Lists"));
    assert_non_null(strstr(f->done_err, tu_httpd_url(f->srv, "/lonely.xml")));
    assert_non_null(strstr(f->done_err, "rel=\"up\""));
}

/* discovery/redirect_loop_and_500s: a redirect loop and 500s everywhere
 * end in a clean RS_ENOTFOUND that says what each gave. */
static void
test_redirect_loop_and_500s(void **state)
{
    struct fixture *f = *state;

    tu_httpd_add(f->srv, "/loop", 302, "Location: {B}/loop", "again");
    tu_httpd_add(f->srv, "/.well-known/resourcesync", 500, CT_TEXT, "oops");
    tu_httpd_add(f->srv, "/robots.txt", 503, CT_TEXT, "later");
    disc_new(f);
    discover(f, "/loop");
    assert_int_equal(f->done_rc, RS_ENOTFOUND);
    assert_non_null(strstr(f->done_err, tu_httpd_url(f->srv, "/loop")));
    assert_non_null(strstr(f->done_err, "HTTP 500"));
    assert_non_null(strstr(f->done_err, "HTTP 503"));
    assert_true(tu_httpd_hits(f->srv, "/loop") >= 2 &&
                tu_httpd_hits(f->srv, "/loop") <= 7);
    assert_int_equal(tu_httpd_hits(f->srv, "/.well-known/resourcesync"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/robots.txt"), 1);

    /* a server that is not there at all */
    discover(f, "http://127.0.0.1:1/cl.xml");
    assert_int_equal(f->done_rc, RS_ENOTFOUND);
    assert_non_null(strstr(f->done_err, "http://127.0.0.1:1/cl.xml"));
}

/* discovery/hostile: loops through Descriptions and rel="up", duplicates,
 * a Description listing more than the probe cap, a body over the size cap,
 * an entry that is not http: each ends cleanly, each URL read once. */
static void
test_hostile(void **state)
{
    struct fixture *f = *state;
    struct tu_route *r;
    char *big;
    size_t n;

    /* a Description listing itself and one list twice */
    tu_httpd_add(f->srv, "/desc.xml", 0, CT_XML,
                 DESCRIPTION(CAP("{B}/desc.xml", "capabilitylist")
                             CAP("{B}/cl.xml", "capabilitylist")
                             CAP("{B}/cl.xml", "capabilitylist")));
    tu_httpd_add(f->srv, "/cl.xml", 0, CT_XML, SIMPLE_CAPLIST);
    disc_new(f);
    discover(f, "/desc.xml");
    assert_int_equal(f->done_rc, 0);
    assert_int_equal(f->res->nsets, 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/desc.xml"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/cl.xml"), 1);

    /* two lists pointing up at each other */
    tu_httpd_add(f->srv, "/a.xml", 0, CT_XML,
                 URLSET "<rs:ln rel=\"up\" href=\"{B}/b.xml\"/>\n"
                 "<rs:md capability=\"resourcelist\" "
                 "at=\"2013-01-03T09:00:00Z\"/>\n" END_URLSET);
    tu_httpd_add(f->srv, "/b.xml", 0, CT_XML,
                 URLSET "<rs:ln rel=\"up\" href=\"{B}/a.xml\"/>\n"
                 "<rs:md capability=\"changelist\" "
                 "from=\"2013-01-03T09:00:00Z\"/>\n" END_URLSET);
    discover(f, "/a.xml");
    assert_int_equal(f->done_rc, RS_ENOTFOUND);
    assert_int_equal(tu_httpd_hits(f->srv, "/a.xml"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/b.xml"), 1);

    /* a Description listing 100 Capability Lists: at most 64 probes */
    {
        size_t cap = 100 * 128 + 1024, len = 0;
        char *desc = malloc(cap);
        unsigned before = f->srv->requests;
        assert_non_null(desc);
        len += (size_t)snprintf(desc + len, cap - len, "%s",
                                URLSET "<rs:md capability=\"description\"/>\n");
        for (int i = 0; i < 100; i++)
            len += (size_t)snprintf(desc + len, cap - len,
                                    CAP("{B}/many/%03d.xml", "capabilitylist"),
                                    i);
        len += (size_t)snprintf(desc + len, cap - len, "%s", END_URLSET);
        assert_true(len < cap);
        tu_httpd_add(f->srv, "/many.xml", 0, CT_XML, desc);
        free(desc);
        r = tu_httpd_add(f->srv, "/many/", 0, CT_XML, SIMPLE_CAPLIST);
        r->prefix = true;
        discover(f, "/many.xml");
        assert_int_equal(f->done_rc, 0);
        assert_int_equal(f->res->nsets, 63);
        assert_str(f->res->sets[62].caplist,
                   tu_httpd_url(f->srv, "/many/062.xml"));
        assert_int_equal(r->hits, 63);
        assert_int_equal(f->srv->requests - before, 64);
    }

    /* a 9 MB "document": too large, noted, and the walk goes on */
    n = 9u << 20;
    big = malloc(n + 1);
    assert_non_null(big);
    memset(big, ' ', n);
    memcpy(big, XMLDECL, strlen(XMLDECL));
    big[n] = '\0';
    tu_httpd_add(f->srv, "/huge.xml", 0, CT_XML, big);
    free(big);
    discover(f, "/huge.xml");
    assert_int_equal(f->done_rc, RS_ENOTFOUND);
    assert_non_null(strstr(f->done_err, "too large"));

    /* Link header, HTML and robots.txt targets that are not http(s) */
    tu_httpd_add(f->srv, "/badlinks.html", 0,
                 CT_HTML "\nLink: <file:///etc/passwd>; rel=\"resourcesync\"",
                 "<html><head><link rel=\"resourcesync\" "
                 "href=\"javascript:alert(1)\"></head></html>");
    discover(f, "/badlinks.html");
    assert_int_equal(f->done_rc, RS_ENOTFOUND);
    assert_null(strstr(f->done_err, "passwd"));
}

/* discovery/free_in_flight: discovery_free while a request is out: no
 * callback, the request is cancelled, nothing leaks or stays on the loop. */
static void
test_free_in_flight(void **state)
{
    struct fixture *f = *state;
    struct tu_route *r;

    r = tu_httpd_add(f->srv, "/stall", 0, NULL, NULL);
    r->never = true;
    disc_new(f);
    assert_int_equal(discovery_start(f->d, tu_httpd_url(f->srv, "/stall")), 0);
    TU_LOOP_UNTIL(&f->loop, r->hits == 1, WATCHDOG_MS);
    discovery_free(f->d);
    f->d = NULL;
    tu_loop_drain(&f->loop, f->h, WATCHDOG_MS);
    tu_loop_run_for(&f->loop, 30);
    assert_int_equal(f->n_done, 0);

    /* before the first probe went out */
    disc_new(f);
    assert_int_equal(discovery_start(f->d, tu_httpd_url(f->srv, "/stall")), 0);
    discovery_free(f->d);
    f->d = NULL;
    tu_loop_run_for(&f->loop, 30);
    assert_int_equal(r->hits, 1);
    assert_int_equal(f->n_done, 0);
}

/* discovery/http_free_in_flight: the client is freed under a discovery in
 * flight (shutdown in the other order): the callback still runs once, with
 * an error, and discovery_free afterwards is safe. */
static void
test_http_free_in_flight(void **state)
{
    struct fixture *f = *state;
    struct tu_route *r;

    r = tu_httpd_add(f->srv, "/stall", 0, NULL, NULL);
    r->never = true;
    disc_new(f);
    assert_int_equal(discovery_start(f->d, tu_httpd_url(f->srv, "/stall")), 0);
    TU_LOOP_UNTIL(&f->loop, r->hits == 1, WATCHDOG_MS);
    rs_http_free(f->h);
    f->h = NULL;
    assert_int_equal(f->n_done, 1);
    assert_int_equal(f->done_rc, RS_ECANCELED);
    assert_null(f->res);
    discovery_free(f->d);
    f->d = NULL;
    tu_loop_run_for(&f->loop, 30);
    assert_int_equal(f->n_done, 1);
}

/* discovery/alloc_failures: the Nth allocation fails, for every N through
 * a Description -> Capability List discovery: each run either refuses to
 * start or calls back exactly once with success or RS_ENOMEM, never a
 * misleading "not found"; nothing leaks. */
static void
test_alloc_failures(void **state)
{
    struct fixture *f = *state;
    unsigned long n, total, ok_runs = 0, enomem = 0;

    tu_httpd_add(f->srv, "/", 0,
                 CT_HTML "\nLink: </.well-known/resourcesync>; "
                         "rel=\"resourcesync\"",
                 "<html><head><link rel=\"resourcesync\" "
                 "href=\"/.well-known/resourcesync\"></head></html>");
    tu_httpd_add(f->srv, "/.well-known/resourcesync", 0, CT_XML,
                 DESCRIPTION(CAP("{B}/cl.xml", "capabilitylist")));
    tu_httpd_add(f->srv, "/cl.xml", 0, CT_XML,
                 CAPLIST(CAP("{B}/rl.xml", "resourcelist")
                         CAP("ws://127.0.0.1:9/c", "change-notification")));
    disc_new(f);
    tu_alloc_fail_at(ULONG_MAX);
    discover(f, "/");
    total = tu_alloc_count();
    tu_alloc_fail_at(0);
    assert_int_equal(f->done_rc, 0);
    assert_true(total > 10);
    discovery_result_free(f->res);
    f->res = NULL;
    for (n = 1; n <= total + 1; n++) {
        unsigned before = f->n_done;
        int rc;

        tu_alloc_fail_at(n);
        rc = discovery_start(f->d, tu_httpd_url(f->srv, "/"));
        if (rc != 0) {
            tu_alloc_fail_at(0);
            assert_int_equal(rc, RS_ENOMEM);
            continue;
        }
        TU_LOOP_UNTIL(&f->loop, f->n_done == before + 1, WATCHDOG_MS);
        tu_alloc_fail_at(0);
        if (f->done_rc == 0) {
            assert_int_equal(f->res->nsets, 1);
            ok_runs++;
        } else {
            assert_int_equal(f->done_rc, RS_ENOMEM);
            enomem++;
        }
        discovery_result_free(f->res);
        f->res = NULL;
        tu_loop_drain(&f->loop, f->h, WATCHDOG_MS);
    }
    assert_true(ok_runs >= 1);
    assert_true(enomem > 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        { "discovery/api_edges", test_api_edges, setup, teardown, NULL },
        { "discovery/from_caplist", test_from_caplist, setup, teardown,
          NULL },
        { "discovery/from_description", test_from_description, setup,
          teardown, NULL },
        { "discovery/site_root_fallback", test_site_root_fallback, setup,
          teardown, NULL },
        { "discovery/html_link", test_html_link, setup, teardown, NULL },
        { "discovery/link_header", test_link_header, setup, teardown, NULL },
        { "discovery/resourcelist_up", test_resourcelist_up, setup,
          teardown, NULL },
        { "discovery/robots_sitemap", test_robots_sitemap, setup, teardown,
          NULL },
        { "discovery/nothing_found", test_nothing_found, setup, teardown,
          NULL },
        { "discovery/redirect_loop_and_500s", test_redirect_loop_and_500s,
          setup, teardown, NULL },
        { "discovery/hostile", test_hostile, setup, teardown, NULL },
        { "discovery/free_in_flight", test_free_in_flight, setup, teardown,
          NULL },
        { "discovery/http_free_in_flight", test_http_free_in_flight, setup,
          teardown, NULL },
        { "discovery/alloc_failures", test_alloc_failures, setup, teardown,
          NULL },
    };
    int rc;

    signal(SIGPIPE, SIG_IGN);
    unsetenv("http_proxy");
    unsetenv("HTTP_PROXY");
    unsetenv("all_proxy");
    unsetenv("ALL_PROXY");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rc = cmocka_run_group_tests_name("discovery", tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
