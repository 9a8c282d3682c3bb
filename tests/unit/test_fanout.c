/* test_fanout.c - the main-loop side of WebSocket channels (hub/fanout.c)
 * with everything real around it: a private redis-server, the hub's
 * backlog, the WebSocket server's service threads (wsserver.c on the seam)
 * and WebSocket clients on loopback, driven by the same loop. Live
 * delivery in stream order to clients on every thread, replay with since
 * in pages then live without gap or duplicate, 4001 for a since older than
 * the backlog, 4004 for an unknown channel, a since in the future read as
 * now, LEAVE, pins and the entries hook, and the tail held back while a
 * thread has too much waiting without losing anything. Every test waits
 * on a watchdog and ends with nothing left on the loop. */
#include "testutil.h"
#include "tu_httpd.h"
#include "tu_proc.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backlog.h"
#include "fanout.h"
#include "topic.h"
#include "wsserver.h"

#define CT "application/xml"
#define MAXIDS 512

struct fx;

/* A WebSocket client on the test's loop: it sends the upgrade and records
 * what comes back (the status, the ids of the notifications, the close). */
struct wscl {
    struct fx *f;
    int fd;
    struct event *ev;
    unsigned char buf[1 << 16];    /* bytes not parsed yet */
    size_t len;
    int status;                    /* of the upgrade answer; 0 until read */
    bool eof;
    int close_code;                /* 0: none yet */
    char reason[128];
    size_t nids;
    struct msg_id ids[MAXIDS];
};

struct fx {
    struct tu_redis *redis;
    struct tu_loop loop;
    struct backlog *b;
    struct topics *topics;
    struct fanout *fanout;
    struct ws_server *ws;
    int port;
    struct wscl *cl[4];
    size_t ncl;
    size_t hooked;                 /* entries seen by the entries hook */
};

static int
group_setup(void **state)
{
    struct tu_redis *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    tu_redis_start(r);
    *state = r;
    return 0;
}

static int
group_teardown(void **state)
{
    tu_redis_stop(*state);
    free(*state);
    return 0;
}

/* The fan-out and its WebSocket server: two threads, replay pages of
 * three entries, queue_high as given (0: the default). */
static void
fx_start(struct fx *f, size_t queue_high)
{
    const char *err = NULL;
    struct fanout_opts fo = { .base = f->loop.base, .backlog = f->b,
                              .topics = f->topics, .page_size = 3 };
    f->fanout = fanout_new(&fo, &err);
    assert_non_null(f->fanout);
    struct ws_server_opts wo = { .base = f->loop.base, .host = "127.0.0.1",
                                 .threads = 2, .to_main = fanout_inbox(f->fanout),
                                 .queue_high = queue_high };
    f->ws = ws_server_new(&wo, &err);
    assert_non_null(f->ws);
    f->port = ws_server_port(f->ws);
    fanout_attach(f->fanout, f->ws);
}

static int
setup(void **state)
{
    static unsigned n;
    struct fx *f = calloc(1, sizeof(*f));
    char prefix[32];
    const char *err = NULL;
    assert_non_null(f);
    f->redis = *state;
    tu_loop_init(&f->loop);
    snprintf(prefix, sizeof(prefix), "f%u:", ++n);   /* a fresh key space */
    struct backlog_opts bo = { .redis_url = f->redis->url, .prefix = prefix };
    f->b = backlog_new(f->loop.base, &bo, &err);
    assert_non_null(f->b);
    f->topics = topics_new(false, 0, 0, 0);
    assert_non_null(f->topics);
    assert_int_equal(topics_add(f->topics, "c", "http://t.test/c", TOPIC_CHANGE,
                                NULL, 0, 0, &err), 0);
    assert_int_equal(topics_add(f->topics, "g", "http://t.test/g", TOPIC_CHANGE,
                                NULL, 4, 0, &err), 0);
    TU_LOOP_UNTIL(&f->loop, backlog_ready(f->b) && backlog_tail_ready(f->b), 5000);
    *state = f;
    return 0;
}

static void
cl_free(struct wscl *c)
{
    if (c == NULL)
        return;
    event_free(c->ev);
    close(c->fd);
    free(c);
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    struct tu_redis *r = f->redis;
    for (size_t i = 0; i < f->ncl; i++)
        cl_free(f->cl[i]);
    /* rshub's order: threads, then Redis (cancelled callbacks), then the
     * fan-out */
    ws_server_free(f->ws, 0);
    backlog_free(f->b);
    fanout_free(f->fanout);
    fanout_free(NULL);
    topics_free(f->topics);
    tu_loop_cleanup(&f->loop);
    free(f);
    *state = r;
    return 0;
}

/* ---------------------------------------------------------- the client */

/* memmem is a GNU extension; the tests build as POSIX. */
static const unsigned char *
find(const unsigned char *p, size_t n, const char *what)
{
    size_t k = strlen(what);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(p + i, what, k) == 0)
            return p + i;
    return NULL;
}

static void
cl_frame(struct wscl *c, unsigned op, const unsigned char *p, size_t n)
{
    if (op == 0x8) {
        c->close_code = n >= 2 ? p[0] << 8 | p[1] : 1005;
        snprintf(c->reason, sizeof(c->reason), "%.*s",
                 (int)(n > 2 ? n - 2 : 0), (const char *)p + 2);
        return;
    }
    if (op != 0x1)
        return;   /* pings: the keepalive is 30 s away */
    static const char tag[] = ":id=\"";
    const unsigned char *at = find(p, n, tag);
    assert_non_null(at);
    const char *s = (const char *)at + sizeof(tag) - 1;
    const char *end = memchr(s, '"', n - (size_t)(s - (const char *)p));
    assert_non_null(end);
    assert_true(c->nids < MAXIDS);
    assert_int_equal(msg_id_parse(s, (size_t)(end - s), &c->ids[c->nids]), 0);
    c->nids++;
}

static void
cl_parse(struct wscl *c)
{
    size_t off = 0;
    if (c->status == 0) {
        const unsigned char *e = find(c->buf, c->len, "\r\n\r\n");
        if (e == NULL)
            return;
        assert_int_equal(sscanf((const char *)c->buf, "HTTP/1.1 %d", &c->status), 1);
        off = (size_t)(e - c->buf) + 4;
    }
    while (c->len - off >= 2) {
        const unsigned char *h = c->buf + off;
        size_t hl = 2, n = h[1] & 0x7f;
        if (n == 126) {
            hl = 4;
            if (c->len - off < hl)
                break;
            n = (size_t)h[2] << 8 | h[3];
        } else if (n == 127) {
            hl = 10;
            if (c->len - off < hl)
                break;
            n = 0;
            for (int k = 0; k < 8; k++)
                n = n << 8 | h[2 + k];
        }
        assert_true(hl + n <= sizeof(c->buf));
        if (c->len - off < hl + n)
            break;
        cl_frame(c, h[0] & 0x0f, h + hl, n);
        off += hl + n;
    }
    memmove(c->buf, c->buf + off, c->len - off);
    c->len -= off;
}

static void
on_cl_read(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct wscl *c = arg;
    ssize_t r = recv(fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
    if (r <= 0) {
        c->eof = true;
        event_del(c->ev);
        return;
    }
    c->len += (size_t)r;
    cl_parse(c);
}

/* Connect to /channel/name (since: NULL for none). */
static struct wscl *
cl_new(struct fx *f, const char *name, const char *since)
{
    struct wscl *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    assert_true(f->ncl < 4);
    f->cl[f->ncl++] = c;
    c->f = f;
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(c->fd >= 0);
    struct sockaddr_in sa = { .sin_family = AF_INET,
                              .sin_port = htons((uint16_t)f->port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "GET /channel/%s%s%s HTTP/1.1\r\nHost: h\r\n"
                     "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                     "Sec-WebSocket-Version: 13\r\n\r\n",
                     name, since != NULL ? "?since=" : "", since != NULL ? since : "");
    assert_int_equal(send(c->fd, req, (size_t)n, MSG_NOSIGNAL), n);
    assert_int_equal(fcntl(c->fd, F_SETFL, O_NONBLOCK), 0);
    c->ev = event_new(f->loop.base, c->fd, EV_READ | EV_PERSIST, on_cl_read, c);
    assert_non_null(c->ev);
    assert_int_equal(event_add(c->ev, NULL), 0);
    return c;
}

/* -------------------------------------------------------------- helpers */

struct res {
    unsigned calls;
    int rc;
    struct msg_id id;
};

static void
on_appended(void *ud, int rc, struct msg_id id)
{
    struct res *r = ud;
    r->calls++;
    r->rc = rc;
    r->id = id;
}

/* Append n notifications to chan without waiting between them; their ids
 * into ids (in order). */
static void
append_n(struct fx *f, const char *chan, size_t n, uint64_t max,
         struct msg_id *ids)
{
    struct res r[128];
    assert_true(n <= 128);
    memset(r, 0, sizeof(r));
    for (size_t i = 0; i < n; i++)
        assert_int_equal(backlog_append(f->b, chan, "<n/>", 4, CT, max,
                                        on_appended, &r[i]), 0);
    TU_LOOP_UNTIL(&f->loop, r[n - 1].calls == 1, 5000);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(r[i].calls, 1);
        assert_int_equal(r[i].rc, 0);
        ids[i] = r[i].id;
    }
}

static void
assert_ids(const struct wscl *c, const struct msg_id *want, size_t n)
{
    assert_int_equal(c->nids, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(msg_id_cmp(c->ids[i], want[i]), 0);
}

/* Wait until the client is attached (counted by the fan-out). */
static void
wait_subscribers(struct fx *f, const char *chan, size_t n)
{
    TU_LOOP_UNTIL(&f->loop, fanout_subscribers(f->fanout, chan) == n, 5000);
}

/* ---------------------------------------------------------------- tests */

/* fanout/live: notifications appended after clients attached reach every
 * one of them, on both threads, in stream order, each once. */
static void
test_live(void **state)
{
    struct fx *f = *state;
    fx_start(f, 0);
    struct wscl *a = cl_new(f, "c", NULL);
    struct wscl *b = cl_new(f, "c", NULL);
    wait_subscribers(f, "c", 2);
    /* the 101 follows the attach (wsserver.c) */
    TU_LOOP_UNTIL(&f->loop, a->status != 0 && b->status != 0, 5000);
    assert_int_equal(a->status, 101);
    assert_int_equal(b->status, 101);
    struct msg_id ids[20];
    append_n(f, "c", 20, 0, ids);
    TU_LOOP_UNTIL(&f->loop, a->nids == 20 && b->nids == 20, 5000);
    assert_ids(a, ids, 20);
    assert_ids(b, ids, 20);
    struct fanout_stats st;
    fanout_stats(f->fanout, &st);
    assert_int_equal(st.dispatched, 20);
    assert_int_equal(st.channels_active, 1);
    /* the service threads count a frame after its write returns, which
     * can be after the client has read it: wait for the count */
    struct ws_stats ws;
    TU_LOOP_UNTIL(&f->loop, (ws_server_stats(f->ws, &ws), ws.frames >= 40),
                  5000);
    assert_int_equal(ws.open, 2);
    assert_int_equal(ws.frames, 40);
}

/* fanout/replay: since=ID gets every entry after ID from the backlog in
 * pages, then the live ones, without gap or duplicate. */
static void
test_replay(void **state)
{
    struct fx *f = *state;
    fx_start(f, 0);
    struct msg_id ids[14];
    append_n(f, "c", 10, 0, ids);
    char since[MSG_ID_BUFSZ];
    msg_id_format(ids[2], since);
    struct wscl *a = cl_new(f, "c", since);
    TU_LOOP_UNTIL(&f->loop, a->nids == 7, 5000);
    append_n(f, "c", 4, 0, ids + 10);
    TU_LOOP_UNTIL(&f->loop, a->nids == 11, 5000);
    assert_ids(a, ids + 3, 11);
    assert_int_equal(a->close_code, 0);
    struct fanout_stats st;
    fanout_stats(f->fanout, &st);
    assert_int_equal(st.replayed, 7);
    assert_true(st.replay_pages >= 3);   /* pages of three */
    TU_LOOP_UNTIL(&f->loop, (fanout_stats(f->fanout, &st), st.replays == 0), 5000);
}

/* fanout/gap: since older than what the backlog still holds is closed
 * 4001; since=0 and since at the trim mark get what is there. */
static void
test_gap(void **state)
{
    struct fx *f = *state;
    fx_start(f, 0);
    struct msg_id ids[70];
    append_n(f, "g", 70, 4, ids);   /* trimmed through ids[64] */
    char since[MSG_ID_BUFSZ];
    msg_id_format(ids[10], since);
    struct wscl *gone = cl_new(f, "g", since);
    struct wscl *all = cl_new(f, "g", "0");
    msg_id_format(ids[64], since);
    struct wscl *mark = cl_new(f, "g", since);
    TU_LOOP_UNTIL(&f->loop, gone->close_code != 0 && all->nids == 5 &&
                                mark->nids == 5, 5000);
    assert_int_equal(gone->close_code, 4001);
    assert_non_null(strstr(gone->reason, "gap"));
    assert_int_equal(gone->nids, 0);
    assert_ids(all, ids + 65, 5);
    assert_ids(mark, ids + 65, 5);
    assert_int_equal(all->close_code, 0);
    struct fanout_stats st;
    fanout_stats(f->fanout, &st);
    assert_int_equal(st.gaps, 1);
}

/* fanout/unknown: a channel that is not a topic is closed 4004 and never
 * counted. */
static void
test_unknown(void **state)
{
    struct fx *f = *state;
    fx_start(f, 0);
    struct wscl *a = cl_new(f, "nope", NULL);
    TU_LOOP_UNTIL(&f->loop, a->close_code != 0, 5000);
    assert_int_equal(a->close_code, 4004);
    assert_int_equal(fanout_subscribers(f->fanout, "nope"), 0);
}

/* fanout/since_future: a since beyond the newest id is read as now: the
 * client is attached live and gets what follows, counted. */
static void
test_since_future(void **state)
{
    struct fx *f = *state;
    fx_start(f, 0);
    struct msg_id ids[2];
    append_n(f, "c", 1, 0, ids);
    char since[MSG_ID_BUFSZ];
    struct msg_id ahead = { ids[0].ms + 3600000, 0 };
    msg_id_format(ahead, since);
    struct wscl *a = cl_new(f, "c", since);
    wait_subscribers(f, "c", 1);
    append_n(f, "c", 1, 0, ids + 1);
    TU_LOOP_UNTIL(&f->loop, a->nids == 1, 5000);
    assert_ids(a, ids + 1, 1);
    struct fanout_stats st;
    fanout_stats(f->fanout, &st);
    assert_int_equal(st.since_future, 1);
}

/* fanout/leave: a client that goes is no longer counted. */
static void
test_leave(void **state)
{
    struct fx *f = *state;
    fx_start(f, 0);
    struct wscl *a = cl_new(f, "c", NULL);
    (void)cl_new(f, "c", NULL);
    wait_subscribers(f, "c", 2);
    event_del(a->ev);
    close(a->fd);
    a->fd = -1;
    wait_subscribers(f, "c", 1);
}

static void
on_entries(void *ud, const char *chan, const struct backlog_entry *e, size_t n)
{
    struct fx *f = ud;
    (void)e;
    assert_string_equal(chan, "c");
    f->hooked += n;
}

/* fanout/pin: a pinned channel is tailed without any subscriber and its
 * entries reach the entries hook; unpinned, it is forgotten in time. */
static void
test_pin(void **state)
{
    struct fx *f = *state;
    fx_start(f, 0);
    fanout_on_entries(f->fanout, on_entries, f);
    assert_int_equal(fanout_pin(f->fanout, "c"), 0);
    struct fanout_stats st;
    TU_LOOP_UNTIL(&f->loop, (fanout_stats(f->fanout, &st), st.channels_active == 1),
                  5000);
    struct msg_id ids[3];
    append_n(f, "c", 3, 0, ids);
    TU_LOOP_UNTIL(&f->loop, f->hooked == 3, 5000);
    assert_int_equal(fanout_subscribers(f->fanout, "c"), 0);
    fanout_unpin(f->fanout, "c");
    fanout_unpin(f->fanout, "c");   /* once too often: ignored */
}

/* fanout/pause: with a thread's queue_high at one byte every batch pauses
 * the tail until that thread has drained; all notifications still arrive,
 * in order, and no hold is left. */
static void
test_pause(void **state)
{
    struct fx *f = *state;
    fx_start(f, 1);
    struct wscl *a = cl_new(f, "c", NULL);
    struct wscl *b = cl_new(f, "c", NULL);
    wait_subscribers(f, "c", 2);
    struct msg_id ids[120];
    for (size_t k = 0; k < 120; k += 40) {
        append_n(f, "c", 40, 0, ids + k);
        tu_loop_run_for(&f->loop, 20);
    }
    TU_LOOP_UNTIL(&f->loop, a->nids == 120 && b->nids == 120, 10000);
    assert_ids(a, ids, 120);
    assert_ids(b, ids, 120);
    struct fanout_stats st;
    TU_LOOP_UNTIL(&f->loop, (fanout_stats(f->fanout, &st), st.tail_holds == 0), 5000);
    assert_true(st.tail_pauses >= 3);
    assert_int_equal(st.dispatched, 120);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_live, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_since_future, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leave, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pause, setup, teardown),
    };
    return cmocka_run_group_tests_name("fanout", tests, group_setup,
                                       group_teardown);
}
