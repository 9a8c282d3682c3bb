/*
 * arena.h - private to proto/: a chunked bump allocator. Strings and arrays
 * of one document (or of one entry, while streaming) are carved from it and
 * released all at once, which keeps parsing fast and leak-free.
 */
#ifndef RS_ARENA_H
#define RS_ARENA_H

#include <stddef.h>

struct rs_arena;

struct rs_arena *rs_arena_new(size_t chunk_size);
void rs_arena_free(struct rs_arena *a);
/* Forget every allocation but keep the first chunk for reuse. */
void rs_arena_reset(struct rs_arena *a);
/* 16-byte aligned; NULL on allocation failure. */
void *rs_arena_alloc(struct rs_arena *a, size_t size);
char *rs_arena_strndup(struct rs_arena *a, const char *s, size_t n);
/* Bytes currently held from the system (for limits and benchmarks). */
size_t rs_arena_footprint(const struct rs_arena *a);

#endif
