/* test_source_catalog.c - the catalog and its hash cache
 * (source/catalog.c over source/state.c): what counts as created, updated
 * or deleted, which files are read again, the merge scan that reports
 * changes made while rssource was down. */
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "catalog.h"
#include "changelog.h"
#include "state.h"
#include "tree.h"

struct fx {
    char *dir;           /* the served tree */
    char *sdir;          /* holds the state */
    char db[4200];
    struct tree *tree;
    struct state *st;
    struct changelog *cl;
    struct catalog *cat;
};

static void
fx_write(struct fx *f, const char *rel, const char *text)
{
    char p[4200];
    snprintf(p, sizeof(p), "%s/%s", f->dir, rel);
    FILE *fp = fopen(p, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void
fx_path(struct fx *f, const char *rel, char *buf)
{
    snprintf(buf, 4200, "%s/%s", f->dir, rel);
}

/* Set rel's mtime to a fixed second plus ns, so identities are exact. */
static void
fx_mtime(struct fx *f, const char *rel, long sec, long nsec)
{
    char p[4200];
    fx_path(f, rel, p);
    struct timespec ts[2] = { { sec, nsec }, { sec, nsec } };
    assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
}

static void
fx_open(struct fx *f)
{
    char err[256];
    struct tree_opts to = { .dir = f->dir };
    assert_int_equal(tree_open(&to, &f->tree, err, sizeof(err)), 0);
    if (state_open(f->db, false, &f->st, err, sizeof(err)) != 0)
        fail_msg("state_open: %s", err);
    struct changelog_opts co = { .max_entries = 1000 };
    const char *e;
    f->cl = changelog_new(f->st, &co, rs_time_now(), &e);
    assert_non_null(f->cl);
    struct catalog_opts o = { .tree = f->tree, .st = f->st,
                              .state_path = f->db, .cl = f->cl };
    f->cat = catalog_new(&o);
    assert_non_null(f->cat);
}

static void
fx_close(struct fx *f)
{
    catalog_free(f->cat);
    changelog_free(f->cl);
    state_free(f->st);
    tree_free(f->tree);
    f->cat = NULL;
    f->cl = NULL;
    f->st = NULL;
    f->tree = NULL;
}

static int
fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    f->dir = tu_mkdtemp();
    f->sdir = tu_mkdtemp();
    snprintf(f->db, sizeof(f->db), "%s/state.db", f->sdir);
    fx_open(f);
    *state = f;
    return 0;
}

static int
fx_teardown(void **state)
{
    struct fx *f = *state;
    fx_close(f);
    tu_rmtree(f->dir);
    tu_rmtree(f->sdir);
    free(f->dir);
    free(f->sdir);
    free(f);
    return 0;
}

/* The changes recorded so far, as "change path" lines joined by ';'. */
static const char *
fx_changes(struct fx *f)
{
    static char out[4096];
    out[0] = '\0';
    struct state_iter *it;
    assert_int_equal(state_change_iter(f->st, 0, 0, 0, &it), 0);
    struct state_change c;
    while (state_change_next(it, &c) == 1) {
        size_t n = strlen(out);
        snprintf(out + n, sizeof(out) - n, "%s%s %s", n ? ";" : "",
                 rs_change_name(c.change), c.path);
    }
    state_iter_free(it);
    return out;
}

static uint64_t
fx_hashed(struct fx *f)
{
    return catalog_stats(f->cat)->hashed;
}

/* catalog/baseline: a baseline scan catalogues every file with its
 * digests and records no change; a second scan reads nothing. */
static void
test_baseline(void **state)
{
    struct fx *f = *state;
    fx_write(f, "a.txt", "abc");
    fx_write(f, "b.txt", "");
    assert_int_equal(catalog_scan(f->cat, "", false, rs_time_now()), 0);
    assert_int_equal(fx_hashed(f), 2);
    assert_string_equal(fx_changes(f), "");
    struct state_res r;
    assert_int_equal(state_res_get(f->st, "a.txt", &r), 0);
    assert_true(r.hashed);
    assert_int_equal(r.size, 3);
    assert_string_equal(r.type, "text/plain");
    /* md5("abc") */
    assert_int_equal(r.md5[0], 0x90);
    assert_int_equal(r.md5[15], 0x72);
    assert_int_equal(catalog_scan(f->cat, "", true, rs_time_now()), 0);
    assert_int_equal(fx_hashed(f), 2);
    assert_string_equal(fx_changes(f), "");
}

/* catalog/observe_changes: created, updated (content), deleted, each once;
 * observing an unchanged file records nothing and reads nothing. */
static void
test_observe_changes(void **state)
{
    struct fx *f = *state;
    rs_time_t now = rs_time_now();
    fx_write(f, "x.txt", "one");
    assert_int_equal(catalog_observe(f->cat, "x.txt", true, now), 0);
    assert_int_equal(catalog_observe(f->cat, "x.txt", true, now), 0);
    assert_int_equal(fx_hashed(f), 1);
    fx_write(f, "x.txt", "two!");
    assert_int_equal(catalog_observe(f->cat, "x.txt", true, now), 0);
    char p[4200];
    fx_path(f, "x.txt", p);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(catalog_observe(f->cat, "x.txt", true, now), 0);
    assert_int_equal(catalog_observe(f->cat, "x.txt", true, now), 0);
    assert_string_equal(fx_changes(f),
                        "created x.txt;updated x.txt;deleted x.txt");
    assert_int_equal(catalog_changes(f->cat), 3);
}

/* catalog/touch: a new mtime with the same bytes is read again (the
 * identity changed) and is an update (lastmod changed); the same mtime
 * and bytes under a new inode (an identical copy renamed into place) is
 * no change at all. */
static void
test_touch_and_replace(void **state)
{
    struct fx *f = *state;
    rs_time_t now = rs_time_now();
    fx_write(f, "t.txt", "same");
    fx_mtime(f, "t.txt", 1700000000, 0);
    assert_int_equal(catalog_observe(f->cat, "t.txt", true, now), 0);
    fx_mtime(f, "t.txt", 1700000100, 0);
    assert_int_equal(catalog_observe(f->cat, "t.txt", true, now), 0);
    assert_int_equal(fx_hashed(f), 2);
    /* new inode, same bytes and mtime */
    fx_write(f, "t.tmp2", "same");
    fx_mtime(f, "t.tmp2", 1700000100, 0);
    char a[4200], b[4200];
    fx_path(f, "t.tmp2", a);
    fx_path(f, "t.txt", b);
    assert_int_equal(rename(a, b), 0);
    assert_int_equal(catalog_observe(f->cat, "t.txt", true, now), 0);
    assert_int_equal(fx_hashed(f), 3);
    assert_string_equal(fx_changes(f), "created t.txt;updated t.txt");
}

/* catalog/rename_reuses_digests: a renamed file (same identity) takes its
 * digests from the hash cache, in a batch or in a scan. */
static void
test_rename_cache(void **state)
{
    struct fx *f = *state;
    fx_write(f, "old.txt", "content of a file");
    assert_int_equal(catalog_scan(f->cat, "", false, rs_time_now()), 0);
    assert_int_equal(fx_hashed(f), 1);
    char a[4200], b[4200];
    fx_path(f, "old.txt", a);
    fx_path(f, "new.txt", b);
    assert_int_equal(rename(a, b), 0);
    const char *batch[] = { "old.txt", "new.txt" };
    assert_int_equal(catalog_observe_batch(f->cat, batch, 2, rs_time_now(),
                                           NULL, NULL), 0);
    assert_int_equal(fx_hashed(f), 1);
    assert_int_equal(catalog_stats(f->cat)->cache_hits, 1);
    /* the existing name first, so the old row still held the digests */
    assert_string_equal(fx_changes(f), "created new.txt;deleted old.txt");

    /* and in a scan, where the new name sorts before the old one */
    fx_path(f, "new.txt", a);
    fx_path(f, "a-new.txt", b);
    assert_int_equal(rename(a, b), 0);
    assert_int_equal(catalog_scan(f->cat, "", true, rs_time_now()), 0);
    assert_int_equal(fx_hashed(f), 1);
    assert_int_equal(catalog_stats(f->cat)->cache_hits, 2);
}

/* catalog/restart_warm: after a restart over an unchanged tree the scan
 * reads no file; changes made while "down" are all reported. */
static void
test_restart(void **state)
{
    struct fx *f = *state;
    char p[4200];
    for (int i = 0; i < 50; i++) {
        char rel[32];
        snprintf(rel, sizeof(rel), "f%02d.txt", i);
        fx_write(f, rel, rel);
    }
    fx_path(f, "d", p);
    assert_int_equal(mkdir(p, 0755), 0);
    fx_write(f, "d/in.txt", "in");
    assert_int_equal(catalog_scan(f->cat, "", false, rs_time_now()), 0);
    assert_int_equal(fx_hashed(f), 51);
    fx_close(f);

    fx_open(f);
    assert_int_equal(catalog_scan(f->cat, "", true, rs_time_now()), 0);
    assert_int_equal(fx_hashed(f), 0);
    assert_int_equal(catalog_stats(f->cat)->files, 51);
    assert_string_equal(fx_changes(f), "");
    fx_close(f);

    /* offline: one created, one modified, one deleted, a directory gone */
    fx_write(f, "new.txt", "new");
    fx_write(f, "f07.txt", "modified");
    fx_path(f, "f13.txt", p);
    assert_int_equal(unlink(p), 0);
    fx_path(f, "d/in.txt", p);
    assert_int_equal(unlink(p), 0);
    fx_path(f, "d", p);
    assert_int_equal(rmdir(p), 0);
    fx_open(f);
    assert_int_equal(catalog_scan(f->cat, "", true, rs_time_now()), 0);
    assert_int_equal(fx_hashed(f), 2);
    assert_string_equal(fx_changes(f), "deleted d/in.txt;updated f07.txt;"
                                       "deleted f13.txt;created new.txt");
}

/* The resources catalogued, as "path" lines joined by ';'. */
static const char *
fx_rows(struct fx *f)
{
    static char out[4096];
    out[0] = '\0';
    struct state_iter *it;
    assert_int_equal(state_res_iter(f->st, "", &it), 0);
    struct state_res r;
    while (state_res_next(it, &r) == 1) {
        size_t n = strlen(out);
        snprintf(out + n, sizeof(out) - n, "%s%s", n ? ";" : "", r.path);
    }
    state_iter_free(it);
    return out;
}

/* catalog/scan_steps: the whole-tree scan in steps of one file reports
 * what changed while nobody looked, as the scan in one go does, with
 * observations between its steps: files it found new are not taken for
 * gone at the next step (whose rows include them); a file created and
 * observed ahead of the walk, after its directory was listed, is not
 * taken for gone; one created behind it is the observation's; one deleted
 * and observed ahead is not deleted twice. */
static void
test_scan_steps(void **state)
{
    struct fx *f = *state;
    char p[4200];
    fx_path(f, "d", p);
    assert_int_equal(mkdir(p, 0755), 0);
    const char *const base[] = { "a1", "a2", "a3", "d/x", "d/y", "m", "z1", "z2" };
    for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++)
        fx_write(f, base[i], base[i]);
    assert_int_equal(catalog_scan(f->cat, "", false, rs_time_now()), 0);
    /* while nobody looked */
    fx_write(f, "a0", "new");
    fx_write(f, "a2", "changed");
    fx_path(f, "a3", p);
    assert_int_equal(unlink(p), 0);
    fx_write(f, "b", "new");
    fx_write(f, "c", "new");
    fx_write(f, "d/w", "new");
    fx_path(f, "d/y", p);
    assert_int_equal(unlink(p), 0);

    assert_int_equal(catalog_scan_start(f->cat, true), 0);
    assert_true(catalog_scanning(f->cat));
    assert_int_equal(catalog_scan_start(f->cat, true), RS_ESTATE);
    int steps = 0, r;
    while ((r = catalog_scan_step(f->cat, 1, rs_time_now())) == 0) {
        steps++;
        if (steps == 2) {
            /* the walk has met a0 and a1: one ahead, one behind it */
            fx_write(f, "n", "ahead");
            assert_int_equal(catalog_observe(f->cat, "n", true, rs_time_now()), 0);
            fx_write(f, "a00", "behind");
            assert_int_equal(catalog_observe(f->cat, "a00", true, rs_time_now()), 0);
            fx_path(f, "z2", p);
            assert_int_equal(unlink(p), 0);
            assert_int_equal(catalog_observe(f->cat, "z2", true, rs_time_now()), 0);
        }
        assert_true(steps < 50);
    }
    assert_int_equal(r, 1);
    assert_false(catalog_scanning(f->cat));
    assert_int_equal(catalog_scan_step(f->cat, 1, rs_time_now()), 1);   /* none going */
    assert_string_equal(fx_changes(f),
                        "created a0;"
                        "created n;created a00;deleted z2;"   /* observed */
                        "updated a2;deleted a3;created b;created c;created d/w;"
                        "deleted d/y");
    assert_string_equal(fx_rows(f), "a0;a00;a1;a2;b;c;d/w;d/x;m;n;z1");
    /* a scan in one go finds nothing more */
    assert_int_equal(catalog_scan(f->cat, "", true, rs_time_now()), 0);
    assert_string_equal(fx_rows(f), "a0;a00;a1;a2;b;c;d/w;d/x;m;n;z1");

    /* cancelled half way, and a new one from the start */
    assert_int_equal(catalog_scan_start(f->cat, true), 0);
    assert_int_equal(catalog_scan_step(f->cat, 2, rs_time_now()), 0);
    catalog_scan_cancel(f->cat);
    assert_false(catalog_scanning(f->cat));
    assert_int_equal(catalog_scan_start(f->cat, true), 0);
    while ((r = catalog_scan_step(f->cat, 3, rs_time_now())) == 0)
        ;
    assert_int_equal(r, 1);
    assert_string_equal(fx_rows(f), "a0;a00;a1;a2;b;c;d/w;d/x;m;n;z1");
    /* one left going when the catalog is freed (fx_close): ASan */
    assert_int_equal(catalog_scan_start(f->cat, true), 0);
    assert_int_equal(catalog_scan_step(f->cat, 1, rs_time_now()), 0);
}

/* catalog/directories: observing a new directory scans it; observing a
 * removed one deletes everything that was beneath it. */
static void
test_directories(void **state)
{
    struct fx *f = *state;
    char p[4200];
    fx_path(f, "dir", p);
    assert_int_equal(mkdir(p, 0755), 0);
    fx_path(f, "dir/sub", p);
    assert_int_equal(mkdir(p, 0755), 0);
    fx_write(f, "dir/a", "a");
    fx_write(f, "dir/sub/b", "b");
    assert_int_equal(catalog_observe(f->cat, "dir", true, rs_time_now()), 0);
    assert_string_equal(fx_changes(f), "created dir/a;created dir/sub/b");
    fx_path(f, "dir", p);
    tu_rmtree(p);
    assert_int_equal(catalog_observe(f->cat, "dir", true, rs_time_now()), 0);
    assert_string_equal(fx_changes(f), "created dir/a;created dir/sub/b;"
                                       "deleted dir/a;deleted dir/sub/b");
    assert_int_equal(state_res_count(f->st), 0);
}

/* catalog/dir_becomes_file: a directory replaced by a file of the same
 * name: the rows beneath it go (deleted), the file is created; a file
 * replaced by a directory: the file is deleted, the directory scanned. */
static void
test_dir_becomes_file(void **state)
{
    struct fx *f = *state;
    char p[4200];
    fx_path(f, "x", p);
    assert_int_equal(mkdir(p, 0755), 0);
    fx_write(f, "x/in", "in");
    assert_int_equal(catalog_observe(f->cat, "x", true, rs_time_now()), 0);
    fx_path(f, "x", p);
    tu_rmtree(p);
    fx_write(f, "x", "now a file");
    assert_int_equal(catalog_observe(f->cat, "x", true, rs_time_now()), 0);
    assert_string_equal(fx_changes(f), "created x/in;created x;deleted x/in");
    assert_int_equal(state_res_count(f->st), 1);
    fx_path(f, "x", p);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(mkdir(p, 0755), 0);
    fx_write(f, "x/again", "again");
    assert_int_equal(catalog_observe(f->cat, "x", true, rs_time_now()), 0);
    assert_string_equal(fx_changes(f), "created x/in;created x;deleted x/in;"
                                       "deleted x;created x/again");
    assert_int_equal(state_res_count(f->st), 1);
}

/* catalog/hidden_and_free: a hidden file is never catalogued (a rename to
 * a hidden name is a deletion); catalog_free(NULL) is a no-op. */
static void
test_hidden(void **state)
{
    struct fx *f = *state;
    fx_write(f, "v.txt", "v");
    assert_int_equal(catalog_observe(f->cat, "v.txt", true, rs_time_now()), 0);
    char a[4200], b[4200];
    fx_path(f, "v.txt", a);
    fx_path(f, ".v.txt", b);
    assert_int_equal(rename(a, b), 0);
    assert_int_equal(catalog_observe(f->cat, "v.txt", true, rs_time_now()), 0);
    assert_int_equal(catalog_observe(f->cat, ".v.txt", true, rs_time_now()), 0);
    assert_string_equal(fx_changes(f), "created v.txt;deleted v.txt");
    catalog_free(NULL);
    state_free(NULL);
    changelog_free(NULL);
}

/* What defer_hash was handed; it takes them when take is set. */
static char deferred[8][64];
static int ndeferred;
static bool take;

static bool
on_defer(void *ud, const char *rel)
{
    (void)ud;
    if (ndeferred < 8)
        snprintf(deferred[ndeferred++], sizeof(deferred[0]), "%s", rel);
    return take;
}

/* A file of n bytes, of a pattern starting at c (tu_write_pattern). */
static void
fx_write_n(struct fx *f, const char *rel, size_t n, int c)
{
    char p[4200];
    fx_path(f, rel, p);
    tu_write_pattern(p, n, c);
}

/* catalog/defer_large: a changed file of CATALOG_DEFER_BYTES or more is
 * handed to defer_hash (when it takes it, nothing is recorded yet), and
 * recorded with the digests given to catalog_digests_known when it is
 * observed again with that identity; a small one, the baseline and a
 * declined one are read here; digests for another identity are not
 * taken. */
static void
test_defer_large(void **state)
{
    struct fx *f = *state;
    rs_time_t now = rs_time_now();
    fx_close(f);
    fx_write(f, "base.bin", "x");
    fx_write_n(f, "big0.bin", CATALOG_DEFER_BYTES, 'a');
    char err[256];
    struct tree_opts to = { .dir = f->dir };
    assert_int_equal(tree_open(&to, &f->tree, err, sizeof(err)), 0);
    assert_int_equal(state_open(f->db, false, &f->st, err, sizeof(err)), 0);
    struct changelog_opts co = { .max_entries = 1000 };
    const char *e;
    f->cl = changelog_new(f->st, &co, now, &e);
    struct catalog_opts o = { .tree = f->tree, .st = f->st,
                              .state_path = f->db, .cl = f->cl,
                              .hooks = { .defer_hash = on_defer } };
    f->cat = catalog_new(&o);
    assert_non_null(f->cat);
    ndeferred = 0;
    take = true;

    /* the baseline reads every file here */
    assert_int_equal(catalog_scan(f->cat, "", false, now), 0);
    assert_int_equal(ndeferred, 0);
    assert_int_equal(fx_hashed(f), 2);

    fx_write_n(f, "big.bin", CATALOG_DEFER_BYTES, 'b');
    fx_write(f, "small.txt", "small");
    assert_int_equal(catalog_observe(f->cat, "big.bin", true, now), 0);
    assert_int_equal(catalog_observe(f->cat, "small.txt", true, now), 0);
    assert_int_equal(ndeferred, 1);
    assert_string_equal(deferred[0], "big.bin");
    assert_string_equal(fx_changes(f), "created small.txt");
    struct state_res r;
    assert_int_equal(state_res_get(f->st, "big.bin", &r), RS_ENOTFOUND);

    /* digests for another identity are not taken: handed again */
    struct stat st;
    char p[4200];
    fx_path(f, "big.bin", p);
    assert_int_equal(stat(p, &st), 0);
    struct stat other = st;
    other.st_size--;
    uint8_t md5[16], sha[32];
    memset(md5, 0x11, 16);
    memset(sha, 0x22, 32);
    catalog_digests_known(f->cat, &other, md5, sha);
    assert_int_equal(catalog_observe(f->cat, "big.bin", true, now), 0);
    assert_int_equal(ndeferred, 2);
    assert_string_equal(fx_changes(f), "created small.txt");

    /* its own are: recorded with them, counted as hashed, not read */
    uint64_t before = fx_hashed(f);
    catalog_digests_known(f->cat, &st, md5, sha);
    assert_int_equal(catalog_observe(f->cat, "big.bin", true, now), 0);
    assert_int_equal(ndeferred, 2);
    assert_string_equal(fx_changes(f), "created small.txt;created big.bin");
    assert_int_equal(state_res_get(f->st, "big.bin", &r), 0);
    assert_true(r.hashed);
    assert_memory_equal(r.md5, md5, 16);
    assert_memory_equal(r.sha256, sha, 32);
    assert_int_equal(fx_hashed(f), before + 1);

    /* declined: read here, with the true digests */
    take = false;
    fx_write_n(f, "big0.bin", CATALOG_DEFER_BYTES + 1, 'c');
    assert_int_equal(catalog_observe(f->cat, "big0.bin", true, now), 0);
    assert_int_equal(ndeferred, 3);
    assert_string_equal(fx_changes(f),
                        "created small.txt;created big.bin;updated big0.bin");
    assert_int_equal(fx_hashed(f), before + 2);
}

#define TC(name, fn) { name, fn, fx_setup, fx_teardown, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TC("catalog/baseline", test_baseline),
        TC("catalog/observe_changes", test_observe_changes),
        TC("catalog/touch", test_touch_and_replace),
        TC("catalog/rename_reuses_digests", test_rename_cache),
        TC("catalog/restart_warm", test_restart),
        TC("catalog/scan_steps", test_scan_steps),
        TC("catalog/directories", test_directories),
        TC("catalog/dir_becomes_file", test_dir_becomes_file),
        TC("catalog/hidden_and_free", test_hidden),
        TC("catalog/defer_large", test_defer_large),
    };
    return cmocka_run_group_tests_name("source_catalog", tests, NULL, NULL);
}
