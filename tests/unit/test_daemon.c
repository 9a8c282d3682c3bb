/* test_daemon.c - common/daemon.c, the daemons' skeleton: real signals
 * raised at this process and taken on a libevent loop (a drain that ends
 * when the work is done, one that times out, a second signal that stops at
 * once, SIGHUP's reload), the ready file written whole, and the metrics
 * listener answering a real HTTP client (curl) on loopback. Every test runs
 * under a watchdog and ends with nothing left on the loop. */
#include "testutil.h"
#include "tu_httpd.h"

#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rs_alloc.h"
#include "rs_daemon.h"
#include "rs_metrics.h"

#define WATCHDOG_MS 10000u

struct fx {
    struct tu_loop loop;
    struct rs_daemon *d;
    unsigned drains, stops, reloads, asked;
    bool timed_out;
    unsigned done_after;          /* drained says yes from this ask on */
};

static void
on_drain(void *ud)
{
    ((struct fx *)ud)->drains++;
}

static bool
drained(void *ud)
{
    struct fx *f = ud;

    return ++f->asked >= f->done_after;
}

static void
on_stopped(void *ud, bool timed_out)
{
    struct fx *f = ud;

    f->stops++;
    f->timed_out = timed_out;
}

static void
on_reload(void *ud)
{
    ((struct fx *)ud)->reloads++;
}

static int
setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    tu_loop_init(&f->loop);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;

    rs_daemon_free(f->d);
    tu_loop_cleanup(&f->loop);
    free(f);
    return 0;
}

static void
daemon_new(struct fx *f, int64_t drain_ms)
{
    struct rs_daemon_opts o = {
        .base = f->loop.base,
        .drain_ms = drain_ms,
        .drain_tick_ms = 10,
        .on_drain = on_drain,
        .drained = drained,
        .on_stopped = on_stopped,
        .on_reload = on_reload,
        .ud = f,
    };

    f->d = rs_daemon_new(&o);
    assert_non_null(f->d);
}

/* daemon/drain_until_done: SIGTERM begins the drain once; drained is asked
 * each tick until it says yes; on_stopped runs once, not timed out. */
static void
test_drain_until_done(void **state)
{
    struct fx *f = *state;

    daemon_new(f, 5000);
    f->done_after = 5;
    assert_false(rs_daemon_draining(f->d));
    raise(SIGTERM);
    TU_LOOP_UNTIL(&f->loop, f->stops == 1, WATCHDOG_MS);
    assert_int_equal(f->drains, 1);
    assert_int_equal(f->asked, 5);
    assert_false(f->timed_out);
    assert_true(rs_daemon_draining(f->d));
    tu_loop_run_for(&f->loop, 50);
    assert_int_equal(f->stops, 1);
}

/* daemon/drain_times_out: work that never ends stops the drain after
 * drain_ms, timed out. */
static void
test_drain_times_out(void **state)
{
    struct fx *f = *state;

    daemon_new(f, 100);
    f->done_after = 1000000;
    raise(SIGINT);
    TU_LOOP_UNTIL(&f->loop, f->stops == 1, WATCHDOG_MS);
    assert_true(f->timed_out);
    assert_true(f->asked >= 5 && f->asked <= 20);
}

/* daemon/second_signal: a second SIGTERM during the drain stops at once,
 * timed out; a third changes nothing. */
static void
test_second_signal(void **state)
{
    struct fx *f = *state;

    daemon_new(f, 60000);
    f->done_after = 1000000;
    raise(SIGTERM);
    TU_LOOP_UNTIL(&f->loop, f->drains == 1, WATCHDOG_MS);
    raise(SIGTERM);
    TU_LOOP_UNTIL(&f->loop, f->stops == 1, WATCHDOG_MS);
    assert_true(f->timed_out);
    raise(SIGTERM);
    tu_loop_run_for(&f->loop, 50);
    assert_int_equal(f->stops, 1);
    assert_int_equal(f->drains, 1);
}

/* daemon/reload: SIGHUP calls on_reload (after reopening the log), and
 * does not drain. */
static void
test_reload(void **state)
{
    struct fx *f = *state;

    daemon_new(f, 1000);
    raise(SIGHUP);
    TU_LOOP_UNTIL(&f->loop, f->reloads == 1, WATCHDOG_MS);
    assert_int_equal(f->drains, 0);
    assert_false(rs_daemon_draining(f->d));
}

/* daemon/done_at_once: a program with nothing in flight stops within the
 * drain call (rs_daemon_drain), without a tick. */
static void
test_done_at_once(void **state)
{
    struct fx *f = *state;

    daemon_new(f, 1000);
    f->done_after = 1;
    rs_daemon_drain(f->d);
    assert_int_equal(f->stops, 1);
    assert_false(f->timed_out);
    rs_daemon_free(NULL);
}

/* daemon/ready_file: written whole with a newline, replacing what was
 * there, no temporary file left; a directory that does not exist is
 * RS_EIO. */
static void
test_ready_file(void **state)
{
    char *dir = tu_mkdtemp(), path[4200], tmp[4300];
    size_t len = 0;
    char *got;

    (void)state;
    snprintf(path, sizeof(path), "%s/ready", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    assert_int_equal(rs_ready_file_write(path, "{\"http\":1}"), 0);
    assert_int_equal(rs_ready_file_write(path, "{\"http\":8080}"), 0);
    got = tu_read_file(path, &len);
    assert_non_null(got);
    assert_string_equal(got, "{\"http\":8080}\n");
    free(got);
    assert_int_not_equal(access(tmp, F_OK), 0);
    snprintf(path, sizeof(path), "%s/no/such/dir/ready", dir);
    assert_int_equal(rs_ready_file_write(path, "{}"), RS_EIO);
    tu_rmtree(dir);
    free(dir);
}

struct got {
    char buf[8192];
    size_t len;
};

static size_t
on_body(char *p, size_t sz, size_t n, void *ud)
{
    struct got *g = ud;
    size_t k = sz * n;

    if (k > sizeof(g->buf) - 1 - g->len)
        k = sizeof(g->buf) - 1 - g->len;
    memcpy(g->buf + g->len, p, k);
    g->len += k;
    g->buf[g->len] = '\0';
    return sz * n;
}

struct fetch {
    char url[128];
    long status;
    struct got body;
    volatile bool done;
};

/* A blocking curl GET on its own thread, so the loop can serve it. */
static void *
fetch_main(void *arg)
{
    struct fetch *ft = arg;
    CURL *c = curl_easy_init();

    if (c != NULL) {
        curl_easy_setopt(c, CURLOPT_URL, ft->url);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &ft->body);
        curl_easy_setopt(c, CURLOPT_TIMEOUT, 5L);
        curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
        if (curl_easy_perform(c) == CURLE_OK)
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &ft->status);
        curl_easy_cleanup(c);
    }
    ft->done = true;
    return NULL;
}

static void
fetch(struct fx *f, int port, const char *path, struct fetch *ft)
{
    pthread_t t;

    memset(ft, 0, sizeof(*ft));
    snprintf(ft->url, sizeof(ft->url), "http://127.0.0.1:%d%s", port, path);
    assert_int_equal(pthread_create(&t, NULL, fetch_main, ft), 0);
    TU_LOOP_UNTIL(&f->loop, ft->done, WATCHDOG_MS);
    pthread_join(t, NULL);
}

/* daemon/metrics_server: GET /metrics answers the registry rendered (the
 * listener's own counters among it), any other path 404; it binds port 0
 * to a real port; a port in use is an error that says so. */
static void
test_metrics_server(void **state)
{
    struct fx *f = *state;
    struct rs_metrics *m = rs_metrics_new();
    struct rs_metrics_counter *c = NULL;
    struct rs_metrics_server *ms, *again;
    char err[256];
    struct fetch ft;

    assert_non_null(m);
    assert_int_equal(rs_metrics_register_counter(m, &c, "t_things_total",
                                                 "Things.", NULL), 0);
    rs_metrics_counter_add(c, 7);
    ms = rs_metrics_server_new(f->loop.base, m, "127.0.0.1", 0, NULL, "t_http",
                               err, sizeof(err));
    assert_non_null(ms);
    assert_true(rs_metrics_server_port(ms) > 0);
    fetch(f, rs_metrics_server_port(ms), "/metrics", &ft);
    assert_int_equal(ft.status, 200);
    assert_non_null(strstr(ft.body.buf, "t_things_total 7"));
    assert_non_null(strstr(ft.body.buf, "t_http_connections"));
    fetch(f, rs_metrics_server_port(ms), "/other", &ft);
    assert_int_equal(ft.status, 404);
    again = rs_metrics_server_new(f->loop.base, m, "127.0.0.1",
                                  rs_metrics_server_port(ms), NULL, "t2_http",
                                  err, sizeof(err));
    assert_null(again);
    assert_non_null(strstr(err, "cannot listen"));
    rs_metrics_server_free(ms);
    rs_metrics_server_free(NULL);
    tu_loop_settle(&f->loop);
    rs_metrics_free(m);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        { "daemon/drain_until_done", test_drain_until_done, setup, teardown,
          NULL },
        { "daemon/drain_times_out", test_drain_times_out, setup, teardown,
          NULL },
        { "daemon/second_signal", test_second_signal, setup, teardown, NULL },
        { "daemon/reload", test_reload, setup, teardown, NULL },
        { "daemon/done_at_once", test_done_at_once, setup, teardown, NULL },
        { "daemon/ready_file", test_ready_file, NULL, NULL, NULL },
        { "daemon/metrics_server", test_metrics_server, setup, teardown,
          NULL },
    };
    int rc;

    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rc = cmocka_run_group_tests_name("daemon", tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
