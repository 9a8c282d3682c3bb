/*
 * subs.c - the WebSub subscription store in Redis (subs.h). Keys, with the
 * hub prefix: sub:NAME (hash callback -> record), cur:NAME (hash callback
 * -> last delivered id), leases (zset "NAME CALLBACK" -> expiry ms),
 * subtopics (set of names with subscriptions), hosts (hash host -> count),
 * lock:NAME (the delivering node).
 */
#include <stdio.h>
#include <string.h>

#define RS_LOG_MODULE "subs"
#include "rs_alloc.h"
#include "rs_log.h"
#include "script.h"
#include "subs.h"

enum subs_script {
    SS_PUT,
    SS_REMOVE,
    SS_COUNTS,
    SS_LOAD,
    SS_LOCK,
    SS_SET_RECORD,
    SS_SAVE_CURSORS,
    SS_COUNT,
};

/* Keys in order: sub:NAME, cur:NAME, leases, subtopics, hosts. */
static struct script scripts[SS_COUNT] = {
    /* ARGV: callback, record, expiry, cursor, member, name, host */
    [SS_PUT].src =
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
    /* ARGV: callback, host */
    [SS_COUNTS].src =
        "return {redis.call('HLEN', KEYS[1]),\n"
        "        tonumber(redis.call('HGET', KEYS[5], ARGV[2]) or '0'),\n"
        "        redis.call('HEXISTS', KEYS[1], ARGV[1])}\n",
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

/* The five keys every script may use, for topic. */
struct keys {
    char sub[256], cur[256], leases[128], subtopics[128], hosts[128];
    const char *v[5];
};

static int
keys_make(const struct subs *s, const char *topic, struct keys *k)
{
    const char *p = backlog_prefix(s->b);
    if (!backlog_name_ok(topic))
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

static int
call(struct subs *s, enum subs_script sc, const char *topic, int nargs,
     const char *const *args, rs_redis_reply_cb reply, void *cb, void *ud)
{
    struct keys k;
    if (keys_make(s, topic, &k) != 0)
        return RS_EINVAL;
    struct req *q = req_new(cb, ud);
    if (q == NULL)
        return RS_ENOMEM;
    int rc = script_call(backlog_redis(s->b), &scripts[sc], 5, k.v, nargs, args,
                         NULL, reply, q);
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
         const char *host, subs_done_cb cb, void *ud)
{
    char exp[24], cur[MSG_ID_BUFSZ];
    char *m = member(topic, callback);
    if (m == NULL)
        return RS_ENOMEM;
    snprintf(exp, sizeof(exp), "%llu", (unsigned long long)expires_ms);
    msg_id_format(cursor, cur);
    const char *args[7] = { callback, json, exp, cur, m, topic, host };
    int rc = call(s, SS_PUT, topic, 7, args, on_int, (void *)cb, ud);
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
    int rc = call(s, SS_REMOVE, topic, 4, args, on_int, (void *)cb, ud);
    rs_free(m);
    return rc;
}

int
subs_set_record(struct subs *s, const char *topic, const char *callback,
                const char *json, subs_done_cb cb, void *ud)
{
    const char *args[2] = { callback, json };
    return call(s, SS_SET_RECORD, topic, 2, args, on_int, (void *)cb, ud);
}

static void
on_counts(void *ud, int rc, const redisReply *r)
{
    struct req *q = ud;
    subs_counts_cb cb = (subs_counts_cb)q->cb;
    long long t = 0, h = 0;
    bool exists = false;
    if (rc == 0) {
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
            r->element[0]->type == REDIS_REPLY_INTEGER &&
            r->element[1]->type == REDIS_REPLY_INTEGER &&
            r->element[2]->type == REDIS_REPLY_INTEGER) {
            t = r->element[0]->integer;
            h = r->element[1]->integer;
            exists = r->element[2]->integer == 1;
        } else {
            log_error_reply("subscription counts", r);
            rc = RS_EPROTO;
        }
    }
    cb(q->ud, rc, t, h, exists);
    rs_free(q);
}

int
subs_counts(struct subs *s, const char *topic, const char *callback,
            const char *host, subs_counts_cb cb, void *ud)
{
    const char *args[2] = { callback, host };
    return call(s, SS_COUNTS, topic, 2, args, on_counts, (void *)cb, ud);
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
    return call(s, SS_LOAD, topic, 0, NULL, on_load, (void *)cb, ud);
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
    rc = call(s, SS_SAVE_CURSORS, topic, (int)(2 * n), args, on_int, (void *)cb, ud);
out:
    rs_free(args);
    rs_free(idbuf);
    return rc;
}
