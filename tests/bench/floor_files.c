/*
 * floor_files.c - the floor of a mirror's write path, for bench_dump.sh:
 * copy every regular file of a tree into DST as rssub's mirror writes one
 * (a temporary name created in the file's directory, the bytes written,
 * the mtime set, closed, renamed over the final name), with nothing else:
 * no HTTP, no ZIP, no digest, no ledger; on one thread, or on THREADS
 * threads taking runs of files in turn (as rssub's dump writers do). The
 * source files are read into memory first, so only the writes are timed.
 * Prints "files=N threads=T seconds=S us_per_file=U".
 *
 * Usage: floor_files SRC_TREE DST [THREADS]
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct item {
    char *rel;
    char *data;
    size_t len;
};

static struct item *items;
static size_t nitems, capitems;

static void
die(const char *what, const char *path)
{
    fprintf(stderr, "floor_files: %s %s: %s\n", what, path, strerror(errno));
    exit(1);
}

/* Read every regular file below dir (rel: its path below the root). */
static void
load(const char *root, const char *rel)
{
    char path[8192];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    DIR *d = opendir(path);
    if (d == NULL)
        die("opendir", path);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char r[4096];
        snprintf(r, sizeof(r), "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
        snprintf(path, sizeof(path), "%s/%s", root, r);
        struct stat st;
        if (lstat(path, &st) != 0)
            die("lstat", path);
        if (S_ISDIR(st.st_mode)) {
            load(root, r);
            continue;
        }
        if (!S_ISREG(st.st_mode))
            continue;
        if (nitems == capitems) {
            capitems = capitems ? capitems * 2 : 1024;
            items = realloc(items, capitems * sizeof(*items));
            if (items == NULL)
                die("realloc", "");
        }
        struct item *it = &items[nitems++];
        it->rel = strdup(r);
        it->len = (size_t)st.st_size;
        it->data = malloc(it->len ? it->len : 1);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (it->rel == NULL || it->data == NULL || fd < 0)
            die("read", path);
        size_t got = 0;
        while (got < it->len) {
            ssize_t n = read(fd, it->data + got, it->len - got);
            if (n <= 0)
                die("read", path);
            got += (size_t)n;
        }
        close(fd);
    }
    closedir(d);
}

/* mkdir -p of the directory part of rel below dst. */
static void
make_dirs(const char *dst, const char *rel)
{
    char path[8192];
    snprintf(path, sizeof(path), "%s/%s", dst, rel);
    for (char *p = path + strlen(dst) + 1; (p = strchr(p, '/')) != NULL;
         p++) {
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            die("mkdir", path);
        *p = '/';
    }
}

static const char *dst;
static atomic_size_t next_item;

#define RUN 256     /* files a thread takes at once */

/* Write every item, RUN at a time, until none is left. */
static void *
writer(void *arg)
{
    (void)arg;
    for (;;) {
        size_t k = atomic_fetch_add(&next_item, RUN);
        if (k >= nitems)
            return NULL;
        for (size_t i = k; i < k + RUN && i < nitems; i++) {
            struct item *it = &items[i];
            char fin[8192], tmp[8192];
            make_dirs(dst, it->rel);
            snprintf(fin, sizeof(fin), "%s/%s", dst, it->rel);
            char *slash = strrchr(fin, '/');
            snprintf(tmp, sizeof(tmp), "%.*s/.rssub-tmp.%06zu",
                     (int)(slash - fin), fin, i % 1000000);
            int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
            if (fd < 0)
                die("open", tmp);
            if (write(fd, it->data, it->len) != (ssize_t)it->len)
                die("write", tmp);
            struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT },
                                      { .tv_sec = 1600000000 } };
            if (futimens(fd, ts) != 0 || close(fd) != 0)
                die("futimens/close", tmp);
            if (rename(tmp, fin) != 0)
                die("rename", tmp);
        }
    }
}

int
main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: floor_files SRC_TREE DST [THREADS]\n");
        return 2;
    }
    char *end = NULL;
    long nthreads = argc == 4 ? strtol(argv[3], &end, 10) : 1;
    if ((argc == 4 && (end == argv[3] || *end != '\0')) || nthreads < 1 ||
        nthreads > 64) {
        fprintf(stderr, "floor_files: THREADS is 1 to 64\n");
        return 2;
    }
    load(argv[1], "");
    dst = argv[2];
    if (mkdir(dst, 0755) != 0 && errno != EEXIST)
        die("mkdir", dst);
    pthread_t th[64];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long t = 1; t < nthreads; t++)
        if (pthread_create(&th[t], NULL, writer, NULL) != 0)
            die("pthread_create", "");
    writer(NULL);
    for (long t = 1; t < nthreads; t++)
        pthread_join(th[t], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) +
               (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("files=%zu threads=%ld seconds=%.3f us_per_file=%.2f\n", nitems,
           nthreads, s, nitems ? s / (double)nitems * 1e6 : 0.0);
    for (size_t i = 0; i < nitems; i++) {
        free(items[i].rel);
        free(items[i].data);
    }
    free(items);
    return 0;
}
