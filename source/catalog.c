/*
 * catalog.c - observations -> catalog rows and change records (see
 * catalog.h). Layers: file identity and hashing, the decision for one
 * file, deletion of a path and what was beneath it, and the merge scan.
 */
#include "catalog.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "hashwork.h"
#include "mime.h"
#include "rs_alloc.h"
#include "rs_hash.h"

#define CATALOG_READ_BUF (256 * 1024)
#define CATALOG_SLICE 5000      /* writes per transaction in a long scan */
#define CATALOG_SWEEP_CHUNK 1000

struct catalog {
    struct catalog_opts o;
    struct state *reader;      /* the scan's snapshot of the rows; lazily */
    struct rs_hasher *hasher;
    uint8_t *buf;
    struct catalog_stats stats;
    unsigned slice;            /* writes since the scan's last commit */
    bool in_scan;
    struct scan *steps;        /* the whole-tree scan in steps; NULL: none */
    /* --dump: capture what hash_file reads (cap_want, set per file by
     * observe_file); a whole read leaves its capture pending until the
     * change is recorded (cap_ok, with where it went) */
    bool cap_want, cap_ok;
    int hash_errno;            /* hash_file's failing call's errno */
    int64_t cap_list, cap_off, cap_len;
    /* catalog_digests_known: a ring, oldest overwritten; size < 0: free */
    struct state_res known[CATALOG_KNOWN_MAX];
    size_t known_next;
    size_t known_live;         /* entries not free: 0 skips the search */
};

/* -------------------------------------------------- identity and hashing */

static void
identity_from(struct state_res *r, const struct stat *st)
{
    r->dev = (int64_t)st->st_dev;
    r->ino = (int64_t)st->st_ino;
    r->size = (int64_t)st->st_size;
    r->mtime_ns = tree_mtime_ns(st);
}

static bool
identity_eq(const struct state_res *a, const struct state_res *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime_ns == b->mtime_ns;
}

static void
problem(struct catalog *c, const char *rel, const char *what, int e)
{
    c->stats.problems++;
    if (c->o.hooks.on_problem != NULL)
        c->o.hooks.on_problem(c->o.hooks.ud, rel, what, e);
}

/* Where a file is: its relative path, and during a scan also the open
 * directory holding it (dirfd < 0: none). */
struct at {
    int dirfd;
    const char *name;
};

static void
capture_chunk(void *ud, const void *p, size_t n)
{
    changedump_capture_write(ud, p, n);
}

/* Read the file and fill r's identity (as of the open) and digests.
 * RS_EAGAIN when it changed while being read. */
static int
hash_file(struct catalog *c, const char *rel, const struct at *at,
          struct state_res *r)
{
    struct stat st;
    int fd = at != NULL && at->dirfd >= 0
                 ? tree_open_at(c->o.tree, at->dirfd, at->name, &st)
                 : tree_open_file(c->o.tree, rel, &st);
    c->hash_errno = errno;
    if (fd < 0)
        return fd;
    identity_from(r, &st);
    bool cap = c->cap_want &&
               changedump_capture_begin(c->o.cdump, changelog_current(c->o.cl),
                                        (int64_t)st.st_size);
    uint64_t total = 0;
    int rc = hashwork_digest_fd(fd, &st, c->hasher, c->buf, CATALOG_READ_BUF,
                                cap ? capture_chunk : NULL, c->o.cdump, NULL,
                                r->md5, r->sha256, &total);
    if (rc == RS_EIO)
        c->hash_errno = errno;        /* told by the caller */
    close(fd);
    /* only a whole, unchanged read is the content the digests are of */
    if (cap)
        c->cap_ok = changedump_capture_end(c->o.cdump, rc == 0, &c->cap_list,
                                           &c->cap_off, &c->cap_len);
    if (rc != 0)
        return rc;
    r->hashed = true;
    c->stats.hashed++;
    c->stats.hashed_bytes += total;
    return 0;
}

/* The hash cache: digests of any row with r's identity, first among the
 * writer's rows, then (during a scan) the snapshot's, which still holds a
 * row the scan has already deleted: a file moved while rssource was down
 * is not read again. */
static bool
cache_lookup(struct catalog *c, struct state_res *r)
{
    struct state_res hit;
    for (size_t i = 0; c->known_live > 0 && i < CATALOG_KNOWN_MAX; i++) {
        struct state_res *k = &c->known[i];
        if (k->size >= 0 && identity_eq(k, r)) {
            memcpy(r->md5, k->md5, 16);
            memcpy(r->sha256, k->sha256, 32);
            r->hashed = true;
            k->size = -1;        /* once: the row has them from now on */
            c->known_live--;
            c->stats.hashed++;   /* read for this change, elsewhere */
            c->stats.hashed_bytes += (uint64_t)r->size;
            return true;
        }
    }
    if (state_res_by_identity(c->o.st, r->dev, r->ino, r->size, r->mtime_ns,
                              &hit) != 0 &&
        (c->reader == NULL || !c->in_scan ||
         state_res_by_identity(c->reader, r->dev, r->ino, r->size,
                               r->mtime_ns, &hit) != 0))
        return false;
    memcpy(r->md5, hit.md5, 16);
    memcpy(r->sha256, hit.sha256, 32);
    r->hashed = true;
    c->stats.cache_hits++;
    return true;
}

/* ------------------------------------------------------------ decisions */

static int
after_write(struct catalog *c)
{
    /* A long scan commits in slices so the WAL and the transaction stay
     * bounded; only when the scan's own transaction is the outermost. */
    if (!c->in_scan || ++c->slice < CATALOG_SLICE)
        return 0;
    c->slice = 0;
    int rc = state_commit(c->o.st);
    if (rc == 0)
        rc = state_begin(c->o.st);
    return rc;
}

static int
record(struct catalog *c, const char *rel, enum rs_change ch,
       const struct state_res *r, rs_time_t now)
{
    struct state_change chg = {
        .path = rel,
        .change = ch,
        .size = -1,
        .lastmod = RS_TIME_NONE,
    };
    if (r != NULL) {
        chg.size = r->size;
        chg.hashed = r->hashed;
        memcpy(chg.md5, r->md5, 16);
        memcpy(chg.sha256, r->sha256, 32);
        chg.type = r->type;
        chg.lastmod = r->mtime_ns / 1000;
    }
    int rc = changelog_record(c->o.cl, &chg, now);
    if (rc == 0 && r != NULL && c->cap_ok) {
        c->cap_ok = false;
        if (chg.list == c->cap_list) {
            rc = state_spool_add(c->o.st, chg.seq, c->cap_off, c->cap_len);
            if (rc == 0)
                changedump_capture_commit(c->o.cdump);
        }
    }
    if (rc == 0) {
        if (ch == RS_CHANGE_CREATED)
            c->stats.created++;
        else if (ch == RS_CHANGE_UPDATED)
            c->stats.updated++;
        else
            c->stats.deleted++;
    }
    return rc;
}

static int delete_one(struct catalog *c, const char *rel, bool rec,
                      rs_time_t now);

/* A file rssource cannot read (e is why): a problem, and not listed,
 * since it cannot be served (a GET answers 404): a row it had goes, as a
 * deletion, and comes back with the file's next readable change. */
static int
unreadable(struct catalog *c, const char *rel, const struct state_res *old,
           int e, bool rec, rs_time_t now)
{
    problem(c, rel, "read", e);
    return old != NULL ? delete_one(c, rel, rec, now) : 0;
}

/*
 * One regular file, seen with identity st; old is its row (NULL: none).
 * Content or lastmod changed: a change. Only the inode or device changed
 * (an identical copy renamed into place): the row is updated silently.
 */
static int
observe_file(struct catalog *c, const char *rel, const struct at *at,
             const struct stat *st, const struct state_res *old, bool rec,
             rs_time_t now)
{
    struct state_res r;
    memset(&r, 0, sizeof(r));
    r.path = rel;
    identity_from(&r, st);
    c->stats.files++;
    /* chmod 000 changes no identity: told by the mode (a read denied
     * otherwise shows when it is opened, below) */
    if ((st->st_mode & 0444) == 0)
        return unreadable(c, rel, old, EACCES, rec, now);
    if (old != NULL && identity_eq(old, &r))
        return 0;
    bool had = old != NULL;
    bool old_hashed = had && old->hashed;
    int64_t old_size = had ? old->size : -1;
    int64_t old_mtime_us = had ? old->mtime_ns / 1000 : -1;
    uint8_t old_md5[16], old_sha[32];
    if (old_hashed) {
        memcpy(old_md5, old->md5, 16);
        memcpy(old_sha, old->sha256, 32);
    }
    r.first_seen = had ? old->first_seen : now;
    /* With --dump a change's content is captured as it is read: the hash
     * cache would skip that read (a file moved), so it is not used. */
    c->cap_want = rec && c->o.cdump != NULL;
    c->cap_ok = false;
    if (c->cap_want || !cache_lookup(c, &r)) {
        if (rec && !c->cap_want && r.size >= CATALOG_DEFER_BYTES &&
            c->o.hooks.defer_hash != NULL &&
            c->o.hooks.defer_hash(c->o.hooks.ud, rel))
            return 0;
        int rc = hash_file(c, rel, at, &r);
        if (rc == RS_ENOTFOUND)        /* gone meanwhile: next event */
            return 0;
        if (rc == RS_EIO) {            /* unreadable: not catalogued */
            int e = c->hash_errno != 0 ? c->hash_errno : EIO;
            if (e == EACCES || e == EPERM)
                return unreadable(c, rel, old, e, rec, now);
            problem(c, rel, "read", e);
            return 0;
        }
        if (rc != 0)
            return rc;
        if (had && identity_eq(old, &r))
            return 0;
    }
    r.type = mime_type_of(rel);
    enum rs_change ch = RS_CHANGE_CREATED;
    if (had) {
        bool same = old_hashed && old_size == r.size &&
                    memcmp(old_md5, r.md5, 16) == 0 &&
                    memcmp(old_sha, r.sha256, 32) == 0 &&
                    old_mtime_us == r.mtime_ns / 1000;
        ch = same ? RS_CHANGE_NONE : RS_CHANGE_UPDATED;
    }
    int rc = state_res_put(c->o.st, &r);
    if (rc == 0 && rec && ch != RS_CHANGE_NONE)
        rc = record(c, rel, ch, &r, now);
    return rc != 0 ? rc : after_write(c);
}

static int
delete_one(struct catalog *c, const char *rel, bool rec, rs_time_t now)
{
    int rc = rec ? record(c, rel, RS_CHANGE_DELETED, NULL, now) : 0;
    if (rc == 0)
        rc = state_res_delete(c->o.st, rel);
    return rc != 0 ? rc : after_write(c);
}

/* Delete every row strictly beneath rel, in chunks read from the writer
 * (which sees this transaction's own rows). */
static int
sweep_beneath(struct catalog *c, const char *rel, bool rec, rs_time_t now)
{
    /* most names have nothing beneath: one cached lookup, not an
     * iterator prepared for nothing (a tenth of rssource's CPU at 5,000
     * creations/s) */
    int any = state_res_any_beneath(c->o.st, rel);
    if (any <= 0)
        return any;
    char **paths = rs_calloc(CATALOG_SWEEP_CHUNK, sizeof(*paths));
    if (paths == NULL)
        return RS_ENOMEM;
    int rc = 0;
    for (;;) {
        struct state_iter *it;
        size_t n = 0;
        rc = state_res_iter(c->o.st, rel, &it);
        if (rc != 0)
            break;
        struct state_res r;
        while (n < CATALOG_SWEEP_CHUNK) {
            int step = state_res_next(it, &r);
            if (step != 1) {
                rc = step;
                break;
            }
            paths[n] = rs_strdup(r.path);
            if (paths[n] == NULL) {
                rc = RS_ENOMEM;
                break;
            }
            n++;
        }
        state_iter_free(it);
        for (size_t i = 0; i < n; i++) {
            if (rc == 0)
                rc = delete_one(c, paths[i], rec, now);
            rs_free(paths[i]);
        }
        if (rc != 0 || n < CATALOG_SWEEP_CHUNK)
            break;
    }
    rs_free(paths);
    return rc;
}

/* ----------------------------------------------------------- public API */

struct catalog *
catalog_new(const struct catalog_opts *o)
{
    struct catalog *c = rs_calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->o = *o;
    for (size_t i = 0; i < CATALOG_KNOWN_MAX; i++)
        c->known[i].size = -1;
    c->hasher = rs_hasher_new((1u << RS_HASH_MD5) | (1u << RS_HASH_SHA256));
    c->buf = rs_malloc(CATALOG_READ_BUF);
    if (c->hasher == NULL || c->buf == NULL) {
        catalog_free(c);
        return NULL;
    }
    return c;
}

void
catalog_free(struct catalog *c)
{
    if (c == NULL)
        return;
    catalog_scan_cancel(c);
    state_free(c->reader);
    rs_hasher_free(c->hasher);
    rs_free(c->buf);
    rs_free(c);
}

int
catalog_begin(struct catalog *c)
{
    return state_begin(c->o.st);
}

int
catalog_commit(struct catalog *c)
{
    return state_commit(c->o.st);
}

void
catalog_digests_known(struct catalog *c, const struct stat *st,
                      const uint8_t md5[16], const uint8_t sha256[32])
{
    struct state_res *k = &c->known[c->known_next];
    c->known_next = (c->known_next + 1) % CATALOG_KNOWN_MAX;
    if (k->size < 0)
        c->known_live++;         /* else the oldest is overwritten */
    memset(k, 0, sizeof(*k));
    identity_from(k, st);
    memcpy(k->md5, md5, 16);
    memcpy(k->sha256, sha256, 32);
}

const struct catalog_stats *
catalog_stats(const struct catalog *c)
{
    return &c->stats;
}

uint64_t
catalog_changes(const struct catalog *c)
{
    return c->stats.created + c->stats.updated + c->stats.deleted;
}

/* catalog_observe with rel's stat taken already (src: tree_stat's result,
 * st valid when 0). */
static int
observe_stat(struct catalog *c, const char *rel, int src,
             const struct stat *stp, bool rec, rs_time_t now)
{
    const struct stat st = *stp;
    if (src != 0 && src != RS_ENOTFOUND) {
        problem(c, rel, "stat", EIO);
        return 0;
    }
    struct state_res old;
    int g = state_res_get(c->o.st, rel, &old);
    if (g != 0 && g != RS_ENOTFOUND)
        return g;
    int rc;
    if (src == 0 && S_ISREG(st.st_mode)) {
        rc = observe_file(c, rel, NULL, &st, g == 0 ? &old : NULL, rec, now);
        /* a directory replaced by a file leaves rows beneath the name;
         * a name that was a file has none */
        return rc != 0 || g == 0 ? rc : sweep_beneath(c, rel, rec, now);
    }
    if (g == 0) {
        rc = delete_one(c, rel, rec, now);
        if (rc != 0)
            return rc;
    }
    if (src == 0 && S_ISDIR(st.st_mode))
        return catalog_scan(c, rel, rec, now);
    return sweep_beneath(c, rel, rec, now);
}

int
catalog_observe(struct catalog *c, const char *rel, bool rec, rs_time_t now)
{
    if (rel[0] == '\0')
        return catalog_scan(c, "", rec, now);
    struct stat st;
    memset(&st, 0, sizeof(st));
    int src = tree_stat(c->o.tree, rel, &st);
    return observe_stat(c, rel, src, &st, rec, now);
}

/* ------------------------------------------------------------------ scan */

struct scan {
    struct catalog *c;
    struct state_iter *it;
    struct state_res row;      /* the snapshot's current row */
    bool have_row;             /* row is valid */
    bool rec;
    rs_time_t now;
    int err;
    /* in steps only: the walk, and the last file it met (the rows after
     * it are read afresh at the next step) */
    struct tree_walker *walker;
    char *last;                /* TREE_PATH_MAX; "" before the first */
};

static int
scan_advance(struct scan *s)
{
    int r = state_res_next(s->it, &s->row);
    if (r < 0)
        return r;
    s->have_row = r == 1;
    return 0;
}

/* A snapshot row with no file any more: deleted, unless the writer has
 * already dealt with it (an event handled since the snapshot). In steps,
 * a directory's listing may be older than an observation between steps
 * that catalogued a file created after it: that one is there. */
static int
scan_gone(struct scan *s)
{
    struct state_res cur;
    int g = state_res_get(s->c->o.st, s->row.path, &cur);
    if (g == RS_ENOTFOUND)
        return 0;
    if (g != 0)
        return g;
    struct stat st;
    if (s->walker != NULL && tree_stat(s->c->o.tree, s->row.path, &st) == 0 &&
        S_ISREG(st.st_mode))
        return 0;
    return delete_one(s->c, s->row.path, s->rec, s->now);
}

static int
scan_on_file(void *ud, const char *rel, const struct stat *st, int dirfd,
             const char *name)
{
    struct scan *s = ud;
    int rc;
    if (s->last != NULL)
        memcpy(s->last, rel, strlen(rel) + 1);
    while (s->have_row && strcmp(s->row.path, rel) < 0) {
        rc = scan_gone(s);
        if (rc == 0)
            rc = scan_advance(s);
        if (rc != 0)
            return rc;
    }
    struct state_res probe;
    identity_from(&probe, st);
    if (s->have_row && strcmp(s->row.path, rel) == 0) {
        bool same = identity_eq(&s->row, &probe);
        rc = scan_advance(s);
        if (rc != 0)
            return rc;
        if (same) {
            s->c->stats.files++;
            return 0;
        }
    }
    /* new or changed relative to the snapshot: decide against the
     * writer's row, which may be newer than the snapshot */
    struct state_res cur;
    int g = state_res_get(s->c->o.st, rel, &cur);
    if (g != 0 && g != RS_ENOTFOUND)
        return g;
    struct at at = { dirfd, name };
    rc = observe_file(s->c, rel, &at, st, g == 0 ? &cur : NULL, s->rec,
                      s->now);
    if (rc == RS_EAGAIN) {
        /* being written: its close (or the next scan) will bring it */
        rc = 0;
    }
    return rc;
}

static int
scan_on_dir(void *ud, const char *rel, const struct stat *st)
{
    (void)st;
    struct scan *s = ud;
    const struct catalog_hooks *h = &s->c->o.hooks;
    return h->on_dir != NULL ? h->on_dir(h->ud, rel) : 0;
}

static void
scan_on_error(void *ud, const char *rel, int err)
{
    struct scan *s = ud;
    problem(s->c, rel, "read directory", err);
}

/* A file or directory that exists and can never be published (a
 * control character in its name, too deep, too long): a problem, so
 * that the operator hears of it, not a silent gap in the lists. */
static void
scan_on_skip(void *ud, const char *rel, const char *why)
{
    struct scan *s = ud;
    problem(s->c, rel, why, 0);
}

static const struct tree_walk_cbs scan_cbs = {
    .on_dir = scan_on_dir,
    .on_file = scan_on_file,
    .on_error = scan_on_error,
    .on_skip = scan_on_skip,
};

static int
reader_open(struct catalog *c)
{
    if (c->reader != NULL)
        return 0;
    char err[256];
    return state_open(c->o.state_path, true, &c->reader, err, sizeof(err));
}

/* What is left of the rows once the walk is over: gone. */
static int
scan_rest_gone(struct scan *s)
{
    int rc = 0;
    while (rc == 0 && s->have_row) {
        rc = scan_gone(s);
        if (rc == 0)
            rc = scan_advance(s);
    }
    return rc;
}

/* End a scan's transaction: commit, or roll back and reload the change
 * log's position (rows and records written in it are gone). */
static int
scan_end_txn(struct catalog *c, int rc)
{
    c->in_scan = false;
    if (rc == 0)
        return state_commit(c->o.st);
    state_rollback(c->o.st);
    changelog_reload(c->o.cl);
    return rc;
}

int
catalog_scan(struct catalog *c, const char *sub, bool rec, rs_time_t now)
{
    if (c->in_scan)
        return RS_ESTATE;
    int rc = reader_open(c);
    if (rc != 0)
        return rc;
    struct scan s = { .c = c, .rec = rec, .now = now };
    rc = state_res_iter(c->reader, sub, &s.it);
    if (rc != 0)
        return rc;
    rc = state_begin(c->o.st);
    if (rc != 0) {
        state_iter_free(s.it);
        return rc;
    }
    c->in_scan = true;
    c->slice = 0;
    rc = scan_advance(&s);
    if (rc == 0)
        rc = tree_walk(c->o.tree, sub, &scan_cbs, &s);
    if (rc == 0)
        rc = scan_rest_gone(&s);
    state_iter_free(s.it);
    return scan_end_txn(c, rc);
}

/* ------------------------------------------------------ scan in steps */

static void
steps_free(struct scan *s)
{
    if (s == NULL)
        return;
    state_iter_free(s->it);
    tree_walker_free(s->walker);
    rs_free(s->last);
    rs_free(s);
}

int
catalog_scan_start(struct catalog *c, bool rec)
{
    if (c->steps != NULL)
        return RS_ESTATE;
    int rc = reader_open(c);
    if (rc != 0)
        return rc;
    struct scan *s = rs_calloc(1, sizeof(*s));
    if (s == NULL)
        return RS_ENOMEM;
    s->c = c;
    s->rec = rec;
    s->last = rs_calloc(1, TREE_PATH_MAX);
    rc = s->last != NULL ? tree_walker_new(c->o.tree, "", &s->walker)
                         : RS_ENOMEM;
    if (rc != 0) {
        steps_free(s);
        return rc;
    }
    c->steps = s;
    return 0;
}

bool
catalog_scanning(const struct catalog *c)
{
    return c->steps != NULL;
}

void
catalog_scan_cancel(struct catalog *c)
{
    steps_free(c->steps);
    c->steps = NULL;
}

int
catalog_scan_step(struct catalog *c, size_t budget, rs_time_t now)
{
    struct scan *s = c->steps;
    if (s == NULL)
        return 1;
    if (c->in_scan)
        return RS_ESTATE;
    s->now = now;   /* a change's time is when its step found it */
    /* The rows after the last file met, as they are now: those before it
     * are merged already, and those the scan wrote are all at or before
     * it, so none is taken for a file gone. What happened between steps
     * beyond it (a batch's rows) is met as the walk gets there. */
    int rc = s->last[0] == '\0' ? state_res_iter(c->reader, "", &s->it)
                                 : state_res_iter_after(c->reader, s->last, &s->it);
    if (rc != 0) {
        catalog_scan_cancel(c);
        return rc;
    }
    rc = state_begin(c->o.st);
    if (rc != 0) {
        catalog_scan_cancel(c);
        return rc;
    }
    c->in_scan = true;
    c->slice = 0;
    rc = scan_advance(s);
    int walked = rc == 0 ? tree_walker_run(s->walker, &scan_cbs, s, budget) : rc;
    rc = walked < 0 ? walked : 0;
    if (walked == 1)
        rc = scan_rest_gone(s);
    state_iter_free(s->it);
    s->it = NULL;
    s->have_row = false;
    rc = scan_end_txn(c, rc);
    if (rc != 0 || walked == 1) {
        catalog_scan_cancel(c);
        return rc != 0 ? rc : 1;
    }
    return 0;
}

int
catalog_observe_batch(struct catalog *c, const char *const *paths, size_t n,
                      rs_time_t now, void (*retry)(void *, const char *),
                      void *ud)
{
    /* Each path is looked at once (at 5,000 changes/s the three stats a
     * path took, each an open of its directory, were a third of
     * rssource's time); a change after this stat brings another event. */
    struct seen {
        int src;
        struct stat st;
    } *seen = rs_calloc(n > 0 ? n : 1, sizeof(*seen));
    if (seen == NULL)
        return RS_ENOMEM;
    for (size_t i = 0; i < n; i++)
        seen[i].src = tree_stat(c->o.tree, paths[i], &seen[i].st);
    int rc = state_begin(c->o.st);
    if (rc != 0) {
        rs_free(seen);
        return rc;
    }
    /* Two passes: what exists first, so that a file moved (its new name
     * is created, its old one deleted in the same batch) finds its old
     * row, and its digests, still in the hash cache. */
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        for (size_t i = 0; i < n && rc == 0; i++) {
            bool exists = seen[i].src == 0;
            if (exists != (pass == 0))
                continue;
            rc = paths[i][0] == '\0'
                     ? catalog_scan(c, "", true, now)
                     : observe_stat(c, paths[i], seen[i].src, &seen[i].st,
                                    true, now);
            if (rc == RS_EAGAIN) {
                if (retry != NULL)
                    retry(ud, paths[i]);
                rc = 0;
            }
        }
    }
    rs_free(seen);
    if (rc == 0)
        return state_commit(c->o.st);
    state_rollback(c->o.st);
    changelog_reload(c->o.cl);
    return rc;
}
