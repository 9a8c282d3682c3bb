/*
 * rs_statelock.h - the writer's lock beside a daemon's SQLite state: a
 * file PATH.lock held with flock(LOCK_EX) for as long as the daemon runs.
 * SQLite's own locks last a transaction, and two daemons on one state
 * would each think they own its outbox. rssource's state and rsbridge's
 * store take it; rssub's ledger has its own (it also records the pid).
 * Owns nothing of the database.
 */
#ifndef RS_STATELOCK_H
#define RS_STATELOCK_H

#include <stddef.h>

#include "rs_error.h"

/*
 * Take the lock of the state at path for the program who ("rssource").
 * 0 and *fd (close it to release), or *fd = -1 and:
 *   RS_ESTATE  another process holds it ("PATH: in use by another WHO")
 *   RS_EIO     PATH.lock cannot be made or opened ("PATH.lock: why")
 * with the message in err (errlen bytes).
 */
int rs_statelock_take(const char *path, const char *who, int *fd, char *err,
                      size_t errlen) RS_MUST_CHECK;

#endif
