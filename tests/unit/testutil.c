/* testutil.c - shared unit test fixtures (testutil.h). */
#define _XOPEN_SOURCE 700
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rs_alloc.h"
#include "testutil.h"

char *
tu_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf != NULL && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(buf, cap * 2 + 1);
            if (nb == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf == NULL)
        return NULL;
    buf[n] = '\0';
    if (len != NULL)
        *len = n;
    return buf;
}

const char *
tu_read_str(const char *path)
{
    static char buf[4096];
    char *s = tu_read_file(path, NULL);
    if (s == NULL)
        return NULL;
    snprintf(buf, sizeof(buf), "%s", s);
    free(s);
    return buf;
}

int
tu_count_entries(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (prefix == NULL || strncmp(de->d_name, prefix, strlen(prefix)) == 0)
            n++;
    }
    closedir(d);
    return n;
}

const char *
tu_data_path(const char *rel)
{
    static char path[4096];
    snprintf(path, sizeof(path), "%s/%s", RS_TEST_DATA, rel);
    return path;
}

char *
tu_read_data(const char *rel, size_t *len)
{
    char *buf = tu_read_file(tu_data_path(rel), len);
    if (buf == NULL)
        fail_msg("cannot read test data %s", tu_data_path(rel));
    return buf;
}

void
tu_write_pattern(const char *path, size_t n, int first)
{
    unsigned char buf[4096];
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    for (size_t off = 0; off < n;) {
        size_t k = n - off < sizeof(buf) ? n - off : sizeof(buf);
        for (size_t j = 0; j < k; j++)
            buf[j] = tu_pattern_byte(first, off + j);
        assert_int_equal(write(fd, buf, k), (ssize_t)k);
        off += k;
    }
    assert_int_equal(close(fd), 0);
}

char *
tu_mkdtemp(void)
{
    const char *tmp = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof(tmpl), "%s/rstest.XXXXXX", tmp ? tmp : "/tmp");
    if (mkdtemp(tmpl) == NULL)
        fail_msg("mkdtemp failed");
    return strdup(tmpl);
}

static int
rmtree_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void
tu_rmtree(const char *path)
{
    nftw(path, rmtree_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* -------------------------------------------------------- failing allocator */

static unsigned long alloc_fail_at, alloc_seen;

static void *
tu_malloc(size_t size)
{
    if (++alloc_seen == alloc_fail_at)
        return NULL;
    return malloc(size);
}

static void *
tu_realloc(void *p, size_t size)
{
    if (++alloc_seen == alloc_fail_at)
        return NULL;
    return realloc(p, size);
}

void
tu_alloc_fail_at(unsigned long n)
{
    static const struct rs_allocator failing = { tu_malloc, tu_realloc, free };
    alloc_seen = 0;
    alloc_fail_at = n;
    rs_alloc_set(n ? &failing : NULL);
}

unsigned long
tu_alloc_count(void)
{
    return alloc_seen;
}

int
tu_loopback_socket(int backlog, int *port)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    if (backlog > 0)
        assert_int_equal(listen(fd, backlog), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

/* One pass over /proc/self/task: threads but the main one leaving sig
 * unblocked. */
static int
threads_unblocked_once(int sig, int *others)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    char self[32];
    int open = 0;

    *others = 0;
    assert_non_null(d);
    snprintf(self, sizeof(self), "%ld", (long)getpid());
    while ((e = readdir(d)) != NULL) {
        char path[300], line[256];
        unsigned long long blk = 0;
        FILE *f;
        if (e->d_name[0] == '.' || strcmp(e->d_name, self) == 0)
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
        if ((f = fopen(path, "r")) == NULL)
            continue;                  /* it ended meanwhile */
        while (fgets(line, sizeof(line), f) != NULL)
            if (sscanf(line, "SigBlk: %llx", &blk) == 1)
                break;
        fclose(f);
        (*others)++;
        if (!(blk & (1ULL << (sig - 1))))
            open++;
    }
    closedir(d);
    return open;
}

int
tu_threads_unblocked(int sig, int *others)
{
    int open = 0;

    for (int i = 0; i < 100; i++) {
        if ((open = threads_unblocked_once(sig, others)) == 0)
            break;
        usleep(10000);
    }
    return open;
}
