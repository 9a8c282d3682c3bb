/*
 * rs_httpcheck.h - is a request's framing readable one way only? A request
 * whose body length two HTTP parsers could tell differently (a proxy in
 * front and evhttp behind) lets a client smuggle a second request inside
 * the first (RFC 9112 6.3, 11.2). The check reads the header list evhttp
 * parsed and does no I/O; rs_httpcheck_refuse is the one call an evhttp
 * handler makes first, which answers such a request and closes its
 * connection.
 *
 * What evhttp (libevent 2.1.12, Debian 12) does on its own, tried on
 * loopback: Content-Length with Transfer-Encoding, Transfer-Encoding twice
 * and a Content-Length list ("5, 5") get its own 400 and a closed
 * connection before any handler runs. It hands the handler: two
 * Content-Length headers (the first one wins), "Content-Length: +5",
 * "Content-Length : 5" (not a length to it; the body is read otherwise),
 * "Transfer-Encoding: gzip" (no body: what follows is read as the next
 * request) and "gzip, chunked" (de-chunked, gzip left on). This check
 * refuses all of them, and the ones evhttp refuses too, so that it holds
 * whatever evhttp does.
 */
#ifndef RS_HTTPCHECK_H
#define RS_HTTPCHECK_H

#include <stdbool.h>

struct evkeyvalq;
struct evhttp_request;

/*
 * The framing of a request with these headers: 0 when it can be read one
 * way only, else the status to answer, with *why a static one-line reason
 * (no final period):
 *
 *   400  a header name that is not a token (RFC 9110 5.1: "Content-Length :"
 *        is not Content-Length to evhttp, and may be to a proxy);
 *        a Content-Length that is not 1*DIGIT (at most 18 digits);
 *        Content-Length values that differ (equal ones are one, RFC 9110
 *        8.6); Transfer-Encoding together with Content-Length, or twice;
 *        a Transfer-Encoding whose last coding is not chunked (RFC 9112
 *        6.3: the length cannot be told); more than one Host (RFC 9112 3.2);
 *   501  a Transfer-Encoding with a coding before chunked (gzip, chunked):
 *        evhttp decodes chunked only.
 *
 * A request refused so must not be acted upon, and its connection must be
 * closed after the answer: whatever follows it on the connection cannot be
 * told apart from its body.
 */
int rs_httpcheck_framing(const struct evkeyvalq *headers, const char **why);

/*
 * Check req's input headers; on a fault answer it (the status above,
 * text/plain "error: WHY", Connection: close, which makes evhttp close the
 * connection once the answer is sent) and return true: the handler then
 * returns at once. false: nothing was sent.
 */
bool rs_httpcheck_refuse(struct evhttp_request *req);

#endif
