/*
 * strmap.c - open addressing with linear probing; each slot keeps the
 * key's hash, so that a probe compares strings only when the hashes agree.
 * The hash is FNV-1a from a random basis, then mixed: keys may come from
 * anonymous clients (open-mode topic URIs), and a basis they cannot know
 * keeps them from choosing keys that all land in one run of slots.
 */
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "rs_alloc.h"
#include "rs_mix.h"
#include "rs_strmap.h"

#define STRMAP_MIN 16

struct rs_strmap_slot {
    uint64_t hash;
    const char *key;             /* NULL: empty */
    void *val;
};

static uint64_t
strmap_hash(uint64_t seed, const char *s)
{
    uint64_t h = 1469598103934665603ull ^ seed;

    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return rs_mix64(h);   /* FNV's low bits depend on few input bits */
}

/* The slot holding key, or the empty one where it would go. */
static size_t
strmap_find(const struct rs_strmap_slot *slot, size_t cap, uint64_t h,
            const char *key)
{
    size_t i = (size_t)h & (cap - 1);

    while (slot[i].key != NULL &&
           (slot[i].hash != h || strcmp(slot[i].key, key) != 0))
        i = (i + 1) & (cap - 1);
    return i;
}

void *
rs_strmap_get(const struct rs_strmap *m, const char *key)
{
    if (m->n == 0)
        return NULL;
    size_t i = strmap_find(m->slot, m->cap, strmap_hash(m->seed, key), key);
    return m->slot[i].val;
}

static int
strmap_grow(struct rs_strmap *m, size_t ncap)
{
    struct rs_strmap_slot *t = rs_calloc(ncap, sizeof(*t));
    if (t == NULL)
        return RS_ENOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        const struct rs_strmap_slot *s = &m->slot[i];
        if (s->key != NULL)
            t[strmap_find(t, ncap, s->hash, s->key)] = *s;
    }
    rs_free(m->slot);
    m->slot = t;
    m->cap = ncap;
    return 0;
}

int
rs_strmap_reserve(struct rs_strmap *m, size_t more)
{
    size_t ncap = m->cap != 0 ? m->cap : STRMAP_MIN;

    if (more > SIZE_MAX / 4 - m->n)
        return RS_ENOMEM;
    while ((m->n + more) * 2 > ncap)     /* at most half full */
        ncap *= 2;
    if (ncap == m->cap)
        return 0;
    if (m->cap == 0 &&
        getrandom(&m->seed, sizeof(m->seed), GRND_NONBLOCK) !=
            (ssize_t)sizeof(m->seed))
        m->seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)m;
    return strmap_grow(m, ncap);
}

int
rs_strmap_put(struct rs_strmap *m, const char *key, void *val)
{
    if (key == NULL || val == NULL)
        return RS_EINVAL;
    if (rs_strmap_reserve(m, 1) != 0)
        return RS_ENOMEM;
    uint64_t h = strmap_hash(m->seed, key);
    size_t i = strmap_find(m->slot, m->cap, h, key);
    if (m->slot[i].key != NULL)
        return RS_EINVAL;
    m->slot[i] = (struct rs_strmap_slot){ h, key, val };
    m->n++;
    return 0;
}

void
rs_strmap_clear(struct rs_strmap *m)
{
    rs_free(m->slot);
    *m = (struct rs_strmap){ 0 };
}
