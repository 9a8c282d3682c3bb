/*
 * tree.h - the served directory: which relative paths may be listed and
 * served (no "..", no hidden segments, no reserved prefix, no excluded
 * pattern), opening and stat'ing them beneath the root without following
 * symlinks out of it, walking it in path order, and mapping paths to URL
 * paths and back. What a path's content means is the caller's business.
 *
 * Paths are "relative paths": segments joined by '/', no leading or
 * trailing slash, "" for the root itself.
 */
#ifndef SOURCE_TREE_H
#define SOURCE_TREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "rs_error.h"

#define TREE_PATH_MAX 4096     /* bytes of a relative path, NUL included */
#define TREE_DEPTH_MAX 128     /* directory nesting walked and served */
/* The top-level name under which the ResourceSync documents live: a file
 * DIR/resourcesync/x would be shadowed by them, so it is never listed. */
#define TREE_RESERVED "resourcesync"

struct tree_opts {
    const char *dir;               /* the root; must be a directory */
    const char *const *excludes;   /* fnmatch patterns, NULL-terminated;
                                      may be NULL */
    bool follow_symlinks;          /* list and serve what symlinks point
                                      to, wherever that is */
};

struct tree;

/* Open the root. 0, or RS_EINVAL (not a directory, bad pattern) /
 * RS_EIO / RS_ENOMEM with a message in err. */
int tree_open(const struct tree_opts *o, struct tree **out, char *err,
              size_t errlen) RS_MUST_CHECK;
void tree_free(struct tree *t);      /* NULL ok */

/* The root's canonical absolute path (realpath). */
const char *tree_root(const struct tree *t);
bool tree_follows_symlinks(const struct tree *t);

/* Has the root been deleted (rmdir, rm -rf)? The tree holds the root's
 * descriptor, so the kernel sends the root's watch no IN_DELETE_SELF
 * until that is closed; an unlinked directory has no links left. */
bool tree_root_gone(const struct tree *t);

/*
 * st's mtime in nanoseconds since the epoch, saturated to what an int64_t
 * holds: 1677-09-21T00:12:43Z .. 2262-04-11T23:47:16.854775807Z. Every
 * mtime rssource keeps (the identity of the hash cache, lastmod = this /
 * 1000, ETags, Last-Modified) comes from here, so a file dated past 2262
 * (touch -d 2300-01-01) gets the last instant as its lastmod everywhere
 * rather than an overflow. The clamp keeps W3C datetimes at 4-digit years
 * (rs_time_format formats 0000..9999 only). Two mtimes both past the
 * range look alike to the hash cache: a rewrite keeping inode, size and a
 * date past 2262 is then found only by a change of size.
 */
int64_t tree_mtime_ns(const struct stat *st);

/*
 * Why rel, which tree_path_ok refuses, is a file or directory that exists
 * but can never be published (a control character in a name, deeper than
 * TREE_DEPTH_MAX, TREE_PATH_MAX bytes or more), for the operator to be
 * told; NULL when it is left out by design (hidden, excluded, reserved).
 */
const char *tree_path_problem(const struct tree *t, const char *rel);

/*
 * May rel be listed and served? False for "", for an empty, "." or ".."
 * segment, a segment starting with '.', a control character, the reserved
 * top-level name, or a match of an exclude pattern: a pattern holding '/'
 * is matched against the whole path (FNM_PATHNAME), any other against each
 * segment, so "*.tmp" or "cache" exclude at every depth. A directory that
 * is not ok prunes everything beneath it. Pure: no I/O.
 */
bool tree_path_ok(const struct tree *t, const char *rel);

/*
 * Open rel read-only beneath the root: no directory component may be a
 * symlink (unless following symlinks), the last one neither, so no
 * symlink can lead out of the tree. The directories are resolved in one
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) where the kernel has it,
 * else opened one at a time with O_NOFOLLOW. Only regular files are
 * opened. Returns
 * an fd (>= 0, close-on-exec) with *st filled, or RS_ENOTFOUND (absent, not
 * allowed by tree_path_ok, not a regular file), RS_EIO.
 */
int tree_open_file(const struct tree *t, const char *rel, struct stat *st);

/* Open name in the directory dirfd (one a walk handed to on_file), with
 * the same rules as tree_open_file for the last component: a scan reads
 * each file without walking its path again. */
int tree_open_at(const struct tree *t, int dirfd, const char *name,
                 struct stat *st);

/* stat rel with the same rules (regular files and directories). 0,
 * RS_ENOTFOUND or RS_EIO. */
int tree_stat(const struct tree *t, const char *rel, struct stat *st)
    RS_MUST_CHECK;

/* For tests: false makes every tree of the process open directories one
 * component at a time, as on a kernel without openat2. */
void tree_set_openat2(bool on);

/*
 * Walk the subtree at sub ("" = everything), in byte order of the full
 * relative paths (siblings are sorted with a '/' appended to directory
 * names, which makes depth-first order equal to path order). on_dir runs
 * for each directory (sub itself included) before its entries; on_file for
 * each regular file whose path is ok. Paths not ok are skipped, as are
 * symlinks unless following them (then directory loops are cut). on_error
 * (may be NULL) hears about what could not be read, on_skip (may be NULL)
 * about what exists but is never walked or listed (tree_path_problem's
 * reasons: rel is the entry, or its directory when the entry's path would
 * not fit in TREE_PATH_MAX); the walk goes on.
 * A callback returning non-zero (a negative RS_E*) stops the walk with
 * that value.
 */
struct tree_walk_cbs {
    int (*on_dir)(void *ud, const char *rel, const struct stat *st);
    /* dirfd and name (the last segment of rel) are valid during the call:
     * for tree_open_at */
    int (*on_file)(void *ud, const char *rel, const struct stat *st,
                   int dirfd, const char *name);
    void (*on_error)(void *ud, const char *rel, int err);   /* errno */
    void (*on_skip)(void *ud, const char *rel, const char *why);
};
int tree_walk(const struct tree *t, const char *sub,
              const struct tree_walk_cbs *cbs, void *ud) RS_MUST_CHECK;

/*
 * The same walk in steps, for a tree too large to walk in one loop turn:
 * tree_walker_run visits at most budget files (0: no bound) and may be
 * called again to go on where it stopped. A directory's entries are read
 * when it is entered and its fd is held until its last entry, so what
 * changes in a directory after that is for the caller's watch to tell.
 * Callbacks return 0 or a negative RS_E*.
 */
struct tree_walker;
/* Owned by the caller (tree_walker_free). A sub that is gone or not ok
 * gives a walker with nothing to walk. RS_ENOMEM. */
int tree_walker_new(const struct tree *t, const char *sub,
                    struct tree_walker **out) RS_MUST_CHECK;
/* 1 when the walk is over, 0 when the budget ran out first, or the
 * callback's error (the walk is over then too). */
int tree_walker_run(struct tree_walker *w, const struct tree_walk_cbs *cbs,
                    void *ud, size_t budget) RS_MUST_CHECK;
void tree_walker_free(struct tree_walker *w);

/* Percent-encode rel into a URL path (no leading slash): every byte but
 * A-Z a-z 0-9 - . _ ~ and '/' becomes %XX. Returns the length, or
 * RS_ETOOBIG when it does not fit in len bytes (NUL included). */
int tree_url_encode(const char *rel, char *buf, size_t len) RS_MUST_CHECK;

/* Decode a URL path (no leading slash) into a relative path. RS_EINVAL
 * for a bad %XX, an encoded NUL; RS_ETOOBIG when too long. Whether the
 * result is allowed is tree_path_ok's business. */
int tree_url_decode(const char *path, char *buf, size_t len) RS_MUST_CHECK;

#endif
