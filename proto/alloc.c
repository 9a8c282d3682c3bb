/* alloc.c - the replaceable allocator behind rs_malloc & co (rs_alloc.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rs_alloc.h"

static struct rs_allocator alloc_cur = { malloc, realloc, free };

void
rs_alloc_set(const struct rs_allocator *a)
{
    if (a == NULL) {
        alloc_cur.malloc_fn = malloc;
        alloc_cur.realloc_fn = realloc;
        alloc_cur.free_fn = free;
    } else {
        alloc_cur = *a;
    }
}

void *
rs_malloc(size_t size)
{
    return alloc_cur.malloc_fn(size ? size : 1);
}

void *
rs_calloc(size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    void *p = rs_malloc(n * size);
    if (p != NULL)
        memset(p, 0, n * size);
    return p;
}

void *
rs_realloc(void *ptr, size_t size)
{
    return alloc_cur.realloc_fn(ptr, size ? size : 1);
}

void
rs_free(void *ptr)
{
    if (ptr != NULL)
        alloc_cur.free_fn(ptr);
}

char *
rs_strndup(const char *s, size_t n)
{
    char *p = rs_malloc(n + 1);
    if (p == NULL)
        return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *
rs_strdup(const char *s)
{
    return rs_strndup(s, strlen(s));
}
