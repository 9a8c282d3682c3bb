/*
 * rldiff.h - change detection from a Source that has only Resource Lists
 * (a list, an index of parts, rel="next" pages): one walk's entries are
 * staged in SQLite as they stream (a part answering 304 stands for the
 * entries it had), and a complete walk is diffed against the last one in
 * one transaction, in bounded memory: created, updated (another hash, or
 * without hashes another lastmod or length) and deleted resources are
 * handed over with the best datetime available - the entry's lastmod when
 * it is newer than the last one's, else the list's `at`, else the time of
 * the read - and the walk becomes the feed's state. The first walk that
 * diffs a list is the baseline (f->diffed: none yet, or the list was only
 * watched since - its rows are not the list's; the caller reads it whole,
 * store_docs_forget, so that no part answering 304 stands for them). A
 * walk that read several documents whole may have been
 * regenerated under the reader: a resource it did not meet is deleted only
 * when its URL answers 404 or 410 (rldiff_gone lists what to ask), or
 * when a second walk does not meet it either; else it is kept. A loc
 * listed twice (malformed) is the entry with the newest lastmod (ties:
 * the whole entry decides), never the one that came first: the order of
 * duplicates is no change. The entries that lost are kept too (rldup):
 * a part answering 304 stands for them as for its winners, so that the
 * winner's part dropping the loc leaves the loser standing, not a
 * deletion. A walk that skipped a malformed entry (walk_result.skipped:
 * a list with a hole) publishes no deletion: what it did not meet may be
 * the very entry it could not read, so every resource it did not meet is
 * held - kept in the state, as the last walk had it, for the next
 * complete walk to decide - and nothing is asked about it; its created
 * and updated resources go out as usual.
 */
#ifndef BRIDGE_RLDIFF_H
#define BRIDGE_RLDIFF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clscan.h"
#include "rs_doc.h"
#include "rs_error.h"
#include "store.h"
#include "walk.h"

#define RLDIFF_MAX_ENTRIES 10000000   /* entries one walk stages */
#define RLDIFF_CHECKS 100             /* resources asked about per walk */

enum rldiff_check {
    RLDIFF_UNKNOWN = 0,   /* not asked, or no clear answer */
    RLDIFF_GONE,          /* 404 or 410: deleted */
    RLDIFF_THERE,         /* 2xx: still there, only missed by the walk */
};

struct rldiff_hooks {
    /* A difference to publish, inside the commit's transaction. */
    int (*on_change)(void *ud, const struct clscan_change *c);
    /* The walk is a baseline (f: the feed before the commit), inside the
     * commit's transaction: what came before it cannot be told from it.
     * 0 goes on, else the commit fails with it. May be NULL. */
    int (*on_baseline)(void *ud, const struct store_feed *f,
                       const struct walk_result *wr);
    void *ud;
};

struct rldiff_stats {
    uint64_t staged;
    uint64_t duplicates;          /* entries of a loc met already (a list
                                     naming a resource twice): the newest
                                     lastmod stands, whatever the order */
    uint64_t created, updated, deleted;
    uint64_t kept;                /* not met, not known to be gone: kept */
    uint64_t held;                /* not met by a walk with skipped
                                     entries: kept, not deleted */
    bool baseline;
    bool unchanged;               /* every document stood as before */
};

struct rldiff;

struct rldiff *rldiff_new(struct store *st);        /* NULL: ENOMEM */
void rldiff_free(struct rldiff *rd);                 /* NULL ok */

void rldiff_begin(struct rldiff *rd, int64_t feed);
int rldiff_entry(struct rldiff *rd, const struct walk_doc *d, size_t idx,
                 const struct rs_entry *e, const char *loc) RS_MUST_CHECK;
/* A document of the walk ended; a 304 stands for the entries it had. */
int rldiff_doc(struct rldiff *rd, const struct walk_doc *d,
               bool not_modified) RS_MUST_CHECK;

/* Does feed hold the rows of a committed walk (was it ever diffed with
 * entries, not only watched)? 0 or RS_EIO. */
int rldiff_has_rows(struct rldiff *rd, int64_t feed, bool *yes)
    RS_MUST_CHECK;

/* Should the resources the walk did not meet be asked about (wr: the
 * walk's result; f: the feed before the commit)? */
bool rldiff_needs_checks(const struct store_feed *f,
                         const struct walk_result *wr);
/* The first `max` resources the walk did not meet, into cb. */
int rldiff_gone(struct rldiff *rd, size_t max,
                int (*cb)(void *ud, const char *loc), void *ud)
    RS_MUST_CHECK;
/* What asking about loc said. */
int rldiff_checked(struct rldiff *rd, const char *loc,
                   enum rldiff_check what) RS_MUST_CHECK;

/* The walk of f (begun at started) is complete: diff, hand over, record,
 * in one transaction; f updated and written back. checked: whether the
 * resources not met were asked about. */
int rldiff_commit(struct rldiff *rd, struct store_feed *f,
                  const struct walk_result *wr, rs_time_t started,
                  bool checked, const struct rldiff_hooks *hooks,
                  struct rldiff_stats *out) RS_MUST_CHECK;

#endif
