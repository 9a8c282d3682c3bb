/*
 * rs_hash.h - ResourceSync fixity values: parsing and formatting the `hash`
 * attribute (a whitespace-separated list of algo:hexdigest), comparing two
 * such lists, and computing digests of content (OpenSSL EVP).
 */
#ifndef RS_HASH_H
#define RS_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"

enum rs_hash_algo {
    RS_HASH_OTHER = 0,   /* a token we do not know; kept by name */
    RS_HASH_MD5,
    RS_HASH_SHA1,        /* token "sha-1" */
    RS_HASH_SHA256,      /* token "sha-256" */
    RS_HASH_SHA512,      /* token "sha-512" */
};

#define RS_HASH_MAXLEN 64     /* longest digest we keep, in bytes */
#define RS_HASH_MAX 4         /* digests kept per attribute */
#define RS_HASH_NAMELEN 16    /* algorithm token, including NUL */

struct rs_digest {
    enum rs_hash_algo algo;
    char name[RS_HASH_NAMELEN];   /* lower-case token as written, e.g. "sha-256" */
    uint8_t len;                  /* bytes used in bytes[] */
    uint8_t bytes[RS_HASH_MAXLEN];
};

/* A parsed hash attribute; n == 0 means "absent". Plain value, no heap. */
struct rs_hashes {
    uint8_t n;
    struct rs_digest d[RS_HASH_MAX];
};

/* Longest rs_hashes_format() output including NUL. */
#define RS_HASHES_BUFSZ (RS_HASH_MAX * (RS_HASH_NAMELEN + 1 + 2 * RS_HASH_MAXLEN + 1) + 1)

/*
 * Parse "md5:abc... sha-256:def..." (tokens are case-insensitive; the hex is
 * either case). Each item must be NAME:HEX with an even number of hex digits;
 * for known algorithms the digest must have the algorithm's exact length.
 * Unknown algorithm names (letters, digits, '-') are kept as RS_HASH_OTHER.
 * An empty or all-whitespace string, more than RS_HASH_MAX items, a repeated
 * algorithm or a digest over RS_HASH_MAXLEN is RS_EINVAL.
 */
int rs_hashes_parse(const char *s, size_t len, struct rs_hashes *out) RS_MUST_CHECK;

/* Write "name:hex name:hex" (lower-case hex) into buf (RS_HASHES_BUFSZ).
 * Returns the length (0 when h->n == 0). */
size_t rs_hashes_format(const struct rs_hashes *h, char *buf);

/* The digest of algorithm algo in h, or NULL. */
const struct rs_digest *rs_hashes_find(const struct rs_hashes *h, enum rs_hash_algo algo);

/* The strongest algorithm h carries that we compute (sha-256, sha-512,
 * sha-1, md5, in that order), or RS_HASH_OTHER when none: one verified
 * digest is the check, computing every announced one costs CPU for
 * nothing. */
enum rs_hash_algo rs_hashes_strongest(const struct rs_hashes *h);

/*
 * Compare two lists on the algorithms both carry (RS_HASH_OTHER never counts).
 * Returns 1 if at least one common algorithm exists and all common ones
 * agree, 0 if there is no common algorithm, -1 if any common one differs.
 */
int rs_hashes_match(const struct rs_hashes *a, const struct rs_hashes *b);

/* Computing digests over streamed content. */
struct rs_hasher;

/* algos is a bit mask of (1u << RS_HASH_x); NULL on allocation failure or
 * when the mask names no supported algorithm. */
struct rs_hasher *rs_hasher_new(unsigned algos);
int rs_hasher_update(struct rs_hasher *h, const void *buf, size_t len) RS_MUST_CHECK;
/* Finish into out (in ascending algo order); the hasher can then be reused
 * as if new. Both return 0, RS_EINVAL for bad arguments, or RS_ENOMEM when
 * OpenSSL fails; a failed update is reported again by every later update
 * and by final, which then resets the hasher without touching out. */
int rs_hasher_final(struct rs_hasher *h, struct rs_hashes *out) RS_MUST_CHECK;
void rs_hasher_free(struct rs_hasher *h);

#endif
