/* test_fetch.c - rs_fetch against a scripted HTTP peer on 127.0.0.1:0 in a
 * thread: headers and body streaming, status mapping, limits, redirects,
 * timeouts, callback stops, allocation failures. */
#include "testutil.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rs_alloc.h"
#include "rs_fetch.h"

/* -------------------------------------------------------- scripted peer */

#define PEER_MAX_RESP 4

/* Serves responses[i] to the i-th connection (the last one repeats), or
 * holds every connection open without answering when stall is set. */
struct peer {
    int lfd;
    int port;
    pthread_t th;
    pthread_mutex_t mu;
    bool stop;
    bool stall;
    const char *responses[PEER_MAX_RESP];
    size_t nresp;
    int nconn;
    char last_req[4096];
};

static bool
peer_stopping(struct peer *p)
{
    pthread_mutex_lock(&p->mu);
    bool s = p->stop;
    pthread_mutex_unlock(&p->mu);
    return s;
}

static void
peer_serve(struct peer *p, int fd)
{
    char req[4096];
    size_t n = 0;
    /* Read the request head (GET has no body). */
    while (n < sizeof(req) - 1) {
        struct pollfd pfd = { fd, POLLIN, 0 };
        if (poll(&pfd, 1, 2000) <= 0)
            break;
        ssize_t r = read(fd, req + n, sizeof(req) - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        req[n] = '\0';
        if (strstr(req, "\r\n\r\n") != NULL)
            break;
    }
    req[n] = '\0';
    pthread_mutex_lock(&p->mu);
    int idx = p->nconn++;
    memcpy(p->last_req, req, n + 1);
    bool stall = p->stall;
    const char *resp = p->nresp == 0 ? ""
                       : p->responses[(size_t)idx < p->nresp ? (size_t)idx
                                                             : p->nresp - 1];
    pthread_mutex_unlock(&p->mu);
    if (stall) {
        /* Until the client gives up (or the test ends). */
        while (!peer_stopping(p)) {
            struct pollfd pfd = { fd, POLLIN, 0 };
            if (poll(&pfd, 1, 50) > 0) {
                char b[256];
                if (read(fd, b, sizeof(b)) <= 0)
                    break;
            }
        }
    } else {
        size_t len = strlen(resp), off = 0;
        while (off < len) {
            ssize_t w = send(fd, resp + off, len - off, MSG_NOSIGNAL);
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        shutdown(fd, SHUT_WR);
    }
    close(fd);
}

static void *
peer_main(void *arg)
{
    struct peer *p = arg;
    while (!peer_stopping(p)) {
        struct pollfd pfd = { p->lfd, POLLIN, 0 };
        if (poll(&pfd, 1, 50) <= 0)
            continue;
        int fd = accept(p->lfd, NULL, NULL);
        if (fd >= 0)
            peer_serve(p, fd);
    }
    return NULL;
}

static int
setup(void **state)
{
    struct peer *p = calloc(1, sizeof(*p));
    struct sockaddr_in sa = { .sin_family = AF_INET };
    socklen_t sl = sizeof(sa);
    if (p == NULL)
        return -1;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    p->lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (p->lfd < 0 || bind(p->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(p->lfd, 16) != 0 ||
        getsockname(p->lfd, (struct sockaddr *)&sa, &sl) != 0)
        return -1;
    p->port = ntohs(sa.sin_port);
    pthread_mutex_init(&p->mu, NULL);
    if (pthread_create(&p->th, NULL, peer_main, p) != 0)
        return -1;
    *state = p;
    return 0;
}

static int
teardown(void **state)
{
    struct peer *p = *state;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->th, NULL);
    close(p->lfd);
    pthread_mutex_destroy(&p->mu);
    free(p);
    return 0;
}

static void
peer_script(struct peer *p, const char *r0, const char *r1)
{
    pthread_mutex_lock(&p->mu);
    p->responses[0] = r0;
    p->responses[1] = r1;
    p->nresp = r1 != NULL ? 2 : 1;
    p->nconn = 0;
    pthread_mutex_unlock(&p->mu);
}

static int
peer_conns(struct peer *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->nconn;
    pthread_mutex_unlock(&p->mu);
    return n;
}

/* Does the last request hold s? */
static bool
peer_req_has(struct peer *p, const char *s)
{
    pthread_mutex_lock(&p->mu);
    bool has = strstr(p->last_req, s) != NULL;
    pthread_mutex_unlock(&p->mu);
    return has;
}

static const char *
peer_url(struct peer *p, const char *path)
{
    static char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", p->port, path);
    return url;
}

/* ------------------------------------------------------------- a sink */

struct sink {
    char buf[8192];
    size_t len;
    int calls;
    long status_seen;          /* res->status at the first call */
    bool type_seen;
    struct rs_fetch_result *res;
    int fail_with;             /* returned from the first call when set */
};

static int
on_body(void *ud, const char *buf, size_t len)
{
    struct sink *s = ud;
    if (s->calls++ == 0 && s->res != NULL) {
        s->status_seen = s->res->status;
        s->type_seen = s->res->content_type != NULL && s->res->url != NULL;
    }
    if (s->fail_with != 0)
        return s->fail_with;
    if (len > sizeof(s->buf) - s->len)
        len = sizeof(s->buf) - s->len;
    memcpy(s->buf + s->len, buf, len);
    s->len += len;
    return 0;
}

/* ---------------------------------------------------------------- tests */

/* fetch/ok_body_and_headers: a 200 body reaches the callback whole, after
 * status, URL and Content-Type are known; every Link field is kept raw;
 * the User-Agent and Accept asked for are sent. */
static void
test_ok_body_and_headers(void **state)
{
    struct peer *p = *state;
    peer_script(p, "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\n"
                   "Link: <http://a/cl.xml>; rel=\"resourcesync\"\r\n"
                   "link:   <http://a/x>; rel=\"license\", <y>; rel=z  \r\n"
                   "Content-Length: 11\r\nConnection: close\r\n\r\n"
                   "<urlset/>\r\n", NULL);
    struct rs_fetch_opts o = { .user_agent = "rsdoc-test/1",
                               .accept = "application/xml" };
    struct rs_fetch_result res;
    struct sink s = { .res = &res };
    assert_int_equal(rs_fetch(peer_url(p, "/doc.xml"), &o, on_body, &s, &res), 0);
    assert_int_equal(res.status, 200);
    assert_string_equal(res.url, peer_url(p, "/doc.xml"));
    assert_string_equal(res.content_type, "application/xml");
    assert_int_equal(res.content_length, 11);
    assert_int_equal(res.body_bytes, 11);
    assert_int_equal(res.nlinks, 2);
    assert_string_equal(res.links[0], "<http://a/cl.xml>; rel=\"resourcesync\"");
    assert_string_equal(res.links[1], "<http://a/x>; rel=\"license\", <y>; rel=z");
    assert_string_equal(res.errstr, "");
    assert_int_equal(s.len, 11);
    assert_memory_equal(s.buf, "<urlset/>\r\n", 11);
    assert_int_equal(s.status_seen, 200);
    assert_true(s.type_seen);
    assert_true(peer_req_has(p, "User-Agent: rsdoc-test/1\r\n"));
    assert_true(peer_req_has(p, "Accept: application/xml\r\n"));
    rs_fetch_result_cleanup(&res);
    rs_fetch_result_cleanup(&res);
    rs_fetch_result_cleanup(NULL);
}

/* fetch/redirect_final_headers: after a redirect only the final response's
 * Link fields and Content-Type remain, and the final URL is reported. */
static void
test_redirect_final_headers(void **state)
{
    struct peer *p = *state;
    peer_script(p, "HTTP/1.1 302 Found\r\nLocation: /moved.xml\r\n"
                   "Link: <http://a/old>; rel=\"resourcesync\"\r\n"
                   "Content-Type: text/html\r\nContent-Length: 3\r\n"
                   "Connection: close\r\n\r\nold",
                "HTTP/1.1 200 OK\r\nLink: <http://a/new>; rel=\"up\"\r\n"
                "Connection: close\r\n\r\nnew body");
    struct rs_fetch_result res;
    struct sink s = { .res = &res };
    assert_int_equal(rs_fetch(peer_url(p, "/start"), NULL, on_body, &s, &res), 0);
    assert_string_equal(res.url, peer_url(p, "/moved.xml"));
    assert_int_equal(res.redirects, 1);
    assert_int_equal(res.nlinks, 1);
    assert_string_equal(res.links[0], "<http://a/new>; rel=\"up\"");
    assert_null(res.content_type);
    assert_int_equal(res.content_length, -1);
    assert_int_equal(s.len, 8);
    assert_memory_equal(s.buf, "new body", 8);
    rs_fetch_result_cleanup(&res);
}

/* fetch/not_found: 404 and 410 are RS_ENOTFOUND with the status line in
 * errstr; the error page never reaches the callback. */
static void
test_not_found(void **state)
{
    struct peer *p = *state;
    struct rs_fetch_result res;
    struct sink s = { .res = &res };
    peer_script(p, "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n"
                   "Connection: close\r\n\r\nno such x", NULL);
    assert_int_equal(rs_fetch(peer_url(p, "/x"), NULL, on_body, &s, &res),
                     RS_ENOTFOUND);
    assert_int_equal(res.status, 404);
    assert_string_equal(res.errstr, "HTTP 404 Not Found");
    assert_int_equal(s.calls, 0);
    rs_fetch_result_cleanup(&res);

    peer_script(p, "HTTP/1.1 410 Gone\r\nConnection: close\r\n\r\n", NULL);
    assert_int_equal(rs_fetch(peer_url(p, "/x"), NULL, on_body, &s, &res),
                     RS_ENOTFOUND);
    assert_string_equal(res.errstr, "HTTP 410 Gone");
    rs_fetch_result_cleanup(&res);
}

/* fetch/status_error: any other non-2xx is RS_EPROTO with its status. */
static void
test_status_error(void **state)
{
    struct peer *p = *state;
    struct rs_fetch_result res;
    peer_script(p, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n"
                   "Connection: close\r\n\r\nbusy", NULL);
    assert_int_equal(rs_fetch(peer_url(p, "/x"), NULL, NULL, NULL, &res),
                     RS_EPROTO);
    assert_int_equal(res.status, 503);
    assert_string_equal(res.errstr, "HTTP 503 Service Unavailable");
    rs_fetch_result_cleanup(&res);
}

/* fetch/too_big_announced: a Content-Length over the limit fails before
 * any body byte is delivered. */
static void
test_too_big_announced(void **state)
{
    struct peer *p = *state;
    static char resp[2048];
    snprintf(resp, sizeof(resp), "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n"
             "Connection: close\r\n\r\n%01000d", 0);
    peer_script(p, resp, NULL);
    struct rs_fetch_opts o = { .max_bytes = 100 };
    struct rs_fetch_result res;
    struct sink s = { .res = &res };
    assert_int_equal(rs_fetch(peer_url(p, "/big"), &o, on_body, &s, &res),
                     RS_ETOOBIG);
    assert_int_equal(s.calls, 0);
    assert_non_null(strstr(res.errstr, "Content-Length 1000 exceeds the limit "
                                       "of 100 bytes"));
    rs_fetch_result_cleanup(&res);
}

/* fetch/too_big_streamed: without Content-Length the body is cut at the
 * limit: the callback never sees more than max_bytes. */
static void
test_too_big_streamed(void **state)
{
    struct peer *p = *state;
    static char resp[2048];
    snprintf(resp, sizeof(resp), "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"
             "%01000d", 0);
    peer_script(p, resp, NULL);
    struct rs_fetch_opts o = { .max_bytes = 100 };
    struct rs_fetch_result res;
    struct sink s = { .res = &res };
    assert_int_equal(rs_fetch(peer_url(p, "/big"), &o, on_body, &s, &res),
                     RS_ETOOBIG);
    assert_true(s.len <= 100);
    assert_true(res.body_bytes <= 100);
    assert_non_null(strstr(res.errstr, "too large"));
    rs_fetch_result_cleanup(&res);

    o.max_bytes = 1000;    /* exactly at the limit is fine */
    assert_int_equal(rs_fetch(peer_url(p, "/big"), &o, NULL, NULL, &res), 0);
    assert_int_equal(res.body_bytes, 1000);
    rs_fetch_result_cleanup(&res);
}

/* fetch/redirect_loop: redirects stop at max_redirects with a clear
 * error, after max_redirects + 1 requests. */
static void
test_redirect_loop(void **state)
{
    struct peer *p = *state;
    peer_script(p, "HTTP/1.1 302 Found\r\nLocation: /loop\r\n"
                   "Content-Length: 0\r\nConnection: close\r\n\r\n", NULL);
    struct rs_fetch_opts o = { .max_redirects = 3 };
    struct rs_fetch_result res;
    assert_int_equal(rs_fetch(peer_url(p, "/loop"), &o, NULL, NULL, &res),
                     RS_EPROTO);
    assert_string_equal(res.errstr, "too many redirects (more than 3)");
    assert_int_equal(peer_conns(p), 4);
    rs_fetch_result_cleanup(&res);

    o.max_redirects = -1;   /* not followed: the 3xx is the answer */
    assert_int_equal(rs_fetch(peer_url(p, "/loop"), &o, NULL, NULL, &res),
                     RS_EPROTO);
    assert_int_equal(res.status, 302);
    assert_string_equal(res.errstr, "HTTP 302 Found");
    rs_fetch_result_cleanup(&res);
}

/* fetch/redirect_scheme_refused: a redirect to file:// (or any scheme but
 * http and https) is refused, never followed. */
static void
test_redirect_scheme_refused(void **state)
{
    struct peer *p = *state;
    peer_script(p, "HTTP/1.1 302 Found\r\nLocation: file:///etc/passwd\r\n"
                   "Content-Length: 0\r\nConnection: close\r\n\r\n", NULL);
    struct rs_fetch_result res;
    struct sink s = { .res = &res };
    assert_int_equal(rs_fetch(peer_url(p, "/x"), NULL, on_body, &s, &res),
                     RS_EUNSUPPORTED);
    assert_int_equal(s.calls, 0);
    assert_non_null(strstr(res.errstr, "non-http(s)"));
    rs_fetch_result_cleanup(&res);
}

/* fetch/timeout: a peer that never answers hits the total timeout. */
static void
test_timeout(void **state)
{
    struct peer *p = *state;
    pthread_mutex_lock(&p->mu);
    p->stall = true;
    pthread_mutex_unlock(&p->mu);
    struct rs_fetch_opts o = { .timeout_ms = 300 };
    struct rs_fetch_result res;
    assert_int_equal(rs_fetch(peer_url(p, "/slow"), &o, NULL, NULL, &res),
                     RS_ETIMEDOUT);
    assert_non_null(strstr(res.errstr, "timed out"));
    rs_fetch_result_cleanup(&res);
}

/* fetch/connect_refused: nobody listening is RS_EIO, with words. */
static void
test_connect_refused(void **state)
{
    (void)state;
    struct rs_fetch_result res;
    assert_int_equal(rs_fetch("http://127.0.0.1:1/x", NULL, NULL, NULL, &res),
                     RS_EIO);
    assert_non_null(strstr(res.errstr, "cannot connect"));
    assert_int_equal(res.status, 0);
    rs_fetch_result_cleanup(&res);
}

/* fetch/callback_stops: a negative callback value is returned as is, a
 * positive one as RS_ESTOPPED; the transfer ends there. */
static void
test_callback_stops(void **state)
{
    struct peer *p = *state;
    peer_script(p, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nbody", NULL);
    struct rs_fetch_result res;
    struct sink s = { .res = &res, .fail_with = RS_EINVALID };
    assert_int_equal(rs_fetch(peer_url(p, "/x"), NULL, on_body, &s, &res),
                     RS_EINVALID);
    assert_int_equal(s.calls, 1);
    rs_fetch_result_cleanup(&res);
    struct sink s2 = { .res = &res, .fail_with = 1 };
    assert_int_equal(rs_fetch(peer_url(p, "/x"), NULL, on_body, &s2, &res),
                     RS_ESTOPPED);
    rs_fetch_result_cleanup(&res);
}

/* fetch/bad_url: only absolute http(s) URLs are fetched. */
static void
test_bad_url(void **state)
{
    (void)state;
    struct rs_fetch_result res;
    assert_int_equal(rs_fetch("ftp://127.0.0.1/x", NULL, NULL, NULL, &res),
                     RS_EINVAL);
    assert_non_null(strstr(res.errstr, "not an absolute http(s) URL"));
    rs_fetch_result_cleanup(&res);
    assert_int_equal(rs_fetch("/relative", NULL, NULL, NULL, &res), RS_EINVAL);
    rs_fetch_result_cleanup(&res);
    assert_int_equal(rs_fetch(NULL, NULL, NULL, NULL, &res), RS_EINVAL);
    rs_fetch_result_cleanup(&res);
}

/* fetch/alloc_failures: failing each of our allocations in turn gives an
 * error (or success), never a crash or a leak. */
static void
test_alloc_failures(void **state)
{
    struct peer *p = *state;
    peer_script(p, "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\n"
                   "Link: <a>; rel=b\r\nLink: <c>; rel=d\r\n"
                   "Connection: close\r\n\r\nbody", NULL);
    struct rs_fetch_result res;
    unsigned long n;
    for (n = 1; n < 100; n++) {
        tu_alloc_fail_at(n);
        int rc = rs_fetch(peer_url(p, "/x"), NULL, NULL, NULL, &res);
        unsigned long seen = tu_alloc_count();
        tu_alloc_fail_at(0);
        rs_fetch_result_cleanup(&res);
        if (seen < n) {
            assert_int_equal(rc, 0);   /* ran out of allocations to fail */
            break;
        }
        assert_int_equal(rc, RS_ENOMEM);
    }
    assert_true(n > 3);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ok_body_and_headers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_redirect_final_headers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_found, setup, teardown),
        cmocka_unit_test_setup_teardown(test_status_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_too_big_announced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_too_big_streamed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_redirect_loop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_redirect_scheme_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
        cmocka_unit_test(test_connect_refused),
        cmocka_unit_test_setup_teardown(test_callback_stops, setup, teardown),
        cmocka_unit_test(test_bad_url),
        cmocka_unit_test_setup_teardown(test_alloc_failures, setup, teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests_name("fetch", tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
