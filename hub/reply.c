/*
 * reply.c - writing rshub's HTTP answers (reply.h): evbuffers built and
 * sent in one call, a Content-Type on every answer.
 */
#include <event2/buffer.h>
#include <event2/http.h>
#include <stdarg.h>

#include "reply.h"

void
reply_text(struct evhttp_request *req, int status, const char *reason,
           const char *fmt, ...)
{
    struct evbuffer *b = evbuffer_new();

    if (b != NULL) {
        va_list ap;
        va_start(ap, fmt);
        evbuffer_add_vprintf(b, fmt, ap);
        va_end(ap);
        evbuffer_add(b, "\n", 1);
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; charset=utf-8");
    evhttp_send_reply(req, status, reason, b);
    if (b != NULL)
        evbuffer_free(b);
}

void
reply_buf(struct evhttp_request *req, const char *ctype, const char *data,
          size_t len)
{
    struct evbuffer *b = evbuffer_new();

    if (b == NULL || evbuffer_add(b, data, len) != 0) {
        if (b != NULL)
            evbuffer_free(b);
        evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      ctype);
    evhttp_send_reply(req, HTTP_OK, "OK", b);
    evbuffer_free(b);
}
