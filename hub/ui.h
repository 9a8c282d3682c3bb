/*
 * ui.h - rshub's dashboard (docs/operations.md, "Dashboards"): the page,
 * its script and style under /ui/ (built in, ui/), and /ui/node.json, this
 * node's counters for the page's rates. The topics, backlogs and WebSub
 * subscriptions the page shows are status.c's GET /topics; the live tail is
 * the page's own WebSocket connection to a channel.
 */
#ifndef HUB_UI_H
#define HUB_UI_H

#include <stdbool.h>

struct hub;
struct evhttp_request;

/* GET or HEAD /ui, /ui/ and below; false when path is not the dashboard's. */
bool ui_handle(struct hub *h, struct evhttp_request *req, const char *path);

#endif
