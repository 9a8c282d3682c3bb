/*
 * fuzz_hash.c - libFuzzer target for rs_hash.h. A hash attribute that
 * parses must format to text that parses to the same list; the streaming
 * hasher must digest the input in any chunking to the same values.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rs_hash.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FH_ALL ((1u << RS_HASH_MD5) | (1u << RS_HASH_SHA1) \
                | (1u << RS_HASH_SHA256) | (1u << RS_HASH_SHA512))

static void
fh_same(const struct rs_hashes *a, const struct rs_hashes *b)
{
    if (a->n != b->n)
        abort();
    for (unsigned i = 0; i < a->n; i++) {
        const struct rs_digest *x = &a->d[i], *y = &b->d[i];
        if (x->algo != y->algo || strcmp(x->name, y->name) != 0
            || x->len != y->len || memcmp(x->bytes, y->bytes, x->len) != 0)
            abort();
    }
}

static void
fh_digest(const uint8_t *data, size_t size, size_t step,
          struct rs_hashes *out)
{
    struct rs_hasher *h = rs_hasher_new(FH_ALL);
    if (h == NULL)
        abort();
    for (size_t off = 0; off < size; off += step) {
        size_t n = size - off < step ? size - off : step;
        if (rs_hasher_update(h, data + off, n) != 0)
            abort();
    }
    if (rs_hasher_final(h, out) != 0)
        abort();
    rs_hasher_free(h);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rs_hashes h;
    if (rs_hashes_parse((const char *)data, size, &h) == 0) {
        char buf[RS_HASHES_BUFSZ];
        size_t n = rs_hashes_format(&h, buf);
        if (n == 0 || n >= RS_HASHES_BUFSZ || strlen(buf) != n)
            abort();
        struct rs_hashes back;
        if (rs_hashes_parse(buf, n, &back) != 0)
            abort();
        fh_same(&h, &back);
        /* a list agrees with itself exactly when it has a known algo */
        bool known = false;
        for (unsigned i = 0; i < h.n; i++)
            known = known || h.d[i].algo != RS_HASH_OTHER;
        if (rs_hashes_match(&h, &back) != (known ? 1 : 0))
            abort();
    }

    if (size > 0 && size <= 4096) {
        struct rs_hashes whole, chunked;
        fh_digest(data, size, size, &whole);
        fh_digest(data, size, (size_t)data[0] % 67 + 1, &chunked);
        fh_same(&whole, &chunked);
        if (rs_hashes_match(&whole, &chunked) != 1)
            abort();
    }
    return 0;
}
