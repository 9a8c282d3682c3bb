/*
 * statusjson.h - rssub's dashboard (docs/operations.md, "Dashboards"), on
 * the metrics listener: GET /status.json (the session's state, each
 * Capability List's, lag, pending and failed resources, the channels'
 * positions, the recent changes applied) and the page under /ui/ (built
 * in, ui/sub/). It reads the session (session_info) and the ledger, and
 * keeps only the recent changes, in a ring it is told of.
 */
#ifndef SUB_STATUSJSON_H
#define SUB_STATUSJSON_H

#include <stddef.h>

#include "rs_error.h"

struct evhttp_request;
struct ledger;
struct session;
struct statusjson;

#define STATUSJSON_RECENT 50         /* recent changes kept */
#define STATUSJSON_FAILED 20         /* failed resources listed */
#define STATUSJSON_POSITIONS 64      /* channel positions listed */

/* Both borrowed for the object's life. NULL when out of memory. */
struct statusjson *statusjson_new(struct session *s, struct ledger *l);
void statusjson_free(struct statusjson *sj);          /* NULL ok */

/* A change handled (session_opts.on_applied): kept among the recent ones,
 * the oldest dropped past STATUSJSON_RECENT, and counted. */
void statusjson_note(struct statusjson *sj, const char *uri, int outcome,
                     const char *what);

/* The JSON text of GET /status.json; *out is the caller's (free()). */
int statusjson_render(struct statusjson *sj, char **out) RS_MUST_CHECK;

/* The listener's route (rs_metrics_server_route): /status.json and the
 * files under /ui/, ud the statusjson. */
void statusjson_route(struct evhttp_request *req, const char *path, void *ud);

#endif
