/*
 * dumpw.h - rssource's Resource Dump: the catalog as of one instant packed
 * into ZIP packages (each with its manifest.xml, a Resource Dump Manifest)
 * and a Resource Dump document listing them. A generation G is written by
 * a thread of its own into new files (resourcedump-G-K.zip,
 * resourcedump-G.xml) and published by one rename, so the dump served is
 * always complete; the last two generations stay on disk for Destinations
 * still downloading. When to build is the caller's business (rssource.c);
 * dumpw_due says when a build may start (the interval, the waits after a
 * failed build).
 */
#ifndef SOURCE_DUMPW_H
#define SOURCE_DUMPW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "docs.h"
#include "rs_error.h"
#include "rs_time.h"
#include "state.h"
#include "tree.h"

#define DUMPW_DOC "resourcedump.xml"     /* the current generation's */
#define DUMPW_MAX_FILES 50000            /* a manifest's entries, at most */

struct dumpw_opts {
    const struct docs *docs;     /* read by the build thread: never freed
                                    or changed while dumpw lives */
    const struct tree *tree;     /* likewise */
    struct state *st;            /* the writer: meta (loop thread only) */
    const char *state_path;      /* the build's own read connection */
    const char *dir;             /* where the files go (created if needed) */
    uint64_t max_bytes;          /* content bytes per package (a larger
                                    file goes alone); 0: 64 MiB */
    size_t max_files;            /* members per package, 1..DUMPW_MAX_FILES;
                                    0: 20000 */
    int64_t interval_ms;         /* --dump-interval: a dump missing changes
                                    is rebuilt once this old (0: at once);
                                    also the longest wait after a failed
                                    build (0: DUMPW_RETRY_MAX_MS) */
};

/* A failed build is tried again after 1 s, doubling with each failure in
 * a row up to interval_ms, or this when interval_ms is 0. */
#define DUMPW_RETRY_MAX_MS 60000

struct dumpw_info {
    int64_t gen;                 /* 0: none yet */
    rs_time_t at, completed;
    int64_t change_seq;          /* the change log's seq at `at` */
    int64_t files;               /* members written */
    int64_t packages;
    uint64_t bytes;              /* package bytes */
};

struct dumpw;

/* Reads the current generation from the state and removes files of
 * generations that are not kept. NULL with *err. */
struct dumpw *dumpw_new(const struct dumpw_opts *o, const char **err);
/* Waits for a build under way (its result is thrown away). NULL ok. */
void dumpw_free(struct dumpw *w);

/* The published dump (gen 0 when there is none). */
const struct dumpw_info *dumpw_current(const struct dumpw *w);
/* Does the current dump miss changes the change log holds? */
bool dumpw_stale(struct dumpw *w);

/*
 * Should a build start now? When none runs, the dump misses changes (or
 * there is none), the current one is interval_ms old, and the wait after
 * a failed build is over: a build that fails (a full disk) reads the
 * whole tree again, so it is not retried in a loop.
 */
bool dumpw_due(struct dumpw *w, rs_time_t now);
/* When the last build failed: when the next may start (the time of the
 * failure plus its wait). RS_TIME_NONE when the last one did not fail. */
rs_time_t dumpw_retry_at(const struct dumpw *w);

/* Start a build on its own thread. RS_ESTATE if one is under way. */
int dumpw_start(struct dumpw *w) RS_MUST_CHECK;
bool dumpw_building(const struct dumpw *w);
/*
 * From the loop: has the build ended? 0 while none has (or none runs), 1
 * when a new generation was published now, or a negative RS_E* when it
 * failed (the previous dump stays; dumpw_errstr says why).
 */
int dumpw_poll(struct dumpw *w) RS_MUST_CHECK;
/* Build and publish now, blocking (tests). */
int dumpw_build(struct dumpw *w) RS_MUST_CHECK;
const char *dumpw_errstr(const struct dumpw *w);

/*
 * The file serving name (DUMPW_DOC, resourcedump-G.xml,
 * resourcedump-G-K.zip or its manifest resourcedump-G-K.xml, of a kept
 * generation) into path, its media type in *ctype. 0 or RS_ENOTFOUND.
 */
int dumpw_file(const struct dumpw *w, const char *name, char *path,
               size_t len, const char **ctype) RS_MUST_CHECK;

#endif
