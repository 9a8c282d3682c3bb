/* acceptguard.c - pause a listener on EMFILE and count (acceptguard.h). */
#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <string.h>

#define RS_LOG_MODULE "accept"
#include "acceptguard.h"
#include "rs_alloc.h"
#include "rs_log.h"

struct acceptguard {
    struct evconnlistener *l;
    struct event *resume;
    const char *what;
    uint64_t refused;
};

/* libevent hands an error callback the listener's own argument, which for
 * evhttp's listener is evhttp's: the guard is found by listener instead.
 * A process has a couple of listeners; main thread only. */
#define GUARDS_MAX 8
static struct acceptguard *guards[GUARDS_MAX];

static struct acceptguard *
guard_of(const struct evconnlistener *l)
{
    for (int i = 0; i < GUARDS_MAX; i++)
        if (guards[i] != NULL && guards[i]->l == l)
            return guards[i];
    return NULL;
}

static void
on_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct acceptguard *g = arg;
    evconnlistener_enable(g->l);
}

static void
on_accept_error(struct evconnlistener *l, void *arg)
{
    (void)arg;
    int err = EVUTIL_SOCKET_ERROR();
    struct acceptguard *g = guard_of(l);
    if (g == NULL)
        return;
    g->refused++;
    if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        static const struct timeval pause = { 0, 100000 };
        evconnlistener_disable(l);
        event_add(g->resume, &pause);
        if (g->refused % 1000 == 1)
            rs_log(RS_LOG_WARN, "%s: accept: %s (refused %llu so far); pausing "
                   "the listener", g->what, strerror(err),
                   (unsigned long long)g->refused);
    }
}

struct acceptguard *
acceptguard_new(struct event_base *base, struct evconnlistener *l,
                const char *what)
{
    struct acceptguard *g = rs_calloc(1, sizeof(*g));
    if (g == NULL)
        return NULL;
    g->l = l;
    g->what = what;
    g->resume = evtimer_new(base, on_resume, g);
    int slot = 0;
    while (slot < GUARDS_MAX && guards[slot] != NULL)
        slot++;
    if (g->resume == NULL || slot == GUARDS_MAX) {
        if (g->resume != NULL)
            event_free(g->resume);
        rs_free(g);
        return NULL;
    }
    guards[slot] = g;
    evconnlistener_set_error_cb(l, on_accept_error);
    return g;
}

uint64_t
acceptguard_refused(const struct acceptguard *g)
{
    return g != NULL ? g->refused : 0;
}

void
acceptguard_free(struct acceptguard *g)
{
    if (g == NULL)
        return;
    for (int i = 0; i < GUARDS_MAX; i++)
        if (guards[i] == g)
            guards[i] = NULL;
    event_free(g->resume);
    rs_free(g);
}
