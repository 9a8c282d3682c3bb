/*
 * poller.h - one Source, followed: a state machine that discovers its
 * Capability Lists (client/discovery), then polls - reads its Source
 * Description and Capability Lists again (conditional GETs, at most once
 * a minute), walks each Change List (clscan.c) or, for a Capability List
 * without one, its Resource List (rldiff.c), and watches the Resource
 * List of the others (a regenerated one is a framework notification) -
 * and puts what changed in the Source's outbox (outbox.c), which sends it
 * to the hub. Polite: one request in flight, no document asked for twice
 * within --interval, a 429 or 503's Retry-After honoured, backoff on
 * errors. It also learns the hub's channels for the Source's topics
 * (rs_channels) and keeps what the bridged documents are made of - the
 * original Capability Lists - for site.c.
 */
#ifndef BRIDGE_POLLER_H
#define BRIDGE_POLLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outbox.h"
#include "rs_doc.h"
#include "rs_error.h"
#include "rs_time.h"

struct event_base;
struct rs_http;
struct rs_metrics_counter;
struct store;
struct poller;

/* Counters shared by every poller (rs_metrics handles; NULL ok). */
struct poller_metrics {
    struct rs_metrics_counter *polls_ok, *polls_failed;
    struct rs_metrics_counter *requests, *not_modified;
    struct rs_metrics_counter *changes, *framework;
    struct rs_metrics_counter *rewritten, *lost, *late;
    struct rs_metrics_counter *skipped;     /* malformed entries skipped */
};

struct poller_opts {
    struct event_base *base;
    struct rs_http *http;          /* the Sources' client */
    struct rs_http *hub_http;      /* the hub's client */
    struct store *st;
    const char *name;              /* [A-Za-z0-9._-]+ */
    const char *url;               /* as given: any URL discovery takes */
    const char *bridged;           /* PUBLIC/s/NAME/ */
    const char *hub;
    const char *token;             /* or NULL */
    int64_t interval_ms;           /* the floor between two polls, and
                                      between two requests of a document */
    int64_t idle_interval_ms;      /* polls slow down to this while nothing
                                      changes (<= interval_ms: never) */
    unsigned timeout_ms;           /* one request */
    int64_t batch_ms;              /* the outbox's gathering window */
    int64_t retry_max_ms;          /* ... its longest pause */
    size_t max_notification;
    const struct poller_metrics *metrics;   /* or NULL */
    /* Read once (the first poll ended, well or not) and the hub's
     * channels asked about: called once. */
    void (*on_ready)(void *ud);
    void *ud;
};

/* NULL with *err (a static string). */
struct poller *poller_new(const struct poller_opts *o, const char **err);
/* After rs_http_free of both clients. NULL ok. */
void poller_free(struct poller *p);

void poller_start(struct poller *p);
/* Stop polling (a request out is abandoned) and send what is gathering:
 * the drain. */
void poller_drain(struct poller *p);
/* No POST to the hub in flight. */
bool poller_idle(const struct poller *p);
/* SIGHUP: topics stopped by a 4xx resume, the hub is asked again. */
void poller_reload(struct poller *p);
/* SIGHUP: the hub token changed (NULL: none). Publishes and the channel
 * lookups use it from now on (outbox_set_token, rs_channels_set_token).
 * 0 or RS_ENOMEM. */
int poller_set_token(struct poller *p, const char *token) RS_MUST_CHECK;

/* ------------------------------------------------ what site.c serves */

const char *poller_name(const struct poller *p);
const char *poller_url(const struct poller *p);
const char *poller_bridged(const struct poller *p);
const char *poller_topic(const struct poller *p, enum outbox_lane lane);
const char *poller_state(const struct poller *p);
bool poller_ready(const struct poller *p);       /* read once */

/* A Capability List of the Source, as last read. */
struct poller_cap {
    int64_t k;                     /* capabilitylist/K.xml */
    const char *url;               /* the original's URL */
    const struct rs_doc *doc;      /* the original, or NULL: not read */
};
size_t poller_ncaps(const struct poller *p);
/* The i-th (0 <= i < poller_ncaps); false when gone from the Source. */
bool poller_cap(const struct poller *p, size_t i, struct poller_cap *out);
/* The one numbered k; false when there is none. */
bool poller_cap_k(const struct poller *p, int64_t k, struct poller_cap *out);

/* The hub's channel for lane's topic (ws://), or NULL; the rel="hub" to
 * advertise with the topic. Valid until the next loop turn. */
const char *poller_ws(const struct poller *p, enum outbox_lane lane);
const char *poller_hub(const struct poller *p, enum outbox_lane lane);

struct poller_stats {
    rs_time_t last_poll;           /* the last poll's end, RS_TIME_NONE */
    rs_time_t last_change;         /* the last change found, RS_TIME_NONE */
    uint64_t polls, errors;        /* since start */
    uint64_t entries_skipped;      /* malformed list entries skipped, each
                                      read of its document (since start) */
    const char *last_error;        /* NULL: none since start */
    struct outbox_stats outbox;
};
void poller_stats(const struct poller *p, struct poller_stats *out);

#endif
