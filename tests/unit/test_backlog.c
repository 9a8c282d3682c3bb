/* test_backlog.c - the hub's Redis layout (hub/backlog.c) against a private
 * redis-server: appends in order with their ids, exact bounds with the trim
 * mark and the trim log, replay pages bounded in entries and in bytes,
 * stream info, the blocking tail read over several channels (its timeout
 * and its interrupt), the age trim, the topic registry's first claim, the
 * append once per publish id (duplicates, its bounded KEYs), and
 * every call in flight cancelled exactly once at free. Each test has a key
 * prefix of its own, waits on a watchdog and ends with nothing on the
 * loop. */
#include "testutil.h"
#include "tu_httpd.h"
#include "tu_proc.h"

#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "backlog.h"
#include "rs_pubid.h"

#define CT "application/xml"

struct fx {
    struct tu_redis *redis;
    struct tu_loop loop;
    struct backlog *b;
};

/* What one callback said; calls counts its runs (exactly one is due). */
struct res {
    unsigned calls;
    int rc;
    struct msg_id id, mark;
    size_t n;
    struct msg_id ids[64];
    size_t lens[64];
    char bodies[64][32];
    char ctype[32];
    struct backlog_info info;
    struct backlog_trimlog logs[4];
    size_t nlogs;
    /* tail: one call per channel, then the final one */
    char chans[4][16];
    size_t nchans, per_chan[4];
    bool final;
    char value[64];
    bool dup;
};

/* What the backlog's owner knows of every channel (backlog_opts.known). */
static struct msg_id g_known;

static struct msg_id
fx_known(void *ud, const char *chan)
{
    (void)ud;
    (void)chan;
    return g_known;
}

static int
group_setup(void **state)
{
    struct tu_redis *r = calloc(1, sizeof(*r));
    assert_non_null(r);
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
    snprintf(prefix, sizeof(prefix), "b%u:", ++n);   /* a fresh key space */
    struct backlog_opts bo = { .redis_url = f->redis->url, .prefix = prefix,
                               .known = fx_known };
    g_known = (struct msg_id){ 0, 0 };
    f->b = backlog_new(f->loop.base, &bo, &err);
    assert_non_null(f->b);
    TU_LOOP_UNTIL(&f->loop, backlog_ready(f->b) && backlog_tail_ready(f->b), 5000);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    struct tu_redis *r = f->redis;
    backlog_free(f->b);
    tu_loop_cleanup(&f->loop);
    free(f);
    *state = r;
    return 0;
}

#define WAIT(f, r) TU_LOOP_UNTIL(&(f)->loop, (r)->calls > 0, 5000)

/* ------------------------------------------------------------ callbacks */

static void
on_appended(void *ud, int rc, struct msg_id id)
{
    struct res *r = ud;
    r->calls++;
    r->rc = rc;
    r->id = id;
}

static void
on_appended_once(void *ud, int rc, struct msg_id id, bool duplicate)
{
    struct res *r = ud;
    r->calls++;
    r->rc = rc;
    r->id = id;
    r->dup = duplicate;
}

static void
keep_entries(struct res *r, const struct backlog_entry *e, size_t n)
{
    for (size_t i = 0; i < n && r->n < 64; i++, r->n++) {
        r->ids[r->n] = e[i].id;
        r->lens[r->n] = e[i].len;
        snprintf(r->bodies[r->n], sizeof(r->bodies[0]), "%.*s",
                 (int)(e[i].len < 31 ? e[i].len : 31), e[i].body);
        if (e[i].ctype != NULL)
            snprintf(r->ctype, sizeof(r->ctype), "%.*s", (int)e[i].ctype_len,
                     e[i].ctype);
    }
}

static void
on_page(void *ud, int rc, struct msg_id mark, const struct backlog_entry *e,
        size_t n)
{
    struct res *r = ud;
    r->calls++;
    r->rc = rc;
    r->mark = mark;
    keep_entries(r, e, n);
}

static void
on_info(void *ud, int rc, const struct backlog_info *info)
{
    struct res *r = ud;
    r->calls++;
    r->rc = rc;
    if (info != NULL)
        r->info = *info;
}

static void
on_tail(void *ud, int rc, const char *chan, const struct backlog_entry *e,
        size_t n)
{
    struct res *r = ud;
    if (chan == NULL) {
        r->calls++;
        r->rc = rc;
        r->final = true;
        return;
    }
    assert_false(r->final);
    assert_true(r->nchans < 4);
    snprintf(r->chans[r->nchans], sizeof(r->chans[0]), "%s", chan);
    r->per_chan[r->nchans++] = n;
    keep_entries(r, e, n);
}

static void
on_trims(void *ud, int rc, const struct backlog_trimlog *logs, size_t n)
{
    struct res *r = ud;
    r->calls++;
    r->rc = rc;
    for (size_t i = 0; i < n && i < 4; i++)
        r->logs[i] = logs[i];
    r->nlogs = n;
}

static void
on_done(void *ud, int rc)
{
    struct res *r = ud;
    r->calls++;
    r->rc = rc;
}

static void
on_value(void *ud, int rc, const char *value, size_t len)
{
    struct res *r = ud;
    r->calls++;
    r->rc = rc;
    if (value != NULL)
        snprintf(r->value, sizeof(r->value), "%.*s", (int)len, value);
}

static void
on_topics(void *ud, int rc, const char *const *names, const char *const *values,
          size_t n)
{
    struct res *r = ud;
    r->calls++;
    r->rc = rc;
    r->n = n;
    for (size_t i = 0; i < n && i < 4; i++) {
        snprintf(r->chans[i], sizeof(r->chans[0]), "%s", names[i]);
        if (i == 0)
            snprintf(r->value, sizeof(r->value), "%s", values[i]);
    }
}

/* -------------------------------------------------------------- helpers */

static struct msg_id
append(struct fx *f, const char *chan, const char *body, uint64_t max)
{
    struct res r = { 0 };
    assert_int_equal(backlog_append(f->b, chan, body, strlen(body), CT, max,
                                    on_appended, &r), 0);
    WAIT(f, &r);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.rc, 0);
    return r.id;
}

/* backlog_append_once of body under key:seq (cap keys); *dup says how
 * it went; the id stored, or the one the duplicate stands for. */
static struct msg_id
append_once(struct fx *f, const char *chan, const char *body, const char *key,
            uint64_t seq, uint64_t cap, bool *dup)
{
    struct res r = { 0 };
    assert_int_equal(backlog_append_once(f->b, chan, body, strlen(body), CT, 0,
                                         key, seq, cap, on_appended_once, &r),
                     0);
    WAIT(f, &r);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.rc, 0);
    *dup = r.dup;
    return r.id;
}

static void
page(struct fx *f, const char *chan, struct msg_id after, unsigned count,
     size_t max_bytes, struct res *r)
{
    memset(r, 0, sizeof(*r));
    assert_int_equal(backlog_page_bytes(f->b, chan, after, count, max_bytes,
                                        on_page, r), 0);
    WAIT(f, r);
    assert_int_equal(r->calls, 1);
    assert_int_equal(r->rc, 0);
}

static void
info(struct fx *f, const char *chan, struct res *r)
{
    memset(r, 0, sizeof(*r));
    assert_int_equal(backlog_info(f->b, chan, on_info, r), 0);
    WAIT(f, r);
    assert_int_equal(r->rc, 0);
}

static const struct msg_id ZERO = { 0, 0 };

/* ---------------------------------------------------------------- tests */

/* backlog/names: channel names are 1..100 of [A-Za-z0-9._-]. */
static void
test_names(void **state)
{
    (void)state;
    char longest[BACKLOG_NAME_MAX + 2];
    memset(longest, 'a', sizeof(longest));
    longest[BACKLOG_NAME_MAX] = '\0';
    assert_true(backlog_name_ok("a"));
    assert_true(backlog_name_ok("A.b-c_9"));
    assert_true(backlog_name_ok(longest));
    longest[BACKLOG_NAME_MAX] = 'a';
    longest[BACKLOG_NAME_MAX + 1] = '\0';
    assert_false(backlog_name_ok(longest));
    assert_false(backlog_name_ok(""));
    assert_false(backlog_name_ok("a b"));
    assert_false(backlog_name_ok("a/b"));
    assert_false(backlog_name_ok("a:b"));
}

/* backlog/append_page: appends get growing stream ids; a page after 0
 * reads them all in order with body and content type, after an id only
 * those after it, and an unknown channel reads empty. */
static void
test_append_page(void **state)
{
    struct fx *f = *state;
    struct msg_id id[3];
    char body[16];
    for (int i = 0; i < 3; i++) {
        snprintf(body, sizeof(body), "<n%d/>", i);
        id[i] = append(f, "c", body, 0);
        if (i > 0)
            assert_true(msg_id_cmp(id[i - 1], id[i]) < 0);
    }
    struct res r;
    page(f, "c", ZERO, 10, 0, &r);
    assert_int_equal(r.n, 3);
    for (int i = 0; i < 3; i++) {
        snprintf(body, sizeof(body), "<n%d/>", i);
        assert_int_equal(msg_id_cmp(r.ids[i], id[i]), 0);
        assert_string_equal(r.bodies[i], body);
    }
    assert_string_equal(r.ctype, CT);
    assert_true(msg_id_is_zero(r.mark));
    page(f, "c", id[0], 10, 0, &r);
    assert_int_equal(r.n, 2);
    assert_int_equal(msg_id_cmp(r.ids[0], id[1]), 0);
    page(f, "c", id[0], 1, 0, &r);   /* bounded in entries */
    assert_int_equal(r.n, 1);
    page(f, "none", ZERO, 10, 0, &r);
    assert_int_equal(r.n, 0);
}

/* backlog/lost: an append that finds neither the stream nor its trim mark
 * while the owner knows an id of it (Redis lost the backlog) makes that id
 * the trim mark (and a trim point), so a since= of the lost backlog reads
 * as a gap; a new
 * channel (nothing known) gets none, and an existing stream keeps its. */
static void
test_lost(void **state)
{
    struct fx *f = *state;
    struct res r;
    struct msg_id lost = { 1000, 7 };

    g_known = lost;
    struct msg_id a = append(f, "l", "<a/>", 0);
    page(f, "l", ZERO, 10, 0, &r);
    assert_int_equal(r.n, 1);
    assert_int_equal(msg_id_cmp(r.mark, lost), 0);
    page(f, "l", (struct msg_id){ 1000, 6 }, 10, 0, &r);
    assert_true(msg_id_cmp((struct msg_id){ 1000, 6 }, r.mark) < 0); /* gap */
    /* and in the trim log: a live reader below it has a hole */
    memset(&r, 0, sizeof(r));
    const char *chans[] = { "l" };
    assert_int_equal(backlog_trims(f->b, chans, 1, on_trims, &r), 0);
    WAIT(f, &r);
    assert_int_equal(r.logs[0].n, 1);
    assert_int_equal(msg_id_cmp(r.logs[0].ids[0], lost), 0);
    g_known = a;                       /* the stream is there: kept */
    (void)append(f, "l", "<b/>", 0);
    page(f, "l", ZERO, 10, 0, &r);
    assert_int_equal(msg_id_cmp(r.mark, lost), 0);
    g_known = (struct msg_id){ 0, 0 };  /* a new channel: no mark */
    (void)append(f, "n", "<c/>", 0);
    page(f, "n", ZERO, 10, 0, &r);
    assert_true(msg_id_is_zero(r.mark));
    /* the same through the publish-id script */
    g_known = lost;
    bool dup = true;
    (void)append_once(f, "lo", "<d/>", "k1", 1, 10, &dup);
    assert_false(dup);
    page(f, "lo", ZERO, 10, 0, &r);
    assert_int_equal(msg_id_cmp(r.mark, lost), 0);
}

/* backlog/bounds: max_entries is kept in batches (trimmed back to the
 * bound once 64 over it), exactly; the trim mark is the newest id deleted,
 * read with every page, and the trim log lists the trim points newest
 * first; info tells length, ends and the last id ever. */
static void
test_bounds(void **state)
{
    struct fx *f = *state;
    struct msg_id id[70];
    struct res r;
    for (int i = 0; i < 68; i++)
        id[i] = append(f, "b", "<x/>", 4);
    info(f, "b", &r);
    assert_int_equal(r.info.length, 68);            /* 64 over: not yet */
    assert_true(msg_id_is_zero(r.info.mark));
    for (int i = 68; i < 70; i++)
        id[i] = append(f, "b", "<x/>", 4);
    info(f, "b", &r);
    assert_true(r.info.exists);
    assert_int_equal(r.info.length, 5);             /* 4 after the trim, +1 */
    assert_int_equal(msg_id_cmp(r.info.first, id[65]), 0);
    assert_int_equal(msg_id_cmp(r.info.last, id[69]), 0);
    assert_int_equal(msg_id_cmp(r.info.last_generated, id[69]), 0);
    assert_int_equal(msg_id_cmp(r.info.mark, id[64]), 0);
    page(f, "b", ZERO, 10, 0, &r);
    assert_int_equal(r.n, 5);
    assert_int_equal(msg_id_cmp(r.ids[0], id[65]), 0);
    assert_int_equal(msg_id_cmp(r.mark, id[64]), 0);   /* a reader after
                                                           id[1] sees its gap */
    memset(&r, 0, sizeof(r));
    const char *chans[] = { "b", "none" };
    assert_int_equal(backlog_trims(f->b, chans, 2, on_trims, &r), 0);
    WAIT(f, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.nlogs, 2);
    assert_int_equal(r.logs[0].n, 1);
    assert_int_equal(msg_id_cmp(r.logs[0].ids[0], id[64]), 0);
    assert_int_equal(r.logs[1].n, 0);
    info(f, "none", &r);
    assert_false(r.info.exists);
    assert_int_equal(r.info.length, 0);
}

/* backlog/page_bytes: a page stops before the entry that would take its
 * bytes (body and type, 1015 here) past the budget, and always holds one
 * entry at least. */
static void
test_page_bytes(void **state)
{
    struct fx *f = *state;
    char big[1001];
    memset(big, 'x', 1000);
    big[1000] = '\0';
    for (int i = 0; i < 5; i++)
        (void)append(f, "p", big, 0);
    struct res r;
    page(f, "p", ZERO, 256, 2500, &r);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.lens[0], 1000);
    page(f, "p", ZERO, 256, 3045, &r);
    assert_int_equal(r.n, 3);
    page(f, "p", ZERO, 256, 10, &r);
    assert_int_equal(r.n, 1);
    page(f, "p", r.ids[0], 256, 1 << 20, &r);
    assert_int_equal(r.n, 4);
}

/* backlog/tail: one XREAD over several channels after their cursors gives
 * one call per channel with its new entries, then the final one; with
 * nothing new it ends at its BLOCK time with rc 0, and an interrupt ends a
 * blocked read at once. */
static void
test_tail(void **state)
{
    struct fx *f = *state;
    struct msg_id a0 = append(f, "ta", "<a0/>", 0);
    struct msg_id a1 = append(f, "ta", "<a1/>", 0);
    struct msg_id b0 = append(f, "tb", "<b0/>", 0);
    const char *chans[] = { "ta", "tb" };
    struct msg_id after[] = { a0, ZERO };
    struct res r = { 0 };
    assert_int_equal(backlog_tail_read(f->b, chans, after, 2, 1000, 100, on_tail,
                                       &r), 0);
    WAIT(f, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.nchans, 2);
    assert_string_equal(r.chans[0], "ta");
    assert_int_equal(r.per_chan[0], 1);
    assert_int_equal(msg_id_cmp(r.ids[0], a1), 0);
    assert_string_equal(r.chans[1], "tb");
    assert_int_equal(msg_id_cmp(r.ids[1], b0), 0);

    /* nothing new: the BLOCK runs out */
    struct msg_id now[] = { a1, b0 };
    memset(&r, 0, sizeof(r));
    struct timeval t0, t1;
    gettimeofday(&t0, NULL);
    assert_int_equal(backlog_tail_read(f->b, chans, now, 2, 300, 100, on_tail, &r), 0);
    WAIT(f, &r);
    gettimeofday(&t1, NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.nchans, 0);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_usec - t0.tv_usec) / 1000;
    assert_true(ms >= 250);

    /* interrupted: ends long before its 4 s */
    memset(&r, 0, sizeof(r));
    gettimeofday(&t0, NULL);
    assert_int_equal(backlog_tail_read(f->b, chans, now, 2, 4000, 100, on_tail, &r), 0);
    tu_loop_run_for(&f->loop, 100);   /* it is blocked in Redis by now */
    backlog_tail_interrupt(f->b);
    WAIT(f, &r);
    gettimeofday(&t1, NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.nchans, 0);
    ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_usec - t0.tv_usec) / 1000;
    assert_true(ms < 3000);

    /* a new entry ends a blocked read with it */
    memset(&r, 0, sizeof(r));
    assert_int_equal(backlog_tail_read(f->b, chans, now, 2, 4000, 100, on_tail, &r), 0);
    tu_loop_run_for(&f->loop, 100);
    struct msg_id b1 = append(f, "tb", "<b1/>", 0);
    WAIT(f, &r);
    assert_int_equal(r.nchans, 1);
    assert_string_equal(r.chans[0], "tb");
    assert_int_equal(msg_id_cmp(r.ids[0], b1), 0);
    assert_string_equal(r.bodies[0], "<b1/>");
}

/* backlog/trim_age: entries older than the given time go, with the mark. */
static void
test_trim_age(void **state)
{
    struct fx *f = *state;
    struct msg_id old = append(f, "ag", "<old/>", 0);
    tu_loop_run_for(&f->loop, 30);
    struct msg_id young = append(f, "ag", "<young/>", 0);
    struct res r = { 0 };
    assert_int_equal(backlog_trim_age(f->b, "ag", young.ms, on_done, &r), 0);
    WAIT(f, &r);
    assert_int_equal(r.rc, 0);
    info(f, "ag", &r);
    assert_int_equal(r.info.length, 1);
    assert_int_equal(msg_id_cmp(r.info.first, young), 0);
    assert_int_equal(msg_id_cmp(r.info.mark, old), 0);
}

/* backlog/topics: the first claim of a name holds and every later one is
 * told its value; the registry lists what was claimed. */
static void
test_topics(void **state)
{
    struct fx *f = *state;
    struct res r = { 0 };
    assert_int_equal(backlog_topic_claim(f->b, "t1", "v-first", on_value, &r), 0);
    WAIT(f, &r);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.value, "v-first");
    memset(&r, 0, sizeof(r));
    assert_int_equal(backlog_topic_claim(f->b, "t1", "v-second", on_value, &r), 0);
    WAIT(f, &r);
    assert_string_equal(r.value, "v-first");
    memset(&r, 0, sizeof(r));
    assert_int_equal(backlog_topics(f->b, on_topics, &r), 0);
    WAIT(f, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.chans[0], "t1");
    assert_string_equal(r.value, "v-first");
}

/* backlog/append_once: a SEQ not above the highest stored for its KEY is
 * a duplicate: nothing appended, and the id is that of the entry that set
 * the highest SEQ. SEQs compare as numbers up to 2^63-1 (10 > 9), KEYs are
 * independent, and bad arguments are refused before anything is sent. */
static void
test_append_once(void **state)
{
    struct fx *f = *state;
    bool dup = true;
    struct res r;
    struct msg_id a1 = append_once(f, "o", "<a1/>", "k", 1, 10, &dup);
    assert_false(dup);
    struct msg_id d = append_once(f, "o", "<again/>", "k", 1, 10, &dup);
    assert_true(dup);
    assert_int_equal(msg_id_cmp(d, a1), 0);
    (void)append_once(f, "o", "<a9/>", "k", 9, 10, &dup);
    assert_false(dup);
    struct msg_id a10 = append_once(f, "o", "<a10/>", "k", 10, 10, &dup);
    assert_false(dup);
    d = append_once(f, "o", "<low/>", "k", 9, 10, &dup);   /* lower: dup */
    assert_true(dup);
    assert_int_equal(msg_id_cmp(d, a10), 0);
    (void)append_once(f, "o", "<other/>", "k2", 1, 10, &dup);   /* own KEY */
    assert_false(dup);
    struct msg_id big = append_once(f, "o", "<big/>", "k", RS_PUBID_SEQ_MAX,
                                    10, &dup);
    assert_false(dup);
    d = append_once(f, "o", "<big2/>", "k", RS_PUBID_SEQ_MAX - 1, 10, &dup);
    assert_true(dup);
    assert_int_equal(msg_id_cmp(d, big), 0);
    page(f, "o", ZERO, 20, 0, &r);
    assert_int_equal(r.n, 5);
    assert_string_equal(r.bodies[0], "<a1/>");
    assert_string_equal(r.bodies[3], "<other/>");
    assert_string_equal(r.bodies[4], "<big/>");
    /* the KEYs of other channels are their own */
    (void)append_once(f, "o2", "<a1/>", "k", 1, 10, &dup);
    assert_false(dup);
    memset(&r, 0, sizeof(r));
    assert_int_equal(backlog_append_once(f->b, "o", "<x/>", 4, CT, 0, "a b", 1,
                                         10, on_appended_once, &r), RS_EINVAL);
    assert_int_equal(backlog_append_once(f->b, "o", "<x/>", 4, CT, 0, "k", 0,
                                         10, on_appended_once, &r), RS_EINVAL);
    assert_int_equal(backlog_append_once(f->b, "o", "<x/>", 4, CT, 0, "k",
                                         RS_PUBID_SEQ_MAX + 1, 10,
                                         on_appended_once, &r), RS_EINVAL);
    assert_int_equal(backlog_append_once(f->b, "o", "<x/>", 4, CT, 0, "k", 1,
                                         0, on_appended_once, &r), RS_EINVAL);
    assert_int_equal(r.calls, 0);
}

/* backlog/append_once_lru: a channel keeps at most cap KEYs; a new one
 * drops the least recently used, a duplicate counting as a use, and a
 * forgotten KEY's resend is stored again. */
static void
test_append_once_lru(void **state)
{
    struct fx *f = *state;
    bool dup;
    struct res r;
    (void)append_once(f, "l", "<a/>", "a", 1, 3, &dup);
    (void)append_once(f, "l", "<b/>", "b", 1, 3, &dup);
    (void)append_once(f, "l", "<c/>", "c", 1, 3, &dup);
    (void)append_once(f, "l", "<a/>", "a", 1, 3, &dup);   /* a used again */
    assert_true(dup);
    (void)append_once(f, "l", "<d/>", "d", 1, 3, &dup);   /* b goes */
    assert_false(dup);
    (void)append_once(f, "l", "<a/>", "a", 1, 3, &dup);
    assert_true(dup);
    (void)append_once(f, "l", "<d/>", "d", 1, 3, &dup);
    assert_true(dup);
    (void)append_once(f, "l", "<b/>", "b", 1, 3, &dup);   /* forgotten */
    assert_false(dup);
    (void)append_once(f, "l", "<c/>", "c", 1, 3, &dup);   /* went for b */
    assert_false(dup);
    page(f, "l", ZERO, 20, 0, &r);
    assert_int_equal(r.n, 6);
    /* a lower cap (another node's, or a restart's) applies at once */
    (void)append_once(f, "l", "<e/>", "e", 1, 1, &dup);
    assert_false(dup);
    (void)append_once(f, "l", "<c/>", "c", 1, 1, &dup);
    assert_false(dup);
}

/* backlog/cancel: calls in flight at backlog_free (a blocked tail read, an
 * append, a page) each get RS_ECANCELED exactly once; free(NULL) is a
 * no-op. */
static void
test_cancel(void **state)
{
    struct fx *f = *state;
    struct msg_id a = append(f, "x", "<x/>", 0);
    const char *chans[] = { "x" };
    struct res t = { 0 }, ap = { 0 }, pg = { 0 };
    assert_int_equal(backlog_tail_read(f->b, chans, &a, 1, 4000, 10, on_tail, &t), 0);
    tu_loop_run_for(&f->loop, 50);
    assert_int_equal(backlog_append(f->b, "y", "<y/>", 4, CT, 0, on_appended, &ap), 0);
    assert_int_equal(backlog_page(f->b, "x", ZERO, 10, on_page, &pg), 0);
    backlog_free(f->b);
    f->b = NULL;
    assert_int_equal(t.calls, 1);
    assert_int_equal(t.rc, RS_ECANCELED);
    assert_int_equal(ap.calls, 1);
    assert_int_equal(ap.rc, RS_ECANCELED);
    assert_int_equal(pg.calls, 1);
    assert_int_equal(pg.rc, RS_ECANCELED);
    tu_loop_run_for(&f->loop, 50);   /* and nothing runs afterwards */
    assert_int_equal(t.calls + ap.calls + pg.calls, 3);
    backlog_free(NULL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test_setup_teardown(test_append_page, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost, setup, teardown),
        cmocka_unit_test_setup_teardown(test_page_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trim_age, setup, teardown),
        cmocka_unit_test_setup_teardown(test_topics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_once_lru, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
    };
    return cmocka_run_group_tests_name("backlog", tests, group_setup,
                                       group_teardown);
}
