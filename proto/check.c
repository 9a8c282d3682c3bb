/*
 * check.c - the ResourceSync document rules (rs_check.h), shared by the
 * parser and the writer so that what we read leniently and what we write
 * strictly are judged by the same code. Messages name the element or
 * attribute at fault; the caller adds the file and line.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "rs_check.h"

void
rs_check_init(struct rs_check *c, bool strict, size_t max_entries,
              rs_check_report_cb report, void *ud)
{
    memset(c, 0, sizeof(*c));
    c->strict = strict;
    c->max_entries = max_entries ? max_entries : RS_MAX_ENTRIES;
    c->report = report;
    c->ud = ud;
    c->last_time = RS_TIME_NONE;
}

__attribute__((format(printf, 3, 4))) static int
check_fail(struct rs_check *c, int rc, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (c->report != NULL)
        c->report(c->ud, RS_SEV_ERROR, msg);
    return rc;
}

/* A warning, or under strict an error: returns what the caller returns. */
__attribute__((format(printf, 2, 3))) static int
check_warn(struct rs_check *c, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (c->report != NULL)
        c->report(c->ud, c->strict ? RS_SEV_ERROR : RS_SEV_WARNING, msg);
    return c->strict ? RS_EINVALID : 0;
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

/* ----------------------------------------------------------------- links */

static int
check_links(struct rs_check *c, const struct rs_link *links, size_t n,
            const char *where)
{
    for (size_t i = 0; i < n; i++) {
        const struct rs_link *l = &links[i];
        if (l->rel == NULL || l->rel[0] == '\0')
            return check_fail(c, RS_EINVALID,
                              "<rs:ln> in %s without rel attribute", where);
        if (l->href == NULL || l->href[0] == '\0')
            return check_fail(c, RS_EINVALID,
                              "<rs:ln rel=\"%s\"> in %s without href attribute",
                              l->rel, where);
        if (l->pri > 999999)
            return check_fail(c, RS_EINVALID,
                              "<rs:ln rel=\"%s\"> pri %u is outside 1..999999",
                              l->rel, l->pri);
    }
    return 0;
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

int
rs_check_head(struct rs_check *c, const struct rs_head *h)
{
    const struct rs_md *md = &h->md;
    const char *root = rs_root_name(h->root);
    int rc;

    c->head_done = true;
    c->root = h->root;
    c->cap = md->capability;
    c->cap_alpha = md->capability_alpha;
    c->has_up = rs_links_find(h->links, h->nlinks, "up") != NULL;
    if (h->root == RS_ROOT_NONE)
        return check_fail(c, RS_EINVALID,
                          "root element must be <urlset> or <sitemapindex>");
    if (!h->has_md)
        return check_fail(c, RS_EINVALID,
                          "<%s> has no <rs:md> element: not a ResourceSync "
                          "document (a plain sitemap?)", root);
    if (md->capability == RS_CAP_NONE)
        return check_fail(c, RS_EINVALID,
                          "root <rs:md> has no capability attribute");
    if (md->capability == RS_CAP_OTHER)
        return check_fail(c, RS_EINVALID,
                          "unknown capability \"%s\" on the root <rs:md>",
                          md->capability_other ? md->capability_other : "");
    const char *cap = md->capability_alpha ? "change-notification"
                                           : rs_capability_name(md->capability);
    /* Core section 9: Sources "should not" publish Capability List
     * Indexes; a should, so read it with a warning. */
    if (h->root == RS_ROOT_SITEMAPINDEX &&
        md->capability == RS_CAP_CAPABILITYLIST &&
        (rc = check_warn(c, "a Capability List should not be a "
                         "<sitemapindex> (core section 9)")) != 0)
        return rc;
    if (h->root == RS_ROOT_SITEMAPINDEX && !cap_has_index(md->capability) &&
        md->capability != RS_CAP_CAPABILITYLIST)
        return check_fail(c, RS_EINVALID,
                          "capability \"%s\" cannot be a <sitemapindex> "
                          "(only Source Descriptions, Resource Lists, Change "
                          "Lists and dumps have indexes)", cap);

    rc = check_links(c, h->links, h->nlinks, "the root");
    if (rc != 0)
        return rc;

    /* Time attributes: which are mandatory, which do not belong. */
    if (cap_is_snapshot(md->capability)) {
        if (md->at == RS_TIME_NONE &&
            (rc = check_warn(c, "%s: root <rs:md> has no \"at\" attribute",
                             cap)) != 0)
            return rc;
        if (md->at != RS_TIME_NONE && md->completed != RS_TIME_NONE &&
            md->completed < md->at)
            return check_fail(c, RS_EINVALID,
                              "root <rs:md> \"completed\" is before \"at\"");
        if ((md->from != RS_TIME_NONE || md->until != RS_TIME_NONE) &&
            (rc = check_warn(c, "%s: \"from\"/\"until\" belong to change "
                             "documents, not snapshots", cap)) != 0)
            return rc;
    } else if (cap_is_change(md->capability)) {
        if (md->from == RS_TIME_NONE &&
            (rc = check_warn(c, "%s: root <rs:md> has no \"from\" attribute",
                             cap)) != 0)
            return rc;
        if (md->from != RS_TIME_NONE && md->until != RS_TIME_NONE &&
            md->until < md->from)
            return check_fail(c, RS_EINVALID,
                              "root <rs:md> \"until\" is before \"from\"");
        if ((md->at != RS_TIME_NONE || md->completed != RS_TIME_NONE) &&
            (rc = check_warn(c, "%s: \"at\"/\"completed\" belong to snapshot "
                             "documents, not change documents", cap)) != 0)
            return rc;
    }

    return 0;
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

static int
check_entry_capability(struct rs_check *c, const struct rs_entry *e)
{
    const struct rs_md *md = &e->md;
    enum rs_capability ecap = e->has_md ? md->capability : RS_CAP_NONE;

    if (c->cap == RS_CAP_DESCRIPTION) {
        if (ecap == RS_CAP_NONE)
            return check_warn(c, "Source Description entry %s has no "
                              "capability=\"capabilitylist\"", e->loc);
        if (ecap != RS_CAP_CAPABILITYLIST)
            return check_fail(c, RS_EINVALID,
                              "Source Description entry %s has capability "
                              "\"%s\", expected \"capabilitylist\"", e->loc,
                              ecap == RS_CAP_OTHER ? md->capability_other
                                                   : rs_capability_name(ecap));
        return 0;
    }
    /* c->cap == RS_CAP_CAPABILITYLIST */
    switch (ecap) {
    case RS_CAP_NONE:
        return check_fail(c, RS_EINVALID,
                          "Capability List entry %s has no capability "
                          "attribute", e->loc);
    case RS_CAP_RESOURCELIST:
    case RS_CAP_RESOURCEDUMP:
    case RS_CAP_CHANGELIST:
    case RS_CAP_CHANGEDUMP:
    case RS_CAP_CHANGELIST_NOTIFICATION:
    case RS_CAP_FRAMEWORK_NOTIFICATION:
        return 0;
    case RS_CAP_OTHER:
        /* extensions (e.g. the archives' resourcelist-archive): fine */
        return 0;
    default:
        return check_fail(c, RS_EINVALID,
                          "Capability List entry %s has capability \"%s\", "
                          "which a Capability List cannot list", e->loc,
                          rs_capability_name(ecap));
    }
}

int
rs_check_entry(struct rs_check *c, const struct rs_entry *e)
{
    const struct rs_md *md = &e->md;
    const char *elem = c->root == RS_ROOT_SITEMAPINDEX ? "<sitemap>" : "<url>";
    bool is_index = c->root == RS_ROOT_SITEMAPINDEX;
    int rc;

    if (!c->head_done)
        return check_fail(c, RS_EINVALID, "entry before the document head");
    if (++c->nentries > c->max_entries)
        return check_fail(c, RS_ETOOBIG,
                          "more than %zu entries in one document (the "
                          "ResourceSync limit; publish an index)",
                          c->max_entries);
    if (e->loc == NULL || e->loc[0] == '\0')
        return check_fail(c, RS_EINVALID, "%s without <loc>", elem);

    /* Notification channels in a Capability List are ws:// or wss://. */
    bool allow_ws = c->cap == RS_CAP_CAPABILITYLIST && e->has_md &&
                    rs_capability_is_notification(md->capability);
    if (check_uri(e->loc, allow_ws) != 0)
        return check_fail(c, RS_EINVALID,
                          "<loc> \"%.160s\" is not an absolute %s URI", e->loc,
                          allow_ws ? "http(s) or ws(s)" : "http(s)");

    rc = check_links(c, e->links, e->nlinks, elem);
    if (rc != 0)
        return rc;

    /* In an index, entries are the parts: no per-entry capability rules. */
    if (is_index)
        return 0;
    if (c->cap == RS_CAP_DESCRIPTION || c->cap == RS_CAP_CAPABILITYLIST)
        return check_entry_capability(c, e);

    if (c->cap == RS_CAP_FRAMEWORK_NOTIFICATION) {
        if (!e->has_md || md->capability == RS_CAP_NONE)
            return check_fail(c, RS_EINVALID,
                              "framework notification entry %s has no "
                              "capability attribute", e->loc);
        if (md->change == RS_CHANGE_NONE)
            return check_fail(c, RS_EINVALID,
                              "framework notification entry %s has no change "
                              "attribute", e->loc);
        if (md->capability != RS_CAP_OTHER &&
            !framework_change_ok(md->capability, md->change))
            return check_fail(c, RS_EINVALID,
                              "framework notification: change \"%s\" is not "
                              "permitted for a %s", rs_change_name(md->change),
                              rs_capability_name(md->capability));
        return 0;
    }

    bool changes = !is_index && (c->cap == RS_CAP_CHANGELIST ||
                                 c->cap == RS_CAP_CHANGEDUMP_MANIFEST ||
                                 c->cap == RS_CAP_CHANGELIST_NOTIFICATION);
    if (changes) {
        if (!e->has_md || md->change == RS_CHANGE_NONE)
            return check_fail(c, RS_EINVALID,
                              "entry %s has no change attribute "
                              "(created|updated|deleted)", e->loc);
        /* 1.1 orders by datetime; 1.0 by the then-mandatory lastmod. */
        rs_time_t t = md->datetime != RS_TIME_NONE ? md->datetime : e->lastmod;
        if (t == RS_TIME_NONE) {
            if (c->cap != RS_CAP_CHANGELIST_NOTIFICATION)
                return check_fail(c, RS_EINVALID,
                                  "entry %s has neither <lastmod> nor a "
                                  "datetime attribute", e->loc);
        } else {
            /* Out of order is a warning: each entry still says what
             * happened when, and real Sources (resync groups its Change
             * Lists by change type) write them so. Readers that apply
             * changes compare times per resource anyway. */
            if (c->last_time != RS_TIME_NONE && t < c->last_time &&
                !c->order_warned) {
                char a[RS_TIME_BUFSZ], b[RS_TIME_BUFSZ];
                int wrc;
                rs_time_format(t, a);
                rs_time_format(c->last_time, b);
                c->order_warned = true;
                wrc = check_warn(c, "entries are not in forward chronological "
                                 "order: %s at %s comes after %s", e->loc, a,
                                 b);
                if (wrc != 0)
                    return wrc;
            }
            if (c->last_time == RS_TIME_NONE || t > c->last_time)
                c->last_time = t;
        }
    }
    /* A manifest path is where the bitstream sits in the ZIP, "relative to
     * the root of the package" with a leading slash (core 11.2, 13.2). A
     * ".." segment climbs out of the package: what a ZIP-slip attack on a
     * Destination that unpacks dumps looks like. */
    if (!is_index && e->has_md && md->path != NULL &&
        (c->cap == RS_CAP_RESOURCEDUMP_MANIFEST ||
         c->cap == RS_CAP_CHANGEDUMP_MANIFEST)) {
        const char *p = md->path;
        for (const char *seg = p; seg != NULL; seg = strchr(seg, '/')) {
            if (*seg == '/')
                seg++;
            if (seg[0] == '.' && seg[1] == '.' && (seg[2] == '/' || seg[2] == '\0'))
                return check_fail(c, RS_EINVALID,
                                  "manifest entry %s: path \"%.100s\" climbs "
                                  "out of the package with \"..\"", e->loc, p);
        }
        if (p[0] != '/' &&
            (rc = check_warn(c, "manifest entry %s: path \"%.100s\" should "
                             "start with \"/\" (the package root)", e->loc,
                             p)) != 0)
            return rc;
    }
    /* A deleted resource has no bitstream in a Change Dump, so no path. */
    if (!is_index && (c->cap == RS_CAP_RESOURCEDUMP_MANIFEST ||
                      (c->cap == RS_CAP_CHANGEDUMP_MANIFEST &&
                       md->change != RS_CHANGE_DELETED)) &&
        (!e->has_md || md->path == NULL || md->path[0] == '\0'))
        return check_fail(c, RS_EINVALID,
                          "manifest entry %s has no path attribute", e->loc);
    return 0;
}

int
rs_check_end(struct rs_check *c, const struct rs_link *links, size_t nlinks)
{
    if (!c->head_done)
        return check_fail(c, RS_EINVALID, "no ResourceSync root element");
    /* Root links after the entries obey the same rules as the others. */
    int rc = check_links(c, links, nlinks, "the root");
    if (rc != 0)
        return rc;
    if (rs_links_find(links, nlinks, "up") != NULL)
        c->has_up = true;
    /* Every document but a Source Description links up to its parent.
     * Checked at the end because some Sources put their links after the
     * entries. Real Sources often leave it out; the meaning stays clear. */
    if (c->cap != RS_CAP_DESCRIPTION && !c->has_up)
        return check_warn(c, "%s: no <rs:ln rel=\"up\"> link to the %s",
                          c->cap_alpha ? "change-notification"
                                       : rs_capability_name(c->cap),
                          c->cap == RS_CAP_CAPABILITYLIST ? "Source Description"
                                                          : "Capability List");
    return 0;
}
