/*
 * pull.h - what the subscriber learns by pulling: a Change List walk from
 * the last applied change (incremental), a Resource List walk that makes
 * the mirror match it (baseline and reconcile: fetch what is new or
 * different, delete what is gone), and the same walk as a report only
 * (audit). A Resource List is the Source at its `at`; reconcile and audit
 * bring it forward with the Change Lists since then, so that what they
 * explain is neither a difference nor undone. Changes are handed to apply
 * as todo rows; applying them, and deciding when to pull, are the
 * caller's.
 */
#ifndef SUB_PULL_H
#define SUB_PULL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_time.h"

struct event_base;
struct rs_http;
struct ledger;
struct mirror;
struct apply;
struct pathmap;
struct pull;

enum pull_kind {
    PULL_CHANGES,      /* Change Lists from `since` */
    PULL_RECONCILE,    /* Resource List: queue every difference */
    PULL_AUDIT,        /* Resource List: report differences only */
};

struct pull_report {
    enum pull_kind kind;
    /* RECONCILE and AUDIT: what the Source has that the mirror lacks
     * (added), has otherwise (updated), lacks (deleted), and agreements.
     * CHANGES: changes queued (added/updated/deleted by kind) and changes
     * the mirror already held (unchanged). */
    uint64_t added, updated, deleted, unchanged;
    uint64_t entries, docs;
    /* CHANGES: the Change Lists reach back to `since` (else a reconcile
     * is needed: what happened between is unknown). */
    bool reached_back;
    /* CHANGES: the newest change seen; RECONCILE/AUDIT: the time the
     * documents read speak for: the Resource List's `at` brought forward
     * by the Change Lists (their newest change), else the newest
     * <lastmod> the list named, else when the walk began. */
    rs_time_t newest;
    /* RECONCILE and AUDIT: */
    rs_time_t snapshot;      /* the Resource List's at (the earliest of an
                                index's parts); RS_TIME_NONE: it has none */
    bool changes_read;       /* the Change Lists since then were read ... */
    bool changes_reach_back; /* ... and reach back to the snapshot */
    uint64_t changes;        /* their entries since the snapshot */
    uint64_t explained;      /* entries of the Resource List (or mirror
                                rows) the Change Lists brought forward */
    uint64_t recent;         /* AUDIT: mirror resources changed after every
                                document read (or in a span no Change List
                                covers): too recent to judge */
    char changes_error[320]; /* why the Change Lists could not be used, or
                                "" */
    uint64_t refused;        /* AUDIT: entries the mirror may not hold
                                (outside the prefixes, unsafe paths):
                                reported through on_diff as "refused",
                                not differences */
    /* RECONCILE: deletions the list asked for (mirror resources it does
     * not name, no change explaining them) that the safety valve held
     * back: all of them, or none (deletions_allowed). */
    uint64_t deletions_held;
    int64_t mirror_live;     /* ...of this many live resources */
    /* Entries skipped as malformed (docwalk skip_bad_entries: a <loc>
     * that is not an http(s) URI, a bad datetime...), each told through
     * on_bad_entry, in every document read but a reconcile's peek. In a
     * reconcile or an audit, one is enough for the walk to say nothing
     * of what the list leaves out: the skipped entry may stand for any
     * resource (or, in an index, a whole part), so no resource is
     * deleted (or reported deleted) on its basis; deletions_unjudged
     * counts those the list would otherwise have deleted. */
    uint64_t skipped;
    uint64_t deletions_unjudged;
    /* Times of the Source's beyond our clock's skew (a change's datetime,
     * a list's at, a lastmod), each taken as now (apply_future). */
    uint64_t future;
};

struct pull_opts {
    struct event_base *base;
    struct rs_http *http;
    struct ledger *ledger;
    struct mirror *mirror;
    struct apply *apply;
    bool strict;             /* document warnings are errors */
    bool deep;               /* AUDIT: hash the mirror's files */
    bool readonly;           /* AUDIT on a read-only ledger (beside a
                                running daemon): the URIs seen are kept in
                                memory (8 bytes each) instead of marked */
    const struct pathmap *pathmap;   /* AUDIT: what may be mirrored; NULL:
                                        everything */
    /* The safety valve (like rsync's --max-delete): a reconcile whose
     * list would delete more than max_delete resources (0: no count
     * limit) or more than max_delete_share percent of the mirror's live
     * resources (0: no share limit) deletes none of them, unless
     * force_delete. Deletions Change Lists announce are not counted:
     * they are the Source's own word, one resource at a time. */
    uint64_t max_delete;
    unsigned max_delete_share;
    bool force_delete;
    /* AUDIT: one differing URI; what is "added", "updated" or "deleted"
     * (from the Source's point of view), or "refused" (listed, but not
     * for this mirror: not a difference). May be NULL. */
    void (*on_diff)(void *ud, const char *uri, const char *what);
    /* Progress: entries read so far (every 10,000 and at the end). May be
     * NULL. */
    void (*on_progress)(void *ud, uint64_t entries);
    /* An entry skipped as malformed: the document, the line of its
     * fault, its <loc> as written (NULL when it had none) and why. The
     * rest of the document is read. May be NULL. */
    void (*on_bad_entry)(void *ud, const char *url, unsigned line,
                         const char *loc, const char *why);
    /* Exactly once per pull_start that returned 0, from the loop. */
    void (*on_done)(void *ud, int rc, const char *err,
                    const struct pull_report *r);
    void *ud;
};

struct pull *pull_new(const struct pull_opts *o);
void pull_free(struct pull *p);     /* abandons a pull without on_done */

/* Start a pull of the document at url (a Change List or its index for
 * CHANGES, a Resource List or its index otherwise). changes: RECONCILE
 * and AUDIT, the Source's Change List (or index) to bring the Resource
 * List forward with, or NULL. since: CHANGES only, RS_TIME_NONE for
 * everything. Strings are copied. RS_ESTATE when one is under way. */
int pull_start(struct pull *p, enum pull_kind k, const char *url,
               const char *changes, rs_time_t since) RS_MUST_CHECK;
bool pull_busy(const struct pull *p);

#endif
