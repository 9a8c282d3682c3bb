/* test_strmap.c - rs_strmap: put and get, a key put twice, keys that share
 * long prefixes (the hub's topic URIs do), growth past 100,000 entries with
 * every key found again, a failed allocation losing nothing, clear. */
#include "testutil.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rs_alloc.h"
#include "rs_strmap.h"

static void
strmap_put_get(void **state)
{
    (void)state;
    struct rs_strmap m = { 0 };
    int a = 1, b = 2;

    assert_null(rs_strmap_get(&m, "a"));              /* empty, no table */
    assert_int_equal(rs_strmap_put(&m, "a", &a), 0);
    assert_int_equal(rs_strmap_put(&m, "b", &b), 0);
    assert_ptr_equal(rs_strmap_get(&m, "a"), &a);
    assert_ptr_equal(rs_strmap_get(&m, "b"), &b);
    assert_null(rs_strmap_get(&m, "c"));
    assert_null(rs_strmap_get(&m, ""));
    /* a key put twice keeps its first value */
    assert_int_equal(rs_strmap_put(&m, "a", &b), RS_EINVAL);
    assert_ptr_equal(rs_strmap_get(&m, "a"), &a);
    assert_int_equal(rs_strmap_put(&m, "c", NULL), RS_EINVAL);
    assert_int_equal(m.n, 2);
    rs_strmap_clear(&m);
    assert_null(rs_strmap_get(&m, "a"));
    assert_int_equal(rs_strmap_put(&m, "a", &b), 0);  /* usable again */
    assert_ptr_equal(rs_strmap_get(&m, "a"), &b);
    rs_strmap_clear(&m);
}

#define MANY 120000

static void
strmap_many(void **state)
{
    (void)state;
    struct rs_strmap m = { 0 };
    char (*keys)[64] = calloc(MANY, sizeof(*keys));
    assert_non_null(keys);

    for (int i = 0; i < MANY; i++) {
        snprintf(keys[i], sizeof(keys[i]),
                 "http://bench.example.org/s%d/changelist.xml", i);
        assert_int_equal(rs_strmap_put(&m, keys[i], keys[i]), 0);
    }
    assert_int_equal(m.n, MANY);
    assert_true(m.cap >= 2 * m.n);
    for (int i = 0; i < MANY; i++) {
        char probe[64];   /* another copy: compared, not the same pointer */
        snprintf(probe, sizeof(probe),
                 "http://bench.example.org/s%d/changelist.xml", i);
        assert_ptr_equal(rs_strmap_get(&m, probe), keys[i]);
    }
    assert_null(rs_strmap_get(&m, "http://bench.example.org/s-1/changelist.xml"));
    assert_null(rs_strmap_get(&m, "http://bench.example.org/s1/changelist.xm"));
    rs_strmap_clear(&m);
    free(keys);
}

/* Growing fails: the entries in stay found, and the next put succeeds. */
static void
strmap_alloc_failure(void **state)
{
    (void)state;
    struct rs_strmap m = { 0 };
    static char keys[40][8];

    for (int i = 0; i < 8; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%d", i);
        assert_int_equal(rs_strmap_put(&m, keys[i], keys[i]), 0);
    }
    size_t cap = m.cap;
    int i = 8;
    tu_alloc_fail_at(1);
    snprintf(keys[i], sizeof(keys[i]), "k%d", i);
    assert_int_equal(rs_strmap_put(&m, keys[i], keys[i]), RS_ENOMEM);
    tu_alloc_fail_at(0);
    assert_int_equal(m.cap, cap);
    assert_int_equal(m.n, 8);
    assert_null(rs_strmap_get(&m, "k8"));
    for (int j = 0; j < 8; j++)
        assert_ptr_equal(rs_strmap_get(&m, keys[j]), keys[j]);
    for (; i < 40; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%d", i);
        assert_int_equal(rs_strmap_put(&m, keys[i], keys[i]), 0);
    }
    for (int j = 0; j < 40; j++)
        assert_ptr_equal(rs_strmap_get(&m, keys[j]), keys[j]);
    rs_strmap_clear(&m);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        { "strmap/put_get", strmap_put_get, NULL, NULL, NULL },
        { "strmap/many", strmap_many, NULL, NULL, NULL },
        { "strmap/alloc_failure", strmap_alloc_failure, NULL, NULL, NULL },
    };
    return cmocka_run_group_tests_name("strmap", tests, NULL, NULL);
}
