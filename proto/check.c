/*
 * check.c - the ResourceSync document rules (rs_check.h), shared by the
 * parser and the writer so that what we read and what we write are judged
 * by the same code, and the one place that says how bad each broken rule
 * is. Messages name the element or attribute at fault and, where the spec
 * says it, the section; the caller adds the file and line. The table of
 * rules in docs/protocol.md (section 1.1) follows this file.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "rs_alloc.h"
#include "rs_check.h"
#include "rs_mix.h"

/* How bad a broken rule is; rs_check.h says what each means per mode. */
enum level {
    LV_ERROR,
    LV_MUST,
    LV_SHOULD,
};

void
rs_check_init(struct rs_check *c, enum rs_check_mode mode, size_t max_entries,
              rs_check_report_cb report, void *ud)
{
    memset(c, 0, sizeof(*c));
    c->mode = mode;
    c->max_entries = max_entries ? max_entries : RS_MAX_ENTRIES;
    c->report = report;
    c->ud = ud;
    c->last_time = RS_TIME_NONE;
    c->from = c->until = RS_TIME_NONE;
    /* Until the head says what the document is, judge it as strictly as
     * the strictest kind: a notification. */
    c->notification = true;
}

/* ---------------------------------------------------- things listed twice */

/*
 * A set of 128-bit hashes of the locs and manifest paths seen, with where
 * each was first seen: open addressing, a power-of-two size, at most half
 * full. Hashes rather than the strings, so that a validator's memory stays
 * a few bytes an entry whatever the URLs' length; two 64-bit hashes of
 * different construction, so that two different locs taken for one
 * (about 2^-128 for a pair) is not a risk a verdict needs to carry.
 */
struct seen_slot {
    uint64_t h1, h2;              /* h1 == 0: empty (h1 is never 0 else) */
    uint32_t num;                 /* 1-based entry number */
    uint32_t line;                /* the entry's line; 0 if unknown */
};

struct rs_check_seen {
    struct seen_slot *slots;
    size_t cap;                   /* a power of two, or 0 */
    size_t used;
};

int
rs_check_unique(struct rs_check *c)
{
    if (c->seen != NULL)
        return 0;
    c->seen = rs_calloc(1, sizeof(*c->seen));
    return c->seen != NULL ? 0 : RS_ENOMEM;
}

void
rs_check_cleanup(struct rs_check *c)
{
    if (c->seen == NULL)
        return;
    rs_free(c->seen->slots);
    rs_free(c->seen);
    c->seen = NULL;
}

/* FNV-1a and a multiply-rotate hash of kind (a loc or a path) and s. */
static void
seen_hash(char kind, const char *s, uint64_t *h1, uint64_t *h2)
{
    uint64_t a = 0xcbf29ce484222325ull, b = 0x9e3779b97f4a7c15ull;
    a = (a ^ (unsigned char)kind) * 0x100000001b3ull;
    b = ((b + (unsigned char)kind) * 0xff51afd7ed558ccdull);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        a = (a ^ *p) * 0x100000001b3ull;
        b = (b + *p) * 0xc4ceb9fe1a85ec53ull;
        b = (b << 23) | (b >> 41);
    }
    *h1 = rs_mix64(a) | 1u;       /* never 0: 0 marks an empty slot */
    *h2 = rs_mix64(b);
}

static int
seen_grow(struct rs_check_seen *st)
{
    size_t ncap = st->cap ? 2 * st->cap : 64;
    struct seen_slot *ns = rs_calloc(ncap, sizeof(*ns));
    if (ns == NULL)
        return RS_ENOMEM;
    for (size_t i = 0; i < st->cap; i++) {
        const struct seen_slot *o = &st->slots[i];
        if (o->h1 == 0)
            continue;
        size_t j = (size_t)o->h1 & (ncap - 1);
        while (ns[j].h1 != 0)
            j = (j + 1) & (ncap - 1);
        ns[j] = *o;
    }
    rs_free(st->slots);
    st->slots = ns;
    st->cap = ncap;
    return 0;
}

/* Remember s (of kind 'L' or 'P') as entry num's: *first is where it was
 * seen before, or NULL when it is new. 0 or RS_ENOMEM. */
static int
seen_add(struct rs_check_seen *st, char kind, const char *s, uint32_t num,
         uint32_t line, const struct seen_slot **first)
{
    uint64_t h1, h2;
    *first = NULL;
    if ((st->used + 1) * 2 > st->cap && seen_grow(st) != 0)
        return RS_ENOMEM;
    seen_hash(kind, s, &h1, &h2);
    size_t j = (size_t)h1 & (st->cap - 1);
    for (; st->slots[j].h1 != 0; j = (j + 1) & (st->cap - 1)) {
        if (st->slots[j].h1 == h1 && st->slots[j].h2 == h2) {
            *first = &st->slots[j];
            return 0;
        }
    }
    st->slots[j] = (struct seen_slot){ h1, h2, num, line };
    st->used++;
    return 0;
}

static enum rs_severity
level_severity(const struct rs_check *c, enum level lv)
{
    switch (lv) {
    case LV_MUST:
        return c->mode == RS_CHECK_READER && !c->notification ? RS_SEV_WARNING
                                                               : RS_SEV_ERROR;
    case LV_SHOULD:
        return c->mode == RS_CHECK_STRICT ? RS_SEV_ERROR : RS_SEV_WARNING;
    case LV_ERROR:
    default:
        return RS_SEV_ERROR;
    }
}

/* Report a problem at its level: 0 for a warning, RS_EINVALID for an
 * error. repair (may be NULL) says what a reader does about it, told with
 * a warning only: an error is refused, not repaired. */
__attribute__((format(printf, 4, 0))) static int
check_vreport(struct rs_check *c, enum level lv, const char *repair,
              const char *fmt, va_list ap)
{
    char msg[256];
    enum rs_severity sev = level_severity(c, lv);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    if (repair != NULL && sev == RS_SEV_WARNING && n >= 0 &&
        (size_t)n < sizeof(msg))
        snprintf(msg + n, sizeof(msg) - (size_t)n, "; %s", repair);
    if (sev == RS_SEV_ERROR)
        c->nerrors++;
    else
        c->nwarnings++;
    if (c->report != NULL)
        c->report(c->ud, sev, msg);
    return sev == RS_SEV_ERROR ? RS_EINVALID : 0;
}

__attribute__((format(printf, 3, 4))) static int
check_at(struct rs_check *c, enum level lv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = check_vreport(c, lv, NULL, fmt, ap);
    va_end(ap);
    return rc;
}

/* A problem the reader repairs (the repair told with the warning). */
__attribute__((format(printf, 4, 5))) static int
check_fix(struct rs_check *c, enum level lv, const char *repair,
          const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = check_vreport(c, lv, repair, fmt, ap);
    va_end(ap);
    return rc;
}

/* An error after which nothing more can be judged. */
__attribute__((format(printf, 3, 4))) static int
check_fatal(struct rs_check *c, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    (void)check_vreport(c, LV_ERROR, NULL, fmt, ap);
    va_end(ap);
    c->broken = true;
    return rc;
}

/* The first error of several rules checked in a row. */
static int
first_error(int rc, int next)
{
    return rc != 0 ? rc : next;
}

static const char *
cap_text(const struct rs_check *c)
{
    return c->cap_alpha ? "change-notification" : rs_capability_name(c->cap);
}

/* ------------------------------------------------------------------ URIs */

static bool
url_scheme_is(const char *s, const char *scheme, size_t n)
{
    return strncasecmp(s, scheme, n) == 0;
}

/* Absolute URI with one of the given schemes and a non-empty host, and no
 * character a URI cannot hold unescaped (space, controls). Done by hand:
 * it runs for every entry, and curl_url costs microseconds each. */
static int
check_uri(const char *s, bool allow_ws)
{
    size_t skip;
    if (s == NULL)
        return RS_EINVAL;
    if (url_scheme_is(s, "http://", 7))
        skip = 7;
    else if (url_scheme_is(s, "https://", 8))
        skip = 8;
    else if (allow_ws && url_scheme_is(s, "ws://", 5))
        skip = 5;
    else if (allow_ws && url_scheme_is(s, "wss://", 6))
        skip = 6;
    else
        return RS_EINVAL;
    const char *host = s + skip;
    size_t hostlen = strcspn(host, "/?#");
    const char *at = memchr(host, '@', hostlen);
    if (at != NULL) {
        hostlen -= (size_t)(at + 1 - host);
        host = at + 1;
    }
    if (hostlen == 0 || host[0] == ':')
        return RS_EINVAL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p <= 0x20 || *p == 0x7f)
            return RS_EINVAL;
    return 0;
}

int
rs_check_url(const char *s)
{
    return check_uri(s, false);
}

static bool
is_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
           (c >= 'A' && c <= 'F');
}

/* What makes an absolute URI check_uri let through still not one (RFC
 * 3986), or NULL: an ASCII character it cannot hold unescaped, a '%' that is not
 * an escape, a port that is not one, an IPv6 literal not closed. A reader
 * can still try it as it is, so it is a MUST the reader's view warns of;
 * the writer refuses it. */
static const char *
uri_flaw(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    /* Bytes beyond ASCII are let be (an IRI's; the writer checks they
     * are UTF-8), as the whitespace and controls check_uri refuses. */
    for (; *p != '\0'; p++) {
        if (strchr("<>\"{}|\\^`", *p) != NULL)
            return "a character a URI holds only percent-encoded";
        if (*p == '%' && (!is_hex(p[1]) || !is_hex(p[2])))
            return "a '%' that is not followed by two hex digits";
    }
    const char *auth = strstr(s, "://") + 3;   /* check_uri found it */
    size_t alen = strcspn(auth, "/?#");
    const char *at = memchr(auth, '@', alen);
    if (at != NULL) {
        alen -= (size_t)(at + 1 - auth);
        auth = at + 1;
    }
    const char *port = NULL;
    if (auth[0] == '[') {
        const char *close = memchr(auth, ']', alen);
        if (close == NULL)
            return "an IPv6 address without its ']'";
        if (close + 1 < auth + alen && close[1] != ':')
            return "something after the IPv6 address that is not a port";
        if (close + 1 < auth + alen)
            port = close + 2;
    } else {
        port = memchr(auth, ':', alen);
        if (port != NULL)
            port++;
    }
    if (port != NULL) {
        unsigned long v = 0;
        for (; port < auth + alen; port++) {
            if (*port < '0' || *port > '9' || (v = v * 10 + (unsigned long)
                                                   (*port - '0')) > 65535)
                return "a port that is not a number from 0 to 65535";
        }
    }
    return NULL;
}

/* --------------------------------------------------------- parser rules */

int
rs_check_rule(struct rs_check *c, enum rs_rule rule, const char *msg,
              const char *repair)
{
    enum level lv = LV_ERROR;
    switch (rule) {
    case RS_RULE_TIME_ZONE:
    case RS_RULE_LINK:
    case RS_RULE_ENTRY_ORDER:
    case RS_RULE_ATTR:
        lv = LV_MUST;
        break;
    case RS_RULE_HASH:
        /* "a hex-encoded digest" (core 7); the D-Lib 2013 Change List
         * prints a placeholder that is not hex, so in lists a bad hash is
         * ignored with a warning. A notification is what a Destination
         * fetches against right now: there it stays a must. */
        lv = c->notification ? LV_MUST : LV_SHOULD;
        break;
    case RS_RULE_TIME_FORM:
    case RS_RULE_LOC_SPACE:
    case RS_RULE_CHANGEFREQ:
        lv = LV_SHOULD;
        break;
    }
    return check_fix(c, lv, repair, "%s", msg);
}

/* ----------------------------------------------------------------- links */

/* Links that came through the parser always have rel and href (it drops
 * the others under RS_RULE_LINK); these rules are for documents built in
 * memory and written. */
static int
check_links(struct rs_check *c, const struct rs_link *links, size_t n,
            const char *where)
{
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        const struct rs_link *l = &links[i];
        if (l->rel == NULL || l->rel[0] == '\0') {
            rc = first_error(rc, check_at(c, LV_MUST, "<rs:ln> in %s without "
                                          "rel attribute (core 7: rel and "
                                          "href are mandatory)", where));
            continue;
        }
        if (l->href == NULL || l->href[0] == '\0')
            rc = first_error(rc, check_at(c, LV_MUST,
                                          "<rs:ln rel=\"%s\"> in %s without "
                                          "href attribute (core 7: rel and "
                                          "href are mandatory)", l->rel,
                                          where));
        if (l->pri > 999999)
            rc = first_error(rc, check_at(c, LV_ERROR,
                                          "<rs:ln rel=\"%s\"> pri %u is "
                                          "outside 1..999999 (core 7)",
                                          l->rel, l->pri));
    }
    return rc;
}

/* ------------------------------------------------------------------ head */

/* Indexes exist for lists and dumps, and for Source Descriptions (core
 * section 8: several Source Descriptions "must" be grouped in an index). */
static bool
cap_has_index(enum rs_capability cap)
{
    return cap == RS_CAP_RESOURCELIST || cap == RS_CAP_CHANGELIST ||
           cap == RS_CAP_RESOURCEDUMP || cap == RS_CAP_CHANGEDUMP ||
           cap == RS_CAP_DESCRIPTION;
}

static bool
cap_is_snapshot(enum rs_capability cap)
{
    return cap == RS_CAP_RESOURCELIST || cap == RS_CAP_RESOURCEDUMP ||
           cap == RS_CAP_RESOURCEDUMP_MANIFEST;
}

static bool
cap_is_change(enum rs_capability cap)
{
    return cap == RS_CAP_CHANGELIST || cap == RS_CAP_CHANGEDUMP ||
           cap == RS_CAP_CHANGEDUMP_MANIFEST;
}

/* The spec gives no order between at and completed, from and until, but
 * an interval that ends before it starts describes nothing a Destination
 * can act on: a warning (where says whose rs:md). */
static int
check_intervals(struct rs_check *c, const struct rs_md *md, const char *where)
{
    int rc = 0;
    /* A time past our clock (by more than a clock's usual skew) is a
     * Source's clock gone wrong, or an error: readers take it as now
     * (rssub, rsbridge), so say it, once a document. */
    const rs_time_t times[] = { md->at, md->completed, md->from, md->until,
                                md->datetime };
    static const char *const names[] = { "at", "completed", "from", "until",
                                         "datetime" };
    rs_time_t limit = rs_time_now() + RS_TIME_SKEW_US;
    for (size_t i = 0; !c->future_warned && i < 5; i++) {
        if (times[i] == RS_TIME_NONE || times[i] <= limit)
            continue;
        char t[RS_TIME_BUFSZ];
        rs_time_format(times[i], t);
        c->future_warned = true;
        rc = check_at(c, LV_SHOULD, "%.100s: \"%s\" is in the future (%s): "
                      "is the Source's clock wrong? (readers take it as now)",
                      where, names[i], t);
    }
    if (md->at != RS_TIME_NONE && md->completed != RS_TIME_NONE &&
        md->completed < md->at)
        rc = first_error(rc, check_at(c, LV_SHOULD, "%s: \"completed\" is "
                                      "before \"at\"", where));
    if (md->from != RS_TIME_NONE && md->until != RS_TIME_NONE &&
        md->until < md->from)
        rc = first_error(rc, check_at(c, LV_SHOULD, "%s: \"until\" is before "
                                      "\"from\"", where));
    return rc;
}

int
rs_check_head(struct rs_check *c, const struct rs_head *h)
{
    const struct rs_md *md = &h->md;
    const char *root = rs_root_name(h->root);
    int rc = 0;

    c->head_done = true;
    c->root = h->root;
    c->cap = md->capability;
    c->from = h->has_md ? md->from : RS_TIME_NONE;
    c->until = h->has_md ? md->until : RS_TIME_NONE;
    c->cap_alpha = md->capability_alpha;
    c->notification = rs_capability_is_notification(md->capability);
    c->has_up = rs_links_find(h->links, h->nlinks, "up") != NULL;
    if (h->root == RS_ROOT_NONE)
        return check_fatal(c, RS_EINVALID,
                           "root element must be <urlset> or <sitemapindex>");
    /* With root <rs:ln> links the document is ResourceSync's, not a plain
     * sitemap, but cannot say which of its kinds it is. The notification
     * alpha draft prints its examples 4.1, 5.1 and 5.2 so: the text that
     * said their structure was lost, and the kind came from the channel
     * they were sent on, which a document read alone does not have
     * (docs/protocol.md 1.1). */
    if (!h->has_md && h->nlinks > 0)
        return check_fatal(c, RS_EINVALID,
                           "<%s> has no <rs:md> element before its entries, "
                           "so what the document is cannot be known: a root "
                           "<rs:md capability=\"...\"> is mandatory (core 7), "
                           "in a notification too (alpha examples 4.1, 5.1, "
                           "5.2 leave it out)", root);
    if (!h->has_md)
        return check_fatal(c, RS_EINVALID,
                           "<%s> has no <rs:md> element before its entries: "
                           "not a ResourceSync document (a plain sitemap? "
                           "the root <rs:md> comes before the first entry)",
                           root);
    if (md->capability == RS_CAP_NONE)
        return check_fatal(c, RS_EINVALID,
                           "root <rs:md> has no capability attribute (core 7: "
                           "mandatory)");
    if (md->capability == RS_CAP_OTHER)
        return check_fatal(c, RS_EINVALID,
                           "unknown capability \"%s\" on the root <rs:md>",
                           md->capability_other ? md->capability_other : "");
    const char *cap = cap_text(c);
    /* The parser reads "changelistindex" on a <sitemapindex> as an index
     * of changelist: what the Source meant is clear. */
    char fix[64];
    snprintf(fix, sizeof(fix), "a reader reads it as a %s index", cap);
    if (md->capability_index_alias)
        rc = first_error(rc, check_fix(c, LV_MUST, fix,
                                       "capability \"%sindex\" is not a "
                                       "ResourceSync capability: an index "
                                       "says \"%s\" on a <sitemapindex> "
                                       "(core 6.1)", cap, cap));
    /* Core section 9: Sources "should not" publish Capability List
     * Indexes. */
    if (h->root == RS_ROOT_SITEMAPINDEX &&
        md->capability == RS_CAP_CAPABILITYLIST)
        rc = first_error(rc, check_at(c, LV_SHOULD, "a Capability List should "
                                      "not be a <sitemapindex> (core 9)"));
    if (h->root == RS_ROOT_SITEMAPINDEX && !cap_has_index(md->capability) &&
        md->capability != RS_CAP_CAPABILITYLIST)
        return check_fatal(c, RS_EINVALID,
                           "capability \"%s\" cannot be a <sitemapindex> "
                           "(only Source Descriptions, Resource Lists, Change "
                           "Lists and dumps have indexes)", cap);

    rc = first_error(rc, check_links(c, h->links, h->nlinks, "the root"));

    /* Time attributes: which are mandatory, which do not belong. */
    if (cap_is_snapshot(md->capability)) {
        if (md->at == RS_TIME_NONE)
            rc = first_error(rc, check_at(c, LV_MUST, "%s: root <rs:md> has "
                                          "no \"at\" attribute (core 10-11: "
                                          "it must have one)", cap));
        if (md->from != RS_TIME_NONE || md->until != RS_TIME_NONE)
            rc = first_error(rc, check_at(c, LV_SHOULD, "%s: \"from\"/"
                                          "\"until\" belong to change "
                                          "documents, not snapshots (core 7)",
                                          cap));
    } else if (cap_is_change(md->capability)) {
        if (md->from == RS_TIME_NONE)
            rc = first_error(rc, check_at(c, LV_MUST, "%s: root <rs:md> has "
                                          "no \"from\" attribute (core 12-13: "
                                          "mandatory)", cap));
        if (md->at != RS_TIME_NONE || md->completed != RS_TIME_NONE)
            rc = first_error(rc, check_at(c, LV_SHOULD, "%s: \"at\"/"
                                          "\"completed\" belong to snapshot "
                                          "documents, not change documents "
                                          "(core 7)", cap));
    }
    rc = first_error(rc, check_intervals(c, md, "root <rs:md>"));
    return rc;
}

/* ----------------------------------------------------------------- entries */

/* Which changes a framework notification may announce for a capability
 * document (notification spec; PROTOCOL.md 3). */
static bool
framework_change_ok(enum rs_capability cap, enum rs_change ch)
{
    switch (cap) {
    case RS_CAP_RESOURCELIST:
    case RS_CAP_RESOURCEDUMP:
        return ch == RS_CHANGE_CREATED;
    case RS_CAP_CHANGELIST:
    case RS_CAP_CHANGEDUMP:
        return ch == RS_CHANGE_CREATED || ch == RS_CHANGE_UPDATED;
    case RS_CAP_CAPABILITYLIST:
    case RS_CAP_DESCRIPTION:
        return ch != RS_CHANGE_NONE;
    default:
        return false;
    }
}

static bool
loc_is_ws(const char *loc)
{
    return url_scheme_is(loc, "ws://", 5) || url_scheme_is(loc, "wss://", 6);
}

/* Core 9: "A Capability List must only contain one entry per capability."
 * A channel is counted per transport: the alpha draft's WebSocket channel
 * (a ws:// <loc>) and the 2017 WebSub topic of the same capability are
 * two ways to receive it, not one capability listed twice. */
static int
check_capability_once(struct rs_check *c, const struct rs_entry *e)
{
    const struct rs_md *md = &e->md;
    bool ws = loc_is_ws(e->loc);
    bool twice;
    if (md->capability == RS_CAP_OTHER) {
        const char *name = md->capability_other ? md->capability_other : "";
        twice = false;
        for (unsigned i = 0; i < c->nother_caps && !twice; i++)
            twice = strcmp(c->other_caps[i], name) == 0;
        if (!twice && c->nother_caps < RS_CHECK_MAX_OTHER_CAPS &&
            strlen(name) < sizeof(c->other_caps[0]))
            snprintf(c->other_caps[c->nother_caps++], sizeof(c->other_caps[0]),
                     "%s", name);
    } else {
        unsigned bit = (unsigned)md->capability * 4u +
                       (md->capability_alpha ? 2u : 0u) + (ws ? 1u : 0u);
        twice = (c->caps_seen >> bit) & 1u;
        c->caps_seen |= 1ull << bit;
    }
    if (!twice)
        return 0;
    const char *name = rs_capability_name(md->capability);
    if (md->capability == RS_CAP_OTHER)
        name = md->capability_other;
    else if (md->capability_alpha)
        name = "change-notification";
    return check_fix(c, LV_MUST, "a reader uses one of them",
                     "Capability List entry %s: capability \"%s\" is listed "
                     "twice (core 9: one entry per capability)", e->loc,
                     name);
}

static int
check_entry_capability(struct rs_check *c, const struct rs_entry *e)
{
    const struct rs_md *md = &e->md;
    enum rs_capability ecap = e->has_md ? md->capability : RS_CAP_NONE;

    if (c->cap == RS_CAP_DESCRIPTION) {
        /* Core 8: the entry's <rs:md> is optional, but if there "must
         * have a capability attribute with a value of capabilitylist". */
        if (!e->has_md)
            return 0;
        if (ecap == RS_CAP_NONE)
            return check_at(c, LV_MUST, "Source Description entry %s: its "
                            "<rs:md> has no capability=\"capabilitylist\" "
                            "(core 8)", e->loc);
        if (ecap != RS_CAP_CAPABILITYLIST)
            return check_at(c, LV_ERROR,
                            "Source Description entry %s has capability "
                            "\"%s\", expected \"capabilitylist\"", e->loc,
                            ecap == RS_CAP_OTHER ? md->capability_other
                                                 : rs_capability_name(ecap));
        return 0;
    }
    /* c->cap == RS_CAP_CAPABILITYLIST */
    switch (ecap) {
    case RS_CAP_NONE:
        return check_at(c, LV_ERROR, "Capability List entry %s has no "
                        "capability attribute: what it is cannot be known "
                        "(core 9)", e->loc);
    case RS_CAP_RESOURCELIST:
    case RS_CAP_RESOURCEDUMP:
    case RS_CAP_CHANGELIST:
    case RS_CAP_CHANGEDUMP:
    case RS_CAP_CHANGELIST_NOTIFICATION:
    case RS_CAP_FRAMEWORK_NOTIFICATION:
    case RS_CAP_OTHER:
        /* extensions (e.g. the archives' resourcelist-archive): fine */
        return check_capability_once(c, e);
    default:
        return check_at(c, LV_ERROR,
                        "Capability List entry %s has capability \"%s\", "
                        "which a Capability List cannot list", e->loc,
                        rs_capability_name(ecap));
    }
}

static int
check_framework_entry(struct rs_check *c, const struct rs_entry *e)
{
    const struct rs_md *md = &e->md;
    int rc = 0;
    if (!e->has_md || md->capability == RS_CAP_NONE)
        rc = first_error(rc, check_at(c, LV_ERROR, "framework notification "
                                      "entry %s has no capability attribute",
                                      e->loc));
    if (md->change == RS_CHANGE_NONE)
        rc = first_error(rc, check_at(c, LV_ERROR, "framework notification "
                                      "entry %s has no change attribute",
                                      e->loc));
    else if (md->capability != RS_CAP_NONE &&
             md->capability != RS_CAP_OTHER &&
             !framework_change_ok(md->capability, md->change))
        rc = first_error(rc, check_at(c, LV_ERROR, "framework notification: "
                                      "change \"%s\" is not permitted for a "
                                      "%s", rs_change_name(md->change),
                                      rs_capability_name(md->capability)));
    return rc;
}

/* Forward chronological order: each entry's time t against the latest so
 * far. Told once per document, with the first entry out of order. */
static int
check_order(struct rs_check *c, const struct rs_entry *e, rs_time_t t,
            enum level lv, const char *section)
{
    int rc = 0;
    if (t == RS_TIME_NONE)
        return 0;
    if (c->last_time != RS_TIME_NONE && t < c->last_time && !c->order_warned) {
        char a[RS_TIME_BUFSZ], b[RS_TIME_BUFSZ];
        rs_time_format(t, a);
        rs_time_format(c->last_time, b);
        c->order_warned = true;
        rc = check_fix(c, lv, "a reader applies them by time",
                       "entries are not in forward chronological order "
                       "(%s): %s at %s comes after %s", section, e->loc, a,
                       b);
    }
    if (c->last_time == RS_TIME_NONE || t > c->last_time)
        c->last_time = t;
    return rc;
}

/* An entry of a Change List, Change Dump Manifest or change notification. */
static int
check_change_entry(struct rs_check *c, const struct rs_entry *e)
{
    const struct rs_md *md = &e->md;
    if (!e->has_md || md->change == RS_CHANGE_NONE)
        return check_at(c, LV_ERROR, "entry %s has no change attribute "
                        "(created|updated|deleted): what happened cannot be "
                        "known", e->loc);
    /* 1.1 orders by datetime; 1.0 by the then-mandatory lastmod. */
    rs_time_t t = md->datetime != RS_TIME_NONE ? md->datetime : e->lastmod;
    if (c->cap == RS_CAP_CHANGELIST_NOTIFICATION)
        return check_order(c, e, t, LV_SHOULD,
                           "expected as in Change Lists, core 12.1");
    if (t == RS_TIME_NONE) {
        /* A deletion says all that matters without its time (a reader
         * takes the time as unknown, as for 1.0 deletions); a creation or
         * update with no time cannot be placed among the others. */
        if (md->change == RS_CHANGE_DELETED)
            return check_fix(c, LV_MUST, "a reader takes its time as unknown",
                             "entry %s (deleted) has neither <lastmod> nor a "
                             "datetime attribute (core 7: mandatory in %s)",
                             e->loc, cap_text(c));
        return check_at(c, LV_ERROR, "entry %s has neither <lastmod> nor a "
                        "datetime attribute: when it changed cannot be known "
                        "(core 7, 12.1)", e->loc);
    }
    /* "from" and "until" say the document holds the changes of that
     * interval (core 7): one dated outside it (a closed list changed
     * after its until, a dump's package holding later changes) is not
     * what the head says. */
    int rc = 0;
    if ((c->until != RS_TIME_NONE && t > c->until) ||
        (c->from != RS_TIME_NONE && t < c->from)) {
        char a[RS_TIME_BUFSZ], b[RS_TIME_BUFSZ];
        bool late = c->until != RS_TIME_NONE && t > c->until;
        rs_time_format(t, a);
        rs_time_format(late ? c->until : c->from, b);
        rc = check_at(c, LV_SHOULD, "entry %.100s is dated %s, %s the document's "
                      "\"%s\" (%s): the document holds the changes of its "
                      "interval (core 7)", e->loc, a, late ? "after" : "before",
                      late ? "until" : "from", b);
    }
    return first_error(rc, check_order(c, e, t, LV_MUST,
                       c->cap == RS_CAP_CHANGELIST ? "core 12.1"
                                                   : "core 13.2, as 12.1"));
}

/* A manifest path is where the bitstream sits in the ZIP, "relative to the
 * root of the package" with a leading slash (core 11.2, 13.2). A ".."
 * segment climbs out of the package: what a ZIP-slip attack on a
 * Destination that unpacks dumps looks like. */
static int
check_manifest_path(struct rs_check *c, const struct rs_entry *e)
{
    const struct rs_md *md = &e->md;
    /* A deleted resource has no bitstream in a Change Dump, so no path. */
    if (!e->has_md || md->path == NULL || md->path[0] == '\0') {
        if (c->cap == RS_CAP_CHANGEDUMP_MANIFEST &&
            md->change == RS_CHANGE_DELETED)
            return 0;
        return check_at(c, LV_ERROR, "manifest entry %s has no path "
                        "attribute: where its bitstream is cannot be known "
                        "(core 11.2)", e->loc);
    }
    const char *p = md->path;
    for (const char *seg = p; seg != NULL; seg = strchr(seg, '/')) {
        if (*seg == '/')
            seg++;
        if (seg[0] == '.' && seg[1] == '.' && (seg[2] == '/' || seg[2] == '\0'))
            return check_at(c, LV_ERROR, "manifest entry %s: path \"%.100s\" "
                            "climbs out of the package with \"..\"", e->loc,
                            p);
    }
    if (p[0] != '/')
        return check_at(c, LV_SHOULD, "manifest entry %s: path \"%.100s\" "
                        "should start with \"/\" (the package root, core "
                        "11.2)", e->loc, p);
    return 0;
}

/* Entries of an index: the parts. Their times may be given; a Change List
 * Index "must enumerate Change Lists in forward chronological order" (core
 * 12.2), by the from of each. */
static int
check_index_entry(struct rs_check *c, const struct rs_entry *e)
{
    int rc = 0;
    if (e->has_md) {
        rc = check_intervals(c, &e->md, e->loc);
        if (c->cap == RS_CAP_CHANGELIST)
            rc = first_error(rc, check_order(c, e, e->md.from, LV_MUST,
                                             "core 12.2"));
    }
    return rc;
}

/* "entry 3, line 9" (without the line when it is not known). */
static const char *
entry_pos(char *buf, size_t n, uint32_t num, uint32_t line)
{
    if (line > 0)
        snprintf(buf, n, "entry %u, line %u", num, line);
    else
        snprintf(buf, n, "entry %u", num);
    return buf;
}

/* What a document lists once per <loc>, for the message; NULL for the
 * documents that list a resource once per change (core 5.1, 12.1, 13.1;
 * a notification as a Change List; a framework notification may tell of
 * one document created, then updated). */
static const char *
loc_once_rule(const struct rs_check *c)
{
    if (c->root == RS_ROOT_SITEMAPINDEX)
        return "an index lists each part once";
    switch (c->cap) {
    case RS_CAP_RESOURCELIST:
        return "a Resource List has one <url> for each resource (core 10.1)";
    case RS_CAP_RESOURCEDUMP:
        return "a Resource Dump has one <url> for each package (core 11.1)";
    case RS_CAP_CHANGEDUMP:
        return "a Change Dump has one <url> for each package (core 13.1)";
    case RS_CAP_DESCRIPTION:
        return "a Source Description lists each Capability List once "
               "(core 8)";
    case RS_CAP_CAPABILITYLIST:
        return "a Capability List lists each document once (core 9)";
    case RS_CAP_RESOURCEDUMP_MANIFEST:
        return "a Resource Dump Manifest has one bitstream per resource "
               "(core 11.2)";
    default:
        return NULL;
    }
}

/*
 * rs_check_unique's rules. A <loc> twice in a Resource Dump Manifest is
 * an error: the package holds two bitstreams for one resource of a
 * snapshot, and which is its state cannot be known (rssub refuses the
 * package). Elsewhere the spec's words are "should" (one <url> for each
 * resource, each package), and a reader that meets the loc again has
 * nothing new to do: a warning. Two manifest entries with one path (a
 * leading '/' or not: one member of the ZIP) would read one bitstream as
 * two resources or two changes: an error in both manifests, as in rssub.
 */
static int
check_unique(struct rs_check *c, const struct rs_entry *e)
{
    const struct seen_slot *first;
    const char *rule = loc_once_rule(c);
    uint32_t num = (uint32_t)c->nentries, line = e->line;
    char a[48], b[48];
    int rc = 0;

    if (rule != NULL) {
        if (seen_add(c->seen, 'L', e->loc, num, line, &first) != 0)
            return check_fatal(c, RS_ENOMEM, "out of memory remembering "
                               "the entries' locs");
        if (first != NULL)
            rc = check_fix(c, c->cap == RS_CAP_RESOURCEDUMP_MANIFEST
                                  ? LV_ERROR : LV_SHOULD,
                           "a reader takes it once",
                           "<loc> %.100s is listed twice (%s, then %s): %s",
                           e->loc, entry_pos(a, sizeof(a), first->num,
                                             first->line),
                           entry_pos(b, sizeof(b), num, line), rule);
    }
    bool manifest = c->cap == RS_CAP_RESOURCEDUMP_MANIFEST ||
                    c->cap == RS_CAP_CHANGEDUMP_MANIFEST;
    const char *path = e->has_md ? e->md.path : NULL;
    if (!manifest || path == NULL)
        return rc;
    while (*path == '/')
        path++;
    if (*path == '\0')
        return rc;
    if (seen_add(c->seen, 'P', path, num, line, &first) != 0)
        return check_fatal(c, RS_ENOMEM, "out of memory remembering the "
                           "entries' paths");
    if (first != NULL)
        rc = first_error(rc, check_at(c, LV_ERROR, "manifest path "
                                      "\"%.100s\" is given twice (%s, then "
                                      "%s, <loc> %.100s): a package holds one "
                                      "bitstream at a path (core 11.2, 13.2)",
                                      e->md.path, entry_pos(a, sizeof(a),
                                                            first->num,
                                                            first->line),
                                      entry_pos(b, sizeof(b), num, line),
                                      e->loc));
    return rc;
}

int
rs_check_entry(struct rs_check *c, const struct rs_entry *e)
{
    const struct rs_md *md = &e->md;
    const char *elem = c->root == RS_ROOT_SITEMAPINDEX ? "<sitemap>" : "<url>";
    int rc = 0;

    if (!c->head_done)
        return check_fatal(c, RS_EINVALID, "entry before the document head");
    if (++c->nentries > c->max_entries)
        return check_fatal(c, RS_ETOOBIG,
                           "more than %zu entries in one document (the "
                           "ResourceSync limit; %s)", c->max_entries,
                           c->notification
                               ? "a notification has no index: send "
                                 "several"
                               : "publish an index");
    if (e->loc == NULL || e->loc[0] == '\0')
        return check_at(c, LV_ERROR, "%s without <loc>", elem);

    /* Notification channels in a Capability List are ws:// or wss://. */
    bool allow_ws = c->cap == RS_CAP_CAPABILITYLIST && e->has_md &&
                    rs_capability_is_notification(md->capability);
    const char *flaw = NULL;
    if (check_uri(e->loc, allow_ws) != 0)
        rc = check_at(c, LV_ERROR, "<loc> \"%.160s\" is not an absolute %s "
                      "URI", e->loc, allow_ws ? "http(s) or ws(s)" : "http(s)");
    else if ((flaw = uri_flaw(e->loc)) != NULL)
        rc = check_fix(c, LV_MUST, "a reader tries it as it is", "<loc> "
                       "\"%.160s\" is not a URI: %s (RFC 3986)", e->loc,
                       flaw);

    rc = first_error(rc, check_links(c, e->links, e->nlinks, elem));
    if (c->seen != NULL) {
        rc = first_error(rc, check_unique(c, e));
        if (c->broken)
            return rc;
    }

    if (c->root == RS_ROOT_SITEMAPINDEX)
        return first_error(rc, check_index_entry(c, e));
    if (c->cap == RS_CAP_DESCRIPTION || c->cap == RS_CAP_CAPABILITYLIST)
        return first_error(rc, check_entry_capability(c, e));
    if (c->cap == RS_CAP_FRAMEWORK_NOTIFICATION)
        return first_error(rc, check_framework_entry(c, e));

    if (c->cap == RS_CAP_CHANGELIST || c->cap == RS_CAP_CHANGEDUMP_MANIFEST ||
        c->cap == RS_CAP_CHANGELIST_NOTIFICATION)
        rc = first_error(rc, check_change_entry(c, e));
    /* Core 13.1: Change Dump entries "should be provided in forward
     * chronological order", the packages by the interval they cover. */
    if (c->cap == RS_CAP_CHANGEDUMP && e->has_md)
        rc = first_error(rc, check_order(c, e, md->from != RS_TIME_NONE
                                                   ? md->from : e->lastmod,
                                         LV_SHOULD, "core 13.1"));
    if (c->cap == RS_CAP_RESOURCEDUMP_MANIFEST ||
        c->cap == RS_CAP_CHANGEDUMP_MANIFEST)
        rc = first_error(rc, check_manifest_path(c, e));
    if (e->has_md)
        rc = first_error(rc, check_intervals(c, md, e->loc));
    return rc;
}

int
rs_check_end(struct rs_check *c, const struct rs_link *links, size_t nlinks)
{
    if (!c->head_done)
        return check_fatal(c, RS_EINVALID, "no ResourceSync root element");
    /* Root links after the entries obey the same rules as the others. */
    int rc = check_links(c, links, nlinks, "the root");
    if (rs_links_find(links, nlinks, "up") != NULL)
        c->has_up = true;
    /* Every document but a Source Description links up to its parent
     * (core 9-13: "mandatory"). Checked at the end because some Sources
     * put their links after the entries. The spec's own walkthrough
     * (core examples 1-5, 8) leaves it out: a should here. */
    if (c->cap != RS_CAP_DESCRIPTION && !c->has_up)
        rc = first_error(rc, check_at(c, LV_SHOULD, "%s: no <rs:ln "
                                      "rel=\"up\"> link to the %s", cap_text(c),
                                      c->cap == RS_CAP_CAPABILITYLIST
                                          ? "Source Description"
                                          : "Capability List"));
    return rc;
}
