/*
 * rs_strmap.h - a map from C strings to pointers, for tables that grow to
 * many thousands of entries and are looked up on hot paths (the hub's
 * topics and channels, a config file's sections). Keys are borrowed: each
 * must stay valid and unchanged while its entry is in the map (a field of
 * the value, typically). Entries are never removed: those tables only grow
 * until they are freed whole. Not thread-safe.
 */
#ifndef RS_STRMAP_H
#define RS_STRMAP_H

#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"

struct rs_strmap_slot;

/* A plain value: zero-initialise it; rs_strmap_clear frees its table
 * (neither the keys nor the values). */
struct rs_strmap {
    struct rs_strmap_slot *slot;
    size_t n, cap;               /* cap: 0 or a power of two */
    uint64_t seed;               /* random, set at the first put */
};

/* The value put under key, or NULL. */
void *rs_strmap_get(const struct rs_strmap *m, const char *key);

/* Put val (not NULL) under key: 0; RS_EINVAL when key is there already
 * (the old value stays); RS_ENOMEM. */
int rs_strmap_put(struct rs_strmap *m, const char *key, void *val)
    RS_MUST_CHECK;

/* Room for more entries: until then a put of a new key cannot fail (for
 * an object indexed in two maps, put in both or in neither). 0, RS_ENOMEM. */
int rs_strmap_reserve(struct rs_strmap *m, size_t more) RS_MUST_CHECK;

void rs_strmap_clear(struct rs_strmap *m);

#endif
