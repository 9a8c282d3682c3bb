/*
 * publisher.c - one topic's outbox sender (rs_publisher.h), a small state
 * machine: IDLE -> GATHERING (window timer) -> SENDING (one POST) -> IDLE,
 * or -> BACKOFF (timer) -> SENDING, or -> STOPPED. rssource's two lanes
 * and each of rsbridge's Sources' two topics are one publisher each.
 */
#include "rs_publisher.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RS_LOG_MODULE "publisher"
#include "rs_alloc.h"
#include "rs_backoff.h"
#include "rs_doc.h"
#include "rs_http.h"
#include "rs_log.h"
#include "rs_pubid.h"
#include "rs_retry_after.h"
#include "rs_time.h"

#define PUB_BACKOFF_MIN_MS 100
#define PUB_REPLY_MAX 65536
/* a Retry-After of a day or more is not a pause we keep a topic for */
#define PUB_RETRY_AFTER_MAX_MS (86400 * 1000)

enum pub_state {
    PUB_IDLE = 0,
    PUB_GATHERING,
    PUB_SENDING,
    PUB_BACKOFF,
    PUB_STOPPED,
};

static const char *const pub_state_names[] = {
    "idle", "gathering", "sending", "backoff", "stopped",
};

struct rs_publisher {
    struct rs_publisher_opts o;   /* strings below are our copies */
    enum pub_state state;
    int64_t pushed;              /* watermark: the last seq accepted */
    /* The marks above the watermark (rs_publisher.h): largest first, each
     * below the one before; durable before the POST that made each. */
    int64_t sent[RS_PUBLISHER_MARKS];
    size_t nsent;
    int64_t sending_last;        /* the last seq of the POST in flight */
    size_t sending_n;
    size_t max_entries;          /* halved on 413, reset on success */
    unsigned fails;              /* failures since the last success */
    struct rs_http_req *req;
    struct event *timer;
    char *body;                  /* the document in flight */
    size_t len, cap;
    char *link;                  /* "Link: <TOPIC>; rel=..." */
    char *auth;                  /* "Authorization: Bearer ..." or NULL */
    unsigned auth_gen;           /* bumped by rs_publisher_set_token */
    unsigned sending_gen;        /* auth_gen of the POST in flight */
    char *hub, *topic, *key, *name;
    char pubid_hdr[sizeof(RS_PUBID_HEADER) + 2 + RS_PUBID_BUFSZ];
    /* 100 ms doubling to retry_max_ms, +-20 % so that several publishers
     * behind one hub do not return in step */
    struct rs_backoff backoff;
    struct rs_publisher_stats stats;
};

static void pub_send(struct rs_publisher *p);

static void
pub_set(struct rs_publisher *p, enum pub_state to)
{
    if (p->state != to)
        rs_log_kv(RS_LOG_DEBUG, "topic state", "topic", p->name, "from",
                  pub_state_names[p->state], "to", pub_state_names[to],
                  NULL);
    p->state = to;
}

static void
timer_in(struct rs_publisher *p, int64_t ms)
{
    struct timeval tv = rs_time_tv_ms(ms);
    event_add(p->timer, &tv);
}

static int
body_write(void *ud, const char *buf, size_t len)
{
    struct rs_publisher *p = ud;
    if (len == 0)
        return 0;               /* body may still be NULL: NULL + 0 is UB */
    if (len > RS_MAX_DOC_BYTES - p->len)
        return RS_ETOOBIG;
    if (p->len + len > p->cap) {
        size_t cap = p->cap != 0 ? p->cap : 65536;
        while (cap < p->len + len)
            cap *= 2;
        char *b = rs_realloc(p->body, cap);
        if (b == NULL)
            return RS_ENOMEM;
        p->body = b;
        p->cap = cap;
    }
    memcpy(p->body + p->len, buf, len);
    p->len += len;
    return 0;
}

/* --------------------------------------------------------------- marks */

/* The hub accepted up to last (or nothing is left up to the mark last):
 * the watermark and the marks it passes, recorded together. */
static int
pub_watermark(struct rs_publisher *p, int64_t before, int64_t last, size_t n,
              const char *channel)
{
    size_t keep = p->nsent;
    while (keep > 0 && p->sent[keep - 1] <= last)
        keep--;
    int rc = p->o.accepted(p->o.ud, before, last, n, channel, p->sent, keep);
    if (rc != 0) {
        rs_log_kv(RS_LOG_ERROR, "cannot record what the hub accepted",
                  "topic", p->name, "error", rs_strerror(rc), NULL);
        return rc;
    }
    p->pushed = last;
    p->stats.pushed = last;
    p->nsent = keep;
    return 0;
}

/* A POST ending at last goes out: its mark first, unless it is there. */
static int
pub_mark(struct rs_publisher *p, int64_t last)
{
    if (p->o.marks == NULL ||
        (p->nsent > 0 && p->sent[p->nsent - 1] == last))
        return 0;
    if (p->nsent == RS_PUBLISHER_MARKS)
        return RS_ETOOBIG;
    p->sent[p->nsent] = last;
    int rc = p->o.marks(p->o.ud, p->sent, p->nsent + 1);
    if (rc == 0)
        p->nsent++;
    return rc;
}

static int64_t
pub_count(struct rs_publisher *p, int64_t after, int64_t upto)
{
    return p->o.count != NULL ? p->o.count(p->o.ud, after, upto)
                              : upto - after;
}

/* ------------------------------------------------------------- sending */

static void
pub_backoff(struct rs_publisher *p, int64_t retry_after_ms)
{
    p->stats.retries++;
    int64_t ms = (int64_t)rs_backoff_delay(&p->backoff, ++p->fails);
    if (retry_after_ms > ms)
        ms = retry_after_ms;
    if (ms > p->o.retry_max_ms)
        ms = p->o.retry_max_ms;
    pub_set(p, PUB_BACKOFF);
    timer_in(p, ms);
}


/* The start of the hub's reply on one line, into buf: its words (a 502's
 * "error: Redis refused it: OOM ...") are what the operator needs. */
static const char *
reply_line(const struct rs_http_result *res, char *buf, size_t len)
{
    size_t n = res->body_len < len - 1 ? res->body_len : len - 1;
    memcpy(buf, res->body != NULL ? res->body : "", n);
    buf[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (buf[i] == '\n' || buf[i] == '\r')
            buf[i] = ' ';
    return buf;
}

static void
on_posted(void *ud, struct rs_http_req *req, const struct rs_http_result *res)
{
    struct rs_publisher *p = ud;
    p->req = NULL;
    if (res->rc == RS_ECANCELED)
        return;                  /* freed: the entries stay in the outbox */
    char st[16];
    snprintf(st, sizeof(st), "%ld", res->status);
    if (res->rc == 0 && res->status >= 200 && res->status < 300) {
        int64_t before = p->pushed;
        const char *channel = rs_http_req_header(req, "X-Hub-Channel");
        const char *dup = rs_http_req_header(req, "X-Hub-Duplicate");
        if (dup != NULL && strcmp(dup, "1") == 0) {
            char last[24];
            snprintf(last, sizeof(last), "%lld", (long long)p->sending_last);
            rs_log_kv(RS_LOG_INFO, "the hub had these entries already: not "
                      "stored again", "topic", p->name, "seq", last, "id",
                      rs_http_req_header(req, "X-Hub-Id"), NULL);
        }
        if (pub_watermark(p, before, p->sending_last, p->sending_n,
                          channel) != 0) {
            /* Not recorded: sent again, which X-Publish-Id makes harmless. */
            pub_backoff(p, 0);
            return;
        }
        p->stats.accepted_docs++;
        p->stats.accepted_entries += p->sending_n;
        if (dup != NULL && strcmp(dup, "1") == 0)
            p->stats.duplicates++;
        char n[32];
        snprintf(n, sizeof(n), "%zu", p->sending_n);
        rs_log_kv(RS_LOG_DEBUG, "notification accepted", "topic", p->name,
                  "entries", n, "id", rs_http_req_header(req, "X-Hub-Id"),
                  "duplicate", dup != NULL ? dup : "0", NULL);
        p->fails = 0;
        p->max_entries = RS_MAX_ENTRIES;
        p->stats.failing = 0;
        p->stats.failing_since = RS_TIME_NONE;
        p->stats.last_status = 0;
        p->stats.last_error[0] = '\0';
        pub_set(p, PUB_IDLE);
        if (p->o.head(p->o.ud) > p->pushed)
            pub_send(p);         /* the rest at once: no new window */
        return;
    }
    p->stats.failures++;
    if (p->stats.failing++ == 0)
        p->stats.failing_since = rs_time_now();
    p->stats.last_status = res->rc == 0 ? res->status : 0;
    if (res->rc != 0)
        snprintf(p->stats.last_error, sizeof(p->stats.last_error), "%s",
                 res->errstr);
    else
        reply_line(res, p->stats.last_error, sizeof(p->stats.last_error));
    if (res->rc != 0 || res->status >= 500 || res->status == 429 ||
        res->status == 408) {
        int64_t ra = 0;
        uint64_t ra_ms = 0;
        const char *h = res->rc == 0 ? rs_http_req_header(req, "Retry-After")
                                      : NULL;
        if (h != NULL &&
            rs_retry_after_parse(h, rs_time_now() / 1000000, &ra_ms) == 0 &&
            ra_ms < PUB_RETRY_AFTER_MAX_MS)
            ra = (int64_t)ra_ms;
        rs_log_kv(RS_LOG_WARN, "hub unavailable, will retry", "topic",
                  p->name, "status", st, "error", p->stats.last_error, NULL);
        pub_backoff(p, ra);
        return;
    }
    if (res->status == 413 && p->sending_n > 1) {
        p->max_entries = p->sending_n / 2;
        rs_log_kv(RS_LOG_WARN, "hub refused the size of a notification, "
                  "splitting it", "topic", p->name, NULL);
        pub_set(p, PUB_IDLE);
        pub_send(p);
        return;
    }
    /* Refused with a token replaced meanwhile (SIGHUP): the new one is
     * tried at once, not a stop that would wait for another SIGHUP. */
    if ((res->status == 401 || res->status == 403) &&
        p->sending_gen != p->auth_gen) {
        rs_log_kv(RS_LOG_INFO, "hub refused the old token: sending again "
                  "with the new one", "topic", p->name, NULL);
        pub_set(p, PUB_IDLE);
        pub_send(p);
        return;
    }
    /* Anything else is a configuration problem (token, topic, URL):
     * retrying would only repeat it. */
    rs_log_kv(RS_LOG_ERROR, "hub refused a notification; this topic stops "
              "until SIGHUP or restart (the outbox keeps it)", "topic",
              p->name, "status", st, "reply", p->stats.last_error, NULL);
    pub_set(p, PUB_STOPPED);
    p->stats.stopped = true;
}

static void
pub_send(struct rs_publisher *p)
{
    if (p->state == PUB_SENDING || p->state == PUB_STOPPED)
        return;
    p->len = 0;
    char err[256] = "";
    int64_t last = p->pushed;
    size_t n = 0, max = p->max_entries;
    /* Not past the smallest mark: the entries up to it. */
    while (p->nsent > 0) {
        int64_t mark = p->sent[p->nsent - 1];
        int64_t in = pub_count(p, p->pushed, mark);
        if (in < 0) {
            rs_log_kv(RS_LOG_ERROR, "cannot read the outbox", "topic",
                      p->name, "error", rs_strerror((int)in), NULL);
            pub_backoff(p, 0);
            return;
        }
        if (in > 0) {
            if ((uint64_t)in < max)
                max = (size_t)in;
            break;
        }
        /* Nothing left up to it: whatever the hub has of them it keeps,
         * and there is nothing to send again. */
        if (pub_watermark(p, p->pushed, mark, 0, NULL) != 0) {
            pub_backoff(p, 0);
            return;
        }
    }
    int rc = p->o.build(p->o.ud, p->pushed, max, p->o.max_bytes, body_write,
                        p, &last, &n, err);
    if (rc != 0) {
        rs_log_kv(RS_LOG_ERROR, "cannot build a notification", "topic",
                  p->name, "error", err[0] ? err : rs_strerror(rc), NULL);
        pub_backoff(p, 0);
        return;
    }
    if (n == 0) {
        pub_set(p, PUB_IDLE);
        return;
    }
    const char *headers[5];
    size_t nh = 0;
    headers[nh++] = "Content-Type: application/xml";
    headers[nh++] = p->link;
    if (p->key != NULL) {
        char id[RS_PUBID_BUFSZ];
        rc = rs_pubid_format(p->key, (uint64_t)last, id, sizeof(id));
        if (rc == 0)
            rc = pub_mark(p, last);
        if (rc != 0) {
            rs_log_kv(RS_LOG_ERROR, "cannot record the notification going "
                      "out", "topic", p->name, "error",
                      rc == RS_ETOOBIG ? "too many marks" : rs_strerror(rc),
                      NULL);
            pub_backoff(p, 0);
            return;
        }
        snprintf(p->pubid_hdr, sizeof(p->pubid_hdr), RS_PUBID_HEADER ": %s",
                 id);
        headers[nh++] = p->pubid_hdr;
    }
    if (p->auth != NULL)
        headers[nh++] = p->auth;
    headers[nh] = NULL;
    p->sending_gen = p->auth_gen;
    struct rs_http_req_opts ro = {
        .method = "POST",
        .url = p->hub,
        .headers = headers,
        .body = p->body,
        .body_len = p->len,
        .body_borrowed = true,    /* p->body is not touched until on_done */
        .timeout_ms = p->o.timeout_ms,
        .max_body = PUB_REPLY_MAX,
        .on_done = on_posted,
        .ud = p,
    };
    p->sending_last = last;
    p->sending_n = n;
    pub_set(p, PUB_SENDING);
    p->stats.posts++;
    rc = rs_http_request(p->o.http, &ro, &p->req);
    if (rc != 0) {
        p->req = NULL;
        rs_log_kv(RS_LOG_ERROR, "cannot start a POST", "topic", p->name,
                  "error", rs_strerror(rc), NULL);
        pub_backoff(p, 0);
    }
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct rs_publisher *p = arg;
    if (p->state == PUB_GATHERING || p->state == PUB_BACKOFF) {
        pub_set(p, PUB_IDLE);
        pub_send(p);
    }
}

/* ------------------------------------------------------------- public */

static char *
dup_or_null(const char *s, bool *fail)
{
    if (s == NULL)
        return NULL;
    char *d = rs_strdup(s);
    if (d == NULL)
        *fail = true;
    return d;
}

/* prefix + value, or prefix + <a> + mid + <b> + tail (a header line) */
static char *
header_alloc(const char *prefix, const char *a, const char *mid,
             const char *b, const char *tail)
{
    size_t n = strlen(prefix) + strlen(a) + strlen(mid) + strlen(b) +
               strlen(tail) + 1;
    char *s = rs_malloc(n);
    if (s != NULL)
        snprintf(s, n, "%s%s%s%s%s", prefix, a, mid, b, tail);
    return s;
}

struct rs_publisher *
rs_publisher_new(const struct rs_publisher_opts *o, const char **err)
{
    *err = "out of memory";
    if (o->hub == NULL || o->topic == NULL || o->head == NULL ||
        o->build == NULL || o->accepted == NULL) {
        *err = "a publisher needs a hub, a topic and its outbox";
        return NULL;
    }
    if (o->publish_key != NULL && !rs_pubid_key_ok(o->publish_key)) {
        *err = "X-Publish-Id KEY: 1 to 64 of A-Z a-z 0-9 . _ -";
        return NULL;
    }
    struct rs_publisher *p = rs_calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->o = *o;
    p->stats.failing_since = RS_TIME_NONE;
    bool fail = false;
    p->hub = dup_or_null(o->hub, &fail);
    p->topic = dup_or_null(o->topic, &fail);
    p->key = dup_or_null(o->publish_key, &fail);
    p->name = dup_or_null(o->name != NULL ? o->name : o->topic, &fail);
    if (fail)
        goto fail;
    p->o.hub = p->hub;
    p->o.topic = p->topic;
    p->o.publish_key = p->key;
    p->o.name = p->name;
    p->o.token = NULL;
    if (p->o.retry_max_ms < PUB_BACKOFF_MIN_MS)
        p->o.retry_max_ms = PUB_BACKOFF_MIN_MS;
    if (p->o.max_bytes == 0 || p->o.max_bytes > RS_MAX_DOC_BYTES)
        p->o.max_bytes = RS_MAX_DOC_BYTES;
    if (p->o.timeout_ms == 0)
        p->o.timeout_ms = 30000;
    p->backoff = (struct rs_backoff){ .first_ms = PUB_BACKOFF_MIN_MS,
                                      .max_ms = (uint64_t)p->o.retry_max_ms,
                                      .below_pct = 20, .above_pct = 20 };
    rs_backoff_seed(&p->backoff, (uint64_t)rs_time_now() ^
                                     (uint64_t)getpid() << 32 ^
                                     (uint64_t)(uintptr_t)p);
    p->max_entries = RS_MAX_ENTRIES;
    p->pushed = o->pushed;
    p->stats.pushed = o->pushed;
    for (size_t i = 0; i < o->nsent && p->nsent < RS_PUBLISHER_MARKS; i++) {
        /* largest first, each below the one before, all above pushed */
        if (o->sent[i] <= p->pushed ||
            (p->nsent > 0 && o->sent[i] >= p->sent[p->nsent - 1]))
            continue;
        p->sent[p->nsent++] = o->sent[i];
    }
    if (p->key != NULL && p->o.marks == NULL) {
        *err = "a publisher with an X-Publish-Id KEY keeps marks";
        goto fail;
    }
    p->link = header_alloc("Link: <", o->topic, ">; rel=\"self\", <", o->hub,
                           ">; rel=\"hub\"");
    if (p->link == NULL)
        goto fail;
    if (o->token != NULL) {
        p->auth = header_alloc("Authorization: Bearer ", o->token, "", "", "");
        if (p->auth == NULL)
            goto fail;
    }
    p->timer = event_new(o->base, -1, 0, on_timer, p);
    if (p->timer == NULL)
        goto fail;
    *err = NULL;
    return p;
fail:
    rs_publisher_free(p);
    return NULL;
}

void
rs_publisher_free(struct rs_publisher *p)
{
    if (p == NULL)
        return;
    if (p->timer != NULL)
        event_free(p->timer);
    rs_free(p->body);
    rs_free(p->link);
    if (p->auth != NULL)
        explicit_bzero(p->auth, strlen(p->auth));
    rs_free(p->auth);
    rs_free(p->hub);
    rs_free(p->topic);
    rs_free(p->key);
    rs_free(p->name);
    rs_free(p);
}

void
rs_publisher_kick(struct rs_publisher *p)
{
    if (p->state != PUB_IDLE || p->o.head(p->o.ud) <= p->pushed)
        return;
    if (p->o.batch_ms <= 0) {
        pub_send(p);
    } else {
        pub_set(p, PUB_GATHERING);
        timer_in(p, p->o.batch_ms);
    }
}

void
rs_publisher_flush(struct rs_publisher *p)
{
    if (p->state == PUB_GATHERING) {
        event_del(p->timer);
        pub_set(p, PUB_IDLE);
        pub_send(p);
    }
}

int
rs_publisher_set_token(struct rs_publisher *p, const char *token)
{
    char *auth = NULL;
    if (token != NULL &&
        (auth = header_alloc("Authorization: Bearer ", token, "", "", "")) ==
            NULL)
        return RS_ENOMEM;
    if (p->auth != NULL)
        explicit_bzero(p->auth, strlen(p->auth));
    rs_free(p->auth);
    p->auth = auth;
    p->auth_gen++;
    return 0;
}

void
rs_publisher_resume(struct rs_publisher *p)
{
    if (p->state == PUB_STOPPED) {
        pub_set(p, PUB_IDLE);
        p->max_entries = RS_MAX_ENTRIES;
        p->stats.stopped = false;
    }
    if (p->state == PUB_BACKOFF) {
        event_del(p->timer);
        pub_set(p, PUB_IDLE);
    }
    rs_publisher_kick(p);
}

bool
rs_publisher_idle(const struct rs_publisher *p)
{
    return p->req == NULL;
}

int64_t
rs_publisher_pushed(const struct rs_publisher *p)
{
    return p->pushed;
}

void
rs_publisher_stats(const struct rs_publisher *p,
                   struct rs_publisher_stats *out)
{
    *out = p->stats;
}
