/*
 * readauth.c - rshub's read credentials (readauth.h): a snapshot of the
 * topics' read requirements and the hub's keys, and the check of one
 * bearer token against it. Static tokens are kept only as their SHA-256
 * and compared with CRYPTO_memcmp, so neither a token's content nor its
 * length shows in the time a check takes. JWTs are libjwt's (Debian's
 * 1.10.2-1+deb12u1, whose HMAC comparison is constant-time since
 * CVE-2024-25189): it checks the signature; the algorithm the key allows,
 * exp, nbf and the claims are checked here, because 1.10 takes the
 * algorithm from the token's own header and validates no claim.
 */
#include "readauth.h"

#include <fnmatch.h>
#include <jansson.h>
#include <jwt.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rs_alloc.h"
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

struct readauth {
    atomic_uint refs;
    bool open;
    struct ra_topic *topics;      /* sorted by name once frozen */
    size_t ntopics;
    bool sorted;
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
    char **topics;                                /* CRED_JWT: patterns */
    size_t ntopics;
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

/* ------------------------------------------------------------- building */

struct readauth *
readauth_new(bool open)
{
    struct readauth *ra = rs_calloc(1, sizeof(*ra));
    if (ra == NULL)
        return NULL;
    atomic_init(&ra->refs, 1);
    ra->open = open;
    ra->sorted = true;
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
    if (ra->sorted) {
        size_t lo = 0, hi = ra->ntopics;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            int c = strcmp(name, ra->topics[mid].name);
            if (c == 0)
                return &ra->topics[mid];
            if (c < 0)
                hi = mid;
            else
                lo = mid + 1;
        }
        return NULL;
    }
    for (size_t i = 0; i < ra->ntopics; i++)
        if (strcmp(ra->topics[i].name, name) == 0)
            return &ra->topics[i];
    return NULL;
}

static int
topic_cmp(const void *a, const void *b)
{
    return strcmp(((const struct ra_topic *)a)->name,
                  ((const struct ra_topic *)b)->name);
}

void
readauth_freeze(struct readauth *ra)
{
    if (!ra->sorted) {
        qsort(ra->topics, ra->ntopics, sizeof(*ra->topics), topic_cmp);
        ra->sorted = true;
    }
}

int
readauth_topic(struct readauth *ra, const char *name, const char *uri,
               bool private_)
{
    if (topic_find(ra, name) != NULL)
        return RS_EINVAL;
    struct ra_topic *nt = rs_realloc(ra->topics,
                                     (ra->ntopics + 1) * sizeof(*nt));
    if (nt == NULL)
        return RS_ENOMEM;
    ra->topics = nt;
    struct ra_topic *t = &nt[ra->ntopics];
    memset(t, 0, sizeof(*t));
    t->name = rs_strdup(name);
    t->uri = uri != NULL ? rs_strdup(uri) : NULL;
    if (t->name == NULL || (uri != NULL && t->uri == NULL)) {
        rs_free(t->name);
        rs_free(t->uri);
        return RS_ENOMEM;
    }
    t->private_ = private_;
    ra->any_private = ra->any_private || private_;
    ra->ntopics++;
    ra->sorted = false;
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
    for (size_t i = 0; i < ra->ntopics; i++) {
        rs_free(ra->topics[i].name);
        rs_free(ra->topics[i].uri);
        rs_free(ra->topics[i].tokens.v);
    }
    rs_free(ra->topics);
    rs_free(ra->hub.v);
    rs_free(ra->admin.v);
    if (ra->secret != NULL)
        OPENSSL_cleanse(ra->secret, ra->secret_len);
    rs_free(ra->secret);
    rs_free(ra->pem);
    rs_free(ra);
}

bool
readauth_active(const struct readauth *ra)
{
    return ra->any_private || ra->hub.n > 0;
}

/* ------------------------------------------------------------- checking */

void
readauth_cred_free(struct read_cred *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->ntopics; i++)
        rs_free(c->topics[i]);
    rs_free(c->topics);
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

/* The claims: exp (required), nbf, admin, topics. */
static enum read_verdict
jwt_claims(jwt_t *j, int64_t now_s, struct read_cred *c)
{
    int64_t exp = 0, nbf = 0;
    if (!jwt_int_claim(j, "exp", &exp) || exp <= 0)
        return READ_BAD_CRED;
    if (exp <= now_s)
        return READ_EXPIRED;
    if (jwt_int_claim(j, "nbf", &nbf) && nbf > now_s)
        return READ_EXPIRED;
    c->exp = exp;
    char *js = jwt_get_grants_json(j, "admin");
    if (js != NULL) {
        c->admin = strcmp(js, "true") == 0;
        free(js);
    }
    js = jwt_get_grants_json(j, "topics");
    if (js == NULL)
        return c->admin ? READ_OK : READ_BAD_CRED;
    json_error_t je;
    json_t *arr = json_loads(js, JSON_DECODE_ANY, &je);
    free(js);
    enum read_verdict v = READ_BAD_CRED;
    size_t n = json_is_array(arr) ? json_array_size(arr) : 0;
    if (!json_is_array(arr) || n > READAUTH_CLAIM_TOPICS)
        goto out;
    c->topics = rs_calloc(n > 0 ? n : 1, sizeof(*c->topics));
    if (c->topics == NULL)
        goto out;
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(arr, i));
        if (s == NULL || s[0] == '\0' || strlen(s) > TOPIC_URI_MAX ||
            (c->topics[i] = rs_strdup(s)) == NULL)
            goto out;
        c->ntopics++;
    }
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

static enum read_verdict
cred_jwt(const struct readauth *ra, const char *bearer, int64_t now_s,
         struct read_cred *c)
{
    if (strlen(bearer) > READAUTH_JWT_MAX)
        return READ_BAD_CRED;
    jwt_t *j = jwt_verified(bearer, (const unsigned char *)ra->pem,
                            ra->pem_len, ra->pem_alg);
    if (j == NULL)
        j = jwt_verified(bearer, ra->secret, ra->secret_len, JWT_ALG_HS256);
    if (j == NULL)
        return READ_BAD_CRED;
    c->kind = CRED_JWT;
    enum read_verdict v = jwt_claims(j, now_s, c);
    jwt_free(j);
    return v;
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
        v = cred_jwt(ra, bearer, now_s, c);
    } else if (len <= READAUTH_TOKEN_MAX) {
        c->kind = CRED_STATIC;
        SHA256((const unsigned char *)bearer, len, c->digest);
        bool known = false;
        c->admin = digests_has(&ra->admin, c->digest);
        known = c->admin | digests_has(&ra->hub, c->digest);
        for (size_t i = 0; i < ra->ntopics; i++)
            known |= digests_has(&ra->topics[i].tokens, c->digest);
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
    for (size_t i = 0; i < c->ntopics; i++) {
        const char *p = c->topics[i];
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
