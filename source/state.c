/*
 * state.c - rssource's SQLite database: schema, the statement cache and
 * every query. Nothing here decides policy (what is a change, when a
 * Change List closes); it stores and hands back rows.
 */
#include "state.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "rs_alloc.h"
#include "rs_sqlckpt.h"
#include "rs_sqlite.h"
#include "rs_statelock.h"

#define STATE_SCHEMA 1

enum state_stmt {
    ST_BEGIN,
    ST_BEGIN_READ,
    ST_TOUCH,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_RES_GET,
    ST_RES_IDENT,
    ST_RES_PUT,
    ST_RES_DEL,
    ST_RES_BENEATH,
    ST_SEQ_OF,
    ST_RES_COUNT,
    ST_CH_ADD,
    ST_CH_LAST,
    ST_CH_RANGE,
    ST_CH_AT,
    ST_CL_LAST,
    ST_CL_CUR,
    ST_CL_GET,
    ST_CL_ADD,
    ST_CL_SET,
    ST_CL_DROP_CH,
    ST_CL_DROP,
    ST_CL_COUNT,
    ST_FW_ADD,
    ST_FW_LAST,
    ST_FW_TRIM,
    ST_FW_RANGE,
    ST_META_GET,
    ST_META_SET,
    ST_META_SET_TEXT,
    ST_SP_ADD,
    ST_SP_GET,
    ST_SP_DROP,
    ST_CD_ADD,
    ST_CD_DROP,
    ST_CD_PENDING,
    ST_CD_ORPHAN,
    ST_COUNT_,
};

static const char *const state_sql[ST_COUNT_] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_BEGIN_READ] = "BEGIN DEFERRED",
    [ST_TOUCH] = "SELECT 1 FROM meta LIMIT 1",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_RES_GET] = "SELECT dev, ino, size, mtime_ns, md5, sha256, type, "
                   "first_seen FROM resources WHERE path = ?1",
    [ST_RES_IDENT] = "SELECT dev, ino, size, mtime_ns, md5, sha256, type, "
                     "first_seen, path FROM resources WHERE ino = ?2 AND "
                     "dev = ?1 AND size = ?3 AND mtime_ns = ?4 AND md5 IS "
                     "NOT NULL LIMIT 1",
    [ST_RES_PUT] = "INSERT OR REPLACE INTO resources(path, dev, ino, size, "
                   "mtime_ns, md5, sha256, type, first_seen) VALUES "
                   "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    [ST_RES_DEL] = "DELETE FROM resources WHERE path = ?1",
    [ST_SEQ_OF] = "SELECT seq FROM sqlite_sequence WHERE name = ?1",
    [ST_RES_BENEATH] = "SELECT 1 FROM resources WHERE path >= ?1 AND "
                       "path < ?2 LIMIT 1",
    [ST_RES_COUNT] = "SELECT count(*) FROM resources",
    [ST_CH_ADD] = "INSERT INTO changes(dt, list, path, change, size, md5, "
                  "sha256, type, lastmod) VALUES (?1, ?2, ?3, ?4, ?5, ?6, "
                  "?7, ?8, ?9)",
    [ST_CH_LAST] = "SELECT seq, dt FROM changes ORDER BY seq DESC LIMIT 1",
    [ST_CH_RANGE] = "SELECT count(*) FROM changes WHERE seq > ?1 AND "
                    "seq <= ?2",
    [ST_CH_AT] = "SELECT list, dt FROM changes WHERE seq = ?1",
    [ST_CL_LAST] = "SELECT seq, dt FROM changes WHERE list = ?1 "
                   "ORDER BY seq DESC LIMIT 1",
    [ST_CL_CUR] = "SELECT num, from_dt, until_dt, count FROM clists "
                  "ORDER BY num DESC LIMIT 1",
    [ST_CL_GET] = "SELECT num, from_dt, until_dt, count FROM clists "
                  "WHERE num = ?1",
    [ST_CL_ADD] = "INSERT INTO clists(num, from_dt, until_dt, count) "
                  "VALUES (?1, ?2, ?3, ?4)",
    [ST_CL_SET] = "UPDATE clists SET until_dt = ?2, count = ?3 WHERE num = ?1",
    [ST_CL_DROP_CH] = "DELETE FROM changes WHERE list = ?1",
    [ST_CL_DROP] = "DELETE FROM clists WHERE num = ?1",
    [ST_CL_COUNT] = "SELECT count(*) FROM clists",
    [ST_FW_ADD] = "INSERT INTO framework(dt, name, cap, change, idx) "
                  "VALUES (?1, ?2, ?3, ?4, ?5)",
    [ST_FW_LAST] = "SELECT seq FROM framework ORDER BY seq DESC LIMIT 1",
    [ST_FW_TRIM] = "DELETE FROM framework WHERE seq <= ?1",
    [ST_FW_RANGE] = "SELECT count(*) FROM framework WHERE seq > ?1 AND "
                    "seq <= ?2",
    [ST_META_GET] = "SELECT ival, tval FROM meta WHERE key = ?1",
    [ST_META_SET] = "INSERT OR REPLACE INTO meta(key, ival, tval) "
                    "VALUES (?1, ?2, NULL)",
    [ST_META_SET_TEXT] = "INSERT OR REPLACE INTO meta(key, ival, tval) "
                         "VALUES (?1, NULL, ?2)",
    [ST_SP_ADD] = "INSERT OR REPLACE INTO spool(seq, off, len) "
                  "VALUES (?1, ?2, ?3)",
    [ST_SP_GET] = "SELECT off, len FROM spool WHERE seq = ?1",
    [ST_SP_DROP] = "DELETE FROM spool WHERE seq IN (SELECT seq FROM changes "
                   "WHERE list = ?1)",
    [ST_CD_ADD] = "INSERT OR REPLACE INTO cdump(list, part, length) "
                  "VALUES (?1, ?2, ?3)",
    [ST_CD_DROP] = "DELETE FROM cdump WHERE list = ?1",
    [ST_CD_PENDING] = "SELECT num, 0 FROM clists WHERE until_dt IS NOT NULL "
                      "AND num > ?1 AND num NOT IN (SELECT list FROM cdump) "
                      "ORDER BY num LIMIT 1",
    [ST_CD_ORPHAN] = "SELECT list, 0 FROM cdump WHERE list > ?1 AND list "
                     "NOT IN (SELECT num FROM clists) ORDER BY list LIMIT 1",
};

static const char state_schema[] =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, ival INTEGER, "
    "  tval TEXT) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS resources(path TEXT PRIMARY KEY, "
    "  dev INTEGER NOT NULL, ino INTEGER NOT NULL, size INTEGER NOT NULL, "
    "  mtime_ns INTEGER NOT NULL, md5 BLOB, sha256 BLOB, type TEXT NOT NULL, "
    "  first_seen INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS resources_ino ON resources(ino);"
    "CREATE TABLE IF NOT EXISTS changes(seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "  dt INTEGER NOT NULL, list INTEGER NOT NULL, path TEXT NOT NULL, "
    "  change TEXT NOT NULL, size INTEGER, md5 BLOB, sha256 BLOB, type TEXT, "
    "  lastmod INTEGER);"
    "CREATE INDEX IF NOT EXISTS changes_list ON changes(list, seq);"
    "CREATE TABLE IF NOT EXISTS clists(num INTEGER PRIMARY KEY, "
    "  from_dt INTEGER NOT NULL, until_dt INTEGER, count INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS framework(seq INTEGER PRIMARY KEY "
    "  AUTOINCREMENT, dt INTEGER NOT NULL, name TEXT NOT NULL, "
    "  cap TEXT NOT NULL, change TEXT NOT NULL, idx TEXT);"
    /* --dump: where a change's captured content sits in its list's
     * spool, and the Change Dump packages built (part 0, length -1: the
     * list has none). Tables of their own, so a state made before them
     * gains them at its next open. */
    "CREATE TABLE IF NOT EXISTS spool(seq INTEGER PRIMARY KEY, "
    "  off INTEGER NOT NULL, len INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS cdump(list INTEGER NOT NULL, "
    "  part INTEGER NOT NULL, length INTEGER NOT NULL, "
    "  PRIMARY KEY(list, part)) WITHOUT ROWID;";

#define ST_ITER_CACHE 8

struct state {
    sqlite3 *db;
    struct rs_sqlckpt *ckpt;   /* NULL unless started */
    sqlite3_stmt *stmt[ST_COUNT_];
    int lockfd;              /* writer: flock'ed; -1 for readers */
    unsigned txn_depth;
    bool is_new;
    bool readonly;
    char errstr[256];
    /* One-row getters reset their statement before returning, so the
     * strings they hand out are copied here (valid until the next call). */
    char type_buf[256];
    char path_buf[4096];
    /* Iterator statements, kept prepared by their SQL's address: the
     * publish path opens one for every notification it builds, and a
     * prepare cost as much as the query. One in use at a time each; a
     * second iterator of the same SQL prepares its own. */
    struct {
        const char *sql;
        sqlite3_stmt *stmt;
        bool busy;
    } iters[ST_ITER_CACHE];
};

enum iter_kind { IT_RES, IT_CHANGE, IT_CLIST, IT_FW, IT_CDUMP };

struct state_iter {
    struct state *st;
    sqlite3_stmt *stmt;
    int cached;                /* index in st->iters; -1: its own stmt */
    enum iter_kind kind;
};

/* ------------------------------------------------------------- helpers */

static int
st_fail(struct state *st, const char *what)
{
    int e = errno;                     /* the failing call's, if any */
    char m[192];
    snprintf(st->errstr, sizeof(st->errstr), "%s: %s", what,
             rs_sql_errmsg(st->db, e, m, sizeof(m)));
    return RS_EIO;
}

static sqlite3_stmt *
st_get(struct state *st, enum state_stmt which)
{
    sqlite3_stmt *s = st->stmt[which];
    if (s == NULL) {
        if (sqlite3_prepare_v3(st->db, state_sql[which], -1,
                               SQLITE_PREPARE_PERSISTENT, &s, NULL) != SQLITE_OK) {
            st_fail(st, "prepare");
            return NULL;
        }
        st->stmt[which] = s;
    }
    return s;
}

/* Run a statement that returns no rows (or whose rows are ignored). */
static int
st_exec(struct state *st, sqlite3_stmt *s, const char *what)
{
    int r = sqlite3_step(s);
    int rc = r == SQLITE_DONE || r == SQLITE_ROW ? 0 : st_fail(st, what);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc;
}

/* Run statement which with its parameters ?1.. bound to the n integers
 * v (no rows read). */
static int
st_exec_ints(struct state *st, enum state_stmt which, const int64_t *v,
             int n, const char *what)
{
    sqlite3_stmt *s = st_get(st, which);
    if (s == NULL)
        return RS_EIO;
    for (int i = 0; i < n; i++)
        sqlite3_bind_int64(s, i + 1, v[i]);
    return st_exec(st, s, what);
}

static void
bind_blob(sqlite3_stmt *s, int i, bool have, const void *p, int n)
{
    if (have)
        sqlite3_bind_blob(s, i, p, n, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(s, i);
}

static void
bind_text(sqlite3_stmt *s, int i, const char *t)
{
    if (t != NULL)
        sqlite3_bind_text(s, i, t, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(s, i);
}

/* Both digests or none: a row with only one is treated as unhashed. */
static bool
col_hashes(sqlite3_stmt *s, int i, uint8_t md5[16], uint8_t sha256[32])
{
    if (sqlite3_column_bytes(s, i) != 16 || sqlite3_column_bytes(s, i + 1) != 32)
        return false;
    memcpy(md5, sqlite3_column_blob(s, i), 16);
    memcpy(sha256, sqlite3_column_blob(s, i + 1), 32);
    return true;
}

/* ---------------------------------------------------------- open/close */

int
state_open(const char *path, bool readonly, struct state **out, char *err,
           size_t errlen)
{
    *out = NULL;
    struct state *st = rs_calloc(1, sizeof(*st));
    if (st == NULL) {
        snprintf(err, errlen, "out of memory");
        return RS_ENOMEM;
    }
    st->lockfd = -1;
    st->readonly = readonly;
    int rc = RS_EIO;
    if (!readonly) {
        rc = rs_statelock_take(path, "rssource", &st->lockfd, err, errlen);
        if (rc != 0)
            goto out;
        rc = RS_EIO;
        st->is_new = access(path, F_OK) != 0;
    }
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX |
                (readonly ? 0 : SQLITE_OPEN_CREATE);
    if (sqlite3_open_v2(path, &st->db, flags, NULL) != SQLITE_OK) {
        char m[256];
        snprintf(err, errlen, "%s: %s", path,
                 rs_sql_errmsg(st->db, 0, m, sizeof(m)));
        goto out;
    }
    sqlite3_busy_timeout(st->db, 5000);
    /* WAL: readers (the snapshot builder, the start-up merge) never block
     * the writer. synchronous=NORMAL: a power cut may lose the last
     * commits but never corrupts; what is lost is found again by the
     * start-up rescan, and nothing is pushed before it is committed. */
    const char *pragmas = readonly
        ? "PRAGMA query_only=1; PRAGMA cache_size=-8000;"
        : "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
          "PRAGMA cache_size=-32000; PRAGMA temp_store=MEMORY;";
    char *msg = NULL;
    if (sqlite3_exec(st->db, pragmas, NULL, NULL, &msg) != SQLITE_OK ||
        (!readonly &&
         sqlite3_exec(st->db, state_schema, NULL, NULL, &msg) != SQLITE_OK)) {
        snprintf(err, errlen, "%s: %s", path, msg != NULL ? msg : "schema");
        sqlite3_free(msg);
        goto out;
    }
    if (!readonly) {
        int64_t v;
        int mrc = state_meta_get(st, "schema", &v);
        if (mrc == RS_ENOTFOUND) {
            if (state_meta_set(st, "schema", STATE_SCHEMA) != 0) {
                snprintf(err, errlen, "%s: %s", path, st->errstr);
                goto out;
            }
        } else if (mrc != 0 || v != STATE_SCHEMA) {
            if (mrc == 0 && v > STATE_SCHEMA)
                snprintf(err, errlen, "%s: schema version %lld, newer than "
                         "this rssource's %d (a later rssource's state)",
                         path, (long long)v, (int)STATE_SCHEMA);
            else if (mrc == 0)
                snprintf(err, errlen, "%s: schema version %lld, this "
                         "rssource reads %d", path, (long long)v,
                         (int)STATE_SCHEMA);
            else
                snprintf(err, errlen, "%s: its schema version cannot be read: "
                         "%s", path, st->errstr);
            rc = RS_EINVAL;
            goto out;
        }
    }
    *out = st;
    return 0;
out:
    state_free(st);
    return rc;
}

void
state_free(struct state *st)
{
    if (st == NULL)
        return;
    state_checkpointer_stop(st);
    for (int i = 0; i < ST_COUNT_; i++)
        if (st->stmt[i] != NULL)
            sqlite3_finalize(st->stmt[i]);
    for (int i = 0; i < ST_ITER_CACHE; i++)
        sqlite3_finalize(st->iters[i].stmt);   /* NULL: a no-op */
    if (st->db != NULL)
        sqlite3_close(st->db);
    if (st->lockfd >= 0)
        close(st->lockfd);   /* releases the flock */
    rs_free(st);
}

/* ------------------------------------------------------- checkpointer */

int
state_checkpointer_start(struct state *st, unsigned interval_ms)
{
    if (st->readonly || st->ckpt != NULL)
        return RS_ESTATE;
    return rs_sqlckpt_start(st->db, interval_ms, 0, &st->ckpt);
}

void
state_checkpointer_stop(struct state *st)
{
    rs_sqlckpt_stop(st->ckpt);
    st->ckpt = NULL;
}

const char *
state_errstr(const struct state *st)
{
    return st->errstr;
}

bool
state_is_new(const struct state *st)
{
    return st->is_new;
}

int
state_begin(struct state *st)
{
    if (st->txn_depth++ > 0)
        return 0;
    sqlite3_stmt *s = st_get(st, ST_BEGIN);
    int rc = s != NULL ? st_exec(st, s, "begin") : RS_EIO;
    if (rc != 0)
        st->txn_depth = 0;
    return rc;
}

int
state_commit(struct state *st)
{
    if (st->txn_depth == 0)
        return RS_ESTATE;
    if (--st->txn_depth > 0)
        return 0;
    sqlite3_stmt *s = st_get(st, ST_COMMIT);
    int rc = s != NULL ? st_exec(st, s, "commit") : RS_EIO;
    if (rc != 0 && !sqlite3_get_autocommit(st->db)) {
        sqlite3_stmt *r = st_get(st, ST_ROLLBACK);
        if (r != NULL)
            (void)st_exec(st, r, "rollback");
    }
    return rc;
}

void
state_rollback(struct state *st)
{
    if (st->txn_depth == 0)
        return;
    st->txn_depth = 0;
    sqlite3_stmt *s = st_get(st, ST_ROLLBACK);
    if (s != NULL && !sqlite3_get_autocommit(st->db))
        (void)st_exec(st, s, "rollback");
}

int
state_begin_read(struct state *st)
{
    sqlite3_stmt *s = st_get(st, ST_BEGIN_READ);
    if (s == NULL)
        return RS_EIO;
    int rc = st_exec(st, s, "begin read");
    if (rc != 0)
        return rc;
    /* a deferred transaction takes its snapshot at the first read */
    sqlite3_stmt *q = st_get(st, ST_TOUCH);
    int r = q != NULL ? sqlite3_step(q) : SQLITE_ERROR;
    if (r != SQLITE_ROW && r != SQLITE_DONE) {
        if (q != NULL)
            sqlite3_reset(q);
        state_end_read(st);
        return st_fail(st, "begin read");
    }
    sqlite3_reset(q);
    return 0;
}

void
state_end_read(struct state *st)
{
    sqlite3_stmt *s = st_get(st, ST_COMMIT);
    if (s != NULL && !sqlite3_get_autocommit(st->db))
        (void)st_exec(st, s, "end read");
}

/* ----------------------------------------------------------- resources */

static void
res_from_row(sqlite3_stmt *s, struct state_res *r)
{
    r->dev = sqlite3_column_int64(s, 0);
    r->ino = sqlite3_column_int64(s, 1);
    r->size = sqlite3_column_int64(s, 2);
    r->mtime_ns = sqlite3_column_int64(s, 3);
    r->hashed = col_hashes(s, 4, r->md5, r->sha256);
    r->type = (const char *)sqlite3_column_text(s, 6);
    r->first_seen = sqlite3_column_int64(s, 7);
}


int
state_res_get(struct state *st, const char *path, struct state_res *out)
{
    sqlite3_stmt *s = st_get(st, ST_RES_GET);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_text(s, 1, path, -1, SQLITE_STATIC);
    int r = sqlite3_step(s);
    int rc = 0;
    if (r == SQLITE_ROW) {
        res_from_row(s, out);
        out->path = path;
        snprintf(st->type_buf, sizeof(st->type_buf), "%s",
                 out->type != NULL ? out->type : "");
        out->type = st->type_buf;
    } else {
        rc = r == SQLITE_DONE ? RS_ENOTFOUND : st_fail(st, "resource get");
    }
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc;
}

int
state_res_by_identity(struct state *st, int64_t dev, int64_t ino,
                      int64_t size, int64_t mtime_ns, struct state_res *out)
{
    sqlite3_stmt *s = st_get(st, ST_RES_IDENT);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, dev);
    sqlite3_bind_int64(s, 2, ino);
    sqlite3_bind_int64(s, 3, size);
    sqlite3_bind_int64(s, 4, mtime_ns);
    int r = sqlite3_step(s);
    int rc = 0;
    if (r == SQLITE_ROW) {
        res_from_row(s, out);
        snprintf(st->type_buf, sizeof(st->type_buf), "%s",
                 out->type != NULL ? out->type : "");
        out->type = st->type_buf;
        snprintf(st->path_buf, sizeof(st->path_buf), "%s",
                 (const char *)sqlite3_column_text(s, 8));
        out->path = st->path_buf;
        if (!out->hashed)
            rc = RS_ENOTFOUND;
    } else {
        rc = r == SQLITE_DONE ? RS_ENOTFOUND : st_fail(st, "identity get");
    }
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc;
}

int
state_res_put(struct state *st, const struct state_res *r)
{
    sqlite3_stmt *s = st_get(st, ST_RES_PUT);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_text(s, 1, r->path, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, r->dev);
    sqlite3_bind_int64(s, 3, r->ino);
    sqlite3_bind_int64(s, 4, r->size);
    sqlite3_bind_int64(s, 5, r->mtime_ns);
    bind_blob(s, 6, r->hashed, r->md5, 16);
    bind_blob(s, 7, r->hashed, r->sha256, 32);
    sqlite3_bind_text(s, 8, r->type != NULL ? r->type : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 9, r->first_seen);
    return st_exec(st, s, "resource put");
}

int
state_res_delete(struct state *st, const char *path)
{
    sqlite3_stmt *s = st_get(st, ST_RES_DEL);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_text(s, 1, path, -1, SQLITE_STATIC);
    return st_exec(st, s, "resource delete");
}

static int64_t
st_count(struct state *st, enum state_stmt which)
{
    sqlite3_stmt *s = st_get(st, which);
    if (s == NULL)
        return -1;
    int64_t n = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
    sqlite3_reset(s);
    return n;
}

int64_t
state_res_count(struct state *st)
{
    return st_count(st, ST_RES_COUNT);
}

/* ------------------------------------------------------------ iterators */

static int
iter_new(struct state *st, enum iter_kind kind, const char *sql,
         struct state_iter **out)
{
    *out = NULL;
    struct state_iter *it = rs_calloc(1, sizeof(*it));
    if (it == NULL)
        return RS_ENOMEM;
    it->st = st;
    it->kind = kind;
    it->cached = -1;
    int slot = -1;
    for (int i = 0; i < ST_ITER_CACHE; i++) {
        if (st->iters[i].sql == sql) {
            slot = st->iters[i].busy ? -1 : i;
            break;
        }
        if (st->iters[i].sql == NULL && slot < 0)
            slot = i;
    }
    if (slot >= 0 && st->iters[slot].sql == sql) {
        it->stmt = st->iters[slot].stmt;
    } else if (sqlite3_prepare_v3(st->db, sql, -1,
                                  slot >= 0 ? SQLITE_PREPARE_PERSISTENT : 0,
                                  &it->stmt, NULL) != SQLITE_OK) {
        rs_free(it);
        return st_fail(st, "prepare iterator");
    } else if (slot >= 0) {
        st->iters[slot].sql = sql;
        st->iters[slot].stmt = it->stmt;
    }
    if (slot >= 0) {
        st->iters[slot].busy = true;
        it->cached = slot;
    }
    *out = it;
    return 0;
}

void
state_iter_free(struct state_iter *it)
{
    if (it == NULL)
        return;
    if (it->cached >= 0) {
        sqlite3_reset(it->stmt);
        sqlite3_clear_bindings(it->stmt);
        it->st->iters[it->cached].busy = false;
    } else {
        sqlite3_finalize(it->stmt);
    }
    rs_free(it);
}

static int
iter_step(struct state_iter *it, enum iter_kind kind)
{
    if (it->kind != kind)
        return RS_EINVAL;
    int r = sqlite3_step(it->stmt);
    if (r == SQLITE_ROW)
        return 1;
    if (r == SQLITE_DONE)
        return 0;
    return st_fail(it->st, "iterate");
}

/* Bind ?1 and ?2 of s to the range of paths strictly beneath the
 * directory under: from "a/b/" up to (not including) "a/b0". */
static int
bind_beneath(sqlite3_stmt *s, const char *under)
{
    size_t n = strlen(under);
    char *lo = rs_malloc(n + 2), *hi = rs_malloc(n + 2);
    if (lo == NULL || hi == NULL) {
        rs_free(lo);
        rs_free(hi);
        return RS_ENOMEM;
    }
    memcpy(lo, under, n);
    memcpy(hi, under, n);
    lo[n] = '/';
    hi[n] = '/' + 1;
    lo[n + 1] = hi[n + 1] = '\0';
    sqlite3_bind_text(s, 1, lo, (int)n + 1, rs_free);
    sqlite3_bind_text(s, 2, hi, (int)n + 1, rs_free);
    return 0;
}

int
state_res_any_beneath(struct state *st, const char *under)
{
    if (under[0] == '\0')
        return 1;                 /* the root: let the iterator look */
    sqlite3_stmt *s = st_get(st, ST_RES_BENEATH);
    if (s == NULL)
        return RS_EIO;
    if (bind_beneath(s, under) != 0)
        return RS_ENOMEM;
    int r = sqlite3_step(s);
    int rc = r == SQLITE_ROW ? 1 : r == SQLITE_DONE ? 0
                                 : st_fail(st, "resources beneath");
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc;
}

int
state_res_iter(struct state *st, const char *under, struct state_iter **out)
{
    int rc;
    if (under[0] == '\0')
        return iter_new(st, IT_RES, "SELECT dev, ino, size, mtime_ns, md5, "
                        "sha256, type, first_seen, path FROM resources "
                        "ORDER BY path", out);
    rc = iter_new(st, IT_RES, "SELECT dev, ino, size, mtime_ns, md5, sha256, "
                  "type, first_seen, path FROM resources WHERE path >= ?1 "
                  "AND path < ?2 ORDER BY path", out);
    if (rc != 0)
        return rc;
    if (bind_beneath((*out)->stmt, under) != 0) {
        state_iter_free(*out);
        *out = NULL;
        return RS_ENOMEM;
    }
    return 0;
}

int
state_res_iter_after(struct state *st, const char *after, struct state_iter **out)
{
    int rc = iter_new(st, IT_RES, "SELECT dev, ino, size, mtime_ns, md5, "
                      "sha256, type, first_seen, path FROM resources "
                      "WHERE path > ?1 ORDER BY path", out);
    if (rc != 0)
        return rc;
    sqlite3_bind_text((*out)->stmt, 1, after, -1, SQLITE_TRANSIENT);
    return 0;
}

int
state_res_next(struct state_iter *it, struct state_res *out)
{
    int r = iter_step(it, IT_RES);
    if (r == 1) {
        res_from_row(it->stmt, out);
        out->path = (const char *)sqlite3_column_text(it->stmt, 8);
    }
    return r;
}

/* ------------------------------------------------------------- changes */

int
state_change_add(struct state *st, struct state_change *c)
{
    sqlite3_stmt *s = st_get(st, ST_CH_ADD);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, c->dt);
    sqlite3_bind_int64(s, 2, c->list);
    sqlite3_bind_text(s, 3, c->path, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, rs_change_name(c->change), -1, SQLITE_STATIC);
    if (c->size >= 0)
        sqlite3_bind_int64(s, 5, c->size);
    else
        sqlite3_bind_null(s, 5);
    bind_blob(s, 6, c->hashed, c->md5, 16);
    bind_blob(s, 7, c->hashed, c->sha256, 32);
    bind_text(s, 8, c->type);
    rs_sql_bind_time(s, 9, c->lastmod);
    int rc = st_exec(st, s, "change add");
    if (rc == 0)
        c->seq = sqlite3_last_insert_rowid(st->db);
    return rc;
}

/* The last seq of TABLE: its newest row (statement LAST), or the highest
 * AUTOINCREMENT has handed out, which remembers the seqs of deleted rows,
 * so that "last" never goes back after retention emptied the table. */
static int64_t
st_last_seq(struct state *st, enum state_stmt last, const char *table)
{
    sqlite3_stmt *s = st_get(st, last);
    if (s == NULL)
        return 0;
    int64_t v = 0;
    if (sqlite3_step(s) == SQLITE_ROW)
        v = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    /* cached, not prepared per call: the push lane asks after every
     * accepted publish (6 % of rssource's CPU at 5,000 changes/s) */
    sqlite3_stmt *q = st_get(st, ST_SEQ_OF);
    if (q != NULL) {
        sqlite3_bind_text(q, 1, table, -1, SQLITE_STATIC);
        if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int64(q, 0) > v)
            v = sqlite3_column_int64(q, 0);
        sqlite3_reset(q);
        sqlite3_clear_bindings(q);
    }
    return v;
}

int64_t
state_change_last_seq(struct state *st)
{
    return st_last_seq(st, ST_CH_LAST, "changes");
}

/* count(*) of a range statement: seq > after and seq <= upto. */
static int64_t
st_range_count(struct state *st, enum state_stmt which, int64_t after,
               int64_t upto)
{
    sqlite3_stmt *s = st_get(st, which);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, after);
    sqlite3_bind_int64(s, 2, upto);
    int64_t v = 0;
    int r = sqlite3_step(s);
    if (r == SQLITE_ROW)
        v = sqlite3_column_int64(s, 0);
    else
        v = st_fail(st, "range count");
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return v;
}

int64_t
state_change_count(struct state *st, int64_t after, int64_t upto)
{
    return st_range_count(st, ST_CH_RANGE, after, upto);
}

rs_time_t
state_change_last_dt(struct state *st)
{
    sqlite3_stmt *s = st_get(st, ST_CH_LAST);
    if (s == NULL)
        return RS_TIME_NONE;
    rs_time_t v = RS_TIME_NONE;
    if (sqlite3_step(s) == SQLITE_ROW)
        v = sqlite3_column_int64(s, 1);
    sqlite3_reset(s);
    return v;
}

int
state_change_iter(struct state *st, int64_t list, int64_t after,
                  int64_t limit, struct state_iter **out)
{
    int rc = iter_new(st, IT_CHANGE, list > 0
                      ? "SELECT seq, dt, list, path, change, size, md5, "
                        "sha256, type, lastmod FROM changes WHERE list = ?1 "
                        "AND seq > ?2 ORDER BY seq LIMIT ?3"
                      : "SELECT seq, dt, list, path, change, size, md5, "
                        "sha256, type, lastmod FROM changes WHERE seq > ?2 "
                        "ORDER BY seq LIMIT ?3", out);
    if (rc != 0)
        return rc;
    if (list > 0)
        sqlite3_bind_int64((*out)->stmt, 1, list);
    sqlite3_bind_int64((*out)->stmt, 2, after);
    sqlite3_bind_int64((*out)->stmt, 3, limit > 0 ? limit : -1);
    return 0;
}

int
state_change_next(struct state_iter *it, struct state_change *out)
{
    int r = iter_step(it, IT_CHANGE);
    if (r != 1)
        return r;
    sqlite3_stmt *s = it->stmt;
    out->seq = sqlite3_column_int64(s, 0);
    out->dt = sqlite3_column_int64(s, 1);
    out->list = sqlite3_column_int64(s, 2);
    out->path = (const char *)sqlite3_column_text(s, 3);
    out->change = rs_change_from((const char *)sqlite3_column_text(s, 4));
    out->size = sqlite3_column_type(s, 5) == SQLITE_NULL
                    ? -1 : sqlite3_column_int64(s, 5);
    out->hashed = col_hashes(s, 6, out->md5, out->sha256);
    out->type = (const char *)sqlite3_column_text(s, 8);
    out->lastmod = rs_sql_col_time(s, 9);
    return 1;
}

/* Statement which, bound to key, gives one row of two integers: *a, *b.
 * RS_ENOTFOUND when there is no row. */
static int
st_pair(struct state *st, enum state_stmt which, int64_t key, int64_t *a,
        int64_t *b, const char *what)
{
    sqlite3_stmt *s = st_get(st, which);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, key);
    int r = sqlite3_step(s);
    int rc = 0;
    if (r == SQLITE_ROW) {
        *a = sqlite3_column_int64(s, 0);
        *b = sqlite3_column_int64(s, 1);
    } else {
        rc = r == SQLITE_DONE ? RS_ENOTFOUND : st_fail(st, what);
    }
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc;
}

int
state_change_at(struct state *st, int64_t seq, int64_t *list, rs_time_t *dt)
{
    return st_pair(st, ST_CH_AT, seq, list, dt, "change get");
}

/* -------------------------------------------------------- change lists */

int
state_clist_last(struct state *st, int64_t num, int64_t *seq, rs_time_t *dt)
{
    return st_pair(st, ST_CL_LAST, num, seq, dt, "change list last");
}

static void
clist_from_row(sqlite3_stmt *s, struct state_clist *c)
{
    c->num = sqlite3_column_int64(s, 0);
    c->from = sqlite3_column_int64(s, 1);
    c->until = rs_sql_col_time(s, 2);
    c->count = sqlite3_column_int64(s, 3);
}

static int
clist_one(struct state *st, sqlite3_stmt *s, struct state_clist *out)
{
    int r = sqlite3_step(s);
    int rc = 0;
    if (r == SQLITE_ROW)
        clist_from_row(s, out);
    else
        rc = r == SQLITE_DONE ? RS_ENOTFOUND : st_fail(st, "change list get");
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc;
}

int
state_clist_current(struct state *st, struct state_clist *out)
{
    sqlite3_stmt *s = st_get(st, ST_CL_CUR);
    return s != NULL ? clist_one(st, s, out) : RS_EIO;
}

int
state_clist_get(struct state *st, int64_t num, struct state_clist *out)
{
    sqlite3_stmt *s = st_get(st, ST_CL_GET);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, num);
    return clist_one(st, s, out);
}

int
state_clist_add(struct state *st, const struct state_clist *c)
{
    sqlite3_stmt *s = st_get(st, ST_CL_ADD);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, c->num);
    sqlite3_bind_int64(s, 2, c->from);
    rs_sql_bind_time(s, 3, c->until);
    sqlite3_bind_int64(s, 4, c->count);
    return st_exec(st, s, "change list add");
}

int
state_clist_set(struct state *st, const struct state_clist *c)
{
    sqlite3_stmt *s = st_get(st, ST_CL_SET);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, c->num);
    rs_sql_bind_time(s, 2, c->until);
    sqlite3_bind_int64(s, 3, c->count);
    return st_exec(st, s, "change list set");
}

int
state_clist_drop(struct state *st, int64_t num)
{
    int rc = state_spool_drop(st, num);
    if (rc != 0)
        return rc;
    sqlite3_stmt *a = st_get(st, ST_CL_DROP_CH), *b = st_get(st, ST_CL_DROP);
    if (a == NULL || b == NULL)
        return RS_EIO;
    sqlite3_bind_int64(a, 1, num);
    sqlite3_bind_int64(b, 1, num);
    rc = st_exec(st, a, "change list drop");
    int rc2 = st_exec(st, b, "change list drop");
    return rc != 0 ? rc : rc2;
}

int
state_clist_iter(struct state *st, struct state_iter **out)
{
    return iter_new(st, IT_CLIST, "SELECT num, from_dt, until_dt, count FROM "
                    "clists ORDER BY num", out);
}

int
state_clist_next(struct state_iter *it, struct state_clist *out)
{
    int r = iter_step(it, IT_CLIST);
    if (r == 1)
        clist_from_row(it->stmt, out);
    return r;
}

int64_t
state_clist_count(struct state *st)
{
    return st_count(st, ST_CL_COUNT);
}

/* ----------------------------------------------------- change dumps */

int
state_spool_add(struct state *st, int64_t seq, int64_t off, int64_t len)
{
    const int64_t v[] = { seq, off, len };
    return st_exec_ints(st, ST_SP_ADD, v, 3, "spool add");
}

int
state_spool_get(struct state *st, int64_t seq, int64_t *off, int64_t *len)
{
    return st_pair(st, ST_SP_GET, seq, off, len, "spool get");
}

int
state_spool_drop(struct state *st, int64_t list)
{
    return st_exec_ints(st, ST_SP_DROP, &list, 1, "spool drop");
}

int
state_cdump_add(struct state *st, int64_t list, int64_t part, int64_t length)
{
    const int64_t v[] = { list, part, length };
    return st_exec_ints(st, ST_CD_ADD, v, 3, "change dump add");
}

int
state_cdump_drop(struct state *st, int64_t list)
{
    return st_exec_ints(st, ST_CD_DROP, &list, 1, "change dump drop");
}

int
state_cdump_pending(struct state *st, int64_t after, int64_t *list)
{
    int64_t unused;
    return st_pair(st, ST_CD_PENDING, after, list, &unused,
                   "change dump pending");
}

int
state_cdump_orphan(struct state *st, int64_t after, int64_t *list)
{
    int64_t unused;
    return st_pair(st, ST_CD_ORPHAN, after, list, &unused,
                   "change dump orphan");
}

int
state_cdump_iter(struct state *st, struct state_iter **out)
{
    return iter_new(st, IT_CDUMP, "SELECT list, part, length FROM cdump "
                    "ORDER BY list, part", out);
}

int
state_cdump_next(struct state_iter *it, int64_t *list, int64_t *part,
                 int64_t *length)
{
    int r = iter_step(it, IT_CDUMP);
    if (r == 1) {
        *list = sqlite3_column_int64(it->stmt, 0);
        *part = sqlite3_column_int64(it->stmt, 1);
        *length = sqlite3_column_int64(it->stmt, 2);
    }
    return r;
}

/* ----------------------------------------------------------- framework */

int
state_fw_add(struct state *st, struct state_fw *f)
{
    sqlite3_stmt *s = st_get(st, ST_FW_ADD);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, f->dt);
    sqlite3_bind_text(s, 2, f->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, rs_capability_name(f->cap), -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, rs_change_name(f->change), -1, SQLITE_STATIC);
    bind_text(s, 5, f->index);
    int rc = st_exec(st, s, "framework add");
    if (rc == 0)
        f->seq = sqlite3_last_insert_rowid(st->db);
    return rc;
}

int64_t
state_fw_last_seq(struct state *st)
{
    return st_last_seq(st, ST_FW_LAST, "framework");
}

int
state_fw_iter(struct state *st, int64_t after, int64_t limit,
              struct state_iter **out)
{
    int rc = iter_new(st, IT_FW, "SELECT seq, dt, name, cap, change, idx FROM "
                      "framework WHERE seq > ?1 ORDER BY seq LIMIT ?2", out);
    if (rc != 0)
        return rc;
    sqlite3_bind_int64((*out)->stmt, 1, after);
    sqlite3_bind_int64((*out)->stmt, 2, limit > 0 ? limit : -1);
    return 0;
}

int
state_fw_next(struct state_iter *it, struct state_fw *out)
{
    int r = iter_step(it, IT_FW);
    if (r != 1)
        return r;
    sqlite3_stmt *s = it->stmt;
    out->seq = sqlite3_column_int64(s, 0);
    out->dt = sqlite3_column_int64(s, 1);
    out->name = (const char *)sqlite3_column_text(s, 2);
    out->cap = rs_capability_from((const char *)sqlite3_column_text(s, 3), NULL);
    out->change = rs_change_from((const char *)sqlite3_column_text(s, 4));
    out->index = (const char *)sqlite3_column_text(s, 5);
    return 1;
}

int64_t
state_fw_count(struct state *st, int64_t after, int64_t upto)
{
    return st_range_count(st, ST_FW_RANGE, after, upto);
}

int
state_fw_trim(struct state *st, int64_t upto)
{
    sqlite3_stmt *s = st_get(st, ST_FW_TRIM);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, upto);
    return st_exec(st, s, "framework trim");
}

/* ---------------------------------------------------------------- meta */

int
state_meta_get(struct state *st, const char *key, int64_t *out)
{
    sqlite3_stmt *s = st_get(st, ST_META_GET);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    int r = sqlite3_step(s);
    int rc = RS_ENOTFOUND;
    if (r == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL) {
        *out = sqlite3_column_int64(s, 0);
        rc = 0;
    } else if (r != SQLITE_ROW && r != SQLITE_DONE) {
        rc = st_fail(st, "meta get");
    }
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc;
}

int
state_meta_set(struct state *st, const char *key, int64_t v)
{
    sqlite3_stmt *s = st_get(st, ST_META_SET);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, v);
    return st_exec(st, s, "meta set");
}

int
state_meta_get_text(struct state *st, const char *key, char *buf, size_t len)
{
    sqlite3_stmt *s = st_get(st, ST_META_GET);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    int r = sqlite3_step(s);
    int rc = RS_ENOTFOUND;
    if (r == SQLITE_ROW && sqlite3_column_type(s, 1) != SQLITE_NULL) {
        const char *t = (const char *)sqlite3_column_text(s, 1);
        size_t n = (size_t)sqlite3_column_bytes(s, 1);
        if (n >= len) {
            rc = RS_ETOOBIG;
        } else {
            memcpy(buf, t, n + 1);
            rc = 0;
        }
    } else if (r != SQLITE_ROW && r != SQLITE_DONE) {
        rc = st_fail(st, "meta get");
    }
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc;
}

bool
state_meta_text_is(struct state *st, const char *key, const char *v)
{
    sqlite3_stmt *s = st_get(st, ST_META_GET);
    if (s == NULL)
        return false;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    bool is = sqlite3_step(s) == SQLITE_ROW &&
              sqlite3_column_type(s, 1) != SQLITE_NULL &&
              strcmp((const char *)sqlite3_column_text(s, 1), v) == 0;
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return is;
}

int
state_meta_set_text(struct state *st, const char *key, const char *v)
{
    sqlite3_stmt *s = st_get(st, ST_META_SET_TEXT);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, v, -1, SQLITE_STATIC);
    return st_exec(st, s, "meta set");
}
