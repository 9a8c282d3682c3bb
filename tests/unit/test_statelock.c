/* test_statelock.c - common/statelock.c: the writer's lock beside a state
 * database, taken by a real second process (flock locks are per open file
 * description: a second take in the same process would also be refused,
 * but a child is what a second daemon is). */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rs_statelock.h"

/* In a child: take the lock of path; exit 0 taken, 1 refused in use, 2
 * other. */
static int
child_take(const char *path)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char err[512];
        int fd;
        int rc = rs_statelock_take(path, "tester", &fd, err, sizeof(err));
        if (rc == 0)
            _exit(0);
        _exit(rc == RS_ESTATE && strstr(err, "in use by another tester") &&
                      fd == -1
                  ? 1
                  : 2);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* statelock/one_writer: taken, a second process is refused with a
 * message naming the program; released, the second takes it. */
static void
test_one_writer(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp();
    char path[4200], err[512];
    snprintf(path, sizeof(path), "%s/state.db", dir);
    int fd;
    assert_int_equal(rs_statelock_take(path, "tester", &fd, err, sizeof(err)),
                     0);
    assert_true(fd >= 0);
    struct stat sb;
    char lp[4300];
    snprintf(lp, sizeof(lp), "%s.lock", path);
    assert_int_equal(stat(lp, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(child_take(path), 1);
    close(fd);
    assert_int_equal(child_take(path), 0);
    tu_rmtree(dir);
    free(dir);
}

/* statelock/unwritable: a lock that cannot be made is RS_EIO naming the
 * lock file, and no descriptor. */
static void
test_unwritable(void **state)
{
    (void)state;
    char err[512];
    int fd = 7;
    assert_int_equal(rs_statelock_take("/nonexistent-dir/state.db", "tester",
                                       &fd, err, sizeof(err)),
                     RS_EIO);
    assert_int_equal(fd, -1);
    assert_non_null(strstr(err, "/nonexistent-dir/state.db.lock"));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_writer),
        cmocka_unit_test(test_unwritable),
    };
    return cmocka_run_group_tests_name("statelock", tests, NULL, NULL);
}
