/* test_sub_apply.c - the appliers (subscriber/apply.c) on a real event
 * loop, a real ledger (SQLite in a temp dir), a real mirror directory and
 * a real HTTP server on 127.0.0.1 (tu_httpd): a failed fetch is retried
 * when its backoff says, whether the appliers are idle, busy with a
 * stream of fresh changes, or behind a backlog that is offered again
 * while it waits (a polling pull); a newer change supersedes the job in
 * flight; apply_free(NULL) is a no-op. On a disk's slow fsyncs (the
 * test's own, below) the files are made durable off the loop, and a job
 * waiting on that is superseded, freed or failed as any other. Every wait
 * is bounded by a watchdog, and every test ends with nothing left on the
 * loop. */
#include "testutil.h"
#include "tu_httpd.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "apply.h"
#include "ledger.h"
#include "mirror.h"
#include "pathmap.h"
#include "rs_alloc.h"
#include "rs_hash.h"
#include "rs_http.h"

#define WATCHDOG_MS 20000u

/* Linked with -Wl,--wrap=fsync (tests/CMakeLists.txt): our fsyncs cost
 * nothing (tmpfs's; the temp dir may be on a disk), or a disk's time
 * (delay_us each), fail (fail_errno), or wait at a gate the test opens;
 * counted by where they ran, the loop's thread or another. */
static atomic_uint fsync_delay_us;
static atomic_int fsync_fail_errno;
static atomic_uint fsyncs_on_loop, fsyncs_off_loop, gate_waiting;
static pthread_t loop_thread;
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static bool gate_closed;

int __wrap_fsync(int fd);

int
__wrap_fsync(int fd)
{
    if (pthread_equal(pthread_self(), loop_thread)) {
        atomic_fetch_add(&fsyncs_on_loop, 1);
    } else {
        atomic_fetch_add(&fsyncs_off_loop, 1);
        pthread_mutex_lock(&gate_mu);
        if (gate_closed) {
            atomic_fetch_add(&gate_waiting, 1);
            while (gate_closed)
                pthread_cond_wait(&gate_cv, &gate_mu);
        }
        pthread_mutex_unlock(&gate_mu);
    }
    unsigned us = atomic_load(&fsync_delay_us);
    if (us > 0)
        nanosleep(&(struct timespec){ 0, (long)us * 1000 }, NULL);
    int e = atomic_load(&fsync_fail_errno);
    if (e != 0) {
        errno = e;
        return -1;
    }
    (void)fd;
    return 0;
}

static void
gate_set(bool closed)
{
    pthread_mutex_lock(&gate_mu);
    gate_closed = closed;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

struct fx {
    struct tu_loop l;
    struct tu_httpd *srv;
    char *dir;
    char db[4200], mdir[4200];
    struct ledger *ledger;
    struct mirror *mirror;
    struct pathmap *pm;
    struct rs_http *http;
    struct apply *a;
    /* what on_result saw */
    unsigned results[APPLY_OUTCOMES];
    char watch[256];             /* a URI whose outcomes are timed */
    rs_time_t watch_at[8];       /* when each of its outcomes came */
    enum apply_outcome watch_o[8];
    unsigned nwatch;
    /* a stream of fresh changes: each result offers this many new ones */
    unsigned feed;
    unsigned fed;
    bool hot;                    /* ... and the watched URI changes again */
    unsigned idle;
    unsigned retries;            /* apply's attempts; 0: 20 */
    unsigned kept_ms;            /* apply's kept_ms; 0: its own */
};

/* ------------------------------------------------------------ helpers */

static void offer(struct fx *f, const char *uri);
static int offer_dt(struct fx *f, const char *uri, rs_time_t dt);

/* The stream of fresh changes: offered from the loop, not from inside the
 * appliers' callback. */
static void
on_feed(evutil_socket_t fd, short what, void *arg)
{
    struct fx *f = arg;
    char u[256];

    (void)fd;
    (void)what;
    for (unsigned i = 0; i < f->feed; i++) {
        snprintf(u, sizeof(u), "%s/fresh/%u", f->srv->origin, f->fed++);
        offer(f, u);
    }
    if (f->hot)
        (void)offer_dt(f, f->watch, rs_time_now());
}

static void
on_result(void *ud, const char *uri, enum apply_outcome o, const char *what)
{
    struct fx *f = ud;

    (void)what;
    f->results[o]++;
    if (f->feed > 0 && strncmp(uri, f->srv->origin, strlen(f->srv->origin)) == 0
        && strstr(uri, "/fresh/") != NULL)
        assert_int_equal(event_base_once(f->l.base, -1, EV_TIMEOUT, on_feed,
                                         f, &(struct timeval){ 0, 0 }), 0);
    if (strcmp(uri, f->watch) == 0 && f->nwatch < 8) {
        f->watch_at[f->nwatch] = rs_time_now();
        f->watch_o[f->nwatch++] = o;
    }
}

static void
on_idle(void *ud, bool waiting)
{
    struct fx *f = ud;

    (void)waiting;
    f->idle++;
}

static void
fx_apply(struct fx *f, unsigned parallel)
{
    char err[512];
    struct apply_opts ao = {
        .base = f->l.base,
        .http = f->http,
        .ledger = f->ledger,
        .mirror = f->mirror,
        .pathmap = f->pm,
        .parallel = parallel,
        .retries = f->retries ? f->retries : 20,
        .timeout_ms = 10000,
        .kept_ms = f->kept_ms,
        .on_result = on_result,
        .on_idle = on_idle,
        .ud = f,
    };

    f->a = apply_new(&ao, err, sizeof(err));
    if (f->a == NULL)
        fail_msg("apply_new: %s", err);
}

static int
fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    struct mirror_opts mo = { .fsync = MIRROR_FSYNC_NONE };
    char err[512];
    const char *why = NULL;

    assert_non_null(f);
    tu_loop_init(&f->l);
    f->srv = tu_httpd_new(f->l.base);
    f->dir = tu_mkdtemp();
    snprintf(f->db, sizeof(f->db), "%s/state.db", f->dir);
    snprintf(f->mdir, sizeof(f->mdir), "%s/mirror", f->dir);
    assert_int_equal(mkdir(f->mdir, 0755), 0);
    f->ledger = ledger_open(f->db, 0, err, sizeof(err));
    if (f->ledger == NULL)
        fail_msg("ledger_open: %s", err);
    f->mirror = mirror_open(f->mdir, &mo, err, sizeof(err));
    if (f->mirror == NULL)
        fail_msg("mirror_open: %s", err);
    f->pm = pathmap_new();
    assert_non_null(f->pm);
    assert_int_equal(pathmap_add_prefix(f->pm, f->srv->origin, &why), 0);
    f->http = rs_http_new(f->l.base, &(struct rs_http_opts){ 0 });
    assert_non_null(f->http);
    loop_thread = pthread_self();
    atomic_store(&fsync_delay_us, 0);
    atomic_store(&fsync_fail_errno, 0);
    atomic_store(&fsyncs_on_loop, 0);
    atomic_store(&fsyncs_off_loop, 0);
    atomic_store(&gate_waiting, 0);
    gate_set(false);
    *state = f;
    return 0;
}

static int
fx_teardown(void **state)
{
    struct fx *f = *state;

    apply_free(f->a);
    rs_http_free(f->http);
    mirror_close(f->mirror);
    pathmap_free(f->pm);
    ledger_close(f->ledger);
    tu_httpd_free(f->srv);
    tu_loop_cleanup(&f->l);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* Offer a change of uri dated dt (created or updated) and kick; the
 * offer's return (1 queued, 0 not needed). */
static int
offer_dt(struct fx *f, const char *uri, rs_time_t dt)
{
    struct ledger_todo t = {
        .uri = uri,
        .change = LEDGER_UPDATE,
        .change_dt = dt,
        .lastmod = RS_TIME_NONE,
        .length = -1,
        .origin = "changelist",
    };
    int rc = apply_offer(f->a, &t);

    assert_true(rc == 0 || rc == 1);
    apply_kick(f->a);
    return rc;
}

static void
offer(struct fx *f, const char *uri)
{
    assert_int_equal(offer_dt(f, uri, rs_time_now()), 1);
}

static struct ledger_todo
todo_of(struct fx *f, const char *uri, char **buf)
{
    struct ledger_todo t;

    assert_int_equal(ledger_todo_get(f->ledger, uri, &t, buf), 0);
    return t;
}

/* Watch uri; offer it; run until its first outcome, a retry: returns when
 * the retry is due. */
static rs_time_t
first_attempt_fails(struct fx *f, const char *path)
{
    struct ledger_todo t;
    char *buf = NULL;
    rs_time_t due;

    snprintf(f->watch, sizeof(f->watch), "%s", tu_httpd_url(f->srv, path));
    offer(f, f->watch);
    TU_LOOP_UNTIL(&f->l, f->nwatch == 1, WATCHDOG_MS);
    assert_int_equal(f->watch_o[0], APPLY_RETRY);
    t = todo_of(f, f->watch, &buf);
    assert_int_equal(t.attempts, 1);
    due = t.not_before;
    rs_free(buf);
    assert_true(due > rs_time_now());
    return due;
}

/* Start the stream of fresh changes: each one applied offers two more. */
static void
feed_start(struct fx *f)
{
    char u[256];

    tu_httpd_add(f->srv, "/fresh/", 0, NULL, "fresh\n")->prefix = true;
    f->feed = 2;
    for (unsigned i = 0; i < 8; i++) {
        snprintf(u, sizeof(u), "%s/fresh/%u", f->srv->origin, f->fed++);
        offer(f, u);
    }
}

/* The file the mirror holds for path, or "" */
static const char *
mirrored(struct fx *f, const char *path, char *buf, size_t n)
{
    char p[8400];
    FILE *fp;
    size_t got = 0;

    snprintf(p, sizeof(p), "%s%s", f->mdir, path);
    if ((fp = fopen(p, "rb")) != NULL) {
        got = fread(buf, 1, n - 1, fp);
        fclose(fp);
    }
    buf[got] = '\0';
    return buf;
}

static unsigned
in_flight(struct fx *f)
{
    struct apply_stats st;
    apply_stats(f->a, &st);
    return st.in_flight;
}

/* The mirror again, under fsync policy p (before fx_apply). */
static void
fx_policy(struct fx *f, enum mirror_fsync p)
{
    struct mirror_opts mo = { .fsync = p };
    char err[512];

    mirror_close(f->mirror);
    f->mirror = mirror_open(f->mdir, &mo, err, sizeof(err));
    if (f->mirror == NULL)
        fail_msg("mirror_open: %s", err);
}

/* Entries of the mirror's directory rel ("" the root), those starting
 * with prefix (NULL: all). */
static int
entries(struct fx *f, const char *rel, const char *prefix)
{
    char p[8400];

    snprintf(p, sizeof(p), "%s%s", f->mdir, rel);
    return tu_count_entries(p, prefix);
}

/* Fsyncs become a disk's (3 ms each) and one resource is applied: that
 * slow fsync, on the loop, makes the hand-off worth it from then on. */
static void
disk_like(struct fx *f)
{
    char u[256];

    tu_httpd_add(f->srv, "/warm", 0, NULL, "warm\n");
    atomic_store(&fsync_delay_us, 3000);
    unsigned created = f->results[APPLY_CREATED];
    snprintf(u, sizeof(u), "%s", tu_httpd_url(f->srv, "/warm"));
    offer(f, u);
    TU_LOOP_UNTIL(&f->l, f->results[APPLY_CREATED] == created + 1,
                  WATCHDOG_MS);
}

/* Bring the job of the watched URI (offered at dt) to the syncer's thread,
 * and hold it there at the gate. */
static void
held_at_gate(struct fx *f, const char *path, rs_time_t dt)
{
    gate_set(true);
    snprintf(f->watch, sizeof(f->watch), "%s", tu_httpd_url(f->srv, path));
    assert_int_equal(offer_dt(f, f->watch, dt), 1);
    TU_LOOP_UNTIL(&f->l, atomic_load(&gate_waiting) == 1, WATCHDOG_MS);
}

static void *
open_gate_soon(void *arg)
{
    (void)arg;
    nanosleep(&(struct timespec){ 0, 50 * 1000000L }, NULL);
    gate_set(false);
    return NULL;
}

/* The n files of the mirror's directory dir (under /s/) all there with
 * "synced\n", no temp left, the last one (dir/<last>) recorded, no job in
 * flight. */
static void
all_synced(struct fx *f, const char *dir, int n, int last)
{
    struct ledger_res r;
    char rel[128], u[256], buf[64];
    char *rbuf = NULL;

    snprintf(rel, sizeof(rel), "/s/%s", dir);
    assert_int_equal(entries(f, rel, NULL), n);
    assert_int_equal(entries(f, rel, ".rssub-tmp."), 0);
    snprintf(rel, sizeof(rel), "/s/%s/%d", dir, last);
    assert_string_equal(mirrored(f, rel, buf, sizeof(buf)), "synced\n");
    snprintf(u, sizeof(u), "%s%s", f->srv->origin, rel);
    assert_int_equal(ledger_res_get(f->ledger, u, &r, &rbuf), 0);
    assert_int_equal(r.length, 7);
    rs_free(rbuf);
    assert_int_equal(in_flight(f), 0);
}

/* ------------------------------------------------------------- tests */

/* apply/fsync_off_loop: under --fsync file, while fsyncs cost nothing
 * (tmpfs) each runs on the loop, at its commit; once one takes a disk's
 * time, the next ones run on the syncer's thread while the loop goes on,
 * and every file still lands whole, recorded, with no temp left. */
static void
test_fsync_off_loop(void **state)
{
    struct fx *f = *state;
    char u[256];

    fx_policy(f, MIRROR_FSYNC_FILE);
    tu_httpd_add(f->srv, "/s/", 0, NULL, "synced\n")->prefix = true;
    fx_apply(f, 8);
    for (int i = 0; i < 10; i++) {
        snprintf(u, sizeof(u), "%s/s/fast/%d", f->srv->origin, i);
        offer(f, u);
    }
    TU_LOOP_UNTIL(&f->l, f->results[APPLY_CREATED] == 10, WATCHDOG_MS);
    assert_int_equal(atomic_load(&fsyncs_on_loop), 10);
    assert_int_equal(atomic_load(&fsyncs_off_loop), 0);

    atomic_store(&fsync_delay_us, 3000);
    for (int i = 0; i < 40; i++) {
        snprintf(u, sizeof(u), "%s/s/slow/%d", f->srv->origin, i);
        offer(f, u);
    }
    TU_LOOP_UNTIL(&f->l, f->results[APPLY_CREATED] == 50, WATCHDOG_MS);
    /* the first slow one on the loop, the rest handed over */
    assert_int_equal(atomic_load(&fsyncs_on_loop), 11);
    assert_int_equal(atomic_load(&fsyncs_off_loop), 39);
    all_synced(f, "slow", 40, 39);
}

/* apply/newer_while_syncing, apply/newer_while_syncing_full: a newer
 * change of a resource whose file is being fsynced off the loop: that
 * file goes into place and is recorded all the same (under full, the
 * syncer has placed it already; either way it is newer than what the
 * mirror had), then the newer change is applied over it. Nothing is
 * cancelled, no temp is left. */
static void
newer_while_syncing(struct fx *f, enum mirror_fsync p)
{
    struct tu_route *r = tu_httpd_add(f->srv, "/doc", 0, NULL, "v1\n");
    struct apply_stats st;
    struct ledger_res res;
    char *rbuf = NULL;
    rs_time_t dt = rs_time_now();
    char buf[64];

    fx_policy(f, p);
    fx_apply(f, 4);
    disk_like(f);
    held_at_gate(f, "/doc", dt);
    free(r->body);
    r->body = strdup("v2\n");
    r->body_len = 3;
    assert_int_equal(offer_dt(f, f->watch, dt + 1000000), 1);
    tu_loop_run_for(&f->l, 100);
    assert_string_equal(mirrored(f, "/doc", buf, sizeof(buf)), "");
    gate_set(false);
    TU_LOOP_UNTIL(&f->l, f->nwatch == 2, WATCHDOG_MS);
    assert_int_equal(f->watch_o[0], APPLY_CREATED);    /* v1, recorded */
    assert_int_equal(f->watch_o[1], APPLY_UPDATED);    /* then v2 */
    assert_string_equal(mirrored(f, "/doc", buf, sizeof(buf)), "v2\n");
    assert_int_equal(r->hits, 2);
    assert_int_equal(ledger_res_get(f->ledger, f->watch, &res, &rbuf), 0);
    assert_int_equal(res.change_dt, dt + 1000000);
    rs_free(rbuf);
    apply_stats(f->a, &st);
    assert_int_equal(st.superseded, 0);
    assert_int_equal(entries(f, "", ".rssub-tmp."), 0);
    assert_int_equal(in_flight(f), 0);
}

static void
test_newer_while_syncing(void **state)
{
    newer_while_syncing(*state, MIRROR_FSYNC_FILE);
}

static void
test_newer_while_syncing_full(void **state)
{
    newer_while_syncing(*state, MIRROR_FSYNC_FULL);
}

/* apply/fsync_full_off_loop: under --fsync full, once fsyncs take a
 * disk's time, the directory's fsync after the rename runs on the syncer's
 * thread too (it waited on the disk on the loop): two fsyncs a file there,
 * none on the loop, every file in place and recorded. */
static void
test_fsync_full_off_loop(void **state)
{
    struct fx *f = *state;
    char u[256];

    fx_policy(f, MIRROR_FSYNC_FULL);
    tu_httpd_add(f->srv, "/s/", 0, NULL, "synced\n")->prefix = true;
    fx_apply(f, 8);
    disk_like(f);              /* the file's and its directory's, here */
    /* a first file makes the directories (their fsyncs are the loop's) */
    snprintf(u, sizeof(u), "%s/s/full/first", f->srv->origin);
    offer(f, u);
    TU_LOOP_UNTIL(&f->l, f->results[APPLY_CREATED] == 2, WATCHDOG_MS);
    unsigned on_loop = atomic_load(&fsyncs_on_loop);
    unsigned off_loop = atomic_load(&fsyncs_off_loop);
    for (int i = 0; i < 20; i++) {
        snprintf(u, sizeof(u), "%s/s/full/%d", f->srv->origin, i);
        offer(f, u);
    }
    TU_LOOP_UNTIL(&f->l, f->results[APPLY_CREATED] == 22, WATCHDOG_MS);
    assert_int_equal(atomic_load(&fsyncs_on_loop), on_loop);
    assert_int_equal(atomic_load(&fsyncs_off_loop), off_loop + 40);
    all_synced(f, "full", 21, 19);
}

/* apply/free_while_syncing: apply_free while a job's file is on the
 * syncer's thread waits for the thread, then drops the file: nothing in
 * the mirror, nothing recorded, the todo row kept for the next start. */
static void
test_free_while_syncing(void **state)
{
    struct fx *f = *state;
    struct ledger_res r;
    struct ledger_todo t;
    char *buf = NULL;
    char mbuf[64];
    pthread_t th;

    tu_httpd_add(f->srv, "/held", 0, NULL, "held\n");
    fx_policy(f, MIRROR_FSYNC_FILE);
    fx_apply(f, 4);
    disk_like(f);
    held_at_gate(f, "/held", rs_time_now());
    assert_int_equal(pthread_create(&th, NULL, open_gate_soon, NULL), 0);
    apply_free(f->a);
    f->a = NULL;
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_string_equal(mirrored(f, "/held", mbuf, sizeof(mbuf)), "");
    assert_int_equal(entries(f, "", ".rssub-tmp."), 0);
    assert_int_equal(ledger_res_get(f->ledger, f->watch, &r, &buf),
                     RS_ENOTFOUND);
    assert_int_equal(ledger_todo_get(f->ledger, f->watch, &t, &buf), 0);
    rs_free(buf);
    assert_int_equal(f->nwatch, 0);
}

/* apply/fsync_fails_off_loop: an fsync that fails on the syncer's thread
 * fails the job as a failed write does: retried later, its why naming the
 * fsync, the mirror without the file. */
static void
test_fsync_fails_off_loop(void **state)
{
    struct fx *f = *state;
    struct ledger_todo t;
    char *buf = NULL;
    char mbuf[64];

    tu_httpd_add(f->srv, "/bad", 0, NULL, "bad\n");
    fx_policy(f, MIRROR_FSYNC_FILE);
    fx_apply(f, 4);
    disk_like(f);
    atomic_store(&fsync_fail_errno, EIO);
    unsigned off = atomic_load(&fsyncs_off_loop);
    snprintf(f->watch, sizeof(f->watch), "%s", tu_httpd_url(f->srv, "/bad"));
    offer(f, f->watch);
    TU_LOOP_UNTIL(&f->l, f->nwatch == 1, WATCHDOG_MS);
    atomic_store(&fsync_fail_errno, 0);
    assert_int_equal(atomic_load(&fsyncs_off_loop), off + 1);
    assert_int_equal(f->watch_o[0], APPLY_RETRY);
    t = todo_of(f, f->watch, &buf);
    assert_int_equal(t.attempts, 1);
    assert_non_null(t.last_error);
    assert_non_null(strstr(t.last_error, "bad: fsync: EIO"));
    rs_free(buf);
    assert_string_equal(mirrored(f, "/bad", mbuf, sizeof(mbuf)), "");
    assert_int_equal(entries(f, "", ".rssub-tmp."), 0);
}

/* apply/retry_due_when_idle: with nothing else to do, a failed fetch is
 * tried again when its backoff (1 s) is over - not before, and not much
 * after: a timer wakes the appliers for it. */
static void
test_retry_due_when_idle(void **state)
{
    struct fx *f = *state;
    struct tu_route *r = tu_httpd_add(f->srv, "/once", 0, NULL, "body\n");
    char buf[64];
    rs_time_t due;

    tu_httpd_fail(f->srv, r, 1, 503, NULL);
    fx_apply(f, 0);
    due = first_attempt_fails(f, "/once");
    TU_LOOP_UNTIL(&f->l, f->nwatch == 2, WATCHDOG_MS);
    assert_int_equal(f->watch_o[1], APPLY_CREATED);
    assert_int_equal(tu_httpd_hits(f->srv, "/once"), 2);
    assert_true(f->watch_at[1] >= due);
    if (f->watch_at[1] > due + 1000000)
        fail_msg("the retry ran %.2f s after it was due",
                 (double)(f->watch_at[1] - due) / 1e6);
    assert_string_equal(mirrored(f, "/once", buf, sizeof(buf)), "body\n");
}

/* apply/retry_not_starved: a failed fetch whose retry comes due while
 * fresh changes keep arriving (each one applied brings two more, as
 * from a Source that never stops changing, or a polling pull queueing its
 * backlog) is tried again within a second of its due time - not once the
 * fresh rows run out, which they never do. */
static void
test_retry_not_starved_by_fresh_rows(void **state)
{
    struct fx *f = *state;
    struct tu_route *r = tu_httpd_add(f->srv, "/retry", 0, NULL, "late\n");
    rs_time_t due;

    tu_httpd_fail(f->srv, r, 1, 503, NULL);
    fx_apply(f, 4);
    due = first_attempt_fails(f, "/retry");
    feed_start(f);
    TU_LOOP_UNTIL(&f->l, f->nwatch == 2, WATCHDOG_MS);
    f->feed = 0;
    assert_int_equal(f->watch_o[1], APPLY_CREATED);
    if (f->watch_at[1] > due + 1000000)
        fail_msg("the retry ran %.1f s after it was due",
                 (double)(f->watch_at[1] - due) / 1e6);
    assert_true(f->results[APPLY_CREATED] > 20);   /* the stream ran */
}

/* apply/refill_reads_free_slots: 4 slots, 3 held by fetches that never
 * end, 100 due rows through the last one: each refill reads as many rows
 * as there are free slots, so about one row read per file applied.
 * Reading a page of slots plus jobs in flight to fill the one slot (as
 * before 39e7427) read 7 a file here; at 5,000 changes/s that was a tenth
 * of rssub's CPU. */
static void
test_refill_reads_free_slots(void **state)
{
    struct fx *f = *state;
    struct tu_route *stuck = tu_httpd_add(f->srv, "/stuck/", 0, NULL, "x\n");
    char u[256];
    uint64_t read;

    stuck->prefix = true;
    stuck->never = true;
    tu_httpd_add(f->srv, "/many/", 0, NULL, "x\n")->prefix = true;
    fx_apply(f, 4);
    for (unsigned i = 0; i < 3; i++) {
        snprintf(u, sizeof(u), "%s/stuck/%u", f->srv->origin, i);
        offer(f, u);
    }
    TU_LOOP_UNTIL(&f->l, in_flight(f) == 3, WATCHDOG_MS);
    for (unsigned i = 0; i < 100; i++) {
        snprintf(u, sizeof(u), "%s/many/%u", f->srv->origin, i);
        offer(f, u);
    }
    TU_LOOP_UNTIL(&f->l, f->results[APPLY_CREATED] == 100, WATCHDOG_MS);
    assert_int_equal(in_flight(f), 3);
    read = ledger_todo_rows_read(f->ledger);
    if (read > 150)
        fail_msg("%llu todo rows read to apply 100", (unsigned long long)read);
    assert_true(read >= 103);
}

/* apply/superseded_taken: a newer change of a resource whose fetch hangs
 * cancels that fetch once it has run a second, and the newer change is
 * fetched as soon as the old job has ended, although fresh changes keep
 * arriving. */
static void
test_superseded_taken_under_stream(void **state)
{
    struct fx *f = *state;
    struct tu_route *r = tu_httpd_add(f->srv, "/doc", 0, NULL, "v2\n");
    struct apply_stats st;
    rs_time_t t0, dt = rs_time_now();
    char buf[64];

    r->never = true;                  /* the first GET hangs */
    fx_apply(f, 4);
    snprintf(f->watch, sizeof(f->watch), "%s", tu_httpd_url(f->srv, "/doc"));
    assert_int_equal(offer_dt(f, f->watch, dt), 1);
    TU_LOOP_UNTIL(&f->l, r->hits == 1, WATCHDOG_MS);
    r->never = false;
    feed_start(f);
    tu_loop_run_for(&f->l, 200);
    assert_int_equal(f->nwatch, 0);
    t0 = rs_time_now();
    assert_int_equal(offer_dt(f, f->watch, dt + 1000000), 1);
    TU_LOOP_UNTIL(&f->l, f->nwatch == 1, WATCHDOG_MS);
    f->feed = 0;
    assert_int_equal(f->watch_o[0], APPLY_CREATED);
    if (f->watch_at[0] > t0 + 2000000)
        fail_msg("the newer change was fetched %.1f s after it came",
                 (double)(f->watch_at[0] - t0) / 1e6);
    assert_true(f->watch_at[0] >= dt + 1000000);    /* not cancelled at once */
    assert_int_equal(r->hits, 2);
    apply_stats(f->a, &st);
    assert_int_equal(st.superseded, 1);
    assert_string_equal(mirrored(f, "/doc", buf, sizeof(buf)), "v2\n");
}

/* apply/newer_lets_fetch_end: a newer change of a resource whose fetch is
 * under way (a tenth of a second here): the fetch is not cancelled (its
 * answer may be the newer version already, and a cancel costs the
 * connection); its file is recorded, then the newer change fetched. */
static void
test_newer_lets_fetch_end(void **state)
{
    struct fx *f = *state;
    static char body[50];
    struct tu_route *r;
    struct apply_stats st;
    rs_time_t dt = rs_time_now();

    memset(body, 'x', sizeof(body) - 1);
    r = tu_httpd_add(f->srv, "/slow", 0, NULL, body);
    r->pace = 1;                      /* a byte every 2 ms */
    fx_apply(f, 4);
    snprintf(f->watch, sizeof(f->watch), "%s", tu_httpd_url(f->srv, "/slow"));
    assert_int_equal(offer_dt(f, f->watch, dt), 1);
    TU_LOOP_UNTIL(&f->l, r->hits == 1, WATCHDOG_MS);
    assert_int_equal(offer_dt(f, f->watch, dt + 1000000), 1);
    TU_LOOP_UNTIL(&f->l, f->nwatch == 2, WATCHDOG_MS);
    assert_int_equal(f->watch_o[0], APPLY_CREATED);
    assert_int_equal(f->watch_o[1], APPLY_UPDATED);
    assert_int_equal(r->hits, 2);
    apply_stats(f->a, &st);
    assert_int_equal(st.superseded, 0);
}

/* Offer uri's change at dt, announcing body's length and SHA-256. */
static int
offer_body(struct fx *f, const char *uri, rs_time_t dt, const char *body)
{
    struct rs_hasher *h = rs_hasher_new(1u << RS_HASH_SHA256);
    struct rs_hashes got;
    char hbuf[RS_HASHES_BUFSZ];
    int rc;

    assert_non_null(h);
    assert_int_equal(rs_hasher_update(h, body, strlen(body)), 0);
    assert_int_equal(rs_hasher_final(h, &got), 0);
    rs_hasher_free(h);
    rs_hashes_format(&got, hbuf);
    struct ledger_todo t = {
        .uri = uri, .change = LEDGER_UPDATE, .change_dt = dt,
        .lastmod = RS_TIME_NONE, .length = (int64_t)strlen(body),
        .hash = hbuf, .origin = "push",
    };
    rc = apply_offer(f->a, &t);
    assert_true(rc == 0 || rc == 1);
    apply_kick(f->a);
    return rc;
}

/* apply/newer_answer_taken: a resource changed again while its fetch
 * ran, and the answer is the newer version, whose change was announced
 * meanwhile: the answer is taken for that change (one GET), not retried
 * as a hash mismatch and fetched again. An answer that is no announced
 * version is still a mismatch. */
static void
test_newer_answer_taken(void **state)
{
    struct fx *f = *state;
    static char v1[64], v2[64];
    struct tu_route *r;
    struct apply_stats st;
    struct ledger_res res;
    struct ledger_todo t;
    char *buf = NULL;
    rs_time_t dt = rs_time_now();

    snprintf(v1, sizeof(v1), "version one, paced out a byte at a time\n");
    snprintf(v2, sizeof(v2), "version two, paced out a byte at a time\n");
    r = tu_httpd_add(f->srv, "/doc", 0, NULL, v2);
    r->pace = 1;                      /* 80 ms: the newer change comes */
    fx_apply(f, 4);
    snprintf(f->watch, sizeof(f->watch), "%s", tu_httpd_url(f->srv, "/doc"));
    assert_int_equal(offer_body(f, f->watch, dt, v1), 1);
    TU_LOOP_UNTIL(&f->l, r->hits == 1, WATCHDOG_MS);
    assert_int_equal(offer_body(f, f->watch, dt + 1000000, v2), 1);
    TU_LOOP_UNTIL(&f->l, f->nwatch == 1, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 100);
    assert_int_equal(f->nwatch, 1);
    assert_int_equal(f->watch_o[0], APPLY_CREATED);
    assert_int_equal(r->hits, 1);
    apply_stats(f->a, &st);
    assert_int_equal(st.newer_answers, 1);
    assert_int_equal(ledger_res_get(f->ledger, f->watch, &res, &buf), 0);
    assert_int_equal(res.change_dt, dt + 1000000);
    rs_free(buf);
    assert_int_equal(ledger_todo_get(f->ledger, f->watch, &t, &buf),
                     RS_ENOTFOUND);

    /* a third version, announced as a fourth: a mismatch, retried */
    snprintf(v1, sizeof(v1), "version four\n");
    free(r->body);
    r->body = strdup("version three\n");
    r->body_len = strlen(r->body);
    r->pace = 0;
    assert_int_equal(offer_body(f, f->watch, dt + 2000000, v1), 1);
    TU_LOOP_UNTIL(&f->l, f->nwatch == 2, WATCHDOG_MS);
    assert_int_equal(f->watch_o[1], APPLY_RETRY);
    apply_stats(f->a, &st);
    assert_int_equal(st.newer_answers, 1);
}

/* /doc now serves `serve`; a change announcing `announce` at dt is
 * offered: its outcome, the watch's n-th, is o. */
static void
serve_and_offer(struct fx *f, struct tu_route *r, const char *serve,
                const char *announce, rs_time_t dt, unsigned n,
                enum apply_outcome o)
{
    free(r->body);
    r->body = strdup(serve);
    r->body_len = strlen(serve);
    assert_int_equal(offer_body(f, f->watch, dt, announce), 1);
    TU_LOOP_UNTIL(&f->l, f->nwatch == n, WATCHDOG_MS);
    assert_int_equal(f->watch_o[n - 1], o);
}

/* apply/answer_kept: the answer is a version no change has announced yet
 * (the resource changed again while it was fetched; the notification
 * comes after the body): a retry, and the file is kept, not in place.
 * The change that announces it then takes it without a GET. A kept file
 * that the next change does not announce goes, and that change is
 * fetched; a dump's hold drops what is kept. No temp is left. */
static void
test_answer_kept(void **state)
{
    struct fx *f = *state;
    struct tu_route *r = tu_httpd_add(f->srv, "/doc", 0, NULL, "");
    struct apply_stats st;
    char buf[64];
    rs_time_t dt = rs_time_now();

    fx_apply(f, 4);
    snprintf(f->watch, sizeof(f->watch), "%s", tu_httpd_url(f->srv, "/doc"));
    serve_and_offer(f, r, "v2\n", "v1\n", dt, 1, APPLY_RETRY);
    assert_string_equal(mirrored(f, "/doc", buf, sizeof(buf)), "");
    assert_int_equal(entries(f, "", ".rssub-tmp."), 1);
    serve_and_offer(f, r, "v2\n", "v2\n", dt + 1000000, 2, APPLY_CREATED);
    assert_int_equal(r->hits, 1);
    assert_string_equal(mirrored(f, "/doc", buf, sizeof(buf)), "v2\n");
    assert_int_equal(entries(f, "", ".rssub-tmp."), 0);

    /* kept v4, then v5 announced: v4 goes, v5 is fetched */
    serve_and_offer(f, r, "v4\n", "v3\n", dt + 2000000, 3, APPLY_RETRY);
    serve_and_offer(f, r, "v5\n", "v5\n", dt + 3000000, 4, APPLY_UPDATED);
    assert_int_equal(r->hits, 3);
    assert_string_equal(mirrored(f, "/doc", buf, sizeof(buf)), "v5\n");
    apply_stats(f->a, &st);
    assert_int_equal(st.kept_answers, 1);
    assert_int_equal(entries(f, "", ".rssub-tmp."), 0);

    /* kept v7 when a dump holds the appliers: it goes */
    serve_and_offer(f, r, "v7\n", "v6\n", dt + 4000000, 5, APPLY_RETRY);
    TU_LOOP_UNTIL(&f->l, in_flight(f) == 0, WATCHDOG_MS);
    assert_int_equal(entries(f, "", ".rssub-tmp."), 1);
    assert_true(apply_hold(f->a, true));
    assert_int_equal(entries(f, "", ".rssub-tmp."), 0);
    assert_true(apply_hold(f->a, false));
}

/* apply/answer_kept_expires: a kept answer is gone kept_ms (here 200 ms)
 * after it came, though nothing else happens (a quiet mirror shows no
 * temp); its change, coming later, is fetched. One kept when the
 * appliers are freed goes with them. */
static void
test_answer_kept_expires(void **state)
{
    struct fx *f = *state;
    struct tu_route *r = tu_httpd_add(f->srv, "/doc", 0, NULL, "");
    struct apply_stats st;
    rs_time_t dt = rs_time_now();

    f->kept_ms = 200;
    fx_apply(f, 4);
    snprintf(f->watch, sizeof(f->watch), "%s", tu_httpd_url(f->srv, "/doc"));
    serve_and_offer(f, r, "v2\n", "v1\n", dt, 1, APPLY_RETRY);
    assert_int_equal(entries(f, "", ".rssub-tmp."), 1);
    tu_loop_run_for(&f->l, 300);
    assert_int_equal(entries(f, "", ".rssub-tmp."), 0);
    serve_and_offer(f, r, "v2\n", "v2\n", dt + 1000000, 2, APPLY_CREATED);
    assert_int_equal(r->hits, 2);
    apply_stats(f->a, &st);
    assert_int_equal(st.kept_answers, 0);
    assert_int_equal(entries(f, "", ".rssub-tmp."), 0);

    serve_and_offer(f, r, "v4\n", "v3\n", dt + 2000000, 3, APPLY_RETRY);
    TU_LOOP_UNTIL(&f->l, in_flight(f) == 0, WATCHDOG_MS);
    assert_int_equal(entries(f, "", ".rssub-tmp."), 1);
    apply_free(f->a);
    f->a = NULL;
    assert_int_equal(entries(f, "", ".rssub-tmp."), 0);
}

/* apply/retry_newer_at_its_place: a resource whose fetch failed, waiting
 * for its retry, changes again while the queue grows (one slot, every
 * file applied brings two fresh changes): the newer change is taken at
 * the row's place, before the retry was due, not behind the queue. */
static void
test_retry_newer_at_its_place(void **state)
{
    struct fx *f = *state;
    struct tu_route *r = tu_httpd_add(f->srv, "/flaky", 0, NULL, "ok\n");
    rs_time_t due, t0;

    tu_httpd_fail(f->srv, r, 1, 503, NULL);
    fx_apply(f, 1);
    due = first_attempt_fails(f, "/flaky");
    feed_start(f);
    tu_loop_run_for(&f->l, 100);
    t0 = rs_time_now();
    assert_int_equal(offer_dt(f, f->watch, t0), 1);
    TU_LOOP_UNTIL(&f->l, f->nwatch == 2, WATCHDOG_MS);
    f->feed = 0;
    assert_int_equal(f->watch_o[1], APPLY_CREATED);
    if (f->watch_at[1] >= due)
        fail_msg("the newer change waited for the retry (%.2f s)",
                 (double)(f->watch_at[1] - t0) / 1e6);
    assert_true(f->results[APPLY_CREATED] > 5);    /* the stream ran */
}

/* apply/hot_not_starved: a resource that changes again at every file
 * applied, while the queue grows (one slot, and every file applied brings
 * two fresh changes): it is fetched at its turn, its place kept in the
 * queue, again and again. Sent to the back at each change, it waited for
 * its changes to pause (the p99 of the 5,000 changes/s benchmark). */
static void
test_hot_not_starved(void **state)
{
    struct fx *f = *state;
    rs_time_t t0;

    tu_httpd_add(f->srv, "/hot", 0, NULL, "hot\n");
    fx_apply(f, 1);
    feed_start(f);
    snprintf(f->watch, sizeof(f->watch), "%s", tu_httpd_url(f->srv, "/hot"));
    t0 = rs_time_now();
    offer(f, f->watch);
    f->hot = true;
    TU_LOOP_UNTIL(&f->l, f->nwatch == 3, WATCHDOG_MS);
    f->hot = false;
    f->feed = 0;
    if (f->watch_at[2] > t0 + 3000000)
        fail_msg("the hot resource's third fetch came %.1f s after its first "
                 "change", (double)(f->watch_at[2] - t0) / 1e6);
    assert_true(f->results[APPLY_CREATED] > 10);   /* the stream ran */
}

/* apply/same_offer_keeps_backoff: the same change offered again and again
 * (a polling pull reads the same Change List entries at every poll)
 * while its fetch keeps failing: the row keeps its attempts and backoff
 * (tries at 0, 1 and 3 s, the next at 7 s), not one try per offer. */
static void
test_same_offer_keeps_backoff(void **state)
{
    struct fx *f = *state;
    struct tu_route *r = tu_httpd_add(f->srv, "/down", 0, NULL, "never\n");
    struct ledger_todo t;
    rs_time_t dt = rs_time_now(), t0;
    char *buf = NULL;
    int queued = 0;

    tu_httpd_fail(f->srv, r, 1000, 503, NULL);
    fx_apply(f, 0);
    snprintf(f->watch, sizeof(f->watch), "%s", tu_httpd_url(f->srv, "/down"));
    assert_int_equal(offer_dt(f, f->watch, dt), 1);
    TU_LOOP_UNTIL(&f->l, f->nwatch == 1, WATCHDOG_MS);
    t0 = rs_time_now();
    while (rs_time_now() < t0 + 5000000) {
        queued += offer_dt(f, f->watch, dt);
        tu_loop_run_for(&f->l, 100);
    }
    t = todo_of(f, f->watch, &buf);
    if (r->hits != 3)
        fail_msg("%u tries in 5 s, want 3 (at 0, 1 and 3 s)", r->hits);
    assert_int_equal(queued, 0);
    assert_int_equal(t.attempts, 3);
    assert_false(t.failed);
    assert_true(t.not_before > rs_time_now());
    rs_free(buf);
}

/* apply/same_offer_keeps_job: the same change offered again while its
 * fetch is in flight leaves that fetch alone (not canceled, not started
 * again), and a newer change still supersedes it. */
static void
test_same_offer_keeps_job(void **state)
{
    struct fx *f = *state;
    struct tu_route *r = tu_httpd_add(f->srv, "/slow", 0, NULL, "new\n");
    struct apply_stats st;
    rs_time_t dt = rs_time_now();
    int queued = 0;

    r->never = true;
    fx_apply(f, 0);
    snprintf(f->watch, sizeof(f->watch), "%s", tu_httpd_url(f->srv, "/slow"));
    assert_int_equal(offer_dt(f, f->watch, dt), 1);
    TU_LOOP_UNTIL(&f->l, r->hits == 1, WATCHDOG_MS);
    for (int i = 0; i < 5; i++) {
        queued += offer_dt(f, f->watch, dt);
        tu_loop_run_for(&f->l, 50);
    }
    apply_stats(f->a, &st);
    assert_int_equal(st.superseded, 0);
    assert_int_equal(r->hits, 1);
    assert_int_equal(st.in_flight, 1);
    assert_int_equal(queued, 0);
    r->never = false;
    assert_int_equal(offer_dt(f, f->watch, dt + 1), 1);
    TU_LOOP_UNTIL(&f->l, f->nwatch == 1, WATCHDOG_MS);
    assert_int_equal(f->watch_o[0], APPLY_CREATED);
    apply_stats(f->a, &st);
    assert_int_equal(st.superseded, 1);
    assert_int_equal(r->hits, 2);
}

/* apply/hold: apply_hold refuses while a job is in flight; held, no job
 * starts (a row offered waits, not fetched); apply_pause's undoing does
 * not let it go, nor the hold's a pause; let go, the row is taken. */
static void
test_hold(void **state)
{
    struct fx *f = *state;
    struct tu_route *slow = tu_httpd_add(f->srv, "/slow", 0, NULL, "s\n");
    struct tu_route *r = tu_httpd_add(f->srv, "/held", 0, NULL, "held\n");
    char u[256];

    slow->never = true;
    fx_apply(f, 0);
    snprintf(u, sizeof(u), "%s", tu_httpd_url(f->srv, "/slow"));
    offer(f, u);
    TU_LOOP_UNTIL(&f->l, slow->hits == 1, WATCHDOG_MS);
    assert_false(apply_hold(f->a, true));     /* a job in flight */
    slow->never = false;
    apply_free(f->a);                         /* the hung job goes */
    f->a = NULL;
    fx_apply(f, 0);
    apply_kick(f->a);                         /* /slow again, answered */
    TU_LOOP_UNTIL(&f->l, slow->hits == 2 && in_flight(f) == 0, WATCHDOG_MS);
    assert_true(apply_hold(f->a, true));
    snprintf(f->watch, sizeof(f->watch), "%s", tu_httpd_url(f->srv, "/held"));
    offer(f, f->watch);
    apply_pause(f->a, true);
    apply_pause(f->a, false);                 /* the session's, not ours */
    tu_loop_run_for(&f->l, 200);
    assert_int_equal(r->hits, 0);
    assert_int_equal(f->nwatch, 0);
    apply_pause(f->a, true);
    assert_true(apply_hold(f->a, false));
    tu_loop_run_for(&f->l, 200);
    assert_int_equal(r->hits, 0);             /* still paused */
    apply_pause(f->a, false);
    TU_LOOP_UNTIL(&f->l, f->nwatch == 1, WATCHDOG_MS);
    assert_int_equal(f->watch_o[0], APPLY_CREATED);
    assert_int_equal(r->hits, 1);
}

/* Count the failed rows of the ledger. */
static int64_t
failed_rows(struct fx *f)
{
    int64_t due = 0, waiting = 0, failed = 0;
    assert_int_equal(ledger_todo_count(f->ledger, rs_time_now(), &due,
                                       &waiting, &failed), 0);
    return failed;
}

/* Offer a pushed change of uri (a notification's). */
static void
offer_push(struct fx *f, const char *uri)
{
    struct ledger_todo t = {
        .uri = uri,
        .change = LEDGER_CREATE,
        .change_dt = rs_time_now(),
        .lastmod = RS_TIME_NONE,
        .length = -1,
        .origin = "push",
    };
    assert_int_equal(apply_offer(f->a, &t), 1);
    apply_kick(f->a);
}

/* apply/gone_is_not_failed: a notified change of a resource the Source
 * answers 404 for, to the end of its attempts, with no copy in the mirror
 * (a notification delivered after the resource's deletion was applied)
 * ends as unchanged: no failed row, which every start would retry and
 * every audit report. The same from a list (the list names what the Source
 * does not serve) still fails. */
static void
test_gone_is_not_failed(void **state)
{
    struct fx *f = *state;
    tu_httpd_add(f->srv, "/gone", 404, NULL, "no\n");
    tu_httpd_add(f->srv, "/listed", 404, NULL, "no\n");
    f->retries = 2;
    fx_apply(f, 0);
    snprintf(f->watch, sizeof(f->watch), "%s", tu_httpd_url(f->srv, "/listed"));
    offer(f, f->watch);                       /* origin changelist */
    TU_LOOP_UNTIL(&f->l, f->nwatch == 2, WATCHDOG_MS);
    assert_int_equal(f->watch_o[1], APPLY_FAILED);
    assert_int_equal(failed_rows(f), 1);
    f->nwatch = 0;
    snprintf(f->watch, sizeof(f->watch), "%s", tu_httpd_url(f->srv, "/gone"));
    offer_push(f, f->watch);
    TU_LOOP_UNTIL(&f->l, f->nwatch == 2, WATCHDOG_MS);
    assert_int_equal(f->watch_o[0], APPLY_RETRY);
    assert_int_equal(f->watch_o[1], APPLY_UNCHANGED);
    assert_int_equal(f->results[APPLY_FAILED], 1);     /* /listed's */
    assert_int_equal(failed_rows(f), 1);
    char *buf = NULL;
    struct ledger_todo t;
    assert_int_equal(ledger_todo_get(f->ledger, f->watch, &t, &buf),
                     RS_ENOTFOUND);
    rs_free(buf);
}

/* apply/gone_but_mirrored_fails: the same 404s for a resource the mirror
 * holds is a difference the apply cannot settle: the row fails (the
 * deletion, or a reconcile, settles it). */
static void
test_gone_but_mirrored_fails(void **state)
{
    struct fx *f = *state;
    struct tu_route *r = tu_httpd_add(f->srv, "/had", 0, NULL, "v1\n");
    char buf[64];
    f->retries = 2;
    fx_apply(f, 0);
    snprintf(f->watch, sizeof(f->watch), "%s", tu_httpd_url(f->srv, "/had"));
    offer(f, f->watch);
    TU_LOOP_UNTIL(&f->l, f->nwatch == 1, WATCHDOG_MS);
    assert_int_equal(f->watch_o[0], APPLY_CREATED);
    assert_string_equal(mirrored(f, "/had", buf, sizeof(buf)), "v1\n");
    tu_httpd_fail(f->srv, r, 100, 404, NULL);
    offer_push(f, f->watch);
    TU_LOOP_UNTIL(&f->l, f->nwatch == 3, WATCHDOG_MS);
    assert_int_equal(f->watch_o[1], APPLY_RETRY);
    assert_int_equal(f->watch_o[2], APPLY_FAILED);
    assert_int_equal(failed_rows(f), 1);
}

/* apply/free_null: apply_free(NULL) is a no-op. */
static void
test_free_null(void **state)
{
    (void)state;
    apply_free(NULL);
}

#define TS(name, fn) { name, fn, fx_setup, fx_teardown, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TS("apply/retry_due_when_idle", test_retry_due_when_idle),
        TS("apply/hold", test_hold),
        TS("apply/retry_not_starved", test_retry_not_starved_by_fresh_rows),
        TS("apply/refill_reads_free_slots", test_refill_reads_free_slots),
        TS("apply/superseded_taken", test_superseded_taken_under_stream),
        TS("apply/newer_lets_fetch_end", test_newer_lets_fetch_end),
        TS("apply/hot_not_starved", test_hot_not_starved),
        TS("apply/newer_answer_taken", test_newer_answer_taken),
        TS("apply/answer_kept", test_answer_kept),
        TS("apply/answer_kept_expires", test_answer_kept_expires),
        TS("apply/retry_newer_at_its_place", test_retry_newer_at_its_place),
        TS("apply/same_offer_keeps_backoff", test_same_offer_keeps_backoff),
        TS("apply/same_offer_keeps_job", test_same_offer_keeps_job),
        TS("apply/gone_is_not_failed", test_gone_is_not_failed),
        TS("apply/gone_but_mirrored_fails", test_gone_but_mirrored_fails),
        TS("apply/fsync_off_loop", test_fsync_off_loop),
        TS("apply/newer_while_syncing", test_newer_while_syncing),
        TS("apply/fsync_full_off_loop", test_fsync_full_off_loop),
        TS("apply/newer_while_syncing_full", test_newer_while_syncing_full),
        TS("apply/free_while_syncing", test_free_while_syncing),
        TS("apply/fsync_fails_off_loop", test_fsync_fails_off_loop),
        { "apply/free_null", test_free_null, NULL, NULL, NULL },
    };

    return cmocka_run_group_tests_name("sub_apply", tests, NULL, NULL);
}
