/*
 * rs_discover.h - parsing what ResourceSync discovery reads: HTTP Link
 * headers (RFC 8288), HTML <link rel="resourcesync">, robots.txt Sitemap:
 * lines. Targets are returned as written; resolving a relative target
 * against the document's URL is the caller's job (common/ rs_url).
 * No I/O.
 */
#ifndef RS_DISCOVER_H
#define RS_DISCOVER_H

#include <stdbool.h>
#include <stddef.h>

#include "rs_error.h"

#define RS_DISCOVER_MAX_LINKS 256   /* links taken from one header or page */

/* One web link. All strings NUL-terminated, decoded (quotes removed,
 * backslash escapes undone), valid only during the callback; absent
 * parameters are NULL. rel may hold several space-separated relations. */
struct rs_weblink {
    const char *target;
    const char *rel;
    const char *type;
    const char *anchor;
    const char *title;
};

/* Return 0 to go on, non-zero to stop (the parse then returns RS_ESTOPPED). */
typedef int (*rs_weblink_cb)(void *ud, const struct rs_weblink *l);
typedef int (*rs_sitemap_cb)(void *ud, const char *url);

/*
 * Parse one Link header field value (or several joined with ", "):
 * `<uri>; rel="a b"; type=x, <uri2>; rel=c`. Commas and semicolons inside
 * quoted strings are data; parameter names are case-insensitive; rel* /
 * title* (RFC 8187) values are decoded when UTF-8. Returns 0, or RS_EINVAL
 * at the first malformed link (links before it were delivered), or
 * RS_ETOOBIG past RS_DISCOVER_MAX_LINKS.
 * Details: the first occurrence of a parameter counts; rel* and title* win
 * over rel and title; one that is not UTF-8 or does not decode is ignored;
 * a parameter without "=value" has the value ""; unquoted values are taken
 * up to the next delimiter (servers send type=a/b unquoted). Also RS_ENOMEM
 * and RS_ESTOPPED.
 */
int rs_link_header_parse(const char *s, size_t len, rs_weblink_cb cb, void *ud) RS_MUST_CHECK;

/* Does the space-separated relation list rels contain rel (ASCII
 * case-insensitive)? rels may be NULL. */
bool rs_rel_has(const char *rels, const char *rel);

/* Every <link> element of an HTML (or XHTML) page with an href, in document
 * order, parsed leniently with libxml2's HTML parser (no network); anchor
 * is always NULL. Returns 0 (also for a page too broken to hold any),
 * RS_ETOOBIG past RS_DISCOVER_MAX_LINKS, RS_ESTOPPED or RS_ENOMEM. */
int rs_html_links(const char *buf, size_t len, rs_weblink_cb cb, void *ud) RS_MUST_CHECK;

/* Every `Sitemap: URL` line of a robots.txt (field name case-insensitive,
 * comments and blank lines skipped, CRLF or LF). A value that is not one
 * token (spaces or control bytes inside) is skipped. Returns 0,
 * RS_ETOOBIG past RS_DISCOVER_MAX_LINKS sitemaps (those were delivered),
 * RS_ESTOPPED or RS_ENOMEM. */
int rs_robots_sitemaps(const char *buf, size_t len, rs_sitemap_cb cb, void *ud) RS_MUST_CHECK;

#endif
