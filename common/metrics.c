/*
 * metrics.c - the metrics registry (rs_metrics.h): families of series in
 * registration order, atomic values updated without locks, and the
 * Prometheus text they render to. What to measure, and serving the text,
 * is left to the daemons.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rs_alloc.h"
#include "rs_metrics.h"

enum metrics_type {
    METRICS_COUNTER,
    METRICS_GAUGE,
    METRICS_HISTOGRAM,
};

static const char *const metrics_type_names[] = {
    [METRICS_COUNTER] = "counter",
    [METRICS_GAUGE] = "gauge",
    [METRICS_HISTOGRAM] = "histogram",
};

struct rs_metrics_counter {
    _Atomic uint64_t value;
};

struct rs_metrics_gauge {
    _Atomic int64_t value;
    rs_metrics_gauge_cb fn;       /* when set, value is unused */
    void *ud;
};

struct rs_metrics_histogram {
    size_t nbounds;
    double *bounds;               /* strictly increasing, finite */
    /* nbounds + 1 per-bucket (not cumulative) counts, the last for +Inf:
     * one atomic add per observation, and _count is their total, so the
     * +Inf bucket always equals _count. */
    _Atomic uint64_t *buckets;
    _Atomic double sum;
};

struct metrics_series {
    struct metrics_series *next;
    char *labels;                 /* rendered: a="x",b="y" ("" if none) */
    union {
        struct rs_metrics_counter counter;
        struct rs_metrics_gauge gauge;
        struct rs_metrics_histogram histogram;
    } u;
};

struct metrics_family {
    struct metrics_family *next;
    char *name;
    char *help;                   /* escaped for the HELP line */
    enum metrics_type type;
    struct metrics_series *series;
    struct metrics_series **tail; /* where the next series is linked */
};

struct rs_metrics {
    pthread_mutex_t lock;         /* guards the lists, not the values */
    struct metrics_family *families;
    struct metrics_family **tail;
};

/* ----------------------------------------------------------- text buffer */

/* A growing buffer with a sticky error, so that formatting code appends
 * freely and checks once at the end. */
struct metrics_buf {
    char *data;
    size_t len;
    size_t cap;
    int rc;
};

static void
metrics_buf_put(struct metrics_buf *b, const char *s, size_t n)
{
    if (b->rc != 0)
        return;
    if (b->cap - b->len < n + 1) {
        size_t cap = b->cap != 0 ? b->cap : 64;
        while (cap - b->len < n + 1) {
            if (cap > SIZE_MAX / 2) {
                b->rc = RS_ENOMEM;
                return;
            }
            cap *= 2;
        }
        char *data = rs_realloc(b->data, cap);
        if (data == NULL) {
            b->rc = RS_ENOMEM;
            return;
        }
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void
metrics_buf_str(struct metrics_buf *b, const char *s)
{
    metrics_buf_put(b, s, strlen(s));
}

/* Label values escape \, " and newline; HELP text only \ and newline. */
static void
metrics_buf_escaped(struct metrics_buf *b, const char *s, bool quote)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\')
            metrics_buf_put(b, "\\\\", 2);
        else if (*s == '\n')
            metrics_buf_put(b, "\\n", 2);
        else if (*s == '"' && quote)
            metrics_buf_put(b, "\\\"", 2);
        else
            metrics_buf_put(b, s, 1);
    }
}

/* Integral values print as integers ("1", not "1e+00"); others with the
 * fewest digits that read back to the same double, so bucket bounds show
 * as written ("0.005", not "0.0050000000000000001"). */
static void
metrics_format_double(double v, char *buf, size_t len)
{
    if (isnan(v)) {
        snprintf(buf, len, "NaN");
    } else if (isinf(v)) {
        snprintf(buf, len, "%s", v > 0 ? "+Inf" : "-Inf");
    } else if (v > -1e15 && v < 1e15 && v == (double)(int64_t)v) {
        snprintf(buf, len, "%lld", (long long)v);
    } else {
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(buf, len, "%.*g", prec, v);
            if (strtod(buf, NULL) == v)
                break;
        }
    }
}

/* ---------------------------------------------------------- registration */

static bool
metrics_name_ok(const char *s, bool is_label)
{
    if (s == NULL || s[0] == '\0' || (s[0] >= '0' && s[0] <= '9'))
        return false;
    if (is_label && strncmp(s, "__", 2) == 0)
        return false;
    const char *chars = is_label
        ? "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"
        : "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:";
    return strspn(s, chars) == strlen(s);
}

/* Render the label pairs once, at registration: a="x",b="y". */
static int
metrics_labels(va_list ap, bool histogram, char **out)
{
    struct metrics_buf b = { 0 };
    metrics_buf_put(&b, "", 0);   /* "" rather than NULL when no labels */
    const char *key;
    while ((key = va_arg(ap, const char *)) != NULL) {
        const char *value = va_arg(ap, const char *);
        if (!metrics_name_ok(key, true) || value == NULL ||
            (histogram && strcmp(key, "le") == 0)) {
            rs_free(b.data);
            return RS_EINVAL;
        }
        if (b.len > 0)
            metrics_buf_put(&b, ",", 1);
        metrics_buf_str(&b, key);
        metrics_buf_put(&b, "=\"", 2);
        metrics_buf_escaped(&b, value, true);
        metrics_buf_put(&b, "\"", 1);
    }
    if (b.rc != 0) {
        rs_free(b.data);
        return b.rc;
    }
    *out = b.data;
    return 0;
}

static void
metrics_series_free(struct metrics_series *s, enum metrics_type type)
{
    if (s == NULL)
        return;
    if (type == METRICS_HISTOGRAM) {
        rs_free(s->u.histogram.bounds);
        rs_free(s->u.histogram.buckets);
    }
    rs_free(s->labels);
    rs_free(s);
}

static void
metrics_family_free(struct metrics_family *f)
{
    if (f == NULL)
        return;
    struct metrics_series *s = f->series;
    while (s != NULL) {
        struct metrics_series *next = s->next;
        metrics_series_free(s, f->type);
        s = next;
    }
    rs_free(f->name);
    rs_free(f->help);
    rs_free(f);
}

static struct metrics_family *
metrics_family_new(const char *name, const char *help, enum metrics_type type)
{
    struct metrics_family *f = rs_calloc(1, sizeof(*f));
    if (f == NULL)
        return NULL;
    struct metrics_buf b = { 0 };
    metrics_buf_escaped(&b, help, false);
    metrics_buf_put(&b, "", 0);
    f->help = b.data;
    f->name = rs_strdup(name);
    f->type = type;
    f->tail = &f->series;
    if (b.rc != 0 || f->name == NULL) {
        metrics_family_free(f);
        return NULL;
    }
    return f;
}

static int
metrics_histogram_init(struct rs_metrics_histogram *h, const double *bounds,
                       size_t nbounds)
{
    for (size_t i = 0; i < nbounds; i++)
        if (!isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
            return RS_EINVAL;
    h->nbounds = nbounds;
    h->bounds = rs_calloc(nbounds + 1, sizeof(*h->bounds));
    h->buckets = rs_calloc(nbounds + 1, sizeof(*h->buckets));
    if (h->bounds == NULL || h->buckets == NULL)
        return RS_ENOMEM;
    for (size_t i = 0; i < nbounds; i++)
        h->bounds[i] = bounds[i];
    for (size_t i = 0; i <= nbounds; i++)
        atomic_init(&h->buckets[i], 0);
    atomic_init(&h->sum, 0.0);
    return 0;
}

/* A zeroed series of one type; the caller fills the type's fields. */
static struct metrics_series *
metrics_series_new(enum metrics_type type)
{
    struct metrics_series *s = rs_calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    if (type == METRICS_COUNTER)
        atomic_init(&s->u.counter.value, 0);
    else if (type == METRICS_GAUGE)
        atomic_init(&s->u.gauge.value, 0);
    return s;
}

/*
 * Add the series s (built by the caller, owned from here on) under name.
 * Everything that can fail is built before the lock is taken and linked
 * under it, so a failed registration leaves the registry as it was.
 */
static int
metrics_register(struct rs_metrics *m, enum metrics_type type,
                 const char *name, const char *help, va_list ap,
                 struct metrics_series *s)
{
    struct metrics_family *fresh = NULL;
    int rc;

    if (m == NULL || !metrics_name_ok(name, false)) {
        rc = RS_EINVAL;
        goto out;
    }
    rc = metrics_labels(ap, type == METRICS_HISTOGRAM, &s->labels);
    if (rc != 0)
        goto out;

    pthread_mutex_lock(&m->lock);
    struct metrics_family *f = m->families;
    while (f != NULL && strcmp(f->name, name) != 0)
        f = f->next;
    if (f == NULL) {
        if (help == NULL) {
            rc = RS_EINVAL;
            goto unlock;
        }
        fresh = f = metrics_family_new(name, help, type);
        if (f == NULL) {
            rc = RS_ENOMEM;
            goto unlock;
        }
    } else if (f->type != type) {
        rc = RS_EINVAL;
        goto unlock;
    }
    for (const struct metrics_series *t = f->series; t != NULL; t = t->next)
        if (strcmp(t->labels, s->labels) == 0) {
            rc = RS_EINVAL;
            goto unlock;
        }
    if (fresh != NULL) {
        *m->tail = fresh;
        m->tail = &fresh->next;
        fresh = NULL;
    }
    *f->tail = s;
    f->tail = &s->next;
    s = NULL;
unlock:
    pthread_mutex_unlock(&m->lock);
out:
    metrics_family_free(fresh);
    metrics_series_free(s, type);
    return rc;
}

struct rs_metrics *
rs_metrics_new(void)
{
    struct rs_metrics *m = rs_calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    if (pthread_mutex_init(&m->lock, NULL) != 0) {
        rs_free(m);
        return NULL;
    }
    m->tail = &m->families;
    return m;
}

void
rs_metrics_free(struct rs_metrics *m)
{
    if (m == NULL)
        return;
    struct metrics_family *f = m->families;
    while (f != NULL) {
        struct metrics_family *next = f->next;
        metrics_family_free(f);
        f = next;
    }
    pthread_mutex_destroy(&m->lock);
    rs_free(m);
}

int
rs_metrics_register_counter(struct rs_metrics *m,
                            struct rs_metrics_counter **out, const char *name,
                            const char *help, ...)
{
    struct metrics_series *s = metrics_series_new(METRICS_COUNTER);
    if (s == NULL)
        return RS_ENOMEM;
    va_list ap;
    va_start(ap, help);
    int rc = metrics_register(m, METRICS_COUNTER, name, help, ap, s);
    va_end(ap);
    if (rc == 0)
        *out = &s->u.counter;
    return rc;
}

int
rs_metrics_register_gauge(struct rs_metrics *m, struct rs_metrics_gauge **out,
                          const char *name, const char *help, ...)
{
    struct metrics_series *s = metrics_series_new(METRICS_GAUGE);
    if (s == NULL)
        return RS_ENOMEM;
    va_list ap;
    va_start(ap, help);
    int rc = metrics_register(m, METRICS_GAUGE, name, help, ap, s);
    va_end(ap);
    if (rc == 0)
        *out = &s->u.gauge;
    return rc;
}

int
rs_metrics_register_gauge_fn(struct rs_metrics *m, const char *name,
                             const char *help, rs_metrics_gauge_cb fn,
                             void *ud, ...)
{
    if (fn == NULL)
        return RS_EINVAL;
    struct metrics_series *s = metrics_series_new(METRICS_GAUGE);
    if (s == NULL)
        return RS_ENOMEM;
    s->u.gauge.fn = fn;
    s->u.gauge.ud = ud;
    va_list ap;
    va_start(ap, ud);
    int rc = metrics_register(m, METRICS_GAUGE, name, help, ap, s);
    va_end(ap);
    return rc;
}

int
rs_metrics_register_histogram(struct rs_metrics *m,
                              struct rs_metrics_histogram **out,
                              const char *name, const char *help,
                              const double *bounds, size_t nbounds, ...)
{
    if (bounds == NULL && nbounds > 0)
        return RS_EINVAL;
    struct metrics_series *s = metrics_series_new(METRICS_HISTOGRAM);
    if (s == NULL)
        return RS_ENOMEM;
    int rc = metrics_histogram_init(&s->u.histogram, bounds, nbounds);
    if (rc != 0) {
        metrics_series_free(s, METRICS_HISTOGRAM);
        return rc;
    }
    va_list ap;
    va_start(ap, nbounds);
    rc = metrics_register(m, METRICS_HISTOGRAM, name, help, ap, s);
    va_end(ap);
    if (rc == 0)
        *out = &s->u.histogram;
    return rc;
}

/* ---------------------------------------------------------------- updates */

/* Relaxed order throughout: a metric publishes no other memory, and each
 * value only needs its own atomicity. */

void
rs_metrics_counter_add(struct rs_metrics_counter *c, uint64_t n)
{
    if (c != NULL)
        atomic_fetch_add_explicit(&c->value, n, memory_order_relaxed);
}

void
rs_metrics_counter_inc(struct rs_metrics_counter *c)
{
    rs_metrics_counter_add(c, 1);
}

uint64_t
rs_metrics_counter_get(const struct rs_metrics_counter *c)
{
    if (c == NULL)
        return 0;
    return atomic_load_explicit(&c->value, memory_order_relaxed);
}

void
rs_metrics_gauge_set(struct rs_metrics_gauge *g, int64_t v)
{
    if (g != NULL)
        atomic_store_explicit(&g->value, v, memory_order_relaxed);
}

void
rs_metrics_gauge_add(struct rs_metrics_gauge *g, int64_t delta)
{
    if (g != NULL)
        atomic_fetch_add_explicit(&g->value, delta, memory_order_relaxed);
}

int64_t
rs_metrics_gauge_get(const struct rs_metrics_gauge *g)
{
    if (g == NULL)
        return 0;
    return atomic_load_explicit(&g->value, memory_order_relaxed);
}

void
rs_metrics_histogram_observe(struct rs_metrics_histogram *h, double v)
{
    if (h == NULL)
        return;
    /* Few buckets (about a dozen): a linear scan beats a binary search's
     * branches. !(v <= bound) sends NaN past every bound, to +Inf. */
    size_t i = 0;
    while (i < h->nbounds && !(v <= h->bounds[i]))
        i++;
    atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
    /* C11 has no atomic add for doubles: compare-and-swap until no other
     * thread changed the sum in between. */
    double old = atomic_load_explicit(&h->sum, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(
        &h->sum, &old, old + v, memory_order_relaxed, memory_order_relaxed))
        ;
}

/* ----------------------------------------------------------------- render */

/* One sample line: NAME[SUFFIX][{LABELS[,le="LE"]}] VALUE */
static void
metrics_sample(struct metrics_buf *b, const char *name, const char *suffix,
               const char *labels, const char *le, const char *value)
{
    metrics_buf_str(b, name);
    metrics_buf_str(b, suffix);
    if (labels[0] != '\0' || le != NULL) {
        metrics_buf_put(b, "{", 1);
        metrics_buf_str(b, labels);
        if (le != NULL) {
            if (labels[0] != '\0')
                metrics_buf_put(b, ",", 1);
            metrics_buf_put(b, "le=\"", 4);
            metrics_buf_str(b, le);
            metrics_buf_put(b, "\"", 1);
        }
        metrics_buf_put(b, "}", 1);
    }
    metrics_buf_put(b, " ", 1);
    metrics_buf_str(b, value);
    metrics_buf_put(b, "\n", 1);
}

static void
metrics_render_histogram(struct metrics_buf *b, const struct metrics_family *f,
                         const struct metrics_series *s)
{
    const struct rs_metrics_histogram *h = &s->u.histogram;
    char le[32], value[32];
    uint64_t total = 0;
    for (size_t i = 0; i <= h->nbounds; i++) {
        total += atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
        if (i < h->nbounds)
            metrics_format_double(h->bounds[i], le, sizeof(le));
        else
            snprintf(le, sizeof(le), "+Inf");
        snprintf(value, sizeof(value), "%llu", (unsigned long long)total);
        metrics_sample(b, f->name, "_bucket", s->labels, le, value);
    }
    metrics_format_double(atomic_load_explicit(&h->sum, memory_order_relaxed),
                          value, sizeof(value));
    metrics_sample(b, f->name, "_sum", s->labels, NULL, value);
    snprintf(value, sizeof(value), "%llu", (unsigned long long)total);
    metrics_sample(b, f->name, "_count", s->labels, NULL, value);
}

int
rs_metrics_render(struct rs_metrics *m, char **buf, size_t *cap, size_t *len)
{
    struct metrics_buf b = { .data = *buf, .cap = *cap };
    char value[32];

    metrics_buf_put(&b, "", 0);   /* a valid "" even with no metrics */
    pthread_mutex_lock(&m->lock);
    for (const struct metrics_family *f = m->families; f; f = f->next) {
        metrics_buf_str(&b, "# HELP ");
        metrics_buf_str(&b, f->name);
        metrics_buf_put(&b, " ", 1);
        metrics_buf_str(&b, f->help);
        metrics_buf_str(&b, "\n# TYPE ");
        metrics_buf_str(&b, f->name);
        metrics_buf_put(&b, " ", 1);
        metrics_buf_str(&b, metrics_type_names[f->type]);
        metrics_buf_put(&b, "\n", 1);
        for (struct metrics_series *s = f->series; s; s = s->next) {
            switch (f->type) {
            case METRICS_COUNTER:
                snprintf(value, sizeof(value), "%llu",
                         (unsigned long long)atomic_load_explicit(
                             &s->u.counter.value, memory_order_relaxed));
                metrics_sample(&b, f->name, "", s->labels, NULL, value);
                break;
            case METRICS_GAUGE:
                if (s->u.gauge.fn != NULL)
                    metrics_format_double(s->u.gauge.fn(s->u.gauge.ud), value,
                                          sizeof(value));
                else
                    snprintf(value, sizeof(value), "%lld",
                             (long long)atomic_load_explicit(
                                 &s->u.gauge.value, memory_order_relaxed));
                metrics_sample(&b, f->name, "", s->labels, NULL, value);
                break;
            case METRICS_HISTOGRAM:
                metrics_render_histogram(&b, f, s);
                break;
            }
        }
    }
    pthread_mutex_unlock(&m->lock);
    *buf = b.data;
    *cap = b.cap;
    *len = b.rc == 0 ? b.len : 0;
    return b.rc;
}
