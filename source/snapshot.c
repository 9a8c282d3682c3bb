/*
 * snapshot.c - Resource List generations written to files (see
 * snapshot.h). Layers: names, the files of one build (open a page, write
 * entries, close), the build state machine (begin, step, finish, abort),
 * publishing, and the lookup used by the HTTP server.
 */
#include "snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rs_alloc.h"
#include "rs_write.h"

#define SNAP_NAME_MAX 64
#define SNAP_PATH_MAX 4400

struct snapshot {
    struct snapshot_opts o;
    struct snapshot_info cur;
    char *cur_base;              /* base URL the current files carry */
    char cur_layout[48];         /* paging of the current files */
    char layout[48];             /* paging asked for now: "index:50000" */
    struct state *reader;        /* the build's connection */
    struct event *ev;            /* steps an asynchronous build */
    /* the build in progress */
    bool building;
    struct snapshot_info b;
    int64_t pages;               /* documents holding entries */
    int64_t page;                /* the one being written, 1-based */
    int64_t in_page;             /* entries in it so far */
    struct state_iter *it;
    FILE *f;
    struct rs_writer *w;
    char *loc;                   /* DOCS_URL_MAX */
    char err[256];
};

static const struct rs_write_opts snap_wopts = { .pretty = true };

/* --------------------------------------------------------------- names */

static void
file_name(int64_t gen, int64_t k, char *buf)
{
    if (k == 0)
        snprintf(buf, SNAP_NAME_MAX, "resourcelist-%lld.xml", (long long)gen);
    else
        snprintf(buf, SNAP_NAME_MAX, "resourcelist-%lld-%lld.xml",
                 (long long)gen, (long long)k);
}

/* The file number holding page k (1-based) of generation b: the top
 * document (0) for a single list and for the first page of a chain. */
static int64_t
page_file(const struct snapshot *s, int64_t k)
{
    if (s->pages == 1 || (s->o.next_links && k == 1))
        return 0;
    return k;
}

/* Parse "resourcelist-G.xml" / "resourcelist-G-K.xml". */
static bool
parse_name(const char *name, int64_t *gen, int64_t *k)
{
    static const char pre[] = "resourcelist-";
    if (strncmp(name, pre, sizeof(pre) - 1) != 0)
        return false;
    const char *p = name + sizeof(pre) - 1;
    char *end;
    if (*p < '1' || *p > '9')
        return false;
    errno = 0;
    long long g = strtoll(p, &end, 10);
    if (errno != 0)
        return false;
    long long kk = 0;
    if (*end == '-') {
        p = end + 1;
        if (*p < '1' || *p > '9')
            return false;
        kk = strtoll(p, &end, 10);
        if (errno != 0)
            return false;
    }
    if (strcmp(end, ".xml") != 0)
        return false;
    *gen = g;
    *k = kk;
    return true;
}

static void
path_of(const struct snapshot *s, const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", s->o.dir, name);
}

/* Remove the files of generations outside [lo, hi]. */
static void
remove_gens(struct snapshot *s, int64_t lo, int64_t hi)
{
    DIR *d = opendir(s->o.dir);
    if (d == NULL)
        return;
    for (struct dirent *de = readdir(d); de != NULL; de = readdir(d)) {
        int64_t g, k;
        if (!parse_name(de->d_name, &g, &k) || (g >= lo && g <= hi))
            continue;
        char p[SNAP_PATH_MAX];
        path_of(s, de->d_name, p, sizeof(p));
        (void)unlink(p);
    }
    closedir(d);
}

/* ---------------------------------------------------------------- files */

static int
file_write(void *ud, const char *buf, size_t len)
{
    return fwrite(buf, 1, len, ud) == len ? 0 : RS_EIO;
}

static int
file_close(struct snapshot *s)
{
    int rc = 0;
    if (s->w != NULL) {
        rc = rs_writer_end(s->w);
        if (rc != 0)
            snprintf(s->err, sizeof(s->err), "%s", rs_writer_errstr(s->w));
        rs_writer_free(s->w);
        s->w = NULL;
    }
    if (s->f != NULL) {
        /* on disk before the generation is published */
        if (fflush(s->f) != 0 || fsync(fileno(s->f)) != 0)
            rc = rc != 0 ? rc : RS_EIO;
        if (fclose(s->f) != 0)
            rc = rc != 0 ? rc : RS_EIO;
        s->f = NULL;
    }
    return rc;
}

static int
file_open(struct snapshot *s, int64_t k)
{
    char name[SNAP_NAME_MAX], p[SNAP_PATH_MAX];
    file_name(s->b.gen, k, name);
    path_of(s, name, p, sizeof(p));
    s->f = fopen(p, "we");
    if (s->f == NULL) {
        snprintf(s->err, sizeof(s->err), "%.200s: %s", p, strerror(errno));
        return RS_EIO;
    }
    s->w = rs_writer_new(file_write, s->f, &snap_wopts);
    return s->w != NULL ? 0 : RS_ENOMEM;
}

static int
url_of(struct snapshot *s, int64_t k, char *buf)
{
    char name[SNAP_NAME_MAX];
    file_name(s->b.gen, k, name);
    return docs_url(s->o.docs, name, buf, DOCS_URL_MAX);
}

/* Open page k and write its head. */
static int
page_open(struct snapshot *s, int64_t k)
{
    char up[DOCS_URL_MAX], a[DOCS_URL_MAX], b[DOCS_URL_MAX];
    struct rs_link links[3];
    size_t n = 0;
    snprintf(up, sizeof(up), "%s", docs_caplist_url(s->o.docs));
    rs_link_init(&links[n]);
    links[n].rel = "up";
    links[n++].href = up;
    int rc = 0;
    if (s->pages > 1 && !s->o.next_links) {
        rc = url_of(s, 0, a);
        rs_link_init(&links[n]);
        links[n].rel = "index";
        links[n++].href = a;
    } else if (s->pages > 1) {
        if (k > 1 && rc == 0) {
            rc = url_of(s, page_file(s, k - 1), a);
            rs_link_init(&links[n]);
            links[n].rel = "prev";
            links[n++].href = a;
        }
        if (k < s->pages && rc == 0) {
            rc = url_of(s, page_file(s, k + 1), b);
            rs_link_init(&links[n]);
            links[n].rel = "next";
            links[n++].href = b;
        }
    }
    if (rc == 0)
        rc = file_open(s, page_file(s, k));
    if (rc != 0)
        return rc;
    struct rs_head h;
    rs_head_init(&h);
    h.root = RS_ROOT_URLSET;
    h.has_md = true;
    h.md.capability = RS_CAP_RESOURCELIST;
    h.md.at = s->b.at;
    h.links = links;
    h.nlinks = n;
    s->page = k;
    s->in_page = 0;
    return rs_writer_begin(s->w, &h);
}

static int
write_index(struct snapshot *s)
{
    int rc = file_open(s, 0);
    if (rc != 0)
        return rc;
    struct rs_link up;
    struct rs_head h;
    docs_head_up(s->o.docs, RS_ROOT_SITEMAPINDEX, RS_CAP_RESOURCELIST, &h,
                 &up);
    h.md.at = s->b.at;
    h.md.completed = s->b.completed;
    rc = rs_writer_begin(s->w, &h);
    for (int64_t k = 1; rc == 0 && k <= s->pages; k++) {
        rc = url_of(s, k, s->loc);
        struct rs_entry e;
        rs_entry_init(&e);
        e.loc = s->loc;
        if (rc == 0)
            rc = rs_writer_entry(s->w, &e);
    }
    int crc = file_close(s);
    return rc != 0 ? rc : crc;
}

/* ---------------------------------------------------------------- build */

static void
build_abort(struct snapshot *s)
{
    if (s->w != NULL) {
        rs_writer_free(s->w);
        s->w = NULL;
    }
    if (s->f != NULL) {
        fclose(s->f);
        s->f = NULL;
    }
    state_iter_free(s->it);
    s->it = NULL;
    state_end_read(s->reader);
    if (s->building)
        remove_gens(s, s->cur.gen > 0 ? s->cur.gen - (int64_t)s->o.keep + 1 : 1,
                    s->cur.gen);
    s->building = false;
}

static int
build_begin(struct snapshot *s, rs_time_t now)
{
    if (s->building)
        return RS_ESTATE;
    s->err[0] = '\0';
    memset(&s->b, 0, sizeof(s->b));
    s->b.gen = s->cur.gen + 1;
    /* `at` before the snapshot instant: every change before it is in the
     * snapshot, every change after it has a later datetime */
    s->b.at = now;
    s->b.completed = RS_TIME_NONE;
    int rc = state_begin_read(s->reader);
    if (rc != 0) {
        snprintf(s->err, sizeof(s->err), "%s", state_errstr(s->reader));
        return rc;
    }
    s->building = true;
    s->b.change_seq = state_change_last_seq(s->reader);
    s->b.count = state_res_count(s->reader);
    if (s->b.count < 0) {
        rc = RS_EIO;
        goto fail;
    }
    int64_t ps = (int64_t)s->o.page_size;
    s->pages = s->b.count <= ps ? 1 : (s->b.count + ps - 1) / ps;
    s->b.parts = s->pages == 1 ? 0 : s->o.next_links ? s->pages - 1 : s->pages;
    rc = state_res_iter(s->reader, "", &s->it);
    if (rc == 0)
        rc = page_open(s, 1);
    if (rc == 0)
        return 0;
fail:
    if (s->err[0] == '\0')
        snprintf(s->err, sizeof(s->err), "%s", state_errstr(s->reader));
    build_abort(s);
    return rc;
}

static int
publish(struct snapshot *s)
{
    struct state *st = s->o.st;
    int rc = state_begin(st);
    if (rc != 0)
        return rc;
    const struct snapshot_info *b = &s->b;
    const struct { const char *key; int64_t v; } meta[] = {
        { "rl.gen", b->gen }, { "rl.at", b->at },
        { "rl.completed", b->completed }, { "rl.count", b->count },
        { "rl.parts", b->parts }, { "rl.seq", b->change_seq },
    };
    for (size_t i = 0; rc == 0 && i < sizeof(meta) / sizeof(meta[0]); i++)
        rc = state_meta_set(st, meta[i].key, meta[i].v);
    if (rc == 0)
        rc = state_meta_set_text(st, "rl.base", docs_base(s->o.docs));
    if (rc == 0)
        rc = state_meta_set_text(st, "rl.layout", s->layout);
    /* framework: each document holding entries was created; parts of an
     * index say which index they belong to (never the index itself) */
    char idx[SNAP_NAME_MAX];
    file_name(b->gen, 0, idx);
    bool indexed = s->pages > 1 && !s->o.next_links;
    for (int64_t k = 1; rc == 0 && k <= s->pages; k++) {
        char name[SNAP_NAME_MAX];
        file_name(b->gen, page_file(s, k), name);
        struct state_fw f = {
            .dt = b->completed,
            .name = name,
            .cap = RS_CAP_RESOURCELIST,
            .change = RS_CHANGE_CREATED,
            .index = indexed ? idx : NULL,
        };
        rc = state_fw_add(st, &f);
    }
    if (rc == 0)
        rc = state_commit(st);
    else
        state_rollback(st);
    if (rc != 0) {
        snprintf(s->err, sizeof(s->err), "%s", state_errstr(st));
        return rc;
    }
    char *nb = rs_strdup(docs_base(s->o.docs));
    if (nb != NULL) {
        rs_free(s->cur_base);
        s->cur_base = nb;
    }
    s->cur = *b;
    snprintf(s->cur_layout, sizeof(s->cur_layout), "%s", s->layout);
    remove_gens(s, s->cur.gen - (int64_t)s->o.keep + 1, s->cur.gen);
    return 0;
}

/* Write up to budget entries; *done once published. */
static int
build_step(struct snapshot *s, size_t budget, bool *done)
{
    *done = false;
    int rc = 0;
    for (size_t i = 0; i < budget; i++) {
        struct state_res r;
        int step = state_res_next(s->it, &r);
        if (step < 0) {
            rc = step;
            break;
        }
        if (step == 0) {
            rc = file_close(s);
            state_iter_free(s->it);
            s->it = NULL;
            s->b.completed = rs_time_now();
            if (s->b.completed < s->b.at)
                s->b.completed = s->b.at;
            if (rc == 0 && s->pages > 1 && !s->o.next_links)
                rc = write_index(s);
            state_end_read(s->reader);
            if (rc == 0)
                rc = publish(s);
            if (rc != 0)
                break;
            s->building = false;
            *done = true;
            return 0;
        }
        if (s->in_page == (int64_t)s->o.page_size) {
            rc = file_close(s);
            if (rc == 0)
                rc = page_open(s, s->page + 1);
            if (rc != 0)
                break;
        }
        struct rs_entry e;
        rc = docs_resource_entry(s->o.docs, &r, &e, s->loc);
        if (rc == 0)
            rc = rs_writer_entry(s->w, &e);
        if (rc != 0) {
            if (s->err[0] == '\0' && s->w != NULL)
                snprintf(s->err, sizeof(s->err), "%s: %s", r.path,
                         rs_writer_errstr(s->w));
            break;
        }
        s->in_page++;
    }
    if (rc != 0)
        build_abort(s);
    return rc;
}

static void
on_step(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct snapshot *s = arg;
    bool done;
    int rc = build_step(s, s->o.slice, &done);
    if (rc == 0 && !done) {
        static const struct timeval zero = { 0, 0 };
        if (event_add(s->ev, &zero) == 0)
            return;
        rc = RS_EIO;
        build_abort(s);
    }
    if (s->o.on_done != NULL)
        s->o.on_done(s->o.ud, rc);
}

/* ------------------------------------------------------------ public */

struct snapshot *
snapshot_new(const struct snapshot_opts *o, const char **err)
{
    struct snapshot *s = rs_calloc(1, sizeof(*s));
    *err = "out of memory";
    if (s == NULL)
        return NULL;
    s->o = *o;
    if (s->o.page_size == 0 || s->o.page_size > RS_MAX_ENTRIES)
        s->o.page_size = RS_MAX_ENTRIES;
    if (s->o.keep < 2)
        s->o.keep = 2;
    if (s->o.slice == 0)
        s->o.slice = 2000;
    snprintf(s->layout, sizeof(s->layout), "%s:%zu",
             s->o.next_links ? "next" : "index", s->o.page_size);
    s->loc = rs_malloc(DOCS_URL_MAX);
    if (s->loc == NULL)
        goto fail;
    if (mkdir(s->o.dir, 0755) != 0 && errno != EEXIST) {
        snprintf(s->err, sizeof(s->err), "%s: %s", s->o.dir, strerror(errno));
        *err = s->err;
        goto fail;
    }
    char e2[256];
    if (state_open(s->o.state_path, true, &s->reader, e2, sizeof(e2)) != 0) {
        snprintf(s->err, sizeof(s->err), "%s", e2);
        *err = s->err;
        goto fail;
    }
    if (s->o.base != NULL) {
        s->ev = event_new(s->o.base, -1, 0, on_step, s);
        if (s->ev == NULL)
            goto fail;
    }
    int64_t v;
    struct snapshot_info *c = &s->cur;
    if (state_meta_get(o->st, "rl.gen", &v) == 0) {
        c->gen = v;
        if (state_meta_get(o->st, "rl.at", &c->at) != 0 ||
            state_meta_get(o->st, "rl.completed", &c->completed) != 0 ||
            state_meta_get(o->st, "rl.count", &c->count) != 0 ||
            state_meta_get(o->st, "rl.parts", &c->parts) != 0 ||
            state_meta_get(o->st, "rl.seq", &c->change_seq) != 0)
            c->gen = 0;
        char b[DOCS_URL_MAX];
        if (state_meta_get_text(o->st, "rl.base", b, sizeof(b)) == 0)
            s->cur_base = rs_strdup(b);
        if (state_meta_get_text(o->st, "rl.layout", s->cur_layout,
                                sizeof(s->cur_layout)) != 0)
            s->cur_layout[0] = '\0';
    }
    /* A generation whose top file is gone (state copied without its
     * files) counts as none: it is rebuilt. */
    char p[SNAP_PATH_MAX];
    if (c->gen > 0 && snapshot_file(s, DOCS_RESOURCELIST, p, sizeof(p)) != 0) {
        int64_t gen = c->gen;
        memset(c, 0, sizeof(*c));
        c->gen = gen;     /* numbering goes on; nothing is served */
        rs_free(s->cur_base);
        s->cur_base = NULL;
    }
    remove_gens(s, c->gen - (int64_t)s->o.keep + 1, c->gen);
    *err = NULL;
    return s;
fail:
    snapshot_free(s);
    return NULL;
}

void
snapshot_free(struct snapshot *s)
{
    if (s == NULL)
        return;
    if (s->building)
        build_abort(s);
    if (s->ev != NULL)
        event_free(s->ev);
    state_free(s->reader);
    rs_free(s->cur_base);
    rs_free(s->loc);
    rs_free(s);
}

const struct snapshot_info *
snapshot_current(const struct snapshot *s)
{
    return &s->cur;
}

bool
snapshot_fits(const struct snapshot *s)
{
    /* made for another base URL or another paging: its URLs or its shape
     * are not what this configuration publishes */
    return s->cur.at != 0 && s->cur_base != NULL &&
           strcmp(s->cur_base, docs_base(s->o.docs)) == 0 &&
           strcmp(s->cur_layout, s->layout) == 0;
}

bool
snapshot_stale(struct snapshot *s)
{
    return !snapshot_fits(s) ||
           state_change_last_seq(s->o.st) > s->cur.change_seq;
}

int
snapshot_build(struct snapshot *s, rs_time_t now)
{
    int rc = build_begin(s, now);
    bool done = false;
    while (rc == 0 && !done)
        rc = build_step(s, 65536, &done);
    return rc;
}

int
snapshot_build_async(struct snapshot *s)
{
    if (s->building)
        return RS_ESTATE;
    if (s->ev == NULL)
        return RS_EINVAL;
    int rc = build_begin(s, rs_time_now());
    if (rc != 0)
        return rc;
    static const struct timeval zero = { 0, 0 };
    if (event_add(s->ev, &zero) != 0) {
        build_abort(s);
        return RS_EIO;
    }
    return 0;
}

bool
snapshot_building(const struct snapshot *s)
{
    return s->building;
}

int
snapshot_file(const struct snapshot *s, const char *name, char *path,
              size_t len)
{
    char top[SNAP_NAME_MAX];
    int64_t gen, k;
    if (strcmp(name, DOCS_RESOURCELIST) == 0) {
        if (s->cur.gen == 0 || s->cur_base == NULL)
            return RS_ENOTFOUND;
        file_name(s->cur.gen, 0, top);
        name = top;
    } else if (!parse_name(name, &gen, &k) || gen > s->cur.gen ||
               gen <= s->cur.gen - (int64_t)s->o.keep) {
        return RS_ENOTFOUND;
    }
    snprintf(path, len, "%s/%s", s->o.dir, name);
    return access(path, R_OK) == 0 ? 0 : RS_ENOTFOUND;
}
