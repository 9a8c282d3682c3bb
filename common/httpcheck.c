/*
 * httpcheck.c - request framing a proxy and evhttp would read alike, or a
 * refusal (rs_httpcheck.h). The check owns only the rules of RFC 9112 6
 * and 9110 5.1/8.6 on the header list; routes and their answers stay the
 * daemons'.
 */
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "rs_httpcheck.h"

/* Longest Content-Length taken: 18 digits fit an int64 whatever they are
 * (evhttp keeps the length in an ev_int64_t). */
#define HTTPCHECK_CL_DIGITS 18

/* RFC 9110 5.6.2 tchar */
static bool
is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
        (c >= 'A' && c <= 'Z'))
        return true;
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool
is_token(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s != '\0'; s++)
        if (!is_tchar((unsigned char)*s))
            return false;
    return true;
}

static bool
is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* [*b, *e) trimmed of optional whitespace on both sides. */
static void
trim_ows(const char **b, const char **e)
{
    while (*b < *e && is_ows(**b))
        (*b)++;
    while (*e > *b && is_ows((*e)[-1]))
        (*e)--;
}

/* Content-Length = 1*DIGIT; 0 and *out, or -1. */
static int
cl_parse(const char *v, uint64_t *out)
{
    const char *b = v, *e = v + strlen(v);
    trim_ows(&b, &e);
    if (b == e || e - b > HTTPCHECK_CL_DIGITS)
        return -1;
    uint64_t n = 0;
    for (const char *p = b; p < e; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        n = n * 10 + (uint64_t)(*p - '0');
    }
    *out = n;
    return 0;
}

/* Transfer-Encoding: 0 when it is exactly chunked, else the status. A list
 * is judged by its last coding (RFC 9112 6.3): not chunked, the length
 * cannot be told (400); chunked after others, the others are codings
 * evhttp does not undo (501). */
static int
te_judge(const char *v, const char **why)
{
    const char *b = v, *e = v + strlen(v);
    trim_ows(&b, &e);
    if ((size_t)(e - b) == 7 && strncasecmp(b, "chunked", 7) == 0)
        return 0;
    /* the last non-empty element of the list, parameters cut */
    const char *last_b = NULL, *last_e = NULL;
    const char *p = b;
    while (p <= e) {
        const char *q = p;
        while (q < e && *q != ',')
            q++;
        const char *eb = p, *ee = q;
        const char *semi = memchr(eb, ';', (size_t)(ee - eb));
        if (semi != NULL)
            ee = semi;
        trim_ows(&eb, &ee);
        if (eb < ee) {
            last_b = eb;
            last_e = ee;
        }
        p = q + 1;
    }
    if (last_b != NULL && last_e - last_b == 7 &&
        strncasecmp(last_b, "chunked", 7) == 0) {
        *why = "only Transfer-Encoding: chunked is implemented";
        return 501;
    }
    *why = "Transfer-Encoding does not end in chunked: the body's length "
           "cannot be told";
    return 400;
}

int
rs_httpcheck_framing(const struct evkeyvalq *headers, const char **why)
{
    const char *te = NULL;
    bool have_cl = false, have_host = false;
    uint64_t cl = 0;
    *why = NULL;
    for (const struct evkeyval *kv = headers->tqh_first; kv != NULL;
         kv = kv->next.tqe_next) {
        if (!is_token(kv->key)) {
            *why = "a header name holds a space or a character names may "
                   "not hold (a space before the colon?)";
            return 400;
        }
        if (strcasecmp(kv->key, "Content-Length") == 0) {
            uint64_t n;
            if (cl_parse(kv->value, &n) != 0) {
                *why = "Content-Length is not a number of at most 18 digits";
                return 400;
            }
            if (have_cl && n != cl) {
                *why = "two different Content-Length values";
                return 400;
            }
            have_cl = true;
            cl = n;
        } else if (strcasecmp(kv->key, "Transfer-Encoding") == 0) {
            if (te != NULL) {
                *why = "Transfer-Encoding given more than once";
                return 400;
            }
            te = kv->value;
        } else if (strcasecmp(kv->key, "Host") == 0) {
            if (have_host) {
                *why = "Host given more than once";
                return 400;
            }
            have_host = true;
        }
    }
    if (te != NULL && have_cl) {
        *why = "both Content-Length and Transfer-Encoding";
        return 400;
    }
    return te != NULL ? te_judge(te, why) : 0;
}

bool
rs_httpcheck_refuse(struct evhttp_request *req)
{
    const char *why = NULL;
    int status = rs_httpcheck_framing(evhttp_request_get_input_headers(req),
                                      &why);
    if (status == 0)
        return false;
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    struct evbuffer *b = evbuffer_new();
    if (b != NULL)
        evbuffer_add_printf(b, "error: %s\n", why);
    evhttp_add_header(out, "Content-Type", "text/plain; charset=utf-8");
    /* evhttp closes a connection whose answer says so (evhttp_send_done) */
    evhttp_add_header(out, "Connection", "close");
    evhttp_send_reply(req, status,
                      status == 400 ? "Bad Request" : "Not Implemented", b);
    if (b != NULL)
        evbuffer_free(b);
    return true;
}
