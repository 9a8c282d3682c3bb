/*
 * rs_sqlckpt.h - checkpoints of an SQLite WAL database off the writer's
 * thread: a thread with a connection of its own runs a PASSIVE checkpoint
 * when the WAL has grown or an interval has passed, and the writer's
 * commits no longer checkpoint.
 *
 * Owns the thread and its connection. Does not own the writer's
 * connection: it only turns that one's autocheckpoint off at the start and
 * back on (1000 pages, SQLite's default) at the stop. Used by rssource's
 * state, rssub's ledger and rsbridge's store, where a commit that
 * checkpoints would copy pages and fsync (twice a checkpoint) on the
 * event loop.
 */
#ifndef RS_SQLCKPT_H
#define RS_SQLCKPT_H

#include <sqlite3.h>

struct rs_sqlckpt;

/*
 * Start checkpointing db's main database (a file in WAL mode) from a
 * thread: each time commits have added frames to the WAL (0: never by
 * size; SQLite's own autocheckpoint is 1000), and every interval_ms (0:
 * never by time; both 0: every second). A commit that leaves 16 times
 * frames (16,000 when 0: 64 MB of 4 KiB pages, the journal_size_limit set
 * here) checkpoints itself on the writer's thread, as SQLite's own hook
 * would: the WAL starts over only after a checkpoint that ends while the
 * writer is between transactions, which a thread cannot count on when
 * its checkpoints take longer than the writer's pauses (fsyncs on a real
 * disk), so that bounds the WAL. db is the caller's, must outlive the
 * checkpointer, and has its WAL hook taken (sqlite3_wal_hook) until the
 * stop. Returns 0 and *out, RS_EINVAL (db has no file: memory or
 * temporary), RS_ENOMEM, or RS_EIO (no second connection or no thread);
 * on an error the commits go on checkpointing as before.
 */
int rs_sqlckpt_start(sqlite3 *db, unsigned interval_ms, unsigned frames,
                     struct rs_sqlckpt **out);

/* Stop and join the thread (a checkpoint under way ends first), close its
 * connection, and give db its autocheckpoint back. NULL is a no-op. */
void rs_sqlckpt_stop(struct rs_sqlckpt *c);

/* Checkpoints the thread has run so far; *writer_runs (may be NULL):
 * those the writer's commits ran at the bound. For tests and status. */
unsigned long rs_sqlckpt_runs(const struct rs_sqlckpt *c,
                              unsigned long *writer_runs);

#endif
