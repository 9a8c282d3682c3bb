/*
 * wsclient.c - WebSocket client connections on a libwebsockets thread of
 * their own (Debian's lws 4.1 has no libevent loop), handed to the main loop
 * as whole messages (wsclient.h). The thread and all that crosses are the
 * seam's (rs_seam.h, one thread): requests to the lws thread, coalesced per
 * connection (marks on its rq item), events to the main loop (each message
 * charged to its connection's flow, which pauses reading when over
 * queue_high), the statistics. The rest is one side's alone, as each field
 * says.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <libwebsockets.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define RS_LOG_MODULE "wsclient"
#include "rs_alloc.h"
#include "rs_log.h"
#include "rs_seam.h"
#include "rs_time.h"
#include "wsclient.h"

#define WSC_MAX_MESSAGE ((size_t)64 << 20)
#define WSC_MAX_MESSAGE_CAP ((size_t)1 << 30)
#define WSC_UA_MAX 256
#define WSC_QUEUE_HIGH ((size_t)8 << 20)
#define WSC_CONNECT_MS 5000u
#define WSC_IDLE_MS 75000u
#define WSC_STOP_GRACE_US (500 * LWS_US_PER_MS)  /* close handshakes at free */
#define WSC_CLOSE_ACK_US (1000 * LWS_US_PER_MS)  /* our close frame's answer */
#define WSC_RX_CHUNK (64 * 1024)   /* most payload bytes lws hands us at once */
#define WSC_SERV_BUF (32 * 1024)   /* lws's per-thread read buffer */
#define WSC_MAX_FDS 256            /* lws's fd table: our sockets, not ulimit */
/* lws 4.1 writes "Host: %s\r\n" and "Origin: %s\r\n" into 128 bytes each and
 * cuts silently; we refuse (Host) or omit (Origin) what would not fit. */
#define WSC_HOST_MAX 119
#define WSC_ORIGIN_MAX 117
#define WSC_PATH_MAX 1024
#define WSC_ADDRS_MAX 16           /* addresses of one name taken in turn */
#define WSC_PREFS 8                /* names whose next address is kept */
#define WSC_PEER_MAX 64            /* numeric IPv6 with a %scope */
#define WSC_THREAD 0               /* the lws thread's end of the seam */

/* Requests to the lws thread, marked on a connection's rq item. */
#define RQ_CONNECT 1u
#define RQ_CLOSE 2u
#define RQ_RESUME 4u

/* Counters at the seam's ends (rs_seam_count). */
enum wsc_count {
    WSC_C_MESSAGES = 0,   /* at WSC_THREAD: whole messages received */
    WSC_C_CONNS,          /* at RS_SEAM_LOOP: connections not yet freed */
};

/*
 * Lifetime of a connection. The main loop allocates it in wsclient_connect
 * and frees it when it handles its CLOSED event. The lws thread pushes
 * CLOSED as its very last act for the connection (conn_finish, which first
 * seals its rq item so that no request queues it again) and never touches
 * it afterwards. Every event of a connection precedes its CLOSED in the
 * FIFO, so no queued event outlives it. wsclient_conn_close only marks it
 * closed for the user: its events are dropped from then on.
 */

enum wsc_ev_type {
    WSC_EV_OPEN = 1,
    WSC_EV_MSG,
    WSC_EV_CLOSED,
};

/* An event for the main loop. OPEN and CLOSED are embedded in their
 * connection; a message is one allocation, this header then len payload
 * bytes and a NUL, grown in place while fragments arrive. */
struct wsc_ev {
    struct rs_seam_item item;
    struct wsclient_conn *c;
    enum wsc_ev_type type;
    size_t len;               /* MSG: payload bytes so far */
    size_t cap;               /* MSG: payload bytes allocated (plus a NUL) */
};

/* lws-thread view of a connection */
enum wsc_lstate {
    L_NEW = 0,    /* connect requested, not started */
    L_CONNECTING, /* wsi exists, not upgraded yet */
    L_OPEN,
    L_CLOSING,    /* close started (ours or the server's) */
    L_DONE,       /* CLOSED pushed: the lws thread is done with it */
};

struct wsclient_conn {
    struct wsclient *w;
    struct wsclient_cbs cbs;
    void *ud;
    /* target, immutable after wsclient_connect; strings point into str[] */
    const char *addr;         /* host to resolve, without brackets */
    const char *host_hdr;     /* Host: host[:port] */
    const char *origin;       /* NULL when too long for lws */
    const char *path;         /* path?query, starts with '/' */
    int port;
    bool tls;

    /* main loop only */
    struct wsclient_conn *m_prev, *m_next;  /* w->conns */
    bool user_closed;         /* wsclient_conn_close ran: no more callbacks */
    bool in_close_cb;         /* on_close is running */

    /* the seam's: requests (RQ_* marks; sealed once CLOSED is pushed),
     * and its MSG bytes not yet handled (paused: reading stopped) */
    struct rs_seam_item rq;
    struct rs_seam_flow flow;

    /* lws thread only (and the main loop after the thread was joined) */
    enum wsc_lstate lstate;
    struct lws *wsi;
    struct wsclient_conn *l_prev, *l_next;  /* w->live: conns with a wsi */
    bool in_connect;          /* inside lws_client_connect_via_info */
    bool destroyed_in_connect;
    struct wsc_ev *rx;        /* message being reassembled, or NULL */
    uint64_t last_rx_us;      /* monotonic: last bytes or pong received */
    bool pinged;              /* our ping is out since last_rx_us */
    bool want_ping;           /* write a ping on the next WRITEABLE */
    bool kill;                /* close on the next TIMER (kill_code) */
    uint16_t kill_code;
    const char *kill_why;     /* static */
    bool have_code;           /* code/reason final; read by main at CLOSED */
    int code;
    char reason[WSCLIENT_REASON_MAX];

    char peer[WSC_PEER_MAX];  /* the numeric address connected to, set
                                 before the lws thread pushes any event */
    unsigned peer_idx, peer_n;  /* its place among the name's addresses */
    bool was_open;
    bool since_now;                /* the 101 said X-Hub-Since: now */

    struct wsc_ev ev_open, ev_closed;
    char str[];               /* addr, host_hdr, origin, path */
};

/* A host name's address to try next (lws thread only): a name that
 * resolves to several (one per hub node behind it) is walked in turn, so
 * a dead node costs one failed connection, not every one after it. */
struct wsc_pref {
    char host[WSC_HOST_MAX + 1];
    int port;
    unsigned next;
    uint64_t used_us;         /* the least recently used one is replaced */
};

struct wsclient {
    struct event_base *base;
    size_t max_message, queue_high;
    uint64_t connect_us, idle_us;
    char *user_agent;
    char *ca_file;
    char *client_cert, *client_key;
    char *auth;               /* "Bearer X" for the upgrade, or NULL */

    struct lws_context *ctx;  /* made and destroyed by the main loop */
    struct rs_seam *seam;     /* the lws thread and all that crosses */

    /* main loop only */
    struct wsclient_conn *conns;
    bool freeing;

    /* lws thread only */
    struct wsclient_conn *live;
    unsigned nlive;
    struct wsc_pref prefs[WSC_PREFS];
    bool stopping;
    lws_sorted_usec_list_t stop_sul;
};

static void
set_err(char *err, size_t errsz, const char *msg)
{
    if (errsz > 0)
        snprintf(err, errsz, "%s", msg);
}

/* Copy a close reason, cut at the protocol's 123 bytes but never inside a
 * UTF-8 sequence. */
static void
reason_copy(char *dst, const char *src, size_t n)
{
    if (n >= WSCLIENT_REASON_MAX) {
        n = WSCLIENT_REASON_MAX - 1;
        while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* ------------------------------------------------------------ URL parsing */

struct wsc_url {
    bool tls;
    bool v6;
    const char *host;
    size_t host_len;
    int port;
    const char *path;         /* up to '#' or the end; may be "" or "?q" */
    size_t path_len;
};

static bool
host_char_ok(unsigned char ch, bool v6)
{
    if (v6)
        return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
               (ch >= 'A' && ch <= 'F') || ch == ':' || ch == '.';
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') ||
           (ch >= 'A' && ch <= 'Z') || ch == '-' || ch == '.' || ch == '_';
}

static int
url_parse(const char *url, struct wsc_url *u)
{
    memset(u, 0, sizeof(*u));
    for (const char *s = url; *s != '\0'; s++)
        if ((unsigned char)*s <= 0x20 || *s == 0x7f)
            return RS_EINVAL;   /* no header injection, no stray spaces */
    const char *p;
    if (strncasecmp(url, "ws://", 5) == 0) {
        p = url + 5;
    } else if (strncasecmp(url, "wss://", 6) == 0) {
        p = url + 6;
        u->tls = true;
    } else {
        return RS_EINVAL;
    }
    size_t alen = strcspn(p, "/?#");
    const char *aend = p + alen;
    if (memchr(p, '@', alen) != NULL)
        return RS_EINVAL;   /* user info: not ours to send anywhere */
    const char *rest;
    if (alen > 0 && p[0] == '[') {
        const char *close = memchr(p, ']', alen);
        if (close == NULL)
            return RS_EINVAL;
        u->v6 = true;
        u->host = p + 1;
        u->host_len = (size_t)(close - p - 1);
        rest = close + 1;
    } else {
        const char *colon = memchr(p, ':', alen);
        u->host = p;
        u->host_len = colon != NULL ? (size_t)(colon - p) : alen;
        rest = p + u->host_len;
    }
    if (u->host_len == 0)
        return RS_EINVAL;
    for (size_t i = 0; i < u->host_len; i++)
        if (!host_char_ok((unsigned char)u->host[i], u->v6))
            return RS_EINVAL;
    u->port = u->tls ? 443 : 80;
    if (rest < aend) {
        if (*rest != ':' || aend - rest < 2 || aend - rest > 6)
            return RS_EINVAL;
        long port = 0;
        for (const char *d = rest + 1; d < aend; d++) {
            if (*d < '0' || *d > '9')
                return RS_EINVAL;
            port = port * 10 + (*d - '0');
        }
        if (port < 1 || port > 65535)
            return RS_EINVAL;
        u->port = (int)port;
    }
    u->path = aend;
    u->path_len = strcspn(aend, "#");
    return 0;
}

/* ---------------------------------------------------------- the seam */

/* Hand an event to the main loop (its wake-up is the seam's). Returns
 * rs_seam_push's 0 or RS_SEAM_PAUSE; ev may be freed from then on. */
static int
to_main(struct wsclient *w, struct wsc_ev *ev, size_t bytes,
        struct rs_seam_flow *flow)
{
    rs_seam_item_init(&ev->item, bytes, flow);
    int rc = rs_seam_push(w->seam, RS_SEAM_LOOP, &ev->item);
    if (rc < 0)   /* only for an item queued twice: a bug, said loudly */
        rs_log(RS_LOG_ERROR, "cannot hand an event to the main loop: %s",
               rs_strerror(rc));
    return rc;
}

/* Ask the lws thread for what bits say about c; false once c is done
 * there (its CLOSED is on its way). */
static bool
to_thread(struct wsclient *w, struct wsclient_conn *c, unsigned bits)
{
    return rs_seam_mark(w->seam, WSC_THREAD, &c->rq, bits) == 0;
}

static struct wsclient_conn *
conn_of_rq(struct rs_seam_item *it)
{
    return (struct wsclient_conn *)(void *)((char *)it -
                                            offsetof(struct wsclient_conn, rq));
}

static struct wsc_ev *
ev_of(struct rs_seam_item *it)
{
    return (struct wsc_ev *)(void *)it;   /* item is the first member */
}

/* ------------------------------------------------------------ lws thread */

static void
live_unlink(struct wsclient *w, struct wsclient_conn *c)
{
    if (c->l_prev != NULL)
        c->l_prev->l_next = c->l_next;
    else if (w->live == c)
        w->live = c->l_next;
    else
        return;   /* not linked */
    if (c->l_next != NULL)
        c->l_next->l_prev = c->l_prev;
    c->l_prev = c->l_next = NULL;
    w->nlive--;
}

static const char *const lstate_names[] = {
    "new", "connecting", "open", "closing", "done",
};

/* The one place the lws-side state changes; it only ever moves forward
 * (connecting may skip open), so a late lws callback cannot reopen a
 * closing connection. */
static void
conn_set_state(struct wsclient_conn *c, enum wsc_lstate to)
{
    if (to <= c->lstate)
        return;
    if (rs_log_enabled(RS_LOG_DEBUG))
        rs_log(RS_LOG_DEBUG, "ws://%s:%d%s: %s -> %s", c->addr, c->port,
               c->path, lstate_names[c->lstate], lstate_names[to]);
    c->lstate = to;
}

static void
set_close(struct wsclient_conn *c, int code, const char *reason)
{
    if (c->have_code)
        return;   /* the first cause wins (a timeout, then the reset) */
    c->have_code = true;
    c->code = code;
    reason_copy(c->reason, reason, strlen(reason));
}

/* Make the lws thread leave its loop. lws_service may have run the timer
 * that decided it just before polling until the next one, so poke it. */
static void
leave_soon(struct wsclient *w)
{
    rs_seam_exit(w->seam, WSC_THREAD);   /* a no-op once joined */
}

/* ------------------------------------------------------- peer addresses */

static struct wsc_pref *
pref_get(struct wsclient *w, const char *host, int port)
{
    struct wsc_pref *lru = &w->prefs[0];
    for (size_t i = 0; i < WSC_PREFS; i++) {
        struct wsc_pref *p = &w->prefs[i];
        if (p->port == port && strcmp(p->host, host) == 0)
            return p;
        if (p->used_us < lru->used_us)
            lru = p;
    }
    memset(lru, 0, sizeof(*lru));
    snprintf(lru->host, sizeof(lru->host), "%s", host);
    lru->port = port;
    return lru;
}

/* Resolve c's host and choose the address to connect to: the name's next
 * one (conn_note_peer). A numeric host is taken as it is. Blocks the lws
 * thread, as lws's own resolving would. 0, or -1 with why set. */
static int
conn_pick_peer(struct wsclient *w, struct wsclient_conn *c, char *why,
               size_t whysz)
{
    unsigned char bin[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, c->addr, bin) == 1 ||
        inet_pton(AF_INET6, c->addr, bin) == 1) {
        snprintf(c->peer, sizeof(c->peer), "%s", c->addr);
        c->peer_idx = 0;
        c->peer_n = 1;
        return 0;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(c->addr, NULL, &hints, &res);
    if (rc != 0) {
        snprintf(why, whysz, "cannot resolve %s: %s", c->addr,
                 rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        return -1;
    }
    char addrs[WSC_ADDRS_MAX][WSC_PEER_MAX];
    unsigned n = 0;
    for (const struct addrinfo *ai = res; ai != NULL && n < WSC_ADDRS_MAX;
         ai = ai->ai_next) {
        if (getnameinfo(ai->ai_addr, ai->ai_addrlen, addrs[n],
                        sizeof(addrs[n]), NULL, 0, NI_NUMERICHOST) != 0)
            continue;
        unsigned k = 0;
        while (k < n && strcmp(addrs[k], addrs[n]) != 0)
            k++;
        if (k == n)
            n++;
    }
    freeaddrinfo(res);
    if (n == 0) {
        snprintf(why, whysz, "cannot resolve %s: no address", c->addr);
        return -1;
    }
    struct wsc_pref *p = pref_get(w, c->addr, c->port);
    p->used_us = rs_time_mono_us();
    c->peer_idx = n > 1 ? p->next % n : 0;
    c->peer_n = n;
    memcpy(c->peer, addrs[c->peer_idx], sizeof(c->peer));   /* both NUL'd */
    return 0;
}

/* c is over: when its address failed (never opened, lost without a close
 * frame, or the server going away) the name's next connection takes the
 * following one; otherwise the same one again. Our own closes say nothing
 * about the address. */
static void
conn_note_peer(struct wsclient *w, const struct wsclient_conn *c)
{
    if (c->peer_n < 2 || c->kill)
        return;
    bool failed = !c->was_open || c->code == WSCLIENT_ABNORMAL ||
                  c->code == LWS_CLOSE_STATUS_GOINGAWAY;
    struct wsc_pref *p = pref_get(w, c->addr, c->port);
    p->used_us = rs_time_mono_us();
    p->next = failed ? (c->peer_idx + 1) % c->peer_n : c->peer_idx;
}

/* The lws thread's last act for c: hand CLOSED to the main loop, which may
 * free c at once; c must not be touched after this returns. */
static void
conn_finish(struct wsclient *w, struct wsclient_conn *c)
{
    if (c->lstate == L_DONE)
        return;
    conn_set_state(c, L_DONE);
    c->wsi = NULL;
    rs_free(c->rx);
    c->rx = NULL;
    live_unlink(w, c);
    set_close(c, WSCLIENT_ABNORMAL, "connection lost");
    conn_note_peer(w, c);
    c->ev_closed.c = c;
    c->ev_closed.type = WSC_EV_CLOSED;
    rs_seam_seal(w->seam, WSC_THREAD, &c->rq);
    (void)to_main(w, &c->ev_closed, 0, NULL);
    /* c may be freed from here on */
    if (w->stopping && w->nlive == 0)
        leave_soon(w);
}

/* Re-enable reading if flow control stopped it. */
static void
conn_unpause(struct wsclient *w, struct wsclient_conn *c)
{
    bool was = rs_seam_flow_resume(w->seam, RS_SEAM_LOOP, &c->flow);
    if (was && c->wsi != NULL) {
        lws_rx_flow_control(c->wsi, 1);
        c->last_rx_us = rs_time_mono_us();   /* the silence was ours */
        c->pinged = false;
    }
}

/* Close c from outside its own callbacks: the TIMER callback does it (an
 * lws callback may return -1; other code may not close a wsi). */
static void
conn_kill(struct wsclient *w, struct wsclient_conn *c, uint16_t code,
          const char *why)
{
    if (c->kill || c->lstate >= L_CLOSING || c->wsi == NULL)
        return;
    c->kill = true;
    c->kill_code = code;
    c->kill_why = why;
    conn_unpause(w, c);   /* so the server's close ack can be read */
    lws_set_timer_usecs(c->wsi, 0);
}

/* Arm the TIMER for the next idle check: the ping point, then the deadline. */
static void
conn_arm_idle(struct wsclient *w, struct wsclient_conn *c, uint64_t now)
{
    uint64_t due = c->last_rx_us + (c->pinged ? w->idle_us : w->idle_us / 3);
    uint64_t wait = due > now ? due - now : 0;
    lws_set_timer_usecs(c->wsi, (lws_usec_t)(wait < 1000 ? 1000 : wait));
}

static void
on_stop_deadline(lws_sorted_usec_list_t *sul)
{
    struct wsclient *w = lws_container_of(sul, struct wsclient, stop_sul);
    leave_soon(w);
}

static void
start_stop(struct wsclient *w)
{
    w->stopping = true;
    for (struct wsclient_conn *c = w->live; c != NULL; c = c->l_next)
        conn_kill(w, c, LWS_CLOSE_STATUS_GOINGAWAY, "client shutting down");
    if (w->nlive == 0)
        leave_soon(w);
    else
        lws_sul_schedule(w->ctx, 0, &w->stop_sul, on_stop_deadline,
                         WSC_STOP_GRACE_US);
}

static void
conn_start(struct wsclient *w, struct wsclient_conn *c)
{
    char why[WSCLIENT_REASON_MAX];
    if (conn_pick_peer(w, c, why, sizeof(why)) != 0) {
        set_close(c, WSCLIENT_ABNORMAL, why);
        conn_finish(w, c);
        return;
    }
    struct lws_client_connect_info i;
    memset(&i, 0, sizeof(i));
    i.context = w->ctx;
    i.address = c->peer;      /* Host, SNI and the certificate: the name */
    i.port = c->port;
    i.path = c->path;
    i.host = c->host_hdr;
    i.origin = c->origin;
    i.ssl_connection = c->tls ? LCCSCF_USE_SSL : 0;
    i.alpn = "http/1.1";   /* a WebSocket upgrade is HTTP/1.1, never h2 */
    i.userdata = c;
    i.pwsi = &c->wsi;

    conn_set_state(c, L_CONNECTING);
    c->l_prev = NULL;
    c->l_next = w->live;
    if (w->live != NULL)
        w->live->l_prev = c;
    w->live = c;
    w->nlive++;
    c->in_connect = true;
    struct lws *wsi = lws_client_connect_via_info(&i);
    c->in_connect = false;
    if (wsi == NULL || c->destroyed_in_connect) {
        /* lws reports failures inside the call by the NULL alone (its
         * CONNECTION_ERROR is suppressed); the wsi, if any, is gone */
        set_close(c, WSCLIENT_ABNORMAL, "connect failed");
        conn_finish(w, c);
        return;
    }
    c->wsi = wsi;
    lws_set_timer_usecs(wsi, (lws_usec_t)w->connect_us);
}

/* LWS_CALLBACK_EVENT_WAIT_CANCELLED: take the main loop's requests. A
 * connection is popped and its flags cleared under the lock; it cannot go
 * away meanwhile, since only this thread finishes connections. */
static void
take_requests(struct wsclient *w)
{
    if (!rs_seam_running(w->seam, WSC_THREAD))
        return;   /* leaving, or lws_context_destroy: main sweeps the rest */
    for (;;) {
        unsigned bits;
        bool stop;
        struct rs_seam_item *it = rs_seam_pop(w->seam, WSC_THREAD, &bits, &stop);
        if (stop && !w->stopping)
            start_stop(w);
        if (it == NULL)
            break;
        struct wsclient_conn *c = conn_of_rq(it);
        bool connect = (bits & RQ_CONNECT) != 0;
        bool close = (bits & RQ_CLOSE) != 0;
        bool resume = (bits & RQ_RESUME) != 0;
        if (c->lstate == L_NEW) {
            if (close || w->stopping || !connect) {
                set_close(c, WSCLIENT_ABNORMAL, "closed before connecting");
                conn_finish(w, c);
            } else {
                conn_start(w, c);
            }
            continue;   /* c may be gone: not touched again */
        }
        if (close)
            conn_kill(w, c, LWS_CLOSE_STATUS_NORMAL, "");
        if (resume)
            conn_unpause(w, c);
    }
}

/* We refuse the connection (1009, 1011): drop what was gathered and close
 * from the TIMER. Never by returning -1 from CLIENT_RECEIVE: lws 4.1 then
 * skips resetting its rx buffer, and the bytes it goes on reading while it
 * waits for the close ack overflow that buffer. */
static void
conn_fail(struct wsclient *w, struct wsclient_conn *c, int code,
          const char *why)
{
    rs_free(c->rx);
    c->rx = NULL;
    set_close(c, code, why);
    conn_kill(w, c, (uint16_t)code, why);
}

/* Payload from lws: reassemble, hand whole messages to the main loop.
 * Always returns 0 (see conn_fail). */
static int
on_receive(struct wsclient *w, struct wsclient_conn *c, struct lws *wsi,
           const char *in, size_t len)
{
    if (c->lstate != L_OPEN || c->kill)
        return 0;
    c->last_rx_us = rs_time_mono_us();
    c->pinged = false;

    size_t remaining = lws_remaining_packet_payload(wsi);
    if (lws_is_first_fragment(wsi) && c->rx != NULL) {
        rs_free(c->rx);   /* lws would have refused this: be safe anyway */
        c->rx = NULL;
    }
    size_t have = c->rx != NULL ? c->rx->len : 0;
    /* The frame header announced `remaining` more: refuse a message that
     * cannot fit before buffering any of it. */
    if (remaining > w->max_message || len > w->max_message - have ||
        remaining > w->max_message - have - len) {
        conn_fail(w, c, WSCLIENT_TOO_BIG, "message too big");
        return 0;
    }
    size_t need = have + len + remaining;
    if (c->rx == NULL || need > c->rx->cap) {
        /* exact for a message in one frame (the hub's case); doubling
         * across fragments, whose total we cannot know */
        size_t cap = need;
        if (c->rx != NULL) {
            size_t dbl = c->rx->cap > w->max_message / 2 ? w->max_message
                                                          : c->rx->cap * 2;
            if (dbl > cap)
                cap = dbl;
        }
        struct wsc_ev *ev = rs_realloc(c->rx, sizeof(*ev) + cap + 1);
        if (ev == NULL) {
            conn_fail(w, c, WSCLIENT_INTERNAL, "out of memory");
            return 0;
        }
        if (c->rx == NULL) {
            ev->c = c;
            ev->type = WSC_EV_MSG;
            ev->len = 0;
        }
        ev->cap = cap;
        c->rx = ev;
    }
    char *data = (char *)(c->rx + 1);
    memcpy(data + c->rx->len, in, len);
    c->rx->len += len;
    if (!lws_is_final_fragment(wsi))
        return 0;

    struct wsc_ev *ev = c->rx;
    c->rx = NULL;
    data[ev->len] = '\0';
    rs_seam_count(w->seam, WSC_THREAD, WSC_C_MESSAGES, 1);
    if (to_main(w, ev, ev->len, &c->flow) == RS_SEAM_PAUSE)
        lws_rx_flow_control(wsi, 0);   /* over queue_high: until resumed */
    return 0;
}

static int
on_timer(struct wsclient *w, struct wsclient_conn *c)
{
    if (c->kill) {
        /* the second time: the server did not answer our close frame in
         * time (lws would wait 5 s); -1 now hangs up */
        if (c->lstate == L_CLOSING)
            return -1;
        if (c->lstate == L_OPEN)
            lws_close_reason(c->wsi, (enum lws_close_status)c->kill_code,
                             (unsigned char *)(uintptr_t)c->kill_why,
                             strlen(c->kill_why));
        set_close(c, WSCLIENT_ABNORMAL, "closed by the client");
        conn_set_state(c, L_CLOSING);
        lws_set_timer_usecs(c->wsi, WSC_CLOSE_ACK_US);
        return -1;   /* lws sends the close frame and awaits the ack */
    }
    if (c->lstate == L_CONNECTING) {
        set_close(c, WSCLIENT_ABNORMAL, "connect timeout");
        conn_set_state(c, L_CLOSING);
        return -1;
    }
    if (c->lstate != L_OPEN)
        return 0;
    uint64_t now = rs_time_mono_us();
    if (rs_seam_flow_paused(w->seam, RS_SEAM_LOOP, &c->flow)) {
        /* we stopped reading: silence proves nothing; look again later */
        lws_set_timer_usecs(c->wsi, (lws_usec_t)w->idle_us);
        return 0;
    }
    if (now - c->last_rx_us >= w->idle_us) {
        /* no close frame: a dead peer would not answer it anyway */
        set_close(c, WSCLIENT_ABNORMAL, "idle timeout");
        conn_set_state(c, L_CLOSING);
        return -1;
    }
    if (!c->pinged && now - c->last_rx_us >= w->idle_us / 3) {
        c->pinged = true;
        c->want_ping = true;
        lws_callback_on_writable(c->wsi);
    }
    conn_arm_idle(w, c, now);
    return 0;
}

static int
on_writeable(struct wsclient_conn *c)
{
    if (!c->want_ping || c->lstate != L_OPEN)
        return 0;   /* lws also calls after it sent a pong, or to drain */
    c->want_ping = false;
    unsigned char buf[LWS_PRE + 1] = { 0 };
    return lws_write(c->wsi, buf + LWS_PRE, 0, LWS_WRITE_PING) < 0 ? -1 : 0;
}

static void
on_established(struct wsclient *w, struct wsclient_conn *c)
{
    if (c->lstate != L_CONNECTING)
        return;
    conn_set_state(c, L_OPEN);
    c->was_open = true;
    c->last_rx_us = rs_time_mono_us();
    c->ev_open.c = c;
    c->ev_open.type = WSC_EV_OPEN;
    (void)to_main(w, &c->ev_open, 0, NULL);
    if (!c->kill)   /* else its TIMER is already due: keep that */
        conn_arm_idle(w, c, c->last_rx_us);
}

static int
on_append_headers(struct wsclient *w, struct lws *wsi, void *in, size_t len)
{
    unsigned char **p = in;
    unsigned char *end = *p + len;
    if (lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_USER_AGENT,
                                     (unsigned char *)w->user_agent,
                                     (int)strlen(w->user_agent), p, end))
        return -1;
    if (w->auth != NULL &&
        lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION,
                                     (unsigned char *)w->auth,
                                     (int)strlen(w->auth), p, end))
        return -1;
    return 0;
}

static int
wsc_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
             void *in, size_t len)
{
    struct lws_context *ctx = lws_get_context(wsi);
    struct wsclient *w = ctx != NULL ? lws_context_user(ctx) : NULL;
    struct wsclient_conn *c = user;   /* ours for every client wsi */

    if (w == NULL)
        return 0;
    if (reason == LWS_CALLBACK_EVENT_WAIT_CANCELLED) {
        take_requests(w);
        return 0;
    }
    if (c == NULL || c->lstate == L_DONE)
        return 0;   /* the context's own wsi (its wake pipe) */
    switch (reason) {
    case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER:
        return on_append_headers(w, wsi, in, len);
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
        char why[WSCLIENT_REASON_MAX];
        /* An upgrade refused for its credential (a hub's read access: 401,
         * 403) is told as that status: retrying at once cannot help, so
         * the caller backs off differently from a network failure. lws
         * says 401 in its text and keeps the status until the wsi goes. */
        static const char unauth[] = "HS: ws upgrade unauthorized";
        unsigned st = lws_http_client_http_response(wsi);
        if (st == 0 && in != NULL && len == sizeof(unauth) - 1 &&
            memcmp(in, unauth, len) == 0)
            st = WSCLIENT_UNAUTHORIZED;
        if (st == WSCLIENT_UNAUTHORIZED || st == WSCLIENT_FORBIDDEN) {
            snprintf(why, sizeof(why), "upgrade refused: HTTP %u", st);
            set_close(c, (int)st, why);
        } else {
            snprintf(why, sizeof(why), "connect failed: %.*s",
                     in != NULL ? (int)strnlen(in, len) : 7,
                     in != NULL ? (const char *)in : "unknown");
            set_close(c, WSCLIENT_ABNORMAL, why);
        }
        conn_set_state(c, L_CLOSING);
        return 0;
    }
    case LWS_CALLBACK_CLIENT_FILTER_PRE_ESTABLISH: {
        /* read while the response's headers are still held */
        char v[16];
        c->since_now = lws_hdr_custom_length(wsi, "x-hub-since:", 12) > 0 &&
                       lws_hdr_custom_copy(wsi, v, sizeof(v), "x-hub-since:",
                                           12) > 0 &&
                       strcmp(v, "now") == 0;
        return 0;
    }
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        on_established(w, c);
        return 0;
    case LWS_CALLBACK_CLIENT_RECEIVE:
        return on_receive(w, c, wsi, in, len);
    case LWS_CALLBACK_CLIENT_RECEIVE_PONG:
        c->last_rx_us = rs_time_mono_us();
        c->pinged = false;
        return 0;
    case LWS_CALLBACK_CLIENT_WRITEABLE:
        return on_writeable(c);
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        if (len >= 2) {
            const unsigned char *b = in;
            char why[WSCLIENT_REASON_MAX];
            reason_copy(why, (const char *)b + 2, len - 2);
            set_close(c, (b[0] << 8) | b[1], why);
        } else {
            set_close(c, WSCLIENT_NO_STATUS, "");
        }
        conn_set_state(c, L_CLOSING);
        return 0;   /* lws answers the close frame */
    case LWS_CALLBACK_TIMER:
        return on_timer(w, c);
    case LWS_CALLBACK_WSI_DESTROY:
        if (c->in_connect)
            c->destroyed_in_connect = true;   /* conn_start finishes it */
        else
            conn_finish(w, c);
        return 0;
    default:
        return 0;
    }
}

static const struct lws_protocols wsc_protocols[] = {
    {
        .name = "rssub-wsclient",
        .callback = wsc_callback,
        .per_session_data_size = 0,   /* user data is our conn */
        .rx_buffer_size = WSC_RX_CHUNK,
    },
    { .name = NULL },
};

static void
on_lws_log(int level, const char *line)
{
    /* Without a ca_file lws also tries a CA directory compiled in as a
     * relative path and complains; the system store is loaded anyway. */
    if (strstr(line, "LWS_OPENSSL_CLIENT_CERTS") != NULL)
        return;
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == ' '))
        n--;
    rs_log(level == LLL_ERR ? RS_LOG_ERROR : RS_LOG_WARN, "lws: %.*s", (int)n,
           line);
}

/* ------------------------------------------------------------- main loop */

/* Main: a message was handled or dropped; resume its reading at half
 * (refused once c is done on the lws thread). */
static void
msg_done(struct wsclient *w, struct wsclient_conn *c, struct wsc_ev *ev)
{
    if (rs_seam_done(w->seam, RS_SEAM_LOOP, &ev->item) && !c->user_closed)
        (void)to_thread(w, c, RQ_RESUME);
}

static void
conn_release(struct wsclient *w, struct wsclient_conn *c)
{
    if (c->m_prev != NULL)
        c->m_prev->m_next = c->m_next;
    else
        w->conns = c->m_next;
    if (c->m_next != NULL)
        c->m_next->m_prev = c->m_prev;
    rs_seam_count(w->seam, RS_SEAM_LOOP, WSC_C_CONNS, -1);
    rs_free(c);
}

/* Deliver the events taken, oldest first; `cancelling` (wsclient_free)
 * drops all but CLOSED, reported as WSCLIENT_CANCELLED. */
static void
dispatch(struct wsclient *w, struct rs_seam_item *list, bool cancelling)
{
    struct wsc_ev *ev = list != NULL ? ev_of(list) : NULL;
    while (ev != NULL) {
        struct wsc_ev *next = ev->item.next != NULL ? ev_of(ev->item.next) : NULL;
        struct wsclient_conn *c = ev->c;
        switch (ev->type) {
        case WSC_EV_OPEN:
            if (!c->user_closed && !cancelling && c->cbs.on_open != NULL)
                c->cbs.on_open(c->ud, c);
            break;
        case WSC_EV_MSG:
            if (!c->user_closed && !cancelling && c->cbs.on_message != NULL)
                c->cbs.on_message(c->ud, c, (const char *)(ev + 1), ev->len);
            msg_done(w, c, ev);
            rs_free(ev);
            break;
        case WSC_EV_CLOSED:
            if (!c->user_closed && c->cbs.on_close != NULL) {
                c->in_close_cb = true;
                if (cancelling)
                    c->cbs.on_close(c->ud, c, WSCLIENT_CANCELLED,
                                    "client shutting down");
                else
                    c->cbs.on_close(c->ud, c, c->code, c->reason);
            }
            conn_release(w, c);
            break;
        }
        ev = next;
    }
}

/* The seam's loop end: the lws thread's events. */
static void
on_seam_loop(void *ud, struct rs_seam_item *list)
{
    dispatch(ud, list, false);
}

/* Nothing is left queued when the seam is freed (wsclient_free dispatches
 * first); a message would be ours to free, the rest live in their conn. */
static void
on_seam_drop(void *ud, struct rs_seam_item *it)
{
    (void)ud;
    struct wsc_ev *ev = ev_of(it);
    if (ev->type == WSC_EV_MSG)
        rs_free(ev);
}

/* ------------------------------------------------------------------ API */

struct wsclient *
wsclient_new(const struct wsclient_opts *o, char *err, size_t errsz)
{
    if (o == NULL || o->base == NULL) {
        set_err(err, errsz, "wsclient: an event base is required");
        return NULL;
    }
    if (o->user_agent != NULL && (strpbrk(o->user_agent, "\r\n") != NULL ||
                                  strlen(o->user_agent) > WSC_UA_MAX)) {
        set_err(err, errsz, "wsclient: user_agent holds a line break or is "
                            "over 256 bytes");
        return NULL;
    }
    if (o->max_message > WSC_MAX_MESSAGE_CAP) {
        set_err(err, errsz, "wsclient: max_message over 1 GiB");
        return NULL;
    }
    if (o->ca_file != NULL && access(o->ca_file, R_OK) != 0) {
        set_err(err, errsz, "wsclient: cannot read ca_file");
        return NULL;
    }
    if ((o->client_cert != NULL && access(o->client_cert, R_OK) != 0) ||
        (o->client_key != NULL && access(o->client_key, R_OK) != 0)) {
        set_err(err, errsz, "wsclient: cannot read client_cert or key");
        return NULL;
    }
    if (o->client_key != NULL && o->client_cert == NULL) {
        set_err(err, errsz, "wsclient: client_key without client_cert");
        return NULL;
    }
    if (o->bearer != NULL &&
        (o->bearer[0] == '\0' || strlen(o->bearer) > 4096 ||
         strpbrk(o->bearer, " \t\r\n") != NULL)) {
        set_err(err, errsz, "wsclient: bad bearer token");
        return NULL;
    }
    struct wsclient *w = rs_calloc(1, sizeof(*w));
    if (w == NULL) {
        set_err(err, errsz, "wsclient: out of memory");
        return NULL;
    }
    w->base = o->base;
    w->max_message = o->max_message ? o->max_message : WSC_MAX_MESSAGE;
    w->queue_high = o->queue_high ? o->queue_high : WSC_QUEUE_HIGH;
    w->connect_us = (uint64_t)(o->connect_timeout_ms ? o->connect_timeout_ms
                                                     : WSC_CONNECT_MS) * 1000u;
    w->idle_us = (uint64_t)(o->idle_timeout_ms ? o->idle_timeout_ms
                                               : WSC_IDLE_MS) * 1000u;
    set_err(err, errsz, "wsclient: out of memory");
    w->user_agent = rs_strdup(o->user_agent != NULL ? o->user_agent
                                                    : "rssub/" RS_VERSION);
    if (w->user_agent == NULL)
        goto fail;
    if (o->ca_file != NULL && (w->ca_file = rs_strdup(o->ca_file)) == NULL)
        goto fail;
    if (o->client_cert != NULL &&
        (w->client_cert = rs_strdup(o->client_cert)) == NULL)
        goto fail;
    if (o->client_key != NULL &&
        (w->client_key = rs_strdup(o->client_key)) == NULL)
        goto fail;
    if (o->bearer != NULL) {
        size_t n = strlen(o->bearer) + sizeof("Bearer ");
        if ((w->auth = rs_malloc(n)) == NULL)
            goto fail;
        snprintf(w->auth, n, "Bearer %s", o->bearer);
    }
    struct rs_seam_opts so = {
        .base = o->base,
        .threads = 1,
        .on_loop = on_seam_loop,
        .on_drop = on_seam_drop,
        .ud = w,
        .name = "wsclient",
    };
    int rc;
    w->seam = rs_seam_new(&so, &rc);
    if (w->seam == NULL) {
        if (rc == RS_EIO)
            set_err(err, errsz, "wsclient: cannot create an eventfd");
        goto fail;
    }

    lws_set_log_level(LLL_ERR | LLL_WARN, on_lws_log);
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = wsc_protocols;
    info.user = w;
    info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT |
                   LWS_SERVER_OPTION_JUST_USE_RAW_ORIGIN;
    info.client_ssl_ca_filepath = w->ca_file;
    info.client_ssl_cert_filepath = w->client_cert;
    info.client_ssl_private_key_filepath =
        w->client_key != NULL ? w->client_key : w->client_cert;
    info.pt_serv_buf_size = WSC_SERV_BUF;
    info.fd_limit_per_thread = WSC_MAX_FDS;
    info.count_threads = 1;
    w->ctx = lws_create_context(&info);
    if (w->ctx == NULL) {
        set_err(err, errsz, "wsclient: cannot create a libwebsockets context");
        goto fail;
    }
    if (rs_seam_start(w->seam, WSC_THREAD, w->ctx) != 0) {
        set_err(err, errsz, "wsclient: cannot start the service thread");
        goto fail;
    }
    set_err(err, errsz, "");
    return w;
fail:
    wsclient_free(w);
    return NULL;
}

void
wsclient_free(struct wsclient *w)
{
    if (w == NULL)
        return;
    w->freeing = true;
    if (w->seam != NULL) {
        /* the thread closes its connections and leaves by itself (at
         * most WSC_STOP_GRACE_US later) */
        rs_seam_stop(w->seam, WSC_THREAD);
        rs_seam_join(w->seam, -1);
    }
    if (w->ctx != NULL) {
        lws_sul_cancel(&w->stop_sul);
        /* closes what is left; WSI_DESTROY finishes those conns here */
        lws_context_destroy(w->ctx);
        w->ctx = NULL;
    }
    /* never started, or never connected: finish them as the thread would */
    for (struct wsclient_conn *c = w->conns; c != NULL; c = c->m_next)
        conn_finish(w, c);
    if (w->seam != NULL) {
        dispatch(w, rs_seam_take(w->seam, RS_SEAM_LOOP, NULL), true);
        rs_seam_free(w->seam);
    }
    rs_free(w->user_agent);
    rs_free(w->ca_file);
    rs_free(w->client_cert);
    rs_free(w->client_key);
    if (w->auth != NULL) {
        explicit_bzero(w->auth, strlen(w->auth));
        rs_free(w->auth);
    }
    rs_free(w);
}

int
wsclient_connect(struct wsclient *w, const char *url,
                 const struct wsclient_cbs *cbs, void *ud,
                 struct wsclient_conn **out)
{
    if (out != NULL)
        *out = NULL;
    if (w == NULL || url == NULL)
        return RS_EINVAL;
    if (w->freeing)
        return RS_ESTATE;
    struct wsc_url u;
    int rc = url_parse(url, &u);
    if (rc != 0)
        return rc;
    size_t path_len = u.path_len + (u.path_len == 0 || u.path[0] != '/');
    if (path_len > WSC_PATH_MAX)
        return RS_EINVAL;
    char port[8] = "";
    if (u.port != (u.tls ? 443 : 80))
        snprintf(port, sizeof(port), ":%d", u.port);
    size_t host_len = u.host_len + (u.v6 ? 2 : 0) + strlen(port);
    if (host_len > WSC_HOST_MAX)
        return RS_EINVAL;
    const char *scheme = u.tls ? "https://" : "http://";
    size_t origin_len = strlen(scheme) + host_len;
    size_t total = (u.host_len + 1) + (host_len + 1) + (origin_len + 1) +
                   (path_len + 1);
    struct wsclient_conn *c = rs_calloc(1, sizeof(*c) + total);
    if (c == NULL)
        return RS_ENOMEM;
    c->w = w;
    if (cbs != NULL)
        c->cbs = *cbs;
    c->ud = ud;
    c->port = u.port;
    c->tls = u.tls;
    char *s = c->str;
    c->addr = s;
    s += snprintf(s, u.host_len + 1, "%.*s", (int)u.host_len, u.host) + 1;
    c->host_hdr = s;
    s += snprintf(s, host_len + 1, "%s%.*s%s%s", u.v6 ? "[" : "",
                  (int)u.host_len, u.host, u.v6 ? "]" : "", port) + 1;
    if (origin_len <= WSC_ORIGIN_MAX) {
        c->origin = s;
        snprintf(s, origin_len + 1, "%s%s", scheme, c->host_hdr);
    }
    s += origin_len + 1;
    c->path = s;
    snprintf(s, path_len + 1, "%s%.*s", path_len > u.path_len ? "/" : "",
             (int)u.path_len, u.path);

    c->m_next = w->conns;
    if (w->conns != NULL)
        w->conns->m_prev = c;
    w->conns = c;
    rs_seam_count(w->seam, RS_SEAM_LOOP, WSC_C_CONNS, 1);
    rs_seam_flow_init(&c->flow, w->queue_high);
    (void)to_thread(w, c, RQ_CONNECT);   /* a fresh item: never refused */
    if (out != NULL)
        *out = c;
    return 0;
}

void
wsclient_conn_close(struct wsclient_conn *c)
{
    if (c == NULL || c->user_closed || c->in_close_cb)
        return;
    c->user_closed = true;
    (void)to_thread(c->w, c, RQ_CLOSE);   /* refused: its CLOSED is coming */
}

const char *
wsclient_conn_peer(const struct wsclient_conn *c)
{
    return c != NULL && c->peer[0] != '\0' ? c->peer : NULL;
}

bool
wsclient_conn_since_now(const struct wsclient_conn *c)
{
    return c != NULL && c->since_now;
}

void
wsclient_get_stats(struct wsclient *w, struct wsclient_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (w == NULL)
        return;
    struct rs_seam_stats st;
    rs_seam_stats(w->seam, RS_SEAM_LOOP, &st);
    out->queued = st.bytes;
    out->queued_peak = st.bytes_peak;
    out->pauses = st.pauses;
    out->messages = rs_seam_counter(w->seam, WSC_THREAD, WSC_C_MESSAGES);
    out->conns = (unsigned)rs_seam_counter(w->seam, RS_SEAM_LOOP, WSC_C_CONNS);
}
