/*
 * hub.c - the rshub process's own helpers (hub.h): the names of publish
 * outcomes, the advertised URI of a topic's channel, and learning the
 * topics other nodes registered (open mode), and read access on the HTTP
 * side (the request's bearer against readauth.h). The handlers are ingest.c,
 * status.c and websub.c; rshub.c builds the process.
 */
#include <event2/http.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define RS_LOG_MODULE "hub"
#include "hub.h"
#include "readnote.h"
#include "reply.h"
#include "rs_alloc.h"
#include "rs_log.h"

static const char *const reject_names[REJ_COUNT] = {
    [REJ_BAD_XML] = "bad_document",
    [REJ_NOT_NOTIFICATION] = "not_a_notification",
    [REJ_NO_TOPIC_LINK] = "no_topic_link",
    [REJ_UNKNOWN_TOPIC] = "unknown_topic",
    [REJ_WRONG_KIND] = "wrong_kind",
    [REJ_NO_TOKEN] = "no_token",
    [REJ_BAD_TOKEN] = "bad_token",
    [REJ_TOO_BIG] = "too_big",
    [REJ_MEDIA_TYPE] = "media_type",
    [REJ_UNAVAILABLE] = "unavailable",
    [REJ_TIMEOUT] = "outcome_unknown",
    [REJ_METHOD] = "method",
    [REJ_TOO_MANY_TOPICS] = "too_many_topics",
    [REJ_BAD_PUBLISH_ID] = "bad_publish_id",
    [REJ_NOT_REPLICATED] = "not_replicated",
    [REJ_BAD_TOPIC] = "bad_topic",
};

const char *
hub_reject_name(enum hub_reject r)
{
    return r < REJ_COUNT ? reject_names[r] : "unknown";
}

int
hub_channel_uri(const struct hub *h, const struct topic *t, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s/channel/%s", h->conf->ws_public_url, t->name);
    return (n > 0 && (size_t)n < len) ? 0 : RS_ETOOBIG;
}

/* --------------------------------------------------------- the registry */

struct reload {
    struct hub *h;
    void (*done)(void *ud);
    void *ud;
};

static void
on_topics_loaded(void *ud, int rc, const char *const *names,
                 const char *const *values, size_t n)
{
    struct reload *r = ud;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char *uri = NULL;
        enum topic_kind kind;
        if (topic_record_parse(values[i], strlen(values[i]), &uri, &kind) != 0 ||
            topics_remember(r->h->topics, names[i], uri, kind) != 0)
            rs_log(RS_LOG_WARN, "ignoring registered topic %s", names[i]);
        rs_free(uri);
    }
    if (r->done != NULL && rc != RS_ECANCELED)
        r->done(r->ud);
    rs_free(r);
}

void
hub_reload_topics(struct hub *h, void (*done)(void *ud), void *ud)
{
    struct reload *r = rs_malloc(sizeof(*r));
    if (r != NULL) {
        r->h = h;
        r->done = done;
        r->ud = ud;
        if (backlog_topics(h->backlog, on_topics_loaded, r) == 0)
            return;
        rs_free(r);
    }
    if (done != NULL)
        done(ud);
}


/* ----------------------------------------------------------- read access */

void
hub_read_note(struct hub *h, struct evhttp_request *req, const char *where,
              const char *topic, enum read_verdict v)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    char *addr = NULL;
    ev_uint16_t port = 0;
    if (evcon != NULL)
        evhttp_connection_get_peer(evcon, &addr, &port);
    readnote_refused(h->readnote, addr != NULL ? addr : "?", where, topic, v);
}

enum read_verdict
hub_read_cred(struct hub *h, struct evhttp_request *req,
              struct read_cred **out)
{
    *out = NULL;
    const char *v = evhttp_find_header(evhttp_request_get_input_headers(req),
                                       "Authorization");
    size_t len = 0;
    const char *b = v != NULL ? readauth_bearer_of(v, &len) : NULL;
    if (v == NULL)
        return READ_NO_CRED;
    /* No topic needs a read credential: a bearer changes nothing (a
     * Source sends its publish token with its lookups) */
    if (h->readauth == NULL || !readauth_active(h->readauth))
        return READ_NO_CRED;
    enum read_verdict r = READ_BAD_CRED;
    char *tok = b != NULL ? rs_strndup(b, len) : NULL;
    if (tok != NULL) {
        r = readauth_cred_new(h->readauth, tok, (int64_t)time(NULL), out);
        explicit_bzero(tok, len);
        rs_free(tok);
    }
    return r;
}

bool
hub_topic_visible(const struct hub *h, const struct topic *t,
                  const struct read_cred *c)
{
    enum read_verdict v = readauth_allows(h->readauth, c, t->name, t->uri);
    return v == READ_PUBLIC || v == READ_OK;
}

bool
hub_publisher_of(struct evhttp_request *req, const struct topic *t)
{
    if (!topic_needs_token(t))
        return false;
    const char *v = evhttp_find_header(evhttp_request_get_input_headers(req),
                                       "Authorization");
    size_t len = 0;
    const char *b = v != NULL ? readauth_bearer_of(v, &len) : NULL;
    if (b == NULL || len == 0)
        return false;
    char *tok = rs_strndup(b, len);
    if (tok == NULL)
        return false;
    bool ok = topic_token_ok(t, tok) == 1;
    explicit_bzero(tok, len);
    rs_free(tok);
    return ok;
}

void
hub_read_reply(struct evhttp_request *req, enum read_verdict v)
{
    if (readauth_verdict_status(v) == 401) {
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          "WWW-Authenticate", "Bearer realm=\"rshub\"");
        reply_text(req, 401, "Unauthorized", "error: %s",
                   readauth_verdict_reason(v));
    } else {
        reply_text(req, 403, "Forbidden", "error: %s",
                   readauth_verdict_reason(v));
    }
}
