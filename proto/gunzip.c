/*
 * gunzip.c - a gzip stream inflated as it is fed (rs_gunzip.h): zlib's
 * inflate with gzip framing, into a fixed buffer handed to the caller's
 * sink piece by piece, so that memory stays bounded whatever the
 * compression ratio; the caller bounds the total (a parser's max_bytes).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "rs_alloc.h"
#include "rs_gunzip.h"

#define GUNZIP_OUT (64 * 1024)

struct rs_gunzip {
    z_stream z;
    bool at_member_end;        /* between members: the stream may end */
    bool trailing;             /* after a member, bytes that start none:
                                  ignored, as gunzip does (padding) */
    char err[160];
    unsigned char out[GUNZIP_OUT];
};

bool
rs_gunzip_magic(const char *buf, size_t len)
{
    return len >= 2 && (unsigned char)buf[0] == 0x1f &&
           (unsigned char)buf[1] == 0x8b;
}

struct rs_gunzip *
rs_gunzip_new(void)
{
    struct rs_gunzip *g = rs_calloc(1, sizeof(*g));

    if (g == NULL)
        return NULL;
    /* 16 + MAX_WBITS: gzip framing (header, CRC-32, length) only */
    if (inflateInit2(&g->z, 16 + MAX_WBITS) != Z_OK) {
        rs_free(g);
        return NULL;
    }
    return g;
}

void
rs_gunzip_free(struct rs_gunzip *g)
{
    if (g == NULL)
        return;
    inflateEnd(&g->z);
    rs_free(g);
}

static int
gz_fail(struct rs_gunzip *g, int rc, const char *what)
{
    snprintf(g->err, sizeof(g->err), "%s", what);
    return rc;
}

int
rs_gunzip_feed(struct rs_gunzip *g, const char *buf, size_t len,
               rs_gunzip_sink sink, void *ud)
{
    g->err[0] = '\0';
    while (len > 0 && !g->trailing) {
        /* avail_in is an unsigned int: feed a huge piece in parts */
        uInt take = len > (1u << 30) ? (1u << 30) : (uInt)len;
        if (g->at_member_end) {
            /* another member follows (gzip -c a b > ab): gunzip reads
             * them as one stream; anything else after a whole member
             * (zeros a tool padded the file with) it ignores */
            if ((unsigned char)buf[0] != 0x1f ||
                (len > 1 && (unsigned char)buf[1] != 0x8b)) {
                g->trailing = true;
                break;
            }
            if (inflateReset(&g->z) != Z_OK)
                return gz_fail(g, RS_ENOMEM, "gzip: cannot restart");
            g->at_member_end = false;
        }
        g->z.next_in = (Bytef *)(uintptr_t)buf;
        g->z.avail_in = take;
        int zrc;
        do {
            g->z.next_out = g->out;
            g->z.avail_out = sizeof(g->out);
            zrc = inflate(&g->z, Z_NO_FLUSH);
            if (zrc == Z_MEM_ERROR)
                return gz_fail(g, RS_ENOMEM, "gzip: out of memory");
            if (zrc == Z_NEED_DICT || zrc == Z_DATA_ERROR ||
                zrc == Z_STREAM_ERROR)
                return gz_fail(g, RS_EPARSE, g->z.msg != NULL
                               ? g->z.msg : "not a valid gzip stream");
            size_t n = sizeof(g->out) - g->z.avail_out;
            if (n > 0) {
                int src = sink(ud, (const char *)g->out, n);
                if (src != 0)
                    return src;
            }
            /* Z_BUF_ERROR: no progress possible, more input needed */
        } while (zrc == Z_OK && g->z.avail_out == 0);
        if (zrc == Z_STREAM_END)
            g->at_member_end = true;
        size_t used = take - g->z.avail_in;
        buf += used;
        len -= used;
        if (zrc != Z_STREAM_END && g->z.avail_in > 0)
            return gz_fail(g, RS_EPARSE, "gzip: input not consumed");
    }
    return 0;
}

int
rs_gunzip_finish(struct rs_gunzip *g)
{
    if (!g->at_member_end)
        return gz_fail(g, RS_EPARSE, "gzip stream cut short");
    return 0;
}

const char *
rs_gunzip_error(const struct rs_gunzip *g)
{
    return g->err;
}
