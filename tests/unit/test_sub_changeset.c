/* test_sub_changeset.c - subscriber/changeset.c (per URI, the newest
 * change the Change Lists report): the newest kept whichever order the
 * lists come in, unknown times, the cap, URIs longer than a string block,
 * growth past many index doublings, the walk, and failing allocations. */
#include "testutil.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "changeset.h"

#define S(x) ((rs_time_t)(x) * 1000000)

/* changeset/newest_wins: in document order a later entry replaces the
 * held one; an entry older than a held known time (a list sorted newest
 * first) does not; an unknown time replaces (document order decides). */
static void
test_newest_wins(void **state)
{
    struct changeset *cs = changeset_new(0);
    struct changeset_entry *e;

    (void)state;
    assert_non_null(cs);
    assert_null(changeset_find(cs, "http://x/a"));
    assert_int_equal(changeset_put(cs, "http://x/a", LEDGER_CREATE, S(10)), 0);
    assert_int_equal(changeset_put(cs, "http://x/a", LEDGER_UPDATE, S(20)), 0);
    e = changeset_find(cs, "http://x/a");
    assert_non_null(e);
    assert_int_equal(e->change, LEDGER_UPDATE);
    assert_true(e->dt == S(20));
    /* newest first: an older one after it changes nothing */
    assert_int_equal(changeset_put(cs, "http://x/a", LEDGER_CREATE, S(15)), 0);
    e = changeset_find(cs, "http://x/a");
    assert_int_equal(e->change, LEDGER_UPDATE);
    /* an unknown time (a 1.0 deletion) comes later in the document */
    assert_int_equal(changeset_put(cs, "http://x/a", LEDGER_DELETE,
                                   RS_TIME_NONE), 0);
    e = changeset_find(cs, "http://x/a");
    assert_int_equal(e->change, LEDGER_DELETE);
    assert_true(e->dt == RS_TIME_NONE);
    assert_int_equal(changeset_count(cs), 1);
    assert_null(changeset_find(cs, "http://x/b"));
    changeset_free(cs);
    changeset_free(NULL);
}

static int
count_unseen(void *ud, struct changeset_entry *e)
{
    size_t *n = ud;

    if (!e->seen)
        (*n)++;
    e->seen = true;
    return 0;
}

static int
stop_at_first(void *ud, struct changeset_entry *e)
{
    (void)ud;
    (void)e;
    return 7;
}

/* changeset/many_and_each: 100,000 URIs (many index doublings) are each
 * found with their own change; the walk visits each once, marks stick,
 * and a nonzero return stops it. */
static void
test_many_and_each(void **state)
{
    struct changeset *cs = changeset_new(0);
    char uri[64];
    size_t n = 0;

    (void)state;
    assert_non_null(cs);
    for (int i = 0; i < 100000; i++) {
        snprintf(uri, sizeof(uri), "http://example.org/r/%d", i);
        assert_int_equal(changeset_put(cs, uri, i % 3 + 1, S(i)), 0);
    }
    assert_int_equal(changeset_count(cs), 100000);
    for (int i = 0; i < 100000; i += 997) {
        struct changeset_entry *e;
        snprintf(uri, sizeof(uri), "http://example.org/r/%d", i);
        e = changeset_find(cs, uri);
        assert_non_null(e);
        assert_string_equal(e->uri, uri);
        assert_int_equal(e->change, i % 3 + 1);
        assert_true(e->dt == S(i));
    }
    assert_int_equal(changeset_each(cs, count_unseen, &n), 0);
    assert_int_equal(n, 100000);
    n = 0;
    assert_int_equal(changeset_each(cs, count_unseen, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(changeset_each(cs, stop_at_first, NULL), 7);
    changeset_free(cs);
}

/* changeset/cap_and_long_uris: past its cap a new URI is refused
 * (RS_ETOOBIG) while a held one still takes changes; a URI longer than a
 * string block is kept whole. */
static void
test_cap_and_long_uris(void **state)
{
    struct changeset *cs = changeset_new(3);
    size_t len = 100 * 1024;
    char *big = malloc(len + 1);

    (void)state;
    assert_non_null(cs);
    assert_non_null(big);
    memcpy(big, "http://x/", 9);
    memset(big + 9, 'a', len - 9);
    big[len] = '\0';
    assert_int_equal(changeset_put(cs, big, LEDGER_CREATE, S(1)), 0);
    assert_int_equal(changeset_put(cs, "http://x/2", LEDGER_CREATE, S(1)), 0);
    assert_int_equal(changeset_put(cs, "http://x/3", LEDGER_CREATE, S(1)), 0);
    assert_int_equal(changeset_put(cs, "http://x/4", LEDGER_CREATE, S(1)),
                     RS_ETOOBIG);
    assert_int_equal(changeset_put(cs, "http://x/3", LEDGER_DELETE, S(2)), 0);
    assert_int_equal(changeset_find(cs, "http://x/3")->change, LEDGER_DELETE);
    assert_non_null(changeset_find(cs, big));
    assert_int_equal(strlen(changeset_find(cs, big)->uri), len);
    assert_null(changeset_find(cs, "http://x/4"));
    free(big);
    changeset_free(cs);
}

/* changeset/alloc_failures: every allocation made while filling a set
 * fails in turn; each failure is RS_ENOMEM (or a NULL set) and leaks
 * nothing, and what was put before it is still found. */
static void
test_alloc_failures(void **state)
{
    char uri[64];

    (void)state;
    for (unsigned long n = 1;; n++) {
        struct changeset *cs;
        int rc = 0, i;
        unsigned long seen;

        tu_alloc_fail_at(n);
        cs = changeset_new(0);
        if (cs == NULL) {
            seen = tu_alloc_count();
            tu_alloc_fail_at(0);
            assert_true(seen >= n);
            continue;
        }
        for (i = 0; i < 3000 && rc == 0; i++) {
            snprintf(uri, sizeof(uri), "http://example.org/%d", i);
            rc = changeset_put(cs, uri, LEDGER_UPDATE, S(i));
        }
        seen = tu_alloc_count();
        tu_alloc_fail_at(0);
        if (rc == 0) {
            changeset_free(cs);
            assert_true(seen < n);    /* no failure left to inject */
            break;
        }
        assert_int_equal(rc, RS_ENOMEM);
        for (int k = 0; k < i - 1; k++) {
            snprintf(uri, sizeof(uri), "http://example.org/%d", k);
            assert_non_null(changeset_find(cs, uri));
        }
        changeset_free(cs);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        { "changeset/newest_wins", test_newest_wins, NULL, NULL, NULL },
        { "changeset/many_and_each", test_many_and_each, NULL, NULL, NULL },
        { "changeset/cap_and_long_uris", test_cap_and_long_uris, NULL, NULL,
          NULL },
        { "changeset/alloc_failures", test_alloc_failures, NULL, NULL,
          NULL },
    };

    return cmocka_run_group_tests_name("sub_changeset", tests, NULL, NULL);
}
