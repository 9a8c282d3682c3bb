/*
 * tokenfile.c - secrets read from files (rs_tokenfile.h): the permission
 * check every daemon applies to its token, netrc and key files, the
 * first-line token and the small secret text. One copy for rssource,
 * rsbridge and rssub; what a secret is for stays with them.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rs_alloc.h"
#include "rs_tokenfile.h"

static void
tf_err(char *err, size_t errsz, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
tf_err(char *err, size_t errsz, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || errsz == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errsz, fmt, ap);
    va_end(ap);
}

/* Bytes of a UTF-8 byte order mark at the start of s (len bytes), as some
 * editors write: never part of a secret, and a token with it never
 * matches. */
static size_t
tf_bom(const char *s, size_t len)
{
    return len >= 3 && memcmp(s, "\xef\xbb\xbf", 3) == 0 ? 3 : 0;
}

/* Open path and check who may read it; the fd, or a negative RS_E*. */
static int
tf_open(const char *path, bool insecure, struct stat *st, char *err,
        size_t errsz)
{
    int fd;

    if (path == NULL) {
        tf_err(err, errsz, "no file named");
        return RS_EINVAL;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0 || fstat(fd, st) != 0) {
        tf_err(err, errsz, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return RS_EIO;
    }
    /* A secret others can read is no longer one: say so before using it,
     * the way ssh refuses a private key with loose modes. */
    if (!insecure && (st->st_mode & (S_IRGRP | S_IROTH)) != 0) {
        tf_err(err, errsz, "%s is readable by group or others (mode %04o): "
               "chmod 600, or --insecure-token-file", path,
               (unsigned)(st->st_mode & 07777));
        close(fd);
        return RS_EDENIED;
    }
    return fd;
}

int
rs_tokenfile_check(const char *path, bool insecure, char *err, size_t errsz)
{
    struct stat st;
    int fd = tf_open(path, insecure, &st, err, errsz);

    if (fd < 0)
        return fd;
    close(fd);
    return 0;
}

int
rs_tokenfile_read(const char *path, bool insecure, char *buf, size_t bufsz,
                  char *err, size_t errsz)
{
    char raw[RS_TOKENFILE_MAX + 2];
    struct stat st;
    size_t len;
    ssize_t n;
    char *b, *nl;
    int fd, rc = 0;

    if (buf == NULL || bufsz == 0)
        return RS_EINVAL;
    buf[0] = '\0';
    fd = tf_open(path, insecure, &st, err, errsz);
    if (fd < 0)
        return fd;
    /* One read: a token file is small, and a longer first line is refused
     * whatever follows it. */
    n = read(fd, raw, sizeof(raw) - 1);
    close(fd);
    if (n < 0) {
        tf_err(err, errsz, "%s: %s", path, strerror(errno));
        return RS_EIO;
    }
    raw[n] = '\0';
    nl = strpbrk(raw, "\r\n");
    if (nl != NULL)
        *nl = '\0';
    b = raw + tf_bom(raw, (size_t)n);
    while (*b == ' ' || *b == '\t')
        b++;
    len = strlen(b);
    while (len > 0 && (b[len - 1] == ' ' || b[len - 1] == '\t'))
        b[--len] = '\0';
    if (len == 0 || len > RS_TOKENFILE_MAX || len >= bufsz ||
        strpbrk(b, " \t") != NULL) {
        tf_err(err, errsz, "%s: empty, too long or holds white space",
               path);
        rc = RS_EINVAL;
        goto out;
    }
    memcpy(buf, b, len + 1);
out:
    explicit_bzero(raw, sizeof(raw));
    return rc;
}

int
rs_tokenfile_read_text(const char *path, bool insecure, size_t max,
                       char **out, size_t *len, char *err, size_t errsz)
{
    struct stat st;
    char *text = NULL;
    size_t have = 0;
    int fd, rc = 0;

    if (out == NULL || max == 0 || max > SIZE_MAX - 2)
        return RS_EINVAL;
    *out = NULL;
    if (len != NULL)
        *len = 0;
    fd = tf_open(path, insecure, &st, err, errsz);
    if (fd < 0)
        return fd;
    /* max + 1 so that a file of exactly max bytes is told from a longer
     * one; the file's size is not trusted (it may grow meanwhile). */
    text = rs_malloc(max + 2);
    if (text == NULL) {
        rc = RS_ENOMEM;
        tf_err(err, errsz, "%s: out of memory", path);
        goto out;
    }
    for (;;) {
        ssize_t n = read(fd, text + have, max + 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            tf_err(err, errsz, "%s: %s", path, strerror(errno));
            rc = RS_EIO;
            goto out;
        }
        if (n == 0)
            break;
        have += (size_t)n;
        if (have > max) {
            tf_err(err, errsz, "%s: longer than %zu bytes", path, max);
            rc = RS_ETOOBIG;
            goto out;
        }
    }
    size_t bom = tf_bom(text, have);
    memmove(text, text + bom, have - bom);
    have -= bom;
    text[have] = '\0';
    if (memchr(text, '\0', have) != NULL) {
        tf_err(err, errsz, "%s: holds a NUL byte", path);
        rc = RS_EINVAL;
        goto out;
    }
    *out = text;
    if (len != NULL)
        *len = have;
    text = NULL;
out:
    close(fd);
    if (text != NULL) {
        explicit_bzero(text, max + 2);
        rs_free(text);
    }
    return rc;
}

void
rs_tokenfile_text_free(char *text)
{
    if (text == NULL)
        return;
    explicit_bzero(text, strlen(text));
    rs_free(text);
}
