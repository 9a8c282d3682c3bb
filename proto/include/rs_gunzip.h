/*
 * rs_gunzip.h - a gzip stream inflated as it is fed (zlib), for documents
 * served as files gzipped (sitemap.xml.gz, which the Sitemaps protocol
 * allows) or with a Content-Encoding the client did not undo. Owns the
 * zlib state and its output buffer; what the bytes are is the caller's
 * (rs_parse.h's gunzip option uses it). Concatenated members (gzip -c a b)
 * are one stream, as gunzip reads them.
 */
#ifndef RS_GUNZIP_H
#define RS_GUNZIP_H

#include <stdbool.h>
#include <stddef.h>

#include "rs_error.h"

/* Does buf start like a gzip stream (its two magic bytes)? */
bool rs_gunzip_magic(const char *buf, size_t len);

struct rs_gunzip;

/* Each piece of inflated bytes; non-zero stops the feed, which returns it. */
typedef int (*rs_gunzip_sink)(void *ud, const char *buf, size_t len);

/* A new stream (NULL when out of memory). Free with rs_gunzip_free. */
struct rs_gunzip *rs_gunzip_new(void);
void rs_gunzip_free(struct rs_gunzip *g);   /* NULL ok */

/* Inflate the next len bytes into sink. 0; the sink's non-zero; RS_EPARSE
 * (not gzip, corrupt: rs_gunzip_error says how) or RS_ENOMEM. */
int rs_gunzip_feed(struct rs_gunzip *g, const char *buf, size_t len,
                   rs_gunzip_sink sink, void *ud) RS_MUST_CHECK;

/* End of input: 0 when the stream ended where a member ended, RS_EPARSE
 * when it was cut short. */
int rs_gunzip_finish(struct rs_gunzip *g) RS_MUST_CHECK;

/* Why the last call failed ("" if it did not). */
const char *rs_gunzip_error(const struct rs_gunzip *g);

#endif
