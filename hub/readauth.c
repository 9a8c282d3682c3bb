/*
 * readauth.c - rshub's read credentials (readauth.h): a snapshot of the
 * topics' read requirements and the hub's keys, and the check of one
 * bearer token against it. Static tokens are kept only as their SHA-256
 * and compared with CRYPTO_memcmp, so neither a token's content nor its
 * length shows in the time a check takes. JWTs are libjwt's (Debian's
 * 1.10.2-1+deb12u1, whose HMAC comparison is constant-time since
 * CVE-2024-25189): it checks the signature; the algorithm the key allows,
 * exp, nbf and the claims are checked here, because 1.10 takes the
 * algorithm from the token's own header and validates no claim. 1.10 also
 * takes a public key only as PEM and parses it on every jwt_decode (most
 * of an ES256/RS256 check's ~0.45 ms), so each snapshot caches what a
 * verification established, per token's SHA-256: the cache owns those
 * grants (shared, refcounted, with the credentials made from them) and
 * nothing of the token itself.
 */
#include "readauth.h"

#include <fnmatch.h>
#include <jansson.h>
#include <jwt.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rs_alloc.h"
#include "rs_strmap.h"
#include "rs_tokenfile.h"
#include "topic.h"

#define READAUTH_TOKENS_MAX 100000   /* tokens in one snapshot, all kinds */

struct digests {
    unsigned char (*v)[SHA256_DIGEST_LENGTH];
    size_t n;
};

struct ra_topic {
    char *name;
    char *uri;
    bool private_;
    struct digests tokens;
};

/* What verifying one JWT established, shared by the cache and the
 * credentials made from it: immutable once built, one allocation (topics
 * point into it), freed with its last reference, by any thread. */
struct ra_grant {
    atomic_uint refs;
    unsigned char digest[SHA256_DIGEST_LENGTH];   /* of the token */
    int64_t exp;            /* Unix s, > 0: checked on every use */
    int64_t nbf;            /* Unix s; INT64_MIN: none. Likewise */
    bool admin;
    size_t bytes;           /* the allocation, for the cache's bound */
    size_t ntopics;
    char *topics[];         /* patterns, NUL-terminated, after the array */
};

/* The cache of verified JWTs: open addressing (linear probing) keyed by
 * the token's SHA-256, whose first bytes are already a uniform hash.
 * Nothing is removed alone: an insert that would pass READAUTH_JWT_CACHE
 * entries or READAUTH_JWT_CACHE_BYTES empties the table first, so there
 * are no tombstones and no order to keep, and at most a bound's worth of
 * tokens is verified again. mu guards slots, n and bytes, and is held for
 * one lookup or one insert, never while libjwt runs. */
#define JCACHE_SLOTS 16384
_Static_assert((JCACHE_SLOTS & (JCACHE_SLOTS - 1)) == 0 &&
               JCACHE_SLOTS > READAUTH_JWT_CACHE + READAUTH_JWT_CACHE / 2,
               "the table is a power of 2, at most 2/3 full");

struct jcache {
    pthread_mutex_t mu;
    struct ra_grant **slots;     /* JCACHE_SLOTS, from the first insert;
                                     each holds a reference */
    size_t n;                     /* <= READAUTH_JWT_CACHE */
    size_t bytes;                 /* <= READAUTH_JWT_CACHE_BYTES */
    atomic_uint_fast64_t verified;
    atomic_uint_fast64_t hits;
};

struct readauth {
    atomic_uint refs;
    struct jcache *jwt_cache;     /* mutable: a const snapshot fills it */
    bool open;
    struct ra_topic **topics;     /* in the order added */
    size_t ntopics, captopics;
    struct rs_strmap by_name;     /* topics by name: read by any thread
                                     once frozen, so never written then */
    struct digests hub;           /* open-mode topics */
    struct digests admin;
    size_t ntokens;               /* all kinds, for the cap */
    unsigned char *secret;        /* HS256 */
    size_t secret_len;
    char *pem;                    /* RS256 / ES256 public key */
    size_t pem_len;
    jwt_alg_t pem_alg;
    bool any_private;
};

enum cred_kind { CRED_STATIC, CRED_JWT };

struct read_cred {
    enum cred_kind kind;
    bool admin;
    unsigned char digest[SHA256_DIGEST_LENGTH];   /* CRED_STATIC */
    int64_t exp;                                  /* CRED_JWT; 0 static */
    struct ra_grant *grant;                      /* CRED_JWT: a reference */
};

/* ---------------------------------------------------------------- names */

const char *
readauth_verdict_name(enum read_verdict v)
{
    switch (v) {
    case READ_NO_CRED: return "no_credential";
    case READ_BAD_CRED: return "bad_credential";
    case READ_EXPIRED: return "expired";
    case READ_NOT_ALLOWED: return "not_allowed";
    default: return "ok";
    }
}

const char *
readauth_verdict_reason(enum read_verdict v)
{
    switch (v) {
    case READ_NO_CRED:
        return "this topic needs a read credential (Authorization: Bearer)";
    case READ_BAD_CRED:
        return "the read credential is not valid";
    case READ_EXPIRED:
        return "the read credential has expired or is not valid yet";
    case READ_NOT_ALLOWED:
        return "the read credential does not allow this topic";
    default:
        return "ok";
    }
}

int
readauth_verdict_status(enum read_verdict v)
{
    if (v == READ_PUBLIC || v == READ_OK)
        return 0;
    return v == READ_NO_CRED ? 401 : 403;
}

/* ------------------------------------------------------ the JWT cache */

static void
grant_unref(struct ra_grant *g)
{
    if (g != NULL && atomic_fetch_sub(&g->refs, 1) == 1)
        rs_free(g);
}

static struct jcache *
jcache_new(void)
{
    struct jcache *jc = rs_calloc(1, sizeof(*jc));
    if (jc == NULL)
        return NULL;
    pthread_mutex_init(&jc->mu, NULL);
    atomic_init(&jc->verified, 0);
    atomic_init(&jc->hits, 0);
    return jc;
}

static void
jcache_clear_locked(struct jcache *jc)
{
    for (size_t i = 0; jc->slots != NULL && i < JCACHE_SLOTS; i++) {
        grant_unref(jc->slots[i]);
        jc->slots[i] = NULL;
    }
    jc->n = 0;
    jc->bytes = 0;
}

static void
jcache_free(struct jcache *jc)
{
    if (jc == NULL)
        return;
    jcache_clear_locked(jc);
    rs_free(jc->slots);
    pthread_mutex_destroy(&jc->mu);
    rs_free(jc);
}

/* The slot holding digest, or the empty one where it would go (there is
 * always one: the table is at most 2/3 full). */
static size_t
jcache_probe(const struct jcache *jc, const unsigned char *digest)
{
    size_t i;
    memcpy(&i, digest, sizeof(i));
    for (i &= JCACHE_SLOTS - 1; jc->slots[i] != NULL;
         i = (i + 1) & (JCACHE_SLOTS - 1))
        if (CRYPTO_memcmp(jc->slots[i]->digest, digest,
                          SHA256_DIGEST_LENGTH) == 0)
            break;
    return i;
}

/* The grant of the token whose SHA-256 is digest (a new reference), or
 * NULL when this snapshot has not verified it. */
static struct ra_grant *
jcache_get(struct jcache *jc, const unsigned char *digest)
{
    struct ra_grant *g = NULL;
    pthread_mutex_lock(&jc->mu);
    if (jc->slots != NULL) {
        g = jc->slots[jcache_probe(jc, digest)];
        if (g != NULL)
            atomic_fetch_add(&g->refs, 1);
    }
    pthread_mutex_unlock(&jc->mu);
    if (g != NULL)
        atomic_fetch_add(&jc->hits, 1);
    return g;
}

/* Keep g (a reference of its own) unless it is there already (another
 * thread verified the same token meanwhile) or cannot be allocated for:
 * a cache that cannot grow only costs verifications. */
static void
jcache_put(struct jcache *jc, struct ra_grant *g)
{
    if (g->bytes > READAUTH_JWT_CACHE_BYTES)
        return;
    pthread_mutex_lock(&jc->mu);
    if (jc->slots == NULL)
        jc->slots = rs_calloc(JCACHE_SLOTS, sizeof(*jc->slots));
    if (jc->slots == NULL)
        goto out;
    size_t i = jcache_probe(jc, g->digest);
    if (jc->slots[i] != NULL)
        goto out;
    if (jc->n + 1 > READAUTH_JWT_CACHE ||
        jc->bytes + g->bytes > READAUTH_JWT_CACHE_BYTES) {
        jcache_clear_locked(jc);
        i = jcache_probe(jc, g->digest);
    }
    atomic_fetch_add(&g->refs, 1);
    jc->slots[i] = g;
    jc->n++;
    jc->bytes += g->bytes;
out:
    pthread_mutex_unlock(&jc->mu);
}

/* ------------------------------------------------------------- building */

struct readauth *
readauth_new(bool open)
{
    struct readauth *ra = rs_calloc(1, sizeof(*ra));
    if (ra == NULL)
        return NULL;
    ra->jwt_cache = jcache_new();
    if (ra->jwt_cache == NULL) {
        rs_free(ra);
        return NULL;
    }
    atomic_init(&ra->refs, 1);
    ra->open = open;
    return ra;
}

static int
digests_add(struct readauth *ra, struct digests *d, const char *token)
{
    size_t len = strlen(token);
    if (len == 0 || len > READAUTH_TOKEN_MAX)
        return RS_EINVAL;
    if (ra->ntokens >= READAUTH_TOKENS_MAX)
        return RS_ETOOBIG;
    void *nv = rs_realloc(d->v, (d->n + 1) * sizeof(*d->v));
    if (nv == NULL)
        return RS_ENOMEM;
    d->v = nv;
    SHA256((const unsigned char *)token, len, d->v[d->n++]);
    ra->ntokens++;
    return 0;
}

/* Is digest one of d's? Every entry is compared, in constant time. */
static bool
digests_has(const struct digests *d, const unsigned char *digest)
{
    int hit = 0;
    for (size_t i = 0; i < d->n; i++)
        hit |= CRYPTO_memcmp(d->v[i], digest, SHA256_DIGEST_LENGTH) == 0;
    return hit != 0;
}

static struct ra_topic *
topic_find(const struct readauth *ra, const char *name)
{
    return rs_strmap_get(&ra->by_name, name);
}

static void
topic_free(struct ra_topic *t)
{
    if (t == NULL)
        return;
    rs_free(t->name);
    rs_free(t->uri);
    rs_free(t->tokens.v);
    rs_free(t);
}

int
readauth_topic(struct readauth *ra, const char *name, const char *uri,
               bool private_)
{
    if (topic_find(ra, name) != NULL)
        return RS_EINVAL;
    if (ra->ntopics == ra->captopics) {
        size_t cap = ra->captopics != 0 ? 2 * ra->captopics : 16;
        struct ra_topic **nv = rs_realloc(ra->topics, cap * sizeof(*nv));
        if (nv == NULL)
            return RS_ENOMEM;
        ra->topics = nv;
        ra->captopics = cap;
    }
    struct ra_topic *t = rs_calloc(1, sizeof(*t));
    if (t == NULL)
        return RS_ENOMEM;
    t->name = rs_strdup(name);
    t->uri = uri != NULL ? rs_strdup(uri) : NULL;
    if (t->name == NULL || (uri != NULL && t->uri == NULL) ||
        rs_strmap_put(&ra->by_name, t->name, t) != 0) {
        topic_free(t);
        return RS_ENOMEM;
    }
    t->private_ = private_;
    ra->any_private = ra->any_private || private_;
    ra->topics[ra->ntopics++] = t;
    return 0;
}

int
readauth_topic_token(struct readauth *ra, const char *name, const char *token)
{
    struct ra_topic *t = topic_find(ra, name);
    if (t == NULL)
        return RS_ENOTFOUND;
    int rc = digests_add(ra, &t->tokens, token);
    if (rc == 0) {
        t->private_ = true;
        ra->any_private = true;
    }
    return rc;
}

int
readauth_hub_token(struct readauth *ra, const char *token)
{
    return digests_add(ra, &ra->hub, token);
}

int
readauth_admin_token(struct readauth *ra, const char *token)
{
    return digests_add(ra, &ra->admin, token);
}

int
readauth_jwt_secret(struct readauth *ra, const void *secret, size_t len)
{
    if (len < READAUTH_SECRET_MIN || len > READAUTH_FILE_MAX)
        return RS_EINVAL;
    unsigned char *s = rs_malloc(len);
    if (s == NULL)
        return RS_ENOMEM;
    memcpy(s, secret, len);
    if (ra->secret != NULL) {
        OPENSSL_cleanse(ra->secret, ra->secret_len);
        rs_free(ra->secret);
    }
    ra->secret = s;
    ra->secret_len = len;
    return 0;
}

int
readauth_jwt_public_key(struct readauth *ra, const char *pem, size_t len,
                        const char **why)
{
    int rc = RS_EINVAL;
    BIO *bio = BIO_new_mem_buf(pem, (int)len);
    EVP_PKEY *key = bio != NULL ? PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL)
                                : NULL;
    jwt_alg_t alg = JWT_ALG_INVAL;
    *why = NULL;
    if (key == NULL) {
        *why = "not a PEM public key (-----BEGIN PUBLIC KEY-----)";
        goto out;
    }
    if (EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA) {
        if (EVP_PKEY_get_bits(key) < 2048) {
            *why = "an RSA key needs 2048 bits or more";
            goto out;
        }
        alg = JWT_ALG_RS256;
    } else if (EVP_PKEY_get_base_id(key) == EVP_PKEY_EC) {
        char group[64];
        size_t glen = 0;
        if (EVP_PKEY_get_group_name(key, group, sizeof(group), &glen) != 1 ||
            strcmp(group, "prime256v1") != 0) {
            *why = "an EC key must be on P-256 (ES256)";
            goto out;
        }
        alg = JWT_ALG_ES256;
    } else {
        *why = "the key must be RSA (RS256) or EC P-256 (ES256)";
        goto out;
    }
    char *copy = rs_strndup(pem, len);
    if (copy == NULL) {
        rc = RS_ENOMEM;
        *why = "out of memory";
        goto out;
    }
    rs_free(ra->pem);
    ra->pem = copy;
    ra->pem_len = len;
    ra->pem_alg = alg;
    rc = 0;
out:
    EVP_PKEY_free(key);
    BIO_free(bio);
    return rc;
}

/* ---------------------------------------------------------------- files */

int
readauth_read_tokens(const char *path, bool insecure,
                     int (*add)(struct readauth *, const char *),
                     struct readauth *ra, char *err, size_t errsz)
{
    char *buf;
    size_t len;
    int rc = rs_tokenfile_read_text(path, insecure, READAUTH_FILE_MAX, &buf,
                                    &len, err, errsz);
    if (rc != 0)
        return rc;
    int lineno = 0, n = 0;
    char *line = buf;
    while (rc == 0 && line != NULL && *line != '\0') {
        char *nl = strchr(line, '\n');
        if (nl != NULL)
            *nl = '\0';
        lineno++;
        char *b = line, *e = line + strlen(line);
        while (*b == ' ' || *b == '\t')
            b++;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
            *--e = '\0';
        if (*b != '\0' && *b != '#') {
            if (strpbrk(b, " \t\r") != NULL ||
                (size_t)(e - b) > READAUTH_TOKEN_MAX) {
                snprintf(err, errsz, "%s:%d: a token holds white space or is "
                         "longer than %d bytes", path, lineno,
                         READAUTH_TOKEN_MAX);
                rc = RS_EINVAL;
            } else if ((rc = add(ra, b)) != 0) {
                snprintf(err, errsz, "%s:%d: %s", path, lineno,
                         rc == RS_ETOOBIG ? "too many tokens" : "out of memory");
            }
            n++;
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    if (rc == 0 && n == 0) {
        snprintf(err, errsz, "%s: holds no token", path);
        rc = RS_EINVAL;
    }
    rs_tokenfile_text_free(buf);
    return rc;
}

/* -------------------------------------------------------------- sharing */

struct readauth *
readauth_ref(struct readauth *ra)
{
    if (ra != NULL)
        atomic_fetch_add(&ra->refs, 1);
    return ra;
}

void
readauth_unref(struct readauth *ra)
{
    if (ra == NULL || atomic_fetch_sub(&ra->refs, 1) != 1)
        return;
    for (size_t i = 0; i < ra->ntopics; i++)
        topic_free(ra->topics[i]);
    rs_free(ra->topics);
    rs_strmap_clear(&ra->by_name);
    rs_free(ra->hub.v);
    rs_free(ra->admin.v);
    if (ra->secret != NULL)
        OPENSSL_cleanse(ra->secret, ra->secret_len);
    rs_free(ra->secret);
    rs_free(ra->pem);
    jcache_free(ra->jwt_cache);
    rs_free(ra);
}

bool
readauth_active(const struct readauth *ra)
{
    return ra->any_private || ra->hub.n > 0;
}

void
readauth_stats(const struct readauth *ra, struct readauth_stats *out)
{
    struct jcache *jc = ra->jwt_cache;
    pthread_mutex_lock(&jc->mu);
    out->jwt_cached = jc->n;
    out->jwt_cached_bytes = jc->bytes;
    pthread_mutex_unlock(&jc->mu);
    out->jwt_verified = atomic_load(&jc->verified);
    out->jwt_cache_hits = atomic_load(&jc->hits);
}

/* ------------------------------------------------------------- checking */

void
readauth_cred_free(struct read_cred *c)
{
    if (c == NULL)
        return;
    grant_unref(c->grant);
    rs_free(c);
}

int64_t
readauth_cred_expiry(const struct read_cred *c)
{
    return c != NULL ? c->exp : 0;
}

bool
readauth_cred_admin(const struct read_cred *c)
{
    return c != NULL && c->admin;
}

/* A number claim: false when absent or not an integer. */
static bool
jwt_int_claim(jwt_t *j, const char *name, int64_t *out)
{
    char *js = jwt_get_grants_json(j, name);
    if (js == NULL)
        return false;
    json_error_t je;
    json_t *v = json_loads(js, JSON_DECODE_ANY, &je);
    free(js);
    bool ok = json_is_integer(v);
    if (ok)
        *out = (int64_t)json_integer_value(v);
    json_decref(v);
    return ok;
}

/* The claims of a verified token whose SHA-256 is digest, at now_s:
 * exp (required), nbf, admin, topics (required unless admin). READ_OK
 * with *out (one reference); a token outside its exp/nbf window is
 * READ_EXPIRED and no grant, so that only what was valid is cached. */
static enum read_verdict
grant_new(jwt_t *j, const unsigned char *digest, int64_t now_s,
          struct ra_grant **out)
{
    int64_t exp = 0, nbf = INT64_MIN;
    *out = NULL;
    if (!jwt_int_claim(j, "exp", &exp) || exp <= 0)
        return READ_BAD_CRED;
    if (exp <= now_s)
        return READ_EXPIRED;
    if (jwt_int_claim(j, "nbf", &nbf) && nbf > now_s)
        return READ_EXPIRED;
    bool admin = false;
    char *js = jwt_get_grants_json(j, "admin");
    if (js != NULL) {
        admin = strcmp(js, "true") == 0;
        free(js);
    }
    json_t *arr = NULL;
    js = jwt_get_grants_json(j, "topics");
    bool has_topics = js != NULL;
    if (!has_topics && !admin)
        return READ_BAD_CRED;
    if (has_topics) {
        json_error_t je;
        arr = json_loads(js, JSON_DECODE_ANY, &je);
        free(js);
    }
    enum read_verdict v = READ_BAD_CRED;
    size_t n = json_is_array(arr) ? json_array_size(arr) : 0;
    if ((has_topics && !json_is_array(arr)) || n > READAUTH_CLAIM_TOPICS)
        goto out;
    size_t strings = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(arr, i));
        if (s == NULL || s[0] == '\0' || strlen(s) > TOPIC_URI_MAX)
            goto out;
        strings += strlen(s) + 1;
    }
    size_t bytes = sizeof(struct ra_grant) + n * sizeof(char *) + strings;
    struct ra_grant *g = rs_malloc(bytes);
    if (g == NULL)
        goto out;
    atomic_init(&g->refs, 1);
    memcpy(g->digest, digest, SHA256_DIGEST_LENGTH);
    g->exp = exp;
    g->nbf = nbf;
    g->admin = admin;
    g->bytes = bytes;
    g->ntopics = n;
    char *p = (char *)&g->topics[n];
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(arr, i));
        size_t len = strlen(s) + 1;
        g->topics[i] = memcpy(p, s, len);
        p += len;
    }
    *out = g;
    v = READ_OK;
out:
    json_decref(arr);
    return v;
}

/* A JWT verified with key under exactly alg. */
static jwt_t *
jwt_verified(const char *token, const unsigned char *key, size_t len,
             jwt_alg_t alg)
{
    jwt_t *j = NULL;
    if (key == NULL || jwt_decode(&j, token, key, (int)len) != 0)
        return NULL;
    /* libjwt took the algorithm from the token: one the key was not made
     * for (HS256 over a public key's PEM, "none") is refused here. */
    if (jwt_get_alg(j) != alg) {
        jwt_free(j);
        return NULL;
    }
    return j;
}

/* A JWT: from the snapshot's cache, or verified by libjwt and cached when
 * valid now. Either way its time window is checked against now_s. */
static enum read_verdict
cred_jwt(const struct readauth *ra, const char *bearer, size_t len,
         int64_t now_s, struct read_cred *c)
{
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)bearer, len, digest);
    c->kind = CRED_JWT;
    struct ra_grant *g = jcache_get(ra->jwt_cache, digest);
    if (g == NULL) {
        atomic_fetch_add(&ra->jwt_cache->verified, 1);
        jwt_t *j = jwt_verified(bearer, (const unsigned char *)ra->pem,
                                ra->pem_len, ra->pem_alg);
        if (j == NULL)
            j = jwt_verified(bearer, ra->secret, ra->secret_len,
                             JWT_ALG_HS256);
        if (j == NULL)
            return READ_BAD_CRED;
        enum read_verdict v = grant_new(j, digest, now_s, &g);
        jwt_free(j);
        if (v != READ_OK)
            return v;
        jcache_put(ra->jwt_cache, g);
    }
    c->grant = g;
    c->exp = g->exp;
    c->admin = g->admin;
    return g->exp <= now_s || g->nbf > now_s ? READ_EXPIRED : READ_OK;
}

enum read_verdict
readauth_cred_new(const struct readauth *ra, const char *bearer,
                  int64_t now_s, struct read_cred **out)
{
    *out = NULL;
    size_t len = strlen(bearer);
    if (len == 0 || len > READAUTH_JWT_MAX)
        return READ_BAD_CRED;
    struct read_cred *c = rs_calloc(1, sizeof(*c));
    if (c == NULL)
        return READ_BAD_CRED;
    enum read_verdict v = READ_BAD_CRED;
    const char *dot = strchr(bearer, '.');
    bool jwt_shape = dot != NULL && strchr(dot + 1, '.') != NULL;
    if (jwt_shape && (ra->secret != NULL || ra->pem != NULL)) {
        v = cred_jwt(ra, bearer, len, now_s, c);
    } else if (len <= READAUTH_TOKEN_MAX) {
        c->kind = CRED_STATIC;
        SHA256((const unsigned char *)bearer, len, c->digest);
        bool known = false;
        c->admin = digests_has(&ra->admin, c->digest);
        known = c->admin | digests_has(&ra->hub, c->digest);
        for (size_t i = 0; i < ra->ntopics; i++)
            known |= digests_has(&ra->topics[i]->tokens, c->digest);
        v = known ? READ_OK : READ_BAD_CRED;
    }
    if (v != READ_OK) {
        readauth_cred_free(c);
        return v;
    }
    *out = c;
    return READ_OK;
}

static bool
has_glob(const char *s)
{
    return strpbrk(s, "*?[") != NULL;
}

/* Does one of the JWT's topics entries name this topic? */
static bool
jwt_names(const struct read_cred *c, const char *name, const char *uri)
{
    for (size_t i = 0; i < c->grant->ntopics; i++) {
        const char *p = c->grant->topics[i];
        if (fnmatch(p, name, 0) == 0 || (uri != NULL && fnmatch(p, uri, 0) == 0))
            return true;
        /* an open-mode topic's name is derived from its URI */
        char derived[128];
        if (uri == NULL && !has_glob(p) && strchr(p, ':') != NULL &&
            topics_derive_name(p, derived, sizeof(derived)) == 0 &&
            strcmp(derived, name) == 0)
            return true;
    }
    return false;
}

enum read_verdict
readauth_allows(const struct readauth *ra, const struct read_cred *c,
                const char *name, const char *uri)
{
    if (ra == NULL)
        return READ_PUBLIC;
    const struct ra_topic *t = topic_find(ra, name);
    bool private_;
    const struct digests *tokens = NULL;
    if (t != NULL) {
        private_ = t->private_;
        tokens = &t->tokens;
        if (uri == NULL)
            uri = t->uri;
    } else if (ra->open) {
        private_ = ra->hub.n > 0;
        tokens = &ra->hub;
    } else {
        private_ = ra->any_private;   /* unknown: as private as the rest */
    }
    if (!private_)
        return READ_PUBLIC;
    if (c == NULL)
        return READ_NO_CRED;
    if (c->admin)
        return READ_OK;
    if (c->kind == CRED_STATIC)
        return tokens != NULL && digests_has(tokens, c->digest)
                   ? READ_OK : READ_NOT_ALLOWED;
    return jwt_names(c, name, uri) ? READ_OK : READ_NOT_ALLOWED;
}

enum read_verdict
readauth_check(const struct readauth *ra, const char *bearer, const char *name,
               const char *uri, int64_t now_s, int64_t *expiry)
{
    struct read_cred *c = NULL;
    *expiry = 0;
    if (bearer != NULL) {
        enum read_verdict v = readauth_cred_new(ra, bearer, now_s, &c);
        if (v != READ_OK) {
            /* a public topic is served whatever came along with it */
            return readauth_allows(ra, NULL, name, uri) == READ_PUBLIC
                       ? READ_PUBLIC : v;
        }
    }
    enum read_verdict v = readauth_allows(ra, c, name, uri);
    if (v == READ_OK)
        *expiry = readauth_cred_expiry(c);
    readauth_cred_free(c);
    return v;
}

const char *
readauth_bearer_of(const char *v, size_t *len)
{
    while (*v == ' ' || *v == '\t')
        v++;
    if (strncasecmp(v, "Bearer", 6) != 0 || (v[6] != ' ' && v[6] != '\t'))
        return NULL;
    v += 6;
    while (*v == ' ' || *v == '\t')
        v++;
    size_t n = strlen(v);
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    if (n == 0)
        return NULL;
    *len = n;
    return v;
}
