/*
 * time.c - W3C Datetime parsing and formatting (rs_time.h). Owns the
 * calendar arithmetic (proleptic Gregorian, years 0000..9999) so that no
 * libc time function, locale or TZ setting can change a result; leaves the
 * choice of which document field holds a time to the parser.
 */
#include <stdbool.h>
#include <time.h>

#include "rs_time.h"

#define US_PER_SEC INT64_C(1000000)
#define US_PER_MIN (60 * US_PER_SEC)
#define US_PER_DAY (86400 * US_PER_SEC)

/* Days from 1970-01-01 to 0000-01-01 and to 10000-01-01: the model only
 * carries years that fit four digits, so normalising an offset may not
 * leave that range either (a time we could not write back is refused). */
#define CIVIL_DAY_MIN INT64_C(-719528)
#define CIVIL_DAY_END INT64_C(2932897)
#define TIME_MIN (CIVIL_DAY_MIN * US_PER_DAY)
#define TIME_MAX (CIVIL_DAY_END * US_PER_DAY - 1)

/* ------------------------------------------------------------ calendar */

static bool
civil_is_leap(int y)
{
    return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

static int
civil_days_in_month(int y, int m)
{
    static const unsigned char mdays[12] = {
        31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31
    };
    return m == 2 && civil_is_leap(y) ? 29 : mdays[m - 1];
}

/*
 * Days since 1970-01-01 of y-m-d. The year is counted from March so the
 * leap day falls at the end of it, which makes day-of-year a linear
 * function of the month (153 days per five months). Shifting by one
 * 400-year cycle (146097 days) keeps every division on non-negative
 * numbers for year 0000 January, whose March-based year is -1.
 */
static int64_t
civil_to_days(int y, int m, int d)
{
    int64_t yy = (int64_t)y + 400 - (m <= 2);
    int64_t era = yy / 400;
    int64_t yoe = yy - era * 400;                       /* 0..399 */
    int64_t mp = m > 2 ? m - 3 : m + 9;                 /* 0 = March */
    int64_t doy = (153 * mp + 2) / 5 + d - 1;           /* 0..365 */
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468 - 146097;
}

/* The inverse of civil_to_days for days in [CIVIL_DAY_MIN, CIVIL_DAY_END). */
static void
civil_from_days(int64_t days, int *y, int *m, int *d)
{
    int64_t z = days + 719468 + 146097;                 /* >= 0 in range */
    int64_t era = z / 146097;
    int64_t doe = z - era * 146097;                     /* 0..146096 */
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = (int)(yoe + era * 400 + (*m <= 2) - 400);
}

/* -------------------------------------------------------------- parsing */

static bool
parse_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* n decimal digits at p as a number, or -1 if any is not a digit. The
 * caller has checked that n bytes are there. */
static int
parse_digits(const char *p, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        unsigned c = (unsigned char)p[i] - (unsigned)'0';
        if (c > 9)
            return -1;
        v = v * 10 + (int)c;
    }
    return v;
}

/* "-NN" at *pp within [*pp, e): the two-digit field, advancing *pp; -1 when
 * it is not there. sep is the separator expected before the digits. */
static int
parse_field(const char **pp, const char *e, char sep)
{
    const char *p = *pp;
    if (e - p < 3 || p[0] != sep)
        return -1;
    int v = parse_digits(p + 1, 2);
    if (v >= 0)
        *pp = p + 3;
    return v;
}

/* The time part after 'T': hh:mm[:ss[.f+]]TZD, up to exactly e. Sets *us to
 * microseconds of the local day and *off to the zone offset in minutes;
 * with RS_TIME_ZONELESS a missing TZD is offset 0. Adds RS_TIME_FORM_* bits
 * to *form. */
static int
parse_clock(const char *p, const char *e, unsigned flags, int64_t *us,
            int64_t *off, unsigned *form)
{
    bool secs = false;
    if (e - p < 5 || p[2] != ':')
        return RS_EINVAL;
    int hh = parse_digits(p, 2);
    int mm = parse_digits(p + 3, 2);
    if (hh < 0 || hh > 23 || mm < 0 || mm > 59)
        return RS_EINVAL;
    p += 5;

    int ss = 0;
    int64_t frac = 0;
    if (p < e && *p == ':') {
        secs = true;
        ss = parse_field(&p, e, ':');
        if (ss < 0 || ss > 59)      /* leap seconds are not representable */
            return RS_EINVAL;
        if (p < e && *p == '.') {
            p++;
            const char *f0 = p;
            int kept = 0;
            for (; p < e; p++) {
                unsigned c = (unsigned char)*p - (unsigned)'0';
                if (c > 9)
                    break;
                if (kept < 6) {
                    frac = frac * 10 + (int64_t)c;
                    kept++;
                }
            }
            if (p == f0)
                return RS_EINVAL;
            for (; kept < 6; kept++)
                frac *= 10;
        }
    }

    if (p == e) {
        /* The zone is mandatory with a time; only a reader that asked
         * takes its absence for UTC. */
        if (!(flags & RS_TIME_ZONELESS))
            return RS_EINVAL;
        *off = 0;
        *form |= RS_TIME_FORM_ZONELESS;
    } else if (*p == 'Z') {
        p++;
        *off = 0;
        if (secs)
            *form |= RS_TIME_FORM_FULL_UTC;
    } else if (*p == '+' || *p == '-') {
        if (e - p < 6 || p[3] != ':')
            return RS_EINVAL;
        int oh = parse_digits(p + 1, 2);
        int om = parse_digits(p + 4, 2);
        if (oh < 0 || oh > 23 || om < 0 || om > 59)
            return RS_EINVAL;
        *off = (*p == '-' ? -1 : 1) * (int64_t)(oh * 60 + om);
        p += 6;
    } else {
        return RS_EINVAL;
    }
    if (p != e)
        return RS_EINVAL;
    *us = ((int64_t)hh * 3600 + mm * 60 + ss) * US_PER_SEC + frac;
    return 0;
}

int
rs_time_parse(const char *s, size_t len, rs_time_t *out)
{
    return rs_time_parse_ex(s, len, 0, out, NULL);
}

int
rs_time_parse_ex(const char *s, size_t len, unsigned flags, rs_time_t *out,
                 unsigned *formp)
{
    unsigned form = 0;
    if (s == NULL || out == NULL)
        return RS_EINVAL;
    const char *p = s, *e = s + len;
    while (p < e && parse_is_space(*p))
        p++;
    while (e > p && parse_is_space(e[-1]))
        e--;

    if (e - p < 4)
        return RS_EINVAL;
    int y = parse_digits(p, 4);
    if (y < 0)
        return RS_EINVAL;
    p += 4;

    int m = 1, d = 1;
    int64_t us = 0, off = 0;
    if (p < e) {
        m = parse_field(&p, e, '-');
        if (m < 1 || m > 12)
            return RS_EINVAL;
        if (p < e) {
            d = parse_field(&p, e, '-');
            if (d < 1 || d > civil_days_in_month(y, m))
                return RS_EINVAL;
            if (p < e) {
                if (*p != 'T')
                    return RS_EINVAL;
                int rc = parse_clock(p + 1, e, flags, &us, &off, &form);
                if (rc < 0)
                    return rc;
            }
        }
    }

    int64_t t = civil_to_days(y, m, d) * US_PER_DAY + us - off * US_PER_MIN;
    if (t < TIME_MIN || t > TIME_MAX)
        return RS_EINVAL;
    *out = t;
    if (formp != NULL)
        *formp = form;
    return 0;
}

/* ----------------------------------------------------------- formatting */

/* n digits of v, zero-padded, at p. */
static char *
format_digits(char *p, int64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (char)('0' + v % 10);
        v /= 10;
    }
    return p + n;
}

size_t
rs_time_format(rs_time_t t, char *buf)
{
    if (t == RS_TIME_NONE || t < TIME_MIN || t > TIME_MAX) {
        buf[0] = '\0';
        return 0;
    }
    /* Floor division: times before 1970 still belong to the day they
     * fall in, not the one after. */
    int64_t days = t / US_PER_DAY;
    int64_t rem = t % US_PER_DAY;
    if (rem < 0) {
        rem += US_PER_DAY;
        days--;
    }
    int y, m, d;
    civil_from_days(days, &y, &m, &d);
    int64_t secs = rem / US_PER_SEC;
    int64_t us = rem % US_PER_SEC;

    char *p = buf;
    p = format_digits(p, y, 4);
    *p++ = '-';
    p = format_digits(p, m, 2);
    *p++ = '-';
    p = format_digits(p, d, 2);
    *p++ = 'T';
    p = format_digits(p, secs / 3600, 2);
    *p++ = ':';
    p = format_digits(p, secs / 60 % 60, 2);
    *p++ = ':';
    p = format_digits(p, secs % 60, 2);
    if (us != 0) {
        int n = 6;
        while (us % 10 == 0) {
            us /= 10;
            n--;
        }
        *p++ = '.';
        p = format_digits(p, us, n);
    }
    *p++ = 'Z';
    *p = '\0';
    return (size_t)(p - buf);
}

rs_time_t
rs_time_now(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return RS_TIME_NONE;
    return (int64_t)ts.tv_sec * US_PER_SEC + ts.tv_nsec / 1000;
}

int64_t
rs_time_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * US_PER_SEC + ts.tv_nsec / 1000;
}

int64_t
rs_time_mono_ms(void)
{
    return rs_time_mono_us() / 1000;
}

struct timespec
rs_time_mono_deadline(unsigned ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

struct timeval
rs_time_tv_us(int64_t us)
{
    if (us < 0)
        us = 0;
    struct timeval tv = { (time_t)(us / 1000000),
                          (suseconds_t)(us % 1000000) };
    return tv;
}

struct timeval
rs_time_tv_ms(int64_t ms)
{
    if (ms < 0)
        ms = 0;
    return rs_time_tv_us(ms > INT64_MAX / 1000 ? INT64_MAX : ms * 1000);
}
