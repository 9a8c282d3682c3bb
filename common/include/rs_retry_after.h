/*
 * rs_retry_after.h - the value of an HTTP Retry-After field (RFC 9110
 * 10.2.3) as a wait: delta-seconds, or an HTTP-date taken against a "now"
 * the caller gives. The one parser of every daemon and tool; what wait a
 * caller will honour (its caps) stays the caller's. Pure: no clock, no I/O.
 */
#ifndef RS_RETRY_AFTER_H
#define RS_RETRY_AFTER_H

#include <stdint.h>

#include "rs_error.h"

/* Longest wait told (s): a larger delta-seconds, or a date further off,
 * reads as this (RFC 9111 1.2.2's 2^31, "the greatest integer it can
 * represent"), so a caller's own cap is what applies. */
#define RS_RETRY_AFTER_MAX_S 2147483648u

/*
 * Parse value (NUL-terminated; leading and trailing blanks, CR and LF are
 * ignored) into *ms:
 *   - delta-seconds (1*DIGIT): that many seconds;
 *   - an HTTP-date, in any of the three forms a recipient must accept
 *     (IMF-fixdate, the obsolete RFC 850 and asctime forms, RFC 9110
 *     5.6.7): the seconds from now_s (Unix time) to it, 0 when it is not
 *     in the future.
 * Returns 0, or RS_EINVAL (NULL, empty, a sign, trailing garbage, neither
 * form): *ms is then untouched and the field counts as absent.
 */
int rs_retry_after_parse(const char *value, int64_t now_s,
                         uint64_t *ms) RS_MUST_CHECK;

#endif
