/*
 * rs_url.h - URL handling for every daemon and tool, on libcurl's curl_url
 * API: resolving references against a base (RFC 3986), splitting out the
 * pieces a caller needs. Pure computation; no I/O.
 */
#ifndef RS_URL_H
#define RS_URL_H

#include "rs_error.h"

/* Resolve ref (absolute or relative) against the absolute URL base into a
 * new string (*out, freed with rs_free). RS_EINVAL when either is not a
 * URL, RS_ENOMEM. */
int rs_url_resolve(const char *base, const char *ref, char **out) RS_MUST_CHECK;

/* The scheme://host[:port] of url (lower-cased host) into a new string. */
int rs_url_origin(const char *url, char **out) RS_MUST_CHECK;

/* Is url an absolute http:// or https:// URL with a host? */
int rs_url_is_http(const char *url);

/* Does url carry a user or password ("http://user:pw@host/")? Such a URL
 * would show them wherever it is listed or logged; the daemons refuse it
 * where a credential has an option of its own. */
int rs_url_has_userinfo(const char *url);

#endif
