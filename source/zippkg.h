/*
 * zippkg.h - one dump package: a ZIP written by libzip from members the
 * caller streams in order (stored, not deflated) and a last member,
 * manifest.xml (deflated), whose bytes the caller makes once every member
 * has been read. Used by the Resource Dump (dumpw.c) and the Change Dump
 * (changedump.c); what a member holds and what the manifest says is
 * theirs, the libzip plumbing is this module's.
 */
#ifndef SOURCE_ZIPPKG_H
#define SOURCE_ZIPPKG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rs_error.h"

#define ZIPPKG_MANIFEST "manifest.xml"
#define ZIPPKG_WHY 256                /* a callback's message buffer */
#define ZIPPKG_GONE 1                 /* ops->open: the member is gone */

/* Each callback returns 0 (read: bytes, 0 at the end) or a negative
 * RS_E*, and may then put a reason in why (ZIPPKG_WHY bytes). */
struct zippkg_ops {
    /* Member i is about to be read (members are read one at a time, in
     * order). ZIPPKG_GONE: its file is gone (deleted since the caller
     * listed it); its reads give nothing, and the member is taken out of
     * the package before zippkg_write returns, so that the package holds
     * exactly what the manifest, which the caller makes, lists. */
    int (*open)(void *ud, size_t i, char *why);
    ssize_t (*read)(void *ud, size_t i, void *buf, size_t len, char *why);
    /* After member i's last read. */
    int (*close)(void *ud, size_t i, char *why);
    /* Every member has been read and closed: the manifest, whose bytes
     * stay the caller's and valid until zippkg_write returns. */
    int (*manifest)(void *ud, const char **buf, size_t *len, char *why);
    /* Give up now (checked at each member's open)? NULL: never. */
    bool (*stopped)(void *ud);
};

/*
 * Write the package at path (replaced if it exists): members names[0..n)
 * but those found gone, then manifest.xml. Files are read when libzip
 * closes the archive, each member streamed through ops. 0 and *size (the
 * file's bytes), or a negative RS_E* with a message in err; the file is
 * then removed.
 */
int zippkg_write(const char *path, const char *const *names, size_t n,
                 const struct zippkg_ops *ops, void *ud, uint64_t *size,
                 char *err, size_t errsz) RS_MUST_CHECK;

/* A manifest's bytes, grown as an rs_writer puts them (zippkg_man_put is
 * its put callback, ud the struct), capped at RS_MAX_DOC_BYTES. Zero
 * initialised; len = 0 to reuse it; zippkg_man_free releases it. */
struct zippkg_man {
    char *buf;
    size_t len, cap;
};
int zippkg_man_put(void *ud, const char *buf, size_t len);
void zippkg_man_free(struct zippkg_man *m);

/* The manifest written to path (a temporary name renamed over it), to be
 * served on its own, the package entry's rel="contents" (core 11.1): a
 * Destination reads it before the package arrives. 0, or RS_EIO with a
 * message in err. */
int zippkg_man_save(const struct zippkg_man *m, const char *path, char *err,
                    size_t errsz) RS_MUST_CHECK;

#endif
