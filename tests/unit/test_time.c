/* test_time.c - W3C Datetime parsing, formatting and the calendar behind
 * them (proto/time.c). */
#include "testutil.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "rs_time.h"

#define SEC INT64_C(1000000)
#define DAY (86400 * SEC)
#define T_0000 INT64_C(-62167219200000000)      /* 0000-01-01T00:00:00Z */
/* 9999-12-31T23:59:59.999999Z */
#define T_MAX INT64_C(253402300799999999)
#define T_2013 INT64_C(1356998400000000)        /* 2013-01-01T00:00:00Z */

/* Parse a C string; fails the test unless it parses. */
static rs_time_t
tt_parse(const char *s)
{
    rs_time_t t = 0;
    int rc = rs_time_parse(s, strlen(s), &t);
    if (rc != 0)
        fail_msg("\"%s\" refused (%d)", s, rc);
    return t;
}

/* Is s refused, leaving the output untouched? */
static void
tt_refused(const char *s)
{
    rs_time_t t = 42;
    int rc = rs_time_parse(s, strlen(s), &t);
    if (rc != RS_EINVAL || t != 42)
        fail_msg("\"%s\" accepted or out changed (%d)", s, rc);
}

static void
tt_formats_as(rs_time_t t, const char *want)
{
    char buf[RS_TIME_BUFSZ];
    size_t n = rs_time_format(t, buf);
    assert_string_equal(buf, want);
    assert_int_equal(n, strlen(want));
}

/* time/granularities: every W3C granularity parses to the start of its
 * period. */
static void
test_granularities(void **state)
{
    (void)state;
    assert_true(tt_parse("2013") == T_2013);
    assert_true(tt_parse("2013-05") == INT64_C(1367366400000000));
    assert_true(tt_parse("2013-05-07") == INT64_C(1367884800000000));
    assert_true(tt_parse("2013-05-07T10:20Z") == INT64_C(1367922000000000));
    assert_true(tt_parse("2013-05-07T10:20:30Z") == INT64_C(1367922030000000));
    assert_true(tt_parse("2013-05-07T10:20:30.5Z")
                == INT64_C(1367922030500000));
}

/* time/fraction: fractions of any length are accepted; digits past the
 * microsecond are truncated, never rounded. */
static void
test_fraction(void **state)
{
    (void)state;
    rs_time_t base = T_2013;
    assert_true(tt_parse("2013-01-01T00:00:00.1Z") == base + 100000);
    assert_true(tt_parse("2013-01-01T00:00:00.000001Z") == base + 1);
    assert_true(tt_parse("2013-01-01T00:00:00.123456Z") == base + 123456);
    assert_true(tt_parse("2013-01-01T00:00:00.1234569Z") == base + 123456);
    assert_true(tt_parse("2013-01-01T00:00:00.9999999999999999999999Z")
                == base + 999999);
    assert_true(tt_parse("2013-01-01T00:00:00.0000001Z") == base);
    assert_true(tt_parse("2013-01-01T00:00:00.000Z") == base);
}

/* time/offsets: +hh:mm and -hh:mm are normalised to UTC, including offsets
 * that move the instant into another day, month or year. */
static void
test_offsets(void **state)
{
    (void)state;
    rs_time_t t = tt_parse("2013-05-07T10:20:30Z");
    assert_true(tt_parse("2013-05-07T11:20:30+01:00") == t);
    assert_true(tt_parse("2013-05-07T04:50:30-05:30") == t);
    assert_true(tt_parse("2013-05-07T10:20:30+00:00") == t);
    assert_true(tt_parse("2013-05-07T10:20:30-00:00") == t);
    assert_true(tt_parse("2013-05-08T10:19:30+23:59") == t);
    assert_true(tt_parse("2013-05-07T10:20+00:00")
                == tt_parse("2013-05-07T10:20Z"));
    /* negative offset crossing midnight into the next year */
    assert_true(tt_parse("2012-12-31T22:00:00-05:00")
                == tt_parse("2013-01-01T03:00:00Z"));
    /* positive offset crossing back into the previous year */
    assert_true(tt_parse("2013-01-01T01:00:00.25+02:00")
                == tt_parse("2012-12-31T23:00:00.25Z"));
    /* into a leap day */
    assert_true(tt_parse("2012-02-28T20:00:00-05:00")
                == tt_parse("2012-02-29T01:00:00Z"));
    assert_true(tt_parse("2012-03-01T01:00:00+02:00")
                == tt_parse("2012-02-29T23:00:00Z"));
}

/* time/boundaries: the first and last representable instants, the epoch
 * and the microsecond before it; offsets that would leave 0000..9999 are
 * refused because the result could not be written back. */
static void
test_boundaries(void **state)
{
    (void)state;
    assert_true(tt_parse("0000") == T_0000);
    assert_true(tt_parse("0000-01-01T00:00:00Z") == T_0000);
    assert_true(tt_parse("9999-12-31T23:59:59.999999Z") == T_MAX);
    assert_true(tt_parse("9999-12-31T23:59:59.9999999Z") == T_MAX);
    assert_true(tt_parse("0001-01-01") == INT64_C(-62135596800000000));
    assert_true(tt_parse("1970-01-01T00:00:00Z") == 0);
    assert_true(tt_parse("1970") == 0);
    assert_true(tt_parse("1969-12-31T23:59:59.999999Z") == -1);
    assert_true(tt_parse("1970-01-01T00:00:00+00:01") == -60 * SEC);
    assert_true(tt_parse("0000-01-01T00:00-01:00") == T_0000 + 3600 * SEC);
    assert_true(tt_parse("9999-12-31T23:59+00:01") == T_MAX + 1 - 2 * 60 * SEC);
    tt_refused("0000-01-01T00:00:00+00:01");
    tt_refused("9999-12-31T23:59:59-00:01");
    tt_refused("9999-12-31T23:59:00.5-00:01");
}

/* time/leap_years: Feb 29 exists exactly in Gregorian leap years (1900 and
 * 2100 are not, 2000, 2400 and year 0 are) and month lengths are right. */
static void
test_leap_years(void **state)
{
    (void)state;
    assert_true(tt_parse("2000-02-29") == INT64_C(951782400000000));
    assert_true(tt_parse("1600-02-29") == INT64_C(-11670998400000000));
    assert_true(tt_parse("2012-02-29T12:00Z") > 0);
    assert_true(tt_parse("2400-02-29") > 0);
    assert_true(tt_parse("0000-02-29") == T_0000 + 59 * DAY);
    tt_refused("1900-02-29");
    tt_refused("2100-02-29");
    tt_refused("2013-02-29");
    tt_refused("2013-02-30");
    tt_refused("2012-02-30");
    assert_true(tt_parse("1900-03-01") == INT64_C(-2203891200000000));
    assert_true(tt_parse("1900-03-01") - tt_parse("1900-02-28") == DAY);
    static const char *const last[] = {
        "2013-01-31", "2013-03-31", "2013-04-30", "2013-05-31", "2013-06-30",
        "2013-07-31", "2013-08-31", "2013-09-30", "2013-10-31", "2013-11-30",
        "2013-12-31",
    };
    static const char *const past[] = {
        "2013-01-32", "2013-03-32", "2013-04-31", "2013-05-32", "2013-06-31",
        "2013-07-32", "2013-08-32", "2013-09-31", "2013-10-32", "2013-11-31",
        "2013-12-32",
    };
    for (size_t i = 0; i < sizeof(last) / sizeof(last[0]); i++) {
        (void)tt_parse(last[i]);
        tt_refused(past[i]);
    }
}

/* time/whitespace: leading and trailing XML whitespace is ignored; other
 * spaces (inside, or not XML whitespace) are not. */
static void
test_whitespace(void **state)
{
    (void)state;
    assert_true(tt_parse(" \t\r\n2013-01-01T00:00:00Z \t\r\n") == T_2013);
    assert_true(tt_parse("\n2013\n") == T_2013);
    tt_refused("2013-01-01 T00:00:00Z");
    tt_refused("2013-01-01T00:00:00 Z");
    tt_refused("\f2013");
    tt_refused("\xc2\xa0" "2013");
    tt_refused(" \t\r\n");
}

/* time/malformed: each way a W3C Datetime can be broken is refused and
 * the output is left alone. */
static void
test_malformed(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "", "2", "201", "20130", "2013-", "2013-1", "2013-001", "2013-00",
        "2013-13", "2013-1-01", "2013-01-", "2013-01-1", "2013-01-00",
        "2013-01-001", "2013/01/01", "2013-01-01T", "2013-01-01Z",
        "2013-01-01T10Z", "2013-01-01T10:00", "2013-01-01T10:00:00",
        "2013-01-01T10:00:00.5", "2013-01-01T1:00Z", "2013-01-01T10:0Z",
        "2013-01-01T10:00:0Z", "2013-01-01T24:00Z", "2013-01-01T24:00:00Z",
        "2013-01-01T23:60Z", "2013-01-01T23:59:60Z", "2013-01-01T23:59:99Z",
        "2013-01-01T10:00:00.Z", "2013-01-01T10:00:00,5Z",
        "2013-01-01T10:00:00.5.5Z", "2013-01-01t10:00Z", "2013-01-01T10:00z",
        "2013-01-01 10:00Z", "2013-01-01T10:00+0100", "2013-01-01T10:00+01",
        "2013-01-01T10:00+1:00", "2013-01-01T10:00+01:0",
        "2013-01-01T10:00+24:00", "2013-01-01T10:00+01:60",
        "2013-01-01T10:00+01:00:00", "2013-01-01T10:00ZZ",
        "2013-01-01T10:00Z junk", "2013-01-01T10:00:00Z0", "+2013", "-2013",
        "10000", "10000-01-01", "abcd", "2O13", "2013-0x-01", "2013-01-01T",
        "2013-01-01T10:00:00.5+", "2013-01-01T10:00UTC", "2013-W01",
        "2013-001T00:00Z", "\xef\xbc\x92\xef\xbc\x90\xef\xbc\x91\xef\xbc\x93",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        tt_refused(bad[i]);
    rs_time_t t = 7;
    assert_int_equal(rs_time_parse(NULL, 0, &t), RS_EINVAL);
    assert_int_equal(rs_time_parse("2013", 4, NULL), RS_EINVAL);
    assert_true(t == 7);
}

/* time/zoneless: with RS_TIME_ZONELESS a time without a zone designator
 * (seconds, minutes only, a fraction) is taken as UTC and said to be
 * zoneless; without the flag it stays refused; what is refused for other
 * reasons stays refused with it; the form bits tell the recommended
 * YYYY-MM-DDThh:mm:ss[.s]Z from the other accepted forms. */
static void
test_zoneless(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        rs_time_t want;
        unsigned form;
    } ok[] = {
        { "2013-01-01T00:00:00", T_2013, RS_TIME_FORM_ZONELESS },
        { "2013-01-01T00:00", T_2013, RS_TIME_FORM_ZONELESS },
        { " 2013-01-01T00:00:00.5 ", T_2013 + SEC / 2, RS_TIME_FORM_ZONELESS },
        { "2013-01-01T00:00:00Z", T_2013, RS_TIME_FORM_FULL_UTC },
        { "2013-01-01T00:00:00.25Z", T_2013 + SEC / 4, RS_TIME_FORM_FULL_UTC },
        { "2013-01-01T00:00Z", T_2013, 0 },
        { "2013-01-01T01:00:00+01:00", T_2013, 0 },
        { "2013-01-01", T_2013, 0 },
        { "2013", T_2013, 0 },
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        rs_time_t t = 0;
        unsigned form = 99;
        int rc = rs_time_parse_ex(ok[i].s, strlen(ok[i].s), RS_TIME_ZONELESS,
                                  &t, &form);
        if (rc != 0 || t != ok[i].want || form != ok[i].form)
            fail_msg("\"%s\": rc %d form %u", ok[i].s, rc, form);
        bool zoneless = (ok[i].form & RS_TIME_FORM_ZONELESS) != 0;
        rc = rs_time_parse_ex(ok[i].s, strlen(ok[i].s), 0, &t, NULL);
        if ((rc != 0) != zoneless)
            fail_msg("\"%s\" without the flag: rc %d", ok[i].s, rc);
    }
    static const char *const still_bad[] = {
        "2013-01-01T10", "2013-01-01T24:00", "2013-01-01T10:00:60",
        "2013-01-01T10:00:00.", "2013-01-01 10:00", "2013-02-30T10:00",
        "2013-01-01T10:00:00+01", "2013-01-01T10:00:00 Z",
    };
    for (size_t i = 0; i < sizeof(still_bad) / sizeof(still_bad[0]); i++) {
        rs_time_t t = 42;
        int rc = rs_time_parse_ex(still_bad[i], strlen(still_bad[i]),
                                  RS_TIME_ZONELESS, &t, NULL);
        if (rc != RS_EINVAL || t != 42)
            fail_msg("\"%s\" accepted as zoneless (%d)", still_bad[i], rc);
    }
}

/* time/length_bound: only len bytes are read, whatever follows them, and a
 * NUL inside the span is an ordinary bad byte. */
static void
test_length_bound(void **state)
{
    (void)state;
    rs_time_t t = 0;
    const char *s = "2013-01-01T00:00:00Zgarbage";
    assert_int_equal(rs_time_parse(s, 20, &t), 0);
    assert_true(t == T_2013);
    assert_int_equal(rs_time_parse(s, 4, &t), 0);
    assert_true(t == T_2013);
    assert_int_equal(rs_time_parse(s, 7, &t), 0);
    assert_int_equal(rs_time_parse(s, 21, &t), RS_EINVAL);
    assert_int_equal(rs_time_parse(s, 0, &t), RS_EINVAL);
    assert_int_equal(rs_time_parse("2013\0", 5, &t), RS_EINVAL);
}

/* time/format: UTC with a 'Z', seconds always, a fraction only when there
 * is one, without trailing zeros; nothing for NONE or out-of-range. */
static void
test_format(void **state)
{
    (void)state;
    tt_formats_as(0, "1970-01-01T00:00:00Z");
    tt_formats_as(T_2013, "2013-01-01T00:00:00Z");
    tt_formats_as(T_2013 + 500000, "2013-01-01T00:00:00.5Z");
    tt_formats_as(T_2013 + 120000, "2013-01-01T00:00:00.12Z");
    tt_formats_as(T_2013 + 123456, "2013-01-01T00:00:00.123456Z");
    tt_formats_as(T_2013 + 1, "2013-01-01T00:00:00.000001Z");
    tt_formats_as(T_2013 + 10, "2013-01-01T00:00:00.00001Z");
    tt_formats_as(INT64_C(1367922030000000), "2013-05-07T10:20:30Z");
    tt_formats_as(-1, "1969-12-31T23:59:59.999999Z");
    tt_formats_as(-DAY, "1969-12-31T00:00:00Z");
    tt_formats_as(-DAY - 1, "1969-12-30T23:59:59.999999Z");
    tt_formats_as(T_0000, "0000-01-01T00:00:00Z");
    tt_formats_as(T_MAX, "9999-12-31T23:59:59.999999Z");
    tt_formats_as(INT64_C(951782400000000), "2000-02-29T00:00:00Z");
    tt_formats_as(RS_TIME_NONE, "");
    tt_formats_as(T_0000 - 1, "");
    tt_formats_as(T_MAX + 1, "");
    tt_formats_as(INT64_MAX, "");
}

/* time/every_day: for every day of 0000..9999, counted with a plain
 * calendar walk, parse gives consecutive days and format gives the same
 * date back, so the two conversions agree with each other and with a
 * naive count across every leap rule. */
static void
test_every_day(void **state)
{
    (void)state;
    static const int mdays[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31,
                                   30, 31 };
    rs_time_t want = T_0000;
    char s[40], out[RS_TIME_BUFSZ], expect[64];
    for (int y = 0; y <= 9999; y++) {
        bool leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
        for (int m = 1; m <= 12; m++) {
            int n = mdays[m - 1] + (m == 2 && leap);
            for (int d = 1; d <= n; d++) {
                snprintf(s, sizeof(s), "%04d-%02d-%02d", y, m, d);
                rs_time_t t = 0;
                if (rs_time_parse(s, 10, &t) != 0 || t != want)
                    fail_msg("%s: got %lld, want %lld", s, (long long)t,
                             (long long)want);
                snprintf(expect, sizeof(expect), "%sT00:00:00Z", s);
                rs_time_format(t, out);
                if (strcmp(out, expect) != 0)
                    fail_msg("%s formats as %s", s, out);
                want += DAY;
            }
        }
    }
    assert_true(want == T_MAX + 1);
}

/* time/round_trip: format then parse gives back the same microsecond for
 * scattered instants over the whole range. */
static void
test_round_trip(void **state)
{
    (void)state;
    uint64_t x = 0x9e3779b97f4a7c15u;
    uint64_t span = (uint64_t)(T_MAX - T_0000) + 1;
    char buf[RS_TIME_BUFSZ];
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        rs_time_t t = T_0000 + (rs_time_t)(x % span);
        if (i % 3 == 0)
            t -= t % SEC;               /* whole seconds: no fraction */
        size_t n = rs_time_format(t, buf);
        assert_true(n > 0 && n < RS_TIME_BUFSZ);
        rs_time_t back = 0;
        if (rs_time_parse(buf, n, &back) != 0 || back != t)
            fail_msg("%lld -> %s -> %lld", (long long)t, buf, (long long)back);
    }
}

/* time/now: the wall clock is read in microseconds and lies after the day
 * this code was written. */
static void
test_now(void **state)
{
    (void)state;
    rs_time_t a = rs_time_now();
    rs_time_t b = rs_time_now();
    assert_true(a > tt_parse("2024-01-01"));
    assert_true(a < tt_parse("9999"));
    assert_true(b >= a - 1000000);
    char buf[RS_TIME_BUFSZ];
    assert_true(rs_time_format(a, buf) >= 20);
}

/* time/mono_deadline: ms from now on the monotonic clock, its
 * nanoseconds kept under a second whatever the carry. */
static void
test_mono_deadline(void **state)
{
    (void)state;
    static const unsigned ms[] = { 0, 1, 999, 1000, 1999, 86400000 };
    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++) {
        int64_t before = rs_time_mono_us();
        struct timespec d = rs_time_mono_deadline(ms[i]);
        int64_t after = rs_time_mono_us();
        int64_t at = (int64_t)d.tv_sec * 1000000 + d.tv_nsec / 1000;
        assert_true(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
        assert_true(at >= before + (int64_t)ms[i] * 1000);
        assert_true(at <= after + (int64_t)ms[i] * 1000);
    }
}

/* time/timeval: durations for libevent's timers, negative ones as 0. */
static void
test_timeval(void **state)
{
    (void)state;
    struct timeval tv = rs_time_tv_ms(1500);
    assert_int_equal(tv.tv_sec, 1);
    assert_int_equal(tv.tv_usec, 500000);
    tv = rs_time_tv_ms(999);
    assert_int_equal(tv.tv_sec, 0);
    assert_int_equal(tv.tv_usec, 999000);
    tv = rs_time_tv_ms(-5);
    assert_int_equal(tv.tv_sec, 0);
    assert_int_equal(tv.tv_usec, 0);
    tv = rs_time_tv_us(2000001);
    assert_int_equal(tv.tv_sec, 2);
    assert_int_equal(tv.tv_usec, 1);
    tv = rs_time_tv_ms(INT64_MIN);
    assert_int_equal(tv.tv_sec, 0);
    assert_int_equal(tv.tv_usec, 0);
    tv = rs_time_tv_ms(INT64_MAX);
    assert_true(tv.tv_sec > 0);
    assert_true(tv.tv_usec >= 0 && tv.tv_usec < 1000000);
}

#define TT(name, fn) { name, fn, NULL, NULL, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TT("time/granularities", test_granularities),
        TT("time/fraction", test_fraction),
        TT("time/offsets", test_offsets),
        TT("time/boundaries", test_boundaries),
        TT("time/leap_years", test_leap_years),
        TT("time/whitespace", test_whitespace),
        TT("time/malformed", test_malformed),
        TT("time/zoneless", test_zoneless),
        TT("time/length_bound", test_length_bound),
        TT("time/format", test_format),
        TT("time/every_day", test_every_day),
        TT("time/round_trip", test_round_trip),
        TT("time/now", test_now),
        TT("time/mono_deadline", test_mono_deadline),
        TT("time/timeval", test_timeval),
    };
    return cmocka_run_group_tests_name("time", tests, NULL, NULL);
}
