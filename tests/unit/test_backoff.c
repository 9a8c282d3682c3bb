/* test_backoff.c - the common retry schedule (common/backoff.c): the base
 * doubles up to the cap, jitter stays in its bounds and covers them, clamp
 * holds delays within [first, max], a cap under the first delay wins, the
 * same seed draws the same delays, and no doubling overflows. */
#include "testutil.h"

#include <stdbool.h>
#include <stdint.h>

#include "rs_backoff.h"

/* backoff/base_doubles_to_cap: 1 s, 2 s, 4 s ... held at the cap, n 0 and 1
 * alike, without jitter the delay is the base and draws nothing. */
static void
test_base_doubles(void **state)
{
    (void)state;
    struct rs_backoff b = { .first_ms = 1000, .max_ms = 10000 };
    rs_backoff_seed(&b, 7);
    uint64_t want[] = { 1000, 1000, 2000, 4000, 8000, 10000, 10000 };
    for (unsigned n = 0; n < sizeof(want) / sizeof(want[0]); n++) {
        assert_int_equal(rs_backoff_base(&b, n), want[n]);
        uint64_t rng = b.rng;
        assert_int_equal(rs_backoff_delay(&b, n), want[n]);
        assert_int_equal(b.rng, rng);
    }
    assert_int_equal(rs_backoff_base(&b, 4000000000u), 10000);
}

/* backoff/cap_under_first: a cap below the first delay is every delay (the
 * hub's --retry-max-delay 500ms against its 1 s first retry). */
static void
test_cap_under_first(void **state)
{
    (void)state;
    struct rs_backoff b = { .first_ms = 1000, .max_ms = 500 };
    rs_backoff_seed(&b, 1);
    assert_int_equal(rs_backoff_base(&b, 1), 500);
    assert_int_equal(rs_backoff_base(&b, 9), 500);
    b.clamp = 1;
    b.below_pct = b.above_pct = 20;
    for (int i = 0; i < 100; i++)
        assert_int_equal(rs_backoff_delay(&b, 3), 500);
}

/* backoff/jitter_bounds: +-20 % of 1000 draws within [800, 1200] and
 * reaches near both ends; [3/4 base, base] never exceeds the base. */
static void
test_jitter_bounds(void **state)
{
    (void)state;
    struct rs_backoff b = { .first_ms = 1000, .max_ms = 60000,
                            .below_pct = 20, .above_pct = 20 };
    rs_backoff_seed(&b, 12345);
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < 2000; i++) {
        uint64_t d = rs_backoff_delay(&b, 1);
        assert_true(d >= 800 && d <= 1200);
        lo = d < lo ? d : lo;
        hi = d > hi ? d : hi;
    }
    assert_true(lo < 820);
    assert_true(hi > 1180);
    struct rs_backoff r = { .first_ms = 40, .max_ms = 160, .below_pct = 25 };
    rs_backoff_seed(&r, 99);
    for (int i = 0; i < 1000; i++) {
        uint64_t d = rs_backoff_delay(&r, 3);
        assert_true(d >= 120 && d <= 160);
    }
}

/* backoff/clamp: with clamp, jitter never goes under the first delay nor
 * over the cap; without, it goes both ways. */
static void
test_clamp(void **state)
{
    (void)state;
    struct rs_backoff b = { .first_ms = 1000, .max_ms = 4000,
                            .below_pct = 10, .above_pct = 10, .clamp = 1 };
    rs_backoff_seed(&b, 3);
    bool at_first = false, at_cap = false;
    for (int i = 0; i < 1000; i++) {
        uint64_t d1 = rs_backoff_delay(&b, 1), d9 = rs_backoff_delay(&b, 9);
        assert_true(d1 >= 1000 && d1 <= 1100);
        assert_true(d9 >= 3600 && d9 <= 4000);
        at_first |= d1 == 1000;
        at_cap |= d9 == 4000;
    }
    assert_true(at_first && at_cap);
    b.clamp = 0;
    bool under = false, over = false;
    for (int i = 0; i < 1000; i++) {
        under |= rs_backoff_delay(&b, 1) < 1000;
        over |= rs_backoff_delay(&b, 9) > 4000;
    }
    assert_true(under && over);
}

/* backoff/seeded: the same seed draws the same delays, another seed other
 * ones; seed 0 still draws (xorshift would stay at 0). */
static void
test_seeded(void **state)
{
    (void)state;
    struct rs_backoff a = { .first_ms = 500, .max_ms = 8000, .below_pct = 50 };
    struct rs_backoff b = a, c = a, z = a;
    rs_backoff_seed(&a, 42);
    rs_backoff_seed(&b, 42);
    rs_backoff_seed(&c, 43);
    rs_backoff_seed(&z, 0);
    int same = 0;
    for (unsigned n = 1; n < 50; n++) {
        uint64_t da = rs_backoff_delay(&a, n);
        assert_int_equal(da, rs_backoff_delay(&b, n));
        same += da == rs_backoff_delay(&c, n);
    }
    assert_true(same < 10);
    assert_int_not_equal(rs_backoff_rand(&z), 0);
    assert_int_not_equal(rs_backoff_rand(&z), rs_backoff_rand(&z));
}

/* backoff/no_overflow: huge first delays and caps, and no cap at all,
 * neither wrap nor loop for ever. */
static void
test_no_overflow(void **state)
{
    (void)state;
    struct rs_backoff b = { .first_ms = UINT64_MAX / 3, .max_ms = 0,
                            .below_pct = 100, .above_pct = 100 };
    rs_backoff_seed(&b, 5);
    assert_int_equal(rs_backoff_base(&b, 3), UINT64_MAX);
    uint64_t d = rs_backoff_delay(&b, 3);
    (void)d;   /* any value: [0, UINT64_MAX] */
    struct rs_backoff c = { .first_ms = 1, .max_ms = 0 };
    assert_int_equal(rs_backoff_base(&c, 64), UINT64_C(1) << 63);
    assert_int_equal(rs_backoff_base(&c, 65), UINT64_MAX);
    assert_int_equal(rs_backoff_base(&c, 1000), UINT64_MAX);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        { "backoff/base_doubles_to_cap", test_base_doubles, NULL, NULL, NULL },
        { "backoff/cap_under_first", test_cap_under_first, NULL, NULL, NULL },
        { "backoff/jitter_bounds", test_jitter_bounds, NULL, NULL, NULL },
        { "backoff/clamp", test_clamp, NULL, NULL, NULL },
        { "backoff/seeded", test_seeded, NULL, NULL, NULL },
        { "backoff/no_overflow", test_no_overflow, NULL, NULL, NULL },
    };
    return cmocka_run_group_tests_name("backoff", tests, NULL, NULL);
}
