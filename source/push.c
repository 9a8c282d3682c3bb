/*
 * push.c - rssource's outbox (see push.h): the state's change records and
 * framework events, each topic sent by one rs_publisher (common/): its
 * watermark, X-Publish-Id KEY and marks live in state meta, and its
 * notifications are docs.c's. Without a hub the watermarks follow the
 * head.
 */
#include "push.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RS_LOG_MODULE "push"
#include "rs_alloc.h"
#include "rs_http.h"
#include "rs_log.h"
#include "rs_pubid.h"
#include "rs_publisher.h"
#include "rs_time.h"

struct lane {
    struct push *p;
    enum push_lane kind;
    const char *meta_key;        /* the watermark's key in state meta */
    const char *key_meta;        /* ... the X-Publish-Id KEY's */
    const char *sent_meta;       /* ... the marks' (rs_publisher.h) */
    int64_t pushed;              /* watermark: last seq accepted */
    /* The marks at start: above the watermark, largest first. The
     * publisher keeps them from then on. */
    int64_t sent[RS_PUBLISHER_MARKS];
    size_t nsent;
    char key[RS_PUBID_KEY_MAX + 1];               /* this topic's KEY */
    struct rs_publisher *pub;    /* NULL without a hub */
};

struct push {
    struct push_opts o;
    struct lane lanes[PUSH_LANES];
    int64_t *samples;            /* ring of PUSH_SAMPLES latencies, us */
    size_t nsamples, sample_pos;
    uint64_t latency_n;
};

static const char *
lane_name(const struct lane *l)
{
    return l->kind == PUSH_CHANGE ? "change" : "framework";
}

/* -------------------------------------------------------------- outbox */

static int64_t
outbox_head(struct push *p, enum push_lane k)
{
    return k == PUSH_CHANGE ? state_change_last_seq(p->o.st)
                            : state_fw_last_seq(p->o.st);
}

/* Store marks ("S1,S2,...", largest first). */
static int
sent_store(struct lane *l, const int64_t *marks, size_t n)
{
    char buf[RS_PUBLISHER_MARKS * 21 + 1];
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++)
        off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%s%lld",
                                i > 0 ? "," : "", (long long)marks[i]);
    return state_meta_set_text(l->p->o.st, l->sent_meta, buf);
}

/* The marks from the state: the values above the watermark, largest
 * first. Anything else in it (a hand-edited state) is dropped with a
 * warning: then a resend may repeat what the hub had, as before
 * X-Publish-Id. */
static void
sent_load(struct lane *l)
{
    char buf[RS_PUBLISHER_MARKS * 21 + 1];
    l->nsent = 0;
    if (state_meta_get_text(l->p->o.st, l->sent_meta, buf, sizeof(buf)) != 0)
        return;
    const char *q = buf;
    while (*q != '\0' && l->nsent < RS_PUBLISHER_MARKS) {
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
 * events it delivered and the marks still above it, in one transaction. */
static int
watermark_set(struct lane *l, int64_t seq, const int64_t *marks,
              size_t nmarks, bool marks_changed)
{
    struct push *p = l->p;
    int rc = state_begin(p->o.st);
    if (rc == 0) {
        rc = state_meta_set(p->o.st, l->meta_key, seq);
        if (rc == 0 && l->kind == PUSH_FRAMEWORK)
            rc = state_fw_trim(p->o.st, seq);
        if (rc == 0 && marks_changed)
            rc = sent_store(l, marks, nmarks);
        if (rc == 0)
            rc = state_commit(p->o.st);
        else
            state_rollback(p->o.st);
    }
    if (rc == 0)
        l->pushed = seq;
    else
        rs_log_kv(RS_LOG_ERROR, "cannot record what the hub accepted",
                  "topic", lane_name(l), "error", state_errstr(p->o.st), NULL);
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
        p->latency_n++;
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

/* ----------------------------------------------- the publisher's outbox */

static int64_t
lane_head(void *ud)
{
    struct lane *l = ud;
    return outbox_head(l->p, l->kind);
}

static int64_t
lane_count(void *ud, int64_t after, int64_t upto)
{
    struct lane *l = ud;
    return l->kind == PUSH_CHANGE
               ? state_change_count(l->p->o.st, after, upto)
               : state_fw_count(l->p->o.st, after, upto);
}

static int
lane_build(void *ud, int64_t after, size_t max_entries, size_t max_bytes,
           rs_write_cb cb, void *cbud, int64_t *last, size_t *n, char *err)
{
    struct lane *l = ud;
    struct push *p = l->p;
    return l->kind == PUSH_CHANGE
        ? docs_change_notification(p->o.docs, p->o.st, after, max_entries,
                                   max_bytes, cb, cbud, last, n, err)
        : docs_framework_notification(p->o.docs, p->o.st, after,
                                      max_entries, max_bytes, cb, cbud, last,
                                      n, err);
}

static int
lane_accepted(void *ud, int64_t before, int64_t last, size_t n,
              const char *channel, const int64_t *marks, size_t nmarks)
{
    struct lane *l = ud;
    struct push *p = l->p;
    /* the publisher drops the marks the watermark passes: store them when
     * it did (marks are the publisher's array, nmarks its new count) */
    int rc = watermark_set(l, last, marks, nmarks, true);
    if (rc != 0)
        return rc;
    if (n == 0)
        return 0;
    if (l->kind == PUSH_CHANGE)
        sample_latencies(p, before, last, rs_time_now());
    if (p->o.on_accepted != NULL)
        p->o.on_accepted(p->o.ud, l->kind, channel);
    return 0;
}

static int
lane_marks(void *ud, const int64_t *marks, size_t nmarks)
{
    return sent_store(ud, marks, nmarks);
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
    p->samples = rs_calloc(PUSH_SAMPLES, sizeof(*p->samples));
    if (p->samples == NULL)
        goto fail;
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
        if (o->hub == NULL)
            continue;
        struct rs_publisher_opts po = {
            .base = o->base,
            .http = o->http,
            .hub = o->hub,
            .topic = o->topic[k],
            .token = o->token,
            .publish_key = l->key,
            .name = lane_name(l),
            .batch_ms = o->batch_ms,
            .retry_max_ms = o->retry_max_ms,
            .max_bytes = o->max_bytes,
            .timeout_ms = o->timeout_ms,
            .pushed = l->pushed,
            .sent = l->sent,
            .nsent = l->nsent,
            .head = lane_head,
            .count = lane_count,
            .build = lane_build,
            .accepted = lane_accepted,
            .marks = lane_marks,
            .ud = l,
        };
        l->pub = rs_publisher_new(&po, err);
        if (l->pub == NULL)
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
    for (int k = 0; k < PUSH_LANES; k++)
        rs_publisher_free(p->lanes[k].pub);
    rs_free(p->samples);
    rs_free(p);
}

void
push_kick(struct push *p)
{
    for (int k = 0; k < PUSH_LANES; k++) {
        struct lane *l = &p->lanes[k];
        if (l->pub != NULL) {
            rs_publisher_kick(l->pub);
            continue;
        }
        /* no hub: the pull documents are all there is */
        int64_t head = outbox_head(p, l->kind);
        if (head > l->pushed)
            (void)watermark_set(l, head, NULL, 0, false);
    }
}

void
push_flush(struct push *p)
{
    for (int k = 0; k < PUSH_LANES; k++)
        if (p->lanes[k].pub != NULL)
            rs_publisher_flush(p->lanes[k].pub);
}

void
push_resume(struct push *p)
{
    for (int k = 0; k < PUSH_LANES; k++)
        if (p->lanes[k].pub != NULL)
            rs_publisher_resume(p->lanes[k].pub);
    push_kick(p);
}

bool
push_idle(const struct push *p)
{
    for (int k = 0; k < PUSH_LANES; k++)
        if (p->lanes[k].pub != NULL && !rs_publisher_idle(p->lanes[k].pub))
            return false;
    return true;
}

void
push_get_stats(struct push *p, struct push_stats *out)
{
    memset(out, 0, sizeof(*out));
    for (int k = 0; k < PUSH_LANES; k++) {
        struct lane *l = &p->lanes[k];
        if (l->pub != NULL) {
            struct rs_publisher_stats ps;
            rs_publisher_stats(l->pub, &ps);
            out->posts += ps.posts;
            out->accepted_docs += ps.accepted_docs;
            out->accepted_entries += ps.accepted_entries;
            out->retries += ps.retries;
            out->failures += ps.failures;
            out->stopped[k] = ps.stopped;
        }
        out->backlog[k] = outbox_head(p, (enum push_lane)k) - l->pushed;
    }
    out->latency_n = p->latency_n;
}
