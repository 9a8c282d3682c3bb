/*
 * rs_asset.h - files built into a program (cmake/RsEmbed.cmake makes the
 * tables) and how a daemon serves them and its dashboard's JSON over
 * libevent's HTTP server: the type from the name, a validator, and the
 * headers that keep a browser strict (a Content-Security-Policy that runs
 * only the daemon's own script files, no sniffing, no framing). What is
 * served under which path is the program's.
 */
#ifndef RS_ASSET_H
#define RS_ASSET_H

#include <stddef.h>

#include "rs_error.h"

struct evhttp_request;

struct rs_asset {
    const char *name;                /* base name: "index.html" */
    const unsigned char *data;       /* len bytes, then a 0 */
    size_t len;
};

/* The entry named name in a table ended by a NULL name, or NULL. */
const struct rs_asset *rs_asset_find(const struct rs_asset *table,
                                     const char *name);

/* Answer req with the asset named name of table: 200 with its type by
 * extension, Cache-Control no-cache and an ETag (304 to a matching
 * If-None-Match), the strict headers, and a Content-Security-Policy whose
 * connect-src is 'self' plus connect_src (origins the page may open, such
 * as a WebSocket listener's "ws://host:port"; NULL or "": none).
 * RS_ENOTFOUND, nothing sent, when there is no such asset. */
int rs_asset_reply(struct evhttp_request *req, const struct rs_asset *table,
                   const char *name, const char *connect_src) RS_MUST_CHECK;

/* Answer req 200 with len bytes of JSON, not to be stored (Cache-Control
 * no-store) nor sniffed. 500 when out of memory. */
void rs_asset_reply_json(struct evhttp_request *req, const char *json,
                         size_t len);

#endif
