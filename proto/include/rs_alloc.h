/*
 * rs_alloc.h - the one allocation seam of proto/ and common/.
 * All heap memory of those layers goes through these functions so tests can
 * replace the allocator and fail the Nth allocation (as curl's torture tests
 * do). libxml2's own allocations are not routed here.
 */
#ifndef RS_ALLOC_H
#define RS_ALLOC_H

#include <stddef.h>

struct rs_allocator {
    void *(*malloc_fn)(size_t size);
    void *(*realloc_fn)(void *ptr, size_t size);
    void (*free_fn)(void *ptr);
};

/* Install a (process-wide) allocator; NULL restores the C library's.
 * Not thread-safe: call before any other thread allocates. */
void rs_alloc_set(const struct rs_allocator *a);

void *rs_malloc(size_t size);
void *rs_calloc(size_t n, size_t size);   /* checks n*size for overflow */
void *rs_realloc(void *ptr, size_t size);
void rs_free(void *ptr);                  /* rs_free(NULL) is a no-op */
char *rs_strdup(const char *s);
char *rs_strndup(const char *s, size_t n); /* always NUL-terminates */

#endif
