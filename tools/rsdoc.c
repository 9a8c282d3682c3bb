/*
 * rsdoc.c - the command-line face of the document library: validate, show
 * and explore ResourceSync documents from files, standard input or the web.
 * Parsing, the rules and discovery parsing are proto/'s, fetching is
 * common/fetch.c's; this file only decides what to read and what to print.
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "rs_alloc.h"
#include "rs_discover.h"
#include "rs_doc.h"
#include "rs_fetch.h"
#include "rs_log.h"
#include "rs_parse.h"
#include "rs_time.h"
#include "rs_url.h"

#ifndef RS_VERSION
#define RS_VERSION "0"
#endif

#define EXIT_OK 0
#define EXIT_FAIL 1
#define EXIT_USAGE 2

#define RSDOC_CHUNK 65536              /* read size for files and stdin */
#define RSDOC_MAX_DOCS 1000            /* explore: default document budget */
#define RSDOC_MAX_DEPTH 32             /* explore: tree depth */
#define RSDOC_HTML_MAX (1024 * 1024)   /* HTML kept to look for <link> */
#define RSDOC_TEXT_MAX (512 * 1024)    /* robots.txt kept */
#define RSDOC_MAX_ERRORS 100           /* validate: errors told per document */
#define RSDOC_MAX_WARNINGS 100         /* warnings told per document */

/* Options of one run; every command reads the ones it accepts. */
struct cli {
    const char *cmd;
    enum rs_check_mode mode;  /* RS_CHECK_SPEC unless --lenient/--strict */
    unsigned max_errors;      /* validate: errors told per document */
    bool json;
    size_t max_bytes;       /* 0 = RS_MAX_DOC_BYTES */
    long timeout_ms;        /* 0 = rs_fetch's default */
    size_t max_docs;
};

/* ================================================================ helpers */

static void
die_oom(void)
{
    fputs("rsdoc: out of memory\n", stderr);
    exit(EXIT_FAIL);
}

static void *
xrealloc(void *p, size_t n)
{
    void *q = rs_realloc(p, n);
    if (q == NULL)
        die_oom();
    return q;
}

static char *
xstrdup(const char *s)
{
    char *d = rs_strdup(s);
    if (d == NULL)
        die_oom();
    return d;
}

static bool
is_url(const char *s)
{
    return strncasecmp(s, "http://", 7) == 0 ||
           strncasecmp(s, "https://", 8) == 0;
}

/* RFC 3986 scheme ":" at the start: an absolute reference. */
static bool
has_scheme(const char *s)
{
    const char *p = s;
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
        return false;
    while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
           (*p >= '0' && *p <= '9') || *p == '+' || *p == '-' || *p == '.')
        p++;
    return *p == ':';
}

/* ref against base. Absolute references are kept as written: ws:// and
 * wss:// channel URIs are not something libcurl's URL parser accepts. */
static char *
resolve(const char *base, const char *ref)
{
    char *out = NULL;
    if (has_scheme(ref) || base == NULL ||
        rs_url_resolve(base, ref, &out) != 0)
        return xstrdup(ref);
    return out;
}

static const char *
fmt_time(rs_time_t t, char *buf)
{
    if (t == RS_TIME_NONE || rs_time_format(t, buf) == 0)
        return NULL;
    return buf;
}

/* The capability as the document spells it. */
static const char *
cap_text(const struct rs_md *md)
{
    if (md->capability == RS_CAP_OTHER && md->capability_other != NULL)
        return md->capability_other;
    if (md->capability == RS_CAP_CHANGELIST_NOTIFICATION && md->capability_alpha)
        return "change-notification";
    if (md->capability == RS_CAP_NONE)
        return "-";
    return rs_capability_name(md->capability);
}

static bool
parse_size(const char *s, size_t *out)
{
    char *end;
    if (s[0] < '0' || s[0] > '9')
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v == 0 || v > SIZE_MAX)
        return false;
    *out = (size_t)v;
    return true;
}

static void
fetch_opts_init(const struct cli *cli, struct rs_fetch_opts *fo)
{
    memset(fo, 0, sizeof(*fo));
    fo->max_bytes = cli->max_bytes;
    fo->timeout_ms = cli->timeout_ms;
    fo->user_agent = "rsdoc/" RS_VERSION;
    fo->accept = "application/xml, text/xml;q=0.9, */*;q=0.5";
}

/* ================================================================= input */

/* Stream NAME (a file, "-" for stdin, or an http(s) URL) to cb in chunks.
 * Returns 0, cb's error, or a read/fetch error described in err. */
static int
input_stream(const struct cli *cli, const char *name, rs_fetch_body_cb cb,
             void *ud, char *err, size_t errsz)
{
    err[0] = '\0';
    if (is_url(name)) {
        struct rs_fetch_opts fo;
        struct rs_fetch_result res;
        fetch_opts_init(cli, &fo);
        int rc = rs_fetch(name, &fo, cb, ud, &res);
        rs_log_kv(RS_LOG_DEBUG, "fetched", "url", name,
                  "result", rc == 0 ? "ok" : res.errstr, NULL);
        if (rc != 0)
            snprintf(err, errsz, "%s", res.errstr);
        rs_fetch_result_cleanup(&res);
        return rc;
    }

    int fd = STDIN_FILENO;
    if (strcmp(name, "-") != 0) {
        fd = open(name, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            snprintf(err, errsz, "cannot open: %s", strerror(errno));
            return RS_EIO;
        }
    }
    char *buf = rs_malloc(RSDOC_CHUNK);
    int rc = 0;
    if (buf == NULL)
        die_oom();
    for (;;) {
        ssize_t n = read(fd, buf, RSDOC_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errsz, "read error: %s", strerror(errno));
            rc = RS_EIO;
            break;
        }
        if (n == 0)
            break;
        rc = cb(ud, buf, (size_t)n);
        if (rc != 0)
            break;
    }
    rs_free(buf);
    if (fd != STDIN_FILENO)
        close(fd);
    return rc;
}

static int
on_feed(void *ud, const char *buf, size_t len)
{
    return rs_parser_feed(ud, buf, len);
}

/* The outcome of parsing one source. */
struct outcome {
    int rc;
    unsigned line;
    char msg[512];
    size_t nentries;
    unsigned nerrors;       /* parser errors (each told through on_error) */
};

/* Parse NAME through a streaming parser with the given callbacks; with
 * on_error, every error the parser finds (up to cli->max_errors) is told
 * as found, else the parse stops at the first. */
static void
parse_source(const struct cli *cli, const char *name,
             const struct rs_parser_cbs *cbs, void *ud,
             rs_parse_warning_cb on_warning, rs_parse_warning_cb on_error,
             void *wud, struct outcome *out)
{
    struct rs_parse_opts po = {
        .mode = cli->mode,
        .max_bytes = cli->max_bytes,
        .on_warning = on_warning,
        .warning_ud = wud,
        .on_error = on_error,
        .max_errors = on_error != NULL ? cli->max_errors : 1,
        .gunzip = true,
        .unique = true,     /* a validator's rule: a loc listed twice */
    };
    memset(out, 0, sizeof(*out));
    struct rs_parser *p = rs_parser_new(&po, cbs, ud);
    if (p == NULL)
        die_oom();
    int rc = input_stream(cli, name, on_feed, p, out->msg, sizeof(out->msg));
    if (rc == 0)
        rc = rs_parser_finish(p);
    const struct rs_diag *d = rs_parser_error(p);
    if (rc != 0 && d != NULL) {
        /* The parser's own account is the precise one (with a line). */
        out->line = d->line;
        snprintf(out->msg, sizeof(out->msg), "%s", d->msg);
    } else if (rc != 0 && out->msg[0] == '\0') {
        snprintf(out->msg, sizeof(out->msg), "%s", rs_strerror(rc));
    }
    out->rc = rc;
    out->nentries = rs_parser_entries(p);
    out->nerrors = rs_parser_errors(p);
    rs_parser_free(p);
}

/* One line per diagnostic whatever the message holds (rs_diag_line):
 * libxml2's messages can carry newlines, which would break the
 * one-line-per-document contract. */
static void
print_diag(FILE *f, const char *name, unsigned line, const char *sev,
           const char *msg)
{
    char out[1024];
    rs_diag_line(out, sizeof(out), name, line, sev, msg);
    fprintf(f, "%s\n", out);
}

/* What the diagnostics of one document are told with. */
struct diag_ctx {
    const char *name;
    unsigned nwarnings;
};

/* Warnings on stderr; a document whose 50,000 entries each pad their
 * <loc> says so RSDOC_MAX_WARNINGS times, then how many more there were
 * (diag_done). */
static void
on_warning_stderr(void *ud, unsigned line, const char *msg)
{
    struct diag_ctx *dc = ud;
    if (dc->nwarnings++ >= RSDOC_MAX_WARNINGS)
        return;
    fflush(stdout);     /* errors and warnings of a document in order */
    print_diag(stderr, dc->name, line, "warning", msg);
}

static void
diag_done(const struct diag_ctx *dc)
{
    if (dc->nwarnings > RSDOC_MAX_WARNINGS)
        fprintf(stderr, "%s: warning: %u more warnings not shown\n",
                dc->name, dc->nwarnings - RSDOC_MAX_WARNINGS);
}

/* validate: each error on stdout as the parser finds it. */
static void
on_error_stdout(void *ud, unsigned line, const char *msg)
{
    const struct diag_ctx *dc = ud;
    print_diag(stdout, dc->name, line, "error", msg);
}

/* ============================================================== validate */

struct validate_run {
    enum rs_root root;
    char cap[64];
};

static int
validate_on_head(void *ud, const struct rs_head *h)
{
    struct validate_run *v = ud;
    v->root = h->root;
    snprintf(v->cap, sizeof(v->cap), "%s", cap_text(&h->md));
    return 0;
}

static int
cmd_validate(const struct cli *cli, int argc, char **argv)
{
    int status = EXIT_OK;
    const struct rs_parser_cbs cbs = { .on_head = validate_on_head };
    for (int i = 0; i < argc; i++) {
        struct validate_run v = { .root = RS_ROOT_NONE, .cap = "-" };
        struct diag_ctx dc = { .name = argv[i] };
        struct outcome o;
        /* Warnings and results interleave correctly on a shared terminal
         * only if stdout is flushed before stderr gets the next warning. */
        fflush(stdout);
        parse_source(cli, argv[i], &cbs, &v, on_warning_stderr,
                     on_error_stdout, &dc, &o);
        fflush(stdout);
        diag_done(&dc);
        if (o.rc != 0) {
            /* The parser's errors are printed already; what is left is
             * a document that could not be read or fetched. */
            if (o.nerrors == 0)
                print_diag(stdout, argv[i], o.line, "error", o.msg);
            else if (o.nerrors >= cli->max_errors)
                printf("%s: error: stopped looking after %u errors "
                       "(--max-errors)\n", argv[i], o.nerrors);
            status = EXIT_FAIL;
        } else {
            printf("%s: OK %s %s %zu entries\n", argv[i], v.cap,
                   rs_root_name(v.root), o.nentries);
        }
    }
    return status;
}

/* ================================================================== show */

struct show_run {
    const char *name;
    bool head_done;
    size_t nhead_links;     /* root links printed with the head */
    size_t n;               /* entries printed */
};

/* ---------------------------------------------------------------- text */

#define KEYW 12

static void
show_kv(int indent, const char *key, const char *val)
{
    if (val != NULL)
        printf("%*s%-*s %s\n", indent, "", KEYW, key, val);
}

static void
show_kv_time(int indent, const char *key, rs_time_t t)
{
    char buf[RS_TIME_BUFSZ];
    show_kv(indent, key, fmt_time(t, buf));
}

static void
show_md_text(int indent, const struct rs_md *md)
{
    char buf[RS_HASHES_BUFSZ];
    if (md->capability != RS_CAP_NONE)
        show_kv(indent, "capability", cap_text(md));
    if (md->change != RS_CHANGE_NONE)
        show_kv(indent, "change", rs_change_name(md->change));
    show_kv_time(indent, "at", md->at);
    show_kv_time(indent, "completed", md->completed);
    show_kv_time(indent, "from", md->from);
    show_kv_time(indent, "until", md->until);
    show_kv_time(indent, "datetime", md->datetime);
    if (md->hash.n > 0) {
        rs_hashes_format(&md->hash, buf);
        show_kv(indent, "hash", buf);
    }
    if (md->length >= 0) {
        snprintf(buf, sizeof(buf), "%lld", (long long)md->length);
        show_kv(indent, "length", buf);
    }
    show_kv(indent, "type", md->type);
    show_kv(indent, "encoding", md->encoding);
    show_kv(indent, "path", md->path);
}

static void
show_link_text(int indent, const struct rs_link *ln)
{
    char tbuf[RS_TIME_BUFSZ], hbuf[RS_HASHES_BUFSZ];
    printf("%*s%-*s %s %s", indent, "", KEYW, "link", ln->rel ? ln->rel : "-",
           ln->href ? ln->href : "-");
    if (ln->pri != 0)
        printf(" pri=%u", (unsigned)ln->pri);
    if (ln->type != NULL)
        printf(" type=%s", ln->type);
    if (ln->length >= 0)
        printf(" length=%lld", (long long)ln->length);
    if (fmt_time(ln->modified, tbuf) != NULL)
        printf(" modified=%s", tbuf);
    if (ln->hash.n > 0) {
        rs_hashes_format(&ln->hash, hbuf);
        printf(" hash=%s", hbuf);
    }
    if (ln->path != NULL)
        printf(" path=%s", ln->path);
    if (ln->encoding != NULL)
        printf(" encoding=%s", ln->encoding);
    putchar('\n');
}

static int
show_text_head(void *ud, const struct rs_head *h)
{
    struct show_run *s = ud;
    s->head_done = true;
    show_kv(0, "document", s->name);
    show_kv(0, "root", rs_root_name(h->root));
    show_kv(0, "capability", cap_text(&h->md));
    struct rs_md md = h->md;
    md.capability = RS_CAP_NONE;   /* printed above */
    show_md_text(0, &md);
    show_kv(0, "hub id", h->hub_id);
    show_kv(0, "hub topic", h->hub_topic);
    for (size_t i = 0; i < h->nlinks; i++)
        show_link_text(0, &h->links[i]);
    s->nhead_links = h->nlinks;
    return 0;
}

static int
show_text_entry(void *ud, const struct rs_entry *e)
{
    struct show_run *s = ud;
    char label[64];
    s->n++;
    if (e->line > 0)
        snprintf(label, sizeof(label), "%zu (line %u)", s->n, e->line);
    else
        snprintf(label, sizeof(label), "%zu", s->n);
    putchar('\n');
    show_kv(0, "entry", label);
    show_kv(2, "loc", e->loc);
    show_kv_time(2, "lastmod", e->lastmod);
    if (e->changefreq != RS_FREQ_NONE)
        show_kv(2, "changefreq", rs_changefreq_name(e->changefreq));
    if (e->has_md)
        show_md_text(2, &e->md);
    for (size_t i = 0; i < e->nlinks; i++)
        show_link_text(2, &e->links[i]);
    return ferror(stdout) ? RS_EIO : 0;
}

static int
show_text_end(void *ud, const struct rs_head *h)
{
    struct show_run *s = ud;
    if (h->nlinks > s->nhead_links) {
        printf("\nroot links after the entries:\n");
        for (size_t i = s->nhead_links; i < h->nlinks; i++)
            show_link_text(0, &h->links[i]);
    }
    printf("\n%zu entr%s\n", s->n, s->n == 1 ? "y" : "ies");
    return 0;
}

/* ---------------------------------------------------------------- JSON */

/* A JSON string; jansson refuses invalid UTF-8 (a file name may hold
 * any bytes), so such bytes are shown as '?'. */
static json_t *
jstr(const char *s)
{
    json_t *v = json_string(s);
    if (v == NULL) {
        char *c = xstrdup(s);
        for (char *p = c; *p != '\0'; p++)
            if ((unsigned char)*p >= 0x80)
                *p = '?';
        v = json_string(c);
        rs_free(c);
    }
    if (v == NULL)
        die_oom();
    return v;
}

static void
json_set_str(json_t *o, const char *key, const char *val)
{
    if (val != NULL)
        json_object_set_new(o, key, jstr(val));
}

static void
json_set_time(json_t *o, const char *key, rs_time_t t)
{
    char buf[RS_TIME_BUFSZ];
    json_set_str(o, key, fmt_time(t, buf));
}

static json_t *
json_md(const struct rs_md *md)
{
    char buf[RS_HASHES_BUFSZ];
    json_t *o = json_object();
    if (o == NULL)
        die_oom();
    if (md->capability != RS_CAP_NONE)
        json_set_str(o, "capability", cap_text(md));
    if (md->change != RS_CHANGE_NONE)
        json_set_str(o, "change", rs_change_name(md->change));
    json_set_time(o, "at", md->at);
    json_set_time(o, "completed", md->completed);
    json_set_time(o, "from", md->from);
    json_set_time(o, "until", md->until);
    json_set_time(o, "datetime", md->datetime);
    if (md->hash.n > 0) {
        rs_hashes_format(&md->hash, buf);
        json_set_str(o, "hash", buf);
    }
    if (md->length >= 0)
        json_object_set_new(o, "length", json_integer(md->length));
    json_set_str(o, "type", md->type);
    json_set_str(o, "encoding", md->encoding);
    json_set_str(o, "path", md->path);
    return o;
}

static json_t *
json_links(const struct rs_link *links, size_t n)
{
    char hbuf[RS_HASHES_BUFSZ];
    json_t *a = json_array();
    if (a == NULL)
        die_oom();
    for (size_t i = 0; i < n; i++) {
        const struct rs_link *ln = &links[i];
        json_t *o = json_object();
        if (o == NULL)
            die_oom();
        json_set_str(o, "rel", ln->rel);
        json_set_str(o, "href", ln->href);
        if (ln->pri != 0)
            json_object_set_new(o, "pri", json_integer(ln->pri));
        json_set_str(o, "type", ln->type);
        if (ln->length >= 0)
            json_object_set_new(o, "length", json_integer(ln->length));
        json_set_time(o, "modified", ln->modified);
        if (ln->hash.n > 0) {
            rs_hashes_format(&ln->hash, hbuf);
            json_set_str(o, "hash", hbuf);
        }
        json_set_str(o, "path", ln->path);
        json_set_str(o, "encoding", ln->encoding);
        json_array_append_new(a, o);
    }
    return a;
}

/* Print one JSON value (taking it); RS_ENOMEM or RS_EIO on failure. */
static int
json_put(json_t *v, size_t flags)
{
    char *s = json_dumps(v, flags | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    json_decref(v);
    if (s == NULL)
        return RS_ENOMEM;
    fputs(s, stdout);
    free(s);
    return ferror(stdout) ? RS_EIO : 0;
}

/* `"key":value` as a member of the object being streamed. */
static int
json_member(const char *key, json_t *v)
{
    int rc = json_put(jstr(key), 0);
    if (rc == 0) {
        putchar(':');
        rc = json_put(v, JSON_COMPACT);
    } else {
        json_decref(v);
    }
    return rc;
}

/*
 * The streamed object is {"document", "root", "capability", "md",
 * ["hub_id", "hub_topic",] "entries": [one per line], "links", "count"}:
 * the root links come after the entries because a Source may place them
 * (rel="next") after the last entry, and only then are they all known.
 */
static int
show_json_head(void *ud, const struct rs_head *h)
{
    struct show_run *s = ud;
    int rc = 0;
    s->head_done = true;
    putchar('{');
    rc = json_member("document", jstr(s->name));
    putchar(',');
    if (rc == 0)
        rc = json_member("root", json_string(rs_root_name(h->root)));
    putchar(',');
    if (rc == 0)
        rc = json_member("capability", jstr(cap_text(&h->md)));
    putchar(',');
    if (rc == 0)
        rc = json_member("md", json_md(&h->md));
    if (rc == 0 && h->hub_id != NULL) {
        putchar(',');
        rc = json_member("hub_id", jstr(h->hub_id));
    }
    if (rc == 0 && h->hub_topic != NULL) {
        putchar(',');
        rc = json_member("hub_topic", jstr(h->hub_topic));
    }
    fputs(",\"entries\":[", stdout);
    return rc;
}

static int
show_json_entry(void *ud, const struct rs_entry *e)
{
    struct show_run *s = ud;
    char tbuf[RS_TIME_BUFSZ];
    json_t *o = json_object();
    if (o == NULL)
        die_oom();
    json_set_str(o, "loc", e->loc);
    json_set_str(o, "lastmod", fmt_time(e->lastmod, tbuf));
    if (e->changefreq != RS_FREQ_NONE)
        json_set_str(o, "changefreq", rs_changefreq_name(e->changefreq));
    if (e->has_md)
        json_object_set_new(o, "md", json_md(&e->md));
    if (e->nlinks > 0)
        json_object_set_new(o, "links", json_links(e->links, e->nlinks));
    if (e->line > 0)
        json_object_set_new(o, "line", json_integer(e->line));
    fputs(s->n == 0 ? "\n" : ",\n", stdout);
    s->n++;
    return json_put(o, 0);
}

static int
show_json_end(void *ud, const struct rs_head *h)
{
    struct show_run *s = ud;
    fputs(s->n > 0 ? "\n]," : "],", stdout);
    int rc = json_member("links", json_links(h->links, h->nlinks));
    fprintf(stdout, ",\"count\":%zu}\n", s->n);
    return rc;
}

/* Close the streamed object with an "error" member, so stdout stays one
 * valid JSON value even for a document that fails half-way. */
static void
show_json_error(struct show_run *s, const struct outcome *o)
{
    json_t *e = json_object();
    if (e == NULL)
        die_oom();
    if (o->line > 0)
        json_object_set_new(e, "line", json_integer(o->line));
    json_set_str(e, "message", o->msg);
    if (s->head_done) {
        fputs(s->n > 0 ? "\n]," : "],", stdout);
        fprintf(stdout, "\"count\":%zu,", s->n);
    } else {
        putchar('{');
        if (json_member("document", jstr(s->name)) != 0)
            die_oom();
        putchar(',');
    }
    if (json_member("error", e) != 0)
        die_oom();
    fputs("}\n", stdout);
}

static int
cmd_show(const struct cli *cli, int argc, char **argv)
{
    static const struct rs_parser_cbs text_cbs = {
        show_text_head, show_text_entry, show_text_end,
    };
    static const struct rs_parser_cbs json_cbs = {
        show_json_head, show_json_entry, show_json_end,
    };
    if (argc != 1) {
        fputs("rsdoc show: exactly one FILE, URL or - expected "
              "(rsdoc --help)\n", stderr);
        return EXIT_USAGE;
    }
    struct show_run s = { .name = argv[0] };
    struct diag_ctx dc = { .name = argv[0] };
    struct outcome o;
    parse_source(cli, argv[0], cli->json ? &json_cbs : &text_cbs, &s,
                 on_warning_stderr, NULL, &dc, &o);
    fflush(stdout);
    diag_done(&dc);
    if (o.rc != 0) {
        if (cli->json)
            show_json_error(&s, &o);
        fflush(stdout);
        print_diag(stderr, argv[0], o.line, "error", o.msg);
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* =============================================================== explore */

/* A document listed by a Source Description, Capability List or index. */
struct ex_child {
    char *loc;              /* resolved */
    char *cap;              /* as listed; NULL when the entry says none */
    bool channel;           /* a notification channel: never fetched */
    bool contents;          /* a dump package's manifest (rel="contents") */
    char *hub;              /* rs:ln rel="hub" href, resolved, or NULL */
};

/* One fetched URL, whatever it turned out to be. */
struct ex_node {
    char *url;              /* as requested */
    char *final_url;        /* after redirects, when different */
    int rc;                 /* 0: a valid ResourceSync document */
    unsigned err_line;
    char err[512];
    bool is_doc;            /* parsed as a ResourceSync document */
    bool is_html;
    bool printed;           /* already shown in the tree */
    enum rs_root root;
    enum rs_capability capv;
    char cap[64];
    size_t nentries;
    rs_time_t at, completed, from, until;
    size_t nwarnings;
    unsigned warn_line;
    char warn[256];         /* the first warning */
    char *up, *next;        /* root links, resolved */
    struct ex_child *kids;  /* of indexes, descriptions, cap lists; a
                             * dump's are its packages' manifests */
    size_t nkids, kids_cap;
    char **rslinks;         /* rel="resourcesync" targets, resolved */
    size_t nrslinks;
    char *text;             /* body, when fetched as text */
    size_t text_len;
};

struct explorer {
    const struct cli *cli;
    struct ex_node **nodes;
    size_t n, cap;
    size_t fetched;         /* counted against cli->max_docs */
    size_t failures;        /* errors shown in the tree */
};

/* The state of one fetch into a node. */
enum ex_mode { EX_UNKNOWN, EX_XML, EX_HTML, EX_TEXT };

struct ex_load {
    struct ex_node *node;
    struct rs_parser *p;
    struct rs_fetch_result *res;
    enum ex_mode mode;
    char *buf;              /* HTML or text body */
    size_t len, cap, max;
    bool collect;           /* keep the entries as children */
    bool dump;              /* keep the entries' manifests as children */
};

static void
ex_node_free(struct ex_node *n)
{
    if (n == NULL)
        return;
    rs_free(n->url);
    rs_free(n->final_url);
    rs_free(n->up);
    rs_free(n->next);
    for (size_t i = 0; i < n->nkids; i++) {
        rs_free(n->kids[i].loc);
        rs_free(n->kids[i].cap);
        rs_free(n->kids[i].hub);
    }
    rs_free(n->kids);
    for (size_t i = 0; i < n->nrslinks; i++)
        rs_free(n->rslinks[i]);
    rs_free(n->rslinks);
    rs_free(n->text);
    rs_free(n);
}

static struct ex_node *
ex_find(const struct explorer *ex, const char *url)
{
    for (size_t i = 0; i < ex->n; i++) {
        struct ex_node *n = ex->nodes[i];
        if (strcmp(n->url, url) == 0 ||
            (n->final_url != NULL && strcmp(n->final_url, url) == 0))
            return n;
    }
    return NULL;
}

static const char *
ex_base(const struct ex_load *ld)
{
    if (ld->res != NULL && ld->res->url != NULL)
        return ld->res->url;
    return ld->node->url;
}

static void
ex_add_rslink(struct ex_node *n, const char *base, const char *target)
{
    char *t = resolve(base, target);
    for (size_t i = 0; i < n->nrslinks; i++)
        if (strcmp(n->rslinks[i], t) == 0) {
            rs_free(t);
            return;
        }
    n->rslinks = xrealloc(n->rslinks, (n->nrslinks + 1) * sizeof(char *));
    n->rslinks[n->nrslinks++] = t;
}

struct ex_weblink_ctx {
    struct ex_node *node;
    const char *base;
};

static int
ex_on_weblink(void *ud, const struct rs_weblink *l)
{
    struct ex_weblink_ctx *c = ud;
    if (l->target != NULL && rs_rel_has(l->rel, "resourcesync") &&
        c->node->nrslinks < RS_DISCOVER_MAX_LINKS)
        ex_add_rslink(c->node, c->base, l->target);
    return 0;
}

/* ---------------------------------------------------------- parse hooks */

static void
ex_on_warning(void *ud, unsigned line, const char *msg)
{
    struct ex_node *n = ud;
    if (n->nwarnings++ == 0) {
        n->warn_line = line;
        snprintf(n->warn, sizeof(n->warn), "%s", msg);
    }
}

static int
ex_on_head(void *ud, const struct rs_head *h)
{
    struct ex_load *ld = ud;
    struct ex_node *n = ld->node;
    n->root = h->root;
    n->capv = h->md.capability;
    snprintf(n->cap, sizeof(n->cap), "%s", cap_text(&h->md));
    n->at = h->md.at;
    n->completed = h->md.completed;
    n->from = h->md.from;
    n->until = h->md.until;
    /* Only these list other documents; a Resource List's entries are
     * resources, and counting them is enough. */
    ld->collect = h->root == RS_ROOT_SITEMAPINDEX ||
                  h->md.capability == RS_CAP_DESCRIPTION ||
                  h->md.capability == RS_CAP_CAPABILITYLIST;
    /* A dump's entries are ZIP packages, which explore does not fetch;
     * the manifest each may link with rel="contents" (core 7, 11.1,
     * 13.1) is a document of the tree like any other. */
    ld->dump = h->root == RS_ROOT_URLSET &&
               (h->md.capability == RS_CAP_RESOURCEDUMP ||
                h->md.capability == RS_CAP_CHANGEDUMP);
    return 0;
}

static struct ex_child *
ex_add_kid(struct ex_node *n)
{
    if (n->nkids == n->kids_cap) {
        n->kids_cap = n->kids_cap ? 2 * n->kids_cap : 16;
        n->kids = xrealloc(n->kids, n->kids_cap * sizeof(*n->kids));
    }
    struct ex_child *k = &n->kids[n->nkids++];
    memset(k, 0, sizeof(*k));
    return k;
}

/* A dump entry: its package's manifest, listed as the manifest of the
 * dump's kind (a package without one has nothing to follow). */
static void
ex_dump_entry(struct ex_load *ld, const struct rs_entry *e)
{
    const struct rs_link *ln = rs_links_find(e->links, e->nlinks, "contents");
    if (ln == NULL || ln->href == NULL)
        return;
    struct ex_child *k = ex_add_kid(ld->node);
    k->loc = resolve(ex_base(ld), ln->href);
    k->cap = xstrdup(rs_capability_name(
        ld->node->capv == RS_CAP_CHANGEDUMP ? RS_CAP_CHANGEDUMP_MANIFEST
                                            : RS_CAP_RESOURCEDUMP_MANIFEST));
    k->contents = true;
}

static int
ex_on_entry(void *ud, const struct rs_entry *e)
{
    struct ex_load *ld = ud;
    if (ld->dump)
        ex_dump_entry(ld, e);
    if (!ld->collect || e->loc == NULL)
        return 0;
    struct ex_child *k = ex_add_kid(ld->node);
    k->loc = resolve(ex_base(ld), e->loc);
    if (e->has_md && e->md.capability != RS_CAP_NONE)
        k->cap = xstrdup(cap_text(&e->md));
    k->channel = (e->has_md && rs_capability_is_notification(e->md.capability)) ||
                 strncasecmp(e->loc, "ws://", 5) == 0 ||
                 strncasecmp(e->loc, "wss://", 6) == 0;
    const struct rs_link *hub = rs_links_find(e->links, e->nlinks, "hub");
    if (hub != NULL && hub->href != NULL)
        k->hub = resolve(ex_base(ld), hub->href);
    return 0;
}

static int
ex_on_end(void *ud, const struct rs_head *h)
{
    struct ex_load *ld = ud;
    const struct rs_link *up = rs_links_find(h->links, h->nlinks, "up");
    const struct rs_link *next = rs_links_find(h->links, h->nlinks, "next");
    if (up != NULL && up->href != NULL)
        ld->node->up = resolve(ex_base(ld), up->href);
    if (next != NULL && next->href != NULL)
        ld->node->next = resolve(ex_base(ld), next->href);
    return 0;
}

/* ------------------------------------------------------------ fetching */

static bool
ex_looks_html(const struct rs_fetch_result *res, const char *buf, size_t len)
{
    if (res->content_type != NULL &&
        (strncasecmp(res->content_type, "text/html", 9) == 0 ||
         strncasecmp(res->content_type, "application/xhtml+xml", 21) == 0))
        return true;
    while (len > 0 && (*buf == ' ' || *buf == '\t' || *buf == '\r' ||
                       *buf == '\n')) {
        buf++;
        len--;
    }
    return (len >= 14 && strncasecmp(buf, "<!doctype html", 14) == 0) ||
           (len >= 5 && strncasecmp(buf, "<html", 5) == 0);
}

static int
ex_on_body(void *ud, const char *buf, size_t len)
{
    struct ex_load *ld = ud;
    if (ld->mode == EX_UNKNOWN)
        ld->mode = ex_looks_html(ld->res, buf, len) ? EX_HTML : EX_XML;
    if (ld->mode == EX_XML)
        return rs_parser_feed(ld->p, buf, len);

    /* HTML or text: keep the start; a <link> lives in the <head>. */
    size_t take = len < ld->max - ld->len ? len : ld->max - ld->len;
    if (ld->len + take + 1 > ld->cap) {
        ld->cap = ld->len + take + 1 > 2 * ld->cap ? ld->len + take + 1
                                                   : 2 * ld->cap;
        ld->buf = xrealloc(ld->buf, ld->cap);
    }
    memcpy(ld->buf + ld->len, buf, take);
    ld->len += take;
    ld->buf[ld->len] = '\0';
    return ld->len >= ld->max ? RS_ESTOPPED : 0;
}

static void
ex_node_fail(struct ex_node *n, int rc, unsigned line, const char *msg)
{
    n->rc = rc;
    n->err_line = line;
    snprintf(n->err, sizeof(n->err), "%s", msg);
}

static void
ex_load(struct explorer *ex, struct ex_node *n, bool as_text)
{
    static const struct rs_parser_cbs cbs = {
        ex_on_head, ex_on_entry, ex_on_end,
    };
    struct rs_fetch_result res;
    struct rs_fetch_opts fo;
    struct rs_parse_opts po = {
        .mode = ex->cli->mode,
        .max_bytes = ex->cli->max_bytes,
        .on_warning = ex_on_warning,
        .warning_ud = n,
        .gunzip = true,
        .unique = true,
    };
    struct ex_load ld = {
        .node = n, .res = &res,
        .mode = as_text ? EX_TEXT : EX_UNKNOWN,
        .max = as_text ? RSDOC_TEXT_MAX : RSDOC_HTML_MAX,
    };
    ld.p = rs_parser_new(&po, &cbs, &ld);
    if (ld.p == NULL)
        die_oom();
    fetch_opts_init(ex->cli, &fo);
    if (as_text)
        fo.accept = "text/plain";
    int rc = rs_fetch(n->url, &fo, ex_on_body, &ld, &res);
    if (rc == RS_ESTOPPED && ld.mode != EX_XML)
        rc = 0;     /* we had read enough of the page */
    rs_log_kv(RS_LOG_DEBUG, "fetched", "url", n->url,
              "result", rc == 0 ? "ok" : res.errstr, NULL);
    if (res.url != NULL && strcmp(res.url, n->url) != 0)
        n->final_url = xstrdup(res.url);

    /* A resource names its Capability List in a Link header whatever its
     * type, and even when its body is nothing we can parse. */
    if (res.status >= 200 && res.status <= 299) {
        struct ex_weblink_ctx wc = { n, res.url ? res.url : n->url };
        /* Links before a malformed one were delivered; lenient reading
         * keeps them. */
        for (size_t i = 0; i < res.nlinks; i++)
            if (rs_link_header_parse(res.links[i], strlen(res.links[i]),
                                     ex_on_weblink, &wc) != 0)
                rs_log_kv(RS_LOG_DEBUG, "malformed Link header", "url",
                          n->url, "value", res.links[i], NULL);
    }

    const struct rs_diag *d;
    if (ld.mode == EX_XML && rc == 0)
        rc = rs_parser_finish(ld.p);
    if (ld.mode == EX_XML && (d = rs_parser_error(ld.p)) != NULL) {
        ex_node_fail(n, rc, d->line, d->msg);
    } else if (rc != 0) {
        ex_node_fail(n, rc, 0, res.errstr[0] ? res.errstr : rs_strerror(rc));
    } else if (ld.mode == EX_HTML) {
        struct ex_weblink_ctx wc = { n, res.url ? res.url : n->url };
        n->is_html = true;
        if (rs_html_links(ld.buf, ld.len, ex_on_weblink, &wc) != 0)
            rs_log_kv(RS_LOG_DEBUG, "HTML links not all read", "url", n->url,
                      NULL);
        ex_node_fail(n, RS_EINVALID, 0,
                     "an HTML page, not a ResourceSync document");
    } else if (ld.mode == EX_TEXT) {
        n->text = ld.buf;
        n->text_len = ld.len;
        ld.buf = NULL;
    } else if (ld.mode == EX_UNKNOWN) {
        ex_node_fail(n, RS_EPARSE, 0, "empty response");
    } else {
        n->is_doc = true;
        n->nentries = rs_parser_entries(ld.p);
    }
    rs_free(ld.buf);
    rs_parser_free(ld.p);
    rs_fetch_result_cleanup(&res);
}

/* The node for url: the one already fetched (as requested or as a
 * redirect's target), else a new fetch while the budget lasts. */
static struct ex_node *
ex_get(struct explorer *ex, const char *url, bool as_text)
{
    struct ex_node *n = ex_find(ex, url);
    if (n != NULL)
        return n;
    n = rs_calloc(1, sizeof(*n));
    if (n == NULL)
        die_oom();
    n->url = xstrdup(url);
    n->at = n->completed = n->from = n->until = RS_TIME_NONE;
    if (ex->n == ex->cap) {
        ex->cap = ex->cap ? 2 * ex->cap : 64;
        ex->nodes = xrealloc(ex->nodes, ex->cap * sizeof(*ex->nodes));
    }
    ex->nodes[ex->n++] = n;
    if (ex->fetched >= ex->cli->max_docs) {
        char msg[128];
        snprintf(msg, sizeof(msg), "not fetched: --max-docs %zu reached",
                 ex->cli->max_docs);
        ex_node_fail(n, RS_ETOOBIG, 0, msg);
        return n;
    }
    ex->fetched++;
    ex_load(ex, n, as_text);
    return n;
}

static bool
ex_budget_left(const struct explorer *ex)
{
    return ex->fetched < ex->cli->max_docs;
}

/* ------------------------------------------------------------- printing */

static void
ex_print_node(struct explorer *ex, struct ex_node *n, const char *listed_as,
              int depth, const char *label)
{
    char tb[RS_TIME_BUFSZ];
    const char *cap = n->is_doc ? n->cap : listed_as ? listed_as : "document";
    printf("%*s%s%s %s", 2 * depth, "", label, cap, n->url);
    if (n->printed) {
        printf(": shown above\n");
        return;
    }
    n->printed = true;
    if (!n->is_doc) {
        ex->failures++;
        if (n->err_line > 0)
            printf(": error: line %u: %s\n", n->err_line, n->err);
        else
            printf(": error: %s\n", n->err);
        return;
    }
    printf(": %s, %zu entr%s", rs_root_name(n->root), n->nentries,
           n->nentries == 1 ? "y" : "ies");
    if (fmt_time(n->at, tb) != NULL)
        printf(", at %s", tb);
    if (fmt_time(n->completed, tb) != NULL)
        printf(", completed %s", tb);
    if (fmt_time(n->from, tb) != NULL)
        printf(", from %s", tb);
    if (fmt_time(n->until, tb) != NULL)
        printf(", until %s", tb);
    if (listed_as != NULL && strcmp(listed_as, n->cap) != 0)
        printf(" (listed as %s)", listed_as);
    if (n->final_url != NULL)
        printf(" (redirected to %s)", n->final_url);
    if (n->nwarnings > 0) {
        printf(" (%zu warning%s; first: ", n->nwarnings,
               n->nwarnings == 1 ? "" : "s");
        if (n->warn_line > 0)
            printf("line %u: ", n->warn_line);
        printf("%s)", n->warn);
    }
    putchar('\n');
}

static void ex_walk(struct explorer *ex, const char *url,
                    const char *listed_as, int depth, const char *label);

static void
ex_walk_kids(struct explorer *ex, struct ex_node *n, int depth)
{
    size_t skipped = 0;
    /* An index's parts are documents of its own capability. */
    const char *inherit = n->root == RS_ROOT_SITEMAPINDEX ? n->cap : NULL;
    if (n->nkids > 0 && depth > RSDOC_MAX_DEPTH) {
        printf("%*s(deeper than %d levels: not followed)\n", 2 * depth, "",
               RSDOC_MAX_DEPTH);
        return;
    }
    for (size_t i = 0; i < n->nkids; i++) {
        const struct ex_child *k = &n->kids[i];
        const char *cap = k->cap ? k->cap : inherit;
        if (k->channel) {
            printf("%*s%s %s: notification channel", 2 * depth, "",
                   cap ? cap : "notification", k->loc);
            if (k->hub != NULL)
                printf(", hub %s", k->hub);
            putchar('\n');
            continue;
        }
        if (!ex_budget_left(ex) && ex_find(ex, k->loc) == NULL) {
            skipped++;
            continue;
        }
        ex_walk(ex, k->loc, cap, depth, k->contents ? "contents: " : "");
    }
    if (skipped > 0) {
        printf("%*s... %zu more not fetched (--max-docs %zu reached)\n",
               2 * depth, "", skipped, ex->cli->max_docs);
        ex->failures++;
    }
}

/* Print url's node and its subtree; then the pages that follow it through
 * rel="next", each at the same depth, until the chain ends or loops. */
static void
ex_walk(struct explorer *ex, const char *url, const char *listed_as,
        int depth, const char *label)
{
    struct ex_node *n = ex_get(ex, url, false);
    bool seen = n->printed;
    ex_print_node(ex, n, listed_as, depth, label);
    if (seen)
        return;
    ex_walk_kids(ex, n, depth + 1);
    while (n->next != NULL) {
        struct ex_node *pg = ex_get(ex, n->next, false);
        seen = pg->printed;
        ex_print_node(ex, pg, n->is_doc ? n->cap : listed_as, depth,
                      "next page: ");
        if (seen)
            break;
        ex_walk_kids(ex, pg, depth + 1);
        n = pg;
    }
}

/* ------------------------------------------------------------ discovery */

struct ex_sitemaps {
    char **urls;
    size_t n;
    const char *base;
};

static int
ex_on_sitemap(void *ud, const char *url)
{
    struct ex_sitemaps *s = ud;
    if (s->n >= RS_DISCOVER_MAX_LINKS)
        return 1;
    s->urls = xrealloc(s->urls, (s->n + 1) * sizeof(char *));
    s->urls[s->n++] = resolve(s->base, url);
    return 0;
}

static char *
ex_concat(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = rs_malloc(la + lb + 1);
    if (s == NULL)
        die_oom();
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

/* robots.txt Sitemap: lines name Resource Lists; climb rel="up" (twice at
 * most: Resource List -> Capability List -> Source Description) and walk
 * from the top. Nodes fetched while climbing are reused by the walk. */
static bool
ex_try_robots(struct explorer *ex, const char *origin)
{
    char *robots = ex_concat(origin, "/robots.txt");
    struct ex_node *rn = ex_get(ex, robots, true);
    struct ex_sitemaps sm = { .base = robots };
    bool found = false;
    if (rn->text != NULL)
        if (rs_robots_sitemaps(rn->text, rn->text_len, ex_on_sitemap, &sm) != 0)
            rs_log_kv(RS_LOG_DEBUG, "robots.txt not all read", "url", robots,
                      NULL);
    for (size_t i = 0; i < sm.n; i++) {
        const char *top = sm.urls[i];
        struct ex_node *n = ex_get(ex, top, false);
        for (int up = 0; up < 2 && n->is_doc && n->up != NULL &&
                         n->capv != RS_CAP_DESCRIPTION; up++) {
            struct ex_node *parent = ex_get(ex, n->up, false);
            if (!parent->is_doc)
                break;
            top = n->up;
            n = parent;
        }
        printf("discovery: %s lists %s; walking from %s\n", robots,
               sm.urls[i], top);
        found = true;
        ex_walk(ex, top, NULL, 0, "");
    }
    if (!found)
        printf("discovery: %s: %s\n", robots,
               rn->text != NULL ? "no Sitemap: lines" : rn->err);
    for (size_t i = 0; i < sm.n; i++)
        rs_free(sm.urls[i]);
    rs_free(sm.urls);
    rs_free(robots);
    return found;
}

static bool
ex_is_site_root(const char *url, const char *origin)
{
    size_t lo = strlen(origin);
    return strncasecmp(url, origin, lo) == 0 &&
           (url[lo] == '\0' || strcmp(url + lo, "/") == 0);
}

/*
 * Where to start (PROTOCOL.md section 2): a site root tries
 * /.well-known/resourcesync first; any URL that is itself a ResourceSync
 * document is walked from there; otherwise a Link header or HTML <link>
 * with rel="resourcesync" names a Capability List; otherwise the origin's
 * /.well-known/resourcesync, then robots.txt.
 */
static void
ex_discover(struct explorer *ex, const char *url)
{
    char *origin = NULL;
    if (rs_url_origin(url, &origin) != 0)
        origin = xstrdup(url);
    char *wk = ex_concat(origin, "/.well-known/resourcesync");
    bool root = ex_is_site_root(url, origin);
    struct ex_node *n;

    if (root) {
        n = ex_get(ex, wk, false);
        if (n->is_doc) {
            printf("discovery: %s\n", wk);
            ex_walk(ex, wk, NULL, 0, "");
            goto out;
        }
        printf("discovery: %s: %s\n", wk, n->err);
    }
    n = ex_get(ex, url, false);
    if (n->is_doc) {
        ex_walk(ex, url, NULL, 0, "");
        goto out;
    }
    if (n->nrslinks > 0) {
        for (size_t i = 0; i < n->nrslinks; i++) {
            printf("discovery: %s links to %s (%s rel=\"resourcesync\")\n",
                   n->url, n->rslinks[i],
                   n->is_html ? "HTML <link>" : "Link header");
            ex_walk(ex, n->rslinks[i], NULL, 0, "");
        }
        goto out;
    }
    printf("discovery: %s: %s\n", url, n->err);
    if (!root) {
        n = ex_get(ex, wk, false);
        if (n->is_doc) {
            printf("discovery: %s\n", wk);
            ex_walk(ex, wk, NULL, 0, "");
            goto out;
        }
        printf("discovery: %s: %s\n", wk, n->err);
    }
    if (!ex_try_robots(ex, origin)) {
        printf("no ResourceSync document found from %s\n", url);
        ex->failures++;
    }
out:
    rs_free(wk);
    rs_free(origin);
}

static int
cmd_explore(const struct cli *cli, int argc, char **argv)
{
    if (argc != 1 || !is_url(argv[0])) {
        fputs("rsdoc explore: exactly one http(s) URL expected "
              "(rsdoc --help)\n", stderr);
        return EXIT_USAGE;
    }
    struct explorer ex = { .cli = cli };
    ex_discover(&ex, argv[0]);
    printf("%zu document%s fetched, %zu problem%s\n", ex.fetched,
           ex.fetched == 1 ? "" : "s", ex.failures,
           ex.failures == 1 ? "" : "s");
    for (size_t i = 0; i < ex.n; i++)
        ex_node_free(ex.nodes[i]);
    rs_free(ex.nodes);
    return ex.failures > 0 ? EXIT_FAIL : EXIT_OK;
}

/* ================================================================= main */

static const char usage_text[] =
"Usage: rsdoc [OPTIONS] COMMAND [OPTIONS] ARGS...\n"
"\n"
"Validate, show and explore ResourceSync documents (Z39.99-2014 and the\n"
"2017 revision, notifications included) from files, standard input (-) or\n"
"http(s) URLs. Documents are parsed as they stream in, in bounded memory.\n"
"\n"
"Commands:\n"
"  validate [--lenient|--strict] [--max-errors N] FILE|URL|- ...\n"
"      Check each document against the spec: every MUST broken is an\n"
"      error, every SHOULD a warning. On stdout, a valid document gets one\n"
"      line, an invalid one a line per error (up to --max-errors):\n"
"        NAME: OK CAPABILITY ROOT N entries\n"
"        NAME:LINE: error: MESSAGE      (NAME: error: MESSAGE without a line)\n"
"      Warnings go to stderr as NAME:LINE: warning: MESSAGE.\n"
"  show [--lenient|--strict] [--json] FILE|URL|-\n"
"      Print the parsed document: root, capability, metadata, root links and\n"
"      every entry with all its attributes. --json prints one object\n"
"      {\"document\",\"root\",\"capability\",\"md\",\"entries\":[...],\"links\",\"count\"}\n"
"      with the entries streamed one per line; root links come after them\n"
"      (a Source may put rel=\"next\" last). A document that fails half-way\n"
"      ends the object with an \"error\" member.\n"
"  explore [--lenient|--strict] [--max-docs N] URL\n"
"      Discover a Source from URL (a site root, via /.well-known/resourcesync;\n"
"      a Source Description or Capability List; any resource whose Link\n"
"      header or HTML page names rel=\"resourcesync\"; or robots.txt Sitemap:\n"
"      lines) and print its tree: Capability Lists, Resource Lists and their\n"
"      indexes and parts, Change Lists and their next pages, dumps and the\n"
"      manifests their packages link (rel=\"contents\"; packages are not\n"
"      fetched), and notification channels with their hubs. Resource entries\n"
"      are counted, not listed. No URL is fetched twice; errors are shown in\n"
"      the tree and the walk goes on.\n"
"  help                 this text\n"
"\n"
"Options:\n"
"  --lenient            read as a Destination (rssub) does: a broken MUST\n"
"                       whose meaning stays clear (a Change List newest\n"
"                       first, no time zone, no at) is a warning; what\n"
"                       cannot be read stays an error\n"
"  --strict             treat warnings (SHOULDs, and omissions the spec's own\n"
"                       examples make, such as a missing rel=\"up\" link) as\n"
"                       errors\n"
"  --max-errors N       validate: report at most N errors per document\n"
"                       (default 100)\n"
"  --json               show: print JSON\n"
"  --max-docs N         explore: fetch at most N documents (default 1000)\n"
"  --max-bytes N        refuse documents larger than N bytes (default 50 MB)\n"
"  --timeout SECONDS    limit each HTTP request (default 60)\n"
"  -v, --verbose        log each fetch to stderr\n"
"  --log-format F       auto, text, logfmt or json (default auto: text on a\n"
"                       terminal, logfmt otherwise)\n"
"  -h, --help           this text\n"
"  -V, --version        print the version\n"
"\n"
"Exit status:\n"
"  0  every document was read and is valid (warnings allowed)\n"
"  1  a document is invalid, could not be read or fetched, or explore\n"
"     met a problem\n"
"  2  usage error\n";

enum {
    OPT_STRICT = 256,
    OPT_LENIENT,
    OPT_MAX_ERRORS,
    OPT_JSON,
    OPT_MAX_DOCS,
    OPT_MAX_BYTES,
    OPT_TIMEOUT,
    OPT_LOG_FORMAT,
};

static const struct option long_opts[] = {
    { "strict", no_argument, NULL, OPT_STRICT },
    { "lenient", no_argument, NULL, OPT_LENIENT },
    { "max-errors", required_argument, NULL, OPT_MAX_ERRORS },
    { "json", no_argument, NULL, OPT_JSON },
    { "max-docs", required_argument, NULL, OPT_MAX_DOCS },
    { "max-bytes", required_argument, NULL, OPT_MAX_BYTES },
    { "timeout", required_argument, NULL, OPT_TIMEOUT },
    { "verbose", no_argument, NULL, 'v' },
    { "log-format", required_argument, NULL, OPT_LOG_FORMAT },
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, 'V' },
    { NULL, 0, NULL, 0 },
};

static int
usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int
usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("rsdoc: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (rsdoc --help)\n", stderr);
    return EXIT_USAGE;
}

/*
 * Options may stand anywhere: before the command, after it, between
 * operands (getopt_long permutes, "--" ends them). The first operand is the
 * command. Returns -1 to go on, else the exit status.
 */
static int
parse_options(struct cli *cli, int argc, char **argv, struct rs_log_opts *lo,
              int *first)
{
    size_t n;
    int c;
    bool json = false, max_docs = false, max_errors = false;
    bool strict = false, lenient = false;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "hvV", long_opts, NULL)) != -1) {
        switch (c) {
        case OPT_STRICT:
            strict = true;
            cli->mode = RS_CHECK_STRICT;
            break;
        case OPT_LENIENT:
            lenient = true;
            cli->mode = RS_CHECK_READER;
            break;
        case OPT_MAX_ERRORS:
            if (!parse_size(optarg, &n) || n > 100000)
                return usage_error("--max-errors needs a number "
                                   "(1..100000)");
            cli->max_errors = (unsigned)n;
            max_errors = true;
            break;
        case OPT_JSON:
            json = cli->json = true;
            break;
        case OPT_MAX_DOCS:
            if (!parse_size(optarg, &cli->max_docs))
                return usage_error("--max-docs needs a positive number");
            max_docs = true;
            break;
        case OPT_MAX_BYTES:
            if (!parse_size(optarg, &cli->max_bytes))
                return usage_error("--max-bytes needs a positive number");
            break;
        case OPT_TIMEOUT:
            if (!parse_size(optarg, &n) || n > 86400)
                return usage_error("--timeout needs seconds (1..86400)");
            cli->timeout_ms = (long)n * 1000;
            break;
        case 'v':
            lo->level = RS_LOG_DEBUG;
            break;
        case OPT_LOG_FORMAT:
            if (rs_log_format_from(optarg, &lo->format) != 0)
                return usage_error("--log-format: auto, text, logfmt or json");
            break;
        case 'h':
            fputs(usage_text, stdout);
            return EXIT_OK;
        case 'V':
            printf("rsdoc %s\n", RS_VERSION);
            return EXIT_OK;
        default:
            if (optopt != 0 && optopt < 256)
                return usage_error("unknown option -%c", optopt);
            return usage_error("unknown or incomplete option %s",
                               argv[optind - 1]);
        }
    }
    if (optind >= argc) {
        fputs(usage_text, stderr);
        return EXIT_USAGE;
    }
    cli->cmd = argv[optind];
    if (strcmp(cli->cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return EXIT_OK;
    }
    if (strcmp(cli->cmd, "validate") != 0 && strcmp(cli->cmd, "show") != 0 &&
        strcmp(cli->cmd, "explore") != 0)
        return usage_error("unknown command '%s'", cli->cmd);
    if (json && strcmp(cli->cmd, "show") != 0)
        return usage_error("--json is an option of show");
    if (max_docs && strcmp(cli->cmd, "explore") != 0)
        return usage_error("--max-docs is an option of explore");
    if (max_errors && strcmp(cli->cmd, "validate") != 0)
        return usage_error("--max-errors is an option of validate");
    if (strict && lenient)
        return usage_error("--lenient and --strict exclude each other");
    *first = optind + 1;
    return -1;
}

int
main(int argc, char **argv)
{
    struct cli cli = {
        .mode = RS_CHECK_SPEC,
        .max_errors = RSDOC_MAX_ERRORS,
        .max_docs = RSDOC_MAX_DOCS,
    };
    struct rs_log_opts lo = { .level = RS_LOG_WARN, .app = "rsdoc" };
    int first = 0, rc;

    rc = parse_options(&cli, argc, argv, &lo, &first);
    if (rc >= 0)
        return rc;
    int nargs = argc - first;
    char **args = argv + first;
    if (nargs == 0)
        return usage_error("%s needs %s", cli.cmd,
                           strcmp(cli.cmd, "explore") == 0
                               ? "a URL" : "a FILE, URL or -");
    if (rs_log_init(&lo) != 0)
        return usage_error("cannot set up logging");
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fputs("rsdoc: cannot initialise libcurl\n", stderr);
        return EXIT_FAIL;
    }

    if (strcmp(cli.cmd, "validate") == 0)
        rc = cmd_validate(&cli, nargs, args);
    else if (strcmp(cli.cmd, "show") == 0)
        rc = cmd_show(&cli, nargs, args);
    else
        rc = cmd_explore(&cli, nargs, args);

    curl_global_cleanup();
    rs_log_shutdown();
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "rsdoc: cannot write output: %s\n", strerror(errno));
        return EXIT_FAIL;
    }
    return rc;
}
