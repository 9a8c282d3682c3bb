/* test_source_changelog.c - the change log's policy (source/changelog.c):
 * strictly increasing datetimes, Change List rotation at the page size
 * and by age, retention that never drops what was not pushed nor what
 * the Resource List served needs, and the framework events rotations
 * leave behind. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "changelog.h"
#include "state.h"

#define T0 ((rs_time_t)1700000000 * 1000000)   /* an arbitrary "now" */
#define SEC ((rs_time_t)1000000)

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

static struct changelog *
fx_log(struct fx *f, int64_t max_entries, int64_t max_age_ms,
       int64_t retain_ms, rs_time_t now)
{
    struct changelog_opts o = { .max_entries = max_entries,
                                .max_age_ms = max_age_ms,
                                .retain_ms = retain_ms };
    const char *err;
    struct changelog *cl = changelog_new(f->st, &o, now, &err);
    if (cl == NULL)
        fail_msg("changelog_new: %s", err);
    return cl;
}

static void
fx_record(struct changelog *cl, struct state *st, const char *path,
          rs_time_t now)
{
    struct state_change c = { .path = path, .change = RS_CHANGE_UPDATED,
                              .size = 1, .type = "text/plain",
                              .lastmod = now };
    assert_int_equal(changelog_record(cl, &c, now), 0);
    (void)st;
}

/* Record n changes in one transaction, all at time now. */
static void
fx_record_n(struct changelog *cl, struct state *st, int n, rs_time_t now)
{
    assert_int_equal(state_begin(st), 0);
    for (int i = 0; i < n; i++) {
        char p[32];
        snprintf(p, sizeof(p), "f%d", i);
        fx_record(cl, st, p, now);
    }
    assert_int_equal(state_commit(st), 0);
}

static struct state_clist
fx_list(struct fx *f, int64_t num)
{
    struct state_clist c;
    assert_int_equal(state_clist_get(f->st, num, &c), 0);
    return c;
}

/* Framework events so far: "change name;..." */
static const char *
fx_fw(struct fx *f)
{
    static char out[1024];
    out[0] = '\0';
    struct state_iter *it;
    assert_int_equal(state_fw_iter(f->st, 0, 0, &it), 0);
    struct state_fw e;
    while (state_fw_next(it, &e) == 1) {
        size_t n = strlen(out);
        snprintf(out + n, sizeof(out) - n, "%s%s %s", n ? ";" : "",
                 rs_change_name(e.change), e.name);
        assert_string_equal(e.index, CHANGELOG_INDEX_NAME);
        assert_int_equal(e.cap, RS_CAP_CHANGELIST);
    }
    state_iter_free(it);
    return out;
}

/* changelog/first_list: a new state gets Change List 1, open, from now,
 * announced as created. */
static void
test_first_list(void **state)
{
    struct fx *f = *state;
    struct changelog *cl = fx_log(f, 10, 0, 0, T0);
    assert_int_equal(changelog_current(cl), 1);
    struct state_clist c = fx_list(f, 1);
    assert_int_equal(c.from, T0);
    assert_true(c.until == RS_TIME_NONE);
    assert_int_equal(c.count, 0);
    assert_string_equal(fx_fw(f), "created changelist-1.xml");
    changelog_free(cl);
    /* reopening keeps it */
    cl = fx_log(f, 10, 0, 0, T0 + SEC);
    assert_int_equal(changelog_current(cl), 1);
    assert_string_equal(fx_fw(f), "created changelist-1.xml");
    changelog_free(cl);
}

/* changelog/datetimes_increase: changes recorded at the same instant, or
 * with the clock stepping back, still get strictly increasing datetimes,
 * also across a restart. */
static void
test_datetimes(void **state)
{
    struct fx *f = *state;
    struct changelog *cl = fx_log(f, 100, 0, 0, T0);
    fx_record_n(cl, f->st, 3, T0 + 10);
    assert_int_equal(state_begin(f->st), 0);
    fx_record(cl, f->st, "back", T0 - 5 * SEC);
    assert_int_equal(state_commit(f->st), 0);
    changelog_free(cl);
    cl = fx_log(f, 100, 0, 0, T0);
    assert_int_equal(state_begin(f->st), 0);
    fx_record(cl, f->st, "after-restart", T0 - 10 * SEC);
    assert_int_equal(state_commit(f->st), 0);
    struct state_iter *it;
    assert_int_equal(state_change_iter(f->st, 0, 0, 0, &it), 0);
    struct state_change c;
    rs_time_t prev = RS_TIME_NONE;
    int n = 0;
    while (state_change_next(it, &c) == 1) {
        if (prev != RS_TIME_NONE)
            assert_true(c.dt > prev);
        prev = c.dt;
        n++;
    }
    state_iter_free(it);
    assert_int_equal(n, 5);
    assert_int_equal(prev, T0 + 10 + 4);
    changelog_free(cl);
}

/* changelog/rotation_at_page_size: at exactly RS_MAX_ENTRIES (50,000)
 * changes the list closes; change 50,001 opens list 2, from the closed
 * list's until. */
static void
test_rotation_boundary(void **state)
{
    struct fx *f = *state;
    struct changelog *cl = fx_log(f, RS_MAX_ENTRIES, 0, 0, T0);
    fx_record_n(cl, f->st, RS_MAX_ENTRIES - 1, T0 + SEC);
    assert_int_equal(changelog_current(cl), 1);
    assert_true(fx_list(f, 1).until == RS_TIME_NONE);
    fx_record_n(cl, f->st, 1, T0 + SEC);
    assert_int_equal(changelog_current(cl), 2);
    struct state_clist one = fx_list(f, 1), two = fx_list(f, 2);
    assert_int_equal(one.count, RS_MAX_ENTRIES);
    assert_true(one.until != RS_TIME_NONE);
    assert_int_equal(two.from, one.until);
    assert_true(two.until == RS_TIME_NONE);
    assert_int_equal(two.count, 0);
    fx_record_n(cl, f->st, 1, T0 + 2 * SEC);
    assert_int_equal(fx_list(f, 2).count, 1);
    /* every change of list 1 is inside [from, until] */
    struct state_iter *it;
    assert_int_equal(state_change_iter(f->st, 1, 0, 0, &it), 0);
    struct state_change c;
    int n = 0;
    while (state_change_next(it, &c) == 1) {
        assert_true(c.dt >= one.from && c.dt <= one.until);
        n++;
    }
    state_iter_free(it);
    assert_int_equal(n, RS_MAX_ENTRIES);
    assert_string_equal(fx_fw(f), "created changelist-1.xml;"
                                  "updated changelist-1.xml;"
                                  "created changelist-2.xml");
    changelog_free(cl);
}

/* changelog/rotation_by_age: a non-empty list older than max_age closes at
 * the tick; an empty one stays open however old. */
static void
test_rotation_age(void **state)
{
    struct fx *f = *state;
    struct changelog *cl = fx_log(f, 1000, 3600 * 1000, 0, T0);
    assert_int_equal(changelog_tick(cl, T0 + 7200 * SEC, 0, RS_TIME_NONE), 0);
    assert_int_equal(changelog_current(cl), 1);           /* empty */
    fx_record_n(cl, f->st, 2, T0 + 7200 * SEC);
    assert_int_equal(changelog_tick(cl, T0 + 7201 * SEC, 2, RS_TIME_NONE), 0);
    assert_int_equal(changelog_current(cl), 2);
    assert_int_equal(fx_list(f, 1).until, T0 + 7201 * SEC);
    assert_int_equal(fx_list(f, 2).from, T0 + 7201 * SEC);
    /* list 2 is young: no rotation */
    fx_record_n(cl, f->st, 1, T0 + 7300 * SEC);
    assert_int_equal(changelog_tick(cl, T0 + 7400 * SEC, 3, RS_TIME_NONE), 0);
    assert_int_equal(changelog_current(cl), 2);
    changelog_free(cl);
}

/* changelog/retention: closed lists past the retention are dropped with
 * their changes, oldest first, but never the open list nor one holding a
 * change the hub has not accepted. */
static void
test_retention(void **state)
{
    struct fx *f = *state;
    struct changelog *cl = fx_log(f, 2, 0, 24 * 3600 * 1000, T0);
    fx_record_n(cl, f->st, 2, T0 + SEC);        /* list 1: seq 1-2 */
    fx_record_n(cl, f->st, 2, T0 + 2 * SEC);    /* list 2: seq 3-4 */
    fx_record_n(cl, f->st, 1, T0 + 3 * SEC);    /* list 3 (open): seq 5 */
    assert_int_equal(changelog_current(cl), 3);
    rs_time_t later = T0 + 3 * 24 * 3600 * SEC;
    /* the hub accepted only seq 2: list 2 must stay */
    assert_int_equal(changelog_tick(cl, later, 2, RS_TIME_NONE), 0);
    assert_int_equal(state_clist_count(f->st), 2);
    struct state_clist c;
    assert_int_equal(state_clist_get(f->st, 1, &c), RS_ENOTFOUND);
    /* everything accepted: list 2 goes too, the open list stays */
    assert_int_equal(changelog_tick(cl, later, 5, RS_TIME_NONE), 0);
    assert_int_equal(state_clist_count(f->st), 1);
    assert_int_equal(fx_list(f, 3).count, 1);
    struct state_iter *it;
    assert_int_equal(state_change_iter(f->st, 0, 0, 0, &it), 0);
    struct state_change ch;
    int n = 0;
    while (state_change_next(it, &ch) == 1)
        n++;
    state_iter_free(it);
    assert_int_equal(n, 1);
    /* seqs never go back, even with the old rows gone */
    assert_int_equal(state_change_last_seq(f->st), 5);
    changelog_free(cl);
}

/* changelog/retention_keeps_from: a closed list reaching keep_from (the
 * `at` of the Resource List or Dump served) is kept past the retention
 * and the tick says it held; once keep_from passes it, it goes. */
static void
test_retention_keeps_from(void **state)
{
    struct fx *f = *state;
    struct changelog *cl = fx_log(f, 2, 0, 3000, T0);
    fx_record_n(cl, f->st, 2, T0 + SEC);        /* list 1: to T0+1s+1us */
    fx_record_n(cl, f->st, 2, T0 + 5 * SEC);    /* list 2: to T0+5s+1us */
    fx_record_n(cl, f->st, 1, T0 + 6 * SEC);    /* list 3 (open) */
    rs_time_t later = T0 + 60 * SEC;            /* lists 1, 2 expired */
    /* served at T0 + 1 s: list 1 ends after it: both lists stay */
    assert_int_equal(changelog_tick(cl, later, 5, T0 + SEC), 0);
    assert_true(changelog_held(cl));
    assert_int_equal(state_clist_count(f->st), 3);
    /* served at T0 + 2 s: list 1 ended before, list 2 reaches it */
    assert_int_equal(changelog_tick(cl, later, 5, T0 + 2 * SEC), 0);
    assert_true(changelog_held(cl));
    assert_int_equal(state_clist_count(f->st), 2);
    struct state_clist c;
    assert_int_equal(state_clist_get(f->st, 1, &c), RS_ENOTFOUND);
    assert_int_equal(fx_list(f, 2).count, 2);
    /* a newer Resource List: list 2 goes, nothing is held */
    assert_int_equal(changelog_tick(cl, later, 5, T0 + 50 * SEC), 0);
    assert_false(changelog_held(cl));
    assert_int_equal(state_clist_count(f->st), 1);
    /* no list expired: nothing held whatever keep_from says */
    fx_record_n(cl, f->st, 1, later);           /* closes list 3 */
    assert_int_equal(changelog_tick(cl, later + SEC, 6, T0), 0);
    assert_false(changelog_held(cl));
    assert_int_equal(state_clist_count(f->st), 2);
    changelog_free(cl);
}

/* changelog/rollback_reload: a rolled-back batch leaves no trace in the
 * policy's memory (count, open list). */
static void
test_rollback(void **state)
{
    struct fx *f = *state;
    struct changelog *cl = fx_log(f, 3, 0, 0, T0);
    fx_record_n(cl, f->st, 2, T0 + SEC);
    assert_int_equal(state_begin(f->st), 0);
    fx_record(cl, f->st, "x", T0 + 2 * SEC);      /* would close list 1 */
    assert_int_equal(changelog_current(cl), 2);
    state_rollback(f->st);
    changelog_reload(cl);
    assert_int_equal(changelog_current(cl), 1);
    fx_record_n(cl, f->st, 1, T0 + 3 * SEC);
    assert_int_equal(changelog_current(cl), 2);
    assert_int_equal(fx_list(f, 1).count, 3);
    changelog_free(cl);
}

#define TC(name, fn) { name, fn, fx_setup, fx_teardown, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TC("changelog/first_list", test_first_list),
        TC("changelog/datetimes_increase", test_datetimes),
        TC("changelog/rotation_at_page_size", test_rotation_boundary),
        TC("changelog/rotation_by_age", test_rotation_age),
        TC("changelog/retention", test_retention),
        TC("changelog/retention_keeps_from", test_retention_keeps_from),
        TC("changelog/rollback_reload", test_rollback),
    };
    return cmocka_run_group_tests_name("source_changelog", tests, NULL, NULL);
}
