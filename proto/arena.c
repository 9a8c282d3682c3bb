/* arena.c - chunked bump allocator private to proto/ (arena.h). */
#include <stdint.h>
#include <string.h>

#include "arena.h"
#include "rs_alloc.h"

struct arena_chunk {
    struct arena_chunk *next;
    size_t size;             /* usable bytes in data[] */
    size_t used;
    _Alignas(16) unsigned char data[];
};

struct rs_arena {
    struct arena_chunk *head;    /* current chunk; older ones follow */
    size_t chunk_size;
    size_t footprint;
};

static struct arena_chunk *
arena_chunk_new(size_t size)
{
    struct arena_chunk *c = rs_malloc(sizeof(*c) + size);
    if (c == NULL)
        return NULL;
    c->next = NULL;
    c->size = size;
    c->used = 0;
    return c;
}

struct rs_arena *
rs_arena_new(size_t chunk_size)
{
    struct rs_arena *a = rs_malloc(sizeof(*a));
    if (a == NULL)
        return NULL;
    a->head = NULL;
    a->chunk_size = chunk_size < 256 ? 256 : chunk_size;
    a->footprint = 0;
    return a;
}

void
rs_arena_free(struct rs_arena *a)
{
    if (a == NULL)
        return;
    struct arena_chunk *c = a->head;
    while (c != NULL) {
        struct arena_chunk *next = c->next;
        rs_free(c);
        c = next;
    }
    rs_free(a);
}

void
rs_arena_reset(struct rs_arena *a)
{
    if (a->head == NULL)
        return;
    /* Keep the oldest chunk (the one sized chunk_size) and drop the rest. */
    struct arena_chunk *c = a->head, *keep = NULL;
    while (c != NULL) {
        struct arena_chunk *next = c->next;
        if (next == NULL && c->size == a->chunk_size)
            keep = c;
        else
            rs_free(c);
        c = next;
    }
    a->head = keep;
    a->footprint = 0;
    if (keep != NULL) {
        keep->used = 0;
        a->footprint = sizeof(*keep) + keep->size;
    }
}

void *
rs_arena_alloc(struct rs_arena *a, size_t size)
{
    size_t need = (size + 15u) & ~(size_t)15u;
    if (need < size)
        return NULL;
    struct arena_chunk *c = a->head;
    if (c == NULL || c->size - c->used < need) {
        size_t csize = need > a->chunk_size ? need : a->chunk_size;
        struct arena_chunk *n = arena_chunk_new(csize);
        if (n == NULL)
            return NULL;
        if (c != NULL && need > a->chunk_size) {
            /* An oversized block goes behind the current chunk so the
             * current one keeps serving small requests. */
            n->next = c->next;
            c->next = n;
            n->used = need;
            a->footprint += sizeof(*n) + csize;
            return n->data;
        }
        n->next = c;
        a->head = n;
        a->footprint += sizeof(*n) + csize;
        c = n;
    }
    void *p = c->data + c->used;
    c->used += need;
    return p;
}

char *
rs_arena_strndup(struct rs_arena *a, const char *s, size_t n)
{
    char *p = rs_arena_alloc(a, n + 1);
    if (p == NULL)
        return NULL;
    if (n > 0)   /* s may be NULL for an empty value; memcpy must not see it */
        memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

size_t
rs_arena_footprint(const struct rs_arena *a)
{
    return a->footprint;
}
