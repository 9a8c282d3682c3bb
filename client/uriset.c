/*
 * uriset.c - open addressing with linear probing over 64-bit hashes; the
 * table doubles at half full.
 */
#include "rs_alloc.h"
#include "rs_fnv.h"
#include "uriset.h"

#define URISET_MIN 64

static uint64_t
uriset_hash(const char *s)
{
    uint64_t h = rs_fnv1a64(s);

    return h != 0 ? h : 1;                   /* 0 marks an empty slot */
}

static size_t
uriset_find(const uint64_t *slot, size_t cap, uint64_t h)
{
    size_t i = h & (cap - 1);

    while (slot[i] != 0 && slot[i] != h)
        i = (i + 1) & (cap - 1);
    return i;
}

int
uriset_add(struct uriset *s, const char *uri)
{
    uint64_t h = uriset_hash(uri);
    size_t i;

    if ((s->n + 1) * 2 > s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : URISET_MIN;
        uint64_t *t = rs_calloc(ncap, sizeof(*t));
        if (t == NULL)
            return RS_ENOMEM;
        for (i = 0; i < s->cap; i++)
            if (s->slot[i] != 0)
                t[uriset_find(t, ncap, s->slot[i])] = s->slot[i];
        rs_free(s->slot);
        s->slot = t;
        s->cap = ncap;
    }
    i = uriset_find(s->slot, s->cap, h);
    if (s->slot[i] == h)
        return 1;
    s->slot[i] = h;
    s->n++;
    return 0;
}

bool
uriset_has(const struct uriset *s, const char *uri)
{
    uint64_t h = uriset_hash(uri);

    return s->cap > 0 && s->slot[uriset_find(s->slot, s->cap, h)] == h;
}

void
uriset_clear(struct uriset *s)
{
    rs_free(s->slot);
    s->slot = NULL;
    s->n = s->cap = 0;
}
