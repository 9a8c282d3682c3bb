/* tu_httpd.c - the loop, route server and raw peer the HTTP client tests
 * run on (tu_httpd.h). What a test serves is its own; this file only
 * answers, counts and cleans up. */
#include "tu_httpd.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "rs_http.h"

/* ---------------------------------------------------------------- loop */

static void
loop_on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    struct tu_loop *l = arg;
    (void)fd;
    (void)what;
    l->expired = true;
}

/* Nothing to do: its firing ends a turn, so a wait sees a condition
 * another thread set (a client thread's "done") within TU_LOOP_TICK_MS,
 * not when the watchdog fires. */
static void
loop_on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

void
tu_loop_init(struct tu_loop *l)
{
    l->base = event_base_new();
    assert_non_null(l->base);
    l->watchdog = evtimer_new(l->base, loop_on_watchdog, l);
    assert_non_null(l->watchdog);
    l->tick = event_new(l->base, -1, EV_PERSIST, loop_on_tick, l);
    assert_non_null(l->tick);
    l->expired = false;
}

void
tu_loop_settle(struct tu_loop *l)
{
    for (int i = 0; i < 4; i++)
        event_base_loop(l->base, EVLOOP_NONBLOCK);
}

void
tu_loop_cleanup(struct tu_loop *l)
{
    tu_loop_settle(l);
    assert_int_equal(event_base_get_num_events(l->base,
                                               EVENT_BASE_COUNT_ADDED |
                                                   EVENT_BASE_COUNT_ACTIVE),
                     0);
    event_free(l->watchdog);
    l->watchdog = NULL;
    event_free(l->tick);
    l->tick = NULL;
    /* 1: no events at all, not even virtual ones (the count above leaves
     * those out) */
    assert_int_equal(event_base_loop(l->base, EVLOOP_NONBLOCK), 1);
    event_base_free(l->base);
    l->base = NULL;
}

void
tu_loop_arm(struct tu_loop *l, unsigned ms)
{
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    struct timeval tick = { 0, TU_LOOP_TICK_MS * 1000 };
    l->expired = false;
    assert_int_equal(event_add(l->watchdog, &tv), 0);
    assert_int_equal(event_add(l->tick, &tick), 0);
}

void
tu_loop_disarm(struct tu_loop *l)
{
    event_del(l->watchdog);
    event_del(l->tick);
}

void
tu_loop_run_for(struct tu_loop *l, unsigned ms)
{
    tu_loop_arm(l, ms);
    while (!l->expired)
        event_base_loop(l->base, EVLOOP_ONCE);
    tu_loop_disarm(l);
}

void
tu_loop_drain(struct tu_loop *l, struct rs_http *h, unsigned ms)
{
    struct rs_http_stats st;

    tu_loop_arm(l, ms);
    for (;;) {
        rs_http_stats(h, &st);
        if (st.in_flight == 0 || l->expired)
            break;
        event_base_loop(l->base, EVLOOP_ONCE);
    }
    tu_loop_disarm(l);
    assert_int_equal(st.in_flight, 0);
}

/* -------------------------------------------------------------- server */

char *
tu_httpd_expand(const struct tu_httpd *s, const char *tmpl, size_t *len)
{
    size_t blen = strlen(s->origin), n = 0, cap = strlen(tmpl) + 1;
    const char *p;
    char *out;

    /* by hand: ASan's strstr measures the whole rest each time */
    for (p = tmpl; *p != '\0'; p++)
        if (p[0] == '{' && p[1] == 'B' && p[2] == '}')
            cap += blen;
    out = malloc(cap);
    assert_non_null(out);
    for (p = tmpl; *p != '\0';) {
        if (p[0] == '{' && p[1] == 'B' && p[2] == '}') {
            memcpy(out + n, s->origin, blen);
            n += blen;
            p += 3;
        } else {
            out[n++] = *p++;
        }
    }
    out[n] = '\0';
    if (len != NULL)
        *len = n;
    return out;
}

const char *
tu_httpd_url(struct tu_httpd *s, const char *path)
{
    s->url_which ^= 1;
    snprintf(s->url[s->url_which], sizeof(s->url[0]), "%s%s", s->origin,
             path);
    return s->url[s->url_which];
}

struct tu_route *
tu_httpd_add(struct tu_httpd *s, const char *path, int status,
             const char *headers, const char *body)
{
    struct tu_route *r;

    assert_true(s->nroutes < TU_HTTPD_ROUTES);
    r = &s->routes[s->nroutes++];
    memset(r, 0, sizeof(*r));
    snprintf(r->path, sizeof(r->path), "%s", path);
    r->status = status;
    r->headers = headers != NULL ? tu_httpd_expand(s, headers, NULL) : NULL;
    r->body = tu_httpd_expand(s, body != NULL ? body : "", &r->body_len);
    return r;
}

void
tu_httpd_fail(struct tu_httpd *s, struct tu_route *r, unsigned n, int status,
              const char *headers)
{
    r->fail_n = n;
    r->fail_status = status;
    free(r->fail_headers);
    r->fail_headers = headers != NULL ? tu_httpd_expand(s, headers, NULL)
                                      : NULL;
}

/* The first route matching path, or NULL. */
static struct tu_route *
httpd_find(struct tu_httpd *s, const char *path)
{
    for (size_t i = 0; i < s->nroutes; i++) {
        struct tu_route *r = &s->routes[i];
        if (r->prefix ? strncmp(r->path, path, strlen(r->path)) == 0
                      : strcmp(r->path, path) == 0)
            return r;
    }
    return NULL;
}

unsigned
tu_httpd_hits(struct tu_httpd *s, const char *path)
{
    struct tu_route *r = httpd_find(s, path);
    assert_non_null(r);
    return r != NULL ? r->hits : 0;     /* cmocka's assert may return */
}

static void
httpd_add_headers(struct evkeyvalq *out, const char *lines)
{
    char name[128], value[512];
    const char *p = lines, *colon, *eol;

    while (p != NULL && *p != '\0') {
        eol = strchr(p, '\n');
        if (eol == NULL)
            eol = p + strlen(p);
        colon = memchr(p, ':', (size_t)(eol - p));
        assert_non_null(colon);
        snprintf(name, sizeof(name), "%.*s", (int)(colon - p), p);
        colon++;
        while (*colon == ' ')
            colon++;
        snprintf(value, sizeof(value), "%.*s", (int)(eol - colon), colon);
        evhttp_add_header(out, name, value);
        p = *eol == '\n' ? eol + 1 : eol;
    }
}

static void
httpd_send(struct evhttp_request *req, int status, const char *body,
           size_t len)
{
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    evbuffer_add(b, body, len);
    evhttp_send_reply(req, status, status == 200 ? "OK" : "Status", b);
    evbuffer_free(b);
}

/* The client hung up during a paced reply: no more slices. */
static void
httpd_pacer_closed(struct evhttp_connection *evcon, void *arg)
{
    struct tu_httpd *s = arg;

    if (s->pacer.active &&
        evhttp_request_get_connection(s->pacer.req) == evcon) {
        evtimer_del(s->pacer.ev);
        s->pacer.active = false;
        /* the request is ours until ended: with its connection gone,
         * ending it frees it */
        evhttp_send_reply_end(s->pacer.req);
    }
}

/* The next slice of a paced reply; the client reads between slices. */
static void
httpd_pacer_tick(evutil_socket_t fd, short what, void *arg)
{
    struct tu_httpd *s = arg;
    const struct tu_route *r = s->pacer.r;
    size_t n = r->body_len - s->pacer.off < r->pace
                   ? r->body_len - s->pacer.off
                   : r->pace;
    struct evbuffer *b = evbuffer_new();
    struct timeval tv = { 0, 2000 };

    (void)fd;
    (void)what;
    assert_non_null(b);
    evbuffer_add(b, r->body + s->pacer.off, n);
    evhttp_send_reply_chunk(s->pacer.req, b);
    evbuffer_free(b);
    s->pacer.off += n;
    if (s->pacer.off < r->body_len) {
        evtimer_add(s->pacer.ev, &tv);
        return;
    }
    if (s->on_paced_end != NULL)
        s->on_paced_end(s->ud);
    evhttp_send_reply_end(s->pacer.req);
    s->pacer.active = false;
}

static void
httpd_on_request(struct evhttp_request *req, void *arg)
{
    struct tu_httpd *s = arg;
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    const char *acc;
    struct tu_route *r;

    s->requests++;
    acc = evhttp_find_header(evhttp_request_get_input_headers(req), "Accept");
    snprintf(s->accept, sizeof(s->accept), "%s", acc != NULL ? acc : "");
    acc = evhttp_find_header(evhttp_request_get_input_headers(req),
                             "If-None-Match");
    snprintf(s->inm, sizeof(s->inm), "%s", acc != NULL ? acc : "");
    r = httpd_find(s, path != NULL ? path : "/");
    if (r == NULL) {
        s->misses++;
        httpd_send(req, 404, "no such route", 13);
        return;
    }
    r->hits++;
    if (r->hits <= r->fail_n) {
        httpd_add_headers(out, r->fail_headers);
        httpd_send(req, r->fail_status, "failing", 7);
        return;
    }
    if (r->never)
        return;                 /* evhttp frees it with its connection */
    if (s->default_ctype != NULL &&
        (r->headers == NULL || strstr(r->headers, "Content-Type") == NULL))
        evhttp_add_header(out, "Content-Type", s->default_ctype);
    httpd_add_headers(out, r->headers);
    if (r->pace > 0) {
        assert_false(s->pacer.active);
        s->pacer.active = true;
        s->pacer.req = req;
        s->pacer.r = r;
        s->pacer.off = 0;
        evhttp_connection_set_closecb(evhttp_request_get_connection(req),
                                      httpd_pacer_closed, s);
        evhttp_send_reply_start(req, 200, "OK");
        httpd_pacer_tick(-1, 0, s);
        return;
    }
    httpd_send(req, r->status ? r->status : 200, r->body, r->body_len);
}

int
tu_httpd_listen(struct evhttp *http)
{
    struct evhttp_bound_socket *bs;
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);

    bs = evhttp_bind_socket_with_handle(http, "127.0.0.1", 0);
    assert_non_null(bs);
    assert_int_equal(getsockname(evhttp_bound_socket_get_fd(bs),
                                 (struct sockaddr *)&sa, &len), 0);
    return ntohs(sa.sin_port);
}

struct tu_httpd *
tu_httpd_new(struct event_base *base)
{
    struct tu_httpd *s = calloc(1, sizeof(*s));

    assert_non_null(s);
    s->http = evhttp_new(base);
    assert_non_null(s->http);
    evhttp_set_gencb(s->http, httpd_on_request, s);
    s->port = tu_httpd_listen(s->http);
    snprintf(s->origin, sizeof(s->origin), "http://127.0.0.1:%d", s->port);
    s->pacer.ev = evtimer_new(base, httpd_pacer_tick, s);
    assert_non_null(s->pacer.ev);
    return s;
}

void
tu_httpd_free(struct tu_httpd *s)
{
    if (s == NULL)
        return;
    /* a paced reply still going: ended, so that evhttp frees it */
    if (s->pacer.active) {
        evtimer_del(s->pacer.ev);
        evhttp_send_reply_end(s->pacer.req);
        s->pacer.active = false;
    }
    event_free(s->pacer.ev);
    evhttp_free(s->http);
    for (size_t i = 0; i < s->nroutes; i++) {
        free(s->routes[i].headers);
        free(s->routes[i].body);
        free(s->routes[i].fail_headers);
    }
    free(s);
}

/* ------------------------------------------------------------ raw peer */

static void
raw_on_write(struct bufferevent *bev, void *arg)
{
    (void)arg;
    /* All written: hang up (mid-body, for a body announced longer). */
    bufferevent_disable(bev, EV_READ | EV_WRITE);
    shutdown(bufferevent_getfd(bev), SHUT_RDWR);
}

static void
raw_on_read(struct bufferevent *bev, void *arg)
{
    struct tu_raw *r = arg;
    struct evbuffer *in = bufferevent_get_input(bev);

    if (evbuffer_search(in, "\r\n\r\n", 4, NULL).pos < 0)
        return;
    evbuffer_drain(in, evbuffer_get_length(in));
    if (r->reply == NULL)
        return;                 /* a peer that never answers */
    bufferevent_setcb(bev, NULL, raw_on_write, NULL, r);
    bufferevent_write(bev, r->reply, r->reply_len);
}

static void
raw_on_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    (void)what;
    (void)arg;
}

static void
raw_on_accept(struct evconnlistener *lis, evutil_socket_t fd,
              struct sockaddr *sa, int len, void *arg)
{
    struct tu_raw *r = arg;
    struct bufferevent *bev;

    (void)sa;
    (void)len;
    bev = bufferevent_socket_new(evconnlistener_get_base(lis), fd,
                                 BEV_OPT_CLOSE_ON_FREE);
    assert_non_null(bev);
    assert_true(r->nbevs < TU_RAW_CONNS);
    r->bevs[r->nbevs++] = bev;
    r->accepts++;
    bufferevent_setcb(bev, raw_on_read, NULL, raw_on_event, r);
    bufferevent_enable(bev, EV_READ);
}

struct tu_raw *
tu_raw_new(struct event_base *base, const char *reply, size_t len)
{
    struct tu_raw *r = calloc(1, sizeof(*r));
    struct sockaddr_in sa;
    socklen_t slen = sizeof(sa);

    assert_non_null(r);
    if (reply != NULL) {
        r->reply = malloc(len > 0 ? len : 1);
        assert_non_null(r->reply);
        memcpy(r->reply, reply, len);
        r->reply_len = len;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    r->lis = evconnlistener_new_bind(base, raw_on_accept, r,
                                     LEV_OPT_CLOSE_ON_FREE |
                                         LEV_OPT_REUSEABLE,
                                     16, (struct sockaddr *)&sa, sizeof(sa));
    assert_non_null(r->lis);
    assert_int_equal(getsockname(evconnlistener_get_fd(r->lis),
                                 (struct sockaddr *)&sa, &slen), 0);
    r->port = ntohs(sa.sin_port);
    return r;
}

void
tu_raw_free(struct tu_raw *r)
{
    if (r == NULL)
        return;
    for (unsigned i = 0; i < r->nbevs; i++)
        bufferevent_free(r->bevs[i]);
    evconnlistener_free(r->lis);
    free(r->reply);
    free(r);
}
