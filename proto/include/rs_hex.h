/*
 * rs_hex.h - the value of one hexadecimal digit, for the decoders of
 * percent-escapes, digests and signatures across the project.
 */
#ifndef RS_HEX_H
#define RS_HEX_H

/* 0-15 for [0-9a-fA-F], -1 for anything else (c as a char or an int). */
static inline int
rs_hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

#endif
