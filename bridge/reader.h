/*
 * reader.h - one request of a Source's poller at a time: a conditional GET
 * of a ResourceSync document (If-None-Match, else If-Modified-Since) whose
 * body streams into proto's parser - entries handed over as they close,
 * the body's SHA-256 computed on the way, memory bounded whatever the
 * document's size - or a HEAD of a resource. It reports what the answer
 * said (status, validators, Retry-After, the document's head and
 * rel="next"); what a document or an answer means is the caller's.
 */
#ifndef BRIDGE_READER_H
#define BRIDGE_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_doc.h"
#include "rs_error.h"

struct event_base;
struct rs_http;
struct reader;

#define READER_DIGEST 32
#define READER_BODY_MAX (8u << 20)   /* a document kept whole (keep_body) */

/* What a document said about itself (its root), once read. */
struct reader_doc {
    enum rs_root root;
    enum rs_capability cap;
    rs_time_t at, completed, from, until;
    char *next;                   /* rel="next" resolved, or NULL */
};

struct reader_result {
    int rc;            /* 0: an answer came and, for a 200, the document
                          was read whole and parsed; RS_EPARSE/RS_EINVALID
                          a body that is not a ResourceSync document (err
                          says where), RS_ETIMEDOUT, RS_EIO, RS_ETOOBIG,
                          RS_ECANCELED, or the error a callback returned */
    long status;       /* 0 when no answer came */
    bool not_modified; /* 304 */
    const char *etag;  /* the answer's validators, NULL when absent */
    const char *last_modified;
    int64_t retry_after_ms;       /* -1: none */
    bool has_digest;              /* a 200's body was read */
    uint8_t digest[READER_DIGEST];
    const struct reader_doc *doc; /* a 200 parsed; NULL otherwise */
    const char *body;             /* keep_body: the bytes of a 200 */
    size_t body_len;
    size_t entries;
    size_t skipped;               /* entries skipped (skip_bad_entries) */
    const char *err;              /* why rc != 0, one line; "" otherwise */
    const char *effective_url;    /* where redirects led, when elsewhere
                                     than the request's url; else NULL */
};

struct reader_req {
    const char *url;
    const char *etag;             /* send If-None-Match (NULL: none) */
    const char *last_modified;    /* ... else If-Modified-Since */
    bool head;                    /* HEAD, no body (a resource's status) */
    bool head_only;               /* stop after the document's head */
    bool keep_body;               /* keep a 200's bytes (<= READER_BODY_MAX) */
    /* A 200's document head, before its first entry. 0 goes on, else the
     * read stops with that error. May be NULL. */
    int (*on_head)(void *ud, const struct rs_head *h);
    /* Each entry (loc resolved against url), in document order; idx
     * counts from 0. 0 goes on, negative stops the read with it. */
    int (*on_entry)(void *ud, size_t idx, const struct rs_entry *e,
                    const char *loc);
    /* Resource Lists and Change Lists: an entry with an error of its
     * own (a raw space in its <loc>, a bad datetime; docs/protocol.md
     * 1.2), or whose <loc> does not resolve to an http(s) URL, is skipped
     * rather than failing the document: not handed to on_entry, told to
     * on_bad_entry (loc: the entry's <loc> as written, or NULL; line and
     * why), counted in reader_result.skipped. 0 goes on; negative stops
     * the read with that error, err saying where and why (an index's
     * entry that cannot be read must still fail it). Off: any error
     * fails the document. */
    bool skip_bad_entries;
    int (*on_bad_entry)(void *ud, const char *loc, unsigned line,
                        const char *why);
    /* After each piece of the body was fed (a batch of entries ended):
     * the caller's transaction may close. May be NULL. */
    void (*on_chunk)(void *ud);
    /* Exactly once per reader_get that returned 0, from the loop. */
    void (*on_done)(void *ud, const struct reader_result *r);
    void *ud;
};

struct reader_opts {
    struct event_base *base;
    struct rs_http *http;
    unsigned timeout_ms;          /* one request; 0 = 60 s */
    size_t max_bytes;             /* one document; 0 = RS_MAX_DOC_BYTES */
    size_t max_entries;           /* one document; 0 = RS_MAX_ENTRIES */
};

struct reader *reader_new(const struct reader_opts *o);  /* NULL: ENOMEM */
/* A request under way is abandoned without its on_done (the reader goes
 * when rs_http has let go of it). Not from inside a reader callback.
 * NULL ok. */
void reader_free(struct reader *r);

/* Start a request. RS_ESTATE while one is out, RS_EINVAL, RS_ENOMEM:
 * on_done never runs. */
int reader_get(struct reader *r, const struct reader_req *q) RS_MUST_CHECK;
bool reader_busy(const struct reader *r);
/* Stop the request under way: its on_done runs with RS_ECANCELED, from
 * the loop. */
void reader_cancel(struct reader *r);

#endif
