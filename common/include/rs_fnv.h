/*
 * rs_fnv.h - FNV-1a, 64 bits, over a C string: the hash of our in-memory
 * tables (watched paths, URI sets). Not for anything an adversary must not
 * collide: those tables either compare the strings too or can afford a
 * one-in-2^64 merge (see their headers).
 */
#ifndef RS_FNV_H
#define RS_FNV_H

#include <stdint.h>

static inline uint64_t
rs_fnv1a64(const char *s)
{
    uint64_t h = 1469598103934665603ull;

    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

#endif
