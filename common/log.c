/*
 * log.c - the logger (rs_log.h): builds each event in a fixed buffer in one
 * of three formats and hands it to the kernel in one write(2). Owns the
 * destination descriptor and its reopening; knows nothing of what callers
 * log.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "rs_alloc.h"
#include "rs_log.h"

/* Configuration. Written only by rs_log_init/shutdown (before threads log,
 * by contract); the level alone may change while others log. */
static atomic_int log_level = RS_LOG_INFO;
static enum rs_log_format log_format = RS_LOG_AUTO;
static int log_fd = STDERR_FILENO;
static char *log_path;              /* owned; NULL when logging to stderr */
static char log_app[64];            /* "" when omitted */
static bool log_no_ts;

static const char *const log_level_names[] = {
    [RS_LOG_DEBUG] = "debug",
    [RS_LOG_INFO] = "info",
    [RS_LOG_WARN] = "warn",
    [RS_LOG_ERROR] = "error",
};

static const char *const log_level_text[] = {
    [RS_LOG_DEBUG] = "DEBUG",
    [RS_LOG_INFO] = "INFO ",
    [RS_LOG_WARN] = "WARN ",
    [RS_LOG_ERROR] = "ERROR",
};

static const char *const log_format_names[] = {
    [RS_LOG_AUTO] = "auto",
    [RS_LOG_TEXT] = "text",
    [RS_LOG_LOGFMT] = "logfmt",
    [RS_LOG_JSON] = "json",
};

/* --------------------------------------------------------- configuration */

static int
log_open(const char *path)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    return fd >= 0 ? fd : RS_EIO;
}

int
rs_log_init(const struct rs_log_opts *opts)
{
    static const struct rs_log_opts defaults = { .level = RS_LOG_INFO };
    if (opts == NULL)
        opts = &defaults;
    if ((unsigned)opts->level > RS_LOG_ERROR ||
        (unsigned)opts->format > RS_LOG_JSON)
        return RS_EINVAL;

    int fd = STDERR_FILENO;
    char *path = NULL;
    if (opts->path != NULL) {
        path = rs_strdup(opts->path);
        if (path == NULL)
            return RS_ENOMEM;
        fd = log_open(path);
        if (fd < 0) {
            rs_free(path);
            return fd;
        }
    }
    if (log_path != NULL)
        close(log_fd);
    rs_free(log_path);
    log_path = path;
    log_fd = fd;
    log_format = opts->format;
    if (log_format == RS_LOG_AUTO)
        log_format = isatty(fd) ? RS_LOG_TEXT : RS_LOG_LOGFMT;
    snprintf(log_app, sizeof(log_app), "%s", opts->app ? opts->app : "");
    log_no_ts = opts->no_ts;
    atomic_store(&log_level, (int)opts->level);
    return 0;
}

/* libevent's own messages ("getaddrinfo: ...", an epoll that fails) in the
 * log's format and destination, not as a bare "[warn] ..." on stderr. */
static void
on_libevent_log(int severity, const char *msg)
{
    enum rs_log_level lv = severity == EVENT_LOG_ERR    ? RS_LOG_ERROR
                         : severity == EVENT_LOG_WARN   ? RS_LOG_WARN
                         : severity == EVENT_LOG_MSG    ? RS_LOG_INFO
                                                        : RS_LOG_DEBUG;
    rs_log_emit(lv, "libevent", "%s", msg);
}

int
rs_log_setup(const char *app, const char *level, const char *format,
             const char *path, char *err, size_t errsz)
{
    struct rs_log_opts lo = { .app = app, .path = path };
    int rc;

    event_set_log_callback(on_libevent_log);
    if (rs_log_level_from(level, &lo.level) != 0) {
        snprintf(err, errsz, "--log-level %s: expected debug, info, warn or "
                 "error", level != NULL ? level : "(none)");
        return RS_EINVAL;
    }
    if (rs_log_format_from(format, &lo.format) != 0) {
        snprintf(err, errsz, "--log-format %s: expected auto, text, logfmt "
                 "or json", format != NULL ? format : "(none)");
        return RS_EINVAL;
    }
    if ((rc = rs_log_init(&lo)) != 0)
        snprintf(err, errsz, "cannot open the log file %s: %s",
                 path != NULL ? path : "(stderr)", strerror(errno));
    return rc;
}

const char *
rs_log_path(void)
{
    return log_path;
}

int
rs_log_reopen(void)
{
    if (log_path == NULL)
        return 0;
    int fd = log_open(log_path);
    if (fd < 0)
        return fd;
    int rc = dup2(fd, log_fd) < 0 ? RS_EIO : 0;
    close(fd);
    return rc;
}

void
rs_log_shutdown(void)
{
    if (log_path != NULL)
        close(log_fd);
    rs_free(log_path);
    log_path = NULL;
    log_fd = STDERR_FILENO;
    log_format = RS_LOG_AUTO;
    log_app[0] = '\0';
    log_no_ts = false;
    atomic_store(&log_level, RS_LOG_INFO);
}

void
rs_log_set_level(enum rs_log_level level)
{
    if ((unsigned)level <= RS_LOG_ERROR)
        atomic_store_explicit(&log_level, (int)level, memory_order_relaxed);
}

bool
rs_log_enabled(enum rs_log_level level)
{
    return (int)level >= atomic_load_explicit(&log_level, memory_order_relaxed);
}

int
rs_log_level_from(const char *s, enum rs_log_level *out)
{
    for (unsigned i = 0; s != NULL && i <= RS_LOG_ERROR; i++)
        if (strcasecmp(s, log_level_names[i]) == 0) {
            *out = (enum rs_log_level)i;
            return 0;
        }
    if (s != NULL && strcasecmp(s, "warning") == 0) {
        *out = RS_LOG_WARN;
        return 0;
    }
    return RS_EINVAL;
}

int
rs_log_format_from(const char *s, enum rs_log_format *out)
{
    for (unsigned i = 0; s != NULL && i <= RS_LOG_JSON; i++)
        if (strcasecmp(s, log_format_names[i]) == 0) {
            *out = (enum rs_log_format)i;
            return 0;
        }
    return RS_EINVAL;
}

const char *
rs_log_level_name(enum rs_log_level level)
{
    return (unsigned)level <= RS_LOG_ERROR ? log_level_names[level] : "";
}

/* ------------------------------------------------------------ line buffer */

/* Room kept at the end of a line for closing a cut one: a quote,
 * ,"truncated":true} and the newline. */
#define LINE_RESERVE 32

struct line {
    enum rs_log_format fmt;
    size_t len;
    size_t limit;       /* content may not pass this; the reserve follows */
    bool cut;           /* something did not fit; nothing more is added */
    bool in_quote;      /* a quoted string is open (close it when cut) */
    char buf[RS_LOG_LINE_MAX];
};

/* All or nothing, so an escape or a UTF-8 sequence is never split. */
static bool
line_put(struct line *l, const char *s, size_t n)
{
    if (l->cut || n > l->limit - l->len) {
        l->cut = true;
        return false;
    }
    memcpy(l->buf + l->len, s, n);
    l->len += n;
    return true;
}

static bool
line_puts(struct line *l, const char *s)
{
    return line_put(l, s, strlen(s));
}

/* Length of the valid UTF-8 sequence at s (2..4), or 0 if it is not one:
 * overlong forms, surrogates and code points past U+10FFFF are invalid. */
static size_t
line_utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        need = 2;
    else if (c >= 0xe0 && c <= 0xef)
        need = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        need = 4;
    else
        return 0;
    if (c == 0xe0)
        lo = 0xa0;
    else if (c == 0xed)
        hi = 0x9f;
    else if (c == 0xf0)
        lo = 0x90;
    else if (c == 0xf4)
        hi = 0x8f;
    if (n < need || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < need; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return need;
}

/* Escaped text with the escapes JSON defines (also valid logfmt, whose
 * readers unquote Go-style): the result is always valid UTF-8, invalid
 * input bytes becoming U+FFFD. Bare text (not in quotes) keeps its quotes
 * and backslashes, which only matter inside a quoted string. */
static void
line_escaped(struct line *l, const char *s, size_t n, bool quoted)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n && !l->cut; i++) {
        unsigned char c = p[i];
        char esc[8];
        if (quoted && (c == '"' || c == '\\')) {
            esc[0] = '\\';
            esc[1] = (char)c;
            line_put(l, esc, 2);
        } else if (c == '\n') {
            line_put(l, "\\n", 2);
        } else if (c == '\r') {
            line_put(l, "\\r", 2);
        } else if (c == '\t') {
            line_put(l, "\\t", 2);
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            line_put(l, esc, 6);
        } else if (c < 0x80) {
            line_put(l, (const char *)p + i, 1);
        } else {
            size_t k = line_utf8_len(p + i, n - i);
            if (k == 0) {
                line_put(l, "\\ufffd", 6);
            } else {
                line_put(l, (const char *)p + i, k);
                i += k - 1;
            }
        }
    }
}

static void
line_quoted(struct line *l, const char *s, size_t n)
{
    if (!line_put(l, "\"", 1))
        return;
    l->in_quote = true;
    line_escaped(l, s, n, true);
    if (line_put(l, "\"", 1))
        l->in_quote = false;
}

/* logfmt leaves plain printable ASCII bare; anything else gets quotes. */
static bool
line_needs_quotes(const char *s, size_t n)
{
    if (n == 0)
        return true;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c >= 0x7f || c == '=' || c == '"' || c == '\\')
            return true;
    }
    return false;
}

/* Keys are identifiers in every format; other bytes become '_'. */
static void
line_key(struct line *l, const char *key)
{
    if (*key == '\0') {
        line_put(l, "_", 1);
        return;
    }
    for (const char *k = key; *k != '\0'; k++) {
        char c = *k;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                  c == '.' || c == '/';
        if (!line_put(l, ok ? k : "_", 1))
            return;
    }
}

/* One key=value member in the line's format. A key that does not fit is
 * taken back whole, so a cut line never ends in a dangling key. */
static void
line_field(struct line *l, const char *key, const char *val)
{
    size_t mark = l->len;
    size_t n = val != NULL ? strlen(val) : 0;
    if (val == NULL)
        val = "";
    if (l->fmt == RS_LOG_JSON) {
        line_put(l, ",\"", 2);
        line_key(l, key);
        line_put(l, "\":", 2);
    } else {
        line_put(l, " ", 1);
        line_key(l, key);
        line_put(l, "=", 1);
    }
    if (l->cut) {
        l->len = mark;
        return;
    }
    if (l->fmt == RS_LOG_JSON || line_needs_quotes(val, n)) {
        line_quoted(l, val, n);
    } else if (!line_put(l, val, n)) {
        /* as much as fits, as a quoted one gets: a long URL cut is still
         * told by its start (printable ASCII: any byte may end it) */
        size_t room = l->limit - l->len;
        memcpy(l->buf + l->len, val, room);
        l->len += room;
    }
}

static void
line_begin(struct line *l, enum rs_log_format fmt, enum rs_log_level level,
           const char *module, const char *msg)
{
    char ts[48] = "";
    l->fmt = fmt;
    l->len = 0;
    l->limit = sizeof(l->buf) - LINE_RESERVE;
    l->cut = false;
    l->in_quote = false;
    if (!log_no_ts) {
        struct timespec now;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &now);
        gmtime_r(&now.tv_sec, &tm);
        snprintf(ts, sizeof(ts), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                 tm.tm_min, tm.tm_sec, (int)(now.tv_nsec / 1000000));
    }

    switch (fmt) {
    case RS_LOG_JSON:
        line_put(l, "{", 1);
        if (ts[0] != '\0') {
            line_puts(l, "\"ts\":\"");
            line_puts(l, ts);
            line_puts(l, "\",");
        }
        line_puts(l, "\"level\":\"");
        line_puts(l, log_level_names[level]);
        line_puts(l, "\"");
        if (log_app[0] != '\0')
            line_field(l, "app", log_app);
        if (module != NULL)
            line_field(l, "module", module);
        line_field(l, "msg", msg);
        break;
    case RS_LOG_LOGFMT:
        if (ts[0] != '\0') {
            line_puts(l, "ts=");
            line_puts(l, ts);
            line_puts(l, " ");
        }
        line_puts(l, "level=");
        line_puts(l, log_level_names[level]);
        if (log_app[0] != '\0')
            line_field(l, "app", log_app);
        if (module != NULL)
            line_field(l, "module", module);
        line_puts(l, " msg=");
        line_quoted(l, msg, strlen(msg));
        break;
    default:
        /* Text is for a person at a terminal, who knows which program
         * runs; the message goes bare, its control characters escaped. */
        if (ts[0] != '\0') {
            line_puts(l, ts);
            line_puts(l, " ");
        }
        line_puts(l, log_level_text[level]);
        line_puts(l, " ");
        if (module != NULL) {
            line_puts(l, module);
            line_puts(l, ": ");
        }
        line_escaped(l, msg, strlen(msg), false);
        break;
    }
}

static void
line_end_and_write(struct line *l, int fd)
{
    l->limit = sizeof(l->buf);
    if (l->cut) {
        l->cut = false;
        if (l->in_quote)
            line_put(l, "\"", 1);
        line_puts(l, l->fmt == RS_LOG_JSON ? ",\"truncated\":true"
                                           : " truncated=true");
    }
    if (l->fmt == RS_LOG_JSON)
        line_put(l, "}", 1);
    line_put(l, "\n", 1);

    size_t off = 0;
    while (off < l->len) {
        ssize_t n = write(fd, l->buf + off, l->len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;   /* nowhere left to report a logging failure */
        off += (size_t)n;
    }
}

/* ---------------------------------------------------------------- emitting */

static enum rs_log_format
log_current_format(void)
{
    /* Only before rs_log_init: then the destination is stderr. */
    if (log_format == RS_LOG_AUTO)
        return isatty(log_fd) ? RS_LOG_TEXT : RS_LOG_LOGFMT;
    return log_format;
}

void
rs_log_emit(enum rs_log_level level, const char *module, const char *fmt, ...)
{
    if ((unsigned)level > RS_LOG_ERROR || !rs_log_enabled(level))
        return;
    int saved = errno;
    struct line l;
    char msg[RS_LOG_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    line_begin(&l, log_current_format(), level, module, msg);
    line_end_and_write(&l, log_fd);
    errno = saved;
}

void
rs_log_emit_kv(enum rs_log_level level, const char *module, const char *msg,
               ...)
{
    if ((unsigned)level > RS_LOG_ERROR || !rs_log_enabled(level))
        return;
    int saved = errno;
    struct line l;
    va_list ap;
    line_begin(&l, log_current_format(), level, module,
               msg != NULL ? msg : "");
    va_start(ap, msg);
    for (;;) {
        const char *key = va_arg(ap, const char *);
        if (key == NULL)
            break;
        const char *val = va_arg(ap, const char *);
        line_field(&l, key, val);
    }
    va_end(ap);
    line_end_and_write(&l, log_fd);
    errno = saved;
}
