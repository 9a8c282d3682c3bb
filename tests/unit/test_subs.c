/* test_subs.c - the WebSub subscription store (hub/subs.c) against a
 * private redis-server: store, renew, load and remove; the caps counting
 * stored subscriptions and reservations, checked and taken in one script
 * (many requests at once cannot all see the same room); reservations that
 * run out; a store without a reservation needing room; the delivery
 * lock; cursors that never revive a removed subscription; expired leases;
 * the record's JSON. */
#include "testutil.h"
#include "tu_httpd.h"
#include "tu_proc.h"

#include <stdio.h>
#include <string.h>

#include "backlog.h"
#include "rs_alloc.h"
#include "subs.h"

/* One store on a fresh loop; Redis is the group's. */
struct fx {
    struct tu_redis *redis;
    struct tu_loop loop;
    struct backlog *b;
    struct subs *s;
};

/* What one asynchronous call answered. */
struct res {
    bool done;
    int rc;
    long long v;
    size_t n;
    char items[16][160];      /* names, or callback|record|cursor */
};

static void
on_state(void *ud, const char *which, enum rs_redis_state st, const char *err)
{
    struct fx *f = ud;
    (void)err;
    if (strcmp(which, "command") == 0 && st == RS_REDIS_READY)
        subs_on_ready(f->s);   /* its scripts, before anything else */
}

static int
group_setup(void **state)
{
    struct tu_redis *r = calloc(1, sizeof(*r));
    tu_redis_start(r);
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

static int
setup(void **state)
{
    static unsigned n;
    struct fx *f = calloc(1, sizeof(*f));
    char prefix[32];
    const char *err = NULL;
    assert_non_null(f);
    f->redis = *state;
    tu_loop_init(&f->loop);
    snprintf(prefix, sizeof(prefix), "t%u:", ++n);   /* a fresh key space */
    struct backlog_opts o = { .redis_url = f->redis->url, .prefix = prefix,
                              .on_state = on_state, .ud = f };
    /* on_state runs from the loop only: f->s is there by then */
    f->b = backlog_new(f->loop.base, &o, &err);
    assert_non_null(f->b);
    f->s = subs_new(f->b);
    assert_non_null(f->s);
    TU_LOOP_UNTIL(&f->loop, backlog_ready(f->b), 5000);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    struct tu_redis *r = f->redis;
    backlog_free(f->b);
    subs_free(f->s);
    subs_free(NULL);
    tu_loop_cleanup(&f->loop);
    free(f);
    *state = r;
    return 0;
}

static void
on_int(void *ud, int rc, long long v)
{
    struct res *r = ud;
    r->done = true;
    r->rc = rc;
    r->v = v;
}

static void
on_names(void *ud, int rc, size_t n, const char *const *names)
{
    struct res *r = ud;
    r->done = true;
    r->rc = rc;
    r->n = n;
    for (size_t i = 0; i < n && i < 16; i++)
        snprintf(r->items[i], sizeof(r->items[i]), "%s", names[i]);
}

static void
on_load(void *ud, int rc, size_t n, const char *const *cbs,
        const char *const *recs, const struct msg_id *curs)
{
    struct res *r = ud;
    r->done = true;
    r->rc = rc;
    r->n = n;
    for (size_t i = 0; i < n && i < 16; i++) {
        char id[MSG_ID_BUFSZ];
        msg_id_format(curs[i], id);
        snprintf(r->items[i], sizeof(r->items[i]), "%s|%s|%s", cbs[i], recs[i], id);
    }
}

/* Wait for r's answer and check its rc. */
#define WAIT_OK(f, r)                                                       \
    do {                                                                    \
        TU_LOOP_UNTIL(&(f)->loop, (r)->done, 5000);                         \
        assert_int_equal((r)->rc, 0);                                       \
    } while (0)

static const struct subs_caps NOCAPS = { 0, 0, 60000 };

static long long
put(struct fx *f, const char *topic, const char *cb, const char *host,
    struct msg_id cursor, const struct subs_caps *caps)
{
    struct res r = { 0 };
    assert_int_equal(subs_put(f->s, topic, cb, "{\"expires\":1}", 4102444800000ull,
                              cursor, host, caps, on_int, &r), 0);
    WAIT_OK(f, &r);
    return r.v;
}

static long long
reserve(struct fx *f, const char *topic, const char *cb, const char *host,
        const struct subs_caps *caps)
{
    struct res r = { 0 };
    assert_int_equal(subs_reserve(f->s, topic, cb, host, caps, on_int, &r), 0);
    WAIT_OK(f, &r);
    return r.v;
}

static long long
simple(struct fx *f, int (*fn)(struct subs *, const char *, const char *,
                               const char *, subs_done_cb, void *),
       const char *topic, const char *cb, const char *host)
{
    struct res r = { 0 };
    assert_int_equal(fn(f->s, topic, cb, host, on_int, &r), 0);
    WAIT_OK(f, &r);
    return r.v;
}

static void
load(struct fx *f, const char *topic, struct res *r)
{
    memset(r, 0, sizeof(*r));
    assert_int_equal(subs_load(f->s, topic, on_load, r), 0);
    WAIT_OK(f, r);
}

static void
topics(struct fx *f, struct res *r)
{
    memset(r, 0, sizeof(*r));
    assert_int_equal(subs_topics(f->s, on_names, r), 0);
    WAIT_OK(f, r);
}

/* subs/put_load_remove: a new pair is 1, again 0 (its cursor kept); load
 * lists callback, record and cursor; the topic is listed while it has
 * subscriptions; remove is 1, then 0. */
static void
test_put_load_remove(void **state)
{
    struct fx *f = *state;
    struct res r;
    struct msg_id c1 = { 1000, 1 }, c2 = { 2000, 0 };
    assert_int_equal(put(f, "t", "http://c.test/a", "c.test", c1, &NOCAPS), 1);
    assert_int_equal(put(f, "t", "http://c.test/a", "c.test", c2, &NOCAPS), 0);
    load(f, "t", &r);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.items[0], "http://c.test/a|{\"expires\":1}|1000-1");
    topics(f, &r);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.items[0], "t");
    assert_int_equal(simple(f, subs_remove, "t", "http://c.test/a", "c.test"), 1);
    assert_int_equal(simple(f, subs_remove, "t", "http://c.test/a", "c.test"), 0);
    load(f, "t", &r);
    assert_int_equal(r.n, 0);
    topics(f, &r);
    assert_int_equal(r.n, 0);
    /* names the store cannot hold are refused before Redis */
    assert_int_equal(subs_load(f->s, "a b", on_load, &r), RS_EINVAL);
    char host[SUBS_HOST_MAX + 2];
    memset(host, 'h', sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    assert_int_equal(subs_reserve(f->s, "t", "http://c.test/", host, &NOCAPS,
                                  on_int, &r), RS_EINVAL);
}

/* subs/caps_count_reservations: per topic, stored subscriptions and live
 * reservations count; a stored pair reserves nothing; one pair's second
 * request shares its reservation; a release gives the room back. */
static void
test_caps_topic(void **state)
{
    struct fx *f = *state;
    const struct subs_caps caps = { 2, 0, 60000 };
    assert_int_equal(put(f, "t", "http://c.test/s", "c.test", (struct msg_id){ 0, 0 },
                         &NOCAPS), 1);
    assert_int_equal(reserve(f, "t", "http://c.test/s", "c.test", &caps), SUBS_EXISTS);
    assert_int_equal(reserve(f, "t", "http://c.test/a", "c.test", &caps), SUBS_RESERVED);
    assert_int_equal(reserve(f, "t", "http://c.test/a", "c.test", &caps), SUBS_RESERVED);
    assert_int_equal(reserve(f, "t", "http://c.test/b", "c.test", &caps), SUBS_TOPIC_FULL);
    assert_int_equal(reserve(f, "u", "http://c.test/b", "c.test", &caps), SUBS_RESERVED);
    assert_int_equal(simple(f, subs_release, "t", "http://c.test/a", "c.test"), 1);
    assert_int_equal(simple(f, subs_release, "t", "http://c.test/a", "c.test"), 0);
    assert_int_equal(reserve(f, "t", "http://c.test/b", "c.test", &caps), SUBS_RESERVED);
    /* the reservation becomes the subscription: still two */
    assert_int_equal(put(f, "t", "http://c.test/b", "c.test", (struct msg_id){ 0, 0 },
                         &caps), 1);
    assert_int_equal(reserve(f, "t", "http://c.test/c", "c.test", &caps), SUBS_TOPIC_FULL);
}

/* subs/caps_per_host: the per-host cap counts every topic's subscriptions
 * and reservations of one callback host, and no other host's. */
static void
test_caps_host(void **state)
{
    struct fx *f = *state;
    const struct subs_caps caps = { 0, 2, 60000 };
    assert_int_equal(put(f, "t", "http://h.test/1", "h.test", (struct msg_id){ 0, 0 },
                         &caps), 1);
    assert_int_equal(reserve(f, "u", "http://h.test/2", "h.test", &caps), SUBS_RESERVED);
    assert_int_equal(reserve(f, "v", "http://h.test/3", "h.test", &caps), SUBS_HOST_FULL);
    assert_int_equal(reserve(f, "v", "http://g.test/3", "g.test", &caps), SUBS_RESERVED);
    assert_int_equal(simple(f, subs_remove, "t", "http://h.test/1", "h.test"), 1);
    assert_int_equal(reserve(f, "v", "http://h.test/3", "h.test", &caps), SUBS_RESERVED);
}

/* subs/caps_at_once: twenty requests sent together for a cap of five get
 * exactly five slots (the check and the taking are one script). */
static void
test_caps_at_once(void **state)
{
    struct fx *f = *state;
    const struct subs_caps caps = { 5, 0, 60000 };
    struct res r[20];
    memset(r, 0, sizeof(r));
    for (int i = 0; i < 20; i++) {
        char cb[64];
        snprintf(cb, sizeof(cb), "http://c.test/%d", i);
        assert_int_equal(subs_reserve(f->s, "t", cb, "c.test", &caps, on_int, &r[i]), 0);
    }
    int got = 0, full = 0;
    for (int i = 0; i < 20; i++) {
        WAIT_OK(f, &r[i]);
        got += r[i].v == SUBS_RESERVED;
        full += r[i].v == SUBS_TOPIC_FULL;
    }
    assert_int_equal(got, 5);
    assert_int_equal(full, 15);
}

/* subs/reservation_runs_out: a reservation neither stored nor released
 * ends after its hold (by Redis's clock); a verified subscription whose
 * reservation ran out while others took the room is not stored. */
static void
test_runs_out(void **state)
{
    struct fx *f = *state;
    const struct subs_caps shortcaps = { 1, 0, 200 }, caps = { 1, 0, 60000 };
    struct res r;
    assert_int_equal(reserve(f, "t", "http://c.test/a", "c.test", &shortcaps),
                     SUBS_RESERVED);
    assert_int_equal(reserve(f, "t", "http://c.test/b", "c.test", &caps), SUBS_TOPIC_FULL);
    tu_loop_run_for(&f->loop, 400);
    assert_int_equal(reserve(f, "t", "http://c.test/b", "c.test", &caps), SUBS_RESERVED);
    assert_int_equal(put(f, "t", "http://c.test/a", "c.test", (struct msg_id){ 0, 0 },
                         &caps), SUBS_TOPIC_FULL);
    load(f, "t", &r);
    assert_int_equal(r.n, 0);
    assert_int_equal(put(f, "t", "http://c.test/b", "c.test", (struct msg_id){ 0, 0 },
                         &caps), 1);
}

/* subs/lock: a free lock is taken, held against another node, renewed by
 * its holder, and free again after its TTL. */
static void
test_lock(void **state)
{
    struct fx *f = *state;
    struct res r = { 0 };
    assert_int_equal(subs_lock(f->s, "t", "A", 300, on_int, &r), 0);
    WAIT_OK(f, &r);
    assert_int_equal(r.v, 1);
    memset(&r, 0, sizeof(r));
    assert_int_equal(subs_lock(f->s, "t", "B", 300, on_int, &r), 0);
    WAIT_OK(f, &r);
    assert_int_equal(r.v, 0);
    memset(&r, 0, sizeof(r));
    assert_int_equal(subs_lock(f->s, "t", "A", 300, on_int, &r), 0);
    WAIT_OK(f, &r);
    assert_int_equal(r.v, 1);
    tu_loop_run_for(&f->loop, 450);
    memset(&r, 0, sizeof(r));
    assert_int_equal(subs_lock(f->s, "t", "B", 300, on_int, &r), 0);
    WAIT_OK(f, &r);
    assert_int_equal(r.v, 1);
    assert_int_equal(subs_lock(f->s, "bad name", "B", 300, on_int, &r), RS_EINVAL);
}

/* subs/cursors_never_revive: cursors are written for stored subscriptions
 * only, so a flush after a removal leaves nothing behind; set_record
 * likewise (-1). */
static void
test_cursors(void **state)
{
    struct fx *f = *state;
    struct res r = { 0 }, l;
    const char *cbs[2] = { "http://c.test/a", "http://c.test/gone" };
    struct msg_id ids[2] = { { 5, 5 }, { 6, 6 } };
    assert_int_equal(put(f, "t", cbs[0], "c.test", (struct msg_id){ 0, 0 }, &NOCAPS), 1);
    assert_int_equal(subs_save_cursors(f->s, "t", 2, cbs, ids, on_int, &r), 0);
    WAIT_OK(f, &r);
    assert_int_equal(r.v, 1);
    load(f, "t", &l);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.items[0], "http://c.test/a|{\"expires\":1}|5-5");
    assert_int_equal(simple(f, subs_remove, "t", cbs[0], "c.test"), 1);
    memset(&r, 0, sizeof(r));
    assert_int_equal(subs_save_cursors(f->s, "t", 1, cbs, ids, on_int, &r), 0);
    WAIT_OK(f, &r);
    assert_int_equal(r.v, 0);
    /* stored again: the old cursor did not survive (a new one starts) */
    assert_int_equal(put(f, "t", cbs[0], "c.test", (struct msg_id){ 9, 9 }, &NOCAPS), 1);
    load(f, "t", &l);
    assert_string_equal(l.items[0], "http://c.test/a|{\"expires\":1}|9-9");
    memset(&r, 0, sizeof(r));
    assert_int_equal(subs_set_record(f->s, "t", cbs[1], "{}", on_int, &r), 0);
    WAIT_OK(f, &r);
    assert_int_equal(r.v, -1);
    assert_int_equal(subs_save_cursors(f->s, "t", 0, cbs, ids, on_int, &r), RS_EINVAL);
}

/* subs/expired_leases: leases due by now are listed as "NAME CALLBACK",
 * at most limit of them; others are not. */
static void
test_expired(void **state)
{
    struct fx *f = *state;
    struct res r = { 0 };
    struct subs_caps caps = NOCAPS;
    for (int i = 0; i < 3; i++) {
        char cb[64];
        struct res p = { 0 };
        snprintf(cb, sizeof(cb), "http://c.test/%d", i);
        assert_int_equal(subs_put(f->s, "t", cb, "{\"expires\":1}",
                                  i < 2 ? 1000u + (unsigned)i : 4102444800000ull,
                                  (struct msg_id){ 0, 0 }, "c.test", &caps,
                                  on_int, &p), 0);
        WAIT_OK(f, &p);
    }
    assert_int_equal(subs_expired(f->s, 5000, 10, on_names, &r), 0);
    WAIT_OK(f, &r);
    assert_int_equal(r.n, 2);
    assert_string_equal(r.items[0], "t http://c.test/0");
    assert_string_equal(r.items[1], "t http://c.test/1");
    memset(&r, 0, sizeof(r));
    assert_int_equal(subs_expired(f->s, 5000, 1, on_names, &r), 0);
    WAIT_OK(f, &r);
    assert_int_equal(r.n, 1);
}

/* subs/record_json: the record round trip; "expires" is required; a
 * state other than "failing" is active; no secret, no field. */
static void
test_record(void **state)
{
    (void)state;
    char secret[] = "s\"x";
    struct subs_record in = { .secret = secret, .expires_ms = 123, .created_ms = 45,
                              .failing = true }, out;
    char *js = subs_record_json(&in);
    assert_non_null(js);
    assert_string_equal(js, "{\"created\":45,\"expires\":123,\"secret\":\"s\\\"x\","
                            "\"state\":\"failing\"}");
    assert_int_equal(subs_record_parse(js, &out), 0);
    assert_string_equal(out.secret, "s\"x");
    assert_int_equal(out.expires_ms, 123);
    assert_int_equal(out.created_ms, 45);
    assert_true(out.failing);
    rs_free(out.secret);
    rs_free(js);
    in.secret = NULL;
    in.failing = false;
    js = subs_record_json(&in);
    assert_null(strstr(js, "secret"));
    rs_free(js);
    assert_int_equal(subs_record_parse("{\"expires\":7,\"state\":\"odd\"}", &out), 0);
    assert_false(out.failing);
    assert_null(out.secret);
    assert_int_equal(subs_record_parse("{\"state\":\"active\"}", &out), RS_EINVAL);
    assert_int_equal(subs_record_parse("not json", &out), RS_EINVAL);
    assert_int_equal(subs_record_parse("{\"expires\":\"soon\"}", &out), RS_EINVAL);
}

int
main(void)
{
#define TS(name, fn) { name, fn, setup, teardown, NULL }
    const struct CMUnitTest tests[] = {
        TS("subs/put_load_remove", test_put_load_remove),
        TS("subs/caps_count_reservations", test_caps_topic),
        TS("subs/caps_per_host", test_caps_host),
        TS("subs/caps_at_once", test_caps_at_once),
        TS("subs/reservation_runs_out", test_runs_out),
        TS("subs/lock", test_lock),
        TS("subs/cursors_never_revive", test_cursors),
        TS("subs/expired_leases", test_expired),
        { "subs/record_json", test_record, NULL, NULL, NULL },
    };
    return cmocka_run_group_tests_name("subs", tests, group_setup, group_teardown);
}
