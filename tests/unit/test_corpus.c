/*
 * test_corpus.c - the document corpus (tests/data/corpus.tsv) against the
 * parser: every committed document through rs_doc_parse in the three modes
 * of rs_check.h (the reader's view, the spec, strict) and the streaming
 * parser in 1-, 7- and 4096-byte chunks, which must agree with each other
 * and with the manifest; round trips through rs_doc_write; the spec's own
 * examples valid by default; and generated hostile inputs (entry and byte
 * limits, deep nesting, entity bombs) that must fail fast. Each table test
 * checks every file and lists every disagreement before failing.
 */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "rs_alloc.h"
#include "rs_check.h"
#include "rs_doc.h"
#include "rs_error.h"
#include "rs_parse.h"
#include "rs_write.h"

/* ------------------------------------------------------------ manifest */

enum expect {
    EXP_OK,
    EXP_WARN,
    EXP_LENIENT,
    EXP_PARSE,
    EXP_INVALID,
    EXP_TOOBIG,
};

struct corpus_case {
    char path[160];
    enum expect expect;
    unsigned line;            /* 0: not checked */
    char msg[64];             /* "" : not checked */
    char cap[48];             /* ok/warn: as written at the root */
    long entries;             /* ok/warn: -1 otherwise */
    char root[16];            /* ok/warn: "urlset" / "sitemapindex" */
    unsigned mline;           /* line in corpus.tsv, for messages */
};

struct corpus {
    struct corpus_case *c;
    size_t n;
};

static const char *const expect_names[] = {
    [EXP_OK] = "ok",
    [EXP_WARN] = "warn",
    [EXP_LENIENT] = "lenient",
    [EXP_PARSE] = "error-parse",
    [EXP_INVALID] = "error-invalid",
    [EXP_TOOBIG] = "error-toobig",
};

static const char *const mode_names[] = {
    [RS_CHECK_READER] = "reader",
    [RS_CHECK_SPEC] = "spec",
    [RS_CHECK_STRICT] = "strict",
};

static int
expect_code(enum expect e, enum rs_check_mode mode)
{
    switch (e) {
    case EXP_OK:
        return RS_OK;
    case EXP_WARN:
        return mode == RS_CHECK_STRICT ? RS_EINVALID : RS_OK;
    case EXP_LENIENT:
        return mode == RS_CHECK_READER ? RS_OK : RS_EINVALID;
    case EXP_PARSE:
        return RS_EPARSE;
    case EXP_INVALID:
        return RS_EINVALID;
    case EXP_TOOBIG:
        return RS_ETOOBIG;
    }
    return RS_OK;
}

/* Accepted in the reader's view (the 7-column lines). */
static bool
accepted(enum expect e)
{
    return e == EXP_OK || e == EXP_WARN || e == EXP_LENIENT;
}

/* Copy field [b, e) into dst (size n); false when it does not fit. */
static bool
field_copy(char *dst, size_t n, const char *b, const char *e)
{
    size_t len = (size_t)(e - b);
    if (len >= n)
        return false;
    memcpy(dst, b, len);
    dst[len] = '\0';
    return true;
}

static bool
parse_ulong(const char *s, unsigned long max, unsigned long *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > max)
        return false;
    *out = v;
    return true;
}

/* One manifest line into c; fails the test on a malformed line. */
static void
manifest_line(struct corpus_case *c, char *line, unsigned mline)
{
    char *f[8];
    size_t nf = 0;
    char *p = line;
    for (;;) {
        if (nf == 8)
            fail_msg("corpus.tsv:%u: too many columns", mline);
        f[nf++] = p;
        char *tab = strchr(p, '\t');
        if (tab == NULL)
            break;
        *tab = '\0';
        p = tab + 1;
    }
    memset(c, 0, sizeof(*c));
    c->mline = mline;
    c->entries = -1;
    if (nf != 4 && nf != 7)
        fail_msg("corpus.tsv:%u: %zu columns (want 4, or 7 for ok/warn)",
                 mline, nf);
    if (!field_copy(c->path, sizeof(c->path), f[0], f[0] + strlen(f[0])))
        fail_msg("corpus.tsv:%u: path too long", mline);
    size_t i;
    for (i = 0; i < sizeof(expect_names) / sizeof(expect_names[0]); i++)
        if (strcmp(f[1], expect_names[i]) == 0)
            break;
    if (i == sizeof(expect_names) / sizeof(expect_names[0]))
        fail_msg("corpus.tsv:%u: unknown expect '%s'", mline, f[1]);
    c->expect = (enum expect)i;
    unsigned long v = 0;
    if (!parse_ulong(f[2], 1000000, &v))
        fail_msg("corpus.tsv:%u: bad line number '%s'", mline, f[2]);
    c->line = (unsigned)v;
    if (strcmp(f[3], "-") != 0 &&
        !field_copy(c->msg, sizeof(c->msg), f[3], f[3] + strlen(f[3])))
        fail_msg("corpus.tsv:%u: message too long", mline);
    if (accepted(c->expect) != (nf == 7))
        fail_msg("corpus.tsv:%u: ok/warn/lenient lines have 7 columns, "
                 "errors 4", mline);
    if (nf == 7) {
        if (!field_copy(c->cap, sizeof(c->cap), f[4], f[4] + strlen(f[4])) ||
            !parse_ulong(f[5], RS_MAX_ENTRIES, &v) ||
            !field_copy(c->root, sizeof(c->root), f[6], f[6] + strlen(f[6])))
            fail_msg("corpus.tsv:%u: bad capability/entries/root", mline);
        c->entries = (long)v;
        if (strcmp(c->root, "urlset") != 0 &&
            strcmp(c->root, "sitemapindex") != 0)
            fail_msg("corpus.tsv:%u: root must be urlset or sitemapindex",
                     mline);
    }
    if ((c->expect == EXP_WARN || c->expect == EXP_LENIENT) &&
        c->msg[0] == '\0')
        fail_msg("corpus.tsv:%u: a warn or lenient line needs a message",
                 mline);
}

static int
corpus_setup(void **state)
{
    size_t len;
    char *text = tu_read_data("corpus.tsv", &len);
    struct corpus *cp = calloc(1, sizeof(*cp));
    assert_non_null(cp);
    size_t cap = 0;
    unsigned mline = 0;
    char *save = NULL;
    /* strtok_r would merge empty lines away, which is what we want here */
    for (char *line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        mline++;
        if (line[0] == '#' || line[0] == '\0')
            continue;
        if (cp->n == cap) {
            cap = cap ? cap * 2 : 128;
            cp->c = realloc(cp->c, cap * sizeof(*cp->c));
            assert_non_null(cp->c);
        }
        manifest_line(&cp->c[cp->n++], line, mline);
    }
    free(text);
    assert_true(cp->n > 0);
    *state = cp;
    return 0;
}

static int
corpus_teardown(void **state)
{
    struct corpus *cp = *state;
    if (cp != NULL) {
        free(cp->c);
        free(cp);
    }
    return 0;
}

/* ------------------------------------------------------------ outcomes */

/* What one parse of one document gave. */
struct outcome {
    int rc;
    unsigned line;
    char msg[256];
    /* accepted documents */
    bool have_head;
    enum rs_root root;
    enum rs_capability cap;
    bool alpha;
    char cap_other[48];
    size_t entries;
    /* warnings */
    unsigned nwarn;
    unsigned warn_line;       /* of the first */
    char warn_msg[256];
    /* streaming: locs delivered, compared on the fly against want_locs */
    const struct rs_doc *want;
    size_t loc_mismatch;      /* 1-based index of first mismatch, 0 none */
    unsigned nhead, nend;
};

static void
on_warning(void *ud, unsigned line, const char *msg)
{
    struct outcome *o = ud;
    if (o->nwarn++ == 0) {
        o->warn_line = line;
        snprintf(o->warn_msg, sizeof(o->warn_msg), "%s", msg ? msg : "");
    }
}

static void
outcome_head(struct outcome *o, const struct rs_head *h)
{
    o->have_head = true;
    o->root = h->root;
    o->cap = h->md.capability;
    o->alpha = h->md.capability_alpha;
    snprintf(o->cap_other, sizeof(o->cap_other), "%s",
             h->md.capability_other ? h->md.capability_other : "");
}

static int
st_on_head(void *ud, const struct rs_head *h)
{
    struct outcome *o = ud;
    o->nhead++;
    outcome_head(o, h);
    return 0;
}

static int
st_on_entry(void *ud, const struct rs_entry *e)
{
    struct outcome *o = ud;
    size_t i = o->entries++;
    if (o->want != NULL && o->loc_mismatch == 0 &&
        (i >= o->want->nentries || e->loc == NULL ||
         strcmp(e->loc, o->want->entries[i].loc) != 0))
        o->loc_mismatch = i + 1;
    return 0;
}

static int
st_on_end(void *ud, const struct rs_head *h)
{
    struct outcome *o = ud;
    o->nend++;
    outcome_head(o, h);
    return 0;
}

static struct rs_parse_opts
opts_for(struct outcome *o, enum rs_check_mode mode)
{
    struct rs_parse_opts opts;
    memset(&opts, 0, sizeof(opts));
    opts.mode = mode;
    opts.on_warning = on_warning;
    opts.warning_ud = o;
    /* the corpus is judged as rsdoc judges it: with the validator's
     * rules (a <loc> or a manifest path listed twice) */
    opts.unique = true;
    return opts;
}

/* rs_doc_parse; *docp gets the document when accepted (caller frees). */
static void
run_whole(const char *buf, size_t len, enum rs_check_mode mode,
          struct outcome *o, struct rs_doc **docp)
{
    memset(o, 0, sizeof(*o));
    struct rs_parse_opts opts = opts_for(o, mode);
    struct rs_diag diag;
    memset(&diag, 0, sizeof(diag));
    struct rs_doc *doc = NULL;
    o->rc = rs_doc_parse(buf, len, &opts, &doc, &diag);
    if (o->rc != 0) {
        o->line = diag.line;
        snprintf(o->msg, sizeof(o->msg), "%s", diag.msg);
        if (diag.code != o->rc)
            snprintf(o->msg, sizeof(o->msg), "diag.code %d != rc %d",
                     diag.code, o->rc);
        if (doc != NULL)
            snprintf(o->msg, sizeof(o->msg), "*out not NULL on error");
    } else if (doc == NULL) {
        o->rc = 1;
        snprintf(o->msg, sizeof(o->msg), "rc 0 but *out is NULL");
    } else {
        outcome_head(o, &doc->head);
        o->entries = doc->nentries;
    }
    if (docp != NULL && o->rc == 0)
        *docp = doc;
    else
        rs_doc_free(doc);
}

/* The streaming parser, fed chunk bytes at a time. */
static void
run_stream(const char *buf, size_t len, size_t chunk,
           enum rs_check_mode mode, size_t max_bytes,
           const struct rs_doc *want, struct outcome *o)
{
    memset(o, 0, sizeof(*o));
    o->want = want;
    struct rs_parse_opts opts = opts_for(o, mode);
    opts.max_bytes = max_bytes;
    const struct rs_parser_cbs cbs = { st_on_head, st_on_entry, st_on_end };
    struct rs_parser *p = rs_parser_new(&opts, &cbs, o);
    assert_non_null(p);
    int rc = 0;
    for (size_t off = 0; off < len && rc == 0; off += chunk)
        rc = rs_parser_feed(p, buf + off, len - off < chunk ? len - off
                                                            : chunk);
    if (rc == 0)
        rc = rs_parser_finish(p);
    o->rc = rc;
    const struct rs_diag *d = rs_parser_error(p);
    if (rc != 0) {
        if (d == NULL) {
            snprintf(o->msg, sizeof(o->msg), "rs_parser_error() is NULL");
        } else {
            o->line = d->line;
            snprintf(o->msg, sizeof(o->msg), "%s", d->msg);
            if (d->code != rc)
                snprintf(o->msg, sizeof(o->msg), "diag.code %d != rc %d",
                         d->code, rc);
        }
    } else if (d != NULL) {
        o->rc = 1;
        snprintf(o->msg, sizeof(o->msg), "rc 0 but rs_parser_error() set");
    } else if (rs_parser_entries(p) != o->entries) {
        o->rc = 1;
        snprintf(o->msg, sizeof(o->msg), "rs_parser_entries %zu != %zu",
                 rs_parser_entries(p), o->entries);
    } else if (o->nhead != 1 || o->nend != 1) {
        o->rc = 1;
        snprintf(o->msg, sizeof(o->msg), "on_head ran %u times, on_end %u",
                 o->nhead, o->nend);
    }
    rs_parser_free(p);
}

/* ------------------------------------------------------------ checking */

static bool
ci_contains(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay != '\0'; hay++)
        if (strncasecmp(hay, needle, n) == 0)
            return true;
    return n == 0;
}

static const char *
rc_name(int rc)
{
    switch (rc) {
    case RS_OK: return "ok";
    case RS_EPARSE: return "RS_EPARSE";
    case RS_EINVALID: return "RS_EINVALID";
    case RS_ETOOBIG: return "RS_ETOOBIG";
    case 1: return "(test-detected inconsistency)";
    default: return rs_strerror(rc);
    }
}

/* A message a user sees: non-empty, one line, no control characters. */
static bool
one_line(const char *m)
{
    if (*m == '\0')
        return false;
    for (; *m != '\0'; m++)
        if ((unsigned char)*m < 0x20 || *m == 0x7f)
            return false;
    return true;
}

/* Does o match the manifest line c (parsed in mode m)? Prints each
 * disagreement; returns the number found. */
static unsigned
check_outcome(const struct corpus_case *c, enum rs_check_mode m,
              const char *how, const struct outcome *o)
{
    unsigned bad = 0;
    int want = expect_code(c->expect, m);
    const char *mode = mode_names[m];
    if (o->rc != want) {
        print_error("%s [%s, %s]: want %s, got %s at line %u: %s\n", c->path,
                    how, mode, rc_name(want), rc_name(o->rc), o->line,
                    o->msg);
        return 1;
    }
    if (want != RS_OK && !one_line(o->msg)) {
        print_error("%s [%s, %s]: message is not one printable line: '%s'\n",
                    c->path, how, mode, o->msg);
        bad++;
    }
    if (o->nwarn != 0 && !one_line(o->warn_msg)) {
        print_error("%s [%s, %s]: warning is not one printable line: '%s'\n",
                    c->path, how, mode, o->warn_msg);
        bad++;
    }
    if (want != RS_OK) {
        if (c->line != 0 && o->line != c->line) {
            print_error("%s [%s, %s]: want line %u, got line %u (%s)\n",
                        c->path, how, mode, c->line, o->line, o->msg);
            bad++;
        }
        if (!ci_contains(o->msg, c->msg)) {
            print_error("%s [%s, %s]: message '%s' lacks '%s'\n", c->path,
                        how, mode, o->msg, c->msg);
            bad++;
        }
        return bad;
    }
    /* accepted: head and count */
    const char *want_root = c->root;
    if (strcmp(rs_root_name(o->root), want_root) != 0) {
        print_error("%s [%s, %s]: want root %s, got '%s'\n", c->path, how,
                    mode, want_root, rs_root_name(o->root));
        bad++;
    }
    bool alpha = false;
    enum rs_capability wcap = rs_capability_from(c->cap, &alpha);
    if (o->cap != wcap || o->alpha != alpha ||
        (wcap == RS_CAP_OTHER && strcmp(o->cap_other, c->cap) != 0)) {
        print_error("%s [%s, %s]: want capability %s, got '%s'%s%s\n",
                    c->path, how, mode, c->cap, rs_capability_name(o->cap),
                    o->alpha ? " (alpha spelling)" : "", o->cap_other);
        bad++;
    }
    if ((long)o->entries != c->entries) {
        print_error("%s [%s, %s]: want %ld entries, got %zu\n", c->path, how,
                    mode, c->entries, o->entries);
        bad++;
    }
    if (o->loc_mismatch != 0) {
        print_error("%s [%s, %s]: entry %zu's <loc> differs from the whole "
                    "parse\n", c->path, how, mode, o->loc_mismatch);
        bad++;
    }
    /* warnings: none for ok; for warn and lenient at least one, the
     * first naming the problem */
    if (c->expect == EXP_OK && o->nwarn != 0) {
        print_error("%s [%s, %s]: unexpected warning at line %u: %s\n",
                    c->path, how, mode, o->warn_line, o->warn_msg);
        bad++;
    }
    if (c->expect == EXP_WARN || c->expect == EXP_LENIENT) {
        if (o->nwarn == 0) {
            print_error("%s [%s, %s]: accepted without any warning\n",
                        c->path, how, mode);
            bad++;
        } else if (!ci_contains(o->warn_msg, c->msg) ||
                   (c->line != 0 && o->warn_line != c->line)) {
            print_error("%s [%s, %s]: want warning '%s' at line %u, got "
                        "line %u: %s\n", c->path, how, mode, c->msg, c->line,
                        o->warn_line, o->warn_msg);
            bad++;
        }
    }
    return bad;
}

/* Do two parses of the same bytes agree exactly (code, line, message)? */
static unsigned
check_agree(const struct corpus_case *c, enum rs_check_mode m,
            const char *how, const struct outcome *a, const struct outcome *b)
{
    if (a->rc == b->rc && a->line == b->line && strcmp(a->msg, b->msg) == 0 &&
        a->nwarn == b->nwarn)
        return 0;
    print_error("%s [%s, %s]: disagrees with the whole parse: %s line %u "
                "'%s' (%u warnings) vs %s line %u '%s' (%u warnings)\n",
                c->path, how, mode_names[m], rc_name(b->rc),
                b->line, b->msg, b->nwarn, rc_name(a->rc), a->line, a->msg,
                a->nwarn);
    return 1;
}

static void
report(unsigned bad, const char *what)
{
    if (bad != 0)
        fail_msg("%u disagreement(s) in %s (listed above)", bad, what);
}

/* ---------------------------------------------------------- the table */

/* corpus/manifest_complete: every committed document under valid/,
 * warn/, lenient/ and invalid/ is in corpus.tsv under the expectation its
 * directory stands for, and every listed file exists. */
static void
test_manifest_complete(void **state)
{
    const struct corpus *cp = *state;
    static const char *const dirs[] = { "valid", "warn", "lenient",
                                        "invalid" };
    unsigned bad = 0;
    size_t nfiles = 0;
    for (size_t i = 0; i < cp->n; i++) {
        const struct corpus_case *c = &cp->c[i];
        static const char *const want_dir[] = {
            [EXP_OK] = "valid/", [EXP_WARN] = "warn/",
            [EXP_LENIENT] = "lenient/", [EXP_PARSE] = "invalid/",
            [EXP_INVALID] = "invalid/", [EXP_TOOBIG] = "invalid/",
        };
        if (strncmp(c->path, want_dir[c->expect],
                    strlen(want_dir[c->expect])) != 0) {
            print_error("corpus.tsv:%u: %s is %s, so it belongs in %s\n",
                        c->mline, c->path, expect_names[c->expect],
                        want_dir[c->expect]);
            bad++;
        }
    }
    for (size_t d = 0; d < 4; d++) {
        DIR *dir = opendir(tu_data_path(dirs[d]));
        assert_non_null(dir);
        struct dirent *de;
        while ((de = readdir(dir)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            char rel[300];
            int k = snprintf(rel, sizeof(rel), "%s/%s", dirs[d],
                             de->d_name);
            assert_true(k > 0 && (size_t)k < sizeof(rel));
            nfiles++;
            size_t i;
            for (i = 0; i < cp->n; i++)
                if (strcmp(cp->c[i].path, rel) == 0)
                    break;
            if (i == cp->n) {
                print_error("%s is not listed in corpus.tsv\n", rel);
                bad++;
            }
        }
        closedir(dir);
    }
    for (size_t i = 0; i < cp->n; i++) {
        char *buf = tu_read_file(tu_data_path(cp->c[i].path), NULL);
        if (buf == NULL) {
            print_error("corpus.tsv:%u: %s does not exist\n", cp->c[i].mline,
                        cp->c[i].path);
            bad++;
        }
        free(buf);
        for (size_t j = 0; j < i; j++)
            if (strcmp(cp->c[i].path, cp->c[j].path) == 0) {
                print_error("corpus.tsv:%u: %s listed twice\n",
                            cp->c[i].mline, cp->c[i].path);
                bad++;
            }
    }
    assert_int_equal(nfiles, cp->n);
    report(bad, "the manifest");
}

static void
whole_all(const struct corpus *cp, enum rs_check_mode mode)
{
    unsigned bad = 0;
    char what[64];
    for (size_t i = 0; i < cp->n; i++) {
        const struct corpus_case *c = &cp->c[i];
        size_t len;
        char *buf = tu_read_data(c->path, &len);
        struct outcome o;
        run_whole(buf, len, mode, &o, NULL);
        bad += check_outcome(c, mode, "rs_doc_parse", &o);
        free(buf);
    }
    snprintf(what, sizeof(what), "%s whole parses", mode_names[mode]);
    report(bad, what);
}

/* corpus/whole_reader: rs_doc_parse with zeroed options (the reader's
 * view) gives each file's expected code, line, message, capability, root
 * and entry count; ok files warn about nothing, warn and lenient files
 * warn about their problem. */
static void
test_whole_reader(void **state)
{
    whole_all(*state, RS_CHECK_READER);
}

/* corpus/whole_spec: the same in the spec's mode: lenient files become
 * RS_EINVALID at the warning's line; warn files still only warn. */
static void
test_whole_spec(void **state)
{
    whole_all(*state, RS_CHECK_SPEC);
}

/* corpus/whole_strict: the same in strict mode: warn files become
 * RS_EINVALID at the warning's line too. */
static void
test_whole_strict(void **state)
{
    whole_all(*state, RS_CHECK_STRICT);
}

/* corpus/spec_examples_valid: every example of the spec texts (core-*,
 * notif-*, userguide-*) validates by default: ok or warn, never lenient
 * or an error; and there are as many as the texts print. */
static void
test_spec_examples_valid(void **state)
{
    const struct corpus *cp = *state;
    static const char *const prefixes[] = { "core-", "notif-alpha-",
                                            "notif-2017-", "userguide-" };
    unsigned bad = 0, n = 0;
    for (size_t i = 0; i < cp->n; i++) {
        const struct corpus_case *c = &cp->c[i];
        const char *base = strchr(c->path, '/');
        base = base != NULL ? base + 1 : c->path;
        bool example = false;
        for (size_t k = 0; k < sizeof(prefixes) / sizeof(prefixes[0]); k++)
            example = example ||
                      strncmp(base, prefixes[k], strlen(prefixes[k])) == 0;
        if (!example)
            continue;
        n++;
        if (c->expect != EXP_OK && c->expect != EXP_WARN) {
            print_error("%s: a spec example that does not validate by "
                        "default (%s)\n", c->path, expect_names[c->expect]);
            bad++;
        }
    }
    /* core 1-8 and 12-21, 12 rebuilt sections, alpha 3.1-5.2, five 2017
     * documents, three user guide pages */
    assert_true(n >= 18 + 12 + 4 + 5 + 3);
    report(bad, "the spec's examples");
}

/* corpus/stream_chunks: the streaming parser fed 1, 7 and 4096 bytes at a
 * time, default and strict, gives exactly what the whole parse gives (code,
 * line, message, warnings), delivers the same locs in order, runs on_head
 * and on_end once each, and matches the manifest. */
static void
test_stream_chunks(void **state)
{
    const struct corpus *cp = *state;
    static const size_t chunks[] = { 1, 7, 4096 };
    unsigned bad = 0;
    for (size_t i = 0; i < cp->n; i++) {
        const struct corpus_case *c = &cp->c[i];
        size_t len;
        char *buf = tu_read_data(c->path, &len);
        for (int m = RS_CHECK_READER; m <= RS_CHECK_STRICT; m++) {
            enum rs_check_mode mode = (enum rs_check_mode)m;
            struct outcome whole, st;
            struct rs_doc *doc = NULL;
            run_whole(buf, len, mode, &whole, &doc);
            for (size_t k = 0; k < 3; k++) {
                char how[32];
                snprintf(how, sizeof(how), "stream %zu-byte chunks",
                         chunks[k]);
                run_stream(buf, len, chunks[k], mode, 0, doc, &st);
                unsigned b = check_outcome(c, mode, how, &st);
                b += check_agree(c, mode, how, &whole, &st);
                bad += b;
                if (b != 0)
                    break; /* one report per file and mode is enough */
            }
            rs_doc_free(doc);
        }
        free(buf);
    }
    report(bad, "streaming parses");
}

/* corpus/round_trip: every file the reader accepts survives parse ->
 * rs_doc_write -> parse with the same root, capability, entry count and
 * locs; what the writer produces from an ok file passes strict parsing
 * without warnings (warn and lenient files are written with the writer's
 * lenient option, and re-read as a reader does). */
static void
test_round_trip(void **state)
{
    const struct corpus *cp = *state;
    unsigned bad = 0;
    for (size_t i = 0; i < cp->n; i++) {
        const struct corpus_case *c = &cp->c[i];
        if (!accepted(c->expect))
            continue;
        size_t len;
        char *buf = tu_read_data(c->path, &len);
        struct outcome o1, o2;
        struct rs_doc *d1 = NULL, *d2 = NULL;
        run_whole(buf, len, RS_CHECK_READER, &o1, &d1);
        free(buf);
        if (d1 == NULL)
            continue; /* already reported by corpus/whole_default */
        struct rs_write_opts wo = { .pretty = true, .lenient =
                                    c->expect != EXP_OK };
        char *out = NULL;
        size_t olen = 0;
        int rc = rs_doc_write(d1, &wo, &out, &olen);
        if (rc != 0) {
            print_error("%s [round trip]: rs_doc_write: %s\n", c->path,
                        rs_strerror(rc));
            bad++;
            rs_doc_free(d1);
            continue;
        }
        run_whole(out, olen,
                  c->expect == EXP_OK ? RS_CHECK_STRICT : RS_CHECK_READER,
                  &o2, &d2);
        if (o2.rc != 0) {
            print_error("%s [round trip]: re-parse: %s line %u: %s\n--- "
                        "written:\n%s\n---\n", c->path, rc_name(o2.rc),
                        o2.line, o2.msg, out);
            bad++;
        } else {
            if (o2.root != o1.root || o2.cap != o1.cap ||
                strcmp(o2.cap_other, o1.cap_other) != 0 ||
                d2->nentries != d1->nentries) {
                print_error("%s [round trip]: %s/%s/%zu became %s/%s/%zu\n",
                            c->path, rs_root_name(o1.root),
                            rs_capability_name(o1.cap), d1->nentries,
                            rs_root_name(o2.root),
                            rs_capability_name(o2.cap), d2->nentries);
                bad++;
            } else {
                for (size_t k = 0; k < d1->nentries; k++)
                    if (strcmp(d1->entries[k].loc, d2->entries[k].loc) != 0) {
                        print_error("%s [round trip]: entry %zu: %s became "
                                    "%s\n", c->path, k + 1,
                                    d1->entries[k].loc, d2->entries[k].loc);
                        bad++;
                        break;
                    }
            }
            if (c->expect == EXP_OK && o2.nwarn != 0) {
                print_error("%s [round trip]: written document warns: %s\n",
                            c->path, o2.warn_msg);
                bad++;
            }
        }
        rs_free(out);
        rs_doc_free(d2);
        rs_doc_free(d1);
    }
    report(bad, "round trips");
}

/* Parse a committed file that must be accepted; fails the test if not. */
static struct rs_doc *
parse_ok(const char *rel)
{
    size_t len;
    char *buf = tu_read_data(rel, &len);
    struct rs_doc *doc = NULL;
    struct rs_parse_opts opts;
    memset(&opts, 0, sizeof(opts));
    struct rs_diag diag;
    memset(&diag, 0, sizeof(diag));
    int rc = rs_doc_parse(buf, len, &opts, &doc, &diag);
    free(buf);
    if (rc != 0)
        fail_msg("%s: %s line %u: %s", rel, rc_name(rc), diag.line,
                 diag.msg);
    return doc;
}

/* corpus/model_details: the values behind a few files reach the model:
 * the hub's id annotation, the alpha spelling, pri, paging links placed
 * after the entries, the 1.1 datetime, UTC normalisation, four hashes. */
static void
test_model_details(void **state)
{
    (void)state;
    struct rs_doc *d = parse_ok("valid/notif-hub-annotated.xml");
    assert_non_null(d->head.hub_id);
    assert_string_equal(d->head.hub_id, "1700000000000-0");
    rs_doc_free(d);

    d = parse_ok("valid/notif-alpha-ex4.1-change-notification.xml");
    assert_int_equal(d->head.md.capability, RS_CAP_CHANGELIST_NOTIFICATION);
    assert_true(d->head.md.capability_alpha);
    assert_int_equal(d->entries[1].md.hash.n, 2);
    assert_int_equal(d->entries[1].md.length, 14599);
    assert_null(d->head.hub_id);
    rs_doc_free(d);

    d = parse_ok("valid/links-pri-and-all-attributes.xml");
    const struct rs_entry *e = &d->entries[0];
    const struct rs_link *l = rs_links_find(e->links, e->nlinks, "duplicate");
    assert_non_null(l);
    assert_string_equal(l->href, "http://mirror1.example.com/res1");
    assert_int_equal(l->pri, 1);
    l = rs_links_find(e->links, e->nlinks, "alternate");
    assert_non_null(l);
    assert_int_equal(l->pri, 10);
    assert_int_equal(l->length, 2048);
    assert_string_equal(l->path, "/resources/res1.html.gz");
    assert_string_equal(l->encoding, "gzip");
    assert_int_equal(l->hash.n, 1);
    assert_true(l->modified != RS_TIME_NONE);
    assert_int_equal(e->changefreq, RS_FREQ_DAILY);
    rs_doc_free(d);

    d = parse_ok("valid/userguide-resourcelist-page2-next-last.xml");
    l = rs_links_find(d->head.links, d->head.nlinks, "next");
    assert_non_null(l);
    assert_string_equal(l->href,
                        "https://your-site.example/resourcesync/"
                        "resourcelist.xml?page=3");
    assert_string_equal(d->entries[1].loc,
                        "https://your-site.example/record/"
                        "delta?lang=en&view=full");
    rs_doc_free(d);

    d = parse_ok("valid/changelist-1.1-datetime-no-lastmod.xml");
    assert_true(d->entries[0].lastmod == RS_TIME_NONE);
    rs_time_t t;
    assert_int_equal(rs_time_parse("2013-01-02T09:00:00Z", 20, &t), 0);
    assert_true(d->entries[0].md.datetime == t);
    assert_int_equal(d->entries[2].md.change, RS_CHANGE_DELETED);
    rs_doc_free(d);

    d = parse_ok("valid/changelist-offsets-utc-order.xml");
    assert_int_equal(rs_time_parse("2013-01-03T08:00:00Z", 20, &t), 0);
    assert_true(d->entries[0].lastmod == t);
    rs_doc_free(d);

    d = parse_ok("valid/hashes-multiple.xml");
    assert_int_equal(d->entries[0].md.hash.n, 4);
    assert_int_equal(d->entries[1].md.hash.n, 2);
    assert_int_equal(d->entries[0].md.length, 0);
    rs_doc_free(d);

    d = parse_ok("valid/xml-escapes-whitespace.xml");
    assert_string_equal(d->entries[1].loc,
                        "http://example.com/q?x=1&y=2&name=O'Brien");
    assert_string_equal(d->entries[2].loc, "http://example.com/res3");
    rs_doc_free(d);

    d = parse_ok("valid/xml-comments-pi-cdata.xml");
    assert_string_equal(d->entries[0].loc, "http://example.com/search?q=a&b=c");
    assert_string_equal(d->entries[1].loc, "http://example.com/res2");
    assert_true(d->entries[0].lastmod != RS_TIME_NONE);
    rs_doc_free(d);

    d = parse_ok("valid/foreign-namespaces-ignored.xml");
    assert_string_equal(d->entries[0].loc, "http://example.com/page1.html");
    rs_doc_free(d);
}

/* corpus/reader_repairs: what the reader's view does with what it
 * tolerates reaches the model: a padded <loc> trimmed, a time without a
 * zone taken as UTC, an empty <rs:ln/> dropped, a hash that is not hex
 * ignored (the rest of its rs:md kept), "changelistindex" read as a
 * changelist index, an rs:md before the loc read all the same, a deletion
 * without a time kept with no time. */
static void
test_reader_repairs(void **state)
{
    (void)state;
    rs_time_t t;
    struct rs_doc *d = parse_ok("warn/loc-padded-with-whitespace.xml");
    assert_string_equal(d->entries[1].loc,
                        "http://example.com/padded-with-whitespace");
    rs_doc_free(d);

    d = parse_ok("lenient/datetime-no-timezone.xml");
    assert_int_equal(rs_time_parse("2013-01-02T14:00:00Z", 20, &t), 0);
    assert_true(d->entries[1].lastmod == t);
    rs_doc_free(d);

    d = parse_ok("lenient/datetime-minutes-no-timezone.xml");
    assert_true(d->entries[1].lastmod == t);
    rs_doc_free(d);

    d = parse_ok("lenient/at-no-timezone.xml");
    assert_int_equal(rs_time_parse("2013-01-03T09:00:00Z", 20, &t), 0);
    assert_true(d->head.md.at == t);
    rs_doc_free(d);

    d = parse_ok("lenient/ln-empty.xml");
    assert_int_equal(d->nentries, 2);
    assert_int_equal(d->entries[1].nlinks, 0);
    rs_doc_free(d);

    d = parse_ok("lenient/ln-without-href.xml");
    for (size_t i = 0; i < d->entries[1].nlinks; i++)
        assert_non_null(d->entries[1].links[i].href);
    rs_doc_free(d);

    d = parse_ok("warn/hash-not-hex.xml");
    assert_int_equal(d->entries[1].md.hash.n, 0);
    assert_true(d->entries[1].has_md);
    rs_doc_free(d);

    d = parse_ok("lenient/changelistindex-root.xml");
    assert_int_equal(d->head.root, RS_ROOT_SITEMAPINDEX);
    assert_int_equal(d->head.md.capability, RS_CAP_CHANGELIST);
    assert_true(d->head.md.capability_index_alias);
    assert_null(d->head.md.capability_other);
    rs_doc_free(d);

    d = parse_ok("lenient/entry-md-before-loc.xml");
    assert_string_equal(d->entries[1].loc, "http://example.com/res2");
    assert_int_equal(d->entries[1].md.length, 42);
    rs_doc_free(d);

    d = parse_ok("lenient/changelist-deleted-without-time.xml");
    assert_int_equal(d->entries[1].md.change, RS_CHANGE_DELETED);
    assert_true(d->entries[1].lastmod == RS_TIME_NONE);
    assert_true(d->entries[1].md.datetime == RS_TIME_NONE);
    rs_doc_free(d);
}

/* ------------------------------------------------- generated documents */

/* A growing byte buffer for generated documents. */
struct gbuf {
    char *p;
    size_t len, cap;
};

static void
gb_add(struct gbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->p = realloc(b->p, cap);
        assert_non_null(b->p);
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void
gb_str(struct gbuf *b, const char *s)
{
    gb_add(b, s, strlen(s));
}

#define GEN_HEAD                                                              \
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"                            \
    "<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" "          \
    "xmlns:rs=\"http://www.openarchives.org/rs/terms/\">\n"                   \
    "  <rs:ln rel=\"up\" href=\"http://example.com/capabilitylist.xml\"/>\n"  \
    "  <rs:md capability=\"resourcelist\" at=\"2013-01-03T09:00:00Z\"/>\n"
#define GEN_HEAD_LINES 4

/* A Resource List of n one-line entries (entry i on line GEN_HEAD_LINES+i),
 * each loc padded with pad bytes of path. */
static void
gen_list(struct gbuf *b, size_t n, size_t pad)
{
    char *padding = malloc(pad + 1);
    assert_non_null(padding);
    memset(padding, 'p', pad);
    padding[pad] = '\0';
    gb_str(b, GEN_HEAD);
    char line[128];
    for (size_t i = 1; i <= n; i++) {
        int k = snprintf(line, sizeof(line),
                         "  <url><loc>http://example.com/r%zu/", i);
        gb_add(b, line, (size_t)k);
        gb_add(b, padding, pad);
        gb_str(b, "</loc></url>\n");
    }
    gb_str(b, "</urlset>\n");
    free(padding);
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* corpus/entries_limit: exactly 50,000 entries is a valid document;
 * 50,001 is RS_ETOOBIG at the line of entry 50,001 naming "entries",
 * whole and streamed, with at most 50,000 delivered; a configured
 * max_entries gives the same error at its own count. */
static void
test_entries_limit(void **state)
{
    (void)state;
    struct gbuf b = { 0 };
    gen_list(&b, RS_MAX_ENTRIES, 0);
    struct outcome o;
    struct rs_doc *doc = NULL;
    run_whole(b.p, b.len, RS_CHECK_STRICT, &o, &doc);
    assert_int_equal(o.rc, RS_OK);
    assert_int_equal(doc->nentries, RS_MAX_ENTRIES);
    rs_doc_free(doc);
    free(b.p);

    memset(&b, 0, sizeof(b));
    gen_list(&b, RS_MAX_ENTRIES + 1, 0);
    run_whole(b.p, b.len, RS_CHECK_READER, &o, NULL);
    assert_int_equal(o.rc, RS_ETOOBIG);
    assert_int_equal(o.line, GEN_HEAD_LINES + RS_MAX_ENTRIES + 1);
    assert_true(ci_contains(o.msg, "entries"));
    struct outcome st;
    run_stream(b.p, b.len, 4096, RS_CHECK_READER, 0, NULL, &st);
    assert_int_equal(st.rc, RS_ETOOBIG);
    assert_int_equal(st.line, o.line);
    assert_string_equal(st.msg, o.msg);
    assert_true(st.entries <= RS_MAX_ENTRIES);
    free(b.p);

    /* a configured limit */
    memset(&b, 0, sizeof(b));
    gen_list(&b, 4, 0);
    struct rs_parse_opts opts;
    memset(&opts, 0, sizeof(opts));
    opts.max_entries = 3;
    struct rs_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(rs_doc_parse(b.p, b.len, &opts, &doc, &diag),
                     RS_ETOOBIG);
    assert_null(doc);
    assert_int_equal(diag.line, GEN_HEAD_LINES + 4);
    opts.max_entries = 4;
    assert_int_equal(rs_doc_parse(b.p, b.len, &opts, &doc, &diag), RS_OK);
    assert_int_equal(doc->nentries, 4);
    rs_doc_free(doc);
    free(b.p);
}

/* corpus/bytes_limit: a 60 MB document (40,000 entries, each well-formed
 * and valid) is RS_ETOOBIG from rs_doc_parse and from a single
 * rs_parser_feed in well under 0.1 s - the size is checked before any byte
 * is parsed; streamed in 4096-byte chunks against a 1 MB limit it stops
 * without parsing past the limit; a document exactly at the limit passes. */
static void
test_bytes_limit(void **state)
{
    (void)state;
    struct gbuf b = { 0 };
    gen_list(&b, 40000, 1500);
    assert_true(b.len > 60u * 1000 * 1000);
    assert_true(b.len > RS_MAX_DOC_BYTES);

    struct outcome o;
    double t0 = now_s();
    run_whole(b.p, b.len, RS_CHECK_READER, &o, NULL);
    double dt = now_s() - t0;
    assert_int_equal(o.rc, RS_ETOOBIG);
    assert_true(o.msg[0] != '\0');
    if (dt > 0.1)
        fail_msg("rs_doc_parse took %.3f s to refuse 60 MB", dt);

    const struct rs_parser_cbs cbs = { st_on_head, st_on_entry, st_on_end };
    memset(&o, 0, sizeof(o));
    struct rs_parser *p = rs_parser_new(NULL, &cbs, &o);
    assert_non_null(p);
    t0 = now_s();
    int rc = rs_parser_feed(p, b.p, b.len);
    dt = now_s() - t0;
    assert_int_equal(rc, RS_ETOOBIG);
    assert_int_equal(o.entries, 0);
    if (dt > 0.1)
        fail_msg("rs_parser_feed took %.3f s to refuse 60 MB", dt);
    assert_int_equal(rs_parser_feed(p, "<", 1), RS_ETOOBIG);
    assert_int_equal(rs_parser_finish(p), RS_ETOOBIG);
    rs_parser_free(p);
    free(b.p);

    /* streamed against a small limit */
    memset(&b, 0, sizeof(b));
    gen_list(&b, 2000, 1000);
    assert_true(b.len > 2u * 1000 * 1000);
    const size_t lim = 1000 * 1000;
    struct outcome st;
    run_stream(b.p, b.len, 4096, RS_CHECK_READER, lim, NULL, &st);
    assert_int_equal(st.rc, RS_ETOOBIG);
    assert_true(st.entries < 1000);
    /* exactly at the limit is fine, one byte over is not */
    run_stream(b.p, b.len, 4096, RS_CHECK_READER, b.len, NULL, &st);
    assert_int_equal(st.rc, RS_OK);
    assert_int_equal(st.entries, 2000);
    run_stream(b.p, b.len, 4096, RS_CHECK_READER, b.len - 1, NULL, &st);
    assert_int_equal(st.rc, RS_ETOOBIG);
    free(b.p);
}

/* corpus/deep_nesting: 10,000 nested (foreign, so otherwise ignorable)
 * elements inside an entry are RS_EINVALID naming the nesting, whole and
 * streamed alike, in well under a second and without exhausting the stack;
 * 10,000 nested <url> elements likewise. */
static void
test_deep_nesting(void **state)
{
    (void)state;
    struct gbuf b = { 0 };
    gb_str(&b, GEN_HEAD);
    gb_str(&b, "  <url xmlns:x=\"http://example.org/x\">"
               "<loc>http://example.com/deep</loc>\n");
    for (int i = 0; i < 10000; i++)
        gb_str(&b, "<x:a>");
    for (int i = 0; i < 10000; i++)
        gb_str(&b, "</x:a>");
    gb_str(&b, "\n  </url>\n</urlset>\n");

    struct outcome o, st;
    double t0 = now_s();
    run_whole(b.p, b.len, RS_CHECK_READER, &o, NULL);
    double dt = now_s() - t0;
    run_stream(b.p, b.len, 4096, RS_CHECK_READER, 0, NULL, &st);
    free(b.p);
    if (dt > 0.5)
        fail_msg("10,000-deep nesting took %.3f s", dt);
    assert_int_equal(o.rc, RS_EINVALID);
    assert_true(ci_contains(o.msg, "nest"));
    assert_int_equal(o.line, GEN_HEAD_LINES + 2);
    assert_int_equal(st.rc, o.rc);
    assert_int_equal(st.line, o.line);
    assert_string_equal(st.msg, o.msg);

    memset(&b, 0, sizeof(b));
    gb_str(&b, GEN_HEAD);
    for (int i = 0; i < 10000; i++)
        gb_str(&b, "<url>");
    gb_str(&b, "\n");
    run_whole(b.p, b.len, RS_CHECK_READER, &o, NULL);
    free(b.p);
    assert_int_equal(o.rc, RS_EINVALID);
    assert_true(ci_contains(o.msg, "nest"));
}

/* corpus/text_and_link_limits: a <loc> longer than RS_PARSE_MAX_TEXT and
 * more than RS_PARSE_MAX_LINKS rs:ln in one entry or at the root are
 * RS_ETOOBIG at their line, whole and streamed alike; at the limits
 * themselves the documents are fine. */
static void
test_text_and_link_limits(void **state)
{
    (void)state;
    struct outcome o, st;
    for (int over = 0; over <= 1; over++) {
        /* one <loc> of RS_PARSE_MAX_TEXT (+1) bytes on line 5 */
        struct gbuf b = { 0 };
        gb_str(&b, GEN_HEAD);
        gb_str(&b, "  <url><loc>http://example.com/");
        size_t n = RS_PARSE_MAX_TEXT - strlen("http://example.com/") +
                   (size_t)over;
        for (size_t i = 0; i < n; i++)
            gb_str(&b, "x");
        gb_str(&b, "</loc></url>\n</urlset>\n");
        run_whole(b.p, b.len, RS_CHECK_READER, &o, NULL);
        run_stream(b.p, b.len, 7, RS_CHECK_READER, 0, NULL, &st);
        free(b.p);
        assert_int_equal(o.rc, over ? RS_ETOOBIG : RS_OK);
        assert_int_equal(st.rc, o.rc);
        if (over) {
            assert_int_equal(o.line, GEN_HEAD_LINES + 1);
            assert_int_equal(st.line, o.line);
            assert_string_equal(st.msg, o.msg);
        }

        /* RS_PARSE_MAX_LINKS (+1) links in an entry starting on line 5 */
        memset(&b, 0, sizeof(b));
        gb_str(&b, GEN_HEAD);
        gb_str(&b, "  <url><loc>http://example.com/r</loc>\n");
        for (int i = 0; i < RS_PARSE_MAX_LINKS + over; i++)
            gb_str(&b, "<rs:ln rel=\"duplicate\" "
                       "href=\"http://mirror.example.com/r\"/>");
        gb_str(&b, "\n  </url>\n</urlset>\n");
        run_whole(b.p, b.len, RS_CHECK_READER, &o, NULL);
        run_stream(b.p, b.len, 4096, RS_CHECK_READER, 0, NULL, &st);
        free(b.p);
        assert_int_equal(o.rc, over ? RS_ETOOBIG : RS_OK);
        assert_int_equal(st.rc, o.rc);
        if (over) {
            assert_int_equal(o.line, GEN_HEAD_LINES + 2);
            assert_int_equal(st.line, o.line);
        }

        /* and at the root, after the entries */
        memset(&b, 0, sizeof(b));
        gb_str(&b, GEN_HEAD);
        gb_str(&b, "  <url><loc>http://example.com/r</loc></url>\n");
        for (int i = 0; i < RS_PARSE_MAX_LINKS - 1 + over; i++)
            gb_str(&b, "<rs:ln rel=\"next\" "
                       "href=\"http://example.com/page2\"/>");
        gb_str(&b, "\n</urlset>\n");
        run_whole(b.p, b.len, RS_CHECK_READER, &o, NULL);
        free(b.p);
        assert_int_equal(o.rc, over ? RS_ETOOBIG : RS_OK);
    }
}

/* Build a bomb: entity b8 expands to 16^8 x 100 bytes (~430 GB), used in
 * an attribute value rather than in text. */
static void
gen_attribute_bomb(struct gbuf *b)
{
    gb_str(b, "<?xml version=\"1.0\"?>\n<!DOCTYPE urlset [<!ENTITY a \"");
    for (int i = 0; i < 100; i++)
        gb_str(b, "a");
    gb_str(b, "\">");
    char piece[32];
    for (int i = 1; i <= 8; i++) {
        int k = snprintf(piece, sizeof(piece), "<!ENTITY b%d \"", i);
        gb_add(b, piece, (size_t)k);
        for (int j = 0; j < 16; j++) {
            if (i == 1)
                k = snprintf(piece, sizeof(piece), "&a;");
            else
                k = snprintf(piece, sizeof(piece), "&b%d;", i - 1);
            gb_add(b, piece, (size_t)k);
        }
        gb_str(b, "\">");
    }
    gb_str(b, "]>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/"
              "0.9\" xmlns:rs=\"http://www.openarchives.org/rs/terms/\">\n"
              "<rs:md capability=\"&b8;\"/>\n</urlset>\n");
}

/* corpus/entity_bombs: the committed billion laughs (1e9 x "lol", 3 GB if
 * expanded), the XXE file and a bomb expanding in an attribute value are
 * refused at the DOCTYPE on line 2 (RS_EINVALID, naming the DTD), whole
 * and streamed byte by byte, each in well under a second. */
static void
test_entity_bombs(void **state)
{
    (void)state;
    static const char *const files[] = {
        "invalid/billion-laughs.xml",
        "invalid/xxe-external-entity.xml",
        NULL, /* generated */
    };
    for (size_t i = 0; i < 3; i++) {
        size_t len;
        char *buf;
        struct gbuf b = { 0 };
        if (files[i] != NULL) {
            buf = tu_read_data(files[i], &len);
        } else {
            gen_attribute_bomb(&b);
            buf = b.p;
            len = b.len;
        }
        struct outcome o, st;
        double t0 = now_s();
        run_whole(buf, len, RS_CHECK_READER, &o, NULL);
        run_stream(buf, len, 1, RS_CHECK_READER, 0, NULL, &st);
        double dt = now_s() - t0;
        free(buf);
        const char *name = files[i] ? files[i] : "attribute bomb";
        if (dt > 0.5)
            fail_msg("%s took %.3f s", name, dt);
        if (o.rc != RS_EINVALID || st.rc != RS_EINVALID || o.line != 2 ||
            st.line != 2 || !ci_contains(o.msg, "DTD") ||
            strcmp(o.msg, st.msg) != 0)
            fail_msg("%s: got %s line %u '%s', streamed %s line %u '%s'",
                     name, rc_name(o.rc), o.line, o.msg, rc_name(st.rc),
                     st.line, st.msg);
    }
}

#define CORPUS_TEST(name, fn) { "corpus/" name, fn, NULL, NULL, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        CORPUS_TEST("manifest_complete", test_manifest_complete),
        CORPUS_TEST("whole_reader", test_whole_reader),
        CORPUS_TEST("whole_spec", test_whole_spec),
        CORPUS_TEST("whole_strict", test_whole_strict),
        CORPUS_TEST("spec_examples_valid", test_spec_examples_valid),
        CORPUS_TEST("stream_chunks", test_stream_chunks),
        CORPUS_TEST("round_trip", test_round_trip),
        CORPUS_TEST("model_details", test_model_details),
        CORPUS_TEST("reader_repairs", test_reader_repairs),
        CORPUS_TEST("entries_limit", test_entries_limit),
        CORPUS_TEST("bytes_limit", test_bytes_limit),
        CORPUS_TEST("deep_nesting", test_deep_nesting),
        CORPUS_TEST("text_and_link_limits", test_text_and_link_limits),
        CORPUS_TEST("entity_bombs", test_entity_bombs),
    };
    return cmocka_run_group_tests_name("corpus", tests, corpus_setup,
                                       corpus_teardown);
}
