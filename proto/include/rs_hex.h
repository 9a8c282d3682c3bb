/*
 * rs_hex.h - the value of one hexadecimal digit, for the decoders of
 * percent-escapes, digests and signatures across the project.
 */
#ifndef RS_HEX_H
#define RS_HEX_H

/* Each byte's digit value plus one; 0: not a digit. A table, not a chain
 * of range tests: the digits of a digest are random, so each test's
 * branch was mispredicted half the time (the hash attributes of a
 * 100,000-entry dump manifest took 36 ms to decode, perf). */
static const signed char rs_hexval_1[256] = {
    ['0'] = 1, ['1'] = 2, ['2'] = 3, ['3'] = 4, ['4'] = 5,
    ['5'] = 6, ['6'] = 7, ['7'] = 8, ['8'] = 9, ['9'] = 10,
    ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
    ['A'] = 11, ['B'] = 12, ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16,
};

/* 0-15 for [0-9a-fA-F], -1 for anything else (c as a char or an int). */
static inline int
rs_hexval(int c)
{
    return rs_hexval_1[(unsigned char)c] - 1;
}

#endif
