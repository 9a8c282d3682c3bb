/*
 * floor_ws.c - the latency floor for bench_hub.sh: a minimal WebSocket
 * broadcast server, one thread, one epoll, no persistence. It accepts what
 * wsload sends rshub (POST /hub with a notification body; GET /channel/NAME
 * upgrades) on one port, and sends every subscriber the frame rshub would:
 * the body with ` xmlns:hub="urn:x-rshub:1" hub:id="ID"` after the root
 * element's name, as one unmasked text frame. Every subscriber gets every
 * publish (one channel). One thread per CPU, each with its own epoll and
 * SO_REUSEPORT listener (the kernel spreads connections); a publish is
 * handed to every thread (a locked list and an eventfd), and each thread
 * writes all frames of a loop turn to a subscriber in one write. What rshub
 * costs beyond this is what it does beyond moving bytes: validation,
 * Redis, its event loops (docs/benchmarks.md, "Hub latency vs the floor").
 */
#define _GNU_SOURCE   /* memmem, accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
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
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define HEAD_MAX 8192               /* request head */
#define BODY_MAX (1024 * 1024)      /* publish body */
#define OUT_MAX (16 * 1024 * 1024)  /* queued bytes per connection: past it, close */
#define CONN_MAX 65536
#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

enum conn_state { C_HEAD, C_BODY, C_WS };

struct conn {
    int fd;
    enum conn_state state;
    bool want_out;          /* EPOLLOUT armed */
    bool dead;              /* closed; freed at the end of the loop turn */
    struct conn *next_dead;
    struct conn *prev, *next;   /* the thread's open connections */
    size_t sub_ix;          /* index in subs[] when C_WS */
    char *in;               /* head, then body (C_HEAD, C_BODY) */
    size_t nin, capin, body_len;
    char *out;              /* bytes the kernel has not taken yet */
    size_t nout, offout, capout;
};

/* A frame on its way to every thread; the last thread to send it frees it. */
struct frame {
    _Atomic int refs;       /* threads that have not sent it yet */
    size_t len;
    char data[];
};

#define THREADS_MAX 16

struct worker {
    pthread_t th;
    int ep, lfd, efd;
    pthread_mutex_t mu;             /* guards q, nq, capq */
    struct frame **q;               /* posted, not yet sent */
    size_t nq, capq;
};

#define QUEUE_MAX 65536             /* frames waiting for one thread */

static struct worker workers[THREADS_MAX + 1];
static unsigned nworkers = 2;       /* event loops with subscribers */
static bool pub_thread;             /* -H: publishes on one more loop */
static _Atomic uint64_t next_id = 1;
static volatile sig_atomic_t stopping;

/* Per thread: its subscribers and closed connections. */
static _Thread_local int ep;
static _Thread_local struct conn **subs;
static _Thread_local size_t nsubs, capsubs;
static _Thread_local struct conn *graveyard;   /* closed this loop turn */
static _Thread_local size_t nconn;
static _Thread_local struct conn *conns;      /* open connections */

static void on_signal(int sig) { (void)sig; stopping = 1; }

/* Closed now, freed after the loop turn: later events of the same
 * epoll_wait batch may still point at it. */
static void
conn_close(struct conn *c)
{
    if (c->dead)
        return;
    if (c->state == C_WS) {
        subs[c->sub_ix] = subs[--nsubs];
        subs[c->sub_ix]->sub_ix = c->sub_ix;
    }
    close(c->fd);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->dead = true;
    c->next_dead = graveyard;
    graveyard = c;
    nconn--;
}

static void
conn_bury(void)
{
    while (graveyard != NULL) {
        struct conn *c = graveyard;
        graveyard = c->next_dead;
        free(c->in);
        free(c->out);
        free(c);
    }
}

static void
conn_arm(struct conn *c, bool out)
{
    if (c->want_out == out)
        return;
    struct epoll_event ev = { .events = EPOLLIN | (out ? EPOLLOUT : 0),
                              .data.ptr = c };
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = out;
}

/* Write what is queued, then p; queue what the kernel leaves. Returns -1
 * when the connection must go (error, or past OUT_MAX). */
static int
conn_send(struct conn *c, const char *p, size_t n)
{
    if (c->nout > c->offout) {
        ssize_t w = write(c->fd, c->out + c->offout, c->nout - c->offout);
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return -1;
        if (w > 0)
            c->offout += (size_t)w;
        if (c->offout == c->nout)
            c->offout = c->nout = 0;
    }
    if (c->nout == 0 && n > 0) {
        ssize_t w = write(c->fd, p, n);
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return -1;
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        }
    }
    if (n > 0) {
        if (c->offout > 0) {
            memmove(c->out, c->out + c->offout, c->nout - c->offout);
            c->nout -= c->offout;
            c->offout = 0;
        }
        if (c->nout + n > OUT_MAX)
            return -1;
        if (c->nout + n > c->capout) {
            size_t cap = c->capout ? c->capout : 4096;
            while (cap < c->nout + n)
                cap *= 2;
            char *np = realloc(c->out, cap);
            if (np == NULL)
                return -1;
            c->out = np;
            c->capout = cap;
        }
        memcpy(c->out + c->nout, p, n);
        c->nout += n;
    }
    conn_arm(c, c->nout > c->offout);
    return 0;
}

static const char *
head_value(const char *head, const char *name)
{
    size_t nl = strlen(name);
    for (const char *l = strstr(head, "\r\n"); l != NULL; l = strstr(l + 2, "\r\n")) {
        if (strncasecmp(l + 2, name, nl) == 0 && l[2 + nl] == ':') {
            const char *v = l + 3 + nl;
            while (*v == ' ')
                v++;
            return v;
        }
    }
    return NULL;
}

static int
on_upgrade(struct conn *c, const char *head)
{
    const char *key = head_value(head, "Sec-WebSocket-Key");
    if (key == NULL)
        return -1;
    size_t kl = strcspn(key, "\r ");
    if (kl > 64)
        return -1;
    char cat[64 + sizeof(WS_GUID)];
    memcpy(cat, key, kl);
    memcpy(cat + kl, WS_GUID, sizeof(WS_GUID));
    unsigned char md[SHA_DIGEST_LENGTH];
    SHA1((const unsigned char *)cat, kl + sizeof(WS_GUID) - 1, md);
    unsigned char acc[4 * ((SHA_DIGEST_LENGTH + 2) / 3) + 1];
    EVP_EncodeBlock(acc, md, SHA_DIGEST_LENGTH);
    char resp[256];
    int n = snprintf(resp, sizeof(resp),
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
                     (const char *)acc);
    if (nsubs == capsubs) {
        size_t cap = capsubs ? capsubs * 2 : 1024;
        struct conn **ns = realloc(subs, cap * sizeof(*ns));
        if (ns == NULL)
            return -1;
        subs = ns;
        capsubs = cap;
    }
    c->state = C_WS;
    c->sub_ix = nsubs;
    subs[nsubs++] = c;
    free(c->in);
    c->in = NULL;
    c->nin = c->capin = 0;
    return conn_send(c, resp, (size_t)n);
}

/* One frame for every subscriber: the body with the hub annotation after
 * the root element's name, as rshub's msg_new builds it. */
static void
broadcast(const char *body, size_t len)
{
    const char *root = body;
    while ((root = memchr(root, '<', len - (size_t)(root - body))) != NULL &&
           root + 1 < body + len && (root[1] == '?' || root[1] == '!'))
        root++;
    size_t at = root == NULL ? 0 : (size_t)(root - body) + 1 +
                strcspn(root + 1, " \t\r\n/>");
    if (at > len)
        at = len;
    char ann[96];
    int an = snprintf(ann, sizeof(ann),
                      " xmlns:hub=\"urn:x-rshub:1\" hub:id=\"%llu-0\"",
                      (unsigned long long)atomic_fetch_add(&next_id, 1));
    size_t pl = len + (size_t)an;
    size_t hl = pl < 126 ? 2 : pl < 65536 ? 4 : 10;
    struct frame *fr = malloc(sizeof(*fr) + hl + pl);
    if (fr == NULL)
        return;
    atomic_init(&fr->refs, (int)nworkers);
    fr->len = hl + pl;
    char *f = fr->data;
    f[0] = (char)0x81;
    if (hl == 2) {
        f[1] = (char)pl;
    } else if (hl == 4) {
        f[1] = 126;
        f[2] = (char)(pl >> 8);
        f[3] = (char)pl;
    } else {
        f[1] = 127;
        for (int i = 0; i < 8; i++)
            f[2 + i] = (char)((uint64_t)pl >> (56 - 8 * i));
    }
    memcpy(f + hl, body, at);
    memcpy(f + hl + at, ann, (size_t)an);
    memcpy(f + hl + at + an, body + at, len - at);
    for (unsigned w = 0; w < nworkers; w++) {
        struct worker *wk = &workers[w];
        pthread_mutex_lock(&wk->mu);
        bool was_empty = wk->nq == 0;
        if (wk->nq == wk->capq) {
            size_t cap = wk->capq ? wk->capq * 2 : 64;
            struct frame **nq = cap <= QUEUE_MAX ? realloc(wk->q, cap * sizeof(*nq)) : NULL;
            if (nq == NULL) {   /* that thread is hopelessly behind: drop */
                pthread_mutex_unlock(&wk->mu);
                if (atomic_fetch_sub(&fr->refs, 1) == 1)
                    free(fr);
                continue;
            }
            wk->q = nq;
            wk->capq = cap;
        }
        wk->q[wk->nq++] = fr;
        pthread_mutex_unlock(&wk->mu);
        if (was_empty) {
            uint64_t one = 1;
            if (write(wk->efd, &one, sizeof(one)) < 0) {
                /* the counter cannot overflow at this rate */
            }
        }
    }
}

static _Thread_local struct frame **mine;    /* worker_drain's spare array */
static _Thread_local size_t capmine;

/* Everything posted to this thread since the last turn: one contiguous
 * batch, one write per subscriber. */
static void
worker_drain(struct worker *wk)
{
    pthread_mutex_lock(&wk->mu);
    struct frame **q = wk->q;
    size_t n = wk->nq, cap = wk->capq;
    wk->q = mine;          /* swap arrays: the lock is held for no copy */
    wk->capq = capmine;
    wk->nq = 0;
    pthread_mutex_unlock(&wk->mu);
    mine = q;
    capmine = cap;
    if (n == 0)
        return;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += q[i]->len;
    char *batch = malloc(total);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (batch != NULL)
            memcpy(batch + off, q[i]->data, q[i]->len);
        off += q[i]->len;
        if (atomic_fetch_sub(&q[i]->refs, 1) == 1)
            free(q[i]);
    }
    if (batch == NULL)
        return;
    for (size_t i = 0; i < nsubs;) {
        struct conn *s = subs[i];
        if (conn_send(s, batch, total) != 0) {
            conn_close(s);   /* swaps the last one into i */
            continue;
        }
        i++;
    }
    free(batch);
}

static int
on_request(struct conn *c)
{
    for (;;) {
        if (c->state == C_HEAD) {
            char *end = c->nin >= 4 ? memmem(c->in, c->nin, "\r\n\r\n", 4) : NULL;
            if (end == NULL)
                return c->nin > HEAD_MAX ? -1 : 0;
            *end = '\0';
            size_t hl = (size_t)(end - c->in) + 4;
            if (strncmp(c->in, "GET ", 4) == 0) {
                if (on_upgrade(c, c->in) != 0)
                    return -1;
                return 0;
            }
            if (strncmp(c->in, "POST ", 5) != 0)
                return -1;
            const char *cl = head_value(c->in, "Content-Length");
            if (cl == NULL)
                return -1;
            c->body_len = strtoul(cl, NULL, 10);
            if (c->body_len > BODY_MAX)
                return -1;
            memmove(c->in, c->in + hl, c->nin - hl);
            c->nin -= hl;
            c->state = C_BODY;
        }
        if (c->nin < c->body_len)
            return 0;
        static const char ok[] = "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n";
        if (conn_send(c, ok, sizeof(ok) - 1) != 0)
            return -1;
        broadcast(c->in, c->body_len);
        memmove(c->in, c->in + c->body_len, c->nin - c->body_len);
        c->nin -= c->body_len;
        c->state = C_HEAD;
    }
}

static int
on_readable(struct conn *c)
{
    if (c->state == C_WS) {
        /* Subscribers have nothing to say but pongs and closes: drop it. */
        char sink[4096];
        ssize_t r = read(c->fd, sink, sizeof(sink));
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            return -1;
        return 0;
    }
    if (c->capin - c->nin < 16384) {
        size_t cap = c->capin ? c->capin * 2 : 32768;
        if (cap > HEAD_MAX + BODY_MAX + 32768)
            return -1;
        char *np = realloc(c->in, cap);
        if (np == NULL)
            return -1;
        c->in = np;
        c->capin = cap;
    }
    ssize_t r = read(c->fd, c->in + c->nin, c->capin - c->nin - 1);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
        return -1;
    if (r < 0)
        return 0;
    c->nin += (size_t)r;
    c->in[c->nin] = '\0';
    return on_request(c);
}

static void *
worker_run(void *arg)
{
    struct worker *wk = arg;
    ep = wk->ep;
    struct epoll_event evs[256];
    int one = 1;
    while (!stopping) {
        int n = epoll_wait(ep, evs, 256, 200);
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (c == NULL) {
                int fd;
                while ((fd = accept4(wk->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    c = nconn < CONN_MAX ? calloc(1, sizeof(*c)) : NULL;
                    if (c == NULL) {
                        close(fd);
                        continue;
                    }
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                    c->fd = fd;
                    c->next = conns;
                    if (conns != NULL)
                        conns->prev = c;
                    conns = c;
                    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
                    nconn++;
                }
                continue;
            }
            if (c == (struct conn *)wk) {   /* the eventfd */
                uint64_t v;
                if (read(wk->efd, &v, sizeof(v)) < 0) {
                    /* EAGAIN: another wake-up already took it */
                }
                continue;
            }
            if (c->dead)
                continue;
            int rc = 0;
            if (evs[i].events & (EPOLLERR | EPOLLHUP))
                rc = -1;
            if (rc == 0 && (evs[i].events & EPOLLOUT))
                rc = conn_send(c, NULL, 0);
            if (rc == 0 && (evs[i].events & EPOLLIN))
                rc = on_readable(c);
            if (rc != 0)
                conn_close(c);
        }
        worker_drain(wk);
        conn_bury();
    }
    while (conns != NULL)
        conn_close(conns);
    conn_bury();
    free(subs);
    worker_drain(wk);   /* frees this thread's share of what is left */
    free(mine);
    return NULL;
}

static int
listener(struct sockaddr_in *sa)
{
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)sa, sizeof(*sa)) != 0 || listen(fd, 4096) != 0)
        return -1;
    socklen_t sl = sizeof(*sa);
    getsockname(fd, (struct sockaddr *)sa, &sl);   /* port 0: the one given */
    return fd;
}

/* A decimal option value up to max; exits on anything else. */
static unsigned long
num_arg(const char *s, unsigned long max)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v > max) {
        fprintf(stderr, "floor_ws: bad number %s (at most %lu)\n", s, max);
        exit(2);
    }
    return v;
}

int
main(int argc, char **argv)
{
    const char *ready = NULL;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = 0,
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int o;
    while ((o = getopt(argc, argv, "p:r:t:Hh")) != -1) {
        switch (o) {
        case 'p': {
            unsigned long v = num_arg(optarg, 65535);
            sa.sin_port = htons((uint16_t)v);
            break;
        }
        case 'r': ready = optarg; break;
        case 't': nworkers = (unsigned)num_arg(optarg, THREADS_MAX); break;
        case 'H': pub_thread = true; break;
        default:
            fprintf(stderr, "usage: floor_ws [-p PORT] [-r READY-FILE] [-t THREADS] [-H]\n"
                    "  listens on 127.0.0.1 (port 0: any); writes the port to READY-FILE;\n"
                    "  THREADS event loops (default 2, at most %d); -H: publishes on a\n"
                    "  loop of their own, on a second port (READY-FILE: WSPORT HTTPPORT)\n",
                    THREADS_MAX);
            return o == 'h' ? 0 : 2;
        }
    }
    if (nworkers < 1 || nworkers > THREADS_MAX) {
        fprintf(stderr, "floor_ws: -t 1..%d\n", THREADS_MAX);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    struct sockaddr_in hsa = sa;
    hsa.sin_port = 0;
    unsigned nloops = nworkers + (pub_thread ? 1 : 0);
    for (unsigned w = 0; w < nloops; w++) {
        struct worker *wk = &workers[w];
        wk->lfd = listener(w < nworkers ? &sa : &hsa);
        wk->ep = epoll_create1(EPOLL_CLOEXEC);
        wk->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (wk->lfd < 0 || wk->ep < 0 || wk->efd < 0) {
            perror("floor_ws: listen");
            return 1;
        }
        pthread_mutex_init(&wk->mu, NULL);
        struct epoll_event lev = { .events = EPOLLIN, .data.ptr = NULL };
        struct epoll_event eev = { .events = EPOLLIN, .data.ptr = wk };
        epoll_ctl(wk->ep, EPOLL_CTL_ADD, wk->lfd, &lev);
        epoll_ctl(wk->ep, EPOLL_CTL_ADD, wk->efd, &eev);
    }
    if (ready != NULL) {
        FILE *f = fopen(ready, "w");
        if (f == NULL || (pub_thread
                          ? fprintf(f, "%u %u\n", ntohs(sa.sin_port), ntohs(hsa.sin_port))
                          : fprintf(f, "%u\n", ntohs(sa.sin_port))) < 0 || fclose(f) != 0) {
            perror("floor_ws: ready file");
            return 1;
        }
    } else {
        printf("%u\n", ntohs(sa.sin_port));
        fflush(stdout);
    }
    for (unsigned w = 0; w < nloops; w++)
        pthread_create(&workers[w].th, NULL, worker_run, &workers[w]);
    for (unsigned w = 0; w < nloops; w++)
        pthread_join(workers[w].th, NULL);
    for (unsigned w = 0; w < nloops; w++) {
        /* a publish posted after a thread's last drain: nobody sends it */
        for (size_t i = 0; i < workers[w].nq; i++)
            if (atomic_fetch_sub(&workers[w].q[i]->refs, 1) == 1)
                free(workers[w].q[i]);
        free(workers[w].q);
        close(workers[w].ep);
        close(workers[w].lfd);
        close(workers[w].efd);
    }
    return 0;
}
