/*
 * store.h - rsbridge's SQLite database (--state DIR/bridge.db, WAL): the
 * connection, its schema, transactions and a cache of prepared
 * statements, plus the rows every module shares - the Sources and their
 * feeds (a Capability List, a Change List, a Resource List of a Source)
 * and the documents each feed was last read as. The change detection
 * (clscan.c, rldiff.c) and the outbox (outbox.c) keep their own tables
 * here and their own SQL; this module decides nothing. One writer: an
 * exclusive flock on bridge.db.lock.
 */
#ifndef BRIDGE_STORE_H
#define BRIDGE_STORE_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"
#include "rs_time.h"

#define STORE_SCHEMA 3            /* 2: feeds.ask_due; 3: feeds.diffed,
                                      rldup */
#define STORE_DIGEST 32            /* SHA-256 of a document's bytes */

struct store;

/* Open (creating) path; its lock file is path.lock. *err (errlen) says
 * why it failed: RS_ESTATE in use by another rsbridge, RS_EINVAL a newer
 * or foreign schema, RS_EIO. */
int store_open(const char *path, struct store **out, char *err,
               size_t errlen) RS_MUST_CHECK;
void store_free(struct store *st);             /* NULL ok */
/* The checkpoint thread runs (false where it could not start: the caller
 * says so, the commits checkpoint). */
bool store_checkpointing(const struct store *st);

const char *store_errstr(const struct store *st);
/* Record an SQLite failure of what: RS_EIO. */
int store_fail(struct store *st, const char *what);

/* A prepared statement for sql, cached by the address of sql (a static
 * string of the calling module): reset and unbound before it is handed
 * out. NULL on a prepare failure (store_errstr says why). */
sqlite3_stmt *store_stmt(struct store *st, const char *sql);
/* Step a statement that returns no rows (or whose rows are ignored),
 * then reset it. 0 or RS_EIO. */
int store_exec(struct store *st, sqlite3_stmt *s, const char *what)
    RS_MUST_CHECK;
/* Run literal SQL (no parameters). */
int store_exec_sql(struct store *st, const char *sql) RS_MUST_CHECK;

/* Transactions nest by count: begin opens one (BEGIN IMMEDIATE) unless one
 * is open, commit closes it when the count returns to 0, rollback undoes
 * the whole of it at once. Everything the bridge does on its loop is one
 * synchronous step at a time, so a transaction never spans loop turns. */
int store_begin(struct store *st) RS_MUST_CHECK;
int store_commit(struct store *st) RS_MUST_CHECK;
void store_rollback(struct store *st);
bool store_in_txn(const struct store *st);

/* meta: a key with an integer or a text value. RS_ENOTFOUND when absent. */
int store_meta_get(struct store *st, const char *key, int64_t *v)
    RS_MUST_CHECK;
int store_meta_set(struct store *st, const char *key, int64_t v)
    RS_MUST_CHECK;

/* ------------------------------------------------------------ Sources */

/*
 * The Source named name, with its URL: its id. A Source seen with another
 * URL than before is a new Source: its rows are dropped first (*fresh
 * set), as for a name never seen. 0 or an error.
 */
int store_source(struct store *st, const char *name, const char *url,
                 int64_t *id, bool *fresh) RS_MUST_CHECK;
/* Every Source the state holds (configured now or not), in the order
 * their names were first given, into cb: its name and URL (valid during
 * the call). A non-zero return of cb stops and is returned. */
int store_sources(struct store *st,
                  int (*cb)(void *ud, const char *name, const char *url),
                  void *ud) RS_MUST_CHECK;

/* ------------------------------------------------------------- feeds */

enum store_feed_kind {
    STORE_FEED_CAPLIST = 1,        /* a Capability List of the Source */
    STORE_FEED_CHANGES = 2,        /* the Change List(s) one names */
    STORE_FEED_RESOURCES = 3,      /* the Resource List(s) one names */
    STORE_FEED_DESCRIPTION = 4,    /* the Source Description */
};

struct store_feed {
    int64_t id;
    int64_t src;
    enum store_feed_kind kind;
    int64_t k;                     /* the bridged Capability List number */
    char url[4096];                /* the top document */
    int64_t gen;                   /* complete walks so far (0: none) */
    rs_time_t pos;                 /* Change Lists: newest datetime taken */
    rs_time_t win_from;            /* ...: the lists' `from` at the last walk */
    rs_time_t walked;              /* when the last complete walk began */
    rs_time_t at;                  /* Resource Lists: the list's `at` */
    char suspects[1024];           /* clscan.c's suspect spans, as text */
    rs_time_t fw_at;               /* last framework notification about it */
    rs_time_t ask_due;             /* a held ask to reconcile (a "created"
                                      notification of this Resource List):
                                      when it is due; RS_TIME_NONE: none */
    rs_time_t diffed;              /* Resource Lists: when the walk of its
                                      last diff began; RS_TIME_NONE: never
                                      diffed, or only watched since (its
                                      rows are not the list's: the next
                                      diff is a baseline) */
};

/* The feed (src, kind, url), created when new (gen 0, k as given; for a
 * Capability List, k is then the next free number of the Source). */
int store_feed_get(struct store *st, int64_t src, enum store_feed_kind kind,
                   const char *url, int64_t k, struct store_feed *out)
    RS_MUST_CHECK;
/* Write back gen, pos, win_from, walked, at, suspects, diffed - not fw_at and
 * ask_due: those are written by store_feed_told alone, so that a feed
 * read before a loop turn and written back after it cannot undo what was
 * told meanwhile. */
int store_feed_put(struct store *st, const struct store_feed *f)
    RS_MUST_CHECK;
/* Feed id's framework notification went at fw_at, and its held ask to
 * reconcile is due at ask_due (RS_TIME_NONE: none). */
int store_feed_told(struct store *st, int64_t id, rs_time_t fw_at,
                    rs_time_t ask_due) RS_MUST_CHECK;
/* The feed of src of that kind and k, other than not_id, whose last
 * complete walk began last (gen > 0): 0, or RS_ENOTFOUND when none. */
int store_feed_last(struct store *st, int64_t src, enum store_feed_kind kind,
                    int64_t k, int64_t not_id, struct store_feed *out)
    RS_MUST_CHECK;
/* The Source's feed whose held ask to reconcile is due first: 0, or
 * RS_ENOTFOUND when none is held. */
int store_ask_next(struct store *st, int64_t src, struct store_feed *out)
    RS_MUST_CHECK;
/* The Capability Lists of a Source, in k order, into cb. */
int store_caplists(struct store *st, int64_t src,
                   int (*cb)(void *ud, const struct store_feed *f), void *ud)
    RS_MUST_CHECK;

/* ---------------------------------------------------------- documents */

/* What a feed's document was last read as (committed with its walk), or
 * is being read as (the walk's staging, `notmod` when it answered 304). */
struct store_doc {
    const char *url;
    const char *etag;              /* NULL: none */
    const char *last_modified;     /* NULL: none */
    bool has_digest;
    uint8_t digest[STORE_DIGEST];
    const char *next;              /* rel="next", NULL: none */
    const char *parent;            /* the index that listed it, NULL: top */
    int64_t rank;                  /* its place in document order */
    bool notmod;                   /* staging: answered 304 */
};

/* The feed's documents, as committed, into cb (strings valid during it). */
int store_docs(struct store *st, int64_t feed,
               int (*cb)(void *ud, const struct store_doc *d), void *ud)
    RS_MUST_CHECK;
/* Stage a document of the walk under way. */
int store_doc_stage(struct store *st, int64_t feed, const struct store_doc *d)
    RS_MUST_CHECK;
/* Documents staged for feed that were not there before (index children a
 * walk found new), into cb; then every staged document replaces the
 * committed ones. Inside the caller's transaction. */
int store_docs_commit(struct store *st, int64_t feed,
                      int (*on_new)(void *ud, const char *url,
                                    const char *parent),
                      void *ud) RS_MUST_CHECK;
/* Forget a feed's documents: its next walk reads them all, from the top
 * (autocommit, or inside the caller's transaction). */
int store_docs_forget(struct store *st, int64_t feed) RS_MUST_CHECK;
/* Forget what a walk staged (it failed, or starts afresh). */
int store_walk_clear(struct store *st, int64_t feed) RS_MUST_CHECK;

#endif
