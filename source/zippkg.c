/*
 * zippkg.c - a dump package through libzip (see zippkg.h). libzip pulls
 * every source when the archive is closed, in index order: the member
 * callbacks below turn those pulls into the caller's open/read/close, and
 * the manifest's into one call once every member has been closed (checked,
 * not assumed).
 */
#include "zippkg.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "rs_alloc.h"
#include "rs_doc.h"

struct zp_write;

struct zp_member {
    struct zp_write *w;
    size_t i;
    bool done;                   /* read to its end and closed once */
    bool gone;                   /* ops->open said ZIPPKG_GONE */
};

struct zp_write {
    const struct zippkg_ops *ops;
    void *ud;
    struct zp_member *m;         /* n slots */
    size_t n, closed, gone;
    const char *man;             /* the caller's, from ops->manifest */
    size_t man_len, man_pos;
    zip_error_t zerr;
    bool failed;                 /* a callback failed: libzip may go on
                                    after a failed close, we do not */
    char why[ZIPPKG_WHY];        /* the first failure's */
};

static zip_int64_t
zp_fail(struct zp_write *w, int ze, int rc)
{
    if (w->why[0] == '\0')
        snprintf(w->why, sizeof(w->why), "%s", rs_strerror(rc));
    w->failed = true;
    zip_error_set(&w->zerr, ze, 0);
    return -1;
}

static zip_int64_t
zp_common(struct zp_write *w, void *data, zip_uint64_t len,
          zip_source_cmd_t cmd)
{
    switch (cmd) {
    case ZIP_SOURCE_STAT:
        /* no size: it is whatever the reads give */
        zip_stat_init(data);
        return sizeof(zip_stat_t);
    case ZIP_SOURCE_ERROR:
        return zip_error_to_data(&w->zerr, data, len);
    case ZIP_SOURCE_FREE:
        return 0;
    case ZIP_SOURCE_SUPPORTS:
        return zip_source_make_command_bitmap(ZIP_SOURCE_OPEN,
                   ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT,
                   ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE, -1);
    default:
        zip_error_set(&w->zerr, ZIP_ER_OPNOTSUPP, 0);
        return -1;
    }
}

static zip_int64_t
zp_member_cb(void *ud, void *data, zip_uint64_t len, zip_source_cmd_t cmd)
{
    struct zp_member *m = ud;
    struct zp_write *w = m->w;
    ssize_t k;
    int rc;

    switch (cmd) {
    case ZIP_SOURCE_OPEN:
        if (w->ops->stopped != NULL && w->ops->stopped(w->ud)) {
            if (w->why[0] == '\0')
                snprintf(w->why, sizeof(w->why), "stopped");
            return zp_fail(w, ZIP_ER_CANCELLED, RS_ECANCELED);
        }
        rc = w->ops->open(w->ud, m->i, w->why);
        if (rc == ZIPPKG_GONE) {
            if (!m->gone)
                w->gone++;
            m->gone = true;
            return 0;
        }
        if (rc != 0)
            return zp_fail(w, ZIP_ER_OPEN, rc);
        return 0;
    case ZIP_SOURCE_READ:
        k = w->ops->read(w->ud, m->i, data, (size_t)len, w->why);
        if (k < 0)
            return zp_fail(w, ZIP_ER_READ, (int)k);
        return k;
    case ZIP_SOURCE_CLOSE:
        if ((rc = w->ops->close(w->ud, m->i, w->why)) != 0)
            return zp_fail(w, ZIP_ER_READ, rc);
        if (!m->done) {
            m->done = true;
            w->closed++;
        }
        return 0;
    default:
        return zp_common(w, data, len, cmd);
    }
}

static zip_int64_t
zp_man_cb(void *ud, void *data, zip_uint64_t len, zip_source_cmd_t cmd)
{
    struct zp_write *w = ud;
    size_t k;
    int rc;

    switch (cmd) {
    case ZIP_SOURCE_OPEN:
        /* libzip writes entries in index order and the manifest is the
         * last: every member has been read. Checked, not assumed. */
        if (w->failed)
            return zp_fail(w, ZIP_ER_INTERNAL, RS_EIO);
        if (w->closed != w->n) {
            snprintf(w->why, sizeof(w->why), "the manifest was asked for "
                     "before its members were written");
            return zp_fail(w, ZIP_ER_INTERNAL, RS_ESTATE);
        }
        w->man_pos = 0;
        if ((rc = w->ops->manifest(w->ud, &w->man, &w->man_len,
                                   w->why)) != 0)
            return zp_fail(w, ZIP_ER_INTERNAL, rc);
        return 0;
    case ZIP_SOURCE_READ:
        k = w->man_len - w->man_pos < len ? w->man_len - w->man_pos : len;
        memcpy(data, w->man + w->man_pos, k);
        w->man_pos += k;
        return (zip_int64_t)k;
    case ZIP_SOURCE_CLOSE:
        return 0;
    default:
        return zp_common(w, data, len, cmd);
    }
}

/* Take the members found gone out of the written package. libzip cannot
 * leave out a member once it is being written (the file is opened when
 * libzip pulls its source), so the archive is opened again and they are
 * deleted: libzip then copies the other entries, stored and deflated
 * alike, as they are. A file deleted in the middle of a build is rare;
 * the copy it costs then is the price of a package that holds only what
 * its manifest lists. */
static int
zp_drop_gone(const struct zp_write *w, const char *path, char *err,
             size_t errsz)
{
    zip_error_t ze;
    int zrc, rc = 0;
    zip_t *za = zip_open(path, 0, &zrc);

    if (za == NULL) {
        zip_error_init_with_code(&ze, zrc);
        snprintf(err, errsz, "%.100s: %.150s", path, zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return RS_EIO;
    }
    for (size_t i = 0; i < w->n && rc == 0; i++)
        if (w->m[i].gone && zip_delete(za, (zip_uint64_t)i) != 0)
            rc = RS_EIO;
    if (rc == 0 && zip_close(za) != 0)
        rc = RS_EIO;
    if (rc != 0) {
        snprintf(err, errsz, "%.100s: %.150s", path, zip_strerror(za));
        zip_discard(za);
    }
    return rc;
}

int
zippkg_write(const char *path, const char *const *names, size_t n,
             const struct zippkg_ops *ops, void *ud, uint64_t *size,
             char *err, size_t errsz)
{
    struct zp_write w = { .ops = ops, .ud = ud, .n = n };
    zip_t *za;
    zip_source_t *src;
    zip_error_t ze;
    zip_int64_t idx;
    struct stat st;
    int zrc, rc = 0;

    zip_error_init(&w.zerr);
    if ((w.m = rs_calloc(n > 0 ? n : 1, sizeof(*w.m))) == NULL) {
        snprintf(err, errsz, "out of memory");
        return RS_ENOMEM;
    }
    za = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &zrc);
    if (za == NULL) {
        zip_error_init_with_code(&ze, zrc);
        snprintf(err, errsz, "%.100s: %.150s", path, zip_error_strerror(&ze));
        zip_error_fini(&ze);
        rs_free(w.m);
        return RS_EIO;
    }
    for (size_t i = 0; i <= n && rc == 0; i++) {
        bool man = i == n;
        if (!man)
            w.m[i] = (struct zp_member){ .w = &w, .i = i };
        src = man ? zip_source_function(za, zp_man_cb, &w)
                  : zip_source_function(za, zp_member_cb, &w.m[i]);
        if (src == NULL) {
            rc = RS_ENOMEM;
        } else if ((idx = zip_file_add(za, man ? ZIPPKG_MANIFEST : names[i],
                                       src, ZIP_FL_ENC_UTF_8)) < 0) {
            zip_source_free(src);      /* not taken by za */
            rc = RS_EIO;
        /* Members are stored: most bytes a Source holds in bulk are
         * compressed already (images, archives, PDFs), deflate would cost
         * the Source's CPU at every build and each Destination's at every
         * unpack, and stored members keep a package's size equal to its
         * content's, which is what --dump-max-bytes bounds. The manifest
         * is XML and deflates well; at level 1 rather than libzip's 9 it
         * is 9% larger (a third of a percent of a package of small files)
         * and inflates in 27% less time, which a Destination spends before
         * it can write the package's first file. */
        } else if (zip_set_file_compression(za, (zip_uint64_t)idx,
                                            man ? ZIP_CM_DEFLATE : ZIP_CM_STORE,
                                            man ? 1 : 0) != 0) {
            rc = RS_EIO;
        }
        if (rc != 0)
            snprintf(err, errsz, "%.100s: %.150s", path, zip_strerror(za));
    }
    if (rc != 0) {
        zip_discard(za);
        goto out;
    }
    if (zip_close(za) != 0) {
        snprintf(err, errsz, "%.100s: %.150s", path,
                 w.why[0] != '\0' ? w.why : zip_strerror(za));
        zip_discard(za);
        rc = RS_EIO;
        goto out;
    }
    if (w.gone > 0 && (rc = zp_drop_gone(&w, path, err, errsz)) != 0)
        goto out;
    if (stat(path, &st) != 0) {
        snprintf(err, errsz, "%.100s: %.150s", path, strerror(errno));
        rc = RS_EIO;
        goto out;
    }
    *size = (uint64_t)st.st_size;
out:
    if (rc != 0)
        unlink(path);
    zip_error_fini(&w.zerr);
    rs_free(w.m);
    return rc;
}

int
zippkg_man_put(void *ud, const char *buf, size_t len)
{
    struct zippkg_man *m = ud;

    if (m->len + len > RS_MAX_DOC_BYTES)
        return RS_ETOOBIG;
    if (m->len + len > m->cap) {
        size_t cap = m->cap ? m->cap : 65536;
        while (cap < m->len + len)
            cap *= 2;
        char *n = rs_realloc(m->buf, cap);
        if (n == NULL)
            return RS_ENOMEM;
        m->buf = n;
        m->cap = cap;
    }
    memcpy(m->buf + m->len, buf, len);
    m->len += len;
    return 0;
}

int
zippkg_man_save(const struct zippkg_man *m, const char *path, char *err,
                size_t errsz)
{
    char tmp[4416];
    FILE *f;
    int rc = 0;

    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
        snprintf(err, errsz, "%.100s: a path too long", path);
        return RS_EIO;
    }
    if ((f = fopen(tmp, "we")) == NULL) {
        snprintf(err, errsz, "%.100s: %.150s", tmp, strerror(errno));
        return RS_EIO;
    }
    if (fwrite(m->buf, 1, m->len, f) != m->len)
        rc = RS_EIO;
    if (fclose(f) != 0)
        rc = RS_EIO;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = RS_EIO;
    if (rc != 0) {
        snprintf(err, errsz, "%.100s: %.150s", path, strerror(errno));
        unlink(tmp);
    }
    return rc;
}

void
zippkg_man_free(struct zippkg_man *m)
{
    rs_free(m->buf);
    m->buf = NULL;
    m->len = m->cap = 0;
}
