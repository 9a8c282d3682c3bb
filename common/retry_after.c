/*
 * retry_after.c - Retry-After values (rs_retry_after.h). HTTP-dates are
 * read by libcurl's curl_getdate, which knows the three forms of RFC 9110
 * 5.6.7 (and is pure: no locale, no clock); what "now" is, the caller says.
 */
#include <curl/curl.h>
#include <string.h>

#include "rs_retry_after.h"

/* Long enough for any HTTP-date with room for odd spacing; longer values
 * are not dates. */
#define RETRY_AFTER_DATE_MAX 64

static int
ra_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

int
rs_retry_after_parse(const char *value, int64_t now_s, uint64_t *ms)
{
    const char *p = value, *end;
    uint64_t secs = 0;

    if (value == NULL)
        return RS_EINVAL;
    while (ra_blank(*p))
        p++;
    end = p + strlen(p);
    while (end > p && ra_blank(end[-1]))
        end--;
    if (p == end)
        return RS_EINVAL;
    if (*p >= '0' && *p <= '9') {
        for (; p < end; p++) {
            if (*p < '0' || *p > '9')
                return RS_EINVAL;
            if (secs < RS_RETRY_AFTER_MAX_S)
                secs = secs * 10 + (uint64_t)(*p - '0');
        }
    } else {
        char date[RETRY_AFTER_DATE_MAX + 1];
        size_t n = (size_t)(end - p);
        if (n > RETRY_AFTER_DATE_MAX)
            return RS_EINVAL;
        memcpy(date, p, n);
        date[n] = '\0';
        time_t when = curl_getdate(date, NULL);
        if (when == (time_t)-1)
            return RS_EINVAL;
        if ((int64_t)when > now_s)
            secs = (uint64_t)((int64_t)when - now_s);
    }
    if (secs > RS_RETRY_AFTER_MAX_S)
        secs = RS_RETRY_AFTER_MAX_S;
    *ms = secs * 1000;
    return 0;
}
