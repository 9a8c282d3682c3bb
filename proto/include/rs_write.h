/*
 * rs_write.h - serializer for every ResourceSync document type. Strict:
 * everything written passes rs_check in RS_CHECK_STRICT mode, and strings
 * are escaped for XML (a string holding a character XML cannot carry is
 * refused, never written). Byte-stable: the same model always gives the
 * same bytes, so parse -> write -> parse round-trips.
 *
 * Streaming: begin, entry..., end, writing through a callback with an
 * internal buffer, so a 50,000-entry list is written in constant memory.
 */
#ifndef RS_WRITE_H
#define RS_WRITE_H

#include <stddef.h>

#include "rs_doc.h"

/* Receives serialized bytes; returns 0, or an error that stops the writer. */
typedef int (*rs_write_cb)(void *ud, const char *buf, size_t len);

struct rs_write_opts {
    bool pretty;      /* newline + 2-space indentation (default: on) */
    bool no_decl;     /* omit <?xml version="1.0" encoding="UTF-8"?> */
    bool lenient;     /* check as a reader does (RS_CHECK_READER) */
    /* Write the entries alone - no declaration, root element, head or
     * closing tag -: a fragment to paste into a document of the head's
     * kind, whose root declares the sitemap and rs namespaces. The head is
     * checked all the same. */
    bool entries_only;
};

struct rs_writer;

/* opts may be NULL (pretty, with declaration, strict). NULL on ENOMEM. */
struct rs_writer *rs_writer_new(rs_write_cb cb, void *ud,
                                const struct rs_write_opts *opts);

/* Each returns 0 or an error; after an error every call returns it, and
 * rs_writer_errstr() says why ("entry 12: <loc> is not an absolute http(s)
 * URI"). Entries must follow begin and precede end. */
int rs_writer_begin(struct rs_writer *w, const struct rs_head *head) RS_MUST_CHECK;
int rs_writer_entry(struct rs_writer *w, const struct rs_entry *e) RS_MUST_CHECK;
int rs_writer_end(struct rs_writer *w) RS_MUST_CHECK;   /* flushes */
const char *rs_writer_errstr(const struct rs_writer *w);
void rs_writer_free(struct rs_writer *w);

/* Serialize a whole document into a new NUL-terminated buffer (*out, freed
 * with rs_free; *len excludes the NUL). */
int rs_doc_write(const struct rs_doc *doc, const struct rs_write_opts *opts,
                 char **out, size_t *len) RS_MUST_CHECK;

/* Convenience for callers building documents by hand: serialize head plus
 * n entries. Same contract as rs_doc_write. */
int rs_write_buf(const struct rs_head *head, const struct rs_entry *entries,
                 size_t n, const struct rs_write_opts *opts, char **out,
                 size_t *len) RS_MUST_CHECK;

#endif
