/*
 * write.c - the serializer (rs_write.h): the document model to ResourceSync
 * XML, streamed through a callback or built in a growing buffer. Owns element
 * and attribute order, indentation, escaping, and refusing strings XML 1.0
 * cannot carry. Which documents are valid is rs_check's business; datetime
 * and hash spellings are rs_time's and rs_hash's.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "rs_alloc.h"
#include "rs_check.h"
#include "rs_write.h"

/* Streaming buffer: the callback sees 64 KiB chunks (the last one shorter). */
#define WR_STREAM_BUFSZ 65536
/* First size of a buffer built by rs_write_buf; doubled as needed. */
#define WR_GROW_INIT 4096

enum wr_state {
    WR_NEW,       /* rs_writer_begin not called yet */
    WR_BODY,      /* root open; entries may follow */
    WR_DONE,      /* root closed and flushed */
};

/* Where the writer is, for the prefix of error messages. */
enum wr_at {
    WR_AT_NONE,   /* no prefix */
    WR_AT_ROOT,   /* "root: " */
    WR_AT_ENTRY,  /* "entry N: " (1-based) */
};

struct rs_writer {
    rs_write_cb cb;           /* NULL: grow buf instead of flushing */
    void *ud;
    struct rs_write_opts opts;
    enum wr_state state;
    int err;                  /* first error; sticky. 0 = none */
    enum rs_root root;
    size_t nentries;          /* entries seen, including the current one */
    enum wr_at at;            /* what an error message is about */
    char *buf;                /* inline_buf when streaming */
    size_t len;               /* bytes pending in buf */
    size_t cap;               /* size of buf */
    size_t flushed;           /* bytes already handed to cb */
    /* The last datetime formatted: <lastmod> and datetime usually agree,
     * and formatting is the costliest step of an entry. */
    rs_time_t tcache;
    size_t tcache_len;
    char tcache_buf[RS_TIME_BUFSZ];
    struct rs_check check;
    bool check_msg_set;       /* check_msg holds this call's first problem */
    char check_msg[256];
    char errstr[384];
    char inline_buf[];        /* WR_STREAM_BUFSZ bytes when streaming */
};

/* ------------------------------------------------------------- errors */

static void wr_fail(struct rs_writer *w, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records the first error only: later ones are consequences of it. */
static void
wr_fail(struct rs_writer *w, int rc, const char *fmt, ...)
{
    if (w->err != 0)
        return;
    w->err = rc;
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (w->at == WR_AT_ROOT)
        snprintf(w->errstr, sizeof(w->errstr), "root: %s", msg);
    else if (w->at == WR_AT_ENTRY)
        snprintf(w->errstr, sizeof(w->errstr), "entry %zu: %s", w->nentries,
                 msg);
    else
        snprintf(w->errstr, sizeof(w->errstr), "%s", msg);
}

/* The check reports before it returns; keep the problem that failed it
 * (the first error; in strict mode warnings come as errors too). */
static void
wr_on_report(void *ud, enum rs_severity sev, const char *msg)
{
    struct rs_writer *w = ud;
    if (w->check_msg_set || sev != RS_SEV_ERROR)
        return;
    snprintf(w->check_msg, sizeof(w->check_msg), "%s", msg);
    w->check_msg_set = true;
}

static void
wr_check_failed(struct rs_writer *w, int rc)
{
    if (w->check_msg_set)
        wr_fail(w, rc, "%s", w->check_msg);
    else
        wr_fail(w, rc, "%s", rs_strerror(rc));
}

/* ------------------------------------------------------------- output */

static void
wr_flush(struct rs_writer *w)
{
    if (w->err != 0 || w->cb == NULL || w->len == 0)
        return;
    int rc = w->cb(w->ud, w->buf, w->len);
    if (rc != 0) {
        wr_fail(w, rc < 0 ? rc : RS_ESTOPPED, "write callback failed: %s",
                rs_strerror(rc < 0 ? rc : RS_ESTOPPED));
        return;
    }
    w->flushed += w->len;
    w->len = 0;
}

/* Building: make room for need bytes plus the final NUL. */
static int
wr_grow(struct rs_writer *w, size_t need)
{
    if (need < w->cap)
        return 0;
    size_t cap = w->cap;
    while (cap <= need)
        cap *= 2;
    char *nb = rs_realloc(w->buf, cap);
    if (nb == NULL) {
        wr_fail(w, RS_ENOMEM, "out of memory");
        return w->err;
    }
    w->buf = nb;
    w->cap = cap;
    return 0;
}

/* Room is short: flush (streaming) or grow (building). Also where the
 * document size cap is enforced, so a runaway string cannot grow the buffer
 * without bound. */
static void
wr_put_slow(struct rs_writer *w, const void *p, size_t n)
{
    const char *s = p;
    if (w->err != 0)
        return;
    if (n > RS_MAX_DOC_BYTES || w->flushed + w->len + n > RS_MAX_DOC_BYTES) {
        wr_fail(w, RS_ETOOBIG, "document exceeds %u bytes", RS_MAX_DOC_BYTES);
        return;
    }
    if (w->cb == NULL) {
        if (wr_grow(w, w->len + n) != 0)
            return;
        memcpy(w->buf + w->len, s, n);
        w->len += n;
        return;
    }
    while (n > 0) {
        size_t room = w->cap - w->len;
        size_t k = n < room ? n : room;
        memcpy(w->buf + w->len, s, k);
        w->len += k;
        s += k;
        n -= k;
        if (w->len == w->cap) {
            wr_flush(w);
            if (w->err != 0)
                return;
        }
    }
}

/* After an error the fast path may still copy into the buffer, which is
 * harmless: nothing is flushed or handed out once err is set. */
static inline void
wr_put(struct rs_writer *w, const void *p, size_t n)
{
    if (n <= w->cap - w->len) {
        memcpy(w->buf + w->len, p, n);
        w->len += n;
        return;
    }
    wr_put_slow(w, p, n);
}

#define wr_lit(w, lit) wr_put((w), (lit), sizeof(lit) - 1)

static void
wr_str(struct rs_writer *w, const char *s)
{
    wr_put(w, s, strlen(s));
}

static void
wr_indent(struct rs_writer *w, unsigned depth)
{
    static const char spaces[] = "        ";
    /* A fragment's entries are its top level. */
    if (w->opts.entries_only && depth > 0)
        depth--;
    if (w->opts.pretty)
        wr_put(w, spaces, 2 * depth);
}

static void
wr_nl(struct rs_writer *w)
{
    if (w->opts.pretty)
        wr_put(w, "\n", 1);
}

static void
wr_uint(struct rs_writer *w, uint64_t v)
{
    char tmp[24];
    char *p = tmp + sizeof(tmp);
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    wr_put(w, p, (size_t)(tmp + sizeof(tmp) - p));
}

/* ----------------------------------------------------------- escaping */

/*
 * Byte classes for the escaping loop: 0 = copy as is, 1 = ASCII needing an
 * entity or refusal (NUL, the one that ends the loop, is here too), 2 = a
 * UTF-8 lead or continuation byte to validate. Text keeps tab and LF
 * literally; attributes turn them into references, which survive the
 * attribute-value normalisation a reader applies. CR is a reference in both,
 * since line-end normalisation would otherwise turn it into LF.
 */
#define WR_R16(x) x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x
#define WR_HIGH WR_R16(2), WR_R16(2), WR_R16(2), WR_R16(2), \
                WR_R16(2), WR_R16(2), WR_R16(2), WR_R16(2)

static const unsigned char wr_cls_text[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1,   /* \t \n literal */
    WR_R16(1),
    0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0,   /* " & */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0,   /* < > */
    WR_R16(0), WR_R16(0), WR_R16(0), WR_R16(0),
    WR_HIGH,
};

static const unsigned char wr_cls_attr[256] = {
    WR_R16(1),
    WR_R16(1),
    0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0,
    WR_R16(0), WR_R16(0), WR_R16(0), WR_R16(0),
    WR_HIGH,
};

/*
 * Length of the UTF-8 sequence at p (2..4), 0 if it is not valid UTF-8
 * (overlong forms, surrogates, beyond U+10FFFF, truncated: a NUL is never a
 * continuation byte, so this never reads past the string), or -1 for
 * U+FFFE/U+FFFF, which are valid UTF-8 but not XML 1.0 characters.
 */
static int
wr_utf8_len(const unsigned char *p)
{
    unsigned char c = p[0];
    if (c < 0xC2)
        return 0;
    if (c < 0xE0)
        return (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c < 0xF0) {
        unsigned char lo = c == 0xE0 ? 0xA0 : 0x80;
        unsigned char hi = c == 0xED ? 0x9F : 0xBF;
        if (p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80)
            return 0;
        if (c == 0xEF && p[1] == 0xBF && p[2] >= 0xBE)
            return -1;
        return 3;
    }
    if (c < 0xF5) {
        unsigned char lo = c == 0xF0 ? 0x90 : 0x80;
        unsigned char hi = c == 0xF4 ? 0x8F : 0xBF;
        if (p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80 ||
            (p[3] & 0xC0) != 0x80)
            return 0;
        return 4;
    }
    return 0;
}

/*
 * Copy s escaped. The inner loop only walks plain bytes; runs are copied
 * in one go, valid multi-byte sequences stay part of the run. what names
 * the field for the error message.
 */
static void
wr_esc(struct rs_writer *w, const char *s, const unsigned char *cls,
       const char *what)
{
    const unsigned char *p = (const unsigned char *)s;
    const unsigned char *run = p;
    for (;;) {
        while (cls[*p] == 0)
            p++;
        if (*p >= 0x80) {
            int n = wr_utf8_len(p);
            if (n > 0) {
                p += n;
                continue;
            }
            if (n < 0)
                wr_fail(w, RS_EINVAL,
                        "%s contains U+FFF%c, which XML 1.0 cannot carry",
                        what, p[2] == 0xBE ? 'E' : 'F');
            else
                wr_fail(w, RS_EINVAL, "%s is not valid UTF-8 (byte 0x%02X "
                        "at offset %zu)", what, *p,
                        (size_t)(p - (const unsigned char *)s));
            return;
        }
        wr_put(w, run, (size_t)(p - run));
        switch (*p) {
        case '\0': return;
        case '&': wr_lit(w, "&amp;"); break;
        case '<': wr_lit(w, "&lt;"); break;
        case '>': wr_lit(w, "&gt;"); break;
        case '"': wr_lit(w, "&quot;"); break;
        case '\t': wr_lit(w, "&#9;"); break;
        case '\n': wr_lit(w, "&#10;"); break;
        case '\r': wr_lit(w, "&#13;"); break;
        default:
            wr_fail(w, RS_EINVAL, "%s contains control character U+%04X, "
                    "which XML 1.0 cannot carry", what, *p);
            return;
        }
        run = ++p;
    }
}

/* ---------------------------------------------------------- attributes */

/* Format t (not RS_TIME_NONE) and write it; false if it has no W3C form. */
static bool
wr_time(struct rs_writer *w, rs_time_t t)
{
    if (t != w->tcache || w->tcache_len == 0) {
        w->tcache_len = rs_time_format(t, w->tcache_buf);
        w->tcache = t;
        if (w->tcache_len == 0)
            return false;
    }
    wr_put(w, w->tcache_buf, w->tcache_len);
    return true;
}

/* name is the literal ` name="`, what the field for messages. */
static void
wr_attr_str(struct rs_writer *w, const char *name, size_t namelen,
            const char *s, const char *what)
{
    if (s == NULL)
        return;
    wr_put(w, name, namelen);
    wr_esc(w, s, wr_cls_attr, what);
    wr_lit(w, "\"");
}

static void
wr_attr_time(struct rs_writer *w, const char *name, size_t namelen,
             rs_time_t t, const char *what)
{
    if (t == RS_TIME_NONE)
        return;
    wr_put(w, name, namelen);
    if (!wr_time(w, t))
        wr_fail(w, RS_EINVAL, "%s is outside years 0000..9999", what);
    wr_lit(w, "\"");
}

static void
wr_attr_length(struct rs_writer *w, int64_t len, const char *what)
{
    if (len == -1)
        return;
    if (len < 0) {
        wr_fail(w, RS_EINVAL, "%s is negative", what);
        return;
    }
    wr_lit(w, " length=\"");
    wr_uint(w, (uint64_t)len);
    wr_lit(w, "\"");
}

static void
wr_attr_hash(struct rs_writer *w, const struct rs_hashes *h, const char *what)
{
    if (h->n == 0)
        return;
    char buf[RS_HASHES_BUFSZ];
    if (rs_hashes_format(h, buf) == 0) {
        wr_fail(w, RS_EINVAL, "%s cannot be formatted", what);
        return;
    }
    wr_lit(w, " hash=\"");
    /* Names of unknown algorithms come from the caller: escape them too. */
    wr_esc(w, buf, wr_cls_attr, what);
    wr_lit(w, "\"");
}

#define WR_ATTR(name) " " name "=\"", sizeof(" " name "=\"") - 1

/* -------------------------------------------------------------- elements */

static void
wr_md(struct rs_writer *w, const struct rs_md *md, unsigned depth)
{
    wr_indent(w, depth);
    wr_lit(w, "<rs:md");
    if (md->capability == RS_CAP_OTHER) {
        wr_attr_str(w, WR_ATTR("capability"), md->capability_other,
                    "rs:md capability");
    } else if (md->capability != RS_CAP_NONE) {
        const char *name = rs_capability_name(md->capability);
        if (md->capability == RS_CAP_CHANGELIST_NOTIFICATION &&
            md->capability_alpha)
            name = "change-notification";
        if (*name == '\0')
            wr_fail(w, RS_EINVAL, "rs:md capability %d is not a capability",
                    (int)md->capability);
        wr_lit(w, " capability=\"");
        wr_str(w, name);
        wr_lit(w, "\"");
    }
    if (md->change != RS_CHANGE_NONE) {
        const char *name = rs_change_name(md->change);
        if (*name == '\0')
            wr_fail(w, RS_EINVAL, "rs:md change %d is not a change type",
                    (int)md->change);
        wr_lit(w, " change=\"");
        wr_str(w, name);
        wr_lit(w, "\"");
    }
    wr_attr_time(w, WR_ATTR("datetime"), md->datetime, "rs:md datetime");
    wr_attr_time(w, WR_ATTR("at"), md->at, "rs:md at");
    wr_attr_time(w, WR_ATTR("completed"), md->completed, "rs:md completed");
    wr_attr_time(w, WR_ATTR("from"), md->from, "rs:md from");
    wr_attr_time(w, WR_ATTR("until"), md->until, "rs:md until");
    wr_attr_hash(w, &md->hash, "rs:md hash");
    wr_attr_length(w, md->length, "rs:md length");
    wr_attr_str(w, WR_ATTR("type"), md->type, "rs:md type");
    wr_attr_str(w, WR_ATTR("encoding"), md->encoding, "rs:md encoding");
    wr_attr_str(w, WR_ATTR("path"), md->path, "rs:md path");
    wr_lit(w, "/>");
    wr_nl(w);
}

static void
wr_links(struct rs_writer *w, const struct rs_link *links, size_t n,
         unsigned depth)
{
    for (size_t i = 0; i < n; i++) {
        const struct rs_link *ln = &links[i];
        wr_indent(w, depth);
        wr_lit(w, "<rs:ln");
        wr_attr_str(w, WR_ATTR("rel"), ln->rel, "rs:ln rel");
        wr_attr_str(w, WR_ATTR("href"), ln->href, "rs:ln href");
        if (ln->pri != 0) {
            wr_lit(w, " pri=\"");
            wr_uint(w, ln->pri);
            wr_lit(w, "\"");
        }
        wr_attr_time(w, WR_ATTR("modified"), ln->modified, "rs:ln modified");
        wr_attr_hash(w, &ln->hash, "rs:ln hash");
        wr_attr_length(w, ln->length, "rs:ln length");
        wr_attr_str(w, WR_ATTR("type"), ln->type, "rs:ln type");
        wr_attr_str(w, WR_ATTR("encoding"), ln->encoding, "rs:ln encoding");
        wr_attr_str(w, WR_ATTR("path"), ln->path, "rs:ln path");
        wr_lit(w, "/>");
        wr_nl(w);
    }
}

/* ----------------------------------------------------------------- API */

static struct rs_writer *
wr_new(rs_write_cb cb, void *ud, const struct rs_write_opts *opts)
{
    size_t extra = cb != NULL ? WR_STREAM_BUFSZ : 0;
    struct rs_writer *w = rs_malloc(sizeof(*w) + extra);
    if (w == NULL)
        return NULL;
    memset(w, 0, sizeof(*w));
    w->cb = cb;
    w->ud = ud;
    if (opts != NULL) {
        w->opts = *opts;
    } else {
        w->opts.pretty = true;
        w->opts.no_decl = false;
        w->opts.lenient = false;
    }
    w->state = WR_NEW;
    if (cb != NULL) {
        w->buf = w->inline_buf;
        w->cap = WR_STREAM_BUFSZ;
    } else {
        w->buf = rs_malloc(WR_GROW_INIT);
        if (w->buf == NULL) {
            rs_free(w);
            return NULL;
        }
        w->cap = WR_GROW_INIT;
    }
    /* Lenient writing accepts what a reader accepts (the round trip of a
     * quirky document); otherwise every problem, warnings too, refuses. */
    rs_check_init(&w->check, w->opts.lenient ? RS_CHECK_READER
                                             : RS_CHECK_STRICT,
                  0, wr_on_report, w);
    return w;
}

struct rs_writer *
rs_writer_new(rs_write_cb cb, void *ud, const struct rs_write_opts *opts)
{
    if (cb == NULL)
        return NULL;
    return wr_new(cb, ud, opts);
}

int
rs_writer_begin(struct rs_writer *w, const struct rs_head *h)
{
    if (w->err != 0)
        return w->err;
    w->at = WR_AT_NONE;
    if (w->state != WR_NEW) {
        wr_fail(w, RS_ESTATE, "rs_writer_begin called twice");
        return w->err;
    }
    w->at = WR_AT_ROOT;
    if (h == NULL) {
        wr_fail(w, RS_EINVAL, "no head given");
        return w->err;
    }
    w->check_msg_set = false;
    /* What is written is the capability's own name, whatever spelling
     * the model was read from. */
    struct rs_head hc = *h;
    hc.md.capability_index_alias = false;
    int rc = rs_check_head(&w->check, &hc);
    if (rc != 0) {
        wr_check_failed(w, rc);
        return w->err;
    }
    const char *root = rs_root_name(h->root);
    if (*root == '\0') {
        wr_fail(w, RS_EINVAL, "no root element (urlset or sitemapindex)");
        return w->err;
    }
    w->root = h->root;
    if (w->opts.entries_only) {
        w->state = WR_BODY;
        return 0;
    }

    if (!w->opts.no_decl) {
        wr_lit(w, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
        wr_nl(w);
    }
    wr_lit(w, "<");
    wr_str(w, root);
    wr_lit(w, " xmlns=\"" RS_NS_SITEMAP "\" xmlns:rs=\"" RS_NS_RS "\"");
    if (h->hub_id != NULL || h->hub_topic != NULL)
        wr_lit(w, " xmlns:hub=\"" RS_NS_HUB "\"");
    wr_attr_str(w, WR_ATTR("hub:id"), h->hub_id, "hub:id");
    wr_attr_str(w, WR_ATTR("hub:topic"), h->hub_topic, "hub:topic");
    wr_lit(w, ">");
    wr_nl(w);
    /* rs:ln before rs:md, as in the specification's examples. */
    wr_links(w, h->links, h->nlinks, 1);
    if (h->has_md)
        wr_md(w, &h->md, 1);
    if (w->err != 0)
        return w->err;
    w->state = WR_BODY;
    return 0;
}

int
rs_writer_entry(struct rs_writer *w, const struct rs_entry *e)
{
    if (w->err != 0)
        return w->err;
    w->at = WR_AT_NONE;
    if (w->state != WR_BODY) {
        wr_fail(w, RS_ESTATE, w->state == WR_NEW
                ? "rs_writer_entry called before rs_writer_begin"
                : "rs_writer_entry called after rs_writer_end");
        return w->err;
    }
    w->nentries++;
    w->at = WR_AT_ENTRY;
    if (e == NULL) {
        wr_fail(w, RS_EINVAL, "no entry given");
        return w->err;
    }
    w->check_msg_set = false;
    int rc = rs_check_entry(&w->check, e);
    if (rc != 0) {
        wr_check_failed(w, rc);
        return w->err;
    }
    bool url = w->root == RS_ROOT_URLSET;
    wr_indent(w, 1);
    if (url)
        wr_lit(w, "<url>");
    else
        wr_lit(w, "<sitemap>");
    wr_nl(w);
    if (e->loc != NULL) {
        wr_indent(w, 2);
        wr_lit(w, "<loc>");
        wr_esc(w, e->loc, wr_cls_text, "<loc>");
        wr_lit(w, "</loc>");
        wr_nl(w);
    }
    if (e->lastmod != RS_TIME_NONE) {
        wr_indent(w, 2);
        wr_lit(w, "<lastmod>");
        if (!wr_time(w, e->lastmod))
            wr_fail(w, RS_EINVAL, "<lastmod> is outside years 0000..9999");
        wr_lit(w, "</lastmod>");
        wr_nl(w);
    }
    if (e->changefreq != RS_FREQ_NONE) {
        const char *name = rs_changefreq_name(e->changefreq);
        if (*name == '\0')
            wr_fail(w, RS_EINVAL, "<changefreq> %d is not a frequency",
                    (int)e->changefreq);
        wr_indent(w, 2);
        wr_lit(w, "<changefreq>");
        wr_str(w, name);
        wr_lit(w, "</changefreq>");
        wr_nl(w);
    }
    if (e->has_md)
        wr_md(w, &e->md, 2);
    wr_links(w, e->links, e->nlinks, 2);
    wr_indent(w, 1);
    if (url)
        wr_lit(w, "</url>");
    else
        wr_lit(w, "</sitemap>");
    wr_nl(w);
    if (w->err == 0 && w->flushed + w->len > RS_MAX_DOC_BYTES)
        wr_fail(w, RS_ETOOBIG, "document exceeds %u bytes", RS_MAX_DOC_BYTES);
    return w->err;
}

int
rs_writer_end(struct rs_writer *w)
{
    if (w->err != 0)
        return w->err;
    w->at = WR_AT_NONE;
    if (w->state != WR_BODY) {
        wr_fail(w, RS_ESTATE, w->state == WR_NEW
                ? "rs_writer_end called before rs_writer_begin"
                : "rs_writer_end called twice");
        return w->err;
    }
    w->check_msg_set = false;
    int rc = rs_check_end(&w->check, NULL, 0);
    if (rc != 0) {
        wr_check_failed(w, rc);
        return w->err;
    }
    /* The closing tag ends with a newline in compact mode too, so the
     * output is a proper text file. */
    if (w->opts.entries_only)
        ;                             /* a fragment: no closing tag */
    else if (w->root == RS_ROOT_URLSET)
        wr_lit(w, "</urlset>\n");
    else
        wr_lit(w, "</sitemapindex>\n");
    if (w->err == 0 && w->flushed + w->len > RS_MAX_DOC_BYTES)
        wr_fail(w, RS_ETOOBIG, "document exceeds %u bytes", RS_MAX_DOC_BYTES);
    wr_flush(w);
    if (w->err != 0)
        return w->err;
    w->state = WR_DONE;
    return 0;
}

const char *
rs_writer_errstr(const struct rs_writer *w)
{
    if (w == NULL)
        return "no writer";
    return w->err != 0 ? w->errstr : "";
}

void
rs_writer_free(struct rs_writer *w)
{
    if (w == NULL)
        return;
    if (w->buf != w->inline_buf)
        rs_free(w->buf);
    rs_free(w);
}

int
rs_write_buf(const struct rs_head *head, const struct rs_entry *entries,
             size_t n, const struct rs_write_opts *opts, char **out,
             size_t *len)
{
    if (out == NULL || len == NULL)
        return RS_EINVAL;
    *out = NULL;
    *len = 0;
    if (head == NULL || (entries == NULL && n > 0))
        return RS_EINVAL;
    struct rs_writer *w = wr_new(NULL, NULL, opts);
    if (w == NULL)
        return RS_ENOMEM;
    int rc = rs_writer_begin(w, head);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = rs_writer_entry(w, &entries[i]);
    if (rc == 0)
        rc = rs_writer_end(w);
    if (rc == 0)
        rc = wr_grow(w, w->len);   /* the fast path may have filled buf */
    if (rc == 0) {
        w->buf[w->len] = '\0';
        *out = w->buf;
        *len = w->len;
        w->buf = NULL;
    }
    rs_writer_free(w);
    return rc;
}

int
rs_doc_write(const struct rs_doc *doc, const struct rs_write_opts *opts,
             char **out, size_t *len)
{
    if (doc == NULL) {
        if (out != NULL)
            *out = NULL;
        if (len != NULL)
            *len = 0;
        return RS_EINVAL;
    }
    return rs_write_buf(&doc->head, doc->entries, doc->nentries, opts, out,
                        len);
}
