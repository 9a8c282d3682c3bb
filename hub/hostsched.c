/*
 * hostsched.c - per-host admission of outgoing POSTs (hostsched.h). Hosts
 * are kept in a small array searched by origin (a subscription joins once,
 * when it is loaded); each has two FIFO queues of tickets, [0] healthy and
 * [1] suspect, and two counters. Work itself is the caller's.
 */
#include <stdlib.h>
#include <string.h>

#include "hostsched.h"
#include "rs_alloc.h"
#include "rs_url.h"

#define HOSTSCHED_CONNS 8u

struct hostsched_host {
    char *origin;                /* scheme://host:port, lower-cased host */
    unsigned refs;               /* tickets joined */
    unsigned inflight;           /* slots held */
    unsigned suspect_inflight;   /* of which by suspect tickets */
    struct hostsched_ticket *head[2], *tail[2];   /* [0] healthy, [1] suspect */
};

struct hostsched {
    unsigned conns;
    unsigned suspect_cap;
    hostsched_admit_cb admit;
    struct hostsched_host **v;
    size_t n, cap;
};

struct hostsched *
hostsched_new(unsigned conns, hostsched_admit_cb admit)
{
    struct hostsched *hs = rs_calloc(1, sizeof(*hs));
    if (hs == NULL)
        return NULL;
    hs->conns = conns != 0 ? conns : HOSTSCHED_CONNS;
    hs->admit = admit;
    /* a quarter of each host's slots (one at least) stays free of suspects */
    unsigned reserve = hs->conns / 4 ? hs->conns / 4 : 1;
    hs->suspect_cap = hs->conns > reserve ? hs->conns - reserve : 1;
    return hs;
}

void
hostsched_free(struct hostsched *hs)
{
    if (hs == NULL)
        return;
    for (size_t i = 0; i < hs->n; i++) {
        rs_free(hs->v[i]->origin);
        rs_free(hs->v[i]);
    }
    rs_free(hs->v);
    rs_free(hs);
}

unsigned
hostsched_conns(const struct hostsched *hs)
{
    return hs->conns;
}

unsigned
hostsched_suspect_cap(const struct hostsched *hs)
{
    return hs->suspect_cap;
}

size_t
hostsched_hosts(const struct hostsched *hs)
{
    return hs->n;
}

/* ------------------------------------------------------------- hosts */

static struct hostsched_host *
host_get(struct hostsched *hs, const char *url, int *rc)
{
    char *origin = NULL;
    *rc = rs_url_origin(url, &origin);
    if (*rc != 0)
        return NULL;
    for (size_t i = 0; i < hs->n; i++) {
        if (strcmp(hs->v[i]->origin, origin) == 0) {
            rs_free(origin);
            hs->v[i]->refs++;
            return hs->v[i];
        }
    }
    struct hostsched_host *h = NULL;
    *rc = RS_ENOMEM;
    if (hs->n == hs->cap) {
        size_t ncap = hs->cap ? hs->cap * 2 : 16;
        struct hostsched_host **nv = rs_realloc(hs->v, ncap * sizeof(*nv));
        if (nv == NULL)
            goto fail;
        hs->v = nv;
        hs->cap = ncap;
    }
    h = rs_calloc(1, sizeof(*h));
    if (h == NULL)
        goto fail;
    h->origin = origin;
    h->refs = 1;
    hs->v[hs->n++] = h;
    *rc = 0;
    return h;
fail:
    rs_free(origin);
    return NULL;
}

static void
host_put(struct hostsched *hs, struct hostsched_host *h)
{
    if (--h->refs > 0)
        return;
    for (size_t i = 0; i < hs->n; i++) {
        if (hs->v[i] == h) {
            hs->v[i] = hs->v[--hs->n];
            break;
        }
    }
    rs_free(h->origin);
    rs_free(h);
}

/* Does h have a slot for a ticket of this class? */
static bool
host_room(const struct hostsched *hs, const struct hostsched_host *h,
          bool suspect)
{
    return h->inflight < hs->conns &&
           (!suspect || h->suspect_inflight < hs->suspect_cap);
}

static void
host_hold(struct hostsched_host *h, struct hostsched_ticket *t)
{
    h->inflight++;
    if (t->suspect)
        h->suspect_inflight++;
    t->state = HOSTSCHED_HOLDING;
}

static void
host_unhold(struct hostsched_host *h, struct hostsched_ticket *t)
{
    h->inflight--;
    if (t->suspect)
        h->suspect_inflight--;
    t->state = HOSTSCHED_OUT;
}

/* ----------------------------------------------------------- tickets */

int
hostsched_join(struct hostsched *hs, struct hostsched_ticket *t,
               const char *url, void *ud)
{
    int rc;
    memset(t, 0, sizeof(*t));
    t->host = host_get(hs, url, &rc);
    t->ud = ud;
    return t->host != NULL ? 0 : rc;
}

void
hostsched_leave(struct hostsched *hs, struct hostsched_ticket *t)
{
    if (t->host == NULL)
        return;
    hostsched_cancel(hs, t);
    if (t->state == HOSTSCHED_HOLDING)
        host_unhold(t->host, t);
    host_put(hs, t->host);
    t->host = NULL;
}

bool
hostsched_acquire(struct hostsched *hs, struct hostsched_ticket *t,
                  bool suspect)
{
    struct hostsched_host *h = t->host;
    if (t->state != HOSTSCHED_OUT)
        return t->state == HOSTSCHED_HOLDING;
    t->suspect = suspect;
    if (host_room(hs, h, suspect)) {
        host_hold(h, t);
        return true;
    }
    int k = suspect;
    t->next = NULL;
    if (h->tail[k] != NULL)
        h->tail[k]->next = t;
    else
        h->head[k] = t;
    h->tail[k] = t;
    t->state = HOSTSCHED_WAITING;
    return false;
}

void
hostsched_cancel(struct hostsched *hs, struct hostsched_ticket *t)
{
    (void)hs;
    if (t->state != HOSTSCHED_WAITING)
        return;
    struct hostsched_host *h = t->host;
    int k = t->suspect;
    struct hostsched_ticket *prev = NULL;
    for (struct hostsched_ticket *w = h->head[k]; w != NULL;
         prev = w, w = w->next) {
        if (w != t)
            continue;
        if (prev != NULL)
            prev->next = w->next;
        else
            h->head[k] = w->next;
        if (h->tail[k] == w)
            h->tail[k] = prev;
        break;
    }
    t->next = NULL;
    t->state = HOSTSCHED_OUT;
}

void
hostsched_return(struct hostsched *hs, struct hostsched_ticket *t)
{
    (void)hs;
    if (t->state == HOSTSCHED_HOLDING)
        host_unhold(t->host, t);
}

void
hostsched_release(struct hostsched *hs, struct hostsched_ticket *t)
{
    struct hostsched_host *h = t->host;
    if (t->state != HOSTSCHED_HOLDING)
        return;
    host_unhold(h, t);
    /* t's host stays: t is joined. Admit while there is room; a ticket
     * that declines gives its slot to the next. */
    while (h->inflight < hs->conns) {
        int k = 0;
        struct hostsched_ticket *w = h->head[0];
        if (w == NULL && h->suspect_inflight < hs->suspect_cap) {
            w = h->head[1];
            k = 1;
        }
        if (w == NULL)
            return;
        h->head[k] = w->next;
        if (h->head[k] == NULL)
            h->tail[k] = NULL;
        w->next = NULL;
        host_hold(h, w);
        if (!hs->admit(w->ud, w))
            host_unhold(h, w);
    }
}

unsigned
hostsched_inflight(const struct hostsched_ticket *t)
{
    return t->host != NULL ? t->host->inflight : 0;
}

unsigned
hostsched_suspect_inflight(const struct hostsched_ticket *t)
{
    return t->host != NULL ? t->host->suspect_inflight : 0;
}
