/* test_script.c - the hub's Lua scripts on a Redis link (hub/script.c)
 * against a private redis-server: the SHA computed is the one Redis
 * gives, calls are binary safe past the inline argument array, and the
 * scripts are loaded again on every (re)connection, so that a link to a
 * new primary (an empty script cache) never meets NOSCRIPT. */
#include "testutil.h"
#include "tu_httpd.h"
#include "tu_proc.h"

#include <stdio.h>
#include <string.h>

#include "script.h"

/* ARGV joined with '|', so that a lost or cut argument shows. */
static struct script scripts[] = {
    { .src = "return table.concat(ARGV, '|') .. '#' .. #KEYS" },
    { .src = "return redis.call('INCR', KEYS[1])" },
};

struct fx {
    struct tu_redis *redis;
    struct tu_loop loop;
    struct rs_redis *link;
    bool load_on_ready;         /* on_state loads the scripts on READY */
    unsigned readies;
};

struct res {
    unsigned calls;
    int rc;
    int type;
    long long integer;
    char str[512];
    size_t len;
};

static void
on_state(void *ud, enum rs_redis_state st, const char *errstr)
{
    struct fx *f = ud;
    (void)errstr;
    if (st != RS_REDIS_READY)
        return;
    f->readies++;
    if (f->load_on_ready)
        script_load_all(f->link, scripts, sizeof(scripts) / sizeof(scripts[0]));
}

static void
on_reply(void *ud, int rc, const redisReply *reply)
{
    struct res *r = ud;
    r->calls++;
    r->rc = rc;
    if (rc != 0)
        return;
    r->type = reply->type;
    r->integer = reply->integer;
    if (reply->str != NULL) {
        r->len = reply->len < sizeof(r->str) ? reply->len : sizeof(r->str);
        memcpy(r->str, reply->str, r->len);
    }
}

static int
group_setup(void **state)
{
    struct tu_redis *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    tu_redis_start(r);
    script_init(scripts, sizeof(scripts) / sizeof(scripts[0]));
    *state = r;
    return 0;
}

static int
group_teardown(void **state)
{
    tu_redis_stop(*state);
    free(*state);
    return 0;
}

static struct fx *
fx_open(struct tu_redis *redis, bool load_on_ready)
{
    struct fx *f = calloc(1, sizeof(*f));
    const char *err = NULL;
    assert_non_null(f);
    f->redis = redis;
    f->load_on_ready = load_on_ready;
    tu_loop_init(&f->loop);
    struct rs_redis_opts o = { .url = redis->url, .client_name = "test-script",
                               .backoff_min_ms = 10, .backoff_max_ms = 50,
                               .on_state = on_state, .ud = f };
    f->link = rs_redis_new(f->loop.base, &o, &err);
    assert_non_null(f->link);
    TU_LOOP_UNTIL(&f->loop, f->readies == 1, 5000);
    return f;
}

static void
fx_close(struct fx *f)
{
    rs_redis_free(f->link);
    tu_loop_cleanup(&f->loop);
    free(f);
}

/* One command on f's link, waited for. */
static void
cmd(struct fx *f, struct res *r, int argc, const char **argv)
{
    memset(r, 0, sizeof(*r));
    assert_int_equal(rs_redis_cmd(f->link, 0, on_reply, r, argc, argv, NULL), 0);
    TU_LOOP_UNTIL(&f->loop, r->calls > 0, 5000);
    assert_int_equal(r->rc, 0);
}

/* script_call of sc, waited for. */
static void
call(struct fx *f, struct res *r, const struct script *sc, int nkeys,
     const char *const *keys, int nargs, const char *const *args,
     const size_t *lens)
{
    memset(r, 0, sizeof(*r));
    assert_int_equal(script_call(f->link, sc, nkeys, keys, nargs, args, lens,
                                 on_reply, r), 0);
    TU_LOOP_UNTIL(&f->loop, r->calls > 0, 5000);
    assert_int_equal(r->rc, 0);
}

/* ----------------------------------------------------------------- tests */

static void
test_sha_is_redis_own(void **state)
{
    struct fx *f = fx_open(*state, false);
    for (size_t i = 0; i < sizeof(scripts) / sizeof(scripts[0]); i++) {
        struct res r;
        const char *argv[] = { "SCRIPT", "LOAD", scripts[i].src };
        cmd(f, &r, 3, argv);
        assert_int_equal(r.type, REDIS_REPLY_STRING);
        assert_int_equal(r.len, 40);
        assert_memory_equal(r.str, scripts[i].sha, 40);
    }
    fx_close(f);
}

static void
test_call_binary_safe(void **state)
{
    struct fx *f = fx_open(*state, true);
    struct res r;
    /* a NUL inside an argument: the length given, not strlen */
    const char *args[] = { "a\0b", "c" };
    const size_t lens[] = { 3, 1 };
    call(f, &r, &scripts[0], 0, NULL, 2, args, lens);
    assert_int_equal(r.type, REDIS_REPLY_STRING);
    assert_int_equal(r.len, 7);
    assert_memory_equal(r.str, "a\0b|c#0", 7);
    fx_close(f);
}

static void
test_call_past_inline_args(void **state)
{
    /* 3 + 2 keys + 30 args: past the 19 kept on the stack */
    struct fx *f = fx_open(*state, true);
    const char *keys[] = { "sc:k1", "sc:k2" };
    const char *args[30];
    char bufs[30][8], want[256];
    size_t wl = 0;
    for (int i = 0; i < 30; i++) {
        snprintf(bufs[i], sizeof(bufs[i]), "v%d", i);
        args[i] = bufs[i];
        wl += (size_t)snprintf(want + wl, sizeof(want) - wl, "%s%s", bufs[i],
                               i < 29 ? "|" : "#2");
    }
    struct res r;
    call(f, &r, &scripts[0], 2, keys, 30, args, NULL);
    assert_int_equal(r.type, REDIS_REPLY_STRING);
    assert_int_equal(r.len, strlen(want));
    assert_memory_equal(r.str, want, r.len);
    /* and a bad count is refused before anything is sent */
    assert_int_equal(script_call(f->link, &scripts[0], -1, NULL, 0, NULL, NULL,
                                 on_reply, &r), RS_EINVAL);
    fx_close(f);
}

/* The property a failover rests on: a new connection (here the same
 * server with its script cache flushed and our connection killed, as a
 * promoted replica is to us) gets the scripts again before any EVALSHA. */
static void
test_reloaded_on_reconnect(void **state)
{
    struct fx *f = fx_open(*state, true);
    struct fx *admin = fx_open(*state, false);
    const char *keys[] = { "sc:counter" };
    struct res r;
    call(f, &r, &scripts[1], 1, keys, 0, NULL, NULL);
    assert_int_equal(r.type, REDIS_REPLY_INTEGER);
    long long before = r.integer;

    /* the cache emptied under a live link: EVALSHA meets NOSCRIPT (what
     * a link that did not reload would meet on a new primary) */
    const char *flush[] = { "SCRIPT", "FLUSH" };
    cmd(admin, &r, 2, flush);
    call(f, &r, &scripts[1], 1, keys, 0, NULL, NULL);
    assert_int_equal(r.type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r.str, "NOSCRIPT"));

    /* the link is cut: it reconnects, and its READY loads the scripts */
    const char *kill[] = { "CLIENT", "KILL", "USER", "default", "SKIPME", "yes" };
    cmd(admin, &r, 6, kill);
    assert_int_equal(r.type, REDIS_REPLY_INTEGER);
    assert_true(r.integer >= 1);
    TU_LOOP_UNTIL(&f->loop, f->readies == 2 &&
                  rs_redis_state(f->link) == RS_REDIS_READY, 5000);
    call(f, &r, &scripts[1], 1, keys, 0, NULL, NULL);
    assert_int_equal(r.type, REDIS_REPLY_INTEGER);
    assert_int_equal(r.integer, before + 1);
    fx_close(admin);
    fx_close(f);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha_is_redis_own),
        cmocka_unit_test(test_call_binary_safe),
        cmocka_unit_test(test_call_past_inline_args),
        cmocka_unit_test(test_reloaded_on_reconnect),
    };
    return cmocka_run_group_tests_name("script", tests, group_setup,
                                       group_teardown);
}
