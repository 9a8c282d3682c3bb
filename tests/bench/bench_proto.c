/*
 * bench_proto.c - the document-library benchmark: streaming parse and
 * serialization of a 50,000-entry Resource List and of a 1,000,000-entry
 * Resource List Index tree (entries/s, MB/s, peak RSS), side by side with
 * the Python reference implementation (resync) parsing the same files in
 * the same run. Generation lives in bench_gen.c, the peer's driver in
 * resync_parse.py; this file runs and reports.
 *
 * Every measurement runs in a freshly exec'd child (a subcommand of this
 * binary, or python3) so its peak RSS, read with wait4(), is its own: the
 * driver stays small and never holds generated data.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_gen.h"
#include "rs_alloc.h"
#include "rs_parse.h"
#include "rs_write.h"

#ifndef RS_BENCH_DRIVER
#define RS_BENCH_DRIVER "resync_parse.py"
#endif

#define BENCH_MAX_REPS 50
#define BENCH_OUT_MAX (64 * 1024)   /* a child's report; a few hundred bytes */
#define BENCH_LIST_FIRST_ID 10000000u /* the list's ids differ from the tree's */

/* Goals from the issue. */
#define GOAL_ENTRIES_PER_SEC 500000.0
#define GOAL_RSS_BYTES 16000000.0   /* "16 MB", taken as 10^6 bytes: stricter */
#define GOAL_SPEED_RATIO 20.0
#define GOAL_MEM_RATIO 10.0

static double
bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
bench_parse_size(const char *s, size_t *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v > SIZE_MAX)
        return -1;
    *out = (size_t)v;
    return 0;
}

/* dir/name into buf (PATH_MAX); exits on a path too long to hold, which
 * only a --dir of thousands of bytes could cause. */
static char *
bench_path(char *buf, const char *dir, const char *name)
{
    int n = snprintf(buf, PATH_MAX, "%s/%s", dir, name);
    if (n < 0 || n >= PATH_MAX) {
        fprintf(stderr, "bench_proto: path too long: %s/%s\n", dir, name);
        exit(2);
    }
    return buf;
}

/* The file name of part i ("part00007.xml"), prefixed. */
static const char *
bench_part_name(char *buf, size_t len, const char *prefix, size_t i)
{
    snprintf(buf, len, "%spart%05zu.xml", prefix, i % 100000);
    return buf;
}

/* ===================================================================
 * Children: each prints "TAG SECONDS ENTRIES BYTES" lines on stdout.
 * =================================================================== */

struct bench_count {
    uint64_t entries;
    uint64_t touched;   /* folds every loc in, so the work cannot be elided */
};

/* Every generated entry carries all of these; a parser that skipped one
 * would post figures for less work, so the run stops instead. */
static int
bench_on_entry(void *ud, const struct rs_entry *e)
{
    struct bench_count *c = ud;
    if (e->loc == NULL || e->lastmod == RS_TIME_NONE || !e->has_md ||
        e->md.hash.n != 1 || e->md.length < 0 || e->md.type == NULL) {
        fprintf(stderr, "bench_proto: entry %" PRIu64 " (line %u) came back "
                "incomplete\n", c->entries + 1, e->line);
        return RS_EINVAL;
    }
    c->entries++;
    c->touched += strlen(e->loc) + (unsigned char)e->loc[0];
    return 0;
}

/* Stream one file through a parser in chunk-byte reads. */
static int
bench_parse_file(const char *path, char *buf, size_t chunk,
                 const struct rs_parser_cbs *cbs, void *ud, uint64_t *bytes)
{
    int rc = 0;
    struct rs_parser *p = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "bench_proto: %s: %s\n", path, strerror(errno));
        return RS_EIO;
    }
    p = rs_parser_new(NULL, cbs, ud);
    if (p == NULL) {
        rc = RS_ENOMEM;
        goto out;
    }
    for (;;) {
        ssize_t got = read(fd, buf, chunk);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            fprintf(stderr, "bench_proto: %s: %s\n", path, strerror(errno));
            rc = RS_EIO;
            goto out;
        }
        if (got == 0)
            break;
        *bytes += (uint64_t)got;
        rc = rs_parser_feed(p, buf, (size_t)got);
        if (rc != 0)
            break;
    }
    if (rc == 0)
        rc = rs_parser_finish(p);
    if (rc != 0) {
        const struct rs_diag *d = rs_parser_error(p);
        fprintf(stderr, "bench_proto: %s:%u: %s\n", path, d ? d->line : 0,
                d ? d->msg : rs_strerror(rc));
    }
out:
    rs_parser_free(p);
    close(fd);
    return rc;
}

static int
cmd_parse_list(const char *path, size_t reps, size_t chunk)
{
    struct rs_parser_cbs cbs = {.on_entry = bench_on_entry};
    char *buf = malloc(chunk);
    if (buf == NULL)
        return 1;
    uint64_t touched = 0;
    for (size_t r = 0; r < reps; r++) {
        struct bench_count c = {0, 0};
        uint64_t bytes = 0;
        double t0 = bench_now();
        if (bench_parse_file(path, buf, chunk, &cbs, &c, &bytes) != 0) {
            free(buf);
            return 1;
        }
        double t = bench_now() - t0;
        touched += c.touched;
        printf("parse %.9f %" PRIu64 " %" PRIu64 "\n", t, c.entries, bytes);
    }
    printf("touched %" PRIu64 "\n", touched);
    free(buf);
    return 0;
}

/* The index's <loc>s, as a Destination collects them before the parts. */
struct bench_locs {
    char **v;
    size_t n, cap;
};

static int
bench_on_index_entry(void *ud, const struct rs_entry *e)
{
    struct bench_locs *l = ud;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 32;
        char **v = realloc(l->v, cap * sizeof(*v));
        if (v == NULL)
            return RS_ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n] = strdup(e->loc);
    if (l->v[l->n] == NULL)
        return RS_ENOMEM;
    l->n++;
    return 0;
}

static void
bench_locs_cleanup(struct bench_locs *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof(*l));
}

/* One walk of the tree: the index, then each part it names, in order. */
static int
bench_walk_tree(const char *index, const char *dir, char *buf, size_t chunk,
                struct bench_count *c, uint64_t *bytes)
{
    struct rs_parser_cbs icbs = {.on_entry = bench_on_index_entry};
    struct rs_parser_cbs pcbs = {.on_entry = bench_on_entry};
    struct bench_locs locs = {NULL, 0, 0};
    size_t blen = strlen(BENCH_GEN_BASE);
    int rc = bench_parse_file(index, buf, chunk, &icbs, &locs, bytes);
    for (size_t i = 0; rc == 0 && i < locs.n; i++) {
        /* Map the part's URL into dir, as resync's --mapper does. */
        const char *loc = locs.v[i];
        if (strncmp(loc, BENCH_GEN_BASE, blen) != 0 ||
            strchr(loc + blen, '/') != NULL) {
            fprintf(stderr, "bench_proto: %s: not under %s\n", loc,
                    BENCH_GEN_BASE);
            rc = RS_EINVAL;
            break;
        }
        char path[PATH_MAX];
        bench_path(path, dir, loc + blen);
        rc = bench_parse_file(path, buf, chunk, &pcbs, c, bytes);
    }
    bench_locs_cleanup(&locs);
    return rc;
}

static int
cmd_parse_tree(const char *index, const char *dir, size_t reps, size_t chunk)
{
    char *buf = malloc(chunk);
    if (buf == NULL)
        return 1;
    uint64_t touched = 0;
    for (size_t r = 0; r < reps; r++) {
        struct bench_count c = {0, 0};
        uint64_t bytes = 0;
        double t0 = bench_now();
        if (bench_walk_tree(index, dir, buf, chunk, &c, &bytes) != 0) {
            free(buf);
            return 1;
        }
        double t = bench_now() - t0;
        touched += c.touched;
        printf("parse %.9f %" PRIu64 " %" PRIu64 "\n", t, c.entries, bytes);
    }
    printf("touched %" PRIu64 "\n", touched);
    free(buf);
    return 0;
}

/* ---------------------------------------------------------- writing */

/* A writer sink: counts bytes, and writes them to fd when fd >= 0. */
struct bench_sink {
    int fd;
    uint64_t bytes;
};

static int
bench_sink_write(void *ud, const char *buf, size_t len)
{
    struct bench_sink *s = ud;
    s->bytes += len;
    while (s->fd >= 0 && len > 0) {
        ssize_t n = write(s->fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return RS_EIO;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Write one document to path (or only count it when path is NULL);
 * returns the seconds taken, or -1 on error. */
static double
bench_write_doc(const struct rs_head *h, const struct rs_entry *e, size_t n,
                const char *path, uint64_t *bytes)
{
    struct bench_sink s = {-1, 0};
    char err[256];
    double t0 = bench_now();
    if (path != NULL) {
        s.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (s.fd < 0) {
            fprintf(stderr, "bench_proto: %s: %s\n", path, strerror(errno));
            return -1;
        }
    }
    int rc = bench_gen_write(h, e, n, bench_sink_write, &s, err, sizeof(err));
    if (s.fd >= 0 && close(s.fd) != 0 && rc == 0)
        rc = RS_EIO;
    double t = bench_now() - t0;
    if (rc != 0) {
        fprintf(stderr, "bench_proto: writing %s: %s\n",
                path ? path : "(sink)", err);
        return -1;
    }
    *bytes += s.bytes;
    return t;
}

/* The index naming parts 0..parts-1. */
static int
bench_index_fill(struct bench_gen_part *ix, size_t parts)
{
    ix->n = 0;
    ix->entries = rs_calloc(parts, sizeof(*ix->entries));
    ix->locs = rs_calloc(parts, BENCH_GEN_LOC_MAX);
    if (ix->entries == NULL || ix->locs == NULL) {
        bench_gen_part_cleanup(ix);
        return RS_ENOMEM;
    }
    for (size_t i = 0; i < parts; i++) {
        char *loc = ix->locs + i * BENCH_GEN_LOC_MAX;
        bench_gen_part_url(i, loc);
        rs_entry_init(&ix->entries[i]);
        ix->entries[i].loc = loc;
    }
    ix->n = parts;
    return 0;
}

/*
 * Generate (reps == 0) or time writing (reps > 0) the documents. Writing
 * the tree is timed part by part (generating a part's models is not
 * timed) and summed per repetition.
 */
static int
cmd_write(const char *dir, size_t entries, size_t parts, size_t reps,
          uint64_t seed)
{
    struct bench_gen_part p, ix;
    struct rs_head h;
    struct rs_link links[2];
    char path[PATH_MAX], url[BENCH_GEN_LOC_MAX];
    bool gen = reps == 0;
    size_t nr = gen ? 1 : reps;
    double sink[BENCH_MAX_REPS] = {0}, file[BENCH_MAX_REPS] = {0};
    uint64_t sink_bytes = 0, file_bytes = 0;
    int rc = 1;
    memset(&p, 0, sizeof(p));
    memset(&ix, 0, sizeof(ix));

    /* The standalone list. */
    if (bench_gen_part_fill(&p, seed, BENCH_LIST_FIRST_ID, entries) != 0)
        goto out;
    bench_gen_list_head(&h, links, NULL);
    bench_path(path, dir, gen ? "list.xml" : "w-list.xml");
    for (size_t r = 0; r < nr; r++) {
        uint64_t b = 0;
        double t = 0;
        if (!gen) {
            t = bench_write_doc(&h, p.entries, p.n, NULL, &b);
            if (t < 0)
                goto out;
            printf("sink-list %.9f %zu %" PRIu64 "\n", t, p.n, b);
            b = 0;
        }
        t = bench_write_doc(&h, p.entries, p.n, path, &b);
        if (t < 0)
            goto out;
        if (!gen)
            printf("file-list %.9f %zu %" PRIu64 "\n", t, p.n, b);
    }
    bench_gen_part_cleanup(&p);

    /* The tree: parts, then the index naming them. Generating a part's
     * models is not timed; writing it is, summed per repetition. */
    snprintf(url, sizeof(url), "%sindex.xml", BENCH_GEN_BASE);
    for (size_t i = 0; i < parts; i++) {
        if (bench_gen_part_fill(&p, seed, i * entries, entries) != 0)
            goto out;
        bench_gen_list_head(&h, links, url);
        char name[32];
        bench_path(path, dir, bench_part_name(name, sizeof(name),
                                              gen ? "" : "w-", i));
        for (size_t r = 0; r < nr; r++) {
            double t = 0;
            if (!gen) {
                t = bench_write_doc(&h, p.entries, p.n, NULL, &sink_bytes);
                if (t < 0)
                    goto out;
                sink[r] += t;
            }
            t = bench_write_doc(&h, p.entries, p.n, path, &file_bytes);
            if (t < 0)
                goto out;
            file[r] += t;
        }
        bench_gen_part_cleanup(&p);
    }
    if (bench_index_fill(&ix, parts) != 0)
        goto out;
    bench_gen_index_head(&h, links);
    bench_path(path, dir, gen ? "index.xml" : "w-index.xml");
    for (size_t r = 0; r < nr; r++) {
        double t = 0;
        if (!gen) {
            t = bench_write_doc(&h, ix.entries, ix.n, NULL, &sink_bytes);
            if (t < 0)
                goto out;
            sink[r] += t;
        }
        t = bench_write_doc(&h, ix.entries, ix.n, path, &file_bytes);
        if (t < 0)
            goto out;
        file[r] += t;
    }
    for (size_t r = 0; !gen && r < nr; r++) {
        printf("sink-tree %.9f %zu %" PRIu64 "\n", sink[r], entries * parts,
               sink_bytes / nr);
        printf("file-tree %.9f %zu %" PRIu64 "\n", file[r], entries * parts,
               file_bytes / nr);
    }
    if (gen)
        printf("gen %.9f %zu %" PRIu64 "\n", file[0], entries * parts,
               file_bytes);
    rc = 0;
out:
    bench_gen_part_cleanup(&p);
    bench_gen_part_cleanup(&ix);
    return rc;
}

/* ===================================================================
 * The driver: runs the children and prints the report.
 * =================================================================== */

struct bench_series {
    size_t n;
    double sec[BENCH_MAX_REPS];
    uint64_t entries;
    uint64_t bytes;
    long maxrss_kb;     /* of the child that ran it; -1 unknown */
    bool ok;
};

struct bench_child {
    char out[BENCH_OUT_MAX];
    struct rusage ru;
    int status;         /* exit code, 128+signal, or -1 */
    double wall;
};

/* Run argv (argv[0] a path) with stdout captured into c->out. */
static int
bench_run(const char *const *args, struct bench_child *c)
{
    char *argv[32];
    size_t n = 0;
    int fds[2];
    memset(c, 0, sizeof(*c));
    c->status = -1;
    while (args[n] != NULL && n < 31) {
        argv[n] = strdup(args[n]);
        if (argv[n] == NULL)
            goto out;
        n++;
    }
    argv[n] = NULL;
    if (pipe(fds) != 0)
        goto out;
    fflush(stdout);
    fflush(stderr);
    double t0 = bench_now();
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        goto out;
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv(argv[0], argv);
        fprintf(stderr, "bench_proto: exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    size_t used = 0;
    for (;;) {
        char scratch[4096];
        char *dst = used < sizeof(c->out) - 1 ? c->out + used : scratch;
        size_t room = used < sizeof(c->out) - 1 ? sizeof(c->out) - 1 - used
                                                : sizeof(scratch);
        ssize_t got = read(fds[0], dst, room);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        if (dst != scratch)
            used += (size_t)got;
    }
    c->out[used] = '\0';
    close(fds[0]);
    int st = 0;
    while (wait4(pid, &st, 0, &c->ru) < 0 && errno == EINTR)
        ;
    c->wall = bench_now() - t0;
    c->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
out:
    for (size_t i = 0; i < n; i++)
        free(argv[i]);
    return c->status;
}

static void
bench_series_init(struct bench_series *s)
{
    memset(s, 0, sizeof(*s));
    s->ok = true;
}

/* Add the child's "tag sec entries bytes" lines for one tag to s; its peak
 * RSS counts towards s's. A failed child, or one that printed no line for
 * the tag, marks s failed. */
static void
bench_append(const struct bench_child *c, const char *tag,
             struct bench_series *s)
{
    size_t tlen = strlen(tag), before = s->n;
    if (c->ru.ru_maxrss > s->maxrss_kb)
        s->maxrss_kb = c->ru.ru_maxrss;
    for (const char *l = c->out; *l != '\0';) {
        const char *nl = strchr(l, '\n');
        double sec;
        uint64_t e, b;
        if (strncmp(l, tag, tlen) == 0 && l[tlen] == ' ' &&
            sscanf(l + tlen, "%lf %" SCNu64 " %" SCNu64, &sec, &e, &b) == 3 &&
            s->n < BENCH_MAX_REPS) {
            s->sec[s->n++] = sec;
            s->entries = e;
            s->bytes = b;
        }
        l = nl ? nl + 1 : l + strlen(l);
    }
    if (c->status != 0 || s->n == before)
        s->ok = false;
}

/* The value of "key VALUE" in the child's output, or "" */
static void
bench_info(const struct bench_child *c, const char *key, char *buf, size_t len)
{
    size_t klen = strlen(key);
    buf[0] = '\0';
    for (const char *l = c->out; *l != '\0';) {
        const char *nl = strchr(l, '\n');
        size_t ll = nl ? (size_t)(nl - l) : strlen(l);
        if (ll > klen && strncmp(l, key, klen) == 0 && l[klen] == ' ') {
            snprintf(buf, len, "%.*s", (int)(ll - klen - 1), l + klen + 1);
            return;
        }
        l = nl ? nl + 1 : l + ll;
    }
}

static int
bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double
bench_best(const struct bench_series *s)
{
    double v[BENCH_MAX_REPS];
    memcpy(v, s->sec, s->n * sizeof(v[0]));
    qsort(v, s->n, sizeof(v[0]), bench_cmp_double);
    return v[0];
}

static double
bench_median(const struct bench_series *s)
{
    double v[BENCH_MAX_REPS];
    memcpy(v, s->sec, s->n * sizeof(v[0]));
    qsort(v, s->n, sizeof(v[0]), bench_cmp_double);
    return s->n % 2 ? v[s->n / 2] : (v[s->n / 2 - 1] + v[s->n / 2]) / 2;
}

/* 1234567 -> "1,234,567" */
static const char *
bench_grp(double v, char *buf, size_t len)
{
    char digits[32];
    snprintf(digits, sizeof(digits), "%.0f", v);
    size_t n = strlen(digits), o = 0;
    for (size_t i = 0; i < n && o + 2 < len; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

#define MB(bytes) ((double)(bytes) / 1e6)
#define RSS_MB(kb) ((double)(kb) * 1024.0 / 1e6)

static void
bench_print_parse_row(const char *name, const struct bench_series *s)
{
    char a[32], b[32], c[32];
    if (!s->ok) {
        printf("  %-28s  FAILED (see messages above)\n", name);
        return;
    }
    double best = bench_best(s), med = bench_median(s);
    printf("  %-28s %10s %8.1f %12s %12s %8.1f %8.1f %9.1f\n", name,
           bench_grp((double)s->entries, a, sizeof(a)), MB(s->bytes),
           bench_grp((double)s->entries / best, b, sizeof(b)),
           bench_grp((double)s->entries / med, c, sizeof(c)),
           MB(s->bytes) / best, MB(s->bytes) / med, RSS_MB(s->maxrss_kb));
}

static void
bench_print_write_row(const char *name, const struct bench_series *s)
{
    char a[32], b[32], c[32];
    if (!s->ok) {
        printf("  %-28s  FAILED (see messages above)\n", name);
        return;
    }
    double best = bench_best(s), med = bench_median(s);
    printf("  %-28s %10s %8.1f %12s %12s %8.1f %8.1f\n", name,
           bench_grp((double)s->entries, a, sizeof(a)), MB(s->bytes),
           bench_grp((double)s->entries / best, b, sizeof(b)),
           bench_grp((double)s->entries / med, c, sizeof(c)),
           MB(s->bytes) / best, MB(s->bytes) / med);
}

static void
bench_print_machine(void)
{
    char model[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f != NULL) {
        char line[512];
        while (fgets(line, sizeof(line), f) != NULL) {
            char *colon = strchr(line, ':');
            if (strncmp(line, "model name", 10) == 0 && colon != NULL) {
                snprintf(model, sizeof(model), "%s", colon + 2);
                model[strcspn(model, "\n")] = '\0';
                break;
            }
        }
        fclose(f);
    }
    struct utsname u;
    if (uname(&u) != 0)
        memset(&u, 0, sizeof(u));
    printf("machine: %ld CPUs online, %s, %s %s\n",
           sysconf(_SC_NPROCESSORS_ONLN), model, u.sysname, u.release);
}

static uint64_t
bench_file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static void
bench_rm_tree(const char *dir, size_t parts)
{
    static const char *const names[] = {"list.xml", "index.xml",
                                        "w-list.xml", "w-index.xml"};
    char path[PATH_MAX], name[32];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        unlink(bench_path(path, dir, names[i]));
    for (size_t i = 0; i < parts; i++) {
        unlink(bench_path(path, dir, bench_part_name(name, sizeof(name), "", i)));
        unlink(bench_path(path, dir,
                          bench_part_name(name, sizeof(name), "w-", i)));
    }
    rmdir(dir);
}

struct bench_opts {
    const char *resync;
    const char *python;
    const char *driver;
    const char *dir;
    bool keep;
    size_t reps, peer_reps, peer_tree_reps, entries, parts, chunk;
    uint64_t seed;
};

static void
bench_usage(FILE *f)
{
    fprintf(f,
        "usage: bench_proto [--resync PATH] [options]\n"
        "  --resync PATH     checkout of github resync/resync: run it side by side\n"
        "  --python PATH     interpreter for resync (default /usr/bin/python3)\n"
        "  --driver PATH     resync driver (default %s)\n"
        "  --dir DIR         generate into DIR and keep it (default: a temp dir,\n"
        "                    removed at the end unless --keep)\n"
        "  --keep            keep the generated temp dir\n"
        "  --reps N          repetitions of ours (default 5)\n"
        "  --peer-reps N     repetitions of resync on the list (default 3)\n"
        "  --peer-tree-reps N  repetitions of resync on the tree (default 1)\n"
        "  --entries N       entries per document (default 50000)\n"
        "  --parts N         parts of the index (default 20)\n"
        "  --chunk BYTES     read/feed size (default 65536)\n"
        "  --seed N          generator seed (default %u)\n",
        RS_BENCH_DRIVER, BENCH_GEN_SEED);
}

static int
bench_parse_opts(int argc, char **argv, struct bench_opts *o)
{
    static const struct option lo[] = {
        {"resync", required_argument, NULL, 'r'},
        {"python", required_argument, NULL, 'p'},
        {"driver", required_argument, NULL, 'd'},
        {"dir", required_argument, NULL, 'D'},
        {"keep", no_argument, NULL, 'k'},
        {"reps", required_argument, NULL, 'n'},
        {"peer-reps", required_argument, NULL, 'N'},
        {"peer-tree-reps", required_argument, NULL, 'T'},
        {"entries", required_argument, NULL, 'e'},
        {"parts", required_argument, NULL, 'P'},
        {"chunk", required_argument, NULL, 'c'},
        {"seed", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (struct bench_opts){
        .python = "/usr/bin/python3", .driver = RS_BENCH_DRIVER, .reps = 5,
        .peer_reps = 3, .peer_tree_reps = 1, .entries = RS_MAX_ENTRIES,
        .parts = 20, .chunk = 65536, .seed = BENCH_GEN_SEED,
    };
    int ch;
    size_t v;
    while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (ch) {
        case 'r': o->resync = optarg; break;
        case 'p': o->python = optarg; break;
        case 'd': o->driver = optarg; break;
        case 'D': o->dir = optarg; break;
        case 'k': o->keep = true; break;
        case 'h': bench_usage(stdout); exit(0);
        case 'n': case 'N': case 'T': case 'e': case 'P': case 'c': case 's':
            if (bench_parse_size(optarg, &v) != 0 || v == 0) {
                fprintf(stderr, "bench_proto: bad number: %s\n", optarg);
                return -1;
            }
            if (ch == 'n') o->reps = v;
            if (ch == 'N') o->peer_reps = v;
            if (ch == 'T') o->peer_tree_reps = v;
            if (ch == 'e') o->entries = v;
            if (ch == 'P') o->parts = v;
            if (ch == 'c') o->chunk = v;
            if (ch == 's') o->seed = v;
            break;
        default:
            bench_usage(stderr);
            return -1;
        }
    }
    if (optind != argc || o->reps > BENCH_MAX_REPS ||
        o->peer_reps > BENCH_MAX_REPS || o->peer_tree_reps > BENCH_MAX_REPS ||
        o->entries > RS_MAX_ENTRIES || o->parts > 99999) {
        fprintf(stderr, "bench_proto: bad arguments (reps <= %d, entries <= %d)\n",
                BENCH_MAX_REPS, RS_MAX_ENTRIES);
        return -1;
    }
    return 0;
}

/* A resync run's row in the peer table. */
struct bench_peer {
    const char *name;
    const char *mode;       /* resync_parse.py --mode */
    const char *file;
    size_t reps;
    struct bench_series s;
};

/* One repetition of the peer, added to its series. */
static void
bench_peer_run(const struct bench_opts *o, struct bench_peer *p,
               const char *map, struct bench_child *c)
{
    bool is_floor = strcmp(p->mode, "none") == 0;
    const char *py[] = {o->python, o->driver, "--resync", o->resync,
                        "--mode", p->mode, "--file", p->file,
                        "--map", map, "--reps", "1", NULL};
    bench_run(py, c);
    if (is_floor) {
        p->s.maxrss_kb = c->ru.ru_maxrss;
        p->s.ok = c->status == 0;
    } else {
        bench_append(c, "parse", &p->s);
    }
    if (c->status != 0)
        fprintf(stderr, "bench_proto: resync (%s) exited with %d\n", p->mode,
                c->status);
}

static const char *
bench_verdict(bool met)
{
    return met ? "met   " : "MISSED";
}

static int
bench_driver(int argc, char **argv)
{
    struct bench_opts o;
    char self[PATH_MAX], dirbuf[PATH_MAX], list[PATH_MAX], index[PATH_MAX];
    char nreps[32], nchunk[32], nentries[32], nparts[32], nseed[32];
    char a[32], b[32];
    static struct bench_child c;   /* 64 KiB: off the stack */
    if (bench_parse_opts(argc, argv, &o) != 0)
        return 2;
    ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (sl <= 0) {
        fprintf(stderr, "bench_proto: /proc/self/exe: %s\n", strerror(errno));
        return 1;
    }
    self[sl] = '\0';
    bool own_dir = o.dir == NULL;
    if (own_dir) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dirbuf, sizeof(dirbuf), "%s/rsbench.XXXXXX",
                 tmp && *tmp ? tmp : "/tmp");
        if (mkdtemp(dirbuf) == NULL) {
            fprintf(stderr, "bench_proto: mkdtemp %s: %s\n", dirbuf,
                    strerror(errno));
            return 1;
        }
    } else {
        snprintf(dirbuf, sizeof(dirbuf), "%s", o.dir);
        if (mkdir(dirbuf, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "bench_proto: %s: %s\n", dirbuf, strerror(errno));
            return 1;
        }
    }
    const char *dir = dirbuf;
    bench_path(list, dir, "list.xml");
    bench_path(index, dir, "index.xml");
    snprintf(nreps, sizeof(nreps), "%zu", o.reps);
    snprintf(nchunk, sizeof(nchunk), "%zu", o.chunk);
    snprintf(nentries, sizeof(nentries), "%zu", o.entries);
    snprintf(nparts, sizeof(nparts), "%zu", o.parts);
    snprintf(nseed, sizeof(nseed), "%" PRIu64, o.seed);
    int rc = 1;

    printf("== Document library (proto/) benchmark ==\n");
#ifndef __OPTIMIZE__
    printf("WARNING: built without optimisation; configure with "
           "-DCMAKE_BUILD_TYPE=Release for figures worth reporting\n");
#endif
    bench_print_machine();

    /* Generate. */
    const char *gen[] = {self, "gen", dir, nentries, nparts, nseed, NULL};
    bench_run(gen, &c);
    struct bench_series gs;
    bench_series_init(&gs);
    bench_append(&c, "gen", &gs);
    if (!gs.ok) {
        fprintf(stderr, "bench_proto: generating the documents failed\n");
        goto out;
    }
    uint64_t list_bytes = bench_file_size(list), tree_bytes = bench_file_size(index);
    for (size_t i = 0; i < o.parts; i++) {
        char path[PATH_MAX], name[32];
        bench_part_name(name, sizeof(name), "", i);
        tree_bytes += bench_file_size(bench_path(path, dir, name));
    }
    printf("data:    %s (seed %s, generated with rs_writer in %.1f s)\n", dir,
           nseed, c.wall);
    printf("         list.xml: Resource List, %s entries, %.1f MB\n",
           bench_grp((double)o.entries, a, sizeof(a)), MB(list_bytes));
    printf("         index.xml + %zu parts: Resource List Index, %s entries, "
           "%.1f MB\n", o.parts,
           bench_grp((double)(o.entries * o.parts), b, sizeof(b)),
           MB(tree_bytes));
    printf("MB = 10^6 bytes; peak RSS = ru_maxrss of the exec'd child that "
           "ran the measurement\n\n");

    /*
     * Parse: ours and the peer's, interleaved round by round, so that a
     * slow spell of this shared machine hits both sides rather than one.
     * Each round is a fresh child doing one repetition.
     */
    char map[PATH_MAX + 128];
    snprintf(map, sizeof(map), "%s=%s", BENCH_GEN_BASE, dir);
    struct bench_series floor_s, plist, ptree, wsl, wfl, wst, wft;
    struct bench_peer peers[] = {
        {"floor: import resync only", "none", list, 1, {0}},
        {"Resource List", "list", list, o.peer_reps, {0}},
        {"Index tree, read()", "tree-read", index, o.peer_tree_reps, {0}},
        {"Index tree, part by part", "tree-parts", index, o.peer_tree_reps, {0}},
    };
    size_t npeers = sizeof(peers) / sizeof(peers[0]);
    bool peer = o.resync != NULL;
    char version[128] = "";
    for (size_t i = 0; i < npeers; i++)
        bench_series_init(&peers[i].s);
    bench_series_init(&floor_s);
    bench_series_init(&plist);
    bench_series_init(&ptree);

    const char *noop[] = {self, "noop", NULL};
    bench_run(noop, &c);
    bench_append(&c, "noop", &floor_s);
    if (peer) {
        bench_peer_run(&o, &peers[0], map, &c);
        bench_info(&c, "version", version, sizeof(version));
    }
    size_t rounds = o.reps;
    if (peer && o.peer_reps > rounds)
        rounds = o.peer_reps;
    if (peer && o.peer_tree_reps > rounds)
        rounds = o.peer_tree_reps;
    const char *pl[] = {self, "parse-list", list, "1", nchunk, NULL};
    const char *pt[] = {self, "parse-tree", index, dir, "1", nchunk, NULL};
    for (size_t r = 0; r < rounds; r++) {
        fprintf(stderr, "bench_proto: parse round %zu/%zu\n", r + 1, rounds);
        if (r < o.reps) {
            bench_run(pl, &c);
            bench_append(&c, "parse", &plist);
        }
        for (size_t i = 1; peer && i < npeers; i++) {
            if (r >= peers[i].reps)
                continue;
            if (i == 2 && r < o.reps) {  /* our tree next to theirs */
                bench_run(pt, &c);
                bench_append(&c, "parse", &ptree);
            }
            bench_peer_run(&o, &peers[i], map, &c);
        }
        if (r < o.reps && (!peer || r >= o.peer_tree_reps)) {
            bench_run(pt, &c);
            bench_append(&c, "parse", &ptree);
        }
    }

    printf("Parse, streaming (rs_parser_feed, %zu-byte reads from the file), "
           "%zu repetitions:\n", o.chunk, o.reps);
    printf("  %-28s %10s %8s %12s %12s %8s %8s %9s\n", "document", "entries",
           "MB", "entries/s", "(median)", "MB/s", "(median)", "peak RSS");
    bench_print_parse_row("Resource List", &plist);
    bench_print_parse_row("Resource List Index tree", &ptree);
    printf("  (floor: the same binary exec'd doing nothing peaks at %.1f MB)\n\n",
           RSS_MB(floor_s.maxrss_kb));

    /* Ours: write. */
    const char *wr[] = {self, "write", dir, nentries, nparts, nreps, nseed, NULL};
    bench_run(wr, &c);
    bench_series_init(&wsl);
    bench_series_init(&wfl);
    bench_series_init(&wst);
    bench_series_init(&wft);
    bench_append(&c, "sink-list", &wsl);
    bench_append(&c, "file-list", &wfl);
    bench_append(&c, "sink-tree", &wst);
    bench_append(&c, "file-tree", &wft);
    printf("Serialize (rs_writer_*, pretty, strict checks), %zu repetitions:\n",
           o.reps);
    printf("  %-28s %10s %8s %12s %12s %8s %8s\n", "document -> target",
           "entries", "MB", "entries/s", "(median)", "MB/s", "(median)");
    bench_print_write_row("Resource List -> sink", &wsl);
    bench_print_write_row("Resource List -> file", &wfl);
    bench_print_write_row("Index tree -> sink", &wst);
    bench_print_write_row("Index tree -> file", &wft);
    printf("  (sink: a callback counting bytes; file: write(2) per writer "
           "flush, page cache, no fsync)\n\n");

    bool speed_ok = plist.ok && ptree.ok &&
        (double)plist.entries / bench_best(&plist) >= GOAL_ENTRIES_PER_SEC &&
        (double)ptree.entries / bench_best(&ptree) >= GOAL_ENTRIES_PER_SEC;
    bool rss_ok = plist.ok && ptree.ok &&
        RSS_MB(plist.maxrss_kb) * 1e6 < GOAL_RSS_BYTES &&
        RSS_MB(ptree.maxrss_kb) * 1e6 < GOAL_RSS_BYTES;

    if (!peer) {
        printf("Peer: not run (give --resync PATH, a checkout of "
               "resync/resync, to compare)\n\n");
        printf("Goals:\n");
        printf("  [%s] streaming parse >= 500,000 entries/s (best)\n",
               bench_verdict(speed_ok));
        printf("  [%s] peak RSS < 16 MB whatever the document size\n",
               bench_verdict(rss_ok));
        printf("  [n/a   ] >= 20x resync and <= 1/10 of its memory: peer not run\n");
        rc = plist.ok && ptree.ok && wsl.ok && wst.ok ? 0 : 1;
        goto out;
    }

    printf("Peer: %s, %s, resync checkout %s\n", version[0] ? version : "resync",
           o.python, o.resync);
    printf("  list: %zu repetitions; tree: %zu; interleaved with ours\n",
           o.peer_reps, o.peer_tree_reps);
    printf("  %-28s %10s %8s %12s %12s %8s %8s %9s\n", "document", "entries",
           "MB", "entries/s", "(median)", "MB/s", "(median)", "peak RSS");
    for (size_t i = 1; i < npeers; i++)
        bench_print_parse_row(peers[i].name, &peers[i].s);
    printf("  (floor: python3 importing resync, parsing nothing, peaks at "
           "%.1f MB)\n", RSS_MB(peers[0].s.maxrss_kb));
    printf("  read(): ResourceList.read() on the index, which reads every part "
           "and keeps all entries, as resync-sync does;\n"
           "  part by part: the index with index_only, then each part parsed "
           "into a fresh ResourceList and dropped\n\n");

    /* Side by side. */
    struct {
        const char *name;
        const struct bench_series *ours, *theirs;
    } rows[] = {
        {"Resource List", &plist, &peers[1].s},
        {"Index tree vs read()", &ptree, &peers[2].s},
        {"Index tree vs part by part", &ptree, &peers[3].s},
    };
    bool ratio_ok = true, mem_ok = true, peer_ok = true;
    printf("Side by side (entries/s best, ratio of best and of medians; "
           "peak RSS):\n");
    printf("  %-28s %12s %12s %8s %8s %9s %9s %8s\n", "document", "ours e/s",
           "resync e/s", "speed x", "(median)", "ours RSS", "resync", "memory x");
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct bench_series *x = rows[i].ours, *y = rows[i].theirs;
        if (!x->ok || !y->ok) {
            printf("  %-28s  (not comparable: a run failed)\n", rows[i].name);
            peer_ok = false;
            continue;
        }
        double xs = (double)x->entries / bench_best(x);
        double ys = (double)y->entries / bench_best(y);
        double xm = (double)x->entries / bench_median(x);
        double ym = (double)y->entries / bench_median(y);
        double mem = (double)y->maxrss_kb / (double)x->maxrss_kb;
        printf("  %-28s %12s %12s %8.1f %8.1f %8.1fM %8.1fM %8.1f\n",
               rows[i].name, bench_grp(xs, a, sizeof(a)),
               bench_grp(ys, b, sizeof(b)), xs / ys, xm / ym,
               RSS_MB(x->maxrss_kb), RSS_MB(y->maxrss_kb), mem);
        ratio_ok = ratio_ok && xs / ys >= GOAL_SPEED_RATIO;
        mem_ok = mem_ok && mem >= GOAL_MEM_RATIO;
    }
    printf("\nGoals:\n");
    printf("  [%s] streaming parse >= 500,000 entries/s (best)\n",
           bench_verdict(speed_ok));
    printf("  [%s] peak RSS < 16 MB whatever the document size\n",
           bench_verdict(rss_ok));
    printf("  [%s] >= 20x resync's entries/s, every row\n",
           bench_verdict(peer_ok && ratio_ok));
    printf("  [%s] <= 1/10 of resync's peak RSS, every row\n",
           bench_verdict(peer_ok && mem_ok));
    rc = plist.ok && ptree.ok && wsl.ok && wst.ok && peer_ok ? 0 : 1;
out:
    if (own_dir && !o.keep)
        bench_rm_tree(dir, o.parts);
    else
        printf("\ndata kept in %s\n", dir);
    return rc;
}

int
main(int argc, char **argv)
{
    size_t a = 0, b = 0, r = 0, ch = 0;
    if (argc >= 2 && strcmp(argv[1], "noop") == 0) {
        printf("noop 0 0 0\n");
        return 0;
    }
    if (argc == 5 && strcmp(argv[1], "parse-list") == 0 &&
        bench_parse_size(argv[3], &r) == 0 && bench_parse_size(argv[4], &ch) == 0 &&
        ch > 0)
        return cmd_parse_list(argv[2], r, ch);
    if (argc == 6 && strcmp(argv[1], "parse-tree") == 0 &&
        bench_parse_size(argv[4], &r) == 0 && bench_parse_size(argv[5], &ch) == 0 &&
        ch > 0)
        return cmd_parse_tree(argv[2], argv[3], r, ch);
    if (argc == 6 && strcmp(argv[1], "gen") == 0 &&
        bench_parse_size(argv[3], &a) == 0 && bench_parse_size(argv[4], &b) == 0 &&
        bench_parse_size(argv[5], &ch) == 0)
        return cmd_write(argv[2], a, b, 0, ch);
    if (argc == 7 && strcmp(argv[1], "write") == 0 &&
        bench_parse_size(argv[3], &a) == 0 && bench_parse_size(argv[4], &b) == 0 &&
        bench_parse_size(argv[5], &r) == 0 && r > 0 && r <= BENCH_MAX_REPS &&
        bench_parse_size(argv[6], &ch) == 0)
        return cmd_write(argv[2], a, b, r, ch);
    if (argc >= 2 && argv[1][0] != '-') {
        fprintf(stderr, "bench_proto: unknown subcommand or arguments: %s\n",
                argv[1]);
        return 2;
    }
    return bench_driver(argc, argv);
}
