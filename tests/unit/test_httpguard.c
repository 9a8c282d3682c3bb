/* test_httpguard.c - common/httpguard.c on real sockets: an evhttp server
 * guarded on the test's loop, and clients on the same loop that send at a
 * programmed pace (all at once, a byte a tick, silence) from 127.0.0.1 or
 * 127.0.0.2. Deadlines and caps are set low so that each case runs in well
 * under a second. Every test runs under a watchdog and ends with nothing
 * left on the loop, clean under ASan. */
#include "testutil.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rs_httpguard.h"
#include "rs_metrics.h"
#include "rs_sock.h"
#include "tu_httpd.h"

#define MAXC 16
#define BIG (1u << 20)            /* /big: larger than a socket buffer */

static uint64_t
mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------- clients */

struct cli {
    struct bufferevent *bev;
    struct event *tick;
    char *data;                   /* what to send */
    size_t len, sent;
    size_t per_tick;              /* 0: everything once connected */
    unsigned tick_ms;
    bool connected, closed;
    uint64_t t0, closed_ms;       /* closed_ms: since t0 */
    size_t got;                   /* bytes of replies read */
};

static void
cli_send_some(struct cli *c)
{
    size_t n = c->per_tick == 0 ? c->len - c->sent : c->per_tick;
    if (n > c->len - c->sent)
        n = c->len - c->sent;
    if (n > 0 && !c->closed) {
        bufferevent_write(c->bev, c->data + c->sent, n);
        c->sent += n;
    }
    if (c->sent < c->len && !c->closed) {
        struct timeval tv = { 0, (suseconds_t)c->tick_ms * 1000 };
        event_add(c->tick, &tv);
    }
}

static void
cli_on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    cli_send_some(arg);
}

static void
cli_on_read(struct bufferevent *bev, void *arg)
{
    struct cli *c = arg;
    c->got = evbuffer_get_length(bufferevent_get_input(bev));
}

static void
cli_on_event(struct bufferevent *bev, short what, void *arg)
{
    struct cli *c = arg;
    if (what & BEV_EVENT_CONNECTED) {
        c->connected = true;
        cli_send_some(c);
        return;
    }
    cli_on_read(bev, c);
    c->closed = true;
    c->closed_ms = mono_ms() - c->t0;
    event_del(c->tick);
    bufferevent_disable(bev, EV_READ | EV_WRITE);
}

/* A client from src ("127.0.0.1", "127.0.0.2") sending data per_tick bytes
 * every tick_ms (per_tick 0: all at once). */
static struct cli *
cli_new(struct event_base *base, int port, const char *src, const char *data,
        size_t len, size_t per_tick, unsigned tick_ms)
{
    struct cli *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->data = malloc(len + 1);
    assert_non_null(c->data);
    memcpy(c->data, data, len);
    c->len = len;
    c->per_tick = per_tick;
    c->tick_ms = tick_ms;
    c->t0 = mono_ms();
    c->tick = evtimer_new(base, cli_on_tick, c);
    assert_non_null(c->tick);

    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    assert_int_equal(inet_pton(AF_INET, src, &sa.sin_addr), 1);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(evutil_make_socket_nonblocking(fd), 0);
    c->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    assert_non_null(c->bev);
    bufferevent_setcb(c->bev, cli_on_read, NULL, cli_on_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    sa.sin_port = htons((uint16_t)port);
    assert_int_equal(inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr), 1);
    assert_int_equal(bufferevent_socket_connect(c->bev, (struct sockaddr *)&sa,
                                                sizeof(sa)), 0);
    return c;
}

static void
cli_free(struct cli *c)
{
    if (c == NULL)
        return;
    event_free(c->tick);
    bufferevent_free(c->bev);
    free(c->data);
    free(c);
}

/* The reply bytes read so far start with prefix. */
static bool
cli_reply_is(struct cli *c, const char *prefix)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    size_t n = strlen(prefix);
    if (evbuffer_get_length(in) < n)
        return false;
    return memcmp(evbuffer_pullup(in, (ev_ssize_t)n), prefix, n) == 0;
}

static size_t
cli_count(struct cli *c, const char *needle)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    size_t n = 0;
    struct evbuffer_ptr p = evbuffer_search(in, needle, strlen(needle), NULL);
    while (p.pos >= 0) {
        n++;
        evbuffer_ptr_set(in, &p, 1, EVBUFFER_PTR_ADD);
        p = evbuffer_search(in, needle, strlen(needle), &p);
    }
    return n;
}

/* -------------------------------------------------------------- server */

struct srv {
    struct tu_loop loop;
    struct evhttp *http;
    struct rs_httpguard *g;
    struct rs_metrics *m;
    int port;
    unsigned requests;
    struct evhttp_request *parked[MAXC];
    unsigned nparked;
    bool stopped;                 /* /stop answered (and broke the loop) */
    char *big;
    unsigned lines;               /* on_log calls */
    struct rs_httpguard_note last; /* the last one (addr not kept) */
    char last_addr[64];
    int nodelay;                  /* /sockopts: TCP_NODELAY, -1 unknown */
    ev_ssize_t max_write;         /* and the socket's largest write */
};

static void
srv_on_request(struct evhttp_request *req, void *arg)
{
    struct srv *s = arg;
    s->requests++;
    const char *uri = evhttp_request_get_uri(req);
    if (strcmp(uri, "/park") == 0) {
        assert_true(s->nparked < MAXC);
        s->parked[s->nparked++] = req;
        return;
    }
    if (strcmp(uri, "/sockopts") == 0) {
        /* evhttp's bufferevent is the guard's filter; the socket's is
         * under it */
        struct bufferevent *f = evhttp_connection_get_bufferevent(
            evhttp_request_get_connection(req));
        struct bufferevent *sock = bufferevent_get_underlying(f);
        int fd = bufferevent_getfd(f), v = -1;
        socklen_t vl = sizeof(v);
        if (getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &vl) != 0)
            v = -1;
        s->nodelay = v;
        s->max_write = sock != NULL ? bufferevent_get_max_single_write(sock)
                                    : -1;
    }
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    if (strcmp(uri, "/stop") == 0) {
        /* answer, then leave the loop on this very callback, as a daemon
         * that shuts down from a request (or a test that has what it
         * waited for) does: the reply is still in the guard's buffers */
        s->stopped = true;
        event_base_loopbreak(s->loop.base);
    }
    if (strcmp(uri, "/big") == 0)
        evbuffer_add(b, s->big, BIG);
    else
        evbuffer_add_printf(b, "ok %zu\n", evbuffer_get_length(
                                               evhttp_request_get_input_buffer(req)));
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

static void
srv_on_log(void *ud, const struct rs_httpguard_note *n)
{
    struct srv *s = ud;
    s->lines++;
    s->last = *n;
    snprintf(s->last_addr, sizeof(s->last_addr), "%s", n->addr);
    s->last.addr = s->last_addr;
}

static struct srv *
srv_new(const struct rs_httpguard_limits *lim, unsigned log_ms)
{
    struct srv *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    tu_loop_init(&s->loop);
    s->http = evhttp_new(s->loop.base);
    assert_non_null(s->http);
    s->m = rs_metrics_new();
    assert_non_null(s->m);
    s->big = malloc(BIG);
    assert_non_null(s->big);
    memset(s->big, 'x', BIG);
    struct rs_httpguard_opts o = {
        .base = s->loop.base,
        .http = s->http,
        .name = "t",
        .limits = *lim,
        .on_request = srv_on_request,
        .request_arg = s,
        .metrics = s->m,
        .metrics_prefix = "t_http",
        .on_log = srv_on_log,
        .log_ud = s,
        .log_ms = log_ms,
    };
    const char *err = NULL;
    s->g = rs_httpguard_new(&o, &err);
    assert_non_null(s->g);
    s->port = tu_httpd_listen(s->http);
    return s;
}

static void
srv_free(struct srv *s, struct cli **c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cli_free(c[i]);
    evhttp_free(s->http);        /* the parked requests go with it */
    rs_httpguard_free(s->g);
    tu_loop_cleanup(&s->loop);   /* the finalizers run: contexts freed */
    rs_metrics_free(s->m);
    free(s->big);
    free(s);
}

static struct rs_httpguard_stats
srv_stats(struct srv *s)
{
    struct rs_httpguard_stats st;
    rs_httpguard_stats(s->g, &st);
    return st;
}

static bool
srv_metric(struct srv *s, const char *line)
{
    char *buf = NULL;
    size_t cap = 0, len = 0;
    assert_int_equal(rs_metrics_render(s->m, &buf, &cap, &len), 0);
    bool found = strstr(buf, line) != NULL;
    free(buf);
    return found;
}

static const struct rs_httpguard_limits fast = {
    .head_ms = 300,
    .body_ms = 300,
    .body_rate = 4000,
    .idle_ms = 2000,
    .max_conns = 64,
    .max_per_addr = 8,
};

static const char get1[] = "GET /a HTTP/1.1\r\nHost: t\r\n\r\n";

/* --------------------------------------------------------------- tests */

/* httpguard/free_null: rs_httpguard_free(NULL) is a no-op. */
static void
test_free_null(void **state)
{
    (void)state;
    rs_httpguard_free(NULL);
}

/* httpguard/bad_opts: no server, or a negative limit, is refused with a
 * reason. */
static void
test_bad_opts(void **state)
{
    (void)state;
    struct tu_loop l;
    tu_loop_init(&l);
    struct evhttp *http = evhttp_new(l.base);
    assert_non_null(http);
    const char *err = NULL;
    struct rs_httpguard_opts o = { .base = l.base };
    assert_null(rs_httpguard_new(&o, &err));
    assert_non_null(err);
    o.http = http;
    o.limits.max_per_addr = -1;
    err = NULL;
    assert_null(rs_httpguard_new(&o, &err));
    assert_non_null(err);
    evhttp_free(http);
    tu_loop_cleanup(&l);
}

/* httpguard/serves: requests sent at once are answered; two on one
 * kept-alive connection, pipelined; a body is delivered whole. */
static void
test_serves(void **state)
{
    (void)state;
    struct srv *s = srv_new(&fast, 0);
    static const char two[] = "GET /a HTTP/1.1\r\nHost: t\r\n\r\n"
                              "POST /b HTTP/1.1\r\nHost: t\r\n"
                              "Content-Length: 5\r\n\r\nhello";
    struct cli *c = cli_new(s->loop.base, s->port, "127.0.0.1", two,
                            sizeof(two) - 1, 0, 0);
    TU_LOOP_UNTIL(&s->loop, cli_count(c, "HTTP/1.1 200") == 2, 3000);
    assert_int_equal(cli_count(c, "ok 0\n"), 1);
    assert_int_equal(cli_count(c, "ok 5\n"), 1);
    assert_false(c->closed);
    assert_int_equal(s->requests, 2);
    struct rs_httpguard_stats st = srv_stats(s);
    assert_int_equal(st.accepted, 1);
    assert_int_equal(st.open, 1);
    assert_int_equal(st.addrs, 1);
    for (int e = 0; e < RS_HTTPGUARD_EVENTS; e++)
        assert_int_equal(st.events[e], 0);
    assert_true(srv_metric(s, "t_http_connections{listener=\"t\"} 1"));
    srv_free(s, &c, 1);
}

/* httpguard/close_flushes: a reply larger than the socket buffers, to a
 * client that asked for Connection: close, arrives whole before the
 * server hangs up (the guard's write path waits for the socket). */
static void
test_close_flushes(void **state)
{
    (void)state;
    struct srv *s = srv_new(&fast, 0);
    static const char req[] = "GET /big HTTP/1.1\r\nHost: t\r\n"
                              "Connection: close\r\n\r\n";
    struct cli *c = cli_new(s->loop.base, s->port, "127.0.0.1", req,
                            sizeof(req) - 1, 0, 0);
    TU_LOOP_UNTIL(&s->loop, c->closed, 5000);
    assert_true(cli_reply_is(c, "HTTP/1.1 200"));
    assert_true(c->got > BIG);
    struct evbuffer *in = bufferevent_get_input(c->bev);
    struct evbuffer_ptr p = evbuffer_search(in, "\r\n\r\n", 4, NULL);
    assert_true(p.pos > 0);
    assert_int_equal(c->got - (size_t)p.pos - 4, BIG);
    srv_free(s, &c, 1);
}

/* httpguard/sockopts: an accepted connection's replies are not held back
 * by Nagle (TCP_NODELAY: the last, short write of a large reply waited for
 * the ACK of the one before, up to the client's 40 ms of delayed ACK) and
 * leave in writes larger than libevent's 16 KiB. */
static void
test_sockopts(void **state)
{
    (void)state;
    struct srv *s = srv_new(&fast, 0);
    s->nodelay = -1;
    static const char req[] = "GET /sockopts HTTP/1.1\r\nHost: t\r\n\r\n";
    struct cli *c = cli_new(s->loop.base, s->port, "127.0.0.1", req,
                            sizeof(req) - 1, 0, 0);
    TU_LOOP_UNTIL(&s->loop, cli_count(c, "HTTP/1.1 200") == 1, 3000);
    assert_int_equal(s->nodelay, 1);
    assert_true(s->max_write >= 256 * 1024);
    srv_free(s, &c, 1);
}

/* httpguard/sockopts_v6: the same on a listener bound to ::1 (skipped
 * where the loopback has no IPv6). */
static void
test_sockopts_v6(void **state)
{
    (void)state;
    struct srv *s = srv_new(&fast, 0);
    struct evhttp *http = evhttp_new(s->loop.base);
    assert_non_null(http);
    struct rs_httpguard_opts o = {
        .base = s->loop.base, .http = http, .name = "v6", .limits = fast,
        .on_request = srv_on_request, .request_arg = s,
    };
    struct rs_httpguard *g = NULL;
    struct evhttp_bound_socket *bs;
    int port;
    char err[300];
    if (rs_httpguard_listen(&o, "::1", 0, &g, &bs, &port, err,
                            sizeof(err)) != 0) {
        evhttp_free(http);
        rs_httpguard_free(g);
        srv_free(s, NULL, 0);
        skip();
    }
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in6 sa = { .sin6_family = AF_INET6,
                               .sin6_port = htons((uint16_t)port),
                               .sin6_addr = IN6ADDR_LOOPBACK_INIT };
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    static const char req[] = "GET /sockopts HTTP/1.1\r\nHost: t\r\n\r\n";
    assert_int_equal(write(fd, req, sizeof(req) - 1), (ssize_t)sizeof(req) - 1);
    s->nodelay = -1;
    TU_LOOP_UNTIL(&s->loop, s->nodelay != -1, 3000);
    assert_int_equal(s->nodelay, 1);
    assert_true(s->max_write >= 256 * 1024);
    close(fd);
    evhttp_free(http);
    rs_httpguard_free(g);
    srv_free(s, NULL, 0);
}

/* httpguard/listen: rs_httpguard_listen guards and binds: a port the
 * kernel picked, served; the same port again is refused with where and
 * why, the guard it made handed back all the same (the caller frees it);
 * a port past 65535 is refused before any bind. */
static void
test_listen(void **state)
{
    (void)state;
    struct srv *s = srv_new(&fast, 0);
    struct evhttp *http = evhttp_new(s->loop.base);
    assert_non_null(http);
    struct rs_httpguard_opts o = {
        .base = s->loop.base,
        .http = http,
        .name = "l",
        .limits = fast,
        .on_request = srv_on_request,
        .request_arg = s,
    };
    struct rs_httpguard *g = NULL;
    struct evhttp_bound_socket *bs = NULL;
    int port = -1;
    char err[300];
    assert_int_equal(rs_httpguard_listen(&o, "127.0.0.1", 0, &g, &bs, &port,
                                         err, sizeof(err)), 0);
    assert_non_null(g);
    assert_non_null(bs);
    assert_true(port > 0);
    assert_int_equal(rs_sock_port(evhttp_bound_socket_get_fd(bs)), port);
    struct cli *c = cli_new(s->loop.base, port, "127.0.0.1", get1,
                            sizeof(get1) - 1, 0, 0);
    TU_LOOP_UNTIL(&s->loop, cli_count(c, "HTTP/1.1 200") == 1, 3000);

    struct evhttp *http2 = evhttp_new(s->loop.base);
    assert_non_null(http2);
    o.http = http2;
    struct rs_httpguard *g2 = NULL;
    int port2 = 0;
    assert_int_equal(rs_httpguard_listen(&o, "127.0.0.1", (unsigned)port,
                                         &g2, &bs, &port2, err, sizeof(err)),
                     RS_EIO);
    char want[64];
    snprintf(want, sizeof(want), "cannot listen on 127.0.0.1:%d: ", port);
    assert_non_null(strstr(err, want));
    assert_non_null(g2);
    assert_null(bs);
    assert_int_equal(port2, -1);
    evhttp_free(http2);
    rs_httpguard_free(g2);

    http2 = evhttp_new(s->loop.base);
    assert_non_null(http2);
    o.http = http2;
    g2 = NULL;
    assert_int_equal(rs_httpguard_listen(&o, NULL, 70000, &g2, &bs, &port2,
                                         err, sizeof(err)),
                     RS_EIO);
    assert_non_null(strstr(err, "cannot listen on 0.0.0.0:70000"));
    evhttp_free(http2);
    rs_httpguard_free(g2);

    cli_free(c);
    evhttp_free(http);
    rs_httpguard_free(g);
    srv_free(s, NULL, 0);
}

/* httpguard/local_url: where a client on this host reaches a listener. */
static void
test_local_url(void **state)
{
    (void)state;
    char b[64];
    assert_int_equal(rs_httpguard_local_url("http", "", 80, b, sizeof(b)), 0);
    assert_string_equal(b, "http://127.0.0.1:80");
    assert_int_equal(rs_httpguard_local_url("http", NULL, 8080, b, sizeof(b)), 0);
    assert_string_equal(b, "http://127.0.0.1:8080");
    assert_int_equal(rs_httpguard_local_url("http", "0.0.0.0", 1, b, sizeof(b)), 0);
    assert_string_equal(b, "http://127.0.0.1:1");
    assert_int_equal(rs_httpguard_local_url("http", "::", 2, b, sizeof(b)), 0);
    assert_string_equal(b, "http://127.0.0.1:2");
    assert_int_equal(rs_httpguard_local_url("http", "::1", 3, b, sizeof(b)), 0);
    assert_string_equal(b, "http://[::1]:3");
    assert_int_equal(rs_httpguard_local_url("http", "example.org", 4, b, sizeof(b)), 0);
    assert_string_equal(b, "http://example.org:4");
    assert_int_equal(rs_httpguard_local_url("http", "example.org", 4, b, 21), 0);
    assert_int_equal(rs_httpguard_local_url("http", "example.org", 4, b, 20), -1);
    /* rshub's WebSocket listener: the same hosts, its scheme */
    assert_int_equal(rs_httpguard_local_url("ws", "0.0.0.0", 5, b, sizeof(b)), 0);
    assert_string_equal(b, "ws://127.0.0.1:5");
    assert_int_equal(rs_httpguard_local_url("ws", "::1", 6, b, sizeof(b)), 0);
    assert_string_equal(b, "ws://[::1]:6");
    assert_true(rs_httpguard_host_is_wildcard(NULL));
    assert_true(rs_httpguard_host_is_wildcard(""));
    assert_true(rs_httpguard_host_is_wildcard("0.0.0.0"));
    assert_true(rs_httpguard_host_is_wildcard("::"));
    assert_false(rs_httpguard_host_is_wildcard("::1"));
    assert_false(rs_httpguard_host_is_wildcard("127.0.0.1"));
}

/* httpguard/head_deadline: a head trickled a byte every 40 ms is cut at
 * head_ms however many bytes keep coming; a connection that says nothing
 * is cut at the same time and reads 408. Both counted. */
static void
test_head_deadline(void **state)
{
    (void)state;
    struct srv *s = srv_new(&fast, 0);
    static const char slow[] = "GET /a HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaa"
                               "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    struct cli *c[2];
    c[0] = cli_new(s->loop.base, s->port, "127.0.0.1", slow, sizeof(slow) - 1,
                   1, 40);
    c[1] = cli_new(s->loop.base, s->port, "127.0.0.1", "", 0, 0, 0);
    TU_LOOP_UNTIL(&s->loop, c[0]->closed && c[1]->closed, 3000);
    assert_true(c[0]->sent < c[0]->len);   /* cut mid-head */
    for (int i = 0; i < 2; i++) {
        assert_true(c[i]->closed_ms >= 250);
        assert_true(c[i]->closed_ms < 1000);
    }
    assert_true(cli_reply_is(c[1], "HTTP/1.1 408"));
    assert_int_equal(s->requests, 0);
    struct rs_httpguard_stats st = srv_stats(s);
    assert_int_equal(st.events[RS_HTTPGUARD_EV_HEAD_TIMEOUT], 2);
    assert_int_equal(st.open, 0);
    assert_true(srv_metric(s, "t_http_closed_total{listener=\"t\","
                              "reason=\"head_timeout\"} 2"));
    srv_free(s, c, 2);
}

/* httpguard/body_deadline: a body that falls behind body_rate after the
 * grace is cut (body_timeout); one that keeps the pace is served, though
 * it takes longer than the grace. */
static void
test_body_deadline(void **state)
{
    (void)state;
    struct srv *s = srv_new(&fast, 0);
    char req[8192];
    int hl = snprintf(req, sizeof(req), "POST /b HTTP/1.1\r\nHost: t\r\n"
                                        "Content-Length: 4000\r\n\r\n");
    memset(req + hl, 'b', 4000);
    size_t len = (size_t)hl + 4000;
    struct cli *c[2];
    /* 10 bytes each 50 ms: 200 B/s, far behind 4000 B/s */
    c[0] = cli_new(s->loop.base, s->port, "127.0.0.1", req, len, 10, 50);
    /* the head at once, then 500 bytes each 100 ms: 5000 B/s, 800 ms */
    c[1] = cli_new(s->loop.base, s->port, "127.0.0.1", req, len, 0, 0);
    c[1]->len = (size_t)hl;
    TU_LOOP_UNTIL(&s->loop, c[1]->connected, 1000);
    c[1]->len = len;
    c[1]->per_tick = 500;
    c[1]->tick_ms = 100;
    cli_send_some(c[1]);
    TU_LOOP_UNTIL(&s->loop, c[0]->closed && cli_count(c[1], "ok 4000") == 1,
                  4000);
    assert_false(c[1]->closed);
    assert_true(c[0]->closed_ms < 1500);
    struct rs_httpguard_stats st = srv_stats(s);
    assert_int_equal(st.events[RS_HTTPGUARD_EV_BODY_TIMEOUT], 1);
    assert_int_equal(st.events[RS_HTTPGUARD_EV_HEAD_TIMEOUT], 0);
    assert_int_equal(s->requests, 1);
    srv_free(s, c, 2);
}

/* httpguard/next_head: on a kept-alive connection the clock of a second
 * request starts at its first byte, not at the connection's start; a
 * second request trickled too slowly is cut like a first one. */
static void
test_next_head(void **state)
{
    (void)state;
    struct srv *s = srv_new(&fast, 0);
    struct cli *c = cli_new(s->loop.base, s->port, "127.0.0.1", get1,
                            sizeof(get1) - 1, 0, 0);
    TU_LOOP_UNTIL(&s->loop, cli_count(c, "ok 0") == 1, 2000);
    tu_loop_run_for(&s->loop, 400);        /* longer than head_ms: idle */
    assert_false(c->closed);
    c->sent = 0;                           /* the same request, quickly */
    cli_send_some(c);
    TU_LOOP_UNTIL(&s->loop, cli_count(c, "ok 0") == 2, 2000);
    c->sent = 0;                           /* and now a byte each 40 ms */
    c->per_tick = 1;
    c->tick_ms = 40;
    uint64_t t = mono_ms();
    cli_send_some(c);
    TU_LOOP_UNTIL(&s->loop, c->closed, 2000);
    assert_true(mono_ms() - t >= 250);
    assert_int_equal(s->requests, 2);
    assert_int_equal(srv_stats(s).events[RS_HTTPGUARD_EV_HEAD_TIMEOUT], 1);
    srv_free(s, &c, 1);
}

/* httpguard/idle: a kept-alive connection that says nothing more is
 * closed after idle_ms (evhttp's wait, now on the socket). */
static void
test_idle(void **state)
{
    (void)state;
    struct rs_httpguard_limits lim = fast;
    lim.idle_ms = 500;
    lim.head_ms = 5000;
    struct srv *s = srv_new(&lim, 0);
    struct cli *c = cli_new(s->loop.base, s->port, "127.0.0.1", get1,
                            sizeof(get1) - 1, 0, 0);
    TU_LOOP_UNTIL(&s->loop, c->closed, 3000);
    assert_int_equal(cli_count(c, "ok 0"), 1);
    assert_true(c->closed_ms >= 400);
    struct rs_httpguard_stats st = srv_stats(s);
    for (int e = 0; e < RS_HTTPGUARD_EVENTS; e++)
        assert_int_equal(st.events[e], 0);   /* evhttp's, not ours */
    srv_free(s, &c, 1);
}

/* httpguard/per_addr: past max_per_addr connections from one address the
 * next is answered 503 and closed; another address is not affected; once
 * one closes, the address gets a connection again. One log line. */
static void
test_per_addr(void **state)
{
    (void)state;
    struct rs_httpguard_limits lim = fast;
    lim.max_per_addr = 3;
    lim.head_ms = 5000;
    struct srv *s = srv_new(&lim, 60000);
    struct cli *c[7];
    for (int i = 0; i < 3; i++)
        c[i] = cli_new(s->loop.base, s->port, "127.0.0.1", "", 0, 0, 0);
    TU_LOOP_UNTIL(&s->loop, srv_stats(s).open == 3, 2000);
    c[3] = cli_new(s->loop.base, s->port, "127.0.0.1", "", 0, 0, 0);
    c[4] = cli_new(s->loop.base, s->port, "127.0.0.1", "", 0, 0, 0);
    c[5] = cli_new(s->loop.base, s->port, "127.0.0.2", get1, sizeof(get1) - 1,
                   0, 0);
    TU_LOOP_UNTIL(&s->loop, c[3]->closed && c[4]->closed &&
                  cli_count(c[5], "ok 0") == 1, 2000);
    assert_true(cli_reply_is(c[3], "HTTP/1.1 503"));
    for (int i = 0; i < 3; i++)
        assert_false(c[i]->closed);
    struct rs_httpguard_stats st = srv_stats(s);
    assert_int_equal(st.events[RS_HTTPGUARD_EV_PER_ADDR], 2);
    assert_int_equal(st.open, 4);
    assert_int_equal(st.addrs, 2);
    assert_int_equal(s->lines, 1);          /* once per address per minute */
    assert_string_equal(s->last.addr, "127.0.0.1");
    assert_int_equal(s->last.event, RS_HTTPGUARD_EV_PER_ADDR);
    assert_true(srv_metric(s, "t_http_refused_total{listener=\"t\","
                              "reason=\"per_address\"} 2"));
    cli_free(c[0]);
    c[0] = NULL;
    TU_LOOP_UNTIL(&s->loop, srv_stats(s).open == 3, 2000);
    c[6] = cli_new(s->loop.base, s->port, "127.0.0.1", get1, sizeof(get1) - 1,
                   0, 0);
    TU_LOOP_UNTIL(&s->loop, cli_count(c[6], "ok 0") == 1, 2000);
    assert_int_equal(srv_stats(s).events[RS_HTTPGUARD_EV_PER_ADDR], 2);
    srv_free(s, c, 7);
}

/* httpguard/full_evicts: at max_conns, a new connection closes the one
 * that has waited longest for a head; connections whose request is with
 * the handler are never taken, and with only those, a new one is refused
 * (full). */
static void
test_full_evicts(void **state)
{
    (void)state;
    struct rs_httpguard_limits lim = fast;
    lim.max_conns = 3;
    lim.max_per_addr = 0;
    lim.head_ms = 5000;
    struct srv *s = srv_new(&lim, 0);
    static const char park[] = "GET /park HTTP/1.1\r\nHost: t\r\n\r\n";
    struct cli *c[6];
    c[0] = cli_new(s->loop.base, s->port, "127.0.0.1", "", 0, 0, 0);
    TU_LOOP_UNTIL(&s->loop, srv_stats(s).open == 1, 2000);
    c[1] = cli_new(s->loop.base, s->port, "127.0.0.2", park, sizeof(park) - 1,
                   0, 0);
    c[2] = cli_new(s->loop.base, s->port, "127.0.0.1", park, sizeof(park) - 1,
                   0, 0);
    TU_LOOP_UNTIL(&s->loop, s->nparked == 2, 2000);
    /* full: the silent one goes */
    c[3] = cli_new(s->loop.base, s->port, "127.0.0.2", park, sizeof(park) - 1,
                   0, 0);
    TU_LOOP_UNTIL(&s->loop, c[0]->closed && s->nparked == 3, 2000);
    assert_true(cli_reply_is(c[0], "HTTP/1.1 408"));
    assert_int_equal(srv_stats(s).events[RS_HTTPGUARD_EV_EVICTED], 1);
    /* full of requests with the handler: refused */
    c[4] = cli_new(s->loop.base, s->port, "127.0.0.1", get1, sizeof(get1) - 1,
                   0, 0);
    TU_LOOP_UNTIL(&s->loop, c[4]->closed, 2000);
    assert_true(cli_reply_is(c[4], "HTTP/1.1 503"));
    for (int i = 1; i <= 3; i++)
        assert_false(c[i]->closed);
    struct rs_httpguard_stats st = srv_stats(s);
    assert_int_equal(st.events[RS_HTTPGUARD_EV_FULL], 1);
    assert_int_equal(st.open, 3);
    assert_int_equal(st.max_conns, 3);
    /* a parked request answered: its connection waits for the next head
     * (idle) but is not evictable until it sends one; still full */
    evhttp_send_reply(s->parked[0], 200, "OK", NULL);
    s->parked[0] = NULL;
    TU_LOOP_UNTIL(&s->loop, cli_count(c[1], "HTTP/1.1 200") == 1, 2000);
    c[5] = cli_new(s->loop.base, s->port, "127.0.0.1", get1, sizeof(get1) - 1,
                   0, 0);
    TU_LOOP_UNTIL(&s->loop, c[5]->closed, 2000);
    assert_int_equal(srv_stats(s).events[RS_HTTPGUARD_EV_FULL], 2);
    srv_free(s, c, 6);
}

/* httpguard/log_interval: many refusals of one address make one line per
 * interval, the next one carrying the count since the last. */
static void
test_log_interval(void **state)
{
    (void)state;
    struct rs_httpguard_limits lim = fast;
    lim.max_per_addr = 1;
    lim.head_ms = 5000;
    struct srv *s = srv_new(&lim, 400);
    struct cli *c[8];
    c[0] = cli_new(s->loop.base, s->port, "127.0.0.1", "", 0, 0, 0);
    TU_LOOP_UNTIL(&s->loop, srv_stats(s).open == 1, 2000);
    for (int i = 1; i < 5; i++)
        c[i] = cli_new(s->loop.base, s->port, "127.0.0.1", "", 0, 0, 0);
    TU_LOOP_UNTIL(&s->loop, srv_stats(s).events[RS_HTTPGUARD_EV_PER_ADDR] == 4,
                  2000);
    assert_int_equal(s->lines, 1);
    assert_int_equal(s->last.events, 1);
    tu_loop_run_for(&s->loop, 450);
    for (int i = 5; i < 8; i++)
        c[i] = cli_new(s->loop.base, s->port, "127.0.0.1", "", 0, 0, 0);
    TU_LOOP_UNTIL(&s->loop, srv_stats(s).events[RS_HTTPGUARD_EV_PER_ADDR] == 7,
                  2000);
    assert_int_equal(s->lines, 2);
    assert_int_equal(s->last.events, 4);   /* three unlogged, and this one */
    srv_free(s, c, 8);
}

/* httpguard/alloc_fail: every allocation of rs_httpguard_new failing in
 * turn gives NULL and a reason, and leaks nothing; a connection whose
 * context cannot be allocated is served unguarded (evhttp's own
 * bufferevent), one whose address entry cannot be is refused. */
static void
test_alloc_fail(void **state)
{
    (void)state;
    struct tu_loop l;
    tu_loop_init(&l);
    unsigned long n;
    for (n = 1; n < 200; n++) {
        struct evhttp *http = evhttp_new(l.base);
        struct rs_metrics *m = rs_metrics_new();
        assert_non_null(http);
        assert_non_null(m);
        struct rs_httpguard_opts o = {
            .base = l.base, .http = http, .limits = fast, .metrics = m,
            .metrics_prefix = "t_http",
        };
        const char *err = NULL;
        tu_alloc_fail_at(n);
        struct rs_httpguard *g = rs_httpguard_new(&o, &err);
        tu_alloc_fail_at(0);
        evhttp_free(http);
        rs_httpguard_free(g);
        rs_metrics_free(m);
        if (g != NULL)
            break;
        assert_non_null(err);
    }
    assert_true(n > 3 && n < 200);
    tu_loop_cleanup(&l);

    struct srv *s = srv_new(&fast, 0);
    struct cli *c[2];
    tu_alloc_fail_at(1);             /* the connection's context */
    c[0] = cli_new(s->loop.base, s->port, "127.0.0.1", get1, sizeof(get1) - 1,
                   0, 0);
    TU_LOOP_UNTIL(&s->loop, cli_count(c[0], "ok 0") == 1, 2000);
    tu_alloc_fail_at(0);
    assert_int_equal(srv_stats(s).accepted, 0);
    tu_alloc_fail_at(2);             /* its address's entry */
    c[1] = cli_new(s->loop.base, s->port, "127.0.0.2", get1, sizeof(get1) - 1,
                   0, 0);
    TU_LOOP_UNTIL(&s->loop, c[1]->closed, 2000);
    tu_alloc_fail_at(0);
    assert_true(cli_reply_is(c[1], "HTTP/1.1 503"));
    assert_int_equal(srv_stats(s).events[RS_HTTPGUARD_EV_FULL], 1);
    srv_free(s, c, 2);
}

static bool
all_closed(struct cli **c, int n)
{
    for (int i = 0; i < n; i++)
        if (!c[i]->closed)
            return false;
    return true;
}

/* httpguard/many: 200 trickling connections from one address with a cap
 * of 20: never more than 20 of them open, the rest refused at once, the
 * admitted ones cut by the head deadline; meanwhile a request from another
 * address is answered without delay. */
static void
test_many(void **state)
{
    (void)state;
    struct rs_httpguard_limits lim = fast;
    lim.max_per_addr = 20;
    lim.head_ms = 600;
    struct srv *s = srv_new(&lim, 0);
    enum { N = 200 };
    struct cli **c = calloc(N + 1, sizeof(*c));
    assert_non_null(c);
    static const char slow[] = "GET /a HTTP/1.1\r\nHost: t\r\nX: yyyyyyyyyyy"
                               "yyyyyyyyyyyyyyyyyyyyyyyyyyy\r\n\r\n";
    for (int i = 0; i < N; i++)
        c[i] = cli_new(s->loop.base, s->port, "127.0.0.2", slow,
                       sizeof(slow) - 1, 1, 50);
    TU_LOOP_UNTIL(&s->loop, srv_stats(s).open == 20, 3000);
    uint64_t t = mono_ms();
    c[N] = cli_new(s->loop.base, s->port, "127.0.0.1", get1, sizeof(get1) - 1,
                   0, 0);
    uint64_t maxopen = 0;
    TU_LOOP_UNTIL(&s->loop, (maxopen = srv_stats(s).open > maxopen
                                           ? srv_stats(s).open : maxopen,
                             cli_count(c[N], "ok 0") == 1), 2000);
    assert_true(mono_ms() - t < 300);
    TU_LOOP_UNTIL(&s->loop, (maxopen = srv_stats(s).open > maxopen
                                           ? srv_stats(s).open : maxopen,
                             all_closed(c, N)), 8000);
    assert_true(maxopen <= 21);            /* 20, and the other address */
    struct rs_httpguard_stats st = srv_stats(s);
    assert_int_equal(st.open, 1);
    assert_int_equal(st.accepted + st.events[RS_HTTPGUARD_EV_PER_ADDR], N + 1);
    assert_int_equal(st.events[RS_HTTPGUARD_EV_HEAD_TIMEOUT], st.accepted - 1);
    assert_true(st.events[RS_HTTPGUARD_EV_PER_ADDR] >= N / 2);
    assert_int_equal(s->requests, 1);
    srv_free(s, c, N + 1);
    free(c);
}

/* httpguard/free_reply_pending: the server and the guard are freed on
 * the loop turn whose handler queued a reply (here it also broke the
 * loop, as a daemon stopping from a request does), while another client
 * is slow to read a large reply and a third waits, kept alive, for its
 * next request; then the loop runs until libevent has finalized every
 * connection. Nothing of theirs may be touched once freed, and nothing
 * may be left on the loop. (libevent 2.1 finalized a filter from the
 * deferred callback of its output buffer, which it had handed the
 * buffer: a SEGV, docs/internals/httpguard.md.) */
static void
test_free_reply_pending(void **state)
{
    (void)state;
    struct srv *s = srv_new(&fast, 0);
    static const char big[] = "GET /big HTTP/1.1\r\nHost: t\r\n\r\n";
    static const char stop[] = "GET /stop HTTP/1.1\r\nHost: t\r\n\r\n";
    struct cli *c[3];
    c[0] = cli_new(s->loop.base, s->port, "127.0.0.1", get1, sizeof(get1) - 1,
                   0, 0);
    TU_LOOP_UNTIL(&s->loop, cli_count(c[0], "ok 0") == 1, 2000);
    c[1] = cli_new(s->loop.base, s->port, "127.0.0.1", big, sizeof(big) - 1,
                   0, 0);
    bufferevent_disable(c[1]->bev, EV_READ);       /* a slow reader */
    TU_LOOP_UNTIL(&s->loop, s->requests == 2, 2000);
    tu_loop_run_for(&s->loop, 50);                 /* its socket is full */
    c[2] = cli_new(s->loop.base, s->port, "127.0.0.1", stop, sizeof(stop) - 1,
                   0, 0);
    TU_LOOP_UNTIL(&s->loop, s->stopped, 2000);
    assert_int_equal(c[2]->got, 0);                /* not sent yet */
    assert_int_equal(srv_stats(s).open, 3);
    srv_free(s, c, 3);
}

/* httpguard/gone_at_deadline: a client that hangs up on the loop turn its
 * head deadline passes is let go by evhttp first; the guard then neither
 * counts a timeout for it nor acts on the bufferevent evhttp freed (that
 * brought its reference count back from zero and finalized it twice). */
static void
test_gone_at_deadline(void **state)
{
    (void)state;
    struct srv *s = srv_new(&fast, 0);
    struct cli *c = cli_new(s->loop.base, s->port, "127.0.0.1", "", 0, 0, 0);
    TU_LOOP_UNTIL(&s->loop, srv_stats(s).open == 1, 2000);
    /* the FIN now, not when the client's bufferevent is finalized */
    assert_int_equal(shutdown(bufferevent_getfd(c->bev), SHUT_RDWR), 0);
    cli_free(c);
    /* both the end of file and the deadline are due on the next turn;
     * the socket's is handled first (libevent: I/O before timers) */
    usleep((useconds_t)(fast.head_ms + 100) * 1000);
    event_base_loop(s->loop.base, EVLOOP_ONCE);
    TU_LOOP_UNTIL(&s->loop, srv_stats(s).open == 0, 2000);
    struct rs_httpguard_stats st = srv_stats(s);
    for (int e = 0; e < RS_HTTPGUARD_EVENTS; e++)
        assert_int_equal(st.events[e], 0);
    srv_free(s, NULL, 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_free_null),
        cmocka_unit_test(test_bad_opts),
        cmocka_unit_test(test_serves),
        cmocka_unit_test(test_close_flushes),
        cmocka_unit_test(test_sockopts),
        cmocka_unit_test(test_sockopts_v6),
        cmocka_unit_test(test_listen),
        cmocka_unit_test(test_local_url),
        cmocka_unit_test(test_head_deadline),
        cmocka_unit_test(test_body_deadline),
        cmocka_unit_test(test_next_head),
        cmocka_unit_test(test_idle),
        cmocka_unit_test(test_per_addr),
        cmocka_unit_test(test_full_evicts),
        cmocka_unit_test(test_log_interval),
        cmocka_unit_test(test_many),
        cmocka_unit_test(test_alloc_fail),
        cmocka_unit_test(test_free_reply_pending),
        cmocka_unit_test(test_gone_at_deadline),
    };
    return cmocka_run_group_tests_name("httpguard", tests, NULL, NULL);
}
