/* tu_hub.c - a real rshub and redis-server for the unit tests (tu_hub.h):
 * the hub started from the build tree on a tu_redis server, waited for,
 * stopped by PID; and a blocking publish with libcurl's easy interface. */
#include "tu_hub.h"

#include <curl/curl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

/* The integer after "key": in a ready file's JSON, or 0. */
static int
ready_field(const char *s, const char *key)
{
    const char *p = s != NULL ? strstr(s, key) : NULL;

    return p != NULL ? (int)strtol(p + strlen(key), NULL, 10) : 0;
}

int
tu_hub_spawn(struct tu_hub *g, int port, const char *prefix,
             const char *const *args, pid_t *pid, int *ws_port)
{
    char listen[32], redis[256], ready[300], log[300];
    const char *argv[64];
    size_t n = 0;
    int k = g->nstarts++;

    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    snprintf(redis, sizeof(redis), "%s", g->redis.url);
    snprintf(ready, sizeof(ready), "%s/hub%d.ready", g->dir, k);
    snprintf(log, sizeof(log), "%s/hub.log", g->dir);
    /* --ws-listen port 0: by default rshub takes the HTTP port + 1, which
     * for a hub restarted on its old HTTP port was never this test's (the
     * first start had port 0 for both) and may be another connection's
     * local port for longer than the retries below wait (test_sub_hubsub
     * hub_down_then_up failed so, once, in a full run) */
    const char *base[] = { TU_HUB_RSHUB, "--open", "--listen", listen,
                           "--ws-listen", "127.0.0.1:0",
                           "--redis", redis, "--redis-prefix", prefix,
                           "--ready-file", ready,
                           "--callback-allow", "127.0.0.0/8",
                           "--lease-min", "1s", "--drain-time", "1s",
                           "--log-level", "debug", NULL };
    for (size_t i = 0; base[i] != NULL; i++)
        argv[n++] = base[i];
    for (size_t i = 0; args != NULL && args[i] != NULL; i++) {
        assert_true(n + 1 < sizeof(argv) / sizeof(argv[0]));
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    /* A port asked for again (a hub restarted on its old port) can be
     * held for a moment by another test's connection, whose local port the
     * kernel took from the same range: the hub exits at once, and is
     * started again, for up to 5 s. */
    for (int attempt = 0; attempt < (port != 0 ? 20 : 1); attempt++) {
        if (attempt > 0)
            usleep(250000);
        bool exited = false;
        *pid = tu_proc_spawn(argv, log);
        assert_true(*pid > 0);
        for (int i = 0; i < 400 && !exited; i++) {
            char *s = tu_read_file(ready, NULL);
            int http = ready_field(s, "\"http\":");
            int ws = ready_field(s, "\"ws\":");

            free(s);
            if (http > 0) {
                if (ws_port != NULL)
                    *ws_port = ws;
                return http;
            }
            if (waitpid(*pid, NULL, WNOHANG) == *pid)
                exited = true;
            else
                usleep(25000);
        }
        if (!exited)
            break;                /* still starting after 10 s: give up */
    }
    {
        /* the log goes with the temp dir: its end, here */
        size_t len = 0;
        char *l = tu_read_file(log, &len);
        const char *tail = l == NULL ? "" : len > 600 ? l + len - 600 : l;
        fprintf(stderr, "rshub did not start; the end of %s:\n%s\n", log,
                tail);
        free(l);
    }
    fail_msg("rshub did not start (see %s)", log);
    return -1;
}

struct tu_hub *
tu_hub_new(const char *const *args)
{
    static const char *const proxies[] = { "http_proxy", "https_proxy",
        "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy", NULL };
    struct tu_hub *g;

    for (int i = 0; proxies[i] != NULL; i++)
        unsetenv(proxies[i]);
    if (access(TU_HUB_RSHUB, X_OK) != 0)
        fail_msg("%s is missing: build the rshub target first", TU_HUB_RSHUB);
    g = calloc(1, sizeof(*g));
    assert_non_null(g);
    g->dir = tu_mkdtemp();
    tu_redis_start(&g->redis);
    g->hub_port = tu_hub_spawn(g, 0, "rshub:", args, &g->hub, &g->ws_port);
    snprintf(g->hub_url, sizeof(g->hub_url), "http://127.0.0.1:%d/hub",
             g->hub_port);
    return g;
}

void
tu_hub_free(struct tu_hub *g)
{
    if (g == NULL)
        return;
    tu_proc_stop(g->hub);
    tu_redis_stop(&g->redis);
    tu_rmtree(g->dir);
    free(g->dir);
    free(g);
}

/* ------------------------------------------------------------ publish */

struct pub_hdrs {
    char *id, *channel;
    size_t idsz, chsz;
};

/* Copy the value of header name from line (len bytes) into out. */
static void
pub_header(const char *line, size_t len, const char *name, char *out,
           size_t outsz)
{
    size_t n = strlen(name);

    if (out == NULL || len <= n + 1 || strncasecmp(line, name, n) != 0 ||
        line[n] != ':')
        return;
    line += n + 1;
    len -= n + 1;
    while (len > 0 && (*line == ' ' || *line == '\t')) {
        line++;
        len--;
    }
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == '\n' ||
                       line[len - 1] == ' '))
        len--;
    snprintf(out, outsz, "%.*s", (int)len, line);
}

static size_t
pub_on_header(char *buf, size_t size, size_t n, void *ud)
{
    struct pub_hdrs *h = ud;

    pub_header(buf, size * n, "X-Hub-Id", h->id, h->idsz);
    pub_header(buf, size * n, "X-Hub-Channel", h->channel, h->chsz);
    return size * n;
}

static size_t
pub_on_body(char *buf, size_t size, size_t n, void *ud)
{
    (void)buf;
    (void)ud;
    return size * n;
}

long
tu_hub_publish(const struct tu_hub *g, const char *topic, const char *body,
               size_t len, char *id, size_t idsz, char *channel, size_t chsz)
{
    struct pub_hdrs h = { id, channel, idsz, chsz };
    struct curl_slist *hdrs = NULL;
    char link[1024];
    long status = 0;
    CURL *c;

    if (id != NULL)
        id[0] = '\0';
    if (channel != NULL)
        channel[0] = '\0';
    snprintf(link, sizeof(link),
             "Link: <%s>; rel=\"self\", <%s>; rel=\"hub\"", topic, g->hub_url);
    c = curl_easy_init();
    assert_non_null(c);
    hdrs = curl_slist_append(hdrs, "Content-Type: application/xml");
    hdrs = curl_slist_append(hdrs, link);
    hdrs = curl_slist_append(hdrs, "Expect:");
    assert_non_null(hdrs);
    curl_easy_setopt(c, CURLOPT_URL, g->hub_url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, pub_on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, pub_on_body);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    return status;
}
