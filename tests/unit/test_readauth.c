/* test_readauth.c - rshub's read credentials (hub/readauth.c): static
 * tokens per topic, hub-wide and admin tokens, JWTs (HS256, RS256, ES256,
 * made here with libjwt and OpenSSL), the algorithm the key decides, expiry,
 * topic patterns, the cache of verified JWTs (its counts, expiry, reloads,
 * bounds, threads), the token files and the Authorization parser. */
#include "testutil.h"

#include <jwt.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "readauth.h"
#include "topic.h"

#define NOW 1700000000
#define SECRET "0123456789abcdef0123456789abcdef-hs256"

static struct readauth *
closed_hub(void)
{
    struct readauth *ra = readauth_new(false);
    assert_non_null(ra);
    assert_int_equal(readauth_topic(ra, "pub", "http://ex.org/pub", false), 0);
    assert_int_equal(readauth_topic(ra, "priv", "http://ex.org/priv", false), 0);
    assert_int_equal(readauth_topic(ra, "other", "http://ex.org/other", false), 0);
    assert_int_equal(readauth_topic(ra, "jwtonly", "http://ex.org/j", true), 0);
    assert_int_equal(readauth_topic_token(ra, "priv", "tok-A"), 0);
    assert_int_equal(readauth_topic_token(ra, "priv", "tok-B"), 0);
    assert_int_equal(readauth_topic_token(ra, "other", "tok-O"), 0);
    assert_int_equal(readauth_admin_token(ra, "admin-1"), 0);
    assert_int_equal(readauth_jwt_secret(ra, SECRET, strlen(SECRET)), 0);
    return ra;
}

static enum read_verdict
check(struct readauth *ra, const char *bearer, const char *name)
{
    int64_t exp = 0;
    return readauth_check(ra, bearer, name, NULL, NOW, &exp);
}

/* A JWT signed with key under alg (NULL key: alg none); exp 0: none. */
static char *
make_jwt(jwt_alg_t alg, const void *key, size_t klen, long exp,
         const char *topics_json, bool admin)
{
    jwt_t *j = NULL;
    assert_int_equal(jwt_new(&j), 0);
    if (exp != 0)
        assert_int_equal(jwt_add_grant_int(j, "exp", exp), 0);
    if (topics_json != NULL) {
        size_t n = strlen(topics_json) + 16;
        char *buf = malloc(n);
        assert_non_null(buf);
        snprintf(buf, n, "{\"topics\":%s}", topics_json);
        assert_int_equal(jwt_add_grants_json(j, buf), 0);
        free(buf);
    }
    if (admin)
        assert_int_equal(jwt_add_grant_bool(j, "admin", 1), 0);
    assert_int_equal(jwt_set_alg(j, alg, key, (int)klen), 0);
    char *s = jwt_encode_str(j);
    assert_non_null(s);
    jwt_free(j);
    return s;
}

/* The bytes of a memory BIO as a C string (free it). */
static char *
bio_string(BIO *b)
{
    char *p;
    long n = BIO_get_mem_data(b, &p);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    memcpy(s, p, (size_t)n);
    s[n] = '\0';
    return s;
}

/* A key pair as PEM (RSA of rsa_bits, or EC on curve): private into priv,
 * public into pub (free both). */
static void
make_keys(size_t rsa_bits, const char *curve, char **priv, char **pub)
{
    EVP_PKEY *k = curve == NULL
                      ? EVP_PKEY_Q_keygen(NULL, NULL, "RSA", rsa_bits)
                      : EVP_PKEY_Q_keygen(NULL, NULL, "EC", curve);
    assert_non_null(k);
    BIO *b = BIO_new(BIO_s_mem());
    assert_int_equal(PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL), 1);
    *priv = bio_string(b);
    BIO_free(b);
    b = BIO_new(BIO_s_mem());
    assert_int_equal(PEM_write_bio_PUBKEY(b, k), 1);
    *pub = bio_string(b);
    BIO_free(b);
    EVP_PKEY_free(k);
}

/* readauth/static_tokens: a private topic takes each of its tokens, not a
 * wrong one, not another topic's; no credential is 401's verdict; a public
 * topic takes anything, even a wrong token. */
static void
test_static_tokens(void **state)
{
    (void)state;
    struct readauth *ra = closed_hub();
    assert_int_equal(check(ra, "tok-A", "priv"), READ_OK);
    assert_int_equal(check(ra, "tok-B", "priv"), READ_OK);
    assert_int_equal(check(ra, NULL, "priv"), READ_NO_CRED);
    assert_int_equal(check(ra, "tok-C", "priv"), READ_BAD_CRED);
    assert_int_equal(check(ra, "tok-A ", "priv"), READ_BAD_CRED);
    assert_int_equal(check(ra, "tok-O", "priv"), READ_NOT_ALLOWED);
    assert_int_equal(check(ra, "tok-A", "jwtonly"), READ_NOT_ALLOWED);
    assert_int_equal(check(ra, NULL, "pub"), READ_PUBLIC);
    assert_int_equal(check(ra, "junk", "pub"), READ_PUBLIC);
    assert_int_equal(readauth_verdict_status(READ_NO_CRED), 401);
    assert_int_equal(readauth_verdict_status(READ_BAD_CRED), 403);
    assert_int_equal(readauth_verdict_status(READ_PUBLIC), 0);
    assert_true(readauth_active(ra));
    assert_int_equal(readauth_topic(ra, "priv", "x", false), RS_EINVAL);
    readauth_unref(ra);
}

/* readauth/admin: an admin token reads every topic, private or unknown. */
static void
test_admin(void **state)
{
    (void)state;
    struct readauth *ra = closed_hub();
    assert_int_equal(check(ra, "admin-1", "priv"), READ_OK);
    assert_int_equal(check(ra, "admin-1", "jwtonly"), READ_OK);
    assert_int_equal(check(ra, "admin-1", "nosuch"), READ_OK);
    struct read_cred *c = NULL;
    assert_int_equal(readauth_cred_new(ra, "admin-1", NOW, &c), READ_OK);
    assert_true(readauth_cred_admin(c));
    assert_int_equal(readauth_cred_expiry(c), 0);
    readauth_cred_free(c);
    readauth_cred_free(NULL);
    readauth_unref(NULL);
    readauth_unref(ra);
}

/* readauth/unknown_hidden: in closed mode an unknown name is as private
 * as the hub's topics are (probing cannot tell private from unknown); a
 * hub without private topics leaves it public (4004 follows). */
static void
test_unknown_hidden(void **state)
{
    (void)state;
    struct readauth *ra = closed_hub();
    assert_int_equal(check(ra, NULL, "nosuch"), READ_NO_CRED);
    assert_int_equal(check(ra, "tok-A", "nosuch"), READ_NOT_ALLOWED);
    readauth_unref(ra);
    ra = readauth_new(false);
    assert_int_equal(readauth_topic(ra, "pub", "http://ex.org/pub", false), 0);
    assert_int_equal(check(ra, NULL, "nosuch"), READ_PUBLIC);
    assert_false(readauth_active(ra));
    readauth_unref(ra);
}

/* readauth/open_hub_tokens: the hub-wide tokens make every open-mode topic
 * private; a configured topic keeps its own rule. */
static void
test_open_hub_tokens(void **state)
{
    (void)state;
    struct readauth *ra = readauth_new(true);
    assert_int_equal(readauth_topic(ra, "conf", "http://ex.org/c", false), 0);
    assert_int_equal(check(ra, NULL, "ex.org-anything-1234abcd"), READ_PUBLIC);
    assert_int_equal(readauth_hub_token(ra, "hub-1"), 0);
    assert_int_equal(check(ra, NULL, "ex.org-anything-1234abcd"), READ_NO_CRED);
    assert_int_equal(check(ra, "hub-1", "ex.org-anything-1234abcd"), READ_OK);
    assert_int_equal(check(ra, "hub-2", "ex.org-anything-1234abcd"), READ_BAD_CRED);
    assert_int_equal(check(ra, NULL, "conf"), READ_PUBLIC);
    readauth_unref(ra);
}

/* readauth/jwt_hs256: a valid token allows the topics it names, by name,
 * URI or pattern, until its exp (reported); expired, not yet valid,
 * without exp, with a wrong signature or a tampered payload: refused. */
static void
test_jwt_hs256(void **state)
{
    (void)state;
    struct readauth *ra = closed_hub();
    char *t = make_jwt(JWT_ALG_HS256, SECRET, strlen(SECRET), NOW + 60,
                       "[\"priv\"]", false);
    int64_t exp = 0;
    assert_int_equal(readauth_check(ra, t, "priv", NULL, NOW, &exp), READ_OK);
    assert_int_equal(exp, NOW + 60);
    assert_int_equal(check(ra, t, "jwtonly"), READ_NOT_ALLOWED);
    assert_int_equal(readauth_check(ra, t, "priv", NULL, NOW + 60, &exp),
                     READ_EXPIRED);
    /* tampered: one character of the payload changed */
    char *dot = strchr(t, '.');
    dot[3] = dot[3] == 'A' ? 'B' : 'A';
    assert_int_equal(check(ra, t, "priv"), READ_BAD_CRED);
    free(t);

    t = make_jwt(JWT_ALG_HS256, SECRET, strlen(SECRET), NOW + 60,
                 "[\"http://ex.org/*\"]", false);
    assert_int_equal(check(ra, t, "jwtonly"), READ_OK);
    assert_int_equal(check(ra, t, "priv"), READ_OK);
    free(t);
    t = make_jwt(JWT_ALG_HS256, SECRET, strlen(SECRET), NOW + 60,
                 "[\"jwt*\"]", false);
    assert_int_equal(check(ra, t, "jwtonly"), READ_OK);
    assert_int_equal(check(ra, t, "priv"), READ_NOT_ALLOWED);
    free(t);
    t = make_jwt(JWT_ALG_HS256, SECRET, strlen(SECRET), 0, "[\"priv\"]", false);
    assert_int_equal(check(ra, t, "priv"), READ_BAD_CRED);   /* no exp */
    free(t);
    t = make_jwt(JWT_ALG_HS256, SECRET, strlen(SECRET), NOW + 60, "\"priv\"",
                 false);
    assert_int_equal(check(ra, t, "priv"), READ_BAD_CRED);   /* not an array */
    free(t);
    t = make_jwt(JWT_ALG_HS256, "another secret of 32 bytes at least!", 36,
                 NOW + 60, "[\"priv\"]", false);
    assert_int_equal(check(ra, t, "priv"), READ_BAD_CRED);
    free(t);
    t = make_jwt(JWT_ALG_HS256, SECRET, strlen(SECRET), NOW + 60, NULL, true);
    assert_int_equal(check(ra, t, "jwtonly"), READ_OK);      /* admin claim */
    free(t);
    readauth_unref(ra);
}

/* readauth/jwt_nbf: a token used before its nbf is refused as expired. */
static void
test_jwt_nbf(void **state)
{
    (void)state;
    struct readauth *ra = closed_hub();
    jwt_t *j = NULL;
    assert_int_equal(jwt_new(&j), 0);
    assert_int_equal(jwt_add_grant_int(j, "exp", NOW + 600), 0);
    assert_int_equal(jwt_add_grant_int(j, "nbf", NOW + 60), 0);
    assert_int_equal(jwt_add_grants_json(j, "{\"topics\":[\"priv\"]}"), 0);
    assert_int_equal(jwt_set_alg(j, JWT_ALG_HS256, (const unsigned char *)SECRET,
                                 (int)strlen(SECRET)), 0);
    char *t = jwt_encode_str(j);
    jwt_free(j);
    assert_int_equal(check(ra, t, "priv"), READ_EXPIRED);
    int64_t exp;
    assert_int_equal(readauth_check(ra, t, "priv", NULL, NOW + 61, &exp), READ_OK);
    free(t);
    readauth_unref(ra);
}

/* readauth/alg_decided_by_key: with an RSA public key, RS256 tokens are
 * taken; "none", HS256 keyed with the public key's PEM (algorithm
 * confusion) and an ES256 token are not. With an EC P-256 key, ES256. */
static void
test_alg_decided_by_key(void **state)
{
    (void)state;
    char *priv, *pub, *epriv, *epub;
    const char *why = NULL;
    make_keys(2048, NULL, &priv, &pub);
    make_keys(0, "P-256", &epriv, &epub);
    struct readauth *ra = readauth_new(false);
    assert_int_equal(readauth_topic(ra, "t", "http://ex.org/t", true), 0);
    assert_int_equal(readauth_jwt_public_key(ra, pub, strlen(pub), &why), 0);

    char *t = make_jwt(JWT_ALG_RS256, priv, strlen(priv), NOW + 60, "[\"t\"]", false);
    assert_int_equal(check(ra, t, "t"), READ_OK);
    free(t);
    t = make_jwt(JWT_ALG_HS256, pub, strlen(pub), NOW + 60, "[\"t\"]", true);
    assert_int_equal(check(ra, t, "t"), READ_BAD_CRED);
    free(t);
    t = make_jwt(JWT_ALG_NONE, NULL, 0, NOW + 60, "[\"t\"]", true);
    assert_int_equal(check(ra, t, "t"), READ_BAD_CRED);
    free(t);
    t = make_jwt(JWT_ALG_ES256, epriv, strlen(epriv), NOW + 60, "[\"t\"]", false);
    assert_int_equal(check(ra, t, "t"), READ_BAD_CRED);
    char *es = t;
    readauth_unref(ra);

    ra = readauth_new(false);
    assert_int_equal(readauth_topic(ra, "t", "http://ex.org/t", true), 0);
    assert_int_equal(readauth_jwt_public_key(ra, epub, strlen(epub), &why), 0);
    assert_int_equal(check(ra, es, "t"), READ_OK);
    free(es);
    readauth_unref(ra);
    free(priv);
    free(pub);
    free(epriv);
    free(epub);
}

/* ---------------------------------------------------------- JWT cache */

static struct readauth_stats
stats_of(const struct readauth *ra)
{
    struct readauth_stats st;
    readauth_stats(ra, &st);
    return st;
}

/* readauth/jwt_cached: a JWT checked again against the same snapshot is
 * verified once and then found in the cache, with the same exp, topics and
 * admin claim; a token that fails verification is never cached. */
static void
test_jwt_cached(void **state)
{
    (void)state;
    struct readauth *ra = closed_hub();
    struct readauth_stats st = stats_of(ra);
    assert_int_equal(st.jwt_verified, 0);
    assert_int_equal(st.jwt_cached, 0);
    char *t = make_jwt(JWT_ALG_HS256, SECRET, strlen(SECRET), NOW + 60,
                       "[\"priv\", \"jwt*\"]", false);
    int64_t exp = 0;
    assert_int_equal(readauth_check(ra, t, "priv", NULL, NOW, &exp), READ_OK);
    assert_int_equal(exp, NOW + 60);
    st = stats_of(ra);
    assert_int_equal(st.jwt_verified, 1);
    assert_int_equal(st.jwt_cache_hits, 0);
    assert_int_equal(st.jwt_cached, 1);
    assert_true(st.jwt_cached_bytes > 0);
    exp = 0;
    assert_int_equal(readauth_check(ra, t, "priv", NULL, NOW + 1, &exp), READ_OK);
    assert_int_equal(exp, NOW + 60);
    assert_int_equal(check(ra, t, "jwtonly"), READ_OK);
    assert_int_equal(check(ra, t, "other"), READ_NOT_ALLOWED);
    st = stats_of(ra);
    assert_int_equal(st.jwt_verified, 1);
    assert_int_equal(st.jwt_cache_hits, 3);
    assert_int_equal(st.jwt_cached, 1);
    free(t);

    t = make_jwt(JWT_ALG_HS256, SECRET, strlen(SECRET), NOW + 60, NULL, true);
    struct read_cred *c = NULL;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(readauth_cred_new(ra, t, NOW, &c), READ_OK);
        assert_true(readauth_cred_admin(c));
        assert_int_equal(readauth_cred_expiry(c), NOW + 60);
        readauth_cred_free(c);
    }
    free(t);
    st = stats_of(ra);
    assert_int_equal(st.jwt_verified, 2);
    assert_int_equal(st.jwt_cache_hits, 4);

    /* a wrong signature and a token without exp: verified each time */
    t = make_jwt(JWT_ALG_HS256, "another secret of 32 bytes at least!", 36,
                 NOW + 60, "[\"priv\"]", false);
    char *noexp = make_jwt(JWT_ALG_HS256, SECRET, strlen(SECRET), 0,
                           "[\"priv\"]", false);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(check(ra, t, "priv"), READ_BAD_CRED);
        assert_int_equal(check(ra, noexp, "priv"), READ_BAD_CRED);
    }
    st = stats_of(ra);
    assert_int_equal(st.jwt_verified, 6);
    assert_int_equal(st.jwt_cache_hits, 4);
    assert_int_equal(st.jwt_cached, 2);
    free(t);
    free(noexp);
    /* static tokens do not go through it */
    assert_int_equal(check(ra, "tok-A", "priv"), READ_OK);
    assert_int_equal(stats_of(ra).jwt_verified, 6);
    readauth_unref(ra);
}

/* readauth/jwt_cache_expiry: a cached JWT is refused once past its exp and
 * before its nbf, from the cache (no new verification); a token already
 * expired or not yet valid when first verified is not cached. */
static void
test_jwt_cache_expiry(void **state)
{
    (void)state;
    struct readauth *ra = closed_hub();
    char *t = make_jwt(JWT_ALG_HS256, SECRET, strlen(SECRET), NOW + 60,
                       "[\"priv\"]", false);
    int64_t exp;
    assert_int_equal(readauth_check(ra, t, "priv", NULL, NOW, &exp), READ_OK);
    assert_int_equal(readauth_check(ra, t, "priv", NULL, NOW + 59, &exp), READ_OK);
    assert_int_equal(readauth_check(ra, t, "priv", NULL, NOW + 60, &exp),
                     READ_EXPIRED);
    struct read_cred *c = (struct read_cred *)t;   /* must be reset */
    assert_int_equal(readauth_cred_new(ra, t, NOW + 3600, &c), READ_EXPIRED);
    assert_null(c);
    struct readauth_stats st = stats_of(ra);
    assert_int_equal(st.jwt_verified, 1);
    assert_int_equal(st.jwt_cache_hits, 3);
    free(t);

    jwt_t *j = NULL;
    assert_int_equal(jwt_new(&j), 0);
    assert_int_equal(jwt_add_grant_int(j, "exp", NOW + 600), 0);
    assert_int_equal(jwt_add_grant_int(j, "nbf", NOW + 60), 0);
    assert_int_equal(jwt_add_grants_json(j, "{\"topics\":[\"priv\"]}"), 0);
    assert_int_equal(jwt_set_alg(j, JWT_ALG_HS256, (const unsigned char *)SECRET,
                                 (int)strlen(SECRET)), 0);
    t = jwt_encode_str(j);
    jwt_free(j);
    /* not yet valid: refused and not cached */
    assert_int_equal(check(ra, t, "priv"), READ_EXPIRED);
    st = stats_of(ra);
    assert_int_equal(st.jwt_verified, 2);
    assert_int_equal(st.jwt_cached, 1);
    assert_int_equal(readauth_check(ra, t, "priv", NULL, NOW + 61, &exp), READ_OK);
    assert_int_equal(stats_of(ra).jwt_cached, 2);
    /* cached now; before its nbf still refused, from the cache */
    assert_int_equal(check(ra, t, "priv"), READ_EXPIRED);
    assert_int_equal(readauth_check(ra, t, "priv", NULL, NOW + 600, &exp),
                     READ_EXPIRED);
    st = stats_of(ra);
    assert_int_equal(st.jwt_verified, 3);
    assert_int_equal(st.jwt_cache_hits, 5);
    free(t);

    /* already expired when first seen: refused, not cached */
    t = make_jwt(JWT_ALG_HS256, SECRET, strlen(SECRET), NOW - 1, "[\"priv\"]",
                 false);
    assert_int_equal(check(ra, t, "priv"), READ_EXPIRED);
    assert_int_equal(check(ra, t, "priv"), READ_EXPIRED);
    st = stats_of(ra);
    assert_int_equal(st.jwt_verified, 5);
    assert_int_equal(st.jwt_cached, 2);
    free(t);
    readauth_unref(ra);
}

/* An ES256-only snapshot with one private topic "t" and the public key. */
static struct readauth *
es256_hub(const char *pub)
{
    const char *why = NULL;
    struct readauth *ra = readauth_new(false);
    assert_non_null(ra);
    assert_int_equal(readauth_topic(ra, "t", "http://ex.org/t", true), 0);
    assert_int_equal(readauth_jwt_public_key(ra, pub, strlen(pub), &why), 0);
    return ra;
}

/* readauth/jwt_cache_reload: a new snapshot starts with an empty cache: a
 * token cached under a key that the reload rotated out is refused (and a
 * token of the new key let in), even while the old snapshot, still
 * referenced, lets the old token in from its cache. */
static void
test_jwt_cache_reload(void **state)
{
    (void)state;
    char *priv1, *pub1, *priv2, *pub2;
    make_keys(0, "P-256", &priv1, &pub1);
    make_keys(0, "P-256", &priv2, &pub2);
    char *t1 = make_jwt(JWT_ALG_ES256, priv1, strlen(priv1), NOW + 600,
                        "[\"t\"]", false);
    char *t2 = make_jwt(JWT_ALG_ES256, priv2, strlen(priv2), NOW + 600,
                        "[\"t\"]", false);
    struct readauth *old = es256_hub(pub1);
    assert_int_equal(check(old, t1, "t"), READ_OK);
    assert_int_equal(check(old, t1, "t"), READ_OK);
    assert_int_equal(stats_of(old).jwt_cache_hits, 1);

    struct readauth *ra = es256_hub(pub2);   /* the reload */
    struct readauth_stats st = stats_of(ra);
    assert_int_equal(st.jwt_cached, 0);
    assert_int_equal(st.jwt_verified, 0);
    assert_int_equal(check(ra, t1, "t"), READ_BAD_CRED);
    assert_int_equal(check(ra, t1, "t"), READ_BAD_CRED);
    assert_int_equal(check(ra, t2, "t"), READ_OK);
    st = stats_of(ra);
    assert_int_equal(st.jwt_verified, 3);
    assert_int_equal(st.jwt_cache_hits, 0);
    assert_int_equal(st.jwt_cached, 1);
    /* the old snapshot, as a WebSocket thread not yet told holds it */
    assert_int_equal(check(old, t1, "t"), READ_OK);
    assert_int_equal(check(old, t2, "t"), READ_BAD_CRED);
    assert_int_equal(stats_of(old).jwt_cache_hits, 2);
    readauth_unref(old);
    assert_int_equal(check(ra, t2, "t"), READ_OK);
    assert_int_equal(stats_of(ra).jwt_cache_hits, 1);
    readauth_unref(ra);
    free(t1);
    free(t2);
    free(priv1);
    free(pub1);
    free(priv2);
    free(pub2);
}

/* readauth/jwt_cache_bound: READAUTH_JWT_CACHE + 1 distinct tokens keep
 * the cache at or under its bound, every token still allows its own topic
 * and no other, each checked again; tokens with large claims keep it under
 * READAUTH_JWT_CACHE_BYTES. */
static void
test_jwt_cache_bound(void **state)
{
    (void)state;
    enum { N = READAUTH_JWT_CACHE + 1 };
    struct readauth *ra = readauth_new(true);
    assert_int_equal(readauth_hub_token(ra, "hub-1"), 0);
    assert_int_equal(readauth_jwt_secret(ra, SECRET, strlen(SECRET)), 0);
    char **tok = calloc(N, sizeof(*tok));
    assert_non_null(tok);
    char topics[64], name[32], other[32];
    size_t most = 0;
    for (int i = 0; i < N; i++) {
        snprintf(topics, sizeof(topics), "[\"n%d\"]", i);
        tok[i] = make_jwt(JWT_ALG_HS256, SECRET, strlen(SECRET), NOW + 600,
                          topics, false);
        snprintf(name, sizeof(name), "n%d", i);
        assert_int_equal(check(ra, tok[i], name), READ_OK);
        struct readauth_stats st = stats_of(ra);
        assert_true(st.jwt_cached <= READAUTH_JWT_CACHE);
        assert_true(st.jwt_cached >= 1);
        if (st.jwt_cached > most)
            most = st.jwt_cached;
    }
    assert_int_equal(most, READAUTH_JWT_CACHE);   /* it was filled */
    struct readauth_stats st = stats_of(ra);
    assert_int_equal(st.jwt_verified, N);
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "n%d", i);
        snprintf(other, sizeof(other), "n%d", (i + 1) % N);
        assert_int_equal(check(ra, tok[i], name), READ_OK);
        assert_int_equal(check(ra, tok[i], other), READ_NOT_ALLOWED);
        assert_true(stats_of(ra).jwt_cached <= READAUTH_JWT_CACHE);
    }
    for (int i = 0; i < N; i++)
        free(tok[i]);

    /* about 5 kB of claims each: the byte bound comes first */
    enum { FAT = READAUTH_JWT_CACHE_BYTES / 5000 + 100 };
    size_t tl = 40 * 128 + 64;
    char *big = malloc(tl);
    assert_non_null(big);
    for (int i = 0; i < FAT; i++) {
        size_t o = (size_t)snprintf(big, tl, "[\"f%d\"", i);
        for (int k = 0; k < 40; k++)
            o += (size_t)snprintf(big + o, tl - o, ",\"%0120d\"", k);
        snprintf(big + o, tl - o, "]");
        char *t = make_jwt(JWT_ALG_HS256, SECRET, strlen(SECRET), NOW + 600,
                           big, false);
        assert_true(strlen(t) <= READAUTH_JWT_MAX);
        snprintf(name, sizeof(name), "f%d", i);
        for (int r = 0; r < 2; r++)
            assert_int_equal(check(ra, t, name), READ_OK);
        st = stats_of(ra);
        assert_true(st.jwt_cached_bytes <= READAUTH_JWT_CACHE_BYTES);
        free(t);
    }
    assert_true(stats_of(ra).jwt_cached < FAT);   /* it was emptied */
    free(big);
    free(tok);
    readauth_unref(ra);
}

struct cache_thread {
    struct readauth *ra;
    char **tok;
    int ntok;
    int seed;
    int bad;
};

static void *
cache_thread_run(void *arg)
{
    struct cache_thread *ct = arg;
    char name[32];
    for (int r = 0; r < 5; r++) {
        for (int k = 0; k < ct->ntok; k++) {
            int i = (k * 7 + ct->seed + r) % ct->ntok;
            snprintf(name, sizeof(name), "n%d", i);
            int64_t exp = 0;
            if (readauth_check(ct->ra, ct->tok[i], name, NULL, NOW, &exp) !=
                    READ_OK || exp != NOW + 600)
                ct->bad++;
        }
    }
    return NULL;
}

/* readauth/jwt_cache_threads: threads sharing one snapshot check the same
 * tokens at once: every check right, every token cached once, each check
 * either a verification or a hit (clean under ASan). */
static void
test_jwt_cache_threads(void **state)
{
    (void)state;
    enum { NTOK = 101, NTH = 4 };
    struct readauth *ra = readauth_new(true);
    assert_int_equal(readauth_hub_token(ra, "hub-1"), 0);
    assert_int_equal(readauth_jwt_secret(ra, SECRET, strlen(SECRET)), 0);
    char *tok[NTOK];
    char topics[64];
    for (int i = 0; i < NTOK; i++) {
        snprintf(topics, sizeof(topics), "[\"n%d\"]", i);
        tok[i] = make_jwt(JWT_ALG_HS256, SECRET, strlen(SECRET), NOW + 600,
                          topics, false);
    }
    struct cache_thread ct[NTH];
    pthread_t th[NTH];
    for (int i = 0; i < NTH; i++) {
        ct[i] = (struct cache_thread){ .ra = readauth_ref(ra), .tok = tok,
                                       .ntok = NTOK, .seed = i * 13 };
        assert_int_equal(pthread_create(&th[i], NULL, cache_thread_run, &ct[i]), 0);
    }
    readauth_unref(ra);   /* the threads hold it now */
    ra = readauth_ref(ct[0].ra);
    for (int i = 0; i < NTH; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(ct[i].bad, 0);
        readauth_unref(ct[i].ra);
    }
    struct readauth_stats st = stats_of(ra);
    assert_int_equal(st.jwt_cached, NTOK);
    assert_true(st.jwt_verified >= NTOK);
    assert_true(st.jwt_verified <= (uint64_t)NTOK * NTH);
    assert_int_equal(st.jwt_verified + st.jwt_cache_hits,
                     (uint64_t)NTOK * NTH * 5);
    readauth_unref(ra);
    for (int i = 0; i < NTOK; i++)
        free(tok[i]);
}

/* readauth/public_keys_refused: not PEM, RSA under 2048 bits, EC off P-256. */
static void
test_public_keys_refused(void **state)
{
    (void)state;
    char *priv, *pub;
    const char *why = NULL;
    struct readauth *ra = readauth_new(false);
    assert_int_equal(readauth_jwt_public_key(ra, "nope", 4, &why), RS_EINVAL);
    assert_non_null(why);
    make_keys(1024, NULL, &priv, &pub);
    assert_int_equal(readauth_jwt_public_key(ra, pub, strlen(pub), &why), RS_EINVAL);
    free(priv);
    free(pub);
    make_keys(0, "P-384", &priv, &pub);
    assert_int_equal(readauth_jwt_public_key(ra, pub, strlen(pub), &why), RS_EINVAL);
    free(priv);
    free(pub);
    assert_int_equal(readauth_jwt_secret(ra, "short", 5), RS_EINVAL);
    readauth_unref(ra);
}

/* readauth/jwt_open_uri: in open mode a JWT naming a topic URI allows the
 * channel named after that URI. */
static void
test_jwt_open_uri(void **state)
{
    (void)state;
    struct readauth *ra = readauth_new(true);
    assert_int_equal(readauth_hub_token(ra, "hub-1"), 0);
    assert_int_equal(readauth_jwt_secret(ra, SECRET, strlen(SECRET)), 0);
    char name[128], other[128];
    assert_int_equal(topics_derive_name("http://ex.org/feed", name, sizeof(name)), 0);
    assert_int_equal(topics_derive_name("http://ex.org/else", other, sizeof(other)), 0);
    char *t = make_jwt(JWT_ALG_HS256, SECRET, strlen(SECRET), NOW + 60,
                       "[\"http://ex.org/feed\"]", false);
    assert_int_equal(check(ra, t, name), READ_OK);
    assert_int_equal(check(ra, t, other), READ_NOT_ALLOWED);
    free(t);
    readauth_unref(ra);
}

/* readauth/token_files: comments and blank lines skipped; a file others
 * may read refused unless insecure; white space inside a token, an empty
 * file or a missing one refused with a message. */
static void
test_token_files(void **state)
{
    (void)state;
    char path[] = "/tmp/test_readauth.XXXXXX", err[256];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "# rotation\n\n  tok-1  \ntok-2\r\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    struct readauth *ra = readauth_new(true);
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(readauth_read_tokens(path, false, readauth_hub_token, ra,
                                          err, sizeof(err)), 0);
    assert_int_equal(check(ra, "tok-1", "x"), READ_OK);
    assert_int_equal(check(ra, "tok-2", "x"), READ_OK);
    assert_int_equal(check(ra, "# rotation", "x"), READ_BAD_CRED);
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(readauth_read_tokens(path, false, readauth_hub_token, ra,
                                          err, sizeof(err)), RS_EDENIED);
    assert_non_null(strstr(err, "readable by group or others"));
    assert_int_equal(readauth_read_tokens(path, true, readauth_hub_token, ra,
                                          err, sizeof(err)), 0);
    FILE *f = fopen(path, "w");
    fputs("two words\n", f);
    fclose(f);
    assert_int_equal(readauth_read_tokens(path, true, readauth_hub_token, ra,
                                          err, sizeof(err)), RS_EINVAL);
    f = fopen(path, "w");
    fputs("# nothing\n\n", f);
    fclose(f);
    assert_int_equal(readauth_read_tokens(path, true, readauth_hub_token, ra,
                                          err, sizeof(err)), RS_EINVAL);
    unlink(path);
    assert_int_equal(readauth_read_tokens(path, true, readauth_hub_token, ra,
                                          err, sizeof(err)), RS_EIO);
    readauth_unref(ra);
}

/* readauth/bearer_of: "Bearer TOKEN" in any case, white space trimmed;
 * other schemes and an empty token are no bearer. */
static void
test_bearer_of(void **state)
{
    (void)state;
    size_t n = 0;
    const char *b = readauth_bearer_of("  bEaReR   abc.def  ", &n);
    assert_non_null(b);
    assert_int_equal(n, 7);
    assert_memory_equal(b, "abc.def", 7);
    assert_null(readauth_bearer_of("Basic dXNlcjpwdw==", &n));
    assert_null(readauth_bearer_of("Bearer   ", &n));
    assert_null(readauth_bearer_of("Bearerabc", &n));
}

/* readauth/refs: a snapshot lives until its last reference goes. */
static void
test_refs(void **state)
{
    (void)state;
    struct readauth *ra = closed_hub();
    struct readauth *r2 = readauth_ref(ra);
    readauth_unref(ra);
    assert_int_equal(check(r2, "tok-A", "priv"), READ_OK);
    readauth_unref(r2);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_static_tokens),
        cmocka_unit_test(test_admin),
        cmocka_unit_test(test_unknown_hidden),
        cmocka_unit_test(test_open_hub_tokens),
        cmocka_unit_test(test_jwt_hs256),
        cmocka_unit_test(test_jwt_nbf),
        cmocka_unit_test(test_alg_decided_by_key),
        cmocka_unit_test(test_jwt_cached),
        cmocka_unit_test(test_jwt_cache_expiry),
        cmocka_unit_test(test_jwt_cache_reload),
        cmocka_unit_test(test_jwt_cache_bound),
        cmocka_unit_test(test_jwt_cache_threads),
        cmocka_unit_test(test_public_keys_refused),
        cmocka_unit_test(test_jwt_open_uri),
        cmocka_unit_test(test_token_files),
        cmocka_unit_test(test_bearer_of),
        cmocka_unit_test(test_refs),
    };
    return cmocka_run_group_tests_name("readauth", tests, NULL, NULL);
}
