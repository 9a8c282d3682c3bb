/*
 * rs_log.h - the one logger of every daemon and tool: levels, a program and
 * a per-file module name, key=value fields; human text on a TTY, one logfmt
 * (or JSON) line per event otherwise. Each event is one write(2), so lines
 * from several threads never interleave. What to log is the caller's choice;
 * this module owns only formatting and the destination.
 */
#ifndef RS_LOG_H
#define RS_LOG_H

#include <stdbool.h>
#include <stddef.h>

#include "rs_error.h"

enum rs_log_level {
    RS_LOG_DEBUG = 0,
    RS_LOG_INFO,
    RS_LOG_WARN,
    RS_LOG_ERROR,
};

enum rs_log_format {
    RS_LOG_AUTO = 0,   /* text when the destination is a TTY, else logfmt */
    RS_LOG_TEXT,       /* 2024-05-01T10:00:00.123Z INFO  module: msg k=v */
    RS_LOG_LOGFMT,     /* ts=... level=info module=m msg="..." k=v */
    RS_LOG_JSON,       /* {"ts":"...","level":"info","msg":"...","k":"v"} */
};

/* A line longer than this is cut, and the cut is marked (truncated=true),
 * so that every event stays one atomic write even into a pipe (PIPE_BUF). */
#define RS_LOG_LINE_MAX 4096

struct rs_log_opts {
    enum rs_log_level level;   /* events below it are dropped */
    enum rs_log_format format;
    const char *app;           /* program name ("rshub"); NULL to omit */
    const char *path;          /* append to this file; NULL: stderr */
    bool no_ts;                /* omit the timestamp (journald adds its own) */
};

/*
 * (Re)configure the logger; opts NULL means the defaults (info, auto,
 * stderr). Strings are copied. Call it before other threads log. Before any
 * call, the logger writes to stderr with the defaults. Returns 0, or
 * RS_EIO when path cannot be opened (the logger then keeps its previous
 * destination), RS_EINVAL for an unknown level or format.
 */
int rs_log_init(const struct rs_log_opts *opts) RS_MUST_CHECK;

/* A daemon's --log-level, --log-format and --log-file (RS_CONFIG_LOG in
 * rs_config.h) checked and applied: rs_log_init for app. 0, or an error
 * with a one-line reason naming the option in err. */
int rs_log_setup(const char *app, const char *level, const char *format,
                 const char *path, char *err, size_t errsz) RS_MUST_CHECK;

/* Reopen the log file (for SIGHUP after rotation); a no-op on stderr. The
 * new file takes the old descriptor's number (dup2), so threads logging
 * meanwhile never write to a closed descriptor. Not async-signal-safe:
 * call it from the loop, not the handler. */
int rs_log_reopen(void) RS_MUST_CHECK;
/* The log file's path, NULL when logging to stderr. */
const char *rs_log_path(void);

/* Change the threshold at any time, from any thread. */
void rs_log_set_level(enum rs_log_level level);
bool rs_log_enabled(enum rs_log_level level);

/* Close the log file (if any) and go back to stderr defaults. */
void rs_log_shutdown(void);

/* For command-line parsing: "debug|info|warn|error" and
 * "auto|text|logfmt|json" (case-insensitive). 0 or RS_EINVAL. */
int rs_log_level_from(const char *s, enum rs_log_level *out) RS_MUST_CHECK;
int rs_log_format_from(const char *s, enum rs_log_format *out) RS_MUST_CHECK;
const char *rs_log_level_name(enum rs_log_level level);

/*
 * Emitting. A .c file that wants its module named on every line defines
 * RS_LOG_MODULE (a string literal) before including this header:
 *
 *     #define RS_LOG_MODULE "backlog"
 *     #include "rs_log.h"
 *     rs_log(RS_LOG_WARN, "trimmed %zu entries", n);
 *     rs_log_kv(RS_LOG_INFO, "publish accepted", "channel", ch, "id", id, NULL);
 *
 * rs_log_kv takes key, value string pairs ended by one NULL in key position;
 * a NULL value is written as an empty string. Message and values may hold any bytes: quotes,
 * backslashes and control characters (newlines included) are escaped, so an
 * event is always exactly one line. errno is preserved.
 */
#ifndef RS_LOG_MODULE
#define RS_LOG_MODULE NULL
#endif

#define rs_log(level, ...) rs_log_emit((level), RS_LOG_MODULE, __VA_ARGS__)
#define rs_log_kv(level, ...) rs_log_emit_kv((level), RS_LOG_MODULE, __VA_ARGS__)

void rs_log_emit(enum rs_log_level level, const char *module, const char *fmt,
                 ...) __attribute__((format(printf, 3, 4)));
void rs_log_emit_kv(enum rs_log_level level, const char *module,
                    const char *msg, ...) __attribute__((sentinel));

#endif
