/*
 * dumpzip.h - reading one downloaded Resource Dump / Change Dump package (a
 * ZIP file, libzip underneath): its manifest.xml, parsed and checked, and a
 * verifying reader per manifest entry (length, hashes, ZIP CRC). Owns no
 * network and never writes to the filesystem: manifest paths are only names
 * looked up in the ZIP. Downloading and storing are the caller's business.
 */
#ifndef SUB_DUMPZIP_H
#define SUB_DUMPZIP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rs_doc.h"
#include "rs_error.h"

/*
 * Caps against hostile packages. 0 in any field means its default. Sizes
 * are those the ZIP's central directory declares; they are checked for
 * every member at dumpzip_open, before anything is inflated, and a reader
 * never produces more bytes than were declared, so a member that lies
 * about its size is cut off at the declared size.
 */
struct dumpzip_limits {
    uint64_t max_entry_bytes;    /* uncompressed bytes of one member; 8 GiB */
    uint64_t max_total_bytes;    /* sum over all members; 64 GiB */
    uint32_t max_ratio;          /* uncompressed / compressed; 200 */
    uint64_t ratio_floor;        /* max_ratio only applies to members
                                    larger than this; 1 MiB */
    size_t max_members;          /* ZIP members (directories too); 100000 */
    size_t max_entries;          /* manifest entries; RS_MAX_ENTRIES */
    size_t max_manifest_bytes;   /* manifest.xml; RS_MAX_DOC_BYTES */
};

#define DUMPZIP_DEFAULT_MAX_ENTRY_BYTES (UINT64_C(8) << 30)
#define DUMPZIP_DEFAULT_MAX_TOTAL_BYTES (UINT64_C(64) << 30)
#define DUMPZIP_DEFAULT_MAX_RATIO 200u
#define DUMPZIP_DEFAULT_RATIO_FLOOR (UINT64_C(1) << 20)
#define DUMPZIP_DEFAULT_MAX_MEMBERS 100000u

struct dumpzip;
struct dumpzip_file;

/*
 * Open the package at zip_path (lim may be NULL: all defaults), check every
 * member against the limits, and read manifest.xml (streamed from the ZIP
 * through rs_parse, lenient as everywhere in rssub). The manifest must be a
 * "resourcedump-manifest" or "changedump-manifest"; which one is in
 * dumpzip_head()->md.capability, and the caller checks it is the kind it
 * asked for. Also refused: two entries naming the same ZIP member, and in a
 * Resource Dump Manifest two entries with the same <loc>. z keeps the
 * file open: replacing or removing the path changes nothing z reads.
 * 0 and *out (free with dumpzip_close), or an error with *out = NULL and a
 * one-line message in err (errsz bytes; err may be NULL):
 *   RS_ENOTFOUND  no such file
 *   RS_EIO        it could not be read
 *   RS_EINVALID   not a ZIP, a truncated or inconsistent ZIP (names the
 *                 member), no manifest.xml, a bad manifest ("manifest.xml:
 *                 LINE: why"), the wrong capability, duplicate entries
 *   RS_EPARSE     manifest.xml is not well-formed XML (with its line)
 *   RS_ETOOBIG    a limit was hit (names the member and the limit)
 *   RS_EUNSUPPORTED  manifest.xml is encrypted or compressed with a method
 *                 libzip lacks
 *   RS_ENOMEM
 */
int dumpzip_open(const char *zip_path, const struct dumpzip_limits *lim,
                 struct dumpzip **out, char *err, size_t errsz) RS_MUST_CHECK;

/*
 * A package's local headers, read from its bytes as they arrive (a
 * download), so that dumpzip_open_scanned need not read the file again to
 * find where each stored member's bytes are. Feed it every byte of the
 * package, in order, in any pieces; it stops following by itself at
 * anything it does not (a data descriptor, the central directory) and
 * bounds what it keeps (DUMPZIP_DEFAULT_MAX_MEMBERS headers, 16 MiB of
 * names): the members it did not find are read through libzip, more
 * slowly, never wrongly. Owns only its table; one thread at a time.
 */
struct dumpzip_scan;
struct dumpzip_scan *dumpzip_scan_new(void);   /* NULL: out of memory */
void dumpzip_scan_feed(struct dumpzip_scan *s, const void *buf, size_t len);
void dumpzip_scan_free(struct dumpzip_scan *s);   /* NULL ok */

/*
 * dumpzip_open, with the scan of the same file's bytes (read only; it
 * stays the caller's). scan NULL: the file is read once more for it. A
 * scan of other bytes than the file's costs speed, not correctness: a
 * member is read straight from the file only where its local header, as
 * scanned, agrees with the central directory libzip checked, and such a
 * member's bytes must still match its digest.
 */
int dumpzip_open_scanned(const char *zip_path,
                         const struct dumpzip_limits *lim,
                         const struct dumpzip_scan *scan,
                         struct dumpzip **out, char *err, size_t errsz)
    RS_MUST_CHECK;

/* Frees z. Files still open keep the ZIP open until the last one is
 * closed (z itself must not be used any more). NULL ok. */
void dumpzip_close(struct dumpzip *z);

/* The manifest's root: capability, at/completed or from/until, links.
 * Strings belong to z. */
const struct rs_head *dumpzip_head(const struct dumpzip *z);

/* Manifest entries, in document order; i < dumpzip_count(z). Strings and
 * links belong to z and live until dumpzip_close. */
size_t dumpzip_count(const struct dumpzip *z);
const struct rs_entry *dumpzip_entry(const struct dumpzip *z, size_t i);

/*
 * Open the content of entry i for reading. Checks first what can be checked
 * without inflating: the member exists, is not encrypted, and its declared
 * size equals the manifest's length when the manifest gives one.
 * 0 and *out (close with dumpzip_file_close), or:
 *   RS_ENOTFOUND  the entry's path names no member of the ZIP, or the entry
 *                 has no path (a deleted resource in a Change Dump)
 *   RS_EINVALID   the member's size differs from the manifest's length
 *   RS_EUNSUPPORTED  encrypted, or a compression method libzip lacks
 *   RS_EINVAL     i out of range; RS_ENOMEM; RS_EIO
 * with a message in err. Several files of one dumpzip may be open at once;
 * neither object is thread-safe.
 */
int dumpzip_file_open(struct dumpzip *z, size_t i, struct dumpzip_file **out,
                      char *err, size_t errsz) RS_MUST_CHECK;

/*
 * Another reader of z's members, for another thread, sharing z's manifest
 * (read only). A stored member with a digest is read straight from the
 * file dumpzip_open checked (z's descriptor, through a window of the
 * reader's own); for any other member the reader opens its own libzip
 * handle on the package the first time one is asked for, and that open
 * finds the same members or refuses (dumpzip_reader_open: RS_EINVALID,
 * the file changed). A dumpzip and its readers may each be used by a
 * different thread at once; each one, and the files it opened, by one
 * thread at a time. 0 and *out, or RS_ENOMEM with a message in err. Free
 * every reader (its files closed) before dumpzip_close(z).
 */
struct dumpzip_reader;
int dumpzip_reader_new(struct dumpzip *z, struct dumpzip_reader **out,
                       char *err, size_t errsz) RS_MUST_CHECK;
void dumpzip_reader_free(struct dumpzip_reader *r);    /* NULL ok */

/* dumpzip_file_open through reader r, with the same results. */
int dumpzip_reader_open(struct dumpzip_reader *r, size_t i,
                        struct dumpzip_file **out, char *err, size_t errsz)
    RS_MUST_CHECK;

/*
 * Read up to len (> 0) bytes of content into buf. Returns the number of
 * bytes read (> 0), or 0 at the end, only once the content has been checked
 * complete: exactly the declared length, and the strongest digest in the
 * entry's hash attribute that rs_hasher supports (rs_hashes_strongest:
 * sha-256, sha-512, sha-1, md5; others are ignored), and the ZIP CRC
 * where it adds anything: always for a member read through libzip, not
 * for a stored member with a digest, read straight from the file (the
 * digest is the stronger check of the same bytes). Bytes handed out before
 * that are unverified: keep them aside until 0 comes back. Otherwise a
 * negative code, repeated by every later call, with dumpzip_file_error():
 *   RS_EINVALID   content shorter or longer than declared, a hash or CRC
 *                 mismatch, corrupt compressed data
 *   RS_EIO, RS_ENOMEM, RS_EINVAL (len 0)
 */
ssize_t dumpzip_file_read(struct dumpzip_file *f, void *buf, size_t len)
    RS_MUST_CHECK;

/* Why the last read failed ("" if it did not). Valid until the file is
 * closed. */
const char *dumpzip_file_error(const struct dumpzip_file *f);

/* Content bytes read so far. */
uint64_t dumpzip_file_offset(const struct dumpzip_file *f);

/* NULL ok. Closing before the end is fine (nothing is verified then). */
void dumpzip_file_close(struct dumpzip_file *f);

#endif
