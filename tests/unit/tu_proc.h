/*
 * tu_proc.h - processes the unit tests start: a program spawned with its
 * output appended to a log and tied to the test's life (it gets SIGTERM if
 * the test dies: a crash skips every teardown), stopped by PID; and a
 * private redis-server on a unix socket in a temp dir (tu_redis), for the
 * tests of what keeps its state in Redis. Nothing here is global.
 */
#ifndef RS_TU_PROC_H
#define RS_TU_PROC_H

#include <sys/types.h>

#include "testutil.h"

/* argv (NULL-ended; argv[0] looked up in PATH) with stdin from /dev/null
 * and stdout, stderr appended to log. The PID, or -1. */
pid_t tu_proc_spawn(const char *const argv[], const char *log);

/* SIGTERM, then SIGKILL after 5 s, and reap: only the PID given (a
 * process the test started). pid <= 0 is a no-op. */
void tu_proc_stop(pid_t pid);

struct tu_redis {
    char *dir;                  /* temp dir: socket, log (tu_rmtree'd) */
    char sock[200];
    char url[220];              /* unix://SOCK, for the Redis link's url */
    pid_t pid;                  /* the redis-server we started; 0: none */
};

/* Start redis-server (on PATH: a declared dependency) in a new temp dir;
 * fails the test when it does not accept within 10 s. */
void tu_redis_start(struct tu_redis *r);
/* Stop it by PID, remove the temp dir. Never started: a no-op. */
void tu_redis_stop(struct tu_redis *r);

#endif
