/* test_log.c - the logger's three line formats, escaping, truncation,
 * level filtering, reopening and atomic lines under threads. */
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RS_LOG_MODULE "unit"
#include "rs_log.h"

struct fixture {
    char *dir;
    char path[4096];
};

static int
setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    if (fx == NULL)
        return -1;
    fx->dir = tu_mkdtemp();
    snprintf(fx->path, sizeof(fx->path), "%s/log", fx->dir);
    *state = fx;
    return 0;
}

static int
teardown(void **state)
{
    struct fixture *fx = *state;
    rs_log_shutdown();
    tu_rmtree(fx->dir);
    free(fx->dir);
    free(fx);
    return 0;
}

static void
log_to(struct fixture *fx, enum rs_log_format fmt, bool no_ts)
{
    struct rs_log_opts o = {
        .level = RS_LOG_INFO, .format = fmt, .app = "rstest",
        .path = fx->path, .no_ts = no_ts,
    };
    assert_int_equal(rs_log_init(&o), 0);
}

/* Everything logged so far (malloc'ed). */
static char *
logged(struct fixture *fx)
{
    char *s = tu_read_file(fx->path, NULL);
    assert_non_null(s);
    return s;
}

static bool
ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* log/logfmt_line: one logfmt line with app, module, quoted msg, bare and
 * quoted values, in that order. */
static void
test_logfmt_line(void **state)
{
    struct fixture *fx = *state;
    log_to(fx, RS_LOG_LOGFMT, true);
    rs_log_kv(RS_LOG_INFO, "hello world", "k", "v", "sp", "a b", "eq", "x=y",
              "empty", "", "null", NULL, NULL);
    char *s = logged(fx);
    assert_string_equal(s, "level=info app=rstest module=unit msg=\"hello world\""
                           " k=v sp=\"a b\" eq=\"x=y\" empty=\"\" null=\"\"\n");
    free(s);
}

/* log/logfmt_escaping: quotes, backslashes, newlines, tabs and control
 * bytes in values and messages are escaped; the event stays one line. */
static void
test_logfmt_escaping(void **state)
{
    struct fixture *fx = *state;
    log_to(fx, RS_LOG_LOGFMT, true);
    rs_log_kv(RS_LOG_WARN, "two\nlines", "q", "say \"hi\"\\", "nl", "a\r\nb\tc",
              "ctl", "\x01\x7f", NULL);
    char *s = logged(fx);
    assert_string_equal(s, "level=warn app=rstest module=unit msg=\"two\\nlines\""
                           " q=\"say \\\"hi\\\"\\\\\" nl=\"a\\r\\nb\\tc\""
                           " ctl=\"\\u0001\\u007f\"\n");
    free(s);
}

/* log/json_line: JSON members in order, strings escaped, valid UTF-8 kept
 * and invalid bytes replaced by U+FFFD so the line is always valid JSON. */
static void
test_json_line(void **state)
{
    struct fixture *fx = *state;
    log_to(fx, RS_LOG_JSON, true);
    rs_log_kv(RS_LOG_ERROR, "bad \"doc\"", "url", "http://x/a b", "nl", "1\n2",
              "utf8", "caf\xc3\xa9", "raw", "\xff\xc3", NULL);
    char *s = logged(fx);
    assert_string_equal(s, "{\"level\":\"error\",\"app\":\"rstest\","
                           "\"module\":\"unit\",\"msg\":\"bad \\\"doc\\\"\","
                           "\"url\":\"http://x/a b\",\"nl\":\"1\\n2\","
                           "\"utf8\":\"caf\xc3\xa9\",\"raw\":\"\\ufffd\\ufffd\"}\n");
    free(s);
}

/* log/text_line: the human format: level padded, module, bare message,
 * fields as logfmt. */
static void
test_text_line(void **state)
{
    struct fixture *fx = *state;
    log_to(fx, RS_LOG_TEXT, true);
    rs_log_kv(RS_LOG_INFO, "fetched \"it\"", "status", "200", NULL);
    rs_log_emit(RS_LOG_ERROR, NULL, "no module %d", 7);
    char *s = logged(fx);
    assert_string_equal(s, "INFO  unit: fetched \"it\" status=200\n"
                           "ERROR no module 7\n");
    free(s);
}

/* log/printf_and_keys: rs_log formats printf-style; odd characters in keys
 * become '_' so keys never break the format. */
static void
test_printf_and_keys(void **state)
{
    struct fixture *fx = *state;
    log_to(fx, RS_LOG_LOGFMT, true);
    rs_log(RS_LOG_INFO, "n=%d s=%s", 3, "x");
    rs_log_kv(RS_LOG_INFO, "m", "a b=\"c", "1", "", "2", NULL);
    char *s = logged(fx);
    assert_string_equal(s, "level=info app=rstest module=unit msg=\"n=3 s=x\"\n"
                           "level=info app=rstest module=unit msg=\"m\" "
                           "a_b__c=1 _=2\n");
    free(s);
}

/* log/timestamp: without no_ts each line starts with a UTC timestamp with
 * milliseconds, in every format. */
static void
test_timestamp(void **state)
{
    struct fixture *fx = *state;
    log_to(fx, RS_LOG_LOGFMT, false);
    rs_log(RS_LOG_INFO, "x");
    char *s = logged(fx);
    /* ts=2024-05-01T10:00:00.123Z level=info */
    assert_true(strncmp(s, "ts=", 3) == 0);
    assert_int_equal(strlen(s), strlen("ts=2024-05-01T10:00:00.123Z level=info "
                                       "app=rstest module=unit msg=\"x\"\n"));
    assert_int_equal(s[7], '-');
    assert_int_equal(s[13], 'T');
    assert_int_equal(s[22], '.');
    assert_int_equal(s[26], 'Z');
    assert_string_equal(s + 27, " level=info app=rstest module=unit msg=\"x\"\n");
    free(s);

    log_to(fx, RS_LOG_JSON, false);
    rs_log(RS_LOG_INFO, "y");
    s = logged(fx);
    char *second = strchr(s, '\n') + 1;
    assert_true(strncmp(second, "{\"ts\":\"", 7) == 0);
    assert_string_equal(second + 7 + 24, "\",\"level\":\"info\",\"app\":\"rstest\","
                                         "\"module\":\"unit\",\"msg\":\"y\"}\n");
    free(s);
}

/* log/level_filter: events below the threshold are dropped; the threshold
 * can be lowered at run time. */
static void
test_level_filter(void **state)
{
    struct fixture *fx = *state;
    log_to(fx, RS_LOG_LOGFMT, true);
    rs_log(RS_LOG_DEBUG, "hidden");
    assert_false(rs_log_enabled(RS_LOG_DEBUG));
    rs_log_set_level(RS_LOG_DEBUG);
    assert_true(rs_log_enabled(RS_LOG_DEBUG));
    rs_log(RS_LOG_DEBUG, "shown");
    rs_log_set_level(RS_LOG_ERROR);
    rs_log(RS_LOG_WARN, "hidden too");
    char *s = logged(fx);
    assert_string_equal(s, "level=debug app=rstest module=unit msg=\"shown\"\n");
    free(s);
}

/* log/truncation: an event longer than RS_LOG_LINE_MAX is cut, closed
 * properly (quote, brace) and marked, in logfmt and JSON; the value cut
 * keeps what fits of it. */
static void
test_truncation(void **state)
{
    struct fixture *fx = *state;
    size_t big = 3 * RS_LOG_LINE_MAX;
    char *v = malloc(big + 1);
    assert_non_null(v);
    memset(v, 'a', big);
    v[big] = '\0';
    v[100] = ' ';

    log_to(fx, RS_LOG_LOGFMT, true);
    rs_log_kv(RS_LOG_INFO, "m", "big", v, "after", "x", NULL);
    char *s = logged(fx);
    size_t n = strlen(s);
    assert_true(n <= RS_LOG_LINE_MAX);
    assert_non_null(strstr(s, " big=\"a"));
    assert_true(ends_with(s, "a\" truncated=true\n"));
    assert_null(strstr(s, "after"));
    assert_true(strchr(s, '\n') == s + n - 1);
    free(s);

    unlink(fx->path);
    log_to(fx, RS_LOG_JSON, true);
    rs_log_kv(RS_LOG_INFO, "m", "big", v, NULL);
    s = logged(fx);
    n = strlen(s);
    assert_true(n <= RS_LOG_LINE_MAX);
    assert_true(ends_with(s, "a\",\"truncated\":true}\n"));
    free(s);

    /* A cut that falls inside an escape never splits it. */
    for (size_t i = 0; i < big; i++)
        v[i] = '\n';
    unlink(fx->path);
    log_to(fx, RS_LOG_JSON, true);
    rs_log_kv(RS_LOG_INFO, "m", "nl", v, NULL);
    s = logged(fx);
    n = strlen(s);
    assert_true(n <= RS_LOG_LINE_MAX);
    assert_true(ends_with(s, "\\n\",\"truncated\":true}\n"));
    free(s);

    /* A bare logfmt value (a long callback URL, no space in it) keeps
     * its start: it was dropped whole, "callback= truncated=true". */
    memcpy(v, "http://cb.example/", 18);
    memset(v + 18, 'u', big - 18);
    unlink(fx->path);
    log_to(fx, RS_LOG_LOGFMT, true);
    rs_log_kv(RS_LOG_INFO, "m", "callback", v, "after", "x", NULL);
    s = logged(fx);
    n = strlen(s);
    assert_true(n <= RS_LOG_LINE_MAX);
    assert_non_null(strstr(s, " callback=http://cb.example/uuu"));
    assert_true(ends_with(s, "u truncated=true\n"));
    assert_null(strstr(s, "after"));
    free(s);
    free(v);
}

/* log/reopen: after the file is moved away, rs_log_reopen starts a new
 * file at the configured path; earlier lines stay in the moved file. */
static void
test_reopen(void **state)
{
    struct fixture *fx = *state;
    char moved[4200];
    snprintf(moved, sizeof(moved), "%s.1", fx->path);
    log_to(fx, RS_LOG_LOGFMT, true);
    rs_log(RS_LOG_INFO, "first");
    assert_int_equal(rename(fx->path, moved), 0);
    rs_log(RS_LOG_INFO, "second");
    assert_int_equal(rs_log_reopen(), 0);
    rs_log(RS_LOG_INFO, "third");
    char *old = tu_read_file(moved, NULL);
    char *cur = logged(fx);
    assert_non_null(old);
    assert_non_null(strstr(old, "msg=\"first\""));
    assert_non_null(strstr(old, "msg=\"second\""));
    assert_null(strstr(old, "third"));
    assert_string_equal(cur, "level=info app=rstest module=unit msg=\"third\"\n");
    free(old);
    free(cur);
}

/* log/init_errors: a path that cannot be opened is RS_EIO and the logger
 * keeps its destination; bad enums are RS_EINVAL; reopen on stderr is a
 * no-op; errno survives a log call. */
static void
test_init_errors(void **state)
{
    struct fixture *fx = *state;
    log_to(fx, RS_LOG_LOGFMT, true);
    struct rs_log_opts bad = { .path = "/nonexistent-dir/x/log" };
    assert_int_equal(rs_log_init(&bad), RS_EIO);
    struct rs_log_opts badfmt = { .format = (enum rs_log_format)42 };
    assert_int_equal(rs_log_init(&badfmt), RS_EINVAL);
    errno = ERANGE;
    rs_log(RS_LOG_INFO, "still here");
    assert_int_equal(errno, ERANGE);
    char *s = logged(fx);
    assert_string_equal(s, "level=info app=rstest module=unit msg=\"still here\"\n");
    free(s);
    rs_log_shutdown();
    assert_int_equal(rs_log_reopen(), 0);
}

/* log/names: level and format names parse case-insensitively, unknown
 * ones are RS_EINVAL. */
static void
test_names(void **state)
{
    (void)state;
    enum rs_log_level lv;
    enum rs_log_format f;
    assert_int_equal(rs_log_level_from("DEBUG", &lv), 0);
    assert_int_equal(lv, RS_LOG_DEBUG);
    assert_int_equal(rs_log_level_from("warning", &lv), 0);
    assert_int_equal(lv, RS_LOG_WARN);
    assert_int_equal(rs_log_level_from("loud", &lv), RS_EINVAL);
    assert_int_equal(rs_log_level_from(NULL, &lv), RS_EINVAL);
    assert_int_equal(rs_log_format_from("json", &f), 0);
    assert_int_equal(f, RS_LOG_JSON);
    assert_int_equal(rs_log_format_from("Logfmt", &f), 0);
    assert_int_equal(f, RS_LOG_LOGFMT);
    assert_int_equal(rs_log_format_from("xml", &f), RS_EINVAL);
    assert_string_equal(rs_log_level_name(RS_LOG_WARN), "warn");
}

#define THREADS 4
#define PER_THREAD 500

static void *
log_thread(void *arg)
{
    long id = (long)(intptr_t)arg;
    char val[600];
    memset(val, 'a' + (int)id, sizeof(val) - 1);
    val[sizeof(val) - 1] = '\0';
    for (int i = 0; i < PER_THREAD; i++)
        rs_log_kv(RS_LOG_INFO, "t", "v", val, NULL);
    return NULL;
}

/* log/threads_atomic_lines: lines from concurrent threads never
 * interleave: every line is whole and holds one thread's letter only. */
static void
test_threads_atomic_lines(void **state)
{
    struct fixture *fx = *state;
    pthread_t th[THREADS];
    log_to(fx, RS_LOG_LOGFMT, true);
    for (long i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, log_thread,
                                        (void *)(intptr_t)i), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    char *s = logged(fx);
    int lines = 0;
    const char *prefix = "level=info app=rstest module=unit msg=\"t\" v=";
    for (char *p = s, *nl; (nl = strchr(p, '\n')) != NULL; p = nl + 1) {
        size_t plen = strlen(prefix);
        assert_int_equal((size_t)(nl - p), plen + 599);
        assert_memory_equal(p, prefix, plen);
        for (char *c = p + plen + 1; c < nl; c++)
            assert_int_equal(*c, p[plen]);
        lines++;
    }
    assert_int_equal(lines, THREADS * PER_THREAD);
    free(s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_logfmt_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_logfmt_escaping, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_printf_and_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timestamp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_level_filter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_errors, setup, teardown),
        cmocka_unit_test(test_names),
        cmocka_unit_test_setup_teardown(test_threads_atomic_lines, setup,
                                        teardown),
    };
    return cmocka_run_group_tests_name("log", tests, NULL, NULL);
}
