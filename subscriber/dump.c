/*
 * dump.c - read the dump document (docwalk) for its package URLs, then for
 * each package: download (rs_http, streamed to a temporary file), unpack
 * member by member into mirror files that are committed only once dumpzip
 * has verified the whole member, record each in the ledger. A Resource
 * Dump gives every member; a Change Dump only its packages that end after
 * the caller's position, and of those only the last change of each
 * resource that is newer than what the mirror holds.
 */
#define _GNU_SOURCE   /* sched_getaffinity, CPU_COUNT */
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apply.h"
#include "docwalk.h"
#include "dump.h"
#include "dumpzip.h"
#include "ledger.h"
#include "mirror.h"
#include "pathmap.h"
#include "rs_alloc.h"
#include "rs_daemon.h"
#include "rs_hash.h"
#include "rs_http.h"

#define DUMP_MAX_PACKAGE (UINT64_C(16) << 30)
#define DUMP_TIMEOUT_MS (6 * 3600 * 1000)
#define DUMP_STALL_MS (120 * 1000)  /* dump_opts.stall_ms's default */
#define DUMP_MAX_THREADS 16
#define DUMP_TMP_SUFFIX ".dump-"   /* TMPBASE.dump-XXXXXX */
#define DUMP_MIN_PARALLEL 64      /* fewer members: the loop's thread alone */
/* A package is read from the connection, and written to its file, 512
 * KiB at a time, not in libcurl's 16 KiB pieces: a 27 MB package's
 * download is a thirty-second of the syscalls. */
#define DUMP_READ_SIZE (512u * 1024u)

enum dump_kind {
    DUMP_RESOURCES,              /* a Resource Dump: the baseline */
    DUMP_CHANGES,                /* a Change Dump: a catch-up from since */
};

/* A downloaded package being opened (dumpzip_open: its directory and
 * manifest) on a thread of its own, while the loop downloads the next. */
struct opener {
    struct dump *d;
    pthread_t th;
    size_t pkg;                  /* index in pkgs */
    char path[4096];             /* the package's file */
    struct dumpzip_scan *scan;   /* its bytes' scan (NULL: none), freed
                                    once it is open */
    atomic_bool done;            /* the thread is about to return */
    struct dumpzip *z;           /* the result: z, or rc and err */
    int rc;
    char err[512];
};

struct dump {
    struct dump_opts o;
    enum dump_kind kind;
    rs_time_t since;             /* DUMP_CHANGES: the caller's position */
    char *tmpbase;
    struct docwalk *walk;
    bool busy;
    char **pkgs;                 /* package URLs from the dump document */
    int64_t *pkg_len;            /* announced lengths, -1 unknown */
    rs_time_t *pkg_until;        /* announced ends, RS_TIME_NONE unknown */
    size_t npkgs, next;
    struct rs_http_req *req;
    /* The stall limit (dump_opts.stall_ms): while a package downloads,
     * ev_stall ticks four times a limit; a tick that finds pieces where
     * the last one did adds to stalled_ms, and stalled_ms reaching the
     * limit fails the download. DUMP_TIMEOUT_MS bounds the whole of it,
     * but a package may take long: what must not happen is waiting
     * forever on a Source that stopped sending. */
    struct event *ev_stall;
    uint64_t pieces, pieces_seen;   /* on_pkg_data calls; at the last tick */
    unsigned stalled_ms;
    /* A package gone (404, 410: the Source made a newer dump and removed
     * this generation, as rssource does with the one before the last):
     * the document is read again, once, when the packages before it are
     * recorded (reread_start). */
    char *url;                   /* the dump document */
    bool reread_wanted;          /* read it again once the pipeline is
                                    empty */
    bool rereading;              /* the second walk is under way */
    char *gone;                  /* the package that was gone */
    char gone_err[512];          /* its error, the dump's if the document
                                    lists it still */
    size_t pkgs_base;            /* packages recorded before pkgs listed */
    int fd;                      /* the package being downloaded */
    char tmp[4096];
    struct dumpzip_scan *scan;   /* ... its local headers, as they pass */
    uint64_t got;
    int write_errno;
    char *wbuf;                  /* the package's bytes on their way to fd
                                    (DUMP_READ_SIZE) */
    size_t wlen;
    struct dump_report r;
    struct mirror *twins[DUMP_MAX_THREADS];   /* the writer threads' */
    /* The pipeline (see "unpacking"): one package written while the next
     * downloads and is opened. */
    struct plan *cur;            /* being written while the loop runs */
    struct opener *op;           /* downloaded, being opened */
    struct opener *queued;       /* downloaded while op's package was
                                    being opened: started after it */
    struct dumpzip *ready;       /* downloaded and opened, waiting */
    char ready_tmp[4096];
    char spare[4096];            /* a written package's file, kept for the
                                    next download to write over: its pages
                                    (tmpfs) or blocks are reused, not freed
                                    and allocated again */
    /* A written package's file not kept as the spare is removed on a
     * thread of its own while the loop records the package: freeing a
     * tmpfs file's pages is a millisecond per 7 MB, which the last package
     * spent on the loop while the other CPU had nothing left to do. */
    pthread_t remover;
    bool removing;               /* remover runs (joined by remove_wait) */
    char removed[4096];          /* the file it removes */
    bool held;                   /* apply_hold is ours */
    int fail_rc;                 /* a package could not be had: the dump
                                    ends so once the pipeline is empty */
    int efd;                     /* threads -> loop: all written, or the
                                    package opened */
    struct event *ev_wake;
    /* Set with each write to efd, cleared by on_wake: while it is set the
     * package downloading steps aside (RS_HTTP_DATA_LATER) for a turn of
     * the loop, or libcurl reads on while rssource's bytes keep coming (a
     * 14 MB package in one turn) and the package just opened waits 10 ms
     * for its writers. */
    atomic_bool woken;
    /* Written jobs' rows waiting for one ledger_res_put_many (record_job,
     * rows_flush): the loop's alone. */
    struct ledger_res rows[LEDGER_RES_BATCH];
    char row_hash[LEDGER_RES_BATCH][RS_HASHES_BUFSZ];
    size_t nrows;
    bool quiet;                  /* the ledger was empty at the start ... */
    int64_t quiet_mark;          /* ... and has had no other writer since
                                    (ledger_total_changes) */
    char err[512];
};

static void advance(struct dump *d);
static void remove_wait(struct dump *d);
static bool reread_ask(struct dump *d, const char *url, long status);
struct plan;
static void plan_abort(struct plan *p);
struct opener;
static void opener_drop(struct opener **opp);

static void
problem(struct dump *d, const char *uri, const char *why, bool refused)
{
    d->r.failed++;
    if (d->o.on_problem != NULL)
        d->o.on_problem(d->o.ud, uri, why, refused);
}

static void
tmp_drop(struct dump *d)
{
    if (d->fd >= 0) {
        close(d->fd);
        d->fd = -1;
    }
    if (d->tmp[0] != '\0') {
        unlink(d->tmp);
        d->tmp[0] = '\0';
    }
    dumpzip_scan_free(d->scan);
    d->scan = NULL;
}

/* The download under way, if any, cancelled and its file removed. */
static void
download_drop(struct dump *d)
{
    if (d->ev_stall != NULL)
        event_del(d->ev_stall);
    if (d->req != NULL) {
        struct rs_http_req *req = d->req;
        d->req = NULL;
        rs_http_cancel(req);          /* its on_done sees RS_ECANCELED */
    }
    tmp_drop(d);
}

/* Packages a crash left (TMPBASE.dump-XXXXXX): ours alone, as the
 * state's writer lock is; a package can be as large as its Source makes
 * it, so none is left to pile up. */
static void
tmp_sweep(struct dump *d)
{
    char dir[4096];
    const char *base = strrchr(d->tmpbase, '/');
    size_t blen;
    DIR *dh;
    struct dirent *de;

    if (base == NULL) {
        snprintf(dir, sizeof(dir), ".");
        base = d->tmpbase;
    } else {
        snprintf(dir, sizeof(dir), "%.*s",
                 base == d->tmpbase ? 1 : (int)(base - d->tmpbase),
                 d->tmpbase);
        base++;
    }
    blen = strlen(base);
    if ((dh = opendir(dir)) == NULL)
        return;
    while ((de = readdir(dh)) != NULL)
        if (strncmp(de->d_name, base, blen) == 0 &&
            strncmp(de->d_name + blen, DUMP_TMP_SUFFIX,
                    sizeof(DUMP_TMP_SUFFIX) - 1) == 0 &&
            strlen(de->d_name + blen) == sizeof(DUMP_TMP_SUFFIX) - 1 + 6)
            unlinkat(dirfd(dh), de->d_name, 0);
    closedir(dh);
}

static void
pkgs_clear(struct dump *d)
{
    for (size_t i = 0; i < d->npkgs; i++)
        rs_free(d->pkgs[i]);
    rs_free(d->pkgs);
    rs_free(d->pkg_len);
    rs_free(d->pkg_until);
    d->pkgs = NULL;
    d->pkg_len = NULL;
    d->pkg_until = NULL;
    d->npkgs = d->next = 0;
}

static void
twins_free(struct dump *d)
{
    for (size_t t = 0; t < DUMP_MAX_THREADS; t++) {
        mirror_close(d->twins[t]);
        d->twins[t] = NULL;
    }
}

/* Let go of apply (dump.h: no job runs beside the writer threads). */
static void
unhold(struct dump *d)
{
    if (d->held) {
        d->held = false;
        apply_hold(d->o.apply, false);
    }
}

/* Everything under way stopped and dropped: the package being written
 * (its threads joined, its stage removed: nothing of it recorded), the
 * one waiting, the download. */
static void
pipeline_drop(struct dump *d)
{
    if (d->cur != NULL) {
        plan_abort(d->cur);           /* its package file too */
        d->cur = NULL;
    }
    opener_drop(&d->queued);
    opener_drop(&d->op);
    if (d->ready != NULL) {
        dumpzip_close(d->ready);
        d->ready = NULL;
        unlink(d->ready_tmp);
    }
    download_drop(d);
    if (d->spare[0] != '\0') {
        unlink(d->spare);
        d->spare[0] = '\0';
    }
    remove_wait(d);
    unhold(d);
}

/* A package could not be had (downloaded or opened): the dump fails with
 * rc and d->err, but the packages before it are still opened, written
 * and recorded first (a later package's failure loses nothing before
 * it); nothing after it is downloaded. */
static void
dump_fail(struct dump *d, int rc)
{
    if (d->fail_rc == 0)
        d->fail_rc = rc;
    download_drop(d);
    advance(d);
}

static void
dump_end(struct dump *d, int rc)
{
    char err[sizeof(d->err)];

    snprintf(err, sizeof(err), "%s", rc == 0 ? "" : d->err);
    pipeline_drop(d);
    pkgs_clear(d);
    twins_free(d);
    d->busy = false;
    d->o.on_done(d->o.ud, rc, err, &d->r);
}

/* ------------------------------------------------------------ unpacking */

/*
 * A package is unpacked as a pipeline. The loop's thread plans: each entry
 * to write becomes a job (its mirror path, once the ledger says the mirror
 * holds nothing newer). Writer threads, one per CPU, each with its own
 * reader of the package and its own handle on the mirror's stage for this
 * package, take the jobs in batches as they are planned: a member's bytes
 * go to a file under its final name in the stage, kept only once dumpzip
 * has verified all of it. When every job is written the stage is
 * published into the mirror (a directory the mirror lacks in one rename:
 * a package is mostly whole directories, so most files are never renamed
 * one by one) and the loop's thread records each job in the manifest's
 * order: in the ledger, or reported as failed. Without a stage (it could
 * not be made) each member goes to a temporary file renamed into place,
 * and each job is recorded as soon as it is written. The ledger is the
 * loop's alone. If no writer thread can be had, the loop's thread writes
 * the jobs itself.
 *
 * While the threads write, the loop runs (the next package downloads
 * meanwhile, and is opened on the opener thread: a third of a dump's
 * time was the loop's alone) when apply can be held: no job of its in
 * flight, none started until the package is recorded, so nothing but the
 * threads writes the mirror and no pushed change lands under a member.
 * The threads wake the loop (an eventfd, the opener's too) when the last
 * job is written. When apply has a job in flight the loop waits for the
 * package, as it did.
 */
struct job {
    size_t i;                    /* manifest entry */
    char *path;                  /* mirror path (pathmap's) */
    rs_time_t change_dt;
    int64_t length;              /* bytes written; -1: failed (why) */
    char *why;                   /* failed: why (NULL: out of memory) */
    bool done;                   /* written or failed (under mu) */
};

struct plan;

struct worker {
    struct plan *p;
    struct dumpzip_reader *rd;   /* NULL: through z (the loop's thread) */
    struct mirror *m;
    pthread_t th;
};

/* A stage's files that could not be published: path and why, sorted. */
struct unpub {
    char *path;
    char *why;
};

struct plan {
    struct dump *d;
    struct dumpzip *z;
    struct mirror *stage;        /* this package's, or NULL: written in
                                    place (temp + rename) */
    struct mirror *stage_twins[DUMP_MAX_THREADS];
    struct unpub *unpub;         /* files publishing dropped */
    size_t nunpub, capunpub;
    bool unpub_nomem;
    struct job *jobs;            /* one slot per manifest entry: never
                                    moved while the threads run */
    size_t n;                    /* planned (the loop's count) */
    size_t batch;                /* jobs a thread takes at once */
    int rc;                      /* planning's: 0 or the state error */
    int efd;                     /* the loop's wake-up (dump's efd) */
    char tmp[4096];              /* the package's file (removed with p) */
    /* under mu: */
    pthread_mutex_t mu;
    pthread_cond_t more;         /* jobs ready, or no more to come */
    pthread_cond_t written;      /* a batch is done, or a thread left */
    size_t ready;                /* [0, ready) may be taken */
    size_t next;                 /* the next job to take */
    bool closed;                 /* planning is over */
    bool cancel;                 /* take no more jobs (plan_abort) */
    bool recorded;               /* plan_written recorded the jobs */
    size_t ndone;                /* jobs written or failed */
    unsigned alive;              /* writer threads still taking jobs */
    unsigned nthreads;           /* started (joined at the end) */
    struct worker w[DUMP_MAX_THREADS];
};

static void
job_fail(struct job *j, const char *why)
{
    j->length = -1;
    j->why = rs_strdup(why);
}

/* Write job j's member into the mirror through w's reader and handle. */
static void
job_write(struct worker *w, struct job *j, char *buf, size_t bufsz)
{
    struct dumpzip *z = w->p->z;
    const struct rs_entry *e = dumpzip_entry(z, j->i);
    struct dumpzip_file *f = NULL;
    struct mirror_file *mf = NULL;
    char err[300];
    uint64_t n = 0;
    ssize_t k;

    if ((w->rd != NULL ? dumpzip_reader_open(w->rd, j->i, &f, err,
                                             sizeof(err))
                       : dumpzip_file_open(z, j->i, &f, err,
                                           sizeof(err))) != 0) {
        job_fail(j, err);
        return;
    }
    if (mirror_begin(w->m, j->path, &mf) != 0) {
        job_fail(j, mirror_errstr(w->m));
        dumpzip_file_close(f);
        return;
    }
    while ((k = dumpzip_file_read(f, buf, bufsz)) > 0) {
        if (mirror_write(mf, buf, (size_t)k) != 0)
            break;
        n += (uint64_t)k;
    }
    if (k != 0) {
        job_fail(j, k < 0 ? dumpzip_file_error(f) : mirror_errstr(w->m));
        mirror_abort(mf);
        dumpzip_file_close(f);
        return;
    }
    dumpzip_file_close(f);
    if (mirror_commit(mf, e->lastmod) != 0) {
        job_fail(j, mirror_errstr(w->m));
        return;
    }
    j->length = (int64_t)n;
}

/* Under p->mu: when planning is over and every job is written (or no
 * writer thread is left to write the rest), wake the loop. */
static void
wake_if_finished(struct plan *p)
{
    static const uint64_t one = 1;
    if (p->closed && (p->ndone == p->n || p->alive == 0) && p->efd >= 0) {
        atomic_store_explicit(&p->d->woken, true, memory_order_release);
        (void)!write(p->efd, &one, sizeof(one));
    }
}

/* Take the next batch [*k, *end) (true), or say there is none yet (false;
 * *done: and none will come). Under p->mu. */
static bool
take_batch(struct plan *p, size_t *k, size_t *end, bool *done)
{
    if (p->cancel) {
        *done = true;
        return false;
    }
    *done = p->closed && p->next >= p->ready;
    if (p->next >= p->ready)
        return false;
    *k = p->next;
    *end = p->ready - p->next > p->batch ? p->next + p->batch : p->ready;
    p->next = *end;
    return true;
}

/* Write jobs [k, end) through w, then mark them done. */
static void
write_batch(struct worker *w, size_t k, size_t end, char *buf, size_t bufsz)
{
    struct plan *p = w->p;

    for (size_t i = k; i < end; i++)
        job_write(w, &p->jobs[i], buf, bufsz);
    pthread_mutex_lock(&p->mu);
    for (size_t i = k; i < end; i++)
        p->jobs[i].done = true;
    p->ndone += end - k;
    pthread_cond_broadcast(&p->written);
    wake_if_finished(p);
    pthread_mutex_unlock(&p->mu);
}

static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    struct plan *p = w->p;
    char buf[65536], err[300];
    size_t k, end;
    bool done = false;

    rs_thread_signals_to_loop();
    /* Made here, beside the loop's planning: a thread that cannot have
     * its reader leaves its share to the others. */
    if (dumpzip_reader_new(p->z, &w->rd, err, sizeof(err)) == 0) {
        for (;;) {
            pthread_mutex_lock(&p->mu);
            while (!take_batch(p, &k, &end, &done) && !done)
                pthread_cond_wait(&p->more, &p->mu);
            pthread_mutex_unlock(&p->mu);
            if (done)
                break;
            write_batch(w, k, end, buf, sizeof(buf));
        }
        dumpzip_reader_free(w->rd);
        w->rd = NULL;
    }
    pthread_mutex_lock(&p->mu);
    p->alive--;
    pthread_cond_broadcast(&p->written);
    wake_if_finished(p);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* The writer threads a package gets: --dump-threads, else the CPUs this
 * process may run on. */
static unsigned
threads_wanted(const struct dump *d)
{
    if (d->o.threads > 0)
        return d->o.threads < DUMP_MAX_THREADS ? d->o.threads
                                               : DUMP_MAX_THREADS;
    cpu_set_t set;
    unsigned n = 1;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        n = (unsigned)CPU_COUNT(&set);
    return n < 1 ? 1 : n < DUMP_MAX_THREADS ? n : DUMP_MAX_THREADS;
}

/* A plan for up to max jobs of z, the writer threads started (none for
 * a small package: the loop's thread writes those). NULL: out of memory. */
static struct plan *
plan_new(struct dump *d, struct dumpzip *z, size_t max)
{
    unsigned want = max < DUMP_MIN_PARALLEL ? 0 : threads_wanted(d);
    char err[300];
    struct plan *p = rs_calloc(1, sizeof(*p));

    if (p == NULL)
        return NULL;
    p->d = d;
    p->z = z;
    p->efd = d->efd;
    if ((p->jobs = rs_calloc(max > 0 ? max : 1, sizeof(*p->jobs))) == NULL) {
        rs_free(p);
        return NULL;
    }
    /* No stage (a mirror we may not make a directory in the root of):
     * temp + rename in place, as fast as that is. */
    p->stage = max > 0 ? mirror_stage_new(d->o.mirror, err, sizeof(err))
                       : NULL;
    p->batch = max / ((want > 0 ? want : 1) * 16);
    p->batch = p->batch < 16 ? 16 : p->batch > 1024 ? 1024 : p->batch;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->more, NULL);
    pthread_cond_init(&p->written, NULL);
    for (unsigned t = 0; t < want; t++) {
        struct worker *w = &p->w[p->nthreads];
        struct mirror *m;
        if (p->stage != NULL)
            m = p->stage_twins[t] = mirror_twin(p->stage, err, sizeof(err));
        else if ((m = d->twins[t]) == NULL)
            m = d->twins[t] = mirror_twin(d->o.mirror, err, sizeof(err));
        if (m == NULL)
            break;
        *w = (struct worker){ .p = p, .m = m };
        pthread_mutex_lock(&p->mu);
        p->alive++;
        pthread_mutex_unlock(&p->mu);
        if (pthread_create(&w->th, NULL, worker_main, w) != 0) {
            pthread_mutex_lock(&p->mu);
            p->alive--;
            pthread_mutex_unlock(&p->mu);
            break;
        }
        p->nthreads++;
    }
    return p;
}

/* Let the threads take what was planned so far; close: nothing more will
 * be. */
static void
plan_publish(struct plan *p, bool close)
{
    pthread_mutex_lock(&p->mu);
    p->ready = p->n;
    if (close) {
        p->closed = true;
        wake_if_finished(p);
    }
    pthread_cond_broadcast(&p->more);
    pthread_mutex_unlock(&p->mu);
}

/* Entry i of z, as the Source's resource at change_dt: a job, unless the
 * mirror already holds a newer copy or the URI is refused. lookup false:
 * the ledger is known to hold nothing for it. 0, or a state error (the
 * caller stops). */
static int
plan_entry(struct plan *p, size_t i, rs_time_t change_dt, bool lookup)
{
    struct dump *d = p->d;
    const struct rs_entry *e = dumpzip_entry(p->z, i);
    const char *why = NULL;
    struct ledger_res old;
    char *path = NULL, *oldbuf = NULL;
    int rc;

    rc = pathmap_path(d->o.pathmap, e->loc, &path, &why);
    if (rc != 0) {
        problem(d, e->loc, rc == RS_EDENIED ? "refused: outside the Source's "
                "prefixes" : why != NULL ? why : rs_strerror(rc),
                rc != RS_ENOMEM);
        return 0;
    }
    rc = lookup ? ledger_res_get(d->o.ledger, e->loc, &old, &oldbuf)
                : RS_ENOTFOUND;
    rs_free(oldbuf);
    if (rc == 0 && old.change_dt != RS_TIME_NONE &&
        change_dt != RS_TIME_NONE &&
        (d->kind == DUMP_RESOURCES ? old.change_dt > change_dt
                                   : old.change_dt >= change_dt)) {
        d->r.skipped++;               /* push brought a newer copy */
        rs_free(path);
        return 0;
    }
    if (rc != 0 && rc != RS_ENOTFOUND) {
        rs_free(path);
        return rc;
    }
    p->jobs[p->n++] = (struct job){ .i = i, .path = path,
                                    .change_dt = change_dt, .length = -1 };
    if (p->n - p->ready >= p->batch)
        plan_publish(p, false);
    return 0;
}

/* The rows record_job gathered, into the ledger. 0 or a state error. */
static int
rows_flush(struct dump *d)
{
    size_t n = d->nrows;
    int rc;

    if (n == 0)
        return 0;
    d->nrows = 0;
    rc = ledger_res_put_many(d->o.ledger, d->rows, n);
    if (rc == 0)
        d->r.written += n;
    return rc;
}

/* The end of a plan's records (its rows point into its jobs and
 * manifest): the rows gathered written, unless rc is already a state
 * error (then they are dropped). Returns rc, or rows_flush's. */
static int
rows_end(struct dump *d, int rc)
{
    if (rc == 0)
        return rows_flush(d);
    d->nrows = 0;
    return rc;
}

/* Job j, written: its row gathered for the ledger (rows_flush, or
 * rows_end once the plan's jobs are recorded), or reported. 0 or a state
 * error. */
static int
record_job(struct plan *p, const struct job *j)
{
    struct dump *d = p->d;
    const struct rs_entry *e = dumpzip_entry(p->z, j->i);
    int rc;

    if (j->length < 0) {
        problem(d, e->loc, j->why != NULL ? j->why : "out of memory", false);
        return 0;
    }
    if (d->nrows == LEDGER_RES_BATCH && (rc = rows_flush(d)) != 0)
        return rc;
    /* in the transaction the rows are written in: apply's, which commits
     * them with its next batch */
    if ((rc = apply_txn(d->o.apply)) != 0)
        return rc;
    char *hbuf = d->row_hash[d->nrows];
    struct ledger_res *r = &d->rows[d->nrows];
    *r = (struct ledger_res){
        .uri = e->loc,
        .path = j->path,
        .lastmod = e->lastmod,
        .change_dt = j->change_dt,
        .length = j->length,
    };
    /* the digest verified, as apply records what it computed: an
     * announced one that was not checked is not the ledger's to vouch */
    enum rs_hash_algo strong = rs_hashes_strongest(&e->md.hash);
    struct rs_hashes one = { 0 };
    if (strong != RS_HASH_OTHER) {
        one.n = 1;
        one.d[0] = *rs_hashes_find(&e->md.hash, strong);
    }
    r->hash = one.n > 0 && rs_hashes_format(&one, hbuf) > 0 ? hbuf : NULL;
    d->nrows++;
    return 0;
}

static int
cmp_unpub(const void *a, const void *b)
{
    return strcmp(((const struct unpub *)a)->path,
                  ((const struct unpub *)b)->path);
}

/* mirror_stage_publish's on_fail: a file left out. */
static void
on_unpublished(void *ud, const char *rel, const char *why)
{
    struct plan *p = ud;
    if (p->nunpub == p->capunpub) {
        size_t cap = p->capunpub > 0 ? p->capunpub * 2 : 16;
        struct unpub *u = rs_realloc(p->unpub, cap * sizeof(*u));
        if (u == NULL) {
            p->unpub_nomem = true;
            return;
        }
        p->unpub = u;
        p->capunpub = cap;
    }
    struct unpub *u = &p->unpub[p->nunpub];
    *u = (struct unpub){ rs_strdup(rel), rs_strdup(why) };
    if (u->path == NULL || u->why == NULL) {
        rs_free(u->path);
        rs_free(u->why);
        p->unpub_nomem = true;
        return;
    }
    p->nunpub++;
}

/*
 * Every job written: move the stage's files into the mirror (the writer
 * threads joined, their handles closed). A job whose file was left out
 * fails with why; after a failure to publish at all (memory), so does
 * every job: the stage went with what it held.
 */
static void
stage_publish(struct plan *p)
{
    for (unsigned t = 0; t < DUMP_MAX_THREADS; t++) {
        mirror_close(p->stage_twins[t]);
        p->stage_twins[t] = NULL;
    }
    int rc = mirror_stage_publish(p->d->o.mirror, p->stage, on_unpublished,
                                  p);
    p->stage = NULL;
    if (p->nunpub > 1)
        qsort(p->unpub, p->nunpub, sizeof(*p->unpub), cmp_unpub);
    for (size_t i = 0; i < p->n; i++) {
        struct job *j = &p->jobs[i];
        if (j->length < 0)
            continue;
        if (rc != 0 || p->unpub_nomem) {
            job_fail(j, rc != 0 ? mirror_errstr(p->d->o.mirror)
                                : "not moved into the mirror (out of memory)");
        } else if (p->nunpub > 0) {
            struct unpub key = { .path = j->path };
            const struct unpub *u = bsearch(&key, p->unpub, p->nunpub,
                                            sizeof(*p->unpub), cmp_unpub);
            char why[300];
            if (u == NULL)
                continue;
            snprintf(why, sizeof(why), "%s: %s", j->path, u->why);
            job_fail(j, why);
        }
    }
    for (size_t i = 0; i < p->nunpub; i++) {
        rs_free(p->unpub[i].path);
        rs_free(p->unpub[i].why);
    }
    rs_free(p->unpub);
    p->unpub = NULL;
    p->nunpub = p->capunpub = 0;
}

/* Whether a written package's file is kept as the spare: while another
 * package is to be downloaded. It takes the place of the package it held,
 * so there are still two package files on disk at most (advance). */
static bool
spare_wanted(const struct dump *d)
{
    return d->spare[0] == '\0' && d->fail_rc == 0 && d->next < d->npkgs;
}

/* Everything p holds (its package closed and removed, or kept as the
 * spare), and p (its threads joined). */
static void
plan_free(struct plan *p)
{
    dumpzip_close(p->z);
    /* The manifest was allocated on the opener's thread, so in another
     * malloc arena than the loop's: freed here, its memory stays with
     * that arena unless handed back (peak RSS at 100,000 files 91-99 MB
     * without this, 79-87 MB with it, 83 MB before the opener). */
    malloc_trim(0);
    if (p->tmp[0] != '\0' && !p->cancel && spare_wanted(p->d))
        snprintf(p->d->spare, sizeof(p->d->spare), "%s", p->tmp);
    else if (p->tmp[0] != '\0')
        unlink(p->tmp);
    for (unsigned t = 0; t < DUMP_MAX_THREADS; t++)
        mirror_close(p->stage_twins[t]);
    mirror_close(p->stage);           /* unpublished: removed */
    pthread_cond_destroy(&p->written);
    pthread_cond_destroy(&p->more);
    pthread_mutex_destroy(&p->mu);
    for (size_t j = 0; j < p->n; j++) {
        rs_free(p->jobs[j].path);
        rs_free(p->jobs[j].why);
    }
    rs_free(p->jobs);
    rs_free(p);
}

/*
 * Planning is over (rc: 0, or the state error that ended it): every job
 * planned is written, the threads joined; without a stage each job is
 * recorded in order as soon as it is written (after a state error, only
 * written: the caller stops), with one the stage is published (the
 * records are plan_record's). Returns rc, or the first state error
 * recording.
 */
static int
plan_written(struct plan *p, int rc)
{
    struct worker self = { .p = p, .m = p->stage != NULL ? p->stage
                                                         : p->d->o.mirror };
    char buf[65536];
    size_t r = 0, k, end, upto;
    bool none;
    bool staged = p->stage != NULL;

    plan_publish(p, true);
    while (r < p->n) {
        pthread_mutex_lock(&p->mu);
        while (!p->jobs[r].done) {
            if (p->alive == 0 && take_batch(p, &k, &end, &none)) {
                /* no writer thread left: the loop's thread writes */
                pthread_mutex_unlock(&p->mu);
                write_batch(&self, k, end, buf, sizeof(buf));
                pthread_mutex_lock(&p->mu);
                continue;
            }
            pthread_cond_wait(&p->written, &p->mu);
        }
        for (upto = r; upto < p->n && p->jobs[upto].done; upto++)
            ;
        pthread_mutex_unlock(&p->mu);
        for (; r < upto; r++)
            if (rc == 0 && !staged)
                rc = record_job(p, &p->jobs[r]);
    }
    if (!staged)
        rc = rows_end(p->d, rc);
    for (unsigned t = 0; t < p->nthreads; t++)
        pthread_join(p->w[t].th, NULL);
    p->nthreads = 0;
    /* after a state error nothing is recorded: nothing is published
     * either (the stage goes with plan_free) */
    if (staged && rc == 0)
        stage_publish(p);
    p->recorded = !staged;
    return rc;
}

/* After plan_written: each job recorded in order (unless it was, or rc
 * is a state error), p freed. Returns rc, or the first state error. */
static int
plan_record(struct plan *p, int rc)
{
    if (!p->recorded) {
        for (size_t r = 0; r < p->n; r++)
            if (rc == 0)
                rc = record_job(p, &p->jobs[r]);
        rc = rows_end(p->d, rc);
    }
    plan_free(p);
    return rc;
}

/* Stop a plan's writing: the threads take no more jobs and are joined,
 * the stage goes with what it holds, nothing is recorded; p is freed. */
static void
plan_abort(struct plan *p)
{
    pthread_mutex_lock(&p->mu);
    p->cancel = p->closed = true;
    pthread_cond_broadcast(&p->more);
    pthread_mutex_unlock(&p->mu);
    for (unsigned t = 0; t < p->nthreads; t++)
        pthread_join(p->w[t].th, NULL);
    p->nthreads = 0;
    plan_free(p);
}

/* Whether the next package's plan looks its entries up in the ledger:
 * always but for a Resource Dump into a ledger that has had no writer
 * but the dump since it began empty (dump.c "quiet"). */
static bool
looks_up(const struct dump *d)
{
    return d->kind != DUMP_RESOURCES || !d->quiet ||
           ledger_total_changes(d->o.ledger) != d->quiet_mark;
}

/* A Resource Dump package: every member, as of the dump's at. While the
 * ledger has had no other writer since the dump began with it empty, it
 * holds nothing newer than the dump: no entry is looked up. The plan
 * (NULL: out of memory) with every job planned. */
static struct plan *
plan_resources(struct dump *d, struct dumpzip *z)
{
    struct plan *p;
    bool lookup = looks_up(d);
    int rc = 0;

    if (lookup)
        d->quiet = false;
    if ((p = plan_new(d, z, dumpzip_count(z))) == NULL)
        return NULL;
    for (size_t i = 0; i < dumpzip_count(z) && rc == 0; i++)
        rc = plan_entry(p, i, d->r.at, lookup);
    p->rc = rc;
    return p;
}

/* An entry's loc and index, sorted to find each resource's last change
 * in a package. */
struct loc_ix {
    const char *loc;
    size_t i;
};

static int
cmp_loc_ix(const void *a, const void *b)
{
    const struct loc_ix *x = a, *y = b;
    int c = strcmp(x->loc, y->loc);
    return c != 0 ? c : (x->i > y->i) - (x->i < y->i);
}

/*
 * A Change Dump package: one bitstream per change, in the manifest's
 * order. Only each resource's last change counts (the earlier ones are
 * superseded within the package), and only when it is after the
 * caller's position and newer than the mirror's copy: a change at or
 * before the position is left to the Change Lists read next, which see
 * whether the mirror holds it. A deletion goes to apply (local work,
 * no request); a creation or update is written from its member,
 * verified, as a Resource Dump's member is. The plan (NULL: out of
 * memory) with every job planned.
 */
static struct plan *
plan_changes(struct dump *d, struct dumpzip *z)
{
    size_t n = dumpzip_count(z);
    struct loc_ix *ix = rs_calloc(n > 0 ? n : 1, sizeof(*ix));
    bool *last = rs_calloc(n > 0 ? n : 1, sizeof(*last));
    char hbuf[RS_HASHES_BUFSZ];
    struct plan *p = NULL;
    int rc = 0;

    if (ix == NULL || last == NULL || (p = plan_new(d, z, n)) == NULL) {
        rs_free(ix);
        rs_free(last);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        ix[i] = (struct loc_ix){ dumpzip_entry(z, i)->loc, i };
    qsort(ix, n, sizeof(*ix), cmp_loc_ix);
    for (size_t k = 0; k < n; k++)
        if (k + 1 == n || strcmp(ix[k].loc, ix[k + 1].loc) != 0)
            last[ix[k].i] = true;
    rs_free(ix);
    for (size_t i = 0; i < n && rc == 0; i++) {
        const struct rs_entry *e = dumpzip_entry(z, i);
        struct ledger_todo t;
        if (!last[i]) {
            d->r.superseded++;
            continue;
        }
        (void)apply_todo_from_entry(e, e->loc, "changedump", &t, hbuf);
        if (t.change_dt == RS_TIME_NONE ||
            (d->since != RS_TIME_NONE && t.change_dt <= d->since)) {
            d->r.skipped++;           /* the Change Lists will say */
            continue;
        }
        if (t.change == LEDGER_DELETE) {
            char *path = NULL;
            const char *why = NULL;
            int prc = pathmap_path(d->o.pathmap, e->loc, &path, &why);
            if (prc != 0) {
                problem(d, e->loc, prc == RS_EDENIED ? "refused: outside the "
                        "Source's prefixes" : why != NULL ? why
                        : rs_strerror(prc), prc != RS_ENOMEM);
                continue;
            }
            rs_free(path);
            rc = apply_offer(d->o.apply, &t);
            if (rc >= 0) {
                rc = 0;
                d->r.deleted++;
            }
            continue;
        }
        rc = plan_entry(p, i, t.change_dt, true);
    }
    rs_free(last);
    p->rc = rc;
    return p;
}

/*
 * A Resource Dump's at, its document's or a manifest's: the dump is the
 * Source as of the earliest (the Change Lists are read from there). One
 * beyond our clock cannot be true, and taken as now (as a change time
 * is) it would have the Change Lists read from now, skipping whatever
 * changed between the dump's real time and now: the dump has no at then
 * (at_future), and the reconcile that follows a dump without one decides.
 */
static void
at_take(struct dump *d, rs_time_t at)
{
    rs_time_t t = at;

    if (at == RS_TIME_NONE)
        return;
    if (apply_future(&t, rs_time_now())) {
        d->r.at_future = true;
        d->r.at = RS_TIME_NONE;
        return;
    }
    if (!d->r.at_future && (d->r.at == RS_TIME_NONE || at < d->r.at))
        d->r.at = at;
}

/*
 * A Change Dump package's changes must lie within its manifest's own
 * from and until, and neither they nor until beyond our clock: a package
 * that says otherwise contradicts itself (a deletion dated after until
 * that no Change List has would be applied on the package's word alone),
 * and is refused as a malformed one is. The interval is checked against
 * a change's datetime (a lastmod, all a 1.0 entry has, may well be older
 * than the change); our clock against its change time as
 * apply_todo_from_entry takes it. 0, or RS_EINVALID with d->err.
 */
static int
pkg_check_changes(struct dump *d, struct dumpzip *z, const char *url)
{
    const struct rs_md *md = &dumpzip_head(z)->md;
    rs_time_t now = rs_time_now(), t;
    char a[RS_TIME_BUFSZ], b[RS_TIME_BUFSZ];

    t = md->until;
    if (md->until != RS_TIME_NONE && apply_future(&t, now)) {
        rs_time_format(md->until, a);
        snprintf(d->err, sizeof(d->err), "%.300s: its manifest's until %s "
                 "is in the future", url, a);
        return RS_EINVALID;
    }
    if (md->from != RS_TIME_NONE && md->until != RS_TIME_NONE &&
        md->from > md->until) {
        rs_time_format(md->from, a);
        rs_time_format(md->until, b);
        snprintf(d->err, sizeof(d->err), "%.300s: its manifest's from %s is "
                 "after its until %s", url, a, b);
        return RS_EINVALID;
    }
    for (size_t i = 0; i < dumpzip_count(z); i++) {
        const struct rs_entry *e = dumpzip_entry(z, i);
        rs_time_t dt = e->md.datetime;
        const char *why = NULL;
        if (dt == RS_TIME_NONE && e->md.change != RS_CHANGE_DELETED)
            dt = e->lastmod;
        t = dt;
        if (dt == RS_TIME_NONE)
            continue;                 /* left to the Change Lists */
        if (apply_future(&t, now))
            why = "is in the future";
        else if (e->md.datetime == RS_TIME_NONE)
            continue;
        else if (md->from != RS_TIME_NONE && dt < md->from)
            why = "is before its manifest's from";
        else if (md->until != RS_TIME_NONE && dt > md->until)
            why = "is after its manifest's until";
        if (why != NULL) {
            rs_time_format(dt, a);
            snprintf(d->err, sizeof(d->err), "%.200s: the change of %.200s "
                     "at %s %s", url, e->loc, a, why);
            return RS_EINVALID;
        }
    }
    return 0;
}

/* The package opened (dumpzip's checks passed): is it of the dump's kind
 * (and a Change Dump's, true to its interval)? 0, or RS_EINVALID with
 * d->err (z closed). */
static int
pkg_check(struct dump *d, struct dumpzip *z, const char *url)
{
    enum rs_capability want = d->kind == DUMP_RESOURCES
                                  ? RS_CAP_RESOURCEDUMP_MANIFEST
                                  : RS_CAP_CHANGEDUMP_MANIFEST;
    if (dumpzip_head(z)->md.capability != want) {
        snprintf(d->err, sizeof(d->err), "%s: not a %s package "
                 "(its manifest is a %s)", url,
                 d->kind == DUMP_RESOURCES ? "Resource Dump" : "Change Dump",
                 rs_capability_name(dumpzip_head(z)->md.capability));
        dumpzip_close(z);
        return RS_EINVALID;
    }
    if (d->kind == DUMP_CHANGES && pkg_check_changes(d, z, url) != 0) {
        dumpzip_close(z);
        return RS_EINVALID;
    }
    return 0;
}

/* --------------------------------------------------------- the opener */

/* Open op's package and say so (on_wake). */
static void
opener_run(struct opener *op)
{
    static const uint64_t one = 1;

    op->rc = dumpzip_open_scanned(op->path, NULL, op->scan, &op->z, op->err,
                                  sizeof(op->err));
    dumpzip_scan_free(op->scan);
    op->scan = NULL;
    atomic_store_explicit(&op->done, true, memory_order_release);
    atomic_store_explicit(&op->d->woken, true, memory_order_release);
    (void)!write(op->d->efd, &one, sizeof(one));
}

static void *
opener_main(void *arg)
{
    rs_thread_signals_to_loop();
    opener_run(arg);
    return NULL;
}

/* Start opening op's package as d->op: on a thread, or here when no
 * thread can be had. */
static void
opener_launch(struct dump *d, struct opener *op)
{
    d->op = op;
    /* libxml2 was set up on the loop's thread (the dump document was
     * parsed there), so a parser on another thread is safe. */
    if (pthread_create(&op->th, NULL, opener_main, op) != 0) {
        op->th = pthread_self();      /* nothing to join */
        opener_run(op);               /* on_wake takes it from here */
    }
}

/* Open the package downloaded to path (its file, and scan, its bytes'
 * scan or NULL, are the opener's from here); one at a time: while one is
 * being opened the next is queued. 0, or RS_ENOMEM (path removed). */
static int
opener_start(struct dump *d, const char *path, size_t pkg,
             struct dumpzip_scan *scan)
{
    struct opener *op = rs_calloc(1, sizeof(*op));

    if (op == NULL) {
        dumpzip_scan_free(scan);
        unlink(path);
        snprintf(d->err, sizeof(d->err), "out of memory");
        return RS_ENOMEM;
    }
    op->d = d;
    op->pkg = pkg;
    op->scan = scan;
    op->th = pthread_self();          /* nothing to join until launched */
    snprintf(op->path, sizeof(op->path), "%s", path);
    atomic_init(&op->done, false);
    if (d->op != NULL)
        d->queued = op;               /* advance: never a third */
    else
        opener_launch(d, op);
    return 0;
}

static void
opener_join(struct opener *op)
{
    if (!pthread_equal(op->th, pthread_self()))
        pthread_join(op->th, NULL);
}

/* The opener has finished: its package is ready (0), or the dump ends
 * (its error in d->err). */
static int
opener_finish(struct dump *d)
{
    struct opener *op = d->op;
    const char *url = d->pkgs[op->pkg];
    int rc;

    d->op = NULL;
    opener_join(op);
    if (op->rc != 0) {
        snprintf(d->err, sizeof(d->err), "%.200s: %.300s", url, op->err);
        rc = RS_EINVALID;
    } else {
        rc = pkg_check(d, op->z, url);
    }
    if (rc != 0) {
        unlink(op->path);
        opener_drop(&d->queued);      /* the package after it */
    } else {
        d->ready = op->z;
        snprintf(d->ready_tmp, sizeof(d->ready_tmp), "%s", op->path);
    }
    rs_free(op);
    if (d->queued != NULL) {
        struct opener *next = d->queued;
        d->queued = NULL;
        opener_launch(d, next);
    }
    return rc;
}

/* Stop waiting for *opp (NULL ok): its thread joined, what it opened
 * closed and its file removed; *opp = NULL. */
static void
opener_drop(struct opener **opp)
{
    struct opener *op = *opp;

    if (op == NULL)
        return;
    *opp = NULL;
    opener_join(op);
    dumpzip_scan_free(op->scan);
    dumpzip_close(op->z);
    unlink(op->path);
    rs_free(op);
}

static void *
remover_main(void *arg)
{
    struct dump *d = arg;

    rs_thread_signals_to_loop();
    /* cut first: the loop still holds the file open (dumpzip), and the
     * pages go only when the last descriptor does, or the length */
    (void)!truncate(d->removed, 0);
    unlink(d->removed);
    return NULL;
}

/* Remove the file at path on the remover thread (one at a time), or here
 * when no thread can be had. */
static void
remove_start(struct dump *d, const char *path)
{
    remove_wait(d);
    snprintf(d->removed, sizeof(d->removed), "%s", path);
    if (pthread_create(&d->remover, NULL, remover_main, d) == 0)
        d->removing = true;
    else
        remover_main(d);
}

/* The file being removed is gone. */
static void
remove_wait(struct dump *d)
{
    if (d->removing) {
        pthread_join(d->remover, NULL);
        d->removing = false;
    }
}

/* Package p, written (plan_written's rc): recorded, closed and its file
 * removed. 0 or the state error recording met. */
static int
unpack_record(struct dump *d, struct plan *p, int rc)
{
    rs_time_t u = dumpzip_head(p->z)->md.until;

    /* nothing reads the package's file any more: unless it is to be the
     * spare, it goes while the records are made */
    if (p->tmp[0] != '\0' && !spare_wanted(d)) {
        remove_start(d, p->tmp);
        p->tmp[0] = '\0';
    }
    rc = plan_record(p, rc);
    if (d->kind == DUMP_RESOURCES && d->quiet)
        d->quiet_mark = ledger_total_changes(d->o.ledger);
    if (d->kind == DUMP_CHANGES && rc == 0 && u != RS_TIME_NONE &&
        (d->r.until == RS_TIME_NONE || u > d->r.until))
        d->r.until = u;
    if (rc != 0)
        snprintf(d->err, sizeof(d->err), "state: %s",
                 ledger_errstr(d->o.ledger));
    d->r.packages++;
    return rc;
}

/* Start writing the waiting package: planned here, written by the
 * threads; the loop goes on meanwhile when apply can be held, else the
 * package is finished before this returns. 0, or an error that ends the
 * dump. */
static int
unpack_begin(struct dump *d)
{
    struct dumpzip *z = d->ready;
    struct plan *p;

    d->ready = NULL;
    if (d->kind == DUMP_RESOURCES)
        at_take(d, dumpzip_head(z)->md.at);
    p = d->kind == DUMP_RESOURCES ? plan_resources(d, z)
                                  : plan_changes(d, z);
    if (p == NULL) {
        dumpzip_close(z);
        unlink(d->ready_tmp);
        d->ready_tmp[0] = '\0';
        snprintf(d->err, sizeof(d->err), "out of memory");
        return RS_ENOMEM;
    }
    snprintf(p->tmp, sizeof(p->tmp), "%s", d->ready_tmp);
    d->ready_tmp[0] = '\0';
    plan_publish(p, true);
    if (p->rc == 0 && p->nthreads > 0 &&
        (d->held || apply_hold(d->o.apply, true))) {
        d->held = true;
        d->cur = p;
        return 0;                     /* on_wake finishes it */
    }
    return unpack_record(d, p, plan_written(p, p->rc));
}

/* A thread says the package being opened is, or the one being written
 * is. */
static void
on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct dump *d = arg;
    struct plan *p;
    uint64_t n;
    bool finished;
    int rc, rc_next = 0;

    (void)what;
    atomic_store_explicit(&d->woken, false, memory_order_relaxed);
    (void)!read(fd, &n, sizeof(n));
    if (d->op != NULL &&
        atomic_load_explicit(&d->op->done, memory_order_acquire)) {
        if ((rc = opener_finish(d)) != 0) {
            dump_fail(d, rc);
            return;
        }
        if (d->cur == NULL) {
            advance(d);
            return;
        }
    }
    if (d->cur == NULL)
        return;                       /* a package the loop finished */
    pthread_mutex_lock(&d->cur->mu);
    finished = d->cur->closed &&
               (d->cur->ndone == d->cur->n || d->cur->alive == 0);
    pthread_mutex_unlock(&d->cur->mu);
    if (!finished)
        return;
    p = d->cur;
    d->cur = NULL;
    rc = plan_written(p, p->rc);
    /* When the next package's plan looks nothing up, its writes need not
     * wait for this one's records: they go on meanwhile. */
    if (rc == 0 && d->ready != NULL && !looks_up(d))
        rc_next = unpack_begin(d);
    rc = unpack_record(d, p, rc);
    if (rc == 0)
        rc = rc_next;
    if (d->cur == NULL)
        unhold(d);
    if (rc != 0) {
        dump_end(d, rc);
        return;
    }
    advance(d);
}

/* ---------------------------------------------------------- downloads */

/* Write what wbuf holds to the package's file. 0, or -1 with
 * d->write_errno. */
static int
pkg_flush(struct dump *d)
{
    const char *p = d->wbuf;
    size_t len = d->wlen;

    while (len > 0) {
        ssize_t w = write(d->fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            d->write_errno = errno;
            return -1;
        }
        p += w;
        len -= (size_t)w;
        d->got += (uint64_t)w;
    }
    d->wlen = 0;
    return 0;
}

static int
on_pkg_data(void *ud, struct rs_http_req *req, const char *buf, size_t len)
{
    struct dump *d = ud;
    long status = rs_http_req_status(req);

    d->pieces++;                      /* bytes came (on_stall_tick) */
    if (status < 200 || status > 299)
        return 0;
    if (atomic_load_explicit(&d->woken, memory_order_acquire))
        return RS_HTTP_DATA_LATER;    /* on_wake first */
    while (len > 0) {
        size_t n = DUMP_READ_SIZE - d->wlen < len ? DUMP_READ_SIZE - d->wlen
                                                  : len;
        memcpy(d->wbuf + d->wlen, buf, n);
        if (d->scan != NULL)
            dumpzip_scan_feed(d->scan, buf, n);
        d->wlen += n;
        buf += n;
        len -= n;
        if (d->wlen == DUMP_READ_SIZE && pkg_flush(d) != 0)
            return 1;
    }
    return 0;
}

static void
on_pkg_done(void *ud, struct rs_http_req *req, const struct rs_http_result *res)
{
    struct dump *d = ud;
    const char *url;
    int64_t want;
    int rc;

    (void)req;
    if (res->rc == RS_ECANCELED)
        return;                       /* dump_free, dump_end: d may be gone */
    d->req = NULL;
    event_del(d->ev_stall);
    url = d->pkgs[d->next - 1];
    want = d->pkg_len[d->next - 1];
    if (res->rc == 0 && d->write_errno == 0 && pkg_flush(d) == 0 &&
        ftruncate(d->fd, (off_t)d->got) != 0)
        d->write_errno = errno;      /* a longer spare's tail: cut */
    d->wlen = 0;
    d->r.bytes += d->got;
    if (d->write_errno != 0) {
        snprintf(d->err, sizeof(d->err), "%.200s: writing %.200s: %s", url, d->tmp,
                 strerror(d->write_errno));
        dump_fail(d, RS_EIO);
        return;
    }
    if (res->rc == 0 && (res->status == 404 || res->status == 410) &&
        reread_ask(d, url, res->status)) {
        tmp_drop(d);
        advance(d);
        return;
    }
    if (res->rc != 0 || res->status < 200 || res->status > 299) {
        if (res->rc != 0)
            snprintf(d->err, sizeof(d->err), "GET %s: %s", url, res->errstr);
        else
            snprintf(d->err, sizeof(d->err), "GET %s: HTTP %ld", url,
                     res->status);
        dump_fail(d, res->rc != 0 ? res->rc : RS_EPROTO);
        return;
    }
    if (want >= 0 && (uint64_t)want != d->got) {
        snprintf(d->err, sizeof(d->err), "%s: %llu bytes, the dump announced "
                 "%lld", url, (unsigned long long)d->got, (long long)want);
        dump_fail(d, RS_EINVALID);
        return;
    }
    close(d->fd);
    d->fd = -1;
    rc = opener_start(d, d->tmp, d->next - 1, d->scan);
    d->tmp[0] = '\0';
    d->scan = NULL;
    if (rc != 0) {
        dump_fail(d, rc);
        return;
    }
    advance(d);
}

/* The stall limit's tick: a quarter of the limit (at least 10 ms). */
static unsigned
stall_tick_ms(const struct dump *d)
{
    unsigned lim = d->o.stall_ms > 0 ? d->o.stall_ms : DUMP_STALL_MS;
    return lim / 4 > 10 ? lim / 4 : 10;
}

/* While a package downloads: no bytes since the last tick add to the
 * time stalled, and a download stalled for the limit fails (dump_fail:
 * what came before it is kept, and the caller falls back as for any
 * package that cannot be had). */
static void
on_stall_tick(evutil_socket_t fd, short what, void *arg)
{
    struct dump *d = arg;
    unsigned lim = d->o.stall_ms > 0 ? d->o.stall_ms : DUMP_STALL_MS;

    (void)fd;
    (void)what;
    if (d->req == NULL)
        return;
    if (d->pieces != d->pieces_seen) {
        d->pieces_seen = d->pieces;
        d->stalled_ms = 0;
        return;
    }
    d->stalled_ms += stall_tick_ms(d);
    if (d->stalled_ms < lim)
        return;
    snprintf(d->err, sizeof(d->err), "GET %.300s: stalled: no bytes for "
             "%.1f s (after %llu bytes)", d->pkgs[d->next - 1],
             (double)d->stalled_ms / 1000.0,
             (unsigned long long)(d->got + d->wlen));
    dump_fail(d, RS_ETIMEDOUT);
}

/* The package at url is gone (status 404 or 410): the Source may have
 * made a newer dump and removed the generation this one was read from.
 * True when the document is to be read again (once a dump; advance does
 * it once the packages before this one are recorded). */
static bool
reread_ask(struct dump *d, const char *url, long status)
{
    if (d->gone != NULL || d->fail_rc != 0)
        return false;
    if ((d->gone = rs_strdup(url)) == NULL)
        return false;
    snprintf(d->gone_err, sizeof(d->gone_err), "GET %.400s: HTTP %ld", url,
             status);
    d->reread_wanted = true;
    return true;
}

/* The file the next package is downloaded into, named in d->tmp: the
 * spare, written over, or a new one. -1 with errno. */
static int
pkg_file_open(struct dump *d)
{
    if (d->spare[0] != '\0') {
        snprintf(d->tmp, sizeof(d->tmp), "%s", d->spare);
        d->spare[0] = '\0';
        int fd = open(d->tmp, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd >= 0)
            return fd;
        unlink(d->tmp);
    }
    snprintf(d->tmp, sizeof(d->tmp), "%s" DUMP_TMP_SUFFIX "XXXXXX",
             d->tmpbase);
    return mkstemp(d->tmp);
}

/* Start downloading the next package. 0, or an error that ends the
 * dump. */
static int
download_next(struct dump *d)
{
    struct rs_http_req_opts ro = {
        .timeout_ms = DUMP_TIMEOUT_MS,
        .max_body = d->o.max_package ? d->o.max_package : DUMP_MAX_PACKAGE,
        .max_redirects = 5,
        .read_size = DUMP_READ_SIZE,
        .on_data = on_pkg_data,
        .on_done = on_pkg_done,
        .ud = d,
    };
    int rc;

    if ((d->fd = pkg_file_open(d)) < 0) {
        snprintf(d->err, sizeof(d->err), "cannot create %.400s: %s", d->tmp,
                 strerror(errno));
        d->tmp[0] = '\0';
        return RS_EIO;
    }
    d->got = 0;
    d->wlen = 0;
    d->write_errno = 0;
    /* none (out of memory): the opener reads the file for it */
    d->scan = dumpzip_scan_new();
    ro.url = d->pkgs[d->next++];
    if ((rc = rs_http_request(d->o.http, &ro, &d->req)) != 0) {
        snprintf(d->err, sizeof(d->err), "GET %s: %s", ro.url,
                 rs_strerror(rc));
        return rc;
    }
    d->pieces = d->pieces_seen = 0;
    d->stalled_ms = 0;
    struct timeval tv = { .tv_sec = stall_tick_ms(d) / 1000,
                          .tv_usec = (stall_tick_ms(d) % 1000) * 1000 };
    event_add(d->ev_stall, &tv);
    return 0;
}

/* Read the dump document again (reread_ask), the pipeline empty: its
 * packages replace the list (on_walk_done). 0, or the error that ends the
 * dump: the gone package's. */
static int
reread_start(struct dump *d)
{
    d->reread_wanted = false;
    d->pkgs_base = d->r.packages;
    pkgs_clear(d);
    if (docwalk_start(d->walk, d->url) != 0) {
        snprintf(d->err, sizeof(d->err), "%s", d->gone_err);
        return RS_EPROTO;
    }
    d->rereading = true;
    return 0;
}

/*
 * Move the pipeline on: a package waiting is begun once none is being
 * written; the next is downloaded while one is opened or written (one
 * ahead, at most: two packages on disk); the dump ends when every
 * package is recorded.
 */
static void
advance(struct dump *d)
{
    unsigned on_disk;
    int rc;

    while (d->cur == NULL && d->ready != NULL)
        if ((rc = unpack_begin(d)) != 0) {
            dump_end(d, rc);
            return;
        }
    on_disk = (d->cur != NULL) + (d->op != NULL) + (d->queued != NULL) +
              (d->ready != NULL) + (d->req != NULL);
    if (d->fail_rc != 0) {
        if (on_disk == 0)
            dump_end(d, d->fail_rc);
        return;
    }
    if (d->rereading)
        return;                       /* on_walk_done goes on */
    if (d->reread_wanted) {
        if (on_disk == 0 && (rc = reread_start(d)) != 0)
            dump_end(d, rc);
        return;
    }
    if (d->req == NULL && on_disk < 2 && d->next < d->npkgs) {
        if ((rc = download_next(d)) != 0)
            dump_end(d, rc);
        return;
    }
    if (on_disk == 0 && d->next == d->npkgs) {
        /* every package listed was fetched: each must have been recorded
         * (a package lost in the pipeline would be a silent gap) */
        if (d->r.packages != d->pkgs_base + d->npkgs) {
            snprintf(d->err, sizeof(d->err), "internal error: %llu of %zu "
                     "packages unpacked", (unsigned long long)d->r.packages,
                     d->pkgs_base + d->npkgs);
            dump_end(d, RS_ESTATE);
            return;
        }
        dump_end(d, 0);
    }
}

/* -------------------------------------------------- the dump document */

static int
on_head(void *ud, const char *url, const struct rs_head *h)
{
    struct dump *d = ud;

    enum rs_capability want = d->kind == DUMP_RESOURCES ? RS_CAP_RESOURCEDUMP
                                                        : RS_CAP_CHANGEDUMP;
    if (h->md.capability != want) {
        snprintf(d->err, sizeof(d->err), "%s: a %s where a %s was expected",
                 url, rs_capability_name(h->md.capability),
                 d->kind == DUMP_RESOURCES ? "Resource Dump"
                                           : "Change Dump");
        return RS_EINVALID;
    }
    if (d->kind == DUMP_RESOURCES)
        at_take(d, h->md.at);
    return 0;
}

static int
on_entry(void *ud, const char *url, const struct rs_entry *e, const char *loc)
{
    struct dump *d = ud;
    char **p;
    int64_t *l;
    rs_time_t *u;
    rs_time_t until = e->has_md ? e->md.until : RS_TIME_NONE;

    (void)url;
    /* A Change Dump's package that ends at or before the position holds
     * nothing after it: not downloaded. */
    if (d->kind == DUMP_CHANGES && until != RS_TIME_NONE &&
        d->since != RS_TIME_NONE && until <= d->since) {
        d->r.older++;
        return 0;
    }
    u = rs_realloc(d->pkg_until, (d->npkgs + 1) * sizeof(*u));
    if (u == NULL)
        return RS_ENOMEM;
    d->pkg_until = u;
    d->pkg_until[d->npkgs] = until;
    p = rs_realloc(d->pkgs, (d->npkgs + 1) * sizeof(*p));
    if (p == NULL)
        return RS_ENOMEM;
    d->pkgs = p;
    l = rs_realloc(d->pkg_len, (d->npkgs + 1) * sizeof(*l));
    if (l == NULL)
        return RS_ENOMEM;
    d->pkg_len = l;
    if ((d->pkgs[d->npkgs] = rs_strdup(loc)) == NULL)
        return RS_ENOMEM;
    d->pkg_len[d->npkgs] = e->has_md ? e->md.length : -1;
    d->npkgs++;
    return 0;
}

/* The document read again (reread_start) lists the package that was
 * gone, or nothing to read instead of it: no newer generation. */
static bool
reread_in_vain(const struct dump *d)
{
    if (d->npkgs == 0)
        return d->kind == DUMP_RESOURCES;
    for (size_t i = 0; i < d->npkgs; i++)
        if (strcmp(d->pkgs[i], d->gone) == 0)
            return true;
    return false;
}

static void
on_walk_done(void *ud, int rc, const char *err)
{
    struct dump *d = ud;

    if (d->rereading) {
        d->rereading = false;
        if (rc != 0 || reread_in_vain(d)) {
            snprintf(d->err, sizeof(d->err), "%.400s (the dump document, "
                     "read again, %s)", d->gone_err,
                     rc != 0 ? "could not be read" : "names no newer one");
            dump_end(d, RS_EPROTO);
            return;
        }
        d->r.reread = true;
        advance(d);
        return;
    }
    if (rc != 0) {
        if (d->err[0] == '\0')
            snprintf(d->err, sizeof(d->err), "%s", err);
        dump_end(d, rc);
        return;
    }
    advance(d);
}

/* ---------------------------------------------------------------- API */

struct dump *
dump_new(const struct dump_opts *o)
{
    struct dump *d = rs_calloc(1, sizeof(*d));
    struct docwalk_opts wo = {
        .base = o->base,
        .http = o->http,
        .on_head = on_head,
        .on_entry = on_entry,
        .on_done = on_walk_done,
    };

    if (d == NULL)
        return NULL;
    d->o = *o;
    d->fd = -1;
    atomic_init(&d->woken, false);
    wo.ud = d;
    d->tmpbase = rs_strdup(o->tmpbase);
    d->walk = docwalk_new(&wo);
    d->wbuf = rs_malloc(DUMP_READ_SIZE);
    d->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (d->efd >= 0)
        d->ev_wake = event_new(o->base, d->efd, EV_READ | EV_PERSIST,
                               on_wake, d);
    d->ev_stall = event_new(o->base, -1, EV_PERSIST, on_stall_tick, d);
    if (d->tmpbase == NULL || d->walk == NULL || d->wbuf == NULL ||
        d->ev_wake == NULL || d->ev_stall == NULL ||
        event_add(d->ev_wake, NULL) != 0) {
        dump_free(d);
        return NULL;
    }
    d->o.tmpbase = NULL;
    tmp_sweep(d);
    return d;
}

void
dump_free(struct dump *d)
{
    if (d == NULL)
        return;
    pipeline_drop(d);
    docwalk_free(d->walk);
    pkgs_clear(d);
    twins_free(d);
    if (d->ev_wake != NULL)
        event_free(d->ev_wake);
    if (d->ev_stall != NULL)
        event_free(d->ev_stall);
    rs_free(d->url);
    rs_free(d->gone);
    if (d->efd >= 0)
        close(d->efd);
    rs_free(d->wbuf);
    rs_free(d->tmpbase);
    rs_free(d);
}

static int
start(struct dump *d, const char *url, enum dump_kind kind, rs_time_t since)
{
    int rc;

    if (d->busy)
        return RS_ESTATE;
    d->kind = kind;
    d->since = since;
    memset(&d->r, 0, sizeof(d->r));
    d->r.at = RS_TIME_NONE;
    d->r.until = RS_TIME_NONE;
    d->err[0] = '\0';
    d->fail_rc = 0;
    rs_free(d->url);
    rs_free(d->gone);
    d->gone = NULL;
    d->reread_wanted = d->rereading = false;
    d->pkgs_base = 0;
    if ((d->url = rs_strdup(url)) == NULL)
        return RS_ENOMEM;
    d->r.fresh = kind == DUMP_RESOURCES && ledger_res_none(d->o.ledger);
    d->quiet = d->r.fresh;
    d->quiet_mark = ledger_total_changes(d->o.ledger);
    if ((rc = docwalk_start(d->walk, url)) != 0)
        return rc;
    d->busy = true;
    return 0;
}

int
dump_start(struct dump *d, const char *url)
{
    return start(d, url, DUMP_RESOURCES, RS_TIME_NONE);
}

int
dump_start_changes(struct dump *d, const char *url, rs_time_t since)
{
    return start(d, url, DUMP_CHANGES, since);
}
