/*
 * catalog.h - what the Source holds: turns observations of the tree (one
 * path after an event, or a whole subtree scan) into catalog rows and
 * change records. Owns the created/updated/deleted decision and the hash
 * cache policy (a file is read only when its identity - device, inode,
 * size, mtime - is new). When to observe is watch.c's business; the
 * change log's datetimes and lists are changelog.c's.
 */
#ifndef SOURCE_CATALOG_H
#define SOURCE_CATALOG_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "changedump.h"
#include "changelog.h"
#include "rs_error.h"
#include "state.h"
#include "tree.h"

struct catalog_hooks {
    /* A directory a scan visited (watch.c adds its inotify watch before
     * the directory is read, so nothing created meanwhile is missed). */
    int (*on_dir)(void *ud, const char *rel);
    /* Something could not be read, or exists and is never listed
     * (tree_path_problem); the scan goes on. errnum is an errno, or 0
     * when what says it all. */
    void (*on_problem)(void *ud, const char *rel, const char *what,
                       int errnum);
    /* A changed file of at least CATALOG_DEFER_BYTES whose digests are
     * not known, observed for a change record (not the baseline, not with
     * --dump, whose capture is the read): true when it was handed to be
     * hashed elsewhere (hashwork.c), which then gives its digests to
     * catalog_digests_known and observes it again; its row stays as it
     * was until then. NULL or false: it is read here. */
    bool (*defer_hash)(void *ud, const char *rel);
    void *ud;
};

/* Files from this size on go to defer_hash: read here, the loop would
 * wait 3-5 ms for each MiB (MD5 and SHA-256 on the test machine). */
#define CATALOG_DEFER_BYTES (1024 * 1024)

struct catalog_opts {
    struct tree *tree;
    struct state *st;          /* the writer */
    const char *state_path;    /* for the scan's snapshot reader */
    struct changelog *cl;
    /* --dump: the content of each created/updated change is captured as
     * it is read for its digests (no second read); NULL: none. */
    struct changedump *cdump;
    struct catalog_hooks hooks;
};

struct catalog_stats {
    uint64_t files;            /* regular files looked at */
    uint64_t hashed;           /* files read and hashed */
    uint64_t hashed_bytes;
    uint64_t cache_hits;       /* digests reused from the hash cache */
    uint64_t created, updated, deleted;
    uint64_t problems;
};

struct catalog;

struct catalog *catalog_new(const struct catalog_opts *o);
void catalog_free(struct catalog *c);   /* NULL ok */

/*
 * Observe one path now: a regular file is compared with its row (and read
 * if its identity changed); an absent or no longer allowed path, and
 * everything catalogued beneath it, is deleted; a directory is scanned.
 * Changes are recorded unless record is false (the baseline of a new
 * state). Returns 0, RS_EAGAIN when the file changed while it was being
 * read (observe it again later), or an error.
 */
int catalog_observe(struct catalog *c, const char *rel, bool record,
                    rs_time_t now) RS_MUST_CHECK;

/*
 * Scan the subtree at sub ("" = all): walk it in path order alongside the
 * catalogued rows beneath it (a merge: no per-file query, no write for an
 * unchanged file), recording what was created, updated or deleted. Long
 * scans commit in slices.
 */
int catalog_scan(struct catalog *c, const char *sub, bool record,
                 rs_time_t now) RS_MUST_CHECK;

/*
 * The whole-tree scan of catalog_scan in steps, so that a loop serves and
 * watches between them (rssource's rescans): catalog_scan_start sets it
 * up (RS_ESTATE when one is going already); each catalog_scan_step walks
 * at most budget files in one transaction (its changes found at now) and
 * returns 0 while there is more, 1 once the scan is over, or an error
 * (the scan is over too, the step's transaction rolled back).
 * Observations may run between steps: the
 * rows are read afresh at each step from after the last file the walk
 * met, and a directory's entries when the walk enters it, so a change the
 * walk has passed is the watch's to report. catalog_free cancels one.
 */
int catalog_scan_start(struct catalog *c, bool record) RS_MUST_CHECK;
int catalog_scan_step(struct catalog *c, size_t budget, rs_time_t now)
    RS_MUST_CHECK;
bool catalog_scanning(const struct catalog *c);
void catalog_scan_cancel(struct catalog *c);

/*
 * Observe a batch of paths (watch.c's) in one transaction: those that
 * exist first, then those that are gone. A path being written meanwhile
 * is handed to retry. A storage error rolls the whole batch back and is
 * returned (the caller then rescans).
 */
int catalog_observe_batch(struct catalog *c, const char *const *paths,
                          size_t n, rs_time_t now,
                          void (*retry)(void *ud, const char *rel), void *ud)
    RS_MUST_CHECK;

/* Group observations in one transaction (nestable). */
int catalog_begin(struct catalog *c) RS_MUST_CHECK;
int catalog_commit(struct catalog *c) RS_MUST_CHECK;

/* Digests read elsewhere for a file with identity st (defer_hash): the
 * next observation of a file with that identity takes them instead of
 * reading it. The last CATALOG_KNOWN_MAX are kept. */
#define CATALOG_KNOWN_MAX 64
void catalog_digests_known(struct catalog *c, const struct stat *st,
                           const uint8_t md5[16], const uint8_t sha256[32]);

const struct catalog_stats *catalog_stats(const struct catalog *c);
/* Changes recorded since creation (to tell whether to wake the push). */
uint64_t catalog_changes(const struct catalog *c);

#endif
