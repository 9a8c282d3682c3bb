/*
 * backlog.c - the hub's Redis layout and operations (backlog.h). Appends,
 * age trims, replay pages and stream info are Lua scripts, loaded once per
 * connection and called by SHA, so that the trim mark is exact and a page
 * and its mark are read atomically (docs/protocol.md 7). Three links:
 * publishes (appends, topic claims) have one of their own, so an XADD never
 * waits in a pipeline behind replay pages or WebSub work on the command
 * link; the blocking tail read has the third. With --ack-replicas N, an
 * append is answered only after WAIT N on the publish link (group commit:
 * docs/internals/failover.md).
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RS_LOG_MODULE "backlog"
#include "ack.h"
#include "backlog.h"
#include "rs_alloc.h"
#include "rs_backoff.h"
#include "rs_log.h"
#include "rs_pubid.h"
#include "rs_time.h"
#include "script.h"

#define BACKLOG_SLACK "64"   /* trim in batches: entries over the bound */

/* A CLIENT UNBLOCK that found the tail read not blocked while that read is
 * in flight is sent again: 1 ms, doubling to 64 ms (backlog_tail_interrupt). */
static const struct rs_backoff BACKLOG_UNBLOCK_AGAIN = { .first_ms = 1,
                                                         .max_ms = 64 };

enum backlog_script {
    SC_APPEND,
    SC_APPEND_ONCE,
    SC_PAGE,
    SC_INFO,
    SC_TRIM_AGE,
    SC_TOPIC_CLAIM,
    SC_COUNT,
};

/* The append: XADD, then, past the bound plus the slack, trim down to the
 * bound and record the newest id trimmed (ARGV[1] body, ARGV[2] content
 * type, ARGV[3] bound, ARGV[4] slack; the script's local `known`: the
 * newest id this node knows the stream held, "" for none). Leaves the new
 * id in `id`. A stream that Redis has not (nor its trim mark) while this
 * node knows it held entries was lost by Redis (restarted without
 * persistence, flushed): `known` becomes its trim mark, so that a client
 * resuming with a since= of the lost backlog is told the gap (4001), not
 * given the entries after it as if nothing were missing; and in the trim
 * log, so that a live reader whose cursor is below it (on a node that
 * attached it to the empty stream "as now") is closed 4001 at the next
 * entry. A new topic has no known id: nothing to mark, and its late
 * starters are not closed. */
#define BACKLOG_LUA_XADD \
    "if known ~= '' and redis.call('EXISTS', KEYS[1]) == 0 and\n" \
    "   redis.call('EXISTS', KEYS[2]) == 0 then\n" \
    "  redis.call('SET', KEYS[2], known)\n" \
    "  redis.call('LPUSH', KEYS[3], known)\n" \
    "end\n" \
    "local id = redis.call('XADD', KEYS[1], '*', 'b', ARGV[1], 'c', ARGV[2])\n" \
    "local max = tonumber(ARGV[3])\n" \
    "if max > 0 then\n" \
    "  local len = redis.call('XLEN', KEYS[1])\n" \
    "  if len > max + tonumber(ARGV[4]) then\n" \
    "    local cut = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', len - max + 1)\n" \
    "    redis.call('XTRIM', KEYS[1], 'MINID', cut[#cut][1])\n" \
    "    redis.call('SET', KEYS[2], cut[#cut - 1][1])\n" \
    "    redis.call('LPUSH', KEYS[3], cut[#cut - 1][1])\n" \
    "    redis.call('LTRIM', KEYS[3], 0, 31)\n" \
    "  end\n" \
    "end\n"

/* KEYS[1] stream, KEYS[2] trim mark, KEYS[3] trim log (the last 32 trim
 * points, newest first: the live gap check needs more than the newest).
 * Hashed once in backlog_new. */
static struct script scripts[SC_COUNT] = {
    [SC_APPEND].src = "local known = ARGV[5]\n" BACKLOG_LUA_XADD "return id\n",
    /* SC_APPEND behind the publish-id check (docs/protocol.md 3). KEYS[4]
     * hash: KEY -> "SEQ ID", the highest SEQ stored for KEY and the id of
     * the entry that stored it; KEYS[5] sorted set: KEY -> its last use,
     * a counter per topic, so that the least recently used KEY is found
     * in O(log n) when the hash is over its cap (a hash has no order).
     * ARGV[5] KEY, ARGV[6] SEQ (decimal without leading zeros, compared as
     * text: Lua's numbers are doubles, exact only to 2^53), ARGV[7] cap,
     * ARGV[8] the known id (BACKLOG_LUA_XADD).
     * Returns {1, id} when stored, {0, id of the earlier one} when a
     * duplicate; both touch KEY's use. */
    [SC_APPEND_ONCE].src =
        "local key, seq, known = ARGV[5], ARGV[6], ARGV[8]\n"
        "local top = redis.call('ZREVRANGE', KEYS[5], 0, 0, 'WITHSCORES')\n"
        "local use = 1\n"
        "if #top > 0 then use = tonumber(top[2]) + 1 end\n"
        "local cur = redis.call('HGET', KEYS[4], key)\n"
        "if cur then\n"
        "  local sp = string.find(cur, ' ', 1, true)\n"
        "  local hs = string.sub(cur, 1, sp - 1)\n"
        "  if #seq < #hs or (#seq == #hs and seq <= hs) then\n"
        "    redis.call('ZADD', KEYS[5], use, key)\n"
        "    return {0, string.sub(cur, sp + 1)}\n"
        "  end\n"
        "end\n"
        BACKLOG_LUA_XADD
        "redis.call('HSET', KEYS[4], key, seq .. ' ' .. id)\n"
        "redis.call('ZADD', KEYS[5], use, key)\n"
        "if not cur then\n"
        "  local over = redis.call('ZCARD', KEYS[5]) - tonumber(ARGV[7])\n"
        "  if over > 0 then\n"
        "    local old = redis.call('ZPOPMIN', KEYS[5], over)\n"
        "    for i = 1, #old, 2 do redis.call('HDEL', KEYS[4], old[i]) end\n"
        "  end\n"
        "end\n"
        "return {1, id}\n",
    /* A page is bounded in bytes as well as entries (one entry at least):
     * Redis cannot count bytes in an XRANGE, and 256 entries of a backlog
     * of large notifications made each call copy hundreds of megabytes
     * and hold Redis for most of a second (issue 12). So the script reads
     * one entry at a time and stops before the entry that would pass the
     * budget: the work of one call is the budget plus one entry, never
     * the whole backlog. Reading one at a time costs about 1 ms for 256
     * small entries, against 0.6 ms for one XRANGE (measured on 7.0). */
    [SC_PAGE].src =
        "local out, bytes, start = {}, 0, ARGV[1]\n"
        "local max, budget = tonumber(ARGV[2]), tonumber(ARGV[3])\n"
        "while #out < max do\n"
        "  local r = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', 1)\n"
        "  if #r == 0 then break end\n"
        "  local e, sz = r[1], 0\n"
        "  for k = 2, #e[2], 2 do sz = sz + #e[2][k] end\n"
        "  if #out > 0 and bytes + sz > budget then break end\n"
        "  out[#out + 1] = e\n"
        "  bytes = bytes + sz\n"
        "  start = '(' .. e[1]\n"
        "end\n"
        "local t = redis.call('GET', KEYS[2]) or '0-0'\n"
        "return {t, out}\n",
    [SC_INFO].src =
        "local t = redis.call('GET', KEYS[2]) or '0-0'\n"
        "local ok, info = pcall(redis.call, 'XINFO', 'STREAM', KEYS[1])\n"
        "if not ok then return {0, '', '', '0-0', t} end\n"
        "local len, first, last, gen = 0, '', '', '0-0'\n"
        "for i = 1, #info, 2 do\n"
        "  local k, v = info[i], info[i + 1]\n"
        "  if k == 'length' then len = v\n"
        "  elseif k == 'last-generated-id' then gen = v\n"
        "  elseif k == 'first-entry' and v then first = v[1]\n"
        "  elseif k == 'last-entry' and v then last = v[1] end\n"
        "end\n"
        "return {len, first, last, gen, t}\n",
    [SC_TRIM_AGE].src =
        "local before = redis.call('XREVRANGE', KEYS[1], '(' .. ARGV[1], '-', 'COUNT', 1)\n"
        "if #before > 0 then\n"
        "  redis.call('XTRIM', KEYS[1], 'MINID', ARGV[1])\n"
        "  redis.call('SET', KEYS[2], before[1][1])\n"
        "  redis.call('LPUSH', KEYS[3], before[1][1])\n"
        "  redis.call('LTRIM', KEYS[3], 0, 31)\n"
        "end\n"
        "return #before\n",
    /* KEYS[1] topic registry; the first node to publish on a topic fixes
     * its record, every other node reads it back. */
    [SC_TOPIC_CLAIM].src =
        "local v = redis.call('HGET', KEYS[1], ARGV[1])\n"
        "if v then return v end\n"
        "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])\n"
        "return ARGV[2]\n",
};

/* An append Redis answered, waiting for the WAIT that confirms it
 * (--ack-replicas > 0). */
struct ackwait {
    struct ackwait *next;
    bool once;                    /* backlog_append_once_cb, else
                                     backlog_append_cb */
    void *cb;
    void *ud;
    struct msg_id id;
    bool duplicate;
    uint64_t gen;                 /* the publish connection that answered */
};

struct backlog {
    struct backlog_opts o;
    char *prefix;
    struct rs_redis *cmd;
    struct rs_redis *pub;         /* appends and topic claims only */
    struct rs_redis *tail;
    size_t page_bytes;            /* default page budget (bytes) */
    long long tail_client_id;     /* for CLIENT UNBLOCK; 0 = unknown */
    bool tail_blocked;            /* a tail read is in flight: sent, its
                                     answer not yet here */
    uint64_t tail_reads;          /* tail reads sent; the one in flight is
                                     number tail_reads */
    uint64_t unblock_read;        /* the read an interrupt is owed to (0:
                                     none); owed while it is in flight */
    bool unblock_inflight;        /* a CLIENT UNBLOCK awaits its answer */
    unsigned unblock_tries;       /* ...answers "not blocked" in a row */
    struct event *ev_unblock;     /* sends the CLIENT UNBLOCK again */
    /* --ack-replicas: appends answered, waiting for a WAIT (FIFO). A WAIT
     * confirms the writes sent before it on its connection, so each
     * waiter remembers the connection (pub_gen, counted per READY) that
     * answered it; one on an older connection can no longer be
     * confirmed. */
    struct ackwait *aw_head, *aw_tail;
    bool wait_inflight;
    uint64_t pub_gen;
    uint64_t wait_gen;            /* the connection of the WAIT in flight */
    struct timespec wait_sent;
    long long ack_count;          /* the last WAIT's replicas; -1 */
    char append_err[256];         /* backlog_append_error */
    /* backlog_refusing: Redis's words when it last refused an append,
     * and when (monotonic us); refused_at 0 once an append succeeded */
    char refused_err[256];
    int64_t refused_at;
    /* backlog_now_ms: Redis's TIME minus ours (us), measured at the
     * middle of the TIME's round trip */
    int64_t clock_offset_us;
    bool clock_inflight;
    rs_time_t clock_sent;         /* ours, when the TIME in flight went */
    int64_t clock_warned_s;       /* the offset (s) last logged; 0: none */
};

/* One call in flight: what to call back and what to keep until then. */
struct req {
    struct backlog *b;
    void *cb;
    void *ud;
};

/* ---------------------------------------------------------------- helpers */

static struct req *
req_new(struct backlog *b, void *cb, void *ud)
{
    struct req *r = rs_malloc(sizeof(*r));
    if (r != NULL) {
        r->b = b;
        r->cb = cb;
        r->ud = ud;
    }
    return r;
}

bool
backlog_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > BACKLOG_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* prefix + kind + name into buf (BACKLOG_NAME_MAX + prefix + 3). */
static int
backlog_key(const struct backlog *b, char kind, const char *name, char *buf,
            size_t bufsz)
{
    int n = snprintf(buf, bufsz, "%s%c:%s", b->prefix, kind, name);
    return (n > 0 && (size_t)n < bufsz) ? 0 : RS_EINVAL;
}

static bool
reply_id(const redisReply *r, struct msg_id *out)
{
    if (r == NULL || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS))
        return false;
    if (r->len == 0) {
        out->ms = out->seq = 0;
        return true;
    }
    return msg_id_parse(r->str, (size_t)r->len, out) == 0;
}

/* Parse one stream entry [id, [field, value, ...]]. */
static bool
reply_entry(const redisReply *r, struct backlog_entry *e)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        !reply_id(r->element[0], &e->id) ||
        r->element[1]->type != REDIS_REPLY_ARRAY)
        return false;
    const redisReply *f = r->element[1];
    e->body = NULL;
    e->len = 0;
    e->ctype = "";
    e->ctype_len = 0;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        const redisReply *k = f->element[i], *v = f->element[i + 1];
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
            continue;
        if (k->len == 1 && k->str[0] == 'b') {
            e->body = v->str;
            e->len = (size_t)v->len;
        } else if (k->len == 1 && k->str[0] == 'c') {
            e->ctype = v->str;
            e->ctype_len = (size_t)v->len;
        }
    }
    return e->body != NULL;
}

/* Parse an array of entries into a new array (caller frees). */
static int
reply_entries(const redisReply *r, struct backlog_entry **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (r->type != REDIS_REPLY_ARRAY)
        return RS_EPROTO;
    if (r->elements == 0)
        return 0;
    struct backlog_entry *v = rs_calloc(r->elements, sizeof(*v));
    if (v == NULL)
        return RS_ENOMEM;
    for (size_t i = 0; i < r->elements; i++) {
        if (!reply_entry(r->element[i], &v[i])) {
            rs_free(v);
            return RS_EPROTO;
        }
    }
    *out = v;
    *n = r->elements;
    return 0;
}

static void
reply_log_error(const char *what, const redisReply *r)
{
    if (r != NULL && r->type == REDIS_REPLY_ERROR)
        rs_log(RS_LOG_ERROR, "%s: redis error: %.*s", what, (int)r->len, r->str);
}

/* An append answered otherwise than with an id: logged, and Redis' words
 * kept for the publisher's answer. */
static void
append_refused(struct backlog *b, const redisReply *r)
{
    reply_log_error("append", r);
    if (r != NULL && r->type == REDIS_REPLY_ERROR) {
        snprintf(b->append_err, sizeof(b->append_err), "%.*s",
                 (int)r->len, r->str);
        memcpy(b->refused_err, b->append_err, sizeof(b->refused_err));
        b->refused_at = rs_time_mono_us();
    }
}

const char *
backlog_append_error(const struct backlog *b)
{
    return b->append_err;
}

const char *
backlog_refusing(const struct backlog *b)
{
    if (b->refused_at == 0 ||
        rs_time_mono_us() - b->refused_at > BACKLOG_REFUSING_US)
        return NULL;
    return b->refused_err;
}

/* ----------------------------------------------------------- script calls */

/* The three keys of a channel's scripts. */
static int
backlog_eval(struct backlog *b, struct rs_redis *link, enum backlog_script sc,
             const char *chan, int nargs, const char **args,
             const size_t *arglens, rs_redis_reply_cb cb, void *ud)
{
    char ks[256], kt[256], kl[256];
    if (backlog_key(b, 's', chan, ks, sizeof(ks)) != 0 ||
        backlog_key(b, 't', chan, kt, sizeof(kt)) != 0 ||
        snprintf(kl, sizeof(kl), "%stl:%s", b->prefix, chan) >= (int)sizeof(kl))
        return RS_EINVAL;
    const char *keys[3] = { ks, kt, kl };
    return script_call(link, &scripts[sc], 3, keys, nargs, args, arglens,
                       cb, ud);
}

/* -------------------------------------------------------------- lifecycle */

static void on_unblock_again(evutil_socket_t fd, short what, void *arg);

static void
on_time(void *ud, int rc, const redisReply *r)
{
    struct backlog *b = ud;
    if (rc == RS_ECANCELED)
        return;
    b->clock_inflight = false;
    if (rc != 0 || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return;
    rs_time_t back = rs_time_now();
    int64_t redis_us = strtoll(r->element[0]->str, NULL, 10) * 1000000 +
                       strtoll(r->element[1]->str, NULL, 10);
    b->clock_offset_us = redis_us - (b->clock_sent + (back - b->clock_sent) / 2);
    /* Said when it first passes a second, and again when it moves by a
     * second more: an operator's clue, not a fault of ours. */
    int64_t off_s = b->clock_offset_us / 1000000;
    if (off_s != 0 && off_s != b->clock_warned_s) {
        char o[32];
        snprintf(o, sizeof(o), "%.3f", (double)b->clock_offset_us / 1e6);
        rs_log_kv(RS_LOG_WARN, "this node's clock differs from Redis's: "
                  "backlog ages and leases go by Redis's", "redis_minus_ours_s",
                  o, "redis", rs_redis_addr(b->cmd), NULL);
    }
    b->clock_warned_s = off_s;
}

void
backlog_clock_sync(struct backlog *b)
{
    if (b->clock_inflight || rs_redis_state(b->cmd) != RS_REDIS_READY)
        return;
    const char *argv[1] = { "TIME" };
    b->clock_sent = rs_time_now();
    if (rs_redis_cmd(b->cmd, 0, on_time, b, 1, argv, NULL) == 0)
        b->clock_inflight = true;
}

uint64_t
backlog_now_ms(const struct backlog *b)
{
    return (uint64_t)((rs_time_now() + b->clock_offset_us) / 1000);
}

int64_t
backlog_clock_offset_ms(const struct backlog *b)
{
    return b->clock_offset_us / 1000;
}

static void
on_cmd_state(void *ud, enum rs_redis_state st, const char *errstr)
{
    struct backlog *b = ud;
    if (st == RS_REDIS_READY) {
        script_load_all(b->cmd, scripts, SC_COUNT);
        b->clock_inflight = false;    /* a TIME sent before is lost */
        backlog_clock_sync(b);
    }
    if (b->o.on_state != NULL)
        b->o.on_state(b->o.ud, "command", st, errstr);
}

static void
on_pub_state(void *ud, enum rs_redis_state st, const char *errstr)
{
    struct backlog *b = ud;
    if (st == RS_REDIS_READY) {
        b->pub_gen++;
        script_load_all(b->pub, scripts, SC_COUNT);
    }
    if (b->o.on_state != NULL)
        b->o.on_state(b->o.ud, "publish", st, errstr);
}

static void
on_tail_client_id(void *ud, int rc, const redisReply *r)
{
    struct backlog *b = ud;
    if (rc == 0 && r->type == REDIS_REPLY_INTEGER)
        b->tail_client_id = r->integer;
}

static void
on_tail_state(void *ud, enum rs_redis_state st, const char *errstr)
{
    struct backlog *b = ud;
    b->tail_blocked = false;
    if (st == RS_REDIS_READY) {
        b->tail_client_id = 0;
        const char *argv[2] = { "CLIENT", "ID" };
        if (rs_redis_cmd(b->tail, 0, on_tail_client_id, b, 2, argv, NULL) != 0)
            rs_log(RS_LOG_WARN, "cannot queue CLIENT ID");
    }
    if (b->o.on_state != NULL)
        b->o.on_state(b->o.ud, "tail", st, errstr);
}

struct backlog *
backlog_new(struct event_base *base, const struct backlog_opts *o,
            const char **err)
{
    struct backlog *b = rs_calloc(1, sizeof(*b));
    *err = "out of memory";
    if (b == NULL)
        return NULL;
    b->o = *o;
    b->ack_count = -1;
    b->page_bytes = o->page_bytes != 0 ? o->page_bytes : BACKLOG_PAGE_BYTES;
    b->prefix = rs_strdup(o->prefix != NULL ? o->prefix : "rshub:");
    if (b->prefix == NULL)
        goto fail;
    script_init(scripts, SC_COUNT);   /* same values every time */
    struct rs_redis_opts ro = {
        .url = o->redis_url,
        .client_name = "rshub",
        .command_timeout_ms = o->command_timeout_ms ? o->command_timeout_ms : 2000,
        .on_state = on_cmd_state,
        .ud = b,
    };
    b->cmd = rs_redis_new(base, &ro, err);
    if (b->cmd == NULL)
        goto fail;
    ro.client_name = "rshub-publish";
    ro.on_state = on_pub_state;
    /* an append sent while a WAIT blocks the link runs when it returns:
     * its answer may take the WAIT's timeout on top of its own */
    if (o->ack_replicas > 0)
        ro.command_timeout_ms += o->ack_timeout_ms;
    b->pub = rs_redis_new(base, &ro, err);
    if (b->pub == NULL)
        goto fail;
    ro.command_timeout_ms = o->command_timeout_ms ? o->command_timeout_ms : 2000;
    ro.client_name = "rshub-tail";
    ro.on_state = on_tail_state;
    b->tail = rs_redis_new(base, &ro, err);
    if (b->tail == NULL)
        goto fail;
    *err = "out of memory";
    b->ev_unblock = evtimer_new(base, on_unblock_again, b);
    if (b->ev_unblock == NULL)
        goto fail;
    *err = NULL;
    return b;
fail:
    backlog_free(b);
    return NULL;
}

void
backlog_free(struct backlog *b)
{
    if (b == NULL)
        return;
    rs_redis_free(b->tail);
    rs_redis_free(b->pub);      /* a WAIT in flight answers its waiters */
    rs_redis_free(b->cmd);
    if (b->ev_unblock != NULL)
        event_free(b->ev_unblock);
    rs_free(b->prefix);
    rs_free(b);
}

bool
backlog_ready(const struct backlog *b)
{
    return rs_redis_state(b->cmd) == RS_REDIS_READY &&
           rs_redis_state(b->pub) == RS_REDIS_READY;
}

long long
backlog_ack_count(const struct backlog *b)
{
    return b->ack_count;
}

const char *
backlog_addr(const struct backlog *b)
{
    return rs_redis_addr(b->pub);
}

const char *
backlog_cmd_addr(const struct backlog *b)
{
    return rs_redis_addr(b->cmd);
}

const char *
backlog_tail_addr(const struct backlog *b)
{
    return rs_redis_addr(b->tail);
}

bool
backlog_tail_ready(const struct backlog *b)
{
    return rs_redis_state(b->tail) == RS_REDIS_READY;
}

void
backlog_stats(const struct backlog *b, struct rs_redis_stats *out)
{
    rs_redis_stats(b->cmd, out);
}

void
backlog_publish_stats(const struct backlog *b, struct rs_redis_stats *out)
{
    rs_redis_stats(b->pub, out);
}

struct rs_redis *
backlog_redis(struct backlog *b)
{
    return b->cmd;
}

const char *
backlog_prefix(const struct backlog *b)
{
    return b->prefix;
}

/* ----------------------------------------------------- replicated acks */

static void
ackwait_answer(struct ackwait *w, int rc)
{
    if (w->once)
        ((backlog_append_once_cb)w->cb)(w->ud, rc, w->id, w->duplicate);
    else
        ((backlog_append_cb)w->cb)(w->ud, rc, w->id);
    rs_free(w);
}

/* Answer every waiter: rc for those of connection gen, RS_EIO for those
 * of an older one (gen 0: rc for all). The list is detached first: an
 * answer may not append again, but nothing here depends on that. */
static void
ackwait_answer_all(struct backlog *b, uint64_t gen, int rc)
{
    struct ackwait *w = b->aw_head;
    b->aw_head = b->aw_tail = NULL;
    while (w != NULL) {
        struct ackwait *next = w->next;
        ackwait_answer(w, gen == 0 || w->gen == gen ? rc : RS_EIO);
        w = next;
    }
}

static void wait_send(struct backlog *b);

/* The WAIT's answer. Every append whose reply came before it on its
 * connection ran before it in Redis (one connection's commands run in
 * order), so its count covers all of them: group commit. */
static void
on_wait(void *ud, int rc, const redisReply *r)
{
    struct backlog *b = ud;
    struct timespec now;
    long long got = -1;

    b->wait_inflight = false;
    if (rc == RS_ECANCELED) {
        ackwait_answer_all(b, 0, rc);
        return;
    }
    if (rc == 0 && r->type == REDIS_REPLY_INTEGER) {
        got = r->integer;
    } else if (rc == 0) {
        reply_log_error("WAIT", r);
        rc = RS_EPROTO;
    }
    b->ack_count = got;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (b->o.on_wait != NULL)
        b->o.on_wait(b->o.ud, "publish", rc, got,
                     (double)(now.tv_sec - b->wait_sent.tv_sec) +
                     (double)(now.tv_nsec - b->wait_sent.tv_nsec) / 1e9);
    if (rc == 0 && got < (long long)b->o.ack_replicas)
        rc = ACK_ESHORT;
    ackwait_answer_all(b, b->wait_gen, rc);
    wait_send(b);
}

/* One WAIT in flight at a time; appends answered meanwhile wait for the
 * next. (They could not be covered by a WAIT sent before them anyway.) */
static void
wait_send(struct backlog *b)
{
    char n[16], tmo[16];
    const char *argv[3] = { "WAIT", n, tmo };

    if (b->wait_inflight || b->aw_head == NULL)
        return;
    snprintf(n, sizeof(n), "%u", b->o.ack_replicas);
    snprintf(tmo, sizeof(tmo), "%u", b->o.ack_timeout_ms);
    /* the link's own timeout must not cut a WAIT that is still within
     * its own */
    unsigned ctl = b->o.command_timeout_ms ? b->o.command_timeout_ms : 2000;
    int rc = rs_redis_cmd(b->pub, b->o.ack_timeout_ms + ctl, on_wait, b, 3,
                          argv, NULL);
    if (rc != 0) {
        /* stored, and nothing can confirm it on this connection */
        ackwait_answer_all(b, 0, RS_EIO);
        return;
    }
    b->wait_inflight = true;
    b->wait_gen = b->pub_gen;
    clock_gettime(CLOCK_MONOTONIC, &b->wait_sent);
}

/* An append Redis answered: straight to its callback, or (--ack-replicas)
 * behind the next WAIT. Takes q. */
static void
append_answered(struct backlog *b, struct req *q, bool once, int rc,
                struct msg_id id, bool dup)
{
    if (rc == 0 && b->o.ack_replicas > 0) {
        struct ackwait *w = rs_calloc(1, sizeof(*w));
        if (w != NULL) {
            w->once = once;
            w->cb = q->cb;
            w->ud = q->ud;
            w->id = id;
            w->duplicate = dup;
            w->gen = b->pub_gen;
            if (b->aw_tail != NULL)
                b->aw_tail->next = w;
            else
                b->aw_head = w;
            b->aw_tail = w;
            rs_free(q);
            wait_send(b);
            return;
        }
        rc = RS_ENOMEM;   /* stored; cannot be confirmed: outcome unknown */
    }
    if (once)
        ((backlog_append_once_cb)q->cb)(q->ud, rc, id, dup);
    else
        ((backlog_append_cb)q->cb)(q->ud, rc, id);
    rs_free(q);
}

/* ----------------------------------------------------------------- append */

/* The owner's newest id of chan, as the scripts' `known` ("" for none). */
static void
backlog_known(const struct backlog *b, const char *chan,
              char buf[MSG_ID_BUFSZ])
{
    struct msg_id id = { 0, 0 };

    buf[0] = '\0';
    if (b->o.known != NULL)
        id = b->o.known(b->o.ud, chan);
    if (!msg_id_is_zero(id))
        msg_id_format(id, buf);
}

static void
on_append(void *ud, int rc, const redisReply *r)
{
    struct req *q = ud;
    struct msg_id id = { 0, 0 };
    q->b->append_err[0] = '\0';    /* this append's, or none */
    if (rc == 0 && !reply_id(r, &id)) {
        append_refused(q->b, r);
        rc = RS_EPROTO;
    } else if (rc == 0) {
        q->b->refused_at = 0;
    }
    append_answered(q->b, q, false, rc, id, false);
}

int
backlog_append(struct backlog *b, const char *chan, const char *body, size_t len,
               const char *ctype, uint64_t max_entries, backlog_append_cb cb,
               void *ud)
{
    char max[24];
    if (!backlog_name_ok(chan))
        return RS_EINVAL;
    snprintf(max, sizeof(max), "%llu", (unsigned long long)max_entries);
    struct req *q = req_new(b, (void *)cb, ud);
    if (q == NULL)
        return RS_ENOMEM;
    char known[MSG_ID_BUFSZ];
    backlog_known(b, chan, known);
    const char *args[5] = { body, ctype, max, BACKLOG_SLACK, known };
    size_t lens[5] = { len, strlen(ctype), strlen(max), strlen(BACKLOG_SLACK),
                       strlen(known) };
    int rc = backlog_eval(b, b->pub, SC_APPEND, chan, 5, args, lens,
                          on_append, q);
    if (rc != 0)
        rs_free(q);
    return rc;
}

/* ---------------------------------------------------------- append once */

static void
on_append_once(void *ud, int rc, const redisReply *r)
{
    struct req *q = ud;
    struct msg_id id = { 0, 0 };
    bool dup = false;
    q->b->append_err[0] = '\0';    /* this append's, or none */
    if (rc == 0) {
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_INTEGER ||
            !reply_id(r->element[1], &id) || msg_id_is_zero(id)) {
            append_refused(q->b, r);
            rc = RS_EPROTO;
        } else {
            dup = r->element[0]->integer == 0;
            q->b->refused_at = 0;
        }
    }
    /* a duplicate waits too: the entry it names may be one a WAIT never
     * confirmed, and the script's own write comes after it */
    append_answered(q->b, q, true, rc, id, dup);
}

int
backlog_append_once(struct backlog *b, const char *chan, const char *body,
                    size_t len, const char *ctype, uint64_t max_entries,
                    const char *key, uint64_t seq, uint64_t max_keys,
                    backlog_append_once_cb cb, void *ud)
{
    char max[24], sq[24], cap[24];
    char ks[256], kt[256], kl[256], kh[256], ku[256];
    if (!backlog_name_ok(chan) || !rs_pubid_key_ok(key) || seq == 0 ||
        seq > RS_PUBID_SEQ_MAX || max_keys == 0)
        return RS_EINVAL;
    if (backlog_key(b, 's', chan, ks, sizeof(ks)) != 0 ||
        backlog_key(b, 't', chan, kt, sizeof(kt)) != 0 ||
        snprintf(kl, sizeof(kl), "%stl:%s", b->prefix, chan) >= (int)sizeof(kl) ||
        snprintf(kh, sizeof(kh), "%spid:%s", b->prefix, chan) >= (int)sizeof(kh) ||
        snprintf(ku, sizeof(ku), "%spidu:%s", b->prefix, chan) >= (int)sizeof(ku))
        return RS_EINVAL;
    snprintf(max, sizeof(max), "%llu", (unsigned long long)max_entries);
    /* no leading zeros: the script compares SEQs as text */
    snprintf(sq, sizeof(sq), "%llu", (unsigned long long)seq);
    snprintf(cap, sizeof(cap), "%llu", (unsigned long long)max_keys);
    struct req *q = req_new(b, (void *)cb, ud);
    if (q == NULL)
        return RS_ENOMEM;
    char known[MSG_ID_BUFSZ];
    backlog_known(b, chan, known);
    const char *keys[5] = { ks, kt, kl, kh, ku };
    const char *args[8] = { body, ctype, max, BACKLOG_SLACK, key, sq, cap,
                            known };
    size_t lens[8] = { len, strlen(ctype), strlen(max), strlen(BACKLOG_SLACK),
                       strlen(key), strlen(sq), strlen(cap), strlen(known) };
    int rc = script_call(b->pub, &scripts[SC_APPEND_ONCE], 5, keys, 8, args,
                         lens, on_append_once, q);
    if (rc != 0)
        rs_free(q);
    return rc;
}

/* ------------------------------------------------------------------- page */

static void
on_page(void *ud, int rc, const redisReply *r)
{
    struct req *q = ud;
    backlog_page_cb cb = (backlog_page_cb)q->cb;
    struct msg_id mark = { 0, 0 };
    struct backlog_entry *e = NULL;
    size_t n = 0;
    if (rc == 0) {
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            !reply_id(r->element[0], &mark)) {
            reply_log_error("page", r);
            rc = RS_EPROTO;
        } else {
            rc = reply_entries(r->element[1], &e, &n);
        }
    }
    cb(q->ud, rc, mark, e, n);
    rs_free(e);
    rs_free(q);
}

int
backlog_page(struct backlog *b, const char *chan, struct msg_id after,
             unsigned count, backlog_page_cb cb, void *ud)
{
    return backlog_page_bytes(b, chan, after, count, 0, cb, ud);
}

int
backlog_page_bytes(struct backlog *b, const char *chan, struct msg_id after,
                   unsigned count, size_t max_bytes, backlog_page_cb cb,
                   void *ud)
{
    char start[MSG_ID_BUFSZ + 1], cnt[16], budget[24];
    if (!backlog_name_ok(chan) || count == 0)
        return RS_EINVAL;
    if (msg_id_is_zero(after)) {
        snprintf(start, sizeof(start), "-");
    } else {
        start[0] = '(';
        msg_id_format(after, start + 1);
    }
    snprintf(cnt, sizeof(cnt), "%u", count);
    snprintf(budget, sizeof(budget), "%zu",
             max_bytes != 0 ? max_bytes : b->page_bytes);
    struct req *q = req_new(b, (void *)cb, ud);
    if (q == NULL)
        return RS_ENOMEM;
    const char *args[3] = { start, cnt, budget };
    int rc = backlog_eval(b, b->cmd, SC_PAGE, chan, 3, args, NULL, on_page, q);
    if (rc != 0)
        rs_free(q);
    return rc;
}

/* ------------------------------------------------------------------- info */

static void
on_info(void *ud, int rc, const redisReply *r)
{
    struct req *q = ud;
    backlog_info_cb cb = (backlog_info_cb)q->cb;
    struct backlog_info info;
    memset(&info, 0, sizeof(info));
    if (rc == 0) {
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 5 ||
            r->element[0]->type != REDIS_REPLY_INTEGER ||
            !reply_id(r->element[1], &info.first) ||
            !reply_id(r->element[2], &info.last) ||
            !reply_id(r->element[3], &info.last_generated) ||
            !reply_id(r->element[4], &info.mark)) {
            reply_log_error("info", r);
            rc = RS_EPROTO;
        } else {
            info.length = (uint64_t)r->element[0]->integer;
            info.exists = !msg_id_is_zero(info.last_generated);
        }
    }
    cb(q->ud, rc, rc == 0 ? &info : NULL);
    rs_free(q);
}

int
backlog_info(struct backlog *b, const char *chan, backlog_info_cb cb, void *ud)
{
    if (!backlog_name_ok(chan))
        return RS_EINVAL;
    struct req *q = req_new(b, (void *)cb, ud);
    if (q == NULL)
        return RS_ENOMEM;
    int rc = backlog_eval(b, b->cmd, SC_INFO, chan, 0, NULL, NULL, on_info, q);
    if (rc != 0)
        rs_free(q);
    return rc;
}

/* --------------------------------------------------------------- trimming */

static void
on_done(void *ud, int rc, const redisReply *r)
{
    struct req *q = ud;
    backlog_done_cb cb = (backlog_done_cb)q->cb;
    if (rc == 0 && r->type == REDIS_REPLY_ERROR) {
        reply_log_error("command", r);
        rc = RS_EPROTO;
    }
    if (cb != NULL)
        cb(q->ud, rc);
    rs_free(q);
}

int
backlog_trim_age(struct backlog *b, const char *chan, uint64_t min_ms,
                 backlog_done_cb cb, void *ud)
{
    char minid[32];
    if (!backlog_name_ok(chan))
        return RS_EINVAL;
    snprintf(minid, sizeof(minid), "%llu-0", (unsigned long long)min_ms);
    struct req *q = req_new(b, (void *)cb, ud);
    if (q == NULL)
        return RS_ENOMEM;
    const char *args[1] = { minid };
    int rc = backlog_eval(b, b->cmd, SC_TRIM_AGE, chan, 1, args, NULL, on_done,
                          q);
    if (rc != 0)
        rs_free(q);
    return rc;
}

/* ------------------------------------------------------------------- tail */

static void
on_tail(void *ud, int rc, const redisReply *r)
{
    struct req *q = ud;
    struct backlog *b = q->b;
    backlog_tail_cb cb = (backlog_tail_cb)q->cb;
    size_t plen = strlen(b->prefix) + 2;   /* "rshub:" + "s:" */
    b->tail_blocked = false;
    if (rc == 0 && r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < r->elements && rc == 0; i++) {
            const redisReply *s = r->element[i];
            if (s->type != REDIS_REPLY_ARRAY || s->elements != 2 ||
                s->element[0]->type != REDIS_REPLY_STRING ||
                (size_t)s->element[0]->len <= plen) {
                rc = RS_EPROTO;
                break;
            }
            struct backlog_entry *e = NULL;
            size_t n = 0;
            rc = reply_entries(s->element[1], &e, &n);
            if (rc == 0)
                cb(q->ud, 0, s->element[0]->str + plen, e, n);
            rs_free(e);
        }
    } else if (rc == 0 && r->type != REDIS_REPLY_NIL) {
        reply_log_error("XREAD", r);
        /* "UNBLOCKED" from CLIENT UNBLOCK ... ERROR is not used; a plain
         * error reply means a bad request. */
        rc = RS_EPROTO;
    }
    cb(q->ud, rc, NULL, NULL, 0);
    rs_free(q);
}

int
backlog_tail_read(struct backlog *b, const char *const *chans,
                  const struct msg_id *after, size_t n, unsigned block_ms,
                  unsigned count, backlog_tail_cb cb, void *ud)
{
    int rc = RS_ENOMEM;
    size_t argc = 6 + 2 * n;
    const char **argv = rs_calloc(argc, sizeof(*argv));
    char *keys = rs_malloc(n * 256 + 1);
    char *ids = rs_malloc(n * MSG_ID_BUFSZ + 1);
    char block[16], cnt[16];
    struct req *q = req_new(b, (void *)cb, ud);
    if (argv == NULL || keys == NULL || ids == NULL || q == NULL)
        goto out;
    snprintf(block, sizeof(block), "%u", block_ms);
    snprintf(cnt, sizeof(cnt), "%u", count);
    argv[0] = "XREAD";
    argv[1] = "BLOCK";
    argv[2] = block;
    argv[3] = "COUNT";
    argv[4] = cnt;
    argv[5] = "STREAMS";
    for (size_t i = 0; i < n; i++) {
        if (backlog_key(b, 's', chans[i], keys + i * 256, 256) != 0) {
            rc = RS_EINVAL;
            goto out;
        }
        msg_id_format(after[i], ids + i * MSG_ID_BUFSZ);
        argv[6 + i] = keys + i * 256;
        argv[6 + n + i] = ids + i * MSG_ID_BUFSZ;
    }
    rc = rs_redis_cmd(b->tail, RS_REDIS_NO_TIMEOUT, on_tail, q, (int)argc,
                      argv, NULL);
    if (rc == 0) {
        b->tail_blocked = true;
        b->tail_reads++;
        q = NULL;
    }
out:
    rs_free(q);
    rs_free(argv);
    rs_free(keys);
    rs_free(ids);
    return rc;
}

/* The interrupt asked for is still owed: the read it was asked for is the
 * one in flight (once that read has ended, the next one reads the channels
 * of now, and nothing is owed). */
static bool
unblock_owed(const struct backlog *b)
{
    return b->unblock_read != 0 && b->unblock_read == b->tail_reads &&
           b->tail_blocked && b->tail_client_id != 0;
}

static void on_unblock(void *ud, int rc, const redisReply *r);

static void
unblock_send(struct backlog *b)
{
    char id[32];
    const char *argv[3] = { "CLIENT", "UNBLOCK", id };

    if (b->unblock_inflight || !unblock_owed(b))
        return;   /* the answer in flight decides what comes next */
    snprintf(id, sizeof(id), "%lld", b->tail_client_id);
    if (rs_redis_cmd(b->cmd, 0, on_unblock, b, 3, argv, NULL) != 0) {
        rs_log(RS_LOG_DEBUG, "cannot send CLIENT UNBLOCK");
        return;   /* the read ends with its BLOCK time */
    }
    b->unblock_inflight = true;
}

/* CLIENT UNBLOCK answers 1 when it woke the read, 0 when that client was
 * not blocked. The XREAD goes on the tail link and the CLIENT UNBLOCK on
 * the command link, two connections with no order between them: a 0 while
 * the read is in flight means Redis has not seen the XREAD yet (or its
 * answer is on its way here), and an interrupt lost then would leave a
 * channel just made active unread for the whole BLOCK time. So it is sent
 * again shortly, for as long as that read is in flight. */
static void
on_unblock(void *ud, int rc, const redisReply *r)
{
    struct backlog *b = ud;
    struct timeval tv;
    uint64_t ms;

    b->unblock_inflight = false;
    if (rc == RS_ECANCELED)
        return;                   /* backlog_free: nothing more to send */
    if (!unblock_owed(b) || rc != 0 || r->type != REDIS_REPLY_INTEGER ||
        r->integer != 0) {
        /* woken, or that read has ended, or the link failed (the read
         * then ends with its BLOCK time) */
        b->unblock_read = 0;
        b->unblock_tries = 0;
        return;
    }
    ms = rs_backoff_base(&BACKLOG_UNBLOCK_AGAIN, ++b->unblock_tries);
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
    rs_log(RS_LOG_DEBUG, "tail read not blocked in Redis yet: CLIENT UNBLOCK "
           "again in %llu ms (try %u)", (unsigned long long)ms,
           b->unblock_tries);
    evtimer_add(b->ev_unblock, &tv);
}

static void
on_unblock_again(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    unblock_send(arg);
}

void
backlog_tail_interrupt(struct backlog *b)
{
    if (!b->tail_blocked || b->tail_client_id == 0)
        return;
    if (b->unblock_read != b->tail_reads) {
        b->unblock_read = b->tail_reads;
        b->unblock_tries = 0;
    }
    if (!evtimer_pending(b->ev_unblock, NULL))
        unblock_send(b);          /* else it is sent when the timer fires */
}

static void
on_trims(void *ud, int rc, const redisReply *r)
{
    struct req *q = ud;
    backlog_trims_cb cb = (backlog_trims_cb)q->cb;
    struct backlog_trimlog *logs = NULL;
    size_t n = 0;
    if (rc == 0 && r->type != REDIS_REPLY_ARRAY) {
        reply_log_error("trim logs", r);
        rc = RS_EPROTO;
    }
    if (rc == 0 && r->elements > 0) {
        n = r->elements;
        logs = rs_calloc(n, sizeof(*logs));
        if (logs == NULL)
            rc = RS_ENOMEM;
        for (size_t i = 0; rc == 0 && i < n; i++) {
            const redisReply *l = r->element[i];
            if (l->type != REDIS_REPLY_ARRAY) {
                rc = RS_EPROTO;
                break;
            }
            for (size_t k = 0; k < l->elements && k < BACKLOG_TRIMLOG_MAX; k++) {
                const redisReply *e = l->element[k];
                if (e->type != REDIS_REPLY_STRING ||
                    msg_id_parse(e->str, (size_t)e->len, &logs[i].ids[logs[i].n]) != 0) {
                    rc = RS_EPROTO;
                    break;
                }
                logs[i].n++;
            }
        }
    }
    cb(q->ud, rc, logs, rc == 0 ? n : 0);
    rs_free(logs);
    rs_free(q);
}

int
backlog_trims(struct backlog *b, const char *const *chans, size_t n,
              backlog_trims_cb cb, void *ud)
{
    /* EVAL, not EVALSHA: this runs on the tail link, where nothing else
     * needs scripts; Redis caches the compiled body by its SHA anyway. */
    static const char src[] =
        "local out = {}\n"
        "for i = 1, #KEYS do out[i] = redis.call('LRANGE', KEYS[i], 0, -1) end\n"
        "return out\n";
    int rc = RS_ENOMEM;
    const char **argv = rs_calloc(n + 3, sizeof(*argv));
    char *keys = rs_malloc(n * 256 + 1);
    char nk[24];
    struct req *q = req_new(b, (void *)cb, ud);
    if (argv == NULL || keys == NULL || q == NULL)
        goto out;
    snprintf(nk, sizeof(nk), "%zu", n);
    argv[0] = "EVAL";
    argv[1] = src;
    argv[2] = nk;
    for (size_t i = 0; i < n; i++) {
        if (!backlog_name_ok(chans[i]) ||
            snprintf(keys + i * 256, 256, "%stl:%s", b->prefix, chans[i]) >= 256) {
            rc = RS_EINVAL;
            goto out;
        }
        argv[3 + i] = keys + i * 256;
    }
    rc = rs_redis_cmd(b->tail, 0, on_trims, q, (int)(n + 3), argv, NULL);
    if (rc == 0)
        q = NULL;
out:
    rs_free(q);
    rs_free(argv);
    rs_free(keys);
    return rc;
}

/* ----------------------------------------------------------------- topics */

static void
on_claim(void *ud, int rc, const redisReply *r)
{
    struct req *q = ud;
    backlog_value_cb cb = (backlog_value_cb)q->cb;
    if (rc == 0 && r->type != REDIS_REPLY_STRING) {
        reply_log_error("topic claim", r);
        rc = RS_EPROTO;
    }
    cb(q->ud, rc, rc == 0 ? r->str : NULL, rc == 0 ? (size_t)r->len : 0);
    rs_free(q);
}

int
backlog_topic_claim(struct backlog *b, const char *name, const char *value,
                    backlog_value_cb cb, void *ud)
{
    char key[256];
    snprintf(key, sizeof(key), "%stopics", b->prefix);
    struct req *q = req_new(b, (void *)cb, ud);
    if (q == NULL)
        return RS_ENOMEM;
    const char *keys[1] = { key };
    const char *args[2] = { name, value };
    int rc = script_call(b->pub, &scripts[SC_TOPIC_CLAIM], 1, keys, 2, args,
                         NULL, on_claim, q);
    if (rc != 0)
        rs_free(q);
    return rc;
}

static void
on_topics(void *ud, int rc, const redisReply *r)
{
    struct req *q = ud;
    backlog_topics_cb cb = (backlog_topics_cb)q->cb;
    const char **names = NULL, **values = NULL;
    size_t n = 0;
    if (rc == 0 && (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0))
        rc = RS_EPROTO;
    if (rc == 0 && r->elements > 0) {
        n = r->elements / 2;
        names = rs_calloc(n, sizeof(*names));
        values = rs_calloc(n, sizeof(*values));
        if (names == NULL || values == NULL) {
            rc = RS_ENOMEM;
            n = 0;
        }
        for (size_t i = 0; i < n; i++) {
            names[i] = r->element[2 * i]->str;
            values[i] = r->element[2 * i + 1]->str;
        }
    }
    cb(q->ud, rc, names, values, n);
    rs_free(names);
    rs_free(values);
    rs_free(q);
}

int
backlog_topics(struct backlog *b, backlog_topics_cb cb, void *ud)
{
    char key[256];
    snprintf(key, sizeof(key), "%stopics", b->prefix);
    struct req *q = req_new(b, (void *)cb, ud);
    if (q == NULL)
        return RS_ENOMEM;
    const char *argv[2] = { "HGETALL", key };
    int rc = rs_redis_cmd(b->cmd, 0, on_topics, q, 2, argv, NULL);
    if (rc != 0)
        rs_free(q);
    return rc;
}
