/*
 * rs_config.h - a program's options, declared once in a table and filled
 * from an INI file and the command line (flags win), with --help, --version
 * and a dump of the effective values. This module parses, validates and
 * owns the values it stores; what an option means is the program's
 * business. Nothing here prints except the help/version/dump functions,
 * which write to the FILE * they are given.
 */
#ifndef RS_CONFIG_H
#define RS_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rs_error.h"

/*
 * A program declares its options once:
 *
 *     static struct {
 *         struct rs_config_hostport listen;
 *         char *token;
 *         int64_t retention_ms;
 *         char **topics;
 *         bool verbose;
 *     } conf;
 *     static const struct rs_config_opt opts[] = {
 *         RS_CONFIG_HOSTPORT("listen", 'l', &conf.listen, "127.0.0.1:8080",
 *                            "address to listen on"),
 *         RS_CONFIG_SECRET("token", 0, &conf.token, "publisher bearer token"),
 *         RS_CONFIG_DURATION("retention", 0, &conf.retention_ms, "7d",
 *                            1000, 0, "how long the backlog keeps entries"),
 *         RS_CONFIG_LIST("topic", 't', &conf.topics, "NAME", NULL,
 *                        "topic to create at start-up"),
 *         RS_CONFIG_BOOL("verbose", 'v', &conf.verbose, NULL, "log more"),
 *         RS_CONFIG_END,
 *     };
 *
 * Each name is both the long option (--listen) and the key in the file's
 * main section. The macros check the destination's type at compile time.
 */
enum rs_config_type {
    RS_CONFIG_TYPE_STRING,   /* char **: any text, owned by the config */
    RS_CONFIG_TYPE_INT,      /* int64_t *: decimal, optional sign */
    RS_CONFIG_TYPE_SIZE,     /* uint64_t *: bytes; suffix K, M or G (1024^n),
                                optionally followed by B: 512, 64K, 1GB */
    RS_CONFIG_TYPE_DURATION, /* int64_t *: milliseconds; a number with unit
                                ms, s, m, h or d (30s, 5m); bare 0 only */
    RS_CONFIG_TYPE_BOOL,     /* bool *: true/false, yes/no, on/off, 1/0 */
    RS_CONFIG_TYPE_HOSTPORT, /* struct rs_config_hostport * */
    RS_CONFIG_TYPE_LIST,     /* char ***: NULL-terminated, repeatable */
};

struct rs_config_opt {
    const char *name;      /* [a-z0-9-]+; NULL ends the table */
    int letter;            /* short option letter, or 0 */
    enum rs_config_type type;
    void *dest;            /* the program's field, typed as listed above */
    const char *def;       /* default, written as in the file; NULL: none
                              (the zero value; lists empty) */
    const char *help;      /* one line, no final period needed */
    const char *metavar;   /* shown in --help (--name=METAVAR); NULL: from
                              the type */
    int64_t min, max;      /* INT, SIZE, DURATION (in ms): inclusive range;
                              both 0: any value */
    bool secret;           /* never echo the value: <secret> in help, dump
                              and error messages */
};

/* Type-checked table rows: a destination of the wrong type is a
 * "pointer type mismatch" diagnostic, not a silent overwrite. */
#define RS_CONFIG_CHECK_(type, ptr) ((void *)(1 ? (ptr) : (type)NULL))
#define RS_CONFIG_STRING(name, letter, ptr, metavar, def, help)              \
    { (name), (letter), RS_CONFIG_TYPE_STRING,                               \
      RS_CONFIG_CHECK_(char **, ptr), (def), (help), (metavar), 0, 0, false }
#define RS_CONFIG_SECRET(name, letter, ptr, help)                            \
    { (name), (letter), RS_CONFIG_TYPE_STRING,                               \
      RS_CONFIG_CHECK_(char **, ptr), NULL, (help), NULL, 0, 0, true }
#define RS_CONFIG_INT(name, letter, ptr, def, min, max, help)                \
    { (name), (letter), RS_CONFIG_TYPE_INT,                                  \
      RS_CONFIG_CHECK_(int64_t *, ptr), (def), (help), NULL, (min), (max),   \
      false }
#define RS_CONFIG_SIZE(name, letter, ptr, def, min, max, help)               \
    { (name), (letter), RS_CONFIG_TYPE_SIZE,                                 \
      RS_CONFIG_CHECK_(uint64_t *, ptr), (def), (help), NULL, (min), (max),  \
      false }
#define RS_CONFIG_DURATION(name, letter, ptr, def, min_ms, max_ms, help)     \
    { (name), (letter), RS_CONFIG_TYPE_DURATION,                             \
      RS_CONFIG_CHECK_(int64_t *, ptr), (def), (help), NULL, (min_ms),       \
      (max_ms), false }
#define RS_CONFIG_BOOL(name, letter, ptr, def, help)                         \
    { (name), (letter), RS_CONFIG_TYPE_BOOL, RS_CONFIG_CHECK_(bool *, ptr),  \
      (def), (help), NULL, 0, 0, false }
#define RS_CONFIG_HOSTPORT(name, letter, ptr, def, help)                     \
    { (name), (letter), RS_CONFIG_TYPE_HOSTPORT,                             \
      RS_CONFIG_CHECK_(struct rs_config_hostport *, ptr), (def), (help),     \
      NULL, 0, 0, false }
#define RS_CONFIG_LIST(name, letter, ptr, metavar, def, help)                \
    { (name), (letter), RS_CONFIG_TYPE_LIST,                                 \
      RS_CONFIG_CHECK_(char ***, ptr), (def), (help), (metavar), 0, 0,       \
      false }
/* The three logging options every daemon has (rs_log_setup applies them). */
#define RS_CONFIG_LOG(level_ptr, format_ptr, file_ptr)                      \
    RS_CONFIG_STRING("log-level", 0, (level_ptr), "LEVEL", "info",           \
                     "debug, info, warn or error"),                          \
    RS_CONFIG_STRING("log-format", 0, (format_ptr), "FORMAT", "auto",        \
                     "auto, text, logfmt or json"),                          \
    RS_CONFIG_STRING("log-file", 0, (file_ptr), "PATH", NULL,                \
                     "append logs to PATH (default stderr; SIGHUP reopens)")
#define RS_CONFIG_END { NULL, 0, RS_CONFIG_TYPE_STRING, NULL, NULL, NULL,    \
                        NULL, 0, 0, false }

/*
 * Called for every key of a section other than the main one. "[topic news]"
 * arrives as type "topic", name "news" (the text after the first space,
 * trimmed); "[redis]" as type "redis", name "". Return NULL to accept, or a
 * message ("expected a URL") that must stay valid until the callback
 * returns; the parse then fails with "FILE:LINE: [topic news] KEY: MESSAGE".
 * A section with no keys is never seen.
 */
typedef const char *(*rs_config_section_cb)(void *ud, const char *type,
                                            const char *name, const char *key,
                                            const char *value, int line);

struct rs_config_info {
    const char *program;     /* "rshub": --version, and [rshub] is an
                                alias of the main section */
    const char *version;     /* NULL: the project's RS_VERSION */
    const char *usage;       /* first lines of --help, without the final
                                newline: "Usage: rshub [OPTION]..." */
    const struct rs_config_opt *opts;   /* ended by RS_CONFIG_END */
    rs_config_section_cb on_section;    /* NULL: other sections are errors */
    void *section_ud;
};

/* A listening or connecting address. */
#define RS_CONFIG_HOST_MAX 256
struct rs_config_hostport {
    char host[RS_CONFIG_HOST_MAX]; /* name, IPv4, or IPv6 without brackets;
                                      "" for "*" (every address) */
    uint16_t port;                 /* 0: the kernel picks one */
};

/*
 * A config for one program. info is copied; the strings, table and
 * destinations it points to must outlive the config (static data).
 * NULL when out of memory.
 */
struct rs_config *rs_config_new(const struct rs_config_info *info);

/* Free every string and list the config stored, setting those fields back
 * to NULL. rs_config_free(NULL) is a no-op. */
void rs_config_free(struct rs_config *cfg);

/* Returned (positive) by rs_config_parse when argv asks for help or the
 * version: the caller writes it with rs_config_help/rs_config_version to
 * stdout and exits 0. They win over any other option and over errors. */
#define RS_CONFIG_WANT_HELP 1
#define RS_CONFIG_WANT_VERSION 2

/*
 * Fill every destination, once per config, in this order: defaults, then
 * the file named by -c/--config FILE (wherever it is in argv), then the
 * other flags in argv order. Builtin options: -c/--config, -h/--help,
 * -V/--version; a boolean --X also takes --no-X and --X=VALUE. Scalars
 * given twice on the command line: the last wins; in the file: an error.
 * A list takes every value of the source that sets it: flags replace the
 * file's values, which replace the default. A [section] header may appear
 * only once in the file ("[topic  a ]" is "[topic a]"): its keys are never
 * merged with those of an earlier header of the same name. Long options must be spelled
 * out (no GNU abbreviations, so adding an option never breaks a script).
 *
 * argv is permuted (GNU getopt). If argind is NULL, operands are an error;
 * otherwise *argind is the index of the first operand in argv.
 *
 * File syntax (libinih): "key = value", ";" or "#" comments at line start,
 * " ;" inline comments, [section] headers, continuation lines indented
 * (which repeat the key: fine for lists). Lines are at most 199 bytes
 * (a CR counts) and section names at most 49, the limits of Debian's
 * libinih build; longer ones are errors, not silently cut.
 *
 * Returns 0; RS_CONFIG_WANT_HELP or _VERSION; RS_EINVAL (bad value, unknown
 * key or option, bad table), RS_EIO (file unreadable), RS_ENOMEM or
 * RS_ESTATE (called twice), with the message in rs_config_errstr().
 */
int rs_config_parse(struct rs_config *cfg, int argc, char **argv,
                    int *argind) RS_MUST_CHECK;

/* The last error: "--listen: expected HOST:PORT, got 'abc'" or
 * "hub.conf:7: unknown key 'listn'". "" when there was none. */
const char *rs_config_errstr(const struct rs_config *cfg);

/* Whether the option named name got its value from the file or flags (not
 * from its default). False for unknown names. */
bool rs_config_is_set(const struct rs_config *cfg, const char *name);

/* Write the usage text and the options, aligned, with their defaults
 * (secrets as <secret>); or "PROGRAM VERSION\n". 0 or RS_EIO. */
int rs_config_help(const struct rs_config *cfg, FILE *out) RS_MUST_CHECK;
int rs_config_version(const struct rs_config *cfg, FILE *out) RS_MUST_CHECK;

/* Write the effective configuration, one "name = value" line per option
 * (one per item for lists; "# name is not set" when unset), in table
 * order, secrets as <secret>, in a form the file parser reads back.
 * 0 or RS_EIO. */
int rs_config_dump(const struct rs_config *cfg, FILE *out) RS_MUST_CHECK;

/*
 * Parse value as option o takes it (its type and range) into out, which
 * has the type of o->dest; o->dest is not touched. For a setting that a
 * section callback reads with an option's own rules ("[topic x]
 * backlog-max-age" as --backlog-max-age). Scalars other than strings only
 * (INT, SIZE, DURATION, BOOL, HOSTPORT). 0, or RS_EINVAL with "expected
 * a duration like 500ms, ..." in why (out untouched).
 */
int rs_config_opt_parse(const struct rs_config_opt *o, const char *value,
                        void *out, char *why, size_t whylen) RS_MUST_CHECK;

/* Parse "HOST:PORT": "[::1]:80", "127.0.0.1:0", "*:8080",
 * "localhost:8080". IPv6 needs brackets; the port is 0..65535. 0 or
 * RS_EINVAL (out untouched). */
int rs_config_hostport_parse(const char *s, struct rs_config_hostport *out)
    RS_MUST_CHECK;

/* Write hp back in the form above ("[::1]:80", "*:8080"). 0, or
 * RS_ETOOBIG when it does not fit in len bytes. */
int rs_config_hostport_format(const struct rs_config_hostport *hp, char *buf,
                              size_t len) RS_MUST_CHECK;

#endif
