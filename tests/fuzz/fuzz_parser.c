/*
 * fuzz_parser.c - libFuzzer target for the document parser and writer
 * (rs_parse.h, rs_write.h). The whole input is the document. It is fed
 * once in chunks whose sizes come from the first input bytes and once
 * through rs_doc_parse (both inflating a gzipped input, as rssub does):
 * both must accept or both refuse, since the parser
 * promises any chunking works (which error comes first in a document with
 * several may differ: libxml2 meets an encoding error earlier in smaller
 * chunks). A document that parses must serialize
 * (leniently, as it was read), and the output must parse and serialize to
 * the same bytes again.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rs_alloc.h"
#include "rs_gunzip.h"
#include "rs_parse.h"
#include "rs_write.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* As a reader of Sources parses: a gzipped input is inflated (both ways
 * of feeding must still agree); what is written back is plain XML. */
static const struct rs_parse_opts fp_opts = { .gunzip = true };

struct fp_count {
    size_t heads, entries, ends;
    size_t sum;
};

static size_t
fp_touch(const char *s)
{
    return s == NULL ? 0 : strlen(s);
}

static int
fp_on_head(void *ud, const struct rs_head *h)
{
    struct fp_count *c = ud;
    if (c->heads++ != 0 || c->entries != 0)
        abort();
    for (size_t i = 0; i < h->nlinks; i++)
        c->sum += fp_touch(h->links[i].href) + fp_touch(h->links[i].rel);
    return 0;
}

static int
fp_on_entry(void *ud, const struct rs_entry *e)
{
    struct fp_count *c = ud;
    if (c->heads != 1)
        abort();
    c->entries++;
    c->sum += fp_touch(e->loc) + fp_touch(e->md.type)
              + fp_touch(e->md.path) + fp_touch(e->md.capability_other);
    for (size_t i = 0; i < e->nlinks; i++)
        c->sum += fp_touch(e->links[i].href) + fp_touch(e->links[i].rel);
    return 0;
}

static int
fp_on_end(void *ud, const struct rs_head *h)
{
    struct fp_count *c = ud;
    (void)h;
    if (c->ends++ != 0 || c->heads != 1)
        abort();
    return 0;
}

/* Stream data through a parser in chunks of 1..256 bytes, the sizes taken
 * in turn from the first (up to) eight input bytes. */
static int
fp_stream(const uint8_t *data, size_t size, struct fp_count *c)
{
    static const struct rs_parser_cbs cbs = { fp_on_head, fp_on_entry,
                                              fp_on_end };
    struct rs_parser *p = rs_parser_new(&fp_opts, &cbs, c);
    if (p == NULL)
        abort();
    size_t nsizes = size < 8 ? size : 8;
    int rc = 0;
    size_t off = 0;
    for (size_t i = 0; off < size && rc == 0; i++) {
        size_t step = nsizes ? (size_t)data[i % nsizes] + 1 : size;
        if (step > size - off)
            step = size - off;
        rc = rs_parser_feed(p, (const char *)data + off, step);
        off += step;
    }
    if (rc == 0)
        rc = rs_parser_finish(p);
    if (rc == 0) {
        /* a gzipped input's bytes are counted inflated */
        if (rs_parser_error(p) != NULL || c->ends != 1
            || rs_parser_entries(p) != c->entries
            || (!rs_gunzip_magic((const char *)data, size)
                && rs_parser_bytes(p) != size))
            abort();
    } else if (rs_parser_error(p) == NULL
               || rs_parser_finish(p) != rc) {
        abort();                    /* errors are sticky and explained */
    }
    rs_parser_free(p);
    return rc;
}

static void
fp_write_reparse(const struct rs_doc *doc)
{
    static const struct rs_write_opts wopts = { .pretty = true, .lenient = true };
    char *out = NULL, *out2 = NULL;
    size_t len = 0, len2 = 0;
    if (rs_doc_write(doc, &wopts, &out, &len) != 0)
        abort();
    struct rs_doc *back = NULL;
    struct rs_diag diag;
    if (rs_doc_parse(out, len, NULL, &back, &diag) != 0)
        abort();
    if (back->nentries != doc->nentries)
        abort();
    if (rs_doc_write(back, &wopts, &out2, &len2) != 0)
        abort();
    if (len2 != len || memcmp(out, out2, len) != 0)
        abort();
    rs_free(out);
    rs_free(out2);
    rs_doc_free(back);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fp_count c;
    memset(&c, 0, sizeof(c));
    int rc_stream = fp_stream(data, size, &c);

    struct rs_doc *doc = NULL;
    struct rs_diag diag;
    int rc = rs_doc_parse((const char *)data, size, &fp_opts, &doc, &diag);
    if ((rc == 0) != (rc_stream == 0))
        abort();
    if (rc != 0) {
        if (doc != NULL)
            abort();
        return 0;
    }
    if (doc == NULL || doc->nentries != c.entries)
        abort();
    fp_write_reparse(doc);
    rs_doc_free(doc);
    return 0;
}
