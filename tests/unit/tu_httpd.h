/*
 * tu_httpd.h - what the unit tests of HTTP clients run on: an event loop
 * with a watchdog that turns a hang into a failure (tu_loop), an evhttp
 * server on 127.0.0.1 answering from a per-test route table and counting
 * requests (tu_httpd), and a raw TCP peer for replies evhttp will not send
 * (tu_raw). The tests own these objects; nothing here is global.
 */
#ifndef RS_TU_HTTPD_H
#define RS_TU_HTTPD_H

#include <stdbool.h>
#include <stddef.h>

#include <event2/event.h>

#include "testutil.h"

struct bufferevent;
struct evconnlistener;
struct evhttp;
struct evhttp_request;
struct rs_http;

/* ---------------------------------------------------------------- loop */

/* While armed, the loop turns at least this often (see tu_loop_arm). */
#define TU_LOOP_TICK_MS 10

/* An event_base and the timer that bounds every wait on it. */
struct tu_loop {
    struct event_base *base;
    struct event *watchdog;
    struct event *tick;         /* ends a turn every TU_LOOP_TICK_MS */
    bool expired;               /* the watchdog fired since tu_loop_arm */
};

/* A new base and watchdog (the test fails if they cannot be made). */
void tu_loop_init(struct tu_loop *l);

/* Settle (below), then assert that the loop holds nothing at all, and free
 * it: whatever the test put on the loop must be gone by now. */
void tu_loop_cleanup(struct tu_loop *l);

/* A few non-blocking turns: libevent frees a bufferevent (the peers'
 * connections) through a finalizer that runs on the loop's next turn. */
void tu_loop_settle(struct tu_loop *l);

/* Start the watchdog: expired turns true after ms. Until disarmed, a
 * tick also ends a turn every TU_LOOP_TICK_MS, so that a wait notices a
 * condition another thread set. */
void tu_loop_arm(struct tu_loop *l, unsigned ms);
void tu_loop_disarm(struct tu_loop *l);

/* Run the loop for ms, whatever happens. */
void tu_loop_run_for(struct tu_loop *l, unsigned ms);

/* Run the loop until the client h has nothing in flight (a cancelled
 * request's on_done runs from the loop); a hang fails after ms. */
void tu_loop_drain(struct tu_loop *l, struct rs_http *h, unsigned ms);

/* Run l's loop until cond holds; the watchdog turns a hang into a failure
 * after ms. */
#define TU_LOOP_UNTIL(l, cond, ms)                                          \
    do {                                                                    \
        tu_loop_arm((l), (ms));                                             \
        while (!(cond) && !(l)->expired)                                    \
            event_base_loop((l)->base, EVLOOP_ONCE);                        \
        tu_loop_disarm(l);                                                  \
        assert_true(cond);                                                  \
    } while (0)

/* -------------------------------------------------------------- server */

#define TU_HTTPD_ROUTES 32

/* One path (or path prefix) the server answers. Strings are expanded ({B})
 * and owned by the server; the test may set the flags after adding it. */
struct tu_route {
    char path[128];
    bool prefix;                /* path is a prefix */
    int status;                 /* 0 = 200 */
    char *headers;              /* "Name: value\n"..., or NULL */
    char *body;
    size_t body_len;
    unsigned fail_n;            /* the first fail_n requests get: */
    int fail_status;
    char *fail_headers;
    bool never;                 /* never answer (the client times out) */
    size_t pace;                /* > 0: chunked, this many bytes a tick */
    unsigned hits;              /* requests for it, failed ones too */
};

/* The last byte of a paced reply is queued (the client has not read it). */
typedef void (*tu_httpd_paced_end_cb)(void *ud);

struct tu_httpd {
    struct evhttp *http;
    int port;
    char origin[64];            /* http://127.0.0.1:PORT, what {B} means */
    /* Content-Type of a route whose headers name none; NULL: none */
    const char *default_ctype;
    struct tu_route routes[TU_HTTPD_ROUTES];
    size_t nroutes;
    unsigned requests;          /* all requests */
    unsigned misses;            /* requests for paths not in the table */
    char accept[128];           /* the last request's Accept */
    char inm[128];              /* ... and If-None-Match ("": none) */
    tu_httpd_paced_end_cb on_paced_end;     /* or NULL */
    void *ud;                   /* for on_paced_end */
    /* private: the paced reply in progress (one at most) */
    struct {
        struct event *ev;
        struct evhttp_request *req;
        const struct tu_route *r;
        size_t off;
        bool active;
    } pacer;
    char url[2][256];           /* tu_httpd_url's buffers */
    int url_which;
};

/* Bind http to 127.0.0.1 on a port of the kernel's choosing, and return
 * the port: for a test that programs its own evhttp server. */
int tu_httpd_listen(struct evhttp *http);

/* A server bound to 127.0.0.1 on a port of the kernel's choosing, serving
 * on base; free with tu_httpd_free, which closes its connections (and
 * with them the requests it never answered). tu_httpd_free(NULL) is a
 * no-op. */
struct tu_httpd *tu_httpd_new(struct event_base *base);
void tu_httpd_free(struct tu_httpd *s);

/* Answer path with status (0 = 200), headers ("Name: value" lines, or
 * NULL) and body (NULL = empty), each with {B} expanded. The route stays
 * valid until tu_httpd_free. */
struct tu_route *tu_httpd_add(struct tu_httpd *s, const char *path,
                              int status, const char *headers,
                              const char *body);

/* Fail the first n requests for r with status (and headers, or NULL). */
void tu_httpd_fail(struct tu_httpd *s, struct tu_route *r, unsigned n,
                   int status, const char *headers);

/* The hits of the route for path, which must exist. */
unsigned tu_httpd_hits(struct tu_httpd *s, const char *path);

/* "{B}path" in one of two buffers in s, so that two can be compared; each
 * call overwrites the older one. */
const char *tu_httpd_url(struct tu_httpd *s, const char *path);

/* tmpl with every {B} replaced by s->origin; malloc'ed, len (if not NULL)
 * set to its length. */
char *tu_httpd_expand(const struct tu_httpd *s, const char *tmpl,
                      size_t *len);

/* ------------------------------------------------------------ raw peer */

#define TU_RAW_CONNS 16

/* Reads one request head a connection, writes the reply and hangs up:
 * for garbage, bodies cut short, headers evhttp will not write. */
struct tu_raw {
    struct evconnlistener *lis;
    int port;
    unsigned accepts;           /* connections accepted */
    char *reply;                /* NULL: read, never answer */
    size_t reply_len;
    struct bufferevent *bevs[TU_RAW_CONNS];
    unsigned nbevs;
};

/* A raw peer on 127.0.0.1 answering every request with a copy of reply
 * (len bytes; NULL: no answer at all). tu_raw_free(NULL) is a no-op. */
struct tu_raw *tu_raw_new(struct event_base *base, const char *reply,
                          size_t len);
void tu_raw_free(struct tu_raw *r);

#endif
