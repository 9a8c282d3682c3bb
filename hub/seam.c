/*
 * seam.c - the hub's events across the thread seam (seam.h): their
 * allocation and what they own. Queues and wake-ups are rs_seam's.
 */
#include <stddef.h>
#include <unistd.h>

#include "readauth.h"
#include "rs_alloc.h"
#include "seam.h"

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
    readauth_unref(ev->auth);
    rs_free(ev);
}

struct seam_ev *
seam_ev_of(struct rs_seam_item *it)
{
    if (it == NULL)
        return NULL;
    return (struct seam_ev *)(void *)((char *)it - offsetof(struct seam_ev, item));
}

struct seam_ev *
seam_ev_next(const struct seam_ev *ev)
{
    return seam_ev_of(ev->item.next);
}

void
seam_ev_drop(void *ud, struct rs_seam_item *it)
{
    (void)ud;
    seam_ev_free(seam_ev_of(it));
}
