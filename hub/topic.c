/*
 * topic.c - the hub's topic registry (topic.h): an array in the order
 * topics came, indexed by name and by URI. Topics are configured by hand
 * or created by publishing (or POST /topics), up to max_topics (100,000 by
 * default: a bridge's Sources are a topic each), and looked up at every
 * publish and WebSocket upgrade.
 */
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backlog.h"
#include "rs_alloc.h"
#include "rs_strmap.h"
#include "rs_url.h"
#include "topic.h"

#include <jansson.h>

struct topics {
    bool open;
    uint64_t def_max_entries, def_max_age_ms;
    size_t max;                 /* topics_learn stops at this many */
    struct topic **v;
    size_t n, cap;
    struct rs_strmap by_name, by_uri;   /* keys: the topics' own strings */
};

struct topics *
topics_new(bool open, uint64_t default_max_entries, uint64_t default_max_age_ms,
           size_t max_topics)
{
    struct topics *ts = rs_calloc(1, sizeof(*ts));
    if (ts != NULL) {
        ts->open = open;
        ts->def_max_entries = default_max_entries;
        ts->def_max_age_ms = default_max_age_ms;
        ts->max = max_topics != 0 ? max_topics : TOPICS_MAX_DEFAULT;
    }
    return ts;
}

static void
topic_free(struct topic *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->ntokens; i++)
        rs_free(t->tokens[i]);
    rs_free(t->tokens);
    rs_free(t->name);
    rs_free(t->uri);
    rs_free(t);
}

void
topics_free(struct topics *ts)
{
    if (ts == NULL)
        return;
    for (size_t i = 0; i < ts->n; i++)
        topic_free(ts->v[i]);
    rs_free(ts->v);
    rs_strmap_clear(&ts->by_name);
    rs_strmap_clear(&ts->by_uri);
    rs_free(ts);
}

bool
topics_open(const struct topics *ts)
{
    return ts->open;
}

static struct topic *
topics_push(struct topics *ts, const char *name, const char *uri,
            enum topic_kind kind)
{
    if (ts->n == ts->cap) {
        size_t ncap = ts->cap ? ts->cap * 2 : 8;
        struct topic **nv = rs_realloc(ts->v, ncap * sizeof(*nv));
        if (nv == NULL)
            return NULL;
        ts->v = nv;
        ts->cap = ncap;
    }
    struct topic *t = rs_calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->name = rs_strdup(name);
    t->uri = rs_strdup(uri);
    t->kind = kind;
    t->max_entries = ts->def_max_entries;
    t->max_age_ms = ts->def_max_age_ms;
    /* in both maps or in neither: taken names and URIs are the callers'
     * to refuse first */
    if (t->name == NULL || t->uri == NULL ||
        topics_by_name(ts, name) != NULL || topics_by_uri(ts, uri) != NULL ||
        rs_strmap_reserve(&ts->by_name, 1) != 0 ||
        rs_strmap_reserve(&ts->by_uri, 1) != 0) {
        topic_free(t);
        return NULL;
    }
    int rc = rs_strmap_put(&ts->by_name, t->name, t);
    rc |= rs_strmap_put(&ts->by_uri, t->uri, t);
    (void)rc;                            /* reserved: neither can fail */
    ts->v[ts->n++] = t;
    return t;
}

int
topics_add(struct topics *ts, const char *name, const char *uri,
           enum topic_kind kind, const char *const *tokens,
           uint64_t max_entries, uint64_t max_age_ms, const char **why)
{
    if (!backlog_name_ok(name)) {
        *why = "topic name must be 1-100 characters of [A-Za-z0-9._-]";
        return RS_EINVAL;
    }
    if (uri == NULL || uri[0] == '\0') {
        *why = "topic has no uri";
        return RS_EINVAL;
    }
    if (topics_by_name(ts, name) != NULL) {
        *why = "duplicate topic name";
        return RS_EINVAL;
    }
    if (topics_by_uri(ts, uri) != NULL) {
        *why = "duplicate topic uri";
        return RS_EINVAL;
    }
    *why = "out of memory";
    struct topic *t = topics_push(ts, name, uri, kind);
    if (t == NULL)
        return RS_ENOMEM;
    t->configured = true;
    t->max_entries = max_entries;
    t->max_age_ms = max_age_ms;
    size_t n = 0;
    while (tokens != NULL && tokens[n] != NULL)
        n++;
    if (n > 0) {
        t->tokens = rs_calloc(n + 1, sizeof(*t->tokens));
        if (t->tokens == NULL)
            return RS_ENOMEM;
        for (size_t i = 0; i < n; i++) {
            t->tokens[i] = rs_strdup(tokens[i]);
            if (t->tokens[i] == NULL)
                return RS_ENOMEM;
            t->ntokens++;
        }
    }
    *why = NULL;
    return 0;
}

void
topic_appended(struct topic *t, struct msg_id id)
{
    if (msg_id_cmp(id, t->appended) > 0)
        t->appended = id;
}

struct topic *
topics_by_name(const struct topics *ts, const char *name)
{
    return rs_strmap_get(&ts->by_name, name);
}

struct topic *
topics_by_uri(const struct topics *ts, const char *uri)
{
    return rs_strmap_get(&ts->by_uri, uri);
}

size_t
topics_count(const struct topics *ts)
{
    return ts->n;
}

struct topic *
topics_at(const struct topics *ts, size_t i)
{
    return i < ts->n ? ts->v[i] : NULL;
}

bool
topic_uri_ok(const char *uri, const char **why)
{
    size_t n = strlen(uri);
    *why = NULL;
    if (n == 0)
        *why = "topic is empty";
    else if (n > TOPIC_URI_MAX)
        *why = "topic is longer than 2048 bytes";
    for (size_t i = 0; *why == NULL && i < n; i++) {
        unsigned char c = (unsigned char)uri[i];
        if (c <= 0x20 || c == 0x7f)
            *why = "topic holds a space or a control character";
    }
    return *why == NULL;
}

bool
topic_new_uri_ok(const char *uri, const char **why)
{
    if (!topic_uri_ok(uri, why))
        return false;
    for (const char *s = uri; *s != '\0'; s++)
        if ((unsigned char)*s >= 0x80) {
            *why = "a topic is a URI: characters beyond ASCII must be "
                   "percent-encoded";
            return false;
        }
    if (!rs_url_is_http(uri))
        *why = "a new topic must be an absolute http(s) URI";
    return *why == NULL;
}

int
topics_derive_name(const char *uri, char *buf, size_t bufsz)
{
    if (bufsz < 100)
        return RS_EINVAL;
    const char *s = strstr(uri, "://");
    s = s != NULL ? s + 3 : uri;
    size_t n = 0;
    bool dash = false;
    for (; *s != '\0' && n < 80; s++) {
        char c = *s;
        if (c >= 'A' && c <= 'Z')
            c = (char)(c + 32);
        bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_';
        if (ok) {
            buf[n++] = c;
            dash = false;
        } else if (!dash && n > 0) {
            buf[n++] = '-';
            dash = true;
        }
    }
    while (n > 0 && buf[n - 1] == '-')
        n--;
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)uri, strlen(uri), md);
    snprintf(buf + n, bufsz - n, "%s%02x%02x%02x%02x", n ? "-" : "", md[0],
             md[1], md[2], md[3]);
    return 0;
}

bool
topics_full(const struct topics *ts)
{
    return ts->open && ts->n >= ts->max;
}

size_t
topics_max(const struct topics *ts)
{
    return ts->max;
}

struct topic *
topics_learn(struct topics *ts, const char *uri, bool *created,
             const char **why)
{
    *created = false;
    *why = NULL;
    struct topic *t = topics_by_uri(ts, uri);
    if (t != NULL || !ts->open)
        return t;
    if (!topic_new_uri_ok(uri, why) || topics_full(ts))
        return NULL;
    char name[128];
    if (topics_derive_name(uri, name, sizeof(name)) != 0)
        return NULL;
    t = topics_push(ts, name, uri, TOPIC_ANY);
    if (t != NULL)
        *created = true;
    return t;
}

int
topics_remember(struct topics *ts, const char *name, const char *uri,
                enum topic_kind kind)
{
    struct topic *t = topics_by_name(ts, name);
    if (t != NULL) {
        if (!t->configured) {
            t->kind = kind;
            t->registered = true;
        }
        return 0;
    }
    if (!backlog_name_ok(name) || topics_by_uri(ts, uri) != NULL)
        return RS_EINVAL;
    t = topics_push(ts, name, uri, kind);
    if (t == NULL)
        return RS_ENOMEM;
    t->registered = true;
    return 0;
}

enum topic_kind
topic_kind_of(enum rs_capability cap)
{
    if (cap == RS_CAP_CHANGELIST_NOTIFICATION)
        return TOPIC_CHANGE;
    if (cap == RS_CAP_FRAMEWORK_NOTIFICATION)
        return TOPIC_FRAMEWORK;
    return TOPIC_ANY;
}

const char *
topic_kind_name(enum topic_kind k)
{
    switch (k) {
    case TOPIC_CHANGE: return "change";
    case TOPIC_FRAMEWORK: return "framework";
    case TOPIC_ANY: break;
    }
    return "any";
}

int
topic_kind_from(const char *s, enum topic_kind *out)
{
    if (strcasecmp(s, "change") == 0)
        *out = TOPIC_CHANGE;
    else if (strcasecmp(s, "framework") == 0)
        *out = TOPIC_FRAMEWORK;
    else if (strcasecmp(s, "any") == 0)
        *out = TOPIC_ANY;
    else
        return RS_EINVAL;
    return 0;
}

bool
topic_needs_token(const struct topic *t)
{
    return t->ntokens > 0;
}

int
topic_token_ok(const struct topic *t, const char *token)
{
    if (t->ntokens == 0)
        return 1;
    if (token == NULL)
        return 0;
    size_t len = strlen(token);
    int ok = 0;
    for (size_t i = 0; i < t->ntokens; i++) {
        size_t tl = strlen(t->tokens[i]);
        /* compare in constant time over the token's length */
        if (tl == len && CRYPTO_memcmp(t->tokens[i], token, len) == 0)
            ok = 1;
    }
    return ok;
}

char *
topic_record(const struct topic *t)
{
    json_t *o = json_pack("{s:s, s:s}", "topic", t->uri, "kind",
                          topic_kind_name(t->kind));
    if (o == NULL)
        return NULL;
    char *js = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (js == NULL)
        return NULL;
    char *out = rs_strdup(js);   /* callers free with rs_free */
    free(js);
    return out;
}

int
topic_record_parse(const char *json, size_t len, char **uri,
                   enum topic_kind *kind)
{
    json_error_t err;
    const char *u = NULL, *k = NULL;
    json_t *o = json_loadb(json, len, 0, &err);
    int rc = RS_EINVAL;
    *uri = NULL;
    if (o != NULL && json_unpack(o, "{s:s, s:s}", "topic", &u, "kind", &k) == 0 &&
        topic_kind_from(k, kind) == 0) {
        *uri = rs_strdup(u);
        rc = *uri != NULL ? 0 : RS_ENOMEM;
    }
    json_decref(o);
    return rc;
}
