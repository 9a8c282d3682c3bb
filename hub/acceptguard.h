/*
 * acceptguard.h - calm handling of accept() failures for a libevent
 * listener: out of descriptors (EMFILE, ENFILE) or memory, the listener is
 * paused for 100 ms (connections wait in the kernel's backlog) instead of
 * spinning on accept(), and every failure is counted. The connections
 * already open keep being served.
 */
#ifndef HUB_ACCEPTGUARD_H
#define HUB_ACCEPTGUARD_H

#include <stdint.h>

struct event_base;
struct evconnlistener;
struct acceptguard;

/* Attach to l (which must outlive the guard). what names it in logs. */
struct acceptguard *acceptguard_new(struct event_base *base,
                                    struct evconnlistener *l, const char *what);
uint64_t acceptguard_refused(const struct acceptguard *g);
void acceptguard_free(struct acceptguard *g);

#endif
