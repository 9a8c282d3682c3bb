/*
 * clscan.c - Change List change detection (see clscan.h). Tables: walk
 * (this walk's entries, one row per identity, the first place it was
 * read), seen (the feed's last walk: identity, loc, datetime, the walks
 * that first and last saw it, published or refused). The commit, in one
 * transaction: the seen rows met again move to this walk; the new ones
 * are classified in datetime order; the rows not met again are judged
 * (fallen out of the window, superseded, or lost) and dropped.
 */
#include "clscan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RS_LOG_MODULE "clscan"
#include "rs_alloc.h"
#include "rs_hash.h"
#include "rs_log.h"
#include "rs_sqlite.h"

#define CLSCAN_SPANS 24           /* suspect spans kept (feeds.suspects) */
#define CLSCAN_SHRINK_SLACK_US (2 * 1000000)
#define CLSCAN_FUTURE_LOGS 10     /* future entries logged one commit */

enum seen_state { SEEN_PUBLISHED = 1, SEEN_REFUSED = 2 };

/* A document of the walk: the datetimes it held, for the spans between
 * two pages read one after the other forwards. */
struct cs_doc {
    int64_t rank;
    rs_time_t lo, hi;             /* RS_TIME_NONE: no dated entry */
    bool forward;
};

struct clscan {
    struct store *st;
    int64_t feed;
    uint64_t staged;
    struct store_feed *prev;      /* the feed this walk's feed replaces */
    bool has_prev;
    bool keep_prev;               /* ... still followed: its rows stay */
    struct cs_doc cur;            /* the document being read */
    bool cur_open;
    struct cs_doc *docs;
    size_t ndocs, capdocs;
    char **holes;                 /* documents read with skipped entries */
    size_t nholes, capholes;
};

uint64_t
clscan_key(const char *loc, enum rs_change change, rs_time_t dt)
{
    char tail[48];
    snprintf(tail, sizeof(tail), "\n%d\n%lld", (int)change,
             dt == RS_TIME_NONE ? -1LL : (long long)dt);
    uint64_t h = 1469598103934665603ull;
    for (const char *p = loc; *p != '\0'; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    for (const char *p = tail; *p != '\0'; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h;
}

struct clscan *
clscan_new(struct store *st)
{
    struct clscan *cs = rs_calloc(1, sizeof(*cs));
    if (cs == NULL)
        return NULL;
    cs->st = st;
    if ((cs->prev = rs_malloc(sizeof(*cs->prev))) == NULL) {
        rs_free(cs);
        return NULL;
    }
    return cs;
}

static void
holes_clear(struct clscan *cs)
{
    for (size_t i = 0; i < cs->nholes; i++)
        rs_free(cs->holes[i]);
    cs->nholes = 0;
}

void
clscan_free(struct clscan *cs)
{
    if (cs == NULL)
        return;
    holes_clear(cs);
    rs_free(cs->holes);
    rs_free(cs->docs);
    rs_free(cs->prev);
    rs_free(cs);
}

void
clscan_begin(struct clscan *cs, int64_t feed)
{
    cs->feed = feed;
    cs->staged = 0;
    cs->ndocs = 0;
    holes_clear(cs);
    cs->cur_open = false;
    cs->has_prev = false;
    cs->keep_prev = false;
}

void
clscan_replaces(struct clscan *cs, const struct store_feed *prev, bool keep)
{
    *cs->prev = *prev;
    cs->has_prev = true;
    cs->keep_prev = keep;
}

static rs_time_t
entry_dt(const struct rs_entry *e)
{
    if (e->has_md && e->md.datetime != RS_TIME_NONE)
        return e->md.datetime;
    return e->lastmod;
}

static const char SQL_STAGE[] =
    "INSERT OR IGNORE INTO walk(feed, key, ord, loc, change, dt, lastmod, "
    "hash, length, type, doc) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
    "?10, ?11)";

int
clscan_entry(struct clscan *cs, const struct walk_doc *d, size_t idx,
             const struct rs_entry *e, const char *loc)
{
    if (cs->staged >= CLSCAN_MAX_ENTRIES)
        return RS_ETOOBIG;
    rs_time_t dt = entry_dt(e);
    if (!cs->cur_open || cs->cur.rank != d->rank) {
        cs->cur = (struct cs_doc){ d->rank, RS_TIME_NONE, RS_TIME_NONE,
                                   d->forward };
        cs->cur_open = true;
    }
    if (dt != RS_TIME_NONE) {
        if (cs->cur.lo == RS_TIME_NONE || dt < cs->cur.lo)
            cs->cur.lo = dt;
        if (cs->cur.hi == RS_TIME_NONE || dt > cs->cur.hi)
            cs->cur.hi = dt;
    }
    enum rs_change ch = e->has_md ? e->md.change : RS_CHANGE_NONE;
    sqlite3_stmt *s = store_stmt(cs->st, SQL_STAGE);
    if (s == NULL)
        return RS_EIO;
    char hash[RS_HASHES_BUFSZ];
    sqlite3_bind_int64(s, 1, cs->feed);
    sqlite3_bind_int64(s, 2, (int64_t)clscan_key(loc, ch, dt));
    sqlite3_bind_int64(s, 3, (d->rank << 20) | (int64_t)(idx & 0xfffff));
    sqlite3_bind_text(s, 4, loc, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 5, (int)ch);
    rs_sql_bind_time(s, 6, dt);
    rs_sql_bind_time(s, 7, e->lastmod);
    if (e->has_md && e->md.hash.n > 0) {
        rs_hashes_format(&e->md.hash, hash);
        sqlite3_bind_text(s, 8, hash, -1, SQLITE_TRANSIENT);
    }
    if (e->has_md && e->md.length >= 0)
        sqlite3_bind_int64(s, 9, e->md.length);
    if (e->has_md && e->md.type != NULL)
        sqlite3_bind_text(s, 10, e->md.type, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 11, d->url, -1, SQLITE_TRANSIENT);
    int rc = store_exec(cs->st, s, "stage an entry");
    if (rc == 0)
        cs->staged++;
    return rc;
}

int
clscan_doc(struct clscan *cs, const struct walk_doc *d)
{
    struct cs_doc doc = { d->rank, RS_TIME_NONE, RS_TIME_NONE, d->forward };
    if (cs->cur_open && cs->cur.rank == d->rank)
        doc = cs->cur;
    cs->cur_open = false;
    if (d->head == NULL)
        doc.forward = false;          /* a 304 page did not move */
    if (cs->ndocs == cs->capdocs) {
        size_t ncap = cs->capdocs ? cs->capdocs * 2 : 32;
        struct cs_doc *t = rs_realloc(cs->docs, ncap * sizeof(*t));
        if (t == NULL)
            return RS_ENOMEM;
        cs->docs = t;
        cs->capdocs = ncap;
    }
    cs->docs[cs->ndocs++] = doc;
    if (d->skipped == 0)
        return 0;
    if (cs->nholes == cs->capholes) {
        size_t ncap = cs->capholes ? cs->capholes * 2 : 8;
        char **t = rs_realloc(cs->holes, ncap * sizeof(*t));
        if (t == NULL)
            return RS_ENOMEM;
        cs->holes = t;
        cs->capholes = ncap;
    }
    if ((cs->holes[cs->nholes] = rs_strdup(d->url)) == NULL)
        return RS_ENOMEM;
    cs->nholes++;
    return 0;
}

/* ------------------------------------------------------- suspect spans */

struct span {
    rs_time_t lo, hi;
};

static size_t
spans_parse(const char *s, struct span *out, size_t max)
{
    size_t n = 0;
    while (*s != '\0' && n < max) {
        char *end;
        long long lo = strtoll(s, &end, 10);
        if (end == s || *end != ':')
            break;
        s = end + 1;
        long long hi = strtoll(s, &end, 10);
        if (end == s || (*end != ',' && *end != '\0'))
            break;
        out[n++] = (struct span){ lo, hi };
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

static bool
spans_cover(const struct span *sp, size_t n, rs_time_t dt)
{
    for (size_t i = 0; i < n; i++)
        if (dt >= sp[i].lo && dt <= sp[i].hi)
            return true;
    return false;
}

static int
cmp_rank(const void *a, const void *b)
{
    const struct cs_doc *x = a, *y = b;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* The spans this walk may have missed: between two pages of a chain read
 * one right after the other forwards, where an entry that moved from the
 * later page onto the earlier one meanwhile was read on neither. Only the
 * newest CLSCAN_SPANS are kept: the spans of the last walk are all the
 * next one asks about. */
static void
spans_write(struct clscan *cs, char *out, size_t len)
{
    qsort(cs->docs, cs->ndocs, sizeof(*cs->docs), cmp_rank);
    struct span sp[CLSCAN_SPANS];
    size_t n = 0;
    for (size_t i = 1; i < cs->ndocs; i++) {
        const struct cs_doc *a = &cs->docs[i - 1], *b = &cs->docs[i];
        if (!b->forward || b->rank != a->rank + 1)
            continue;
        rs_time_t lo = a->hi != RS_TIME_NONE ? a->hi : b->lo;
        rs_time_t hi = b->lo != RS_TIME_NONE ? b->lo : a->hi;
        if (lo == RS_TIME_NONE || hi == RS_TIME_NONE || hi < lo)
            continue;
        if (n == CLSCAN_SPANS) {
            memmove(sp, sp + 1, (CLSCAN_SPANS - 1) * sizeof(*sp));
            n--;
        }
        sp[n++] = (struct span){ lo, hi };
    }
    size_t off = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        int k = snprintf(out + off, len - off, "%s%lld:%lld",
                         i > 0 ? "," : "", (long long)sp[i].lo,
                         (long long)sp[i].hi);
        if (k < 0 || (size_t)k >= len - off) {
            out[off] = '\0';
            break;
        }
        off += (size_t)k;
    }
}

/* --------------------------------------------------------------- commit */

/* a document that stood as it was still holds what it held: the rows
 * its last read met (not those it had already missed) */
static const char SQL_BUMP_NOTMOD[] =
    "UPDATE seen SET gen = ?2 WHERE feed = ?1 AND miss = 0 AND doc IN "
    "(SELECT url FROM walkdocs WHERE feed = ?1 AND notmod = 1)";
/* a document read with a hole (a skipped entry) may hold, in the entry
 * it could not read, any of the rows its last read met: they stand as
 * met, neither missed nor lost (miss as for a 304) */
static const char SQL_BUMP_HOLE[] =
    "UPDATE seen SET gen = ?2 WHERE feed = ?1 AND miss = 0 AND gen < ?2 "
    "AND doc = ?3";
static const char SQL_BUMP_MET[] =
    "UPDATE seen SET gen = ?2, miss = 0, doc = w.doc FROM walk AS w WHERE "
    "seen.feed = ?1 AND w.feed = ?1 AND w.key = seen.key";
/* the last column: how the feed replaced (?2; -1: none) took the entry */
static const char SQL_NEW[] =
    "SELECT key, loc, change, dt, lastmod, hash, length, type, doc, "
    "(SELECT p.state FROM seen AS p WHERE p.feed = ?2 AND p.key = w.key) "
    "FROM walk AS w WHERE w.feed = ?1 AND NOT EXISTS (SELECT 1 FROM seen "
    "AS s WHERE s.feed = ?1 AND s.key = w.key) ORDER BY (w.dt IS NULL), "
    "w.dt, w.ord";
static const char SQL_SEEN_ADD[] =
    "INSERT OR REPLACE INTO seen(feed, key, loc, dt, gen, first_gen, state, "
    "doc) VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7)";
static const char SQL_GONE[] =
    "SELECT loc, dt, gen FROM seen WHERE feed = ?1 AND gen < ?2 AND "
    "miss = 2";
static const char SQL_MISSED[] =
    "UPDATE seen SET miss = CASE WHEN state = 1 AND dt IS NOT NULL AND "
    "dt >= ?3 THEN 2 ELSE 1 END WHERE feed = ?1 AND gen < ?2 AND miss = 0";
static const char SQL_NEWER[] =
    "SELECT 1 FROM seen WHERE feed = ?1 AND loc = ?2 AND dt > ?3 AND "
    "gen = ?4 AND first_gen >= ?5 LIMIT 1";
static const char SQL_MIN_DT[] =
    "SELECT min(dt) FROM seen WHERE feed = ?1 AND gen = ?2";
static const char SQL_DROP_GONE[] =
    "DELETE FROM seen WHERE feed = ?1 AND gen < ?2 AND miss <> 0";
static const char SQL_DROP_ALL_GONE[] =
    "DELETE FROM seen WHERE feed = ?1 AND gen < ?2";
static const char SQL_WALK_DONE[] = "DELETE FROM walk WHERE feed = ?1";
static const char SQL_POS_BACK[] =
    "SELECT max(dt) FROM seen WHERE feed = ?1 AND state = 1 AND dt <= ?2";
static const char SQL_UNREFUSE[] =
    "DELETE FROM seen WHERE feed = ?1 AND state = 2 AND dt > ?2 AND "
    "dt <= ?3";
static const char SQL_SEEN_DROP[] = "DELETE FROM seen WHERE feed = ?1";
static const char SQL_WALK_MIN_DT[] =
    "SELECT min(dt) FROM walk WHERE feed = ?1";

static int
exec2(struct store *st, const char *sql, int64_t a, int64_t b,
      const char *what)
{
    sqlite3_stmt *s = store_stmt(st, sql);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, a);
    sqlite3_bind_int64(s, 2, b);
    return store_exec(st, s, what);
}

static const char *
col_text(sqlite3_stmt *s, int i)
{
    return (const char *)sqlite3_column_text(s, i);
}

struct commit_ctx {
    struct clscan *cs;
    struct store_feed *f;
    const struct clscan_hooks *h;
    struct clscan_stats *out;
    int64_t gen;
    struct span sp[CLSCAN_SPANS];
    size_t nsp;
    rs_time_t pos;
    rs_time_t ceiling;            /* now + RS_TIME_SKEW_US: the newest
                                     datetime that may move pos */
    rs_time_t since;              /* older than this, an entry never seen
                                     is not published: the position (of
                                     the feed replaced, for a takeover) */
    int64_t known;                /* the feed replaced: what its seen rows
                                     hold was taken already; -1 none */
    int64_t seen_of;              /* the feed whose seen rows hold the
                                     position (this one, or the replaced) */
    rs_time_t floor;              /* a takeover: the replaced feed's window;
                                     an entry older than the position that
                                     it did not have is history rewritten
                                     at or above this, taken silently below
                                     (RS_TIME_NONE: all silently) */
};

/* The new identities, in the Source's order: each published, or refused
 * as history rewritten. */
static int
take_new(struct commit_ctx *x)
{
    struct store *st = x->cs->st;
    sqlite3_stmt *q = store_stmt(st, SQL_NEW);
    if (q == NULL)
        return RS_EIO;
    sqlite3_bind_int64(q, 1, x->f->id);
    sqlite3_bind_int64(q, 2, x->known);
    int rc = 0, r;
    while (rc == 0 && (r = sqlite3_step(q)) == SQLITE_ROW) {
        struct clscan_change c = {
            .loc = col_text(q, 1),
            .change = (enum rs_change)sqlite3_column_int(q, 2),
            .datetime = rs_sql_col_time(q, 3),
            .lastmod = rs_sql_col_time(q, 4),
            .hash = col_text(q, 5),
            .length = sqlite3_column_type(q, 6) == SQLITE_NULL
                          ? -1 : sqlite3_column_int64(q, 6),
            .type = col_text(q, 7),
        };
        enum seen_state state = SEEN_PUBLISHED;
        bool known = sqlite3_column_type(q, 9) != SQLITE_NULL;
        if (known) {
            /* the feed replaced had it: taken as it took it */
            state = sqlite3_column_int(q, 9) == SEEN_REFUSED
                        ? SEEN_REFUSED : SEEN_PUBLISHED;
        } else if (!x->out->baseline) {
            bool older = c.datetime != RS_TIME_NONE &&
                         x->since != RS_TIME_NONE && c.datetime < x->since;
            if (!older || spans_cover(x->sp, x->nsp, c.datetime)) {
                if (older)
                    x->out->late++;
                rc = x->h->on_change(x->h->ud, &c);
                x->out->published++;
            } else if (x->out->replaced &&
                       (x->floor == RS_TIME_NONE || c.datetime < x->floor)) {
                /* before the window the replaced feed had: history the
                 * bridge never followed, as a baseline takes it */
            } else {
                state = SEEN_REFUSED;
                x->out->rewritten++;
                char dt[RS_TIME_BUFSZ];
                rs_time_format(c.datetime, dt);
                rs_log_kv(RS_LOG_WARN, "history rewritten: an entry older "
                          "than what was published, never seen before, is "
                          "not published", "changelist", x->f->url, "loc",
                          c.loc, "datetime", dt, "change",
                          rs_change_name(c.change), NULL);
            }
        }
        if (known) {
            /* the position already covers it */
        } else if (state == SEEN_PUBLISHED && c.datetime != RS_TIME_NONE &&
                   c.datetime > x->ceiling) {
            /* published (it is a change), but the position stays: moved
             * to 2100, every real change after it would be refused as
             * history rewritten */
            if (++x->out->future <= CLSCAN_FUTURE_LOGS) {
                char dt[RS_TIME_BUFSZ];
                rs_time_format(c.datetime, dt);
                rs_log_kv(RS_LOG_WARN, "an entry dated in the future: "
                          "published, but later changes are not judged "
                          "against it", "changelist", x->f->url, "loc",
                          c.loc, "datetime", dt, NULL);
            }
        } else if (state == SEEN_PUBLISHED && c.datetime != RS_TIME_NONE &&
                   (x->pos == RS_TIME_NONE || c.datetime > x->pos)) {
            x->pos = c.datetime;
        }
        if (rc != 0)
            break;
        sqlite3_stmt *s = store_stmt(st, SQL_SEEN_ADD);
        if (s == NULL) {
            rc = RS_EIO;
            break;
        }
        sqlite3_bind_int64(s, 1, x->f->id);
        sqlite3_bind_int64(s, 2, sqlite3_column_int64(q, 0));
        sqlite3_bind_text(s, 3, c.loc, -1, SQLITE_TRANSIENT);
        rs_sql_bind_time(s, 4, c.datetime);
        sqlite3_bind_int64(s, 5, x->gen);
        sqlite3_bind_int(s, 6, (int)state);
        sqlite3_bind_text(s, 7, col_text(q, 8), -1, SQLITE_TRANSIENT);
        rc = store_exec(st, s, "record an entry");
    }
    if (rc == 0 && r != SQLITE_DONE)
        rc = store_fail(st, "new entries");
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return rc;
}

static int
bump_holes(struct commit_ctx *x)
{
    struct clscan *cs = x->cs;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < cs->nholes; i++) {
        sqlite3_stmt *s = store_stmt(cs->st, SQL_BUMP_HOLE);
        if (s == NULL)
            return RS_EIO;
        sqlite3_bind_int64(s, 1, x->f->id);
        sqlite3_bind_int64(s, 2, x->gen);
        sqlite3_bind_text(s, 3, cs->holes[i], -1, SQLITE_TRANSIENT);
        rc = store_exec(cs->st, s, "a document with skipped entries");
    }
    return rc;
}

/* Below which datetime an entry gone from the lists fell out of their
 * window; at or above it, it was lost. */
static rs_time_t
window_threshold(struct commit_ctx *x, rs_time_t cur_from, rs_time_t now)
{
    struct store_feed *f = x->f;
    if (cur_from != RS_TIME_NONE) {
        if (f->win_from != RS_TIME_NONE && f->walked != RS_TIME_NONE &&
            now > f->walked) {
            /* a trailing window moves with the clock; one that moved
             * further shrank, and what it dropped was lost */
            rs_time_t expect = f->win_from + (now - f->walked);
            if (cur_from > expect + CLSCAN_SHRINK_SLACK_US)
                return expect;
        }
        return cur_from;
    }
    /* no declared window: what is older than everything listed now fell
     * off the end */
    rs_time_t min = INT64_MAX;
    sqlite3_stmt *s = store_stmt(x->cs->st, SQL_MIN_DT);
    if (s == NULL)
        return INT64_MAX;
    sqlite3_bind_int64(s, 1, f->id);
    sqlite3_bind_int64(s, 2, x->gen);
    if (sqlite3_step(s) == SQLITE_ROW &&
        sqlite3_column_type(s, 0) != SQLITE_NULL)
        min = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return min;
}

static bool
superseded(struct commit_ctx *x, const char *loc, rs_time_t dt, int64_t gen)
{
    sqlite3_stmt *s = store_stmt(x->cs->st, SQL_NEWER);
    if (s == NULL)
        return false;
    sqlite3_bind_int64(s, 1, x->f->id);
    sqlite3_bind_text(s, 2, loc, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 3, dt);
    sqlite3_bind_int64(s, 4, x->gen);
    sqlite3_bind_int64(s, 5, gen);
    bool yes = sqlite3_step(s) == SQLITE_ROW;
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return yes;
}

/* The rows this walk did not meet. A row is judged when two walks in a
 * row missed it: one walk can miss an entry that moved onto a page it had
 * read already, and meet it again the next time. The first miss decides
 * whether the window still covered it then (miss 2) or it had fallen out
 * (miss 1, or refused, or undated); at the second, one that was covered
 * and has no newer change of the same resource since (a list of last
 * changes replaces a resource's entry) was lost. */
static int
judge_gone(struct commit_ctx *x, rs_time_t threshold)
{
    struct store *st = x->cs->st;
    sqlite3_stmt *q = store_stmt(st, SQL_GONE);
    if (q == NULL)
        return RS_EIO;
    sqlite3_bind_int64(q, 1, x->f->id);
    sqlite3_bind_int64(q, 2, x->gen);
    int r;
    while ((r = sqlite3_step(q)) == SQLITE_ROW) {
        const char *loc = col_text(q, 0);
        rs_time_t dt = rs_sql_col_time(q, 1);
        if (superseded(x, loc, dt, sqlite3_column_int64(q, 2)))
            continue;
        x->out->lost++;
        if (x->out->lost <= 10) {
            char t[RS_TIME_BUFSZ];
            rs_time_format(dt, t);
            rs_log_kv(RS_LOG_WARN, "an entry left the change lists while "
                      "their window still covers it", "changelist",
                      x->f->url, "loc", loc, "datetime", t, NULL);
        }
    }
    int rc = r == SQLITE_DONE ? 0 : store_fail(st, "gone entries");
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    if (rc == 0)
        rc = exec2(st, SQL_DROP_GONE, x->f->id, x->gen, "drop gone entries");
    if (rc != 0)
        return rc;
    sqlite3_stmt *s = store_stmt(st, SQL_MISSED);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, x->f->id);
    sqlite3_bind_int64(s, 2, x->gen);
    sqlite3_bind_int64(s, 3, threshold);
    return store_exec(st, s, "missed entries");
}

/*
 * A position beyond the clock (a state written before future entries were
 * kept from moving it, or our clock set back): back to the newest entry
 * published within it (RS_TIME_NONE when none is left), and the entries
 * refused as history rewritten against the bogus position are new again:
 * those this walk read are published in this commit, the others when
 * their document is read again.
 */
static int
pos_recover(struct commit_ctx *x)
{
    struct store *st = x->cs->st;
    rs_time_t bad = x->f->pos;
    if (bad == RS_TIME_NONE || bad <= x->ceiling)
        return 0;
    sqlite3_stmt *s = store_stmt(st, SQL_POS_BACK);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, x->seen_of);
    sqlite3_bind_int64(s, 2, x->ceiling);
    int r = sqlite3_step(s);
    rs_time_t pos = RS_TIME_NONE;
    if (r == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL)
        pos = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    if (r != SQLITE_ROW)
        return store_fail(st, "the position");
    s = store_stmt(st, SQL_UNREFUSE);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, x->seen_of);
    sqlite3_bind_int64(s, 2, pos == RS_TIME_NONE ? INT64_MIN : pos);
    sqlite3_bind_int64(s, 3, x->ceiling);
    int rc = store_exec(st, s, "entries refused against the position");
    if (rc != 0)
        return rc;
    char was[RS_TIME_BUFSZ], now[RS_TIME_BUFSZ] = "none";
    rs_time_format(bad, was);
    if (pos != RS_TIME_NONE)
        rs_time_format(pos, now);
    rs_log_kv(RS_LOG_WARN, "the feed's position is in the future: taken "
              "back to the newest entry published within the clock",
              "changelist", x->f->url, "position", was, "now", now, NULL);
    x->f->pos = x->pos = pos;
    return 0;
}

static int
on_new_doc(void *ud, const char *url, const char *parent)
{
    struct commit_ctx *x = ud;
    (void)parent;
    x->out->new_lists++;
    /* a feed taking over: its lists are new to the bridge, not to the
     * Source */
    if (x->out->baseline || x->out->replaced)
        return 0;
    rs_log_kv(RS_LOG_INFO, "a new change list", "changelist", url, NULL);
    return x->h->on_framework(x->h->ud, RS_CHANGE_CREATED, url);
}

/* One time of a query on one feed (min(dt)): RS_TIME_NONE when none. */
static int
time_of(struct store *st, const char *sql, int64_t feed, int64_t gen,
        rs_time_t *out)
{
    sqlite3_stmt *s = store_stmt(st, sql);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, feed);
    if (sqlite3_bind_parameter_count(s) > 1)
        sqlite3_bind_int64(s, 2, gen);
    int r = sqlite3_step(s);
    *out = r == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL
               ? sqlite3_column_int64(s, 0) : RS_TIME_NONE;
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return r == SQLITE_ROW ? 0 : store_fail(st, "a time");
}

/*
 * A takeover (clscan_replaces): the position, spans and window of the
 * feed replaced, so that the commit hands over what is newer than what it
 * took; this feed's own rows from an earlier time are gone (what it knew
 * then is older than what the replaced one knows now).
 */
static int
takeover_begin(struct commit_ctx *x, const struct store_feed *prev)
{
    struct store *st = x->cs->st;
    x->out->baseline = false;
    x->out->replaced = true;
    x->known = x->seen_of = prev->id;
    x->f->pos = x->pos = prev->pos;
    x->f->win_from = x->f->walked = RS_TIME_NONE;
    x->nsp = spans_parse(prev->suspects, x->sp, CLSCAN_SPANS);
    x->floor = prev->win_from;
    if (x->floor == RS_TIME_NONE) {
        /* no declared window: the oldest entry it had */
        int rc = time_of(st, SQL_MIN_DT, prev->id, prev->gen, &x->floor);
        if (rc != 0)
            return rc;
    }
    return exec2(st, SQL_SEEN_DROP, x->f->id, 0, "a feed followed before");
}

/*
 * A takeover's end: can the new feed tell every change since the
 * position? Its window must reach back to it: a declared `from` at or
 * before it, else (none declared) an entry at or before it. If not, the
 * changes between (made while the Source switched lists) are unknown.
 * Then the replaced feed's rows go.
 */
static int
takeover_end(struct commit_ctx *x, const struct walk_result *wr)
{
    struct store *st = x->cs->st;
    rs_time_t reach = wr->from;
    int rc = 0;
    if (reach == RS_TIME_NONE &&
        (rc = time_of(st, SQL_WALK_MIN_DT, x->f->id, 0, &reach)) != 0)
        return rc;
    x->out->unsure = x->since == RS_TIME_NONE || reach == RS_TIME_NONE ||
                     reach > x->since;
    if (x->out->unsure) {
        char pos[RS_TIME_BUFSZ] = "none", from[RS_TIME_BUFSZ] = "none";
        if (x->since != RS_TIME_NONE)
            rs_time_format(x->since, pos);
        if (reach != RS_TIME_NONE)
            rs_time_format(reach, from);
        rs_log_kv(RS_LOG_WARN, "a change list replaced by one that does not "
                  "reach back to the old one's position: the changes "
                  "between cannot be told", "changelist", x->f->url,
                  "replaces", x->cs->prev->url, "position", pos,
                  "reaches_back_to", from, NULL);
    }
    /* a feed still followed (another Capability List names it) goes on
     * with its own rows */
    if (x->cs->keep_prev)
        return 0;
    if ((rc = exec2(st, SQL_SEEN_DROP, x->known, 0, "the feed replaced")) != 0)
        return rc;
    return store_docs_forget(st, x->known);
}

int
clscan_commit(struct clscan *cs, struct store_feed *f,
              const struct walk_result *wr, rs_time_t started,
              const struct clscan_hooks *hooks, struct clscan_stats *out)
{
    struct clscan_stats local;
    if (out == NULL)
        out = &local;
    *out = (struct clscan_stats){ .staged = cs->staged,
                                  .baseline = f->gen == 0 };
    struct store_feed nf = *f;
    struct commit_ctx x = { .cs = cs, .f = &nf, .h = hooks, .out = out,
                            .gen = f->gen + 1, .pos = f->pos,
                            .ceiling = rs_time_now() + RS_TIME_SKEW_US,
                            .known = -1, .seen_of = f->id,
                            .floor = RS_TIME_NONE };
    x.nsp = spans_parse(f->suspects, x.sp, CLSCAN_SPANS);
    struct store *st = cs->st;
    int rc = store_begin(st);
    if (rc != 0)
        return rc;
    if (cs->has_prev && (rc = takeover_begin(&x, cs->prev)) != 0)
        goto fail;
    if ((rc = pos_recover(&x)) != 0)
        goto fail;
    x.since = nf.pos;
    if (out->replaced && x.since == RS_TIME_NONE)
        x.since = cs->prev->walked;    /* it had no dated entry then */
    if ((rc = exec2(st, SQL_BUMP_NOTMOD, f->id, x.gen, "304 documents")) != 0 ||
        (rc = exec2(st, SQL_BUMP_MET, f->id, x.gen, "entries met")) != 0 ||
        (rc = bump_holes(&x)) != 0 || (rc = take_new(&x)) != 0)
        goto fail;
    rs_time_t cur_from = wr->from != RS_TIME_NONE ? wr->from : nf.win_from;
    if (!out->baseline &&
        (rc = judge_gone(&x, window_threshold(&x, cur_from, started))) != 0)
        goto fail;
    if (out->baseline &&
        (rc = exec2(st, SQL_DROP_ALL_GONE, f->id, x.gen, "drop")) != 0)
        goto fail;
    if (out->replaced && (rc = takeover_end(&x, wr)) != 0)
        goto fail;
    if (!out->baseline && (out->rewritten + out->lost > 0 || out->unsure) &&
        (rc = hooks->on_framework(hooks->ud, RS_CHANGE_UPDATED, f->url)) != 0)
        goto fail;
    if ((rc = store_docs_commit(st, f->id, on_new_doc, &x)) != 0 ||
        (rc = exec2(st, SQL_WALK_DONE, f->id, 0, "walk")) != 0)
        goto fail;
    nf.gen = x.gen;
    nf.pos = x.pos;
    nf.win_from = cur_from;
    nf.walked = started;
    spans_write(cs, nf.suspects, sizeof(nf.suspects));
    if ((rc = store_feed_put(st, &nf)) != 0 || (rc = store_commit(st)) != 0)
        goto fail;
    *f = nf;
    return 0;
fail:
    store_rollback(st);
    return rc;
}
