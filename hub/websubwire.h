/*
 * websubwire.h - the WebSub wire formats of the hub (docs/protocol.md 5),
 * with no I/O: the POST /hub form and its rules, the verification and
 * denial URLs sent to a callback, the challenge and its echo, the
 * X-Hub-Signature, the headers of a content distribution POST, and a
 * callback's host. Who is asked what, when, is websub.c's and deliver.c's.
 */
#ifndef HUB_WEBSUBWIRE_H
#define HUB_WEBSUBWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "msg.h"
#include "rs_error.h"

#define WEBSUBWIRE_SECRET_MAX 199     /* hub.secret: less than 200 bytes */
#define WEBSUBWIRE_CHALLENGE_BYTES 16 /* random bytes in a challenge */
#define WEBSUBWIRE_CHALLENGE_BUFSZ (2 * WEBSUBWIRE_CHALLENGE_BYTES + 1)
#define WEBSUBWIRE_SIG_BUFSZ 136      /* "sha256=" + 64 hex digits + NUL,
                                         with room to spare */

/* ---------------------------------------------------------------- form */

enum websubwire_mode {
    WEBSUBWIRE_SUBSCRIBE,
    WEBSUBWIRE_UNSUBSCRIBE,
    WEBSUBWIRE_PUBLISH,
};

/* The hub's lease bounds, seconds: a lease asked for is clamped into
 * [min_s, max_s]; none asked is default_s (clamped too). */
struct websubwire_leases {
    uint64_t min_s, max_s, default_s;
};

/* A parsed POST /hub form. Strings point into it, valid until
 * websubwire_form_cleanup. */
struct websubwire_form {
    enum websubwire_mode mode;
    /* subscribe, unsubscribe */
    const char *topic;           /* hub.topic, not empty */
    const char *callback;        /* hub.callback, an absolute http(s) URL */
    const char *secret;          /* hub.secret; NULL when absent or empty */
    uint64_t lease_s;            /* hub.lease_seconds, clamped */
    /* publish: every hub.url and hub.topic, in the order given (not
     * checked: an answer names the first bad one, after pinging those
     * before it) */
    size_t nurls;
    const char **url_keys;       /* "hub.url" or "hub.topic" */
    const char **urls;
    struct evkeyvalq *kv;        /* private: the decoded pairs */
};

/*
 * Parse body (len bytes, any content) as the form of POST /hub. 0 and *f
 * filled; otherwise *why is a static reason for a 400 answer ("error: "
 * + why) and:
 *   RS_EPARSE   not a form at all (libevent cannot decode it);
 *   RS_EINVAL   a form that breaks a rule of section 5 (a NUL byte, raw
 *               or %00; a missing or bad hub.mode, hub.topic,
 *               hub.callback; a secret of 200 bytes or more; a lease
 *               that is not a whole number);
 *   RS_ENOMEM.
 * Unknown parameters are ignored. Call websubwire_form_cleanup whatever
 * it returns.
 */
int websubwire_form_parse(struct websubwire_form *f, const char *body,
                          size_t len, const struct websubwire_leases *leases,
                          const char **why) RS_MUST_CHECK;
void websubwire_form_cleanup(struct websubwire_form *f);

/* ----------------------------------------------------------- callbacks */

/* The host of a callback URL, lower-cased (rs_free), or NULL. */
char *websubwire_callback_host(const char *url);

/* The verification of intent: callback + hub.mode, hub.topic,
 * hub.challenge and (subscribe) hub.lease_seconds, URL-encoded, appended
 * to the callback's own query. rs_free; NULL if callback is not a URL. */
char *websubwire_verify_url(const char *callback, enum websubwire_mode mode,
                            const char *topic, const char *challenge,
                            uint64_t lease_s);

/* A denial notice: callback + hub.mode=denied, hub.topic, hub.reason. */
char *websubwire_denial_url(const char *callback, const char *topic,
                            const char *reason);

/* The challenge for rnd (hex, WEBSUBWIRE_CHALLENGE_BUFSZ with its NUL). */
void websubwire_challenge(const unsigned char rnd[WEBSUBWIRE_CHALLENGE_BYTES],
                          char out[WEBSUBWIRE_CHALLENGE_BUFSZ]);

/* Did a callback's 2xx body echo challenge? Exactly, but for trailing
 * CR, LF and spaces. */
bool websubwire_challenge_echoed(const char *challenge, const char *body,
                                 size_t len);

/* ---------------------------------------------------------- delivery */

/* "sha256=" and the HMAC-SHA256 of body under secret, in hex. */
void websubwire_signature(const char *secret, const void *body, size_t len,
                          char out[WEBSUBWIRE_SIG_BUFSZ]);

/* What a content distribution POST says besides its body. */
struct websubwire_post {
    const char *ctype;           /* as published */
    const char *hub_url;
    const char *topic_uri;       /* "" when the hub no longer knows it */
    const char *secret;          /* NULL: no signature */
    const void *body;
    size_t len;
    struct msg_id id;            /* X-Hub-Id */
    const struct msg_id *gap_after;   /* X-Hub-Gap, or NULL */
};

/* Its header lines; v is NULL-terminated, for rs_http_req_opts.headers,
 * and points into the struct. */
struct websubwire_headers {
    char ctype[200], link[4200], sig[160], id[80], gap[80];
    const char *v[8];
};

void websubwire_post_headers(const struct websubwire_post *p,
                             struct websubwire_headers *h);

#endif
