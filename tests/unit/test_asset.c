/* test_asset.c - common/asset.c, the built-in files and dashboard JSON
 * served with strict headers, through the route hook of the metrics
 * listener (common/daemon.c's rs_metrics_server_route), as rssub serves
 * its dashboard: a real HTTP client (curl, on its own thread) on
 * loopback, a watchdog, nothing left on the loop. */
#include "testutil.h"
#include "tu_httpd.h"

#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/http.h>

#include "rs_asset.h"
#include "rs_daemon.h"
#include "rs_metrics.h"

#define WATCHDOG_MS 10000u

static const unsigned char page[] = "<!doctype html><p>hi</p>";
static const unsigned char script[] = "\"use strict\";";
static const struct rs_asset table[] = {
    { "index.html", page, sizeof(page) - 1 },
    { "app.js", script, sizeof(script) - 1 },
    { NULL, NULL, 0 },
};

struct fetch {
    char url[160];
    char inm[64];               /* If-None-Match to send, or "" */
    long status;
    char head[4096];
    size_t hlen;
    char body[4096];
    size_t blen;
    volatile bool done;
};

static size_t
on_data(char *p, size_t sz, size_t n, void *ud, char *buf, size_t *len,
        size_t cap)
{
    size_t k = sz * n;
    (void)ud;
    if (*len + k < cap) {
        memcpy(buf + *len, p, k);
        *len += k;
        buf[*len] = '\0';
    }
    return k;
}

static size_t
on_body(char *p, size_t sz, size_t n, void *ud)
{
    struct fetch *ft = ud;
    return on_data(p, sz, n, ud, ft->body, &ft->blen, sizeof(ft->body));
}

static size_t
on_head(char *p, size_t sz, size_t n, void *ud)
{
    struct fetch *ft = ud;
    return on_data(p, sz, n, ud, ft->head, &ft->hlen, sizeof(ft->head));
}

static void *
fetch_main(void *arg)
{
    struct fetch *ft = arg;
    CURL *c = curl_easy_init();
    struct curl_slist *hs = NULL;
    char h[96];

    if (c != NULL) {
        if (ft->inm[0] != '\0') {
            snprintf(h, sizeof(h), "If-None-Match: %s", ft->inm);
            hs = curl_slist_append(hs, h);
            curl_easy_setopt(c, CURLOPT_HTTPHEADER, hs);
        }
        curl_easy_setopt(c, CURLOPT_URL, ft->url);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, ft);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_head);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, ft);
        curl_easy_setopt(c, CURLOPT_TIMEOUT, 5L);
        curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
        if (curl_easy_perform(c) == CURLE_OK)
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &ft->status);
        curl_easy_cleanup(c);
        curl_slist_free_all(hs);
    }
    ft->done = true;
    return NULL;
}

struct fx {
    struct tu_loop loop;
    struct rs_metrics *m;
    struct rs_metrics_server *ms;
    unsigned ui_calls, json_calls;
    char last_path[64];
};

static void
fetch(struct fx *f, const char *path, const char *inm, struct fetch *ft)
{
    pthread_t t;

    memset(ft, 0, sizeof(*ft));
    snprintf(ft->url, sizeof(ft->url), "http://127.0.0.1:%d%s",
             rs_metrics_server_port(f->ms), path);
    snprintf(ft->inm, sizeof(ft->inm), "%s", inm != NULL ? inm : "");
    assert_int_equal(pthread_create(&t, NULL, fetch_main, ft), 0);
    TU_LOOP_UNTIL(&f->loop, ft->done, WATCHDOG_MS);
    pthread_join(t, NULL);
}

/* The value of header name in ft's answer ("" when absent), in buf. */
static const char *
header(const struct fetch *ft, const char *name, char *buf, size_t cap)
{
    size_t n = strlen(name);
    const char *p = ft->head;

    buf[0] = '\0';
    while ((p = strstr(p, "\r\n")) != NULL) {
        p += 2;
        if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1 + strspn(p + n + 1, " ");
            size_t len = strcspn(v, "\r\n");
            snprintf(buf, cap, "%.*s", (int)(len < cap ? len : cap - 1), v);
            break;
        }
    }
    return buf;
}

static void
on_ui(struct evhttp_request *req, const char *path, void *ud)
{
    struct fx *f = ud;
    const char *name = path + strlen("/ui/");

    f->ui_calls++;
    snprintf(f->last_path, sizeof(f->last_path), "%s", path);
    if (rs_asset_reply(req, table, name[0] ? name : "index.html",
                       "ws://127.0.0.1:9") != 0)
        evhttp_send_error(req, HTTP_NOTFOUND, NULL);
}

static void
on_json(struct evhttp_request *req, const char *path, void *ud)
{
    static const char j[] = "{\"a\":1}";
    (void)path;
    ((struct fx *)ud)->json_calls++;
    rs_asset_reply_json(req, j, sizeof(j) - 1);
}

static int
setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    char err[256];

    assert_non_null(f);
    tu_loop_init(&f->loop);
    f->m = rs_metrics_new();
    assert_non_null(f->m);
    f->ms = rs_metrics_server_new(f->loop.base, f->m, "127.0.0.1", 0, NULL,
                                  "t_http", err, sizeof(err));
    assert_non_null(f->ms);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;

    rs_metrics_server_free(f->ms);
    tu_loop_settle(&f->loop);
    rs_metrics_free(f->m);
    tu_loop_cleanup(&f->loop);
    free(f);
    return 0;
}

/* asset/find: a table is looked up by base name, up to its NULL end. */
static void
test_find(void **state)
{
    (void)state;
    assert_ptr_equal(rs_asset_find(table, "app.js"), &table[1]);
    assert_ptr_equal(rs_asset_find(table, "index.html"), &table[0]);
    assert_null(rs_asset_find(table, "missing.css"));
    assert_null(rs_asset_find(table, ""));
}

/* asset/routes: a prefix route takes its path and the paths below it,
 * an exact one only itself; /metrics stays the listener's; anything else
 * is 404 without calling a route; past the cap, RS_ETOOBIG; a path not
 * starting with '/', RS_EINVAL. */
static void
test_routes(void **state)
{
    struct fx *f = *state;
    struct fetch ft;

    assert_int_equal(rs_metrics_server_route(f->ms, "/ui/", on_ui, f), 0);
    assert_int_equal(rs_metrics_server_route(f->ms, "/s.json", on_json, f), 0);
    assert_int_equal(rs_metrics_server_route(f->ms, "ui", on_ui, f), RS_EINVAL);
    fetch(f, "/ui/app.js?x=1", NULL, &ft);
    assert_int_equal(ft.status, 200);
    assert_string_equal(f->last_path, "/ui/app.js");   /* no query */
    assert_string_equal(ft.body, (const char *)script);
    fetch(f, "/s.json", NULL, &ft);
    assert_int_equal(ft.status, 200);
    assert_int_equal(f->json_calls, 1);
    fetch(f, "/s.json/more", NULL, &ft);
    assert_int_equal(ft.status, 404);
    fetch(f, "/uix", NULL, &ft);
    assert_int_equal(ft.status, 404);
    assert_int_equal(f->ui_calls, 1);
    assert_int_equal(f->json_calls, 1);
    fetch(f, "/metrics", NULL, &ft);
    assert_int_equal(ft.status, 200);
    assert_non_null(strstr(ft.body, "t_http_connections"));
    for (int i = 2; i < RS_METRICS_SERVER_ROUTES; i++)
        assert_int_equal(rs_metrics_server_route(f->ms, "/x", on_json, f), 0);
    assert_int_equal(rs_metrics_server_route(f->ms, "/y", on_json, f),
                     RS_ETOOBIG);
}

/* asset/headers: a file goes out with its type, no-cache and an ETag
 * (304 to it), nosniff, no framing, and a policy that runs only the
 * daemon's own scripts and connects to itself and the origin given; an
 * unknown file is not answered by rs_asset_reply (the caller 404s); JSON
 * is not stored. */
static void
test_headers(void **state)
{
    struct fx *f = *state;
    struct fetch ft;
    char v[512], etag[64];

    assert_int_equal(rs_metrics_server_route(f->ms, "/ui/", on_ui, f), 0);
    assert_int_equal(rs_metrics_server_route(f->ms, "/s.json", on_json, f), 0);
    fetch(f, "/ui/", NULL, &ft);
    assert_int_equal(ft.status, 200);
    assert_string_equal(ft.body, (const char *)page);
    assert_string_equal(header(&ft, "Content-Type", v, sizeof(v)),
                        "text/html; charset=utf-8");
    assert_string_equal(header(&ft, "Cache-Control", v, sizeof(v)), "no-cache");
    assert_string_equal(header(&ft, "X-Content-Type-Options", v, sizeof(v)),
                        "nosniff");
    assert_string_equal(header(&ft, "X-Frame-Options", v, sizeof(v)), "DENY");
    header(&ft, "Content-Security-Policy", v, sizeof(v));
    assert_non_null(strstr(v, "default-src 'none'"));
    assert_non_null(strstr(v, "script-src 'self';"));
    assert_non_null(strstr(v, "frame-ancestors 'none'"));
    assert_non_null(strstr(v, "connect-src 'self' ws://127.0.0.1:9"));
    assert_null(strstr(v, "unsafe"));
    header(&ft, "ETag", etag, sizeof(etag));
    assert_int_equal(strlen(etag), 18);
    fetch(f, "/ui/index.html", etag, &ft);
    assert_int_equal(ft.status, 304);
    assert_int_equal(ft.blen, 0);
    fetch(f, "/ui/app.js", etag, &ft);        /* another file's tag */
    assert_int_equal(ft.status, 200);
    assert_string_equal(header(&ft, "Content-Type", v, sizeof(v)),
                        "text/javascript; charset=utf-8");
    fetch(f, "/ui/missing.js", NULL, &ft);
    assert_int_equal(ft.status, 404);
    fetch(f, "/s.json", NULL, &ft);
    assert_int_equal(ft.status, 200);
    assert_string_equal(ft.body, "{\"a\":1}");
    assert_string_equal(header(&ft, "Content-Type", v, sizeof(v)),
                        "application/json");
    assert_string_equal(header(&ft, "Cache-Control", v, sizeof(v)), "no-store");
    assert_string_equal(header(&ft, "X-Content-Type-Options", v, sizeof(v)),
                        "nosniff");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        { "asset/find", test_find, NULL, NULL, NULL },
        { "asset/routes", test_routes, setup, teardown, NULL },
        { "asset/headers", test_headers, setup, teardown, NULL },
    };
    int rc;

    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rc = cmocka_run_group_tests_name("asset", tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
