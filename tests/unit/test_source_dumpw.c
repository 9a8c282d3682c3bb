/* test_source_dumpw.c - rssource's Resource Dump writer (source/dumpw.c):
 * packages split by member count and bytes, each read back through rssub's
 * verifying reader (subscriber/dumpzip.c) against the files and the
 * catalog's digests; the dump document; generations kept and pruned; a
 * file gone before the build; the names served; the background build;
 * the waits after a failed build. */
#include "testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "catalog.h"
#include "changelog.h"
#include "docs.h"
#include "dumpw.h"
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
    struct dumpw *w;
};

static void
fx_write(struct fx *f, const char *rel, size_t len, char fill)
{
    char p[4200];
    snprintf(p, sizeof(p), "%s/%s", f->dir, rel);
    FILE *fp = fopen(p, "w");
    assert_non_null(fp);
    for (size_t i = 0; i < len; i++)
        fputc(i % 61 == 60 ? '\n' : fill, fp);
    fclose(fp);
}

static void
fx_scan(struct fx *f, bool record)
{
    assert_int_equal(catalog_scan(f->cat, "", record, rs_time_now()), 0);
}

static void
fx_dumpw_every(struct fx *f, size_t max_files, uint64_t max_bytes,
               int64_t interval_ms)
{
    const char *e = NULL;
    struct dumpw_opts o = { .docs = f->docs, .tree = f->tree, .st = f->st,
                            .state_path = f->db, .dir = f->ddir,
                            .max_files = max_files, .max_bytes = max_bytes,
                            .interval_ms = interval_ms };
    dumpw_free(f->w);
    f->w = dumpw_new(&o, &e);
    if (f->w == NULL)
        fail_msg("dumpw_new: %s", e);
}

static void
fx_dumpw(struct fx *f, size_t max_files, uint64_t max_bytes)
{
    fx_dumpw_every(f, max_files, max_bytes, 0);
}

static int
fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    char err[256];
    const char *e;
    f->dir = tu_mkdtemp();
    f->sdir = tu_mkdtemp();
    snprintf(f->db, sizeof(f->db), "%s/state.db", f->sdir);
    snprintf(f->ddir, sizeof(f->ddir), "%s/dumps", f->sdir);
    struct tree_opts to = { .dir = f->dir };
    assert_int_equal(tree_open(&to, &f->tree, err, sizeof(err)), 0);
    if (state_open(f->db, false, &f->st, err, sizeof(err)) != 0)
        fail_msg("state_open: %s", err);
    struct changelog_opts co = { .max_entries = 1000 };
    f->cl = changelog_new(f->st, &co, rs_time_now(), &e);
    assert_non_null(f->cl);
    struct catalog_opts o = { .tree = f->tree, .st = f->st,
                              .state_path = f->db, .cl = f->cl };
    f->cat = catalog_new(&o);
    assert_non_null(f->cat);
    f->docs = docs_new("http://example.org/data/", &e);
    assert_non_null(f->docs);
    *state = f;
    return 0;
}

static int
fx_teardown(void **state)
{
    struct fx *f = *state;
    dumpw_free(f->w);
    docs_free(f->docs);
    catalog_free(f->cat);
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

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
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

/* Read the current dump's document, then each package through dumpzip:
 * every member verified (length, md5, sha-256, CRC) and equal to the file
 * on disk, its catalogued digests equal to the manifest's. Returns the
 * members seen; members per package into per[] (up to 16). */
static size_t
check_dump(struct fx *f, size_t per[16], size_t *npkg)
{
    char path[4400];
    const char *ctype;
    size_t len, total = 0;
    struct rs_doc *doc;

    assert_int_equal(dumpw_file(f->w, DUMPW_DOC, path, sizeof(path), &ctype),
                     0);
    assert_string_equal(ctype, "application/xml");
    char *xml = slurp(path, &len);
    assert_int_equal(rs_doc_parse(xml, len, NULL, &doc, NULL), 0);
    assert_int_equal(doc->head.md.capability, RS_CAP_RESOURCEDUMP);
    assert_int_equal(doc->head.md.at, dumpw_current(f->w)->at);
    assert_true(doc->head.md.completed >= doc->head.md.at);
    assert_int_equal((int64_t)doc->nentries, dumpw_current(f->w)->packages);
    *npkg = doc->nentries;
    for (size_t k = 0; k < doc->nentries; k++) {
        const struct rs_entry *pe = &doc->entries[k];
        const char *name = strrchr(pe->loc, '/') + 1;
        char want[64];
        snprintf(want, sizeof(want), "resourcedump-%lld-%zu.zip",
                 (long long)dumpw_current(f->w)->gen, k + 1);
        assert_string_equal(name, want);
        assert_true(strncmp(pe->loc, "http://example.org/data/resourcesync/",
                            37) == 0);
        assert_string_equal(pe->md.type, "application/zip");
        assert_int_equal(dumpw_file(f->w, name, path, sizeof(path), &ctype),
                         0);
        assert_string_equal(ctype, "application/zip");
        struct stat sb;
        assert_int_equal(stat(path, &sb), 0);
        assert_int_equal(pe->md.length, sb.st_size);

        /* its manifest, served on its own (rel="contents"), is the very
         * bytes of the package's manifest.xml */
        assert_int_equal(pe->nlinks, 1);
        assert_string_equal(pe->links[0].rel, "contents");
        assert_string_equal(pe->links[0].type, "application/xml");
        snprintf(want, sizeof(want), "resourcedump-%lld-%zu.xml",
                 (long long)dumpw_current(f->w)->gen, k + 1);
        assert_string_equal(strrchr(pe->links[0].href, '/') + 1, want);
        assert_true(strncmp(pe->links[0].href, pe->loc,
                            strrchr(pe->loc, '/') - pe->loc + 1) == 0);
        char mpath[4400];
        assert_int_equal(dumpw_file(f->w, want, mpath, sizeof(mpath),
                                    &ctype), 0);
        assert_string_equal(ctype, "application/xml");
        size_t mlen;
        char *mbytes = slurp(mpath, &mlen);
        int zerr = 0;
        zip_t *za = zip_open(path, ZIP_RDONLY, &zerr);
        assert_non_null(za);
        zip_int64_t mi = zip_name_locate(za, "manifest.xml", 0);
        assert_true(mi >= 0);
        /* the manifest deflated, the members stored (zippkg.c says why) */
        zip_stat_t zs;
        for (zip_uint64_t zi = 0; zi < (zip_uint64_t)zip_get_num_entries(za, 0);
             zi++) {
            assert_int_equal(zip_stat_index(za, zi, 0, &zs), 0);
            assert_int_equal(zs.comp_method, zi == (zip_uint64_t)mi
                                                 ? ZIP_CM_DEFLATE
                                                 : ZIP_CM_STORE);
        }
        zip_file_t *mf = zip_fopen_index(za, (zip_uint64_t)mi, 0);
        assert_non_null(mf);
        char *inzip = malloc(mlen + 1);
        assert_non_null(inzip);
        assert_int_equal(zip_fread(mf, inzip, mlen + 1), (zip_int64_t)mlen);
        assert_memory_equal(inzip, mbytes, mlen);
        zip_fclose(mf);
        zip_discard(za);
        free(inzip);
        free(mbytes);

        struct dumpzip *z;
        char err[300];
        if (dumpzip_open(path, NULL, &z, err, sizeof(err)) != 0)
            fail_msg("dumpzip_open: %s", err);
        assert_int_equal(dumpzip_head(z)->md.capability,
                         RS_CAP_RESOURCEDUMP_MANIFEST);
        assert_int_equal(dumpzip_head(z)->md.at, dumpw_current(f->w)->at);
        if (k < 16)
            per[k] = dumpzip_count(z);
        for (size_t i = 0; i < dumpzip_count(z); i++) {
            const struct rs_entry *e = dumpzip_entry(z, i);
            const char *rel = e->loc + strlen("http://example.org/data/");
            char decoded[4096], fpath[4200], buf[8192];
            assert_true(tree_url_decode(rel, decoded, sizeof(decoded)) >= 0);
            assert_non_null(e->md.path);
            assert_int_equal(e->md.path[0], '/');
            assert_string_equal(e->md.path + 1, rel);
            assert_non_null(e->md.type);
            assert_true(e->lastmod != RS_TIME_NONE);

            /* the catalog's digests are the manifest's */
            struct state_res r;
            struct rs_hashes h;
            assert_int_equal(state_res_get(f->st, decoded, &r), 0);
            docs_hashes(r.md5, r.sha256, &h);
            assert_int_equal(rs_hashes_match(&h, &e->md.hash), 1);
            assert_int_equal(e->md.hash.n, 2);
            assert_int_equal(e->md.length, r.size);

            /* the content, verified by dumpzip, equals the file */
            snprintf(fpath, sizeof(fpath), "%s/%s", f->dir, decoded);
            size_t flen;
            char *content = slurp(fpath, &flen);
            struct dumpzip_file *zf;
            if (dumpzip_file_open(z, i, &zf, err, sizeof(err)) != 0)
                fail_msg("dumpzip_file_open: %s", err);
            size_t got = 0;
            ssize_t n;
            while ((n = dumpzip_file_read(zf, buf, sizeof(buf))) > 0) {
                assert_true(got + (size_t)n <= flen);
                assert_memory_equal(buf, content + got, (size_t)n);
                got += (size_t)n;
            }
            if (n != 0)
                fail_msg("%s: %s", decoded, dumpzip_file_error(zf));
            assert_int_equal(got, flen);
            dumpzip_file_close(zf);
            free(content);
            total++;
        }
        dumpzip_close(z);
    }
    rs_doc_free(doc);
    free(xml);
    return total;
}

/* dumpw/split_count: 25 files, 10 members a package -> 10, 10, 5, every
 * member verified against its file and the catalog. */
static void
test_split_count(void **state)
{
    struct fx *f = *state;
    char rel[64], sub[4200];
    size_t per[16], npkg;

    snprintf(sub, sizeof(sub), "%s/sub dir", f->dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    for (int i = 0; i < 24; i++) {
        snprintf(rel, sizeof(rel), "f%02d.txt", i);
        fx_write(f, rel, 100 + (size_t)i * 37, (char)('a' + i));
    }
    fx_write(f, "sub dir/ü é.bin", 5000, 'z');
    fx_scan(f, false);
    fx_dumpw(f, 10, 0);
    assert_int_equal(dumpw_current(f->w)->gen, 0);
    assert_true(dumpw_stale(f->w));
    assert_int_equal(dumpw_build(f->w), 0);
    assert_false(dumpw_stale(f->w));
    assert_int_equal(dumpw_current(f->w)->gen, 1);
    assert_int_equal(dumpw_current(f->w)->files, 25);
    assert_int_equal(check_dump(f, per, &npkg), 25);
    assert_int_equal(npkg, 3);
    assert_int_equal(per[0], 10);
    assert_int_equal(per[1], 10);
    assert_int_equal(per[2], 5);
}

/* dumpw/split_ramp: the first packages are smaller (1/8, 1/4, 1/2 of
 * the member limit, not below 1,000 members): 5,000 files, 4,000 a
 * package -> 1,000, 1,000, 2,000, then the rest; a limit of 1,000 or less
 * is not ramped (split_count). */
static void
test_split_ramp(void **state)
{
    struct fx *f = *state;
    char rel[64], sub[4200];
    size_t per[16], npkg;

    for (int d = 0; d < 50; d++) {
        snprintf(sub, sizeof(sub), "%s/d%02d", f->dir, d);
        assert_int_equal(mkdir(sub, 0755), 0);
    }
    for (int i = 0; i < 5000; i++) {
        snprintf(rel, sizeof(rel), "d%02d/f%04d", i / 100, i);
        fx_write(f, rel, 10 + (size_t)(i % 7), (char)('a' + i % 26));
    }
    fx_scan(f, false);
    fx_dumpw(f, 4000, 0);
    assert_int_equal(dumpw_build(f->w), 0);
    assert_int_equal(check_dump(f, per, &npkg), 5000);
    assert_int_equal(npkg, 4);
    assert_int_equal(per[0], 1000);
    assert_int_equal(per[1], 1000);
    assert_int_equal(per[2], 2000);
    assert_int_equal(per[3], 1000);
}

/* dumpw/split_bytes: 1000-byte files, 2500 bytes a package -> 2 each; a
 * file larger than the bound goes alone. */
static void
test_split_bytes(void **state)
{
    struct fx *f = *state;
    size_t per[16], npkg;

    fx_write(f, "a", 1000, 'a');
    fx_write(f, "b", 1000, 'b');
    fx_write(f, "c", 9000, 'c');
    fx_write(f, "d", 1000, 'd');
    fx_write(f, "e", 1000, 'e');
    fx_scan(f, false);
    fx_dumpw(f, 0, 2500);
    assert_int_equal(dumpw_build(f->w), 0);
    assert_int_equal(check_dump(f, per, &npkg), 5);
    assert_int_equal(npkg, 3);
    assert_int_equal(per[0], 2);    /* a b */
    assert_int_equal(per[1], 1);    /* c */
    assert_int_equal(per[2], 2);    /* d e */
}

/* dumpw/generations: a change makes the dump stale; each build is a new
 * generation, the previous stays servable, the one before is removed
 * (its packages and their manifests); a restart finds the current one in
 * the state. */
static void
test_generations(void **state)
{
    struct fx *f = *state;
    char path[4400];
    const char *ct;
    size_t per[16], npkg;

    fx_write(f, "a", 10, 'a');
    fx_scan(f, false);
    fx_dumpw(f, 0, 0);
    assert_int_equal(dumpw_build(f->w), 0);
    fx_write(f, "b", 20, 'b');
    fx_scan(f, true);
    assert_true(dumpw_stale(f->w));
    assert_int_equal(dumpw_build(f->w), 0);
    assert_false(dumpw_stale(f->w));
    assert_int_equal(dumpw_current(f->w)->gen, 2);
    assert_int_equal(check_dump(f, per, &npkg), 2);
    assert_int_equal(dumpw_file(f->w, "resourcedump-1-1.zip", path,
                                sizeof(path), &ct), 0);
    assert_int_equal(dumpw_build(f->w), 0);
    assert_int_equal(dumpw_file(f->w, "resourcedump-1-1.zip", path,
                                sizeof(path), &ct), RS_ENOTFOUND);
    snprintf(path, sizeof(path), "%s/resourcedump-1-1.zip", f->ddir);
    assert_int_equal(access(path, F_OK), -1);
    /* the manifest served on its own goes with its package */
    assert_int_equal(dumpw_file(f->w, "resourcedump-1-1.xml", path,
                                sizeof(path), &ct), RS_ENOTFOUND);
    snprintf(path, sizeof(path), "%s/resourcedump-1-1.xml", f->ddir);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(dumpw_file(f->w, "resourcedump-2-1.xml", path,
                                sizeof(path), &ct), 0);
    assert_int_equal(dumpw_file(f->w, "resourcedump-2-1.zip", path,
                                sizeof(path), &ct), 0);
    assert_int_equal(dumpw_file(f->w, "resourcedump-3.xml", path,
                                sizeof(path), &ct), 0);

    fx_dumpw(f, 0, 0);                  /* a restart */
    assert_int_equal(dumpw_current(f->w)->gen, 3);
    assert_false(dumpw_stale(f->w));
    assert_int_equal(check_dump(f, per, &npkg), 2);
}

/* dumpw/gone: a file deleted after the catalog was read is left out of
 * the manifest and out of the package, which holds exactly the members
 * its manifest lists (the Change Lists report its deletion). */
static void
test_gone(void **state)
{
    struct fx *f = *state;
    char p[4200];
    size_t per[16], npkg;

    fx_write(f, "a", 10, 'a');
    fx_write(f, "b", 10, 'b');
    fx_write(f, "c", 10, 'c');
    fx_scan(f, false);
    snprintf(p, sizeof(p), "%s/b", f->dir);
    assert_int_equal(unlink(p), 0);
    fx_dumpw(f, 0, 0);
    assert_int_equal(dumpw_build(f->w), 0);
    assert_int_equal(dumpw_current(f->w)->files, 2);
    /* check_dump looks each member up in the catalog, where b still is */
    assert_int_equal(check_dump(f, per, &npkg), 2);
    char zp[4400];
    snprintf(zp, sizeof(zp), "%s/resourcedump-1-1.zip", f->ddir);
    int zrc;
    zip_t *za = zip_open(zp, ZIP_RDONLY, &zrc);
    assert_non_null(za);
    assert_int_equal(zip_get_num_entries(za, 0), 3);
    assert_string_equal(zip_get_name(za, 0, 0), "a");
    assert_string_equal(zip_get_name(za, 1, 0), "c");
    assert_string_equal(zip_get_name(za, 2, 0), "manifest.xml");
    zip_discard(za);
    struct stat st;
    assert_int_equal(stat(zp, &st), 0);
    assert_int_equal((uint64_t)st.st_size, dumpw_current(f->w)->bytes);
}

/* dumpw/names: only names the writer makes are served. */
static void
test_names(void **state)
{
    struct fx *f = *state;
    char path[4400];
    const char *ct;
    static const char *bad[] = {
        "resourcedump-1-1.zip/", "resourcedump-01-1.zip", "resourcedump-1-1",
        "resourcedump-1-1.zip.tmp", "resourcedump-../1-1.zip",
        "resourcedump--1-1.zip", "resourcedump-1-0.zip", "resourcedump-0.xml",
        "resourcedump-1.xml ", "../state.db", "resourcedump-2-1.zip",
        "resourcedump-1-1.xmlx", "resourcedump-1-1.zi", "resourcedump-1-1.XML",
        "resourcedump-2-1.xml", "resourcedump-1-0.xml",
    };

    fx_write(f, "a", 10, 'a');
    fx_scan(f, false);
    fx_dumpw(f, 0, 0);
    assert_int_equal(dumpw_file(f->w, DUMPW_DOC, path, sizeof(path), &ct),
                     RS_ENOTFOUND);     /* none yet */
    assert_int_equal(dumpw_build(f->w), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(dumpw_file(f->w, bad[i], path, sizeof(path), &ct),
                         RS_ENOTFOUND);
    assert_int_equal(dumpw_file(f->w, "resourcedump-1-1.zip", path,
                                sizeof(path), &ct), 0);
    assert_int_equal(dumpw_file(f->w, "resourcedump-1.xml", path,
                                sizeof(path), &ct), 0);
    assert_int_equal(dumpw_file(f->w, "resourcedump-1-1.xml", path,
                                sizeof(path), &ct), 0);
    assert_string_equal(ct, "application/xml");
    dumpw_free(NULL);
}

/* dumpw/async: a build on its thread, published by the poll; a second
 * start while it runs is refused. */
static void
test_async(void **state)
{
    struct fx *f = *state;
    size_t per[16], npkg;
    char rel[32];
    int rc = 0;

    for (int i = 0; i < 300; i++) {
        snprintf(rel, sizeof(rel), "f%03d", i);
        fx_write(f, rel, 2000, (char)('a' + i % 26));
    }
    fx_scan(f, false);
    fx_dumpw(f, 100, 0);
    assert_int_equal(dumpw_start(f->w), 0);
    assert_true(dumpw_building(f->w));
    assert_int_equal(dumpw_start(f->w), RS_ESTATE);
    for (int i = 0; i < 3000 && rc == 0; i++) {
        rc = dumpw_poll(f->w);
        if (rc == 0)
            usleep(10000);
    }
    if (rc != 1)
        fail_msg("poll: %d %s", rc, dumpw_errstr(f->w));
    assert_false(dumpw_building(f->w));
    assert_int_equal(dumpw_poll(f->w), 0);
    assert_int_equal(check_dump(f, per, &npkg), 300);
    assert_int_equal(npkg, 3);
}

/* Names in the dump directory, but "." and "..", joined by ' '. */
static const char *
dir_names(struct fx *f)
{
    static char out[4096];
    char *names[64];
    size_t n = 0, len = 0;
    DIR *d = opendir(f->ddir);
    struct dirent *de;
    assert_non_null(d);
    while ((de = readdir(d)) != NULL && n < 64)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            names[n++] = strdup(de->d_name);
    closedir(d);
    qsort(names, n, sizeof(names[0]), cmp_str);
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        len += (size_t)snprintf(out + len, sizeof(out) - len, "%s%s",
                                i ? " " : "", names[i]);
        free(names[i]);
    }
    return out;
}

/* dumpw/failure: a build that cannot write fails with a message, the
 * previous dump stays current and served, and what the failed build
 * left is removed; the next build succeeds. */
static void
test_failure(void **state)
{
    struct fx *f = *state;
    char path[4400];
    const char *ct;
    FILE *fp;

    fx_write(f, "a", 10, 'a');
    fx_scan(f, false);
    fx_dumpw(f, 0, 0);
    assert_int_equal(dumpw_build(f->w), 0);
    fx_write(f, "b", 10, 'b');
    fx_scan(f, true);
    /* a stray libzip temporary and a stray .tmp, as a crash leaves them */
    snprintf(path, sizeof(path), "%s/resourcedump-9-1.zip.Ab12Cd", f->ddir);
    fp = fopen(path, "w");
    assert_non_null(fp);
    fclose(fp);
    /* the dump directory replaced by a file: nothing can be created */
    tu_rmtree(f->ddir);
    fp = fopen(f->ddir, "w");
    assert_non_null(fp);
    fclose(fp);
    assert_true(dumpw_build(f->w) < 0);
    assert_true(strstr(dumpw_errstr(f->w), "resourcedump-2-1.zip") != NULL);
    assert_int_equal(dumpw_current(f->w)->gen, 1);
    assert_true(dumpw_stale(f->w));
    assert_int_equal(unlink(f->ddir), 0);
    assert_int_equal(mkdir(f->ddir, 0755), 0);
    fp = fopen(path, "w");
    assert_non_null(fp);
    fclose(fp);
    assert_int_equal(dumpw_build(f->w), 0);
    assert_int_equal(dumpw_current(f->w)->gen, 2);
    assert_string_equal(dir_names(f), "resourcedump-2-1.xml "
                        "resourcedump-2-1.zip resourcedump-2.xml");
    assert_int_equal(dumpw_file(f->w, DUMPW_DOC, path, sizeof(path), &ct),
                     0);
}

/* Replace the dump directory by a file (nothing can be created in it:
 * every build fails), or put it back. */
static void
fx_break_dir(struct fx *f, bool broken)
{
    if (broken) {
        tu_rmtree(f->ddir);
        FILE *fp = fopen(f->ddir, "w");
        assert_non_null(fp);
        fclose(fp);
    } else {
        assert_int_equal(unlink(f->ddir), 0);
        assert_int_equal(mkdir(f->ddir, 0755), 0);
    }
}

/* One failed build: the wait before the next, in whole seconds, checked
 * against dumpw_due just before and at the end of it. */
static int64_t
fx_fail_wait(struct fx *f)
{
    rs_time_t t0 = rs_time_now();
    assert_true(dumpw_build(f->w) < 0);
    rs_time_t t1 = rs_time_now(), at = dumpw_retry_at(f->w);
    assert_true(at != RS_TIME_NONE);
    assert_false(dumpw_due(f->w, t1));
    assert_false(dumpw_due(f->w, at - 1));
    assert_true(dumpw_due(f->w, at));
    /* at = the failure's time (in [t0, t1], well under 0.5 s apart) +
     * the wait */
    assert_true(t1 - t0 < 500000);
    return (at - t1 + 500000) / 1000000;
}

/* dumpw/retry_backoff: a build that fails (a full disk) is not tried
 * again at once: dumpw_due waits 1 s, then 2, 4, ... up to the dump
 * interval (60 s when it is 0); a build that succeeds ends the waits;
 * a dump that misses nothing, or is younger than the interval, is not
 * due. */
static void
test_retry_backoff(void **state)
{
    struct fx *f = *state;
    rs_time_t now;
    static const int64_t waits3[] = { 1, 2, 3, 3 };
    static const int64_t waits0[] = { 1, 2, 4, 8, 16, 32, 60, 60 };

    fx_write(f, "a", 10, 'a');
    fx_scan(f, false);
    fx_dumpw_every(f, 0, 0, 3000);
    assert_true(dumpw_due(f->w, rs_time_now()));      /* none yet */
    fx_break_dir(f, true);
    for (size_t i = 0; i < sizeof(waits3) / sizeof(waits3[0]); i++) {
        int64_t w = fx_fail_wait(f);
        assert_int_equal(w, waits3[i]);
    }
    fx_break_dir(f, false);
    assert_int_equal(dumpw_build(f->w), 0);
    assert_int_equal(dumpw_retry_at(f->w), RS_TIME_NONE);
    now = rs_time_now();
    assert_false(dumpw_due(f->w, now + 10000000));   /* misses nothing */
    fx_write(f, "b", 10, 'b');
    fx_scan(f, true);
    assert_false(dumpw_due(f->w, now));              /* younger than 3 s */
    assert_true(dumpw_due(f->w, now + 3000000));

    /* --dump-interval 0: at most a minute between the tries, and the
     * dump served (generation 1) stays */
    fx_dumpw_every(f, 0, 0, 0);
    assert_true(dumpw_due(f->w, rs_time_now()));
    fx_break_dir(f, true);
    for (size_t i = 0; i < sizeof(waits0) / sizeof(waits0[0]); i++) {
        int64_t w = fx_fail_wait(f);
        assert_int_equal(w, waits0[i]);
    }
    assert_int_equal(dumpw_current(f->w)->gen, 1);
    fx_break_dir(f, false);
}

/* dumpw/stop: freeing dumpw while its thread builds stops the build at
 * its next member and leaves no file of it behind. */
static void
test_stop(void **state)
{
    struct fx *f = *state;
    char rel[32];

    for (int i = 0; i < 2000; i++) {
        snprintf(rel, sizeof(rel), "f%04d", i);
        fx_write(f, rel, 3000, (char)('a' + i % 26));
    }
    fx_scan(f, false);
    fx_dumpw(f, 500, 0);
    assert_int_equal(dumpw_start(f->w), 0);
    usleep(20000);
    dumpw_free(f->w);
    f->w = NULL;
    assert_string_equal(dir_names(f), "");
    fx_dumpw(f, 500, 0);
    assert_int_equal(dumpw_current(f->w)->gen, 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_split_count, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_split_ramp, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_split_bytes, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_generations, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_gone, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_names, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_async, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_failure, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_retry_backoff, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_stop, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
