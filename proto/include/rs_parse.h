/*
 * rs_parse.h - streaming parser for ResourceSync documents (libxml2 SAX2 push
 * parser underneath). Feed bytes in any chunking; the head is delivered once
 * before the first entry, each entry is delivered as soon as it closes, and
 * memory stays bounded whatever the document size. Validation (rs_check.h)
 * runs as it goes, so each problem is reported with its line; the mode
 * (zero: the reader's view) says which problems are errors.
 *
 * Safe by construction: no network, no DTD (any DOCTYPE is refused), no
 * entity expansion, a byte limit checked before the bytes are parsed, a
 * nesting limit, a per-text-node limit. A hostile document gets an error,
 * never a crash or a hang.
 */
#ifndef RS_PARSE_H
#define RS_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#include "rs_check.h"
#include "rs_doc.h"

#define RS_PARSE_MAX_DEPTH 64       /* element nesting */
#define RS_PARSE_MAX_TEXT 65536     /* bytes of one text value (<loc> etc.) */
#define RS_PARSE_MAX_LINKS 1024     /* rs:ln per entry or per root */

typedef void (*rs_parse_warning_cb)(void *ud, unsigned line, const char *msg);

struct rs_parse_opts {
    bool strict;                 /* every problem is an error: the same as
                                  * mode RS_CHECK_STRICT, whatever mode says */
    size_t max_bytes;            /* 0 = RS_MAX_DOC_BYTES */
    size_t max_entries;          /* 0 = RS_MAX_ENTRIES */
    rs_parse_warning_cb on_warning; /* may be NULL */
    void *warning_ud;            /* for on_warning and on_error */
    enum rs_check_mode mode;     /* 0: RS_CHECK_READER, what rssub accepts */
    /* Errors to find before stopping; 0 or 1: stop at the first, as a
     * reader does. Above 1 (a validator), the parse goes on after an error
     * that leaves the document readable (a rule, a bad value) to find the
     * next ones, delivering nothing more to the callbacks; an XML error,
     * a limit or a document that is not ResourceSync still stops it. */
    unsigned max_errors;
    rs_parse_warning_cb on_error;   /* each error as found; may be NULL */
    /* A document that starts with gzip's magic bytes is inflated as it is
     * fed (rs_gunzip.h): a Source's sitemap.xml.gz, or a Content-Encoding
     * the client did not undo. max_bytes bounds the inflated bytes. For
     * documents read from Sources; a notification is never gzipped. */
    bool gunzip;
    /* Also find a <loc> listed twice where the document's kind lists each
     * thing once, and a manifest path given twice (rs_check_unique): a
     * validator's rule (rsdoc), costing under 100 bytes an entry while
     * the parse lasts. Readers leave it off and meet such documents their own way
     * (rssub's dump reader refuses the package). */
    bool unique;
    /* A reader that would rather mirror the rest than nothing (rssub):
     * an error that concerns one entry only - a value or rule broken
     * inside it (a <loc> that is not an absolute http(s) URI, a bad
     * datetime, a missing change), found while it is parsed or by
     * rs_check_entry - does not fail the document. The entry is not
     * delivered to on_entry; on_bad_entry hears of it with its first
     * error, on_error does not, it is not counted by rs_parser_errors,
     * and the parse goes on (rs_parser_skipped counts them). Everything
     * else still fails the document: XML errors, limits (RS_ETOOBIG,
     * the entry limit included), the head's rules, out of memory, a
     * callback's stop. The caller must hear of every skipped entry (a
     * list read short looks like deletions): rs_doc_parse, which has no
     * such callback, ignores this option. */
    bool skip_bad_entries;
    /* skip_bad_entries: an entry skipped, with the line and message of
     * its first error, and warning_ud. e is the entry as far as it was
     * read (valid during the call): e->loc may be NULL or the very value
     * at fault; a field whose value was bad is unset. 0 goes on; anything
     * else stops the parse as a callback's value does (rs_parser_cbs).
     * May be NULL. (Here rather than in rs_parser_cbs, which callers
     * fill by position.) */
    int (*on_bad_entry)(void *ud, const struct rs_entry *e, unsigned line,
                        const char *msg);
};

/* The first error of a parse (on_error hears of every one). */
struct rs_diag {
    int code;                    /* RS_EPARSE, RS_EINVALID, RS_ETOOBIG, ... */
    /* 1-based line of the element at fault: the element carrying a bad
     * attribute (rs:md, rs:ln), the text element holding a bad value
     * (<lastmod>), the entry's <url>/<sitemap> for rules about the entry as
     * a whole (missing <loc> or change, order, limits), the root element
     * for document-level rules; libxml2's line for XML errors; 0 when not
     * tied to a line (e.g. the byte limit). */
    unsigned line;
    char msg[256];
};

/*
 * Callbacks. Pointers handed to them are valid only during the call. A
 * callback returns 0 to go on; anything else stops the parse and
 * rs_parser_feed/finish return that value if negative, else RS_ESTOPPED.
 * on_head runs once, before the first on_entry (or at finish for a document
 * with no entries). on_end runs once at a successful finish with the final
 * head, which includes root <rs:ln> elements that appeared after entries
 * (some Sources put rel="next" last).
 */
struct rs_parser_cbs {
    int (*on_head)(void *ud, const struct rs_head *head);
    int (*on_entry)(void *ud, const struct rs_entry *e);
    int (*on_end)(void *ud, const struct rs_head *head);
};

struct rs_parser;

/* opts and cbs are copied; either may be NULL. NULL on allocation failure. */
struct rs_parser *rs_parser_new(const struct rs_parse_opts *opts,
                                const struct rs_parser_cbs *cbs, void *ud);

/* Parse the next len bytes. 0, or the error (then rs_parser_error() says
 * why, and every later call returns the same error). While more errors are
 * being looked for (max_errors), 0 until the parse stops; finish then
 * returns the first error. */
int rs_parser_feed(struct rs_parser *p, const char *buf, size_t len) RS_MUST_CHECK;

/* End of input: checks the document is complete and valid. */
int rs_parser_finish(struct rs_parser *p) RS_MUST_CHECK;

/* Format a diagnostic as one line "NAME:LINE: SEV: MESSAGE" (no ":LINE"
 * when line is 0) into buf, whatever the message holds: each run of
 * control characters becomes one space, trailing space goes. The tools'
 * common form (rsdoc, rspub). Returns the length written (<= bufsz - 1). */
size_t rs_diag_line(char *buf, size_t bufsz, const char *name, unsigned line,
                    const char *sev, const char *msg);

/* The first error, or NULL if there was none. */
const struct rs_diag *rs_parser_error(const struct rs_parser *p);

/* Errors found so far (the first is rs_parser_error(); with max_errors
 * above 1, the parse stopped looking when this reached it). */
unsigned rs_parser_errors(const struct rs_parser *p);

/* Entries delivered so far, and bytes of the document parsed so far (a
 * gzipped one's inflated bytes, which max_bytes bounds). */
size_t rs_parser_entries(const struct rs_parser *p);
size_t rs_parser_bytes(const struct rs_parser *p);

/* Entries skipped so far (opts.skip_bad_entries; else 0). */
size_t rs_parser_skipped(const struct rs_parser *p);

void rs_parser_free(struct rs_parser *p);

/*
 * Parse a whole document held in memory into *out (caller frees with
 * rs_doc_free). On error returns it, fills *diag when given, *out = NULL.
 */
int rs_doc_parse(const char *buf, size_t len, const struct rs_parse_opts *opts,
                 struct rs_doc **out, struct rs_diag *diag) RS_MUST_CHECK;

#endif
