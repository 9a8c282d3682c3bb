/*
 * push.c - the outbox sender (see push.h). One "lane" per topic, each a
 * small state machine: IDLE -> GATHERING (window timer) -> SENDING (one
 * POST) -> IDLE, or -> BACKOFF (timer) -> SENDING, or -> STOPPED.
 * Each POST carries X-Publish-Id: KEY:SEQ (the lane's KEY, kept in the
 * state; SEQ the last seq in the POST), so that the hub stores a resend
 * of what it had accepted only once (docs/source.md 7).
 */
#include "push.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define RS_LOG_MODULE "push"
#include "rs_alloc.h"
#include "rs_backoff.h"
#include "rs_http.h"
#include "rs_log.h"
#include "rs_pubid.h"
#include "rs_retry_after.h"
#include "rs_time.h"

#define PUSH_BACKOFF_MIN_MS 100
/* Ends kept in struct lane's sent[]: each one is below the one before,
 * and a new one only comes with a batch smaller than the last (a 413
 * halving, at most 16 from RS_MAX_ENTRIES, or a restart with a smaller
 * --max-notification), so this is never reached in practice. */
#define PUSH_SENT_MAX 64

enum lane_state {
    LANE_IDLE = 0,
    LANE_GATHERING,
    LANE_SENDING,
    LANE_BACKOFF,
    LANE_STOPPED,
};

static const char *const lane_state_names[] = {
    "idle", "gathering", "sending", "backoff", "stopped",
};

struct lane {
    struct push *p;
    enum push_lane kind;
    enum lane_state state;
    const char *meta_key;        /* the watermark's key in state meta */
    const char *key_meta;        /* ... the X-Publish-Id KEY's */
    const char *sent_meta;       /* ... sent[]'s */
    int64_t pushed;              /* watermark: last seq accepted */
    /* The last seqs of POSTs above the watermark that the hub may have
     * stored: largest first, each below the one before. They are
     * durable, written before the POST goes out, and popped with the
     * watermark that passes them. A batch never ends above the last one,
     * so it never spans a SEQ the hub may hold. A resend is then wholly
     * a duplicate or wholly new, however it is cut (a restart, a 413): a
     * batch that spanned one would be stored whole, its older part a
     * second time. */
    int64_t sent[PUSH_SENT_MAX];
    size_t nsent;
    char key[RS_PUBID_KEY_MAX + 1];               /* this topic's KEY */
    char pubid_hdr[sizeof(RS_PUBID_HEADER) + 2 + RS_PUBID_BUFSZ];
    int64_t sending_last;        /* last seq of the POST in flight */
    size_t sending_n;
    size_t max_entries;          /* halved on 413, reset on success */
    unsigned fails;              /* failures since the last success */
    struct rs_http_req *req;
    struct event *timer;
    char *body;                  /* the document in flight */
    size_t len, cap;
};

struct push {
    struct push_opts o;
    struct lane lanes[PUSH_LANES];
    char link[2][DOCS_URL_MAX * 2 + 64];   /* Link header per lane */
    char *auth;                  /* "Authorization: Bearer ..." */
    struct push_stats stats;
    /* 100 ms doubling to retry_max_ms, +-20 % so that several Sources
     * behind one hub do not return in step */
    struct rs_backoff backoff;
    int64_t *samples;            /* ring of PUSH_SAMPLES latencies, us */
    size_t nsamples, sample_pos;
};

static void lane_send(struct lane *l);

static const char *
lane_name(const struct lane *l)
{
    return l->kind == PUSH_CHANGE ? "change" : "framework";
}

static void
lane_set(struct lane *l, enum lane_state st)
{
    if (l->state != st)
        rs_log_kv(RS_LOG_DEBUG, "lane state", "topic", lane_name(l), "from",
                  lane_state_names[l->state], "to", lane_state_names[st],
                  NULL);
    l->state = st;
}

static void
timer_in(struct lane *l, int64_t ms)
{
    struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };
    event_add(l->timer, &tv);
}

/* -------------------------------------------------------------- outbox */

static int64_t
outbox_head(struct push *p, enum push_lane k)
{
    return k == PUSH_CHANGE ? state_change_last_seq(p->o.st)
                            : state_fw_last_seq(p->o.st);
}

static int64_t
outbox_count(struct push *p, enum push_lane k, int64_t after, int64_t upto)
{
    return k == PUSH_CHANGE ? state_change_count(p->o.st, after, upto)
                            : state_fw_count(p->o.st, after, upto);
}

/* Store the first n of l->sent ("S1,S2,...", largest first). */
static int
sent_store(struct lane *l, size_t n)
{
    char buf[PUSH_SENT_MAX * 21 + 1];
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++)
        off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%s%lld",
                                i > 0 ? "," : "", (long long)l->sent[i]);
    return state_meta_set_text(l->p->o.st, l->sent_meta, buf);
}

/* sent[] from the state: the values above the watermark, largest first.
 * Anything else in it (a hand-edited state) is dropped with a warning:
 * then a resend may repeat what the hub had, as before X-Publish-Id. */
static void
sent_load(struct lane *l)
{
    char buf[PUSH_SENT_MAX * 21 + 1];
    l->nsent = 0;
    if (state_meta_get_text(l->p->o.st, l->sent_meta, buf, sizeof(buf)) != 0)
        return;
    const char *q = buf;
    while (*q != '\0' && l->nsent < PUSH_SENT_MAX) {
        char *end;
        long long v = strtoll(q, &end, 10);
        if (end == q || (*end != ',' && *end != '\0') ||
            (l->nsent > 0 && v >= l->sent[l->nsent - 1])) {
            rs_log_kv(RS_LOG_WARN, "ignoring a malformed outbox mark",
                      "topic", lane_name(l), "key", l->sent_meta, NULL);
            l->nsent = 0;
            return;
        }
        if (v > l->pushed)
            l->sent[l->nsent++] = v;
        q = *end == ',' ? end + 1 : end;
    }
}

/* The hub accepted everything up to seq: the watermark, the framework
 * events it delivered and the marks it passed, in one transaction. */
static int
watermark_set(struct lane *l, int64_t seq)
{
    struct push *p = l->p;
    size_t keep = l->nsent;
    while (keep > 0 && l->sent[keep - 1] <= seq)
        keep--;
    int rc = state_begin(p->o.st);
    if (rc == 0) {
        rc = state_meta_set(p->o.st, l->meta_key, seq);
        if (rc == 0 && l->kind == PUSH_FRAMEWORK)
            rc = state_fw_trim(p->o.st, seq);
        if (rc == 0 && keep != l->nsent)
            rc = sent_store(l, keep);
        if (rc == 0)
            rc = state_commit(p->o.st);
        else
            state_rollback(p->o.st);
    }
    if (rc == 0) {
        l->pushed = seq;
        l->nsent = keep;
    } else {
        rs_log_kv(RS_LOG_ERROR, "cannot record what the hub accepted",
                  "topic", lane_name(l), "error", state_errstr(p->o.st), NULL);
    }
    return rc;
}

/* Record that a POST ending at last goes out, unless an equal mark is
 * there already. */
static int
sent_push(struct lane *l, int64_t last)
{
    if (l->nsent > 0 && l->sent[l->nsent - 1] == last)
        return 0;
    if (l->nsent == PUSH_SENT_MAX)
        return RS_ETOOBIG;
    l->sent[l->nsent] = last;
    int rc = sent_store(l, l->nsent + 1);
    if (rc == 0)
        l->nsent++;
    return rc;
}

/* This lane's KEY from the state, drawn and stored at the first start. */
static int
key_load(struct lane *l, const char **err)
{
    struct state *st = l->p->o.st;
    int rc = state_meta_get_text(st, l->key_meta, l->key, sizeof(l->key));
    if (rc == 0 && rs_pubid_key_ok(l->key))
        return 0;
    if (rc != 0 && rc != RS_ENOTFOUND && rc != RS_ETOOBIG) {
        *err = state_errstr(st);
        return rc;
    }
    /* A new KEY says "a new sequence" to the hub: right for a new state,
     * and for one whose KEY was lost, since the hub cannot know what the
     * old KEY covered. */
    rc = rs_pubid_key_new(l->key, sizeof(l->key));
    if (rc != 0) {
        *err = "cannot draw a random X-Publish-Id key";
        return rc;
    }
    rc = state_meta_set_text(st, l->key_meta, l->key);
    if (rc != 0)
        *err = state_errstr(st);
    return rc;
}

static int
body_write(void *ud, const char *buf, size_t len)
{
    struct lane *l = ud;
    if (len == 0)
        return 0;               /* body may still be NULL: NULL + 0 is UB */
    if (len > RS_MAX_DOC_BYTES - l->len)
        return RS_ETOOBIG;
    if (l->len + len > l->cap) {
        size_t cap = l->cap != 0 ? l->cap : 65536;
        while (cap < l->len + len)
            cap *= 2;
        char *b = rs_realloc(l->body, cap);
        if (b == NULL)
            return RS_ENOMEM;
        l->body = b;
        l->cap = cap;
    }
    memcpy(l->body + l->len, buf, len);
    l->len += len;
    return 0;
}

/* ------------------------------------------------------------- latency */

static void
sample_latencies(struct push *p, int64_t after, int64_t upto, rs_time_t now)
{
    struct state_iter *it;
    if (state_change_iter(p->o.st, 0, after, 0, &it) != 0)
        return;
    struct state_change c;
    while (state_change_next(it, &c) == 1 && c.seq <= upto) {
        p->samples[p->sample_pos] = now - c.dt;
        p->sample_pos = (p->sample_pos + 1) % PUSH_SAMPLES;
        if (p->nsamples < PUSH_SAMPLES)
            p->nsamples++;
        p->stats.latency_n++;
    }
    state_iter_free(it);
}

static int
cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y ? 1 : 0;
}

int64_t
push_latency_quantile(const struct push *p, double q)
{
    if (p->nsamples == 0)
        return -1;
    int64_t *v = rs_malloc(p->nsamples * sizeof(*v));
    if (v == NULL)
        return -1;
    memcpy(v, p->samples, p->nsamples * sizeof(*v));
    qsort(v, p->nsamples, sizeof(*v), cmp_i64);
    size_t i = (size_t)(q * (double)(p->nsamples - 1) + 0.5);
    int64_t r = v[i < p->nsamples ? i : p->nsamples - 1];
    rs_free(v);
    return r;
}

/* --------------------------------------------------------------- sending */

static void
backoff(struct lane *l, int64_t retry_after_ms)
{
    struct push *p = l->p;
    p->stats.retries++;
    int64_t ms = (int64_t)rs_backoff_delay(&p->backoff, ++l->fails);
    if (retry_after_ms > ms)
        ms = retry_after_ms;
    if (ms > p->o.retry_max_ms)
        ms = p->o.retry_max_ms;
    lane_set(l, LANE_BACKOFF);
    timer_in(l, ms);
}

static void
on_posted(void *ud, struct rs_http_req *req, const struct rs_http_result *res)
{
    struct lane *l = ud;
    struct push *p = l->p;
    l->req = NULL;
    if (res->rc == RS_ECANCELED)
        return;                   /* push_free: the rows stay in the outbox */
    char st[16];
    snprintf(st, sizeof(st), "%ld", res->status);
    if (res->rc == 0 && res->status >= 200 && res->status < 300) {
        int64_t before = l->pushed;
        const char *dup = rs_http_req_header(req, "X-Hub-Duplicate");
        if (dup != NULL && strcmp(dup, "1") == 0) {
            char last[24];
            snprintf(last, sizeof(last), "%lld", (long long)l->sending_last);
            rs_log_kv(RS_LOG_INFO, "the hub had these changes already: not "
                      "stored again", "topic", lane_name(l), "seq", last,
                      "id", rs_http_req_header(req, "X-Hub-Id"), NULL);
        }
        if (watermark_set(l, l->sending_last) != 0) {
            backoff(l, 0);
            return;
        }
        p->stats.accepted_docs++;
        p->stats.accepted_entries += l->sending_n;
        if (l->kind == PUSH_CHANGE)
            sample_latencies(p, before, l->sending_last, rs_time_now());
        char n[32];
        snprintf(n, sizeof(n), "%zu", l->sending_n);
        const char *id = rs_http_req_header(req, "X-Hub-Id");
        rs_log_kv(RS_LOG_DEBUG, "notification accepted", "topic",
                  lane_name(l), "entries", n, "id", id, NULL);
        l->fails = 0;
        l->max_entries = RS_MAX_ENTRIES;
        if (p->o.on_accepted != NULL)
            p->o.on_accepted(p->o.ud, l->kind,
                             rs_http_req_header(req, "X-Hub-Channel"));
        lane_set(l, LANE_IDLE);
        if (outbox_head(p, l->kind) > l->pushed)
            lane_send(l);         /* the rest at once: no new window */
        return;
    }
    p->stats.failures++;
    if (res->rc != 0 || res->status >= 500 || res->status == 429 ||
        res->status == 408) {
        int64_t ra = 0;
        uint64_t ra_ms = 0;
        const char *h = res->rc == 0 ? rs_http_req_header(req, "Retry-After")
                                      : NULL;
        /* a day or more is not a pause we keep a lane for: back off */
        if (h != NULL &&
            rs_retry_after_parse(h, rs_time_now() / 1000000, &ra_ms) == 0 &&
            ra_ms < 86400 * 1000)
            ra = (int64_t)ra_ms;
        rs_log_kv(RS_LOG_WARN, "hub unavailable, will retry", "topic",
                  lane_name(l), "status", st, "error",
                  res->rc != 0 ? res->errstr : "", NULL);
        backoff(l, ra);
        return;
    }
    if (res->status == 413 && l->sending_n > 1) {
        l->max_entries = l->sending_n / 2;
        rs_log_kv(RS_LOG_WARN, "hub refused the size of a notification, "
                  "splitting it", "topic", lane_name(l), NULL);
        lane_set(l, LANE_IDLE);
        lane_send(l);
        return;
    }
    /* Anything else is a configuration problem (token, topic, URL):
     * retrying would only repeat it. */
    char body[200];
    size_t bl = res->body_len < sizeof(body) - 1 ? res->body_len
                                                 : sizeof(body) - 1;
    memcpy(body, res->body != NULL ? res->body : "", bl);
    body[bl] = '\0';
    for (size_t i = 0; i < bl; i++)
        if (body[i] == '\n' || body[i] == '\r')
            body[i] = ' ';
    rs_log_kv(RS_LOG_ERROR, "hub refused a notification; this topic stops "
              "until SIGHUP or restart (the outbox keeps it)", "topic",
              lane_name(l), "status", st, "reply", body, NULL);
    lane_set(l, LANE_STOPPED);
}

static void
lane_send(struct lane *l)
{
    struct push *p = l->p;
    if (l->state == LANE_SENDING || l->state == LANE_STOPPED)
        return;
    l->len = 0;
    char err[256] = "";
    int64_t last;
    size_t n, max = l->max_entries;
    /* Not past the last mark (struct lane): the entries up to it. */
    while (l->nsent > 0) {
        int64_t mark = l->sent[l->nsent - 1];
        int64_t in = outbox_count(p, l->kind, l->pushed, mark);
        if (in < 0) {
            rs_log_kv(RS_LOG_ERROR, "cannot read the outbox", "topic",
                      lane_name(l), "error", state_errstr(p->o.st), NULL);
            backoff(l, 0);
            return;
        }
        if (in > 0) {
            if ((uint64_t)in < max)
                max = (size_t)in;
            break;
        }
        /* Nothing left up to it: whatever the hub has of them it keeps,
         * and there is nothing to send again. */
        if (watermark_set(l, mark) != 0) {
            backoff(l, 0);
            return;
        }
    }
    int rc = l->kind == PUSH_CHANGE
        ? docs_change_notification(p->o.docs, p->o.st, l->pushed, max,
                                   p->o.max_bytes, body_write, l, &last, &n,
                                   err)
        : docs_framework_notification(p->o.docs, p->o.st, l->pushed, max,
                                      p->o.max_bytes, body_write, l, &last,
                                      &n, err);
    if (rc != 0) {
        rs_log_kv(RS_LOG_ERROR, "cannot build a notification", "topic",
                  lane_name(l), "error", err[0] ? err : rs_strerror(rc), NULL);
        backoff(l, 0);
        return;
    }
    if (n == 0) {
        lane_set(l, LANE_IDLE);
        return;
    }
    char id[RS_PUBID_BUFSZ];
    rc = rs_pubid_format(l->key, (uint64_t)last, id, sizeof(id));
    if (rc == 0)
        rc = sent_push(l, last);
    if (rc != 0) {
        rs_log_kv(RS_LOG_ERROR, "cannot record the notification going out",
                  "topic", lane_name(l), "error",
                  rc == RS_ETOOBIG ? "too many marks" : state_errstr(p->o.st),
                  NULL);
        backoff(l, 0);
        return;
    }
    snprintf(l->pubid_hdr, sizeof(l->pubid_hdr), RS_PUBID_HEADER ": %s", id);
    const char *headers[5];
    size_t nh = 0;
    headers[nh++] = "Content-Type: application/xml";
    headers[nh++] = p->link[l->kind];
    headers[nh++] = l->pubid_hdr;
    if (p->auth != NULL)
        headers[nh++] = p->auth;
    headers[nh] = NULL;
    struct rs_http_req_opts ro = {
        .method = "POST",
        .url = p->o.hub,
        .headers = headers,
        .body = l->body,
        .body_len = l->len,
        .body_borrowed = true,    /* l->body is not touched until on_done */
        .timeout_ms = p->o.timeout_ms,
        .max_body = 65536,
        .on_done = on_posted,
        .ud = l,
    };
    l->sending_last = last;
    l->sending_n = n;
    lane_set(l, LANE_SENDING);
    p->stats.posts++;
    rc = rs_http_request(p->o.http, &ro, &l->req);
    if (rc != 0) {
        l->req = NULL;
        rs_log_kv(RS_LOG_ERROR, "cannot start a POST", "topic", lane_name(l),
                  "error", rs_strerror(rc), NULL);
        backoff(l, 0);
    }
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct lane *l = arg;
    if (l->state == LANE_GATHERING || l->state == LANE_BACKOFF) {
        lane_set(l, LANE_IDLE);
        lane_send(l);
    }
}

/* ------------------------------------------------------------- public */

struct push *
push_new(const struct push_opts *o, const char **err)
{
    *err = "out of memory";
    struct push *p = rs_calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->o = *o;
    if (p->o.retry_max_ms < PUSH_BACKOFF_MIN_MS)
        p->o.retry_max_ms = PUSH_BACKOFF_MIN_MS;
    p->backoff = (struct rs_backoff){ .first_ms = PUSH_BACKOFF_MIN_MS,
                                      .max_ms = (uint64_t)p->o.retry_max_ms,
                                      .below_pct = 20, .above_pct = 20 };
    rs_backoff_seed(&p->backoff,
                    (uint64_t)rs_time_now() ^ (uint64_t)getpid() << 32);
    if (p->o.max_bytes == 0 || p->o.max_bytes > RS_MAX_DOC_BYTES)
        p->o.max_bytes = RS_MAX_DOC_BYTES;
    if (p->o.timeout_ms == 0)
        p->o.timeout_ms = 30000;
    p->samples = rs_calloc(PUSH_SAMPLES, sizeof(*p->samples));
    if (p->samples == NULL)
        goto fail;
    if (o->token != NULL) {
        size_t n = strlen(o->token) + 32;
        p->auth = rs_malloc(n);
        if (p->auth == NULL)
            goto fail;
        snprintf(p->auth, n, "Authorization: Bearer %s", o->token);
    }
    static const char *const keys[PUSH_LANES] = { "push.change",
                                                  "push.framework" };
    static const char *const key_keys[PUSH_LANES] = { "push.change.key",
                                                      "push.framework.key" };
    static const char *const sent_keys[PUSH_LANES] = { "push.change.sent",
                                                       "push.framework.sent" };
    for (int k = 0; k < PUSH_LANES; k++) {
        struct lane *l = &p->lanes[k];
        l->p = p;
        l->kind = (enum push_lane)k;
        l->meta_key = keys[k];
        l->key_meta = key_keys[k];
        l->sent_meta = sent_keys[k];
        l->max_entries = RS_MAX_ENTRIES;
        if (state_meta_get(o->st, keys[k], &l->pushed) != 0) {
            /* First start: what happened before has no one to tell. */
            l->pushed = outbox_head(p, (enum push_lane)k);
            if (state_meta_set(o->st, keys[k], l->pushed) != 0) {
                *err = state_errstr(o->st);
                goto fail;
            }
        }
        if (key_load(l, err) != 0)
            goto fail;
        sent_load(l);
        if (o->hub != NULL) {
            snprintf(p->link[k], sizeof(p->link[k]),
                     "Link: <%s>; rel=\"self\", <%s>; rel=\"hub\"",
                     o->topic[k], o->hub);
        }
        l->timer = event_new(o->base, -1, 0, on_timer, l);
        if (l->timer == NULL)
            goto fail;
    }
    *err = NULL;
    return p;
fail:
    push_free(p);
    return NULL;
}

void
push_free(struct push *p)
{
    if (p == NULL)
        return;
    for (int k = 0; k < PUSH_LANES; k++) {
        struct lane *l = &p->lanes[k];
        if (l->timer != NULL)
            event_free(l->timer);
        rs_free(l->body);
    }
    rs_free(p->samples);
    if (p->auth != NULL)
        explicit_bzero(p->auth, strlen(p->auth));
    rs_free(p->auth);
    rs_free(p);
}

void
push_kick(struct push *p)
{
    for (int k = 0; k < PUSH_LANES; k++) {
        struct lane *l = &p->lanes[k];
        int64_t head = outbox_head(p, l->kind);
        if (l->state != LANE_IDLE || head <= l->pushed)
            continue;
        if (p->o.hub == NULL) {
            /* no hub: the pull documents are all there is */
            (void)watermark_set(l, head);
        } else if (p->o.batch_ms <= 0) {
            lane_send(l);
        } else {
            lane_set(l, LANE_GATHERING);
            timer_in(l, p->o.batch_ms);
        }
    }
}

void
push_flush(struct push *p)
{
    for (int k = 0; k < PUSH_LANES; k++) {
        struct lane *l = &p->lanes[k];
        if (l->state == LANE_GATHERING) {
            event_del(l->timer);
            lane_set(l, LANE_IDLE);
            lane_send(l);
        }
    }
}

void
push_resume(struct push *p)
{
    for (int k = 0; k < PUSH_LANES; k++) {
        struct lane *l = &p->lanes[k];
        if (l->state == LANE_STOPPED) {
            lane_set(l, LANE_IDLE);
            l->max_entries = RS_MAX_ENTRIES;
        }
        if (l->state == LANE_BACKOFF) {
            event_del(l->timer);
            lane_set(l, LANE_IDLE);
        }
    }
    push_kick(p);
}

bool
push_idle(const struct push *p)
{
    for (int k = 0; k < PUSH_LANES; k++)
        if (p->lanes[k].req != NULL)
            return false;
    return true;
}

void
push_get_stats(struct push *p, struct push_stats *out)
{
    *out = p->stats;
    for (int k = 0; k < PUSH_LANES; k++) {
        out->backlog[k] = outbox_head(p, (enum push_lane)k) - p->lanes[k].pushed;
        out->stopped[k] = p->lanes[k].state == LANE_STOPPED;
    }
}
