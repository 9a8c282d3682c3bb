/*
 * apply.c - the jobs that make the mirror match the todo rows. A refill
 * pages forward through the due rows - first the retries whose time has
 * come, then the rows due at once (ledger.h) - and starts a job for each
 * URI not already in flight. A newer change of a URI in flight keeps the
 * row's place in the queue, which the walk has passed: the job runs to
 * its end (a small file's answer is in within milliseconds, and may be
 * the newer version already; a cancel costs the connection), then the
 * walk goes back for the row. A job that has run for APPLY_STALE_MS
 * when the newer change comes, or by then, is cancelled (its temp file
 * goes): a large download of an old version, a server that hangs. A
 * timer wakes the refill when the next retry comes due. Jobs end by
 * writing the ledger in the open batch, committed on a timer.
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "apply.h"
#include "ledger.h"
#include "mirror.h"
#include "pathmap.h"
#include "rs_alloc.h"
#include "rs_backoff.h"
#include "rs_doc.h"
#include "rs_hash.h"
#include "rs_http.h"
#include "rs_retry_after.h"
#include "rs_time.h"
#include "syncer.h"

#define APPLY_PARALLEL 32
#define APPLY_RETRIES 5
#define APPLY_TIMEOUT_MS 120000
#define APPLY_MAX_BODY (1ull << 30)
#define APPLY_COMMIT_MS 20
#define APPLY_BATCH_MAX 5000      /* ledger writes per transaction */
#define APPLY_STALE_MS 1000       /* a job this old is cancelled by a newer
                                     change of its uri */
#define APPLY_KEPT_MAX 64         /* answers kept for a change to come */
#define APPLY_KEPT_MS 10000       /* ... for this long at most (kept_ms) */
/* The wake-up for the next retry sleeps at most this long: the due times
 * are wall-clock times, and a clock set forward makes rows due sooner
 * than the (monotonic) timer was told. */
#define APPLY_WAKE_MAX_S 60
/* Commits failing (a full disk): the walks wait 1 s, 2 s ... 60 s. */
static const struct rs_backoff APPLY_STATE_BACKOFF = { .first_ms = 1000,
                                                       .max_ms = 60000 };
/* A resource that failed: 1 s, 2 s ... 256 s (in seconds here). */
static const struct rs_backoff APPLY_BACKOFF = { .first_ms = 1,
                                                 .max_ms = 256 };
#define APPLY_RETRY_AFTER_MAX_S 3600

struct job {
    struct apply *a;
    struct ledger_todo t;        /* strings point into the fields below */
    char *uri, *hash_s;
    char *path;
    struct rs_hashes expect;     /* t.hash parsed; n == 0: none given */
    bool had_copy;               /* a live ledger row exists */
    int64_t gen;                 /* the row's reconcile generation, kept */
    bool conditional;            /* If-None-Match sent */
    bool superseded;             /* cancelled for a newer change */
    bool newer;                  /* a newer change came; it runs on */
    bool replaced;               /* its row was replaced: the walk goes
                                    back for the newer one at its end */
    int64_t started_ms;          /* rs_time_mono_ms at its start */
    struct rs_http_req *req;
    struct mirror_file *mf;
    struct rs_hasher *hasher;
    uint64_t got;
    int write_rc;                /* a mirror error while streaming */
    char why[512];
    bool gone;                   /* the last answer was 404 or 410 */
    bool pushed;                 /* offered by a notification (origin push) */
    /* What the record needs of the verified answer, kept for when the
     * syncer is done with mf (its thread's until on_job_synced): */
    char *got_hash, *etag, *last_modified;
};

/* A complete answer that was not the version its change announced: most
 * often the resource changed again while it was fetched, and the newer
 * change's notification is on its way. Its file is kept, not in place,
 * for a change that announces it (kept_take), APPLY_KEPT_MS at most. */
struct kept {
    char *uri;
    struct mirror_file *mf;
    struct rs_hashes got;
    uint64_t length;
    char *etag, *last_modified;
    int64_t at_ms;               /* rs_time_mono_ms when it came */
};

struct apply {
    struct apply_opts o;
    struct event *ev_kick, *ev_commit;
    struct event *ev_due;        /* the next retry comes due (refill) */
    struct event *ev_stale;      /* a job with a newer change comes to
                                    APPLY_STALE_MS */
    struct event *ev_kept;       /* the oldest kept answer expires */
    struct job **jobs;           /* in flight (syncing ones too) */
    size_t njobs;
    struct syncer *sync;         /* fsyncs off the loop (NULL: policy
                                    none, commits on the loop) */
    /* refill pages forward from here through each queue (ledger.h) */
    struct ledger_cursor cur_retry, cur_now;
    int64_t gen;                 /* the reconcile under way: rows written
                                    now count as seen by it */
    bool paused, txn_open, closing;
    bool held;               /* apply_hold: no job starts (a dump writes) */
    unsigned txn_writes;
    unsigned state_fails;        /* commits failed since the last that
                                    succeeded */
    int64_t state_wait_ms;       /* rs_time_mono_ms until which no job
                                    starts while they fail */
    struct kept kept[APPLY_KEPT_MAX];
    size_t nkept;
    double tokens;               /* rate limit bucket */
    rs_time_t tokens_at;
    struct apply_stats st;
};

static const char *const outcome_names[APPLY_OUTCOMES] = {
    [APPLY_CREATED] = "created",   [APPLY_UPDATED] = "updated",
    [APPLY_DELETED] = "deleted",   [APPLY_UNCHANGED] = "unchanged",
    [APPLY_RETRY] = "retry",       [APPLY_FAILED] = "failed",
    [APPLY_REFUSED] = "refused",
};

const char *
apply_outcome_name(enum apply_outcome o)
{
    return o < APPLY_OUTCOMES ? outcome_names[o] : "?";
}

/* ------------------------------------------------------------ batching */

/* Arm ev to fire in ms (at least 1). The timeval normalised: libevent
 * takes a tv_usec of a second or more for a broken time, and its loop
 * then waits 35 minutes for any timer. */
static void
arm_in(struct event *ev, int64_t ms)
{
    if (ms < 1)
        ms = 1;
    struct timeval tv = rs_time_tv_ms(ms);
    evtimer_add(ev, &tv);
}

int64_t
apply_state_retry_ms(const struct apply *a)
{
    return a->state_fails == 0
               ? 0 : (int64_t)rs_backoff_base(&APPLY_STATE_BACKOFF,
                                              a->state_fails);
}

/* A batch could not be committed (a full disk, an I/O error), and
 * ledger_commit rolled it back: its todo rows were not deleted and its
 * positions not advanced. The walks start over from the front of both
 * queues, after a pause that doubles while commits keep failing (a full
 * disk is not fetched for in a loop); what the batch took in (the changes
 * of notifications, a pull's) is on_state_error's to replay. */
static void
state_failed(struct apply *a)
{
    a->state_fails++;
    a->cur_now = (struct ledger_cursor){ 0, 0 };
    a->cur_retry = (struct ledger_cursor){ 0, 0 };
    a->state_wait_ms = rs_time_mono_ms() + apply_state_retry_ms(a);
    if (!a->closing)
        arm_in(a->ev_kick, apply_state_retry_ms(a));   /* re-arms a pending one */
    if (a->o.on_state_error != NULL)
        a->o.on_state_error(a->o.ud, ledger_errstr(a->o.ledger));
}

int
apply_txn(struct apply *a)
{
    unsigned ms = a->o.commit_ms ? a->o.commit_ms : APPLY_COMMIT_MS;
    int rc;

    if (a->txn_open) {
        if (++a->txn_writes < APPLY_BATCH_MAX)
            return 0;
        if ((rc = apply_flush(a)) != 0)
            return rc;
    }
    if ((rc = ledger_begin(a->o.ledger)) != 0)
        return rc;
    a->txn_open = true;
    a->txn_writes = 1;
    arm_in(a->ev_commit, ms);
    return 0;
}

int
apply_flush(struct apply *a)
{
    int rc;

    if (!a->txn_open)
        return 0;
    a->txn_open = false;
    evtimer_del(a->ev_commit);
    rc = ledger_commit(a->o.ledger);
    if (rc != 0) {
        state_failed(a);     /* the commit ended the transaction */
        return rc;
    }
    if (a->state_fails > 0) {
        /* room again: the walks need not wait out the pause */
        a->state_fails = 0;
        evtimer_del(a->ev_kick);
        if (!a->closing)
            apply_kick(a);
    }
    a->st.commits++;
    return 0;
}

void
apply_commit(struct apply *a)
{
    int rc = apply_flush(a);  /* a failure is told by state_failed */
    (void)rc;
}

static void
on_commit(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    apply_commit(arg);
}

/* --------------------------------------------------------------- jobs */

static void
job_free(struct job *j)
{
    if (j->mf != NULL)
        mirror_abort(j->mf);
    rs_hasher_free(j->hasher);
    rs_free(j->got_hash);
    rs_free(j->etag);
    rs_free(j->last_modified);
    rs_free(j->uri);
    rs_free(j->hash_s);
    rs_free(j->path);
    rs_free(j);
}

static void
job_unlink(struct apply *a, struct job *j)
{
    for (size_t i = 0; i < a->njobs; i++) {
        if (a->jobs[i] == j) {
            a->jobs[i] = a->jobs[--a->njobs];
            break;
        }
    }
}

static struct job *
job_find(struct apply *a, const char *uri)
{
    for (size_t i = 0; i < a->njobs; i++)
        if (strcmp(a->jobs[i]->uri, uri) == 0)
            return a->jobs[i];
    return NULL;
}

static void
report(struct apply *a, const char *uri, enum apply_outcome o,
       const char *what)
{
    a->st.outcomes[o]++;
    if (a->o.on_result != NULL)
        a->o.on_result(a->o.ud, uri, o, what != NULL ? what : "");
}

/* Does the mirror hold a copy of uri (a live row in the ledger)? */
static bool
mirror_holds(struct apply *a, const char *uri)
{
    struct ledger_res r;
    char *buf = NULL;
    bool live = ledger_res_get(a->o.ledger, uri, &r, &buf) == 0 && !r.deleted;
    rs_free(buf);
    return live;
}

/* The attempt failed: retry later, or give up for good. */
static void
job_retry(struct apply *a, struct job *j, long retry_after_s, bool permanent)
{
    unsigned max = a->o.retries ? a->o.retries : APPLY_RETRIES;
    rs_time_t now = rs_time_now();
    int rc;

    if (apply_txn(a) != 0)
        return;                      /* the row stays due; redone later */
    if ((permanent || (unsigned)j->t.attempts + 1 >= max) && j->gone &&
        j->pushed && !mirror_holds(a, j->t.uri)) {
        /* A notification said the resource changed; the Source has no
         * such resource any more and neither has the mirror: they agree,
         * nothing is left to do. Typically a notification that comes after
         * the resource's deletion was applied (a repeated delivery, a pull
         * and a channel crossing); kept as failed, it was retried at every
         * start and made every audit fail. A newer change of the resource
         * is a new row. A list that names a resource the Source does not
         * serve is another matter (origin resourcelist, changelist): that
         * still fails, the Source contradicts itself. */
        rc = ledger_todo_done(a->o.ledger, j->t.uri, j->t.seq);
        report(a, j->uri, APPLY_UNCHANGED, "gone at the Source and not in "
               "the mirror");
    } else if (permanent || (unsigned)j->t.attempts + 1 >= max) {
        rc = ledger_todo_fail(a->o.ledger, j->t.uri, j->t.seq, j->why);
        report(a, j->uri, APPLY_FAILED, j->why);
    } else {
        long s = (long)rs_backoff_base(&APPLY_BACKOFF,
                                       (unsigned)j->t.attempts + 1);
        if (retry_after_s >= 0)
            s = retry_after_s < APPLY_RETRY_AFTER_MAX_S
                ? retry_after_s : APPLY_RETRY_AFTER_MAX_S;
        rc = ledger_todo_retry(a->o.ledger, j->t.uri, j->t.seq,
                               now + (rs_time_t)s * 1000000, j->why);
        report(a, j->uri, APPLY_RETRY, j->why);
    }
    if (rc == 0)
        j->replaced = true;
}

/* Record the resource's new state and take its todo row off. */
static int
job_record(struct apply *a, struct job *j, const struct ledger_res *r)
{
    int rc;

    if ((rc = apply_txn(a)) != 0)
        return rc;
    if ((rc = ledger_res_put(a->o.ledger, r)) != 0)
        return rc;
    rc = ledger_todo_done(a->o.ledger, j->t.uri, j->t.seq);
    if (rc < 0)
        return rc;
    if (rc == 0)
        j->replaced = true;
    if (j->t.change_dt != RS_TIME_NONE && j->t.change_dt > a->st.last_change_dt)
        a->st.last_change_dt = j->t.change_dt;
    return 0;
}

static void apply_refill(struct apply *a);

/* A job whose row was replaced ended. The newer row kept the place the
 * walk passed when it started this job (or passed while this job held
 * the uri), so its queue's cursor goes back before that row: else the
 * row would wait until its queue ran dry, which a queue of rows due at
 * once never does while the Source keeps changing. */
static void
cursor_rewind(struct apply *a, const char *uri)
{
    struct ledger_todo t;
    struct ledger_cursor *c;
    char *buf = NULL;

    if (ledger_todo_get(a->o.ledger, uri, &t, &buf) != 0)
        return;                       /* gone, or the state fails: later */
    c = t.not_before == 0 ? &a->cur_now : &a->cur_retry;
    if (!t.failed && (c->not_before > t.not_before ||
                      (c->not_before == t.not_before && c->pos >= t.pos))) {
        c->not_before = t.not_before;
        c->pos = t.pos - 1;
    }
    rs_free(buf);
}

static void
job_end(struct apply *a, struct job *j)
{
    job_unlink(a, j);
    a->st.in_flight = (unsigned)a->njobs;
    if ((j->newer || j->replaced) && !a->closing)
        cursor_rewind(a, j->uri);
    job_free(j);
    if (!a->closing)
        apply_kick(a);
}

/* Cancel j for a newer change of its uri: its answer is not wanted. A
 * job with its body in (the syncer has it) runs to its end. */
static void
job_supersede(struct job *j)
{
    if (j->superseded || j->req == NULL)
        return;
    j->superseded = true;
    rs_http_cancel(j->req);
}

/* Arm ev_stale for the first job with a newer change to come to
 * APPLY_STALE_MS; none: no timer. */
static void
arm_stale(struct apply *a, int64_t now_ms)
{
    int64_t first = INT64_MAX;

    for (size_t i = 0; i < a->njobs; i++) {
        const struct job *j = a->jobs[i];
        if (j->newer && !j->superseded && j->req != NULL &&
            j->started_ms < first)
            first = j->started_ms;
    }
    if (first == INT64_MAX)
        return;
    arm_in(a->ev_stale, first + APPLY_STALE_MS - now_ms);
}

/* A newer change of j's uri was put. */
static void
job_newer(struct apply *a, struct job *j)
{
    int64_t now = rs_time_mono_ms();

    if (j->newer || j->superseded)
        return;
    j->newer = true;
    if (now - j->started_ms >= APPLY_STALE_MS)
        job_supersede(j);
    else
        arm_stale(a, now);
}

static void
on_stale(evutil_socket_t fd, short what, void *arg)
{
    struct apply *a = arg;
    int64_t now = rs_time_mono_ms();

    (void)fd;
    (void)what;
    for (size_t i = 0; i < a->njobs; i++) {
        struct job *j = a->jobs[i];
        if (j->newer && now - j->started_ms >= APPLY_STALE_MS)
            job_supersede(j);
    }
    arm_stale(a, now);
}

static void
job_delete(struct apply *a, struct job *j, const struct ledger_res *old)
{
    struct ledger_res r = { 0 };
    int rc = mirror_remove(a->o.mirror, j->path);

    /* A path through a symlink in the mirror was never written by us:
     * nothing of ours to delete there. */
    if (rc == RS_EDENIED)
        rc = RS_ENOTFOUND;
    if (rc != 0 && rc != RS_ENOTFOUND) {
        snprintf(j->why, sizeof(j->why), "remove %s: %s", j->path,
                 mirror_errstr(a->o.mirror));
        job_retry(a, j, -1, rc == RS_EDENIED);
        return;
    }
    r.uri = j->t.uri;
    r.path = j->path;
    r.lastmod = RS_TIME_NONE;
    r.change_dt = j->t.change_dt;
    r.length = -1;
    r.deleted = true;
    r.gen = old != NULL && old->gen > a->gen ? old->gen : a->gen;
    if (job_record(a, j, &r) != 0) {
        snprintf(j->why, sizeof(j->why), "state: %s", ledger_errstr(a->o.ledger));
        report(a, j->uri, APPLY_RETRY, j->why);
        return;
    }
    report(a, j->uri, rc == 0 ? APPLY_DELETED : APPLY_UNCHANGED, NULL);
}

/* The one algorithm a body is checked with: the strongest announced that
 * we compute (one verified digest is the check; computing every announced
 * one would cost CPU for nothing). md5 when none is announced, for the
 * ledger and later audits. */
static unsigned
hash_mask(const struct rs_hashes *h)
{
    enum rs_hash_algo a = rs_hashes_strongest(h);

    return 1u << (a != RS_HASH_OTHER ? a : RS_HASH_MD5);
}

static int
on_job_data(void *ud, struct rs_http_req *req, const char *buf, size_t len)
{
    struct job *j = ud;
    long status = rs_http_req_status(req);
    int rc;

    if (j->superseded)
        return 1;
    if (status < 200 || status > 299)
        return 0;                      /* error bodies are dropped */
    if (j->mf == NULL) {
        rc = mirror_begin(j->a->o.mirror, j->path, &j->mf);
        if (rc != 0) {
            j->write_rc = rc;
            snprintf(j->why, sizeof(j->why), "write %s: %s", j->path,
                     mirror_errstr(j->a->o.mirror));
            return 1;
        }
    }
    j->got += len;
    if (j->t.length >= 0 && j->got > (uint64_t)j->t.length) {
        j->write_rc = RS_EINVALID;
        snprintf(j->why, sizeof(j->why), "longer than the announced "
                 "length %lld", (long long)j->t.length);
        return 1;
    }
    if (rs_hasher_update(j->hasher, buf, len) != 0 ||
        (rc = mirror_write(j->mf, buf, len)) != 0) {
        j->write_rc = RS_EIO;
        snprintf(j->why, sizeof(j->why), "write %s: %s", j->path,
                 mirror_errstr(j->a->o.mirror));
        return 1;
    }
    return 0;
}

/* The verified body into place (after mirror_prepare when it went
 * through the syncer), then its record. */
static void
job_finish(struct apply *a, struct job *j)
{
    struct ledger_res r = { 0 };
    int rc = mirror_commit(j->mf, j->t.lastmod);
    j->mf = NULL;
    if (rc != 0) {
        snprintf(j->why, sizeof(j->why), "write %s: %s", j->path,
                 mirror_errstr(a->o.mirror));
        job_retry(a, j, -1, rc == RS_EDENIED);
        return;
    }
    r.uri = j->t.uri;
    r.path = j->path;
    r.lastmod = j->t.lastmod;
    r.change_dt = j->t.change_dt;
    r.length = (int64_t)j->got;
    r.hash = j->got_hash;
    r.etag = j->etag;
    r.last_modified = j->last_modified;
    r.deleted = false;
    r.gen = j->gen > a->gen ? j->gen : a->gen;
    a->st.bytes += j->got;
    if (job_record(a, j, &r) != 0) {
        snprintf(j->why, sizeof(j->why), "state: %s", ledger_errstr(a->o.ledger));
        report(a, j->uri, APPLY_RETRY, j->why);
        return;
    }
    report(a, j->uri, j->had_copy ? APPLY_UPDATED : APPLY_CREATED, NULL);
}

/* The syncer is done with j's file: into place (under --fsync full the
 * syncer put it there already) and recorded. A newer change that came
 * meanwhile is a newer row, taken next (job_end): the file in place is
 * still the newest the mirror has had, and its job is never cancelled
 * (job_supersede). */
static void
on_job_synced(void *ud)
{
    struct job *j = ud;

    job_finish(j->a, j);
    job_end(j->a, j);
}

static char *
dup_header(struct rs_http_req *req, const char *name, bool *nomem)
{
    const char *v = rs_http_req_header(req, name);
    char *d = v != NULL ? rs_strdup(v) : NULL;
    if (v != NULL && d == NULL)
        *nomem = true;
    return d;
}

/* Is an answer of len bytes hashing to got the version a change announced
 * with hash want (n > 0) and length (-1: none)? */
static bool
announces(const struct rs_hashes *want, int64_t length,
          const struct rs_hashes *got, uint64_t len)
{
    return want->n > 0 && (length < 0 || (uint64_t)length == len) &&
           rs_hashes_match(want, got) > 0;
}

static void
kept_drop(struct apply *a, size_t i)
{
    struct kept *h = &a->kept[i];

    if (h->mf != NULL)
        mirror_abort(h->mf);
    rs_free(h->uri);
    rs_free(h->etag);
    rs_free(h->last_modified);
    a->kept[i] = a->kept[--a->nkept];
}

/* Drop the answers kept too long; arm ev_kept for the oldest left. A
 * kept file is a temp in the mirror: on a quiet mirror none may wait for
 * a change that never comes (a diff of the mirror would show it). */
static void
kept_expire(struct apply *a)
{
    int64_t now = rs_time_mono_ms();
    int64_t max = a->o.kept_ms ? a->o.kept_ms : APPLY_KEPT_MS;
    int64_t oldest = INT64_MAX;

    for (size_t i = a->nkept; i-- > 0;) {
        if (now - a->kept[i].at_ms > max)
            kept_drop(a, i);
        else if (a->kept[i].at_ms < oldest)
            oldest = a->kept[i].at_ms;
    }
    if (oldest == INT64_MAX) {
        evtimer_del(a->ev_kept);
        return;
    }
    arm_in(a->ev_kept, oldest + max + 1 - now);   /* then it is over max */
}

static void
on_kept(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    kept_expire(arg);
}

/* The answer kept for uri, or -1; the ones kept too long go. */
static long
kept_find(struct apply *a, const char *uri)
{
    long found = -1;

    kept_expire(a);
    for (size_t i = 0; i < a->nkept && found < 0; i++)
        if (strcmp(a->kept[i].uri, uri) == 0)
            found = (long)i;
    return found;
}

/* Keep j's complete answer (its file, got) for a change that announces
 * it; the oldest kept one goes when there are APPLY_KEPT_MAX. */
static void
kept_put(struct apply *a, struct job *j, const struct rs_hashes *got,
         struct rs_http_req *req)
{
    long old = kept_find(a, j->uri);
    bool nomem = false;
    struct kept h = { .got = *got, .length = j->got,
                      .at_ms = rs_time_mono_ms() };

    if (old >= 0)
        kept_drop(a, (size_t)old);
    h.uri = rs_strdup(j->uri);
    h.etag = dup_header(req, "ETag", &nomem);
    h.last_modified = dup_header(req, "Last-Modified", &nomem);
    if (h.uri == NULL || nomem) {
        rs_free(h.uri);
        rs_free(h.etag);
        rs_free(h.last_modified);
        return;
    }
    if (a->nkept == APPLY_KEPT_MAX) {
        size_t oldest = 0;
        for (size_t i = 1; i < a->nkept; i++)
            if (a->kept[i].at_ms < a->kept[oldest].at_ms)
                oldest = i;
        kept_drop(a, oldest);
    }
    h.mf = j->mf;
    j->mf = NULL;
    a->kept[a->nkept++] = h;
    kept_expire(a);
}

/* The answer kept for j's uri, if it is what j's change announces (its
 * hash, and its length if announced): j takes it (true), no fetch is
 * needed. One that is not goes. */
static bool
kept_take(struct apply *a, struct job *j)
{
    long i = kept_find(a, j->uri);
    char hbuf[RS_HASHES_BUFSZ];
    struct kept *h;

    if (i < 0)
        return false;
    h = &a->kept[i];
    if (j->t.change == LEDGER_DELETE ||
        !announces(&j->expect, j->t.length, &h->got, h->length)) {
        kept_drop(a, (size_t)i);
        return false;
    }
    rs_hashes_format(&h->got, hbuf);
    if ((j->got_hash = rs_strdup(hbuf)) == NULL) {
        kept_drop(a, (size_t)i);
        return false;
    }
    j->mf = h->mf;
    j->got = h->length;
    j->etag = h->etag;
    j->last_modified = h->last_modified;
    h->mf = NULL;
    h->etag = h->last_modified = NULL;
    kept_drop(a, (size_t)i);
    a->st.kept_answers++;
    return true;
}

/* j's file is complete and verified: into place and recorded, at once or
 * by way of the syncer (true: on_job_synced ends j). The fsync goes off
 * the loop when fsyncs here are slow: on a disk one waits for a journal
 * commit, and every other job's download and write with it. Else here,
 * timed (tmpfs: the hand-off would cost more than the fsync). */
static bool
job_place(struct apply *a, struct job *j)
{
    if (a->sync != NULL && syncer_wanted(a->sync) &&
        syncer_submit(a->sync, j->mf, j->t.lastmod, on_job_synced, j) == 0)
        return true;
    if (a->sync != NULL)
        syncer_prepare_here(a->sync, j->mf, j->t.lastmod);
    job_finish(a, j);
    return false;
}

/* j's answer is not what its row announced. A resource that changes
 * again while it is fetched is answered with the newer version, whose
 * change is often announced by the time the body is in (over the
 * Internet a fetch takes longer than a notification): when the row now
 * pending for the uri announces what came, j takes that row's place
 * (true), and the fetch it would need is saved. */
static bool
job_adopt_newer(struct apply *a, struct job *j, const struct rs_hashes *got)
{
    struct ledger_todo q;
    struct rs_hashes want;
    char *buf = NULL, *hash = NULL;
    bool take = false;

    if (ledger_todo_get(a->o.ledger, j->uri, &q, &buf) != 0)
        return false;
    if (q.seq != j->t.seq && !q.failed && q.change != LEDGER_DELETE &&
        q.hash != NULL && rs_hashes_parse(q.hash, strlen(q.hash), &want) == 0 &&
        announces(&want, q.length, got, j->got) &&
        (hash = rs_strdup(q.hash)) != NULL) {
        rs_free(j->hash_s);
        j->hash_s = hash;
        j->t.seq = q.seq;
        j->t.change = q.change;
        j->t.change_dt = q.change_dt;
        j->t.lastmod = q.lastmod;
        j->t.length = q.length;
        j->t.hash = hash;
        j->t.attempts = q.attempts;
        j->expect = want;
        a->st.newer_answers++;
        take = true;
    }
    rs_free(buf);
    return take;
}

/* The body is in: verify it against what was announced, then commit:
 * at once, or by way of the syncer (true: on_job_synced ends j). */
static bool
job_commit(struct apply *a, struct job *j, struct rs_http_req *req)
{
    struct rs_hashes got;
    char hbuf[RS_HASHES_BUFSZ];
    bool nomem = false;
    int rc;

    if (j->mf == NULL && (rc = mirror_begin(a->o.mirror, j->path, &j->mf)) != 0) {
        snprintf(j->why, sizeof(j->why), "write %s: %s", j->path,
                 mirror_errstr(a->o.mirror));
        job_retry(a, j, -1, rc == RS_EDENIED || rc == RS_EINVAL);
        return false;
    }
    if (rs_hasher_final(j->hasher, &got) != 0) {
        snprintf(j->why, sizeof(j->why), "hashing failed");
        job_retry(a, j, -1, false);
        return false;
    }
    bool len_ok = j->t.length < 0 || j->got == (uint64_t)j->t.length;
    bool hash_ok = j->expect.n == 0 || rs_hashes_match(&j->expect, &got) >= 0;
    if ((!len_ok || !hash_ok) && job_adopt_newer(a, j, &got))
        len_ok = hash_ok = true;
    if (!len_ok) {
        snprintf(j->why, sizeof(j->why), "length mismatch: announced %lld, "
                 "got %llu", (long long)j->t.length,
                 (unsigned long long)j->got);
    } else if (!hash_ok) {
        char want[RS_HASHES_BUFSZ];
        rs_hashes_format(&j->expect, want);
        rs_hashes_format(&got, hbuf);
        snprintf(j->why, sizeof(j->why), "hash mismatch: announced %.200s, "
                 "got %.200s", want, hbuf);
    }
    if (!len_ok || !hash_ok) {
        kept_put(a, j, &got, req);
        job_retry(a, j, -1, false);
        return false;
    }
    rs_hashes_format(&got, hbuf);
    j->got_hash = rs_strdup(hbuf);
    j->etag = dup_header(req, "ETag", &nomem);
    j->last_modified = dup_header(req, "Last-Modified", &nomem);
    if (j->got_hash == NULL || nomem) {
        snprintf(j->why, sizeof(j->why), "out of memory");
        job_retry(a, j, -1, false);
        return false;
    }
    return job_place(a, j);
}

static void
on_job_done(void *ud, struct rs_http_req *req, const struct rs_http_result *res)
{
    struct job *j = ud;
    struct apply *a = j->a;
    const char *ra;
    long retry_after = -1;

    j->req = NULL;
    if (a == NULL) {                  /* apply_free left it to us */
        job_free(j);
        return;
    }
    if (j->superseded || res->rc == RS_ECANCELED) {
        if (j->superseded)
            a->st.superseded++;
        job_end(a, j);
        return;
    }
    uint64_t ra_ms;
    if ((ra = rs_http_req_header(req, "Retry-After")) != NULL &&
        rs_retry_after_parse(ra, rs_time_now() / 1000000, &ra_ms) == 0)
        retry_after = ra_ms / 1000 < APPLY_RETRY_AFTER_MAX_S
                      ? (long)(ra_ms / 1000) : APPLY_RETRY_AFTER_MAX_S;
    if (j->write_rc != 0) {
        job_retry(a, j, -1, j->write_rc == RS_EDENIED);
    } else if (res->rc != 0) {
        snprintf(j->why, sizeof(j->why), "GET: %s", res->errstr);
        job_retry(a, j, -1, res->rc == RS_EDENIED || res->rc == RS_ETOOBIG);
    } else if (res->status == 304 && j->conditional) {
        struct ledger_res r;
        char *buf = NULL;
        if (ledger_res_get(a->o.ledger, j->t.uri, &r, &buf) == 0) {
            r.change_dt = j->t.change_dt;
            if (job_record(a, j, &r) == 0)
                report(a, j->uri, APPLY_UNCHANGED, NULL);
        }
        rs_free(buf);
    } else if (res->status >= 200 && res->status <= 299) {
        if (job_commit(a, j, req))
            return;                   /* on_job_synced ends it */
    } else {
        snprintf(j->why, sizeof(j->why), "GET: HTTP %ld", res->status);
        j->gone = res->status == 404 || res->status == 410;
        if ((res->status == 401 || res->status == 403) &&
            a->o.on_refused != NULL)
            a->o.on_refused(a->o.ud, j->uri, res->status);
        job_retry(a, j, retry_after, false);
    }
    job_end(a, j);
}

/* -------------------------------------------------------------- offers */

bool
apply_future(rs_time_t *t, rs_time_t now)
{
    if (*t == RS_TIME_NONE || *t <= now + RS_TIME_SKEW_US)
        return false;
    *t = now;
    return true;
}

bool
apply_todo_from_entry(const struct rs_entry *e, const char *loc,
                      const char *origin, struct ledger_todo *t, char *hbuf)
{
    memset(t, 0, sizeof(*t));
    t->uri = loc;
    t->change = e->md.change == RS_CHANGE_DELETED ? LEDGER_DELETE
              : e->md.change == RS_CHANGE_CREATED ? LEDGER_CREATE
              : LEDGER_UPDATE;
    /* 1.0 lists have no datetime: a lastmod stands for the change time,
     * except on a deletion, where it is the deleted copy's old lastmod
     * (what resync writes): then the time is unknown, and an unknown time
     * is never taken for older than what the mirror holds. */
    if (e->md.datetime != RS_TIME_NONE)
        t->change_dt = e->md.datetime;
    else if (e->md.change == RS_CHANGE_DELETED)
        t->change_dt = RS_TIME_NONE;
    else
        t->change_dt = e->lastmod;
    t->lastmod = e->lastmod;
    t->length = e->md.length;
    t->hash = e->md.hash.n > 0 && rs_hashes_format(&e->md.hash, hbuf) > 0
              ? hbuf : NULL;
    t->origin = origin;
    return apply_future(&t->change_dt, rs_time_now());
}

/* Does the ledger row r already hold what t describes? Same change time
 * and kind, and no fixity that says otherwise. A Source with coarse
 * timestamps can change a resource twice within one tick: then only a
 * hash can tell, and without one the change is taken again. */
static bool
holds(const struct ledger_res *r, const struct ledger_todo *t)
{
    struct rs_hashes want, have;

    /* Deleting what is deleted already changes nothing (a Change List of
     * unknown times, read again at every poll, says it each time). */
    if (t->change == LEDGER_DELETE && r->deleted &&
        (t->change_dt == RS_TIME_NONE || t->change_dt <= r->change_dt))
        return true;
    if (r->change_dt == RS_TIME_NONE || t->change_dt != r->change_dt)
        return false;
    if (t->change == LEDGER_DELETE)
        return r->deleted;
    if (r->deleted || t->hash == NULL || r->hash == NULL)
        return false;
    if (rs_hashes_parse(t->hash, strlen(t->hash), &want) != 0 ||
        rs_hashes_parse(r->hash, strlen(r->hash), &have) != 0)
        return false;
    return rs_hashes_match(&want, &have) > 0 &&
           (t->length < 0 || t->length == r->length);
}

static bool
same_text(const char *x, const char *y)
{
    return x == NULL || y == NULL ? x == y : strcmp(x, y) == 0;
}

static bool
is_repair(const char *origin)
{
    return origin != NULL && strcmp(origin, APPLY_ORIGIN_REPAIR) == 0;
}

/* Does the pending row q ask for what t describes? A repair is not the
 * same as the change it repairs: it fetches without conditions. */
static bool
same_change(const struct ledger_todo *q, const struct ledger_todo *t)
{
    return q->change == t->change && q->change_dt == t->change_dt &&
           q->lastmod == t->lastmod && q->length == t->length &&
           same_text(q->hash, t->hash) &&
           (is_repair(q->origin) || !is_repair(t->origin));
}

int
apply_offer(struct apply *a, const struct ledger_todo *t)
{
    struct ledger_res r;
    struct ledger_todo q;
    char *buf = NULL;
    int rc;

    rc = ledger_res_get(a->o.ledger, t->uri, &r, &buf);
    if (rc == 0 && t->origin != NULL &&
        strcmp(t->origin, APPLY_ORIGIN_REPAIR) == 0) {
        rs_free(buf);                 /* the ledger is right, the file not */
    } else if (rc == 0) {
        bool skip = (t->change_dt != RS_TIME_NONE &&
                     r.change_dt != RS_TIME_NONE && t->change_dt < r.change_dt)
                    || holds(&r, t);
        rs_free(buf);
        if (skip)
            return 0;
    } else if (rc != RS_ENOTFOUND) {
        return rc;
    }
    bool had = rc == 0;
    int64_t retried_pos = 0;          /* a retry row's place, kept */
    buf = NULL;
    rc = ledger_todo_get(a->o.ledger, t->uri, &q, &buf);
    if (rc == 0) {
        bool newer = q.change_dt != RS_TIME_NONE &&
                     t->change_dt != RS_TIME_NONE && q.change_dt > t->change_dt;
        /* The same change again (a polling pull reads the same Change List
         * entries at every poll; push and a pull both bring it): the row
         * keeps its place, its job in flight and its backoff. Put again,
         * it would cancel that job each time, and a failing fetch would
         * be due at once whatever its backoff. A failed row is taken
         * again. */
        bool same = !q.failed && same_change(&q, t);
        rs_free(buf);
        if (newer || same)
            return 0;
        if (!q.failed && q.not_before != 0)
            retried_pos = q.pos;
        /* A pending create of something now deleted: the deletion
         * replaces it (else its fetch would 404 until it failed). */
    } else if (rc != RS_ENOTFOUND) {
        return rc;
    } else if (!had && t->change == LEDGER_DELETE) {
        /* Never had it, nothing pending: remember the deletion's time all
         * the same, so a late, older create is known to be older. */
        struct ledger_res tomb = { .uri = t->uri, .path = "",
                                   .lastmod = RS_TIME_NONE,
                                   .change_dt = t->change_dt, .length = -1,
                                   .deleted = true };
        if (t->change_dt == RS_TIME_NONE)
            return 0;
        if ((rc = apply_txn(a)) != 0)
            return rc;
        return ledger_res_put(a->o.ledger, &tomb) < 0 ? RS_EIO : 0;
    }
    if ((rc = apply_txn(a)) != 0)
        return rc;
    rc = ledger_todo_put(a->o.ledger, t, NULL);
    if (rc < 0)
        return rc;
    /* a retry row due at once again, at a place the walk passed */
    if (retried_pos != 0 && a->cur_now.pos >= retried_pos)
        a->cur_now.pos = retried_pos - 1;
    struct job *busy = job_find(a, t->uri);
    if (busy != NULL)
        job_newer(a, busy);
    return 1;
}

/* ------------------------------------------------------------- refill */

static bool
take_token(struct apply *a)
{
    rs_time_t now;

    if (a->o.rate <= 0)
        return true;
    now = rs_time_now();
    a->tokens += (double)(now - a->tokens_at) / 1e6 * a->o.rate;
    a->tokens_at = now;
    if (a->tokens > a->o.rate)
        a->tokens = a->o.rate;       /* a burst of one second at most */
    if (a->tokens < 1.0)
        return false;
    a->tokens -= 1.0;
    return true;
}

/* Start the job of one due row. Returns false when the rate limit says
 * wait. */
static bool
job_start(struct apply *a, const struct ledger_todo *t)
{
    static const char *const no_headers[] = { NULL };
    struct job *j;
    struct job *busy = job_find(a, t->uri);
    struct ledger_res old;
    char *oldbuf = NULL;
    const char *why = NULL;
    char inm[600];
    const char *hdrs[2] = { NULL, NULL };
    int rc;

    if (busy != NULL) {
        /* A newer change the walk came to on a pass from the start: the
         * job runs on, cancelled when it has run too long. */
        if (busy->t.seq != t->seq)
            job_newer(a, busy);
        return true;
    }
    if (t->change != LEDGER_DELETE && !take_token(a))
        return false;
    if ((j = rs_calloc(1, sizeof(*j))) == NULL)
        return true;
    j->a = a;
    j->t = *t;
    j->started_ms = rs_time_mono_ms();
    j->uri = rs_strdup(t->uri);
    j->hash_s = t->hash != NULL ? rs_strdup(t->hash) : NULL;
    if (j->uri == NULL || (t->hash != NULL && j->hash_s == NULL)) {
        job_free(j);
        return true;
    }
    j->t.uri = j->uri;
    j->t.hash = j->hash_s;
    j->pushed = t->origin != NULL && strcmp(t->origin, "push") == 0;
    j->t.origin = NULL;
    j->t.last_error = NULL;
    if (j->hash_s != NULL &&
        rs_hashes_parse(j->hash_s, strlen(j->hash_s), &j->expect) != 0)
        j->expect.n = 0;
    if (a->njobs % 16 == 0) {
        struct job **n = rs_realloc(a->jobs, (a->njobs + 16) * sizeof(*n));
        if (n == NULL) {
            job_free(j);
            return true;
        }
        a->jobs = n;
    }
    a->jobs[a->njobs++] = j;
    a->st.in_flight = (unsigned)a->njobs;

    rc = pathmap_path(a->o.pathmap, j->uri, &j->path, &why);
    if (rc != 0) {
        /* Not ours to mirror: said once (log, metrics) and dropped, not
         * kept as a failure - the mirror is not behind for refusing it. */
        snprintf(j->why, sizeof(j->why), "refused: %s",
                 rc == RS_EDENIED ? "outside the Source's prefixes"
                                  : why != NULL ? why : rs_strerror(rc));
        if (apply_txn(a) == 0 &&
            ledger_todo_done(a->o.ledger, j->uri, j->t.seq) >= 0)
            report(a, j->uri, APPLY_REFUSED, j->why);
        job_end(a, j);
        return true;
    }
    rc = ledger_res_get(a->o.ledger, j->uri, &old, &oldbuf);
    if (rc == 0 && old.change_dt != RS_TIME_NONE &&
        t->change_dt != RS_TIME_NONE && t->change_dt < old.change_dt) {
        /* Older than what the mirror holds: a late or replayed change. */
        rs_free(oldbuf);
        if (apply_txn(a) == 0 &&
            ledger_todo_done(a->o.ledger, j->uri, j->t.seq) >= 0)
            report(a, j->uri, APPLY_UNCHANGED, "older than the mirror's copy");
        job_end(a, j);
        return true;
    }
    j->had_copy = rc == 0 && !old.deleted;
    if (t->change == LEDGER_DELETE) {
        job_delete(a, j, rc == 0 ? &old : NULL);
        rs_free(oldbuf);
        job_end(a, j);
        return true;
    }
    if (rc == 0)
        j->gen = old.gen;
    if (kept_take(a, j)) {            /* its answer came with an older one */
        rs_free(oldbuf);
        if (!job_place(a, j))
            job_end(a, j);
        return true;
    }
    /* Conditional GET when the mirror's file is as the ledger says (a
     * repair is for a file that is not: it needs the body). */
    if (j->had_copy && old.etag != NULL && strlen(old.etag) < 500 &&
        (t->origin == NULL || strcmp(t->origin, APPLY_ORIGIN_REPAIR) != 0)) {
        struct stat sb;
        if (mirror_stat(a->o.mirror, j->path, &sb) == 0 &&
            (old.length < 0 || sb.st_size == old.length)) {
            snprintf(inm, sizeof(inm), "If-None-Match: %s", old.etag);
            hdrs[0] = inm;
            j->conditional = true;
        }
    }
    rs_free(oldbuf);
    if ((j->hasher = rs_hasher_new(hash_mask(&j->expect))) == NULL) {
        snprintf(j->why, sizeof(j->why), "out of memory");
        job_retry(a, j, -1, false);
        job_end(a, j);
        return true;
    }
    struct rs_http_req_opts ro = {
        .url = j->uri,
        .headers = hdrs[0] != NULL ? hdrs : no_headers,
        .timeout_ms = a->o.timeout_ms ? a->o.timeout_ms : APPLY_TIMEOUT_MS,
        .max_body = a->o.max_body ? a->o.max_body : APPLY_MAX_BODY,
        .max_redirects = 5,
        .on_data = on_job_data,
        .on_done = on_job_done,
        .ud = j,
        .own_refusal = true,          /* o.on_refused judges */
    };
    a->st.requests++;
    rc = rs_http_request(a->o.http, &ro, &j->req);
    if (rc != 0) {
        snprintf(j->why, sizeof(j->why), "GET: %s", rs_strerror(rc));
        job_retry(a, j, -1, rc == RS_EINVAL);
        job_end(a, j);
    }
    return true;
}

/* One due row from the ledger: start its job, skip it (in flight), or
 * stop (full, or the rate limit: the row is offered again next time). */
static int
on_todo_row(void *ud, const struct ledger_todo *t)
{
    struct apply *a = ud;
    size_t room = a->o.parallel ? a->o.parallel : APPLY_PARALLEL;

    if (job_find(a, t->uri) == NULL && a->njobs >= room)
        return 1;
    return job_start(a, t) ? 0 : 2;
}

/* Walk one queue from its cursor; when the walk runs dry, once more from
 * the start (rows that sort before where the cursor was are then seen).
 * Each read asks for as many rows as there are free slots: a job ends,
 * one row is read. Asking for more (a page of 64 to fill one slot) read
 * and copied rows only to drop them, a tenth of rssub's CPU at 5,000
 * changes/s. Rows in flight use up a read; the next read goes on from
 * past them. */
static int
refill_queue(struct apply *a, enum ledger_due which,
             struct ledger_cursor *cur, rs_time_t now)
{
    size_t room = a->o.parallel ? a->o.parallel : APPLY_PARALLEL;
    int rc = 0;

    for (int pass = 0; pass < 2 && a->njobs < room; pass++) {
        do {
            rc = ledger_todo_next(a->o.ledger, which, now, cur,
                                  room - a->njobs, on_todo_row, a);
        } while (rc == 0 && cur->pos != 0 && a->njobs < room);
        if (rc != 0 || cur->pos != 0)
            break;
    }
    return rc;
}

/* Wake the refill when the next retry comes due (none waits: no timer). */
static void
arm_due(struct apply *a, rs_time_t now)
{
    rs_time_t when = 0;
    int rc = ledger_todo_due_after(a->o.ledger, now, &when);
    rs_time_t us = rc == 0 ? when - now : 1000000;   /* failing: later */
    struct timeval tv;

    if (rc == RS_ENOTFOUND) {
        evtimer_del(a->ev_due);
        return;
    }
    if (us > (rs_time_t)APPLY_WAKE_MAX_S * 1000000)
        us = (rs_time_t)APPLY_WAKE_MAX_S * 1000000;
    tv.tv_sec = (time_t)(us / 1000000);
    tv.tv_usec = (suseconds_t)(us % 1000000);
    evtimer_add(a->ev_due, &tv);
}

static void
apply_refill(struct apply *a)
{
    rs_time_t now = rs_time_now();
    bool waiting = false;
    int rc;

    if (a->paused || a->held || a->closing)
        return;
    if (a->state_fails > 0) {
        int64_t left = a->state_wait_ms - rs_time_mono_ms();
        if (left > 0) {
            arm_in(a->ev_kick, left);
            return;
        }
    }
    /* Retries whose time has come before the rows due at once: rows put
     * after a retry came due (a Source that never stops changing, a
     * polling pull) must not keep it waiting. A full house (1) leaves
     * the rest to the next refill, when a job ends. */
    rc = refill_queue(a, LEDGER_DUE_RETRY, &a->cur_retry, now);
    if (rc == 0)
        rc = refill_queue(a, LEDGER_DUE_NOW, &a->cur_now, now);
    if (rc == 2) {
        struct timeval tv = { 0, 20000 };
        evtimer_add(a->ev_kick, &tv);     /* the rate limit */
        return;
    }
    if (rc < 0) {
        struct timeval tv = { 1, 0 };
        evtimer_add(a->ev_kick, &tv);     /* the state is failing: later */
        return;
    }
    arm_due(a, now);
    if (a->njobs == 0 && a->o.on_idle != NULL && apply_idle(a, &waiting))
        a->o.on_idle(a->o.ud, waiting);
}

static void
on_kick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    apply_refill(arg);
}

/* ---------------------------------------------------------------- API */

struct apply *
apply_new(const struct apply_opts *o, char *err, size_t errsz)
{
    struct apply *a = rs_calloc(1, sizeof(*a));

    if (a == NULL) {
        snprintf(err, errsz, "out of memory");
        return NULL;
    }
    a->o = *o;
    a->tokens = o->rate > 0 ? o->rate : 0;
    a->tokens_at = rs_time_now();
    a->ev_kick = evtimer_new(o->base, on_kick, a);
    a->ev_commit = evtimer_new(o->base, on_commit, a);
    a->ev_due = evtimer_new(o->base, on_kick, a);
    a->ev_stale = evtimer_new(o->base, on_stale, a);
    a->ev_kept = evtimer_new(o->base, on_kept, a);
    if (a->ev_kick == NULL || a->ev_commit == NULL || a->ev_due == NULL ||
        a->ev_stale == NULL || a->ev_kept == NULL) {
        snprintf(err, errsz, "out of memory");
        apply_free(a);
        return NULL;
    }
    if (o->mirror != NULL && mirror_syncs(o->mirror) &&
        (a->sync = syncer_new(o->base, err, errsz)) == NULL) {
        apply_free(a);
        return NULL;
    }
    return a;
}

void
apply_free(struct apply *a)
{
    if (a == NULL)
        return;
    a->closing = true;
    /* first: its thread may hold a job's file */
    syncer_free(a->sync);
    a->sync = NULL;
    while (a->njobs > 0) {
        struct job *j = a->jobs[--a->njobs];
        if (j->req != NULL) {
            /* Its on_done (from the loop, or from rs_http_free) frees it. */
            j->a = NULL;
            j->superseded = true;
            rs_http_cancel(j->req);
            continue;
        }
        job_free(j);
    }
    apply_commit(a);
    if (a->ev_kick != NULL)
        event_free(a->ev_kick);
    if (a->ev_commit != NULL)
        event_free(a->ev_commit);
    if (a->ev_due != NULL)
        event_free(a->ev_due);
    if (a->ev_stale != NULL)
        event_free(a->ev_stale);
    if (a->ev_kept != NULL)
        event_free(a->ev_kept);
    while (a->nkept > 0)
        kept_drop(a, a->nkept - 1);
    rs_free(a->jobs);
    rs_free(a);
}

void
apply_kick(struct apply *a)
{
    struct timeval now = { 0, 0 };

    if (!evtimer_pending(a->ev_kick, NULL))
        evtimer_add(a->ev_kick, &now);
}

void
apply_pause(struct apply *a, bool pause)
{
    a->paused = pause;
    if (!pause)
        apply_kick(a);
}

bool
apply_hold(struct apply *a, bool hold)
{
    if (hold && a->njobs > 0)
        return false;
    a->held = hold;
    while (hold && a->nkept > 0)      /* a dump writes the mirror now */
        kept_drop(a, a->nkept - 1);
    if (!hold)
        apply_kick(a);
    return true;
}

bool
apply_idle(struct apply *a, bool *waiting)
{
    rs_time_t when = 0;
    int rc;

    if (a->njobs > 0)
        return false;
    /* One index seek, not a count: this runs whenever the jobs run out. */
    rc = ledger_todo_next_due(a->o.ledger, &when);
    if (rc != 0 && rc != RS_ENOTFOUND)
        return false;
    if (waiting != NULL)
        *waiting = rc == 0 && when > rs_time_now();
    return rc == RS_ENOTFOUND || when > rs_time_now();
}

void
apply_set_gen(struct apply *a, int64_t gen)
{
    a->gen = gen;
}

void
apply_stats(const struct apply *a, struct apply_stats *out)
{
    *out = a->st;
}
