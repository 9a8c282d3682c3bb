/*
 * channels.h - the notification channels rssource advertises in its
 * Capability List: for each topic, the WebSub entry (the topic URI with
 * rel="hub") and the hub's WebSocket channel (ws://). What the hub gives
 * is learned by rs_channels (common/rs_channels.h: POST /topics, the
 * capabilitylist-entries, X-Hub-Channel; docs/source.md 8), which rsbridge
 * shares; this module writes it as docs.c's entries. Until the hub has
 * answered, the WebSub entries built from the configuration are
 * advertised.
 */
#ifndef SOURCE_CHANNELS_H
#define SOURCE_CHANNELS_H

#include <stddef.h>

#include "docs.h"
#include "push.h"

struct event_base;
struct rs_http;

struct channels_opts {
    struct event_base *base;
    struct rs_http *http;
    const char *hub;                   /* publish URL */
    const char *topic[PUSH_LANES];
    const char *token;                 /* bearer token, or NULL */
    /* The advertised set changed (the Capability List was updated). */
    void (*on_change)(void *ud);
    /* The first round of questions to the hub is over, whatever its
     * outcome (learned, refused, hub down): called once, after any
     * on_change it caused. NULL ok. */
    void (*on_settled)(void *ud);
    void *ud;
};

struct channels;

struct channels *channels_new(const struct channels_opts *o,
                              const char **err);
/* Call after rs_http_free (which completes its requests). NULL ok. */
void channels_free(struct channels *ch);

/* Ask the hub now (unless a query is under way). */
void channels_refresh(struct channels *ch);
/* A publish on lane was accepted; channel is X-Hub-Channel (or NULL). */
void channels_on_accepted(struct channels *ch, enum push_lane lane,
                          const char *channel);

/* The entries to advertise; valid until the next loop turn. ud is the
 * struct channels (fits serve_opts.channels). */
const struct docs_channel *channels_get(void *ud, size_t *n);

#endif
