/*
 * rs_tokenfile.h - reading secrets from files: a bearer token (the first
 * line of a file) and small secret texts (header files), refusing a file
 * that group or others may read unless the caller allows it. It owns the
 * checks on the file and on the token's shape; where the secret goes is the
 * caller's business. Library code: errors come back in err, never printed.
 */
#ifndef RS_TOKENFILE_H
#define RS_TOKENFILE_H

#include <stdbool.h>
#include <stddef.h>

#include "rs_error.h"

/* Longest token accepted, in bytes (a NUL more in the caller's buffer). */
#define RS_TOKENFILE_MAX 4096

/*
 * Refuse a file group or others may read (mode & 044), unless insecure:
 * for files the caller does not read itself (a netrc or a TLS key libcurl
 * opens). 0; RS_EIO: cannot stat it; RS_EDENIED: readable by others. err
 * (if errsz > 0) says which file and what to do.
 */
int rs_tokenfile_check(const char *path, bool insecure, char *err,
                       size_t errsz) RS_MUST_CHECK;

/*
 * A UTF-8 byte order mark at the start of a file (some editors write one)
 * is not part of its token or text.
 *
 * The token on the first line of path, space and tabs around it trimmed,
 * into buf (NUL-terminated; bufsz > the token's length). 0; RS_EIO: cannot
 * open or read it; RS_EDENIED: readable by group or others and !insecure;
 * RS_EINVAL: empty, holds white space, longer than RS_TOKENFILE_MAX or than
 * buf. The bytes read are wiped from the stack; the caller wipes buf
 * (explicit_bzero) when done with it.
 */
int rs_tokenfile_read(const char *path, bool insecure, char *buf,
                      size_t bufsz, char *err, size_t errsz) RS_MUST_CHECK;

/*
 * The whole of path (at most max bytes) in *out, NUL-terminated, *len
 * bytes (len may be NULL); free it with rs_tokenfile_text_free. 0; RS_EIO;
 * RS_EDENIED as above; RS_ETOOBIG: longer than max; RS_EINVAL: a NUL byte;
 * RS_ENOMEM.
 */
int rs_tokenfile_read_text(const char *path, bool insecure, size_t max,
                           char **out, size_t *len, char *err,
                           size_t errsz) RS_MUST_CHECK;

/* Wipes and frees what rs_tokenfile_read_text returned; NULL is a no-op. */
void rs_tokenfile_text_free(char *text);

#endif
