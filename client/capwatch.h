/*
 * capwatch.h - keeping what one Capability List offers current. The list
 * is read again when the caller asks (at every poll, on a framework
 * notification about it): a conditional GET, so an unchanged list costs a
 * 304. A changed offer (documents, channels) is handed over; a read that
 * fails keeps the offer as it was. What to do with a channel that came or
 * went is the caller's.
 */
#ifndef SUB_CAPWATCH_H
#define SUB_CAPWATCH_H

#include <stdint.h>

#include "discovery.h"

struct event_base;
struct rs_http;
struct capwatch;

struct capwatch_opts {
    struct event_base *base;
    struct rs_http *http;
    unsigned timeout_ms;          /* one read; 0 = 30 s */
    /* The list now offers *now, which differs from the last offer seen.
     * *now is the callee's (discovery_set_clear); its caplist is the URL
     * watched, whatever redirects the read followed. */
    void (*on_change)(void *ud, struct discovery_set *now);
    /* A read failed: why, one line (the offer is kept). May be NULL. */
    void (*on_error)(void *ud, const char *why);
    void *ud;
};

/* Watch current->caplist, starting from *current (copied). NULL when out
 * of memory. */
struct capwatch *capwatch_new(const struct capwatch_opts *o,
                              const struct discovery_set *current);
/* No callback after this. NULL ok; not from inside a capwatch callback. */
void capwatch_free(struct capwatch *cw);

/* Read the list again, from the loop (never inside this call). One read is
 * out at a time; asking while one is out reads once more after it. */
void capwatch_check(struct capwatch *cw);

struct capwatch_stats {
    uint64_t reads;               /* requests made */
    uint64_t not_modified;        /* answered 304 */
    uint64_t changes;             /* on_change calls */
    uint64_t errors;              /* on_error calls */
};
void capwatch_stats(const struct capwatch *cw, struct capwatch_stats *out);

#endif
