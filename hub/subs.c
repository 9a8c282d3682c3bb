/*
 * subs.c - the WebSub subscription store in Redis (subs.h). Keys, with the
 * hub prefix: sub:NAME (hash callback -> record), cur:NAME (hash callback
 * -> last delivered id), leases (zset "NAME CALLBACK" -> expiry ms),
 * subtopics (set of names with subscriptions), hosts (hash host -> count),
 * pend:NAME (zset callback -> end of its reservation, ms) and phost:HOST
 * (zset "NAME CALLBACK" -> the same), lock:NAME (the delivering node).
 *
 * A cap counts stored subscriptions plus live reservations. A reservation
 * is taken when a request is accepted, in the script that checks the cap,
 * and ends when the subscription is stored (the same script moves it),
 * when it is released, or when its time has passed: the scripts that
 * count drop ended ones first, by Redis's clock (one clock for every
 * node), and each pend/phost key expires with its last reservation.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RS_LOG_MODULE "subs"
#include "rs_alloc.h"
#include "rs_log.h"
#include "script.h"
#include "subs.h"

enum subs_script {
    SS_PUT,
    SS_REMOVE,
    SS_RESERVE,
    SS_RELEASE,
    SS_LOAD,
    SS_LOCK,
    SS_SET_RECORD,
    SS_SAVE_CURSORS,
    SS_COUNT,
};

/* The start of the scripts that count reservations: Redis's time (5 and
 * 6 need effects replication for TIME before a write; 7 always has it),
 * ended reservations of the topic and the host dropped. */
#define SUBS_LUA_NOW                                                         \
    "redis.replicate_commands()\n"                                           \
    "local t = redis.call('TIME')\n"                                         \
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n" \
    "redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)\n"                 \
    "redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', now)\n"

/* Is there room for one more, stored and reserved counted? Returns -1 or
 * -2 (enum subs_slot) from the script when not. tc, hc: the caps; hk: the
 * host's field in KEYS[5]. */
#define SUBS_LUA_ROOM(tc, hc, hk)                                            \
    "if tonumber(" tc ") > 0 and redis.call('HLEN', KEYS[1]) +\n"           \
    "   redis.call('ZCARD', KEYS[6]) >= tonumber(" tc ") then return -1 end\n" \
    "if tonumber(" hc ") > 0 and tonumber(redis.call('HGET', KEYS[5], " hk \
    ") or '0') +\n"                                                         \
    "   redis.call('ZCARD', KEYS[7]) >= tonumber(" hc ") then return -2 end\n"

/* Keys in order: sub:NAME, cur:NAME, leases, subtopics, hosts, and for the
 * scripts that reserve: pend:NAME, phost:HOST. */
static struct script scripts[SS_COUNT] = {
    /* ARGV: callback, record, expiry, cursor, member, name, host, topic
     * cap, host cap. The reservation becomes the subscription; a new one
     * without a reservation (it ran out) needs room. */
    [SS_PUT].src =
        SUBS_LUA_NOW
        "redis.call('ZREM', KEYS[6], ARGV[1])\n"
        "redis.call('ZREM', KEYS[7], ARGV[5])\n"
        "if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then\n"
        SUBS_LUA_ROOM("ARGV[8]", "ARGV[9]", "ARGV[7]")
        "end\n"
        "local new = redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])\n"
        "redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[4])\n"
        "redis.call('ZADD', KEYS[3], ARGV[3], ARGV[5])\n"
        "redis.call('SADD', KEYS[4], ARGV[6])\n"
        "if new == 1 then redis.call('HINCRBY', KEYS[5], ARGV[7], 1) end\n"
        "return new\n",
    /* ARGV: callback, member, name, host */
    [SS_REMOVE].src =
        "local gone = redis.call('HDEL', KEYS[1], ARGV[1])\n"
        "redis.call('HDEL', KEYS[2], ARGV[1])\n"
        "redis.call('ZREM', KEYS[3], ARGV[2])\n"
        "if redis.call('HLEN', KEYS[1]) == 0 then redis.call('SREM', KEYS[4], ARGV[3]) end\n"
        "if gone == 1 and redis.call('HINCRBY', KEYS[5], ARGV[4], -1) <= 0 then\n"
        "  redis.call('HDEL', KEYS[5], ARGV[4])\n"
        "end\n"
        "return gone\n",
    /* ARGV: callback, member, topic cap, host cap, hold ms, host. A pair
     * that holds a reservation already shares it (and holds it longer). */
    [SS_RESERVE].src =
        SUBS_LUA_NOW
        "if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end\n"
        "if not redis.call('ZSCORE', KEYS[6], ARGV[1]) then\n"
        SUBS_LUA_ROOM("ARGV[3]", "ARGV[4]", "ARGV[6]")
        "end\n"
        "local hold = tonumber(ARGV[5])\n"
        "redis.call('ZADD', KEYS[6], now + hold, ARGV[1])\n"
        "redis.call('ZADD', KEYS[7], now + hold, ARGV[2])\n"
        "for k = 6, 7 do\n"
        "  if redis.call('PTTL', KEYS[k]) < hold then\n"
        "    redis.call('PEXPIRE', KEYS[k], hold)\n"
        "  end\n"
        "end\n"
        "return 1\n",
    /* ARGV: callback, member */
    [SS_RELEASE].src =
        "local n = redis.call('ZREM', KEYS[6], ARGV[1])\n"
        "redis.call('ZREM', KEYS[7], ARGV[2])\n"
        "return n\n",
    /* no ARGV: {callbacks..., records..., cursors...} in one flat list */
    [SS_LOAD].src =
        "local all = redis.call('HGETALL', KEYS[1])\n"
        "local cbs, recs = {}, {}\n"
        "for i = 1, #all, 2 do cbs[#cbs + 1] = all[i]; recs[#recs + 1] = all[i + 1] end\n"
        "local curs = {}\n"
        "if #cbs > 0 then curs = redis.call('HMGET', KEYS[2], unpack(cbs)) end\n"
        "local out = {}\n"
        "for i = 1, #cbs do\n"
        "  out[#out + 1] = cbs[i]; out[#out + 1] = recs[i]; out[#out + 1] = curs[i] or '0-0'\n"
        "end\n"
        "return out\n",
    /* KEYS[1] lock; ARGV: node, ttl ms. Renew ours, or take a free one. */
    [SS_LOCK].src =
        "local owner = redis.call('GET', KEYS[1])\n"
        "if owner == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end\n"
        "if owner then return 0 end\n"
        "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
        "return 1\n",
    /* ARGV: callback, record; only while the subscription exists */
    [SS_SET_RECORD].src =
        "if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return -1 end\n"
        "return redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])\n",
    /* ARGV: callback, id, callback, id...; a cursor is written only while
     * its subscription exists, so a late flush never revives a removed one */
    [SS_SAVE_CURSORS].src =
        "local n = 0\n"
        "for i = 1, #ARGV, 2 do\n"
        "  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then\n"
        "    redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]); n = n + 1\n"
        "  end\n"
        "end\n"
        "return n\n",
};

struct subs {
    struct backlog *b;
};

struct req {
    void *cb;
    void *ud;
};

struct subs *
subs_new(struct backlog *b)
{
    struct subs *s = rs_calloc(1, sizeof(*s));
    if (s != NULL) {
        s->b = b;
        script_init(scripts, SS_COUNT);
    }
    return s;
}

void
subs_free(struct subs *s)
{
    rs_free(s);
}

void
subs_on_ready(struct subs *s)
{
    script_load_all(backlog_redis(s->b), scripts, SS_COUNT);
}

/* ---------------------------------------------------------------- records */

char *
subs_record_json(const struct subs_record *r)
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
subs_record_parse(const char *json, struct subs_record *r)
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

/* ------------------------------------------------------------------ calls */

/* The keys a script may use, for topic (and host, for the last two). */
struct keys {
    char sub[256], cur[256], leases[128], subtopics[128], hosts[128],
         pend[256], phost[128 + SUBS_HOST_MAX];
    const char *v[7];
};

static int
keys_make(const struct subs *s, const char *topic, const char *host,
          struct keys *k)
{
    const char *p = backlog_prefix(s->b);
    if (!backlog_name_ok(topic) ||
        (host != NULL && strlen(host) > SUBS_HOST_MAX))
        return RS_EINVAL;
    snprintf(k->sub, sizeof(k->sub), "%ssub:%s", p, topic);
    snprintf(k->cur, sizeof(k->cur), "%scur:%s", p, topic);
    snprintf(k->leases, sizeof(k->leases), "%sleases", p);
    snprintf(k->subtopics, sizeof(k->subtopics), "%ssubtopics", p);
    snprintf(k->hosts, sizeof(k->hosts), "%shosts", p);
    k->v[0] = k->sub;
    k->v[1] = k->cur;
    k->v[2] = k->leases;
    k->v[3] = k->subtopics;
    k->v[4] = k->hosts;
    snprintf(k->pend, sizeof(k->pend), "%spend:%s", p, topic);
    snprintf(k->phost, sizeof(k->phost), "%sphost:%s", p,
             host != NULL ? host : "");
    k->v[5] = k->pend;
    k->v[6] = k->phost;
    return 0;
}

static struct req *
req_new(void *cb, void *ud)
{
    struct req *q = rs_malloc(sizeof(*q));
    if (q != NULL) {
        q->cb = cb;
        q->ud = ud;
    }
    return q;
}

static void
log_error_reply(const char *what, const redisReply *r)
{
    if (r != NULL && r->type == REDIS_REPLY_ERROR)
        rs_log(RS_LOG_ERROR, "%s: redis error: %.*s", what, (int)r->len, r->str);
}

/* Integer-answering calls. */
static void
on_int(void *ud, int rc, const redisReply *r)
{
    struct req *q = ud;
    subs_done_cb cb = (subs_done_cb)q->cb;
    long long v = 0;
    if (rc == 0) {
        if (r->type == REDIS_REPLY_INTEGER) {
            v = r->integer;
        } else if (r->type != REDIS_REPLY_STATUS) {
            log_error_reply("subscription store", r);
            rc = RS_EPROTO;
        }
    }
    if (cb != NULL)
        cb(q->ud, rc, v);
    rs_free(q);
}

/* host: the callback's host, for the scripts that reserve (7 keys); NULL
 * for the others (5 keys). */
static int
call(struct subs *s, enum subs_script sc, const char *topic, const char *host,
     int nargs, const char *const *args, rs_redis_reply_cb reply, void *cb,
     void *ud)
{
    struct keys k;
    if (keys_make(s, topic, host, &k) != 0)
        return RS_EINVAL;
    struct req *q = req_new(cb, ud);
    if (q == NULL)
        return RS_ENOMEM;
    int rc = script_call(backlog_redis(s->b), &scripts[sc], host != NULL ? 7 : 5,
                         k.v, nargs, args, NULL, reply, q);
    if (rc != 0)
        rs_free(q);
    return rc;
}

/* The lease member: "NAME CALLBACK" (names have no spaces). */
static char *
member(const char *topic, const char *callback)
{
    size_t n = strlen(topic) + strlen(callback) + 2;
    char *m = rs_malloc(n);
    if (m != NULL)
        snprintf(m, n, "%s %s", topic, callback);
    return m;
}

int
subs_put(struct subs *s, const char *topic, const char *callback,
         const char *json, uint64_t expires_ms, struct msg_id cursor,
         const char *host, const struct subs_caps *caps, subs_done_cb cb,
         void *ud)
{
    char exp[24], cur[MSG_ID_BUFSZ], tc[24], hc[24];
    char *m = member(topic, callback);
    if (m == NULL)
        return RS_ENOMEM;
    snprintf(exp, sizeof(exp), "%llu", (unsigned long long)expires_ms);
    snprintf(tc, sizeof(tc), "%lld", caps->per_topic);
    snprintf(hc, sizeof(hc), "%lld", caps->per_host);
    msg_id_format(cursor, cur);
    const char *args[9] = { callback, json, exp, cur, m, topic, host, tc, hc };
    int rc = call(s, SS_PUT, topic, host, 9, args, on_int, (void *)cb, ud);
    rs_free(m);
    return rc;
}

int
subs_reserve(struct subs *s, const char *topic, const char *callback,
             const char *host, const struct subs_caps *caps, subs_done_cb cb,
             void *ud)
{
    char tc[24], hc[24], hold[16];
    char *m = member(topic, callback);
    if (m == NULL)
        return RS_ENOMEM;
    snprintf(tc, sizeof(tc), "%lld", caps->per_topic);
    snprintf(hc, sizeof(hc), "%lld", caps->per_host);
    snprintf(hold, sizeof(hold), "%u", caps->hold_ms > 0 ? caps->hold_ms : 1);
    const char *args[6] = { callback, m, tc, hc, hold, host };
    int rc = call(s, SS_RESERVE, topic, host, 6, args, on_int, (void *)cb, ud);
    rs_free(m);
    return rc;
}

int
subs_release(struct subs *s, const char *topic, const char *callback,
             const char *host, subs_done_cb cb, void *ud)
{
    char *m = member(topic, callback);
    if (m == NULL)
        return RS_ENOMEM;
    const char *args[2] = { callback, m };
    int rc = call(s, SS_RELEASE, topic, host, 2, args, on_int, (void *)cb, ud);
    rs_free(m);
    return rc;
}

int
subs_remove(struct subs *s, const char *topic, const char *callback,
            const char *host, subs_done_cb cb, void *ud)
{
    char *m = member(topic, callback);
    if (m == NULL)
        return RS_ENOMEM;
    const char *args[4] = { callback, m, topic, host };
    int rc = call(s, SS_REMOVE, topic, NULL, 4, args, on_int, (void *)cb, ud);
    rs_free(m);
    return rc;
}

int
subs_set_record(struct subs *s, const char *topic, const char *callback,
                const char *json, subs_done_cb cb, void *ud)
{
    const char *args[2] = { callback, json };
    return call(s, SS_SET_RECORD, topic, NULL, 2, args, on_int, (void *)cb, ud);
}

static void
on_load(void *ud, int rc, const redisReply *r)
{
    struct req *q = ud;
    subs_load_cb cb = (subs_load_cb)q->cb;
    const char **cbs = NULL, **recs = NULL;
    struct msg_id *curs = NULL;
    size_t n = 0;
    if (rc == 0 && (r->type != REDIS_REPLY_ARRAY || r->elements % 3 != 0)) {
        log_error_reply("subscription load", r);
        rc = RS_EPROTO;
    }
    if (rc == 0 && r->elements > 0) {
        n = r->elements / 3;
        cbs = rs_calloc(n, sizeof(*cbs));
        recs = rs_calloc(n, sizeof(*recs));
        curs = rs_calloc(n, sizeof(*curs));
        if (cbs == NULL || recs == NULL || curs == NULL)
            rc = RS_ENOMEM;
        for (size_t i = 0; rc == 0 && i < n; i++) {
            const redisReply *c = r->element[3 * i], *j = r->element[3 * i + 1],
                             *k = r->element[3 * i + 2];
            if (c->type != REDIS_REPLY_STRING || j->type != REDIS_REPLY_STRING ||
                k->type != REDIS_REPLY_STRING ||
                msg_id_parse(k->str, (size_t)k->len, &curs[i]) != 0) {
                rc = RS_EPROTO;
                break;
            }
            cbs[i] = c->str;
            recs[i] = j->str;
        }
    }
    if (rc != 0)
        n = 0;
    cb(q->ud, rc, n, cbs, recs, curs);
    rs_free(cbs);
    rs_free(recs);
    rs_free(curs);
    rs_free(q);
}

int
subs_load(struct subs *s, const char *topic, subs_load_cb cb, void *ud)
{
    return call(s, SS_LOAD, topic, NULL, 0, NULL, on_load, (void *)cb, ud);
}

static void
on_names(void *ud, int rc, const redisReply *r)
{
    struct req *q = ud;
    subs_names_cb cb = (subs_names_cb)q->cb;
    const char **v = NULL;
    size_t n = 0;
    if (rc == 0 && r->type != REDIS_REPLY_ARRAY) {
        log_error_reply("subscription names", r);
        rc = RS_EPROTO;
    }
    if (rc == 0 && r->elements > 0) {
        v = rs_calloc(r->elements, sizeof(*v));
        if (v == NULL)
            rc = RS_ENOMEM;
        for (size_t i = 0; v != NULL && i < r->elements; i++)
            if (r->element[i]->type == REDIS_REPLY_STRING)
                v[n++] = r->element[i]->str;
    }
    cb(q->ud, rc, rc == 0 ? n : 0, v);
    rs_free(v);
    rs_free(q);
}

int
subs_topics(struct subs *s, subs_names_cb cb, void *ud)
{
    char key[128];
    snprintf(key, sizeof(key), "%ssubtopics", backlog_prefix(s->b));
    struct req *q = req_new((void *)cb, ud);
    if (q == NULL)
        return RS_ENOMEM;
    const char *argv[2] = { "SMEMBERS", key };
    int rc = rs_redis_cmd(backlog_redis(s->b), 0, on_names, q, 2, argv, NULL);
    if (rc != 0)
        rs_free(q);
    return rc;
}

int
subs_expired(struct subs *s, uint64_t now_ms, unsigned limit, subs_names_cb cb,
             void *ud)
{
    char key[128], max[24], lim[16];
    snprintf(key, sizeof(key), "%sleases", backlog_prefix(s->b));
    snprintf(max, sizeof(max), "%llu", (unsigned long long)now_ms);
    snprintf(lim, sizeof(lim), "%u", limit);
    struct req *q = req_new((void *)cb, ud);
    if (q == NULL)
        return RS_ENOMEM;
    const char *argv[7] = { "ZRANGEBYSCORE", key, "-inf", max, "LIMIT", "0", lim };
    int rc = rs_redis_cmd(backlog_redis(s->b), 0, on_names, q, 7, argv, NULL);
    if (rc != 0)
        rs_free(q);
    return rc;
}

int
subs_lock(struct subs *s, const char *topic, const char *node, unsigned ttl_ms,
          subs_done_cb cb, void *ud)
{
    char key[256], ttl[16];
    if (!backlog_name_ok(topic))
        return RS_EINVAL;
    snprintf(key, sizeof(key), "%slock:%s", backlog_prefix(s->b), topic);
    snprintf(ttl, sizeof(ttl), "%u", ttl_ms);
    struct req *q = req_new((void *)cb, ud);
    if (q == NULL)
        return RS_ENOMEM;
    const char *keys[1] = { key };
    const char *args[2] = { node, ttl };
    int rc = script_call(backlog_redis(s->b), &scripts[SS_LOCK], 1, keys, 2,
                         args, NULL, on_int, q);
    if (rc != 0)
        rs_free(q);
    return rc;
}

int
subs_save_cursors(struct subs *s, const char *topic, size_t n,
                  const char *const *callbacks, const struct msg_id *ids,
                  subs_done_cb cb, void *ud)
{
    int rc = RS_ENOMEM;
    if (n == 0)
        return RS_EINVAL;
    const char **args = rs_calloc(2 * n, sizeof(*args));
    char *idbuf = rs_malloc(n * MSG_ID_BUFSZ);
    if (args == NULL || idbuf == NULL)
        goto out;
    for (size_t i = 0; i < n; i++) {
        msg_id_format(ids[i], idbuf + i * MSG_ID_BUFSZ);
        args[2 * i] = callbacks[i];
        args[2 * i + 1] = idbuf + i * MSG_ID_BUFSZ;
    }
    rc = call(s, SS_SAVE_CURSORS, topic, NULL, (int)(2 * n), args, on_int,
              (void *)cb, ud);
out:
    rs_free(args);
    rs_free(idbuf);
    return rc;
}
