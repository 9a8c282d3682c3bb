/*
 * test_sub_stray.c - stray_scan against a real ledger (SQLite) and a real
 * mirror directory: which files are strays, what is never visited, the
 * ctime cut-off, removal from the callback, and ledger_writer_pid.
 */
#include "testutil.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ledger.h"
#include "mirror.h"
#include "rs_alloc.h"
#include "stray.h"

struct fx {
    char *dir;
    char db[4096], root[4096];
    struct ledger *l;
    struct mirror *m;
    char seen[16][256];       /* strays handed to the callback, in order */
    int nseen;
    bool remove;
};

static void
put_file(struct fx *f, const char *rel, const char *body)
{
    char path[8192], dir[8192];
    snprintf(path, sizeof(path), "%s/%s", f->root, rel);
    snprintf(dir, sizeof(dir), "%s", path);
    for (char *p = dir + strlen(f->root) + 1; (p = strchr(p, '/')) != NULL;
         p++) {
        *p = '\0';
        (void)mkdir(dir, 0755);
        *p = '/';
    }
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(body, fp);
    assert_int_equal(fclose(fp), 0);
}

static void
put_row(struct fx *f, const char *uri, const char *path, bool deleted)
{
    struct ledger_res r = { 0 };
    r.uri = uri;
    r.path = path;
    r.lastmod = RS_TIME_NONE;
    r.change_dt = RS_TIME_NONE;
    r.length = -1;
    r.deleted = deleted;
    assert_int_equal(ledger_begin(f->l), 0);
    assert_int_equal(ledger_res_put(f->l, &r), 0);
    assert_int_equal(ledger_commit(f->l), 0);
}

static int
on_stray(void *ud, const char *rel, const struct stat *st)
{
    struct fx *f = ud;
    assert_true(S_ISREG(st->st_mode));
    assert_true(f->nseen < 16);
    snprintf(f->seen[f->nseen++], sizeof(f->seen[0]), "%s", rel);
    if (f->remove)
        assert_int_equal(mirror_remove(f->m, rel), 0);
    return 0;
}

static bool
seen(const struct fx *f, const char *rel)
{
    for (int i = 0; i < f->nseen; i++)
        if (strcmp(f->seen[i], rel) == 0)
            return true;
    return false;
}

static int
setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    char err[256];
    assert_non_null(f);
    f->dir = tu_mkdtemp();
    snprintf(f->db, sizeof(f->db), "%s/state.db", f->dir);
    snprintf(f->root, sizeof(f->root), "%s/mirror", f->dir);
    f->l = ledger_open(f->db, 0, err, sizeof(err));
    if (f->l == NULL)
        fail_msg("ledger_open: %s", err);
    f->m = mirror_open(f->root, NULL, err, sizeof(err));
    if (f->m == NULL)
        fail_msg("mirror_open: %s", err);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    mirror_close(f->m);
    ledger_close(f->l);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* stray/which: files named by a live row are not strays; a file whose row
 * is a tombstone, or that no row names, is; temp files, the attic and
 * symlinks are never visited. */
static void
test_which(void **state)
{
    struct fx *f = *state;
    struct stray_stats st;
    char link[8192];

    put_row(f, "http://s/a.txt", "a.txt", false);
    put_row(f, "http://s/d/b.txt", "d/b.txt", false);
    put_row(f, "http://s/gone.txt", "gone.txt", true);
    put_row(f, "http://s/never", NULL, true);   /* a tombstone, no file */
    put_file(f, "a.txt", "a");
    put_file(f, "d/b.txt", "b");
    put_file(f, "gone.txt", "deleted at the Source, left here");
    put_file(f, "d/e/by-hand.txt", "mine");
    put_file(f, "d/.rssub-tmp.XXXXXX", "a write in progress");
    put_file(f, ".rssub-attic/old.txt", "moved away");
    snprintf(link, sizeof(link), "%s/link.txt", f->root);
    assert_int_equal(symlink("/etc/passwd", link), 0);

    assert_int_equal(stray_scan(f->l, f->m, RS_TIME_NONE, on_stray, f, &st),
                     0);
    assert_int_equal(f->nseen, 2);
    assert_true(seen(f, "gone.txt"));
    assert_true(seen(f, "d/e/by-hand.txt"));
    assert_int_equal(st.files, 4);
    assert_int_equal(st.strays, 2);
    assert_int_equal(st.recent, 0);
}

/* stray/recent: a file whose status changed at or after not_before is
 * counted, not judged; an older one is judged. */
static void
test_recent(void **state)
{
    struct fx *f = *state;
    struct stray_stats st;

    put_file(f, "old.txt", "x");
    sleep(1);   /* ctime has the file system's granularity */
    rs_time_t cut = rs_time_now();
    put_file(f, "new.txt", "y");
    assert_int_equal(stray_scan(f->l, f->m, cut, on_stray, f, &st), 0);
    assert_int_equal(f->nseen, 1);
    assert_string_equal(f->seen[0], "old.txt");
    assert_int_equal(st.strays, 1);
    assert_int_equal(st.recent, 1);
}

/* stray/remove: the callback may remove the stray it is given; the
 * directories it leaves empty go too; the next scan finds nothing. */
static void
test_remove(void **state)
{
    struct fx *f = *state;
    struct stray_stats st;
    char path[8192];
    struct stat sb;

    put_row(f, "http://s/keep.txt", "keep.txt", false);
    put_file(f, "keep.txt", "k");
    put_file(f, "x/y/z.txt", "z");
    put_file(f, "x/w.txt", "w");
    f->remove = true;
    assert_int_equal(stray_scan(f->l, f->m, RS_TIME_NONE, on_stray, f, &st),
                     0);
    assert_int_equal(st.strays, 2);
    snprintf(path, sizeof(path), "%s/x", f->root);
    assert_int_not_equal(lstat(path, &sb), 0);
    snprintf(path, sizeof(path), "%s/keep.txt", f->root);
    assert_int_equal(lstat(path, &sb), 0);
    f->nseen = 0;
    assert_int_equal(stray_scan(f->l, f->m, RS_TIME_NONE, on_stray, f, &st),
                     0);
    assert_int_equal(f->nseen, 0);
    assert_int_equal(st.files, 1);
}

/* stray/stop: a non-zero callback value stops the scan and is returned. */
static int
on_stop(void *ud, const char *rel, const struct stat *st)
{
    (void)ud;
    (void)rel;
    (void)st;
    return 42;
}

static void
test_stop(void **state)
{
    struct fx *f = *state;
    struct stray_stats st;

    put_file(f, "a.txt", "a");
    put_file(f, "b.txt", "b");
    assert_int_equal(stray_scan(f->l, f->m, RS_TIME_NONE, on_stop, NULL, &st),
                     42);
    assert_int_equal(st.strays, 1);
}

/* stray/writer_pid: our own open writer is not "another" writer; a live
 * process's pid in the lock file is reported, a dead one's is not. */
static void
test_writer_pid(void **state)
{
    struct fx *f = *state;
    char lock[8192], pid[32];

    assert_int_equal(ledger_writer_pid(f->db), 0);   /* it is us */
    snprintf(lock, sizeof(lock), "%s.lock", f->db);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        pause();
        _exit(0);
    }
    int fd = open(lock, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    int n = snprintf(pid, sizeof(pid), "%ld\n", (long)child);
    assert_int_equal(write(fd, pid, (size_t)n), n);
    assert_int_equal(ledger_writer_pid(f->db), (long)child);
    kill(child, SIGKILL);
    assert_int_equal(waitpid(child, NULL, 0), child);
    assert_int_equal(ledger_writer_pid(f->db), 0);   /* dead */
    assert_int_equal(ftruncate(fd, 0), 0);
    assert_int_equal(ledger_writer_pid(f->db), 0);   /* empty */
    close(fd);
    assert_int_equal(ledger_writer_pid("/nonexistent/state.db"), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_which, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_pid, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
