/*
 * syncer.c - one thread preparing mirror files (mtime, fsync) while the
 * loop goes on. Handed files queue in order; the thread takes the whole
 * queue at once, prepares each, and moves it to the done list, waking the
 * loop (an eventfd) when that list was empty; the loop then tells each
 * done file's owner, in order. Under a burst the hand-offs batch by
 * themselves: one wake-up each way for everything queued meanwhile. On
 * ext4 the first fsync of a batch commits the journal for every file
 * written before it, so the rest of the batch costs little more.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "rs_alloc.h"
#include "rs_daemon.h"
#include "syncer.h"

struct item {
    struct item *next;
    struct mirror_file *f;
    rs_time_t mtime;
    int64_t took_us;             /* the prepare's, set by the thread */
    syncer_synced_cb on_synced;
    void *ud;
};

/* A list kept in order: head, and where the next item is linked. */
struct list {
    struct item *head;
    struct item **tail;
};

struct syncer {
    int efd;                     /* thread -> loop: done is not empty */
    struct event *ev_done;
    pthread_t th;
    bool started;
    /* under mu: */
    pthread_mutex_t mu;
    pthread_cond_t more;         /* queue not empty, or stop */
    struct list queue;           /* handed, not yet taken */
    struct list done;            /* prepared, not yet told */
    bool stop;
    size_t pending;              /* the loop's: handed and not yet told */
    int64_t slow_us;             /* the loop's: the slowest recent prepare,
                                    decaying by 1/16 a prepare */
    bool *freed;                 /* on_done's, set when a callback of its
                                    freed s */
};

static void
list_init(struct list *l)
{
    l->head = NULL;
    l->tail = &l->head;
}

static void
items_free(struct item *it)
{
    while (it != NULL) {
        struct item *next = it->next;
        rs_free(it);
        it = next;
    }
}

/* mirror_prepare, and how long it took. */
static int64_t
prepare_timed(struct mirror_file *f, rs_time_t mtime)
{
    int64_t t0 = rs_time_mono_us();
    mirror_prepare(f, mtime);
    return rs_time_mono_us() - t0;
}

/* A prepare took us: the loop's view of how slow they are. */
static void
note(struct syncer *s, int64_t us)
{
    s->slow_us -= s->slow_us / 16;
    if (us > s->slow_us)
        s->slow_us = us;
}

static void *
syncer_main(void *arg)
{
    static const uint64_t one = 1;
    struct syncer *s = arg;

    rs_thread_signals_to_loop();
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->queue.head == NULL && !s->stop)
            pthread_cond_wait(&s->more, &s->mu);
        if (s->stop)
            break;
        struct item *batch = s->queue.head;
        list_init(&s->queue);
        pthread_mutex_unlock(&s->mu);
        while (batch != NULL) {
            struct item *it = batch;
            batch = it->next;
            it->next = NULL;
            it->took_us = prepare_timed(it->f, it->mtime);
            pthread_mutex_lock(&s->mu);
            bool wake = s->done.head == NULL;
            *s->done.tail = it;
            s->done.tail = &it->next;
            bool stop = s->stop;
            pthread_mutex_unlock(&s->mu);
            if (wake)
                (void)!write(s->efd, &one, sizeof(one));
            if (stop) {
                /* syncer_free: what is left of the batch is never
                 * prepared (its owners free it) */
                items_free(batch);
                pthread_mutex_lock(&s->mu);
                goto out;
            }
        }
        pthread_mutex_lock(&s->mu);
    }
out:
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* The loop's side: tell the owner of each prepared file, in order. */
static void
on_done(evutil_socket_t fd, short what, void *arg)
{
    struct syncer *s = arg;
    uint64_t n;

    (void)what;
    (void)!read(fd, &n, sizeof(n));
    /* One at a time from the list: an owner told may free s (syncer_free
     * then frees what is still in it) */
    bool freed = false;
    s->freed = &freed;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        struct item *it = s->done.head;
        if (it != NULL && (s->done.head = it->next) == NULL)
            s->done.tail = &s->done.head;
        pthread_mutex_unlock(&s->mu);
        if (it == NULL)
            break;
        syncer_synced_cb cb = it->on_synced;
        void *ud = it->ud;
        note(s, it->took_us);
        rs_free(it);
        s->pending--;
        cb(ud);
        if (freed)
            return;
    }
    s->freed = NULL;
}

struct syncer *
syncer_new(struct event_base *base, char *err, size_t errsz)
{
    struct syncer *s = rs_calloc(1, sizeof(*s));
    if (s == NULL) {
        snprintf(err, errsz, "out of memory");
        return NULL;
    }
    s->efd = -1;
    list_init(&s->queue);
    list_init(&s->done);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->more, NULL);
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->efd < 0) {
        snprintf(err, errsz, "eventfd: %s", strerror(errno));
        syncer_free(s);
        return NULL;
    }
    s->ev_done = event_new(base, s->efd, EV_READ | EV_PERSIST, on_done, s);
    if (s->ev_done == NULL || event_add(s->ev_done, NULL) != 0) {
        snprintf(err, errsz, "out of memory");
        syncer_free(s);
        return NULL;
    }
    return s;
}

bool
syncer_wanted(const struct syncer *s)
{
    return s->slow_us >= SYNCER_SLOW_US;
}

void
syncer_prepare_here(struct syncer *s, struct mirror_file *f, rs_time_t mtime)
{
    note(s, prepare_timed(f, mtime));
}

int
syncer_submit(struct syncer *s, struct mirror_file *f, rs_time_t mtime,
              syncer_synced_cb on_synced, void *ud)
{
    if (!s->started) {
        if (pthread_create(&s->th, NULL, syncer_main, s) != 0)
            return RS_EIO;
        s->started = true;
    }
    struct item *it = rs_malloc(sizeof(*it));
    if (it == NULL)
        return RS_ENOMEM;
    *it = (struct item){ .f = f, .mtime = mtime, .on_synced = on_synced,
                         .ud = ud };
    pthread_mutex_lock(&s->mu);
    *s->queue.tail = it;
    s->queue.tail = &it->next;
    pthread_cond_signal(&s->more);
    pthread_mutex_unlock(&s->mu);
    s->pending++;
    return 0;
}

size_t
syncer_pending(const struct syncer *s)
{
    return s->pending;
}

void
syncer_free(struct syncer *s)
{
    if (s == NULL)
        return;
    if (s->freed != NULL)
        *s->freed = true;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_signal(&s->more);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
    }
    items_free(s->queue.head);
    items_free(s->done.head);
    if (s->ev_done != NULL)
        event_free(s->ev_done);
    if (s->efd >= 0)
        close(s->efd);
    pthread_cond_destroy(&s->more);
    pthread_mutex_destroy(&s->mu);
    rs_free(s);
}
