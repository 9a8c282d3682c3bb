/*
 * pubid.c - X-Publish-Id values (rs_pubid.h). The random bytes of a new
 * KEY come from getrandom(2). A KEY has to be unique among the publishers
 * of a topic. It does not have to be secret: the topic's token is what
 * authorizes a publish.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "rs_pubid.h"

static bool
pubid_blank(char c)
{
    return c == ' ' || c == '\t';
}

static bool
pubid_key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

bool
rs_pubid_key_ok(const char *key)
{
    size_t n = 0;
    if (key == NULL)
        return false;
    for (; key[n] != '\0'; n++)
        if (n >= RS_PUBID_KEY_MAX || !pubid_key_char(key[n]))
            return false;
    return n > 0;
}

int
rs_pubid_parse(const char *value, struct rs_pubid *out, const char **why)
{
    const char *p = value, *end;
    *why = "X-Publish-Id must be KEY:SEQ (KEY 1 to 64 of A-Z a-z 0-9 . _ -, "
           "SEQ a decimal 1 to 9223372036854775807)";
    if (value == NULL)
        return RS_EINVAL;
    while (pubid_blank(*p))
        p++;
    end = p + strlen(p);
    while (end > p && pubid_blank(end[-1]))
        end--;
    const char *colon = memchr(p, ':', (size_t)(end - p));
    if (colon == NULL)
        return RS_EINVAL;
    size_t klen = (size_t)(colon - p);
    if (klen == 0 || klen > RS_PUBID_KEY_MAX) {
        *why = klen == 0 ? "X-Publish-Id: empty KEY (KEY:SEQ)"
                         : "X-Publish-Id: KEY longer than 64 bytes";
        return RS_EINVAL;
    }
    for (size_t i = 0; i < klen; i++) {
        if (!pubid_key_char(p[i])) {
            *why = "X-Publish-Id: KEY may hold only A-Z a-z 0-9 . _ -";
            return RS_EINVAL;
        }
    }
    const char *s = colon + 1;
    uint64_t seq = 0;
    if (s == end) {
        *why = "X-Publish-Id: empty SEQ (KEY:SEQ)";
        return RS_EINVAL;
    }
    for (; s < end; s++) {
        if (*s < '0' || *s > '9') {
            *why = "X-Publish-Id: SEQ must be decimal digits only";
            return RS_EINVAL;
        }
        unsigned d = (unsigned)(*s - '0');
        if (seq > (RS_PUBID_SEQ_MAX - d) / 10) {
            *why = "X-Publish-Id: SEQ above 9223372036854775807";
            return RS_EINVAL;
        }
        seq = seq * 10 + d;
    }
    if (seq == 0) {
        *why = "X-Publish-Id: SEQ must be at least 1";
        return RS_EINVAL;
    }
    memcpy(out->key, p, klen);
    out->key[klen] = '\0';
    out->seq = seq;
    *why = NULL;
    return 0;
}

int
rs_pubid_format(const char *key, uint64_t seq, char *buf, size_t len)
{
    if (!rs_pubid_key_ok(key) || seq == 0 || seq > RS_PUBID_SEQ_MAX)
        return RS_EINVAL;
    int n = snprintf(buf, len, "%s:%llu", key, (unsigned long long)seq);
    return n > 0 && (size_t)n < len ? 0 : RS_EINVAL;
}

int
rs_pubid_key_new(char *buf, size_t len)
{
    unsigned char r[RS_PUBID_NEWKEY_LEN / 2];
    size_t got = 0;
    if (len <= RS_PUBID_NEWKEY_LEN)
        return RS_EINVAL;
    while (got < sizeof(r)) {
        ssize_t n = getrandom(r + got, sizeof(r) - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return RS_EIO;
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(r); i++)
        snprintf(buf + 2 * i, 3, "%02x", r[i]);
    return 0;
}
