/*
 * snapshot.h - Resource List snapshots. A snapshot ("generation" G) is the
 * catalog as of one instant (`at`), written once into files in the state
 * directory: resourcelist-G.xml (the Resource List, or its index when the
 * catalog holds more than a page) and resourcelist-G-K.xml (part K), or a
 * rel="next" chain of pages. A Destination walking an index therefore sees
 * one consistent catalog however long the walk takes: the parts of
 * generation G never change, and the last few generations stay on disk.
 * Builds read the catalog in one SQLite read transaction on their own
 * connection, in slices, so the loop keeps serving and watching meanwhile.
 * When to build is the caller's business (serve.c, rssource.c).
 */
#ifndef SOURCE_SNAPSHOT_H
#define SOURCE_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "docs.h"
#include "rs_error.h"
#include "rs_time.h"
#include "state.h"

struct event_base;

struct snapshot_opts {
    const struct docs *docs;
    struct state *st;            /* the writer: meta and framework events */
    const char *state_path;      /* for the build's own read connection */
    const char *dir;             /* where the files go (created if needed) */
    size_t page_size;            /* entries per document, 1..RS_MAX_ENTRIES */
    bool next_links;             /* rel="next" pages instead of an index */
    unsigned keep;               /* generations kept on disk, >= 2 */
    struct event_base *base;     /* for asynchronous builds; may be NULL */
    size_t slice;                /* entries per loop turn; 0: 2000 */
    /* A build finished (rc 0: published) or failed. */
    void (*on_done)(void *ud, int rc);
    void *ud;
};

struct snapshot_info {
    int64_t gen;                 /* 0: none yet */
    rs_time_t at, completed;
    int64_t count;               /* resources listed */
    int64_t parts;               /* documents below the top one (0: single) */
    int64_t change_seq;          /* the change log's seq at `at` */
};

struct snapshot;

/* Reads the current generation from the state and removes files of
 * generations that are not kept. NULL with *err. */
struct snapshot *snapshot_new(const struct snapshot_opts *o, const char **err);
/* A build in progress is abandoned (on_done does not run). NULL ok. */
void snapshot_free(struct snapshot *s);

/* The published snapshot (gen 0 when there is none yet). */
const struct snapshot_info *snapshot_current(const struct snapshot *s);

/* Is there a snapshot, made for this base URL and paging? */
bool snapshot_fits(const struct snapshot *s);
/* Does the current snapshot miss changes (or not fit)? */
bool snapshot_stale(struct snapshot *s);

/* Build a new generation now, blocking (start-up, tests). */
int snapshot_build(struct snapshot *s, rs_time_t now) RS_MUST_CHECK;
/* Start one on the loop; on_done runs when it is published or failed.
 * RS_ESTATE if one is already running (its on_done will still run). */
int snapshot_build_async(struct snapshot *s) RS_MUST_CHECK;
bool snapshot_building(const struct snapshot *s);

/*
 * The file serving the document named name ("resourcelist.xml" = the
 * current top document, "resourcelist-G.xml", "resourcelist-G-K.xml") of
 * a kept generation, into path. 0 or RS_ENOTFOUND.
 */
int snapshot_file(const struct snapshot *s, const char *name, char *path,
                  size_t len) RS_MUST_CHECK;

#endif
