/*
 * reply.h - how rshub answers an HTTP request: a one-line text body
 * ("error: WHY" for errors, as docs/protocol.md promises) or a buffer of
 * a given type. Who answers what is the handlers' (ingest, status,
 * websub); this module only writes the answer.
 */
#ifndef HUB_REPLY_H
#define HUB_REPLY_H

#include <stddef.h>

struct evhttp_request;

/* status and a one-line text/plain body (a newline is added). */
void reply_text(struct evhttp_request *req, int status, const char *reason,
                const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* 200 with len bytes of data as ctype (copied). 500 when out of memory. */
void reply_buf(struct evhttp_request *req, const char *ctype,
               const char *data, size_t len);

#endif
