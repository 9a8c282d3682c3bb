/*
 * deliver.c - WebSub content distribution (deliver.h).
 *
 * Per subscription: a queue of refcounted bodies in stream order, fed from
 * the tail while the subscription is caught up; `queued_to` is the newest
 * id queued. When it falls behind (start, overflow) it is "lagging" and
 * refills from the backlog after queued_to. The rule that keeps the seam
 * between pages and the tail gap-free is fanout.c's: a short page ends the
 * lag only if the tail's head for the topic has not passed the page's last
 * id; otherwise what the tail gave meanwhile is in the next page.
 *
 * One POST in flight per subscription; on 2xx the cursor advances and is
 * written to Redis within 100 ms; 410 removes; anything else backs off.
 */
#include <curl/curl.h>
#include <event2/event.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RS_LOG_MODULE "websub"
#include "deliver.h"
#include "rs_alloc.h"
#include "rs_log.h"
#include "rs_time.h"
#include "rs_url.h"

/* An accepted notification as delivered: bytes as published. */
struct body {
    unsigned refs;
    struct msg_id id;
    uint64_t accepted_ms;     /* the id's time part: when Redis stored it */
    char *ctype;
    size_t len;
    char data[];
};

struct dtopic;

/* A callback origin (scheme://host:port): the unit of the HTTP client's
 * per-host connection cap. Subscriptions whose last attempt failed
 * ("suspect") may hold at most suspect_cap of its slots, so retries of
 * stalled or failing callbacks never starve a healthy one on the same host. */
struct dhost {
    char *origin;
    unsigned refs;            /* subscriptions using it */
    unsigned inflight;        /* POSTs handed to the HTTP client */
    unsigned suspect_inflight;
    /* Waiting for a slot, healthy ones served first. We never hand the
     * client more than host_conns POSTs for a host: beyond its cap curl
     * queues FIFO, and a healthy POST would wait behind suspect ones. */
    struct dsub *wait_head[2], *wait_tail[2];   /* [0] healthy, [1] suspect */
};

struct dsub {
    struct deliver *d;
    struct dtopic *t;         /* NULL once forgotten */
    char *callback;
    char *host;
    char *secret;             /* NULL: no signature */
    uint64_t expires_ms;
    bool failing;             /* as recorded in Redis */
    struct msg_id cursor;     /* last delivered (2xx) */
    struct msg_id saved;      /* last cursor written to Redis */
    struct msg_id queued_to;  /* newest id queued or delivered */
    struct body **q;          /* ring, queue_max slots */
    unsigned qhead, qlen;
    bool lagging, fetching;
    struct rs_http_req *req;  /* POST in flight */
    struct dhost *dh;
    bool suspect_counted;     /* this POST counts in dh->suspect_inflight */
    bool queued;              /* in dh's wait list */
    struct dsub *wait_next;
    struct event *timer;      /* retry backoff */
    bool waiting;             /* timer armed */
    unsigned attempts;
    uint64_t first_fail_ms;
    uint64_t delivered;
    /* Notifications after gap_after were trimmed before they could be
     * delivered. The first one queued after that (gap_first; 0-0 until
     * there is one: no entry has that id) and every POST after it say so
     * (X-Hub-Gap) until one is answered 2xx (post_gap: the one in flight
     * said it). */
    bool gap, post_gap;
    struct msg_id gap_after, gap_first;
    bool removing;            /* removal asked of Redis: deliver no more */
    bool seen;                /* reload bookkeeping */
};

struct dtopic {
    struct deliver *d;
    char name[BACKLOG_NAME_MAX + 1];
    bool owned, pinned;
    uint64_t lock_ok_ms;      /* last time the lock was ours for sure */
    bool loading, reload_again;
    struct msg_id head;       /* newest id the tail gave for this topic */
    struct dsub **v;
    size_t n, cap;
};

struct deliver {
    struct deliver_opts o;
    struct dtopic **topics;
    size_t ntopics, cap;
    struct dhost **hosts;
    size_t nhosts, hosts_cap;
    unsigned suspect_cap;
    struct event *ev_tick;    /* locks, leases, reloads */
    struct event *ev_flush;   /* cursors */
    struct deliver_stats st;
    bool ticking;             /* a tick's SMEMBERS is in flight */
    bool closing;
};

/* ---------------------------------------------------------------- helpers */

/* Wall-clock milliseconds (leases and ids are wall-clock). */
static uint64_t
now_ms(void)
{
    return (uint64_t)(rs_time_now() / 1000);
}

static void
body_unref(struct body *b)
{
    if (b != NULL && --b->refs == 0) {
        rs_free(b->ctype);
        rs_free(b);
    }
}

static struct body *
body_new(const struct backlog_entry *e)
{
    struct body *b = rs_malloc(sizeof(*b) + e->len + 1);
    if (b == NULL)
        return NULL;
    b->refs = 1;
    b->id = e->id;
    b->accepted_ms = e->id.ms;
    b->len = e->len;
    memcpy(b->data, e->body, e->len);
    b->data[e->len] = '\0';
    b->ctype = rs_strndup(e->ctype_len ? e->ctype : "application/xml",
                          e->ctype_len ? e->ctype_len : 15);
    if (b->ctype == NULL) {
        rs_free(b);
        return NULL;
    }
    return b;
}

char *
callback_host(const char *url)
{
    char *host = NULL, *out = NULL;
    CURLU *u = curl_url();
    if (u == NULL)
        return NULL;
    if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        out = rs_strdup(host);
        for (char *c = out; c != NULL && *c; c++)
            if (*c >= 'A' && *c <= 'Z')
                *c = (char)(*c + 32);
    }
    curl_free(host);
    curl_url_cleanup(u);
    return out;
}

char *
sub_record_json(const struct sub_record *r)
{
    json_t *o = json_pack("{s:I, s:I, s:s}", "expires", (json_int_t)r->expires_ms,
                          "created", (json_int_t)r->created_ms, "state",
                          r->failing ? "failing" : "active");
    if (o == NULL)
        return NULL;
    if (r->secret != NULL)
        json_object_set_new(o, "secret", json_string(r->secret));
    char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    if (s == NULL)
        return NULL;
    char *out = rs_strdup(s);
    free(s);
    return out;
}

int
sub_record_parse(const char *json, struct sub_record *r)
{
    json_error_t err;
    json_t *o = json_loads(json, 0, &err);
    memset(r, 0, sizeof(*r));
    if (o == NULL)
        return RS_EINVAL;
    json_int_t exp = 0, created = 0;
    const char *state = "active", *secret = NULL;
    int rc = json_unpack(o, "{s:I, s?I, s?s, s?s}", "expires", &exp, "created",
                         &created, "state", &state, "secret", &secret) == 0
                 ? 0 : RS_EINVAL;
    if (rc == 0) {
        r->expires_ms = (uint64_t)exp;
        r->created_ms = (uint64_t)created;
        r->failing = strcmp(state, "failing") == 0;
        if (secret != NULL && (r->secret = rs_strdup(secret)) == NULL)
            rc = RS_ENOMEM;
    }
    json_decref(o);
    return rc;
}

/* ----------------------------------------------------------- subscriptions */

static void sub_kick(struct deliver *d, struct dsub *s);

static struct dtopic *
topic_find(const struct deliver *d, const char *name)
{
    for (size_t i = 0; i < d->ntopics; i++)
        if (strcmp(d->topics[i]->name, name) == 0)
            return d->topics[i];
    return NULL;
}

static struct dtopic *
topic_get(struct deliver *d, const char *name)
{
    struct dtopic *t = topic_find(d, name);
    if (t != NULL || !backlog_name_ok(name))
        return t;
    if (d->ntopics == d->cap) {
        size_t ncap = d->cap ? d->cap * 2 : 8;
        struct dtopic **nv = rs_realloc(d->topics, ncap * sizeof(*nv));
        if (nv == NULL)
            return NULL;
        d->topics = nv;
        d->cap = ncap;
    }
    t = rs_calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->d = d;
    snprintf(t->name, sizeof(t->name), "%s", name);
    d->topics[d->ntopics++] = t;
    return t;
}

static void
sub_drop_queue(struct dsub *s, unsigned queue_max)
{
    for (unsigned i = 0; i < s->qlen; i++)
        body_unref(s->q[(s->qhead + i) % queue_max]);
    s->qhead = s->qlen = 0;
}

static struct dhost *
host_get(struct deliver *d, const char *callback)
{
    char *origin = NULL;
    if (rs_url_origin(callback, &origin) != 0)
        return NULL;
    for (size_t i = 0; i < d->nhosts; i++) {
        if (strcmp(d->hosts[i]->origin, origin) == 0) {
            rs_free(origin);
            d->hosts[i]->refs++;
            return d->hosts[i];
        }
    }
    struct dhost *h = NULL;
    if (d->nhosts == d->hosts_cap) {
        size_t ncap = d->hosts_cap ? d->hosts_cap * 2 : 16;
        struct dhost **nv = rs_realloc(d->hosts, ncap * sizeof(*nv));
        if (nv == NULL)
            goto fail;
        d->hosts = nv;
        d->hosts_cap = ncap;
    }
    h = rs_calloc(1, sizeof(*h));
    if (h == NULL)
        goto fail;
    h->origin = origin;
    h->refs = 1;
    d->hosts[d->nhosts++] = h;
    return h;
fail:
    rs_free(origin);
    return NULL;
}

static void
host_put(struct deliver *d, struct dhost *h)
{
    if (h == NULL || --h->refs > 0)
        return;
    for (size_t i = 0; i < d->nhosts; i++) {
        if (d->hosts[i] == h) {
            d->hosts[i] = d->hosts[--d->nhosts];
            break;
        }
    }
    rs_free(h->origin);
    rs_free(h);
}

static void
host_wait(struct dhost *h, struct dsub *s)
{
    if (s->queued)
        return;
    int k = s->attempts > 0;
    s->wait_next = NULL;
    if (h->wait_tail[k] != NULL)
        h->wait_tail[k]->wait_next = s;
    else
        h->wait_head[k] = s;
    h->wait_tail[k] = s;
    s->queued = true;
}

static void
host_unwait(struct dhost *h, struct dsub *s)
{
    if (!s->queued)
        return;
    for (int k = 0; k < 2; k++) {
        struct dsub *prev = NULL;
        for (struct dsub *w = h->wait_head[k]; w != NULL; prev = w, w = w->wait_next) {
            if (w != s)
                continue;
            if (prev != NULL)
                prev->wait_next = w->wait_next;
            else
                h->wait_head[k] = w->wait_next;
            if (h->wait_tail[k] == w)
                h->wait_tail[k] = prev;
            s->queued = false;
            return;
        }
    }
}

/* Free s: nothing of it is outstanding (no POST, no page read). */
static void
sub_free(struct deliver *d, struct dsub *s)
{
    host_unwait(s->dh, s);
    host_put(d, s->dh);
    if (s->t != NULL)
        d->st.subscriptions--;
    sub_drop_queue(s, d->o.queue_max);
    if (s->timer != NULL)
        event_free(s->timer);
    rs_free(s->q);
    rs_free(s->callback);
    rs_free(s->host);
    rs_free(s->secret);
    rs_free(s);
}

/* Detach s from its topic and free it, or let its POST's on_done do it. */
static void
sub_forget(struct deliver *d, struct dsub *s)
{
    struct dtopic *t = s->t;
    for (size_t i = 0; i < t->n; i++) {
        if (t->v[i] == s) {
            t->v[i] = t->v[--t->n];
            break;
        }
    }
    d->st.subscriptions--;
    if (s->failing)
        d->st.failing--;
    s->t = NULL;
    s->removing = true;
    host_unwait(s->dh, s);
    if (s->waiting)
        event_del(s->timer);
    if (s->req != NULL)
        rs_http_cancel(s->req);   /* its on_done releases s */
    else if (!s->fetching)
        sub_free(d, s);           /* else the page callback does */
}

/* After an outstanding operation ended: free s if it was forgotten. */
static bool
sub_released(struct dsub *s)
{
    if (s->t != NULL || s->req != NULL || s->fetching)
        return false;
    sub_free(s->d, s);
    return true;
}

static void on_retry(evutil_socket_t fd, short what, void *arg);

static struct dsub *
sub_new(struct deliver *d, struct dtopic *t, const char *callback,
        const struct sub_record *rec, struct msg_id cursor)
{
    struct dsub *s = rs_calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->d = d;
    s->callback = rs_strdup(callback);
    s->host = callback_host(callback);
    s->q = rs_calloc(d->o.queue_max, sizeof(*s->q));
    s->timer = evtimer_new(d->o.base, on_retry, s);
    s->dh = host_get(d, callback);
    if (s->callback == NULL || s->host == NULL || s->q == NULL ||
        s->timer == NULL || s->dh == NULL) {
        sub_free(d, s);
        return NULL;
    }
    s->t = t;
    s->secret = rec->secret != NULL ? rs_strdup(rec->secret) : NULL;
    s->expires_ms = rec->expires_ms;
    s->failing = rec->failing;
    s->cursor = s->saved = s->queued_to = cursor;
    s->lagging = true;
    if (t->n == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 8;
        struct dsub **nv = rs_realloc(t->v, ncap * sizeof(*nv));
        if (nv == NULL) {
            s->t = NULL;
            sub_free(d, s);
            return NULL;
        }
        t->v = nv;
        t->cap = ncap;
    }
    t->v[t->n++] = s;
    d->st.subscriptions++;
    if (s->failing)
        d->st.failing++;
    return s;
}

static void
on_removed(void *ud, int rc, long long result)
{
    (void)ud;
    (void)result;
    if (rc != 0 && rc != RS_ECANCELED)
        rs_log(RS_LOG_WARN, "removing a subscription failed: %s", rs_strerror(rc));
}

/* Remove s from Redis and from memory. */
static void
sub_remove(struct deliver *d, struct dsub *s, const char *why)
{
    rs_log_kv(RS_LOG_INFO, "subscription removed", "topic", s->t->name,
              "callback", s->callback, "why", why, NULL);
    if (subs_remove(d->o.subs, s->t->name, s->callback, s->host, on_removed,
                    NULL) != 0)
        rs_log(RS_LOG_WARN, "cannot remove subscription %s now; the lease "
               "sweep will", s->callback);
    sub_forget(d, s);
}

/* ------------------------------------------------------------------- queue */

static bool
sub_enqueue(struct deliver *d, struct dsub *s, struct body *b)
{
    if (s->qlen == d->o.queue_max)
        return false;
    b->refs++;
    s->q[(s->qhead + s->qlen) % d->o.queue_max] = b;
    s->qlen++;
    s->queued_to = b->id;
    if (s->gap && msg_id_is_zero(s->gap_first))
        s->gap_first = b->id;
    return true;
}

static void
sub_pop(struct deliver *d, struct dsub *s)
{
    body_unref(s->q[s->qhead]);
    s->qhead = (s->qhead + 1) % d->o.queue_max;
    s->qlen--;
}

static void
on_page(void *ud, int rc, struct msg_id mark, const struct backlog_entry *e,
        size_t n)
{
    struct dsub *s = ud;
    struct deliver *d = s->d;
    s->fetching = false;
    if (sub_released(s) || rc != 0)
        return;   /* forgotten meanwhile; or Redis failed: the tick retries */
    struct dtopic *t = s->t;
    d->st.pages++;
    if (msg_id_cmp(s->queued_to, mark) < 0 && !msg_id_is_zero(s->queued_to)
        && !s->gap) {
        /* WebSub has no gap signal of its own: the next deliveries carry
         * X-Hub-Gap until one is taken, so the subscriber pulls what was
         * lost; meanwhile go on from what the backlog still holds. */
        s->gap = true;
        s->gap_first = (struct msg_id){ 0, 0 };
        s->gap_after = s->queued_to;
        d->st.gaps++;
        char a[MSG_ID_BUFSZ], b[MSG_ID_BUFSZ];
        msg_id_format(s->queued_to, a);
        msg_id_format(mark, b);
        rs_log_kv(RS_LOG_ERROR, "subscription fell behind the backlog: "
                  "notifications were trimmed before delivery", "topic",
                  t->name, "callback", s->callback, "after", a,
                  "trimmed_through", b, NULL);
    }
    bool all_in = true;
    for (size_t i = 0; i < n && all_in; i++) {
        if (msg_id_cmp(e[i].id, s->queued_to) <= 0)
            continue;
        struct body *b = body_new(&e[i]);
        all_in = b != NULL && sub_enqueue(d, s, b);
        body_unref(b);
    }
    /* Caught up only if the page was short, all of it fitted in the queue,
     * and the tail has not gone past it meanwhile (what the tail gave is
     * then in the next page). */
    if (all_in && n < d->o.queue_max && msg_id_cmp(t->head, s->queued_to) <= 0)
        s->lagging = false;
    sub_kick(d, s);
}

static void
sub_fetch(struct deliver *d, struct dsub *s)
{
    if (s->fetching || !s->lagging || s->qlen > d->o.queue_max / 2)
        return;
    if (backlog_page(d->o.backlog, s->t->name, s->queued_to, d->o.queue_max,
                     on_page, s) == 0)
        s->fetching = true;
}

/* ---------------------------------------------------------------- delivery */

static void on_posted(void *ud, struct rs_http_req *req,
                      const struct rs_http_result *res);

static void
hmac_hex(const char *key, const char *data, size_t len, char *out)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    HMAC(EVP_sha256(), key, (int)strlen(key), (const unsigned char *)data, len,
         md, &mdlen);
    for (unsigned i = 0; i < mdlen; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static void
sub_post(struct deliver *d, struct dsub *s)
{
    struct body *b = s->q[s->qhead];
    const struct topic *tp = topics_by_name(d->o.topics, s->t->name);
    char ctype[200], link[4200], sig[160], idh[80], gaph[80];
    char id[MSG_ID_BUFSZ];
    const char *hdrs[7];
    int nh = 0;
    snprintf(ctype, sizeof(ctype), "Content-Type: %s", b->ctype);
    hdrs[nh++] = ctype;
    snprintf(link, sizeof(link), "Link: <%s>; rel=\"hub\", <%s>; rel=\"self\"",
             d->o.hub_url, tp != NULL ? tp->uri : "");
    hdrs[nh++] = link;
    if (s->secret != NULL) {
        char hex[2 * EVP_MAX_MD_SIZE + 1];
        hmac_hex(s->secret, b->data, b->len, hex);
        snprintf(sig, sizeof(sig), "X-Hub-Signature: sha256=%s", hex);
        hdrs[nh++] = sig;
    }
    msg_id_format(b->id, id);
    snprintf(idh, sizeof(idh), "X-Hub-Id: %s", id);
    hdrs[nh++] = idh;
    s->post_gap = s->gap && !msg_id_is_zero(s->gap_first) &&
                  msg_id_cmp(b->id, s->gap_first) >= 0;
    if (s->post_gap) {
        msg_id_format(s->gap_after, id);
        snprintf(gaph, sizeof(gaph), "X-Hub-Gap: %s", id);
        hdrs[nh++] = gaph;
    }
    hdrs[nh++] = "Expect:";   /* no 100-continue round trip */
    hdrs[nh] = NULL;

    struct rs_http_req_opts ro = {
        .method = "POST",
        .url = s->callback,
        .headers = hdrs,
        .body = b->data,
        .body_len = b->len,
        .body_borrowed = true,       /* b stays queued until on_done */
        .timeout_ms = d->o.delivery_timeout_ms,
        .max_body = 64 * 1024,       /* the answer's body is not used */
        .on_done = on_posted,
        .ud = s,
    };
    int rc = rs_http_request(d->o.http, &ro, &s->req);
    if (rc != 0) {
        s->req = NULL;
        rs_log(RS_LOG_WARN, "cannot start a delivery to %s: %s", s->callback,
               rs_strerror(rc));
        /* retried by the tick */
        return;
    }
    d->st.in_flight++;
    s->dh->inflight++;
    if (s->attempts > 0) {
        s->dh->suspect_inflight++;
        s->suspect_counted = true;
    }
}

static uint64_t
backoff_ms(const struct deliver *d, unsigned attempts)
{
    uint64_t delay = 1000;
    for (unsigned i = 1; i < attempts && delay < d->o.retry_max_delay_ms; i++)
        delay *= 2;
    if (delay > d->o.retry_max_delay_ms)
        delay = d->o.retry_max_delay_ms;
    /* +-20 % jitter, so callbacks that failed together do not retry together */
    uint64_t span = delay / 5;
    if (span > 0)
        delay = delay - span + (uint64_t)(rand() % (int)(2 * span + 1));
    return delay;
}

static void
on_record_set(void *ud, int rc, long long result)
{
    (void)ud;
    (void)result;
    if (rc != 0 && rc != RS_ECANCELED)
        rs_log(RS_LOG_WARN, "cannot record a subscription state: %s",
               rs_strerror(rc));
}

static void
sub_set_failing(struct deliver *d, struct dsub *s, bool failing)
{
    if (s->failing == failing)
        return;
    s->failing = failing;
    if (failing)
        d->st.failing++;
    else
        d->st.failing--;
    struct sub_record r = { .secret = s->secret, .expires_ms = s->expires_ms,
                            .created_ms = 0, .failing = failing };
    char *js = sub_record_json(&r);
    if (js == NULL || subs_set_record(d->o.subs, s->t->name, s->callback, js,
                                      on_record_set, NULL) != 0)
        rs_log(RS_LOG_WARN, "cannot record state of %s", s->callback);
    rs_free(js);
}

static void
host_pump(struct deliver *d, struct dhost *h)
{
    while (h->inflight < d->o.host_conns) {
        struct dsub *s = h->wait_head[0];
        int k = 0;
        if (s == NULL && h->suspect_inflight < d->suspect_cap) {
            s = h->wait_head[1];
            k = 1;
        }
        if (s == NULL)
            return;
        h->wait_head[k] = s->wait_next;
        if (h->wait_head[k] == NULL)
            h->wait_tail[k] = NULL;
        s->queued = false;
        if (s->t != NULL && s->qlen > 0 && s->req == NULL && !s->waiting)
            sub_post(d, s);
    }
}

static void
on_posted(void *ud, struct rs_http_req *req, const struct rs_http_result *res)
{
    (void)req;
    struct dsub *s = ud;
    struct deliver *d = s->d;
    s->req = NULL;
    d->st.in_flight--;
    struct dhost *dh = s->dh;
    dh->inflight--;
    if (s->suspect_counted) {
        dh->suspect_inflight--;
        s->suspect_counted = false;
    }
    if (!d->closing)
        host_pump(d, dh);   /* a slot freed: the next waiting one, healthy first */
    if (sub_released(s) || res->rc == RS_ECANCELED || d->closing)
        return;
    long st = res->rc == 0 ? res->status : 0;
    if (st >= 200 && st < 300) {
        d->st.delivered++;
        s->delivered++;
        s->cursor = s->q[s->qhead]->id;
        sub_pop(d, s);
        if (s->post_gap)
            s->gap = false;   /* told: the subscriber pulls */
        s->attempts = 0;
        s->first_fail_ms = 0;
        if (s->failing)
            sub_set_failing(d, s, false);
        sub_kick(d, s);
        return;
    }
    if (st == 410) {
        d->st.removed_gone++;
        sub_remove(d, s, "the callback answered 410 Gone");
        return;
    }
    d->st.attempts_failed++;
    uint64_t now = now_ms();
    if (s->first_fail_ms == 0)
        s->first_fail_ms = now;
    s->attempts++;
    rs_log_kv(RS_LOG_WARN, "delivery failed", "callback", s->callback,
              "status", st ? (st >= 500 ? "5xx" : "4xx") : "none",
              "error", res->rc ? res->errstr : "", NULL);
    if (now - s->first_fail_ms >= d->o.retry_window_ms) {
        if (d->o.drop_failing) {
            d->st.removed_failing++;
            sub_remove(d, s, "failing for longer than the retry window");
            return;
        }
        sub_set_failing(d, s, true);
    }
    struct timeval tv;
    uint64_t delay = backoff_ms(d, s->attempts);
    tv.tv_sec = (time_t)(delay / 1000);
    tv.tv_usec = (suseconds_t)((delay % 1000) * 1000);
    if (evtimer_add(s->timer, &tv) == 0)
        s->waiting = true;
}

static void
on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct dsub *s = arg;
    s->waiting = false;
    if (s->t != NULL)
        sub_kick(s->d, s);
}

/* Do the next thing s can do: post the head of its queue, or refill. */
static void
sub_kick(struct deliver *d, struct dsub *s)
{
    if (s->t == NULL || !s->t->owned || s->req != NULL || s->waiting ||
        d->closing)
        return;
    if (s->expires_ms != 0 && s->expires_ms <= now_ms())
        return;   /* expired: the lease sweep removes it */
    if (s->qlen > 0) {
        struct dhost *h = s->dh;
        bool suspect = s->attempts > 0;
        if (h->inflight < d->o.host_conns &&
            (!suspect || h->suspect_inflight < d->suspect_cap))
            sub_post(d, s);
        else
            host_wait(h, s);   /* host_pump starts it when a slot frees */
    }
    sub_fetch(d, s);
}

/* ---------------------------------------------------------------- tail */

void
deliver_on_entries(void *ud, const char *chan, const struct backlog_entry *e,
                   size_t n)
{
    struct deliver *d = ud;
    struct dtopic *t = topic_find(d, chan);
    if (t == NULL || n == 0)
        return;
    struct body **bodies = rs_calloc(n, sizeof(*bodies));
    for (size_t i = 0; bodies != NULL && i < n; i++)
        bodies[i] = body_new(&e[i]);
    if (msg_id_cmp(e[n - 1].id, t->head) > 0)
        t->head = e[n - 1].id;
    for (size_t k = 0; k < t->n; k++) {
        struct dsub *s = t->v[k];
        if (s->lagging)
            continue;   /* its next page covers these */
        for (size_t i = 0; i < n; i++) {
            if (msg_id_cmp(e[i].id, s->queued_to) <= 0)
                continue;
            if (bodies == NULL || bodies[i] == NULL || !sub_enqueue(d, s, bodies[i])) {
                s->lagging = true;   /* full or out of memory: refill later */
                break;
            }
        }
        sub_kick(d, s);
    }
    for (size_t i = 0; bodies != NULL && i < n; i++)
        body_unref(bodies[i]);
    rs_free(bodies);
}

/* --------------------------------------------------------- load & locks */

static void topic_load(struct deliver *d, struct dtopic *t);

static void
on_loaded(void *ud, int rc, size_t n, const char *const *callbacks,
          const char *const *records, const struct msg_id *cursors)
{
    struct dtopic *t = ud;
    struct deliver *d = t->d;
    t->loading = false;
    if (rc != 0 || !t->owned || d->closing) {
        if (rc != RS_ECANCELED && t->reload_again && t->owned && !d->closing) {
            t->reload_again = false;
            topic_load(d, t);
        }
        return;
    }
    for (size_t i = 0; i < t->n; i++)
        t->v[i]->seen = false;
    for (size_t i = 0; i < n; i++) {
        struct sub_record rec;
        if (sub_record_parse(records[i], &rec) != 0) {
            rs_log(RS_LOG_WARN, "topic %s: bad subscription record for %s",
                   t->name, callbacks[i]);
            continue;
        }
        struct dsub *s = NULL;
        for (size_t k = 0; k < t->n && s == NULL; k++)
            if (strcmp(t->v[k]->callback, callbacks[i]) == 0)
                s = t->v[k];
        if (s == NULL) {
            s = sub_new(d, t, callbacks[i], &rec, cursors[i]);
        } else {
            /* re-subscribed: new lease, new secret; position kept */
            rs_free(s->secret);
            s->secret = rec.secret;
            rec.secret = NULL;
            s->expires_ms = rec.expires_ms;
        }
        rs_free(rec.secret);
        if (s != NULL) {
            s->seen = true;
            sub_kick(d, s);
        }
    }
    for (size_t i = 0; i < t->n;) {
        struct dsub *s = t->v[i];
        if (!s->seen)
            sub_forget(d, s);   /* unsubscribed, expired or removed elsewhere */
        else
            i++;
    }
    if (t->reload_again) {
        t->reload_again = false;
        topic_load(d, t);
    }
}

static void
topic_load(struct deliver *d, struct dtopic *t)
{
    if (t->loading) {
        t->reload_again = true;
        return;
    }
    if (subs_load(d->o.subs, t->name, on_loaded, t) == 0)
        t->loading = true;
}

static void
topic_release(struct deliver *d, struct dtopic *t)
{
    t->owned = false;
    while (t->n > 0)
        sub_forget(d, t->v[t->n - 1]);
    if (t->pinned) {
        fanout_unpin(d->o.fanout, t->name);
        t->pinned = false;
    }
}

static void
on_locked(void *ud, int rc, long long ours)
{
    struct dtopic *t = ud;
    struct deliver *d = t->d;
    if (rc == RS_ECANCELED || d->closing)
        return;
    if (rc != 0) {
        /* Cannot tell whether the lock is still ours. Until two thirds of
         * its TTL have passed since we last held it for sure, nobody else
         * can have it: go on (dropping the topic reloads stale cursors and
         * repeats deliveries). After that, stop, to keep "at most one node
         * delivers a topic"; the next tick retries. */
        if (t->owned && now_ms() - t->lock_ok_ms >= d->o.lock_ttl_ms * 2 / 3)
            topic_release(d, t);
        return;
    }
    if (ours == 1)
        t->lock_ok_ms = now_ms();
    if (ours == 1 && !t->owned) {
        rs_log_kv(RS_LOG_INFO, "delivering topic", "topic", t->name, NULL);
        t->owned = true;
        if (!t->pinned && fanout_pin(d->o.fanout, t->name) == 0)
            t->pinned = true;
        topic_load(d, t);
    } else if (ours == 1) {
        topic_load(d, t);   /* pick up subscriptions made on other nodes */
    } else if (t->owned) {
        rs_log_kv(RS_LOG_WARN, "lost the delivery lock", "topic", t->name, NULL);
        topic_release(d, t);
    }
}

static void
on_sub_topics(void *ud, int rc, size_t n, const char *const *names)
{
    struct deliver *d = ud;
    d->ticking = false;
    if (rc != 0 || d->closing)
        return;
    /* topics without subscriptions any more: let go */
    for (size_t i = 0; i < d->ntopics; i++) {
        struct dtopic *t = d->topics[i];
        bool listed = false;
        for (size_t k = 0; k < n && !listed; k++)
            listed = strcmp(names[k], t->name) == 0;
        if (!listed && t->owned)
            topic_release(d, t);
    }
    for (size_t k = 0; k < n; k++) {
        struct dtopic *t = topic_get(d, names[k]);
        if (t == NULL)
            continue;
        if (subs_lock(d->o.subs, t->name, d->o.node_id, d->o.lock_ttl_ms,
                      on_locked, t) != 0 && t->owned)
            topic_release(d, t);
    }
}

/* Expired leases: any node removes them (idempotent in Redis). */
static void
on_expired(void *ud, int rc, size_t n, const char *const *members)
{
    struct deliver *d = ud;
    if (rc != 0 || d->closing)
        return;
    for (size_t i = 0; i < n; i++) {
        const char *sp = strchr(members[i], ' ');
        if (sp == NULL)
            continue;
        char name[BACKLOG_NAME_MAX + 1];
        size_t nl = (size_t)(sp - members[i]);
        if (nl > BACKLOG_NAME_MAX)
            continue;
        memcpy(name, members[i], nl);
        name[nl] = '\0';
        const char *cb = sp + 1;
        char *host = callback_host(cb);
        d->st.removed_expired++;
        rs_log_kv(RS_LOG_INFO, "lease expired", "topic", name, "callback", cb, NULL);
        if (subs_remove(d->o.subs, name, cb, host != NULL ? host : "", on_removed,
                        NULL) != 0)
            rs_log(RS_LOG_WARN, "cannot remove an expired subscription now");
        rs_free(host);
        struct dtopic *t = topic_find(d, name);
        for (size_t k = 0; t != NULL && k < t->n; k++) {
            if (strcmp(t->v[k]->callback, cb) == 0) {
                sub_forget(d, t->v[k]);
                break;
            }
        }
    }
}

static void
deliver_tick(struct deliver *d)
{
    if (d->closing || !backlog_ready(d->o.backlog))
        return;
    if (!d->ticking && subs_topics(d->o.subs, on_sub_topics, d) == 0)
        d->ticking = true;
    if (subs_expired(d->o.subs, now_ms(), 100, on_expired, d) != 0)
        rs_log(RS_LOG_DEBUG, "lease sweep skipped");
    /* subscriptions whose POST could not even start: try again */
    for (size_t i = 0; i < d->ntopics; i++)
        for (size_t k = 0; k < d->topics[i]->n; k++)
            sub_kick(d, d->topics[i]->v[k]);
}

static void
on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    deliver_tick(arg);
}

static void
on_cursors_saved(void *ud, int rc, long long n)
{
    (void)ud;
    (void)n;
    if (rc != 0 && rc != RS_ECANCELED)
        rs_log(RS_LOG_WARN, "cannot save delivery cursors: %s", rs_strerror(rc));
}

/* Write the cursors that moved since the last flush, one call per topic. */
static void
on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct deliver *d = arg;
    if (!backlog_ready(d->o.backlog))
        return;
    for (size_t i = 0; i < d->ntopics; i++) {
        struct dtopic *t = d->topics[i];
        const char *cbs[256];
        struct msg_id ids[256];
        size_t n = 0;
        for (size_t k = 0; k < t->n; k++) {
            struct dsub *s = t->v[k];
            if (msg_id_cmp(s->cursor, s->saved) == 0)
                continue;
            cbs[n] = s->callback;
            ids[n] = s->cursor;
            s->saved = s->cursor;
            if (++n == 256) {
                if (subs_save_cursors(d->o.subs, t->name, n, cbs, ids,
                                      on_cursors_saved, NULL) != 0)
                    rs_log(RS_LOG_WARN, "cannot save delivery cursors now");
                n = 0;
            }
        }
        if (n > 0 && subs_save_cursors(d->o.subs, t->name, n, cbs, ids,
                                       on_cursors_saved, NULL) != 0)
            rs_log(RS_LOG_WARN, "cannot save delivery cursors now");
    }
}

/* ---------------------------------------------------------------- public */

struct deliver *
deliver_new(const struct deliver_opts *o, const char **err)
{
    struct deliver *d = rs_calloc(1, sizeof(*d));
    *err = "out of memory";
    if (d == NULL)
        return NULL;
    d->o = *o;
    if (d->o.delivery_timeout_ms == 0)
        d->o.delivery_timeout_ms = 10000;
    if (d->o.retry_max_delay_ms == 0)
        d->o.retry_max_delay_ms = 600000;
    if (d->o.retry_window_ms == 0)
        d->o.retry_window_ms = 86400000;
    if (d->o.queue_max == 0)
        d->o.queue_max = 64;
    if (d->o.lock_ttl_ms == 0)
        d->o.lock_ttl_ms = 15000;
    if (d->o.host_conns == 0)
        d->o.host_conns = 8;
    /* a quarter of each host's slots (one at least) stays free of suspects */
    unsigned reserve = d->o.host_conns / 4 ? d->o.host_conns / 4 : 1;
    d->suspect_cap = d->o.host_conns > reserve ? d->o.host_conns - reserve : 1;
    d->ev_tick = event_new(o->base, -1, EV_PERSIST, on_tick, d);
    d->ev_flush = event_new(o->base, -1, EV_PERSIST, on_flush, d);
    struct timeval tick = { (time_t)(d->o.lock_ttl_ms / 3000),
                            (suseconds_t)((d->o.lock_ttl_ms / 3 % 1000) * 1000) };
    struct timeval flush = { 0, 100000 };
    if (d->ev_tick == NULL || d->ev_flush == NULL ||
        event_add(d->ev_tick, &tick) != 0 || event_add(d->ev_flush, &flush) != 0) {
        deliver_free(d);
        return NULL;
    }
    *err = NULL;
    return d;
}

void
deliver_close(struct deliver *d)
{
    if (d != NULL)
        d->closing = true;
}

void
deliver_free(struct deliver *d)
{
    if (d == NULL)
        return;
    d->closing = true;
    if (d->ev_tick != NULL)
        event_free(d->ev_tick);
    if (d->ev_flush != NULL)
        event_free(d->ev_flush);
    for (size_t i = 0; i < d->ntopics; i++) {
        struct dtopic *t = d->topics[i];
        for (size_t k = 0; k < t->n; k++) {
            t->v[k]->t = NULL;
            sub_free(d, t->v[k]);
        }
        rs_free(t->v);
        rs_free(t);
    }
    rs_free(d->topics);
    for (size_t i = 0; i < d->nhosts; i++) {
        rs_free(d->hosts[i]->origin);
        rs_free(d->hosts[i]);
    }
    rs_free(d->hosts);
    rs_free(d);
}

void
deliver_kick(struct deliver *d)
{
    deliver_tick(d);
}

void
deliver_refresh(struct deliver *d, const char *topic)
{
    struct dtopic *t = topic_get(d, topic);
    if (t == NULL)
        return;
    if (t->owned)
        topic_load(d, t);
    else if (subs_lock(d->o.subs, t->name, d->o.node_id, d->o.lock_ttl_ms,
                       on_locked, t) != 0)
        rs_log(RS_LOG_DEBUG, "cannot try the delivery lock now");
}

void
deliver_stats(const struct deliver *d, struct deliver_stats *out)
{
    *out = d->st;
    uint64_t now = now_ms(), lag = 0;
    for (size_t i = 0; i < d->ntopics; i++) {
        for (size_t k = 0; k < d->topics[i]->n; k++) {
            const struct dsub *s = d->topics[i]->v[k];
            if (s->qlen > 0 && now > s->q[s->qhead]->accepted_ms &&
                now - s->q[s->qhead]->accepted_ms > lag)
                lag = now - s->q[s->qhead]->accepted_ms;
        }
    }
    out->lag_max_ms = lag;
}

void
deliver_foreach(const struct deliver *d, const char *topic,
                void (*cb)(void *ud, const struct deliver_sub_info *si),
                void *ud)
{
    const struct dtopic *t = topic_find(d, topic);
    uint64_t now = now_ms();
    for (size_t k = 0; t != NULL && k < t->n; k++) {
        const struct dsub *s = t->v[k];
        struct deliver_sub_info si = {
            .callback = s->callback,
            .state = s->failing ? "failing" : s->attempts > 0 ? "retrying" : "active",
            .cursor = s->cursor,
            .attempts = s->attempts,
            .delivered = s->delivered,
            .expires_ms = s->expires_ms,
        };
        if (s->qlen > 0 && now > s->q[s->qhead]->accepted_ms)
            si.lag_ms = now - s->q[s->qhead]->accepted_ms;
        cb(ud, &si);
    }
}
