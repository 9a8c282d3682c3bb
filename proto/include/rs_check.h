/*
 * rs_check.h - the ResourceSync document rules, in one place, shared by the
 * parser (lenient reading) and the writer (strict writing): which root goes
 * with which capability, mandatory attributes, absolute http(s) URIs,
 * change types, chronological order, entry limits.
 *
 * A check runs over one document: rs_check_head() once, then
 * rs_check_entry() per entry in document order, then rs_check_end().
 * Problems come in two severities. An ERROR means the meaning is lost or the
 * spec's hard rule is broken; a WARNING is an omission real Sources make
 * while the meaning stays clear (the rel="up" link, `at`, `from`). With
 * strict set, warnings are errors.
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

/* Called for each problem found, with a one-line message (no trailing
 * newline, no line number: the caller knows where it is). */
typedef void (*rs_check_report_cb)(void *ud, enum rs_severity sev,
                                   const char *msg);

struct rs_check {
    bool strict;
    size_t max_entries;           /* 0 = RS_MAX_ENTRIES */
    rs_check_report_cb report;    /* may be NULL */
    void *ud;
    /* running state; private */
    enum rs_root root;
    enum rs_capability cap;
    size_t nentries;
    rs_time_t last_time;          /* latest change entry so far */
    bool order_warned;            /* the out-of-order warning was given */
    bool head_done;
    bool has_up;                  /* a root rel="up" link was seen */
    bool cap_alpha;
};

void rs_check_init(struct rs_check *c, bool strict, size_t max_entries,
                   rs_check_report_cb report, void *ud);

/* Each returns 0, or RS_EINVALID after reporting the error (RS_ETOOBIG for
 * more than max_entries entries). The first error stops the check; warnings
 * are reported and return 0 unless strict. */
int rs_check_head(struct rs_check *c, const struct rs_head *h) RS_MUST_CHECK;
int rs_check_entry(struct rs_check *c, const struct rs_entry *e) RS_MUST_CHECK;
/* links: root links that came after the entries (some Sources put rel="up"
 * or rel="next" last); passing all root links again is fine; may be NULL. */
int rs_check_end(struct rs_check *c, const struct rs_link *links,
                 size_t nlinks) RS_MUST_CHECK;

/* 0 if s is an absolute http or https URI with a host (RS_EINVAL otherwise). */
int rs_check_url(const char *s) RS_MUST_CHECK;

#endif
