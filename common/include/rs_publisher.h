/*
 * rs_publisher.h - sending one topic's durable outbox to a hub: the
 * entries the hub has not yet accepted go out as notifications (POST HUB,
 * Content-Type application/xml, Link rel="self" = the topic URI, a bearer
 * token, X-Publish-Id KEY:SEQ), in order, one POST in flight, gathered over
 * a short window into one document (split at an entry count and a byte
 * budget). 5xx, 429, 408 and connection failures are retried with backoff
 * (Retry-After honoured); 413 halves the batch; any other 4xx stops the
 * topic until rs_publisher_resume. The outbox itself - where the entries
 * live, how a notification is written from them, how "accepted up to SEQ"
 * and the marks below are recorded - is the caller's, through callbacks:
 * rssource keeps its outbox in its state (source/push.c), rsbridge in its
 * own (bridge/outbox.c). HTTP is rs_http's.
 *
 * Marks. With X-Publish-Id the hub stores a POST only when its SEQ (the
 * last seq in it) is above the highest it accepted for the KEY, and then
 * stores it whole. A resend after a crash between the hub's 2xx and the
 * caller's record of it must therefore be wholly a duplicate or wholly
 * new: a batch 1..15 sent again after 1..5 was stored would store 1..5 a
 * second time. So before each POST goes out its last seq is recorded (a
 * mark, durable, through on `marks`), and a batch never ends past the
 * smallest mark above the watermark; the record of an acceptance drops
 * the marks it passes, in the same transaction.
 */
#ifndef RS_PUBLISHER_H
#define RS_PUBLISHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"
#include "rs_write.h"

struct event_base;
struct rs_http;
struct rs_publisher;

struct rs_publisher_opts {
    struct event_base *base;
    struct rs_http *http;
    const char *hub;            /* the publish URL */
    const char *topic;          /* Link rel="self" */
    const char *token;          /* bearer token, or NULL */
    /* X-Publish-Id KEY (rs_pubid.h), or NULL: no header. With a KEY each
     * POST says KEY:SEQ, SEQ the seq of its last entry; a hub that knows
     * the header stores a resend of what it accepted once (a crash between
     * its 2xx and the caller's record of it) as nothing. */
    const char *publish_key;
    const char *name;           /* for logs: "change", "NAME framework" */
    int64_t batch_ms;           /* gathering window; 0: send at once */
    int64_t retry_max_ms;       /* longest pause between retries (>= 100) */
    size_t max_bytes;           /* per notification; 0: RS_MAX_DOC_BYTES */
    unsigned timeout_ms;        /* per POST; 0: 30 s */
    int64_t pushed;             /* the last seq the hub accepted, at start */
    /* The marks recorded above pushed, largest first (each below the one
     * before; others are dropped), as `marks` last stored them. */
    const int64_t *sent;
    size_t nsent;
    /* The newest seq in the outbox (entries are pushed..head). */
    int64_t (*head)(void *ud);
    /* How many entries have after < seq <= upto, or a negative RS_E*.
     * NULL: upto - after (the outbox's seqs have no holes). */
    int64_t (*count)(void *ud, int64_t after, int64_t upto);
    /* Write one notification of the entries after seq `after`: at most
     * max_entries of them, fewer when the document would pass max_bytes
     * (one at least). *last: the seq of the last entry written, *n how
     * many (0: nothing to send, nothing written). 0 or an error, the
     * reason in errstr (256 bytes). */
    int (*build)(void *ud, int64_t after, size_t max_entries,
                 size_t max_bytes, rs_write_cb cb, void *cbud, int64_t *last,
                 size_t *n, char *errstr);
    /* Record, in one transaction, the watermark `last` and the marks
     * still above it (marks[0..nmarks), largest first): the hub accepted
     * the n entries after `before` up to `last` (channel: its
     * X-Hub-Channel, or NULL), or, with n == 0, nothing is left to send up
     * to the mark `last`. 0, or an error: the same entries are sent again
     * after a backoff. */
    int (*accepted)(void *ud, int64_t before, int64_t last, size_t n,
                    const char *channel, const int64_t *marks,
                    size_t nmarks);
    /* Record the marks (largest first) before a POST goes out; 0 or an
     * error (the POST waits for a backoff). NULL: no marks are kept (no
     * publish_key). */
    int (*marks)(void *ud, const int64_t *marks, size_t nmarks);
    void *ud;
};

/* Marks kept at most: a new one only comes with a batch smaller than the
 * last (a 413 halving, at most 16 from RS_MAX_ENTRIES, or a restart with
 * a smaller size budget), so this is never reached in practice. */
#define RS_PUBLISHER_MARKS 64

struct rs_publisher_stats {
    uint64_t posts;             /* POSTs started */
    uint64_t accepted_docs;     /* answered 2xx */
    uint64_t accepted_entries;
    uint64_t duplicates;        /* 2xx with X-Hub-Duplicate: stored before */
    uint64_t retries;           /* backoffs */
    uint64_t failures;          /* non-2xx answers and transport errors */
    int64_t pushed;             /* the watermark */
    bool stopped;               /* a 4xx stopped the topic */
    /* Since the hub last answered 2xx (cleared then): how many POSTs
     * failed, when the first of them did (RS_TIME_NONE: none failing),
     * and the last one's status (0: no answer) and words (the transport
     * error, or the first line of the hub's reply): for status pages. */
    uint64_t failing;
    int64_t failing_since;      /* rs_time_t */
    long last_status;
    char last_error[200];
};

/* o is copied (its strings too). NULL with *err when out of memory. */
struct rs_publisher *rs_publisher_new(const struct rs_publisher_opts *o,
                                      const char **err);
/* Call after rs_http_free, which completes the POST in flight as
 * cancelled (nothing is lost: its entries stay in the outbox). NULL ok. */
void rs_publisher_free(struct rs_publisher *p);

/* Entries were added: send them after the gathering window. */
void rs_publisher_kick(struct rs_publisher *p);
/* Send what is gathering now, without waiting for the window (drain). */
void rs_publisher_flush(struct rs_publisher *p);
/* Un-stop a topic stopped by a 4xx, end a backoff, and send (SIGHUP). */
void rs_publisher_resume(struct rs_publisher *p);
/* A new bearer token (NULL: none), for every POST from now on (a POST
 * copies its headers when it starts). One in flight that the hub refuses
 * (401, 403) with the old token is sent again at once with the new one,
 * rather than stopping the topic. 0 or RS_ENOMEM (the old one stays). */
int rs_publisher_set_token(struct rs_publisher *p,
                           const char *token) RS_MUST_CHECK;
/* No POST in flight. */
bool rs_publisher_idle(const struct rs_publisher *p);
/* The last seq the hub accepted. */
int64_t rs_publisher_pushed(const struct rs_publisher *p);

void rs_publisher_stats(const struct rs_publisher *p,
                        struct rs_publisher_stats *out);

#endif
