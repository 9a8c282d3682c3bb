/*
 * dumpzip.c - one Resource Dump / Change Dump package (see dumpzip.h).
 * Layers: messages and libzip errors, a string pool that keeps the manifest
 * alive, the verifying member reader, the manifest (parse, copy, duplicate
 * checks), and the package (open, limits, close).
 */
#include "dumpzip.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "rs_alloc.h"
#include "rs_hash.h"
#include "rs_parse.h"
#include "uriset.h"

#define DZ_MSG_MAX 256
#define DZ_NAME_SHOWN 120             /* bytes of a member name in messages */
#define DZ_CHUNK (64u * 1024u)        /* manifest read size */
#define DZ_POOL_CHUNK (64u * 1024u)

static const char dz_manifest_name[] = "manifest.xml";

/* ---------------------------------------------------------- messages */

static void
dz_msg(char *buf, size_t bufsz, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
dz_msg(char *buf, size_t bufsz, const char *fmt, ...)
{
    if (buf == NULL || bufsz == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, bufsz, fmt, ap);
    va_end(ap);
}

/* A member or manifest name fit for a one-line message: names come from
 * the package, which may hold control characters meant for a terminal. */
static const char *
dz_shown(const char *name, char *buf)
{
    size_t i = 0;
    if (name == NULL)
        name = "";
    for (; name[i] != '\0' && i < DZ_NAME_SHOWN; i++) {
        unsigned char c = (unsigned char)name[i];
        buf[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    buf[i] = '\0';
    return buf;
}

/* libzip's error code as ours. */
static int
dz_zip_rc(int ze)
{
    switch (ze) {
    case ZIP_ER_MEMORY:
        return RS_ENOMEM;
    case ZIP_ER_NOENT:
        return RS_ENOTFOUND;
    case ZIP_ER_NOZIP:
    case ZIP_ER_INCONS:
    case ZIP_ER_CRC:
    case ZIP_ER_EOF:
    case ZIP_ER_COMPRESSED_DATA:
    case ZIP_ER_ZLIB:
    case ZIP_ER_MULTIDISK:
    case ZIP_ER_EXISTS:          /* at open: two members with one name */
        return RS_EINVALID;
    case ZIP_ER_COMPNOTSUPP:
    case ZIP_ER_ENCRNOTSUPP:
    case ZIP_ER_NOPASSWD:
    case ZIP_ER_WRONGPASSWD:
    case ZIP_ER_OPNOTSUPP:
        return RS_EUNSUPPORTED;
    default:
        return RS_EIO;
    }
}

/* ------------------------------------------------------------ pool */

/* The manifest's strings and link arrays, carved from chunks that are
 * freed together by dumpzip_close: one allocation per 64 KiB, not one per
 * string. */
struct dz_chunk {
    struct dz_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

static void *
dz_pool_alloc(struct dz_chunk **pool, size_t size)
{
    size = (size + 15u) & ~(size_t)15u;
    struct dz_chunk *c = *pool;
    if (c == NULL || c->cap - c->used < size) {
        size_t cap = size > DZ_POOL_CHUNK ? size : DZ_POOL_CHUNK;
        c = rs_malloc(sizeof(*c) + cap);
        if (c == NULL)
            return NULL;
        c->used = 0;
        c->cap = cap;
        /* A chunk made for one big request goes behind the current one,
         * so the current one's free space is not abandoned. */
        if (*pool != NULL && cap > DZ_POOL_CHUNK) {
            c->next = (*pool)->next;
            (*pool)->next = c;
        } else {
            c->next = *pool;
            *pool = c;
        }
    }
    void *p = c->data + c->used;
    c->used += size;
    return p;
}

static void
dz_pool_free(struct dz_chunk *pool)
{
    while (pool != NULL) {
        struct dz_chunk *next = pool->next;
        rs_free(pool);
        pool = next;
    }
}

/* *s := a pool copy of *s (NULL stays NULL). */
static int
dz_pool_str(struct dz_chunk **pool, const char **s)
{
    if (*s == NULL)
        return 0;
    size_t n = strlen(*s);
    char *d = dz_pool_alloc(pool, n + 1);
    if (d == NULL)
        return RS_ENOMEM;
    memcpy(d, *s, n + 1);
    *s = d;
    return 0;
}

static int
dz_pool_md(struct dz_chunk **pool, struct rs_md *md)
{
    if (dz_pool_str(pool, &md->capability_other) != 0 ||
        dz_pool_str(pool, &md->type) != 0 ||
        dz_pool_str(pool, &md->encoding) != 0 ||
        dz_pool_str(pool, &md->path) != 0)
        return RS_ENOMEM;
    return 0;
}

static int
dz_pool_links(struct dz_chunk **pool, const struct rs_link **links, size_t n)
{
    if (n == 0) {
        *links = NULL;
        return 0;
    }
    struct rs_link *v = dz_pool_alloc(pool, n * sizeof(*v));
    if (v == NULL)
        return RS_ENOMEM;
    memcpy(v, *links, n * sizeof(*v));
    for (size_t i = 0; i < n; i++) {
        if (dz_pool_str(pool, &v[i].rel) != 0 ||
            dz_pool_str(pool, &v[i].href) != 0 ||
            dz_pool_str(pool, &v[i].type) != 0 ||
            dz_pool_str(pool, &v[i].encoding) != 0 ||
            dz_pool_str(pool, &v[i].path) != 0)
            return RS_ENOMEM;
    }
    *links = v;
    return 0;
}

/* ----------------------------------------------------------- package */

/*
 * The package's file read with pread through a window of DZ_SRC_WINDOW
 * bytes, by libzip (the source below) and by the members read straight
 * from the file: libzip's own file source goes through stdio, whose buffer
 * each seek drops, so every member cost an lseek and reads for its header
 * and body (a tenth of the writer threads' CPU at 100,000 small members,
 * perf). Here a seek only moves an offset, and the members a thread takes
 * in a row (consecutive in the package) come from one pread. A window is
 * one reader's: one per zip_t, one per dumpzip_reader.
 */
#define DZ_SRC_WINDOW (64u * 1024u)

struct dz_win {
    unsigned char *buf;          /* DZ_SRC_WINDOW bytes, or NULL (yet) */
    uint64_t off;                /* it holds [off, off + len) */
    size_t len;
};

/* pread all of [off, off + len) that the file has; -1 with errno. */
static ssize_t
dz_pread(int fd, void *buf, size_t len, uint64_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, (char *)buf + got, len - got,
                          (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

/* Up to len bytes of fd at off into data, through w: from the window,
 * refilled when off is outside it; a read as large as the window goes
 * around it. 0 at the end of the file, -1 with errno (ENOMEM: no window
 * to be had). */
static ssize_t
dz_win_read(struct dz_win *w, int fd, void *data, size_t len, uint64_t off)
{
    if (len >= DZ_SRC_WINDOW)
        return dz_pread(fd, data, len, off);
    if (off < w->off || off >= w->off + w->len) {
        if (w->buf == NULL && (w->buf = rs_malloc(DZ_SRC_WINDOW)) == NULL) {
            errno = ENOMEM;
            return -1;
        }
        ssize_t n = dz_pread(fd, w->buf, DZ_SRC_WINDOW, off);
        if (n <= 0)
            return n;
        w->off = off;
        w->len = (size_t)n;
    }
    size_t at = (size_t)(off - w->off);
    size_t n = w->len - at < len ? w->len - at : len;
    memcpy(data, w->buf + at, n);
    return (ssize_t)n;
}

/* The package's file as a libzip source. */
struct dz_src {
    int fd;
    zip_uint64_t size, off;
    struct dz_win win;
    zip_error_t error;
};

/* Up to len bytes at s->off into data. */
static zip_int64_t
dz_src_read(struct dz_src *s, void *data, zip_uint64_t len)
{
    zip_uint64_t left = s->off < s->size ? s->size - s->off : 0;
    if (len > left)
        len = left;
    if (len > SSIZE_MAX)
        len = SSIZE_MAX;
    if (len == 0)
        return 0;
    ssize_t n = dz_win_read(&s->win, s->fd, data, (size_t)len, s->off);
    if (n < 0) {
        zip_error_set(&s->error, errno == ENOMEM ? ZIP_ER_MEMORY
                                                 : ZIP_ER_READ, errno);
        return -1;
    }
    s->off += (zip_uint64_t)n;
    return n;
}

static zip_int64_t
dz_src_cb(void *ud, void *data, zip_uint64_t len, zip_source_cmd_t cmd)
{
    struct dz_src *s = ud;

    switch (cmd) {
    case ZIP_SOURCE_OPEN:
        s->off = 0;
        return 0;
    case ZIP_SOURCE_READ:
        return dz_src_read(s, data, len);
    case ZIP_SOURCE_CLOSE:
        return 0;
    case ZIP_SOURCE_STAT: {
        zip_stat_t *st = data;
        if (len < sizeof(*st)) {
            zip_error_set(&s->error, ZIP_ER_INVAL, 0);
            return -1;
        }
        zip_stat_init(st);
        st->size = s->size;
        st->valid |= ZIP_STAT_SIZE;
        return sizeof(*st);
    }
    case ZIP_SOURCE_ERROR:
        return zip_error_to_data(&s->error, data, len);
    case ZIP_SOURCE_FREE:
        close(s->fd);
        rs_free(s->win.buf);
        zip_error_fini(&s->error);
        rs_free(s);
        return 0;
    case ZIP_SOURCE_SEEK: {
        zip_int64_t off = zip_source_seek_compute_offset(
            s->off, s->size, data, len, &s->error);
        if (off < 0)
            return -1;
        s->off = (zip_uint64_t)off;
        return 0;
    }
    case ZIP_SOURCE_TELL:
        return (zip_int64_t)s->off;
    case ZIP_SOURCE_SUPPORTS:
        return zip_source_make_command_bitmap(
            ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE,
            ZIP_SOURCE_STAT, ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE,
            ZIP_SOURCE_SEEK, ZIP_SOURCE_TELL, ZIP_SOURCE_SUPPORTS, -1);
    default:
        zip_error_set(&s->error, ZIP_ER_OPNOTSUPP, 0);
        return -1;
    }
}

/* zip_open on path through dz_src. NULL with a libzip error code in *ze
 * (ZIP_ER_OPEN with errno lost for a file that cannot be opened). fd (may
 * be NULL): a descriptor of the very file libzip opened, the caller's to
 * close, or -1. */
static zip_t *
dz_zip_open(const char *path, int flags, int *ze, int *fd)
{
    struct dz_src *s = rs_calloc(1, sizeof(*s));
    struct stat st;
    zip_error_t e;
    zip_source_t *src;
    zip_t *za;

    if (s == NULL) {
        *ze = ZIP_ER_MEMORY;
        return NULL;
    }
    zip_error_init(&s->error);
    if ((s->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 ||
        fstat(s->fd, &st) != 0) {
        *ze = errno == ENOENT ? ZIP_ER_NOENT : ZIP_ER_OPEN;
        if (s->fd >= 0)
            close(s->fd);
        rs_free(s);
        return NULL;
    }
    s->size = (zip_uint64_t)st.st_size;
    zip_error_init(&e);
    if ((src = zip_source_function_create(dz_src_cb, s, &e)) == NULL) {
        *ze = zip_error_code_zip(&e);
        zip_error_fini(&e);
        close(s->fd);
        rs_free(s);
        return NULL;
    }
    if ((za = zip_open_from_source(src, flags, &e)) == NULL) {
        *ze = zip_error_code_zip(&e);
        zip_source_free(src);         /* and s, through ZIP_SOURCE_FREE */
    } else if (fd != NULL) {
        *fd = fcntl(s->fd, F_DUPFD_CLOEXEC, 0);
    }
    zip_error_fini(&e);
    return za;
}

/* One handle on the package's file, and the members open through it. */
struct dumpzip_reader {
    struct dumpzip *z;
    zip_t *za;                   /* a reader's is opened when a member
                                    first needs libzip */
    size_t open_files;           /* dumpzip_files reading through it */
    struct dz_win win;           /* members read straight from the file */
};

/* What the central directory says of a member (by ZIP index), and where
 * its bytes are when it can be read straight from the package's file. */
struct dz_member {
    const char *name;            /* libzip's, lives with main.za */
    uint64_t size, csize;
    uint16_t method;             /* ZIP_CM_*, as the directory says */
    bool encrypted;
    uint32_t crc;
    bool stored;                 /* no compression, size == comp_size */
    bool scanned;                /* the scan found its local header */
    bool direct;                 /* stored, its local header found where
                                    the scan expected it and agreeing */
    uint64_t data_off;           /* direct: where its bytes start */
};

struct dumpzip {
    struct dumpzip_reader main;  /* z's own */
    char *path;                  /* the package, for more readers */
    int fd;                      /* the package, for direct reads; -1 */
    struct dz_member *mem;       /* nmembers */
    zip_uint64_t nmembers;
    struct dumpzip_limits lim;   /* defaults filled in */
    struct rs_head head;         /* strings in pool */
    struct rs_entry *entries;    /* rs_malloc'ed; strings in pool */
    int64_t *member;             /* per entry: ZIP index, -1 none */
    size_t n, cap;
    struct dz_chunk *pool;
    bool closing;                /* dumpzip_close ran; the last file frees */
};

static void dz_free(struct dumpzip *z);
static int dz_reader_za(struct dumpzip_reader *rd, char *err, size_t errsz);

/* ---------------------------------------------------- member reader */

/*
 * Reads one member through libzip, handing out at most `size` bytes (the
 * declared size: a member whose data runs longer is cut off there, so a
 * lying size cannot make us inflate more) and checking, before reporting
 * the end, that exactly `size` bytes came, that libzip's CRC check passed
 * and that every supported declared digest matches.
 */
struct dumpzip_file {
    struct dumpzip_reader *rd;   /* the handle it reads through */
    zip_file_t *zf;              /* NULL: read straight from the file */
    uint64_t data_off;           /* ... where its bytes start */
    struct rs_hasher *hasher;    /* NULL: nothing to digest */
    struct rs_hashes want;       /* declared digests */
    uint64_t size;               /* bytes the content must have */
    uint64_t got;                /* handed out so far */
    int rc;                      /* sticky error, or 0 */
    bool done;                   /* the end was reached and verified */
    char what[DZ_NAME_SHOWN + 1]; /* member name, for messages */
    char err[DZ_NAME_SHOWN + 2 + DZ_MSG_MAX];   /* "what: why" */
};

static ssize_t
file_fail(struct dumpzip_file *f, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ssize_t
file_fail(struct dumpzip_file *f, int rc, const char *fmt, ...)
{
    char why[DZ_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    snprintf(f->err, sizeof(f->err), "%s: %s", f->what, why);
    f->rc = rc;
    return rc;
}

static ssize_t
file_fail_zip(struct dumpzip_file *f)
{
    zip_error_t *ze = zip_file_get_error(f->zf);
    int code = zip_error_code_zip(ze);
    const char *why = code == ZIP_ER_CRC ? "CRC mismatch (content is corrupt)"
                                         : zip_error_strerror(ze);
    return file_fail(f, dz_zip_rc(code), "%s", why);
}

/* The algorithm a member is verified with, as rs_hasher's bit mask: the
 * strongest the manifest declares, as apply checks a fetched body (at
 * 100,000 members md5 beside sha-256 was a tenth of the dump's CPU). */
static unsigned
file_algos(const struct rs_hashes *h)
{
    enum rs_hash_algo a = rs_hashes_strongest(h);
    return a != RS_HASH_OTHER ? 1u << a : 0;
}

/* Start reading member idx (already checked by the caller). */
static int
file_start(struct dumpzip_reader *rd, zip_uint64_t idx, uint64_t size,
           const struct rs_hashes *want, const char *name,
           struct dumpzip_file **out, char *err, size_t errsz)
{
    int rc = 0;
    char shown[DZ_NAME_SHOWN + 1];
    struct dumpzip_file *f = rs_calloc(1, sizeof(*f));
    if (f == NULL) {
        rc = RS_ENOMEM;
        dz_msg(err, errsz, "out of memory");
        goto out;
    }
    f->rd = rd;
    f->size = size;
    snprintf(f->what, sizeof(f->what), "%s", dz_shown(name, shown));
    if (want != NULL)
        f->want = *want;
    unsigned algos = file_algos(&f->want);
    if (algos != 0) {
        f->hasher = rs_hasher_new(algos);
        if (f->hasher == NULL) {
            rc = RS_ENOMEM;
            dz_msg(err, errsz, "out of memory");
            goto out;
        }
    }
    /* Straight from the file when the scan placed the member and a
     * digest will vouch for its bytes (the ZIP CRC, libzip's check, adds
     * nothing to a verified sha-256); else through libzip. */
    const struct dz_member *m = &rd->z->mem[idx];
    if (m->direct && f->hasher != NULL) {
        f->data_off = m->data_off;
        rd->open_files++;
        *out = f;
        return 0;
    }
    if (rd->za == NULL && (rc = dz_reader_za(rd, err, errsz)) != 0)
        goto out;
    f->zf = zip_fopen_index(rd->za, idx, 0);
    if (f->zf == NULL) {
        zip_error_t *ze = zip_get_error(rd->za);
        rc = dz_zip_rc(zip_error_code_zip(ze));
        dz_msg(err, errsz, "%s: %s", f->what, zip_error_strerror(ze));
        zip_error_clear(rd->za);
        goto out;
    }
    rd->open_files++;
    *out = f;
    f = NULL;
out:
    if (f != NULL) {
        rs_hasher_free(f->hasher);
        rs_free(f);
    }
    return rc;
}

/* The end: the digest computed must match the manifest's. */
static ssize_t
file_verify(struct dumpzip_file *f)
{
    if (f->hasher != NULL) {
        struct rs_hashes got;
        int rc = rs_hasher_final(f->hasher, &got);
        if (rc != 0)
            return file_fail(f, rc, "computing digests: %s", rs_strerror(rc));
        for (unsigned i = 0; i < f->want.n; i++) {
            const struct rs_digest *w = &f->want.d[i];
            if (w->algo != rs_hashes_strongest(&f->want))
                continue;
            const struct rs_digest *g = rs_hashes_find(&got, w->algo);
            if (g == NULL || g->len != w->len ||
                memcmp(g->bytes, w->bytes, w->len) != 0)
                return file_fail(f, RS_EINVALID,
                                 "%s digest differs from the manifest's",
                                 w->name);
        }
    }
    f->done = true;
    return 0;
}

ssize_t
dumpzip_file_read(struct dumpzip_file *f, void *buf, size_t len)
{
    if (f->rc != 0)
        return f->rc;
    if (f->done)
        return 0;
    if (buf == NULL || len == 0)
        return RS_EINVAL;
    if (f->got < f->size) {
        uint64_t want = f->size - f->got;
        if (want > len)
            want = len;
        if (want > SSIZE_MAX)
            want = SSIZE_MAX;
        zip_int64_t n;
        if (f->zf == NULL) {
            ssize_t k = dz_win_read(&f->rd->win, f->rd->z->fd, buf,
                                    (size_t)want, f->data_off + f->got);
            if (k < 0)
                return file_fail(f, errno == ENOMEM ? RS_ENOMEM : RS_EIO,
                                 "reading the package: %s", strerror(errno));
            n = (zip_int64_t)k;
        } else if ((n = zip_fread(f->zf, buf, want)) < 0) {
            return file_fail_zip(f);
        }
        if (n == 0)
            return file_fail(f, RS_EINVALID,
                             "content ends after %" PRIu64 " of the declared "
                             "%" PRIu64 " bytes", f->got, f->size);
        if (f->hasher != NULL) {
            int rc = rs_hasher_update(f->hasher, buf, (size_t)n);
            if (rc != 0)
                return file_fail(f, rc, "computing digests: %s",
                                 rs_strerror(rc));
        }
        f->got += (uint64_t)n;
        return (ssize_t)n;
    }
    /* All declared bytes are in: one more read must find the end, which
     * is also where libzip checks the CRC. */
    if (f->zf == NULL)
        return file_verify(f);
    unsigned char probe;
    zip_int64_t n = zip_fread(f->zf, &probe, 1);
    if (n < 0)
        return file_fail_zip(f);
    if (n > 0)
        return file_fail(f, RS_EINVALID,
                         "content runs past the declared %" PRIu64 " bytes",
                         f->size);
    return file_verify(f);
}

const char *
dumpzip_file_error(const struct dumpzip_file *f)
{
    return f->err;
}

uint64_t
dumpzip_file_offset(const struct dumpzip_file *f)
{
    return f->got;
}

void
dumpzip_file_close(struct dumpzip_file *f)
{
    if (f == NULL)
        return;
    struct dumpzip_reader *rd = f->rd;
    struct dumpzip *z = rd->z;
    if (f->zf != NULL)
        zip_fclose(f->zf);
    rd->open_files--;
    rs_hasher_free(f->hasher);
    rs_free(f);
    if (rd == &z->main && z->closing && rd->open_files == 0)
        dz_free(z);
}

/* The ZIP member a manifest path names: paths are "relative to the root of
 * the package ... with a leading slash" (core 11.2); without the slash we
 * take it as written, as rs_check only warns. -1 when there is none. The
 * path is only ever a lookup key, never a filesystem path. */
static int64_t
dz_locate(zip_t *za, const char *path)
{
    if (path == NULL)
        return -1;
    if (path[0] == '/')
        path++;
    if (path[0] == '\0')
        return -1;
    zip_int64_t idx = zip_name_locate(za, path, 0);
    return idx < 0 ? -1 : (int64_t)idx;
}

/* Entry i's member, read through rd. */
static int
dz_open_entry(struct dumpzip_reader *rd, size_t i, struct dumpzip_file **out,
              char *err, size_t errsz)
{
    struct dumpzip *z = rd->z;
    *out = NULL;
    if (i >= z->n) {
        dz_msg(err, errsz, "no manifest entry %zu (there are %zu)", i, z->n);
        return RS_EINVAL;
    }
    const struct rs_entry *e = &z->entries[i];
    char shown[DZ_NAME_SHOWN + 1], shown2[DZ_NAME_SHOWN + 1];
    if (z->member[i] < 0) {
        if (e->md.path == NULL)
            dz_msg(err, errsz, "entry %s has no path in the package",
                   dz_shown(e->loc, shown));
        else
            dz_msg(err, errsz, "entry %s: path %s is not in the package",
                   dz_shown(e->loc, shown), dz_shown(e->md.path, shown2));
        return RS_ENOTFOUND;
    }
    zip_uint64_t idx = (zip_uint64_t)z->member[i];
    const struct dz_member *m = &z->mem[idx];
    dz_shown(m->name, shown);
    /* libzip would ask for a password; we have none to give. */
    if (m->encrypted) {
        dz_msg(err, errsz, "%s is encrypted", shown);
        return RS_EUNSUPPORTED;
    }
    /* Caught before inflating a byte; the reader would catch it too. */
    if (e->md.length >= 0 && (uint64_t)e->md.length != m->size) {
        dz_msg(err, errsz, "%s holds %" PRIu64 " bytes, the manifest says "
               "%" PRId64, shown, m->size, e->md.length);
        return RS_EINVALID;
    }
    return file_start(rd, idx, m->size, &e->md.hash, m->name, out, err,
                      errsz);
}

int
dumpzip_file_open(struct dumpzip *z, size_t i, struct dumpzip_file **out,
                  char *err, size_t errsz)
{
    return dz_open_entry(&z->main, i, out, err, errsz);
}

int
dumpzip_reader_open(struct dumpzip_reader *r, size_t i,
                    struct dumpzip_file **out, char *err, size_t errsz)
{
    return dz_open_entry(r, i, out, err, errsz);
}

int
dumpzip_reader_new(struct dumpzip *z, struct dumpzip_reader **out, char *err,
                   size_t errsz)
{
    *out = NULL;
    struct dumpzip_reader *r = rs_calloc(1, sizeof(*r));
    if (r == NULL) {
        dz_msg(err, errsz, "out of memory");
        return RS_ENOMEM;
    }
    r->z = z;
    *out = r;
    return 0;
}

/* rd's own libzip handle on the package, opened when a member first
 * needs one (most are read straight from the file). No ZIP_CHECKCONS:
 * dumpzip_open checked this file's headers, and a reader only counts its
 * members again. */
static int
dz_reader_za(struct dumpzip_reader *rd, char *err, size_t errsz)
{
    int ze = 0;
    zip_t *za = dz_zip_open(rd->z->path, ZIP_RDONLY, &ze, NULL);
    if (za == NULL) {
        zip_error_t e;
        zip_error_init_with_code(&e, ze);
        dz_msg(err, errsz, "reopening the package: %s",
               zip_error_strerror(&e));
        zip_error_fini(&e);
        return ze == ZIP_ER_MEMORY ? RS_ENOMEM : RS_EIO;
    }
    zip_int64_t n = zip_get_num_entries(za, 0);
    if (n < 0 || (zip_uint64_t)n != rd->z->nmembers) {
        dz_msg(err, errsz, "the package changed since it was opened");
        zip_discard(za);
        return RS_EINVALID;
    }
    rd->za = za;
    return 0;
}

void
dumpzip_reader_free(struct dumpzip_reader *r)
{
    if (r == NULL)
        return;
    if (r->za != NULL)
        zip_discard(r->za);
    rs_free(r->win.buf);
    rs_free(r);
}

/* ---------------------------------------------------------- manifest */

/* State of the manifest parse. */
struct dz_build {
    struct dumpzip *z;
    int rc;                      /* our own refusal, with msg */
    char msg[DZ_MSG_MAX];
};

static int
on_manifest_head(void *ud, const struct rs_head *h)
{
    struct dz_build *b = ud;
    enum rs_capability c = h->md.capability;
    if (c == RS_CAP_RESOURCEDUMP_MANIFEST || c == RS_CAP_CHANGEDUMP_MANIFEST)
        return 0;
    char shown[DZ_NAME_SHOWN + 1];
    const char *name = c == RS_CAP_OTHER ? h->md.capability_other
                                         : rs_capability_name(c);
    snprintf(b->msg, sizeof(b->msg), "%s: capability is \"%s\", not "
             "resourcedump-manifest or changedump-manifest",
             dz_manifest_name, dz_shown(name, shown));
    b->rc = RS_EINVALID;
    return b->rc;
}

static int
on_manifest_entry(void *ud, const struct rs_entry *e)
{
    struct dz_build *b = ud;
    struct dumpzip *z = b->z;
    if (z->n == z->cap) {
        /* First room for an entry per member: a package's manifest lists
         * each member but itself once, so the arrays are not grown and
         * copied (6% of a 10,000-file dump's page faults were the copies,
         * entries being 520 bytes). Pages not written cost nothing. */
        size_t ncap = z->cap * 2;
        if (z->cap == 0) {
            ncap = z->nmembers < z->lim.max_entries ? (size_t)z->nmembers
                                                    : z->lim.max_entries;
            ncap = ncap > 64 ? ncap : 64;
        }
        struct rs_entry *nv = rs_realloc(z->entries, ncap * sizeof(*nv));
        if (nv == NULL)
            return RS_ENOMEM;
        z->entries = nv;
        int64_t *nm = rs_realloc(z->member, ncap * sizeof(*nm));
        if (nm == NULL)
            return RS_ENOMEM;
        z->member = nm;
        z->cap = ncap;
    }
    struct rs_entry *d = &z->entries[z->n];
    *d = *e;
    if (dz_pool_str(&z->pool, &d->loc) != 0 ||
        dz_pool_md(&z->pool, &d->md) != 0 ||
        dz_pool_links(&z->pool, &d->links, d->nlinks) != 0)
        return RS_ENOMEM;
    z->member[z->n] = dz_locate(z->main.za, d->md.path);
    z->n++;
    return 0;
}

static int
on_manifest_end(void *ud, const struct rs_head *h)
{
    struct dz_build *b = ud;
    struct dumpzip *z = b->z;
    z->head = *h;
    if (dz_pool_md(&z->pool, &z->head.md) != 0 ||
        dz_pool_links(&z->pool, &z->head.links, z->head.nlinks) != 0 ||
        dz_pool_str(&z->pool, &z->head.hub_id) != 0 ||
        dz_pool_str(&z->pool, &z->head.hub_topic) != 0)
        return RS_ENOMEM;
    return 0;
}

/* Entry numbers sorted by member, to find two entries naming one. */
struct dz_key {
    const char *loc;
    int64_t member;
    size_t i;
};

static int
dz_cmp_member(const void *a, const void *b)
{
    const struct dz_key *x = a, *y = b;
    if (x->member != y->member)
        return x->member < y->member ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}


/*
 * Two entries reading one member would let a small package claim many
 * times its size (and would give two resources one bitstream: not what a
 * dump describes); two entries for one <loc> in a Resource Dump Manifest,
 * a snapshot, leave the resource's state ambiguous. A Change Dump lists a
 * resource once per change, so repeated locs are fine there.
 */
static int
dz_check_duplicates(struct dumpzip *z, char *err, size_t errsz)
{
    if (z->n < 2)
        return 0;
    struct dz_key *k = rs_calloc(z->n, sizeof(*k));
    if (k == NULL) {
        dz_msg(err, errsz, "out of memory");
        return RS_ENOMEM;
    }
    int rc = 0;
    struct uriset locs = { 0 };
    char s1[DZ_NAME_SHOWN + 1], s2[DZ_NAME_SHOWN + 1], s3[DZ_NAME_SHOWN + 1];
    for (size_t i = 0; i < z->n; i++) {
        k[i].loc = z->entries[i].loc;
        k[i].member = z->member[i];
        k[i].i = i;
    }
    qsort(k, z->n, sizeof(*k), dz_cmp_member);
    for (size_t i = 1; i < z->n; i++) {
        if (k[i].member >= 0 && k[i].member == k[i - 1].member) {
            const struct rs_entry *a = &z->entries[k[i - 1].i];
            const struct rs_entry *b = &z->entries[k[i].i];
            rc = RS_EINVALID;
            dz_msg(err, errsz, "%s:%u: entries %s and %s name the same "
                   "member %s", dz_manifest_name, b->line,
                   dz_shown(a->loc, s1), dz_shown(b->loc, s2),
                   dz_shown(b->md.path, s3));
            goto out;
        }
    }
    if (z->head.md.capability != RS_CAP_RESOURCEDUMP_MANIFEST)
        goto out;
    /* a set of the locs' hashes, not a sort: sorting 20,000 URLs that
     * share their first 30 bytes was a tenth of opening a package */
    for (size_t i = 0; i < z->n && rc == 0; i++) {
        int seen = uriset_add(&locs, z->entries[i].loc);
        if (seen < 0) {
            rc = seen;
            dz_msg(err, errsz, "out of memory");
        } else if (seen > 0) {
            const struct rs_entry *b = &z->entries[i];
            size_t first = 0;
            while (first < i && strcmp(z->entries[first].loc, b->loc) != 0)
                first++;
            if (first == i)
                continue;             /* two hashes alike, not two locs */
            rc = RS_EINVALID;
            dz_msg(err, errsz, "%s:%u: %s is listed twice (first at line "
                   "%u)", dz_manifest_name, b->line, dz_shown(b->loc, s1),
                   z->entries[first].line);
        }
    }
out:
    uriset_clear(&locs);
    rs_free(k);
    return rc;
}

/* Stream manifest.xml (member idx, size bytes) through the parser. */
static int
dz_read_manifest(struct dumpzip *z, zip_uint64_t idx, uint64_t size,
                 char *err, size_t errsz)
{
    int rc;
    struct dz_build b = { .z = z };
    struct dumpzip_file *f = NULL;
    struct rs_parser *p = NULL;
    char *buf = NULL;
    const struct rs_parse_opts opts = {
        .max_bytes = z->lim.max_manifest_bytes,
        .max_entries = z->lim.max_entries,
    };
    const struct rs_parser_cbs cbs = {
        .on_head = on_manifest_head,
        .on_entry = on_manifest_entry,
        .on_end = on_manifest_end,
    };

    rc = file_start(&z->main, idx, size, NULL, dz_manifest_name, &f, err,
                    errsz);
    if (rc != 0)
        goto out;
    buf = rs_malloc(DZ_CHUNK);
    p = rs_parser_new(&opts, &cbs, &b);
    if (buf == NULL || p == NULL) {
        rc = RS_ENOMEM;
        dz_msg(err, errsz, "out of memory");
        goto out;
    }
    for (;;) {
        ssize_t n = dumpzip_file_read(f, buf, DZ_CHUNK);
        if (n < 0) {
            rc = (int)n;
            dz_msg(err, errsz, "%s", dumpzip_file_error(f));
            goto out;
        }
        rc = n > 0 ? rs_parser_feed(p, buf, (size_t)n) : rs_parser_finish(p);
        if (rc != 0 || n == 0)
            break;
    }
    if (rc != 0) {
        const struct rs_diag *d = rs_parser_error(p);
        if (b.rc != 0)
            dz_msg(err, errsz, "%s", b.msg);
        else if (rc == RS_ENOMEM)
            dz_msg(err, errsz, "out of memory");
        else if (d != NULL)
            rs_diag_line(err, errsz, dz_manifest_name, d->line, "error",
                         d->msg);
        else
            dz_msg(err, errsz, "%s: %s", dz_manifest_name, rs_strerror(rc));
        goto out;
    }
    rc = dz_check_duplicates(z, err, errsz);
out:
    rs_parser_free(p);
    rs_free(buf);
    dumpzip_file_close(f);
    return rc;
}

/* ----------------------------------------------------------- package */

static void
dz_limits(struct dumpzip_limits *l, const struct dumpzip_limits *in)
{
    if (in != NULL)
        *l = *in;
    else
        memset(l, 0, sizeof(*l));
    if (l->max_entry_bytes == 0)
        l->max_entry_bytes = DUMPZIP_DEFAULT_MAX_ENTRY_BYTES;
    if (l->max_total_bytes == 0)
        l->max_total_bytes = DUMPZIP_DEFAULT_MAX_TOTAL_BYTES;
    if (l->max_ratio == 0)
        l->max_ratio = DUMPZIP_DEFAULT_MAX_RATIO;
    if (l->ratio_floor == 0)
        l->ratio_floor = DUMPZIP_DEFAULT_RATIO_FLOOR;
    if (l->max_members == 0)
        l->max_members = DUMPZIP_DEFAULT_MAX_MEMBERS;
    if (l->max_entries == 0)
        l->max_entries = RS_MAX_ENTRIES;
    if (l->max_manifest_bytes == 0)
        l->max_manifest_bytes = RS_MAX_DOC_BYTES;
}

/*
 * Every member against the limits, from the central directory alone, so a
 * bomb is refused before anything is inflated. What a member declares is
 * also all its reader will ever produce (dumpzip_file_read), so a member
 * lying about its size gains nothing.
 */
static int
dz_check_members(struct dumpzip *z, char *err, size_t errsz)
{
    const struct dumpzip_limits *l = &z->lim;
    char shown[DZ_NAME_SHOWN + 1];
    zip_int64_t n = zip_get_num_entries(z->main.za, 0);
    if (n < 0)
        n = 0;
    z->nmembers = (zip_uint64_t)n;
    if ((uint64_t)n > l->max_members) {
        dz_msg(err, errsz, "the package has %" PRId64 " members, over the "
               "limit of %zu", (int64_t)n, l->max_members);
        return RS_ETOOBIG;
    }
    if ((z->mem = rs_calloc(n > 0 ? (size_t)n : 1, sizeof(*z->mem))) ==
        NULL) {
        dz_msg(err, errsz, "out of memory");
        return RS_ENOMEM;
    }
    uint64_t total = 0;
    for (zip_int64_t i = 0; i < n; i++) {
        zip_stat_t st;
        zip_stat_init(&st);
        if (zip_stat_index(z->main.za, (zip_uint64_t)i, 0, &st) != 0) {
            zip_error_t *ze = zip_get_error(z->main.za);
            int rc = dz_zip_rc(zip_error_code_zip(ze));
            dz_msg(err, errsz, "member %" PRId64 ": %s", (int64_t)i,
                   zip_error_strerror(ze));
            zip_error_clear(z->main.za);
            return rc;
        }
        if ((st.valid & (ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE)) !=
            (ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE)) {
            dz_msg(err, errsz, "member %" PRId64 " has no size", (int64_t)i);
            return RS_EINVALID;
        }
        dz_shown((st.valid & ZIP_STAT_NAME) ? st.name : "?", shown);
        if (st.size > l->max_entry_bytes) {
            dz_msg(err, errsz, "%s declares %" PRIu64 " bytes, over the "
                   "limit of %" PRIu64, shown, (uint64_t)st.size,
                   l->max_entry_bytes);
            return RS_ETOOBIG;
        }
        if (st.size > l->ratio_floor &&
            (st.comp_size == 0 || st.size / st.comp_size >= l->max_ratio)) {
            dz_msg(err, errsz, "%s inflates %" PRIu64 " bytes into %" PRIu64
                   ", over the compression ratio limit of %" PRIu32 ":1",
                   shown, (uint64_t)st.comp_size, (uint64_t)st.size,
                   l->max_ratio);
            return RS_ETOOBIG;
        }
        if (st.size > l->max_total_bytes - total) {
            dz_msg(err, errsz, "the members add up to more than the limit "
                   "of %" PRIu64 " bytes (at %s)", l->max_total_bytes, shown);
            return RS_ETOOBIG;
        }
        total += st.size;
        z->mem[i] = (struct dz_member){
            .name = (st.valid & ZIP_STAT_NAME) ? st.name : "?",
            .size = st.size,
            .csize = st.comp_size,
            .method = (st.valid & ZIP_STAT_COMP_METHOD) ? st.comp_method
                                                        : UINT16_MAX,
            .crc = (st.valid & ZIP_STAT_CRC) ? st.crc : 0,
            .encrypted = (st.valid & ZIP_STAT_ENCRYPTION_METHOD) &&
                         st.encryption_method != ZIP_EM_NONE,
            .stored = (st.valid & ZIP_STAT_COMP_METHOD) &&
                      (st.valid & ZIP_STAT_CRC) &&
                      st.comp_method == ZIP_CM_STORE &&
                      st.comp_size == st.size,
        };
    }
    return 0;
}

static uint16_t
dz_rd16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t
dz_rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

/* The ZIP64 sizes of a local header whose 32-bit ones are 0xffffffff,
 * from its extra fields (x, xl bytes): true when found. */
static bool
dz_zip64_sizes(const unsigned char *x, size_t xl, uint64_t *usize,
               uint64_t *csize)
{
    while (xl >= 4) {
        uint16_t tag = dz_rd16(x), len = dz_rd16(x + 2);
        if (len > xl - 4)
            return false;
        if (tag == 0x0001) {
            const unsigned char *p = x + 4;
            size_t left = len;
            if (*usize == 0xffffffffu) {
                if (left < 8)
                    return false;
                *usize = dz_rd32(p) | (uint64_t)dz_rd32(p + 4) << 32;
                p += 8;
                left -= 8;
            }
            if (*csize == 0xffffffffu) {
                if (left < 8)
                    return false;
                *csize = dz_rd32(p) | (uint64_t)dz_rd32(p + 4) << 32;
            }
            return true;
        }
        x += 4 + len;
        xl -= 4 + (size_t)len;
    }
    return false;
}

/*
 * The scan: the package's local headers, read from its bytes in whatever
 * pieces they come (the download's, or the file's when the caller had
 * none), to find where each stored member's bytes are: libzip does not
 * say, and reading them through it costs a handle per thread and a file
 * per member (a tenth of the writer threads' time at 2 KB members). It
 * follows the headers from the start, the way a ZIP written front to back
 * lays them out, and stops at anything it does not follow (a data
 * descriptor, the central directory, a gap): the members it did not find
 * are read through libzip. A header is kept once all its member's bytes
 * have passed. Fed during the download, it costs the loop next to
 * nothing; reading the file again for it cost the opener up to a tenth
 * of a package's open, and mapping the file for it cost page faults and
 * TLB shootdowns on every thread.
 */
enum dz_scan_state {
    DZS_HEADER,                  /* gathering the 30 fixed bytes */
    DZS_NAME,                    /* gathering the name and extra field */
    DZS_DATA,                    /* letting the member's bytes pass */
    DZS_STOP,                    /* nothing more it follows */
};

/* A local header found whole, its member's bytes all there. */
struct dz_local {
    uint64_t data;               /* where the member's bytes start */
    uint64_t csize, usize;
    uint32_t crc;
    uint32_t name;               /* offset in names (NUL-terminated) */
    uint16_t flags, method;
};

#define DZ_SCAN_MAX_LOCALS ((size_t)DUMPZIP_DEFAULT_MAX_MEMBERS)
#define DZ_SCAN_MAX_NAMES ((size_t)16 << 20)
#define DZ_SCAN_NAME_MAX 1023    /* longer names are never read directly */

struct dumpzip_scan {
    enum dz_scan_state st;
    uint64_t off;                /* bytes fed so far */
    unsigned char hdr[30];
    size_t have;                 /* bytes of hdr, or of nx, gathered */
    unsigned char *nx;           /* the header's name and extra field */
    size_t nx_len, nx_cap, name_len;
    struct dz_local cur;         /* the header whose bytes are passing */
    uint64_t left;               /* ... how many are still to come */
    struct dz_local *v;
    size_t n, v_cap;             /* v_cap and names_cap in bytes */
    char *names;
    size_t names_len, names_cap;
};

struct dumpzip_scan *
dumpzip_scan_new(void)
{
    return rs_calloc(1, sizeof(struct dumpzip_scan));
}

void
dumpzip_scan_free(struct dumpzip_scan *s)
{
    if (s == NULL)
        return;
    rs_free(s->nx);
    rs_free(s->v);
    rs_free(s->names);
    rs_free(s);
}

/* buf (*cap bytes) grown to hold need (> 0) bytes: the buffer, or NULL
 * (over max, or no memory; buf is left as it was). */
static void *
dz_scan_grow(void *buf, size_t *cap, size_t need, size_t max)
{
    if (need <= *cap)
        return buf;
    if (need > max)
        return NULL;
    size_t ncap = *cap > 0 ? *cap : 4096;
    while (ncap < need)
        ncap = ncap > max / 2 ? max : ncap * 2;
    void *nb = rs_realloc(buf, ncap);
    if (nb != NULL)
        *cap = ncap;
    return nb;
}

/* All of cur's bytes have passed: keep it (a name dz_place could never
 * use is skipped), then look for the next header. */
static void
dz_scan_keep(struct dumpzip_scan *s)
{
    s->st = DZS_HEADER;
    s->have = 0;
    size_t nl = s->name_len;
    if (nl == 0 || nl > DZ_SCAN_NAME_MAX || memchr(s->nx, '\0', nl) != NULL)
        return;
    struct dz_local *v = dz_scan_grow(s->v, &s->v_cap,
                                      (s->n + 1) * sizeof(*s->v),
                                      DZ_SCAN_MAX_LOCALS * sizeof(*s->v));
    char *names = v == NULL ? NULL
                            : dz_scan_grow(s->names, &s->names_cap,
                                           s->names_len + nl + 1,
                                           DZ_SCAN_MAX_NAMES);
    if (v != NULL)
        s->v = v;
    if (names == NULL) {
        s->st = DZS_STOP;
        return;
    }
    s->names = names;
    s->cur.name = (uint32_t)s->names_len;
    memcpy(s->names + s->names_len, s->nx, nl);
    s->names[s->names_len + nl] = '\0';
    s->names_len += nl + 1;
    s->v[s->n++] = s->cur;
}

/* The fixed part of a header is in. */
static void
dz_scan_header(struct dumpzip_scan *s)
{
    const unsigned char *h = s->hdr;
    if (dz_rd32(h) != 0x04034b50u) {
        s->st = DZS_STOP;             /* the central directory, or a gap */
        return;
    }
    s->cur = (struct dz_local){
        .flags = dz_rd16(h + 6),
        .method = dz_rd16(h + 8),
        .crc = dz_rd32(h + 14),
        .csize = dz_rd32(h + 18),
        .usize = dz_rd32(h + 22),
    };
    if ((s->cur.flags & 0x8) != 0) {
        s->st = DZS_STOP;             /* sizes after the data: lost */
        return;
    }
    s->name_len = dz_rd16(h + 26);
    s->nx_len = s->name_len + dz_rd16(h + 28);
    if (s->nx_len > 0) {
        unsigned char *nx = dz_scan_grow(s->nx, &s->nx_cap, s->nx_len,
                                         SIZE_MAX);
        if (nx == NULL) {
            s->st = DZS_STOP;
            return;
        }
        s->nx = nx;
    }
    s->have = 0;
    s->st = DZS_NAME;
}

/* The name and extra field are in: s->off is where the data starts. */
static void
dz_scan_name(struct dumpzip_scan *s)
{
    struct dz_local *c = &s->cur;
    size_t xl = s->nx_len - s->name_len;   /* > 0: nx is allocated */
    if ((c->csize == 0xffffffffu || c->usize == 0xffffffffu) &&
        (xl == 0 || !dz_zip64_sizes(s->nx + s->name_len, xl, &c->usize,
                                    &c->csize))) {
        s->st = DZS_STOP;
        return;
    }
    c->data = s->off;
    s->left = c->csize;
    s->st = DZS_DATA;
    if (s->left == 0)
        dz_scan_keep(s);
}

void
dumpzip_scan_feed(struct dumpzip_scan *s, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    while (len > 0 && s->st != DZS_STOP) {
        size_t k = len;
        if (s->st == DZS_HEADER) {
            k = sizeof(s->hdr) - s->have < k ? sizeof(s->hdr) - s->have : k;
            memcpy(s->hdr + s->have, p, k);
        } else if (s->st == DZS_NAME) {
            k = s->nx_len - s->have < k ? s->nx_len - s->have : k;
            memcpy(s->nx + s->have, p, k);
        } else if (s->left < k) {
            k = (size_t)s->left;
        }
        p += k;
        len -= k;
        s->off += k;
        if (s->st == DZS_HEADER) {
            if ((s->have += k) == sizeof(s->hdr))
                dz_scan_header(s);
            if (s->st == DZS_NAME && s->nx_len == 0)
                dz_scan_name(s);
        } else if (s->st == DZS_NAME) {
            if ((s->have += k) == s->nx_len)
                dz_scan_name(s);
        } else if ((s->left -= k) == 0) {
            dz_scan_keep(s);
        }
    }
}

/* The scan of z's file, when the caller had none: read through once. NULL
 * when it cannot be had (no member is then read directly). */
static struct dumpzip_scan *
dz_scan_file(struct dumpzip *z)
{
    struct dumpzip_scan *s = dumpzip_scan_new();
    unsigned char *buf = rs_malloc(DZ_CHUNK);
    uint64_t off = 0;
    ssize_t n;

    if (s == NULL || buf == NULL) {
        rs_free(buf);
        dumpzip_scan_free(s);
        return NULL;
    }
    while (s->st != DZS_STOP &&
           (n = dz_pread(z->fd, buf, DZ_CHUNK, off)) > 0) {
        dumpzip_scan_feed(s, buf, (size_t)n);
        off += (uint64_t)n;
    }
    rs_free(buf);
    return s;
}

/*
 * Place the members the scan found: one that is stored, and agrees with
 * what the central directory says of it (the two views were compared,
 * dz_views_agree, or by libzip, ZIP_CHECKCONS), can be read at its data
 * offset. A name met twice is never read directly, nor bytes past the
 * file's end (a scan of other bytes than the file's: the digest would
 * refuse them anyway).
 */
static void
dz_place(struct dumpzip *z, const struct dumpzip_scan *s)
{
    struct stat st;
    if (fstat(z->fd, &st) != 0)
        return;
    for (size_t i = 0; i < s->n; i++) {
        const struct dz_local *l = &s->v[i];
        zip_int64_t idx = zip_name_locate(z->main.za, s->names + l->name,
                                          ZIP_FL_ENC_RAW);
        if (idx < 0 || (zip_uint64_t)idx >= z->nmembers)
            continue;
        struct dz_member *m = &z->mem[idx];
        if (m->scanned) {
            m->direct = false;
            continue;
        }
        m->scanned = true;
        m->direct = m->stored && !m->encrypted && (l->flags & 0x1) == 0 &&
                    l->method == ZIP_CM_STORE && l->csize == l->usize &&
                    l->usize == m->size && l->crc == m->crc &&
                    l->data <= (uint64_t)st.st_size &&
                    l->csize <= (uint64_t)st.st_size - l->data;
        m->data_off = l->data;
    }
}

/* Open z's package (z->path) with libzip's flags, its descriptor in
 * z->fd, and check every member against the limits. 0, or an error with
 * err (what was opened stays for dz_free). */
static int
dz_open_za(struct dumpzip *z, int flags, char *err, size_t errsz)
{
    int ze = 0;

    z->main.za = dz_zip_open(z->path, flags, &ze, &z->fd);
    if (z->main.za == NULL) {
        zip_error_t e;
        zip_error_init_with_code(&e, ze);
        if (ze == ZIP_ER_NOZIP)
            dz_msg(err, errsz, "not a ZIP file (or a truncated one)");
        else if (ze == ZIP_ER_EXISTS)
            dz_msg(err, errsz, "two members of the ZIP have the same name");
        else if (ze == ZIP_ER_INCONS)
            dz_msg(err, errsz, "damaged ZIP: its headers disagree (%s)",
                   zip_error_strerror(&e));
        else
            dz_msg(err, errsz, "%s", zip_error_strerror(&e));
        zip_error_fini(&e);
        return dz_zip_rc(ze);
    }
    return dz_check_members(z, err, errsz);
}

/* Undo dz_open_za. */
static void
dz_close_za(struct dumpzip *z)
{
    zip_discard(z->main.za);
    z->main.za = NULL;
    if (z->fd >= 0)
        close(z->fd);
    z->fd = -1;
    rs_free(z->mem);
    z->mem = NULL;
    z->nmembers = 0;
}

/*
 * Whether the package's two views agree: the local headers as the scan
 * met them front to back, and the central directory, member for member in
 * the same order, of the same names (each once), methods, sizes, CRCs and
 * encryption. Two views of one package are how ZIP tricks fool one reader
 * but not another; libzip's ZIP_CHECKCONS compares them too, but reading
 * every local header again through the file (seek, read, parse, allocate:
 * three quarters of the directory's reading at 2,500 members). When they
 * do not agree (or the scan could not follow the package: a data
 * descriptor, an archive written out of order) libzip compares them
 * itself. The offsets the directory gives are not compared (libzip does
 * not say them): a member read through libzip at another header's place
 * fails its CRC, one read directly is read where the scan found it, and
 * every member's bytes are checked against the manifest's digest.
 */
static bool
dz_views_agree(struct dumpzip *z, const struct dumpzip_scan *s)
{
    if (s == NULL || s->n != z->nmembers)
        return false;
    for (size_t i = 0; i < s->n; i++) {
        const struct dz_local *l = &s->v[i];
        const struct dz_member *m = &z->mem[i];
        const char *raw = zip_get_name(z->main.za, i, ZIP_FL_ENC_RAW);
        if (raw == NULL || strcmp(raw, s->names + l->name) != 0 ||
            zip_name_locate(z->main.za, raw, ZIP_FL_ENC_RAW) !=
                (zip_int64_t)i)
            return false;             /* another name, or one met twice */
        if (l->method != m->method || l->csize != m->csize ||
            l->usize != m->size || l->crc != m->crc ||
            ((l->flags & 0x1) != 0) != m->encrypted)
            return false;
    }
    return true;
}

int
dumpzip_open(const char *zip_path, const struct dumpzip_limits *lim,
             struct dumpzip **out, char *err, size_t errsz)
{
    return dumpzip_open_scanned(zip_path, lim, NULL, out, err, errsz);
}

int
dumpzip_open_scanned(const char *zip_path, const struct dumpzip_limits *lim,
                     const struct dumpzip_scan *scan, struct dumpzip **out,
                     char *err, size_t errsz)
{
    int rc = 0;
    *out = NULL;
    dz_msg(err, errsz, "%s", "");
    struct dumpzip *z = rs_calloc(1, sizeof(*z));
    if (z == NULL) {
        dz_msg(err, errsz, "out of memory");
        return RS_ENOMEM;
    }
    z->fd = -1;
    dz_limits(&z->lim, lim);
    rs_head_init(&z->head);

    if ((z->path = rs_strdup(zip_path)) == NULL) {
        dz_msg(err, errsz, "out of memory");
        rc = RS_ENOMEM;
        goto out;
    }
    z->main.z = z;
    /* The central directory alone first; the views compared below */
    rc = dz_open_za(z, ZIP_RDONLY, err, errsz);
    if (rc != 0)
        goto out;
    /* the members read directly are read through z->fd: the file libzip
     * read, even if the path is replaced */
    struct dumpzip_scan *own = scan == NULL && z->fd >= 0 ? dz_scan_file(z)
                                                        : NULL;
    const struct dumpzip_scan *seen = scan != NULL ? scan : own;
    if (!dz_views_agree(z, seen)) {
        /* libzip's own comparison, header by header, says what is wrong
         * (or finds them consistent: a package the scan cannot follow) */
        dz_close_za(z);
        rc = dz_open_za(z, ZIP_RDONLY | ZIP_CHECKCONS, err, errsz);
    }
    if (rc == 0 && z->fd >= 0 && seen != NULL)
        dz_place(z, seen);
    dumpzip_scan_free(own);
    if (rc != 0)
        goto out;

    zip_int64_t mi = zip_name_locate(z->main.za, dz_manifest_name, 0);
    if (mi < 0) {
        rc = RS_EINVALID;
        dz_msg(err, errsz, "the package has no %s", dz_manifest_name);
        goto out;
    }
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(z->main.za, (zip_uint64_t)mi, 0, &st) != 0) {
        rc = dz_zip_rc(zip_error_code_zip(zip_get_error(z->main.za)));
        dz_msg(err, errsz, "%s: %s", dz_manifest_name,
               zip_strerror(z->main.za));
        goto out;
    }
    if ((st.valid & ZIP_STAT_ENCRYPTION_METHOD) &&
        st.encryption_method != ZIP_EM_NONE) {
        rc = RS_EUNSUPPORTED;
        dz_msg(err, errsz, "%s is encrypted", dz_manifest_name);
        goto out;
    }
    if (st.size > z->lim.max_manifest_bytes) {
        rc = RS_ETOOBIG;
        dz_msg(err, errsz, "%s declares %" PRIu64 " bytes, over the limit "
               "of %zu", dz_manifest_name, (uint64_t)st.size,
               z->lim.max_manifest_bytes);
        goto out;
    }
    rc = dz_read_manifest(z, (zip_uint64_t)mi, st.size, err, errsz);
out:
    if (rc != 0) {
        dumpzip_close(z);
        return rc;
    }
    *out = z;
    return 0;
}

static void
dz_free(struct dumpzip *z)
{
    if (z->main.za != NULL)
        zip_discard(z->main.za);
    if (z->fd >= 0)
        close(z->fd);
    rs_free(z->main.win.buf);
    rs_free(z->mem);
    rs_free(z->path);
    rs_free(z->entries);
    rs_free(z->member);
    dz_pool_free(z->pool);
    rs_free(z);
}

void
dumpzip_close(struct dumpzip *z)
{
    if (z == NULL)
        return;
    /* A file still open reads from the archive: it keeps z alive, and
     * the last dumpzip_file_close frees it. */
    z->closing = true;
    if (z->main.open_files == 0)
        dz_free(z);
}

const struct rs_head *
dumpzip_head(const struct dumpzip *z)
{
    return &z->head;
}

size_t
dumpzip_count(const struct dumpzip *z)
{
    return z->n;
}

const struct rs_entry *
dumpzip_entry(const struct dumpzip *z, size_t i)
{
    return i < z->n ? &z->entries[i] : NULL;
}
