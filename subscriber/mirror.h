/*
 * mirror.h - the mirror directory: every filesystem operation rssub does on
 * it (atomic replace of a file, removal or move to the attic, stat, read,
 * walk, crash cleanup), confined beneath its root without following any
 * symlink. What a relative path should be (pathmap.h) and what a file's
 * content is (fetching, hashing) are other modules' business.
 */
#ifndef SUB_MIRROR_H
#define SUB_MIRROR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include "rs_error.h"
#include "rs_time.h"

#define MIRROR_PATH_MAX 4096      /* bytes of a relative path, NUL included */
#define MIRROR_DEPTH_MAX 256      /* segments of a relative path */
#define MIRROR_RESERVED ".rssub"  /* names starting so (any case) are ours:
                                     never written for a caller, skipped by
                                     mirror_walk */
#define MIRROR_TMP_PREFIX ".rssub-tmp."  /* temp files: ".rssub-tmp.XXXXXX" */
#define MIRROR_STAGE_PREFIX ".rssub-stage."  /* stages, in the root only */

/*
 * Relative paths ("rel"): segments joined by '/', no leading or trailing
 * '/', no empty, "." or ".." segment, none starting with ".rssub" (any
 * case), none over 255 bytes, at most MIRROR_DEPTH_MAX segments, shorter
 * than MIRROR_PATH_MAX. Anything else is RS_EINVAL. pathmap_path() only
 * produces such paths.
 *
 * Confinement: rel is walked one directory at a time with openat(...,
 * O_DIRECTORY | O_NOFOLLOW); a symlink on the way is RS_EDENIED, a
 * non-directory on the way RS_EINVAL, never followed. A symlink at the
 * final name is replaced (commit), removed itself (remove), or reported as
 * one (stat), never followed.
 *
 * Errors: every call returns 0 or an RS_E* code; the OS failure behind the
 * last one is kept in the mirror: mirror_errstr() gives e.g.
 * "a/b.txt: write: ENOSPC: No space left on device", mirror_errno() the
 * errno (0 when the failure was not an OS error). Codes: RS_EINVAL (bad
 * rel; a file where a directory is needed; a directory at the final name),
 * RS_EDENIED (a symlink on the way), RS_ENOTFOUND (absent), RS_ENOMEM,
 * RS_EIO (any other OS error: ENOSPC, EDQUOT, EFBIG, EACCES, EROFS...).
 *
 * A struct mirror and its files are used from one thread at a time.
 * Directory fds are cached (a small LRU keyed by relative directory); a
 * directory rssub prunes is dropped from the cache, one removed behind our
 * back is noticed (its fd has no links left) and walked again. A directory
 * renamed behind our back while cached is not noticed.
 */

enum mirror_fsync {
    MIRROR_FSYNC_NONE,    /* no fsync: fastest. A killed process still
                             leaves old or new content; a power loss may
                             leave recent files empty or lost */
    MIRROR_FSYNC_FILE,    /* fsync each file before its rename: a crash
                             leaves the old or the new content */
    MIRROR_FSYNC_FULL,    /* FILE, and fsync the directory after each
                             rename/unlink, and the parent of every
                             directory created: changes survive a crash */
};
/* In a stage (below) FILE and FULL fsync nothing file by file: one
 * syncfs(2) of the mirror's filesystem before the stage is published
 * makes all it holds durable at once, the same guarantee (nothing of a
 * stage is visible before) for one journal commit instead of one a file. */

struct mirror_opts {
    enum mirror_fsync fsync;
    /* NULL: removed files are deleted. Else an absolute directory
     * (created with its parents if missing, not a symlink itself, on the
     * mirror's filesystem) removed files are moved to, at their relative
     * path; if that name exists the file gets a ".YYYYMMDDThhmmssZ" (UTC)
     * suffix, then "-1", "-2"... Inside the mirror only as a ".rssub..."
     * directory (e.g. DIR/.rssub-attic), so mirror_walk never sees it; a
     * mirror inside the attic is refused. */
    const char *attic;
    /* A missing mirror directory is an error (RS_ENOTFOUND), not made:
     * when the state lists files, a missing directory is more likely a
     * file system that did not mount than a first run, and filling the
     * file system below it would be the wrong repair. */
    bool no_create;
};

struct mirror;
struct mirror_file;        /* a new version of one file, being written */

/*
 * Open (creating it and its parents, mode 0755, if missing, unless
 * o->no_create) the mirror directory dir. dir itself must not be a
 * symlink (parents of it may be). o may be NULL (no fsync, no attic);
 * o->attic is copied. Returns the mirror (free with mirror_close), or
 * NULL with a message in err.
 */
struct mirror *mirror_open(const char *dir, const struct mirror_opts *o,
                           char *err, size_t errsz);

/*
 * One writer per mirror directory: an exclusive, non-blocking flock on
 * the mirror's own directory fd, held until mirror_close (twins and
 * stages share it). Every spelling of the directory (symlinked parents,
 * "a/../b") is one inode, so one lock; nothing is written into the
 * mirror for it. 0; RS_ESTATE when another open file (another process,
 * or another mirror_open in this one) holds it, *holder (may be NULL)
 * then the holder's pid as /proc/locks tells it, or 0 when it cannot be
 * told; RS_EIO for any other failure (mirror_errstr says). A report-only
 * reader does not lock: it must run beside the writer.
 */
int mirror_lock(struct mirror *m, long *holder) RS_MUST_CHECK;

/*
 * Does the path m was opened with still name the directory m holds?
 * A mirror moved or removed behind our back keeps working through its
 * fd, so without this every write would go on into a directory nobody
 * serves. 0 yes; RS_ENOTFOUND the path names nothing; RS_ESTATE it names
 * something else; RS_EIO stat failed otherwise (mirror_errstr says
 * which). Two system calls. 0 for a twin or a stage (no path of their
 * own).
 */
int mirror_check_root(struct mirror *m) RS_MUST_CHECK;
void mirror_close(struct mirror *m);       /* NULL ok; open files must be
                                              committed or aborted first */

/*
 * A second handle on m's mirror, with m's options, for another thread (a
 * struct mirror is used by one thread at a time; twins may be used at
 * once, each by its own thread): its own directory cache and last error.
 * Directories a twin creates or removes are not dropped from another
 * handle's cache, so twins are for writing files, not for pruning. Free
 * with mirror_close. NULL with a message in err.
 */
struct mirror *mirror_twin(const struct mirror *m, char *err, size_t errsz);

/* "none", "file" or "full" -> *out; RS_EINVAL for anything else. */
int mirror_fsync_from(const char *s, enum mirror_fsync *out) RS_MUST_CHECK;

/* The mirror root's canonical absolute path. */
const char *mirror_root(const struct mirror *m);

/* The last failure (see above); "" and 0 before any. */
const char *mirror_errstr(const struct mirror *m);
int mirror_errno(const struct mirror *m);

/*
 * Start a new version of rel: missing directories on the way are created
 * (0755, less umask), and a temp file ".rssub-tmp.XXXXXX" (0644, less
 * umask) in rel's directory. Nothing is visible under rel until
 * mirror_commit. 0 with *out (finish it with mirror_commit or
 * mirror_abort, before m is closed: f uses m's root), or an error (*out
 * NULL).
 */
int mirror_begin(struct mirror *m, const char *rel, struct mirror_file **out)
    RS_MUST_CHECK;

/*
 * Append len bytes. On failure (ENOSPC, EDQUOT, EFBIG...) the temp file is
 * removed at once, later writes fail with the same code, and f must still
 * be finished with mirror_commit (which then fails) or mirror_abort.
 */
int mirror_write(struct mirror_file *f, const void *buf, size_t len)
    RS_MUST_CHECK;

/*
 * Make the new version visible under rel, atomically: set its mtime (unless
 * mtime is RS_TIME_NONE), fsync per policy, close, rename over rel (which
 * replaces a file or a symlink; a directory at rel is RS_EINVAL). Frees f
 * in every case; on failure the temp is removed and the old rel, if any,
 * is untouched.
 */
int mirror_commit(struct mirror_file *f, rs_time_t mtime) RS_MUST_CHECK;

/* Drop the new version: the temp is removed, rel untouched; frees f.
 * NULL ok. */
void mirror_abort(struct mirror_file *f);

/*
 * The part of mirror_commit that may wait on the disk, ahead of it and on
 * any thread: set the mtime and fsync per policy; under full also close,
 * rename into place and fsync the directory (outside a stage), as that
 * fsync waits on the disk too. It touches f's own file and directory and
 * nothing else, so the mirror may be used meanwhile; f itself must not
 * be. mirror_commit(f, ...) then only closes and renames (under full only
 * reports; its mtime is ignored), and reports a failure of this part as
 * its own ("a.txt: fsync: EIO: ..."). Once per f; optional.
 */
void mirror_prepare(struct mirror_file *f, rs_time_t mtime);
/* Whether f's new version is in place already (mirror_prepare under
 * full): dropping f then leaves it there. false for NULL. */
bool mirror_file_placed(const struct mirror_file *f);
/* Whether m's commits fsync (a policy other than none, and not a stage):
 * then mirror_prepare is worth a thread. */
bool mirror_syncs(const struct mirror *m);

/*
 * A stage of m: a new directory ".rssub-stage.XXXXXX" in m's root, used as
 * a mirror of its own (mirror_begin/write/commit, and its twins on other
 * threads) in which files are created under their final names: no temp
 * and no rename each, which on a tree being filled is a third of what a
 * small file costs. Nothing in it is visible under m until
 * mirror_stage_publish. A path given twice in one stage is refused
 * (EEXIST), not replaced. Closing a stage (mirror_close) removes it and
 * everything it still holds; one a crash left is removed by
 * mirror_sweep_temps. NULL with a message in err.
 */
struct mirror *mirror_stage_new(struct mirror *m, char *err, size_t errsz);
/*
 * Move everything stage holds into m at the same relative paths, then
 * close the stage (its twins must be closed already). A directory m
 * lacks moves in one rename; into one m has, entry by entry; a file
 * replaces m's file or symlink, as mirror_commit does. What cannot be
 * moved (a directory at a file's path, a file or symlink where a
 * directory is needed, an OS error) is dropped, on_fail (may be NULL)
 * called with each of its files' relative paths and why. fsync per m's
 * policy: under FILE and FULL a syncfs of the filesystem first (a
 * failure there publishes nothing: RS_EIO, "ROOT: syncfs: EIO: ..."),
 * FULL also fsyncs each directory renamed into. 0, or RS_EINVAL (not a
 * stage), RS_ENOMEM, RS_EIO; the stage is closed in every case.
 */
typedef void (*mirror_stage_fail_cb)(void *ud, const char *rel,
                                     const char *why);
int mirror_stage_publish(struct mirror *m, struct mirror *stage,
                         mirror_stage_fail_cb on_fail, void *ud)
    RS_MUST_CHECK;
/*
 * Remove rel (a file or symlink; a directory is RS_EINVAL): deleted, or
 * moved to the attic. RS_ENOTFOUND when absent. Directories left empty are
 * then removed, up to (not including) the root; failing to remove one is
 * not an error.
 */
int mirror_remove(struct mirror *m, const char *rel) RS_MUST_CHECK;

/* lstat rel (a symlink is reported as one). 0, RS_ENOTFOUND... */
int mirror_stat(struct mirror *m, const char *rel, struct stat *st)
    RS_MUST_CHECK;

/* Open rel read-only; *fd (close-on-exec, blocking) is the caller's. Only
 * a regular file: a symlink is RS_EDENIED, anything else RS_EINVAL (a FIFO
 * does not block the open). */
int mirror_open_read(struct mirror *m, const char *rel, int *fd)
    RS_MUST_CHECK;

/*
 * After a crash: remove every ".rssub-tmp.*" regular file in the tree (not
 * descending into symlinks or other ".rssub*" directories) and every
 * ".rssub-stage.*" directory in the root with what it holds (one each). *removed (may
 * be NULL) counts them. Goes on past unreadable directories and returns the
 * first error.
 */
int mirror_sweep_temps(struct mirror *m, size_t *removed) RS_MUST_CHECK;

/*
 * Call cb for every regular file in the tree (directory order, not sorted),
 * with its relative path and lstat. Symlinks and other non-regular files,
 * and every name starting with ".rssub" (any case), are skipped, symlinks
 * to directories not followed. cb may mirror_remove the file it is given
 * (e.g. a stray); other changes to the tree during the walk make what is
 * visited unspecified. cb returning non-zero stops the walk, and
 * mirror_walk returns that value; else 0 or the first error reading a
 * directory (the walk goes on past it).
 */
typedef int (*mirror_walk_cb)(void *ud, const char *rel,
                              const struct stat *st);
int mirror_walk(struct mirror *m, mirror_walk_cb cb, void *ud) RS_MUST_CHECK;

#endif
