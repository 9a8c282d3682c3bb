/*
 * rs_metrics.h - a registry of Prometheus metrics (counters, gauges,
 * callback gauges, histograms) and its text exposition (format 0.0.4).
 * Updates are lock-free atomics, safe from any thread; registration and
 * rendering take the registry's mutex. Serving the text over HTTP is the
 * caller's business.
 */
#ifndef RS_METRICS_H
#define RS_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"

/* The Content-Type of what rs_metrics_render produces. */
#define RS_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct rs_metrics;
struct rs_metrics_counter;
struct rs_metrics_gauge;
struct rs_metrics_histogram;

/* Evaluated at each render, from the rendering thread, with the registry
 * locked: it must not register or render (it may update metrics). */
typedef double (*rs_metrics_gauge_cb)(void *ud);

/* A new, empty registry; NULL when out of memory. */
struct rs_metrics *rs_metrics_new(void);

/* Free the registry and every metric in it: the handles die with it.
 * No other thread may use it any more. rs_metrics_free(NULL) is a no-op. */
void rs_metrics_free(struct rs_metrics *m);

/*
 * Registration. name matches [a-zA-Z_:][a-zA-Z0-9_:]*. The variadic tail
 * is the series' fixed labels as name, value string pairs ended by one
 * NULL in name position:
 *
 *     rs_metrics_register_counter(m, &bad_xml, "rs_publish_rejected_total",
 *                                 "Publications refused.", "reason",
 *                                 "bad_xml", NULL);
 *
 * Label names match [a-zA-Z_][a-zA-Z0-9_]* and do not start with "__";
 * values are any text (escaped on output). Registering a name again with
 * another label set adds a series to the same metric: the type must match,
 * the help of the first registration is kept, and an identical label set
 * (same names and values in the same order) is refused. Metrics and series
 * are rendered in registration order. The registry owns every handle.
 *
 * Returns 0, RS_EINVAL (bad name, label, bounds, type clash, duplicate
 * series, missing help for a new name) or RS_ENOMEM; *out is set only on
 * success.
 */
int rs_metrics_register_counter(struct rs_metrics *m,
                                struct rs_metrics_counter **out,
                                const char *name, const char *help, ...)
    RS_MUST_CHECK __attribute__((sentinel));
int rs_metrics_register_gauge(struct rs_metrics *m,
                              struct rs_metrics_gauge **out, const char *name,
                              const char *help, ...)
    RS_MUST_CHECK __attribute__((sentinel));
/* A gauge whose value is fn(ud) at render time (backlog length, clients). */
int rs_metrics_register_gauge_fn(struct rs_metrics *m, const char *name,
                                 const char *help, rs_metrics_gauge_cb fn,
                                 void *ud, ...)
    RS_MUST_CHECK __attribute__((sentinel));
/* bounds: nbounds finite upper bounds, strictly increasing (copied); the
 * +Inf bucket is implicit. The label name "le" is reserved. */
int rs_metrics_register_histogram(struct rs_metrics *m,
                                  struct rs_metrics_histogram **out,
                                  const char *name, const char *help,
                                  const double *bounds, size_t nbounds, ...)
    RS_MUST_CHECK __attribute__((sentinel));

/*
 * Updates: lock-free, from any thread. A NULL handle is a no-op, so code
 * can run without a registry (unit tests, tools).
 */
void rs_metrics_counter_add(struct rs_metrics_counter *c, uint64_t n);
void rs_metrics_counter_inc(struct rs_metrics_counter *c);
uint64_t rs_metrics_counter_get(const struct rs_metrics_counter *c);
void rs_metrics_gauge_set(struct rs_metrics_gauge *g, int64_t v);
void rs_metrics_gauge_add(struct rs_metrics_gauge *g, int64_t delta);
int64_t rs_metrics_gauge_get(const struct rs_metrics_gauge *g);
/* v goes in the first bucket whose bound is >= v (NaN: only +Inf). A
 * concurrent render may see the bucket before the sum: the exposition is
 * not a snapshot, which Prometheus tolerates. */
void rs_metrics_histogram_observe(struct rs_metrics_histogram *h, double v);

/*
 * Render every metric as Prometheus text into *buf, a buffer of *cap bytes
 * owned by the caller and grown here with rs_realloc (start with NULL, 0;
 * reuse it across scrapes; rs_free it at the end, also after an error).
 * On success *len is the length of the text, which is also NUL-terminated.
 * Returns 0 or RS_ENOMEM.
 */
int rs_metrics_render(struct rs_metrics *m, char **buf, size_t *cap,
                      size_t *len) RS_MUST_CHECK;

#endif
