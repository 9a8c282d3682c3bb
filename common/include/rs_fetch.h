/*
 * rs_fetch.h - a blocking HTTP(S) GET for command-line tools (libcurl easy),
 * streaming the body to a callback so a document never has to be held in
 * memory. Bounded everywhere: timeouts, body size, redirects, protocols.
 * Daemons use the asynchronous client instead; this one is deliberately
 * simple: one call, one transfer, no retries.
 */
#ifndef RS_FETCH_H
#define RS_FETCH_H

#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"

#define RS_FETCH_MAX_LINK_HEADERS 64  /* Link fields kept; more are dropped */

struct rs_fetch_opts {
    long connect_timeout_ms;   /* 0 = 10 s */
    long timeout_ms;           /* whole transfer; 0 = 60 s */
    size_t max_bytes;          /* decoded body; 0 = 50 MB (RS_MAX_DOC_BYTES) */
    int max_redirects;         /* 0 = 5; negative = do not follow */
    const char *user_agent;    /* NULL = "rspush/VERSION" */
    const char *accept;        /* Accept header; NULL = none sent */
};

/*
 * What came back, filled by rs_fetch() (which initialises it first, so no
 * rs_fetch_result_init is needed) and released with
 * rs_fetch_result_cleanup(). Fields describe the final response, after
 * redirects; Link values come only from that response.
 */
struct rs_fetch_result {
    long status;               /* HTTP status; 0 when none arrived */
    char *url;                 /* final (effective) URL, or NULL */
    char *content_type;        /* as sent, parameters included, or NULL */
    char **links;              /* raw values of each Link header field */
    size_t nlinks;
    int64_t content_length;    /* announced; -1 when not announced */
    size_t body_bytes;         /* body bytes handed to the callback */
    unsigned redirects;        /* redirects followed */
    char errstr[256];          /* why it failed; "" on success */
};

/*
 * Receives the body in chunks of any size, only for a 2xx final response.
 * When it first runs, res's status, url, content_type, links and
 * content_length already describe that response. Return 0 to go on; a
 * negative RS_E* stops the transfer and rs_fetch() returns it (a positive
 * value stops it with RS_ESTOPPED).
 */
typedef int (*rs_fetch_body_cb)(void *ud, const char *buf, size_t len);

/*
 * GET url (http:// or https:// only, for the request and every redirect).
 * on_body may be NULL (the body is then counted against the limit and
 * dropped). res is required. Returns 0 for a 2xx response whose body was
 * delivered in full, or:
 *   RS_ENOTFOUND  status 404 or 410
 *   RS_EPROTO     any other non-2xx status (res->status says which), too
 *                 many redirects, or a malformed response
 *   RS_ETOOBIG    the body exceeded max_bytes, or Content-Length announced
 *                 more (checked before the body is read)
 *   RS_ETIMEDOUT  a timeout passed
 *   RS_EIO        name resolution, connection, TLS or transfer failure
 *   RS_EUNSUPPORTED a redirect to a scheme other than http(s)
 *   RS_EINVAL     url is not an absolute http(s) URL
 *   RS_ENOMEM, or the callback's error.
 * On every error res->errstr says what happened in words, and res holds
 * what was learnt (status, final URL, headers).
 *
 * Programs should call curl_global_init() once at start-up, before any
 * thread runs; otherwise libcurl does it on first use, thread-unsafely.
 */
int rs_fetch(const char *url, const struct rs_fetch_opts *opts,
             rs_fetch_body_cb on_body, void *ud,
             struct rs_fetch_result *res) RS_MUST_CHECK;

/* Frees what res holds and resets it; safe on a zeroed or cleaned result. */
void rs_fetch_result_cleanup(struct rs_fetch_result *res);

#endif
