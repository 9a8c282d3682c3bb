/* test_metrics.c - the metrics registry: exact exposition text for every
 * kind of metric, escaping, refused names, concurrent updates, and
 * allocation failures in registration and rendering. */
#include "testutil.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rs_alloc.h"
#include "rs_metrics.h"

struct fixture {
    struct rs_metrics *m;
    char *buf;
    size_t cap;
    size_t len;
};

static int
setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    if (fx == NULL)
        return -1;
    fx->m = rs_metrics_new();
    if (fx->m == NULL)
        return -1;
    *state = fx;
    return 0;
}

static int
teardown(void **state)
{
    struct fixture *fx = *state;
    tu_alloc_fail_at(0);
    rs_metrics_free(fx->m);
    rs_free(fx->buf);
    free(fx);
    return 0;
}

/* Render, expecting success; the text stays in fx->buf. */
static const char *
render(struct fixture *fx)
{
    assert_int_equal(rs_metrics_render(fx->m, &fx->buf, &fx->cap, &fx->len),
                     0);
    assert_int_equal(strlen(fx->buf), fx->len);
    return fx->buf;
}

/* metrics/null_is_noop: free(NULL) and updates through NULL handles do
 * nothing; an empty registry renders as "". */
static void
test_null_is_noop(void **state)
{
    struct fixture *fx = *state;
    rs_metrics_free(NULL);
    rs_metrics_counter_inc(NULL);
    rs_metrics_counter_add(NULL, 5);
    rs_metrics_gauge_set(NULL, 1);
    rs_metrics_gauge_add(NULL, 1);
    rs_metrics_histogram_observe(NULL, 1.0);
    assert_int_equal(rs_metrics_counter_get(NULL), 0);
    assert_int_equal(rs_metrics_gauge_get(NULL), 0);
    assert_string_equal(render(fx), "");
    assert_int_equal(fx->len, 0);
}

/* metrics/counters_with_labels: HELP and TYPE once per name, one line per
 * series in registration order, label sets as given. */
static void
test_counters_with_labels(void **state)
{
    struct fixture *fx = *state;
    struct rs_metrics_counter *bad_xml, *too_big, *total, *again;
    assert_int_equal(rs_metrics_register_counter(fx->m, &total,
                                                 "rs_publish_total",
                                                 "Publications accepted.",
                                                 NULL),
                     0);
    assert_int_equal(rs_metrics_register_counter(
                         fx->m, &bad_xml, "rs_publish_rejected_total",
                         "Publications refused.", "reason", "bad_xml", NULL),
                     0);
    assert_int_equal(rs_metrics_register_counter(
                         fx->m, &too_big, "rs_publish_rejected_total", NULL,
                         "reason", "too_big", "topic", "news", NULL),
                     0);
    rs_metrics_counter_add(total, 41);
    rs_metrics_counter_inc(total);
    rs_metrics_counter_inc(bad_xml);
    rs_metrics_counter_add(too_big, UINT64_MAX - 1);
    assert_int_equal(rs_metrics_counter_get(total), 42);
    assert_string_equal(render(fx),
        "# HELP rs_publish_total Publications accepted.\n"
        "# TYPE rs_publish_total counter\n"
        "rs_publish_total 42\n"
        "# HELP rs_publish_rejected_total Publications refused.\n"
        "# TYPE rs_publish_rejected_total counter\n"
        "rs_publish_rejected_total{reason=\"bad_xml\"} 1\n"
        "rs_publish_rejected_total{reason=\"too_big\",topic=\"news\"} "
        "18446744073709551614\n");
    /* the same label set twice is refused, the registry unchanged */
    assert_int_equal(rs_metrics_register_counter(
                         fx->m, &again, "rs_publish_rejected_total", "x",
                         "reason", "bad_xml", NULL),
                     RS_EINVAL);
}

/* metrics/gauges: set and add (also negative) on int64 gauges. */
static void
test_gauges(void **state)
{
    struct fixture *fx = *state;
    struct rs_metrics_gauge *conns, *lag;
    assert_int_equal(rs_metrics_register_gauge(fx->m, &conns,
                                               "rs_ws_connections",
                                               "Open WebSocket connections.",
                                               NULL),
                     0);
    assert_int_equal(rs_metrics_register_gauge(fx->m, &lag, "rs_lag",
                                               "Lag.", "peer", "a", NULL),
                     0);
    rs_metrics_gauge_set(conns, 10);
    rs_metrics_gauge_add(conns, -3);
    rs_metrics_gauge_add(lag, -5);
    assert_int_equal(rs_metrics_gauge_get(conns), 7);
    assert_string_equal(render(fx),
        "# HELP rs_ws_connections Open WebSocket connections.\n"
        "# TYPE rs_ws_connections gauge\n"
        "rs_ws_connections 7\n"
        "# HELP rs_lag Lag.\n"
        "# TYPE rs_lag gauge\n"
        "rs_lag{peer=\"a\"} -5\n");
}

static double
backlog_len(void *ud)
{
    const double *v = ud;
    return *v;
}

/* metrics/gauge_callbacks: callback gauges are evaluated at each render
 * and formatted as Prometheus floats (integers plainly, NaN, +Inf). */
static void
test_gauge_callbacks(void **state)
{
    struct fixture *fx = *state;
    double backlog = 12, ratio = 0.1, inf = INFINITY, nan = NAN;
    assert_int_equal(rs_metrics_register_gauge_fn(fx->m, "rs_backlog",
                                                  "Backlog entries.",
                                                  backlog_len, &backlog,
                                                  "channel", "news", NULL),
                     0);
    assert_int_equal(rs_metrics_register_gauge_fn(fx->m, "rs_ratio", "R.",
                                                  backlog_len, &ratio, NULL),
                     0);
    assert_int_equal(rs_metrics_register_gauge_fn(fx->m, "rs_x", "X.",
                                                  backlog_len, &inf, "v",
                                                  "inf", NULL),
                     0);
    assert_int_equal(rs_metrics_register_gauge_fn(fx->m, "rs_x", NULL,
                                                  backlog_len, &nan, "v",
                                                  "nan", NULL),
                     0);
    assert_int_equal(rs_metrics_register_gauge_fn(fx->m, "rs_y", "Y.", NULL,
                                                  NULL, NULL),
                     RS_EINVAL);
    static const char fmt[] =
        "# HELP rs_backlog Backlog entries.\n"
        "# TYPE rs_backlog gauge\n"
        "rs_backlog{channel=\"news\"} %s\n"
        "# HELP rs_ratio R.\n"
        "# TYPE rs_ratio gauge\n"
        "rs_ratio %s\n"
        "# HELP rs_x X.\n"
        "# TYPE rs_x gauge\n"
        "rs_x{v=\"inf\"} +Inf\n"
        "rs_x{v=\"nan\"} NaN\n";
    char want[512];
    snprintf(want, sizeof(want), fmt, "12", "0.1");
    assert_string_equal(render(fx), want);
    backlog = 1e20;
    ratio = -2.5e-7;
    snprintf(want, sizeof(want), fmt, "1e+20", "-2.5e-07");
    assert_string_equal(render(fx), want);
}

/* metrics/histograms: cumulative buckets (le is "<="), +Inf, _sum and
 * _count, bounds written shortest, labels before le. */
static void
test_histograms(void **state)
{
    struct fixture *fx = *state;
    static const double bounds[] = { 0.005, 0.25, 1, 10 };
    struct rs_metrics_histogram *lat, *ws;
    assert_int_equal(rs_metrics_register_histogram(
                         fx->m, &lat, "rs_delivery_seconds",
                         "Delivery latency.", bounds, 4, NULL),
                     0);
    assert_int_equal(rs_metrics_register_histogram(
                         fx->m, &ws, "rs_delivery_seconds", NULL, bounds, 2,
                         "via", "ws", NULL),
                     0);
    rs_metrics_histogram_observe(lat, 0.125);
    rs_metrics_histogram_observe(lat, 0.25);   /* on a bound: le="0.25" */
    rs_metrics_histogram_observe(lat, 0.5);
    rs_metrics_histogram_observe(lat, 100);
    rs_metrics_histogram_observe(ws, 0.001);
    assert_string_equal(render(fx),
        "# HELP rs_delivery_seconds Delivery latency.\n"
        "# TYPE rs_delivery_seconds histogram\n"
        "rs_delivery_seconds_bucket{le=\"0.005\"} 0\n"
        "rs_delivery_seconds_bucket{le=\"0.25\"} 2\n"
        "rs_delivery_seconds_bucket{le=\"1\"} 3\n"
        "rs_delivery_seconds_bucket{le=\"10\"} 3\n"
        "rs_delivery_seconds_bucket{le=\"+Inf\"} 4\n"
        "rs_delivery_seconds_sum 100.875\n"
        "rs_delivery_seconds_count 4\n"
        "rs_delivery_seconds_bucket{via=\"ws\",le=\"0.005\"} 1\n"
        "rs_delivery_seconds_bucket{via=\"ws\",le=\"0.25\"} 1\n"
        "rs_delivery_seconds_bucket{via=\"ws\",le=\"+Inf\"} 1\n"
        "rs_delivery_seconds_sum{via=\"ws\"} 0.001\n"
        "rs_delivery_seconds_count{via=\"ws\"} 1\n");
}

/* metrics/escaping: label values escape backslash, quote and newline;
 * HELP text escapes backslash and newline only. */
static void
test_escaping(void **state)
{
    struct fixture *fx = *state;
    struct rs_metrics_counter *c;
    assert_int_equal(rs_metrics_register_counter(
                         fx->m, &c, "rs_odd_total", "A \\ \"help\"\nline.",
                         "path", "C:\\dir\\\"x\"\nnext", "empty", "", NULL),
                     0);
    assert_string_equal(render(fx),
        "# HELP rs_odd_total A \\\\ \"help\"\\nline.\n"
        "# TYPE rs_odd_total counter\n"
        "rs_odd_total{path=\"C:\\\\dir\\\\\\\"x\\\"\\nnext\",empty=\"\"} 0\n");
}

/* metrics/invalid_refused: bad metric and label names, reserved labels,
 * bad bounds, missing help, type clashes are RS_EINVAL, and a refused
 * registration leaves the registry as it was. */
static void
test_invalid_refused(void **state)
{
    struct fixture *fx = *state;
    struct rs_metrics_counter *c;
    struct rs_metrics_gauge *g;
    struct rs_metrics_histogram *h;
    static const char *const bad_names[] = { "", "1abc", "a-b", "a b",
                                             "é", "a.b", NULL };
    for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++)
        assert_int_equal(rs_metrics_register_counter(fx->m, &c, bad_names[i],
                                                     "h", NULL),
                         RS_EINVAL);
    static const char *const bad_labels[] = { "__x", "1a", "a-b", "a:b",
                                              "" };
    for (size_t i = 0; i < sizeof(bad_labels) / sizeof(bad_labels[0]); i++)
        assert_int_equal(rs_metrics_register_counter(fx->m, &c, "ok_total",
                                                     "h", bad_labels[i], "v",
                                                     NULL),
                         RS_EINVAL);
    /* a label name with no value */
    assert_int_equal(rs_metrics_register_counter(fx->m, &c, "ok_total", "h",
                                                 "a", (const char *)NULL,
                                                 NULL),
                     RS_EINVAL);
    assert_int_equal(rs_metrics_register_counter(fx->m, &c, "ok_total", NULL,
                                                 NULL),
                     RS_EINVAL);
    static const double up[] = { 1, 2 }, flat[] = { 1, 1 },
                        down[] = { 2, 1 }, inf[] = { 1, INFINITY },
                        nan[] = { NAN };
    assert_int_equal(rs_metrics_register_histogram(fx->m, &h, "ok_seconds",
                                                   "h", up, 2, "le", "1",
                                                   NULL),
                     RS_EINVAL);
    assert_int_equal(rs_metrics_register_histogram(fx->m, &h, "ok_seconds",
                                                   "h", flat, 2, NULL),
                     RS_EINVAL);
    assert_int_equal(rs_metrics_register_histogram(fx->m, &h, "ok_seconds",
                                                   "h", down, 2, NULL),
                     RS_EINVAL);
    assert_int_equal(rs_metrics_register_histogram(fx->m, &h, "ok_seconds",
                                                   "h", inf, 2, NULL),
                     RS_EINVAL);
    assert_int_equal(rs_metrics_register_histogram(fx->m, &h, "ok_seconds",
                                                   "h", nan, 1, NULL),
                     RS_EINVAL);
    assert_int_equal(rs_metrics_register_histogram(fx->m, &h, "ok_seconds",
                                                   "h", NULL, 2, NULL),
                     RS_EINVAL);
    assert_string_equal(render(fx), "");

    /* valid: colons in metric names, "le" outside histograms, only +Inf */
    assert_int_equal(rs_metrics_register_counter(fx->m, &c, "rs:ok_total",
                                                 "h", "le", "x", NULL),
                     0);
    assert_int_equal(rs_metrics_register_histogram(fx->m, &h, "ok_seconds",
                                                   "h", NULL, 0, NULL),
                     0);
    /* the same name with another type */
    assert_int_equal(rs_metrics_register_gauge(fx->m, &g, "rs:ok_total", "h",
                                               "other", "x", NULL),
                     RS_EINVAL);
    assert_string_equal(render(fx),
        "# HELP rs:ok_total h\n"
        "# TYPE rs:ok_total counter\n"
        "rs:ok_total{le=\"x\"} 0\n"
        "# HELP ok_seconds h\n"
        "# TYPE ok_seconds histogram\n"
        "ok_seconds_bucket{le=\"+Inf\"} 0\n"
        "ok_seconds_sum 0\n"
        "ok_seconds_count 0\n");
}

#define THREADS 4
#define PER_THREAD 1000000

struct worker {
    struct rs_metrics_counter *c;
    struct rs_metrics_gauge *g;
    struct rs_metrics_histogram *h;
};

static void *
worker_run(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        rs_metrics_counter_inc(w->c);
        rs_metrics_gauge_add(w->g, (i & 1) ? 3 : -1);
        rs_metrics_histogram_observe(w->h, (i & 1) ? 0.5 : 2.0);
    }
    return NULL;
}

/* metrics/threads: 4 threads x 1,000,000 updates each lose nothing:
 * counter, gauge and histogram (buckets and sum) totals are exact. */
static void
test_threads(void **state)
{
    struct fixture *fx = *state;
    static const double bounds[] = { 1 };
    struct worker w;
    assert_int_equal(rs_metrics_register_counter(fx->m, &w.c, "t_total", "T.",
                                                 NULL),
                     0);
    assert_int_equal(rs_metrics_register_gauge(fx->m, &w.g, "t_gauge", "G.",
                                               NULL),
                     0);
    assert_int_equal(rs_metrics_register_histogram(fx->m, &w.h, "t_seconds",
                                                   "H.", bounds, 1, NULL),
                     0);
    pthread_t tids[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&tids[i], NULL, worker_run, &w), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_join(tids[i], NULL), 0);
    assert_int_equal(rs_metrics_counter_get(w.c), THREADS * PER_THREAD);
    assert_int_equal(rs_metrics_gauge_get(w.g), THREADS * PER_THREAD);
    /* halves of 0.5 and 2.0: every partial sum is exact in a double */
    assert_string_equal(render(fx),
        "# HELP t_total T.\n"
        "# TYPE t_total counter\n"
        "t_total 4000000\n"
        "# HELP t_gauge G.\n"
        "# TYPE t_gauge gauge\n"
        "t_gauge 4000000\n"
        "# HELP t_seconds H.\n"
        "# TYPE t_seconds histogram\n"
        "t_seconds_bucket{le=\"1\"} 2000000\n"
        "t_seconds_bucket{le=\"+Inf\"} 4000000\n"
        "t_seconds_sum 5000000\n"
        "t_seconds_count 4000000\n");
}

static const double reg_bounds[] = { 0.1, 1 };
static double reg_value = 3;

/* Register a fixed set of metrics; the first failure's code, or 0. Step
 * start lets a caller resume after a failed step. */
static int
register_all(struct rs_metrics *m, int start, int *failed_step)
{
    struct rs_metrics_counter *c;
    struct rs_metrics_gauge *g;
    struct rs_metrics_histogram *h;
    for (int step = start; step < 5; step++) {
        int rc = 0;
        switch (step) {
        case 0:
            rc = rs_metrics_register_counter(m, &c, "a_total", "A.", "k",
                                             "v1", NULL);
            break;
        case 1:
            rc = rs_metrics_register_counter(m, &c, "a_total", NULL, "k",
                                             "v2", NULL);
            break;
        case 2:
            rc = rs_metrics_register_gauge(m, &g, "b", "B.", NULL);
            break;
        case 3:
            rc = rs_metrics_register_gauge_fn(m, "c", "C.", backlog_len,
                                              &reg_value, NULL);
            break;
        case 4:
            rc = rs_metrics_register_histogram(m, &h, "d_seconds", "D.",
                                               reg_bounds, 2, "x", "y", NULL);
            break;
        }
        if (rc != 0) {
            *failed_step = step;
            return rc;
        }
    }
    return 0;
}

static const char reg_text[] =
    "# HELP a_total A.\n"
    "# TYPE a_total counter\n"
    "a_total{k=\"v1\"} 0\n"
    "a_total{k=\"v2\"} 0\n"
    "# HELP b B.\n"
    "# TYPE b gauge\n"
    "b 0\n"
    "# HELP c C.\n"
    "# TYPE c gauge\n"
    "c 3\n"
    "# HELP d_seconds D.\n"
    "# TYPE d_seconds histogram\n"
    "d_seconds_bucket{x=\"y\",le=\"0.1\"} 0\n"
    "d_seconds_bucket{x=\"y\",le=\"1\"} 0\n"
    "d_seconds_bucket{x=\"y\",le=\"+Inf\"} 0\n"
    "d_seconds_sum{x=\"y\"} 0\n"
    "d_seconds_count{x=\"y\"} 0\n";

/* metrics/alloc_fail_register: failing the Nth allocation, for every N,
 * makes new return NULL or a registration RS_ENOMEM, leaks nothing, and
 * leaves the registry consistent: retrying the failed step and finishing
 * renders the complete text. */
static void
test_alloc_fail_register(void **state)
{
    (void)state;
    bool done = false;
    for (unsigned long n = 1; !done && n < 1000; n++) {
        int failed = -1;
        tu_alloc_fail_at(n);
        struct rs_metrics *m = rs_metrics_new();
        int rc = m != NULL ? register_all(m, 0, &failed) : RS_ENOMEM;
        unsigned long seen = tu_alloc_count();
        tu_alloc_fail_at(0);
        if (m == NULL) {
            assert_int_equal(n, 1);
            continue;
        }
        if (rc == 0) {
            assert_true(seen < n);
            done = true;
        } else {
            assert_int_equal(rc, RS_ENOMEM);
            assert_int_equal(register_all(m, failed, &failed), 0);
        }
        char *buf = NULL;
        size_t cap = 0, len = 0;
        assert_int_equal(rs_metrics_render(m, &buf, &cap, &len), 0);
        assert_string_equal(buf, reg_text);
        rs_free(buf);
        rs_metrics_free(m);
    }
    assert_true(done);
}

/* metrics/alloc_fail_render: failing the Nth allocation while rendering
 * gives RS_ENOMEM with the caller's buffer still freeable; a buffer that
 * is large enough is reused without allocating. */
static void
test_alloc_fail_render(void **state)
{
    struct fixture *fx = *state;
    int failed;
    assert_int_equal(register_all(fx->m, 0, &failed), 0);
    bool done = false;
    for (unsigned long n = 1; !done && n < 100; n++) {
        char *buf = NULL;
        size_t cap = 0, len = 0;
        tu_alloc_fail_at(n);
        int rc = rs_metrics_render(fx->m, &buf, &cap, &len);
        unsigned long seen = tu_alloc_count();
        tu_alloc_fail_at(0);
        if (rc == 0) {
            assert_true(seen < n);
            assert_string_equal(buf, reg_text);
            done = true;
        } else {
            assert_int_equal(rc, RS_ENOMEM);
            assert_int_equal(len, 0);
        }
        rs_free(buf);
    }
    assert_true(done);

    render(fx);
    tu_alloc_fail_at(ULONG_MAX);
    render(fx);
    assert_int_equal(tu_alloc_count(), 0);
    tu_alloc_fail_at(0);
    assert_string_equal(fx->buf, reg_text);
}

/* Tests are named module/behaviour, as in every unit test file. */
#define T(name, fn, su, td) { name, fn, su, td, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        T("metrics/null_is_noop", test_null_is_noop, setup, teardown),
        T("metrics/counters_with_labels", test_counters_with_labels,
          setup, teardown),
        T("metrics/gauges", test_gauges, setup, teardown),
        T("metrics/gauge_callbacks", test_gauge_callbacks, setup, teardown),
        T("metrics/histograms", test_histograms, setup, teardown),
        T("metrics/escaping", test_escaping, setup, teardown),
        T("metrics/invalid_refused", test_invalid_refused, setup, teardown),
        T("metrics/threads", test_threads, setup, teardown),
        T("metrics/alloc_fail_register", test_alloc_fail_register, NULL, NULL),
        T("metrics/alloc_fail_render", test_alloc_fail_render, setup, teardown),
    };
    return cmocka_run_group_tests_name("metrics", tests, NULL, NULL);
}
