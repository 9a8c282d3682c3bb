/* test_source_changedump.c - rssource's Change Dump (source/changedump.c):
 * the capture tee'd from the catalog's read, one bitstream per change (a
 * file updated twice in one list gives two), read back through rssub's
 * verifying reader (subscriber/dumpzip.c); the document; the open list
 * has none; a list with a change not captured, over the cap or whose
 * spool does not match its digests gets none; the split; a restart; the
 * retention's prune; the names served; the waits after a failed build. */
#include "testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog.h"
#include "changedump.h"
#include "changelog.h"
#include "docs.h"
#include "dumpzip.h"
#include "rs_alloc.h"
#include "rs_hash.h"
#include "rs_parse.h"
#include "state.h"
#include "tree.h"

struct fx {
    char *dir, *sdir;
    char db[4200], ddir[4200];
    struct tree *tree;
    struct state *st;
    struct changelog *cl;
    struct catalog *cat;
    struct docs *docs;
    struct changedump *cd;
    rs_time_t now;
    int skips;                   /* on_skip calls */
    int64_t skipped_list;
};

static void
on_skip(void *ud, int64_t list, const char *why)
{
    struct fx *f = ud;
    assert_non_null(why);
    f->skips++;
    f->skipped_list = list;
}

/* (Re)make the changedump and the catalog that captures into it. */
static void
fx_cd(struct fx *f, uint64_t max_spool, size_t max_files)
{
    const char *e = NULL;
    struct changedump_opts o = { .docs = f->docs, .st = f->st,
                                 .state_path = f->db, .dir = f->ddir,
                                 .max_spool = max_spool,
                                 .max_files = max_files,
                                 .on_skip = on_skip, .ud = f };
    catalog_free(f->cat);
    changedump_free(f->cd);
    f->cd = changedump_new(&o, &e);
    if (f->cd == NULL)
        fail_msg("changedump_new: %s", e);
    struct catalog_opts co = { .tree = f->tree, .st = f->st,
                               .state_path = f->db, .cl = f->cl,
                               .cdump = f->cd };
    f->cat = catalog_new(&co);
    assert_non_null(f->cat);
}

static void
fx_write(struct fx *f, const char *rel, const char *content)
{
    char p[4200];
    snprintf(p, sizeof(p), "%s/%s", f->dir, rel);
    FILE *fp = fopen(p, "w");
    assert_non_null(fp);
    fputs(content, fp);
    fclose(fp);
}

/* Write rel (NULL content: delete it) and observe it as an event would. */
static void
fx_change(struct fx *f, const char *rel, const char *content)
{
    char p[4200];
    if (content != NULL) {
        fx_write(f, rel, content);
    } else {
        snprintf(p, sizeof(p), "%s/%s", f->dir, rel);
        assert_int_equal(unlink(p), 0);
    }
    f->now += 1000;
    assert_int_equal(catalog_observe(f->cat, rel, true, f->now), 0);
}

static int
fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    char err[256];
    const char *e;
    f->dir = tu_mkdtemp();
    f->sdir = tu_mkdtemp();
    f->now = rs_time_now();
    snprintf(f->db, sizeof(f->db), "%s/state.db", f->sdir);
    snprintf(f->ddir, sizeof(f->ddir), "%s/dumps", f->sdir);
    struct tree_opts to = { .dir = f->dir };
    assert_int_equal(tree_open(&to, &f->tree, err, sizeof(err)), 0);
    if (state_open(f->db, false, &f->st, err, sizeof(err)) != 0)
        fail_msg("state_open: %s", err);
    struct changelog_opts co = { .max_entries = 5 };
    f->cl = changelog_new(f->st, &co, f->now, &e);
    assert_non_null(f->cl);
    f->docs = docs_new("http://example.org/data/", &e);
    assert_non_null(f->docs);
    *state = f;
    return 0;
}

static int
fx_teardown(void **state)
{
    struct fx *f = *state;
    catalog_free(f->cat);
    changedump_free(f->cd);
    docs_free(f->docs);
    changelog_free(f->cl);
    state_free(f->st);
    tree_free(f->tree);
    tu_rmtree(f->dir);
    tu_rmtree(f->sdir);
    free(f->dir);
    free(f->sdir);
    free(f);
    return 0;
}

static char *
slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
    buf[n] = '\0';
    fclose(fp);
    *len = (size_t)n;
    return buf;
}

static bool
served(struct fx *f, const char *name)
{
    char path[4400];
    const char *ctype;
    return changedump_file(f->cd, name, path, sizeof(path), &ctype) == 0;
}

/* The published changedump.xml, parsed (NULL when there is none). */
static struct rs_doc *
fx_doc(struct fx *f)
{
    char path[4400];
    const char *ctype;
    size_t len;
    struct rs_doc *doc;
    if (changedump_file(f->cd, CHANGEDUMP_DOC, path, sizeof(path),
                        &ctype) != 0)
        return NULL;
    assert_string_equal(ctype, "application/xml");
    char *xml = slurp(path, &len);
    assert_int_equal(rs_doc_parse(xml, len, NULL, &doc, NULL), 0);
    free(xml);
    assert_int_equal(doc->head.md.capability, RS_CAP_CHANGEDUMP);
    return doc;
}

/* One expected manifest entry: the resource, its change, and the
 * content of its bitstream (NULL for a deletion). */
struct want {
    const char *rel;
    enum rs_change change;
    const char *content;
};

/* Package name of list L: every entry as wanted, in order, each bitstream
 * verified by dumpzip (length, md5, sha-256, CRC) and equal to content. */
static void
check_pkg(struct fx *f, const char *name, int64_t list,
          const struct want *w, size_t n)
{
    char path[4400], err[300], buf[8192];
    const char *ctype;
    struct dumpzip *z;
    struct state_clist cl;

    assert_int_equal(changedump_file(f->cd, name, path, sizeof(path),
                                     &ctype), 0);
    assert_string_equal(ctype, "application/zip");
    if (dumpzip_open(path, NULL, &z, err, sizeof(err)) != 0)
        fail_msg("dumpzip_open %s: %s", name, err);
    assert_int_equal(dumpzip_head(z)->md.capability,
                     RS_CAP_CHANGEDUMP_MANIFEST);
    assert_int_equal(state_clist_get(f->st, list, &cl), 0);
    assert_int_equal(dumpzip_head(z)->md.from, cl.from);
    assert_int_equal(dumpzip_head(z)->md.until, cl.until);
    assert_int_equal(dumpzip_count(z), n);
    rs_time_t prev = RS_TIME_NONE;
    for (size_t i = 0; i < n; i++) {
        const struct rs_entry *e = dumpzip_entry(z, i);
        char loc[256];
        snprintf(loc, sizeof(loc), "http://example.org/data/%s", w[i].rel);
        assert_string_equal(e->loc, loc);
        assert_int_equal(e->md.change, w[i].change);
        assert_true(e->md.datetime != RS_TIME_NONE);
        assert_true(prev == RS_TIME_NONE || e->md.datetime > prev);
        prev = e->md.datetime;
        if (w[i].content == NULL) {
            assert_null(e->md.path);
            continue;
        }
        assert_non_null(e->md.path);
        assert_int_equal(e->md.hash.n, 2);
        assert_int_equal(e->md.length, (int64_t)strlen(w[i].content));
        assert_non_null(e->md.type);
        assert_true(e->lastmod != RS_TIME_NONE);
        struct dumpzip_file *zf;
        if (dumpzip_file_open(z, i, &zf, err, sizeof(err)) != 0)
            fail_msg("dumpzip_file_open: %s", err);
        size_t got = 0, want = strlen(w[i].content);
        ssize_t k;
        while ((k = dumpzip_file_read(zf, buf, sizeof(buf))) > 0) {
            assert_true(got + (size_t)k <= want);
            assert_memory_equal(buf, w[i].content + got, (size_t)k);
            got += (size_t)k;
        }
        if (k != 0)
            fail_msg("%s: %s", w[i].rel, dumpzip_file_error(zf));
        assert_int_equal(got, want);
        dumpzip_file_close(zf);
    }
    dumpzip_close(z);

    /* the manifest is served on its own too, the same document */
    char mname[96], mpath[4400];
    size_t len;
    snprintf(mname, sizeof(mname), "%.*s.xml", (int)(strlen(name) - 4),
             name);
    assert_int_equal(changedump_file(f->cd, mname, mpath, sizeof(mpath),
                                     &ctype), 0);
    assert_string_equal(ctype, "application/xml");
    char *xml = slurp(mpath, &len);
    struct rs_doc *doc;
    assert_int_equal(rs_doc_parse(xml, len, NULL, &doc, NULL), 0);
    assert_int_equal(doc->head.md.capability, RS_CAP_CHANGEDUMP_MANIFEST);
    assert_int_equal(doc->nentries, n);
    rs_doc_free(doc);
    free(xml);
}

/* changedump/one_bitstream_per_change: a list of five changes (a file
 * created, one updated twice, one deleted) gives one package whose
 * manifest lists the five in order, with two bitstreams for the file
 * updated twice, each the content of its change; the open list has no
 * package; changedump.xml lists the package with its manifest. */
static void
test_one_bitstream_per_change(void **state)
{
    struct fx *f = *state;
    fx_write(f, "a.txt", "a0");
    fx_write(f, "b.txt", "b0");
    fx_cd(f, 0, 0);
    assert_int_equal(catalog_scan(f->cat, "", false, f->now), 0);
    assert_int_equal(changedump_stats(f->cd)->captured, 0);

    fx_change(f, "c.txt", "c one");
    fx_change(f, "a.txt", "a one!");
    fx_change(f, "a.txt", "a two, longer");
    fx_change(f, "b.txt", NULL);
    fx_change(f, "d e.txt", "dee");           /* closes list 1 */
    fx_change(f, "c.txt", "c two in list 2");
    assert_int_equal(changelog_current(f->cl), 2);
    assert_int_equal(changedump_stats(f->cd)->captured, 5);
    assert_null(fx_doc(f));

    assert_int_equal(changedump_build_all(f->cd), 0);
    assert_int_equal(changedump_stats(f->cd)->lists_built, 1);
    assert_int_equal(changedump_packages(f->cd), 1);
    const struct want w[] = {
        { "c.txt", RS_CHANGE_CREATED, "c one" },
        { "a.txt", RS_CHANGE_UPDATED, "a one!" },
        { "a.txt", RS_CHANGE_UPDATED, "a two, longer" },
        { "b.txt", RS_CHANGE_DELETED, NULL },
        { "d%20e.txt", RS_CHANGE_CREATED, "dee" },
    };
    check_pkg(f, "changedump-1-1.zip", 1, w, 5);
    assert_false(served(f, "changedump-2-1.zip"));
    assert_false(served(f, "spool-2.bin"));
    assert_false(served(f, "changedump-1-1.zip.tmp"));

    struct rs_doc *doc = fx_doc(f);
    assert_non_null(doc);
    assert_int_equal(doc->nentries, 1);
    struct state_clist cl;
    assert_int_equal(state_clist_get(f->st, 1, &cl), 0);
    assert_int_equal(doc->head.md.from, cl.from);
    assert_int_equal(doc->head.md.until, cl.until);
    const struct rs_entry *e = &doc->entries[0];
    assert_string_equal(e->loc, "http://example.org/data/resourcesync/"
                                "changedump-1-1.zip");
    assert_string_equal(e->md.type, "application/zip");
    assert_true(e->md.length > 0);
    assert_int_equal(e->md.from, cl.from);
    assert_int_equal(e->md.until, cl.until);
    const struct rs_link *ln = rs_links_find(e->links, e->nlinks,
                                             "contents");
    assert_non_null(ln);
    assert_string_equal(ln->href, "http://example.org/data/resourcesync/"
                                  "changedump-1-1.xml");
    rs_doc_free(doc);

    /* list 1's spool is freed; list 2's (open) stays */
    char p[4400];
    struct stat sb;
    snprintf(p, sizeof(p), "%s/spool-1.bin", f->ddir);
    assert_int_not_equal(stat(p, &sb), 0);
    snprintf(p, sizeof(p), "%s/spool-2.bin", f->ddir);
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(changedump_stats(f->cd)->spool_bytes,
                     strlen("c two in list 2"));
}

/* changedump/split: two entries a package at most: five changes give
 * packages of 2, 2 and 1 (a deletion counts as an entry), listed in
 * order. */
static void
test_split(void **state)
{
    struct fx *f = *state;
    fx_cd(f, 0, 2);
    fx_change(f, "a", "1");
    fx_change(f, "b", "22");
    fx_change(f, "a", NULL);
    fx_change(f, "c", "333");
    fx_change(f, "b", "4444");
    assert_int_equal(changedump_build_all(f->cd), 0);
    assert_int_equal(changedump_packages(f->cd), 3);
    const struct want w1[] = { { "a", RS_CHANGE_CREATED, "1" },
                               { "b", RS_CHANGE_CREATED, "22" } };
    const struct want w2[] = { { "a", RS_CHANGE_DELETED, NULL },
                               { "c", RS_CHANGE_CREATED, "333" } };
    const struct want w3[] = { { "b", RS_CHANGE_UPDATED, "4444" } };
    check_pkg(f, "changedump-1-1.zip", 1, w1, 2);
    check_pkg(f, "changedump-1-2.zip", 1, w2, 2);
    check_pkg(f, "changedump-1-3.zip", 1, w3, 1);
    struct rs_doc *doc = fx_doc(f);
    assert_int_equal(doc->nentries, 3);
    for (size_t k = 0; k < 3; k++) {
        char want[128];
        snprintf(want, sizeof(want), "http://example.org/data/resourcesync/"
                 "changedump-1-%zu.zip", k + 1);
        assert_string_equal(doc->entries[k].loc, want);
    }
    rs_doc_free(doc);
}

/* changedump/not_captured: a list holding a change recorded before
 * --dump (no capture) gets no Change Dump, and says why; the next list,
 * captured whole, gets one. */
static void
test_not_captured(void **state)
{
    struct fx *f = *state;
    struct catalog_opts co = { .tree = f->tree, .st = f->st,
                               .state_path = f->db, .cl = f->cl };
    f->cat = catalog_new(&co);            /* no --dump yet */
    fx_change(f, "early", "before --dump");
    fx_cd(f, 0, 0);
    for (int i = 0; i < 9; i++) {
        char rel[16];
        snprintf(rel, sizeof(rel), "f%d", i);
        fx_change(f, rel, rel);
    }
    assert_int_equal(changelog_current(f->cl), 3);
    assert_int_equal(changedump_build_all(f->cd), 0);
    assert_int_equal(changedump_stats(f->cd)->lists_skipped, 1);
    assert_int_equal(changedump_stats(f->cd)->lists_built, 1);
    assert_non_null(strstr(changedump_errstr(f->cd), "not captured"));
    assert_false(served(f, "changedump-1-1.zip"));
    const struct want w[] = {
        { "f4", RS_CHANGE_CREATED, "f4" }, { "f5", RS_CHANGE_CREATED, "f5" },
        { "f6", RS_CHANGE_CREATED, "f6" }, { "f7", RS_CHANGE_CREATED, "f7" },
        { "f8", RS_CHANGE_CREATED, "f8" },
    };
    check_pkg(f, "changedump-2-1.zip", 2, w, 5);
    struct rs_doc *doc = fx_doc(f);
    assert_int_equal(doc->nentries, 1);
    rs_doc_free(doc);
}

/* changedump/spool_mismatch: a spool whose bytes are not what was hashed
 * (a crash lost its tail, a disk lied) never reaches a package: the list
 * gets none. */
static void
test_spool_mismatch(void **state)
{
    struct fx *f = *state;
    fx_cd(f, 0, 0);
    for (int i = 0; i < 5; i++) {
        char rel[16];
        snprintf(rel, sizeof(rel), "g%d", i);
        fx_change(f, rel, "0123456789");
    }
    char p[4400];
    snprintf(p, sizeof(p), "%s/spool-1.bin", f->ddir);
    int fd = open(p, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "X", 1, 23), 1);
    close(fd);
    assert_int_equal(changedump_build_all(f->cd), 0);
    assert_int_equal(changedump_stats(f->cd)->lists_skipped, 1);
    if (strstr(changedump_errstr(f->cd), "do not match") == NULL)
        fail_msg("errstr: %s", changedump_errstr(f->cd));
    assert_false(served(f, "changedump-1-1.zip"));
    assert_false(served(f, "changedump-1-1.xml"));
    assert_null(fx_doc(f));
    assert_int_not_equal(access(p, F_OK), 0);   /* its spool freed */
}

/* changedump/over_cap: a file that would pass --changedump-max-bytes
 * stops the capture of its list (reported once, its spool freed: the
 * list gets no Change Dump); the next list is captured again. */
static void
test_over_cap(void **state)
{
    struct fx *f = *state;
    char big[6000];
    memset(big, 'B', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    fx_cd(f, 4096, 0);
    fx_change(f, "s1", "small");
    fx_change(f, "huge", big);
    assert_int_equal(f->skips, 1);
    assert_int_equal(f->skipped_list, 1);
    assert_int_equal(changedump_stats(f->cd)->spool_bytes, 0);
    fx_change(f, "s2", "small too");
    fx_change(f, "s3", "x");
    fx_change(f, "s4", "y");                 /* closes list 1 */
    assert_int_equal(f->skips, 1);
    fx_change(f, "s5", "list two");
    for (int i = 0; i < 4; i++) {
        char rel[16];
        snprintf(rel, sizeof(rel), "t%d", i);
        fx_change(f, rel, rel);
    }
    assert_int_equal(changelog_current(f->cl), 3);
    assert_int_equal(changedump_build_all(f->cd), 0);
    assert_int_equal(changedump_stats(f->cd)->lists_skipped, 1);
    assert_int_equal(changedump_stats(f->cd)->lists_built, 1);
    assert_false(served(f, "changedump-1-1.zip"));
    assert_true(served(f, "changedump-2-1.zip"));
    assert_int_equal(changedump_stats(f->cd)->spool_bytes, 0);
}

/* changedump/restart: a list closed before a restart is built after it;
 * the open list's spool survives the restart and its captures go on at
 * its end, so a list captured across a restart is whole. */
static void
test_restart(void **state)
{
    struct fx *f = *state;
    fx_cd(f, 0, 0);
    for (int i = 0; i < 7; i++) {
        char rel[16], c[32];
        snprintf(rel, sizeof(rel), "r%d", i);
        snprintf(c, sizeof(c), "before %d", i);
        fx_change(f, rel, c);
    }
    uint64_t spooled = changedump_stats(f->cd)->spool_bytes;
    fx_cd(f, 0, 0);                          /* a restart */
    assert_int_equal(changedump_stats(f->cd)->spool_bytes, spooled);
    fx_change(f, "r0", "after 0");
    fx_change(f, "r7", "after 7");
    fx_change(f, "r1", "after 1");           /* closes list 2 */
    assert_int_equal(changedump_build_all(f->cd), 0);
    assert_int_equal(changedump_stats(f->cd)->lists_built, 2);
    const struct want w2[] = {
        { "r5", RS_CHANGE_CREATED, "before 5" },
        { "r6", RS_CHANGE_CREATED, "before 6" },
        { "r0", RS_CHANGE_UPDATED, "after 0" },
        { "r7", RS_CHANGE_CREATED, "after 7" },
        { "r1", RS_CHANGE_UPDATED, "after 1" },
    };
    check_pkg(f, "changedump-2-1.zip", 2, w2, 5);
    assert_true(served(f, "changedump-1-1.zip"));
    /* a build cut short leaves files the next start removes; so are a
     * part no row names and the package of a list marked as having no
     * Change Dump (a crash between marking it so and removing its files) */
    char p[4400], q[4400], r[4400];
    snprintf(p, sizeof(p), "%s/changedump-9-1.zip", f->ddir);
    snprintf(q, sizeof(q), "%s/changedump-2-7.zip", f->ddir);
    snprintf(r, sizeof(r), "%s/changedump-5-1.zip", f->ddir);
    const char *stale[] = { p, q, r };
    for (int i = 0; i < 3; i++) {
        FILE *fp = fopen(stale[i], "w");
        assert_non_null(fp);
        fputs("partial", fp);
        fclose(fp);
    }
    assert_int_equal(state_cdump_add(f->st, 5, 0, -1), 0);
    fx_cd(f, 0, 0);
    for (int i = 0; i < 3; i++)
        assert_int_not_equal(access(stale[i], F_OK), 0);
    assert_true(served(f, "changedump-2-1.zip"));
    assert_int_equal(changedump_packages(f->cd), 2);
}

/* The framework events about changedump.xml, in order: 'c' created, 'u'
 * updated, into buf. */
static void
fw_events(struct fx *f, char *buf, size_t len)
{
    struct state_iter *it;
    struct state_fw fw;
    size_t n = 0;
    assert_int_equal(state_fw_iter(f->st, 0, 0, &it), 0);
    while (state_fw_next(it, &fw) == 1 && n + 1 < len)
        if (strcmp(fw.name, CHANGEDUMP_DOC) == 0) {
            assert_int_equal(fw.cap, RS_CAP_CHANGEDUMP);
            buf[n++] = fw.change == RS_CHANGE_CREATED ? 'c' : 'u';
        }
    buf[n] = '\0';
    state_iter_free(it);
}

/* changedump/retain: packages of a list the retention dropped are removed
 * and leave the document; the document goes when none is left. Each
 * list's packages were announced as a framework event (created, then
 * updated). */
static void
test_retain(void **state)
{
    struct fx *f = *state;
    fx_cd(f, 0, 0);
    for (int i = 0; i < 10; i++) {
        char rel[16];
        snprintf(rel, sizeof(rel), "p%d", i);
        fx_change(f, rel, rel);
    }
    char ev[8];
    fw_events(f, ev, sizeof(ev));
    assert_string_equal(ev, "");
    assert_int_equal(changedump_build_all(f->cd), 0);
    assert_int_equal(changedump_packages(f->cd), 2);
    fw_events(f, ev, sizeof(ev));
    assert_string_equal(ev, "cu");
    assert_int_equal(state_begin(f->st), 0);
    assert_int_equal(state_clist_drop(f->st, 1), 0);
    assert_int_equal(state_commit(f->st), 0);
    assert_int_equal(changedump_tick(f->cd), 0);
    assert_int_equal(changedump_packages(f->cd), 1);
    assert_false(served(f, "changedump-1-1.zip"));
    assert_true(served(f, "changedump-2-1.zip"));
    struct rs_doc *doc = fx_doc(f);
    assert_int_equal(doc->nentries, 1);
    rs_doc_free(doc);
    assert_int_equal(state_begin(f->st), 0);
    assert_int_equal(state_clist_drop(f->st, 2), 0);
    assert_int_equal(state_commit(f->st), 0);
    assert_int_equal(changedump_tick(f->cd), 0);
    assert_int_equal(changedump_packages(f->cd), 0);
    assert_null(fx_doc(f));
}

/* changedump/capture_api: a read that was not whole captures nothing and
 * its space is reused; a capture is counted only once committed. */
static void
test_capture_api(void **state)
{
    struct fx *f = *state;
    int64_t list, off, len;
    fx_cd(f, 0, 0);
    assert_true(changedump_capture_begin(f->cd, 1, 5));
    changedump_capture_write(f->cd, "abcde", 5);
    assert_false(changedump_capture_end(f->cd, false, &list, &off, &len));
    changedump_capture_commit(f->cd);
    assert_int_equal(changedump_stats(f->cd)->captured, 0);
    assert_true(changedump_capture_begin(f->cd, 1, 3));
    changedump_capture_write(f->cd, "xyz", 3);
    assert_true(changedump_capture_end(f->cd, true, &list, &off, &len));
    assert_int_equal(list, 1);
    assert_int_equal(off, 0);
    assert_int_equal(len, 3);
    changedump_capture_commit(f->cd);
    assert_int_equal(changedump_stats(f->cd)->captured, 1);
    assert_int_equal(changedump_stats(f->cd)->spool_bytes, 3);
    changedump_free(NULL);
}

/* changedump/background: the build runs on its own thread; a tick
 * publishes it. */
static void
test_background(void **state)
{
    struct fx *f = *state;
    fx_cd(f, 0, 0);
    for (int i = 0; i < 5; i++) {
        char rel[16];
        snprintf(rel, sizeof(rel), "q%d", i);
        fx_change(f, rel, rel);
    }
    assert_int_equal(changedump_tick(f->cd), 0);
    assert_true(changedump_building(f->cd));
    int rc = 0;
    for (int i = 0; i < 500 && rc == 0; i++) {
        usleep(10000);
        rc = changedump_tick(f->cd);
    }
    assert_int_equal(rc, CHANGEDUMP_PUBLISHED);
    assert_false(changedump_building(f->cd));
    assert_true(served(f, "changedump-1-1.zip"));
}

/* One failed build of the Change Dump: the wait before the next, in
 * whole seconds. */
static int64_t
fx_cd_fail_wait(struct fx *f)
{
    rs_time_t t0 = rs_time_now();
    assert_true(changedump_build_all(f->cd) < 0);
    rs_time_t t1 = rs_time_now(), at = changedump_retry_at(f->cd);
    assert_true(at != RS_TIME_NONE);
    assert_true(t1 - t0 < 500000);
    return (at - t1 + 500000) / 1000000;
}

/* changedump/retry_backoff: a build that fails otherwise than by a list
 * that can have no Change Dump (here its package cannot be written) is
 * tried again after 1 s, then 2, 4, ... up to a minute, not at the next
 * tick; one that succeeds ends the waits. */
static void
test_retry_backoff(void **state)
{
    struct fx *f = *state;
    char p[4400];
    static const int64_t waits[] = { 1, 2, 4, 8, 16, 32, 60, 60 };

    fx_cd(f, 0, 0);
    for (int i = 0; i < 5; i++) {
        char rel[16];
        snprintf(rel, sizeof(rel), "r%d", i);
        fx_change(f, rel, rel);
    }
    /* a directory where the package goes: it cannot be written */
    snprintf(p, sizeof(p), "%s/changedump-1-1.zip", f->ddir);
    assert_int_equal(mkdir(p, 0755), 0);
    assert_int_equal(changedump_retry_at(f->cd), RS_TIME_NONE);
    for (size_t i = 0; i < sizeof(waits) / sizeof(waits[0]); i++)
        assert_int_equal(fx_cd_fail_wait(f), waits[i]);
    /* the tick waits too */
    assert_int_equal(changedump_tick(f->cd), 0);
    assert_false(changedump_building(f->cd));
    assert_int_equal(rmdir(p), 0);
    assert_int_equal(changedump_build_all(f->cd), 0);
    assert_int_equal(changedump_retry_at(f->cd), RS_TIME_NONE);
    assert_true(served(f, "changedump-1-1.zip"));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_one_bitstream_per_change,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_split, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_not_captured, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_spool_mismatch, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_over_cap, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_restart, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_retain, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_capture_api, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_background, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_retry_backoff, fx_setup,
                                        fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
