/*
 * bench_sub_push.c - push-apply latency probe for bench_sub.sh and
 * bench_e2e.sh: a writer thread creates (and with --updates rewrites) files
 * in a Source's directory at a steady rate, each version with a unique
 * payload that carries its sequence number and send time, and the main
 * thread watches one or more subscribers' mirrors with inotify
 * (recursively, new directories too) and times each change from send to
 * its arrival in each mirror. It prints one line of key=value figures per
 * mirror. It starts no daemon and knows nothing of ResourceSync: what lies
 * between the trees is measured.
 *
 *   bench_sub_push --src DIR --mirror DIR [--mirror DIR]... --rate R
 *                  --seconds S [OPTION]...
 *
 * Arrival is IN_MOVED_TO (rssub renames complete files into place) or
 * IN_CLOSE_WRITE (a file written in place), for a name of the form
 * cNNNNNNNNN.txt whose content carries this run's tag. A version seen again
 * under another inode (renamed into place a second time) is a duplicate;
 * content that does not parse is counted as torn (a non-atomic write); a
 * version older than one the mirror already showed is stale. A change
 * whose own version never showed but a later version of the same file did
 * is superseded (the mirror skipped it, as a mirror may): it counts as
 * delivered when that later version arrived.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define SP_SEQ_MAX 10000000u   /* changes per run (memory: ~40 B each) */
#define SP_WD_MAX 65536        /* watched directories */
#define SP_PAYLOAD_MAX 65536
#define SP_TAG_MAX 64
#define SP_MIRROR_MAX 8

struct sp_opts {
    const char *src;           /* the Source's directory (written) */
    const char *mirror[SP_MIRROR_MAX]; /* the subscribers' mirrors (watched) */
    unsigned nmirror;
    const char *tag;           /* run tag: directory name and payload marker */
    double rate;               /* changes per second */
    double seconds;            /* writing time */
    double drain;              /* longest wait for arrivals after writing */
    double settle;             /* pause between creating dirs and writing */
    unsigned per_dir;          /* files per directory */
    size_t size;               /* bytes per file (at least the header) */
    const char *lat_out;       /* every latency (ms), one per line */
    double updates;            /* share of changes that rewrite a file */
    uint64_t seed;             /* which changes are updates, of which file */
};

/* Per change and mirror; first_us == 0 until its first arrival. */
struct sp_seq {
    int64_t first_us;          /* CLOCK_REALTIME of the first arrival */
    ino_t ino;                 /* inode of the last arrival */
    uint32_t arrivals;         /* distinct inodes seen */
};

/* What one mirror showed. */
struct sp_mirror {
    struct sp_seq *seqs;       /* [nseq] */
    int64_t *newest;           /* [nfiles]: newest seq seen per file, or -1 */
    uint32_t done;             /* files whose last version arrived */
    int64_t complete_us;       /* CLOCK_REALTIME when done reached nfiles */
    unsigned long torn, foreign, stale;
};

static struct sp_opts opt = {
    .tag = "push", .rate = 100, .seconds = 10, .drain = 10, .settle = 1.0,
    .per_dir = 1000, .size = 256, .seed = 1,
};
static struct sp_mirror mirrors[SP_MIRROR_MAX];
static uint32_t nseq;          /* changes the writer will make */
static uint32_t nfiles;        /* distinct files they touch */
/* The plan, fixed before the writer starts (read by both threads):
 * change k writes file fid[k]; last[f] is the last change to file f. */
static uint32_t *fid, *last;
static int64_t *sent_us;       /* writer: CLOCK_REALTIME at open(), per change */
static int64_t *best;          /* report: per file, scratch */
static atomic_uint sent;       /* changes written so far */
static atomic_bool writer_done;
static int64_t writer_end_us;  /* writer: CLOCK_REALTIME after the last close */
static int64_t writer_start_us;
static int64_t late_max_us;    /* writer: worst start behind schedule */
static unsigned write_errors;
static char *wd_path[SP_WD_MAX];
static uint8_t wd_mirror[SP_WD_MAX];
static unsigned long overflows, watch_errors;

static int64_t
now_us(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---------------------------------------------------------------- writer */

/* Which changes create a file and which rewrite one made earlier in the
 * run (uniformly chosen), from --seed: every run with the same options
 * makes the same changes. File ids are dense, so that every directory the
 * run makes gets files (a mirror holds files, not empty directories). */
static void
sp_plan(void)
{
    uint64_t x = opt.seed ? opt.seed : 1;
    nfiles = 0;
    for (uint32_t k = 0; k < nseq; k++) {
        /* xorshift64*: quality enough to pick files, and reproducible */
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        uint64_t r = x * 0x2545F4914F6CDD1Dull;
        double u = (double)(r >> 11) / 9007199254740992.0;
        if (nfiles > 0 && u < opt.updates) {
            fid[k] = (uint32_t)((r & 0xffffffffu) % nfiles);
        } else {
            fid[k] = nfiles++;
        }
        last[fid[k]] = k;
    }
}

static int
sp_write_file(uint32_t k, char *buf)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/%s/d%05u/c%09u.txt", opt.src,
                     opt.tag, fid[k] / opt.per_dir, fid[k]);
    if (n < 0 || (size_t)n >= sizeof(path))
        return -1;
    int64_t t = now_us(CLOCK_REALTIME);
    sent_us[k] = t;
    int h = snprintf(buf, SP_PAYLOAD_MAX,
                     "rssub-bench run=%s seq=%u sent_us=%" PRId64 "\n",
                     opt.tag, k, t);
    if (h < 0)
        return -1;
    size_t len = (size_t)h > opt.size ? (size_t)h : opt.size;
    /* the filler after the header makes every file the asked size */
    memset(buf + h, '.', len - (size_t)h);
    if (len > (size_t)h)
        buf[len - 1] = '\n';
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, buf + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    return close(fd);
}

static void *
sp_writer(void *arg)
{
    (void)arg;
    char *buf = malloc(SP_PAYLOAD_MAX);
    if (buf == NULL) {
        write_errors = nseq;
        atomic_store(&writer_done, true);
        return NULL;
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int64_t start = (int64_t)t0.tv_sec * 1000000000 + t0.tv_nsec;
    writer_start_us = now_us(CLOCK_REALTIME);
    for (uint32_t k = 0; k < nseq; k++) {
        /* absolute due times: a slow write does not shift the schedule */
        int64_t due = start + (int64_t)((double)k * 1e9 / opt.rate);
        struct timespec ts = {.tv_sec = due / 1000000000,
                              .tv_nsec = due % 1000000000};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
               EINTR)
            ;
        int64_t late = now_us(CLOCK_MONOTONIC) - due / 1000;
        if (late > late_max_us)
            late_max_us = late;
        if (sp_write_file(k, buf) != 0)
            write_errors++;
        atomic_store(&sent, k + 1);
    }
    free(buf);
    writer_end_us = now_us(CLOCK_REALTIME);
    atomic_store(&writer_done, true);
    return NULL;
}

/* Every directory of the run exists (and the Source has seen it) before
 * the clock starts: what is timed is the change, not a directory race. */
static int
sp_make_dirs(void)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/%s", opt.src, opt.tag);
    if (n < 0 || (size_t)n >= sizeof(path) ||
        (mkdir(path, 0755) != 0 && errno != EEXIST))
        return -1;
    for (uint32_t d = 0; d <= (nfiles - 1) / opt.per_dir; d++) {
        n = snprintf(path, sizeof(path), "%s/%s/d%05u", opt.src, opt.tag, d);
        if (n < 0 || (size_t)n >= sizeof(path) ||
            (mkdir(path, 0755) != 0 && errno != EEXIST))
            return -1;
    }
    return 0;
}

/* --------------------------------------------------------------- watcher */

/* cNNNNNNNNN.txt: the names the writer makes; anything else (rssub's
 * temporary files, the baseline) is not ours. */
static bool
sp_name_ours(const char *name)
{
    if (name[0] != 'c')
        return false;
    size_t i = 1;
    while (name[i] >= '0' && name[i] <= '9')
        i++;
    return i == 10 && strcmp(name + i, ".txt") == 0;
}

/* Reads DIR/NAME in mirror MI and records an arrival at time T
 * (CLOCK_REALTIME). */
static void
sp_arrive(unsigned mi, const char *dir, const char *name, int64_t t)
{
    struct sp_mirror *m = &mirrors[mi];
    char path[PATH_MAX], buf[512];
    int n = snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof(path))
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;                /* replaced or removed since: a later event */
    struct stat st;
    ssize_t r = -1;
    if (fstat(fd, &st) == 0)
        r = pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    if (r < 0)
        return;
    buf[r] = '\0';
    char tag[SP_TAG_MAX + 1];
    unsigned seq;
    long long sent_at;
    if (strchr(buf, '\n') == NULL ||
        sscanf(buf, "rssub-bench run=%64s seq=%u sent_us=%lld", tag, &seq,
               &sent_at) != 3) {
        m->torn++;
        return;
    }
    /* the name says which file it is: a version under another file's name
     * was misplaced, not delivered */
    if (strcmp(tag, opt.tag) != 0 || seq >= nseq ||
        strtoul(name + 1, NULL, 10) != fid[seq]) {
        m->foreign++;
        return;
    }
    /* the writer made max(header, size) bytes: anything else was caught
     * half-written, which a rename into place never shows */
    size_t hlen = (size_t)(strchr(buf, '\n') - buf) + 1;
    if ((size_t)st.st_size != (hlen > opt.size ? hlen : opt.size)) {
        m->torn++;
        return;
    }
    struct sp_seq *s = &m->seqs[seq];
    if (s->arrivals > 0 && s->ino == st.st_ino)
        return;                /* the same file seen twice (scan + event) */
    uint32_t f = fid[seq];
    if (m->newest[f] > (int64_t)seq) {
        /* the mirror went back to an older version than it showed */
        m->stale++;
    } else if (m->newest[f] < (int64_t)seq) {
        m->newest[f] = seq;
        if (seq == last[f] && ++m->done == nfiles)
            m->complete_us = t;
    }
    if (s->arrivals == 0)
        s->first_us = t;
    s->ino = st.st_ino;
    s->arrivals++;
}

/* Watches DIR of mirror MI and, below it, every directory; with RECORD,
 * also records the files already there (they may have landed before the
 * watch). */
static int
sp_watch_tree(int ifd, unsigned mi, const char *dir, bool record, int64_t t)
{
    int wd = inotify_add_watch(ifd, dir,
                               IN_MOVED_TO | IN_CLOSE_WRITE | IN_CREATE |
                                   IN_ONLYDIR | IN_DONT_FOLLOW);
    if (wd < 0 || wd >= SP_WD_MAX) {
        watch_errors++;
        return -1;
    }
    if (wd_path[wd] == NULL || strcmp(wd_path[wd], dir) != 0) {
        free(wd_path[wd]);
        wd_path[wd] = strdup(dir);
        if (wd_path[wd] == NULL)
            return -1;
    }
    wd_mirror[wd] = (uint8_t)mi;
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;              /* gone again: nothing to watch below */
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char path[PATH_MAX];
        int n = snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (n < 0 || (size_t)n >= sizeof(path))
            continue;
        bool isdir = e->d_type == DT_DIR;
        if (e->d_type == DT_UNKNOWN) {
            struct stat st;
            isdir = lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
        }
        if (isdir)
            sp_watch_tree(ifd, mi, path, record, t);
        else if (record && sp_name_ours(e->d_name))
            sp_arrive(mi, dir, e->d_name, t);
    }
    closedir(d);
    return 0;
}

static void
sp_read_events(int ifd)
{
    _Alignas(struct inotify_event) char buf[64 * 1024];
    for (;;) {
        ssize_t r = read(ifd, buf, sizeof(buf));
        if (r <= 0)
            return;
        int64_t t = now_us(CLOCK_REALTIME);
        for (char *p = buf; p < buf + r;) {
            struct inotify_event *ev = (struct inotify_event *)p;
            p += sizeof(*ev) + ev->len;
            if (ev->mask & IN_Q_OVERFLOW) {
                /* events were dropped: find what arrived by walking */
                overflows++;
                for (unsigned mi = 0; mi < opt.nmirror; mi++)
                    sp_watch_tree(ifd, mi, opt.mirror[mi], true, t);
                continue;
            }
            if (ev->wd < 0 || ev->wd >= SP_WD_MAX || wd_path[ev->wd] == NULL ||
                ev->len == 0)
                continue;
            const char *dir = wd_path[ev->wd];
            if (ev->mask & IN_ISDIR) {
                if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
                    char path[PATH_MAX];
                    int n = snprintf(path, sizeof(path), "%s/%s", dir,
                                     ev->name);
                    if (n > 0 && (size_t)n < sizeof(path))
                        sp_watch_tree(ifd, wd_mirror[ev->wd], path, true, t);
                }
                continue;
            }
            if ((ev->mask & (IN_MOVED_TO | IN_CLOSE_WRITE)) &&
                sp_name_ours(ev->name))
                sp_arrive(wd_mirror[ev->wd], dir, ev->name, t);
        }
    }
}

/* ---------------------------------------------------------------- report */

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double
quantile(const double *v, size_t n, double q)
{
    if (n == 0)
        return -1;
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

static void
usage(FILE *f)
{
    fprintf(f,
            "Usage: bench_sub_push --src DIR --mirror DIR [OPTION]...\n"
            "Creates files under SRC/TAG/ at RATE per second for SECONDS and\n"
            "times each from send to its arrival under MIRROR (inotify).\n"
            "  --src DIR        the Source's directory (written)\n"
            "  --mirror DIR     the subscriber's mirror (watched, recursively);\n"
            "                   repeatable, up to 8: one line per mirror\n"
            "  --tag NAME       run tag: subdirectory and payload marker "
            "(default push)\n"
            "  --rate R         changes per second (default 100)\n"
            "  --seconds S      writing time (default 10)\n"
            "  --drain S        longest wait for arrivals after the last "
            "write (default 10)\n"
            "  --settle S       pause after creating the directories "
            "(default 1)\n"
            "  --per-dir N      files per directory (default 1000)\n"
            "  --size BYTES     bytes per file (default 256)\n"
            "  --updates F      share of changes that rewrite a file made "
            "earlier\n"
            "                   in the run instead of creating one (0-1, "
            "default 0)\n"
            "  --seed N         which changes are updates (default 1)\n"
            "  --lat-out FILE   write every latency (ms) to FILE (several "
            "mirrors:\n"
            "                   FILE.0, FILE.1, ...)\n"
            "Prints: rate sent received lost dup torn foreign p50_ms p90_ms "
            "p99_ms max_ms late_max_ms write_errors overflows watch_errors;\n"
            "with several mirrors or --updates, one line per mirror with "
            "also mirror\n"
            "files superseded stale wrote_ms complete_ms (the mirror's last "
            "change\n"
            "arrived this long after the last write; -1: never) "
            "writer_end_us\n"
            "cpu_ms (this probe's CPU time)\n");
}

static int
parse_args(int argc, char **argv)
{
    static const struct option lo[] = {
        {"src", required_argument, NULL, 's'},
        {"mirror", required_argument, NULL, 'm'},
        {"tag", required_argument, NULL, 't'},
        {"rate", required_argument, NULL, 'r'},
        {"seconds", required_argument, NULL, 'S'},
        {"drain", required_argument, NULL, 'd'},
        {"settle", required_argument, NULL, 'e'},
        {"per-dir", required_argument, NULL, 'p'},
        {"size", required_argument, NULL, 'z'},
        {"lat-out", required_argument, NULL, 'l'},
        {"updates", required_argument, NULL, 'u'},
        {"seed", required_argument, NULL, 'x'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    char *end;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        errno = 0;
        end = NULL;
        switch (c) {
        case 's': opt.src = optarg; break;
        case 'm':
            if (opt.nmirror == SP_MIRROR_MAX) {
                fprintf(stderr, "bench_sub_push: at most %d mirrors\n",
                        SP_MIRROR_MAX);
                return -1;
            }
            opt.mirror[opt.nmirror++] = optarg;
            break;
        case 't': opt.tag = optarg; break;
        case 'l': opt.lat_out = optarg; break;
        case 'r': opt.rate = strtod(optarg, &end); break;
        case 'S': opt.seconds = strtod(optarg, &end); break;
        case 'd': opt.drain = strtod(optarg, &end); break;
        case 'e': opt.settle = strtod(optarg, &end); break;
        case 'p': opt.per_dir = (unsigned)strtoul(optarg, &end, 10); break;
        case 'z': opt.size = (size_t)strtoul(optarg, &end, 10); break;
        case 'u': opt.updates = strtod(optarg, &end); break;
        case 'x': opt.seed = strtoull(optarg, &end, 10); break;
        case 'h': usage(stdout); exit(0);
        default: return -1;
        }
        if (end != NULL && (*end != '\0' || errno != 0 || end == optarg)) {
            fprintf(stderr, "bench_sub_push: bad number '%s'\n", optarg);
            return -1;
        }
    }
    if (opt.src == NULL || opt.nmirror == 0 || optind != argc) {
        fprintf(stderr, "bench_sub_push: --src and --mirror are required\n");
        return -1;
    }
    double n = opt.rate * opt.seconds;
    if (!(opt.rate > 0) || !(opt.seconds > 0) || n < 1 || n > SP_SEQ_MAX ||
        opt.per_dir == 0 || opt.size > SP_PAYLOAD_MAX || opt.drain < 0 ||
        opt.settle < 0 || !(opt.updates >= 0) || opt.updates > 1 ||
        strlen(opt.tag) > SP_TAG_MAX ||
        strchr(opt.tag, '/') != NULL || opt.tag[0] == '\0') {
        fprintf(stderr, "bench_sub_push: out of range (rate x seconds: 1 to "
                        "%u; size up to %d; tag 1-%d bytes, no '/'; "
                        "updates 0-1)\n",
                SP_SEQ_MAX, SP_PAYLOAD_MAX, SP_TAG_MAX);
        return -1;
    }
    nseq = (uint32_t)n;
    return 0;
}

/* Counts of one line of figures. */
struct sp_counts {
    unsigned long dup, torn, foreign, superseded, stale;
    double complete_ms;        /* -1: never complete */
};

/* Prints one line: the figures over LAT[0..NL) (sorted here). LABEL is
 * the mirror's number, "all", or NULL for the plain line of one mirror. */
static void
sp_print(const char *label, double *lat, size_t nl, const struct sp_counts *c)
{
    qsort(lat, nl, sizeof(*lat), cmp_double);
    if (label != NULL)
        printf("mirror=%s ", label);
    printf("rate=%g sent=%u received=%zu lost=%zu dup=%lu torn=%lu "
           "foreign=%lu p50_ms=%.2f p90_ms=%.2f p99_ms=%.2f max_ms=%.2f "
           "late_max_ms=%.2f write_errors=%u overflows=%lu "
           "watch_errors=%lu",
           opt.rate, atomic_load(&sent), nl, (size_t)nseq - nl, c->dup,
           c->torn, c->foreign, quantile(lat, nl, 0.50),
           quantile(lat, nl, 0.90), quantile(lat, nl, 0.99),
           nl ? lat[nl - 1] : -1.0, (double)late_max_us / 1000.0,
           write_errors, overflows, watch_errors);
    if (label != NULL) {
        /* the probe's own CPU (both threads), for the caller's accounting */
        struct rusage ru;
        double cpu_ms = -1;
        if (getrusage(RUSAGE_SELF, &ru) == 0)
            cpu_ms = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                     (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
        printf(" files=%u superseded=%lu stale=%lu wrote_ms=%.1f "
               "complete_ms=%.1f writer_end_us=%" PRId64 " cpu_ms=%.0f",
               nfiles, c->superseded, c->stale,
               (double)(writer_end_us - writer_start_us) / 1000.0,
               c->complete_ms, writer_end_us, cpu_ms);
    }
    printf("\n");
}

/* Writes LAT[0..NL) to --lat-out (FILE, or FILE.SUFFIX with several
 * mirrors), newest change last. */
static void
sp_lat_out(const char *suffix, const double *lat, size_t nl)
{
    if (opt.lat_out == NULL)
        return;
    char path[PATH_MAX];
    int n = suffix != NULL
                ? snprintf(path, sizeof(path), "%s.%s", opt.lat_out, suffix)
                : snprintf(path, sizeof(path), "%s", opt.lat_out);
    FILE *f = n > 0 && (size_t)n < sizeof(path) ? fopen(path, "w") : NULL;
    if (f == NULL)
        return;
    for (size_t i = 0; i < nl; i++)
        fprintf(f, "%.3f\n", lat[i]);
    fclose(f);
}

/* Mirror MI's figures. A change is delivered at the first arrival of its
 * version or of any later version of the same file (the mirror may skip
 * versions that were already replaced at the Source). Folds each change's
 * delivery into ALL_US (the latest over mirrors; INT64_MAX: missing in
 * some mirror). LAT holds nseq doubles. */
static void
sp_report(unsigned mi, double *lat, int64_t *all_us, bool extended)
{
    struct sp_mirror *m = &mirrors[mi];
    struct sp_counts c = {.torn = m->torn, .foreign = m->foreign,
                          .stale = m->stale};
    /* newest change first, so that best[f] is the earliest arrival of any
     * version at least as new as change k */
    for (uint32_t f = 0; f < nfiles; f++)
        best[f] = INT64_MAX;
    size_t nl = 0;
    for (uint32_t k = nseq; k-- > 0;) {
        const struct sp_seq *s = &m->seqs[k];
        uint32_t f = fid[k];
        if (s->arrivals > 0) {
            c.dup += s->arrivals - 1;
            if (s->first_us < best[f])
                best[f] = s->first_us;
        }
        if (best[f] > all_us[k])
            all_us[k] = best[f];
        if (best[f] == INT64_MAX)
            continue;
        if (s->arrivals == 0)
            c.superseded++;
        lat[nl++] = (double)(best[f] - sent_us[k]) / 1000.0;
    }
    c.complete_ms = m->done == nfiles
                        ? (double)(m->complete_us - writer_end_us) / 1000.0
                        : -1.0;
    char label[16];
    snprintf(label, sizeof(label), "%u", mi);
    /* lat[] runs newest change first: reverse it for the file */
    for (size_t i = 0; i < nl / 2; i++) {
        double t = lat[i];
        lat[i] = lat[nl - 1 - i];
        lat[nl - 1 - i] = t;
    }
    sp_lat_out(opt.nmirror > 1 ? label : NULL, lat, nl);
    sp_print(extended ? label : NULL, lat, nl, &c);
}

/* The line "mirror=all": each change timed until it was in every mirror
 * (ALL_US from sp_report); the counts summed over mirrors; complete when
 * the slowest mirror was. */
static void
sp_report_all(double *lat, const int64_t *all_us)
{
    struct sp_counts c = {.complete_ms = 0};
    size_t nl = 0;
    for (unsigned mi = 0; mi < opt.nmirror; mi++) {
        const struct sp_mirror *m = &mirrors[mi];
        c.torn += m->torn;
        c.foreign += m->foreign;
        c.stale += m->stale;
        for (uint32_t k = 0; k < nseq; k++)
            if (m->seqs[k].arrivals > 1)
                c.dup += m->seqs[k].arrivals - 1;
        double cm = m->done == nfiles
                        ? (double)(m->complete_us - writer_end_us) / 1000.0
                        : -1.0;
        if (c.complete_ms >= 0 && (cm < 0 || cm > c.complete_ms))
            c.complete_ms = cm;
    }
    for (uint32_t k = 0; k < nseq; k++) {
        if (all_us[k] == INT64_MAX)
            continue;
        bool own = true;       /* its own version reached every mirror */
        for (unsigned mi = 0; mi < opt.nmirror; mi++)
            own = own && mirrors[mi].seqs[k].arrivals > 0;
        if (!own)
            c.superseded++;
        lat[nl++] = (double)(all_us[k] - sent_us[k]) / 1000.0;
    }
    sp_lat_out("all", lat, nl);
    sp_print("all", lat, nl, &c);
}

static bool
sp_all_done(void)
{
    for (unsigned mi = 0; mi < opt.nmirror; mi++)
        if (mirrors[mi].done < nfiles)
            return false;
    return true;
}

int
main(int argc, char **argv)
{
    int rc = 1;
    int ifd = -1;
    pthread_t th;
    bool started = false;
    double *lat = NULL;
    int64_t *all_us = NULL;

    if (parse_args(argc, argv) != 0) {
        usage(stderr);
        return 2;
    }
    fid = calloc(nseq, sizeof(*fid));
    last = calloc(nseq, sizeof(*last));
    sent_us = calloc(nseq, sizeof(*sent_us));
    lat = calloc(nseq, sizeof(*lat));
    all_us = calloc(nseq, sizeof(*all_us));
    if (fid == NULL || last == NULL || sent_us == NULL || lat == NULL ||
        all_us == NULL) {
        fprintf(stderr, "bench_sub_push: out of memory\n");
        goto out;
    }
    sp_plan();
    best = calloc(nfiles, sizeof(*best));
    if (best == NULL) {
        fprintf(stderr, "bench_sub_push: out of memory\n");
        goto out;
    }
    for (unsigned mi = 0; mi < opt.nmirror; mi++) {
        mirrors[mi].seqs = calloc(nseq, sizeof(*mirrors[mi].seqs));
        mirrors[mi].newest = malloc(nfiles * sizeof(*mirrors[mi].newest));
        if (mirrors[mi].seqs == NULL || mirrors[mi].newest == NULL) {
            fprintf(stderr, "bench_sub_push: out of memory\n");
            goto out;
        }
        for (uint32_t f = 0; f < nfiles; f++)
            mirrors[mi].newest[f] = -1;
    }
    ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (ifd < 0) {
        perror("bench_sub_push: inotify_init1");
        goto out;
    }
    for (unsigned mi = 0; mi < opt.nmirror; mi++) {
        if (sp_watch_tree(ifd, mi, opt.mirror[mi], false, 0) != 0) {
            fprintf(stderr, "bench_sub_push: cannot watch %s\n",
                    opt.mirror[mi]);
            goto out;
        }
    }
    if (sp_make_dirs() != 0) {
        perror("bench_sub_push: mkdir under --src");
        goto out;
    }
    if (opt.settle > 0) {
        struct timespec ts = {.tv_sec = (time_t)opt.settle,
                              .tv_nsec = (long)((opt.settle -
                                                 (double)(time_t)opt.settle) *
                                                1e9)};
        nanosleep(&ts, NULL);
    }
    sp_read_events(ifd);
    if (pthread_create(&th, NULL, sp_writer, NULL) != 0) {
        fprintf(stderr, "bench_sub_push: cannot start the writer\n");
        goto out;
    }
    started = true;

    /* Watch until every mirror holds the last version of every file, or
     * until the drain ran out. */
    int64_t drain_end = 0;
    for (;;) {
        struct pollfd pfd = {.fd = ifd, .events = POLLIN};
        poll(&pfd, 1, 100);
        sp_read_events(ifd);
        if (atomic_load(&writer_done) && drain_end == 0)
            drain_end = now_us(CLOCK_MONOTONIC) + (int64_t)(opt.drain * 1e6);
        if (drain_end != 0 &&
            (sp_all_done() || now_us(CLOCK_MONOTONIC) >= drain_end))
            break;
    }
    pthread_join(th, NULL);
    started = false;

    /* one mirror and creates only: the line bench_sub.sh has always read */
    bool extended = opt.nmirror > 1 || opt.updates > 0;
    for (unsigned mi = 0; mi < opt.nmirror; mi++)
        sp_report(mi, lat, all_us, extended);
    if (opt.nmirror > 1)
        sp_report_all(lat, all_us);
    rc = 0;
out:
    if (started)
        pthread_join(th, NULL);
    if (ifd >= 0)
        close(ifd);
    for (unsigned i = 0; i < SP_WD_MAX; i++)
        free(wd_path[i]);
    for (unsigned mi = 0; mi < SP_MIRROR_MAX; mi++) {
        free(mirrors[mi].seqs);
        free(mirrors[mi].newest);
    }
    free(fid);
    free(last);
    free(sent_us);
    free(best);
    free(lat);
    free(all_us);
    return rc;
}
