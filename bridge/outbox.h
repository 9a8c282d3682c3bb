/*
 * outbox.h - one Source's durable outbox: the changes and framework events
 * the bridge detected, in SQLite (table outbox), sent to the hub in order
 * by one rs_publisher per topic (common/): change notifications on the
 * Source's change topic, framework notifications on its framework topic.
 * Each topic has its sequence (lanes.head), its watermark (lanes.pushed,
 * the last seq the hub accepted), its X-Publish-Id KEY drawn at the first
 * start and its marks (rs_publisher.h). An entry is added inside the
 * caller's transaction - the one that moves the Source's detection
 * position - and sent once it committed (outbox_kick). Notifications
 * carry the Source's original URIs; their rs:ln rel="up" is the bridged
 * Capability List the change came through.
 */
#ifndef BRIDGE_OUTBOX_H
#define BRIDGE_OUTBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_doc.h"
#include "rs_error.h"
#include "rs_time.h"
#include "store.h"

struct event_base;
struct rs_http;
struct outbox;

enum outbox_lane {
    OUTBOX_CHANGE = 0,
    OUTBOX_FRAMEWORK,
    OUTBOX_LANES,
};

/* An entry of a notification. */
struct outbox_item {
    int64_t k;                 /* the bridged Capability List (rel="up") */
    const char *loc;           /* the original URI */
    enum rs_change change;
    enum rs_capability cap;    /* framework events: what the loc is */
    rs_time_t datetime;
    rs_time_t lastmod;
    const char *hash;          /* the hash attribute, or NULL */
    int64_t length;            /* -1 absent */
    const char *type;          /* or NULL */
};

struct outbox_opts {
    struct event_base *base;
    struct rs_http *http;      /* the hub's client */
    struct store *st;
    int64_t src;               /* the Source's id in the store */
    const char *name;          /* the Source's name, for logs */
    const char *hub;           /* publish URL */
    const char *topic[OUTBOX_LANES];
    const char *token;         /* or NULL */
    const char *bridged;       /* PUBLIC/s/NAME/: rel="up" is
                                  BRIDGED capabilitylist/K.xml */
    int64_t batch_ms;
    int64_t retry_max_ms;
    size_t max_bytes;
    unsigned timeout_ms;
    /* A notification was accepted (channel: X-Hub-Channel or NULL). */
    void (*on_accepted)(void *ud, enum outbox_lane lane, const char *channel);
    void *ud;
};

/* Loads (or creates) the Source's lanes. NULL with *err. */
struct outbox *outbox_new(const struct outbox_opts *o, const char **err);
/* Call after rs_http_free of the hub's client. NULL ok. */
void outbox_free(struct outbox *ob);

/* Add an entry: inside the caller's transaction (store_begin). */
int outbox_add(struct outbox *ob, enum outbox_lane lane,
               const struct outbox_item *it) RS_MUST_CHECK;
/* What was added is committed: send it (after the gathering window). */
void outbox_kick(struct outbox *ob);
void outbox_flush(struct outbox *ob);          /* the drain */
void outbox_resume(struct outbox *ob);         /* SIGHUP */
/* The hub token changed (SIGHUP re-read --token-file; NULL: none): each
 * topic's POSTs carry it from now on, and one in flight refused with the
 * old token is sent again with it (rs_publisher_set_token); a topic a 4xx
 * stopped goes again with outbox_resume. 0 or RS_ENOMEM. */
int outbox_set_token(struct outbox *ob, const char *token) RS_MUST_CHECK;
bool outbox_idle(const struct outbox *ob);     /* no POST in flight */

struct outbox_stats {
    int64_t pending[OUTBOX_LANES];     /* added, not yet accepted */
    int64_t accepted[OUTBOX_LANES];    /* entries the hub accepted, ever */
    bool stopped[OUTBOX_LANES];        /* a 4xx stopped the topic */
    uint64_t posts, retries, failures, duplicates;   /* since start */
    /* A topic's POSTs fail: one failed (or a 4xx stopped it) since the
     * hub last accepted one. Cleared by the next acceptance. */
    bool hub_failing[OUTBOX_LANES];
    rs_time_t hub_failing_since;       /* when the first of those failed;
                                          RS_TIME_NONE: none failing */
    uint64_t hub_failures;             /* failed POSTs since then */
    char hub_error[300];               /* "HTTP 503: the hub's words
                                          (retrying)", "no answer: why"...;
                                          "": none failing */
};
void outbox_stats(const struct outbox *ob, struct outbox_stats *out);

/* The bridged Capability List K's URL into buf. 0 or RS_ETOOBIG. */
int outbox_caplist_url(const char *bridged, int64_t k, char *buf, size_t len)
    RS_MUST_CHECK;

#endif
