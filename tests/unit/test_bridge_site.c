/* test_bridge_site.c - rsbridge's HTTP surface (bridge/site.c) over a
 * real poller (bridge/poller.c) following a programmable Source
 * (test_bridge_src.h) and publishing to a real rshub (tu_hub), all on
 * loopback: the bridged Source Description (at the prefix and at
 * .well-known), the bridged Capability List (the original's entries at
 * their original, absolute URLs, its own notification entries dropped,
 * the hub's channels added), strong ETags and 304s, GET /sources and
 * /healthz, 404, 405, and 503 for a Source that could not be read; then a
 * change at the Source reaches the hub. */
#include "testutil.h"

#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poller.h"
#include "rs_http.h"
#include "rs_httpguard.h"
#include "rs_parse.h"
#include "rs_time.h"
#include "site.h"
#include "store.h"
#include "test_bridge_src.h"
#include "tu_httpd.h"
#include "tu_hub.h"

struct fx {
    struct tu_loop l;
    struct tbs *src;
    struct tu_hub *hub;
    char *dir;
    struct store *st;
    struct rs_http *http, *hub_http, *client;
    struct evhttp *srv;
    struct rs_httpguard *guard;
    int port;
    char pub[64];
    struct poller *p[2];
    struct site *site;
    int ready;
    /* the last answer */
    bool got;
    long status;
    char etag[64];
    char *body;
    size_t len;
};

static void
on_ready(void *ud)
{
    struct fx *f = ud;
    f->ready++;
}

static void
on_answer(void *ud, struct rs_http_req *req, const struct rs_http_result *r)
{
    struct fx *f = ud;
    f->got = true;
    f->status = r->rc == 0 ? r->status : -1;
    const char *e = rs_http_req_header(req, "ETag");
    snprintf(f->etag, sizeof(f->etag), "%s", e != NULL ? e : "");
    free(f->body);
    f->body = malloc(r->body_len + 1);
    assert_non_null(f->body);
    memcpy(f->body, r->body != NULL ? r->body : "", r->body_len);
    f->body[r->body_len] = '\0';
    f->len = r->body_len;
}

/* GET (or another method) PUBLIC + path from the bridge; *status. */
static long
get(struct fx *f, const char *method, const char *path, const char *inm)
{
    char url[256], cond[128];
    snprintf(url, sizeof(url), "%s%s", f->pub, path);
    const char *hdrs[2] = { NULL, NULL };
    if (inm != NULL) {
        snprintf(cond, sizeof(cond), "If-None-Match: %s", inm);
        hdrs[0] = cond;
    }
    struct rs_http_req_opts ro = {
        .method = method,
        .url = url,
        .headers = hdrs,
        .on_done = on_answer,
        .ud = f,
    };
    f->got = false;
    assert_int_equal(rs_http_request(f->client, &ro, NULL), 0);
    TU_LOOP_UNTIL(&f->l, f->got, 10000);
    return f->status;
}

static struct rs_doc *
parse_strict(struct fx *f)
{
    struct rs_doc *doc = NULL;
    struct rs_diag diag;
    struct rs_parse_opts po = { .strict = true };
    int rc = rs_doc_parse(f->body, f->len, &po, &doc, &diag);
    if (rc != 0)
        fail_msg("not strict: line %u: %s\n%s", diag.line, diag.msg, f->body);
    return doc;
}

static void
serve_source(struct fx *f)
{
    char dt[RS_TIME_BUFSZ], e[512];
    assert_true(rs_time_format(1735689600LL * 1000000, dt) > 0);
    tbs_change(e, sizeof(e), "{B}/data/a", "created", dt);
    tbs_put(f->src, "/.well-known/resourcesync",
            "<urlset " TBS_NS "><rs:md capability=\"description\"/><url>"
            "<loc>{B}/rs/caplist.xml</loc><rs:md capability=\"capabilitylist\""
            "/></url></urlset>");
    /* a notification entry of its own (dropped: the bridge's channels
     * replace it) */
    tbs_put(f->src, "/rs/caplist.xml",
            "<urlset " TBS_NS "><rs:ln rel=\"up\" href=\"{B}/.well-known/"
            "resourcesync\"/><rs:md capability=\"capabilitylist\"/>"
            "<url><loc>{B}/rs/resourcelist.xml</loc><rs:md capability="
            "\"resourcelist\"/></url><url><loc>{B}/rs/changelist.xml</loc>"
            "<rs:md "
            "capability=\"changelist\"/></url><url><loc>http://old.example/"
            "topic</loc><rs:md capability=\"changelist-notification\"/>"
            "</url></urlset>");
    tbs_put(f->src, "/rs/resourcelist.xml",
            "<urlset " TBS_NS "><rs:md capability=\"resourcelist\" "
            "at=\"2025-01-01T00:00:00Z\"/><url><loc>{B}/data/a</loc></url>"
            "</urlset>");
    tbs_putf(f->src, "/rs/changelist.xml", "<urlset " TBS_NS "><rs:md "
             "capability=\"changelist\" from=\"%s\"/>%s</urlset>", dt, e);
}

static int
setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    tu_loop_init(&f->l);
    f->src = tbs_new(f->l.base);
    serve_source(f);
    f->hub = tu_hub_new(NULL);
    f->dir = tu_mkdtemp();
    char db[600], err[256];
    snprintf(db, sizeof(db), "%s/bridge.db", f->dir);
    assert_int_equal(store_open(db, &f->st, err, sizeof(err)), 0);
    struct rs_http_opts ho = { .user_agent = "rsbridge/test (+t@example)" };
    f->http = rs_http_new(f->l.base, &ho);
    f->hub_http = rs_http_new(f->l.base, &ho);
    f->client = rs_http_new(f->l.base, &ho);
    assert_true(f->http && f->hub_http && f->client);
    f->srv = evhttp_new(f->l.base);
    assert_non_null(f->srv);
    struct rs_httpguard_opts go = {
        .base = f->l.base,
        .http = f->srv,
        .name = "http",
        .limits = RS_HTTPGUARD_LIMITS_DEFAULT,
    };
    const char *gerr = NULL;
    f->guard = rs_httpguard_new(&go, &gerr);
    assert_non_null(f->guard);
    f->port = tu_httpd_listen(f->srv);
    snprintf(f->pub, sizeof(f->pub), "http://127.0.0.1:%d", f->port);
    const char *names[2] = { "src", "down" };
    /* nothing listens on port 1: refused at once */
    const char *urls[2] = { tbs_url(f->src, "/"), "http://127.0.0.1:1/" };
    for (int i = 0; i < 2; i++) {
        char bridged[128];
        snprintf(bridged, sizeof(bridged), "%s/s/%s/", f->pub, names[i]);
        struct poller_opts po = {
            .base = f->l.base,
            .http = f->http,
            .hub_http = f->hub_http,
            .st = f->st,
            .name = names[i],
            .url = urls[i],
            .bridged = bridged,
            .hub = f->hub->hub_url,
            .interval_ms = 200,
            .timeout_ms = 5000,
            .batch_ms = 1,
            .retry_max_ms = 1000,
            .on_ready = on_ready,
            .ud = f,
        };
        const char *perr = NULL;
        f->p[i] = poller_new(&po, &perr);
        assert_non_null(f->p[i]);
    }
    struct site_opts so = { .guard = f->guard, .pollers = f->p,
                            .npollers = 2 };
    f->site = site_new(&so);
    assert_non_null(f->site);
    for (int i = 0; i < 2; i++)
        poller_start(f->p[i]);
    TU_LOOP_UNTIL(&f->l, f->ready == 2, 15000);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    for (int i = 0; i < 2; i++)
        poller_drain(f->p[i]);
    site_free(f->site);
    evhttp_free(f->srv);
    rs_httpguard_free(f->guard);
    rs_http_free(f->client);
    rs_http_free(f->http);
    rs_http_free(f->hub_http);
    for (int i = 0; i < 2; i++)
        poller_free(f->p[i]);
    store_free(f->st);
    tbs_free(f->src);
    tu_hub_free(f->hub);
    tu_loop_cleanup(&f->l);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f->body);
    free(f);
    return 0;
}

/* site/documents: the bridged Source Description at the prefix and at
 * .well-known; the bridged Capability List: up and via, the original's
 * entries absolute, its own notification entry dropped, the hub's
 * WebSub topics (rel="hub") and WebSocket channels added; each valid
 * strictly; an ETag, and a 304 for it. */
static void
test_documents(void **state)
{
    struct fx *f = *state;
    char want[256];
    assert_int_equal(get(f, NULL, "/s/src/", NULL), 200);
    struct rs_doc *sd = parse_strict(f);
    assert_int_equal(sd->head.md.capability, RS_CAP_DESCRIPTION);
    assert_int_equal(sd->nentries, 1);
    snprintf(want, sizeof(want), "%s/s/src/capabilitylist/0.xml", f->pub);
    assert_string_equal(sd->entries[0].loc, want);
    rs_doc_free(sd);
    assert_int_equal(get(f, NULL, "/s/src/.well-known/resourcesync", NULL),
                     200);
    rs_doc_free(parse_strict(f));

    assert_int_equal(get(f, NULL, "/s/src/capabilitylist/0.xml", NULL), 200);
    struct rs_doc *cl = parse_strict(f);
    assert_int_equal(cl->head.md.capability, RS_CAP_CAPABILITYLIST);
    const struct rs_link *up = rs_links_find(cl->head.links, cl->head.nlinks,
                                             "up");
    const struct rs_link *via = rs_links_find(cl->head.links,
                                              cl->head.nlinks, "via");
    snprintf(want, sizeof(want), "%s/s/src/.well-known/resourcesync", f->pub);
    assert_non_null(up);
    assert_string_equal(up->href, want);
    assert_non_null(via);
    assert_string_equal(via->href, tbs_url(f->src, "/rs/caplist.xml"));
    int ws = 0, websub = 0, originals = 0;
    for (size_t i = 0; i < cl->nentries; i++) {
        const struct rs_entry *e = &cl->entries[i];
        assert_null(strstr(e->loc, "old.example"));
        if (strncmp(e->loc, "ws://", 5) == 0) {
            ws++;
        } else if (rs_capability_is_notification(e->md.capability)) {
            websub++;
            const struct rs_link *hub = rs_links_find(e->links, e->nlinks,
                                                      "hub");
            assert_non_null(hub);
            assert_string_equal(hub->href, f->hub->hub_url);
            snprintf(want, sizeof(want), "%s/s/src/%s", f->pub,
                     e->md.capability == RS_CAP_CHANGELIST_NOTIFICATION
                         ? "changes" : "framework");
            assert_string_equal(e->loc, want);
        } else {
            originals++;
            assert_int_equal(strncmp(e->loc, f->src->origin,
                                     strlen(f->src->origin)), 0);
        }
    }
    assert_int_equal(originals, 2);
    assert_int_equal(websub, 2);
    assert_int_equal(ws, 2);
    rs_doc_free(cl);
    char etag[64];
    snprintf(etag, sizeof(etag), "%s", f->etag);
    assert_true(etag[0] == '"');
    assert_int_equal(get(f, NULL, "/s/src/capabilitylist/0.xml", etag), 304);
    assert_int_equal(get(f, "HEAD", "/s/src/capabilitylist/0.xml", NULL),
                     200);
}

/* site/errors: unknown Sources and lists 404, other methods 405, a
 * Source never read 503; /healthz ok. */
static void
test_errors(void **state)
{
    struct fx *f = *state;
    assert_int_equal(get(f, NULL, "/healthz", NULL), 200);
    assert_string_equal(f->body, "ok\n");
    assert_int_equal(get(f, NULL, "/s/nosuch/", NULL), 404);
    assert_int_equal(get(f, NULL, "/s/src/capabilitylist/7.xml", NULL), 404);
    assert_int_equal(get(f, NULL, "/s/src/other", NULL), 404);
    assert_int_equal(get(f, NULL, "/", NULL), 404);
    assert_int_equal(get(f, "POST", "/sources", NULL), 405);
    assert_int_equal(get(f, NULL, "/s/down/", NULL), 503);
    assert_int_equal(get(f, NULL, "/s/down/capabilitylist/0.xml", NULL), 404);
}

/* site/sources: one object per Source with the fields of the design;
 * the Source that could not be read counts its errors; a change at the
 * Source is published to the hub and counted. */
static void
test_sources(void **state)
{
    struct fx *f = *state;
    assert_int_equal(get(f, NULL, "/sources", NULL), 200);
    json_error_t jerr;
    json_t *arr = json_loads(f->body, 0, &jerr);
    assert_true(json_is_array(arr));
    assert_int_equal(json_array_size(arr), 2);
    json_t *s = json_array_get(arr, 0), *d = json_array_get(arr, 1);
    static const char *const keys[] = {
        "name", "source", "url", "topic", "framework_topic", "state",
        "last_poll", "last_change", "changes_published",
        "framework_published", "pending", "errors", "last_error",
        "hub_stopped", "hub_failing", "hub_failing_since", "hub_failures",
        "hub_last_error", NULL };
    for (int i = 0; keys[i] != NULL; i++)
        assert_non_null(json_object_get(s, keys[i]));
    char want[256];
    assert_string_equal(json_string_value(json_object_get(s, "name")), "src");
    snprintf(want, sizeof(want), "%s/s/src/", f->pub);
    assert_string_equal(json_string_value(json_object_get(s, "url")), want);
    snprintf(want, sizeof(want), "%s/s/src/changes", f->pub);
    assert_string_equal(json_string_value(json_object_get(s, "topic")), want);
    assert_true(json_is_string(json_object_get(s, "last_poll")));
    assert_true(json_is_null(json_object_get(s, "last_change")));
    assert_int_equal(json_integer_value(json_object_get(s, "errors")), 0);
    assert_true(json_is_null(json_object_get(s, "last_error")));
    assert_true(json_is_false(json_object_get(s, "hub_failing")));
    assert_true(json_is_null(json_object_get(s, "hub_failing_since")));
    assert_true(json_is_null(json_object_get(s, "hub_last_error")));
    assert_true(json_integer_value(json_object_get(d, "errors")) >= 1);
    assert_true(json_is_string(json_object_get(d, "last_error")));
    json_decref(arr);

    /* a change: published to the hub, counted */
    char dt[RS_TIME_BUFSZ], dt2[RS_TIME_BUFSZ], e1[512], e2[512];
    assert_true(rs_time_format(1735689600LL * 1000000, dt) > 0);
    assert_true(rs_time_format(1735689700LL * 1000000, dt2) > 0);
    tbs_change(e1, sizeof(e1), "{B}/data/a", "created", dt);
    tbs_change(e2, sizeof(e2), "{B}/data/b", "created", dt2);
    tbs_putf(f->src, "/rs/changelist.xml", "<urlset " TBS_NS "><rs:md "
             "capability=\"changelist\" from=\"%s\"/>%s%s</urlset>", dt, e1,
             e2);
    long published = 0;
    tu_loop_arm(&f->l, 10000);
    while (published != 1 && !f->l.expired) {
        tu_loop_disarm(&f->l);
        tu_loop_run_for(&f->l, 100);
        assert_int_equal(get(f, NULL, "/sources", NULL), 200);
        arr = json_loads(f->body, 0, &jerr);
        s = json_array_get(arr, 0);
        published = (long)json_integer_value(json_object_get(s,
                                                             "changes_published"));
        if (published == 1) {
            assert_true(json_is_string(json_object_get(s, "last_change")));
            assert_int_equal(json_integer_value(json_object_get(s, "pending")),
                             0);
        }
        json_decref(arr);
        tu_loop_arm(&f->l, 10000);
    }
    tu_loop_disarm(&f->l);
    assert_int_equal(published, 1);
    /* one request in flight: the Source never saw two at once */
    assert_int_equal(f->src->max_inflight, 1);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_documents, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sources, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
