/*
 * parse.c - streaming ResourceSync parser (rs_parse.h) on libxml2's SAX2 push
 * parser. It maps SAX events onto the model, one entry at a time, running
 * rs_check as it goes. Memory is bounded: the head lives in one arena, each
 * entry in another that is reset after its callback. It does no I/O: it
 * is fed bytes.
 */
#include <libxml/parser.h>
#include <libxml/parserInternals.h>
#include <libxml/xmlerror.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "arena.h"
#include "rs_alloc.h"
#include "rs_gunzip.h"
#include "rs_parse.h"

#define PARSE_PROLOGUE_MAX 512
/* Root-level problems held until the head says what the document is. */
#define PARSE_PENDING_MAX 16

enum capture {
    CAP_NONE = 0,
    CAP_LOC,
    CAP_LASTMOD,
    CAP_CHANGEFREQ,
};

/* A growable array of links whose strings live in an arena. */
struct link_vec {
    struct rs_link *v;
    size_t n, cap;
};

/* A problem found at the root before the head was checked: its level
 * depends on what the document is (rs_check.h), known only then. */
struct pending_rule {
    enum rs_rule rule;
    unsigned line;
    char msg[256];
    const char *repair;            /* a string literal, or NULL */
};

struct rs_parser {
    struct rs_parse_opts opts;
    struct rs_parser_cbs cbs;
    void *ud;
    xmlParserCtxtPtr ctx;          /* created once the prologue is in */
    /* libxml2 settles the encoding from the first chunk it sees, so the
     * opening bytes are held until the XML declaration is complete: any
     * chunking then parses the same way. */
    char prologue[PARSE_PROLOGUE_MAX];
    size_t prologue_len;

    /* Errors. The first is the verdict (err, diag); once there is one,
     * nothing more is delivered to the callbacks, but the parse may go
     * on to find more (opts.max_errors) until it is stopped. */
    int err;
    struct rs_diag diag;
    unsigned nerrors;
    unsigned max_errors;           /* >= 1 */
    bool stopped;                  /* libxml2 stopped: nothing more parsed */
    bool finished;
    bool finishing;                /* inside the terminating parse */

    size_t bytes;                  /* fed so far (inflated, if gzipped) */
    /* opts.gunzip: the first two bytes decide (a first piece of one byte
     * is held); then gz inflates what comes, or the bytes are plain. */
    enum { GZ_UNKNOWN, GZ_PLAIN, GZ_ON } gz_state;
    struct rs_gunzip *gz;
    bool gz_held;
    char gz_first;
    size_t nentries;               /* delivered so far */
    size_t nskipped;               /* opts.skip_bad_entries: skipped */
    unsigned depth;                /* current element depth; root = 1 */
    unsigned skip_depth;           /* > 0: inside an ignored subtree */
    bool seen_root, root_closed;
    unsigned root_line, md_line;   /* where head problems are blamed */

    struct rs_check check;
    unsigned check_line;           /* line to blame for check messages */
    struct pending_rule pending[PARSE_PENDING_MAX];
    unsigned npending;
    bool attr_told;                /* RS_RULE_ATTR: once per document */

    /* head */
    struct rs_arena *head_arena;
    struct rs_head head;
    struct link_vec head_links;
    bool head_delivered;

    /* entry being parsed */
    struct rs_arena *entry_arena;
    struct rs_entry entry;
    struct link_vec entry_links;
    bool in_entry;
    bool entry_has_loc;
    unsigned entry_kids;           /* bit i: kids[i] of on_entry_child seen */
    bool entry_bad;                /* a value error: neither checked nor
                                    * delivered (one error, no cascade) */
    unsigned entry_rank;           /* sitemap.xsd rank of the last child */
    const char *entry_rank_name;   /* ... and its name (static string) */
    bool entry_order_told;
    /* opts.skip_bad_entries: the first error of the entry being read
     * (entry_bad is then set too), told to on_bad_entry at its end */
    unsigned entry_fault_line;
    char entry_fault_msg[256];
    /* the latest error message rs_check reported, which a check that
     * went broken inside an entry makes the document's verdict */
    char check_msg[256];

    /* text capture for <loc>, <lastmod>, <changefreq> */
    enum capture capture;
    unsigned capture_line;
    char *text;
    size_t text_len, text_cap;
};

/* ------------------------------------------------------------------ errors */

static void
parser_halt(struct rs_parser *p)
{
    p->stopped = true;
    if (p->ctx != NULL)
        xmlStopParser(p->ctx);
}

static unsigned
parser_line(const struct rs_parser *p)
{
    if (p->ctx == NULL || p->ctx->input == NULL)
        return 0;
    return (unsigned)p->ctx->input->line;
}

/* opts.skip_bad_entries: is an error found now the entry's alone? Only
 * inside an entry, and only while the document itself is sound (after a
 * document error - a validator's max_errors - nothing is delivered
 * anyway, and errors are counted as before). */
static bool
parser_entry_scope(const struct rs_parser *p)
{
    return p->opts.skip_bad_entries && p->in_entry && p->err == 0 &&
           !p->stopped;
}

/* The entry's error: remember the first (the others would mostly repeat
 * it) and mark the entry, which is then neither checked nor delivered. */
static void
entry_fault(struct rs_parser *p, unsigned line, const char *msg)
{
    if (!p->entry_bad || p->entry_fault_msg[0] == '\0') {
        p->entry_fault_line = line;
        snprintf(p->entry_fault_msg, sizeof(p->entry_fault_msg), "%s", msg);
    }
    p->entry_bad = true;
}

/* Count an error; the first becomes the verdict. Every one goes to
 * on_error. */
static void
parser_record(struct rs_parser *p, int code, unsigned line, const char *msg)
{
    p->nerrors++;
    if (p->err == 0) {
        p->err = code;
        p->diag.code = code;
        p->diag.line = line;
        snprintf(p->diag.msg, sizeof(p->diag.msg), "%s", msg);
    }
    if (p->opts.on_error != NULL)
        p->opts.on_error(p->opts.warning_ud, line, msg);
}

/* An error after which nothing can be parsed: record it and stop. */
__attribute__((format(printf, 4, 5))) static void
parser_fail(struct rs_parser *p, int code, unsigned line, const char *fmt, ...)
{
    char msg[256];
    if (p->stopped)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    parser_record(p, code, line, msg);
    parser_halt(p);
}

/* A broken rule or value the parse can go past: record it, and stop once
 * enough errors are found. In an entry, the entry is then neither checked
 * (its other rules would only repeat this one) nor delivered. */
__attribute__((format(printf, 3, 4))) static void
parser_error(struct rs_parser *p, unsigned line, const char *fmt, ...)
{
    char msg[256];
    if (p->stopped)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (parser_entry_scope(p)) {
        entry_fault(p, line, msg);
        return;
    }
    parser_record(p, RS_EINVALID, line, msg);
    if (p->in_entry)
        p->entry_bad = true;
    if (p->nerrors >= p->max_errors)
        parser_halt(p);
}

static void
parser_warn(struct rs_parser *p, unsigned line, const char *msg)
{
    if (p->opts.on_warning != NULL)
        p->opts.on_warning(p->opts.warning_ud, line, msg);
}

static void
on_check_report(void *ud, enum rs_severity sev, const char *msg)
{
    struct rs_parser *p = ud;
    if (p->stopped)
        return;
    if (sev == RS_SEV_WARNING) {
        parser_warn(p, p->check_line, msg);
        return;
    }
    if (parser_entry_scope(p)) {
        /* held: parser_checked decides, once the check says whether it
         * can go on, whether this was the entry's error or the
         * document's (the entry limit) */
        snprintf(p->check_msg, sizeof(p->check_msg), "%s", msg);
        if (!p->check.broken)
            entry_fault(p, p->check_line, msg);
        return;
    }
    parser_record(p, RS_EINVALID, p->check_line, msg);
}

/* After a check call that started with `before` errors counted: keep the
 * check's own code when its error is the first (RS_ETOOBIG rather than
 * RS_EINVALID), and stop when the check cannot go on or enough errors
 * are found. True to go on. */
static bool
parser_checked(struct rs_parser *p, int rc, unsigned before)
{
    if (rc == 0)
        return !p->stopped;
    if (parser_entry_scope(p)) {
        /* opts.skip_bad_entries: an error of the entry alone was kept
         * for on_bad_entry; a check that cannot go on (the entry limit)
         * fails the document with its own message */
        if (!p->check.broken) {
            if (!p->entry_bad)
                entry_fault(p, p->check_line, rs_strerror(rc));
            return true;
        }
        parser_record(p, rc, p->check_line, p->check_msg[0] != '\0'
                                            ? p->check_msg : rs_strerror(rc));
        parser_halt(p);
        return false;
    }
    if (p->err == 0)
        parser_record(p, rc, p->check_line, rs_strerror(rc));
    else if (before == 0 && rc != RS_EINVALID)
        p->err = p->diag.code = rc;
    if (p->check.broken || p->nerrors >= p->max_errors)
        parser_halt(p);
    return !p->stopped;
}

/* A problem the check judges (rs_check_rule). The reader's repair (take
 * UTC, drop the link, ignore the hash...; repair says which, a string
 * literal) is applied either way: when it is an error, nothing is
 * delivered anyway. Root-level problems wait for the head. Returns true
 * when it was only a warning. */
__attribute__((format(printf, 5, 6))) static bool
parser_rule(struct rs_parser *p, enum rs_rule rule, unsigned line,
            const char *repair, const char *fmt, ...)
{
    char msg[256];
    if (p->stopped)
        return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (!p->head_delivered && p->npending < PARSE_PENDING_MAX) {
        struct pending_rule *pr = &p->pending[p->npending++];
        pr->rule = rule;
        pr->line = line;
        pr->repair = repair;
        snprintf(pr->msg, sizeof(pr->msg), "%s", msg);
        return true;
    }
    /* (more than PARSE_PENDING_MAX at the root: judged now, as strictly
     * as a notification - rs_check_rule before the head) */
    unsigned before = p->nerrors;
    p->check_line = line;
    int rc = rs_check_rule(&p->check, rule, msg, repair);
    (void)parser_checked(p, rc, before);
    return rc == 0;
}

/* A callback asked to stop: its negative value, or RS_ESTOPPED. */
static void
parser_cb_stop(struct rs_parser *p, int rc)
{
    parser_fail(p, rc < 0 ? rc : RS_ESTOPPED, parser_line(p),
                "stopped by callback (%s)", rs_strerror(rc < 0 ? rc : RS_ESTOPPED));
}

/* ------------------------------------------------------------------- links */

static struct rs_link *
link_vec_push(struct link_vec *lv)
{
    if (lv->n == lv->cap) {
        size_t ncap = lv->cap ? lv->cap * 2 : 8;
        struct rs_link *nv = rs_realloc(lv->v, ncap * sizeof(*nv));
        if (nv == NULL)
            return NULL;
        lv->v = nv;
        lv->cap = ncap;
    }
    struct rs_link *l = &lv->v[lv->n++];
    rs_link_init(l);
    return l;
}

/* --------------------------------------------------------------- attributes */

/* SAX2 hands attributes as 5-tuples: localname, prefix, URI, value, end. */
struct attr {
    const char *name;
    const char *uri;
    const char *value;
    size_t len;
};

static struct attr
attr_at(const xmlChar **attrs, int i)
{
    struct attr a;
    a.name = (const char *)attrs[i * 5];
    a.uri = (const char *)attrs[i * 5 + 2];
    a.value = (const char *)attrs[i * 5 + 3];
    a.len = (size_t)(attrs[i * 5 + 4] - attrs[i * 5 + 3]);
    return a;
}

static const char *
attr_dup(struct rs_parser *p, struct rs_arena *ar, const struct attr *a)
{
    const char *s = rs_arena_strndup(ar, a->value, a->len);
    if (s == NULL)
        parser_fail(p, RS_ENOMEM, 0, "out of memory");
    return s;
}

static int
attr_show(const struct attr *a, size_t max)
{
    return (int)(a->len > max ? max : a->len);
}

/* Core 7: attributes that communities add "must use an XML Namespace
 * other than that of ResourceSync"; one without any namespace that
 * ResourceSync does not define (the 2013 drafts' modified=, etag=) is
 * ignored. Told once per document. */
static void
attr_unknown(struct rs_parser *p, const char *elem, const struct attr *a)
{
    if (p->attr_told)
        return;
    p->attr_told = true;
    (void)parser_rule(p, RS_RULE_ATTR, parser_line(p), "a reader ignores it",
                      "<%s> attribute %.40s=\"%.*s\" is not ResourceSync's "
                      "and has no namespace (core 7: community attributes "
                      "must have one)", elem, a->name, attr_show(a, 40),
                      a->value);
}

/* A datetime attribute. Time attributes of <rs:md> (at, completed, from,
 * until, datetime) are expected in the form core 7 recommends. */
static void
attr_time(struct rs_parser *p, const char *elem, const struct attr *a,
          bool recommended, rs_time_t *out)
{
    unsigned form = 0;
    if (rs_time_parse_ex(a->value, a->len, RS_TIME_ZONELESS, out, &form) != 0) {
        parser_error(p, parser_line(p), "<%s> %s=\"%.*s\" is not a W3C "
                     "datetime", elem, a->name, attr_show(a, 64), a->value);
        return;
    }
    if (form & RS_TIME_FORM_ZONELESS)
        (void)parser_rule(p, RS_RULE_TIME_ZONE, parser_line(p),
                          "a reader takes it as UTC",
                          "<%s> %s=\"%.*s\" has no time zone (W3C Datetime "
                          "needs one with a time)", elem, a->name,
                          attr_show(a, 64), a->value);
    else if (recommended && !(form & RS_TIME_FORM_FULL_UTC))
        (void)parser_rule(p, RS_RULE_TIME_FORM, parser_line(p), NULL,
                          "<%s> %s=\"%.*s\" is not in the form core 7 "
                          "recommends, YYYY-MM-DDThh:mm:ss[.s]Z", elem,
                          a->name, attr_show(a, 64), a->value);
}

static void
attr_hash(struct rs_parser *p, const char *elem, const struct attr *a,
          struct rs_hashes *out)
{
    if (rs_hashes_parse(a->value, a->len, out) == 0)
        return;
    (void)parser_rule(p, RS_RULE_HASH, parser_line(p), "a reader ignores it",
                      "<%s> hash=\"%.*s\" is not a list of algorithm:"
                      "hexdigest with the algorithm's digest length (core 7)",
                      elem, attr_show(a, 80), a->value);
}

/* A decimal integer in [min, max], optional surrounding whitespace. */
static bool
attr_uint(const struct attr *a, int64_t min, int64_t max, int64_t *out)
{
    size_t i = 0, n = a->len;
    while (i < n && (a->value[i] == ' ' || a->value[i] == '\t' ||
                     a->value[i] == '\n' || a->value[i] == '\r'))
        i++;
    while (n > i && (a->value[n - 1] == ' ' || a->value[n - 1] == '\t' ||
                     a->value[n - 1] == '\n' || a->value[n - 1] == '\r'))
        n--;
    if (i == n || n - i > 18)
        return false;
    int64_t v = 0;
    for (; i < n; i++) {
        if (a->value[i] < '0' || a->value[i] > '9')
            return false;
        v = v * 10 + (a->value[i] - '0');
    }
    if (v < min || v > max)
        return false;
    *out = v;
    return true;
}

static void
attr_length(struct rs_parser *p, const char *elem, const struct attr *a,
            int64_t *out)
{
    if (!attr_uint(a, 0, INT64_MAX, out))
        parser_error(p, parser_line(p), "<%s> length=\"%.*s\" is not a "
                     "non-negative integer", elem, attr_show(a, 32), a->value);
}

/* "changelistindex" and friends on an index root: what the Source meant
 * is <capability> (the check says it is not the spec's spelling). */
static void
md_index_alias(struct rs_md *md)
{
    static const char suffix[] = "index";
    const char *v = md->capability_other;
    size_t n = v != NULL ? strlen(v) : 0;
    char base[32];
    if (n <= sizeof(suffix) - 1 || n - (sizeof(suffix) - 1) >= sizeof(base) ||
        strcmp(v + n - (sizeof(suffix) - 1), suffix) != 0)
        return;
    memcpy(base, v, n - (sizeof(suffix) - 1));
    base[n - (sizeof(suffix) - 1)] = '\0';
    enum rs_capability c = rs_capability_from(base, NULL);
    if (c == RS_CAP_RESOURCELIST || c == RS_CAP_CHANGELIST ||
        c == RS_CAP_RESOURCEDUMP || c == RS_CAP_CHANGEDUMP ||
        c == RS_CAP_DESCRIPTION) {
        md->capability = c;
        md->capability_other = NULL;
        md->capability_index_alias = true;
    }
}

/* Fill md from the attributes of an <rs:md>. Only un-namespaced attributes
 * are ResourceSync's; others belong to communities and are ignored. A bad
 * value is reported and the attribute left absent; the others are read. */
static void
parse_md(struct rs_parser *p, struct rs_arena *ar, struct rs_md *md,
         int nattrs, const xmlChar **attrs)
{
    for (int i = 0; i < nattrs && !p->stopped; i++) {
        struct attr a = attr_at(attrs, i);
        if (a.uri != NULL)
            continue;
        const char *n = a.name;
        if (strcmp(n, "capability") == 0) {
            const char *v = attr_dup(p, ar, &a);
            if (v == NULL)
                return;
            md->capability = rs_capability_from(v, &md->capability_alpha);
            if (md->capability == RS_CAP_OTHER)
                md->capability_other = v;
        } else if (strcmp(n, "change") == 0) {
            char v[16];
            size_t len = a.len < sizeof(v) - 1 ? a.len : sizeof(v) - 1;
            memcpy(v, a.value, len);
            v[len] = '\0';
            md->change = a.len < sizeof(v) ? rs_change_from(v) : RS_CHANGE_NONE;
            if (md->change == RS_CHANGE_NONE)
                parser_error(p, parser_line(p), "<rs:md> change=\"%.*s\" is "
                             "not created, updated or deleted",
                             attr_show(&a, 32), a.value);
        } else if (strcmp(n, "datetime") == 0) {
            attr_time(p, "rs:md", &a, true, &md->datetime);
        } else if (strcmp(n, "at") == 0) {
            attr_time(p, "rs:md", &a, true, &md->at);
        } else if (strcmp(n, "completed") == 0) {
            attr_time(p, "rs:md", &a, true, &md->completed);
        } else if (strcmp(n, "from") == 0) {
            attr_time(p, "rs:md", &a, true, &md->from);
        } else if (strcmp(n, "until") == 0) {
            attr_time(p, "rs:md", &a, true, &md->until);
        } else if (strcmp(n, "hash") == 0) {
            attr_hash(p, "rs:md", &a, &md->hash);
        } else if (strcmp(n, "length") == 0) {
            attr_length(p, "rs:md", &a, &md->length);
        } else if (strcmp(n, "type") == 0) {
            if ((md->type = attr_dup(p, ar, &a)) == NULL)
                return;
        } else if (strcmp(n, "encoding") == 0) {
            if ((md->encoding = attr_dup(p, ar, &a)) == NULL)
                return;
        } else if (strcmp(n, "path") == 0) {
            if ((md->path = attr_dup(p, ar, &a)) == NULL)
                return;
        } else {
            attr_unknown(p, "rs:md", &a);
        }
    }
}

/* An <rs:ln>. One without rel or href cannot be followed: the reader
 * drops it (RS_RULE_LINK), so no link handed over lacks either. */
static void
parse_ln(struct rs_parser *p, struct rs_arena *ar, struct link_vec *lv,
         int nattrs, const xmlChar **attrs)
{
    if (lv->n >= RS_PARSE_MAX_LINKS) {
        parser_fail(p, RS_ETOOBIG, parser_line(p),
                    "more than %d <rs:ln> elements in one place",
                    RS_PARSE_MAX_LINKS);
        return;
    }
    struct rs_link *l = link_vec_push(lv);
    if (l == NULL) {
        parser_fail(p, RS_ENOMEM, 0, "out of memory");
        return;
    }
    for (int i = 0; i < nattrs && !p->stopped; i++) {
        struct attr a = attr_at(attrs, i);
        if (a.uri != NULL)
            continue;
        const char *n = a.name;
        if (strcmp(n, "rel") == 0) {
            if ((l->rel = attr_dup(p, ar, &a)) == NULL)
                return;
        } else if (strcmp(n, "href") == 0) {
            if ((l->href = attr_dup(p, ar, &a)) == NULL)
                return;
        } else if (strcmp(n, "pri") == 0) {
            int64_t v;
            if (attr_uint(&a, 1, 999999, &v))
                l->pri = (uint32_t)v;
            else
                parser_error(p, parser_line(p), "<rs:ln> pri=\"%.*s\" is not "
                             "an integer in 1..999999", attr_show(&a, 32),
                             a.value);
        } else if (strcmp(n, "modified") == 0) {
            attr_time(p, "rs:ln", &a, false, &l->modified);
        } else if (strcmp(n, "hash") == 0) {
            attr_hash(p, "rs:ln", &a, &l->hash);
        } else if (strcmp(n, "length") == 0) {
            attr_length(p, "rs:ln", &a, &l->length);
        } else if (strcmp(n, "type") == 0) {
            if ((l->type = attr_dup(p, ar, &a)) == NULL)
                return;
        } else if (strcmp(n, "encoding") == 0) {
            if ((l->encoding = attr_dup(p, ar, &a)) == NULL)
                return;
        } else if (strcmp(n, "path") == 0) {
            if ((l->path = attr_dup(p, ar, &a)) == NULL)
                return;
        } else {
            attr_unknown(p, "rs:ln", &a);
        }
    }
    if (p->stopped)
        return;
    bool rel = l->rel != NULL && l->rel[0] != '\0';
    bool href = l->href != NULL && l->href[0] != '\0';
    if (rel && href)
        return;
    if (!rel && !href)
        (void)parser_rule(p, RS_RULE_LINK, parser_line(p),
                          "a reader ignores it", "empty <rs:ln/>: no rel and "
                          "no href attribute (core 7: both are mandatory)");
    else if (!rel)
        (void)parser_rule(p, RS_RULE_LINK, parser_line(p),
                          "a reader ignores it", "<rs:ln href=\"%.100s\"> "
                          "without rel attribute (core 7: rel and href are "
                          "mandatory)", l->href);
    else
        (void)parser_rule(p, RS_RULE_LINK, parser_line(p),
                          "a reader ignores it", "<rs:ln rel=\"%.60s\"> "
                          "without href attribute (core 7: rel and href are "
                          "mandatory)", l->rel);
    lv->n--;
}

/* ------------------------------------------------------------ head & entry */

static bool
is_ns(const xmlChar *uri, const char *ns)
{
    return uri != NULL && strcmp((const char *)uri, ns) == 0;
}

/* Run the head rules, judge the root problems held for them, and hand the
 * head to the caller, once. False when the parse stopped. */
static bool
head_deliver(struct rs_parser *p)
{
    if (p->head_delivered)
        return !p->stopped;
    p->head_delivered = true;
    p->check_line = p->md_line ? p->md_line : p->root_line;
    p->head.links = p->head_links.v;
    p->head.nlinks = p->head_links.n;
    unsigned before = p->nerrors;
    if (!parser_checked(p, rs_check_head(&p->check, &p->head), before))
        return false;
    for (unsigned i = 0; i < p->npending; i++) {
        const struct pending_rule *pr = &p->pending[i];
        before = p->nerrors;
        p->check_line = pr->line;
        if (!parser_checked(p, rs_check_rule(&p->check, pr->rule, pr->msg,
                                             pr->repair),
                            before))
            return false;
    }
    p->npending = 0;
    if (p->err == 0 && p->cbs.on_head != NULL) {
        int rc = p->cbs.on_head(p->ud, &p->head);
        if (rc != 0) {
            parser_cb_stop(p, rc);
            return false;
        }
    }
    return true;
}

static void
entry_begin(struct rs_parser *p)
{
    rs_arena_reset(p->entry_arena);
    rs_entry_init(&p->entry);
    p->entry.line = parser_line(p);
    p->entry_links.n = 0;
    p->entry_has_loc = false;
    p->entry_kids = 0;
    p->entry_bad = false;
    p->entry_rank = 0;
    p->entry_rank_name = NULL;
    p->entry_order_told = false;
    p->entry_fault_line = 0;
    p->entry_fault_msg[0] = '\0';
    p->check_msg[0] = '\0';
    p->in_entry = true;
}

/* opts.skip_bad_entries: the entry just read is skipped; say so. */
static void
entry_skip(struct rs_parser *p)
{
    p->nskipped++;
    if (p->opts.on_bad_entry == NULL)
        return;
    int rc = p->opts.on_bad_entry(p->opts.warning_ud, &p->entry,
                                  p->entry_fault_line, p->entry_fault_msg);
    if (rc != 0)
        parser_cb_stop(p, rc);
}

static void
entry_end(struct rs_parser *p)
{
    p->entry.links = p->entry_links.v;
    p->entry.nlinks = p->entry_links.n;
    if (!p->entry_bad) {
        /* still in the entry: rs_check_entry's errors are the entry's
         * (parser_entry_scope) */
        p->check_line = p->entry.line;
        unsigned before = p->nerrors;
        if (!parser_checked(p, rs_check_entry(&p->check, &p->entry),
                            before)) {
            p->in_entry = false;
            return;
        }
    }
    bool skip = p->entry_bad && parser_entry_scope(p);
    p->in_entry = false;
    if (skip) {
        entry_skip(p);
        return;
    }
    if (p->entry_bad || p->err != 0)
        return;
    p->nentries++;
    if (p->cbs.on_entry != NULL) {
        int rc = p->cbs.on_entry(p->ud, &p->entry);
        if (rc != 0)
            parser_cb_stop(p, rc);
    }
}

static bool
is_xml_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Finish a captured text element: <loc>, <lastmod> or <changefreq>. */
static void
capture_end(struct rs_parser *p)
{
    const char *s = p->text;
    size_t n = p->text_len;
    unsigned form = 0;
    while (n > 0 && is_xml_space(*s)) {
        s++;
        n--;
    }
    while (n > 0 && is_xml_space(s[n - 1]))
        n--;

    enum capture c = p->capture;
    p->capture = CAP_NONE;
    switch (c) {
    case CAP_LOC:
        if (p->entry_has_loc) {
            parser_error(p, p->capture_line, "more than one <loc> in an "
                         "entry");
            return;
        }
        p->entry_has_loc = true;
        if ((p->entry.loc = rs_arena_strndup(p->entry_arena, s, n)) == NULL) {
            parser_fail(p, RS_ENOMEM, 0, "out of memory");
            return;
        }
        /* xs:anyURI collapses the whitespace, so the URI is clear; but
         * the Sitemaps protocol's URL begins with its scheme, and a
         * reader that does not trim gets another URL. */
        if (n > 0 && n != p->text_len)
            (void)parser_rule(p, RS_RULE_LOC_SPACE, p->capture_line,
                              "a reader trims it", "<loc> \"%.100s\" has "
                              "whitespace around the URL (the Sitemaps "
                              "protocol: a URL begins with its scheme)",
                              p->entry.loc);
        break;
    case CAP_LASTMOD:
        if (rs_time_parse_ex(s, n, RS_TIME_ZONELESS, &p->entry.lastmod,
                             &form) != 0) {
            parser_error(p, p->capture_line, "<lastmod>%.*s</lastmod> is not "
                         "a W3C datetime", (int)(n > 64 ? 64 : n), s);
            return;
        }
        if (form & RS_TIME_FORM_ZONELESS)
            (void)parser_rule(p, RS_RULE_TIME_ZONE, p->capture_line,
                              "a reader takes it as UTC",
                              "<lastmod>%.*s</lastmod> has no time zone (W3C "
                              "Datetime needs one with a time)",
                              (int)(n > 64 ? 64 : n), s);
        break;
    case CAP_CHANGEFREQ: {
        char v[16];
        if (n < sizeof(v)) {
            memcpy(v, s, n);
            v[n] = '\0';
            p->entry.changefreq = rs_changefreq_from(v);
        }
        if (p->entry.changefreq == RS_FREQ_NONE)
            (void)parser_rule(p, RS_RULE_CHANGEFREQ, p->capture_line,
                              "a reader ignores it", "<changefreq> \"%.*s\" "
                              "is not a Sitemap change frequency (Sitemaps "
                              "protocol)", (int)(n > 32 ? 32 : n), s);
        break;
    }
    case CAP_NONE:
        break;
    }
}

/* ------------------------------------------------------------ SAX handlers */

static void
on_root_start(struct rs_parser *p, const char *name, const xmlChar *uri,
              int nattrs, const xmlChar **attrs)
{
    bool urlset = strcmp(name, "urlset") == 0;
    bool index = strcmp(name, "sitemapindex") == 0;
    p->seen_root = true;
    p->root_line = parser_line(p);
    if (!urlset && !index) {
        parser_fail(p, RS_EINVALID, parser_line(p),
                    "root element <%s> is not <urlset> or <sitemapindex>",
                    name);
        return;
    }
    if (!is_ns(uri, RS_NS_SITEMAP)) {
        parser_fail(p, RS_EINVALID, parser_line(p),
                    "root <%s> is not in the Sitemap namespace %s (found %s)",
                    name, RS_NS_SITEMAP, uri ? (const char *)uri : "none");
        return;
    }
    p->head.root = urlset ? RS_ROOT_URLSET : RS_ROOT_SITEMAPINDEX;
    for (int i = 0; i < nattrs; i++) {
        struct attr a = attr_at(attrs, i);
        if (!is_ns((const xmlChar *)a.uri, RS_NS_HUB))
            continue;
        const char **dst = strcmp(a.name, "id") == 0      ? &p->head.hub_id
                           : strcmp(a.name, "topic") == 0 ? &p->head.hub_topic
                                                          : NULL;
        if (dst != NULL && (*dst = attr_dup(p, p->head_arena, &a)) == NULL)
            return;
    }
}

static void
on_root_child(struct rs_parser *p, const char *name, const xmlChar *uri,
              int nattrs, const xmlChar **attrs)
{
    if (is_ns(uri, RS_NS_RS)) {
        if (strcmp(name, "md") == 0) {
            p->skip_depth = p->depth;
            if (p->head.has_md) {
                parser_error(p, parser_line(p), "more than one root <rs:md>");
                return;
            }
            if (p->head_delivered) {
                parser_error(p, parser_line(p),
                             "root <rs:md> must come before the entries");
                return;
            }
            p->head.has_md = true;
            p->md_line = parser_line(p);
            parse_md(p, p->head_arena, &p->head.md, nattrs, attrs);
            if (p->head.root == RS_ROOT_SITEMAPINDEX &&
                p->head.md.capability == RS_CAP_OTHER)
                md_index_alias(&p->head.md);
        } else if (strcmp(name, "ln") == 0) {
            p->skip_depth = p->depth;
            /* Links after the entries (rel="next" at the end of a page)
             * still belong to the head; on_end sees them. */
            parse_ln(p, p->head_arena, &p->head_links, nattrs, attrs);
            p->head.links = p->head_links.v;
            p->head.nlinks = p->head_links.n;
        } else {
            p->skip_depth = p->depth;
        }
        return;
    }
    if (is_ns(uri, RS_NS_SITEMAP)) {
        bool url = strcmp(name, "url") == 0;
        bool sitemap = strcmp(name, "sitemap") == 0;
        if (url || sitemap) {
            if ((p->head.root == RS_ROOT_URLSET) != url) {
                parser_fail(p, RS_EINVALID, parser_line(p),
                            "<%s> inside <%s>; expected <%s>", name,
                            rs_root_name(p->head.root), url ? "sitemap" : "url");
                return;
            }
            if (!head_deliver(p))
                return;
            entry_begin(p);
            return;
        }
    }
    p->skip_depth = p->depth;   /* foreign or unknown: ignore the subtree */
}

/* The Sitemaps schema (sitemap.xsd, siteindex.xsd) makes an entry a
 * sequence: loc, lastmod, changefreq, priority, then elements of other
 * namespaces (rs:md, rs:ln). Told once per entry. */
static void
entry_order(struct rs_parser *p, unsigned rank, const char *name)
{
    if (rank < p->entry_rank && !p->entry_order_told) {
        p->entry_order_told = true;
        (void)parser_rule(p, RS_RULE_ENTRY_ORDER, parser_line(p),
                          "a reader reads it all the same",
                          "%s after %s in an entry: the Sitemaps schema "
                          "orders loc, lastmod, changefreq, priority, then "
                          "other namespaces (rs:md, rs:ln)", name,
                          p->entry_rank_name);
    }
    if (rank > p->entry_rank) {
        p->entry_rank = rank;
        p->entry_rank_name = name;
    }
}

static void
on_entry_child(struct rs_parser *p, const char *name, const xmlChar *uri,
               int nattrs, const xmlChar **attrs)
{
    if (is_ns(uri, RS_NS_SITEMAP)) {
        static const struct {
            const char *name, *tag;
            enum capture cap;
        } kids[] = {
            { "loc", "<loc>", CAP_LOC },
            { "lastmod", "<lastmod>", CAP_LASTMOD },
            { "changefreq", "<changefreq>", CAP_CHANGEFREQ },
            { "priority", "<priority>", CAP_NONE },
        };
        for (unsigned i = 0; i < sizeof(kids) / sizeof(kids[0]); i++) {
            if (strcmp(name, kids[i].name) != 0)
                continue;
            entry_order(p, i + 1, kids[i].tag);
            /* the Sitemaps schema: each at most once; a reader would keep
             * one of two lastmods and not know which the Source meant
             * (<loc> is told by capture_end) */
            if (i > 0 && (p->entry_kids & (1u << i)) != 0) {
                parser_error(p, parser_line(p), "more than one %s in an "
                             "entry", kids[i].tag);
                return;
            }
            p->entry_kids |= 1u << i;
            if (kids[i].cap == CAP_NONE)
                break;
            p->capture = kids[i].cap;
            p->capture_line = parser_line(p);
            p->text_len = 0;
            return;
        }
    } else if (is_ns(uri, RS_NS_RS)) {
        if (strcmp(name, "md") == 0) {
            entry_order(p, 5, "<rs:md>");
            p->skip_depth = p->depth;
            if (p->entry.has_md) {
                parser_error(p, parser_line(p),
                             "more than one <rs:md> in an entry");
                return;
            }
            p->entry.has_md = true;
            parse_md(p, p->entry_arena, &p->entry.md, nattrs, attrs);
            return;
        }
        if (strcmp(name, "ln") == 0) {
            entry_order(p, 5, "<rs:ln>");
            p->skip_depth = p->depth;
            parse_ln(p, p->entry_arena, &p->entry_links, nattrs, attrs);
            return;
        }
    } else {
        entry_order(p, 5, "an element of another namespace");
    }
    p->skip_depth = p->depth;
}

static void
on_start_element(void *ctx, const xmlChar *localname, const xmlChar *prefix,
                 const xmlChar *uri, int nb_namespaces,
                 const xmlChar **namespaces, int nb_attributes,
                 int nb_defaulted, const xmlChar **attrs)
{
    (void)prefix;
    (void)nb_namespaces;
    (void)namespaces;
    (void)nb_defaulted;
    struct rs_parser *p = ((xmlParserCtxtPtr)ctx)->_private;
    if (p->stopped)
        return;
    p->depth++;
    if (p->depth > RS_PARSE_MAX_DEPTH) {
        parser_fail(p, RS_EINVALID, parser_line(p),
                    "elements nested deeper than %d levels",
                    RS_PARSE_MAX_DEPTH);
        return;
    }
    if (p->skip_depth != 0)
        return;
    if (p->capture != CAP_NONE) {
        /* markup inside <loc> and friends: not a plain value */
        parser_error(p, parser_line(p), "element <%s> inside a text element",
                     localname);
        p->skip_depth = p->depth;
        return;
    }
    const char *name = (const char *)localname;
    switch (p->depth) {
    case 1:
        on_root_start(p, name, uri, nb_attributes, attrs);
        break;
    case 2:
        on_root_child(p, name, uri, nb_attributes, attrs);
        break;
    case 3:
        if (p->in_entry)
            on_entry_child(p, name, uri, nb_attributes, attrs);
        else
            p->skip_depth = p->depth;
        break;
    default:
        p->skip_depth = p->depth;
        break;
    }
}

static void
on_end_element(void *ctx, const xmlChar *localname, const xmlChar *prefix,
               const xmlChar *uri)
{
    (void)localname;
    (void)prefix;
    (void)uri;
    struct rs_parser *p = ((xmlParserCtxtPtr)ctx)->_private;
    if (p->stopped)
        return;
    unsigned depth = p->depth--;
    if (p->skip_depth != 0) {
        if (depth == p->skip_depth)
            p->skip_depth = 0;
        return;
    }
    if (depth == 3 && p->capture != CAP_NONE)
        capture_end(p);
    else if (depth == 2 && p->in_entry)
        entry_end(p);
    else if (depth == 1)
        p->root_closed = true;
}

static void
on_characters(void *ctx, const xmlChar *ch, int len)
{
    struct rs_parser *p = ((xmlParserCtxtPtr)ctx)->_private;
    if (p->capture == CAP_NONE || p->stopped || p->skip_depth != 0 ||
        len <= 0)
        return;                 /* libxml2 may report 0 bytes; no buffer yet */
    size_t n = (size_t)len;
    if (p->text_len + n > RS_PARSE_MAX_TEXT) {
        parser_fail(p, RS_ETOOBIG, p->capture_line,
                    "text value longer than %d bytes", RS_PARSE_MAX_TEXT);
        return;
    }
    if (p->text_len + n > p->text_cap) {
        size_t ncap = p->text_cap ? p->text_cap : 256;
        while (ncap < p->text_len + n)
            ncap *= 2;
        char *nt = rs_realloc(p->text, ncap);
        if (nt == NULL) {
            parser_fail(p, RS_ENOMEM, 0, "out of memory");
            return;
        }
        p->text = nt;
        p->text_cap = ncap;
    }
    memcpy(p->text + p->text_len, ch, n);
    p->text_len += n;
}

/* Any DOCTYPE is refused before its internal subset is read, so entity
 * declarations (XXE, billion laughs) never reach the parser's tables. */
static void
on_internal_subset(void *ctx, const xmlChar *name, const xmlChar *eid,
                   const xmlChar *sid)
{
    (void)name;
    (void)eid;
    (void)sid;
    struct rs_parser *p = ((xmlParserCtxtPtr)ctx)->_private;
    parser_fail(p, RS_EINVALID, parser_line(p),
                "DOCTYPE declarations are not allowed (no DTD, no entities)");
}

/* Without a DTD only the five predefined entities exist: any other
 * reference makes the document not well-formed (XML 1.0, WFC: Entity
 * Declared). */
static xmlEntityPtr
on_get_entity(void *ctx, const xmlChar *name)
{
    struct rs_parser *p = ((xmlParserCtxtPtr)ctx)->_private;
    parser_fail(p, RS_EPARSE, parser_line(p),
                "not well-formed XML: undefined entity &%s;", name);
    return NULL;
}

static void
on_xml_error(void *ctx, xmlErrorPtr e)
{
    struct rs_parser *p = ((xmlParserCtxtPtr)ctx)->_private;
    if (e == NULL || e->level < XML_ERR_ERROR)
        return;
    /* libxml2 words a cut-off document in many ways ("Extra content",
     * "Premature end"); say what happened. */
    if (p->finishing && p->seen_root && !p->root_closed &&
        (e->code == XML_ERR_TAG_NOT_FINISHED ||
         e->code == XML_ERR_DOCUMENT_END ||
         e->code == XML_ERR_LTSLASH_REQUIRED)) {
        parser_fail(p, RS_EPARSE, (unsigned)(e->line > 0 ? e->line : 0),
                    "not well-formed XML: document is truncated (the root "
                    "element is never closed)");
        return;
    }
    char msg[200];
    snprintf(msg, sizeof(msg), "%s", e->message ? e->message : "XML error");
    /* libxml2 messages may span lines ("...encoding !\nBytes: 0xE9"): a
     * diagnostic is one line. */
    for (char *c = msg; *c; c++)
        if ((unsigned char)*c < 0x20)
            *c = ' ';
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == ' ')
        msg[--n] = '\0';
    parser_fail(p, RS_EPARSE, (unsigned)(e->line > 0 ? e->line : 0),
                "not well-formed XML: %s", msg);
}

/* Set once, at compile time: every parser, on any thread, reads it (a
 * handler written at each parser's creation was a data race between two
 * threads parsing at once, however equal the values). libxml2 copies it
 * into each context. */
static xmlSAXHandler parser_sax = {
    .initialized = XML_SAX2_MAGIC,
    .startElementNs = on_start_element,
    .endElementNs = on_end_element,
    .characters = on_characters,
    .cdataBlock = on_characters,
    .internalSubset = on_internal_subset,
    .getEntity = on_get_entity,
    .serror = on_xml_error,
};

/* --------------------------------------------------------------- lifecycle */

struct rs_parser *
rs_parser_new(const struct rs_parse_opts *opts, const struct rs_parser_cbs *cbs,
              void *ud)
{
    /* libxml2 sets up its globals (the mutex that guards the state it
     * gives each new thread among them) on first use, unguarded: done
     * here, on whichever thread makes the first parser (the daemons' loop
     * thread), before another thread can race to it. Once set up, a
     * no-op. parse/threads under TSan saw the race without it. */
    xmlInitParser();
    struct rs_parser *p = rs_calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    if (opts != NULL)
        p->opts = *opts;
    if (p->opts.max_bytes == 0)
        p->opts.max_bytes = RS_MAX_DOC_BYTES;
    if (cbs != NULL)
        p->cbs = *cbs;
    p->ud = ud;
    p->head_arena = rs_arena_new(4096);
    p->entry_arena = rs_arena_new(4096);
    if (p->head_arena == NULL || p->entry_arena == NULL) {
        rs_parser_free(p);
        return NULL;
    }
    rs_head_init(&p->head);
    p->max_errors = p->opts.max_errors > 1 ? p->opts.max_errors : 1;
    rs_check_init(&p->check,
                  p->opts.strict ? RS_CHECK_STRICT : p->opts.mode,
                  p->opts.max_entries, on_check_report, p);
    if (p->opts.unique && rs_check_unique(&p->check) != 0) {
        rs_parser_free(p);
        return NULL;
    }
    return p;
}

void
rs_parser_free(struct rs_parser *p)
{
    if (p == NULL)
        return;
    if (p->ctx != NULL)
        xmlFreeParserCtxt(p->ctx);
    rs_gunzip_free(p->gz);
    rs_arena_free(p->head_arena);
    rs_arena_free(p->entry_arena);
    rs_free(p->head_links.v);
    rs_free(p->entry_links.v);
    rs_free(p->text);
    rs_check_cleanup(&p->check);
    rs_free(p);
}

/* Is the held prologue enough for libxml2 to settle the encoding: the whole
 * XML declaration, or 4 bytes of a document without one? */
static bool
prologue_complete(const struct rs_parser *p)
{
    const char *b = p->prologue;
    size_t n = p->prologue_len;
    if (n >= PARSE_PROLOGUE_MAX)
        return true;
    if (n >= 3 && memcmp(b, "\xEF\xBB\xBF", 3) == 0) {
        b += 3;
        n -= 3;
    }
    if (n < 5)
        return false;
    if (memcmp(b, "<?xml", 5) != 0)
        return true;
    for (size_t i = 5; i + 1 < n; i++)
        if (b[i] == '?' && b[i + 1] == '>')
            return true;
    return false;
}

/* Does the document start as XML 1.0 (appendix F) says one in UTF-16 or
 * UCS-4 does: a byte order mark, or "<" (and "?") in two or four bytes? */
static bool
prologue_is_wide(const unsigned char *b, size_t n)
{
    static const unsigned char lt[][4] = {
        { 0x00, 0x00, 0x00, 0x3C }, { 0x3C, 0x00, 0x00, 0x00 },
        { 0x00, 0x00, 0x3C, 0x00 }, { 0x00, 0x3C, 0x00, 0x00 },
        { 0x00, 0x3C, 0x00, 0x3F }, { 0x3C, 0x00, 0x3F, 0x00 },
        { 0x00, 0x00, 0xFE, 0xFF },
    };
    if (n >= 2 && ((b[0] == 0xFE && b[1] == 0xFF) || (b[0] == 0xFF && b[1] == 0xFE)))
        return true;
    for (size_t i = 0; n >= 4 && i < sizeof(lt) / sizeof(lt[0]); i++)
        if (memcmp(b, lt[i], 4) == 0)
            return true;
    return false;
}

/* A NUL is no XML character (XML 1.0 2.2), whatever else is wrong: say so
 * and where, rather than guess an encoding. offset counts from the first
 * byte of the document. */
static void
parser_fail_nul(struct rs_parser *p, unsigned line, size_t offset)
{
    parser_fail(p, RS_EPARSE, line, "a NUL byte at offset %zu: not XML text",
                offset);
}

/* Sitemaps (and so ResourceSync) documents "must be UTF-8 encoded". We
 * check the declaration ourselves and tell libxml2 to ignore it, so no
 * iconv conversion path (with its own error channel and its own chunking
 * behaviour) is ever taken; invalid bytes then fail as not proper UTF-8.
 * A UTF-16 byte order mark or a NUL byte cannot start a UTF-8 document, and
 * refusing them keeps libxml2 from auto-detecting another encoding. */
static int
prologue_check_encoding(struct rs_parser *p)
{
    const char *b = p->prologue;
    size_t n = p->prologue_len;
    if (prologue_is_wide((const unsigned char *)b, n)) {
        parser_fail(p, RS_EINVALID, 1, "documents must be UTF-8 (Sitemaps "
                    "protocol); this one is UTF-16 or UCS-4");
        return p->err;
    }
    /* A dump's package given where a document is expected (a
     * <loc> of a Resource Dump, rsdoc on a .zip): say what it is. */
    if (n >= 4 && memcmp(b, "PK\x03\x04", 4) == 0) {
        parser_fail(p, RS_EPARSE, 1, "a ZIP package, not an XML document "
                    "(a dump's package: its manifest.xml inside is the "
                    "document)");
        return p->err;
    }
    const char *nul = memchr(b, '\0', n);
    if (nul != NULL) {
        unsigned line = 1;
        for (const char *c = b; c < nul; c++)
            line += *c == '\n';
        parser_fail_nul(p, line, (size_t)(nul - b));
        return p->err;
    }
    if (n >= 3 && memcmp(b, "\xEF\xBB\xBF", 3) == 0) {
        b += 3;
        n -= 3;
    }
    if (n < 5 || memcmp(b, "<?xml", 5) != 0)
        return 0;
    const char *end = NULL;
    for (size_t i = 5; i + 1 < n; i++) {
        if (b[i] == '?' && b[i + 1] == '>') {
            end = b + i;
            break;
        }
    }
    if (end == NULL)
        return 0;   /* an unterminated declaration: libxml2 says so */
    const char *e = b + 5;
    for (; e + 8 <= end; e++)
        if (memcmp(e, "encoding", 8) == 0)
            break;
    if (e + 8 > end)
        return 0;
    e += 8;
    while (e < end && (*e == ' ' || *e == '\t' || *e == '\r' || *e == '\n' || *e == '='))
        e++;
    if (e >= end || (*e != '"' && *e != '\''))
        return 0;
    char q = *e++;
    const char *v = e;
    while (e < end && *e != q)
        e++;
    size_t vlen = (size_t)(e - v);
    static const char *const ok[] = { "utf-8", "utf8", "us-ascii", "ascii" };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (vlen == strlen(ok[i]) && strncasecmp(v, ok[i], vlen) == 0)
            return 0;
    parser_fail(p, RS_EINVALID, 1, "documents must be UTF-8 (Sitemaps "
                "protocol); this one declares encoding \"%.*s\"",
                (int)(vlen > 32 ? 32 : vlen), v);
    return p->err;
}

static int
parser_ctx_create(struct rs_parser *p)
{
    if (prologue_check_encoding(p) != 0)
        return p->err;
    p->ctx = xmlCreatePushParserCtxt(&parser_sax, NULL, p->prologue,
                                     (int)p->prologue_len, NULL);
    if (p->ctx == NULL) {
        parser_fail(p, RS_ENOMEM, 0, "out of memory");
        return p->err;
    }
    p->ctx->_private = p;
    /* NOENT makes libxml2 hand over attribute values with the predefined
     * entities decoded (without it "&amp;" arrives as "&#38;"). It cannot
     * expand anything else: any DOCTYPE is refused before an entity can be
     * declared, and on_get_entity refuses every other name. NONET: no
     * network, ever. Every SAX callback gets the context (userData). */
    xmlCtxtUseOptions(p->ctx, XML_PARSE_NONET | XML_PARSE_NOENT |
                              XML_PARSE_IGNORE_ENC);
    return 0;
}

static int
feed_plain(struct rs_parser *p, const char *buf, size_t len)
{
    if (p->stopped)
        return p->err;
    if (len > p->opts.max_bytes - p->bytes) {
        parser_fail(p, RS_ETOOBIG, 0,
                    "document larger than %zu bytes (the ResourceSync limit "
                    "is 50 MB; publish an index)", p->opts.max_bytes);
        return p->err;
    }
    size_t offset = p->bytes;   /* of buf[0] in the document */
    p->bytes += len;
    if (p->ctx == NULL) {
        size_t take = PARSE_PROLOGUE_MAX - p->prologue_len;
        if (take > len)
            take = len;
        memcpy(p->prologue + p->prologue_len, buf, take);
        p->prologue_len += take;
        buf += take;
        len -= take;
        offset += take;
        if (!prologue_complete(p))
            return 0;
        if (parser_ctx_create(p) != 0)
            return p->err;
        /* the prologue was handed over at creation; parse it now */
        if (xmlParseChunk(p->ctx, NULL, 0, 0) != 0)
            parser_fail(p, RS_EPARSE, parser_line(p), "not well-formed XML");
    }
    /* libxml2 would call a NUL "Char 0x0 out of allowed range": what comes
     * before it is parsed (an earlier fault is told first), then it is
     * told as what it is */
    const char *nul = len > 0 ? memchr(buf, '\0', len) : NULL;
    size_t upto = nul != NULL ? (size_t)(nul - buf) : len;
    /* Feed libxml2 in pieces: 2.9 refuses more than 10,000,000 bytes in
     * one call ("Huge input lookup") without XML_PARSE_HUGE, which we do
     * not want. 1 MiB pieces cost nothing measurable. */
    while (upto > 0 && !p->stopped) {
        int n = upto > (1u << 20) ? (1 << 20) : (int)upto;
        int xrc = xmlParseChunk(p->ctx, buf, n, 0);
        if (xrc != 0)
            parser_fail(p, RS_EPARSE, parser_line(p),
                        "not well-formed XML (libxml2 error %d)", xrc);
        buf += n;
        upto -= (size_t)n;
        offset += (size_t)n;
    }
    if (nul != NULL && !p->stopped)
        parser_fail_nul(p, parser_line(p), offset);
    /* Errors that let the parse go on are told at finish. */
    return p->stopped ? p->err : 0;
}

static int
on_inflated(void *ud, const char *buf, size_t len)
{
    return feed_plain(ud, buf, len);
}

/* Inflate into the parse; a corrupt stream fails it. */
static int
feed_gz(struct rs_parser *p, const char *buf, size_t len)
{
    int rc = rs_gunzip_feed(p->gz, buf, len, on_inflated, p);
    if (rc != 0 && !p->stopped)
        parser_fail(p, rc, 0, "%s (the document is gzipped)",
                    rs_gunzip_error(p->gz));
    return p->stopped ? p->err : 0;
}

/* opts.gunzip: decide from the first two bytes, then feed. */
static int
feed_sniffed(struct rs_parser *p, const char *buf, size_t len)
{
    char two[2];

    if (len == 0)
        return 0;
    if (!p->gz_held && len == 1) {
        p->gz_first = buf[0];
        p->gz_held = true;
        return 0;
    }
    two[0] = p->gz_held ? p->gz_first : buf[0];
    two[1] = p->gz_held ? buf[0] : buf[1];
    p->gz_state = GZ_PLAIN;
    if (rs_gunzip_magic(two, 2)) {
        if ((p->gz = rs_gunzip_new()) == NULL) {
            parser_fail(p, RS_ENOMEM, 0, "out of memory");
            return p->err;
        }
        p->gz_state = GZ_ON;
    }
    if (p->gz_held) {
        p->gz_held = false;
        int rc = p->gz_state == GZ_ON ? feed_gz(p, &p->gz_first, 1)
                                      : feed_plain(p, &p->gz_first, 1);
        if (rc != 0)
            return rc;
    }
    return p->gz_state == GZ_ON ? feed_gz(p, buf, len)
                                : feed_plain(p, buf, len);
}

int
rs_parser_feed(struct rs_parser *p, const char *buf, size_t len)
{
    if (p->stopped)
        return p->err;
    if (p->finished)
        return RS_ESTATE;
    if (p->gz_state == GZ_ON)
        return feed_gz(p, buf, len);
    if (p->opts.gunzip && p->gz_state == GZ_UNKNOWN)
        return feed_sniffed(p, buf, len);
    return feed_plain(p, buf, len);
}

int
rs_parser_finish(struct rs_parser *p)
{
    if (p->stopped)
        return p->err;
    if (p->finished)
        return RS_ESTATE;
    if (p->gz_held) {                 /* a document of one byte */
        p->gz_held = false;
        if (feed_plain(p, &p->gz_first, 1) != 0)
            return p->err;
    }
    if (p->gz_state == GZ_ON && rs_gunzip_finish(p->gz) != 0) {
        parser_fail(p, RS_EPARSE, 0, "%s (the document is gzipped)",
                    rs_gunzip_error(p->gz));
        return p->err;
    }
    p->finished = true;
    if (p->bytes == 0) {
        parser_fail(p, RS_EPARSE, 0, "not well-formed XML: document is empty");
        return p->err;
    }
    if (p->ctx == NULL && parser_ctx_create(p) != 0)
        return p->err;
    p->finishing = true;
    int xrc = xmlParseChunk(p->ctx, NULL, 0, 1);
    p->finishing = false;
    if (p->stopped)
        return p->err;
    if (xrc != 0 || !p->seen_root || !p->root_closed) {
        parser_fail(p, RS_EPARSE, parser_line(p),
                    p->seen_root ? "not well-formed XML: document is truncated"
                                 : "not well-formed XML: document is empty");
        return p->err;
    }
    if (!head_deliver(p))
        return p->err;
    p->check_line = p->md_line ? p->md_line : p->root_line;
    p->head.links = p->head_links.v;
    p->head.nlinks = p->head_links.n;
    unsigned before = p->nerrors;
    if (!parser_checked(p, rs_check_end(&p->check, p->head_links.v,
                                        p->head_links.n), before) ||
        p->err != 0)
        return p->err;
    if (p->cbs.on_end != NULL) {
        int rc = p->cbs.on_end(p->ud, &p->head);
        if (rc != 0) {
            parser_cb_stop(p, rc);
            return p->err;
        }
    }
    return 0;
}

size_t
rs_diag_line(char *buf, size_t bufsz, const char *name, unsigned line,
             const char *sev, const char *msg)
{
    char one[512];
    size_t n = 0;
    for (const unsigned char *m = (const unsigned char *)msg;
         *m != '\0' && n < sizeof(one) - 1; m++) {
        if (*m >= 0x20 && *m != 0x7f)
            one[n++] = (char)*m;
        else if (n > 0 && one[n - 1] != ' ')
            one[n++] = ' ';
    }
    while (n > 0 && one[n - 1] == ' ')
        n--;
    one[n] = '\0';
    int w = line > 0 ? snprintf(buf, bufsz, "%s:%u: %s: %s", name, line, sev, one)
                     : snprintf(buf, bufsz, "%s: %s: %s", name, sev, one);
    if (w < 0 || bufsz == 0)
        return 0;
    return (size_t)w < bufsz ? (size_t)w : bufsz - 1;
}

const struct rs_diag *
rs_parser_error(const struct rs_parser *p)
{
    return p->err != 0 ? &p->diag : NULL;
}

unsigned
rs_parser_errors(const struct rs_parser *p)
{
    return p->nerrors;
}

size_t
rs_parser_entries(const struct rs_parser *p)
{
    return p->nentries;
}

size_t
rs_parser_skipped(const struct rs_parser *p)
{
    return p->nskipped;
}

size_t
rs_parser_bytes(const struct rs_parser *p)
{
    return p->bytes;
}

/* ------------------------------------------------------ whole-document API */

/* Deep copies into the document's arena, so the parser's buffers can be
 * reused for the next entry. */
struct doc_build {
    struct rs_doc *doc;
    size_t cap;
};

static int
copy_str(struct rs_arena *ar, const char **dst, const char *src)
{
    if (src == NULL)
        return 0;
    *dst = rs_arena_strndup(ar, src, strlen(src));
    return *dst != NULL ? 0 : RS_ENOMEM;
}

static int
copy_md(struct rs_arena *ar, struct rs_md *md)
{
    if (copy_str(ar, &md->capability_other, md->capability_other) != 0 ||
        copy_str(ar, &md->type, md->type) != 0 ||
        copy_str(ar, &md->encoding, md->encoding) != 0 ||
        copy_str(ar, &md->path, md->path) != 0)
        return RS_ENOMEM;
    return 0;
}

static int
copy_links(struct rs_arena *ar, const struct rs_link **links, size_t n)
{
    if (n == 0) {
        *links = NULL;
        return 0;
    }
    struct rs_link *v = rs_arena_alloc(ar, n * sizeof(*v));
    if (v == NULL)
        return RS_ENOMEM;
    memcpy(v, *links, n * sizeof(*v));
    for (size_t i = 0; i < n; i++) {
        if (copy_str(ar, &v[i].rel, v[i].rel) != 0 ||
            copy_str(ar, &v[i].href, v[i].href) != 0 ||
            copy_str(ar, &v[i].type, v[i].type) != 0 ||
            copy_str(ar, &v[i].encoding, v[i].encoding) != 0 ||
            copy_str(ar, &v[i].path, v[i].path) != 0)
            return RS_ENOMEM;
    }
    *links = v;
    return 0;
}

static int
on_doc_entry(void *ud, const struct rs_entry *e)
{
    struct doc_build *b = ud;
    struct rs_doc *doc = b->doc;
    if (doc->nentries == b->cap) {
        size_t ncap = b->cap ? b->cap * 2 : 16;
        struct rs_entry *nv = rs_realloc(doc->entries, ncap * sizeof(*nv));
        if (nv == NULL)
            return RS_ENOMEM;
        doc->entries = nv;
        b->cap = ncap;
    }
    struct rs_entry *d = &doc->entries[doc->nentries];
    *d = *e;
    if (copy_str(doc->arena, &d->loc, e->loc) != 0 ||
        copy_md(doc->arena, &d->md) != 0 ||
        copy_links(doc->arena, &d->links, d->nlinks) != 0)
        return RS_ENOMEM;
    doc->nentries++;
    return 0;
}

static int
on_doc_end(void *ud, const struct rs_head *h)
{
    struct doc_build *b = ud;
    struct rs_doc *doc = b->doc;
    struct rs_arena *ar = doc->arena;
    doc->head = *h;
    if (copy_md(ar, &doc->head.md) != 0 ||
        copy_links(ar, &doc->head.links, doc->head.nlinks) != 0 ||
        copy_str(ar, &doc->head.hub_id, h->hub_id) != 0 ||
        copy_str(ar, &doc->head.hub_topic, h->hub_topic) != 0)
        return RS_ENOMEM;
    return 0;
}

static void
doc_diag(struct rs_diag *diag, int rc, const struct rs_parser *p)
{
    if (diag == NULL)
        return;
    const struct rs_diag *d = p != NULL ? rs_parser_error(p) : NULL;
    if (d != NULL) {
        *diag = *d;
        diag->code = rc;
    } else {
        diag->code = rc;
        diag->line = 0;
        snprintf(diag->msg, sizeof(diag->msg), "%s", rs_strerror(rc));
    }
}

/* rs_doc_parse: feed() supplies the bytes. */
static int
doc_parse(int (*feed)(struct rs_parser *, void *), void *src,
          const struct rs_parse_opts *opts, struct rs_doc **out,
          struct rs_diag *diag)
{
    int rc;
    struct doc_build b = { 0 };
    struct rs_parser *p = NULL;
    static const struct rs_parser_cbs cbs = {
        .on_entry = on_doc_entry,
        .on_end = on_doc_end,
    };

    /* A whole document has no one to hear of a skipped entry, and a
     * list read short silently is what skip_bad_entries must never
     * cause: here, a bad entry fails the document. */
    struct rs_parse_opts o;
    if (opts != NULL && opts->skip_bad_entries) {
        o = *opts;
        o.skip_bad_entries = false;
        opts = &o;
    }

    *out = NULL;
    b.doc = rs_calloc(1, sizeof(*b.doc));
    if (b.doc == NULL || (b.doc->arena = rs_arena_new(16384)) == NULL) {
        rc = RS_ENOMEM;
        goto out;
    }
    p = rs_parser_new(opts, &cbs, &b);
    if (p == NULL) {
        rc = RS_ENOMEM;
        goto out;
    }
    rc = feed(p, src);
    if (rc == 0)
        rc = rs_parser_finish(p);
    /* An out-of-memory inside our own callbacks surfaces as that code. */
out:
    if (rc != 0) {
        doc_diag(diag, rc, p);
        rs_doc_free(b.doc);
    } else {
        *out = b.doc;
    }
    rs_parser_free(p);
    return rc;
}

struct mem_src {
    const char *buf;
    size_t len;
    size_t max;                /* the document limit in force */
};

/* In pieces, as from the network: libxml2 refuses a single chunk of more
 * than 10 MB, and a document may be 50 MB (RS_MAX_DOC_BYTES). */
#define DOC_FEED_PIECE (1u << 20)

static int
feed_mem(struct rs_parser *p, void *src)
{
    struct mem_src *m = src;
    size_t off = 0;
    int rc = 0;

    /* Too big as a whole: one feed, which the parser refuses before it
     * parses a byte. */
    if (m->len > m->max)
        return rs_parser_feed(p, m->buf, m->len);
    do {
        size_t n = m->len - off < DOC_FEED_PIECE ? m->len - off
                                                 : DOC_FEED_PIECE;
        rc = rs_parser_feed(p, m->buf + off, n);
        off += n;
    } while (rc == 0 && off < m->len);
    return rc;
}

int
rs_doc_parse(const char *buf, size_t len, const struct rs_parse_opts *opts,
             struct rs_doc **out, struct rs_diag *diag)
{
    struct mem_src m = { buf, len, opts != NULL && opts->max_bytes != 0
                                   ? opts->max_bytes : RS_MAX_DOC_BYTES };
    return doc_parse(feed_mem, &m, opts, out, diag);
}

