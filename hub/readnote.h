/*
 * readnote.h - refusals of read access (readauth.h verdicts), counted in
 * rshub_read_refused_total{reason} and logged at most once a minute per
 * client address with the reason, the place and the topic, never the
 * credential. Any thread may note one: the service threads refuse
 * upgrades, the main loop WebSub and status requests.
 */
#ifndef HUB_READNOTE_H
#define HUB_READNOTE_H

#include <stdint.h>

#include "readauth.h"

struct rs_metrics;
struct readnote;

/* Registers the counters in m (may be NULL: then only logs). NULL on
 * ENOMEM or a registration failure. */
struct readnote *readnote_new(struct rs_metrics *m);
void readnote_free(struct readnote *rn);            /* NULL ok */

/* One refusal of client addr ("192.0.2.1"), at where ("channel",
 * "websub", "topics"), for topic (may be NULL), with verdict v (one that
 * refuses). */
void readnote_refused(struct readnote *rn, const char *addr,
                      const char *where, const char *topic,
                      enum read_verdict v);

/* Refusals noted, per verdict (tests). */
uint64_t readnote_count(const struct readnote *rn, enum read_verdict v);

#endif
