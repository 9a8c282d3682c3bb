/*
 * seam.c - locked event FIFOs between the main loop and the libwebsockets
 * service threads (seam.h). Consumers take the whole list in one lock, so
 * a burst of fan-out costs one lock and one wake-up per thread.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "rs_alloc.h"
#include "seam.h"

int
seam_queue_init(struct seam_queue *q, void (*wake)(void *), void *ud)
{
    q->head = q->tail = NULL;
    q->wake = wake;
    q->wake_ud = ud;
    return pthread_mutex_init(&q->mu, NULL) == 0 ? 0 : RS_ENOMEM;
}

void
seam_queue_cleanup(struct seam_queue *q)
{
    struct seam_ev *ev = seam_take(q);
    while (ev != NULL) {
        struct seam_ev *next = ev->next;
        seam_ev_free(ev);
        ev = next;
    }
    pthread_mutex_destroy(&q->mu);
}

void
seam_push(struct seam_queue *q, struct seam_ev *ev)
{
    ev->next = NULL;
    pthread_mutex_lock(&q->mu);
    bool was_empty = q->head == NULL;
    if (q->tail != NULL)
        q->tail->next = ev;
    else
        q->head = ev;
    q->tail = ev;
    pthread_mutex_unlock(&q->mu);
    if (was_empty && q->wake != NULL)
        q->wake(q->wake_ud);
}

struct seam_ev *
seam_take(struct seam_queue *q)
{
    pthread_mutex_lock(&q->mu);
    struct seam_ev *list = q->head;
    q->head = q->tail = NULL;
    pthread_mutex_unlock(&q->mu);
    return list;
}

struct seam_ev *
seam_ev_new(enum seam_type t)
{
    struct seam_ev *ev = rs_calloc(1, sizeof(*ev));
    if (ev != NULL) {
        ev->type = t;
        ev->chan = SEAM_NO_CHAN;
        ev->fd = -1;
    }
    return ev;
}

void
seam_ev_free(struct seam_ev *ev)
{
    if (ev == NULL)
        return;
    if (ev->type == SEAM_ADOPT && ev->fd >= 0)
        close(ev->fd);
    msg_unref(ev->m);
    for (size_t i = 0; i < ev->nmsgs; i++)
        msg_unref(ev->msgs[i]);
    rs_free(ev->msgs);
    rs_free(ev);
}

int
seam_eventfd_new(void)
{
    return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

void
seam_eventfd_wake(void *fdp)
{
    uint64_t one = 1;
    ssize_t n;
    do {
        n = write(*(int *)fdp, &one, sizeof(one));
    } while (n < 0 && errno == EINTR);
    /* EAGAIN means the counter is saturated: the reader is already due. */
}

void
seam_eventfd_drain(int fd)
{
    uint64_t v;
    while (read(fd, &v, sizeof(v)) > 0)
        ;
}
