/*
 * watch.h - change detection with inotify: one watch per directory of the
 * tree (added as scans visit directories, so directories created later
 * are covered), each event mapped back to a relative path, and paths held
 * until they settle: a closed-after-write, moved or deleted path is ready
 * at once; a created, modified or re-attributed one only after `settle`
 * without further events, so a file still being written is not announced
 * half-written. Ready paths are handed over in batches, at once when the
 * last batch is older than coalesce_us, else when it is (a busy tree
 * gives fewer, larger batches). A thread of its own reads the
 * descriptor, so that the kernel's small event queue does not overflow
 * while the loop is busy; the events wait in memory for the loop. An
 * overflow of either queue (or too many pending paths) asks the owner for
 * a full rescan. What a path's
 * change means is catalog.c's business.
 */
#ifndef SOURCE_WATCH_H
#define SOURCE_WATCH_H

#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"
#include "tree.h"

struct event_base;

struct watch_opts {
    struct event_base *base;
    const struct tree *tree;
    int64_t settle_ms;            /* quiet time before an unclosed change
                                     is ready */
    size_t max_pending;           /* paths held; over it: rescan; 0: 1M */
    int64_t coalesce_us;          /* a batch waits for this time since the
                                     last one to pass; 0: 2 ms, < 0: none */
    size_t max_queued;            /* bytes of events read from the kernel
                                     and not yet decoded; over it: rescan;
                                     0: 64 MiB */
    /* Paths ready to observe (files or directories, which may be gone).
     * The array is valid during the call only. */
    void (*on_batch)(void *ud, const char *const *paths, size_t n);
    /* Events were lost: the whole tree must be scanned again. */
    void (*on_rescan)(void *ud, const char *why);
    /* The root itself was deleted or moved away; once. A deleted root
     * is looked for every WATCH_ROOT_CHECK_MS (see tree_root_gone). */
    void (*on_root_gone)(void *ud);
    /* errnum: an errno, or 0 when what says it all */
    void (*on_problem)(void *ud, const char *rel, const char *what,
                       int errnum);
    void *ud;
};

#define WATCH_ROOT_CHECK_MS 1000

struct watch_stats {
    uint64_t events;
    uint64_t batches;
    uint64_t overflows;
    size_t watches;               /* directories watched now */
    size_t pending;               /* paths waiting to settle or be handed */
};

struct watch;

struct watch *watch_new(const struct watch_opts *o, const char **err);
void watch_free(struct watch *w);     /* NULL ok */

/* Watch the directory rel ("" = the root). Called for every directory a
 * scan visits, before it is read. 0, or RS_ETOOBIG when the kernel's
 * watch limit is reached (fs.inotify.max_user_watches), RS_EIO. */
int watch_add_dir(struct watch *w, const char *rel) RS_MUST_CHECK;

/* Observe rel again after the settle time (it was being written when it
 * was read). */
int watch_retry(struct watch *w, const char *rel) RS_MUST_CHECK;

void watch_get_stats(const struct watch *w, struct watch_stats *out);

#endif
