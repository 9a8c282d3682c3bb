/* test_retry_after.c - Retry-After values (common/retry_after.c): delta-
 * seconds, the three HTTP-date forms against a given now, dates past,
 * blanks around, the saturation of huge values, and what is refused. */
#include "testutil.h"

#include <stdint.h>

#include "rs_retry_after.h"

/* Sun, 06 Nov 1994 08:49:37 GMT (RFC 9110 5.6.7's example) */
#define T_1994 INT64_C(784111777)

static uint64_t
ra(const char *v, int64_t now)
{
    uint64_t ms = 12345;
    int rc = rs_retry_after_parse(v, now, &ms);
    if (rc != 0)
        fail_msg("\"%s\" refused (%d)", v, rc);
    return ms;
}

static void
ra_refused(const char *v)
{
    uint64_t ms = 12345;
    int rc = rs_retry_after_parse(v, T_1994, &ms);
    if (rc != RS_EINVAL || ms != 12345)
        fail_msg("\"%s\" accepted or out changed (%d)", v ? v : "(null)", rc);
}

/* retry_after/delta_seconds: digits are seconds, blanks (and a CR LF left
 * on by a header callback) around them ignored. */
static void
test_delta(void **state)
{
    (void)state;
    assert_int_equal(ra("0", 0), 0);
    assert_int_equal(ra("120", 0), 120000);
    assert_int_equal(ra(" 3 ", 0), 3000);
    assert_int_equal(ra("\t7\r\n", 0), 7000);
    assert_int_equal(ra("007", 0), 7000);
}

/* retry_after/http_dates: IMF-fixdate, RFC 850 and asctime all read as
 * the same instant; the wait is counted from now; a date not in the
 * future is no wait. */
static void
test_dates(void **state)
{
    (void)state;
    assert_int_equal(ra("Sun, 06 Nov 1994 08:49:37 GMT", T_1994 - 90), 90000);
    assert_int_equal(ra("Sunday, 06-Nov-94 08:49:37 GMT", T_1994 - 90), 90000);
    assert_int_equal(ra("Sun Nov  6 08:49:37 1994", T_1994 - 90), 90000);
    assert_int_equal(ra(" Sun, 06 Nov 1994 08:49:37 GMT\r\n", T_1994 - 1), 1000);
    assert_int_equal(ra("Sun, 06 Nov 1994 08:49:37 GMT", T_1994), 0);
    assert_int_equal(ra("Sun, 06 Nov 1994 08:49:37 GMT", T_1994 + 3600), 0);
}

/* retry_after/saturates: a delta or a date beyond 2^31 s reads as 2^31 s
 * (no overflow, whatever the digits). */
static void
test_saturates(void **state)
{
    (void)state;
    uint64_t max = (uint64_t)RS_RETRY_AFTER_MAX_S * 1000;
    assert_int_equal(ra("2147483648", 0), max);
    assert_int_equal(ra("99999999999999999999999999999999", 0), max);
    assert_int_equal(ra("Fri, 01 Jan 2100 00:00:00 GMT", 0), max);
    assert_int_equal(ra("2147483647", 0), (uint64_t)2147483647 * 1000);
}

/* retry_after/refused: what is neither form is absent, and the output is
 * untouched. */
static void
test_refused(void **state)
{
    (void)state;
    ra_refused(NULL);
    ra_refused("");
    ra_refused("   ");
    ra_refused("-5");
    ra_refused("+5");
    ra_refused("5s");
    ra_refused("5 6");
    ra_refused("1.5");
    ra_refused("soon");
    ra_refused("06 Nov 1994 08:49:37 GMT");   /* digits first: not delta */
    ra_refused("Sun, 06 Nov 1994 08:49:37 GMT and then some more text "
               "that no date has in it");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        { "retry_after/delta_seconds", test_delta, NULL, NULL, NULL },
        { "retry_after/http_dates", test_dates, NULL, NULL, NULL },
        { "retry_after/saturates", test_saturates, NULL, NULL, NULL },
        { "retry_after/refused", test_refused, NULL, NULL, NULL },
    };
    return cmocka_run_group_tests_name("retry_after", tests, NULL, NULL);
}
