/*
 * doc.c - the document model's plain operations (rs_doc.h): "absent"
 * initialisers, token tables, link lookup, freeing a parsed document.
 */
#include <string.h>
#include <strings.h>

#include "arena.h"
#include "rs_alloc.h"
#include "rs_doc.h"

void
rs_md_init(struct rs_md *md)
{
    memset(md, 0, sizeof(*md));
    md->at = md->completed = md->from = md->until = md->datetime = RS_TIME_NONE;
    md->length = -1;
}

void
rs_link_init(struct rs_link *ln)
{
    memset(ln, 0, sizeof(*ln));
    ln->length = -1;
    ln->modified = RS_TIME_NONE;
}

void
rs_entry_init(struct rs_entry *e)
{
    memset(e, 0, sizeof(*e));
    e->lastmod = RS_TIME_NONE;
    rs_md_init(&e->md);
}

void
rs_head_init(struct rs_head *h)
{
    memset(h, 0, sizeof(*h));
    rs_md_init(&h->md);
}

void
rs_doc_free(struct rs_doc *doc)
{
    if (doc == NULL)
        return;
    rs_arena_free(doc->arena);
    rs_free(doc->entries);
    rs_free(doc);
}

const struct rs_link *
rs_links_find(const struct rs_link *links, size_t n, const char *rel)
{
    const struct rs_link *best = NULL;
    uint32_t best_pri = 0;
    for (size_t i = 0; i < n; i++) {
        if (links[i].rel == NULL || strcasecmp(links[i].rel, rel) != 0)
            continue;
        uint32_t pri = links[i].pri ? links[i].pri : 999999;
        if (best == NULL || pri < best_pri) {
            best = &links[i];
            best_pri = pri;
        }
    }
    return best;
}

/* ---------------------------------------------------------------- tokens */

static const char *const cap_names[] = {
    [RS_CAP_NONE] = "",
    [RS_CAP_DESCRIPTION] = "description",
    [RS_CAP_CAPABILITYLIST] = "capabilitylist",
    [RS_CAP_RESOURCELIST] = "resourcelist",
    [RS_CAP_RESOURCEDUMP] = "resourcedump",
    [RS_CAP_RESOURCEDUMP_MANIFEST] = "resourcedump-manifest",
    [RS_CAP_CHANGELIST] = "changelist",
    [RS_CAP_CHANGEDUMP] = "changedump",
    [RS_CAP_CHANGEDUMP_MANIFEST] = "changedump-manifest",
    [RS_CAP_CHANGELIST_NOTIFICATION] = "changelist-notification",
    [RS_CAP_FRAMEWORK_NOTIFICATION] = "framework-notification",
    [RS_CAP_OTHER] = "",
};

const char *
rs_capability_name(enum rs_capability c)
{
    if ((unsigned)c >= sizeof(cap_names) / sizeof(cap_names[0]))
        return "";
    return cap_names[c];
}

enum rs_capability
rs_capability_from(const char *s, bool *alpha)
{
    if (alpha != NULL)
        *alpha = false;
    if (s == NULL || *s == '\0')
        return RS_CAP_NONE;
    for (unsigned c = RS_CAP_DESCRIPTION; c < RS_CAP_OTHER; c++)
        if (strcmp(s, cap_names[c]) == 0)
            return (enum rs_capability)c;
    if (strcmp(s, "change-notification") == 0) {
        if (alpha != NULL)
            *alpha = true;
        return RS_CAP_CHANGELIST_NOTIFICATION;
    }
    return RS_CAP_OTHER;
}

bool
rs_capability_is_notification(enum rs_capability c)
{
    return c == RS_CAP_CHANGELIST_NOTIFICATION ||
           c == RS_CAP_FRAMEWORK_NOTIFICATION;
}

static const char *const change_names[] = {
    [RS_CHANGE_NONE] = "",
    [RS_CHANGE_CREATED] = "created",
    [RS_CHANGE_UPDATED] = "updated",
    [RS_CHANGE_DELETED] = "deleted",
};

const char *
rs_change_name(enum rs_change c)
{
    if ((unsigned)c >= sizeof(change_names) / sizeof(change_names[0]))
        return "";
    return change_names[c];
}

enum rs_change
rs_change_from(const char *s)
{
    if (s == NULL)
        return RS_CHANGE_NONE;
    for (unsigned c = RS_CHANGE_CREATED; c <= RS_CHANGE_DELETED; c++)
        if (strcmp(s, change_names[c]) == 0)
            return (enum rs_change)c;
    return RS_CHANGE_NONE;
}

static const char *const freq_names[] = {
    [RS_FREQ_NONE] = "",
    [RS_FREQ_ALWAYS] = "always",
    [RS_FREQ_HOURLY] = "hourly",
    [RS_FREQ_DAILY] = "daily",
    [RS_FREQ_WEEKLY] = "weekly",
    [RS_FREQ_MONTHLY] = "monthly",
    [RS_FREQ_YEARLY] = "yearly",
    [RS_FREQ_NEVER] = "never",
};

const char *
rs_changefreq_name(enum rs_changefreq f)
{
    if ((unsigned)f >= sizeof(freq_names) / sizeof(freq_names[0]))
        return "";
    return freq_names[f];
}

enum rs_changefreq
rs_changefreq_from(const char *s)
{
    if (s == NULL)
        return RS_FREQ_NONE;
    for (unsigned f = RS_FREQ_ALWAYS; f <= RS_FREQ_NEVER; f++)
        if (strcmp(s, freq_names[f]) == 0)
            return (enum rs_changefreq)f;
    return RS_FREQ_NONE;
}

const char *
rs_root_name(enum rs_root r)
{
    switch (r) {
    case RS_ROOT_URLSET: return "urlset";
    case RS_ROOT_SITEMAPINDEX: return "sitemapindex";
    case RS_ROOT_NONE: break;
    }
    return "";
}
