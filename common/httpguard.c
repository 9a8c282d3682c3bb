/*
 * httpguard.c - deadlines and connection caps for an evhttp server
 * (rs_httpguard.h). The one seam between our policy and evhttp's
 * connections: each connection's bufferevent is ours (evhttp_set_bevcb), a
 * filter over a socket bufferevent, which lets us see the bytes that come
 * in and learn when libevent frees the connection. Why it is built this way
 * (libevent 2.1 has no other hook): docs/internals/httpguard.md.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/resource.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#define RS_LOG_MODULE "httpguard"
#include "rs_alloc.h"
#include "rs_httpcheck.h"
#include "rs_httpguard.h"
#include "rs_log.h"
#include "rs_metrics.h"
#include "rs_mix.h"
#include "rs_sock.h"
#include "rs_time.h"

#define LOG_SLOTS 256            /* addresses whose last line we remember */
#define AUTO_MIN_CONNS 16
#define AUTO_MAX_CONNS (1u << 20)
/* The most a connection's socket is written at once; libevent's 16 KiB
 * made a 14 MB Resource Dump package 900 writev calls and loop turns. */
#define MAX_SINGLE_WRITE (256u * 1024u)

static const char *const event_names[RS_HTTPGUARD_EVENTS] = {
    [RS_HTTPGUARD_EV_PER_ADDR] = "per_address",
    [RS_HTTPGUARD_EV_FULL] = "full",
    [RS_HTTPGUARD_EV_EVICTED] = "evicted",
    [RS_HTTPGUARD_EV_HEAD_TIMEOUT] = "head_timeout",
    [RS_HTTPGUARD_EV_BODY_TIMEOUT] = "body_timeout",
};

/* A client address as the caps count it: IPv4 as ::ffff:a.b.c.d, IPv6
 * with its low 64 bits cleared (one customer's /64 is one client). */
struct addr_key {
    uint8_t b[16];
};

/* The connections of one address; exists while conns > 0. */
struct addr_entry {
    struct addr_entry *next;     /* bucket chain */
    struct addr_key key;
    uint32_t conns;
};

/* When an address got its last log line; a direct-mapped cache, so a
 * collision costs at most an extra line. */
struct log_slot {
    struct addr_key key;
    bool used;
    uint64_t last_ms;
    uint64_t events;             /* since last_ms, not yet reported */
};

/* Where a connection is. NEW -> HEAD (admitted) or CLOSING (refused);
 * HEAD -> BODY (end of head seen) -> BUSY (evhttp handed the request to
 * the handler; the next byte starts a HEAD again); HEAD or BODY ->
 * CLOSING (deadline, eviction). Only HEAD and BODY have a deadline. */
enum conn_phase {
    CONN_NEW,        /* accepted; admission runs on this loop turn */
    CONN_HEAD,       /* deadline: start_ms + head_ms */
    CONN_BODY,       /* deadline: start_ms + body_ms + body_bytes / rate */
    CONN_BUSY,       /* no deadline: the handler's, or evhttp's idle wait */
    CONN_CLOSING,    /* cut by us; evhttp is freeing it */
};

struct conn {
    struct rs_httpguard *g;      /* NULL once the guard is freed */
    struct bufferevent *bev;     /* the filter evhttp holds; valid until
                                    conn_on_free */
    struct bufferevent *sock;    /* its socket bufferevent (the filter's) */
    struct event *timer;         /* admission, then the phase's deadline */
    struct event *push;          /* moves the filter's output (active-only) */
    struct addr_entry *addr;     /* counted there; NULL: not admitted */
    struct addr_key key;
    int fd;                      /* -1 until admitted */
    enum conn_phase phase;
    uint8_t eol;                 /* head scanner: 0 inside a line, 1 at a
                                    line start, 2 line start + CR */
    bool out_owed;               /* evhttp's write callback is due when
                                    the socket's output drains */
    uint64_t start_ms;           /* monotonic: the phase's start */
    uint64_t body_bytes;         /* bytes seen since the head ended */
    TAILQ_ENTRY(conn) link;      /* g->conns */
    TAILQ_ENTRY(conn) hlink;     /* g->heads while phase == CONN_HEAD */
};

TAILQ_HEAD(conn_list, conn);

struct rs_httpguard {
    struct event_base *base;
    struct evhttp *http;
    char name[32];
    struct rs_httpguard_limits lim;   /* resolved: no zero times */
    rs_httpguard_request_cb on_request;
    void *request_arg;
    rs_httpguard_log_cb on_log;
    void *log_ud;
    uint64_t log_ms;
    struct conn_list conns;           /* every live context */
    struct conn_list heads;           /* waiting for a head, oldest first */
    struct conn **by_fd;              /* admitted connections by socket */
    size_t nby_fd;
    struct addr_entry **buckets;
    size_t nbuckets;                  /* a power of two */
    uint64_t hash_key;                /* random: addresses are chosen by
                                         clients, the buckets must not be */
    struct log_slot logs[LOG_SLOTS];
    uint64_t burst_start_ms;
    unsigned burst_lines;
    uint64_t unlogged;
    struct rs_httpguard_stats st;
    struct rs_metrics_counter *m_ev[RS_HTTPGUARD_EVENTS];
};

const char *
rs_httpguard_event_name(enum rs_httpguard_event ev)
{
    return ev < RS_HTTPGUARD_EVENTS ? event_names[ev] : "unknown";
}

static void
arm(struct event *ev, uint64_t ms)
{
    struct timeval tv = rs_time_tv_ms(ms);
    event_add(ev, &tv);
}

/* -------------------------------------------------------------- addresses */

static uint64_t
addr_hash(const struct rs_httpguard *g, const struct addr_key *k)
{
    uint64_t a, b;
    memcpy(&a, k->b, 8);
    memcpy(&b, k->b + 8, 8);
    return rs_mix64(rs_mix64(g->hash_key ^ a) ^ b);
}

static void
addr_key_of(const struct sockaddr_storage *ss, struct addr_key *k)
{
    memset(k, 0, sizeof(*k));
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        k->b[10] = 0xff;
        k->b[11] = 0xff;
        memcpy(k->b + 12, &in->sin_addr, 4);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
        memcpy(k->b, &in6->sin6_addr, 16);
        if (!IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
            memset(k->b + 8, 0, 8);
    }
    /* anything else (a unix socket) is one all-zero "address" */
}

static void
addr_key_text(const struct addr_key *k, char *buf, size_t len)
{
    static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                        0xff, 0xff };
    if (memcmp(k->b, mapped, sizeof(mapped)) == 0) {
        if (inet_ntop(AF_INET, k->b + 12, buf, (socklen_t)len) == NULL)
            snprintf(buf, len, "?");
        return;
    }
    char a[INET6_ADDRSTRLEN];
    if (inet_ntop(AF_INET6, k->b, a, sizeof(a)) == NULL)
        snprintf(buf, len, "?");
    else
        snprintf(buf, len, "%s/64", a);
}

static struct addr_entry **
addr_slot(struct rs_httpguard *g, const struct addr_key *k)
{
    struct addr_entry **p = &g->buckets[addr_hash(g, k) & (g->nbuckets - 1)];
    while (*p != NULL && memcmp(&(*p)->key, k, sizeof(*k)) != 0)
        p = &(*p)->next;
    return p;
}

/* ------------------------------------------------------------------ notes */

/* Count ev for the metrics and stats, and tell the caller about it if the
 * address has had no line for log_ms (and the overall budget allows). */
static void
note(struct rs_httpguard *g, const struct addr_key *k,
     enum rs_httpguard_event ev)
{
    g->st.events[ev]++;
    rs_metrics_counter_inc(g->m_ev[ev]);
    if (g->on_log == NULL)
        return;
    uint64_t now = rs_time_mono_ms();
    struct log_slot *s = &g->logs[addr_hash(g, k) % LOG_SLOTS];
    bool fresh = !s->used || memcmp(&s->key, k, sizeof(*k)) != 0;
    if (fresh) {
        memset(s, 0, sizeof(*s));
        s->key = *k;
        s->used = true;
    }
    s->events++;
    if (!fresh && now - s->last_ms < g->log_ms)
        return;
    if (now - g->burst_start_ms >= g->log_ms) {
        g->burst_start_ms = now;
        g->burst_lines = 0;
    }
    if (g->burst_lines >= RS_HTTPGUARD_LOG_BURST) {
        g->unlogged++;
        return;
    }
    g->burst_lines++;
    char addr[INET6_ADDRSTRLEN + 8];
    addr_key_text(k, addr, sizeof(addr));
    struct rs_httpguard_note n = {
        .listener = g->name,
        .event = ev,
        .addr = addr,
        .events = s->events,
        .unlogged = g->unlogged,
    };
    s->events = 0;
    s->last_ms = now;
    g->unlogged = 0;
    g->on_log(g->log_ud, &n);
}

void
rs_httpguard_log_warn(void *ud, const struct rs_httpguard_note *n)
{
    (void)ud;
    char events[24], unlogged[24];
    bool refused = n->event == RS_HTTPGUARD_EV_PER_ADDR ||
                   n->event == RS_HTTPGUARD_EV_FULL;
    snprintf(events, sizeof(events), "%llu", (unsigned long long)n->events);
    snprintf(unlogged, sizeof(unlogged), "%llu",
             (unsigned long long)n->unlogged);
    rs_log_kv(RS_LOG_WARN, refused ? "http connection refused"
                                   : "http connection closed",
              "listener", n->listener, "client", n->addr, "reason",
              rs_httpguard_event_name(n->event), "client_events", events,
              "others_unlogged", unlogged, NULL);
}

/* ------------------------------------------------------------ connections */

static void
conn_set_phase(struct conn *c, enum conn_phase to)
{
    struct rs_httpguard *g = c->g;
    if (c->phase == CONN_HEAD)
        TAILQ_REMOVE(&g->heads, c, hlink);
    c->phase = to;
    c->start_ms = rs_time_mono_ms();
    if (to == CONN_HEAD) {
        c->eol = 0;
        TAILQ_INSERT_TAIL(&g->heads, c, hlink);
        arm(c->timer, (uint64_t)g->lim.head_ms);
    } else if (to == CONN_BODY) {
        c->body_bytes = 0;
        arm(c->timer, (uint64_t)g->lim.body_ms);
    } else {
        event_del(c->timer);
    }
}

/* evhttp has freed c's connection: bufferevent_free cleared the filter's
 * callbacks (evhttp itself never clears the event callback of a server
 * connection), and libevent finalizes the filter later on the loop, after
 * the callbacks already queued. Its reference count is 0 until then: a
 * bufferevent_trigger* on it would take it to 1 and back to 0, unlinking
 * and finalizing it a second time. */
static bool
conn_dropped(struct conn *c)
{
    bufferevent_event_cb ecb = NULL;
    bufferevent_getcb(c->bev, NULL, NULL, &ecb, NULL);
    return ecb == NULL;
}

/* Give back c's place in the caps (once). */
static void
conn_release(struct conn *c)
{
    struct rs_httpguard *g = c->g;
    if (c->phase == CONN_HEAD)
        TAILQ_REMOVE(&g->heads, c, hlink);
    if (c->addr == NULL)
        return;
    if (--c->addr->conns == 0) {
        struct addr_entry **p = addr_slot(g, &c->key);
        struct addr_entry *e = *p;
        *p = e->next;
        rs_free(e);
        g->st.addrs--;
    }
    c->addr = NULL;
    g->st.open--;
}

/* Refuse or cut c: a best-effort reply written straight to the socket
 * (nothing else is queued before a request is read), then evhttp is told
 * the connection timed out, which makes it free the connection now. */
static void
conn_cut(struct conn *c, enum rs_httpguard_event ev)
{
    static const char r503[] = "HTTP/1.1 503 Service Unavailable\r\n"
                               "Connection: close\r\nRetry-After: 1\r\n"
                               "Content-Length: 0\r\n\r\n";
    static const char r408[] = "HTTP/1.1 408 Request Timeout\r\n"
                               "Connection: close\r\nContent-Length: 0\r\n\r\n";
    bool refused = ev == RS_HTTPGUARD_EV_PER_ADDR || ev == RS_HTTPGUARD_EV_FULL;
    bool dropped = conn_dropped(c);
    /* one evhttp let go of on this turn (the client hung up as its
     * deadline passed, say) is gone already: its place is free, nothing
     * to count or to tell */
    if (!dropped)
        note(c->g, &c->key, ev);
    conn_release(c);
    c->phase = CONN_CLOSING;
    event_del(c->timer);
    if (dropped)
        return;
    if (c->fd >= 0) {
        const char *r = refused ? r503 : r408;
        size_t n = refused ? sizeof(r503) - 1 : sizeof(r408) - 1;
        (void)send(c->fd, r, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    bufferevent_trigger_event(c->bev, BEV_EVENT_READING | BEV_EVENT_TIMEOUT,
                              0);
}

static int
by_fd_set(struct rs_httpguard *g, int fd, struct conn *c)
{
    if ((size_t)fd >= g->nby_fd) {
        size_t n = g->nby_fd > 0 ? g->nby_fd : 64;
        while (n <= (size_t)fd)
            n *= 2;
        struct conn **p = rs_realloc(g->by_fd, n * sizeof(*p));
        if (p == NULL)
            return RS_ENOMEM;
        memset(p + g->nby_fd, 0, (n - g->nby_fd) * sizeof(*p));
        g->by_fd = p;
        g->nby_fd = n;
    }
    g->by_fd[fd] = c;
    return 0;
}

/* Whom to close to make room: the oldest connection waiting for a head
 * whose address holds others too, among the oldest GUARD_EVICT_SCAN;
 * else the oldest of all. A flood from a few addresses then pushes out
 * its own connections, not a client's only one (a health check, a
 * publisher whose head the loop has not read yet). NULL: none waits. */
#define GUARD_EVICT_SCAN 64

static struct conn *
evict_candidate(struct rs_httpguard *g)
{
    struct conn *v;
    unsigned n = 0;

    TAILQ_FOREACH(v, &g->heads, hlink) {
        if (v->addr != NULL && v->addr->conns > 1)
            return v;
        if (++n == GUARD_EVICT_SCAN)
            break;
    }
    return TAILQ_FIRST(&g->heads);
}

/* The new connection's place: its address's cap, then the overall one
 * (making room by closing the oldest connection still waiting for a
 * head), then in. */
static void
conn_admit(struct conn *c)
{
    struct rs_httpguard *g = c->g;
    c->fd = bufferevent_getfd(c->bev);
    if (c->fd < 0) {
        /* evhttp gave up on the connection before setting its socket
         * (out of memory) and left us the bufferevent */
        bufferevent_data_cb rcb;
        bufferevent_getcb(c->bev, &rcb, NULL, NULL, NULL);
        c->phase = CONN_CLOSING;
        if (rcb == NULL)
            bufferevent_free(c->bev);
        return;
    }
    if (conn_dropped(c)) {
        /* evhttp gave up on it after setting the socket, and freed it: it
         * must not count, nor push out a live connection */
        c->phase = CONN_CLOSING;
        return;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    memset(&ss, 0, sizeof(ss));
    if (getpeername(c->fd, (struct sockaddr *)&ss, &sl) != 0)
        ss.ss_family = AF_UNSPEC;
    /* A response leaves in writes shorter than the MSS (64 KiB on
     * loopback); with Nagle each waited for the ACK of the one before,
     * which the client may delay 40 ms: a package of a Resource Dump took
     * 47 ms to arrive instead of 4. Best effort: only speed rides on it. */
    if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6) {
        int one = 1;
        (void)setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    addr_key_of(&ss, &c->key);
    struct addr_entry **p = addr_slot(g, &c->key);
    if (g->lim.max_per_addr > 0 && *p != NULL &&
        (*p)->conns >= (uint64_t)g->lim.max_per_addr) {
        conn_cut(c, RS_HTTPGUARD_EV_PER_ADDR);
        return;
    }
    if (g->st.open >= (uint64_t)g->lim.max_conns) {
        struct conn *victim = evict_candidate(g);
        if (victim == NULL) {
            conn_cut(c, RS_HTTPGUARD_EV_FULL);
            return;
        }
        conn_cut(victim, RS_HTTPGUARD_EV_EVICTED);
        p = addr_slot(g, &c->key);   /* the victim's entry may be gone */
    }
    if (*p == NULL) {
        struct addr_entry *e = rs_calloc(1, sizeof(*e));
        if (e == NULL) {
            conn_cut(c, RS_HTTPGUARD_EV_FULL);
            return;
        }
        e->key = c->key;
        *p = e;
        g->st.addrs++;
    }
    if (by_fd_set(g, c->fd, c) != 0) {
        if ((*p)->conns == 0) {
            struct addr_entry *e = *p;
            *p = e->next;
            rs_free(e);
            g->st.addrs--;
        }
        conn_cut(c, RS_HTTPGUARD_EV_FULL);
        return;
    }
    (*p)->conns++;
    c->addr = *p;
    g->st.open++;
    g->st.accepted++;
    conn_set_phase(c, CONN_HEAD);
}

static void
on_conn_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct conn *c = arg;
    struct rs_httpguard *g = c->g;
    uint64_t now = rs_time_mono_ms(), due;

    switch (c->phase) {
    case CONN_NEW:
        conn_admit(c);
        return;
    case CONN_HEAD:
        due = c->start_ms + (uint64_t)g->lim.head_ms;
        if (now >= due)
            conn_cut(c, RS_HTTPGUARD_EV_HEAD_TIMEOUT);
        else
            arm(c->timer, due - now);
        return;
    case CONN_BODY:
        /* the allowance grows with what arrived: a body must keep up an
         * average of body_rate after the grace */
        due = c->start_ms + (uint64_t)g->lim.body_ms +
              c->body_bytes * 1000 / g->lim.body_rate;
        if (now >= due)
            conn_cut(c, RS_HTTPGUARD_EV_BODY_TIMEOUT);
        else
            arm(c->timer, due - now);
        return;
    case CONN_BUSY:
    case CONN_CLOSING:
        return;
    }
}

/* Feed n new bytes at the front of src to the phase machine: the end of a
 * head is the first empty line (CRLF or bare LF, as evhttp reads lines). */
static void
conn_saw(struct conn *c, struct evbuffer *src, size_t n)
{
    if (c->phase == CONN_BUSY)
        conn_set_phase(c, CONN_HEAD);   /* the next request began */
    if (c->phase == CONN_BODY) {
        c->body_bytes += n;
        return;
    }
    /* NEW cannot see bytes: admission runs on the turn that accepted the
     * socket, before its first read */
    if (c->phase != CONN_HEAD)
        return;
    struct evbuffer_ptr pos;
    evbuffer_ptr_set(src, &pos, 0, EVBUFFER_PTR_SET);
    size_t done = 0;
    while (done < n) {
        struct evbuffer_iovec v;
        if (evbuffer_peek(src, (ev_ssize_t)(n - done), &pos, &v, 1) < 1)
            break;
        size_t len = v.iov_len < n - done ? v.iov_len : n - done;
        const unsigned char *b = v.iov_base;
        for (size_t i = 0; i < len; i++) {
            if (b[i] == '\n') {
                if (c->eol != 0) {
                    conn_set_phase(c, CONN_BODY);
                    c->body_bytes = n - (done + i + 1);
                    return;
                }
                c->eol = 1;
            } else if (b[i] == '\r' && c->eol == 1) {
                c->eol = 2;
            } else {
                c->eol = 0;
            }
        }
        done += len;
        evbuffer_ptr_set(src, &pos, len, EVBUFFER_PTR_ADD);
    }
}

/* The filter's input: every byte evhttp will read passes here first. */
static enum bufferevent_filter_result
conn_filter_in(struct evbuffer *src, struct evbuffer *dst, ev_ssize_t lim,
               enum bufferevent_flush_mode mode, void *arg)
{
    (void)mode;
    struct conn *c = arg;
    size_t n = evbuffer_get_length(src);
    if (lim >= 0 && (size_t)lim < n)
        n = (size_t)lim;
    if (n == 0)
        return BEV_NEED_MORE;
    if (c->g != NULL)
        conn_saw(c, src, n);
    return evbuffer_remove_buffer(src, dst, n) >= 0 ? BEV_OK : BEV_ERROR;
}

/*
 * Output. A filter calls its owner's write callback once the data has moved
 * to the socket bufferevent, not once it is on the wire; evhttp closes a
 * "Connection: close" connection from that callback, and the socket's
 * unsent output would go with it. So the data moves to the socket
 * bufferevent as soon as evhttp has written it, and evhttp's write callback
 * runs when the socket's output has drained (on_sock_out), as with an
 * unfiltered connection.
 *
 * The move runs from c->push, activated when evhttp adds output: later on
 * the same loop turn, so that the pieces of one reply move together, and
 * only if evhttp still holds the connection. evhttp_free (or any free of the
 * connection) shuts the socket down for writing at once, but the socket
 * bufferevent lives and writes until the filter is finalized: what moved
 * after that would be written to a shut socket (EPIPE, and SIGPIPE in a
 * process that does not ignore it).
 *
 * Not evbuffer_defer_callbacks on the filter's output: a pending deferred
 * callback of a bufferevent's buffer holds a reference to the bufferevent,
 * so when evhttp had freed the connection on the same turn, that callback
 * dropped the last one; libevent 2.1 then finalizes the bufferevent from
 * the running callback (event_callback_finalize_many_), whose argument is
 * the buffer, not the bufferevent: a SEGV at the next turn.
 * docs/internals/httpguard.md.
 */
static void
conn_push_out(struct conn *c)
{
    if (c->push != NULL)
        event_active(c->push, EV_TIMEOUT, 1);   /* a no-op while active */
}

static void
on_push(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct conn *c = arg;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    if (evbuffer_get_length(out) == 0 || conn_dropped(c))
        return;
    c->out_owed = true;
    evbuffer_add_buffer(bufferevent_get_output(c->sock), out);
}

static void
on_filter_out(struct evbuffer *buf, const struct evbuffer_cb_info *info,
              void *arg)
{
    (void)buf;
    if (info->n_added > 0)
        conn_push_out(arg);
}

static void
on_sock_out(struct evbuffer *buf, const struct evbuffer_cb_info *info,
            void *arg)
{
    struct conn *c = arg;
    if (info->n_deleted == 0 || evbuffer_get_length(buf) > 0 || !c->out_owed)
        return;
    c->out_owed = false;
    if (conn_dropped(c))
        return;             /* no one to tell, and see conn_dropped */
    /* deferred: we are inside the socket bufferevent's write (the filter's
     * own deferred callback, whose argument is the filter: not a buffer's,
     * see conn_push_out) */
    bufferevent_trigger(c->bev, EV_WRITE, BEV_TRIG_DEFER_CALLBACKS);
}

/* Called by the filter when process_output runs (evhttp adding output or
 * flushing, the socket drained): whatever is there moves as above. Never
 * BEV_OK, which would run evhttp's write callback before the bytes are
 * sent. */
static enum bufferevent_filter_result
conn_filter_out(struct evbuffer *src, struct evbuffer *dst, ev_ssize_t lim,
                enum bufferevent_flush_mode mode, void *arg)
{
    (void)src;
    (void)dst;
    (void)lim;
    (void)mode;
    conn_push_out(arg);
    return BEV_NEED_MORE;
}

/* The filter's free_context: libevent finalizes the filter (evhttp freed
 * the connection a loop turn ago, or event_base_free runs). The socket is
 * still open: it closes when the socket bufferevent is finalized, after. */
static void
conn_on_free(void *arg)
{
    struct conn *c = arg;
    struct rs_httpguard *g = c->g;
    /* the socket bufferevent outlives c by a moment (it is finalized
     * after the filter): nothing of it may call back into c */
    evbuffer_remove_cb(bufferevent_get_output(c->sock), on_sock_out, c);
    evbuffer_remove_cb(bufferevent_get_output(c->bev), on_filter_out, c);
    if (c->push != NULL)
        event_free(c->push);
    if (g != NULL) {
        conn_release(c);
        TAILQ_REMOVE(&g->conns, c, link);
        if (c->fd >= 0 && (size_t)c->fd < g->nby_fd && g->by_fd[c->fd] == c)
            g->by_fd[c->fd] = NULL;
        event_free(c->timer);
    }
    rs_free(c);
}

/* evhttp's bufferevent callback: a new connection is about to be set up on
 * what we return (NULL: evhttp makes its own, unguarded; only when out of
 * memory). Its socket is set right after we return: admission runs from
 * the loop, on this same turn. */
static struct bufferevent *
on_new_bev(struct event_base *base, void *arg)
{
    struct rs_httpguard *g = arg;
    struct conn *c = rs_calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->g = g;
    c->fd = -1;
    c->phase = CONN_NEW;
    c->timer = evtimer_new(base, on_conn_timer, c);
    c->push = event_new(base, -1, 0, on_push, c);
    c->sock = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (c->timer != NULL && c->push != NULL && c->sock != NULL)
        c->bev = bufferevent_filter_new(c->sock, conn_filter_in,
                                        conn_filter_out, BEV_OPT_CLOSE_ON_FREE,
                                        conn_on_free, c);
    if (c->bev == NULL) {
        if (c->sock != NULL)
            bufferevent_free(c->sock);
        if (c->timer != NULL)
            event_free(c->timer);
        if (c->push != NULL)
            event_free(c->push);
        rs_free(c);
        return NULL;
    }
    (void)bufferevent_set_max_single_write(c->sock, MAX_SINGLE_WRITE);
    struct timeval idle = rs_time_tv_ms(g->lim.idle_ms);
    struct evbuffer *fout = bufferevent_get_output(c->bev);
    /* not evbuffer_defer_callbacks(fout): see conn_push_out */
    if (bufferevent_set_timeouts(c->sock, &idle, &idle) != 0 ||
        evbuffer_add_cb(fout, on_filter_out, c) == NULL ||
        evbuffer_add_cb(bufferevent_get_output(c->sock), on_sock_out, c) ==
            NULL) {
        c->g = NULL;               /* conn_on_free frees c and c->push */
        event_free(c->timer);
        bufferevent_free(c->bev);  /* and the socket bufferevent */
        return NULL;
    }
    /* from here on, conn_on_free frees c */
    TAILQ_INSERT_TAIL(&g->conns, c, link);
    event_active(c->timer, EV_TIMEOUT, 1);
    return c->bev;
}

/* evhttp's general callback: a whole request (head and body) is in. */
static void
on_request(struct evhttp_request *req, void *arg)
{
    struct rs_httpguard *g = arg;
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev =
        evcon != NULL ? evhttp_connection_get_bufferevent(evcon) : NULL;
    int fd = bev != NULL ? bufferevent_getfd(bev) : -1;
    if (fd >= 0 && (size_t)fd < g->nby_fd && g->by_fd[fd] != NULL &&
        g->by_fd[fd]->bev == bev) {
        struct conn *c = g->by_fd[fd];
        if (c->phase == CONN_HEAD || c->phase == CONN_BODY)
            conn_set_phase(c, CONN_BUSY);
    }
    /* A body two parsers could delimit differently (two lengths, a
     * transfer coding evhttp does not decode) is refused for every
     * listener here, before any route sees it. */
    if (rs_httpcheck_refuse(req))
        return;
    if (g->on_request != NULL)
        g->on_request(req, g->request_arg);
    else
        evhttp_send_error(req, HTTP_NOTFOUND, NULL);
}

/* ------------------------------------------------------------------ guard */

static double
gauge_open(void *ud)
{
    return (double)((struct rs_httpguard *)ud)->st.open;
}

static int
register_metrics(struct rs_httpguard *g, struct rs_metrics *m,
                 const char *prefix)
{
    char name[160];
    int rc;

    snprintf(name, sizeof(name), "%s_connections", prefix);
    rc = rs_metrics_register_gauge_fn(m, name, "HTTP connections open "
                                      "(admitted by the connection caps).",
                                      gauge_open, g, "listener", g->name,
                                      NULL);
    for (int ev = 0; rc == 0 && ev < RS_HTTPGUARD_EVENTS; ev++) {
        bool refused = ev == RS_HTTPGUARD_EV_PER_ADDR || ev == RS_HTTPGUARD_EV_FULL;
        snprintf(name, sizeof(name), refused ? "%s_refused_total"
                                             : "%s_closed_total", prefix);
        rc = rs_metrics_register_counter(m, &g->m_ev[ev], name,
            refused ? "HTTP connections refused at once: per_address (the "
                      "client's address had --http-max-conns-per-addr), "
                      "full (--http-max-conns, none waiting for a head)."
                    : "HTTP connections closed by the guard: evicted (to "
                      "make room, it waited longest for a head), "
                      "head_timeout (--http-head-time), body_timeout "
                      "(--http-body-time and --http-body-rate).",
            "listener", g->name, "reason", event_names[ev], NULL);
    }
    return rc;
}

static uint64_t
auto_max_conns(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return AUTO_MAX_CONNS;
    uint64_t n = (uint64_t)rl.rlim_cur / 4;
    return n < AUTO_MIN_CONNS ? AUTO_MIN_CONNS
         : n > AUTO_MAX_CONNS ? AUTO_MAX_CONNS : n;
}

struct rs_httpguard *
rs_httpguard_new(const struct rs_httpguard_opts *o, const char **err)
{
    const char *why = "out of memory";
    struct rs_httpguard *g = NULL;

    if (o == NULL || o->base == NULL || o->http == NULL ||
        o->limits.head_ms < 0 || o->limits.body_ms < 0 ||
        o->limits.idle_ms < 0 || o->limits.max_conns < 0 ||
        o->limits.max_per_addr < 0) {
        why = "base, http and non-negative limits are required";
        goto fail;
    }
    g = rs_calloc(1, sizeof(*g));
    if (g == NULL)
        goto fail;
    g->base = o->base;
    g->http = o->http;
    snprintf(g->name, sizeof(g->name), "%s", o->name != NULL ? o->name : "http");
    g->lim = o->limits;
    if (g->lim.head_ms == 0)
        g->lim.head_ms = RS_HTTPGUARD_HEAD_MS;
    if (g->lim.body_ms == 0)
        g->lim.body_ms = RS_HTTPGUARD_BODY_MS;
    if (g->lim.body_rate == 0)
        g->lim.body_rate = RS_HTTPGUARD_BODY_RATE;
    if (g->lim.idle_ms == 0)
        g->lim.idle_ms = RS_HTTPGUARD_IDLE_MS;
    if (g->lim.max_conns == 0)
        g->lim.max_conns = (int64_t)auto_max_conns();
    g->st.max_conns = (uint64_t)g->lim.max_conns;
    g->on_request = o->on_request;
    g->request_arg = o->request_arg;
    g->on_log = o->on_log;
    g->log_ud = o->log_ud;
    g->log_ms = o->log_ms > 0 ? o->log_ms : RS_HTTPGUARD_LOG_MS;
    TAILQ_INIT(&g->conns);
    TAILQ_INIT(&g->heads);
    /* a bucket per two connections at the cap, within reason */
    g->nbuckets = 64;
    while (g->nbuckets < 65536 && g->nbuckets < (size_t)g->lim.max_conns / 2)
        g->nbuckets *= 2;
    g->buckets = rs_calloc(g->nbuckets, sizeof(*g->buckets));
    if (g->buckets == NULL)
        goto fail;
    if (getrandom(&g->hash_key, sizeof(g->hash_key), GRND_NONBLOCK) !=
        (ssize_t)sizeof(g->hash_key))
        g->hash_key = rs_mix64((uint64_t)rs_time_mono_ms() ^ (uint64_t)(uintptr_t)g);
    if (o->metrics != NULL &&
        register_metrics(g, o->metrics, o->metrics_prefix != NULL
                                            ? o->metrics_prefix
                                            : "http") != 0) {
        why = "cannot register the HTTP guard's metrics";
        goto fail;
    }
    evhttp_set_bevcb(o->http, on_new_bev, g);
    evhttp_set_gencb(o->http, on_request, g);
    /* evhttp's own timeout would time the filter, not the socket: the
     * socket bufferevents get idle_ms instead (on_new_bev) */
    evhttp_set_timeout_tv(o->http, NULL);
    return g;
fail:
    if (err != NULL)
        *err = why;
    if (g != NULL)
        rs_free(g->buckets);
    rs_free(g);
    return NULL;
}

int
rs_httpguard_listen(const struct rs_httpguard_opts *o, const char *host,
                    unsigned port, struct rs_httpguard **guard,
                    struct evhttp_bound_socket **bound, int *bound_port,
                    char *err, size_t errsz)
{
    const char *why = NULL;
    const char *h = host != NULL && host[0] != '\0' ? host : "0.0.0.0";

    *bound = NULL;
    *bound_port = -1;
    if ((*guard = rs_httpguard_new(o, &why)) == NULL) {
        snprintf(err, errsz, "%s", why != NULL ? why : "out of memory");
        return RS_ENOMEM;
    }
    errno = 0;
    struct evhttp_bound_socket *bs =
        port <= UINT16_MAX
            ? evhttp_bind_socket_with_handle(o->http, h, (ev_uint16_t)port)
            : NULL;
    int got = bs != NULL ? rs_sock_port(evhttp_bound_socket_get_fd(bs)) : -1;
    if (bs == NULL || got < 0) {
        /* no errno: the name did not resolve (libevent's getaddrinfo,
         * whose words it logs itself) */
        snprintf(err, errsz, "cannot listen on %s:%u: %s", h, port,
                 port > UINT16_MAX ? "no such port"
                 : errno != 0      ? strerror(errno)
                                   : "the host does not resolve to an "
                                     "address of this machine");
        return RS_EIO;
    }
    *bound = bs;
    *bound_port = got;
    return 0;
}

bool
rs_httpguard_host_is_wildcard(const char *host)
{
    return host == NULL || host[0] == '\0' || strcmp(host, "0.0.0.0") == 0 ||
           strcmp(host, "::") == 0;
}

void
rs_httpguard_warn_local_url(const char *host, const char *url,
                            const char *option)
{
    if (rs_httpguard_host_is_wildcard(host))
        rs_log_kv(RS_LOG_WARN, "listening on every address: the URL given "
                  "out names 127.0.0.1, which only clients on this host "
                  "reach", "url", url, "set", option, NULL);
}

int
rs_httpguard_local_url(const char *scheme, const char *host, int port,
                       char *buf, size_t n)
{
    const char *h = rs_httpguard_host_is_wildcard(host) ? "127.0.0.1" : host;
    bool v6 = strchr(h, ':') != NULL;
    int k = snprintf(buf, n, "%s://%s%s%s:%d", scheme, v6 ? "[" : "", h,
                     v6 ? "]" : "", port);
    return k >= 0 && (size_t)k < n ? 0 : -1;
}

void
rs_httpguard_set_handler(struct rs_httpguard *g, rs_httpguard_request_cb cb,
                         void *arg)
{
    g->on_request = cb;
    g->request_arg = arg;
}

void
rs_httpguard_stats(const struct rs_httpguard *g, struct rs_httpguard_stats *out)
{
    *out = g->st;
}

void
rs_httpguard_free(struct rs_httpguard *g)
{
    if (g == NULL)
        return;
    /* contexts of connections libevent has yet to finalize outlive us;
     * their events go now (evhttp let go of them: nothing is left to move,
     * and event_base_free must not find one that their finalizer frees
     * while it walks the active queue) */
    struct conn *c;
    while ((c = TAILQ_FIRST(&g->conns)) != NULL) {
        TAILQ_REMOVE(&g->conns, c, link);
        event_free(c->timer);
        c->timer = NULL;
        event_free(c->push);
        c->push = NULL;
        c->g = NULL;
    }
    for (size_t i = 0; i < g->nbuckets; i++) {
        while (g->buckets[i] != NULL) {
            struct addr_entry *e = g->buckets[i];
            g->buckets[i] = e->next;
            rs_free(e);
        }
    }
    rs_free(g->buckets);
    rs_free(g->by_fd);
    rs_free(g);
}
