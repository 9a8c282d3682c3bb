/* tu_proc.c - processes the unit tests start (tu_proc.h): spawned with
 * their output in a log and tied to the test's life, stopped by PID; and a
 * private redis-server on a unix socket in a temp dir. */
#include "tu_proc.h"

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* argv run with stdin from /dev/null and stdout, stderr appended to log;
 * the PID, or -1. The child gets SIGTERM when the test dies (a crash, an
 * abort under ASan skips every teardown): a hub or Redis must not outlive
 * the test that started it. Only async-signal-safe calls after fork. */
pid_t
tu_proc_spawn(const char *const argv[], const char *log)
{
    char *av[64];
    size_t n = 0;
    pid_t parent = getpid(), pid;
    int fd;

    /* execvp's argv is not const-qualified, though never written */
    while (argv[n] != NULL && n + 1 < sizeof(av) / sizeof(av[0]))
        n++;
    memcpy(av, argv, n * sizeof(av[0]));
    av[n] = NULL;
    pid = fork();
    if (pid != 0)
        return pid;
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
        _exit(127);
    if ((fd = open("/dev/null", O_RDONLY)) < 0 || dup2(fd, 0) < 0)
        _exit(127);
    close(fd);
    if ((fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600)) < 0 ||
        dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
        _exit(127);
    close(fd);
    execvp(av[0], av);
    _exit(127);
}

void
tu_proc_stop(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    for (int i = 0; i < 100; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        usleep(50000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* ---------------------------------------------------------------- redis */

static bool
unix_connects(const char *path)
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

void
tu_redis_start(struct tu_redis *r)
{
    char log[300];

    memset(r, 0, sizeof(*r));
    r->dir = tu_mkdtemp();
    snprintf(r->sock, sizeof(r->sock), "%s/redis.sock", r->dir);
    snprintf(r->url, sizeof(r->url), "unix://%s", r->sock);
    snprintf(log, sizeof(log), "%s/redis.log", r->dir);
    const char *argv[] = { "redis-server", "--port", "0", "--unixsocket",
                           r->sock, "--unixsocketperm", "700", "--dir", r->dir,
                           "--save", "", "--appendonly", "no", "--daemonize",
                           "no", NULL };
    r->pid = tu_proc_spawn(argv, log);
    if (r->pid <= 0)
        fail_msg("cannot start redis-server");
    for (int i = 0; i < 200 && !unix_connects(r->sock); i++)
        usleep(50000);
    if (!unix_connects(r->sock))
        fail_msg("redis-server did not start (see %s)", log);
}

void
tu_redis_stop(struct tu_redis *r)
{
    tu_proc_stop(r->pid);
    r->pid = 0;
    if (r->dir != NULL) {
        tu_rmtree(r->dir);
        free(r->dir);
        r->dir = NULL;
    }
}
