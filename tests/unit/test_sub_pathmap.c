/* test_sub_pathmap.c - resource URI -> mirror path (subscriber/pathmap.c):
 * normal and hostile URIs, prefix boundaries, several sites, maps, queries,
 * limits, bad configuration, and every allocation failing in turn. */
#include "testutil.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pathmap.h"
#include "rs_alloc.h"

struct pm_case {
    const char *uri;
    int rc;
    const char *want;     /* the path (rc 0), or a substring of why */
};

/* Run every case of a table against pm, naming the failing one. */
static void
pm_run(const struct pathmap *pm, const struct pm_case *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char out0[] = "untouched";
        char *out = out0;
        const char *why = "untouched";
        int rc = pathmap_path(pm, c[i].uri, &out, &why);
        if (rc != c[i].rc)
            fail_msg("%s: rc %d, want %d (why: %s)", c[i].uri, rc, c[i].rc,
                     why != NULL ? why : "-");
        if (rc == 0) {
            assert_null(why);
            if (strcmp(out, c[i].want) != 0)
                fail_msg("%s: got \"%s\", want \"%s\"", c[i].uri, out,
                         c[i].want);
            rs_free(out);
        } else {
            assert_null(out);
            assert_non_null(why);
            if (c[i].want != NULL && strstr(why, c[i].want) == NULL)
                fail_msg("%s: why \"%s\" lacks \"%s\"", c[i].uri, why,
                         c[i].want);
        }
    }
}

/* Append s to the NUL-terminated buf of size sz. */
static void
pm_cat(char *buf, size_t sz, const char *s)
{
    size_t n = strlen(buf);
    assert_true(n + strlen(s) < sz);
    memcpy(buf + n, s, strlen(s) + 1);
}

#define RUN(pm, table) pm_run(pm, table, sizeof(table) / sizeof(table[0]))

static struct pathmap *
pm_with(const char *const *prefixes)
{
    struct pathmap *pm = pathmap_new();
    assert_non_null(pm);
    for (const char *const *p = prefixes; *p != NULL; p++) {
        const char *why = NULL;
        int rc = pathmap_add_prefix(pm, *p, &why);
        if (rc != 0)
            fail_msg("add_prefix %s: %d %s", *p, rc, why ? why : "-");
    }
    return pm;
}

/* A string of n copies of c (static buffer, n < 8000). */
static const char *
pm_rep(const char *head, char c, size_t n, const char *tail)
{
    static char buf[3][9000];
    static int k;
    char *b = buf[k++ % 3];
    size_t h = strlen(head);
    memcpy(b, head, h);
    memset(b + h, c, n);
    snprintf(b + h + n, sizeof(buf[0]) - h - n, "%s", tail);
    return b;
}

/* pathmap/single_site: one prefix: the decoded URI path, relative; '/'
 * paths get index.html; the query stays in the last segment. */
static void
test_single_site(void **state)
{
    (void)state;
    const char *const pre[] = { "http://127.0.0.1:8080/", NULL };
    struct pathmap *pm = pm_with(pre);
    const struct pm_case c[] = {
        { "http://127.0.0.1:8080/a.txt", 0, "a.txt" },
        { "http://127.0.0.1:8080/dir/sub/f.xml", 0, "dir/sub/f.xml" },
        { "HTTP://127.0.0.1:8080/x", 0, "x" },
        { "http://127.0.0.1:8080/", 0, "index.html" },
        { "http://127.0.0.1:8080", 0, "index.html" },
        { "http://127.0.0.1:8080/d/", 0, "d/index.html" },
        { "http://127.0.0.1:8080/a%20b/%C3%A9t%C3%A9", 0,
          "a b/\xc3\xa9t\xc3\xa9" },
        { "http://127.0.0.1:8080/\xc3\xa9", 0, "\xc3\xa9" },
        { "http://127.0.0.1:8080/%ff%FE", 0, "\xff\xfe" },  /* not UTF-8 */
        { "http://127.0.0.1:8080/q?x=1&y=/z", 0, "q?x=1&y=%2Fz" },
        { "http://127.0.0.1:8080/q?a=%2F", 0, "q?a=%2F" },
        { "http://127.0.0.1:8080/q?a=b?c", 0, "q?a=b?c" },
        { "http://127.0.0.1:8080/d/?page=2", 0, "d/index.html?page=2" },
        { "http://127.0.0.1:8080/?x", 0, "index.html?x" },
        { "http://127.0.0.1:8080/f#frag", 0, "f" },
        { "http://127.0.0.1:8080/f?#frag", 0, "f" },
        { "http://127.0.0.1:8080/f?q#frag/../x", 0, "f?q" },
        { "http://127.0.0.1:8080/%2e%2e%2e", 0, "..." },
        { "http://127.0.0.1:8080/..a/b..", 0, "..a/b.." },
        { "http://127.0.0.1:8080/.well-known/x", 0, ".well-known/x" },
        { "http://127.0.0.1:8080/x.rssub", 0, "x.rssub" },
        { "http://127.0.0.1:8080/%7euser/", 0, "~user/index.html" },
        { "http://127.0.0.1:8080/a;b,c=d", 0, "a;b,c=d" },
    };
    RUN(pm, c);
    pathmap_free(pm);
}

/* pathmap/hostile: traversal (also encoded), encoded separators, control
 * bytes, empty segments, bad escapes, the reserved name, userinfo and
 * other schemes are refused with a reason. */
static void
test_hostile(void **state)
{
    (void)state;
    const char *const pre[] = { "http://127.0.0.1:8080/", NULL };
    struct pathmap *pm = pm_with(pre);
    const struct pm_case c[] = {
        { "http://127.0.0.1:8080/../etc/passwd", RS_EINVAL, "'..'" },
        { "http://127.0.0.1:8080/a/../../x", RS_EINVAL, "'..'" },
        { "http://127.0.0.1:8080/a/..", RS_EINVAL, "'..'" },
        { "http://127.0.0.1:8080/%2e%2e/x", RS_EINVAL, "'..'" },
        { "http://127.0.0.1:8080/%2E%2e/x", RS_EINVAL, "'..'" },
        { "http://127.0.0.1:8080/.%2e/x", RS_EINVAL, "'..'" },
        { "http://127.0.0.1:8080/a/./b", RS_EINVAL, "'.'" },
        { "http://127.0.0.1:8080/a/%2e/b", RS_EINVAL, "'.'" },
        { "http://127.0.0.1:8080/.", RS_EINVAL, "'.'" },
        { "http://127.0.0.1:8080/a%2Fb", RS_EINVAL, "%2F" },
        { "http://127.0.0.1:8080/a%2f..%2f..%2fb", RS_EINVAL, "%2F" },
        { "http://127.0.0.1:8080/%2Fetc%2Fpasswd", RS_EINVAL, "%2F" },
        { "http://127.0.0.1:8080/a%5Cb", RS_EINVAL, "backslash" },
        { "http://127.0.0.1:8080/..%5C..%5Cx", RS_EINVAL, "backslash" },
        { "http://127.0.0.1:8080/a\\b", RS_EINVAL, "backslash" },
        { "http://127.0.0.1:8080/a%00b", RS_EINVAL, "NUL" },
        { "http://127.0.0.1:8080/a%00", RS_EINVAL, "NUL" },
        { "http://127.0.0.1:8080/a%0Ab", RS_EINVAL, "control" },
        { "http://127.0.0.1:8080/a%1fb", RS_EINVAL, "control" },
        { "http://127.0.0.1:8080/a%7Fb", RS_EINVAL, "control" },
        { "http://127.0.0.1:8080/a//b", RS_EINVAL, "empty" },
        { "http://127.0.0.1:8080//etc/passwd", RS_EINVAL, "empty" },
        { "http://127.0.0.1:8080/a//", RS_EINVAL, "empty" },
        { "http://127.0.0.1:8080/a%zz", RS_EINVAL, "percent" },
        { "http://127.0.0.1:8080/a%", RS_EINVAL, "percent" },
        { "http://127.0.0.1:8080/a%4", RS_EINVAL, "percent" },
        { "http://127.0.0.1:8080/a%4/b", RS_EINVAL, "percent" },
        { "http://127.0.0.1:8080/%%41", RS_EINVAL, "percent" },
        { "http://127.0.0.1:8080/.rssub-tmp.abc123", RS_EINVAL, ".rssub" },
        { "http://127.0.0.1:8080/x/.RSSUB-attic/y", RS_EINVAL, ".rssub" },
        { "http://127.0.0.1:8080/%2erssub", RS_EINVAL, ".rssub" },
        { "http://127.0.0.1:8080/.rssub", RS_EINVAL, ".rssub" },
        { "http://user:pw@127.0.0.1:8080/x", RS_EINVAL, "userinfo" },
        { "http://user@127.0.0.1:8080/x", RS_EINVAL, "userinfo" },
        { "http://@127.0.0.1:8080/x", RS_EINVAL, "userinfo" },
        { "ftp://127.0.0.1:8080/x", RS_EINVAL, "http" },
        { "file:///etc/passwd", RS_EINVAL, "http" },
        { "gopher://127.0.0.1:8080/x", RS_EINVAL, "http" },
        { "/etc/passwd", RS_EINVAL, NULL },
        { "../../etc/passwd", RS_EINVAL, NULL },
        { "", RS_EINVAL, NULL },
        { "javascript:alert(1)", RS_EINVAL, NULL },
        { "http://127.0.0.1:8080/a\x01", RS_EINVAL, NULL },
        { "http://127.0.0.1:8080/a b", RS_EINVAL, NULL },
        { "http://127.0.0.1:8080/a\nb", RS_EINVAL, NULL },
        { "http://[fe80::1%25eth0]:8080/x", RS_EINVAL, "zone" },
        /* hostile wins over "outside": both are refusals */
        { "http://evil.example/../x", RS_EINVAL, "'..'" },
    };
    RUN(pm, c);
    pathmap_free(pm);
}

/* pathmap/outside: another host, port or scheme is RS_EDENIED, and so is
 * everything when no prefix is configured. */
static void
test_outside(void **state)
{
    (void)state;
    const char *const pre[] = { "http://127.0.0.1:8080/", NULL };
    struct pathmap *pm = pm_with(pre);
    const struct pm_case c[] = {
        { "http://127.0.0.1:8081/x", RS_EDENIED, "outside" },
        { "http://127.0.0.2:8080/x", RS_EDENIED, "outside" },
        { "http://localhost:8080/x", RS_EDENIED, "outside" },
        { "https://127.0.0.1:8080/x", RS_EDENIED, "outside" },
        { "http://127.0.0.1/x", RS_EDENIED, "outside" },
    };
    RUN(pm, c);
    pathmap_free(pm);

    struct pathmap *empty = pathmap_new();
    char *out;
    assert_int_equal(pathmap_path(empty, "http://h/x", &out, NULL),
                     RS_EDENIED);
    assert_null(out);
    pathmap_free(empty);
    pathmap_free(NULL);
}

/* pathmap/prefix_boundary: prefixes match whole segments; one without '/'
 * matches itself and what is beneath, one with '/' only what is beneath;
 * host case and the default port do not matter, path case does. */
static void
test_prefix_boundary(void **state)
{
    (void)state;
    const char *const pre[] = { "https://data.example.org/set1",
                                "https://Data.Example.org:443/set2/", NULL };
    struct pathmap *pm = pm_with(pre);
    const struct pm_case c[] = {
        { "https://data.example.org/set1", 0, "set1" },
        { "https://data.example.org/set1/", 0, "set1/index.html" },
        { "https://data.example.org/set1/x", 0, "set1/x" },
        { "https://data.example.org/set1?v=1", 0, "set1?v=1" },
        { "https://data.example.org/set10/x", RS_EDENIED, NULL },
        { "https://data.example.org/set1x", RS_EDENIED, NULL },
        { "https://data.example.org/set", RS_EDENIED, NULL },
        { "https://data.example.org/set2", RS_EDENIED, NULL },
        { "https://data.example.org/set2/", 0, "set2/index.html" },
        { "https://data.example.org/set2/y", 0, "set2/y" },
        { "https://data.example.org/set22/y", RS_EDENIED, NULL },
        { "https://DATA.example.ORG:443/set1/x", 0, "set1/x" },
        { "https://data.example.org/SET1/x", RS_EDENIED, NULL },
        { "https://data.example.org/set%31/x", 0, "set1/x" },
        { "https://data.example.org/", RS_EDENIED, NULL },
        { "https://data.example.org/x/../set1/x", RS_EINVAL, "'..'" },
        { "https://data.example.org/set1/../set3/x", RS_EINVAL, "'..'" },
        { "http://data.example.org/set1/x", RS_EDENIED, NULL },
        { "https://data.example.org:8443/set1/x", RS_EDENIED, NULL },
    };
    RUN(pm, c);
    pathmap_free(pm);
}

/* pathmap/several_sites: with more than one site each gets its own first
 * directory (HOST, or HOST_PORT off the default port); http and https of
 * one host on default ports are one site. */
static void
test_several_sites(void **state)
{
    (void)state;
    const char *const pre[] = { "http://a.example/", "https://a.example/",
                                "http://B.example:8080/",
                                "http://[::1]:9000/", NULL };
    struct pathmap *pm = pm_with(pre);
    const struct pm_case c[] = {
        { "http://a.example/x", 0, "a.example/x" },
        { "https://a.example/x", 0, "a.example/x" },
        { "http://a.example/", 0, "a.example/index.html" },
        { "http://b.example:8080/x", 0, "b.example_8080/x" },
        { "http://B.EXAMPLE:8080/", 0, "b.example_8080/index.html" },
        { "http://b.example/x", RS_EDENIED, NULL },
        { "http://[::1]:9000/f", 0, "[::1]_9000/f" },
        { "http://[0:0::1]:9000/f", 0, "[::1]_9000/f" },  /* curl
                                                  normalises IPv6 */
    };
    RUN(pm, c);
    pathmap_free(pm);

    /* The same host on two ports is two sites. */
    const char *const two[] = { "http://h:8080/", "http://h:8081/", NULL };
    pm = pm_with(two);
    const struct pm_case c2[] = {
        { "http://h:8080/x", 0, "h_8080/x" },
        { "http://h:8081/x", 0, "h_8081/x" },
    };
    RUN(pm, c2);
    pathmap_free(pm);
}

static void
pm_map(struct pathmap *pm, const char *prefix, const char *dir)
{
    const char *why = NULL;
    int rc = pathmap_add_map(pm, prefix, dir, &why);
    if (rc != 0)
        fail_msg("add_map %s=%s: %d %s", prefix, dir, rc, why ? why : "-");
}

/* pathmap/maps: a map sends its URIs to its directory plus the rest of
 * the path; the longest prefix wins and a map beats an equal plain prefix;
 * a URI equal to a map's prefix is the directory's name itself. */
static void
test_maps(void **state)
{
    (void)state;
    const char *const pre[] = { "http://h/", NULL };
    struct pathmap *pm = pm_with(pre);
    pm_map(pm, "http://h/static/", "assets");
    pm_map(pm, "http://h/static/img", "pics/");
    pm_map(pm, "http://other/feed.xml", "feeds/main.xml");
    pm_map(pm, "http://r/", "");
    pm_map(pm, "http://r2/f", "");
    const struct pm_case c[] = {
        { "http://h/static/css/a.css", 0, "assets/css/a.css" },
        { "http://h/static/img/p.png", 0, "pics/p.png" },
        { "http://h/static/img", 0, "pics" },
        { "http://h/static/img?x=1/2", 0, "pics?x=1%2F2" },
        { "http://h/static/img/", 0, "pics/index.html" },
        { "http://h/static/imgs/p.png", 0, "assets/imgs/p.png" },
        { "http://h/static/", 0, "assets/index.html" },
        /* several sites: default mappings get the site directory */
        { "http://h/static", 0, "h/static" },
        { "http://h/other.txt", 0, "h/other.txt" },
        { "http://other/feed.xml", 0, "feeds/main.xml" },
        { "http://other/feed.xml/x", 0, "feeds/main.xml/x" },
        { "http://other/feed.xmlx", RS_EDENIED, NULL },
        { "http://other/", RS_EDENIED, NULL },
        { "http://r/x/y", 0, "x/y" },
        { "http://r/", 0, "index.html" },
        { "http://r/.rssub-x", RS_EINVAL, ".rssub" },
        { "http://r2/f", RS_EINVAL, "root" },
        { "http://r2/f/g", 0, "g" },
        { "http://r2/f/", 0, "index.html" },
        { "http://h/static/img/%2e%2e/x", RS_EINVAL, "'..'" },
    };
    RUN(pm, c);

    /* an equal map beats the plain prefix */
    pm_map(pm, "http://h/", "hh");
    const struct pm_case c2[] = {
        { "http://h/other.txt", 0, "hh/other.txt" },
        { "http://h/static/img", 0, "pics" },
    };
    RUN(pm, c2);
    pathmap_free(pm);

    /* a map with a long directory pushes a long URI over the limit */
    pm = pathmap_new();
    pm_map(pm, "http://h/", pm_rep("", 'd', 200, "/"));
    char *out;
    assert_int_equal(pathmap_path(pm, pm_rep("http://h/", 'x', 255, ""),
                                  &out, NULL), 0);
    assert_int_equal(strlen(out), 200 + 1 + 255);
    rs_free(out);
    pathmap_free(pm);
}

/* pathmap/limits: 255-byte segments pass and 256 do not (also when the
 * query makes the segment long), 4000 bytes of path pass and more do not,
 * and so do 256 segments but not 257. */
static void
test_limits(void **state)
{
    (void)state;
    const char *const pre[] = { "http://h/", NULL };
    struct pathmap *pm = pm_with(pre);
    char *out;
    const char *why;
    assert_int_equal(pathmap_path(pm, pm_rep("http://h/", 'a', 255, ""),
                                  &out, &why), 0);
    rs_free(out);
    assert_int_equal(pathmap_path(pm, pm_rep("http://h/", 'a', 256, ""),
                                  &out, &why), RS_EINVAL);
    assert_non_null(strstr(why, "255"));
    /* %41 decodes to one byte: the limit is on decoded bytes */
    char enc[1000] = "http://h/";
    for (int i = 0; i < 255; i++)
        pm_cat(enc, sizeof(enc), "%41");
    assert_int_equal(pathmap_path(pm, enc, &out, &why), 0);
    assert_int_equal(strlen(out), 255);
    rs_free(out);
    assert_int_equal(pathmap_path(pm, pm_rep("http://h/f?", 'q', 253, ""),
                                  &out, &why), 0);   /* "f?" + 253 = 255 */
    rs_free(out);
    assert_int_equal(pathmap_path(pm, pm_rep("http://h/f?", 'q', 254, ""),
                                  &out, &why), RS_EINVAL);
    /* "/" in a query counts as the three bytes it becomes */
    assert_int_equal(pathmap_path(pm, pm_rep("http://h/f?//", 'q', 247, ""),
                                  &out, &why), 0);
    assert_int_equal(strlen(out), 255);
    rs_free(out);
    assert_int_equal(pathmap_path(pm, pm_rep("http://h/f?//", 'q', 248, ""),
                                  &out, &why), RS_EINVAL);

    /* 16 segments of 249 bytes + '/' = 4000; one byte more is too long */
    char uri[8000] = "http://h";
    for (int i = 0; i < 16; i++)
        pm_cat(uri, sizeof(uri), pm_rep("/", 'p', 249, ""));
    assert_int_equal(pathmap_path(pm, uri, &out, &why), 0);
    assert_int_equal(strlen(out), 3999);
    rs_free(out);
    pm_cat(uri, sizeof(uri), "/x");
    assert_int_equal(pathmap_path(pm, uri, &out, &why), RS_EINVAL);
    assert_non_null(strstr(why, "4000"));
    /* index.html can push a path over */
    uri[strlen(uri) - 1] = '\0';
    assert_int_equal(pathmap_path(pm, uri, &out, &why), RS_EINVAL);

    char deep[2000] = "http://h";
    for (int i = 0; i < 256; i++)
        pm_cat(deep, sizeof(deep), "/a");
    assert_int_equal(pathmap_path(pm, deep, &out, &why), 0);
    rs_free(out);
    pm_cat(deep, sizeof(deep), "/");           /* index.html is segment 257 */
    assert_int_equal(pathmap_path(pm, deep, &out, &why), RS_EINVAL);
    assert_non_null(strstr(why, "256"));
    pm_cat(deep, sizeof(deep), "a");
    assert_int_equal(pathmap_path(pm, deep, &out, &why), RS_EINVAL);
    pathmap_free(pm);
}

/* pathmap/bad_config: prefixes and map directories that are hostile or
 * meaningless are refused with a reason; repeats are no-ops; a second map
 * of one prefix to another directory is refused. */
static void
test_bad_config(void **state)
{
    (void)state;
    struct pathmap *pm = pathmap_new();
    const char *why;
    const char *bad_prefix[] = {
        "ftp://h/", "http://u@h/", "http://u:p@h/", "http://h/a/../b",
        "http://h/a//b", "http://h/%2e%2e/", "http://h/a%2Fb/",
        "http://h/?q", "http://h/#f", "not a url", "", "/local/dir",
        "http://../x", "http://./", "http://.rssub/", "http://h/.rssub/",
    };
    for (size_t i = 0; i < sizeof(bad_prefix) / sizeof(*bad_prefix); i++) {
        why = NULL;
        if (pathmap_add_prefix(pm, bad_prefix[i], &why) != RS_EINVAL)
            fail_msg("prefix %s accepted", bad_prefix[i]);
        assert_non_null(why);
    }
    const char *bad_dir[] = {
        "/abs", "../x", "a/../b", "a/./b", ".", "..", "a//b", "//",
        ".rssub", "a/.rssub-attic", ".RSSUB-tmp.x", "a\nb", "a\\b",
        pm_rep("", 'd', 256, ""),
    };
    for (size_t i = 0; i < sizeof(bad_dir) / sizeof(*bad_dir); i++) {
        why = NULL;
        if (pathmap_add_map(pm, "http://h/", bad_dir[i], &why) != RS_EINVAL)
            fail_msg("map dir \"%s\" accepted", bad_dir[i]);
        assert_non_null(why);
    }
    assert_int_equal(pathmap_add_map(pm, "ftp://h/", "x", &why), RS_EINVAL);
    /* nothing of the above was added */
    char *out;
    assert_int_equal(pathmap_path(pm, "http://h/x", &out, &why), RS_EDENIED);

    assert_int_equal(pathmap_add_prefix(pm, "http://h/", &why), 0);
    assert_null(why);
    assert_int_equal(pathmap_add_prefix(pm, "HTTP://H:80/", NULL), 0);
    assert_int_equal(pathmap_add_map(pm, "http://h/m/", "m1", NULL), 0);
    assert_int_equal(pathmap_add_map(pm, "http://h/m/", "m1/", NULL), 0);
    assert_int_equal(pathmap_add_map(pm, "http://h/m/", "m2", &why),
                     RS_EINVAL);
    assert_non_null(strstr(why, "another directory"));
    /* "http://h/m" (no slash) is another prefix */
    assert_int_equal(pathmap_add_map(pm, "http://h/m", "m3", NULL), 0);
    /* still one site: no site directory */
    assert_int_equal(pathmap_path(pm, "http://h/x", &out, NULL), 0);
    assert_string_equal(out, "x");
    rs_free(out);
    assert_int_equal(pathmap_path(pm, "http://h/m/x", &out, NULL), 0);
    assert_string_equal(out, "m1/x");
    rs_free(out);
    assert_int_equal(pathmap_path(pm, "http://h/m", &out, NULL), 0);
    assert_string_equal(out, "m3");
    rs_free(out);
    pathmap_free(pm);
}

/* pathmap/alloc_failures: every allocation failing in turn gives
 * RS_ENOMEM (never a crash or leak) until all succeed with the right
 * result. */
static void
test_alloc_failures(void **state)
{
    (void)state;
    bool done = false;
    for (unsigned long n = 1; !done && n < 200; n++) {
        tu_alloc_fail_at(n);
        struct pathmap *pm = pathmap_new();
        int rc = pm != NULL ? 0 : RS_ENOMEM;
        char *out = NULL;
        if (rc == 0)
            rc = pathmap_add_prefix(pm, "http://a/", NULL);
        if (rc == 0)
            rc = pathmap_add_prefix(pm, "http://b:81/x/", NULL);
        if (rc == 0)
            rc = pathmap_add_map(pm, "http://a/m/", "dir/sub", NULL);
        if (rc == 0)
            rc = pathmap_path(pm, "http://b:81/x/y/?q=1", &out, NULL);
        char *out2 = NULL;
        if (rc == 0)
            rc = pathmap_path(pm, "http://a/m/z", &out2, NULL);
        unsigned long seen = tu_alloc_count();
        tu_alloc_fail_at(0);
        if (rc == 0) {
            assert_true(seen < n);
            assert_string_equal(out, "b_81/x/y/index.html?q=1");
            assert_string_equal(out2, "dir/sub/z");
            done = true;
        } else {
            assert_int_equal(rc, RS_ENOMEM);
        }
        rs_free(out);
        rs_free(out2);
        pathmap_free(pm);
    }
    assert_true(done);
}

#define T(name, fn) { name, fn, NULL, NULL, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        T("pathmap/single_site", test_single_site),
        T("pathmap/hostile", test_hostile),
        T("pathmap/outside", test_outside),
        T("pathmap/prefix_boundary", test_prefix_boundary),
        T("pathmap/several_sites", test_several_sites),
        T("pathmap/maps", test_maps),
        T("pathmap/limits", test_limits),
        T("pathmap/bad_config", test_bad_config),
        T("pathmap/alloc_failures", test_alloc_failures),
    };
    return cmocka_run_group_tests_name("sub_pathmap", tests, NULL, NULL);
}
