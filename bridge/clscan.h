/*
 * clscan.h - change detection from a Source's Change Lists: the entries
 * one walk of a feed read (walk.h) are staged in SQLite as they stream;
 * when the walk is complete, one transaction compares them with what the
 * feed's earlier walks saw and hands over, in the Source's order (by
 * datetime, then document order), each change never handed over before,
 * moves the feed's position and records what it saw. Exactly once: what
 * is handed over is written by the caller (the outbox) in the same
 * transaction, so a kill -9 at any moment hands over nothing twice and
 * loses nothing. History rewritten (an entry older than the position that
 * was never seen: not handed over) and entries lost (gone from the lists
 * while their window still covers them, with no newer change of the same
 * resource) are counted and told (a framework notification about the
 * Change List). The first walk of a feed is its baseline: nothing is
 * handed over - unless the feed replaces another (a Capability List that
 * named another Change List before: clscan_replaces), whose position it
 * takes over. docs/bridge.md has the algorithm.
 */
#ifndef BRIDGE_CLSCAN_H
#define BRIDGE_CLSCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_doc.h"
#include "rs_error.h"
#include "store.h"
#include "walk.h"

#define CLSCAN_MAX_ENTRIES 5000000    /* entries one walk stages */

/* A change to hand over: a Change List entry as the Source wrote it. */
struct clscan_change {
    const char *loc;
    enum rs_change change;
    rs_time_t datetime;       /* rs:md datetime (or, 1.0, lastmod) */
    rs_time_t lastmod;        /* <lastmod>, RS_TIME_NONE absent */
    const char *hash;         /* the hash attribute, or NULL */
    int64_t length;           /* -1 absent */
    const char *type;         /* or NULL */
};

struct clscan_hooks {
    /* A change to publish: written inside the commit's transaction. */
    int (*on_change)(void *ud, const struct clscan_change *c);
    /* A framework event about a Change List (capability changelist): a
     * new one in an index (created), history rewritten or entries lost
     * (updated, the feed's top URL). Inside the same transaction. */
    int (*on_framework)(void *ud, enum rs_change change, const char *loc);
    void *ud;
};

struct clscan_stats {
    uint64_t staged;          /* entries staged by the walk */
    uint64_t published;       /* handed over */
    uint64_t late;            /* ... of them older than the position: in a
                                 span a forward walk could have missed */
    uint64_t rewritten;       /* never seen, older than the position */
    uint64_t lost;            /* gone while still in the window */
    uint64_t new_lists;       /* Change Lists new in an index */
    uint64_t future;          /* ... published dated beyond our clock (and
                                 its skew): the position did not move */
    bool baseline;            /* the feed's first walk */
    bool replaced;            /* ... took over from the feed it replaces
                                 (no baseline: what is newer than its
                                 position was handed over) */
    bool unsure;              /* ... whose position the new feed's window
                                 does not reach back to: what changed
                                 between cannot be told (on_framework
                                 "updated" asks the mirrors to reconcile) */
};

struct clscan;

struct clscan *clscan_new(struct store *st);       /* NULL: ENOMEM */
void clscan_free(struct clscan *cs);                /* NULL ok */

/* A walk of feed begins (the staging of an earlier one is gone: walk.c
 * clears it). */
void clscan_begin(struct clscan *cs, int64_t feed);
/*
 * The walk begun (clscan_begin) is of a feed that replaces prev: the
 * Change List the same Capability List named before (the caller decides;
 * prev is copied). Its commit is no baseline: the entries prev had are
 * taken as prev took them, the others newer than prev's position (or at
 * it) are handed over, those older and below prev's window (win_from,
 * else its oldest entry) taken silently, and when the new feed's window
 * does not reach back to that position the commit says it cannot tell
 * (stats.unsure, on_framework "updated"). prev's seen entries and
 * documents are then dropped, in the same transaction - unless keep (a
 * feed another Capability List still follows, or one with no rows: id
 * -1); so are the feed's own from an earlier time it was followed (forget
 * its documents before the walk: clscan_replaces does not). clscan_begin
 * forgets prev.
 */
void clscan_replaces(struct clscan *cs, const struct store_feed *prev,
                     bool keep);
/* An entry the walk read: staged (in the caller's open transaction, if
 * any). 0, RS_ETOOBIG past CLSCAN_MAX_ENTRIES, RS_EIO. */
int clscan_entry(struct clscan *cs, const struct walk_doc *d, size_t idx,
                 const struct rs_entry *e, const char *loc) RS_MUST_CHECK;
/* A document of the walk ended (for the spans a forward read may miss).
 * One with skipped entries (d->skipped: a hole) is remembered: at the
 * commit, what the feed saw in it before and the walk did not meet stands
 * as met (as for a 304), for the entry skipped may be one of them - a
 * malformed entry is not a vanished one. The entry skipped itself is not
 * handed over (it was never staged); the position moves past it as past
 * its neighbours. RS_ENOMEM. */
int clscan_doc(struct clscan *cs, const struct walk_doc *d) RS_MUST_CHECK;

/*
 * The walk of f, begun at started, is complete (wr its result): in one
 * transaction, hand over what is new through hooks and record it all; f
 * is updated (and written back). On an error nothing of it is kept: the
 * next walk does it again. *out (may be NULL) says what happened.
 */
int clscan_commit(struct clscan *cs, struct store_feed *f,
                  const struct walk_result *wr, rs_time_t started,
                  const struct clscan_hooks *hooks, struct clscan_stats *out)
    RS_MUST_CHECK;

/* The 64-bit identity of a Change List entry: loc, change, datetime. */
uint64_t clscan_key(const char *loc, enum rs_change change, rs_time_t dt);

#endif
