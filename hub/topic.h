/*
 * topic.h - the hub's topics: configured ones (name, topic URI, kind,
 * publish tokens, backlog bounds) and, in open mode, ones created by
 * publishing or by POST /topics, with a readable name derived from the
 * topic URI; how many a node holds is capped. Lookup by name and by URI.
 * No I/O: registering open-mode topics in Redis is the caller's job.
 */
#ifndef HUB_TOPIC_H
#define HUB_TOPIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "msg.h"
#include "rs_doc.h"
#include "rs_error.h"

enum topic_kind {
    TOPIC_ANY = 0,       /* open mode, before the first publish fixes it */
    TOPIC_CHANGE,
    TOPIC_FRAMEWORK,
};

struct topic {
    char *name;
    char *uri;
    enum topic_kind kind;
    char **tokens;              /* NULL-terminated; NULL or empty = no auth */
    size_t ntokens;
    uint64_t max_entries;       /* 0 = unbounded */
    uint64_t max_age_ms;        /* 0 = unbounded */
    bool configured;
    bool registered;            /* open mode: its record is known from Redis */
    struct msg_id appended;     /* the newest id this node appended (zero:
                                   none): the backlog's `known` */
};

/* An append of this node to t's backlog was stored (or found stored) as id. */
void topic_appended(struct topic *t, struct msg_id id);

struct topics;

#define TOPICS_MAX_DEFAULT 100000   /* fanout's max_channels default, too */
#define TOPIC_URI_MAX 2048          /* what POST /topics accepts */

/* Defaults applied to topics created in open mode; max_topics bounds how
 * many topics the node holds in all (0 = TOPICS_MAX_DEFAULT). */
struct topics *topics_new(bool open, uint64_t default_max_entries,
                          uint64_t default_max_age_ms, size_t max_topics);
void topics_free(struct topics *ts);

bool topics_open(const struct topics *ts);

/* Add a configured topic (strings copied). RS_EINVAL with *why on a bad or
 * duplicate name or URI. */
int topics_add(struct topics *ts, const char *name, const char *uri,
               enum topic_kind kind, const char *const *tokens,
               uint64_t max_entries, uint64_t max_age_ms,
               const char **why) RS_MUST_CHECK;

struct topic *topics_by_name(const struct topics *ts, const char *name);
struct topic *topics_by_uri(const struct topics *ts, const char *uri);
size_t topics_count(const struct topics *ts);
struct topic *topics_at(const struct topics *ts, size_t i);

/*
 * Open mode: the topic for uri, created if new (name derived from the URI:
 * host and path folded to [a-z0-9._-], cut to 80 bytes, plus "-" and 8 hex
 * digits of its SHA-256 so that different URIs never share a name).
 * *created tells whether it is new. NULL on ENOMEM, when not open, when
 * the node holds max_topics already (topics_full says which), or when uri
 * cannot be a new topic (topic_new_uri_ok: *why says why, else NULL).
 */
struct topic *topics_learn(struct topics *ts, const char *uri, bool *created,
                           const char **why);

/* Open mode and no room for one more topic. */
bool topics_full(const struct topics *ts);
size_t topics_max(const struct topics *ts);

/* Record a topic known from Redis (another node's open-mode topic), or
 * mark a local one registered with the kind Redis holds. Not capped: a
 * topic another node accepted must be servable here too, and the registry
 * grows only as fast as every node's own cap lets it. */
int topics_remember(struct topics *ts, const char *name, const char *uri,
                    enum topic_kind kind) RS_MUST_CHECK;

/* The kind a notification capability belongs to (TOPIC_ANY if neither). */
enum topic_kind topic_kind_of(enum rs_capability cap);
const char *topic_kind_name(enum topic_kind k);   /* "change", "framework", "any" */
int topic_kind_from(const char *s, enum topic_kind *out) RS_MUST_CHECK;

/* Constant-time check of a bearer token against the topic's tokens:
 * 1 ok, 0 wrong; topics without tokens accept anything. */
int topic_token_ok(const struct topic *t, const char *token);
bool topic_needs_token(const struct topic *t);

/* Is uri acceptable as a topic named in a request (POST /topics): 1 to
 * TOPIC_URI_MAX bytes, no control characters, no space; creating one
 * (open mode) needs an absolute http(s) URI on top, which the caller
 * checks. NULL *why when ok. */
bool topic_uri_ok(const char *uri, const char **why);

/* Can uri be a new topic (open mode)? topic_uri_ok, ASCII only (a URI:
 * other characters percent-encoded; the registry's records are JSON, which
 * must be UTF-8), and an absolute http(s) URI. NULL *why when ok. */
bool topic_new_uri_ok(const char *uri, const char **why);

/* Derive the open-mode name of uri into buf (at least 100 bytes). */
int topics_derive_name(const char *uri, char *buf, size_t bufsz) RS_MUST_CHECK;

/* The registry record of a topic, {"topic":URI,"kind":K} (rs_free it). */
char *topic_record(const struct topic *t);
/* Parse one; 0 or RS_EINVAL. *uri is rs_malloc'ed. */
int topic_record_parse(const char *json, size_t len, char **uri,
                       enum topic_kind *kind) RS_MUST_CHECK;

#endif
