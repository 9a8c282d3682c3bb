/*
 * bench_source_get.c - a small HTTP/1.1 GET load generator for
 * bench_source.sh: N keep-alive connections (one thread each, blocking
 * sockets) fetch the paths listed in a file, round robin, for D seconds,
 * and the totals are printed as one line of key=value pairs. It only
 * understands Content-Length bodies, which is what rssource sends.
 *
 *   bench_source_get HOST PORT CONNS SECONDS PATHFILE
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BG_PATHS_MAX 100000
#define BG_BUF (256 * 1024)

static char *paths[BG_PATHS_MAX];
static size_t npaths;
static struct sockaddr_in addr;
static const char *host;
static double deadline;
static atomic_uint_fast64_t total_reqs, total_bytes, total_errors;

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
bg_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int
send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* One request on fd: 0 and the body length, or -1 (connection unusable). */
static int
one_get(int fd, const char *path, char *buf, uint64_t *body)
{
    char req[4200];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host);
    if (n < 0 || (size_t)n >= sizeof(req) || send_all(fd, req, (size_t)n) != 0)
        return -1;
    size_t have = 0;
    char *end = NULL;
    while (end == NULL) {
        if (have + 1 >= BG_BUF)
            return -1;
        ssize_t r = recv(fd, buf + have, BG_BUF - 1 - have, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        have += (size_t)r;
        buf[have] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    if (strncmp(buf, "HTTP/1.1 200", 12) != 0)
        return -1;
    uint64_t clen = 0;
    for (char *h = strstr(buf, "\r\n"); h != NULL && h < end;
         h = strstr(h + 2, "\r\n")) {
        if (strncasecmp(h + 2, "Content-Length:", 15) == 0) {
            clen = strtoull(h + 17, NULL, 10);
            break;
        }
    }
    size_t hdr = (size_t)(end + 4 - buf);
    uint64_t got = have - hdr;
    while (got < clen) {
        size_t want = clen - got > BG_BUF ? BG_BUF : (size_t)(clen - got);
        ssize_t r = recv(fd, buf, want, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (uint64_t)r;
    }
    if (got != clen)
        return -1;     /* pipelined bytes: not expected from one request */
    *body = clen;
    return 0;
}

static void *
worker(void *arg)
{
    size_t i = (size_t)(uintptr_t)arg;
    char *buf = malloc(BG_BUF);
    int fd = -1;
    uint64_t reqs = 0, bytes = 0, errs = 0;
    while (buf != NULL && now_s() < deadline) {
        if (fd < 0 && (fd = bg_connect()) < 0) {
            errs++;
            usleep(10000);
            continue;
        }
        uint64_t body;
        if (one_get(fd, paths[i % npaths], buf, &body) != 0) {
            errs++;
            close(fd);
            fd = -1;
            continue;
        }
        reqs++;
        bytes += body;
        i++;
    }
    if (fd >= 0)
        close(fd);
    free(buf);
    atomic_fetch_add(&total_reqs, reqs);
    atomic_fetch_add(&total_bytes, bytes);
    atomic_fetch_add(&total_errors, errs);
    return NULL;
}

int
main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s HOST PORT CONNS SECONDS PATHFILE\n",
                argv[0]);
        return 2;
    }
    host = argv[1];
    long port = strtol(argv[2], NULL, 10);
    long conns = strtol(argv[3], NULL, 10);
    double secs = strtod(argv[4], NULL);
    if (port <= 0 || port > 65535 || conns <= 0 || conns > 1024 || secs <= 0) {
        fprintf(stderr, "bench_source_get: bad arguments\n");
        return 2;
    }
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "bench_source_get: HOST must be an IPv4 address\n");
        return 2;
    }
    FILE *f = fopen(argv[5], "r");
    if (f == NULL) {
        perror(argv[5]);
        return 2;
    }
    char line[4096];
    while (npaths < BG_PATHS_MAX && fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '/')
            paths[npaths++] = strdup(line);
    }
    fclose(f);
    if (npaths == 0) {
        fprintf(stderr, "bench_source_get: no paths\n");
        return 2;
    }
    pthread_t *th = calloc((size_t)conns, sizeof(*th));
    if (th == NULL)
        return 1;
    double t0 = now_s();
    deadline = t0 + secs;
    for (long i = 0; i < conns; i++)
        pthread_create(&th[i], NULL, worker,
                       (void *)(uintptr_t)((size_t)i * npaths / (size_t)conns));
    for (long i = 0; i < conns; i++)
        pthread_join(th[i], NULL);
    double dt = now_s() - t0;
    uint64_t r = atomic_load(&total_reqs), b = atomic_load(&total_bytes);
    printf("requests=%llu errors=%llu seconds=%.2f req_per_s=%.0f "
           "mb_per_s=%.1f\n", (unsigned long long)r,
           (unsigned long long)atomic_load(&total_errors), dt, (double)r / dt,
           (double)b / dt / 1e6);
    for (size_t i = 0; i < npaths; i++)
        free(paths[i]);
    free(th);
    return 0;
}
