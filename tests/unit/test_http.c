/* test_http.c - the asynchronous HTTP client (rs_http.h) against real
 * peers on 127.0.0.1 running on the same event_base: an evhttp server
 * programmed per path (bodies, delays, redirects, Link headers, a handler
 * that never answers) and a raw TCP listener for what evhttp will not send
 * (garbage, bodies cut short, oversized or malformed headers). Every
 * on_done is counted; every test ends with nothing left on the loop. */
#include "testutil.h"
#include "tu_httpd.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rs_alloc.h"
#include "rs_http.h"

#define WATCHDOG_MS 20000u
#define CONN_MAX 256
#define BIG_5MB (5u * 1024u * 1024u)

struct fixture;

/* A reply the evhttp peer sends later (/delay). */
struct delayed {
    struct delayed *next;
    struct event *ev;
    struct evhttp_request *req;
    struct srv *s;
};

/* The evhttp peer and what it saw. */
struct srv {
    struct evhttp *http;
    int port;
    unsigned hits;                  /* requests received */
    struct evhttp_connection *conns[CONN_MAX]; /* open, having sent one */
    unsigned nconns, max_conns, total_conns;
    struct delayed *delayed;
    /* the last request's details */
    enum evhttp_cmd_type method;
    char *body;                     /* malloc'ed copy */
    size_t body_len;
    char token[64], ua[64], ctype[64];
    char auth[128], cookie[64], custom[64];
    bool expect_seen;
};

/* One request as the test sees it. */
struct call {
    struct fixture *f;
    struct rs_http_req *req;
    unsigned n_done;
    int rc;
    long status;
    char errstr[256];
    char url[512];
    char ctype[64];
    char body[16384];               /* copy of result.body (truncated) */
    size_t body_len;
    uint64_t elapsed_us;
    /* on_data */
    unsigned n_data;
    size_t data_bytes;
    bool data_pattern_ok;
    int stop_at;                    /* return 1 at this piece (1-based) */
    /* RS_HTTP_DATA_LATER at every later_every-th piece, later_repeat times
     * (when it comes again, and again): a zero timer (later_ev) then
     * records what had come when the loop turned, and does later_action
     * (1 cancel, 2 rs_http_free) */
    unsigned later_every, later_repeat, later_refused, n_later;
    bool later_wait;                /* a piece left, the timer not run */
    struct event *later_ev;
    int later_action;
    size_t bytes_at_timer;
    bool cancel_in_data;
    bool free_in_data;              /* rs_http_free from on_data */
    size_t data_max;                /* the largest piece */
    char data_clen[32];             /* Content-Length seen from on_data */
    /* headers captured in on_done */
    const char *want;               /* header to look up */
    char got[256];
    bool got_null;
    unsigned nlinks;
    char links[4][128];
    /* on_done actions */
    struct rs_http_req_opts *next;  /* chain: issue this from on_done */
    unsigned chain_left;
    bool free_in_done;              /* rs_http_free from on_done */
    bool request_if_canceled;       /* try rs_http_request when canceled */
    int rc_request;                 /* what that returned */
    struct call *cancel_other;      /* rs_http_cancel its request */
};

struct fixture {
    struct tu_loop loop;
    struct srv srv;
    struct tu_raw *raw;             /* or NULL */
    struct rs_http *h;
    unsigned n_done;                /* on_done, all requests */
    unsigned n_canceled;
    char url[512];
};

/* ---------------------------------------------------------------- helpers */

static uint64_t
now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static unsigned long
query_num(const char *q, const char *key, unsigned long dflt)
{
    size_t klen = strlen(key);
    const char *p = q;

    while (p != NULL && *p != '\0') {
        if (strncmp(p, key, klen) == 0 && p[klen] == '=')
            return strtoul(p + klen + 1, NULL, 10);
        p = strchr(p, '&');
        if (p != NULL)
            p++;
    }
    return dflt;
}

static char
pattern_byte(size_t i)
{
    return (char)('a' + i % 23);
}

/* ------------------------------------------------------------ evhttp peer */

static void
srv_conn_closed(struct evhttp_connection *evcon, void *arg)
{
    struct srv *s = arg;
    unsigned i;

    for (i = 0; i < s->nconns; i++) {
        if (s->conns[i] == evcon) {
            s->conns[i] = s->conns[--s->nconns];
            return;
        }
    }
}

/* Counts connections that send requests, and how many are open at once. */
static void
srv_track(struct srv *s, struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    unsigned i;

    for (i = 0; i < s->nconns; i++) {
        if (s->conns[i] == evcon)
            return;
    }
    assert_true(s->nconns < CONN_MAX);
    s->conns[s->nconns++] = evcon;
    s->total_conns++;
    if (s->nconns > s->max_conns)
        s->max_conns = s->nconns;
    evhttp_connection_set_closecb(evcon, srv_conn_closed, s);
}

static void
srv_reply(struct evhttp_request *req, int code, const char *reason,
          const void *body, size_t len)
{
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    if (len > 0)
        evbuffer_add(b, body, len);
    evhttp_send_reply(req, code, reason, b);
    evbuffer_free(b);
}

static void
srv_on_delay(evutil_socket_t fd, short what, void *arg)
{
    struct delayed *d = arg, **pp;
    struct srv *s = d->s;
    (void)fd;
    (void)what;
    for (pp = &s->delayed; *pp != d; pp = &(*pp)->next)
        ;
    *pp = d->next;
    srv_reply(d->req, 200, "OK", "late", 4);
    event_free(d->ev);
    free(d);
}

static void
srv_big(struct evhttp_request *req, size_t n, bool chunked)
{
    char *buf = malloc(n ? n : 1);
    size_t i;

    assert_non_null(buf);
    for (i = 0; i < n; i++)
        buf[i] = pattern_byte(i);
    if (!chunked) {
        srv_reply(req, 200, "OK", buf, n);
    } else {
        evhttp_send_reply_start(req, 200, "OK");
        for (i = 0; i < n; i += 4096) {
            struct evbuffer *b = evbuffer_new();
            evbuffer_add(b, buf + i, n - i < 4096 ? n - i : 4096);
            evhttp_send_reply_chunk(req, b);
            evbuffer_free(b);
        }
        evhttp_send_reply_end(req);
    }
    free(buf);
}

static void
srv_on_request(struct evhttp_request *req, void *arg)
{
    struct srv *s = arg;
    const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
    const char *path = evhttp_uri_get_path(u);
    const char *q = evhttp_uri_get_query(u);
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    struct evbuffer *ib = evhttp_request_get_input_buffer(req);
    const char *v;
    char loc[128];
    unsigned long n;

    srv_track(s, req);
    s->hits++;
    s->method = evhttp_request_get_command(req);
    free(s->body);
    s->body_len = evbuffer_get_length(ib);
    s->body = malloc(s->body_len + 1);
    assert_non_null(s->body);
    evbuffer_remove(ib, s->body, s->body_len);
    v = evhttp_find_header(in, "X-Token");
    snprintf(s->token, sizeof(s->token), "%s", v ? v : "");
    v = evhttp_find_header(in, "User-Agent");
    snprintf(s->ua, sizeof(s->ua), "%s", v ? v : "");
    v = evhttp_find_header(in, "Content-Type");
    snprintf(s->ctype, sizeof(s->ctype), "%s", v ? v : "");
    s->expect_seen = evhttp_find_header(in, "Expect") != NULL;
    v = evhttp_find_header(in, "Authorization");
    snprintf(s->auth, sizeof(s->auth), "%s", v ? v : "");
    v = evhttp_find_header(in, "Cookie");
    snprintf(s->cookie, sizeof(s->cookie), "%s", v ? v : "");
    v = evhttp_find_header(in, "X-Custom");
    snprintf(s->custom, sizeof(s->custom), "%s", v ? v : "");

    if (path == NULL)
        path = "/";
    if (strcmp(path, "/hello") == 0) {
        evhttp_add_header(out, "Content-Type", "text/plain");
        srv_reply(req, 200, "OK", "hello world", 11);
    } else if (strcmp(path, "/echo") == 0) {
        evhttp_add_header(out, "X-Got-Token", s->token);
        srv_reply(req, 201, "Created", s->body, s->body_len);
    } else if (strcmp(path, "/big") == 0) {
        n = query_num(q, "n", 0);
        if (s->method == EVHTTP_REQ_HEAD) {
            char cl[32];
            snprintf(cl, sizeof(cl), "%lu", n);
            evhttp_add_header(out, "Content-Length", cl);
            srv_reply(req, 200, "OK", NULL, 0);
        } else {
            srv_big(req, n, false);
        }
    } else if (strcmp(path, "/chunked") == 0) {
        srv_big(req, query_num(q, "n", 0), true);
    } else if (strcmp(path, "/delay") == 0) {
        struct delayed *d = calloc(1, sizeof(*d));
        unsigned long ms = query_num(q, "ms", 10);
        struct timeval tv = { (time_t)(ms / 1000),
                              (suseconds_t)(ms % 1000) * 1000 };
        assert_non_null(d);
        d->s = s;
        d->req = req;
        d->ev = evtimer_new(evhttp_connection_get_base(
                                evhttp_request_get_connection(req)),
                            srv_on_delay, d);
        assert_non_null(d->ev);
        d->next = s->delayed;
        s->delayed = d;
        evtimer_add(d->ev, &tv);
    } else if (strcmp(path, "/never") == 0) {
        /* evhttp frees the request with its connection. */
    } else if (strcmp(path, "/redir") == 0) {
        n = query_num(q, "n", 0);
        if (n == 0) {
            srv_reply(req, 200, "OK", "landed", 6);
        } else {
            snprintf(loc, sizeof(loc), "/redir?n=%lu", n - 1);
            evhttp_add_header(out, "Location", loc);
            evhttp_add_header(out, "X-Hop", "yes");
            evhttp_add_header(out, "Link", "<http://hop/>; rel=\"hop\"");
            srv_reply(req, 302, "Found", "moved", 5);
        }
    } else if (strcmp(path, "/away") == 0) {
        /* to port's /hello (another origin), with status code */
        snprintf(loc, sizeof(loc), "http://127.0.0.1:%lu%s",
                 query_num(q, "port", 1),
                 query_num(q, "echo", 0) ? "/echo" : "/hello");
        evhttp_add_header(out, "Location", loc);
        srv_reply(req, (int)query_num(q, "code", 302), "Moved", "moved", 5);
    } else if (strcmp(path, "/loop") == 0) {
        evhttp_add_header(out, "Location", "/loop");
        srv_reply(req, 302, "Found", NULL, 0);
    } else if (strcmp(path, "/links") == 0) {
        evhttp_add_header(out, "Link", "<http://a/>; rel=\"one\"");
        evhttp_add_header(out, "Link", "<http://b/>; rel=\"two\"");
        evhttp_add_header(out, "X-Other", "x");
        evhttp_add_header(out, "link", "<http://c/>; rel=\"three\"");
        srv_reply(req, 200, "OK", "links", 5);
    } else if (strcmp(path, "/status") == 0) {
        n = query_num(q, "code", 500);
        srv_reply(req, (int)n, "Status", "status", 6);
    } else {
        srv_reply(req, 404, "Not Found", "nope", 4);
    }
}

static void
srv_start(struct fixture *f)
{
    struct srv *s = &f->srv;

    s->http = evhttp_new(f->loop.base);
    assert_non_null(s->http);
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST |
                                            EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_DELETE);
    evhttp_set_gencb(s->http, srv_on_request, s);
    s->port = tu_httpd_listen(s->http);
}

static void
srv_stop(struct srv *s)
{
    while (s->delayed != NULL) {
        struct delayed *d = s->delayed;
        s->delayed = d->next;
        event_free(d->ev);
        free(d);
    }
    if (s->http != NULL)
        evhttp_free(s->http);
    s->http = NULL;
    free(s->body);
    s->body = NULL;
}

static const char *
url_of(struct fixture *f, const char *path)
{
    snprintf(f->url, sizeof(f->url), "http://127.0.0.1:%d%s", f->srv.port,
             path);
    return f->url;
}

/* --------------------------------------------------------------- raw peer */

/* A raw peer answering reply; f->url is its /raw. */
static void
raw_start(struct fixture *f, const char *reply, size_t len)
{
    f->raw = tu_raw_new(f->loop.base, reply, len);
    snprintf(f->url, sizeof(f->url), "http://127.0.0.1:%d/raw", f->raw->port);
}

static void
raw_stop(struct fixture *f)
{
    tu_raw_free(f->raw);
    f->raw = NULL;
}

/* ------------------------------------------------------------ the client */

static void
on_link(void *ud, const char *value)
{
    struct call *c = ud;
    if (c->nlinks < 4)
        snprintf(c->links[c->nlinks], sizeof(c->links[0]), "%s", value);
    c->nlinks++;
}

static void
on_done(void *ud, struct rs_http_req *req, const struct rs_http_result *res)
{
    struct call *c = ud;
    struct fixture *f = c->f;
    const char *v;

    c->n_done++;
    f->n_done++;
    if (res->rc == RS_ECANCELED)
        f->n_canceled++;
    if (c->req != NULL)
        assert_ptr_equal(req, c->req);
    c->rc = res->rc;
    c->status = res->status;
    assert_non_null(res->errstr);
    assert_true((res->rc == 0) == (res->errstr[0] == '\0'));
    snprintf(c->errstr, sizeof(c->errstr), "%s", res->errstr);
    snprintf(c->url, sizeof(c->url), "%s",
             res->effective_url ? res->effective_url : "");
    snprintf(c->ctype, sizeof(c->ctype), "%s",
             res->content_type ? res->content_type : "(null)");
    assert_non_null(res->body);
    c->body_len = res->body_len;
    c->body[0] = '\0';
    if (res->body != NULL) {
        assert_int_equal(res->body[res->body_len], '\0');
        memcpy(c->body, res->body,
               res->body_len < sizeof(c->body) ? res->body_len + 1
                                               : sizeof(c->body));
    }
    c->elapsed_us = res->elapsed_us;
    if (c->want != NULL) {
        v = rs_http_req_header(req, c->want);
        c->got_null = v == NULL;
        snprintf(c->got, sizeof(c->got), "%s", v ? v : "");
        rs_http_req_headers(req, "Link", on_link, c);
    }
    if (c->request_if_canceled && res->rc == RS_ECANCELED &&
        f->h != NULL) {
        /* rs_http_free is running: refused, so no on_done to expect. */
        struct rs_http_req_opts o;
        memset(&o, 0, sizeof(o));
        o.url = "http://127.0.0.1:1/";
        o.on_done = on_done;
        o.ud = c;
        c->rc_request = rs_http_request(f->h, &o, NULL);
    }
    if (c->cancel_other != NULL && c->cancel_other->n_done == 0)
        rs_http_cancel(c->cancel_other->req);
    if (c->free_in_done) {
        rs_http_free(f->h);
        f->h = NULL;
    }
    if (c->next != NULL && c->chain_left > 0) {
        c->chain_left--;
        c->req = NULL;
        assert_int_equal(rs_http_request(f->h, c->next, &c->req), 0);
    }
}

static int
on_data(void *ud, struct rs_http_req *req, const char *buf, size_t len)
{
    struct call *c = ud;
    size_t i;
    const char *cl;

    if (c->n_data == 0) {
        c->data_pattern_ok = true;
        cl = rs_http_req_header(req, "Content-Length");
        snprintf(c->data_clen, sizeof(c->data_clen), "%s", cl ? cl : "");
    }
    assert_int_equal(c->n_done, 0);
    if (c->later_wait)
        fail_msg("a piece left for later came again before the loop ran");
    if (c->later_every != 0 && (c->n_data + 1) % c->later_every == 0 &&
        c->later_refused < c->later_repeat) {
        static const struct timeval now = { 0, 0 };
        c->n_later++;
        c->later_refused++;
        c->later_wait = true;
        evtimer_add(c->later_ev, &now);
        return RS_HTTP_DATA_LATER;
    }
    c->later_refused = 0;
    c->n_data++;
    if (len > c->data_max)
        c->data_max = len;
    for (i = 0; i < len; i++) {
        if (buf[i] != pattern_byte(c->data_bytes + i)) {
            c->data_pattern_ok = false;
            break;
        }
    }
    c->data_bytes += len;
    if (c->free_in_data) {
        rs_http_free(c->f->h);
        c->f->h = NULL;
        return 0;
    }
    if (c->cancel_in_data) {
        rs_http_cancel(req);
        rs_http_cancel(req);            /* twice is harmless */
        return 0;
    }
    return c->stop_at != 0 && c->n_data == (unsigned)c->stop_at;
}

static struct rs_http_req_opts
req_opts(struct call *c, struct fixture *f, const char *url)
{
    struct rs_http_req_opts o;

    memset(&o, 0, sizeof(o));
    memset(c, 0, sizeof(*c));
    c->f = f;
    o.url = url;
    o.on_done = on_done;
    o.ud = c;
    return o;
}

static void
client_new(struct fixture *f, const struct rs_http_opts *o)
{
    f->h = rs_http_new(f->loop.base, o);
    assert_non_null(f->h);
}

/* Start a request: accepted, and on_done did not run inside the call. */
static void
start(struct fixture *f, struct call *c, const struct rs_http_req_opts *o)
{
    unsigned before = f->n_done;
    assert_int_equal(rs_http_request(f->h, o, &c->req), 0);
    assert_non_null(c->req);
    assert_int_equal(f->n_done, before);
}

/* One request to completion. */
static void
run_one(struct fixture *f, struct call *c, const struct rs_http_req_opts *o)
{
    start(f, c, o);
    TU_LOOP_UNTIL(&f->loop, c->n_done == 1, WATCHDOG_MS);
}

static void
client_free_and_check(struct fixture *f)
{
    rs_http_free(f->h);
    f->h = NULL;
}

/* ------------------------------------------------------ setup / teardown */

static int
setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    tu_loop_init(&f->loop);
    srv_start(f);
    *state = f;
    return 0;
}

/* The client goes first (its cancellations still find the fixture), then
 * the peers; after that the loop must hold nothing at all. */
static int
teardown(void **state)
{
    struct fixture *f = *state;

    rs_http_free(f->h);
    srv_stop(&f->srv);
    raw_stop(f);
    tu_loop_cleanup(&f->loop);
    free(f);
    return 0;
}

/* After rs_http_free and the peers' shutdown, nothing is on the loop. */
static void
assert_client_gone(struct fixture *f)
{
    srv_stop(&f->srv);
    raw_stop(f);
    /* anything of ours would still be there now (sockets, timer), or would
     * have run on freed memory (the kick), which ASan reports */
    tu_loop_settle(&f->loop);
    assert_int_equal(event_base_get_num_events(f->loop.base,
                                               EVENT_BASE_COUNT_ADDED), 0);
}

/* ------------------------------------------------------------------ tests */

/* rs_http_free(NULL), rs_http_cancel(NULL) and rs_http_stats(NULL) are
 * harmless; a fresh client reports zeros and leaves nothing behind. */
static void
test_null_and_empty(void **state)
{
    struct fixture *f = *state;
    struct rs_http_stats st;

    rs_http_free(NULL);
    rs_http_cancel(NULL);
    memset(&st, 0xff, sizeof(st));
    rs_http_stats(NULL, &st);
    assert_int_equal(st.requests, 0);
    assert_int_equal(st.in_flight, 0);
    assert_null(rs_http_new(NULL, NULL));
    client_new(f, NULL);
    rs_http_stats(f->h, &st);
    assert_int_equal(st.requests + st.completed + st.connects, 0);
    assert_null(rs_http_req_header(NULL, "x"));
    client_free_and_check(f);
    assert_client_gone(f);
}

/* A GET is buffered whole and NUL-terminated, with status, content type,
 * effective URL and timing; on_done runs once, never inside the call. */
static void
test_get_buffered(void **state)
{
    struct fixture *f = *state;
    struct call c;
    struct rs_http_req_opts o;
    struct rs_http_stats st;
    char want[512];

    client_new(f, NULL);
    o = req_opts(&c, f, url_of(f, "/hello"));
    snprintf(want, sizeof(want), "%s", f->url);
    c.want = "content-TYPE";
    run_one(f, &c, &o);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.status, 200);
    assert_int_equal(c.body_len, 11);
    assert_string_equal(c.body, "hello world");
    assert_string_equal(c.ctype, "text/plain");
    assert_string_equal(c.got, "text/plain");
    assert_string_equal(c.url, want);
    assert_string_equal(c.errstr, "");
    assert_true(c.elapsed_us > 0);
    assert_int_equal(f->srv.method, EVHTTP_REQ_GET);
    assert_true(strncmp(f->srv.ua, "rspush/", 7) == 0);
    tu_loop_run_for(&f->loop, 50);
    assert_int_equal(c.n_done, 1);
    rs_http_stats(f->h, &st);
    assert_int_equal(st.requests, 1);
    assert_int_equal(st.completed, 1);
    assert_int_equal(st.failed + st.canceled, 0);
    assert_int_equal(st.connects, 1);
    assert_int_equal(st.in_flight, 0);
    client_free_and_check(f);
    assert_client_gone(f);
}

/* POST sends the body byte for byte (NULs included) and the caller's
 * headers; the body is copied unless borrowed; no "Expect: 100-continue";
 * non-2xx statuses are responses (rc 0). */
static void
test_post_body_and_headers(void **state)
{
    struct fixture *f = *state;
    struct call c;
    struct rs_http_req_opts o;
    static const char *const hdrs[] = { "X-Token: s3cret",
                                        "Content-Type: application/json",
                                        NULL };
    char body[4096];
    size_t i;

    for (i = 0; i < sizeof(body); i++)
        body[i] = (char)(i % 7 == 0 ? 0 : 'A' + i % 26);
    client_new(f, &(struct rs_http_opts){ .user_agent = "test-agent/1" });
    o = req_opts(&c, f, url_of(f, "/echo"));
    o.method = "POST";
    o.headers = hdrs;
    o.body = body;
    o.body_len = sizeof(body);
    c.want = "X-Got-Token";
    start(f, &c, &o);
    body[1] = '#';                      /* copied: the change is not sent */
    TU_LOOP_UNTIL(&f->loop, c.n_done == 1, WATCHDOG_MS);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.status, 201);
    assert_int_equal(f->srv.method, EVHTTP_REQ_POST);
    assert_int_equal(f->srv.body_len, sizeof(body));
    body[1] = 'B';
    assert_memory_equal(f->srv.body, body, sizeof(body));
    assert_string_equal(f->srv.token, "s3cret");
    assert_string_equal(f->srv.ctype, "application/json");
    assert_string_equal(f->srv.ua, "test-agent/1");
    assert_false(f->srv.expect_seen);
    assert_string_equal(c.got, "s3cret");
    assert_int_equal(c.body_len, sizeof(body));
    assert_memory_equal(c.body, body, sizeof(body));

    /* Borrowed, with PUT. */
    o = req_opts(&c, f, url_of(f, "/echo"));
    o.method = "PUT";
    o.body = "borrowed";
    o.body_len = 8;
    o.body_borrowed = true;
    run_one(f, &c, &o);
    assert_int_equal(c.rc, 0);
    assert_int_equal(f->srv.method, EVHTTP_REQ_PUT);
    assert_int_equal(f->srv.body_len, 8);
    assert_memory_equal(f->srv.body, "borrowed", 8);

    /* An empty POST and a DELETE. */
    o = req_opts(&c, f, url_of(f, "/echo"));
    o.method = "POST";
    run_one(f, &c, &o);
    assert_int_equal(c.rc, 0);
    assert_int_equal(f->srv.method, EVHTTP_REQ_POST);
    assert_int_equal(f->srv.body_len, 0);
    o = req_opts(&c, f, url_of(f, "/status?code=503"));
    o.method = "DELETE";
    run_one(f, &c, &o);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.status, 503);
    assert_int_equal(f->srv.method, EVHTTP_REQ_DELETE);
    client_free_and_check(f);
    assert_client_gone(f);
}

/* HEAD returns headers only, and an announced length over max_body does
 * not fail it (no body comes). */
static void
test_head(void **state)
{
    struct fixture *f = *state;
    struct call c;
    struct rs_http_req_opts o;

    client_new(f, NULL);
    o = req_opts(&c, f, url_of(f, "/big?n=100000"));
    o.method = "HEAD";
    o.max_body = 10;
    c.want = "Content-Length";
    run_one(f, &c, &o);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.status, 200);
    assert_int_equal(c.body_len, 0);
    assert_string_equal(c.body, "");
    assert_string_equal(c.got, "100000");
    assert_int_equal(f->srv.method, EVHTTP_REQ_HEAD);
    client_free_and_check(f);
    assert_client_gone(f);
}

/* A 5 MB body streams to on_data in many pieces, in order, with headers
 * readable from on_data, and nothing is buffered. */
static void
test_stream_5mb(void **state)
{
    struct fixture *f = *state;
    struct call c;
    struct rs_http_req_opts o;
    char path[64];

    client_new(f, NULL);
    snprintf(path, sizeof(path), "/big?n=%u", BIG_5MB);
    o = req_opts(&c, f, url_of(f, path));
    o.on_data = on_data;
    run_one(f, &c, &o);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.status, 200);
    assert_int_equal(c.data_bytes, BIG_5MB);
    assert_true(c.n_data > 10);
    assert_true(c.data_pattern_ok);
    assert_string_equal(c.data_clen, "5242880");
    assert_int_equal(c.body_len, 0);
    assert_true(c.data_max <= 16384);       /* libcurl's own read size */
    client_free_and_check(f);
    assert_client_gone(f);
}

/* A server on its own thread that answers one GET with the pattern body
 * of n bytes in writes as large as the socket takes: unlike the loop's
 * evhttp (16 KiB a write, interleaved with the client's reads), the
 * bytes pile up in the connection for the client to read in large
 * reads. */
struct bulk_srv {
    int lfd;
    unsigned port;
    size_t n;
    pthread_t th;
};

static void *
bulk_main(void *arg)
{
    struct bulk_srv *b = arg;
    char req[4096], *body = malloc(b->n);
    size_t got = 0, off = 0;
    int fd = accept(b->lfd, NULL, NULL);

    assert_non_null(body);
    for (size_t i = 0; i < b->n; i++)
        body[i] = pattern_byte(i);
    while (fd >= 0 && got < sizeof(req) - 1) {
        ssize_t r = read(fd, req + got, sizeof(req) - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
        req[got] = '\0';
        if (strstr(req, "\r\n\r\n") != NULL)
            break;
    }
    char head[128];
    int hl = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: "
                      "%zu\r\nConnection: close\r\n\r\n", b->n);
    if (fd >= 0 && write(fd, head, (size_t)hl) == hl)
        while (off < b->n) {
            ssize_t w = write(fd, body + off, b->n - off);
            if (w <= 0)
                break;
            off += (size_t)w;
        }
    if (fd >= 0)
        close(fd);
    free(body);
    return NULL;
}

static void
bulk_start(struct bulk_srv *b, size_t n)
{
    struct sockaddr_in sa = { .sin_family = AF_INET };
    socklen_t sl = sizeof(sa);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    b->n = n;
    b->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(b->lfd >= 0);
    assert_int_equal(bind(b->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(b->lfd, 1), 0);
    assert_int_equal(getsockname(b->lfd, (struct sockaddr *)&sa, &sl), 0);
    b->port = ntohs(sa.sin_port);
    assert_int_equal(pthread_create(&b->th, NULL, bulk_main, b), 0);
}

static void
bulk_stop(struct bulk_srv *b)
{
    pthread_join(b->th, NULL);
    close(b->lfd);
}

/* read_size: a body read from the connection that many bytes at a time
 * comes whole and in order (on_data still gets libcurl's pieces of at
 * most 16 KiB); one over 512 KiB is taken as 512 KiB, not refused
 * (libcurl would refuse one over 10 MiB). */
static void
test_stream_read_size(void **state)
{
    struct fixture *f = *state;
    const size_t sizes[] = { 512 * 1024, 64u << 20 };
    const size_t n = 16u << 20;
    char url[64];

    client_new(f, NULL);
    for (size_t i = 0; i < 2; i++) {
        struct bulk_srv b;
        struct call c;
        bulk_start(&b, n);
        snprintf(url, sizeof(url), "http://127.0.0.1:%u/bulk", b.port);
        struct rs_http_req_opts o = req_opts(&c, f, url);
        o.on_data = on_data;
        o.read_size = sizes[i];
        o.max_body = n;
        run_one(f, &c, &o);
        bulk_stop(&b);
        assert_int_equal(c.rc, 0);
        assert_int_equal(c.data_bytes, n);
        assert_true(c.data_pattern_ok);
        assert_true(c.data_max <= 16384);
    }
    client_free_and_check(f);
    assert_client_gone(f);
}

static void
on_later_timer(evutil_socket_t fd, short what, void *arg)
{
    struct call *c = arg;

    (void)fd;
    (void)what;
    c->later_wait = false;
    c->bytes_at_timer = c->data_bytes;
    if (c->later_action == 1) {
        rs_http_cancel(c->req);
    } else if (c->later_action == 2) {
        rs_http_free(c->f->h);
        c->f->h = NULL;
    }
}

/* RS_HTTP_DATA_LATER: a piece left for later comes again only after the
 * loop has run what was ready (here a zero timer set from on_data), and
 * the body still arrives whole and in order, from a server whose bytes
 * pile up in the connection (where libcurl would otherwise read on in one
 * turn of the loop); a piece left again when it comes again (from inside
 * libcurl's resume) waits for one more turn. Cancelled, or the client
 * freed, while a piece waits: on_done says RS_ECANCELED and no piece
 * comes again. */
static void
test_data_later(void **state)
{
    struct fixture *f = *state;
    const size_t n = 8u << 20;
    char url[64];

    client_new(f, NULL);
    for (int action = -1; action <= 2; action++) {
        struct bulk_srv b;
        struct call c;
        bulk_start(&b, n);
        snprintf(url, sizeof(url), "http://127.0.0.1:%u/bulk", b.port);
        if (f->h == NULL)
            client_new(f, NULL);
        struct rs_http_req_opts o = req_opts(&c, f, url);
        o.on_data = on_data;
        o.read_size = 512 * 1024;
        o.max_body = n;
        c.later_every = action <= 0 ? 7 : 40;
        c.later_repeat = action < 0 ? 2 : 1;
        c.later_action = action < 0 ? 0 : action;
        c.later_ev = evtimer_new(f->loop.base, on_later_timer, &c);
        assert_non_null(c.later_ev);
        run_one(f, &c, &o);
        if (action <= 0) {
            assert_int_equal(c.rc, 0);
            assert_int_equal(c.data_bytes, n);
            assert_true(c.data_pattern_ok);
            assert_int_equal(c.n_later, c.n_data / 7 * c.later_repeat);
            assert_true(c.n_later > 10);
        } else {
            assert_int_equal(c.rc, RS_ECANCELED);
            assert_int_equal(c.n_later, 1);
            assert_int_equal(c.data_bytes, c.bytes_at_timer);
            assert_true(c.data_bytes < n);
            assert_true(c.data_pattern_ok);
        }
        assert_false(c.later_wait);
        tu_loop_run_for(&f->loop, 30);
        assert_int_equal(c.n_done, 1);
        event_free(c.later_ev);
        bulk_stop(&b);
    }
    client_free_and_check(f);
    assert_client_gone(f);
}

/* on_data returning non-zero stops the transfer: RS_ESTOPPED, no further
 * pieces. */
static void
test_on_data_stop(void **state)
{
    struct fixture *f = *state;
    struct call c;
    struct rs_http_req_opts o;
    char path[64];

    client_new(f, NULL);
    snprintf(path, sizeof(path), "/big?n=%u", BIG_5MB);
    o = req_opts(&c, f, url_of(f, path));
    o.on_data = on_data;
    c.stop_at = 2;
    run_one(f, &c, &o);
    assert_int_equal(c.rc, RS_ESTOPPED);
    assert_int_equal(c.n_data, 2);
    assert_non_null(strstr(c.errstr, "on_data"));
    tu_loop_run_for(&f->loop, 50);
    assert_int_equal(c.n_data, 2);
    assert_int_equal(c.n_done, 1);
    client_free_and_check(f);
    assert_client_gone(f);
}

/* max_body: a Content-Length over it fails before any byte (buffered or
 * streamed); a chunked body fails as soon as it passes it; exactly
 * max_body is fine. */
static void
test_max_body(void **state)
{
    struct fixture *f = *state;
    struct call c;
    struct rs_http_req_opts o;

    client_new(f, NULL);
    o = req_opts(&c, f, url_of(f, "/big?n=100000"));
    o.max_body = 10000;
    run_one(f, &c, &o);
    assert_int_equal(c.rc, RS_ETOOBIG);
    assert_non_null(strstr(c.errstr, "10000"));
    assert_int_equal(c.body_len, 0);

    o = req_opts(&c, f, url_of(f, "/big?n=100000"));
    o.max_body = 10000;
    o.on_data = on_data;
    run_one(f, &c, &o);
    assert_int_equal(c.rc, RS_ETOOBIG);
    assert_int_equal(c.n_data, 0);

    o = req_opts(&c, f, url_of(f, "/chunked?n=100000"));
    o.max_body = 10000;
    run_one(f, &c, &o);
    assert_int_equal(c.rc, RS_ETOOBIG);

    o = req_opts(&c, f, url_of(f, "/chunked?n=100000"));
    o.max_body = 10000;
    o.on_data = on_data;
    run_one(f, &c, &o);
    assert_int_equal(c.rc, RS_ETOOBIG);
    assert_true(c.data_bytes <= 10000);

    o = req_opts(&c, f, url_of(f, "/chunked?n=10000"));
    o.max_body = 10000;
    run_one(f, &c, &o);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.body_len, 10000);
    assert_int_equal(c.body[9999], pattern_byte(9999));

    o = req_opts(&c, f, url_of(f, "/big?n=10000"));
    o.max_body = 10000;
    run_one(f, &c, &o);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.body_len, 10000);
    client_free_and_check(f);
    assert_client_gone(f);
}

/* A handler that never answers: RS_ETIMEDOUT after timeout_ms. */
static void
test_timeout(void **state)
{
    struct fixture *f = *state;
    struct call c;
    struct rs_http_req_opts o;

    client_new(f, NULL);
    o = req_opts(&c, f, url_of(f, "/never"));
    o.timeout_ms = 200;
    run_one(f, &c, &o);
    assert_int_equal(c.rc, RS_ETIMEDOUT);
    assert_true(c.elapsed_us >= 190000);
    assert_true(c.elapsed_us < 5000000);
    assert_int_equal(f->srv.hits, 1);
    client_free_and_check(f);
    assert_client_gone(f);
}

/* Nobody listening: RS_EIO with curl's reason. */
static void
test_connection_refused(void **state)
{
    struct fixture *f = *state;
    struct call c;
    struct rs_http_req_opts o;
    char url[128];
    int port;
    int fd = tu_loopback_socket(0, &port);   /* bound, not listening */

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port);
    client_new(f, NULL);
    o = req_opts(&c, f, url);
    run_one(f, &c, &o);
    close(fd);
    assert_int_equal(c.rc, RS_EIO);
    assert_int_equal(c.status, 0);
    assert_true(strlen(c.errstr) > 0);
    client_free_and_check(f);
    assert_client_gone(f);
}

/* Redirects are followed up to max_redirects and only the final
 * response's headers and body remain; one more hop is RS_EPROTO; a loop
 * is RS_EPROTO; max_redirects 0 returns the 302 itself. */
static void
test_redirects(void **state)
{
    struct fixture *f = *state;
    struct call c;
    struct rs_http_req_opts o;

    client_new(f, NULL);
    o = req_opts(&c, f, url_of(f, "/redir?n=3"));
    o.max_redirects = 3;
    c.want = "X-Hop";
    run_one(f, &c, &o);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.status, 200);
    assert_string_equal(c.body, "landed");
    assert_true(c.got_null);
    assert_int_equal(c.nlinks, 0);
    assert_non_null(strstr(c.url, "/redir?n=0"));
    assert_int_equal(f->srv.hits, 4);

    o = req_opts(&c, f, url_of(f, "/redir?n=3"));
    o.max_redirects = 2;
    run_one(f, &c, &o);
    assert_int_equal(c.rc, RS_EPROTO);

    o = req_opts(&c, f, url_of(f, "/loop"));
    o.max_redirects = 5;
    run_one(f, &c, &o);
    assert_int_equal(c.rc, RS_EPROTO);

    o = req_opts(&c, f, url_of(f, "/redir?n=1"));
    c.want = "Location";
    run_one(f, &c, &o);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.status, 302);
    assert_string_equal(c.got, "/redir?n=0");
    assert_string_equal(c.body, "moved");
    assert_int_equal(c.nlinks, 1);
    client_free_and_check(f);
    assert_client_gone(f);
}

/* A second evhttp peer: another origin (same address, another port). */
struct srv2_fixture {
    struct srv s;
    char away[256];
};

static void
away_url(struct fixture *f, struct srv2_fixture *o, const char *q)
{
    snprintf(o->away, sizeof(o->away), "http://127.0.0.1:%d/away?port=%d%s",
             f->srv.port, o->s.port, q);
}

static void
srv2_start(struct fixture *f, struct srv2_fixture *o)
{
    memset(o, 0, sizeof(*o));
    o->s.http = evhttp_new(f->loop.base);
    assert_non_null(o->s.http);
    evhttp_set_allowed_methods(o->s.http, EVHTTP_REQ_GET | EVHTTP_REQ_POST);
    evhttp_set_gencb(o->s.http, srv_on_request, &o->s);
    o->s.port = tu_httpd_listen(o->s.http);
}

/* http/cred_origin_only: an origin's credential headers reach it, its
 * redirect to another origin carries none of them, nor the caller's own
 * Authorization and Cookie, while the caller's other headers go on (as
 * libcurl does); a redirect back to the first origin gets them again; a
 * header the caller gives itself wins over the credential's. (With
 * libcurl following, X-Custom of a credential would reach the other
 * origin: fails that way.) */
static void
test_cred_origin_only(void **state)
{
    struct fixture *f = *state;
    struct srv2_fixture o2;
    struct call c;
    struct rs_http_req_opts o;
    const char *const cred_h[] = { "Authorization: Bearer SECRET",
                                   "X-Custom: from-cred", NULL };
    const char *const own_h[] = { "Cookie: c=1", "X-Token: t1", NULL };
    const char *const own_auth[] = { "Authorization: Bearer MINE", NULL };
    char origin[64];

    srv2_start(f, &o2);
    client_new(f, NULL);
    snprintf(origin, sizeof(origin), "http://127.0.0.1:%d/", f->srv.port);
    struct rs_http_cred cr = { .origin = origin, .realm = "source",
                               .headers = cred_h };
    assert_int_equal(rs_http_cred_add(f->h, &cr), 0);

    o = req_opts(&c, f, url_of(f, "/hello"));
    o.headers = own_h;
    run_one(f, &c, &o);
    assert_int_equal(c.status, 200);
    assert_string_equal(f->srv.auth, "Bearer SECRET");
    assert_string_equal(f->srv.custom, "from-cred");
    assert_string_equal(f->srv.cookie, "c=1");

    for (int code = 301; code <= 308; code++) {
        if (code > 303 && code < 307)
            continue;
        char q[32];
        snprintf(q, sizeof(q), "&code=%d", code);
        away_url(f, &o2, q);
        o = req_opts(&c, f, o2.away);
        o.headers = own_h;
        o.max_redirects = 3;
        run_one(f, &c, &o);
        assert_int_equal(c.rc, 0);
        assert_int_equal(c.status, 200);
        assert_string_equal(c.body, "hello world");
        assert_string_equal(f->srv.auth, "Bearer SECRET");
        assert_string_equal(o2.s.auth, "");
        assert_string_equal(o2.s.custom, "");
        assert_string_equal(o2.s.cookie, "");
        assert_string_equal(o2.s.token, "t1");
    }
    /* and back: the second server redirects to the first */
    char back[256];
    snprintf(back, sizeof(back), "http://127.0.0.1:%d/away?port=%d",
             o2.s.port, f->srv.port);
    o = req_opts(&c, f, back);
    o.max_redirects = 3;
    run_one(f, &c, &o);
    assert_int_equal(c.status, 200);
    assert_string_equal(o2.s.auth, "");
    assert_string_equal(f->srv.auth, "Bearer SECRET");

    o = req_opts(&c, f, url_of(f, "/hello"));
    o.headers = own_auth;
    run_one(f, &c, &o);
    assert_string_equal(f->srv.auth, "Bearer MINE");
    assert_string_equal(f->srv.custom, "from-cred");
    client_free_and_check(f);
    srv_stop(&o2.s);
    assert_client_gone(f);
}

static unsigned refused_n;
static long refused_status;
static char refused_realm[32], refused_url[256];

static void
on_refused(void *ud, const char *realm, const char *url, long status)
{
    (void)ud;
    refused_n++;
    refused_status = status;
    snprintf(refused_realm, sizeof(refused_realm), "%s", realm);
    snprintf(refused_url, sizeof(refused_url), "%s", url);
}

/* http/cred_refused: a 401 or 403 from an origin with credentials (empty
 * ones too) is told with its realm and URL before on_done; one from
 * another origin, or any other status, is not. */
static void
test_cred_refused(void **state)
{
    struct fixture *f = *state;
    struct srv2_fixture o2;
    struct call c;
    struct rs_http_req_opts o;
    struct rs_http_opts ho = { .on_refused = on_refused };
    char origin[64], url2[128];

    refused_n = 0;
    srv2_start(f, &o2);
    client_new(f, &ho);
    snprintf(origin, sizeof(origin), "http://127.0.0.1:%d", f->srv.port);
    struct rs_http_cred cr = { .origin = origin, .realm = "source" };
    assert_int_equal(rs_http_cred_add(f->h, &cr), 0);
    o = req_opts(&c, f, url_of(f, "/status?code=401"));
    run_one(f, &c, &o);
    assert_int_equal(c.status, 401);
    assert_int_equal(refused_n, 1);
    assert_int_equal(refused_status, 401);
    assert_string_equal(refused_realm, "source");
    assert_non_null(strstr(refused_url, "/status?code=401"));
    o = req_opts(&c, f, url_of(f, "/status?code=403"));
    run_one(f, &c, &o);
    assert_int_equal(refused_n, 2);
    assert_int_equal(refused_status, 403);
    o = req_opts(&c, f, url_of(f, "/status?code=404"));
    run_one(f, &c, &o);
    assert_int_equal(refused_n, 2);
    snprintf(url2, sizeof(url2), "http://127.0.0.1:%d/status?code=401",
             o2.s.port);
    o = req_opts(&c, f, url2);
    run_one(f, &c, &o);
    assert_int_equal(c.status, 401);
    assert_int_equal(refused_n, 2);
    client_free_and_check(f);
    srv_stop(&o2.s);
    assert_client_gone(f);
}

/* http/cred_add_errors: not an http(s) URL, a header with CR/LF or no
 * name, a second entry for one origin (spelled otherwise: the default
 * port, upper case) are refused; the first entry stays. */
static void
test_cred_add_errors(void **state)
{
    struct fixture *f = *state;
    const char *const bad1[] = { "X-A: b\r\nHost: evil", NULL };
    const char *const bad2[] = { ": nameless", NULL };
    struct rs_http_cred cr = { .origin = "ftp://x/" };

    client_new(f, NULL);
    assert_int_equal(rs_http_cred_add(f->h, &cr), RS_EINVAL);
    assert_int_equal(rs_http_cred_add(f->h, NULL), RS_EINVAL);
    cr.origin = "http://example.org/a";
    cr.headers = bad1;
    assert_int_equal(rs_http_cred_add(f->h, &cr), RS_EINVAL);
    cr.headers = bad2;
    assert_int_equal(rs_http_cred_add(f->h, &cr), RS_EINVAL);
    cr.headers = NULL;
    assert_int_equal(rs_http_cred_add(f->h, &cr), 0);
    cr.origin = "HTTP://Example.ORG:80/other";
    assert_int_equal(rs_http_cred_add(f->h, &cr), RS_ESTATE);
    cr.origin = "https://example.org/";
    assert_int_equal(rs_http_cred_add(f->h, &cr), 0);
    client_free_and_check(f);
    assert_client_gone(f);
}

/* http/redirect_methods: a POST redirected by 303 (and 302) becomes a GET
 * without a body; by 307 it stays a POST with its body. */
static void
test_redirect_methods(void **state)
{
    struct fixture *f = *state;
    struct srv2_fixture o2;
    struct call c;
    struct rs_http_req_opts o;

    srv2_start(f, &o2);
    client_new(f, NULL);
    away_url(f, &o2, "&code=303&echo=1");
    o = req_opts(&c, f, o2.away);
    o.method = "POST";
    o.body = "payload";
    o.body_len = 7;
    o.max_redirects = 2;
    run_one(f, &c, &o);
    assert_int_equal(c.status, 201);
    assert_int_equal(o2.s.method, EVHTTP_REQ_GET);
    assert_int_equal(o2.s.body_len, 0);
    away_url(f, &o2, "&code=307&echo=1");
    o = req_opts(&c, f, o2.away);
    o.method = "POST";
    o.body = "payload";
    o.body_len = 7;
    o.max_redirects = 2;
    run_one(f, &c, &o);
    assert_int_equal(c.status, 201);
    assert_int_equal(o2.s.method, EVHTTP_REQ_POST);
    assert_int_equal(o2.s.body_len, 7);
    assert_memory_equal(o2.s.body, "payload", 7);
    client_free_and_check(f);
    srv_stop(&o2.s);
    assert_client_gone(f);
}

/* Repeated Link headers come back in order through rs_http_req_headers,
 * names compared without case; rs_http_req_header gives the last. */
static void
test_repeated_link_headers(void **state)
{
    struct fixture *f = *state;
    struct call c;
    struct rs_http_req_opts o;

    client_new(f, NULL);
    o = req_opts(&c, f, url_of(f, "/links"));
    c.want = "LINK";
    run_one(f, &c, &o);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.nlinks, 3);
    assert_string_equal(c.links[0], "<http://a/>; rel=\"one\"");
    assert_string_equal(c.links[1], "<http://b/>; rel=\"two\"");
    assert_string_equal(c.links[2], "<http://c/>; rel=\"three\"");
    assert_string_equal(c.got, "<http://c/>; rel=\"three\"");
    client_free_and_check(f);
    assert_client_gone(f);
}

/* 1,000 requests one after another (each issued from the previous
 * on_done) reuse one kept-alive connection. */
static void
test_keepalive_1000_sequential(void **state)
{
    struct fixture *f = *state;
    struct call c;
    struct rs_http_req_opts o;
    struct rs_http_stats st;

    client_new(f, NULL);
    o = req_opts(&c, f, url_of(f, "/hello"));
    c.next = &o;
    c.chain_left = 999;
    start(f, &c, &o);
    TU_LOOP_UNTIL(&f->loop, c.n_done == 1000, WATCHDOG_MS * 3);
    assert_int_equal(c.rc, 0);
    assert_int_equal(f->srv.hits, 1000);
    rs_http_stats(f->h, &st);
    assert_int_equal(st.requests, 1000);
    assert_int_equal(st.completed, 1000);
    assert_true(st.connects >= 1 && st.connects <= 2);
    assert_true(f->srv.total_conns <= 2);
    client_free_and_check(f);
    assert_client_gone(f);
}

/* 50 requests in flight to one host open at most max_host_conns
 * connections (the server counts them), and all complete. */
static void
test_host_conn_cap(void **state)
{
    struct fixture *f = *state;
    struct call c[50];
    struct rs_http_req_opts o;
    struct rs_http_stats st;
    unsigned i;

    client_new(f, &(struct rs_http_opts){ .max_host_conns = 4 });
    for (i = 0; i < 50; i++) {
        o = req_opts(&c[i], f, url_of(f, "/delay?ms=20"));
        start(f, &c[i], &o);
    }
    rs_http_stats(f->h, &st);
    assert_int_equal(st.in_flight, 50);
    TU_LOOP_UNTIL(&f->loop, f->n_done == 50, WATCHDOG_MS);
    for (i = 0; i < 50; i++) {
        assert_int_equal(c[i].n_done, 1);
        assert_int_equal(c[i].rc, 0);
        assert_string_equal(c[i].body, "late");
    }
    assert_true(f->srv.max_conns >= 1);
    assert_true(f->srv.max_conns <= 4);
    rs_http_stats(f->h, &st);
    assert_true(st.connects <= 4);
    assert_int_equal(st.in_flight, 0);
    client_free_and_check(f);
    assert_client_gone(f);
}

/* Cancel before the request starts: one on_done with RS_ECANCELED, from
 * the loop, and the server never hears of it. */
static void
test_cancel_before_start(void **state)
{
    struct fixture *f = *state;
    struct call c;
    struct rs_http_req_opts o;
    struct rs_http_stats st;

    client_new(f, NULL);
    o = req_opts(&c, f, url_of(f, "/hello"));
    start(f, &c, &o);
    rs_http_cancel(c.req);
    assert_int_equal(c.n_done, 0);
    TU_LOOP_UNTIL(&f->loop, c.n_done == 1, WATCHDOG_MS);
    assert_int_equal(c.rc, RS_ECANCELED);
    assert_int_equal(c.status, 0);
    assert_string_equal(c.url, url_of(f, "/hello"));
    tu_loop_run_for(&f->loop, 50);
    assert_int_equal(c.n_done, 1);
    assert_int_equal(f->srv.hits, 0);
    rs_http_stats(f->h, &st);
    assert_int_equal(st.canceled, 1);

    /* The pooled request serves the next one. */
    o = req_opts(&c, f, url_of(f, "/hello"));
    run_one(f, &c, &o);
    assert_int_equal(c.rc, 0);
    client_free_and_check(f);
    assert_client_gone(f);
}

/* Cancel while the server holds the request: one on_done with
 * RS_ECANCELED, and nothing more later. */
static void
test_cancel_during_transfer(void **state)
{
    struct fixture *f = *state;
    struct call c;
    struct rs_http_req_opts o;

    client_new(f, NULL);
    o = req_opts(&c, f, url_of(f, "/never"));
    start(f, &c, &o);
    TU_LOOP_UNTIL(&f->loop, f->srv.hits == 1, WATCHDOG_MS);
    rs_http_cancel(c.req);
    rs_http_cancel(c.req);
    assert_int_equal(c.n_done, 0);
    TU_LOOP_UNTIL(&f->loop, c.n_done == 1, WATCHDOG_MS);
    assert_int_equal(c.rc, RS_ECANCELED);
    tu_loop_run_for(&f->loop, 100);
    assert_int_equal(c.n_done, 1);
    client_free_and_check(f);
    assert_client_gone(f);
}

/* Two requests, each cancelling the other from its on_done: the second
 * one's on_done says RS_ECANCELED, also when its transfer had finished
 * and only its on_done was still to run (both answers arrive in one turn
 * of the loop; before the fix it then said 0, and a dump that had ended
 * took it for its package). */
static void
test_cancel_finished_not_told(void **state)
{
    struct fixture *f = *state;
    struct call a, b;
    struct rs_http_req_opts oa, ob;

    client_new(f, NULL);
    for (int i = 0; i < 200; i++) {
        oa = req_opts(&a, f, url_of(f, "/hello"));
        ob = req_opts(&b, f, url_of(f, "/hello"));
        a.cancel_other = &b;
        b.cancel_other = &a;
        start(f, &a, &oa);
        start(f, &b, &ob);
        TU_LOOP_UNTIL(&f->loop, a.n_done == 1 && b.n_done == 1,
                      WATCHDOG_MS);
        /* one finished first and cancelled the other */
        assert_true((a.rc == 0 && b.rc == RS_ECANCELED) ||
                    (b.rc == 0 && a.rc == RS_ECANCELED));
    }
    client_free_and_check(f);
    assert_client_gone(f);
}

/* Cancel from inside on_data: no further pieces, one on_done with
 * RS_ECANCELED. */
static void
test_cancel_from_on_data(void **state)
{
    struct fixture *f = *state;
    struct call c;
    struct rs_http_req_opts o;
    char path[64];

    client_new(f, NULL);
    snprintf(path, sizeof(path), "/big?n=%u", BIG_5MB);
    o = req_opts(&c, f, url_of(f, path));
    o.on_data = on_data;
    c.cancel_in_data = true;
    run_one(f, &c, &o);
    assert_int_equal(c.rc, RS_ECANCELED);
    assert_int_equal(c.n_data, 1);
    tu_loop_run_for(&f->loop, 100);
    assert_int_equal(c.n_done, 1);
    assert_int_equal(c.n_data, 1);
    client_free_and_check(f);
    assert_client_gone(f);
}

/* rs_http_free with 100 requests in flight (some on connections, some
 * queued for one) runs 100 on_done with RS_ECANCELED before it returns,
 * and leaves nothing on the loop. */
static void
test_free_cancels_100(void **state)
{
    struct fixture *f = *state;
    struct call *c = calloc(100, sizeof(*c));
    struct rs_http_req_opts o;
    unsigned i;

    assert_non_null(c);
    client_new(f, &(struct rs_http_opts){ .max_host_conns = 10 });
    for (i = 0; i < 100; i++) {
        o = req_opts(&c[i], f, url_of(f, "/never"));
        c[i].request_if_canceled = true;
        start(f, &c[i], &o);
    }
    TU_LOOP_UNTIL(&f->loop, f->srv.hits == 10, WATCHDOG_MS);
    assert_int_equal(f->n_done, 0);
    rs_http_free(f->h);
    f->h = NULL;
    assert_int_equal(f->n_done, 100);
    assert_int_equal(f->n_canceled, 100);
    for (i = 0; i < 100; i++) {
        assert_int_equal(c[i].n_done, 1);
        assert_int_equal(c[i].rc, RS_ECANCELED);
        assert_int_equal(c[i].rc_request, RS_ESTATE);
    }
    free(c);
    assert_client_gone(f);
}

/* rs_http_free from inside an on_done: every other request still gets
 * exactly one on_done (RS_ECANCELED), further requests are refused, and
 * the object goes away once the callback returns. */
static void
test_free_from_on_done(void **state)
{
    struct fixture *f = *state;
    struct call c[10];
    struct rs_http_req_opts o;
    unsigned i;

    client_new(f, NULL);
    o = req_opts(&c[0], f, url_of(f, "/hello"));
    c[0].free_in_done = true;
    start(f, &c[0], &o);
    for (i = 1; i < 10; i++) {
        o = req_opts(&c[i], f, url_of(f, "/never"));
        c[i].request_if_canceled = true;
        start(f, &c[i], &o);
    }
    TU_LOOP_UNTIL(&f->loop, f->n_done == 10, WATCHDOG_MS);
    assert_null(f->h);
    assert_int_equal(c[0].rc, 0);
    for (i = 1; i < 10; i++) {
        assert_int_equal(c[i].n_done, 1);
        assert_int_equal(c[i].rc, RS_ECANCELED);
        assert_int_equal(c[i].rc_request, RS_ESTATE);
    }
    tu_loop_run_for(&f->loop, 50);
    assert_int_equal(f->n_done, 10);
    assert_client_gone(f);
}

/* rs_http_free from inside on_data (which the header rules out, but a
 * shutdown path may take): every request, the streaming one included,
 * gets exactly one on_done with RS_ECANCELED, on_data stops, and the
 * object goes away once curl is off the stack. */
static void
test_free_from_on_data(void **state)
{
    struct fixture *f = *state;
    struct call c[3];
    struct rs_http_req_opts o;
    char path[64];
    unsigned i;

    client_new(f, NULL);
    snprintf(path, sizeof(path), "/big?n=%u", BIG_5MB);
    o = req_opts(&c[0], f, url_of(f, path));
    o.on_data = on_data;
    c[0].free_in_data = true;
    start(f, &c[0], &o);
    for (i = 1; i < 3; i++) {
        o = req_opts(&c[i], f, url_of(f, "/never"));
        start(f, &c[i], &o);
    }
    TU_LOOP_UNTIL(&f->loop, f->n_done == 3, WATCHDOG_MS);
    assert_null(f->h);
    for (i = 0; i < 3; i++) {
        assert_int_equal(c[i].n_done, 1);
        assert_int_equal(c[i].rc, RS_ECANCELED);
    }
    assert_int_equal(c[0].n_data, 1);
    tu_loop_run_for(&f->loop, 50);
    assert_int_equal(f->n_done, 3);
    assert_int_equal(c[0].n_data, 1);
    assert_client_gone(f);
}

/* opts.http2 asks for HTTP/2 over TLS only: plain http:// still works
 * (HTTP/1.1) and connections are still reused. */
static void
test_http2_option_plain_http(void **state)
{
    struct fixture *f = *state;
    struct call c;
    struct rs_http_req_opts o;
    struct rs_http_stats st;
    unsigned i;

    client_new(f, &(struct rs_http_opts){ .http2 = true });
    for (i = 0; i < 3; i++) {
        o = req_opts(&c, f, url_of(f, "/hello"));
        run_one(f, &c, &o);
        assert_int_equal(c.rc, 0);
        assert_string_equal(c.body, "hello world");
    }
    rs_http_stats(f->h, &st);
    assert_int_equal(st.connects, 1);
    client_free_and_check(f);
    assert_client_gone(f);
}

/* Bad URLs, schemes, methods, headers and arguments are RS_EINVAL, and
 * their on_done never runs. */
static void
test_bad_requests(void **state)
{
    struct fixture *f = *state;
    static const char *const bad_urls[] = {
        "", "not a url", "ftp://127.0.0.1/x", "file:///etc/passwd",
        "http://", "http:///path", "127.0.0.1/x", "http://exa mple.com/",
        "http://127.0.0.1/\r\nX: y", "gopher://127.0.0.1/", "https:///x",
        "http:/127.0.0.1/", "http://:80/", "http://user@/x", "http://?x",
    };
    static const char *const inject[] = { "X-A: b\r\nX-C: d", NULL };
    static const char *const noname[] = { ": value", NULL };
    static const char *const nocolon[] = { "X-A value", NULL };
    struct call c;
    struct rs_http_req_opts o;
    struct rs_http_stats st;
    struct rs_http_req *req;
    unsigned i;

    client_new(f, NULL);
    for (i = 0; i < sizeof(bad_urls) / sizeof(bad_urls[0]); i++) {
        o = req_opts(&c, f, bad_urls[i]);
        req = (struct rs_http_req *)(void *)&c;    /* must be reset */
        assert_int_equal(rs_http_request(f->h, &o, &req), RS_EINVAL);
        assert_null(req);
    }
    o = req_opts(&c, f, NULL);
    assert_int_equal(rs_http_request(f->h, &o, NULL), RS_EINVAL);
    o = req_opts(&c, f, url_of(f, "/hello"));
    o.on_done = NULL;
    assert_int_equal(rs_http_request(f->h, &o, NULL), RS_EINVAL);
    assert_int_equal(rs_http_request(NULL, &o, NULL), RS_EINVAL);
    o = req_opts(&c, f, url_of(f, "/hello"));
    assert_int_equal(rs_http_request(f->h, NULL, NULL), RS_EINVAL);
    o.method = "GE T";
    assert_int_equal(rs_http_request(f->h, &o, NULL), RS_EINVAL);
    o.method = "";
    assert_int_equal(rs_http_request(f->h, &o, NULL), RS_EINVAL);
    o.method = "HEAD";
    o.body = "x";
    o.body_len = 1;
    assert_int_equal(rs_http_request(f->h, &o, NULL), RS_EINVAL);
    o = req_opts(&c, f, url_of(f, "/hello"));
    o.body_len = 3;
    assert_int_equal(rs_http_request(f->h, &o, NULL), RS_EINVAL);
    o = req_opts(&c, f, url_of(f, "/hello"));
    o.headers = inject;
    assert_int_equal(rs_http_request(f->h, &o, NULL), RS_EINVAL);
    o.headers = noname;
    assert_int_equal(rs_http_request(f->h, &o, NULL), RS_EINVAL);
    o.headers = nocolon;
    assert_int_equal(rs_http_request(f->h, &o, NULL), RS_EINVAL);
    tu_loop_run_for(&f->loop, 50);
    assert_int_equal(f->n_done, 0);
    assert_int_equal(f->srv.hits, 0);
    rs_http_stats(f->h, &st);
    assert_int_equal(st.requests, 0);
    assert_int_equal(st.in_flight, 0);
    client_free_and_check(f);
    assert_int_equal(f->n_done, 0);
    assert_client_gone(f);
}

/* More than max_requests in flight is RS_ETOOBIG (its on_done never
 * runs); the accepted ones complete. */
static void
test_max_requests(void **state)
{
    struct fixture *f = *state;
    struct call c[4];
    struct rs_http_req_opts o;
    unsigned i;

    client_new(f, &(struct rs_http_opts){ .max_requests = 3 });
    for (i = 0; i < 3; i++) {
        o = req_opts(&c[i], f, url_of(f, "/hello"));
        start(f, &c[i], &o);
    }
    o = req_opts(&c[3], f, url_of(f, "/hello"));
    assert_int_equal(rs_http_request(f->h, &o, NULL), RS_ETOOBIG);
    TU_LOOP_UNTIL(&f->loop, f->n_done == 3, WATCHDOG_MS);
    run_one(f, &c[3], &o);
    assert_int_equal(c[3].rc, 0);
    assert_int_equal(f->n_done, 4);
    client_free_and_check(f);
    assert_client_gone(f);
}

/* Failing the Nth allocation of rs_http_new for every N gives NULL and
 * leaks nothing, until it succeeds. */
static void
test_alloc_failure_new(void **state)
{
    struct fixture *f = *state;
    unsigned long n;
    struct rs_http *h = NULL;

    for (n = 1; n < 100; n++) {
        tu_alloc_fail_at(n);
        h = rs_http_new(f->loop.base, NULL);
        tu_alloc_fail_at(0);
        if (h != NULL)
            break;
        assert_int_equal(event_base_get_num_events(f->loop.base,
                                                   EVENT_BASE_COUNT_ADDED),
                         1);            /* the server's listener only */
    }
    assert_non_null(h);
    assert_true(n > 1);
    rs_http_free(h);
}

/* Failing the Nth allocation of rs_http_request for every N gives
 * RS_ENOMEM without on_done, until it succeeds; then the request works
 * and on_done runs once. */
static void
test_alloc_failure_request(void **state)
{
    struct fixture *f = *state;
    static const char *const hdrs[] = { "X-Token: t", NULL };
    struct call c;
    struct rs_http_req_opts o;
    unsigned long n;
    int rc = RS_ENOMEM;

    client_new(f, NULL);
    for (n = 1; n < 100; n++) {
        o = req_opts(&c, f, url_of(f, "/echo"));
        o.method = "POST";
        o.headers = hdrs;
        o.body = "payload";
        o.body_len = 7;
        tu_alloc_fail_at(n);
        rc = rs_http_request(f->h, &o, &c.req);
        tu_alloc_fail_at(0);
        if (rc == 0)
            break;
        assert_int_equal(rc, RS_ENOMEM);
        assert_null(c.req);
    }
    assert_int_equal(rc, 0);
    assert_true(n > 1);
    TU_LOOP_UNTIL(&f->loop, c.n_done == 1, WATCHDOG_MS);
    assert_int_equal(f->n_done, 1);
    assert_int_equal(c.rc, 0);
    assert_string_equal(c.body, "payload");
    assert_string_equal(f->srv.token, "t");
    client_free_and_check(f);
    assert_client_gone(f);
}

/* A peer that answers with garbage instead of HTTP: RS_EPROTO. */
static void
test_garbage_reply(void **state)
{
    struct fixture *f = *state;
    static const char garbage[] = "SSH-2.0-OpenSSH_9.2\r\nnonsense\r\n\r\n";
    struct call c;
    struct rs_http_req_opts o;

    raw_start(f, garbage, sizeof(garbage) - 1);
    client_new(f, NULL);
    o = req_opts(&c, f, f->url);
    run_one(f, &c, &o);
    assert_int_equal(c.rc, RS_EPROTO);
    client_free_and_check(f);
    assert_client_gone(f);
}

/* A peer that closes in the middle of an announced body: RS_EIO, and the
 * partial body is not handed over as if it were whole. */
static void
test_closed_mid_body(void **state)
{
    struct fixture *f = *state;
    static const char cut[] = "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n"
                              "\r\nonly the beginning";
    struct call c;
    struct rs_http_req_opts o;

    raw_start(f, cut, sizeof(cut) - 1);
    client_new(f, NULL);
    o = req_opts(&c, f, f->url);
    run_one(f, &c, &o);
    assert_int_equal(c.rc, RS_EIO);
    assert_int_equal(c.status, 200);
    assert_int_equal(c.body_len, 0);
    client_free_and_check(f);
    assert_client_gone(f);
}

/* Response headers over 64 KiB: RS_EPROTO. */
static void
test_headers_over_cap(void **state)
{
    struct fixture *f = *state;
    struct call c;
    struct rs_http_req_opts o;
    size_t cap = 100000, len = 0;
    char *reply = malloc(cap);
    unsigned i;

    assert_non_null(reply);
    len += (size_t)snprintf(reply, cap, "HTTP/1.1 200 OK\r\n");
    for (i = 0; len + 200 < cap - 100 && len < 70000; i++)
        len += (size_t)snprintf(reply + len, cap - len,
                                "X-Pad-%u: %0100u\r\n", i, i);
    len += (size_t)snprintf(reply + len, cap - len,
                            "Content-Length: 2\r\n\r\nok");
    raw_start(f, reply, len);
    client_new(f, NULL);
    o = req_opts(&c, f, f->url);
    run_one(f, &c, &o);
    assert_int_equal(c.rc, RS_EPROTO);
    assert_non_null(strstr(c.errstr, "64 KiB"));
    client_free_and_check(f);
    free(reply);
    assert_client_gone(f);
}

/* A header line without a colon is RS_EPROTO; a folded (obs-fold) value
 * is joined with one space. */
static void
test_malformed_and_folded_headers(void **state)
{
    struct fixture *f = *state;
    static const char bad[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                              "NoColonHere\r\n\r\nok";
    static const char folded[] = "HTTP/1.1 200 OK\r\nX-Fold: one\r\n"
                                 "\t two\r\nContent-Length: 2\r\n\r\nok";
    struct call c;
    struct rs_http_req_opts o;

    raw_start(f, bad, sizeof(bad) - 1);
    client_new(f, NULL);
    o = req_opts(&c, f, f->url);
    run_one(f, &c, &o);
    assert_int_equal(c.rc, RS_EPROTO);
    raw_stop(f);

    raw_start(f, folded, sizeof(folded) - 1);
    o = req_opts(&c, f, f->url);
    c.want = "x-fold";
    run_one(f, &c, &o);
    assert_int_equal(c.rc, 0);
    assert_string_equal(c.got, "one two");
    assert_string_equal(c.body, "ok");
    client_free_and_check(f);
    assert_client_gone(f);
}

/* Many concurrent POSTs over kept-alive connections to several servers:
 * every one completes, connections stay few; prints the rate. */
static void
test_throughput_keepalive(void **state)
{
    struct fixture *f = *state;
    enum { NSRV = 4, INFLIGHT = 64 };
    const char *n_env = getenv("RS_HTTP_BENCH_N"); /* longer runs */
    unsigned total = n_env ? (unsigned)strtoul(n_env, NULL, 10) : 20000;
    struct fixture sub[NSRV - 1];
    struct call c[INFLIGHT];
    struct rs_http_req_opts o[INFLIGHT];
    char urls[NSRV][512];
    struct rs_http_stats st;
    uint64_t t0, dt;
    unsigned i;

    snprintf(urls[0], sizeof(urls[0]), "%s", url_of(f, "/echo"));
    for (i = 0; i + 1 < NSRV; i++) {
        memset(&sub[i], 0, sizeof(sub[i]));
        sub[i].loop.base = f->loop.base;
        srv_start(&sub[i]);
        snprintf(urls[i + 1], sizeof(urls[0]), "http://127.0.0.1:%d/echo",
                 sub[i].srv.port);
    }
    client_new(f, &(struct rs_http_opts){ .max_host_conns = 16 });
    t0 = now_us();
    for (i = 0; i < INFLIGHT; i++) {
        o[i] = req_opts(&c[i], f, urls[i % NSRV]);
        o[i].method = "POST";
        o[i].body = "{\"notification\":1}";
        o[i].body_len = 19;
        o[i].body_borrowed = true;
        c[i].next = &o[i];
        c[i].chain_left = total / INFLIGHT - 1;
        start(f, &c[i], &o[i]);
    }
    total = total / INFLIGHT * INFLIGHT;
    TU_LOOP_UNTIL(&f->loop, f->n_done == total, WATCHDOG_MS * 6);
    dt = now_us() - t0;
    for (i = 0; i < INFLIGHT; i++) {
        assert_int_equal(c[i].rc, 0);
        assert_int_equal(c[i].status, 201);
    }
    rs_http_stats(f->h, &st);
    assert_int_equal(st.completed, total);
    assert_true(st.connects <= NSRV * 16);
    print_message("http/throughput_keepalive: %u POSTs in %.3f s = %.0f/s, "
                  "%llu connections\n", total, (double)dt / 1e6,
                  (double)total * 1e6 / (double)dt,
                  (unsigned long long)st.connects);
    client_free_and_check(f);
    for (i = 0; i + 1 < NSRV; i++)
        srv_stop(&sub[i].srv);
    assert_client_gone(f);
}

#define T(name, fn) { name, fn, setup, teardown, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        T("http/null_and_empty", test_null_and_empty),
        T("http/get_buffered", test_get_buffered),
        T("http/post_body_and_headers", test_post_body_and_headers),
        T("http/head", test_head),
        T("http/stream_5mb", test_stream_5mb),
        T("http/stream_read_size", test_stream_read_size),
        T("http/data_later", test_data_later),
        T("http/on_data_stop", test_on_data_stop),
        T("http/max_body", test_max_body),
        T("http/timeout", test_timeout),
        T("http/connection_refused", test_connection_refused),
        T("http/redirects", test_redirects),
        T("http/cred_origin_only", test_cred_origin_only),
        T("http/cred_refused", test_cred_refused),
        T("http/cred_add_errors", test_cred_add_errors),
        T("http/redirect_methods", test_redirect_methods),
        T("http/repeated_link_headers", test_repeated_link_headers),
        T("http/keepalive_1000_sequential", test_keepalive_1000_sequential),
        T("http/host_conn_cap", test_host_conn_cap),
        T("http/cancel_before_start", test_cancel_before_start),
        T("http/cancel_during_transfer", test_cancel_during_transfer),
        T("http/cancel_finished_not_told", test_cancel_finished_not_told),
        T("http/cancel_from_on_data", test_cancel_from_on_data),
        T("http/free_cancels_100", test_free_cancels_100),
        T("http/free_from_on_done", test_free_from_on_done),
        T("http/free_from_on_data", test_free_from_on_data),
        T("http/http2_option_plain_http", test_http2_option_plain_http),
        T("http/bad_requests", test_bad_requests),
        T("http/max_requests", test_max_requests),
        T("http/alloc_failure_new", test_alloc_failure_new),
        T("http/alloc_failure_request", test_alloc_failure_request),
        T("http/garbage_reply", test_garbage_reply),
        T("http/closed_mid_body", test_closed_mid_body),
        T("http/headers_over_cap", test_headers_over_cap),
        T("http/malformed_and_folded_headers",
          test_malformed_and_folded_headers),
        T("http/throughput_keepalive", test_throughput_keepalive),
    };
    int rc;

    /* The peers write with write(2); a client that hung up must not kill
     * the test. */
    signal(SIGPIPE, SIG_IGN);
    /* Every peer is on loopback; a proxy from the environment would only
     * get in the way. */
    unsetenv("http_proxy");
    unsetenv("HTTP_PROXY");
    unsetenv("all_proxy");
    unsetenv("ALL_PROXY");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rc = cmocka_run_group_tests_name("http", tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
