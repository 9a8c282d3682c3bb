/*
 * rs_http.h - asynchronous HTTP client on a libevent loop: libcurl's
 * multi_socket interface driven by the loop's events and one timer (the
 * seam between libcurl and libevent lives in http.c only). Keep-alive
 * connection reuse, a cap on connections in total and per host, per-request
 * timeouts, body size limits, bounded redirects, streaming or buffered
 * response bodies, and credentials that go to their own origin only. It
 * owns transfers and connections; what a request means is the caller's
 * business. No thread, no blocking call.
 *
 * Redirects are followed here, one request per hop, not by libcurl: each
 * hop gets the credentials of its own origin (rs_http_cred_add) and none
 * of another's, the caller's Authorization, Cookie and
 * Proxy-Authorization headers go no further than the first URL's origin,
 * and no client certificate is shown to another origin (libcurl would
 * keep custom headers and the certificate across hosts).
 */
#ifndef RS_HTTP_H
#define RS_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"

struct event_base;
struct sockaddr;
struct rs_http;
struct rs_http_req;

struct rs_http_opts {
    unsigned max_conns;          /* total connections; 0 = 256 */
    unsigned max_host_conns;     /* per host; 0 = 8 */
    unsigned connect_timeout_ms; /* 0 = 5000 */
    const char *user_agent;      /* NULL = "rspush/VERSION" */
    bool http2;                  /* negotiate HTTP/2 where offered (TLS ALPN) */
    unsigned max_requests;       /* accepted, on_done not yet run; 0 = 100000 */
    /* Connect-time address policy: called for every address a transfer
     * is about to connect to (after DNS, so a name that rebinds to a
     * denied network is still refused); false refuses it and the request
     * ends with RS_EDENIED. NULL: every address is allowed. */
    bool (*addr_ok)(void *ud, const struct sockaddr *sa);
    void *addr_ud;
    /* PEM file of the CAs TLS peers are checked against instead of the
     * system's; copied; NULL: the system store. */
    const char *ca_file;
    /* A final response 401 or 403 from an origin that has credentials
     * (rs_http_cred_add, even empty ones): called with that entry's realm
     * and the URL, before the request's on_done. NULL: not told. */
    void (*on_refused)(void *ud, const char *realm, const char *url,
                       long status);
    void *refused_ud;
};

/* What goes to one origin (scheme, host, port) and nowhere else. */
struct rs_http_cred {
    const char *origin;          /* any http(s) URL: its origin is meant */
    const char *realm;           /* a name for on_refused ("source"); copied */
    const char *const *headers;  /* "Name: value", NULL-terminated; copied;
                                    a header the request itself gives of the
                                    same name wins */
    const char *netrc_file;      /* basic auth from this netrc (libcurl's) */
    const char *client_cert;     /* PEM certificate for TLS client auth... */
    const char *client_key;      /* ...and its key (NULL: in client_cert) */
};

/* What a finished request produced. Valid only during on_done. */
struct rs_http_result {
    int rc;                      /* 0: an HTTP response arrived (any status);
                                    RS_ETIMEDOUT, RS_EIO (connect/transfer
                                    failure), RS_EDENIED (addr_ok refused
                                    the address), RS_ETOOBIG (body over max_body),
                                    RS_EPROTO (bad response, too many
                                    redirects), RS_ESTOPPED (on_data said
                                    stop), RS_ECANCELED (rs_http_cancel or
                                    rs_http_free) */
    long status;                 /* HTTP status, 0 if none */
    const char *errstr;          /* why, when rc != 0; "" otherwise */
    const char *effective_url;   /* after redirects */
    const char *content_type;    /* NULL if absent */
    const char *body;            /* buffered body when no on_data; NUL-terminated */
    size_t body_len;
    uint64_t elapsed_us;         /* request start to done */
};

/* on_data's "not now": the piece is not taken; the loop runs the events
 * that are ready, then the same piece comes again. On a fast connection
 * libcurl reads on while the socket has bytes (a whole 14 MB package in
 * one turn of the loop), and the loop's other work waits. */
#define RS_HTTP_DATA_LATER 2

struct rs_http_req_opts {
    const char *method;          /* NULL = "GET"; "POST", "HEAD", ... */
    const char *url;             /* absolute http(s) URL */
    const char *const *headers;  /* "Name: value" strings, NULL-terminated; copied */
    const void *body;            /* request body; copied unless body_borrowed */
    size_t body_len;
    bool body_borrowed;          /* body stays valid until on_done: no copy */
    unsigned timeout_ms;         /* whole transfer; 0 = 30000 */
    size_t max_body;             /* response body cap; 0 = 64 MiB */
    unsigned max_redirects;      /* 0 = do not follow */
    /* Streaming: called with each piece of the response body (after the
     * headers are in, so rs_http_req_header works). Return 0 to go on,
     * RS_HTTP_DATA_LATER to leave the piece for now (below), any other
     * non-zero to stop (the request ends with RS_ESTOPPED). NULL: the body
     * is buffered into result.body (up to max_body). */
    int (*on_data)(void *ud, struct rs_http_req *req, const char *buf, size_t len);
    /* Runs exactly once per request accepted by rs_http_request, including
     * on cancel and on rs_http_free. The request is freed right after. */
    void (*on_done)(void *ud, struct rs_http_req *req, const struct rs_http_result *res);
    void *ud;
    /* A final 401 or 403 is this request's own business: the client's
     * on_refused is not told (its caller judges what one refusal of it
     * means, e.g. one resource among many). */
    bool own_refusal;
    /* Bytes libcurl reads from the connection at once (CURLOPT_BUFFERSIZE,
     * at most 512 KiB); 0: libcurl's 16 KiB. For a large body taken in
     * one go (a dump package): fewer reads. on_data still gets pieces of
     * at most 16 KiB (libcurl's CURL_MAX_WRITE_SIZE). The buffer is the
     * request's, for its life. */
    size_t read_size;
    /* Ask for any Content-Encoding libcurl can undo (Accept-Encoding) and
     * hand on_data the bytes undone: for documents, which compress ten to
     * one. Not for resources, whose announced hash and length are of the
     * bytes as served. max_body bounds the bytes undone. */
    bool accept_encoding;
};

struct rs_http *rs_http_new(struct event_base *base, const struct rs_http_opts *o);

/* Every request still in flight completes with RS_ECANCELED before this
 * returns. Must not be called from inside one of its callbacks. NULL ok. */
void rs_http_free(struct rs_http *h);

/* Credentials for c->origin's requests, redirect hops included, and for no
 * other origin. At most RS_HTTP_MAX_CREDS origins and RS_HTTP_MAX_CRED_HEADERS
 * headers each; every header as rs_http_request checks them. 0; RS_EINVAL
 * (not an http(s) URL, a bad header, too many); RS_ESTATE: the origin has
 * credentials already (the first stay); RS_ENOMEM. Requests started before
 * the call do not see them. */
#define RS_HTTP_MAX_CREDS 16
#define RS_HTTP_MAX_CRED_HEADERS 32
int rs_http_cred_add(struct rs_http *h, const struct rs_http_cred *c)
    RS_MUST_CHECK;

/* Start a request. 0: on_done will run exactly once (never from inside
 * this call); *out (may be NULL) identifies it until then. RS_EINVAL (bad
 * URL or options), RS_ENOMEM, RS_ETOOBIG (max_requests in flight),
 * RS_ESTATE (rs_http_free has begun, e.g. from inside on_done): on_done
 * never runs. */
int rs_http_request(struct rs_http *h, const struct rs_http_req_opts *o,
                    struct rs_http_req **out) RS_MUST_CHECK;

/* Cancel: on_done runs (from the loop, not inside this call) with
 * RS_ECANCELED, unless it already ran. Safe from inside on_data. */
void rs_http_cancel(struct rs_http_req *req);

/* A response header of the request (case-insensitive name; the last one if
 * repeated), valid during on_data/on_done; NULL if absent. */
const char *rs_http_req_header(struct rs_http_req *req, const char *name);

/* The status of the response being received (valid during on_data, so a
 * streaming caller can tell an error page from the body it wants); 0 if
 * none yet. */
long rs_http_req_status(struct rs_http_req *req);

/* Every value of a repeated header (e.g. Link), in order: calls cb for each.
 * Valid during on_data/on_done. */
void rs_http_req_headers(struct rs_http_req *req, const char *name,
                         void (*cb)(void *ud, const char *value), void *ud);

struct rs_http_stats {
    uint64_t requests, completed, failed, canceled;
    uint64_t connects;           /* new connections opened (keep-alive shows
                                    as connects << requests) */
    unsigned in_flight;
};
void rs_http_stats(const struct rs_http *h, struct rs_http_stats *out);

#endif
