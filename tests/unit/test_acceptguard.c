/* test_acceptguard.c - a listener out of descriptors (hub/acceptguard.c):
 * it pauses 100 ms per failure instead of spinning on accept(), counts the
 * failures, and takes the connections that waited in the kernel's backlog
 * once descriptors are free again. A real listener on loopback, clients
 * in a child process, RLIMIT_NOFILE lowered for the test's duration. */
#include "testutil.h"
#include "tu_httpd.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acceptguard.h"

#define CLIENTS 10

/* Kept outside the test so that a failed assertion, which leaves the test
 * by longjmp, does not leave the next test without descriptors. */
static struct rlimit saved_limit;
static bool limit_lowered;

static int
limit_restore(void **state)
{
    (void)state;
    if (limit_lowered && setrlimit(RLIMIT_NOFILE, &saved_limit) != 0)
        return -1;
    limit_lowered = false;
    return 0;
}

struct fx {
    struct tu_loop loop;
    struct evconnlistener *l;
    int fds[CLIENTS];
    unsigned accepted;
};

static void
on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
          int len, void *arg)
{
    (void)l;
    (void)sa;
    (void)len;
    struct fx *f = arg;
    if (f->accepted < CLIENTS)
        f->fds[f->accepted++] = fd;     /* kept open: they use up the limit */
    else
        close(fd);
}

/* The highest descriptor open now. */
static int
highest_fd(void)
{
    int hi = 2;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int fd = (int)strtol(e->d_name, NULL, 10);
        if (fd > hi && fd != dirfd(d))
            hi = fd;
    }
    closedir(d);
    return hi;
}

/* A child that opens n connections to port and holds them until killed. */
static pid_t
clients_start(uint16_t port, int n)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);   /* a failed test skips its kill */
        struct sockaddr_in sin = { .sin_family = AF_INET,
                                   .sin_port = htons(port) };
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        for (int i = 0; i < n; i++) {
            int s = socket(AF_INET, SOCK_STREAM, 0);
            if (s < 0 || connect(s, (struct sockaddr *)&sin, sizeof(sin)) != 0)
                _exit(1);
        }
        for (;;)
            pause();
    }
    return pid;
}

static void
test_pauses_when_out_of_descriptors(void **state)
{
    (void)state;
    struct fx f = { .accepted = 0 };
    tu_loop_init(&f.loop);
    struct sockaddr_in sin = { .sin_family = AF_INET };
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    f.l = evconnlistener_new_bind(f.loop.base, on_accept, &f,
                                  LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE,
                                  64, (struct sockaddr *)&sin, sizeof(sin));
    assert_non_null(f.l);
    struct sockaddr_in bound;
    socklen_t blen = sizeof(bound);
    assert_int_equal(getsockname(evconnlistener_get_fd(f.l),
                                 (struct sockaddr *)&bound, &blen), 0);
    struct acceptguard *g = acceptguard_new(f.loop.base, f.l, "test");
    assert_non_null(g);

    /* room for two more descriptors, then EMFILE: the limit a little above
     * what is open, every free number below it taken by a filler, two
     * given back. The +3 matters: a process whose descriptors have no
     * holes (a fresh CI runner) would otherwise have nothing to fill */
    pid_t kids = clients_start(ntohs(bound.sin_port), CLIENTS);
    struct rlimit low;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved_limit), 0);
    limit_lowered = true;
    low = saved_limit;
    low.rlim_cur = (rlim_t)highest_fd() + 3;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    int fillers[4096];
    size_t nfill = 0;
    while (nfill < 4096 && (fillers[nfill] = dup(0)) >= 0)
        nfill++;
    assert_true(nfill >= 2 && nfill < 4096);
    close(fillers[--nfill]);
    close(fillers[--nfill]);

    tu_loop_run_for(&f.loop, 1000);
    unsigned accepted_low = f.accepted;
    uint64_t refused = acceptguard_refused(g);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved_limit), 0);
    limit_lowered = false;
    for (size_t i = 0; i < nfill; i++)
        close(fillers[i]);
    /* two taken; the rest refused about once per pause, not in a spin
     * (an unguarded listener fails accept() thousands of times a second) */
    assert_int_equal(accepted_low, 2);
    assert_true(refused >= 1);
    assert_true(refused <= 15);

    /* descriptors back: those that waited in the backlog are taken */
    TU_LOOP_UNTIL(&f.loop, f.accepted == CLIENTS, 3000);
    assert_int_equal(acceptguard_refused(g), refused);

    kill(kids, SIGKILL);
    waitpid(kids, NULL, 0);
    for (unsigned i = 0; i < f.accepted; i++)
        close(f.fds[i]);
    acceptguard_free(g);
    evconnlistener_free(f.l);
    tu_loop_cleanup(&f.loop);
}

static void
test_guards_are_bounded(void **state)
{
    (void)state;
    struct tu_loop loop;
    tu_loop_init(&loop);
    struct sockaddr_in sin = { .sin_family = AF_INET };
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct evconnlistener *l = evconnlistener_new_bind(
        loop.base, on_accept, NULL, LEV_OPT_CLOSE_ON_FREE, 8,
        (struct sockaddr *)&sin, sizeof(sin));
    assert_non_null(l);
    struct acceptguard *g[9];
    int made = 0;
    for (int i = 0; i < 9; i++)
        if ((g[i] = acceptguard_new(loop.base, l, "bounded")) != NULL)
            made++;
    assert_int_equal(made, 8);          /* a ninth is refused, not overrun */
    assert_null(g[8]);
    assert_int_equal(acceptguard_refused(NULL), 0);
    for (int i = 0; i < 8; i++)
        acceptguard_free(g[i]);
    acceptguard_free(NULL);
    evconnlistener_free(l);
    tu_loop_cleanup(&loop);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_pauses_when_out_of_descriptors,
                                  limit_restore),
        cmocka_unit_test(test_guards_are_bounded),
    };
    return cmocka_run_group_tests_name("acceptguard", tests, NULL, NULL);
}
