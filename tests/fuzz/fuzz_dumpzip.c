/*
 * fuzz_dumpzip.c - libFuzzer target for dumpzip.h: the input is a dump
 * package. It is written to a file (dumpzip opens a path), opened, and
 * every manifest entry read to its end twice: through the package's own
 * handle and through a second reader, in reads of a size taken from the
 * input. Both reads must agree: the same bytes and the same verdict. It is
 * opened once more with the scan of its bytes fed in pieces of a size
 * taken from the input, as a download feeds it: the verdict, and every
 * entry's bytes and verdict, must be those of the open that scanned the
 * file itself.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dumpzip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fz_path[64];

/* Read entry i through rd (NULL: z's own handle) into out (cap bytes);
 * *len the bytes read, the return the last read's result or the open's
 * error. */
static ssize_t
fz_read(struct dumpzip *z, struct dumpzip_reader *rd, size_t i, size_t step,
        unsigned char *out, size_t cap, size_t *len)
{
    struct dumpzip_file *f = NULL;
    char err[512];
    int rc = rd != NULL ? dumpzip_reader_open(rd, i, &f, err, sizeof(err))
                        : dumpzip_file_open(z, i, &f, err, sizeof(err));
    ssize_t n = rc;
    *len = 0;
    if (rc != 0)
        return rc;
    for (;;) {
        unsigned char buf[4096];
        n = dumpzip_file_read(f, buf, step);
        if (n <= 0)
            break;
        if ((size_t)n > step)
            abort();
        if (*len + (size_t)n <= cap)
            memcpy(out + *len, buf, (size_t)n);
        *len += (size_t)n;
    }
    if (n == 0 && dumpzip_file_offset(f) != *len)
        abort();
    dumpzip_file_close(f);
    return n;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned char a[1 << 16], b[1 << 16];
    struct dumpzip_limits lim = {
        .max_entry_bytes = 1u << 20,
        .max_total_bytes = 4u << 20,
        .max_members = 1000,
        .max_entries = 1000,
        .max_manifest_bytes = 1u << 20,
    };
    struct dumpzip *z = NULL;
    struct dumpzip_reader *rd = NULL;
    char err[512];
    size_t step = size > 0 ? 1 + data[0] % 64 : 1;
    int fd;

    if (fz_path[0] == '\0') {
        snprintf(fz_path, sizeof(fz_path), "/tmp/fuzz_dumpzip.%d.zip",
                 (int)getpid());
    }
    /* a new file each time, as a download makes one */
    unlink(fz_path);
    if ((fd = open(fz_path, O_WRONLY | O_CREAT | O_TRUNC, 0600)) < 0)
        abort();
    if (size > 0 && write(fd, data, size) != (ssize_t)size)
        abort();
    close(fd);
    struct dumpzip_scan *sc = dumpzip_scan_new();
    struct dumpzip *zs = NULL;
    size_t piece = size > 1 ? 1 + data[1] % 200 : 1;
    if (sc == NULL)
        abort();
    for (size_t at = 0; at < size; at += piece)
        dumpzip_scan_feed(sc, data + at, size - at < piece ? size - at : piece);
    int rs = dumpzip_open_scanned(fz_path, &lim, sc, &zs, err, sizeof(err));
    dumpzip_scan_free(sc);
    int ro = dumpzip_open(fz_path, &lim, &z, err, sizeof(err));
    if (rs != ro)
        abort();
    if (ro == 0) {
        if (dumpzip_reader_new(z, &rd, err, sizeof(err)) != 0 ||
            dumpzip_count(z) != dumpzip_count(zs))
            abort();
        for (size_t i = 0; i < dumpzip_count(z); i++) {
            size_t la, lb, ls;
            ssize_t ra = fz_read(z, NULL, i, step, a, sizeof(a), &la);
            ssize_t rb = fz_read(z, rd, i, 4096, b, sizeof(b), &lb);
            if (ra != rb || (ra == 0 && (la != lb ||
                (la <= sizeof(a) && memcmp(a, b, la) != 0))))
                abort();
            ssize_t rz = fz_read(zs, NULL, i, 4096, b, sizeof(b), &ls);
            if (rz != ra || (ra == 0 && (ls != la ||
                (la <= sizeof(a) && memcmp(a, b, la) != 0))))
                abort();
        }
        dumpzip_reader_free(rd);
        dumpzip_close(z);
        dumpzip_close(zs);
    }
    unlink(fz_path);
    return 0;
}
