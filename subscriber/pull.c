/*
 * pull.c - entries from a docwalk turned into offers (apply_offer) or
 * audit findings. An incremental pull is one walk of the Change Lists. A
 * reconcile or an audit is three, one phase each:
 *   PEEK     the Resource List's head (and an index's parts) for its at:
 *            the moment it describes (the snapshot);
 *   CHANGES  the Change Lists since the snapshot, into a changeset (and,
 *            for a reconcile, offered like an incremental pull);
 *   LIST     the Resource List itself, each entry judged against the
 *            mirror unless a later change supersedes it, then the mirror's
 *            rows the list did not name, then (audit) the changes that
 *            named neither.
 * An incremental pull of a Source whose open Change List names its
 * continuation (rssource's Link rel="urn:rspush:changes-after") starts
 * there, conditionally: TAIL reads only what was added since the last
 * read (a 304 when nothing was), and the index is walked only when that
 * list closed, went away, or was never read. Closed lists read to their
 * end are not read again. What this remembers is in memory, per list
 * pulled (struct pull_tail): a restart reads the open list once whole.
 * A Resource List walk marks every ledger row it sees with a fresh
 * generation; rows left unmarked at the end are what the Source no longer
 * has, unless a later change or a change too recent to judge says
 * otherwise - or an entry was skipped as malformed (on_bad_entry): then
 * the list has a hole that may be any of them, and none is deleted.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apply.h"
#include "changeset.h"
#include "docwalk.h"
#include "ledger.h"
#include "mirror.h"
#include "pathmap.h"
#include "pull.h"
#include "rs_alloc.h"
#include "rs_discover.h"
#include "rs_hash.h"
#include "rs_url.h"
#include "uriset.h"

/* Change Lists are read from a little before the last applied change, so a
 * change stamped slightly out of order is not missed; what the mirror
 * already holds is recognised and skipped. */
#define PULL_OVERLAP_US (5 * 1000000LL)
#define PULL_PROGRESS_EVERY 10000
#define PULL_TAILS_MAX 64           /* lists followed (a session's sets) */
#define PULL_CLOSED_MAX 100000      /* closed lists remembered per index;
                                       past it they are forgotten (and the
                                       `since` rule skips most anyway) */
#define PULL_VALIDATOR_MAX 512      /* longer validators are not kept */
#define PULL_AFTER_REL "urn:rspush:changes-after"
#define PULL_SPANS_MAX 1000000      /* Change Lists placed in one walk;
                                       past it coverage is unknown (a
                                       reconcile) */
/* Two Change Lists are taken to meet when the next begins no later than
 * a second after the last ends: W3C datetimes are often written to the
 * second, and one list's until and the next's from, cut differently,
 * may be a second apart. A longer hole is one no list covers. */
#define PULL_SPAN_SLACK_US 1000000LL

/* A Change List's interval; until RS_TIME_NONE: open. */
struct pull_span {
    rs_time_t from, until;
};

enum pull_phase { PHASE_IDLE, PHASE_PEEK, PHASE_CHANGES, PHASE_TAIL,
                  PHASE_LIST };

/* Where an incremental pull of one index (or list) reads next. */
struct pull_tail {
    char *key;                   /* the URL pull_start was given */
    char *list;                  /* the open Change List, as named */
    char *next;                  /* its continuation; NULL: walk the index */
    char *etag, *last_modified;  /* validators of its last read */
    rs_time_t upto;              /* the newest change read of it: the tail
                                    is used when `since` is no earlier */
    struct uriset closed;        /* closed lists read to their end */
    uint64_t used;               /* for eviction: the least recent goes */
};

struct pull {
    struct pull_opts o;
    struct docwalk *walk;
    enum pull_phase phase;
    enum pull_kind kind;
    char *url;                   /* the list pulled */
    char *changes_url;           /* RECONCILE/AUDIT: its Change Lists */
    rs_time_t since;             /* CHANGES phase: read from here */
    rs_time_t started;
    rs_time_t index_at;          /* the index's at (children may lack it) */
    rs_time_t doc_at;            /* the current list's at */
    /* CHANGES: the intervals of the Change Lists met (read, or skipped
     * as read before), and what they cover (spans_cover): from cover_from
     * on, every moment up to the newest list is in one of them. A list
     * of an index that leaves a hole before the next is no more reach
     * than one that begins late. */
    struct pull_span *spans;
    size_t nspans, capspans;
    bool spans_lost;             /* one could not be kept: coverage
                                    unknown */
    rs_time_t index_from;        /* an index's from: when no list has one */
    rs_time_t cover_from;
    rs_time_t newest_lastmod;    /* RECONCILE/AUDIT: the newest <lastmod>
                                    the list named: its age when it has no
                                    at */
    rs_time_t changes_newest;    /* CHANGES: newest change datetime read */
    struct changeset *cs;        /* RECONCILE/AUDIT: changes since the
                                    snapshot; NULL when none were read */
    bool cs_full;                /* the changeset reached its cap */
    uint64_t unseen;             /* RECONCILE: live rows the list left out
                                    that no change explains: the deletions
                                    the valve weighs */
    int64_t gen;
    struct uriset seen;          /* readonly: the URIs the list named */
    struct pull_tail tails[PULL_TAILS_MAX];
    size_t ntails;
    uint64_t tick;
    struct pull_tail *tail;      /* CHANGES: this pull's, or NULL */
    bool full_polls;             /* RSSUB_POLL_FULL: read everything, as
                                    before tails (benchmarks compare) */
    bool not_modified;           /* TAIL: answered 304 */
    bool tail_closed;            /* TAIL: the list read has closed */
    rs_time_t doc_newest;        /* CHANGES/TAIL: newest change datetime
                                    in the document being read */
    char *doc_after;             /* its continuation (Link), or NULL */
    struct pull_report r;
    char err[512];
};

static void pull_end(struct pull *p, int rc, const char *err);

static void
progress(struct pull *p)
{
    if (p->o.on_progress != NULL && p->r.entries % PULL_PROGRESS_EVERY == 0)
        p->o.on_progress(p->o.ud, p->r.entries);
}

/* An audit finding. A resource the mirror lacks but may not hold anyway
 * (outside the prefixes, an unsafe path) is not a difference: a mirror
 * that holds everything it may is in sync. False for those. */
static bool
diff(struct pull *p, const char *uri, const char *what)
{
    char *path = NULL;
    int rc;

    if (strcmp(what, "added") == 0 && p->o.pathmap != NULL) {
        rc = pathmap_path(p->o.pathmap, uri, &path, NULL);
        rs_free(path);
        if (rc == RS_EDENIED || rc == RS_EINVAL) {
            p->r.refused++;
            what = "refused";
        }
    }
    if (p->o.on_diff != NULL)
        p->o.on_diff(p->o.ud, uri, what);
    return strcmp(what, "refused") != 0;
}

/* ------------------------------------------------------------- tails */

static void
tail_clear(struct pull_tail *t)
{
    rs_free(t->key);
    rs_free(t->list);
    rs_free(t->next);
    rs_free(t->etag);
    rs_free(t->last_modified);
    uriset_clear(&t->closed);
    memset(t, 0, sizeof(*t));
}

/* The tail of key, made when create (evicting the least recently used
 * when all are taken); NULL when none or out of memory. */
static struct pull_tail *
tail_get(struct pull *p, const char *key, bool create)
{
    struct pull_tail *t = NULL;

    for (size_t i = 0; i < p->ntails; i++)
        if (strcmp(p->tails[i].key, key) == 0) {
            t = &p->tails[i];
            break;
        }
    if (t == NULL && create) {
        if (p->ntails < PULL_TAILS_MAX) {
            t = &p->tails[p->ntails++];
        } else {
            t = &p->tails[0];
            for (size_t i = 1; i < p->ntails; i++)
                if (p->tails[i].used < t->used)
                    t = &p->tails[i];
            tail_clear(t);
        }
        if ((t->key = rs_strdup(key)) == NULL) {
            /* a slot without a key would match nothing: give it back */
            *t = p->tails[--p->ntails];
            memset(&p->tails[p->ntails], 0, sizeof(*t));
            return NULL;
        }
        t->upto = RS_TIME_NONE;
    }
    if (t != NULL)
        t->used = ++p->tick;
    return t;
}

/* Forget where the open list reads on: the next pull walks the index. */
static void
tail_forget_next(struct pull_tail *t)
{
    rs_free(t->next);
    rs_free(t->list);
    rs_free(t->etag);
    rs_free(t->last_modified);
    t->next = t->list = t->etag = t->last_modified = NULL;
    t->upto = RS_TIME_NONE;
}

static char *
validator_dup(const char *v)
{
    return v != NULL && strlen(v) < PULL_VALIDATOR_MAX ? rs_strdup(v) : NULL;
}

static int
on_after_link(void *ud, const struct rs_weblink *l)
{
    struct pull *p = ud;

    if (p->doc_after == NULL && rs_rel_has(l->rel, PULL_AFTER_REL))
        p->doc_after = rs_strdup(l->target);
    return 0;
}

static void
on_link_value(void *ud, const char *value)
{
    /* A malformed Link only means no continuation: read as before. */
    if (rs_link_header_parse(value, strlen(value), on_after_link, ud) != 0)
        return;
}

/* A Change List of an incremental pull was read to its end: a closed one
 * is not read again; an open one that names its continuation is where
 * the next pull starts, with the validators of this read. */
static void
tail_doc_end(struct pull *p, const char *url, const struct rs_head *h)
{
    struct pull_tail *t = p->tail;
    const char *name = p->phase == PHASE_TAIL && t->list != NULL ? t->list
                                                                 : url;
    char *after = NULL;

    if (h->root != RS_ROOT_URLSET)
        return;
    if (h->md.until != RS_TIME_NONE) {
        if (t->closed.n >= PULL_CLOSED_MAX)
            uriset_clear(&t->closed);
        if (uriset_add(&t->closed, name) < 0)
            return;                   /* out of memory: read again */
        if (t->list != NULL && strcmp(t->list, name) == 0) {
            tail_forget_next(t);
            p->tail_closed = true;
        }
        return;
    }
    if (p->doc_after != NULL &&
        rs_url_resolve(url, p->doc_after, &after) != 0)
        after = NULL;
    if (after == NULL || !rs_url_is_http(after)) {
        /* No continuation: the list is read whole, from the index. */
        rs_free(after);
        tail_forget_next(t);
        return;
    }
    char *list = rs_strdup(name);
    char *etag = validator_dup(docwalk_header(p->walk, "ETag"));
    char *lm = validator_dup(docwalk_header(p->walk, "Last-Modified"));
    rs_time_t upto = p->doc_newest != RS_TIME_NONE ? p->doc_newest
                     : p->phase == PHASE_TAIL ? t->upto : h->md.from;
    tail_forget_next(t);
    if (list == NULL || (etag == NULL && lm == NULL)) {
        rs_free(list);
        rs_free(etag);
        rs_free(lm);
        rs_free(after);
        return;
    }
    t->list = list;
    t->next = after;
    t->etag = etag;
    t->last_modified = lm;
    t->upto = upto;
}

/* Start reading from the tail: true when started (else walk the index). */
static bool
tail_start(struct pull *p)
{
    struct pull_tail *t = p->tail;
    char cond[PULL_VALIDATOR_MAX + 32];

    if (t == NULL || t->next == NULL || p->since == RS_TIME_NONE ||
        t->upto == RS_TIME_NONE || t->upto > p->since)
        return false;
    if (t->etag != NULL)
        snprintf(cond, sizeof(cond), "If-None-Match: %s", t->etag);
    else
        snprintf(cond, sizeof(cond), "If-Modified-Since: %s",
                 t->last_modified);
    if (docwalk_start_cond(p->walk, t->next, cond) != 0)
        return false;
    return true;
}

/* ------------------------------------------------------------ changes */

/* A time the Source gave: taken as now if it is beyond our clock's skew
 * (apply_future), and counted for the report. */
static rs_time_t
source_time(struct pull *p, rs_time_t t)
{
    if (apply_future(&t, rs_time_now()))
        p->r.future++;
    return t;
}

static int
on_change_entry(struct pull *p, const struct rs_entry *e, const char *loc)
{
    struct ledger_todo t;
    char hbuf[RS_HASHES_BUFSZ];
    int rc;

    if (apply_todo_from_entry(e, loc, "changelist", &t, hbuf))
        p->r.future++;
    if (t.change_dt != RS_TIME_NONE && t.change_dt > p->doc_newest)
        p->doc_newest = t.change_dt;
    if (p->since != RS_TIME_NONE && t.change_dt != RS_TIME_NONE &&
        t.change_dt < p->since - PULL_OVERLAP_US)
        return 0;
    if (t.change_dt != RS_TIME_NONE && t.change_dt > p->changes_newest)
        p->changes_newest = t.change_dt;
    if (p->kind != PULL_CHANGES) {
        /* Bringing a Resource List forward: what happened to each. */
        p->r.changes++;
        if (p->cs != NULL && !p->cs_full) {
            rc = changeset_put(p->cs, loc, t.change, t.change_dt);
            if (rc == RS_ETOOBIG)
                p->cs_full = true;
            else if (rc != 0)
                return rc;
        }
        if (p->kind == PULL_AUDIT)
            return 0;
    }
    rc = apply_offer(p->o.apply, &t);
    if (rc < 0)
        return rc;
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

/* ------------------------------------------------------------- spans */

static void
spans_reset(struct pull *p)
{
    p->nspans = 0;
    p->spans_lost = false;
    p->index_from = p->cover_from = RS_TIME_NONE;
}

/* A Change List's interval met (from RS_TIME_NONE: it cannot be placed). */
static void
span_add(struct pull *p, rs_time_t from, rs_time_t until)
{
    if (from == RS_TIME_NONE)
        return;
    if (p->nspans == p->capspans) {
        size_t cap = p->capspans > 0 ? p->capspans * 2 : 16;
        struct pull_span *n = cap <= PULL_SPANS_MAX
                              ? rs_realloc(p->spans, cap * sizeof(*n)) : NULL;
        if (n == NULL) {
            p->spans_lost = true;
            return;
        }
        p->spans = n;
        p->capspans = cap;
    }
    if (until != RS_TIME_NONE && until < from)
        until = from;
    p->spans[p->nspans++] = (struct pull_span){ from, until };
}

static int
cmp_span(const void *a, const void *b)
{
    rs_time_t x = ((const struct pull_span *)a)->from;
    rs_time_t y = ((const struct pull_span *)b)->from;
    return (x > y) - (x < y);
}

/* The earliest time from which the lists met cover everything up to the
 * newest of them, holes between lists (PULL_SPAN_SLACK_US) included: the
 * start of the last unbroken run. RS_TIME_NONE: none can be placed, or
 * one was lost. Lists that give no from at all: the index's. */
static rs_time_t
spans_cover(struct pull *p)
{
    rs_time_t start = RS_TIME_NONE, end = RS_TIME_NONE;
    bool open = false;

    if (p->spans_lost)
        return RS_TIME_NONE;
    if (p->nspans == 0)
        return p->index_from;
    qsort(p->spans, p->nspans, sizeof(*p->spans), cmp_span);
    for (size_t i = 0; i < p->nspans; i++) {
        const struct pull_span *sp = &p->spans[i];
        if (start == RS_TIME_NONE ||
            (!open && sp->from > end + PULL_SPAN_SLACK_US)) {
            start = sp->from;         /* a hole before it: a new run */
            end = sp->until;
            open = sp->until == RS_TIME_NONE;
        } else if (sp->until == RS_TIME_NONE) {
            open = true;
        } else if (sp->until > end) {
            end = sp->until;
        }
    }
    return start;
}

/* ---------------------------------------------------------- snapshots */

/* The newest time the documents read speak for: the snapshot, brought
 * forward by the Change Lists when they were read. */
static rs_time_t
horizon(const struct pull *p)
{
    rs_time_t h = p->r.snapshot;

    if (p->cs != NULL && p->changes_newest != RS_TIME_NONE &&
        (h == RS_TIME_NONE || p->changes_newest > h))
        h = p->changes_newest;
    return h;
}

/* Can a mirror change made at t be judged against the documents? Yes
 * when the Resource List was made after it (as of `at`), or when Change
 * Lists cover t: read, reaching back over the span after `at`, and
 * holding changes as late. A change no document covers is too recent to
 * judge: the Source may not have published it yet. */
static bool
judgeable(const struct pull *p, rs_time_t t, rs_time_t at)
{
    if (t == RS_TIME_NONE || at == RS_TIME_NONE || t <= at)
        return true;
    if (p->cs == NULL || t > horizon(p))
        return false;
    return p->r.changes_reach_back ||
           (p->cover_from != RS_TIME_NONE && t >= p->cover_from);
}

/* Does the change o (read from the Change Lists) come after a list made
 * at `at`? A change of unknown time does not: a list's at is a fact. */
static bool
supersedes(const struct changeset_entry *o, rs_time_t at)
{
    return o != NULL && o->dt != RS_TIME_NONE &&
           (at == RS_TIME_NONE || o->dt >= at);
}

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
    if (!p->o.deep || want == NULL)
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

/* The mirror's own record of r as a set of hashes, for file_agrees when
 * no list entry says what to expect. */
static const struct rs_hashes *
recorded_hashes(const struct ledger_res *r, struct rs_hashes *buf)
{
    if (r->hash == NULL || rs_hashes_parse(r->hash, strlen(r->hash), buf) != 0)
        return NULL;
    return buf;
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

/* AUDIT: the Change Lists say uri changed (o) after the list's snapshot;
 * r: the mirror's row (NULL: never had it). The mirror is in step when it
 * is in the state the change left and has taken that change (or a later
 * one: then too recent to judge if no document covers it yet). */
static void
judge_change(struct pull *p, const char *uri, const struct changeset_entry *o,
             const struct ledger_res *r)
{
    bool exists = o->change != LEDGER_DELETE;
    rs_time_t mdt = r != NULL ? r->change_dt : RS_TIME_NONE;
    bool later = mdt != RS_TIME_NONE && o->dt != RS_TIME_NONE && mdt > o->dt;
    bool taken = later || (mdt != RS_TIME_NONE && mdt == o->dt);
    struct rs_hashes hb;
    bool have = r != NULL && !r->deleted &&
                file_agrees(p, r, recorded_hashes(r, &hb));

    if (later && !judgeable(p, mdt, p->r.snapshot)) {
        p->r.recent++;
        return;
    }
    if (exists == have && (taken || !exists)) {
        p->r.unchanged++;
        return;
    }
    if (!diff(p, uri, exists && have ? "updated"
                      : exists ? "added" : "deleted"))
        return;
    if (exists && have)
        p->r.updated++;
    else if (exists)
        p->r.added++;
    else
        p->r.deleted++;
}

static int
on_snapshot_entry(struct pull *p, const struct rs_entry *e, const char *loc)
{
    struct ledger_res r;
    struct ledger_todo t = { 0 };
    struct changeset_entry *o;
    char *buf = NULL, hbuf[RS_HASHES_BUFSZ];
    bool have, same, repair;
    int rc;

    rs_time_t lastmod = source_time(p, e->lastmod);
    if (lastmod != RS_TIME_NONE &&
        (p->newest_lastmod == RS_TIME_NONE || lastmod > p->newest_lastmod))
        p->newest_lastmod = lastmod;
    if (!p->o.readonly && (rc = apply_txn(p->o.apply)) != 0)
        return rc;
    rc = ledger_res_get(p->o.ledger, loc, &r, &buf);
    if (rc != 0 && rc != RS_ENOTFOUND)
        return rc;
    bool row = rc == 0;
    if (p->o.readonly)
        rc = uriset_add(&p->seen, loc) < 0 ? RS_ENOMEM : 0;
    else if (row)
        rc = ledger_res_mark(p->o.ledger, loc, p->gen);
    else
        rc = 0;                       /* no row yet: nothing to mark */
    if (rc != 0) {
        rs_free(buf);
        return rc;
    }
    o = p->cs != NULL ? changeset_find(p->cs, loc) : NULL;
    if (o != NULL)
        o->seen = true;
    if (supersedes(o, p->doc_at)) {
        /* A later change says what the Source holds now: a reconcile
         * offered it already; an audit judges the mirror against it. */
        p->r.explained++;
        if (p->kind == PULL_AUDIT)
            judge_change(p, loc, o, row ? &r : NULL);
        rs_free(buf);
        return 0;
    }
    have = row && !r.deleted;
    same = have && entry_agrees(&r, e);
    /* The ledger agrees, the file does not: changed behind our back. */
    repair = same && !file_agrees(p, &r, &e->md.hash);
    if (repair) {
        struct stat sb;
        same = false;
        if (mirror_stat(p->o.mirror, r.path, &sb) != 0)
            have = false;             /* gone: the mirror lacks it */
    }
    /* The mirror's last change of it, when the list cannot speak for it:
     * after the list's snapshot and not covered by a Change List. */
    bool recent = row && !repair && !judgeable(p, r.change_dt, p->doc_at);
    rs_time_t mdt = row ? r.change_dt : RS_TIME_NONE;
    rs_free(buf);
    if (same) {
        p->r.unchanged++;
        return 0;
    }
    if (recent) {
        /* Not a difference; and a reconcile must not undo it (its offer,
         * as of the snapshot, would be older than the mirror's change). */
        p->r.recent++;
        return 0;
    }
    if (p->kind == PULL_AUDIT) {
        if (diff(p, loc, have ? "updated" : "added")) {
            if (have)
                p->r.updated++;
            else
                p->r.added++;
        }
        return 0;
    }
    t.uri = loc;
    t.change = have ? LEDGER_UPDATE : LEDGER_CREATE;
    t.change_dt = p->doc_at != RS_TIME_NONE ? p->doc_at : lastmod;
    /* The mirror changed it after the snapshot, in a span the Change
     * Lists cover without a word about it: the documents' state wins, as
     * of the newest time they speak for. */
    if (!recent && mdt != RS_TIME_NONE && t.change_dt != RS_TIME_NONE &&
        mdt > t.change_dt)
        t.change_dt = horizon(p);
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
 * unless a later change says otherwise, or they changed after every
 * document read (a push brought them). */
enum unseen { UNSEEN_KEEP, UNSEEN_DELETE };

static enum unseen
unseen_class(struct pull *p, const struct ledger_res *r, rs_time_t at,
             bool count)
{
    struct changeset_entry *o;

    if (p->o.readonly && uriset_has(&p->seen, r->uri))
        return UNSEEN_KEEP;
    o = p->cs != NULL ? changeset_find(p->cs, r->uri) : NULL;
    if (o != NULL)
        o->seen = true;
    if (supersedes(o, at)) {
        if (count) {
            p->r.explained++;         /* a reconcile offered it already */
            if (p->kind == PULL_AUDIT)
                judge_change(p, r->uri, o, r);
        }
        return UNSEEN_KEEP;
    }
    if (!judgeable(p, r->change_dt, at)) {
        if (count)
            p->r.recent++;
        return UNSEEN_KEEP;
    }
    return UNSEEN_DELETE;
}

static rs_time_t
unseen_at(const struct pull *p)
{
    return p->r.snapshot != RS_TIME_NONE ? p->r.snapshot : p->started;
}

/* The first pass: counts, and an audit's findings. */
static int
on_unseen(void *ud, const struct ledger_res *r)
{
    struct pull *p = ud;

    if (unseen_class(p, r, unseen_at(p), true) != UNSEEN_DELETE)
        return 0;
    if (p->r.skipped > 0) {
        /* A skipped entry may be this very resource: not named is not
         * gone (pull_report.skipped). */
        p->r.deletions_unjudged++;
        return 0;
    }
    p->r.deleted++;
    p->unseen++;
    if (p->kind == PULL_AUDIT)
        diff(p, r->uri, "deleted");
    return 0;
}

/* A reconcile's second pass, once the valve let the deletions through. */
static int
on_unseen_delete(void *ud, const struct ledger_res *r)
{
    struct pull *p = ud;
    struct ledger_todo t = { 0 };
    rs_time_t at = unseen_at(p);
    int rc;

    if (p->r.skipped > 0 || unseen_class(p, r, at, false) != UNSEEN_DELETE)
        return 0;
    t.uri = r->uri;
    t.change = LEDGER_DELETE;
    t.change_dt = r->change_dt != RS_TIME_NONE && r->change_dt > at
                  ? horizon(p) : at;
    t.length = -1;
    t.lastmod = RS_TIME_NONE;
    t.origin = "resourcelist";
    rc = apply_offer(p->o.apply, &t);
    return rc < 0 ? rc : 0;
}

/* The safety valve: may a reconcile delete what its list left out? */
static int
deletions_allowed(struct pull *p, bool *allowed)
{
    uint64_t n = p->unseen;
    int rc;

    *allowed = true;
    if (n == 0 || p->o.force_delete)
        return 0;
    if (p->o.max_delete > 0 && n > p->o.max_delete)
        *allowed = false;
    if (*allowed && p->o.max_delete_share > 0) {
        if ((rc = ledger_res_count(p->o.ledger, &p->r.mirror_live, NULL)) != 0)
            return rc;
        if ((double)n * 100.0 >
            (double)p->r.mirror_live * (double)p->o.max_delete_share)
            *allowed = false;
    }
    if (!*allowed) {
        p->r.deletions_held = n;
        p->r.deleted -= n;
    }
    return 0;
}

/* AUDIT, last: changes to resources neither the list nor the mirror's
 * live rows named (created after the snapshot, or deleted in both). */
static int
on_unnamed_change(void *ud, struct changeset_entry *o)
{
    struct pull *p = ud;
    struct ledger_res r;
    char *buf = NULL;
    int rc;

    if (o->seen)
        return 0;
    rc = ledger_res_get(p->o.ledger, o->uri, &r, &buf);
    if (rc != 0 && rc != RS_ENOTFOUND)
        return rc;
    judge_change(p, o->uri, o, rc == 0 ? &r : NULL);
    rs_free(buf);
    return 0;
}

/* ---------------------------------------------------- walk callbacks */

static int
on_head(void *ud, const char *url, const struct rs_head *h)
{
    struct pull *p = ud;
    bool changes = p->phase == PHASE_CHANGES || p->phase == PHASE_TAIL;
    enum rs_capability want = changes ? RS_CAP_CHANGELIST
                                      : RS_CAP_RESOURCELIST;

    if (h->has_md && h->md.capability != want &&
        h->md.capability != RS_CAP_NONE) {
        snprintf(p->err, sizeof(p->err), "%s: a %s where a %s was expected",
                 url, rs_capability_name(h->md.capability),
                 rs_capability_name(want));
        return RS_EINVALID;
    }
    if (p->phase == PHASE_PEEK) {
        /* The snapshot: the list's at; an index's, and its parts' (read
         * from the index's entries, on_child). */
        rs_time_t at = source_time(p, h->md.at);
        if (at != RS_TIME_NONE &&
            (p->r.snapshot == RS_TIME_NONE || at < p->r.snapshot))
            p->r.snapshot = at;
        return h->root == RS_ROOT_SITEMAPINDEX ? 0 : DOCWALK_SKIP;
    }
    if (changes) {
        p->doc_newest = RS_TIME_NONE;
        rs_free(p->doc_after);
        p->doc_after = NULL;
        if (p->tail != NULL)
            docwalk_links(p->walk, on_link_value, p);
        if (p->kind == PULL_CHANGES)
            p->r.docs++;
        if (h->root == RS_ROOT_SITEMAPINDEX) {
            /* Not a list: its from says nothing of holes between them. */
            if (h->md.from != RS_TIME_NONE &&
                (p->index_from == RS_TIME_NONE || h->md.from < p->index_from))
                p->index_from = h->md.from;
        } else {
            span_add(p, h->md.from, h->md.until);
        }
        return 0;
    }
    p->r.docs++;
    rs_time_t at = source_time(p, h->md.at);
    if (h->root == RS_ROOT_SITEMAPINDEX) {
        p->index_at = at;
        p->doc_at = at;
    } else {
        p->doc_at = at != RS_TIME_NONE ? at : p->index_at;
    }
    /* Without a peek (no Change Lists), or if the Source made a new list
     * since: the earliest time any part describes. */
    if (p->doc_at != RS_TIME_NONE &&
        (p->r.snapshot == RS_TIME_NONE || p->doc_at < p->r.snapshot))
        p->r.snapshot = p->doc_at;
    return 0;
}

static int
on_child(void *ud, const char *index_url, const struct rs_entry *e,
         const char *loc)
{
    struct pull *p = ud;

    (void)index_url;
    (void)loc;
    if (p->phase == PHASE_PEEK) {
        rs_time_t at = e->has_md ? source_time(p, e->md.at) : RS_TIME_NONE;
        if (at != RS_TIME_NONE &&
            (p->r.snapshot == RS_TIME_NONE || at < p->r.snapshot))
            p->r.snapshot = at;
        return 0;                     /* the head is all the peek wants */
    }
    /* Where the index places the list (its head, read, may say more). */
    if (p->phase == PHASE_CHANGES && e->has_md)
        span_add(p, e->md.from, e->md.until);
    /* A closed Change List that ended before `since` has nothing new. */
    if (p->phase == PHASE_CHANGES && p->since != RS_TIME_NONE && e->has_md &&
        e->md.until != RS_TIME_NONE && e->md.until < p->since - PULL_OVERLAP_US)
        return 0;
    /* A closed list read to its end already has nothing new. */
    if (p->phase == PHASE_CHANGES && p->tail != NULL && e->has_md &&
        e->md.until != RS_TIME_NONE && uriset_has(&p->tail->closed, loc))
        return 0;
    return 1;
}

static void
on_doc_end(void *ud, const char *url, const struct rs_head *h)
{
    struct pull *p = ud;

    if (p->tail != NULL &&
        (p->phase == PHASE_CHANGES || p->phase == PHASE_TAIL))
        tail_doc_end(p, url, h);
}

static void
on_not_modified(void *ud, const char *url)
{
    struct pull *p = ud;

    (void)url;
    p->not_modified = true;
}

static int
on_entry(void *ud, const char *url, const struct rs_entry *e, const char *loc)
{
    struct pull *p = ud;
    int rc;

    (void)url;
    if (p->phase == PHASE_PEEK)
        return 0;
    p->r.entries++;
    rc = p->phase == PHASE_CHANGES || p->phase == PHASE_TAIL
         ? on_change_entry(p, e, loc) : on_snapshot_entry(p, e, loc);
    progress(p);
    if (rc < 0 && p->err[0] == '\0')
        snprintf(p->err, sizeof(p->err), "%s: %s", loc, rs_strerror(rc));
    if (p->r.entries % 1000 == 0)
        apply_kick(p->o.apply);
    return rc;
}

/* An entry the parser skipped as malformed (docwalk skip_bad_entries):
 * told, counted - which in a reconcile or an audit holds every deletion
 * (on_unseen) - and, in a Change List, a time it still carries moves the
 * position on, as its good neighbours do: it is never applied, and need
 * not be read again. */
static int
on_bad_entry(void *ud, const char *url, const struct rs_entry *e,
             unsigned line, const char *msg)
{
    struct pull *p = ud;

    /* The peek reads the documents the list phase reads again; told
     * then, once. */
    if (p->phase == PHASE_PEEK)
        return 0;
    p->r.skipped++;
    if (p->o.on_bad_entry != NULL)
        p->o.on_bad_entry(p->o.ud, url, line, e->loc, msg);
    if (p->kind == PULL_CHANGES &&
        (p->phase == PHASE_CHANGES || p->phase == PHASE_TAIL)) {
        rs_time_t t = e->has_md && e->md.datetime != RS_TIME_NONE
                      ? e->md.datetime : e->lastmod;
        if (t == RS_TIME_NONE)
            return 0;
        t = source_time(p, t);
        if (t > p->doc_newest)
            p->doc_newest = t;
        if ((p->since == RS_TIME_NONE || t >= p->since - PULL_OVERLAP_US) &&
            t > p->changes_newest)
            p->changes_newest = t;
    }
    return 0;
}

/* --------------------------------------------------------------- phases */

static void
pull_set_phase(struct pull *p, enum pull_phase to)
{
    p->phase = to;
}

/* Walk url in the current phase; on failure the pull ends. */
static void
phase_walk(struct pull *p, const char *url)
{
    int rc = docwalk_start(p->walk, url);

    if (rc != 0) {
        snprintf(p->err, sizeof(p->err), "%s: %s", url, rs_strerror(rc));
        pull_end(p, rc, "");
    }
}

static void
phase_list(struct pull *p)
{
    pull_set_phase(p, PHASE_LIST);
    p->index_at = p->doc_at = RS_TIME_NONE;
    p->r.docs = 0;
    phase_walk(p, p->url);
}

/* The Change Lists could not bring the list forward: say why, and judge
 * against the list alone (a reconcile has offered what it read: those
 * changes are real). */
static void
changes_unusable(struct pull *p, const char *why)
{
    snprintf(p->r.changes_error, sizeof(p->r.changes_error), "%s", why);
    changeset_free(p->cs);
    p->cs = NULL;
    p->r.changes_read = p->r.changes_reach_back = false;
}

static void
after_peek(struct pull *p)
{
    if (p->r.snapshot == RS_TIME_NONE) {
        changes_unusable(p, "the resource list has no at: its age is "
                         "unknown");
        phase_list(p);
        return;
    }
    if ((p->cs = changeset_new(0)) == NULL) {
        pull_end(p, RS_ENOMEM, "out of memory");
        return;
    }
    pull_set_phase(p, PHASE_CHANGES);
    p->since = p->r.snapshot;
    p->changes_newest = RS_TIME_NONE;
    spans_reset(p);
    phase_walk(p, p->changes_url);
}

static void
after_changes(struct pull *p, int rc, const char *err)
{
    char why[300];

    p->err[0] = '\0';                 /* the list is what fails a pull */
    if (rc != 0) {
        snprintf(why, sizeof(why), "cannot read the change lists: %s", err);
        changes_unusable(p, why);
    } else if (p->cs_full) {
        snprintf(why, sizeof(why), "more than %d changes since the "
                 "resource list", CHANGESET_MAX);
        if (p->kind == PULL_AUDIT) {
            snprintf(p->err, sizeof(p->err), "%s: too many to audit "
                     "against; audit after the Source's next resource list",
                     why);
            pull_end(p, RS_ETOOBIG, "");
            return;
        }
        changes_unusable(p, why);
    } else {
        p->r.changes_read = true;
        p->cover_from = spans_cover(p);
        p->r.changes_reach_back = p->cover_from != RS_TIME_NONE &&
                                  p->cover_from <= p->r.snapshot;
    }
    phase_list(p);
}

static void
after_list(struct pull *p)
{
    int rc = p->o.readonly ? 0 : apply_txn(p->o.apply);

    if (rc == 0)
        rc = ledger_res_each(p->o.ledger, false, p->o.readonly ? -1 : p->gen,
                             on_unseen, p);
    if (rc == 0 && p->kind == PULL_RECONCILE && p->r.skipped == 0) {
        bool allowed;
        if ((rc = deletions_allowed(p, &allowed)) == 0 && allowed)
            rc = ledger_res_each(p->o.ledger, false, p->gen,
                                 on_unseen_delete, p);
    }
    if (rc != 0 && p->err[0] == '\0')
        snprintf(p->err, sizeof(p->err), "state: %s",
                 ledger_errstr(p->o.ledger));
    if (rc == 0 && p->kind == PULL_AUDIT && p->cs != NULL)
        rc = changeset_each(p->cs, on_unnamed_change, p);
    if (rc != 0 && p->err[0] == '\0')
        snprintf(p->err, sizeof(p->err), "state: %s",
                 ledger_errstr(p->o.ledger));
    uriset_clear(&p->seen);
    p->r.newest = horizon(p);
    /* A list without `at` is at least as new as its newest lastmod, and
     * may be much older than this walk (a list made weekly): the Change
     * Lists are read from there, or what changed between is skipped. */
    if (p->r.newest == RS_TIME_NONE)
        p->r.newest = p->newest_lastmod != RS_TIME_NONE ? p->newest_lastmod
                                                       : p->started;
    pull_end(p, rc, "");
}

static void
on_walk_done(void *ud, int rc, const char *err)
{
    struct pull *p = ud;

    switch (p->phase) {
    case PHASE_PEEK:
        if (rc != 0)
            pull_end(p, rc, err);
        else
            after_peek(p);
        return;
    case PHASE_TAIL:
        if (rc == RS_ENOTFOUND) {
            /* The list (or the change it reads on from) is gone. */
            tail_forget_next(p->tail);
            rc = 0;
            p->tail_closed = true;
        }
        if (rc == 0 && p->tail_closed) {
            /* Closed (or gone): the index names what follows it. */
            pull_set_phase(p, PHASE_CHANGES);
            phase_walk(p, p->url);
            return;
        }
        if (rc == 0 && p->not_modified) {
            /* Nothing since the last read, which reached `since`. */
            p->r.newest = RS_TIME_NONE;
            p->r.reached_back = true;
            pull_end(p, 0, "");
            return;
        }
        /* read like any Change List */
        __attribute__((fallthrough));
    case PHASE_CHANGES:
        if (p->kind != PULL_CHANGES) {
            after_changes(p, rc, err);
            return;
        }
        p->r.newest = p->changes_newest;
        p->cover_from = spans_cover(p);
        p->r.reached_back = p->since != RS_TIME_NONE &&
                            p->cover_from != RS_TIME_NONE &&
                            p->cover_from <= p->since;
        pull_end(p, rc, err);
        return;
    case PHASE_LIST:
        if (rc != 0)
            pull_end(p, rc, err);
        else
            after_list(p);
        return;
    case PHASE_IDLE:
        return;
    }
}

static void
pull_end(struct pull *p, int rc, const char *err)
{
    char e[sizeof(p->err)];

    snprintf(e, sizeof(e), "%s", p->err[0] != '\0' ? p->err : err);
    pull_set_phase(p, PHASE_IDLE);
    changeset_free(p->cs);
    p->cs = NULL;
    uriset_clear(&p->seen);
    apply_kick(p->o.apply);
    if (p->o.on_progress != NULL)
        p->o.on_progress(p->o.ud, p->r.entries);
    p->o.on_done(p->o.ud, rc, rc == 0 ? "" : e, &p->r);
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
        .on_doc_end = on_doc_end,
        .on_not_modified = on_not_modified,
        .on_done = on_walk_done,
        /* One malformed entry must not stop the mirror: the rest is
         * read, the entry told (on_bad_entry); what a list with a hole
         * may not do is in on_unseen. */
        .skip_bad_entries = true,
        .on_bad_entry = on_bad_entry,
    };

    if (p == NULL)
        return NULL;
    p->o = *o;
    /* Hidden: poll as before tails and validators, every list read whole
     * (tests/bench/bench_pollcost.sh measures both in one run). */
    const char *full = getenv("RSSUB_POLL_FULL");
    p->full_polls = full != NULL && strcmp(full, "1") == 0;
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
    changeset_free(p->cs);
    uriset_clear(&p->seen);
    rs_free(p->url);
    rs_free(p->changes_url);
    rs_free(p->doc_after);
    rs_free(p->spans);
    for (size_t i = 0; i < p->ntails; i++)
        tail_clear(&p->tails[i]);
    rs_free(p);
}

int
pull_start(struct pull *p, enum pull_kind k, const char *url,
           const char *changes, rs_time_t since)
{
    char *u = NULL, *c = NULL;
    int rc;

    if (p->phase != PHASE_IDLE)
        return RS_ESTATE;
    if ((u = rs_strdup(url)) == NULL ||
        (k != PULL_CHANGES && changes != NULL &&
         (c = rs_strdup(changes)) == NULL)) {
        rs_free(u);
        return RS_ENOMEM;
    }
    rs_free(p->url);
    rs_free(p->changes_url);
    p->url = u;
    p->changes_url = c;
    memset(&p->r, 0, sizeof(p->r));
    p->r.kind = k;
    p->r.newest = p->r.snapshot = RS_TIME_NONE;
    p->r.mirror_live = -1;
    p->kind = k;
    p->since = k == PULL_CHANGES ? since : RS_TIME_NONE;
    p->started = rs_time_now();
    p->index_at = p->doc_at = RS_TIME_NONE;
    spans_reset(p);
    p->newest_lastmod = RS_TIME_NONE;
    p->changes_newest = RS_TIME_NONE;
    p->cs_full = false;
    p->unseen = 0;
    p->err[0] = '\0';
    p->not_modified = p->tail_closed = false;
    p->doc_newest = RS_TIME_NONE;
    p->tail = k == PULL_CHANGES && !p->full_polls ? tail_get(p, url, true)
                                                  : NULL;
    if (k == PULL_AUDIT && p->o.readonly) {
        p->gen = 0;
    } else if (k != PULL_CHANGES) {
        if ((rc = apply_txn(p->o.apply)) != 0 ||
            (rc = ledger_gen_next(p->o.ledger, &p->gen)) != 0)
            return rc;
        apply_set_gen(p->o.apply, p->gen);
    }
    if (k == PULL_CHANGES) {
        pull_set_phase(p, PHASE_TAIL);
        if (tail_start(p))
            return 0;
    }
    pull_set_phase(p, k == PULL_CHANGES ? PHASE_CHANGES
                      : c != NULL ? PHASE_PEEK : PHASE_LIST);
    if ((rc = docwalk_start(p->walk, p->url)) != 0) {
        pull_set_phase(p, PHASE_IDLE);
        return rc;
    }
    return 0;
}

bool
pull_busy(const struct pull *p)
{
    return p->phase != PHASE_IDLE;
}
