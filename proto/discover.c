/*
 * discover.c - the three places a Destination finds a ResourceSync
 * document (rs_discover.h): HTTP Link headers (RFC 8288, with the RFC
 * 8187 rel* and title* forms), HTML <link> elements (libxml2's lenient
 * HTML parser), and robots.txt Sitemap: lines. Only parsing: fetching the
 * bytes and resolving relative targets belong to the subscriber and
 * common/ rs_url.
 */
#include <limits.h>
#include <string.h>

#include <libxml/HTMLparser.h>
#include <libxml/parser.h>

#include "rs_alloc.h"
#include "rs_discover.h"
#include "rs_hex.h"

/* ------------------------------------------------------------ helpers */

static int
disc_lower(int c)
{
    return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

/* Does [p, p + n) equal the lower-case word w, ASCII case-insensitively? */
static bool
disc_word_eq(const char *p, size_t n, const char *w)
{
    size_t i = 0;
    for (; i < n; i++) {
        if (w[i] == '\0' || disc_lower((unsigned char)p[i]) != w[i])
            return false;
    }
    return w[i] == '\0';
}

static bool
disc_is_ctl(unsigned char c)
{
    return c < 0x20 || c == 0x7f;
}

/* ----------------------------------------------------- Link: (RFC 8288) */

/*
 * Decoded strings of one link live in one scratch buffer of the header's
 * length plus a few bytes: each value decodes to at most its own source
 * span, spans do not overlap, and each NUL is paid for by the parameter's
 * name, so one link can never outgrow it. Reset per link.
 */
struct lh_parser {
    const char *p, *e;
    char *buf;
    size_t used, cap;
};

/* The parameters we deliver; occurrences after the first are ignored, as
 * RFC 8288 asks for rel, type and title. */
enum lh_slot {
    LH_REL, LH_REL_STAR, LH_TYPE, LH_ANCHOR, LH_TITLE, LH_TITLE_STAR,
    LH_NSLOTS, LH_NONE = LH_NSLOTS
};

static const char *const lh_slot_names[LH_NSLOTS] = {
    "rel", "rel*", "type", "anchor", "title", "title*"
};

/* Optional whitespace; CR and LF too, for header lines joined with their
 * folding left in. */
static bool
lh_is_ows(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static void
lh_skip_ows(struct lh_parser *lp)
{
    while (lp->p < lp->e && lh_is_ows(*lp->p))
        lp->p++;
}

static bool
lh_is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
        || (c >= '0' && c <= '9'))
        return true;
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/*
 * An unquoted value. RFC 8288 says token, but real servers write
 * type=text/html and rel=http://... without quotes, and the meaning is
 * unambiguous up to the next delimiter, so any visible byte but the
 * delimiters and DQUOTE is taken.
 */
static bool
lh_is_bare(unsigned char c)
{
    return !disc_is_ctl(c) && c != ' ' && c != ';' && c != ',' && c != '"';
}

static char *
lh_alloc(struct lh_parser *lp, size_t n)
{
    /* Cannot fail by the sizing argument above; checked anyway so a
     * mistake there shows as EINVAL, not as an overflow. */
    if (n + 1 > lp->cap - lp->used)
        return NULL;
    char *s = lp->buf + lp->used;
    lp->used += n + 1;
    return s;
}

/* A quoted-string at lp->p (on the opening quote). When dst is given, the
 * unescaped value is written there with a NUL (dst has room for the raw
 * span). RS_EINVAL when unterminated or holding a NUL byte. */
static int
lh_quoted(struct lh_parser *lp, char *dst, size_t *dlen)
{
    const char *p = lp->p + 1;
    size_t n = 0;
    for (;;) {
        if (p == lp->e || *p == '\0')
            return RS_EINVAL;
        char c = *p++;
        if (c == '"')
            break;
        if (c == '\\') {
            if (p == lp->e || *p == '\0')
                return RS_EINVAL;
            c = *p++;
        }
        if (dst != NULL)
            dst[n] = c;
        n++;
    }
    if (dst != NULL)
        dst[n] = '\0';
    if (dlen != NULL)
        *dlen = n;
    lp->p = p;
    return 0;
}

/* Is [s, s + n) well-formed UTF-8 (no overlongs, surrogates or values past
 * U+10FFFF)? */
static bool
lh_utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k;
        unsigned min, cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            k = 1; min = 0x80; cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            k = 2; min = 0x800; cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            k = 3; min = 0x10000; cp = c & 0x07;
        } else {
            return false;
        }
        if (n - i <= k)
            return false;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += k + 1;
    }
    return true;
}

/*
 * Decode an RFC 8187 ext-value (charset'language'pct-encoded) in place.
 * Only UTF-8 is decoded (RFC 8187 makes it the one charset recipients must
 * know); anything else, bad escapes, %00 or invalid UTF-8 return false and
 * the parameter is then treated as absent.
 */
static bool
lh_ext_decode(char *s)
{
    char *q1 = strchr(s, '\'');
    if (q1 == NULL || !disc_word_eq(s, (size_t)(q1 - s), "utf-8"))
        return false;
    char *q2 = strchr(q1 + 1, '\'');
    if (q2 == NULL)
        return false;
    const char *r = q2 + 1;
    char *w = s;
    while (*r != '\0') {
        if (*r == '%') {
            int hi = rs_hexval(r[1]);
            int lo = hi < 0 ? -1 : rs_hexval(r[2]);
            if (lo < 0 || (hi == 0 && lo == 0))
                return false;
            *w++ = (char)(hi << 4 | lo);
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return lh_utf8_valid((const unsigned char *)s, (size_t)(w - s));
}

static enum lh_slot
lh_slot_of(const char *name, size_t n)
{
    for (int i = 0; i < LH_NSLOTS; i++) {
        if (disc_word_eq(name, n, lh_slot_names[i]))
            return (enum lh_slot)i;
    }
    return LH_NONE;
}

/* One `; name[=value]` at lp->p (on the ';'), stored into its slot when it
 * is one we deliver and the first of its name. */
static int
lh_param(struct lh_parser *lp, const char *slots[LH_NSLOTS])
{
    lp->p++;
    lh_skip_ows(lp);
    if (lp->p == lp->e || *lp->p == ';' || *lp->p == ',')
        return 0;                      /* an empty parameter: tolerated */

    const char *name = lp->p;
    while (lp->p < lp->e && lh_is_tchar((unsigned char)*lp->p))
        lp->p++;
    size_t nlen = (size_t)(lp->p - name);
    if (nlen == 0)
        return RS_EINVAL;
    enum lh_slot slot = lh_slot_of(name, nlen);
    bool want = slot != LH_NONE && slots[slot] == NULL;

    lh_skip_ows(lp);
    if (lp->p == lp->e || *lp->p != '=') {
        /* A parameter without a value has the empty string as value. */
        if (want) {
            char *v = lh_alloc(lp, 0);
            if (v == NULL)
                return RS_EINVAL;
            v[0] = '\0';
            slots[slot] = v;
        }
        return 0;
    }
    lp->p++;
    lh_skip_ows(lp);

    char *v = NULL;
    if (lp->p < lp->e && *lp->p == '"') {
        if (want) {
            /* Room for the raw span (an upper bound of the unescaped
             * value); trimmed once the real length is known. */
            size_t before = lp->used;
            v = lh_alloc(lp, (size_t)(lp->e - lp->p));
            if (v == NULL)
                return RS_EINVAL;
            size_t vlen = 0;
            int rc = lh_quoted(lp, v, &vlen);
            if (rc < 0)
                return rc;
            lp->used = before + vlen + 1;
        } else {
            int rc = lh_quoted(lp, NULL, NULL);
            if (rc < 0)
                return rc;
        }
    } else {
        const char *v0 = lp->p;
        while (lp->p < lp->e && lh_is_bare((unsigned char)*lp->p))
            lp->p++;
        size_t vlen = (size_t)(lp->p - v0);
        if (vlen == 0)
            return RS_EINVAL;
        if (want) {
            v = lh_alloc(lp, vlen);
            if (v == NULL)
                return RS_EINVAL;
            memcpy(v, v0, vlen);
            v[vlen] = '\0';
        }
    }
    if (v == NULL)
        return 0;
    if ((slot == LH_REL_STAR || slot == LH_TITLE_STAR) && !lh_ext_decode(v))
        return 0;
    slots[slot] = v;
    return 0;
}

/* One link-value at lp->p: `<target>` then parameters, up to the ',' that
 * ends it or the end of input. */
static int
lh_link(struct lh_parser *lp, struct rs_weblink *l)
{
    if (*lp->p != '<')
        return RS_EINVAL;
    const char *t0 = lp->p + 1;
    const char *t1 = memchr(t0, '>', (size_t)(lp->e - t0));
    if (t1 == NULL)
        return RS_EINVAL;
    for (const char *q = t0; q < t1; q++) {
        if (disc_is_ctl((unsigned char)*q) || *q == '<' || *q == ' ')
            return RS_EINVAL;
    }
    size_t tlen = (size_t)(t1 - t0);
    char *target = lh_alloc(lp, tlen);
    if (target == NULL)
        return RS_EINVAL;
    memcpy(target, t0, tlen);
    target[tlen] = '\0';
    lp->p = t1 + 1;

    const char *slots[LH_NSLOTS] = { NULL };
    for (;;) {
        lh_skip_ows(lp);
        if (lp->p == lp->e || *lp->p == ',')
            break;
        if (*lp->p != ';')
            return RS_EINVAL;
        int rc = lh_param(lp, slots);
        if (rc < 0)
            return rc;
    }

    /* RFC 8288 3.4.1: title* wins over title; the same for rel*. */
    l->target = target;
    l->rel = slots[LH_REL_STAR] ? slots[LH_REL_STAR] : slots[LH_REL];
    l->type = slots[LH_TYPE];
    l->anchor = slots[LH_ANCHOR];
    l->title = slots[LH_TITLE_STAR] ? slots[LH_TITLE_STAR] : slots[LH_TITLE];
    return 0;
}

int
rs_link_header_parse(const char *s, size_t len, rs_weblink_cb cb, void *ud)
{
    if ((s == NULL && len > 0) || cb == NULL)
        return RS_EINVAL;
    if (len > SIZE_MAX - 16)
        return RS_ETOOBIG;
    struct lh_parser lp = { s, s + len, NULL, 0, len + 8 };
    int rc = 0;
    size_t count = 0;
    for (;;) {
        /* Empty list elements (", ,") are allowed by the #rule. */
        while (lp.p < lp.e && (lh_is_ows(*lp.p) || *lp.p == ','))
            lp.p++;
        if (lp.p == lp.e)
            break;
        if (lp.buf == NULL) {
            lp.buf = rs_malloc(lp.cap);
            if (lp.buf == NULL) {
                rc = RS_ENOMEM;
                goto out;
            }
        }
        if (count == RS_DISCOVER_MAX_LINKS) {
            rc = RS_ETOOBIG;
            goto out;
        }
        lp.used = 0;
        struct rs_weblink l;
        rc = lh_link(&lp, &l);
        if (rc < 0)
            goto out;
        count++;
        if (cb(ud, &l) != 0) {
            rc = RS_ESTOPPED;
            goto out;
        }
    }
out:
    rs_free(lp.buf);
    return rc;
}

bool
rs_rel_has(const char *rels, const char *rel)
{
    if (rels == NULL || rel == NULL || rel[0] == '\0')
        return false;
    size_t want = strlen(rel);
    const char *p = rels;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'
               || *p == '\f')
            p++;
        if (*p == '\0')
            return false;
        const char *w = p;
        while (*p != '\0' && *p != ' ' && *p != '\t' && *p != '\n'
               && *p != '\r' && *p != '\f')
            p++;
        if ((size_t)(p - w) == want) {
            size_t i = 0;
            while (i < want && disc_lower((unsigned char)w[i])
                                   == disc_lower((unsigned char)rel[i]))
                i++;
            if (i == want)
                return true;
        }
    }
}

/* ------------------------------------------------------ HTML <link> */

/*
 * A SAX pass rather than a tree: only start tags matter, so nothing of the
 * page is kept and memory does not grow with it. libxml2 lower-cases tag
 * and attribute names and decodes character references in values.
 */
struct html_state {
    rs_weblink_cb cb;
    void *ud;
    size_t count;
    int rc;
};

static bool
html_name_is(const xmlChar *name, const char *w)
{
    return name != NULL
        && disc_word_eq((const char *)name, strlen((const char *)name), w);
}

static void
html_on_start(void *ctx, const xmlChar *name, const xmlChar **atts)
{
    htmlParserCtxtPtr ctxt = ctx;
    struct html_state *st = ctxt->_private;
    if (st->rc != 0 || !html_name_is(name, "link"))
        return;

    struct rs_weblink l = { NULL, NULL, NULL, NULL, NULL };
    for (size_t i = 0; atts != NULL && atts[i] != NULL; i += 2) {
        /* A bare attribute (<link href>) has no value: the empty string,
         * as HTML defines it. */
        const char *v = atts[i + 1] ? (const char *)atts[i + 1] : "";
        if (html_name_is(atts[i], "href") && l.target == NULL)
            l.target = v;
        else if (html_name_is(atts[i], "rel") && l.rel == NULL)
            l.rel = v;
        else if (html_name_is(atts[i], "type") && l.type == NULL)
            l.type = v;
        else if (html_name_is(atts[i], "title") && l.title == NULL)
            l.title = v;
    }
    if (l.target == NULL)
        return;
    if (st->count == RS_DISCOVER_MAX_LINKS) {
        st->rc = RS_ETOOBIG;
        xmlStopParser(ctxt);
        return;
    }
    st->count++;
    if (st->cb(st->ud, &l) != 0) {
        st->rc = RS_ESTOPPED;
        xmlStopParser(ctxt);
    }
}

int
rs_html_links(const char *buf, size_t len, rs_weblink_cb cb, void *ud)
{
    if ((buf == NULL && len > 0) || cb == NULL)
        return RS_EINVAL;
    if (len == 0)
        return 0;
    if (len > INT_MAX)
        return RS_ETOOBIG;

    xmlInitParser();
    htmlParserCtxtPtr ctxt = htmlCreateMemoryParserCtxt(buf, (int)len);
    if (ctxt == NULL)
        return RS_ENOMEM;
    struct html_state st = { cb, ud, 0, 0 };
    ctxt->_private = &st;
    /* Replace the tree-building handlers with our one hook. userData stays
     * the context itself (libxml2's default), which carries st. */
    memset(ctxt->sax, 0, sizeof(*ctxt->sax));
    ctxt->sax->startElement = html_on_start;
    ctxt->sax->initialized = 1;
    htmlCtxtUseOptions(ctxt, HTML_PARSE_NONET | HTML_PARSE_NOERROR
                                 | HTML_PARSE_NOWARNING | HTML_PARSE_RECOVER);
    /* Recovering parser: its verdict on the page's well-formedness is not
     * ours to report; only our own stop reasons are. */
    (void)htmlParseDocument(ctxt);
    if (ctxt->myDoc != NULL)
        xmlFreeDoc(ctxt->myDoc);
    htmlFreeParserCtxt(ctxt);
    return st.rc;
}

/* ----------------------------------------------------------- robots.txt */

static bool
robots_is_ws(char c)
{
    return c == ' ' || c == '\t';
}

/* The URL of one line [p, e) (no line terminator), or NULL when it is not
 * a well-formed Sitemap line. */
static const char *
robots_sitemap_value(const char *p, const char *e, size_t *vlen)
{
    const char *hash = memchr(p, '#', (size_t)(e - p));
    if (hash != NULL)
        e = hash;
    while (p < e && robots_is_ws(*p))
        p++;
    while (e > p && robots_is_ws(e[-1]))
        e--;
    static const char field[] = "sitemap";
    size_t flen = sizeof(field) - 1;
    if ((size_t)(e - p) < flen || !disc_word_eq(p, flen, field))
        return NULL;
    p += flen;
    while (p < e && robots_is_ws(*p))
        p++;
    if (p == e || *p != ':')
        return NULL;
    p++;
    while (p < e && robots_is_ws(*p))
        p++;
    if (p == e)
        return NULL;
    /* One URL and nothing after it: a value with spaces or control bytes
     * inside is junk, not something to fetch. */
    for (const char *q = p; q < e; q++) {
        if (robots_is_ws(*q) || disc_is_ctl((unsigned char)*q))
            return NULL;
    }
    *vlen = (size_t)(e - p);
    return p;
}

int
rs_robots_sitemaps(const char *buf, size_t len, rs_sitemap_cb cb, void *ud)
{
    if ((buf == NULL && len > 0) || cb == NULL)
        return RS_EINVAL;
    const char *p = buf, *end = buf + len;
    if (len >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0)
        p += 3;                        /* a UTF-8 byte order mark */
    size_t count = 0;
    while (p < end) {
        /* Lines end in LF, CRLF or a lone CR (RFC 9309). */
        const char *eol = p;
        while (eol < end && *eol != '\n' && *eol != '\r')
            eol++;
        size_t vlen = 0;
        const char *v = robots_sitemap_value(p, eol, &vlen);
        p = eol;
        if (p < end && *p == '\r')
            p++;
        if (p < end && *p == '\n')
            p++;
        if (v == NULL)
            continue;
        if (count == RS_DISCOVER_MAX_LINKS)
            return RS_ETOOBIG;
        char *url = rs_strndup(v, vlen);
        if (url == NULL)
            return RS_ENOMEM;
        count++;
        int stop = cb(ud, url);
        rs_free(url);
        if (stop != 0)
            return RS_ESTOPPED;
    }
    return 0;
}
