/*
 * docwalk.h - reading ResourceSync documents for the subscriber: one
 * document at a time over rs_http, parsed as it streams in (memory stays
 * bounded whatever the list size), following an index's children and
 * rel="next" pages to the end, retrying a document that could not be had.
 * A document met twice in one walk (a loop, a part listed twice) fails
 * the walk: a list read short must not look complete. The first document
 * may be asked for conditionally (docwalk_start_cond): a 304 reads as a
 * document without entries.
 * What the documents and entries mean is the caller's business.
 */
#ifndef SUB_DOCWALK_H
#define SUB_DOCWALK_H

#include <stdbool.h>
#include <stddef.h>

#include "rs_doc.h"

struct event_base;
struct rs_http;
struct docwalk;

#define DOCWALK_SKIP 1      /* from on_head: skip this document */

struct docwalk_opts {
    struct event_base *base;
    struct rs_http *http;
    bool strict;             /* parser warnings are errors */
    unsigned timeout_ms;     /* one document; 0 = 300 s */
    unsigned retries;        /* per document, on transport errors and 5xx
                                before any entry was read; 0 = 3 */
    size_t max_docs;         /* documents in one walk; 0 = 100000 */
    /* A document's head. 0 reads it, DOCWALK_SKIP skips it (entries,
     * children, next page), negative aborts the walk with that error. */
    int (*on_head)(void *ud, const char *url, const struct rs_head *h);
    /* An entry of a list, in document order; loc is e->loc resolved
     * against the document's URL. 0 goes on, negative aborts. */
    int (*on_entry)(void *ud, const char *url, const struct rs_entry *e,
                    const char *loc);
    /* A child of an index (its loc resolved). 1 visits it, 0 skips it,
     * negative aborts. NULL: every child is visited. Children are visited
     * in order of their rs:md from (Change List indexes), else in document
     * order, each before the index's next page. */
    int (*on_child)(void *ud, const char *index_url, const struct rs_entry *e,
                    const char *loc);
    /* A document ended well (after all its entries). May be NULL.
     * docwalk_header works here. */
    void (*on_doc_end)(void *ud, const char *url, const struct rs_head *h);
    /* The first document, asked for with docwalk_start_cond, is
     * unchanged (304): no head, entries nor children. May be NULL. */
    void (*on_not_modified)(void *ud, const char *url);
    /* Runs exactly once per docwalk_start that returned 0, from the loop:
     * 0 when every document was read, else the error and what failed. */
    void (*on_done)(void *ud, int rc, const char *err);
    /* Skip an entry whose own values break a rule (a <loc> that is not
     * an http(s) URI, a bad datetime) instead of failing its document
     * (rs_parse_opts.skip_bad_entries); on_bad_entry hears of each,
     * once per read of its document, with the line and why (set it: a
     * skip nobody hears of is a silent hole). The caller decides what a list with a hole means: a Resource
     * List read short must not delete. 0 goes on, negative aborts. */
    bool skip_bad_entries;
    int (*on_bad_entry)(void *ud, const char *url, const struct rs_entry *e,
                        unsigned line, const char *msg);
    void *ud;
};

/* o is copied. NULL when out of memory. */
struct docwalk *docwalk_new(const struct docwalk_opts *o);

/* Free: a walk in progress is abandoned without its on_done. May be
 * called from inside any of its callbacks. NULL ok. */
void docwalk_free(struct docwalk *w);

/* Walk from url. RS_ESTATE when a walk is under way, RS_EINVAL for a
 * URL that is not http(s), RS_ENOMEM. */
int docwalk_start(struct docwalk *w, const char *url) RS_MUST_CHECK;

/* The same, sending cond ("If-None-Match: ..." or "If-Modified-Since:
 * ...", copied; NULL: none) with the first document's request; a 304 to
 * it is on_not_modified, and the walk goes on with nothing from it. */
int docwalk_start_cond(struct docwalk *w, const char *url, const char *cond)
    RS_MUST_CHECK;

/* A response header of the document being read (case-insensitive, the
 * last if repeated; every Link value joined is not offered: see
 * docwalk_links), valid inside on_head, on_entry and on_doc_end. NULL
 * when absent or outside them. */
const char *docwalk_header(const struct docwalk *w, const char *name);

/* Each Link header value of the document being read, as docwalk_header. */
void docwalk_links(const struct docwalk *w,
                   void (*cb)(void *ud, const char *value), void *ud);

/* Is a walk under way? */
bool docwalk_busy(const struct docwalk *w);

/* Documents and entries read by the current (or last) walk. */
size_t docwalk_docs(const struct docwalk *w);
size_t docwalk_entries(const struct docwalk *w);

#endif
