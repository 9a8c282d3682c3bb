/*
 * statusjson.c - rssub's dashboard data and page (statusjson.h). Each
 * Capability List's "mode" is the one word an operator looks for, made
 * from the session's phase and transport: pulling (a pull of it runs),
 * live (its push channel is up), reconnecting (the WebSocket channel is
 * down, within --push-timeout), polling, waiting. The ring of recent
 * changes is the only state kept here; everything else is read per
 * request (the ledger's counts are cached by the session).
 */
#include <event2/http.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "apply.h"
#include "ledger.h"
#include "rs_alloc.h"
#include "rs_asset.h"
#include "rs_time.h"
#include "session.h"
#include "statusjson.h"

extern const struct rs_asset sub_ui_assets[];

struct recent {
    rs_time_t at;
    int outcome;
    char *uri;
    char *what;
};

struct statusjson {
    struct session *s;
    struct ledger *l;
    struct recent ring[STATUSJSON_RECENT];
    size_t head;                   /* the next slot written */
    size_t n;                      /* slots used */
    uint64_t counts[APPLY_OUTCOMES];
};

struct statusjson *
statusjson_new(struct session *s, struct ledger *l)
{
    struct statusjson *sj = rs_calloc(1, sizeof(*sj));

    if (sj == NULL)
        return NULL;
    sj->s = s;
    sj->l = l;
    return sj;
}

void
statusjson_free(struct statusjson *sj)
{
    if (sj == NULL)
        return;
    for (size_t i = 0; i < STATUSJSON_RECENT; i++) {
        rs_free(sj->ring[i].uri);
        rs_free(sj->ring[i].what);
    }
    rs_free(sj);
}

static char *
sj_strdup(const char *s)
{
    size_t n = strlen(s != NULL ? s : "") + 1;
    char *d = rs_malloc(n);

    if (d != NULL)
        memcpy(d, s != NULL ? s : "", n);
    return d;
}

void
statusjson_note(struct statusjson *sj, const char *uri, int outcome,
                const char *what)
{
    struct recent *r = &sj->ring[sj->head];

    if (outcome < 0 || outcome >= APPLY_OUTCOMES)
        return;
    sj->counts[outcome]++;
    rs_free(r->uri);
    rs_free(r->what);
    r->at = rs_time_now();
    r->outcome = outcome;
    r->uri = sj_strdup(uri);
    r->what = sj_strdup(what);
    sj->head = (sj->head + 1) % STATUSJSON_RECENT;
    if (sj->n < STATUSJSON_RECENT)
        sj->n++;
}

/* ------------------------------------------------------------ render */

static const char *
sj_mode(const struct session_list_info *li)
{
    if (strcmp(li->phase, "waiting") != 0)
        return "pulling";
    if (strcmp(li->transport, "websocket") == 0)
        return li->channel_up ? "live" : "reconnecting";
    if (strcmp(li->transport, "websub") == 0)
        return li->websub_failing ? "reconnecting" : "live";
    if (strcmp(li->transport, "poll") == 0)
        return "polling";
    return "waiting";
}

static json_t *
sj_time(rs_time_t t)
{
    return t == RS_TIME_NONE ? json_null() : json_integer(t / 1000);
}

static int
on_pos(void *ud, const struct ledger_pos *p)
{
    json_t *arr = ud;

    if (json_array_size(arr) >= STATUSJSON_POSITIONS)
        return 1;
    json_array_append_new(arr, json_pack(
        "{s:s, s:o, s:o, s:o}", "channel", p->channel,
        "id", p->id != NULL ? json_string(p->id) : json_null(),
        "change_ms", sj_time(p->dt), "updated_ms", sj_time(p->updated_at)));
    return 0;
}

static int
on_failed(void *ud, const struct ledger_todo *t)
{
    json_t *arr = ud;

    if (json_array_size(arr) >= STATUSJSON_FAILED)
        return 1;
    json_array_append_new(arr, json_pack(
        "{s:s, s:s, s:i, s:o}", "uri", t->uri,
        "error", t->last_error != NULL ? t->last_error : "",
        "attempts", t->attempts, "failed_ms", sj_time(t->not_before)));
    return 0;
}

int
statusjson_render(struct statusjson *sj, char **out)
{
    struct session_info si;
    struct session_list_info li;
    json_t *o, *lists, *pos, *failed, *recent, *counts;

    session_info(sj->s, &si);
    o = json_pack("{s:s, s:s, s:I, s:o, s:I, s:I, s:f}",
                  "source", si.source, "state", si.state,
                  "time_ms", (json_int_t)(rs_time_now() / 1000),
                  "pulling", si.pulling != NULL ? json_string(si.pulling)
                                                : json_null(),
                  "pending", (json_int_t)si.pending,
                  "failed", (json_int_t)si.failed, "lag_s", si.lag_s);
    lists = json_array();
    pos = json_array();
    failed = json_array();
    recent = json_array();
    counts = json_object();
    if (o == NULL || lists == NULL || pos == NULL || failed == NULL ||
        recent == NULL || counts == NULL) {
        json_decref(o);
        json_decref(lists);
        json_decref(pos);
        json_decref(failed);
        json_decref(recent);
        json_decref(counts);
        return RS_ENOMEM;
    }
    for (size_t i = 0; session_list_info(sj->s, i, &li) == 0; i++)
        json_array_append_new(lists, json_pack(
            "{s:s, s:s, s:s, s:s, s:b, s:b, s:b, s:s, s:s, s:o}", "caplist",
            li.caplist, "mode", sj_mode(&li), "phase", li.phase,
            "transport", li.transport, "channel_up", li.channel_up,
            "websub_failing", li.websub_failing, "baselined", li.baselined,
            "push", li.push, "reason", li.why,
            "since_ms", sj_time(li.since)));
    /* A state that cannot be read leaves its list short and says why,
     * rather than leave the page empty (1: a list at its cap). */
    int rc = ledger_pos_each(sj->l, on_pos, pos);
    if (rc >= 0)
        rc = ledger_todo_each_failed(sj->l, on_failed, failed);
    if (rc < 0)
        json_object_set_new(o, "state_error",
                            json_string(ledger_errstr(sj->l)));
    for (size_t k = 0; k < sj->n; k++) {
        const struct recent *r =
            &sj->ring[(sj->head + STATUSJSON_RECENT - 1 - k) % STATUSJSON_RECENT];
        json_array_append_new(recent, json_pack(
            "{s:I, s:s, s:s, s:s}", "at_ms", (json_int_t)(r->at / 1000),
            "outcome", apply_outcome_name(r->outcome),
            "uri", r->uri != NULL ? r->uri : "",
            "what", r->what != NULL ? r->what : ""));
    }
    for (int k = 0; k < APPLY_OUTCOMES; k++)
        json_object_set_new(counts, apply_outcome_name(k),
                            json_integer((json_int_t)sj->counts[k]));
    json_object_set_new(o, "lists", lists);
    json_object_set_new(o, "positions", pos);
    json_object_set_new(o, "failed_resources", failed);
    json_object_set_new(o, "recent", recent);
    json_object_set_new(o, "applied", counts);
    *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return *out != NULL ? 0 : RS_ENOMEM;
}

/* ------------------------------------------------------------- route */

void
statusjson_route(struct evhttp_request *req, const char *path, void *ud)
{
    static const char pfx[] = "/ui/";
    struct statusjson *sj = ud;
    char *json = NULL;

    if (strcmp(path, "/status.json") == 0) {
        if (statusjson_render(sj, &json) != 0) {
            evhttp_send_error(req, HTTP_INTERNAL, NULL);
            return;
        }
        rs_asset_reply_json(req, json, strlen(json));
        free(json);
        return;
    }
    if (strcmp(path, "/ui") == 0 || strncmp(path, pfx, sizeof(pfx) - 1) != 0) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Location",
                          "/ui/");
        evhttp_send_reply(req, 301, "Moved Permanently", NULL);
        return;
    }
    path += sizeof(pfx) - 1;
    if (rs_asset_reply(req, sub_ui_assets, path[0] ? path : "index.html",
                       NULL) != 0)
        evhttp_send_error(req, HTTP_NOTFOUND, NULL);
}
