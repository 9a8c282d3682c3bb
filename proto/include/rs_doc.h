/*
 * rs_doc.h - the ResourceSync document model: every document type of the
 * core specification (Z39.99-2014 and the 2017 revision 1.1) and both
 * notification kinds, as plain structs, plus the enum <-> token tables.
 * Parsing lives in rs_parse.h, writing in rs_write.h, the rules in
 * rs_check.h. This header owns no I/O.
 */
#ifndef RS_DOC_H
#define RS_DOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"
#include "rs_hash.h"
#include "rs_time.h"

#define RS_NS_SITEMAP "http://www.sitemaps.org/schemas/sitemap/0.9"
#define RS_NS_RS "http://www.openarchives.org/rs/terms/"
/* Our own namespace for the hub's annotation of each notification it
 * distributes (docs/protocol.md): <urlset ... xmlns:hub=RS_NS_HUB
 * hub:id="1700000000000-0">. Other readers ignore it, as the core spec says
 * foreign-namespace attributes must be ignored. */
#define RS_NS_HUB "urn:x-rshub:1"

#define RS_MAX_ENTRIES 50000           /* per document, core spec */
#define RS_MAX_DOC_BYTES 52428800u     /* 50 MB per document, Sitemaps */

enum rs_root {
    RS_ROOT_NONE = 0,
    RS_ROOT_URLSET,        /* <urlset>: a list */
    RS_ROOT_SITEMAPINDEX,  /* <sitemapindex>: an index */
};

enum rs_capability {
    RS_CAP_NONE = 0,                 /* attribute absent */
    RS_CAP_DESCRIPTION,
    RS_CAP_CAPABILITYLIST,
    RS_CAP_RESOURCELIST,
    RS_CAP_RESOURCEDUMP,
    RS_CAP_RESOURCEDUMP_MANIFEST,
    RS_CAP_CHANGELIST,
    RS_CAP_CHANGEDUMP,
    RS_CAP_CHANGEDUMP_MANIFEST,
    RS_CAP_CHANGELIST_NOTIFICATION,  /* 2013 alpha: "change-notification" */
    RS_CAP_FRAMEWORK_NOTIFICATION,
    RS_CAP_OTHER,                    /* unrecognised; see rs_md.capability_other */
};

enum rs_change {
    RS_CHANGE_NONE = 0,
    RS_CHANGE_CREATED,
    RS_CHANGE_UPDATED,
    RS_CHANGE_DELETED,
};

enum rs_changefreq {
    RS_FREQ_NONE = 0,
    RS_FREQ_ALWAYS,
    RS_FREQ_HOURLY,
    RS_FREQ_DAILY,
    RS_FREQ_WEEKLY,
    RS_FREQ_MONTHLY,
    RS_FREQ_YEARLY,
    RS_FREQ_NEVER,
};

/*
 * <rs:md>, at root level (about the document) or in an entry (about the
 * resource). Absent values: RS_CAP_NONE, RS_CHANGE_NONE, RS_TIME_NONE,
 * length -1, NULL strings, hash.n == 0. Strings are borrowed: they belong to
 * whoever owns the enclosing object (an rs_doc, a parser during a callback,
 * or the caller when writing).
 */
struct rs_md {
    enum rs_capability capability;
    bool capability_alpha;        /* spelled "change-notification" (2013) */
    bool capability_index_alias;  /* root of an index spelled "<cap>index"
                                   * ("changelistindex"), read as <cap> */
    const char *capability_other; /* the raw value when RS_CAP_OTHER */
    enum rs_change change;
    rs_time_t at;
    rs_time_t completed;
    rs_time_t from;
    rs_time_t until;
    rs_time_t datetime;           /* 1.1: when the change happened */
    int64_t length;
    const char *type;
    const char *encoding;
    const char *path;             /* dump manifests: path inside the ZIP */
    struct rs_hashes hash;
};

/* <rs:ln>. rel and href are mandatory; the rest is optional. */
struct rs_link {
    const char *rel;
    const char *href;
    const char *type;
    const char *encoding;
    const char *path;
    uint32_t pri;                 /* 1..999999; 0 = absent (means 999999) */
    int64_t length;               /* -1 absent */
    rs_time_t modified;           /* RS_TIME_NONE absent */
    struct rs_hashes hash;
};

/* A <url> (in a urlset) or <sitemap> (in a sitemapindex). */
struct rs_entry {
    const char *loc;
    rs_time_t lastmod;
    enum rs_changefreq changefreq;
    bool has_md;
    struct rs_md md;
    const struct rs_link *links;
    size_t nlinks;
    unsigned line;                /* source line of the element; 0 if unknown */
};

/* Everything about a document except its entries. */
struct rs_head {
    enum rs_root root;
    bool has_md;
    struct rs_md md;              /* md.capability says what the document is */
    const struct rs_link *links;
    size_t nlinks;
    const char *hub_id;           /* RS_NS_HUB id annotation, or NULL */
    const char *hub_topic;        /* RS_NS_HUB topic annotation, or NULL */
};

/* A whole parsed document; owns every string it points to. */
struct rs_doc {
    struct rs_head head;
    struct rs_entry *entries;     /* rs_malloc'ed array, freed by rs_doc_free */
    size_t nentries;
    struct rs_arena *arena;       /* private */
};

/* Set every field of md / link / entry / head to "absent". */
void rs_md_init(struct rs_md *md);
void rs_link_init(struct rs_link *ln);
void rs_entry_init(struct rs_entry *e);
void rs_head_init(struct rs_head *h);

/* Frees the document and everything it owns; rs_doc_free(NULL) is a no-op. */
void rs_doc_free(struct rs_doc *doc);

/* The first link of head or entry with relation rel (lowest pri wins among
 * several), or NULL. */
const struct rs_link *rs_links_find(const struct rs_link *links, size_t n,
                                    const char *rel);

/* Token tables. *_name() returns the spec's spelling ("" for NONE);
 * *_from() returns NONE (or RS_CAP_OTHER for a non-empty unknown
 * capability) when the token is not known. rs_capability_from() accepts the
 * 2013 alpha spelling "change-notification" and sets *alpha when given. */
const char *rs_capability_name(enum rs_capability c);
enum rs_capability rs_capability_from(const char *s, bool *alpha);
const char *rs_change_name(enum rs_change c);
enum rs_change rs_change_from(const char *s);
const char *rs_changefreq_name(enum rs_changefreq f);
enum rs_changefreq rs_changefreq_from(const char *s);
const char *rs_root_name(enum rs_root r);   /* "urlset", "sitemapindex" */

/* Is c a notification capability (change or framework)? */
bool rs_capability_is_notification(enum rs_capability c);

#endif
