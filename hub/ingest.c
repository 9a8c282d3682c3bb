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
#include "websub.h"

/* One publish waiting for Redis. */
struct publish {
    struct hub *h;
    struct evhttp_request *req;
    struct evhttp_connection *evcon;
    struct topic *topic;
    enum topic_kind kind;      /* of this notification */
    const char *cap_name;      /* its capability, for messages */
    const char *body;          /* in the request's buffer: valid while !gone */
    size_t len;
    char ctype[128];
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
    bool annotated;
};

static int
on_head(void *ud, const struct rs_head *head)
{
    struct head_seen *hs = ud;
    hs->cap = head->md.capability;
    hs->alpha = head->md.capability_alpha;
    hs->annotated = head->hub_id != NULL || head->hub_topic != NULL;
    if (hs->annotated)
        return RS_EINVALID;
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
        h->rejected[REJ_TIMEOUT]++;   /* outcome unknown: see below */
    }
    if (p->gone) {
        publish_free(p);
        return;
    }
    /* before replying: the reply may end the connection */
    evhttp_connection_set_closecb(p->evcon, NULL, NULL);
    if (rc != 0) {
        /* The command was handed to the Redis link, so Redis may have run
         * it whatever failed afterwards (a timeout, or the link reset by
         * another command's timeout: RS_EIO). Say so: a retry may store
         * the notification twice (at least once, never lost). 503 'not
         * stored' is only for what was never sent (below, and ingest). */
        hub_reply_text(p->req, 504, "Gateway Timeout",
                       "error: Redis did not answer in time: the notification "
                       "may or may not be stored; a retry may store it twice");
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

/* End a publish that will not be stored (the publisher may be gone). */
static void
publish_fail(struct publish *p, int status, const char *reason,
             enum hub_reject why, const char *msg)
{
    p->h->rejected[why]++;
    if (!p->gone) {
        evhttp_connection_set_closecb(p->evcon, NULL, NULL);
        if (status == 503)
            evhttp_add_header(evhttp_request_get_output_headers(p->req),
                              "Retry-After", "1");
        hub_reply_text(p->req, status, reason, "error: %s", msg);
    }
    publish_free(p);
}

/* The kind is known and the publisher authorized: check, then store. */
static void
publish_append(struct publish *p)
{
    struct hub *h = p->h;
    struct topic *t = p->topic;
    char msg[300];
    if (p->gone) {
        publish_free(p);
        return;
    }
    if (t->kind != TOPIC_ANY && t->kind != p->kind) {
        snprintf(msg, sizeof(msg), "topic %s takes %s notifications, not %s",
                 t->name, topic_kind_name(t->kind), p->cap_name);
        publish_fail(p, 400, "Bad Request", REJ_WRONG_KIND, msg);
        return;
    }
    if (!backlog_ready(h->backlog)) {
        publish_fail(p, 503, "Service Unavailable", REJ_UNAVAILABLE,
                     "not stored: the backlog (Redis) is unavailable");
        return;
    }
    int rc = backlog_append(h->backlog, t->name, p->body, p->len, p->ctype,
                            t->max_entries, on_appended, p);
    if (rc != 0)
        publish_fail(p, 503, "Service Unavailable", REJ_UNAVAILABLE,
                     rc == RS_ETOOBIG ? "not stored: too many publishes in flight"
                                      : "not stored: the backlog (Redis) is unavailable");
}

static void
on_claimed(void *ud, int rc, const char *rec, size_t len)
{
    struct publish *p = ud;
    char *uri = NULL;
    enum topic_kind kind;
    if (rc == RS_ECANCELED || p->gone) {
        publish_free(p);
        return;
    }
    if (rc != 0 || topic_record_parse(rec, len, &uri, &kind) != 0) {
        publish_fail(p, 503, "Service Unavailable", REJ_UNAVAILABLE,
                     "not stored: the topic registry (Redis) failed");
        rs_free(uri);
        return;
    }
    rs_free(uri);
    p->topic->kind = kind;
    p->topic->registered = true;
    publish_append(p);
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
        websub_handle(h->websub, req);
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
    struct head_seen hs = { RS_CAP_NONE, false, false };
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
        if (hs.annotated)
            snprintf(msg, sizeof(msg), "the document already carries a hub "
                     "annotation (%s): publish the original", RS_NS_HUB);
        else if (notif)
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
    struct publish *pub = rs_calloc(1, sizeof(*pub));
    if (pub == NULL) {
        reject(h, req, REJ_UNAVAILABLE, 503, "Service Unavailable", "out of memory");
        return;
    }
    pub->h = h;
    pub->req = req;
    pub->evcon = evhttp_request_get_connection(req);
    pub->topic = t;
    pub->kind = topic_kind_of(hs.cap);
    pub->cap_name = hs.alpha ? "change-notification" : rs_capability_name(hs.cap);
    pub->body = body != NULL ? body : "";
    pub->len = len;
    pub->start = start;
    snprintf(pub->ctype, sizeof(pub->ctype), "%.*s",
             (int)(ctlen < 120 ? ctlen : 120), ct);
    h->inflight++;
    evhttp_connection_set_closecb(pub->evcon, on_publisher_gone, pub);

    if (t->configured || t->registered) {
        publish_append(pub);
        return;
    }
    /* Open mode, first publish on this node: the registry in Redis says
     * what the topic is (the first node to publish fixed its kind). */
    if (t->kind == TOPIC_ANY)
        t->kind = pub->kind;
    char *rec = topic_record(t);
    if (rec == NULL ||
        backlog_topic_claim(h->backlog, t->name, rec, on_claimed, pub) != 0)
        publish_fail(pub, 503, "Service Unavailable", REJ_UNAVAILABLE,
                     "not stored: the backlog (Redis) is unavailable");
    rs_free(rec);
}
