/*
 * state.h - rssource's persistent state in one SQLite database (WAL): the
 * catalog of resources with their cached hashes, the change log, the
 * Change Lists it is cut into, the framework events, and small meta
 * values (outbox watermarks, the current Resource List snapshot). Plain
 * storage: when to record what is catalog.c's and changelog.c's business.
 *
 * Strings handed out by getters and iterators are borrowed: valid until
 * the next call on the same handle or iterator.
 */
#ifndef SOURCE_STATE_H
#define SOURCE_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_doc.h"
#include "rs_error.h"
#include "rs_time.h"

struct state;
struct state_iter;

/* One resource: a regular file of the tree, as last seen. The identity
 * (dev, ino, size, mtime_ns) keys the hash cache: a file whose identity is
 * unchanged is not read again. */
struct state_res {
    const char *path;          /* relative path */
    int64_t dev, ino;
    int64_t size;              /* bytes */
    int64_t mtime_ns;          /* st_mtim, nanoseconds since the epoch */
    bool hashed;               /* md5/sha256 hold the content's digests */
    uint8_t md5[16];
    uint8_t sha256[32];
    const char *type;          /* media type */
    rs_time_t first_seen;
};

/* One change of the change log. */
struct state_change {
    int64_t seq;               /* assigned by state_change_add; increasing */
    rs_time_t dt;              /* when it happened (detected), microseconds;
                                  non-decreasing with seq */
    int64_t list;              /* the Change List it belongs to */
    const char *path;
    enum rs_change change;
    int64_t size;              /* -1 for deleted */
    bool hashed;
    uint8_t md5[16];
    uint8_t sha256[32];
    const char *type;          /* NULL for deleted */
    rs_time_t lastmod;         /* RS_TIME_NONE for deleted */
};

/* One Change List: open while until == RS_TIME_NONE. */
struct state_clist {
    int64_t num;               /* 1, 2, ... */
    rs_time_t from, until;
    int64_t count;             /* changes in it */
};

/* One framework event: a capability document created or updated. Names
 * are relative to the documents' directory (resourcelist-3-1.xml), so a
 * change of --base-url never strands them. */
struct state_fw {
    int64_t seq;
    rs_time_t dt;
    const char *name;
    enum rs_capability cap;
    enum rs_change change;
    const char *index;         /* the index it is listed in, or NULL */
};

/*
 * Open (creating if needed) the database at path. The writer handle takes
 * an exclusive lock so that two rssource processes never share a state;
 * readonly handles (for long reads that must see one snapshot while the
 * writer goes on) take none. 0, or RS_EIO / RS_ESTATE (locked by another
 * process) / RS_ENOMEM with a message in err.
 */
int state_open(const char *path, bool readonly, struct state **out,
               char *err, size_t errlen) RS_MUST_CHECK;
void state_free(struct state *st);   /* NULL ok */
const char *state_errstr(const struct state *st);   /* last SQLite error */

/*
 * Checkpoint the WAL from a thread of its own (its own connection) every
 * interval_ms, instead of at commits: the loop thread's commits then never
 * wait for an fsync (with synchronous=NORMAL only checkpoints sync). The
 * writer handle only; stopped by state_checkpointer_stop or state_free.
 * A commit that leaves the WAL over 16,000 frames still checkpoints
 * itself, which bounds the WAL (rs_sqlckpt.h). 0, RS_ESTATE (already
 * running, or a reader), or rs_sqlckpt_start's error.
 */
int state_checkpointer_start(struct state *st, unsigned interval_ms)
    RS_MUST_CHECK;
void state_checkpointer_stop(struct state *st);

/* Whether the database was created by this open (a first start). */
bool state_is_new(const struct state *st);

/* Transactions nest: only the outermost begin/commit reach SQLite. */
int state_begin(struct state *st) RS_MUST_CHECK;
int state_commit(struct state *st) RS_MUST_CHECK;
void state_rollback(struct state *st);

/* A read transaction: every query until state_end_read sees one snapshot
 * of the database, whatever the writer commits meanwhile (WAL). For
 * readonly handles. */
int state_begin_read(struct state *st) RS_MUST_CHECK;
void state_end_read(struct state *st);

/* ---------------------------------------------------------- resources */

int state_res_get(struct state *st, const char *path, struct state_res *out)
    RS_MUST_CHECK;                           /* 0 or RS_ENOTFOUND */
/* Any resource with this identity that has hashes (the hash cache): a
 * file moved or renamed keeps its digests. 0 or RS_ENOTFOUND. */
int state_res_by_identity(struct state *st, int64_t dev, int64_t ino,
                          int64_t size, int64_t mtime_ns,
                          struct state_res *out) RS_MUST_CHECK;
int state_res_put(struct state *st, const struct state_res *r) RS_MUST_CHECK;
int state_res_delete(struct state *st, const char *path) RS_MUST_CHECK;
/* Is there a row strictly beneath the directory name under? 1, 0, or a
 * negative RS_E* (one cached statement: cheap enough for every change). */
int state_res_any_beneath(struct state *st, const char *under)
    RS_MUST_CHECK;
int64_t state_res_count(struct state *st);

/* Resources in path order (byte order): all when under is "", otherwise
 * those strictly beneath the directory under. */
int state_res_iter(struct state *st, const char *under,
                   struct state_iter **out) RS_MUST_CHECK;
/* All resources whose path is after `after`, in path order. */
int state_res_iter_after(struct state *st, const char *after,
                         struct state_iter **out) RS_MUST_CHECK;
/* 1 and *out filled, 0 at the end, or a negative RS_E*. */
int state_res_next(struct state_iter *it, struct state_res *out)
    RS_MUST_CHECK;

/* ------------------------------------------------------------ changes */

int state_change_add(struct state *st, struct state_change *c) RS_MUST_CHECK;
int64_t state_change_last_seq(struct state *st);   /* 0 when none */
rs_time_t state_change_last_dt(struct state *st);  /* RS_TIME_NONE */
/* How many changes have after < seq <= upto; a negative RS_E* on error. */
int64_t state_change_count(struct state *st, int64_t after, int64_t upto);
/* Changes with seq > after, in seq order; list > 0 keeps only that Change
 * List's; at most limit (0: no limit). */
int state_change_iter(struct state *st, int64_t list, int64_t after,
                      int64_t limit, struct state_iter **out) RS_MUST_CHECK;
int state_change_next(struct state_iter *it, struct state_change *out)
    RS_MUST_CHECK;

/* -------------------------------------------------------- change lists */

/* The change seq: its Change List and datetime. 0 or RS_ENOTFOUND. */
int state_change_at(struct state *st, int64_t seq, int64_t *list,
                    rs_time_t *dt) RS_MUST_CHECK;
/* The newest change of Change List num: its seq and datetime. 0, or
 * RS_ENOTFOUND when the list holds none. */
int state_clist_last(struct state *st, int64_t num, int64_t *seq,
                     rs_time_t *dt) RS_MUST_CHECK;
int state_clist_current(struct state *st, struct state_clist *out)
    RS_MUST_CHECK;                           /* 0 or RS_ENOTFOUND */
int state_clist_get(struct state *st, int64_t num, struct state_clist *out)
    RS_MUST_CHECK;
int state_clist_add(struct state *st, const struct state_clist *c)
    RS_MUST_CHECK;
int state_clist_set(struct state *st, const struct state_clist *c)
    RS_MUST_CHECK;                           /* until and count */
/* Delete a Change List and its changes. */
int state_clist_drop(struct state *st, int64_t num) RS_MUST_CHECK;
/* Change Lists in number order, from the oldest. */
int state_clist_iter(struct state *st, struct state_iter **out)
    RS_MUST_CHECK;
int state_clist_next(struct state_iter *it, struct state_clist *out)
    RS_MUST_CHECK;
int64_t state_clist_count(struct state *st);

/* ------------------------------------------------------- change dumps */

/* The captured content of change seq: bytes off..off+len of its Change
 * List's spool file (changedump.c). get: 0 or RS_ENOTFOUND. */
int state_spool_add(struct state *st, int64_t seq, int64_t off, int64_t len)
    RS_MUST_CHECK;
int state_spool_get(struct state *st, int64_t seq, int64_t *off,
                    int64_t *len) RS_MUST_CHECK;
/* Forget the captures of Change List list's changes (state_clist_drop
 * does it too). */
int state_spool_drop(struct state *st, int64_t list) RS_MUST_CHECK;
/* Change Dump packages: part K (1..) of Change List list, length bytes;
 * part 0 with length -1 records that the list gets no Change Dump. */
int state_cdump_add(struct state *st, int64_t list, int64_t part,
                    int64_t length) RS_MUST_CHECK;
int state_cdump_drop(struct state *st, int64_t list) RS_MUST_CHECK;
/* The oldest closed Change List numbered above after that has no row in
 * cdump (to build): 0 or RS_ENOTFOUND. */
int state_cdump_pending(struct state *st, int64_t after, int64_t *list)
    RS_MUST_CHECK;
/* The lowest list above after with cdump rows but no Change List any
 * more (dropped by retention): 0 or RS_ENOTFOUND. */
int state_cdump_orphan(struct state *st, int64_t after, int64_t *list)
    RS_MUST_CHECK;
/* Every cdump row, by list and part. */
int state_cdump_iter(struct state *st, struct state_iter **out)
    RS_MUST_CHECK;
int state_cdump_next(struct state_iter *it, int64_t *list, int64_t *part,
                     int64_t *length) RS_MUST_CHECK;

/* ----------------------------------------------------------- framework */

int state_fw_add(struct state *st, struct state_fw *f) RS_MUST_CHECK;
int64_t state_fw_last_seq(struct state *st);
int state_fw_iter(struct state *st, int64_t after, int64_t limit,
                  struct state_iter **out) RS_MUST_CHECK;
int state_fw_next(struct state_iter *it, struct state_fw *out) RS_MUST_CHECK;
/* How many framework events have after < seq <= upto; a negative RS_E*
 * on error. */
int64_t state_fw_count(struct state *st, int64_t after, int64_t upto);
/* Forget framework events with seq <= upto (they were delivered). */
int state_fw_trim(struct state *st, int64_t upto) RS_MUST_CHECK;

/* ---------------------------------------------------------------- meta */

/* 0, or RS_ENOTFOUND (*out untouched). */
int state_meta_get(struct state *st, const char *key, int64_t *out)
    RS_MUST_CHECK;
int state_meta_set(struct state *st, const char *key, int64_t v)
    RS_MUST_CHECK;
/* Text values: copied into buf (NUL-terminated); RS_ETOOBIG if longer. */
int state_meta_get_text(struct state *st, const char *key, char *buf,
                        size_t len) RS_MUST_CHECK;
int state_meta_set_text(struct state *st, const char *key, const char *v)
    RS_MUST_CHECK;
/* The text stored under key is v (false when absent, not text, or the
 * state cannot be read). */
bool state_meta_text_is(struct state *st, const char *key, const char *v);

void state_iter_free(struct state_iter *it);   /* NULL ok */

#endif
