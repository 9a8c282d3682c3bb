/*
 * tree.c - the served directory: path policy (what may be listed and
 * served), opening beneath the root without symlink escapes, the sorted
 * walk, and the URL path <-> relative path mapping. Knows nothing of
 * hashes, state or HTTP.
 */
#include "tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rs_alloc.h"
#include "rs_hex.h"

struct tree {
    int rootfd;            /* O_DIRECTORY, owned */
    char *root;            /* realpath of the root */
    char **seg_pats;       /* patterns without '/': matched per segment */
    size_t nseg_pats;
    char **path_pats;      /* patterns with '/': matched per path prefix */
    size_t npath_pats;
    bool follow;
};

/* ------------------------------------------------------------- policy */

static bool
seg_has_ctl(const char *seg, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)seg[i];
        if (c < 0x20 || c == 0x7f)
            return true;
    }
    return false;
}

static bool
seg_is_bad(const char *seg, size_t n, bool top)
{
    if (n == 0 || seg[0] == '.')      /* "", ".", "..", hidden */
        return true;
    if (seg_has_ctl(seg, n))
        return true;
    return top && n == sizeof(TREE_RESERVED) - 1 &&
           memcmp(seg, TREE_RESERVED, n) == 0;
}

/* The checks for the last segment of path (its parents were checked when
 * they were visited). seg points into path. */
static bool
tree_last_ok(const struct tree *t, const char *path, const char *seg,
             size_t n)
{
    if (seg_is_bad(seg, n, seg == path))
        return false;
    if (t->nseg_pats > 0) {
        char name[NAME_MAX + 1];
        if (n > NAME_MAX)
            return false;
        memcpy(name, seg, n);
        name[n] = '\0';
        for (size_t i = 0; i < t->nseg_pats; i++)
            if (fnmatch(t->seg_pats[i], name, FNM_PERIOD) == 0)
                return false;
    }
    if (t->npath_pats > 0) {
        size_t plen = (size_t)(seg - path) + n;
        char buf[TREE_PATH_MAX];
        if (plen >= sizeof(buf))
            return false;
        memcpy(buf, path, plen);
        buf[plen] = '\0';
        for (size_t i = 0; i < t->npath_pats; i++)
            if (fnmatch(t->path_pats[i], buf, FNM_PATHNAME | FNM_PERIOD) == 0)
                return false;
    }
    return true;
}

#define TREE_STR_(x) #x
#define TREE_STR(x) TREE_STR_(x)
#define TREE_WHY_CTL "a control character in a name: never listed"
#define TREE_WHY_DEEP "deeper than " TREE_STR(TREE_DEPTH_MAX) \
                      " levels: what it holds is never listed"
#define TREE_WHY_LONG "a path of " TREE_STR(TREE_PATH_MAX) \
                      " bytes or more: never listed"
#define TREE_WHY_ALIAS "a symlink into the tree: not followed, what it " \
                       "points to is listed under its own name"

const char *
tree_path_problem(const struct tree *t, const char *rel)
{
    if (rel == NULL || rel[0] == '\0')
        return NULL;
    const char *seg = rel;
    unsigned depth = 0;
    for (;;) {
        const char *slash = strchr(seg, '/');
        size_t n = slash != NULL ? (size_t)(slash - seg) : strlen(seg);
        if (n == 0 || seg[0] == '.')
            return NULL;                  /* hidden (or not a path) */
        if (seg_has_ctl(seg, n))
            return TREE_WHY_CTL;
        if (++depth > TREE_DEPTH_MAX)
            return TREE_WHY_DEEP;
        if ((size_t)(seg - rel) + n >= TREE_PATH_MAX)
            return TREE_WHY_LONG;
        if (!tree_last_ok(t, rel, seg, n))
            return NULL;                  /* excluded or reserved */
        if (slash == NULL)
            return NULL;
        seg = slash + 1;
    }
}

bool
tree_path_ok(const struct tree *t, const char *rel)
{
    if (rel == NULL || rel[0] == '\0' || strlen(rel) >= TREE_PATH_MAX)
        return false;
    const char *seg = rel;
    unsigned depth = 0;
    for (;;) {
        const char *slash = strchr(seg, '/');
        size_t n = slash != NULL ? (size_t)(slash - seg) : strlen(seg);
        if (++depth > TREE_DEPTH_MAX || !tree_last_ok(t, rel, seg, n))
            return false;
        if (slash == NULL)
            return true;
        seg = slash + 1;
    }
}

/* ------------------------------------------------------------ open/free */

static int
pats_add(char ***arr, size_t *n, const char *p)
{
    char **na = rs_realloc(*arr, (*n + 1) * sizeof(*na));
    if (na == NULL)
        return RS_ENOMEM;
    *arr = na;
    na[*n] = rs_strdup(p);
    if (na[*n] == NULL)
        return RS_ENOMEM;
    (*n)++;
    return 0;
}

int
tree_open(const struct tree_opts *o, struct tree **out, char *err,
          size_t errlen)
{
    int rc = RS_ENOMEM;
    *out = NULL;
    struct tree *t = rs_calloc(1, sizeof(*t));
    if (t == NULL) {
        snprintf(err, errlen, "out of memory");
        return RS_ENOMEM;
    }
    t->rootfd = -1;
    t->follow = o->follow_symlinks;
    char *rp = realpath(o->dir, NULL);
    if (rp == NULL) {
        snprintf(err, errlen, "%s: %s", o->dir, strerror(errno));
        rc = RS_EINVAL;
        goto out;
    }
    t->root = rs_strdup(rp);
    free(rp);
    if (t->root == NULL)
        goto nomem;
    t->rootfd = open(t->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (t->rootfd < 0) {
        snprintf(err, errlen, "%s: %s", t->root, strerror(errno));
        rc = errno == ENOTDIR ? RS_EINVAL : RS_EIO;
        goto out;
    }
    for (const char *const *p = o->excludes; p != NULL && *p != NULL; p++) {
        if ((*p)[0] == '\0' || strlen(*p) >= TREE_PATH_MAX) {
            snprintf(err, errlen, "--exclude: empty or overlong pattern");
            rc = RS_EINVAL;
            goto out;
        }
        /* A leading "/" anchors a pattern at the root, as in .gitignore.
         * A trailing one (".gitignore"'s "a directory") is dropped: no
         * name ends with "/", so kept, it matched nothing; dropped, the
         * pattern matches files of that name too. */
        char pat[TREE_PATH_MAX];
        size_t len = strlen(*p);
        while (len > 0 && (*p)[len - 1] == '/')
            len--;
        size_t lead = (*p)[0] == '/' ? 1 : 0;
        if (len <= lead) {
            snprintf(err, errlen, "--exclude: \"%s\" matches no name", *p);
            rc = RS_EINVAL;
            goto out;
        }
        memcpy(pat, *p + lead, len - lead);
        pat[len - lead] = '\0';
        bool path = lead == 1 || strchr(pat, '/') != NULL;
        if ((path ? pats_add(&t->path_pats, &t->npath_pats, pat)
                  : pats_add(&t->seg_pats, &t->nseg_pats, pat)) != 0)
            goto nomem;
    }
    *out = t;
    return 0;
nomem:
    snprintf(err, errlen, "out of memory");
    rc = RS_ENOMEM;
out:
    tree_free(t);
    return rc;
}

void
tree_free(struct tree *t)
{
    if (t == NULL)
        return;
    if (t->rootfd >= 0)
        close(t->rootfd);
    for (size_t i = 0; i < t->nseg_pats; i++)
        rs_free(t->seg_pats[i]);
    for (size_t i = 0; i < t->npath_pats; i++)
        rs_free(t->path_pats[i]);
    rs_free(t->seg_pats);
    rs_free(t->path_pats);
    rs_free(t->root);
    rs_free(t);
}

const char *
tree_root(const struct tree *t)
{
    return t->root;
}

bool
tree_follows_symlinks(const struct tree *t)
{
    return t->follow;
}

bool
tree_root_gone(const struct tree *t)
{
    struct stat st;
    return fstat(t->rootfd, &st) == 0 && st.st_nlink == 0;
}

int64_t
tree_mtime_ns(const struct stat *st)
{
    /* whole seconds that fit, either way, with any nanoseconds added */
    const int64_t max_s = INT64_MAX / 1000000000;
    int64_t s = (int64_t)st->st_mtim.tv_sec;
    int64_t ns = (int64_t)st->st_mtim.tv_nsec;
    if (s > max_s || (s == max_s && ns > INT64_MAX % 1000000000))
        return INT64_MAX;
    if (s < -max_s)
        return INT64_MIN;
    return s * 1000000000 + ns;
}

/* ------------------------------------------------------ beneath the root */

static int
errno_rc(int e)
{
    return e == ENOENT || e == ENOTDIR || e == ELOOP || e == ENAMETOOLONG
               ? RS_ENOTFOUND
               : RS_EIO;
}

/* openat2(2) is missing before Linux 5.6 and may be refused by a seccomp
 * filter; then the walk one component at a time is used for good. Shared
 * by every tree of the process (dumpw's thread opens files too). */
static atomic_bool no_openat2;

void
tree_set_openat2(bool on)
{
    atomic_store(&no_openat2, !on);
}

/*
 * The first n bytes of a relative path opened in one call with flags, the
 * kernel refusing symlinks and anything outside the root (RESOLVE_BENEATH).
 * The policy (no "..", no hidden names) was checked already. Returns the
 * fd, a negative RS_E*, or RS_EAGAIN when the walk must be used instead
 * (no openat2, or a rename raced the lookup).
 */
static int
open_beneath(const struct tree *t, const char *rel, size_t n, int flags)
{
    char path[TREE_PATH_MAX];
    if (n >= sizeof(path))
        return RS_ENOTFOUND;
    memcpy(path, rel, n);
    path[n] = '\0';
    if (t->follow) {
        /* following symlinks wherever they point, as the walk does */
        int fd = openat(t->rootfd, path, flags);
        return fd >= 0 ? fd : errno_rc(errno);
    }
    if (atomic_load_explicit(&no_openat2, memory_order_relaxed))
        return RS_EAGAIN;
    struct open_how how = {
        .flags = (uint64_t)flags,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
                   RESOLVE_NO_MAGICLINKS,
    };
    long fd = syscall(SYS_openat2, t->rootfd, path, &how, sizeof(how));
    if (fd >= 0)
        return (int)fd;
    if (errno == ENOSYS || errno == EPERM || errno == E2BIG) {
        atomic_store_explicit(&no_openat2, true, memory_order_relaxed);
        return RS_EAGAIN;
    }
    if (errno == EAGAIN || errno == EXDEV)
        return RS_EAGAIN;
    return errno_rc(errno);
}

/*
 * Open the directory holding rel's last segment (O_NOFOLLOW unless
 * following) and point *last at that segment. Returns the directory fd,
 * which is t->rootfd for a top-level name (do not close it then), or a
 * negative RS_E*. One openat2 when the kernel has it; else one component
 * at a time, which costs an open and a close per level.
 */
static int
open_parent(const struct tree *t, const char *rel, const char **last)
{
    const char *slash_last = strrchr(rel, '/');
    if (slash_last == NULL) {
        *last = rel;
        return t->rootfd;
    }
    int dfd = open_beneath(t, rel, (size_t)(slash_last - rel),
                           O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd != RS_EAGAIN) {
        *last = slash_last + 1;
        return dfd;
    }
    char seg[NAME_MAX + 1];
    dfd = t->rootfd;
    const char *p = rel;
    for (const char *slash = strchr(p, '/'); slash != NULL;
         slash = strchr(p, '/')) {
        size_t n = (size_t)(slash - p);
        if (n > NAME_MAX) {
            if (dfd != t->rootfd)
                close(dfd);
            return RS_ENOTFOUND;
        }
        memcpy(seg, p, n);
        seg[n] = '\0';
        int fd = openat(dfd, seg, O_RDONLY | O_DIRECTORY | O_CLOEXEC |
                                      (t->follow ? 0 : O_NOFOLLOW));
        int e = errno;
        if (dfd != t->rootfd)
            close(dfd);
        if (fd < 0)
            return errno_rc(e);
        dfd = fd;
        p = slash + 1;
    }
    *last = p;
    return dfd;
}

/* O_NONBLOCK: opening a FIFO must not hang the loop (it is refused by
 * regular_fd); on the regular files we keep, it changes nothing. */
#define TREE_FILE_FLAGS (O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)

/* fd when it is a regular file (st filled), else closed: RS_ENOTFOUND. */
static int
regular_fd(int fd, struct stat *st)
{
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        return RS_ENOTFOUND;
    }
    return fd;
}

int
tree_open_file(const struct tree *t, const char *rel, struct stat *st)
{
    if (!tree_path_ok(t, rel))
        return RS_ENOTFOUND;
    /* The whole path in one openat2 (RESOLVE_NO_SYMLINKS covers the last
     * name as O_NOFOLLOW would): the parent's open and close cost as much
     * again, on every file served and every file hashed. */
    int fd = open_beneath(t, rel, strlen(rel),
                          TREE_FILE_FLAGS | (t->follow ? 0 : O_NOFOLLOW));
    if (fd != RS_EAGAIN)
        return fd < 0 ? fd : regular_fd(fd, st);
    const char *last;
    int dfd = open_parent(t, rel, &last);
    if (dfd < 0)
        return dfd;
    fd = tree_open_at(t, dfd, last, st);
    if (dfd != t->rootfd)
        close(dfd);
    return fd;
}

int
tree_open_at(const struct tree *t, int dirfd, const char *name,
             struct stat *st)
{
    int fd = openat(dirfd, name,
                    TREE_FILE_FLAGS | (t->follow ? 0 : O_NOFOLLOW));
    if (fd < 0)
        return errno_rc(errno);
    return regular_fd(fd, st);
}

static bool link_into_tree(const struct tree *t, int dfd, const char *name);

int
tree_stat(const struct tree *t, const char *rel, struct stat *st)
{
    if (rel[0] == '\0')
        return fstat(t->rootfd, st) == 0 ? 0 : RS_EIO;
    if (!tree_path_ok(t, rel))
        return RS_ENOTFOUND;
    const char *last;
    int dfd = open_parent(t, rel, &last);
    if (dfd < 0)
        return dfd;
    int r = fstatat(dfd, last, st, AT_SYMLINK_NOFOLLOW);
    bool alias = false;
    if (r == 0 && S_ISLNK(st->st_mode) && t->follow) {
        /* as the walk: a link into the tree is not followed */
        alias = link_into_tree(t, dfd, last);
        r = alias ? 0 : fstatat(dfd, last, st, 0);
    }
    int e = errno;
    if (dfd != t->rootfd)
        close(dfd);
    if (r != 0)
        return errno_rc(e);
    if (alias)
        return RS_ENOTFOUND;
    return S_ISREG(st->st_mode) || S_ISDIR(st->st_mode) ? 0 : RS_ENOTFOUND;
}

/* ------------------------------------------------------------------ walk */

struct dent {
    char *name;
    size_t len;
    bool dir;
    bool alias;                    /* a symlink into the tree: not followed */
    struct stat st;
};

/* A directory being walked: its fd and identity (loops are cut by it),
 * its sorted entries and the next one. */
struct frame {
    int fd;
    dev_t dev;
    ino_t ino;
    struct dent *v;
    size_t n, i;
    size_t base;                   /* the path's length at this directory */
};

struct tree_walker {
    const struct tree *t;
    const struct tree_walk_cbs *cbs;   /* of the run under way */
    void *ud;
    char path[TREE_PATH_MAX];
    size_t len;
    unsigned depth;                /* frames pushed */
    unsigned base_depth;           /* segments of sub, the first frame */
    struct frame fr[TREE_DEPTH_MAX + 1];
    int subfd;                     /* sub, until the first run enters it */
    struct stat subst;
    int err;                       /* a callback's error: the walk is over */
};

/* Path order: a directory sorts as if its name ended in '/'. */
static int
dent_cmp(const void *a, const void *b)
{
    const struct dent *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->name, y->name, n);
    if (c != 0)
        return c;
    if (x->len == y->len)
        return 0;
    /* one name is a prefix of the other: compare the next "character" */
    unsigned cx = x->len > n ? (unsigned char)x->name[n] : (x->dir ? '/' : 0);
    unsigned cy = y->len > n ? (unsigned char)y->name[n] : (y->dir ? '/' : 0);
    return cx < cy ? -1 : cx > cy ? 1 : 0;
}

static void
walk_error(struct tree_walker *w, int e)
{
    if (w->cbs->on_error != NULL)
        w->cbs->on_error(w->ud, w->path, e);
}

/* Something at (or, for TREE_WHY_LONG, in) w->path that exists and is
 * never listed although no policy leaves it out. */
static void
walk_skip(struct tree_walker *w, const char *why)
{
    if (w->cbs->on_skip != NULL)
        w->cbs->on_skip(w->ud, w->path, why);
}

/* Does the symlink name in dfd lead inside the tree (t->root is a
 * realpath)? Followed, its target would be listed twice, under two names,
 * and watched under one only (inotify gives one watch an inode): the
 * other name would go stale, and a watch could leave with the alias. */
static bool
link_into_tree(const struct tree *t, int dfd, const char *name)
{
    char proc[64 + NAME_MAX];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d/%s", dfd, name);
    char *rp = realpath(proc, NULL);
    if (rp == NULL)
        return false;
    size_t n = strlen(t->root);
    bool in = strncmp(rp, t->root, n) == 0 &&
              (rp[n] == '/' || rp[n] == '\0' || (n == 1 && t->root[0] == '/'));
    free(rp);
    return in;
}

/* Read dfd's entries that may be walked into *out (sorted). */
static int
walk_read(struct tree_walker *w, int dfd, struct dent **out, size_t *nout)
{
    int rc = 0;
    int dup = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dup >= 0 ? fdopendir(dup) : NULL;
    /* the duplicate shares dfd's offset: a walk before this one left it
     * at the end */
    if (d != NULL)
        rewinddir(d);
    struct dent *v = NULL;
    size_t n = 0, cap = 0;
    if (d == NULL) {
        if (dup >= 0)
            close(dup);
        walk_error(w, errno);
        goto out;
    }
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (de == NULL)
            break;
        const char *name = de->d_name;
        size_t len = strlen(name);
        /* hidden names (and . ..) are never listed: skip before any stat */
        if (name[0] == '.')
            continue;
        struct stat st;
        bool alias = false;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;     /* vanished meanwhile */
        if (S_ISLNK(st.st_mode)) {
            if (!w->t->follow || fstatat(dfd, name, &st, 0) != 0)
                continue;
            alias = link_into_tree(w->t, dfd, name);
        }
        if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
            continue;
        if (w->len + 1 + len >= sizeof(w->path)) {
            walk_skip(w, TREE_WHY_LONG);     /* told with its directory */
            continue;
        }
        if (n == cap) {
            size_t nc = cap != 0 ? cap * 2 : 64;
            struct dent *nv = rs_realloc(v, nc * sizeof(*nv));
            if (nv == NULL) {
                rc = RS_ENOMEM;
                goto out;
            }
            v = nv;
            cap = nc;
        }
        v[n].name = rs_strndup(name, len);
        if (v[n].name == NULL) {
            rc = RS_ENOMEM;
            goto out;
        }
        v[n].len = len;
        v[n].dir = S_ISDIR(st.st_mode);
        v[n].alias = alias;
        v[n].st = st;
        n++;
    }
    if (errno != 0)
        walk_error(w, errno);
    if (n > 1)
        qsort(v, n, sizeof(*v), dent_cmp);
out:
    if (d != NULL)
        closedir(d);
    if (rc != 0) {
        for (size_t i = 0; i < n; i++)
            rs_free(v[i].name);
        rs_free(v);
        v = NULL;
        n = 0;
    }
    *out = v;
    *nout = n;
    return rc;
}

static void
frame_pop(struct tree_walker *w)
{
    struct frame *f = &w->fr[--w->depth];
    for (size_t i = 0; i < f->n; i++)
        rs_free(f->v[i].name);
    rs_free(f->v);
    close(f->fd);
    f->fd = -1;
    w->len = w->depth > 0 ? w->fr[w->depth - 1].base : f->base;
    w->path[w->len] = '\0';
}

/* Enter the directory at w->path, open as fd (taken): on_dir, then its
 * entries as the new top frame. A loop is closed and skipped. */
static int
frame_push(struct tree_walker *w, int fd, const struct stat *st)
{
    for (unsigned i = 0; i < w->depth; i++)
        if (w->fr[i].dev == st->st_dev && w->fr[i].ino == st->st_ino) {
            close(fd);
            return 0;     /* a symlink loop */
        }
    int rc = w->cbs->on_dir != NULL ? w->cbs->on_dir(w->ud, w->path, st) : 0;
    struct frame f = { .fd = fd, .dev = st->st_dev, .ino = st->st_ino,
                       .base = w->len };
    if (rc == 0)
        rc = walk_read(w, fd, &f.v, &f.n);
    if (rc != 0) {
        close(fd);
        return rc;
    }
    w->fr[w->depth++] = f;
    return 0;
}

int
tree_walker_new(const struct tree *t, const char *sub, struct tree_walker **out)
{
    *out = NULL;
    struct tree_walker *w = rs_calloc(1, sizeof(*w));
    if (w == NULL)
        return RS_ENOMEM;
    w->t = t;
    w->subfd = -1;
    if (sub[0] == '\0') {
        w->subfd = fcntl(t->rootfd, F_DUPFD_CLOEXEC, 0);
    } else {
        size_t n = strlen(sub);
        if (n >= sizeof(w->path) || !tree_path_ok(t, sub))
            goto out;     /* nothing to walk */
        memcpy(w->path, sub, n + 1);
        w->len = n;
        w->base_depth = 1;
        for (const char *p = sub; *p != '\0'; p++)
            w->base_depth += *p == '/';
        const char *last;
        int dfd = open_parent(t, sub, &last);
        if (dfd < 0)
            goto out;     /* gone: nothing to walk */
        w->subfd = openat(dfd, last, O_RDONLY | O_DIRECTORY | O_CLOEXEC |
                                         (t->follow ? 0 : O_NOFOLLOW));
        if (dfd != t->rootfd)
            close(dfd);
    }
    if (w->subfd >= 0 && fstat(w->subfd, &w->subst) != 0) {
        close(w->subfd);
        w->subfd = -1;
    }
out:
    *out = w;
    return 0;
}

int
tree_walker_run(struct tree_walker *w, const struct tree_walk_cbs *cbs,
                void *ud, size_t budget)
{
    if (w->err != 0)
        return w->err;
    w->cbs = cbs;
    w->ud = ud;
    int rc = 0;
    if (w->subfd >= 0) {
        int fd = w->subfd;
        w->subfd = -1;
        if (w->base_depth >= TREE_DEPTH_MAX) {
            /* a directory at the last level: its entries are too deep */
            close(fd);
            walk_skip(w, TREE_WHY_DEEP);
        } else {
            rc = frame_push(w, fd, &w->subst);
        }
    }
    size_t files = 0;
    while (rc == 0 && w->depth > 0) {
        struct frame *f = &w->fr[w->depth - 1];
        if (f->i == f->n) {
            frame_pop(w);
            continue;
        }
        if (budget != 0 && files >= budget)
            return 0;
        struct dent *d = &f->v[f->i++];
        size_t at = f->base;
        if (at > 0)
            w->path[at++] = '/';
        memcpy(w->path + at, d->name, d->len + 1);
        w->len = at + d->len;
        if (!tree_last_ok(w->t, w->path, w->path + at, d->len)) {
            /* left out by policy; or a name no URI policy allows */
            if (seg_has_ctl(d->name, d->len))
                walk_skip(w, TREE_WHY_CTL);
        } else if (d->alias) {
            walk_skip(w, TREE_WHY_ALIAS);
        } else if (!d->dir) {
            files++;
            if (cbs->on_file != NULL)
                rc = cbs->on_file(ud, w->path, &d->st, f->fd, d->name);
        } else if (w->base_depth + w->depth >= TREE_DEPTH_MAX) {
            /* its entries would be deeper than tree_path_ok allows
             * (counted from the root, also when the walk began below) */
            walk_skip(w, TREE_WHY_DEEP);
        } else {
            int fd = openat(f->fd, d->name, O_RDONLY | O_DIRECTORY | O_CLOEXEC |
                                                (w->t->follow ? 0 : O_NOFOLLOW));
            unsigned was = w->depth;
            if (fd < 0)
                walk_error(w, errno);
            else if ((rc = frame_push(w, fd, &d->st)) == 0 && w->depth > was)
                continue;   /* entered: the path stays its own */
        }
        w->len = f->base;
        w->path[w->len] = '\0';
    }
    if (rc != 0) {
        w->err = rc;
        return rc;
    }
    return 1;
}

void
tree_walker_free(struct tree_walker *w)
{
    if (w == NULL)
        return;
    while (w->depth > 0)
        frame_pop(w);
    if (w->subfd >= 0)
        close(w->subfd);
    rs_free(w);
}

int
tree_walk(const struct tree *t, const char *sub,
          const struct tree_walk_cbs *cbs, void *ud)
{
    struct tree_walker *w;
    int rc = tree_walker_new(t, sub, &w);
    if (rc != 0)
        return rc;
    rc = tree_walker_run(w, cbs, ud, 0);
    tree_walker_free(w);
    return rc == 1 ? 0 : rc;
}

/* ------------------------------------------------------------------ URLs */

static bool
url_plain(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
           c == '~' || c == '/';
}

int
tree_url_encode(const char *rel, char *buf, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)rel; *p; p++) {
        if (url_plain(*p)) {
            if (o + 1 >= len)
                return RS_ETOOBIG;
            buf[o++] = (char)*p;
        } else {
            if (o + 3 >= len)
                return RS_ETOOBIG;
            buf[o++] = '%';
            buf[o++] = hex[*p >> 4];
            buf[o++] = hex[*p & 15];
        }
    }
    if (o >= len)
        return RS_ETOOBIG;
    buf[o] = '\0';
    return (int)o;
}

int
tree_url_decode(const char *path, char *buf, size_t len)
{
    size_t o = 0;
    for (const char *p = path; *p; p++) {
        char c = *p;
        if (c == '%') {
            int hi = rs_hexval(p[1]), lo = hi >= 0 ? rs_hexval(p[2]) : -1;
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                return RS_EINVAL;
            c = (char)(hi * 16 + lo);
            p += 2;
        }
        if (o + 1 >= len)
            return RS_ETOOBIG;
        buf[o++] = c;
    }
    if (o >= len)
        return RS_ETOOBIG;
    buf[o] = '\0';
    return 0;
}
