/*
 * store.c - rsbridge's SQLite database (see store.h): the schema of every
 * table (so that it is read in one place, docs/bridge.md "State"), the
 * lock, transactions, the statement cache, and the rows of Sources, feeds
 * and documents. Nothing here decides what a change is.
 */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "rs_alloc.h"
#include "rs_fnv.h"
#include "rs_sqlckpt.h"
#include "rs_sqlite.h"
#include "rs_statelock.h"

#define STORE_APP_ID 0x72427267        /* 'rBrg' */
#define STORE_STMTS 256                /* cache slots (a power of two) */
#define STORE_CKPT_FRAMES 1000         /* frames committed a checkpoint
                                          (SQLite's default) */

/*
 * Tables. Times are microseconds (rs_time_t), NULL when absent.
 *   sources  - one per Source name: its URL
 *   feeds    - a Source's documents of one kind from one top URL; for
 *              Change Lists the position (pos: newest datetime taken),
 *              the window they declared (win_from) and when the last walk
 *              began (walked), the spans a forward walk may have missed
 *              (suspects); for Resource Lists the list's `at`, when
 *              the last framework notification about it went (fw_at),
 *              when a held ask to reconcile is due (ask_due) and when
 *              its last diff began (diffed: NULL never, or watched since)
 *   docs     - each document of a feed as its last complete walk read it:
 *              validators, digest, rel="next", the index that listed it
 *   seen     - clscan.c: every Change List entry of a feed's last walks
 *              (key: a hash of loc, change and datetime), with the walk
 *              that last and first saw it, whether it was published, and
 *              whether the last walk missed it (miss: 1, 2 a loss if the
 *              next one misses it too)
 *   rl       - rldiff.c: every Resource List entry of the last walk (for
 *              a loc listed more than once, the entry that stands)
 *   rldup    - rldiff.c: the other entries of such a loc (the losers),
 *              so that a part answering 304 still stands for them
 *   lanes    - outbox.c: per Source and topic the X-Publish-Id KEY, the
 *              watermark (pushed), the head, the marks (sent), counts
 *   outbox   - outbox.c: the notifications' entries not yet accepted
 *   walk, rlwalk, rldupwalk, walkdocs - a walk's staging: scratch,
 *              emptied at start
 */
static const char store_schema[] =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, ival INTEGER, "
    "  tval TEXT) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS sources(id INTEGER PRIMARY KEY, "
    "  name TEXT NOT NULL UNIQUE, url TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS feeds(id INTEGER PRIMARY KEY, "
    "  src INTEGER NOT NULL, kind INTEGER NOT NULL, k INTEGER NOT NULL, "
    "  url TEXT NOT NULL, gen INTEGER NOT NULL DEFAULT 0, pos INTEGER, "
    "  win_from INTEGER, walked INTEGER, at INTEGER, "
    "  suspects TEXT NOT NULL DEFAULT '', fw_at INTEGER, ask_due INTEGER, "
    "  diffed INTEGER, UNIQUE(src, kind, url));"
    "CREATE TABLE IF NOT EXISTS docs(feed INTEGER NOT NULL, url TEXT NOT NULL, "
    "  etag TEXT, lastmod TEXT, digest BLOB, next TEXT, parent TEXT, "
    "  rank INTEGER NOT NULL, PRIMARY KEY(feed, url)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS walkdocs(feed INTEGER NOT NULL, "
    "  url TEXT NOT NULL, etag TEXT, lastmod TEXT, digest BLOB, next TEXT, "
    "  parent TEXT, rank INTEGER NOT NULL, notmod INTEGER NOT NULL, "
    "  PRIMARY KEY(feed, url)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS seen(feed INTEGER NOT NULL, "
    "  key INTEGER NOT NULL, loc TEXT NOT NULL, dt INTEGER, "
    "  gen INTEGER NOT NULL, first_gen INTEGER NOT NULL, "
    "  state INTEGER NOT NULL, doc TEXT, miss INTEGER NOT NULL DEFAULT 0, "
    "  PRIMARY KEY(feed, key)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS seen_loc ON seen(feed, loc, dt);"
    "CREATE INDEX IF NOT EXISTS seen_doc ON seen(feed, doc);"
    "CREATE TABLE IF NOT EXISTS walk(feed INTEGER NOT NULL, "
    "  key INTEGER NOT NULL, ord INTEGER NOT NULL, loc TEXT NOT NULL, "
    "  change INTEGER NOT NULL, dt INTEGER, lastmod INTEGER, hash TEXT, "
    "  length INTEGER, type TEXT, doc TEXT NOT NULL, "
    "  PRIMARY KEY(feed, key)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS rl(feed INTEGER NOT NULL, loc TEXT NOT NULL, "
    "  ord INTEGER NOT NULL, doc TEXT NOT NULL, lastmod INTEGER, hash TEXT, "
    "  length INTEGER, type TEXT, miss INTEGER NOT NULL DEFAULT 0, "
    "  PRIMARY KEY(feed, loc)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS rl_doc ON rl(feed, doc);"
    "CREATE TABLE IF NOT EXISTS rldup(feed INTEGER NOT NULL, "
    "  doc TEXT NOT NULL, ord INTEGER NOT NULL, loc TEXT NOT NULL, "
    "  lastmod INTEGER, hash TEXT, length INTEGER, type TEXT, "
    "  PRIMARY KEY(feed, doc, ord)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS rldupwalk(feed INTEGER NOT NULL, "
    "  doc TEXT NOT NULL, ord INTEGER NOT NULL, loc TEXT NOT NULL, "
    "  lastmod INTEGER, hash TEXT, length INTEGER, type TEXT, "
    "  PRIMARY KEY(feed, doc, ord)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS rlwalk(feed INTEGER NOT NULL, "
    "  loc TEXT NOT NULL, ord INTEGER NOT NULL, doc TEXT NOT NULL, "
    "  lastmod INTEGER, hash TEXT, length INTEGER, type TEXT, "
    "  miss INTEGER NOT NULL DEFAULT 0, PRIMARY KEY(feed, loc)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS lanes(src INTEGER NOT NULL, "
    "  lane INTEGER NOT NULL, key TEXT NOT NULL, pushed INTEGER NOT NULL, "
    "  head INTEGER NOT NULL, sent TEXT NOT NULL DEFAULT '', "
    "  accepted INTEGER NOT NULL DEFAULT 0, PRIMARY KEY(src, lane)) "
    "  WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS outbox(src INTEGER NOT NULL, "
    "  lane INTEGER NOT NULL, seq INTEGER NOT NULL, k INTEGER NOT NULL, "
    "  loc TEXT NOT NULL, change INTEGER, cap INTEGER, dt INTEGER, "
    "  lastmod INTEGER, hash TEXT, length INTEGER, type TEXT, "
    "  PRIMARY KEY(src, lane, seq)) WITHOUT ROWID;"
    "DELETE FROM walk; DELETE FROM rlwalk; DELETE FROM rldupwalk; "
    "DELETE FROM walkdocs;";

/*
 * Migrations, each in one transaction with the version it reaches (a
 * crash midway leaves the older schema whole, migrated again at the next
 * open). Run after store_schema, which creates the tables an older
 * schema lacked (rldup, rldupwalk: empty).
 *
 * 3: feeds.diffed. A Resource List diffed before is one whose top
 * document was read whole (a digest): a list only watched has none
 * (poller.c stages its head without one). Its parts are read whole once
 * (their documents forgotten), so that rldup learns the entries that lost
 * to another of their loc - an older state kept none, and a part that
 * answered 304 could not stand for them.
 */
static const char store_migrate_2[] =
    "BEGIN IMMEDIATE;"
    "ALTER TABLE feeds ADD COLUMN diffed INTEGER;"
    "UPDATE feeds SET diffed = coalesce(walked, 0) WHERE kind = 3 AND "
    "  gen > 0 AND EXISTS (SELECT 1 FROM docs AS d WHERE d.feed = feeds.id "
    "  AND d.url = feeds.url AND d.digest IS NOT NULL);"
    "DELETE FROM docs WHERE feed IN (SELECT id FROM feeds WHERE kind = 3 AND "
    "  diffed IS NOT NULL);"
    "PRAGMA user_version=3;"
    "COMMIT;";

struct stmt_slot {
    const char *sql;
    sqlite3_stmt *s;
};

struct store {
    sqlite3 *db;
    int lockfd;
    unsigned depth;                /* store_begin nesting */
    struct stmt_slot stmts[STORE_STMTS];
    struct rs_sqlckpt *ckpt;       /* the checkpointer; NULL: commits do */
    char errstr[512];
};

int
store_fail(struct store *st, const char *what)
{
    int e = errno;                     /* the failing call's, if any */
    char m[256];
    snprintf(st->errstr, sizeof(st->errstr), "%s: %s", what,
             rs_sql_errmsg(st->db, e, m, sizeof(m)));
    return RS_EIO;
}

const char *
store_errstr(const struct store *st)
{
    return st->errstr;
}

sqlite3_stmt *
store_stmt(struct store *st, const char *sql)
{
    size_t i = (size_t)(rs_fnv1a64(sql) ^ (uintptr_t)sql) & (STORE_STMTS - 1);
    for (size_t n = 0; n < STORE_STMTS; n++, i = (i + 1) & (STORE_STMTS - 1)) {
        struct stmt_slot *sl = &st->stmts[i];
        if (sl->sql == sql)
            return sl->s;
        if (sl->sql != NULL)
            continue;
        if (sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT,
                               &sl->s, NULL) != SQLITE_OK) {
            store_fail(st, "prepare");
            sl->s = NULL;
            return NULL;
        }
        sl->sql = sql;
        return sl->s;
    }
    snprintf(st->errstr, sizeof(st->errstr), "statement cache full");
    return NULL;
}

int
store_exec(struct store *st, sqlite3_stmt *s, const char *what)
{
    int r = sqlite3_step(s);
    int rc = r == SQLITE_DONE || r == SQLITE_ROW ? 0 : store_fail(st, what);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc;
}

int
store_exec_sql(struct store *st, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(st->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(st->errstr, sizeof(st->errstr), "%s",
                 msg != NULL ? msg : "exec");
        sqlite3_free(msg);
        return RS_EIO;
    }
    return 0;
}

/* ---------------------------------------------------------- transactions */

int
store_begin(struct store *st)
{
    if (st->depth > 0) {
        st->depth++;
        return 0;
    }
    if (store_exec_sql(st, "BEGIN IMMEDIATE") != 0)
        return RS_EIO;
    st->depth = 1;
    return 0;
}

int
store_commit(struct store *st)
{
    if (st->depth == 0)
        return 0;
    if (--st->depth > 0)
        return 0;
    if (store_exec_sql(st, "COMMIT") != 0) {
        store_rollback(st);
        return RS_EIO;
    }
    return 0;
}

void
store_rollback(struct store *st)
{
    if (st->depth == 0)
        return;
    st->depth = 0;
    (void)sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
}

bool
store_in_txn(const struct store *st)
{
    return st->depth > 0;
}

/* ---------------------------------------------------------------- open */

int
store_meta_get(struct store *st, const char *key, int64_t *v)
{
    static const char sql[] = "SELECT ival FROM meta WHERE key = ?1";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_TRANSIENT);
    int r = sqlite3_step(s);
    int rc = r == SQLITE_ROW ? 0 : r == SQLITE_DONE ? RS_ENOTFOUND
                                                    : store_fail(st, "meta");
    if (r == SQLITE_ROW)
        *v = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc;
}

int
store_meta_set(struct store *st, const char *key, int64_t v)
{
    static const char sql[] =
        "INSERT OR REPLACE INTO meta(key, ival, tval) VALUES (?1, ?2, NULL)";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, v);
    return store_exec(st, s, "meta");
}

int
store_open(const char *path, struct store **out, char *err, size_t errlen)
{
    *out = NULL;
    struct store *st = rs_calloc(1, sizeof(*st));
    if (st == NULL) {
        snprintf(err, errlen, "out of memory");
        return RS_ENOMEM;
    }
    int rc = rs_statelock_take(path, "rsbridge", &st->lockfd, err, errlen);
    if (rc != 0)
        goto out;
    rc = RS_EIO;
    if (sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE |
                        SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        char m[256];
        snprintf(err, errlen, "%s: %s", path,
                 rs_sql_errmsg(st->db, 0, m, sizeof(m)));
        goto out;
    }
    sqlite3_busy_timeout(st->db, 5000);
    /* WAL, synchronous=NORMAL: a commit survives a crash of the process;
     * a power cut may lose the last commits, whole and in order, and then
     * the bridge reads those documents again. */
    int64_t app = 0, ver = 0;
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(st->db, "PRAGMA application_id", -1, &q,
                           NULL) == SQLITE_OK) {
        if (sqlite3_step(q) == SQLITE_ROW)
            app = sqlite3_column_int64(q, 0);
        sqlite3_finalize(q);
    }
    if (sqlite3_prepare_v2(st->db, "PRAGMA user_version", -1, &q,
                           NULL) == SQLITE_OK) {
        if (sqlite3_step(q) == SQLITE_ROW)
            ver = sqlite3_column_int64(q, 0);
        sqlite3_finalize(q);
    }
    if ((app != 0 && app != STORE_APP_ID) || ver > STORE_SCHEMA) {
        snprintf(err, errlen, "%s: not an rsbridge state, or a newer one",
                 path);
        rc = RS_EINVAL;
        goto out;
    }
    char pragmas[256], version[64];
    snprintf(pragmas, sizeof(pragmas),
             "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
             "PRAGMA cache_size=-16000; PRAGMA temp_store=MEMORY; "
             "PRAGMA application_id=%d;", STORE_APP_ID);
    snprintf(version, sizeof(version), "PRAGMA user_version=%d;",
             STORE_SCHEMA);
    /* schema 1 had no feeds.ask_due (CREATE ... IF NOT EXISTS keeps its
     * feeds as they were); the version is written once the columns are */
    if (store_exec_sql(st, pragmas) != 0 ||
        store_exec_sql(st, store_schema) != 0 ||
        (ver == 1 &&
         store_exec_sql(st, "BEGIN IMMEDIATE; ALTER TABLE feeds ADD COLUMN "
                        "ask_due INTEGER; PRAGMA user_version=2; COMMIT;")
             != 0)) {
        (void)sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        snprintf(err, errlen, "%s: %s", path, st->errstr);
        goto out;
    }
    if (ver >= 1 && ver <= 2 && store_exec_sql(st, store_migrate_2) != 0) {
        (void)sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        snprintf(err, errlen, "%s: migrating the state to schema 3: %s",
                 path, st->errstr);
        goto out;
    }
    if (store_exec_sql(st, version) != 0) {
        snprintf(err, errlen, "%s: %s", path, st->errstr);
        goto out;
    }
    /* SQLite's checkpoints (pages copied, two fsyncs) from a thread, not
     * from the commit on the loop every poller waits on; without one,
     * commits checkpoint as before */
    (void)rs_sqlckpt_start(st->db, 0, STORE_CKPT_FRAMES, &st->ckpt);
    *out = st;
    return 0;
out:
    store_free(st);
    return rc;
}

bool
store_checkpointing(const struct store *st)
{
    return st->ckpt != NULL;
}

void
store_free(struct store *st)
{
    if (st == NULL)
        return;
    /* first: the last connection's close checkpoints the whole WAL */
    rs_sqlckpt_stop(st->ckpt);
    store_rollback(st);
    for (size_t i = 0; i < STORE_STMTS; i++)
        if (st->stmts[i].s != NULL)
            sqlite3_finalize(st->stmts[i].s);
    if (st->db != NULL)
        sqlite3_close(st->db);
    if (st->lockfd >= 0)
        close(st->lockfd);        /* releases the flock */
    rs_free(st);
}

/* ------------------------------------------------------------- Sources */

static const char SQL_SRC_GET[] = "SELECT id, url FROM sources WHERE name = ?1";
static const char SQL_SRC_ADD[] =
    "INSERT INTO sources(name, url) VALUES (?1, ?2)";
static const char SQL_SRC_URL[] = "UPDATE sources SET url = ?2 WHERE id = ?1";

/* Every row of a Source but its sources row. */
static int
source_wipe(struct store *st, int64_t id)
{
    static const char *const sqls[] = {
        "DELETE FROM seen WHERE feed IN (SELECT id FROM feeds WHERE src = ?1)",
        "DELETE FROM rl WHERE feed IN (SELECT id FROM feeds WHERE src = ?1)",
        "DELETE FROM rldup WHERE feed IN "
        "(SELECT id FROM feeds WHERE src = ?1)",
        "DELETE FROM docs WHERE feed IN (SELECT id FROM feeds WHERE src = ?1)",
        "DELETE FROM feeds WHERE src = ?1",
        "DELETE FROM outbox WHERE src = ?1",
        "DELETE FROM lanes WHERE src = ?1",
    };
    for (size_t i = 0; i < sizeof(sqls) / sizeof(sqls[0]); i++) {
        sqlite3_stmt *s = store_stmt(st, sqls[i]);
        if (s == NULL)
            return RS_EIO;
        sqlite3_bind_int64(s, 1, id);
        if (store_exec(st, s, "forget a Source") != 0)
            return RS_EIO;
    }
    return 0;
}

int
store_source(struct store *st, const char *name, const char *url,
             int64_t *id, bool *fresh)
{
    int rc = store_begin(st);
    if (rc != 0)
        return rc;
    sqlite3_stmt *s = store_stmt(st, SQL_SRC_GET);
    if (s == NULL)
        goto fail;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_TRANSIENT);
    int r = sqlite3_step(s);
    bool found = r == SQLITE_ROW;
    bool same = found && strcmp((const char *)sqlite3_column_text(s, 1),
                                url) == 0;
    if (found)
        *id = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    if (r != SQLITE_ROW && r != SQLITE_DONE) {
        store_fail(st, "sources");
        goto fail;
    }
    *fresh = !same;
    if (!found) {
        s = store_stmt(st, SQL_SRC_ADD);
        if (s == NULL)
            goto fail;
        sqlite3_bind_text(s, 1, name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 2, url, -1, SQLITE_TRANSIENT);
        if (store_exec(st, s, "add a Source") != 0)
            goto fail;
        *id = sqlite3_last_insert_rowid(st->db);
    } else if (!same) {
        if (source_wipe(st, *id) != 0)
            goto fail;
        s = store_stmt(st, SQL_SRC_URL);
        if (s == NULL)
            goto fail;
        sqlite3_bind_int64(s, 1, *id);
        sqlite3_bind_text(s, 2, url, -1, SQLITE_TRANSIENT);
        if (store_exec(st, s, "a Source's URL") != 0)
            goto fail;
    }
    return store_commit(st);
fail:
    store_rollback(st);
    return RS_EIO;
}

int
store_sources(struct store *st,
              int (*cb)(void *ud, const char *name, const char *url),
              void *ud)
{
    static const char sql[] = "SELECT name, url FROM sources ORDER BY id";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (s == NULL)
        return RS_EIO;
    int rc = 0, r;
    while (rc == 0 && (r = sqlite3_step(s)) == SQLITE_ROW)
        rc = cb(ud, (const char *)sqlite3_column_text(s, 0),
                (const char *)sqlite3_column_text(s, 1));
    if (rc == 0 && r != SQLITE_DONE)
        rc = store_fail(st, "sources");
    sqlite3_reset(s);
    return rc;
}

/* --------------------------------------------------------------- feeds */

#define FEED_COLS "id, src, kind, k, url, gen, pos, win_from, walked, at, " \
                  "suspects, fw_at, ask_due, diffed"

static void
feed_row(sqlite3_stmt *s, struct store_feed *f)
{
    f->id = sqlite3_column_int64(s, 0);
    f->src = sqlite3_column_int64(s, 1);
    f->kind = (enum store_feed_kind)sqlite3_column_int(s, 2);
    f->k = sqlite3_column_int64(s, 3);
    snprintf(f->url, sizeof(f->url), "%s",
             (const char *)sqlite3_column_text(s, 4));
    f->gen = sqlite3_column_int64(s, 5);
    f->pos = rs_sql_col_time(s, 6);
    f->win_from = rs_sql_col_time(s, 7);
    f->walked = rs_sql_col_time(s, 8);
    f->at = rs_sql_col_time(s, 9);
    const unsigned char *t = sqlite3_column_text(s, 10);
    snprintf(f->suspects, sizeof(f->suspects), "%s",
             t != NULL ? (const char *)t : "");
    f->fw_at = rs_sql_col_time(s, 11);
    f->ask_due = rs_sql_col_time(s, 12);
    f->diffed = rs_sql_col_time(s, 13);
}

static const char SQL_FEED_GET[] =
    "SELECT " FEED_COLS " FROM feeds WHERE src = ?1 AND kind = ?2 AND url = ?3";
static const char SQL_FEED_ADD[] =
    "INSERT INTO feeds(src, kind, k, url) VALUES (?1, ?2, "
    " CASE WHEN ?2 = 1 THEN (SELECT coalesce(max(k) + 1, 0) FROM feeds "
    "   WHERE src = ?1 AND kind = 1) ELSE ?4 END, ?3)";
static const char SQL_FEED_PUT[] =
    "UPDATE feeds SET gen = ?2, pos = ?3, win_from = ?4, walked = ?5, "
    "at = ?6, suspects = ?7, diffed = ?8 WHERE id = ?1";
static const char SQL_FEED_TOLD[] =
    "UPDATE feeds SET fw_at = ?2, ask_due = ?3 WHERE id = ?1";
static const char SQL_FEED_ASK_NEXT[] =
    "SELECT " FEED_COLS " FROM feeds WHERE src = ?1 AND ask_due IS NOT NULL "
    "ORDER BY ask_due, id LIMIT 1";
static const char SQL_FEED_LAST[] =
    "SELECT " FEED_COLS " FROM feeds WHERE src = ?1 AND kind = ?2 AND "
    "k = ?3 AND id <> ?4 AND gen > 0 ORDER BY walked DESC, id DESC LIMIT 1";
static const char SQL_FEED_CAPS[] =
    "SELECT " FEED_COLS " FROM feeds WHERE src = ?1 AND kind = 1 ORDER BY k";

int
store_feed_get(struct store *st, int64_t src, enum store_feed_kind kind,
               const char *url, int64_t k, struct store_feed *out)
{
    if (strlen(url) >= sizeof(out->url)) {
        snprintf(st->errstr, sizeof(st->errstr), "a URL over 4095 bytes");
        return RS_ETOOBIG;
    }
    for (int pass = 0; pass < 2; pass++) {
        sqlite3_stmt *s = store_stmt(st, SQL_FEED_GET);
        if (s == NULL)
            return RS_EIO;
        sqlite3_bind_int64(s, 1, src);
        sqlite3_bind_int(s, 2, (int)kind);
        sqlite3_bind_text(s, 3, url, -1, SQLITE_TRANSIENT);
        int r = sqlite3_step(s);
        if (r == SQLITE_ROW)
            feed_row(s, out);
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
        if (r == SQLITE_ROW)
            return 0;
        if (r != SQLITE_DONE)
            return store_fail(st, "feeds");
        if (pass == 1)
            break;
        s = store_stmt(st, SQL_FEED_ADD);
        if (s == NULL)
            return RS_EIO;
        sqlite3_bind_int64(s, 1, src);
        sqlite3_bind_int(s, 2, (int)kind);
        sqlite3_bind_text(s, 3, url, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(s, 4, k);
        if (store_exec(st, s, "add a feed") != 0)
            return RS_EIO;
    }
    return store_fail(st, "feeds");
}

int
store_feed_put(struct store *st, const struct store_feed *f)
{
    sqlite3_stmt *s = store_stmt(st, SQL_FEED_PUT);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, f->id);
    sqlite3_bind_int64(s, 2, f->gen);
    rs_sql_bind_time(s, 3, f->pos);
    rs_sql_bind_time(s, 4, f->win_from);
    rs_sql_bind_time(s, 5, f->walked);
    rs_sql_bind_time(s, 6, f->at);
    sqlite3_bind_text(s, 7, f->suspects, -1, SQLITE_TRANSIENT);
    rs_sql_bind_time(s, 8, f->diffed);
    return store_exec(st, s, "a feed");
}

int
store_feed_told(struct store *st, int64_t id, rs_time_t fw_at,
                rs_time_t ask_due)
{
    sqlite3_stmt *s = store_stmt(st, SQL_FEED_TOLD);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, id);
    rs_sql_bind_time(s, 2, fw_at);
    rs_sql_bind_time(s, 3, ask_due);
    return store_exec(st, s, "a feed's framework notification");
}

int
store_feed_last(struct store *st, int64_t src, enum store_feed_kind kind,
                int64_t k, int64_t not_id, struct store_feed *out)
{
    sqlite3_stmt *s = store_stmt(st, SQL_FEED_LAST);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, src);
    sqlite3_bind_int(s, 2, (int)kind);
    sqlite3_bind_int64(s, 3, k);
    sqlite3_bind_int64(s, 4, not_id);
    int r = sqlite3_step(s);
    if (r == SQLITE_ROW)
        feed_row(s, out);
    int rc = r == SQLITE_ROW ? 0 : r == SQLITE_DONE ? RS_ENOTFOUND
                                                    : store_fail(st, "feeds");
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc;
}

int
store_ask_next(struct store *st, int64_t src, struct store_feed *out)
{
    sqlite3_stmt *s = store_stmt(st, SQL_FEED_ASK_NEXT);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, src);
    int r = sqlite3_step(s);
    if (r == SQLITE_ROW)
        feed_row(s, out);
    int rc = r == SQLITE_ROW ? 0 : r == SQLITE_DONE
                                       ? RS_ENOTFOUND
                                       : store_fail(st, "asks to reconcile");
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc;
}

int
store_caplists(struct store *st, int64_t src,
               int (*cb)(void *ud, const struct store_feed *f), void *ud)
{
    sqlite3_stmt *s = store_stmt(st, SQL_FEED_CAPS);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, src);
    int rc = 0, r;
    struct store_feed *f = rs_malloc(sizeof(*f));
    if (f == NULL)
        rc = RS_ENOMEM;
    while (rc == 0 && (r = sqlite3_step(s)) == SQLITE_ROW) {
        feed_row(s, f);
        rc = cb(ud, f);
    }
    if (rc == 0 && r != SQLITE_DONE)
        rc = store_fail(st, "feeds");
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    rs_free(f);
    return rc;
}

/* ----------------------------------------------------------- documents */

static const char SQL_DOCS[] =
    "SELECT url, etag, lastmod, digest, next, parent, rank FROM docs "
    "WHERE feed = ?1 ORDER BY rank";
static const char SQL_DOC_STAGE[] =
    "INSERT OR REPLACE INTO walkdocs(feed, url, etag, lastmod, digest, next, "
    "parent, rank, notmod) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";
static const char SQL_DOCS_NEW[] =
    "SELECT w.url, w.parent FROM walkdocs w WHERE w.feed = ?1 AND "
    "w.parent IS NOT NULL AND NOT EXISTS (SELECT 1 FROM docs d WHERE "
    "d.feed = ?1 AND d.url = w.url) ORDER BY w.rank";
static const char SQL_DOCS_DROP[] = "DELETE FROM docs WHERE feed = ?1";
static const char SQL_DOCS_MOVE[] =
    "INSERT INTO docs(feed, url, etag, lastmod, digest, next, parent, rank) "
    "SELECT feed, url, etag, lastmod, digest, next, parent, rank FROM "
    "walkdocs WHERE feed = ?1";
static const char SQL_WALKDOCS_CLEAR[] = "DELETE FROM walkdocs WHERE feed = ?1";
static const char SQL_WALK_CLEAR[] = "DELETE FROM walk WHERE feed = ?1";
static const char SQL_RLWALK_CLEAR[] = "DELETE FROM rlwalk WHERE feed = ?1";
static const char SQL_RLDUPWALK_CLEAR[] =
    "DELETE FROM rldupwalk WHERE feed = ?1";

static const char *
col_text(sqlite3_stmt *s, int i)
{
    return (const char *)sqlite3_column_text(s, i);
}

static void
bind_text(sqlite3_stmt *s, int i, const char *t)
{
    if (t != NULL)
        sqlite3_bind_text(s, i, t, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(s, i);
}

int
store_docs(struct store *st, int64_t feed,
           int (*cb)(void *ud, const struct store_doc *d), void *ud)
{
    sqlite3_stmt *s = store_stmt(st, SQL_DOCS);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, feed);
    int rc = 0, r;
    while (rc == 0 && (r = sqlite3_step(s)) == SQLITE_ROW) {
        struct store_doc d = {
            .url = col_text(s, 0),
            .etag = col_text(s, 1),
            .last_modified = col_text(s, 2),
            .next = col_text(s, 4),
            .parent = col_text(s, 5),
            .rank = sqlite3_column_int64(s, 6),
        };
        if (sqlite3_column_bytes(s, 3) == STORE_DIGEST) {
            d.has_digest = true;
            memcpy(d.digest, sqlite3_column_blob(s, 3), STORE_DIGEST);
        }
        rc = cb(ud, &d);
    }
    if (rc == 0 && r != SQLITE_DONE)
        rc = store_fail(st, "docs");
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc;
}

int
store_doc_stage(struct store *st, int64_t feed, const struct store_doc *d)
{
    sqlite3_stmt *s = store_stmt(st, SQL_DOC_STAGE);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, feed);
    sqlite3_bind_text(s, 2, d->url, -1, SQLITE_TRANSIENT);
    bind_text(s, 3, d->etag);
    bind_text(s, 4, d->last_modified);
    if (d->has_digest)
        sqlite3_bind_blob(s, 5, d->digest, STORE_DIGEST, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(s, 5);
    bind_text(s, 6, d->next);
    bind_text(s, 7, d->parent);
    sqlite3_bind_int64(s, 8, d->rank);
    sqlite3_bind_int(s, 9, d->notmod ? 1 : 0);
    return store_exec(st, s, "stage a document");
}

static int
exec_feed(struct store *st, const char *sql, int64_t feed, const char *what)
{
    sqlite3_stmt *s = store_stmt(st, sql);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, feed);
    return store_exec(st, s, what);
}

int
store_docs_commit(struct store *st, int64_t feed,
                  int (*on_new)(void *ud, const char *url, const char *parent),
                  void *ud)
{
    int rc = 0;
    if (on_new != NULL) {
        sqlite3_stmt *s = store_stmt(st, SQL_DOCS_NEW);
        if (s == NULL)
            return RS_EIO;
        sqlite3_bind_int64(s, 1, feed);
        int r;
        while (rc == 0 && (r = sqlite3_step(s)) == SQLITE_ROW)
            rc = on_new(ud, col_text(s, 0), col_text(s, 1));
        if (rc == 0 && r != SQLITE_DONE)
            rc = store_fail(st, "new documents");
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
        if (rc != 0)
            return rc;
    }
    if ((rc = exec_feed(st, SQL_DOCS_DROP, feed, "docs")) != 0 ||
        (rc = exec_feed(st, SQL_DOCS_MOVE, feed, "docs")) != 0)
        return rc;
    return exec_feed(st, SQL_WALKDOCS_CLEAR, feed, "docs");
}

int
store_docs_forget(struct store *st, int64_t feed)
{
    return exec_feed(st, SQL_DOCS_DROP, feed, "forget documents");
}

int
store_walk_clear(struct store *st, int64_t feed)
{
    int rc;
    if ((rc = exec_feed(st, SQL_WALKDOCS_CLEAR, feed, "walk")) != 0 ||
        (rc = exec_feed(st, SQL_WALK_CLEAR, feed, "walk")) != 0 ||
        (rc = exec_feed(st, SQL_RLDUPWALK_CLEAR, feed, "walk")) != 0)
        return rc;
    return exec_feed(st, SQL_RLWALK_CLEAR, feed, "walk");
}
