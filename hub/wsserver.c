/*
 * wsserver.c - libwebsockets service threads (wsserver.h). Debian's
 * libwebsockets is built with one service thread per context (LWS_MAX_SMP
 * 1, which also rules out its SO_REUSEPORT listen sharing) and without a
 * libevent loop, so the main loop accepts, hands each socket to a context
 * through the seam (least loaded thread first), and each thread adopts it.
 * Accepting on the main loop also lets us meet EMFILE calmly: count it,
 * pause the listener briefly, keep serving the connections we have. The
 * threads, their wake-ups and everything that crosses are rs_seam's
 * (common/seam.c): events both ways, their counters (WC_*), the msg
 * reference counts; the rest of a ws_thread is its thread's alone, and the
 * per-address table and `assigned` are the main loop's.
 *
 * The WebSocket protocol itself is ours (RFC 6455): lws adopts each socket
 * as a raw one and gives us its bytes, and we parse the upgrade request,
 * answer it, decode the client's frames and write ours. Debian's lws 4.1
 * accepts unmasked client frames, which RFC 6455 5.1 says must fail the
 * connection (1002), and gives no way to tell; lws only checks masking
 * from 5.0 on. The client has nothing to say beyond control frames, so the
 * decoder (ws_dec_*) is small: it checks framing, masking and UTF-8 and
 * keeps control frames whole; pings, pongs, the close handshake and
 * keepalive are a few lines each.
 *
 * Writes are one per subscriber per loop turn: every notification is
 * already a complete frame (msg.c), so right after draining main's events
 * (and on each WRITEABLE for what that left) we copy as many queued frames
 * as fit into a 64 KiB scratch buffer (after any pong or ping due) and
 * hand it to lws_write(LWS_WRITE_RAW), which buffers a partial send itself
 * and calls us again only once it has drained.
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
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RS_LOG_MODULE "ws"
#include "acceptguard.h"
#include "rs_alloc.h"
#include "rs_hex.h"
#include "rs_log.h"
#include "rs_mix.h"
#include "readauth.h"
#include "readnote.h"
#include "rs_metrics.h"
#include "rs_time.h"
#include "rs_wsclose.h"
#include "wsserver.h"

#define WS_SCRATCH (64 * 1024)
#define WS_REPLAY_LOW 64        /* ask for more replay below this many queued */
#define WS_CLIENT_TEXT 124      /* a close reason: 123 bytes at most (RFC 6455) */
#define WS_ADDR_NOTICE_MS 60000 /* one log line per address per minute */
#define WS_HEAD_MAX 8192        /* an upgrade request head, bytes */
#define WS_HEAD_SECS 10         /* time a client has to send it */
#define WS_CLOSE_SECS 5         /* time for the peer's close after ours */
#define WS_CTL_MAX 125          /* a control frame's payload (RFC 6455 5.5) */
#define WS_PROTOCOL "resourcesync-notification"
/* A browser's way to send a read credential (it cannot set Authorization
 * on a WebSocket): one more subprotocol offered, this prefix and the token
 * in base64url, never echoed (docs/protocol.md 4). */
#define WS_BEARER_PROTOCOL "rspush.bearer."
#define WS_TIMEOUT_HEAD (PENDING_TIMEOUT_USER_REASON_BASE + 1)
#define WS_QUEUE_HIGH ((size_t)64 << 20)  /* default o.queue_high */

/* What each service thread counts (rs_seam_count at its end), summed by
 * ws_server_stats and read by the least-loaded choice. */
enum ws_count {
    WC_ACCEPTED = 0,  /* connections established, ever */
    WC_OPEN,          /* connections open now */
    WC_FRAMES,
    WC_BYTES,
    WC_WRITES,
    WC_SLOW_DROPS,
    WC_CLOSED_GAP,
    WC_PROTO_FAILS,   /* closed 1002/1007: broke RFC 6455 */
};

enum client_state {
    CL_HANDSHAKE = 0, /* reading the upgrade request */
    CL_PENDING,       /* JOIN sent, waiting for ATTACH */
    CL_REPLAY,        /* replaying; live messages are ignored */
    CL_LIVE,
    CL_CLOSING,       /* close frame pending */
    CL_CLOSED,        /* our close frame (or refusal) sent and the write
                         side shut: waiting for the peer's close or EOF */
};

/* The client's frames, decoded as they arrive, in any chunking (RFC 6455
 * 5.2). Data messages are checked and dropped: a client has nothing to
 * say on a channel. Control frames are kept whole for their handler. */
enum ws_dec_step { WD_HEAD = 0, WD_LEN, WD_EXTLEN, WD_MASK, WD_DATA };

enum ws_dec_ev {
    WD_NEED = 0,      /* all the input was taken; more may follow */
    WD_CONTROL,       /* a whole control frame: opcode, ctl[0..ctl_len) */
    WD_FAIL,          /* the peer broke the protocol: close with the code */
};

struct ws_dec {
    uint8_t step;
    uint8_t opcode;            /* of the frame being read */
    bool fin;
    uint8_t got, need;         /* bytes of the extended length or mask */
    uint64_t left;             /* payload bytes still to come */
    uint8_t mask[4];
    uint8_t mask_at;
    bool in_msg;               /* a fragmented data message is open */
    bool text;                 /* the open message is text */
    uint32_t utf8;             /* ws_utf8_feed state; 0 between characters */
    uint8_t ctl_len;
    uint8_t ctl[WS_CTL_MAX];
};

struct ws_thread;

/* Per-connection state: lws allocates it (per_session_data_size), zeroed,
 * when it adopts the socket, and frees it after LWS_CALLBACK_RAW_CLOSE, so
 * it holds no pointer others keep. */
struct ws_client {
    struct lws *wsi;
    struct ws_thread *t;           /* NULL until the handshake is done */
    uint64_t id;
    enum client_state state;
    struct seam_addr addr;         /* the peer, from accept() */
    char *head;                    /* the request head so far (handshake) */
    size_t head_len;
    struct ws_dec dec;
    bool open;                     /* upgraded: frames are decoded */
    /* The 101 waits for main's ATTACH (or a close): a client that has seen
     * it is in the channel, so every notification accepted after that
     * reaches it. Sent first by on_writeable. */
    bool hs_due;
    bool hs_as_now;                /* the 101 says X-Hub-Since: now */
    bool hs_proto;                 /* it names our subprotocol */
    char hs_accept[32];            /* Sec-WebSocket-Accept, base64 */
    bool alive;                    /* heard from since our last ping */
    bool ping_out;                 /* a ping went out since */
    bool ping_due;                 /* a ping to send */
    bool pong_due;                 /* a pong to send: pong[0..pong_len) */
    bool peer_closed;              /* its close frame came */
    bool shut_due;                 /* shut our side once lws has drained */
    uint8_t pong_len;
    uint8_t pong[WS_CTL_MAX];
    unsigned chan;                 /* SEAM_NO_CHAN until attached */
    struct ws_client *prev, *next; /* in the channel's list */
    struct msg_id skip_until;      /* live: drop ids <= this */
    struct msg_id last_queued;     /* newest id queued (for MORE) */
    bool more_pending;             /* MORE sent, REPLAY not back yet */
    bool joined;                   /* JOIN was sent to main */
    struct msg **q;                /* ring of queued frames */
    uint32_t qhead, qlen, qcap;
    size_t qbytes;
    int64_t soft_since;            /* rs_time_mono_ms when it went over
                                      the soft limit; 0 = under it */
    bool choked;                   /* the kernel did not take our last write */
    uint16_t close_code;           /* 0: a close frame without a code */
    char close_reason[WS_CLIENT_TEXT];
    /* Read access (readauth.h), checked at the upgrade and again at each
     * reload; NULL names when the hub has no read credentials at all. */
    char *chan_name;               /* the channel asked for */
    char *bearer;                  /* the credential that let it in; NULL:
                                      none (a public channel) */
    int64_t expires_ms;            /* Unix ms the credential ends; 0: never */
    uint64_t ping_at_ms;           /* monotonic: the next keepalive ping */
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

/* One service thread. Its thread is rs_seam's; everything here is that
 * thread's alone, except what says otherwise. */
struct ws_thread {
    struct ws_server *srv;
    unsigned idx;
    struct lws_context *ctx;       /* made and destroyed by the main loop,
                                      around the thread's life */
    struct rs_seam_flow live;      /* SEAM_MSG bytes waiting for it (rs_seam) */
    uint64_t assigned;             /* main loop only: sockets handed to it */
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
    struct readauth *auth;         /* this thread's reference to the read
                                      credentials in force; NULL: none */
    /* Clients whose queue became non-empty while the main loop's events
     * were being drained: written right after it (thread_flush_dirty)
     * instead of on the next poll turn. At most one entry per client per
     * drain (a queue becomes non-empty once), so bounded by nclients. */
    bool draining;
    uint64_t *dirty;
    size_t ndirty, capdirty;
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
    struct rs_seam *seam;          /* the threads and all that crosses to them */
    struct ws_thread *threads;
    struct evconnlistener *listener;
    struct acceptguard *guard;     /* EMFILE: pause, count, keep serving */
    uint64_t refused;              /* main loop only: other failures */
    struct addr_table addrs;       /* main loop only */
    struct event *ev_sweep;
    uint64_t rate_refused;
    struct rs_metrics_counter *m_rate_refused, *m_untracked, *m_proto;
};

/* ------------------------------------------------------------ client map */

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
        size_t j = rs_mix64(k) & (ncap - 1);
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
    size_t j = rs_mix64(k) & (m->cap - 1);
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
    size_t j = rs_mix64(k) & (m->cap - 1);
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
    size_t j = rs_mix64(k) & (m->cap - 1);
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
    uint64_t now = rs_time_mono_ms();
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
    uint64_t now = rs_time_mono_ms();
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
    uint64_t now = rs_time_mono_ms();
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
    if (rs_seam_push(t->srv->seam, RS_SEAM_LOOP, &ev->item) < 0)
        seam_ev_free(ev);   /* not for a fresh event; kept for the contract */
}

static void
count(struct ws_thread *t, enum ws_count k, int64_t delta)
{
    rs_seam_count(t->srv->seam, t->idx, k, delta);
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
    if (c->state == CL_CLOSING || c->state == CL_CLOSED)
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

static int64_t
wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The timer fires at the next ping or when the credential ends, whichever
 * comes first. */
static void
client_arm(struct ws_client *c)
{
    uint64_t now = rs_time_mono_ms();
    uint64_t due = c->ping_at_ms;
    if (c->expires_ms > 0) {
        int64_t left = c->expires_ms - wall_ms();
        uint64_t end = now + (left > 0 ? (uint64_t)left : 0);
        if (end < due)
            due = end;
    }
    uint64_t ms = due > now ? due - now : 1;
    lws_set_timer_usecs(c->wsi, (lws_usec_t)ms * 1000);
}

/* The credential ended, or a reload no longer lets it in. */
static void
client_revoke(struct ws_client *c)
{
    client_close(c, RS_WSCLOSE_REVOKED, "credential expired or revoked");
}

/* Remember c for the write after the drain; false (out of memory): the
 * caller asks lws for a WRITEABLE instead. */
static bool
dirty_add(struct ws_thread *t, struct ws_client *c)
{
    if (t->ndirty == t->capdirty) {
        size_t ncap = t->capdirty ? t->capdirty * 2 : 64;
        uint64_t *nd = rs_realloc(t->dirty, ncap * sizeof(*nd));
        if (nd == NULL)
            return false;
        t->dirty = nd;
        t->capdirty = ncap;
    }
    t->dirty[t->ndirty++] = c->id;
    return true;
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
        count(t, WC_SLOW_DROPS, 1);
        client_close(c, 4002, "slow consumer: send queue over the hard limit; "
                              "resume with since");
        return;
    }
    if (c->qbytes + m->frame_len > o->soft_limit) {
        /* a duration: the monotonic clock, which a wall clock stepped
         * forward (NTP) cannot make long */
        int64_t now = rs_time_mono_ms();
        if (c->soft_since == 0) {
            c->soft_since = now > 0 ? now : 1;
        } else if (now - c->soft_since >= (int64_t)o->soft_secs * 1000) {
            count(t, WC_SLOW_DROPS, 1);
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
    if (c->qlen == 1 && !(t->draining && dirty_add(t, c)))
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
    c->hs_as_now = ev->code == SEAM_AS_NOW;
    if (ev->flag) {
        c->state = CL_REPLAY;
        c->last_queued = ev->id;
        c->more_pending = true;   /* main sends the first page unasked */
    } else {
        c->state = CL_LIVE;
        c->skip_until = ev->id;
    }
    lws_callback_on_writable(c->wsi);   /* the 101 */
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
                count(t, WC_CLOSED_GAP, 1);
            client_close(c, ev->code, ev->text);
        }
        return;
    }
    struct ws_client *c = cmap_get(&t->clients, ev->client);
    if (c == NULL)
        return;
    if (ev->code == 4001)
        count(t, WC_CLOSED_GAP, 1);
    client_close(c, ev->code, ev->text);
}

/* New read credentials (a reload): every client is checked again as if it
 * connected now, and those no longer let in are closed with 4008. */
static void
on_ev_auth(struct ws_thread *t, struct seam_ev *ev)
{
    readauth_unref(t->auth);
    t->auth = ev->auth;
    ev->auth = NULL;
    if (t->auth == NULL)
        return;
    int64_t now = wall_ms();
    size_t cut = 0;
    for (size_t i = 0; i < t->clients.cap; i++) {
        uint64_t k = t->clients.keys[i];
        struct ws_client *c = t->clients.vals[i];
        if (k == 0 || k == UINT64_MAX || c->chan_name == NULL ||
            c->state == CL_CLOSING || c->state == CL_CLOSED)
            continue;
        int64_t exp = 0;
        enum read_verdict v = readauth_check(t->auth, c->bearer, c->chan_name,
                                             NULL, now / 1000, &exp);
        if (readauth_verdict_status(v) != 0) {
            client_revoke(c);
            cut++;
        } else {
            c->expires_ms = exp * 1000;
            client_arm(c);
        }
    }
    if (cut > 0) {
        char n[24], th[12];
        snprintf(n, sizeof(n), "%zu", cut);
        snprintf(th, sizeof(th), "%u", t->idx);
        rs_log_kv(RS_LOG_INFO, "read credentials reloaded: connections no "
                  "longer allowed closed (4008)", "closed", n, "thread", th,
                  NULL);
    }
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
        rs_seam_exit(t->srv->seam, t->idx);
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
    /* A raw socket: the WebSocket protocol is ours (on_rx). On failure
     * lws closes the socket itself, except on an early out-of-memory where
     * it cannot tell us: leaking one descriptor then is better than
     * closing a number another thread may already reuse. */
    (void)lws_adopt_descriptor_vhost(vh, LWS_ADOPT_SOCKET, fd, WS_PROTOCOL,
                                     NULL);
}

static int on_writeable(struct ws_thread *t, struct ws_client *c);

/* Write what the drain queued, now: waiting for WRITEABLE would cost
 * another poll() over every socket of the thread and a POLLOUT set and
 * cleared per client, per notification (docs/internals/fanout.md, "Live
 * path"). Every frame the drain brought is already queued, so this is
 * still one write per client per drain. A client whose last write the
 * kernel did not take whole waits for lws's WRITEABLE as before. */
static void
thread_flush_dirty(struct ws_thread *t)
{
    for (size_t i = 0; i < t->ndirty; i++) {
        struct ws_client *c = cmap_get(&t->clients, t->dirty[i]);
        if (c == NULL || c->qlen == 0)
            continue;
        if (c->choked || lws_partial_buffered(c->wsi)) {
            lws_callback_on_writable(c->wsi);
            continue;
        }
        if (on_writeable(t, c) != 0)
            lws_set_timeout(c->wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
    }
    t->ndirty = 0;
    if (t->capdirty > 4096 && t->capdirty > 4 * t->nclients) {
        rs_free(t->dirty);   /* a burst of clients has gone: give it back */
        t->dirty = NULL;
        t->capdirty = 0;
    }
}

/* The main loop's events, in order; then its stop request, which follows
 * every event posted before it. */
static void
thread_drain_inbox(struct ws_thread *t)
{
    struct rs_seam *seam = t->srv->seam;
    bool stop = false;
    struct seam_ev *ev = seam_ev_of(rs_seam_take(seam, t->idx, &stop));
    t->draining = true;
    while (ev != NULL) {
        struct seam_ev *next = seam_ev_next(ev);
        switch (ev->type) {
        case SEAM_MSG: on_ev_msg(t, ev->m); break;
        case SEAM_ATTACH: on_ev_attach(t, ev); break;
        case SEAM_REPLAY: on_ev_replay(t, ev); break;
        case SEAM_CLOSE: on_ev_close(t, ev); break;
        case SEAM_ADOPT: on_ev_adopt(t, ev); break;
        case SEAM_AUTH: on_ev_auth(t, ev); break;
        default: break;
        }
        if (rs_seam_done(seam, t->idx, &ev->item)) {
            /* Back under half: one DRAINED per pause, so main can count. */
            (void)rs_seam_flow_resume(seam, t->idx, &t->live);
            struct seam_ev *dr = seam_ev_new(SEAM_DRAINED);
            if (dr != NULL)
                to_main(t, dr);
            else
                rs_log(RS_LOG_ERROR, "out of memory: the tail read stays "
                                     "paused for thread %u", t->idx);
        }
        seam_ev_free(ev);
        ev = next;
    }
    t->draining = false;
    thread_flush_dirty(t);
    if (stop)
        on_ev_stop(t);
}

/* ------------------------------------------------------------------ UTF-8 */

/* Streaming UTF-8 check (RFC 3629: no overlong forms, no surrogates, no
 * code point past U+10FFFF), for text split anywhere. *st is 0 between
 * characters; otherwise its low byte counts the continuation bytes still
 * due and its next two bytes bound the next one. False at the first byte
 * that cannot be UTF-8 (*st is then meaningless). */
static bool
ws_utf8_feed(uint32_t *st, const uint8_t *p, size_t n)
{
    uint32_t s = *st;
    for (size_t i = 0; i < n; i++) {
        uint32_t b = p[i];
        if ((s & 0xff) == 0) {
            uint32_t k, lo = 0x80, hi = 0xbf;
            if (b < 0x80)
                continue;
            if (b >= 0xc2 && b <= 0xdf) {
                k = 1;
            } else if (b == 0xe0) {
                k = 2;
                lo = 0xa0;            /* overlong below U+0800 */
            } else if (b == 0xed) {
                k = 2;
                hi = 0x9f;            /* surrogates */
            } else if (b >= 0xe1 && b <= 0xef) {
                k = 2;
            } else if (b == 0xf0) {
                k = 3;
                lo = 0x90;            /* overlong below U+10000 */
            } else if (b >= 0xf1 && b <= 0xf3) {
                k = 3;
            } else if (b == 0xf4) {
                k = 3;
                hi = 0x8f;            /* past U+10FFFF */
            } else {
                return false;
            }
            s = k | lo << 8 | hi << 16;
            continue;
        }
        if (b < ((s >> 8) & 0xff) || b > ((s >> 16) & 0xff))
            return false;
        s = (s & 0xff) - 1;
        if (s != 0)
            s |= 0x80u << 8 | 0xbfu << 16;
    }
    *st = s;
    return true;
}

/* ------------------------------------------------------------ frame decoder */

/* The frame's payload is all in. */
static enum ws_dec_ev
ws_dec_end(struct ws_dec *d, uint16_t *code, const char **why)
{
    d->step = WD_HEAD;
    if (d->opcode & 0x08)
        return WD_CONTROL;
    if (!d->fin) {
        d->in_msg = true;
        return WD_NEED;
    }
    d->in_msg = false;
    if (d->text && d->utf8 != 0) {
        *code = 1007;
        *why = "text ends inside a UTF-8 sequence";
        return WD_FAIL;
    }
    return WD_NEED;
}

/* Unmask and take k payload bytes. */
static enum ws_dec_ev
ws_dec_payload(struct ws_dec *d, const uint8_t *p, size_t k, uint16_t *code,
               const char **why)
{
    uint8_t buf[256];
    while (k > 0) {
        size_t m = k < sizeof(buf) ? k : sizeof(buf);
        for (size_t i = 0; i < m; i++)
            buf[i] = p[i] ^ d->mask[(d->mask_at + i) & 3];
        d->mask_at = (uint8_t)((d->mask_at + m) & 3);
        if (d->opcode & 0x08) {
            memcpy(d->ctl + d->ctl_len, buf, m);   /* <= 125 in all */
            d->ctl_len = (uint8_t)(d->ctl_len + m);
        } else if (d->text && !ws_utf8_feed(&d->utf8, buf, m)) {
            *code = 1007;
            *why = "text that is not UTF-8";
            return WD_FAIL;
        }
        p += m;
        k -= m;
    }
    return WD_NEED;
}

/*
 * Feed the client's bytes; *used says how many were taken. Stops after a
 * whole control frame (WD_CONTROL: the caller handles it and feeds the
 * rest) or at a violation (WD_FAIL, with the close code and why), else
 * takes everything (WD_NEED). A client's frames must be masked (RFC 6455
 * 5.1), control frames whole and short (5.5), fragments in order (5.4),
 * text UTF-8 (8.1); no extension is negotiated, so no reserved bit.
 */
static enum ws_dec_ev
ws_dec_feed(struct ws_dec *d, const uint8_t *p, size_t n, size_t *used,
            uint16_t *code, const char **why)
{
    size_t i = 0;
    enum ws_dec_ev ev = WD_NEED;
    *code = 1002;
    while (i < n && ev == WD_NEED) {
        uint8_t b = p[i];
        switch ((enum ws_dec_step)d->step) {
        case WD_HEAD:
            i++;
            d->fin = (b & 0x80) != 0;
            d->opcode = b & 0x0f;
            if (b & 0x70) {
                *why = "reserved bits set without an extension";
                return *used = i, WD_FAIL;
            }
            if (d->opcode >= 0x08) {
                if (d->opcode > 0x0a) {
                    *why = "unknown control opcode";
                    return *used = i, WD_FAIL;
                }
                if (!d->fin) {
                    *why = "fragmented control frame";
                    return *used = i, WD_FAIL;
                }
            } else if (d->opcode == 0x00) {
                if (!d->in_msg) {
                    *why = "continuation frame outside a message";
                    return *used = i, WD_FAIL;
                }
            } else if (d->opcode <= 0x02) {
                if (d->in_msg) {
                    *why = "new message inside a fragmented one";
                    return *used = i, WD_FAIL;
                }
                d->text = d->opcode == 0x01;
                d->utf8 = 0;
            } else {
                *why = "unknown data opcode";
                return *used = i, WD_FAIL;
            }
            d->step = WD_LEN;
            break;
        case WD_LEN:
            i++;
            if (!(b & 0x80)) {
                *why = "client frame not masked";
                return *used = i, WD_FAIL;
            }
            d->left = b & 0x7f;
            d->got = 0;
            if ((d->opcode & 0x08) && d->left > WS_CTL_MAX) {
                *why = "control frame over 125 bytes";
                return *used = i, WD_FAIL;
            }
            if (d->left >= 126) {
                d->need = d->left == 126 ? 2 : 8;
                d->left = 0;
                d->step = WD_EXTLEN;
            } else {
                d->step = WD_MASK;
            }
            break;
        case WD_EXTLEN:
            i++;
            d->left = d->left << 8 | b;
            if (++d->got < d->need)
                break;
            if (d->left >> 63) {
                *why = "payload length over 2^63";
                return *used = i, WD_FAIL;
            }
            d->got = 0;
            d->step = WD_MASK;
            break;
        case WD_MASK:
            i++;
            d->mask[d->got++] = b;
            if (d->got < 4)
                break;
            d->mask_at = 0;
            d->ctl_len = 0;
            d->step = WD_DATA;
            if (d->left == 0)
                ev = ws_dec_end(d, code, why);
            break;
        case WD_DATA: {
            size_t k = n - i < d->left ? n - i : (size_t)d->left;
            ev = ws_dec_payload(d, p + i, k, code, why);
            i += k;
            d->left -= k;
            if (ev == WD_NEED && d->left == 0)
                ev = ws_dec_end(d, code, why);
            break;
        }
        }
    }
    *used = i;
    return ev;
}

/* A control frame: 2-byte header and payload (<= 125) into out. */
static size_t
ws_frame_control(uint8_t *out, uint8_t opcode, const uint8_t *payload,
                 size_t len)
{
    out[0] = (uint8_t)(0x80 | opcode);
    out[1] = (uint8_t)len;
    if (len > 0)
        memcpy(out + 2, payload, len);
    return 2 + len;
}

/* ---------------------------------------------------------------- handshake */

/* The upgrade request, as far as RFC 6455 4.2.1 asks. */
struct ws_hs {
    char *target;                  /* NUL-terminated, in the head buffer */
    bool upgrade;                  /* Upgrade: websocket */
    bool connection;               /* Connection: upgrade */
    bool version;                  /* Sec-WebSocket-Version: 13 */
    bool protocol;                 /* offered resourcesync-notification */
    int keys;                      /* Sec-WebSocket-Key headers */
    char key[32];
    char *auth;                    /* Authorization's bearer token, in the
                                      head buffer; NULL: none */
    int auths;                     /* Authorization headers */
    char *sub_bearer;              /* the rspush.bearer. subprotocol's,
                                      decoded (rs_free it); NULL: none */
};

/* base64url without padding (RFC 4648 5) into out: its length, or -1. */
static int
ws_b64url_decode(const char *s, size_t n, char *out, size_t outsz)
{
    if (n == 0 || n % 4 == 1 || outsz < (n + 3) / 4 * 3 + 1)
        return -1;
    char *tmp = rs_malloc(n + 3);
    if (tmp == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '-')
            ch = '+';
        else if (ch == '_')
            ch = '/';
        else if (ch == '+' || ch == '/' || ch == '=')
            ch = '!';   /* not base64url: EVP_DecodeBlock refuses it */
        tmp[i] = ch;
    }
    size_t pad = (4 - n % 4) % 4;
    memset(tmp + n, '=', pad);
    int got = EVP_DecodeBlock((unsigned char *)out, (unsigned char *)tmp,
                              (int)(n + pad));
    rs_free(tmp);
    if (got < 0 || (size_t)got < pad)
        return -1;
    got -= (int)pad;
    if (memchr(out, '\0', (size_t)got) != NULL)
        return -1;
    out[got] = '\0';
    return got;
}

/* The rspush.bearer. entry of a Sec-WebSocket-Protocol list: 0 (none, or
 * taken into h->sub_bearer), or 400 with why. */
static int
ws_hs_sub_bearer(const char *v, struct ws_hs *h, const char **why)
{
    static const size_t pl = sizeof(WS_BEARER_PROTOCOL) - 1;
    while (*v != '\0') {
        while (*v == ' ' || *v == '\t' || *v == ',')
            v++;
        size_t n = strcspn(v, ", \t");
        if (n > pl && strncmp(v, WS_BEARER_PROTOCOL, pl) == 0) {
            size_t cap = (n - pl + 3) / 4 * 3 + 1;
            if (h->sub_bearer != NULL || (h->sub_bearer = rs_malloc(cap)) == NULL ||
                ws_b64url_decode(v + pl, n - pl, h->sub_bearer, cap) <= 0) {
                *why = "the rspush.bearer. subprotocol must be one token in "
                       "base64url";
                return 400;
            }
        }
        v += n;
    }
    return 0;
}

/* Does the comma-separated list v hold token tok (any case)? */
static bool
ws_hs_has_token(const char *v, const char *tok)
{
    size_t tl = strlen(tok);
    while (*v != '\0') {
        while (*v == ' ' || *v == '\t' || *v == ',')
            v++;
        const char *e = v;
        while (*e != '\0' && *e != ',')
            e++;
        const char *t = e;
        while (t > v && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        if ((size_t)(t - v) == tl && strncasecmp(v, tok, tl) == 0)
            return true;
        v = e;
    }
    return false;
}

/* Parse the head (NUL-terminated, ending with the blank line; cut in
 * place). 0, or the HTTP status to refuse it with and why. */
static int
ws_hs_parse(char *head, struct ws_hs *h, const char **why)
{
    memset(h, 0, sizeof(*h));
    char *line = head, *eol = strstr(line, "\r\n");
    *eol = '\0';
    char *sp1 = strchr(line, ' ');
    char *sp2 = sp1 != NULL ? strchr(sp1 + 1, ' ') : NULL;
    if (sp1 == NULL || sp2 == NULL || strchr(sp2 + 1, ' ') != NULL) {
        *why = "malformed request line";
        return 400;
    }
    *sp1 = *sp2 = '\0';
    if (strcmp(sp2 + 1, "HTTP/1.1") != 0) {
        *why = "a WebSocket upgrade needs HTTP/1.1";
        return 400;
    }
    if (strcmp(line, "GET") != 0) {
        *why = "only GET upgrades to a WebSocket";
        return 405;
    }
    h->target = sp1 + 1;
    for (line = eol + 2; *line != '\0'; line = eol + 2) {
        eol = strstr(line, "\r\n");
        *eol = '\0';
        char *colon = strchr(line, ':');
        if (line[0] == ' ' || line[0] == '\t' || colon == NULL ||
            colon == line || colon[-1] == ' ' || colon[-1] == '\t') {
            *why = "malformed header line";
            return 400;
        }
        *colon = '\0';
        char *v = colon + 1, *ve = eol;
        while (*v == ' ' || *v == '\t')
            v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        *ve = '\0';
        if (strcasecmp(line, "Upgrade") == 0) {
            h->upgrade = h->upgrade || ws_hs_has_token(v, "websocket");
        } else if (strcasecmp(line, "Connection") == 0) {
            h->connection = h->connection || ws_hs_has_token(v, "upgrade");
        } else if (strcasecmp(line, "Sec-WebSocket-Version") == 0) {
            h->version = strcmp(v, "13") == 0;
        } else if (strcasecmp(line, "Sec-WebSocket-Protocol") == 0) {
            h->protocol = h->protocol || ws_hs_has_token(v, WS_PROTOCOL);
            int st = ws_hs_sub_bearer(v, h, why);
            if (st != 0)
                return st;
        } else if (strcasecmp(line, "Authorization") == 0) {
            size_t bl = 0;
            const char *b = readauth_bearer_of(v, &bl);
            h->auths++;
            h->auth = b != NULL ? v + (b - v) : NULL;
            if (h->auth != NULL)
                h->auth[bl] = '\0';
        } else if (strcasecmp(line, "Sec-WebSocket-Key") == 0) {
            h->keys++;
            snprintf(h->key, sizeof(h->key), "%s", v);
        }
    }
    if (h->auths > 1) {
        *why = "more than one Authorization header";
        return 400;
    }
    if (!h->upgrade) {
        *why = "this port speaks WebSocket only (Upgrade: websocket)";
        return 426;
    }
    if (!h->version) {
        *why = "Sec-WebSocket-Version must be 13";
        return 426;
    }
    /* the key: 16 bytes in base64, one header */
    unsigned char raw[24];
    if (!h->connection || h->keys != 1 || strlen(h->key) != 24 ||
        EVP_DecodeBlock(raw, (const unsigned char *)h->key, 24) != 18 ||
        h->key[22] != '=' || h->key[23] != '=') {
        *why = h->connection ? "Sec-WebSocket-Key must be one 16-byte nonce "
                               "in base64"
                             : "Connection: upgrade is missing";
        return 400;
    }
    return 0;
}

/* Percent-decode s[0..n) into out (outsz with the NUL); false for a bad
 * escape, a NUL, or no room. */
static bool
ws_pct_decode(const char *s, size_t n, char *out, size_t outsz)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return false;
            int hi = rs_hexval(s[i + 1]), lo = rs_hexval(s[i + 2]);
            if (hi < 0 || lo < 0)
                return false;
            c = hi * 16 + lo;
            i += 2;
        }
        if (c == 0 || o + 1 >= outsz)
            return false;
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return true;
}

/* /channel/NAME[?since=ID] into ev: 0, or the close code to refuse with
 * (4004 unknown channel, 4005 bad since). */
static int
ws_parse_target(const char *target, struct seam_ev *ev)
{
    static const char prefix[] = "/channel/";
    if (strncmp(target, prefix, sizeof(prefix) - 1) != 0)
        return 4004;
    const char *name = target + sizeof(prefix) - 1;
    size_t nlen = strcspn(name, "?#");
    if (nlen == 0 || !ws_pct_decode(name, nlen, ev->text, sizeof(ev->text)) ||
        strchr(ev->text, '/') != NULL)
        return 4004;
    if (name[nlen] != '?')
        return 0;
    /* the first since= of the query wins, as with lws before */
    const char *q = name + nlen + 1;
    while (*q != '\0' && *q != '#') {
        size_t plen = strcspn(q, "&#");
        if (plen > 6 && strncmp(q, "since=", 6) == 0) {
            char v[MSG_ID_BUFSZ + 8];
            if (!ws_pct_decode(q + 6, plen - 6, v, sizeof(v)) ||
                msg_id_parse(v, strlen(v), &ev->id) != 0)
                return 4005;
            ev->flag = true;
            return 0;
        }
        if (plen == 6 && strncmp(q, "since=", 6) == 0)
            return 4005;
        q += plen;
        if (*q == '&')
            q++;
    }
    return 0;
}

/* ------------------------------------------------------------- lws callback */

/* Our last bytes are written (the close frame, or a refusal): shut our
 * side once lws has sent them all, and give the peer WS_CLOSE_SECS to
 * close its side (or send its close frame). */
static void
client_shut(struct ws_client *c)
{
    c->state = CL_CLOSED;
    if (lws_partial_buffered(c->wsi)) {
        c->shut_due = true;   /* on the WRITEABLE after lws drained */
        lws_callback_on_writable(c->wsi);
    } else {
        (void)shutdown(lws_get_socket_fd(c->wsi), SHUT_WR);
    }
    lws_set_timeout(c->wsi, PENDING_TIMEOUT_CLOSE_ACK, WS_CLOSE_SECS);
}

/* The peer broke RFC 6455: close with code, once, and say so. */
static void
client_fail(struct ws_client *c, uint16_t code, const char *why)
{
    char who[64], cs[8];
    ws_server_addr_format(&c->addr, who, sizeof(who));
    snprintf(cs, sizeof(cs), "%u", (unsigned)code);
    rs_log_kv(RS_LOG_INFO, "WebSocket client broke the protocol: closed",
              "client", who, "code", cs, "why", why, NULL);
    if (c->t != NULL) {
        count(c->t, WC_PROTO_FAILS, 1);
        rs_metrics_counter_inc(c->t->srv->m_proto);
    }
    c->open = false;   /* the stream is lost: read nothing more of it */
    client_close(c, code, why);
}

/* Refuse the upgrade with an HTTP status, then close. */
static void
client_refuse(struct ws_thread *t, struct ws_client *c, int status,
              const char *why)
{
    const char *reason = status == 401 ? "Unauthorized"
                       : status == 403 ? "Forbidden"
                       : status == 405 ? "Method Not Allowed"
                       : status == 426 ? "Upgrade Required"
                       : status == 431 ? "Request Header Fields Too Large"
                                       : "Bad Request";
    char *out = (char *)t->scratch + LWS_PRE;
    int n = snprintf(out, 1024,
                     "HTTP/1.1 %d %s\r\n"
                     "Content-Type: text/plain; charset=utf-8\r\n"
                     "Content-Length: %zu\r\n"
                     "%s%s%s"
                     "Connection: close\r\n\r\n"
                     "error: %s\n",
                     status, reason, strlen(why) + 8,
                     status == 426 ? "Upgrade: websocket\r\n"
                                     "Sec-WebSocket-Version: 13\r\n" : "",
                     status == 405 ? "Allow: GET\r\n" : "",
                     status == 401 ? "WWW-Authenticate: Bearer realm=\"rshub\"\r\n"
                                   : "", why);
    if (n > 0 && n < 1024)
        (void)lws_write(c->wsi, (unsigned char *)out, (size_t)n, LWS_WRITE_RAW);
    client_shut(c);
}

static int on_established(struct ws_thread *t, struct ws_client *c,
                          const char *target);

/* May this client read the channel it asks for (readauth.h)? 0, or the
 * status to refuse the upgrade with (401, 403) and why. A target that is
 * no channel is left to on_established (4004, 4005). */
static int
client_read_access(struct ws_thread *t, struct ws_client *c,
                   const struct ws_hs *h, const char **why)
{
    if (t->auth == NULL)
        return 0;
    struct seam_ev probe;
    memset(&probe, 0, sizeof(probe));
    if (ws_parse_target(h->target, &probe) != 0)
        return 0;
    const char *bearer = h->auth != NULL ? h->auth : h->sub_bearer;
    int64_t exp = 0;
    enum read_verdict v = readauth_check(t->auth, bearer, probe.text, NULL,
                                         wall_ms() / 1000, &exp);
    int status = readauth_verdict_status(v);
    if (status != 0) {
        char who[64];
        ws_server_addr_format(&c->addr, who, sizeof(who));
        readnote_refused(t->srv->o.notes, who, "channel", probe.text, v);
        *why = readauth_verdict_reason(v);
        return status;
    }
    c->chan_name = rs_strdup(probe.text);
    if (v == READ_OK) {
        c->bearer = rs_strdup(bearer);
        c->expires_ms = exp * 1000;
        if (c->bearer == NULL)
            c->expires_ms = wall_ms();   /* cut at once: cannot re-check */
    }
    return 0;
}


/* Collect the request head; once whole, answer it. *used: the bytes of
 * in that were the head's (the rest are the client's first frames).
 * Returns 0, or -1 to hang up at once. */
static int
client_handshake(struct ws_thread *t, struct ws_client *c, const uint8_t *in,
                 size_t len, size_t *used)
{
    *used = len;
    if (c->head == NULL && (c->head = rs_malloc(WS_HEAD_MAX + 1)) == NULL)
        return -1;
    size_t old = c->head_len;
    size_t take = WS_HEAD_MAX - old < len ? WS_HEAD_MAX - old : len;
    memcpy(c->head + old, in, take);
    c->head_len += take;
    c->head[c->head_len] = '\0';
    if (memchr(c->head + old, '\0', take) != NULL) {
        client_refuse(t, c, 400, "NUL byte in the request head");
        return 0;
    }
    char *end = strstr(c->head + (old > 3 ? old - 3 : 0), "\r\n\r\n");
    if (end == NULL) {
        if (c->head_len >= WS_HEAD_MAX)
            client_refuse(t, c, 431, "request head over 8 KiB");
        return 0;
    }
    size_t head_len = (size_t)(end - c->head) + 4;
    *used = head_len - old;
    end[2] = '\0';   /* keep the last header's CRLF, drop the blank line */

    struct ws_hs h;
    const char *why = NULL;
    int status = ws_hs_parse(c->head, &h, &why);
    if (status == 0)
        status = client_read_access(t, c, &h, &why);
    rs_free(h.sub_bearer);
    if (status != 0) {
        client_refuse(t, c, status, why);
        return 0;
    }
    /* Sec-WebSocket-Accept: base64(SHA-1(key + the RFC's GUID)); the 101
     * itself goes out once main has attached the client (hs_due) */
    char kg[64];
    unsigned char md[SHA_DIGEST_LENGTH];
    int kn = snprintf(kg, sizeof(kg), "%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11",
                      h.key);
    SHA1((const unsigned char *)kg, (size_t)kn, md);
    EVP_EncodeBlock((unsigned char *)c->hs_accept, md, SHA_DIGEST_LENGTH);
    c->hs_proto = h.protocol;
    c->hs_due = true;
    lws_set_timeout(c->wsi, NO_PENDING_TIMEOUT, 0);
    c->ping_at_ms = rs_time_mono_ms() + (uint64_t)t->srv->o.ping_secs * 1000;
    client_arm(c);
    c->open = true;
    int rc = on_established(t, c, h.target);
    rs_free(c->head);
    c->head = NULL;
    return rc;
}

/* A whole control frame from the client. 0, or -1 to hang up now. */
static int
client_control(struct ws_client *c)
{
    struct ws_dec *d = &c->dec;
    if (d->opcode == 0x09) {   /* ping: answer with its payload, latest wins */
        if (c->state == CL_CLOSING || c->state == CL_CLOSED)
            return 0;
        memcpy(c->pong, d->ctl, d->ctl_len);
        c->pong_len = d->ctl_len;
        c->pong_due = true;
        lws_callback_on_writable(c->wsi);
        return 0;
    }
    if (d->opcode == 0x0a)
        return 0;              /* pong: any input proves it alive */
    /* close (RFC 6455 5.5.1, 7.4) */
    c->peer_closed = true;
    if (c->state == CL_CLOSED)
        return -1;             /* it answered ours: done */
    uint16_t code = 0;
    if (d->ctl_len == 1) {
        client_fail(c, 1002, "close frame of one byte");
        return 0;
    }
    if (d->ctl_len >= 2) {
        uint32_t st = 0;
        code = (uint16_t)(d->ctl[0] << 8 | d->ctl[1]);
        if (!((code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
              (code >= 3000 && code <= 4999))) {
            client_fail(c, 1002, "close code not allowed on the wire");
            return 0;
        }
        if (!ws_utf8_feed(&st, d->ctl + 2, d->ctl_len - 2u) || st != 0) {
            client_fail(c, 1007, "close reason that is not UTF-8");
            return 0;
        }
    }
    client_close(c, code, "");   /* echo its code; then we hang up */
    return 0;
}

/* Bytes from the client. 0, or -1 to hang up now. */
static int
on_rx(struct ws_thread *t, struct ws_client *c, const uint8_t *in, size_t len)
{
    if (c->state == CL_HANDSHAKE) {
        size_t used;
        if (client_handshake(t, c, in, len, &used) != 0)
            return -1;
        in += used;
        len -= used;
    }
    if (!c->open)
        return 0;   /* refused, or the stream was lost: wait for EOF */
    c->alive = true;
    while (len > 0 && c->open) {
        size_t used;
        uint16_t code;
        const char *why = "";
        enum ws_dec_ev ev = ws_dec_feed(&c->dec, in, len, &used, &code, &why);
        in += used;
        len -= used;
        if (ev == WD_FAIL)
            client_fail(c, code, why);
        else if (ev == WD_CONTROL && client_control(c) != 0)
            return -1;
    }
    return 0;
}

/* Keepalive: every ping_secs a ping; a client that sent nothing since the
 * last one is gone (dropped within two intervals). */
static int
on_timer(struct ws_thread *t, struct ws_client *c)
{
    if (c->state == CL_HANDSHAKE || c->state == CL_CLOSING ||
        c->state == CL_CLOSED)
        return 0;
    if (c->expires_ms > 0 && wall_ms() >= c->expires_ms) {
        char who[64];
        ws_server_addr_format(&c->addr, who, sizeof(who));
        rs_log_kv(RS_LOG_INFO, "read credential expired: closed", "client",
                  who, "channel", c->chan_name ? c->chan_name : "-", NULL);
        client_revoke(c);
        return 0;
    }
    uint64_t now = rs_time_mono_ms();
    if (now >= c->ping_at_ms) {
        if (c->ping_out && !c->alive)
            return -1;
        c->alive = false;
        c->ping_out = true;
        c->ping_due = true;
        lws_callback_on_writable(c->wsi);
        c->ping_at_ms = now + (uint64_t)t->srv->o.ping_secs * 1000;
    }
    client_arm(c);
    return 0;
}

static int
on_established(struct ws_thread *t, struct ws_client *c, const char *target)
{
    c->chan = SEAM_NO_CHAN;
    c->id = ((uint64_t)(t->idx + 1) << 48) | ++t->next_client;
    if (cmap_put(&t->clients, c->id, c) != 0)
        return -1;   /* c->t stays NULL: on_closed has nothing to undo */
    c->t = t;
    c->state = CL_PENDING;
    t->nclients++;
    count(t, WC_ACCEPTED, 1);
    count(t, WC_OPEN, 1);

    struct seam_ev *ev = seam_ev_new(SEAM_JOIN);
    if (ev == NULL) {
        client_close(c, 1011, "out of memory");
        return 0;
    }
    int code = ws_parse_target(target, ev);
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
    ev->addr = c->addr;
    ev->client = c->id;
    c->joined = true;
    to_main(t, ev);
    return 0;
}

static void
on_adopted(struct ws_thread *t, struct ws_client *c, struct lws *wsi)
{
    c->wsi = wsi;
    c->state = CL_HANDSHAKE;
    c->chan = SEAM_NO_CHAN;
    int fd = lws_get_socket_fd(wsi);
    if (fd >= 0 && (size_t)fd < t->npeers)
        c->addr = t->peers[fd];
    lws_set_timeout(wsi, WS_TIMEOUT_HEAD, WS_HEAD_SECS);
}

static void
on_closed(struct ws_thread *t, struct ws_client *c)
{
    rs_free(c->head);
    c->head = NULL;
    rs_free(c->chan_name);
    c->chan_name = NULL;
    if (c->bearer != NULL)
        OPENSSL_cleanse(c->bearer, strlen(c->bearer));
    rs_free(c->bearer);
    c->bearer = NULL;
    if (c->t == NULL)
        return;   /* never established */
    chan_unlink(t, c);
    client_drop_queue(c);
    cmap_del(&t->clients, c->id);
    t->nclients--;
    count(t, WC_OPEN, -1);
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
        rs_seam_exit(t->srv->seam, t->idx);
}

/* The 101 answering the upgrade into buf (WS_SCRATCH bytes): its length. */
static size_t
client_upgrade_reply(const struct ws_client *c, char *buf)
{
    int n = snprintf(buf, 512,
                     "HTTP/1.1 101 Switching Protocols\r\n"
                     "Upgrade: websocket\r\n"
                     "Connection: Upgrade\r\n"
                     "Sec-WebSocket-Accept: %s\r\n"
                     "%s%s\r\n",
                     c->hs_accept,
                     c->hs_proto ? "Sec-WebSocket-Protocol: " WS_PROTOCOL "\r\n" : "",
                     c->hs_as_now ? "X-Hub-Since: now\r\n" : "");
    return n > 0 && n < 512 ? (size_t)n : 0;
}

static int
on_writeable(struct ws_thread *t, struct ws_client *c)
{
    unsigned char *buf = t->scratch + LWS_PRE;
    size_t len = 0;
    if (c->state == CL_CLOSED) {
        if (c->shut_due && !lws_partial_buffered(c->wsi)) {
            c->shut_due = false;
            (void)shutdown(lws_get_socket_fd(c->wsi), SHUT_WR);
        }
        return 0;
    }
    if (c->state == CL_HANDSHAKE)
        return 0;
    if (c->hs_due) {
        if (c->state == CL_PENDING)
            return 0;   /* not in the channel yet: pings and pongs wait too */
        len = client_upgrade_reply(c, (char *)buf);
        c->hs_due = false;
    }
    if (c->state == CL_CLOSING) {
        uint8_t payload[2 + WS_CLIENT_TEXT];
        size_t plen = 0;
        if (c->close_code != 0) {
            payload[0] = (uint8_t)(c->close_code >> 8);
            payload[1] = (uint8_t)c->close_code;
            plen = strlen(c->close_reason);   /* <= 123 */
            memcpy(payload + 2, c->close_reason, plen);
            plen += 2;
        }
        len += ws_frame_control(buf + len, 0x08, payload, plen);
        if (lws_write(c->wsi, buf, len, LWS_WRITE_RAW) < 0 || c->peer_closed)
            return -1;   /* a close answering the peer's: done */
        client_shut(c);
        return 0;
    }
    /* what the client is owed first: a pong, then our ping */
    if (c->pong_due) {
        len += ws_frame_control(buf + len, 0x0a, c->pong, c->pong_len);
        c->pong_due = false;
    }
    if (c->ping_due) {
        len += ws_frame_control(buf + len, 0x09, NULL, 0);
        c->ping_due = false;
    }
    uint32_t n = 0;
    size_t data = 0;
    if (c->qlen > 0 && c->q[c->qhead]->frame_len >= WS_SCRATCH) {
        /* big: send from the shared frame, after what is in the scratch */
        if (len > 0 && lws_write(c->wsi, buf, len, LWS_WRITE_RAW) < 0)
            return -1;
        buf = c->q[c->qhead]->frame;
        len = data = c->q[c->qhead]->frame_len;
        n = 1;
    } else {
        while (n < c->qlen) {
            struct msg *m = c->q[(c->qhead + n) % c->qcap];
            if (len + m->frame_len > WS_SCRATCH)
                break;
            memcpy(buf + len, m->frame, m->frame_len);
            len += m->frame_len;
            data += m->frame_len;
            n++;
        }
    }
    if (len == 0)
        return 0;
    if (lws_write(c->wsi, buf, len, LWS_WRITE_RAW) < 0)
        return -1;
    c->choked = lws_partial_buffered(c->wsi) != 0;
    if (n > 0) {
        count(t, WC_FRAMES, (int64_t)n);
        count(t, WC_BYTES, (int64_t)data);
        count(t, WC_WRITES, 1);
        client_pop(c, n);
        client_maybe_more(c);
    }
    if (c->qlen > 0)
        lws_callback_on_writable(c->wsi);
    return 0;
}

static int
ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
            void *in, size_t len)
{
    struct lws_context *ctx = lws_get_context(wsi);
    struct ws_thread *t = ctx != NULL ? lws_context_user(ctx) : NULL;
    struct ws_client *c = user;

    if (t == NULL)
        return 0;   /* not one of our contexts' connections */
    switch (reason) {
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        thread_drain_inbox(t);
        return 0;
    case LWS_CALLBACK_RAW_ADOPT:
        on_adopted(t, c, wsi);
        return 0;
    case LWS_CALLBACK_RAW_RX:
        return on_rx(t, c, in, len);
    case LWS_CALLBACK_RAW_WRITEABLE:
        return on_writeable(t, c);
    case LWS_CALLBACK_TIMER:
        return on_timer(t, c);
    case LWS_CALLBACK_RAW_CLOSE:
        on_closed(t, c);
        return 0;
    default:
        break;
    }
    return 0;
}

static const struct lws_protocols ws_protocols[] = {
    {
        .name = WS_PROTOCOL,
        .callback = ws_callback,
        .per_session_data_size = sizeof(struct ws_client),
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

/* The main loop's end of the seam: hand the events to the sink. */
static void
on_seam_loop(void *ud, struct rs_seam_item *list)
{
    struct ws_server *s = ud;
    struct seam_ev *ev = seam_ev_of(list);
    if (s->o.to_main != NULL && s->o.to_main->cb != NULL) {
        s->o.to_main->cb(s->o.to_main->ud, ev);
        return;
    }
    while (ev != NULL) {
        struct seam_ev *next = seam_ev_next(ev);
        seam_ev_free(ev);
        ev = next;
    }
}

static struct lws_context *
thread_context(struct ws_server *s, struct ws_thread *t, const char **err)
{
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.port = CONTEXT_PORT_NO_LISTEN_SERVER;   /* sockets come adopted */
    info.protocols = ws_protocols;
    info.user = t;
    (void)s;   /* keepalive and timeouts are ours (on_timer, WS_*_SECS) */
    info.timeout_secs = 10;
    info.pt_serv_buf_size = 4096;
    info.count_threads = 1;
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
        uint64_t load = t->assigned - rs_seam_counter(s->seam, i, WC_ACCEPTED) +
                        rs_seam_counter(s->seam, i, WC_OPEN);
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
    s->threads[best].assigned++;
    if (rs_seam_push(s->seam, best, &ev->item) < 0) {
        seam_ev_free(ev);   /* closes fd */
        s->refused++;
    }
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
        rc = rs_metrics_register_counter(
            m, &s->m_proto, "rshub_ws_protocol_closes_total",
            "WebSocket clients closed for breaking RFC 6455 (1002: unmasked "
            "or malformed frames; 1007: text that is not UTF-8).", NULL);
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
    if (s->o.queue_high == 0)
        s->o.queue_high = WS_QUEUE_HIGH;
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
    if (s->nthreads > RS_SEAM_THREADS_MAX)
        s->nthreads = RS_SEAM_THREADS_MAX;
    s->threads = rs_calloc(s->nthreads, sizeof(*s->threads));
    if (s->threads == NULL)
        goto fail;
    struct rs_seam_opts so = {
        .base = o->base,
        .threads = s->nthreads,
        .on_loop = on_seam_loop,
        .on_drop = seam_ev_drop,
        .ud = s,
        .name = "ws",
    };
    s->seam = rs_seam_new(&so, NULL);
    if (s->seam == NULL) {
        *err = "cannot set up the service threads' queues";
        goto fail;
    }

    lws_set_log_level(LLL_ERR | LLL_WARN, on_lws_log);
    for (unsigned i = 0; i < s->nthreads; i++) {
        struct ws_thread *t = &s->threads[i];
        t->srv = s;
        t->idx = i;
        t->auth = readauth_ref(o->auth);
        rs_seam_flow_init(&t->live, s->o.queue_high);
        t->scratch = rs_malloc(LWS_PRE + WS_SCRATCH);
        if (t->scratch == NULL)
            goto fail;
        t->ctx = thread_context(s, t, err);
        if (t->ctx == NULL)
            goto fail;
    }
    for (unsigned i = 0; i < s->nthreads; i++) {
        if (rs_seam_start(s->seam, i, s->threads[i].ctx) != 0) {
            *err = "cannot start a WebSocket service thread";
            goto fail;
        }
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

int
ws_server_post(struct ws_server *s, unsigned thread, struct seam_ev *ev)
{
    struct ws_thread *t = &s->threads[thread % s->nthreads];
    if (ev->type == SEAM_MSG) {
        rs_seam_item_init(&ev->item, ev->m->frame_len, &t->live);
    } else if (ev->type == SEAM_REPLAY) {
        /* bounded by the replay protocol (a page per client): counted,
         * never paused */
        size_t bytes = 0;
        for (size_t i = 0; i < ev->nmsgs; i++)
            bytes += ev->msgs[i]->frame_len;
        rs_seam_item_init(&ev->item, bytes, NULL);
    }
    int rc = rs_seam_push(s->seam, t->idx, &ev->item);
    if (rc < 0) {
        seam_ev_free(ev);   /* not for a fresh event; kept for the contract */
        return rc;
    }
    return rc == RS_SEAM_PAUSE ? WS_POST_PAUSE : 0;
}

void
ws_server_set_auth(struct ws_server *s, struct readauth *ra)
{
    for (unsigned i = 0; i < s->nthreads; i++) {
        struct seam_ev *ev = seam_ev_new(SEAM_AUTH);
        if (ev == NULL) {
            rs_log(RS_LOG_ERROR, "out of memory: WebSocket thread %u keeps "
                   "the read credentials it had", i);
            continue;
        }
        ev->auth = readauth_ref(ra);
        (void)ws_server_post(s, i, ev);
    }
}

void
ws_server_stats(const struct ws_server *s, struct ws_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->accepted = rs_seam_counter_sum(s->seam, WC_ACCEPTED);
    out->open = rs_seam_counter_sum(s->seam, WC_OPEN);
    out->frames = rs_seam_counter_sum(s->seam, WC_FRAMES);
    out->bytes = rs_seam_counter_sum(s->seam, WC_BYTES);
    out->writes = rs_seam_counter_sum(s->seam, WC_WRITES);
    out->slow_drops = rs_seam_counter_sum(s->seam, WC_SLOW_DROPS);
    out->closed_gap = rs_seam_counter_sum(s->seam, WC_CLOSED_GAP);
    out->proto_fails = rs_seam_counter_sum(s->seam, WC_PROTO_FAILS);
    out->refused = s->refused + acceptguard_refused(s->guard);
    out->rate_refused = s->rate_refused;
    out->addrs = s->addrs.used;
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
    /* Each thread closes its clients with 1001 and exits once they are
     * gone; those still there at the deadline are cut by the contexts'
     * destruction, whose LEAVEs the seam then drops. */
    if (s->seam != NULL) {
        for (unsigned i = 0; i < s->nthreads; i++)
            rs_seam_stop(s->seam, i);
        rs_seam_join(s->seam, grace_ms > INT_MAX ? INT_MAX : (int)grace_ms);
    }
    for (unsigned i = 0; i < s->nthreads && s->threads != NULL; i++) {
        struct ws_thread *t = &s->threads[i];
        if (t->ctx != NULL)
            lws_context_destroy(t->ctx);
    }
    rs_seam_free(s->seam);
    for (unsigned i = 0; i < s->nthreads && s->threads != NULL; i++) {
        struct ws_thread *t = &s->threads[i];
        rs_free(t->scratch);
        rs_free(t->peers);
        rs_free(t->dirty);
        rs_free(t->chans);
        rs_free(t->clients.keys);
        rs_free(t->clients.vals);
        readauth_unref(t->auth);
    }
    rs_free(s->threads);
    rs_free(s->addrs.v);
    rs_free(s);
}
