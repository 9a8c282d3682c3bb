/*
 * pathmap.c - resource URI -> relative path in the mirror (pathmap.h):
 * parsing with curl_url, segment-wise decoding and refusal of anything
 * hostile, prefix matching, and building the result. No I/O.
 */
#include "pathmap.h"

#include <curl/curl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rs_alloc.h"
#include "rs_hex.h"

/* A parsed URI or prefix. The curl strings are curl_free'd; seg points into
 * one rs_malloc'd block that also holds the decoded bytes. */
struct pm_uri {
    char *scheme;        /* curl's, lower case */
    char *host;          /* curl's, lower-cased here */
    unsigned port;       /* effective: the scheme's default filled in */
    char *query;         /* curl's raw query; NULL when none or empty */
    char **seg;          /* decoded segments; a path ending in '/' has a
                            last empty one */
    size_t n;
};

struct pm_entry {
    char *scheme;
    char *host;
    unsigned port;
    char *site;          /* "host" or "host_port": the first directory when
                            the map names more than one site */
    char **seg;          /* decoded prefix segments, never empty ones */
    size_t n;
    bool slash;          /* the prefix path ends in '/' (or is the root) */
    char *dir;           /* NULL: plain prefix; else the map's directory,
                            no trailing '/', "" for the root */
};

struct pathmap {
    struct pm_entry *e;
    size_t n;
    bool multi;          /* entries name more than one site */
};

/* ------------------------------------------------------------ segments */

static bool
pm_reserved(const char *s, size_t n)
{
    size_t r = sizeof(PATHMAP_RESERVED) - 1;
    return n >= r && strncasecmp(s, PATHMAP_RESERVED, r) == 0;
}

/* Why the final bytes s[0..n) cannot be one path segment, or NULL. */
static const char *
pm_seg_check(const char *s, size_t n)
{
    if (n == 0)
        return "empty path segment";
    if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
        return "'.' or '..' path segment";
    if (n > PATHMAP_SEG_MAX)
        return "path segment longer than 255 bytes";
    if (pm_reserved(s, n))
        return "path segment starting with .rssub (reserved)";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\0')
            return "NUL byte in path";
        if (c == '/')
            return "encoded slash (%2F) in path";
        if (c == '\\')
            return "backslash in path";
        if (c < 0x20 || c == 0x7f)
            return "control character in path";
    }
    return NULL;
}

/* Percent-decode raw[0..n) into dst (room for n bytes); the decoded length
 * in *len. NULL, or why it is not a valid escape sequence. */
static const char *
pm_decode(const char *raw, size_t n, char *dst, size_t *len)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (raw[i] != '%') {
            dst[o++] = raw[i];
            continue;
        }
        int hi = i + 2 < n ? rs_hexval(raw[i + 1]) : -1;
        int lo = i + 2 < n ? rs_hexval(raw[i + 2]) : -1;
        if (hi < 0 || lo < 0)
            return "bad percent-escape in path";
        dst[o++] = (char)(hi * 16 + lo);
        i += 2;
    }
    *len = o;
    return NULL;
}

/*
 * Split curl's raw path ("/a/b%20c/") into decoded segments checked by
 * pm_seg_check, except that the last may be empty (a path ending in '/').
 * One allocation holds the pointers and the bytes.
 */
static int
pm_split(const char *path, char ***seg, size_t *nseg, const char **why)
{
    if (path[0] == '/')
        path++;
    size_t plen = strlen(path);
    size_t n = 1;
    for (const char *p = path; *p != '\0'; p++)
        if (*p == '/')
            n++;
    if (n > PATHMAP_DEPTH_MAX) {
        *why = "more than 256 path segments";
        return RS_EINVAL;
    }
    char **s = rs_malloc(n * sizeof(*s) + plen + n);
    if (s == NULL)
        return RS_ENOMEM;
    char *bytes = (char *)(s + n);
    const char *p = path;
    for (size_t i = 0; i < n; i++) {
        const char *slash = strchr(p, '/');
        size_t rn = slash != NULL ? (size_t)(slash - p) : strlen(p);
        size_t dn;
        const char *w = pm_decode(p, rn, bytes, &dn);
        if (w == NULL && !(i == n - 1 && dn == 0))
            w = pm_seg_check(bytes, dn);
        if (w != NULL) {
            rs_free(s);
            *why = w;
            return RS_EINVAL;
        }
        bytes[dn] = '\0';
        s[i] = bytes;
        bytes += dn + 1;
        p += rn + 1;
    }
    *seg = s;
    *nseg = n;
    return 0;
}

/* ------------------------------------------------------------- parsing */

static void
pm_uri_cleanup(struct pm_uri *u)
{
    curl_free(u->scheme);
    curl_free(u->host);
    curl_free(u->query);
    rs_free(u->seg);
    memset(u, 0, sizeof(*u));
}

/* Is curl's part p present (set, even if empty)? */
static bool
pm_has(CURLU *h, CURLUPart p)
{
    char *s = NULL;
    CURLUcode rc = curl_url_get(h, p, &s, 0);
    curl_free(s);
    return rc == CURLUE_OK;
}

/* Rules 1-2 of pathmap.h for a URI, or for a prefix (no query or fragment
 * then). u is cleaned up by the caller, also on failure. */
static int
pm_parse(const char *s, bool prefix, struct pm_uri *u, const char **why)
{
    int rc = RS_EINVAL;
    char *path = NULL, *port = NULL;
    CURLU *h = curl_url();
    if (h == NULL)
        return RS_ENOMEM;
    *why = "not an absolute URI";
    /* PATH_AS_IS: curl would otherwise resolve "a/../b" silently, and we
     * want to refuse it. */
    if (curl_url_set(h, CURLUPART_URL, s,
                     CURLU_PATH_AS_IS | CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK ||
        curl_url_get(h, CURLUPART_SCHEME, &u->scheme, 0) != CURLUE_OK)
        goto out;
    *why = "not an http or https URI";
    if (strcasecmp(u->scheme, "http") != 0 &&
        strcasecmp(u->scheme, "https") != 0)
        goto out;
    for (char *c = u->scheme; *c != '\0'; c++)
        if (*c >= 'A' && *c <= 'Z')
            *c = (char)(*c + 32);
    *why = "userinfo (user@) in URI";
    if (pm_has(h, CURLUPART_USER) || pm_has(h, CURLUPART_PASSWORD) ||
        pm_has(h, CURLUPART_OPTIONS))
        goto out;
    *why = "IPv6 zone id in URI";
    if (pm_has(h, CURLUPART_ZONEID))
        goto out;
    *why = "no host in URI";
    if (curl_url_get(h, CURLUPART_HOST, &u->host, 0) != CURLUE_OK ||
        u->host[0] == '\0')
        goto out;
    for (char *c = u->host; *c != '\0'; c++)
        if (*c >= 'A' && *c <= 'Z')
            *c = (char)(*c + 32);
    *why = "bad port in URI";
    if (curl_url_get(h, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) !=
        CURLUE_OK)
        goto out;
    char *end = NULL;
    unsigned long pn = strtoul(port, &end, 10);
    if (end == port || *end != '\0' || pn > 65535)
        goto out;
    u->port = (unsigned)pn;
    if (curl_url_get(h, CURLUPART_QUERY, &u->query, 0) == CURLUE_OK &&
        u->query[0] == '\0') {
        curl_free(u->query);
        u->query = NULL;
    }
    if (prefix) {
        *why = "a prefix has no query or fragment";
        if (u->query != NULL || pm_has(h, CURLUPART_FRAGMENT))
            goto out;
    }
    *why = "no path in URI";
    if (curl_url_get(h, CURLUPART_PATH, &path, 0) != CURLUE_OK)
        goto out;
    rc = pm_split(path, &u->seg, &u->n, why);
out:
    curl_free(path);
    curl_free(port);
    curl_url_cleanup(h);
    return rc;
}

/* -------------------------------------------------------------- entries */

static void
pm_entry_cleanup(struct pm_entry *e)
{
    rs_free(e->scheme);
    rs_free(e->host);
    rs_free(e->site);
    rs_free(e->seg);
    rs_free(e->dir);
}

struct pathmap *
pathmap_new(void)
{
    return rs_calloc(1, sizeof(struct pathmap));
}

void
pathmap_free(struct pathmap *pm)
{
    if (pm == NULL)
        return;
    for (size_t i = 0; i < pm->n; i++)
        pm_entry_cleanup(&pm->e[i]);
    rs_free(pm->e);
    rs_free(pm);
}

static unsigned
pm_default_port(const char *scheme)
{
    return strcmp(scheme, "https") == 0 ? 443 : 80;
}

/* Same scheme, host, port and path as u (a parsed prefix)? */
static bool
pm_entry_equal(const struct pm_entry *e, const struct pm_uri *u, size_t n,
               bool slash)
{
    if (strcmp(e->scheme, u->scheme) != 0 || strcmp(e->host, u->host) != 0 ||
        e->port != u->port || e->n != n || e->slash != slash)
        return false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(e->seg[i], u->seg[i]) != 0)
            return false;
    return true;
}

/* Check dir (a map's target) and copy it without its trailing '/'. */
static int
pm_dir_dup(const char *dir, char **out, const char **why)
{
    size_t len = strlen(dir);
    if (len > 0 && dir[len - 1] == '/')
        len--;
    if (dir[0] == '/') {
        *why = "map directory must be relative";
        return RS_EINVAL;
    }
    if (len > PATHMAP_PATH_MAX) {
        *why = "map directory longer than 4000 bytes";
        return RS_EINVAL;
    }
    size_t depth = 0;
    for (size_t i = 0; i < len;) {
        const char *slash = memchr(dir + i, '/', len - i);
        size_t n = slash != NULL ? (size_t)(slash - (dir + i)) : len - i;
        const char *w = pm_seg_check(dir + i, n);
        if (w == NULL && ++depth > PATHMAP_DEPTH_MAX)
            w = "more than 256 path segments";
        if (w != NULL) {
            *why = w;
            return RS_EINVAL;
        }
        i += n + 1;
    }
    *out = rs_strndup(dir, len);
    return *out != NULL ? 0 : RS_ENOMEM;
}

static int
pm_add(struct pathmap *pm, const char *uri_prefix, const char *dir,
       const char **why)
{
    const char *w = NULL;
    struct pm_uri u = { 0 };
    struct pm_entry e = { 0 };
    char *d = NULL;
    int rc = pm_parse(uri_prefix, true, &u, &w);
    if (rc != 0)
        goto out;
    /* A prefix ending in '/' parses with a last empty segment. */
    bool slash = u.seg[u.n - 1][0] == '\0';
    size_t n = slash ? u.n - 1 : u.n;
    if (dir != NULL && (rc = pm_dir_dup(dir, &d, &w)) != 0)
        goto out;
    for (size_t i = 0; i < pm->n; i++) {
        struct pm_entry *o = &pm->e[i];
        if ((o->dir == NULL) != (dir == NULL) ||
            !pm_entry_equal(o, &u, n, slash))
            continue;
        if (dir == NULL || strcmp(o->dir, d) == 0)
            goto out;                          /* rc is 0: already there */
        w = "a second map of the same prefix to another directory";
        rc = RS_EINVAL;
        goto out;
    }

    char site[512];
    int sl = u.port == pm_default_port(u.scheme)
                 ? snprintf(site, sizeof(site), "%s", u.host)
                 : snprintf(site, sizeof(site), "%s_%u", u.host, u.port);
    w = sl < 0 || (size_t)sl >= sizeof(site) ? "host name too long"
                                             : pm_seg_check(site, (size_t)sl);
    if (w != NULL) {
        rc = RS_EINVAL;
        goto out;
    }
    rc = RS_ENOMEM;
    e.scheme = rs_strdup(u.scheme);
    e.host = rs_strdup(u.host);
    e.site = rs_strdup(site);
    e.port = u.port;
    e.n = n;
    e.slash = slash;
    /* Keep u's block (pointers and bytes) as the entry's segments. */
    e.seg = u.seg;
    u.seg = NULL;
    e.dir = d;
    d = NULL;
    if (e.scheme == NULL || e.host == NULL || e.site == NULL)
        goto out;
    struct pm_entry *ne = rs_realloc(pm->e, (pm->n + 1) * sizeof(*ne));
    if (ne == NULL)
        goto out;
    pm->e = ne;
    pm->e[pm->n++] = e;
    memset(&e, 0, sizeof(e));
    for (size_t i = 1; i < pm->n; i++)
        if (strcmp(pm->e[i].site, pm->e[0].site) != 0)
            pm->multi = true;
    rc = 0;
out:
    pm_entry_cleanup(&e);
    rs_free(d);
    pm_uri_cleanup(&u);
    if (why != NULL)
        *why = rc == RS_EINVAL ? w : NULL;
    return rc;
}

int
pathmap_add_prefix(struct pathmap *pm, const char *uri_prefix,
                   const char **why)
{
    return pm_add(pm, uri_prefix, NULL, why);
}

int
pathmap_add_map(struct pathmap *pm, const char *uri_prefix, const char *dir,
                const char **why)
{
    return pm_add(pm, uri_prefix, dir, why);
}

/* ------------------------------------------------------------- mapping */

/* Does e allow u? (Rule 3.) */
static bool
pm_entry_allows(const struct pm_entry *e, const struct pm_uri *u)
{
    if (strcmp(e->scheme, u->scheme) != 0 || strcmp(e->host, u->host) != 0 ||
        e->port != u->port || u->n < e->n)
        return false;
    for (size_t i = 0; i < e->n; i++)
        if (strcmp(e->seg[i], u->seg[i]) != 0)
            return false;
    /* "/a/" needs more after it; "/a" matches itself too. */
    return !e->slash || u->n > e->n;
}

static const struct pm_entry *
pm_match(const struct pathmap *pm, const struct pm_uri *u)
{
    const struct pm_entry *best = NULL;
    for (size_t i = 0; i < pm->n; i++) {
        const struct pm_entry *e = &pm->e[i];
        if (!pm_entry_allows(e, u))
            continue;
        if (best == NULL || e->n > best->n ||
            (e->n == best->n && e->slash && !best->slash) ||
            (e->n == best->n && e->slash == best->slash && e->dir != NULL &&
             best->dir == NULL))
            best = e;
    }
    return best;
}

/* Append one segment (and the query when it is the last) to buf at *len,
 * then check the segment as written. buf has room (pm_build sized it). */
static const char *
pm_put(char *buf, size_t *len, const char *s, size_t n, const char *query)
{
    size_t start = *len + (*len > 0);
    if (*len > 0)
        buf[(*len)++] = '/';
    memcpy(buf + *len, s, n);
    *len += n;
    if (query != NULL) {
        buf[(*len)++] = '?';
        for (const char *q = query; *q != '\0'; q++) {
            if (*q == '/' || *q == '\\') {
                memcpy(buf + *len, *q == '/' ? "%2F" : "%5C", 3);
                *len += 3;
            } else {
                buf[(*len)++] = *q;
            }
        }
    }
    return pm_seg_check(buf + start, *len - start);
}

/* Rules 4-6: the relative path for u under e. */
static int
pm_build(const struct pathmap *pm, const struct pm_entry *e,
         const struct pm_uri *u, char **out, const char **why)
{
    size_t first = e->dir != NULL ? e->n : 0;
    const char *site = e->dir == NULL && pm->multi ? e->site : NULL;
    const char *dir = e->dir != NULL && e->dir[0] != '\0' ? e->dir : NULL;
    size_t cap = (dir != NULL ? strlen(dir) + 1 : 0) +
                 (site != NULL ? strlen(site) + 1 : 0) +
                 sizeof(PATHMAP_INDEX) + 1 +
                 (u->query != NULL ? 3 * strlen(u->query) + 1 : 0);
    for (size_t i = first; i < u->n; i++)
        cap += strlen(u->seg[i]) + 1;
    if (first == u->n && dir == NULL) {
        *why = "the URI maps onto the mirror root itself";
        return RS_EINVAL;
    }
    char *buf = rs_malloc(cap);
    if (buf == NULL)
        return RS_ENOMEM;
    size_t len = 0;
    const char *w = NULL;
    if (site != NULL)
        w = pm_put(buf, &len, site, strlen(site), NULL);
    if (dir != NULL) {
        /* The dir's segments were checked when it was added; the query
         * only goes on its last one when nothing follows. */
        size_t dl = strlen(dir);
        const char *q = first == u->n ? u->query : NULL;
        if (q == NULL) {
            if (len > 0)
                buf[len++] = '/';
            memcpy(buf + len, dir, dl);
            len += dl;
        } else {
            const char *ls = strrchr(dir, '/');
            size_t head = ls != NULL ? (size_t)(ls - dir) : 0;
            if (head > 0) {
                if (len > 0)
                    buf[len++] = '/';
                memcpy(buf + len, dir, head);
                len += head;
            }
            const char *last = ls != NULL ? ls + 1 : dir;
            w = pm_put(buf, &len, last, strlen(last), q);
        }
    }
    for (size_t i = first; w == NULL && i < u->n; i++) {
        const char *s = u->seg[i];
        size_t n = strlen(s);
        if (n == 0) {                 /* only ever the last: a '/' path */
            s = PATHMAP_INDEX;
            n = sizeof(PATHMAP_INDEX) - 1;
        }
        w = pm_put(buf, &len, s, n, i == u->n - 1 ? u->query : NULL);
    }
    if (w == NULL && len > PATHMAP_PATH_MAX)
        w = "path longer than 4000 bytes";
    size_t depth = 1;
    for (size_t i = 0; w == NULL && i < len; i++)
        if (buf[i] == '/' && ++depth > PATHMAP_DEPTH_MAX)
            w = "more than 256 path segments";
    if (w != NULL) {
        rs_free(buf);
        *why = w;
        return RS_EINVAL;
    }
    buf[len] = '\0';
    *out = buf;
    return 0;
}

int
pathmap_path(const struct pathmap *pm, const char *uri, char **out,
             const char **why)
{
    const char *w = NULL;
    struct pm_uri u = { 0 };
    *out = NULL;
    int rc = pm_parse(uri, false, &u, &w);
    if (rc != 0)
        goto out;
    const struct pm_entry *e = pm_match(pm, &u);
    if (e == NULL) {
        w = "outside every configured prefix";
        rc = RS_EDENIED;
        goto out;
    }
    rc = pm_build(pm, e, &u, out, &w);
out:
    pm_uri_cleanup(&u);
    if (why != NULL)
        *why = rc == RS_EINVAL || rc == RS_EDENIED ? w : NULL;
    return rc;
}
