/*
 * changeset.h - what the Change Lists say happened to each resource since
 * a time: per URI the newest change read (its kind and datetime), so that
 * an audit or a reconcile can bring a Resource List forward to now. Held
 * in memory (about 60 bytes plus the URI per resource) and capped; where
 * the changes come from and what they mean are the caller's.
 */
#ifndef SUB_CHANGESET_H
#define SUB_CHANGESET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger.h"
#include "rs_error.h"
#include "rs_time.h"

struct changeset;

struct changeset_entry {
    const char *uri;              /* owned by the set */
    enum ledger_change change;
    rs_time_t dt;                 /* RS_TIME_NONE: unknown */
    bool seen;                    /* the caller's mark (see _each) */
};

/* max: entries held at most (0 = CHANGESET_MAX). NULL: out of memory. */
#define CHANGESET_MAX 2000000
struct changeset *changeset_new(size_t max);
void changeset_free(struct changeset *cs);        /* NULL ok */

/* Record a change of uri. Changes are read in document order, which is
 * chronological, but a Source may list newest first: a change replaces
 * the one held unless the held one has a known, later datetime. Returns
 * 0, RS_ETOOBIG (max reached: not recorded), RS_ENOMEM. */
int changeset_put(struct changeset *cs, const char *uri,
                  enum ledger_change change, rs_time_t dt) RS_MUST_CHECK;

/* The entry of uri, or NULL. Valid until the next put or free. */
struct changeset_entry *changeset_find(struct changeset *cs, const char *uri);

/* Entries in no particular order, until cb returns nonzero (returned). */
int changeset_each(struct changeset *cs,
                   int (*cb)(void *ud, struct changeset_entry *e), void *ud);

size_t changeset_count(const struct changeset *cs);

#endif
