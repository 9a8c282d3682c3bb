/*
 * syncer.h - mirror files made durable off the loop when that is worth it.
 * One thread takes the files handed to it in order and does the part of
 * each commit that waits on the disk (mirror_prepare: the mtime, the
 * fsync; under full also the rename and the directory's fsync); the loop
 * is told when a file is done and renames it into place (mirror_commit). On a disk an fsync waits for a journal commit, a
 * millisecond or more, and every download and write of the loop waited
 * with it. On tmpfs an fsync costs nothing and the hand-off (a wake-up
 * each way) would only add latency: the syncer times every prepare, and
 * says to hand files over only while recent ones were slow. Owns its
 * thread, queue, wake-up and timings; never the files: each stays its
 * owner's, untouched by the owner until on_synced, or until syncer_free
 * returned.
 */
#ifndef SUB_SYNCER_H
#define SUB_SYNCER_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>

#include "mirror.h"
#include "rs_error.h"
#include "rs_time.h"

struct syncer;

/* f has been through mirror_prepare (its outcome is mirror_commit's to
 * tell); on the loop's thread. */
typedef void (*syncer_synced_cb)(void *ud);

/* A syncer whose callbacks run on base. The thread starts with the first
 * file. NULL with a message in err. */
struct syncer *syncer_new(struct event_base *base, char *err, size_t errsz);

/* A prepare slower than this (us) is a disk's: hand files over. */
#define SYNCER_SLOW_US 200

/* Whether files are worth handing over: a recent prepare (the slowest of
 * the last few dozen, the older weighing less) took SYNCER_SLOW_US or more.
 * False until one did. */
bool syncer_wanted(const struct syncer *s);

/* mirror_prepare(f, mtime) here and now, timed (for syncer_wanted). */
void syncer_prepare_here(struct syncer *s, struct mirror_file *f,
                         rs_time_t mtime);

/*
 * Hand f to the thread, to be prepared with mtime; on_synced(ud) follows
 * on the loop, in the order handed. 0, or RS_ENOMEM / RS_EIO (no memory,
 * no thread could be started): nothing was taken, commit f on the loop.
 */
int syncer_submit(struct syncer *s, struct mirror_file *f, rs_time_t mtime,
                  syncer_synced_cb on_synced, void *ud) RS_MUST_CHECK;

/* Files handed and not yet told (the thread's, or waiting for the loop);
 * the loop's count. */
size_t syncer_pending(const struct syncer *s);

/*
 * Stop: the thread finishes the file it holds, and is joined. Files handed
 * and not yet told are never told: their owners may free them once this
 * returned. NULL ok.
 */
void syncer_free(struct syncer *s);

#endif
