/* url.c - URL resolution and inspection on libcurl's curl_url (rs_url.h). */
#include <curl/curl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "rs_alloc.h"
#include "rs_url.h"

/* curl hands out strings from its own allocator; callers free ours. */
static int
url_take(char *curl_str, char **out)
{
    *out = rs_strdup(curl_str);
    curl_free(curl_str);
    return *out != NULL ? 0 : RS_ENOMEM;
}

int
rs_url_resolve(const char *base, const char *ref, char **out)
{
    int rc = RS_EINVAL;
    char *s = NULL;
    CURLU *u = curl_url();
    *out = NULL;
    if (u == NULL)
        return RS_ENOMEM;
    if (curl_url_set(u, CURLUPART_URL, base, 0) != CURLUE_OK)
        goto out;
    /* Setting a relative URL on a handle holding an absolute one resolves
     * it (curl_url_set(3)). */
    if (curl_url_set(u, CURLUPART_URL, ref, 0) != CURLUE_OK)
        goto out;
    if (curl_url_get(u, CURLUPART_URL, &s, 0) != CURLUE_OK)
        goto out;
    rc = url_take(s, out);
out:
    curl_url_cleanup(u);
    return rc;
}

int
rs_url_origin(const char *url, char **out)
{
    int rc = RS_EINVAL;
    char *scheme = NULL, *host = NULL, *port = NULL;
    CURLU *u = curl_url();
    *out = NULL;
    if (u == NULL)
        return RS_ENOMEM;
    if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK)
        goto out;
    (void)curl_url_get(u, CURLUPART_PORT, &port, 0);
    size_t n = strlen(scheme) + strlen(host) + (port ? strlen(port) : 0) + 5;
    char *o = rs_malloc(n);
    if (o == NULL) {
        rc = RS_ENOMEM;
        goto out;
    }
    size_t len = 0;
    len += (size_t)snprintf(o, n, "%s://", scheme);
    for (const char *h = host; *h; h++)
        o[len++] = (*h >= 'A' && *h <= 'Z') ? (char)(*h + 32) : *h;
    o[len] = '\0';
    if (port != NULL)
        snprintf(o + len, n - len, ":%s", port);
    *out = o;
    rc = 0;
out:
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return rc;
}

int
rs_url_has_userinfo(const char *url)
{
    char *user = NULL, *pw = NULL;
    int has = 0;
    CURLU *u = curl_url();
    if (u == NULL)
        return 0;
    if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK) {
        has = curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK ||
              curl_url_get(u, CURLUPART_PASSWORD, &pw, 0) == CURLUE_OK;
    }
    curl_free(user);
    curl_free(pw);
    curl_url_cleanup(u);
    return has;
}

int
rs_url_is_http(const char *url)
{
    char *scheme = NULL, *host = NULL;
    int ok = 0;
    CURLU *u = curl_url();
    if (u == NULL)
        return 0;
    if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
        (strcasecmp(scheme, "http") == 0 || strcasecmp(scheme, "https") == 0) &&
        host[0] != '\0')
        ok = 1;
    curl_free(scheme);
    curl_free(host);
    curl_url_cleanup(u);
    return ok;
}
