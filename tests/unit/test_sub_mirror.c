/* test_sub_mirror.c - the mirror directory (subscriber/mirror.c) on real
 * files: atomic write/commit/abort, confinement against symlinks, removal
 * with and without the attic, pruning, the crash sweep, the walk, mtimes,
 * a full "disk" (EFBIG), many files, and allocation failures. */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mirror.h"
#include "rs_alloc.h"

/* Linked with -Wl,--wrap=fsync -Wl,--wrap=syncfs (tests/CMakeLists.txt):
 * both counted, and each fails with its _errno while that is set. */
static unsigned fsyncs, syncfss;
static int fsync_errno, syncfs_errno;

int __real_fsync(int fd);
int __wrap_fsync(int fd);
int __real_syncfs(int fd);
int __wrap_syncfs(int fd);

int
__wrap_fsync(int fd)
{
    fsyncs++;
    if (fsync_errno != 0) {
        errno = fsync_errno;
        return -1;
    }
    return __real_fsync(fd);
}

int
__wrap_syncfs(int fd)
{
    syncfss++;
    if (syncfs_errno != 0) {
        errno = syncfs_errno;
        return -1;
    }
    return __real_syncfs(fd);
}

struct fx {
    char *base;          /* private temp dir holding all of the below */
    char mdir[4200];     /* base/m: the mirror */
    char attic[4200];    /* base/attic */
    char out[4200];      /* base/out: "outside", must stay untouched */
    struct mirror *m;
};

/* dir/rel in one of 4 rotating static buffers: copy what must live long. */
static const char *
fx_path(const struct fx *f, const char *dir, const char *rel)
{
    static char buf[4][8400];
    static int k;
    char *b = buf[k++ % 4];
    (void)f;
    int n = snprintf(b, sizeof(buf[0]), "%s/%s", dir, rel);
    assert_true(n > 0 && (size_t)n < sizeof(buf[0]));
    return b;
}

static struct mirror *
fx_open(const char *dir, const struct mirror_opts *o)
{
    char err[512];
    struct mirror *m = mirror_open(dir, o, err, sizeof(err));
    if (m == NULL)
        fail_msg("mirror_open %s: %s", dir, err);
    return m;
}

static int
fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    f->base = tu_mkdtemp();
    snprintf(f->mdir, sizeof(f->mdir), "%s/m", f->base);
    snprintf(f->attic, sizeof(f->attic), "%s/attic", f->base);
    snprintf(f->out, sizeof(f->out), "%s/out", f->base);
    assert_int_equal(mkdir(f->out, 0755), 0);
    f->m = fx_open(f->mdir, NULL);
    *state = f;
    return 0;
}

static int
fx_teardown(void **state)
{
    struct fx *f = *state;
    mirror_close(f->m);
    tu_alloc_fail_at(0);
    tu_rmtree(f->base);
    free(f->base);
    free(f);
    return 0;
}

/* Write rel with text through the mirror. */
static int
fx_put(struct mirror *m, const char *rel, const char *text, rs_time_t mtime)
{
    struct mirror_file *mf = NULL;
    int rc = mirror_begin(m, rel, &mf);
    if (rc != 0)
        return rc;
    rc = mirror_write(mf, text, strlen(text));
    if (rc != 0) {
        mirror_abort(mf);
        return rc;
    }
    return mirror_commit(mf, mtime);
}

static void
fx_write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* Open fds of this process. */
static int
fx_fds(void)
{
    return tu_count_entries("/proc/self/fd", NULL);
}

static bool
fx_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* mirror/open: the directory and its parents are created; a symlink (also
 * given with a trailing '/') or a file is refused; close(NULL) is fine;
 * fsync policy names parse. */
static void
test_open(void **state)
{
    struct fx *f = *state;
    char err[512];
    assert_string_equal(mirror_errstr(f->m), "");
    assert_int_equal(mirror_errno(f->m), 0);
    struct stat st;
    assert_int_equal(stat(f->mdir, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_non_null(strstr(mirror_root(f->m), "/m"));

    struct mirror *m = fx_open(fx_path(f, f->base, "new/deeper/m2/"), NULL);
    assert_true(fx_exists(fx_path(f, f->base, "new/deeper/m2")));
    mirror_close(m);

    assert_int_equal(symlink(f->out, fx_path(f, f->base, "link")), 0);
    assert_null(mirror_open(fx_path(f, f->base, "link"), NULL, err,
                            sizeof(err)));
    assert_non_null(strstr(err, "symlink"));
    assert_null(mirror_open(fx_path(f, f->base, "link/"), NULL, err,
                            sizeof(err)));
    assert_non_null(strstr(err, "symlink"));
    assert_null(mirror_open(fx_path(f, f->base, "link//"), NULL, err,
                            sizeof(err)));
    fx_write_file(fx_path(f, f->base, "file"), "x");
    assert_null(mirror_open(fx_path(f, f->base, "file"), NULL, err,
                            sizeof(err)));
    assert_non_null(strstr(err, "Not a directory"));
    assert_null(mirror_open(fx_path(f, f->base, "file/sub"), NULL, err,
                            sizeof(err)));
    assert_null(mirror_open("", NULL, err, sizeof(err)));
    assert_null(mirror_open("/", NULL, err, sizeof(err)));
    struct mirror_opts bad = { .fsync = (enum mirror_fsync)7 };
    assert_null(mirror_open(f->mdir, &bad, err, sizeof(err)));
    mirror_close(NULL);

    enum mirror_fsync p = MIRROR_FSYNC_NONE;
    assert_int_equal(mirror_fsync_from("full", &p), 0);
    assert_int_equal(p, MIRROR_FSYNC_FULL);
    assert_int_equal(mirror_fsync_from("file", &p), 0);
    assert_int_equal(p, MIRROR_FSYNC_FILE);
    assert_int_equal(mirror_fsync_from("none", &p), 0);
    assert_int_equal(p, MIRROR_FSYNC_NONE);
    assert_int_equal(mirror_fsync_from("FULL", &p), RS_EINVAL);
    assert_int_equal(mirror_fsync_from("", &p), RS_EINVAL);
}

/* mirror/write_commit: nothing shows under the name before the commit (a
 * reader sees the old file or the new one, never a half), the temp lives
 * in the target's directory, the mode is 0644 less umask, nested
 * directories are created, and replacing works. */
static void
test_write_commit(void **state)
{
    struct fx *f = *state;
    struct mirror_file *mf;
    char a[8400];
    snprintf(a, sizeof(a), "%s", fx_path(f, f->mdir, "a.txt"));
    assert_int_equal(mirror_begin(f->m, "a.txt", &mf), 0);
    assert_int_equal(mirror_write(mf, "hel", 3), 0);
    assert_int_equal(mirror_write(mf, "lo", 2), 0);
    assert_int_equal(mirror_write(mf, "", 0), 0);
    assert_false(fx_exists(a));
    assert_int_equal(tu_count_entries(f->mdir, MIRROR_TMP_PREFIX), 1);
    assert_int_equal(mirror_commit(mf, RS_TIME_NONE), 0);
    assert_string_equal(tu_read_str(a), "hello");
    assert_int_equal(tu_count_entries(f->mdir, NULL), 1);

    mode_t um = umask(022);
    umask(um);
    struct stat st;
    assert_int_equal(stat(a, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644 & ~um);

    /* replace: the old content stays until the commit */
    assert_int_equal(mirror_begin(f->m, "a.txt", &mf), 0);
    assert_int_equal(mirror_write(mf, "new content", 11), 0);
    assert_string_equal(tu_read_str(a), "hello");
    assert_int_equal(mirror_commit(mf, RS_TIME_NONE), 0);
    assert_string_equal(tu_read_str(a), "new content");

    /* nested directories */
    assert_int_equal(fx_put(f->m, "d1/d2/d3/deep.txt", "deep", RS_TIME_NONE),
                     0);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "d1/d2/d3/deep.txt")),
                        "deep");
    assert_int_equal(stat(fx_path(f, f->mdir, "d1/d2"), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0755 & ~um);
    /* an empty file */
    assert_int_equal(fx_put(f->m, "d1/empty", "", RS_TIME_NONE), 0);
    assert_int_equal(stat(fx_path(f, f->mdir, "d1/empty"), &st), 0);
    assert_int_equal(st.st_size, 0);
    assert_int_equal(tu_count_entries(f->mdir, MIRROR_TMP_PREFIX), 0);
    assert_int_equal(tu_count_entries(fx_path(f, f->mdir, "d1/d2/d3"), NULL), 1);
}

/* mirror/abort: an aborted new file leaves nothing, an aborted replacement
 * leaves the old file; abort(NULL) is fine. */
static void
test_abort(void **state)
{
    struct fx *f = *state;
    struct mirror_file *mf;
    assert_int_equal(mirror_begin(f->m, "x/new.txt", &mf), 0);
    assert_int_equal(mirror_write(mf, "abc", 3), 0);
    mirror_abort(mf);
    assert_false(fx_exists(fx_path(f, f->mdir, "x/new.txt")));
    assert_int_equal(tu_count_entries(fx_path(f, f->mdir, "x"), NULL), 0);

    assert_int_equal(fx_put(f->m, "x/old.txt", "old", RS_TIME_NONE), 0);
    assert_int_equal(mirror_begin(f->m, "x/old.txt", &mf), 0);
    assert_int_equal(mirror_write(mf, "half", 4), 0);
    mirror_abort(mf);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "x/old.txt")), "old");
    assert_int_equal(tu_count_entries(fx_path(f, f->mdir, "x"), NULL), 1);
    mirror_abort(NULL);
}

/* mirror/bad_rel: paths that are not clean relative paths are refused by
 * every call, with a message, before touching the disk. */
static void
test_bad_rel(void **state)
{
    struct fx *f = *state;
    char longseg[300], deep[1200], huge[5000];
    memset(longseg, 'a', 256);
    longseg[256] = '\0';
    for (int i = 0; i < 257; i++) {      /* "a/a/.../a": 257 segments */
        deep[2 * i] = 'a';
        deep[2 * i + 1] = '/';
    }
    deep[257 * 2 - 1] = '\0';
    memset(huge, 'b', sizeof(huge) - 1);
    for (size_t i = 100; i < sizeof(huge) - 1; i += 100)
        huge[i] = '/';
    huge[sizeof(huge) - 1] = '\0';
    const char *bad[] = { "", "/abs", "/", "a/../b", "..", "../x", ".",
                          "./a", "a/.", "a//b", "a/", ".rssub-tmp.x",
                          "a/.RSSUB/x", ".rssub", longseg, deep, huge };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        struct mirror_file *mf = (struct mirror_file *)1;
        struct stat st;
        int fd;
        if (mirror_begin(f->m, bad[i], &mf) != RS_EINVAL)
            fail_msg("begin accepted \"%.40s\"", bad[i]);
        assert_null(mf);
        assert_non_null(strstr(mirror_errstr(f->m), "not a valid"));
        assert_int_equal(mirror_remove(f->m, bad[i]), RS_EINVAL);
        assert_int_equal(mirror_stat(f->m, bad[i], &st), RS_EINVAL);
        assert_int_equal(mirror_open_read(f->m, bad[i], &fd), RS_EINVAL);
    }
    assert_int_equal(tu_count_entries(f->mdir, NULL), 0);
    /* 255 bytes and 256 segments are fine */
    longseg[255] = '\0';
    assert_int_equal(fx_put(f->m, longseg, "ok", RS_TIME_NONE), 0);
    deep[256 * 2 - 1] = '\0';
    assert_int_equal(fx_put(f->m, deep, "ok", RS_TIME_NONE), 0);
}

/* mirror/symlink_on_the_way: a symlinked directory anywhere on the path is
 * refused (RS_EDENIED) and nothing is created where it points; a file on
 * the way is RS_EINVAL. */
static void
test_symlink_on_the_way(void **state)
{
    struct fx *f = *state;
    assert_int_equal(symlink(f->out, fx_path(f, f->mdir, "a")), 0);
    assert_int_equal(fx_put(f->m, "a/x", "evil", RS_TIME_NONE), RS_EDENIED);
    assert_non_null(strstr(mirror_errstr(f->m), "a: is a symlink"));
    assert_int_equal(mirror_errno(f->m), ELOOP);
    assert_int_equal(mkdir(fx_path(f, f->mdir, "d"), 0755), 0);
    assert_int_equal(symlink(f->out, fx_path(f, f->mdir, "d/a")), 0);
    assert_int_equal(fx_put(f->m, "d/a/sub/x", "evil", RS_TIME_NONE),
                     RS_EDENIED);
    assert_non_null(strstr(mirror_errstr(f->m), "d/a: is a symlink"));
    /* a relative symlink to a directory inside the mirror: refused too */
    assert_int_equal(mkdir(fx_path(f, f->mdir, "real"), 0755), 0);
    assert_int_equal(symlink("real", fx_path(f, f->mdir, "alias")), 0);
    assert_int_equal(fx_put(f->m, "alias/x", "y", RS_TIME_NONE), RS_EDENIED);
    /* a dangling one */
    assert_int_equal(symlink("/nonexistent/dir", fx_path(f, f->mdir, "dl")),
                     0);
    assert_int_equal(fx_put(f->m, "dl/x", "y", RS_TIME_NONE), RS_EDENIED);
    assert_int_equal(tu_count_entries(f->out, NULL), 0);
    assert_false(fx_exists("/nonexistent/dir"));

    /* reads and removals do not follow either */
    fx_write_file(fx_path(f, f->out, "secret"), "secret");
    struct stat st;
    int fd;
    assert_int_equal(mirror_stat(f->m, "a/secret", &st), RS_EDENIED);
    assert_int_equal(mirror_open_read(f->m, "a/secret", &fd), RS_EDENIED);
    assert_int_equal(mirror_remove(f->m, "a/secret"), RS_EDENIED);
    assert_string_equal(tu_read_str(fx_path(f, f->out, "secret")), "secret");

    fx_write_file(fx_path(f, f->mdir, "file"), "x");
    assert_int_equal(fx_put(f->m, "file/x", "y", RS_TIME_NONE), RS_EINVAL);
    assert_non_null(strstr(mirror_errstr(f->m), "file: not a directory"));
    assert_int_equal(mirror_stat(f->m, "file/x", &st), RS_EINVAL);
}

/* mirror/final_symlink: a symlink at the final name is replaced by the
 * file, its target outside untouched; stat shows a symlink as one and
 * open_read refuses it. */
static void
test_final_symlink(void **state)
{
    struct fx *f = *state;
    char secret[8400];
    snprintf(secret, sizeof(secret), "%s", fx_path(f, f->out, "secret"));
    fx_write_file(secret, "secret");
    assert_int_equal(symlink(secret, fx_path(f, f->mdir, "link")), 0);
    struct stat st;
    int fd;
    assert_int_equal(mirror_stat(f->m, "link", &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_int_equal(mirror_open_read(f->m, "link", &fd), RS_EDENIED);
    assert_int_equal(fd, -1);

    assert_int_equal(fx_put(f->m, "link", "mine", RS_TIME_NONE), 0);
    assert_string_equal(tu_read_str(secret), "secret");
    assert_int_equal(lstat(fx_path(f, f->mdir, "link"), &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "link")), "mine");

    /* removing a symlink removes the link, not its target */
    assert_int_equal(symlink(secret, fx_path(f, f->mdir, "link2")), 0);
    assert_int_equal(mirror_remove(f->m, "link2"), 0);
    assert_false(fx_exists(fx_path(f, f->mdir, "link2")));
    assert_string_equal(tu_read_str(secret), "secret");
}

/* mirror/directory_at_name: committing over a directory fails with a
 * clear message, leaving the directory and no temp. */
static void
test_directory_at_name(void **state)
{
    struct fx *f = *state;
    assert_int_equal(mkdir(fx_path(f, f->mdir, "d"), 0755), 0);
    fx_write_file(fx_path(f, f->mdir, "d/inner"), "in");
    assert_int_equal(mkdir(fx_path(f, f->mdir, "e"), 0755), 0);
    assert_int_equal(fx_put(f->m, "d", "file", RS_TIME_NONE), RS_EINVAL);
    assert_non_null(strstr(mirror_errstr(f->m), "d: is a directory"));
    assert_int_equal(fx_put(f->m, "e", "file", RS_TIME_NONE), RS_EINVAL);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "d/inner")), "in");
    assert_int_equal(tu_count_entries(f->mdir, NULL), 2);
    assert_int_equal(mirror_remove(f->m, "d"), RS_EINVAL);
    assert_true(fx_exists(fx_path(f, f->mdir, "d/inner")));
}

/* mirror/remove_prune: a removed file is gone and so are the directories
 * it leaves empty, up to but not including the root, which are not held
 * open afterwards; absent files are RS_ENOTFOUND; directories are written
 * again after being pruned. */
static void
test_remove_prune(void **state)
{
    struct fx *f = *state;
    int fds = fx_fds();
    assert_int_equal(fx_put(f->m, "solo/dir/x", "1", RS_TIME_NONE), 0);
    assert_true(fx_fds() > fds);             /* solo/dir is cached */
    assert_int_equal(mirror_remove(f->m, "solo/dir/x"), 0);
    assert_false(fx_exists(fx_path(f, f->mdir, "solo")));
    assert_int_equal(fx_fds(), fds);
    assert_int_equal(fx_put(f->m, "a/b/c/x", "1", RS_TIME_NONE), 0);
    assert_int_equal(fx_put(f->m, "a/y", "2", RS_TIME_NONE), 0);
    assert_int_equal(mirror_remove(f->m, "a/b/c/x"), 0);
    assert_false(fx_exists(fx_path(f, f->mdir, "a/b")));
    assert_true(fx_exists(fx_path(f, f->mdir, "a/y")));
    assert_int_equal(mirror_remove(f->m, "a/b/c/x"), RS_ENOTFOUND);
    assert_int_equal(mirror_remove(f->m, "a/nope"), RS_ENOTFOUND);
    assert_non_null(strstr(mirror_errstr(f->m), "ENOENT"));
    assert_int_equal(mirror_remove(f->m, "a/y"), 0);
    assert_false(fx_exists(fx_path(f, f->mdir, "a")));
    assert_true(fx_exists(f->mdir));
    assert_int_equal(mirror_remove(f->m, "top"), RS_ENOTFOUND);
    /* the pruned directories were cached: writing there again works */
    assert_int_equal(fx_put(f->m, "a/b/c/x", "3", RS_TIME_NONE), 0);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "a/b/c/x")), "3");
    /* a non-empty parent stops the pruning */
    assert_int_equal(fx_put(f->m, "a/b/z", "4", RS_TIME_NONE), 0);
    assert_int_equal(mirror_remove(f->m, "a/b/c/x"), 0);
    assert_false(fx_exists(fx_path(f, f->mdir, "a/b/c")));
    assert_true(fx_exists(fx_path(f, f->mdir, "a/b/z")));
    struct stat st;
    assert_int_equal(mirror_stat(f->m, "a/b/c/x", &st), RS_ENOTFOUND);
    assert_int_equal(mirror_stat(f->m, "a/b/z", &st), 0);
    assert_int_equal(st.st_size, 1);
}

/* Find the attic name of base in dir with a time suffix (and -N). */
static int
fx_count_suffixed(const char *dir, const char *base)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    size_t bl = strlen(base);
    while ((de = readdir(d)) != NULL) {
        const char *s = de->d_name;
        /* base.YYYYMMDDThhmmssZ[-N] */
        if (strncmp(s, base, bl) != 0 || s[bl] != '.' ||
            strlen(s + bl) < 17 || s[bl + 9] != 'T' || s[bl + 16] != 'Z')
            continue;
        n++;
    }
    closedir(d);
    return n;
}

/* mirror/attic: removed files move to the attic at their path; a name
 * taken there gets a time suffix (then -N); a file in the attic in the way
 * of a directory is moved aside; the mirror is still pruned. */
static void
test_attic(void **state)
{
    struct fx *f = *state;
    struct mirror_opts o = { .fsync = MIRROR_FSYNC_FULL, .attic = f->attic };
    struct mirror *m = fx_open(f->mdir, &o);
    assert_true(fx_exists(f->attic));
    assert_int_equal(fx_put(m, "a/x", "v1", RS_TIME_NONE), 0);
    assert_int_equal(mirror_remove(m, "a/x"), 0);
    assert_false(fx_exists(fx_path(f, f->mdir, "a")));
    assert_string_equal(tu_read_str(fx_path(f, f->attic, "a/x")), "v1");
    assert_int_equal(fx_put(m, "a/x", "v2", RS_TIME_NONE), 0);
    assert_int_equal(mirror_remove(m, "a/x"), 0);
    assert_int_equal(fx_put(m, "a/x", "v3", RS_TIME_NONE), 0);
    assert_int_equal(mirror_remove(m, "a/x"), 0);
    assert_string_equal(tu_read_str(fx_path(f, f->attic, "a/x")), "v1");
    char ad[8400];
    snprintf(ad, sizeof(ad), "%s", fx_path(f, f->attic, "a"));
    assert_int_equal(tu_count_entries(ad, NULL), 3);
    assert_int_equal(fx_count_suffixed(ad, "x"), 2);
    /* every version is kept */
    DIR *d = opendir(ad);
    struct dirent *de;
    int seen = 0;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        const char *c = tu_read_str(fx_path(f, ad, de->d_name));
        assert_non_null(c);
        seen |= strcmp(c, "v2") == 0 ? 1 : strcmp(c, "v3") == 0 ? 2 : 0;
    }
    closedir(d);
    assert_int_equal(seen, 3);

    /* attic/f is a file; now a/f/g needs attic/f as a directory */
    assert_int_equal(fx_put(m, "f", "file f", RS_TIME_NONE), 0);
    assert_int_equal(mirror_remove(m, "f"), 0);
    assert_int_equal(fx_put(m, "f/g", "file g", RS_TIME_NONE), 0);
    assert_int_equal(mirror_remove(m, "f/g"), 0);
    assert_string_equal(tu_read_str(fx_path(f, f->attic, "f/g")), "file g");
    assert_int_equal(fx_count_suffixed(f->attic, "f"), 1);
    /* and back: attic/f is a directory, the file f gets a suffix */
    assert_int_equal(fx_put(m, "f", "file f2", RS_TIME_NONE), 0);
    assert_int_equal(mirror_remove(m, "f"), 0);
    assert_int_equal(fx_count_suffixed(f->attic, "f"), 2);
    assert_int_equal(tu_count_entries(f->mdir, NULL), 0);
    /* a 255-byte name still gets its suffix (the name is shortened) */
    char name[256];
    memset(name, 'n', 255);
    name[255] = '\0';
    assert_int_equal(fx_put(m, name, "1", RS_TIME_NONE), 0);
    assert_int_equal(mirror_remove(m, name), 0);
    assert_int_equal(fx_put(m, name, "2", RS_TIME_NONE), 0);
    assert_int_equal(mirror_remove(m, name), 0);
    assert_int_equal(tu_count_entries(f->attic, "nnnn"), 2);
    mirror_close(m);
}

/* mirror/attic_checks: the attic must be absolute, not a symlink, not hold
 * the mirror, and inside the mirror only as a .rssub* directory, which
 * the walk then never shows. */
static void
test_attic_checks(void **state)
{
    struct fx *f = *state;
    char err[512];
    struct mirror_opts o = { .attic = "relative/attic" };
    assert_null(mirror_open(f->mdir, &o, err, sizeof(err)));
    assert_non_null(strstr(err, "absolute"));
    o.attic = fx_path(f, f->mdir, "attic");
    assert_null(mirror_open(f->mdir, &o, err, sizeof(err)));
    assert_non_null(strstr(err, ".rssub"));
    o.attic = f->mdir;
    assert_null(mirror_open(f->mdir, &o, err, sizeof(err)));
    o.attic = f->base;
    assert_null(mirror_open(f->mdir, &o, err, sizeof(err)));
    assert_non_null(strstr(err, "inside the attic"));
    assert_int_equal(symlink(f->out, fx_path(f, f->base, "alink")), 0);
    o.attic = fx_path(f, f->base, "alink");
    assert_null(mirror_open(f->mdir, &o, err, sizeof(err)));
    assert_non_null(strstr(err, "symlink"));

    o.attic = fx_path(f, f->mdir, ".rssub-attic");
    struct mirror *m = fx_open(f->mdir, &o);
    assert_int_equal(fx_put(m, "k/v", "1", RS_TIME_NONE), 0);
    assert_int_equal(mirror_remove(m, "k/v"), 0);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, ".rssub-attic/k/v")),
                        "1");
    assert_int_equal(fx_put(m, "w", "2", RS_TIME_NONE), 0);
    size_t n = 99;
    assert_int_equal(mirror_sweep_temps(m, &n), 0);
    assert_int_equal(n, 0);
    assert_true(fx_exists(fx_path(f, f->mdir, ".rssub-attic/k/v")));
    mirror_close(m);
}

struct walked {
    int n;
    char seen[64][256];
    off_t sizes[64];
    struct mirror *m;
    bool remove;          /* mirror_remove each file seen */
    int stop_at;          /* return 42 at this count (0: never) */
};

static int
on_file(void *ud, const char *rel, const struct stat *st)
{
    struct walked *w = ud;
    assert_true(S_ISREG(st->st_mode));
    assert_true(w->n < 64);
    snprintf(w->seen[w->n], sizeof(w->seen[0]), "%s", rel);
    w->sizes[w->n] = st->st_size;
    w->n++;
    if (w->remove)
        assert_int_equal(mirror_remove(w->m, rel), 0);
    return w->n == w->stop_at ? 42 : 0;
}

static bool
walked_has(const struct walked *w, const char *rel)
{
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->seen[i], rel) == 0)
            return true;
    return false;
}

/* mirror/walk: every regular file with its path and size; temps, .rssub
 * names, symlinks and FIFOs are skipped; a callback's value stops the
 * walk; a callback may remove the file it is given. */
static void
test_walk(void **state)
{
    struct fx *f = *state;
    assert_int_equal(fx_put(f->m, "a", "1", RS_TIME_NONE), 0);
    assert_int_equal(fx_put(f->m, "b/c", "22", RS_TIME_NONE), 0);
    assert_int_equal(fx_put(f->m, "b/d/e", "333", RS_TIME_NONE), 0);
    struct mirror_file *mf;
    assert_int_equal(mirror_begin(f->m, "b/d/pending", &mf), 0);
    assert_int_equal(symlink("a", fx_path(f, f->mdir, "lnk")), 0);
    assert_int_equal(symlink(f->out, fx_path(f, f->mdir, "dlnk")), 0);
    fx_write_file(fx_path(f, f->out, "outside"), "o");
    assert_int_equal(mkfifo(fx_path(f, f->mdir, "fifo"), 0644), 0);
    assert_int_equal(mkdir(fx_path(f, f->mdir, ".rssub-x"), 0755), 0);
    fx_write_file(fx_path(f, f->mdir, ".rssub-x/hidden"), "h");
    fx_write_file(fx_path(f, f->mdir, "b/.RSSUB-note"), "h");
    fx_write_file(fx_path(f, f->mdir, ".hidden"), "stray");

    struct walked w = { .m = f->m };
    assert_int_equal(mirror_walk(f->m, on_file, &w), 0);
    assert_int_equal(w.n, 4);
    assert_true(walked_has(&w, "a"));
    assert_true(walked_has(&w, "b/c"));
    assert_true(walked_has(&w, "b/d/e"));
    assert_true(walked_has(&w, ".hidden"));
    for (int i = 0; i < w.n; i++)
        if (strcmp(w.seen[i], "b/d/e") == 0)
            assert_int_equal(w.sizes[i], 3);
    mirror_abort(mf);

    /* a second walk starts from the top again */
    struct walked w2 = { .m = f->m, .stop_at = 2 };
    assert_int_equal(mirror_walk(f->m, on_file, &w2), 42);
    assert_int_equal(w2.n, 2);

    /* strays removed during the walk; empty directories pruned */
    struct walked w3 = { .m = f->m, .remove = true };
    assert_int_equal(mirror_walk(f->m, on_file, &w3), 0);
    assert_int_equal(w3.n, 4);
    assert_false(fx_exists(fx_path(f, f->mdir, "b/d")));
    assert_true(fx_exists(fx_path(f, f->mdir, "b/.RSSUB-note")));
    struct walked w4 = { .m = f->m };
    assert_int_equal(mirror_walk(f->m, on_file, &w4), 0);
    assert_int_equal(w4.n, 0);
    assert_string_equal(tu_read_str(fx_path(f, f->out, "outside")), "o");
}

/* mirror/sweep_after_crash: a process killed between begin and commit
 * leaves a temp and nothing under the name; the next run's sweep removes
 * it and every other stale temp in the tree, nothing else. */
static void
test_sweep_after_crash(void **state)
{
    struct fx *f = *state;
    assert_int_equal(fx_put(f->m, "d/x", "old", RS_TIME_NONE), 0);
    mirror_close(f->m);
    f->m = NULL;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char err[256];
        struct mirror *m = mirror_open(f->mdir, NULL, err, sizeof(err));
        struct mirror_file *mf;
        if (m == NULL || mirror_begin(m, "d/x", &mf) != 0 ||
            mirror_write(mf, "half-writ", 9) != 0 ||
            mirror_begin(m, "e/new", &mf) != 0 ||
            mirror_write(mf, "half", 4) != 0)
            _exit(1);
        raise(SIGKILL);
        _exit(2);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "d/x")), "old");
    assert_int_equal(tu_count_entries(fx_path(f, f->mdir, "d"), MIRROR_TMP_PREFIX),
                     1);
    assert_false(fx_exists(fx_path(f, f->mdir, "e/new")));
    /* more debris: a temp directory is not ours to remove, nor is a temp
     * inside another .rssub directory; a temp symlink is not followed */
    assert_int_equal(mkdir(fx_path(f, f->mdir, ".rssub-tmp.dir"), 0755), 0);
    assert_int_equal(mkdir(fx_path(f, f->mdir, ".rssub-attic"), 0755), 0);
    fx_write_file(fx_path(f, f->mdir, ".rssub-attic/.rssub-tmp.keep"), "k");
    fx_write_file(fx_path(f, f->out, "target"), "t");
    assert_int_equal(symlink(fx_path(f, f->out, "target"),
                             fx_path(f, f->mdir, ".rssub-tmp.link")), 0);
    fx_write_file(fx_path(f, f->mdir, "d/.rssub-tmp.AAAAAA"), "stale");

    f->m = fx_open(f->mdir, NULL);
    struct walked w = { .m = f->m };
    assert_int_equal(mirror_walk(f->m, on_file, &w), 0);
    assert_int_equal(w.n, 1);                    /* d/x only */
    size_t removed = 0;
    assert_int_equal(mirror_sweep_temps(f->m, &removed), 0);
    assert_int_equal(removed, 3);
    assert_int_equal(tu_count_entries(fx_path(f, f->mdir, "d"), NULL), 1);
    assert_int_equal(tu_count_entries(fx_path(f, f->mdir, "e"), NULL), 0);
    assert_true(fx_exists(fx_path(f, f->mdir, ".rssub-tmp.dir")));
    assert_true(fx_exists(fx_path(f, f->mdir, ".rssub-tmp.link")));
    assert_true(fx_exists(fx_path(f, f->mdir,
                                  ".rssub-attic/.rssub-tmp.keep")));
    assert_string_equal(tu_read_str(fx_path(f, f->out, "target")), "t");
    assert_int_equal(mirror_sweep_temps(f->m, NULL), 0);
}

/* mirror/mtime: the commit sets the given mtime (microseconds kept, also
 * before 1970), and leaves the current time for RS_TIME_NONE. */
static void
test_mtime(void **state)
{
    struct fx *f = *state;
    rs_time_t t;
    assert_int_equal(rs_time_parse("2013-01-03T09:00:00.5Z", 22, &t), 0);
    assert_int_equal(fx_put(f->m, "t1", "x", t), 0);
    struct stat st;
    assert_int_equal(mirror_stat(f->m, "t1", &st), 0);
    assert_int_equal(st.st_mtim.tv_sec, 1357203600);
    assert_int_equal(st.st_mtim.tv_nsec, 500000000);
    assert_int_equal(rs_time_parse("1960-06-01T00:00:00.25Z", 23, &t), 0);
    assert_int_equal(fx_put(f->m, "t2", "x", t), 0);
    assert_int_equal(mirror_stat(f->m, "t2", &st), 0);
    assert_int_equal((long long)st.st_mtim.tv_sec * 1000000 +
                         st.st_mtim.tv_nsec / 1000, t);
    time_t before = time(NULL);
    assert_int_equal(fx_put(f->m, "t3", "x", RS_TIME_NONE), 0);
    assert_int_equal(mirror_stat(f->m, "t3", &st), 0);
    assert_true(st.st_mtim.tv_sec >= before - 1);
}

/* mirror/disk_full: a write failing for lack of room (EFBIG under
 * RLIMIT_FSIZE stands in for ENOSPC) is reported precisely, removes the
 * temp at once, fails the commit and leaves the old file intact. */
static void
test_disk_full(void **state)
{
    struct fx *f = *state;
    assert_int_equal(fx_put(f->m, "big", "old", RS_TIME_NONE), 0);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 64 * 1024;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    static char chunk[48 * 1024];
    memset(chunk, 'z', sizeof(chunk));
    struct mirror_file *mf;
    assert_int_equal(mirror_begin(f->m, "big", &mf), 0);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc1 = mirror_write(mf, chunk, sizeof(chunk));
    int rc2 = mirror_write(mf, chunk, sizeof(chunk));
    int rc3 = mirror_write(mf, "x", 1);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(rc1, 0);
    assert_int_equal(rc2, RS_EIO);
    assert_int_equal(rc3, RS_EIO);
    assert_int_equal(mirror_errno(f->m), EFBIG);
    assert_non_null(strstr(mirror_errstr(f->m),
                           "big: write: EFBIG: File too large"));
    assert_int_equal(tu_count_entries(f->mdir, MIRROR_TMP_PREFIX), 0);
    assert_int_equal(mirror_commit(mf, RS_TIME_NONE), RS_EIO);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "big")), "old");
    assert_int_equal(tu_count_entries(f->mdir, NULL), 1);

    /* abort after a failed write is fine as well */
    assert_int_equal(mirror_begin(f->m, "big", &mf), 0);
    lim.rlim_cur = 0;
    prev = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    rc1 = mirror_write(mf, "y", 1);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(rc1, RS_EIO);
    mirror_abort(mf);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "big")), "old");
    assert_int_equal(tu_count_entries(f->mdir, NULL), 1);
}

/* mirror/many_files: 2,000 files in one directory and files spread over
 * more directories than the fd cache holds are all written and found. */
static void
test_many_files(void **state)
{
    struct fx *f = *state;
    struct mirror_opts o = { .fsync = MIRROR_FSYNC_NONE };
    struct mirror *m = fx_open(f->mdir, &o);
    char rel[64], text[64];
    for (int i = 0; i < 2000; i++) {
        snprintf(rel, sizeof(rel), "many/f%04d.txt", i);
        snprintf(text, sizeof(text), "file %d", i);
        assert_int_equal(fx_put(m, rel, text, RS_TIME_NONE), 0);
    }
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 40; i++) {
            snprintf(rel, sizeof(rel), "s%d/t%d/u%d", i % 5, i, round);
            assert_int_equal(fx_put(m, rel, "v", RS_TIME_NONE), 0);
        }
    assert_int_equal(tu_count_entries(fx_path(f, f->mdir, "many"), NULL), 2000);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "many/f1234.txt")),
                        "file 1234");
    assert_int_equal(tu_count_entries(fx_path(f, f->mdir, "s3/t8"), NULL), 2);
    int fd;
    assert_int_equal(mirror_open_read(m, "many/f0007.txt", &fd), 0);
    char buf[16] = { 0 };
    assert_int_equal(read(fd, buf, sizeof(buf) - 1), 6);
    assert_string_equal(buf, "file 7");
    close(fd);
    for (int i = 0; i < 2000; i++) {
        snprintf(rel, sizeof(rel), "many/f%04d.txt", i);
        assert_int_equal(mirror_remove(m, rel), 0);
    }
    assert_false(fx_exists(fx_path(f, f->mdir, "many")));
    mirror_close(m);
}

/* mirror/held_past_eviction: files begun in more directories than the fd
 * cache holds, all open at once, are committed into their own directories
 * (the cache evicted theirs meanwhile); one whose directory was removed
 * and made again behind our back fails, its temp gone with it. No fd is
 * left once they are done and the mirror is closed. */
static void
test_held_past_eviction(void **state)
{
    struct fx *f = *state;
    int fds = fx_fds();
    struct mirror *m = fx_open(f->mdir, NULL);
    struct mirror_file *mf[24];
    char rel[64];
    for (int i = 0; i < 24; i++) {
        snprintf(rel, sizeof(rel), "e%02d/x/f.txt", i);
        assert_int_equal(mirror_begin(m, rel, &mf[i]), 0);
        assert_int_equal(mirror_write(mf[i], rel, strlen(rel)), 0);
    }
    tu_rmtree(fx_path(f, f->mdir, "e00"));
    assert_int_equal(mkdir(fx_path(f, f->mdir, "e00"), 0755), 0);
    assert_int_equal(mkdir(fx_path(f, f->mdir, "e00/x"), 0755), 0);
    assert_int_not_equal(mirror_commit(mf[0], RS_TIME_NONE), 0);
    assert_int_equal(tu_count_entries(fx_path(f, f->mdir, "e00/x"), NULL), 0);
    for (int i = 1; i < 24; i++) {
        assert_int_equal(mirror_commit(mf[i], RS_TIME_NONE), 0);
        snprintf(rel, sizeof(rel), "e%02d/x/f.txt", i);
        assert_string_equal(tu_read_str(fx_path(f, f->mdir, rel)), rel);
    }
    mirror_close(m);
    assert_int_equal(fx_fds(), fds);
}

/* mirror/external_changes: a cached directory removed behind our back is
 * created again on the next write; replaced by a symlink it is refused,
 * not followed. */
static void
test_external_changes(void **state)
{
    struct fx *f = *state;
    assert_int_equal(fx_put(f->m, "c/x", "1", RS_TIME_NONE), 0);
    assert_int_equal(fx_put(f->m, "c/d/y", "1", RS_TIME_NONE), 0);
    tu_rmtree(fx_path(f, f->mdir, "c"));
    assert_int_equal(fx_put(f->m, "c/x", "2", RS_TIME_NONE), 0);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "c/x")), "2");
    struct stat st;
    assert_int_equal(mirror_stat(f->m, "c/x", &st), 0);
    tu_rmtree(fx_path(f, f->mdir, "c"));
    assert_int_equal(mirror_stat(f->m, "c/x", &st), RS_ENOTFOUND);
    assert_int_equal(fx_put(f->m, "c/d/y", "2", RS_TIME_NONE), 0);
    /* a dead cached ancestor ("u", cached before "u/v") of a new
     * directory is noticed as well (a fresh mirror: known cache order) */
    struct mirror *m2 = fx_open(f->mdir, NULL);
    assert_int_equal(fx_put(m2, "u/x", "3", RS_TIME_NONE), 0);
    assert_int_equal(fx_put(m2, "u/v/y", "3", RS_TIME_NONE), 0);
    tu_rmtree(fx_path(f, f->mdir, "u"));
    assert_int_equal(fx_put(m2, "u/w/z", "3", RS_TIME_NONE), 0);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "u/w/z")), "3");
    assert_int_equal(fx_put(m2, "u/v/y", "4", RS_TIME_NONE), 0);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "u/v/y")), "4");
    mirror_close(m2);
    tu_rmtree(fx_path(f, f->mdir, "c"));
    assert_int_equal(symlink(f->out, fx_path(f, f->mdir, "c")), 0);
    assert_int_equal(fx_put(f->m, "c/z", "evil", RS_TIME_NONE), RS_EDENIED);
    assert_int_equal(fx_put(f->m, "c/d/z", "evil", RS_TIME_NONE),
                     RS_EDENIED);
    assert_int_equal(tu_count_entries(f->out, NULL), 0);
}

/* mirror/open_read: a regular file opens (blocking, close-on-exec); a FIFO
 * is refused without hanging, a directory refused, a missing file is
 * RS_ENOTFOUND. */
static void
test_open_read(void **state)
{
    struct fx *f = *state;
    assert_int_equal(fx_put(f->m, "r/f", "data", RS_TIME_NONE), 0);
    int fd = -1;
    assert_int_equal(mirror_open_read(f->m, "r/f", &fd), 0);
    assert_true(fd >= 0);
    assert_int_equal(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    close(fd);
    assert_int_equal(mkfifo(fx_path(f, f->mdir, "r/fifo"), 0644), 0);
    assert_int_equal(mirror_open_read(f->m, "r/fifo", &fd), RS_EINVAL);
    assert_int_equal(fd, -1);
    assert_non_null(strstr(mirror_errstr(f->m), "not a regular file"));
    assert_int_equal(mirror_open_read(f->m, "r", &fd), RS_EINVAL);
    assert_int_equal(mirror_open_read(f->m, "r/none", &fd), RS_ENOTFOUND);
    assert_int_equal(mirror_open_read(f->m, "none/none", &fd), RS_ENOTFOUND);
}

/* mirror/alloc_failures: every allocation failing in turn is RS_ENOMEM
 * (or NULL from open), leaves no temp, no leak, and the old content. */
static void
test_alloc_failures(void **state)
{
    struct fx *f = *state;
    assert_int_equal(fx_put(f->m, "p/q", "old", RS_TIME_NONE), 0);
    bool done = false;
    for (unsigned long n = 1; !done && n < 100; n++) {
        char err[256];
        struct mirror_opts o = { .attic = f->attic };
        tu_alloc_fail_at(n);
        struct mirror *m = mirror_open(f->mdir, &o, err, sizeof(err));
        int rc = m != NULL ? 0 : RS_ENOMEM;
        if (m == NULL)
            assert_string_equal(err, "out of memory");
        if (rc == 0)
            rc = fx_put(m, "p/q", "new", RS_TIME_NONE);
        if (rc == 0)
            rc = mirror_remove(m, "p/q");
        struct walked w = { .m = m };
        if (rc == 0)
            rc = mirror_walk(m, on_file, &w);
        size_t removed;
        if (rc == 0)
            rc = mirror_sweep_temps(m, &removed);
        unsigned long seen = tu_alloc_count();
        tu_alloc_fail_at(0);
        if (rc == 0) {
            assert_true(seen < n);
            assert_string_equal(tu_read_str(fx_path(f, f->attic, "p/q")), "new");
            done = true;
        } else {
            assert_int_equal(rc, RS_ENOMEM);
            /* old, new, or moved to the attic: never half of anything */
            const char *now = tu_read_str(fx_path(f, f->mdir, "p/q"));
            assert_true(now == NULL || strcmp(now, "old") == 0 ||
                        strcmp(now, "new") == 0);
        }
        assert_int_equal(tu_count_entries(fx_path(f, f->mdir, "p"),
                                  MIRROR_TMP_PREFIX) > 0, false);
        mirror_close(m);
    }
    assert_true(done);
}

/* mirror/twin: a twin writes into the same tree with the same options
 * (the attic), has its own last error, outlives the handle it was made
 * from, leaks no descriptor, and is confined like it (a symlink on the
 * way is refused). */
static void
test_twin(void **state)
{
    struct fx *f = *state;
    char err[512];
    struct mirror_opts o = { .attic = f->attic };
    struct mirror *m = fx_open(f->mdir, &o);
    int fds = fx_fds();
    struct mirror *t = mirror_twin(m, err, sizeof(err));
    assert_non_null(t);
    assert_string_equal(mirror_root(t), mirror_root(m));
    assert_int_equal(fx_put(t, "tw/a.txt", "from the twin", RS_TIME_NONE), 0);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "tw/a.txt")),
                        "from the twin");
    /* the attic is the twin's too */
    assert_int_equal(mirror_remove(t, "tw/a.txt"), 0);
    assert_string_equal(tu_read_str(fx_path(f, f->attic, "tw/a.txt")),
                        "from the twin");
    /* errors are per handle */
    assert_int_equal(symlink(f->out, fx_path(f, f->mdir, "link")), 0);
    assert_int_equal(fx_put(t, "link/x", "no", RS_TIME_NONE), RS_EDENIED);
    assert_true(strstr(mirror_errstr(t), "symlink") != NULL);
    assert_string_equal(mirror_errstr(m), "");
    assert_int_equal(tu_count_entries(f->out, NULL), 0);
    /* the twin outlives its origin */
    mirror_close(m);
    assert_int_equal(fx_put(t, "tw/b.txt", "later", RS_TIME_NONE), 0);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "tw/b.txt")), "later");
    mirror_close(t);
    assert_true(fx_fds() < fds);
}

/* What a stage's publish left out: "rel=why;" each, in the order told. */
struct fx_unpub {
    char text[4096];
    int n;
};

static void
fx_on_unpub(void *ud, const char *rel, const char *why)
{
    struct fx_unpub *u = ud;
    size_t len = strlen(u->text);
    snprintf(u->text + len, sizeof(u->text) - len, "%s=%s;", rel, why);
    u->n++;
}

/* mirror/stage: files written in a stage under their final names (on
 * the stage's twin too) are invisible in the mirror until published;
 * publishing moves a directory the mirror lacks whole, merges into one
 * it has, replaces a file as a commit does, refuses what a commit would
 * (a directory at a file's path, a file or symlink where a directory is
 * needed) and says so for each file it drops, and leaves no stage and no
 * descriptor behind. A path given twice in one stage is refused. */
static void
test_stage(void **state)
{
    struct fx *f = *state;
    char err[512];
    struct fx_unpub u = { .n = 0 };

    assert_int_equal(fx_put(f->m, "old/keep.txt", "kept", RS_TIME_NONE), 0);
    assert_int_equal(fx_put(f->m, "old/over.txt", "old", RS_TIME_NONE), 0);
    assert_int_equal(fx_put(f->m, "isdir/x", "a dir here", RS_TIME_NONE), 0);
    assert_int_equal(fx_put(f->m, "afile", "a file here", RS_TIME_NONE), 0);
    assert_int_equal(symlink(f->out, fx_path(f, f->mdir, "link")), 0);
    int fds = fx_fds();   /* with the mirror's cached directories */

    struct mirror *st = mirror_stage_new(f->m, err, sizeof(err));
    assert_non_null(st);
    struct mirror *tw = mirror_twin(st, err, sizeof(err));
    assert_non_null(tw);
    assert_int_equal(tu_count_entries(f->mdir, MIRROR_STAGE_PREFIX), 1);
    assert_int_equal(fx_put(st, "new/a/1.txt", "one", 1000000), 0);
    assert_int_equal(fx_put(tw, "new/a/2.txt", "two", RS_TIME_NONE), 0);
    assert_int_equal(fx_put(st, "old/over.txt", "new", RS_TIME_NONE), 0);
    assert_int_equal(fx_put(tw, "old/add.txt", "added", RS_TIME_NONE), 0);
    assert_int_equal(fx_put(st, "isdir", "a file", RS_TIME_NONE), 0);
    assert_int_equal(fx_put(st, "afile/y", "under a file", RS_TIME_NONE), 0);
    assert_int_equal(fx_put(tw, "afile/z/w", "deeper", RS_TIME_NONE), 0);
    assert_int_equal(fx_put(st, "link/evil", "through", RS_TIME_NONE), 0);
    /* twice: refused, the first kept */
    assert_int_equal(fx_put(tw, "new/a/1.txt", "again", RS_TIME_NONE),
                     RS_EIO);
    assert_true(strstr(mirror_errstr(tw), "EEXIST") != NULL);
    /* nothing visible yet, no temp in the stage */
    assert_null(tu_read_str(fx_path(f, f->mdir, "new/a/1.txt")));
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "old/over.txt")), "old");
    mirror_close(tw);

    assert_int_equal(mirror_stage_publish(f->m, st, fx_on_unpub, &u), 0);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "new/a/1.txt")), "one");
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "new/a/2.txt")), "two");
    struct stat sb;
    assert_int_equal(stat(fx_path(f, f->mdir, "new/a/1.txt"), &sb), 0);
    assert_int_equal(sb.st_mtime, 1);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "old/over.txt")), "new");
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "old/add.txt")),
                        "added");
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "old/keep.txt")),
                        "kept");
    /* refused, each file named, the mirror as it was */
    assert_int_equal(u.n, 4);
    assert_non_null(strstr(u.text, "isdir=is a directory;"));
    assert_non_null(strstr(u.text, "afile/y=a file where a directory is "
                                   "needed;"));
    assert_non_null(strstr(u.text, "afile/z/w=a file where a directory is "
                                   "needed;"));
    assert_non_null(strstr(u.text, "link/evil=a symlink on the way"));
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "isdir/x")),
                        "a dir here");
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "afile")),
                        "a file here");
    assert_int_equal(tu_count_entries(f->out, NULL), 0);
    assert_int_equal(tu_count_entries(f->mdir, MIRROR_STAGE_PREFIX), 0);
    assert_int_equal(tu_count_entries(f->mdir, MIRROR_TMP_PREFIX), 0);
    assert_true(fx_fds() <= fds);
    /* the mirror's own handle sees what was published */
    assert_int_equal(fx_put(f->m, "new/a/3.txt", "three", RS_TIME_NONE), 0);
    fds = fx_fds();

    /* in a stage an aborted file leaves nothing behind (its directory
     * looked up again: a stage keeps no directory fd per file), and
     * fsync "full" works there */
    st = mirror_stage_new(f->m, err, sizeof(err));
    assert_non_null(st);
    struct mirror_file *mf = NULL;
    assert_int_equal(mirror_begin(st, "ab/x/aborted.txt", &mf), 0);
    assert_int_equal(mirror_write(mf, "half", 4), 0);
    mirror_abort(mf);
    assert_int_equal(mirror_begin(st, "ab/x/kept.txt", &mf), 0);
    assert_int_equal(mirror_write(mf, "kept", 4), 0);
    assert_int_equal(mirror_commit(mf, RS_TIME_NONE), 0);
    assert_int_equal(mirror_stage_publish(f->m, st, fx_on_unpub, &u), 0);
    assert_null(tu_read_str(fx_path(f, f->mdir, "ab/x/aborted.txt")));
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "ab/x/kept.txt")),
                        "kept");
    assert_int_equal(tu_count_entries(fx_path(f, f->mdir, "ab/x"), NULL), 1);
    struct mirror_opts full = { .fsync = MIRROR_FSYNC_FULL };
    struct mirror *fm = fx_open(f->mdir, &full);
    st = mirror_stage_new(fm, err, sizeof(err));
    assert_non_null(st);
    assert_int_equal(fx_put(st, "full/a/b.txt", "synced", RS_TIME_NONE), 0);
    assert_int_equal(mirror_stage_publish(fm, st, fx_on_unpub, &u), 0);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "full/a/b.txt")),
                        "synced");
    mirror_close(fm);
    fds = fx_fds();

    /* a stage closed unpublished takes what it holds with it */
    st = mirror_stage_new(f->m, err, sizeof(err));
    assert_non_null(st);
    assert_int_equal(fx_put(st, "gone/g.txt", "never seen", RS_TIME_NONE),
                     0);
    mirror_close(st);
    assert_null(tu_read_str(fx_path(f, f->mdir, "gone/g.txt")));
    assert_int_equal(tu_count_entries(f->mdir, MIRROR_STAGE_PREFIX), 0);
    /* not a stage */
    assert_int_equal(mirror_stage_publish(f->m, NULL, NULL, NULL),
                     RS_EINVAL);
    assert_true(fx_fds() <= fds);
}

/* mirror/stage_syncfs: in a stage, "file" and "full" fsync nothing file
 * by file (nor, under "full", each directory made); the publish makes it
 * all durable with one syncfs before anything is visible, then "full"
 * still fsyncs the directories renamed into. Outside a stage every commit
 * is fsynced as before. A syncfs that fails publishes nothing: RS_EIO,
 * the error names it, the stage is gone with what it held. */
static void
test_stage_syncfs(void **state)
{
    struct fx *f = *state;
    char err[512], rel[64];
    static const enum mirror_fsync pol[] = { MIRROR_FSYNC_NONE,
                                             MIRROR_FSYNC_FILE,
                                             MIRROR_FSYNC_FULL };
    for (size_t k = 0; k < sizeof(pol) / sizeof(pol[0]); k++) {
        struct mirror_opts o = { .fsync = pol[k] };
        struct mirror *m = fx_open(f->mdir, &o);
        struct mirror *st = mirror_stage_new(m, err, sizeof(err));
        assert_non_null(st);
        struct mirror *tw = mirror_twin(st, err, sizeof(err));
        assert_non_null(tw);
        fsyncs = syncfss = 0;
        for (int i = 0; i < 40; i++) {
            snprintf(rel, sizeof(rel), "p%zu/d%d/f%d.txt", k, i % 4, i);
            assert_int_equal(fx_put(i % 2 ? tw : st, rel, "staged",
                                    RS_TIME_NONE), 0);
        }
        mirror_close(tw);
        assert_int_equal(fsyncs, 0);
        assert_int_equal(syncfss, 0);
        assert_int_equal(mirror_stage_publish(m, st, NULL, NULL), 0);
        assert_int_equal(syncfss, pol[k] == MIRROR_FSYNC_NONE ? 0 : 1);
        /* "full": the root, renamed into */
        assert_int_equal(fsyncs, pol[k] == MIRROR_FSYNC_FULL ? 1 : 0);
        snprintf(rel, sizeof(rel), "p%zu/d3/f39.txt", k);
        assert_string_equal(tu_read_str(fx_path(f, f->mdir, rel)), "staged");

        /* outside a stage: a commit is an fsync (and "full" its
         * directory's) */
        fsyncs = 0;
        snprintf(rel, sizeof(rel), "p%zu/d0/f0.txt", k);
        assert_int_equal(fx_put(m, rel, "direct", RS_TIME_NONE), 0);
        assert_int_equal(fsyncs, (unsigned)k);
        assert_int_equal(syncfss, pol[k] == MIRROR_FSYNC_NONE ? 0 : 1);
        mirror_close(m);
    }

    /* the syncfs fails: nothing of the stage lands, the mirror as it was */
    struct mirror_opts o = { .fsync = MIRROR_FSYNC_FILE };
    struct mirror *m = fx_open(f->mdir, &o);
    assert_int_equal(fx_put(m, "p1/d0/f0.txt", "before", RS_TIME_NONE), 0);
    int fds = fx_fds();
    struct mirror *st = mirror_stage_new(m, err, sizeof(err));
    assert_non_null(st);
    assert_int_equal(fx_put(st, "p1/d0/f0.txt", "lost", RS_TIME_NONE), 0);
    assert_int_equal(fx_put(st, "fresh/x.txt", "lost", RS_TIME_NONE), 0);
    syncfs_errno = EIO;
    assert_int_equal(mirror_stage_publish(m, st, NULL, NULL), RS_EIO);
    syncfs_errno = 0;
    assert_non_null(strstr(mirror_errstr(m), ": syncfs: EIO"));
    assert_int_equal(mirror_errno(m), EIO);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "p1/d0/f0.txt")),
                        "before");
    assert_null(tu_read_str(fx_path(f, f->mdir, "fresh/x.txt")));
    assert_int_equal(tu_count_entries(f->mdir, MIRROR_STAGE_PREFIX), 0);
    assert_true(fx_fds() <= fds);
    mirror_close(m);
}

/* mirror/prepare: mirror_prepare does a commit's mtime and fsync ahead of
 * it, once; the commit then only renames (no second fsync, its own mtime
 * ignored). An fsync failing there fails the commit, the old file kept.
 * Under "full" it also renames and fsyncs the directory. Under "none",
 * and in a stage, commits do not fsync (mirror_syncs). */
static void
test_prepare(void **state)
{
    struct fx *f = *state;
    struct mirror_opts o = { .fsync = MIRROR_FSYNC_FILE };
    struct mirror *m = fx_open(f->mdir, &o);
    struct mirror_file *mf = NULL;
    struct stat sb;
    char err[512];

    assert_true(mirror_syncs(m));
    assert_int_equal(mirror_begin(m, "p/a.txt", &mf), 0);
    assert_int_equal(mirror_write(mf, "new", 3), 0);
    fsyncs = 0;
    mirror_prepare(mf, 2000000);
    mirror_prepare(mf, 3000000);          /* once */
    assert_int_equal(fsyncs, 1);
    assert_null(tu_read_str(fx_path(f, f->mdir, "p/a.txt")));
    assert_int_equal(mirror_commit(mf, 5000000), 0);
    assert_int_equal(fsyncs, 1);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "p/a.txt")), "new");
    assert_int_equal(stat(fx_path(f, f->mdir, "p/a.txt"), &sb), 0);
    assert_int_equal(sb.st_mtime, 2);

    assert_int_equal(fx_put(m, "p/b.txt", "old", RS_TIME_NONE), 0);
    assert_int_equal(mirror_begin(m, "p/b.txt", &mf), 0);
    assert_int_equal(mirror_write(mf, "newer", 5), 0);
    fsync_errno = EIO;
    mirror_prepare(mf, RS_TIME_NONE);
    fsync_errno = 0;
    assert_int_equal(mirror_commit(mf, RS_TIME_NONE), RS_EIO);
    assert_non_null(strstr(mirror_errstr(m), "p/b.txt: fsync: EIO"));
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "p/b.txt")), "old");
    assert_int_equal(tu_count_entries(fx_path(f, f->mdir, "p"), MIRROR_TMP_PREFIX), 0);
    mirror_close(m);

    o.fsync = MIRROR_FSYNC_NONE;
    m = fx_open(f->mdir, &o);
    assert_false(mirror_syncs(m));
    assert_int_equal(mirror_begin(m, "p/c.txt", &mf), 0);
    fsyncs = 0;
    mirror_prepare(mf, RS_TIME_NONE);
    assert_int_equal(mirror_commit(mf, RS_TIME_NONE), 0);
    assert_int_equal(fsyncs, 0);
    mirror_close(m);

    /* under full the prepare also renames and fsyncs the directory (it
     * waits on the disk too): in place before the commit, which then
     * fsyncs nothing */
    o.fsync = MIRROR_FSYNC_FULL;
    m = fx_open(f->mdir, &o);
    assert_int_equal(fx_put(m, "p/d.txt", "old", RS_TIME_NONE), 0);
    assert_int_equal(mirror_begin(m, "p/d.txt", &mf), 0);
    assert_int_equal(mirror_write(mf, "full", 4), 0);
    fsyncs = 0;
    mirror_prepare(mf, 7000000);
    assert_int_equal(fsyncs, 2);
    assert_true(mirror_file_placed(mf));
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "p/d.txt")), "full");
    assert_int_equal(mirror_commit(mf, RS_TIME_NONE), 0);
    assert_int_equal(fsyncs, 2);
    assert_int_equal(stat(fx_path(f, f->mdir, "p/d.txt"), &sb), 0);
    assert_int_equal(sb.st_mtime, 7);
    /* its file's fsync failing: not renamed, the old one kept */
    assert_int_equal(mirror_begin(m, "p/d.txt", &mf), 0);
    assert_int_equal(mirror_write(mf, "lost", 4), 0);
    fsync_errno = EIO;
    mirror_prepare(mf, RS_TIME_NONE);
    fsync_errno = 0;
    assert_false(mirror_file_placed(mf));
    assert_int_equal(mirror_commit(mf, RS_TIME_NONE), RS_EIO);
    assert_non_null(strstr(mirror_errstr(m), "p/d.txt: fsync: EIO"));
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "p/d.txt")), "full");
    assert_int_equal(tu_count_entries(fx_path(f, f->mdir, "p"), MIRROR_TMP_PREFIX), 0);
    /* ... and dropped instead (a newer change came): no temp left */
    assert_int_equal(mirror_begin(m, "p/d.txt", &mf), 0);
    assert_int_equal(mirror_write(mf, "lost", 4), 0);
    fsync_errno = EIO;
    mirror_prepare(mf, RS_TIME_NONE);
    fsync_errno = 0;
    mirror_abort(mf);
    assert_string_equal(tu_read_str(fx_path(f, f->mdir, "p/d.txt")), "full");
    assert_int_equal(tu_count_entries(fx_path(f, f->mdir, "p"), MIRROR_TMP_PREFIX), 0);
    struct mirror *st = mirror_stage_new(m, err, sizeof(err));
    assert_non_null(st);
    assert_true(mirror_syncs(m));
    assert_false(mirror_syncs(st));
    mirror_close(st);
    mirror_close(m);
}

/* mirror/stage_swept: a stage a crash left (a tree in the root) goes at
 * the next sweep, with what it holds; a ".rssub-stage." name deeper down,
 * or a file of that name, is someone else's and stays. */
static void
test_stage_swept(void **state)
{
    struct fx *f = *state;
    char err[512];
    struct mirror *st = mirror_stage_new(f->m, err, sizeof(err));
    assert_non_null(st);
    assert_int_equal(fx_put(st, "a/b/c.txt", "left", RS_TIME_NONE), 0);
    /* a crash: the stage's handle is never closed, only its fds */
    assert_int_equal(mkdir(fx_path(f, f->mdir, "deep"), 0755), 0);
    assert_int_equal(mkdir(fx_path(f, f->mdir, "deep/.rssub-stage.AAAAAA"),
                           0755), 0);
    fx_write_file(fx_path(f, f->mdir, ".rssub-stage.BBBBBB"), "x");
    size_t removed = 0;
    assert_int_equal(mirror_sweep_temps(f->m, &removed), 0);
    assert_int_equal(removed, 1);
    assert_int_equal(tu_count_entries(f->mdir, ".rssub-stage."), 1);   /* the file */
    assert_int_equal(tu_count_entries(fx_path(f, f->mdir, "deep"), ".rssub-stage."),
                     1);
    assert_null(tu_read_str(fx_path(f, f->mdir, "a/b/c.txt")));
    /* closing the crashed handle now finds nothing to remove */
    mirror_close(st);
    assert_int_equal(tu_count_entries(f->mdir, ".rssub-stage."), 1);
}

/* mirror/lock: one writer per mirror directory: a second open of it (here
 * through a symlinked parent and a trailing '/') cannot lock it, and is
 * told this process holds it; twins share the lock; it goes at close;
 * nothing is written into the mirror for it. */
static void
test_lock(void **state)
{
    struct fx *f = *state;
    char link[4300], spelled[4400];
    long holder = -1;

    assert_int_equal(mirror_lock(f->m, &holder), 0);
    assert_int_equal(holder, 0);
    snprintf(link, sizeof(link), "%s/link", f->base);
    assert_int_equal(symlink(f->base, link), 0);
    snprintf(spelled, sizeof(spelled), "%s/m/", link);
    struct mirror *o = fx_open(spelled, NULL);
    assert_int_equal(mirror_lock(o, &holder), RS_ESTATE);
    assert_non_null(strstr(mirror_errstr(o), "in use"));
    /* /proc/locks names the holder; our own pid is not taken for one */
    assert_int_equal(holder, 0);
    char err[512];
    struct mirror *t = mirror_twin(f->m, err, sizeof(err));
    assert_non_null(t);
    mirror_close(t);                  /* a twin's close keeps the lock */
    assert_int_equal(mirror_lock(o, NULL), RS_ESTATE);
    assert_int_equal(tu_count_entries(f->mdir, NULL), 0);
    mirror_close(f->m);
    f->m = NULL;
    assert_int_equal(mirror_lock(o, NULL), 0);
    mirror_close(o);
}

/* mirror/lock_other_process: a child's lock is refused here, naming the
 * child's pid. */
static void
test_lock_other_process(void **state)
{
    struct fx *f = *state;
    int p[2];
    char c;
    long holder = 0;

    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char err[512];
        struct mirror *m = mirror_open(f->mdir, NULL, err, sizeof(err));
        c = m != NULL && mirror_lock(m, NULL) == 0 ? 'y' : 'n';
        (void)!write(p[1], &c, 1);
        for (;;)
            pause();                  /* holding it, until killed */
    }
    close(p[1]);
    assert_int_equal(read(p[0], &c, 1), 1);
    assert_int_equal(c, 'y');
    assert_int_equal(mirror_lock(f->m, &holder), RS_ESTATE);
    assert_int_equal(holder, (long)pid);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(p[0]);
    assert_int_equal(mirror_lock(f->m, &holder), 0);
}

/* mirror/check_root: the path still names the directory held; moved
 * away (RS_ENOTFOUND), replaced by another directory (RS_ESTATE), moved
 * back (0). */
static void
test_check_root(void **state)
{
    struct fx *f = *state;
    char moved[4300];

    assert_int_equal(mirror_check_root(f->m), 0);
    snprintf(moved, sizeof(moved), "%s/moved", f->base);
    assert_int_equal(rename(f->mdir, moved), 0);
    assert_int_equal(mirror_check_root(f->m), RS_ENOTFOUND);
    assert_non_null(strstr(mirror_errstr(f->m), "no longer exists"));
    assert_int_equal(mkdir(f->mdir, 0755), 0);
    assert_int_equal(mirror_check_root(f->m), RS_ESTATE);
    assert_int_equal(rmdir(f->mdir), 0);
    assert_int_equal(rename(moved, f->mdir), 0);
    assert_int_equal(mirror_check_root(f->m), 0);
}

/* mirror/no_create: a missing directory is refused, not made. */
static void
test_no_create(void **state)
{
    struct fx *f = *state;
    struct mirror_opts o = { .no_create = true };
    char err[512];

    assert_null(mirror_open(fx_path(f, f->base, "gone/m"), &o, err,
                            sizeof(err)));
    assert_non_null(strstr(err, "does not exist"));
    assert_false(fx_exists(fx_path(f, f->base, "gone")));
    struct mirror *m = mirror_open(f->mdir, &o, err, sizeof(err));
    assert_non_null(m);
    mirror_close(m);
}

#define TS(name, fn) { name, fn, fx_setup, fx_teardown, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TS("mirror/open", test_open),
        TS("mirror/write_commit", test_write_commit),
        TS("mirror/abort", test_abort),
        TS("mirror/bad_rel", test_bad_rel),
        TS("mirror/symlink_on_the_way", test_symlink_on_the_way),
        TS("mirror/final_symlink", test_final_symlink),
        TS("mirror/directory_at_name", test_directory_at_name),
        TS("mirror/remove_prune", test_remove_prune),
        TS("mirror/attic", test_attic),
        TS("mirror/attic_checks", test_attic_checks),
        TS("mirror/walk", test_walk),
        TS("mirror/sweep_after_crash", test_sweep_after_crash),
        TS("mirror/mtime", test_mtime),
        TS("mirror/disk_full", test_disk_full),
        TS("mirror/many_files", test_many_files),
        TS("mirror/held_past_eviction", test_held_past_eviction),
        TS("mirror/external_changes", test_external_changes),
        TS("mirror/open_read", test_open_read),
        TS("mirror/alloc_failures", test_alloc_failures),
        TS("mirror/twin", test_twin),
        TS("mirror/stage", test_stage),
        TS("mirror/stage_syncfs", test_stage_syncfs),
        TS("mirror/prepare", test_prepare),
        TS("mirror/stage_swept", test_stage_swept),
        TS("mirror/lock", test_lock),
        TS("mirror/lock_other_process", test_lock_other_process),
        TS("mirror/check_root", test_check_root),
        TS("mirror/no_create", test_no_create),
    };
    return cmocka_run_group_tests_name("sub_mirror", tests, NULL, NULL);
}
