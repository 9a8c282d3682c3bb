/*
 * channels.c - the notification entries of rssource's Capability List
 * (see channels.h): what rs_channels (common/) learns from the hub for our
 * two topics, written as docs.c's docs_channel entries - per topic the
 * WebSub entry, then the hub's WebSocket channel once it is known.
 */
#include "channels.h"

#include "rs_alloc.h"
#include "rs_channels.h"

struct channels {
    struct channels_opts o;
    struct rs_channels *rc;
    struct docs_channel out[2 * PUSH_LANES];
    size_t nout;
};

_Static_assert((int)PUSH_CHANGE == (int)RS_CHANNELS_CHANGE &&
                   (int)PUSH_FRAMEWORK == (int)RS_CHANNELS_FRAMEWORK &&
                   (int)PUSH_LANES == (int)RS_CHANNELS_KINDS,
               "a push lane is a channel kind");

static void
rebuild(struct channels *ch)
{
    size_t n = 0;
    for (int k = 0; k < PUSH_LANES; k++) {
        enum rs_capability cap = k == PUSH_CHANGE
                                     ? RS_CAP_CHANGELIST_NOTIFICATION
                                     : RS_CAP_FRAMEWORK_NOTIFICATION;
        const char *ws = rs_channels_ws(ch->rc, (enum rs_channels_kind)k);
        ch->out[n++] = (struct docs_channel){
            .loc = ch->o.topic[k],
            .cap = cap,
            .hub = rs_channels_hub(ch->rc, (enum rs_channels_kind)k),
        };
        if (ws != NULL)
            /* The 2013 draft defines ws:// channels, and names the change
             * channel "change-notification" (docs/protocol.md 6). */
            ch->out[n++] = (struct docs_channel){
                .loc = ws,
                .cap = cap,
                .alpha = k == PUSH_CHANGE,
            };
    }
    ch->nout = n;
}

static void
on_change(void *ud)
{
    struct channels *ch = ud;
    rebuild(ch);
    if (ch->o.on_change != NULL)
        ch->o.on_change(ch->o.ud);
}

static void
on_settled(void *ud)
{
    struct channels *ch = ud;
    if (ch->o.on_settled != NULL)
        ch->o.on_settled(ch->o.ud);
}

struct channels *
channels_new(const struct channels_opts *o, const char **err)
{
    *err = "out of memory";
    struct channels *ch = rs_calloc(1, sizeof(*ch));
    if (ch == NULL)
        return NULL;
    ch->o = *o;
    struct rs_channels_opts ro = {
        .base = o->base,
        .http = o->http,
        .hub = o->hub,
        .topic = { o->topic[PUSH_CHANGE], o->topic[PUSH_FRAMEWORK] },
        .token = o->token,
        .on_change = on_change,
        .on_settled = on_settled,
        .ud = ch,
    };
    ch->rc = rs_channels_new(&ro, err);
    if (ch->rc == NULL) {
        rs_free(ch);
        return NULL;
    }
    rebuild(ch);
    return ch;
}

void
channels_free(struct channels *ch)
{
    if (ch == NULL)
        return;
    rs_channels_free(ch->rc);
    rs_free(ch);
}

void
channels_refresh(struct channels *ch)
{
    rs_channels_refresh(ch->rc);
}

void
channels_on_accepted(struct channels *ch, enum push_lane lane,
                     const char *channel)
{
    rs_channels_on_accepted(ch->rc, (enum rs_channels_kind)lane, channel);
}

const struct docs_channel *
channels_get(void *ud, size_t *n)
{
    struct channels *ch = ud;
    *n = ch->nout;
    return ch->out;
}
