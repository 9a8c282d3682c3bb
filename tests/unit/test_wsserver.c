/* test_wsserver.c - the hub's WebSocket protocol (hub/wsserver.c, RFC 6455)
 * through real sockets on loopback: the upgrade handshake and its
 * refusals, the client frames it must fail (1002, 1007) and those it must
 * take, pings, the close handshake, and what it tells the main loop. */
#include "testutil.h"

#include <arpa/inet.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "wsserver.h"

struct fx {
    struct event_base *base;
    struct seam_sink to_main;      /* events delivered on the loop... */
    struct seam_ev *evs[64];       /* ...kept here, oldest first */
    size_t nevs;
    struct ws_server *ws;
    int port;
    bool hold;                     /* do not answer JOINs with an ATTACH */
};

/* Attach a client live, as fanout.c does for a JOIN without since. */
static void
fx_attach(struct fx *f, const struct seam_ev *join)
{
    struct seam_ev *at = seam_ev_new(SEAM_ATTACH);
    assert_non_null(at);
    at->client = join->client;
    at->chan = 0;
    at->flag = false;
    assert_true(ws_server_post(f->ws, join->thread, at) >= 0);
}

static void
on_events(void *ud, struct seam_ev *ev)
{
    struct fx *f = ud;
    while (ev != NULL) {
        struct seam_ev *next = seam_ev_next(ev);
        assert_true(f->nevs < sizeof(f->evs) / sizeof(f->evs[0]));
        if (ev->type == SEAM_JOIN && !f->hold)
            fx_attach(f, ev);
        f->evs[f->nevs++] = ev;
        ev = next;
    }
}

static void
fx_free_events(struct fx *f)
{
    for (size_t i = 0; i < f->nevs; i++)
        seam_ev_free(f->evs[i]);
    f->nevs = 0;
}

static int
setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->base = event_base_new();
    assert_non_null(f->base);
    f->to_main.cb = on_events;
    f->to_main.ud = f;
    struct ws_server_opts o = {
        .base = f->base,
        .host = "127.0.0.1",
        .threads = 1,
        .to_main = &f->to_main,
    };
    const char *err = NULL;
    f->ws = ws_server_new(&o, &err);
    assert_non_null(f->ws);
    f->port = ws_server_port(f->ws);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    ws_server_free(f->ws, 0);
    fx_free_events(f);
    /* nothing of ours is left on the loop */
    assert_int_equal(event_base_get_num_events(f->base, EVENT_BASE_COUNT_ADDED), 0);
    event_base_free(f->base);
    free(f);
    return 0;
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The oldest event the service thread sent, the loop turning meanwhile;
 * NULL when none came within secs. The caller frees it. */
static struct seam_ev *
fx_event(struct fx *f, double secs)
{
    for (double end = now_s() + secs; f->nevs == 0 && now_s() < end;) {
        event_base_loop(f->base, EVLOOP_NONBLOCK);
        if (f->nevs == 0)
            usleep(5000);
    }
    if (f->nevs == 0)
        return NULL;
    struct seam_ev *ev = f->evs[0];
    memmove(f->evs, f->evs + 1, --f->nevs * sizeof(f->evs[0]));
    return ev;
}

static int
cl_connect(struct fx *f)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)f->port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

static void
cl_send(int fd, const void *p, size_t n)
{
    assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Read what the hub sends within secs (the main loop turning meanwhile,
 * so that it accepts), until want bytes or EOF. Returns the bytes read;
 * *eof says whether the hub hung up. */
static size_t
cl_read(struct fx *f, int fd, unsigned char *buf, size_t cap, size_t want,
        double secs, bool *eof)
{
    size_t n = 0;
    double end = now_s() + secs;
    *eof = false;
    while (n < want && n < cap && now_s() < end) {
        event_base_loop(f->base, EVLOOP_NONBLOCK);
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, 10) <= 0)
            continue;
        ssize_t r = recv(fd, buf + n, cap - n, 0);
        if (r <= 0) {
            *eof = true;
            break;
        }
        n += (size_t)r;
    }
    return n;
}

/* Send an upgrade request; return the response head's status, the head
 * (and any body of a refusal) in resp. Frames after a 101 are left
 * unread. */
static int
cl_upgrade(struct fx *f, int fd, const char *req, char *resp, size_t cap)
{
    cl_send(fd, req, strlen(req));
    size_t n = 0;
    double end = now_s() + 3;
    resp[0] = '\0';
    while (now_s() < end) {
        event_base_loop(f->base, EVLOOP_NONBLOCK);
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, 10) <= 0)
            continue;
        ssize_t r = recv(fd, resp, cap - 1, MSG_PEEK);
        if (r <= 0)
            break;
        resp[r] = '\0';
        char *e = strstr(resp, "\r\n\r\n");
        if (e != NULL || (size_t)r == cap - 1) {
            n = e != NULL ? (size_t)(e - resp) + 4 : (size_t)r;
            break;
        }
    }
    /* take the head only */
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, resp + got, n - got, 0);
        assert_true(r > 0);
        got += (size_t)r;
    }
    resp[n] = '\0';
    int status = 0;
    assert_int_equal(sscanf(resp, "HTTP/1.1 %d", &status), 1);
    return status;
}

#define REQ_HEAD(target)                                              \
    "GET " target " HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n"    \
    "Connection: keep-alive, Upgrade\r\n"                             \
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"                 \
    "Sec-WebSocket-Version: 13\r\n"

static int
cl_open(struct fx *f, const char *target)
{
    char req[512], resp[1024];
    snprintf(req, sizeof(req), REQ_HEAD("%s") "\r\n", target);
    int fd = cl_connect(f);
    assert_int_equal(cl_upgrade(f, fd, req, resp, sizeof(resp)), 101);
    return fd;
}

/* A masked client frame. */
static size_t
frame(unsigned char *out, int b0, const void *payload, size_t len, bool masked)
{
    static const unsigned char key[4] = { 0x37, 0xfa, 0x21, 0x3d };
    size_t h = 0;
    out[h++] = (unsigned char)b0;
    unsigned char m = masked ? 0x80 : 0;
    if (len < 126) {
        out[h++] = (unsigned char)(m | len);
    } else {
        out[h++] = m | 126;
        out[h++] = (unsigned char)(len >> 8);
        out[h++] = (unsigned char)len;
    }
    if (masked) {
        memcpy(out + h, key, 4);
        h += 4;
    }
    for (size_t i = 0; i < len; i++)
        out[h + i] = ((const unsigned char *)payload)[i] ^ (masked ? key[i & 3] : 0);
    return h + len;
}

/* The close code of the first close frame the hub sends within secs: -1
 * for none (the connection stays), 0 for EOF without one. */
static int
cl_close_code(struct fx *f, int fd, double secs)
{
    unsigned char buf[4096];
    bool eof;
    size_t n = cl_read(f, fd, buf, sizeof(buf), sizeof(buf), secs, &eof);
    for (size_t i = 0; i + 2 <= n;) {
        size_t len = buf[i + 1] & 0x7f, h = 2;
        if (len == 126) {
            len = (size_t)buf[i + 2] << 8 | buf[i + 3];
            h = 4;
        }
        if ((buf[i] & 0x0f) == 0x08)
            return len >= 2 ? buf[i + h] << 8 | buf[i + h + 1] : 1005;
        i += h + len;
    }
    return eof ? 0 : -1;
}

/* wsserver/upgrade: a valid request is answered 101 with the RFC's
 * Sec-WebSocket-Accept, the subprotocol echoed when offered, once the main
 * loop, told of the JOIN with its channel, since and address, attached it. */
static void
test_upgrade(void **state)
{
    struct fx *f = *state;
    char resp[1024];
    int fd = cl_connect(f);
    assert_int_equal(cl_upgrade(f, fd, REQ_HEAD("/channel/ch%2Ea?x=1&since=%31%32-3")
                                "Sec-WebSocket-Protocol: a, resourcesync-notification\r\n\r\n",
                                resp, sizeof(resp)), 101);
    assert_non_null(strstr(resp, "\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
    assert_non_null(strstr(resp, "\r\nSec-WebSocket-Protocol: resourcesync-notification\r\n"));
    struct seam_ev *ev = fx_event(f, 2);
    if (ev == NULL) {               /* so that gcc -O2 sees ev is set below */
        fail_msg("no event from the service thread within 2 s");
        return;
    }
    assert_int_equal(ev->type, SEAM_JOIN);
    assert_string_equal(ev->text, "ch.a");
    assert_true(ev->flag && ev->id.ms == 12 && ev->id.seq == 3);
    char who[64];
    ws_server_addr_format(&ev->addr, who, sizeof(who));
    assert_string_equal(who, "127.0.0.1");
    seam_ev_free(ev);
    close(fd);
}

/* wsserver/upgrade_after_attach: the 101 waits until main has attached
 * the client to its channel, so a client that saw it misses nothing
 * accepted afterwards; a close main sends instead (an unknown channel,
 * Redis down) comes as the 101 and the close frame. */
static void
test_upgrade_after_attach(void **state)
{
    struct fx *f = *state;
    f->hold = true;
    char req[512];
    snprintf(req, sizeof(req), REQ_HEAD("/channel/a") "\r\n");
    int fd = cl_connect(f);
    cl_send(fd, req, strlen(req));
    struct seam_ev *join = fx_event(f, 2);
    if (join == NULL) {
        fail_msg("no JOIN within 2 s");
        return;
    }
    assert_int_equal(join->type, SEAM_JOIN);
    unsigned char buf[1024];
    bool eof;
    /* nothing within 0.3 s of loop turns */
    assert_int_equal(cl_read(f, fd, buf, sizeof(buf), 1, 0.3, &eof), 0);
    assert_false(eof);
    fx_attach(f, join);
    seam_ev_free(join);
    size_t n = cl_read(f, fd, buf, sizeof(buf) - 1, 12, 2, &eof);
    buf[n] = '\0';
    assert_true(n >= 12);
    assert_memory_equal(buf, "HTTP/1.1 101", 12);
    close(fd);

    fd = cl_connect(f);
    cl_send(fd, req, strlen(req));
    while ((join = fx_event(f, 2)) != NULL && join->type != SEAM_JOIN)
        seam_ev_free(join);   /* the first client's LEAVE */
    if (join == NULL) {
        fail_msg("no JOIN within 2 s");
        return;
    }
    struct seam_ev *cl = seam_ev_new(SEAM_CLOSE);
    assert_non_null(cl);
    cl->client = join->client;
    cl->chan = SEAM_NO_CHAN;
    cl->code = 4003;
    snprintf(cl->text, sizeof(cl->text), "backlog unavailable");
    assert_true(ws_server_post(f->ws, join->thread, cl) >= 0);
    seam_ev_free(join);
    char resp[1024];
    assert_int_equal(cl_upgrade(f, fd, "", resp, sizeof(resp)), 101);
    assert_int_equal(cl_close_code(f, fd, 2), 4003);
    close(fd);
}

/* wsserver/refusals: what is not a valid upgrade is answered with an HTTP
 * error and closed, before any channel is joined. */
static void
test_refusals(void **state)
{
    struct fx *f = *state;
    static const struct {
        const char *req;
        int status;
    } cases[] = {
        { "POST /channel/a HTTP/1.1\r\nUpgrade: websocket\r\n\r\n", 405 },
        { "GET /channel/a HTTP/1.0\r\nUpgrade: websocket\r\n\r\n", 400 },
        { "GET /channel/a HTTP/1.1\r\nHost: h\r\n\r\n", 426 },
        { "GET /channel/a HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
          "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
          "Sec-WebSocket-Version: 8\r\n\r\n", 426 },
        { "GET /channel/a HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
          "Sec-WebSocket-Key: short\r\nSec-WebSocket-Version: 13\r\n\r\n", 400 },
        { REQ_HEAD("/channel/a") "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", 400 },
        { "GET /channel/a HTTP/1.1\r\nUpgrade: websocket\r\n"
          "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
          "Sec-WebSocket-Version: 13\r\n\r\n", 400 },
        { REQ_HEAD("/channel/a") " folded: line\r\n\r\n", 400 },
        { REQ_HEAD("/channel/a") "Bad : space\r\n\r\n", 400 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char resp[1024];
        int fd = cl_connect(f);
        assert_int_equal(cl_upgrade(f, fd, cases[i].req, resp, sizeof(resp)),
                         cases[i].status);
        bool eof;
        unsigned char rest[256];
        (void)cl_read(f, fd, rest, sizeof(rest), sizeof(rest), 2, &eof);
        assert_true(eof);   /* and it hangs up */
        close(fd);
    }
    /* a head that never ends within 8 KiB */
    char big[9000];
    memset(big, 'a', sizeof(big));
    memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
    big[sizeof(big) - 1] = '\0';
    char resp[1024];
    int fd = cl_connect(f);
    assert_int_equal(cl_upgrade(f, fd, big, resp, sizeof(resp)), 431);
    close(fd);
    assert_null(fx_event(f, 0.2));   /* nobody joined */
}

/* wsserver/fails: client frames RFC 6455 says must fail the connection
 * are closed with 1002 (framing) or 1007 (not UTF-8), counted. */
static void
test_fails(void **state)
{
    struct fx *f = *state;
    unsigned char big[200];
    memset(big, 'p', sizeof(big));
    static const struct {
        int b0;
        const char *payload;
        size_t len;
        bool masked;
        int code;
    } cases[] = {
        { 0x81, "hello", 5, false, 1002 },          /* not masked */
        { 0x89, "", 0, false, 1002 },               /* an unmasked ping */
        { 0xc1, "x", 1, true, 1002 },               /* RSV1, no extension */
        { 0x83, "x", 1, true, 1002 },               /* opcode 3 */
        { 0x8b, "", 0, true, 1002 },                /* opcode 0xb */
        { 0x09, "", 0, true, 1002 },                /* fragmented ping */
        { 0x80, "x", 1, true, 1002 },               /* continuation, no message */
        { 0x81, "\xc0\x80", 2, true, 1007 },        /* overlong NUL */
        { 0x81, "\xe0\x80\x80", 3, true, 1007 },    /* overlong */
        { 0x81, "\xed\xa0\x80", 3, true, 1007 },    /* a surrogate */
        { 0x81, "\xf4\x90\x80\x80", 4, true, 1007 },/* past U+10FFFF */
        { 0x81, "\xff", 1, true, 1007 },
        { 0x81, "ok \xe2\x82", 5, true, 1007 },     /* ends inside a character */
        { 0x88, "\x03\xed", 2, true, 1002 },        /* close 1005 on the wire */
        { 0x88, "\x03", 1, true, 1002 },            /* close of one byte */
        { 0x88, "\x03\xe8\xff", 3, true, 1007 },    /* reason not UTF-8 */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int fd = cl_open(f, "/channel/a");
        unsigned char buf[256];
        size_t n = frame(buf, cases[i].b0, cases[i].payload, cases[i].len,
                         cases[i].masked);
        cl_send(fd, buf, n);
        assert_int_equal(cl_close_code(f, fd, 2), cases[i].code);
        close(fd);
    }
    /* a ping over 125 bytes */
    int fd = cl_open(f, "/channel/a");
    unsigned char buf[256];
    cl_send(fd, buf, frame(buf, 0x89, big, 126, true));
    assert_int_equal(cl_close_code(f, fd, 2), 1002);
    close(fd);
    /* a new message inside a fragmented one */
    fd = cl_open(f, "/channel/a");
    size_t n = frame(buf, 0x01, "a", 1, true);
    n += frame(buf + n, 0x81, "b", 1, true);
    cl_send(fd, buf, n);
    assert_int_equal(cl_close_code(f, fd, 2), 1002);
    close(fd);
    struct ws_stats st;
    ws_server_stats(f->ws, &st);
    assert_int_equal(st.proto_fails, sizeof(cases) / sizeof(cases[0]) + 2);
}

/* wsserver/takes: valid UTF-8 sent a byte per fragment and a byte per
 * send, binary, and pings between fragments are taken; a ping is
 * answered with its payload. */
static void
test_takes(void **state)
{
    struct fx *f = *state;
    int fd = cl_open(f, "/channel/a");
    static const char text[] = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9d\x84\x9e \xf4\x8f\xbf\xbf";
    size_t tl = sizeof(text) - 1;
    unsigned char buf[4096];
    size_t n = 0;
    for (size_t i = 0; i < tl; i++) {
        int b0 = (i == 0 ? 0x01 : 0x00) | (i == tl - 1 ? 0x80 : 0);
        n += frame(buf + n, b0, text + i, 1, true);
        if (i == 3)
            n += frame(buf + n, 0x89, "mid", 3, true);   /* between fragments */
    }
    n += frame(buf + n, 0x82, "\xff\x00", 2, true);       /* binary: no UTF-8 */
    n += frame(buf + n, 0x8a, "", 0, true);               /* an unasked pong */
    n += frame(buf + n, 0x89, "ping!", 5, true);
    for (size_t i = 0; i < n; i++)
        cl_send(fd, buf + i, 1);   /* any chunking */
    unsigned char in[256];
    bool eof;
    size_t got = cl_read(f, fd, in, sizeof(in), 7, 2, &eof);
    assert_false(eof);
    /* the latest ping's payload came back in a pong (an earlier one may
     * have been answered first) */
    assert_true(got >= 7);
    assert_memory_equal(in + got - 7, "\x8a\x05ping!", 7);
    assert_int_equal(cl_close_code(f, fd, 0.3), -1);   /* still open */
    struct ws_stats st;
    ws_server_stats(f->ws, &st);
    assert_int_equal(st.proto_fails, 0);
    close(fd);
}

/* wsserver/close: the client's close is echoed with its code, then the
 * hub hangs up; a bad channel or since is closed 4004 / 4005. */
static void
test_close(void **state)
{
    struct fx *f = *state;
    int fd = cl_open(f, "/channel/a");
    unsigned char buf[64];
    cl_send(fd, buf, frame(buf, 0x88, "\x0f\xa0" "bye", 5, true));   /* 4000 */
    unsigned char in[64];
    bool eof;
    size_t n = cl_read(f, fd, in, sizeof(in), sizeof(in), 2, &eof);
    assert_true(eof);
    assert_true(n >= 4 && in[0] == 0x88 && in[2] == 0x0f && in[3] == 0xa0);
    close(fd);

    fd = cl_open(f, "/channel/a");
    cl_send(fd, buf, frame(buf, 0x88, "", 0, true));   /* no code: none back */
    n = cl_read(f, fd, in, sizeof(in), sizeof(in), 2, &eof);
    assert_true(eof && n == 2 && in[0] == 0x88 && in[1] == 0);
    close(fd);

    static const struct {
        const char *target;
        int code;
    } cases[] = {
        { "/channel/a%2Fb", 4004 }, { "/other/a", 4004 }, { "/channel/", 4004 },
        { "/channel/a?since=", 4005 }, { "/channel/a?since=x1", 4005 },
        { "/channel/a?since=%zz", 4005 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fd = cl_open(f, cases[i].target);
        int code = cl_close_code(f, fd, 2);
        if (code != cases[i].code)
            fail_msg("%s: close %d, want %d", cases[i].target, code, cases[i].code);
        close(fd);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_upgrade, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upgrade_after_attach, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_takes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close, setup, teardown),
    };
    return cmocka_run_group_tests_name("wsserver", tests, NULL, NULL);
}
