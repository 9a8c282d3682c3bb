/*
 * fuzz_time.c - libFuzzer target for rs_time.h. Whatever parses must format
 * to text that parses back to the same microsecond; whatever instant the
 * formatter accepts (the first 8 input bytes as an rs_time_t) must parse
 * back from its output too.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rs_time.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
ft_round_trip(rs_time_t t)
{
    char buf[RS_TIME_BUFSZ];
    size_t n = rs_time_format(t, buf);
    if (n == 0) {
        if (buf[0] != '\0')
            abort();
        return;
    }
    if (n >= RS_TIME_BUFSZ || strlen(buf) != n)
        abort();
    rs_time_t back = 0;
    if (rs_time_parse(buf, n, &back) != 0 || back != t)
        abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rs_time_t t = 0;
    if (rs_time_parse((const char *)data, size, &t) == 0) {
        /* every parsed time is in range, so formatting cannot refuse it */
        char buf[RS_TIME_BUFSZ];
        if (rs_time_format(t, buf) == 0)
            abort();
        ft_round_trip(t);
    }
    if (size >= sizeof(int64_t)) {
        int64_t raw;
        memcpy(&raw, data, sizeof(raw));
        ft_round_trip(raw);
        /* also fold it into the valid range, where most values format */
        ft_round_trip(raw % INT64_C(253402300800000000));
    }
    return 0;
}
