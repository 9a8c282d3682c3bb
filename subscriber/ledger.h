/*
 * ledger.h - rssub's durable state, one SQLite database (WAL): what the
 * mirror holds (resources, deleted ones kept as tombstones), the changes
 * still to apply (todo), where each channel is (positions) and small text
 * metadata. Plain storage: which change wins, when to retry and what to
 * fetch are the engine's decisions. Nothing else in rssub opens the file.
 */
#ifndef SUB_LEDGER_H
#define SUB_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"
#include "rs_time.h"

/*
 * Errors: every call returns 0 (or the documented count/flag) or a
 * negative RS_E* code, and ledger_errstr() says what failed. Codes:
 * RS_EINVAL (bad argument; a file that is not an rssub state or is
 * corrupt), RS_ETOOBIG (a text over its cap below), RS_ENOTFOUND (no such
 * row), RS_ESTATE (a write on a LEDGER_READONLY handle, commit without
 * begin, a transaction SQLite already rolled back), RS_EAGAIN (the
 * database stayed locked by another connection for 5 s), RS_ENOMEM,
 * RS_EIO (disk full, I/O error, anything else SQLite reports).
 *
 * Strings: getters copy every string of a row into one allocation, *buf,
 * that the caller frees with rs_free(); the struct's pointers point into
 * it. Iterators (ledger_*_each, ledger_todo_next) lend the callback a row
 * valid until the callback returns. Rows are read in pages of up to
 * LEDGER_PAGE and copied, so a callback may call any ledger function,
 * writes and ledger_commit included (not ledger_close); a row of the
 * current page it changed through another row's callback is seen as it
 * was when the page was read.
 *
 * One thread uses a handle. Time arguments are rs_time_t; RS_TIME_NONE is
 * stored as "unknown" and read back as RS_TIME_NONE.
 */

struct ledger;

#define LEDGER_SCHEMA 2          /* PRAGMA user_version this code writes;
                                    a writer upgrades a version 1 file */
#define LEDGER_PAGE 1000         /* rows read per page by iterators */
#define LEDGER_URI_MAX 8192      /* bytes of a uri or channel name */
#define LEDGER_TEXT_MAX 4096     /* bytes of a path, hash, etag,
                                    last_modified, origin, position id */
#define LEDGER_ERROR_MAX 1024    /* last_error: cut (at a UTF-8 boundary)
                                    beyond this, never refused */
#define LEDGER_META_MAX 65536    /* bytes of a meta value */

enum ledger_flags {
    /* synchronous=FULL: a commit survives a power cut. The default
     * (NORMAL) survives a killed rssub; a power cut may lose the last
     * commits, in commit order, never half of one. */
    LEDGER_SYNC_FULL = 1 << 0,
    /* A reader beside the running writer (rssub status): takes no lock,
     * never creates or changes the schema; every write is RS_ESTATE. */
    LEDGER_READONLY = 1 << 1,
};

/*
 * Open (creating it and its schema if needed) the database at path.
 * A writer takes an exclusive flock on path + ".lock" (holding its pid),
 * so a second writer - another process, or a second open in this one -
 * is refused with "in use by another rssub (pid N)". The lock belongs to
 * the open file description: a child forked without exec holds it too.
 * A file with a newer schema (user_version > LEDGER_SCHEMA), another
 * application's SQLite database, a file that is not SQLite at all, and
 * (readonly) a missing file are refused. NULL with the reason in err.
 */
struct ledger *ledger_open(const char *path, unsigned flags, char *err,
                           size_t errsz);
/* Rolls back an open transaction. NULL ok. */
void ledger_close(struct ledger *l);
/* A writer's WAL is checkpointed by a thread of its own when a commit
 * leaves it over 1000 frames, not by that commit (which would copy pages
 * and fsync on the caller's thread); a commit that leaves it over 16,000
 * (the thread found no moment between two transactions to let it start
 * over) checkpoints itself (rs_sqlckpt.h). Returns the checkpoints the
 * thread has run since the open, *by_commits (may be NULL) those the
 * commits ran. 0 for a reader, and where the thread could not start
 * (commits then checkpoint, as SQLite does by default). */
unsigned long ledger_checkpoints(const struct ledger *l,
                                 unsigned long *by_commits);
/* A writer's checkpoint thread runs (false for a reader, and where it
 * could not start: the caller says so, the commits checkpoint). */
bool ledger_checkpointing(const struct ledger *l);
/* The pid a live writer of the database at path wrote into its lock file,
 * else 0. Takes no lock (a probe must never make a starting writer fail);
 * a stale pid that was reused reads as live: callers use it to be careful,
 * not to be bold. */
long ledger_writer_pid(const char *path);
/* The last failure, e.g. "todo put: disk I/O error"; "" after none. */
const char *ledger_errstr(const struct ledger *l);

/*
 * Transactions nest: the outermost begin is BEGIN IMMEDIATE, inner ones
 * are savepoints. Every successful ledger_begin is ended by exactly one
 * ledger_commit or ledger_rollback, whether that succeeds or not: a
 * failed commit has rolled back its level (the outermost: everything
 * since its begin). An inner rollback undoes only its level. When SQLite
 * rolls the whole transaction back on its own (disk full), every write is
 * refused (RS_ESTATE) until the outermost level is ended, so later writes
 * never commit without the earlier ones. Writes outside any transaction
 * commit one by one.
 */
int ledger_begin(struct ledger *l) RS_MUST_CHECK;
int ledger_commit(struct ledger *l) RS_MUST_CHECK;
int ledger_rollback(struct ledger *l);   /* RS_ESTATE when none is open */

/* ---------------------------------------------------------------- meta */

/* Text values by key ("source", "baseline_done", "last_error",
 * "caplist"...; "gen" is ledger_gen_next's). *val is the caller's
 * (rs_free); RS_ENOTFOUND when unset. */
int ledger_meta_get(struct ledger *l, const char *key, char **val)
    RS_MUST_CHECK;
/* val NULL deletes the key. */
int ledger_meta_set(struct ledger *l, const char *key, const char *val)
    RS_MUST_CHECK;

/* The next reconcile generation: 1, 2, ... (meta "gen"), in the open
 * transaction if any. */
int ledger_gen_next(struct ledger *l, int64_t *gen) RS_MUST_CHECK;

/* ----------------------------------------------------------- positions */

/* One row per channel (a ws:// URI, a WebSub topic, "pull"): the last hub
 * id taken (may be NULL) and the datetime of the last change applied. */
struct ledger_pos {
    const char *channel;
    const char *id;              /* NULL: none */
    rs_time_t dt;                /* RS_TIME_NONE: none */
    rs_time_t updated_at;        /* when ledger_pos_set wrote it */
};

/* *id is the caller's (rs_free; NULL when the row has none); dt or id may
 * be NULL. RS_ENOTFOUND when the channel has no row. */
int ledger_pos_get(struct ledger *l, const char *channel, char **id,
                   rs_time_t *dt) RS_MUST_CHECK;
/* Write it in the same transaction as the todo rows it covers: a position
 * then never runs ahead of the changes it stands for. */
int ledger_pos_set(struct ledger *l, const char *channel, const char *id,
                   rs_time_t dt) RS_MUST_CHECK;
/* Every position in channel order. A nonzero return of cb stops the walk
 * and is returned. */
int ledger_pos_each(struct ledger *l,
                    int (*cb)(void *ud, const struct ledger_pos *p),
                    void *ud) RS_MUST_CHECK;

/* ----------------------------------------------------------- resources */

/* One row per URI ever mirrored. A deleted resource stays as a tombstone
 * (deleted) with its change datetime, so a late, older create is known to
 * be older. */
struct ledger_res {
    const char *uri;
    const char *path;            /* relative to the mirror; NULL or "" for
                                    a tombstone of a file never written */
    rs_time_t lastmod, change_dt;
    int64_t length;              /* bytes; -1 unknown */
    const char *hash;            /* rs_hashes_format text, or NULL */
    const char *etag, *last_modified;  /* HTTP validators, or NULL */
    bool deleted;
    int64_t gen;                 /* reconcile generation it was last seen
                                    in (ledger_res_mark); 0: never */
};

/* Fills *out; its strings point into *buf (rs_free). RS_ENOTFOUND. */
int ledger_res_get(struct ledger *l, const char *uri, struct ledger_res *out,
                   char **buf) RS_MUST_CHECK;
/* Insert or replace the row of r->uri. */
int ledger_res_put(struct ledger *l, const struct ledger_res *r)
    RS_MUST_CHECK;
/* The rows r[0..n), each as ledger_res_put would write it, LEDGER_RES_BATCH
 * to a statement: a dump records thousands at a time, and one statement a
 * row was a third of their cost. Every row is checked first (one that
 * ledger_res_put would refuse: its error, and none is written); on a later
 * failure the statements before it stay written (inside the caller's
 * transaction, as ledger_res_put's do). */
#define LEDGER_RES_BATCH 32
int ledger_res_put_many(struct ledger *l, const struct ledger_res *r,
                        size_t n) RS_MUST_CHECK;
/* The row was seen in the Resource List of generation gen.
 * RS_ENOTFOUND when there is no row. */
int ledger_res_mark(struct ledger *l, const char *uri, int64_t gen)
    RS_MUST_CHECK;
/*
 * Rows in uri (byte) order. unseen_before_gen < 0: every row, tombstones
 * only when include_deleted. Otherwise only the live rows with gen <
 * unseen_before_gen (those a reconcile of that generation did not see;
 * include_deleted is ignored). A nonzero return of cb stops the walk and
 * is returned. Memory: one page, whatever the table's size. Rows the
 * callback writes ahead of the walk are seen as written.
 */
int ledger_res_each(struct ledger *l, bool include_deleted,
                    int64_t unseen_before_gen,
                    int (*cb)(void *ud, const struct ledger_res *r), void *ud)
    RS_MUST_CHECK;
/* A full scan: for status, not for every change. Either may be NULL. */
int ledger_res_count(struct ledger *l, int64_t *live, int64_t *tombstones)
    RS_MUST_CHECK;
/* True when the ledger holds no resource row at all, live or deleted
 * (one index step; false when that cannot be read either). */
bool ledger_res_none(struct ledger *l);
/* Rows this connection has inserted, updated or deleted since it was
 * opened (any table): equal twice, nothing was written in between. */
int64_t ledger_total_changes(struct ledger *l);

/* ---------------------------------------------------------------- todo */

enum ledger_change { LEDGER_CREATE = 1, LEDGER_UPDATE, LEDGER_DELETE };

/* A pending change: at most one per uri. */
struct ledger_todo {
    int64_t seq;                 /* set by ledger_todo_put; every put gets
                                    a larger one, never reused */
    int64_t pos;                 /* its place in the queue: the seq of
                                    the put that found no row of the uri
                                    (set by ledger_todo_put) */
    const char *uri;
    enum ledger_change change;
    rs_time_t change_dt, lastmod;
    int64_t length;              /* expected bytes; -1 unknown */
    const char *hash;            /* expected, rs_hashes_format text, or NULL */
    const char *origin;          /* "push", "changelist", "resourcelist",
                                    "audit", or NULL */
    int attempts;                /* failed attempts so far */
    rs_time_t not_before;        /* not due before; 0: at once. A failed
                                    row: when it failed */
    const char *last_error;      /* of the last failed attempt, or NULL */
    bool failed;                 /* given up; kept for status, not due */
};

/*
 * Insert the change, replacing any pending row of t->uri (also a failed
 * one) under a new seq; attempts, last_error and failed start afresh. A
 * replaced row keeps its place in the queue (pos): a resource that keeps
 * changing faster than the queue is worked off is fetched at its turn,
 * not sent to the back at each change (at 5,000 changes/s the p99 of such
 * a mirror was the time until a resource's changes paused). A retry row
 * put again (due at once now) may be at a place the walk of the rows due
 * at once has passed: its caller moves that cursor back. A failed row put
 * again goes to the back, as a uri with no row does.
 * Read from t: uri, change, change_dt, lastmod, length, hash, origin,
 * not_before (0 or RS_TIME_NONE: due at once). Which of two changes is
 * newer is the caller's call (ledger_todo_get, ledger_res_get). *seq_out
 * may be NULL.
 */
int ledger_todo_put(struct ledger *l, const struct ledger_todo *t,
                    int64_t *seq_out) RS_MUST_CHECK;
/* Fills *out; its strings point into *buf (rs_free). RS_ENOTFOUND. */
int ledger_todo_get(struct ledger *l, const char *uri, struct ledger_todo *out,
                    char **buf) RS_MUST_CHECK;

/*
 * Due rows (not failed, not_before <= now) are two queues, which the
 * engine serves in the order it chooses:
 *  LEDGER_DUE_NOW:   rows due at once (not_before 0), by pos: in the
 *                    order their uris came to be pending;
 *  LEDGER_DUE_RETRY: rows due from a time on (a retry after a failed
 *                    attempt, a requeued failed row) whose time has come
 *                    (0 < not_before <= now), by (not_before, pos).
 * Kept apart so that rows put after a retry came due cannot keep it
 * waiting: a Source that never stops changing (or a polling pull that
 * queues its backlog) always has rows due at once.
 * *cur ({0, 0} is the start of either queue; one cursor per queue) is
 * where the previous call left off; each call is one index seek, so
 * paging stays cheap with millions of rows. cb is called for at most max
 * rows; the cursor moves past every row cb returns 0 for. A nonzero
 * return stops the walk and is returned, and that row is offered again by
 * the next call (a rate limit); rows the engine has in flight it skips by
 * returning 0. When the walk reaches the last due row of its queue *cur
 * goes back to {0, 0} (so cur->pos == 0 afterwards says "ran dry"): the
 * next call then starts over and sees rows that sort before where the
 * cursor was (a row passed while a job held its uri, a row replaced
 * after the walk passed it, a row requeued at an earlier time). Returns 0, cb's nonzero value, or an error (the cursor
 * then stays before the failing page).
 */
struct ledger_cursor {
    rs_time_t not_before;
    int64_t pos;
};
enum ledger_due { LEDGER_DUE_NOW, LEDGER_DUE_RETRY };
int ledger_todo_next(struct ledger *l, enum ledger_due which, rs_time_t now,
                     struct ledger_cursor *cur, size_t max,
                     int (*cb)(void *ud, const struct ledger_todo *t),
                     void *ud) RS_MUST_CHECK;

/* Rows the todo walks have read and copied out of SQLite since the open,
 * whether or not their callback took them: what refilling costs. */
uint64_t ledger_todo_rows_read(const struct ledger *l);

/* The earliest not_before of a row not failed (0: one is due at once);
 * RS_ENOTFOUND when there is none. */
int ledger_todo_next_due(struct ledger *l, rs_time_t *when) RS_MUST_CHECK;
/* The earliest not_before after now of a row not failed: when the next
 * retry comes due (to arm a timer); RS_ENOTFOUND when none waits. */
int ledger_todo_due_after(struct ledger *l, rs_time_t now, rs_time_t *when)
    RS_MUST_CHECK;
/* The newest row's seq (0: none). Every later put gets a greater one
 * (AUTOINCREMENT), even after rows were taken off. */
int ledger_todo_max_seq(struct ledger *l, int64_t *seq) RS_MUST_CHECK;
/* *any: a row not failed, due by now, with a seq at or below seq remains
 * (the work known at some moment is not all done yet). */
int ledger_todo_due_upto(struct ledger *l, int64_t seq, rs_time_t now,
                         bool *any) RS_MUST_CHECK;

/*
 * The job of (uri, seq) ended. Each acts only while the row still has
 * that seq (it was not replaced by a newer put meanwhile) and returns 1
 * if it did, 0 if not, or an error.
 *  done:  delete the row (record the resource in the same transaction).
 *  retry: attempts + 1, not due before not_before, last_error = err.
 *  fail:  attempts + 1, failed, last_error = err, not_before = now.
 */
int ledger_todo_done(struct ledger *l, const char *uri, int64_t seq)
    RS_MUST_CHECK;
int ledger_todo_retry(struct ledger *l, const char *uri, int64_t seq,
                      rs_time_t not_before, const char *err) RS_MUST_CHECK;
int ledger_todo_fail(struct ledger *l, const char *uri, int64_t seq,
                     const char *err) RS_MUST_CHECK;

/* Rows due (not failed, not_before <= now), waiting (not failed, later)
 * and failed; any may be NULL. Scans the index: for status. */
int ledger_todo_count(struct ledger *l, rs_time_t now, int64_t *due,
                      int64_t *waiting, int64_t *failed) RS_MUST_CHECK;
/* Failed rows, in the order they failed; cb as for ledger_res_each. */
int ledger_todo_each_failed(struct ledger *l,
                            int (*cb)(void *ud, const struct ledger_todo *t),
                            void *ud) RS_MUST_CHECK;
/* Once per state (a meta key says it was done): change times after limit
 * (written before rssub took a Source's future times as of now) are made
 * unknown in res, todo and pos, so that they no longer make real changes
 * look older; if any was, the positions whose channel ends in
 * source_suffix lose their time too, so that the next pull reconciles
 * with the Resource List: the changes skipped meanwhile are found there.
 * *cleared: how many times were made unknown. Writer only; opens its own
 * transaction. */
int ledger_clear_future(struct ledger *l, rs_time_t limit,
                        const char *source_suffix, int64_t *cleared)
    RS_MUST_CHECK;
/* Make every failed row due again at not_before with attempts 0 (their
 * seq is kept). *n (may be NULL): how many. */
int ledger_todo_requeue_failed(struct ledger *l, rs_time_t not_before,
                               int64_t *n) RS_MUST_CHECK;

#endif
