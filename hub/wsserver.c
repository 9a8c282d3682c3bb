/*
 * wsserver.c - libwebsockets service threads (wsserver.h). Debian's
 * libwebsockets is built with one service thread per context (LWS_MAX_SMP
 * 1, which also rules out its SO_REUSEPORT listen sharing) and without a
 * libevent loop, so the main loop accepts, hands each socket to a context
 * through seam.c (least loaded thread first), and each thread adopts it.
 * Accepting on the main loop also lets us meet EMFILE calmly: count it,
 * pause the listener briefly, keep serving the connections we have.
 *
 * Writes bypass lws's one-frame-per-write path: every notification is
 * already a complete frame (msg.c), so on each WRITEABLE we copy as many
 * queued frames as fit into a 64 KiB scratch buffer and hand it to
 * lws_write(LWS_WRITE_HTTP), which sends raw bytes and buffers a partial
 * send itself. One write per subscriber per loop turn, whatever the rate.
 *
 * Anonymous clients are limited per address on the main loop: a token
 * bucket refuses a burst of new connections at accept (a 429, before any
 * handshake or thread work), and fanout.c asks here before it starts a
 * replay, so one address cannot hold many replays at once.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <libwebsockets.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RS_LOG_MODULE "ws"
#include "acceptguard.h"
#include "rs_alloc.h"
#include "rs_log.h"
#include "rs_metrics.h"
#include "wsserver.h"

#define WS_SCRATCH (64 * 1024)
#define WS_REPLAY_LOW 64        /* ask for more replay below this many queued */
#define WS_CLIENT_TEXT 124      /* a close reason: 123 bytes at most (RFC 6455) */
#define WS_ADDR_NOTICE_MS 60000 /* one log line per address per minute */

enum client_state {
    CL_PENDING = 0,   /* JOIN sent, waiting for ATTACH */
    CL_REPLAY,        /* replaying; live messages are ignored */
    CL_LIVE,
    CL_CLOSING,       /* close frame pending */
};

struct ws_thread;

/* Per-connection state: lws allocates it (per_session_data_size) and frees
 * it after LWS_CALLBACK_CLOSED, so it holds no pointer others keep. */
struct ws_client {
    struct lws *wsi;
    struct ws_thread *t;
    uint64_t id;
    enum client_state state;
    unsigned chan;                 /* SEAM_NO_CHAN until attached */
    struct ws_client *prev, *next; /* in the channel's list */
    struct msg_id skip_until;      /* live: drop ids <= this */
    struct msg_id last_queued;     /* newest id queued (for MORE) */
    bool more_pending;             /* MORE sent, REPLAY not back yet */
    bool joined;                   /* JOIN was sent to main */
    struct msg **q;                /* ring of queued frames */
    uint32_t qhead, qlen, qcap;
    size_t qbytes;
    time_t soft_since;             /* 0 = under the soft limit */
    bool choked;                   /* the kernel did not take our last write */
    uint16_t close_code;
    char close_reason[WS_CLIENT_TEXT];
};

struct ws_chan {
    struct ws_client *head;
};

/* An open-addressing map client id -> client, for events from main. */
struct client_map {
    uint64_t *keys;                /* 0 = empty, UINT64_MAX = tombstone */
    struct ws_client **vals;
    size_t cap;
    size_t used;                   /* live + tombstones: probe chain length */
    size_t live;
};

struct ws_thread {
    struct ws_server *srv;
    unsigned idx;
    pthread_t tid;
    bool started;
    struct lws_context *ctx;
    struct seam_queue inbox;
    atomic_bool exiting;
    bool stopping;
    uint64_t next_client;
    struct ws_chan *chans;
    size_t nchans;
    struct client_map clients;
    size_t nclients;
    unsigned char *scratch;        /* LWS_PRE + WS_SCRATCH */
    /* The peer address of each socket this thread adopted, by descriptor
     * (written at ADOPT, read at ESTABLISHED): taken from accept(), since
     * a client that hangs up at once has no peer left for getpeername()
     * by the time its handshake completes. A stale slot is never read: a
     * descriptor number comes back only through another ADOPT. */
    struct seam_addr *peers;
    size_t npeers;
    lws_retry_bo_t retry;          /* keepalive policy; lws keeps a pointer */
    /* statistics, read by other threads */
    atomic_uint_fast64_t accepted, open, frames, bytes, writes, slow_drops, closed_gap;
    atomic_uint_fast64_t assigned;  /* sockets handed to this thread, ever */
};

/* Main loop only: one client address, what the per-address limits know
 * of it. */
struct addr_slot {
    struct seam_addr key;
    bool used;
    uint32_t replays;              /* replays going (fanout.c) */
    double tokens;                 /* connections it may open now */
    uint64_t refill_ms;            /* tokens are as of this time */
    uint64_t noticed_ms;           /* last log line about it; 0 = none */
    uint64_t refusals;             /* refusals since that line */
};

/* Open addressing, linear probing; rebuilt (without the slots that have
 * nothing left to remember) by the sweep timer, so it never needs
 * tombstones. At most o.max_addrs slots are used. */
struct addr_table {
    struct addr_slot *v;
    size_t cap;                    /* power of two, > 2 * used */
    size_t used;
};

struct ws_server {
    struct ws_server_opts o;
    int port;
    unsigned nthreads;
    struct ws_thread *threads;
    struct evconnlistener *listener;
    struct acceptguard *guard;     /* EMFILE: pause, count, keep serving */
    uint64_t refused;              /* main loop only: other failures */
    struct addr_table addrs;       /* main loop only */
    struct event *ev_sweep;
    uint64_t rate_refused;
    struct rs_metrics_counter *m_rate_refused, *m_untracked;
};

/* ------------------------------------------------------------ client map */

static uint64_t
cmap_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

/* Rehash: double when mostly live, else same size (drops tombstones, so
 * connection churn never grows the map past twice the open clients). */
static int
cmap_grow(struct client_map *m, size_t live)
{
    size_t ncap = m->cap == 0 ? 64 : live * 2 >= m->cap ? m->cap * 2 : m->cap;
    uint64_t *nk = rs_calloc(ncap, sizeof(*nk));
    struct ws_client **nv = rs_calloc(ncap, sizeof(*nv));
    if (nk == NULL || nv == NULL) {
        rs_free(nk);
        rs_free(nv);
        return RS_ENOMEM;
    }
    size_t used = 0;
    for (size_t i = 0; i < m->cap; i++) {
        uint64_t k = m->keys[i];
        if (k == 0 || k == UINT64_MAX)
            continue;
        size_t j = cmap_hash(k) & (ncap - 1);
        while (nk[j] != 0)
            j = (j + 1) & (ncap - 1);
        nk[j] = k;
        nv[j] = m->vals[i];
        used++;
    }
    rs_free(m->keys);
    rs_free(m->vals);
    m->keys = nk;
    m->vals = nv;
    m->cap = ncap;
    m->used = used;
    return 0;
}

static int
cmap_put(struct client_map *m, uint64_t k, struct ws_client *v)
{
    if ((m->used + 1) * 4 >= m->cap * 3 && cmap_grow(m, m->live + 1) != 0)
        return RS_ENOMEM;
    size_t j = cmap_hash(k) & (m->cap - 1);
    while (m->keys[j] != 0 && m->keys[j] != UINT64_MAX)
        j = (j + 1) & (m->cap - 1);
    if (m->keys[j] == 0)
        m->used++;
    m->keys[j] = k;
    m->vals[j] = v;
    m->live++;
    return 0;
}

static struct ws_client *
cmap_get(const struct client_map *m, uint64_t k)
{
    if (m->cap == 0)
        return NULL;
    size_t j = cmap_hash(k) & (m->cap - 1);
    while (m->keys[j] != 0) {
        if (m->keys[j] == k)
            return m->vals[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

static void
cmap_del(struct client_map *m, uint64_t k)
{
    if (m->cap == 0)
        return;
    size_t j = cmap_hash(k) & (m->cap - 1);
    while (m->keys[j] != 0) {
        if (m->keys[j] == k) {
            m->keys[j] = UINT64_MAX;
            m->vals[j] = NULL;
            m->live--;
            return;
        }
        j = (j + 1) & (m->cap - 1);
    }
}

/* ---------------------------------------------------- per-address limits */

static uint64_t now_ms(void);

void
ws_server_addr_format(const struct seam_addr *a, char *buf, size_t len)
{
    static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    static const struct seam_addr zero;
    char tmp[INET6_ADDRSTRLEN];
    if (memcmp(a, &zero, sizeof(zero)) == 0) {
        snprintf(buf, len, "?");
    } else if (memcmp(a->b, mapped, sizeof(mapped)) == 0) {
        if (inet_ntop(AF_INET, a->b + 12, tmp, sizeof(tmp)) == NULL)
            snprintf(buf, len, "?");
        else
            snprintf(buf, len, "%s", tmp);
    } else if (inet_ntop(AF_INET6, a->b, tmp, sizeof(tmp)) == NULL) {
        snprintf(buf, len, "?");
    } else {
        snprintf(buf, len, "%s/64", tmp);
    }
}

/* The key a peer is counted under (seam.h): thread-safe, no state. */
static void
addr_key(const struct sockaddr *sa, struct seam_addr *out)
{
    memset(out, 0, sizeof(*out));
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        out->b[10] = out->b[11] = 0xff;
        memcpy(out->b + 12, &in->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 =
            (const struct sockaddr_in6 *)(const void *)sa;
        memcpy(out->b, &in6->sin6_addr, 16);
        if (!IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
            memset(out->b + 8, 0, 8);   /* the interface id: one /64 */
    }
}

static size_t
addr_hash(const struct seam_addr *a)
{
    uint64_t h = 0xcbf29ce484222325ULL;   /* FNV-1a */
    for (size_t i = 0; i < sizeof(a->b); i++) {
        h ^= a->b[i];
        h *= 0x100000001b3ULL;
    }
    return (size_t)(h ^ (h >> 29));
}

static struct addr_slot *
addr_find(struct addr_table *t, const struct seam_addr *k)
{
    if (t->cap == 0)
        return NULL;
    size_t j = addr_hash(k) & (t->cap - 1);
    while (t->v[j].used) {
        if (memcmp(&t->v[j].key, k, sizeof(*k)) == 0)
            return &t->v[j];
        j = (j + 1) & (t->cap - 1);
    }
    return NULL;
}

/* Tokens the slot holds at now (refilled at conn_rate, up to the burst). */
static double
addr_tokens(const struct ws_server_opts *o, const struct addr_slot *a,
            uint64_t now)
{
    double t = a->tokens + (double)(now - a->refill_ms) * o->conn_rate / 1000.0;
    return t > (double)o->conn_burst ? (double)o->conn_burst : t;
}

/* Does the slot still hold anything a fresh one would not? */
static bool
addr_keep(const struct ws_server_opts *o, const struct addr_slot *a,
          uint64_t now)
{
    return a->replays > 0 ||
           (o->conn_rate != 0 && addr_tokens(o, a, now) < (double)o->conn_burst) ||
           (a->noticed_ms != 0 && now - a->noticed_ms < WS_ADDR_NOTICE_MS);
}

/* Move the slots to a table of ncap slots, dropping those with nothing to
 * keep when sweeping. */
static int
addr_rebuild(struct ws_server *s, size_t ncap, bool sweep, uint64_t now)
{
    struct addr_table *t = &s->addrs;
    struct addr_slot *nv = rs_calloc(ncap, sizeof(*nv));
    if (nv == NULL)
        return RS_ENOMEM;
    size_t used = 0;
    for (size_t i = 0; i < t->cap; i++) {
        const struct addr_slot *a = &t->v[i];
        if (!a->used || (sweep && !addr_keep(&s->o, a, now)))
            continue;
        size_t j = addr_hash(&a->key) & (ncap - 1);
        while (nv[j].used)
            j = (j + 1) & (ncap - 1);
        nv[j] = *a;
        used++;
    }
    rs_free(t->v);
    t->v = nv;
    t->cap = ncap;
    t->used = used;
    return 0;
}

/* The slot of k, made when new; NULL when max_addrs are tracked already
 * (or out of memory): such an address is then not limited, since refusing
 * every new address would let many addresses lock everybody out. */
static struct addr_slot *
addr_get(struct ws_server *s, const struct seam_addr *k, uint64_t now)
{
    struct addr_table *t = &s->addrs;
    struct addr_slot *a = addr_find(t, k);
    if (a != NULL)
        return a;
    if (t->used >= s->o.max_addrs)
        return NULL;
    if ((t->used + 1) * 2 > t->cap &&
        addr_rebuild(s, t->cap ? t->cap * 2 : 64, false, now) != 0)
        return NULL;
    size_t j = addr_hash(k) & (t->cap - 1);
    while (t->v[j].used)
        j = (j + 1) & (t->cap - 1);
    a = &t->v[j];
    memset(a, 0, sizeof(*a));
    a->key = *k;
    a->used = true;
    a->tokens = s->o.conn_burst;
    a->refill_ms = now;
    t->used++;
    return a;
}

/* One refusal of a; a log line at most once a minute per address, with
 * how many were refused since the last one. */
static void
addr_notice(struct addr_slot *a, uint64_t now, const char *what,
            const char *option)
{
    a->refusals++;
    if (a->noticed_ms != 0 && now - a->noticed_ms < WS_ADDR_NOTICE_MS)
        return;
    char who[64], n[24];
    ws_server_addr_format(&a->key, who, sizeof(who));
    snprintf(n, sizeof(n), "%llu", (unsigned long long)a->refusals);
    rs_log_kv(RS_LOG_WARN, what, "client", who, "limit", option, "refused", n,
              "next_notice", "60s", NULL);
    a->noticed_ms = now;
    a->refusals = 0;
}

/* Take a connection token of address k: false when it has none. */
static bool
addr_admit(struct ws_server *s, const struct seam_addr *k)
{
    if (s->o.conn_rate == 0)
        return true;
    uint64_t now = now_ms();
    struct addr_slot *a = addr_get(s, k, now);
    if (a == NULL) {
        rs_metrics_counter_inc(s->m_untracked);
        return true;
    }
    a->tokens = addr_tokens(&s->o, a, now);
    a->refill_ms = now;
    if (a->tokens >= 1.0) {
        a->tokens -= 1.0;
        return true;
    }
    s->rate_refused++;
    rs_metrics_counter_inc(s->m_rate_refused);
    addr_notice(a, now, "new WebSocket connections over the per-address rate: "
                "refused with 429", "ws-conn-rate");
    return false;
}

int
ws_server_replay_begin(struct ws_server *s, const struct seam_addr *k)
{
    if (s->o.replays_per_addr == 0)
        return 0;
    uint64_t now = now_ms();
    struct addr_slot *a = addr_get(s, k, now);
    if (a == NULL) {
        rs_metrics_counter_inc(s->m_untracked);
        return 0;
    }
    if (a->replays >= s->o.replays_per_addr) {
        addr_notice(a, now, "replays over the per-address cap: refused with "
                    "close 1013", "ws-replays-per-addr");
        return RS_ETOOBIG;
    }
    a->replays++;
    return 0;
}

void
ws_server_replay_end(struct ws_server *s, const struct seam_addr *k)
{
    if (s->o.replays_per_addr == 0)
        return;
    struct addr_slot *a = addr_find(&s->addrs, k);
    if (a != NULL && a->replays > 0)
        a->replays--;
}

static void
on_addr_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct ws_server *s = arg;
    uint64_t now = now_ms();
    size_t stale = 0;
    for (size_t i = 0; i < s->addrs.cap; i++)
        if (s->addrs.v[i].used && !addr_keep(&s->o, &s->addrs.v[i], now))
            stale++;
    if (stale == 0)
        return;
    size_t ncap = s->addrs.cap;
    while (ncap > 64 && (s->addrs.used - stale) * 8 < ncap)
        ncap /= 2;   /* give memory back after a flood */
    if (addr_rebuild(s, ncap, true, now) != 0)
        rs_log(RS_LOG_WARN, "cannot sweep the per-address table: out of memory");
}

static double
gauge_addrs(void *ud)
{
    return (double)((struct ws_server *)ud)->addrs.used;
}

/* An accepted socket over its address's rate: a short 429 (best effort:
 * the request is not read) and close, before any thread sees it. */
static void
refuse_busy(evutil_socket_t fd)
{
    static const char busy[] = "HTTP/1.1 429 Too Many Requests\r\n"
                               "Retry-After: 1\r\nContent-Length: 0\r\n"
                               "Connection: close\r\n\r\n";
    (void)send(fd, busy, sizeof(busy) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    evutil_closesocket(fd);
}

/* --------------------------------------------------------------- helpers */

static void
to_main(struct ws_thread *t, struct seam_ev *ev)
{
    ev->thread = t->idx;
    seam_push(t->srv->o.to_main, ev);
}

static void
chan_unlink(struct ws_thread *t, struct ws_client *c)
{
    if (c->chan == SEAM_NO_CHAN || c->chan >= t->nchans)
        return;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        t->chans[c->chan].head = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static int
chan_link(struct ws_thread *t, struct ws_client *c, unsigned chan)
{
    if (chan >= t->nchans) {
        size_t n = chan + 16;
        struct ws_chan *nc = rs_realloc(t->chans, n * sizeof(*nc));
        if (nc == NULL)
            return RS_ENOMEM;
        memset(nc + t->nchans, 0, (n - t->nchans) * sizeof(*nc));
        t->chans = nc;
        t->nchans = n;
    }
    c->chan = chan;
    c->prev = NULL;
    c->next = t->chans[chan].head;
    if (c->next != NULL)
        c->next->prev = c;
    t->chans[chan].head = c;
    return 0;
}

static void
client_drop_queue(struct ws_client *c)
{
    for (uint32_t i = 0; i < c->qlen; i++)
        msg_unref(c->q[(c->qhead + i) % c->qcap]);
    rs_free(c->q);
    c->q = NULL;
    c->qhead = c->qlen = c->qcap = 0;
    c->qbytes = 0;
}

/* Close with code/reason: the close frame goes out on the next WRITEABLE. */
static void
client_close(struct ws_client *c, uint16_t code, const char *reason)
{
    if (c->state == CL_CLOSING)
        return;
    c->state = CL_CLOSING;
    c->close_code = code;
    /* cut at the protocol's limit, never inside a UTF-8 sequence */
    size_t n = strlen(reason);
    if (n >= sizeof(c->close_reason)) {
        n = sizeof(c->close_reason) - 1;
        while (n > 0 && ((unsigned char)reason[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(c->close_reason, reason, n);
    c->close_reason[n] = '\0';
    client_drop_queue(c);
    lws_callback_on_writable(c->wsi);
}

/* Queue one frame; cut the client when it is too far behind. */
static void
client_enqueue(struct ws_client *c, struct msg *m)
{
    struct ws_thread *t = c->t;
    const struct ws_server_opts *o = &t->srv->o;

    /* Over the hard limit, cut a client that is not keeping up: the kernel
     * did not take our last write. A burst to a client that drains is not
     * a slow consumer (the tail reads up to 1000 entries at a time); 4x
     * the limit is cut whatever, so memory stays bounded. A lone frame is
     * always accepted, however large. */
    size_t after = c->qbytes + m->frame_len;
    if (c->qlen > 0 && after > o->hard_limit &&
        (c->choked || after > 4 * o->hard_limit)) {
        atomic_fetch_add(&t->slow_drops, 1);
        client_close(c, 4002, "slow consumer: send queue over the hard limit; "
                              "resume with since");
        return;
    }
    if (c->qbytes + m->frame_len > o->soft_limit) {
        time_t now = time(NULL);
        if (c->soft_since == 0) {
            c->soft_since = now;
        } else if (now - c->soft_since >= (time_t)o->soft_secs) {
            atomic_fetch_add(&t->slow_drops, 1);
            client_close(c, 4002, "slow consumer: over the soft limit too "
                                  "long; resume with since");
            return;
        }
    }
    if (c->qlen == c->qcap) {
        uint32_t ncap = c->qcap ? c->qcap * 2 : 8;
        struct msg **nq = rs_malloc(ncap * sizeof(*nq));
        if (nq == NULL) {
            client_close(c, 1011, "out of memory");
            return;
        }
        for (uint32_t i = 0; i < c->qlen; i++)
            nq[i] = c->q[(c->qhead + i) % c->qcap];
        rs_free(c->q);
        c->q = nq;
        c->qhead = 0;
        c->qcap = ncap;
    }
    c->q[(c->qhead + c->qlen) % c->qcap] = msg_ref(m);
    c->qlen++;
    c->qbytes += m->frame_len;
    c->last_queued = m->id;
    if (c->qlen == 1)
        lws_callback_on_writable(c->wsi);
}

static void
client_pop(struct ws_client *c, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        struct msg *m = c->q[c->qhead];
        c->qbytes -= m->frame_len;
        c->qhead = (c->qhead + 1) % c->qcap;
        c->qlen--;
        msg_unref(m);
    }
    if (c->qbytes <= c->t->srv->o.soft_limit)
        c->soft_since = 0;
}

/* Ask main for the next replay page once the queue has drained enough, so
 * a replay of a long backlog never floods the send queue. */
static void
client_maybe_more(struct ws_client *c)
{
    const struct ws_server_opts *o = &c->t->srv->o;
    size_t low = (o->soft_limit < o->hard_limit ? o->soft_limit : o->hard_limit) / 2;
    if (c->state != CL_REPLAY || c->more_pending || c->qlen >= WS_REPLAY_LOW ||
        c->qbytes >= low)
        return;
    struct seam_ev *ev = seam_ev_new(SEAM_MORE);
    if (ev == NULL) {
        client_close(c, 1011, "out of memory");
        return;
    }
    c->more_pending = true;
    ev->client = c->id;
    ev->chan = c->chan;
    ev->id = c->last_queued;
    to_main(c->t, ev);
}

/* ------------------------------------------------------------- main events */

static void
on_ev_msg(struct ws_thread *t, struct msg *m)
{
    if (m->chan >= t->nchans)
        return;
    for (struct ws_client *c = t->chans[m->chan].head, *next; c; c = next) {
        next = c->next;   /* client_enqueue may close c, never unlink it */
        if (c->state != CL_LIVE || msg_id_cmp(m->id, c->skip_until) <= 0)
            continue;
        client_enqueue(c, m);
    }
}

static void
on_ev_attach(struct ws_thread *t, struct seam_ev *ev)
{
    struct ws_client *c = cmap_get(&t->clients, ev->client);
    if (c == NULL || c->state != CL_PENDING) {
        /* gone meanwhile: undo main's count for this attach */
        struct seam_ev *lv = seam_ev_new(SEAM_LEAVE);
        if (lv != NULL) {
            lv->client = ev->client;
            lv->chan = ev->chan;
            to_main(t, lv);
        }
        return;
    }
    if (chan_link(t, c, ev->chan) != 0) {
        client_close(c, 1011, "out of memory");
        return;
    }
    if (ev->flag) {
        c->state = CL_REPLAY;
        c->last_queued = ev->id;
        c->more_pending = true;   /* main sends the first page unasked */
    } else {
        c->state = CL_LIVE;
        c->skip_until = ev->id;
    }
}

static void
on_ev_replay(struct ws_thread *t, struct seam_ev *ev)
{
    struct ws_client *c = cmap_get(&t->clients, ev->client);
    if (c == NULL || c->state != CL_REPLAY)
        return;
    c->more_pending = false;
    for (size_t i = 0; i < ev->nmsgs && c->state == CL_REPLAY; i++)
        client_enqueue(c, ev->msgs[i]);
    if (c->state != CL_REPLAY)
        return;
    c->last_queued = ev->id;
    if (ev->flag) {
        c->state = CL_LIVE;
        c->skip_until = ev->id;
    } else {
        client_maybe_more(c);
    }
}

static void
on_ev_close(struct ws_thread *t, struct seam_ev *ev)
{
    if (ev->client == 0) {
        /* every client of a channel (a gap in the live stream) */
        if (ev->chan >= t->nchans)
            return;
        for (struct ws_client *c = t->chans[ev->chan].head; c; c = c->next) {
            if (ev->code == 4001)
                atomic_fetch_add(&t->closed_gap, 1);
            client_close(c, ev->code, ev->text);
        }
        return;
    }
    struct ws_client *c = cmap_get(&t->clients, ev->client);
    if (c == NULL)
        return;
    if (ev->code == 4001)
        atomic_fetch_add(&t->closed_gap, 1);
    client_close(c, ev->code, ev->text);
}

static void
on_ev_stop(struct ws_thread *t)
{
    t->stopping = true;
    for (size_t i = 0; i < t->clients.cap; i++) {
        uint64_t k = t->clients.keys[i];
        if (k != 0 && k != UINT64_MAX)
            client_close(t->clients.vals[i], 1001, "hub shutting down");
    }
    if (t->nclients == 0)
        atomic_store(&t->exiting, true);
}

static void
on_ev_adopt(struct ws_thread *t, struct seam_ev *ev)
{
    lws_sock_file_fd_type fd;
    fd.sockfd = ev->fd;
    struct lws_vhost *vh = lws_get_vhost_by_name(t->ctx, "default");
    ev->fd = -1;
    if (t->stopping || vh == NULL) {
        close(fd.sockfd);
        return;
    }
    if ((size_t)fd.sockfd >= t->npeers) {
        size_t n = (size_t)fd.sockfd + 1024;
        struct seam_addr *np = rs_realloc(t->peers, n * sizeof(*np));
        if (np != NULL) {
            memset(np + t->npeers, 0, (n - t->npeers) * sizeof(*np));
            t->peers = np;
            t->npeers = n;
        }
    }
    if ((size_t)fd.sockfd < t->npeers)
        t->peers[fd.sockfd] = ev->addr;   /* else it counts as unknown */
    /* On failure lws closes the socket itself, except on an early
     * out-of-memory where it cannot tell us: leaking one descriptor then
     * is better than closing a number another thread may already reuse. */
    (void)lws_adopt_descriptor_vhost(vh, LWS_ADOPT_HTTP | LWS_ADOPT_SOCKET, fd,
                                     NULL, NULL);
}

static void
thread_drain_inbox(struct ws_thread *t)
{
    struct seam_ev *ev = seam_take(&t->inbox);
    while (ev != NULL) {
        struct seam_ev *next = ev->next;
        switch (ev->type) {
        case SEAM_MSG: on_ev_msg(t, ev->m); break;
        case SEAM_ATTACH: on_ev_attach(t, ev); break;
        case SEAM_REPLAY: on_ev_replay(t, ev); break;
        case SEAM_CLOSE: on_ev_close(t, ev); break;
        case SEAM_STOP: on_ev_stop(t); break;
        case SEAM_ADOPT: on_ev_adopt(t, ev); break;
        default: break;
        }
        seam_ev_free(ev);
        ev = next;
    }
}

/* ------------------------------------------------------------- lws callback */

/* Parse /channel/NAME[?since=ID]; 0 or a close code. */
static int
client_parse_uri(struct lws *wsi, struct seam_ev *ev)
{
    char path[256], since[64];
    int n = lws_hdr_copy(wsi, path, sizeof(path), WSI_TOKEN_GET_URI);
    static const char prefix[] = "/channel/";
    if (n <= 0 || strncmp(path, prefix, sizeof(prefix) - 1) != 0)
        return 4004;
    const char *name = path + sizeof(prefix) - 1;
    size_t len = strlen(name);
    if (len == 0 || len >= sizeof(ev->text) || strchr(name, '/') != NULL)
        return 4004;
    memcpy(ev->text, name, len + 1);
    /* lws copies "since=VALUE" into the buffer and returns VALUE */
    const char *v = lws_get_urlarg_by_name(wsi, "since=", since, sizeof(since));
    if (v != NULL) {
        if (msg_id_parse(v, strlen(v), &ev->id) != 0)
            return 4005;
        ev->flag = true;
    }
    return 0;
}

static int
on_established(struct ws_thread *t, struct ws_client *c, struct lws *wsi)
{
    memset(c, 0, sizeof(*c));
    c->wsi = wsi;
    c->chan = SEAM_NO_CHAN;
    c->id = ((uint64_t)(t->idx + 1) << 48) | ++t->next_client;
    if (cmap_put(&t->clients, c->id, c) != 0)
        return -1;   /* c->t stays NULL: on_closed has nothing to undo */
    c->t = t;
    t->nclients++;
    atomic_fetch_add(&t->accepted, 1);
    atomic_fetch_add(&t->open, 1);

    struct seam_ev *ev = seam_ev_new(SEAM_JOIN);
    if (ev == NULL) {
        client_close(c, 1011, "out of memory");
        return 0;
    }
    int code = client_parse_uri(wsi, ev);
    if (code != 0) {
        seam_ev_free(ev);
        client_close(c, (uint16_t)code, code == 4005 ? "bad since value"
                                                     : "unknown channel");
        return 0;
    }
    if (t->stopping) {
        seam_ev_free(ev);
        client_close(c, 1001, "hub shutting down");
        return 0;
    }
    int fd = lws_get_socket_fd(wsi);
    if (fd >= 0 && (size_t)fd < t->npeers)
        ev->addr = t->peers[fd];
    ev->client = c->id;
    c->joined = true;
    to_main(t, ev);
    return 0;
}

static void
on_closed(struct ws_thread *t, struct ws_client *c)
{
    if (c->t == NULL)
        return;   /* never established */
    chan_unlink(t, c);
    client_drop_queue(c);
    cmap_del(&t->clients, c->id);
    t->nclients--;
    atomic_fetch_sub(&t->open, 1);
    if (c->joined) {
        struct seam_ev *ev = seam_ev_new(SEAM_LEAVE);
        if (ev != NULL) {
            ev->client = c->id;
            ev->chan = c->chan;
            to_main(t, ev);
        }
    }
    c->t = NULL;
    if (t->stopping && t->nclients == 0)
        atomic_store(&t->exiting, true);
}

static int
on_writeable(struct ws_thread *t, struct ws_client *c)
{
    if (c->state == CL_CLOSING) {
        lws_close_reason(c->wsi, (enum lws_close_status)c->close_code,
                         (unsigned char *)c->close_reason,
                         strlen(c->close_reason));
        return -1;
    }
    if (c->qlen == 0)
        return 0;

    unsigned char *buf;
    size_t len = 0;
    uint32_t n = 0;
    struct msg *first = c->q[c->qhead];
    if (first->frame_len >= WS_SCRATCH) {
        buf = first->frame;   /* big: send from the shared frame */
        len = first->frame_len;
        n = 1;
    } else {
        buf = t->scratch + LWS_PRE;
        while (n < c->qlen) {
            struct msg *m = c->q[(c->qhead + n) % c->qcap];
            if (len + m->frame_len > WS_SCRATCH)
                break;
            memcpy(buf + len, m->frame, m->frame_len);
            len += m->frame_len;
            n++;
        }
    }
    if (lws_write(c->wsi, buf, len, LWS_WRITE_HTTP) < 0)
        return -1;
    c->choked = lws_partial_buffered(c->wsi) != 0;
    atomic_fetch_add_explicit(&t->frames, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->bytes, len, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->writes, 1, memory_order_relaxed);
    client_pop(c, n);
    client_maybe_more(c);
    if (c->qlen > 0)
        lws_callback_on_writable(c->wsi);
    return 0;
}

static int
ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
            void *in, size_t len)
{
    (void)in;
    (void)len;
    struct lws_context *ctx = lws_get_context(wsi);
    struct ws_thread *t = ctx != NULL ? lws_context_user(ctx) : NULL;
    struct ws_client *c = user;

    if (t == NULL)
        return 0;   /* not one of our contexts' connections */
    switch (reason) {
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        thread_drain_inbox(t);
        return 0;
    case LWS_CALLBACK_ESTABLISHED:
        return on_established(t, c, wsi);
    case LWS_CALLBACK_SERVER_WRITEABLE:
        return on_writeable(t, c);
    case LWS_CALLBACK_CLOSED:
        on_closed(t, c);
        return 0;
    case LWS_CALLBACK_RECEIVE:
        return 0;   /* server -> client only; client text is ignored */
    default:
        break;
    }
    return 0;
}

static const struct lws_protocols ws_protocols[] = {
    {
        .name = "resourcesync-notification",
        .callback = ws_callback,
        .per_session_data_size = sizeof(struct ws_client),
        .rx_buffer_size = 512,
        .tx_packet_size = WS_SCRATCH,
    },
    { .name = NULL },
};

/* ------------------------------------------------------------- threads */

static void
on_lws_log(int level, const char *line)
{
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == ' '))
        n--;
    rs_log(level == LLL_ERR ? RS_LOG_ERROR : RS_LOG_WARN, "lws: %.*s", (int)n,
           line);
}

static void
on_inbox_wake(void *ud)
{
    struct ws_thread *t = ud;
    lws_cancel_service(t->ctx);
}

static void *
thread_main(void *arg)
{
    struct ws_thread *t = arg;
    while (!atomic_load(&t->exiting)) {
        if (lws_service(t->ctx, 0) < 0)
            break;
    }
    return NULL;
}

static struct lws_context *
thread_context(struct ws_server *s, struct ws_thread *t, const char **err)
{
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.port = CONTEXT_PORT_NO_LISTEN_SERVER;   /* sockets come adopted */
    info.protocols = ws_protocols;
    info.user = t;
    /* lws 4.1: ping after ping_secs idle, hang up after twice that */
    t->retry.secs_since_valid_ping = (uint16_t)s->o.ping_secs;
    t->retry.secs_since_valid_hangup = (uint16_t)(s->o.ping_secs * 2);
    info.retry_and_idle_policy = &t->retry;
    info.timeout_secs = 10;
    info.pt_serv_buf_size = 4096;
    info.max_http_header_pool = 64;
    info.count_threads = 1;
    /* RFC 6455 8.1: a text frame that is not UTF-8 fails the connection
     * with 1007. lws checks it across fragments and closes itself. */
    info.options = LWS_SERVER_OPTION_VALIDATE_UTF8;
    struct lws_context *ctx = lws_create_context(&info);
    if (ctx == NULL)
        *err = "cannot create a libwebsockets context";
    return ctx;
}

/* ---------------------------------------------------------------- listener */

static void
on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
          int socklen, void *arg)
{
    (void)l;
    (void)socklen;
    struct ws_server *s = arg;
    struct seam_addr key;
    addr_key(sa, &key);
    if (!addr_admit(s, &key)) {
        refuse_busy(fd);
        return;
    }
    /* least loaded thread: open connections plus what is on its way */
    unsigned best = 0;
    uint64_t best_load = UINT64_MAX;
    for (unsigned i = 0; i < s->nthreads; i++) {
        struct ws_thread *t = &s->threads[i];
        uint64_t load = atomic_load(&t->assigned) - atomic_load(&t->accepted) +
                        atomic_load(&t->open);
        if (load < best_load) {
            best_load = load;
            best = i;
        }
    }
    /* Subscribers never send, so their ACKs are delayed; with Nagle on, a
     * lone frame then waits up to 40 ms. We batch frames ourselves. */
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct seam_ev *ev = seam_ev_new(SEAM_ADOPT);
    if (ev == NULL) {
        evutil_closesocket(fd);
        s->refused++;
        return;
    }
    ev->fd = fd;
    ev->addr = key;
    atomic_fetch_add(&s->threads[best].assigned, 1);
    seam_push(&s->threads[best].inbox, ev);
}

static int
server_listen(struct ws_server *s, const char **err)
{
    struct evutil_addrinfo hints, *ai = NULL;
    char port[16];
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = EVUTIL_AI_PASSIVE | EVUTIL_AI_NUMERICSERV;
    snprintf(port, sizeof(port), "%d", s->o.port);
    const char *host = (s->o.host == NULL || strcmp(s->o.host, "*") == 0)
                           ? NULL : s->o.host;
    if (evutil_getaddrinfo(host, port, &hints, &ai) != 0 || ai == NULL) {
        *err = "cannot resolve the WebSocket listen address";
        return RS_EINVAL;
    }
    s->listener = evconnlistener_new_bind(
        s->o.base, on_accept, s,
        LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
        4096, ai->ai_addr, (int)ai->ai_addrlen);
    evutil_freeaddrinfo(ai);
    if (s->listener == NULL) {
        *err = "cannot listen on the WebSocket address (in use?)";
        return RS_EIO;
    }
    s->guard = acceptguard_new(s->o.base, s->listener, "websocket");
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (s->guard == NULL ||
        getsockname(evconnlistener_get_fd(s->listener), (struct sockaddr *)&ss,
                    &len) != 0) {
        *err = "cannot learn the WebSocket listening port";
        return RS_EIO;
    }
    s->port = ss.ss_family == AF_INET6
                  ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                  : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

static int
ws_server_metrics(struct ws_server *s, struct rs_metrics *m)
{
    int rc = rs_metrics_register_counter(
        m, &s->m_rate_refused, "rshub_ws_rate_refused_total",
        "New WebSocket connections refused at accept (429): the address was "
        "over --ws-conn-rate and --ws-conn-burst.", NULL);
    if (rc == 0)
        rc = rs_metrics_register_counter(
            m, &s->m_untracked, "rshub_ws_addr_untracked_total",
            "Connections or replays not limited per address: the table of "
            "addresses was full.", NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(
            m, "rshub_ws_addresses",
            "Client addresses the per-address limits remember.", gauge_addrs,
            s, NULL);
    return rc;
}

struct ws_server *
ws_server_new(const struct ws_server_opts *o, const char **err)
{
    struct ws_server *s = rs_calloc(1, sizeof(*s));
    *err = "out of memory";
    if (s == NULL)
        return NULL;
    s->o = *o;
    if (s->o.soft_limit == 0)
        s->o.soft_limit = 1u << 20;
    if (s->o.soft_secs == 0)
        s->o.soft_secs = 10;
    if (s->o.hard_limit == 0)
        s->o.hard_limit = 16u << 20;
    if (s->o.ping_secs == 0)
        s->o.ping_secs = 30;
    if (s->o.conn_burst == 0)
        s->o.conn_burst = s->o.conn_rate;
    if (s->o.max_addrs == 0)
        s->o.max_addrs = 65536;
    if (o->metrics != NULL && ws_server_metrics(s, o->metrics) != 0) {
        *err = "cannot register the WebSocket metrics";
        goto fail;
    }
    if (s->o.conn_rate != 0 || s->o.replays_per_addr != 0) {
        struct timeval one = { 1, 0 };
        s->ev_sweep = event_new(o->base, -1, EV_PERSIST, on_addr_sweep, s);
        if (s->ev_sweep == NULL || event_add(s->ev_sweep, &one) != 0)
            goto fail;
    }
    s->nthreads = o->threads;
    if (s->nthreads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        s->nthreads = n > 0 ? (unsigned)n : 1;
    }
    s->threads = rs_calloc(s->nthreads, sizeof(*s->threads));
    if (s->threads == NULL)
        goto fail;

    lws_set_log_level(LLL_ERR | LLL_WARN, on_lws_log);
    for (unsigned i = 0; i < s->nthreads; i++) {
        struct ws_thread *t = &s->threads[i];
        t->srv = s;
        t->idx = i;
        t->scratch = rs_malloc(LWS_PRE + WS_SCRATCH);
        if (t->scratch == NULL)
            goto fail;
        if (seam_queue_init(&t->inbox, on_inbox_wake, t) != 0) {
            rs_free(t->scratch);
            t->scratch = NULL;
            goto fail;
        }
        t->ctx = thread_context(s, t, err);
        if (t->ctx == NULL)
            goto fail;
    }
    for (unsigned i = 0; i < s->nthreads; i++) {
        struct ws_thread *t = &s->threads[i];
        if (pthread_create(&t->tid, NULL, thread_main, t) != 0) {
            *err = "cannot start a WebSocket service thread";
            goto fail;
        }
        t->started = true;
    }
    if (server_listen(s, err) != 0)
        goto fail;
    *err = NULL;
    return s;
fail:
    ws_server_free(s, 0);
    return NULL;
}

int
ws_server_port(const struct ws_server *s)
{
    return s->port;
}

unsigned
ws_server_threads(const struct ws_server *s)
{
    return s->nthreads;
}

void
ws_server_post(struct ws_server *s, unsigned thread, struct seam_ev *ev)
{
    seam_push(&s->threads[thread % s->nthreads].inbox, ev);
}

void
ws_server_stats(const struct ws_server *s, struct ws_stats *out)
{
    memset(out, 0, sizeof(*out));
    for (unsigned i = 0; i < s->nthreads; i++) {
        const struct ws_thread *t = &s->threads[i];
        out->accepted += atomic_load(&t->accepted);
        out->open += atomic_load(&t->open);
        out->frames += atomic_load(&t->frames);
        out->bytes += atomic_load(&t->bytes);
        out->writes += atomic_load(&t->writes);
        out->slow_drops += atomic_load(&t->slow_drops);
        out->closed_gap += atomic_load(&t->closed_gap);
    }
    out->refused = s->refused + acceptguard_refused(s->guard);
    out->rate_refused = s->rate_refused;
    out->addrs = s->addrs.used;
}

static uint64_t
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void
ws_server_free(struct ws_server *s, unsigned grace_ms)
{
    if (s == NULL)
        return;
    if (s->ev_sweep != NULL)
        event_free(s->ev_sweep);
    acceptguard_free(s->guard);
    if (s->listener != NULL)
        evconnlistener_free(s->listener);
    for (unsigned i = 0; i < s->nthreads && s->threads != NULL; i++) {
        struct ws_thread *t = &s->threads[i];
        if (!t->started)
            continue;
        struct seam_ev *ev = seam_ev_new(SEAM_STOP);
        if (ev != NULL)
            seam_push(&t->inbox, ev);
        else
            atomic_store(&t->exiting, true);
    }
    uint64_t deadline = now_ms() + grace_ms;
    for (unsigned i = 0; i < s->nthreads && s->threads != NULL; i++) {
        struct ws_thread *t = &s->threads[i];
        if (!t->started)
            continue;
        while (!atomic_load(&t->exiting) && now_ms() < deadline)
            usleep(10000);
        atomic_store(&t->exiting, true);
        lws_cancel_service(t->ctx);
        pthread_join(t->tid, NULL);
    }
    for (unsigned i = 0; i < s->nthreads && s->threads != NULL; i++) {
        struct ws_thread *t = &s->threads[i];
        if (t->ctx != NULL)
            lws_context_destroy(t->ctx);
        if (t->scratch != NULL)
            seam_queue_cleanup(&t->inbox);
        rs_free(t->scratch);
        rs_free(t->peers);
        rs_free(t->chans);
        rs_free(t->clients.keys);
        rs_free(t->clients.vals);
    }
    rs_free(s->threads);
    rs_free(s->addrs.v);
    rs_free(s);
}
