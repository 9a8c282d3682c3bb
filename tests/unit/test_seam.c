/* test_seam.c - the loop <-> libwebsockets threads seam (common/seam.c) with
 * real lws contexts serviced by the seam's threads and a real libevent loop
 * woken by its eventfd: items both ways in order, one wake-up per batch,
 * coalescing marks and seals, flows that pause and resume, stop requests
 * that follow what was queued before them, joins with and without a
 * thread's help, shutdown with items queued at every end, many producers,
 * reference counts and counters from many threads, every allocation failing
 * in turn. Each loop runs under a watchdog and ends with nothing left on it.
 *
 * Locking, for a reader checking this without TSan: every access the tests
 * make to shared state is either through the seam's calls (its end mutexes),
 * an atomic, or a plain field of a thread's context read only after that
 * thread was joined (pthread_join orders it). */
#include "testutil.h"

#include <event2/event.h>
#include <libwebsockets.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rs_seam.h"

#define WATCHDOG_SECS 30
#define MAXT 8

struct titem {
    struct rs_seam_item item;      /* first */
    unsigned from;                 /* producer: a thread index, or MAXT */
    unsigned seq;
    unsigned via;                  /* the thread that echoed it */
};

static struct titem *
titem_of(struct rs_seam_item *it)
{
    return (struct titem *)(void *)it;
}

static struct titem *
titem_new(unsigned from, unsigned seq, size_t bytes)
{
    struct titem *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    rs_seam_item_init(&t->item, bytes, NULL);
    t->from = from;
    t->seq = seq;
    return t;
}

enum tmode {
    TM_ECHO = 0,     /* take everything, push it back to the loop */
    TM_HOLD,         /* take nothing: items stay queued */
};

/* One service thread's context (info.user of its lws context). Fields
 * other than the atomics are the thread's until it is joined. */
struct tctx {
    struct rs_seam *seam;
    unsigned idx;
    enum tmode mode;
    bool exit_on_stop;             /* rs_seam_exit when the stop comes */
    atomic_uint wakes;             /* WAIT_CANCELLED callbacks */
    unsigned taken, stops;
    struct lws_context *ctx;
};

struct fx {
    struct event_base *base;
    struct event *watchdog;
    struct rs_seam *seam;
    unsigned n;
    struct tctx t[MAXT];
    /* what reached the loop */
    unsigned batches;
    unsigned got;
    unsigned want;                 /* stop the loop after this many */
    unsigned next_seq[MAXT + 1];   /* per producer: the next seq due */
    bool order_ok;
    unsigned drops;
};

/* ---------------------------------------------------------- callbacks */

static int
on_lws(struct lws *wsi, enum lws_callback_reasons reason, void *user,
       void *in, size_t len)
{
    (void)user;
    (void)in;
    (void)len;
    struct lws_context *ctx = lws_get_context(wsi);
    struct tctx *tc = ctx != NULL ? lws_context_user(ctx) : NULL;
    if (tc == NULL || reason != LWS_CALLBACK_EVENT_WAIT_CANCELLED)
        return 0;
    if (!rs_seam_running(tc->seam, tc->idx))
        return 0;   /* lws_context_destroy, or leaving */
    atomic_fetch_add(&tc->wakes, 1);
    if (tc->mode == TM_HOLD)
        return 0;
    bool stop = false;
    struct rs_seam_item *it = rs_seam_take(tc->seam, tc->idx, &stop);
    while (it != NULL) {
        struct rs_seam_item *next = it->next;
        titem_of(it)->via = tc->idx;
        (void)rs_seam_done(tc->seam, tc->idx, it);
        tc->taken++;
        if (rs_seam_push(tc->seam, RS_SEAM_LOOP, it) != 0)
            abort();   /* not a cmocka assert: this is not the test's thread */
        it = next;
    }
    if (stop) {
        tc->stops++;
        if (tc->exit_on_stop)
            rs_seam_exit(tc->seam, tc->idx);
    }
    return 0;
}

static const struct lws_protocols protocols[] = {
    { .name = "seam-test", .callback = on_lws },
    { .name = NULL },
};

static void
on_loop(void *ud, struct rs_seam_item *list)
{
    struct fx *f = ud;
    f->batches++;
    while (list != NULL) {
        struct rs_seam_item *next = list->next;
        struct titem *t = titem_of(list);
        assert_true(t->from <= MAXT);
        if (t->seq != f->next_seq[t->from])
            f->order_ok = false;
        f->next_seq[t->from] = t->seq + 1;
        (void)rs_seam_done(f->seam, RS_SEAM_LOOP, list);
        free(t);
        f->got++;
        list = next;
    }
    if (f->want > 0 && f->got >= f->want)
        event_base_loopbreak(f->base);
}

static void
on_drop(void *ud, struct rs_seam_item *it)
{
    struct fx *f = ud;
    f->drops++;
    free(titem_of(it));
}

static void
on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct fx *f = arg;
    fail_msg("watchdog: %u of %u items reached the loop", f->got, f->want);
}

/* ------------------------------------------------------------- fixture */

static int
setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->base = event_base_new();
    assert_non_null(f->base);
    f->watchdog = evtimer_new(f->base, on_watchdog, f);
    struct timeval tv = { WATCHDOG_SECS, 0 };
    assert_int_equal(evtimer_add(f->watchdog, &tv), 0);
    f->order_ok = true;
    lws_set_log_level(LLL_ERR, NULL);
    *state = f;
    return 0;
}

/* A seam of n threads, none started. */
static void
fx_seam(struct fx *f, unsigned n)
{
    struct rs_seam_opts o = {
        .base = f->base,
        .threads = n,
        .on_loop = on_loop,
        .on_drop = on_drop,
        .ud = f,
        .name = "test",
    };
    int rc = -100;
    f->seam = rs_seam_new(&o, &rc);
    assert_non_null(f->seam);
    assert_int_equal(rc, 0);
    f->n = n;
    for (unsigned i = 0; i < n; i++) {
        f->t[i].seam = f->seam;
        f->t[i].idx = i;
    }
}

static void
fx_start(struct fx *f, unsigned i, enum tmode mode)
{
    struct tctx *tc = &f->t[i];
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.port = CONTEXT_PORT_NO_LISTEN_SERVER;
    info.protocols = protocols;
    info.user = tc;
    info.count_threads = 1;
    tc->mode = mode;
    tc->ctx = lws_create_context(&info);
    assert_non_null(tc->ctx);
    assert_int_equal(rs_seam_start(f->seam, i, tc->ctx), 0);
}

/* Run the loop until `want` items arrived in all (the watchdog fails the
 * test if they do not). */
static void
fx_run(struct fx *f, unsigned want)
{
    f->want = want;
    while (f->got < want)
        event_base_loop(f->base, EVLOOP_ONCE);
    f->want = 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    if (f->seam != NULL) {
        rs_seam_join(f->seam, 0);
        for (unsigned i = 0; i < f->n; i++)
            if (f->t[i].ctx != NULL)
                lws_context_destroy(f->t[i].ctx);
        rs_seam_free(f->seam);
    }
    event_free(f->watchdog);
    /* nothing of the seam's is left on the loop */
    assert_int_equal(event_base_get_num_events(f->base, EVENT_BASE_COUNT_ADDED), 0);
    event_base_free(f->base);
    free(f);
    return 0;
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* --------------------------------------------------------------- tests */

/* seam/new_free: rs_seam_free(NULL) is a no-op; bad options are refused
 * with RS_EINVAL and nothing registered. */
static void
test_new_free(void **state)
{
    struct fx *f = *state;
    rs_seam_free(NULL);
    int rc = 0;
    struct rs_seam_opts o = { .base = f->base, .threads = 0, .on_loop = on_loop };
    assert_null(rs_seam_new(&o, &rc));
    assert_int_equal(rc, RS_EINVAL);
    o.threads = RS_SEAM_THREADS_MAX + 1;
    assert_null(rs_seam_new(&o, &rc));
    assert_int_equal(rc, RS_EINVAL);
    o.threads = 1;
    o.on_loop = NULL;
    assert_null(rs_seam_new(&o, &rc));
    assert_int_equal(rc, RS_EINVAL);
    assert_null(rs_seam_new(NULL, NULL));
}

/* seam/loop_batch: items pushed to the loop while it is not running arrive
 * in one batch, in order, after one wake-up; the next push wakes again. */
static void
test_loop_batch(void **state)
{
    struct fx *f = *state;
    fx_seam(f, 1);
    for (unsigned i = 0; i < 3; i++)
        assert_int_equal(rs_seam_push(f->seam, RS_SEAM_LOOP,
                                      &titem_new(MAXT, i, 0)->item), 0);
    struct rs_seam_stats st;
    rs_seam_stats(f->seam, RS_SEAM_LOOP, &st);
    assert_int_equal(st.items, 3);
    assert_int_equal(st.wakes, 1);
    fx_run(f, 3);
    assert_int_equal(f->batches, 1);
    assert_true(f->order_ok);
    assert_int_equal(rs_seam_push(f->seam, RS_SEAM_LOOP,
                                  &titem_new(MAXT, 3, 0)->item), 0);
    fx_run(f, 4);
    assert_int_equal(f->batches, 2);
    rs_seam_stats(f->seam, RS_SEAM_LOOP, &st);
    assert_int_equal(st.items, 0);
    assert_int_equal(st.pushed, 4);
    assert_int_equal(st.wakes, 2);
    /* no such end */
    struct titem *t = titem_new(MAXT, 0, 0);
    assert_int_equal(rs_seam_push(f->seam, 1, &t->item), RS_EINVAL);
    free(t);
}

/* seam/both_ways: items to each of four service threads come back through
 * the loop's end, every one, in each producer's order, woken by
 * lws_cancel_service and the eventfd. The threads block signals. */
static void
test_both_ways(void **state)
{
    struct fx *f = *state;
    enum { N = 4, K = 2000 };
    fx_seam(f, N);
    for (unsigned i = 0; i < N; i++)
        fx_start(f, i, TM_ECHO);
    /* in bursts, the loop turning between them, so wake-ups happen at
     * every stage: while a thread takes, while it sleeps */
    for (unsigned k = 0; k < K; k += 100) {
        for (unsigned i = 0; i < N; i++)
            for (unsigned j = k; j < k + 100; j++) {
                struct titem *t = titem_new(i, j, 0);
                assert_int_equal(rs_seam_push(f->seam, i, &t->item), 0);
            }
        event_base_loop(f->base, EVLOOP_NONBLOCK);
    }
    fx_run(f, N * K);
    assert_int_equal(f->got, N * K);
    assert_true(f->order_ok);
    int others = 0;     /* service threads leave signals to the loop's */
    assert_int_equal(tu_threads_unblocked(SIGTERM, &others), 0);
    assert_true(others >= N);
    for (unsigned i = 0; i < N; i++) {
        assert_int_equal(f->next_seq[i], K);
        struct rs_seam_stats st;
        rs_seam_stats(f->seam, i, &st);
        assert_int_equal(st.pushed, K);
        assert_int_equal(st.items, 0);
        /* one wake-up per batch, never one per item */
        assert_true(st.wakes >= 1 && st.wakes <= K);
        assert_true(atomic_load(&f->t[i].wakes) >= 1);
    }
    rs_seam_join(f->seam, 0);
    for (unsigned i = 0; i < N; i++)
        assert_int_equal(f->t[i].taken, K);
}

struct producer {
    struct rs_seam *seam;
    unsigned idx;
    unsigned n;
};

static void *
produce(void *arg)
{
    struct producer *p = arg;
    for (unsigned i = 0; i < p->n; i++) {
        struct titem *t = calloc(1, sizeof(*t));
        if (t == NULL)
            abort();
        t->from = p->idx;
        t->seq = i;
        if (rs_seam_push(p->seam, RS_SEAM_LOOP, &t->item) != 0)
            abort();
        if (i % 1000 == 0)
            rs_seam_count(p->seam, p->idx, 0, 1);
    }
    return NULL;
}

/* seam/many_producers: eight threads pushing to the loop at once lose
 * nothing and keep each one's order; counters added from every thread sum
 * exactly. */
static void
test_many_producers(void **state)
{
    struct fx *f = *state;
    enum { N = MAXT, K = 20000 };
    fx_seam(f, N);
    pthread_t tid[N];
    struct producer p[N];
    for (unsigned i = 0; i < N; i++) {
        p[i] = (struct producer){ f->seam, i, K };
        assert_int_equal(pthread_create(&tid[i], NULL, produce, &p[i]), 0);
    }
    fx_run(f, N * K);
    for (unsigned i = 0; i < N; i++)
        pthread_join(tid[i], NULL);
    assert_int_equal(f->got, N * K);
    assert_true(f->order_ok);
    for (unsigned i = 0; i < N; i++)
        assert_int_equal(f->next_seq[i], K);
    assert_int_equal(rs_seam_counter_sum(f->seam, 0), N * (K / 1000));
    assert_int_equal(rs_seam_counter(f->seam, 3, 0), K / 1000);
    /* a delta taken back, another slot, no such slot or end */
    rs_seam_count(f->seam, RS_SEAM_LOOP, 1, 5);
    rs_seam_count(f->seam, RS_SEAM_LOOP, 1, -2);
    assert_int_equal(rs_seam_counter(f->seam, RS_SEAM_LOOP, 1), 3);
    rs_seam_count(f->seam, RS_SEAM_LOOP, RS_SEAM_COUNTERS, 1);
    assert_int_equal(rs_seam_counter(f->seam, N, 0), 0);
    assert_int_equal(rs_seam_counter_sum(f->seam, RS_SEAM_COUNTERS), 0);
}

/* seam/marks: marks on one item coalesce and keep its place; pop hands
 * each item once with its bits; a sealed item is out of the FIFO and
 * refuses marks; a queued item cannot be pushed again. */
static void
test_marks(void **state)
{
    struct fx *f = *state;
    fx_seam(f, 1);
    struct rs_seam_item a, b, c;
    rs_seam_item_init(&a, 0, NULL);
    rs_seam_item_init(&b, 0, NULL);
    rs_seam_item_init(&c, 0, NULL);
    assert_int_equal(rs_seam_mark(f->seam, 0, &a, 1), 0);
    assert_int_equal(rs_seam_mark(f->seam, 0, &b, 2), 0);
    assert_int_equal(rs_seam_mark(f->seam, 0, &a, 4), 0);
    assert_int_equal(rs_seam_mark(f->seam, 0, &c, 8), 0);
    assert_int_equal(rs_seam_push(f->seam, 0, &a), RS_ESTATE);
    struct rs_seam_stats st;
    rs_seam_stats(f->seam, 0, &st);
    assert_int_equal(st.items, 3);
    assert_int_equal(st.wakes, 0);   /* no thread to wake */

    unsigned bits = 0;
    bool stop = true;
    assert_ptr_equal(rs_seam_pop(f->seam, 0, &bits, &stop), &a);
    assert_int_equal(bits, 5);
    assert_false(stop);
    rs_seam_seal(f->seam, 0, &b);    /* queued: taken out */
    assert_int_equal(rs_seam_mark(f->seam, 0, &b, 2), RS_ESTATE);
    assert_int_equal(rs_seam_push(f->seam, 0, &b), RS_ESTATE);
    assert_ptr_equal(rs_seam_pop(f->seam, 0, &bits, NULL), &c);
    assert_int_equal(bits, 8);
    assert_null(rs_seam_pop(f->seam, 0, &bits, NULL));
    assert_int_equal(bits, 0);
    /* popped items can be marked again, and go to the back */
    assert_int_equal(rs_seam_mark(f->seam, 0, &a, 16), 0);
    assert_ptr_equal(rs_seam_pop(f->seam, 0, &bits, NULL), &a);
    assert_int_equal(bits, 16);
    rs_seam_seal(f->seam, 0, &a);    /* not queued: only sealed */
    assert_int_equal(rs_seam_mark(f->seam, 0, &a, 1), RS_ESTATE);
    rs_seam_stats(f->seam, 0, &st);
    assert_int_equal(st.items, 0);
    assert_int_equal(rs_seam_mark(f->seam, 7, &c, 1), RS_EINVAL);
}

/* seam/flows: bytes are charged from push to done; a flow pauses once when
 * it goes over its high mark, says resume only at or below half, and is
 * resumed by its producer; the end keeps its total and peak. */
static void
test_flows(void **state)
{
    struct fx *f = *state;
    fx_seam(f, 1);
    struct rs_seam_flow fl;
    rs_seam_flow_init(&fl, 100);
    struct titem *t[5];
    int want[5] = { 0, 0, RS_SEAM_PAUSE, 0, 0 };
    for (unsigned i = 0; i < 5; i++) {
        t[i] = titem_new(MAXT, i, 40);
        t[i]->item.flow = &fl;
        assert_int_equal(rs_seam_push(f->seam, 0, &t[i]->item), want[i]);
    }
    /* one without a flow: charged to the end alone */
    struct titem *lone = titem_new(MAXT, 5, 1000);
    assert_int_equal(rs_seam_push(f->seam, 0, &lone->item), 0);
    assert_true(rs_seam_flow_paused(f->seam, 0, &fl));
    struct rs_seam_stats st;
    rs_seam_stats(f->seam, 0, &st);
    assert_int_equal(st.bytes, 1200);
    assert_int_equal(st.bytes_peak, 1200);
    assert_int_equal(st.pauses, 1);

    struct rs_seam_item *list = rs_seam_take(f->seam, 0, NULL);
    assert_ptr_equal(list, &t[0]->item);
    /* 200 -> 160 -> 120 -> 80: still paused, not yet at half */
    for (unsigned i = 0; i < 3; i++)
        assert_false(rs_seam_done(f->seam, 0, &t[i]->item));
    assert_false(rs_seam_done(f->seam, 0, &t[0]->item));   /* twice: no-op */
    assert_true(rs_seam_done(f->seam, 0, &t[3]->item));    /* 40 <= 50 */
    assert_true(rs_seam_flow_paused(f->seam, 0, &fl));     /* until resumed */
    assert_true(rs_seam_flow_resume(f->seam, 0, &fl));
    assert_false(rs_seam_flow_resume(f->seam, 0, &fl));
    assert_false(rs_seam_done(f->seam, 0, &t[4]->item));   /* not paused */
    assert_false(rs_seam_done(f->seam, 0, &lone->item));
    rs_seam_stats(f->seam, 0, &st);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(st.bytes_peak, 1200);
    assert_int_equal(fl.bytes, 0);
    for (unsigned i = 0; i < 5; i++)
        free(t[i]);
    free(lone);
    /* a flow with no mark never pauses */
    rs_seam_flow_init(&fl, 0);
    struct titem *big = titem_new(MAXT, 0, (size_t)1 << 40);
    big->item.flow = &fl;
    assert_int_equal(rs_seam_push(f->seam, 0, &big->item), 0);
    assert_ptr_equal(rs_seam_take(f->seam, 0, NULL), &big->item);
    assert_false(rs_seam_done(f->seam, 0, &big->item));
    free(big);
}

/* seam/stop_order: a stop request is reported by the take that also hands
 * over everything queued before it, once; pop reports it at once. */
static void
test_stop_order(void **state)
{
    struct fx *f = *state;
    fx_seam(f, 2);
    struct titem *t[3];
    for (unsigned i = 0; i < 3; i++) {
        t[i] = titem_new(MAXT, i, 0);
        assert_int_equal(rs_seam_push(f->seam, 0, &t[i]->item), 0);
    }
    rs_seam_stop(f->seam, 0);
    bool stop = false;
    struct rs_seam_item *list = rs_seam_take(f->seam, 0, &stop);
    assert_true(stop);
    unsigned n = 0;
    for (struct rs_seam_item *it = list; it != NULL; it = it->next)
        assert_ptr_equal(it, &t[n++]->item);
    assert_int_equal(n, 3);
    assert_null(rs_seam_take(f->seam, 0, &stop));
    assert_false(stop);
    for (unsigned i = 0; i < 3; i++)
        free(t[i]);

    struct rs_seam_item a;
    rs_seam_item_init(&a, 0, NULL);
    assert_int_equal(rs_seam_mark(f->seam, 1, &a, 1), 0);
    rs_seam_stop(f->seam, 1);
    assert_ptr_equal(rs_seam_pop(f->seam, 1, NULL, &stop), &a);
    assert_true(stop);
    assert_null(rs_seam_pop(f->seam, 1, NULL, &stop));
    assert_false(stop);
}

/* seam/join: a thread that leaves when asked to stop is joined at once,
 * one that does not is made to leave at the grace's end; afterwards no
 * thread is woken, exit is a no-op and the contexts can go. */
static void
test_join(void **state)
{
    struct fx *f = *state;
    fx_seam(f, 2);
    f->t[0].exit_on_stop = true;
    fx_start(f, 0, TM_ECHO);
    fx_start(f, 1, TM_ECHO);
    assert_true(rs_seam_running(f->seam, 0));
    assert_int_equal(rs_seam_start(f->seam, 0, f->t[0].ctx), RS_ESTATE);
    assert_int_equal(rs_seam_start(f->seam, 5, f->t[0].ctx), RS_EINVAL);
    rs_seam_stop(f->seam, 0);
    rs_seam_stop(f->seam, 1);
    double t0 = now_s();
    rs_seam_join(f->seam, 400);
    double took = now_s() - t0;
    assert_true(took >= 0.35);       /* thread 1 held it to the grace */
    assert_true(took < 5);
    assert_int_equal(f->t[0].stops, 1);
    assert_int_equal(f->t[1].stops, 1);
    assert_false(rs_seam_running(f->seam, 0));
    assert_false(rs_seam_running(f->seam, 1));

    struct rs_seam_stats before, after;
    rs_seam_stats(f->seam, 0, &before);
    struct titem *t = titem_new(MAXT, 0, 0);
    assert_int_equal(rs_seam_push(f->seam, 0, &t->item), 0);
    rs_seam_exit(f->seam, 0);
    rs_seam_stop(f->seam, 0);
    rs_seam_stats(f->seam, 0, &after);
    assert_int_equal(after.wakes, before.wakes);
    rs_seam_join(f->seam, -1);       /* again: nothing to do */
    /* the pushed item is dropped at teardown */
}

/* seam/join_self: a thread that leaves by itself is waited for as long as
 * it takes with a negative grace, and not a moment more. */
static void
test_join_self(void **state)
{
    struct fx *f = *state;
    fx_seam(f, 1);
    f->t[0].exit_on_stop = true;
    fx_start(f, 0, TM_ECHO);
    rs_seam_stop(f->seam, 0);
    double t0 = now_s();
    rs_seam_join(f->seam, -1);
    assert_true(now_s() - t0 < 5);
    assert_int_equal(f->t[0].stops, 1);
}

/* seam/shutdown_queued: items left queued at every end (threads that do
 * not take, a loop that never ran) are each dropped exactly once at free,
 * with their charges; nothing leaks (ASan) and nothing is left on the
 * loop. */
static void
test_shutdown_queued(void **state)
{
    struct fx *f = *state;
    fx_seam(f, 3);
    fx_start(f, 0, TM_HOLD);
    fx_start(f, 1, TM_HOLD);   /* thread 2 never starts */
    unsigned n = 0;
    for (unsigned i = 0; i < 3; i++)
        for (unsigned j = 0; j < 10; j++, n++)
            assert_int_equal(rs_seam_push(f->seam, i, &titem_new(i, j, 64)->item), 0);
    for (unsigned j = 0; j < 5; j++, n++)
        assert_int_equal(rs_seam_push(f->seam, RS_SEAM_LOOP,
                                      &titem_new(MAXT, j, 64)->item), 0);
    /* the held threads were woken, and kept their items */
    for (double end = now_s() + 5; now_s() < end;)
        if (atomic_load(&f->t[0].wakes) > 0 && atomic_load(&f->t[1].wakes) > 0)
            break;
    assert_true(atomic_load(&f->t[0].wakes) > 0);
    struct rs_seam_stats st;
    rs_seam_stats(f->seam, 1, &st);
    assert_int_equal(st.items, 10);
    assert_int_equal(st.bytes, 640);
    rs_seam_join(f->seam, 0);
    for (unsigned i = 0; i < 2; i++) {
        lws_context_destroy(f->t[i].ctx);
        f->t[i].ctx = NULL;
    }
    rs_seam_free(f->seam);
    f->seam = NULL;
    assert_int_equal(f->drops, n);
    assert_int_equal(f->got, 0);
}

struct refs_arg {
    struct rs_seam_ref *ref;
    atomic_uint *lasts;
};

static void *
ref_churn(void *arg)
{
    struct refs_arg *a = arg;
    for (unsigned i = 0; i < 100000; i++) {
        rs_seam_ref_get(a->ref);
        if (rs_seam_ref_put(a->ref))
            atomic_fetch_add(a->lasts, 1);
    }
    return NULL;
}

/* seam/refs: gets and puts from many threads at once never reach zero
 * while the first reference is held; its put is the one last put. */
static void
test_refs(void **state)
{
    (void)state;
    struct rs_seam_ref ref;
    atomic_uint lasts;
    atomic_init(&lasts, 0);
    rs_seam_ref_init(&ref);
    struct refs_arg a = { &ref, &lasts };
    pthread_t tid[4];
    for (unsigned i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&tid[i], NULL, ref_churn, &a), 0);
    for (unsigned i = 0; i < 4; i++)
        pthread_join(tid[i], NULL);
    assert_int_equal(atomic_load(&lasts), 0);
    rs_seam_ref_get(&ref);
    assert_false(rs_seam_ref_put(&ref));
    assert_true(rs_seam_ref_put(&ref));
}

/* seam/alloc: every allocation of rs_seam_new failing in turn gives NULL
 * with RS_ENOMEM, leaks nothing and leaves nothing on the loop. */
static void
test_alloc(void **state)
{
    struct fx *f = *state;
    struct rs_seam_opts o = { .base = f->base, .threads = 4, .on_loop = on_loop,
                              .ud = f };
    tu_alloc_fail_at(ULONG_MAX);
    struct rs_seam *s = rs_seam_new(&o, NULL);
    unsigned long total = tu_alloc_count();
    tu_alloc_fail_at(0);
    assert_non_null(s);
    assert_true(total >= 2);
    rs_seam_free(s);
    for (unsigned long n = 1; n <= total; n++) {
        int rc = 0;
        tu_alloc_fail_at(n);
        s = rs_seam_new(&o, &rc);
        tu_alloc_fail_at(0);
        assert_null(s);
        assert_int_equal(rc, RS_ENOMEM);
        assert_int_equal(event_base_get_num_events(f->base, EVENT_BASE_COUNT_ADDED), 1);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_new_free, setup, teardown),
        cmocka_unit_test_setup_teardown(test_loop_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_both_ways, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_producers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_marks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_join, setup, teardown),
        cmocka_unit_test_setup_teardown(test_join_self, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_queued, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alloc, setup, teardown),
    };
    return cmocka_run_group_tests_name("seam", tests, NULL, NULL);
}
