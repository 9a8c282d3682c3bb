/*
 * websubwire.c - WebSub wire formats (websubwire.h). Forms are decoded by
 * libevent (evhttp_parse_query_str), URLs built and split by libcurl's
 * URL API, the HMAC is OpenSSL's: all of them pure computation here.
 */
#include <curl/curl.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rs_alloc.h"
#include "rs_url.h"
#include "websubwire.h"

/* ---------------------------------------------------------------- form */

static int
form_urls(struct websubwire_form *f)
{
    size_t n = 0;
    for (struct evkeyval *kv = f->kv->tqh_first; kv != NULL; kv = kv->next.tqe_next)
        if (strcmp(kv->key, "hub.url") == 0 || strcmp(kv->key, "hub.topic") == 0)
            n++;
    if (n == 0)
        return 0;
    f->url_keys = rs_calloc(n, sizeof(*f->url_keys));
    f->urls = rs_calloc(n, sizeof(*f->urls));
    if (f->url_keys == NULL || f->urls == NULL)
        return RS_ENOMEM;
    for (struct evkeyval *kv = f->kv->tqh_first; kv != NULL; kv = kv->next.tqe_next) {
        if (strcmp(kv->key, "hub.url") != 0 && strcmp(kv->key, "hub.topic") != 0)
            continue;
        f->url_keys[f->nurls] = kv->key;
        f->urls[f->nurls++] = kv->value;
    }
    return 0;
}

/* The rules of subscribe and unsubscribe; NULL when f keeps them. */
static const char *
form_check(struct websubwire_form *f, const char *mode,
           const struct websubwire_leases *leases)
{
    const char *lease = evhttp_find_header(f->kv, "hub.lease_seconds");
    f->topic = evhttp_find_header(f->kv, "hub.topic");
    f->callback = evhttp_find_header(f->kv, "hub.callback");
    f->secret = evhttp_find_header(f->kv, "hub.secret");
    if (mode == NULL)
        return "missing hub.mode";
    if (strcmp(mode, "subscribe") == 0)
        f->mode = WEBSUBWIRE_SUBSCRIBE;
    else if (strcmp(mode, "unsubscribe") == 0)
        f->mode = WEBSUBWIRE_UNSUBSCRIBE;
    else
        return "hub.mode must be subscribe, unsubscribe or publish";
    if (f->topic == NULL || f->topic[0] == '\0')
        return "missing hub.topic";
    if (f->callback == NULL || f->callback[0] == '\0')
        return "missing hub.callback";
    if (!rs_url_is_http(f->callback))
        return "hub.callback must be an absolute http(s) URL";
    /* GET /topics lists callbacks and the log names them: a password in
     * one would be shown to whoever reads either */
    if (rs_url_has_userinfo(f->callback))
        return "hub.callback must not carry a user or password (the hub "
               "lists and logs callbacks; hub.secret signs deliveries)";
    if (f->secret != NULL && strlen(f->secret) > WEBSUBWIRE_SECRET_MAX)
        return "hub.secret must be less than 200 bytes";
    if (f->secret != NULL && f->secret[0] == '\0')
        f->secret = NULL;
    f->lease_s = leases->default_s;
    if (lease != NULL) {
        char *end;
        unsigned long long v = strtoull(lease, &end, 10);
        if (end == lease || *end != '\0' || lease[0] == '-')
            return "hub.lease_seconds must be a whole number";
        f->lease_s = v;
    }
    /* WebSub: the hub picks the lease within its bounds */
    if (f->lease_s < leases->min_s)
        f->lease_s = leases->min_s;
    if (f->lease_s > leases->max_s)
        f->lease_s = leases->max_s;
    return NULL;
}

int
websubwire_form_parse(struct websubwire_form *f, const char *body, size_t len,
                      const struct websubwire_leases *leases, const char **why)
{
    int rc = RS_ENOMEM;
    char *copy = NULL;
    memset(f, 0, sizeof(*f));
    *why = "out of memory";
    f->kv = rs_calloc(1, sizeof(*f->kv));   /* evhttp_parse_query_str inits it */
    copy = rs_malloc(len + 1);
    if (f->kv == NULL || copy == NULL)
        goto out;
    memcpy(copy, body, len);
    copy[len] = '\0';
    /* A NUL, raw or encoded, would cut a value short without a trace. */
    if (strlen(copy) != len || strstr(copy, "%00") != NULL) {
        *why = "the form holds a NUL byte";
        rc = RS_EINVAL;
        goto out;
    }
    if (evhttp_parse_query_str(copy, f->kv) != 0) {
        *why = "malformed form body";
        rc = RS_EPARSE;
        goto out;
    }
    const char *mode = evhttp_find_header(f->kv, "hub.mode");
    if (mode != NULL && strcmp(mode, "publish") == 0) {
        f->mode = WEBSUBWIRE_PUBLISH;
        rc = form_urls(f);
        goto out;
    }
    *why = form_check(f, mode, leases);
    rc = *why != NULL ? RS_EINVAL : 0;
out:
    if (rc == 0)
        *why = NULL;
    rs_free(copy);
    return rc;
}

void
websubwire_form_cleanup(struct websubwire_form *f)
{
    if (f->kv != NULL)
        evhttp_clear_headers(f->kv);
    rs_free(f->kv);
    rs_free(f->url_keys);
    rs_free(f->urls);
    memset(f, 0, sizeof(*f));
}

/* ----------------------------------------------------------- callbacks */

char *
websubwire_callback_host(const char *url)
{
    char *host = NULL, *out = NULL;
    CURLU *u = curl_url();
    if (u == NULL)
        return NULL;
    if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        out = rs_strdup(host);
        for (char *c = out; c != NULL && *c; c++)
            if (*c >= 'A' && *c <= 'Z')
                *c = (char)(*c + 32);
    }
    curl_free(host);
    curl_url_cleanup(u);
    return out;
}

/* callback + "?"/"&" + k=v&..., values URL-encoded; kv NULL-ended pairs,
 * a NULL key ends them early. */
static char *
callback_with(const char *callback, const char *const *kv)
{
    char *out = NULL, *url = NULL;
    CURLU *u = curl_url();
    if (u == NULL || curl_url_set(u, CURLUPART_URL, callback, 0) != CURLUE_OK)
        goto done;
    for (size_t i = 0; kv[i] != NULL; i += 2) {
        size_t n = strlen(kv[i]) + strlen(kv[i + 1]) + 2;
        char *pair = rs_malloc(n);
        if (pair == NULL)
            goto done;
        snprintf(pair, n, "%s=%s", kv[i], kv[i + 1]);
        CURLUcode uc = curl_url_set(u, CURLUPART_QUERY, pair,
                                    CURLU_APPENDQUERY | CURLU_URLENCODE);
        rs_free(pair);
        if (uc != CURLUE_OK)
            goto done;
    }
    if (curl_url_get(u, CURLUPART_URL, &url, 0) == CURLUE_OK)
        out = rs_strdup(url);
done:
    curl_free(url);
    curl_url_cleanup(u);
    return out;
}

char *
websubwire_verify_url(const char *callback, enum websubwire_mode mode,
                      const char *topic, const char *challenge, uint64_t lease_s)
{
    char lease[24];
    bool sub = mode == WEBSUBWIRE_SUBSCRIBE;
    snprintf(lease, sizeof(lease), "%llu", (unsigned long long)lease_s);
    const char *kv[] = { "hub.mode", sub ? "subscribe" : "unsubscribe",
                         "hub.topic", topic, "hub.challenge", challenge,
                         sub ? "hub.lease_seconds" : NULL, lease, NULL };
    return callback_with(callback, kv);
}

char *
websubwire_denial_url(const char *callback, const char *topic,
                      const char *reason)
{
    const char *kv[] = { "hub.mode", "denied", "hub.topic", topic,
                         "hub.reason", reason, NULL };
    return callback_with(callback, kv);
}

void
websubwire_challenge(const unsigned char rnd[WEBSUBWIRE_CHALLENGE_BYTES],
                     char out[WEBSUBWIRE_CHALLENGE_BUFSZ])
{
    for (int i = 0; i < WEBSUBWIRE_CHALLENGE_BYTES; i++)
        snprintf(out + 2 * i, 3, "%02x", rnd[i]);
}

bool
websubwire_challenge_echoed(const char *challenge, const char *body, size_t len)
{
    while (len > 0 && (body[len - 1] == '\n' || body[len - 1] == '\r' ||
                       body[len - 1] == ' '))
        len--;
    return len == strlen(challenge) && memcmp(body, challenge, len) == 0;
}

/* ---------------------------------------------------------- delivery */

void
websubwire_signature(const char *secret, const void *body, size_t len,
                     char out[WEBSUBWIRE_SIG_BUFSZ])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    HMAC(EVP_sha256(), secret, (int)strlen(secret), body, len, md, &mdlen);
    memcpy(out, "sha256=", 7);
    for (unsigned i = 0; i < mdlen && 7 + 2 * i + 2 < WEBSUBWIRE_SIG_BUFSZ; i++)
        snprintf(out + 7 + 2 * i, 3, "%02x", md[i]);
    out[7 + 2 * mdlen] = '\0';
}

void
websubwire_post_headers(const struct websubwire_post *p,
                        struct websubwire_headers *h)
{
    char id[MSG_ID_BUFSZ];
    int n = 0;
    snprintf(h->ctype, sizeof(h->ctype), "Content-Type: %s", p->ctype);
    h->v[n++] = h->ctype;
    snprintf(h->link, sizeof(h->link),
             "Link: <%s>; rel=\"hub\", <%s>; rel=\"self\"", p->hub_url,
             p->topic_uri);
    h->v[n++] = h->link;
    if (p->secret != NULL) {
        char sig[WEBSUBWIRE_SIG_BUFSZ];
        websubwire_signature(p->secret, p->body, p->len, sig);
        snprintf(h->sig, sizeof(h->sig), "X-Hub-Signature: %s", sig);
        h->v[n++] = h->sig;
    }
    msg_id_format(p->id, id);
    snprintf(h->id, sizeof(h->id), "X-Hub-Id: %s", id);
    h->v[n++] = h->id;
    if (p->gap_after != NULL) {
        msg_id_format(*p->gap_after, id);
        snprintf(h->gap, sizeof(h->gap), "X-Hub-Gap: %s", id);
        h->v[n++] = h->gap;
    }
    h->v[n++] = "Expect:";   /* no 100-continue round trip */
    h->v[n] = NULL;
}
