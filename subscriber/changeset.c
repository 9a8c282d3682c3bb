/*
 * changeset.c - entries in one growing array, URIs in 64 KiB string
 * blocks, and an open-addressing index (linear probing, doubled at half
 * full) of entry numbers keyed by the URI's FNV-1a hash; the strings are
 * compared, so a hash collision costs a probe, never a wrong answer.
 */
#include <string.h>

#include "changeset.h"
#include "rs_alloc.h"
#include "rs_fnv.h"

#define CS_BLOCK (64 * 1024)
#define CS_MIN_SLOTS 1024

struct cs_block {
    struct cs_block *next;
    size_t size, used;
    char data[];
};

struct changeset {
    struct changeset_entry *e;
    uint64_t *hash;               /* of e[i].uri */
    size_t n, cap, max;
    uint32_t *slot;               /* entry number + 1; 0: empty */
    size_t nslots;
    struct cs_block *blocks;
};

struct changeset *
changeset_new(size_t max)
{
    struct changeset *cs = rs_calloc(1, sizeof(*cs));

    if (cs == NULL)
        return NULL;
    cs->max = max != 0 && max < CHANGESET_MAX ? max : CHANGESET_MAX;
    return cs;
}

void
changeset_free(struct changeset *cs)
{
    if (cs == NULL)
        return;
    while (cs->blocks != NULL) {
        struct cs_block *b = cs->blocks;
        cs->blocks = b->next;
        rs_free(b);
    }
    rs_free(cs->e);
    rs_free(cs->hash);
    rs_free(cs->slot);
    rs_free(cs);
}

static char *
cs_strdup(struct changeset *cs, const char *s)
{
    size_t n = strlen(s) + 1;
    struct cs_block *b = cs->blocks;
    char *p;

    if (b == NULL || b->size - b->used < n) {
        size_t sz = n > CS_BLOCK ? n : CS_BLOCK;  /* a long URI: its own */
        if ((b = rs_malloc(sizeof(*b) + sz)) == NULL)
            return NULL;
        b->size = sz;
        b->used = 0;
        b->next = cs->blocks;
        cs->blocks = b;
    }
    p = b->data + b->used;
    memcpy(p, s, n);
    b->used += n;
    return p;
}

static size_t
cs_probe(const struct changeset *cs, uint64_t h, const char *uri)
{
    size_t i = (size_t)h & (cs->nslots - 1);

    while (cs->slot[i] != 0) {
        size_t k = cs->slot[i] - 1;
        if (cs->hash[k] == h && strcmp(cs->e[k].uri, uri) == 0)
            break;
        i = (i + 1) & (cs->nslots - 1);
    }
    return i;
}

static int
cs_grow_index(struct changeset *cs)
{
    size_t n = cs->nslots ? cs->nslots * 2 : CS_MIN_SLOTS;
    uint32_t *t = rs_calloc(n, sizeof(*t));

    if (t == NULL)
        return RS_ENOMEM;
    for (size_t k = 0; k < cs->n; k++) {
        size_t i = (size_t)cs->hash[k] & (n - 1);
        while (t[i] != 0)
            i = (i + 1) & (n - 1);
        t[i] = (uint32_t)(k + 1);
    }
    rs_free(cs->slot);
    cs->slot = t;
    cs->nslots = n;
    return 0;
}

struct changeset_entry *
changeset_find(struct changeset *cs, const char *uri)
{
    uint64_t h = rs_fnv1a64(uri);
    size_t i;

    if (cs->nslots == 0)
        return NULL;
    i = cs_probe(cs, h, uri);
    return cs->slot[i] != 0 ? &cs->e[cs->slot[i] - 1] : NULL;
}

int
changeset_put(struct changeset *cs, const char *uri,
              enum ledger_change change, rs_time_t dt)
{
    uint64_t h = rs_fnv1a64(uri);
    struct changeset_entry *e;
    size_t i;

    if ((cs->n + 1) * 2 > cs->nslots && cs_grow_index(cs) != 0)
        return RS_ENOMEM;
    i = cs_probe(cs, h, uri);
    if (cs->slot[i] != 0) {
        e = &cs->e[cs->slot[i] - 1];
        if (e->dt != RS_TIME_NONE && dt != RS_TIME_NONE && dt < e->dt)
            return 0;                 /* newest first: older than held */
        e->change = change;
        e->dt = dt;
        return 0;
    }
    if (cs->n == cs->max)
        return RS_ETOOBIG;
    if (cs->n == cs->cap) {
        size_t ncap = cs->cap ? cs->cap * 2 : 1024;
        struct changeset_entry *te = rs_realloc(cs->e, ncap * sizeof(*te));
        if (te == NULL)
            return RS_ENOMEM;
        cs->e = te;
        uint64_t *th = rs_realloc(cs->hash, ncap * sizeof(*th));
        if (th == NULL)
            return RS_ENOMEM;
        cs->hash = th;
        cs->cap = ncap;
    }
    e = &cs->e[cs->n];
    if ((e->uri = cs_strdup(cs, uri)) == NULL)
        return RS_ENOMEM;
    e->change = change;
    e->dt = dt;
    e->seen = false;
    cs->hash[cs->n] = h;
    cs->slot[i] = (uint32_t)(++cs->n);
    return 0;
}

int
changeset_each(struct changeset *cs,
               int (*cb)(void *ud, struct changeset_entry *e), void *ud)
{
    int rc = 0;

    for (size_t k = 0; k < cs->n && rc == 0; k++)
        rc = cb(ud, &cs->e[k]);
    return rc;
}

size_t
changeset_count(const struct changeset *cs)
{
    return cs->n;
}
