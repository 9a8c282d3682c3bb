/*
 * ingest.c - what a Source sends the hub. POST /hub: a notification
 * (docs/protocol.md 3); the body is validated by proto, the topic found
 * from Link rel="self", the publisher authenticated, and the reply sent
 * only once Redis has acknowledged the append: an accepted notification is
 * a stored one (with --ack-replicas N, one N replicas hold: else 504). With X-Publish-Id, once: a resend is answered as a
 * duplicate and not stored again (backlog_append_once). POST /topics: a topic registered (open mode) or looked up
 * before any publish, under the same rules (docs/source.md 8). The answer's
 * JSON is status.c's.
 */
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define RS_LOG_MODULE "ingest"
#include "ack.h"
#include "hub.h"
#include "ingest.h"
#include "reply.h"
#include "rs_alloc.h"
#include "rs_discover.h"
#include "rs_httpcheck.h"
#include "rs_log.h"
#include "rs_parse.h"
#include "rs_pubid.h"
#include "rs_url.h"
#include "status.h"
#include "websub.h"

/* A POST /topics form: a topic URI of at most TOPIC_URI_MAX bytes,
 * percent-encoded (up to three bytes each), and a kind. */
#define INGEST_REGISTER_MAX_BODY 8192

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
    bool has_pid;              /* X-Publish-Id given: pid holds it */
    struct rs_pubid pid;
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

/* The topic URI from every Link header of the request (NULL if none);
 * *bad: the first Link header that could not be read, if any. */
static char *
find_self_link(struct evhttp_request *req, const char **bad)
{
    char *self = NULL;
    struct evkeyvalq *hdrs = evhttp_request_get_input_headers(req);
    *bad = NULL;
    for (struct evkeyval *kv = hdrs->tqh_first; kv != NULL;
         kv = kv->next.tqe_next) {
        if (strcasecmp(kv->key, "Link") != 0)
            continue;
        if (rs_link_header_parse(kv->value, strlen(kv->value), on_self_link,
                                 &self) != 0 && self == NULL) {
            *bad = kv->value;
            break;
        }
    }
    return self;
}

/* The request's X-Publish-Id into *pid: 0 without one (*has false), 1
 * with one, or RS_EINVAL with *why (malformed, or given twice: two values
 * would leave the publisher unsure which one the hub went by). */
static int
find_publish_id(struct evhttp_request *req, struct rs_pubid *pid, bool *has,
                const char **why)
{
    const char *v = NULL;
    struct evkeyvalq *hdrs = evhttp_request_get_input_headers(req);
    *has = false;
    for (struct evkeyval *kv = hdrs->tqh_first; kv != NULL;
         kv = kv->next.tqe_next) {
        if (strcasecmp(kv->key, RS_PUBID_HEADER) != 0)
            continue;
        if (v != NULL) {
            *why = "X-Publish-Id given more than once";
            return RS_EINVAL;
        }
        v = kv->value;
    }
    if (v == NULL)
        return 0;
    if (rs_pubid_parse(v, pid, why) != 0)
        return RS_EINVAL;
    *has = true;
    return 1;
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

/* ------------------------------------------------------- shared rules */

enum auth { AUTH_OK, AUTH_MISSING, AUTH_WRONG };

/* The request's bearer token against t's (topics without tokens take
 * anything): the same rule for publishing and for POST /topics. */
static enum auth
topic_auth(struct evhttp_request *req, const struct topic *t)
{
    if (!topic_needs_token(t))
        return AUTH_OK;
    const char *auth = evhttp_find_header(evhttp_request_get_input_headers(req),
                                          "Authorization");
    if (auth == NULL || strncasecmp(auth, "Bearer ", 7) != 0)
        return AUTH_MISSING;
    return topic_token_ok(t, auth + 7) ? AUTH_OK : AUTH_WRONG;
}

static void
reply_auth(struct evhttp_request *req, enum auth a)
{
    if (a == AUTH_MISSING) {
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          "WWW-Authenticate", "Bearer realm=\"rshub\"");
        reply_text(req, 401, "Unauthorized",
                       "error: this topic needs Authorization: Bearer TOKEN");
    } else {
        reply_text(req, 403, "Forbidden", "error: wrong token for this topic");
    }
}

static void
reply_full(struct hub *h, struct evhttp_request *req)
{
    reply_text(req, 503, "Service Unavailable",
                   "error: this hub holds %zu topics already (--max-topics)",
                   topics_max(h->topics));
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

/* Redis answered the append (rc 0: stored, or a duplicate of the publish
 * stored as id), or did not. */
static void
publish_done(struct publish *p, int rc, struct msg_id id, bool duplicate)
{
    struct hub *h = p->h;
    char idbuf[MSG_ID_BUFSZ], chan[512];

    if (rc == 0)
        topic_appended(p->topic, id);
    if (rc == 0 && duplicate) {
        h->duplicates++;
    } else if (rc == 0) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        h->accepted++;
        rs_metrics_histogram_observe(h->publish_seconds,
                                     (double)(now.tv_sec - p->start.tv_sec) +
                                     (double)(now.tv_nsec - p->start.tv_nsec) / 1e9);
    } else if (rc == ACK_ESHORT) {
        h->rejected[REJ_NOT_REPLICATED]++;
    } else {
        h->rejected[REJ_TIMEOUT]++;   /* outcome unknown: see below */
    }
    if (p->gone) {
        publish_free(p);
        return;
    }
    /* before replying: the reply may end the connection */
    evhttp_connection_set_closecb(p->evcon, NULL, NULL);
    if (rc == ACK_ESHORT) {
        /* Stored on the primary, not shown to be on --ack-replicas
         * replicas in time: never a 202 then. A failover may lose it, or
         * it may reach the replicas later and be delivered. */
        long long got = backlog_ack_count(h->backlog);
        unsigned tmo = (unsigned)h->conf->ack_timeout_ms;
        reply_text(p->req, 504, "Gateway Timeout",
                   "error: not replicated: %lld of %lld replicas confirmed "
                   "within %u%s; stored on the primary only, a failover may "
                   "lose it; %s", got < 0 ? 0 : got,
                   (long long)h->conf->ack_replicas,
                   tmo % 1000 == 0 ? tmo / 1000 : tmo,
                   tmo % 1000 == 0 ? "s" : "ms",
                   p->has_pid ? "a retry with the same X-Publish-Id stores "
                                "it once"
                              : "a retry may store it twice");
        publish_free(p);
        return;
    }
    if (rc == RS_EPROTO && backlog_append_error(h->backlog)[0] != '\0') {
        /* Redis answered with an error: out of memory (maxmemory),
         * writes stopped (MISCONF: a save failed, e.g. its disk is full),
         * a replica (READONLY). It refused a command of the script, which
         * may have come after its XADD: the caveat stands, so not 503
         * (nothing stored); not a timeout either (504). A retry helps
         * once Redis takes writes again. */
        evhttp_add_header(evhttp_request_get_output_headers(p->req),
                          "Retry-After", "1");
        reply_text(p->req, 502, "Bad Gateway",
                   "error: Redis refused it: %s; the notification may or "
                   "may not be stored; %s",
                   backlog_append_error(h->backlog),
                   p->has_pid ? "a retry with the same X-Publish-Id stores "
                                "it once"
                              : "a retry may store it twice");
        publish_free(p);
        return;
    }
    if (rc != 0) {
        /* The command was handed to the Redis link, so Redis may have run
         * it whatever failed afterwards (a timeout, or the link reset by
         * another command's timeout: RS_EIO). Say so: a retry may store
         * the notification twice (at least once, never lost), unless it
         * carries the same X-Publish-Id. 503 'not stored' is only for
         * what was never sent (below, and ingest). */
        reply_text(p->req, 504, "Gateway Timeout",
                   "error: Redis did not answer in time: the notification "
                   "may or may not be stored; %s",
                   p->has_pid ? "a retry with the same X-Publish-Id stores "
                                "it once"
                              : "a retry may store it twice");
        publish_free(p);
        return;
    }
    msg_id_format(id, idbuf);
    struct evkeyvalq *out = evhttp_request_get_output_headers(p->req);
    evhttp_add_header(out, "X-Hub-Id", idbuf);
    if (hub_channel_uri(h, p->topic, chan, sizeof(chan)) == 0)
        evhttp_add_header(out, "X-Hub-Channel", chan);
    if (duplicate) {
        /* 202 all the same: what the publisher asked for is stored, and a
         * publisher that only knows 2xx moves on */
        evhttp_add_header(out, "X-Hub-Duplicate", "1");
        reply_text(p->req, 202, "Accepted", "duplicate %s", idbuf);
    } else {
        reply_text(p->req, 202, "Accepted", "accepted %s", idbuf);
    }
    publish_free(p);
}

static void
on_appended(void *ud, int rc, struct msg_id id)
{
    publish_done(ud, rc, id, false);
}

static void
on_appended_once(void *ud, int rc, struct msg_id id, bool duplicate)
{
    publish_done(ud, rc, id, duplicate);
}

static void
reject(struct hub *h, struct evhttp_request *req, enum hub_reject why,
       int status, const char *reason, const char *msg)
{
    h->rejected[why]++;
    reply_text(req, status, reason, "error: %s", msg);
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
        reply_text(p->req, status, reason, "error: %s", msg);
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
    int rc = p->has_pid
        ? backlog_append_once(h->backlog, t->name, p->body, p->len, p->ctype,
                              t->max_entries, p->pid.key, p->pid.seq,
                              (uint64_t)h->conf->publish_ids_per_topic,
                              on_appended_once, p)
        : backlog_append(h->backlog, t->name, p->body, p->len, p->ctype,
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

    /* framing a proxy could read otherwise: nothing here acts on it */
    if (rs_httpcheck_refuse(req))
        return;
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

    struct rs_pubid pid;
    bool has_pid = false;
    const char *why = NULL;
    if (find_publish_id(req, &pid, &has_pid, &why) < 0) {
        reject(h, req, REJ_BAD_PUBLISH_ID, 400, "Bad Request", why);
        return;
    }

    const char *bad_link;
    char *self = find_self_link(req, &bad_link);
    if (self == NULL) {
        char linkmsg[300];
        if (bad_link != NULL)   /* said apart from a missing one */
            snprintf(linkmsg, sizeof(linkmsg), "a Link header that cannot "
                     "be read (\"%.120s%s\"): expected Link: <TOPIC-URI>; "
                     "rel=\"self\"", bad_link,
                     strlen(bad_link) > 120 ? "..." : "");
        else
            snprintf(linkmsg, sizeof(linkmsg),
                     "missing Link: <TOPIC-URI>; rel=\"self\"");
        reject(h, req, REJ_NO_TOPIC_LINK, 400, "Bad Request", linkmsg);
        return;
    }
    bool created = false;
    const char *bad = NULL;
    struct topic *t = topics_by_uri(h->topics, self);
    if (t == NULL)
        t = topics_learn(h->topics, self, &created, &bad);
    if (t == NULL && bad != NULL) {
        rs_free(self);
        reject(h, req, REJ_BAD_TOPIC, 400, "Bad Request", bad);
        return;
    }
    if (t == NULL && topics_full(h->topics)) {
        rs_free(self);
        h->rejected[REJ_TOO_MANY_TOPICS]++;
        reply_full(h, req);
        return;
    }
    if (t == NULL) {
        snprintf(msg, sizeof(msg), "unknown topic %.300s", self);
        rs_free(self);
        reject(h, req, REJ_UNKNOWN_TOPIC, 404, "Not Found", msg);
        return;
    }
    rs_free(self);

    enum auth au = topic_auth(req, t);
    if (au != AUTH_OK) {
        h->rejected[au == AUTH_MISSING ? REJ_NO_TOKEN : REJ_BAD_TOKEN]++;
        reply_auth(req, au);
        return;
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
    pub->has_pid = has_pid;
    if (has_pid)
        pub->pid = pid;
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

/* ------------------------------------------------------- POST /topics */

/* One registration waiting for the registry claim. */
struct reg {
    struct hub *h;
    struct evhttp_request *req;
    struct evhttp_connection *evcon;
    struct topic *topic;       /* topics are never freed before the hub */
    enum topic_kind kind;      /* asked for */
    bool gone;
};

static void
reg_reply(struct hub *h, struct evhttp_request *req, enum hub_reg r,
          int status, const char *reason, const char *msg)
{
    h->registrations[r]++;
    if (status == 503)
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          "Retry-After", "1");
    reply_text(req, status, reason, "error: %s", msg);
}

/* The topic is known and the caller authorized: the kind decides. */
static void
reg_finish(struct hub *h, struct evhttp_request *req, const struct topic *t,
           enum topic_kind kind, enum hub_reg ok)
{
    char msg[300];
    if (t->kind != TOPIC_ANY && t->kind != kind) {
        snprintf(msg, sizeof(msg), "topic %s is a %s topic, not %s", t->name,
                 topic_kind_name(t->kind), topic_kind_name(kind));
        h->registrations[REG_WRONG_KIND]++;
        reply_text(req, 409, "Conflict", "error: %s", msg);
        return;
    }
    h->registrations[ok]++;
    status_reply_topic(h, req, t);
}

static void
on_reg_gone(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    ((struct reg *)arg)->gone = true;
}

static void
on_reg_claimed(void *ud, int rc, const char *rec, size_t len)
{
    struct reg *r = ud;
    char *uri = NULL;
    enum topic_kind kind;
    bool parsed = rc == 0 && topic_record_parse(rec, len, &uri, &kind) == 0;
    rs_free(uri);
    if (parsed) {
        /* what the registry holds wins, whoever asks next */
        r->topic->kind = kind;
        r->topic->registered = true;
    }
    if (!r->gone)
        evhttp_connection_set_closecb(r->evcon, NULL, NULL);
    if (r->gone || rc == RS_ECANCELED) {
        rs_free(r);
        return;
    }
    if (!parsed)
        reg_reply(r->h, r->req, REG_UNAVAILABLE, 503, "Service Unavailable",
                  "the topic registry (Redis) failed");
    else
        reg_finish(r->h, r->req, r->topic, r->kind, REG_CLAIMED);
    rs_free(r);
}

/* The single value of key in the form; *why when absent or repeated. */
static const char *
form_one(struct evkeyvalq *form, const char *key, const char **why)
{
    const char *v = NULL;
    for (struct evkeyval *kv = form->tqh_first; kv != NULL;
         kv = kv->next.tqe_next) {
        if (strcmp(kv->key, key) != 0)
            continue;
        if (v != NULL) {
            *why = strcmp(key, "topic") == 0 ? "topic given more than once"
                                             : "kind given more than once";
            return NULL;
        }
        v = kv->value;
    }
    if (v == NULL)
        *why = strcmp(key, "topic") == 0 ? "missing topic=URI"
                                         : "missing kind=change|framework";
    return v;
}

/* Parse and check the form: on success *uri (rs_free it) and *kind. */
static const char *
reg_parse(struct evhttp_request *req, char **uri, enum topic_kind *kind)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    struct evkeyvalq form;
    const char *why = NULL;
    *uri = NULL;
    memset(&form, 0, sizeof(form));   /* evhttp_parse_query_str initialises it */
    char *body = rs_malloc(len + 1);
    if (body == NULL)
        return "out of memory";
    evbuffer_copyout(in, body, len);
    body[len] = '\0';
    /* A NUL, raw or encoded, would cut a value short without a trace. */
    if (strlen(body) != len || strstr(body, "%00") != NULL) {
        rs_free(body);
        return "the form holds a NUL byte";
    }
    int prc = evhttp_parse_query_str(body, &form);
    rs_free(body);
    if (prc != 0) {
        evhttp_clear_headers(&form);
        return "malformed form body (expected topic=URI&kind=change|framework)";
    }
    const char *t = form_one(&form, "topic", &why);
    const char *k = t != NULL ? form_one(&form, "kind", &why) : NULL;
    if (k != NULL && (topic_kind_from(k, kind) != 0 || *kind == TOPIC_ANY))
        why = "kind must be change or framework";
    if (why == NULL)
        (void)topic_uri_ok(t, &why);
    if (why == NULL && (*uri = rs_strdup(t)) == NULL)
        why = "out of memory";
    evhttp_clear_headers(&form);
    return why;
}

void
ingest_register(struct hub *h, struct evhttp_request *req)
{
    char msg[400];
    if (rs_httpcheck_refuse(req))
        return;
    if (h->draining) {
        reg_reply(h, req, REG_UNAVAILABLE, 503, "Service Unavailable",
                  "hub is shutting down");
        return;
    }
    const char *ct = evhttp_find_header(evhttp_request_get_input_headers(req),
                                        "Content-Type");
    size_t ctlen = ct != NULL ? strcspn(ct, "; \t") : 0;
    if (ct == NULL || ctlen != 33 ||
        strncasecmp(ct, "application/x-www-form-urlencoded", 33) != 0) {
        h->registrations[REG_MEDIA_TYPE]++;
        reply_text(req, 415, "Unsupported Media Type",
                       "error: Content-Type must be "
                       "application/x-www-form-urlencoded");
        return;
    }
    if (evbuffer_get_length(evhttp_request_get_input_buffer(req)) >
        INGEST_REGISTER_MAX_BODY) {
        h->registrations[REG_TOO_BIG]++;
        reply_text(req, 413, "Payload Too Large",
                       "error: the form is larger than %d bytes",
                       INGEST_REGISTER_MAX_BODY);
        return;
    }
    char *uri = NULL;
    enum topic_kind kind = TOPIC_ANY;
    const char *why = reg_parse(req, &uri, &kind);
    if (why != NULL) {
        h->registrations[REG_BAD_REQUEST]++;
        reply_text(req, 400, "Bad Request", "error: %s", why);
        return;
    }
    struct topic *t = topics_by_uri(h->topics, uri);
    if (t == NULL && !topics_open(h->topics)) {
        snprintf(msg, sizeof(msg), "unknown topic %.300s", uri);
        rs_free(uri);
        h->registrations[REG_UNKNOWN_TOPIC]++;
        reply_text(req, 404, "Not Found", "error: %s", msg);
        return;
    }
    bool created = false;
    const char *bad = NULL;
    if (t == NULL)
        t = topics_learn(h->topics, uri, &created, &bad);
    rs_free(uri);
    if (t == NULL && bad != NULL) {
        h->registrations[REG_BAD_REQUEST]++;
        reply_text(req, 400, "Bad Request", "error: %s", bad);
        return;
    }
    if (t == NULL && topics_full(h->topics)) {
        h->registrations[REG_TOO_MANY_TOPICS]++;
        reply_full(h, req);
        return;
    }
    if (t == NULL) {
        reg_reply(h, req, REG_UNAVAILABLE, 503, "Service Unavailable",
                  "out of memory");
        return;
    }
    enum auth au = topic_auth(req, t);
    if (au != AUTH_OK) {
        h->registrations[au == AUTH_MISSING ? REG_NO_TOKEN : REG_BAD_TOKEN]++;
        reply_auth(req, au);
        return;
    }
    if (t->configured || t->registered) {
        reg_finish(h, req, t, kind, REG_FOUND);
        return;
    }
    /* Open mode, not yet in the registry as this node knows it: claim it
     * exactly as a first publish would; the first claim fixes the kind. */
    if (t->kind == TOPIC_ANY)
        t->kind = kind;
    struct reg *r = NULL;
    char *rec = NULL;
    if (backlog_ready(h->backlog)) {
        r = rs_calloc(1, sizeof(*r));
        rec = topic_record(t);
    }
    if (r != NULL && rec != NULL) {
        r->h = h;
        r->req = req;
        r->evcon = evhttp_request_get_connection(req);
        r->topic = t;
        r->kind = kind;
        evhttp_connection_set_closecb(r->evcon, on_reg_gone, r);
        if (backlog_topic_claim(h->backlog, t->name, rec, on_reg_claimed, r) == 0) {
            rs_free(rec);
            return;
        }
        evhttp_connection_set_closecb(r->evcon, NULL, NULL);
    }
    rs_free(r);
    rs_free(rec);
    reg_reply(h, req, REG_UNAVAILABLE, 503, "Service Unavailable",
              "the topic registry (Redis) is unavailable");
}
