/*
 * seam.c - the libevent loop <-> libwebsockets threads seam (rs_seam.h): one
 * locked FIFO per end, the loop's eventfd, lws_cancel_service() for the
 * threads, the threads' lives and the byte accounting. Nothing here knows
 * what an item means.
 *
 * Locking: each end has one mutex, which guards its FIFO, its figures, its
 * stop request, the thread's state and context, and the flows whose items go
 * to it. No call holds two end mutexes, and none calls back into the user
 * under one (on_loop and on_drop run unlocked), so there is no lock order to
 * break. A thread is woken under its end's mutex: lws_cancel_service takes
 * no lock of lws's (LWS_MAX_SMP 1) and only writes the context's pipe, and
 * doing it locked means rs_seam_join cannot destroy that pipe under a
 * concurrent push. The loop's eventfd is written unlocked: it lives until
 * rs_seam_free, which runs after every thread is joined.
 */
#include <errno.h>
#include <event2/event.h>
#include <libwebsockets.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define RS_LOG_MODULE "seam"
#include "rs_alloc.h"
#include "rs_daemon.h"
#include "rs_log.h"
#include "rs_seam.h"
#include "rs_time.h"

enum item_state {
    IT_FREE = 0,      /* not queued: the producer's or the consumer's */
    IT_QUEUED,
    IT_SEALED,        /* the consumer is done with it: no more marks */
};

/* A service thread's life. Only forward, through end_set_state. */
enum end_state {
    END_IDLE = 0,     /* not started (or it could not be) */
    END_RUNNING,      /* in its service loop */
    END_EXITING,      /* leaves the loop at the end of this round */
    END_DONE,         /* out of the loop; waiting to be joined */
    END_JOINED,       /* joined: never woken again, its context may go */
};

static const char *const end_state_names[] = {
    "idle", "running", "exiting", "done", "joined",
};

struct seam_end {
    pthread_mutex_t mu;
    pthread_cond_t cv;               /* threads: state changed (join waits) */
    struct rs_seam_item *head, *tail;
    size_t items, bytes, peak;
    uint64_t pushed, wakes, pauses;
    bool stop_req;
    /* threads only; ctx and state under mu (the service loop reads state
     * without it, hence atomic) */
    struct rs_seam *s;
    unsigned idx;
    struct lws_context *ctx;
    pthread_t tid;
    atomic_int state;
    atomic_uint_fast64_t counters[RS_SEAM_COUNTERS];
    char pad[64];                    /* ends apart: counters are hot */
};

struct rs_seam {
    struct rs_seam_opts o;
    unsigned n;                      /* threads; ends[n] is the loop's */
    int efd;
    struct event *ev_wake;
    size_t inited;                   /* ends whose mutex and cv exist */
    struct seam_end *ends;
};

/* ------------------------------------------------------------- helpers */

static struct seam_end *
end_of(const struct rs_seam *s, unsigned at)
{
    if (at == RS_SEAM_LOOP)
        return &s->ends[s->n];
    return at < s->n ? &s->ends[at] : NULL;
}

static struct seam_end *
thread_of(const struct rs_seam *s, unsigned t)
{
    return t < s->n ? &s->ends[t] : NULL;
}

/* Under e->mu. The one place a thread's state changes. */
static void
end_set_state(struct seam_end *e, enum end_state to)
{
    int from = atomic_load(&e->state);
    if ((int)to <= from)
        return;
    if (rs_log_enabled(RS_LOG_DEBUG))
        rs_log(RS_LOG_DEBUG, "%s thread %u: %s -> %s",
               e->s->o.name != NULL ? e->s->o.name : "seam", e->idx,
               end_state_names[from], end_state_names[to]);
    atomic_store(&e->state, (int)to);
    pthread_cond_broadcast(&e->cv);
}

/* Under e->mu: poke a thread that can be poked. */
static void
end_wake_locked(struct seam_end *e)
{
    if (e->ctx == NULL || atomic_load(&e->state) >= END_JOINED)
        return;
    e->wakes++;
    lws_cancel_service(e->ctx);
}

static void
loop_wake(struct rs_seam *s)
{
    uint64_t one = 1;
    ssize_t n;
    do {
        n = write(s->efd, &one, sizeof(one));
    } while (n < 0 && errno == EINTR);
    /* EAGAIN: the counter is saturated, the loop is due anyway */
}

/* Under e->mu: link it at the tail. True when the FIFO was empty. */
static bool
fifo_link(struct seam_end *e, struct rs_seam_item *it)
{
    bool was_empty = e->head == NULL;
    it->next = NULL;
    it->prev = e->tail;
    if (e->tail != NULL)
        e->tail->next = it;
    else
        e->head = it;
    e->tail = it;
    it->state = IT_QUEUED;
    e->items++;
    e->pushed++;
    return was_empty;
}

static void
fifo_unlink(struct seam_end *e, struct rs_seam_item *it)
{
    if (it->prev != NULL)
        it->prev->next = it->next;
    else
        e->head = it->next;
    if (it->next != NULL)
        it->next->prev = it->prev;
    else
        e->tail = it->prev;
    it->next = it->prev = NULL;
    it->state = IT_FREE;
    e->items--;
}

/* Under e->mu. */
static void
uncharge(struct seam_end *e, struct rs_seam_item *it, bool flow)
{
    if (!it->charged)
        return;
    it->charged = false;
    e->bytes -= it->bytes;
    if (flow && it->flow != NULL)
        it->flow->bytes -= it->bytes;
}

/* Under e->mu, after a push or mark made e's FIFO non-empty: wake a thread
 * now; true when the loop is to be woken, once the caller has unlocked. */
static bool
wake_locked(struct rs_seam *s, struct seam_end *e)
{
    if (e != &s->ends[s->n]) {
        end_wake_locked(e);
        return false;
    }
    e->wakes++;
    return true;
}

/* ------------------------------------------------------------ lifecycle */

static void
on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct rs_seam *s = arg;
    uint64_t v;
    /* drain before taking: a push after the take wakes us again */
    while (read(fd, &v, sizeof(v)) > 0)
        ;
    struct rs_seam_item *list = rs_seam_take(s, RS_SEAM_LOOP, NULL);
    if (list != NULL)
        s->o.on_loop(s->o.ud, list);
}

struct rs_seam *
rs_seam_new(const struct rs_seam_opts *o, int *rc)
{
    int dummy;
    if (rc == NULL)
        rc = &dummy;
    *rc = RS_EINVAL;
    if (o == NULL || o->base == NULL || o->on_loop == NULL || o->threads == 0 ||
        o->threads > RS_SEAM_THREADS_MAX)
        return NULL;
    *rc = RS_ENOMEM;
    struct rs_seam *s = rs_calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->o = *o;
    s->n = o->threads;
    s->efd = -1;
    s->ends = rs_calloc(s->n + 1, sizeof(*s->ends));
    if (s->ends == NULL)
        goto fail;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        goto fail;
    (void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    for (; s->inited <= s->n; s->inited++) {
        struct seam_end *e = &s->ends[s->inited];
        e->s = s;
        e->idx = (unsigned)s->inited;
        atomic_init(&e->state, END_IDLE);
        for (size_t k = 0; k < RS_SEAM_COUNTERS; k++)
            atomic_init(&e->counters[k], 0);
        if (pthread_mutex_init(&e->mu, NULL) != 0)
            break;
        if (pthread_cond_init(&e->cv, &ca) != 0) {
            pthread_mutex_destroy(&e->mu);
            break;
        }
    }
    pthread_condattr_destroy(&ca);
    if (s->inited <= s->n)
        goto fail;
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->efd < 0) {
        *rc = RS_EIO;
        goto fail;
    }
    s->ev_wake = event_new(o->base, s->efd, EV_READ | EV_PERSIST, on_wake, s);
    if (s->ev_wake == NULL || event_add(s->ev_wake, NULL) != 0)
        goto fail;
    *rc = 0;
    return s;
fail:
    rs_seam_free(s);
    return NULL;
}

static void *
thread_main(void *arg)
{
    struct seam_end *e = arg;
    rs_thread_signals_to_loop();
    while (atomic_load(&e->state) == END_RUNNING)
        if (lws_service(e->ctx, 0) < 0)
            break;
    pthread_mutex_lock(&e->mu);
    end_set_state(e, END_DONE);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

int
rs_seam_start(struct rs_seam *s, unsigned t, struct lws_context *ctx)
{
    struct seam_end *e = thread_of(s, t);
    if (e == NULL || ctx == NULL)
        return RS_EINVAL;
    pthread_mutex_lock(&e->mu);
    if (atomic_load(&e->state) != END_IDLE || e->ctx != NULL) {
        pthread_mutex_unlock(&e->mu);
        return RS_ESTATE;
    }
    e->ctx = ctx;
    end_set_state(e, END_RUNNING);
    pthread_mutex_unlock(&e->mu);
    if (pthread_create(&e->tid, NULL, thread_main, e) != 0) {
        pthread_mutex_lock(&e->mu);
        e->ctx = NULL;
        atomic_store(&e->state, END_IDLE);   /* no thread: back to the start */
        pthread_mutex_unlock(&e->mu);
        return RS_EIO;
    }
    pthread_mutex_lock(&e->mu);
    if (e->head != NULL || e->stop_req)
        end_wake_locked(e);   /* queued before there was a thread to wake */
    pthread_mutex_unlock(&e->mu);
    return 0;
}

void
rs_seam_stop(struct rs_seam *s, unsigned t)
{
    struct seam_end *e = thread_of(s, t);
    if (e == NULL)
        return;
    pthread_mutex_lock(&e->mu);
    e->stop_req = true;
    end_wake_locked(e);
    pthread_mutex_unlock(&e->mu);
}

void
rs_seam_exit(struct rs_seam *s, unsigned t)
{
    struct seam_end *e = thread_of(s, t);
    if (e == NULL)
        return;
    pthread_mutex_lock(&e->mu);
    if (atomic_load(&e->state) == END_RUNNING)
        end_set_state(e, END_EXITING);
    /* Also from inside the thread: lws_service may have run the timer that
     * decided this just before polling until the next one. */
    end_wake_locked(e);
    pthread_mutex_unlock(&e->mu);
}

bool
rs_seam_running(struct rs_seam *s, unsigned t)
{
    struct seam_end *e = thread_of(s, t);
    return e != NULL && atomic_load(&e->state) == END_RUNNING;
}

static int
wait_until(struct seam_end *e, const struct timespec *deadline)
{
    if (deadline == NULL)
        return pthread_cond_wait(&e->cv, &e->mu);
    return pthread_cond_timedwait(&e->cv, &e->mu, deadline);
}

void
rs_seam_join(struct rs_seam *s, int grace_ms)
{
    struct timespec deadline =
        rs_time_mono_deadline(grace_ms > 0 ? (unsigned)grace_ms : 0);
    for (unsigned t = 0; t < s->n; t++) {
        struct seam_end *e = &s->ends[t];
        pthread_mutex_lock(&e->mu);
        int st = atomic_load(&e->state);
        if (st == END_IDLE || st == END_JOINED) {
            pthread_mutex_unlock(&e->mu);
            continue;
        }
        while (atomic_load(&e->state) == END_RUNNING) {
            if (wait_until(e, grace_ms < 0 ? NULL : &deadline) == ETIMEDOUT)
                break;
        }
        if (atomic_load(&e->state) == END_RUNNING)
            end_set_state(e, END_EXITING);
        end_wake_locked(e);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->tid, NULL);
        pthread_mutex_lock(&e->mu);
        end_set_state(e, END_JOINED);
        e->ctx = NULL;
        pthread_mutex_unlock(&e->mu);
    }
}

void
rs_seam_free(struct rs_seam *s)
{
    if (s == NULL)
        return;
    if (s->inited == (size_t)s->n + 1) {
        rs_seam_join(s, 0);
        for (unsigned i = 0; i <= s->n; i++) {
            struct seam_end *e = &s->ends[i];
            struct rs_seam_item *it = rs_seam_take(s, i == s->n ? RS_SEAM_LOOP : i,
                                                   NULL);
            while (it != NULL) {
                struct rs_seam_item *next = it->next;
                pthread_mutex_lock(&e->mu);
                uncharge(e, it, false);   /* its flow may be gone already */
                pthread_mutex_unlock(&e->mu);
                if (s->o.on_drop != NULL)
                    s->o.on_drop(s->o.ud, it);
                it = next;
            }
        }
    }
    if (s->ev_wake != NULL)
        event_free(s->ev_wake);
    if (s->efd >= 0)
        close(s->efd);
    for (size_t i = 0; i < s->inited; i++) {
        pthread_cond_destroy(&s->ends[i].cv);
        pthread_mutex_destroy(&s->ends[i].mu);
    }
    rs_free(s->ends);
    rs_free(s);
}

/* ---------------------------------------------------------------- items */

void
rs_seam_item_init(struct rs_seam_item *it, size_t bytes,
                  struct rs_seam_flow *flow)
{
    memset(it, 0, sizeof(*it));
    it->bytes = bytes;
    it->flow = flow;
}

void
rs_seam_flow_init(struct rs_seam_flow *f, size_t high)
{
    f->high = high;
    f->bytes = 0;
    f->paused = false;
}

int
rs_seam_push(struct rs_seam *s, unsigned to, struct rs_seam_item *it)
{
    struct seam_end *e = end_of(s, to);
    if (e == NULL)
        return RS_EINVAL;
    int rc = 0;
    pthread_mutex_lock(&e->mu);
    if (it->state != IT_FREE) {
        pthread_mutex_unlock(&e->mu);
        return RS_ESTATE;
    }
    bool was_empty = fifo_link(e, it);
    if (it->bytes > 0) {
        it->charged = true;
        e->bytes += it->bytes;
        if (e->bytes > e->peak)
            e->peak = e->bytes;
        struct rs_seam_flow *f = it->flow;
        if (f != NULL) {
            f->bytes += it->bytes;
            if (!f->paused && f->high > 0 && f->bytes > f->high) {
                f->paused = true;
                e->pauses++;
                rc = RS_SEAM_PAUSE;
            }
        }
    }
    bool wake_loop = was_empty && wake_locked(s, e);
    pthread_mutex_unlock(&e->mu);
    /* it may be taken and freed from here on */
    if (wake_loop)
        loop_wake(s);
    return rc;
}

int
rs_seam_mark(struct rs_seam *s, unsigned to, struct rs_seam_item *it,
             unsigned bits)
{
    struct seam_end *e = end_of(s, to);
    if (e == NULL)
        return RS_EINVAL;
    pthread_mutex_lock(&e->mu);
    if (it->state == IT_SEALED) {
        pthread_mutex_unlock(&e->mu);
        return RS_ESTATE;
    }
    it->bits |= bits;
    bool wake_loop = false;
    if (it->state == IT_FREE && fifo_link(e, it))
        wake_loop = wake_locked(s, e);
    pthread_mutex_unlock(&e->mu);
    if (wake_loop)
        loop_wake(s);
    return 0;
}

void
rs_seam_seal(struct rs_seam *s, unsigned at, struct rs_seam_item *it)
{
    struct seam_end *e = end_of(s, at);
    if (e == NULL)
        return;
    pthread_mutex_lock(&e->mu);
    if (it->state == IT_QUEUED) {
        fifo_unlink(e, it);
        uncharge(e, it, true);
    }
    it->bits = 0;
    it->state = IT_SEALED;
    pthread_mutex_unlock(&e->mu);
}

/* Under e->mu: hand over a pending stop request, once. */
static void
take_stop(struct seam_end *e, bool *stop)
{
    if (stop == NULL)
        return;
    *stop = e->stop_req;
    e->stop_req = false;
}

struct rs_seam_item *
rs_seam_take(struct rs_seam *s, unsigned at, bool *stop)
{
    struct seam_end *e = end_of(s, at);
    if (stop != NULL)
        *stop = false;
    if (e == NULL)
        return NULL;
    pthread_mutex_lock(&e->mu);
    struct rs_seam_item *list = e->head;
    e->head = e->tail = NULL;
    e->items = 0;
    for (struct rs_seam_item *it = list; it != NULL; it = it->next) {
        it->state = IT_FREE;
        it->prev = NULL;
    }
    take_stop(e, stop);
    pthread_mutex_unlock(&e->mu);
    return list;
}

struct rs_seam_item *
rs_seam_pop(struct rs_seam *s, unsigned at, unsigned *bits, bool *stop)
{
    struct seam_end *e = end_of(s, at);
    if (stop != NULL)
        *stop = false;
    if (bits != NULL)
        *bits = 0;
    if (e == NULL)
        return NULL;
    pthread_mutex_lock(&e->mu);
    struct rs_seam_item *it = e->head;
    if (it != NULL) {
        fifo_unlink(e, it);
        if (bits != NULL)
            *bits = it->bits;
        it->bits = 0;
    }
    take_stop(e, stop);
    pthread_mutex_unlock(&e->mu);
    return it;
}

bool
rs_seam_done(struct rs_seam *s, unsigned at, struct rs_seam_item *it)
{
    struct seam_end *e = end_of(s, at);
    if (e == NULL)
        return false;
    bool resume = false;
    pthread_mutex_lock(&e->mu);
    if (it->charged) {
        uncharge(e, it, true);
        struct rs_seam_flow *f = it->flow;
        resume = f != NULL && f->paused && f->bytes <= f->high / 2;
    }
    pthread_mutex_unlock(&e->mu);
    return resume;
}

bool
rs_seam_flow_resume(struct rs_seam *s, unsigned at, struct rs_seam_flow *f)
{
    struct seam_end *e = end_of(s, at);
    if (e == NULL)
        return false;
    pthread_mutex_lock(&e->mu);
    bool was = f->paused;
    f->paused = false;
    pthread_mutex_unlock(&e->mu);
    return was;
}

bool
rs_seam_flow_paused(struct rs_seam *s, unsigned at,
                    const struct rs_seam_flow *f)
{
    struct seam_end *e = end_of(s, at);
    if (e == NULL)
        return false;
    pthread_mutex_lock(&e->mu);
    bool paused = f->paused;
    pthread_mutex_unlock(&e->mu);
    return paused;
}

void
rs_seam_stats(struct rs_seam *s, unsigned at, struct rs_seam_stats *out)
{
    memset(out, 0, sizeof(*out));
    struct seam_end *e = end_of(s, at);
    if (e == NULL)
        return;
    pthread_mutex_lock(&e->mu);
    out->items = e->items;
    out->bytes = e->bytes;
    out->bytes_peak = e->peak;
    out->pushed = e->pushed;
    out->wakes = e->wakes;
    out->pauses = e->pauses;
    pthread_mutex_unlock(&e->mu);
}

/* ---------------------------------------------- shared read-only objects */

void
rs_seam_ref_init(struct rs_seam_ref *r)
{
    atomic_init(&r->n, 1);
}

void
rs_seam_ref_get(struct rs_seam_ref *r)
{
    /* a new holder gets it from one that already has it: no ordering */
    atomic_fetch_add_explicit(&r->n, 1, memory_order_relaxed);
}

bool
rs_seam_ref_put(struct rs_seam_ref *r)
{
    /* release our reads; the last put acquires everyone's before the free */
    return atomic_fetch_sub_explicit(&r->n, 1, memory_order_acq_rel) == 1;
}

/* ------------------------------------------------------------- counters */

void
rs_seam_count(struct rs_seam *s, unsigned at, unsigned k, int64_t delta)
{
    struct seam_end *e = end_of(s, at);
    if (e == NULL || k >= RS_SEAM_COUNTERS)
        return;
    atomic_fetch_add_explicit(&e->counters[k], (uint_fast64_t)delta,
                              memory_order_relaxed);
}

uint64_t
rs_seam_counter(const struct rs_seam *s, unsigned at, unsigned k)
{
    struct seam_end *e = end_of(s, at);
    if (e == NULL || k >= RS_SEAM_COUNTERS)
        return 0;
    return atomic_load_explicit(&e->counters[k], memory_order_relaxed);
}

uint64_t
rs_seam_counter_sum(const struct rs_seam *s, unsigned k)
{
    uint64_t sum = 0;
    if (k >= RS_SEAM_COUNTERS)
        return 0;
    for (unsigned i = 0; i <= s->n; i++)
        sum += atomic_load_explicit(&s->ends[i].counters[k],
                                    memory_order_relaxed);
    return sum;
}
