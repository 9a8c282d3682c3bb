/*
 * hashwork.c - the hashing thread (see hashwork.h).
 *
 * Locking: one mutex guards both queues (todo, done) and the count of
 * the path being read; the thread waits on a condition for work. A job
 * belongs to the queue it is on, or to the thread between its todo and
 * its done. The loop is woken through an eventfd written unlocked: it
 * lives until hashwork_free, which joins the thread first. on_hashed runs
 * unlocked, on the loop.
 */
#include "hashwork.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "rs_alloc.h"

#define HASHWORK_READ_BUF (1024 * 1024)

struct job {
    struct job *next;
    int rc;
    struct stat st;
    uint8_t md5[16], sha256[32];
    char rel[];
};

struct jobq {
    struct job *head, *tail;
};

struct hashwork {
    struct hashwork_opts o;
    pthread_t thread;
    bool started, mu_init, cv_init;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct jobq todo, done;      /* under mu */
    size_t reading;              /* under mu: 1 while the thread reads */
    atomic_bool stop;
    int wake_fd;                 /* eventfd: done has jobs */
    struct event *ev_wake;
    /* the thread's own */
    struct rs_hasher *hasher;
    uint8_t *buf;
};

static void
jobq_push(struct jobq *q, struct job *j)
{
    j->next = NULL;
    if (q->tail != NULL)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
}

static struct job *
jobq_pop(struct jobq *q)
{
    struct job *j = q->head;
    if (j != NULL) {
        q->head = j->next;
        if (q->head == NULL)
            q->tail = NULL;
    }
    return j;
}

static void
jobq_clear(struct jobq *q)
{
    struct job *j;
    while ((j = jobq_pop(q)) != NULL)
        rs_free(j);
}

/* Read fd to its end through hasher (and sink); see hashwork_digest_fd. */
static int
read_all(int fd, const struct stat *st, struct rs_hasher *hasher,
         uint8_t *buf, size_t len,
         void (*sink)(void *ud, const void *p, size_t n), void *ud,
         const atomic_bool *stop, uint64_t *total)
{
    struct stat st2;
    *total = 0;
    if (st->st_size > 1024 * 1024)
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    for (;;) {
        if (stop != NULL && atomic_load(stop))
            return RS_ECANCELED;
        ssize_t n = read(fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return RS_EIO;
        if (n == 0)
            break;
        *total += (uint64_t)n;
        if (sink != NULL)
            sink(ud, buf, (size_t)n);
        int rc = rs_hasher_update(hasher, buf, (size_t)n);
        if (rc != 0)
            return rc;
        /* all its size said: the fstat below tells whether it grew, so
         * the read that would only say end of file is not made */
        if (*total == (uint64_t)st->st_size)
            break;
    }
    if (fstat(fd, &st2) != 0 || st2.st_size != st->st_size ||
        st2.st_mtim.tv_sec != st->st_mtim.tv_sec ||
        st2.st_mtim.tv_nsec != st->st_mtim.tv_nsec ||
        *total != (uint64_t)st->st_size)
        return RS_EAGAIN;
    return 0;
}

int
hashwork_digest_fd(int fd, const struct stat *st, struct rs_hasher *hasher,
                   uint8_t *buf, size_t len,
                   void (*sink)(void *ud, const void *p, size_t n), void *ud,
                   const atomic_bool *stop, uint8_t md5[16],
                   uint8_t sha256[32], uint64_t *total)
{
    int rc = read_all(fd, st, hasher, buf, len, sink, ud, stop, total);
    int saved = errno;
    struct rs_hashes out;
    int frc = rs_hasher_final(hasher, &out);   /* also resets it */
    errno = saved;
    if (rc != 0)
        return rc;
    if (frc != 0)
        return frc;
    const struct rs_digest *m = rs_hashes_find(&out, RS_HASH_MD5);
    const struct rs_digest *h = rs_hashes_find(&out, RS_HASH_SHA256);
    if (m == NULL || h == NULL || m->len != 16 || h->len != 32)
        return RS_EIO;
    memcpy(md5, m->bytes, 16);
    memcpy(sha256, h->bytes, 32);
    return 0;
}

/* Read one job's file into its digests (on the thread). */
static void
hash_job(struct hashwork *h, struct job *j)
{
    uint64_t total;
    int fd = tree_open_file(h->o.tree, j->rel, &j->st);
    if (fd < 0) {
        j->rc = fd;
        return;
    }
    j->rc = hashwork_digest_fd(fd, &j->st, h->hasher, h->buf,
                               HASHWORK_READ_BUF, NULL, NULL, &h->stop,
                               j->md5, j->sha256, &total);
    close(fd);
}

static void *
thread_main(void *arg)
{
    struct hashwork *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!atomic_load(&h->stop) && h->todo.head == NULL)
            pthread_cond_wait(&h->cv, &h->mu);
        if (atomic_load(&h->stop))
            break;
        struct job *j = jobq_pop(&h->todo);
        h->reading = 1;
        pthread_mutex_unlock(&h->mu);
        hash_job(h, j);
        pthread_mutex_lock(&h->mu);
        h->reading = 0;
        if (j->rc == RS_ECANCELED) {
            rs_free(j);
            break;
        }
        jobq_push(&h->done, j);
        uint64_t one = 1;
        (void)!write(h->wake_fd, &one, sizeof(one));
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

static void
on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct hashwork *h = arg;
    uint64_t n;
    (void)!read(fd, &n, sizeof(n));
    pthread_mutex_lock(&h->mu);
    struct jobq done = h->done;
    h->done.head = h->done.tail = NULL;
    pthread_mutex_unlock(&h->mu);
    struct job *j;
    while ((j = jobq_pop(&done)) != NULL) {
        struct hashwork_result r = { .rel = j->rel, .rc = j->rc, .st = j->st };
        memcpy(r.md5, j->md5, 16);
        memcpy(r.sha256, j->sha256, 32);
        h->o.on_hashed(h->o.ud, &r);
        rs_free(j);
    }
}

struct hashwork *
hashwork_new(const struct hashwork_opts *o, const char **err)
{
    struct hashwork *h = rs_calloc(1, sizeof(*h));
    *err = "out of memory";
    if (h == NULL)
        return NULL;
    h->o = *o;
    h->wake_fd = -1;
    atomic_init(&h->stop, false);
    h->hasher = rs_hasher_new((1u << RS_HASH_MD5) | (1u << RS_HASH_SHA256));
    h->buf = rs_malloc(HASHWORK_READ_BUF);
    if (h->hasher == NULL || h->buf == NULL)
        goto fail;
    if (pthread_mutex_init(&h->mu, NULL) != 0)
        goto fail;
    h->mu_init = true;
    if (pthread_cond_init(&h->cv, NULL) != 0)
        goto fail;
    h->cv_init = true;
    h->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (h->wake_fd < 0) {
        *err = "eventfd failed";
        goto fail;
    }
    h->ev_wake = event_new(o->base, h->wake_fd, EV_READ | EV_PERSIST, on_wake,
                           h);
    if (h->ev_wake == NULL || event_add(h->ev_wake, NULL) != 0)
        goto fail;
    if (pthread_create(&h->thread, NULL, thread_main, h) != 0) {
        *err = "cannot start the hashing thread";
        goto fail;
    }
    h->started = true;
    *err = NULL;
    return h;
fail:
    hashwork_free(h);
    return NULL;
}

void
hashwork_free(struct hashwork *h)
{
    if (h == NULL)
        return;
    if (h->started) {
        pthread_mutex_lock(&h->mu);
        atomic_store(&h->stop, true);
        pthread_cond_signal(&h->cv);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->thread, NULL);
    }
    jobq_clear(&h->todo);
    jobq_clear(&h->done);
    if (h->ev_wake != NULL)
        event_free(h->ev_wake);
    if (h->wake_fd >= 0)
        close(h->wake_fd);
    if (h->cv_init)
        pthread_cond_destroy(&h->cv);
    if (h->mu_init)
        pthread_mutex_destroy(&h->mu);
    rs_hasher_free(h->hasher);
    rs_free(h->buf);
    rs_free(h);
}

int
hashwork_submit(struct hashwork *h, const char *rel)
{
    size_t len = strlen(rel);
    struct job *j = rs_calloc(1, sizeof(*j) + len + 1);
    if (j == NULL)
        return RS_ENOMEM;
    memcpy(j->rel, rel, len + 1);
    pthread_mutex_lock(&h->mu);
    struct job *q = h->todo.head;
    while (q != NULL && strcmp(q->rel, rel) != 0)
        q = q->next;
    if (q == NULL) {
        jobq_push(&h->todo, j);
        j = NULL;
        pthread_cond_signal(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
    rs_free(j);                  /* queued already */
    return 0;
}

size_t
hashwork_pending(struct hashwork *h)
{
    size_t n = 0;
    pthread_mutex_lock(&h->mu);
    for (struct job *q = h->todo.head; q != NULL; q = q->next)
        n++;
    n += h->reading;
    pthread_mutex_unlock(&h->mu);
    return n;
}
