/*
 * docs.h - every document rssource publishes, written with proto's strict
 * streaming writer: the Source Description, the Capability List, Change
 * Lists and their index, change and framework notifications, and the
 * entries of Resource Lists (snapshot.c assembles those into files). Also
 * the URL layout: every <loc> is built from the base URL, the documents
 * live under BASE/resourcesync/ and BASE/.well-known/resourcesync.
 * Bytes go to a caller's rs_write_cb; this module does no I/O of its own.
 */
#ifndef SOURCE_DOCS_H
#define SOURCE_DOCS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_doc.h"
#include "rs_error.h"
#include "rs_write.h"
#include "state.h"

#define DOCS_DIR "resourcesync/"          /* the documents, under BASE */
#define DOCS_WELL_KNOWN ".well-known/resourcesync"
#define DOCS_CAPLIST "capabilitylist.xml"
#define DOCS_RESOURCELIST "resourcelist.xml"
#define DOCS_CHANGELIST "changelist.xml"  /* alias of the open Change List */
#define DOCS_URL_MAX 16384                /* a <loc>, percent-encoded */
/* The longest base URL docs_new takes. A resource's URL is the base and
 * its path, up to TREE_PATH_MAX - 1 bytes each percent-encoded to 3:
 * 2,048 + 12,285 + NUL fits in DOCS_URL_MAX, so no file's <loc> can fail
 * to be built (and stop a notification or a Resource List). docs.c
 * asserts it. */
#define DOCS_BASE_MAX 2048

/* A notification channel for the Capability List. */
struct docs_channel {
    const char *loc;             /* the WebSub topic, or a ws:// URI */
    enum rs_capability cap;      /* CHANGELIST_ or FRAMEWORK_NOTIFICATION */
    bool alpha;                  /* spell "change-notification" (ws://) */
    const char *hub;             /* rel="hub" link, or NULL */
};

struct docs;

/* base_url: absolute http(s) URL without query or fragment; a missing
 * final '/' is added. Refused, as a Source could not serve its own
 * documents under it: over DOCS_BASE_MAX bytes; a byte that is not
 * printable ASCII allowed in a URI (non-ASCII must come percent-encoded);
 * a '%' without two hex digits; an empty path segment ("//", which HTTP
 * servers read as an authority) or a "." or ".." one (clients remove
 * them). NULL with *err (a message for the operator: what is wrong and
 * what to give instead) on a bad URL or ENOMEM. */
struct docs *docs_new(const char *base_url, const char **err);
void docs_free(struct docs *d);    /* NULL ok */

const char *docs_base(const struct docs *d);        /* ends with '/' */
const char *docs_base_path(const struct docs *d);   /* "/", "/data/" */
const char *docs_caplist_url(const struct docs *d);
const char *docs_sd_url(const struct docs *d);

/* BASE/resourcesync/NAME into buf. 0 or RS_ETOOBIG. */
int docs_url(const struct docs *d, const char *name, char *buf, size_t len)
    RS_MUST_CHECK;
/* The resource URL of a relative path into buf. 0 or RS_ETOOBIG. */
int docs_resource_url(const struct docs *d, const char *rel, char *buf,
                      size_t len) RS_MUST_CHECK;

/* A document's head with its one link, rel="up" to the Capability List
 * (up is the caller's and must outlive h); the times are the caller's to
 * set. */
void docs_head_up(const struct docs *d, enum rs_root root,
                  enum rs_capability cap, struct rs_head *h,
                  struct rs_link *up);

/* The hash attribute's value for a resource's digests. */
void docs_hashes(const uint8_t md5[16], const uint8_t sha256[32],
                 struct rs_hashes *out);

/* Each writes one whole document; 0, or the writer's / state's error
 * (RS_ENOTFOUND for an unknown Change List). errstr (may be NULL, 256
 * bytes) gets the writer's reason. */
int docs_source_description(const struct docs *d, rs_write_cb cb, void *ud,
                            char *errstr) RS_MUST_CHECK;
int docs_capability_list(const struct docs *d, const struct docs_channel *ch,
                         size_t nch, rs_write_cb cb, void *ud, char *errstr)
    RS_MUST_CHECK;
int docs_changelist(const struct docs *d, struct state *st, int64_t num,
                    rs_write_cb cb, void *ud, char *errstr) RS_MUST_CHECK;
/* Change List num from after the change of seq after (0: all of it; else
 * a change of that list, RS_ENOTFOUND otherwise), with from = that
 * change's datetime. *last: the seq of the last entry written, or after
 * when none was. A reader that holds the list up to a change reads only
 * what came since (serve.c's ?after=). */
int docs_changelist_after(const struct docs *d, struct state *st,
                          int64_t num, int64_t after, rs_write_cb cb,
                          void *ud, int64_t *last, char *errstr)
    RS_MUST_CHECK;
int docs_changelist_index(const struct docs *d, struct state *st,
                          rs_write_cb cb, void *ud, char *errstr)
    RS_MUST_CHECK;

/*
 * A change notification of the changes after seq after: at most
 * max_entries of them (<= RS_MAX_ENTRIES), and fewer when the document
 * would pass max_bytes (at least one always goes in). *last is the seq of
 * the last change included, *n how many (0: nothing to send, nothing
 * written).
 */
int docs_change_notification(const struct docs *d, struct state *st,
                             int64_t after, size_t max_entries,
                             size_t max_bytes, rs_write_cb cb, void *ud,
                             int64_t *last, size_t *n, char *errstr)
    RS_MUST_CHECK;
/* The same for framework events. */
int docs_framework_notification(const struct docs *d, struct state *st,
                                int64_t after, size_t max_entries,
                                size_t max_bytes, rs_write_cb cb, void *ud,
                                int64_t *last, size_t *n, char *errstr)
    RS_MUST_CHECK;

/* A Change List entry for change c (loc, lastmod, change, datetime,
 * length, type, hash); loc is the caller's buffer (DOCS_URL_MAX) the
 * entry points into. 0 or RS_ETOOBIG. */
int docs_change_entry(const struct docs *d, const struct state_change *c,
                      struct rs_entry *e, char *loc) RS_MUST_CHECK;

/* A Resource List entry for a catalogued resource; loc is the caller's
 * buffer (DOCS_URL_MAX) the entry points into. 0 or RS_ETOOBIG. */
int docs_resource_entry(const struct docs *d, const struct state_res *r,
                        struct rs_entry *e, char *loc) RS_MUST_CHECK;

#endif
