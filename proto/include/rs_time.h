/*
 * rs_time.h - W3C Datetime (the profile of ISO 8601 that Sitemaps and
 * ResourceSync use): parsing every granularity from YYYY to fractional
 * seconds with Z or +hh:mm offsets, normalised to UTC microseconds, and
 * formatting as YYYY-MM-DDThh:mm:ss[.s]Z.
 */
#ifndef RS_TIME_H
#define RS_TIME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>
#include <time.h>

#include "rs_error.h"

/* Microseconds since 1970-01-01T00:00:00Z. Years 0000..9999 fit. */
typedef int64_t rs_time_t;

#define RS_TIME_NONE INT64_MIN  /* "absent" in every model field */
#define RS_TIME_BUFSZ 32        /* enough for any rs_time_format() output */

/* How far past our clock a Source's times are believed, by rssub and
 * rsbridge alike. A time further on (a clock years wrong, a hostile
 * publisher) would become a position every later change looks older
 * than; each reader says what it does with one. */
#define RS_TIME_SKEW_US (60 * 1000000LL)

/*
 * Parse a W3C Datetime: YYYY, YYYY-MM, YYYY-MM-DD, YYYY-MM-DDThh:mmTZD,
 * YYYY-MM-DDThh:mm:ssTZD, YYYY-MM-DDThh:mm:ss.sTZD (any number of fraction
 * digits; digits beyond microseconds are truncated). TZD is Z or +hh:mm or
 * -hh:mm and is mandatory when a time is present. Leading/trailing XML
 * whitespace is allowed. Missing month/day default to 01; the result is the
 * start of the period. Returns 0, or RS_EINVAL (out untouched) for anything
 * else, including impossible dates (2013-02-30) and hours > 23 (except none:
 * 24:00 is refused too), second 60, and a time whose offset moves it out of
 * years 0000..9999 UTC (it could not be formatted back).
 */
int rs_time_parse(const char *s, size_t len, rs_time_t *out) RS_MUST_CHECK;

/* rs_time_parse_ex flags. */
#define RS_TIME_ZONELESS 0x1u   /* take a time with no zone designator as UTC */

/* What rs_time_parse_ex reports about the form of an accepted value. */
#define RS_TIME_FORM_ZONELESS 0x1u  /* a time with no zone, taken as UTC */
#define RS_TIME_FORM_FULL_UTC 0x2u  /* YYYY-MM-DDThh:mm:ss[.s]Z exactly: the
                                     * form core section 7 recommends */

/*
 * rs_time_parse, with what a reader needs to judge the value: with
 * RS_TIME_ZONELESS in flags, a time of day without a zone designator
 * (2013-01-02T13:00, 2013-01-02T13:00:00) is accepted as UTC, which W3C
 * Datetime does not allow but real Sources write. *form (may be NULL) gets
 * RS_TIME_FORM_* bits for an accepted value.
 */
int rs_time_parse_ex(const char *s, size_t len, unsigned flags, rs_time_t *out,
                     unsigned *form) RS_MUST_CHECK;

/*
 * Format t as YYYY-MM-DDThh:mm:ssZ, or with a fraction of 1..6 digits
 * (trailing zeros dropped) when t has sub-second microseconds. buf must hold
 * RS_TIME_BUFSZ bytes. Returns the length written (excluding NUL), or 0 for
 * RS_TIME_NONE or a time outside years 0000..9999 (buf is then "").
 */
size_t rs_time_format(rs_time_t t, char *buf);

/* The current wall-clock time. */
rs_time_t rs_time_now(void);

/* Microseconds of the monotonic clock: for durations and deadlines, which
 * a wall clock set back or forward must not move. */
int64_t rs_time_mono_us(void);

/* The same clock in milliseconds, for timers kept in milliseconds. */
int64_t rs_time_mono_ms(void);

/* The monotonic clock ms from now, as a timespec: the deadline of a
 * pthread_cond_timedwait on a condition variable set to CLOCK_MONOTONIC
 * (pthread_condattr_setclock), which a wall clock set back cannot move. */
struct timespec rs_time_mono_deadline(unsigned ms);

/* A duration in ms or us as a struct timeval, for libevent's timers
 * (negative: 0). */
struct timeval rs_time_tv_ms(int64_t ms);
struct timeval rs_time_tv_us(int64_t us);

#endif
