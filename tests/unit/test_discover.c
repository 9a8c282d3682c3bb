/* test_discover.c - Link header, HTML <link> and robots.txt parsing for
 * discovery (proto/discover.c). */
#include "testutil.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rs_alloc.h"
#include "rs_discover.h"

/* --------------------------------------------------------- collector */

enum { TD_TARGET, TD_REL, TD_TYPE, TD_ANCHOR, TD_TITLE, TD_NFIELDS };

/* Copies of what the callbacks saw (their strings die with the call);
 * NULL fields stay NULL. */
struct td_col {
    size_t n;
    size_t stop_at;         /* return non-zero on this call; 0 = never */
    char *f[400][TD_NFIELDS];
};

static char *
td_dup(const char *s)
{
    return s == NULL ? NULL : strdup(s);
}

static int
td_on_link(void *ud, const struct rs_weblink *l)
{
    struct td_col *c = ud;
    assert_non_null(l->target);
    assert_true(c->n < 400);
    char **f = c->f[c->n++];
    f[TD_TARGET] = td_dup(l->target);
    f[TD_REL] = td_dup(l->rel);
    f[TD_TYPE] = td_dup(l->type);
    f[TD_ANCHOR] = td_dup(l->anchor);
    f[TD_TITLE] = td_dup(l->title);
    return c->stop_at != 0 && c->n == c->stop_at;
}

static int
td_on_url(void *ud, const char *url)
{
    struct td_col *c = ud;
    assert_true(c->n < 400);
    c->f[c->n++][TD_TARGET] = strdup(url);
    return c->stop_at != 0 && c->n == c->stop_at;
}

static void
td_reset(struct td_col *c)
{
    for (size_t i = 0; i < c->n; i++) {
        for (int j = 0; j < TD_NFIELDS; j++) {
            free(c->f[i][j]);
            c->f[i][j] = NULL;
        }
    }
    c->n = 0;
    c->stop_at = 0;
}

static struct td_col *
td_new(void)
{
    struct td_col *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    return c;
}

static void
td_free(struct td_col *c)
{
    td_reset(c);
    free(c);
}

/* Field j of link i equals want (NULL meaning absent). */
static void
td_field(const struct td_col *c, size_t i, int j, const char *want)
{
    assert_true(i < c->n);
    const char *got = c->f[i][j];
    if (want == NULL && got == NULL)
        return;
    if (want == NULL || got == NULL || strcmp(want, got) != 0)
        fail_msg("link %zu field %d: got \"%s\", want \"%s\"", i, j,
                 got ? got : "(null)", want ? want : "(null)");
}

static void
td_link(const struct td_col *c, size_t i, const char *target,
        const char *rel, const char *type, const char *anchor,
        const char *title)
{
    td_field(c, i, TD_TARGET, target);
    td_field(c, i, TD_REL, rel);
    td_field(c, i, TD_TYPE, type);
    td_field(c, i, TD_ANCHOR, anchor);
    td_field(c, i, TD_TITLE, title);
}

static int
td_header(struct td_col *c, const char *s)
{
    td_reset(c);
    return rs_link_header_parse(s, strlen(s), td_on_link, c);
}

static int
td_html(struct td_col *c, const char *s)
{
    td_reset(c);
    return rs_html_links(s, strlen(s), td_on_link, c);
}

static int
td_robots(struct td_col *c, const char *s, size_t len)
{
    td_reset(c);
    return rs_robots_sitemaps(s, len, td_on_url, c);
}

/* ------------------------------------------------------- Link header */

/* discover/link_rfc8288: the examples of RFC 8288 section 3.5 parse to
 * the links, relations, anchors and titles the RFC describes. */
static void
test_link_rfc8288(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    assert_int_equal(td_header(c, "<http://example.com/TheBook/chapter2>; "
                                  "rel=\"previous\"; "
                                  "title=\"previous chapter\""), 0);
    assert_int_equal(c->n, 1);
    td_link(c, 0, "http://example.com/TheBook/chapter2", "previous", NULL,
            NULL, "previous chapter");

    assert_int_equal(td_header(c, "</>; rel=\"http://example.net/foo\""), 0);
    td_link(c, 0, "/", "http://example.net/foo", NULL, NULL, NULL);

    assert_int_equal(td_header(c, "</terms>; rel=\"copyright\"; "
                                  "anchor=\"#foo\""), 0);
    td_link(c, 0, "/terms", "copyright", NULL, "#foo", NULL);

    assert_int_equal(td_header(c,
        "</TheBook/chapter2>; rel=\"previous\"; "
        "title*=UTF-8'de'letztes%20Kapitel, "
        "</TheBook/chapter4>; rel=\"next\"; "
        "title*=UTF-8'de'n%c3%a4chstes%20Kapitel"), 0);
    assert_int_equal(c->n, 2);
    td_link(c, 0, "/TheBook/chapter2", "previous", NULL, NULL,
            "letztes Kapitel");
    td_link(c, 1, "/TheBook/chapter4", "next", NULL, NULL,
            "n\xc3\xa4" "chstes Kapitel");

    assert_int_equal(td_header(c, "<http://example.org/>; rel=\"start "
                                  "http://example.net/relation/other\""), 0);
    td_link(c, 0, "http://example.org/",
            "start http://example.net/relation/other", NULL, NULL, NULL);
    assert_true(rs_rel_has(c->f[0][TD_REL], "start"));
    assert_true(rs_rel_has(c->f[0][TD_REL],
                           "http://example.net/relation/other"));

    assert_int_equal(td_header(c, "<https://example.org/>; rel=\"start\", "
                                  "<https://example.org/index>; rel=\"index\""),
                     0);
    assert_int_equal(c->n, 2);
    td_link(c, 0, "https://example.org/", "start", NULL, NULL, NULL);
    td_link(c, 1, "https://example.org/index", "index", NULL, NULL, NULL);
    td_free(c);
}

/* discover/link_resourcesync: the headers ResourceSync discovery and
 * WebSub use (PROTOCOL.md sections 2 and 3.1). */
static void
test_link_resourcesync(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    assert_int_equal(td_header(c, "<http://example.com/dataset1/"
                                  "capabilitylist.xml>; rel=\"resourcesync\""),
                     0);
    td_link(c, 0, "http://example.com/dataset1/capabilitylist.xml",
            "resourcesync", NULL, NULL, NULL);
    assert_int_equal(td_header(c, "<http://src/topic/1>; rel=\"self\", "
                                  "<http://hub/>; rel=\"hub\""), 0);
    assert_int_equal(c->n, 2);
    td_link(c, 0, "http://src/topic/1", "self", NULL, NULL, NULL);
    td_link(c, 1, "http://hub/", "hub", NULL, NULL, NULL);
    td_free(c);
}

/* discover/link_quoted: commas and semicolons inside quoted strings are
 * data, backslash escapes are undone, and an empty quoted value is "". */
static void
test_link_quoted(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    assert_int_equal(td_header(c, "<http://a/>; title=\"x, y; z\", "
                                  "<http://b/>; rel=next; "
                                  "title=\"<c>; rel=d, e\""), 0);
    assert_int_equal(c->n, 2);
    td_link(c, 0, "http://a/", NULL, NULL, NULL, "x, y; z");
    td_link(c, 1, "http://b/", "next", NULL, NULL, "<c>; rel=d, e");

    assert_int_equal(td_header(c, "<a>; title=\"say \\\"hi\\\" \\\\ \\ok\""),
                     0);
    td_link(c, 0, "a", NULL, NULL, NULL, "say \"hi\" \\ ok");
    assert_int_equal(td_header(c, "<a>; title=\"\"; rel=\"\""), 0);
    td_link(c, 0, "a", "", NULL, NULL, "");
    /* an ignored parameter's quoted string is still skipped correctly */
    assert_int_equal(td_header(c, "<a>; hreflang=\"x,\\\"y\"; rel=up, <b>"), 0);
    assert_int_equal(c->n, 2);
    td_link(c, 0, "a", "up", NULL, NULL, NULL);
    /* commas and semicolons inside the target are part of it */
    assert_int_equal(td_header(c, "<http://a/x;y,z>; rel=up"), 0);
    td_link(c, 0, "http://a/x;y,z", "up", NULL, NULL, NULL);
    td_free(c);
}

/* discover/link_params: parameter names are case-insensitive, values may
 * be bare tokens (also the type=a/b and rel=URI that servers send), and a
 * name without a value has the empty string. */
static void
test_link_params(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    assert_int_equal(td_header(c, "<a>; REL=\"Next\"; Type=text/html; "
                                  "TITLE=x; Anchor=#frag"), 0);
    td_link(c, 0, "a", "Next", "text/html", "#frag", "x");
    assert_int_equal(td_header(c, "<a>; "
                                  "rel=http://www.openarchives.org/rs/terms/x"),
                     0);
    td_link(c, 0, "a", "http://www.openarchives.org/rs/terms/x", NULL, NULL,
            NULL);
    assert_int_equal(td_header(c, "<a>; rel; title"), 0);
    td_link(c, 0, "a", "", NULL, NULL, "");
    assert_int_equal(td_header(c, "<a>; media=screen; hreflang=de; "
                                  "crossorigin; x-y=1"), 0);
    td_link(c, 0, "a", NULL, NULL, NULL, NULL);
    td_free(c);
}

/* discover/link_first_wins: a repeated parameter keeps its first value;
 * rel* and title* win over rel and title in either order. */
static void
test_link_first_wins(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    assert_int_equal(td_header(c, "<a>; rel=one; rel=two; type=x; type=y"), 0);
    td_link(c, 0, "a", "one", "x", NULL, NULL);
    assert_int_equal(td_header(c, "<a>; title=plain; title*=UTF-8''star"), 0);
    td_field(c, 0, TD_TITLE, "star");
    assert_int_equal(td_header(c, "<a>; title*=UTF-8''star; title=plain"), 0);
    td_field(c, 0, TD_TITLE, "star");
    assert_int_equal(td_header(c, "<a>; rel*=utf-8'en'n%C3%A4chst; rel=next"),
                     0);
    td_field(c, 0, TD_REL, "n\xc3\xa4" "chst");
    assert_int_equal(td_header(c, "<a>; REL*=UTF-8''a%20b"), 0);
    td_field(c, 0, TD_REL, "a b");
    assert_int_equal(td_header(c, "<a>; title*=\"UTF-8''quoted%21\""), 0);
    td_field(c, 0, TD_TITLE, "quoted!");
    td_free(c);
}

/* discover/link_ext_value_bad: a title* or rel* that is not UTF-8, has bad
 * escapes, %00 or invalid UTF-8 is ignored (the plain parameter, if any,
 * is used) without failing the link. */
static void
test_link_ext_value_bad(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "ISO-8859-1'en'%A3%20rates", "UTF-8''%ZZ", "UTF-8''%4", "UTF-8''%",
        "UTF-8''a%00b", "UTF-8''%C3", "UTF-8''%C0%AF", "UTF-8''%ED%A0%80",
        "UTF-8''%F4%90%80%80", "noquotes", "UTF-8'only-one", "'x'y",
    };
    struct td_col *c = td_new();
    char h[128];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(h, sizeof(h), "<a>; title*=%s; title=fallback; rel*=%s",
                 bad[i], bad[i]);
        assert_int_equal(td_header(c, h), 0);
        assert_int_equal(c->n, 1);
        td_link(c, 0, "a", NULL, NULL, NULL, "fallback");
    }
    assert_int_equal(td_header(c, "<a>; title*=UTF-8''%f0%9f%98%80"), 0);
    td_field(c, 0, TD_TITLE, "\xf0\x9f\x98\x80");
    td_free(c);
}

/* discover/link_whitespace: spaces and tabs around every delimiter and
 * empty list elements are tolerated. */
static void
test_link_whitespace(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    assert_int_equal(td_header(c, " \t<a>  ;  rel = \"next\"  ;type\t=\tx  ,"
                                  "\t<b>;rel=y  ;  "), 0);
    assert_int_equal(c->n, 2);
    td_link(c, 0, "a", "next", "x", NULL, NULL);
    td_link(c, 1, "b", "y", NULL, NULL, NULL);
    assert_int_equal(td_header(c, ", ,<a>,,<b>;;rel=z, ,"), 0);
    assert_int_equal(c->n, 2);
    td_link(c, 0, "a", NULL, NULL, NULL, NULL);
    td_link(c, 1, "b", "z", NULL, NULL, NULL);
    /* a header folded over two lines */
    assert_int_equal(td_header(c, "<a>; rel=up,\r\n <b>; rel=index"), 0);
    assert_int_equal(c->n, 2);
    td_free(c);
}

/* discover/link_no_rel: a link without rel is delivered with rel NULL. */
static void
test_link_no_rel(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    assert_int_equal(td_header(c, "<http://a/>"), 0);
    td_link(c, 0, "http://a/", NULL, NULL, NULL, NULL);
    assert_int_equal(td_header(c, "<http://a/>; type=\"application/xml\", <>"),
                     0);
    assert_int_equal(c->n, 2);
    td_link(c, 0, "http://a/", NULL, "application/xml", NULL, NULL);
    td_link(c, 1, "", NULL, NULL, NULL, NULL);
    td_free(c);
}

/* discover/link_malformed: the first malformed link stops the parse with
 * EINVAL; the links before it were delivered, it and later ones were not. */
static void
test_link_malformed(void **state)
{
    (void)state;
    static const struct {
        const char *h;
        size_t before;
    } cases[] = {
        { "<a>; rel=x, <b; rel=y", 1 },            /* missing '>' */
        { "<a", 0 },
        { "<a>; title=\"unterminated", 0 },
        { "<a>, <b>; title=\"x\\\"", 1 },          /* escaped closing quote */
        { "<a>; title=\"x\\", 0 },
        { "a; rel=x", 0 },                          /* missing '<' */
        { "<a>, b", 1 },
        { "<a> rel=x", 0 },
        { "<a>; rel=\"x\"y", 0 },
        { "<a>; rel=\"x\" \"y\"", 0 },
        { "<a>; rel=x y", 0 },
        { "<a>; rel=", 0 },
        { "<a>; rel= ;", 0 },
        { "<a>; =x", 0 },
        { "<a>; @=x", 0 },
        { "<a>; rel=\"x\"; <b>", 0 },
        { "<<a>", 0 },
        { "<a\x01>", 0 },
        { "<a b>; rel=x", 0 },
        { "<a>; rel=x\x7f", 0 },
        { "<a>; rel=x, <b>; rel=y, <c> junk, <d>", 2 },
    };
    struct td_col *c = td_new();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = td_header(c, cases[i].h);
        if (rc != RS_EINVAL || c->n != cases[i].before)
            fail_msg("'%s': rc %d, %zu delivered", cases[i].h, rc, c->n);
    }
    /* a NUL byte inside the span, quoted or not */
    static const char nul_q[] = "<a>; title=\"x\0y\"";
    td_reset(c);
    assert_int_equal(rs_link_header_parse(nul_q, sizeof(nul_q) - 1,
                                          td_on_link, c), RS_EINVAL);
    static const char nul_t[] = "<a\0b>";
    assert_int_equal(rs_link_header_parse(nul_t, sizeof(nul_t) - 1,
                                          td_on_link, c), RS_EINVAL);
    assert_int_equal(c->n, 0);
    td_free(c);
}

/* discover/link_empty: an empty or blank header holds no links and is not
 * an error; a missing callback is. */
static void
test_link_empty(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    assert_int_equal(td_header(c, ""), 0);
    assert_int_equal(td_header(c, "  \t "), 0);
    assert_int_equal(td_header(c, " , ,"), 0);
    assert_int_equal(c->n, 0);
    assert_int_equal(rs_link_header_parse(NULL, 0, td_on_link, c), 0);
    assert_int_equal(rs_link_header_parse(NULL, 3, td_on_link, c), RS_EINVAL);
    assert_int_equal(rs_link_header_parse("<a>", 3, NULL, c), RS_EINVAL);
    td_free(c);
}

/* n items "<pre><i><post>" joined by sep, in a new buffer. */
static char *
td_many(size_t n, const char *sep, const char *pre, const char *post)
{
    size_t cap = n * (strlen(sep) + strlen(pre) + strlen(post) + 24) + 1;
    size_t len = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    s[0] = '\0';
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(s + len, cap - len, "%s%s%zu%s",
                                i ? sep : "", pre, i, post);
    return s;
}

/* discover/link_cap: RS_DISCOVER_MAX_LINKS links are fine; one more is
 * ETOOBIG after the first RS_DISCOVER_MAX_LINKS were delivered. */
static void
test_link_cap(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    char *s = td_many(RS_DISCOVER_MAX_LINKS, ", ", "<http://h/",
                      ">; rel=\"item\"");
    assert_int_equal(td_header(c, s), 0);
    assert_int_equal(c->n, RS_DISCOVER_MAX_LINKS);
    td_field(c, 255, TD_TARGET, "http://h/255");
    free(s);
    s = td_many(300, ", ", "<http://h/", ">; rel=\"item\"");
    assert_int_equal(td_header(c, s), RS_ETOOBIG);
    assert_int_equal(c->n, RS_DISCOVER_MAX_LINKS);
    free(s);
    /* trailing empty elements past the cap are not links */
    s = td_many(RS_DISCOVER_MAX_LINKS, ",", "<http://h/", ">");
    size_t len = strlen(s);
    char *t = malloc(len + 8);
    assert_non_null(t);
    memcpy(t, s, len);
    memcpy(t + len, " , ,", 5);
    assert_int_equal(td_header(c, t), 0);
    free(t);
    free(s);
    td_free(c);
}

/* discover/link_stop: a callback's non-zero return stops the parse with
 * ESTOPPED; nothing after it is delivered. */
static void
test_link_stop(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    td_reset(c);
    c->stop_at = 2;
    static const char h[] = "<a>, <b>, <c>";
    assert_int_equal(rs_link_header_parse(h, strlen(h), td_on_link, c),
                     RS_ESTOPPED);
    assert_int_equal(c->n, 2);
    td_free(c);
}

/* discover/link_length_bound: only len bytes are read; the input needs no
 * NUL terminator. */
static void
test_link_length_bound(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    static const char h[] = "<a>; rel=x, <b>; title=\"t\"";
    td_reset(c);
    assert_int_equal(rs_link_header_parse(h, 10, td_on_link, c), 0);
    assert_int_equal(c->n, 1);
    td_link(c, 0, "a", "x", NULL, NULL, NULL);
    td_reset(c);
    assert_int_equal(rs_link_header_parse(h, strlen(h) - 1, td_on_link, c),
                     RS_EINVAL);
    assert_int_equal(c->n, 1);
    /* a heap copy without terminator, so ASan sees any overread */
    size_t n = strlen(h);
    char *raw = malloc(n);
    assert_non_null(raw);
    memcpy(raw, h, n);
    td_reset(c);
    assert_int_equal(rs_link_header_parse(raw, n, td_on_link, c), 0);
    assert_int_equal(c->n, 2);
    td_link(c, 1, "b", NULL, NULL, NULL, "t");
    for (size_t k = 0; k < n; k++) {
        td_reset(c);
        int rc = rs_link_header_parse(raw, k, td_on_link, c);
        assert_true(rc == 0 || rc == RS_EINVAL);
    }
    free(raw);
    td_free(c);
}

/* discover/link_alloc_fail: failing each allocation of a parse in turn
 * gives ENOMEM and no leak; with enough memory all links arrive. */
static void
test_link_alloc_fail(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    static const char h[] = "<a>; rel=up; title*=UTF-8''x%20y, <b>; rel=index,"
                            " <c>";
    for (unsigned long n = 1;; n++) {
        td_reset(c);
        tu_alloc_fail_at(n);
        int rc = rs_link_header_parse(h, strlen(h), td_on_link, c);
        unsigned long seen = tu_alloc_count();
        tu_alloc_fail_at(0);
        if (rc == RS_ENOMEM) {
            assert_true(n <= seen);
            continue;
        }
        assert_int_equal(rc, 0);
        assert_true(seen < n);
        assert_int_equal(c->n, 3);
        td_link(c, 0, "a", "up", NULL, NULL, "x y");
        break;
    }
    td_free(c);
}

/* ------------------------------------------------------------ rs_rel_has */

/* discover/rel_has: whole relations only, ASCII case-insensitive, any
 * HTML whitespace between them; NULL or empty never matches. */
static void
test_rel_has(void **state)
{
    (void)state;
    assert_true(rs_rel_has("resourcesync", "resourcesync"));
    assert_true(rs_rel_has("ResourceSync", "resourcesync"));
    assert_true(rs_rel_has("alternate RESOURCESYNC", "resourceSync"));
    assert_true(rs_rel_has("a b c", "b"));
    assert_true(rs_rel_has("  a\tb\nc\r\fd  ", "d"));
    assert_true(rs_rel_has("x http://example.net/rel y",
                           "http://example.net/rel"));
    assert_false(rs_rel_has("resourcesync2", "resourcesync"));
    assert_false(rs_rel_has("resource sync", "resourcesync"));
    assert_false(rs_rel_has("xresourcesync", "resourcesync"));
    assert_false(rs_rel_has("a b", "a b"));
    assert_false(rs_rel_has("", "up"));
    assert_false(rs_rel_has("   ", "up"));
    assert_false(rs_rel_has(NULL, "up"));
    assert_false(rs_rel_has("up", NULL));
    assert_false(rs_rel_has("up", ""));
    assert_false(rs_rel_has("\xc3\x9cP", "\xc3\xbcp"));
}

/* ------------------------------------------------------------------ HTML */

/* discover/html_head_body: every <link> with an href, in head or body, in
 * document order, with rel/type/title; other elements and <link>s without
 * href are not links. */
static void
test_html_head_body(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    static const char page[] =
        "<!DOCTYPE html>\n<html><head><title>t</title>\n"
        "<link rel=\"stylesheet\" href=\"/s.css\" type=\"text/css\" "
        "title=\"S\">\n"
        "<link rel=\"resourcesync\" "
        "href=\"http://example.com/capabilitylist.xml\">\n"
        "<link rel=\"icon\">\n"
        "</head><body><p>text "
        "<a rel=\"resourcesync\" href=\"/not-a-link\">a</a>\n"
        "<link rel='resourcesync' href='/caplist2.xml' type=application/xml>\n"
        "</body></html>\n";
    assert_int_equal(td_html(c, page), 0);
    assert_int_equal(c->n, 3);
    td_link(c, 0, "/s.css", "stylesheet", "text/css", NULL, "S");
    td_link(c, 1, "http://example.com/capabilitylist.xml", "resourcesync",
            NULL, NULL, NULL);
    td_link(c, 2, "/caplist2.xml", "resourcesync", "application/xml", NULL,
            NULL);
    td_free(c);
}

/* discover/html_uppercase: tag and attribute names are case-insensitive;
 * values keep their case; character references in values are decoded. */
static void
test_html_uppercase(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    assert_int_equal(td_html(c, "<HTML><HEAD><LINK REL=\"ResourceSync\" "
                                "HREF=\"http://a/x?p=1&amp;q=&#50;\" "
                                "Title=\"&lt;T&gt;\"></HEAD></HTML>"), 0);
    assert_int_equal(c->n, 1);
    td_link(c, 0, "http://a/x?p=1&q=2", "ResourceSync", NULL, NULL, "<T>");
    assert_true(rs_rel_has(c->f[0][TD_REL], "resourcesync"));
    td_free(c);
}

/* discover/html_broken: pages that are not well-formed still yield their
 * links: no html/head, unclosed elements, stray end tags, junk, a link in
 * an unclosed body, and bare attributes. Comments and script text are not
 * markup. */
static void
test_html_broken(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    assert_int_equal(td_html(c, "<link rel=resourcesync href=/a.xml>"), 0);
    td_link(c, 0, "/a.xml", "resourcesync", NULL, NULL, NULL);

    assert_int_equal(td_html(c, "<html><head><title>x</head></div><p><b>"
                                "<link href=\"/b.xml\" rel=\"resourcesync\">"
                                "<<<>>> &bogus; </i><table><tr><td>"
                                "<link href=\"/c.xml\"></table>"), 0);
    assert_int_equal(c->n, 2);
    td_link(c, 0, "/b.xml", "resourcesync", NULL, NULL, NULL);
    td_link(c, 1, "/c.xml", NULL, NULL, NULL, NULL);

    assert_int_equal(td_html(c, "<!-- <link rel=resourcesync href=/no1> -->"
                                "<script>var s = '<link href=/no2>';</script>"
                                "<link href rel=up>"), 0);
    assert_int_equal(c->n, 1);
    td_link(c, 0, "", "up", NULL, NULL, NULL);

    static const char junk[] = "\x00\x01\xff\xfe garbage <link";
    td_reset(c);
    assert_int_equal(rs_html_links(junk, sizeof(junk) - 1, td_on_link, c), 0);
    assert_int_equal(td_html(c, "<link href=\"/unterminated"), 0);
    assert_int_equal(td_html(c, "<link href=\"/x\" rel=up"), 0);
    assert_true(c->n <= 1);
    td_free(c);
}

/* discover/html_xhtml: XHTML (XML declaration, namespace, self-closing
 * links) is read the same way. */
static void
test_html_xhtml(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    assert_int_equal(td_html(c,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<!DOCTYPE html PUBLIC \"-//W3C//DTD XHTML 1.0 Strict//EN\" "
        "\"http://127.0.0.1:9/xhtml1-strict.dtd\">\n"
        "<html xmlns=\"http://www.w3.org/1999/xhtml\"><head>"
        "<link rel=\"resourcesync\" href=\"/caps.xml\" />"
        "<link rel=\"describedby\" href=\"/desc.xml\"/>"
        "</head><body/></html>"), 0);
    assert_int_equal(c->n, 2);
    td_link(c, 0, "/caps.xml", "resourcesync", NULL, NULL, NULL);
    td_link(c, 1, "/desc.xml", "describedby", NULL, NULL, NULL);
    td_free(c);
}

/* discover/html_cap_stop: more than RS_DISCOVER_MAX_LINKS links is ETOOBIG
 * after the cap; a callback's stop is ESTOPPED; empty input has no links. */
static void
test_html_cap_stop(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    char *s = td_many(300, "\n", "<link rel=x href=\"/l", "\">");
    assert_int_equal(td_html(c, s), RS_ETOOBIG);
    assert_int_equal(c->n, RS_DISCOVER_MAX_LINKS);
    td_field(c, 255, TD_TARGET, "/l255");
    td_reset(c);
    c->stop_at = 3;
    assert_int_equal(rs_html_links(s, strlen(s), td_on_link, c), RS_ESTOPPED);
    assert_int_equal(c->n, 3);
    free(s);
    assert_int_equal(td_html(c, ""), 0);
    assert_int_equal(td_html(c, "   \n"), 0);
    assert_int_equal(c->n, 0);
    assert_int_equal(rs_html_links(NULL, 0, td_on_link, c), 0);
    assert_int_equal(rs_html_links("<p>", 3, NULL, c), RS_EINVAL);
    td_free(c);
}

/* discover/html_alloc_fail: the HTML path under every failing allocation
 * gives ENOMEM or the full answer, and leaks nothing. */
static void
test_html_alloc_fail(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    static const char page[] = "<head><link rel=resourcesync href=/a>"
                               "<link rel=up href=/b></head>";
    for (unsigned long n = 1;; n++) {
        td_reset(c);
        tu_alloc_fail_at(n);
        int rc = rs_html_links(page, strlen(page), td_on_link, c);
        unsigned long seen = tu_alloc_count();
        tu_alloc_fail_at(0);
        if (rc == RS_ENOMEM) {
            assert_true(n <= seen);
            continue;
        }
        assert_int_equal(rc, 0);
        assert_int_equal(c->n, 2);
        break;
    }
    td_free(c);
}

/* ------------------------------------------------------------ robots.txt */

/* discover/robots: Sitemap lines in any case with optional spaces around
 * the colon, comments, blank lines, CRLF, LF and lone CR line ends, a BOM
 * and no final newline; other fields and commented-out lines are not
 * sitemaps. */
static void
test_robots(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    static const char txt[] =
        "\xef\xbb\xbf" "Sitemap: http://a/1.xml\r\n"
        "User-agent: *\r\n"
        "Disallow: /sitemap: http://no/\r\n"
        "# Sitemap: http://no/commented\n"
        "\n"
        "SITEMAP:http://a/2.xml\n"
        "  sitemap \t:\t http://a/3.xml   # the third\r"
        "siteMap: http://a/4.xml\t\n"
        "Sitemaps: http://no/plural\n"
        "Site-map: http://no/dash\n"
        "Sitemap\n"
        "Sitemap:\n"
        "Sitemap:    # nothing\n"
        "Sitemap: http://a/5.xml";
    assert_int_equal(td_robots(c, txt, strlen(txt)), 0);
    assert_int_equal(c->n, 5);
    td_field(c, 0, TD_TARGET, "http://a/1.xml");
    td_field(c, 1, TD_TARGET, "http://a/2.xml");
    td_field(c, 2, TD_TARGET, "http://a/3.xml");
    td_field(c, 3, TD_TARGET, "http://a/4.xml");
    td_field(c, 4, TD_TARGET, "http://a/5.xml");
    td_free(c);
}

/* discover/robots_junk: a value with anything after the URL, or with
 * control bytes, is skipped; the lines around it still count. */
static void
test_robots_junk(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    static const char txt[] = "Sitemap: http://a/1.xml junk\n"
                              "Sitemap: http://a/\x01x.xml\n"
                              "Sitemap: http://a/ok.xml\n"
                              "Sitemap: http://a/\0nul.xml\n"
                              "Sitemap: http://a/2.xml";
    assert_int_equal(td_robots(c, txt, sizeof(txt) - 1), 0);
    assert_int_equal(c->n, 2);
    td_field(c, 0, TD_TARGET, "http://a/ok.xml");
    td_field(c, 1, TD_TARGET, "http://a/2.xml");
    assert_int_equal(td_robots(c, "", 0), 0);
    assert_int_equal(td_robots(c, NULL, 0), 0);
    assert_int_equal(c->n, 0);
    assert_int_equal(rs_robots_sitemaps("x", 1, NULL, c), RS_EINVAL);
    /* only len bytes count */
    assert_int_equal(td_robots(c, "Sitemap: http://a/xyz", 19), 0);
    td_field(c, 0, TD_TARGET, "http://a/x");
    td_free(c);
}

/* discover/robots_limits: a callback's stop is ESTOPPED; more than
 * RS_DISCOVER_MAX_LINKS sitemaps is ETOOBIG after the cap; failing each
 * allocation gives ENOMEM with no leak. */
static void
test_robots_limits(void **state)
{
    (void)state;
    struct td_col *c = td_new();
    char *txt = td_many(300, "\n", "Sitemap: http://a/", ".xml");
    assert_int_equal(td_robots(c, txt, strlen(txt)), RS_ETOOBIG);
    assert_int_equal(c->n, RS_DISCOVER_MAX_LINKS);
    td_field(c, 0, TD_TARGET, "http://a/0.xml");
    td_reset(c);
    c->stop_at = 2;
    assert_int_equal(rs_robots_sitemaps(txt, strlen(txt), td_on_url, c),
                     RS_ESTOPPED);
    assert_int_equal(c->n, 2);
    free(txt);

    static const char three[] = "Sitemap: /1\nSitemap: /2\r\nSitemap: /3";
    for (unsigned long n = 1;; n++) {
        td_reset(c);
        tu_alloc_fail_at(n);
        int rc = rs_robots_sitemaps(three, strlen(three), td_on_url, c);
        unsigned long seen = tu_alloc_count();
        tu_alloc_fail_at(0);
        if (rc == RS_ENOMEM) {
            assert_true(n <= seen);
            assert_int_equal(c->n, n - 1);
            continue;
        }
        assert_int_equal(rc, 0);
        assert_true(seen < n);
        assert_int_equal(c->n, 3);
        td_field(c, 2, TD_TARGET, "/3");
        break;
    }
    td_free(c);
}

#define TD(name, fn) { name, fn, NULL, NULL, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TD("discover/link_rfc8288", test_link_rfc8288),
        TD("discover/link_resourcesync", test_link_resourcesync),
        TD("discover/link_quoted", test_link_quoted),
        TD("discover/link_params", test_link_params),
        TD("discover/link_first_wins", test_link_first_wins),
        TD("discover/link_ext_value_bad", test_link_ext_value_bad),
        TD("discover/link_whitespace", test_link_whitespace),
        TD("discover/link_no_rel", test_link_no_rel),
        TD("discover/link_malformed", test_link_malformed),
        TD("discover/link_empty", test_link_empty),
        TD("discover/link_cap", test_link_cap),
        TD("discover/link_stop", test_link_stop),
        TD("discover/link_length_bound", test_link_length_bound),
        TD("discover/link_alloc_fail", test_link_alloc_fail),
        TD("discover/rel_has", test_rel_has),
        TD("discover/html_head_body", test_html_head_body),
        TD("discover/html_uppercase", test_html_uppercase),
        TD("discover/html_broken", test_html_broken),
        TD("discover/html_xhtml", test_html_xhtml),
        TD("discover/html_cap_stop", test_html_cap_stop),
        TD("discover/html_alloc_fail", test_html_alloc_fail),
        TD("discover/robots", test_robots),
        TD("discover/robots_junk", test_robots_junk),
        TD("discover/robots_limits", test_robots_limits),
    };
    return cmocka_run_group_tests_name("discover", tests, NULL, NULL);
}
