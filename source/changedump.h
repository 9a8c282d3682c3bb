/*
 * changedump.h - rssource's Change Dump (--dump): the content of each
 * created or updated change captured when the catalog reads it (appended
 * to its Change List's spool, STATE/dumps/spool-L.bin), and, once the
 * list closes, its Change Dump packages (changedump-L-K.zip, one
 * bitstream per change, each with its Change Dump Manifest, also served
 * as changedump-L-K.xml) built by a thread of its own, and the document
 * changedump.xml listing every package of the lists kept. What a change
 * is, is catalog.c's; when lists close and are dropped, changelog.c's.
 */
#ifndef SOURCE_CHANGEDUMP_H
#define SOURCE_CHANGEDUMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "docs.h"
#include "rs_error.h"
#include "rs_time.h"
#include "state.h"

#define CHANGEDUMP_DOC "changedump.xml"
#define CHANGEDUMP_DEFAULT_SPOOL (UINT64_C(1) << 30)

struct changedump_opts {
    const struct docs *docs;     /* read by the build thread: never freed
                                    or changed while changedump lives */
    struct state *st;            /* the writer (loop thread only) */
    const char *state_path;      /* the build's own read connection */
    const char *dir;             /* spools and packages (created) */
    uint64_t max_spool;          /* bytes of every spool on disk, at most
                                    (--changedump-max-bytes); 0: 1 GiB */
    uint64_t max_bytes;          /* content bytes per package (a larger
                                    bitstream goes alone); 0: 64 MiB */
    size_t max_files;            /* manifest entries per package,
                                    1..50000; 0: 20000 */
    /* Capture gave up on Change List list (why: over the cap, a write
     * error): it will have no Change Dump. Once per list. May be NULL. */
    void (*on_skip)(void *ud, int64_t list, const char *why);
    void *ud;
};

struct changedump_stats {
    uint64_t captured;           /* changes captured */
    uint64_t captured_bytes;
    uint64_t spool_bytes;        /* on disk now */
    uint64_t lists_built, lists_skipped;
};

struct changedump;

/* Removes spools and packages of lists that no longer need them (built,
 * dropped, a build cut short). NULL with *err. */
struct changedump *changedump_new(const struct changedump_opts *o,
                                  const char **err);
/* Waits for a build under way (its result is thrown away). NULL ok. */
void changedump_free(struct changedump *d);

/* ------------------------------------------------------------ capture */

/*
 * The catalog's hot path, on the loop thread. begin: a file of size bytes
 * is about to be read for a change of Change List list; true when its
 * bytes are to be captured (then write each chunk read, then end).
 * end(ok): ok when the read was whole and unchanged (the digests are of
 * exactly these bytes); true with *off and *len of the capture, which stays
 * pending: commit once the change row and its state_spool_add are in the
 * transaction, or let the next begin reuse the space.
 */
bool changedump_capture_begin(struct changedump *d, int64_t list,
                              int64_t size);
void changedump_capture_write(struct changedump *d, const void *buf,
                              size_t len);
bool changedump_capture_end(struct changedump *d, bool ok, int64_t *list,
                            int64_t *off, int64_t *len);
void changedump_capture_commit(struct changedump *d);

/* -------------------------------------------------------------- builds */

#define CHANGEDUMP_PUBLISHED 1    /* changedump_tick: a list's packages */
#define CHANGEDUMP_SKIPPED 2      /* a list that gets none (errstr: why) */

/*
 * From the loop, every second or so: publish a build that ended
 * (CHANGEDUMP_PUBLISHED; CHANGEDUMP_SKIPPED when the list could have no
 * Change Dump: a change not captured, a capture that does not match its
 * digests; a negative RS_E* when the build failed otherwise:
 * changedump_errstr says why, it is tried again at changedump_retry_at:
 * 1 s later, doubling with each failure in a row up to a minute), drop
 * the packages of lists the retention dropped, and start the build of
 * the oldest closed list that has none. 0 otherwise.
 */
int changedump_tick(struct changedump *d) RS_MUST_CHECK;
/* Build every pending list now, blocking (tests). 0 or the first error. */
int changedump_build_all(struct changedump *d) RS_MUST_CHECK;
bool changedump_building(const struct changedump *d);
/* After a failed build: when the next may start; RS_TIME_NONE when the
 * last build did not fail. */
rs_time_t changedump_retry_at(const struct changedump *d);
const char *changedump_errstr(const struct changedump *d);
const struct changedump_stats *changedump_stats(const struct changedump *d);
/* Packages listed in changedump.xml (0: it is not published). */
int64_t changedump_packages(const struct changedump *d);

/*
 * The file serving name (CHANGEDUMP_DOC, changedump-L-K.zip or its
 * manifest changedump-L-K.xml) into path, its media type in *ctype. 0 or
 * RS_ENOTFOUND.
 */
int changedump_file(const struct changedump *d, const char *name, char *path,
                    size_t len, const char **ctype) RS_MUST_CHECK;

#endif
