/*
 * rs_check.h - the ResourceSync document rules, in one place, shared by the
 * parser and the writer: which root goes with which capability, mandatory
 * elements and attributes, absolute http(s) URIs, change types,
 * chronological order, entry limits. docs/protocol.md lists every rule with
 * its spec section and its level; check.c is the one home of the levels.
 *
 * A check runs over one document: rs_check_head() once, then
 * rs_check_entry() per entry in document order, then rs_check_end(); the
 * parser also hands over what it found in values (rs_check_rule()).
 *
 * Each rule has a level, and the mode says what a level means:
 *   error   the meaning is lost, or the document is not ResourceSync (or
 *           not safe to read): an error in every mode;
 *   must    a MUST of ResourceSync 1.0/1.1 or the Sitemaps protocol whose
 *           meaning stays clear (a Change List newest first, no `at`): an
 *           error, except in the reader's view, where it is a warning and
 *           the reader's repair applies;
 *   should  a SHOULD, or a MUST that the spec's own examples break (no
 *           rel="up" link): a warning, an error under strict.
 * Notifications are the exception: a hub stands between the Source and
 * the reader and refuses what breaks a MUST, so the reader's view of a
 * notification is the spec's (rshub and rspub read with the defaults).
 */
#ifndef RS_CHECK_H
#define RS_CHECK_H

#include <stdbool.h>
#include <stddef.h>

#include "rs_doc.h"

enum rs_severity {
    RS_SEV_WARNING = 1,
    RS_SEV_ERROR = 2,
};

/* Which rules are errors. RS_CHECK_READER is 0: zeroed options read as a
 * Destination reads (rssub, the hub, rspub); rsdoc's default is the spec. */
enum rs_check_mode {
    RS_CHECK_READER = 0,   /* what a Destination accepts: must = warning */
    RS_CHECK_SPEC,         /* the spec: must = error, should = warning */
    RS_CHECK_STRICT,       /* every problem is an error */
};

/* Rules the parser finds in values and in the document's shape, judged by
 * rs_check_rule() (levels in docs/protocol.md, section 1.1). */
enum rs_rule {
    RS_RULE_TIME_ZONE,     /* a time without a zone: read as UTC (must) */
    RS_RULE_TIME_FORM,     /* an rs:md time not YYYY-MM-DDThh:mm:ssZ (should) */
    RS_RULE_HASH,          /* hash not algo:hexdigest: ignored (should;
                            * must in notifications) */
    RS_RULE_LINK,          /* <rs:ln> without rel or href: ignored (must) */
    RS_RULE_ENTRY_ORDER,   /* entry children not in sitemap.xsd's order
                            * (must) */
    RS_RULE_LOC_SPACE,     /* whitespace around a <loc>: trimmed (should) */
    RS_RULE_CHANGEFREQ,    /* an unknown <changefreq>: ignored (should) */
    RS_RULE_ATTR,          /* an un-namespaced attribute ResourceSync does
                            * not define: ignored (must) */
};

/* Called for each problem found, with a one-line message (no trailing
 * newline, no line number: the caller knows where it is). */
typedef void (*rs_check_report_cb)(void *ud, enum rs_severity sev,
                                   const char *msg);

/* Capability List entries remembered to find one listed twice; extension
 * capabilities beyond this many are not compared. */
#define RS_CHECK_MAX_OTHER_CAPS 8

/* What rs_check_unique() remembers of each <loc> and manifest path; private
 * (check.c). */
struct rs_check_seen;

struct rs_check {
    enum rs_check_mode mode;
    size_t max_entries;           /* 0 = RS_MAX_ENTRIES */
    rs_check_report_cb report;    /* may be NULL */
    void *ud;
    /* running state; private */
    enum rs_root root;
    enum rs_capability cap;
    bool cap_alpha;
    bool notification;            /* judged as a notification (see above) */
    size_t nentries;
    rs_time_t last_time;          /* latest change entry so far */
    rs_time_t from, until;        /* the head's interval (change documents) */
    bool future_warned;           /* a time past the clock was told */
    bool order_warned;            /* the out-of-order problem was told */
    bool head_done;
    bool has_up;                  /* a root rel="up" link was seen */
    bool broken;                  /* nothing more can be judged */
    unsigned nerrors;             /* errors reported so far */
    unsigned nwarnings;
    unsigned long long caps_seen; /* Capability List: known capabilities */
    char other_caps[RS_CHECK_MAX_OTHER_CAPS][48];
    unsigned nother_caps;
    struct rs_check_seen *seen;   /* rs_check_unique; NULL: not looked for */
};

void rs_check_init(struct rs_check *c, enum rs_check_mode mode,
                   size_t max_entries, rs_check_report_cb report, void *ud);

/*
 * Also find a <loc> listed twice where a document lists each thing once
 * (everything but a Change List, a Change Dump Manifest and the
 * notifications, which list a resource once per change) and a manifest
 * path given to two entries (docs/protocol.md 1.1 says at which level).
 * It remembers each loc and path as a 24-byte slot (a 128-bit hash, the
 * entry's number and line) in a table at most half full, so under 100
 * bytes an entry, until rs_check_cleanup(): a validator's
 * rule, which readers that need it apply their own way (rssub's dump
 * reader). Call after rs_check_init, before the head. 0 or RS_ENOMEM.
 */
int rs_check_unique(struct rs_check *c) RS_MUST_CHECK;

/* Frees what rs_check_unique() took; safe on a check that took nothing
 * (and twice). */
void rs_check_cleanup(struct rs_check *c);

/*
 * Each returns 0 when no error was found (warnings are reported and return
 * 0), RS_EINVALID after reporting one or more errors (RS_ETOOBIG for more
 * than max_entries entries). Every problem of the head or entry is
 * reported, not only the first; the check can go on with the next entry
 * unless c->broken is set (the document cannot be judged further: no root
 * <rs:md>, an unknown capability, the entry limit).
 */
int rs_check_head(struct rs_check *c, const struct rs_head *h) RS_MUST_CHECK;
int rs_check_entry(struct rs_check *c, const struct rs_entry *e) RS_MUST_CHECK;
/* links: root links that came after the entries (some Sources put rel="up"
 * or rel="next" last); passing all root links again is fine; may be NULL. */
int rs_check_end(struct rs_check *c, const struct rs_link *links,
                 size_t nlinks) RS_MUST_CHECK;

/* A problem the parser found: msg says what, repair (may be NULL) what a
 * reader does about it, told with a warning only. Before rs_check_head the
 * document's kind is unknown and the rule is judged as strictly as for a
 * notification; the parser holds root-level problems until the head is
 * checked. Returns 0 when it was a warning (the reader's repair applies),
 * RS_EINVALID when it was reported as an error. */
int rs_check_rule(struct rs_check *c, enum rs_rule rule, const char *msg,
                  const char *repair) RS_MUST_CHECK;

/* 0 if s is an absolute http or https URI with a host (RS_EINVAL otherwise). */
int rs_check_url(const char *s) RS_MUST_CHECK;

#endif
