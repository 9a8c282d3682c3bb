/*
 * tu_hub.h - a REAL rshub and its private redis-server for the unit tests
 * that need a hub: both started from this build tree on loopback in a temp
 * dir, waited for (the hub's ready file), and stopped by PID (SIGTERM,
 * then SIGKILL). Also a blocking publish, for tests that only need
 * notifications to exist. What the hub is asked and what it answers is
 * the test's business.
 */
#ifndef RS_TU_HUB_H
#define RS_TU_HUB_H

#include <stddef.h>
#include <sys/types.h>

#include "testutil.h"
#include "tu_proc.h"

#define TU_HUB_RSHUB RS_TEST_BUILD_DIR "/hub/rshub"

struct tu_hub {
    char *dir;                  /* temp dir: Redis's socket, logs, ready
                                   files; removed by tu_hub_free */
    struct tu_redis redis;      /* its private Redis */
    pid_t hub;                  /* the hub tu_hub_new started */
    int hub_port;               /* its HTTP port */
    int ws_port;                /* its WebSocket port */
    char hub_url[64];           /* http://127.0.0.1:HTTP/hub */
    int nstarts;                /* hubs started: names their ready files */
};

/* Start redis-server and one rshub on it (tu_hub_spawn: any port, Redis
 * prefix "rshub:", args added). Fails the test if either does not come
 * up. args: more rshub options, NULL-ended, or NULL. */
struct tu_hub *tu_hub_new(const char *const *args);

/* Stop the hub and Redis (by PID), remove the temp dir. NULL ok. */
void tu_hub_free(struct tu_hub *g);

/* Another rshub on g's Redis: open mode, on 127.0.0.1:port (0: a port of
 * the kernel's choosing; its WebSocket port is then the kernel's too),
 * loopback callbacks allowed, leases from 1 s, drain 1 s, its own Redis
 * key prefix (two hubs with one prefix are one cluster), args added.
 * Returns its HTTP port; *pid is the test's to tu_proc_stop; *ws_port
 * (may be NULL) its WebSocket port. */
int tu_hub_spawn(struct tu_hub *g, int port, const char *prefix,
                 const char *const *args, pid_t *pid, int *ws_port);

/* Publish body (a notification document) for topic to g's hub, blocking
 * (the hub is another process). Returns the HTTP status; the hub's
 * X-Hub-Id into id and X-Hub-Channel (the channel's ws:// URI) into
 * channel, each "" when absent (either may be NULL). */
long tu_hub_publish(const struct tu_hub *g, const char *topic,
                    const char *body, size_t len, char *id, size_t idsz,
                    char *channel, size_t chsz);

#endif
