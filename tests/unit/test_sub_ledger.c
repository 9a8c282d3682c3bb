/* test_sub_ledger.c - rssub's durable state (subscriber/ledger.c) on real
 * SQLite files in a temp dir: schema and its version, one writer, corrupt
 * files, nested transactions, meta/positions/resources/todo round trips,
 * superseded todo rows, retry order, failed rows, paging 100,000 rows in
 * bounded memory, walks that write, kill -9 in mid-transaction and mid-run,
 * a full disk at commit and in mid-batch, allocation failures, and the
 * write rate. */
#include "testutil.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ledger.h"
#include "rs_alloc.h"
#include "rs_sqlckpt.h"

struct fx {
    char *dir;
    char db[4200];
    struct ledger *l;
};

static struct ledger *
must_open(const char *path, unsigned flags)
{
    char err[512];
    struct ledger *l = ledger_open(path, flags, err, sizeof(err));
    if (l == NULL)
        fail_msg("ledger_open %s: %s", path, err);
    return l;
}

static int
fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    f->dir = tu_mkdtemp();
    snprintf(f->db, sizeof(f->db), "%s/state.db", f->dir);
    f->l = must_open(f->db, 0);
    *state = f;
    return 0;
}

static int
fx_teardown(void **state)
{
    struct fx *f = *state;
    ledger_close(f->l);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* ------------------------------------------------------------ helpers */

static void
raw_exec(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    char *msg = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
        fail_msg("%s: %s", sql, msg);
    sqlite3_close(db);
}

static int64_t
raw_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    int64_t v = -1;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
    if (sqlite3_step(s) == SQLITE_ROW)
        v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(db);
    return v;
}

static void
write_file(const char *path, const void *p, size_t n)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(p, 1, n, fp), n);
    fclose(fp);
}

static void
put_todo(struct ledger *l, const char *uri, enum ledger_change c,
         rs_time_t not_before, int64_t *seq)
{
    struct ledger_todo t = { .uri = uri, .change = c,
                             .change_dt = 1000, .lastmod = RS_TIME_NONE,
                             .length = -1, .origin = "push",
                             .not_before = not_before };
    assert_int_equal(ledger_todo_put(l, &t, seq), 0);
}

static int64_t
todo_seq(struct ledger *l, const char *uri)
{
    struct ledger_todo t;
    char *buf = NULL;
    assert_int_equal(ledger_todo_get(l, uri, &t, &buf), 0);
    int64_t seq = t.seq;
    rs_free(buf);
    return seq;
}

/* Collects the uris a walk offers; stops with stop_rc at row stop_at. */
struct seen {
    char uri[64][128];
    int attempts[64];
    int n;
    int stop_at;               /* -1: never */
    int stop_rc;
};

static int
on_seen(void *ud, const struct ledger_todo *t)
{
    struct seen *s = ud;
    if (s->n == s->stop_at)
        return s->stop_rc;
    assert_true(s->n < 64);
    snprintf(s->uri[s->n], sizeof(s->uri[0]), "%s", t->uri);
    s->attempts[s->n] = t->attempts;
    s->n++;
    return 0;
}

static void
seen_reset(struct seen *s)
{
    memset(s, 0, sizeof(*s));
    s->stop_at = -1;
}

/* Counting allocator: the peak number of live rs_malloc blocks. Process
 * wide by nature (rs_alloc_set has no user data). Installed only around a
 * walk that frees, before returning, everything it allocates. */
static long cnt_live, cnt_peak;

static void *
cnt_malloc(size_t n)
{
    void *p = malloc(n);
    if (p != NULL && ++cnt_live > cnt_peak)
        cnt_peak = cnt_live;
    return p;
}

static void *
cnt_realloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (q != NULL && p == NULL && ++cnt_live > cnt_peak)
        cnt_peak = cnt_live;
    return q;
}

static void
cnt_free(void *p)
{
    if (p != NULL)
        cnt_live--;
    free(p);
}

static void
cnt_install(void)
{
    static const struct rs_allocator a = { cnt_malloc, cnt_realloc, cnt_free };
    cnt_live = cnt_peak = 0;
    rs_alloc_set(&a);
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* -------------------------------------------------------------- tests */

/* ledger/create_reopen: a new file gets the schema (user_version,
 * application_id, WAL) and the writer's pid in the lock file; what was
 * committed is there after a reopen; ledger_close(NULL) is a no-op. */
static void
test_create_reopen(void **state)
{
    struct fx *f = *state;
    char lock[4300], want[32];
    size_t n;

    snprintf(lock, sizeof(lock), "%s.lock", f->db);
    char *pid = tu_read_file(lock, &n);
    assert_non_null(pid);
    snprintf(want, sizeof(want), "%ld\n", (long)getpid());
    assert_string_equal(pid, want);
    free(pid);

    assert_int_equal(ledger_meta_set(f->l, "source", "http://s.example/"), 0);
    put_todo(f->l, "http://s.example/a", LEDGER_CREATE, 0, NULL);
    ledger_close(f->l);
    f->l = NULL;
    ledger_close(NULL);

    assert_int_equal(raw_int(f->db, "PRAGMA user_version"), LEDGER_SCHEMA);
    assert_int_equal(raw_int(f->db, "PRAGMA application_id"), 0x72537562);
    assert_int_equal(raw_int(f->db, "SELECT count(*) FROM sqlite_master "
                             "WHERE name = 'todo_due'"), 1);

    f->l = must_open(f->db, 0);
    char *v = NULL;
    assert_int_equal(ledger_meta_get(f->l, "source", &v), 0);
    assert_string_equal(v, "http://s.example/");
    rs_free(v);
    int64_t due = -1;
    assert_int_equal(ledger_todo_count(f->l, 1, &due, NULL, NULL), 0);
    assert_int_equal(due, 1);
    assert_string_equal(ledger_errstr(f->l), "");
}

/* ledger/refuses_foreign_and_newer: a newer schema version, another
 * program's SQLite file and one with a foreign application_id are refused
 * with a message that says so, by writers and readers, and left as they
 * were. */
static void
test_refuses_foreign_and_newer(void **state)
{
    struct fx *f = *state;
    char err[512], other[4300];

    ledger_close(f->l);
    f->l = NULL;
    raw_exec(f->db, "PRAGMA user_version = 3");
    assert_null(ledger_open(f->db, 0, err, sizeof(err)));
    assert_non_null(strstr(err, "newer"));
    assert_non_null(strstr(err, "version 3"));
    assert_null(ledger_open(f->db, LEDGER_READONLY, err, sizeof(err)));
    assert_non_null(strstr(err, "newer"));
    assert_int_equal(raw_int(f->db, "PRAGMA user_version"), 3);

    snprintf(other, sizeof(other), "%s/other.db", f->dir);
    raw_exec(other, "CREATE TABLE t(x); INSERT INTO t VALUES (1);");
    assert_null(ledger_open(other, 0, err, sizeof(err)));
    assert_non_null(strstr(err, "not an rssub state"));
    assert_int_equal(raw_int(other, "SELECT count(*) FROM t"), 1);

    snprintf(other, sizeof(other), "%s/app.db", f->dir);
    raw_exec(other, "PRAGMA application_id = 1234; PRAGMA user_version = 1");
    assert_null(ledger_open(other, 0, err, sizeof(err)));
    assert_non_null(strstr(err, "not an rssub state"));
}

/* ledger/one_writer: a second writer is refused, in this process (flock
 * is per open file description) and from a forked child, naming the
 * holder's pid, whatever the path's spelling (a symlink, a dot-dot); a
 * reader opens beside the writer and, inside a read
 * transaction, keeps its snapshot while the writer commits; readers
 * cannot write; after close the state opens again. */
static void
test_one_writer(void **state)
{
    struct fx *f = *state;
    char err[512], want[64];
    int st;

    snprintf(want, sizeof(want), "pid %ld", (long)getpid());
    assert_null(ledger_open(f->db, 0, err, sizeof(err)));
    assert_non_null(strstr(err, "in use by another rssub"));
    assert_non_null(strstr(err, want));
    /* the same state by other spellings: a symlink, a dot-dot path */
    char link[4200], dots[4200];
    snprintf(link, sizeof(link), "%s/link.db", f->dir);
    snprintf(dots, sizeof(dots), "%s/../%s/state.db", f->dir,
             strrchr(f->dir, '/') + 1);
    assert_int_equal(symlink(f->db, link), 0);
    assert_null(ledger_open(link, 0, err, sizeof(err)));
    assert_non_null(strstr(err, "in use by another rssub"));
    assert_null(ledger_open(dots, 0, err, sizeof(err)));
    assert_non_null(strstr(err, "in use by another rssub"));
    assert_int_equal(ledger_writer_pid(link), 0);   /* our own pid */

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char e[512];
        struct ledger *l = ledger_open(f->db, 0, e, sizeof(e));
        _exit(l == NULL && strstr(e, want) != NULL ? 0 : 1);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);

    put_todo(f->l, "http://s.example/1", LEDGER_CREATE, 0, NULL);
    struct ledger *r = must_open(f->db, LEDGER_READONLY);
    int64_t due = -1;
    assert_int_equal(ledger_begin(r), 0);
    assert_int_equal(ledger_todo_count(r, 1, &due, NULL, NULL), 0);
    assert_int_equal(due, 1);
    put_todo(f->l, "http://s.example/2", LEDGER_CREATE, 0, NULL);
    assert_int_equal(ledger_todo_count(r, 1, &due, NULL, NULL), 0);
    assert_int_equal(due, 1);             /* its snapshot */
    assert_int_equal(ledger_commit(r), 0);
    assert_int_equal(ledger_todo_count(r, 1, &due, NULL, NULL), 0);
    assert_int_equal(due, 2);

    assert_int_equal(ledger_meta_set(r, "k", "v"), RS_ESTATE);
    assert_non_null(strstr(ledger_errstr(r), "read-only"));
    put_todo(f->l, "http://s.example/3", LEDGER_CREATE, 0, NULL);
    struct ledger_todo t = { .uri = "http://s.example/4",
                             .change = LEDGER_CREATE };
    assert_int_equal(ledger_todo_put(r, &t, NULL), RS_ESTATE);
    assert_int_equal(ledger_todo_done(r, "http://s.example/1", 1), RS_ESTATE);
    int64_t g;
    assert_int_equal(ledger_gen_next(r, &g), RS_ESTATE);
    ledger_close(r);

    ledger_close(f->l);
    f->l = must_open(f->db, 0);
}

/* ledger/readonly_missing: a reader never creates a state (a missing file
 * is refused and stays missing); bad paths are refused with a message; an
 * empty file becomes a state. */
static void
test_readonly_missing(void **state)
{
    struct fx *f = *state;
    char err[512], path[4300];
    struct stat sb;

    snprintf(path, sizeof(path), "%s/none.db", f->dir);
    assert_null(ledger_open(path, LEDGER_READONLY, err, sizeof(err)));
    assert_non_null(strstr(err, "no rssub state"));
    assert_int_equal(stat(path, &sb), -1);
    assert_null(ledger_open(NULL, 0, err, sizeof(err)));
    assert_string_equal(err, "no state path given");
    assert_null(ledger_open("", 0, NULL, 0));
    snprintf(path, sizeof(path), "%s/no/such/dir/state.db", f->dir);
    assert_null(ledger_open(path, 0, err, sizeof(err)));
    assert_non_null(strstr(err, "no/such/dir"));
    /* an empty file (touch state.db) becomes a state */
    snprintf(path, sizeof(path), "%s/empty.db", f->dir);
    write_file(path, "", 0);
    struct ledger *l = must_open(path, 0);
    ledger_close(l);
    assert_int_equal(raw_int(path, "PRAGMA user_version"), LEDGER_SCHEMA);
}

/* ledger/corrupt_file: garbage bytes are refused at open with a clear
 * message; a state whose table pages were overwritten opens (only page 1
 * is checked) but every query fails cleanly with RS_EINVAL, no crash. */
static void
test_corrupt_file(void **state)
{
    struct fx *f = *state;
    char err[512];
    unsigned char junk[65536];
    uint32_t x = 12345;

    for (size_t i = 0; i < sizeof(junk); i++) {
        x = x * 1103515245u + 12345u;
        junk[i] = (unsigned char)(x >> 16);
    }
    for (int i = 0; i < 300; i++) {
        char uri[64];
        snprintf(uri, sizeof(uri), "http://s.example/r%d", i);
        put_todo(f->l, uri, LEDGER_CREATE, 0, NULL);
        struct ledger_res r = { .uri = uri, .path = uri + 17, .length = i,
                                .lastmod = RS_TIME_NONE,
                                .change_dt = RS_TIME_NONE };
        assert_int_equal(ledger_res_put(f->l, &r), 0);
    }
    ledger_close(f->l);      /* the last connection folds the WAL in */
    f->l = NULL;

    char path[4300];
    snprintf(path, sizeof(path), "%s/junk.db", f->dir);
    write_file(path, junk, sizeof(junk));
    assert_null(ledger_open(path, 0, err, sizeof(err)));
    assert_non_null(strstr(err, "not an rssub state database"));
    assert_non_null(strstr(err, "not a database"));
    assert_null(ledger_open(path, LEDGER_READONLY, err, sizeof(err)));
    assert_non_null(strstr(err, "not a database"));

    /* keep page 1 (header and schema), overwrite the rest */
    size_t n;
    char *img = tu_read_file(f->db, &n);
    assert_non_null(img);
    assert_true(n > 8192);
    for (size_t i = 4096; i < n; i++)
        img[i] = (char)junk[i % sizeof(junk)];
    write_file(f->db, img, n);
    free(img);
    f->l = must_open(f->db, 0);
    struct ledger_res r;
    char *buf = NULL;
    assert_int_equal(ledger_res_get(f->l, "http://s.example/r1", &r, &buf),
                     RS_EINVAL);
    assert_null(buf);
    assert_non_null(strstr(ledger_errstr(f->l), "malformed"));
    struct ledger_cursor cur = { 0, 0 };
    struct seen s;
    seen_reset(&s);
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_NOW, 1, &cur, 10,
                                      on_seen, &s),
                     RS_EINVAL);
    int64_t live;
    assert_int_equal(ledger_res_count(f->l, &live, NULL), RS_EINVAL);
    struct ledger_todo t = { .uri = "http://s.example/new",
                             .change = LEDGER_CREATE };
    assert_int_equal(ledger_todo_put(f->l, &t, NULL), RS_EINVAL);
}

/* ledger/transactions_nest: inner levels are savepoints (an inner
 * rollback undoes only its level), the outermost commit writes, an
 * outermost rollback drops everything, commit/rollback without begin are
 * RS_ESTATE, and close rolls back what is open. */
static void
test_transactions(void **state)
{
    struct fx *f = *state;
    char *v = NULL;

    assert_int_equal(ledger_commit(f->l), RS_ESTATE);
    assert_int_equal(ledger_rollback(f->l), RS_ESTATE);

    assert_int_equal(ledger_begin(f->l), 0);
    assert_int_equal(ledger_meta_set(f->l, "a", "1"), 0);
    assert_int_equal(ledger_begin(f->l), 0);
    assert_int_equal(ledger_meta_set(f->l, "b", "2"), 0);
    assert_int_equal(ledger_rollback(f->l), 0);        /* b only */
    assert_int_equal(ledger_begin(f->l), 0);
    assert_int_equal(ledger_meta_set(f->l, "c", "3"), 0);
    assert_int_equal(ledger_begin(f->l), 0);
    assert_int_equal(ledger_meta_set(f->l, "d", "4"), 0);
    assert_int_equal(ledger_commit(f->l), 0);
    assert_int_equal(ledger_commit(f->l), 0);
    assert_int_equal(ledger_commit(f->l), 0);
    assert_int_equal(ledger_meta_get(f->l, "a", &v), 0);
    rs_free(v);
    assert_int_equal(ledger_meta_get(f->l, "b", &v), RS_ENOTFOUND);
    assert_null(v);
    assert_int_equal(ledger_meta_get(f->l, "c", &v), 0);
    rs_free(v);
    assert_int_equal(ledger_meta_get(f->l, "d", &v), 0);
    rs_free(v);

    assert_int_equal(ledger_begin(f->l), 0);
    assert_int_equal(ledger_meta_set(f->l, "e", "5"), 0);
    assert_int_equal(ledger_begin(f->l), 0);
    assert_int_equal(ledger_meta_set(f->l, "f", "6"), 0);
    assert_int_equal(ledger_commit(f->l), 0);
    assert_int_equal(ledger_rollback(f->l), 0);        /* e and f */
    assert_int_equal(ledger_meta_get(f->l, "e", &v), RS_ENOTFOUND);
    assert_int_equal(ledger_meta_get(f->l, "f", &v), RS_ENOTFOUND);
    assert_int_equal(ledger_commit(f->l), RS_ESTATE);

    assert_int_equal(ledger_begin(f->l), 0);
    assert_int_equal(ledger_meta_set(f->l, "g", "7"), 0);
    ledger_close(f->l);
    f->l = must_open(f->db, 0);
    assert_int_equal(ledger_meta_get(f->l, "g", &v), RS_ENOTFOUND);
    assert_int_equal(ledger_meta_get(f->l, "a", &v), 0);
    rs_free(v);
}

/* ledger/meta_and_gen: values round-trip (also hostile text, bound not
 * spliced), NULL deletes, caps are errors; generations count up across a
 * reopen and roll back with their transaction. */
static void
test_meta_and_gen(void **state)
{
    struct fx *f = *state;
    const char *evil = "x'); DROP TABLE todo; --\n\"\xc3\xa9\t";
    char *v = NULL;
    int64_t g = 0;

    assert_int_equal(ledger_meta_get(f->l, "source", &v), RS_ENOTFOUND);
    assert_int_equal(ledger_meta_set(f->l, "source", evil), 0);
    assert_int_equal(ledger_meta_get(f->l, "source", &v), 0);
    assert_string_equal(v, evil);
    rs_free(v);
    assert_int_equal(ledger_meta_set(f->l, "source", "2"), 0);
    assert_int_equal(ledger_meta_get(f->l, "source", &v), 0);
    assert_string_equal(v, "2");
    rs_free(v);
    assert_int_equal(ledger_meta_set(f->l, "source", NULL), 0);
    assert_int_equal(ledger_meta_get(f->l, "source", &v), RS_ENOTFOUND);
    assert_int_equal(ledger_meta_set(f->l, "", "x"), RS_EINVAL);
    assert_int_equal(ledger_meta_set(f->l, NULL, "x"), RS_EINVAL);
    assert_int_equal(ledger_meta_get(f->l, NULL, &v), RS_EINVAL);
    char *big = malloc(LEDGER_META_MAX + 2);
    memset(big, 'x', LEDGER_META_MAX + 1);
    big[LEDGER_META_MAX + 1] = '\0';
    assert_int_equal(ledger_meta_set(f->l, "big", big), RS_ETOOBIG);
    big[LEDGER_META_MAX] = '\0';
    assert_int_equal(ledger_meta_set(f->l, "big", big), 0);
    assert_int_equal(ledger_meta_get(f->l, "big", &v), 0);
    assert_int_equal(strlen(v), LEDGER_META_MAX);
    rs_free(v);
    free(big);

    assert_int_equal(ledger_gen_next(f->l, &g), 0);
    assert_int_equal(g, 1);
    assert_int_equal(ledger_gen_next(f->l, &g), 0);
    assert_int_equal(g, 2);
    assert_int_equal(ledger_begin(f->l), 0);
    assert_int_equal(ledger_gen_next(f->l, &g), 0);
    assert_int_equal(g, 3);
    assert_int_equal(ledger_rollback(f->l), 0);
    ledger_close(f->l);
    f->l = must_open(f->db, 0);
    assert_int_equal(ledger_gen_next(f->l, &g), 0);
    assert_int_equal(g, 3);
    assert_int_equal(ledger_meta_get(f->l, "gen", &v), 0);
    assert_string_equal(v, "3");
    rs_free(v);
}

struct pos_list {
    char ch[8][64];
    int n;
};

static int
on_pos(void *ud, const struct ledger_pos *p)
{
    struct pos_list *pl = ud;
    assert_true(pl->n < 8);
    assert_true(p->updated_at > 0);
    snprintf(pl->ch[pl->n++], sizeof(pl->ch[0]), "%s=%s", p->channel,
             p->id != NULL ? p->id : "(null)");
    return 0;
}

/* ledger/positions: per channel id (NULL allowed) and datetime
 * (RS_TIME_NONE allowed) round-trip and are replaced; unknown channels
 * are RS_ENOTFOUND; listing is in channel order. */
static void
test_positions(void **state)
{
    struct fx *f = *state;
    char untouched[] = "untouched";
    char *id = untouched;
    rs_time_t dt = 0;

    assert_int_equal(ledger_pos_get(f->l, "pull", &id, &dt), RS_ENOTFOUND);
    assert_null(id);
    assert_int_equal(ledger_pos_set(f->l, "ws://h/channel/a",
                                    "1700000000000-0", 1234567), 0);
    assert_int_equal(ledger_pos_set(f->l, "pull", NULL, RS_TIME_NONE), 0);
    assert_int_equal(ledger_pos_get(f->l, "ws://h/channel/a", &id, &dt), 0);
    assert_string_equal(id, "1700000000000-0");
    assert_int_equal(dt, 1234567);
    rs_free(id);
    assert_int_equal(ledger_pos_get(f->l, "pull", &id, &dt), 0);
    assert_null(id);
    assert_true(dt == RS_TIME_NONE);
    assert_int_equal(ledger_pos_get(f->l, "pull", NULL, NULL), 0);
    assert_int_equal(ledger_pos_set(f->l, "ws://h/channel/a",
                                    "1700000000001-3", 2000000), 0);
    assert_int_equal(ledger_pos_get(f->l, "ws://h/channel/a", &id, &dt), 0);
    assert_string_equal(id, "1700000000001-3");
    rs_free(id);
    assert_int_equal(ledger_pos_set(f->l, "", "x", 1), RS_EINVAL);
    assert_int_equal(ledger_pos_set(f->l, NULL, "x", 1), RS_EINVAL);

    struct pos_list pl = { .n = 0 };
    assert_int_equal(ledger_pos_each(f->l, on_pos, &pl), 0);
    assert_int_equal(pl.n, 2);
    assert_string_equal(pl.ch[0], "pull=(null)");
    assert_string_equal(pl.ch[1], "ws://h/channel/a=1700000000001-3");
}

/* ledger/clear_future: times past the limit become unknown in res, todo
 * and pos; then every "#source" position loses its time too (the next
 * pull reconciles); times up to the limit stay; done once per state, and
 * a state without any is marked done all the same. */
static void
test_clear_future(void **state)
{
    struct fx *f = *state;
    struct ledger_res r = { .uri = "u1", .path = "u1", .lastmod = 1,
                            .change_dt = 9000, .length = 1 };
    struct ledger_res ok = { .uri = "u2", .path = "u2", .lastmod = 1,
                             .change_dt = 5000, .length = 1 };
    struct ledger_res o;
    struct ledger_todo t;
    char *buf = NULL;
    rs_time_t dt = 0;
    int64_t n = -1;

    /* nothing in the future: marked done, nothing cleared */
    assert_int_equal(ledger_clear_future(f->l, 5000, "#source", &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(raw_int(f->db, "SELECT count(*) FROM meta "
                             "WHERE key = 'future_checked'"), 1);

    assert_int_equal(ledger_res_put(f->l, &r), 0);
    assert_int_equal(ledger_res_put(f->l, &ok), 0);
    put_todo(f->l, "t1", LEDGER_UPDATE, 0, NULL);      /* change_dt 1000 */
    raw_exec(f->db, "UPDATE todo SET change_dt = 7000 WHERE uri = 't1'");
    assert_int_equal(ledger_pos_set(f->l, "http://s/cl.xml#source", NULL,
                                    4000), 0);
    assert_int_equal(ledger_pos_set(f->l, "ws://h/c", "1-0", 6000), 0);
    assert_int_equal(ledger_pos_set(f->l, "other", NULL, 4000), 0);

    /* done once: the mark stops a second scan */
    assert_int_equal(ledger_clear_future(f->l, 5000, "#source", &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(ledger_res_get(f->l, "u1", &o, &buf), 0);
    assert_int_equal(o.change_dt, 9000);
    rs_free(buf);

    raw_exec(f->db, "DELETE FROM meta WHERE key = 'future_checked'");
    assert_int_equal(ledger_clear_future(f->l, 5000, "#source", &n), 0);
    assert_int_equal(n, 3);               /* u1, t1, ws://h/c */
    assert_int_equal(ledger_res_get(f->l, "u1", &o, &buf), 0);
    assert_true(o.change_dt == RS_TIME_NONE);
    rs_free(buf);
    assert_int_equal(ledger_res_get(f->l, "u2", &o, &buf), 0);
    assert_int_equal(o.change_dt, 5000);  /* at the limit: kept */
    rs_free(buf);
    assert_int_equal(ledger_todo_get(f->l, "t1", &t, &buf), 0);
    assert_true(t.change_dt == RS_TIME_NONE);
    rs_free(buf);
    assert_int_equal(ledger_pos_get(f->l, "ws://h/c", NULL, &dt), 0);
    assert_true(dt == RS_TIME_NONE);
    assert_int_equal(ledger_pos_get(f->l, "http://s/cl.xml#source", NULL,
                                    &dt), 0);
    assert_true(dt == RS_TIME_NONE);      /* in the past, cleared: reconcile */
    assert_int_equal(ledger_pos_get(f->l, "other", NULL, &dt), 0);
    assert_int_equal(dt, 4000);
}

struct res_walk {
    int n, deleted;
};

static int
on_res_count(void *ud, const struct ledger_res *r)
{
    struct res_walk *w = ud;
    w->n++;
    w->deleted += r->deleted;
    return 0;
}

static int
on_res_stop(void *ud, const struct ledger_res *r)
{
    (void)r;
    return ++*(int *)ud == 3 ? 42 : 0;
}

/* ledger/resources_and_tombstones: every field round-trips (NULLs
 * included), a put replaces, a tombstone keeps its change datetime, counts
 * and walks tell live rows from tombstones, mark needs a row, a walk
 * stops with the callback's value. */
static void
test_resources(void **state)
{
    struct fx *f = *state;
    struct ledger_res r = {
        .uri = "http://s.example/a b?c=\"d\"", .path = "a b",
        .lastmod = 1000, .change_dt = 2000, .length = 42,
        .hash = "md5:00112233445566778899aabbccddeeff",
        .etag = "\"abc\"", .last_modified = "Tue, 01 Jan 2030 00:00:00 GMT",
        .deleted = false, .gen = 7,
    };
    struct ledger_res o;
    char *buf = NULL;

    assert_int_equal(ledger_res_get(f->l, r.uri, &o, &buf), RS_ENOTFOUND);
    assert_null(buf);
    assert_int_equal(ledger_res_put(f->l, &r), 0);
    assert_int_equal(ledger_res_get(f->l, r.uri, &o, &buf), 0);
    assert_string_equal(o.uri, r.uri);
    assert_string_equal(o.path, "a b");
    assert_int_equal(o.lastmod, 1000);
    assert_int_equal(o.change_dt, 2000);
    assert_int_equal(o.length, 42);
    assert_string_equal(o.hash, r.hash);
    assert_string_equal(o.etag, "\"abc\"");
    assert_string_equal(o.last_modified, r.last_modified);
    assert_false(o.deleted);
    assert_int_equal(o.gen, 7);
    rs_free(buf);

    struct ledger_res tomb = { .uri = r.uri, .path = NULL,
                               .lastmod = RS_TIME_NONE, .change_dt = 3000,
                               .length = -5, .deleted = true };
    assert_int_equal(ledger_res_put(f->l, &tomb), 0);
    assert_int_equal(ledger_res_get(f->l, r.uri, &o, &buf), 0);
    assert_true(o.deleted);
    assert_null(o.path);
    assert_null(o.hash);
    assert_null(o.etag);
    assert_null(o.last_modified);
    assert_true(o.lastmod == RS_TIME_NONE);
    assert_int_equal(o.change_dt, 3000);
    assert_int_equal(o.length, -1);
    assert_int_equal(o.gen, 0);
    rs_free(buf);

    for (int i = 0; i < 5; i++) {
        char uri[64];
        snprintf(uri, sizeof(uri), "http://s.example/live%d", i);
        struct ledger_res lr = { .uri = uri, .path = uri + 17, .length = i,
                                 .lastmod = RS_TIME_NONE,
                                 .change_dt = RS_TIME_NONE };
        assert_int_equal(ledger_res_put(f->l, &lr), 0);
    }
    int64_t live = -1, tombs = -1;
    assert_int_equal(ledger_res_count(f->l, &live, &tombs), 0);
    assert_int_equal(live, 5);
    assert_int_equal(tombs, 1);
    struct res_walk w = { 0, 0 };
    assert_int_equal(ledger_res_each(f->l, false, -1, on_res_count, &w), 0);
    assert_int_equal(w.n, 5);
    assert_int_equal(w.deleted, 0);
    w = (struct res_walk){ 0, 0 };
    assert_int_equal(ledger_res_each(f->l, true, -1, on_res_count, &w), 0);
    assert_int_equal(w.n, 6);
    assert_int_equal(w.deleted, 1);
    int calls = 0;
    assert_int_equal(ledger_res_each(f->l, true, -1, on_res_stop, &calls), 42);
    assert_int_equal(calls, 3);

    assert_int_equal(ledger_res_mark(f->l, "http://s.example/live1", 9), 0);
    assert_int_equal(ledger_res_mark(f->l, "http://s.example/none", 9),
                     RS_ENOTFOUND);
    assert_int_equal(ledger_res_get(f->l, "http://s.example/live1", &o, &buf),
                     0);
    assert_int_equal(o.gen, 9);
    rs_free(buf);
}

/* The reconcile walk: every unseen row becomes a tombstone and a delete
 * todo, a new (seen) row is added ahead of the walk, and the batch is
 * committed every 500 rows - all from inside the callback. */
struct unseen {
    struct ledger *l;
    int64_t gen;
    int visits[3000];
    int n;
};

static int
on_unseen(void *ud, const struct ledger_res *r)
{
    struct unseen *u = ud;
    int i = -1;
    assert_int_equal(sscanf(r->uri, "http://s.example/%d", &i), 1);
    assert_true(i >= 0 && i < 3000);
    u->visits[i]++;
    assert_false(r->deleted);
    assert_true(r->gen < u->gen);
    struct ledger_res tomb = *r;
    tomb.deleted = true;
    tomb.change_dt = 5000;
    assert_int_equal(ledger_res_put(u->l, &tomb), 0);
    put_todo(u->l, r->uri, LEDGER_DELETE, 0, NULL);
    char nu[64];
    snprintf(nu, sizeof(nu), "http://t.example/new%d", i);
    struct ledger_res fresh = { .uri = nu, .path = nu + 17, .length = 1,
                                .lastmod = RS_TIME_NONE,
                                .change_dt = RS_TIME_NONE, .gen = u->gen };
    assert_int_equal(ledger_res_put(u->l, &fresh), 0);
    if (++u->n % 500 == 0) {
        assert_int_equal(ledger_commit(u->l), 0);
        assert_int_equal(ledger_begin(u->l), 0);
    }
    return 0;
}

/* ledger/res_put_many: rows written LEDGER_RES_BATCH to a statement and
 * the rest one by one (0, 1, a batch less one, a batch, two and a half):
 * each as ledger_res_put writes it, a later row of one uri replacing an
 * earlier one in the same call; a row ledger_res_put refuses (here a uri
 * over the limit, in the last batch) makes the call refuse and write none
 * of them. */
static void
test_res_put_many(void **state)
{
    struct fx *f = *state;
    const size_t counts[] = { 0, 1, LEDGER_RES_BATCH - 1, LEDGER_RES_BATCH,
                              LEDGER_RES_BATCH * 5 / 2 };
    enum { MAX = LEDGER_RES_BATCH * 5 / 2 };
    static struct ledger_res rows[MAX];
    static char uris[MAX][64], paths[MAX][32];
    int64_t live = 0, tomb = 0;

    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        size_t n = counts[c];
        for (size_t i = 0; i < n; i++) {
            snprintf(uris[i], sizeof(uris[i]), "http://s.example/%zu/%zu", c,
                     i);
            snprintf(paths[i], sizeof(paths[i]), "%zu/%zu", c, i);
            rows[i] = (struct ledger_res){
                .uri = uris[i], .path = paths[i], .lastmod = (rs_time_t)i,
                .change_dt = 2000, .length = (int64_t)i,
                .hash = i % 2 ? "md5:00112233445566778899aabbccddeeff" : NULL,
                .etag = i % 3 ? NULL : "\"e\"", .deleted = i % 7 == 6,
                .gen = (int64_t)c,
            };
        }
        if (n > 2)                    /* the last row replaces the first */
            rows[n - 1].uri = uris[0];
        assert_int_equal(ledger_res_put_many(f->l, rows, n), 0);
        for (size_t i = 0; i < n; i++) {
            struct ledger_res o;
            char *buf = NULL;
            const struct ledger_res *w = &rows[n > 2 && i == 0 ? n - 1 : i];
            if (n > 2 && i == n - 1) {
                assert_int_equal(ledger_res_get(f->l, uris[n - 1], &o,
                                                &buf), RS_ENOTFOUND);
                continue;
            }
            assert_int_equal(ledger_res_get(f->l, uris[i], &o, &buf), 0);
            assert_string_equal(o.path, w->path);
            assert_int_equal(o.lastmod, w->lastmod);
            assert_int_equal(o.length, w->length);
            assert_int_equal(o.deleted, w->deleted);
            assert_int_equal(o.gen, (int64_t)c);
            if (w->hash != NULL)
                assert_string_equal(o.hash, w->hash);
            else
                assert_null(o.hash);
            if (w->etag != NULL)
                assert_string_equal(o.etag, w->etag);
            else
                assert_null(o.etag);
            rs_free(buf);
        }
    }
    assert_int_equal(ledger_res_count(f->l, &live, &tomb), 0);
    /* 1 + 30 + 31 + 79 distinct uris, some of them tombstones */
    assert_int_equal(live + tomb, 1 + (LEDGER_RES_BATCH - 2) +
                                  (LEDGER_RES_BATCH - 1) +
                                  (LEDGER_RES_BATCH * 5 / 2 - 1));

    /* a uri over the limit in the last batch: nothing of the call */
    char *huge = malloc(LEDGER_URI_MAX + 2);
    assert_non_null(huge);
    memset(huge, 'a', LEDGER_URI_MAX + 1);
    memcpy(huge, "http://", 7);
    huge[LEDGER_URI_MAX + 1] = '\0';
    for (size_t i = 0; i < MAX; i++) {
        snprintf(uris[i], sizeof(uris[i]), "http://s.example/bad/%zu", i);
        rows[i].uri = uris[i];
    }
    rows[MAX - 1].uri = huge;
    int want = ledger_res_put(f->l, &rows[MAX - 1]);
    assert_int_not_equal(want, 0);
    assert_int_equal(ledger_res_put_many(f->l, rows, MAX), want);
    struct ledger_res o;
    char *buf = NULL;
    assert_int_equal(ledger_res_get(f->l, uris[0], &o, &buf), RS_ENOTFOUND);
    free(huge);
}

/* ledger/unseen_walk_writes: a walk over 3,000 rows (three pages) visits
 * exactly the live rows a generation did not mark, once each, while its
 * callback writes and commits; rows it adds as seen are not visited;
 * its memory is one page however large the table. */
static void
test_unseen_walk(void **state)
{
    struct fx *f = *state;
    struct unseen *u = calloc(1, sizeof(*u));
    int64_t first, gen;

    assert_int_equal(ledger_gen_next(f->l, &first), 0);
    assert_int_equal(first, 1);
    assert_int_equal(ledger_begin(f->l), 0);
    for (int i = 0; i < 3000; i++) {
        char uri[64];
        snprintf(uri, sizeof(uri), "http://s.example/%04d", i);
        struct ledger_res r = { .uri = uri, .path = uri + 17, .length = i,
                                .lastmod = RS_TIME_NONE,
                                .change_dt = 1000, .gen = first,
                                .deleted = i % 10 == 9 };
        assert_int_equal(ledger_res_put(f->l, &r), 0);
    }
    assert_int_equal(ledger_commit(f->l), 0);
    assert_int_equal(ledger_gen_next(f->l, &gen), 0);
    assert_int_equal(gen, 2);
    assert_int_equal(ledger_begin(f->l), 0);
    for (int i = 0; i < 3000; i += 2) {
        char uri[64];
        snprintf(uri, sizeof(uri), "http://s.example/%04d", i);
        assert_int_equal(ledger_res_mark(f->l, uri, gen), 0);
    }
    u->l = f->l;
    u->gen = gen;
    cnt_install();
    assert_int_equal(ledger_res_each(f->l, false, gen, on_unseen, u), 0);
    rs_alloc_set(NULL);
    assert_int_equal(ledger_commit(f->l), 0);
    print_message("unseen walk: peak %ld live blocks for 3,000 rows\n",
                  cnt_peak);
    assert_true(cnt_peak <= LEDGER_PAGE + 4);
    assert_int_equal(cnt_live, 0);

    int visited = 0;
    for (int i = 0; i < 3000; i++) {
        int want = (i % 2 == 1 && i % 10 != 9) ? 1 : 0;
        if (u->visits[i] != want)
            fail_msg("row %d visited %d times, want %d", i, u->visits[i],
                     want);
        visited += want;
    }
    assert_int_equal(u->n, visited);
    int64_t live, tombs;
    assert_int_equal(ledger_res_count(f->l, &live, &tombs), 0);
    assert_int_equal(tombs, 300 + visited);
    assert_int_equal(live, 2700);     /* evens, plus one new row per visit */
    /* a second walk of the same generation finds nothing */
    u->n = 0;
    assert_int_equal(ledger_res_each(f->l, false, gen, on_unseen, u), 0);
    assert_int_equal(u->n, 0);
    free(u);
}

/* ledger/todo_upsert_supersedes: a second put for a uri replaces the row
 * under a larger seq and starts afresh; done/retry/fail with the old seq
 * change nothing and say so; seqs are never reused, not even after the
 * newest row was deleted and the state reopened. */
static void
test_todo_upsert(void **state)
{
    struct fx *f = *state;
    const char *u = "http://s.example/u";
    int64_t s1, s2, s3, s4;
    struct ledger_todo t;
    char *buf = NULL;

    put_todo(f->l, u, LEDGER_CREATE, 0, &s1);
    assert_int_equal(ledger_todo_retry(f->l, u, s1, 99, "503"), 1);
    struct ledger_todo t2 = { .uri = u, .change = LEDGER_UPDATE,
                              .change_dt = 2000, .lastmod = 1500,
                              .length = 10, .hash = "md5:aa",
                              .origin = "changelist" };
    assert_int_equal(ledger_todo_put(f->l, &t2, &s2), 0);
    assert_true(s2 > s1);
    assert_int_equal(ledger_todo_get(f->l, u, &t, &buf), 0);
    assert_int_equal(t.seq, s2);
    assert_int_equal(t.change, LEDGER_UPDATE);
    assert_int_equal(t.change_dt, 2000);
    assert_int_equal(t.lastmod, 1500);
    assert_int_equal(t.length, 10);
    assert_string_equal(t.hash, "md5:aa");
    assert_string_equal(t.origin, "changelist");
    assert_int_equal(t.attempts, 0);
    assert_null(t.last_error);
    assert_false(t.failed);
    assert_int_equal(t.not_before, 0);
    rs_free(buf);

    assert_int_equal(ledger_todo_done(f->l, u, s1), 0);
    assert_int_equal(ledger_todo_retry(f->l, u, s1, 5, "x"), 0);
    assert_int_equal(ledger_todo_fail(f->l, u, s1, "x"), 0);
    assert_int_equal(todo_seq(f->l, u), s2);
    assert_int_equal(ledger_todo_get(f->l, u, &t, &buf), 0);
    assert_int_equal(t.attempts, 0);
    rs_free(buf);

    /* the worker's end: resource and todo in one transaction */
    assert_int_equal(ledger_begin(f->l), 0);
    struct ledger_res r = { .uri = u, .path = "u", .length = 10,
                            .lastmod = 1500, .change_dt = 2000 };
    assert_int_equal(ledger_res_put(f->l, &r), 0);
    assert_int_equal(ledger_todo_done(f->l, u, s2), 1);
    assert_int_equal(ledger_commit(f->l), 0);
    assert_int_equal(ledger_todo_get(f->l, u, &t, &buf), RS_ENOTFOUND);
    assert_null(buf);
    assert_int_equal(ledger_todo_done(f->l, u, s2), 0);

    put_todo(f->l, "http://s.example/v", LEDGER_DELETE, 0, &s3);
    assert_true(s3 > s2);
    assert_int_equal(ledger_todo_done(f->l, "http://s.example/v", s3), 1);
    ledger_close(f->l);
    f->l = must_open(f->db, 0);
    put_todo(f->l, "http://s.example/w", LEDGER_CREATE, 0, &s4);
    assert_true(s4 > s3);
    assert_int_equal(ledger_todo_get(f->l, "http://s.example/none", &t, &buf),
                     RS_ENOTFOUND);
}

/* Walk a queue from its start to the end: the uris in order into s. */
static void
walk_all(struct ledger *l, enum ledger_due which, struct seen *s)
{
    struct ledger_cursor cur = { 0, 0 };

    seen_reset(s);
    assert_int_equal(ledger_todo_next(l, which, INT64_MAX, &cur, 64, on_seen,
                                      s), 0);
    assert_int_equal(cur.pos, 0);
}

/* ledger/todo_keeps_place: a put that replaces a row (a newer change, a
 * retry due at once again) keeps its place in the queue under a new seq;
 * a uri with no row, and a failed row put again, go after every row there
 * is, with pos == seq, also after the newest row was deleted and the
 * state reopened. */
static void
test_todo_keeps_place(void **state)
{
    struct fx *f = *state;
    struct ledger_todo t;
    struct seen s;
    char *buf = NULL;
    int64_t sr, sa, sb, sc, sa2, sr2, sd;

    put_todo(f->l, "r", LEDGER_CREATE, 0, &sr);
    put_todo(f->l, "a", LEDGER_CREATE, 0, &sa);
    put_todo(f->l, "b", LEDGER_CREATE, 0, &sb);
    put_todo(f->l, "c", LEDGER_CREATE, 0, &sc);
    assert_int_equal(ledger_todo_retry(f->l, "r", sr, 500, "503"), 1);
    walk_all(f->l, LEDGER_DUE_NOW, &s);
    assert_int_equal(s.n, 3);                    /* r waits for its retry */

    put_todo(f->l, "a", LEDGER_UPDATE, 0, &sa2);  /* a newer change */
    put_todo(f->l, "r", LEDGER_UPDATE, 0, &sr2);  /* due at once again */
    assert_true(sa2 > sc && sr2 > sa2);
    walk_all(f->l, LEDGER_DUE_NOW, &s);
    assert_int_equal(s.n, 4);
    assert_string_equal(s.uri[0], "r");
    assert_string_equal(s.uri[1], "a");
    assert_string_equal(s.uri[2], "b");
    assert_string_equal(s.uri[3], "c");
    assert_int_equal(ledger_todo_get(f->l, "a", &t, &buf), 0);
    assert_int_equal(t.seq, sa2);
    assert_int_equal(t.pos, sa);
    rs_free(buf);
    assert_int_equal(ledger_todo_get(f->l, "r", &t, &buf), 0);
    assert_int_equal(t.pos, sr);
    rs_free(buf);

    /* a failed row put again goes to the back */
    assert_int_equal(ledger_todo_fail(f->l, "b", sb, "gone"), 1);
    put_todo(f->l, "b", LEDGER_UPDATE, 0, NULL);
    walk_all(f->l, LEDGER_DUE_NOW, &s);
    assert_int_equal(s.n, 4);
    assert_string_equal(s.uri[2], "c");
    assert_string_equal(s.uri[3], "b");

    /* the newest row done, the state reopened: a new uri goes last */
    assert_int_equal(ledger_todo_done(f->l, "b", todo_seq(f->l, "b")), 1);
    ledger_close(f->l);
    f->l = must_open(f->db, 0);
    put_todo(f->l, "d", LEDGER_CREATE, 0, &sd);
    assert_true(sd > sr2 + 1);
    assert_int_equal(ledger_todo_get(f->l, "d", &t, &buf), 0);
    assert_int_equal(t.pos, sd);
    rs_free(buf);
    walk_all(f->l, LEDGER_DUE_NOW, &s);
    assert_int_equal(s.n, 4);
    assert_string_equal(s.uri[0], "r");
    assert_string_equal(s.uri[3], "d");
}

/* The todo table and its index as version 1 made them. */
static const char todo_v1[] =
    "DROP TABLE todo;"
    "CREATE TABLE todo(seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "  uri TEXT NOT NULL UNIQUE, "
    "  change INTEGER NOT NULL CHECK (change BETWEEN 1 AND 3), "
    "  change_dt INTEGER, lastmod INTEGER, length INTEGER NOT NULL, "
    "  hash TEXT, origin TEXT, attempts INTEGER NOT NULL, "
    "  not_before INTEGER NOT NULL, last_error TEXT, "
    "  failed INTEGER NOT NULL);"
    "CREATE INDEX todo_due ON todo(failed, not_before, seq);"
    "INSERT INTO todo VALUES (5, 'b', 2, 1000, NULL, -1, NULL, 'push', 0, 0, "
    "  NULL, 0);"
    "INSERT INTO todo VALUES (9, 'a', 2, 1000, NULL, -1, NULL, 'push', 0, 0, "
    "  NULL, 0);"
    "UPDATE sqlite_sequence SET seq = 12 WHERE name = 'todo';"
    "PRAGMA user_version = 1;";

/* ledger/upgrade_from_1: a state of version 1 (no pos; its queue went by
 * seq) is read as it is by a reader, which leaves the file alone, and
 * upgraded by a writer, the queue in the same order; new puts then go
 * after it, and a replaced row keeps its place. */
static void
test_upgrade_from_1(void **state)
{
    struct fx *f = *state;
    struct ledger_todo t;
    struct seen s;
    char *buf = NULL;
    int64_t sb, sc;

    put_todo(f->l, "x", LEDGER_CREATE, 0, NULL);  /* sqlite_sequence row */
    ledger_close(f->l);
    f->l = NULL;
    raw_exec(f->db, todo_v1);

    struct ledger *r = must_open(f->db, LEDGER_READONLY);
    walk_all(r, LEDGER_DUE_NOW, &s);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.uri[0], "b");
    assert_string_equal(s.uri[1], "a");
    assert_int_equal(ledger_todo_get(r, "a", &t, &buf), 0);
    assert_int_equal(t.pos, 9);
    rs_free(buf);
    ledger_close(r);
    assert_int_equal(raw_int(f->db, "PRAGMA user_version"), 1);

    f->l = must_open(f->db, 0);
    assert_int_equal(raw_int(f->db, "PRAGMA user_version"), LEDGER_SCHEMA);
    assert_int_equal(raw_int(f->db, "SELECT count(*) FROM "
                             "pragma_index_info('todo_due') WHERE name = "
                             "'pos'"), 1);
    put_todo(f->l, "b", LEDGER_UPDATE, 0, &sb);   /* keeps its place */
    put_todo(f->l, "c", LEDGER_CREATE, 0, &sc);
    assert_int_equal(sb, 13);
    assert_int_equal(sc, 14);
    walk_all(f->l, LEDGER_DUE_NOW, &s);
    assert_int_equal(s.n, 3);
    assert_string_equal(s.uri[0], "b");
    assert_string_equal(s.uri[1], "a");
    assert_string_equal(s.uri[2], "c");
    assert_int_equal(ledger_todo_get(f->l, "b", &t, &buf), 0);
    assert_int_equal(t.pos, 5);
    rs_free(buf);
    ledger_close(f->l);
    f->l = must_open(f->db, 0);                   /* upgraded once */
    assert_int_equal(raw_int(f->db, "PRAGMA user_version"), LEDGER_SCHEMA);
}

/* ledger/todo_due_order: due rows are two queues. Rows due at once come
 * in put order; retries whose time has come by due time, whatever was put
 * at once meanwhile; a retried row waits for its not_before, and
 * due_after says when the next one comes due. The cursor pages, a
 * stopping callback gets the same row again, and a walk that ran dry
 * starts over (so a row that sorts behind the cursor is found). */
static void
test_todo_order(void **state)
{
    struct fx *f = *state;
    struct ledger_cursor cur = { 0, 0 }, rcur = { 0, 0 };
    struct seen s;
    int64_t sa, sb, sc, due, waiting, failed;
    rs_time_t when;

    assert_int_equal(ledger_todo_next_due(f->l, &when), RS_ENOTFOUND);
    assert_int_equal(ledger_todo_due_after(f->l, 0, &when), RS_ENOTFOUND);
    put_todo(f->l, "a", LEDGER_CREATE, 0, &sa);
    put_todo(f->l, "b", LEDGER_CREATE, RS_TIME_NONE, &sb);
    put_todo(f->l, "c", LEDGER_UPDATE, -7, &sc);
    put_todo(f->l, "later", LEDGER_UPDATE, 9000, NULL);

    seen_reset(&s);
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_NOW, 1000, &cur, 10,
                                      on_seen, &s), 0);
    assert_int_equal(s.n, 3);
    assert_string_equal(s.uri[0], "a");
    assert_string_equal(s.uri[1], "b");
    assert_string_equal(s.uri[2], "c");
    assert_int_equal(cur.pos, 0);                 /* ran dry: start over */
    /* "later" is not due by 1000, and due_after says when it will be */
    seen_reset(&s);
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_RETRY, 1000, &rcur, 10,
                                      on_seen, &s), 0);
    assert_int_equal(s.n, 0);
    assert_int_equal(rcur.pos, 0);
    assert_int_equal(ledger_todo_next_due(f->l, &when), 0);
    assert_int_equal(when, 0);
    assert_int_equal(ledger_todo_due_after(f->l, 1000, &when), 0);
    assert_int_equal(when, 9000);

    /* paging: two at a time */
    seen_reset(&s);
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_NOW, 1000, &cur, 2,
                                      on_seen, &s), 0);
    assert_int_equal(s.n, 2);
    assert_int_equal(cur.pos, sb);
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_NOW, 1000, &cur, 2,
                                      on_seen, &s), 0);
    assert_int_equal(s.n, 3);
    assert_string_equal(s.uri[2], "c");
    assert_int_equal(cur.pos, 0);

    /* a stop: the row is offered again */
    seen_reset(&s);
    s.stop_at = 1;
    s.stop_rc = 5;
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_NOW, 1000, &cur, 10,
                                      on_seen, &s), 5);
    assert_int_equal(cur.pos, sa);
    s.stop_at = -1;
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_NOW, 1000, &cur, 10,
                                      on_seen, &s), 0);
    assert_int_equal(s.n, 3);
    assert_string_equal(s.uri[1], "b");

    /* b fails an attempt: due again at 5000, in the retry queue */
    assert_int_equal(ledger_todo_retry(f->l, "b", sb, 5000, "HTTP 503"), 1);
    assert_int_equal(ledger_todo_count(f->l, 1000, &due, &waiting, &failed),
                     0);
    assert_int_equal(due, 2);
    assert_int_equal(waiting, 2);
    assert_int_equal(failed, 0);
    seen_reset(&s);
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_NOW, 1000, &cur, 10,
                                      on_seen, &s), 0);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.uri[0], "a");
    assert_string_equal(s.uri[1], "c");
    assert_int_equal(ledger_todo_done(f->l, "a", sa), 1);
    assert_int_equal(ledger_todo_done(f->l, "c", sc), 1);
    assert_int_equal(ledger_todo_next_due(f->l, &when), 0);
    assert_int_equal(when, 5000);
    assert_int_equal(ledger_todo_due_after(f->l, 1000, &when), 0);
    assert_int_equal(when, 5000);
    assert_int_equal(ledger_todo_due_after(f->l, 5000, &when), 0);
    assert_int_equal(when, 9000);
    assert_int_equal(ledger_todo_due_after(f->l, 9000, &when), RS_ENOTFOUND);
    seen_reset(&s);
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_RETRY, 4999, &rcur, 10,
                                      on_seen, &s), 0);
    assert_int_equal(s.n, 0);
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_RETRY, 5000, &rcur, 10,
                                      on_seen, &s), 0);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.uri[0], "b");
    assert_int_equal(s.attempts[0], 1);

    /* d, put at once after b came due, is in the other queue: the retry
     * queue has b (5000), then later (9000), and nothing due at once */
    put_todo(f->l, "d", LEDGER_CREATE, 0, NULL);
    seen_reset(&s);
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_RETRY, 10000, &rcur, 10,
                                      on_seen, &s), 0);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.uri[0], "b");
    assert_string_equal(s.uri[1], "later");
    assert_int_equal(rcur.pos, 0);
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_NOW, 10000, &cur, 10,
                                      on_seen, &s), 0);
    assert_int_equal(s.n, 3);
    assert_string_equal(s.uri[2], "d");

    /* a row that sorts behind the cursor (requeued at an earlier time):
     * found after the walk ran dry and started over */
    seen_reset(&s);
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_RETRY, 10000, &rcur, 1,
                                      on_seen, &s), 0);
    assert_int_equal(rcur.pos, sb);
    put_todo(f->l, "e", LEDGER_CREATE, 3000, NULL);
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_RETRY, 10000, &rcur, 10,
                                      on_seen, &s), 0);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.uri[1], "later");
    assert_int_equal(rcur.pos, 0);
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_RETRY, 10000, &rcur, 10,
                                      on_seen, &s), 0);
    assert_int_equal(s.n, 5);
    assert_string_equal(s.uri[2], "e");
    assert_string_equal(s.uri[3], "b");
    assert_string_equal(s.uri[4], "later");

    /* max 0 does nothing */
    seen_reset(&s);
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_NOW, 10000, &cur, 0,
                                      on_seen, &s), 0);
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_RETRY, 10000, &rcur, 0,
                                      on_seen, &s), 0);
    assert_int_equal(s.n, 0);
}

/* ledger/todo_first_round: max_seq marks the work known at a moment;
 * due_upto says whether any of it is still due: rows due later (a retry
 * backing off) and failed rows do not count, rows put afterwards neither,
 * and max_seq never goes back when rows are taken off. */
static void
test_todo_first_round(void **state)
{
    struct fx *f = *state;
    int64_t mark, sa, sb, sc, again;
    bool any;

    assert_int_equal(ledger_todo_max_seq(f->l, &mark), 0);
    assert_int_equal(mark, 0);
    put_todo(f->l, "a", LEDGER_CREATE, 0, &sa);
    put_todo(f->l, "b", LEDGER_CREATE, 0, &sb);
    put_todo(f->l, "c", LEDGER_CREATE, 0, &sc);
    assert_int_equal(ledger_todo_max_seq(f->l, &mark), 0);
    assert_int_equal(mark, sc);
    put_todo(f->l, "later", LEDGER_CREATE, 0, NULL);   /* after the mark */
    assert_int_equal(ledger_todo_due_upto(f->l, mark, 1000, &any), 0);
    assert_true(any);
    assert_int_equal(ledger_todo_done(f->l, "a", sa), 1);
    assert_int_equal(ledger_todo_retry(f->l, "b", sb, 5000, "HTTP 503"), 1);
    assert_int_equal(ledger_todo_fail(f->l, "c", sc, "HTTP 404"), 1);
    assert_int_equal(ledger_todo_due_upto(f->l, mark, 1000, &any), 0);
    assert_false(any);               /* b waits, c failed, later is new */
    assert_int_equal(ledger_todo_due_upto(f->l, mark, 5000, &any), 0);
    assert_true(any);                /* b is due again */
    assert_int_equal(ledger_todo_done(f->l, "b", sb), 1);
    assert_int_equal(ledger_todo_max_seq(f->l, &again), 0);
    assert_true(again > mark);       /* "later" */
}

/* ledger/todo_failed: a failed row is no longer due but counted and
 * listed (in failure order) with its attempts and error, cut at
 * LEDGER_ERROR_MAX on a UTF-8 boundary; requeue makes failed rows due
 * again; a new put for the uri replaces a failed row. */
static void
test_todo_failed(void **state)
{
    struct fx *f = *state;
    struct ledger_cursor cur = { 0, 0 };
    struct seen s;
    int64_t sz, sy, sx, due, waiting, failed, n;
    struct ledger_todo t;
    char *buf = NULL;

    put_todo(f->l, "z", LEDGER_CREATE, 0, &sz);
    put_todo(f->l, "y", LEDGER_CREATE, 0, &sy);
    put_todo(f->l, "x", LEDGER_CREATE, 0, &sx);
    assert_int_equal(ledger_todo_retry(f->l, "y", sy, 0, "first"), 1);
    assert_int_equal(ledger_todo_fail(f->l, "y", sy, "HTTP 404"), 1);
    usleep(2000);
    char longerr[3000];
    size_t k = 0;
    longerr[k++] = 'x';                   /* the cut falls inside an "é" */
    while (k + 2 < sizeof(longerr)) {
        longerr[k++] = '\xc3';
        longerr[k++] = '\xa9';
    }
    longerr[k] = '\0';
    assert_int_equal(ledger_todo_fail(f->l, "z", sz, longerr), 1);
    assert_int_equal(ledger_todo_fail(f->l, "z", sz - 100, "stale"), 0);

    seen_reset(&s);
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_NOW, INT64_MAX - 1, &cur,
                                      10, on_seen, &s), 0);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.uri[0], "x");
    assert_int_equal(ledger_todo_count(f->l, 1, &due, &waiting, &failed), 0);
    assert_int_equal(due, 1);
    assert_int_equal(waiting, 0);
    assert_int_equal(failed, 2);

    seen_reset(&s);
    assert_int_equal(ledger_todo_each_failed(f->l, on_seen, &s), 0);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.uri[0], "y");          /* failed first */
    assert_string_equal(s.uri[1], "z");
    assert_int_equal(s.attempts[0], 2);
    assert_int_equal(s.attempts[1], 1);
    assert_int_equal(ledger_todo_get(f->l, "z", &t, &buf), 0);
    assert_true(t.failed);
    assert_true(t.not_before > 0);              /* when it failed */
    assert_int_equal(strlen(t.last_error), LEDGER_ERROR_MAX - 1);
    assert_int_equal((unsigned char)t.last_error[LEDGER_ERROR_MAX - 2], 0xa9);
    rs_free(buf);
    seen_reset(&s);
    s.stop_at = 1;
    s.stop_rc = 9;
    assert_int_equal(ledger_todo_each_failed(f->l, on_seen, &s), 9);

    assert_int_equal(ledger_todo_next_due(f->l, &(rs_time_t){ 0 }), 0);
    assert_int_equal(ledger_todo_requeue_failed(f->l, 0, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ledger_todo_count(f->l, 1, &due, NULL, &failed), 0);
    assert_int_equal(due, 3);
    assert_int_equal(failed, 0);
    assert_int_equal(ledger_todo_get(f->l, "y", &t, &buf), 0);
    assert_int_equal(t.attempts, 0);
    assert_int_equal(t.seq, sy);
    assert_false(t.failed);
    rs_free(buf);

    assert_int_equal(ledger_todo_fail(f->l, "x", sx, "gone"), 1);
    int64_t sx2;
    put_todo(f->l, "x", LEDGER_DELETE, 0, &sx2);
    assert_int_equal(ledger_todo_get(f->l, "x", &t, &buf), 0);
    assert_false(t.failed);
    assert_int_equal(t.attempts, 0);
    assert_null(t.last_error);
    assert_int_equal(t.change, LEDGER_DELETE);
    assert_true(t.seq > sx);
    rs_free(buf);
}

/* The engine, simulated: at most CAP rows in flight, a quarter finished
 * (done) after each call; rows in flight skipped by the callback. N is
 * a hundred pages of CAP (the ledger's memory is one page whatever N);
 * one row in LATER_EVERY is a delayed one (more than the 64 looked at). */
#define PAGING_N 25000
#define PAGING_CAP 256
#define PAGING_LATER_EVERY 250

struct engine {
    struct ledger *l;
    unsigned char *state;      /* per row: 0 new, 1 in flight, 2 done */
    int64_t *seq;
    int flight[PAGING_CAP];
    int nflight;
    long taken, skipped, calls;
    int64_t last_taken_seq;    /* within one pass */
    bool out_of_order;
};

static int
on_engine_row(void *ud, const struct ledger_todo *t)
{
    struct engine *e = ud;
    int i = -1;
    if (sscanf(t->uri, "http://s.example/r/%d", &i) != 1 || i < 0 ||
        i >= PAGING_N)
        fail_msg("unexpected row %s", t->uri);
    if (e->state[i] == 1) {
        e->skipped++;
        return 0;
    }
    assert_int_equal(e->state[i], 0);
    if (e->nflight == PAGING_CAP)
        return 1;                             /* full: offer it again */
    if (t->seq < e->last_taken_seq)
        e->out_of_order = true;
    e->last_taken_seq = t->seq;
    e->state[i] = 1;
    e->seq[i] = t->seq;
    e->flight[e->nflight++] = i;
    e->taken++;
    return 0;
}

/* ledger/todo_paging: 25,000 due rows (plus delayed ones that must not
 * show) are handed out by an engine that keeps 256 in flight: each row
 * exactly once, in seq order, each done with its seq; the ledger's own
 * memory stays at one page however many rows there are (a hundred pages
 * of them here). The delayed rows, once due, are a queue of their own,
 * not behind the 25,000. */
static void
test_todo_paging(void **state)
{
    struct fx *f = *state;
    struct engine *e = calloc(1, sizeof(*e));
    struct ledger_cursor cur = { 0, 0 };
    rs_time_t now = 1000000;
    double t0 = now_s();

    e->l = f->l;
    e->state = calloc(PAGING_N, 1);
    e->seq = calloc(PAGING_N, sizeof(int64_t));
    for (int b = 0; b < PAGING_N; b += 1000) {
        assert_int_equal(ledger_begin(f->l), 0);
        for (int i = b; i < b + 1000; i++) {
            char uri[64];
            snprintf(uri, sizeof(uri), "http://s.example/r/%06d", i);
            put_todo(f->l, uri, LEDGER_CREATE, 0, NULL);
            if (i % PAGING_LATER_EVERY == 0) {
                snprintf(uri, sizeof(uri), "http://s.example/later/%d", i);
                put_todo(f->l, uri, LEDGER_UPDATE, now + 1, NULL);
            }
        }
        assert_int_equal(ledger_commit(f->l), 0);
    }
    double t1 = now_s();

    struct ledger_cursor rcur = { 0, 0 };
    struct seen s;
    seen_reset(&s);
    assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_RETRY, now + 1, &rcur,
                                      64, on_seen, &s), 0);
    assert_int_equal(s.n, 64);
    assert_string_equal(s.uri[0], "http://s.example/later/0");
    char last[64];
    snprintf(last, sizeof(last), "http://s.example/later/%d",
             63 * PAGING_LATER_EVERY);
    assert_string_equal(s.uri[63], last);

    long ran_dry = 0;
    sqlite3_memory_highwater(1);
    long long sq_base = sqlite3_memory_used();
    cnt_install();
    while (e->taken < PAGING_N || e->nflight > 0) {
        e->calls++;
        assert_true(e->calls < 10 * PAGING_N / PAGING_CAP + 100);
        int rc = ledger_todo_next(f->l, LEDGER_DUE_NOW, now, &cur,
                                  PAGING_CAP + 1, on_engine_row, e);
        assert_true(rc == 0 || rc == 1);
        if (cur.pos == 0) {
            ran_dry++;
            e->last_taken_seq = 0;
        }
        int finish = e->nflight > 3 ? e->nflight / 4 : e->nflight;
        assert_int_equal(ledger_begin(f->l), 0);
        for (int k = 0; k < finish; k++) {
            int i = e->flight[k];
            char uri[64];
            snprintf(uri, sizeof(uri), "http://s.example/r/%06d", i);
            assert_int_equal(ledger_todo_done(f->l, uri, e->seq[i]), 1);
            e->state[i] = 2;
        }
        assert_int_equal(ledger_commit(f->l), 0);
        memmove(e->flight, e->flight + finish,
                (size_t)(e->nflight - finish) * sizeof(int));
        e->nflight -= finish;
    }
    rs_alloc_set(NULL);
    double t2 = now_s();
    long long sq_peak = sqlite3_memory_highwater(0);

    print_message("paging: put %d rows in %.2f s; handed out in %ld calls, "
                  "%.2f s (%ld rows skipped as in flight, ran dry %ld "
                  "times); ledger peak %ld blocks; sqlite %lld -> %lld KiB\n",
                  PAGING_N, t1 - t0, e->calls, t2 - t1, e->skipped, ran_dry,
                  cnt_peak, sq_base / 1024, sq_peak / 1024);
    assert_int_equal(e->taken, PAGING_N);
    for (int i = 0; i < PAGING_N; i++)
        assert_int_equal(e->state[i], 2);
    assert_false(e->out_of_order);
    assert_true(cnt_peak <= PAGING_CAP + 3);
    assert_int_equal(cnt_live, 0);
    int64_t due, waiting;
    assert_int_equal(ledger_todo_count(f->l, now, &due, &waiting, NULL), 0);
    assert_int_equal(due, 0);
    assert_int_equal(waiting, PAGING_N / PAGING_LATER_EVERY);
    free(e->state);
    free(e->seq);
    free(e);
}

/* ledger/crash_mid_transaction: a child commits a batch (todo rows and the
 * position they came from), opens another, writes 20,000 rows, a newer
 * position, meta and resources, and is killed with SIGKILL before
 * committing: the reopened state holds the first batch whole and nothing
 * of the second, and the lock died with the child. */
static void
test_crash_mid_txn(void **state)
{
    struct fx *f = *state;
    int p[2];
    char c;

    ledger_close(f->l);
    f->l = NULL;
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char e[512];
        struct ledger *l = ledger_open(f->db, 0, e, sizeof(e));
        if (l == NULL || ledger_begin(l) != 0)
            _exit(2);
        for (int i = 0; i < 1000; i++) {
            char uri[64];
            snprintf(uri, sizeof(uri), "http://s.example/c%d", i);
            struct ledger_todo t = { .uri = uri, .change = LEDGER_CREATE };
            if (ledger_todo_put(l, &t, NULL) != 0)
                _exit(3);
        }
        if (ledger_pos_set(l, "ws://h/channel/a", "100-0", 100) != 0 ||
            ledger_commit(l) != 0 || ledger_begin(l) != 0)
            _exit(4);
        for (int i = 0; i < 20000; i++) {
            char uri[64];
            snprintf(uri, sizeof(uri), "http://s.example/p%d", i);
            struct ledger_todo t = { .uri = uri, .change = LEDGER_UPDATE };
            struct ledger_res r = { .uri = uri, .path = "p", .length = 1 };
            if (ledger_todo_put(l, &t, NULL) != 0 ||
                ledger_res_put(l, &r) != 0)
                _exit(5);
        }
        if (ledger_pos_set(l, "ws://h/channel/a", "200-0", 200) != 0 ||
            ledger_meta_set(l, "baseline_done", "1") != 0)
            _exit(6);
        if (write(p[1], "x", 1) != 1)
            _exit(7);
        for (;;)
            pause();
    }
    close(p[1]);
    assert_int_equal(read(p[0], &c, 1), 1);
    close(p[0]);
    kill(pid, SIGKILL);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st));

    f->l = must_open(f->db, 0);
    int64_t due, live, tombs;
    char *id = NULL, *v = NULL;
    rs_time_t dt;
    assert_int_equal(ledger_todo_count(f->l, 1, &due, NULL, NULL), 0);
    assert_int_equal(due, 1000);
    assert_int_equal(ledger_pos_get(f->l, "ws://h/channel/a", &id, &dt), 0);
    assert_string_equal(id, "100-0");
    assert_int_equal(dt, 100);
    rs_free(id);
    assert_int_equal(ledger_meta_get(f->l, "baseline_done", &v),
                     RS_ENOTFOUND);
    assert_int_equal(ledger_res_count(f->l, &live, &tombs), 0);
    assert_int_equal(live + tombs, 0);
}

/* ledger/kill_while_running: a child commits batches of 100 todo rows
 * with their position (the batch number) as fast as it can and is killed
 * at some moment; after the restart the position never runs ahead of the
 * rows: position k <=> exactly 100*k rows. Three different moments. */
static void
test_kill_while_running(void **state)
{
    struct fx *f = *state;

    ledger_close(f->l);
    f->l = NULL;
    for (int round = 0; round < 3; round++) {
        char path[4300];
        int p[2];
        char c;
        snprintf(path, sizeof(path), "%s/run%d.db", f->dir, round);
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            char e[512];
            struct ledger *l = ledger_open(path, 0, e, sizeof(e));
            if (l == NULL)
                _exit(2);
            for (int b = 1;; b++) {
                char id[32];
                if (ledger_begin(l) != 0)
                    _exit(3);
                for (int i = 0; i < 100; i++) {
                    char uri[64];
                    snprintf(uri, sizeof(uri), "http://s.example/%d/%d", b,
                             i);
                    struct ledger_todo t = { .uri = uri,
                                             .change = LEDGER_CREATE };
                    if (ledger_todo_put(l, &t, NULL) != 0)
                        _exit(4);
                }
                snprintf(id, sizeof(id), "%d", b);
                if (ledger_pos_set(l, "ws://h/c", id, b) != 0 ||
                    ledger_commit(l) != 0)
                    _exit(5);
                if (b == 20 && write(p[1], "x", 1) != 1)
                    _exit(6);
            }
        }
        close(p[1]);
        assert_int_equal(read(p[0], &c, 1), 1);
        close(p[0]);
        usleep((useconds_t)(round * 7000));
        kill(pid, SIGKILL);
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFSIGNALED(st));

        struct ledger *l = must_open(path, 0);
        char *id = NULL;
        rs_time_t dt;
        int64_t due;
        assert_int_equal(ledger_pos_get(l, "ws://h/c", &id, &dt), 0);
        long k = strtol(id, NULL, 10);
        rs_free(id);
        assert_int_equal(ledger_todo_count(l, 1, &due, NULL, NULL), 0);
        print_message("kill round %d: position %ld, %lld rows\n", round, k,
                      (long long)due);
        assert_true(k >= 20);
        assert_int_equal(dt, k);
        assert_int_equal(due, 100 * k);
        ledger_close(l);
    }
}

/* ledger/disk_full: in a child whose files may not grow (RLIMIT_FSIZE),
 * a batch too large to write fails at commit, the transaction is over
 * (a rollback then is RS_ESTATE) and the state, reopened, holds only what
 * was committed before. */
static void
test_disk_full(void **state)
{
    struct fx *f = *state;

    for (int i = 0; i < 100; i++) {
        char uri[64];
        snprintf(uri, sizeof(uri), "http://s.example/ok%d", i);
        put_todo(f->l, uri, LEDGER_CREATE, 0, NULL);
    }
    ledger_close(f->l);
    f->l = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char e[512], wal[4300];
        struct stat sb;
        struct ledger *l = ledger_open(f->db, 0, e, sizeof(e));
        if (l == NULL)
            _exit(2);
        snprintf(wal, sizeof(wal), "%s-wal", f->db);
        off_t big = 0;
        if (stat(f->db, &sb) == 0)
            big = sb.st_size;
        if (stat(wal, &sb) == 0 && sb.st_size > big)
            big = sb.st_size;
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = { (rlim_t)big + 65536, (rlim_t)big + 65536 };
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0 || ledger_begin(l) != 0)
            _exit(3);
        for (int i = 0; i < 20000; i++) {
            char uri[64];
            snprintf(uri, sizeof(uri), "http://s.example/big%d", i);
            struct ledger_todo t = { .uri = uri, .change = LEDGER_CREATE,
                                     .hash = "md5:00112233445566778899aabb"
                                             "ccddeeff" };
            int rc = ledger_todo_put(l, &t, NULL);
            if (rc != 0)
                break;                     /* a spill hit the limit */
        }
        int rc = ledger_commit(l);
        if (rc == 0)
            _exit(4);
        if (strstr(ledger_errstr(l), "commit") == NULL &&
            strstr(ledger_errstr(l), "rolled back") == NULL)
            _exit(5);
        if (ledger_rollback(l) != RS_ESTATE)
            _exit(6);
        ledger_close(l);
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    f->l = must_open(f->db, 0);
    int64_t due;
    assert_int_equal(ledger_todo_count(f->l, 1, &due, NULL, NULL), 0);
    assert_int_equal(due, 100);
}

/* ledger/io_error_words: a write the OS refuses (EFBIG: files may not
 * grow, as on a full quota) is told in the OS's words, not as SQLite's
 * "disk I/O error" alone, and the commit fails. */
static void
test_io_error_words(void **state)
{
    struct fx *f = *state;

    put_todo(f->l, "http://s.example/a", LEDGER_CREATE, 0, NULL);
    assert_int_equal(ledger_begin(f->l), 0);
    struct ledger_todo t = { .uri = "http://s.example/b",
                             .change = LEDGER_CREATE };
    assert_int_equal(ledger_todo_put(f->l, &t, NULL), 0);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 0;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = ledger_commit(f->l);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(ledger_errstr(f->l), "(File too large)"));
}

/* ledger/rolled_back_by_sqlite: in a child whose files may not grow and
 * whose page cache must spill (soft heap limit), a put in mid-batch fails
 * and SQLite rolls the whole transaction back; every later write of that
 * batch is refused (never committed on its own), the commit says so, and
 * the reopened state holds only what was committed before. */
static void
test_rolled_back_by_sqlite(void **state)
{
    struct fx *f = *state;

    put_todo(f->l, "http://s.example/ok", LEDGER_CREATE, 0, NULL);
    ledger_close(f->l);
    f->l = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char e[512], wal[4300];
        struct stat sb;
        struct ledger *l = ledger_open(f->db, 0, e, sizeof(e));
        if (l == NULL)
            _exit(2);
        snprintf(wal, sizeof(wal), "%s-wal", f->db);
        off_t big = 0;
        if (stat(f->db, &sb) == 0)
            big = sb.st_size;
        if (stat(wal, &sb) == 0 && sb.st_size > big)
            big = sb.st_size;
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = { (rlim_t)big + 65536, (rlim_t)big + 65536 };
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0 || ledger_begin(l) != 0)
            _exit(3);
        sqlite3_soft_heap_limit64(2 << 20);
        int rc = 0;
        for (int i = 0; i < 400000 && rc == 0; i++) {
            char uri[64];
            snprintf(uri, sizeof(uri), "http://s.example/big%d", i);
            struct ledger_todo t = { .uri = uri, .change = LEDGER_CREATE };
            rc = ledger_todo_put(l, &t, NULL);
        }
        if (rc == 0)
            _exit(4);                      /* never spilled */
        struct ledger_todo t = { .uri = "http://s.example/after",
                                 .change = LEDGER_CREATE };
        if (ledger_todo_put(l, &t, NULL) != RS_ESTATE ||
            ledger_pos_set(l, "ws://h/c", "9-0", 9) != RS_ESTATE ||
            ledger_begin(l) != RS_ESTATE)
            _exit(5);
        if (strstr(ledger_errstr(l), "rolled back") == NULL)
            _exit(6);
        if (ledger_commit(l) != RS_ESTATE || ledger_rollback(l) != RS_ESTATE)
            _exit(7);
        ledger_close(l);
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    f->l = must_open(f->db, 0);
    int64_t due;
    assert_int_equal(ledger_todo_count(f->l, 1, &due, NULL, NULL), 0);
    assert_int_equal(due, 1);
    assert_int_equal(ledger_pos_get(f->l, "ws://h/c", NULL, NULL),
                     RS_ENOTFOUND);
    put_todo(f->l, "http://s.example/again", LEDGER_CREATE, 0, NULL);
}

/* ledger/hostile_arguments: missing, empty and over-long texts and bad
 * change kinds are refused with the right code and a message; a stale
 * lock file (a dead holder's pid, or junk) does not stop an open; odd
 * bytes in a uri are data, not SQL. */
static void
test_hostile(void **state)
{
    struct fx *f = *state;
    char *longuri = malloc(LEDGER_URI_MAX + 2);
    char *longtxt = malloc(LEDGER_TEXT_MAX + 2);
    struct ledger_todo t = { .uri = "u", .change = LEDGER_CREATE };
    struct ledger_res r = { .uri = "u" };
    struct ledger_todo o;
    char *buf = NULL;

    memset(longuri, 'u', LEDGER_URI_MAX + 1);
    longuri[LEDGER_URI_MAX + 1] = '\0';
    memset(longtxt, 'h', LEDGER_TEXT_MAX + 1);
    longtxt[LEDGER_TEXT_MAX + 1] = '\0';

    t.uri = NULL;
    assert_int_equal(ledger_todo_put(f->l, &t, NULL), RS_EINVAL);
    t.uri = "";
    assert_int_equal(ledger_todo_put(f->l, &t, NULL), RS_EINVAL);
    t.uri = longuri;
    assert_int_equal(ledger_todo_put(f->l, &t, NULL), RS_ETOOBIG);
    assert_non_null(strstr(ledger_errstr(f->l), "longer than"));
    t.uri = "u";
    t.change = 0;
    assert_int_equal(ledger_todo_put(f->l, &t, NULL), RS_EINVAL);
    t.change = 4;
    assert_int_equal(ledger_todo_put(f->l, &t, NULL), RS_EINVAL);
    t.change = LEDGER_CREATE;
    t.hash = longtxt;
    assert_int_equal(ledger_todo_put(f->l, &t, NULL), RS_ETOOBIG);
    t.hash = NULL;
    t.origin = longtxt;
    assert_int_equal(ledger_todo_put(f->l, &t, NULL), RS_ETOOBIG);
    t.origin = NULL;
    assert_int_equal(ledger_todo_get(f->l, NULL, &o, &buf), RS_EINVAL);
    assert_int_equal(ledger_todo_done(f->l, NULL, 1), RS_EINVAL);
    assert_int_equal(ledger_todo_retry(f->l, longuri, 1, 0, "e"), RS_ETOOBIG);

    r.uri = NULL;
    assert_int_equal(ledger_res_put(f->l, &r), RS_EINVAL);
    r.uri = "u";
    r.etag = longtxt;
    assert_int_equal(ledger_res_put(f->l, &r), RS_ETOOBIG);
    r.etag = NULL;
    r.path = longtxt;
    assert_int_equal(ledger_res_put(f->l, &r), RS_ETOOBIG);
    assert_int_equal(ledger_res_mark(f->l, "", 1), RS_EINVAL);
    assert_int_equal(ledger_pos_set(f->l, "c", longtxt, 1), RS_ETOOBIG);
    int64_t live = -1;
    assert_int_equal(ledger_res_count(f->l, &live, NULL), 0);
    assert_int_equal(live, 0);

    const char *evil = "http://s.example/'; DELETE FROM todo; --\n\xff\x01";
    int64_t seq;
    put_todo(f->l, "http://s.example/keep", LEDGER_CREATE, 0, NULL);
    put_todo(f->l, evil, LEDGER_CREATE, 0, &seq);
    assert_int_equal(ledger_todo_get(f->l, evil, &o, &buf), 0);
    assert_string_equal(o.uri, evil);
    rs_free(buf);
    int64_t due;
    assert_int_equal(ledger_todo_count(f->l, 1, &due, NULL, NULL), 0);
    assert_int_equal(due, 2);
    free(longuri);
    free(longtxt);

    /* stale lock files: a dead pid, junk */
    char lock[4300];
    snprintf(lock, sizeof(lock), "%s.lock", f->db);
    ledger_close(f->l);
    write_file(lock, "999999999\n", 10);
    f->l = must_open(f->db, 0);
    ledger_close(f->l);
    write_file(lock, "\xff junk", 6);
    f->l = must_open(f->db, 0);
}

/* ledger/alloc_failures: failing each of the ledger's own allocations in
 * open, getters and walks gives RS_ENOMEM (or NULL with "out of memory")
 * and leaks nothing (LeakSanitizer); the handle stays usable. */
static void
test_alloc_failures(void **state)
{
    struct fx *f = *state;
    char err[512], path[4300];
    struct ledger_res r;
    struct ledger_todo t;
    char *buf = NULL, *v = NULL;
    struct seen s;
    struct res_walk w;
    unsigned long n;

    snprintf(path, sizeof(path), "%s/alloc.db", f->dir);
    for (n = 1; n < 50; n++) {
        tu_alloc_fail_at(n);
        struct ledger *l = ledger_open(path, 0, err, sizeof(err));
        tu_alloc_fail_at(0);
        if (l != NULL) {
            ledger_close(l);
            break;
        }
        assert_string_equal(err, "out of memory");
    }
    assert_true(n > 1 && n < 50);

    put_todo(f->l, "http://s.example/a", LEDGER_CREATE, 0, NULL);
    struct ledger_res rr = { .uri = "http://s.example/a", .path = "a",
                             .length = 1 };
    assert_int_equal(ledger_res_put(f->l, &rr), 0);
    assert_int_equal(ledger_meta_set(f->l, "k", "v"), 0);
    assert_int_equal(ledger_pos_set(f->l, "c", "1", 1), 0);

    tu_alloc_fail_at(1);
    assert_int_equal(ledger_res_get(f->l, "http://s.example/a", &r, &buf),
                     RS_ENOMEM);
    assert_null(buf);
    tu_alloc_fail_at(1);
    assert_int_equal(ledger_todo_get(f->l, "http://s.example/a", &t, &buf),
                     RS_ENOMEM);
    tu_alloc_fail_at(1);
    assert_int_equal(ledger_meta_get(f->l, "k", &v), RS_ENOMEM);
    assert_null(v);
    tu_alloc_fail_at(1);
    assert_int_equal(ledger_pos_get(f->l, "c", &v, NULL), RS_ENOMEM);
    assert_null(v);
    for (unsigned long k = 1; k <= 2; k++) {
        struct ledger_cursor cur = { 0, 0 };
        seen_reset(&s);
        tu_alloc_fail_at(k);
        assert_int_equal(ledger_todo_next(f->l, LEDGER_DUE_NOW, 1, &cur, 10,
                                      on_seen, &s),
                         RS_ENOMEM);
        tu_alloc_fail_at(0);
        assert_int_equal(s.n, 0);
        assert_int_equal(cur.pos, 0);
        w = (struct res_walk){ 0, 0 };
        tu_alloc_fail_at(k);
        assert_int_equal(ledger_res_each(f->l, true, -1, on_res_count, &w),
                         RS_ENOMEM);
        tu_alloc_fail_at(k);
        assert_int_equal(ledger_todo_each_failed(f->l, on_seen, &s),
                         k == 1 ? RS_ENOMEM : 0);
        tu_alloc_fail_at(k);
        assert_int_equal(ledger_pos_each(f->l, on_pos,
                                         &(struct pos_list){ .n = 0 }),
                         RS_ENOMEM);
        tu_alloc_fail_at(0);
        assert_int_equal(w.n, 0);
    }
    tu_alloc_fail_at(0);
    assert_int_equal(ledger_res_get(f->l, "http://s.example/a", &r, &buf), 0);
    rs_free(buf);
}

/* ledger/throughput: rows/s of the engine's hot paths in batches of 500
 * (10,000 todo puts; 10,000 resource put + todo done; again with
 * LEDGER_SYNC_FULL). Prints, asserts no timing; the target is ~30,000/s. */
#define THROUGHPUT_N 10000
static void
test_throughput(void **state)
{
    struct fx *f = *state;
    static int64_t seqs[THROUGHPUT_N];
    char uri[96];

    for (int pass = 0; pass < 2; pass++) {
        struct ledger *l = f->l;
        char path[4300];
        if (pass == 1) {
            snprintf(path, sizeof(path), "%s/full.db", f->dir);
            l = must_open(path, LEDGER_SYNC_FULL);
        }
        double t0 = now_s();
        for (int b = 0; b < THROUGHPUT_N; b += 500) {
            assert_int_equal(ledger_begin(l), 0);
            for (int i = b; i < b + 500; i++) {
                snprintf(uri, sizeof(uri),
                         "http://source.example/dataset/%08d.xml", i);
                struct ledger_todo t = {
                    .uri = uri, .change = LEDGER_UPDATE,
                    .change_dt = 1700000000000000 + i, .lastmod = RS_TIME_NONE,
                    .length = 1000 + i, .origin = "push",
                    .hash = "md5:00112233445566778899aabbccddeeff",
                };
                assert_int_equal(ledger_todo_put(l, &t, &seqs[i]), 0);
            }
            if (ledger_pos_set(l, "ws://hub/channel/x", uri, 1) != 0)
                fail();
            assert_int_equal(ledger_commit(l), 0);
        }
        double t1 = now_s();
        for (int b = 0; b < THROUGHPUT_N; b += 500) {
            assert_int_equal(ledger_begin(l), 0);
            for (int i = b; i < b + 500; i++) {
                snprintf(uri, sizeof(uri),
                         "http://source.example/dataset/%08d.xml", i);
                struct ledger_res r = {
                    .uri = uri, .path = uri + 22, .lastmod = 1, .change_dt = 2,
                    .length = 1000 + i, .etag = "\"e\"",
                    .hash = "md5:00112233445566778899aabbccddeeff",
                };
                assert_int_equal(ledger_res_put(l, &r), 0);
                assert_int_equal(ledger_todo_done(l, uri, seqs[i]), 1);
            }
            assert_int_equal(ledger_commit(l), 0);
        }
        double t2 = now_s();
        print_message("throughput (%s): %.0f todo puts/s, %.0f "
                      "(resource put + todo done)/s\n",
                      pass == 0 ? "synchronous=NORMAL" : "synchronous=FULL",
                      THROUGHPUT_N / (t1 - t0), THROUGHPUT_N / (t2 - t1));
        if (pass == 1)
            ledger_close(l);
    }
}

/* ledger/checkpoints_in_a_thread: a writer's commit does not checkpoint
 * (SQLite's default does, on the committing thread, once the WAL passes
 * 1000 frames); the ledger's thread, woken by that commit, folds the WAL
 * into the database; the thread blocks signals; a reader starts no
 * thread. */
static void
test_checkpoints_in_a_thread(void **state)
{
    struct fx *f = *state;
    struct stat st;
    char uri[400];
    off_t before;
    int tries = 0;

    assert_int_equal(stat(f->db, &st), 0);
    before = st.st_size;
    /* about 2,500 pages of WAL in one commit */
    for (;;) {
        unsigned long runs = ledger_checkpoints(f->l, NULL);
        assert_int_equal(ledger_begin(f->l), 0);
        for (int i = 0; i < 12000; i++) {
            snprintf(uri, sizeof(uri), "http://s.example/%d/%0300d", tries, i);
            struct ledger_todo t = { .uri = uri, .change = LEDGER_CREATE };
            assert_int_equal(ledger_todo_put(f->l, &t, NULL), 0);
        }
        assert_int_equal(ledger_commit(f->l), 0);
        assert_int_equal(stat(f->db, &st), 0);
        if (ledger_checkpoints(f->l, NULL) == runs)
            break;
        /* the thread ran in between: its checkpoint, not the commit's,
         * may have grown the file; once more */
        assert_true(++tries < 5);
    }
    assert_int_equal(st.st_size, before);
    for (int i = 0; i < 300 && ledger_checkpoints(f->l, NULL) == 0; i++)
        usleep(10000);
    assert_true(ledger_checkpoints(f->l, NULL) > 0);
    for (int i = 0; i < 300; i++) {
        assert_int_equal(stat(f->db, &st), 0);
        if (st.st_size > 8 * 1024 * 1024)
            break;
        usleep(10000);
    }
    assert_true(st.st_size > 8 * 1024 * 1024);
    /* the thread leaves signals to the loop's thread */
    int others = 0;
    assert_int_equal(tu_threads_unblocked(SIGTERM, &others), 0);
    assert_true(others >= 1);     /* and TSan's own thread, under TSan */

    struct ledger *r = must_open(f->db, LEDGER_READONLY);
    int64_t due = 0, waiting = 0, failed = 0;
    assert_int_equal(ledger_todo_count(r, RS_TIME_NONE, &due, &waiting,
                                       &failed), 0);
    assert_int_equal(due + waiting, 12000 * (tries + 1));
    assert_int_equal(ledger_checkpoints(r, NULL), 0);
    assert_true(ledger_checkpointing(f->l));
    assert_false(ledger_checkpointing(r));
    ledger_close(r);
}

/* ledger/wal_bounded: rssub's batches follow each other with no moment
 * between two transactions, and the WAL starts over only after a
 * checkpoint that ends in such a moment: the thread alone would let it
 * grow without end (one run of the e2e benchmark: 112 MB in 15 s). A
 * commit past 16,000 frames checkpoints itself, and the WAL stays near
 * that; the WAL's checkpoints come one for about 1000 frames written. */
static void
test_wal_bounded(void **state)
{
    struct fx *f = *state;
    char wal[4300], uri[4000];
    struct stat st;
    off_t most = 0;
    unsigned long by_commits = 0;

    snprintf(wal, sizeof(wal), "%s-wal", f->db);
    assert_int_equal(ledger_begin(f->l), 0);
    for (int round = 0; round < 200; round++) {
        /* rows of a page or more: about 200 pages a transaction,
         * 40,000 frames in all */
        for (int i = 0; i < 80; i++) {
            snprintf(uri, sizeof(uri), "http://s.example/%d/%03500d", round,
                     i);
            struct ledger_todo t = { .uri = uri, .change = LEDGER_CREATE };
            assert_int_equal(ledger_todo_put(f->l, &t, NULL), 0);
        }
        assert_int_equal(ledger_commit(f->l), 0);
        assert_int_equal(ledger_begin(f->l), 0);
        if (stat(wal, &st) == 0 && st.st_size > most)
            most = st.st_size;
    }
    assert_int_equal(ledger_commit(f->l), 0);
    /* 16,000 frames and a few transactions' (the commit at the bound
     * finds the thread checkpointing: the next one tries again), of 4 KiB
     * and a 24-byte header */
    if (most >= (off_t)(16000 + 1000) * 4120)
        fail_msg("the WAL grew to %lld bytes", (long long)most);
    unsigned long runs = ledger_checkpoints(f->l, &by_commits);
    assert_true(by_commits > 0);
    /* about one a 1000 frames: a WAL that cannot start over is long at
     * every commit, and is not checkpointed (and fsynced) at each */
    if (runs + by_commits > 50)
        fail_msg("%lu checkpoints by the thread and %lu by commits for "
                 "about 40,000 frames", runs, by_commits);
}

/* ledger/checkpointer_refused: rs_sqlckpt_start refuses a database with
 * no file (RS_EINVAL, nothing started, the connection's own checkpoints
 * left as they were); stopping none is a no-op. */
static void
test_checkpointer_refused(void **state)
{
    (void)state;
    sqlite3 *db = NULL;
    struct rs_sqlckpt *c = (struct rs_sqlckpt *)&db;   /* must be reset */
    sqlite3_stmt *q = NULL;

    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    assert_int_equal(rs_sqlckpt_start(db, 0, 1000, &c), RS_EINVAL);
    assert_null(c);
    rs_sqlckpt_stop(c);
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA wal_autocheckpoint", -1,
                                        &q, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(q, 0), 1000);
    sqlite3_finalize(q);
    sqlite3_close(db);
}

#define TS(name, fn) { name, fn, fx_setup, fx_teardown, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TS("ledger/create_reopen", test_create_reopen),
        TS("ledger/checkpoints_in_a_thread", test_checkpoints_in_a_thread),
        TS("ledger/wal_bounded", test_wal_bounded),
        TS("ledger/checkpointer_refused", test_checkpointer_refused),
        TS("ledger/refuses_foreign_and_newer", test_refuses_foreign_and_newer),
        TS("ledger/one_writer", test_one_writer),
        TS("ledger/readonly_missing", test_readonly_missing),
        TS("ledger/corrupt_file", test_corrupt_file),
        TS("ledger/transactions_nest", test_transactions),
        TS("ledger/meta_and_gen", test_meta_and_gen),
        TS("ledger/positions", test_positions),
        TS("ledger/clear_future", test_clear_future),
        TS("ledger/resources_and_tombstones", test_resources),
        TS("ledger/res_put_many", test_res_put_many),
        TS("ledger/unseen_walk_writes", test_unseen_walk),
        TS("ledger/todo_upsert_supersedes", test_todo_upsert),
        TS("ledger/todo_due_order", test_todo_order),
        TS("ledger/todo_keeps_place", test_todo_keeps_place),
        TS("ledger/upgrade_from_1", test_upgrade_from_1),
        TS("ledger/todo_first_round", test_todo_first_round),
        TS("ledger/todo_failed", test_todo_failed),
        TS("ledger/todo_paging", test_todo_paging),
        TS("ledger/crash_mid_transaction", test_crash_mid_txn),
        TS("ledger/kill_while_running", test_kill_while_running),
        TS("ledger/disk_full", test_disk_full),
        TS("ledger/io_error_words", test_io_error_words),
        TS("ledger/rolled_back_by_sqlite", test_rolled_back_by_sqlite),
        TS("ledger/hostile_arguments", test_hostile),
        TS("ledger/alloc_failures", test_alloc_failures),
        TS("ledger/throughput", test_throughput),
    };
    return cmocka_run_group_tests_name("sub_ledger", tests, NULL, NULL);
}
