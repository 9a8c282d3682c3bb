/*
 * readnote.c - refusals of read access: counters (atomic, rs_metrics) and
 * the log limiter, a direct-mapped table of client addresses (capped: an
 * address that collides with another takes its slot, at worst one more
 * line) behind one mutex held only for the lookup.
 */
#include "readnote.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define RS_LOG_MODULE "readauth"
#include "rs_alloc.h"
#include "rs_fnv.h"
#include "rs_log.h"
#include "rs_metrics.h"
#include "rs_time.h"

#define READNOTE_SLOTS 4096
#define READNOTE_MS 60000          /* one line per address per minute */
#define READNOTE_ADDR 64

struct note_slot {
    char addr[READNOTE_ADDR];
    uint64_t logged_ms;            /* 0: never */
    uint64_t quiet;                /* refusals not logged since */
};

struct readnote {
    pthread_mutex_t mu;
    struct note_slot slots[READNOTE_SLOTS];
    struct rs_metrics_counter *by[READ_VERDICTS];
};

struct readnote *
readnote_new(struct rs_metrics *m)
{
    static const enum read_verdict refusals[] = {
        READ_NO_CRED, READ_BAD_CRED, READ_EXPIRED, READ_NOT_ALLOWED,
    };
    struct readnote *rn = rs_calloc(1, sizeof(*rn));
    if (rn == NULL)
        return NULL;
    pthread_mutex_init(&rn->mu, NULL);
    for (size_t i = 0; m != NULL && i < sizeof(refusals) / sizeof(*refusals);
         i++) {
        enum read_verdict v = refusals[i];
        if (rs_metrics_register_counter(
                m, &rn->by[v], "rshub_read_refused_total",
                "Read access refused (WebSocket upgrades, WebSub "
                "subscriptions, status requests), by reason.",
                "reason", readauth_verdict_name(v), NULL) != 0) {
            readnote_free(rn);
            return NULL;
        }
    }
    return rn;
}

void
readnote_free(struct readnote *rn)
{
    if (rn == NULL)
        return;
    pthread_mutex_destroy(&rn->mu);
    rs_free(rn);
}

void
readnote_refused(struct readnote *rn, const char *addr, const char *where,
                 const char *topic, enum read_verdict v)
{
    if (rn == NULL || v >= READ_VERDICTS)
        return;
    if (rn->by[v] != NULL)
        rs_metrics_counter_inc(rn->by[v]);
    uint64_t now = rs_time_mono_ms(), quiet = 0;
    bool log = false;
    struct note_slot *s =
        &rn->slots[rs_fnv1a64(addr) % READNOTE_SLOTS];
    pthread_mutex_lock(&rn->mu);
    if (strcmp(s->addr, addr) != 0) {
        snprintf(s->addr, sizeof(s->addr), "%s", addr);
        s->logged_ms = 0;
        s->quiet = 0;
    }
    if (s->logged_ms == 0 || now - s->logged_ms >= READNOTE_MS) {
        log = true;
        quiet = s->quiet;
        s->logged_ms = now;
        s->quiet = 0;
    } else {
        s->quiet++;
    }
    pthread_mutex_unlock(&rn->mu);
    if (!log)
        return;
    char q[24];
    snprintf(q, sizeof(q), "%llu", (unsigned long long)quiet);
    rs_log_kv(RS_LOG_WARN, "read access refused", "client", addr, "at", where,
              "topic", topic != NULL ? topic : "-", "reason",
              readauth_verdict_name(v), "unlogged_since", q, NULL);
}

uint64_t
readnote_count(const struct readnote *rn, enum read_verdict v)
{
    if (rn == NULL || v >= READ_VERDICTS || rn->by[v] == NULL)
        return 0;
    return rs_metrics_counter_get(rn->by[v]);
}
