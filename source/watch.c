/*
 * watch.c - inotify watches of the tree and the settling of changed paths
 * (see watch.h). Layers: the drain thread (the inotify descriptor -> a
 * queue of raw event chunks), two small hash tables (watch descriptor ->
 * path, path -> pending entry), the pending lists and their timer, event
 * decoding, and the loop callbacks. The thread <-> loop seam is the queue,
 * its mutex and one eventfd.
 *
 * Why a thread: the kernel holds at most fs.inotify.max_queued_events
 * (16,384 by default) per descriptor, about 6,000 changes. At 10,000
 * changes/s any stall of the loop longer than half a second (a large
 * batch's transaction, a burst of GETs) lost events and cost a rescan of
 * the whole tree, which made the next stall longer. The thread does
 * nothing but read, so the kernel's queue stays near empty; the events
 * wait in memory instead, bounded by max_queued.
 */
#include "watch.h"

#include <errno.h>
#include <event2/event.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include "rs_alloc.h"
#include "rs_daemon.h"
#include "rs_fnv.h"
#include "rs_time.h"

#define WATCH_READ_BUF (64 * 1024)
#define WATCH_COALESCE_US 2000        /* default coalesce_us */
#define WATCH_PAUSE_US 1000           /* drain thread's pause when busy, */
#define WATCH_BUSY_WAKES 8            /* woken more often than this */
#define WATCH_BUSY_US 10000           /* within this time */
#define WATCH_QUEUE_MAX (64u * 1024 * 1024)   /* default max_queued: ~1M
                                                 events */

/* One read() of the inotify descriptor, as the kernel gave it. */
struct chunk {
    struct chunk *next;
    size_t len;
    char data[];
};

/* ------------------------------------------------------------- tables */

struct wdent {
    int wd;
    char *path;
    struct wdent *hnext;
};

struct pend {
    char *path;
    uint64_t hash;
    int64_t deadline_us;       /* monotonic; meaningful while settling */
    bool ready;
    struct pend *hnext;        /* bucket chain */
    struct pend *prev, *next;  /* the settling or the ready list */
};

struct plist {
    struct pend *head, *tail;
};

struct watch {
    struct watch_opts o;
    int fd;                    /* inotify; read by the drain thread only */
    int root_wd;
    uint32_t mask;
    /* the drain thread and its queue: q_* under mu */
    pthread_t drain;
    bool drain_started;
    int wake_fd;               /* eventfd: the loop has chunks to take */
    int stop_fd;               /* eventfd: the thread is to return */
    pthread_mutex_t mu;
    bool mu_init;
    struct chunk *q_head, *q_tail;
    size_t q_bytes;
    bool q_lost;               /* the queue was full: events dropped */
    struct event *ev_read;     /* on wake_fd */
    struct event *ev_timer;
    struct event *ev_root;     /* WATCH_ROOT_CHECK_MS: is the root gone? */
    bool root_told;            /* on_root_gone has run */
    struct wdent **wds;        /* buckets */
    size_t nwd_buckets, nwds;
    struct pend **pends;       /* buckets */
    size_t npend_buckets, npend;
    struct plist settling;     /* ordered by deadline (all share settle) */
    struct plist ready;
    int64_t last_batch_us;     /* monotonic: when the last batch went */
    int64_t batch_due_us;      /* ready paths wait for this; 0: none */
    bool enospc_told;
    bool overflowed;           /* the rest of this read is covered by the
                                  rescan just asked for */
    struct watch_stats stats;
    char *buf;                 /* the drain thread's read buffer */
};

/* Grow a bucket array to twice its size when the load passes 1. */
static int
wd_grow(struct watch *w)
{
    size_t nb = w->nwd_buckets * 2;
    struct wdent **b = rs_calloc(nb, sizeof(*b));
    if (b == NULL)
        return RS_ENOMEM;
    for (size_t i = 0; i < w->nwd_buckets; i++) {
        struct wdent *e = w->wds[i];
        while (e != NULL) {
            struct wdent *n = e->hnext;
            size_t k = (size_t)e->wd & (nb - 1);
            e->hnext = b[k];
            b[k] = e;
            e = n;
        }
    }
    rs_free(w->wds);
    w->wds = b;
    w->nwd_buckets = nb;
    return 0;
}

static struct wdent *
wd_find(const struct watch *w, int wd)
{
    for (struct wdent *e = w->wds[(size_t)wd & (w->nwd_buckets - 1)];
         e != NULL; e = e->hnext)
        if (e->wd == wd)
            return e;
    return NULL;
}

static int
wd_put(struct watch *w, int wd, const char *rel)
{
    struct wdent *e = wd_find(w, wd);
    char *p = rs_strdup(rel);
    if (p == NULL)
        return RS_ENOMEM;
    if (e != NULL) {                 /* the same directory, renamed */
        rs_free(e->path);
        e->path = p;
        return 0;
    }
    if (w->nwds >= w->nwd_buckets && wd_grow(w) != 0) {
        rs_free(p);
        return RS_ENOMEM;
    }
    e = rs_calloc(1, sizeof(*e));
    if (e == NULL) {
        rs_free(p);
        return RS_ENOMEM;
    }
    e->wd = wd;
    e->path = p;
    size_t k = (size_t)wd & (w->nwd_buckets - 1);
    e->hnext = w->wds[k];
    w->wds[k] = e;
    w->nwds++;
    return 0;
}

static void
wd_del(struct watch *w, int wd)
{
    struct wdent **pp = &w->wds[(size_t)wd & (w->nwd_buckets - 1)];
    for (; *pp != NULL; pp = &(*pp)->hnext) {
        if ((*pp)->wd == wd) {
            struct wdent *e = *pp;
            *pp = e->hnext;
            rs_free(e->path);
            rs_free(e);
            w->nwds--;
            return;
        }
    }
}

/* Forget (and stop) the watches of rel and everything beneath it: the
 * directory moved away, and its watches would report the old names. */
static void
wd_drop_subtree(struct watch *w, const char *rel)
{
    size_t n = strlen(rel);
    for (size_t i = 0; i < w->nwd_buckets; i++) {
        struct wdent **pp = &w->wds[i];
        while (*pp != NULL) {
            struct wdent *e = *pp;
            if (strncmp(e->path, rel, n) == 0 &&
                (e->path[n] == '\0' || e->path[n] == '/')) {
                (void)inotify_rm_watch(w->fd, e->wd);
                *pp = e->hnext;
                rs_free(e->path);
                rs_free(e);
                w->nwds--;
            } else {
                pp = &e->hnext;
            }
        }
    }
}

/* ------------------------------------------------------- pending paths */

static void
list_remove(struct plist *l, struct pend *p)
{
    if (p->prev != NULL)
        p->prev->next = p->next;
    else
        l->head = p->next;
    if (p->next != NULL)
        p->next->prev = p->prev;
    else
        l->tail = p->prev;
    p->prev = p->next = NULL;
}

static void
list_append(struct plist *l, struct pend *p)
{
    p->next = NULL;
    p->prev = l->tail;
    if (l->tail != NULL)
        l->tail->next = p;
    else
        l->head = p;
    l->tail = p;
}

static struct pend *
pend_find(const struct watch *w, const char *path, uint64_t h)
{
    for (struct pend *p = w->pends[h & (w->npend_buckets - 1)]; p != NULL;
         p = p->hnext)
        if (p->hash == h && strcmp(p->path, path) == 0)
            return p;
    return NULL;
}

static int
pend_grow(struct watch *w)
{
    size_t nb = w->npend_buckets * 2;
    struct pend **b = rs_calloc(nb, sizeof(*b));
    if (b == NULL)
        return RS_ENOMEM;
    for (size_t i = 0; i < w->npend_buckets; i++) {
        struct pend *p = w->pends[i];
        while (p != NULL) {
            struct pend *n = p->hnext;
            size_t k = p->hash & (nb - 1);
            p->hnext = b[k];
            b[k] = p;
            p = n;
        }
    }
    rs_free(w->pends);
    w->pends = b;
    w->npend_buckets = nb;
    return 0;
}

/* Unhook p from its bucket and list; the caller frees it. */
static void
pend_unlink(struct watch *w, struct pend *p)
{
    struct pend **pp = &w->pends[p->hash & (w->npend_buckets - 1)];
    while (*pp != p)
        pp = &(*pp)->hnext;
    *pp = p->hnext;
    list_remove(p->ready ? &w->ready : &w->settling, p);
    w->npend--;
}

static void
pend_clear(struct watch *w)
{
    struct plist *lists[2] = { &w->settling, &w->ready };
    for (int i = 0; i < 2; i++) {
        while (lists[i]->head != NULL) {
            struct pend *p = lists[i]->head;
            pend_unlink(w, p);
            rs_free(p->path);
            rs_free(p);
        }
    }
}

static void
timer_arm(struct watch *w)
{
    int64_t when = INT64_MAX;
    if (w->settling.head != NULL)
        when = w->settling.head->deadline_us;
    if (w->ready.head != NULL && w->batch_due_us > 0 && w->batch_due_us < when)
        when = w->batch_due_us;
    if (when == INT64_MAX) {
        event_del(w->ev_timer);
        return;
    }
    int64_t d = when - rs_time_mono_us();
    if (d < 0)
        d = 0;
    struct timeval tv = rs_time_tv_us(d);
    event_add(w->ev_timer, &tv);
}

static void
overflow(struct watch *w, const char *why)
{
    w->overflowed = true;
    w->stats.overflows++;
    pend_clear(w);
    timer_arm(w);
    if (w->o.on_rescan != NULL)
        w->o.on_rescan(w->o.ud, why);
}

/* Hold path: ready now, or settling (its deadline pushed back). */
static void
pend_touch(struct watch *w, const char *path, bool ready)
{
    uint64_t h = rs_fnv1a64(path);
    struct pend *p = pend_find(w, path, h);
    if (p != NULL) {
        if (p->ready)
            return;               /* already due: nothing to wait for */
        list_remove(&w->settling, p);
    } else {
        if (w->npend >= w->o.max_pending) {
            overflow(w, "too many pending paths");
            return;
        }
        if (w->npend >= w->npend_buckets && pend_grow(w) != 0) {
            overflow(w, "out of memory");
            return;
        }
        p = rs_calloc(1, sizeof(*p));
        char *s = rs_strdup(path);
        if (p == NULL || s == NULL) {
            rs_free(p);
            rs_free(s);
            overflow(w, "out of memory");
            return;
        }
        p->path = s;
        p->hash = h;
        size_t k = h & (w->npend_buckets - 1);
        p->hnext = w->pends[k];
        w->pends[k] = p;
        w->npend++;
    }
    p->ready = ready;
    if (ready) {
        list_append(&w->ready, p);
    } else {
        p->deadline_us = rs_time_mono_us() + w->o.settle_ms * 1000;
        list_append(&w->settling, p);
    }
}

/* Hand every ready path to the owner. They leave the tables first, so the
 * owner may hold them again (watch_retry) from inside on_batch. */
static void
deliver(struct watch *w)
{
    if (w->ready.head == NULL)
        return;
    /* Ready paths that come within coalesce_us of the last batch wait for
     * it to pass: a busy tree is then committed in fewer, larger
     * transactions (each commit writes its pages to the WAL again), an
     * idle one still at once. The caller arms the timer next. */
    int64_t now = rs_time_mono_us();
    if (w->o.coalesce_us > 0 && now - w->last_batch_us < w->o.coalesce_us) {
        w->batch_due_us = w->last_batch_us + w->o.coalesce_us;
        return;
    }
    w->batch_due_us = 0;
    w->last_batch_us = now;
    size_t n = 0;
    for (struct pend *p = w->ready.head; p != NULL; p = p->next)
        n++;
    if (n == 0)
        return;
    char **paths = rs_calloc(n, sizeof(*paths));
    if (paths == NULL) {
        overflow(w, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        struct pend *p = w->ready.head;
        pend_unlink(w, p);
        paths[i] = p->path;
        rs_free(p);
    }
    w->stats.batches++;
    if (w->o.on_batch != NULL)
        w->o.on_batch(w->o.ud, (const char *const *)paths, n);
    for (size_t i = 0; i < n; i++)
        rs_free(paths[i]);
    rs_free(paths);
}

/* --------------------------------------------------------------- events */

static void
root_gone(struct watch *w)
{
    if (w->root_told)
        return;
    w->root_told = true;
    event_del(w->ev_root);
    if (w->o.on_root_gone != NULL)
        w->o.on_root_gone(w->o.ud);
}

/* A root deleted while the tree holds its descriptor gets no
 * IN_DELETE_SELF (the kernel sends it when the inode goes, and that
 * descriptor keeps it), and an empty root's rmdir no event at all: so
 * it is looked for. One fstat a second. */
static void
on_root_check(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct watch *w = arg;
    if (tree_root_gone(w->o.tree))
        root_gone(w);
}

/* A name the tree refuses that is no choice of policy (a control
 * character, too deep, too long): told when it appears. */
static void
tell_problem(struct watch *w, const struct inotify_event *ev, const char *full)
{
    if (!(ev->mask & (IN_CREATE | IN_MOVED_TO)) || w->o.on_problem == NULL)
        return;
    const char *why = tree_path_problem(w->o.tree, full);
    if (why != NULL)
        w->o.on_problem(w->o.ud, full, why, 0);
}

static void
handle_event(struct watch *w, const struct inotify_event *ev)
{
    w->stats.events++;
    if (w->overflowed && !(ev->mask & IN_IGNORED))
        return;
    if (ev->mask & IN_Q_OVERFLOW) {
        overflow(w, "inotify queue overflow");
        return;
    }
    if (ev->mask & IN_IGNORED) {
        wd_del(w, ev->wd);
        return;
    }
    if (ev->wd == w->root_wd && (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF))) {
        root_gone(w);
        return;
    }
    if (ev->len == 0 || ev->name[0] == '\0')
        return;                   /* about the watched directory itself */
    struct wdent *d = wd_find(w, ev->wd);
    if (d == NULL)
        return;                   /* a watch dropped meanwhile */
    /* room for a path one name longer than any allowed, to say why */
    char full[TREE_PATH_MAX + NAME_MAX + 2];
    int n = d->path[0] != '\0'
                ? snprintf(full, sizeof(full), "%s/%s", d->path, ev->name)
                : snprintf(full, sizeof(full), "%s", ev->name);
    if (n < 0 || (size_t)n >= sizeof(full))
        return;
    /* Hidden and excluded names are never catalogued; but a name moved
     * away into one still leaves its old name (handled as MOVED_FROM of
     * the old name, which is allowed). */
    if (!tree_path_ok(w->o.tree, full)) {
        tell_problem(w, ev, full);
        return;
    }
    if ((ev->mask & IN_ISDIR) && (ev->mask & IN_MOVED_FROM))
        wd_drop_subtree(w, full);
    bool now = (ev->mask & (IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO |
                            IN_DELETE)) != 0 ||
               (ev->mask & IN_ISDIR) != 0;
    pend_touch(w, full, now);
}

/* ------------------------------------------------------ drain thread */

static void *
drain_main(void *arg)
{
    struct watch *w = arg;
    rs_thread_signals_to_loop();
    char *buf = w->buf;
    struct pollfd p[2] = { { .fd = w->fd, .events = POLLIN },
                           { .fd = w->stop_fd, .events = POLLIN } };
    /* A read that left room for another event of the longest name took
     * all there was: no second read to hear EAGAIN. */
    const ssize_t whole = WATCH_READ_BUF -
                          (ssize_t)(sizeof(struct inotify_event) + NAME_MAX + 1);
    int64_t span_us = 0;              /* start of the current 10 ms */
    unsigned wakes = 0;               /* wakes since then */
    for (;;) {
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents != 0)
            break;
        /* A busy tree (at 5,000 changes/s an event every 70 us) woke this
         * thread for each event or two: a poll, two reads and often a
         * wake of the loop each time. Woken more than 8 times in 10 ms,
         * it pauses after each read and reads what a pause gathers (the
         * kernel holds 16,384 events, half a second at 10,000 changes/s),
         * a wait the loop's batch makes at such rates anyway (its
         * coalesce_us). The three events of a file written at 100/s come
         * in wakes of their own: each is read at once. */
        int64_t now = rs_time_mono_us();
        if (now - span_us >= WATCH_BUSY_US) {
            span_us = now;
            wakes = 0;
        }
        bool busy = ++wakes > WATCH_BUSY_WAKES;
        for (;;) {
            ssize_t n = read(w->fd, buf, WATCH_READ_BUF);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;            /* drained (EAGAIN) */
            struct chunk *c = NULL;
            pthread_mutex_lock(&w->mu);
            bool was_empty = w->q_head == NULL && !w->q_lost;
            if (w->q_bytes + (size_t)n <= w->o.max_queued)
                c = rs_malloc(sizeof(*c) + (size_t)n);
            if (c != NULL) {
                memcpy(c->data, buf, (size_t)n);
                c->len = (size_t)n;
                c->next = NULL;
                if (w->q_tail != NULL)
                    w->q_tail->next = c;
                else
                    w->q_head = c;
                w->q_tail = c;
                w->q_bytes += (size_t)n;
            } else {
                w->q_lost = true; /* full or out of memory: a rescan */
            }
            pthread_mutex_unlock(&w->mu);
            if (was_empty) {
                uint64_t one = 1;
                (void)!write(w->wake_fd, &one, sizeof(one));
            }
            if (n < whole)
                break;
        }
        if (busy) {
            struct timespec ts = { 0, WATCH_PAUSE_US * 1000L };
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
                ;
        }
    }
    return NULL;
}

/* The loop's side: take every chunk the thread queued, decode them in
 * order, hand over what is ready. */
static void
on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct watch *w = arg;
    uint64_t v;
    (void)!read(fd, &v, sizeof(v));
    pthread_mutex_lock(&w->mu);
    struct chunk *c = w->q_head;
    bool lost = w->q_lost;
    w->q_head = w->q_tail = NULL;
    w->q_bytes = 0;
    w->q_lost = false;
    pthread_mutex_unlock(&w->mu);
    w->overflowed = false;
    while (c != NULL) {
        for (size_t off = 0; off < c->len;) {
            const struct inotify_event *ev =
                (const struct inotify_event *)(c->data + off);
            handle_event(w, ev);
            off += sizeof(*ev) + ev->len;
        }
        struct chunk *next = c->next;
        rs_free(c);
        c = next;
    }
    if (lost)
        overflow(w, "events held in memory over the limit");
    deliver(w);
    timer_arm(w);
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct watch *w = arg;
    int64_t now = rs_time_mono_us();
    while (w->settling.head != NULL && w->settling.head->deadline_us <= now) {
        struct pend *p = w->settling.head;
        list_remove(&w->settling, p);
        p->ready = true;
        list_append(&w->ready, p);
    }
    deliver(w);
    timer_arm(w);
}

/* ----------------------------------------------------------- lifecycle */

struct watch *
watch_new(const struct watch_opts *o, const char **err)
{
    *err = "out of memory";
    struct watch *w = rs_calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->o = *o;
    w->fd = w->wake_fd = w->stop_fd = -1;
    w->root_wd = -1;
    if (w->o.max_pending == 0)
        w->o.max_pending = 1000000;
    if (w->o.max_queued == 0)
        w->o.max_queued = WATCH_QUEUE_MAX;
    if (w->o.coalesce_us == 0)
        w->o.coalesce_us = WATCH_COALESCE_US;
    w->nwd_buckets = 1024;
    w->npend_buckets = 1024;
    w->wds = rs_calloc(w->nwd_buckets, sizeof(*w->wds));
    w->pends = rs_calloc(w->npend_buckets, sizeof(*w->pends));
    /* the thread's buffer, made here: a thread that cannot read would
     * lose every event after the first */
    w->buf = rs_malloc(WATCH_READ_BUF);
    if (w->wds == NULL || w->pends == NULL || w->buf == NULL)
        goto fail;
    if (pthread_mutex_init(&w->mu, NULL) != 0)
        goto fail;
    w->mu_init = true;
    w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->fd < 0) {
        *err = "inotify_init1 failed (fs.inotify.max_user_instances?)";
        goto fail;
    }
    w->mask = IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE |
              IN_CREATE | IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF |
              IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK |
              (tree_follows_symlinks(o->tree) ? 0 : IN_DONT_FOLLOW);
    w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    w->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->wake_fd < 0 || w->stop_fd < 0) {
        *err = "eventfd failed";
        goto fail;
    }
    w->ev_read = event_new(o->base, w->wake_fd, EV_READ | EV_PERSIST,
                           on_read, w);
    w->ev_timer = event_new(o->base, -1, 0, on_timer, w);
    w->ev_root = event_new(o->base, -1, EV_PERSIST, on_root_check, w);
    struct timeval every = rs_time_tv_ms(WATCH_ROOT_CHECK_MS);
    if (w->ev_read == NULL || w->ev_timer == NULL || w->ev_root == NULL ||
        event_add(w->ev_read, NULL) != 0 || event_add(w->ev_root, &every) != 0)
        goto fail;
    if (pthread_create(&w->drain, NULL, drain_main, w) != 0) {
        *err = "cannot start the inotify drain thread";
        goto fail;
    }
    w->drain_started = true;
    *err = NULL;
    return w;
fail:
    watch_free(w);
    return NULL;
}

void
watch_free(struct watch *w)
{
    if (w == NULL)
        return;
    if (w->drain_started) {
        uint64_t one = 1;
        (void)!write(w->stop_fd, &one, sizeof(one));
        pthread_join(w->drain, NULL);
    }
    while (w->q_head != NULL) {
        struct chunk *c = w->q_head;
        w->q_head = c->next;
        rs_free(c);
    }
    if (w->mu_init)
        pthread_mutex_destroy(&w->mu);
    if (w->ev_read != NULL)
        event_free(w->ev_read);
    if (w->ev_timer != NULL)
        event_free(w->ev_timer);
    if (w->ev_root != NULL)
        event_free(w->ev_root);
    if (w->pends != NULL)
        pend_clear(w);
    for (size_t i = 0; w->wds != NULL && i < w->nwd_buckets; i++) {
        struct wdent *e = w->wds[i];
        while (e != NULL) {
            struct wdent *n = e->hnext;
            rs_free(e->path);
            rs_free(e);
            e = n;
        }
    }
    if (w->fd >= 0)
        close(w->fd);
    if (w->wake_fd >= 0)
        close(w->wake_fd);
    if (w->stop_fd >= 0)
        close(w->stop_fd);
    rs_free(w->wds);
    rs_free(w->pends);
    rs_free(w->buf);
    rs_free(w);
}

int
watch_add_dir(struct watch *w, const char *rel)
{
    char path[TREE_PATH_MAX + 4096];
    const char *root = tree_root(w->o.tree);
    int n = rel[0] != '\0' ? snprintf(path, sizeof(path), "%s/%s", root, rel)
                           : snprintf(path, sizeof(path), "%s", root);
    if (n < 0 || (size_t)n >= sizeof(path))
        return RS_ETOOBIG;
    int wd = inotify_add_watch(w->fd, path, w->mask);
    if (wd < 0) {
        int e = errno;
        if (e == ENOSPC) {
            if (!w->enospc_told && w->o.on_problem != NULL)
                w->o.on_problem(w->o.ud, rel,
                                "inotify watch limit reached "
                                "(raise fs.inotify.max_user_watches)", e);
            w->enospc_told = true;
            return RS_ETOOBIG;
        }
        if (e == ENOENT || e == ENOTDIR)
            return 0;             /* gone meanwhile: its parent reports it */
        if (w->o.on_problem != NULL)
            w->o.on_problem(w->o.ud, rel, "inotify_add_watch", e);
        return RS_EIO;
    }
    if (rel[0] == '\0')
        w->root_wd = wd;
    return wd_put(w, wd, rel);
}

int
watch_retry(struct watch *w, const char *rel)
{
    pend_touch(w, rel, false);
    timer_arm(w);
    return 0;
}

void
watch_get_stats(const struct watch *w, struct watch_stats *out)
{
    *out = w->stats;
    out->watches = w->nwds;
    out->pending = w->npend;
}
