/*
 * bench_gen.h - deterministic generator of benchmark documents: realistic
 * Resource List entries (a 60-80 byte <loc>, <lastmod>, <rs:md> with an
 * md5 hash, length and type) and the heads of a Resource List, a part of a
 * Resource List Index and the index itself. Writing goes through the
 * project's own writer (rs_write.h); this module only makes the models.
 */
#ifndef BENCH_GEN_H
#define BENCH_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "rs_doc.h"
#include "rs_write.h"

/* Where the generated documents claim to live; the index's <loc>s are
 * BENCH_GEN_BASE "partNNNNN.xml" and a reader maps them to files. */
#define BENCH_GEN_HOST "http://bench.example.org/"
#define BENCH_GEN_BASE BENCH_GEN_HOST "rl/"
#define BENCH_GEN_LOC_MAX 96        /* bytes per generated <loc>, NUL included */
#define BENCH_GEN_SEED 20130102u    /* the default seed: same files every run */

/* n generated entries; entries[i].loc points into locs. */
struct bench_gen_part {
    size_t n;
    struct rs_entry *entries;
    char *locs;                     /* n * BENCH_GEN_LOC_MAX bytes */
};

/* Fill p with n entries numbered from first_id (so locs are unique across
 * parts), derived only from seed and first_id. 0 or RS_ENOMEM. */
int bench_gen_part_fill(struct bench_gen_part *p, uint64_t seed,
                        size_t first_id, size_t n);
void bench_gen_part_cleanup(struct bench_gen_part *p);

/* Heads. A list head has rel="up" to the Capability List and, when
 * index_url is not NULL, rel="index" to it; the index head has rel="up".
 * links (room for 2) must outlive the head. */
void bench_gen_list_head(struct rs_head *h, struct rs_link *links,
                         const char *index_url);
void bench_gen_index_head(struct rs_head *h, struct rs_link *links);

/* The <loc> of part i of the index, in buf (BENCH_GEN_LOC_MAX bytes). */
void bench_gen_part_url(size_t i, char *buf);

/* Write head + entries with a new writer onto cb. 0 or the writer's error,
 * with its message in err (errlen bytes). */
int bench_gen_write(const struct rs_head *h, const struct rs_entry *e,
                    size_t n, rs_write_cb cb, void *ud, char *err,
                    size_t errlen);

#endif
