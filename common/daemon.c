/*
 * daemon.c - the daemons' common skeleton (rs_daemon.h): signal events on
 * the program's loop, the drain as a small state machine (running ->
 * draining -> stopped) ticking until the program says its work is done or
 * the drain time is up, the ready file, and the metrics listener.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RS_LOG_MODULE "daemon"
#include "rs_alloc.h"
#include "rs_daemon.h"
#include "rs_log.h"
#include "rs_metrics.h"
#include "rs_sock.h"
#include "rs_time.h"

#define DAEMON_TICK_MS 50

enum daemon_state { DAEMON_RUNNING, DAEMON_DRAINING, DAEMON_STOPPED };

struct rs_daemon {
    struct rs_daemon_opts o;
    enum daemon_state state;
    struct event *ev_sig[5];
    struct event *ev_tick;
    int64_t waited_ms;
};

static void
daemon_stop(struct rs_daemon *d, bool timed_out)
{
    if (d->state == DAEMON_STOPPED)
        return;
    d->state = DAEMON_STOPPED;
    if (d->ev_tick != NULL)
        event_del(d->ev_tick);
    d->o.on_stopped(d->o.ud, timed_out);
}

static void
on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct rs_daemon *d = arg;
    unsigned tick = d->o.drain_tick_ms ? d->o.drain_tick_ms : DAEMON_TICK_MS;

    (void)fd;
    (void)what;
    if (d->state != DAEMON_DRAINING)
        return;
    if (d->o.drained == NULL || d->o.drained(d->o.ud)) {
        daemon_stop(d, false);
        return;
    }
    d->waited_ms += tick;
    if (d->waited_ms >= d->o.drain_ms)
        daemon_stop(d, true);
}

void
rs_daemon_drain(struct rs_daemon *d)
{
    unsigned tick = d->o.drain_tick_ms ? d->o.drain_tick_ms : DAEMON_TICK_MS;
    struct timeval tv = rs_time_tv_ms(tick);

    if (d->state == DAEMON_DRAINING) {
        daemon_stop(d, true);         /* asked twice: now */
        return;
    }
    if (d->state != DAEMON_RUNNING)
        return;
    d->state = DAEMON_DRAINING;
    d->waited_ms = 0;
    if (d->o.on_drain != NULL)
        d->o.on_drain(d->o.ud);
    if (d->state != DAEMON_DRAINING)
        return;                       /* on_drain ended it */
    /* done at once? then no tick is needed */
    if (d->o.drained == NULL || d->o.drained(d->o.ud)) {
        daemon_stop(d, false);
        return;
    }
    if (event_add(d->ev_tick, &tv) != 0)
        daemon_stop(d, true);
}

static void
on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct rs_daemon *d = arg;

    (void)what;
    if (sig == SIGUSR1 || sig == SIGUSR2) {
        rs_log(RS_LOG_WARN, "%s ignored: SIGHUP reopens the log file and "
               "reloads, SIGTERM drains and stops",
               sig == SIGUSR1 ? "SIGUSR1" : "SIGUSR2");
        return;
    }
    if (sig == SIGHUP) {
        /* said, so that an operator (logrotate's postrotate) can see it
         * was taken; on the new file when it opened */
        if (rs_log_reopen() != 0)
            rs_log(RS_LOG_WARN, "SIGHUP: cannot reopen the log file %s: %s; "
                   "still writing to the one open", rs_log_path(),
                   strerror(errno));
        else if (rs_log_path() != NULL)
            rs_log(RS_LOG_INFO, "SIGHUP: log file %s reopened, reloading",
                   rs_log_path());
        else
            rs_log(RS_LOG_INFO, "SIGHUP: reloading");
        if (d->o.on_reload != NULL)
            d->o.on_reload(d->o.ud);
        return;
    }
    rs_daemon_drain(d);
}

struct event_base *
rs_daemon_base_new(void)
{
    struct event_config *cfg = event_config_new();
    if (cfg == NULL)
        return NULL;
    struct event_base *base =
        event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST) == 0
            ? event_base_new_with_config(cfg)
            : NULL;
    event_config_free(cfg);
    return base;
}

struct rs_daemon *
rs_daemon_new(const struct rs_daemon_opts *o)
{
    /* SIGUSR1 and SIGUSR2 only to be told: their default ends the
     * process, and a logrotate recipe copied from another daemon sends
     * SIGUSR1 */
    static const int sigs[5] = { SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2 };
    struct rs_daemon *d = rs_calloc(1, sizeof(*d));

    if (d == NULL)
        return NULL;
    d->o = *o;
    d->ev_tick = event_new(o->base, -1, EV_PERSIST, on_tick, d);
    if (d->ev_tick == NULL) {
        rs_daemon_free(d);
        return NULL;
    }
    for (int i = 0; i < 5; i++) {
        d->ev_sig[i] = evsignal_new(o->base, sigs[i], on_signal, d);
        if (d->ev_sig[i] == NULL || event_add(d->ev_sig[i], NULL) != 0) {
            rs_daemon_free(d);
            return NULL;
        }
    }
    return d;
}

void
rs_daemon_free(struct rs_daemon *d)
{
    if (d == NULL)
        return;
    for (int i = 0; i < 5; i++)
        if (d->ev_sig[i] != NULL)
            event_free(d->ev_sig[i]);
    if (d->ev_tick != NULL)
        event_free(d->ev_tick);
    rs_free(d);
}

bool
rs_daemon_draining(const struct rs_daemon *d)
{
    return d->state != DAEMON_RUNNING;
}

/* ------------------------------------------------------------ ready file */

void
rs_thread_signals_to_loop(void)
{
    sigset_t all;

    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
}

void
rs_tz_pin(void)
{
    if (getenv("TZ") == NULL)
        (void)setenv("TZ", ":/etc/localtime", 0);
}

int
rs_ready_file_write(const char *path, const char *json)
{
    char tmp[4200];
    FILE *f;

    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp)) {
        errno = ENAMETOOLONG;
        return RS_EIO;
    }
    if ((f = fopen(tmp, "w")) == NULL)
        return RS_EIO;
    fprintf(f, "%s\n", json);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        return RS_EIO;
    return 0;
}

/* ------------------------------------------------------ metrics listener */

struct rs_metrics_server {
    struct rs_metrics *m;
    struct evhttp *http;
    struct rs_httpguard *guard;
    int port;
    struct {
        const char *path;
        rs_metrics_server_route_cb cb;
        void *ud;
    } routes[RS_METRICS_SERVER_ROUTES];
    size_t nroutes;
};

/* The program's route for path, or -1. */
static int
metrics_route_find(const struct rs_metrics_server *ms, const char *path)
{
    for (size_t i = 0; i < ms->nroutes; i++) {
        const char *r = ms->routes[i].path;
        size_t n = strlen(r);
        if (r[n - 1] == '/' ? strncmp(path, r, n) == 0 : strcmp(path, r) == 0)
            return (int)i;
    }
    return -1;
}

static void
on_metrics_request(struct evhttp_request *req, void *arg)
{
    struct rs_metrics_server *ms = arg;
    struct evbuffer *out = evhttp_request_get_output_buffer(req);
    const char *uri = evhttp_request_get_uri(req);
    char *buf = NULL;
    size_t cap = 0, len = 0;

    if (uri == NULL || strcmp(uri, "/metrics") != 0) {
        const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
        const char *path = u != NULL ? evhttp_uri_get_path(u) : NULL;
        int r = path != NULL ? metrics_route_find(ms, path) : -1;
        if (r >= 0)
            ms->routes[r].cb(req, path, ms->routes[r].ud);
        else
            evhttp_send_error(req, HTTP_NOTFOUND, NULL);
        return;
    }
    if (rs_metrics_render(ms->m, &buf, &cap, &len) != 0) {
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        rs_free(buf);
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      RS_METRICS_CONTENT_TYPE);
    evbuffer_add(out, buf, len);
    rs_free(buf);
    evhttp_send_reply(req, HTTP_OK, "OK", NULL);
}

struct rs_metrics_server *
rs_metrics_server_new(struct event_base *base, struct rs_metrics *m,
                      const char *host, int port,
                      const struct rs_httpguard_limits *limits,
                      const char *prefix, char *err, size_t errsz)
{
    struct rs_metrics_server *ms = rs_calloc(1, sizeof(*ms));
    static const struct rs_httpguard_limits defaults =
        RS_HTTPGUARD_LIMITS_DEFAULT;
    struct evhttp_bound_socket *bs;

    if (ms == NULL || (ms->http = evhttp_new(base)) == NULL) {
        snprintf(err, errsz, "out of memory");
        rs_metrics_server_free(ms);
        return NULL;
    }
    ms->m = m;
    evhttp_set_max_headers_size(ms->http, 16 * 1024);
    evhttp_set_max_body_size(ms->http, 0);
    evhttp_set_allowed_methods(ms->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    struct rs_httpguard_opts go = {
        .base = base,
        .http = ms->http,
        .name = "metrics",
        .limits = limits != NULL ? *limits : defaults,
        .on_request = on_metrics_request,
        .request_arg = ms,
        .metrics = m,
        .metrics_prefix = prefix,
        .on_log = rs_httpguard_log_warn,
    };
    if (rs_httpguard_listen(&go, host, (unsigned)port, &ms->guard, &bs,
                            &ms->port, err, errsz) != 0) {
        rs_metrics_server_free(ms);
        return NULL;
    }
    return ms;
}

int
rs_metrics_server_route(struct rs_metrics_server *ms, const char *path,
                        rs_metrics_server_route_cb cb, void *ud)
{
    if (path == NULL || path[0] != '/' || cb == NULL)
        return RS_EINVAL;
    if (ms->nroutes == RS_METRICS_SERVER_ROUTES)
        return RS_ETOOBIG;
    ms->routes[ms->nroutes].path = path;
    ms->routes[ms->nroutes].cb = cb;
    ms->routes[ms->nroutes].ud = ud;
    ms->nroutes++;
    return 0;
}

int
rs_metrics_server_port(const struct rs_metrics_server *ms)
{
    return ms->port;
}

void
rs_metrics_server_free(struct rs_metrics_server *ms)
{
    if (ms == NULL)
        return;
    if (ms->http != NULL)
        evhttp_free(ms->http);
    rs_httpguard_free(ms->guard);     /* after evhttp_free */
    rs_free(ms);
}
