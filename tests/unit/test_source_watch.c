/* test_source_watch.c - inotify watching and settling (source/watch.c) on
 * a real loop and a real directory: a closed file is ready at once, one
 * still open for writing only after the settle time, new directories
 * arrive as paths (the owner scans them), too many pending paths fall back
 * to a rescan. Each test runs the loop under a watchdog and counts
 * callbacks exactly. */
#include "testutil.h"

#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tree.h"
#include "watch.h"

struct fx {
    char *dir;
    struct event_base *base;
    struct tree *tree;
    struct watch *w;
    struct event *watchdog;
    char got[64][256];        /* paths of every batch, in order */
    int ngot;
    int total;                /* paths of every batch, also past 64 */
    int batches;
    int rescans;
    int roots_gone;
    int problems;
    int want;                 /* stop the loop after this many paths */
};

static void
on_batch(void *ud, const char *const *paths, size_t n)
{
    struct fx *f = ud;
    f->batches++;
    for (size_t i = 0; i < n && f->ngot < 64; i++)
        snprintf(f->got[f->ngot++], 256, "%s", paths[i]);
    f->total += (int)n;
    if (f->want > 0 && f->total >= f->want)
        event_base_loopbreak(f->base);
}

static void
on_rescan(void *ud, const char *why)
{
    (void)why;
    struct fx *f = ud;
    f->rescans++;
    event_base_loopbreak(f->base);
}

static void
on_root_gone(void *ud)
{
    struct fx *f = ud;
    f->roots_gone++;
    event_base_loopbreak(f->base);
}

static void
on_problem(void *ud, const char *rel, const char *what, int errnum)
{
    (void)rel;
    (void)what;
    (void)errnum;
    ((struct fx *)ud)->problems++;
}

static void
on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(((struct fx *)arg)->base);
}

static size_t fx_max_queued;      /* watch_opts.max_queued of fx_open */
static int64_t fx_coalesce_us = -1;   /* watch_opts.coalesce_us: the tests
                                         count batches, so none by default */

static void
fx_open(struct fx *f, int64_t settle_ms, size_t max_pending)
{
    char err[256];
    struct tree_opts to = { .dir = f->dir };
    assert_int_equal(tree_open(&to, &f->tree, err, sizeof(err)), 0);
    struct watch_opts wo = { .base = f->base, .tree = f->tree,
                             .settle_ms = settle_ms,
                             .max_pending = max_pending,
                             .max_queued = fx_max_queued,
                             .coalesce_us = fx_coalesce_us,
                             .on_batch = on_batch, .on_rescan = on_rescan,
                             .on_root_gone = on_root_gone,
                             .on_problem = on_problem, .ud = f };
    const char *e;
    f->w = watch_new(&wo, &e);
    assert_non_null(f->w);
    assert_int_equal(watch_add_dir(f->w, ""), 0);
}

static int
fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    f->dir = tu_mkdtemp();
    f->base = event_base_new();
    f->watchdog = evtimer_new(f->base, on_watchdog, f);
    *state = f;
    return 0;
}

static int
fx_teardown(void **state)
{
    struct fx *f = *state;
    watch_free(f->w);
    tree_free(f->tree);
    event_free(f->watchdog);
    /* nothing of the watch is left registered on the loop */
    assert_int_equal(event_base_get_num_events(f->base, EVENT_BASE_COUNT_ADDED | EVENT_BASE_COUNT_ACTIVE), 0);
    event_base_free(f->base);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* Run the loop until want paths arrived, a rescan, or ms passed. */
static void
fx_run(struct fx *f, int want, int ms)
{
    f->want = want;
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    evtimer_add(f->watchdog, &tv);
    event_base_dispatch(f->base);
    evtimer_del(f->watchdog);
}

static void
fx_write(struct fx *f, const char *rel, const char *text)
{
    char p[4200];
    snprintf(p, sizeof(p), "%s/%s", f->dir, rel);
    FILE *fp = fopen(p, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static bool
fx_has(const struct fx *f, const char *path)
{
    for (int i = 0; i < f->ngot; i++)
        if (strcmp(f->got[i], path) == 0)
            return true;
    return false;
}

/* watch/closed_is_ready: a file written and closed is handed over without
 * waiting for the (long) settle time; hidden names are never handed. */
static void
test_closed(void **state)
{
    struct fx *f = *state;
    fx_open(f, 10000, 0);
    fx_write(f, ".hidden", "x");
    fx_write(f, "a.txt", "hello");
    fx_run(f, 1, 5000);
    assert_int_equal(f->ngot, 1);
    assert_string_equal(f->got[0], "a.txt");
    assert_int_equal(f->rescans, 0);
}

/* watch/open_waits_for_settle: a file still open for writing is not
 * handed over while it is written, only settle after the last write. */
static void
test_settle(void **state)
{
    struct fx *f = *state;
    fx_open(f, 400, 0);
    char p[4200];
    snprintf(p, sizeof(p), "%s/growing.log", f->dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(write(fd, "line\n", 5), 5);
        fx_run(f, 1, 200);           /* 200 ms pass: not settled yet */
        assert_int_equal(f->ngot, 0);
    }
    fx_run(f, 1, 3000);              /* quiet now: it settles */
    assert_int_equal(f->ngot, 1);
    assert_string_equal(f->got[0], "growing.log");
    close(fd);
    /* the close makes it ready again at once */
    fx_run(f, 2, 3000);
    assert_int_equal(f->ngot, 2);
    assert_string_equal(f->got[1], "growing.log");
}

/* watch/dirs_moves_deletes: a new directory arrives as its own path (the
 * owner scans it and adds its watch); a rename and a deletion arrive as
 * both names / the deleted name. */
static void
test_dirs(void **state)
{
    struct fx *f = *state;
    fx_open(f, 10000, 0);
    fx_write(f, "old.txt", "x");
    fx_run(f, 1, 3000);
    assert_int_equal(f->ngot, 1);
    f->ngot = 0;
    char a[4200], b[4200];
    snprintf(a, sizeof(a), "%s/newdir", f->dir);
    assert_int_equal(mkdir(a, 0755), 0);
    snprintf(a, sizeof(a), "%s/old.txt", f->dir);
    snprintf(b, sizeof(b), "%s/new.txt", f->dir);
    assert_int_equal(rename(a, b), 0);
    assert_int_equal(unlink(b), 0);
    fx_run(f, 3, 3000);
    assert_true(fx_has(f, "newdir"));
    assert_true(fx_has(f, "old.txt"));
    assert_true(fx_has(f, "new.txt"));
    /* its watch added (as a scan would), events inside it arrive with
     * their full path */
    assert_int_equal(watch_add_dir(f->w, "newdir"), 0);
    f->ngot = 0;
    fx_write(f, "newdir/inner.txt", "y");
    /* the deletion of new.txt may come in a batch of its own, after the
     * three above (CI saw it come here, first) */
    for (int k = 0; k < 3 && !fx_has(f, "newdir/inner.txt"); k++)
        fx_run(f, f->ngot + 1, 3000);
    assert_true(fx_has(f, "newdir/inner.txt"));
    for (int i = 0; i < f->ngot; i++)
        assert_true(strcmp(f->got[i], "newdir/inner.txt") == 0 ||
                    strcmp(f->got[i], "new.txt") == 0);
    struct watch_stats st;
    watch_get_stats(f->w, &st);
    assert_int_equal(st.watches, 2);
    assert_int_equal(st.overflows, 0);
}

/* watch/too_many_pending_rescans: past max_pending held paths the watch
 * gives up on them and asks for a rescan instead. */
static void
test_overflow(void **state)
{
    struct fx *f = *state;
    fx_open(f, 10000, 4);
    int fds[10];
    for (int i = 0; i < 10; i++) {
        char p[4200];
        snprintf(p, sizeof(p), "%s/open%d", f->dir, i);
        fds[i] = open(p, O_WRONLY | O_CREAT, 0644);   /* created, not closed */
        assert_true(fds[i] >= 0);
    }
    fx_run(f, 100, 3000);
    /* once per read of the descriptor: the events may come in several */
    assert_true(f->rescans >= 1);
    assert_int_equal(f->ngot, 0);
    struct watch_stats st;
    watch_get_stats(f->w, &st);
    assert_int_equal(st.overflows, (uint64_t)f->rescans);
    assert_true(st.pending < 4);
    for (int i = 0; i < 10; i++)
        close(fds[i]);
    watch_free(NULL);
}

/* watch/kernel_queue_never_overflows: more events than the kernel holds
 * per inotify descriptor (fs.inotify.max_queued_events) arrive while the
 * loop is busy elsewhere; none is lost and no rescan is asked: the drain
 * thread keeps the kernel's queue empty. Without it the kernel dropped
 * them (IN_Q_OVERFLOW) and the whole tree was scanned again. */
static void
test_kernel_queue(void **state)
{
    struct fx *f = *state;
    long q = 16384;
    FILE *fp = fopen("/proc/sys/fs/inotify/max_queued_events", "r");
    if (fp != NULL) {
        if (fscanf(fp, "%ld", &q) != 1)
            q = 16384;
        fclose(fp);
    }
    if (q > 200000)
        skip();                   /* a machine tuned past what we create */
    fx_open(f, 10000, 0);
    /* each file is at least two events (created, closed) */
    int n = (int)q / 2 + 4000;
    for (int i = 0; i < n; i++) {
        char p[4200];
        snprintf(p, sizeof(p), "%s/f%06d", f->dir, i);
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
        assert_true(fd >= 0);
        close(fd);
    }
    fx_run(f, n, 30000);
    assert_int_equal(f->rescans, 0);
    assert_int_equal(f->total, n);
    struct watch_stats st;
    watch_get_stats(f->w, &st);
    assert_int_equal(st.overflows, 0);
    assert_true(st.events >= (uint64_t)n * 2);
}

/* watch/memory_queue_full_rescans: events the loop has not taken past
 * max_queued bytes are dropped for a rescan, not held without bound. */
static void
test_queue_full(void **state)
{
    struct fx *f = *state;
    fx_max_queued = 4096;         /* about a hundred events */
    fx_open(f, 10000, 0);
    fx_max_queued = 0;
    for (int i = 0; i < 2000; i++) {
        char p[4200];
        snprintf(p, sizeof(p), "%s/f%06d", f->dir, i);
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
        assert_true(fd >= 0);
        close(fd);
    }
    fx_run(f, 2000, 5000);
    assert_true(f->rescans >= 1);
    assert_true(f->total < 2000);
    struct watch_stats st;
    watch_get_stats(f->w, &st);
    assert_int_equal(st.overflows, (uint64_t)f->rescans);
}

static int64_t
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* watch/coalesce: a change after a quiet spell is handed over at once;
 * changes that follow within coalesce_us wait for it and go together. */
static void
test_coalesce(void **state)
{
    struct fx *f = *state;
    fx_coalesce_us = 300000;
    fx_open(f, 10000, 0);
    fx_coalesce_us = -1;
    int64_t t0 = now_ms();
    fx_write(f, "first.txt", "1");
    fx_run(f, 1, 3000);
    assert_int_equal(f->total, 1);
    assert_true(now_ms() - t0 < 250);     /* not held back */
    assert_int_equal(f->batches, 1);
    fx_write(f, "second.txt", "2");
    fx_write(f, "third.txt", "3");
    fx_run(f, 3, 3000);
    assert_int_equal(f->total, 3);
    assert_int_equal(f->batches, 2);         /* the two went together */
    assert_true(now_ms() - t0 >= 250);    /* after the window */
    assert_true(fx_has(f, "second.txt"));
    assert_true(fx_has(f, "third.txt"));
}

/* watch/root_deleted: the root removed while the tree holds its
 * descriptor (so no IN_DELETE_SELF comes, and an empty one's rmdir sends
 * no event at all) is told once, within WATCH_ROOT_CHECK_MS; a name that
 * can never be listed (a newline in it) is told as a problem, not
 * handed over. */
static void
test_root_deleted(void **state)
{
    struct fx *f = *state;
    fx_open(f, 10000, 0);
    fx_write(f, "bad\nname", "x");
    fx_run(f, 1, 300);
    assert_int_equal(f->ngot, 0);
    assert_int_equal(f->problems, 1);
    char p[4200];
    snprintf(p, sizeof(p), "%s/bad\nname", f->dir);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(rmdir(f->dir), 0);
    fx_run(f, 0, 3 * WATCH_ROOT_CHECK_MS);
    assert_int_equal(f->roots_gone, 1);
    fx_run(f, 0, WATCH_ROOT_CHECK_MS + 200);
    assert_int_equal(f->roots_gone, 1);            /* once */
    assert_int_equal(mkdir(f->dir, 0700), 0);      /* for the teardown */
}

#define TW(name, fn) { name, fn, fx_setup, fx_teardown, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TW("watch/closed_is_ready", test_closed),
        TW("watch/open_waits_for_settle", test_settle),
        TW("watch/dirs_moves_deletes", test_dirs),
        TW("watch/too_many_pending_rescans", test_overflow),
        TW("watch/kernel_queue_never_overflows", test_kernel_queue),
        TW("watch/memory_queue_full_rescans", test_queue_full),
        TW("watch/coalesce", test_coalesce),
        TW("watch/root_deleted", test_root_deleted),
    };
    return cmocka_run_group_tests_name("source_watch", tests, NULL, NULL);
}
