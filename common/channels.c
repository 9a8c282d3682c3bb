/*
 * channels.c - learning the hub's channels for one Source's topics (see
 * rs_channels.h). A small state machine: IDLE -> REGISTER (one POST
 * /topics per topic) -> [TOPICS (GET /topics, for the topics a hub without
 * POST /topics could not name)] -> ENTRIES (one GET per topic the hub
 * named) -> IDLE; failures go to a retry timer, success to a slow refresh
 * timer.
 */
#include "rs_channels.h"

#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RS_LOG_MODULE "channels"
#include "rs_alloc.h"
#include "rs_backoff.h"
#include "rs_http.h"
#include "rs_log.h"
#include "rs_parse.h"
#include "rs_time.h"
#include "rs_url.h"

#define CH_REFRESH_MS (10 * 60 * 1000)
#define CH_RETRY_MIN_MS 2000
#define CH_RETRY_MAX_MS (5 * 60 * 1000)
#define CH_NAME_MAX 256
#define CH_LANES RS_CHANNELS_KINDS

enum ch_state { CH_IDLE = 0, CH_REGISTER, CH_TOPICS, CH_ENTRIES };

static const char *const ch_state_names[] = { "idle", "register", "topics",
                                              "entries" };

struct ch_lane {
    char name[CH_NAME_MAX];        /* the hub's name for the topic, or "" */
    char *ws;                      /* the WebSocket channel, or NULL */
    char *hub;                     /* rel="hub" as the hub gives it */
    bool lookup;                   /* REGISTER did not name it: GET /topics */
    long refused;                  /* the status of the hub's last refusal
                                      (401, 403, 409), 0 if none: logged
                                      when it changes */
};

struct rs_channels {
    struct rs_channels_opts o;          /* strings below are our copies */
    char *hub, *topic[CH_LANES];
    enum ch_state state;
    int lane;                      /* REGISTER, ENTRIES: the lane asked about */
    char *topics_url;
    char *auth;                    /* "Authorization: Bearer ...", or NULL */
    struct ch_lane lanes[CH_LANES];
    struct event *timer;
    struct rs_backoff retry;        /* 2 s doubling to 5 min, no jitter */
    unsigned fails;                /* rounds failed since the last success */
    struct rs_http_req *req;
    bool settled;                  /* the first round is over */
};

static void ch_next(struct rs_channels *ch);
static void ch_register_next(struct rs_channels *ch);

static void
ch_set_state(struct rs_channels *ch, enum ch_state to)
{
    if (ch->state != to)
        rs_log_kv(RS_LOG_DEBUG, "hub channels", "from",
                  ch_state_names[ch->state], "to", ch_state_names[to], NULL);
    ch->state = to;
}

/* A round ended (IDLE again): the first one lets rssource serve. */
static void
round_over(struct rs_channels *ch)
{
    if (ch->settled)
        return;
    ch->settled = true;
    if (ch->o.on_settled != NULL)
        ch->o.on_settled(ch->o.ud);
}

/* ------------------------------------------------------------ the set */

static bool
set_str(char **dst, const char *v)
{
    if (v == NULL || (*dst != NULL && strcmp(*dst, v) == 0))
        return false;
    char *s = rs_strdup(v);
    if (s == NULL)
        return false;
    rs_free(*dst);
    *dst = s;
    return true;
}

static void
changed(struct rs_channels *ch)
{
    if (ch->o.on_change != NULL)
        ch->o.on_change(ch->o.ud);
}

/* -------------------------------------------------------------- timer */

static void
arm(struct rs_channels *ch, int64_t ms)
{
    struct timeval tv = rs_time_tv_ms(ms);
    event_add(ch->timer, &tv);
}

static void
fail(struct rs_channels *ch, const char *why)
{
    rs_log_kv(RS_LOG_DEBUG, "cannot learn the hub's channels yet", "why", why,
              NULL);
    ch_set_state(ch, CH_IDLE);
    arm(ch, (int64_t)rs_backoff_delay(&ch->retry, ++ch->fails));
    round_over(ch);
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rs_channels_refresh(arg);
}

/* ------------------------------------------------------------ answers */

/* A hub's topic name goes into a URL path: [A-Za-z0-9._-] only. */
static bool
name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= CH_NAME_MAX)
        return false;
    return strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        "0123456789._-") == n &&
           strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

static void
on_topics(void *ud, struct rs_http_req *req, const struct rs_http_result *res)
{
    (void)req;
    struct rs_channels *ch = ud;
    ch->req = NULL;
    if (res->rc == RS_ECANCELED)
        return;
    if (res->rc != 0 || res->status != 200 || res->body == NULL) {
        fail(ch, res->rc != 0 ? res->errstr : "GET /topics failed");
        return;
    }
    json_error_t jerr;
    json_t *arr = json_loadb(res->body, res->body_len, 0, &jerr);
    if (!json_is_array(arr)) {
        json_decref(arr);
        fail(ch, "GET /topics: not a JSON array");
        return;
    }
    bool any = false;
    for (int k = 0; k < CH_LANES; k++) {
        if (!ch->lanes[k].lookup) {
            any |= ch->lanes[k].name[0] != '\0';
            continue;
        }
        size_t i;
        json_t *t;
        json_array_foreach(arr, i, t) {
            const char *uri = json_string_value(json_object_get(t, "topic"));
            const char *name = json_string_value(json_object_get(t, "name"));
            if (uri != NULL && name != NULL && strcmp(uri, ch->o.topic[k]) == 0 &&
                name_ok(name)) {
                snprintf(ch->lanes[k].name, CH_NAME_MAX, "%s", name);
                any = true;
            }
        }
    }
    json_decref(arr);
    if (!any) {
        /* a hub without POST /topics, in open mode, learns a topic at its
         * first publish */
        fail(ch, "the hub does not know our topics yet");
        return;
    }
    ch_set_state(ch, CH_ENTRIES);
    ch->lane = -1;
    ch_next(ch);
}

/* The answer to POST /topics for ch->lane. */
static void
on_registered(void *ud, struct rs_http_req *req, const struct rs_http_result *res)
{
    (void)req;
    struct rs_channels *ch = ud;
    struct ch_lane *l = &ch->lanes[ch->lane];
    ch->req = NULL;
    if (res->rc == RS_ECANCELED)
        return;
    if (res->rc != 0 || res->status >= 500 || res->status == 429 ||
        res->status == 408) {
        fail(ch, res->rc != 0 ? res->errstr : "POST /topics: the hub failed");
        return;
    }
    if (res->status == 401 || res->status == 403 || res->status == 409) {
        /* A configuration problem the Source's operator must see, once:
         * our token, or a topic the hub holds with the other kind. */
        if (l->refused != res->status) {
            char st[16];
            snprintf(st, sizeof(st), "%ld", res->status);
            size_t n = res->body != NULL ? strcspn(res->body, "\r\n") : 0;
            char why[256];
            snprintf(why, sizeof(why), "%.*s", (int)(n < 200 ? n : 200),
                     res->body != NULL ? res->body : "");
            rs_log_kv(RS_LOG_WARN, "the hub refuses our topic: no channel "
                      "advertised for it", "topic", ch->o.topic[ch->lane],
                      "status", st, "hub_says", why, NULL);
        }
        l->refused = res->status;
        ch_register_next(ch);
        return;
    }
    l->refused = 0;
    if (res->status < 200 || res->status > 299) {
        /* No POST /topics (not an rshub, or an older one), or a topic it
         * does not know: the list may still name it. */
        l->lookup = true;
        ch_register_next(ch);
        return;
    }
    json_error_t jerr;
    json_t *o = res->body != NULL ? json_loadb(res->body, res->body_len, 0, &jerr)
                                  : NULL;
    const char *uri = json_string_value(json_object_get(o, "topic"));
    const char *name = json_string_value(json_object_get(o, "name"));
    bool good = uri != NULL && name != NULL &&
                strcmp(uri, ch->o.topic[ch->lane]) == 0 && name_ok(name);
    if (good)
        snprintf(l->name, CH_NAME_MAX, "%s", name);
    json_decref(o);
    if (!good) {
        fail(ch, "POST /topics: not the JSON object of our topic");
        return;
    }
    ch_register_next(ch);
}

struct entries_ctx {
    struct rs_channels *ch;
    int lane;
    bool changed;
};

static int
on_entry(void *ud, const struct rs_entry *e)
{
    struct entries_ctx *x = ud;
    struct ch_lane *l = &x->ch->lanes[x->lane];
    if (strncmp(e->loc, "ws://", 5) == 0 || strncmp(e->loc, "wss://", 6) == 0) {
        x->changed |= set_str(&l->ws, e->loc);
    } else if (strcmp(e->loc, x->ch->o.topic[x->lane]) == 0) {
        const struct rs_link *hub = rs_links_find(e->links, e->nlinks, "hub");
        if (hub != NULL)
            x->changed |= set_str(&l->hub, hub->href);
    }
    return 0;
}

static void
on_entries(void *ud, struct rs_http_req *req, const struct rs_http_result *res)
{
    (void)req;
    struct rs_channels *ch = ud;
    ch->req = NULL;
    if (res->rc == RS_ECANCELED)
        return;
    if (res->rc != 0 || res->status != 200 || res->body == NULL) {
        fail(ch, res->rc != 0 ? res->errstr : "capabilitylist-entries failed");
        return;
    }
    /* A fragment of <url> elements: parse it inside a Capability List. */
    static const char head[] =
        "<urlset xmlns=\"" RS_NS_SITEMAP "\" xmlns:rs=\"" RS_NS_RS "\">"
        "<rs:md capability=\"capabilitylist\"/>";
    static const char tail[] = "</urlset>";
    struct entries_ctx x = { .ch = ch, .lane = ch->lane };
    struct rs_parser_cbs cbs = { .on_entry = on_entry };
    struct rs_parser *p = rs_parser_new(NULL, &cbs, &x);
    int rc = p == NULL ? RS_ENOMEM : rs_parser_feed(p, head, sizeof(head) - 1);
    if (rc == 0)
        rc = rs_parser_feed(p, res->body, res->body_len);
    if (rc == 0)
        rc = rs_parser_feed(p, tail, sizeof(tail) - 1);
    if (rc == 0)
        rc = rs_parser_finish(p);
    rs_parser_free(p);
    if (rc != 0) {
        fail(ch, "capabilitylist-entries: not parseable");
        return;
    }
    if (x.changed) {
        rs_log_kv(RS_LOG_INFO, "hub channels learned", "topic",
                  ch->o.topic[ch->lane], "ws",
                  ch->lanes[ch->lane].ws, NULL);
        changed(ch);
    }
    ch_next(ch);
}

/* ---------------------------------------------------------- requests */

typedef void (*ch_done_cb)(void *, struct rs_http_req *,
                           const struct rs_http_result *);

static void
ch_get(struct rs_channels *ch, const char *url, ch_done_cb done)
{
    /* the publish token: a hub shows a private topic's channels to its
     * publisher (docs/protocol.md 6) */
    const char *headers[2] = { ch->auth, NULL };
    struct rs_http_req_opts ro = {
        .url = url,
        .timeout_ms = 5000,
        .max_body = 4 * 1024 * 1024,
        .headers = ch->auth != NULL ? headers : NULL,
        .on_done = done,
        .ud = ch,
    };
    if (rs_http_request(ch->o.http, &ro, &ch->req) != 0) {
        ch->req = NULL;
        fail(ch, "cannot start a request");
    }
}

/* REGISTER: POST /topics for the next lane; then look up what it could
 * not name, or ask for the entries. */
static void
ch_register_next(struct rs_channels *ch)
{
    if (++ch->lane < CH_LANES) {
        static const char *const kinds[CH_LANES] = { "change", "framework" };
        char *enc = evhttp_uriencode(ch->o.topic[ch->lane], -1, 1);
        size_t n = enc != NULL ? strlen(enc) + 32 : 0;
        char *body = enc != NULL ? rs_malloc(n) : NULL;
        if (body == NULL) {
            free(enc);
            fail(ch, "out of memory");
            return;
        }
        int len = snprintf(body, n, "topic=%s&kind=%s", enc, kinds[ch->lane]);
        free(enc);
        const char *headers[3] = {
            "Content-Type: application/x-www-form-urlencoded", ch->auth, NULL
        };
        struct rs_http_req_opts ro = {
            .method = "POST",
            .url = ch->topics_url,
            .headers = headers,
            .body = body,
            .body_len = (size_t)len,
            .timeout_ms = 5000,
            .max_body = 1024 * 1024,
            .on_done = on_registered,
            .ud = ch,
        };
        int rc = rs_http_request(ch->o.http, &ro, &ch->req);
        rs_free(body);
        if (rc != 0) {
            ch->req = NULL;
            fail(ch, "cannot start a request");
        }
        return;
    }
    for (int k = 0; k < CH_LANES; k++) {
        if (ch->lanes[k].lookup) {
            ch_set_state(ch, CH_TOPICS);
            ch_get(ch, ch->topics_url, on_topics);
            return;
        }
    }
    ch_set_state(ch, CH_ENTRIES);
    ch->lane = -1;
    ch_next(ch);
}

/* ENTRIES: ask about the next lane the hub named, or finish. */
static void
ch_next(struct rs_channels *ch)
{
    while (++ch->lane < CH_LANES) {
        if (ch->lanes[ch->lane].name[0] == '\0')
            continue;
        char rel[CH_NAME_MAX + 64];
        char *url = NULL;
        snprintf(rel, sizeof(rel), "topics/%s/capabilitylist-entries",
                 ch->lanes[ch->lane].name);
        if (rs_url_resolve(ch->o.hub, rel, &url) != 0) {
            fail(ch, "bad topic name");
            return;
        }
        ch_get(ch, url, on_entries);
        rs_free(url);
        return;
    }
    ch_set_state(ch, CH_IDLE);
    ch->fails = 0;
    bool all = true;
    for (int k = 0; k < CH_LANES; k++)
        all &= ch->lanes[k].ws != NULL;
    arm(ch, all ? CH_REFRESH_MS : CH_RETRY_MIN_MS * 5);
    round_over(ch);
}

/* ------------------------------------------------------------- public */

struct rs_channels *
rs_channels_new(const struct rs_channels_opts *o, const char **err)
{
    *err = "out of memory";
    struct rs_channels *ch = rs_calloc(1, sizeof(*ch));
    if (ch == NULL)
        return NULL;
    ch->o = *o;
    ch->retry = (struct rs_backoff){ .first_ms = CH_RETRY_MIN_MS,
                                     .max_ms = CH_RETRY_MAX_MS };
    if (o->hub == NULL || (ch->hub = rs_strdup(o->hub)) == NULL)
        goto fail;
    ch->o.hub = ch->hub;
    for (int k = 0; k < CH_LANES; k++) {
        if (o->topic[k] == NULL ||
            (ch->topic[k] = rs_strdup(o->topic[k])) == NULL)
            goto fail;
        ch->o.topic[k] = ch->topic[k];
    }
    ch->o.token = NULL;
    /* the status endpoints sit beside the publish URL: HUB/../topics */
    if (rs_url_resolve(o->hub, "topics", &ch->topics_url) != 0) {
        *err = "--hub: not a URL";
        goto fail;
    }
    if (rs_channels_set_token(ch, o->token) != 0)
        goto fail;
    ch->timer = event_new(o->base, -1, 0, on_timer, ch);
    if (ch->timer == NULL)
        goto fail;
    *err = NULL;
    return ch;
fail:
    rs_channels_free(ch);
    return NULL;
}

int
rs_channels_set_token(struct rs_channels *ch, const char *token)
{
    char *auth = NULL;
    if (token != NULL) {
        size_t n = strlen(token) + 32;
        if ((auth = rs_malloc(n)) == NULL)
            return RS_ENOMEM;
        snprintf(auth, n, "Authorization: Bearer %s", token);
    }
    if (ch->auth != NULL)
        explicit_bzero(ch->auth, strlen(ch->auth));
    rs_free(ch->auth);
    ch->auth = auth;
    return 0;
}

void
rs_channels_free(struct rs_channels *ch)
{
    if (ch == NULL)
        return;
    if (ch->timer != NULL)
        event_free(ch->timer);
    for (int k = 0; k < CH_LANES; k++) {
        rs_free(ch->lanes[k].ws);
        rs_free(ch->lanes[k].hub);
        rs_free(ch->topic[k]);
    }
    rs_free(ch->hub);
    rs_free(ch->topics_url);
    if (ch->auth != NULL)
        explicit_bzero(ch->auth, strlen(ch->auth));
    rs_free(ch->auth);
    rs_free(ch);
}

void
rs_channels_refresh(struct rs_channels *ch)
{
    if (ch->state != CH_IDLE)
        return;
    event_del(ch->timer);
    /* Every round asks afresh: the hub may have been replaced since. */
    for (int k = 0; k < CH_LANES; k++) {
        ch->lanes[k].name[0] = '\0';
        ch->lanes[k].lookup = false;
    }
    ch_set_state(ch, CH_REGISTER);
    ch->lane = -1;
    ch_register_next(ch);
}

void
rs_channels_on_accepted(struct rs_channels *ch, enum rs_channels_kind kind,
                        const char *channel)
{
    struct ch_lane *l = &ch->lanes[kind];
    if (l->ws != NULL)
        return;
    if (channel != NULL && (strncmp(channel, "ws://", 5) == 0 ||
                            strncmp(channel, "wss://", 6) == 0) &&
        set_str(&l->ws, channel)) {
        rs_log_kv(RS_LOG_INFO, "hub channel learned from a publish", "topic",
                  ch->o.topic[kind], "ws", channel, NULL);
        changed(ch);
    }
    /* A hub that does not know /topics (not an rshub) would otherwise be
     * asked at every publish: only when no retry is already planned. */
    if (!evtimer_pending(ch->timer, NULL))
        rs_channels_refresh(ch);
}

const char *
rs_channels_topic(const struct rs_channels *ch, enum rs_channels_kind kind)
{
    return ch->o.topic[kind];
}

const char *
rs_channels_ws(const struct rs_channels *ch, enum rs_channels_kind kind)
{
    return ch->lanes[kind].ws;
}

const char *
rs_channels_hub(const struct rs_channels *ch, enum rs_channels_kind kind)
{
    return ch->lanes[kind].hub != NULL ? ch->lanes[kind].hub : ch->o.hub;
}

bool
rs_channels_settled(const struct rs_channels *ch)
{
    return ch->settled;
}
