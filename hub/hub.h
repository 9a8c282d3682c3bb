/*
 * hub.h - the rshub process: its configuration and the objects the main
 * loop owns (HTTP server, backlog, topics, fan-out, WebSocket server), and
 * the counters the HTTP handlers keep. Each handler module (ingest.h,
 * status.h, websub.h) works on this struct; rshub.c builds and tears it
 * down; hub.c holds its few helpers.
 */
#ifndef HUB_HUB_H
#define HUB_HUB_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backlog.h"
#include "fanout.h"
#include "readauth.h"
#include "rs_config.h"
#include "rs_metrics.h"
#include "topic.h"
#include "wsserver.h"

struct ack;
struct event_base;
struct evdns_base;
struct evhttp;
struct evhttp_request;
struct netpolicy;
struct readnote;
struct rs_http;
struct subs;
struct deliver;
struct websub;

struct hub_conf {
    struct rs_config_hostport listen;
    struct rs_config_hostport ws_listen;
    char *redis;
    char *prefix;
    char *public_url;         /* base of advertised http URIs */
    char *ws_public_url;      /* base of advertised ws URIs */
    bool open;
    char *read_token_file;           /* hub-wide read tokens (open mode) */
    char *admin_token_file;
    char *read_jwt_secret_file;      /* HS256 */
    char *read_jwt_public_key_file;  /* RS256 / ES256 */
    bool insecure_token_file;
    int64_t max_topics;       /* topics (and channels) a node holds */
    uint64_t max_body;
    int64_t backlog_max;
    int64_t backlog_max_age_ms;
    int64_t ws_threads;
    uint64_t ws_soft_limit;
    int64_t ws_soft_ms;
    uint64_t ws_hard_limit;
    int64_t ws_ping_ms;
    int64_t ws_conn_rate;        /* new connections/s per address; 0 = none */
    int64_t ws_conn_burst;
    int64_t ws_replays_per_addr; /* 0 = no cap */
    int64_t replay_concurrency;  /* replay page reads in flight per node */
    int64_t redis_timeout_ms;
    int64_t ack_replicas;     /* 0: answer as Redis stores (no WAIT) */
    int64_t ack_timeout_ms;
    int64_t drain_ms;
    char **callback_allow;
    char **callback_deny;
    int64_t lease_min_ms;
    int64_t lease_max_ms;
    int64_t lease_default_ms;
    int64_t verify_timeout_ms;
    int64_t delivery_timeout_ms;
    int64_t delivery_lock_ms;
    int64_t retry_max_delay_ms;
    int64_t retry_window_ms;
    bool drop_failing;
    int64_t max_subs_per_topic;
    int64_t max_subs_per_host;
    int64_t delivery_host_conns;
    int64_t publish_ids_per_topic;  /* X-Publish-Id KEYs kept per topic */
    char *log_level;
    char *log_format;
    char *log_file;
    char *ready_file;
};

/* Publish outcomes, for /metrics. */
enum hub_reject {
    REJ_BAD_XML = 0,
    REJ_NOT_NOTIFICATION,
    REJ_NO_TOPIC_LINK,
    REJ_UNKNOWN_TOPIC,
    REJ_WRONG_KIND,
    REJ_NO_TOKEN,
    REJ_BAD_TOKEN,
    REJ_TOO_BIG,
    REJ_MEDIA_TYPE,
    REJ_UNAVAILABLE,
    REJ_TIMEOUT,
    REJ_METHOD,
    REJ_TOO_MANY_TOPICS,
    REJ_BAD_PUBLISH_ID,
    REJ_NOT_REPLICATED,       /* stored, fewer than --ack-replicas confirmed */
    REJ_BAD_TOPIC,            /* a new topic whose URI cannot be one */
    REJ_COUNT,
};

/* POST /topics outcomes, for /metrics. */
enum hub_reg {
    REG_FOUND = 0,          /* a topic this node knew: looked up */
    REG_CLAIMED,            /* open mode: the registry claim ran */
    REG_BAD_REQUEST,        /* form, topic URI or kind refused */
    REG_UNKNOWN_TOPIC,
    REG_WRONG_KIND,
    REG_NO_TOKEN,
    REG_BAD_TOKEN,
    REG_TOO_BIG,
    REG_MEDIA_TYPE,
    REG_UNAVAILABLE,
    REG_TOO_MANY_TOPICS,
    REG_COUNT,
};

struct hub {
    struct hub_conf *conf;
    struct event_base *base;
    struct evhttp *http;
    struct backlog *backlog;
    struct ack *ack;             /* --ack-replicas > 0; else NULL */
    struct topics *topics;
    struct fanout *fanout;
    struct ws_server *ws;
    struct rs_http *httpc;       /* WebSub verifications, deliveries, pings */
    struct evdns_base *dns;
    struct netpolicy *np;
    struct subs *subs;
    struct deliver *deliver;
    struct websub *websub;
    char node_id[33];            /* random per process: delivery locks */
    int http_port;
    int ws_port;
    char *hub_url;            /* public_url + "/hub" */
    bool draining;
    int64_t redis_down_since;  /* monotonic us a Redis link went down; 0:
                                  every link ready */
    int64_t link_down_told[3]; /* per link (command, publish, tail): when
                                  "redis link down" was last logged; 0:
                                  up since */
    unsigned inflight;        /* publishes waiting for Redis */
    uint64_t accepted;
    uint64_t rejected[REJ_COUNT];
    uint64_t duplicates;      /* X-Publish-Id seen already: not stored */
    uint64_t bytes_in;
    uint64_t registrations[REG_COUNT];
    struct rs_metrics *metrics;
    struct rs_metrics_histogram *publish_seconds;  /* request -> persisted */
    struct hub_metrics *hm;   /* status.c's synced counters */
    struct readauth *readauth;   /* read credentials in force (a reload
                                    replaces it; the service threads hold
                                    references of their own) */
    struct readnote *readnote;   /* refusals: counted, logged */
};

const char *hub_reject_name(enum hub_reject r);

/* The advertised URI of a topic's WebSocket channel. */
int hub_channel_uri(const struct hub *h, const struct topic *t, char *buf,
                    size_t len) RS_MUST_CHECK;

/*
 * Read access on the HTTP side (docs/protocol.md 4, 5, 6). The request's
 * Authorization bearer, checked against the credentials in force: READ_OK
 * with *out (readauth_cred_free it), READ_NO_CRED with *out NULL when the
 * request has none, READ_BAD_CRED / READ_EXPIRED otherwise. Noting a
 * refusal (hub_read_note) is the caller's, once it refuses: a public topic
 * is served whatever credential came along.
 */
enum read_verdict hub_read_cred(struct hub *h, struct evhttp_request *req,
                                struct read_cred **out);
/* May the holder of c (NULL: none) see and read topic t? Public topics:
 * always; private ones: with a credential that allows them; admin: all. */
bool hub_topic_visible(const struct hub *h, const struct topic *t,
                       const struct read_cred *c);

/* Is req's bearer a publish token of t (a topic that has tokens)? A Source
 * may see the channels of a topic it publishes to, private or not: it
 * knows the topic and the hub already. */
bool hub_publisher_of(struct evhttp_request *req, const struct topic *t);
/* Count and log a refusal of req's client at where for topic (NULL ok). */
void hub_read_note(struct hub *h, struct evhttp_request *req,
                   const char *where, const char *topic, enum read_verdict v);
/* Answer a refusal: 401 (with WWW-Authenticate) or 403, one line why. */
void hub_read_reply(struct evhttp_request *req, enum read_verdict v);

/* Open mode: learn the topics other nodes created from the registry in
 * Redis, then call done (if given) whatever happened. */
void hub_reload_topics(struct hub *h, void (*done)(void *ud), void *ud);

#endif
