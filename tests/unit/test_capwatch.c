/* test_capwatch.c - client/capwatch.c (reading a Capability List
 * again and handing over a changed offer) against a real evhttp server
 * (tu_httpd.h) on 127.0.0.1 on the watch's own event_base: unchanged,
 * changed (a channel appears, moves, goes), errors that keep the offer
 * (500, not a document, a document of another kind), checks coalesced
 * while a read is out, and the watch freed with a read in flight. Every
 * test runs under a watchdog and ends with nothing left on the loop, clean
 * under ASan. */
#include "testutil.h"
#include "tu_httpd.h"

#include <curl/curl.h>
#include <event2/event.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capwatch.h"
#include "discovery.h"
#include "rs_alloc.h"
#include "rs_http.h"

#define WATCHDOG_MS 10000u

#define NS "xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" " \
           "xmlns:rs=\"http://www.openarchives.org/rs/terms/\""
#define CAPLIST(entries)                                                    \
    "<?xml version=\"1.0\"?>\n<urlset " NS ">"                              \
    "<rs:md capability=\"capabilitylist\"/>"                                \
    "<url><loc>{B}/rl.xml</loc><rs:md capability=\"resourcelist\"/></url>"  \
    entries "</urlset>\n"
#define WS(uri)                                                             \
    "<url><loc>" uri "</loc><rs:md capability=\"change-notification\"/>"    \
    "</url>"
#define CT_XML "Content-Type: application/xml"

struct fixture {
    struct tu_loop loop;
    struct tu_httpd *srv;
    struct tu_route *route;
    struct rs_http *h;
    struct capwatch *cw;
    struct discovery_set start;     /* what the watch starts from */
    unsigned changes, errors;
    struct discovery_set last;      /* the last offer handed over */
    char why[700];
};

static void
on_change(void *ud, struct discovery_set *now)
{
    struct fixture *f = ud;

    f->changes++;
    discovery_set_clear(&f->last);
    f->last = *now;                 /* taken */
    memset(now, 0, sizeof(*now));
}

static void
on_error(void *ud, const char *why)
{
    struct fixture *f = ud;

    f->errors++;
    snprintf(f->why, sizeof(f->why), "%s", why);
}

/* Serve body (with {B} expanded) at /cl.xml from now on. */
static void
serve(struct fixture *f, const char *body)
{
    free(f->route->body);
    f->route->body = tu_httpd_expand(f->srv, body, &f->route->body_len);
}

static int
setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    struct capwatch_opts o;

    assert_non_null(f);
    tu_loop_init(&f->loop);
    f->srv = tu_httpd_new(f->loop.base);
    f->route = tu_httpd_add(f->srv, "/cl.xml", 0, CT_XML, CAPLIST(""));
    f->h = rs_http_new(f->loop.base, NULL);
    assert_non_null(f->h);
    f->start.caplist = rs_strdup(tu_httpd_url(f->srv, "/cl.xml"));
    f->start.resourcelist = rs_strdup(tu_httpd_url(f->srv, "/rl.xml"));
    assert_non_null(f->start.caplist);
    o = (struct capwatch_opts){ .base = f->loop.base, .http = f->h,
                                .timeout_ms = 2000, .on_change = on_change,
                                .on_error = on_error, .ud = f };
    f->cw = capwatch_new(&o, &f->start);
    assert_non_null(f->cw);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fixture *f = *state;

    capwatch_free(f->cw);
    rs_http_free(f->h);
    tu_httpd_free(f->srv);
    discovery_set_clear(&f->start);
    discovery_set_clear(&f->last);
    tu_loop_cleanup(&f->loop);
    free(f);
    return 0;
}

/* One check, run until its read is answered. */
static void
check_once(struct fixture *f)
{
    unsigned before = f->srv->requests;
    struct capwatch_stats st;

    capwatch_check(f->cw);
    TU_LOOP_UNTIL(&f->loop, f->srv->requests > before, WATCHDOG_MS);
    tu_loop_run_for(&f->loop, 50);    /* the answer is taken */
    capwatch_stats(f->cw, &st);
    assert_int_equal(st.reads, f->srv->requests);
}

/* capwatch/unchanged: a list that offers what the watch started from is
 * read, and nothing is handed over. */
static void
test_unchanged(void **state)
{
    struct fixture *f = *state;

    check_once(f);
    check_once(f);
    assert_int_equal(f->changes, 0);
    assert_int_equal(f->errors, 0);
}

/* capwatch/channel_comes_moves_goes: each change of the offer is handed
 * over once, with the URL watched as its caplist; the same offer read
 * again is not. */
static void
test_channel_comes_moves_goes(void **state)
{
    struct fixture *f = *state;

    serve(f, CAPLIST(WS("ws://127.0.0.1:9/channel/a")));
    check_once(f);
    assert_int_equal(f->changes, 1);
    assert_string_equal(f->last.ws[0], "ws://127.0.0.1:9/channel/a");
    assert_string_equal(f->last.caplist, f->start.caplist);
    check_once(f);
    assert_int_equal(f->changes, 1);

    serve(f, CAPLIST(WS("ws://127.0.0.1:9/channel/b")));
    check_once(f);
    assert_int_equal(f->changes, 2);
    assert_string_equal(f->last.ws[0], "ws://127.0.0.1:9/channel/b");

    serve(f, CAPLIST(""));
    check_once(f);
    assert_int_equal(f->changes, 3);
    assert_null(f->last.ws[0]);
    assert_int_equal(f->errors, 0);
}

/* capwatch/errors_keep_the_offer: a 500, a body that is not a document,
 * and a document of another kind are errors (said once each), and the
 * offer held is kept: the list as before is no change afterwards. */
static void
test_errors_keep_the_offer(void **state)
{
    struct fixture *f = *state;

    tu_httpd_fail(f->srv, f->route, 1, 500, NULL);
    check_once(f);
    assert_int_equal(f->errors, 1);
    assert_non_null(strstr(f->why, "HTTP 500"));

    serve(f, "this is not XML");
    check_once(f);
    assert_int_equal(f->errors, 2);
    assert_non_null(strstr(f->why, "not a ResourceSync document"));

    serve(f, "<?xml version=\"1.0\"?>\n<urlset " NS "><rs:md "
             "capability=\"resourcelist\" at=\"2020-01-01T00:00:00Z\"/>"
             "</urlset>");
    check_once(f);
    assert_int_equal(f->errors, 3);
    assert_non_null(strstr(f->why, "resourcelist"));

    serve(f, CAPLIST(""));
    check_once(f);
    assert_int_equal(f->errors, 3);
    assert_int_equal(f->changes, 0);
}

/* capwatch/coalesced: checks while a read is out make one more read after
 * it, not one each, and that read sees the newer list. */
static void
test_coalesced(void **state)
{
    struct fixture *f = *state;

    f->route->pace = 64;              /* a slow answer */
    capwatch_check(f->cw);
    TU_LOOP_UNTIL(&f->loop, f->srv->requests == 1, WATCHDOG_MS);
    capwatch_check(f->cw);
    capwatch_check(f->cw);
    capwatch_check(f->cw);
    serve(f, CAPLIST(WS("ws://127.0.0.1:9/channel/late")));
    TU_LOOP_UNTIL(&f->loop, f->changes == 1, WATCHDOG_MS);
    tu_loop_run_for(&f->loop, 300);
    assert_int_equal(f->srv->requests, 2);
    assert_string_equal(f->last.ws[0], "ws://127.0.0.1:9/channel/late");
}

/* capwatch/free_in_flight: freed while its read is out (a server that
 * never answers): no callback afterwards, and the loop ends empty once the
 * client has completed the cancelled request. */
static void
test_free_in_flight(void **state)
{
    struct fixture *f = *state;

    f->route->never = true;
    capwatch_check(f->cw);
    TU_LOOP_UNTIL(&f->loop, f->srv->requests == 1, WATCHDOG_MS);
    capwatch_free(f->cw);
    f->cw = NULL;
    tu_loop_drain(&f->loop, f->h, WATCHDOG_MS);
    assert_int_equal(f->changes + f->errors, 0);
    capwatch_free(NULL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        { "capwatch/unchanged", test_unchanged, setup, teardown, NULL },
        { "capwatch/channel_comes_moves_goes", test_channel_comes_moves_goes,
          setup, teardown, NULL },
        { "capwatch/errors_keep_the_offer", test_errors_keep_the_offer,
          setup, teardown, NULL },
        { "capwatch/coalesced", test_coalesced, setup, teardown, NULL },
        { "capwatch/free_in_flight", test_free_in_flight, setup, teardown,
          NULL },
    };
    int rc;

    signal(SIGPIPE, SIG_IGN);
    unsetenv("http_proxy");
    unsetenv("HTTP_PROXY");
    unsetenv("all_proxy");
    unsetenv("ALL_PROXY");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rc = cmocka_run_group_tests_name("capwatch", tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
