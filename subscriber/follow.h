/*
 * follow.h - following a Source's push channels: rshub WebSocket channels
 * (resumed with since=ID, several URIs of one channel tried in turn), and
 * WebSub notifications handed over by hubsub. Each change notification
 * becomes todo rows (apply_offer) in the same batch as the channel's new
 * position; a framework notification and a gap are reported to the
 * caller, who pulls. Connections, reconnection and positions are owned
 * here; deciding what to pull is not.
 */
#ifndef SUB_FOLLOW_H
#define SUB_FOLLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_doc.h"
#include "rs_error.h"
#include "rs_time.h"

struct event_base;
struct ledger;
struct apply;
struct wsclient;
struct follow;

/* Positions: KEY#change and KEY#framework hold each channel's last hub
 * id; KEY#source the newest change datetime queued from any channel or
 * pull of this Capability List ("everything up to here is in"). */
#define FOLLOW_POS_SOURCE "#source"

struct follow_stats {
    uint64_t notifications;  /* change notifications taken */
    uint64_t framework;      /* framework notifications taken */
    uint64_t duplicates;     /* ids at or below the position: skipped */
    uint64_t invalid;        /* not a notification, refused */
    uint64_t future;         /* changes dated beyond our clock's skew,
                                taken as of now (apply_future) */
    uint64_t gaps;           /* gaps signalled (4001) */
    uint64_t reconnects;
    bool connected[2];       /* [DISCOVERY_CHANGE], [DISCOVERY_FRAMEWORK] */
    int64_t down_since_us;   /* the change channel has been down since
                                (rs_time_mono_us: a duration's start,
                                which no wall clock step moves; 0: up, or
                                not followed) */
    rs_time_t last_message;  /* when the last notification arrived */
};

struct follow_opts {
    struct event_base *base;
    struct ledger *ledger;
    struct apply *apply;
    struct wsclient *ws;           /* NULL: no WebSocket channels */
    const char *key;               /* names this Source's positions, e.g.
                                      the Capability List URL */
    /* WebSocket URIs of the change channel (several: nodes of one hub
     * cluster, tried in turn) and of the framework channel; NULL-ended,
     * copied; either may be empty. */
    const char *const *change_ws;
    const char *const *framework_ws;
    unsigned reconnect_max_ms;     /* backoff cap; 0 = 30 s */
    /* The channel cannot give a gap-free stream from our position (4001,
     * or no position at all): pull Change Lists, then follow_resume. */
    void (*on_gap)(void *ud, const char *why);
    /* A channel resumed live after a gap (its replay mark was itself too
     * old): pull Change Lists once more, to cover what came before it
     * opened. May be NULL. */
    void (*on_live)(void *ud);
    /* One entry of a framework notification: capability document loc was
     * created/updated/deleted. */
    void (*on_framework)(void *ud, enum rs_capability cap, enum rs_change ch,
                         const char *loc);
    /* A channel went up or down (logs, status). peer: the address
     * connected to (wsclient_conn_peer), NULL if none was reached. code:
     * wsclient's (a close code, or the HTTP status of a refused upgrade).
     * A refusal of our credential (401, 403, 4008) is told once until
     * the channel opens again (or its URIs change), not at every retry. */
    void (*on_channel)(void *ud, const char *uri, const char *peer, bool up,
                       int code, const char *why);
    void *ud;
};

struct follow *follow_new(const struct follow_opts *o, char *err,
                          size_t errsz);
/* Closes the connections (no callbacks from them after). NULL ok. */
void follow_free(struct follow *f);

/* Connect the channels from the stored positions. A channel without a
 * position starts from `mark` (a time: the hub's ids are times, see
 * docs/protocol.md 2), the moment from which the caller's pull covers. */
void follow_start(struct follow *f, rs_time_t mark);

/* After the pull that a gap asked for: reconnect, replaying from mark. */
void follow_resume(struct follow *f, rs_time_t mark);

/* A batch could not be committed (apply's on_state_error): the positions
 * it moved are the ledger's again, and each channel whose notifications
 * it held reconnects after wait_ms from the position saved, so that the
 * hub replays them (a position the hub no longer keeps is a gap, as
 * ever). A change the batch took in otherwise (a pull) is the caller's. */
void follow_rewind(struct follow *f, unsigned wait_ms);

/* The channel `kind` (DISCOVERY_CHANGE, _FRAMEWORK) is now reached at
 * uris (NULL-ended, copied; NULL or empty: not followed). Unchanged URIs
 * change nothing. Otherwise the connection closes (no callback from it)
 * and the channel starts afresh, replaying from `mark` (the position held
 * belongs to the stream left behind). Returns 0, or RS_ENOMEM / a ledger
 * error (the channel then holds what could be copied). */
int follow_set_uris(struct follow *f, int kind, const char *const *uris,
                    rs_time_t mark) RS_MUST_CHECK;

/* A notification document that came by WebSub (or any other way): taken
 * as if from the change or framework channel, without an id. Returns 0
 * when its changes are queued in the open batch (flush before answering
 * the hub), or RS_EINVALID / a ledger error. */
int follow_take(struct follow *f, const char *body, size_t len,
                const char *origin);

void follow_stats(const struct follow *f, struct follow_stats *out);

/* Compare two hub ids "MS-SEQ" as numbers: <0, 0, >0; a malformed id
 * sorts first. */
int follow_id_cmp(const char *a, const char *b);

#endif
