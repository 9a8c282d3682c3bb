/*
 * walk.h - reading the documents of one feed (a Change List or Resource
 * List with its index, archives and rel="next" pages) for one poll, one
 * request at a time through the Source's reader: each document with a
 * conditional GET from the validators its feed's last complete walk
 * stored (a 304 costs nothing and its entries stand as they were), index
 * children in `from` order, each document staged (store_doc_stage) as it
 * ends. A chain of Change List pages the last walk knew is read from its
 * last page backwards (pages new since then forwards first): a list
 * regenerated on every request moves its entries towards the first page
 * as older ones leave or move to the end, and read backwards no entry
 * can slip past the reader. A list's entry with an error of its own is
 * skipped and told, not the list (docs/bridge.md 2.1); a document read
 * with such a hole is stored without validators, so that the next walk
 * reads it whole again and sees the hole again rather than a 304 that
 * would stand for it as complete. What the entries mean is the caller's; when
 * each request may go (politeness) is asked of the caller.
 */
#ifndef BRIDGE_WALK_H
#define BRIDGE_WALK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_doc.h"
#include "rs_error.h"

struct event_base;
struct reader;
struct store;
struct walk;

/* The document an entry comes from. */
struct walk_doc {
    const char *url;
    int64_t rank;             /* its place in document order */
    bool forward;             /* read right after the page before it in
                                 its chain (rank - 1): an entry moving
                                 between the two meanwhile is missed */
    const struct reader_doc *head;   /* its root (NULL for a 304) */
    size_t skipped;           /* on_doc: entries of it skipped as
                                 malformed (a list with a hole) */
};

struct walk_result {
    long status;              /* a failing answer's status (0: none) */
    int64_t retry_after_ms;   /* a failing answer's Retry-After, -1 none */
    size_t docs;              /* documents read (200) */
    size_t not_modified;      /* answered 304 */
    size_t changed;           /* read with a digest not seen before */
    size_t entries;
    size_t skipped;           /* entries of the lists skipped as malformed
                                 (on_bad_entry): the walk read lists with
                                 holes, and must not be taken to say
                                 that what it did not meet is gone */
    rs_time_t from;           /* the smallest `from` a list declared */
    rs_time_t at;             /* the top document's `at` */
    bool chain_moved;         /* the pages did not link as the last walk's
                                 did: forget them, walk forward next time */
};

struct walk_opts {
    struct event_base *base;
    struct reader *rd;
    struct store *st;
    bool tail_first;          /* Change Lists: known chains backwards */
    size_t max_docs;          /* one walk; 0 = 100000 */
    /* How long (ms) before url may be requested (politeness); 0: now. */
    int64_t (*wait_ms)(void *ud, const char *url);
    /* A request for url was answered (or failed): politeness counts
     * from here. */
    void (*requested)(void *ud, const char *url);
    /* An entry of a document answered 200, in document order. 0 goes on,
     * negative stops the walk with that error. */
    int (*on_entry)(void *ud, const struct walk_doc *d, size_t idx,
                    const struct rs_entry *e, const char *loc);
    /* An entry of a list (not of an index: that fails the walk, as an
     * index child that cannot be read must) skipped as malformed: the
     * document, the entry's <loc> as written (or NULL), its line, why.
     * 0 goes on, negative stops the walk. May be NULL. */
    int (*on_bad_entry)(void *ud, const struct walk_doc *d, const char *loc,
                        unsigned line, const char *why);
    /* A document ended: 200 (after its entries) or 304 (d->head NULL:
     * its entries stand as they were). 0 or a negative error. */
    int (*on_doc)(void *ud, const struct walk_doc *d, bool not_modified);
    /* A piece of a body was parsed: the caller may commit its staging. */
    void (*on_chunk)(void *ud);
    /* Exactly once per walk_start that returned 0, from the loop (never
     * inside walk_start): 0 when every document was had, else the error,
     * why (one line) and what the failing answer said. */
    void (*on_done)(void *ud, int rc, const char *err,
                    const struct walk_result *res);
    void *ud;
};

struct walk *walk_new(const struct walk_opts *o);     /* NULL: ENOMEM */
/* A walk under way is abandoned without its on_done (its request too).
 * Not from inside a walk callback. NULL ok. */
void walk_free(struct walk *w);

/* Walk the feed whose top document is url, from what store holds of its
 * documents. RS_ESTATE while a walk is under way, RS_ENOMEM, RS_EIO. */
int walk_start(struct walk *w, int64_t feed, const char *url) RS_MUST_CHECK;
bool walk_busy(const struct walk *w);

#endif
