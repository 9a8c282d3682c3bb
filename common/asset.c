/*
 * asset.c - serving built-in files and dashboard JSON (rs_asset.h): the
 * Content-Type from a short list of extensions, an ETag from the bytes
 * (FNV-1a: a cache validator, not a defence), the strict browser headers.
 * The tables themselves are generated (cmake/RsEmbed.cmake).
 */
#include <event2/buffer.h>
#include <event2/http.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "rs_asset.h"

/* The one policy of every page: scripts and styles only from the daemon's
 * own files (no inline script or style, no eval), nothing else loaded, no
 * forms, no framing. connect-src is completed per call. */
#define ASSET_CSP                                                          \
    "default-src 'none'; script-src 'self'; style-src 'self'; "           \
    "img-src 'self'; base-uri 'none'; form-action 'none'; "               \
    "frame-ancestors 'none'; connect-src 'self'"

static const struct {
    const char *ext;
    const char *type;
} asset_types[] = {
    { ".html", "text/html; charset=utf-8" },
    { ".js", "text/javascript; charset=utf-8" },
    { ".css", "text/css; charset=utf-8" },
    { ".svg", "image/svg+xml" },
    { ".json", "application/json" },
};

const struct rs_asset *
rs_asset_find(const struct rs_asset *table, const char *name)
{
    for (const struct rs_asset *a = table; a->name != NULL; a++)
        if (strcmp(a->name, name) == 0)
            return a;
    return NULL;
}

static const char *
asset_type(const char *name)
{
    size_t n = strlen(name);

    for (size_t i = 0; i < sizeof(asset_types) / sizeof(asset_types[0]); i++) {
        size_t e = strlen(asset_types[i].ext);
        if (n > e && strcmp(name + n - e, asset_types[i].ext) == 0)
            return asset_types[i].type;
    }
    return "application/octet-stream";
}

static void
asset_strict_headers(struct evkeyvalq *h)
{
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(h, "Referrer-Policy", "no-referrer");
    evhttp_add_header(h, "X-Frame-Options", "DENY");
}

int
rs_asset_reply(struct evhttp_request *req, const struct rs_asset *table,
               const char *name, const char *connect_src)
{
    const struct rs_asset *a = rs_asset_find(table, name);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    uint64_t hash = 1469598103934665603ull;
    char etag[24], csp[512];
    const char *inm;

    if (a == NULL)
        return RS_ENOTFOUND;
    for (size_t i = 0; i < a->len; i++)
        hash = (hash ^ a->data[i]) * 1099511628211ull;
    snprintf(etag, sizeof(etag), "\"%016" PRIx64 "\"", hash);
    if (snprintf(csp, sizeof(csp), "%s%s%s", ASSET_CSP,
                 connect_src != NULL && connect_src[0] ? " " : "",
                 connect_src != NULL ? connect_src : "") >= (int)sizeof(csp))
        snprintf(csp, sizeof(csp), "%s", ASSET_CSP);   /* the strict part */
    evhttp_add_header(h, "Content-Type", asset_type(a->name));
    evhttp_add_header(h, "Cache-Control", "no-cache");
    evhttp_add_header(h, "ETag", etag);
    evhttp_add_header(h, "Content-Security-Policy", csp);
    asset_strict_headers(h);
    inm = evhttp_find_header(evhttp_request_get_input_headers(req),
                             "If-None-Match");
    if (inm != NULL && strcmp(inm, etag) == 0) {
        evhttp_send_reply(req, 304, "Not Modified", NULL);
        return 0;
    }
    /* The tables are static: no copy. */
    struct evbuffer *b = evbuffer_new();
    if (b == NULL || evbuffer_add_reference(b, a->data, a->len, NULL,
                                            NULL) != 0) {
        if (b != NULL)
            evbuffer_free(b);
        evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
        return 0;
    }
    evhttp_send_reply(req, HTTP_OK, "OK", b);
    evbuffer_free(b);
    return 0;
}

void
rs_asset_reply_json(struct evhttp_request *req, const char *json, size_t len)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    struct evbuffer *b = evbuffer_new();

    if (b == NULL || evbuffer_add(b, json, len) != 0) {
        if (b != NULL)
            evbuffer_free(b);
        evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
        return;
    }
    evhttp_add_header(h, "Content-Type", "application/json");
    evhttp_add_header(h, "Cache-Control", "no-store");
    asset_strict_headers(h);
    evhttp_send_reply(req, HTTP_OK, "OK", b);
    evbuffer_free(b);
}
