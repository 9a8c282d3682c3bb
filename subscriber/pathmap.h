/*
 * pathmap.h - which resource URIs the subscriber may mirror, and where each
 * one lands: a URI -> a path relative to the mirror root, refusing anything
 * that could leave the mirror or clash with the subscriber's own files.
 * Pure computation, no I/O: the filesystem is mirror.c's business, and
 * whether a URI is worth fetching is the sync logic's.
 */
#ifndef SUB_PATHMAP_H
#define SUB_PATHMAP_H

#include "rs_error.h"

#define PATHMAP_SEG_MAX 255     /* bytes of one segment of a result (NAME_MAX) */
#define PATHMAP_PATH_MAX 4000   /* bytes of a whole result, NUL excluded */
#define PATHMAP_DEPTH_MAX 256   /* segments of a result (mirror.h agrees) */
#define PATHMAP_RESERVED ".rssub" /* segment prefix kept for the subscriber's
                                     temp files and attic (any case) */
#define PATHMAP_INDEX "index.html" /* the file a path ending in '/' gets */

/*
 * The rules, in the order they are applied by pathmap_path():
 *
 * 1. Parsing is libcurl's (curl_url, path kept as is, so "." and ".." are
 *    seen rather than resolved). Only http and https; no userinfo
 *    ("user:pw@" or a bare "@"), no IPv6 zone id. The fragment is dropped.
 * 2. The path is split on '/' and each segment percent-decoded. Refused
 *    (RS_EINVAL): a bad %XX; a decoded '/', '\' (also a literal one), NUL,
 *    byte < 0x20 or 0x7f; a "." or ".." segment (also as %2e); an empty
 *    segment ("a//b"); a segment starting with ".rssub" in any case; a
 *    segment over 255 bytes; more than 256 segments. Bytes >= 0x80 are kept
 *    as they are (no UTF-8 check, no Unicode normalisation).
 * 3. The URI must be under a configured prefix (else RS_EDENIED). Scheme
 *    and host compare case-insensitively, the port numerically with the
 *    scheme's default filled in (http 80, https 443); scheme, host and port
 *    must all be equal. Paths compare decoded, on whole segments: prefix
 *    "http://h/a" allows /a, /a/ and /a/x but not /ab; "http://h/a/" allows
 *    /a/ and /a/x but not /a. The longest prefix (in segments; a trailing
 *    '/' counts as longer) wins; at equal length a map beats a plain prefix.
 * 4. The result: for a plain prefix, the whole decoded URI path; when the
 *    configured prefixes and maps name more than one site, the site's
 *    directory "HOST" (lower-cased) or "HOST_PORT" (non-default port) comes
 *    first, so two sites never collide. http and https of one host on
 *    their default ports are one site ("h"). For a map, its DIR followed by
 *    the rest of the URI path after the prefix's segments.
 * 5. A path ending in '/' gets "index.html" as its last segment (like
 *    wget). A query is kept in the last segment as "name?query", raw (not
 *    decoded) except that '/' becomes %2F and '\' %5C so it stays one
 *    segment; the segment rules of 2 (length included) apply to it too.
 * 6. The whole result must fit PATHMAP_PATH_MAX bytes.
 *
 * Known many-to-one cases, all harmless for safety: "/a/" and
 * "/a/index.html" share a file; "?q=/" and "?q=%2F" share a file; "%41"
 * and "A" are one name; a decoded '?' in the path ("a%3Fb") is the file of
 * "a?b". A URI that is both hostile and outside every prefix is RS_EINVAL.
 * Conflicts between a file and a directory of one name ("/a" and "/a/x")
 * are the mirror's to report.
 */

struct pathmap;

/* A new, empty map (allows nothing), or NULL when out of memory. */
struct pathmap *pathmap_new(void);
void pathmap_free(struct pathmap *pm);   /* NULL ok */

/*
 * Allow URIs under uri_prefix (e.g. "http://127.0.0.1:8080/" or
 * "https://data.example.org/set1/"), mapped by default (rule 4). The prefix
 * obeys rules 1-2 (its path may end in '/'; "http://h" means the root),
 * has no query or fragment, and its site directory must be a valid
 * segment. Adding an equal prefix again is a no-op. 0, RS_ENOMEM, or
 * RS_EINVAL with a static reason in *why (why may be NULL).
 * Add every prefix and map before mapping URIs: a second site changes where
 * the first one's files go.
 */
int pathmap_add_prefix(struct pathmap *pm, const char *uri_prefix,
                       const char **why) RS_MUST_CHECK;

/*
 * Allow URIs under uri_prefix and map them to dir + the rest of their path
 * (--map URI_PREFIX=DIR). dir is a relative path inside the mirror:
 * segments joined by '/', one trailing '/' allowed, no leading '/', each
 * segment obeying rule 2 (taken literally, no decoding); "" is the mirror
 * root. A URI equal to a prefix without '/' maps to dir itself (RS_EINVAL
 * when dir is the root). A second map of an equal prefix is a no-op when
 * the dir is the same and RS_EINVAL when it differs. Returns as
 * pathmap_add_prefix.
 */
int pathmap_add_map(struct pathmap *pm, const char *uri_prefix,
                    const char *dir, const char **why) RS_MUST_CHECK;

/*
 * Map uri to a relative path (no leading or trailing '/') in a new string
 * *out (rs_free). 0; RS_EDENIED: under no prefix; RS_EINVAL: hostile or
 * unmappable, with a static reason in *why (why may be NULL; *why is NULL
 * on success); RS_ENOMEM. *out is NULL on failure.
 */
int pathmap_path(const struct pathmap *pm, const char *uri, char **out,
                 const char **why) RS_MUST_CHECK;

#endif
