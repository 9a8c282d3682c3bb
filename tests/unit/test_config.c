/* test_config.c - options from file and flags (precedence, --config
 * anywhere), every value type and its errors, sections (each once), a
 * value parsed by an option's rules (rs_config_opt_parse), lists, secrets,
 * help and dump text, host:port forms, allocation failures. */
#include "testutil.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rs_alloc.h"
#include "rs_config.h"

/* What the test program configures. */
struct conf {
    char *name;
    int64_t workers;
    uint64_t max_body;
    int64_t timeout_ms;
    bool verbose;
    struct rs_config_hostport listen;
    char **topics;
    char *token;
    char *api_key;
};

struct fixture {
    char *dir;
    char path[4096];              /* the config file written last */
    struct conf conf;
    struct rs_config_opt opts[16];
    struct rs_config_info info;
    struct rs_config *cfg;
    char sections[1024];          /* what the section callback saw */
};

/* The table is built per test, pointing into the fixture, so no test
 * shares mutable state with another. */
static void
fx_table(struct fixture *fx)
{
    struct conf *c = &fx->conf;
    const struct rs_config_opt opts[] = {
        RS_CONFIG_STRING("name", 'n', &c->name, "NAME", "hub", "instance name"),
        RS_CONFIG_INT("workers", 'w', &c->workers, "4", 1, 64,
                      "worker threads"),
        RS_CONFIG_SIZE("max-body", 0, &c->max_body, "1M", 0, 0,
                       "largest accepted body"),
        RS_CONFIG_DURATION("timeout", 0, &c->timeout_ms, "30s", 0, 0,
                           "request timeout"),
        RS_CONFIG_BOOL("verbose", 'v', &c->verbose, NULL, "log more"),
        RS_CONFIG_HOSTPORT("listen", 'l', &c->listen, "127.0.0.1:8080",
                           "address to listen on"),
        RS_CONFIG_LIST("topic", 't', &c->topics, "NAME", "default",
                       "topic to serve"),
        RS_CONFIG_SECRET("token", 0, &c->token, "publisher bearer token"),
        { .name = "api-key", .type = RS_CONFIG_TYPE_STRING,
          .dest = &c->api_key, .def = "dev-key", .help = "admin API key",
          .secret = true },
        RS_CONFIG_END,
    };
    memcpy(fx->opts, opts, sizeof(opts));
}

static const char *
on_section(void *ud, const char *type, const char *name, const char *key,
           const char *value, int line)
{
    struct fixture *fx = ud;
    size_t used = strlen(fx->sections);
    snprintf(fx->sections + used, sizeof(fx->sections) - used,
             "%s|%s|%s|%s|%d\n", type, name, key, value, line);
    return strcmp(key, "bad") == 0 ? "expected a good value" : NULL;
}

static int
setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    if (fx == NULL)
        return -1;
    fx->dir = tu_mkdtemp();
    fx_table(fx);
    fx->info = (struct rs_config_info){
        .program = "rstest", .version = "1.2.3",
        .usage = "Usage: rstest [OPTION]...", .opts = fx->opts,
    };
    fx->cfg = rs_config_new(&fx->info);
    if (fx->cfg == NULL)
        return -1;
    *state = fx;
    return 0;
}

static int
teardown(void **state)
{
    struct fixture *fx = *state;
    rs_config_free(fx->cfg);
    tu_alloc_fail_at(0);
    tu_rmtree(fx->dir);
    free(fx->dir);
    free(fx);
    return 0;
}

/* Start over with the section callback installed. */
static void
fx_with_sections(struct fixture *fx)
{
    rs_config_free(fx->cfg);
    fx->info.on_section = on_section;
    fx->info.section_ud = fx;
    fx->cfg = rs_config_new(&fx->info);
    assert_non_null(fx->cfg);
}

static const char *
write_conf(struct fixture *fx, const char *text)
{
    snprintf(fx->path, sizeof(fx->path), "%s/test.conf", fx->dir);
    FILE *f = fopen(fx->path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return fx->path;
}

/* argv as getopt_long wants it: writable pointers, which it permutes. */
#define ARGS(...) ((const char *const[]){ "rstest", __VA_ARGS__, NULL })
static const char *const no_args[] = { "rstest", NULL };

struct args {
    int argc;
    char *argv[32];
};

static void
args_set(struct args *a, const char *const *words)
{
    a->argc = 0;
    for (; *words != NULL; words++)
        a->argv[a->argc++] = strdup(*words);
    a->argv[a->argc] = NULL;
}

static void
args_free(struct args *a)
{
    for (int i = 0; i < a->argc; i++)
        free(a->argv[i]);
}

static int
parse(struct fixture *fx, const char *const *words)
{
    struct args a;
    args_set(&a, words);
    int rc = rs_config_parse(fx->cfg, a.argc, a.argv, NULL);
    args_free(&a);
    return rc;
}

/* Parse words with a fresh config and expect RS_EINVAL with message. */
static void
expect_error(struct fixture *fx, const char *const *words, const char *msg)
{
    rs_config_free(fx->cfg);
    fx->cfg = rs_config_new(&fx->info);
    assert_non_null(fx->cfg);
    assert_int_equal(parse(fx, words), RS_EINVAL);
    assert_string_equal(rs_config_errstr(fx->cfg), msg);
}

/* Same for a config file: msg follows "PATH:". */
static void
expect_file_error(struct fixture *fx, const char *text, const char *msg)
{
    char want[4200];
    write_conf(fx, text);
    snprintf(want, sizeof(want), "%s:%s", fx->path, msg);
    expect_error(fx, ARGS("-c", fx->path), want);
}

/* Start over and parse words, which must succeed. */
static void
reparse(struct fixture *fx, const char *const *words)
{
    rs_config_free(fx->cfg);
    fx->cfg = rs_config_new(&fx->info);
    assert_non_null(fx->cfg);
    int rc = parse(fx, words);
    if (rc != 0)
        fail_msg("parse failed: %s", rs_config_errstr(fx->cfg));
}

static char *
help_of(const struct rs_config *cfg, bool dump)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    assert_int_equal(dump ? rs_config_dump(cfg, f) : rs_config_help(cfg, f),
                     0);
    fclose(f);
    /* a copy: gcc -O2 takes what open_memstream wrote into text for a
     * pointer to text itself and calls its later uses dangling */
    char *out = strdup(text);
    assert_non_null(out);
    free(text);
    return out;
}

/* config/free_null: rs_config_free(NULL) is a no-op. */
static void
test_free_null(void **state)
{
    (void)state;
    rs_config_free(NULL);
}

/* config/defaults: with no file and no flags every field holds its default,
 * lists are non-NULL, nothing counts as set. */
static void
test_defaults(void **state)
{
    struct fixture *fx = *state;
    struct conf *c = &fx->conf;
    assert_int_equal(parse(fx, no_args), 0);
    assert_string_equal(c->name, "hub");
    assert_int_equal(c->workers, 4);
    assert_int_equal(c->max_body, 1 << 20);
    assert_int_equal(c->timeout_ms, 30000);
    assert_false(c->verbose);
    assert_string_equal(c->listen.host, "127.0.0.1");
    assert_int_equal(c->listen.port, 8080);
    assert_non_null(c->topics);
    assert_string_equal(c->topics[0], "default");
    assert_null(c->topics[1]);
    assert_null(c->token);
    assert_string_equal(c->api_key, "dev-key");
    assert_false(rs_config_is_set(fx->cfg, "name"));
    assert_false(rs_config_is_set(fx->cfg, "nonexistent"));
    assert_string_equal(rs_config_errstr(fx->cfg), "");
}

/* config/free_clears_fields: freeing the config frees and NULLs the strings
 * and lists it stored in the program's fields. */
static void
test_free_clears_fields(void **state)
{
    struct fixture *fx = *state;
    assert_int_equal(parse(fx, no_args), 0);
    rs_config_free(fx->cfg);
    fx->cfg = NULL;
    assert_null(fx->conf.name);
    assert_null(fx->conf.topics);
    assert_null(fx->conf.api_key);
}

/* config/flags_win: the file overrides defaults and flags override the
 * file, key by key; is_set tells file and flags from defaults. */
static void
test_flags_win(void **state)
{
    struct fixture *fx = *state;
    struct conf *c = &fx->conf;
    const char *path = write_conf(fx, "; comment\n"
                                      "# another\n"
                                      "name = from-file ; inline comment\n"
                                      "workers = 8\n"
                                      "timeout = 5m\n"
                                      "\n"
                                      "verbose = yes\n");
    assert_int_equal(parse(fx, ARGS("--config", path, "--workers=16",
                                    "-n", "from-flag", "--no-verbose")),
                     0);
    assert_string_equal(c->name, "from-flag");
    assert_int_equal(c->workers, 16);
    assert_int_equal(c->timeout_ms, 300000);
    assert_false(c->verbose);
    assert_int_equal(c->max_body, 1 << 20);
    assert_true(rs_config_is_set(fx->cfg, "timeout"));
    assert_true(rs_config_is_set(fx->cfg, "name"));
    assert_false(rs_config_is_set(fx->cfg, "max-body"));
}

/* config/config_anywhere: --config is read before any flag wherever it
 * appears (first, last, -c, --config=FILE), so flags always win; twice is
 * an error. */
static void
test_config_anywhere(void **state)
{
    struct fixture *fx = *state;
    const char *path = write_conf(fx, "workers = 8\nname = file\n");
    char eq[4200];
    snprintf(eq, sizeof(eq), "--config=%s", path);

    reparse(fx, ARGS("--workers", "2", "--config", path));
    assert_int_equal(fx->conf.workers, 2);
    assert_string_equal(fx->conf.name, "file");
    reparse(fx, ARGS("--workers", "3", "-c", path, "-n", "flag"));
    assert_int_equal(fx->conf.workers, 3);
    assert_string_equal(fx->conf.name, "flag");
    reparse(fx, ARGS("-w3", eq));
    assert_int_equal(fx->conf.workers, 3);
    reparse(fx, ARGS(eq));
    assert_int_equal(fx->conf.workers, 8);
    expect_error(fx, ARGS("-c", path, "--config", path),
                 "--config: given more than once");
}

/* config/values_ok: every type's accepted spellings, from flags. */
static void
test_values_ok(void **state)
{
    struct fixture *fx = *state;
    struct conf *c = &fx->conf;
    static const struct {
        const char *arg;
        uint64_t want;
    } sizes[] = {
        { "--max-body=0", 0 },          { "--max-body=512", 512 },
        { "--max-body=64K", 65536 },    { "--max-body=64k", 65536 },
        { "--max-body=10M", 10485760 }, { "--max-body=1G", 1073741824 },
        { "--max-body=2GB", 2147483648u }, { "--max-body=7B", 7 },
        { "--max-body=18446744073709551615", UINT64_MAX },
    };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        reparse(fx, ARGS(sizes[i].arg));
        assert_true(c->max_body == sizes[i].want);
    }
    static const struct {
        const char *arg;
        int64_t want;
    } durations[] = {
        { "--timeout=0", 0 },          { "--timeout=500ms", 500 },
        { "--timeout=30s", 30000 },    { "--timeout=5m", 300000 },
        { "--timeout=1h", 3600000 },   { "--timeout=7d", 604800000 },
    };
    for (size_t i = 0; i < sizeof(durations) / sizeof(durations[0]); i++) {
        reparse(fx, ARGS(durations[i].arg));
        assert_int_equal(c->timeout_ms, durations[i].want);
    }
    reparse(fx, ARGS("--workers=+7"));
    assert_int_equal(c->workers, 7);
    reparse(fx, ARGS("-w", "64"));
    assert_int_equal(c->workers, 64);
    static const char *const yes[] = { "--verbose", "-v", "--verbose=true",
                                       "--verbose=YES", "--verbose=on",
                                       "--verbose=1" };
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        reparse(fx, ARGS(yes[i]));
        assert_true(c->verbose);
    }
    reparse(fx, ARGS("-v", "--verbose=off"));
    assert_false(c->verbose);
    reparse(fx, ARGS("-v", "--no-verbose"));
    assert_false(c->verbose);
    reparse(fx, ARGS("--verbose=no", "-v"));
    assert_true(c->verbose);
    reparse(fx, ARGS("--listen", "[::1]:80", "--name="));
    assert_string_equal(c->listen.host, "::1");
    assert_int_equal(c->listen.port, 80);
    assert_string_equal(c->name, "");
    /* the last of a repeated scalar flag wins */
    reparse(fx, ARGS("-w", "2", "-w", "5"));
    assert_int_equal(c->workers, 5);
}

/* config/flag_errors: each bad value names the option and what it
 * expected; unknown, abbreviated, valueless and stray arguments too. */
static void
test_flag_errors(void **state)
{
    struct fixture *fx = *state;
    expect_error(fx, ARGS("--listen", "abc"),
                 "--listen: expected HOST:PORT, got 'abc'");
    expect_error(fx, ARGS("-l", "::1:80"),
                 "--listen: expected HOST:PORT, got '::1:80'");
    expect_error(fx, ARGS("--workers=100"),
                 "--workers: expected an integer from 1 to 64, got '100'");
    expect_error(fx, ARGS("--workers=0"),
                 "--workers: expected an integer from 1 to 64, got '0'");
    expect_error(fx, ARGS("-w", "4x"),
                 "--workers: expected an integer from 1 to 64, got '4x'");
    expect_error(fx, ARGS("-w", " 4"),
                 "--workers: expected an integer from 1 to 64, got ' 4'");
    expect_error(fx, ARGS("-w", "99999999999999999999"),
                 "--workers: expected an integer from 1 to 64, got "
                 "'99999999999999999999'");
    static const char *const bad_sizes[] = { "1X", "-1", "", "1KK", "K",
                                             "18446744073709551616",
                                             "17179869184G" };
    for (size_t i = 0; i < sizeof(bad_sizes) / sizeof(bad_sizes[0]); i++) {
        char arg[64], msg[160];
        snprintf(arg, sizeof(arg), "--max-body=%s", bad_sizes[i]);
        snprintf(msg, sizeof(msg),
                 "--max-body: expected a size like 512, 64K, 10M or 1G, "
                 "got '%s'", bad_sizes[i]);
        expect_error(fx, ARGS(arg), msg);
    }
    static const char *const bad_durations[] = { "30", "5 s", "1y", "1S",
                                                 "-1s", "s",
                                                 "9223372036854776s" };
    for (size_t i = 0; i < sizeof(bad_durations) / sizeof(bad_durations[0]);
         i++) {
        char arg[64], msg[160];
        snprintf(arg, sizeof(arg), "--timeout=%s", bad_durations[i]);
        snprintf(msg, sizeof(msg),
                 "--timeout: expected a duration like 500ms, 30s, 5m, 1h or "
                 "7d, got '%s'", bad_durations[i]);
        expect_error(fx, ARGS(arg), msg);
    }
    expect_error(fx, ARGS("--verbose=maybe"),
                 "--verbose: expected true or false, got 'maybe'");
    expect_error(fx, ARGS("--no-verbose=1"), "--no-verbose: takes no value");
    expect_error(fx, ARGS("--help=1"), "--help: takes no value");
    expect_error(fx, ARGS("--bogus"), "unknown option '--bogus'");
    expect_error(fx, ARGS("--bogus=1"), "unknown option '--bogus'");
    expect_error(fx, ARGS("-x"), "unknown option '-x'");
    expect_error(fx, ARGS("--verb"), "unknown option '--verb'");
    expect_error(fx, ARGS("--work", "3"), "unknown option '--work'");
    expect_error(fx, ARGS("--name"), "--name: missing value");
    expect_error(fx, ARGS("-w"), "--workers: missing value");
    expect_error(fx, ARGS("-c"), "--config: missing value");
    expect_error(fx, ARGS("stray"), "unexpected argument 'stray'");
}

/* config/file_errors: every file error carries FILE:LINE and the key. */
static void
test_file_errors(void **state)
{
    struct fixture *fx = *state;
    expect_file_error(fx, "name = x\n\nlistn = 1.2.3.4:80\n",
                      "3: unknown key 'listn'");
    expect_file_error(fx, "name = x\nlisten = abc\n",
                      "2: listen: expected HOST:PORT, got 'abc'");
    expect_file_error(fx, "workers = 65\n",
                      "1: workers: expected an integer from 1 to 64, got "
                      "'65'");
    expect_file_error(fx, "timeout = 30\n",
                      "1: timeout: expected a duration like 500ms, 30s, 5m, "
                      "1h or 7d, got '30'");
    expect_file_error(fx, "verbose = sure\n",
                      "1: verbose: expected true or false, got 'sure'");
    expect_file_error(fx, "workers = 2\nname = a\nworkers = 3\n",
                      "3: workers: already set at line 1");
    expect_file_error(fx, "name = a\njust words\nlistn = 1\n",
                      "2: expected 'key = value' or '[section]'");
    expect_file_error(fx, "name = a\nlistn = 1\njust words\n",
                      "2: unknown key 'listn'");
    expect_file_error(fx, "[unclosed\n",
                      "1: expected 'key = value' or '[section]'");
    expect_file_error(fx, "[topic news]\nretention = 1d\n",
                      "2: unknown section [topic news]");
    char line[300];
    memset(line, 'x', sizeof(line));
    memcpy(line, "name = ", 7);
    line[sizeof(line) - 2] = '\n';
    line[sizeof(line) - 1] = '\0';
    char text[400];
    snprintf(text, sizeof(text), "workers = 2\n%s", line);
    expect_file_error(fx, text, "2: line longer than 199 bytes");
    /* "topic " and 44 more bytes: a 50-byte section name */
    snprintf(text, sizeof(text), "[topic %044d]\nk = v\n", 0);
    expect_file_error(fx, text, "1: section name longer than 49 bytes");

    char missing[4200], want[4400];
    snprintf(missing, sizeof(missing), "%s/missing.conf", fx->dir);
    snprintf(want, sizeof(want),
             "cannot read config file '%s': No such file or directory",
             missing);
    rs_config_free(fx->cfg);
    fx->cfg = rs_config_new(&fx->info);
    assert_int_equal(parse(fx, ARGS("--config", missing)), RS_EIO);
    assert_string_equal(rs_config_errstr(fx->cfg), want);
}

/* config/long_lines: lines of exactly 199 bytes (inih's limit here, a CR
 * included) are accepted whole, with LF and CRLF ends; 200 are refused. */
static void
test_long_lines(void **state)
{
    struct fixture *fx = *state;
    char text[600], value[200], name[200];
    memset(value, 'v', sizeof(value));
    value[199 - 7] = '\0';   /* "name = " + value: 199 bytes */
    memset(name, 'n', sizeof(name));
    name[199 - 8 - 1] = '\0'; /* "token = " + value + CR: 199 bytes */
    snprintf(text, sizeof(text), "name = %s\ntoken = %s\r\nworkers = 2\n",
             value, name);
    write_conf(fx, text);
    reparse(fx, ARGS("-c", fx->path));
    assert_string_equal(fx->conf.name, value);
    assert_string_equal(fx->conf.token, name);
    assert_int_equal(fx->conf.workers, 2);

    snprintf(text, sizeof(text), "name = %sv\n", value);
    expect_file_error(fx, text, "1: line longer than 199 bytes");
}

/* config/sections: [topic NAME] sections reach the callback with type,
 * trimmed instance name, key, value and line; [rstest] is the main
 * section; a callback's message becomes the error. */
static void
test_sections(void **state)
{
    struct fixture *fx = *state;
    fx_with_sections(fx);
    const char *path = write_conf(fx, "name = top\n"
                                      "[topic news]\n"
                                      "retention = 7d\n"
                                      "secret = s1\n"
                                      "[topic  sports ]\n"
                                      "retention = 1h\n"
                                      "[redis]\n"
                                      "url = redis://127.0.0.1:6379\n"
                                      "[rstest]\n"
                                      "workers = 9\n");
    assert_int_equal(parse(fx, ARGS("-c", path)), 0);
    assert_string_equal(fx->sections, "topic|news|retention|7d|3\n"
                                      "topic|news|secret|s1|4\n"
                                      "topic|sports|retention|1h|6\n"
                                      "redis||url|redis://127.0.0.1:6379|8\n");
    assert_string_equal(fx->conf.name, "top");
    assert_int_equal(fx->conf.workers, 9);

    fx->sections[0] = '\0';
    expect_file_error(fx, "[topic a]\nok = 1\n[topic b b]\nbad = 2\nok = 3\n",
                      "4: [topic b b] bad: expected a good value");
    /* parsing stopped at the error */
    assert_string_equal(fx->sections, "topic|a|ok|1|2\ntopic|b b|bad|2|4\n");
}

/* config/sections_once: a section header given twice is an error naming
 * both lines, however it is spaced, with sections between or not, empty
 * or not; an indented "[...]" after a key continues that key's value. */
static void
test_sections_once(void **state)
{
    struct fixture *fx = *state;
    fx_with_sections(fx);
    expect_file_error(fx, "[topic a]\nuri = x\ntoken = A\n\n"
                          "[topic a]\nuri = y\n",
                      "5: [topic a] already defined at line 1");
    assert_null(strstr(fx->sections, "|y|"));   /* stopped at the header */
    expect_file_error(fx, "[topic a]\n[topic b]\nk = v\n[ topic  a ]\nk = w\n",
                      "4: [topic a] already defined at line 1");
    expect_file_error(fx, "name = n\n[redis]\nurl = u\n[redis]\n",
                      "4: [redis] already defined at line 2");
    expect_file_error(fx, "[rstest]\nname = n\n[rstest]\nworkers = 2\n",
                      "3: [rstest] already defined at line 1");
    /* "[topic a b]" and "[topic a]" are two sections */
    fx->sections[0] = '\0';
    reparse(fx, ARGS("-c", write_conf(fx, "[topic a]\nk = 1\n"
                                          "[topic a b]\nk = 2\n"
                                          "  [topic a]\n")));
    assert_string_equal(fx->sections, "topic|a|k|1|2\n"
                                      "topic|a b|k|2|4\n"
                                      "topic|a b|k|[topic a]|5\n");
}

/* config/opt_parse: a value parsed by an option's own rules (type and
 * range) into another field: what a section callback reads; a bad value
 * says what was expected and leaves the field alone. */
static void
test_opt_parse(void **state)
{
    (void)state;
    int64_t age = -1, n = -1;
    bool b = false;
    char why[128];
    const struct rs_config_opt dur =
        RS_CONFIG_DURATION("age", 0, &age, NULL, 0, 0, "an age");
    const struct rs_config_opt cnt =
        RS_CONFIG_INT("n", 0, &n, NULL, 0, 1000, "a count");
    const struct rs_config_opt flag = { .name = "f",
                                        .type = RS_CONFIG_TYPE_BOOL };
    int64_t out = -1;
    assert_int_equal(rs_config_opt_parse(&dur, "7d", &out, why, sizeof(why)),
                     0);
    assert_int_equal(out, 604800000);
    assert_int_equal(age, -1);   /* the option's own field: untouched */
    /* 2^64 ms and more: refused, not wrapped */
    assert_int_equal(rs_config_opt_parse(&dur, "18446744073709552s", &out,
                                         why, sizeof(why)), RS_EINVAL);
    assert_int_equal(out, 604800000);
    assert_string_equal(why, "expected a duration like 500ms, 30s, 5m, 1h "
                             "or 7d");
    assert_int_equal(rs_config_opt_parse(&dur, "106751991167d", &out, why,
                                         sizeof(why)), 0);
    assert_int_equal(out, INT64_C(106751991167) * 86400000);
    assert_int_equal(rs_config_opt_parse(&cnt, "1001", &out, why,
                                         sizeof(why)), RS_EINVAL);
    assert_string_equal(why, "expected an integer from 0 to 1000");
    static const char *const yes[] = { "true", "yes", "on", "1", "ON" };
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        b = false;
        assert_int_equal(rs_config_opt_parse(&flag, yes[i], &b, why,
                                             sizeof(why)), 0);
        assert_true(b);
    }
    assert_int_equal(rs_config_opt_parse(&flag, "off", &b, why, sizeof(why)),
                     0);
    assert_false(b);
    assert_int_equal(rs_config_opt_parse(&flag, "maybe", &b, why,
                                         sizeof(why)), RS_EINVAL);
    assert_string_equal(why, "expected true or false");
    /* strings and lists are not for it */
    char *str = NULL;
    const struct rs_config_opt sopt =
        RS_CONFIG_STRING("s", 0, &str, NULL, NULL, "a string");
    assert_int_equal(rs_config_opt_parse(&sopt, "x", &str, why, sizeof(why)),
                     RS_EINVAL);
    assert_null(str);
}

/* config/lists: values accumulate within a source (file lines, continuation
 * lines, repeated flags); the file replaces the default and flags replace
 * the file. */
static void
test_lists(void **state)
{
    struct fixture *fx = *state;
    char **t;
    const char *path = write_conf(fx, "topic = a\n"
                                      "name = x\n"
                                      "topic = b\n"
                                      "  c\n");
    reparse(fx, ARGS("-c", path));
    t = fx->conf.topics;
    assert_string_equal(t[0], "a");
    assert_string_equal(t[1], "b");
    assert_string_equal(t[2], "c");
    assert_null(t[3]);

    reparse(fx, ARGS("-c", path, "--topic", "x", "-t", "y", "--topic=z",
                     "-t1", "-t2", "-t3"));
    t = fx->conf.topics;
    static const char *const want[] = { "x", "y", "z", "1", "2", "3" };
    for (size_t i = 0; i < 6; i++)
        assert_string_equal(t[i], want[i]);
    assert_null(t[6]);

    reparse(fx, ARGS("-t", "only"));
    assert_string_equal(fx->conf.topics[0], "only");
    assert_null(fx->conf.topics[1]);
}

/* config/secrets: secret values never appear in help, dump or errors. */
static void
test_secrets(void **state)
{
    struct fixture *fx = *state;
    const char *path = write_conf(fx, "token = hunter2\n");
    assert_int_equal(parse(fx, ARGS("-c", path, "--api-key", "s3cr3t")), 0);
    assert_string_equal(fx->conf.token, "hunter2");
    assert_string_equal(fx->conf.api_key, "s3cr3t");
    char *dump = help_of(fx->cfg, true);
    assert_null(strstr(dump, "hunter2"));
    assert_null(strstr(dump, "s3cr3t"));
    assert_non_null(strstr(dump, "token = <secret>\n"));
    assert_non_null(strstr(dump, "api-key = <secret>\n"));
    free(dump);
    char *help = help_of(fx->cfg, false);
    assert_null(strstr(help, "dev-key"));
    assert_non_null(strstr(help, "admin API key (default: <secret>)\n"));
    free(help);

    /* a bad secret value is not echoed either */
    int64_t pin = 0;
    const struct rs_config_opt opts[] = {
        { .name = "pin", .type = RS_CONFIG_TYPE_INT, .dest = &pin,
          .secret = true },
        RS_CONFIG_END,
    };
    struct rs_config_info info = { .program = "rstest", .opts = opts };
    struct rs_config *cfg = rs_config_new(&info);
    assert_non_null(cfg);
    struct args a;
    args_set(&a, ARGS("--pin=12x4"));
    assert_int_equal(rs_config_parse(cfg, a.argc, a.argv, NULL), RS_EINVAL);
    args_free(&a);
    assert_string_equal(rs_config_errstr(cfg),
                        "--pin: expected an integer, got <secret>");
    rs_config_free(cfg);
}

/* config/help_exact: the help text of a small table, byte for byte:
 * aligned columns, metavars, defaults, <secret>, a long option wrapped. */
static void
test_help_exact(void **state)
{
    (void)state;
    struct rs_config_hostport listen;
    bool verbose;
    char **topics, *token, *key;
    int64_t backoff;
    const struct rs_config_opt opts[] = {
        RS_CONFIG_HOSTPORT("listen", 'l', &listen, "127.0.0.1:8080",
                           "address to listen on"),
        RS_CONFIG_BOOL("verbose", 'v', &verbose, NULL, "log more"),
        RS_CONFIG_LIST("topic", 't', &topics, "NAME", NULL, "topic to serve"),
        RS_CONFIG_SECRET("token", 0, &token, "publisher bearer token"),
        { .name = "api-key", .type = RS_CONFIG_TYPE_STRING, .dest = &key,
          .def = "dev-key", .help = "admin API key", .secret = true },
        RS_CONFIG_DURATION("reconnect-backoff-maximum", 0, &backoff, "5m", 0,
                           0, "longest wait between reconnects"),
        RS_CONFIG_END,
    };
    struct rs_config_info info = {
        .program = "rstest", .version = "1.2.3",
        .usage = "Usage: rstest [OPTION]... [FILE]\nServe a test.",
        .opts = opts,
    };
    struct rs_config *cfg = rs_config_new(&info);
    assert_non_null(cfg);
    char *help = help_of(cfg, false);
    assert_string_equal(help,
        "Usage: rstest [OPTION]... [FILE]\n"
        "Serve a test.\n"
        "\n"
        "Options:\n"
        "  -l, --listen=HOST:PORT        address to listen on "
        "(default: 127.0.0.1:8080)\n"
        "  -v, --[no-]verbose            log more\n"
        "  -t, --topic=NAME              topic to serve (repeatable)\n"
        "      --token=STRING            publisher bearer token\n"
        "      --api-key=STRING          admin API key (default: <secret>)\n"
        "      --reconnect-backoff-maximum=DURATION\n"
        "                                longest wait between reconnects "
        "(default: 5m)\n"
        "  -c, --config=FILE             read options from FILE; flags "
        "override it\n"
        "  -h, --help                    show this help and exit\n"
        "  -V, --version                 show the version and exit\n");
    free(help);
    rs_config_free(cfg);
}

/* config/help_version: --help and --version are reported to the caller
 * (nothing printed), win over bad options and a broken file. */
static void
test_help_version(void **state)
{
    struct fixture *fx = *state;
    assert_int_equal(parse(fx, ARGS("--bogus", "-w", "999", "--help")),
                     RS_CONFIG_WANT_HELP);
    rs_config_free(fx->cfg);
    fx->cfg = rs_config_new(&fx->info);
    const char *path = write_conf(fx, "garbage\n");
    assert_int_equal(parse(fx, ARGS("-c", path, "-V")),
                     RS_CONFIG_WANT_VERSION);
    rs_config_free(fx->cfg);
    fx->cfg = rs_config_new(&fx->info);
    assert_int_equal(parse(fx, ARGS("-h", "--version")), RS_CONFIG_WANT_HELP);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    assert_int_equal(rs_config_version(fx->cfg, f), 0);
    fclose(f);
    assert_string_equal(text, "rstest 1.2.3\n");
    free(text);
}

/* config/dump_exact: the effective configuration, one line per value in
 * table order, canonical units, unset values as comments; it reads back
 * to the same values. */
static void
test_dump_exact(void **state)
{
    struct fixture *fx = *state;
    assert_int_equal(parse(fx, ARGS("--max-body=65536", "--timeout=90000ms",
                                    "-l", "[::1]:80", "-t", "a", "-t", "b",
                                    "-v")),
                     0);
    char *dump = help_of(fx->cfg, true);
    static const char want[] = "name = hub\n"
                               "workers = 4\n"
                               "max-body = 64K\n"
                               "timeout = 90s\n"
                               "verbose = true\n"
                               "listen = [::1]:80\n"
                               "topic = a\n"
                               "topic = b\n"
                               "# token is not set\n"
                               "api-key = <secret>\n";
    assert_string_equal(dump, want);

    /* drop the secret line, then read the rest back as a file */
    char *cut = strstr(dump, "api-key");
    assert_non_null(cut);
    *cut = '\0';
    const char *path = write_conf(fx, dump);
    free(dump);
    reparse(fx, ARGS("-c", path));
    dump = help_of(fx->cfg, true);
    assert_string_equal(dump, want);
    free(dump);
}

/* config/hostport: the accepted forms, the refused ones, and formatting
 * back. */
static void
test_hostport(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        const char *host;
        unsigned port;
    } ok[] = {
        { "[::1]:80", "::1", 80 },
        { "127.0.0.1:0", "127.0.0.1", 0 },
        { "*:8080", "", 8080 },
        { "localhost:8080", "localhost", 8080 },
        { "[fe80::1%eth0]:443", "fe80::1%eth0", 443 },
        { "hub-1.example.org:65535", "hub-1.example.org", 65535 },
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        struct rs_config_hostport hp;
        char back[300];
        assert_int_equal(rs_config_hostport_parse(ok[i].in, &hp), 0);
        assert_string_equal(hp.host, ok[i].host);
        assert_int_equal(hp.port, ok[i].port);
        assert_int_equal(rs_config_hostport_format(&hp, back, sizeof(back)),
                         0);
        assert_string_equal(back, ok[i].in);
    }
    static const char *const bad[] = {
        "abc", "::1:80", "[::1]80", "[::1]", "[nonsense]:80", "[]:80",
        ":80", "host:", "host:65536", "host:-1", "host:+80", "host:8o",
        "host:123456", "ho st:80", "a/b:80", "[::1%]:80", "", "*:", "**:1",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct rs_config_hostport hp = { .host = "keep", .port = 7 };
        if (rs_config_hostport_parse(bad[i], &hp) != RS_EINVAL)
            fail_msg("accepted '%s'", bad[i]);
        assert_string_equal(hp.host, "keep");
        assert_int_equal(hp.port, 7);
    }
    struct rs_config_hostport hp = { .host = "localhost", .port = 8080 };
    char small[8];
    assert_int_equal(rs_config_hostport_format(&hp, small, sizeof(small)),
                     RS_ETOOBIG);
}

/* config/table_errors: mistakes in a program's table fail the parse with
 * a message naming the option. */
static void
test_table_errors(void **state)
{
    (void)state;
    char *s1, *s2;
    int64_t n;
    static const char *const words[] = { "rstest", NULL };
    const struct {
        struct rs_config_opt opts[3];
        const char *msg;
    } cases[] = {
        { { RS_CONFIG_STRING("a", 0, &s1, NULL, NULL, ""),
            RS_CONFIG_STRING("a", 0, &s2, NULL, NULL, ""), RS_CONFIG_END },
          "option table: --a clashes with --a" },
        { { RS_CONFIG_STRING("a", 'x', &s1, NULL, NULL, ""),
            RS_CONFIG_STRING("b", 'x', &s2, NULL, NULL, ""), RS_CONFIG_END },
          "option table: --b clashes with --a" },
        { { RS_CONFIG_STRING("a", 'h', &s1, NULL, NULL, ""), RS_CONFIG_END },
          "option table: --a: bad letter" },
        { { RS_CONFIG_STRING("no-a", 0, &s1, NULL, NULL, ""), RS_CONFIG_END },
          "option table: bad name 'no-a'" },
        { { RS_CONFIG_STRING("config", 0, &s1, NULL, NULL, ""),
            RS_CONFIG_END },
          "option table: bad name 'config'" },
        { { RS_CONFIG_STRING("Big", 0, &s1, NULL, NULL, ""), RS_CONFIG_END },
          "option table: bad name 'Big'" },
        { { { .name = "a", .type = RS_CONFIG_TYPE_INT }, RS_CONFIG_END },
          "option table: --a: bad type or no field" },
        { { RS_CONFIG_INT("n", 0, &n, "0", 1, 9, ""), RS_CONFIG_END },
          "option table: default of --n: expected an integer from 1 to 9, "
          "got '0'" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct rs_config_info info = { .program = "t", .opts = cases[i].opts };
        struct rs_config *cfg = rs_config_new(&info);
        struct args a;
        assert_non_null(cfg);
        args_set(&a, words);
        assert_int_equal(rs_config_parse(cfg, a.argc, a.argv, NULL),
                         RS_EINVAL);
        args_free(&a);
        assert_string_equal(rs_config_errstr(cfg), cases[i].msg);
        rs_config_free(cfg);
    }
}

/* config/operands: with argind the operands are left to the caller, after
 * the options (getopt permutes argv); "--" ends the options. */
static void
test_operands(void **state)
{
    struct fixture *fx = *state;
    struct args a;
    int argind = -1;
    args_set(&a, ARGS("in.xml", "-w", "2", "out.xml", "--", "-v"));
    assert_int_equal(rs_config_parse(fx->cfg, a.argc, a.argv, &argind), 0);
    assert_int_equal(fx->conf.workers, 2);
    assert_false(fx->conf.verbose);
    assert_int_equal(a.argc - argind, 3);
    assert_string_equal(a.argv[argind], "in.xml");
    assert_string_equal(a.argv[argind + 1], "out.xml");
    assert_string_equal(a.argv[argind + 2], "-v");
    args_free(&a);
    /* a second parse of the same config is refused */
    assert_int_equal(parse(fx, no_args), RS_ESTATE);
}

/* config/alloc_failure: failing the Nth allocation, for every N, gives
 * RS_ENOMEM (or NULL from new) and leaks nothing; then it succeeds. */
static void
test_alloc_failure(void **state)
{
    struct fixture *fx = *state;
    fx_with_sections(fx);
    const char *path = write_conf(fx, "name = file\n"
                                      "topic = a\ntopic = b\ntopic = c\n"
                                      "topic = d\ntopic = e\n"
                                      "token = t\n"
                                      "[topic x]\nk = v\n");
    rs_config_free(fx->cfg);
    fx->cfg = NULL;
    bool done = false;
    for (unsigned long n = 1; !done && n < 1000; n++) {
        struct args a;
        args_set(&a, ARGS("-c", path, "-n", "flag", "-t", "f", "--no-verbose",
                          "-l", "*:1"));
        tu_alloc_fail_at(n);
        struct rs_config *cfg = rs_config_new(&fx->info);
        int rc = cfg != NULL ? rs_config_parse(cfg, a.argc, a.argv, NULL)
                             : RS_ENOMEM;
        unsigned long seen = tu_alloc_count();
        tu_alloc_fail_at(0);
        args_free(&a);
        if (rc == 0) {
            assert_true(seen < n);
            assert_string_equal(fx->conf.name, "flag");
            assert_string_equal(fx->conf.topics[0], "f");
            done = true;
        } else {
            assert_int_equal(rc, RS_ENOMEM);
            if (cfg != NULL)
                assert_string_equal(rs_config_errstr(cfg), "out of memory");
        }
        rs_config_free(cfg);
    }
    assert_true(done);
}

/* Tests are named module/behaviour, as in every unit test file. */
#define T(name, fn, su, td) { name, fn, su, td, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        T("config/free_null", test_free_null, NULL, NULL),
        T("config/defaults", test_defaults, setup, teardown),
        T("config/free_clears_fields", test_free_clears_fields,
          setup, teardown),
        T("config/flags_win", test_flags_win, setup, teardown),
        T("config/config_anywhere", test_config_anywhere, setup, teardown),
        T("config/values_ok", test_values_ok, setup, teardown),
        T("config/flag_errors", test_flag_errors, setup, teardown),
        T("config/file_errors", test_file_errors, setup, teardown),
        T("config/long_lines", test_long_lines, setup, teardown),
        T("config/sections", test_sections, setup, teardown),
        T("config/sections_once", test_sections_once, setup, teardown),
        T("config/opt_parse", test_opt_parse, NULL, NULL),
        T("config/lists", test_lists, setup, teardown),
        T("config/secrets", test_secrets, setup, teardown),
        T("config/help_exact", test_help_exact, NULL, NULL),
        T("config/help_version", test_help_version, setup, teardown),
        T("config/dump_exact", test_dump_exact, setup, teardown),
        T("config/hostport", test_hostport, NULL, NULL),
        T("config/table_errors", test_table_errors, NULL, NULL),
        T("config/operands", test_operands, setup, teardown),
        T("config/alloc_failure", test_alloc_failure, setup, teardown),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
