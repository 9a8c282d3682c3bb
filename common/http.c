/*
 * http.c - asynchronous HTTP client (rs_http.h): libcurl's multi_socket
 * interface driven by libevent (the only file where that seam lives: one
 * event per socket, one timer, one "kick" event for deferred work), the
 * request life cycle that makes on_done run exactly once, response header
 * collection, body limits, and a pool of reusable easy handles. What a
 * request means is the caller's business.
 */
#include <curl/curl.h>
#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "rs_alloc.h"
#include "rs_http.h"

#ifndef RS_VERSION
#define RS_VERSION "0"
#endif

#define HTTP_MAX_CONNS 256u
#define HTTP_MAX_HOST_CONNS 8u
#define HTTP_CONNECT_TIMEOUT_MS 5000u
#define HTTP_MAX_REQUESTS 100000u
#define HTTP_TIMEOUT_MS 30000u
#define HTTP_MAX_BODY ((size_t)64 << 20)
/* Response header bytes kept per response (names and values). */
#define HTTP_MAX_HEADER_BYTES (64u * 1024u)
#define HTTP_MAX_METHOD 32u
/* Pooled requests keep at most this many, and buffers up to these sizes:
 * enough for the hub's many small POSTs without holding on to the memory
 * of the odd large response. */
#define HTTP_POOL_MIN 16u
#define HTTP_POOL_MAX 4096u
#define HTTP_KEEP_STORE 16384u
#define HTTP_KEEP_HDR 16384u
#define HTTP_KEEP_BODY 65536u
#define HTTP_BODY_MIN 1024u

/*
 * Where a request is in its life:
 *   IDLE -> PENDING -> RUNNING -> DONE -> CALLING -> IDLE (pooled or freed)
 * with PENDING -> DONE (canceled before start, or not accepted by curl)
 * and CALLING -> ZOMBIE when on_done ran while curl was on the stack. Each
 * state but IDLE and CALLING puts the request on exactly one list of the
 * object (http_req_move keeps the two in step), so that cancel, completion
 * and rs_http_free() are O(1) per request.
 */
enum http_req_state {
    HTTP_REQ_IDLE,      /* in the pool, or being set up */
    HTTP_REQ_PENDING,   /* accepted; on h->pending, not yet in the multi */
    HTTP_REQ_RUNNING,   /* in the multi; on h->running */
    HTTP_REQ_DONE,      /* rc fixed; on h->done, on_done not yet run */
    HTTP_REQ_CALLING,   /* on_done running */
    HTTP_REQ_ZOMBIE,    /* on_done ran during rs_http_free from inside a
                           curl callback; on h->zombies, still in the multi,
                           which only the final teardown may leave */
};

struct http_list {
    struct rs_http_req *head, *tail;
    unsigned n;
};

struct rs_http_req {
    struct rs_http_req *prev, *next; /* links in the list of its state */
    struct rs_http *h;
    CURL *easy;                 /* kept across uses (curl_easy_reset) */
    CURLU *curlu;               /* the parsed URL curl reads (CURLOPT_CURLU) */
    enum http_req_state state;
    bool in_multi;              /* added to h->multi and not yet removed */
    bool added;                 /* this use was added to the multi once */
    int rc;                     /* the outcome, fixed when DONE */
    CURLcode cc;                /* curl's result, CURLE_OK if none */
    /* Our reason when we ended the transfer ourselves (static string);
     * NULL when the outcome is curl's. */
    const char *why;

    int (*on_data)(void *ud, struct rs_http_req *req, const char *buf,
                   size_t len);
    void (*on_done)(void *ud, struct rs_http_req *req,
                    const struct rs_http_result *res);
    void *ud;
    size_t max_body;            /* bytes; never 0 once set up */
    size_t body_seen;           /* body bytes of the final response so far */
    uint64_t start_us;          /* monotonic, at acceptance */

    /* Request side, one block: curl_slist nodes first (aligned by the
     * allocator), then header strings, the URL and the body copy. curl
     * reads the header list and the body until the transfer ends. */
    char *store;
    size_t store_cap;
    const char *url;            /* in store: the URL as given */

    /* Response headers of the latest response: "name\0value\0" pairs in
     * arrival order; hdr_len <= HTTP_MAX_HEADER_BYTES. */
    char *hdr;
    size_t hdr_len, hdr_cap;

    /* Buffered body (no on_data): body_len bytes + a NUL, <= max_body. */
    char *body;
    size_t body_len, body_cap;

    char errbuf[CURL_ERROR_SIZE];
};

/* One socket curl asked us to watch: its event and our list links. curl
 * stops watching a connection when it goes idle in its cache and starts
 * again on reuse, so these come and go once per request: spare ones are
 * kept, event and all. */
struct http_sock {
    struct http_sock *prev, *next;
    struct event *ev;
    int what;                   /* CURL_POLL_* the event is set up for */
};

struct rs_http {
    struct event_base *base;
    CURLM *multi;
    struct event *timer;        /* curl's one timeout */
    /* Deferred work, run from the loop: starting accepted requests and
     * running on_done. Activated (never added), so no callback runs inside
     * rs_http_request() or rs_http_cancel(). */
    struct event *kick;
    char *user_agent;
    bool (*addr_ok)(void *ud, const struct sockaddr *sa);
    void *addr_ud;
    unsigned connect_timeout_ms;
    unsigned max_requests;
    unsigned pool_max;
    bool http2;

    struct http_list pending, running, done;
    struct http_list zombies;   /* see HTTP_REQ_ZOMBIE */
    struct rs_http_req *pool;   /* singly linked through next */
    unsigned pool_n;
    struct http_sock *socks;    /* every socket curl has us watch */
    struct http_sock *spare_socks; /* singly linked; event not added */
    unsigned spare_n;

    /* Frames of ours on the stack; h is destroyed only when it is closing
     * and depth drops to 0, so nothing is freed under a running callback. */
    unsigned depth;
    bool closing;               /* rs_http_free() has begun */
    bool in_curl;               /* inside curl_multi_socket_action() */
    struct rs_http_stats stats; /* in_flight is computed on demand */
};

static const char http_protocols[] = "http,https";

/* ------------------------------------------------------------- utilities */

static uint64_t
http_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void
http_list_push(struct http_list *l, struct rs_http_req *req)
{
    req->next = NULL;
    req->prev = l->tail;
    if (l->tail != NULL)
        l->tail->next = req;
    else
        l->head = req;
    l->tail = req;
    l->n++;
}

static void
http_list_remove(struct http_list *l, struct rs_http_req *req)
{
    if (req->prev != NULL)
        req->prev->next = req->next;
    else
        l->head = req->next;
    if (req->next != NULL)
        req->next->prev = req->prev;
    else
        l->tail = req->prev;
    req->prev = req->next = NULL;
    l->n--;
}

/* The list a request's state puts it on; NULL for IDLE and CALLING. */
static struct http_list *
http_list_of(struct rs_http *h, enum http_req_state st)
{
    switch (st) {
    case HTTP_REQ_PENDING:
        return &h->pending;
    case HTTP_REQ_RUNNING:
        return &h->running;
    case HTTP_REQ_DONE:
        return &h->done;
    case HTTP_REQ_ZOMBIE:
        return &h->zombies;
    case HTTP_REQ_IDLE:
    case HTTP_REQ_CALLING:
        break;
    }
    return NULL;
}

/* The one place a request's state changes, moving it between lists. */
static void
http_req_move(struct rs_http *h, struct rs_http_req *req,
              enum http_req_state to)
{
    struct http_list *from = http_list_of(h, req->state);
    struct http_list *l = http_list_of(h, to);

    if (from != NULL)
        http_list_remove(from, req);
    req->state = to;
    if (l != NULL)
        http_list_push(l, req);
}

/* RFC 9110 tchar: what a method or a header name may be made of. */
static bool
http_is_tchar(char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
        (c >= '0' && c <= '9'))
        return true;
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* ------------------------------------------------------------- lifetime */

static void http_destroy(struct rs_http *h);

static void
http_hold(struct rs_http *h)
{
    h->depth++;
}

static void
http_release(struct rs_http *h)
{
    h->depth--;
    if (h->depth == 0 && h->closing)
        http_destroy(h);
}

static void
http_kick(struct rs_http *h)
{
    event_active(h->kick, EV_TIMEOUT, 1);
}

static void
http_req_free(struct rs_http_req *req)
{
    if (req->easy != NULL)
        curl_easy_cleanup(req->easy);
    if (req->curlu != NULL)
        curl_url_cleanup(req->curlu);
    rs_free(req->store);
    rs_free(req->hdr);
    rs_free(req->body);
    rs_free(req);
}

/* A request object ready to be set up: from the pool, else new. */
static struct rs_http_req *
http_req_get(struct rs_http *h)
{
    struct rs_http_req *req = h->pool;

    if (req != NULL) {
        h->pool = req->next;
        h->pool_n--;
        req->next = NULL;
        return req;
    }
    req = rs_calloc(1, sizeof(*req));
    if (req == NULL)
        return NULL;
    req->h = h;
    req->easy = curl_easy_init();
    req->curlu = curl_url();
    if (req->easy == NULL || req->curlu == NULL) {
        http_req_free(req);
        return NULL;
    }
    return req;
}

/* Back to the pool, with its easy handle reset and big buffers dropped;
 * freed instead when the pool is full or h is going away. The request
 * must be out of the multi. */
static void
http_req_put(struct rs_http *h, struct rs_http_req *req)
{
    if (h->closing || h->pool_n >= h->pool_max) {
        http_req_free(req);
        return;
    }
    curl_easy_reset(req->easy);
    if (req->store_cap > HTTP_KEEP_STORE) {
        rs_free(req->store);
        req->store = NULL;
        req->store_cap = 0;
    }
    if (req->hdr_cap > HTTP_KEEP_HDR) {
        rs_free(req->hdr);
        req->hdr = NULL;
        req->hdr_cap = 0;
    }
    if (req->body_cap > HTTP_KEEP_BODY) {
        rs_free(req->body);
        req->body = NULL;
        req->body_cap = 0;
    }
    http_req_move(h, req, HTTP_REQ_IDLE);
    req->in_multi = false;
    req->added = false;
    req->on_data = NULL;
    req->on_done = NULL;
    req->ud = NULL;
    req->url = NULL;
    req->prev = NULL;
    req->next = h->pool;
    h->pool = req;
    h->pool_n++;
}

static void
http_sock_unlink(struct rs_http *h, struct http_sock *sk)
{
    if (sk->prev != NULL)
        sk->prev->next = sk->next;
    else
        h->socks = sk->next;
    if (sk->next != NULL)
        sk->next->prev = sk->prev;
    sk->prev = sk->next = NULL;
}

/* curl no longer watches the socket: its event goes, the object is kept
 * for the next socket while there are few spares. */
static void
http_sock_put(struct rs_http *h, struct http_sock *sk)
{
    http_sock_unlink(h, sk);
    if (h->closing || h->spare_n >= h->pool_max) {
        event_free(sk->ev);
        rs_free(sk);
        return;
    }
    event_del(sk->ev);
    sk->next = h->spare_socks;
    h->spare_socks = sk;
    h->spare_n++;
}

/* The last frame is gone and rs_http_free() has run: every on_done has
 * run; release curl, the events and the memory. curl_multi_cleanup() may
 * still call the socket and timer callbacks, so h lives until the end. */
static void
http_destroy(struct rs_http *h)
{
    struct rs_http_req *req;

    while (h->zombies.head != NULL) {
        req = h->zombies.head;
        http_req_move(h, req, HTTP_REQ_IDLE);
        if (req->in_multi)
            curl_multi_remove_handle(h->multi, req->easy);
        http_req_free(req);
    }
    if (h->multi != NULL)
        curl_multi_cleanup(h->multi);
    while (h->socks != NULL)
        http_sock_put(h, h->socks);
    while (h->spare_socks != NULL) {
        struct http_sock *sk = h->spare_socks;
        h->spare_socks = sk->next;
        event_free(sk->ev);
        rs_free(sk);
    }
    while (h->pool != NULL) {
        req = h->pool;
        h->pool = req->next;
        http_req_free(req);
    }
    if (h->timer != NULL)
        event_free(h->timer);
    if (h->kick != NULL)
        event_free(h->kick);
    rs_free(h->user_agent);
    rs_free(h);
}

/* ------------------------------------------------------------- outcomes */

/* Fix a request's outcome and queue its on_done for the loop. */
static void
http_set_done(struct rs_http *h, struct rs_http_req *req, int rc, CURLcode cc)
{
    req->rc = rc;
    req->cc = cc;
    http_req_move(h, req, HTTP_REQ_DONE);
    http_kick(h);
}

/* Our own reason to end a transfer, noted from inside a curl callback
 * (which then returns a short count); the first reason wins. */
static void
http_req_abort(struct rs_http_req *req, int rc, const char *why)
{
    if (req->why != NULL)
        return;
    req->rc = rc;
    req->why = why;
}

/* curl is about to open a socket to an address it resolved: the place to
 * apply the address policy, after DNS, so rebinding cannot dodge it. */
static curl_socket_t
http_on_opensocket(void *clientp, curlsocktype purpose,
                   struct curl_sockaddr *addr)
{
    struct rs_http_req *req = clientp;
    struct rs_http *h = req->h;
    (void)purpose;
    if (h->addr_ok != NULL && !h->addr_ok(h->addr_ud, &addr->addr)) {
        http_req_abort(req, RS_EDENIED, "address refused by the network policy");
        return CURL_SOCKET_BAD;
    }
    return socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
}

static int
http_rc_of(struct rs_http_req *req, CURLcode cc)
{
    if (req->why != NULL)
        return req->rc;
    switch (cc) {
    case CURLE_OK:
        return 0;
    case CURLE_OPERATION_TIMEDOUT:
        return RS_ETIMEDOUT;
    case CURLE_FILESIZE_EXCEEDED:
        req->why = "response body too large";
        return RS_ETOOBIG;
    case CURLE_OUT_OF_MEMORY:
        return RS_ENOMEM;
    case CURLE_TOO_MANY_REDIRECTS:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_UNSUPPORTED_PROTOCOL: /* HTTP/0.9 reply, redirect to ftp: */
    case CURLE_URL_MALFORMAT:        /* a redirect to a broken Location */
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_RANGE_ERROR:
        return RS_EPROTO;
    default:
        /* Connect, resolve, send, receive, TLS, short bodies. */
        return RS_EIO;
    }
}

/* Run one request's on_done (its rc is fixed: DONE, or PENDING/RUNNING
 * when rs_http_free ends it) and recycle it. The caller holds h. */
static void
http_finish(struct rs_http *h, struct rs_http_req *req)
{
    struct rs_http_result res;
    long status = 0, nconn = 0;
    char *eff = NULL;

    /* curl refuses removal from inside its own callbacks; those requests
     * are left in the multi and removed at destruction. */
    if (req->in_multi && !h->in_curl) {
        curl_multi_remove_handle(h->multi, req->easy);
        req->in_multi = false;
    }
    if (req->added) {
        curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(req->easy, CURLINFO_EFFECTIVE_URL, &eff);
        curl_easy_getinfo(req->easy, CURLINFO_NUM_CONNECTS, &nconn);
    }
    h->stats.connects += nconn > 0 ? (uint64_t)nconn : 0;

    memset(&res, 0, sizeof(res));
    res.rc = req->rc;
    res.status = status;
    res.effective_url = eff != NULL ? eff : req->url;
    res.content_type = rs_http_req_header(req, "content-type");
    res.elapsed_us = http_now_us() - req->start_us;
    res.body = "";
    if (req->rc == 0) {
        res.errstr = "";
        if (req->on_data == NULL && req->body_len > 0) {
            res.body = req->body;
            res.body_len = req->body_len;
        }
        h->stats.completed++;
    } else {
        if (req->rc == RS_ECANCELED)
            h->stats.canceled++;
        else
            h->stats.failed++;
        if (req->why != NULL && req->rc == RS_ETOOBIG) {
            snprintf(req->errbuf, sizeof(req->errbuf),
                     "%s: over the limit of %zu bytes", req->why,
                     req->max_body);
            res.errstr = req->errbuf;
        } else if (req->why != NULL) {
            res.errstr = req->why;
        } else if (req->errbuf[0] != '\0') {
            res.errstr = req->errbuf;
        } else {
            res.errstr = curl_easy_strerror(req->cc);
        }
    }

    http_req_move(h, req, HTTP_REQ_CALLING);
    http_hold(h);
    req->on_done(req->ud, req, &res);
    if (req->in_multi)
        http_req_move(h, req, HTTP_REQ_ZOMBIE);
    else
        http_req_put(h, req);
    http_release(h);
}

/* ------------------------------------------------- curl's data callbacks */

/* Room for need more header bytes: RS_EPROTO over the cap, RS_ENOMEM.
 * One block that doubles up to the cap, so a pooled request's buffer
 * usually has room already. */
static int
http_hdr_room(struct rs_http_req *req, size_t need)
{
    size_t cap = req->hdr_cap ? req->hdr_cap : 1024u;
    char *nb;

    if (need > HTTP_MAX_HEADER_BYTES - req->hdr_len)
        return RS_EPROTO;
    if (req->hdr_len + need <= req->hdr_cap)
        return 0;
    while (cap < req->hdr_len + need)
        cap *= 2;
    if (cap > HTTP_MAX_HEADER_BYTES)
        cap = HTTP_MAX_HEADER_BYTES;
    nb = rs_realloc(req->hdr, cap);
    if (nb == NULL)
        return RS_ENOMEM;
    req->hdr = nb;
    req->hdr_cap = cap;
    return 0;
}

static size_t
http_hdr_fail(struct rs_http_req *req, int rc)
{
    if (rc == RS_ENOMEM)
        http_req_abort(req, rc, "out of memory for response headers");
    else if (rc == RS_EPROTO)
        http_req_abort(req, rc, "response headers over 64 KiB");
    return 0;
}

/* Response header lines, one per call, for every response of the request
 * (1xx, redirects, the final one): a status line starts the collection
 * over, so only the final response's headers remain. A short count makes
 * curl end the transfer. */
static size_t
http_on_header(char *buf, size_t size, size_t nitems, void *arg)
{
    struct rs_http_req *req = arg;
    size_t total = size * nitems, len = total, nlen, vlen;
    const char *colon, *v;
    char *p;
    int rc;

    if (req->state != HTTP_REQ_RUNNING)
        return 0;                       /* canceled */
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' ||
                       buf[len - 1] == ' ' || buf[len - 1] == '\t'))
        len--;
    if (len >= 5 && memcmp(buf, "HTTP/", 5) == 0) {
        req->hdr_len = 0;
        return total;
    }
    if (len == 0)
        return total;                   /* the end of a header block */
    if (memchr(buf, '\0', len) != NULL) {
        http_req_abort(req, RS_EPROTO, "NUL byte in a response header");
        return 0;
    }
    if (buf[0] == ' ' || buf[0] == '\t') {
        /* obs-fold: the previous value goes on after one space. */
        if (req->hdr_len == 0) {
            http_req_abort(req, RS_EPROTO, "malformed response header");
            return 0;
        }
        v = buf;
        while (*v == ' ' || *v == '\t')
            v++;
        vlen = len - (size_t)(v - buf);
        rc = http_hdr_room(req, vlen + 1);
        if (rc != 0)
            return http_hdr_fail(req, rc);
        p = req->hdr + req->hdr_len - 1;   /* the value's NUL */
        *p++ = ' ';
        memcpy(p, v, vlen);
        p[vlen] = '\0';
        req->hdr_len += vlen + 1;
        return total;
    }
    colon = memchr(buf, ':', len);
    nlen = colon != NULL ? (size_t)(colon - buf) : 0;
    for (size_t i = 0; i < nlen; i++) {
        if (!http_is_tchar(buf[i]))
            nlen = 0;
    }
    if (nlen == 0) {
        http_req_abort(req, RS_EPROTO, "malformed response header");
        return 0;
    }
    v = colon + 1;
    while (v < buf + len && (*v == ' ' || *v == '\t'))
        v++;
    vlen = len - (size_t)(v - buf);
    rc = http_hdr_room(req, nlen + 1 + vlen + 1);
    if (rc != 0)
        return http_hdr_fail(req, rc);
    p = req->hdr + req->hdr_len;
    memcpy(p, buf, nlen);
    p[nlen] = '\0';
    memcpy(p + nlen + 1, v, vlen);
    p[nlen + 1 + vlen] = '\0';
    req->hdr_len += nlen + 1 + vlen + 1;
    return total;
}

static int
http_body_reserve(struct rs_http_req *req, size_t need)
{
    size_t cap = req->body_cap ? req->body_cap : HTTP_BODY_MIN;
    char *nb;

    if (need <= req->body_cap)
        return 0;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    if (cap > req->max_body + 1)
        cap = req->max_body + 1;
    if (cap < need)
        cap = need;
    nb = rs_realloc(req->body, cap);
    if (nb == NULL)
        return RS_ENOMEM;
    req->body = nb;
    req->body_cap = cap;
    return 0;
}

/* Body bytes of the final response (curl skips those of redirects it
 * follows). Returning a short count makes curl end the transfer. */
static size_t
http_on_body(char *buf, size_t size, size_t nmemb, void *arg)
{
    struct rs_http_req *req = arg;
    struct rs_http *h = req->h;
    size_t n = size * nmemb;
    int stop;

    if (req->state != HTTP_REQ_RUNNING)
        return CURL_WRITEFUNC_ERROR;    /* canceled */
    if (n == 0)
        return 0;
    if (n > req->max_body - req->body_seen) {
        http_req_abort(req, RS_ETOOBIG, "response body too large");
        return CURL_WRITEFUNC_ERROR;
    }
    req->body_seen += n;
    if (req->on_data != NULL) {
        http_hold(h);
        stop = req->on_data(req->ud, req, buf, n);
        http_release(h);
        if (req->state != HTTP_REQ_RUNNING)
            return CURL_WRITEFUNC_ERROR;   /* canceled from on_data */
        if (stop != 0) {
            http_req_abort(req, RS_ESTOPPED, "stopped by on_data");
            return CURL_WRITEFUNC_ERROR;
        }
        return n;
    }
    if (req->body_len == 0 && req->body_cap == 0) {
        /* Size the buffer once when the length is announced. */
        curl_off_t cl = -1;

        curl_easy_getinfo(req->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T,
                          &cl);
        if (cl > 0 && (uint64_t)cl <= req->max_body &&
            http_body_reserve(req, (size_t)cl + 1) != 0) {
            http_req_abort(req, RS_ENOMEM, "out of memory for the body");
            return CURL_WRITEFUNC_ERROR;
        }
    }
    if (http_body_reserve(req, req->body_len + n + 1) != 0) {
        http_req_abort(req, RS_ENOMEM, "out of memory for the body");
        return CURL_WRITEFUNC_ERROR;
    }
    memcpy(req->body + req->body_len, buf, n);
    req->body_len += n;
    req->body[req->body_len] = '\0';
    return n;
}

/* ---------------------------------------------------- the libevent seam */

/* Move every transfer curl reports finished to the done queue. */
static void
http_check_done(struct rs_http *h)
{
    for (;;) {
        int left;
        CURLMsg *m = curl_multi_info_read(h->multi, &left);
        char *p = NULL;
        struct rs_http_req *req;

        if (m == NULL)
            break;
        if (m->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &p);
        req = (struct rs_http_req *)(void *)p;
        /* A canceled request is DONE already; its late end is not news. */
        if (req == NULL || req->state != HTTP_REQ_RUNNING)
            continue;
        http_set_done(h, req, http_rc_of(req, m->data.result),
                      m->data.result);
    }
}

/* Tell curl what happened on fd (or that its timer expired), then collect
 * what finished. */
static void
http_action(struct rs_http *h, curl_socket_t fd, int ev)
{
    int running = 0;
    CURLMcode mc;

    h->in_curl = true;
    mc = curl_multi_socket_action(h->multi, fd, ev, &running);
    h->in_curl = false;
    http_check_done(h);
    if (mc == CURLM_OK)
        return;
    /* After an error the state of every transfer is unknown
     * (curl_multi_socket_action(3)): end them all. */
    while (h->running.head != NULL) {
        struct rs_http_req *req = h->running.head;
        http_req_abort(req, mc == CURLM_OUT_OF_MEMORY ? RS_ENOMEM : RS_EIO,
                       curl_multi_strerror(mc));
        http_set_done(h, req, req->rc, CURLE_OK);
    }
}

static void
http_on_sock_event(evutil_socket_t fd, short what, void *arg)
{
    struct rs_http *h = arg;
    int ev = 0;

    if (what & EV_READ)
        ev |= CURL_CSELECT_IN;
    if (what & EV_WRITE)
        ev |= CURL_CSELECT_OUT;
    http_hold(h);
    if (!h->closing)
        http_action(h, fd, ev);
    http_release(h);
}

static void
http_on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct rs_http *h = arg;

    (void)fd;
    (void)what;
    http_hold(h);
    if (!h->closing)
        http_action(h, CURL_SOCKET_TIMEOUT, 0);
    http_release(h);
}

/* A watcher for a socket curl announces: a spare one, else new. */
static struct http_sock *
http_sock_get(struct rs_http *h, curl_socket_t s, short flags)
{
    struct http_sock *sk = h->spare_socks;

    if (sk != NULL) {
        if (event_assign(sk->ev, h->base, s, flags, http_on_sock_event, h)
            != 0)
            return NULL;
        h->spare_socks = sk->next;
        h->spare_n--;
    } else {
        sk = rs_calloc(1, sizeof(*sk));
        if (sk == NULL)
            return NULL;
        sk->ev = event_new(h->base, s, flags, http_on_sock_event, h);
        if (sk->ev == NULL) {
            rs_free(sk);
            return NULL;
        }
    }
    sk->prev = NULL;
    sk->next = h->socks;
    if (h->socks != NULL)
        h->socks->prev = sk;
    h->socks = sk;
    return sk;
}

/* CURLMOPT_SOCKETFUNCTION: curl says which sockets to watch for what.
 * Returning -1 makes curl fail every transfer (http_action handles it). */
static int
http_on_curl_socket(CURL *easy, curl_socket_t s, int what, void *userp,
                    void *socketp)
{
    struct rs_http *h = userp;
    struct http_sock *sk = socketp;
    short flags = EV_PERSIST;

    (void)easy;
    if (what == CURL_POLL_REMOVE) {
        /* curl forgets socketp itself. */
        if (sk != NULL)
            http_sock_put(h, sk);
        return 0;
    }
    if (what & CURL_POLL_IN)
        flags |= EV_READ;
    if (what & CURL_POLL_OUT)
        flags |= EV_WRITE;
    if (sk == NULL) {
        sk = http_sock_get(h, s, flags);
        if (sk == NULL)
            return -1;
        if (curl_multi_assign(h->multi, s, sk) != CURLM_OK) {
            http_sock_put(h, sk);
            return -1;
        }
    } else {
        if (sk->what == what)
            return 0;
        event_del(sk->ev);
        if (event_assign(sk->ev, h->base, s, flags, http_on_sock_event, h)
            != 0)
            return -1;
    }
    sk->what = what;
    if ((flags & (EV_READ | EV_WRITE)) == 0)
        return 0;
    return event_add(sk->ev, NULL) == 0 ? 0 : -1;
}

/* CURLMOPT_TIMERFUNCTION: one timer; 0 means "as soon as possible", which
 * the loop does on its next turn rather than from inside curl. */
static int
http_on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    struct rs_http *h = userp;
    struct timeval tv;

    (void)multi;
    if (timeout_ms < 0) {
        event_del(h->timer);
        return 0;
    }
    tv.tv_sec = timeout_ms / 1000;
    tv.tv_usec = (suseconds_t)(timeout_ms % 1000) * 1000;
    return event_add(h->timer, &tv) == 0 ? 0 : -1;
}

/* Start accepted requests and run queued on_done callbacks. Bounded to
 * what was queued on entry, so a caller that keeps queueing from on_done
 * cannot starve the rest of the loop. */
static void
http_on_kick(evutil_socket_t fd, short what, void *arg)
{
    struct rs_http *h = arg;
    unsigned budget = h->done.n + h->pending.n;
    struct rs_http_req *req;
    CURLMcode mc;

    (void)fd;
    (void)what;
    http_hold(h);
    while (!h->closing && budget > 0) {
        budget--;
        req = h->done.head;
        if (req != NULL) {
            http_finish(h, req);
            continue;
        }
        req = h->pending.head;
        if (req == NULL)
            break;
        mc = curl_multi_add_handle(h->multi, req->easy);
        if (mc != CURLM_OK) {
            http_req_abort(req, mc == CURLM_OUT_OF_MEMORY ? RS_ENOMEM
                                                          : RS_EIO,
                           curl_multi_strerror(mc));
            http_set_done(h, req, req->rc, CURLE_OK);
            continue;
        }
        req->in_multi = true;
        req->added = true;
        http_req_move(h, req, HTTP_REQ_RUNNING);
    }
    if (!h->closing && (h->done.n > 0 || h->pending.n > 0))
        http_kick(h);
    http_release(h);
}

/* ------------------------------------------------------- request set-up */

static bool
http_method_ok(const char *m)
{
    size_t i;

    for (i = 0; m[i] != '\0'; i++) {
        if (i >= HTTP_MAX_METHOD || !http_is_tchar(m[i]))
            return false;
    }
    return i > 0;
}

/* "Name: value", or "Name;" (curl's way to send an empty value); no CR or
 * LF anywhere, which would let a value smuggle in more header lines. */
static bool
http_header_ok(const char *s, bool *is_expect)
{
    size_t n = 0;

    while (http_is_tchar(s[n]))
        n++;
    if (n == 0 || (s[n] != ':' && !(s[n] == ';' && s[n + 1] == '\0')))
        return false;
    if (strpbrk(s + n, "\r\n") != NULL)
        return false;
    *is_expect = n == 6 && strncasecmp(s, "expect", 6) == 0;
    return true;
}

/* Absolute http(s) URL with a host, parsed into req->curlu. curl refuses
 * an empty host, spaces and control characters, but reads "http:///x" as
 * host "x": an empty authority is refused here first. */
static int
http_url_set(struct rs_http_req *req, const char *url)
{
    size_t skip;
    CURLUcode uc;

    if (strncasecmp(url, "http://", 7) == 0)
        skip = 7;
    else if (strncasecmp(url, "https://", 8) == 0)
        skip = 8;
    else
        return RS_EINVAL;
    if (url[skip] == '\0' || strchr("/?#", url[skip]) != NULL)
        return RS_EINVAL;
    uc = curl_url_set(req->curlu, CURLUPART_URL, url, 0);
    if (uc == CURLUE_OUT_OF_MEMORY)
        return RS_ENOMEM;
    return uc == CURLUE_OK ? 0 : RS_EINVAL;
}

/*
 * Copy what curl must read during the transfer into req->store: the
 * header list (our own curl_slist nodes, so no allocation per header),
 * the URL, and the body unless borrowed. *list is NULL without headers.
 */
static int
http_store_fill(struct rs_http_req *req, const struct rs_http_req_opts *o,
                struct curl_slist **list, const void **body)
{
    static const char no_expect[] = "Expect:";
    size_t nh = 0, nodes, need, ulen = strlen(o->url) + 1, i;
    bool has_expect = false, want_expect;
    struct curl_slist *node;
    char *p;

    for (i = 0; o->headers != NULL && o->headers[i] != NULL; i++) {
        bool e;
        if (!http_header_ok(o->headers[i], &e))
            return RS_EINVAL;
        has_expect |= e;
        nh++;
    }
    /* curl asks large POSTs for "100 Continue" first, a round trip (or a
     * one-second wait) for nothing when the peer is known to take them. */
    want_expect = o->body_len > 0 && !has_expect;
    nodes = nh + (want_expect ? 1 : 0);
    need = nodes * sizeof(struct curl_slist) + ulen;
    for (i = 0; i < nh; i++)
        need += strlen(o->headers[i]) + 1;
    if (want_expect)
        need += sizeof(no_expect);
    if (!o->body_borrowed) {
        if (o->body_len > SIZE_MAX - need)
            return RS_EINVAL;
        need += o->body_len;
    }
    if (need > req->store_cap) {
        rs_free(req->store);
        req->store_cap = 0;
        req->store = rs_malloc(need);
        if (req->store == NULL)
            return RS_ENOMEM;
        req->store_cap = need;
    }
    node = (struct curl_slist *)(void *)req->store;
    p = req->store + nodes * sizeof(struct curl_slist);
    for (i = 0; i < nodes; i++) {
        const char *s = i < nh ? o->headers[i] : no_expect;
        size_t len = strlen(s) + 1;
        memcpy(p, s, len);
        node[i].data = p;
        node[i].next = i + 1 < nodes ? &node[i + 1] : NULL;
        p += len;
    }
    memcpy(p, o->url, ulen);
    req->url = p;
    p += ulen;
    *body = o->body;
    if (!o->body_borrowed && o->body_len > 0) {
        memcpy(p, o->body, o->body_len);
        *body = p;
    }
    *list = nodes > 0 ? node : NULL;
    return 0;
}

static int
http_req_setup(struct rs_http *h, struct rs_http_req *req,
               const struct rs_http_req_opts *o)
{
    const char *method = o->method ? o->method : "GET";
    bool head = strcmp(method, "HEAD") == 0;
    bool post = strcmp(method, "POST") == 0;
    bool get = strcmp(method, "GET") == 0;
    bool with_body = post || strcmp(method, "PUT") == 0 ||
                     strcmp(method, "PATCH") == 0;
    struct curl_slist *list = NULL;
    const void *body = NULL;
    CURL *e = req->easy;
    bool bad = false;
    int rc;

    if (!http_method_ok(method) || (head && o->body_len > 0))
        return RS_EINVAL;
    rc = http_url_set(req, o->url);
    if (rc != 0)
        return rc;
    rc = http_store_fill(req, o, &list, &body);
    if (rc != 0)
        return rc;

    req->on_data = o->on_data;
    req->on_done = o->on_done;
    req->ud = o->ud;
    req->max_body = o->max_body ? o->max_body : HTTP_MAX_BODY;
    req->body_seen = 0;
    req->body_len = 0;
    req->hdr_len = 0;
    req->rc = 0;
    req->cc = CURLE_OK;
    req->why = NULL;
    req->errbuf[0] = '\0';

    bad |= curl_easy_setopt(e, CURLOPT_PRIVATE, (void *)req) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_CURLU, req->curlu) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, http_protocols)
           != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, http_protocols)
           != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_USERAGENT, h->user_agent) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                            (long)h->connect_timeout_ms) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                            (long)(o->timeout_ms ? o->timeout_ms
                                                 : HTTP_TIMEOUT_MS))
           != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_HTTP_VERSION,
                            h->http2 ? (long)CURL_HTTP_VERSION_2TLS
                                     : (long)CURL_HTTP_VERSION_1_1)
           != CURLE_OK;
    if (h->http2)
        bad |= curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, req->errbuf) != CURLE_OK;
    if (h->addr_ok != NULL) {
        bad |= curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, http_on_opensocket)
               != CURLE_OK;
        bad |= curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, (void *)req) != CURLE_OK;
    }
    bad |= curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, http_on_header)
           != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_HEADERDATA, (void *)req) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, http_on_body)
           != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_WRITEDATA, (void *)req) != CURLE_OK;
    if (o->max_redirects > 0) {
        bad |= curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L) != CURLE_OK;
        bad |= curl_easy_setopt(e, CURLOPT_MAXREDIRS, (long)o->max_redirects)
               != CURLE_OK;
    }
    /* Refuses an announced Content-Length over the cap before any body
     * byte; http_on_body enforces it on what arrives. A HEAD response
     * announces a body that never comes. */
    if (!head)
        bad |= curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE,
                                (curl_off_t)req->max_body) != CURLE_OK;
    if (list != NULL)
        bad |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, list) != CURLE_OK;
    if (head) {
        bad |= curl_easy_setopt(e, CURLOPT_NOBODY, 1L) != CURLE_OK;
    } else if (with_body || o->body_len > 0) {
        /* A body goes with any method: POSTFIELDS plus, for other methods
         * than POST, the method name. POST, PUT and PATCH always carry one
         * (maybe empty), so "Content-Length: 0" is sent. */
        bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                                (curl_off_t)o->body_len) != CURLE_OK;
        bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDS,
                                body != NULL ? body : "") != CURLE_OK;
        if (!post)
            bad |= curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method)
                   != CURLE_OK;
    } else if (!get) {
        bad |= curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method)
               != CURLE_OK;
    }
    /* Every option above is valid; only copying a string can fail. */
    return bad ? RS_ENOMEM : 0;
}

/* ------------------------------------------------------------- public API */

struct rs_http *
rs_http_new(struct event_base *base, const struct rs_http_opts *o)
{
    static const struct rs_http_opts defaults;
    struct rs_http *h = NULL;
    unsigned max_conns, max_host;
    bool ok = false;

    if (base == NULL)
        goto out;
    if (o == NULL)
        o = &defaults;
    h = rs_calloc(1, sizeof(*h));
    if (h == NULL)
        goto out;
    h->base = base;
    h->addr_ok = o->addr_ok;
    h->addr_ud = o->addr_ud;
    max_conns = o->max_conns ? o->max_conns : HTTP_MAX_CONNS;
    max_host = o->max_host_conns ? o->max_host_conns : HTTP_MAX_HOST_CONNS;
    if (max_host > max_conns)
        max_host = max_conns;
    h->connect_timeout_ms = o->connect_timeout_ms ? o->connect_timeout_ms
                                                  : HTTP_CONNECT_TIMEOUT_MS;
    h->max_requests = o->max_requests ? o->max_requests : HTTP_MAX_REQUESTS;
    h->pool_max = max_conns < HTTP_POOL_MIN   ? HTTP_POOL_MIN
                  : max_conns > HTTP_POOL_MAX ? HTTP_POOL_MAX
                                              : max_conns;
    h->http2 = o->http2;
    h->user_agent = rs_strdup(o->user_agent ? o->user_agent
                                            : "rspush/" RS_VERSION);
    if (h->user_agent == NULL)
        goto out;
    h->timer = evtimer_new(base, http_on_timer, h);
    h->kick = event_new(base, -1, 0, http_on_kick, h);
    h->multi = curl_multi_init();
    if (h->timer == NULL || h->kick == NULL || h->multi == NULL)
        goto out;
    if (curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION,
                          http_on_curl_socket) != CURLM_OK ||
        curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, (void *)h)
        != CURLM_OK ||
        curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION,
                          http_on_curl_timer) != CURLM_OK ||
        curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, (void *)h)
        != CURLM_OK ||
        curl_multi_setopt(h->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
                          (long)max_conns) != CURLM_OK ||
        curl_multi_setopt(h->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
                          (long)max_host) != CURLM_OK ||
        curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS, (long)max_conns)
        != CURLM_OK ||
        curl_multi_setopt(h->multi, CURLMOPT_PIPELINING,
                          o->http2 ? (long)CURLPIPE_MULTIPLEX
                                   : (long)CURLPIPE_NOTHING) != CURLM_OK)
        goto out;
    ok = true;
out:
    if (!ok && h != NULL) {
        http_destroy(h);
        h = NULL;
    }
    return h;
}

int
rs_http_request(struct rs_http *h, const struct rs_http_req_opts *o,
                struct rs_http_req **out)
{
    struct rs_http_req *req = NULL;
    int rc;

    if (out != NULL)
        *out = NULL;
    if (h == NULL || o == NULL || o->url == NULL || o->on_done == NULL ||
        (o->body == NULL && o->body_len > 0)) {
        rc = RS_EINVAL;
        goto out;
    }
    if (h->closing) {
        rc = RS_ESTATE;
        goto out;
    }
    if (h->pending.n + h->running.n + h->done.n >= h->max_requests) {
        rc = RS_ETOOBIG;
        goto out;
    }
    req = http_req_get(h);
    if (req == NULL) {
        rc = RS_ENOMEM;
        goto out;
    }
    rc = http_req_setup(h, req, o);
    if (rc != 0)
        goto out;
    req->start_us = http_now_us();
    http_req_move(h, req, HTTP_REQ_PENDING);
    h->stats.requests++;
    http_kick(h);
    if (out != NULL)
        *out = req;
    req = NULL;
out:
    if (req != NULL)
        http_req_put(h, req);
    return rc;
}

void
rs_http_cancel(struct rs_http_req *req)
{
    if (req == NULL)
        return;
    if (req->state != HTTP_REQ_PENDING && req->state != HTTP_REQ_RUNNING)
        return;
    /* A running transfer stays in the multi until the kick removes it: curl
     * may be on the stack (cancel from on_data); its callbacks see the
     * state and stop the transfer meanwhile. */
    req->rc = RS_ECANCELED;
    req->why = "canceled";
    http_set_done(req->h, req, RS_ECANCELED, CURLE_OK);
}

const char *
rs_http_req_header(struct rs_http_req *req, const char *name)
{
    const char *p, *end, *found = NULL;

    if (req == NULL || name == NULL || req->hdr == NULL)
        return NULL;
    p = req->hdr;
    end = req->hdr + req->hdr_len;
    while (p < end) {
        size_t nlen = strlen(p);
        const char *v = p + nlen + 1;
        if (strcasecmp(p, name) == 0)
            found = v;
        p = v + strlen(v) + 1;
    }
    return found;
}

long
rs_http_req_status(struct rs_http_req *req)
{
    long status = 0;

    if (req == NULL || req->easy == NULL)
        return 0;
    curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

void
rs_http_req_headers(struct rs_http_req *req, const char *name,
                    void (*cb)(void *ud, const char *value), void *ud)
{
    const char *p, *end;

    if (req == NULL || name == NULL || cb == NULL || req->hdr == NULL)
        return;
    p = req->hdr;
    end = req->hdr + req->hdr_len;
    while (p < end) {
        size_t nlen = strlen(p);
        const char *v = p + nlen + 1;
        if (strcasecmp(p, name) == 0)
            cb(ud, v);
        p = v + strlen(v) + 1;
    }
}

void
rs_http_stats(const struct rs_http *h, struct rs_http_stats *out)
{
    if (out == NULL)
        return;
    if (h == NULL) {
        memset(out, 0, sizeof(*out));
        return;
    }
    *out = h->stats;
    out->in_flight = h->pending.n + h->running.n + h->done.n;
}

/* Outcomes already fixed (DONE) are reported as they are; everything still
 * pending or running ends with RS_ECANCELED. Callbacks may cancel other
 * requests meanwhile, so the lists are re-read after each one. */
void
rs_http_free(struct rs_http *h)
{
    struct rs_http_req *req;

    if (h == NULL || h->closing)
        return;
    h->closing = true;
    http_hold(h);
    for (;;) {
        req = h->done.head;
        if (req == NULL)
            req = h->pending.head;
        if (req == NULL)
            req = h->running.head;
        if (req == NULL)
            break;
        if (req->state != HTTP_REQ_DONE) {
            req->rc = RS_ECANCELED;
            req->why = "canceled: client closed";
            req->cc = CURLE_OK;
        }
        http_finish(h, req);
    }
    http_release(h);
}
