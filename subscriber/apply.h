/*
 * apply.h - bringing mirrored resources to the state the ledger's todo
 * rows ask for: fetch (rs_http, bounded parallelism, rate limit, retries
 * with backoff, Retry-After, conditional GET), verify length and hashes,
 * write atomically (mirror), delete or move to the attic, and record the
 * result (ledger). One job per resource at a time: the retries whose
 * time has come first, then the rows due at once in todo order, and a
 * timer wakes the appliers when the next retry comes due; a newer change
 * supersedes the job in flight. Also the ledger's write batching:
 * every writer in the process opens its writes with apply_txn and the
 * batch is committed on a short timer (or at once with apply_flush).
 * Where the todo rows come from is the caller's business.
 */
#ifndef SUB_APPLY_H
#define SUB_APPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"
#include "rs_time.h"

struct event_base;
struct rs_http;
struct ledger;
struct mirror;
struct pathmap;
struct apply;

enum apply_outcome {
    APPLY_CREATED,           /* written, no earlier copy */
    APPLY_UPDATED,           /* written over an earlier copy */
    APPLY_DELETED,           /* removed (or moved to the attic) */
    APPLY_UNCHANGED,         /* 304, or already gone, or not newer */
    APPLY_RETRY,             /* failed this time; will be retried */
    APPLY_FAILED,            /* gave up: the mirror lacks it */
    APPLY_REFUSED,           /* not ours: outside the prefixes, a hostile
                                path; logged, not kept as a failure */
    APPLY_OUTCOMES
};

struct apply_stats {
    uint64_t outcomes[APPLY_OUTCOMES];
    uint64_t bytes;          /* resource bytes written */
    uint64_t requests;       /* GETs started */
    uint64_t superseded;     /* jobs dropped for a newer change */
    uint64_t newer_answers;  /* answers that were a newer change's, announced
                                while the fetch ran: taken for it */
    uint64_t kept_answers;   /* answers that were no announced version, kept
                                and taken for the change that came next */
    uint64_t commits;        /* ledger transactions committed */
    unsigned in_flight;
    rs_time_t last_change_dt; /* newest change datetime applied */
};

struct apply_opts {
    struct event_base *base;
    struct rs_http *http;
    struct ledger *ledger;
    struct mirror *mirror;
    const struct pathmap *pathmap;
    unsigned parallel;       /* jobs in flight; 0 = 32 */
    double rate;             /* GETs per second; 0 = unlimited */
    unsigned retries;        /* attempts before a resource is failed; 0 = 5 */
    unsigned timeout_ms;     /* one GET; 0 = 120 s */
    uint64_t max_body;       /* one resource; 0 = 1 GiB */
    unsigned commit_ms;      /* batch window; 0 = 20 ms */
    unsigned kept_ms;        /* an answer no change announced yet is kept
                                this long for one that does; 0 = 10 s */
    /* One resource done (or retried, or failed), after the ledger row was
     * written (in the open batch). what: "" or why it failed. May be NULL. */
    void (*on_result)(void *ud, const char *uri, enum apply_outcome o,
                      const char *what);
    /* A resource was answered 401 or 403 (its fetch is retried, then
     * failed, like any other error): whether that says the Source refuses
     * us altogether is the caller's judgement. May be NULL. */
    void (*on_refused)(void *ud, const char *uri, long status);
    /* Nothing in flight and no todo row due; waiting: some row waits for
     * a retry not due yet (failed rows aside). Runs again at each refill while it
     * holds. May be NULL. */
    void (*on_idle)(void *ud, bool waiting);
    /* A batch could not be committed (disk full, I/O error; what is the
     * ledger's error), from whichever apply_flush met it: the todo rows
     * of the batch are redone (the walks start over after
     * apply_state_retry_ms), but the changes it took in (notifications,
     * a pull) are the caller's to take in again. May be NULL. */
    void (*on_state_error)(void *ud, const char *what);
    void *ud;
};

struct apply *apply_new(const struct apply_opts *o, char *err, size_t errsz);

/* Cancels what is in flight (nothing half-written stays: the temp files
 * go), commits the open batch. Call before rs_http_free, and keep the
 * mirror open until rs_http_free returned (canceled jobs end there).
 * NULL ok. */
void apply_free(struct apply *a);

/* A change to make (t->uri, change, change_dt, lastmod, length, hash,
 * origin; seq and attempts ignored): queued as a todo row in the open
 * batch unless the mirror already holds this state or a newer one, or a
 * newer change, or this very change, is already queued (then the queued
 * row keeps its job in flight and its backoff; a failed row is queued
 * again). Returns 1 queued, 0 not needed, or a ledger error. Call
 * apply_kick after a run of offers. */
struct ledger_todo;
/* The origin of a change that repairs the mirror's file (an audit found
 * it differs from what the ledger recorded): always fetched, without
 * conditions. */
#define APPLY_ORIGIN_REPAIR "repair"
int apply_offer(struct apply *a, const struct ledger_todo *t) RS_MUST_CHECK;

/* *t beyond now + RS_TIME_SKEW_US: taken as now, and true (the caller
 * tells it); moved to the marks, it would leave rssub blind until then.
 * RS_TIME_NONE is left alone. */
bool apply_future(rs_time_t *t, rs_time_t now);

/* Fill *t from a Change List or notification entry (loc resolved):
 * change (none means updated), change time (datetime, else lastmod; one
 * in the future taken as now, apply_future: then true), lastmod, length,
 * hash (formatted into hbuf, RS_HASHES_BUFSZ bytes). t borrows loc,
 * origin and hbuf. */
struct rs_entry;
bool apply_todo_from_entry(const struct rs_entry *e, const char *loc,
                           const char *origin, struct ledger_todo *t,
                           char *hbuf);

/* New todo rows may be due: look for work (cheap; coalesced). */
void apply_kick(struct apply *a);

/* Stop starting jobs (SIGTERM); jobs in flight finish. apply_idle says
 * when they did. */
void apply_pause(struct apply *a, bool pause);

/* Hold (true) or let go: while held no job starts, as when paused, but
 * apart from apply_pause (the session's: a drain, a read-only audit), so
 * neither undoes the other. Holding succeeds only with no job in flight:
 * then, until let go, nothing but the holder writes the mirror (a dump's
 * writer threads while the loop runs). Letting go always succeeds and
 * looks for work. */
bool apply_hold(struct apply *a, bool hold);

/* Nothing in flight and no todo row due; *waiting (may be NULL): some
 * row waits for a retry not due yet. False also when the ledger cannot
 * say. Cheap (an index seek): it runs whenever the jobs run out. */
bool apply_idle(struct apply *a, bool *waiting);

/* The open batch: apply_txn before any ledger write (opens a transaction
 * when none is, and arms the commit timer); apply_flush commits it now
 * (e.g. before answering a WebSub delivery). */
int apply_txn(struct apply *a) RS_MUST_CHECK;
int apply_flush(struct apply *a) RS_MUST_CHECK;
/* apply_flush for a caller with nothing to decide on a failure: it is
 * told through on_state_error and its work redone. */
void apply_commit(struct apply *a);
/* While commits fail: how long the walks wait before they try again (1 s
 * doubling to 60 s with each failed commit); 0 once one succeeded. */
int64_t apply_state_retry_ms(const struct apply *a);

/* A reconcile of generation gen is under way: every resource row written
 * from now carries at least gen, so the reconcile does not take a resource
 * it fetched (or that push brought) while it read the list for one the
 * list did not name. */
void apply_set_gen(struct apply *a, int64_t gen);

void apply_stats(const struct apply *a, struct apply_stats *out);
const char *apply_outcome_name(enum apply_outcome o);

#endif
