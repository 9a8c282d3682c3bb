/*
 * ui.c - rshub's dashboard (ui.h): the built-in files (the table
 * hub_ui_assets, made from ui/ by cmake/RsEmbed.cmake) answered with the
 * strict headers of rs_asset.h, the page allowed to open this hub's
 * WebSocket listener and nothing else, and /ui/node.json. The counters are
 * read where status.c reads them for /metrics; nothing here counts.
 */
#include <event2/http.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "deliver.h"
#include "hub.h"
#include "reply.h"
#include "rs_asset.h"
#include "rs_time.h"
#include "ui.h"

extern const struct rs_asset hub_ui_assets[];

/* The origin of ws_public_url ("ws://host:port"), for the page's
 * connect-src: the channels the page opens are below it. */
static void
ui_ws_origin(const struct hub *h, char *buf, size_t len)
{
    const char *u = h->conf->ws_public_url;
    const char *p = strstr(u, "://");
    size_t n = strlen(u);

    if (p != NULL) {
        const char *slash = strchr(p + 3, '/');
        if (slash != NULL)
            n = (size_t)(slash - u);
    }
    /* The policy is one header line: a URL that could end it (it is the
     * operator's, but a header is no place to trust it) is left out. */
    if (n >= len || strcspn(u, " ;,'\"\r\n") < n)
        n = 0;
    memcpy(buf, u, n);
    buf[n] = '\0';
}

static json_t *
ui_node_json(struct hub *h)
{
    struct ws_stats ws;
    struct fanout_stats fo;
    struct deliver_stats dl;
    uint64_t rejected = 0;

    ws_server_stats(h->ws, &ws);
    fanout_stats(h->fanout, &fo);
    deliver_stats(h->deliver, &dl);
    for (int r = 0; r < REJ_COUNT; r++)
        rejected += h->rejected[r];
    return json_pack(
        "{s:s, s:s, s:s, s:I, s:b, s:b,"
        " s:{s:I, s:I, s:I, s:i},"
        " s:{s:I, s:I, s:I, s:I, s:I},"
        " s:{s:I, s:I},"
        " s:{s:I, s:I, s:I, s:I, s:I}}",
        "node", h->node_id, "hub", h->hub_url,
        "ws", h->conf->ws_public_url,
        "time_ms", (json_int_t)(rs_time_now() / 1000),
        "draining", h->draining,
        "redis_up", backlog_ready(h->backlog) && backlog_tail_ready(h->backlog),
        "publish",
        "accepted", (json_int_t)h->accepted,
        "duplicates", (json_int_t)h->duplicates,
        "rejected", (json_int_t)rejected,
        "inflight", (int)h->inflight,
        "websocket",
        "open", (json_int_t)ws.open,
        "accepted", (json_int_t)ws.accepted,
        "frames", (json_int_t)ws.frames,
        "slow_drops", (json_int_t)ws.slow_drops,
        "closed_gap", (json_int_t)ws.closed_gap,
        "fanout",
        "dispatched", (json_int_t)fo.dispatched,
        "replayed", (json_int_t)fo.replayed,
        "websub",
        "subscriptions", (json_int_t)dl.subscriptions,
        "failing", (json_int_t)dl.failing,
        "delivered", (json_int_t)dl.delivered,
        "attempts_failed", (json_int_t)dl.attempts_failed,
        "lag_max_ms", (json_int_t)dl.lag_max_ms);
}

static void
ui_serve_node(struct hub *h, struct evhttp_request *req)
{
    json_t *o = ui_node_json(h);
    char *s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;

    json_decref(o);
    if (s == NULL) {
        reply_text(req, 500, "Internal Server Error", "error: out of memory");
        return;
    }
    rs_asset_reply_json(req, s, strlen(s));
    free(s);
}

bool
ui_handle(struct hub *h, struct evhttp_request *req, const char *path)
{
    static const char pfx[] = "/ui/";
    char origin[512];
    const char *name;

    if (strcmp(path, "/ui") == 0) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Location",
                          "/ui/");
        reply_text(req, 301, "Moved Permanently", "/ui/");
        return true;
    }
    if (strncmp(path, pfx, sizeof(pfx) - 1) != 0)
        return false;
    name = path + sizeof(pfx) - 1;
    if (name[0] == '\0')
        name = "index.html";
    if (strcmp(name, "node.json") == 0) {
        ui_serve_node(h, req);
        return true;
    }
    ui_ws_origin(h, origin, sizeof(origin));
    if (rs_asset_reply(req, hub_ui_assets, name, origin) != 0)
        reply_text(req, 404, "Not Found", "error: no such resource");
    return true;
}
