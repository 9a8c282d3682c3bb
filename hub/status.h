/*
 * status.h - rshub's read-only HTTP endpoints (docs/protocol.md 6):
 * /healthz, /readyz, /metrics, /topics and a topic's Capability List
 * entries, and the metrics registry they are drawn from.
 */
#ifndef HUB_STATUS_H
#define HUB_STATUS_H

#include <stdbool.h>

#include "rs_error.h"

struct hub;
struct topic;
struct evhttp_request;

/* GET /healthz, /readyz, /metrics, /topics, /topics/NAME/... ; returns
 * false when the path is not a status path. */
bool status_handle(struct hub *h, struct evhttp_request *req,
                   const char *path);

/* Answer 200 with t's GET /topics element (its backlog figures read from
 * Redis first, null when Redis does not answer). */
void status_reply_topic(struct hub *h, struct evhttp_request *req,
                        const struct topic *t);

/* Register the hub's metrics in h->metrics (at start-up); free them. */
int status_metrics_init(struct hub *h) RS_MUST_CHECK;
void status_metrics_free(struct hub *h);

#endif
