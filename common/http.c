/*
 * http.c - asynchronous HTTP client (rs_http.h): libcurl's multi_socket
 * interface driven by libevent (the only file where that seam lives: one
 * event per socket, one timer, one "kick" event for deferred work), the
 * request life cycle that makes on_done run exactly once, response header
 * collection, body limits, a pool of reusable easy handles, redirects
 * followed hop by hop and the credentials each origin gets. What a request
 * means is the caller's business.
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
#include "rs_time.h"

#ifndef RS_VERSION
#define RS_VERSION "0"
#endif

#define HTTP_MAX_CONNS 256u
#define HTTP_MAX_HOST_CONNS 8u
#define HTTP_CONNECT_TIMEOUT_MS 5000u
#define HTTP_MAX_REQUESTS 100000u
#define HTTP_TIMEOUT_MS 30000u
#define HTTP_MAX_BODY ((size_t)64 << 20)
/* Our cap on a request's read_size (CURLOPT_BUFFERSIZE): libcurl's own cap
 * (CURL_MAX_READ_SIZE) is 512 KiB before 7.88 and 10 MiB since. */
#define HTTP_MAX_READ_SIZE ((size_t)512 << 10)
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
/* "scheme://host:port": a 253-byte name or a bracketed IPv6 address with
 * a zone fits. */
#define HTTP_ORIGIN_MAX 320u

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

/* One origin's credentials (rs_http_cred_add); immutable once added, and
 * kept until the client is freed, so requests point at them freely. */
struct http_cred {
    char origin[HTTP_ORIGIN_MAX];   /* "scheme://host:port", lower case */
    char *realm;
    char **headers;                 /* nheaders "Name: value" strings */
    size_t nheaders;
    char *netrc_file, *client_cert, *client_key;
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
    size_t read_size;           /* CURLOPT_BUFFERSIZE; 0: libcurl's */
    size_t body_seen;           /* body bytes of the final response so far */
    unsigned paused;            /* on_data said RS_HTTP_DATA_LATER: the
                                   resume pass (h->resume_gen) that lets
                                   it go on; 0: not paused */
    uint64_t start_us;          /* monotonic, at acceptance */

    /* Request side, one block: curl_slist nodes first (aligned by the
     * allocator), then header strings, the URL and the body copy. curl
     * reads the header list and the body until the transfer ends. The
     * nodes are the caller's headers (ncaller, Expect included), then
     * ncred spare ones for the credentials of a hop's origin; each hop
     * links its own list through them (http_hop_creds). */
    char *store;
    size_t store_cap;
    const char *url;            /* in store: the URL as given */
    struct curl_slist *nodes;   /* in store */
    size_t ncaller, ncred;

    /* Redirects, followed here (rs_http.h says why). */
    unsigned max_redirects, hops;
    unsigned timeout_ms;        /* of the whole request, every hop */
    bool own_refusal;           /* a 401/403 is not told to on_refused */
    bool head, post;            /* the method of the hop under way */
    bool redirecting;           /* this hop's response is a redirect we
                                   follow: its body is dropped */
    long hop_connects;          /* connections the earlier hops opened */
    char origin0[HTTP_ORIGIN_MAX]; /* the first URL's origin ("" unknown) */
    const struct http_cred *cred;  /* this hop's origin's, or NULL */

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
    /* Paused requests (RS_HTTP_DATA_LATER) go on from here, a turn of the
     * loop later: a zero timeout, run after the events that turn found. */
    struct event *resume;
    unsigned resume_gen;        /* the next resume pass's number (>= 1) */
    char *user_agent;
    bool (*addr_ok)(void *ud, const struct sockaddr *sa);
    void *addr_ud;
    char *ca_file;
    void (*on_refused)(void *ud, const char *realm, const char *url,
                       long status);
    void *refused_ud;
    struct http_cred creds[RS_HTTP_MAX_CREDS];
    unsigned ncreds;
    size_t cred_nodes;          /* the most headers one origin has */
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
    bool in_curl;               /* inside curl_multi_socket_action() or
                                   curl_easy_pause() */
    struct rs_http_stats stats; /* in_flight is computed on demand */
};

static const char http_protocols[] = "http,https";

/* ------------------------------------------------------------- utilities */

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
http_cred_cleanup(struct http_cred *c)
{
    for (size_t i = 0; i < c->nheaders; i++) {
        explicit_bzero(c->headers[i], strlen(c->headers[i]));
        rs_free(c->headers[i]);
    }
    rs_free(c->headers);
    rs_free(c->realm);
    rs_free(c->netrc_file);
    rs_free(c->client_cert);
    rs_free(c->client_key);
    memset(c, 0, sizeof(*c));
}

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
    if (h->resume != NULL)
        event_free(h->resume);
    for (unsigned i = 0; i < h->ncreds; i++)
        http_cred_cleanup(&h->creds[i]);
    rs_free(h->ca_file);
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
    nconn += req->hop_connects;
    h->stats.connects += nconn > 0 ? (uint64_t)nconn : 0;
    if (req->rc == 0 && (status == 401 || status == 403) &&
        req->cred != NULL && h->on_refused != NULL && !req->own_refusal)
        h->on_refused(h->refused_ud, req->cred->realm,
                      eff != NULL ? eff : req->url, status);

    memset(&res, 0, sizeof(res));
    res.rc = req->rc;
    res.status = status;
    res.effective_url = eff != NULL ? eff : req->url;
    res.content_type = rs_http_req_header(req, "content-type");
    res.elapsed_us = rs_time_mono_us() - req->start_us;
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

/* A response's headers are in: is it a redirect this request follows? */
static void
http_on_headers_end(struct rs_http_req *req)
{
    long status = 0;

    if (req->max_redirects == 0)
        return;
    curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
    req->redirecting = (status == 301 || status == 302 || status == 303 ||
                        status == 307 || status == 308) &&
                       rs_http_req_header(req, "location") != NULL;
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
        req->redirecting = false;
        return total;
    }
    if (len == 0) {                     /* the end of a header block */
        http_on_headers_end(req);
        return total;
    }
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
    /* A redirect's body is read to keep the connection, and dropped:
     * nothing is held, the request's timeout bounds it. */
    if (req->redirecting)
        return n;
    if (n > req->max_body - req->body_seen) {
        http_req_abort(req, RS_ETOOBIG, "response body too large");
        return CURL_WRITEFUNC_ERROR;
    }
    if (req->on_data != NULL) {
        http_hold(h);
        stop = req->on_data(req->ud, req, buf, n);
        http_release(h);
        if (req->state != HTTP_REQ_RUNNING)
            return CURL_WRITEFUNC_ERROR;   /* canceled from on_data */
        if (stop == RS_HTTP_DATA_LATER) {
            /* libcurl keeps the piece and hands it again once resumed */
            static const struct timeval now = { 0, 0 };
            req->paused = h->resume_gen;
            evtimer_add(h->resume, &now);
            return CURL_WRITEFUNC_PAUSE;
        }
        req->body_seen += n;
        if (stop != 0) {
            http_req_abort(req, RS_ESTOPPED, "stopped by on_data");
            return CURL_WRITEFUNC_ERROR;
        }
        return n;
    }
    req->body_seen += n;
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

static int http_hop_creds(struct rs_http *h, struct rs_http_req *req,
                          bool first);

/* The hop that ended was a redirect: the next hop goes to its Location
 * as a new transfer on the same handle, with the credentials of its own
 * origin (http_hop_creds), through the pending queue. Methods change as
 * browsers and libcurl change them: 303 turns anything but HEAD into GET,
 * 301 and 302 turn POST into GET; 307 and 308 keep method and body. */
static void
http_follow(struct rs_http *h, struct rs_http_req *req)
{
    CURL *e = req->easy;
    char *loc = NULL;
    long status = 0, nconn = 0;
    uint64_t spent_ms;
    bool bad = false;
    CURLUcode uc;

    curl_multi_remove_handle(h->multi, e);
    req->in_multi = false;
    curl_easy_getinfo(e, CURLINFO_NUM_CONNECTS, &nconn);
    req->hop_connects += nconn;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(e, CURLINFO_REDIRECT_URL, &loc);
    req->redirecting = false;
    if (loc == NULL) {
        /* curl found no URL in the Location: the 3xx is the answer. */
        http_set_done(h, req, 0, CURLE_OK);
        return;
    }
    if (req->hops >= req->max_redirects) {
        snprintf(req->errbuf, sizeof(req->errbuf),
                 "Maximum (%u) redirects followed", req->max_redirects);
        http_req_abort(req, RS_EPROTO, req->errbuf);
        http_set_done(h, req, RS_EPROTO, CURLE_OK);
        return;
    }
    if (strncasecmp(loc, "http://", 7) != 0 &&
        strncasecmp(loc, "https://", 8) != 0) {
        http_req_abort(req, RS_EPROTO, "redirect to a scheme other than "
                       "http(s)");
        http_set_done(h, req, RS_EPROTO, CURLE_OK);
        return;
    }
    spent_ms = (rs_time_mono_us() - req->start_us) / 1000u;
    if (spent_ms >= req->timeout_ms) {
        http_req_abort(req, RS_ETIMEDOUT, "timed out following redirects");
        http_set_done(h, req, RS_ETIMEDOUT, CURLE_OK);
        return;
    }
    /* loc belongs to the handle: parse it before anything touches it. */
    uc = curl_url_set(req->curlu, CURLUPART_URL, loc, 0);
    if (uc != CURLUE_OK) {
        http_req_abort(req, uc == CURLUE_OUT_OF_MEMORY ? RS_ENOMEM
                       : RS_EPROTO, "redirect to a malformed URL");
        http_set_done(h, req, req->rc, CURLE_OK);
        return;
    }
    req->hops++;
    if ((status == 303 && !req->head) ||
        ((status == 301 || status == 302) && req->post)) {
        bad |= curl_easy_setopt(e, CURLOPT_HTTPGET, 1L) != CURLE_OK;
        bad |= curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, NULL) != CURLE_OK;
        req->post = false;
    }
    /* As a string: curl 7.88 keeps reporting the first URL as the
     * effective one when the same CURLU handle is set again. */
    char *next = NULL;
    if (curl_url_get(req->curlu, CURLUPART_URL, &next, 0) != CURLUE_OK)
        bad = true;
    bad |= curl_easy_setopt(e, CURLOPT_CURLU, NULL) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_URL, next) != CURLE_OK;
    curl_free(next);
    bad |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                            (long)(req->timeout_ms - spent_ms)) != CURLE_OK;
    if (bad || http_hop_creds(h, req, false) != 0) {
        http_req_abort(req, RS_ENOMEM, "out of memory following a redirect");
        http_set_done(h, req, RS_ENOMEM, CURLE_OK);
        return;
    }
    http_req_move(h, req, HTTP_REQ_PENDING);
    http_kick(h);
}

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
        if (req->redirecting && m->data.result == CURLE_OK &&
            req->why == NULL) {
            http_follow(h, req);
            continue;
        }
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

/* The loop has run once since on_data said RS_HTTP_DATA_LATER: let the
 * requests paused before this pass go on (libcurl hands the kept piece
 * again from inside curl_easy_pause). One paused again meanwhile waits for
 * the next pass. */
static void
http_on_resume(evutil_socket_t fd, short what, void *arg)
{
    struct rs_http *h = arg;
    unsigned gen = h->resume_gen++;

    (void)fd;
    (void)what;
    if (h->resume_gen == 0)
        h->resume_gen = 1;              /* 0 is "not paused" */
    http_hold(h);
    while (!h->closing) {
        struct rs_http_req *req = h->running.head;
        while (req != NULL && req->paused != gen)
            req = req->next;
        if (req == NULL)
            break;
        req->paused = 0;
        h->in_curl = true;
        CURLcode cc = curl_easy_pause(req->easy, CURLPAUSE_CONT);
        h->in_curl = false;
        if (cc != CURLE_OK && req->state == HTTP_REQ_RUNNING) {
            http_req_abort(req, RS_EIO, curl_easy_strerror(cc));
            http_set_done(h, req, req->rc, CURLE_OK);
        }
    }
    http_check_done(h);
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
 * the URL, and the body unless borrowed.
 */
static int
http_store_fill(struct rs_http_req *req, const struct rs_http_req_opts *o,
                const void **body)
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
    nodes = nh + (want_expect ? 1 : 0) + req->h->cred_nodes;
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
    req->nodes = node;
    req->ncaller = nh + (want_expect ? 1 : 0);
    req->ncred = req->h->cred_nodes;
    for (i = 0; i < req->ncaller; i++) {
        const char *s = i < nh ? o->headers[i] : no_expect;
        size_t len = strlen(s) + 1;
        memcpy(p, s, len);
        node[i].data = p;
        node[i].next = NULL;
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
    return 0;
}

/* The origin of the URL in u, "scheme://host:port" in lower case with the
 * port spelled out, so that http://H/ and http://h:80/ are one. */
static int
http_origin_of(CURLU *u, char *out, size_t outsz)
{
    char *scheme = NULL, *host = NULL, *port = NULL;
    int rc = RS_EINVAL, n;

    out[0] = '\0';
    if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT)
        == CURLUE_OK) {
        n = snprintf(out, outsz, "%s://%s:%s", scheme, host, port);
        if (n > 0 && (size_t)n < outsz) {
            for (char *c = out; *c != '\0'; c++)
                if (*c >= 'A' && *c <= 'Z')
                    *c = (char)(*c - 'A' + 'a');
            rc = 0;
        } else {
            out[0] = '\0';
        }
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    return rc;
}

static const struct http_cred *
http_cred_find(const struct rs_http *h, const char *origin)
{
    for (unsigned i = 0; i < h->ncreds && origin[0] != '\0'; i++)
        if (strcmp(h->creds[i].origin, origin) == 0)
            return &h->creds[i];
    return NULL;
}

/* Headers that carry a credential of the caller's own: they go no
 * further than the first URL's origin (libcurl's rule for them). */
static bool
http_header_secret(const char *s)
{
    static const char *const names[] = { "authorization", "cookie",
                                         "proxy-authorization" };
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(names[i]);
        if (strncasecmp(s, names[i], n) == 0 && (s[n] == ':' || s[n] == ';'))
            return true;
    }
    return false;
}

static size_t
http_header_name_len(const char *s)
{
    size_t n = 0;

    while (s[n] != '\0' && s[n] != ':' && s[n] != ';')
        n++;
    return n;
}

/* Does one of the caller's headers have the name of h (a credential's)? */
static bool
http_caller_has(const struct rs_http_req *req, const char *hdr)
{
    size_t n = http_header_name_len(hdr);

    for (size_t i = 0; i < req->ncaller; i++) {
        const char *d = req->nodes[i].data;
        if (http_header_name_len(d) == n && strncasecmp(d, hdr, n) == 0)
            return true;
    }
    return false;
}

/*
 * What this hop's origin gets, set on the handle for the transfer about to
 * start: the caller's headers (its secret ones only on the first URL's
 * origin), then the origin's credential headers the caller did not give
 * itself, its netrc and its client certificate; another origin gets none
 * of them (curl's own netrc and certificate options are per handle, not
 * per host, so they are set afresh on every hop).
 */
static int
http_hop_creds(struct rs_http *h, struct rs_http_req *req, bool first)
{
    char origin[HTTP_ORIGIN_MAX];
    struct curl_slist *head = NULL, **tail = &head;
    const struct http_cred *cr = NULL;
    bool foreign = false, bad = false;
    CURL *e = req->easy;
    size_t k = 0;

    if (h->ncreds > 0 || req->max_redirects > 0) {
        if (http_origin_of(req->curlu, origin, sizeof(origin)) != 0)
            origin[0] = '\0';
        if (first)
            memcpy(req->origin0, origin, sizeof(origin));
        else
            foreign = origin[0] == '\0' || strcmp(origin, req->origin0) != 0;
        cr = http_cred_find(h, origin);
    }
    req->cred = cr;
    for (size_t i = 0; i < req->ncaller; i++) {
        struct curl_slist *n = &req->nodes[i];
        if (foreign && http_header_secret(n->data))
            continue;
        *tail = n;
        tail = &n->next;
    }
    for (size_t j = 0; cr != NULL && j < cr->nheaders && k < req->ncred; j++) {
        struct curl_slist *n = &req->nodes[req->ncaller + k];
        if (http_caller_has(req, cr->headers[j]))
            continue;
        n->data = cr->headers[j];
        *tail = n;
        tail = &n->next;
        k++;
    }
    *tail = NULL;
    bad |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, head) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_NETRC,
                            cr != NULL && cr->netrc_file != NULL
                            ? (long)CURL_NETRC_OPTIONAL
                            : (long)CURL_NETRC_IGNORED) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_NETRC_FILE,
                            cr != NULL ? cr->netrc_file : NULL) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_SSLCERT,
                            cr != NULL ? cr->client_cert : NULL) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_SSLKEY,
                            cr != NULL ? cr->client_key : NULL) != CURLE_OK;
    return bad ? RS_ENOMEM : 0;
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
    const void *body = NULL;
    CURL *e = req->easy;
    bool bad = false;
    int rc;

    if (!http_method_ok(method) || (head && o->body_len > 0))
        return RS_EINVAL;
    rc = http_url_set(req, o->url);
    if (rc != 0)
        return rc;
    rc = http_store_fill(req, o, &body);
    if (rc != 0)
        return rc;

    req->on_data = o->on_data;
    req->on_done = o->on_done;
    req->ud = o->ud;
    req->max_body = o->max_body ? o->max_body : HTTP_MAX_BODY;
    req->read_size = o->read_size < HTTP_MAX_READ_SIZE ? o->read_size
                                                       : HTTP_MAX_READ_SIZE;
    req->body_seen = 0;
    req->paused = 0;
    req->body_len = 0;
    req->hdr_len = 0;
    req->rc = 0;
    req->cc = CURLE_OK;
    req->why = NULL;
    req->errbuf[0] = '\0';
    req->max_redirects = o->max_redirects;
    req->own_refusal = o->own_refusal;
    req->hops = 0;
    req->timeout_ms = o->timeout_ms ? o->timeout_ms : HTTP_TIMEOUT_MS;
    req->head = head;
    req->post = post;
    req->redirecting = false;
    req->hop_connects = 0;
    req->origin0[0] = '\0';
    req->cred = NULL;

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
    bad |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)req->timeout_ms)
           != CURLE_OK;
    if (h->ca_file != NULL)
        bad |= curl_easy_setopt(e, CURLOPT_CAINFO, h->ca_file) != CURLE_OK;
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
    if (req->read_size > 0)
        bad |= curl_easy_setopt(e, CURLOPT_BUFFERSIZE, (long)req->read_size)
               != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING,
                            o->accept_encoding ? "" : NULL) != CURLE_OK;
    /* No CURLOPT_FOLLOWLOCATION: http_follow takes each hop. */
    /* Refuses an announced Content-Length over the cap before any body
     * byte; http_on_body enforces it on what arrives. A HEAD response
     * announces a body that never comes. */
    if (!head)
        bad |= curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE,
                                (curl_off_t)req->max_body) != CURLE_OK;
    if (!bad && http_hop_creds(h, req, true) != 0)
        bad = true;
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
    h->on_refused = o->on_refused;
    h->refused_ud = o->refused_ud;
    if (o->ca_file != NULL && (h->ca_file = rs_strdup(o->ca_file)) == NULL)
        goto out;
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
    h->resume = evtimer_new(base, http_on_resume, h);
    h->resume_gen = 1;
    h->multi = curl_multi_init();
    if (h->timer == NULL || h->kick == NULL || h->resume == NULL ||
        h->multi == NULL)
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

static char *
http_strdup_or_null(const char *s, bool *bad)
{
    char *d;

    if (s == NULL)
        return NULL;
    d = rs_strdup(s);
    if (d == NULL)
        *bad = true;
    return d;
}

int
rs_http_cred_add(struct rs_http *h, const struct rs_http_cred *c)
{
    struct http_cred *cr;
    CURLU *u;
    size_t n = 0;
    bool bad = false, e;
    int rc;

    if (h == NULL || c == NULL || c->origin == NULL)
        return RS_EINVAL;
    if (h->ncreds >= RS_HTTP_MAX_CREDS)
        return RS_EINVAL;
    for (n = 0; c->headers != NULL && c->headers[n] != NULL; n++) {
        if (n >= RS_HTTP_MAX_CRED_HEADERS || !http_header_ok(c->headers[n], &e))
            return RS_EINVAL;
    }
    cr = &h->creds[h->ncreds];
    memset(cr, 0, sizeof(*cr));
    if ((u = curl_url()) == NULL)
        return RS_ENOMEM;
    if (strncasecmp(c->origin, "http://", 7) != 0 &&
        strncasecmp(c->origin, "https://", 8) != 0)
        rc = RS_EINVAL;
    else if (curl_url_set(u, CURLUPART_URL, c->origin, 0) != CURLUE_OK)
        rc = RS_EINVAL;
    else
        rc = http_origin_of(u, cr->origin, sizeof(cr->origin));
    curl_url_cleanup(u);
    if (rc != 0)
        return rc;
    if (http_cred_find(h, cr->origin) != NULL) {
        cr->origin[0] = '\0';
        return RS_ESTATE;
    }
    if (n > 0 && (cr->headers = rs_calloc(n, sizeof(char *))) == NULL)
        return RS_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        cr->headers[i] = http_strdup_or_null(c->headers[i], &bad);
        cr->nheaders += cr->headers[i] != NULL;
    }
    cr->realm = http_strdup_or_null(c->realm != NULL ? c->realm : "", &bad);
    cr->netrc_file = http_strdup_or_null(c->netrc_file, &bad);
    cr->client_cert = http_strdup_or_null(c->client_cert, &bad);
    cr->client_key = http_strdup_or_null(c->client_key, &bad);
    if (bad) {
        http_cred_cleanup(cr);
        return RS_ENOMEM;
    }
    h->ncreds++;
    if (cr->nheaders > h->cred_nodes)
        h->cred_nodes = cr->nheaders;
    return 0;
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
    req->start_us = rs_time_mono_us();
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
    /* Finished, its on_done not run yet (the kick runs it): the caller
     * has been told nothing, and after a cancel it must be told
     * RS_ECANCELED (a dump ended meanwhile takes any other rc for a
     * package it still waits for). */
    if (req->state == HTTP_REQ_DONE) {
        req->rc = RS_ECANCELED;
        req->why = "canceled";
        return;
    }
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
