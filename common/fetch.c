/*
 * fetch.c - blocking GET on libcurl easy for command-line tools
 * (rs_fetch.h). Owns the limits (timeouts, body size, redirects, protocols)
 * and the mapping of HTTP and libcurl failures to RS_E* codes with a
 * readable reason; what the body means is the caller's business.
 */
#include <curl/curl.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rs_alloc.h"
#include "rs_doc.h"
#include "rs_fetch.h"
#include "rs_url.h"

#ifndef RS_VERSION
#define RS_VERSION "0"
#endif

#define FETCH_CONNECT_TIMEOUT_MS 10000L
#define FETCH_TIMEOUT_MS 60000L
#define FETCH_MAX_REDIRECTS 5

/* One transfer. Header fields are collected per response: each status line
 * starts over, so after redirects only the final response's remain. */
struct fetch {
    CURL *curl;
    struct rs_fetch_result *res;
    rs_fetch_body_cb on_body;
    void *ud;
    size_t max_bytes;
    long max_redirects;
    int rc;              /* why we aborted the transfer; 0 if we did not */
    bool started;        /* the final response's body has begun */
    size_t discarded;    /* body bytes of responses not delivered */
    char reason[64];     /* reason phrase of the current response */
    char curl_err[CURL_ERROR_SIZE];
};

void
rs_fetch_result_cleanup(struct rs_fetch_result *res)
{
    if (res == NULL)
        return;
    rs_free(res->url);
    rs_free(res->content_type);
    for (size_t i = 0; i < res->nlinks; i++)
        rs_free(res->links[i]);
    rs_free(res->links);
    memset(res, 0, sizeof(*res));
    res->content_length = -1;
}

/* ---------------------------------------------------------------- headers */

static void
fetch_reset_headers(struct fetch *f)
{
    struct rs_fetch_result *res = f->res;
    for (size_t i = 0; i < res->nlinks; i++)
        rs_free(res->links[i]);
    res->nlinks = 0;
    rs_free(res->content_type);
    res->content_type = NULL;
    res->content_length = -1;
    f->reason[0] = '\0';
}

/* "HTTP/1.1 404 Not Found", "HTTP/2 200". */
static void
fetch_status_line(struct fetch *f, const char *s, size_t n)
{
    size_t i = 0;
    long status = 0;
    while (i < n && s[i] != ' ')
        i++;
    while (i < n && s[i] == ' ')
        i++;
    for (int d = 0; d < 3 && i < n && s[i] >= '0' && s[i] <= '9'; d++, i++)
        status = status * 10 + (s[i] - '0');
    while (i < n && s[i] == ' ')
        i++;
    fetch_reset_headers(f);
    f->res->status = status;
    size_t rl = n - i < sizeof(f->reason) - 1 ? n - i : sizeof(f->reason) - 1;
    memcpy(f->reason, s + i, rl);
    f->reason[rl] = '\0';
}

/* The value of "Name: value" when the line has that name, trimmed. */
static bool
fetch_header_is(const char *s, size_t n, const char *name, const char **val,
                size_t *vlen)
{
    size_t nl = strlen(name);
    if (n <= nl || strncasecmp(s, name, nl) != 0 || s[nl] != ':')
        return false;
    size_t i = nl + 1;
    while (i < n && (s[i] == ' ' || s[i] == '\t'))
        i++;
    *val = s + i;
    *vlen = n - i;
    return true;
}

static int
fetch_add_link(struct fetch *f, const char *v, size_t n)
{
    struct rs_fetch_result *res = f->res;
    if (res->nlinks >= RS_FETCH_MAX_LINK_HEADERS)
        return 0;   /* lenient: discovery needs the first few, not all */
    if (res->links == NULL) {
        res->links = rs_calloc(RS_FETCH_MAX_LINK_HEADERS, sizeof(char *));
        if (res->links == NULL)
            return RS_ENOMEM;
    }
    char *copy = rs_strndup(v, n);
    if (copy == NULL)
        return RS_ENOMEM;
    res->links[res->nlinks++] = copy;
    return 0;
}

static void
fetch_fail(struct fetch *f, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
fetch_fail(struct fetch *f, int rc, const char *fmt, ...)
{
    va_list ap;
    f->rc = rc;
    va_start(ap, fmt);
    vsnprintf(f->res->errstr, sizeof(f->res->errstr), fmt, ap);
    va_end(ap);
}

/* The announced size is refused before any body byte is read. */
static bool
fetch_check_announced(struct fetch *f)
{
    struct rs_fetch_result *res = f->res;
    if (res->status < 200 || res->status > 299 || res->content_length < 0 ||
        (uint64_t)res->content_length <= f->max_bytes)
        return true;
    fetch_fail(f, RS_ETOOBIG,
               "response body too large: Content-Length %lld exceeds the "
               "limit of %zu bytes", (long long)res->content_length,
               f->max_bytes);
    return false;
}

static size_t
on_header(char *buf, size_t size, size_t nitems, void *ud)
{
    struct fetch *f = ud;
    size_t total = size * nitems, n = total;
    const char *v;
    size_t vn;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' ||
                     buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        n--;

    if (n >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
        fetch_status_line(f, buf, n);
    } else if (f->started) {
        /* trailers after the body: not part of what we report */
    } else if (n == 0) {
        if (!fetch_check_announced(f))
            return 0;
    } else if (fetch_header_is(buf, n, "link", &v, &vn)) {
        int rc = fetch_add_link(f, v, vn);
        if (rc < 0) {
            fetch_fail(f, rc, "out of memory");
            return 0;
        }
    } else if (fetch_header_is(buf, n, "content-type", &v, &vn)) {
        rs_free(f->res->content_type);
        f->res->content_type = rs_strndup(v, vn);
        if (f->res->content_type == NULL) {
            fetch_fail(f, RS_ENOMEM, "out of memory");
            return 0;
        }
    } else if (fetch_header_is(buf, n, "content-length", &v, &vn)) {
        char tmp[32], *end;
        if (vn > 0 && vn < sizeof(tmp)) {
            memcpy(tmp, v, vn);
            tmp[vn] = '\0';
            errno = 0;
            long long cl = strtoll(tmp, &end, 10);
            if (errno == 0 && *end == '\0' && cl >= 0)
                f->res->content_length = cl;
        }
    }
    return total;
}

/* ------------------------------------------------------------------- body */

static void
fetch_status_error(struct fetch *f)
{
    long st = f->res->status;
    int rc = (st == 404 || st == 410) ? RS_ENOTFOUND : RS_EPROTO;
    if (f->reason[0] != '\0')
        fetch_fail(f, rc, "HTTP %ld %s", st, f->reason);
    else
        fetch_fail(f, rc, "HTTP %ld", st);
}

static int
fetch_capture_url(struct fetch *f)
{
    char *eff = NULL;
    if (f->res->url != NULL)
        return 0;
    if (curl_easy_getinfo(f->curl, CURLINFO_EFFECTIVE_URL, &eff) != CURLE_OK ||
        eff == NULL)
        return 0;
    f->res->url = rs_strdup(eff);
    return f->res->url != NULL ? 0 : RS_ENOMEM;
}

static size_t
on_body(char *buf, size_t size, size_t nmemb, void *ud)
{
    struct fetch *f = ud;
    struct rs_fetch_result *res = f->res;
    size_t n = size * nmemb;
    long st = res->status;

    if (st < 200 || st > 299) {
        /* A redirect's body is dropped while curl follows it; any other
         * status fails now rather than after downloading an error page. */
        if (st >= 300 && st <= 399 && n <= f->max_bytes - f->discarded) {
            f->discarded += n;
            return n;
        }
        fetch_status_error(f);
        return 0;
    }
    if (!f->started) {
        f->started = true;
        if (fetch_capture_url(f) < 0) {
            fetch_fail(f, RS_ENOMEM, "out of memory");
            return 0;
        }
    }
    if (n > f->max_bytes - res->body_bytes) {
        fetch_fail(f, RS_ETOOBIG,
                   "response body too large: more than the limit of %zu bytes",
                   f->max_bytes);
        return 0;
    }
    res->body_bytes += n;
    if (f->on_body != NULL) {
        int rc = f->on_body(f->ud, buf, n);
        if (rc != 0) {
            rc = rc < 0 ? rc : RS_ESTOPPED;
            fetch_fail(f, rc, "stopped while reading the body: %s",
                       rs_strerror(rc));
            return 0;
        }
    }
    return n;
}

/* ------------------------------------------------------------------ errors */

static void
fetch_curl_error(struct fetch *f, CURLcode cc)
{
    const char *detail = f->curl_err[0] ? f->curl_err : curl_easy_strerror(cc);
    switch (cc) {
    case CURLE_OPERATION_TIMEDOUT:
        fetch_fail(f, RS_ETIMEDOUT, "timed out: %s", detail);
        break;
    case CURLE_TOO_MANY_REDIRECTS:
        fetch_fail(f, RS_EPROTO, "too many redirects (more than %ld)",
                   f->max_redirects);
        break;
    case CURLE_UNSUPPORTED_PROTOCOL:
        fetch_fail(f, RS_EUNSUPPORTED,
                   "refused to follow a redirect to a non-http(s) URL: %s",
                   detail);
        break;
    case CURLE_FILESIZE_EXCEEDED:
        fetch_fail(f, RS_ETOOBIG, "response body too large: %s", detail);
        break;
    case CURLE_URL_MALFORMAT:
        fetch_fail(f, RS_EINVAL, "malformed URL: %s", detail);
        break;
    case CURLE_OUT_OF_MEMORY:
        fetch_fail(f, RS_ENOMEM, "out of memory");
        break;
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        fetch_fail(f, RS_EPROTO, "bad response: %s", detail);
        break;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        fetch_fail(f, RS_EIO, "cannot resolve host: %s", detail);
        break;
    case CURLE_COULDNT_CONNECT:
        fetch_fail(f, RS_EIO, "cannot connect: %s", detail);
        break;
    default:
        fetch_fail(f, RS_EIO, "transfer failed: %s", detail);
        break;
    }
}

/* ------------------------------------------------------------------ fetch */

static int
fetch_setup(struct fetch *f, const char *url, const struct rs_fetch_opts *o,
            struct curl_slist **hdrs)
{
    CURL *c = f->curl;
    long cto = o->connect_timeout_ms > 0 ? o->connect_timeout_ms
                                         : FETCH_CONNECT_TIMEOUT_MS;
    long to = o->timeout_ms > 0 ? o->timeout_ms : FETCH_TIMEOUT_MS;
    const char *ua = o->user_agent ? o->user_agent : "rspush/" RS_VERSION;
    CURLcode cc = CURLE_OK;

    if (o->accept != NULL) {
        char line[256];
        snprintf(line, sizeof(line), "Accept: %s", o->accept);
        *hdrs = curl_slist_append(NULL, line);
        if (*hdrs == NULL)
            return RS_ENOMEM;
    }
    /* Each setopt that can fail on a correct call fails only for lack of
     * memory or an old libcurl; collect the first failure. */
#define FETCH_SET(opt, val) \
    do { if (cc == CURLE_OK) cc = curl_easy_setopt(c, opt, val); } while (0)
    FETCH_SET(CURLOPT_URL, url);
    FETCH_SET(CURLOPT_PROTOCOLS_STR, "http,https");
    FETCH_SET(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    FETCH_SET(CURLOPT_FOLLOWLOCATION, f->max_redirects > 0 ? 1L : 0L);
    FETCH_SET(CURLOPT_MAXREDIRS, f->max_redirects > 0 ? f->max_redirects : 0L);
    FETCH_SET(CURLOPT_CONNECTTIMEOUT_MS, cto);
    FETCH_SET(CURLOPT_TIMEOUT_MS, to);
    FETCH_SET(CURLOPT_USERAGENT, ua);
    FETCH_SET(CURLOPT_NOSIGNAL, 1L);
    FETCH_SET(CURLOPT_ACCEPT_ENCODING, "");   /* every encoding libcurl has */
    FETCH_SET(CURLOPT_ERRORBUFFER, f->curl_err);
    FETCH_SET(CURLOPT_HEADERFUNCTION, on_header);
    FETCH_SET(CURLOPT_HEADERDATA, f);
    FETCH_SET(CURLOPT_WRITEFUNCTION, on_body);
    FETCH_SET(CURLOPT_WRITEDATA, f);
    if (*hdrs != NULL)
        FETCH_SET(CURLOPT_HTTPHEADER, *hdrs);
#undef FETCH_SET
    if (cc != CURLE_OK) {
        fetch_fail(f, cc == CURLE_OUT_OF_MEMORY ? RS_ENOMEM : RS_EUNSUPPORTED,
                   "cannot set up the transfer: %s", curl_easy_strerror(cc));
        return f->rc;
    }
    return 0;
}

int
rs_fetch(const char *url, const struct rs_fetch_opts *opts,
         rs_fetch_body_cb on_body_cb, void *ud, struct rs_fetch_result *res)
{
    static const struct rs_fetch_opts defaults;
    struct fetch f;
    struct curl_slist *hdrs = NULL;
    int rc;

    memset(res, 0, sizeof(*res));
    res->content_length = -1;
    if (opts == NULL)
        opts = &defaults;
    memset(&f, 0, sizeof(f));
    f.res = res;
    f.on_body = on_body_cb;
    f.ud = ud;
    f.max_bytes = opts->max_bytes ? opts->max_bytes : RS_MAX_DOC_BYTES;
    f.max_redirects = opts->max_redirects == 0 ? FETCH_MAX_REDIRECTS
                      : opts->max_redirects < 0 ? 0 : opts->max_redirects;

    if (url == NULL || !rs_url_is_http(url)) {
        snprintf(res->errstr, sizeof(res->errstr),
                 "not an absolute http(s) URL: %s", url ? url : "(null)");
        return RS_EINVAL;
    }
    f.curl = curl_easy_init();
    if (f.curl == NULL) {
        snprintf(res->errstr, sizeof(res->errstr), "cannot start libcurl");
        return RS_ENOMEM;
    }
    rc = fetch_setup(&f, url, opts, &hdrs);
    if (rc < 0)
        goto out;

    CURLcode cc = curl_easy_perform(f.curl);
    long status = 0, redirects = 0;
    if (curl_easy_getinfo(f.curl, CURLINFO_RESPONSE_CODE, &status) ==
            CURLE_OK && status != 0)
        res->status = status;
    if (curl_easy_getinfo(f.curl, CURLINFO_REDIRECT_COUNT, &redirects) ==
            CURLE_OK && redirects > 0)
        res->redirects = (unsigned)redirects;
    if (fetch_capture_url(&f) < 0 && f.rc == 0)
        fetch_fail(&f, RS_ENOMEM, "out of memory");

    if (f.rc != 0)
        rc = f.rc;                  /* we stopped it; errstr is set */
    else if (cc != CURLE_OK) {
        fetch_curl_error(&f, cc);
        rc = f.rc;
    } else if (res->status < 200 || res->status > 299) {
        fetch_status_error(&f);
        rc = f.rc;
    } else {
        rc = 0;
    }
out:
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(f.curl);
    return rc;
}
