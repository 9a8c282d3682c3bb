/*
 * rs_pubid.h - the X-Publish-Id header of a publish to rshub
 * (docs/protocol.md 3): "KEY:SEQ", where KEY names one publisher's
 * sequence on a topic and SEQ is a position in it. The hub stores a publish
 * only when its SEQ is above the highest it accepted for that KEY, which
 * makes a resend harmless. This module parses and formats the value and
 * draws new KEYs. The hub reads the header; rssource, rspub and rsbridge
 * send it. It does no I/O, apart from the random bytes of rs_pubid_key_new.
 */
#ifndef RS_PUBID_H
#define RS_PUBID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"

#define RS_PUBID_HEADER "X-Publish-Id"
#define RS_PUBID_KEY_MAX 64                  /* bytes of a KEY */
#define RS_PUBID_SEQ_MAX UINT64_C(9223372036854775807)   /* 2^63 - 1 */
/* "KEY:SEQ" and its NUL: 64 + 1 + 19 digits + 1 */
#define RS_PUBID_BUFSZ (RS_PUBID_KEY_MAX + 21)
/* The KEYs rs_pubid_key_new draws: 32 hex digits (128 random bits). */
#define RS_PUBID_NEWKEY_LEN 32

struct rs_pubid {
    char key[RS_PUBID_KEY_MAX + 1];   /* 1..64 of [A-Za-z0-9._-] */
    uint64_t seq;                     /* 1..RS_PUBID_SEQ_MAX */
};

/* Is key 1..64 bytes of [A-Za-z0-9._-]? */
bool rs_pubid_key_ok(const char *key);

/*
 * Parse a header value (NUL-terminated; blanks around it are ignored)
 * into *out. SEQ is decimal digits only, with no sign, and its value must be
 * 1..2^63-1 (leading zeros are allowed). Returns 0, or RS_EINVAL with *why
 * set to a one-line reason for a 400 answer; *out is then unspecified.
 */
int rs_pubid_parse(const char *value, struct rs_pubid *out,
                   const char **why) RS_MUST_CHECK;

/* "KEY:SEQ" into buf (RS_PUBID_BUFSZ is always enough). Returns 0, or
 * RS_EINVAL for a bad key or seq, or when buf is too short. */
int rs_pubid_format(const char *key, uint64_t seq, char *buf,
                    size_t len) RS_MUST_CHECK;

/* A new random KEY (RS_PUBID_NEWKEY_LEN hex digits) into buf. Needs len
 * > RS_PUBID_NEWKEY_LEN. Returns 0, RS_EINVAL when buf is too short, or
 * RS_EIO when the kernel gives no random bytes. */
int rs_pubid_key_new(char *buf, size_t len) RS_MUST_CHECK;

#endif
