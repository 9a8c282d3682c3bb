/*
 * rs_mix.h - splitmix64's finaliser, the one bit mixer of the project's
 * in-memory hash tables: every input bit reaches every output bit, so the
 * low bits that pick a slot depend on the whole key (an FNV-1a value, a
 * client id, an address). Not a keyed hash: tables that keys from clients
 * fill mix in a random seed of their own.
 */
#ifndef RS_MIX_H
#define RS_MIX_H

#include <stdint.h>

static inline uint64_t
rs_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

#endif
