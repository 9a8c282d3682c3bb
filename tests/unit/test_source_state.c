/* test_source_state.c - rssource's SQLite storage (source/state.c): one
 * writer per state, nested transactions, meta values, iterators, sequence
 * numbers that never go back, and the checkpoint thread. */
#include "testutil.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "state.h"

struct fx {
    char *dir;
    char db[4200];
    struct state *st;
};

static int
fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    f->dir = tu_mkdtemp();
    snprintf(f->db, sizeof(f->db), "%s/state.db", f->dir);
    char err[256];
    if (state_open(f->db, false, &f->st, err, sizeof(err)) != 0)
        fail_msg("state_open: %s", err);
    *state = f;
    return 0;
}

static int
fx_teardown(void **state)
{
    struct fx *f = *state;
    state_free(f->st);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* state/one_writer: a second writer on the same state is refused (it
 * would share the outbox); readers are not; state_free(NULL) is a
 * no-op. */
static void
test_one_writer(void **state)
{
    struct fx *f = *state;
    assert_true(state_is_new(f->st));
    struct state *other = NULL, *reader = NULL;
    char err[256] = "";
    assert_int_equal(state_open(f->db, false, &other, err, sizeof(err)),
                     RS_ESTATE);
    assert_null(other);
    assert_non_null(strstr(err, "in use"));
    assert_int_equal(state_open(f->db, true, &reader, err, sizeof(err)), 0);
    state_free(reader);
    state_free(f->st);
    assert_int_equal(state_open(f->db, false, &f->st, err, sizeof(err)), 0);
    assert_false(state_is_new(f->st));
    state_free(NULL);
    state_iter_free(NULL);
}

/* state/newer_schema: a state of a later rssource is refused, saying its
 * version and the one this rssource reads (it said "unknown"). */
static void
test_newer_schema(void **state)
{
    struct fx *f = *state;
    char err[256] = "";
    assert_int_equal(state_meta_set(f->st, "schema", 7), 0);
    state_free(f->st);
    f->st = NULL;
    assert_int_equal(state_open(f->db, false, &f->st, err, sizeof(err)),
                     RS_EINVAL);
    assert_non_null(strstr(err, "schema version 7, newer than this "
                                "rssource's 1"));
}

/* state/transactions_nest: only the outermost commit writes; a rollback
 * drops everything since the outermost begin. */
static void
test_transactions(void **state)
{
    struct fx *f = *state;
    int64_t v = 0;
    assert_int_equal(state_begin(f->st), 0);
    assert_int_equal(state_begin(f->st), 0);
    assert_int_equal(state_meta_set(f->st, "k", 1), 0);
    assert_int_equal(state_commit(f->st), 0);
    state_rollback(f->st);
    assert_int_equal(state_meta_get(f->st, "k", &v), RS_ENOTFOUND);
    assert_int_equal(state_begin(f->st), 0);
    assert_int_equal(state_meta_set(f->st, "k", 7), 0);
    assert_int_equal(state_commit(f->st), 0);
    assert_int_equal(state_meta_get(f->st, "k", &v), 0);
    assert_int_equal(v, 7);
    assert_int_equal(state_commit(f->st), RS_ESTATE);
}

/* state/meta_text: text values round-trip; a short buffer is RS_ETOOBIG;
 * an integer key has no text. */
static void
test_meta_text(void **state)
{
    struct fx *f = *state;
    char buf[64];
    assert_int_equal(state_meta_set_text(f->st, "t", "http://x.example/"), 0);
    assert_int_equal(state_meta_get_text(f->st, "t", buf, sizeof(buf)), 0);
    assert_string_equal(buf, "http://x.example/");
    assert_int_equal(state_meta_get_text(f->st, "t", buf, 5), RS_ETOOBIG);
    assert_int_equal(state_meta_get_text(f->st, "schema", buf, sizeof(buf)),
                     RS_ENOTFOUND);
}

/* state/resource_ranges: iteration beneath a directory takes exactly its
 * descendants ("a/b/..." but not "a/b.txt" or "a/bc"), in byte order. */
static void
test_ranges(void **state)
{
    struct fx *f = *state;
    const char *paths[] = { "a/b.txt", "a/b/c", "a/b/d/e", "a/bc", "a/b",
                            "b" };
    for (size_t i = 0; i < 6; i++) {
        struct state_res r = { .path = paths[i], .type = "x" };
        assert_int_equal(state_res_put(f->st, &r), 0);
    }
    struct state_iter *it;
    assert_int_equal(state_res_iter(f->st, "a/b", &it), 0);
    struct state_res r;
    assert_int_equal(state_res_next(it, &r), 1);
    assert_string_equal(r.path, "a/b/c");
    assert_int_equal(state_res_next(it, &r), 1);
    assert_string_equal(r.path, "a/b/d/e");
    assert_int_equal(state_res_next(it, &r), 0);
    state_iter_free(it);
    assert_int_equal(state_res_count(f->st), 6);
    /* the cheap question asks the same range */
    assert_int_equal(state_res_any_beneath(f->st, "a/b"), 1);
    assert_int_equal(state_res_any_beneath(f->st, "a/b/d"), 1);
    assert_int_equal(state_res_any_beneath(f->st, "a/bc"), 0);
    assert_int_equal(state_res_any_beneath(f->st, "a/b.txt"), 0);
    assert_int_equal(state_res_any_beneath(f->st, "b"), 0);
    assert_int_equal(state_res_any_beneath(f->st, "a/b/c"), 0);
}

/* Count an iterator's rows to its end, then free it. */
static int
drain_count(struct state_iter *it)
{
    struct state_res r;
    int n = 0;
    while (state_res_next(it, &r) == 1)
        n++;
    state_iter_free(it);
    return n;
}

/* state/iter_reuse: iterators keep their statements prepared; two open
 * at once on the same query each walk all of it, and a reused statement
 * runs with its new bindings, after writes, not its last ones. */
static void
test_iter_reuse(void **state)
{
    struct fx *f = *state;
    const char *paths[] = { "a/b/c", "a/b/d", "a/x", "b" };
    for (size_t i = 0; i < 4; i++) {
        struct state_res r = { .path = paths[i], .type = "x" };
        assert_int_equal(state_res_put(f->st, &r), 0);
    }
    for (int round = 0; round < 3; round++) {
        struct state_iter *one, *two;
        struct state_res r;
        assert_int_equal(state_res_iter(f->st, "a/b", &one), 0);
        assert_int_equal(state_res_next(one, &r), 1);
        assert_string_equal(r.path, "a/b/c");
        assert_int_equal(state_res_iter(f->st, "a/b", &two), 0);
        assert_int_equal(drain_count(two), 2);
        assert_int_equal(state_res_next(one, &r), 1);
        assert_string_equal(r.path, "a/b/d");
        assert_int_equal(state_res_next(one, &r), 0);
        state_iter_free(one);
        assert_int_equal(state_res_iter(f->st, "a", &one), 0);
        assert_int_equal(drain_count(one), 3 + round);
        struct state_res more = { .path = round == 0 ? "a/y" : "a/z",
                                  .type = "x" };
        if (round < 2)
            assert_int_equal(state_res_put(f->st, &more), 0);
    }
    /* more iterators at once than the statements kept */
    struct state_iter *many[12];
    for (int i = 0; i < 12; i++)
        assert_int_equal(state_res_iter(f->st, "a/b", &many[i]), 0);
    for (int i = 0; i < 12; i++)
        assert_int_equal(drain_count(many[i]), 2);
}

/* state/checkpointer: with the checkpoint thread running, commits go on,
 * the WAL is folded into the database, and stopping it is clean. */
static void
test_checkpointer(void **state)
{
    struct fx *f = *state;
    assert_int_equal(state_checkpointer_start(f->st, 20), 0);
    assert_int_equal(state_checkpointer_start(f->st, 20), RS_ESTATE);
    for (int round = 0; round < 5; round++) {
        assert_int_equal(state_begin(f->st), 0);
        for (int i = 0; i < 500; i++) {
            char p[32];
            snprintf(p, sizeof(p), "r%d-%d", round, i);
            struct state_res r = { .path = p, .type = "text/plain" };
            assert_int_equal(state_res_put(f->st, &r), 0);
        }
        assert_int_equal(state_commit(f->st), 0);
        usleep(30000);
    }
    usleep(100000);
    char db[4300];
    struct stat st;
    snprintf(db, sizeof(db), "%s", f->db);
    assert_int_equal(stat(db, &st), 0);
    assert_true(st.st_size > 50000);     /* pages reached the database */
    int others = 0;     /* the thread leaves signals to the loop's */
    assert_int_equal(tu_threads_unblocked(SIGTERM, &others), 0);
    assert_true(others >= 1);     /* and TSan's own thread, under TSan */
    state_checkpointer_stop(f->st);
    state_checkpointer_stop(f->st);      /* stopping twice is fine */
    assert_int_equal(state_res_count(f->st), 2500);
    /* a running checkpointer is stopped by state_free */
    assert_int_equal(state_checkpointer_start(f->st, 10), 0);
}

/* state/wal_bounded: the WAL starts over only after a checkpoint that
 * ends while the writer is between transactions; rssource at 5,000
 * changes/s gave its checkpointer thread no such moment, and its WAL grew
 * to 600 MB in 15 s. A commit that leaves 16,000 frames checkpoints
 * itself, and the WAL stays near that, the thread's interval
 * notwithstanding. */
static void
test_wal_bounded(void **state)
{
    struct fx *f = *state;
    char wal[4300], p[4000];
    struct stat st;
    off_t most = 0;

    snprintf(wal, sizeof(wal), "%s-wal", f->db);
    assert_int_equal(state_checkpointer_start(f->st, 60000), 0);
    for (int round = 0; round < 200; round++) {
        assert_int_equal(state_begin(f->st), 0);
        for (int i = 0; i < 80; i++) {     /* rows of a page or more */
            snprintf(p, sizeof(p), "r%d/%03500d", round, i);
            struct state_res r = { .path = p, .type = "text/plain" };
            assert_int_equal(state_res_put(f->st, &r), 0);
        }
        assert_int_equal(state_commit(f->st), 0);
        if (stat(wal, &st) == 0 && st.st_size > most)
            most = st.st_size;
    }
    /* 16,000 frames and a few transactions' (the commit at the bound
     * finds the thread checkpointing: the next one tries again), of 4 KiB
     * and a 24-byte header */
    if (most >= (off_t)(16000 + 1000) * 4120)
        fail_msg("the WAL grew to %lld bytes", (long long)most);
    assert_int_equal(state_res_count(f->st), 200 * 80);
}

#define TS(name, fn) { name, fn, fx_setup, fx_teardown, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TS("state/one_writer", test_one_writer),
        TS("state/newer_schema", test_newer_schema),
        TS("state/transactions_nest", test_transactions),
        TS("state/meta_text", test_meta_text),
        TS("state/resource_ranges", test_ranges),
        TS("state/iter_reuse", test_iter_reuse),
        TS("state/checkpointer", test_checkpointer),
        TS("state/wal_bounded", test_wal_bounded),
    };
    return cmocka_run_group_tests_name("source_state", tests, NULL, NULL);
}
