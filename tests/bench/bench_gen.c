/*
 * bench_gen.c - deterministic benchmark documents (bench_gen.h). Values are
 * drawn from a seeded splitmix64 so every run, on every machine, parses and
 * writes the same bytes; the shapes (URL lengths, type mix, sizes spread
 * over decades) follow what real repositories publish.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gen.h"
#include "rs_alloc.h"

#define GEN_EPOCH_2013 1356998400LL   /* 2013-01-01T00:00:00Z, seconds */
#define GEN_SPAN_SECS (11LL * 365 * 86400)
#define GEN_US 1000000LL
#define GEN_AT (1704067200LL * GEN_US) /* 2024-01-01T00:00:00Z: list `at` */

static uint64_t
gen_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static const char *const gen_sections[] = {
    "articles", "datasets", "images", "theses", "reports",
    "audio", "collections", "preprints", "maps", "software",
};

/* Mix of media types as a repository serves them; ext matches type. */
static const struct {
    const char *type;
    const char *ext;
} gen_types[] = {
    {"application/pdf", "pdf"}, {"text/html", "html"},
    {"image/jpeg", "jpg"},      {"application/xml", "xml"},
    {"text/plain", "txt"},      {"image/png", "png"},
    {"application/zip", "zip"}, {"text/csv", "csv"},
};

#define GEN_NELEM(a) (sizeof(a) / sizeof((a)[0]))

static void
gen_entry(struct rs_entry *e, char *loc, uint64_t *s, size_t id)
{
    char slug[16];
    size_t slen = 4 + gen_next(s) % 11;          /* 4..14 letters */
    for (size_t i = 0; i < slen; i++)
        slug[i] = (char)('a' + gen_next(s) % 26);
    slug[slen] = '\0';

    const char *sec = gen_sections[gen_next(s) % GEN_NELEM(gen_sections)];
    size_t t = gen_next(s) % GEN_NELEM(gen_types);
    /* 51 fixed bytes + section + slug + extension: 62..80 bytes. */
    snprintf(loc, BENCH_GEN_LOC_MAX, BENCH_GEN_HOST "%s/%03u/item-%07zu/%s.%s",
             sec, (unsigned)(id % 1000), id, slug, gen_types[t].ext);

    rs_entry_init(e);
    e->loc = loc;
    e->lastmod = (GEN_EPOCH_2013 + (int64_t)(gen_next(s) % GEN_SPAN_SECS)) * GEN_US;
    e->has_md = true;
    /* Sizes spread over decades, from a few hundred bytes to ~64 MB. */
    uint64_t scale = 1ULL << (8 + gen_next(s) % 18);
    e->md.length = (int64_t)(100 + gen_next(s) % scale);
    e->md.type = gen_types[t].type;
    e->md.hash.n = 1;
    struct rs_digest *d = &e->md.hash.d[0];
    d->algo = RS_HASH_MD5;
    snprintf(d->name, sizeof(d->name), "md5");
    d->len = 16;
    uint64_t a = gen_next(s), b = gen_next(s);
    memcpy(d->bytes, &a, 8);
    memcpy(d->bytes + 8, &b, 8);
}

int
bench_gen_part_fill(struct bench_gen_part *p, uint64_t seed, size_t first_id,
                    size_t n)
{
    memset(p, 0, sizeof(*p));
    p->entries = rs_calloc(n ? n : 1, sizeof(*p->entries));
    p->locs = rs_calloc(n ? n : 1, BENCH_GEN_LOC_MAX);
    if (p->entries == NULL || p->locs == NULL) {
        bench_gen_part_cleanup(p);
        return RS_ENOMEM;
    }
    /* Seeded per part, so a part's bytes do not depend on the others. */
    uint64_t s = seed ^ ((uint64_t)first_id * 0x2545f4914f6cdd1dULL);
    for (size_t i = 0; i < n; i++)
        gen_entry(&p->entries[i], p->locs + i * BENCH_GEN_LOC_MAX, &s,
                  first_id + i);
    p->n = n;
    return 0;
}

void
bench_gen_part_cleanup(struct bench_gen_part *p)
{
    rs_free(p->entries);
    rs_free(p->locs);
    memset(p, 0, sizeof(*p));
}

void
bench_gen_list_head(struct rs_head *h, struct rs_link *links,
                    const char *index_url)
{
    rs_head_init(h);
    h->root = RS_ROOT_URLSET;
    h->has_md = true;
    h->md.capability = RS_CAP_RESOURCELIST;
    h->md.at = GEN_AT;
    h->md.completed = GEN_AT + 3600 * GEN_US;
    rs_link_init(&links[0]);
    links[0].rel = "up";
    links[0].href = BENCH_GEN_HOST "capabilitylist.xml";
    h->links = links;
    h->nlinks = 1;
    if (index_url != NULL) {
        rs_link_init(&links[1]);
        links[1].rel = "index";
        links[1].href = index_url;
        h->nlinks = 2;
    }
}

void
bench_gen_index_head(struct rs_head *h, struct rs_link *links)
{
    bench_gen_list_head(h, links, NULL);
    h->root = RS_ROOT_SITEMAPINDEX;
}

void
bench_gen_part_url(size_t i, char *buf)
{
    snprintf(buf, BENCH_GEN_LOC_MAX, BENCH_GEN_BASE "part%05zu.xml", i);
}

int
bench_gen_write(const struct rs_head *h, const struct rs_entry *e, size_t n,
                rs_write_cb cb, void *ud, char *err, size_t errlen)
{
    int rc = RS_ENOMEM;
    struct rs_writer *w = rs_writer_new(cb, ud, NULL);
    if (w == NULL)
        goto out;
    rc = rs_writer_begin(w, h);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = rs_writer_entry(w, &e[i]);
    if (rc == 0)
        rc = rs_writer_end(w);
out:
    if (rc != 0) {
        const char *why = w != NULL ? rs_writer_errstr(w) : NULL;
        snprintf(err, errlen, "%s",
                 why != NULL && *why != '\0' ? why : rs_strerror(rc));
    }
    rs_writer_free(w);
    return rc;
}
