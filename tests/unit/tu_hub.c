/* tu_hub.c - a real rshub and redis-server for the unit tests (tu_hub.h):
 * started from the build tree (and stopped with the test, however it
 * ends), waited for, stopped by PID; and a blocking publish with libcurl's
 * easy interface. */
#include "tu_hub.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* argv run with stdin from /dev/null and stdout, stderr appended to log;
 * the PID, or -1. The child gets SIGTERM when the test dies (a crash, an
 * abort under ASan skips every teardown): a hub or Redis must not outlive
 * the test that started it. Only async-signal-safe calls after fork. */
static pid_t
hub_spawn_argv(const char *const argv[], const char *log)
{
    char *av[64];
    size_t n = 0;
    pid_t parent = getpid(), pid;
    int fd;

    /* execvp's argv is not const-qualified, though never written */
    while (argv[n] != NULL && n + 1 < sizeof(av) / sizeof(av[0]))
        n++;
    memcpy(av, argv, n * sizeof(av[0]));
    av[n] = NULL;
    pid = fork();
    if (pid != 0)
        return pid;
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
        _exit(127);
    if ((fd = open("/dev/null", O_RDONLY)) < 0 || dup2(fd, 0) < 0)
        _exit(127);
    close(fd);
    if ((fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600)) < 0 ||
        dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
        _exit(127);
    close(fd);
    execvp(av[0], av);
    _exit(127);
}

void
tu_proc_stop(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    for (int i = 0; i < 100; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        usleep(50000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static bool
unix_connects(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    size_t n = strlen(path);
    bool ok;
    int fd;

    if (n >= sizeof(sa.sun_path))
        return false;
    memcpy(sa.sun_path, path, n + 1);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static void
redis_start(struct tu_hub *g)
{
    char log[300];

    snprintf(g->sock, sizeof(g->sock), "%s/redis.sock", g->dir);
    snprintf(log, sizeof(log), "%s/redis.log", g->dir);
    const char *argv[] = { "redis-server", "--port", "0", "--unixsocket",
                           g->sock, "--unixsocketperm", "700", "--dir", g->dir,
                           "--save", "", "--appendonly", "no", "--daemonize",
                           "no", NULL };
    g->redis = hub_spawn_argv(argv, log);
    assert_true(g->redis > 0);
    for (int i = 0; i < 200 && !unix_connects(g->sock); i++)
        usleep(50000);
    if (!unix_connects(g->sock))
        fail_msg("redis-server did not start (see %s)", log);
}

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
    snprintf(redis, sizeof(redis), "unix://%s", g->sock);
    snprintf(ready, sizeof(ready), "%s/hub%d.ready", g->dir, k);
    snprintf(log, sizeof(log), "%s/hub.log", g->dir);
    const char *base[] = { TU_HUB_RSHUB, "--open", "--listen", listen,
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
    *pid = hub_spawn_argv(argv, log);
    assert_true(*pid > 0);
    for (int i = 0; i < 400; i++) {
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
            break;
        usleep(25000);
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
    redis_start(g);
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
    tu_proc_stop(g->redis);
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
