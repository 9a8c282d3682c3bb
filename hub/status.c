/*
 * status.c - the hub's read-only HTTP endpoints (docs/protocol.md 6):
 * liveness, readiness, Prometheus metrics, the topic list with backlog and
 * subscriber figures (also the answer to POST /topics, ingest.c), and the
 * Capability List entries a Source pastes.
 * Counters live where they are counted (plain fields on the main loop,
 * atomics on the service threads) and are synced into the registry by
 * delta at scrape time, so no hot path touches the registry.
 */
#include <event2/buffer.h>
#include <event2/http.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define RS_LOG_MODULE "status"
#include "ack.h"
#include "deliver.h"
#include "hub.h"
#include "reply.h"
#include "rs_alloc.h"
#include "rs_httpcheck.h"
#include "rs_log.h"
#include "rs_write.h"
#include "status.h"
#include "websub.h"

/* A registry counter fed from a cumulative value kept elsewhere. */
struct synced {
    struct rs_metrics_counter *c;
    uint64_t last;
};

struct hub_metrics {
    struct synced accepted, bytes_in, duplicates;
    struct synced rejected[REJ_COUNT];
    struct synced registrations[REG_COUNT];
    struct synced ws_accepted, ws_frames, ws_writes, ws_bytes, ws_slow, ws_gap;
    struct synced ws_refused;
    struct synced dispatched, replayed, gaps, bad_entries, tail_pauses;
    struct synced redis_cmds, redis_fail, redis_reconnects, redis_failovers;
    /* rshub_redis_primary_info: one series per primary address seen (a
     * label cannot change), 1 for the current one; at most 8 addresses
     * are remembered */
    struct {
        char addr[280];
        struct rs_metrics_gauge *g;
    } primaries[8];
    size_t nprimaries;
    struct synced ws_requests, ws_verified, ws_verify_failed, ws_denied;
    struct synced ws_pings, ws_ping_failed;
    struct synced wd_delivered, wd_failed, wd_gone, wd_failing, wd_expired,
        wd_gaps;
    char *buf;
    size_t cap;
};

static const char *const reg_names[REG_COUNT] = {
    [REG_FOUND] = "found",
    [REG_CLAIMED] = "claimed",
    [REG_BAD_REQUEST] = "bad_request",
    [REG_UNKNOWN_TOPIC] = "unknown_topic",
    [REG_WRONG_KIND] = "wrong_kind",
    [REG_NO_TOKEN] = "no_token",
    [REG_BAD_TOKEN] = "bad_token",
    [REG_TOO_BIG] = "too_big",
    [REG_MEDIA_TYPE] = "media_type",
    [REG_UNAVAILABLE] = "unavailable",
    [REG_TOO_MANY_TOPICS] = "too_many_topics",
};

static void
synced_set(struct synced *s, uint64_t now)
{
    if (now > s->last)
        rs_metrics_counter_add(s->c, now - s->last);
    s->last = now;
}

/* ------------------------------------------------------------- metrics */

static double
gauge_inflight(void *ud)
{
    return ((struct hub *)ud)->inflight;
}

static double
gauge_redis_up(void *ud)
{
    struct hub *h = ud;
    return backlog_ready(h->backlog) && backlog_tail_ready(h->backlog) ? 1 : 0;
}

static double
gauge_clock_offset(void *ud)
{
    struct hub *h = ud;
    return (double)backlog_clock_offset_ms(h->backlog) / 1e3;
}

static double
gauge_ws_open(void *ud)
{
    struct ws_stats st;
    ws_server_stats(((struct hub *)ud)->ws, &st);
    return (double)st.open;
}

static double
gauge_channels(void *ud)
{
    struct fanout_stats st;
    fanout_stats(((struct hub *)ud)->fanout, &st);
    return (double)st.channels_active;
}

static double
gauge_tail_holds(void *ud)
{
    struct fanout_stats st;
    fanout_stats(((struct hub *)ud)->fanout, &st);
    return (double)st.tail_holds;
}

static double
gauge_websub_subs(void *ud)
{
    struct deliver_stats st;
    deliver_stats(((struct hub *)ud)->deliver, &st);
    return (double)st.subscriptions;
}

static double
gauge_websub_failing(void *ud)
{
    struct deliver_stats st;
    deliver_stats(((struct hub *)ud)->deliver, &st);
    return (double)st.failing;
}

static double
gauge_websub_lag(void *ud)
{
    struct deliver_stats st;
    deliver_stats(((struct hub *)ud)->deliver, &st);
    return (double)st.lag_max_ms / 1000.0;
}

static double
gauge_ack_holds(void *ud)
{
    struct fanout_stats st;
    fanout_stats(((struct hub *)ud)->fanout, &st);
    return (double)st.ack_holds;
}

static double
gauge_redis_rtt(void *ud)
{
    struct rs_redis_stats st;
    backlog_stats(((struct hub *)ud)->backlog, &st);
    return st.replies ? (double)st.rtt_us_sum / (double)st.replies / 1e6 : 0;
}

static double
gauge_redis_rtt_max(void *ud)
{
    struct rs_redis_stats st;
    backlog_stats(((struct hub *)ud)->backlog, &st);
    return (double)st.rtt_us_max / 1e6;
}

#define COUNTER(field, name, help) \
    rs_metrics_register_counter(h->metrics, &hm->field.c, name, help, NULL)

int
status_metrics_init(struct hub *h)
{
    static const double lat[] = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                  0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1 };
    struct hub_metrics *hm = rs_calloc(1, sizeof(*hm));
    if (hm == NULL)
        return RS_ENOMEM;
    h->hm = hm;
    int rc = COUNTER(accepted, "rshub_publish_accepted_total",
                     "Notifications persisted and acknowledged.");
    for (int r = 0; rc == 0 && r < REJ_COUNT; r++)
        rc = rs_metrics_register_counter(h->metrics, &hm->rejected[r].c,
                                         "rshub_publish_rejected_total",
                                         "Publications refused, by reason (the "
                                         "413s of --max-body are libevent's own "
                                         "and not counted).",
                                         "reason", hub_reject_name(r), NULL);
    if (rc == 0)
        rc = COUNTER(duplicates, "rshub_publish_duplicates_total",
                     "Publications whose X-Publish-Id was stored already: "
                     "answered 202, not stored again.");
    for (int r = 0; rc == 0 && r < REG_COUNT; r++)
        rc = rs_metrics_register_counter(h->metrics, &hm->registrations[r].c,
                                         "rshub_topic_registrations_total",
                                         "POST /topics requests, by result "
                                         "(found and claimed answered 200).",
                                         "result", reg_names[r], NULL);
    if (rc == 0)
        rc = COUNTER(bytes_in, "rshub_publish_bytes_total",
                     "Bytes of notification bodies received.");
    if (rc == 0)
        rc = rs_metrics_register_histogram(h->metrics, &h->publish_seconds,
                                           "rshub_publish_seconds",
                                           "From request to persisted in Redis.",
                                           lat, sizeof(lat) / sizeof(lat[0]), NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(h->metrics, "rshub_publish_inflight",
                                          "Publications waiting for Redis.",
                                          gauge_inflight, h, NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(h->metrics, "rshub_ws_connections",
                                          "Open WebSocket connections.",
                                          gauge_ws_open, h, NULL);
    if (rc == 0)
        rc = COUNTER(ws_accepted, "rshub_ws_connections_total",
                     "WebSocket connections established.");
    if (rc == 0)
        rc = COUNTER(ws_refused, "rshub_ws_accept_refused_total",
                     "WebSocket connections the hub could not accept (EMFILE...).");
    if (rc == 0)
        rc = COUNTER(ws_frames, "rshub_ws_deliveries_total",
                     "Notifications written to WebSocket clients.");
    if (rc == 0)
        rc = COUNTER(ws_writes, "rshub_ws_writes_total",
                     "Socket writes (deliveries per write shows batching).");
    if (rc == 0)
        rc = COUNTER(ws_bytes, "rshub_ws_bytes_total",
                     "Bytes written to WebSocket clients.");
    if (rc == 0)
        rc = COUNTER(ws_slow, "rshub_ws_slow_consumer_drops_total",
                     "Clients cut (close 4002) for falling too far behind.");
    if (rc == 0)
        rc = COUNTER(ws_gap, "rshub_ws_gap_closes_total",
                     "Clients closed with 4001 (gap: resume by pulling).");
    if (rc == 0)
        rc = COUNTER(dispatched, "rshub_fanout_dispatched_total",
                     "Notifications read from Redis and handed to the threads.");
    if (rc == 0)
        rc = COUNTER(replayed, "rshub_fanout_replayed_total",
                     "Notifications sent from the backlog to resuming clients.");
    if (rc == 0)
        rc = COUNTER(bad_entries, "rshub_fanout_bad_entries_total",
                     "Backlog entries that could not be framed.");
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(h->metrics, "rshub_channels_active",
                                          "Channels in this node's tail read.",
                                          gauge_channels, h, NULL);
    if (rc == 0)
        rc = COUNTER(tail_pauses, "rshub_fanout_tail_pauses_total",
                     "Times the tail read was held back because a service "
                     "thread had more than its queue_high waiting.");
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(h->metrics, "rshub_fanout_tail_holds",
                                          "Pauses not yet drained: the tail read waits "
                                          "while above 0.",
                                          gauge_tail_holds, h, NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(h->metrics, "rshub_redis_up",
                                          "1 when both Redis links are ready.",
                                          gauge_redis_up, h, NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(h->metrics,
                                          "rshub_redis_clock_offset_seconds",
                                          "Redis's clock minus this node's, as last "
                                          "measured: backlog ages and WebSub leases "
                                          "go by Redis's.",
                                          gauge_clock_offset, h, NULL);
    if (rc == 0)
        rc = COUNTER(redis_cmds, "rshub_redis_commands_total",
                     "Commands sent on the Redis command link.");
    if (rc == 0)
        rc = COUNTER(redis_fail, "rshub_redis_failures_total",
                     "Redis commands that failed (link lost, timeout).");
    if (rc == 0)
        rc = COUNTER(redis_reconnects, "rshub_redis_reconnects_total",
                     "Times the Redis command link came back.");
    if (rc == 0)
        rc = COUNTER(redis_failovers, "rshub_redis_failovers_total",
                     "Times the publish link found the primary at another "
                     "address (sentinel://; 0 otherwise).");
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(h->metrics, "rshub_fanout_ack_holds",
                                          "Tail batches held until "
                                          "--ack-replicas replicas confirm them.",
                                          gauge_ack_holds, h, NULL);
    if (rc == 0)
        rc = COUNTER(ws_requests, "rshub_websub_requests_total",
                     "Form-encoded WebSub requests (subscribe, unsubscribe, publish).");
    if (rc == 0)
        rc = COUNTER(ws_verified, "rshub_websub_verified_total",
                     "Intents verified at the callback.");
    if (rc == 0)
        rc = COUNTER(ws_verify_failed, "rshub_websub_verify_failed_total",
                     "Verifications refused, unanswered or with a wrong echo.");
    if (rc == 0)
        rc = COUNTER(ws_denied, "rshub_websub_denied_total",
                     "Subscription requests refused (4xx, denial notices).");
    if (rc == 0)
        rc = COUNTER(ws_pings, "rshub_websub_pings_total",
                     "Publish pings fetched and stored.");
    if (rc == 0)
        rc = COUNTER(ws_ping_failed, "rshub_websub_ping_failed_total",
                     "Publish pings whose topic could not be fetched or stored.");
    if (rc == 0)
        rc = COUNTER(wd_delivered, "rshub_websub_deliveries_total",
                     "Notifications delivered to callbacks (2xx).");
    if (rc == 0)
        rc = COUNTER(wd_failed, "rshub_websub_delivery_failures_total",
                     "Delivery attempts that failed and will be retried.");
    if (rc == 0)
        rc = COUNTER(wd_gaps, "rshub_websub_gaps_total",
                     "Times a subscription was found behind the backlog: "
                     "notifications trimmed before delivery (X-Hub-Gap).");
    for (int i = 0; rc == 0 && i < 3; i++) {
        static const char *const why[3] = { "gone", "failing", "expired" };
        struct synced *sy = i == 0 ? &hm->wd_gone : i == 1 ? &hm->wd_failing
                                                            : &hm->wd_expired;
        rc = rs_metrics_register_counter(h->metrics, &sy->c,
                                         "rshub_websub_removed_total",
                                         "Subscriptions removed, by reason.",
                                         "reason", why[i], NULL);
    }
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(h->metrics, "rshub_websub_subscriptions",
                                          "WebSub subscriptions this node delivers.",
                                          gauge_websub_subs, h, NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(h->metrics, "rshub_websub_failing",
                                          "Subscriptions failing past the retry window.",
                                          gauge_websub_failing, h, NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(h->metrics, "rshub_websub_lag_seconds",
                                          "Age of the oldest undelivered notification.",
                                          gauge_websub_lag, h, NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(h->metrics, "rshub_redis_rtt_seconds_avg",
                                          "Mean Redis round trip.",
                                          gauge_redis_rtt, h, NULL);
    if (rc == 0)
        rc = rs_metrics_register_gauge_fn(h->metrics, "rshub_redis_rtt_seconds_max",
                                          "Longest Redis round trip.",
                                          gauge_redis_rtt_max, h, NULL);
    return rc;
}

void
status_metrics_free(struct hub *h)
{
    if (h->hm != NULL)
        rs_free(h->hm->buf);
    rs_free(h->hm);
    h->hm = NULL;
}

/* The primary the publish link is (or last was) on: its series 1, the
 * others 0. */
static void
primary_sync(struct hub *h)
{
    struct hub_metrics *hm = h->hm;
    const char *addr = backlog_addr(h->backlog);
    size_t i;
    if (addr == NULL || addr[0] == '\0')
        return;
    for (i = 0; i < hm->nprimaries; i++)
        if (strcmp(hm->primaries[i].addr, addr) == 0)
            break;
    if (i == hm->nprimaries) {
        size_t cap = sizeof(hm->primaries) / sizeof(hm->primaries[0]);
        if (i == cap || strlen(addr) >= sizeof(hm->primaries[i].addr) ||
            rs_metrics_register_gauge(h->metrics, &hm->primaries[i].g,
                                      "rshub_redis_primary_info",
                                      "The Redis primary the publish link is "
                                      "on (1), and earlier ones (0).",
                                      "addr", addr, NULL) != 0)
            return;   /* past the cap: the failovers counter still counts */
        snprintf(hm->primaries[i].addr, sizeof(hm->primaries[i].addr), "%s",
                 addr);
        hm->nprimaries++;
    }
    for (size_t k = 0; k < hm->nprimaries; k++)
        rs_metrics_gauge_set(hm->primaries[k].g, k == i ? 1 : 0);
}

static void
metrics_sync(struct hub *h)
{
    struct hub_metrics *hm = h->hm;
    struct ws_stats ws;
    struct fanout_stats fo;
    struct rs_redis_stats rd;
    ws_server_stats(h->ws, &ws);
    fanout_stats(h->fanout, &fo);
    backlog_stats(h->backlog, &rd);
    synced_set(&hm->accepted, h->accepted);
    synced_set(&hm->bytes_in, h->bytes_in);
    for (int r = 0; r < REJ_COUNT; r++)
        synced_set(&hm->rejected[r], h->rejected[r]);
    synced_set(&hm->duplicates, h->duplicates);
    for (int r = 0; r < REG_COUNT; r++)
        synced_set(&hm->registrations[r], h->registrations[r]);
    synced_set(&hm->ws_accepted, ws.accepted);
    synced_set(&hm->ws_frames, ws.frames);
    synced_set(&hm->ws_writes, ws.writes);
    synced_set(&hm->ws_bytes, ws.bytes);
    synced_set(&hm->ws_slow, ws.slow_drops);
    synced_set(&hm->ws_gap, ws.closed_gap);
    synced_set(&hm->ws_refused, ws.refused);
    synced_set(&hm->dispatched, fo.dispatched);
    synced_set(&hm->replayed, fo.replayed);
    synced_set(&hm->gaps, fo.gaps);
    synced_set(&hm->bad_entries, fo.bad_entries);
    synced_set(&hm->tail_pauses, fo.tail_pauses);
    synced_set(&hm->redis_cmds, rd.commands);
    synced_set(&hm->redis_fail, rd.failures);
    synced_set(&hm->redis_reconnects, rd.reconnects);
    struct rs_redis_stats pub;
    backlog_publish_stats(h->backlog, &pub);
    synced_set(&hm->redis_failovers, pub.failovers);
    primary_sync(h);
    struct websub_stats ws_st;
    struct deliver_stats dl;
    websub_stats(h->websub, &ws_st);
    deliver_stats(h->deliver, &dl);
    synced_set(&hm->ws_requests, ws_st.requests);
    synced_set(&hm->ws_verified, ws_st.verified);
    synced_set(&hm->ws_verify_failed, ws_st.verify_failed);
    synced_set(&hm->ws_denied, ws_st.denied);
    synced_set(&hm->ws_pings, ws_st.pings);
    synced_set(&hm->ws_ping_failed, ws_st.ping_failed);
    synced_set(&hm->wd_delivered, dl.delivered);
    synced_set(&hm->wd_failed, dl.attempts_failed);
    synced_set(&hm->wd_gaps, dl.gaps);
    synced_set(&hm->wd_gone, dl.removed_gone);
    synced_set(&hm->wd_failing, dl.removed_failing);
    synced_set(&hm->wd_expired, dl.removed_expired);
}

static void
serve_metrics(struct hub *h, struct evhttp_request *req)
{
    size_t len = 0;
    metrics_sync(h);
    if (rs_metrics_render(h->metrics, &h->hm->buf, &h->hm->cap, &len) != 0) {
        reply_text(req, 500, "Internal Server Error", "error: out of memory");
        return;
    }
    reply_buf(req, RS_METRICS_CONTENT_TYPE, h->hm->buf, len);
}

/* --------------------------------------------------------------- topics */

/* GET /topics: one backlog_info per topic, answered when all are back.
 * POST /topics answers with one element of that array (single). */
struct topics_req {
    struct hub *h;
    struct evhttp_request *req;
    struct evhttp_connection *evcon;
    bool gone;
    bool single;
    size_t pending;
    json_t *arr;
};

struct topic_slot {
    struct topics_req *tr;
    json_t *obj;
};

static void
topics_req_finish(struct topics_req *tr)
{
    if (!tr->gone) {
        evhttp_connection_set_closecb(tr->evcon, NULL, NULL);
        const json_t *out = tr->single ? json_array_get(tr->arr, 0) : tr->arr;
        char *s = out != NULL ? json_dumps(out, JSON_INDENT(2)) : NULL;
        if (s == NULL) {
            reply_text(tr->req, 500, "Internal Server Error", "error: out of memory");
        } else {
            reply_buf(tr->req, "application/json", s, strlen(s));
            free(s);
        }
    }
    json_decref(tr->arr);
    rs_free(tr);
}

static void
on_topics_gone(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    ((struct topics_req *)arg)->gone = true;
}

static void
on_topic_info(void *ud, int rc, const struct backlog_info *info)
{
    struct topic_slot *slot = ud;
    struct topics_req *tr = slot->tr;
    json_t *bl = json_object();
    if (rc == 0 && bl != NULL) {
        char a[MSG_ID_BUFSZ], b[MSG_ID_BUFSZ];
        msg_id_format(info->first, a);
        msg_id_format(info->last, b);
        json_object_set_new(bl, "length", json_integer((json_int_t)info->length));
        json_object_set_new(bl, "first_id", info->length ? json_string(a) : json_null());
        json_object_set_new(bl, "last_id", info->length ? json_string(b) : json_null());
        msg_id_format(info->mark, a);
        json_object_set_new(bl, "trimmed_through",
                            msg_id_is_zero(info->mark) ? json_null() : json_string(a));
    }
    json_object_set_new(slot->obj, "backlog", rc == 0 && bl ? bl : json_null());
    if (rc != 0)
        json_decref(bl);
    rs_free(slot);
    if (--tr->pending == 0)
        topics_req_finish(tr);
}

static void serve_topics_now(struct hub *h, struct evhttp_request *req);

/* A request waiting for the registry reload; its connection may go. */
struct pending_get {
    struct hub *h;
    struct evhttp_request *req;
    struct evhttp_connection *evcon;
    bool gone;
    void (*serve)(struct hub *h, struct evhttp_request *req, const char *arg);
    char arg[BACKLOG_NAME_MAX + 1];
};

static void
on_pending_gone(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    ((struct pending_get *)arg)->gone = true;
}

static void
on_reloaded(void *ud)
{
    struct pending_get *pg = ud;
    if (!pg->gone) {
        evhttp_connection_set_closecb(pg->evcon, NULL, NULL);
        pg->serve(pg->h, pg->req, pg->arg);
    }
    rs_free(pg);
}

/* In open mode other nodes create topics: reload the registry, then serve. */
static void
serve_fresh(struct hub *h, struct evhttp_request *req,
            void (*serve)(struct hub *, struct evhttp_request *, const char *),
            const char *arg)
{
    struct pending_get *pg = NULL;
    if (topics_open(h->topics) && backlog_ready(h->backlog))
        pg = rs_calloc(1, sizeof(*pg));
    if (pg == NULL) {
        serve(h, req, arg);
        return;
    }
    pg->h = h;
    pg->req = req;
    pg->evcon = evhttp_request_get_connection(req);
    pg->serve = serve;
    snprintf(pg->arg, sizeof(pg->arg), "%s", arg);
    evhttp_connection_set_closecb(pg->evcon, on_pending_gone, pg);
    hub_reload_topics(h, on_reloaded, pg);
}

static void
serve_topics(struct hub *h, struct evhttp_request *req, const char *unused)
{
    (void)unused;
    serve_topics_now(h, req);
}

/* The WebSub subscriptions this node delivers (another node owns the
 * others: each topic is delivered by the holder of its lock). */
static void
on_websub_info(void *ud, const struct deliver_sub_info *si)
{
    json_t *arr = ud, *o = json_object();
    char cur[MSG_ID_BUFSZ];
    if (o == NULL)
        return;
    msg_id_format(si->cursor, cur);
    json_object_set_new(o, "callback", json_string(si->callback));
    json_object_set_new(o, "state", json_string(si->state));
    json_object_set_new(o, "cursor", json_string(cur));
    json_object_set_new(o, "attempts", json_integer(si->attempts));
    json_object_set_new(o, "delivered", json_integer((json_int_t)si->delivered));
    json_object_set_new(o, "lag_ms", json_integer((json_int_t)si->lag_ms));
    json_object_set_new(o, "lease_expires_ms", json_integer((json_int_t)si->expires_ms));
    json_array_append_new(arr, o);
}

static struct topics_req *
topics_req_new(struct hub *h, struct evhttp_request *req)
{
    struct topics_req *tr = rs_calloc(1, sizeof(*tr));
    if (tr == NULL || (tr->arr = json_array()) == NULL) {
        rs_free(tr);
        reply_text(req, 500, "Internal Server Error", "error: out of memory");
        return NULL;
    }
    tr->h = h;
    tr->req = req;
    tr->evcon = evhttp_request_get_connection(req);
    tr->pending = 1;   /* held until every element is started */
    return tr;
}

/* Append t's element; its backlog figures follow from Redis. */
static void
topics_req_add(struct topics_req *tr, const struct topic *t)
{
    struct hub *h = tr->h;
    char uri[512];
    json_t *o = json_object();
    if (o == NULL)
        return;
    json_object_set_new(o, "name", json_string(t->name));
    json_object_set_new(o, "topic", json_string(t->uri));
    json_object_set_new(o, "kind", json_string(topic_kind_name(t->kind)));
    if (hub_channel_uri(h, t, uri, sizeof(uri)) == 0)
        json_object_set_new(o, "websocket", json_string(uri));
    json_object_set_new(o, "hub", json_string(h->hub_url));
    json_object_set_new(o, "configured", json_boolean(t->configured));
    json_object_set_new(o, "subscribers",
                        json_integer((json_int_t)fanout_subscribers(h->fanout, t->name)));
    json_object_set_new(o, "backlog", json_null());
    json_t *subs = json_array();
    if (subs != NULL) {
        deliver_foreach(h->deliver, t->name, on_websub_info, subs);
        json_object_set_new(o, "websub", subs);
    }
    json_array_append_new(tr->arr, o);
    struct topic_slot *slot = rs_malloc(sizeof(*slot));
    if (slot == NULL)
        return;
    slot->tr = tr;
    slot->obj = o;
    tr->pending++;
    if (backlog_info(h->backlog, t->name, on_topic_info, slot) != 0) {
        tr->pending--;
        rs_free(slot);
    }
}

static void
topics_req_start(struct topics_req *tr)
{
    evhttp_connection_set_closecb(tr->evcon, on_topics_gone, tr);
    if (--tr->pending == 0)
        topics_req_finish(tr);
}

/* Private topics are listed only to a caller whose credential
 * (Authorization) allows them; a credential that is not valid is refused
 * rather than taken for none, so its holder learns why. */
static void
serve_topics_now(struct hub *h, struct evhttp_request *req)
{
    struct read_cred *c = NULL;
    enum read_verdict v = hub_read_cred(h, req, &c);
    bool publisher = false;    /* a publish token: its own topics only */
    if (v != READ_OK && v != READ_NO_CRED) {
        for (size_t i = 0; i < topics_count(h->topics) && !publisher; i++)
            publisher = hub_publisher_of(req, topics_at(h->topics, i));
        if (!publisher) {
            hub_read_note(h, req, "topics", NULL, v);
            hub_read_reply(req, v);
            return;
        }
    }
    struct topics_req *tr = topics_req_new(h, req);
    if (tr != NULL) {
        for (size_t i = 0; i < topics_count(h->topics); i++) {
            const struct topic *t = topics_at(h->topics, i);
            if (hub_topic_visible(h, t, c) || hub_publisher_of(req, t))
                topics_req_add(tr, t);
        }
        topics_req_start(tr);
    }
    readauth_cred_free(c);
}

void
status_reply_topic(struct hub *h, struct evhttp_request *req,
                const struct topic *t)
{
    struct topics_req *tr = topics_req_new(h, req);
    if (tr == NULL)
        return;
    tr->single = true;
    topics_req_add(tr, t);
    topics_req_start(tr);
}

/* GET /topics/NAME/capabilitylist-entries: the WebSocket channel and the
 * WebSub topic as <url> elements of a Capability List, written by
 * rs_write (entries only: a fragment to paste). */
static void
serve_caplist_entries(struct hub *h, struct evhttp_request *req,
                      const char *name)
{
    const struct topic *t = topics_by_name(h->topics, name);
    struct rs_write_opts wo = { .pretty = true, .no_decl = true,
                                .lenient = true, .entries_only = true };
    struct rs_head head;
    struct rs_entry e[2];
    struct rs_link hub;
    char uri[512], *out = NULL;
    size_t len = 0;
    bool framework;

    struct read_cred *c = NULL;
    enum read_verdict v = hub_read_cred(h, req, &c);
    bool publisher = t != NULL && hub_publisher_of(req, t);
    if (v != READ_OK && v != READ_NO_CRED && !publisher) {
        hub_read_note(h, req, "topics", name, v);
        hub_read_reply(req, v);
        return;
    }
    bool visible = t != NULL && (publisher || hub_topic_visible(h, t, c));
    if (t != NULL && !visible)   /* told as unknown: a private topic hides */
        hub_read_note(h, req, "topics", t->name,
                      readauth_allows(h->readauth, c, t->name, t->uri));
    readauth_cred_free(c);
    if (!visible || hub_channel_uri(h, t, uri, sizeof(uri)) != 0) {
        reply_text(req, 404, "Not Found", "error: unknown topic");
        return;
    }
    framework = t->kind == TOPIC_FRAMEWORK;
    rs_head_init(&head);
    head.root = RS_ROOT_URLSET;
    head.has_md = true;
    head.md.capability = RS_CAP_CAPABILITYLIST;
    for (int i = 0; i < 2; i++) {
        rs_entry_init(&e[i]);
        e[i].has_md = true;
        e[i].md.capability = framework ? RS_CAP_FRAMEWORK_NOTIFICATION
                                       : RS_CAP_CHANGELIST_NOTIFICATION;
    }
    /* The 2013 draft defines ws:// channels, and spells the change
     * channel's capability "change-notification" (docs/protocol.md 6). */
    e[0].loc = uri;
    e[0].md.capability_alpha = !framework;
    rs_link_init(&hub);
    hub.rel = "hub";
    hub.href = h->hub_url;
    e[1].loc = t->uri;
    e[1].links = &hub;
    e[1].nlinks = 1;
    if (rs_write_buf(&head, e, 2, &wo, &out, &len) != 0) {
        reply_text(req, 500, "Internal Server Error",
                   "error: the entries cannot be written (topic URI?)");
        rs_free(out);
        return;
    }
    reply_buf(req, "application/xml; charset=utf-8", out, len);
    rs_free(out);
}

/* A request whose framing could be read two ways is answered (400 or 501,
 * connection closed) here whatever its path, as handled. */
bool
status_handle(struct hub *h, struct evhttp_request *req, const char *path)
{
    static const char tp[] = "/topics/";
    static const char suffix[] = "/capabilitylist-entries";
    if (rs_httpcheck_refuse(req))
        return true;
    if (strcmp(path, "/healthz") == 0) {
        reply_text(req, 200, "OK", "ok");
    } else if (strcmp(path, "/readyz") == 0) {
        const char *why = NULL, *words;
        char refusing[320];
        if (h->draining) {
            why = "draining";
        } else if (!backlog_ready(h->backlog)) {
            why = "redis unavailable";
        } else if ((words = backlog_refusing(h->backlog)) != NULL) {
            snprintf(refusing, sizeof(refusing), "redis refuses writes: %s",
                     words);
            why = refusing;
        } else if (h->ack != NULL) {
            (void)ack_ok(h->ack, &why);   /* why, when not */
        }
        if (why == NULL)
            reply_text(req, 200, "OK", "ready");
        else
            reply_text(req, 503, "Service Unavailable", "%s", why);
    } else if (strcmp(path, "/metrics") == 0) {
        serve_metrics(h, req);
    } else if (strcmp(path, "/topics") == 0) {
        serve_fresh(h, req, serve_topics, "");
    } else if (strncmp(path, tp, sizeof(tp) - 1) == 0) {
        const char *name = path + sizeof(tp) - 1;
        const char *end = strstr(name, suffix);
        char buf[BACKLOG_NAME_MAX + 1];
        size_t n = end != NULL ? (size_t)(end - name) : 0;
        if (end == NULL || end[sizeof(suffix) - 1] != '\0' || n == 0 || n >= sizeof(buf)) {
            reply_text(req, 404, "Not Found", "error: no such resource");
            return true;
        }
        memcpy(buf, name, n);
        buf[n] = '\0';
        if (topics_by_name(h->topics, buf) != NULL)
            serve_caplist_entries(h, req, buf);
        else
            serve_fresh(h, req, serve_caplist_entries, buf);
    } else {
        return false;
    }
    return true;
}
