/*
 * ledger.c - rssub's SQLite database: the writer lock, schema and its
 * version, nested transactions, the statement cache and every query. It
 * stores and hands back rows; which change wins and when a job is retried
 * are decided by the engine (apply.c) and the pullers.
 */
#include "ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "rs_alloc.h"
#include "rs_sqlckpt.h"
#include "rs_sqlite.h"

#define LG_APP_ID 0x72537562     /* "rSub": PRAGMA application_id */
#define LG_BUSY_MS 5000
#define LG_CKPT_FRAMES 1000      /* frames committed a checkpoint, on the
                                    checkpointer's thread (SQLite's
                                    default, on the committing one) */
#define LG_MAX_COLS 5            /* text columns of one row */

enum lg_stmt {
    LG_BEGIN,
    LG_BEGIN_READ,
    LG_COMMIT,
    LG_ROLLBACK,
    LG_SAVEPOINT,
    LG_RELEASE,
    LG_ROLLBACK_TO,
    LG_META_GET,
    LG_META_SET,
    LG_META_DEL,
    LG_GEN_NEXT,
    LG_POS_GET,
    LG_POS_SET,
    LG_POS_PAGE,
    LG_RES_GET,
    LG_RES_PUT,
    LG_RES_PUT_MANY,
    LG_RES_MARK,
    LG_RES_PAGE_ALL,
    LG_RES_PAGE_LIVE,
    LG_RES_PAGE_UNSEEN,
    LG_RES_COUNT,
    LG_RES_ANY,
    LG_TODO_PUT,
    LG_TODO_GET,
    LG_TODO_DONE,
    LG_TODO_RETRY,
    LG_TODO_FAIL,
    LG_TODO_AT,
    LG_TODO_AFTER,
    LG_TODO_NEXT_DUE,
    LG_TODO_DUE_AFTER,
    LG_TODO_MAX_SEQ,
    LG_TODO_DUE_UPTO,
    LG_TODO_COUNT,
    LG_TODO_REQUEUE,
    LG_FUTURE_RES,
    LG_FUTURE_TODO,
    LG_FUTURE_POS,
    LG_FUTURE_SOURCES,
    LG_COUNT_,
};

#define RES_COLS "uri, path, lastmod, change_dt, length, hash, etag, " \
                 "last_modified, deleted, gen"
/* LEDGER_RES_BATCH rows of RES_COLS' ten values (ledger_res_put_many). */
#define RES_ROW "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
#define RES_ROWS4 RES_ROW ", " RES_ROW ", " RES_ROW ", " RES_ROW
#define RES_ROWS16 RES_ROWS4 ", " RES_ROWS4 ", " RES_ROWS4 ", " RES_ROWS4
#define RES_ROWS32 RES_ROWS16 ", " RES_ROWS16
_Static_assert(LEDGER_RES_BATCH == 32, "LG_RES_PUT_MANY binds 32 rows");
#define TODO_COLS "seq, uri, change, change_dt, lastmod, length, hash, " \
                  "origin, attempts, not_before, last_error, failed, pos"

/*
 * Due rows are walked on the index (failed, not_before, pos) by keyset
 * paging from a cursor (nb, pos). SQLite does not seek an index with a
 * row-value comparison "(not_before, pos) > (?, ?)" (it scans from
 * not_before >= ?), so the walk is two seeks: the rest of the cursor's
 * not_before (LG_TODO_AT), then the later ones (LG_TODO_AFTER). The queue
 * of rows due at once is LG_TODO_AT alone (not_before 0); the queue of
 * retries starts after 0. Parameters: ?1 failed, ?2 cursor not_before,
 * ?3 cursor pos, ?4 limit, ?5 now. LG_TODO_AT must not also say
 * "not_before <= ?5": the planner then takes that range and sorts every
 * due row (10 ms a page at 100,000 rows); whether the cursor's not_before
 * is due is checked in C.
 */
static const char *const lg_sql[LG_COUNT_] = {
    [LG_BEGIN] = "BEGIN IMMEDIATE",
    [LG_BEGIN_READ] = "BEGIN DEFERRED",
    [LG_COMMIT] = "COMMIT",
    [LG_ROLLBACK] = "ROLLBACK",
    [LG_SAVEPOINT] = "SAVEPOINT ledger",
    [LG_RELEASE] = "RELEASE ledger",
    [LG_ROLLBACK_TO] = "ROLLBACK TO ledger",
    [LG_META_GET] = "SELECT val FROM meta WHERE key = ?1",
    [LG_META_SET] = "INSERT OR REPLACE INTO meta(key, val) VALUES (?1, ?2)",
    [LG_META_DEL] = "DELETE FROM meta WHERE key = ?1",
    [LG_GEN_NEXT] = "INSERT INTO meta(key, val) VALUES ('gen', '1') "
                    "ON CONFLICT(key) DO UPDATE SET "
                    "val = CAST(val AS INTEGER) + 1 "
                    "RETURNING CAST(val AS INTEGER)",
    [LG_POS_GET] = "SELECT channel, id, dt, updated_at FROM pos "
                   "WHERE channel = ?1",
    [LG_POS_SET] = "INSERT OR REPLACE INTO pos(channel, id, dt, updated_at) "
                   "VALUES (?1, ?2, ?3, ?4)",
    [LG_POS_PAGE] = "SELECT channel, id, dt, updated_at FROM pos "
                    "WHERE channel > ?1 ORDER BY channel LIMIT ?2",
    [LG_RES_GET] = "SELECT " RES_COLS " FROM res WHERE uri = ?1",
    [LG_RES_PUT] = "INSERT OR REPLACE INTO res(" RES_COLS ") VALUES "
                   "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    [LG_RES_PUT_MANY] = "INSERT OR REPLACE INTO res(" RES_COLS ") VALUES "
                        RES_ROWS32,
    [LG_RES_MARK] = "UPDATE res SET gen = ?2 WHERE uri = ?1",
    [LG_RES_PAGE_ALL] = "SELECT " RES_COLS " FROM res WHERE uri > ?1 "
                        "ORDER BY uri LIMIT ?2",
    [LG_RES_PAGE_LIVE] = "SELECT " RES_COLS " FROM res WHERE uri > ?1 "
                         "AND deleted = 0 ORDER BY uri LIMIT ?2",
    [LG_RES_PAGE_UNSEEN] = "SELECT " RES_COLS " FROM res WHERE uri > ?1 "
                           "AND deleted = 0 AND gen < ?3 ORDER BY uri "
                           "LIMIT ?2",
    [LG_RES_COUNT] = "SELECT coalesce(sum(deleted = 0), 0), "
                     "coalesce(sum(deleted != 0), 0) FROM res",
    [LG_RES_ANY] = "SELECT 1 FROM res LIMIT 1",
    /* REPLACE deletes the uri's old row: the new one gets a fresh seq
     * (AUTOINCREMENT: never one used before, even after deletes), so a
     * job holding the old seq can tell it was superseded. It keeps the
     * pos of an old row not failed; any other put takes the seq it is
     * given, which AUTOINCREMENT makes one more than the larger of
     * sqlite_sequence's and the largest seq: unique, and after every pos
     * there is. */
    [LG_TODO_PUT] = "INSERT OR REPLACE INTO todo(uri, change, change_dt, "
                    "lastmod, length, hash, origin, attempts, not_before, "
                    "last_error, failed, pos) VALUES (?1, ?2, ?3, ?4, ?5, "
                    "?6, ?7, 0, ?8, NULL, 0, coalesce("
                    "(SELECT pos FROM todo WHERE uri = ?1 AND failed = 0), "
                    "max(coalesce((SELECT seq FROM sqlite_sequence "
                    "WHERE name = 'todo'), 0), "
                    "coalesce((SELECT max(seq) FROM todo), 0)) + 1))",
    [LG_TODO_GET] = "SELECT " TODO_COLS " FROM todo WHERE uri = ?1",
    [LG_TODO_DONE] = "DELETE FROM todo WHERE uri = ?1 AND seq = ?2",
    [LG_TODO_RETRY] = "UPDATE todo SET attempts = attempts + 1, "
                      "not_before = ?3, last_error = ?4 "
                      "WHERE uri = ?1 AND seq = ?2",
    [LG_TODO_FAIL] = "UPDATE todo SET attempts = attempts + 1, failed = 1, "
                     "not_before = ?3, last_error = ?4 "
                     "WHERE uri = ?1 AND seq = ?2",
    [LG_TODO_AT] = "SELECT " TODO_COLS " FROM todo WHERE failed = ?1 AND "
                   "not_before = ?2 AND pos > ?3 ORDER BY pos LIMIT ?4",
    [LG_TODO_AFTER] = "SELECT " TODO_COLS " FROM todo WHERE failed = ?1 AND "
                      "not_before > ?2 AND not_before <= ?5 "
                      "ORDER BY not_before, pos LIMIT ?4",
    [LG_TODO_NEXT_DUE] = "SELECT min(not_before) FROM todo WHERE failed = 0",
    [LG_TODO_DUE_AFTER] = "SELECT min(not_before) FROM todo WHERE "
                          "failed = 0 AND not_before > ?1",
    [LG_TODO_MAX_SEQ] = "SELECT coalesce(max(seq), 0) FROM todo",
    [LG_TODO_DUE_UPTO] = "SELECT EXISTS(SELECT 1 FROM todo WHERE seq <= ?1 "
                         "AND failed = 0 AND not_before <= ?2)",
    [LG_TODO_COUNT] = "SELECT coalesce(sum(failed = 0 AND not_before <= ?1), "
                      "0), coalesce(sum(failed = 0 AND not_before > ?1), 0), "
                      "coalesce(sum(failed != 0), 0) FROM todo",
    [LG_TODO_REQUEUE] = "UPDATE todo SET failed = 0, attempts = 0, "
                        "not_before = ?1 WHERE failed = 1",
    [LG_FUTURE_RES] = "UPDATE res SET change_dt = NULL WHERE change_dt > ?1",
    [LG_FUTURE_TODO] = "UPDATE todo SET change_dt = NULL "
                       "WHERE change_dt > ?1",
    [LG_FUTURE_POS] = "UPDATE pos SET dt = NULL WHERE dt > ?1",
    [LG_FUTURE_SOURCES] = "UPDATE pos SET dt = NULL WHERE dt IS NOT NULL "
                          "AND substr(channel, -length(?1)) = ?1",
};

/* Version 2. Times are rs_time_t microseconds, NULL for RS_TIME_NONE.
 * Rows keyed by uri are WITHOUT ROWID: one B-tree per write, not two.
 * A todo row's pos is its place in the queue (ledger.h); version 1 had
 * none, and its queue went by seq (lg_upgrade_1). */
static const char lg_schema[] =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, val TEXT NOT NULL) "
    "  WITHOUT ROWID;"
    "CREATE TABLE pos(channel TEXT PRIMARY KEY, id TEXT, dt INTEGER, "
    "  updated_at INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE res(uri TEXT PRIMARY KEY, path TEXT, lastmod INTEGER, "
    "  change_dt INTEGER, length INTEGER NOT NULL, hash TEXT, etag TEXT, "
    "  last_modified TEXT, deleted INTEGER NOT NULL, gen INTEGER NOT NULL) "
    "  WITHOUT ROWID;"
    "CREATE TABLE todo(seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "  uri TEXT NOT NULL UNIQUE, "
    "  change INTEGER NOT NULL CHECK (change BETWEEN 1 AND 3), "
    "  change_dt INTEGER, lastmod INTEGER, length INTEGER NOT NULL, "
    "  hash TEXT, origin TEXT, attempts INTEGER NOT NULL, "
    "  not_before INTEGER NOT NULL, last_error TEXT, "
    "  failed INTEGER NOT NULL, pos INTEGER NOT NULL);"
    "CREATE INDEX todo_due ON todo(failed, not_before, pos);";

/* Version 1 to 2: the queue kept its order (pos = seq). */
static const char lg_upgrade_1[] =
    "ALTER TABLE todo ADD COLUMN pos INTEGER NOT NULL DEFAULT 0;"
    "UPDATE todo SET pos = seq;"
    "DROP INDEX todo_due;"
    "CREATE INDEX todo_due ON todo(failed, not_before, pos);"
    "PRAGMA user_version = 2;";

/* A reader must not change the file: to it, a version 1 todo table has
 * its pos (the temp schema is searched before main, and it is not the
 * file's). Its walks then scan and sort, which a reader's few can
 * afford. */
static const char lg_reader_1[] =
    "CREATE TEMP VIEW todo AS SELECT *, seq AS pos FROM main.todo;";

struct ledger {
    sqlite3 *db;
    sqlite3_stmt *stmt[LG_COUNT_];   /* prepared on first use */
    int lockfd;                /* writer: flock'ed, holds our pid; -1 */
    unsigned depth;            /* open transaction levels */
    bool lost;                 /* SQLite rolled the open transaction back
                                  on its own: writes refused until the
                                  outermost level is ended */
    bool readonly;
    uint64_t todo_rows;        /* read by todo walks (ledger_todo_rows_read) */
    struct rs_sqlckpt *ckpt;   /* a writer's checkpointer; NULL: none */
    char errstr[256];
};

/* ------------------------------------------------------------- errors */

static int
lg_code(int src)
{
    switch (src & 0xff) {
    case SQLITE_NOMEM:
        return RS_ENOMEM;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return RS_EAGAIN;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return RS_EINVAL;
    case SQLITE_TOOBIG:
        return RS_ETOOBIG;
    default:
        return RS_EIO;
    }
}

__attribute__((format(printf, 3, 4))) static int
lg_err(struct ledger *l, int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(l->errstr, sizeof(l->errstr), fmt, ap);
    va_end(ap);
    return rc;
}

/* A failed SQLite call: keep its message, map its code. */
static int
lg_fail(struct ledger *l, int src, const char *what)
{
    int e = errno;                     /* the failing call's, if any */
    /* SQLite may have rolled back the whole transaction (disk full, I/O
     * error): what follows must not commit piecemeal. */
    if (l->depth > 0 && sqlite3_get_autocommit(l->db))
        l->lost = true;
    char m[256];
    return lg_err(l, lg_code(src), "%s: %s", what,
                  rs_sql_errmsg(l->db, e, m, sizeof(m)));
}

/* Refuse writes on a reader, and after SQLite dropped the transaction. */
static int
lg_writable(struct ledger *l, const char *what)
{
    if (l->readonly)
        return lg_err(l, RS_ESTATE, "%s: read-only handle", what);
    if (l->depth > 0 && (l->lost || sqlite3_get_autocommit(l->db))) {
        l->lost = true;
        return lg_err(l, RS_ESTATE, "%s: the transaction was rolled back "
                      "after an earlier error; end it first", what);
    }
    return 0;
}

/* A text argument: required ones non-empty, all within max bytes. */
static int
lg_text(struct ledger *l, const char *what, const char *s, size_t max,
        bool required)
{
    if (s == NULL || s[0] == '\0') {
        if (required)
            return lg_err(l, RS_EINVAL, "%s: empty", what);
        return 0;
    }
    if (strnlen(s, max + 1) > max)
        return lg_err(l, RS_ETOOBIG, "%s: longer than %zu bytes", what, max);
    return 0;
}

/* ---------------------------------------------------------- statements */

/* The cached statement, prepared on first use. */
static int
lg_prep(struct ledger *l, enum lg_stmt which, sqlite3_stmt **out)
{
    int src;

    *out = l->stmt[which];
    if (*out != NULL)
        return 0;
    src = sqlite3_prepare_v3(l->db, lg_sql[which], -1,
                             SQLITE_PREPARE_PERSISTENT, out, NULL);
    if (src != SQLITE_OK) {
        *out = NULL;
        return lg_fail(l, src, "prepare");
    }
    l->stmt[which] = *out;
    return 0;
}

static void
lg_done(sqlite3_stmt *s)
{
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
}

/* Run a statement whose rows (if any) are not wanted. */
static int
lg_run(struct ledger *l, sqlite3_stmt *s, const char *what)
{
    int src = sqlite3_step(s);
    int rc = 0;

    if (src != SQLITE_DONE && src != SQLITE_ROW)
        rc = lg_fail(l, src, what);
    lg_done(s);
    return rc;
}

static int
lg_exec(struct ledger *l, enum lg_stmt which, const char *what)
{
    sqlite3_stmt *s;
    int rc = lg_prep(l, which, &s);

    return rc == 0 ? lg_run(l, s, what) : rc;
}

static void
bind_text(sqlite3_stmt *s, int i, const char *t)
{
    if (t != NULL)
        sqlite3_bind_text(s, i, t, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(s, i);
}

/* Due times are never negative, so that the cursor {0, 0} is before
 * every row. */
static int64_t
clamp_due(rs_time_t t)
{
    return t == RS_TIME_NONE || t < 0 ? 0 : t;
}

/* Bytes of err to store: at most LEDGER_ERROR_MAX, not cutting a UTF-8
 * sequence in two. */
static int
err_len(const char *err)
{
    size_t n = strnlen(err, LEDGER_ERROR_MAX + 1);

    if (n > LEDGER_ERROR_MAX) {
        n = LEDGER_ERROR_MAX;
        while (n > 0 && ((unsigned char)err[n] & 0xc0) == 0x80)
            n--;
    }
    return (int)n;
}

/*
 * Copy the text columns cols[0..n) of the current row into one
 * allocation, *buf, and point *dst[i] into it (NULL for an SQL NULL).
 */
static int
lg_copy(struct ledger *l, sqlite3_stmt *s, const int *cols,
        const char **const *dst, size_t n, char **buf)
{
    const unsigned char *txt[LG_MAX_COLS];
    size_t len[LG_MAX_COLS], total = 1;
    char *b, *p;

    for (size_t i = 0; i < n; i++) {
        txt[i] = NULL;
        len[i] = 0;
        if (sqlite3_column_type(s, cols[i]) == SQLITE_NULL)
            continue;
        txt[i] = sqlite3_column_text(s, cols[i]);
        if (txt[i] == NULL)
            return lg_err(l, RS_ENOMEM, "read: out of memory");
        len[i] = (size_t)sqlite3_column_bytes(s, cols[i]);
        total += len[i] + 1;
    }
    b = p = rs_malloc(total);
    if (b == NULL)
        return lg_err(l, RS_ENOMEM, "read: out of memory");
    for (size_t i = 0; i < n; i++) {
        if (txt[i] == NULL) {
            *dst[i] = NULL;
            continue;
        }
        memcpy(p, txt[i], len[i]);
        p[len[i]] = '\0';
        *dst[i] = p;
        p += len[i] + 1;
    }
    *buf = b;
    return 0;
}

/* -------------------------------------------------------------- rows */

static int
pos_read(struct ledger *l, sqlite3_stmt *s, struct ledger_pos *p, char **buf)
{
    static const int cols[] = { 0, 1 };
    const char **const dst[] = { &p->channel, &p->id };

    p->dt = rs_sql_col_time(s, 2);
    p->updated_at = rs_sql_col_time(s, 3);
    return lg_copy(l, s, cols, dst, 2, buf);
}

static int
res_read(struct ledger *l, sqlite3_stmt *s, struct ledger_res *r, char **buf)
{
    static const int cols[] = { 0, 1, 5, 6, 7 };
    const char **const dst[] = { &r->uri, &r->path, &r->hash, &r->etag,
                                 &r->last_modified };

    r->lastmod = rs_sql_col_time(s, 2);
    r->change_dt = rs_sql_col_time(s, 3);
    r->length = sqlite3_column_int64(s, 4);
    r->deleted = sqlite3_column_int(s, 8) != 0;
    r->gen = sqlite3_column_int64(s, 9);
    return lg_copy(l, s, cols, dst, 5, buf);
}

static int
todo_read(struct ledger *l, sqlite3_stmt *s, struct ledger_todo *t,
          char **buf)
{
    static const int cols[] = { 1, 6, 7, 10 };
    const char **const dst[] = { &t->uri, &t->hash, &t->origin,
                                 &t->last_error };

    t->seq = sqlite3_column_int64(s, 0);
    t->change = (enum ledger_change)sqlite3_column_int(s, 2);
    t->change_dt = rs_sql_col_time(s, 3);
    t->lastmod = rs_sql_col_time(s, 4);
    t->length = sqlite3_column_int64(s, 5);
    t->attempts = sqlite3_column_int(s, 8);
    t->not_before = sqlite3_column_int64(s, 9);
    t->failed = sqlite3_column_int(s, 11) != 0;
    t->pos = sqlite3_column_int64(s, 12);
    return lg_copy(l, s, cols, dst, 4, buf);
}

/*
 * A page of rows: read up to cap rows of a statement (already bound),
 * copied, then the statement is reset, so the callbacks run with no
 * statement of ours active.
 */
struct page {
    size_t n;
    char *bufs[LEDGER_PAGE];
    union {
        struct ledger_pos pos[LEDGER_PAGE];
        struct ledger_res res[LEDGER_PAGE];
        struct ledger_todo todo[LEDGER_PAGE];
    } u;
};

enum page_kind { PAGE_POS, PAGE_RES, PAGE_TODO };

static void
page_clear(struct page *pg)
{
    for (size_t i = 0; i < pg->n; i++)
        rs_free(pg->bufs[i]);
    pg->n = 0;
}

/* The current row of s into out, a struct ledger_pos, _res or _todo as
 * kind says; its strings in a new *buf. */
static int
row_read(struct ledger *l, sqlite3_stmt *s, enum page_kind kind, void *out,
         char **buf)
{
    return kind == PAGE_POS ? pos_read(l, s, out, buf)
           : kind == PAGE_RES ? res_read(l, s, out, buf)
                              : todo_read(l, s, out, buf);
}

/* The one row statement which finds for uri (RS_ENOTFOUND: none). */
static int
get_by_uri(struct ledger *l, enum lg_stmt which, enum page_kind kind,
           const char *uri, void *out, char **buf, const char *what)
{
    sqlite3_stmt *s = NULL;
    int rc, src;

    *buf = NULL;
    rc = lg_text(l, "uri", uri, LEDGER_URI_MAX, true);
    if (rc == 0)
        rc = lg_prep(l, which, &s);
    if (rc != 0)
        return rc;
    bind_text(s, 1, uri);
    src = sqlite3_step(s);
    if (src == SQLITE_ROW)
        rc = row_read(l, s, kind, out, buf);
    else if (src == SQLITE_DONE)
        rc = RS_ENOTFOUND;
    else
        rc = lg_fail(l, src, what);
    lg_done(s);
    return rc;
}

static int
page_read(struct ledger *l, sqlite3_stmt *s, enum page_kind kind,
          size_t cap, struct page *pg, const char *what)
{
    int rc = 0;

    pg->n = 0;
    while (rc == 0 && pg->n < cap) {
        size_t i = pg->n;
        int src = sqlite3_step(s);
        if (src == SQLITE_DONE)
            break;
        if (src != SQLITE_ROW)
            rc = lg_fail(l, src, what);
        else
            rc = row_read(l, s, kind,
                          kind == PAGE_POS ? (void *)&pg->u.pos[i]
                          : kind == PAGE_RES ? (void *)&pg->u.res[i]
                                             : (void *)&pg->u.todo[i],
                          &pg->bufs[i]);
        if (rc == 0)
            pg->n++;
    }
    lg_done(s);
    if (rc != 0)
        page_clear(pg);
    return rc;
}

/* --------------------------------------------------------- open/close */

__attribute__((format(printf, 3, 4))) static void
open_err(char *err, size_t errsz, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || errsz == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errsz, fmt, ap);
    va_end(ap);
}

/* The lock file of the state at path: beside the file the path leads
 * to, so that every spelling of one state (a symlink, "dir/../x.db")
 * takes one lock. The state may not exist yet: then its directory is
 * resolved. rs_free it; NULL when out of memory. */
static char *
lg_lock_path(const char *path)
{
    char *real = realpath(path, NULL), *lp = NULL;
    char dir[PATH_MAX], base[PATH_MAX];

    if (real == NULL && errno == ENOENT) {
        snprintf(dir, sizeof(dir), "%s", path);
        snprintf(base, sizeof(base), "%s", path);
        char *d = realpath(dirname(dir), NULL);
        const char *b = basename(base);
        size_t n = d != NULL ? strlen(d) + strlen(b) + 2 : 0;
        if (d != NULL && (real = malloc(n)) != NULL)
            snprintf(real, n, "%s/%s", strcmp(d, "/") == 0 ? "" : d, b);
        free(d);
    }
    const char *use = real != NULL ? real : path;
    size_t n = strlen(use);
    if ((lp = rs_malloc(n + sizeof(".lock"))) != NULL) {
        memcpy(lp, use, n);
        memcpy(lp + n, ".lock", sizeof(".lock"));
    }
    free(real);
    return lp;
}

/*
 * One writer per state: SQLite's own locks last a transaction, and two
 * daemons taking turns would each apply changes the other one's
 * positions do not cover. The lock file holds the holder's pid so the
 * refusal can name it.
 */
static int
lg_lock(struct ledger *l, const char *path, char *err, size_t errsz)
{
    char *lp = lg_lock_path(path);
    char pid[32];
    int rc = 0;

    if (lp == NULL) {
        open_err(err, errsz, "out of memory");
        return RS_ENOMEM;
    }
    l->lockfd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (l->lockfd < 0) {
        open_err(err, errsz, "%s: %s", lp, strerror(errno));
        rc = RS_EIO;
    } else if (flock(l->lockfd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e == EWOULDBLOCK) {
            ssize_t got = pread(l->lockfd, pid, sizeof(pid) - 1, 0);
            char *end = NULL;
            long holder = 0;
            if (got > 0) {
                pid[got] = '\0';
                holder = strtol(pid, &end, 10);
            }
            if (holder > 0 && end != pid)
                open_err(err, errsz, "%s: in use by another rssub (pid %ld)",
                         path, holder);
            else
                open_err(err, errsz, "%s: in use by another rssub", path);
            rc = RS_ESTATE;
        } else {
            open_err(err, errsz, "%s: flock: %s", lp, strerror(e));
            rc = RS_EIO;
        }
        close(l->lockfd);
        l->lockfd = -1;
    } else {
        int len = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
        /* Only informs the refusal message: failure is harmless. */
        if (ftruncate(l->lockfd, 0) != 0 ||
            pwrite(l->lockfd, pid, (size_t)len, 0) != len)
            (void)0;
    }
    rs_free(lp);
    return rc;
}

/* One integer from a PRAGMA or a count. */
static int
lg_int(struct ledger *l, const char *sql, int64_t *out)
{
    sqlite3_stmt *s = NULL;
    int src = sqlite3_prepare_v2(l->db, sql, -1, &s, NULL);

    if (src == SQLITE_OK) {
        src = sqlite3_step(s);
        if (src == SQLITE_ROW) {
            *out = sqlite3_column_int64(s, 0);
            src = SQLITE_OK;
        }
    }
    if (src != SQLITE_OK) {
        char m[256];
        (void)lg_err(l, lg_code(src), "%s",
                     rs_sql_errmsg(l->db, errno, m, sizeof(m)));
    }
    sqlite3_finalize(s);
    return src == SQLITE_OK ? 0 : lg_code(src);
}

/* Is this file ours, and of a version we know? *ver: its version, 0 when
 * it is empty, to be given the schema. */
static int
lg_check(struct ledger *l, const char *path, int64_t *ver_out, char *err,
         size_t errsz)
{
    int64_t app = 0, ver = 0, objects = 0;
    int rc;

    *ver_out = 0;
    rc = lg_int(l, "PRAGMA application_id", &app);
    if (rc == 0)
        rc = lg_int(l, "PRAGMA user_version", &ver);
    if (rc == 0)
        rc = lg_int(l, "SELECT count(*) FROM sqlite_master", &objects);
    if (rc == RS_EINVAL) {
        open_err(err, errsz, "%s: not an rssub state database, or a "
                 "corrupt one (%s)", path, l->errstr);
        return rc;
    }
    if (rc != 0) {
        open_err(err, errsz, "%s: %s", path, l->errstr);
        return rc;
    }
    if (app == 0 && ver == 0 && objects == 0) {
        if (l->readonly) {
            open_err(err, errsz, "%s: no rssub state yet", path);
            return RS_ENOTFOUND;
        }
        return 0;
    }
    if (app != LG_APP_ID) {
        open_err(err, errsz, "%s: not an rssub state database (another "
                 "program's SQLite file)", path);
        return RS_EINVAL;
    }
    if (ver > LEDGER_SCHEMA) {
        open_err(err, errsz, "%s: state schema version %lld is newer than "
                 "this rssub knows (%d): use a newer rssub", path,
                 (long long)ver, LEDGER_SCHEMA);
        return RS_EUNSUPPORTED;
    }
    if (ver < 1) {
        open_err(err, errsz, "%s: rssub state without a schema version: "
                 "corrupt", path);
        return RS_EINVAL;
    }
    *ver_out = ver;
    return 0;
}

/* Run the scripts a and b (NULL: none) in one transaction. */
static int
lg_script(struct ledger *l, const char *path, const char *what,
          const char *a, const char *b, char *err, size_t errsz)
{
    char *msg = NULL;
    int src = sqlite3_exec(l->db, "BEGIN IMMEDIATE", NULL, NULL, &msg);

    if (src == SQLITE_OK)
        src = sqlite3_exec(l->db, a, NULL, NULL, &msg);
    if (src == SQLITE_OK && b != NULL)
        src = sqlite3_exec(l->db, b, NULL, NULL, &msg);
    if (src == SQLITE_OK)
        src = sqlite3_exec(l->db, "COMMIT", NULL, NULL, &msg);
    if (src != SQLITE_OK) {
        open_err(err, errsz, "%s: %s: %s", path, what,
                 msg != NULL ? msg : sqlite3_errstr(src));
        sqlite3_free(msg);
        if (!sqlite3_get_autocommit(l->db))
            (void)sqlite3_exec(l->db, "ROLLBACK", NULL, NULL, NULL);
        return lg_code(src);
    }
    return 0;
}

static int
lg_create(struct ledger *l, const char *path, char *err, size_t errsz)
{
    char pragmas[96];

    snprintf(pragmas, sizeof(pragmas), "PRAGMA user_version = %d; "
             "PRAGMA application_id = %d;", LEDGER_SCHEMA, LG_APP_ID);
    return lg_script(l, path, "creating the schema", lg_schema, pragmas,
                     err, errsz);
}

static int
lg_setup(struct ledger *l, const char *path, unsigned flags, char *err,
         size_t errsz)
{
    char pragmas[256];
    char *msg = NULL;
    int64_t ver;
    int rc, src;

    rc = lg_check(l, path, &ver, err, errsz);
    if (rc != 0)
        return rc;
    if (l->readonly && ver == 1 &&
        (src = sqlite3_exec(l->db, lg_reader_1, NULL, NULL, &msg)) !=
        SQLITE_OK) {
        open_err(err, errsz, "%s: reading a version 1 state: %s", path,
                 msg != NULL ? msg : sqlite3_errstr(src));
        sqlite3_free(msg);
        return lg_code(src);
    }
    /* WAL: `rssub status` reads beside the writer without blocking it.
     * synchronous=NORMAL: commits do not fsync (only checkpoints do); a
     * killed process loses nothing committed, a power cut at most the
     * last commits, whole and in order, which the engine redoes. */
    if (l->readonly)
        snprintf(pragmas, sizeof(pragmas),
                 "PRAGMA query_only = 1; PRAGMA cache_size = -8000;");
    else
        snprintf(pragmas, sizeof(pragmas),
                 "PRAGMA journal_mode = WAL; PRAGMA synchronous = %s; "
                 "PRAGMA cache_size = -32000; PRAGMA temp_store = MEMORY; "
                 "PRAGMA journal_size_limit = 67108864;",
                 (flags & LEDGER_SYNC_FULL) ? "FULL" : "NORMAL");
    src = sqlite3_exec(l->db, pragmas, NULL, NULL, &msg);
    if (src != SQLITE_OK) {
        open_err(err, errsz, "%s: %s", path,
                 msg != NULL ? msg : sqlite3_errstr(src));
        sqlite3_free(msg);
        return lg_code(src);
    }
    if (ver == 0)
        return lg_create(l, path, err, errsz);
    if (ver == 1 && !l->readonly)
        return lg_script(l, path, "upgrading the schema to version 2",
                         lg_upgrade_1, NULL, err, errsz);
    return 0;
}

long
ledger_writer_pid(const char *path)
{
    char *lp = lg_lock_path(path);
    char buf[32], *end = NULL;
    long pid = 0;
    ssize_t got = -1;
    int fd;

    if (lp == NULL)
        return 0;
    if ((fd = open(lp, O_RDONLY | O_CLOEXEC)) >= 0) {
        got = pread(fd, buf, sizeof(buf) - 1, 0);
        close(fd);
    }
    rs_free(lp);
    if (got <= 0)
        return 0;
    buf[got] = '\0';
    pid = strtol(buf, &end, 10);
    if (end == buf || pid <= 0 || pid == (long)getpid())
        return 0;
    return kill((pid_t)pid, 0) == 0 || errno == EPERM ? pid : 0;
}

struct ledger *
ledger_open(const char *path, unsigned flags, char *err, size_t errsz)
{
    struct ledger *l;
    int rc = 0, oflags;

    open_err(err, errsz, "%s", "");
    if (path == NULL || path[0] == '\0') {
        open_err(err, errsz, "no state path given");
        return NULL;
    }
    l = rs_calloc(1, sizeof(*l));
    if (l == NULL) {
        open_err(err, errsz, "out of memory");
        return NULL;
    }
    l->lockfd = -1;
    l->readonly = (flags & LEDGER_READONLY) != 0;
    if (l->readonly) {
        if (access(path, F_OK) != 0) {
            open_err(err, errsz, "%s: no rssub state here (%s)", path,
                     strerror(errno));
            rc = RS_ENOTFOUND;
        }
    } else {
        rc = lg_lock(l, path, err, errsz);
    }
    if (rc == 0) {
        oflags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX |
                 (l->readonly ? 0 : SQLITE_OPEN_CREATE);
        int src = sqlite3_open_v2(path, &l->db, oflags, NULL);
        if (src != SQLITE_OK) {
            char m[256];
            open_err(err, errsz, "%s: %s", path, l->db != NULL
                     ? rs_sql_errmsg(l->db, 0, m, sizeof(m))
                     : sqlite3_errstr(src));
            rc = lg_code(src);
        }
    }
    if (rc == 0) {
        sqlite3_busy_timeout(l->db, LG_BUSY_MS);
        rc = lg_setup(l, path, flags, err, errsz);
    }
    if (rc != 0) {
        ledger_close(l);
        return NULL;
    }
    /* SQLite's checkpoints, when the WAL passes 1000 frames, from a thread
     * of their own: a commit that checkpoints copies pages and fsyncs
     * (twice) on rssub's loop, which every fetch and message waits for. */
    if (!l->readonly)
        (void)rs_sqlckpt_start(l->db, 0, LG_CKPT_FRAMES, &l->ckpt);
    l->errstr[0] = '\0';
    return l;
}

void
ledger_close(struct ledger *l)
{
    if (l == NULL)
        return;
    /* first: the last connection's close checkpoints the whole WAL */
    rs_sqlckpt_stop(l->ckpt);
    for (int i = 0; i < LG_COUNT_; i++)
        sqlite3_finalize(l->stmt[i]);
    if (l->db != NULL) {
        if (!sqlite3_get_autocommit(l->db))
            (void)sqlite3_exec(l->db, "ROLLBACK", NULL, NULL, NULL);
        sqlite3_close(l->db);
    }
    if (l->lockfd >= 0) {
        /* no pid in a lock nobody holds */
        if (ftruncate(l->lockfd, 0) != 0)
            (void)0;
        close(l->lockfd);          /* releases the flock */
    }
    rs_free(l);
}

unsigned long
ledger_checkpoints(const struct ledger *l, unsigned long *by_commits)
{
    if (by_commits != NULL)
        *by_commits = 0;
    return l->ckpt != NULL ? rs_sqlckpt_runs(l->ckpt, by_commits) : 0;
}

bool
ledger_checkpointing(const struct ledger *l)
{
    return l->ckpt != NULL;
}

const char *
ledger_errstr(const struct ledger *l)
{
    return l->errstr;
}

/* -------------------------------------------------------- transactions */

int
ledger_begin(struct ledger *l)
{
    int rc;

    if (l->depth > 0 && (l->lost || sqlite3_get_autocommit(l->db))) {
        l->lost = true;
        return lg_err(l, RS_ESTATE, "begin: the transaction was rolled "
                      "back after an earlier error; end it first");
    }
    if (l->depth == 0)
        rc = lg_exec(l, l->readonly ? LG_BEGIN_READ : LG_BEGIN, "begin");
    else
        rc = lg_exec(l, LG_SAVEPOINT, "begin");
    if (rc == 0)
        l->depth++;
    return rc;
}

int
ledger_commit(struct ledger *l)
{
    int rc;

    if (l->depth == 0)
        return lg_err(l, RS_ESTATE, "commit: no transaction open");
    if (l->depth == 1) {
        l->depth = 0;
        if (l->lost || sqlite3_get_autocommit(l->db)) {
            l->lost = false;
            if (!sqlite3_get_autocommit(l->db))
                (void)lg_exec(l, LG_ROLLBACK, "rollback");
            return lg_err(l, RS_ESTATE, "commit: the transaction was rolled "
                          "back after an earlier error");
        }
        rc = lg_exec(l, LG_COMMIT, "commit");
        if (rc != 0 && !sqlite3_get_autocommit(l->db)) {
            char keep[sizeof(l->errstr)];
            memcpy(keep, l->errstr, sizeof(keep));
            (void)lg_exec(l, LG_ROLLBACK, "rollback");
            memcpy(l->errstr, keep, sizeof(keep));
        }
        l->lost = false;
        return rc;
    }
    l->depth--;
    if (l->lost || sqlite3_get_autocommit(l->db)) {
        l->lost = true;
        return lg_err(l, RS_ESTATE, "commit: the transaction was rolled "
                      "back after an earlier error");
    }
    rc = lg_exec(l, LG_RELEASE, "commit");
    if (rc != 0)
        l->lost = true;   /* what this level did is unknown: outer fails */
    return rc;
}

int
ledger_rollback(struct ledger *l)
{
    int rc = 0;

    if (l->depth == 0)
        return lg_err(l, RS_ESTATE, "rollback: no transaction open");
    if (l->depth == 1) {
        l->depth = 0;
        l->lost = false;
        if (!sqlite3_get_autocommit(l->db))
            rc = lg_exec(l, LG_ROLLBACK, "rollback");
        return rc;
    }
    l->depth--;
    if (l->lost || sqlite3_get_autocommit(l->db)) {
        l->lost = true;
        return 0;
    }
    rc = lg_exec(l, LG_ROLLBACK_TO, "rollback");
    if (rc == 0)
        rc = lg_exec(l, LG_RELEASE, "rollback");
    if (rc != 0)
        l->lost = true;
    return rc;
}

/* ---------------------------------------------------------------- meta */

/* A copy of text column i of the current row (rs_free), or NULL for an
 * SQL NULL; RS_ENOMEM. */
static int
col_dup(struct ledger *l, sqlite3_stmt *s, int i, char **out)
{
    const char *t;

    *out = NULL;
    if (sqlite3_column_type(s, i) == SQLITE_NULL)
        return 0;
    t = (const char *)sqlite3_column_text(s, i);
    if (t != NULL)
        *out = rs_strndup(t, (size_t)sqlite3_column_bytes(s, i));
    return *out != NULL ? 0 : lg_err(l, RS_ENOMEM, "read: out of memory");
}

int
ledger_meta_get(struct ledger *l, const char *key, char **val)
{
    sqlite3_stmt *s = NULL;
    int rc, src;

    *val = NULL;
    rc = lg_text(l, "meta key", key, LEDGER_TEXT_MAX, true);
    if (rc == 0)
        rc = lg_prep(l, LG_META_GET, &s);
    if (rc != 0)
        return rc;
    bind_text(s, 1, key);
    src = sqlite3_step(s);
    if (src == SQLITE_ROW)
        rc = col_dup(l, s, 0, val);
    else if (src == SQLITE_DONE)
        rc = RS_ENOTFOUND;
    else
        rc = lg_fail(l, src, "meta get");
    lg_done(s);
    return rc;
}

int
ledger_meta_set(struct ledger *l, const char *key, const char *val)
{
    sqlite3_stmt *s = NULL;
    int rc;

    rc = lg_writable(l, "meta set");
    if (rc == 0)
        rc = lg_text(l, "meta key", key, LEDGER_TEXT_MAX, true);
    if (rc == 0)
        rc = lg_text(l, "meta value", val, LEDGER_META_MAX, false);
    if (rc == 0)
        rc = lg_prep(l, val != NULL ? LG_META_SET : LG_META_DEL, &s);
    if (rc != 0)
        return rc;
    bind_text(s, 1, key);
    if (val != NULL)
        bind_text(s, 2, val);
    return lg_run(l, s, "meta set");
}

int
ledger_gen_next(struct ledger *l, int64_t *gen)
{
    sqlite3_stmt *s = NULL;
    int rc, src;

    rc = lg_writable(l, "gen next");
    if (rc == 0)
        rc = lg_prep(l, LG_GEN_NEXT, &s);
    if (rc != 0)
        return rc;
    src = sqlite3_step(s);
    if (src == SQLITE_ROW) {
        *gen = sqlite3_column_int64(s, 0);
        src = sqlite3_step(s);
    }
    rc = src == SQLITE_DONE ? 0 : lg_fail(l, src, "gen next");
    lg_done(s);
    return rc;
}

/* ----------------------------------------------------------- positions */

int
ledger_pos_get(struct ledger *l, const char *channel, char **id,
               rs_time_t *dt)
{
    sqlite3_stmt *s = NULL;
    int rc, src;

    if (id != NULL)
        *id = NULL;
    rc = lg_text(l, "channel", channel, LEDGER_URI_MAX, true);
    if (rc == 0)
        rc = lg_prep(l, LG_POS_GET, &s);
    if (rc != 0)
        return rc;
    bind_text(s, 1, channel);
    src = sqlite3_step(s);
    if (src == SQLITE_ROW) {
        if (dt != NULL)
            *dt = rs_sql_col_time(s, 2);
        if (id != NULL)
            rc = col_dup(l, s, 1, id);
    } else if (src == SQLITE_DONE) {
        rc = RS_ENOTFOUND;
    } else {
        rc = lg_fail(l, src, "position get");
    }
    lg_done(s);
    return rc;
}

int
ledger_pos_set(struct ledger *l, const char *channel, const char *id,
               rs_time_t dt)
{
    sqlite3_stmt *s = NULL;
    int rc;

    rc = lg_writable(l, "position set");
    if (rc == 0)
        rc = lg_text(l, "channel", channel, LEDGER_URI_MAX, true);
    if (rc == 0)
        rc = lg_text(l, "position id", id, LEDGER_TEXT_MAX, false);
    if (rc == 0)
        rc = lg_prep(l, LG_POS_SET, &s);
    if (rc != 0)
        return rc;
    bind_text(s, 1, channel);
    bind_text(s, 2, id);
    rs_sql_bind_time(s, 3, dt);
    sqlite3_bind_int64(s, 4, rs_time_now());
    return lg_run(l, s, "position set");
}

/* A walk's callback, as its kind says. */
union each_cb {
    int (*pos)(void *ud, const struct ledger_pos *p);
    int (*res)(void *ud, const struct ledger_res *r);
};

/* Every row statement which gives, by keyset paging on the primary key
 * (?1 the key to start after, ?2 the page size, ?3 arg3 when it is >= 0):
 * each page is one seek, and the callbacks run with no statement active,
 * so they may write. kind: PAGE_POS or PAGE_RES. */
static int
keyset_each(struct ledger *l, enum lg_stmt which, enum page_kind kind,
            int64_t arg3, union each_cb cb, void *ud, const char *what)
{
    struct page *pg = rs_malloc(sizeof(*pg));
    char *after = NULL;        /* buffer of the last row seen: the cursor */
    const char *after_key = "";
    int rc = 0;

    if (pg == NULL)
        return lg_err(l, RS_ENOMEM, "%s: out of memory", what);
    for (;;) {
        sqlite3_stmt *s = NULL;
        size_t n;
        rc = lg_prep(l, which, &s);
        if (rc != 0)
            break;
        sqlite3_bind_text(s, 1, after_key, -1, SQLITE_STATIC);
        sqlite3_bind_int(s, 2, LEDGER_PAGE);
        if (arg3 >= 0)
            sqlite3_bind_int64(s, 3, arg3);
        rc = page_read(l, s, kind, LEDGER_PAGE, pg, what);
        if (rc != 0)
            break;
        for (size_t i = 0; i < pg->n && rc == 0; i++)
            rc = kind == PAGE_POS ? cb.pos(ud, &pg->u.pos[i])
                                  : cb.res(ud, &pg->u.res[i]);
        n = pg->n;
        rs_free(after);
        after = NULL;
        if (rc == 0 && n == LEDGER_PAGE) {
            after = pg->bufs[n - 1];
            after_key = kind == PAGE_POS ? pg->u.pos[n - 1].channel
                                         : pg->u.res[n - 1].uri;
            pg->n--;
        }
        page_clear(pg);
        if (after == NULL)
            break;
    }
    rs_free(after);
    rs_free(pg);
    return rc;
}

int
ledger_pos_each(struct ledger *l,
                int (*cb)(void *ud, const struct ledger_pos *p), void *ud)
{
    union each_cb u = { .pos = cb };

    return keyset_each(l, LG_POS_PAGE, PAGE_POS, -1, u, ud, "positions");
}

/* ----------------------------------------------------------- resources */

int
ledger_res_get(struct ledger *l, const char *uri, struct ledger_res *out,
               char **buf)
{
    return get_by_uri(l, LG_RES_GET, PAGE_RES, uri, out, buf,
                      "resource get");
}

static int
res_check(struct ledger *l, const struct ledger_res *r)
{
    int rc = lg_text(l, "uri", r->uri, LEDGER_URI_MAX, true);

    if (rc == 0)
        rc = lg_text(l, "path", r->path, LEDGER_TEXT_MAX, false);
    if (rc == 0)
        rc = lg_text(l, "hash", r->hash, LEDGER_TEXT_MAX, false);
    if (rc == 0)
        rc = lg_text(l, "etag", r->etag, LEDGER_TEXT_MAX, false);
    if (rc == 0)
        rc = lg_text(l, "last_modified", r->last_modified, LEDGER_TEXT_MAX,
                     false);
    return rc;
}

/* r's ten values as parameters at + 1 .. at + 10 of s. */
static void
res_bind(sqlite3_stmt *s, int at, const struct ledger_res *r)
{
    bind_text(s, at + 1, r->uri);
    bind_text(s, at + 2, r->path);
    rs_sql_bind_time(s, at + 3, r->lastmod);
    rs_sql_bind_time(s, at + 4, r->change_dt);
    sqlite3_bind_int64(s, at + 5, r->length >= 0 ? r->length : -1);
    bind_text(s, at + 6, r->hash);
    bind_text(s, at + 7, r->etag);
    bind_text(s, at + 8, r->last_modified);
    sqlite3_bind_int(s, at + 9, r->deleted ? 1 : 0);
    sqlite3_bind_int64(s, at + 10, r->gen);
}

int
ledger_res_put(struct ledger *l, const struct ledger_res *r)
{
    sqlite3_stmt *s = NULL;
    int rc;

    rc = lg_writable(l, "resource put");
    if (rc == 0)
        rc = res_check(l, r);
    if (rc == 0)
        rc = lg_prep(l, LG_RES_PUT, &s);
    if (rc != 0)
        return rc;
    res_bind(s, 0, r);
    return lg_run(l, s, "resource put");
}

int
ledger_res_put_many(struct ledger *l, const struct ledger_res *r, size_t n)
{
    sqlite3_stmt *s = NULL;
    size_t i = 0;
    int rc;

    rc = lg_writable(l, "resource put");
    for (size_t k = 0; k < n && rc == 0; k++)
        rc = res_check(l, &r[k]);
    for (; rc == 0 && n - i >= LEDGER_RES_BATCH; i += LEDGER_RES_BATCH) {
        if ((rc = lg_prep(l, LG_RES_PUT_MANY, &s)) != 0)
            break;
        for (int k = 0; k < LEDGER_RES_BATCH; k++)
            res_bind(s, k * 10, &r[i + (size_t)k]);
        rc = lg_run(l, s, "resource put");
    }
    for (; rc == 0 && i < n; i++)
        rc = ledger_res_put(l, &r[i]);
    return rc;
}

int
ledger_res_mark(struct ledger *l, const char *uri, int64_t gen)
{
    sqlite3_stmt *s = NULL;
    int rc;

    rc = lg_writable(l, "resource mark");
    if (rc == 0)
        rc = lg_text(l, "uri", uri, LEDGER_URI_MAX, true);
    if (rc == 0)
        rc = lg_prep(l, LG_RES_MARK, &s);
    if (rc != 0)
        return rc;
    bind_text(s, 1, uri);
    sqlite3_bind_int64(s, 2, gen);
    rc = lg_run(l, s, "resource mark");
    if (rc == 0 && sqlite3_changes(l->db) == 0)
        rc = RS_ENOTFOUND;
    return rc;
}

int
ledger_res_each(struct ledger *l, bool include_deleted,
                int64_t unseen_before_gen,
                int (*cb)(void *ud, const struct ledger_res *r), void *ud)
{
    enum lg_stmt which = unseen_before_gen >= 0 ? LG_RES_PAGE_UNSEEN
                         : include_deleted ? LG_RES_PAGE_ALL
                         : LG_RES_PAGE_LIVE;
    union each_cb u = { .res = cb };

    return keyset_each(l, which, PAGE_RES,
                       which == LG_RES_PAGE_UNSEEN ? unseen_before_gen : -1, u,
                       ud, "resources");
}

bool
ledger_res_none(struct ledger *l)
{
    sqlite3_stmt *s = NULL;
    bool none;

    if (lg_prep(l, LG_RES_ANY, &s) != 0)
        return false;
    none = sqlite3_step(s) == SQLITE_DONE;
    lg_done(s);
    return none;
}

int64_t
ledger_total_changes(struct ledger *l)
{
    return (int64_t)sqlite3_total_changes64(l->db);
}

int
ledger_res_count(struct ledger *l, int64_t *live, int64_t *tombstones)
{
    sqlite3_stmt *s = NULL;
    int rc, src;

    rc = lg_prep(l, LG_RES_COUNT, &s);
    if (rc != 0)
        return rc;
    src = sqlite3_step(s);
    if (src == SQLITE_ROW) {
        if (live != NULL)
            *live = sqlite3_column_int64(s, 0);
        if (tombstones != NULL)
            *tombstones = sqlite3_column_int64(s, 1);
    } else {
        rc = lg_fail(l, src, "resource count");
    }
    lg_done(s);
    return rc;
}

/* ---------------------------------------------------------------- todo */

static int
todo_check(struct ledger *l, const struct ledger_todo *t)
{
    int rc = lg_text(l, "uri", t->uri, LEDGER_URI_MAX, true);

    if (rc == 0)
        rc = lg_text(l, "hash", t->hash, LEDGER_TEXT_MAX, false);
    if (rc == 0)
        rc = lg_text(l, "origin", t->origin, LEDGER_TEXT_MAX, false);
    if (rc == 0 && (t->change < LEDGER_CREATE || t->change > LEDGER_DELETE))
        rc = lg_err(l, RS_EINVAL, "todo put: bad change %d", (int)t->change);
    return rc;
}

int
ledger_todo_put(struct ledger *l, const struct ledger_todo *t,
                int64_t *seq_out)
{
    sqlite3_stmt *s = NULL;
    int rc;

    rc = lg_writable(l, "todo put");
    if (rc == 0)
        rc = todo_check(l, t);
    if (rc == 0)
        rc = lg_prep(l, LG_TODO_PUT, &s);
    if (rc != 0)
        return rc;
    bind_text(s, 1, t->uri);
    sqlite3_bind_int(s, 2, (int)t->change);
    rs_sql_bind_time(s, 3, t->change_dt);
    rs_sql_bind_time(s, 4, t->lastmod);
    sqlite3_bind_int64(s, 5, t->length >= 0 ? t->length : -1);
    bind_text(s, 6, t->hash);
    bind_text(s, 7, t->origin);
    sqlite3_bind_int64(s, 8, clamp_due(t->not_before));
    rc = lg_run(l, s, "todo put");
    if (rc == 0 && seq_out != NULL)
        *seq_out = sqlite3_last_insert_rowid(l->db);
    return rc;
}

int
ledger_todo_get(struct ledger *l, const char *uri, struct ledger_todo *out,
                char **buf)
{
    return get_by_uri(l, LG_TODO_GET, PAGE_TODO, uri, out, buf, "todo get");
}

/* Which rows of a class a walk reads, in (not_before, pos) order. */
enum todo_span {
    SPAN_NOW,                  /* not_before 0: due since their put */
    SPAN_RETRY,                /* 0 < not_before <= now */
    SPAN_ALL,                  /* not_before <= now */
};

/* Read the next page of todo rows of class failed in span after *cur:
 * the rest of the cursor's not_before first, then later ones. */
static int
todo_page(struct ledger *l, int failed, enum todo_span span, rs_time_t now,
          const struct ledger_cursor *cur, size_t cap, struct page *pg)
{
    static const enum lg_stmt order[] = { LG_TODO_AT, LG_TODO_AFTER };
    int rc = 0;

    pg->n = 0;
    for (size_t k = 0; k < 2 && rc == 0 && pg->n == 0; k++) {
        sqlite3_stmt *s = NULL;
        if (order[k] == LG_TODO_AT &&
            (cur->not_before > now ||
             (span == SPAN_RETRY && cur->not_before == 0)))
            continue;
        if (order[k] == LG_TODO_AFTER && span == SPAN_NOW)
            continue;
        rc = lg_prep(l, order[k], &s);
        if (rc != 0)
            break;
        sqlite3_bind_int(s, 1, failed);
        sqlite3_bind_int64(s, 2, cur->not_before);
        sqlite3_bind_int64(s, 3, cur->pos);
        sqlite3_bind_int64(s, 4, (int64_t)cap);
        if (order[k] == LG_TODO_AFTER)
            sqlite3_bind_int64(s, 5, now);
        rc = page_read(l, s, PAGE_TODO, cap, pg, "todo walk");
    }
    return rc;
}

/*
 * Walk todo rows of class failed in span from *cur: cb for at most max
 * rows, the cursor past each it returned 0 for. *dry: the walk reached
 * the end.
 */
static int
todo_walk(struct ledger *l, int failed, enum todo_span span, rs_time_t now,
          struct ledger_cursor *cur, size_t max,
          int (*cb)(void *ud, const struct ledger_todo *t), void *ud,
          bool *dry)
{
    struct page *pg;
    size_t seen = 0;
    int rc = 0;

    *dry = false;
    if (max == 0)
        return 0;
    pg = rs_malloc(sizeof(*pg));
    if (pg == NULL)
        return lg_err(l, RS_ENOMEM, "todo walk: out of memory");
    while (rc == 0 && seen < max) {
        size_t cap = max - seen < LEDGER_PAGE ? max - seen : LEDGER_PAGE;
        rc = todo_page(l, failed, span, now, cur, cap, pg);
        if (rc != 0)
            break;
        l->todo_rows += pg->n;
        if (pg->n == 0) {
            *dry = true;
            break;
        }
        for (size_t i = 0; i < pg->n && rc == 0; i++) {
            const struct ledger_todo *t = &pg->u.todo[i];
            rc = cb(ud, t);
            if (rc == 0) {
                cur->not_before = t->not_before;
                cur->pos = t->pos;
                seen++;
            }
        }
        page_clear(pg);
    }
    rs_free(pg);
    return rc;
}

uint64_t
ledger_todo_rows_read(const struct ledger *l)
{
    return l->todo_rows;
}

int
ledger_todo_next(struct ledger *l, enum ledger_due which, rs_time_t now,
                 struct ledger_cursor *cur, size_t max,
                 int (*cb)(void *ud, const struct ledger_todo *t), void *ud)
{
    bool dry;
    int rc = todo_walk(l, 0, which == LEDGER_DUE_NOW ? SPAN_NOW : SPAN_RETRY,
                       now, cur, max, cb, ud, &dry);

    if (rc == 0 && dry) {
        cur->not_before = 0;
        cur->pos = 0;
    }
    return rc;
}

/* The least not_before of the rows not failed (after `after` when it is
 * not RS_TIME_NONE); RS_ENOTFOUND when there is none. */
static int
todo_min_due(struct ledger *l, enum lg_stmt which, rs_time_t after,
             rs_time_t *when, const char *what)
{
    sqlite3_stmt *s = NULL;
    int rc, src;

    rc = lg_prep(l, which, &s);
    if (rc != 0)
        return rc;
    if (after != RS_TIME_NONE)
        sqlite3_bind_int64(s, 1, after);
    src = sqlite3_step(s);
    if (src == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL)
        *when = sqlite3_column_int64(s, 0);
    else if (src == SQLITE_ROW || src == SQLITE_DONE)
        rc = RS_ENOTFOUND;
    else
        rc = lg_fail(l, src, what);
    lg_done(s);
    return rc;
}

int
ledger_todo_next_due(struct ledger *l, rs_time_t *when)
{
    return todo_min_due(l, LG_TODO_NEXT_DUE, RS_TIME_NONE, when,
                        "todo next due");
}

int
ledger_todo_due_after(struct ledger *l, rs_time_t now, rs_time_t *when)
{
    return todo_min_due(l, LG_TODO_DUE_AFTER, now, when, "todo due after");
}

/* The one integer statement which answers, binding nargs of a1, a2. */
static int
todo_scalar(struct ledger *l, enum lg_stmt which, int nargs, int64_t a1,
            int64_t a2, int64_t *out, const char *what)
{
    sqlite3_stmt *s = NULL;
    int rc, src;

    rc = lg_prep(l, which, &s);
    if (rc != 0)
        return rc;
    if (nargs > 0)
        sqlite3_bind_int64(s, 1, a1);
    if (nargs > 1)
        sqlite3_bind_int64(s, 2, a2);
    src = sqlite3_step(s);
    if (src == SQLITE_ROW)
        *out = sqlite3_column_int64(s, 0);
    else
        rc = lg_fail(l, src, what);
    lg_done(s);
    return rc;
}

int
ledger_todo_max_seq(struct ledger *l, int64_t *seq)
{
    return todo_scalar(l, LG_TODO_MAX_SEQ, 0, 0, 0, seq, "todo max seq");
}

int
ledger_todo_due_upto(struct ledger *l, int64_t seq, rs_time_t now, bool *any)
{
    int64_t v = 0;
    int rc = todo_scalar(l, LG_TODO_DUE_UPTO, 2, seq, now, &v,
                         "todo due up to");

    *any = rc == 0 && v != 0;
    return rc;
}

/* done/retry/fail: 1 when the row of (uri, seq) was there, 0 if not. */
static int
todo_end(struct ledger *l, enum lg_stmt which, const char *what,
         const char *uri, int64_t seq, rs_time_t not_before, const char *err)
{
    sqlite3_stmt *s = NULL;
    int rc;

    rc = lg_writable(l, what);
    if (rc == 0)
        rc = lg_text(l, "uri", uri, LEDGER_URI_MAX, true);
    if (rc == 0)
        rc = lg_prep(l, which, &s);
    if (rc != 0)
        return rc;
    bind_text(s, 1, uri);
    sqlite3_bind_int64(s, 2, seq);
    if (which != LG_TODO_DONE) {
        sqlite3_bind_int64(s, 3, clamp_due(not_before));
        if (err != NULL)
            sqlite3_bind_text(s, 4, err, err_len(err), SQLITE_STATIC);
        else
            sqlite3_bind_null(s, 4);
    }
    rc = lg_run(l, s, what);
    if (rc != 0)
        return rc;
    return sqlite3_changes(l->db) > 0 ? 1 : 0;
}

int
ledger_todo_done(struct ledger *l, const char *uri, int64_t seq)
{
    return todo_end(l, LG_TODO_DONE, "todo done", uri, seq, 0, NULL);
}

int
ledger_todo_retry(struct ledger *l, const char *uri, int64_t seq,
                  rs_time_t not_before, const char *err)
{
    return todo_end(l, LG_TODO_RETRY, "todo retry", uri, seq, not_before,
                    err);
}

int
ledger_todo_fail(struct ledger *l, const char *uri, int64_t seq,
                 const char *err)
{
    return todo_end(l, LG_TODO_FAIL, "todo fail", uri, seq, rs_time_now(),
                    err);
}

int
ledger_todo_count(struct ledger *l, rs_time_t now, int64_t *due,
                  int64_t *waiting, int64_t *failed)
{
    sqlite3_stmt *s = NULL;
    int rc, src;

    rc = lg_prep(l, LG_TODO_COUNT, &s);
    if (rc != 0)
        return rc;
    sqlite3_bind_int64(s, 1, now);
    src = sqlite3_step(s);
    if (src == SQLITE_ROW) {
        if (due != NULL)
            *due = sqlite3_column_int64(s, 0);
        if (waiting != NULL)
            *waiting = sqlite3_column_int64(s, 1);
        if (failed != NULL)
            *failed = sqlite3_column_int64(s, 2);
    } else {
        rc = lg_fail(l, src, "todo count");
    }
    lg_done(s);
    return rc;
}

int
ledger_todo_each_failed(struct ledger *l,
                        int (*cb)(void *ud, const struct ledger_todo *t),
                        void *ud)
{
    struct ledger_cursor cur = { 0, 0 };
    bool dry;

    return todo_walk(l, 1, SPAN_ALL, INT64_MAX, &cur, SIZE_MAX, cb, ud, &dry);
}

int
ledger_todo_requeue_failed(struct ledger *l, rs_time_t not_before,
                           int64_t *n)
{
    sqlite3_stmt *s = NULL;
    int rc;

    rc = lg_writable(l, "todo requeue");
    if (rc == 0)
        rc = lg_prep(l, LG_TODO_REQUEUE, &s);
    if (rc != 0)
        return rc;
    sqlite3_bind_int64(s, 1, clamp_due(not_before));
    rc = lg_run(l, s, "todo requeue");
    if (rc == 0 && n != NULL)
        *n = sqlite3_changes(l->db);
    return rc;
}

/* -------------------------------------------------- marks from the future */

/* Whether the one scan for them was made (ledger_clear_future). */
#define LG_FUTURE_CHECKED "future_checked"

static int
lg_future_step(struct ledger *l, enum lg_stmt which, rs_time_t limit,
               const char *suffix, int64_t *n)
{
    sqlite3_stmt *s = NULL;
    int rc = lg_prep(l, which, &s);

    if (rc != 0)
        return rc;
    if (suffix != NULL)
        bind_text(s, 1, suffix);
    else
        sqlite3_bind_int64(s, 1, limit);
    rc = lg_run(l, s, "clear future marks");
    if (rc == 0)
        *n += sqlite3_changes(l->db);
    return rc;
}

int
ledger_clear_future(struct ledger *l, rs_time_t limit,
                    const char *source_suffix, int64_t *cleared)
{
    char *done = NULL;
    int64_t n = 0, ignored = 0;
    int rc;

    *cleared = 0;
    rc = ledger_meta_get(l, LG_FUTURE_CHECKED, &done);
    rs_free(done);
    if (rc != RS_ENOTFOUND)
        return rc;
    if ((rc = ledger_begin(l)) != 0)
        return rc;
    rc = lg_future_step(l, LG_FUTURE_RES, limit, NULL, &n);
    if (rc == 0)
        rc = lg_future_step(l, LG_FUTURE_TODO, limit, NULL, &n);
    if (rc == 0)
        rc = lg_future_step(l, LG_FUTURE_POS, limit, NULL, &n);
    /* A change skipped as older than a future mark is nowhere to be read
     * again but in the Resource List: no source mark, no Change List
     * pull, a reconcile. */
    if (rc == 0 && n > 0)
        rc = lg_future_step(l, LG_FUTURE_SOURCES, 0, source_suffix, &ignored);
    if (rc == 0)
        rc = ledger_meta_set(l, LG_FUTURE_CHECKED, "1");
    if (rc == 0)
        rc = ledger_commit(l);
    else
        (void)ledger_rollback(l);
    if (rc == 0)
        *cleared = n;
    return rc;
}
