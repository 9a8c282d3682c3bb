/*
 * changelog.h - the change log's policy: every change gets a datetime
 * (strictly increasing, so entries are in forward chronological order even
 * when the clock steps back) and a Change List; the open Change List is
 * closed, and the next one opened, when it holds max_entries changes or is
 * max_age old; closed lists past the retention are dropped. Rotations are
 * recorded as framework events. Storage is state.c's; time comes from the
 * caller so tests can drive it.
 */
#ifndef SOURCE_CHANGELOG_H
#define SOURCE_CHANGELOG_H

#include <stdbool.h>
#include <stdint.h>

#include "rs_error.h"
#include "rs_time.h"
#include "state.h"

/* Document names, relative to the documents' directory. */
#define CHANGELOG_INDEX_NAME "changelist-index.xml"
#define CHANGELOG_NAME_MAX 64

struct changelog_opts {
    int64_t max_entries;     /* changes per Change List, 1..RS_MAX_ENTRIES */
    int64_t max_age_ms;      /* close a non-empty list this old; 0: never */
    int64_t retain_ms;       /* drop closed lists that ended this long ago;
                                0: keep them all */
    int64_t max_lists;       /* keep at most this many (an index holds
                                RS_MAX_ENTRIES); 0: RS_MAX_ENTRIES */
};

struct changelog;

/* Opens the first Change List (from = now) in a new state. NULL on
 * ENOMEM or a storage error (*err says which). */
struct changelog *changelog_new(struct state *st,
                                const struct changelog_opts *o,
                                rs_time_t now, const char **err);
void changelog_free(struct changelog *cl);   /* NULL ok */

/*
 * Record a change: sets c->dt (max(now, previous + 1 us)) and c->list, and
 * stores it; then closes the list if it is full. The caller holds a
 * transaction around a batch of these (state_begin/commit).
 */
int changelog_record(struct changelog *cl, struct state_change *c,
                     rs_time_t now) RS_MUST_CHECK;

/* After a rolled-back transaction: forget what it did (the open list,
 * its count, the newest datetime), reading them back from the state. */
void changelog_reload(struct changelog *cl);

/*
 * Time-driven policy: age rotation and retention. pushed_upto is the
 * outbox watermark: a list holding a change not yet pushed is never
 * dropped. keep_from is the oldest `at` among the Resource List and the
 * Resource Dump served (RS_TIME_NONE: none): a list whose until is not
 * before it is never dropped for its age, since a Destination that made
 * its baseline from them finds the changes since only in these lists
 * (changelog_held then says so). The index's cap, max_lists, still
 * drops. Returns 0 or the storage error.
 */
int changelog_tick(struct changelog *cl, rs_time_t now, int64_t pushed_upto,
                   rs_time_t keep_from) RS_MUST_CHECK;

/* Did the last tick keep a list past the retention only for keep_from
 * (or drop one past keep_from for max_lists)? The caller then builds a
 * newer Resource List, which lets the retention go on. */
bool changelog_held(const struct changelog *cl);

/* The open list (its number and from). */
int64_t changelog_current(const struct changelog *cl);
rs_time_t changelog_last_dt(const struct changelog *cl);

/* "changelist-N.xml" into buf (CHANGELOG_NAME_MAX). */
void changelog_name(int64_t num, char *buf);

#endif
