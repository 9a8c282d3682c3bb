/*
 * rldiff.c - Resource List diffs (see rldiff.h). Tables: rlwalk (this
 * walk's entries, by loc: for a loc met more than once the entry that
 * ranks highest), rldupwalk (the others), rl and rldup (the same of the
 * last walk). The diff is two queries: rlwalk LEFT JOIN rl (created,
 * updated), and rl rows rlwalk lacks (deleted, or kept: copied into
 * rlwalk with a miss count). Then rlwalk becomes rl, rldupwalk rldup.
 */
#include "rldiff.h"

#include <stdio.h>
#include <string.h>

#define RS_LOG_MODULE "rldiff"
#include "rs_alloc.h"
#include "rs_hash.h"
#include "rs_log.h"
#include "rs_sqlite.h"

struct check {
    char *loc;
    enum rldiff_check what;
};

struct rldiff {
    struct store *st;
    int64_t feed;
    uint64_t staged;
    uint64_t dups;                /* entries of a loc staged already */
    char *dup_loc;                /* the first such loc, for the log */
    struct check checks[RLDIFF_CHECKS];
    size_t nchecks;
};

struct rldiff *
rldiff_new(struct store *st)
{
    struct rldiff *rd = rs_calloc(1, sizeof(*rd));
    if (rd != NULL)
        rd->st = st;
    return rd;
}

static void
checks_clear(struct rldiff *rd)
{
    for (size_t i = 0; i < rd->nchecks; i++)
        rs_free(rd->checks[i].loc);
    rd->nchecks = 0;
}

void
rldiff_free(struct rldiff *rd)
{
    if (rd == NULL)
        return;
    checks_clear(rd);
    rs_free(rd->dup_loc);
    rs_free(rd);
}

void
rldiff_begin(struct rldiff *rd, int64_t feed)
{
    rd->feed = feed;
    rd->staged = 0;
    rd->dups = 0;
    rs_free(rd->dup_loc);
    rd->dup_loc = NULL;
    checks_clear(rd);
}

/*
 * A list that names one resource twice is malformed, but which of its
 * entries stands for the resource must not depend on their order (or on
 * which part of an index answered 304): the two swapped between two reads
 * would be a spurious "updated". So a loc already staged keeps the entry
 * that ranks higher by RANK_KEY - the newest lastmod (an absent one the
 * oldest), then hash, length, type, the document and the place in it:
 * the whole entry, whatever order it came in. The same rule carries a
 * 304 part's rows.
 */
#define RANK_KEY(t) "(coalesce(" t "lastmod, -9223372036854775807 - 1), " \
    "coalesce(" t "hash, ''), coalesce(" t "length, -1), " \
    "coalesce(" t "type, ''), " t "doc, " t "ord)"

static const char SQL_STAGE[] =
    "INSERT OR IGNORE INTO rlwalk(feed, loc, ord, doc, lastmod, hash, "
    "length, type) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
#define RANK_NEW "(coalesce(?5, -9223372036854775807 - 1), coalesce(?6, ''), " \
    "coalesce(?7, -1), coalesce(?8, ''), ?4, ?3)"
/* SQL_STAGE's loc was staged already, and this entry ranks higher: the
 * one staged loses (kept in rldupwalk), this one stands */
static const char SQL_STAGE_DISPLACE[] =
    "INSERT OR IGNORE INTO rldupwalk(feed, loc, ord, doc, lastmod, hash, "
    "length, type) SELECT feed, loc, ord, doc, lastmod, hash, length, type "
    "FROM rlwalk WHERE feed = ?1 AND loc = ?2 AND " RANK_NEW " > "
    RANK_KEY("");
static const char SQL_STAGE_DUP[] =
    "UPDATE rlwalk SET ord = ?3, doc = ?4, lastmod = ?5, hash = ?6, "
    "length = ?7, type = ?8, miss = 0 WHERE feed = ?1 AND loc = ?2 AND "
    RANK_NEW " > " RANK_KEY("");
/* ... or it ranks lower: it loses */
static const char SQL_STAGE_LOSE[] =
    "INSERT OR IGNORE INTO rldupwalk(feed, loc, ord, doc, lastmod, hash, "
    "length, type) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
/*
 * A part that stood as it was still holds what it held: the rows its
 * last read met (not those kept though missed) - those that stood for
 * their loc (rl) and those that lost to another entry of it (rldup) - and
 * they compete again with what the walk staged, by the same rule. First
 * what the carried winners displace or lose to (before the carry changes
 * rlwalk), then the carry, then the losers one by one (rare: they exist
 * only for a list naming a resource twice).
 */
static const char SQL_CARRY_DISPLACED[] =
    "INSERT OR IGNORE INTO rldupwalk(feed, loc, ord, doc, lastmod, hash, "
    "length, type) SELECT w.feed, w.loc, w.ord, w.doc, w.lastmod, w.hash, "
    "w.length, w.type FROM rl AS r JOIN rlwalk AS w ON w.feed = r.feed AND "
    "w.loc = r.loc WHERE r.feed = ?1 AND r.doc = ?2 AND r.miss = 0 AND "
    RANK_KEY("r.") " > " RANK_KEY("w.");
static const char SQL_CARRY_LOSING[] =
    "INSERT OR IGNORE INTO rldupwalk(feed, loc, ord, doc, lastmod, hash, "
    "length, type) SELECT r.feed, r.loc, r.ord, r.doc, r.lastmod, r.hash, "
    "r.length, r.type FROM rl AS r JOIN rlwalk AS w ON w.feed = r.feed AND "
    "w.loc = r.loc WHERE r.feed = ?1 AND r.doc = ?2 AND r.miss = 0 AND "
    RANK_KEY("r.") " < " RANK_KEY("w.");
static const char SQL_CARRY_DOC[] =
    "INSERT INTO rlwalk(feed, loc, ord, doc, lastmod, hash, length, type, "
    "miss) SELECT feed, loc, ord, doc, lastmod, hash, length, type, 0 FROM "
    "rl WHERE feed = ?1 AND doc = ?2 AND miss = 0 "
    "ON CONFLICT(feed, loc) DO UPDATE SET ord = excluded.ord, "
    "doc = excluded.doc, lastmod = excluded.lastmod, hash = excluded.hash, "
    "length = excluded.length, type = excluded.type, miss = 0 WHERE "
    RANK_KEY("excluded.") " > " RANK_KEY("rlwalk.");
static const char SQL_CARRY_DUPS[] =
    "SELECT loc, ord, lastmod, hash, length, type FROM rldup WHERE "
    "feed = ?1 AND doc = ?2 ORDER BY ord";

/* An entry as staged: from a document, or carried from the state. */
struct row {
    const char *loc;
    int64_t ord;                  /* rank << 20 | place in the document */
    const char *doc;
    rs_time_t lastmod;
    const char *hash;             /* NULL: none */
    int64_t length;               /* -1: none */
    const char *type;             /* NULL: none */
};

/* Bind a row to SQL_STAGE's parameters (those of SQL_STAGE_* too). */
static void
row_bind(int64_t feed, sqlite3_stmt *s, const struct row *r)
{
    sqlite3_bind_int64(s, 1, feed);
    sqlite3_bind_text(s, 2, r->loc, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 3, r->ord);
    sqlite3_bind_text(s, 4, r->doc, -1, SQLITE_TRANSIENT);
    rs_sql_bind_time(s, 5, r->lastmod);
    if (r->hash != NULL)
        sqlite3_bind_text(s, 6, r->hash, -1, SQLITE_TRANSIENT);
    if (r->length >= 0)
        sqlite3_bind_int64(s, 7, r->length);
    if (r->type != NULL)
        sqlite3_bind_text(s, 8, r->type, -1, SQLITE_TRANSIENT);
}

static int
row_exec(struct rldiff *rd, const char *sql, const struct row *r,
         const char *what, int *changes)
{
    sqlite3_stmt *s = store_stmt(rd->st, sql);
    if (s == NULL)
        return RS_EIO;
    row_bind(rd->feed, s, r);
    int rc = store_exec(rd->st, s, what);
    if (changes != NULL)
        *changes = rc == 0 ? sqlite3_changes(sqlite3_db_handle(s)) : 0;
    return rc;
}

/* Stage a row; a loc staged already keeps the entry that ranks higher,
 * the other goes to rldupwalk. *dup: the loc was staged already. */
static int
row_stage(struct rldiff *rd, const struct row *r, bool *dup)
{
    int n = 0;
    int rc = row_exec(rd, SQL_STAGE, r, "stage an entry", &n);
    *dup = rc == 0 && n == 0;
    if (rc != 0 || n > 0)
        return rc;
    if ((rc = row_exec(rd, SQL_STAGE_DISPLACE, r, "stage a duplicate entry",
                       &n)) != 0)
        return rc;
    return n > 0 ? row_exec(rd, SQL_STAGE_DUP, r, "stage a duplicate entry",
                            NULL)
                 : row_exec(rd, SQL_STAGE_LOSE, r, "stage a duplicate entry",
                            NULL);
}

int
rldiff_entry(struct rldiff *rd, const struct walk_doc *d, size_t idx,
             const struct rs_entry *e, const char *loc)
{
    if (rd->staged >= RLDIFF_MAX_ENTRIES)
        return RS_ETOOBIG;
    char hash[RS_HASHES_BUFSZ];
    bool has_hash = e->has_md && e->md.hash.n > 0;
    if (has_hash)
        rs_hashes_format(&e->md.hash, hash);
    struct row r = {
        .loc = loc,
        .ord = (d->rank << 20) | (int64_t)(idx & 0xfffff),
        .doc = d->url,
        .lastmod = e->lastmod,
        .hash = has_hash ? hash : NULL,
        .length = e->has_md && e->md.length >= 0 ? e->md.length : -1,
        .type = e->has_md ? e->md.type : NULL,
    };
    bool dup = false;
    int rc = row_stage(rd, &r, &dup);
    if (rc != 0)
        return rc;
    rd->staged++;
    if (!dup)
        return 0;
    /* the loc was staged already: the rule decided, not the order */
    rd->dups++;
    if (rd->dup_loc == NULL)
        rd->dup_loc = rs_strdup(loc);     /* NULL: logged without it */
    return 0;
}

static int
exec2(struct store *st, const char *sql, int64_t feed, const char *doc,
      const char *what)
{
    sqlite3_stmt *s = store_stmt(st, sql);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, feed);
    sqlite3_bind_text(s, 2, doc, -1, SQLITE_TRANSIENT);
    return store_exec(st, s, what);
}

int
rldiff_doc(struct rldiff *rd, const struct walk_doc *d, bool not_modified)
{
    if (!not_modified)
        return 0;
    int rc;
    if ((rc = exec2(rd->st, SQL_CARRY_DISPLACED, rd->feed, d->url,
                    "a part that stood")) != 0 ||
        (rc = exec2(rd->st, SQL_CARRY_LOSING, rd->feed, d->url,
                    "a part that stood")) != 0 ||
        (rc = exec2(rd->st, SQL_CARRY_DOC, rd->feed, d->url,
                    "a part that stood")) != 0)
        return rc;
    sqlite3_stmt *q = store_stmt(rd->st, SQL_CARRY_DUPS);
    if (q == NULL)
        return RS_EIO;
    sqlite3_bind_int64(q, 1, rd->feed);
    sqlite3_bind_text(q, 2, d->url, -1, SQLITE_TRANSIENT);
    int r;
    while (rc == 0 && (r = sqlite3_step(q)) == SQLITE_ROW) {
        struct row row = {
            .loc = (const char *)sqlite3_column_text(q, 0),
            .ord = sqlite3_column_int64(q, 1),
            .doc = d->url,
            .lastmod = rs_sql_col_time(q, 2),
            .hash = (const char *)sqlite3_column_text(q, 3),
            .length = sqlite3_column_type(q, 4) == SQLITE_NULL
                          ? -1 : sqlite3_column_int64(q, 4),
            .type = (const char *)sqlite3_column_text(q, 5),
        };
        bool dup;
        rc = row_stage(rd, &row, &dup);
    }
    if (rc == 0 && r != SQLITE_DONE)
        rc = store_fail(rd->st, "a part's duplicates");
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return rc;
}

static const char SQL_HAS_ROWS[] = "SELECT 1 FROM rl WHERE feed = ?1 LIMIT 1";

int
rldiff_has_rows(struct rldiff *rd, int64_t feed, bool *yes)
{
    sqlite3_stmt *q = store_stmt(rd->st, SQL_HAS_ROWS);
    if (q == NULL)
        return RS_EIO;
    sqlite3_bind_int64(q, 1, feed);
    int r = sqlite3_step(q);
    *yes = r == SQLITE_ROW;
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return r == SQLITE_ROW || r == SQLITE_DONE ? 0
                                                : store_fail(rd->st, "rl");
}

/* ----------------------------------------------------------- the gone */

static const char SQL_GONE[] =
    "SELECT r.loc, r.miss FROM rl AS r WHERE r.feed = ?1 AND NOT EXISTS "
    "(SELECT 1 FROM rlwalk AS w WHERE w.feed = ?1 AND w.loc = r.loc) "
    "ORDER BY r.ord";

bool
rldiff_needs_checks(const struct store_feed *f, const struct walk_result *wr)
{
    /* only a walk that read two documents or more whole can have met a
     * list moving under it; one with skipped entries deletes nothing,
     * whatever the answers */
    return f->diffed != RS_TIME_NONE && wr->changed > 0 && wr->docs > 1 &&
           wr->skipped == 0;
}

int
rldiff_gone(struct rldiff *rd, size_t max,
            int (*cb)(void *ud, const char *loc), void *ud)
{
    sqlite3_stmt *q = store_stmt(rd->st, SQL_GONE);
    if (q == NULL)
        return RS_EIO;
    sqlite3_bind_int64(q, 1, rd->feed);
    int rc = 0, r;
    size_t n = 0;
    while (rc == 0 && n < max && (r = sqlite3_step(q)) == SQLITE_ROW) {
        rc = cb(ud, (const char *)sqlite3_column_text(q, 0));
        n++;
    }
    if (rc == 0 && n < max && r != SQLITE_DONE)
        rc = store_fail(rd->st, "gone resources");
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return rc;
}

int
rldiff_checked(struct rldiff *rd, const char *loc, enum rldiff_check what)
{
    if (rd->nchecks == RLDIFF_CHECKS)
        return RS_ETOOBIG;
    char *l = rs_strdup(loc);
    if (l == NULL)
        return RS_ENOMEM;
    rd->checks[rd->nchecks++] = (struct check){ l, what };
    return 0;
}

static enum rldiff_check
check_of(const struct rldiff *rd, const char *loc)
{
    for (size_t i = 0; i < rd->nchecks; i++)
        if (strcmp(rd->checks[i].loc, loc) == 0)
            return rd->checks[i].what;
    return RLDIFF_UNKNOWN;
}

/* --------------------------------------------------------------- commit */

static const char SQL_NEW[] =
    "SELECT w.loc, w.lastmod, w.hash, w.length, w.type, r.loc IS NULL, "
    "r.lastmod FROM rlwalk AS w LEFT JOIN rl AS r ON r.feed = ?1 AND "
    "r.loc = w.loc WHERE w.feed = ?1 AND (r.loc IS NULL OR "
    "(w.hash IS NOT NULL AND r.hash IS NOT NULL AND w.hash <> r.hash) OR "
    "((w.hash IS NULL OR r.hash IS NULL) AND (w.lastmod IS NOT r.lastmod OR "
    "w.length IS NOT r.length))) ORDER BY (w.lastmod IS NULL), w.lastmod, "
    "w.ord";
static const char SQL_KEEP[] =
    "INSERT OR REPLACE INTO rlwalk(feed, loc, ord, doc, lastmod, hash, "
    "length, type, miss) SELECT feed, loc, ord, doc, lastmod, hash, length, "
    "type, ?3 FROM rl WHERE feed = ?1 AND loc = ?2";
/* A resource held by a walk with a hole: as the last walk had it, but
 * under no document (''), so that no part answering 304 later carries it
 * as listed - the next complete walk meets it or not. */
static const char SQL_HOLD[] =
    "INSERT OR REPLACE INTO rlwalk(feed, loc, ord, doc, lastmod, hash, "
    "length, type, miss) SELECT feed, loc, ord, '', lastmod, hash, length, "
    "type, miss FROM rl WHERE feed = ?1 AND loc = ?2";
static const char SQL_RL_DROP[] = "DELETE FROM rl WHERE feed = ?1";
static const char SQL_RL_MOVE[] =
    "INSERT INTO rl(feed, loc, ord, doc, lastmod, hash, length, type, miss) "
    "SELECT feed, loc, ord, doc, lastmod, hash, length, type, miss FROM "
    "rlwalk WHERE feed = ?1";
static const char SQL_RLWALK_DONE[] = "DELETE FROM rlwalk WHERE feed = ?1";
static const char SQL_RLDUP_DROP[] = "DELETE FROM rldup WHERE feed = ?1";
static const char SQL_RLDUP_MOVE[] =
    "INSERT INTO rldup(feed, doc, ord, loc, lastmod, hash, length, type) "
    "SELECT feed, doc, ord, loc, lastmod, hash, length, type FROM "
    "rldupwalk WHERE feed = ?1";
static const char SQL_RLDUPWALK_DONE[] =
    "DELETE FROM rldupwalk WHERE feed = ?1";

static int
exec1(struct store *st, const char *sql, int64_t a, const char *what)
{
    sqlite3_stmt *s = store_stmt(st, sql);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, a);
    return store_exec(st, s, what);
}

/* The best datetime of a difference (rldiff.h). */
static rs_time_t
best_dt(rs_time_t lastmod, rs_time_t old_lastmod, bool created,
        rs_time_t at, rs_time_t now)
{
    if (lastmod != RS_TIME_NONE &&
        (created || old_lastmod == RS_TIME_NONE || lastmod > old_lastmod))
        return lastmod;
    return at != RS_TIME_NONE ? at : now;
}

static int
take_new(struct rldiff *rd, const struct rldiff_hooks *h, rs_time_t at,
         rs_time_t now, struct rldiff_stats *out)
{
    sqlite3_stmt *q = store_stmt(rd->st, SQL_NEW);
    if (q == NULL)
        return RS_EIO;
    sqlite3_bind_int64(q, 1, rd->feed);
    int rc = 0, r;
    while (rc == 0 && (r = sqlite3_step(q)) == SQLITE_ROW) {
        bool created = sqlite3_column_int(q, 5) != 0;
        rs_time_t lastmod = rs_sql_col_time(q, 1);
        struct clscan_change c = {
            .loc = (const char *)sqlite3_column_text(q, 0),
            .change = created ? RS_CHANGE_CREATED : RS_CHANGE_UPDATED,
            .datetime = best_dt(lastmod, rs_sql_col_time(q, 6), created, at,
                                now),
            .lastmod = lastmod,
            .hash = (const char *)sqlite3_column_text(q, 2),
            .length = sqlite3_column_type(q, 3) == SQLITE_NULL
                          ? -1 : sqlite3_column_int64(q, 3),
            .type = (const char *)sqlite3_column_text(q, 4),
        };
        if (created)
            out->created++;
        else
            out->updated++;
        rc = h->on_change(h->ud, &c);
    }
    if (rc == 0 && r != SQLITE_DONE)
        rc = store_fail(rd->st, "differences");
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return rc;
}

static int
keep_row(struct rldiff *rd, const char *loc, int64_t miss)
{
    sqlite3_stmt *s = store_stmt(rd->st, SQL_KEEP);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, rd->feed);
    sqlite3_bind_text(s, 2, loc, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 3, miss);
    return store_exec(rd->st, s, "keep a resource");
}

static int
hold_row(struct rldiff *rd, const char *loc)
{
    sqlite3_stmt *s = store_stmt(rd->st, SQL_HOLD);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, rd->feed);
    sqlite3_bind_text(s, 2, loc, -1, SQLITE_TRANSIENT);
    return store_exec(rd->st, s, "hold a resource");
}

/* The resources the walk did not meet: deleted, kept (asked about, or
 * missed once), or - hole: the walk skipped a malformed entry - all held,
 * their miss count as it was (a walk that could not read the list whole
 * is no miss). */
static int
take_gone(struct rldiff *rd, const struct rldiff_hooks *h, bool checked,
          bool hole, rs_time_t at, rs_time_t now, struct rldiff_stats *out)
{
    sqlite3_stmt *q = store_stmt(rd->st, SQL_GONE);
    if (q == NULL)
        return RS_EIO;
    sqlite3_bind_int64(q, 1, rd->feed);
    int rc = 0, r;
    while (rc == 0 && (r = sqlite3_step(q)) == SQLITE_ROW) {
        const char *loc = (const char *)sqlite3_column_text(q, 0);
        int64_t miss = sqlite3_column_int64(q, 1);
        if (hole) {
            out->held++;
            rc = hold_row(rd, loc);
            continue;
        }
        bool gone = true;
        if (checked) {
            enum rldiff_check what = check_of(rd, loc);
            gone = what == RLDIFF_GONE ||
                   (what == RLDIFF_UNKNOWN && miss >= 1);
            if (!gone) {
                out->kept++;
                rc = keep_row(rd, loc, what == RLDIFF_THERE ? 0 : miss + 1);
                continue;
            }
        }
        struct clscan_change c = {
            .loc = loc,
            .change = RS_CHANGE_DELETED,
            .datetime = at != RS_TIME_NONE ? at : now,
            .lastmod = RS_TIME_NONE,
            .length = -1,
        };
        out->deleted++;
        rc = h->on_change(h->ud, &c);
    }
    if (rc == 0 && r != SQLITE_DONE)
        rc = store_fail(rd->st, "deleted resources");
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return rc;
}

int
rldiff_commit(struct rldiff *rd, struct store_feed *f,
              const struct walk_result *wr, rs_time_t started, bool checked,
              const struct rldiff_hooks *hooks, struct rldiff_stats *out)
{
    struct rldiff_stats local;
    if (out == NULL)
        out = &local;
    *out = (struct rldiff_stats){ .staged = rd->staged,
                                  .duplicates = rd->dups,
                                  .baseline = f->diffed == RS_TIME_NONE,
                                  .unchanged = f->diffed != RS_TIME_NONE &&
                                               wr->changed == 0 };
    struct store *st = rd->st;
    struct store_feed nf = *f;
    int rc = store_begin(st);
    if (rc != 0)
        return rc;
    if (!out->unchanged) {
        if (!out->baseline &&
            ((rc = take_new(rd, hooks, wr->at, started, out)) != 0 ||
             (rc = take_gone(rd, hooks, checked, wr->skipped > 0, wr->at,
                             started, out)) != 0))
            goto fail;
        if (out->baseline && hooks->on_baseline != NULL &&
            (rc = hooks->on_baseline(hooks->ud, f, wr)) != 0)
            goto fail;
        if ((rc = exec1(st, SQL_RL_DROP, rd->feed, "rl")) != 0 ||
            (rc = exec1(st, SQL_RL_MOVE, rd->feed, "rl")) != 0 ||
            (rc = exec1(st, SQL_RLDUP_DROP, rd->feed, "rldup")) != 0 ||
            (rc = exec1(st, SQL_RLDUP_MOVE, rd->feed, "rldup")) != 0)
            goto fail;
        nf.at = wr->at;
    }
    if ((rc = exec1(st, SQL_RLWALK_DONE, rd->feed, "rlwalk")) != 0 ||
        (rc = exec1(st, SQL_RLDUPWALK_DONE, rd->feed, "rldupwalk")) != 0 ||
        (rc = store_docs_commit(st, rd->feed, NULL, NULL)) != 0)
        goto fail;
    nf.gen = f->gen + 1;
    nf.walked = started;
    nf.diffed = started;
    if ((rc = store_feed_put(st, &nf)) != 0 || (rc = store_commit(st)) != 0)
        goto fail;
    *f = nf;
    checks_clear(rd);
    if (rd->dups > 0) {
        /* once a walk: the list stays malformed until its Source fixes it */
        char n[24];
        snprintf(n, sizeof(n), "%llu", (unsigned long long)rd->dups);
        rs_log_kv(RS_LOG_WARN, "a resource list names a resource more than "
                  "once: the entry with the newest lastmod stands for it",
                  "resourcelist", f->url, "loc",
                  rd->dup_loc != NULL ? rd->dup_loc : "?", "duplicates", n,
                  NULL);
    }
    return 0;
fail:
    store_rollback(st);
    return rc;
}
