/*
 * pull.c - entries from a docwalk turned into offers (apply_offer) or
 * audit findings. A Resource List walk marks every ledger row it sees
 * with a fresh generation; rows left unmarked at the end are what the
 * Source no longer has, unless they changed after the list's snapshot.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apply.h"
#include "docwalk.h"
#include "ledger.h"
#include "mirror.h"
#include "pull.h"
#include "rs_alloc.h"
#include "rs_hash.h"
#include "uriset.h"

/* Change Lists are read from a little before the last applied change, so a
 * change stamped slightly out of order is not missed; what the mirror
 * already holds is recognised and skipped. */
#define PULL_OVERLAP_US (5 * 1000000LL)
#define PULL_PROGRESS_EVERY 10000

struct pull {
    struct pull_opts o;
    struct docwalk *walk;
    bool busy;
    enum pull_kind kind;
    rs_time_t since;
    rs_time_t started;
    rs_time_t index_at;          /* the index's at (children may lack it) */
    rs_time_t doc_at;            /* the current list's at */
    rs_time_t min_from;          /* CHANGES: earliest from of any list */
    int64_t gen;
    struct uriset seen;          /* readonly: the URIs the list named */
    struct pull_report r;
    char err[512];
};

static void
progress(struct pull *p)
{
    if (p->o.on_progress != NULL && p->r.entries % PULL_PROGRESS_EVERY == 0)
        p->o.on_progress(p->o.ud, p->r.entries);
}

static void
diff(struct pull *p, const char *uri, const char *what)
{
    if (p->o.on_diff != NULL)
        p->o.on_diff(p->o.ud, uri, what);
}

/* ------------------------------------------------------------ changes */

static int
on_change_entry(struct pull *p, const struct rs_entry *e, const char *loc)
{
    struct ledger_todo t;
    char hbuf[RS_HASHES_BUFSZ];
    int rc;

    apply_todo_from_entry(e, loc, "changelist", &t, hbuf);
    if (p->since != RS_TIME_NONE && t.change_dt != RS_TIME_NONE &&
        t.change_dt < p->since - PULL_OVERLAP_US)
        return 0;
    rc = apply_offer(p->o.apply, &t);
    if (rc < 0)
        return rc;
    if (t.change_dt != RS_TIME_NONE && t.change_dt > p->r.newest)
        p->r.newest = t.change_dt;
    if (rc == 0)
        p->r.unchanged++;
    else if (t.change == LEDGER_DELETE)
        p->r.deleted++;
    else if (t.change == LEDGER_CREATE)
        p->r.added++;
    else
        p->r.updated++;
    return 0;
}

/* ---------------------------------------------------------- snapshots */

/* Does the mirror's file hold what the ledger row says? Cheap (size)
 * unless deep (hash). */
static bool
file_agrees(struct pull *p, const struct ledger_res *r,
            const struct rs_hashes *want)
{
    struct stat sb;
    struct rs_hashes got;
    struct rs_hasher *h;
    char buf[65536];
    ssize_t n;
    int fd;
    bool ok;

    if (mirror_stat(p->o.mirror, r->path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return false;
    if (r->length >= 0 && sb.st_size != r->length)
        return false;
    if (!p->o.deep)
        return true;
    if (mirror_open_read(p->o.mirror, r->path, &fd) != 0)
        return false;
    unsigned mask = 0;
    for (unsigned i = 0; i < want->n; i++)
        if (want->d[i].algo != RS_HASH_OTHER)
            mask |= 1u << want->d[i].algo;
    if (mask == 0) {
        close(fd);
        return true;                  /* nothing to compare with */
    }
    if ((h = rs_hasher_new(mask)) == NULL) {
        close(fd);
        return false;
    }
    ok = true;
    while ((n = read(fd, buf, sizeof(buf))) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || rs_hasher_update(h, buf, (size_t)n) != 0) {
            ok = false;
            break;
        }
    }
    close(fd);
    ok = ok && rs_hasher_final(h, &got) == 0 && rs_hashes_match(want, &got) > 0;
    rs_hasher_free(h);
    return ok;
}

/* Does the ledger row agree with the list's entry? */
static bool
entry_agrees(const struct ledger_res *r, const struct rs_entry *e)
{
    struct rs_hashes have;
    int m;

    if (r->deleted)
        return false;
    if (e->md.length >= 0 && r->length >= 0 && e->md.length != r->length)
        return false;
    if (e->md.hash.n > 0 && r->hash != NULL &&
        rs_hashes_parse(r->hash, strlen(r->hash), &have) == 0) {
        m = rs_hashes_match(&e->md.hash, &have);
        if (m != 0)
            return m > 0;
    }
    /* No fixity in common: the modification time must say it. */
    if (e->lastmod != RS_TIME_NONE)
        return r->lastmod == e->lastmod;
    return e->md.length >= 0;
}

static int
on_snapshot_entry(struct pull *p, const struct rs_entry *e, const char *loc)
{
    struct ledger_res r;
    struct ledger_todo t = { 0 };
    char *buf = NULL, hbuf[RS_HASHES_BUFSZ];
    bool have, same, repair;
    int rc;

    if (!p->o.readonly && (rc = apply_txn(p->o.apply)) != 0)
        return rc;
    rc = ledger_res_get(p->o.ledger, loc, &r, &buf);
    if (rc != 0 && rc != RS_ENOTFOUND)
        return rc;
    have = rc == 0 && !r.deleted;
    same = have && entry_agrees(&r, e);
    /* The ledger agrees, the file does not: changed behind our back. */
    repair = same && !file_agrees(p, &r, &e->md.hash);
    if (repair) {
        struct stat sb;
        same = false;
        if (mirror_stat(p->o.mirror, r.path, &sb) != 0)
            have = false;             /* gone: the mirror lacks it */
    }
    if (p->o.readonly)
        rc = uriset_add(&p->seen, loc) < 0 ? RS_ENOMEM : 0;
    else if (rc == 0)
        rc = ledger_res_mark(p->o.ledger, loc, p->gen);
    else
        rc = 0;                       /* no row yet: nothing to mark */
    if (rc != 0) {
        rs_free(buf);
        return rc;
    }
    rs_free(buf);
    if (same) {
        p->r.unchanged++;
        return 0;
    }
    if (p->kind == PULL_AUDIT) {
        if (have && r.change_dt != RS_TIME_NONE && p->doc_at != RS_TIME_NONE
            && r.change_dt > p->doc_at) {
            p->r.unchanged++;         /* changed since the snapshot */
            return 0;
        }
        if (have)
            p->r.updated++;
        else
            p->r.added++;
        diff(p, loc, have ? "updated" : "added");
        return 0;
    }
    t.uri = loc;
    t.change = have ? LEDGER_UPDATE : LEDGER_CREATE;
    t.change_dt = p->doc_at != RS_TIME_NONE ? p->doc_at : e->lastmod;
    t.lastmod = e->lastmod;
    t.length = e->md.length;
    t.hash = e->md.hash.n > 0 && rs_hashes_format(&e->md.hash, hbuf) > 0
             ? hbuf : NULL;
    t.origin = repair ? APPLY_ORIGIN_REPAIR : "resourcelist";
    rc = apply_offer(p->o.apply, &t);
    if (rc < 0)
        return rc;
    if (rc == 0)
        p->r.unchanged++;
    else if (have)
        p->r.updated++;
    else
        p->r.added++;
    return 0;
}

/* After the list: live rows it did not name are gone at the Source -
 * unless they changed after the snapshot (a push created them). */
static int
on_unseen(void *ud, const struct ledger_res *r)
{
    struct pull *p = ud;
    struct ledger_todo t = { 0 };
    int rc;

    if (p->o.readonly && uriset_has(&p->seen, r->uri))
        return 0;
    if (r->change_dt != RS_TIME_NONE && r->change_dt > p->r.newest)
        return 0;
    p->r.deleted++;
    if (p->kind == PULL_AUDIT) {
        diff(p, r->uri, "deleted");
        return 0;
    }
    t.uri = r->uri;
    t.change = LEDGER_DELETE;
    t.change_dt = p->r.newest;
    t.length = -1;
    t.lastmod = RS_TIME_NONE;
    t.origin = "resourcelist";
    rc = apply_offer(p->o.apply, &t);
    return rc < 0 ? rc : 0;
}

/* ---------------------------------------------------- walk callbacks */

static int
on_head(void *ud, const char *url, const struct rs_head *h)
{
    struct pull *p = ud;
    enum rs_capability want = p->kind == PULL_CHANGES ? RS_CAP_CHANGELIST
                                                      : RS_CAP_RESOURCELIST;

    if (h->has_md && h->md.capability != want &&
        h->md.capability != RS_CAP_NONE) {
        snprintf(p->err, sizeof(p->err), "%s: a %s where a %s was expected",
                 url, rs_capability_name(h->md.capability),
                 rs_capability_name(want));
        return RS_EINVALID;
    }
    p->r.docs++;
    if (p->kind == PULL_CHANGES) {
        if (h->md.from != RS_TIME_NONE &&
            (p->min_from == RS_TIME_NONE || h->md.from < p->min_from))
            p->min_from = h->md.from;
        return 0;
    }
    if (h->root == RS_ROOT_SITEMAPINDEX) {
        p->index_at = h->md.at;
        p->doc_at = h->md.at;
    } else {
        p->doc_at = h->md.at != RS_TIME_NONE ? h->md.at : p->index_at;
    }
    if (p->r.docs == 1)
        p->r.newest = p->doc_at != RS_TIME_NONE ? p->doc_at : p->started;
    return 0;
}

static int
on_child(void *ud, const char *index_url, const struct rs_entry *e,
         const char *loc)
{
    struct pull *p = ud;

    (void)index_url;
    (void)loc;
    /* A closed Change List that ended before `since` has nothing new. */
    if (p->kind == PULL_CHANGES && p->since != RS_TIME_NONE && e->has_md &&
        e->md.until != RS_TIME_NONE && e->md.until < p->since - PULL_OVERLAP_US) {
        if (e->md.from != RS_TIME_NONE &&
            (p->min_from == RS_TIME_NONE || e->md.from < p->min_from))
            p->min_from = e->md.from;
        return 0;
    }
    return 1;
}

static int
on_entry(void *ud, const char *url, const struct rs_entry *e, const char *loc)
{
    struct pull *p = ud;
    int rc;

    (void)url;
    p->r.entries++;
    rc = p->kind == PULL_CHANGES ? on_change_entry(p, e, loc)
                                 : on_snapshot_entry(p, e, loc);
    progress(p);
    if (rc < 0 && p->err[0] == '\0')
        snprintf(p->err, sizeof(p->err), "%s: %s", loc, rs_strerror(rc));
    if (p->r.entries % 1000 == 0)
        apply_kick(p->o.apply);
    return rc;
}

static void
pull_end(struct pull *p, int rc, const char *err)
{
    char e[sizeof(p->err)];

    snprintf(e, sizeof(e), "%s", p->err[0] != '\0' ? p->err : err);
    p->busy = false;
    apply_kick(p->o.apply);
    if (p->o.on_progress != NULL)
        p->o.on_progress(p->o.ud, p->r.entries);
    p->o.on_done(p->o.ud, rc, rc == 0 ? "" : e, &p->r);
}

static void
on_walk_done(void *ud, int rc, const char *err)
{
    struct pull *p = ud;

    if (rc != 0) {
        pull_end(p, rc, err);
        return;
    }
    if (p->kind == PULL_CHANGES) {
        p->r.reached_back = p->since != RS_TIME_NONE &&
                            p->min_from != RS_TIME_NONE &&
                            p->min_from <= p->since;
        pull_end(p, 0, "");
        return;
    }
    rc = p->o.readonly ? 0 : apply_txn(p->o.apply);
    if (rc == 0)
        rc = ledger_res_each(p->o.ledger, false, p->o.readonly ? -1 : p->gen,
                             on_unseen, p);
    uriset_clear(&p->seen);
    if (rc != 0 && p->err[0] == '\0')
        snprintf(p->err, sizeof(p->err), "state: %s",
                 ledger_errstr(p->o.ledger));
    pull_end(p, rc, "");
}

/* ---------------------------------------------------------------- API */

struct pull *
pull_new(const struct pull_opts *o)
{
    struct pull *p = rs_calloc(1, sizeof(*p));
    struct docwalk_opts wo = {
        .base = o->base,
        .http = o->http,
        .strict = o->strict,
        .on_head = on_head,
        .on_entry = on_entry,
        .on_child = on_child,
        .on_done = on_walk_done,
    };

    if (p == NULL)
        return NULL;
    p->o = *o;
    wo.ud = p;
    if ((p->walk = docwalk_new(&wo)) == NULL) {
        rs_free(p);
        return NULL;
    }
    return p;
}

void
pull_free(struct pull *p)
{
    if (p == NULL)
        return;
    docwalk_free(p->walk);
    uriset_clear(&p->seen);
    rs_free(p);
}

int
pull_start(struct pull *p, enum pull_kind k, const char *url, rs_time_t since)
{
    int rc;

    if (p->busy)
        return RS_ESTATE;
    memset(&p->r, 0, sizeof(p->r));
    p->r.kind = k;
    p->r.newest = RS_TIME_NONE;
    p->kind = k;
    p->since = since;
    p->started = rs_time_now();
    p->index_at = p->doc_at = p->min_from = RS_TIME_NONE;
    p->err[0] = '\0';
    if (k == PULL_AUDIT && p->o.readonly) {
        p->gen = 0;
    } else if (k != PULL_CHANGES) {
        if ((rc = apply_txn(p->o.apply)) != 0 ||
            (rc = ledger_gen_next(p->o.ledger, &p->gen)) != 0)
            return rc;
        apply_set_gen(p->o.apply, p->gen);
    }
    if ((rc = docwalk_start(p->walk, url)) != 0)
        return rc;
    p->busy = true;
    return 0;
}

bool
pull_busy(const struct pull *p)
{
    return p->busy;
}
