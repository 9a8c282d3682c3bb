/*
 * tu_redis.h - a private redis-server for the unit tests of the hub's
 * stores (subs, deliver, websub): started in a temp dir on a unix socket
 * only, waited for, stopped by its PID. Header-only (static functions), so
 * that a test file needs nothing but this include; it belongs in
 * rs_testutil beside tu_httpd once the test build lists it.
 */
#ifndef RS_TU_REDIS_H
#define RS_TU_REDIS_H

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

struct tu_redis {
    char *dir;                  /* temp dir: socket, log (tu_rmtree'd) */
    char sock[200];
    char url[220];              /* unix://SOCK, for backlog_opts.redis_url */
    pid_t pid;                  /* the redis-server we started; 0: none */
};

static inline bool
tu_redis_connects(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    size_t n = strlen(path);
    bool ok;
    int fd;

    if (n >= sizeof(sa.sun_path))
        return false;
    memcpy(sa.sun_path, path, n + 1);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* Start redis-server (it must be on PATH: a declared dependency); fails
 * the test when it does not accept within 10 s. */
static inline void
tu_redis_start(struct tu_redis *r)
{
    extern char **environ;
    char log[300];
    posix_spawn_file_actions_t fa;

    memset(r, 0, sizeof(*r));
    r->dir = tu_mkdtemp();
    snprintf(r->sock, sizeof(r->sock), "%s/redis.sock", r->dir);
    snprintf(r->url, sizeof(r->url), "unix://%s", r->sock);
    snprintf(log, sizeof(log), "%s/redis.log", r->dir);
    const char *args[] = { "redis-server", "--port", "0", "--unixsocket",
                           r->sock, "--unixsocketperm", "700", "--dir", r->dir,
                           "--save", "", "--appendonly", "no", "--daemonize",
                           "no", NULL };
    char *argv[sizeof(args) / sizeof(args[0])];
    /* posix_spawn's argv is not const-qualified, though never written */
    memcpy(argv, args, sizeof(args));
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND,
                                     0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    int rc = posix_spawnp(&r->pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        fail_msg("cannot start redis-server: %s", strerror(rc));
    for (int i = 0; i < 200 && !tu_redis_connects(r->sock); i++)
        usleep(50000);
    if (!tu_redis_connects(r->sock))
        fail_msg("redis-server did not start (see %s)", log);
}

/* SIGTERM (then SIGKILL after 5 s) the server we started, reap it, remove
 * the temp dir. A fixture never started is a no-op. */
static inline void
tu_redis_stop(struct tu_redis *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGTERM);
        int i;
        for (i = 0; i < 100 && waitpid(r->pid, NULL, WNOHANG) != r->pid; i++)
            usleep(50000);
        if (i == 100) {
            kill(r->pid, SIGKILL);
            waitpid(r->pid, NULL, 0);
        }
        r->pid = 0;
    }
    if (r->dir != NULL) {
        tu_rmtree(r->dir);
        free(r->dir);
        r->dir = NULL;
    }
}

#endif
