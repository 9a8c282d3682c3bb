/*
 * hash.c - fixity values (rs_hash.h): the `hash` attribute's text form, the
 * comparison a Destination makes before fetching, and streaming digests
 * over OpenSSL EVP. Which attribute carries a hash, and what a mismatch
 * means, is left to the parser and the subscriber.
 */
#include <pthread.h>
#include <string.h>

#include <openssl/evp.h>

#include "rs_alloc.h"
#include "rs_hash.h"
#include "rs_hex.h"

#define HASH_NALGOS 5   /* enum rs_hash_algo values, OTHER included */

struct hash_algo_info {
    const char *name;
    uint8_t len;                  /* digest bytes */
    const EVP_MD *(*md)(void);
    const char *fetch;            /* OpenSSL's name for EVP_MD_fetch */
};

/* Indexed by enum rs_hash_algo; the names are the IANA "Hash Function
 * Textual Names" that ResourceSync uses. */
static const struct hash_algo_info hash_algos[HASH_NALGOS] = {
    [RS_HASH_OTHER] = { "", 0, NULL, NULL },
    [RS_HASH_MD5] = { "md5", 16, EVP_md5, "MD5" },
    [RS_HASH_SHA1] = { "sha-1", 20, EVP_sha1, "SHA1" },
    [RS_HASH_SHA256] = { "sha-256", 32, EVP_sha256, "SHA256" },
    [RS_HASH_SHA512] = { "sha-512", 64, EVP_sha512, "SHA512" },
};

/* Each digest's implementation, fetched once for the process. Handing
 * OpenSSL 3 EVP_sha256() and the like makes every EVP_DigestInit_ex
 * look the implementation up again under the library's lock: at 100,000
 * small dump members on two threads that lock was 5% of the writers'
 * CPU. Kept for the process's life, as OpenSSL keeps its own. */
static EVP_MD *hash_fetched[HASH_NALGOS];
static pthread_once_t hash_fetch_once = PTHREAD_ONCE_INIT;

static void
hash_fetch_all(void)
{
    for (int a = RS_HASH_MD5; a < HASH_NALGOS; a++)
        hash_fetched[a] = EVP_MD_fetch(NULL, hash_algos[a].fetch, NULL);
}

/* algo's implementation: the fetched one, else (a provider without it,
 * which then fails at init as before) the legacy handle. */
static const EVP_MD *
hash_md(int a)
{
    pthread_once(&hash_fetch_once, hash_fetch_all);
    return hash_fetched[a] != NULL ? hash_fetched[a] : hash_algos[a].md();
}

/* ------------------------------------------------------ attribute text */

static bool
attr_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* One NAME:HEX item spanning [p, e) into *d. */
static int
attr_parse_item(const char *p, const char *e, struct rs_digest *d)
{
    const char *colon = memchr(p, ':', (size_t)(e - p));
    if (colon == NULL || colon == p || colon - p >= RS_HASH_NAMELEN)
        return RS_EINVAL;

    size_t nlen = (size_t)(colon - p);
    for (size_t i = 0; i < nlen; i++) {
        char c = p[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return RS_EINVAL;
        d->name[i] = c;
    }
    d->name[nlen] = '\0';

    d->algo = RS_HASH_OTHER;
    for (int a = RS_HASH_MD5; a < HASH_NALGOS; a++) {
        if (strcmp(d->name, hash_algos[a].name) == 0) {
            d->algo = (enum rs_hash_algo)a;
            break;
        }
    }

    const char *h = colon + 1;
    size_t hlen = (size_t)(e - h);
    if (hlen == 0 || hlen % 2 != 0 || hlen / 2 > RS_HASH_MAXLEN)
        return RS_EINVAL;
    if (d->algo != RS_HASH_OTHER && hlen / 2 != hash_algos[d->algo].len)
        return RS_EINVAL;
    for (size_t i = 0; i < hlen / 2; i++) {
        int hi = rs_hexval(h[2 * i]);
        int lo = rs_hexval(h[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return RS_EINVAL;
        d->bytes[i] = (uint8_t)(hi << 4 | lo);
    }
    d->len = (uint8_t)(hlen / 2);
    return 0;
}

static bool
attr_same_algo(const struct rs_digest *a, const struct rs_digest *b)
{
    if (a->algo != b->algo)
        return false;
    return a->algo != RS_HASH_OTHER || strcmp(a->name, b->name) == 0;
}

int
rs_hashes_parse(const char *s, size_t len, struct rs_hashes *out)
{
    if (s == NULL || out == NULL)
        return RS_EINVAL;
    /* Built aside so that a refused attribute leaves *out as it was. */
    struct rs_hashes h;
    h.n = 0;
    const char *p = s, *e = s + len;
    for (;;) {
        while (p < e && attr_is_space(*p))
            p++;
        if (p == e)
            break;
        const char *item = p;
        while (p < e && !attr_is_space(*p))
            p++;
        if (h.n == RS_HASH_MAX)
            return RS_EINVAL;
        struct rs_digest *d = &h.d[h.n];
        int rc = attr_parse_item(item, p, d);
        if (rc < 0)
            return rc;
        for (unsigned i = 0; i < h.n; i++) {
            if (attr_same_algo(&h.d[i], d))
                return RS_EINVAL;
        }
        h.n++;
    }
    if (h.n == 0)
        return RS_EINVAL;
    *out = h;
    return 0;
}

size_t
rs_hashes_format(const struct rs_hashes *h, char *buf)
{
    static const char hex[] = "0123456789abcdef";
    char *p = buf;
    unsigned n = h == NULL ? 0 : h->n;
    if (n > RS_HASH_MAX)
        n = RS_HASH_MAX;
    for (unsigned i = 0; i < n; i++) {
        const struct rs_digest *d = &h->d[i];
        /* A digest built by hand may leave the name empty; known
         * algorithms have a canonical one. */
        const char *name = d->name;
        if (name[0] == '\0' && d->algo > RS_HASH_OTHER
            && d->algo < HASH_NALGOS)
            name = hash_algos[d->algo].name;
        size_t nlen = strnlen(name, RS_HASH_NAMELEN - 1);
        if (i > 0)
            *p++ = ' ';
        memcpy(p, name, nlen);
        p += nlen;
        *p++ = ':';
        unsigned dlen = d->len > RS_HASH_MAXLEN ? RS_HASH_MAXLEN : d->len;
        for (unsigned j = 0; j < dlen; j++) {
            *p++ = hex[d->bytes[j] >> 4];
            *p++ = hex[d->bytes[j] & 0xf];
        }
    }
    *p = '\0';
    return (size_t)(p - buf);
}

const struct rs_digest *
rs_hashes_find(const struct rs_hashes *h, enum rs_hash_algo algo)
{
    if (h == NULL)
        return NULL;
    for (unsigned i = 0; i < h->n && i < RS_HASH_MAX; i++) {
        if (h->d[i].algo == algo)
            return &h->d[i];
    }
    return NULL;
}

enum rs_hash_algo
rs_hashes_strongest(const struct rs_hashes *h)
{
    static const enum rs_hash_algo pref[] = { RS_HASH_SHA256, RS_HASH_SHA512,
                                              RS_HASH_SHA1, RS_HASH_MD5 };

    for (size_t i = 0; i < sizeof(pref) / sizeof(pref[0]); i++)
        if (rs_hashes_find(h, pref[i]) != NULL)
            return pref[i];
    return RS_HASH_OTHER;
}

int
rs_hashes_match(const struct rs_hashes *a, const struct rs_hashes *b)
{
    int common = 0;
    for (int algo = RS_HASH_MD5; algo < HASH_NALGOS; algo++) {
        const struct rs_digest *da = rs_hashes_find(a, (enum rs_hash_algo)algo);
        const struct rs_digest *db = rs_hashes_find(b, (enum rs_hash_algo)algo);
        if (da == NULL || db == NULL)
            continue;
        if (da->len != db->len || memcmp(da->bytes, db->bytes, da->len) != 0)
            return -1;
        common++;
    }
    return common > 0 ? 1 : 0;
}

/* -------------------------------------------------------------- hasher */

struct rs_hasher {
    unsigned algos;                     /* supported bits of the mask */
    int err;                            /* first update failure, until final */
    EVP_MD_CTX *ctx[HASH_NALGOS];       /* non-NULL exactly for algos */
};

static int
hasher_start(struct rs_hasher *h)
{
    for (int a = RS_HASH_MD5; a < HASH_NALGOS; a++) {
        if (h->ctx[a] != NULL
            && EVP_DigestInit_ex(h->ctx[a], hash_md(a), NULL) != 1)
            return RS_EUNSUPPORTED;
    }
    h->err = 0;
    return 0;
}

struct rs_hasher *
rs_hasher_new(unsigned algos)
{
    unsigned known = 0;
    for (int a = RS_HASH_MD5; a < HASH_NALGOS; a++)
        known |= 1u << a;
    algos &= known;
    if (algos == 0)
        return NULL;

    struct rs_hasher *h = rs_calloc(1, sizeof(*h));
    if (h == NULL)
        return NULL;
    h->algos = algos;
    for (int a = RS_HASH_MD5; a < HASH_NALGOS; a++) {
        if (!(algos & (1u << a)))
            continue;
        h->ctx[a] = EVP_MD_CTX_new();
        if (h->ctx[a] == NULL)
            goto fail;
    }
    if (hasher_start(h) < 0)
        goto fail;
    return h;

fail:
    rs_hasher_free(h);
    return NULL;
}

int
rs_hasher_update(struct rs_hasher *h, const void *buf, size_t len)
{
    if (h == NULL || (buf == NULL && len > 0))
        return RS_EINVAL;
    if (h->err < 0)
        return h->err;
    for (int a = RS_HASH_MD5; a < HASH_NALGOS; a++) {
        if (h->ctx[a] != NULL && EVP_DigestUpdate(h->ctx[a], buf, len) != 1) {
            h->err = RS_ENOMEM;
            return h->err;
        }
    }
    return 0;
}

int
rs_hasher_final(struct rs_hasher *h, struct rs_hashes *out)
{
    if (h == NULL || out == NULL)
        return RS_EINVAL;
    int rc = h->err;
    struct rs_hashes res;
    memset(&res, 0, sizeof(res));
    for (int a = RS_HASH_MD5; a < HASH_NALGOS && rc == 0; a++) {
        if (h->ctx[a] == NULL)
            continue;
        struct rs_digest *d = &res.d[res.n];
        unsigned dlen = 0;
        if (EVP_DigestFinal_ex(h->ctx[a], d->bytes, &dlen) != 1
            || dlen != hash_algos[a].len) {
            rc = RS_ENOMEM;
            break;
        }
        d->algo = (enum rs_hash_algo)a;
        memcpy(d->name, hash_algos[a].name, strlen(hash_algos[a].name) + 1);
        d->len = (uint8_t)dlen;
        res.n++;
    }
    /* Reuse after final, also after a failure: the next document starts
     * from a clean state either way. */
    int rc2 = hasher_start(h);
    if (rc == 0)
        rc = rc2;
    if (rc == 0)
        *out = res;
    return rc;
}

void
rs_hasher_free(struct rs_hasher *h)
{
    if (h == NULL)
        return;
    for (int a = 0; a < HASH_NALGOS; a++)
        EVP_MD_CTX_free(h->ctx[a]);
    rs_free(h);
}
