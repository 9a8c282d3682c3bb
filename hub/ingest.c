/*
 * ingest.c - POST /hub: a Source publishes a notification (docs/protocol.md
 * 3). The body is validated by proto, the topic found from Link rel="self",
 * the publisher authenticated, and the reply sent only once Redis has
 * acknowledged the append: an accepted notification is a stored one.
 */
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define RS_LOG_MODULE "ingest"
#include "hub.h"
#include "rs_alloc.h"
#include "rs_discover.h"
#include "rs_log.h"
#include "rs_parse.h"

/* One publish waiting for Redis. */
struct publish {
    struct hub *h;
    struct evhttp_request *req;
    struct evhttp_connection *evcon;
    struct topic *topic;
    bool gone;                 /* the publisher disconnected meanwhile */
    struct timespec start;
};

/* ------------------------------------------------------------- parsing */

static int
on_self_link(void *ud, const struct rs_weblink *l)
{
    char **self = ud;
    if (*self == NULL && rs_rel_has(l->rel, "self"))
        *self = rs_strdup(l->target);
    return 0;
}

/* The topic URI from every Link header of the request (NULL if none). */
static char *
find_self_link(struct evhttp_request *req)
{
    char *self = NULL;
    struct evkeyvalq *hdrs = evhttp_request_get_input_headers(req);
    for (struct evkeyval *kv = hdrs->tqh_first; kv != NULL;
         kv = kv->next.tqe_next) {
        if (strcasecmp(kv->key, "Link") != 0)
            continue;
        if (rs_link_header_parse(kv->value, strlen(kv->value), on_self_link,
                                 &self) != 0 && self == NULL)
            break;
    }
    return self;
}

static bool
ctype_is_xml(const char *ct, size_t *len)
{
    size_t n = strcspn(ct, "; \t");
    *len = n;
    if ((n == 15 && strncasecmp(ct, "application/xml", n) == 0) ||
        (n == 8 && strncasecmp(ct, "text/xml", n) == 0))
        return true;
    return n > 4 && strncasecmp(ct + n - 4, "+xml", 4) == 0;
}

struct head_seen {
    enum rs_capability cap;
    bool alpha;
};

static int
on_head(void *ud, const struct rs_head *head)
{
    struct head_seen *hs = ud;
    hs->cap = head->md.capability;
    hs->alpha = head->md.capability_alpha;
    return rs_capability_is_notification(hs->cap) ? 0 : RS_EINVALID;
}

/* ---------------------------------------------------------------- reply */

static void
publish_free(struct publish *p)
{
    p->h->inflight--;
    rs_free(p);
}

static void
on_publisher_gone(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    struct publish *p = arg;
    p->gone = true;   /* libevent frees the request with the connection */
}

static void
on_appended(void *ud, int rc, struct msg_id id)
{
    struct publish *p = ud;
    struct hub *h = p->h;
    char idbuf[MSG_ID_BUFSZ], chan[512];

    if (rc == 0) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        h->accepted++;
        rs_metrics_histogram_observe(h->publish_seconds,
                                     (double)(now.tv_sec - p->start.tv_sec) +
                                     (double)(now.tv_nsec - p->start.tv_nsec) / 1e9);
    } else {
        h->rejected[REJ_UNAVAILABLE]++;
    }
    if (p->gone) {
        if (rc == 0)
            h->lost_clients++;
        publish_free(p);
        return;
    }
    /* before replying: the reply may end the connection */
    evhttp_connection_set_closecb(p->evcon, NULL, NULL);
    if (rc != 0) {
        evhttp_add_header(evhttp_request_get_output_headers(p->req),
                          "Retry-After", "1");
        hub_reply_text(p->req, 503, "Service Unavailable",
                       "error: not stored: the backlog (Redis) failed: %s",
                       rs_strerror(rc));
        publish_free(p);
        return;
    }
    msg_id_format(id, idbuf);
    struct evkeyvalq *out = evhttp_request_get_output_headers(p->req);
    evhttp_add_header(out, "X-Hub-Id", idbuf);
    if (hub_channel_uri(h, p->topic, chan, sizeof(chan)) == 0)
        evhttp_add_header(out, "X-Hub-Channel", chan);
    hub_reply_text(p->req, 202, "Accepted", "accepted %s", idbuf);
    publish_free(p);
}

static void
reject(struct hub *h, struct evhttp_request *req, enum hub_reject why,
       int status, const char *reason, const char *msg)
{
    h->rejected[why]++;
    hub_reply_text(req, status, reason, "error: %s", msg);
}

/* A JSON string for the topic registry: {"topic":URI,"kind":K}. */
static char *
topic_json(const struct topic *t)
{
    size_t n = strlen(t->uri) * 6 + 64;
    char *s = rs_malloc(n);
    if (s == NULL)
        return NULL;
    size_t k = (size_t)snprintf(s, n, "{\"topic\":\"");
    for (const char *c = t->uri; *c; c++) {
        if (*c == '"' || *c == '\\')
            k += (size_t)snprintf(s + k, n - k, "\\%c", *c);
        else if ((unsigned char)*c < 0x20)
            k += (size_t)snprintf(s + k, n - k, "\\u%04x", *c);
        else
            s[k++] = *c;
    }
    snprintf(s + k, n - k, "\",\"kind\":\"%s\"}", topic_kind_name(t->kind));
    return s;
}

/* ---------------------------------------------------------------- handler */

void
ingest_handle(struct hub *h, struct evhttp_request *req)
{
    char msg[400];
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);

    if (evhttp_request_get_command(req) != EVHTTP_REQ_POST) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "POST");
        reject(h, req, REJ_METHOD, 405, "Method Not Allowed",
               "publish with POST");
        return;
    }
    if (h->draining) {
        reject(h, req, REJ_UNAVAILABLE, 503, "Service Unavailable",
               "hub is shutting down");
        return;
    }
    const char *ct = evhttp_find_header(evhttp_request_get_input_headers(req),
                                        "Content-Type");
    size_t ctlen = 0;
    if (ct != NULL && strncasecmp(ct, "application/x-www-form-urlencoded", 33) == 0) {
        hub_reply_text(req, 501, "Not Implemented",
                       "error: WebSub requests (hub.mode) are not supported yet");
        return;
    }
    if (ct == NULL || !ctype_is_xml(ct, &ctlen)) {
        reject(h, req, REJ_MEDIA_TYPE, 415, "Unsupported Media Type",
               "Content-Type must be application/xml (a ResourceSync notification)");
        return;
    }

    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    if (len > h->conf->max_body) {
        reject(h, req, REJ_TOO_BIG, 413, "Payload Too Large",
               "notification larger than the hub's limit");
        return;
    }
    const char *body = (const char *)evbuffer_pullup(in, -1);
    h->bytes_in += len;

    /* The document first: a bad one is refused whatever else is wrong. */
    struct head_seen hs = { RS_CAP_NONE, false };
    struct rs_parser_cbs cbs = { .on_head = on_head };
    struct rs_parse_opts po = { .max_bytes = h->conf->max_body };
    struct rs_parser *p = rs_parser_new(&po, &cbs, &hs);
    if (p == NULL) {
        reject(h, req, REJ_UNAVAILABLE, 503, "Service Unavailable", "out of memory");
        return;
    }
    int rc = rs_parser_feed(p, body != NULL ? body : "", len);
    if (rc == 0)
        rc = rs_parser_finish(p);
    if (rc != 0) {
        const struct rs_diag *d = rs_parser_error(p);
        bool notif = rc == RS_EINVALID && hs.cap != RS_CAP_NONE &&
                     !rs_capability_is_notification(hs.cap);
        if (notif)
            snprintf(msg, sizeof(msg), "capability \"%s\" is not a notification "
                     "(changelist-notification or framework-notification)",
                     rs_capability_name(hs.cap));
        else if (d != NULL && d->line > 0)
            snprintf(msg, sizeof(msg), "line %u: %s", d->line, d->msg);
        else
            snprintf(msg, sizeof(msg), "%s", d != NULL ? d->msg : rs_strerror(rc));
        rs_parser_free(p);
        reject(h, req, notif ? REJ_NOT_NOTIFICATION : REJ_BAD_XML,
               rc == RS_ETOOBIG ? 413 : 400,
               rc == RS_ETOOBIG ? "Payload Too Large" : "Bad Request", msg);
        return;
    }
    rs_parser_free(p);

    char *self = find_self_link(req);
    if (self == NULL) {
        reject(h, req, REJ_NO_TOPIC_LINK, 400, "Bad Request",
               "missing Link: <TOPIC-URI>; rel=\"self\"");
        return;
    }
    bool created = false;
    struct topic *t = topics_by_uri(h->topics, self);
    if (t == NULL)
        t = topics_learn(h->topics, self, &created);
    if (t == NULL) {
        snprintf(msg, sizeof(msg), "unknown topic %.300s", self);
        rs_free(self);
        reject(h, req, REJ_UNKNOWN_TOPIC, 404, "Not Found", msg);
        return;
    }
    rs_free(self);

    if (topic_needs_token(t)) {
        const char *auth = evhttp_find_header(evhttp_request_get_input_headers(req),
                                              "Authorization");
        if (auth == NULL || strncasecmp(auth, "Bearer ", 7) != 0) {
            evhttp_add_header(evhttp_request_get_output_headers(req),
                              "WWW-Authenticate", "Bearer realm=\"rshub\"");
            reject(h, req, REJ_NO_TOKEN, 401, "Unauthorized",
                   "this topic needs Authorization: Bearer TOKEN");
            return;
        }
        if (!topic_token_ok(t, auth + 7)) {
            reject(h, req, REJ_BAD_TOKEN, 403, "Forbidden",
                   "wrong token for this topic");
            return;
        }
    }
    enum topic_kind kind = topic_kind_of(hs.cap);
    if (t->kind == TOPIC_ANY) {
        t->kind = kind;
        created = true;   /* register the fixed kind */
    } else if (t->kind != kind) {
        snprintf(msg, sizeof(msg), "topic %s takes %s notifications, not %s",
                 t->name, topic_kind_name(t->kind),
                 hs.alpha ? "change-notification" : rs_capability_name(hs.cap));
        reject(h, req, REJ_WRONG_KIND, 400, "Bad Request", msg);
        return;
    }
    if (!backlog_ready(h->backlog)) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
        reject(h, req, REJ_UNAVAILABLE, 503, "Service Unavailable",
               "not stored: the backlog (Redis) is unavailable");
        return;
    }
    if (created && !t->configured) {
        /* Same link as the append, so it is stored before it. */
        char *json = topic_json(t);
        if (json == NULL ||
            backlog_topic_put(h->backlog, t->name, json, NULL, NULL) != 0)
            rs_log(RS_LOG_WARN, "cannot register topic %s", t->name);
        rs_free(json);
    }

    struct publish *pub = rs_calloc(1, sizeof(*pub));
    if (pub == NULL) {
        reject(h, req, REJ_UNAVAILABLE, 503, "Service Unavailable", "out of memory");
        return;
    }
    pub->h = h;
    pub->req = req;
    pub->evcon = evhttp_request_get_connection(req);
    pub->topic = t;
    pub->start = start;
    char ctype[128];
    snprintf(ctype, sizeof(ctype), "%.*s", (int)(ctlen < 120 ? ctlen : 120), ct);
    rc = backlog_append(h->backlog, t->name, body != NULL ? body : "", len,
                        ctype, (uint64_t)(t->max_entries), on_appended, pub);
    if (rc != 0) {
        rs_free(pub);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
        reject(h, req, REJ_UNAVAILABLE, 503, "Service Unavailable",
               rc == RS_ETOOBIG ? "not stored: too many publishes in flight"
                                : "not stored: the backlog (Redis) is unavailable");
        return;
    }
    h->inflight++;
    evhttp_connection_set_closecb(pub->evcon, on_publisher_gone, pub);
}
