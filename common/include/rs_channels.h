/*
 * rs_channels.h - learning from the hub the notification channels of one
 * Source's two topics (its change topic and its framework topic): the
 * hub's WebSocket channel (ws://) for each, and the rel="hub" it gives
 * with the WebSub topic. POST HUB/../topics registers each topic (open
 * mode) or looks it up (closed mode) and gives the hub's name for it,
 * before anything was published (docs/source.md 8); a hub without that
 * endpoint is asked GET HUB/../topics instead. Then GET
 * .../topics/NAME/capabilitylist-entries gives the entries themselves
 * (docs/protocol.md 6); the X-Hub-Channel header of an accepted publish
 * fills in meanwhile. Asked again every 10 minutes (10 s while a channel
 * is missing, backing off to 5 minutes while the hub fails). rssource
 * advertises what this learns in its Capability List (source/channels.c),
 * rsbridge in each bridged Capability List; how they write it is theirs.
 */
#ifndef RS_CHANNELS_H
#define RS_CHANNELS_H

#include <stdbool.h>

#include "rs_error.h"

struct event_base;
struct rs_http;
struct rs_channels;

enum rs_channels_kind {
    RS_CHANNELS_CHANGE = 0,      /* the change topic (kind=change) */
    RS_CHANNELS_FRAMEWORK,       /* the framework topic (kind=framework) */
    RS_CHANNELS_KINDS,
};

struct rs_channels_opts {
    struct event_base *base;
    struct rs_http *http;
    const char *hub;                   /* publish URL */
    const char *topic[RS_CHANNELS_KINDS];
    const char *token;                 /* bearer token, or NULL */
    /* What the hub gives changed (a channel came, went or moved). */
    void (*on_change)(void *ud);
    /* The first round of questions to the hub is over, whatever its
     * outcome (learned, refused, hub down): called once, after any
     * on_change it caused. NULL ok. */
    void (*on_settled)(void *ud);
    void *ud;
};

/* o is copied (its strings too). NULL with *err: out of memory, or a hub
 * that is not a URL. Nothing is asked before rs_channels_refresh. */
struct rs_channels *rs_channels_new(const struct rs_channels_opts *o,
                                    const char **err);
/* Call after rs_http_free (which completes its requests). NULL ok. */
void rs_channels_free(struct rs_channels *ch);
/* A new bearer token (NULL: none) for the requests from now on (each
 * copies its headers when it starts). 0 or RS_ENOMEM (the old one
 * stays). */
int rs_channels_set_token(struct rs_channels *ch,
                          const char *token) RS_MUST_CHECK;

/* Ask the hub now (unless a round is under way). */
void rs_channels_refresh(struct rs_channels *ch);
/* A publish to kind's topic was accepted; channel is its X-Hub-Channel
 * (or NULL). */
void rs_channels_on_accepted(struct rs_channels *ch,
                             enum rs_channels_kind kind, const char *channel);

/* The topic URI of kind (as given). */
const char *rs_channels_topic(const struct rs_channels *ch,
                              enum rs_channels_kind kind);
/* The hub's WebSocket channel for kind, or NULL while none is known (or
 * the hub refused the topic). Valid until the next loop turn. */
const char *rs_channels_ws(const struct rs_channels *ch,
                           enum rs_channels_kind kind);
/* The rel="hub" to advertise with kind's WebSub topic: the hub's own
 * (capabilitylist-entries), else the publish URL. */
const char *rs_channels_hub(const struct rs_channels *ch,
                            enum rs_channels_kind kind);
/* Is the first round over (on_settled ran)? */
bool rs_channels_settled(const struct rs_channels *ch);

#endif
