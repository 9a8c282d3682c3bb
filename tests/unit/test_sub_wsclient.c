/* test_sub_wsclient.c - the WebSocket client seam (subscriber/wsclient.c)
 * against real servers on loopback: a programmable WebSocket server written
 * here on raw sockets, one thread per connection, that plays a script (send
 * N messages of given sizes and fragmentation, ping, close with a code and
 * reason, stall, vanish, refuse or never answer the handshake) and records
 * what the client sent; and Python's websockets over TLS for wss://. The
 * client's callbacks run on a libevent loop under a watchdog, and every test
 * ends with nothing left registered on that loop. */
#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rs_alloc.h"
#include "wsclient.h"

extern char **environ;

#define WATCHDOG_SECS 60
#define TS_VARY ((size_t)-1)   /* SEND: sizes 0..3000, varying with seq */
#define TS_MAXCONN 8
#define TS_OBUF (256 * 1024)

static uint64_t
mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Message seq of a connection tagged `tag`: "T00000042|" then letters, so
 * that content, length and order can all be checked by the receiver. */
static void
msg_fill(char *buf, size_t len, char tag, unsigned seq)
{
    char head[16];
    int h = snprintf(head, sizeof(head), "%c%08u|", tag, seq);
    for (size_t i = 0; i < len; i++)
        buf[i] = i < (size_t)h ? head[i] : (char)('a' + (seq * 7u + i) % 26u);
}

static size_t
vary_len(unsigned seq)
{
    return (size_t)((seq * 7919u) % 3001u);
}

/* ------------------------------------------------- the scripted server */

enum ts_op {
    TS_END = 0,     /* close the socket (no close frame) */
    TS_SEND,        /* n messages of `size` bytes in frames of `frag` bytes */
    TS_CLOSE,       /* close frame code/text (code < 0: empty), await echo */
    TS_PING,        /* ping with payload text */
    TS_STALL,       /* neither read nor write for ms (0: until stopped) */
    TS_VANISH,      /* close the socket at once, no close frame */
    TS_SERVE,       /* read for ms: answer pings, record pongs and close */
    TS_HUGE_HDR,    /* a frame header announcing 2^62 bytes, then 128 KiB */
    TS_WAIT_GO,     /* wait until the test sets go */
    TS_NO_HS,       /* first step: never answer the handshake */
    TS_REJECT,      /* first step: answer the handshake with n (0: 404) */
    TS_RAW,         /* write `size` bytes of text as they are */
};

struct ts_step {
    enum ts_op op;
    unsigned n;
    size_t size;
    size_t frag;        /* 0: one frame per message */
    bool ping_mid;      /* SEND: a ping after each message's first fragment */
    bool empty_fin;     /* SEND: end each message with an empty final frame */
    unsigned ms;
    int code;
    const char *text;
};

struct ts;

struct tsc {
    struct ts *s;
    int fd;
    pthread_t tid;
    char tag;
    unsigned seq;
    unsigned char in[8192];
    size_t inlen;
    unsigned char *out;    /* TS_OBUF bytes of frames not yet written */
    size_t outlen;
};

struct ts {
    int lfd, port, stopfd;
    pthread_t acc;
    const struct ts_step *scripts[26];   /* by tag 'A'..'Z' */
    atomic_int go;
    atomic_size_t sent;                  /* bytes written */
    pthread_mutex_t mu;
    struct tsc conns[TS_MAXCONN];
    int nconns;
    /* what the clients did, under mu */
    char req[4096];                      /* the last request head */
    int close_code;                      /* last close frame's code; 0: none */
    char close_reason[128];
    int pings;                           /* pings from clients */
    char pong[128];                      /* the last pong's payload */
};

/* Wait for fd (or, fd < 0, only for the stop) up to ms (-1: forever):
 * 1 ready, 0 timeout, -1 stopped. */
static int
ts_wait(struct ts *s, int fd, short ev, int ms)
{
    struct pollfd p[2] = {
        { .fd = s->stopfd, .events = POLLIN },
        { .fd = fd, .events = ev },
    };
    int n;
    do {
        n = poll(p, fd >= 0 ? 2 : 1, ms);
    } while (n < 0 && errno == EINTR);
    if (p[0].revents != 0)
        return -1;
    return n > 0 ? 1 : 0;
}

static int
tsc_write(struct tsc *t, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        if (ts_wait(t->s, t->fd, POLLOUT, -1) < 0)
            return -1;
        ssize_t n = send(t->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                continue;
            return -1;
        }
        atomic_fetch_add(&t->s->sent, (size_t)n);
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int
tsc_flush(struct tsc *t)
{
    int rc = tsc_write(t, t->out, t->outlen);
    t->outlen = 0;
    return rc;
}

static int
tsc_put(struct tsc *t, const void *p, size_t n)
{
    if (t->outlen + n > TS_OBUF && tsc_flush(t) != 0)
        return -1;
    if (n > TS_OBUF)
        return tsc_write(t, p, n);
    memcpy(t->out + t->outlen, p, n);
    t->outlen += n;
    return 0;
}

static int
tsc_frame(struct tsc *t, bool fin, int op, const void *payload, uint64_t len)
{
    unsigned char h[10];
    size_t hl;
    h[0] = (unsigned char)((fin ? 0x80 : 0) | op);
    if (len < 126) {
        h[1] = (unsigned char)len;
        hl = 2;
    } else if (len < 65536) {
        h[1] = 126;
        h[2] = (unsigned char)(len >> 8);
        h[3] = (unsigned char)len;
        hl = 4;
    } else {
        h[1] = 127;
        for (int i = 0; i < 8; i++)
            h[2 + i] = (unsigned char)(len >> (56 - 8 * i));
        hl = 10;
    }
    if (tsc_put(t, h, hl) != 0)
        return -1;
    return payload != NULL ? tsc_put(t, payload, (size_t)len) : 0;
}

/* One whole frame from the client (masked): 1, 0 on timeout, -1 on EOF,
 * error or stop. The payload is cut at cap. */
static int
tsc_read_frame(struct tsc *t, int ms, int *op, unsigned char *pl, size_t cap,
               size_t *plen)
{
    uint64_t deadline = mono_ms() + (uint64_t)ms;
    for (;;) {
        const unsigned char *b = t->in;
        size_t hl = 2;
        uint64_t len = 0;
        bool whole = false;
        if (t->inlen >= 2) {
            len = b[1] & 0x7f;
            if (len == 126) {
                hl = 4;
                len = t->inlen >= 4 ? ((uint64_t)b[2] << 8) | b[3] : 0;
            } else if (len == 127) {
                hl = 10;
                len = 0;
                for (int i = 0; i < 8 && t->inlen >= 10; i++)
                    len = (len << 8) | b[2 + i];
            }
            size_t ml = (b[1] & 0x80) ? 4 : 0;
            if (len > sizeof(t->in) - hl - ml)
                return -1;   /* no client of ours sends that */
            if (t->inlen >= hl && t->inlen >= hl + ml + len) {
                whole = true;
                *op = b[0] & 0x0f;
                *plen = len < cap ? (size_t)len : cap;
                for (size_t i = 0; i < *plen; i++)
                    pl[i] = b[hl + ml + i] ^ (ml ? b[hl + i % 4] : 0);
                size_t used = hl + ml + (size_t)len;
                memmove(t->in, t->in + used, t->inlen - used);
                t->inlen -= used;
            }
        }
        if (whole)
            return 1;
        uint64_t now = mono_ms();
        if (now >= deadline)
            return 0;
        int r = ts_wait(t->s, t->fd, POLLIN, (int)(deadline - now));
        if (r <= 0)
            return r;
        ssize_t n = recv(t->fd, t->in + t->inlen, sizeof(t->in) - t->inlen,
                         MSG_DONTWAIT);
        if (n == 0)
            return -1;
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                continue;
            return -1;
        }
        t->inlen += (size_t)n;
    }
}

/* Read frames for ms: answer pings, record pongs and close frames. 1 when a
 * close frame came (answered unless we sent ours first), 0 at the end of
 * ms, -1 on EOF. */
static int
tsc_serve(struct tsc *t, unsigned ms, bool answer_close)
{
    struct ts *s = t->s;
    uint64_t deadline = mono_ms() + ms;
    for (;;) {
        uint64_t now = mono_ms();
        if (now >= deadline)
            return 0;
        int op;
        unsigned char pl[256];
        size_t n;
        int r = tsc_read_frame(t, (int)(deadline - now), &op, pl,
                               sizeof(pl) - 1, &n);
        if (r <= 0)
            return r;
        pl[n] = '\0';
        if (op == 0x9) {
            pthread_mutex_lock(&s->mu);
            s->pings++;
            pthread_mutex_unlock(&s->mu);
            if (tsc_frame(t, true, 0xA, pl, n) != 0 || tsc_flush(t) != 0)
                return -1;
        } else if (op == 0xA) {
            pthread_mutex_lock(&s->mu);
            snprintf(s->pong, sizeof(s->pong), "%.127s", (char *)pl);
            pthread_mutex_unlock(&s->mu);
        } else if (op == 0x8) {
            pthread_mutex_lock(&s->mu);
            s->close_code = n >= 2 ? (pl[0] << 8) | pl[1] : 1005;
            snprintf(s->close_reason, sizeof(s->close_reason), "%.127s",
                     n > 2 ? (char *)pl + 2 : "");
            pthread_mutex_unlock(&s->mu);
            if (answer_close)
                (void)(tsc_frame(t, true, 0x8, pl, n) == 0 &&
                       tsc_flush(t) == 0);
            return 1;
        }
    }
}

static int
tsc_send_msgs(struct tsc *t, const struct ts_step *st)
{
    size_t max = st->size == TS_VARY ? 3001 : st->size;
    char *msg = malloc(max + 1);
    int rc = msg == NULL ? -1 : 0;
    for (unsigned k = 0; k < st->n && rc == 0; k++, t->seq++) {
        size_t len = st->size == TS_VARY ? vary_len(t->seq) : st->size;
        msg_fill(msg, len, t->tag, t->seq);
        size_t frag = st->frag != 0 ? st->frag : len;
        size_t off = 0;
        bool first = true;
        do {
            size_t piece = len - off < frag ? len - off : frag;
            bool last = off + piece == len && !st->empty_fin;
            rc = tsc_frame(t, last, first ? 0x1 : 0x0, msg + off, piece);
            if (rc == 0 && first && st->ping_mid && !last)
                rc = tsc_frame(t, true, 0x9, "mid", 3);
            off += piece;
            first = false;
        } while (rc == 0 && off < len);
        if (rc == 0 && st->empty_fin)
            rc = tsc_frame(t, true, first ? 0x1 : 0x0, "", 0);
    }
    if (rc == 0)
        rc = tsc_flush(t);
    free(msg);
    return rc;
}

static int
tsc_huge_header(struct tsc *t)
{
    unsigned char h[10] = { 0x81, 127, 0x40, 0, 0, 0, 0, 0, 0, 0 };
    if (tsc_put(t, h, sizeof(h)) != 0)
        return -1;
    char *fill = malloc(128 * 1024);
    if (fill == NULL)
        return -1;
    memset(fill, 'x', 128 * 1024);
    int rc = tsc_put(t, fill, 128 * 1024);
    free(fill);
    return rc == 0 ? tsc_flush(t) : -1;
}

static void
lower(char *s)
{
    for (; *s != '\0'; s++)
        if (*s >= 'A' && *s <= 'Z')
            *s = (char)(*s - 'A' + 'a');
}

/* Read the upgrade request and answer it as the script's first step says.
 * Returns the script, or NULL when the connection is done. */
static const struct ts_step *
tsc_handshake(struct tsc *t)
{
    struct ts *s = t->s;
    char head[4096];
    size_t n = 0;
    char *end = NULL;
    uint64_t deadline = mono_ms() + 5000;
    head[0] = '\0';
    while ((end = strstr(head, "\r\n\r\n")) == NULL) {
        uint64_t now = mono_ms();
        if (now >= deadline || n == sizeof(head) - 1 ||
            ts_wait(s, t->fd, POLLIN, (int)(deadline - now)) <= 0)
            return NULL;
        ssize_t got = recv(t->fd, head + n, sizeof(head) - 1 - n, MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR))
            return NULL;
        if (got > 0)
            n += (size_t)got;
        head[n] = '\0';
    }
    size_t hlen = (size_t)(end - head) + 4;
    memcpy(t->in, head + hlen, n - hlen);
    t->inlen = n - hlen;
    head[hlen] = '\0';
    pthread_mutex_lock(&s->mu);
    snprintf(s->req, sizeof(s->req), "%s", head);
    pthread_mutex_unlock(&s->mu);

    t->tag = 'A';
    if (strncmp(head, "GET /t/", 7) == 0 && head[7] >= 'A' && head[7] <= 'Z')
        t->tag = head[7];
    const struct ts_step *sc = s->scripts[t->tag - 'A'];
    if (sc == NULL)
        sc = s->scripts[0];
    if (sc == NULL || sc[0].op == TS_NO_HS) {
        (void)ts_wait(s, -1, 0, -1);
        return NULL;
    }
    if (sc[0].op == TS_REJECT) {
        char no[200];
        unsigned st = sc[0].n ? sc[0].n : 404;
        int nl = snprintf(no, sizeof(no), "HTTP/1.1 %u %s\r\n%s"
                          "Content-Length: 0\r\nConnection: close\r\n\r\n",
                          st, st == 401 ? "Unauthorized" : st == 403
                          ? "Forbidden" : "Not Found", st == 401
                          ? "WWW-Authenticate: Bearer realm=\"rshub\"\r\n" : "");
        (void)tsc_write(t, no, (size_t)nl);
        return NULL;
    }
    char low[4096];
    snprintf(low, sizeof(low), "%s", head);
    lower(low);
    const char *k = strstr(low, "\r\nsec-websocket-key:");
    if (k == NULL)
        return NULL;
    k = head + (k - low) + 20;
    while (*k == ' ')
        k++;
    size_t klen = strcspn(k, "\r");
    char src[128];
    snprintf(src, sizeof(src), "%.*s258EAFA5-E914-47DA-95CA-C5AB0DC85B11",
             (int)klen, k);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    unsigned char acc[64];
    if (EVP_Digest(src, strlen(src), md, &mdlen, EVP_sha1(), NULL) != 1)
        return NULL;
    EVP_EncodeBlock(acc, md, (int)mdlen);
    char resp[256];
    int rl = snprintf(resp, sizeof(resp),
                      "HTTP/1.1 101 Switching Protocols\r\n"
                      "Upgrade: websocket\r\n"
                      "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
                      (char *)acc);
    if (tsc_write(t, resp, (size_t)rl) != 0)
        return NULL;
    return sc;
}

static void *
tsc_main(void *arg)
{
    struct tsc *t = arg;
    struct ts *s = t->s;
    const struct ts_step *st = tsc_handshake(t);
    for (; st != NULL && st->op != TS_END; st++) {
        int rc = 0;
        switch (st->op) {
        case TS_SEND:
            rc = tsc_send_msgs(t, st);
            break;
        case TS_CLOSE: {
            unsigned char pl[125];
            size_t n = 0;
            if (st->code >= 0) {
                pl[0] = (unsigned char)(st->code >> 8);
                pl[1] = (unsigned char)st->code;
                n = 2 + strlen(st->text);
                memcpy(pl + 2, st->text, n - 2);
            }
            if (tsc_frame(t, true, 0x8, pl, n) == 0 && tsc_flush(t) == 0)
                (void)tsc_serve(t, 3000, false);
            rc = -1;
            break;
        }
        case TS_PING:
            rc = tsc_frame(t, true, 0x9, st->text, strlen(st->text));
            if (rc == 0)
                rc = tsc_flush(t);
            break;
        case TS_STALL:
            rc = ts_wait(s, -1, 0, st->ms ? (int)st->ms : -1) < 0 ? -1 : 0;
            break;
        case TS_VANISH:
            rc = -1;
            break;
        case TS_SERVE:
            rc = tsc_serve(t, st->ms, true) != 0 ? -1 : 0;
            break;
        case TS_HUGE_HDR:
            rc = tsc_huge_header(t);
            break;
        case TS_RAW:
            rc = tsc_write(t, st->text, st->size);
            break;
        case TS_WAIT_GO:
            while (atomic_load(&s->go) == 0 && rc == 0)
                rc = ts_wait(s, -1, 0, 5) < 0 ? -1 : 0;
            break;
        default:
            break;
        }
        if (rc != 0)
            break;
    }
    shutdown(t->fd, SHUT_RDWR);
    close(t->fd);
    t->fd = -1;
    return NULL;
}

static void *
ts_accept_main(void *arg)
{
    struct ts *s = arg;
    while (ts_wait(s, s->lfd, POLLIN, -1) > 0) {
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        pthread_mutex_lock(&s->mu);
        struct tsc *t = s->nconns < TS_MAXCONN ? &s->conns[s->nconns] : NULL;
        pthread_mutex_unlock(&s->mu);
        if (t == NULL) {
            close(fd);
            continue;
        }
        t->s = s;
        t->fd = fd;
        t->out = malloc(TS_OBUF);
        if (t->out == NULL || pthread_create(&t->tid, NULL, tsc_main, t) != 0) {
            free(t->out);
            t->out = NULL;
            close(fd);
            continue;
        }
        pthread_mutex_lock(&s->mu);
        s->nconns++;
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

/* Listen on the loopback of family af; false when the host has none. */
static bool
ts_start_af(struct ts *s, int af)
{
    struct sockaddr_storage ss;
    socklen_t sl = af == AF_INET6 ? sizeof(struct sockaddr_in6)
                                  : sizeof(struct sockaddr_in);
    memset(&ss, 0, sizeof(ss));
    if (af == AF_INET6) {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
        a6->sin6_family = AF_INET6;
        a6->sin6_addr = in6addr_loopback;
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
        a4->sin_family = AF_INET;
        a4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    s->lfd = socket(af, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&ss, sl) != 0) {
        if (s->lfd >= 0)
            close(s->lfd);
        return false;
    }
    assert_int_equal(listen(s->lfd, 16), 0);
    assert_int_equal(getsockname(s->lfd, (struct sockaddr *)&ss, &sl), 0);
    s->port = ntohs(af == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                   : ((struct sockaddr_in *)&ss)->sin_port);
    s->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    assert_true(s->stopfd >= 0);
    assert_int_equal(pthread_mutex_init(&s->mu, NULL), 0);
    assert_int_equal(pthread_create(&s->acc, NULL, ts_accept_main, s), 0);
    return true;
}

static void
ts_start(struct ts *s)
{
    assert_true(ts_start_af(s, AF_INET));
}

static void
ts_stop(struct ts *s)
{
    uint64_t one = 1;
    assert_int_equal(write(s->stopfd, &one, sizeof(one)), sizeof(one));
    pthread_join(s->acc, NULL);
    for (int i = 0; i < s->nconns; i++) {
        pthread_join(s->conns[i].tid, NULL);
        free(s->conns[i].out);
    }
    close(s->lfd);
    close(s->stopfd);
    pthread_mutex_destroy(&s->mu);
}

static int
ts_close_code(struct ts *s)
{
    pthread_mutex_lock(&s->mu);
    int code = s->close_code;
    pthread_mutex_unlock(&s->mu);
    return code;
}

/* A loopback port where nobody listens. */
static int
closed_port(void)
{
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

/* ------------------------------------------------------- client fixture */

struct fx;

struct rec {                      /* what one client connection saw */
    struct fx *f;
    struct wsclient_conn *c;
    char tag;
    const struct ts_step *script; /* the sizes to expect; NULL: any */
    int opens, closes;
    unsigned msgs;
    size_t bytes;
    int bad;                      /* messages not the expected ones */
    int code;
    char reason[WSCLIENT_REASON_MAX];
    uint64_t t_open, t_close;
    char peer[64];                /* wsclient_conn_peer at on_open */
    char close_peer[64];          /* ... and at on_close */
    unsigned close_after;         /* wsclient_conn_close after this many */
    void (*open_hook)(struct rec *r);
    bool try_reconnect;           /* on_close: wsclient_connect again */
    int reconnect_rc;
};

struct fx {
    struct event_base *base;
    struct event *watchdog;
    bool timed_out;
    struct wsclient *w;
    struct ts srv;
    bool srv_up;
    struct child {
        pid_t pid;
        int in_fd;
    } child;                      /* the TLS server process, if any */
    struct rec r[8];              /* here, not on a test's stack: a failed
                                     assertion leaves the test, and teardown
                                     still runs their on_close */
    int pending;                  /* on_close still awaited: break at 0 */
    unsigned msg_target;          /* break when all recs got this many */
    unsigned msgs;
    char *dir;
};

static void
on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct fx *f = arg;
    f->timed_out = true;
    event_base_loopbreak(f->base);
}

static int
fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->base = event_base_new();
    assert_non_null(f->base);
    f->watchdog = evtimer_new(f->base, on_watchdog, f);
    struct timeval tv = { WATCHDOG_SECS, 0 };
    assert_int_equal(evtimer_add(f->watchdog, &tv), 0);
    *state = f;
    return 0;
}

static void tls_server_stop(struct child *ch);

static int
fx_teardown(void **state)
{
    struct fx *f = *state;
    wsclient_free(f->w);
    if (f->srv_up)
        ts_stop(&f->srv);
    tls_server_stop(&f->child);
    event_free(f->watchdog);
    /* the client left nothing behind on the loop */
    assert_int_equal(event_base_get_num_events(f->base, EVENT_BASE_COUNT_ADDED),
                     0);
    event_base_free(f->base);
    if (f->dir != NULL) {
        tu_rmtree(f->dir);
        free(f->dir);
    }
    free(f);
    return 0;
}

static void
fx_client(struct fx *f, struct wsclient_opts *o)
{
    struct wsclient_opts def;
    char err[256];
    if (o == NULL) {
        memset(&def, 0, sizeof(def));
        o = &def;
    }
    o->base = f->base;
    f->w = wsclient_new(o, err, sizeof(err));
    if (f->w == NULL)
        fail_msg("wsclient_new: %s", err);
}

static void
fx_server(struct fx *f)
{
    ts_start(&f->srv);
    f->srv_up = true;
}

static size_t
expect_len(const struct ts_step *sc, unsigned seq)
{
    unsigned base = 0;
    for (; sc->op != TS_END; sc++) {
        if (sc->op != TS_SEND)
            continue;
        if (seq < base + sc->n)
            return sc->size == TS_VARY ? vary_len(seq) : sc->size;
        base += sc->n;
    }
    return (size_t)-1;
}

static void
on_open(void *ud, struct wsclient_conn *c)
{
    struct rec *r = ud;
    if (c != r->c)
        r->bad++;
    r->opens++;
    r->t_open = mono_ms();
    const char *p = wsclient_conn_peer(c);
    snprintf(r->peer, sizeof(r->peer), "%s", p != NULL ? p : "(null)");
    if (r->open_hook != NULL)
        r->open_hook(r);
}

static void
on_message(void *ud, struct wsclient_conn *c, const char *buf, size_t len)
{
    struct rec *r = ud;
    struct fx *f = r->f;
    if (c != r->c || buf[len] != '\0')
        r->bad++;
    if (r->script != NULL) {
        size_t want = expect_len(r->script, r->msgs);
        char *exp = want == len ? malloc(len + 1) : NULL;
        if (exp != NULL)
            msg_fill(exp, len, r->tag, r->msgs);
        if (exp == NULL || memcmp(exp, buf, len) != 0)
            r->bad++;
        free(exp);
    }
    r->msgs++;
    r->bytes += len;
    f->msgs++;
    if (r->close_after != 0 && r->msgs == r->close_after)
        wsclient_conn_close(c);
    if (f->msg_target != 0 && f->msgs == f->msg_target)
        event_base_loopbreak(f->base);
}

static void
on_close(void *ud, struct wsclient_conn *c, int code, const char *reason)
{
    struct rec *r = ud;
    struct fx *f = r->f;
    if (c != r->c || reason == NULL)
        r->bad++;
    r->closes++;
    r->code = code;
    const char *p = wsclient_conn_peer(c);
    snprintf(r->close_peer, sizeof(r->close_peer), "%s",
             p != NULL ? p : "(null)");
    snprintf(r->reason, sizeof(r->reason), "%s", reason != NULL ? reason : "");
    r->t_close = mono_ms();
    if (r->try_reconnect) {
        static const struct wsclient_cbs none = { NULL, NULL, NULL };
        r->reconnect_rc = wsclient_connect(f->w, "ws://127.0.0.1:1/", &none,
                                           NULL, NULL);
    }
    if (--f->pending == 0)
        event_base_loopbreak(f->base);
}

static const struct wsclient_cbs cbs = { on_open, on_message, on_close };

static void
rec_connect(struct fx *f, struct rec *r, char tag, const struct ts_step *sc,
            const char *url)
{
    char buf[256];
    r->f = f;
    r->tag = tag;
    r->script = sc;
    if (url == NULL) {
        snprintf(buf, sizeof(buf), "ws://127.0.0.1:%d/t/%c", f->srv.port, tag);
        url = buf;
    }
    if (sc != NULL && f->srv_up)
        f->srv.scripts[tag - 'A'] = sc;
    assert_int_equal(wsclient_connect(f->w, url, &cbs, r, &r->c), 0);
    assert_non_null(r->c);
    f->pending++;
}

static void
fx_run(struct fx *f)
{
    event_base_dispatch(f->base);
    assert_false(f->timed_out);
}

static void
fx_run_for(struct fx *f, unsigned ms)
{
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    event_base_loopexit(f->base, &tv);
    event_base_dispatch(f->base);
    assert_false(f->timed_out);
}

/* The last request head the server read, copied. */
static void
srv_request(struct fx *f, char *buf, size_t n)
{
    pthread_mutex_lock(&f->srv.mu);
    snprintf(buf, n, "%s", f->srv.req);
    pthread_mutex_unlock(&f->srv.mu);
}

/* ------------------------------------------------------------- the tests */

/* wsclient/null_and_bad_options: NULL is a no-op; bad options are refused
 * with a message and no client. */
static void
test_null_and_bad_options(void **state)
{
    struct fx *f = *state;
    struct wsclient_stats st;
    char err[128];
    wsclient_free(NULL);
    wsclient_conn_close(NULL);
    wsclient_get_stats(NULL, &st);
    assert_int_equal(st.conns, 0);

    struct wsclient_opts o;
    memset(&o, 0, sizeof(o));
    assert_null(wsclient_new(NULL, err, sizeof(err)));
    assert_null(wsclient_new(&o, err, sizeof(err)));   /* no base */
    assert_non_null(strstr(err, "base"));
    o.base = f->base;
    o.user_agent = "evil\r\nX-Injected: 1";
    assert_null(wsclient_new(&o, err, sizeof(err)));
    assert_non_null(strstr(err, "user_agent"));
    char ua[300];
    memset(ua, 'u', sizeof(ua) - 1);
    ua[sizeof(ua) - 1] = '\0';
    o.user_agent = ua;
    assert_null(wsclient_new(&o, err, sizeof(err)));
    assert_non_null(strstr(err, "user_agent"));
    o.user_agent = NULL;
    o.max_message = ((size_t)1 << 30) + 1;
    assert_null(wsclient_new(&o, err, sizeof(err)));
    assert_non_null(strstr(err, "max_message"));
    o.max_message = 0;
    o.ca_file = "/nonexistent/ca.pem";
    assert_null(wsclient_new(&o, err, sizeof(err)));
    assert_non_null(strstr(err, "ca_file"));
    assert_null(wsclient_new(&o, NULL, 0));   /* no room for a message */
}

/* wsclient/bad_urls: malformed or hostile URLs are refused up front with
 * RS_EINVAL and no callback; odd but valid ones connect (and are refused by
 * the closed port: exactly one on_close 1006 each). */
static void
test_bad_urls(void **state)
{
    struct fx *f = *state;
    fx_client(f, NULL);
    char longhost[200], longpath[1200], url[1400];
    memset(longhost, 'h', sizeof(longhost) - 1);
    longhost[sizeof(longhost) - 1] = '\0';
    memset(longpath, 'p', sizeof(longpath) - 1);
    longpath[sizeof(longpath) - 1] = '\0';
    const char *bad[] = {
        "", "http://127.0.0.1/", "ws:/127.0.0.1/", "ws://", "ws:///x",
        "ws://:80/", "ws://127.0.0.1:0/", "ws://127.0.0.1:65536/",
        "ws://127.0.0.1:12a/", "ws://127.0.0.1:/", "ws://127.0.0.1:80:81/",
        "ws://[::1/", "ws://[::1]x/", "ws://[zz::1]/", "ws://user@127.0.0.1/",
        "ws://127.0.0.1/a b", "ws://127.0.0.1/a\r\nX-Injected: 1",
        "ws://127.0.0.1/\x7f", "ws://ex%41mple/", "ws://127.0.0.1:1234567/",
    };
    struct wsclient_conn *c = (struct wsclient_conn *)(uintptr_t)1;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (wsclient_connect(f->w, bad[i], &cbs, NULL, &c) != RS_EINVAL)
            fail_msg("accepted %s", bad[i]);
        assert_null(c);
    }
    snprintf(url, sizeof(url), "ws://%s/", longhost);
    assert_int_equal(wsclient_connect(f->w, url, &cbs, NULL, &c), RS_EINVAL);
    snprintf(url, sizeof(url), "ws://127.0.0.1/%s", longpath);
    assert_int_equal(wsclient_connect(f->w, url, &cbs, NULL, &c), RS_EINVAL);
    assert_int_equal(wsclient_connect(f->w, NULL, &cbs, NULL, &c), RS_EINVAL);
    fx_run_for(f, 100);

    int port = closed_port();
    const char *scheme[] = { "WS", "ws", "ws", "ws" };
    const char *tail[] = { "", "?since=1", "#frag", "/a/b?c#d" };
    struct rec *r = f->r;
    for (int i = 0; i < 4; i++) {
        snprintf(url, sizeof(url), "%s://127.0.0.1:%d%s", scheme[i], port,
                 tail[i]);
        rec_connect(f, &r[i], 'A', NULL, url);
    }
    fx_run(f);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(r[i].opens, 0);
        assert_int_equal(r[i].closes, 1);
        assert_int_equal(r[i].code, WSCLIENT_ABNORMAL);
        assert_int_equal(r[i].bad, 0);
    }
}

/* wsclient/order_10000: 10,000 messages of sizes 0..3000 arrive whole, in
 * order and byte-exact; the server's close code and reason come through. */
static void
test_order_10000(void **state)
{
    static const struct ts_step sc[] = {
        { .op = TS_SEND, .n = 10000, .size = TS_VARY },
        { .op = TS_CLOSE, .code = 1000, .text = "done" },
        { .op = TS_END },
    };
    struct fx *f = *state;
    struct rec *r = f->r;
    fx_server(f);
    fx_client(f, NULL);
    rec_connect(f, r, 'A', sc, NULL);
    fx_run(f);
    assert_int_equal(r->bad, 0);
    assert_int_equal(r->msgs, 10000);
    assert_int_equal(r->opens, 1);
    assert_int_equal(r->closes, 1);
    assert_int_equal(r->code, 1000);
    assert_string_equal(r->reason, "done");
    struct wsclient_stats st;
    wsclient_get_stats(f->w, &st);
    assert_int_equal(st.messages, 10000);
    assert_int_equal(st.queued, 0);
    assert_int_equal(st.conns, 0);
}

/* wsclient/big_fragmented: 1 MiB messages in 1000-byte fragments with a
 * ping between fragments and an empty final frame, in 64 KiB fragments,
 * and in one frame, are reassembled byte-exact. */
static void
test_big_fragmented(void **state)
{
    static const struct ts_step sc[] = {
        { .op = TS_SEND, .n = 1, .size = 1 << 20, .frag = 1000,
          .ping_mid = true, .empty_fin = true },
        { .op = TS_SEND, .n = 2, .size = (1 << 20) + 17, .frag = 65536 },
        { .op = TS_SEND, .n = 1, .size = 1 << 20 },
        { .op = TS_SEND, .n = 1, .size = 0, .frag = 10, .empty_fin = true },
        { .op = TS_CLOSE, .code = 1000, .text = "" },
        { .op = TS_END },
    };
    struct fx *f = *state;
    struct rec *r = f->r;
    fx_server(f);
    fx_client(f, NULL);
    rec_connect(f, r, 'A', sc, NULL);
    fx_run(f);
    assert_int_equal(r->bad, 0);
    assert_int_equal(r->msgs, 5);
    assert_int_equal(r->bytes, 4 * (1 << 20) + 34);
    assert_int_equal(r->code, 1000);
}

/* wsclient/too_big: a message of exactly max_message passes; one byte more
 * (one frame, fragments, or a header announcing 2^62 bytes) closes with
 * 1009, told to the server too. */
static void
test_too_big(void **state)
{
    static const struct ts_step a[] = {
        { .op = TS_SEND, .n = 1, .size = 100000 },
        { .op = TS_SEND, .n = 1, .size = 100001 },
        { .op = TS_SERVE, .ms = 5000 },
        { .op = TS_END },
    };
    static const struct ts_step b[] = {
        { .op = TS_SEND, .n = 1, .size = 300000, .frag = 30000 },
        { .op = TS_SERVE, .ms = 5000 },
        { .op = TS_END },
    };
    static const struct ts_step c[] = {
        { .op = TS_HUGE_HDR },
        { .op = TS_SERVE, .ms = 5000 },
        { .op = TS_END },
    };
    struct fx *f = *state;
    struct rec *r = f->r;
    struct wsclient_opts o;
    memset(&o, 0, sizeof(o));
    o.max_message = 100000;
    fx_server(f);
    fx_client(f, &o);
    rec_connect(f, &r[0], 'A', a, NULL);
    rec_connect(f, &r[1], 'B', b, NULL);
    rec_connect(f, &r[2], 'C', c, NULL);
    fx_run(f);
    assert_int_equal(r[0].msgs, 1);
    assert_int_equal(r[0].bad, 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r[i].closes, 1);
        assert_int_equal(r[i].code, WSCLIENT_TOO_BIG);
        assert_string_equal(r[i].reason, "message too big");
    }
    assert_int_equal(r[1].msgs, 0);
    assert_int_equal(r[2].msgs, 0);
    assert_int_equal(ts_close_code(&f->srv), 1009);
}

/* wsclient/close_codes: the server's code and reason are propagated (4001,
 * 1001 with a 123-byte reason), an empty close frame is 1005, and lws 4.1's
 * rewrite of 1013 to 1002 is pinned down (the reason survives). */
static void
test_close_codes(void **state)
{
    static char long_reason[124];
    memset(long_reason, 'r', 123);
    static const struct ts_step a[] = {
        { .op = TS_CLOSE, .code = 4001,
          .text = "gap: since is older than the backlog" },
        { .op = TS_END },
    };
    static const struct ts_step b[] = {
        { .op = TS_CLOSE, .code = -1 },
        { .op = TS_END },
    };
    static const struct ts_step c[] = {
        { .op = TS_CLOSE, .code = 1013,
          .text = "too many channels on this hub" },
        { .op = TS_END },
    };
    const struct ts_step d[] = {
        { .op = TS_CLOSE, .code = 1001, .text = long_reason },
        { .op = TS_END },
    };
    struct fx *f = *state;
    struct rec *r = f->r;
    fx_server(f);
    fx_client(f, NULL);
    rec_connect(f, &r[0], 'A', a, NULL);
    rec_connect(f, &r[1], 'B', b, NULL);
    rec_connect(f, &r[2], 'C', c, NULL);
    rec_connect(f, &r[3], 'D', d, NULL);
    fx_run(f);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(r[i].opens, 1);
        assert_int_equal(r[i].closes, 1);
        assert_int_equal(r[i].bad, 0);
    }
    assert_int_equal(r[0].code, 4001);
    assert_string_equal(r[0].reason, "gap: since is older than the backlog");
    assert_int_equal(r[1].code, WSCLIENT_NO_STATUS);
    assert_string_equal(r[1].reason, "");
    assert_int_equal(r[2].code, 1002);
    assert_string_equal(r[2].reason, "too many channels on this hub");
    assert_int_equal(r[3].code, 1001);
    assert_string_equal(r[3].reason, long_reason);
}

/* wsclient/hostile_frames: frames that break RFC 6455 (a reserved opcode,
 * a continuation with nothing to continue, a fragmented ping, a ping over
 * 125 bytes) end the connection with 1006 and deliver nothing; a binary
 * message is delivered like a text one. */
static void
test_hostile_frames(void **state)
{
    static const struct ts_step a[] = {
        { .op = TS_RAW, .text = "\x83\x01x", .size = 3 },
        { .op = TS_SERVE, .ms = 5000 },
        { .op = TS_END },
    };
    static const struct ts_step b[] = {
        { .op = TS_RAW, .text = "\x80\x01x", .size = 3 },
        { .op = TS_SERVE, .ms = 5000 },
        { .op = TS_END },
    };
    static const struct ts_step c[] = {
        { .op = TS_RAW, .text = "\x09\x01x", .size = 3 },
        { .op = TS_SERVE, .ms = 5000 },
        { .op = TS_END },
    };
    static const struct ts_step d[] = {
        { .op = TS_RAW, .text = "\x89\x7e\x00\x80", .size = 4 },
        { .op = TS_SERVE, .ms = 5000 },
        { .op = TS_END },
    };
    static const struct ts_step e[] = {
        { .op = TS_RAW, .text = "\x82\x03\x00\xff\x01", .size = 5 },
        { .op = TS_CLOSE, .code = 1000, .text = "" },
        { .op = TS_END },
    };
    struct fx *f = *state;
    struct rec *r = f->r;
    fx_server(f);
    fx_client(f, NULL);
    rec_connect(f, &r[0], 'A', a, NULL);
    rec_connect(f, &r[1], 'B', b, NULL);
    rec_connect(f, &r[2], 'C', c, NULL);
    rec_connect(f, &r[3], 'D', d, NULL);
    rec_connect(f, &r[4], 'E', e, NULL);
    r[4].script = NULL;   /* its one message is checked below */
    fx_run(f);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(r[i].opens, 1);
        assert_int_equal(r[i].msgs, 0);
        assert_int_equal(r[i].closes, 1);
        assert_int_equal(r[i].code, WSCLIENT_ABNORMAL);
    }
    assert_int_equal(r[4].msgs, 1);
    assert_int_equal(r[4].bytes, 3);
    assert_int_equal(r[4].code, 1000);
}

/* wsclient/connect_refused: nobody listening is a quick 1006, never open. */
static void
test_connect_refused(void **state)
{
    struct fx *f = *state;
    struct rec *r = f->r;
    char url[64];
    fx_client(f, NULL);
    snprintf(url, sizeof(url), "ws://127.0.0.1:%d/channel/x", closed_port());
    uint64_t t0 = mono_ms();
    rec_connect(f, r, 'A', NULL, url);
    fx_run(f);
    assert_int_equal(r->opens, 0);
    assert_int_equal(r->closes, 1);
    assert_int_equal(r->code, WSCLIENT_ABNORMAL);
    assert_true(strncmp(r->reason, "connect failed", 14) == 0);
    assert_true(r->t_close - t0 < 1000);
}

/* wsclient/connect_timeout: a server that accepts but never answers the
 * upgrade is given up after connect_timeout_ms; one that answers 404 fails
 * at once. Neither ever opens. */
static void
test_connect_timeout(void **state)
{
    static const struct ts_step silent[] = { { .op = TS_NO_HS },
                                             { .op = TS_END } };
    static const struct ts_step reject[] = { { .op = TS_REJECT },
                                             { .op = TS_END } };
    struct fx *f = *state;
    struct rec *r = f->r;
    struct wsclient_opts o;
    memset(&o, 0, sizeof(o));
    o.connect_timeout_ms = 300;
    fx_server(f);
    fx_client(f, &o);
    uint64_t t0 = mono_ms();
    rec_connect(f, &r[0], 'A', silent, NULL);
    rec_connect(f, &r[1], 'B', reject, NULL);
    fx_run(f);
    assert_int_equal(r[0].opens, 0);
    assert_int_equal(r[0].closes, 1);
    assert_int_equal(r[0].code, WSCLIENT_ABNORMAL);
    assert_string_equal(r[0].reason, "connect timeout");
    assert_true(r[0].t_close - t0 >= 250);
    assert_true(r[0].t_close - t0 < 2000);
    assert_int_equal(r[1].opens, 0);
    assert_int_equal(r[1].closes, 1);
    assert_int_equal(r[1].code, WSCLIENT_ABNORMAL);
    assert_true(strncmp(r[1].reason, "connect failed", 14) == 0);
    assert_true(r[1].t_close - t0 < 250);
}

/* wsclient/upgrade_refused: an upgrade answered 401 or 403 (a hub's read
 * access) closes with that status as the code and says so, so that the
 * channel can back off and tell the operator; a 404 stays 1006. */
static void
test_upgrade_refused(void **state)
{
    static const struct ts_step r401[] = { { .op = TS_REJECT, .n = 401 },
                                           { .op = TS_END } };
    static const struct ts_step r403[] = { { .op = TS_REJECT, .n = 403 },
                                           { .op = TS_END } };
    struct fx *f = *state;
    struct rec *r = f->r;
    fx_server(f);
    fx_client(f, NULL);
    rec_connect(f, &r[0], 'A', r401, NULL);
    rec_connect(f, &r[1], 'B', r403, NULL);
    fx_run(f);
    assert_int_equal(r[0].opens, 0);
    assert_int_equal(r[0].closes, 1);
    assert_int_equal(r[0].code, WSCLIENT_UNAUTHORIZED);
    assert_string_equal(r[0].reason, "upgrade refused: HTTP 401");
    assert_int_equal(r[1].opens, 0);
    assert_int_equal(r[1].closes, 1);
    assert_int_equal(r[1].code, WSCLIENT_FORBIDDEN);
    assert_string_equal(r[1].reason, "upgrade refused: HTTP 403");
}

/* wsclient/server_vanishes: what came before the socket died is delivered,
 * then 1006. */
static void
test_vanish(void **state)
{
    static const struct ts_step sc[] = {
        { .op = TS_SEND, .n = 3, .size = 100 },
        { .op = TS_VANISH },
        { .op = TS_END },
    };
    struct fx *f = *state;
    struct rec *r = f->r;
    fx_server(f);
    fx_client(f, NULL);
    rec_connect(f, r, 'A', sc, NULL);
    fx_run(f);
    assert_int_equal(r->opens, 1);
    assert_int_equal(r->msgs, 3);
    assert_int_equal(r->bad, 0);
    assert_int_equal(r->closes, 1);
    assert_int_equal(r->code, WSCLIENT_ABNORMAL);
}

/* wsclient/idle_timeout: a server that stops reading and writing (so our
 * ping goes unanswered) is declared dead after idle_timeout_ms. */
static void
test_idle_timeout(void **state)
{
    static const struct ts_step sc[] = {
        { .op = TS_SEND, .n = 1, .size = 10 },
        { .op = TS_STALL },
        { .op = TS_END },
    };
    struct fx *f = *state;
    struct rec *r = f->r;
    struct wsclient_opts o;
    memset(&o, 0, sizeof(o));
    o.idle_timeout_ms = 600;
    fx_server(f);
    fx_client(f, &o);
    rec_connect(f, r, 'A', sc, NULL);
    fx_run(f);
    assert_int_equal(r->msgs, 1);
    assert_int_equal(r->closes, 1);
    assert_int_equal(r->code, WSCLIENT_ABNORMAL);
    assert_string_equal(r->reason, "idle timeout");
    assert_true(r->t_close - r->t_open >= 550);
    assert_true(r->t_close - r->t_open < 3000);
}

/* wsclient/pings: the server's ping is answered with its payload; a quiet
 * server that answers our pings is not cut by the idle timeout. */
static void
test_pings(void **state)
{
    static const struct ts_step sc[] = {
        { .op = TS_PING, .text = "hello-ping" },
        { .op = TS_SERVE, .ms = 2000 },
        { .op = TS_CLOSE, .code = 1000, .text = "bye" },
        { .op = TS_END },
    };
    struct fx *f = *state;
    struct rec *r = f->r;
    struct wsclient_opts o;
    memset(&o, 0, sizeof(o));
    o.idle_timeout_ms = 600;
    fx_server(f);
    fx_client(f, &o);
    rec_connect(f, r, 'A', sc, NULL);
    fx_run(f);
    assert_int_equal(r->closes, 1);
    assert_int_equal(r->code, 1000);
    assert_string_equal(r->reason, "bye");
    pthread_mutex_lock(&f->srv.mu);
    assert_string_equal(f->srv.pong, "hello-ping");
    assert_true(f->srv.pings >= 2);
    pthread_mutex_unlock(&f->srv.mu);
}

static long
rss_kib(void)
{
    char *s = tu_read_file("/proc/self/statm", NULL);
    long pages = 0;
    if (s != NULL && sscanf(s, "%*s %ld", &pages) != 1)
        pages = 0;
    free(s);
    return pages * (sysconf(_SC_PAGESIZE) / 1024);
}

#define FC_HIGH (256 * 1024)
#define FC_MSG (16 * 1024)
#define FC_N 2000

static size_t fc_peak;
static long fc_rss_growth;
static size_t fc_sent_in_stall;
static uint64_t fc_pauses;

/* The main loop does not drain for 1.5 s: sample what piles up. */
static void
fc_stall(struct rec *r)
{
    struct wsclient_stats st;
    long rss0 = rss_kib();
    for (int i = 0; i < 15; i++) {
        usleep(100 * 1000);
        wsclient_get_stats(r->f->w, &st);
        if (st.queued > fc_peak)
            fc_peak = st.queued;
    }
    fc_rss_growth = rss_kib() - rss0;
    fc_sent_in_stall = atomic_load(&r->f->srv.sent);
    fc_pauses = st.pauses;
}

/* wsclient/flow_control: while the main loop is slow the server keeps
 * sending 32 MiB, but what waits for the main loop stays under queue_high
 * plus one message (reading pauses, TCP pushes back), RSS barely moves, the
 * paused silence is not taken for an idle connection, and then every
 * message arrives in order. */
static void
test_flow_control(void **state)
{
    static const struct ts_step sc[] = {
        { .op = TS_SEND, .n = FC_N, .size = FC_MSG },
        { .op = TS_CLOSE, .code = 1000, .text = "" },
        { .op = TS_END },
    };
    struct fx *f = *state;
    struct rec *r = f->r;
    struct wsclient_opts o;
    memset(&o, 0, sizeof(o));
    o.queue_high = FC_HIGH;
    o.idle_timeout_ms = 600;   /* shorter than the stall: must not count */
    fx_server(f);
    fx_client(f, &o);
    r->open_hook = fc_stall;
    rec_connect(f, r, 'A', sc, NULL);
    fx_run(f);
    assert_int_equal(r->bad, 0);
    assert_int_equal(r->msgs, FC_N);
    assert_int_equal(r->code, 1000);
    assert_true(fc_pauses >= 1);
    assert_true(fc_peak > FC_HIGH / 2);         /* it did fill up... */
    assert_true(fc_peak <= FC_HIGH + FC_MSG);   /* ...and no further */
    assert_true(fc_sent_in_stall < (size_t)FC_N * FC_MSG);
    assert_true(fc_rss_growth < 16 * 1024);
    struct wsclient_stats st;
    wsclient_get_stats(f->w, &st);
    assert_true(st.queued_peak <= FC_HIGH + FC_MSG);
    assert_true(st.pauses >= 1);
    assert_int_equal(st.queued, 0);
}

/* wsclient/close_in_flight: wsclient_conn_close from inside on_message while
 * thousands of messages are still coming: no callback for it afterwards,
 * the server gets a 1000 close, and the connection is freed by itself. A
 * connection closed before it even connected never calls back at all. */
static void
test_close_in_flight(void **state)
{
    static const struct ts_step sc[] = {
        { .op = TS_SEND, .n = 10000, .size = 500 },
        { .op = TS_SERVE, .ms = 10000 },
        { .op = TS_END },
    };
    struct fx *f = *state;
    struct rec *r = f->r;
    fx_server(f);
    fx_client(f, NULL);
    r[0].close_after = 100;
    rec_connect(f, &r[0], 'A', sc, NULL);
    rec_connect(f, &r[1], 'B', sc, NULL);
    wsclient_conn_close(r[1].c);
    for (int i = 0; i < 50 && ts_close_code(&f->srv) == 0; i++)
        fx_run_for(f, 100);
    fx_run_for(f, 200);
    assert_int_equal(ts_close_code(&f->srv), 1000);
    assert_int_equal(r[0].opens, 1);
    assert_int_equal(r[0].msgs, 100);
    assert_int_equal(r[0].closes, 0);
    assert_int_equal(r[0].bad, 0);
    assert_int_equal(r[1].opens + r[1].msgs + r[1].closes, 0);
    struct wsclient_stats st;
    for (int i = 0; i < 50; i++) {
        wsclient_get_stats(f->w, &st);
        if (st.conns == 0)
            break;
        fx_run_for(f, 100);
    }
    assert_int_equal(st.conns, 0);
    assert_int_equal(st.queued, 0);
}

/* wsclient/two_connections: two connections at once each get their own
 * stream whole and in order, and their own close. */
static void
test_two_connections(void **state)
{
    static const struct ts_step a[] = {
        { .op = TS_SEND, .n = 3000, .size = TS_VARY },
        { .op = TS_CLOSE, .code = 1000, .text = "a" },
        { .op = TS_END },
    };
    static const struct ts_step b[] = {
        { .op = TS_SEND, .n = 500, .size = 5000, .frag = 700 },
        { .op = TS_CLOSE, .code = 4002, .text = "slow consumer" },
        { .op = TS_END },
    };
    struct fx *f = *state;
    struct rec *r = f->r;
    fx_server(f);
    fx_client(f, NULL);
    rec_connect(f, &r[0], 'A', a, NULL);
    rec_connect(f, &r[1], 'B', b, NULL);
    fx_run(f);
    assert_int_equal(r[0].bad + r[1].bad, 0);
    assert_int_equal(r[0].msgs, 3000);
    assert_int_equal(r[1].msgs, 500);
    assert_int_equal(r[0].code, 1000);
    assert_string_equal(r[0].reason, "a");
    assert_int_equal(r[1].code, 4002);
    assert_string_equal(r[1].reason, "slow consumer");
}

/* wsclient/free_with_open_connections: wsclient_free with three open
 * connections (one to a stalled server) returns within a second or so,
 * sends 1001 to the live servers, runs each on_close exactly once with
 * WSCLIENT_CANCELLED, and refuses a reconnect from inside it. */
static void
test_free_open(void **state)
{
    static const struct ts_step live[] = {
        { .op = TS_SEND, .n = 1, .size = 10 },
        { .op = TS_SERVE, .ms = 20000 },
        { .op = TS_END },
    };
    static const struct ts_step stalled[] = {
        { .op = TS_SEND, .n = 1, .size = 10 },
        { .op = TS_STALL },
        { .op = TS_END },
    };
    struct fx *f = *state;
    struct rec *r = f->r;
    fx_server(f);
    fx_client(f, NULL);
    rec_connect(f, &r[0], 'A', live, NULL);
    rec_connect(f, &r[1], 'B', live, NULL);
    rec_connect(f, &r[2], 'C', stalled, NULL);
    r[0].try_reconnect = true;
    f->msg_target = 3;
    fx_run(f);
    uint64_t t0 = mono_ms();
    wsclient_free(f->w);
    uint64_t took = mono_ms() - t0;
    f->w = NULL;
    assert_true(took < 2000);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r[i].opens, 1);
        assert_int_equal(r[i].msgs, 1);
        assert_int_equal(r[i].closes, 1);
        assert_int_equal(r[i].code, WSCLIENT_CANCELLED);
        assert_int_equal(r[i].bad, 0);
    }
    assert_int_equal(r[0].reconnect_rc, RS_ESTATE);
    for (int i = 0; i < 50 && ts_close_code(&f->srv) == 0; i++)
        usleep(10000);
    assert_int_equal(ts_close_code(&f->srv), 1001);
}

/* wsclient/handshake_headers: the request carries the path and query,
 * Host and Origin with the port, and our User-Agent; the fragment is not
 * sent. */
static void
test_handshake_headers(void **state)
{
    static const struct ts_step sc[] = {
        { .op = TS_CLOSE, .code = 1000, .text = "" },
        { .op = TS_END },
    };
    struct fx *f = *state;
    struct rec *r = f->r;
    char url[128], want[128], req[4096];
    struct wsclient_opts o;
    memset(&o, 0, sizeof(o));
    o.user_agent = "test-agent/1";
    fx_server(f);
    fx_client(f, &o);
    snprintf(url, sizeof(url), "ws://127.0.0.1:%d/t/A?since=42#frag",
             f->srv.port);
    rec_connect(f, r, 'A', sc, url);
    fx_run(f);
    assert_int_equal(r->code, 1000);
    srv_request(f, req, sizeof(req));
    assert_true(strncmp(req, "GET /t/A?since=42 HTTP/1.1\r\n", 28) == 0);
    lower(req);
    snprintf(want, sizeof(want), "\r\nhost: 127.0.0.1:%d\r\n", f->srv.port);
    assert_non_null(strstr(req, want));
    snprintf(want, sizeof(want), "\r\norigin: http://127.0.0.1:%d\r\n",
             f->srv.port);
    assert_non_null(strstr(req, want));
    assert_non_null(strstr(req, "\r\nuser-agent: test-agent/1\r\n"));
    assert_null(strstr(req, "frag"));
}

/* Does "localhost" resolve to 127.0.0.1 alone (as on these machines)? */
static bool
localhost_is_v4_only(void)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo("localhost", NULL, &hints, &res) != 0)
        return false;
    bool ok = true;
    for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next)
        ok = ok && ai->ai_family == AF_INET &&
             ((const struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr ==
                 htonl(INADDR_LOOPBACK);
    freeaddrinfo(res);
    return ok;
}

/* wsclient/peer: a host name is resolved by us and connected to by its
 * address (wsclient_conn_peer), while Host still says the name; a
 * numeric host is its own peer; a refused connection names the address
 * it tried. (The walk over a name's several addresses is proven with real
 * hub nodes in test_multinode.sh, which can give a name two addresses.) */
static void
test_peer(void **state)
{
    static const struct ts_step sc[] = {
        { .op = TS_CLOSE, .code = 1000, .text = "" },
        { .op = TS_END },
    };
    struct fx *f = *state;
    struct rec *r = f->r;
    char url[128], want[128], req[4096];
    if (!localhost_is_v4_only())
        skip();   /* ::1 first would be refused: a walk, not this test */
    fx_server(f);
    fx_client(f, NULL);
    snprintf(url, sizeof(url), "ws://localhost:%d/t/A", f->srv.port);
    rec_connect(f, &r[0], 'A', sc, url);
    fx_run(f);
    assert_int_equal(r[0].opens, 1);
    assert_int_equal(r[0].code, 1000);
    assert_string_equal(r[0].peer, "127.0.0.1");
    assert_string_equal(r[0].close_peer, "127.0.0.1");
    srv_request(f, req, sizeof(req));
    lower(req);
    snprintf(want, sizeof(want), "\r\nhost: localhost:%d\r\n", f->srv.port);
    assert_non_null(strstr(req, want));

    snprintf(url, sizeof(url), "ws://127.0.0.1:%d/t/B", f->srv.port);
    rec_connect(f, &r[1], 'B', sc, url);
    snprintf(url, sizeof(url), "ws://localhost:%d/t/C", closed_port());
    rec_connect(f, &r[2], 'C', NULL, url);
    fx_run(f);
    assert_string_equal(r[1].peer, "127.0.0.1");
    assert_int_equal(r[2].opens, 0);
    assert_int_equal(r[2].code, WSCLIENT_ABNORMAL);
    assert_string_equal(r[2].close_peer, "127.0.0.1");
}

/* wsclient/ipv6_literal: ws://[::1]:PORT/ connects to the IPv6 loopback
 * and sends Host with the brackets. Skipped where there is no ::1. */
static void
test_ipv6_literal(void **state)
{
    static const struct ts_step sc[] = {
        { .op = TS_SEND, .n = 2, .size = 1000 },
        { .op = TS_CLOSE, .code = 1000, .text = "v6" },
        { .op = TS_END },
    };
    struct fx *f = *state;
    if (!ts_start_af(&f->srv, AF_INET6))
        skip();
    f->srv_up = true;
    fx_client(f, NULL);
    struct rec *r = f->r;
    char url[64], want[64], req[4096];
    snprintf(url, sizeof(url), "ws://[::1]:%d/t/A", f->srv.port);
    rec_connect(f, r, 'A', sc, url);
    fx_run(f);
    assert_int_equal(r->msgs, 2);
    assert_int_equal(r->bad, 0);
    assert_int_equal(r->code, 1000);
    assert_string_equal(r->reason, "v6");
    snprintf(want, sizeof(want), "\r\nHost: [::1]:%d\r\n", f->srv.port);
    srv_request(f, req, sizeof(req));
    assert_non_null(strstr(req, want));
}

/* wsclient/alloc_failures: every allocation of wsclient_new and
 * wsclient_connect may fail: NULL or RS_ENOMEM, no callback, no leak. */
static void
test_alloc_failures(void **state)
{
    struct fx *f = *state;
    struct wsclient_opts o;
    char err[128];
    memset(&o, 0, sizeof(o));
    o.base = f->base;
    o.ca_file = "/etc/hostname";   /* readable: exercises its copy */
    unsigned long n;
    for (n = 1; n < 100; n++) {
        tu_alloc_fail_at(n);
        struct wsclient *w = wsclient_new(&o, err, sizeof(err));
        unsigned long seen = tu_alloc_count();
        tu_alloc_fail_at(0);
        if (w == NULL) {
            assert_non_null(strstr(err, "out of memory"));
            continue;
        }
        wsclient_free(w);
        if (seen < n)
            break;
    }
    assert_true(n > 1 && n < 100);

    fx_client(f, NULL);
    struct wsclient_conn *c = NULL;
    tu_alloc_fail_at(1);
    int rc = wsclient_connect(f->w, "ws://127.0.0.1:1/", &cbs, NULL, &c);
    tu_alloc_fail_at(0);
    assert_int_equal(rc, RS_ENOMEM);
    assert_null(c);
    fx_run_for(f, 100);
    struct wsclient_stats st;
    wsclient_get_stats(f->w, &st);
    assert_int_equal(st.conns, 0);
}

static void
oom_arm(struct rec *r)
{
    tu_alloc_fail_at(1);   /* the next rs_malloc: the lws thread's message */
    atomic_store(&r->f->srv.go, 1);
}

/* wsclient/oom_on_receive: when the lws thread cannot allocate a message
 * the connection closes with 1011, on both ends. */
static void
test_oom_on_receive(void **state)
{
    static const struct ts_step sc[] = {
        { .op = TS_WAIT_GO },
        { .op = TS_SEND, .n = 1, .size = 1000 },
        { .op = TS_SERVE, .ms = 5000 },
        { .op = TS_END },
    };
    struct fx *f = *state;
    struct rec *r = f->r;
    fx_server(f);
    fx_client(f, NULL);
    r->open_hook = oom_arm;
    rec_connect(f, r, 'A', sc, NULL);
    fx_run(f);
    tu_alloc_fail_at(0);
    assert_int_equal(r->msgs, 0);
    assert_int_equal(r->closes, 1);
    assert_int_equal(r->code, WSCLIENT_INTERNAL);
    assert_string_equal(r->reason, "out of memory");
    assert_int_equal(ts_close_code(&f->srv), 1011);
}

/* ------------------------------------------------------ the TLS server */

/* Python's websockets over Python's ssl: an implementation independent of
 * lws on the other end. It prints its port, sends two messages (msg_fill,
 * tag 'T') to each client and closes with 1000 "bye"; it exits when its
 * stdin closes. */
static const char tls_server_py[] =
    "import asyncio, ssl, sys, websockets\n"
    "def fill(seq, n):\n"
    "    head = 'T%08u|' % seq\n"
    "    return ''.join(head[i] if i < len(head) else\n"
    "                   chr(97 + (seq * 7 + i) % 26) for i in range(n))\n"
    "async def handler(ws, path=None):\n"
    "    await ws.send(fill(0, 14))\n"
    "    await ws.send(fill(1, 200000))\n"
    "    await ws.close(1000, 'bye')\n"
    "async def main():\n"
    "    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n"
    "    ctx.load_cert_chain(sys.argv[1], sys.argv[2])\n"
    "    async with websockets.serve(handler, '127.0.0.1', 0,\n"
    "                                ssl=ctx) as srv:\n"
    "        print(srv.sockets[0].getsockname()[1], flush=True)\n"
    "        await asyncio.get_running_loop().run_in_executor(None,\n"
    "                                                         sys.stdin.read)\n"
    "asyncio.run(main())\n";

/* Start the server; its port, or fail the test. */
static int
tls_server_start(struct child *ch, const char *cert, const char *key)
{
    int in[2], out[2];
    assert_int_equal(pipe(in), 0);
    assert_int_equal(pipe(out), 0);
    for (int i = 0; i < 2; i++) {
        fcntl(in[i], F_SETFD, FD_CLOEXEC);
        fcntl(out[i], F_SETFD, FD_CLOEXEC);
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    char *argv[] = { (char *)(uintptr_t)"python3", (char *)(uintptr_t)"-c",
                     (char *)(uintptr_t)tls_server_py, (char *)(uintptr_t)cert,
                     (char *)(uintptr_t)key, NULL };
    int rc = posix_spawn(&ch->pid, "/usr/bin/python3", &fa, NULL, argv,
                         environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    ch->in_fd = in[1];
    assert_int_equal(rc, 0);
    char line[32];
    size_t n = 0;
    struct pollfd p = { .fd = out[0], .events = POLLIN };
    while (n < sizeof(line) - 1 && (n == 0 || line[n - 1] != '\n') &&
           poll(&p, 1, 20000) == 1) {
        ssize_t got = read(out[0], line + n, sizeof(line) - 1 - n);
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    close(out[0]);
    line[n] = '\0';
    long port = strtol(line, NULL, 10);
    if (port <= 0 || port > 65535)
        fail_msg("the Python TLS server did not start: '%s'", line);
    return (int)port;
}

static void
tls_server_stop(struct child *ch)
{
    if (ch->pid <= 0)
        return;
    close(ch->in_fd);
    int st;
    for (int i = 0; i < 500 && waitpid(ch->pid, &st, WNOHANG) == 0; i++)
        usleep(10000);
    if (waitpid(ch->pid, &st, WNOHANG) == 0) {
        kill(ch->pid, SIGKILL);
        waitpid(ch->pid, &st, 0);
    }
    ch->pid = 0;
}

static void
add_ext(X509 *x, X509V3_CTX *v3, int nid, const char *value)
{
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, v3, nid, value);
    assert_non_null(ext);
    assert_int_equal(X509_add_ext(x, ext, -1), 1);
    X509_EXTENSION_free(ext);
}

/* A self-signed certificate for localhost and 127.0.0.1. */
static void
make_cert(const char *cert_path, const char *key_path)
{
    EVP_PKEY *pk = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    assert_non_null(pk);
    assert_non_null(x);
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_set_pubkey(x, pk);
    X509_NAME *name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               (const unsigned char *)"localhost", -1, -1, 0);
    X509_set_issuer_name(x, name);
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
    add_ext(x, &v3, NID_basic_constraints, "critical,CA:TRUE");
    add_ext(x, &v3, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1");
    assert_true(X509_sign(x, pk, EVP_sha256()) > 0);
    FILE *fp = fopen(key_path, "w");
    assert_non_null(fp);
    assert_int_equal(PEM_write_PrivateKey(fp, pk, NULL, NULL, 0, NULL, NULL),
                     1);
    fclose(fp);
    fp = fopen(cert_path, "w");
    assert_non_null(fp);
    assert_int_equal(PEM_write_X509(fp, x), 1);
    fclose(fp);
    X509_free(x);
    EVP_PKEY_free(pk);
}

/* wsclient/wss: over TLS to an independent server (Python), with its CA
 * given, messages (one of 200 KB, across TLS records) arrive byte-exact and
 * the close comes through; without that CA the certificate is refused:
 * 1006, never open. The two clients run one after the other (see
 * wsclient_new on lws 4.1 and several TLS contexts). */
static void
test_wss(void **state)
{
    static const struct ts_step expect[] = {
        { .op = TS_SEND, .n = 1, .size = 14 },
        { .op = TS_SEND, .n = 1, .size = 200000 },
        { .op = TS_END },
    };
    struct fx *f = *state;
    char cert[4200], key[4200], url[128];
    f->dir = tu_mkdtemp();
    snprintf(cert, sizeof(cert), "%s/cert.pem", f->dir);
    snprintf(key, sizeof(key), "%s/key.pem", f->dir);
    make_cert(cert, key);
    int port = tls_server_start(&f->child, cert, key);
    snprintf(url, sizeof(url), "wss://127.0.0.1:%d/x", port);

    struct rec *r = f->r;
    struct wsclient_opts o;
    memset(&o, 0, sizeof(o));
    o.ca_file = cert;
    fx_client(f, &o);
    rec_connect(f, &r[0], 'T', expect, url);
    fx_run(f);
    wsclient_free(f->w);
    f->w = NULL;
    assert_int_equal(r[0].opens, 1);
    assert_int_equal(r[0].msgs, 2);
    assert_int_equal(r[0].bad, 0);
    assert_int_equal(r[0].code, 1000);
    assert_string_equal(r[0].reason, "bye");

    fx_client(f, NULL);
    rec_connect(f, &r[1], 'T', expect, url);
    fx_run(f);
    assert_int_equal(r[1].opens, 0);
    assert_int_equal(r[1].closes, 1);
    assert_int_equal(r[1].code, WSCLIENT_ABNORMAL);
    assert_true(strncmp(r[1].reason, "connect failed", 14) == 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        { "wsclient/null_and_bad_options", test_null_and_bad_options, fx_setup,
          fx_teardown, NULL },
        { "wsclient/bad_urls", test_bad_urls, fx_setup, fx_teardown, NULL },
        { "wsclient/order_10000", test_order_10000, fx_setup, fx_teardown,
          NULL },
        { "wsclient/big_fragmented", test_big_fragmented, fx_setup, fx_teardown,
          NULL },
        { "wsclient/too_big", test_too_big, fx_setup, fx_teardown, NULL },
        { "wsclient/close_codes", test_close_codes, fx_setup, fx_teardown,
          NULL },
        { "wsclient/hostile_frames", test_hostile_frames, fx_setup,
          fx_teardown, NULL },
        { "wsclient/connect_refused", test_connect_refused, fx_setup,
          fx_teardown, NULL },
        { "wsclient/connect_timeout", test_connect_timeout, fx_setup,
          fx_teardown, NULL },
        { "wsclient/upgrade_refused", test_upgrade_refused, fx_setup,
          fx_teardown, NULL },
        { "wsclient/server_vanishes", test_vanish, fx_setup, fx_teardown,
          NULL },
        { "wsclient/idle_timeout", test_idle_timeout, fx_setup, fx_teardown,
          NULL },
        { "wsclient/pings", test_pings, fx_setup, fx_teardown, NULL },
        { "wsclient/flow_control", test_flow_control, fx_setup, fx_teardown,
          NULL },
        { "wsclient/close_in_flight", test_close_in_flight, fx_setup,
          fx_teardown, NULL },
        { "wsclient/two_connections", test_two_connections, fx_setup,
          fx_teardown, NULL },
        { "wsclient/free_with_open_connections", test_free_open, fx_setup,
          fx_teardown, NULL },
        { "wsclient/handshake_headers", test_handshake_headers, fx_setup,
          fx_teardown, NULL },
        { "wsclient/peer", test_peer, fx_setup, fx_teardown, NULL },
        { "wsclient/ipv6_literal", test_ipv6_literal, fx_setup, fx_teardown,
          NULL },
        { "wsclient/alloc_failures", test_alloc_failures, fx_setup, fx_teardown,
          NULL },
        { "wsclient/oom_on_receive", test_oom_on_receive, fx_setup, fx_teardown,
          NULL },
        { "wsclient/wss", test_wss, fx_setup, fx_teardown, NULL },
    };
    const char *only = getenv("RS_TEST_FILTER");   /* e.g. "*flow*" */
    if (only != NULL)
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests_name("sub_wsclient", tests, NULL, NULL);
}
