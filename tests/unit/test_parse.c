/*
 * test_parse.c - the streaming parser's contracts: callback order, any
 * chunking, limits checked before work, sticky errors, the callback stop
 * rule, hostile XML, foreign namespaces, every model field, the three
 * check modes and what each makes of a problem, notifications judged by
 * the spec in the reader's view, every error of a document found (and
 * nothing delivered after the first), allocation failure. The
 * spec-example corpus lives in test_corpus.c.
 */
#include "testutil.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "rs_alloc.h"
#include "rs_parse.h"

#define NS "xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" " \
           "xmlns:rs=\"http://www.openarchives.org/rs/terms/\""

static const char CHANGELIST[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<urlset " NS ">\n"
    "  <rs:ln rel=\"up\" href=\"http://example.com/capabilitylist.xml\"/>\n"
    "  <rs:md capability=\"changelist\" from=\"2013-01-02T00:00:00Z\"/>\n"
    "  <url>\n"
    "    <loc>http://example.com/res1</loc>\n"
    "    <rs:md change=\"created\" datetime=\"2013-01-02T13:00:00Z\"/>\n"
    "  </url>\n"
    "  <url>\n"
    "    <loc>http://example.com/res2</loc>\n"
    "    <rs:md change=\"updated\" datetime=\"2013-01-02T14:00:00Z\"/>\n"
    "  </url>\n"
    "  <url>\n"
    "    <loc>http://example.com/res3</loc>\n"
    "    <rs:md change=\"deleted\" datetime=\"2013-01-02T15:00:00Z\"/>\n"
    "  </url>\n"
    "  <rs:ln rel=\"next\" href=\"http://example.com/changelist.xml?page=2\"/>\n"
    "</urlset>\n";

/* Records what the callbacks saw. */
struct rec {
    int heads, ends, entries;
    char order[64];          /* 'h', 'e', 'E' in call order */
    char locs[8][64];
    size_t head_links, end_links;
    int stop_at;             /* on_entry returns stop_rc at this entry */
    int stop_rc;
    int warnings;
    unsigned warn_line;
    int errors;
    unsigned error_lines[8];
};

static void
rec_note(struct rec *r, char c)
{
    size_t n = strlen(r->order);
    if (n + 1 < sizeof(r->order))
        r->order[n] = c;
}

static int
on_head(void *ud, const struct rs_head *h)
{
    struct rec *r = ud;
    r->heads++;
    r->head_links = h->nlinks;
    rec_note(r, 'h');
    return 0;
}

static int
on_entry(void *ud, const struct rs_entry *e)
{
    struct rec *r = ud;
    if (r->entries < 8)
        snprintf(r->locs[r->entries], sizeof(r->locs[0]), "%s", e->loc);
    r->entries++;
    rec_note(r, 'e');
    if (r->stop_at != 0 && r->entries == r->stop_at)
        return r->stop_rc;
    return 0;
}

static int
on_end(void *ud, const struct rs_head *h)
{
    struct rec *r = ud;
    r->ends++;
    r->end_links = h->nlinks;
    rec_note(r, 'E');
    return 0;
}

static void
on_warning(void *ud, unsigned line, const char *msg)
{
    (void)msg;
    struct rec *r = ud;
    r->warnings++;
    r->warn_line = line;
}

static void
on_error(void *ud, unsigned line, const char *msg)
{
    (void)msg;
    struct rec *r = ud;
    if (r->errors < 8)
        r->error_lines[r->errors] = line;
    r->errors++;
}

static const struct rs_parser_cbs CBS = { on_head, on_entry, on_end };

/* Feed doc in chunks of `chunk` bytes; returns the first error or 0. */
static int
feed_chunked(struct rs_parser *p, const char *doc, size_t len, size_t chunk)
{
    for (size_t off = 0; off < len; off += chunk) {
        size_t n = len - off < chunk ? len - off : chunk;
        int rc = rs_parser_feed(p, doc + off, n);
        if (rc != 0)
            return rc;
    }
    return rs_parser_finish(p);
}

static int
parse_str(const char *doc, const struct rs_parse_opts *opts, struct rs_doc **d,
          struct rs_diag *diag)
{
    return rs_doc_parse(doc, strlen(doc), opts, d, diag);
}

/* One thread's share of parse/threads: 200 parses of CHANGELIST, each
 * checked; the number that went wrong. */
static void *
parse_loop(void *arg)
{
    size_t *bad = arg;
    for (int i = 0; i < 200; i++) {
        struct rec r = { 0 };
        struct rs_parser *p = rs_parser_new(NULL, &CBS, &r);
        if (p == NULL ||
            feed_chunked(p, CHANGELIST, strlen(CHANGELIST), 97) != 0 ||
            strcmp(r.order, "heeeE") != 0)
            (*bad)++;
        rs_parser_free(p);
    }
    return NULL;
}

/* parse/threads: parsers on four threads at once (rssub's opener parses a
 * package's manifest while its loop parses other documents). Each gets its
 * callbacks right; under ThreadSanitizer (tests/run.sh runs this test in a
 * TSan build) nothing shared is written: a SAX handler filled in at every
 * parser's creation was such a race (03924f0). */
static void
test_threads(void **state)
{
    (void)state;
    pthread_t th[4];
    size_t bad[4] = { 0 };
    struct rec r = { 0 };
    /* libxml2 set up on this thread first, as the daemons do */
    struct rs_parser *p = rs_parser_new(NULL, &CBS, &r);
    assert_non_null(p);
    assert_int_equal(feed_chunked(p, CHANGELIST, strlen(CHANGELIST), 4096), 0);
    rs_parser_free(p);
    for (int t = 0; t < 4; t++)
        assert_int_equal(pthread_create(&th[t], NULL, parse_loop, &bad[t]), 0);
    for (int t = 0; t < 4; t++) {
        assert_int_equal(pthread_join(th[t], NULL), 0);
        assert_int_equal(bad[t], 0);
    }
}

/* parse/callback_order: head once before the entries, entries in document
 * order, end once with the rel="next" link that came after the entries. */
static void
test_callback_order(void **state)
{
    (void)state;
    struct rec r = { 0 };
    struct rs_parser *p = rs_parser_new(NULL, &CBS, &r);
    assert_non_null(p);
    assert_int_equal(feed_chunked(p, CHANGELIST, strlen(CHANGELIST), 4096), 0);
    assert_string_equal(r.order, "heeeE");
    assert_string_equal(r.locs[2], "http://example.com/res3");
    assert_int_equal(r.head_links, 1);
    assert_int_equal(r.end_links, 2);
    assert_int_equal(rs_parser_entries(p), 3);
    assert_int_equal(rs_parser_bytes(p), strlen(CHANGELIST));
    assert_null(rs_parser_error(p));
    rs_parser_free(p);
}

/* parse/any_chunking: every chunk size from 1 to 97 bytes gives the same
 * callbacks and result as one big feed. */
static void
test_any_chunking(void **state)
{
    (void)state;
    for (size_t chunk = 1; chunk < 98; chunk++) {
        struct rec r = { 0 };
        struct rs_parser *p = rs_parser_new(NULL, &CBS, &r);
        assert_int_equal(feed_chunked(p, CHANGELIST, strlen(CHANGELIST), chunk), 0);
        assert_string_equal(r.order, "heeeE");
        assert_string_equal(r.locs[1], "http://example.com/res2");
        rs_parser_free(p);
    }
}

/* len bytes of src as one gzip member (malloc'ed), its length in *n */
static char *
gz(const char *src, size_t len, size_t *n)
{
    z_stream z = { 0 };
    assert_int_equal(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8,
                                  Z_DEFAULT_STRATEGY), Z_OK);
    size_t cap = deflateBound(&z, len);
    unsigned char *out = malloc(cap);
    assert_non_null(out);
    z.next_in = (Bytef *)(uintptr_t)src;
    z.avail_in = (uInt)len;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    *n = cap - z.avail_out;
    deflateEnd(&z);
    return (char *)out;
}

/* parse/gzipped: with gunzip, a document that starts with gzip's magic is
 * inflated as it is fed (a Source's sitemap.xml.gz), in any chunking, a
 * first piece of one byte too; two members are one document, as gunzip
 * reads them, and zeros padding a member are ignored; a plain one parses
 * as before. Without gunzip it is no XML.
 * A stream cut short or corrupt fails, and the inflated bytes count
 * against max_bytes: a gzip bomb stops at the limit. */
static void
test_gzipped(void **state)
{
    (void)state;
    size_t n, len = strlen(CHANGELIST);
    char *g = gz(CHANGELIST, len, &n);
    struct rs_parse_opts o = { .gunzip = true };
    for (size_t chunk = 1; chunk <= n; chunk += 5) {
        struct rec r = { 0 };
        struct rs_parser *p = rs_parser_new(&o, &CBS, &r);
        assert_int_equal(feed_chunked(p, g, n, chunk), 0);
        assert_string_equal(r.order, "heeeE");
        assert_string_equal(r.locs[2], "http://example.com/res3");
        rs_parser_free(p);
    }
    struct rec r0 = { 0 };
    struct rs_parser *p = rs_parser_new(&o, &CBS, &r0);
    assert_int_equal(feed_chunked(p, CHANGELIST, len, 1), 0);
    assert_string_equal(r0.order, "heeeE");
    rs_parser_free(p);

    struct rs_doc *d = NULL;
    struct rs_diag diag;
    assert_int_not_equal(rs_doc_parse(g, n, NULL, &d, &diag), 0);
    assert_null(d);

    /* two members */
    size_t n1, n2, half = len / 2;
    char *g1 = gz(CHANGELIST, half, &n1), *g2 = gz(CHANGELIST + half,
                                                    len - half, &n2);
    char *both = malloc(n1 + n2);
    assert_non_null(both);
    memcpy(both, g1, n1);
    memcpy(both + n1, g2, n2);
    assert_int_equal(rs_doc_parse(both, n1 + n2, &o, &d, &diag), 0);
    assert_int_equal(d->nentries, 3);
    rs_doc_free(d);
    d = NULL;
    /* zeros after a whole member (a tool's padding): ignored, as gunzip
     * ignores them */
    char *padded = calloc(1, n + 512);
    assert_non_null(padded);
    memcpy(padded, g, n);
    assert_int_equal(rs_doc_parse(padded, n + 512, &o, &d, &diag), 0);
    assert_int_equal(d->nentries, 3);
    rs_doc_free(d);
    d = NULL;
    free(padded);

    /* cut short, at every length; corrupt */
    for (size_t k = 1; k < n; k++) {
        int rc = rs_doc_parse(g, k, &o, &d, &diag);
        assert_int_not_equal(rc, 0);
        assert_null(d);
    }
    assert_int_equal(rs_doc_parse(g, n - 4, &o, &d, &diag), RS_EPARSE);
    assert_non_null(strstr(diag.msg, "gzip"));
    g[n / 2] = (char)(g[n / 2] ^ 0x55);
    assert_int_not_equal(rs_doc_parse(g, n, &o, &d, &diag), 0);
    assert_null(d);

    /* a bomb: 8 MiB of spaces before the root, 8 KiB gzipped */
    size_t big = 8u << 20;
    char *sp = malloc(big + len);
    assert_non_null(sp);
    memset(sp, ' ', big);
    memcpy(sp + big, CHANGELIST, len);
    size_t nb;
    char *bomb = gz(sp, big + len, &nb);
    assert_true(nb < 64 * 1024);
    struct rs_parse_opts lim = { .gunzip = true, .max_bytes = 1u << 20 };
    assert_int_equal(rs_doc_parse(bomb, nb, &lim, &d, &diag), RS_ETOOBIG);
    assert_null(d);
    free(bomb);
    free(sp);
    free(both);
    free(g2);
    free(g1);
    free(g);
}

/* parse/byte_limit_first: a feed that would pass max_bytes fails with
 * RS_ETOOBIG before any of it is parsed (no callback runs). */
static void
test_byte_limit_first(void **state)
{
    (void)state;
    struct rec r = { 0 };
    struct rs_parse_opts o = { .max_bytes = 100 };
    struct rs_parser *p = rs_parser_new(&o, &CBS, &r);
    assert_int_equal(rs_parser_feed(p, CHANGELIST, strlen(CHANGELIST)), RS_ETOOBIG);
    assert_int_equal(r.heads + r.entries, 0);
    assert_int_equal(rs_parser_error(p)->code, RS_ETOOBIG);
    assert_non_null(strstr(rs_parser_error(p)->msg, "larger than"));
    /* sticky */
    assert_int_equal(rs_parser_feed(p, "x", 1), RS_ETOOBIG);
    assert_int_equal(rs_parser_finish(p), RS_ETOOBIG);
    rs_parser_free(p);
}

/* parse/entry_limit: one entry over max_entries is RS_ETOOBIG, blamed on
 * that entry's line, and no callback sees it. */
static void
test_entry_limit(void **state)
{
    (void)state;
    struct rec r = { 0 };
    struct rs_parse_opts o = { .max_entries = 2 };
    struct rs_parser *p = rs_parser_new(&o, &CBS, &r);
    assert_int_equal(feed_chunked(p, CHANGELIST, strlen(CHANGELIST), 10), RS_ETOOBIG);
    assert_int_equal(r.entries, 2);
    assert_int_equal(rs_parser_error(p)->line, 13);
    assert_non_null(strstr(rs_parser_error(p)->msg, "more than 2 entries"));
    assert_non_null(strstr(rs_parser_error(p)->msg, "publish an index"));
    rs_parser_free(p);

    /* a notification has no index: the advice is to send several */
    static const char notif[] =
        "<urlset " NS "><rs:md capability=\"changelist-notification\"/>"
        "<url><loc>http://e.com/a</loc><rs:md change=\"deleted\"/></url>"
        "<url><loc>http://e.com/b</loc><rs:md change=\"deleted\"/></url>"
        "<url><loc>http://e.com/c</loc><rs:md change=\"deleted\"/></url>"
        "</urlset>";
    p = rs_parser_new(&o, &CBS, &r);
    assert_int_equal(feed_chunked(p, notif, strlen(notif), 10), RS_ETOOBIG);
    assert_null(strstr(rs_parser_error(p)->msg, "publish an index"));
    assert_non_null(strstr(rs_parser_error(p)->msg, "send several"));
    rs_parser_free(p);
}

/* parse/callback_stop: a callback returning non-zero stops the parse; a
 * negative value is returned as is, a positive one as RS_ESTOPPED; no
 * callback runs afterwards. */
static void
test_callback_stop(void **state)
{
    (void)state;
    struct rec r = { .stop_at = 2, .stop_rc = 1 };
    struct rs_parser *p = rs_parser_new(NULL, &CBS, &r);
    assert_int_equal(feed_chunked(p, CHANGELIST, strlen(CHANGELIST), 7), RS_ESTOPPED);
    assert_string_equal(r.order, "hee");
    rs_parser_free(p);

    struct rec r2 = { .stop_at = 1, .stop_rc = RS_ECANCELED };
    p = rs_parser_new(NULL, &CBS, &r2);
    assert_int_equal(feed_chunked(p, CHANGELIST, strlen(CHANGELIST), 4096), RS_ECANCELED);
    assert_int_equal(r2.entries, 1);
    assert_int_equal(r2.ends, 0);
    rs_parser_free(p);
}

/* parse/finish_twice: finishing twice is a state error, not a re-parse. */
static void
test_finish_twice(void **state)
{
    (void)state;
    struct rs_parser *p = rs_parser_new(NULL, NULL, NULL);
    assert_int_equal(rs_parser_feed(p, CHANGELIST, strlen(CHANGELIST)), 0);
    assert_int_equal(rs_parser_finish(p), 0);
    assert_int_equal(rs_parser_finish(p), RS_ESTATE);
    assert_int_equal(rs_parser_feed(p, "x", 1), RS_ESTATE);
    rs_parser_free(p);
    rs_parser_free(NULL);
}

/* parse/every_field: every rs:md and rs:ln attribute lands in the model,
 * entities and CDATA are decoded, <loc> whitespace is trimmed. */
static void
test_every_field(void **state)
{
    (void)state;
    static const char doc[] =
        "<urlset " NS " xmlns:hub=\"urn:x-rshub:1\" hub:id=\"5-1\" hub:topic=\"http://t/\">"
        "<rs:ln rel=\"up\" href=\"http://e.com/cl.xml\"/>"
        "<rs:md capability=\"resourcelist\" at=\"2013-01-03T09:00:00.5+01:00\" "
        "completed=\"2013-01-03T09:01Z\"/>"
        "<url><loc>\n  http://e.com/a?x=1&amp;y=2  \n</loc>"
        "<lastmod>2013</lastmod><changefreq>daily</changefreq>"
        "<rs:md hash=\"md5:1584abdf8ebdc9802ac0c6a7402c03b6 "
        "sha-256:854f61290e2e197a11bc91063afce22e43f8ccc655237050ace766adc68dc784\" "
        "length=\"8876\" type=\"text/html\" encoding=\"gzip\" path=\"/r/a\"/>"
        "<rs:ln rel=\"duplicate\" href=\"http://m.com/a?b=1&amp;c=&lt;2&gt;&#x41;\" pri=\"1\" "
        "modified=\"2013-01-02T00:00:00Z\" length=\"12\" type=\"text/plain\" "
        "hash=\"md5:1584abdf8ebdc9802ac0c6a7402c03b6\" encoding=\"br\" path=\"/p\"/>"
        "</url>"
        "<url><loc><![CDATA[http://e.com/b<c>]]></loc></url>"
        "</urlset>";
    struct rs_doc *d = NULL;
    struct rs_diag diag;
    assert_int_equal(parse_str(doc, NULL, &d, &diag), 0);
    assert_string_equal(d->head.hub_id, "5-1");
    assert_string_equal(d->head.hub_topic, "http://t/");
    assert_int_equal(d->head.md.capability, RS_CAP_RESOURCELIST);
    /* 09:00:00.5+01:00 == 08:00:00.5Z */
    assert_true(d->head.md.at == (int64_t)1357200000 * 1000000 + 500000);
    assert_true(d->head.md.completed == (int64_t)1357203660 * 1000000);
    assert_int_equal(d->nentries, 2);
    const struct rs_entry *e = &d->entries[0];
    assert_string_equal(e->loc, "http://e.com/a?x=1&y=2");
    assert_true(e->lastmod == (int64_t)1356998400 * 1000000);
    assert_int_equal(e->changefreq, RS_FREQ_DAILY);
    assert_int_equal(e->md.hash.n, 2);
    assert_int_equal(e->md.hash.d[1].algo, RS_HASH_SHA256);
    assert_int_equal(e->md.length, 8876);
    assert_string_equal(e->md.type, "text/html");
    assert_string_equal(e->md.encoding, "gzip");
    assert_string_equal(e->md.path, "/r/a");
    assert_int_equal(e->nlinks, 1);
    assert_string_equal(e->links[0].rel, "duplicate");
    /* entities in attribute values arrive decoded, not as &#38; */
    assert_string_equal(e->links[0].href, "http://m.com/a?b=1&c=<2>A");
    assert_int_equal(e->links[0].pri, 1);
    assert_int_equal(e->links[0].length, 12);
    assert_true(e->links[0].modified == (int64_t)1357084800 * 1000000);
    assert_int_equal(e->links[0].hash.n, 1);
    assert_string_equal(e->links[0].encoding, "br");
    assert_string_equal(e->links[0].path, "/p");
    assert_string_equal(d->entries[1].loc, "http://e.com/b<c>");
    rs_doc_free(d);
}

/* parse/foreign_ignored: attributes and elements of other namespaces (even
 * ones named like ours) are ignored, not rejected; prefixed rs: attributes
 * are not ResourceSync attributes. */
static void
test_foreign_ignored(void **state)
{
    (void)state;
    static const char doc[] =
        "<urlset " NS " xmlns:x=\"urn:x\" x:a=\"1\">"
        "<x:meta><loc>http://evil/</loc><x:deep><x:deeper/></x:deep></x:meta>"
        "<rs:md capability=\"resourcelist\" at=\"2013-01-01\" x:capability=\"changelist\"/>"
        "<rs:ln rel=\"up\" href=\"http://e.com/cl\"/>"
        "<url x:b=\"2\"><loc>http://e.com/a</loc><x:loc>http://evil/</x:loc>"
        "<rs:md length=\"3\" x:length=\"zzz\" rs:length=\"also ignored\"/>"
        "<priority>0.5</priority></url>"
        "</urlset>";
    struct rs_doc *d = NULL;
    assert_int_equal(parse_str(doc, NULL, &d, NULL), 0);
    assert_int_equal(d->head.md.capability, RS_CAP_RESOURCELIST);
    assert_int_equal(d->nentries, 1);
    assert_string_equal(d->entries[0].loc, "http://e.com/a");
    assert_int_equal(d->entries[0].md.length, 3);
    rs_doc_free(d);
}

/* parse/warnings_and_strict: a missing rel="up" is a warning with the rs:md
 * line by default, and an RS_EINVALID error under strict. */
static void
test_warnings_and_strict(void **state)
{
    (void)state;
    static const char doc[] =
        "<urlset " NS ">\n"
        "<rs:md capability=\"resourcelist\" at=\"2013-01-01T00:00:00Z\"/>\n"
        "<url><loc>http://e.com/a</loc></url>\n"
        "</urlset>";
    struct rec r = { 0 };
    struct rs_parse_opts o = { .on_warning = on_warning, .warning_ud = &r };
    struct rs_doc *d = NULL;
    struct rs_diag diag;
    assert_int_equal(parse_str(doc, &o, &d, &diag), 0);
    assert_int_equal(r.warnings, 1);
    assert_int_equal(r.warn_line, 2);
    rs_doc_free(d);

    o.strict = true;
    assert_int_equal(parse_str(doc, &o, &d, &diag), RS_EINVALID);
    assert_null(d);
    assert_int_equal(diag.line, 2);
    assert_non_null(strstr(diag.msg, "rel=\"up\""));
}

/* parse/hostile_xml: DTDs (XXE, billion laughs), undefined entities, deep
 * nesting, invalid UTF-8 and oversized text values are refused quickly. */
static void
test_hostile_xml(void **state)
{
    (void)state;
    static const struct {
        const char *doc;
        int rc;
        const char *msg;
    } cases[] = {
        { "<!DOCTYPE u [<!ENTITY e SYSTEM \"file:///etc/passwd\">]>"
          "<urlset " NS "><url><loc>&e;</loc></url></urlset>",
          RS_EINVALID, "DOCTYPE" },
        { "<?xml version=\"1.0\"?><!DOCTYPE l [<!ENTITY a \"aaaaaaaaaa\">"
          "<!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">"
          "<!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;\">]><urlset " NS
          "><url><loc>&c;</loc></url></urlset>",
          RS_EINVALID, "DOCTYPE" },
        { "<urlset " NS "><rs:md capability=\"resourcelist\"/><url><loc>&x;</loc></url></urlset>",
          RS_EPARSE, "undefined entity &x;" },
        { "<urlset " NS "><rs:md capability=\"resourcelist\"/><url><loc>http://e.com/\xff\xfe</loc></url></urlset>",
          RS_EPARSE, "well-formed" },
        { "<urlset " NS "><url><loc>http://a/</loc></url>", RS_EINVALID, "rs:md" },
        { "<urlset " NS "><rs:md capability=\"resourcelist\"/><url><loc>http://a/</loc></url>",
          RS_EPARSE, "truncated" },
        { "not xml at all", RS_EPARSE, "well-formed" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct rs_doc *d = NULL;
        struct rs_diag diag;
        int rc = parse_str(cases[i].doc, NULL, &d, &diag);
        if (rc != cases[i].rc || strstr(diag.msg, cases[i].msg) == NULL)
            fail_msg("case %zu: rc %d (%s), want %d with '%s'", i, rc,
                     diag.msg, cases[i].rc, cases[i].msg);
        assert_null(d);
    }

    /* 1,000 levels of nesting inside an entry */
    size_t n = 1000, cap = n * 8 + 512, len = 0;
    char *deep = malloc(cap);
    len += (size_t)snprintf(deep, cap, "<urlset %s><rs:md capability=\"resourcelist\"/><url>", NS);
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(deep + len, cap - len, "<a>");
    struct rs_doc *d = NULL;
    struct rs_diag diag;
    assert_int_equal(rs_doc_parse(deep, len, NULL, &d, &diag), RS_EINVALID);
    assert_non_null(strstr(diag.msg, "nested deeper"));
    free(deep);

    /* a 70,000-byte <loc> */
    size_t big = 70000;
    char *doc = malloc(big + 512);
    len = (size_t)snprintf(doc, 512, "<urlset %s><rs:md capability=\"resourcelist\"/><url><loc>http://e.com/", NS);
    memset(doc + len, 'a', big);
    len += big;
    len += (size_t)snprintf(doc + len, 512, "</loc></url></urlset>");
    assert_int_equal(rs_doc_parse(doc, len, NULL, &d, &diag), RS_ETOOBIG);
    assert_non_null(strstr(diag.msg, "text value longer"));
    free(doc);
}

/* parse/structure_errors: misplaced, repeated and empty elements get
 * RS_EINVALID with the line of the element at fault (an empty <loc> once
 * reached memcpy with a NULL source, and a root link after the entries
 * escaped the link rules: both found by fuzzing). */
static void
test_structure_errors(void **state)
{
    (void)state;
    static const struct {
        const char *doc;
        unsigned line;
        const char *msg;
    } cases[] = {
        { "<urlset " NS ">\n<rs:md capability=\"resourcelist\"/>\n<sitemap><loc>http://a/</loc></sitemap></urlset>",
          3, "<sitemap> inside <urlset>" },
        { "<urlset " NS ">\n<rs:md capability=\"resourcelist\"/>\n<rs:md capability=\"resourcelist\"/></urlset>",
          3, "more than one root <rs:md>" },
        { "<urlset " NS ">\n<url><loc>http://a/</loc></url>\n<rs:md capability=\"resourcelist\"/></urlset>",
          1, "no <rs:md>" },
        { "<urlset " NS ">\n<rs:md capability=\"resourcelist\"/>\n<url><loc>http://a/</loc>\n<loc>http://b/</loc></url></urlset>",
          4, "more than one <loc>" },
        { "<urlset " NS ">\n<rs:md capability=\"resourcelist\"/>\n<url><loc>http://a/</loc>\n<rs:md/><rs:md/></url></urlset>",
          4, "more than one <rs:md>" },
        { "<urlset " NS ">\n<rs:md capability=\"changelist\"/>\n<url><loc>http://a/</loc>\n<rs:md change=\"moved\"/></url></urlset>",
          4, "change=\"moved\"" },
        { "<urlset " NS ">\n<rs:md capability=\"resourcelist\"/>\n<url><loc>http://a/</loc>\n<rs:md length=\"-1\"/></url></urlset>",
          4, "length=\"-1\"" },
        { "<urlset " NS ">\n<rs:md capability=\"resourcelist\"/>\n<url><loc>http://a/</loc>\n<rs:ln rel=\"x\" href=\"http://b/\" pri=\"0\"/></url></urlset>",
          4, "pri=\"0\"" },
        { "<urlset " NS ">\n<rs:md capability=\"resourcelist\"/>\n<url><loc>http://a/</loc>\n<lastmod>2013-02-30</lastmod></url></urlset>",
          4, "<lastmod>2013-02-30</lastmod>" },
        { "<urlset " NS ">\n<rs:md capability=\"resourcelist\"/>\n<url><loc>http://a/<b/></loc></url></urlset>",
          3, "inside a text element" },
        { "<urlset " NS ">\n<rs:md capability=\"resourcelist\"/>\n<url><loc></loc></url></urlset>",
          3, "<url> without <loc>" },
        { "<urlset " NS ">\n<rs:md capability=\"resourcelist\"/>\n<url><loc>http://a/</loc><lastmod/></url></urlset>",
          3, "<lastmod></lastmod> is not" },
        /* (judged in the spec's mode: the reader ignores the link) */
        { "<urlset " NS ">\n<rs:md capability=\"resourcelist\" at=\"2013-01-01T00:00:00Z\"/>\n<url><loc>http://a/</loc></url>\n<rs:ln href=\"http://b/\"/></urlset>",
          4, "without rel" },
        { "<urlset xmlns=\"urn:wrong\">\n</urlset>", 1, "Sitemap namespace" },
        { "<feed xmlns=\"http://www.w3.org/2005/Atom\"/>", 1, "root element <feed>" },
    };
    const struct rs_parse_opts spec = { .mode = RS_CHECK_SPEC };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct rs_doc *d = NULL;
        struct rs_diag diag;
        memset(&diag, 0, sizeof(diag));
        bool in_spec = strstr(cases[i].msg, "without rel") != NULL;
        int rc = parse_str(cases[i].doc, in_spec ? &spec : NULL, &d, &diag);
        if (rc != RS_EINVALID || diag.line != cases[i].line ||
            strstr(diag.msg, cases[i].msg) == NULL)
            fail_msg("case %zu: rc %d line %u '%s'; want line %u with '%s'",
                     i, rc, diag.line, diag.msg, cases[i].line, cases[i].msg);
    }
}

/* One parse of doc in mode m: its code, warnings, errors and entries. */
static int
parse_mode(const char *doc, enum rs_check_mode m, unsigned max_errors,
           struct rec *r)
{
    memset(r, 0, sizeof(*r));
    struct rs_parse_opts o = { .mode = m, .on_warning = on_warning,
                               .on_error = on_error, .warning_ud = r,
                               .max_errors = max_errors };
    struct rs_parser *p = rs_parser_new(&o, &CBS, r);
    assert_non_null(p);
    int rc = feed_chunked(p, doc, strlen(doc), 7);
    rs_parser_free(p);
    return rc;
}

/* parse/modes: a MUST whose meaning stays clear (a Change List newest
 * first) is a warning to the reader and an error to the spec and strict;
 * a SHOULD (no rel="up") a warning to both, an error under strict; the
 * `strict` flag is RS_CHECK_STRICT whatever the mode says. */
static void
test_modes(void **state)
{
    (void)state;
    static const char must[] =
        "<urlset " NS ">\n"
        "<rs:ln rel=\"up\" href=\"http://e.com/cl\"/>\n"
        "<rs:md capability=\"changelist\" from=\"2013-01-01T00:00:00Z\"/>\n"
        "<url><loc>http://e.com/b</loc><rs:md change=\"updated\" "
        "datetime=\"2013-01-02T10:00:00Z\"/></url>\n"
        "<url><loc>http://e.com/a</loc><rs:md change=\"created\" "
        "datetime=\"2013-01-02T09:00:00Z\"/></url>\n"
        "</urlset>";
    static const char should[] =
        "<urlset " NS ">\n"
        "<rs:md capability=\"resourcelist\" at=\"2013-01-01T00:00:00Z\"/>\n"
        "<url><loc>http://e.com/a</loc></url>\n"
        "</urlset>";
    struct rec r;
    assert_int_equal(parse_mode(must, RS_CHECK_READER, 0, &r), 0);
    assert_int_equal(r.warnings, 1);
    assert_int_equal(r.warn_line, 5);
    assert_int_equal(r.entries, 2);
    assert_int_equal(parse_mode(must, RS_CHECK_SPEC, 0, &r), RS_EINVALID);
    assert_int_equal(r.errors, 1);
    assert_int_equal(r.error_lines[0], 5);
    assert_int_equal(r.entries, 1);   /* delivered before the problem */
    assert_int_equal(r.ends, 0);
    assert_int_equal(parse_mode(must, RS_CHECK_STRICT, 0, &r), RS_EINVALID);

    assert_int_equal(parse_mode(should, RS_CHECK_READER, 0, &r), 0);
    assert_int_equal(r.warnings, 1);
    assert_int_equal(parse_mode(should, RS_CHECK_SPEC, 0, &r), 0);
    assert_int_equal(r.warnings, 1);
    assert_int_equal(r.ends, 1);
    assert_int_equal(parse_mode(should, RS_CHECK_STRICT, 0, &r),
                     RS_EINVALID);

    struct rs_parse_opts o = { .strict = true, .mode = RS_CHECK_READER };
    struct rs_doc *d = NULL;
    assert_int_equal(parse_str(should, &o, &d, NULL), RS_EINVALID);
    assert_null(d);
}

/* parse/uri_flaws: a <loc> that starts like an http(s) URI and still is
 * not one (RFC 3986: a character it holds only percent-encoded, a '%' not
 * followed by two hex digits, a port over 65535, an IPv6 literal not
 * closed) breaks a MUST: an error by the spec, a warning a reader goes
 * past; a URI with escapes, a port and an IPv6 literal is fine. Duplicate
 * <lastmod>s are an error (which one the Source meant cannot be known). */
static void
test_uri_flaws(void **state)
{
    (void)state;
    static const char *const flawed[] = {
        "http://e.com/a&lt;b&gt;", "http://e.com/a\"b", "http://e.com/{x}",
        "http://e.com/a|b", "http://e.com/a^b", "http://e.com/a`b",
        "http://e.com/a\\b", "http://e.com/%zz", "http://e.com/%4",
        "http://e.com:99999/", "http://e.com:8x/", "http://[::1/",
        "http://[::1]x/",
    };
    static const char *const fine[] = {
        "http://e.com/a%20b?x=1&amp;y='2'#f", "http://e.com:8080/",
        "http://[::1]:8080/x", "http://[::1]/", "http://u@e.com/",
    };
    char doc[512];
    struct rec r;
    for (size_t i = 0; i < sizeof(flawed) / sizeof(flawed[0]); i++) {
        snprintf(doc, sizeof(doc), "<urlset " NS "><rs:md capability="
                 "\"resourcelist\" at=\"2013-01-01T00:00:00Z\"/><url><loc>"
                 "%s</loc></url></urlset>", flawed[i]);
        if (parse_mode(doc, RS_CHECK_SPEC, 0, &r) != RS_EINVALID)
            fail_msg("flawed[%zu] %s: not an error by the spec", i,
                     flawed[i]);
        assert_int_equal(parse_mode(doc, RS_CHECK_READER, 0, &r), 0);
        assert_int_equal(r.entries, 1);
        assert_true(r.warnings >= 1);
    }
    for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
        snprintf(doc, sizeof(doc), "<urlset " NS "><rs:ln rel=\"up\" "
                 "href=\"http://e.com/c\"/><rs:md capability=\"resourcelist\" "
                 "at=\"2013-01-01T00:00:00Z\"/><url><loc>%s</loc></url>"
                 "</urlset>", fine[i]);
        if (parse_mode(doc, RS_CHECK_STRICT, 0, &r) != 0)
            fail_msg("fine[%zu] %s: refused", i, fine[i]);
    }
    static const char twice[] =
        "<urlset " NS "><rs:md capability=\"resourcelist\" "
        "at=\"2013-01-01T00:00:00Z\"/><url><loc>http://e.com/a</loc>"
        "<lastmod>2013-01-01T00:00:00Z</lastmod>"
        "<lastmod>2014-01-01T00:00:00Z</lastmod></url></urlset>";
    assert_int_equal(parse_mode(twice, RS_CHECK_READER, 0, &r), RS_EINVALID);
}

/* parse/notifications_as_spec: in the reader's view a notification is
 * judged as the spec judges it (a hub, reading with zeroed options, must
 * refuse what breaks a MUST): a time without a zone, an empty <rs:ln/>, a
 * hash that is not hex are errors there, while the same in a Change List
 * is a warning; a notification's missing rel="up" stays a warning. */
static void
test_notifications_as_spec(void **state)
{
    (void)state;
    static const char *const quirks[] = {
        "<rs:md change=\"updated\" datetime=\"2013-01-02T10:00:00\"/>",
        "<rs:md change=\"updated\" datetime=\"2013-01-02T10:00:00Z\"/><rs:ln/>",
        "<rs:md change=\"updated\" datetime=\"2013-01-02T10:00:00Z\" "
        "hash=\"md5:xyz\"/>",
    };
    char doc[1024];
    struct rec r;
    for (size_t i = 0; i < sizeof(quirks) / sizeof(quirks[0]); i++) {
        snprintf(doc, sizeof(doc), "<urlset " NS ">\n"
                 "<rs:ln rel=\"up\" href=\"http://e.com/cl\"/>\n"
                 "<rs:md capability=\"%s\"%s/>\n"
                 "<url><loc>http://e.com/a</loc>%s</url>\n</urlset>",
                 "changelist-notification", "", quirks[i]);
        if (parse_mode(doc, RS_CHECK_READER, 0, &r) != RS_EINVALID)
            fail_msg("notification, quirk %zu: accepted", i);
        snprintf(doc, sizeof(doc), "<urlset " NS ">\n"
                 "<rs:ln rel=\"up\" href=\"http://e.com/cl\"/>\n"
                 "<rs:md capability=\"%s\"%s/>\n"
                 "<url><loc>http://e.com/a</loc>%s</url>\n</urlset>",
                 "changelist", " from=\"2013-01-01T00:00:00Z\"", quirks[i]);
        if (parse_mode(doc, RS_CHECK_READER, 0, &r) != 0 || r.warnings != 1)
            fail_msg("Change List, quirk %zu: not a single warning", i);
    }
    static const char noup[] =
        "<urlset " NS "><rs:md capability=\"changelist-notification\"/>"
        "<url><loc>http://e.com/a</loc><rs:md change=\"deleted\"/></url>"
        "</urlset>";
    assert_int_equal(parse_mode(noup, RS_CHECK_READER, 0, &r), 0);
    assert_int_equal(r.warnings, 1);
}

/* parse/root_rules_wait_for_the_head: a root-level problem found before
 * the root rs:md (an empty <rs:ln/> first, as Sources put their links) is
 * judged once the document has said what it is: a warning in a Resource
 * List, an error in a framework notification, on the link's own line. */
static void
test_root_rules_wait_for_the_head(void **state)
{
    (void)state;
    char doc[512];
    struct rec r;
    snprintf(doc, sizeof(doc), "<urlset " NS ">\n<rs:ln/>\n"
             "<rs:ln rel=\"up\" href=\"http://e.com/cl\"/>\n"
             "<rs:md capability=\"resourcelist\" at=\"2013-01-01T00:00:00Z\"/>"
             "\n<url><loc>http://e.com/a</loc></url>\n</urlset>");
    assert_int_equal(parse_mode(doc, RS_CHECK_READER, 0, &r), 0);
    assert_int_equal(r.warnings, 1);
    assert_int_equal(r.warn_line, 2);
    assert_int_equal(r.head_links, 1);
    snprintf(doc, sizeof(doc), "<urlset " NS ">\n<rs:ln/>\n"
             "<rs:ln rel=\"up\" href=\"http://e.com/cl\"/>\n"
             "<rs:md capability=\"framework-notification\"/>\n"
             "<url><loc>http://e.com/rl</loc><rs:md capability="
             "\"resourcelist\" change=\"created\"/></url>\n</urlset>");
    assert_int_equal(parse_mode(doc, RS_CHECK_READER, 0, &r), RS_EINVALID);
    assert_int_equal(r.errors, 1);
    assert_int_equal(r.error_lines[0], 2);
    assert_int_equal(r.heads, 0);
}

/* parse/every_error: with max_errors a validator hears of every error,
 * each with its line, while nothing more is delivered after the first
 * (the head, if it broke a rule, is not delivered at all); feed says 0
 * until finish says the first error; at max_errors the parse stops. */
static void
test_every_error(void **state)
{
    (void)state;
    static const char doc[] =
        "<urlset " NS ">\n"
        "<rs:md capability=\"changelist\"/>\n"
        "<url><loc>http://e.com/a</loc><rs:md change=\"updated\" "
        "datetime=\"2013-01-02T09:00:00Z\"/></url>\n"
        "<url><loc>rel/b</loc><rs:md change=\"updated\" "
        "datetime=\"2013-01-02T10:00:00Z\"/></url>\n"
        "<url><loc>http://e.com/c</loc><rs:md change=\"gone\"/></url>\n"
        "<url><loc>http://e.com/d</loc><rs:md change=\"created\" "
        "datetime=\"2013-01-02T08:00:00Z\" length=\"x\"/></url>\n"
        "</urlset>";
    struct rec r;
    /* no from (2), a relative loc (4), an unknown change (5), a bad
     * length (6); the order of d is not judged: its entry is broken */
    assert_int_equal(parse_mode(doc, RS_CHECK_SPEC, 100, &r), RS_EINVALID);
    assert_int_equal(r.errors, 4);
    assert_int_equal(r.error_lines[0], 2);
    assert_int_equal(r.error_lines[1], 4);
    assert_int_equal(r.error_lines[2], 5);
    assert_int_equal(r.error_lines[3], 6);
    assert_int_equal(r.heads, 0);
    assert_int_equal(r.entries, 0);
    assert_int_equal(r.ends, 0);

    /* the reader's view takes the missing from as a warning: the first
     * error is then the loc, and the entry before it was delivered */
    assert_int_equal(parse_mode(doc, RS_CHECK_READER, 100, &r), RS_EINVALID);
    assert_int_equal(r.errors, 3);
    assert_int_equal(r.heads, 1);
    assert_int_equal(r.entries, 1);

    /* the limit */
    assert_int_equal(parse_mode(doc, RS_CHECK_SPEC, 2, &r), RS_EINVALID);
    assert_int_equal(r.errors, 2);

    /* feed in one piece: 0 while errors are collected */
    memset(&r, 0, sizeof(r));
    struct rs_parse_opts o = { .mode = RS_CHECK_SPEC, .max_errors = 100,
                               .on_error = on_error, .warning_ud = &r };
    struct rs_parser *p = rs_parser_new(&o, &CBS, &r);
    assert_non_null(p);
    assert_int_equal(rs_parser_feed(p, doc, strlen(doc)), 0);
    assert_int_equal(rs_parser_finish(p), RS_EINVALID);
    assert_int_equal(rs_parser_errors(p), 4);
    const struct rs_diag *dg = rs_parser_error(p);
    assert_non_null(dg);
    assert_int_equal(dg->line, 2);
    assert_non_null(strstr(dg->msg, "from"));
    rs_parser_free(p);

    /* an XML error still stops at once, after what was found before it */
    static const char broken[] =
        "<urlset " NS ">\n<rs:md capability=\"changelist\"/>\n"
        "<url><loc>http://e.com/a</loc></url>\n<oops></urlset>";
    assert_int_equal(parse_mode(broken, RS_CHECK_SPEC, 100, &r), RS_EINVALID);
    assert_int_equal(r.errors, 3);   /* from, change, the XML */
}

/* parse/utf8_only: documents must be UTF-8 (Sitemaps); another declared
 * encoding, a UTF-16 byte order mark or NUL bytes are refused the same way
 * whatever the chunking (an unknown encoding name once parsed differently
 * in 1-byte and whole feeds: found by fuzzing); UTF-8 with a BOM and
 * US-ASCII are fine. */
static void
test_utf8_only(void **state)
{
    (void)state;
    static const char body[] =
        "<urlset " NS "><rs:ln rel=\"up\" href=\"http://e/c\"/>"
        "<rs:md capability=\"resourcelist\" at=\"2013-01-01\"/>"
        "<url><loc>http://e.com/a</loc></url></urlset>";
    static const struct {
        const char *prefix;
        size_t prefix_len;
        int rc;
    } cases[] = {
        { "<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?>", 0, RS_EINVALID },
        { "<?xml version='1.0' encoding='UT-F8'?>", 0, RS_EINVALID },
        { "\xFF\xFE<\0", 4, RS_EINVALID },
        { "<?xml version=\"1.0\" encoding=\"utf-8\"?>", 0, 0 },
        { "\xEF\xBB\xBF<?xml version=\"1.0\" encoding=\"US-ASCII\"?>", 0, 0 },
        { "", 0, 0 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t plen = cases[i].prefix_len ? cases[i].prefix_len
                                          : strlen(cases[i].prefix);
        size_t len = plen + sizeof(body) - 1;
        char *doc = malloc(len);
        memcpy(doc, cases[i].prefix, plen);
        memcpy(doc + plen, body, sizeof(body) - 1);
        for (size_t chunk = 1; chunk <= len; chunk = chunk * 3 + 1) {
            struct rs_parser *p = rs_parser_new(NULL, NULL, NULL);
            int rc = feed_chunked(p, doc, len, chunk);
            if (rc != cases[i].rc)
                fail_msg("case %zu chunk %zu: rc %d (%s), want %d", i, chunk,
                         rc, rs_parser_error(p) ? rs_parser_error(p)->msg : "",
                         cases[i].rc);
            if (rc != 0)
                assert_non_null(strstr(rs_parser_error(p)->msg, "UTF-8"));
            rs_parser_free(p);
        }
        free(doc);
    }
}

/* parse/nul_byte_told: a ZIP package is told as one; a NUL byte is told
 * as one, with its offset and
 * line, wherever it is (the first bytes, the declaration, past the first
 * 512 bytes) and whatever the chunking; a document that starts as UTF-16
 * or UCS-4 does is still told as such. */
static void
test_nul_byte_told(void **state)
{
    (void)state;
    char doc[2048];
    size_t len = 0;
    len += (size_t)snprintf(doc, sizeof(doc),
                            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                            "<urlset %s>\n<rs:ln rel=\"up\" href=\"http://e/c\"/>"
                            "<rs:md capability=\"resourcelist\" at=\"2013-01-01\"/>\n",
                            NS);
    for (int i = 0; i < 24; i++)
        len += (size_t)snprintf(doc + len, sizeof(doc) - len,
                                "<url><loc>http://e.com/%d</loc></url>\n", i);
    len += (size_t)snprintf(doc + len, sizeof(doc) - len, "</urlset>\n");
    assert_true(len > 700);
    /* offsets: the first byte, in the declaration, on line 3, past 512 */
    size_t at[] = { 0, 10, 0, 0 };
    at[2] = (size_t)(strstr(doc, "<rs:md") - doc) + 3;
    at[3] = (size_t)(strstr(doc, "http://e.com/23") - doc);
    assert_true(at[3] > 512);
    for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++) {
        char *d = malloc(len);
        memcpy(d, doc, len);
        d[at[k]] = '\0';
        unsigned line = 1;
        for (size_t i = 0; i < at[k]; i++)
            line += doc[i] == '\n';
        char want[64];
        snprintf(want, sizeof(want), "a NUL byte at offset %zu: not XML text", at[k]);
        for (size_t chunk = 1; chunk <= len; chunk = chunk * 3 + 1) {
            struct rs_parser *p = rs_parser_new(NULL, NULL, NULL);
            int rc = feed_chunked(p, d, len, chunk);
            const struct rs_diag *dg = rs_parser_error(p);
            if (rc != RS_EPARSE || dg == NULL || strcmp(dg->msg, want) != 0 ||
                dg->line != line)
                fail_msg("offset %zu chunk %zu: rc %d line %u \"%s\", want "
                         "line %u \"%s\"", at[k], chunk, rc, dg ? dg->line : 0,
                         dg ? dg->msg : "", line, want);
            rs_parser_free(p);
        }
        free(d);
    }
    /* UTF-16 LE without a byte order mark: "<?" in two bytes each */
    static const char wide[] = "<\0?\0x\0m\0l\0 \0v\0?\0>\0<\0u\0/\0>\0";
    struct rs_parser *p = rs_parser_new(NULL, NULL, NULL);
    assert_int_equal(feed_chunked(p, wide, sizeof(wide) - 1, 64), RS_EINVALID);
    assert_non_null(strstr(rs_parser_error(p)->msg, "UTF-16 or UCS-4"));
    rs_parser_free(p);
    /* a ZIP package (a dump's) is named as one, in any chunking */
    static const char zip[] = "PK\x03\x04\x14\0\0\0\x08\0manifest.xml";
    for (size_t chunk = 1; chunk <= 64; chunk *= 4) {
        p = rs_parser_new(NULL, NULL, NULL);
        assert_int_equal(feed_chunked(p, zip, sizeof(zip) - 1, chunk),
                         RS_EPARSE);
        assert_non_null(strstr(rs_parser_error(p)->msg, "a ZIP package"));
        rs_parser_free(p);
    }
}

/* parse/big_in_one_call: a 12 MB document handed over in one call parses
 * (libxml2 refuses more than 10 MB per call; the parser feeds it pieces). */
static void
test_big_in_one_call(void **state)
{
    (void)state;
    size_t n = 48000, cap = n * 400 + 1024, len = 0;
    char *doc = malloc(cap);
    len += (size_t)snprintf(doc, cap, "<urlset %s><rs:ln rel=\"up\" href=\"http://e.com/c\"/>"
                            "<rs:md capability=\"resourcelist\" at=\"2013-01-01\"/>", NS);
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(doc + len, cap - len,
                                "<url><loc>http://example.com/a/rather/long/path/to/make/"
                                "the/document/big/enough/for/the/test/%08zu/item-%08zu.html</loc><lastmod>"
                                "2013-01-02T13:00:00Z</lastmod><rs:md length=\"%zu\" "
                                "type=\"text/html\" hash=\"md5:1584abdf8ebdc9802ac0c6a"
                                "7402c03b6\"/></url>\n", i, i, i);
    len += (size_t)snprintf(doc + len, cap - len, "</urlset>");
    assert_true(len > 12000000);
    struct rs_doc *d = NULL;
    struct rs_diag diag;
    int rc = rs_doc_parse(doc, len, NULL, &d, &diag);
    if (rc != 0)
        fail_msg("rc %d: %s", rc, diag.msg);
    assert_int_equal(d->nentries, n);
    rs_doc_free(d);
    free(doc);
}

/* parse/large_buffer: a document over libxml2's 10 MB single-chunk limit
 * parses whole from one buffer (rs_doc_parse feeds it in pieces). */
static void
test_large_buffer(void **state)
{
    (void)state;
    const char *head = "<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" "
                       "xmlns:rs=\"http://www.openarchives.org/rs/terms/\">"
                       "<rs:md capability=\"resourcelist\" "
                       "at=\"2020-01-01T00:00:00Z\"/>";
    size_t n = 300000, cap = strlen(head) + n * 60 + 32, len;
    char *doc = malloc(cap);
    assert_non_null(doc);
    len = (size_t)snprintf(doc, cap, "%s", head);
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(doc + len, cap - len,
                                "<url><loc>http://example.com/r/%06d</loc>"
                                "</url>", (int)i);
    len += (size_t)snprintf(doc + len, cap - len, "</urlset>");
    assert_true(len > 12u * 1024 * 1024);
    struct rs_parse_opts o = { .max_entries = n };
    struct rs_doc *d = NULL;
    assert_int_equal(rs_doc_parse(doc, len, &o, &d, NULL), 0);
    assert_int_equal(d->nentries, n);
    rs_doc_free(d);
    free(doc);
}

/* parse/alloc_failure: failing the Nth allocation, for every N, gives
 * RS_ENOMEM (never a crash or a leak), and past the last one success. */
static void
test_alloc_failure(void **state)
{
    (void)state;
    tu_alloc_fail_at(ULONG_MAX);
    struct rs_doc *d = NULL;
    assert_int_equal(parse_str(CHANGELIST, NULL, &d, NULL), 0);
    unsigned long total = tu_alloc_count();
    rs_doc_free(d);
    assert_true(total > 3);
    for (unsigned long n = 1; n <= total; n++) {
        tu_alloc_fail_at(n);
        struct rs_diag diag;
        int rc = parse_str(CHANGELIST, NULL, &d, &diag);
        tu_alloc_fail_at(0);
        if (rc != RS_ENOMEM)
            fail_msg("allocation %lu of %lu failed but rc = %d", n, total, rc);
        assert_null(d);
    }
    tu_alloc_fail_at(0);
}

/* Documents for parse/unique: the root on lines 1-3, an entry a line. */
#define UQ_HEAD(cap, time) \
    "<urlset " NS ">\n<rs:ln rel=\"up\" href=\"http://e.com/cl\"/>\n" \
    "<rs:md capability=\"" cap "\" " time "=\"2013-01-01T00:00:00Z\"/>\n"
#define UQ_URL(loc, md) \
    "<url><loc>http://e.com/" loc "</loc><rs:md " md "/></url>\n"

/* rs_doc_parse of doc in mode m with opts.unique (or without): its code,
 * and the first error's line and message in *diag. */
static int
parse_unique(const char *doc, enum rs_check_mode m, bool unique,
             struct rs_diag *diag, struct rec *r)
{
    memset(r, 0, sizeof(*r));
    memset(diag, 0, sizeof(*diag));
    struct rs_parse_opts o = { .mode = m, .unique = unique,
                               .on_warning = on_warning, .warning_ud = r };
    struct rs_doc *d = NULL;
    int rc = parse_str(doc, &o, &d, diag);
    rs_doc_free(d);
    return rc;
}

/* parse/unique: with opts.unique, a <loc> listed twice in a Resource Dump
 * Manifest is an error in every mode, on the second entry's line, naming
 * the loc and both entries; in a Resource List it is a should (a warning,
 * an error under strict); a Change List and a Change Dump Manifest list
 * a loc once per change; two manifest entries with one path ("/a" and
 * "a": one ZIP member) are an error; without the option nothing is looked
 * for, as readers read. */
static void
test_unique(void **state)
{
    (void)state;
    static const char rdm[] =
        UQ_HEAD("resourcedump-manifest", "at")
        UQ_URL("a", "path=\"/a\"")
        UQ_URL("b", "path=\"/b\"")
        UQ_URL("a", "path=\"/c\"")
        "</urlset>";
    static const char rdm_path[] =
        UQ_HEAD("resourcedump-manifest", "at")
        UQ_URL("a", "path=\"/a\"")
        UQ_URL("b", "path=\"a\"")
        "</urlset>";
    static const char rl[] =
        UQ_HEAD("resourcelist", "at")
        UQ_URL("a", "length=\"1\"")
        UQ_URL("b", "length=\"1\"")
        UQ_URL("a", "length=\"2\"")
        "</urlset>";
    static const char cl[] =
        UQ_HEAD("changelist", "from")
        UQ_URL("a", "change=\"created\" datetime=\"2013-01-02T00:00:00Z\"")
        UQ_URL("a", "change=\"updated\" datetime=\"2013-01-03T00:00:00Z\"")
        "</urlset>";
    static const char cdm[] =
        UQ_HEAD("changedump-manifest", "from")
        UQ_URL("a", "change=\"created\" datetime=\"2013-01-02T00:00:00Z\" "
               "path=\"/1/a\"")
        UQ_URL("a", "change=\"updated\" datetime=\"2013-01-03T00:00:00Z\" "
               "path=\"/2/a\"")
        UQ_URL("a", "change=\"deleted\" datetime=\"2013-01-04T00:00:00Z\"")
        "</urlset>";
    static const char cdm_path[] =
        UQ_HEAD("changedump-manifest", "from")
        UQ_URL("a", "change=\"created\" datetime=\"2013-01-02T00:00:00Z\" "
               "path=\"/1/a\"")
        UQ_URL("b", "change=\"created\" datetime=\"2013-01-03T00:00:00Z\" "
               "path=\"/1/a\"")
        "</urlset>";
    struct rs_diag diag;
    struct rec r;

    for (int m = RS_CHECK_READER; m <= RS_CHECK_STRICT; m++) {
        enum rs_check_mode mode = (enum rs_check_mode)m;
        assert_int_equal(parse_unique(rdm, mode, true, &diag, &r),
                         RS_EINVALID);
        assert_int_equal(diag.line, 6);
        assert_non_null(strstr(diag.msg, "<loc> http://e.com/a is listed "
                                         "twice (entry 1, line 4, then "
                                         "entry 3, line 6)"));
        assert_non_null(strstr(diag.msg, "Resource Dump Manifest"));
        assert_int_equal(parse_unique(rdm_path, mode, true, &diag, &r),
                         RS_EINVALID);
        assert_int_equal(diag.line, 5);
        assert_non_null(strstr(diag.msg, "path \"a\" is given twice "
                                         "(entry 1, line 4, then entry 2, "
                                         "line 5"));
        assert_int_equal(parse_unique(cdm_path, mode, true, &diag, &r),
                         RS_EINVALID);
        assert_int_equal(diag.line, 5);
        assert_int_equal(parse_unique(cl, mode, true, &diag, &r), 0);
        assert_int_equal(r.warnings, 0);
        assert_int_equal(parse_unique(cdm, mode, true, &diag, &r), 0);
        assert_int_equal(r.warnings, 0);
    }
    assert_int_equal(parse_unique(rl, RS_CHECK_SPEC, true, &diag, &r), 0);
    assert_int_equal(r.warnings, 1);
    assert_int_equal(r.warn_line, 6);
    assert_int_equal(parse_unique(rl, RS_CHECK_READER, true, &diag, &r), 0);
    assert_int_equal(r.warnings, 1);
    assert_int_equal(parse_unique(rl, RS_CHECK_STRICT, true, &diag, &r),
                     RS_EINVALID);
    assert_int_equal(diag.line, 6);
    assert_non_null(strstr(diag.msg, "one <url> for each resource"));

    /* the readers' view without the option: as before */
    assert_int_equal(parse_unique(rdm, RS_CHECK_READER, false, &diag, &r), 0);
    assert_int_equal(parse_unique(rdm_path, RS_CHECK_SPEC, false, &diag, &r),
                     0);
    assert_int_equal(parse_unique(rl, RS_CHECK_STRICT, false, &diag, &r), 0);
}

/* parse/unique_alloc_failure: failing each allocation of a parse with
 * opts.unique (the set grows past its first size) gives RS_ENOMEM, never
 * a verdict on a half-remembered document, and leaks nothing. */
static void
test_unique_alloc_failure(void **state)
{
    (void)state;
    char doc[16384];
    size_t n = (size_t)snprintf(doc, sizeof(doc), "%s",
                                UQ_HEAD("resourcelist", "at"));
    for (int i = 0; i < 80; i++)
        n += (size_t)snprintf(doc + n, sizeof(doc) - n,
                              "<url><loc>http://e.com/%d</loc></url>\n", i);
    snprintf(doc + n, sizeof(doc) - n, "</urlset>");
    const struct rs_parse_opts o = { .unique = true };
    struct rs_doc *d = NULL;
    tu_alloc_fail_at(ULONG_MAX);
    assert_int_equal(parse_str(doc, &o, &d, NULL), 0);
    unsigned long total = tu_alloc_count();
    rs_doc_free(d);
    for (unsigned long k = 1; k <= total; k++) {
        tu_alloc_fail_at(k);
        int rc = parse_str(doc, &o, &d, NULL);
        tu_alloc_fail_at(0);
        if (rc != RS_ENOMEM)
            fail_msg("allocation %lu of %lu failed but rc = %d", k, total,
                     rc);
        assert_null(d);
    }
    tu_alloc_fail_at(0);
}

/* ------------------------------------------------- skip_bad_entries */

/* A Change List with three good entries and three bad ones: a raw space
 * in a <loc> (line 10, rs_check_entry's error), a bad datetime (line 15,
 * a value error), no <loc> at all (line 17, rs_check_entry's). */
static const char SKIPDOC[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"                 /* 1 */
    "<urlset " NS ">\n"                                              /* 2 */
    "  <rs:ln rel=\"up\" href=\"http://example.com/cap.xml\"/>\n"    /* 3 */
    "  <rs:md capability=\"changelist\" from=\"2013-01-02T00:00:00Z\"/>\n"
    "  <url>\n"                                                      /* 5 */
    "    <loc>http://example.com/a</loc>\n"
    "    <rs:md change=\"created\" datetime=\"2013-01-02T13:00:00Z\"/>\n"
    "  </url>\n"
    "  <url>\n"                                                      /* 9 */
    "    <loc>http://example.com/b c</loc>\n"                        /* 10 */
    "    <rs:md change=\"created\" datetime=\"2013-01-02T13:30:00Z\"/>\n"
    "  </url>\n"
    "  <url>\n"                                                      /* 13 */
    "    <loc>http://example.com/d</loc>\n"
    "    <rs:md change=\"updated\" datetime=\"yesterday\"/>\n"       /* 15 */
    "  </url>\n"
    "  <url>\n"                                                      /* 17 */
    "    <rs:md change=\"updated\" datetime=\"2013-01-02T13:45:00Z\"/>\n"
    "  </url>\n"
    "  <url>\n"
    "    <loc>http://example.com/e</loc>\n"
    "    <rs:md change=\"updated\" datetime=\"2013-01-02T14:00:00Z\"/>\n"
    "  </url>\n"
    "  <url>\n"
    "    <loc>http://example.com/f</loc>\n"
    "    <rs:md change=\"deleted\" datetime=\"2013-01-02T15:00:00Z\"/>\n"
    "  </url>\n"
    "</urlset>\n";

struct bad_rec {
    struct rec r;
    int bad;
    unsigned lines[4];
    char msgs[4][256];
    char locs[4][64];          /* "(null)" when the entry had none */
    int stop_at;               /* on_bad_entry returns -5 at this one */
};

static int
on_bad(void *ud, const struct rs_entry *e, unsigned line, const char *msg)
{
    struct bad_rec *b = ud;
    if (b->bad < 4) {
        b->lines[b->bad] = line;
        snprintf(b->msgs[b->bad], sizeof(b->msgs[0]), "%s", msg);
        snprintf(b->locs[b->bad], sizeof(b->locs[0]), "%s",
                 e->loc != NULL ? e->loc : "(null)");
    }
    b->bad++;
    rec_note(&b->r, 'b');
    return b->stop_at != 0 && b->bad == b->stop_at ? -5 : 0;
}


/* parse/skip_bad_entries: each bad entry is skipped and told once, with
 * its line and why; the good ones are delivered, whatever the chunking. */
static void
test_skip_bad_entries(void **state)
{
    (void)state;
    size_t len = strlen(SKIPDOC);
    for (size_t chunk = 1; chunk <= len; chunk = chunk < 8 ? chunk + 1
                                                           : chunk * 3) {
        struct bad_rec b = { 0 };
        struct rs_parse_opts o = { .skip_bad_entries = true,
                                   .on_bad_entry = on_bad,
                                   .on_error = on_error,
                                   .warning_ud = &b };
        struct rs_parser *p = rs_parser_new(&o, &CBS, &b);
        assert_non_null(p);
        assert_int_equal(feed_chunked(p, SKIPDOC, len, chunk), 0);
        assert_string_equal(b.r.order, "hebbbeeE");
        assert_int_equal(b.r.entries, 3);
        assert_string_equal(b.r.locs[0], "http://example.com/a");
        assert_string_equal(b.r.locs[1], "http://example.com/e");
        assert_string_equal(b.r.locs[2], "http://example.com/f");
        assert_int_equal(b.bad, 3);
        assert_int_equal(b.lines[0], 9);   /* the entry's <url> */
        assert_non_null(strstr(b.msgs[0], "\"http://example.com/b c\" is "
                               "not an absolute http(s) URI"));
        assert_string_equal(b.locs[0], "http://example.com/b c");
        assert_int_equal(b.lines[1], 15);  /* the <rs:md> at fault */
        assert_non_null(strstr(b.msgs[1], "datetime=\"yesterday\""));
        assert_string_equal(b.locs[1], "http://example.com/d");
        assert_int_equal(b.lines[2], 17);
        assert_non_null(strstr(b.msgs[2], "without <loc>"));
        assert_string_equal(b.locs[2], "(null)");
        /* not errors of the document */
        assert_int_equal(b.r.errors, 0);
        assert_null(rs_parser_error(p));
        assert_int_equal(rs_parser_errors(p), 0);
        assert_int_equal(rs_parser_skipped(p), 3);
        assert_int_equal(rs_parser_entries(p), 3);
        rs_parser_free(p);
    }
}

/* parse/skip_off_by_default: without the option the first bad entry
 * fails the document, as before, and nothing is skipped. */
static void
test_skip_off_by_default(void **state)
{
    (void)state;
    struct bad_rec b = { 0 };
    struct rs_parse_opts off = { .on_bad_entry = on_bad, .warning_ud = &b };
    struct rs_parser *p = rs_parser_new(&off, &CBS, &b);
    assert_non_null(p);
    assert_int_equal(feed_chunked(p, SKIPDOC, strlen(SKIPDOC), 7),
                     RS_EINVALID);
    assert_int_equal(b.r.entries, 1);
    assert_int_equal(b.bad, 0);
    assert_int_equal(rs_parser_skipped(p), 0);
    assert_int_equal(rs_parser_error(p)->line, 9);
    rs_parser_free(p);

    /* rs_doc_parse has no one to tell: the option is ignored there */
    struct rs_parse_opts o = { .skip_bad_entries = true };
    struct rs_doc *d = NULL;
    struct rs_diag diag;
    assert_int_equal(parse_str(SKIPDOC, &o, &d, &diag), RS_EINVALID);
    assert_null(d);
    assert_int_equal(diag.line, 9);
}

/* parse/skip_fatal_still_fails: with the option, what is not one
 * entry's still fails the document: XML, the head, the entry limit, a
 * callback's stop. */
static void
test_skip_fatal_still_fails(void **state)
{
    (void)state;
    struct bad_rec b = { 0 };
    struct rs_parse_opts o = { .skip_bad_entries = true,
                               .on_bad_entry = on_bad, .warning_ud = &b };
    /* malformed XML after a bad entry */
    static const char broken[] =
        "<urlset " NS "><rs:md capability=\"resourcelist\" "
        "at=\"2013-01-02T00:00:00Z\"/>"
        "<url><loc>http://x.org/a b</loc></url>"
        "<url><loc>http://x.org/c</loc></urlx></urlset>";
    struct rs_parser *p = rs_parser_new(&o, &CBS, &b);
    assert_int_equal(feed_chunked(p, broken, strlen(broken), 5), RS_EPARSE);
    assert_int_equal(b.bad, 1);
    assert_int_equal(b.r.ends, 0);
    rs_parser_free(p);

    /* a head error: no capability */
    static const char nocap[] =
        "<urlset " NS "><rs:md at=\"2013-01-02T00:00:00Z\"/>"
        "<url><loc>http://x.org/a</loc></url></urlset>";
    memset(&b, 0, sizeof(b));
    p = rs_parser_new(&o, &CBS, &b);
    assert_int_equal(feed_chunked(p, nocap, strlen(nocap), 3), RS_EINVALID);
    assert_int_equal(b.r.entries + b.bad, 0);
    rs_parser_free(p);

    /* the entry limit is the document's */
    static const char three[] =
        "<urlset " NS "><rs:md capability=\"resourcelist\" "
        "at=\"2013-01-02T00:00:00Z\"/>"
        "<url><loc>http://x.org/a</loc></url>"
        "<url><loc>http://x.org/b</loc></url>"
        "<url><loc>http://x.org/c</loc></url></urlset>";
    struct rs_parse_opts lim = o;
    lim.max_entries = 2;
    memset(&b, 0, sizeof(b));
    p = rs_parser_new(&lim, &CBS, &b);
    assert_int_equal(feed_chunked(p, three, strlen(three), 4), RS_ETOOBIG);
    assert_int_equal(b.r.entries, 2);
    assert_int_equal(b.bad, 0);
    assert_non_null(strstr(rs_parser_error(p)->msg, "more than 2 entries"));
    rs_parser_free(p);

    /* on_bad_entry may stop the parse, as any callback */
    memset(&b, 0, sizeof(b));
    b.stop_at = 2;
    p = rs_parser_new(&o, &CBS, &b);
    assert_int_equal(feed_chunked(p, SKIPDOC, strlen(SKIPDOC), 11), -5);
    assert_int_equal(b.bad, 2);
    assert_int_equal(b.r.entries, 1);
    rs_parser_free(p);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_callback_order),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_any_chunking),
        cmocka_unit_test(test_gzipped),
        cmocka_unit_test(test_byte_limit_first),
        cmocka_unit_test(test_entry_limit),
        cmocka_unit_test(test_callback_stop),
        cmocka_unit_test(test_finish_twice),
        cmocka_unit_test(test_every_field),
        cmocka_unit_test(test_foreign_ignored),
        cmocka_unit_test(test_warnings_and_strict),
        cmocka_unit_test(test_hostile_xml),
        cmocka_unit_test(test_structure_errors),
        cmocka_unit_test(test_modes),
        cmocka_unit_test(test_uri_flaws),
        cmocka_unit_test(test_notifications_as_spec),
        cmocka_unit_test(test_root_rules_wait_for_the_head),
        cmocka_unit_test(test_every_error),
        cmocka_unit_test(test_utf8_only),
        cmocka_unit_test(test_nul_byte_told),
        cmocka_unit_test(test_big_in_one_call),
        cmocka_unit_test(test_large_buffer),
        cmocka_unit_test(test_alloc_failure),
        cmocka_unit_test(test_unique),
        cmocka_unit_test(test_unique_alloc_failure),
        cmocka_unit_test(test_skip_bad_entries),
        cmocka_unit_test(test_skip_off_by_default),
        cmocka_unit_test(test_skip_fatal_still_fails),
    };
    return cmocka_run_group_tests_name("parse", tests, NULL, NULL);
}
