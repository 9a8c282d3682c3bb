/*
 * uriset.h - a set of strings kept as 64-bit FNV-1a hashes (8 bytes each,
 * open addressing): the documents a walk has read, the URIs an audit has
 * seen, the mirror paths a stray scan knows. A collision makes two one, at
 * odds of one in 2^64 per pair, which those uses can afford; nothing here
 * needs the strings back.
 */
#ifndef SUB_URISET_H
#define SUB_URISET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"

/* A plain value: zero-initialise it; uriset_clear frees it. */
struct uriset {
    uint64_t *slot;          /* 0: empty */
    size_t n, cap;           /* cap: 0 or a power of two */
};

/* 1 when uri was in the set already, 0 added, RS_ENOMEM. */
int uriset_add(struct uriset *s, const char *uri) RS_MUST_CHECK;
bool uriset_has(const struct uriset *s, const char *uri);
void uriset_clear(struct uriset *s);

#endif
