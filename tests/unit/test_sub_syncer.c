/* test_sub_syncer.c - the syncer (subscriber/syncer.c): mirror files
 * prepared (mtime, fsync) on its thread and told to the loop in the order
 * handed, committed there without a second fsync; the decaying timing
 * behind syncer_wanted; a failed fsync reported by the commit; and
 * syncer_free while files are held or queued, from a callback, or before
 * any thread ran. fsync is wrapped to look like a slow, failing or stuck
 * disk. */
#include "testutil.h"
#include "tu_httpd.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mirror.h"
#include "syncer.h"

/* Linked with -Wl,--wrap=fsync (tests/CMakeLists.txt). Runs on the
 * syncer's thread: everything it shares with the test is atomic or under
 * gate_mu. Each call is counted on entry (fsyncs_in) and on return
 * (fsyncs_out); while the gate is shut it waits for a permit (the test
 * hands them out one by one, or opens the gate); it sleeps delay_us (a
 * disk's latency), fails with fsync_errno while that is set, and skips
 * the real fsync while fsync_fake is set (a disk as fast as tmpfs: the
 * test's own /tmp may be a real one). */
static atomic_uint fsyncs_in, fsyncs_out;
static atomic_long fsync_delay_us;
static atomic_int fsync_errno;
static atomic_bool fsync_fake;
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static bool gate_shut;              /* under gate_mu, */
static unsigned gate_permits;       /* ... and fsyncs let through it */
static pthread_t fsync_thread;      /* under gate_mu: the last caller */

int __real_fsync(int fd);
int __wrap_fsync(int fd);

int
__wrap_fsync(int fd)
{
    atomic_fetch_add(&fsyncs_in, 1);
    pthread_mutex_lock(&gate_mu);
    fsync_thread = pthread_self();
    while (gate_shut && gate_permits == 0)
        pthread_cond_wait(&gate_cv, &gate_mu);
    if (gate_shut)
        gate_permits--;
    pthread_mutex_unlock(&gate_mu);
    long us = atomic_load(&fsync_delay_us);
    if (us > 0) {
        struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    int rc, e = atomic_load(&fsync_errno);
    if (e != 0) {
        errno = e;
        rc = -1;
    } else if (atomic_load(&fsync_fake)) {
        rc = 0;
    } else {
        rc = __real_fsync(fd);
    }
    atomic_fetch_add(&fsyncs_out, 1);   /* leaves errno alone */
    return rc;
}

static void
gate_set(bool shut)
{
    pthread_mutex_lock(&gate_mu);
    gate_shut = shut;
    gate_permits = 0;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

/* Let one more fsync through the shut gate. */
static void
gate_grant(void)
{
    pthread_mutex_lock(&gate_mu);
    gate_permits++;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

/* Whether the last fsync ran on the calling thread. */
static bool
fsync_was_here(void)
{
    pthread_mutex_lock(&gate_mu);
    bool here = pthread_equal(fsync_thread, pthread_self()) != 0;
    pthread_mutex_unlock(&gate_mu);
    return here;
}

static void
sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Poll (1 ms steps, 5 s at most) until *c reaches n; whether it did. */
static bool
wait_count(atomic_uint *c, unsigned n)
{
    for (int i = 0; i < 5000 && atomic_load(c) < n; i++)
        sleep_ms(1);
    return atomic_load(c) >= n;
}

#define NJOBS 64

struct fx;

/* One file handed to the syncer, and what its on_synced saw. */
struct job {
    struct fx *fx;
    int i;
    struct mirror_file *f;  /* NULL once committed or aborted */
    unsigned told;          /* on_synced calls for it */
    bool on_loop;           /* ... on the test's (the loop's) thread */
    unsigned fsynced_then;  /* fsyncs_out when told */
    size_t pending_then;    /* syncer_pending when told */
    int rc;                 /* mirror_commit's, when committed there */
    char errstr[512];       /* ... and the mirror's error after it */
    int err_no;
};

struct fx {
    char *base;              /* private temp dir */
    char mdir[4200];         /* base/m: the mirror (MIRROR_FSYNC_FILE) */
    struct tu_loop loop;
    struct mirror *m;
    struct syncer *s;
    pthread_t self;
    bool commit_in_cb;       /* on_synced commits the job's file */
    bool free_in_cb;         /* on_synced frees the syncer */
    struct job jobs[NJOBS];
    int order[NJOBS];        /* job indexes, in the order told */
    size_t told;             /* all on_synced calls */
};

static void
reset_wrap(void)
{
    atomic_store(&fsyncs_in, 0);
    atomic_store(&fsyncs_out, 0);
    atomic_store(&fsync_delay_us, 0);
    atomic_store(&fsync_errno, 0);
    atomic_store(&fsync_fake, false);
    gate_set(false);
}

static struct syncer *
fx_syncer(struct fx *fx)
{
    char err[256];
    struct syncer *s = syncer_new(fx->loop.base, err, sizeof(err));
    if (s == NULL)
        fail_msg("syncer_new: %s", err);
    return s;
}

static struct mirror *
fx_mirror(const char *dir, enum mirror_fsync policy)
{
    char err[512];
    struct mirror_opts o = { .fsync = policy };
    struct mirror *m = mirror_open(dir, &o, err, sizeof(err));
    if (m == NULL)
        fail_msg("mirror_open %s: %s", dir, err);
    return m;
}

static int
fx_setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    reset_wrap();
    fx->base = tu_mkdtemp();
    snprintf(fx->mdir, sizeof(fx->mdir), "%s/m", fx->base);
    tu_loop_init(&fx->loop);
    fx->m = fx_mirror(fx->mdir, MIRROR_FSYNC_FILE);
    fx->s = fx_syncer(fx);
    fx->self = pthread_self();
    for (int i = 0; i < NJOBS; i++) {
        fx->jobs[i].fx = fx;
        fx->jobs[i].i = i;
    }
    *state = fx;
    return 0;
}

static int
fx_teardown(void **state)
{
    struct fx *fx = *state;
    gate_set(false);          /* a failed test may have left it shut */
    syncer_free(fx->s);
    for (int i = 0; i < NJOBS; i++)
        mirror_abort(fx->jobs[i].f);
    mirror_close(fx->m);
    tu_loop_cleanup(&fx->loop);
    reset_wrap();
    tu_rmtree(fx->base);
    free(fx->base);
    free(fx);
    return 0;
}

/* dir/rel in one of 4 rotating static buffers. */
static const char *
fx_path(const char *dir, const char *rel)
{
    static char buf[4][8400];
    static int k;
    char *b = buf[k++ % 4];
    int n = snprintf(b, sizeof(buf[0]), "%s/%s", dir, rel);
    assert_true(n > 0 && (size_t)n < sizeof(buf[0]));
    return b;
}

/* Threads of this process. */
static int
fx_threads(void)
{
    return tu_count_entries("/proc/self/task", NULL);
}

/* A new version of rel holding text, written and not committed. */
static struct mirror_file *
fx_begin(struct mirror *m, const char *rel, const char *text)
{
    struct mirror_file *mf = NULL;
    assert_int_equal(mirror_begin(m, rel, &mf), 0);
    assert_non_null(mf);
    if (mirror_write(mf, text, strlen(text)) != 0) {
        mirror_abort(mf);
        fail_msg("mirror_write %s: %s", rel, mirror_errstr(m));
    }
    return mf;
}

static void
fx_rel(char *buf, size_t sz, int i)
{
    snprintf(buf, sz, "d%d/f%02d.txt", i % 4, i);
}

static void
fx_text(char *buf, size_t sz, int i)
{
    snprintf(buf, sz, "content of file %d\n%.*s", i, i,
             "0123456789012345678901234567890123456789"
             "0123456789012345678901234567890123456789");
}

/* Begin job i (rel d<i%4>/f<i>.txt, its own content). */
static void
fx_begin_job(struct fx *fx, int i)
{
    char rel[64], text[256];
    fx_rel(rel, sizeof(rel), i);
    fx_text(text, sizeof(text), i);
    fx->jobs[i].f = fx_begin(fx->m, rel, text);
}

static void
on_synced(void *ud)
{
    struct job *j = ud;
    struct fx *fx = j->fx;

    j->told++;
    if (fx->told < NJOBS)
        fx->order[fx->told] = j->i;
    fx->told++;
    j->on_loop = pthread_equal(pthread_self(), fx->self) != 0;
    j->fsynced_then = atomic_load(&fsyncs_out);
    j->pending_then = fx->s != NULL ? syncer_pending(fx->s) : (size_t)-1;
    if (fx->commit_in_cb && j->f != NULL) {
        j->rc = mirror_commit(j->f, RS_TIME_NONE);
        j->f = NULL;
        snprintf(j->errstr, sizeof(j->errstr), "%s", mirror_errstr(fx->m));
        j->err_no = mirror_errno(fx->m);
    }
    if (fx->free_in_cb) {
        syncer_free(fx->s);
        fx->s = NULL;
    }
}

/* Hand job i over, with mtime i+1 s and 250 ms. */
static void
fx_submit(struct fx *fx, int i)
{
    rs_time_t mtime = (rs_time_t)(i + 1) * 1000000 + 250000;
    assert_int_equal(syncer_submit(fx->s, fx->jobs[i].f, mtime, on_synced,
                                   &fx->jobs[i]),
                     0);
}

/* syncer/in_order: 50 files handed over in two bursts (the first all
 * prepared before the loop looks, so told from one full list; the second
 * handed once the loop told some, to a thread gone idle) are each
 * prepared on the thread, with their own mtime, and told on the loop's
 * thread once each, in the order handed, after their fsync; committed
 * there they are in place with their content and mtime, fsynced exactly
 * once (the commit does not fsync again), and no temp is left. The
 * thread blocks signals (the loop's events take them). */
static void
test_in_order(void **state)
{
    struct fx *fx = *state;
    enum { N = 50 };
    fx->commit_in_cb = true;

    for (int i = 0; i < N; i++)
        fx_begin_job(fx, i);
    assert_int_equal(syncer_pending(fx->s), 0);
    for (int i = 0; i < N / 2; i++)
        fx_submit(fx, i);
    assert_int_equal(syncer_pending(fx->s), N / 2);
    assert_true(wait_count(&fsyncs_out, N / 2));
    sleep_ms(20);
    assert_int_equal(fx->told, 0);      /* the loop's alone to tell */
    TU_LOOP_UNTIL(&fx->loop, fx->told >= 10, 10000);
    for (int i = N / 2; i < N; i++)
        fx_submit(fx, i);
    TU_LOOP_UNTIL(&fx->loop, fx->told >= N, 10000);
    tu_loop_settle(&fx->loop);

    assert_int_equal(fx->told, N);
    assert_int_equal(syncer_pending(fx->s), 0);
    assert_int_equal(atomic_load(&fsyncs_in), N);
    assert_false(fsync_was_here());
    /* the thread leaves signals to the loop's thread */
    int others = 0;
    assert_int_equal(tu_threads_unblocked(SIGTERM, &others), 0);
    assert_true(others >= 1);
    for (int i = 0; i < N; i++) {
        struct job *j = &fx->jobs[i];
        char rel[64], text[256];
        fx_rel(rel, sizeof(rel), i);
        fx_text(text, sizeof(text), i);
        assert_int_equal(fx->order[i], i);
        assert_int_equal(j->told, 1);
        assert_true(j->on_loop);
        assert_true(j->fsynced_then >= (unsigned)i + 1);
        if (i < 10)         /* told before the second burst */
            assert_int_equal(j->pending_then, N / 2 - 1 - i);
        if (i >= N / 2)     /* told after it */
            assert_int_equal(j->pending_then, N - 1 - i);
        assert_int_equal(j->rc, 0);
        assert_null(j->f);
        const char *path = fx_path(fx->mdir, rel);
        const char *got = tu_read_str(path);
        assert_non_null(got);
        assert_string_equal(got, text);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mtim.tv_sec, i + 1);
        assert_int_equal(st.st_mtim.tv_nsec, 250000000);
    }
    for (int d = 0; d < 4; d++) {
        char dir[16];
        snprintf(dir, sizeof(dir), "d%d", d);
        const char *path = fx_path(fx->mdir, dir);
        assert_int_equal(tu_count_entries(path, MIRROR_TMP_PREFIX), 0);
        assert_int_equal(tu_count_entries(path, NULL), N / 4 + (d < N % 4));
    }
}

/* Begin, write, syncer_prepare_here and commit rel. */
static void
fx_prepare_here(struct syncer *s, struct mirror *m, const char *rel,
                rs_time_t mtime)
{
    struct mirror_file *mf = fx_begin(m, rel, "x");
    syncer_prepare_here(s, mf, mtime);
    assert_int_equal(mirror_commit(mf, RS_TIME_NONE), 0);
}

/* syncer/wanted: false on a fresh syncer; true after one prepare (here, or
 * on the thread) as slow as a disk's fsync; still true after 30 fast ones
 * (the slowest recent prepare weighs less by 1/16 a prepare: 2000 us is
 * over SYNCER_SLOW_US for 35 more); false again after enough fast ones.
 * syncer_prepare_here fsyncs on the calling thread, once (the commit does
 * not fsync again). Under MIRROR_FSYNC_NONE no fsync is made, however
 * slow the disk, and it is not wanted. */
static void
test_wanted(void **state)
{
    struct fx *fx = *state;
    int threads = fx_threads();

    assert_false(syncer_wanted(fx->s));
    assert_true(mirror_syncs(fx->m));
    atomic_store(&fsync_delay_us, 10 * SYNCER_SLOW_US);
    fx_prepare_here(fx->s, fx->m, "w/slow.txt", 5000000);
    assert_int_equal(atomic_load(&fsyncs_in), 1);
    assert_true(fsync_was_here());
    assert_true(syncer_wanted(fx->s));
    struct stat st;
    assert_int_equal(stat(fx_path(fx->mdir, "w/slow.txt"), &st), 0);
    assert_int_equal(st.st_mtim.tv_sec, 5);
    assert_int_equal(syncer_pending(fx->s), 0);
    assert_int_equal(fx_threads(), threads);    /* no thread for that */

    /* fast ones: the wrapper skips the disk (this /tmp may be a real
     * one, its fsync slower than SYNCER_SLOW_US) */
    atomic_store(&fsync_delay_us, 0);
    atomic_store(&fsync_fake, true);
    char rel[32];
    for (int i = 0; i < 30; i++) {
        snprintf(rel, sizeof(rel), "w/f%d.txt", i % 10);
        fx_prepare_here(fx->s, fx->m, rel, RS_TIME_NONE);
        assert_true(syncer_wanted(fx->s));
    }
    /* 36 undisturbed ones suffice; a noisy machine may spoil a few */
    int n = 30;
    while (syncer_wanted(fx->s) && n < 2000) {
        snprintf(rel, sizeof(rel), "w/f%d.txt", n % 10);
        fx_prepare_here(fx->s, fx->m, rel, RS_TIME_NONE);
        n++;
    }
    assert_false(syncer_wanted(fx->s));
    assert_int_equal(atomic_load(&fsyncs_in), (unsigned)n + 1);

    /* a slow prepare on the thread counts too: a fresh syncer */
    syncer_free(fx->s);
    fx->s = fx_syncer(fx);
    assert_false(syncer_wanted(fx->s));
    atomic_store(&fsync_fake, false);
    atomic_store(&fsync_delay_us, 10 * SYNCER_SLOW_US);
    fx->jobs[0].f = fx_begin(fx->m, "w/thread.txt", "t");
    fx->commit_in_cb = true;
    fx_submit(fx, 0);
    TU_LOOP_UNTIL(&fx->loop, fx->told == 1, 10000);
    assert_int_equal(fx->jobs[0].rc, 0);
    assert_false(fsync_was_here());
    assert_true(syncer_wanted(fx->s));

    /* no fsync at all: a disk however slow is not waited on */
    char ndir[4200];
    snprintf(ndir, sizeof(ndir), "%s/n", fx->base);
    struct mirror *mn = fx_mirror(ndir, MIRROR_FSYNC_NONE);
    assert_false(mirror_syncs(mn));
    struct syncer *sn = fx_syncer(fx);
    atomic_store(&fsync_delay_us, 50000);
    unsigned before = atomic_load(&fsyncs_in);
    /* one undisturbed prepare shows it; scheduler noise may need more */
    n = 0;
    do {
        snprintf(rel, sizeof(rel), "n%d.txt", n % 10);
        fx_prepare_here(sn, mn, rel, (rs_time_t)(n + 1) * 1000000);
        n++;
    } while (syncer_wanted(sn) && n < 500 &&
             atomic_load(&fsyncs_in) == before);
    bool wanted = syncer_wanted(sn);
    syncer_free(sn);
    assert_int_equal(atomic_load(&fsyncs_in), before);
    assert_false(wanted);
    snprintf(rel, sizeof(rel), "n%d.txt", (n - 1) % 10);
    assert_int_equal(stat(fx_path(ndir, rel), &st), 0);
    assert_int_equal(st.st_mtim.tv_sec, n);     /* the mtime was set */
    mirror_close(mn);
}

/* syncer/fsync_fails: a file whose fsync fails on the thread (EIO) is
 * still told; its commit on the loop reports the fsync's failure (RS_EIO,
 * "a/x.txt: fsync: EIO", errno EIO), leaves the old version in place and
 * removes the temp. */
static void
test_fsync_fails(void **state)
{
    struct fx *fx = *state;

    struct mirror_file *old = fx_begin(fx->m, "a/x.txt", "old");
    assert_int_equal(mirror_commit(old, RS_TIME_NONE), 0);
    assert_int_equal(atomic_load(&fsyncs_in), 1);

    fx->jobs[0].f = fx_begin(fx->m, "a/x.txt", "new content");
    fx->commit_in_cb = true;
    atomic_store(&fsync_errno, EIO);
    fx_submit(fx, 0);
    TU_LOOP_UNTIL(&fx->loop, fx->told == 1, 10000);
    atomic_store(&fsync_errno, 0);

    struct job *j = &fx->jobs[0];
    assert_int_equal(j->told, 1);
    assert_int_equal(j->rc, RS_EIO);
    assert_non_null(strstr(j->errstr, "a/x.txt: fsync: EIO"));
    assert_int_equal(j->err_no, EIO);
    assert_non_null(strstr(mirror_errstr(fx->m), "a/x.txt: fsync: EIO"));
    assert_int_equal(mirror_errno(fx->m), EIO);
    assert_int_equal(atomic_load(&fsyncs_in), 2);   /* not retried */
    assert_int_equal(syncer_pending(fx->s), 0);
    const char *got = tu_read_str(fx_path(fx->mdir, "a/x.txt"));
    assert_non_null(got);
    assert_string_equal(got, "old");
    const char *a = fx_path(fx->mdir, "a");
    assert_int_equal(tu_count_entries(a, MIRROR_TMP_PREFIX), 0);
    assert_int_equal(tu_count_entries(a, NULL), 1);
}

static void *
open_gate_later(void *arg)
{
    (void)arg;
    sleep_ms(50);
    gate_set(false);
    return NULL;
}

/* syncer/free_pending: syncer_free while the thread holds a file (its
 * fsync stuck), with one file prepared and not yet told, three behind the
 * held one in the thread's batch and two still queued: it waits for the
 * held file, and returns; nothing after it is prepared, no file is ever
 * told, not even by the loop afterwards. Their owner then aborts all 7:
 * nothing leaks, no temp is left. */
static void
test_free_pending(void **state)
{
    struct fx *fx = *state;
    enum { N = 7 };

    gate_set(true);
    for (int i = 0; i < N; i++)
        fx_begin_job(fx, i);
    fx_submit(fx, 0);
    assert_true(wait_count(&fsyncs_in, 1));     /* the thread holds #0 */
    for (int i = 1; i <= 4; i++)
        fx_submit(fx, i);
    gate_grant();                               /* #0 done; #1..#4 taken */
    assert_true(wait_count(&fsyncs_in, 2));     /* ... and #1 held */
    for (int i = 5; i < N; i++)
        fx_submit(fx, i);                       /* queued */
    assert_int_equal(syncer_pending(fx->s), N);
    assert_int_equal(fx->told, 0);

    pthread_t opener;
    assert_int_equal(pthread_create(&opener, NULL, open_gate_later, NULL),
                     0);
    syncer_free(fx->s);
    fx->s = NULL;
    /* it waited for the file held: that fsync returned before */
    assert_int_equal(atomic_load(&fsyncs_out), 2);
    assert_int_equal(pthread_join(opener, NULL), 0);
    tu_loop_settle(&fx->loop);
    sleep_ms(20);
    tu_loop_settle(&fx->loop);
    assert_int_equal(fx->told, 0);
    assert_int_equal(atomic_load(&fsyncs_in), 2);  /* #2..#6 never were */

    for (int i = 0; i < N; i++) {
        mirror_abort(fx->jobs[i].f);
        fx->jobs[i].f = NULL;
    }
    for (int d = 0; d < 4; d++) {
        char dir[16];
        snprintf(dir, sizeof(dir), "d%d", d);
        assert_int_equal(tu_count_entries(fx_path(fx->mdir, dir), NULL), 0);
    }
}

/* syncer/free_from_callback: the first file's on_synced commits it and
 * frees the syncer, with the other 9 prepared and waiting to be told: no
 * other callback runs, then or later, nothing is used after it was freed
 * (ASan), nothing leaks; the 9 are their owner's to abort. */
static void
test_free_from_callback(void **state)
{
    struct fx *fx = *state;
    enum { N = 10 };

    fx->commit_in_cb = true;
    fx->free_in_cb = true;
    for (int i = 0; i < N; i++)
        fx_begin_job(fx, i);
    for (int i = 0; i < N; i++)
        fx_submit(fx, i);
    /* let all of them be done before the loop looks: its first turn then
     * finds them all in the list */
    assert_true(wait_count(&fsyncs_out, N));
    sleep_ms(20);
    TU_LOOP_UNTIL(&fx->loop, fx->told >= 1, 10000);
    assert_null(fx->s);
    tu_loop_settle(&fx->loop);
    sleep_ms(20);
    tu_loop_settle(&fx->loop);

    assert_int_equal(fx->told, 1);
    assert_int_equal(fx->order[0], 0);
    assert_int_equal(fx->jobs[0].told, 1);
    assert_int_equal(fx->jobs[0].rc, 0);
    assert_null(fx->jobs[0].f);
    char rel[64], text[256];
    fx_rel(rel, sizeof(rel), 0);
    fx_text(text, sizeof(text), 0);
    const char *got = tu_read_str(fx_path(fx->mdir, rel));
    assert_non_null(got);
    assert_string_equal(got, text);
    for (int i = 1; i < N; i++) {
        assert_int_equal(fx->jobs[i].told, 0);
        assert_non_null(fx->jobs[i].f);
        mirror_abort(fx->jobs[i].f);
        fx->jobs[i].f = NULL;
    }
    for (int d = 0; d < 4; d++) {
        char dir[16];
        snprintf(dir, sizeof(dir), "d%d", d);
        const char *path = fx_path(fx->mdir, dir);
        assert_int_equal(tu_count_entries(path, MIRROR_TMP_PREFIX), 0);
        assert_int_equal(tu_count_entries(path, NULL), d == 0 ? 1 : 0);
    }
}

/* syncer/free_null: syncer_free(NULL) is a no-op; a syncer never handed a
 * file starts no thread and frees cleanly; one that was has its thread
 * gone once freed. */
static void
test_free_null(void **state)
{
    struct fx *fx = *state;

    syncer_free(NULL);
    int threads = fx_threads();
    struct syncer *s = fx_syncer(fx);
    assert_int_equal(fx_threads(), threads);
    assert_int_equal(syncer_pending(s), 0);
    assert_false(syncer_wanted(s));
    syncer_free(s);
    assert_int_equal(fx_threads(), threads);

    /* the fixture's: one file, told, then freed with its thread idle */
    fx->commit_in_cb = true;
    fx_begin_job(fx, 0);
    fx_submit(fx, 0);
    assert_int_equal(fx_threads(), threads + 1);
    TU_LOOP_UNTIL(&fx->loop, fx->told == 1, 10000);
    assert_int_equal(fx->jobs[0].rc, 0);
    syncer_free(fx->s);
    fx->s = NULL;
    /* joined; the kernel may list the task a moment longer */
    for (int i = 0; i < 5000 && fx_threads() != threads; i++)
        sleep_ms(1);
    assert_int_equal(fx_threads(), threads);
}

#define TS(name, fn) { name, fn, fx_setup, fx_teardown, NULL }

static void *
no_op(void *arg)
{
    return arg;
}

int
main(void)
{
    /* A first thread, so that a sanitizer's own (TSan starts one with the
     * first pthread_create) is there before the tests count threads. */
    pthread_t t;
    if (pthread_create(&t, NULL, no_op, NULL) != 0 ||
        pthread_join(t, NULL) != 0)
        return 1;
    const struct CMUnitTest tests[] = {
        TS("syncer/in_order", test_in_order),
        TS("syncer/wanted", test_wanted),
        TS("syncer/fsync_fails", test_fsync_fails),
        TS("syncer/free_pending", test_free_pending),
        TS("syncer/free_from_callback", test_free_from_callback),
        TS("syncer/free_null", test_free_null),
    };
    return cmocka_run_group_tests_name("sub_syncer", tests, NULL, NULL);
}
