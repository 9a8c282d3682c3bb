/*
 * session.h - one rssub session: the sync engine that keeps a mirror in
 * step with one Source. It discovers the Source's Capability Lists, pulls
 * (baseline, Change Lists, reconcile, audit), follows each list's push
 * channels or polls, turns gaps and framework notifications back into
 * pulls, says when the first sync is applied, and drains. It decides what
 * runs when; the mechanisms are modules (discovery, pull, dump, follow,
 * capwatch, apply), and the command line, the state file, the metrics
 * listener and signals are rssub.c's.
 *
 * The session and each Capability List are explicit state machines
 * (docs/subscriber.md, "The session"): one setter each logs from -> to.
 */
#ifndef SUB_SESSION_H
#define SUB_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hubsub.h"
#include "rs_error.h"

struct event_base;
struct rs_http;
struct rs_metrics;
struct ledger;
struct mirror;
struct pathmap;
struct wsclient;
struct session;

enum session_cmd { SESSION_RUN, SESSION_SYNC, SESSION_AUDIT };

/* How changes come (--transport). */
enum session_transport { TRANSPORT_AUTO, TRANSPORT_WEBSOCKET,
                         TRANSPORT_WEBSUB, TRANSPORT_POLL };

/* The engine's settings; strings and lists are borrowed for the
 * session's life. Durations in ms. */
struct session_conf {
    const char *source;            /* the --source URL */
    char *const *sets;             /* --set filters (NULL-ended) or NULL */
    char *const *channels;         /* --channel URIs or NULL */
    bool push;                     /* follow push channels at all */
    enum session_transport transport;
    bool dump, strict, deep;
    unsigned dump_threads;         /* 0: one per CPU */
    bool fix;                      /* audit --fix */
    bool readonly;                 /* a report-only audit */
    int64_t poll_ms, push_timeout_ms, pull_ms, audit_ms;
    int64_t reconcile_min_ms;      /* framework-triggered reconciles */
    bool audit_fix;
    uint64_t max_delete;
    unsigned max_delete_share;
    bool force_delete;
    /* apply */
    unsigned parallel, retries, timeout_ms;
    double rate;
    uint64_t max_body;
    const char *ready_file;        /* run: written once ready, or NULL */
    const char *state_path;        /* for the stray scan's writer check */
    bool progress;                 /* a progress line (sync, audit) */
    /* The mirror holds none of the files the ledger lists (rssub.c's
     * sample at start: emptied, or another directory): the first pull of
     * every list is a reconcile, whose file check finds each file missing
     * and fetches it, instead of Change Lists that would find nothing
     * new and call an empty mirror synced. */
    bool refill;
};

/* While a session that writes runs (run, sync, audit --fix), it checks
 * every SESSION_ROOT_CHECK_MS, and before each periodic audit and poll,
 * that the mirror's path still names the directory it holds
 * (mirror_check_root): a mirror moved or removed behind its back ends
 * the session with an error (exit 1, audit 3; last_error says why)
 * rather than have it write on into a directory nobody serves. */
#define SESSION_ROOT_CHECK_MS 2000

struct session_opts {
    enum session_cmd cmd;
    struct session_conf c;
    struct event_base *base;
    struct rs_http *http;
    struct ledger *ledger;
    struct mirror *mirror;
    const struct pathmap *pathmap;
    /* No --prefix or --map was given: the session allows the origins of
     * the documents its Capability Lists name (their Resource List,
     * Change List and dumps), else the --source URL's origin, once the
     * lists are found and before anything is mapped. NULL: the caller set
     * the prefixes. */
    struct pathmap *default_prefixes;
    struct wsclient *ws;           /* run with push: WebSocket client */
    struct hubsub *hubsub;         /* run with --callback-listen */
    struct rs_metrics *metrics;    /* counters and gauges registered here */
    /* The session is over (sync, audit done; run drained or failed):
     * leave the loop. Exactly once. */
    void (*on_end)(void *ud, int exit_code);
    /* A resource change handled, after it was counted: outcome is an
     * enum apply_outcome, what "" or why it failed (apply.h's on_result).
     * For the dashboard's recent changes (statusjson.h). May be NULL. */
    void (*on_applied)(void *ud, const char *uri, int outcome,
                       const char *what);
    void *ud;
};

/* NULL on failure, the reason in err. Nothing runs before session_start. */
struct session *session_new(const struct session_opts *o, char *err,
                            size_t errsz);
/* After the loop has ended. NULL ok. */
void session_free(struct session *s);

/* Discover the Source and begin. RS_EINVAL: a --source that is not an
 * http(s) URL (no on_end then). */
int session_start(struct session *s) RS_MUST_CHECK;

/* The drain (rs_daemon.h drives it): session_drain stops taking work
 * (channels closed, WebSub unsubscribed, the pull abandoned, the appliers
 * paused); session_drained says whether the writes in flight and the
 * unsubscriptions are done; session_stop ends the session (on_end), saying
 * what a timed-out drain leaves behind. */
void session_drain(struct session *s);
bool session_drained(struct session *s);
void session_stop(struct session *s, bool timed_out);

/* run records in the state's meta, under this key, how each Capability
 * List is followed, for `rssub status`: one line a list, "CAPLIST
 * transport=websocket|websub|poll push=ok|failing|none since=TIME
 * reason=\"WHY\"", rewritten whenever a transport or a WebSub
 * subscription's state changes. As the daemon last was: whether one
 * runs is ledger_writer_pid's to say. */
#define SESSION_META_FOLLOW "follow"

/* hubsub's callbacks (hubsub_opts), to be forwarded here. */
int session_websub_delivery(struct session *s, const struct hubsub_msg *m);
void session_websub_state(struct session *s, const char *topic,
                          enum hubsub_state st, const char *why);

/* Log each resource the ledger holds as failed ("not mirrored", with its
 * last error): the end of a sync, and rssub status. 0 or a ledger error. */
int session_log_failed(struct ledger *l) RS_MUST_CHECK;

/* The Source's origin answered 401 or 403 to a document (rs_http's
 * on_refused for the realm "source"; a resource's refusal is apply's
 * on_refused, which counts the same, and which ends up here only when
 * 8 different resources were refused and no fetch went through for 2 s:
 * fewer are those resources' own failures, retried and then reported
 * failed like any other): counted
 * (rssub_source_auth_failures_total), shown in
 * rssub_source_access{state="refused"} until a discovery or pull goes
 * through. sync and audit end at once (1, 3) with one error line naming
 * url and status; run logs it once per spell and keeps retrying with
 * backoff (a refused discovery too, instead of ending). Safe inside any
 * rs_http callback. */
void session_source_refused(struct session *s, const char *url,
                            long status);

/* For the metrics listener's port in the ready file (set before start). */
void session_set_metrics_port(struct session *s, int port);

/* What a dashboard shows of the session (statusjson.h). The strings are
 * the session's: valid until the loop next runs. */
struct session_info {
    const char *state;             /* "discovering", "ready", ... */
    const char *source;            /* the --source URL */
    size_t lists;                  /* Capability Lists followed */
    const char *pulling;           /* the list whose pull runs, or NULL */
    int64_t pending, failed;       /* todo rows (counted at most once a
                                      second); -1: the state unreadable */
    double lag_s;                  /* as rssub_lag_seconds */
};
struct session_list_info {
    const char *caplist;
    const char *phase;             /* "waiting", "baseline", "catch-up",
                                      "gap pull", "reconcile", ... */
    const char *transport;         /* "none", "websocket", "websub", "poll" */
    bool channel_up;               /* its WebSocket change channel is up */
    bool websub_failing;
    bool baselined;
    const char *push;              /* "ok", "failing", "none" */
    const char *why;               /* why this transport ("" before one) */
    rs_time_t since;               /* taken up then (wall clock) */
};
void session_info(struct session *s, struct session_info *out);
/* The i-th Capability List; RS_ENOTFOUND past the last. */
int session_list_info(const struct session *s, size_t i,
                      struct session_list_info *out) RS_MUST_CHECK;

#endif
