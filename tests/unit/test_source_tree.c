/* test_source_tree.c - the served directory's path policy, safe opening
 * (no symlink escapes), the sorted walk and the URL mapping
 * (source/tree.c), plus the extension -> type table (source/mime.c). */
#include "testutil.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mime.h"
#include "tree.h"

static void
tt_write(const char *dir, const char *rel, const char *text)
{
    char p[4096];
    snprintf(p, sizeof(p), "%s/%s", dir, rel);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void
tt_mkdir(const char *dir, const char *rel)
{
    char p[4096];
    snprintf(p, sizeof(p), "%s/%s", dir, rel);
    assert_int_equal(mkdir(p, 0755), 0);
}

static struct tree *
tt_open(const char *dir, const char *const *ex, bool follow)
{
    struct tree_opts o = { .dir = dir, .excludes = ex,
                           .follow_symlinks = follow };
    struct tree *t = NULL;
    char err[256];
    int rc = tree_open(&o, &t, err, sizeof(err));
    if (rc != 0)
        fail_msg("tree_open: %s", err);
    return t;
}

/* tree/path_policy: hidden, dot segments, empty segments, control
 * characters and the reserved top-level name are refused. */
static void
test_path_policy(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp();
    struct tree *t = tt_open(dir, NULL, false);
    assert_true(tree_path_ok(t, "a.txt"));
    assert_true(tree_path_ok(t, "a/b/c.txt"));
    assert_true(tree_path_ok(t, "x/resourcesync"));   /* only at the top */
    assert_true(tree_path_ok(t, "sp ace/\xc3\xa9t\xc3\xa9.txt"));
    assert_false(tree_path_ok(t, ""));
    assert_false(tree_path_ok(t, ".hidden"));
    assert_false(tree_path_ok(t, "a/.git/config"));
    assert_false(tree_path_ok(t, ".."));
    assert_false(tree_path_ok(t, "a/../b"));
    assert_false(tree_path_ok(t, "a/./b"));
    assert_false(tree_path_ok(t, "a//b"));
    assert_false(tree_path_ok(t, "/a"));
    assert_false(tree_path_ok(t, "a/"));
    assert_false(tree_path_ok(t, "a\nb"));
    assert_false(tree_path_ok(t, "resourcesync"));
    assert_false(tree_path_ok(t, "resourcesync/x.xml"));
    tree_free(t);
    tu_rmtree(dir);
    free(dir);
}

/* tree/excludes: a pattern without '/' matches any segment, one with '/'
 * the path (and so everything beneath a matched directory); a trailing
 * '/' is dropped. */
static void
test_excludes(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp();
    const char *const ex[] = { "*.tmp", "cache", "/build/*", "docs/*.pdf",
                               NULL };
    struct tree *t = tt_open(dir, ex, false);
    assert_false(tree_path_ok(t, "a.tmp"));
    assert_false(tree_path_ok(t, "x/y/a.tmp"));
    assert_true(tree_path_ok(t, "a.tmpx"));
    assert_false(tree_path_ok(t, "cache"));
    assert_false(tree_path_ok(t, "x/cache/y.txt"));
    assert_true(tree_path_ok(t, "x/cached/y.txt"));
    assert_false(tree_path_ok(t, "build/out.o"));
    assert_false(tree_path_ok(t, "build/sub/deep.o"));
    assert_true(tree_path_ok(t, "x/build/out.o"));
    assert_false(tree_path_ok(t, "docs/a.pdf"));
    assert_true(tree_path_ok(t, "docs/a.txt"));
    assert_true(tree_path_ok(t, "docs/sub/a.pdf"));
    tree_free(t);

    /* a trailing '/' (.gitignore's "a directory") is dropped: kept, no
     * name ends with it and the pattern matched nothing */
    const char *const dirs[] = { "tmp/", "/out//", "a/logs/", NULL };
    t = tt_open(dir, dirs, false);
    assert_false(tree_path_ok(t, "tmp/x.txt"));
    assert_false(tree_path_ok(t, "x/tmp/y.txt"));
    assert_false(tree_path_ok(t, "out/x.o"));
    assert_true(tree_path_ok(t, "x/out/y.o"));        /* anchored */
    assert_false(tree_path_ok(t, "a/logs/today.log"));
    assert_true(tree_path_ok(t, "b/logs/today.log"));
    tree_free(t);

    /* a pattern that is only slashes matches no name: refused */
    const char *const bad[] = { "//", NULL };
    struct tree_opts o = { .dir = dir, .excludes = bad };
    char err[256];
    assert_int_equal(tree_open(&o, &t, err, sizeof(err)), RS_EINVAL);
    assert_non_null(strstr(err, "matches no name"));
    tu_rmtree(dir);
    free(dir);
}

/* tree/open_no_escape: symlinks (to a file outside the tree, or to one
 * inside it) are not opened unless following them is allowed;
 * directories, FIFOs and missing files are not found. */
static void
test_open_no_escape(void **state)
{
    (void)state;
    char *outside = tu_mkdtemp();
    char *dir = tu_mkdtemp();
    tt_write(outside, "secret", "secret\n");
    tt_write(dir, "in.txt", "in\n");
    tt_mkdir(dir, "sub");
    char p[4096], target[4096];
    snprintf(target, sizeof(target), "%s/secret", outside);
    snprintf(p, sizeof(p), "%s/escape", dir);
    assert_int_equal(symlink(target, p), 0);
    snprintf(p, sizeof(p), "%s/alias", dir);
    assert_int_equal(symlink("in.txt", p), 0);
    snprintf(p, sizeof(p), "%s/linkdir", dir);
    assert_int_equal(symlink(outside, p), 0);

    /* deeper: a symlinked directory in the middle of a path, pointing
     * outside or back inside, and a real file three levels down */
    tt_mkdir(dir, "sub/deeper");
    tt_write(dir, "sub/deeper/file.txt", "deep\n");
    snprintf(p, sizeof(p), "%s/sub/out", dir);
    assert_int_equal(symlink(outside, p), 0);
    snprintf(p, sizeof(p), "%s/sub/back", dir);
    assert_int_equal(symlink("deeper", p), 0);

    struct tree *t = tt_open(dir, NULL, false);
    struct stat st;
    int fd = tree_open_file(t, "sub/deeper/file.txt", &st);
    assert_true(fd >= 0);
    assert_int_equal(st.st_size, 5);
    close(fd);
    assert_int_equal(tree_stat(t, "sub/deeper/file.txt", &st), 0);
    assert_int_equal(tree_open_file(t, "sub/out/secret", &st), RS_ENOTFOUND);
    assert_int_equal(tree_stat(t, "sub/out/secret", &st), RS_ENOTFOUND);
    assert_int_equal(tree_open_file(t, "sub/back/file.txt", &st),
                     RS_ENOTFOUND);
    assert_int_equal(tree_open_file(t, "sub/deeper/../../in.txt", &st),
                     RS_ENOTFOUND);
    assert_int_equal(tree_open_file(t, "sub/nope/file.txt", &st),
                     RS_ENOTFOUND);
    assert_int_equal(tree_open_file(t, "in.txt/x", &st), RS_ENOTFOUND);
    fd = tree_open_file(t, "in.txt", &st);
    assert_true(fd >= 0);
    assert_int_equal(st.st_size, 3);
    close(fd);
    assert_int_equal(tree_open_file(t, "escape", &st), RS_ENOTFOUND);
    assert_int_equal(tree_open_file(t, "alias", &st), RS_ENOTFOUND);
    assert_int_equal(tree_open_file(t, "linkdir/secret", &st), RS_ENOTFOUND);
    assert_int_equal(tree_open_file(t, "sub", &st), RS_ENOTFOUND);
    /* a FIFO is opened without waiting for a writer, then refused */
    snprintf(p, sizeof(p), "%s/sub/fifo", dir);
    assert_int_equal(mkfifo(p, 0600), 0);
    assert_int_equal(tree_open_file(t, "sub/fifo", &st), RS_ENOTFOUND);
    assert_int_equal(tree_open_file(t, "nope", &st), RS_ENOTFOUND);
    assert_int_equal(tree_open_file(t, "../x", &st), RS_ENOTFOUND);
    assert_int_equal(tree_stat(t, "sub", &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(tree_stat(t, "escape", &st), RS_ENOTFOUND);
    tree_free(t);

    t = tt_open(dir, NULL, true);
    fd = tree_open_file(t, "escape", &st);
    assert_true(fd >= 0);
    close(fd);
    fd = tree_open_file(t, "linkdir/secret", &st);
    assert_true(fd >= 0);
    close(fd);
    fd = tree_open_file(t, "sub/out/secret", &st);
    assert_true(fd >= 0);
    close(fd);
    fd = tree_open_file(t, "sub/back/file.txt", &st);
    assert_true(fd >= 0);
    close(fd);
    tree_free(t);
    tu_rmtree(dir);
    tu_rmtree(outside);
    free(dir);
    free(outside);
}

/* tree/open_no_escape_walk: the same where the kernel has no openat2
 * (directories opened one component at a time). */
static void
test_open_no_escape_walk(void **state)
{
    tree_set_openat2(false);
    test_open_no_escape(state);
    tree_set_openat2(true);
}

struct walked {
    const struct tree *t;
    char seen[64][256];
    int n;
    int dirs;
};

static int
tt_on_file(void *ud, const char *rel, const struct stat *st, int dirfd,
           const char *name)
{
    (void)st;
    struct walked *w = ud;
    /* the directory fd opens the file by its last segment */
    struct stat st2;
    int fd = tree_open_at(w->t, dirfd, name, &st2);
    assert_true(fd >= 0);
    close(fd);
    assert_string_equal(name, strrchr(rel, '/') != NULL
                                  ? strrchr(rel, '/') + 1 : rel);
    assert_true(w->n < 64);
    snprintf(w->seen[w->n++], 256, "%s", rel);
    return 0;
}

static int
tt_on_dir(void *ud, const char *rel, const struct stat *st)
{
    (void)rel;
    assert_true(S_ISDIR(st->st_mode));
    ((struct walked *)ud)->dirs++;
    return 0;
}

/* tree/walk_order: files come in byte order of their full paths (what
 * the catalog's ORDER BY path gives), hidden, excluded and symlinked
 * entries are skipped, and every directory is visited. */
static void
test_walk_order(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp();
    tt_write(dir, "a.txt", "1");
    tt_write(dir, "a-b", "1");
    tt_write(dir, "a0", "1");
    tt_mkdir(dir, "a");
    tt_write(dir, "a/z", "1");
    tt_mkdir(dir, "a/b");
    tt_write(dir, "a/b/c", "1");
    tt_write(dir, "a/b.txt", "1");
    tt_write(dir, ".hidden", "1");
    tt_mkdir(dir, ".git");
    tt_write(dir, ".git/x", "1");
    tt_write(dir, "skip.tmp", "1");
    tt_mkdir(dir, "resourcesync");
    tt_write(dir, "resourcesync/shadowed", "1");
    char p[4096];
    snprintf(p, sizeof(p), "%s/link", dir);
    assert_int_equal(symlink("a.txt", p), 0);
    const char *const ex[] = { "*.tmp", NULL };
    struct tree *t = tt_open(dir, ex, false);
    struct walked w = { .t = t };
    struct tree_walk_cbs cbs = { .on_file = tt_on_file, .on_dir = tt_on_dir };
    assert_int_equal(tree_walk(t, "", &cbs, &w), 0);
    const char *want[] = { "a-b", "a.txt", "a/b.txt", "a/b/c", "a/z", "a0" };
    assert_int_equal(w.n, 6);
    for (int i = 0; i < 6; i++)
        assert_string_equal(w.seen[i], want[i]);
    for (int i = 1; i < w.n; i++)
        assert_true(strcmp(w.seen[i - 1], w.seen[i]) < 0);
    assert_int_equal(w.dirs, 3);     /* root, a, a/b */

    struct walked w2 = { .t = t };
    assert_int_equal(tree_walk(t, "a/b", &cbs, &w2), 0);
    assert_int_equal(w2.n, 1);
    assert_string_equal(w2.seen[0], "a/b/c");
    struct walked w3 = { .t = t };
    assert_int_equal(tree_walk(t, "gone", &cbs, &w3), 0);
    assert_int_equal(w3.n, 0);

    /* the same walk in steps of one file: the same files, dirs and order;
     * each run stops after its file, the last one says it is over */
    struct walked w4 = { .t = t };
    struct tree_walker *tw;
    assert_int_equal(tree_walker_new(t, "", &tw), 0);
    int runs = 0, r;
    do {
        int had = w4.n;
        r = tree_walker_run(tw, &cbs, &w4, 1);
        runs++;
        /* one file a run; the last may find only names it skips */
        assert_int_equal(w4.n, had + (r == 0 || had < 6 ? 1 : 0));
        assert_true(runs <= 7);
    } while (r == 0);
    assert_int_equal(r, 1);
    assert_int_equal(tree_walker_run(tw, &cbs, &w4, 1), 1);   /* stays over */
    tree_walker_free(tw);
    assert_int_equal(w4.n, 6);
    for (int i = 0; i < 6; i++)
        assert_string_equal(w4.seen[i], want[i]);
    assert_int_equal(w4.dirs, 3);
    /* freed half way: its directories are closed (ASan and the fd count) */
    assert_int_equal(tree_walker_new(t, "", &tw), 0);
    struct walked w5 = { .t = t };
    assert_int_equal(tree_walker_run(tw, &cbs, &w5, 4), 0);
    assert_int_equal(w5.n, 4);
    tree_walker_free(tw);
    struct walked w6 = { .t = t };
    assert_int_equal(tree_walker_new(t, "gone", &tw), 0);
    assert_int_equal(tree_walker_run(tw, &cbs, &w6, 1), 1);
    assert_int_equal(w6.n, 0);
    tree_walker_free(tw);
    tree_free(t);
    tu_rmtree(dir);
    free(dir);
}

/* tree/walk_loop: following symlinks, a link back to a directory being
 * walked is cut, in one go and in steps alike. */
static void
test_walk_loop(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp();
    tt_mkdir(dir, "d");
    tt_write(dir, "d/f", "1");
    char p[4096];
    snprintf(p, sizeof(p), "%s/d/up", dir);
    assert_int_equal(symlink("..", p), 0);
    struct tree *t = tt_open(dir, NULL, true);
    struct tree_walk_cbs cbs = { .on_file = tt_on_file, .on_dir = tt_on_dir };
    struct walked w = { .t = t };
    assert_int_equal(tree_walk(t, "", &cbs, &w), 0);
    assert_int_equal(w.n, 1);
    assert_string_equal(w.seen[0], "d/f");
    assert_int_equal(w.dirs, 2);     /* root, d: not d/up */
    struct walked w2 = { .t = t };
    struct tree_walker *tw;
    assert_int_equal(tree_walker_new(t, "", &tw), 0);
    int r, runs = 0;
    while ((r = tree_walker_run(tw, &cbs, &w2, 1)) == 0)
        assert_true(++runs < 4);
    assert_int_equal(r, 1);
    tree_walker_free(tw);
    assert_int_equal(w2.n, 1);
    assert_int_equal(w2.dirs, 2);
    tree_free(t);
    tu_rmtree(dir);
    free(dir);
}

/* tree/url_mapping: encoding keeps unreserved bytes, escapes the rest,
 * and decoding gives the path back; bad escapes and %00 are refused. */
static void
test_url_mapping(void **state)
{
    (void)state;
    char buf[256], back[256];
    assert_int_equal(tree_url_encode("a/b c/\xc3\xa9&x?.txt", buf,
                                     sizeof(buf)), 25);
    assert_string_equal(buf, "a/b%20c/%C3%A9%26x%3F.txt");
    assert_int_equal(tree_url_decode(buf, back, sizeof(back)), 0);
    assert_string_equal(back, "a/b c/\xc3\xa9&x?.txt");
    assert_int_equal(tree_url_decode("a%2fb", back, sizeof(back)), 0);
    assert_string_equal(back, "a/b");
    assert_int_equal(tree_url_decode("a%00b", back, sizeof(back)), RS_EINVAL);
    assert_int_equal(tree_url_decode("a%zz", back, sizeof(back)), RS_EINVAL);
    assert_int_equal(tree_url_decode("a%4", back, sizeof(back)), RS_EINVAL);
    assert_int_equal(tree_url_encode("abcdef", buf, 6), RS_ETOOBIG);
    assert_int_equal(tree_url_encode("abcdef", buf, 7), 6);
}

/* tree/free_null: tree_free(NULL) is a no-op; a missing root is an
 * error with a message. */
static void
test_free_null(void **state)
{
    (void)state;
    tree_free(NULL);
    struct tree_opts o = { .dir = "/nonexistent/rssource-test" };
    struct tree *t = NULL;
    char err[256] = "";
    assert_int_equal(tree_open(&o, &t, err, sizeof(err)), RS_EINVAL);
    assert_null(t);
    assert_true(err[0] != '\0');
}

/* mime/types: known extensions in any case, unknown or missing ones as
 * application/octet-stream. */
static void
test_mime(void **state)
{
    (void)state;
    assert_string_equal(mime_type_of("a/b.txt"), "text/plain");
    assert_string_equal(mime_type_of("X.PDF"), "application/pdf");
    assert_string_equal(mime_type_of("d.x/page.html"), "text/html");
    assert_string_equal(mime_type_of("data.json"), "application/json");
    assert_string_equal(mime_type_of("noext"), "application/octet-stream");
    assert_string_equal(mime_type_of("d.x/noext"), "application/octet-stream");
    assert_string_equal(mime_type_of("a.unknownext"),
                        "application/octet-stream");
    assert_string_equal(mime_type_of("trailing."), "application/octet-stream");
}

/* tree/mtime_saturates: mtimes in nanoseconds are exact inside what an
 * int64_t holds and saturate outside (2300 gave 1715 by overflow). */
static void
test_mtime_saturates(void **state)
{
    (void)state;
    struct stat st;
    memset(&st, 0, sizeof(st));
    st.st_mtim.tv_sec = 1700000000;
    st.st_mtim.tv_nsec = 123456789;
    assert_true(tree_mtime_ns(&st) == INT64_C(1700000000123456789));
    st.st_mtim.tv_sec = -1;
    st.st_mtim.tv_nsec = 500000000;
    assert_true(tree_mtime_ns(&st) == INT64_C(-500000000));
    st.st_mtim.tv_sec = INT64_C(10413792000);      /* 2300-01-01 */
    st.st_mtim.tv_nsec = 0;
    assert_true(tree_mtime_ns(&st) == INT64_MAX);
    st.st_mtim.tv_sec = INT64_MAX / 1000000000;     /* the last second */
    st.st_mtim.tv_nsec = 854775807;
    assert_true(tree_mtime_ns(&st) == INT64_MAX);
    st.st_mtim.tv_nsec = 854775808;
    assert_true(tree_mtime_ns(&st) == INT64_MAX);
    st.st_mtim.tv_nsec = 0;
    assert_true(tree_mtime_ns(&st) == INT64_MAX - 854775807);
    st.st_mtim.tv_sec = INT64_C(-20000000000);     /* before 1677 */
    assert_true(tree_mtime_ns(&st) == INT64_MIN);
    /* a file dated 2300, where the file system can hold it */
    char *dir = tu_mkdtemp();
    tt_write(dir, "y2300", "x");
    char p[4096];
    snprintf(p, sizeof(p), "%s/y2300", dir);
    struct timespec ts[2] = { { INT64_C(10413792000), 0 },
                              { INT64_C(10413792000), 0 } };
    if (utimensat(AT_FDCWD, p, ts, 0) == 0 && stat(p, &st) == 0 &&
        st.st_mtim.tv_sec == INT64_C(10413792000))
        assert_true(tree_mtime_ns(&st) == INT64_MAX);
    tu_rmtree(dir);
    free(dir);
}

struct skips {
    int n;
    char why[8][128];
    size_t len[8];
};

static void
on_skip(void *ud, const char *rel, const char *why)
{
    struct skips *k = ud;
    if (k->n < 8) {
        snprintf(k->why[k->n], sizeof(k->why[0]), "%s", why);
        k->len[k->n] = strlen(rel);
    }
    k->n++;
}

/* tree/unpublishable_told: what exists but can never be listed (a
 * control character in a name, deeper than TREE_DEPTH_MAX, a path of
 * TREE_PATH_MAX bytes or more) is told to on_skip and explained by
 * tree_path_problem; what policy leaves out (hidden, excluded,
 * reserved) is not. */
static void
test_unpublishable_told(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp();
    const char *const ex[] = { "*.tmp", NULL };
    struct tree *t = tt_open(dir, ex, false);
    tt_write(dir, "ok.txt", "x");
    tt_write(dir, "new\nline.txt", "x");
    tt_write(dir, ".hidden", "x");
    tt_write(dir, "x.tmp", "x");
    tt_mkdir(dir, "resourcesync");
    /* 130 levels of "d" */
    char rel[4096] = "d";
    size_t rl = 1;
    tt_mkdir(dir, rel);
    for (int i = 1; i < 130; i++) {
        memcpy(rel + rl, "/d", 3);
        rl += 2;
        tt_mkdir(dir, rel);
    }
    /* 21 directories of 200 bytes: a path over 4096 bytes, made one
     * level at a time (mkdir of the whole path would pass PATH_MAX) */
    char seg[201];
    memset(seg, 'n', 200);
    seg[200] = '\0';
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    assert_true(dfd >= 0);
    for (int i = 0; i < 21; i++) {
        assert_int_equal(mkdirat(dfd, seg, 0755), 0);
        int nfd = openat(dfd, seg, O_RDONLY | O_DIRECTORY);
        assert_true(nfd >= 0);
        close(dfd);
        dfd = nfd;
    }
    close(dfd);
    struct skips k = { 0 };
    struct tree_walk_cbs cbs = { .on_skip = on_skip };
    assert_int_equal(tree_walk(t, "", &cbs, &k), 0);
    assert_int_equal(k.n, 3);
    /* path order: d/..., new\nline.txt, nnn... */
    assert_true(strncmp(k.why[0], "deeper than 128 levels", 22) == 0);
    assert_int_equal(k.len[0], 128 * 2 - 1);
    assert_true(strncmp(k.why[1], "a control character", 19) == 0);
    assert_true(strncmp(k.why[2], "a path of 4096 bytes or more", 28) == 0);
    assert_int_equal(k.len[2], 20 * 201 - 1);      /* its directory */
    /* a walk below the root counts the depth from the root */
    char sub[300];
    memcpy(sub, rel, 120 * 2 - 1);          /* 120 levels */
    sub[120 * 2 - 1] = '\0';
    k.n = 0;
    assert_int_equal(tree_walk(t, sub, &cbs, &k), 0);
    assert_int_equal(k.n, 1);
    assert_int_equal(k.len[0], 128 * 2 - 1);
    assert_string_equal(tree_path_problem(t, "new\nline.txt"), k.why[1]);
    assert_null(tree_path_problem(t, "ok.txt"));
    assert_null(tree_path_problem(t, ".hid\nden"));
    assert_null(tree_path_problem(t, "x.tmp"));
    assert_null(tree_path_problem(t, "resourcesync/a\nb"));
    memcpy(rel + rl, "/f.txt", 7);
    assert_non_null(tree_path_problem(t, rel));
    tree_free(t);
    /* the tree of 4096+ bytes is removed a level at a time too */
    char cmd[4400];
    snprintf(cmd, sizeof(cmd), "cd '%s' && rm -rf %s d", dir, seg);
    assert_int_equal(system(cmd), 0);
    tu_rmtree(dir);
    free(dir);
}

#define TT(name, fn) { name, fn, NULL, NULL, NULL }

/* tree/links_into_the_tree: following symlinks, a link that leads back
 * into the tree (to a directory or a file in it) is not followed: its
 * target would be listed twice, under two names, and watched under one
 * only, so the other went stale (and a watch could leave with the alias).
 * Told to on_skip; tree_stat calls it absent. A link out of the tree is
 * followed as before. */
static void
test_links_into_the_tree(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp(), *out = tu_mkdtemp();
    tt_mkdir(dir, "d");
    tt_write(dir, "d/b", "1");
    tt_write(out, "o", "2");
    char p[4096];
    snprintf(p, sizeof(p), "%s/dlink", dir);
    assert_int_equal(symlink("d", p), 0);
    snprintf(p, sizeof(p), "%s/flink", dir);
    assert_int_equal(symlink("d/b", p), 0);
    snprintf(p, sizeof(p), "%s/outside", dir);
    assert_int_equal(symlink(out, p), 0);
    struct tree *t = tt_open(dir, NULL, true);
    struct tree_walk_cbs cbs = { .on_file = tt_on_file, .on_dir = tt_on_dir };
    struct walked w = { .t = t };
    assert_int_equal(tree_walk(t, "", &cbs, &w), 0);
    assert_int_equal(w.n, 2);
    assert_string_equal(w.seen[0], "d/b");
    assert_string_equal(w.seen[1], "outside/o");
    struct skips k = { 0 };
    struct tree_walk_cbs sk = { .on_skip = on_skip };
    assert_int_equal(tree_walk(t, "", &sk, &k), 0);
    assert_int_equal(k.n, 2);                    /* dlink, flink */
    assert_non_null(strstr(k.why[0], "a symlink into the tree"));
    struct stat st;
    assert_int_equal(tree_stat(t, "dlink", &st), RS_ENOTFOUND);
    assert_int_equal(tree_stat(t, "flink", &st), RS_ENOTFOUND);
    assert_int_equal(tree_stat(t, "outside", &st), 0);
    assert_int_equal(tree_stat(t, "d/b", &st), 0);
    tree_free(t);
    tu_rmtree(out);
    tu_rmtree(dir);
    free(out);
    free(dir);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TT("tree/path_policy", test_path_policy),
        TT("tree/excludes", test_excludes),
        TT("tree/open_no_escape", test_open_no_escape),
        TT("tree/open_no_escape_walk", test_open_no_escape_walk),
        TT("tree/walk_order", test_walk_order),
        TT("tree/walk_loop", test_walk_loop),
        TT("tree/links_into_the_tree", test_links_into_the_tree),
        TT("tree/url_mapping", test_url_mapping),
        TT("tree/free_null", test_free_null),
        TT("tree/mtime_saturates", test_mtime_saturates),
        TT("tree/unpublishable_told", test_unpublishable_told),
        TT("mime/types", test_mime),
    };
    return cmocka_run_group_tests_name("source_tree", tests, NULL, NULL);
}
