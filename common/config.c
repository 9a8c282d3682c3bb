/*
 * config.c - options from an INI file (libinih) and argv (getopt_long),
 * driven by the program's table (rs_config.h). Owns value parsing and
 * validation, the strings and lists it stores in the program's fields, and
 * the help and dump text. Per-section settings belong to the caller's
 * section callback.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <ini.h>

#include "rs_alloc.h"
#include "rs_config.h"
#include "rs_strmap.h"

#ifndef RS_VERSION
#define RS_VERSION "unknown"
#endif

/* Where an option's current value came from; a list is replaced, not
 * extended, when a later source sets it. */
enum cfg_src {
    CFG_SRC_NONE = 0,
    CFG_SRC_DEFAULT,
    CFG_SRC_FILE,
    CFG_SRC_ARGV,
};

struct cfg_slot {
    enum cfg_src src;
    int line;             /* file line that set it, for "already set" */
    bool owned;           /* the field holds memory this module allocated */
    size_t nitems;        /* lists: items before the terminating NULL */
    size_t cap;           /* lists: room for items, excluding the NULL */
};

struct rs_config {
    struct rs_config_info info;
    size_t nopts;
    struct cfg_slot *slots;   /* one per option, same index */
    bool parsed;
    char errstr[512];
};

/* getopt_long's view of the table; lives for one rs_config_parse. Values
 * above 255 cannot clash with short option letters. */
#define CFG_VAL_OPT 0x100
#define CFG_VAL_NEG(cfg) (CFG_VAL_OPT + (int)(cfg)->nopts)

struct cfg_getopt {
    struct option *longopts;
    char **negnames;          /* "no-NAME" per option (NULL if not bool) */
    char *shortopts;
};

#define CFG_NBUILTINS 3
static const struct {
    const char *left;
    const char *help;
} cfg_builtin_rows[CFG_NBUILTINS] = {
    { "  -c, --config=FILE", "read options from FILE; flags override it" },
    { "  -h, --help", "show this help and exit" },
    { "  -V, --version", "show the version and exit" },
};

static int cfg_fail(struct rs_config *cfg, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
cfg_fail(struct rs_config *cfg, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cfg->errstr, sizeof(cfg->errstr), fmt, ap);
    va_end(ap);
    return rc;
}

static int
cfg_nomem(struct rs_config *cfg)
{
    return cfg_fail(cfg, RS_ENOMEM, "out of memory");
}

/* ------------------------------------------------------------ value parsers */

/* A whole decimal integer: no spaces, no trailing text. */
static int
cfg_parse_int(const char *s, int64_t *out)
{
    if (!isdigit((unsigned char)s[0]) && s[0] != '-' && s[0] != '+')
        return RS_EINVAL;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        return RS_EINVAL;
    *out = (int64_t)v;
    return 0;
}

/* Digits (strtoull alone would accept a sign and wrap "-1"), then *unit
 * points at whatever follows. */
static int
cfg_parse_count(const char *s, uint64_t *out, const char **unit)
{
    if (!isdigit((unsigned char)s[0]))
        return RS_EINVAL;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0)
        return RS_EINVAL;
    *out = (uint64_t)v;
    *unit = end;
    return 0;
}

static int
cfg_parse_size(const char *s, uint64_t *out)
{
    uint64_t n, mult = 1;
    const char *u;
    if (cfg_parse_count(s, &n, &u) != 0)
        return RS_EINVAL;
    switch (toupper((unsigned char)*u)) {
    case 'K': mult = UINT64_C(1) << 10; u++; break;
    case 'M': mult = UINT64_C(1) << 20; u++; break;
    case 'G': mult = UINT64_C(1) << 30; u++; break;
    default: break;
    }
    if (*u == 'B' || *u == 'b')
        u++;
    if (*u != '\0' || n > UINT64_MAX / mult)
        return RS_EINVAL;
    *out = n * mult;
    return 0;
}

static const struct {
    const char *unit;
    int64_t ms;
} cfg_duration_units[] = {
    /* largest first: cfg_format_duration picks the first exact one */
    { "d", 86400000 }, { "h", 3600000 }, { "m", 60000 }, { "s", 1000 },
    { "ms", 1 },
};

/* A unit is required so that "timeout = 30" cannot mean seconds to one
 * reader and milliseconds to another; only 0 is the same in every unit. */
static int
cfg_parse_duration(const char *s, int64_t *out)
{
    uint64_t n;
    const char *u;
    if (cfg_parse_count(s, &n, &u) != 0)
        return RS_EINVAL;
    if (*u == '\0' && n == 0) {
        *out = 0;
        return 0;
    }
    size_t nunits = sizeof(cfg_duration_units) / sizeof(cfg_duration_units[0]);
    for (size_t i = 0; i < nunits; i++) {
        int64_t ms = cfg_duration_units[i].ms;
        if (strcmp(u, cfg_duration_units[i].unit) != 0)
            continue;
        if (n > (uint64_t)(INT64_MAX / ms))
            return RS_EINVAL;
        *out = (int64_t)n * ms;
        return 0;
    }
    return RS_EINVAL;
}

static int
cfg_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = { "true", "yes", "on", "1" };
    static const char *const no[] = { "false", "no", "off", "0" };
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return RS_EINVAL;
}

static bool
cfg_hostname_ok(const char *s, size_t len)
{
    if (len == 0 || len > 253)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '.' && c != '-' && c != '_')
            return false;
    }
    return true;
}

/* An IPv6 literal as found between brackets, with an optional %zone. */
static bool
cfg_ipv6_ok(const char *s, size_t len)
{
    char addr[INET6_ADDRSTRLEN];
    const char *zone = memchr(s, '%', len);
    size_t alen = zone != NULL ? (size_t)(zone - s) : len;
    if (zone != NULL && !cfg_hostname_ok(zone + 1, len - alen - 1))
        return false;
    if (alen == 0 || alen >= sizeof(addr))
        return false;
    memcpy(addr, s, alen);
    addr[alen] = '\0';
    struct in6_addr a6;
    return inet_pton(AF_INET6, addr, &a6) == 1;
}

int
rs_config_hostport_parse(const char *s, struct rs_config_hostport *out)
{
    if (s == NULL || out == NULL)
        return RS_EINVAL;
    const char *host, *colon;
    size_t hlen;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close[1] != ':')
            return RS_EINVAL;
        host = s + 1;
        hlen = (size_t)(close - host);
        colon = close + 1;
        if (!cfg_ipv6_ok(host, hlen))
            return RS_EINVAL;
    } else {
        colon = strrchr(s, ':');
        if (colon == NULL)
            return RS_EINVAL;
        host = s;
        hlen = (size_t)(colon - s);
        /* "::1:80" is ambiguous; IPv6 literals must be bracketed. */
        bool any = hlen == 1 && host[0] == '*';
        if (!any && !cfg_hostname_ok(host, hlen))
            return RS_EINVAL;
        if (any)
            hlen = 0;
    }
    const char *p = colon + 1;
    size_t plen = strlen(p);
    if (plen == 0 || plen > 5 || strspn(p, "0123456789") != plen)
        return RS_EINVAL;
    unsigned long port = strtoul(p, NULL, 10);
    if (port > 65535)
        return RS_EINVAL;
    memcpy(out->host, host, hlen);
    out->host[hlen] = '\0';
    out->port = (uint16_t)port;
    return 0;
}

int
rs_config_hostport_format(const struct rs_config_hostport *hp, char *buf,
                          size_t len)
{
    int n;
    if (hp->host[0] == '\0')
        n = snprintf(buf, len, "*:%u", (unsigned)hp->port);
    else if (strchr(hp->host, ':') != NULL)
        n = snprintf(buf, len, "[%s]:%u", hp->host, (unsigned)hp->port);
    else
        n = snprintf(buf, len, "%s:%u", hp->host, (unsigned)hp->port);
    return n >= 0 && (size_t)n < len ? 0 : RS_ETOOBIG;
}

/* Shortest exact spelling, so help, dump and error messages show what a
 * person would write ("1G" rather than 1073741824). */
static void
cfg_format_size(uint64_t v, char *buf, size_t len)
{
    static const char units[] = "GMK";
    for (int i = 0; i < 3 && v != 0; i++) {
        uint64_t mult = UINT64_C(1) << (10 * (3 - i));
        if (v % mult == 0) {
            snprintf(buf, len, "%" PRIu64 "%c", v / mult, units[i]);
            return;
        }
    }
    snprintf(buf, len, "%" PRIu64, v);
}

static void
cfg_format_duration(int64_t ms, char *buf, size_t len)
{
    size_t nunits = sizeof(cfg_duration_units) / sizeof(cfg_duration_units[0]);
    for (size_t i = 0; i < nunits && ms != 0; i++)
        if (ms % cfg_duration_units[i].ms == 0) {
            snprintf(buf, len, "%" PRId64 "%s", ms / cfg_duration_units[i].ms,
                     cfg_duration_units[i].unit);
            return;
        }
    snprintf(buf, len, "0");
}

/* --------------------------------------------------------- storing values */

static void
cfg_list_clear(struct rs_config *cfg, size_t i)
{
    char ***dest = cfg->info.opts[i].dest;
    struct cfg_slot *slot = &cfg->slots[i];
    for (size_t k = 0; k < slot->nitems; k++) {
        rs_free((*dest)[k]);
        (*dest)[k] = NULL;
    }
    slot->nitems = 0;
}

/* Make the list a valid, empty NULL-terminated array, so callers can walk
 * it without a NULL check. */
static int
cfg_list_init(struct rs_config *cfg, size_t i)
{
    char ***dest = cfg->info.opts[i].dest;
    struct cfg_slot *slot = &cfg->slots[i];
    char **items = rs_calloc(4 + 1, sizeof(*items));
    if (items == NULL)
        return RS_ENOMEM;
    *dest = items;
    slot->owned = true;
    slot->nitems = 0;
    slot->cap = 4;
    return 0;
}

static int
cfg_list_append(struct rs_config *cfg, size_t i, const char *value)
{
    char ***dest = cfg->info.opts[i].dest;
    struct cfg_slot *slot = &cfg->slots[i];
    if (slot->nitems == slot->cap) {
        size_t cap = slot->cap * 2;
        char **items = rs_realloc(*dest, (cap + 1) * sizeof(*items));
        if (items == NULL)
            return RS_ENOMEM;
        *dest = items;
        slot->cap = cap;
    }
    char *copy = rs_strdup(value);
    if (copy == NULL)
        return RS_ENOMEM;
    (*dest)[slot->nitems++] = copy;
    (*dest)[slot->nitems] = NULL;
    return 0;
}

static int
cfg_set_string(struct rs_config *cfg, size_t i, const char *value)
{
    char **dest = cfg->info.opts[i].dest;
    char *copy = rs_strdup(value);
    if (copy == NULL)
        return RS_ENOMEM;
    if (cfg->slots[i].owned)
        rs_free(*dest);
    *dest = copy;
    cfg->slots[i].owned = true;
    return 0;
}

/* INT, SIZE and DURATION: min == max == 0 means any value. */
static bool
cfg_ranged(const struct rs_config_opt *o)
{
    return o->min != 0 || o->max != 0;
}

static bool
cfg_in_range(const struct rs_config_opt *o, int64_t v)
{
    return !cfg_ranged(o) || (v >= o->min && v <= o->max);
}

static void
cfg_describe(const struct rs_config_opt *o, char *buf, size_t len)
{
    static const char *const what[] = {
        [RS_CONFIG_TYPE_STRING] = "a string",
        [RS_CONFIG_TYPE_INT] = "an integer",
        [RS_CONFIG_TYPE_SIZE] = "a size like 512, 64K, 10M or 1G",
        [RS_CONFIG_TYPE_DURATION] = "a duration like 500ms, 30s, 5m, 1h or 7d",
        [RS_CONFIG_TYPE_BOOL] = "true or false",
        [RS_CONFIG_TYPE_HOSTPORT] = "HOST:PORT",
        [RS_CONFIG_TYPE_LIST] = "a string",
    };
    if (!cfg_ranged(o)) {
        snprintf(buf, len, "%s", what[o->type]);
        return;
    }
    char lo[32], hi[32];
    const char *noun = "an integer";
    if (o->type == RS_CONFIG_TYPE_SIZE) {
        cfg_format_size((uint64_t)o->min, lo, sizeof(lo));
        cfg_format_size((uint64_t)o->max, hi, sizeof(hi));
        noun = "a size";
    } else if (o->type == RS_CONFIG_TYPE_DURATION) {
        cfg_format_duration(o->min, lo, sizeof(lo));
        cfg_format_duration(o->max, hi, sizeof(hi));
        noun = "a duration";
    } else {
        snprintf(lo, sizeof(lo), "%" PRId64, o->min);
        snprintf(hi, sizeof(hi), "%" PRId64, o->max);
    }
    snprintf(buf, len, "%s from %s to %s", noun, lo, hi);
}

/* A scalar that is not a string (INT, SIZE, DURATION, BOOL, HOSTPORT),
 * parsed and range-checked into out, typed as o->dest. 0 or RS_EINVAL
 * (out untouched). */
static int
cfg_parse_scalar(const struct rs_config_opt *o, const char *value, void *out)
{
    int rc = RS_EINVAL;
    int64_t iv = 0;
    uint64_t uv = 0;
    bool bv = false;
    struct rs_config_hostport hp;

    switch (o->type) {
    case RS_CONFIG_TYPE_STRING:
    case RS_CONFIG_TYPE_LIST:
        break;
    case RS_CONFIG_TYPE_INT:
        rc = cfg_parse_int(value, &iv);
        if (rc == 0 && !cfg_in_range(o, iv))
            rc = RS_EINVAL;
        if (rc == 0)
            *(int64_t *)out = iv;
        break;
    case RS_CONFIG_TYPE_SIZE:
        rc = cfg_parse_size(value, &uv);
        if (rc == 0 && cfg_ranged(o) &&
            (uv > INT64_MAX || !cfg_in_range(o, (int64_t)uv)))
            rc = RS_EINVAL;
        if (rc == 0)
            *(uint64_t *)out = uv;
        break;
    case RS_CONFIG_TYPE_DURATION:
        rc = cfg_parse_duration(value, &iv);
        if (rc == 0 && !cfg_in_range(o, iv))
            rc = RS_EINVAL;
        if (rc == 0)
            *(int64_t *)out = iv;
        break;
    case RS_CONFIG_TYPE_BOOL:
        rc = cfg_parse_bool(value, &bv);
        if (rc == 0)
            *(bool *)out = bv;
        break;
    case RS_CONFIG_TYPE_HOSTPORT:
        rc = rs_config_hostport_parse(value, &hp);
        if (rc == 0)
            *(struct rs_config_hostport *)out = hp;
        break;
    }
    return rc;
}

/*
 * Parse value into option i's field. label names the option in messages:
 * "--listen" or "hub.conf:3: listen". On error the field keeps its value.
 */
static int
cfg_set(struct rs_config *cfg, size_t i, const char *value, enum cfg_src src,
        int line, const char *label)
{
    const struct rs_config_opt *o = &cfg->info.opts[i];
    struct cfg_slot *slot = &cfg->slots[i];
    int rc = 0;

    if (src == CFG_SRC_FILE && slot->src == CFG_SRC_FILE &&
        o->type != RS_CONFIG_TYPE_LIST)
        return cfg_fail(cfg, RS_EINVAL, "%s: already set at line %d", label,
                        slot->line);

    if (o->type == RS_CONFIG_TYPE_STRING) {
        rc = cfg_set_string(cfg, i, value);
    } else if (o->type == RS_CONFIG_TYPE_LIST) {
        if (slot->src != src)
            cfg_list_clear(cfg, i);
        rc = cfg_list_append(cfg, i, value);
    } else {
        rc = cfg_parse_scalar(o, value, o->dest);
    }
    if (rc == RS_ENOMEM)
        return cfg_nomem(cfg);
    if (rc != 0) {
        char expected[128];
        cfg_describe(o, expected, sizeof(expected));
        if (o->secret)
            return cfg_fail(cfg, RS_EINVAL, "%s: expected %s, got <secret>",
                            label, expected);
        return cfg_fail(cfg, RS_EINVAL, "%s: expected %s, got '%s'", label,
                        expected, value);
    }
    slot->src = src;
    slot->line = line;
    return 0;
}

/* ------------------------------------------------------ table and defaults */

static bool
cfg_name_ok(const char *name)
{
    if (name[0] == '\0' || strncmp(name, "no-", 3) == 0 ||
        strcmp(name, "config") == 0 || strcmp(name, "help") == 0 ||
        strcmp(name, "version") == 0)
        return false;
    return strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-") ==
           strlen(name);
}

/* The table is the program's own code: catch its mistakes on the first run
 * rather than as odd behaviour later. */
static int
cfg_check_table(struct rs_config *cfg)
{
    for (size_t i = 0; i < cfg->nopts; i++) {
        const struct rs_config_opt *o = &cfg->info.opts[i];
        if (!cfg_name_ok(o->name))
            return cfg_fail(cfg, RS_EINVAL, "option table: bad name '%s'",
                            o->name);
        if ((unsigned)o->type > RS_CONFIG_TYPE_LIST || o->dest == NULL)
            return cfg_fail(cfg, RS_EINVAL,
                            "option table: --%s: bad type or no field",
                            o->name);
        if (o->letter != 0 &&
            (o->letter < 0 || o->letter > 127 || !isalnum(o->letter) || o->letter == 'c' ||
             o->letter == 'h' || o->letter == 'V'))
            return cfg_fail(cfg, RS_EINVAL, "option table: --%s: bad letter",
                            o->name);
        for (size_t k = 0; k < i; k++) {
            const struct rs_config_opt *p = &cfg->info.opts[k];
            if (strcmp(o->name, p->name) == 0 ||
                (o->letter != 0 && o->letter == p->letter))
                return cfg_fail(cfg, RS_EINVAL,
                                "option table: --%s clashes with --%s",
                                o->name, p->name);
        }
    }
    return 0;
}

/* Zero every field (what was there is not ours to free), then parse the
 * defaults like any other value. */
static int
cfg_apply_defaults(struct rs_config *cfg)
{
    for (size_t i = 0; i < cfg->nopts; i++) {
        const struct rs_config_opt *o = &cfg->info.opts[i];
        switch (o->type) {
        case RS_CONFIG_TYPE_STRING: *(char **)o->dest = NULL; break;
        case RS_CONFIG_TYPE_INT:
        case RS_CONFIG_TYPE_DURATION: *(int64_t *)o->dest = 0; break;
        case RS_CONFIG_TYPE_SIZE: *(uint64_t *)o->dest = 0; break;
        case RS_CONFIG_TYPE_BOOL: *(bool *)o->dest = false; break;
        case RS_CONFIG_TYPE_HOSTPORT:
            memset(o->dest, 0, sizeof(struct rs_config_hostport));
            break;
        case RS_CONFIG_TYPE_LIST:
            *(char ***)o->dest = NULL;
            if (cfg_list_init(cfg, i) != 0)
                return cfg_nomem(cfg);
            break;
        }
    }
    for (size_t i = 0; i < cfg->nopts; i++) {
        const struct rs_config_opt *o = &cfg->info.opts[i];
        char label[128];
        if (o->def == NULL)
            continue;
        snprintf(label, sizeof(label), "option table: default of --%s",
                 o->name);
        int rc = cfg_set(cfg, i, o->def, CFG_SRC_DEFAULT, 0, label);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static long
cfg_find(const struct rs_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->nopts; i++)
        if (strcmp(cfg->info.opts[i].name, name) == 0)
            return (long)i;
    return -1;
}

/* ----------------------------------------------------------- the INI file */

/* inih's limits in Debian's build: a 200-byte line buffer and 50-byte
 * section names, both truncated silently. The reader below turns them into
 * errors and counts lines, since this build's handler gets no line. */
#define CFG_INI_SECTION_MAX 49

/* A section header seen, as "type name" (trimmed, as the callback gets
 * it), and its line: a second one is an error, not a silent merge. */
struct cfg_seen_section {
    struct cfg_seen_section *next;
    char name[2 * CFG_INI_SECTION_MAX + 2];   /* "type name" */
    int line;
};

struct cfg_load {
    struct rs_config *cfg;
    const char *path;
    FILE *f;
    int line;         /* of the last line handed to inih */
    int err_line;     /* of the first error we found; 0: none */
    int rc;
    bool in_key;      /* a key since the last header: an indented line
                         continues its value (inih), whatever it holds */
    struct cfg_seen_section *seen;     /* a list, for freeing */
    struct rs_strmap seen_by_name;     /* a file may hold 100,000 topics */
};

/* "[ topic  news ]" -> type "topic", name "news": the first word, then the
 * rest trimmed; both cut to fit (the reader refuses longer names). */
static void
cfg_section_split(const char *section, size_t len, char *type, char *name)
{
    size_t start = strspn(section, " \t");
    if (start > len)
        start = len;
    size_t tlen = strcspn(section + start, " \t");
    if (tlen > len - start)
        tlen = len - start;
    if (tlen > CFG_INI_SECTION_MAX)
        tlen = CFG_INI_SECTION_MAX;
    memcpy(type, section + start, tlen);
    type[tlen] = '\0';
    size_t n = start + tlen;
    while (n < len && (section[n] == ' ' || section[n] == '\t'))
        n++;
    size_t nlen = len - n;
    while (nlen > 0 &&
           (section[n + nlen - 1] == ' ' || section[n + nlen - 1] == '\t'))
        nlen--;
    if (nlen > CFG_INI_SECTION_MAX)
        nlen = CFG_INI_SECTION_MAX;
    memcpy(name, section + n, nlen);
    name[nlen] = '\0';
}

/* Note the header [section] (len bytes) at the current line; a section
 * given twice fails the load. */
static int
cfg_section_seen(struct cfg_load *ld, const char *section, size_t len)
{
    char type[CFG_INI_SECTION_MAX + 1], name[CFG_INI_SECTION_MAX + 1];
    char key[sizeof(ld->seen->name)];
    cfg_section_split(section, len, type, name);
    snprintf(key, sizeof(key), "%s%s%s", type, name[0] != '\0' ? " " : "",
             name);
    const struct cfg_seen_section *old = rs_strmap_get(&ld->seen_by_name, key);
    if (old != NULL)
        return cfg_fail(ld->cfg, RS_EINVAL,
                        "%s:%d: [%s] already defined at line %d",
                        ld->path, ld->line, key, old->line);
    struct cfg_seen_section *s = rs_malloc(sizeof(*s));
    if (s == NULL)
        return cfg_nomem(ld->cfg);
    memcpy(s->name, key, sizeof(key));
    s->line = ld->line;
    if (rs_strmap_put(&ld->seen_by_name, s->name, s) != 0) {
        rs_free(s);
        return cfg_nomem(ld->cfg);
    }
    s->next = ld->seen;
    ld->seen = s;
    return 0;
}

static char *
cfg_ini_read(char *str, int num, void *stream)
{
    struct cfg_load *ld = stream;
    if (ld->rc != 0 || fgets(str, num, ld->f) == NULL)
        return NULL;
    ld->line++;
    /* A full buffer without its newline: fine if the newline (or the end)
     * comes next, else the line is too long. */
    if (strchr(str, '\n') == NULL && !feof(ld->f)) {
        int c = getc(ld->f);
        if (c != '\n' && c != EOF) {
            ld->err_line = ld->line;
            ld->rc = cfg_fail(ld->cfg, RS_EINVAL,
                              "%s:%d: line longer than %d bytes", ld->path,
                              ld->line, num - 1);
            return NULL;
        }
    }
    const char *p = str + strspn(str, " \t");
    const char *close = p[0] == '[' ? strchr(p, ']') : NULL;
    if (close != NULL && close - p - 1 > CFG_INI_SECTION_MAX) {
        ld->err_line = ld->line;
        ld->rc = cfg_fail(ld->cfg, RS_EINVAL,
                          "%s:%d: section name longer than %d bytes", ld->path,
                          ld->line, CFG_INI_SECTION_MAX);
        return NULL;
    }
    if (close != NULL && (p == str || !ld->in_key)) {
        ld->in_key = false;
        int rc = cfg_section_seen(ld, p + 1, (size_t)(close - p - 1));
        if (rc != 0) {
            ld->err_line = ld->line;
            ld->rc = rc;
            return NULL;
        }
    }
    return str;
}

static int
cfg_ini_section(struct cfg_load *ld, const char *section, const char *key,
                const char *value)
{
    struct rs_config *cfg = ld->cfg;
    char type[CFG_INI_SECTION_MAX + 1], nbuf[CFG_INI_SECTION_MAX + 1];
    cfg_section_split(section, strlen(section), type, nbuf);

    if (cfg->info.on_section == NULL)
        return cfg_fail(cfg, RS_EINVAL, "%s:%d: unknown section [%s]",
                        ld->path, ld->line, section);
    const char *msg = cfg->info.on_section(cfg->info.section_ud, type, nbuf,
                                           key, value, ld->line);
    if (msg != NULL)
        return cfg_fail(cfg, RS_EINVAL, "%s:%d: [%s] %s: %s", ld->path,
                        ld->line, section, key, msg);
    return 0;
}

/* inih's handler: nonzero means success. */
static int
cfg_ini_entry(void *user, const char *section, const char *key,
              const char *value)
{
    struct cfg_load *ld = user;
    struct rs_config *cfg = ld->cfg;
    int rc;
    if (ld->rc != 0)
        return 1;
    ld->in_key = true;
    if (section[0] != '\0' && strcmp(section, cfg->info.program) != 0) {
        rc = cfg_ini_section(ld, section, key, value);
    } else {
        long i = cfg_find(cfg, key);
        char label[384];
        snprintf(label, sizeof(label), "%s:%d: %s", ld->path, ld->line, key);
        if (i < 0)
            rc = cfg_fail(cfg, RS_EINVAL, "%s:%d: unknown key '%s'", ld->path,
                          ld->line, key);
        else
            rc = cfg_set(cfg, (size_t)i, value, CFG_SRC_FILE, ld->line, label);
    }
    if (rc != 0) {
        ld->rc = rc;
        ld->err_line = ld->line;
        return 0;
    }
    return 1;
}

static int
cfg_load_file(struct rs_config *cfg, const char *path)
{
    struct cfg_load ld = { .cfg = cfg, .path = path };
    ld.f = fopen(path, "r");
    if (ld.f == NULL)
        return cfg_fail(cfg, RS_EIO, "cannot read config file '%s': %s", path,
                        strerror(errno));
    int bad = ini_parse_stream(cfg_ini_read, &ld, cfg_ini_entry, &ld);
    bool read_error = ferror(ld.f) != 0;
    fclose(ld.f);
    while (ld.seen != NULL) {
        struct cfg_seen_section *next = ld.seen->next;
        rs_free(ld.seen);
        ld.seen = next;
    }
    rs_strmap_clear(&ld.seen_by_name);
    /* inih reports the first bad line, which may be a syntax error before
     * the line our handler or reader refused. */
    if (bad > 0 && (ld.rc == 0 || bad < ld.err_line))
        return cfg_fail(cfg, RS_EINVAL,
                        "%s:%d: expected 'key = value' or '[section]'", path,
                        bad);
    if (ld.rc != 0)
        return ld.rc;
    if (bad < 0 || read_error)
        return cfg_fail(cfg, RS_EIO, "cannot read config file '%s'", path);
    return 0;
}

/* ------------------------------------------------------------ command line */

static void
cfg_getopt_free(struct rs_config *cfg, struct cfg_getopt *g)
{
    if (g->negnames != NULL)
        for (size_t i = 0; i < cfg->nopts; i++)
            rs_free(g->negnames[i]);
    rs_free(g->negnames);
    rs_free(g->longopts);
    rs_free(g->shortopts);
}

static int
cfg_getopt_build(struct rs_config *cfg, struct cfg_getopt *g)
{
    size_t n = cfg->nopts;
    /* each option, its --no- twin, three builtins and the terminator */
    g->longopts = rs_calloc(2 * n + 4, sizeof(*g->longopts));
    g->negnames = rs_calloc(n + 1, sizeof(*g->negnames));
    g->shortopts = rs_malloc(2 * n + 8);
    if (g->longopts == NULL || g->negnames == NULL || g->shortopts == NULL)
        return cfg_nomem(cfg);
    /* Leading ':' makes a missing argument ':' rather than '?'. */
    char *sp = g->shortopts;
    *sp++ = ':';
    struct option *lo = g->longopts;
    for (size_t i = 0; i < n; i++) {
        const struct rs_config_opt *o = &cfg->info.opts[i];
        bool is_bool = o->type == RS_CONFIG_TYPE_BOOL;
        int has_arg = is_bool ? optional_argument : required_argument;
        *lo++ = (struct option){ o->name, has_arg, NULL, CFG_VAL_OPT + (int)i };
        if (is_bool) {
            size_t len = strlen(o->name) + 4;
            g->negnames[i] = rs_malloc(len);
            if (g->negnames[i] == NULL)
                return cfg_nomem(cfg);
            snprintf(g->negnames[i], len, "no-%s", o->name);
            *lo++ = (struct option){ g->negnames[i], no_argument, NULL,
                                     CFG_VAL_NEG(cfg) + (int)i };
        }
        if (o->letter != 0) {
            *sp++ = (char)o->letter;
            if (!is_bool)
                *sp++ = ':';
        }
    }
    *lo++ = (struct option){ "config", required_argument, NULL, 'c' };
    *lo++ = (struct option){ "help", no_argument, NULL, 'h' };
    *lo++ = (struct option){ "version", no_argument, NULL, 'V' };
    memcpy(sp, "c:hV", 5);
    return 0;
}

/* GNU getopt_long accepts any unambiguous prefix of a long option; refuse
 * those so that adding an option later cannot change what a script means. */
static bool
cfg_spelled_out(const char *word, const struct option *lo)
{
    if (strncmp(word, "--", 2) != 0)
        return true;
    word += 2;
    size_t len = strcspn(word, "=");
    return strlen(lo->name) == len && strncmp(word, lo->name, len) == 0;
}

/* The name behind a getopt value, for messages. */
static const char *
cfg_val_name(const struct rs_config *cfg, int val)
{
    if (val >= CFG_VAL_NEG(cfg))
        return cfg->info.opts[val - CFG_VAL_NEG(cfg)].name;
    if (val >= CFG_VAL_OPT)
        return cfg->info.opts[val - CFG_VAL_OPT].name;
    if (val == 'c')
        return "config";
    if (val == 'h')
        return "help";
    if (val == 'V')
        return "version";
    for (size_t i = 0; i < cfg->nopts; i++)
        if (cfg->info.opts[i].letter == val)
            return cfg->info.opts[i].name;
    return NULL;
}

/* The word of argv that named the option getopt_long just returned:
 * argv[optind - 1], or the one before when its value was a separate word. */
static const char *
cfg_option_word(char **argv)
{
    const char *word = argv[optind - 1];
    if (optarg != NULL && optarg == word)
        word = argv[optind - 2];
    return word;
}

static int
cfg_getopt_error(struct rs_config *cfg, char **argv, int c)
{
    const char *name = optopt != 0 ? cfg_val_name(cfg, optopt) : NULL;
    if (c == ':' && name != NULL)
        return cfg_fail(cfg, RS_EINVAL, "--%s: missing value", name);
    /* '?' naming a known option: a long option that takes no value got one */
    if (name != NULL)
        return cfg_fail(cfg, RS_EINVAL, "--%s%s: takes no value",
                        optopt >= CFG_VAL_NEG(cfg) ? "no-" : "", name);
    if (optopt != 0)
        return cfg_fail(cfg, RS_EINVAL, "unknown option '-%c'", optopt);
    const char *word = argv[optind - 1];
    return cfg_fail(cfg, RS_EINVAL, "unknown option '%.*s'",
                    (int)strcspn(word, "="), word);
}

/* What the first pass over argv found. */
struct cfg_first {
    const char *config;
    int nconfig;
    bool help, version;
};

/* Pass one only looks for --config, --help and --version; it ignores
 * errors so that "--help" works however broken the rest of argv is. */
static void
cfg_argv_first(const struct cfg_getopt *g, int argc, char **argv,
               struct cfg_first *first)
{
    optind = 0; /* glibc: 0 also resets its internal scanning state */
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, g->shortopts, g->longopts, NULL)) !=
           -1) {
        if (c == 'c') {
            first->config = optarg;
            first->nconfig++;
        } else if (c == 'h') {
            first->help = true;
        } else if (c == 'V') {
            first->version = true;
        }
    }
}

static int
cfg_argv_apply(struct rs_config *cfg, const struct cfg_getopt *g, int argc,
               char **argv)
{
    optind = 0;
    opterr = 0;
    for (;;) {
        int li = -1;
        int c = getopt_long(argc, argv, g->shortopts, g->longopts, &li);
        if (c == -1)
            return 0;
        if (c == '?' || c == ':')
            return cfg_getopt_error(cfg, argv, c);
        const char *word = cfg_option_word(argv);
        if (li >= 0 && !cfg_spelled_out(word, &g->longopts[li]))
            return cfg_fail(cfg, RS_EINVAL, "unknown option '%.*s'",
                            (int)strcspn(word, "="), word);
        if (c == 'c' || c == 'h' || c == 'V')
            continue;

        long i;
        const char *value = optarg;
        if (c >= CFG_VAL_NEG(cfg)) {
            i = c - CFG_VAL_NEG(cfg);
            value = "false";
        } else if (c >= CFG_VAL_OPT) {
            i = c - CFG_VAL_OPT;
        } else {
            i = cfg_find(cfg, cfg_val_name(cfg, c));
        }
        if (value == NULL) /* a boolean without =VALUE */
            value = "true";
        char label[128];
        snprintf(label, sizeof(label), "--%s", cfg->info.opts[i].name);
        int rc = cfg_set(cfg, (size_t)i, value, CFG_SRC_ARGV, 0, label);
        if (rc != 0)
            return rc;
    }
}

/* ----------------------------------------------------------------- public */

struct rs_config *
rs_config_new(const struct rs_config_info *info)
{
    struct rs_config *cfg = rs_calloc(1, sizeof(*cfg));
    if (cfg == NULL)
        return NULL;
    cfg->info = *info;
    if (cfg->info.program == NULL)
        cfg->info.program = "";
    while (info->opts != NULL && info->opts[cfg->nopts].name != NULL)
        cfg->nopts++;
    cfg->slots = rs_calloc(cfg->nopts + 1, sizeof(*cfg->slots));
    if (cfg->slots == NULL) {
        rs_free(cfg);
        return NULL;
    }
    return cfg;
}

void
rs_config_free(struct rs_config *cfg)
{
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < cfg->nopts; i++) {
        const struct rs_config_opt *o = &cfg->info.opts[i];
        if (!cfg->slots[i].owned)
            continue;
        if (o->type == RS_CONFIG_TYPE_LIST) {
            cfg_list_clear(cfg, i);
            rs_free(*(char ***)o->dest);
            *(char ***)o->dest = NULL;
        } else {
            rs_free(*(char **)o->dest);
            *(char **)o->dest = NULL;
        }
    }
    rs_free(cfg->slots);
    rs_free(cfg);
}

int
rs_config_parse(struct rs_config *cfg, int argc, char **argv, int *argind)
{
    struct cfg_getopt g = { 0 };
    struct cfg_first first = { 0 };
    int rc;

    if (cfg->parsed)
        return cfg_fail(cfg, RS_ESTATE, "options were already parsed");
    cfg->parsed = true;
    cfg->errstr[0] = '\0';
    rc = cfg_check_table(cfg);
    if (rc != 0)
        goto out;
    rc = cfg_apply_defaults(cfg);
    if (rc != 0)
        goto out;
    rc = cfg_getopt_build(cfg, &g);
    if (rc != 0)
        goto out;

    cfg_argv_first(&g, argc, argv, &first);
    if (first.help || first.version) {
        rc = first.help ? RS_CONFIG_WANT_HELP : RS_CONFIG_WANT_VERSION;
        goto out;
    }
    if (first.nconfig > 1) {
        rc = cfg_fail(cfg, RS_EINVAL, "--config: given more than once");
        goto out;
    }
    if (first.config != NULL) {
        rc = cfg_load_file(cfg, first.config);
        if (rc != 0)
            goto out;
    }
    rc = cfg_argv_apply(cfg, &g, argc, argv);
    if (rc != 0)
        goto out;
    if (argind != NULL)
        *argind = optind;
    else if (optind < argc)
        rc = cfg_fail(cfg, RS_EINVAL, "unexpected argument '%s'",
                      argv[optind]);
out:
    cfg_getopt_free(cfg, &g);
    return rc;
}

const char *
rs_config_errstr(const struct rs_config *cfg)
{
    return cfg->errstr;
}

bool
rs_config_is_set(const struct rs_config *cfg, const char *name)
{
    long i = cfg_find(cfg, name);
    return i >= 0 && (cfg->slots[i].src == CFG_SRC_FILE ||
                      cfg->slots[i].src == CFG_SRC_ARGV);
}

int
rs_config_opt_parse(const struct rs_config_opt *o, const char *value,
                    void *out, char *why, size_t whylen)
{
    if (cfg_parse_scalar(o, value, out) == 0)
        return 0;
    char expected[128];
    cfg_describe(o, expected, sizeof(expected));
    snprintf(why, whylen, "expected %s", expected);
    return RS_EINVAL;
}

/* ------------------------------------------------------------ help, dump */

static void
cfg_help_left(const struct rs_config_opt *o, char *buf, size_t len)
{
    static const char *const metavars[] = {
        [RS_CONFIG_TYPE_STRING] = "STRING",
        [RS_CONFIG_TYPE_INT] = "N",
        [RS_CONFIG_TYPE_SIZE] = "SIZE",
        [RS_CONFIG_TYPE_DURATION] = "DURATION",
        [RS_CONFIG_TYPE_BOOL] = "",
        [RS_CONFIG_TYPE_HOSTPORT] = "HOST:PORT",
        [RS_CONFIG_TYPE_LIST] = "STRING",
    };
    char letter[8] = "    ";
    if (o->letter != 0)
        snprintf(letter, sizeof(letter), "-%c, ", o->letter);
    if (o->type == RS_CONFIG_TYPE_BOOL)
        snprintf(buf, len, "  %s--[no-]%s", letter, o->name);
    else
        snprintf(buf, len, "  %s--%s=%s", letter, o->name,
                 o->metavar != NULL ? o->metavar : metavars[o->type]);
}

/* Long left columns would push every help text far right; past this width
 * the help goes on the next line instead. */
#define CFG_HELP_COL_MAX 32

static void
cfg_help_row(FILE *out, const char *left, const char *help, int width,
             const char *suffix)
{
    int n = (int)strlen(left);
    if (n + 2 > width)
        fprintf(out, "%s\n%*s", left, width, "");
    else
        fprintf(out, "%-*s", width, left);
    fprintf(out, "%s%s\n", help != NULL ? help : "", suffix);
}

int
rs_config_help(const struct rs_config *cfg, FILE *out)
{
    char left[128];
    int width = 0;
    for (size_t i = 0; i < cfg->nopts; i++) {
        cfg_help_left(&cfg->info.opts[i], left, sizeof(left));
        if ((int)strlen(left) + 2 > width)
            width = (int)strlen(left) + 2;
    }
    for (size_t i = 0; i < CFG_NBUILTINS; i++)
        if ((int)strlen(cfg_builtin_rows[i].left) + 2 > width)
            width = (int)strlen(cfg_builtin_rows[i].left) + 2;
    if (width > CFG_HELP_COL_MAX)
        width = CFG_HELP_COL_MAX;

    if (cfg->info.usage != NULL)
        fprintf(out, "%s\n\n", cfg->info.usage);
    fprintf(out, "Options:\n");
    for (size_t i = 0; i < cfg->nopts; i++) {
        const struct rs_config_opt *o = &cfg->info.opts[i];
        char suffix[256] = "";
        size_t used = 0;
        if (o->type == RS_CONFIG_TYPE_LIST)
            used = (size_t)snprintf(suffix, sizeof(suffix), " (repeatable)");
        if (o->def != NULL)
            snprintf(suffix + used, sizeof(suffix) - used, " (default: %s)",
                     o->secret ? "<secret>" : o->def);
        cfg_help_left(o, left, sizeof(left));
        cfg_help_row(out, left, o->help, width, suffix);
    }
    for (size_t i = 0; i < CFG_NBUILTINS; i++)
        cfg_help_row(out, cfg_builtin_rows[i].left, cfg_builtin_rows[i].help,
                     width, "");
    return ferror(out) ? RS_EIO : 0;
}

int
rs_config_version(const struct rs_config *cfg, FILE *out)
{
    fprintf(out, "%s %s\n", cfg->info.program,
            cfg->info.version != NULL ? cfg->info.version : RS_VERSION);
    return ferror(out) ? RS_EIO : 0;
}

int
rs_config_dump(const struct rs_config *cfg, FILE *out)
{
    for (size_t i = 0; i < cfg->nopts; i++) {
        const struct rs_config_opt *o = &cfg->info.opts[i];
        const struct cfg_slot *slot = &cfg->slots[i];
        char val[RS_CONFIG_HOST_MAX + 16];
        const char *v = val;
        switch (o->type) {
        case RS_CONFIG_TYPE_STRING:
            v = *(char **)o->dest;
            break;
        case RS_CONFIG_TYPE_INT:
            snprintf(val, sizeof(val), "%" PRId64, *(int64_t *)o->dest);
            break;
        case RS_CONFIG_TYPE_SIZE:
            cfg_format_size(*(uint64_t *)o->dest, val, sizeof(val));
            break;
        case RS_CONFIG_TYPE_DURATION:
            cfg_format_duration(*(int64_t *)o->dest, val, sizeof(val));
            break;
        case RS_CONFIG_TYPE_BOOL:
            v = *(bool *)o->dest ? "true" : "false";
            break;
        case RS_CONFIG_TYPE_HOSTPORT:
            if (slot->src == CFG_SRC_NONE ||
                rs_config_hostport_format(o->dest, val, sizeof(val)) != 0)
                v = NULL;
            break;
        case RS_CONFIG_TYPE_LIST: {
            char **items = *(char ***)o->dest;
            v = items != NULL ? items[0] : NULL;
            /* all items but the last here; the last below */
            for (size_t k = 1; !o->secret && k < slot->nitems; k++)
                fprintf(out, "%s = %s\n", o->name, items[k - 1]);
            if (v != NULL)
                v = items[slot->nitems - 1];
            break;
        }
        }
        if (v == NULL)
            fprintf(out, "# %s is not set\n", o->name);
        else
            fprintf(out, "%s = %s\n", o->name, o->secret ? "<secret>" : v);
    }
    return ferror(out) ? RS_EIO : 0;
}
