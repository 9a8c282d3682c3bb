/*
 * dumpw.c - the Resource Dump writer. The build thread reads the catalog in
 * one read transaction on its own connection and streams each file through
 * a libzip source callback straight from disk into the package; what the
 * manifest says (length, md5, sha-256, lastmod) is what that read gave, so
 * a file changed after `at` never contradicts its manifest entry. Each
 * package's manifest is also written beside it, the same bytes, linked
 * from the dump's entry as rel="contents". The loop only starts builds,
 * joins them and publishes (meta, old files).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dumpw.h"
#include "rs_alloc.h"
#include "rs_backoff.h"
#include "rs_daemon.h"
#include "rs_hash.h"
#include "rs_write.h"
#include "zippkg.h"

#define DUMPW_DEFAULT_BYTES (UINT64_C(64) << 20)
#define DUMPW_DEFAULT_FILES 20000u
/* The first packages are smaller: 1/8, 1/4 and 1/2 of the limits, then
 * the limits (not below DUMPW_RAMP_MIN_FILES files, DUMPW_RAMP_MIN_BYTES
 * bytes, nor above the limits). A Destination that writes one package
 * while the next downloads (rssub) waits only for the first before
 * writing anything: at 20,000 files a package that was a seventh of a
 * 100,000-file baseline spent waiting. */
#define DUMPW_RAMP 3
#define DUMPW_RAMP_MIN_FILES 1000u
#define DUMPW_RAMP_MIN_BYTES (UINT64_C(4) << 20)
#define DUMPW_KEEP 2                       /* generations on disk */
#define DUMPW_PATH_MAX 4400

/* One member of the package being written. lastmod, len and h are filled
 * by the source callback as the file is read. */
struct dw_member {
    struct dw_pkg *pkg;
    char *rel;
    char *type;
    rs_time_t lastmod;
    int64_t len;
    struct rs_hashes h;
    bool missing;                /* gone when read: left out of the
                                    manifest and the package */
};

/* One package: members are read one at a time (libzip writes entries in
 * order), so one fd and one hasher serve them all. */
struct dw_pkg {
    const struct dumpw_opts *o;
    atomic_bool *stop;           /* dumpw_free: give up now */
    struct dw_member *m;         /* max_files slots */
    size_t n;
    uint64_t bytes;              /* catalogued sizes, for the split */
    int fd;
    struct rs_hasher *hasher;
    rs_time_t at;
    struct zippkg_man man;       /* made when libzip comes to it */
    char err[256];
};

struct dumpw {
    struct dumpw_opts o;
    char *dir, *state_path;
    struct dumpw_info cur;
    int64_t last_gen;            /* the highest generation ever made: the
                                    next is numbered above it even when
                                    cur was dropped */
    /* the build under way: its thread owns next and berr until done */
    pthread_t thread;
    bool running;
    atomic_bool done, stop;
    int brc;
    struct dumpw_info next;
    char berr[256];
    char err[256];
    unsigned failures;           /* failed builds in a row */
    rs_time_t retry_at;          /* the next may start then (failures > 0) */
};

/* ------------------------------------------------------------- names */

static int
dw_path(const struct dumpw *w, char *buf, size_t len, int64_t gen,
        int64_t part, const char *suffix)
{
    int n = part > 0
        ? snprintf(buf, len, "%s/resourcedump-%lld-%lld%s", w->dir,
                   (long long)gen, (long long)part, suffix)
        : snprintf(buf, len, "%s/resourcedump-%lld%s", w->dir,
                   (long long)gen, suffix);
    return n < 0 || (size_t)n >= len ? RS_ETOOBIG : 0;
}

/* "resourcedump-G.xml" (part 0), "resourcedump-G-K.zip" or its manifest
 * "resourcedump-G-K.xml" (*man): 0 with gen and part, or RS_EINVAL for
 * any other name (so a name never reaches the filesystem unless it is
 * exactly one we write). */
static int
dw_parse_name(const char *name, int64_t *gen, int64_t *part, bool *man)
{
    long long g = 0, k = 0;
    char again[96], ext[4] = "";
    int n;

    if (strncmp(name, "resourcedump-", 13) != 0 || strlen(name) > 64)
        return RS_EINVAL;
    if (sscanf(name + 13, "%lld-%lld.%3s", &g, &k, ext) == 3 && g > 0 &&
        k > 0 && (strcmp(ext, "zip") == 0 || strcmp(ext, "xml") == 0)) {
        n = snprintf(again, sizeof(again), "resourcedump-%lld-%lld.%s", g, k,
                     ext);
    } else if (sscanf(name + 13, "%lld.xml", &g) == 1 && g > 0) {
        k = 0;
        n = snprintf(again, sizeof(again), "resourcedump-%lld.xml", g);
    } else {
        return RS_EINVAL;
    }
    if (n < 0 || strcmp(again, name) != 0)
        return RS_EINVAL;
    *gen = g;
    *part = k;
    *man = k > 0 && ext[0] == 'x';
    return 0;
}

/* Remove the files of every generation but keep_a and keep_b, and any
 * other resourcedump-* name (our .tmp files, libzip's temporary copies
 * left by a crash or a stopped build). Never while a build runs. */
static void
dw_prune(struct dumpw *w, int64_t keep_a, int64_t keep_b)
{
    DIR *d = opendir(w->dir);
    struct dirent *de;
    int64_t g, k;
    bool man;

    if (d == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "resourcedump-", 13) != 0)
            continue;
        if (dw_parse_name(de->d_name, &g, &k, &man) != 0 ||
            (g != keep_a && g != keep_b))
            unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
}

/* ------------------------------------------------- members, read from disk */

static int
dw_op_open(void *ud, size_t i, char *why)
{
    struct dw_pkg *p = ud;
    struct dw_member *m = &p->m[i];
    struct stat st;

    (void)why;
    m->len = 0;
    p->fd = tree_open_file(p->o->tree, m->rel, &st);
    if (p->fd < 0) {
        /* deleted since the catalog was read: neither the manifest nor
         * the package holds it (the Change Lists say it is gone) */
        m->missing = true;
        p->fd = -1;
        return ZIPPKG_GONE;
    }
    m->missing = false;
    m->lastmod = tree_mtime_ns(&st) / 1000;   /* as the catalog's */
    return 0;
}

static ssize_t
dw_op_read(void *ud, size_t i, void *data, size_t len, char *why)
{
    struct dw_pkg *p = ud;
    struct dw_member *m = &p->m[i];
    ssize_t k;

    if (p->fd < 0)
        return 0;
    do
        k = read(p->fd, data, len);
    while (k < 0 && errno == EINTR);
    if (k < 0) {
        snprintf(why, ZIPPKG_WHY, "reading %.100s: %.140s", m->rel,
                 strerror(errno));
        return RS_EIO;
    }
    if (k > 0 && rs_hasher_update(p->hasher, data, (size_t)k) != 0)
        return RS_ENOMEM;
    m->len += k;
    return k;
}

static int
dw_op_close(void *ud, size_t i, char *why)
{
    struct dw_pkg *p = ud;

    (void)why;
    if (p->fd >= 0) {
        close(p->fd);
        p->fd = -1;
    }
    return rs_hasher_final(p->hasher, &p->m[i].h) != 0 ? RS_ENOMEM : 0;
}

static bool
dw_op_stopped(void *ud)
{
    struct dw_pkg *p = ud;
    return atomic_load(p->stop);
}

/* The manifest, from what the member reads gave. */
static int
dw_man_write(struct dw_pkg *p)
{
    const struct docs *d = p->o->docs;
    struct rs_writer *wr = rs_writer_new(zippkg_man_put, &p->man, NULL);
    struct rs_link up;
    struct rs_head h;
    char loc[DOCS_URL_MAX], path[DOCS_URL_MAX + 1];
    int rc;

    if (wr == NULL)
        return RS_ENOMEM;
    docs_head_up(d, RS_ROOT_URLSET, RS_CAP_RESOURCEDUMP_MANIFEST, &h, &up);
    h.md.at = p->at;
    h.md.completed = rs_time_now();
    rc = rs_writer_begin(wr, &h);
    for (size_t i = 0; rc == 0 && i < p->n; i++) {
        const struct dw_member *m = &p->m[i];
        struct rs_entry e;
        if (m->missing)
            continue;
        path[0] = '/';
        if ((rc = docs_resource_url(d, m->rel, loc, sizeof(loc))) != 0 ||
            (rc = tree_url_encode(m->rel, path + 1, sizeof(path) - 1)) < 0)
            break;
        rs_entry_init(&e);
        e.loc = loc;
        e.lastmod = m->lastmod;
        e.has_md = true;
        e.md.length = m->len;
        e.md.type = m->type;
        e.md.path = path;
        e.md.hash = m->h;
        rc = rs_writer_entry(wr, &e);
    }
    if (rc == 0)
        rc = rs_writer_end(wr);
    if (rc != 0)
        snprintf(p->err, sizeof(p->err), "manifest: %.240s",
                 rs_writer_errstr(wr));
    rs_writer_free(wr);
    return rc;
}

static int
dw_op_manifest(void *ud, const char **buf, size_t *len, char *why)
{
    struct dw_pkg *p = ud;
    int rc;

    p->man.len = 0;
    if ((rc = dw_man_write(p)) != 0) {
        snprintf(why, ZIPPKG_WHY, "%s", p->err);
        return rc;
    }
    *buf = p->man.buf;
    *len = p->man.len;
    return 0;
}

static const struct zippkg_ops dw_ops = {
    .open = dw_op_open,
    .read = dw_op_read,
    .close = dw_op_close,
    .manifest = dw_op_manifest,
    .stopped = dw_op_stopped,
};

/* --------------------------------------------------------- the build */

static void
dw_pkg_clear(struct dw_pkg *p)
{
    for (size_t i = 0; i < p->n; i++) {
        rs_free(p->m[i].rel);
        rs_free(p->m[i].type);
    }
    p->n = 0;
    p->bytes = 0;
    p->man.len = 0;
    p->err[0] = '\0';
}

/* Write the members gathered in p as the package at path. Files are not
 * read before zippkg_write closes the archive. */
static int
dw_pkg_write(struct dw_pkg *p, const char *path, uint64_t *size, char *err,
             size_t errsz)
{
    const char **names = rs_calloc(p->n > 0 ? p->n : 1, sizeof(*names));
    char *buf = NULL;
    size_t used = 0;
    int rc = 0;

    if (names == NULL)
        return RS_ENOMEM;
    /* the member names, percent-encoded, in one buffer */
    for (size_t i = 0; i < p->n && rc == 0; i++)
        used += 3 * strlen(p->m[i].rel) + 1;
    if ((buf = rs_malloc(used > 0 ? used : 1)) == NULL)
        rc = RS_ENOMEM;
    for (size_t i = 0, at = 0; i < p->n && rc == 0; i++) {
        int k = tree_url_encode(p->m[i].rel, buf + at, used - at);
        if (k < 0) {
            snprintf(err, errsz, "%.200s: a path too long", path);
            rc = RS_ETOOBIG;
            break;
        }
        names[i] = buf + at;
        at += strlen(buf + at) + 1;
    }
    if (rc == 0)
        rc = zippkg_write(path, names, p->n, &dw_ops, p, size, err, errsz);
    rs_free(buf);
    rs_free(names);
    return rc;
}

struct dw_doc {
    FILE *f;
};

static int
dw_doc_put(void *ud, const char *buf, size_t len)
{
    struct dw_doc *x = ud;
    return fwrite(buf, 1, len, x->f) == len ? 0 : RS_EIO;
}

/* The Resource Dump document of generation info->gen, whose packages are
 * parts 1..info->packages with sizes sizes[]. */
static int
dw_doc_write(struct dumpw *w, const struct dumpw_info *info,
             const uint64_t *sizes, char *err, size_t errsz)
{
    char tmp[DUMPW_PATH_MAX], path[DUMPW_PATH_MAX], name[96];
    char loc[DOCS_URL_MAX], man[DOCS_URL_MAX];
    struct rs_link up, contents;
    struct rs_head h;
    struct dw_doc x;
    struct rs_writer *wr;
    int rc;

    if (dw_path(w, path, sizeof(path), info->gen, 0, ".xml") != 0 ||
        dw_path(w, tmp, sizeof(tmp), info->gen, 0, ".xml.tmp") != 0)
        return RS_ETOOBIG;
    if ((x.f = fopen(tmp, "we")) == NULL) {
        snprintf(err, errsz, "%.100s: %.150s", tmp, strerror(errno));
        return RS_EIO;
    }
    if ((wr = rs_writer_new(dw_doc_put, &x, NULL)) == NULL) {
        fclose(x.f);
        unlink(tmp);
        return RS_ENOMEM;
    }
    docs_head_up(w->o.docs, RS_ROOT_URLSET, RS_CAP_RESOURCEDUMP, &h, &up);
    h.md.at = info->at;
    h.md.completed = info->completed;
    rc = rs_writer_begin(wr, &h);
    for (int64_t k = 1; rc == 0 && k <= info->packages; k++) {
        struct rs_entry e;
        snprintf(name, sizeof(name), "resourcedump-%lld-%lld.zip",
                 (long long)info->gen, (long long)k);
        if ((rc = docs_url(w->o.docs, name, loc, sizeof(loc))) != 0)
            break;
        snprintf(name, sizeof(name), "resourcedump-%lld-%lld.xml",
                 (long long)info->gen, (long long)k);
        if ((rc = docs_url(w->o.docs, name, man, sizeof(man))) != 0)
            break;
        rs_link_init(&contents);
        contents.rel = "contents";
        contents.href = man;
        contents.type = "application/xml";
        rs_entry_init(&e);
        e.loc = loc;
        e.lastmod = info->completed;
        e.has_md = true;
        e.md.type = "application/zip";
        e.md.length = (int64_t)sizes[k - 1];
        e.links = &contents;
        e.nlinks = 1;
        rc = rs_writer_entry(wr, &e);
    }
    if (rc == 0)
        rc = rs_writer_end(wr);
    if (rc != 0)
        snprintf(err, errsz, "%s: %.220s", DUMPW_DOC, rs_writer_errstr(wr));
    rs_writer_free(wr);
    if (fclose(x.f) != 0 && rc == 0) {
        snprintf(err, errsz, "%.100s: %.150s", tmp, strerror(errno));
        rc = RS_EIO;
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        snprintf(err, errsz, "%.100s: %.150s", path, strerror(errno));
        rc = RS_EIO;
    }
    if (rc != 0)
        unlink(tmp);
    return rc;
}

/* Package k's limit of lim (ramped, above). */
static uint64_t
dw_ramp(uint64_t lim, uint64_t floor, int64_t k)
{
    if (k >= DUMPW_RAMP)
        return lim;
    uint64_t v = lim >> (DUMPW_RAMP - k);
    if (floor > lim)
        floor = lim;
    return v > floor ? v : floor;
}

/* Write generation out->gen (set by the caller): every package, then the
 * document. Runs on the build thread; touches nothing of w but the
 * read-only options and the stop flag. */
static int
dw_build(struct dumpw *w, struct dumpw_info *out, char *err, size_t errsz)
{
    size_t max_files = w->o.max_files ? w->o.max_files : DUMPW_DEFAULT_FILES;
    uint64_t max_bytes = w->o.max_bytes ? w->o.max_bytes : DUMPW_DEFAULT_BYTES;
    struct dw_pkg p = { .o = &w->o, .stop = &w->stop, .fd = -1 };
    struct state *rst = NULL;
    struct state_iter *it = NULL;
    struct state_res r;
    uint64_t *sizes = NULL;
    size_t nsizes = 0;
    char path[DUMPW_PATH_MAX];
    int rc, more;

    p.at = out->at;
    out->files = out->packages = 0;
    out->bytes = 0;
    p.m = rs_calloc(max_files, sizeof(*p.m));
    p.hasher = rs_hasher_new((1u << RS_HASH_MD5) | (1u << RS_HASH_SHA256));
    if (p.m == NULL || p.hasher == NULL) {
        rc = RS_ENOMEM;
        goto out;
    }
    if ((rc = state_open(w->state_path, true, &rst, err, errsz)) != 0)
        goto out;
    if ((rc = state_begin_read(rst)) != 0 ||
        (rc = state_res_iter(rst, "", &it)) != 0) {
        snprintf(err, errsz, "state: %.240s", state_errstr(rst));
        goto out;
    }
    out->change_seq = state_change_last_seq(rst);
    for (;;) {
        more = state_res_next(it, &r);
        if (more < 0) {
            rc = more;
            snprintf(err, errsz, "state: %.240s", state_errstr(rst));
            goto out;
        }
        if (atomic_load(&w->stop)) {
            rc = RS_ECANCELED;
            snprintf(err, errsz, "stopped");
            goto out;
        }
        /* the package is full, or the catalog ended: write it */
        if (p.n > 0 &&
            (more == 0 ||
             p.n >= dw_ramp(max_files, DUMPW_RAMP_MIN_FILES, out->packages) ||
             p.bytes + (uint64_t)r.size >
                 dw_ramp(max_bytes, DUMPW_RAMP_MIN_BYTES, out->packages))) {
            uint64_t *ns = rs_realloc(sizes, (nsizes + 1) * sizeof(*ns));
            if (ns == NULL) {
                rc = RS_ENOMEM;
                goto out;
            }
            sizes = ns;
            if ((rc = dw_path(w, path, sizeof(path), out->gen, out->packages
                              + 1, ".zip")) != 0 ||
                (rc = dw_pkg_write(&p, path, &sizes[nsizes], err, errsz)) != 0)
                goto out;
            /* the manifest on its own too (rel="contents", core 11.1: for
             * the Destination's convenience, which can see what a package
             * holds without downloading it): the package's very bytes */
            if ((rc = dw_path(w, path, sizeof(path), out->gen, out->packages
                              + 1, ".xml")) != 0 ||
                (rc = zippkg_man_save(&p.man, path, err, errsz)) != 0)
                goto out;
            for (size_t i = 0; i < p.n; i++)
                out->files += p.m[i].missing ? 0 : 1;
            out->bytes += sizes[nsizes++];
            out->packages++;
            dw_pkg_clear(&p);
        }
        if (more == 0)
            break;
        struct dw_member *m = &p.m[p.n];
        *m = (struct dw_member){ .pkg = &p, .lastmod = RS_TIME_NONE };
        m->rel = rs_strdup(r.path);
        m->type = rs_strdup(r.type != NULL ? r.type
                                           : "application/octet-stream");
        p.n++;
        if (m->rel == NULL || m->type == NULL) {
            rc = RS_ENOMEM;
            goto out;
        }
        p.bytes += (uint64_t)(r.size > 0 ? r.size : 0);
    }
    state_iter_free(it);
    it = NULL;
    state_end_read(rst);
    out->completed = rs_time_now();
    rc = dw_doc_write(w, out, sizes, err, errsz);
out:
    if (p.fd >= 0)
        close(p.fd);
    if (p.m != NULL)
        dw_pkg_clear(&p);
    rs_free(p.m);
    zippkg_man_free(&p.man);
    rs_hasher_free(p.hasher);
    rs_free(sizes);
    state_iter_free(it);
    state_free(rst);
    if (rc != 0 && err[0] == '\0')
        snprintf(err, errsz, "%s", rs_strerror(rc));
    return rc;
}

static void *
dw_thread(void *arg)
{
    struct dumpw *w = arg;

    rs_thread_signals_to_loop();
    w->berr[0] = '\0';
    w->brc = dw_build(w, &w->next, w->berr, sizeof(w->berr));
    atomic_store(&w->done, true);
    return NULL;
}

/* A failed build: the next waits 1 s, doubling up to the interval. */
static void
dw_failed(struct dumpw *w)
{
    struct rs_backoff b = {
        .first_ms = 1000,
        .max_ms = w->o.interval_ms > 0 ? (uint64_t)w->o.interval_ms
                                       : DUMPW_RETRY_MAX_MS,
    };
    if (w->failures < 64)
        w->failures++;
    w->retry_at = rs_time_now() +
                  (rs_time_t)rs_backoff_base(&b, w->failures) * 1000;
}

/* After a build: make it current (or clean up after a failure). */
static int
dw_finish(struct dumpw *w, int rc)
{
    const struct dumpw_info *n = &w->next;

    if (rc != 0) {
        snprintf(w->err, sizeof(w->err), "%s", w->berr);
        dw_prune(w, w->cur.gen, w->cur.gen - 1);
        dw_failed(w);
        return rc;
    }
    if ((rc = state_begin(w->o.st)) == 0) {
        if ((rc = state_meta_set(w->o.st, "dump.gen", n->gen)) != 0 ||
            (rc = state_meta_set(w->o.st, "dump.at", n->at)) != 0 ||
            (rc = state_meta_set(w->o.st, "dump.completed",
                                 n->completed)) != 0 ||
            (rc = state_meta_set(w->o.st, "dump.seq", n->change_seq)) != 0 ||
            (rc = state_meta_set(w->o.st, "dump.files", n->files)) != 0 ||
            (rc = state_meta_set(w->o.st, "dump.packages",
                                 n->packages)) != 0 ||
            (rc = state_meta_set(w->o.st, "dump.bytes",
                                 (int64_t)n->bytes)) != 0 ||
            (rc = state_meta_set_text(w->o.st, "dump.base",
                                      docs_base(w->o.docs))) != 0)
            state_rollback(w->o.st);
        else
            rc = state_commit(w->o.st);
    }
    if (rc != 0) {
        snprintf(w->err, sizeof(w->err), "state: %.240s",
                 state_errstr(w->o.st));
        dw_prune(w, w->cur.gen, w->cur.gen - 1);
        dw_failed(w);
        return rc;
    }
    w->failures = 0;
    w->cur = *n;
    dw_prune(w, w->cur.gen, w->cur.gen - 1);
    return 1;
}

/* The next generation's number and `at`. `at` is taken here, on the
 * loop, between its transactions: every change dated before it is
 * committed, so the build's read transaction (begun later) sees it. Taken
 * on the thread, a change dated just before could commit after the read
 * began and be in neither the dump nor the Change Lists after `at`. */
static void
dw_next_init(struct dumpw *w)
{
    memset(&w->next, 0, sizeof(w->next));
    w->next.gen = (w->cur.gen > w->last_gen ? w->cur.gen : w->last_gen) + 1;
    w->next.at = rs_time_now();
}

/* ---------------------------------------------------------------- API */

struct dumpw *
dumpw_new(const struct dumpw_opts *o, const char **err)
{
    struct dumpw *w;
    int64_t v;

    if (o->max_files > DUMPW_MAX_FILES) {
        *err = "members per package: at most 50000 (a manifest's entries)";
        return NULL;
    }
    if ((w = rs_calloc(1, sizeof(*w))) == NULL) {
        *err = "out of memory";
        return NULL;
    }
    w->o = *o;
    w->dir = rs_strdup(o->dir);
    w->state_path = rs_strdup(o->state_path);
    if (w->dir == NULL || w->state_path == NULL) {
        dumpw_free(w);
        *err = "out of memory";
        return NULL;
    }
    w->o.dir = w->dir;
    w->o.state_path = w->state_path;
    atomic_init(&w->done, false);
    atomic_init(&w->stop, false);
    if (mkdir(w->dir, 0755) != 0 && errno != EEXIST) {
        dumpw_free(w);
        *err = "cannot create the dump directory";
        return NULL;
    }
    if (state_meta_get(o->st, "dump.gen", &v) == 0 && v > 0) {
        char path[DUMPW_PATH_MAX];
        w->cur.gen = w->last_gen = v;
        /* A dump made for another base URL (rssource moved to another
         * port or name) names every resource, and its packages, by URLs
         * this Source no longer serves: it is rebuilt, as is one whose
         * base is unknown (made before the base was recorded). */
        if (!state_meta_text_is(o->st, "dump.base", docs_base(o->docs)))
            w->cur.gen = 0;
        if (state_meta_get(o->st, "dump.at", &w->cur.at) != 0 ||
            state_meta_get(o->st, "dump.completed", &w->cur.completed) != 0 ||
            state_meta_get(o->st, "dump.seq", &w->cur.change_seq) != 0 ||
            state_meta_get(o->st, "dump.files", &w->cur.files) != 0 ||
            state_meta_get(o->st, "dump.packages", &w->cur.packages) != 0 ||
            state_meta_get(o->st, "dump.bytes", &v) != 0 ||
            w->cur.gen == 0 ||
            dw_path(w, path, sizeof(path), w->cur.gen, 0, ".xml") != 0 ||
            access(path, R_OK) != 0)
            memset(&w->cur, 0, sizeof(w->cur));    /* rebuilt */
        else
            w->cur.bytes = (uint64_t)v;
    }
    dw_prune(w, w->cur.gen, w->cur.gen - 1);
    return w;
}

void
dumpw_free(struct dumpw *w)
{
    if (w == NULL)
        return;
    if (w->running) {
        atomic_store(&w->stop, true);
        pthread_join(w->thread, NULL);
        dw_prune(w, w->cur.gen, w->cur.gen - 1);
    }
    rs_free(w->dir);
    rs_free(w->state_path);
    rs_free(w);
}

const struct dumpw_info *
dumpw_current(const struct dumpw *w)
{
    return &w->cur;
}

bool
dumpw_stale(struct dumpw *w)
{
    return w->cur.gen == 0 ||
           state_change_last_seq(w->o.st) > w->cur.change_seq;
}

bool
dumpw_due(struct dumpw *w, rs_time_t now)
{
    if (w->running || (w->failures > 0 && now < w->retry_at) ||
        !dumpw_stale(w))
        return false;
    return w->cur.gen == 0 ||
           now - w->cur.completed >= w->o.interval_ms * 1000;
}

rs_time_t
dumpw_retry_at(const struct dumpw *w)
{
    return w->failures > 0 ? w->retry_at : RS_TIME_NONE;
}

bool
dumpw_building(const struct dumpw *w)
{
    return w->running;
}

const char *
dumpw_errstr(const struct dumpw *w)
{
    return w->err;
}

int
dumpw_start(struct dumpw *w)
{
    if (w->running)
        return RS_ESTATE;
    dw_next_init(w);
    atomic_store(&w->done, false);
    atomic_store(&w->stop, false);
    if (pthread_create(&w->thread, NULL, dw_thread, w) != 0) {
        snprintf(w->err, sizeof(w->err), "cannot start a thread");
        dw_failed(w);
        return RS_ENOMEM;
    }
    w->running = true;
    return 0;
}

int
dumpw_poll(struct dumpw *w)
{
    if (!w->running || !atomic_load(&w->done))
        return 0;
    pthread_join(w->thread, NULL);
    w->running = false;
    return dw_finish(w, w->brc);
}

int
dumpw_build(struct dumpw *w)
{
    int rc;

    if (w->running)
        return RS_ESTATE;
    dw_next_init(w);
    w->berr[0] = '\0';
    rc = dw_finish(w, dw_build(w, &w->next, w->berr, sizeof(w->berr)));
    return rc == 1 ? 0 : rc;
}

int
dumpw_file(const struct dumpw *w, const char *name, char *path, size_t len,
           const char **ctype)
{
    int64_t gen, part;
    bool man = false;

    if (strcmp(name, DUMPW_DOC) == 0) {
        gen = w->cur.gen;
        part = 0;
    } else if (dw_parse_name(name, &gen, &part, &man) != 0) {
        return RS_ENOTFOUND;
    }
    if (gen <= 0 || (gen != w->cur.gen && gen != w->cur.gen - 1) ||
        dw_path(w, path, len, gen, part,
                part > 0 && !man ? ".zip" : ".xml") != 0 ||
        access(path, R_OK) != 0)
        return RS_ENOTFOUND;
    *ctype = part > 0 && !man ? "application/zip" : "application/xml";
    return 0;
}
