/*
 * changedump.c - the Change Dump (see changedump.h). Layers: names and
 * files, the capture (loop thread, the catalog's hot path: one pwrite of
 * bytes already read), the build of one closed list (its own thread and
 * read connection; every bitstream is hashed again from the spool and
 * must match its change's digests, so nothing half-captured or stale is
 * ever packed), and publishing (loop thread: state rows, the document,
 * spools freed, packages of dropped lists removed).
 */
#include "changedump.h"

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

#include "rs_alloc.h"
#include "rs_backoff.h"
#include "rs_daemon.h"
#include "rs_hash.h"
#include "rs_write.h"
#include "tree.h"
#include "zippkg.h"

#define CD_DEFAULT_BYTES (UINT64_C(64) << 20)
#define CD_DEFAULT_FILES 20000u
#define CD_MAX_FILES 50000u
#define CD_PATH_MAX 4400
#define CD_NAME_MAX (3 * 4096 + 32)           /* a member's name */

/* A failed build is tried again 1 s later, doubling with each failure in
 * a row up to a minute: each try reads the list's whole spool again. */
static const struct rs_backoff CD_RETRY = { .first_ms = 1000,
                                            .max_ms = 60000 };

enum cd_kind { CD_SPOOL, CD_ZIP, CD_MANIFEST };

/* One change of the list being built. off/len: its capture. */
struct cd_change {
    int64_t seq;
    rs_time_t dt, lastmod;
    enum rs_change change;
    char *path, *type;
    int64_t size;
    uint8_t md5[16], sha256[32];
    int64_t off, len;
    char *member;                /* "SEQ/percent-encoded path"; NULL for
                                    a deletion */
};

/* The build of one list: owned by the thread until done. */
struct cd_build {
    const struct changedump_opts *o;
    const char *dir;
    atomic_bool *stop;
    int64_t list;
    struct state_clist cl;
    struct cd_change *c;
    size_t n, cap;
    int fd;                      /* the list's spool */
    struct rs_hasher *hasher;
    /* the package being written: changes [first, first + count) */
    size_t first, count;
    size_t *mem;                 /* member -> change index */
    int64_t pos;                 /* bytes of the current member read */
    struct zippkg_man man;
    uint64_t *sizes;             /* per package written */
    int64_t packages;
    bool skip;                   /* the list can have no Change Dump */
    char err[256];
};

struct changedump {
    struct changedump_opts o;
    char *dir, *state_path;
    struct changedump_stats stats;
    int64_t first_list;          /* lists before it predate --dump */
    int64_t oldest_seen;         /* the oldest Change List at the last
                                    tick (spools below it are dropped) */
    /* capture (loop thread) */
    int64_t sp_list;             /* whose spool sp_fd is; 0: none */
    int sp_fd;
    int64_t sp_end;              /* its committed end */
    int64_t skip_list;           /* capture gave up on this list */
    bool cap_on, cap_bad, cap_pending;
    int64_t cap_len;
    /* the build under way */
    pthread_t thread;
    bool running;
    atomic_bool done, stop;
    int brc;
    struct cd_build b;
    rs_time_t retry_at;          /* no build starts before (failures) */
    unsigned failures;           /* failed builds in a row */
    int64_t packages;            /* listed in the published document */
    char err[256];
};

/* ------------------------------------------------------------- names */

static int
cd_path(const char *dir, char *buf, size_t len, enum cd_kind k, int64_t list,
        int64_t part)
{
    int n = k == CD_SPOOL
        ? snprintf(buf, len, "%s/spool-%lld.bin", dir, (long long)list)
        : snprintf(buf, len, "%s/changedump-%lld-%lld.%s", dir,
                   (long long)list, (long long)part,
                   k == CD_ZIP ? "zip" : "xml");
    return n < 0 || (size_t)n >= len ? RS_ETOOBIG : 0;
}

/* "spool-L.bin", "changedump-L-K.zip" or "changedump-L-K.xml": 0 with
 * kind, list, part; RS_EINVAL for any other name, so a name reaches the
 * filesystem only when it is exactly one we write. */
static int
cd_parse_name(const char *name, enum cd_kind *k, int64_t *list,
              int64_t *part)
{
    long long l = 0, p = 0;
    char ext[4] = "", again[96];
    int n;

    if (strlen(name) > 64)
        return RS_EINVAL;
    if (sscanf(name, "spool-%lld.bin", &l) == 1 && l > 0) {
        *k = CD_SPOOL;
        n = snprintf(again, sizeof(again), "spool-%lld.bin", l);
    } else if (sscanf(name, "changedump-%lld-%lld.%3s", &l, &p, ext) == 3 &&
               l > 0 && p > 0 &&
               (strcmp(ext, "zip") == 0 || strcmp(ext, "xml") == 0)) {
        *k = ext[0] == 'z' ? CD_ZIP : CD_MANIFEST;
        n = snprintf(again, sizeof(again), "changedump-%lld-%lld.%s", l, p,
                     ext);
    } else {
        return RS_EINVAL;
    }
    if (n < 0 || strcmp(again, name) != 0)
        return RS_EINVAL;
    *list = l;
    *part = p;
    return 0;
}

/* Remove list's packages and manifests, and any changedump-* name that is
 * not one we write (temporary files a crash left). */
static void
cd_remove_packages(const char *dir, int64_t list)
{
    DIR *dd = opendir(dir);
    struct dirent *de;
    enum cd_kind k;
    int64_t l, p;

    if (dd == NULL)
        return;
    while ((de = readdir(dd)) != NULL) {
        if (strncmp(de->d_name, "changedump-", 11) != 0)
            continue;
        if (cd_parse_name(de->d_name, &k, &l, &p) != 0 ||
            (k != CD_SPOOL && l == list))
            unlinkat(dirfd(dd), de->d_name, 0);
    }
    closedir(dd);
}

/* Remove list's spool; its bytes no longer count. */
static void
cd_spool_remove(struct changedump *d, int64_t list)
{
    char path[CD_PATH_MAX];
    struct stat st;

    if (cd_path(d->dir, path, sizeof(path), CD_SPOOL, list, 0) != 0 ||
        stat(path, &st) != 0)
        return;
    if (d->sp_list == list) {
        close(d->sp_fd);
        d->sp_fd = -1;
        d->sp_list = 0;
        d->sp_end = 0;
        d->cap_on = d->cap_pending = false;
    }
    if (unlink(path) != 0)
        return;
    d->stats.spool_bytes -= (uint64_t)st.st_size < d->stats.spool_bytes
                                ? (uint64_t)st.st_size
                                : d->stats.spool_bytes;
}

/* ----------------------------------------------------------- capture */

static void
cd_skip(struct changedump *d, int64_t list, const char *why)
{
    if (d->skip_list == list)
        return;
    d->skip_list = list;
    d->cap_on = d->cap_pending = false;
    cd_spool_remove(d, list);
    if (d->o.on_skip != NULL)
        d->o.on_skip(d->o.ud, list, why);
}

bool
changedump_capture_begin(struct changedump *d, int64_t list, int64_t size)
{
    char path[CD_PATH_MAX];
    struct stat st;
    uint64_t max = d->o.max_spool ? d->o.max_spool : CHANGEDUMP_DEFAULT_SPOOL;

    d->cap_on = d->cap_pending = false;
    if (list == d->skip_list || list < d->first_list)
        return false;
    if (list != d->sp_list) {
        if (d->sp_fd >= 0)
            close(d->sp_fd);
        d->sp_list = 0;
        if (cd_path(d->dir, path, sizeof(path), CD_SPOOL, list, 0) != 0 ||
            (d->sp_fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC,
                             0644)) < 0) {
            d->sp_fd = -1;
            cd_skip(d, list, strerror(errno));
            return false;
        }
        if (fstat(d->sp_fd, &st) != 0) {
            cd_skip(d, list, strerror(errno));
            return false;
        }
        d->sp_list = list;
        d->sp_end = st.st_size;
    }
    if (size < 0 || d->stats.spool_bytes + (uint64_t)size > max) {
        cd_skip(d, list, "the capture would pass --changedump-max-bytes");
        return false;
    }
    d->cap_on = true;
    d->cap_bad = false;
    d->cap_len = 0;
    return true;
}

void
changedump_capture_write(struct changedump *d, const void *buf, size_t len)
{
    uint64_t max = d->o.max_spool ? d->o.max_spool : CHANGEDUMP_DEFAULT_SPOOL;
    const char *p = buf;

    if (!d->cap_on || d->cap_bad)
        return;
    /* grown since its stat: the read will be retried (RS_EAGAIN) */
    if (d->stats.spool_bytes + (uint64_t)d->cap_len + len > max) {
        d->cap_bad = true;
        return;
    }
    while (len > 0) {
        ssize_t k = pwrite(d->sp_fd, p, len, d->sp_end + d->cap_len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            cd_skip(d, d->sp_list, k < 0 ? strerror(errno) : "short write");
            return;
        }
        p += k;
        len -= (size_t)k;
        d->cap_len += k;
    }
}

bool
changedump_capture_end(struct changedump *d, bool ok, int64_t *list,
                       int64_t *off, int64_t *len)
{
    if (!d->cap_on)
        return false;
    d->cap_on = false;
    if (!ok || d->cap_bad)
        return false;
    d->cap_pending = true;
    *list = d->sp_list;
    *off = d->sp_end;
    *len = d->cap_len;
    return true;
}

void
changedump_capture_commit(struct changedump *d)
{
    if (!d->cap_pending)
        return;
    d->cap_pending = false;
    d->sp_end += d->cap_len;
    d->stats.spool_bytes += (uint64_t)d->cap_len;
    d->stats.captured++;
    d->stats.captured_bytes += (uint64_t)d->cap_len;
}

/* ------------------------------------------- the build: reading a list */

static void
cd_build_clear(struct cd_build *b)
{
    for (size_t i = 0; i < b->n; i++) {
        rs_free(b->c[i].path);
        rs_free(b->c[i].type);
        rs_free(b->c[i].member);
    }
    rs_free(b->c);
    rs_free(b->mem);
    zippkg_man_free(&b->man);
    rs_free(b->sizes);
    rs_hasher_free(b->hasher);
    if (b->fd >= 0)
        close(b->fd);
    memset(b, 0, sizeof(*b));
    b->fd = -1;
}

static int
cd_incomplete(struct cd_build *b, int64_t seq, const char *what)
{
    b->skip = true;
    snprintf(b->err, sizeof(b->err), "change %lld: %s", (long long)seq,
             what);
    return RS_ENOTFOUND;
}

/* The list's changes, each created/updated one with its capture. A change
 * without one (captured before --dump, over the cap, a spool lost) leaves
 * the list without a Change Dump: a package that missed a change would
 * tell a Destination the list's period is covered when it is not. */
static int
cd_load(struct cd_build *b, struct state *rst)
{
    struct state_iter *it = NULL;
    struct state_change sc;
    char enc[CD_NAME_MAX];
    int rc, step;

    if ((rc = state_clist_get(rst, b->list, &b->cl)) != 0) {
        snprintf(b->err, sizeof(b->err), "Change List %lld: %s",
                 (long long)b->list, rs_strerror(rc));
        return rc;
    }
    if ((rc = state_change_iter(rst, b->list, 0, 0, &it)) != 0)
        return rc;
    while ((step = state_change_next(it, &sc)) == 1) {
        if (b->n == b->cap) {
            size_t cap = b->cap ? 2 * b->cap : 256;
            struct cd_change *n = rs_realloc(b->c, cap * sizeof(*n));
            if (n == NULL) {
                rc = RS_ENOMEM;
                goto out;
            }
            b->c = n;
            b->cap = cap;
        }
        struct cd_change *c = &b->c[b->n];
        memset(c, 0, sizeof(*c));
        b->n++;
        c->seq = sc.seq;
        c->dt = sc.dt;
        c->lastmod = sc.lastmod;
        c->change = sc.change;
        c->size = sc.size;
        c->off = c->len = -1;
        c->path = rs_strdup(sc.path);
        c->type = sc.type != NULL ? rs_strdup(sc.type) : NULL;
        if (c->path == NULL || (sc.type != NULL && c->type == NULL)) {
            rc = RS_ENOMEM;
            goto out;
        }
        if (sc.change == RS_CHANGE_DELETED)
            continue;
        if (!sc.hashed) {
            rc = cd_incomplete(b, sc.seq, "no digests");
            goto out;
        }
        memcpy(c->md5, sc.md5, 16);
        memcpy(c->sha256, sc.sha256, 32);
        rc = state_spool_get(rst, sc.seq, &c->off, &c->len);
        if (rc == RS_ENOTFOUND) {
            rc = cd_incomplete(b, sc.seq, "not captured");
            goto out;
        }
        if (rc != 0)
            goto out;
        if (c->len != c->size) {
            rc = cd_incomplete(b, sc.seq,
                               "its capture is not its length");
            goto out;
        }
        if (tree_url_encode(c->path, enc, sizeof(enc)) < 0) {
            rc = RS_ETOOBIG;
            goto out;
        }
        size_t ml = strlen(enc) + 24;
        if ((c->member = rs_malloc(ml)) == NULL) {
            rc = RS_ENOMEM;
            goto out;
        }
        snprintf(c->member, ml, "%lld/%s", (long long)c->seq, enc);
    }
    rc = step < 0 ? step : 0;
out:
    if (rc != 0 && !b->skip && b->err[0] == '\0')
        snprintf(b->err, sizeof(b->err), "state: %.240s", state_errstr(rst));
    state_iter_free(it);
    return rc;
}

/* ------------------------------------- the build: package members */

static int
cd_op_open(void *ud, size_t i, char *why)
{
    struct cd_build *b = ud;
    (void)i;
    (void)why;
    b->pos = 0;
    return 0;
}

static ssize_t
cd_op_read(void *ud, size_t i, void *buf, size_t len, char *why)
{
    struct cd_build *b = ud;
    const struct cd_change *c = &b->c[b->mem[i]];
    size_t want = (uint64_t)(c->len - b->pos) < len ? (size_t)(c->len - b->pos)
                                                    : len;
    ssize_t k;

    if (want == 0)
        return 0;
    do
        k = pread(b->fd, buf, want, c->off + b->pos);
    while (k < 0 && errno == EINTR);
    if (k < 0) {
        snprintf(why, ZIPPKG_WHY, "spool of list %lld: %.180s",
                 (long long)b->list, strerror(errno));
        return RS_EIO;
    }
    if (k == 0) {
        b->skip = true;
        snprintf(why, ZIPPKG_WHY, "change %lld: the spool ends before its "
                 "capture", (long long)c->seq);
        return RS_EINVALID;
    }
    if (rs_hasher_update(b->hasher, buf, (size_t)k) != 0)
        return RS_ENOMEM;
    b->pos += k;
    return k;
}

static int
cd_op_close(void *ud, size_t i, char *why)
{
    struct cd_build *b = ud;
    const struct cd_change *c = &b->c[b->mem[i]];
    struct rs_hashes h;
    const struct rs_digest *md5, *sha;

    if (rs_hasher_final(b->hasher, &h) != 0)
        return RS_ENOMEM;
    if (b->pos != c->len)           /* libzip gave up early: an error */
        return 0;
    md5 = rs_hashes_find(&h, RS_HASH_MD5);
    sha = rs_hashes_find(&h, RS_HASH_SHA256);
    if (md5 == NULL || sha == NULL || md5->len != 16 || sha->len != 32 ||
        memcmp(md5->bytes, c->md5, 16) != 0 ||
        memcmp(sha->bytes, c->sha256, 32) != 0) {
        /* the spool is not what was hashed (a crash lost its tail) */
        b->skip = true;
        snprintf(why, ZIPPKG_WHY, "change %lld: the captured bytes do not "
                 "match its digests", (long long)c->seq);
        return RS_EINVALID;
    }
    return 0;
}

static bool
cd_op_stopped(void *ud)
{
    struct cd_build *b = ud;
    return atomic_load(b->stop);
}

/* The Change Dump Manifest of the package: every change of its span, in
 * the list's order, a deletion without a path (it has no bitstream). */
static int
cd_op_manifest(void *ud, const char **buf, size_t *len, char *why)
{
    struct cd_build *b = ud;
    const struct docs *d = b->o->docs;
    struct rs_writer *wr = rs_writer_new(zippkg_man_put, &b->man, NULL);
    struct rs_link up;
    struct rs_head h;
    char *loc = rs_malloc(DOCS_URL_MAX), path[CD_NAME_MAX + 1];
    int rc;

    b->man.len = 0;
    if (wr == NULL || loc == NULL) {
        rs_writer_free(wr);
        rs_free(loc);
        return RS_ENOMEM;
    }
    docs_head_up(d, RS_ROOT_URLSET, RS_CAP_CHANGEDUMP_MANIFEST, &h, &up);
    h.md.from = b->cl.from;
    h.md.until = b->cl.until;
    rc = rs_writer_begin(wr, &h);
    for (size_t i = b->first; rc == 0 && i < b->first + b->count; i++) {
        const struct cd_change *c = &b->c[i];
        struct state_change sc = {
            .seq = c->seq, .dt = c->dt, .list = b->list, .path = c->path,
            .change = c->change, .size = c->size,
            .hashed = c->change != RS_CHANGE_DELETED, .type = c->type,
            .lastmod = c->lastmod,
        };
        struct rs_entry e;
        memcpy(sc.md5, c->md5, 16);
        memcpy(sc.sha256, c->sha256, 32);
        if ((rc = docs_change_entry(d, &sc, &e, loc)) != 0)
            break;
        if (c->member != NULL) {
            snprintf(path, sizeof(path), "/%s", c->member);
            e.md.path = path;
        }
        rc = rs_writer_entry(wr, &e);
    }
    if (rc == 0)
        rc = rs_writer_end(wr);
    if (rc != 0)
        snprintf(why, ZIPPKG_WHY, "manifest: %.200s", rs_writer_errstr(wr));
    rs_writer_free(wr);
    rs_free(loc);
    *buf = b->man.buf;
    *len = b->man.len;
    return rc;
}

static const struct zippkg_ops cd_ops = {
    .open = cd_op_open,
    .read = cd_op_read,
    .close = cd_op_close,
    .manifest = cd_op_manifest,
    .stopped = cd_op_stopped,
};

/* Package part: changes [first, first + count). */
static int
cd_pkg_write(struct cd_build *b, int64_t part)
{
    char path[CD_PATH_MAX];
    const char **names = rs_calloc(b->count > 0 ? b->count : 1,
                                   sizeof(*names));
    uint64_t *ns = rs_realloc(b->sizes, (size_t)(part) * sizeof(*ns));
    size_t nm = 0;
    int rc;

    if (ns != NULL)
        b->sizes = ns;
    if (names == NULL || ns == NULL) {
        rs_free(names);
        return RS_ENOMEM;
    }
    for (size_t i = b->first; i < b->first + b->count; i++) {
        if (b->c[i].member == NULL)
            continue;
        b->mem[nm] = i;
        names[nm++] = b->c[i].member;
    }
    rc = cd_path(b->dir, path, sizeof(path), CD_ZIP, b->list, part);
    if (rc == 0)
        rc = zippkg_write(path, names, nm, &cd_ops, b, &b->sizes[part - 1],
                          b->err, sizeof(b->err));
    rs_free(names);
    /* the manifest, served on its own (rel="contents") */
    if (rc == 0 &&
        (rc = cd_path(b->dir, path, sizeof(path), CD_MANIFEST, b->list,
                      part)) == 0)
        rc = zippkg_man_save(&b->man, path, b->err, sizeof(b->err));
    return rc;
}

/* Build every package of b->list. On the thread: touches nothing but b,
 * the read-only options and the stop flag. */
static int
cd_build(struct cd_build *b, const char *state_path)
{
    size_t max_files = b->o->max_files ? b->o->max_files : CD_DEFAULT_FILES;
    uint64_t max_bytes = b->o->max_bytes ? b->o->max_bytes : CD_DEFAULT_BYTES;
    char path[CD_PATH_MAX];
    struct state *rst = NULL;
    int rc;

    if (max_files > CD_MAX_FILES)
        max_files = CD_MAX_FILES;
    b->hasher = rs_hasher_new((1u << RS_HASH_MD5) | (1u << RS_HASH_SHA256));
    if (b->hasher == NULL)
        return RS_ENOMEM;
    if ((rc = state_open(state_path, true, &rst, b->err, sizeof(b->err))) != 0)
        return rc;
    if ((rc = state_begin_read(rst)) == 0) {
        rc = cd_load(b, rst);
        state_end_read(rst);
    } else {
        snprintf(b->err, sizeof(b->err), "state: %.240s", state_errstr(rst));
    }
    state_free(rst);
    if (rc != 0)
        return rc;
    if (b->n == 0) {
        b->skip = true;
        snprintf(b->err, sizeof(b->err), "no changes");
        return RS_ENOTFOUND;
    }
    if ((b->mem = rs_calloc(max_files, sizeof(*b->mem))) == NULL)
        return RS_ENOMEM;
    if (cd_path(b->dir, path, sizeof(path), CD_SPOOL, b->list, 0) != 0)
        return RS_ETOOBIG;
    b->fd = open(path, O_RDONLY | O_CLOEXEC);
    for (size_t i = 0; i < b->n; i++)
        if (b->c[i].member != NULL && b->fd < 0)
            return cd_incomplete(b, b->c[i].seq,
                                 "its list's spool is gone");
    /* Packages in the list's order: at most max_files entries and
     * max_bytes of bitstreams each (a larger one goes alone). */
    for (size_t first = 0; first < b->n;) {
        uint64_t bytes = 0;
        size_t k = 0;
        while (first + k < b->n && k < max_files) {
            const struct cd_change *c = &b->c[first + k];
            uint64_t len = c->member != NULL ? (uint64_t)c->len : 0;
            if (k > 0 && len > 0 && bytes + len > max_bytes)
                break;
            bytes += len;
            k++;
        }
        b->first = first;
        b->count = k;
        if ((rc = cd_pkg_write(b, b->packages + 1)) != 0)
            return rc;
        b->packages++;
        first += k;
    }
    return 0;
}

static void *
cd_thread(void *arg)
{
    struct changedump *d = arg;

    rs_thread_signals_to_loop();
    d->brc = cd_build(&d->b, d->state_path);
    atomic_store(&d->done, true);
    return NULL;
}

/* ---------------------------------------------------------- publishing */

struct cd_doc {
    FILE *f;
};

static int
cd_doc_put(void *ud, const char *buf, size_t len)
{
    struct cd_doc *x = ud;
    return fwrite(buf, 1, len, x->f) == len ? 0 : RS_EIO;
}

struct cd_row {
    int64_t list, part, length;
    rs_time_t from, until;
};

/* The packages to list: cdump rows of lists that still exist, in order. */
static int
cd_rows(struct changedump *d, struct cd_row **out, size_t *n)
{
    struct state_iter *it = NULL;
    struct state_clist cl = { 0 };
    struct cd_row *rows = NULL;
    size_t cap = 0;
    int64_t list, part, length;
    int rc = 0, step, g = 0;

    *n = 0;
    if ((rc = state_cdump_iter(d->o.st, &it)) != 0)
        return rc;
    while ((step = state_cdump_next(it, &list, &part, &length)) == 1) {
        if (part <= 0)
            continue;
        if (list != cl.num) {
            cl.num = list;
            g = state_clist_get(d->o.st, list, &cl);
            cl.num = list;
            if (g != 0 && g != RS_ENOTFOUND) {
                rc = g;
                break;
            }
        }
        if (g == RS_ENOTFOUND)           /* dropped: pruned soon */
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            struct cd_row *r = rs_realloc(rows, cap * sizeof(*r));
            if (r == NULL) {
                rc = RS_ENOMEM;
                break;
            }
            rows = r;
        }
        rows[(*n)++] = (struct cd_row){ list, part, length, cl.from,
                                        cl.until };
    }
    if (rc == 0 && step < 0)
        rc = step;
    state_iter_free(it);
    if (rc != 0) {
        rs_free(rows);
        *n = 0;
        rows = NULL;
    }
    *out = rows;
    return rc;
}

/* changedump.xml from the cdump rows: one <url> per package, forward
 * chronological (by list, then part), the newest RS_MAX_ENTRIES. Removed
 * when there is none. On the loop: the document is small. */
static int
cd_doc_write(struct changedump *d)
{
    char path[CD_PATH_MAX], tmp[CD_PATH_MAX + 8], name[96];
    char *loc = NULL, *man = NULL;
    struct rs_writer *wr = NULL;
    struct rs_link links[2];
    struct rs_head h;
    struct cd_doc x = { NULL };
    struct cd_row *rows = NULL;
    size_t n = 0, skip;
    int rc;

    snprintf(path, sizeof(path), "%s/%s", d->dir, CHANGEDUMP_DOC);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    if ((rc = cd_rows(d, &rows, &n)) != 0) {
        snprintf(d->err, sizeof(d->err), "state: %.240s",
                 state_errstr(d->o.st));
        return rc;
    }
    if (n == 0) {
        unlink(path);
        d->packages = 0;
        return 0;
    }
    skip = n > RS_MAX_ENTRIES ? n - RS_MAX_ENTRIES : 0;
    loc = rs_malloc(DOCS_URL_MAX);
    man = rs_malloc(DOCS_URL_MAX);
    if (loc == NULL || man == NULL) {
        rc = RS_ENOMEM;
        goto out;
    }
    if ((x.f = fopen(tmp, "we")) == NULL) {
        rc = RS_EIO;
        goto out;
    }
    if ((wr = rs_writer_new(cd_doc_put, &x, NULL)) == NULL) {
        rc = RS_ENOMEM;
        goto out;
    }
    rs_link_init(&links[0]);
    links[0].rel = "up";
    links[0].href = docs_caplist_url(d->o.docs);
    rs_head_init(&h);
    h.root = RS_ROOT_URLSET;
    h.has_md = true;
    h.md.capability = RS_CAP_CHANGEDUMP;
    h.md.from = rows[skip].from;
    h.md.until = rows[n - 1].until;
    h.links = links;
    h.nlinks = 1;
    rc = rs_writer_begin(wr, &h);
    for (size_t i = skip; rc == 0 && i < n; i++) {
        const struct cd_row *r = &rows[i];
        struct rs_entry e;
        snprintf(name, sizeof(name), "changedump-%lld-%lld.zip",
                 (long long)r->list, (long long)r->part);
        if ((rc = docs_url(d->o.docs, name, loc, DOCS_URL_MAX)) != 0)
            break;
        snprintf(name, sizeof(name), "changedump-%lld-%lld.xml",
                 (long long)r->list, (long long)r->part);
        if ((rc = docs_url(d->o.docs, name, man, DOCS_URL_MAX)) != 0)
            break;
        rs_link_init(&links[1]);
        links[1].rel = "contents";
        links[1].href = man;
        links[1].type = "application/xml";
        rs_entry_init(&e);
        e.loc = loc;
        e.lastmod = r->until;
        e.has_md = true;
        e.md.type = "application/zip";
        e.md.length = r->length;
        e.md.from = r->from;
        e.md.until = r->until;
        e.links = &links[1];
        e.nlinks = 1;
        rc = rs_writer_entry(wr, &e);
    }
    if (rc == 0)
        rc = rs_writer_end(wr);
    if (rc != 0)
        snprintf(d->err, sizeof(d->err), "%s: %.200s", CHANGEDUMP_DOC,
                 rs_writer_errstr(wr));
out:
    rs_writer_free(wr);
    rs_free(loc);
    rs_free(man);
    rs_free(rows);
    if (x.f != NULL && fclose(x.f) != 0 && rc == 0)
        rc = RS_EIO;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = RS_EIO;
    if (rc != 0) {
        unlink(tmp);
        if (d->err[0] == '\0')
            snprintf(d->err, sizeof(d->err), "%s: %s", CHANGEDUMP_DOC,
                     rs_strerror(rc));
        return rc;
    }
    d->packages = (int64_t)(n - skip);
    return 0;
}

static void
cd_failed(struct changedump *d)
{
    if (d->failures < 64)
        d->failures++;
    d->retry_at = rs_time_now() +
                  (rs_time_t)rs_backoff_base(&CD_RETRY, d->failures) * 1000;
}

/* After a build: record its packages (or that the list has none), free
 * its spool, publish the document. */
static int
cd_finish(struct changedump *d, int rc)
{
    struct cd_build *b = &d->b;
    int64_t list = b->list;
    bool skip = rc != 0 && b->skip;

    if (rc != 0 && !skip) {
        snprintf(d->err, sizeof(d->err), "Change List %lld: %.200s",
                 (long long)list, b->err[0] != '\0' ? b->err
                                                    : rs_strerror(rc));
        cd_remove_packages(d->dir, list);
        cd_failed(d);
        cd_build_clear(b);
        return rc;
    }
    if (skip) {
        snprintf(d->err, sizeof(d->err), "Change List %lld: %.200s",
                 (long long)list, b->err);
        cd_remove_packages(d->dir, list);
    }
    if ((rc = state_begin(d->o.st)) == 0) {
        if (skip)
            rc = state_cdump_add(d->o.st, list, 0, -1);
        for (int64_t k = 1; rc == 0 && !skip && k <= b->packages; k++)
            rc = state_cdump_add(d->o.st, list, k, (int64_t)b->sizes[k - 1]);
        /* the framework topic hears of the new packages (the document is
         * written after this commit, before the push can announce it:
         * both happen on this thread, the push on a later loop turn) */
        if (rc == 0 && !skip) {
            struct state_fw f = {
                .dt = rs_time_now(),
                .name = CHANGEDUMP_DOC,
                .cap = RS_CAP_CHANGEDUMP,
                .change = d->packages > 0 ? RS_CHANGE_UPDATED
                                          : RS_CHANGE_CREATED,
            };
            rc = state_fw_add(d->o.st, &f);
        }
        if (rc == 0)
            rc = state_spool_drop(d->o.st, list);
        if (rc == 0)
            rc = state_commit(d->o.st);
        else
            state_rollback(d->o.st);
    }
    cd_build_clear(b);
    if (rc != 0) {
        snprintf(d->err, sizeof(d->err), "state: %.240s",
                 state_errstr(d->o.st));
        cd_remove_packages(d->dir, list);
        cd_failed(d);
        return rc;
    }
    d->failures = 0;
    cd_spool_remove(d, list);
    if (skip) {
        d->stats.lists_skipped++;
        return CHANGEDUMP_SKIPPED;
    }
    d->stats.lists_built++;
    if ((rc = cd_doc_write(d)) != 0)
        return rc;
    return CHANGEDUMP_PUBLISHED;
}

/* Packages of lists the retention dropped, and spools of lists that are
 * gone before they were built. */
static int
cd_prune(struct changedump *d)
{
    struct state_iter *it;
    struct state_clist oldest;
    int64_t list = 0, after = 0;
    bool changed = false;
    int rc;

    while ((rc = state_cdump_orphan(d->o.st, after, &list)) == 0) {
        after = list;
        if (d->running && d->b.list == list)
            continue;
        cd_remove_packages(d->dir, list);
        if ((rc = state_cdump_drop(d->o.st, list)) != 0)
            return rc;
        changed = true;
    }
    if (rc != RS_ENOTFOUND)
        return rc;
    if ((rc = state_clist_iter(d->o.st, &it)) != 0)
        return rc;
    rc = state_clist_next(it, &oldest);
    state_iter_free(it);
    if (rc == 1 && oldest.num != d->oldest_seen) {
        int64_t from = d->oldest_seen > d->first_list ? d->oldest_seen
                                                       : d->first_list;
        for (int64_t l = from; l < oldest.num; l++)
            if (!(d->running && d->b.list == l))
                cd_spool_remove(d, l);
        d->oldest_seen = oldest.num;
    }
    return changed ? cd_doc_write(d) : 0;
}

static void
cd_build_init(struct changedump *d, int64_t list)
{
    memset(&d->b, 0, sizeof(d->b));
    d->b.o = &d->o;
    d->b.dir = d->dir;
    d->b.stop = &d->stop;
    d->b.list = list;
    d->b.fd = -1;
}

/* The next list to build: the oldest closed one without cdump rows,
 * from the first list --dump saw open. */
static int
cd_next(struct changedump *d, int64_t *list)
{
    return state_cdump_pending(d->o.st, d->first_list - 1, list);
}

/* ---------------------------------------------------------------- API */

/*
 * Packages made for another base URL (rssource moved to another port or
 * name) name every resource by URLs this Source no longer serves, and
 * their bitstreams went with their spools: those lists keep no Change
 * Dump (part 0), their packages go, and a Destination reads their Change
 * Lists instead. So do those of a state made before the base was
 * recorded. Lists still to build are built for the base of now. 0, or a
 * state error.
 */
static int
cd_rebase(struct changedump *d)
{
    struct state_iter *it;
    int64_t l, p, len, *lists = NULL;
    size_t n = 0, cap = 0;
    int rc;

    if (state_meta_text_is(d->o.st, "cdump.base", docs_base(d->o.docs)))
        return 0;
    if ((rc = state_cdump_iter(d->o.st, &it)) != 0)
        return rc;
    while ((rc = state_cdump_next(it, &l, &p, &len)) == 1) {
        if (p < 1 || (n > 0 && lists[n - 1] == l))
            continue;
        if (n == cap) {
            int64_t *nl = rs_realloc(lists, (cap = cap ? 2 * cap : 16) *
                                                sizeof(*nl));
            if (nl == NULL) {
                rc = RS_ENOMEM;
                break;
            }
            lists = nl;
        }
        lists[n++] = l;
    }
    state_iter_free(it);
    if (rc < 0) {
        rs_free(lists);
        return rc;
    }
    rc = state_begin(d->o.st);
    for (size_t i = 0; i < n && rc == 0; i++)
        if ((rc = state_cdump_drop(d->o.st, lists[i])) == 0)
            rc = state_cdump_add(d->o.st, lists[i], 0, -1);
    if (rc == 0)
        rc = state_meta_set_text(d->o.st, "cdump.base",
                                 docs_base(d->o.docs));
    if (rc == 0)
        rc = state_commit(d->o.st);
    else
        state_rollback(d->o.st);
    for (size_t i = 0; i < n && rc == 0; i++)
        cd_remove_packages(d->dir, lists[i]);
    rs_free(lists);
    return rc;
}

/* Every cdump row's (list, part), read once for the start-up clean-up
 * (in the state's order: by list, then part), rather than the whole table
 * again for each file: a long retention keeps thousands of packages. */
struct cd_key {
    int64_t list, part;
};

static int
cd_keys_load(struct changedump *d, struct cd_key **out, size_t *n)
{
    struct state_iter *it;
    struct cd_key *k = NULL;
    size_t cap = 0;
    int64_t l, p, len;
    int rc;

    *out = NULL;
    *n = 0;
    if ((rc = state_cdump_iter(d->o.st, &it)) != 0)
        return rc;
    while ((rc = state_cdump_next(it, &l, &p, &len)) == 1) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            struct cd_key *nk = rs_realloc(k, cap * sizeof(*nk));
            if (nk == NULL) {
                rc = RS_ENOMEM;
                break;
            }
            k = nk;
        }
        k[(*n)++] = (struct cd_key){ l, p };
    }
    state_iter_free(it);
    if (rc < 0) {
        rs_free(k);
        *n = 0;
        return rc;
    }
    *out = k;
    return 0;
}

/* Whether keys hold a row of list (part < 0), or of list and part. */
static bool
cd_keys_has(const struct cd_key *k, size_t n, int64_t list, int64_t part)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {                 /* the first row of list or after */
        size_t mid = lo + (hi - lo) / 2;
        if (k[mid].list < list)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (; lo < n && k[lo].list == list; lo++)
        if (part < 0 || k[lo].part == part)
            return true;
    return false;
}

struct changedump *
changedump_new(const struct changedump_opts *o, const char **err)
{
    struct changedump *d;
    struct state_clist cl;
    DIR *dd;
    struct dirent *de;
    enum cd_kind k;
    int64_t l, p;

    if ((d = rs_calloc(1, sizeof(*d))) == NULL) {
        *err = "out of memory";
        return NULL;
    }
    d->o = *o;
    d->sp_fd = -1;
    d->b.fd = -1;
    d->dir = rs_strdup(o->dir);
    d->state_path = rs_strdup(o->state_path);
    if (d->dir == NULL || d->state_path == NULL) {
        changedump_free(d);
        *err = "out of memory";
        return NULL;
    }
    d->o.dir = d->dir;
    d->o.state_path = d->state_path;
    atomic_init(&d->done, false);
    atomic_init(&d->stop, false);
    if (mkdir(d->dir, 0755) != 0 && errno != EEXIST) {
        changedump_free(d);
        *err = "cannot create the dump directory";
        return NULL;
    }
    /* The first list --dump saw: those before it were never captured. */
    if (state_meta_get(o->st, "cdump.first", &d->first_list) != 0) {
        if (state_clist_current(o->st, &cl) != 0 ||
            state_meta_set(o->st, "cdump.first", cl.num) != 0) {
            changedump_free(d);
            *err = "state: cannot record the first captured Change List";
            return NULL;
        }
        d->first_list = cl.num;
    }
    if (cd_rebase(d) != 0) {
        changedump_free(d);
        *err = "state: cannot drop the Change Dumps of another base URL";
        return NULL;
    }
    /* Spools of lists still to build (or open) stay; the rest goes, as
     * do packages no row names (a build cut short, a part 0 list). */
    struct cd_key *keys = NULL;
    size_t nkeys = 0;
    bool keys_ok = cd_keys_load(d, &keys, &nkeys) == 0;
    if (keys_ok && (dd = opendir(d->dir)) != NULL) {
        while ((de = readdir(dd)) != NULL) {
            struct stat st;
            if (cd_parse_name(de->d_name, &k, &l, &p) != 0) {
                if (strncmp(de->d_name, "changedump-", 11) == 0 ||
                    strncmp(de->d_name, "spool-", 6) == 0)
                    unlinkat(dirfd(dd), de->d_name, 0);
                continue;
            }
            bool keep = k == CD_SPOOL
                ? !cd_keys_has(keys, nkeys, l, -1) &&
                      state_clist_get(o->st, l, &cl) == 0
                : p >= 1 && cd_keys_has(keys, nkeys, l, p);
            if (!keep)
                unlinkat(dirfd(dd), de->d_name, 0);
            else if (k == CD_SPOOL &&
                     fstatat(dirfd(dd), de->d_name, &st, 0) == 0)
                d->stats.spool_bytes += (uint64_t)st.st_size;
        }
        closedir(dd);
    }
    rs_free(keys);
    if (cd_doc_write(d) != 0) {
        changedump_free(d);
        *err = "cannot write changedump.xml";
        return NULL;
    }
    return d;
}

void
changedump_free(struct changedump *d)
{
    if (d == NULL)
        return;
    if (d->running) {
        atomic_store(&d->stop, true);
        pthread_join(d->thread, NULL);
        cd_remove_packages(d->dir, d->b.list);
    }
    cd_build_clear(&d->b);
    if (d->sp_fd >= 0)
        close(d->sp_fd);
    rs_free(d->dir);
    rs_free(d->state_path);
    rs_free(d);
}

int
changedump_tick(struct changedump *d)
{
    int64_t list;
    int rc = 0, prc;

    if (d->running && atomic_load(&d->done)) {
        pthread_join(d->thread, NULL);
        d->running = false;
        rc = cd_finish(d, d->brc);
    }
    if ((prc = cd_prune(d)) != 0 && rc == 0) {
        snprintf(d->err, sizeof(d->err), "prune: %.200s",
                 state_errstr(d->o.st));
        rc = prc;
    }
    if (d->running || rs_time_now() < d->retry_at)
        return rc;
    if (cd_next(d, &list) != 0)
        return rc;
    cd_build_init(d, list);
    atomic_store(&d->done, false);
    atomic_store(&d->stop, false);
    if (pthread_create(&d->thread, NULL, cd_thread, d) != 0) {
        snprintf(d->err, sizeof(d->err), "cannot start a thread");
        cd_failed(d);
        return rc != 0 ? rc : RS_ENOMEM;
    }
    d->running = true;
    return rc;
}

int
changedump_build_all(struct changedump *d)
{
    int64_t list;
    int rc;

    if (d->running)
        return RS_ESTATE;
    if ((rc = cd_prune(d)) != 0)
        return rc;
    while (cd_next(d, &list) == 0) {
        cd_build_init(d, list);
        rc = cd_finish(d, cd_build(&d->b, d->state_path));
        if (rc < 0)
            return rc;
    }
    return 0;
}

rs_time_t
changedump_retry_at(const struct changedump *d)
{
    return d->failures > 0 ? d->retry_at : RS_TIME_NONE;
}

bool
changedump_building(const struct changedump *d)
{
    return d->running;
}

const char *
changedump_errstr(const struct changedump *d)
{
    return d->err;
}

const struct changedump_stats *
changedump_stats(const struct changedump *d)
{
    return &d->stats;
}

int64_t
changedump_packages(const struct changedump *d)
{
    return d->packages;
}

int
changedump_file(const struct changedump *d, const char *name, char *path,
                size_t len, const char **ctype)
{
    enum cd_kind k;
    int64_t l, p;
    int n;

    if (strcmp(name, CHANGEDUMP_DOC) == 0) {
        n = snprintf(path, len, "%s/%s", d->dir, CHANGEDUMP_DOC);
        k = CD_MANIFEST;
    } else if (cd_parse_name(name, &k, &l, &p) != 0 || k == CD_SPOOL ||
               (d->running && d->b.list == l)) {
        return RS_ENOTFOUND;
    } else {
        n = cd_path(d->dir, path, len, k, l, p) == 0 ? 0 : -1;
    }
    if (n < 0 || (size_t)n >= len || access(path, R_OK) != 0)
        return RS_ENOTFOUND;
    *ctype = k == CD_ZIP ? "application/zip" : "application/xml";
    return 0;
}
