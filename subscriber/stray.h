/*
 * stray.h - files in the mirror that no resource accounts for: put there by
 * hand, left by an earlier configuration (another --map or --prefix), or by
 * a crash between a file's rename and the commit of its ledger row. Found
 * by walking the mirror (mirror_walk) against the paths of the ledger's
 * live rows. What to do with one (report it, remove it) is the caller's;
 * what the Source has and the mirror lacks is the audit's (pull.h).
 */
#ifndef SUB_STRAY_H
#define SUB_STRAY_H

#include <stdint.h>
#include <sys/stat.h>

#include "rs_error.h"
#include "rs_time.h"

struct ledger;
struct mirror;

struct stray_stats {
    uint64_t files;          /* regular files walked */
    uint64_t strays;         /* handed to the callback */
    uint64_t recent;         /* not judged: changed at or after not_before */
};

/* rel: relative to the mirror root; st: its lstat. The callback may
 * mirror_remove(rel). Non-zero stops the scan, and stray_scan returns it. */
typedef int (*stray_cb)(void *ud, const char *rel, const struct stat *st);

/*
 * Call cb for every regular file of the mirror that no live ledger row
 * names. Files whose status changed (ctime: a write, a rename, a new
 * mtime) at or after not_before are counted as recent and not judged: a
 * daemon beside us may have written one and not yet committed its row.
 * RS_TIME_NONE judges every file (safe when the caller is the only writer
 * and has committed or holds the transaction its rows are in: rows are read
 * through the ledger's own connection). Names starting with ".rssub" (temp
 * files, the attic) and symlinks are never visited (mirror_walk).
 * Reads the whole ledger and walks the whole tree: 8-16 bytes of memory
 * per live row, seconds for a million files, on the calling thread.
 * 0, or the first error: RS_ENOMEM, a ledger error (ledger_errstr), a
 * directory that could not be read (mirror_errstr; the walk goes on past
 * it), or cb's value. *out (may be NULL) is filled in every case.
 */
int stray_scan(struct ledger *l, struct mirror *m, rs_time_t not_before,
               stray_cb cb, void *ud, struct stray_stats *out) RS_MUST_CHECK;

#endif
