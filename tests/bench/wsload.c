/*
 * wsload.c - load generator for WebSocket fan-out hubs, run by
 * bench_hub.sh against rshub and nchan alike: N subscribers spread over
 * loopback source addresses, one publisher at a set rate, one-way latency
 * from a timestamp in every payload, loss counted per connection. It knows
 * two URL shapes (--target) and nothing else about the server.
 *
 * Why a hand-written client and not libwebsockets' client: a load tool must
 * cost less than the server it measures, and on a 2-core machine the two
 * share the CPUs. lws would add per-frame callbacks, a copy into its rx
 * buffer and a heavy per-connection state. Here a subscriber is ~100 bytes,
 * one read(2) fetches up to 256 KiB and frames are parsed in place. The
 * handshake is minimal (Sec-WebSocket-Accept is not verified, extensions
 * are never offered): acceptable in a test tool, never in product code.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

#define RBUF_SIZE (256 * 1024)     /* one read per readable subscriber */
#define FRAME_MAX (64 * 1024)      /* larger server frames are an error */
#define CONNECT_INFLIGHT 64        /* handshakes in progress per thread */
#define CONNECT_TRIES 3
#define PUB_RBUF 4096
#define WARM_INTERVAL_US 50000     /* warm-up publishes: 20 a second */

/* The payload marker: seq and send time, fixed width, inside <loc>. */
#define MARK "/res/s"
#define SEQ_DIGITS 10
#define TS_DIGITS 16
#define DT_PLACEHOLDER "2000-01-01T00:00:00.000000Z"

enum target { TGT_RSHUB, TGT_NCHAN };

enum phase {
    PH_CONNECT = 0,   /* subscribers connect; nothing is published */
    PH_WARMUP,        /* seq 0 publishes until every subscriber saw one */
    PH_RUN,           /* the measured schedule */
    PH_DRAIN,         /* no new publishes; wait for deliveries */
    PH_DONE,
};

struct opts {
    enum target tgt;
    struct sockaddr_in http, ws;
    char http_host[64], ws_host[64];
    const char *channel;
    const char *topic;        /* rshub: Link rel="self" of each publish */
    unsigned subs, threads, pub_conns, size;
    unsigned src_first, src_last;
    double rate, duration, drain, hold;
    double connect_timeout, warmup_timeout;
    const char *label;
    const char *header;       /* one more line on every upgrade, or NULL */
};

static struct opts opt = {
    .tgt = TGT_RSHUB,
    .channel = "bench",
    .topic = "http://bench.example.org/dataset1/changelist.xml",
    .threads = 2,
    .pub_conns = 8,
    .size = 1024,
    .src_first = 2,
    .src_last = 255,
    .duration = 20,
    .drain = 10,
    .connect_timeout = 60,
    .warmup_timeout = 30,
    .label = "",
};

static _Atomic int phase = PH_CONNECT;
static atomic_bool stop_signal;
static uint64_t max_seq;          /* seqs run 1..max_seq */

static uint64_t
now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void
sleep_us(uint64_t us)
{
    struct timespec ts = { (time_t)(us / 1000000u),
                           (long)(us % 1000000u) * 1000 };
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------ histogram */

/* Log-linear buckets in microseconds, HdrHistogram-like: values below 128
 * exactly, above that 64 buckets per power of two (1.6 % resolution). */
#define HIST_SUB 64
#define HIST_N (2 * HIST_SUB + 57 * HIST_SUB)

struct hist {
    uint64_t b[HIST_N];
    uint64_t count, max;
};

static unsigned
hist_index(uint64_t v)
{
    if (v < 2 * HIST_SUB)
        return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);   /* >= 7 */
    unsigned shift = msb - 6;
    return 2 * HIST_SUB + (msb - 7) * HIST_SUB +
           (unsigned)((v >> shift) - HIST_SUB);
}

/* Highest value that lands in bucket i (reported figures err high). */
static uint64_t
hist_upper(unsigned i)
{
    if (i < 2 * HIST_SUB)
        return i;
    unsigned k = i - 2 * HIST_SUB;
    unsigned shift = 1 + k / HIST_SUB;
    uint64_t low = (uint64_t)(HIST_SUB + k % HIST_SUB) << shift;
    return low + ((uint64_t)1 << shift) - 1;
}

static void
hist_add(struct hist *h, uint64_t v)
{
    h->b[hist_index(v)]++;
    h->count++;
    if (v > h->max)
        h->max = v;
}

static void
hist_merge(struct hist *dst, const struct hist *src)
{
    for (unsigned i = 0; i < HIST_N; i++)
        dst->b[i] += src->b[i];
    dst->count += src->count;
    if (src->max > dst->max)
        dst->max = src->max;
}

/* Percentile p (0..100) in milliseconds; -1 when empty. */
static double
hist_pct(const struct hist *h, double p)
{
    if (h->count == 0)
        return -1;
    uint64_t want = (uint64_t)ceil((double)h->count * p / 100.0);
    if (want == 0)
        want = 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < HIST_N; i++) {
        seen += h->b[i];
        if (seen >= want) {
            uint64_t v = hist_upper(i);
            return (double)(v < h->max ? v : h->max) / 1000.0;
        }
    }
    return (double)h->max / 1000.0;
}

/* --------------------------------------------------------------- bitmaps */

static uint64_t *
bits_new(void)
{
    return calloc((size_t)(max_seq / 64 + 1), sizeof(uint64_t));
}

static bool
bits_test_set(uint64_t *b, uint64_t i)
{
    uint64_t m = (uint64_t)1 << (i % 64);
    bool was = (b[i / 64] & m) != 0;
    b[i / 64] |= m;
    return was;
}

/* ------------------------------------------------------------- payload */

/* The request template: headers plus a fixed-size body whose digits are
 * overwritten in place for each publish. */
struct tmpl {
    char *buf;
    size_t len;
    size_t body_len;
    size_t off_seq, off_ts, off_dt1, off_dt2;
    size_t loc_hint;        /* offset of MARK in the body */
};

static struct tmpl tmpl;

static int
tmpl_build(void)
{
    static const char head[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" "
        "xmlns:rs=\"http://www.openarchives.org/rs/terms/\">\n"
        "  <rs:ln rel=\"up\" "
        "href=\"http://bench.example.org/dataset1/capabilitylist.xml\"/>\n"
        "  <rs:md capability=\"changelist-notification\"/>\n"
        "  <url>\n"
        "    <loc>http://bench.example.org/dataset1" MARK "0000000000/t"
        "0000000000000000</loc>\n"
        "    <lastmod>" DT_PLACEHOLDER "</lastmod>\n"
        "    <rs:md change=\"updated\" datetime=\"" DT_PLACEHOLDER "\"\n"
        "           hash=\"md5:1584abdf8ebdc9802ac0c6a7402c03b6\" "
        "length=\"8876\" type=\"text/html\"/>\n"
        "    <rs:ln rel=\"alternate\" type=\"text/html\" "
        "href=\"http://bench.example.org/mirror/dataset1/";
    static const char tail[] = "\"/>\n  </url>\n</urlset>\n";
    size_t fixed = strlen(head) + strlen(tail);
    size_t pad = opt.size > fixed ? opt.size - fixed : 0;
    size_t body_len = fixed + pad;

    char hdr[1024];
    int hn;
    if (opt.tgt == TGT_RSHUB)
        hn = snprintf(hdr, sizeof(hdr),
                      "POST /hub HTTP/1.1\r\nHost: %s\r\n"
                      "Content-Type: application/xml\r\n"
                      "Link: <%s>; rel=\"self\"\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      opt.http_host, opt.topic, body_len);
    else
        hn = snprintf(hdr, sizeof(hdr),
                      "POST /pub?id=%s HTTP/1.1\r\nHost: %s\r\n"
                      "Content-Type: application/xml\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      opt.channel, opt.http_host, body_len);
    if (hn < 0 || (size_t)hn >= sizeof(hdr))
        return -1;
    tmpl.len = (size_t)hn + body_len;
    tmpl.body_len = body_len;
    tmpl.buf = malloc(tmpl.len + 1);
    if (tmpl.buf == NULL)
        return -1;
    char *p = tmpl.buf;
    memcpy(p, hdr, (size_t)hn);
    p += hn;
    char *body = p;
    memcpy(p, head, strlen(head));
    p += strlen(head);
    for (size_t i = 0; i < pad; i++)
        p[i] = (char)('a' + i % 26);
    p += pad;
    memcpy(p, tail, strlen(tail) + 1);

    char *m = strstr(body, MARK);
    char *d1 = strstr(body, DT_PLACEHOLDER);
    char *d2 = d1 != NULL ? strstr(d1 + 1, DT_PLACEHOLDER) : NULL;
    if (m == NULL || d2 == NULL)
        return -1;
    tmpl.loc_hint = (size_t)(m - body);
    tmpl.off_seq = (size_t)(m - tmpl.buf) + strlen(MARK);
    tmpl.off_ts = tmpl.off_seq + SEQ_DIGITS + 2;
    tmpl.off_dt1 = (size_t)(d1 - tmpl.buf);
    tmpl.off_dt2 = (size_t)(d2 - tmpl.buf);
    return 0;
}

static void
put_digits(char *dst, unsigned width, uint64_t v)
{
    for (unsigned i = width; i > 0; i--) {
        dst[i - 1] = (char)('0' + v % 10);
        v /= 10;
    }
}

/* Stamp seq and the send time (microseconds, also as datetimes). */
static void
tmpl_stamp(char *req, uint64_t seq, uint64_t ts)
{
    put_digits(req + tmpl.off_seq, SEQ_DIGITS, seq);
    put_digits(req + tmpl.off_ts, TS_DIGITS, ts);
    time_t sec = (time_t)(ts / 1000000u);
    struct tm tm;
    gmtime_r(&sec, &tm);
    char dt[96];
    snprintf(dt, sizeof(dt), "%04d-%02d-%02dT%02d:%02d:%02d.%06uZ",
             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec, (unsigned)(ts % 1000000u));
    memcpy(req + tmpl.off_dt1, dt, sizeof(DT_PLACEHOLDER) - 1);
    memcpy(req + tmpl.off_dt2, dt, sizeof(DT_PLACEHOLDER) - 1);
}

static const unsigned char *
find(const unsigned char *p, size_t n, size_t from, const char *needle)
{
    size_t nl = strlen(needle);
    for (size_t pass = 0; pass < 2; pass++) {
        for (size_t i = from; i + nl <= n; i++)
            if (p[i] == (unsigned char)needle[0] &&
                memcmp(p + i, needle, nl) == 0)
                return p + i;
        if (from == 0)
            break;
        from = 0;
    }
    return NULL;
}

static bool
get_digits(const unsigned char *p, unsigned width, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < width; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    *out = v;
    return true;
}

/* ----------------------------------------------------------- subscribers */

enum sub_state {
    SUB_IDLE = 0,
    SUB_CONNECTING,
    SUB_HANDSHAKE,
    SUB_OPEN,
    SUB_DEAD,       /* failed for good, or closed */
};

struct sub {
    int fd;
    enum sub_state state;
    uint8_t tries;
    bool warm;                 /* saw a warm-up message */
    bool frag;                 /* inside a fragmented message */
    bool open_at_run;          /* counted in the expected deliveries */
    uint8_t src;               /* last octet of the source address */
    uint16_t close_code;
    uint64_t t_start;
    uint64_t t_upgrade;        /* when the upgrade request went out */
    unsigned char *pend;       /* partial frame (or handshake) bytes */
    uint32_t npend, cappend;
    uint64_t *bits;            /* seqs received */
    uint64_t got;
};

struct sub_thread {
    unsigned idx;
    pthread_t tid;
    int ep;
    struct sub *subs;
    size_t n;
    size_t next;               /* next never-tried subscriber */
    size_t *retry;             /* subscribers to try again */
    size_t nretry;
    unsigned inflight;
    unsigned char *rbuf;
    struct hist lat;
    uint64_t bad_frames, unparsed, no_hub_id, dups, foreign;
    uint64_t closed_run;       /* closed by the peer after connecting */
    uint64_t pings;
    uint64_t last_rx;          /* newest measured delivery, us */
    struct hist up;            /* upgrade request sent -> 101 read */
    uint64_t last_open;        /* newest 101, us */
    /* read by main while running */
    atomic_uint_fast64_t open, failed, warm, delivered;
};

static struct sub_thread *sthreads;

static void
sub_fail(struct sub_thread *t, struct sub *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    free(s->pend);
    s->pend = NULL;
    s->npend = s->cappend = 0;
    if (s->state == SUB_CONNECTING || s->state == SUB_HANDSHAKE)
        t->inflight--;
    if (s->state == SUB_OPEN) {
        atomic_fetch_sub(&t->open, 1);
        if (s->warm)
            atomic_fetch_sub(&t->warm, 1);
        t->closed_run++;
        s->state = SUB_DEAD;
        return;
    }
    if (atomic_load(&phase) == PH_CONNECT && ++s->tries < CONNECT_TRIES) {
        s->state = SUB_IDLE;
        t->retry[t->nretry++] = (size_t)(s - t->subs);
        return;
    }
    s->state = SUB_DEAD;
    atomic_fetch_add(&t->failed, 1);
}

static void
sub_start(struct sub_thread *t, struct sub *s)
{
    int one = 1;
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    s->state = SUB_CONNECTING;
    s->t_start = now_us();
    t->inflight++;
    if (s->fd < 0) {
        sub_fail(t, s);
        return;
    }
    /* The port is picked at connect() from the whole 4-tuple space, so
     * 254 source addresses never run out of ephemeral ports. */
    setsockopt(s->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    struct sockaddr_in src = { .sin_family = AF_INET };
    src.sin_addr.s_addr = htonl(0x7f000000u | s->src);
    struct epoll_event ev = { .events = EPOLLOUT | EPOLLIN, .data.ptr = s };
    if (bind(s->fd, (struct sockaddr *)&src, sizeof(src)) != 0 ||
        (connect(s->fd, (struct sockaddr *)&opt.ws, sizeof(opt.ws)) != 0 &&
         errno != EINPROGRESS) ||
        epoll_ctl(t->ep, EPOLL_CTL_ADD, s->fd, &ev) != 0)
        sub_fail(t, s);
}

static void
sub_send_upgrade(struct sub_thread *t, struct sub *s)
{
    int err = 0;
    socklen_t el = sizeof(err);
    if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
        sub_fail(t, s);
        return;
    }
    char req[4608];
    int n;
    if (opt.tgt == TGT_RSHUB)
        n = snprintf(req, sizeof(req), "GET /channel/%s HTTP/1.1\r\n",
                     opt.channel);
    else
        n = snprintf(req, sizeof(req), "GET /sub?id=%s HTTP/1.1\r\n",
                     opt.channel);
    n += snprintf(req + n, sizeof(req) - (size_t)n,
                  "Host: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                  "Sec-WebSocket-Version: 13\r\n%s%s\r\n", opt.ws_host,
                  opt.header != NULL ? opt.header : "",
                  opt.header != NULL ? "\r\n" : "");
    s->t_upgrade = now_us();
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = s };
    if (write(s->fd, req, (size_t)n) != n ||
        epoll_ctl(t->ep, EPOLL_CTL_MOD, s->fd, &ev) != 0) {
        sub_fail(t, s);
        return;
    }
    s->state = SUB_HANDSHAKE;
}

static void
sub_keep(struct sub *s, const unsigned char *p, size_t n)
{
    if (n == 0) {
        s->npend = 0;
        if (s->cappend > 4096) {   /* keep idle subscribers small */
            free(s->pend);
            s->pend = NULL;
            s->cappend = 0;
        }
        return;
    }
    if (n > s->cappend) {
        uint32_t cap = s->cappend ? s->cappend : 2048;
        while (cap < n)
            cap *= 2;
        unsigned char *np = realloc(s->pend, cap);
        if (np == NULL)
            abort();
        s->pend = np;
        s->cappend = cap;
    }
    memmove(s->pend, p, n);
    s->npend = (uint32_t)n;
}

static void
on_message(struct sub_thread *t, struct sub *s, const unsigned char *p,
           size_t n, uint64_t now)
{
    const unsigned char *m = find(p, n, tmpl.loc_hint, MARK);
    uint64_t seq, ts;
    if (m == NULL || (size_t)(p + n - m) < strlen(MARK) + SEQ_DIGITS + 2 +
                                               TS_DIGITS ||
        !get_digits(m + strlen(MARK), SEQ_DIGITS, &seq) ||
        !get_digits(m + strlen(MARK) + SEQ_DIGITS + 2, TS_DIGITS, &ts)) {
        t->unparsed++;
        return;
    }
    if (seq == 0) {
        if (!s->warm) {
            s->warm = true;
            atomic_fetch_add_explicit(&t->warm, 1, memory_order_relaxed);
        }
        return;
    }
    if (seq > max_seq || s->bits == NULL) {
        t->foreign++;
        return;
    }
    if (bits_test_set(s->bits, seq)) {
        t->dups++;
        return;
    }
    /* rshub: the annotation carries the stream id, so the message came
     * from the stream: it was persisted before it was delivered. */
    if (opt.tgt == TGT_RSHUB && find(p, (size_t)(m - p), 0, "hub:id=\"") == NULL)
        t->no_hub_id++;
    s->got++;
    hist_add(&t->lat, now > ts ? now - ts : 0);
    t->last_rx = now;
}

static void
sub_pong(struct sub *s, const unsigned char *payload, size_t len)
{
    unsigned char f[2 + 4 + 125];
    if (len > 125)
        len = 125;
    f[0] = 0x8a;
    f[1] = (unsigned char)(0x80 | len);
    memset(f + 2, 0, 4);        /* a zero mask leaves the payload as is */
    memcpy(f + 6, payload, len);
    if (write(s->fd, f, 6 + len) < 0) {
        /* a lost pong only risks a keepalive close, which is counted */
    }
}

/* Parse complete frames from p; returns bytes consumed, or -1 to close. */
static long
sub_frames(struct sub_thread *t, struct sub *s, const unsigned char *p,
           size_t n, uint64_t now, uint64_t *measured)
{
    size_t off = 0;
    while (n - off >= 2) {
        const unsigned char *h = p + off;
        unsigned op = h[0] & 0x0f;
        bool fin = (h[0] & 0x80) != 0;
        uint64_t len = h[1] & 0x7f;
        size_t hl = 2;
        if (h[1] & 0x80) {        /* servers never mask */
            t->bad_frames++;
            return -1;
        }
        if (len == 126) {
            if (n - off < 4)
                break;
            len = ((uint64_t)h[2] << 8) | h[3];
            hl = 4;
        } else if (len == 127) {
            if (n - off < 10)
                break;
            len = 0;
            for (int i = 0; i < 8; i++)
                len = (len << 8) | h[2 + i];
            hl = 10;
        }
        if (len > FRAME_MAX) {
            t->bad_frames++;
            return -1;
        }
        if (n - off < hl + len)
            break;
        const unsigned char *pl = h + hl;
        switch (op) {
        case 0x1:
        case 0x2: {
            uint64_t before = s->got;
            on_message(t, s, pl, (size_t)len, now);
            *measured += s->got - before;
            s->frag = !fin;
            break;
        }
        case 0x0:
            if (fin)
                s->frag = false;
            break;
        case 0x8:
            s->close_code = len >= 2 ? (uint16_t)((pl[0] << 8) | pl[1]) : 1005;
            return -1;
        case 0x9:
            t->pings++;
            sub_pong(s, pl, (size_t)len);
            break;
        case 0xa:
            break;
        default:
            t->bad_frames++;
            return -1;
        }
        off += hl + (size_t)len;
    }
    return (long)off;
}

static void
sub_on_handshake(struct sub_thread *t, struct sub *s, size_t n, uint64_t now)
{
    const unsigned char *p = t->rbuf;
    const unsigned char *end = find(p, n, 0, "\r\n\r\n");
    if (end == NULL) {
        if (n > 8192)
            sub_fail(t, s);
        else
            sub_keep(s, p, n);
        return;
    }
    if (n < 12 || memcmp(p, "HTTP/1.1 101", 12) != 0) {
        sub_fail(t, s);
        return;
    }
    s->state = SUB_OPEN;
    t->inflight--;
    atomic_fetch_add(&t->open, 1);
    hist_add(&t->up, now > s->t_upgrade ? now - s->t_upgrade : 0);
    t->last_open = now;
    size_t hl = (size_t)(end - p) + 4;
    uint64_t measured = 0;
    long used = sub_frames(t, s, p + hl, n - hl, now, &measured);
    if (used < 0) {
        sub_fail(t, s);
        return;
    }
    sub_keep(s, p + hl + used, n - hl - (size_t)used);
}

static void
sub_on_readable(struct sub_thread *t, struct sub *s)
{
    size_t have = s->npend;
    if (have > 0)
        memcpy(t->rbuf, s->pend, have);
    ssize_t r = read(s->fd, t->rbuf + have, RBUF_SIZE - have);
    if (r <= 0) {
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        sub_fail(t, s);
        return;
    }
    uint64_t now = now_us();
    size_t n = have + (size_t)r;
    if (s->state == SUB_HANDSHAKE) {
        sub_on_handshake(t, s, n, now);
        return;
    }
    uint64_t measured = 0;
    long used = sub_frames(t, s, t->rbuf, n, now, &measured);
    if (measured > 0)
        atomic_fetch_add_explicit(&t->delivered, measured,
                                  memory_order_relaxed);
    if (used < 0) {
        sub_fail(t, s);
        return;
    }
    sub_keep(s, t->rbuf + used, n - (size_t)used);
}

static void
sub_check_timeouts(struct sub_thread *t, uint64_t now)
{
    uint64_t limit = (uint64_t)(opt.connect_timeout * 1e6 / CONNECT_TRIES);
    for (size_t i = 0; i < t->n; i++) {
        struct sub *s = &t->subs[i];
        if ((s->state == SUB_CONNECTING || s->state == SUB_HANDSHAKE) &&
            now - s->t_start > limit)
            sub_fail(t, s);
    }
}

static void *
sub_thread_main(void *arg)
{
    struct sub_thread *t = arg;
    struct epoll_event evs[512];
    uint64_t last_check = now_us();
    while (atomic_load(&phase) != PH_DONE) {
        if (atomic_load(&phase) == PH_CONNECT) {
            while (t->inflight < CONNECT_INFLIGHT &&
                   (t->nretry > 0 || t->next < t->n)) {
                size_t i = t->nretry > 0 ? t->retry[--t->nretry] : t->next++;
                sub_start(t, &t->subs[i]);
            }
        }
        int n = epoll_wait(t->ep, evs, 512, 50);
        for (int i = 0; i < n; i++) {
            struct sub *s = evs[i].data.ptr;
            if (s->state == SUB_CONNECTING) {
                if (evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
                    sub_send_upgrade(t, s);
            } else if (s->state == SUB_HANDSHAKE || s->state == SUB_OPEN) {
                sub_on_readable(t, s);
            }
        }
        uint64_t now = now_us();
        if (now - last_check > 500000) {
            last_check = now;
            sub_check_timeouts(t, now);
        }
    }
    for (size_t i = 0; i < t->n; i++) {
        if (t->subs[i].fd >= 0)
            close(t->subs[i].fd);
        t->subs[i].fd = -1;
    }
    return NULL;
}

/* ------------------------------------------------------------ publisher */

struct pub_conn {
    int fd;
    bool busy;                 /* a request is out */
    bool up;                   /* connected */
    uint64_t seq;
    uint64_t sent_at;
    size_t woff;
    char *req;                 /* own copy of the template */
    char rbuf[PUB_RBUF];
    size_t rlen;
};

struct publisher {
    pthread_t tid;
    int ep;
    struct pub_conn *c;
    unsigned n;
    uint64_t *acc_bits;        /* seqs answered 2xx */
    struct hist ack;           /* publish -> response, measured only */
    uint64_t sent, accepted, refused, http_err, conn_err, not_sent;
    uint64_t warm_sent;
    uint64_t t0, t_end;        /* run start and end, us */
    atomic_bool finished;      /* every measured request answered */
};

static struct publisher pub;

static void
pub_close(struct pub_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->up = false;
    if (c->busy)
        pub.conn_err++;
    c->busy = false;
    c->rlen = 0;
}

static void
pub_open(struct pub_conn *c)
{
    int one = 1;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
    if ((connect(c->fd, (struct sockaddr *)&opt.http, sizeof(opt.http)) != 0 &&
         errno != EINPROGRESS) ||
        epoll_ctl(pub.ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
        pub.conn_err++;
        close(c->fd);
        c->fd = -1;
        return;
    }
    c->up = true;   /* writes before the connect completes just wait */
}

static void
pub_flush(struct pub_conn *c)
{
    while (c->woff < tmpl.len) {
        ssize_t w = write(c->fd, c->req + c->woff, tmpl.len - c->woff);
        if (w < 0) {
            if (errno == EAGAIN || errno == ENOTCONN) {
                struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT,
                                          .data.ptr = c };
                epoll_ctl(pub.ep, EPOLL_CTL_MOD, c->fd, &ev);
                return;
            }
            pub_close(c);
            return;
        }
        c->woff += (size_t)w;
    }
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
    epoll_ctl(pub.ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void
pub_send(struct pub_conn *c, uint64_t seq)
{
    c->seq = seq;
    c->sent_at = now_us();
    c->busy = true;
    c->woff = 0;
    tmpl_stamp(c->req, seq, c->sent_at);
    pub_flush(c);
}

static struct pub_conn *
pub_idle(void)
{
    for (unsigned i = 0; i < pub.n; i++) {
        struct pub_conn *c = &pub.c[i];
        if (c->fd < 0)
            pub_open(c);
        if (c->up && !c->busy)
            return c;
    }
    return NULL;
}

static void
pub_on_response(struct pub_conn *c, int status)
{
    if (c->seq == 0)
        return;
    if (status >= 200 && status < 300) {
        pub.accepted++;
        bits_test_set(pub.acc_bits, c->seq);
        hist_add(&pub.ack, now_us() - c->sent_at);
    } else if (status == 503 || status == 429) {
        pub.refused++;
    } else {
        pub.http_err++;
        if (pub.http_err <= 3)
            fprintf(stderr, "wsload: publish answered %d\n", status);
    }
}

/* One HTTP/1.1 response with Content-Length, from c->rbuf. */
static void
pub_on_readable(struct pub_conn *c)
{
    ssize_t r = read(c->fd, c->rbuf + c->rlen, sizeof(c->rbuf) - c->rlen - 1);
    if (r <= 0) {
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        pub_close(c);
        return;
    }
    c->rlen += (size_t)r;
    c->rbuf[c->rlen] = '\0';
    for (;;) {
        char *end = strstr(c->rbuf, "\r\n\r\n");
        if (end == NULL) {
            if (c->rlen >= sizeof(c->rbuf) - 1)
                pub_close(c);
            return;
        }
        size_t hl = (size_t)(end - c->rbuf) + 4;
        size_t clen = 0;
        bool close_after = false;
        for (char *l = strstr(c->rbuf, "\r\n"); l != NULL && l < end;
             l = strstr(l + 2, "\r\n")) {
            if (strncasecmp(l + 2, "Content-Length:", 15) == 0)
                clen = (size_t)strtoul(l + 17, NULL, 10);
            else if (strncasecmp(l + 2, "Connection: close", 17) == 0)
                close_after = true;
        }
        if (c->rlen < hl + clen)
            return;
        int status = (int)strtol(c->rbuf + 9, NULL, 10);
        if (c->busy) {
            c->busy = false;
            pub_on_response(c, status);
        }
        memmove(c->rbuf, c->rbuf + hl + clen, c->rlen - hl - clen + 1);
        c->rlen -= hl + clen;
        if (close_after) {
            pub_close(c);
            return;
        }
    }
}

static unsigned
pub_busy(void)
{
    unsigned k = 0;
    for (unsigned i = 0; i < pub.n; i++)
        k += pub.c[i].busy;
    return k;
}

static void
pub_poll(int timeout_ms)
{
    struct epoll_event evs[64];
    int n = epoll_wait(pub.ep, evs, 64, timeout_ms);
    for (int i = 0; i < n; i++) {
        struct pub_conn *c = evs[i].data.ptr;
        if (c->fd < 0)
            continue;
        if ((evs[i].events & EPOLLOUT) && c->busy && c->woff < tmpl.len)
            pub_flush(c);
        if (c->fd >= 0 && (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
            pub_on_readable(c);
    }
}

static void *
pub_thread_main(void *arg)
{
    (void)arg;
    uint64_t next_warm = 0;
    while (atomic_load(&phase) == PH_WARMUP) {
        uint64_t now = now_us();
        if (now >= next_warm) {
            struct pub_conn *c = pub_idle();
            if (c != NULL) {
                pub_send(c, 0);
                pub.warm_sent++;
            }
            next_warm = now + WARM_INTERVAL_US;
        }
        pub_poll(10);
    }
    /* The schedule: publish i is due at t0 + i / rate; when every
     * connection is busy the next one goes as soon as one frees. */
    pub.t0 = now_us();
    uint64_t total = max_seq, i = 0;
    uint64_t end = pub.t0 + (uint64_t)(opt.duration * 1e6);
    for (;;) {
        uint64_t now = now_us();
        if (now >= end || atomic_load(&phase) == PH_DONE)
            break;
        bool blocked = false;
        while (i < total) {
            uint64_t due = pub.t0 + (uint64_t)((double)i * 1e6 / opt.rate);
            if (due > now)
                break;
            struct pub_conn *c = pub_idle();
            if (c == NULL) {
                blocked = true;   /* a response will wake us */
                break;
            }
            pub_send(c, ++i);
            pub.sent++;
        }
        uint64_t due = pub.t0 + (uint64_t)((double)i * 1e6 / opt.rate);
        int wait = 50;
        if (!blocked && i < total)
            wait = due > now ? (int)((due - now) / 1000) : 0;
        if (wait > 50)
            wait = 50;
        if ((uint64_t)wait * 1000 > end - now)
            wait = (int)((end - now) / 1000);
        pub_poll(wait);
    }
    pub.t_end = now_us();
    pub.not_sent = total > i ? total - i : 0;
    uint64_t deadline = now_us() + (uint64_t)(opt.drain * 1e6);
    while (pub_busy() > 0 && now_us() < deadline &&
           atomic_load(&phase) != PH_DONE)
        pub_poll(20);
    for (unsigned k = 0; k < pub.n; k++)
        if (pub.c[k].busy)
            pub.conn_err++;   /* unanswered: neither accepted nor refused */
    atomic_store(&pub.finished, true);
    while (atomic_load(&phase) != PH_DONE)
        sleep_us(10000);
    for (unsigned k = 0; k < pub.n; k++) {
        pub.c[k].busy = false;
        pub_close(&pub.c[k]);
    }
    return NULL;
}

/* ----------------------------------------------------------------- main */

static void
on_signal(int sig)
{
    (void)sig;
    atomic_store(&stop_signal, true);
}

static int
parse_addr(const char *s, struct sockaddr_in *sa, char *host, size_t hostsz)
{
    char buf[64];
    snprintf(buf, sizeof(buf), "%s", s);
    char *colon = strrchr(buf, ':');
    if (colon == NULL)
        return -1;
    *colon = '\0';
    char *end;
    long port = strtol(colon + 1, &end, 10);
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    if (*end != '\0' || port <= 0 || port > 65535 ||
        inet_pton(AF_INET, buf, &sa->sin_addr) != 1)
        return -1;
    sa->sin_port = htons((uint16_t)port);
    snprintf(host, hostsz, "%s", s);
    return 0;
}

static bool
parse_num(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static void
usage(FILE *f)
{
    fprintf(f,
"Usage: wsload [OPTION]...\n"
"Load generator for WebSocket fan-out hubs (rshub, nchan), loopback only.\n"
"  --target rshub|nchan   URL shapes (rshub: POST /hub, ws /channel/NAME;\n"
"                         nchan: POST /pub?id=NAME, ws /sub?id=NAME)\n"
"  --http IP:PORT         publish address (required when --rate > 0)\n"
"  --ws IP:PORT           WebSocket address (required when --subs > 0)\n"
"  --channel NAME         channel (default bench)\n"
"  --topic URI            rshub topic URI (Link rel=self)\n"
"  --subs N               subscribers (default 0)\n"
"  --threads N            subscriber threads, one epoll each (default 2)\n"
"  --sources A-B          source addresses 127.0.0.A..B (default 2-255)\n"
"  --rate R               publishes per second (0: subscribers only)\n"
"  --duration S           measured publishing time (default 20)\n"
"  --drain S              max wait for the last deliveries (default 10)\n"
"  --pub-conns N          keep-alive publish connections (default 8)\n"
"  --size BYTES           notification size (default 1024)\n"
"  --hold S               with --rate 0: hold the connections S seconds\n"
"                         after printing CONNECTED (or until SIGTERM)\n"
"  --connect-timeout S    (default 60)   --warmup-timeout S (default 30)\n"
"  --label TEXT           copied into the RESULT line\n"
"  --header 'NAME: VALUE' one more header on every WebSocket upgrade\n"
"                         (e.g. 'Authorization: Bearer TOKEN')\n"
"Prints a summary and one line 'RESULT key=value ...'.\n");
}

static int
parse_args(int argc, char **argv)
{
    enum { O_TARGET = 256, O_HTTP, O_WS, O_CHANNEL, O_TOPIC, O_SUBS,
           O_THREADS, O_SOURCES, O_RATE, O_DURATION, O_DRAIN, O_PUBCONNS,
           O_SIZE, O_HOLD, O_CTIMEOUT, O_WTIMEOUT, O_LABEL, O_HEADER,
           O_HELP };
    static const struct option lo[] = {
        { "target", 1, NULL, O_TARGET }, { "http", 1, NULL, O_HTTP },
        { "ws", 1, NULL, O_WS }, { "channel", 1, NULL, O_CHANNEL },
        { "topic", 1, NULL, O_TOPIC }, { "subs", 1, NULL, O_SUBS },
        { "threads", 1, NULL, O_THREADS }, { "sources", 1, NULL, O_SOURCES },
        { "rate", 1, NULL, O_RATE }, { "duration", 1, NULL, O_DURATION },
        { "drain", 1, NULL, O_DRAIN }, { "pub-conns", 1, NULL, O_PUBCONNS },
        { "size", 1, NULL, O_SIZE }, { "hold", 1, NULL, O_HOLD },
        { "connect-timeout", 1, NULL, O_CTIMEOUT },
        { "warmup-timeout", 1, NULL, O_WTIMEOUT },
        { "label", 1, NULL, O_LABEL }, { "header", 1, NULL, O_HEADER },
        { "help", 0, NULL, O_HELP },
        { NULL, 0, NULL, 0 },
    };
    bool have_http = false, have_ws = false;
    int c;
    double v;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case O_TARGET:
            if (strcmp(optarg, "rshub") == 0)
                opt.tgt = TGT_RSHUB;
            else if (strcmp(optarg, "nchan") == 0)
                opt.tgt = TGT_NCHAN;
            else
                ok = false;
            break;
        case O_HTTP:
            ok = parse_addr(optarg, &opt.http, opt.http_host,
                            sizeof(opt.http_host)) == 0;
            have_http = true;
            break;
        case O_WS:
            ok = parse_addr(optarg, &opt.ws, opt.ws_host,
                            sizeof(opt.ws_host)) == 0;
            have_ws = true;
            break;
        case O_CHANNEL: opt.channel = optarg; break;
        case O_TOPIC: opt.topic = optarg; break;
        case O_SUBS:
            ok = parse_num(optarg, 0, 1000000, &v);
            opt.subs = (unsigned)v;
            break;
        case O_THREADS:
            ok = parse_num(optarg, 1, 64, &v);
            opt.threads = (unsigned)v;
            break;
        case O_SOURCES: {
            unsigned a, b;
            ok = sscanf(optarg, "%u-%u", &a, &b) == 2 && a >= 1 && a <= b &&
                 b <= 254 + 1;
            opt.src_first = a;
            opt.src_last = b;
            break;
        }
        case O_RATE: ok = parse_num(optarg, 0, 1e7, &opt.rate); break;
        case O_DURATION: ok = parse_num(optarg, 0.1, 86400, &opt.duration); break;
        case O_DRAIN: ok = parse_num(optarg, 0, 3600, &opt.drain); break;
        case O_PUBCONNS:
            ok = parse_num(optarg, 1, 1024, &v);
            opt.pub_conns = (unsigned)v;
            break;
        case O_SIZE:
            ok = parse_num(optarg, 0, 60000, &v);
            opt.size = (unsigned)v;
            break;
        case O_HOLD: ok = parse_num(optarg, 0, 86400, &opt.hold); break;
        case O_CTIMEOUT: ok = parse_num(optarg, 1, 3600, &opt.connect_timeout); break;
        case O_WTIMEOUT: ok = parse_num(optarg, 1, 3600, &opt.warmup_timeout); break;
        case O_LABEL: opt.label = optarg; break;
        case O_HEADER:
            /* one header line, no CR/LF of its own: the request stays one
             * well-formed head */
            ok = strlen(optarg) <= 4096 && strpbrk(optarg, "\r\n") == NULL &&
                 strchr(optarg, ':') != NULL;
            opt.header = optarg;
            break;
        case O_HELP: usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
        if (!ok) {
            fprintf(stderr, "wsload: bad value for --%s: %s\n",
                    lo[c - O_TARGET].name, optarg);
            return -1;
        }
    }
    if ((opt.rate > 0 && !have_http) || (opt.subs > 0 && !have_ws)) {
        fprintf(stderr, "wsload: --http is needed to publish, --ws to "
                        "subscribe\n");
        return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "wsload: unexpected argument %s\n", argv[optind]);
        return -1;
    }
    return 0;
}

static uint64_t
sum_open(void)
{
    uint64_t k = 0;
    for (unsigned i = 0; i < opt.threads; i++)
        k += atomic_load(&sthreads[i].open);
    return k;
}

static uint64_t
sum_failed(void)
{
    uint64_t k = 0;
    for (unsigned i = 0; i < opt.threads; i++)
        k += atomic_load(&sthreads[i].failed);
    return k;
}

static uint64_t
sum_warm(void)
{
    uint64_t k = 0;
    for (unsigned i = 0; i < opt.threads; i++)
        k += atomic_load(&sthreads[i].warm);
    return k;
}

static uint64_t
sum_delivered(void)
{
    uint64_t k = 0;
    for (unsigned i = 0; i < opt.threads; i++)
        k += atomic_load(&sthreads[i].delivered);
    return k;
}

static int
setup_subs(void)
{
    unsigned nsrc = opt.src_last - opt.src_first + 1;
    sthreads = calloc(opt.threads, sizeof(*sthreads));
    if (sthreads == NULL)
        return -1;
    for (unsigned i = 0; i < opt.threads; i++) {
        struct sub_thread *t = &sthreads[i];
        t->idx = i;
        t->n = opt.subs / opt.threads + (i < opt.subs % opt.threads);
        t->subs = calloc(t->n ? t->n : 1, sizeof(*t->subs));
        t->retry = calloc(t->n ? t->n : 1, sizeof(*t->retry));
        t->rbuf = malloc(RBUF_SIZE);
        t->ep = epoll_create1(EPOLL_CLOEXEC);
        if (t->subs == NULL || t->retry == NULL || t->rbuf == NULL || t->ep < 0)
            return -1;
        for (size_t k = 0; k < t->n; k++) {
            struct sub *s = &t->subs[k];
            s->fd = -1;
            s->src = (uint8_t)(opt.src_first + (k * opt.threads + i) % nsrc);
            if (opt.rate > 0 && (s->bits = bits_new()) == NULL)
                return -1;
        }
    }
    return 0;
}

static int
setup_pub(void)
{
    pub.n = opt.pub_conns;
    pub.c = calloc(pub.n, sizeof(*pub.c));
    pub.ep = epoll_create1(EPOLL_CLOEXEC);
    pub.acc_bits = bits_new();
    if (pub.c == NULL || pub.ep < 0 || pub.acc_bits == NULL)
        return -1;
    for (unsigned i = 0; i < pub.n; i++) {
        pub.c[i].fd = -1;
        pub.c[i].req = malloc(tmpl.len + 1);
        if (pub.c[i].req == NULL)
            return -1;
        memcpy(pub.c[i].req, tmpl.buf, tmpl.len + 1);
    }
    return 0;
}

/* Wait until cond() or the deadline (seconds from now) or a signal. */
static void
wait_until(bool (*cond)(void), double secs)
{
    uint64_t deadline = now_us() + (uint64_t)(secs * 1e6);
    while (!cond() && now_us() < deadline && !atomic_load(&stop_signal))
        sleep_us(10000);
}

static bool
cond_connected(void)
{
    return sum_open() + sum_failed() >= opt.subs;
}

static bool
cond_warm(void)
{
    return sum_warm() >= sum_open();
}

static uint64_t expected_total;

static bool
cond_drained(void)
{
    if (!atomic_load(&pub.finished))
        return false;
    expected_total = pub.accepted * sum_open();
    return sum_delivered() >= expected_total;
}

static bool
cond_never(void)
{
    return false;
}

int
main(int argc, char **argv)
{
    if (parse_args(argc, argv) != 0)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    max_seq = opt.rate > 0 ? (uint64_t)ceil(opt.rate * opt.duration) : 0;
    if (tmpl_build() != 0 || setup_subs() != 0 ||
        (opt.rate > 0 && setup_pub() != 0)) {
        fprintf(stderr, "wsload: out of memory or bad template\n");
        return 1;
    }

    uint64_t t_conn = now_us();
    for (unsigned i = 0; i < opt.threads; i++)
        if (pthread_create(&sthreads[i].tid, NULL, sub_thread_main,
                           &sthreads[i]) != 0) {
            fprintf(stderr, "wsload: cannot start a thread\n");
            return 1;
        }
    wait_until(cond_connected, opt.connect_timeout);
    double conn_secs = (double)(now_us() - t_conn) / 1e6;
    uint64_t open0 = sum_open();
    fprintf(stderr, "wsload: %" PRIu64 "/%u subscribers connected in %.1f s "
            "(%" PRIu64 " failed)\n", open0, opt.subs, conn_secs, sum_failed());

    uint64_t warm_ok = 0;
    if (opt.rate <= 0) {
        atomic_store(&phase, PH_RUN);
        printf("CONNECTED open=%" PRIu64 " failed=%" PRIu64 "\n", open0,
               sum_failed());
        fflush(stdout);
        wait_until(cond_never, opt.hold);
    } else {
        atomic_store(&phase, PH_WARMUP);
        if (pthread_create(&pub.tid, NULL, pub_thread_main, NULL) != 0) {
            fprintf(stderr, "wsload: cannot start the publisher\n");
            return 1;
        }
        if (opt.subs > 0)
            wait_until(cond_warm, opt.warmup_timeout);
        else
            sleep_us(200000);   /* lets the publish connections open */
        warm_ok = sum_warm();
        if (opt.subs > 0 && warm_ok < sum_open())
            fprintf(stderr, "wsload: warm-up timed out: %" PRIu64 " of %"
                    PRIu64 " subscribers saw a message\n", warm_ok, sum_open());
        for (unsigned i = 0; i < opt.threads; i++)
            for (size_t k = 0; k < sthreads[i].n; k++)
                sthreads[i].subs[k].open_at_run =
                    sthreads[i].subs[k].state == SUB_OPEN;
        /* the threads only read open_at_run after they are joined */
        atomic_store(&phase, PH_RUN);
        wait_until(cond_never, opt.duration);
        atomic_store(&phase, PH_DRAIN);
        wait_until(cond_drained, opt.drain + 1);
    }
    atomic_store(&phase, PH_DONE);
    for (unsigned i = 0; i < opt.threads; i++)
        pthread_join(sthreads[i].tid, NULL);
    if (opt.rate > 0)
        pthread_join(pub.tid, NULL);

    /* ------------------------------------------------------- report */
    struct hist lat, up;
    memset(&lat, 0, sizeof(lat));
    memset(&up, 0, sizeof(up));
    uint64_t last_open = 0;
    uint64_t delivered = 0, lost = 0, lost_conns = 0, expected = 0, dups = 0,
             foreign = 0, unparsed = 0, bad = 0, no_hub_id = 0, closed = 0,
             failed = 0, pings = 0, last_rx = 0, open_run = 0;
    for (unsigned i = 0; i < opt.threads; i++) {
        struct sub_thread *t = &sthreads[i];
        hist_merge(&lat, &t->lat);
        hist_merge(&up, &t->up);
        if (t->last_open > last_open)
            last_open = t->last_open;
        dups += t->dups;
        foreign += t->foreign;
        unparsed += t->unparsed;
        bad += t->bad_frames;
        no_hub_id += t->no_hub_id;
        closed += t->closed_run;
        failed += atomic_load(&t->failed);
        pings += t->pings;
        if (t->last_rx > last_rx)
            last_rx = t->last_rx;
        for (size_t k = 0; k < t->n; k++) {
            struct sub *s = &t->subs[k];
            delivered += s->got;
            if (!s->open_at_run || s->bits == NULL)
                continue;
            open_run++;
            uint64_t miss = 0;
            for (uint64_t w = 0; w <= max_seq / 64; w++)
                miss += (uint64_t)__builtin_popcountll(pub.acc_bits[w] &
                                                       ~s->bits[w]);
            expected += pub.accepted;
            lost += miss;
            lost_conns += miss > 0;
        }
    }
    double run_secs = opt.rate > 0 ? (double)(pub.t_end - pub.t0) / 1e6 : 0;
    double rx_secs = last_rx > pub.t0 ? (double)(last_rx - pub.t0) / 1e6 : 0;
    if (rx_secs < run_secs)
        rx_secs = run_secs;
    double acc_ps = run_secs > 0 ? (double)pub.accepted / run_secs : 0;
    double del_ps = rx_secs > 0 ? (double)delivered / rx_secs : 0;

    fprintf(stderr,
            "wsload %s target=%s subs=%u open=%" PRIu64 " rate=%.0f/s "
            "for %.1f s\n"
            "  publishes: sent %" PRIu64 ", accepted %" PRIu64 " (%.1f/s), "
            "refused %" PRIu64 ", errors %" PRIu64 "+%" PRIu64 ", not sent %"
            PRIu64 "; ack p50 %.2f ms p99 %.2f ms\n"
            "  deliveries: %" PRIu64 " of %" PRIu64 " (%.0f/s), lost %" PRIu64
            " on %" PRIu64 " connections, dups %" PRIu64 ", closed %" PRIu64
            "\n  latency ms: p50 %.2f p99 %.2f p99.9 %.2f max %.2f\n",
            opt.label, opt.tgt == TGT_RSHUB ? "rshub" : "nchan", opt.subs,
            open0, opt.rate, opt.duration, pub.sent, pub.accepted, acc_ps,
            pub.refused, pub.http_err, pub.conn_err, pub.not_sent,
            hist_pct(&pub.ack, 50), hist_pct(&pub.ack, 99), delivered,
            expected, del_ps, lost, lost_conns, dups, closed,
            hist_pct(&lat, 50), hist_pct(&lat, 99), hist_pct(&lat, 99.9),
            (double)lat.max / 1000.0);
    /* set-up rate: completed upgrades over the time from the first
     * connect to the last 101 */
    double up_secs = last_open > t_conn ? (double)(last_open - t_conn) / 1e6
                                        : 0;
    double up_ps = up_secs > 0 ? (double)up.count / up_secs : 0;
    fprintf(stderr, "  upgrades: %" PRIu64 " in %.2f s (%.0f/s), round trip "
            "ms p50 %.2f p99 %.2f max %.2f\n", up.count, up_secs, up_ps,
            hist_pct(&up, 50), hist_pct(&up, 99), (double)up.max / 1000.0);
    printf("RESULT label=%s target=%s subs=%u open=%" PRIu64 " open_run=%"
           PRIu64 " conn_fail=%" PRIu64 " conn_secs=%.2f warm=%" PRIu64
           " rate=%.0f duration=%.2f sent=%" PRIu64 " accepted=%" PRIu64
           " refused=%" PRIu64 " pub_err=%" PRIu64 " conn_err=%" PRIu64
           " not_sent=%" PRIu64
           " accepted_ps=%.1f ack_p50_ms=%.3f ack_p99_ms=%.3f delivered=%"
           PRIu64 " expected=%" PRIu64 " deliveries_ps=%.0f p50_ms=%.3f "
           "p99_ms=%.3f p999_ms=%.3f max_ms=%.3f lost=%" PRIu64
           " lost_conns=%" PRIu64 " dups=%" PRIu64 " foreign=%" PRIu64
           " unparsed=%" PRIu64 " bad_frames=%" PRIu64 " no_hub_id=%" PRIu64
           " closed=%" PRIu64 " pings=%" PRIu64 " upgrades=%" PRIu64
           " up_secs=%.3f up_ps=%.0f up_p50_ms=%.3f up_p99_ms=%.3f"
           " up_max_ms=%.3f\n",
           opt.label[0] ? opt.label : "-",
           opt.tgt == TGT_RSHUB ? "rshub" : "nchan", opt.subs, open0,
           open_run, failed, conn_secs, warm_ok, opt.rate, run_secs, pub.sent,
           pub.accepted, pub.refused, pub.http_err, pub.conn_err,
           pub.not_sent, acc_ps, hist_pct(&pub.ack, 50),
           hist_pct(&pub.ack, 99), delivered, expected, del_ps,
           hist_pct(&lat, 50), hist_pct(&lat, 99), hist_pct(&lat, 99.9),
           (double)lat.max / 1000.0, lost, lost_conns, dups, foreign,
           unparsed, bad, no_hub_id, closed, pings, up.count, up_secs, up_ps,
           hist_pct(&up, 50), hist_pct(&up, 99), (double)up.max / 1000.0);
    fflush(stdout);
    return 0;
}
