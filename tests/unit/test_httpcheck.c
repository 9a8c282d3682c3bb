/* test_httpcheck.c - request framing read one way only (common/httpcheck.c):
 * every rule on header lists built as evhttp builds them, and the refusal
 * sent by a real evhttp server on loopback. */
#include "testutil.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rs_httpcheck.h"

/* Build a header list from "Name", "value" pairs, NULL-terminated. */
static struct evkeyvalq *
hdrs(const char *const *kv)
{
    struct evkeyvalq *h = malloc(sizeof(*h));
    assert_non_null(h);
    TAILQ_INIT(h);
    for (size_t i = 0; kv[i] != NULL; i += 2)
        assert_int_equal(evhttp_add_header(h, kv[i], kv[i + 1]), 0);
    return h;
}

static void
hdrs_free(struct evkeyvalq *h)
{
    evhttp_clear_headers(h);
    free(h);
}

struct row {
    const char *kv[9];
    int status;
    const char *why;     /* a part of the reason, or NULL */
};

static void
run_rows(const struct row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct evkeyvalq *h = hdrs(rows[i].kv);
        const char *why = "unset";
        int st = rs_httpcheck_framing(h, &why);
        if (st != rows[i].status)
            fail_msg("row %zu (%s: %s): status %d, want %d (%s)", i,
                     rows[i].kv[0] ? rows[i].kv[0] : "-",
                     rows[i].kv[1] ? rows[i].kv[1] : "-", st, rows[i].status,
                     why ? why : "no reason");
        if (st == 0)
            assert_null(why);
        else
            assert_non_null(why);
        if (rows[i].why != NULL && strstr(why, rows[i].why) == NULL)
            fail_msg("row %zu: reason \"%s\" lacks \"%s\"", i, why, rows[i].why);
        hdrs_free(h);
    }
}

/* httpcheck/plain_requests_pass: what clients send every day is read one
 * way only: one length, chunked alone, none, equal repeated lengths. */
static void
test_plain_requests_pass(void **state)
{
    (void)state;
    static const struct row rows[] = {
        { { NULL }, 0, NULL },
        { { "Host", "x", "Content-Length", "10", NULL }, 0, NULL },
        { { "content-length", "0", NULL }, 0, NULL },
        { { "Content-Length", "\t42 ", NULL }, 0, NULL },
        { { "Content-Length", "7", "Content-Length", "007", NULL }, 0, NULL },
        { { "Transfer-Encoding", "chunked", NULL }, 0, NULL },
        { { "transfer-encoding", " CHUNKED ", NULL }, 0, NULL },
        { { "X-Odd_Name!#$%&'*+.^`|~", "v", NULL }, 0, NULL },
        { { "Content-Length", "999999999999999999", NULL }, 0, NULL },
    };
    run_rows(rows, sizeof(rows) / sizeof(rows[0]));
}

/* httpcheck/content_length_faults: lengths two parsers could read
 * differently are 400: different values, signs, lists, blanks, a number
 * too long for evhttp's int64. */
static void
test_content_length_faults(void **state)
{
    (void)state;
    static const struct row rows[] = {
        { { "Content-Length", "10", "Content-Length", "5", NULL }, 400,
          "two different Content-Length" },
        { { "Content-Length", "5", "Host", "x", "content-length", "6", NULL },
          400, "two different" },
        { { "Content-Length", "+5", NULL }, 400, "not a number" },
        { { "Content-Length", "-1", NULL }, 400, "not a number" },
        { { "Content-Length", "5, 5", NULL }, 400, "not a number" },
        { { "Content-Length", "", NULL }, 400, "not a number" },
        { { "Content-Length", "0x10", NULL }, 400, "not a number" },
        { { "Content-Length", "5 5", NULL }, 400, "not a number" },
        { { "Content-Length", "1000000000000000000", NULL }, 400, "18 digits" },
    };
    run_rows(rows, sizeof(rows) / sizeof(rows[0]));
}

/* httpcheck/transfer_encoding_faults: TE with CL, TE twice, a list not
 * ending in chunked are 400; codings before chunked are 501 (evhttp
 * undoes chunked only). */
static void
test_transfer_encoding_faults(void **state)
{
    (void)state;
    static const struct row rows[] = {
        { { "Content-Length", "5", "Transfer-Encoding", "chunked", NULL }, 400,
          "both Content-Length and Transfer-Encoding" },
        { { "Transfer-Encoding", "chunked", "Content-Length", "5", NULL }, 400,
          "both" },
        { { "Transfer-Encoding", "chunked", "Transfer-Encoding", "chunked",
            NULL }, 400, "more than once" },
        { { "Transfer-Encoding", "gzip", NULL }, 400, "does not end in chunked" },
        { { "Transfer-Encoding", "chunked, gzip", NULL }, 400, "does not end" },
        { { "Transfer-Encoding", "", NULL }, 400, "does not end" },
        { { "Transfer-Encoding", "chunkedx", NULL }, 400, "does not end" },
        { { "Transfer-Encoding", "gzip, chunked", NULL }, 501, "only" },
        { { "Transfer-Encoding", "chunked, chunked", NULL }, 501, "only" },
        { { "Transfer-Encoding", "gzip;q=1 ,  Chunked ,", NULL }, 501, "only" },
        { { "Transfer-Encoding", "chunked;ext=1", NULL }, 501, "only" },
    };
    run_rows(rows, sizeof(rows) / sizeof(rows[0]));
}

/* httpcheck/names_and_hosts: a header name with a space (before the colon)
 * or another non-token character, or an empty one, is 400 whatever the
 * name; so is a second Host. */
static void
test_names_and_hosts(void **state)
{
    (void)state;
    static const struct row rows[] = {
        { { "Content-Length ", "3", NULL }, 400, "a space before the colon" },
        { { "Transfer-Encoding\t", "chunked", NULL }, 400, "header name" },
        { { " Content-Length", "3", NULL }, 400, "header name" },
        { { "X(y)", "1", NULL }, 400, "header name" },
        { { "", "1", NULL }, 400, "header name" },
        { { "X\x7f", "1", NULL }, 400, "header name" },
        { { "X\xc3\xa9", "1", NULL }, 400, "header name" },
        { { "Host", "a", "host", "b", NULL }, 400, "Host given more than once" },
    };
    run_rows(rows, sizeof(rows) / sizeof(rows[0]));
}

/* ------------------------------------------- the refusal on a real server */

struct srv {
    int handled;       /* requests the handler went past the check for */
    int refused;
};

static void
on_req(struct evhttp_request *req, void *arg)
{
    struct srv *s = arg;
    if (rs_httpcheck_refuse(req)) {
        s->refused++;
        return;
    }
    s->handled++;
    evhttp_send_reply(req, 200, "OK", NULL);
}

struct client {
    struct event_base *base;
    const char *send;
    char got[4096];
    size_t n;
    bool closed;
};

static void
on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct client *c = arg;
    if (what & EV_TIMEOUT) {
        event_base_loopbreak(c->base);
        return;
    }
    ssize_t r = read(fd, c->got + c->n, sizeof(c->got) - 1 - c->n);
    if (r <= 0) {
        c->closed = true;
        event_base_loopbreak(c->base);
        return;
    }
    c->n += (size_t)r;
    c->got[c->n] = '\0';
}

/* Send raw bytes to the server, read until it closes (or 2 s). */
static void
exchange(struct event_base *base, int port, struct client *c)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(write(fd, c->send, strlen(c->send)), (ssize_t)strlen(c->send));
    c->base = base;
    struct event *ev = event_new(base, fd, EV_READ | EV_PERSIST, on_readable, c);
    struct timeval tv = { 2, 0 };
    event_add(ev, &tv);
    event_base_dispatch(base);
    event_free(ev);
    close(fd);
}

/* httpcheck/refuse_answers_and_closes: a refused request gets its status,
 * a one-line reason and a closed connection, and the bytes after it are
 * never read as a request; a sound one reaches the handler. */
static void
test_refuse_answers_and_closes(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct evhttp *http = evhttp_new(base);
    struct srv s = { 0, 0 };
    evhttp_set_gencb(http, on_req, &s);
    struct evhttp_bound_socket *bs =
        evhttp_bind_socket_with_handle(http, "127.0.0.1", 0);
    assert_non_null(bs);
    struct sockaddr_in sin;
    socklen_t sl = sizeof(sin);
    assert_int_equal(getsockname(evhttp_bound_socket_get_fd(bs),
                                 (struct sockaddr *)&sin, &sl), 0);
    int port = ntohs(sin.sin_port);

    /* the second request hides in the first one's body as the first
     * Content-Length tells it */
    struct client c1 = { .send = "POST /a HTTP/1.1\r\nHost: x\r\n"
                                 "Content-Length: 0\r\nContent-Length: 38\r\n\r\n"
                                 "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n" };
    exchange(base, port, &c1);
    assert_true(c1.closed);
    assert_non_null(strstr(c1.got, "HTTP/1.1 400 Bad Request\r\n"));
    assert_non_null(strstr(c1.got, "Connection: close\r\n"));
    assert_non_null(strstr(c1.got, "\r\n\r\nerror: two different Content-Length values\n"));
    assert_null(strstr(c1.got + 12, "HTTP/1.1"));   /* one answer only */
    assert_int_equal(s.refused, 1);
    assert_int_equal(s.handled, 0);

    struct client c2 = { .send = "POST /a HTTP/1.1\r\nHost: x\r\n"
                                 "Transfer-Encoding: gzip, chunked\r\n\r\n"
                                 "0\r\n\r\n" };
    exchange(base, port, &c2);
    assert_true(c2.closed);
    assert_non_null(strstr(c2.got, "HTTP/1.1 501 Not Implemented\r\n"));
    assert_int_equal(s.refused, 2);

    struct client c3 = { .send = "POST /a HTTP/1.1\r\nHost: x\r\n"
                                 "Content-Length: 2\r\nConnection: close\r\n\r\nok" };
    exchange(base, port, &c3);
    assert_non_null(strstr(c3.got, "HTTP/1.1 200 OK\r\n"));
    assert_int_equal(s.handled, 1);
    assert_int_equal(s.refused, 2);

    evhttp_free(http);
    event_base_free(base);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_requests_pass),
        cmocka_unit_test(test_content_length_faults),
        cmocka_unit_test(test_transfer_encoding_faults),
        cmocka_unit_test(test_names_and_hosts),
        cmocka_unit_test(test_refuse_answers_and_closes),
    };
    return cmocka_run_group_tests_name("httpcheck", tests, NULL, NULL);
}
