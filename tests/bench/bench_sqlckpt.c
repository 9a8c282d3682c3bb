/*
 * bench_sqlckpt.c - how long a writer's commits hold its thread, with
 * SQLite's own checkpoints (a commit that leaves 1000 frames in the WAL
 * checkpoints then and there: copies pages, fsyncs twice) against
 * rs_sqlckpt's thread, in the same run, alternating.
 *
 * The writer is rssub's ledger's pattern: one transaction every --txn-ms,
 * each with --writes upserts of random keys among --rows rows of about
 * 300 bytes (so a transaction dirties pages all over the table), WAL,
 * synchronous=NORMAL. Prints, per mode and round, the commits' p50, p99
 * and max duration (the time the writer's thread, rssub's event loop,
 * waits), the WAL's largest size, and p99/max as a ratio of the two modes.
 *
 * usage: bench_sqlckpt [--dir DIR] [--seconds S] [--rounds N]
 *                      [--txn-ms MS] [--writes N] [--rows N]
 * DIR defaults to /var/tmp: the point is a real disk's fsync.
 */
#define _GNU_SOURCE
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rs_sqlckpt.h"
#include "rs_time.h"

struct figures {
    double p50_us, p99_us, max_us, sum_us;
    long slow;                  /* commits over 10 ms */
    long commits;
    long long wal_max;
};

static double
now_us(void)
{
    return (double)rs_time_mono_us();
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void
die(sqlite3 *db, const char *what)
{
    fprintf(stderr, "bench_sqlckpt: %s: %s\n", what,
            db != NULL ? sqlite3_errmsg(db) : "?");
    exit(1);
}

static void
exec(sqlite3 *db, const char *sql)
{
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
        die(db, sql);
}

static struct figures
run(const char *dir, int threaded, double seconds, int txn_ms, int writes,
    int rows, unsigned seed)
{
    char path[4096], wal[4200];
    sqlite3 *db = NULL;
    sqlite3_stmt *up = NULL;
    struct rs_sqlckpt *ck = NULL;
    struct figures f = { 0 };
    size_t cap = (size_t)(seconds * 1000 / txn_ms) + 16, n = 0;
    double *lat = malloc(cap * sizeof(*lat));
    char val[301];
    struct stat st;

    snprintf(path, sizeof(path), "%s/bench_sqlckpt.%d.db", dir, (int)getpid());
    snprintf(wal, sizeof(wal), "%s-wal", path);
    unlink(path);
    unlink(wal);
    if (lat == NULL || sqlite3_open(path, &db) != SQLITE_OK)
        die(db, "open");
    exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
             "PRAGMA cache_size=-32000; PRAGMA journal_size_limit=67108864;"
             "CREATE TABLE t(k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID;");
    if (sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO t VALUES (?1, ?2)", -1,
                           &up, NULL) != SQLITE_OK)
        die(db, "prepare");
    memset(val, 'v', 300);
    val[300] = '\0';
    srand(seed);
    /* the table first, so every round writes over the same pages */
    exec(db, "BEGIN");
    for (int i = 0; i < rows; i++) {
        char k[64];
        snprintf(k, sizeof(k), "http://source.example/r/%09d", i);
        sqlite3_bind_text(up, 1, k, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(up, 2, val, 300, SQLITE_STATIC);
        if (sqlite3_step(up) != SQLITE_DONE)
            die(db, "fill");
        sqlite3_reset(up);
    }
    exec(db, "COMMIT");
    exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
    if (threaded && rs_sqlckpt_start(db, 0, 1000, &ck) != 0)
        die(db, "rs_sqlckpt_start");

    double end = now_us() + seconds * 1e6, next = now_us();
    while (now_us() < end && n < cap) {
        exec(db, "BEGIN IMMEDIATE");
        for (int i = 0; i < writes; i++) {
            char k[64];
            snprintf(k, sizeof(k), "http://source.example/r/%09d",
                     rand() % rows);
            val[rand() % 300] = (char)('a' + rand() % 26);
            sqlite3_bind_text(up, 1, k, -1, SQLITE_TRANSIENT);
            sqlite3_bind_text(up, 2, val, 300, SQLITE_STATIC);
            if (sqlite3_step(up) != SQLITE_DONE)
                die(db, "upsert");
            sqlite3_reset(up);
        }
        double t0 = now_us();
        exec(db, "COMMIT");
        lat[n++] = now_us() - t0;
        if (stat(wal, &st) == 0 && st.st_size > f.wal_max)
            f.wal_max = st.st_size;
        next += txn_ms * 1000.0;
        double wait = next - now_us();
        if (wait > 0)
            usleep((useconds_t)wait);
    }
    rs_sqlckpt_stop(ck);
    sqlite3_finalize(up);
    sqlite3_close(db);
    unlink(path);
    unlink(wal);
    qsort(lat, n, sizeof(*lat), cmp_double);
    f.commits = (long)n;
    for (size_t i = 0; i < n; i++) {
        f.sum_us += lat[i];
        f.slow += lat[i] > 10000;
    }
    if (n > 0) {
        f.p50_us = lat[n / 2];
        f.p99_us = lat[n * 99 / 100];
        f.max_us = lat[n - 1];
    }
    free(lat);
    return f;
}

/* argv's value of option opt, a number within [lo, hi]; exits if not. */
static double
num(const char *opt, const char *s, double lo, double hi)
{
    char *end = NULL;
    double v = strtod(s, &end);

    if (end == s || *end != '\0' || !(v >= lo && v <= hi)) {
        fprintf(stderr, "bench_sqlckpt: %s: %s is not a number from %g to "
                "%g\n", opt, s, lo, hi);
        exit(2);
    }
    return v;
}

int
main(int argc, char **argv)
{
    const char *dir = "/var/tmp";
    double seconds = 10;
    int rounds = 2, txn_ms = 20, writes = 300, rows = 40000;

    if (argc % 2 != 1) {
        fprintf(stderr, "bench_sqlckpt: %s needs a value\n", argv[argc - 1]);
        return 2;
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--dir") == 0)
            dir = argv[i + 1];
        else if (strcmp(argv[i], "--seconds") == 0)
            seconds = num(argv[i], argv[i + 1], 0.1, 3600);
        else if (strcmp(argv[i], "--rounds") == 0)
            rounds = (int)num(argv[i], argv[i + 1], 1, 100);
        else if (strcmp(argv[i], "--txn-ms") == 0)
            txn_ms = (int)num(argv[i], argv[i + 1], 1, 10000);
        else if (strcmp(argv[i], "--writes") == 0)
            writes = (int)num(argv[i], argv[i + 1], 1, 1000000);
        else if (strcmp(argv[i], "--rows") == 0)
            rows = (int)num(argv[i], argv[i + 1], 1, 100000000);
        else {
            fprintf(stderr, "bench_sqlckpt: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    printf("commits of %d upserts every %d ms over %d rows, %.0f s a run, "
           "in %s\n\n", writes, txn_ms, rows, seconds, dir);
    printf("| round | checkpoints by | commits | commit p50 ms | p99 ms | "
           "max ms | commits over 10 ms | writer's thread in commits, s | "
           "WAL max MB |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int r = 1; r <= rounds; r++) {
        struct figures fig[2];
        for (int m = 0; m < 2; m++) {
            fig[m] = run(dir, m, seconds, txn_ms, writes, rows, (unsigned)r);
            printf("| %d | %s | %ld | %.2f | %.2f | %.2f | %ld | %.2f | %.1f "
                   "|\n", r, m ? "rs_sqlckpt's thread" : "the commits (SQLite)",
                   fig[m].commits, fig[m].p50_us / 1e3, fig[m].p99_us / 1e3,
                   fig[m].max_us / 1e3, fig[m].slow, fig[m].sum_us / 1e6,
                   (double)fig[m].wal_max / 1e6);
        }
        printf("| %d | ratio thread/SQLite | | | %.2f | %.2f | | %.2f | |\n",
               r, fig[1].p99_us / (fig[0].p99_us > 0 ? fig[0].p99_us : 1),
               fig[1].max_us / (fig[0].max_us > 0 ? fig[0].max_us : 1),
               fig[1].sum_us / (fig[0].sum_us > 0 ? fig[0].sum_us : 1));
    }
    return 0;
}
