/*
 * readauth.h - who may read a topic: rshub's read credentials (static
 * bearer tokens per topic, hub-wide ones for open-mode topics, admin
 * tokens, and signed expiring tokens: JWT through Debian's libjwt), built
 * from the configuration into a snapshot that is immutable once built and
 * shared by reference between the main loop and the WebSocket service
 * threads; a reload builds a new one. It reads the files it is given and
 * does no other I/O; counting and logging refusals is readnote.c's, and
 * applying a verdict (401/403, closing with 4008) is the callers'.
 * The one mutable part of a snapshot is its cache of verified JWTs (at
 * most READAUTH_JWT_CACHE entries and READAUTH_JWT_CACHE_BYTES of claims;
 * emptied when either is reached): it owns, per token's SHA-256 (never the
 * token), what verifying it established, so that a reconnect or a reload's
 * re-check with the same token skips the signature; the time claims are
 * checked on every use. A new snapshot starts with it empty.
 */
#ifndef HUB_READAUTH_H
#define HUB_READAUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"

#define READAUTH_TOKEN_MAX 4096     /* a static token, bytes */
#define READAUTH_JWT_MAX 8192       /* a JWT, bytes */
#define READAUTH_CLAIM_TOPICS 256   /* entries of a JWT's topics claim */
#define READAUTH_SECRET_MIN 32      /* an HS256 secret, bytes */
#define READAUTH_FILE_MAX (64 * 1024)  /* a token, secret or key file */
#define READAUTH_JWT_CACHE 10000    /* verified JWTs cached per snapshot */
#define READAUTH_JWT_CACHE_BYTES (8 * 1024 * 1024)  /* their claims, bytes */

enum read_verdict {
    READ_PUBLIC = 0,    /* the topic needs no credential */
    READ_OK,            /* the credential allows the topic */
    READ_NO_CRED,       /* private and no credential given: 401 */
    READ_BAD_CRED,      /* no token the hub knows, a bad signature, a
                           malformed or unsigned JWT: 403 */
    READ_EXPIRED,       /* a JWT past its exp (or before its nbf): 403 */
    READ_NOT_ALLOWED,   /* a valid credential, for other topics: 403 */
    READ_VERDICTS,
};

/* The metric label of a refusal ("no_credential", "bad_credential",
 * "expired", "not_allowed"; "ok" otherwise) and its one-line text. */
const char *readauth_verdict_name(enum read_verdict v);
const char *readauth_verdict_reason(enum read_verdict v);
/* 401, 403, or 0 for a verdict that lets the caller in. */
int readauth_verdict_status(enum read_verdict v);

struct readauth;

/* ------------------------------------------------------------ building */

/* An empty snapshot (every topic public). open: topics not declared with
 * readauth_topic are open-mode topics (the hub-wide tokens apply to them);
 * otherwise they are unknown. NULL on ENOMEM. One reference. */
struct readauth *readauth_new(bool open);

/* Declare a configured topic (strings copied). It is private when it has
 * tokens (readauth_topic_token) or when private_ is set (JWT and admin
 * credentials only). RS_EINVAL on a name declared twice. */
int readauth_topic(struct readauth *ra, const char *name, const char *uri,
                   bool private_) RS_MUST_CHECK;
/* A read token of the declared topic name (makes it private). */
int readauth_topic_token(struct readauth *ra, const char *name,
                         const char *token) RS_MUST_CHECK;
/* A hub-wide read token: makes every open-mode topic private. */
int readauth_hub_token(struct readauth *ra, const char *token) RS_MUST_CHECK;
/* An admin token: reads every topic and sees them all. */
int readauth_admin_token(struct readauth *ra, const char *token) RS_MUST_CHECK;
/* The HS256 secret (at least READAUTH_SECRET_MIN bytes). */
int readauth_jwt_secret(struct readauth *ra, const void *secret,
                        size_t len) RS_MUST_CHECK;
/* The public key (PEM) of RS256 (RSA, 2048 bits or more) or ES256 (EC
 * P-256) tokens: the key's type decides the algorithm. RS_EINVAL with *why
 * for anything else. */
int readauth_jwt_public_key(struct readauth *ra, const char *pem, size_t len,
                            const char **why) RS_MUST_CHECK;

/*
 * Read a file of credentials (rs_tokenfile.h: at most 64 KiB): each line
 * that is not empty nor a # comment is one token (white space around it
 * trimmed, none inside, at most READAUTH_TOKEN_MAX bytes), handed to add.
 * 0, or RS_EIO, RS_EDENIED (readable by group or others and !insecure),
 * RS_EINVAL, RS_ETOOBIG, RS_ENOMEM with a message in err.
 */
int readauth_read_tokens(const char *path, bool insecure,
                         int (*add)(struct readauth *, const char *),
                         struct readauth *ra, char *err,
                         size_t errsz) RS_MUST_CHECK;

/* -------------------------------------------------------------- sharing */

/* References are atomic: any thread may take or drop one. */
struct readauth *readauth_ref(struct readauth *ra);
void readauth_unref(struct readauth *ra);            /* NULL ok */

/* Does any topic need a credential (a private topic, a hub-wide token)? */
bool readauth_active(const struct readauth *ra);

/* What the snapshot's JWT cache has done since it was built. */
struct readauth_stats {
    uint64_t jwt_verified;     /* JWTs handed to libjwt (cache misses) */
    uint64_t jwt_cache_hits;   /* JWTs taken from the cache instead */
    size_t jwt_cached;         /* entries now (<= READAUTH_JWT_CACHE) */
    size_t jwt_cached_bytes;   /* their claims (<= ..._CACHE_BYTES) */
};
void readauth_stats(const struct readauth *ra, struct readauth_stats *out);

/* ------------------------------------------------------------- checking */

/*
 * A bearer token, checked once against a snapshot: a static token (any
 * of the snapshot's, compared in constant time through their SHA-256) or a
 * JWT (signature, algorithm fixed by the key, exp required; a JWT this
 * snapshot verified before is found in its cache, by SHA-256, and only its
 * exp and nbf are checked again). What it allows is asked per topic with
 * readauth_allows. Any thread may check against a shared snapshot.
 */
struct read_cred;

/* Check bearer (NUL-terminated) at now_s (Unix seconds): READ_OK with *out
 * set (readauth_cred_free it), or READ_BAD_CRED / READ_EXPIRED with *out
 * NULL. */
enum read_verdict readauth_cred_new(const struct readauth *ra,
                                    const char *bearer, int64_t now_s,
                                    struct read_cred **out);
void readauth_cred_free(struct read_cred *c);        /* NULL ok */
/* Unix seconds after which it is no longer valid; 0: never (static). */
int64_t readauth_cred_expiry(const struct read_cred *c);
bool readauth_cred_admin(const struct read_cred *c);

/*
 * May the holder of c (NULL: none given) read the topic name (uri: its
 * URI, NULL when unknown; the snapshot knows configured topics' URIs)?
 * READ_PUBLIC, READ_OK, READ_NO_CRED or READ_NOT_ALLOWED. In closed mode a
 * name that is no configured topic is treated as private when any topic
 * is, so that probing names does not tell private topics from unknown ones.
 * A JWT's topics entry matches the name or the URI as an fnmatch pattern;
 * an entry that is a plain URI also matches the open-mode topic named
 * after it. ra NULL (no read rules at all): READ_PUBLIC.
 */
enum read_verdict readauth_allows(const struct readauth *ra,
                                  const struct read_cred *c,
                                  const char *name, const char *uri);

/* Both steps at once: the verdict of bearer (NULL: none) for a topic, and
 * the credential's expiry in *expiry (0: none). */
enum read_verdict readauth_check(const struct readauth *ra, const char *bearer,
                                 const char *name, const char *uri,
                                 int64_t now_s, int64_t *expiry);

/* The bearer token of an Authorization header value ("Bearer TOKEN", any
 * case of the scheme, white space trimmed): a pointer into v, its length
 * in *len; NULL when v is not a bearer credential. */
const char *readauth_bearer_of(const char *v, size_t *len);

#endif
