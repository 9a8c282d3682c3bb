/*
 * websub.c - WebSub requests on POST /hub (websub.h, docs/protocol.md 5).
 *
 * A subscribe or unsubscribe request is one `struct op` that goes through:
 * parse -> callback address policy (async DNS unless a literal) -> a slot
 * reserved under the caps (subscribe; one Redis script checks and takes
 * it) -> 202 -> verification of intent (GET with a challenge) ->
 * activation in the store (subs.c, which turns the reservation into the
 * subscription) -> deliver_refresh. The HTTP request is answered at the
 * 202 (or a 4xx before); after that the op lives on alone. An op that ends
 * without storing its subscription releases its slot (op_release); one
 * that cannot (shutdown, a dead node, Redis gone) leaves it to run out.
 * Every asynchronous step frees the op on a cancelled status, so shutdown
 * (freeing the HTTP client, Redis, DNS) never leaks or touches freed state.
 * What the form, the verification and the denial look like on the wire is
 * websubwire.c's.
 */
#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/dns.h>
#include <event2/http.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define RS_LOG_MODULE "websub"
#include "ack.h"
#include "deliver.h"
#include "hub.h"
#include "netpolicy.h"
#include "reply.h"
#include "rs_alloc.h"
#include "rs_log.h"
#include "rs_time.h"
#include "rs_url.h"
#include "subs.h"
#include "websub.h"
#include "websubwire.h"

struct websub {
    struct hub *h;
    struct websub_stats st;
};

struct op {
    struct websub *w;
    enum websubwire_mode mode;      /* subscribe or unsubscribe */
    struct evhttp_request *req;       /* until answered; NULL after */
    struct evhttp_connection *evcon;
    bool gone;
    char *topic_uri;
    char topic_name[BACKLOG_NAME_MAX + 1];
    char *callback;
    char *host;
    char *secret;
    uint64_t lease_s;
    const char *deny;        /* refuse once the address is known to be
                                permitted (then a denial notice is safe) */
    bool reserved;           /* holds a slot under the caps in Redis */
    long long stored;        /* the store's answer, while its barrier runs */
    char challenge[WEBSUBWIRE_CHALLENGE_BUFSZ];
};

/* ---------------------------------------------------------------- helpers */

/* Milliseconds of the hub's clock, Redis's (backlog_now_ms): a lease
 * set here is judged by every node. */
static uint64_t
now_ms(const struct websub *w)
{
    return backlog_now_ms(w->h->backlog);
}

static void
op_free(struct op *o)
{
    if (o == NULL)
        return;
    if (o->req != NULL && !o->gone)
        evhttp_connection_set_closecb(o->evcon, NULL, NULL);
    rs_free(o->topic_uri);
    rs_free(o->callback);
    rs_free(o->host);
    rs_free(o->secret);
    rs_free(o);
}

/* The caps of this hub; a reservation lasts as long as verification
 * (--verify-timeout) and activation (two Redis calls) can take, plus a
 * second, so only a reservation whose node is gone runs out. */
static struct subs_caps
op_caps(const struct websub *w)
{
    const struct hub_conf *c = w->h->conf;
    int64_t hold = c->verify_timeout_ms + 2 * c->redis_timeout_ms + 1000;
    struct subs_caps caps = {
        .per_topic = c->max_subs_per_topic,
        .per_host = c->max_subs_per_host,
        .hold_ms = hold > 0 && hold < UINT32_MAX ? (unsigned)hold : UINT32_MAX,
    };
    return caps;
}

static void
on_released(void *ud, int rc, long long result)
{
    (void)ud;
    (void)result;
    if (rc != 0 && rc != RS_ECANCELED)
        rs_log(RS_LOG_DEBUG, "cannot release a reserved slot (it runs out): %s",
               rs_strerror(rc));
}

/* The op ends without storing its subscription: give its slot back now
 * rather than when it runs out. Not on a cancelled status: Redis is being
 * torn down then, and the reservation runs out by itself. */
static void
op_release(struct op *o)
{
    if (!o->reserved)
        return;
    o->reserved = false;
    if (subs_release(o->w->h->subs, o->topic_name, o->callback, o->host,
                     on_released, NULL) != 0)
        rs_log(RS_LOG_DEBUG, "cannot release a reserved slot now (it runs out)");
}

static void
on_op_gone(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    struct op *o = arg;
    o->gone = true;
    o->req = NULL;   /* libevent frees it with the connection */
}

/* Answer the subscriber's request (once); the op may go on. */
__attribute__((format(printf, 4, 5))) static void
op_reply(struct op *o, int status, const char *reason, const char *fmt, ...)
{
    if (o->req == NULL)
        return;
    if (!o->gone) {
        evhttp_connection_set_closecb(o->evcon, NULL, NULL);
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        reply_text(o->req, status, reason, "%s", msg);
    }
    o->req = NULL;
}

static void
on_denial_sent(void *ud, struct rs_http_req *req, const struct rs_http_result *res)
{
    (void)ud;
    (void)req;
    (void)res;
}

/* Tell the callback its subscription was refused (hub.mode=denied). Only
 * called once its address is known to be permitted. */
static void
send_denial(struct websub *w, const char *callback, const char *topic,
            const char *reason)
{
    char *url = websubwire_denial_url(callback, topic, reason);
    struct rs_http_req_opts ro = {
        .url = url,
        .timeout_ms = (unsigned)w->h->conf->verify_timeout_ms,
        .max_body = 4096,
        .on_done = on_denial_sent,
    };
    if (url == NULL || rs_http_request(w->h->httpc, &ro, NULL) != 0)
        rs_log(RS_LOG_DEBUG, "cannot send the denial to %s", callback);
    rs_free(url);
}

/* -------------------------------------------------------------- activation */

static void
on_activated(void *ud, int rc, long long isnew)
{
    struct op *o = ud;
    struct websub *w = o->w;
    if (rc == 0 && (isnew == SUBS_TOPIC_FULL || isnew == SUBS_HOST_FULL)) {
        /* its reservation ran out and others took the room meanwhile: the
         * callback is verified and permitted, so it may be told */
        w->st.denied++;
        const char *why = isnew == SUBS_TOPIC_FULL
                              ? "subscription limit reached (per topic)"
                              : "subscription limit reached (per callback host)";
        rs_log_kv(RS_LOG_WARN, "verified, but the caps were reached meanwhile",
                  "topic", o->topic_name, "callback", o->callback, NULL);
        send_denial(w, o->callback, o->topic_uri, why);
    } else if (rc == 0) {
        rs_log_kv(RS_LOG_INFO, o->mode == WEBSUBWIRE_SUBSCRIBE
                  ? (isnew == 1 ? "subscribed" : "subscription renewed")
                  : (isnew == 1 ? "unsubscribed" : "unsubscribe of an unknown subscription"),
                  "topic", o->topic_name, "callback", o->callback, NULL);
        deliver_refresh(w->h->deliver, o->topic_name);
    } else if (rc != RS_ECANCELED) {
        rs_log_kv(RS_LOG_ERROR, "verified, but the store failed",
                  "callback", o->callback, "error", rs_strerror(rc), NULL);
        op_release(o);   /* a no-op if the store ran before it failed */
    }
    op_free(o);
}

/* --ack-replicas: the store's write is held by N replicas (or could not be
 * shown to be) before the subscription counts as made. */
static void
on_store_confirmed(void *ud, int rc)
{
    struct op *o = ud;
    if (rc == RS_ECANCELED) {
        op_free(o);
        return;
    }
    if (rc != 0)
        /* The callback verified its intent already, so the store stands:
         * a failover before it reaches a replica may lose it, and the
         * subscriber learns that only when its next renewal starts over
         * (docs/internals/failover.md). */
        rs_log_kv(RS_LOG_WARN, "subscription change stored, but not "
                  "confirmed on --ack-replicas replicas: a failover now may "
                  "undo it", "topic", o->topic_name, "callback", o->callback,
                  "error", rc == ACK_ESHORT ? "too few replicas"
                                            : rs_strerror(rc), NULL);
    on_activated(o, 0, o->stored);
}

static void
on_stored(void *ud, int rc, long long isnew)
{
    struct op *o = ud;
    struct ack *a = o->w->h->ack;
    if (rc == 0 && a != NULL && isnew != SUBS_TOPIC_FULL &&
        isnew != SUBS_HOST_FULL) {
        o->stored = isnew;
        if (ack_barrier(a, backlog_cmd_addr(o->w->h->backlog),
                        on_store_confirmed, o) == 0)
            return;
        on_store_confirmed(o, RS_EIO);
        return;
    }
    on_activated(o, rc, isnew);
}

/* New subscriptions get what is accepted after they become active. */
static void
on_head_for_activation(void *ud, int rc, const struct backlog_info *info)
{
    struct op *o = ud;
    struct websub *w = o->w;
    if (rc != 0) {
        if (rc != RS_ECANCELED) {
            rs_log_kv(RS_LOG_ERROR, "verified, but Redis failed",
                      "callback", o->callback, NULL);
            op_release(o);
        }
        op_free(o);
        return;
    }
    uint64_t lease_ms = o->lease_s * 1000;
    struct subs_record r = { .secret = o->secret, .expires_ms = now_ms(w) + lease_ms,
                             .created_ms = now_ms(w), .failing = false };
    struct subs_caps caps = op_caps(w);
    char *js = subs_record_json(&r);
    if (js == NULL || subs_put(w->h->subs, o->topic_name, o->callback, js,
                               r.expires_ms, info->last_generated, o->host,
                               &caps, on_stored, o) != 0) {
        rs_log_kv(RS_LOG_ERROR, "verified, but cannot store the subscription",
                  "callback", o->callback, NULL);
        op_release(o);
        op_free(o);
    }
    rs_free(js);
}

static void
on_verified(void *ud, struct rs_http_req *req, const struct rs_http_result *res)
{
    (void)req;
    struct op *o = ud;
    struct websub *w = o->w;
    if (res->rc == RS_ECANCELED) {
        op_free(o);
        return;
    }
    bool ok = res->rc == 0 && res->status >= 200 && res->status < 300 &&
              websubwire_challenge_echoed(o->challenge, res->body, res->body_len);
    if (!ok) {
        w->st.verify_failed++;
        rs_log_kv(RS_LOG_INFO, "intent not verified: nothing changes",
                  "callback", o->callback,
                  "why", res->rc != 0 ? res->errstr
                         : (res->status < 200 || res->status >= 300)
                               ? "callback did not answer 2xx"
                               : "challenge not echoed", NULL);
        op_release(o);
        op_free(o);
        return;
    }
    w->st.verified++;
    int rc;
    if (o->mode == WEBSUBWIRE_SUBSCRIBE)
        rc = backlog_info(w->h->backlog, o->topic_name, on_head_for_activation, o);
    else
        rc = subs_remove(w->h->subs, o->topic_name, o->callback, o->host,
                         on_stored, o);
    if (rc != 0) {
        rs_log_kv(RS_LOG_ERROR, "verified, but Redis is unavailable",
                  "callback", o->callback, NULL);
        op_release(o);
        op_free(o);
    }
}

static void
op_verify(struct op *o)
{
    struct websub *w = o->w;
    unsigned char rnd[WEBSUBWIRE_CHALLENGE_BYTES];
    if (RAND_bytes(rnd, sizeof(rnd)) != 1) {
        op_release(o);
        op_free(o);
        return;
    }
    websubwire_challenge(rnd, o->challenge);
    char *url = websubwire_verify_url(o->callback, o->mode, o->topic_uri,
                                      o->challenge, o->lease_s);
    struct rs_http_req_opts ro = {
        .url = url,
        .timeout_ms = (unsigned)w->h->conf->verify_timeout_ms,
        .max_body = 4096,
        .on_done = on_verified,
        .ud = o,
    };
    if (url == NULL || rs_http_request(w->h->httpc, &ro, NULL) != 0) {
        rs_log_kv(RS_LOG_WARN, "cannot start verification", "callback",
                  o->callback, NULL);
        op_release(o);
        op_free(o);
    }
    rs_free(url);
}

/* ------------------------------------------------------------------ caps */

/* The slot is taken (or the pair is stored already, or there is none):
 * answer now, then verify. */
static void
on_reserved(void *ud, int rc, long long slot)
{
    struct op *o = ud;
    struct websub *w = o->w;
    if (rc == 0 && slot == SUBS_RESERVED)
        o->reserved = true;
    if (rc == RS_ECANCELED || o->gone) {
        /* the subscriber left before our answer: drop it */
        if (rc != RS_ECANCELED)
            op_release(o);
        op_free(o);
        return;
    }
    if (rc != 0) {
        op_reply(o, 503, "Service Unavailable",
                 "error: the subscription store (Redis) is unavailable");
        op_free(o);
        return;
    }
    if (slot == SUBS_TOPIC_FULL || slot == SUBS_HOST_FULL) {
        w->st.denied++;
        /* an error in the request, answered now: no denial notice */
        op_reply(o, 429, "Too Many Requests",
                 "error: subscription limit reached (%s)",
                 slot == SUBS_TOPIC_FULL ? "per topic" : "per callback host");
        op_free(o);
        return;
    }
    op_reply(o, 202, "Accepted", "accepted: verifying intent at the callback");
    op_verify(o);
}

/* The address is permitted: a subscribe takes a slot under the caps (the
 * check and the taking are one script, so requests at once cannot all see
 * the same room); an unsubscribe takes none. */
static void
op_reserve(struct op *o)
{
    struct websub *w = o->w;
    if (o->gone) {
        op_free(o);
        return;
    }
    if (o->deny != NULL) {
        w->st.denied++;
        op_reply(o, 404, "Not Found", "error: %s %.300s", o->deny, o->topic_uri);
        send_denial(w, o->callback, o->topic_uri, o->deny);
        op_free(o);
        return;
    }
    if (o->mode == WEBSUBWIRE_UNSUBSCRIBE) {
        op_reply(o, 202, "Accepted", "accepted: verifying intent at the callback");
        op_verify(o);
        return;
    }
    struct subs_caps caps = op_caps(w);
    if (subs_reserve(w->h->subs, o->topic_name, o->callback, o->host, &caps,
                     on_reserved, o) != 0) {
        op_reply(o, 503, "Service Unavailable",
                 "error: the subscription store (Redis) is unavailable");
        op_free(o);
    }
}

/* ----------------------------------------------------------- address check */

static void
on_resolved(int result, struct evutil_addrinfo *res, void *arg)
{
    struct op *o = arg;
    struct websub *w = o->w;
    if (result == EVUTIL_EAI_CANCEL) {
        if (res != NULL)
            evutil_freeaddrinfo(res);
        op_free(o);
        return;
    }
    if (result != 0 || res == NULL) {
        w->st.denied++;
        op_reply(o, 400, "Bad Request", "error: callback host %s does not resolve",
                 o->host);
        op_free(o);
        return;
    }
    bool permitted = true;
    for (struct evutil_addrinfo *ai = res; ai != NULL && permitted; ai = ai->ai_next)
        permitted = netpolicy_permits(w->h->np, ai->ai_addr);
    evutil_freeaddrinfo(res);
    if (!permitted) {
        w->st.denied++;
        op_reply(o, 403, "Forbidden",
                 "error: callback host %s is in a denied network", o->host);
        op_free(o);
        return;
    }
    op_reserve(o);
}

static void
op_check_address(struct op *o)
{
    struct websub *w = o->w;
    char lit[INET6_ADDRSTRLEN + 2];
    const char *h = o->host;
    size_t hl = strlen(h);
    /* a bracketed IPv6 literal */
    if (hl > 2 && h[0] == '[' && h[hl - 1] == ']' && hl - 2 < sizeof(lit)) {
        memcpy(lit, h + 1, hl - 2);
        lit[hl - 2] = '\0';
        h = lit;
    }
    struct in6_addr a6;
    struct in_addr a4;
    if (inet_pton(AF_INET, h, &a4) == 1 || inet_pton(AF_INET6, h, &a6) == 1) {
        if (!netpolicy_permits_str(w->h->np, h)) {
            w->st.denied++;
            op_reply(o, 403, "Forbidden",
                     "error: callback address %s is in a denied network", h);
            op_free(o);
            return;
        }
        op_reserve(o);
        return;
    }
    struct evutil_addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    /* may call on_resolved before returning */
    evdns_getaddrinfo(w->h->dns, o->host, NULL, &hints, on_resolved, o);
}

/* ------------------------------------------------------------ publish ping */

struct ping {
    struct websub *w;
    char name[BACKLOG_NAME_MAX + 1];
    char *url;
};

static void
on_ping_appended(void *ud, int rc, struct msg_id id)
{
    struct ping *p = ud;
    char idb[MSG_ID_BUFSZ];
    if (rc == 0) {
        struct topic *t = topics_by_name(p->w->h->topics, p->name);
        if (t != NULL)
            topic_appended(t, id);
        p->w->st.pings++;
        msg_id_format(id, idb);
        rs_log_kv(RS_LOG_INFO, "publish ping distributed", "topic", p->name,
                  "url", p->url, "id", idb, NULL);
    } else if (rc != RS_ECANCELED) {
        p->w->st.ping_failed++;
        rs_log_kv(RS_LOG_WARN, "publish ping not stored", "url", p->url,
                  "error", rs_strerror(rc), NULL);
    }
    rs_free(p->url);
    rs_free(p);
}

static void
on_ping_fetched(void *ud, struct rs_http_req *req, const struct rs_http_result *res)
{
    (void)req;
    struct ping *p = ud;
    struct websub *w = p->w;
    struct topic *t = topics_by_name(w->h->topics, p->name);
    if (res->rc == RS_ECANCELED || t == NULL) {
        rs_free(p->url);
        rs_free(p);
        return;
    }
    if (res->rc != 0 || res->status < 200 || res->status >= 300) {
        w->st.ping_failed++;
        rs_log_kv(RS_LOG_WARN, "publish ping: cannot fetch the topic", "url",
                  p->url, "error", res->rc ? res->errstr : "non-2xx answer", NULL);
        rs_free(p->url);
        rs_free(p);
        return;
    }
    const char *ct = res->content_type != NULL ? res->content_type
                                                : "application/octet-stream";
    if (backlog_append(w->h->backlog, t->name, res->body, res->body_len, ct,
                       t->max_entries, on_ping_appended, p) != 0) {
        w->st.ping_failed++;
        rs_log_kv(RS_LOG_WARN, "publish ping: Redis unavailable", "url", p->url, NULL);
        rs_free(p->url);
        rs_free(p);
    }
}

static void
on_ping_claimed(void *ud, int rc, const char *rec, size_t len)
{
    struct ping *p = ud;
    struct topic *t = topics_by_name(p->w->h->topics, p->name);
    char *uri = NULL;
    enum topic_kind kind;
    if (rc == 0 && t != NULL && topic_record_parse(rec, len, &uri, &kind) == 0) {
        t->kind = kind;
        t->registered = true;
    }
    rs_free(uri);
    struct rs_http_req_opts ro = {
        .url = p->url,
        .timeout_ms = 30000,
        .max_body = (size_t)p->w->h->conf->max_body,
        .max_redirects = 5,
        .on_done = on_ping_fetched,
        .ud = p,
    };
    if (rc != 0 || rs_http_request(p->w->h->httpc, &ro, NULL) != 0) {
        p->w->st.ping_failed++;
        rs_free(p->url);
        rs_free(p);
    }
}

/* Open mode, a new topic and no room for it: the cap's answer, as for a
 * publish (docs/protocol.md 3), not "unknown topic". */
static void
reply_full(struct hub *h, struct evhttp_request *req)
{
    reply_text(req, 503, "Service Unavailable",
               "error: this hub holds %zu topics already (--max-topics)",
               topics_max(h->topics));
}

static void
handle_publish(struct websub *w, struct evhttp_request *req,
               const struct websubwire_form *form)
{
    struct hub *h = w->h;
    size_t started = 0, unknown = 0, full = 0;
    for (size_t i = 0; i < form->nurls; i++) {
        const char *url = form->urls[i];
        if (!rs_url_is_http(url)) {
            reply_text(req, 400, "Bad Request",
                       "error: %s must be an absolute http(s) URL",
                       form->url_keys[i]);
            return;
        }
        bool created = false;
        const char *bad = NULL;
        struct topic *t = topics_by_uri(h->topics, url);
        if (t == NULL)
            t = topics_learn(h->topics, url, &created, &bad);
        if (t == NULL && bad != NULL) {
            reply_text(req, 400, "Bad Request", "error: %s: %s",
                       form->url_keys[i], bad);
            return;
        }
        if (t == NULL) {
            if (topics_full(h->topics))
                full++;
            else
                unknown++;
            continue;
        }
        struct ping *p = rs_calloc(1, sizeof(*p));
        if (p == NULL || (p->url = rs_strdup(url)) == NULL) {
            rs_free(p);
            continue;
        }
        p->w = w;
        snprintf(p->name, sizeof(p->name), "%s", t->name);
        if (!t->configured && !t->registered) {
            char *rec = topic_record(t);
            if (rec == NULL ||
                backlog_topic_claim(h->backlog, t->name, rec, on_ping_claimed, p) != 0) {
                rs_free(p->url);
                rs_free(p);
                rs_free(rec);
                continue;
            }
            rs_free(rec);
        } else {
            on_ping_claimed(p, 0, NULL, 0);   /* straight to the fetch */
        }
        started++;
    }
    if (started == 0 && full > 0) {
        reply_full(h, req);
        return;
    }
    if (started == 0 && unknown > 0) {
        reply_text(req, 404, "Not Found", "error: unknown topic");
        return;
    }
    if (started == 0) {
        reply_text(req, 400, "Bad Request",
                   "error: hub.mode=publish needs hub.url or hub.topic");
        return;
    }
    reply_text(req, 202, "Accepted", "accepted: fetching %zu topic%s",
               started, started == 1 ? "" : "s");
}

/* -------------------------------------------------------------- requests */

/* A subscribe or unsubscribe whose form keeps the rules: an op, or an
 * answer now. */
static void
handle_subscription(struct websub *w, struct evhttp_request *req,
                    const struct websubwire_form *f)
{
    struct hub *h = w->h;
    struct topic *t = topics_by_uri(h->topics, f->topic);
    bool created = false;
    /* Read access first, before a topic is learnt or anything reaches the
     * callback: the bearer comes in Authorization only (never a hub.*
     * parameter, which would land in form logs). */
    char derived[BACKLOG_NAME_MAX + 1];
    const char *name = t != NULL ? t->name
                     : topics_derive_name(f->topic, derived,
                                          sizeof(derived)) == 0 ? derived
                                                                : f->topic;
    struct read_cred *cred = NULL;
    enum read_verdict rv = hub_read_cred(h, req, &cred);
    if (rv == READ_OK || rv == READ_NO_CRED)
        rv = readauth_allows(h->readauth, cred, name, f->topic);
    else if (readauth_allows(h->readauth, NULL, name, f->topic) == READ_PUBLIC)
        rv = READ_PUBLIC;   /* a public topic, whatever came along */
    readauth_cred_free(cred);
    if (readauth_verdict_status(rv) != 0) {
        w->st.denied++;
        hub_read_note(h, req, "websub", name, rv);
        hub_read_reply(req, rv);
        return;
    }
    const char *bad = NULL;
    if (t == NULL && f->mode == WEBSUBWIRE_SUBSCRIBE)
        t = topics_learn(h->topics, f->topic, &created, &bad);
    if (t == NULL && bad != NULL) {
        reply_text(req, 400, "Bad Request", "error: hub.topic: %s", bad);
        return;
    }
    if (t == NULL && f->mode == WEBSUBWIRE_SUBSCRIBE && topics_full(h->topics)) {
        reply_full(h, req);
        return;
    }
    struct op *o = rs_calloc(1, sizeof(*o));
    if (o == NULL) {
        reply_text(req, 503, "Service Unavailable", "error: out of memory");
        return;
    }
    o->w = w;
    o->mode = f->mode;
    o->req = req;
    o->evcon = evhttp_request_get_connection(req);
    o->lease_s = f->lease_s;
    if (t != NULL)
        snprintf(o->topic_name, sizeof(o->topic_name), "%s", t->name);
    else
        o->deny = "unknown topic";   /* closed mode, or unsubscribe */
    o->topic_uri = rs_strdup(f->topic);
    o->callback = rs_strdup(f->callback);
    o->host = websubwire_callback_host(f->callback);
    o->secret = f->secret != NULL ? rs_strdup(f->secret) : NULL;
    if (o->topic_uri == NULL || o->callback == NULL || o->host == NULL ||
        (f->secret != NULL && o->secret == NULL)) {
        reply_text(req, o->host == NULL ? 400 : 503,
                   o->host == NULL ? "Bad Request" : "Service Unavailable",
                   o->host == NULL ? "error: hub.callback has no host"
                                   : "error: out of memory");
        o->req = NULL;
        op_free(o);
        return;
    }
    if (strlen(o->host) > SUBS_HOST_MAX) {
        w->st.denied++;
        reply_text(req, 400, "Bad Request",
                   "error: hub.callback's host is longer than %d bytes",
                   SUBS_HOST_MAX);
        o->req = NULL;
        op_free(o);
        return;
    }
    if (!backlog_ready(h->backlog)) {
        o->req = NULL;
        op_free(o);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
        reply_text(req, 503, "Service Unavailable",
                   "error: the subscription store (Redis) is unavailable");
        return;
    }
    evhttp_connection_set_closecb(o->evcon, on_op_gone, o);
    op_check_address(o);
}

void
websub_handle(struct websub *w, struct evhttp_request *req)
{
    const struct hub_conf *c = w->h->conf;
    const struct websubwire_leases leases = {
        .min_s = (uint64_t)c->lease_min_ms / 1000,
        .max_s = (uint64_t)c->lease_max_ms / 1000,
        .default_s = (uint64_t)c->lease_default_ms / 1000,
    };
    struct websubwire_form f;
    const char *why = NULL;
    w->st.requests++;

    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    /* contiguous: the body is capped (--max-body) before we see it */
    const char *body = (const char *)evbuffer_pullup(in, -1);
    int rc = websubwire_form_parse(&f, body != NULL ? body : "", body != NULL ? len : 0,
                                   &leases, &why);
    if (rc == RS_ENOMEM) {
        reply_text(req, 503, "Service Unavailable", "error: out of memory");
    } else if (rc != 0) {
        if (rc == RS_EINVAL)
            w->st.denied++;   /* a form that breaks a rule; not garbage */
        reply_text(req, 400, "Bad Request", "error: %s", why);
    } else if (f.mode == WEBSUBWIRE_PUBLISH) {
        handle_publish(w, req, &f);
    } else {
        handle_subscription(w, req, &f);
    }
    websubwire_form_cleanup(&f);   /* topic, callback, secret die here */
}

struct websub *
websub_new(struct hub *h)
{
    struct websub *w = rs_calloc(1, sizeof(*w));
    if (w != NULL)
        w->h = h;
    return w;
}

void
websub_free(struct websub *w)
{
    rs_free(w);
}

void
websub_stats(const struct websub *w, struct websub_stats *out)
{
    *out = w->st;
}
