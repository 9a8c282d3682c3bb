/* test_tokenfile.c - secrets read from files (common/tokenfile.c): the
 * first line trimmed, tokens with white space, empty or over the limit
 * refused, files group or others may read refused unless allowed, a
 * missing file said by name, secret texts capped and NUL-free, and every
 * allocation failure of a text read reported. */
#include "testutil.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rs_tokenfile.h"

static char *
put(const char *dir, const char *name, const char *body, size_t len,
    mode_t mode)
{
    char *path = malloc(PATH_MAX);
    assert_non_null(path);
    snprintf(path, PATH_MAX, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, body, len), (ssize_t)len);
    close(fd);
    assert_int_equal(chmod(path, mode), 0);
    return path;
}

static int
setup(void **state)
{
    *state = tu_mkdtemp();
    return *state == NULL;
}

static int
teardown(void **state)
{
    tu_rmtree(*state);
    free(*state);
    return 0;
}

/* tokenfile/first_line_trimmed: spaces and tabs around the first line go,
 * CRLF ends it, later lines are ignored. */
static void
test_first_line(void **state)
{
    char buf[RS_TOKENFILE_MAX + 1], err[256];
    char *p = put(*state, "t", " \tabc.DEF-1 \r\nsecond line\n", 26, 0600);
    assert_int_equal(rs_tokenfile_read(p, false, buf, sizeof(buf), err,
                                       sizeof(err)), 0);
    assert_string_equal(buf, "abc.DEF-1");
    free(p);
}

/* tokenfile/bom_dropped: a UTF-8 byte order mark at the start (as some
 * editors write it) is not part of a token or a text: kept, the token
 * never matched (a 403 with the right token in hand). */
static void
test_bom(void **state)
{
    char buf[RS_TOKENFILE_MAX + 1], err[256], *t = NULL;
    size_t len = 0;
    char *p = put(*state, "b", "\xef\xbb\xbf" "admintok123\r\n", 16, 0600);
    assert_int_equal(rs_tokenfile_read(p, false, buf, sizeof(buf), err,
                                       sizeof(err)), 0);
    assert_string_equal(buf, "admintok123");
    assert_int_equal(rs_tokenfile_read_text(p, false, 100, &t, &len, err,
                                            sizeof(err)), 0);
    assert_string_equal(t, "admintok123\r\n");
    assert_int_equal(len, 13);
    rs_tokenfile_text_free(t);
    free(p);
    p = put(*state, "bb", "\xef\xbb\xbf\n", 4, 0600);   /* only a BOM */
    assert_int_equal(rs_tokenfile_read(p, false, buf, sizeof(buf), err,
                                       sizeof(err)), RS_EINVAL);
    free(p);
}

/* tokenfile/bad_tokens: empty, white space inside, over the limit or the
 * caller's buffer are RS_EINVAL with the file named. */
static void
test_bad_tokens(void **state)
{
    char buf[RS_TOKENFILE_MAX + 1], err[256], big[RS_TOKENFILE_MAX + 2];
    char *p = put(*state, "e", "\n", 1, 0600);
    assert_int_equal(rs_tokenfile_read(p, false, buf, sizeof(buf), err,
                                       sizeof(err)), RS_EINVAL);
    assert_non_null(strstr(err, p));
    free(p);
    p = put(*state, "w", "ab cd\n", 6, 0600);
    assert_int_equal(rs_tokenfile_read(p, false, buf, sizeof(buf), err,
                                       sizeof(err)), RS_EINVAL);
    free(p);
    memset(big, 'x', sizeof(big));
    p = put(*state, "b", big, RS_TOKENFILE_MAX + 1, 0600);
    assert_int_equal(rs_tokenfile_read(p, false, buf, sizeof(buf), err,
                                       sizeof(err)), RS_EINVAL);
    free(p);
    p = put(*state, "m", big, RS_TOKENFILE_MAX, 0600);
    assert_int_equal(rs_tokenfile_read(p, false, buf, sizeof(buf), err,
                                       sizeof(err)), 0);
    assert_int_equal(strlen(buf), RS_TOKENFILE_MAX);
    assert_int_equal(rs_tokenfile_read(p, false, buf, 16, err, sizeof(err)),
                     RS_EINVAL);
    free(p);
}

/* tokenfile/modes: readable by group or by others is RS_EDENIED with the
 * mode and the way out in the message; --insecure-token-file reads it;
 * check alone does the same without reading. */
static void
test_modes(void **state)
{
    char buf[64], err[256];
    char *p = put(*state, "g", "tok\n", 4, 0640);
    assert_int_equal(rs_tokenfile_read(p, false, buf, sizeof(buf), err,
                                       sizeof(err)), RS_EDENIED);
    assert_non_null(strstr(err, "readable by group or others (mode 0640)"));
    assert_non_null(strstr(err, "--insecure-token-file"));
    assert_int_equal(rs_tokenfile_check(p, false, err, sizeof(err)),
                     RS_EDENIED);
    assert_int_equal(rs_tokenfile_read(p, true, buf, sizeof(buf), err,
                                       sizeof(err)), 0);
    assert_string_equal(buf, "tok");
    assert_int_equal(rs_tokenfile_check(p, true, err, sizeof(err)), 0);
    free(p);
    p = put(*state, "o", "tok\n", 4, 0604);
    assert_int_equal(rs_tokenfile_check(p, false, err, sizeof(err)),
                     RS_EDENIED);
    free(p);
    p = put(*state, "u", "tok\n", 4, 0400);
    assert_int_equal(rs_tokenfile_check(p, false, err, sizeof(err)), 0);
    free(p);
}

/* tokenfile/missing: RS_EIO naming the file and the system's reason. */
static void
test_missing(void **state)
{
    char buf[64], err[256], path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/none", (char *)*state);
    assert_int_equal(rs_tokenfile_read(path, false, buf, sizeof(buf), err,
                                       sizeof(err)), RS_EIO);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "No such file"));
    assert_int_equal(rs_tokenfile_check(path, true, err, sizeof(err)),
                     RS_EIO);
}

/* tokenfile/text: the whole file up to max bytes (exactly max is fine),
 * longer is RS_ETOOBIG, a NUL byte RS_EINVAL, modes as for tokens;
 * text_free(NULL) is a no-op. */
static void
test_text(void **state)
{
    char err[256], *t = NULL;
    size_t len = 0;
    char *p = put(*state, "h", "A: b\nC: d\n", 10, 0600);
    assert_int_equal(rs_tokenfile_read_text(p, false, 10, &t, &len, err,
                                            sizeof(err)), 0);
    assert_string_equal(t, "A: b\nC: d\n");
    assert_int_equal(len, 10);
    rs_tokenfile_text_free(t);
    assert_int_equal(rs_tokenfile_read_text(p, false, 9, &t, &len, err,
                                            sizeof(err)), RS_ETOOBIG);
    assert_null(t);
    free(p);
    p = put(*state, "z", "A: b\0c\n", 7, 0600);
    assert_int_equal(rs_tokenfile_read_text(p, false, 100, &t, NULL, err,
                                            sizeof(err)), RS_EINVAL);
    free(p);
    p = put(*state, "r", "A: b\n", 5, 0644);
    assert_int_equal(rs_tokenfile_read_text(p, false, 100, &t, NULL, err,
                                            sizeof(err)), RS_EDENIED);
    free(p);
    rs_tokenfile_text_free(NULL);
}

/* tokenfile/text_alloc_fail: the one allocation failing is RS_ENOMEM,
 * nothing handed out. */
static void
test_text_alloc_fail(void **state)
{
    char err[256], *t = NULL;
    char *p = put(*state, "a", "A: b\n", 5, 0600);
    tu_alloc_fail_at(1);
    assert_int_equal(rs_tokenfile_read_text(p, false, 100, &t, NULL, err,
                                            sizeof(err)), RS_ENOMEM);
    tu_alloc_fail_at(0);
    assert_null(t);
    free(p);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        { "tokenfile/first_line_trimmed", test_first_line, NULL, NULL, NULL },
        { "tokenfile/bom_dropped", test_bom, NULL, NULL, NULL },
        { "tokenfile/bad_tokens", test_bad_tokens, NULL, NULL, NULL },
        { "tokenfile/modes", test_modes, NULL, NULL, NULL },
        { "tokenfile/missing", test_missing, NULL, NULL, NULL },
        { "tokenfile/text", test_text, NULL, NULL, NULL },
        { "tokenfile/text_alloc_fail", test_text_alloc_fail, NULL, NULL,
          NULL },
    };
    return cmocka_run_group_tests_name("tokenfile", tests, setup, teardown);
}
