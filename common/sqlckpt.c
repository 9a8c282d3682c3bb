/*
 * sqlckpt.c - a checkpointer thread for an SQLite WAL database
 * (rs_sqlckpt.h).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "rs_alloc.h"
#include "rs_daemon.h"
#include "rs_error.h"
#include "rs_sqlckpt.h"
#include "rs_time.h"

struct rs_sqlckpt {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* on CLOCK_MONOTONIC: a wall clock set
                                   back must not stall the checkpoints */
    bool stop;
    bool due;                   /* a commit left the WAL over frames */
    atomic_bool kicked;         /* due was set and not yet served: the
                                   writer's hook locks nothing until then */
    unsigned interval_ms;       /* 0: none by time */
    unsigned frames;            /* 0: none by size */
    unsigned cap;               /* the writer's commit checkpoints */
    unsigned step;              /* frames, or 1000 when 0 */
    unsigned kicked_at;         /* the writer's: the WAL's length when it */
    unsigned ran_at;            /* last woke the thread, last checkpointed */
    atomic_ulong runs, writer_runs;
    sqlite3 *writer;            /* the caller's; its autocheckpoint */
    sqlite3 *db;                /* ours, used by the thread alone */
};

/*
 * After each of the writer's commits, on its thread: nframes is the WAL's
 * length. What counts is the frames added since the hook last acted: a
 * WAL that has not started over stays long, and acting on its length
 * would checkpoint, and fsync, at every commit. Each c->frames added wake
 * the thread. Past cap, the commit checkpoints itself, and again after
 * each step more (as SQLite's own hook does past 1000 while a reader
 * keeps the WAL from starting over): the WAL starts over only when a
 * writer begins after a checkpoint that left nothing to copy, and a
 * writer that is always in a transaction (rssub's batches) never gives
 * the thread that moment, so its WAL would grow without end. Here,
 * between this commit and the next begin, is that moment, and most of
 * the WAL is copied already.
 */
static int
on_wal_commit(void *arg, sqlite3 *db, const char *name, int nframes)
{
    struct rs_sqlckpt *c = arg;
    unsigned n = nframes > 0 ? (unsigned)nframes : 0;

    if (n < c->kicked_at)
        c->kicked_at = 0;              /* the WAL started over */
    if (n < c->ran_at)
        c->ran_at = 0;
    if (n >= c->cap && n - c->ran_at >= c->step) {
        /* PASSIVE: SQLITE_BUSY at once if the thread is checkpointing;
         * the next commit tries again */
        if (sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE,
                                      NULL, NULL) == SQLITE_OK) {
            c->ran_at = c->kicked_at = n;
            atomic_fetch_add_explicit(&c->writer_runs, 1,
                                      memory_order_relaxed);
        }
    } else if (c->frames > 0 && n - c->kicked_at >= c->frames) {
        c->kicked_at = n;
        if (!atomic_exchange(&c->kicked, true)) {
            pthread_mutex_lock(&c->mu);
            c->due = true;
            pthread_cond_signal(&c->cv);
            pthread_mutex_unlock(&c->mu);
        }
    }
    return SQLITE_OK;
}

static void *
ckpt_main(void *arg)
{
    struct rs_sqlckpt *c = arg;

    rs_thread_signals_to_loop();
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        struct timespec until = rs_time_mono_deadline(c->interval_ms);
        int wrc = 0;
        /* a spurious wake-up waits out the rest */
        while (!c->stop && !c->due && wrc == 0)
            wrc = c->interval_ms > 0
                      ? pthread_cond_timedwait(&c->cv, &c->mu, &until)
                      : pthread_cond_wait(&c->cv, &c->mu);
        if (c->stop)
            break;
        c->due = false;
        pthread_mutex_unlock(&c->mu);
        /* PASSIVE: copies what no reader still needs, never waits for
         * the writer or a reader; the next one goes on from there. */
        (void)sqlite3_wal_checkpoint_v2(c->db, NULL,
                                        SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        atomic_fetch_add_explicit(&c->runs, 1, memory_order_relaxed);
        atomic_store(&c->kicked, false);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int
rs_sqlckpt_start(sqlite3 *db, unsigned interval_ms, unsigned frames,
                 struct rs_sqlckpt **out)
{
    const char *path = sqlite3_db_filename(db, "main");
    pthread_condattr_t ca;
    struct rs_sqlckpt *c;

    *out = NULL;
    if (path == NULL || path[0] == '\0')
        return RS_EINVAL;
    if ((c = rs_calloc(1, sizeof(*c))) == NULL)
        return RS_ENOMEM;
    c->writer = db;
    c->interval_ms = interval_ms > 0 || frames > 0 ? interval_ms : 1000;
    c->frames = frames;
    c->step = frames > 0 ? frames : 1000;
    c->cap = 16 * c->step;
    /* opened here, not in the thread: a failure is the caller's to hear,
     * and its commits then go on checkpointing */
    if (sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE |
                        SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
        goto fail;
    sqlite3_busy_timeout(c->db, 1000);
    /* a connection learns the database is in WAL mode at its first read;
     * until then a checkpoint does nothing */
    if (sqlite3_exec(c->db, "SELECT count(*) FROM sqlite_master", NULL, NULL,
                     NULL) != SQLITE_OK)
        goto fail;
    if (pthread_condattr_init(&ca) != 0)
        goto fail;
    (void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&c->thread, NULL, ckpt_main, c) != 0) {
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        goto fail;
    }
    /* commits no longer checkpoint (this also takes SQLite's own hook
     * away, so ours goes in after it); a WAL left large by a burst is cut
     * back once checkpointed */
    (void)sqlite3_exec(db, "PRAGMA wal_autocheckpoint=0; "
                       "PRAGMA journal_size_limit=67108864;", NULL, NULL, NULL);
    (void)sqlite3_wal_hook(db, on_wal_commit, c);
    *out = c;
    return 0;
fail:
    sqlite3_close(c->db);   /* NULL: a no-op */
    rs_free(c);
    return RS_EIO;
}

void
rs_sqlckpt_stop(struct rs_sqlckpt *c)
{
    if (c == NULL)
        return;
    /* our hook out, SQLite's back: the writer's commits checkpoint again */
    (void)sqlite3_wal_hook(c->writer, NULL, NULL);
    (void)sqlite3_exec(c->writer, "PRAGMA wal_autocheckpoint=1000;", NULL,
                       NULL, NULL);
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    sqlite3_close(c->db);
    rs_free(c);
}

unsigned long
rs_sqlckpt_runs(const struct rs_sqlckpt *c, unsigned long *writer_runs)
{
    if (writer_runs != NULL)
        *writer_runs = atomic_load_explicit(&c->writer_runs,
                                            memory_order_relaxed);
    return atomic_load_explicit(&c->runs, memory_order_relaxed);
}
