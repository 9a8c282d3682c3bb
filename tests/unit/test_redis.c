/* test_redis.c - the Redis link (rs_redis.h) against private redis-server
 * processes started and stopped by each test: unix and TCP URLs, the
 * handshake (AUTH, SELECT, SETNAME), pipelining, lost servers, timeouts,
 * reconnects, cancellation on free, limits and URL/allocation failures.
 * Every callback is counted; every test ends with nothing on the loop. */
#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rs_redis.h"

#define HIST_MAX 256
#define WATCHDOG_MS 10000u

struct fixture {
    struct event_base *base;
    struct event *watchdog;
    bool expired;
    char *dir;
    char sock[256];
    char url[512];
    int port;                   /* redis-server TCP port; 0 = unix only */
    const char *extra[4];       /* more redis-server arguments */
    pid_t pid;                  /* our redis-server, 0 when none */
    struct rs_redis *r, *r2;

    /* on_state of f->r */
    unsigned n_state;
    enum rs_redis_state hist[HIST_MAX];
    uint64_t hist_us[HIST_MAX];
    char last_err[256];

    /* reply callbacks, by rc */
    unsigned n_ok, n_eio, n_timedout, n_canceled, n_other;
    int last_type;
    long long last_int;
    char *last_str;             /* malloc'ed copy, binary-safe */
    size_t last_len;
    unsigned seq, out_of_order; /* pipeline: INCR results in order */
    unsigned n2_canceled;       /* callbacks of f->r2 */
};

/* ---------------------------------------------------------------- helpers */

static uint64_t
now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void
sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static void
on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    struct fixture *f = arg;
    (void)fd;
    (void)what;
    f->expired = true;
}

static void
wd_start(struct fixture *f, unsigned ms)
{
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    f->expired = false;
    assert_int_equal(event_add(f->watchdog, &tv), 0);
}

static void
wd_stop(struct fixture *f)
{
    event_del(f->watchdog);
}

/* Run the loop until cond holds; the watchdog turns a hang into a failure. */
#define LOOP_UNTIL(f, cond, ms)                                             \
    do {                                                                    \
        wd_start((f), (ms));                                                \
        while (!(cond) && !(f)->expired)                                    \
            event_base_loop((f)->base, EVLOOP_ONCE);                        \
        wd_stop(f);                                                         \
        assert_true(cond);                                                  \
    } while (0)

/* Run the loop for ms, whatever happens. */
static void
run_for(struct fixture *f, unsigned ms)
{
    wd_start(f, ms);
    while (!f->expired)
        event_base_loop(f->base, EVLOOP_ONCE);
    wd_stop(f);
}

static void
assert_loop_empty(struct fixture *f)
{
    assert_int_equal(event_base_get_num_events(f->base,
                                               EVENT_BASE_COUNT_ADDED), 0);
    assert_int_equal(event_base_loop(f->base, EVLOOP_NONBLOCK), 1);
}

static unsigned
n_replies(const struct fixture *f)
{
    return f->n_ok + f->n_eio + f->n_timedout + f->n_canceled + f->n_other;
}

/* ------------------------------------------------------ private redis-server */

static bool
unix_accepts(const char *path)
{
    struct sockaddr_un sa;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    bool ok;

    assert_true(fd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    assert_true(strlen(path) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, path, strlen(path) + 1);
    ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

/* A TCP port on 127.0.0.1 that was free a moment ago. */
static int
free_port(void)
{
    int port;
    close(tu_loopback_socket(0, &port));
    return port;
}

/* Start redis-server in f->dir (unix socket f->sock, TCP f->port if set)
 * and wait until it accepts. redis-server is a declared dependency
 * (deploy/install-deps.sh): when it cannot be run the test fails. */
static void
srv_start(struct fixture *f)
{
    char port[16], logf[4096];
    char *argv[40];
    const char *args[40];
    int n = 0, i, st;
    uint64_t give_up = now_us() + 10000000u;

    snprintf(port, sizeof(port), "%d", f->port);
    snprintf(logf, sizeof(logf), "%s/redis.log", f->dir);
    args[n++] = "redis-server";
    args[n++] = "--port";
    args[n++] = port;
    args[n++] = "--bind";
    args[n++] = "127.0.0.1";
    args[n++] = "--unixsocket";
    args[n++] = f->sock;
    args[n++] = "--save";
    args[n++] = "";
    args[n++] = "--appendonly";
    args[n++] = "no";
    args[n++] = "--dir";
    args[n++] = f->dir;
    args[n++] = "--logfile";
    args[n++] = logf;
    args[n++] = "--enable-debug-command";
    args[n++] = "local";
    for (i = 0; i < 4 && f->extra[i] != NULL; i++)
        args[n++] = f->extra[i];
    for (i = 0; i < n; i++) {
        argv[i] = strdup(args[i]);
        assert_non_null(argv[i]);
    }
    argv[n] = NULL;

    f->pid = fork();
    assert_true(f->pid >= 0);
    if (f->pid == 0) {
        execvp("redis-server", argv);
        _exit(127);
    }
    for (i = 0; i < n; i++)
        free(argv[i]);

    while (!unix_accepts(f->sock)) {
        if (waitpid(f->pid, &st, WNOHANG) == f->pid) {
            f->pid = 0;
            fail_msg("redis-server did not start (exit %d): it must be on "
                     "PATH (deploy/install-deps.sh installs it); log %s",
                     WIFEXITED(st) ? WEXITSTATUS(st) : -1, logf);
        }
        if (now_us() > give_up)
            fail_msg("redis-server did not accept on %s within 10 s", f->sock);
        sleep_ms(5);
    }
}

/* Only ever kills the redis-server this fixture started. */
static void
srv_stop(struct fixture *f)
{
    if (f->pid > 0) {
        kill(f->pid, SIGKILL);
        waitpid(f->pid, NULL, 0);
        f->pid = 0;
    }
}

static int
setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return -1;
    f->base = event_base_new();
    if (f->base == NULL)
        return -1;
    f->watchdog = evtimer_new(f->base, on_watchdog, f);
    if (f->watchdog == NULL)
        return -1;
    f->dir = tu_mkdtemp();
    snprintf(f->sock, sizeof(f->sock), "%s/redis.sock", f->dir);
    snprintf(f->url, sizeof(f->url), "unix://%s", f->sock);
    f->last_type = -1;
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fixture *f = *state;

    /* After a failed assertion the links may still be open. */
    rs_redis_free(f->r);
    rs_redis_free(f->r2);
    srv_stop(f);
    event_free(f->watchdog);
    event_base_free(f->base);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f->last_str);
    free(f);
    return 0;
}

/* -------------------------------------------------------------- callbacks */

static void
on_state(void *ud, enum rs_redis_state st, const char *errstr)
{
    struct fixture *f = ud;

    if (f->n_state < HIST_MAX) {
        f->hist[f->n_state] = st;
        f->hist_us[f->n_state] = now_us();
    }
    f->n_state++;
    if (st == RS_REDIS_DOWN) {
        assert_non_null(errstr);
        snprintf(f->last_err, sizeof(f->last_err), "%s", errstr);
    } else {
        assert_null(errstr);
    }
}

static void on_reply(void *ud, int rc, const redisReply *reply);

/* Like on_state, and sends a PING the moment the link is READY (as the hub
 * loads its scripts): that runs inside hiredis's handshake callback. */
static void
on_state_ping(void *ud, enum rs_redis_state st, const char *errstr)
{
    struct fixture *f = ud;
    const char *argv[] = { "PING" };

    on_state(ud, st, errstr);
    if (st == RS_REDIS_READY)
        assert_int_equal(rs_redis_cmd(f->r, 0, on_reply, f, 1, argv, NULL),
                         0);
}

static void
count_rc(struct fixture *f, int rc, const redisReply *reply)
{
    switch (rc) {
    case 0:
        assert_non_null(reply);
        f->n_ok++;
        break;
    case RS_EIO:
        f->n_eio++;
        break;
    case RS_ETIMEDOUT:
        f->n_timedout++;
        break;
    case RS_ECANCELED:
        f->n_canceled++;
        break;
    default:
        f->n_other++;
        break;
    }
    if (rc != 0)
        assert_null(reply);
}

/* Counts, and keeps a copy of the last reply. */
static void
on_reply(void *ud, int rc, const redisReply *reply)
{
    struct fixture *f = ud;

    count_rc(f, rc, reply);
    if (reply == NULL)
        return;
    f->last_type = reply->type;
    f->last_int = reply->integer;
    free(f->last_str);
    f->last_str = NULL;
    f->last_len = 0;
    if (reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_STATUS
        || reply->type == REDIS_REPLY_ERROR) {
        f->last_str = malloc(reply->len + 1);
        assert_non_null(f->last_str);
        memcpy(f->last_str, reply->str, reply->len);
        f->last_str[reply->len] = '\0';
        f->last_len = reply->len;
    }
}

static void
on_incr(void *ud, int rc, const redisReply *reply)
{
    struct fixture *f = ud;

    count_rc(f, rc, reply);
    f->seq++;
    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER ||
        reply->integer != (long long)f->seq)
        f->out_of_order++;
}

static void
on_reply2(void *ud, int rc, const redisReply *reply)
{
    struct fixture *f = ud;

    assert_null(reply);
    if (rc == RS_ECANCELED)
        f->n2_canceled++;
    else
        f->n_other++;
}

/* Frees the other link from inside this link's reply callback. */
static void
on_reply_free_r2(void *ud, int rc, const redisReply *reply)
{
    struct fixture *f = ud;

    count_rc(f, rc, reply);
    rs_redis_free(f->r2);
    f->r2 = NULL;
    /* r2's callbacks ran before rs_redis_free() returned. */
    assert_int_equal(f->n2_canceled, 3);
}

/* A's first reply frees B; B's cancelled callback frees A in turn, while
 * A's hiredis context is still inside this very callback. */
static void
on_reply_free_r2_chain(void *ud, int rc, const redisReply *reply)
{
    struct fixture *f = ud;

    count_rc(f, rc, reply);
    rs_redis_free(f->r2);
    f->r2 = NULL;
    assert_null(f->r);
    assert_int_equal(f->n2_canceled, 1);
    assert_int_equal(f->n_canceled, 2);
}

static void
on_reply2_free_r(void *ud, int rc, const redisReply *reply)
{
    struct fixture *f = ud;

    assert_null(reply);
    assert_int_equal(rc, RS_ECANCELED);
    f->n2_canceled++;
    rs_redis_free(f->r);
    f->r = NULL;
}

/* ----------------------------------------------------------- link helpers */

static struct rs_redis_opts
opts_for(struct fixture *f, const char *url)
{
    struct rs_redis_opts o;

    memset(&o, 0, sizeof(o));
    o.url = url;
    o.on_state = on_state;
    o.ud = f;
    return o;
}

static struct rs_redis *
link_new_state(struct fixture *f, const struct rs_redis_opts *o,
               enum rs_redis_state first)
{
    const char *err = "unset";
    struct rs_redis *r = rs_redis_new(f->base, o, &err);

    if (r == NULL)
        fail_msg("rs_redis_new(%s): %s", o->url, err ? err : "(null)");
    assert_null(err);
    assert_int_equal(rs_redis_state(r), first);
    return r;
}

static struct rs_redis *
link_new(struct fixture *f, const struct rs_redis_opts *o)
{
    return link_new_state(f, o, RS_REDIS_CONNECTING);
}

static void
cmd(struct rs_redis *r, void *ud, rs_redis_reply_cb cb, unsigned timeout,
    int argc, const char **argv)
{
    assert_int_equal(rs_redis_cmd(r, timeout, cb, ud, argc, argv, NULL), 0);
}

/* Send one command on f->r and wait for its callback. */
static void
roundtrip(struct fixture *f, int argc, const char **argv, const size_t *lens)
{
    unsigned before = n_replies(f);

    assert_int_equal(rs_redis_cmd(f->r, 0, on_reply, f, argc, argv, lens), 0);
    LOOP_UNTIL(f, n_replies(f) == before + 1, WATCHDOG_MS);
}

static void
ping_ok(struct fixture *f)
{
    const char *argv[] = { "PING" };
    unsigned ok = f->n_ok;

    roundtrip(f, 1, argv, NULL);
    assert_int_equal(f->n_ok, ok + 1);
    assert_int_equal(f->last_type, REDIS_REPLY_STATUS);
    assert_string_equal(f->last_str, "PONG");
}

static void
free_link_and_check(struct fixture *f)
{
    rs_redis_free(f->r);
    f->r = NULL;
    assert_loop_empty(f);
}

/* ------------------------------------------------------------------ tests */

/* rs_redis_free(NULL) is a no-op. */
static void
test_free_null(void **state)
{
    (void)state;
    rs_redis_free(NULL);
}

/* Malformed URLs and options give NULL and a static reason; good ones
 * give a CONNECTING object that runs no callback until the loop turns. */
static void
test_urls(void **state)
{
    struct fixture *f = *state;
    static const char *const bad[] = {
        "", "http://h", "rediss://h", "redis://", "redis:///3",
        "redis://?db=1", "redis://h:0", "redis://h:99999", "redis://h:x",
        "redis://h/abc", "redis://h/1/2", "redis://h/-1", "redis://h/1?db=2",
        "redis://h?foo=1", "redis://h?db", "redis://h?db=", "redis://u@h",
        "redis://:a@h?password=b", "redis://h#frag", "redis://:p%00w@h",
        "unix://relative/path", "unix://", "unix:///tmp/x?db=x",
        "unix:///tmp/%zz", "unix:///tmp/x%00y", "unix:///tmp/x#f",
        "unix:///tmp/x?password=%4", "unix:///tmp/x?db=1&db=2",
        "redis://h/99999999999",
        /* sentinel:// */
        "sentinel://", "sentinel://h:1", "sentinel://h:1/", "sentinel:///m",
        "sentinel://h:1,/m", "sentinel://,h:1/m", "sentinel://h:0/m",
        "sentinel://h:65536/m", "sentinel://h:x/m", "sentinel://[::1/m",
        "sentinel://[::1]x/m", "sentinel://u@h/m", "sentinel://h/a%20b",
        "sentinel://h/a%2Fb", "sentinel://h/m#f", "sentinel://h/m?foo=1",
        "sentinel://h/m?db=x", "sentinel://h/m?sentinel-user=u",
        "sentinel://h/m?sentinel-password=a&sentinel-password=b",
        "sentinel://h/%zz", "redis://h?sentinel-password=p",
    };
    static const char *const good[] = {
        "redis://127.0.0.1", "redis://localhost:6380/15",
        "redis://:pw@[::1]:7000/2", "redis://user:p%40w@h?db=3",
        "REDIS://H/", "unix:///tmp/x.sock",
        "unix:///tmp/x.sock?db=2&password=a%26b", "unix:///tmp/x.sock?",
        "sentinel://127.0.0.1:26379/mymaster",
        "SENTINEL://:pw@h1:1,h2,[::1]:3/m-1?db=2&sentinel-password=s%26p",
        "sentinel://u:p@h/m?sentinel-user=su&sentinel-password=sp",
    };
    /* Which reason each sentinel:// mistake gets. */
    static const char *const why[][2] = {
        { "sentinel://h:1", "master name" },
        { "sentinel://h:1/", "master name" },
        { "sentinel://@/m", "no Sentinel" },
        { "sentinel://h:1,/m", "empty Sentinel host" },
        { "sentinel://h:99999/m", "bad Sentinel port" },
        { "sentinel://a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q/m",
          "too many Sentinels" },
        { "rediss://h", "stunnel" },
    };
    char longurl[300];
    struct rs_redis_opts o;
    const char *err;
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        o = opts_for(f, bad[i]);
        err = NULL;
        if (rs_redis_new(f->base, &o, &err) != NULL)
            fail_msg("accepted bad URL %s", bad[i]);
        if (err == NULL || err[0] == '\0')
            fail_msg("no reason for bad URL %s", bad[i]);
    }
    memset(longurl, 'a', sizeof(longurl) - 1);
    longurl[sizeof(longurl) - 1] = '\0';
    memcpy(longurl, "unix:///", 8);
    o = opts_for(f, longurl);
    assert_null(rs_redis_new(f->base, &o, &err));
    assert_non_null(strstr(err, "too long"));

    for (i = 0; i < sizeof(why) / sizeof(why[0]); i++) {
        o = opts_for(f, why[i][0]);
        err = NULL;
        assert_null(rs_redis_new(f->base, &o, &err));
        if (err == NULL || strstr(err, why[i][1]) == NULL)
            fail_msg("%s: %s, not %s", why[i][0], err ? err : "(null)",
                     why[i][1]);
    }
    o = opts_for(f, "sentinel://a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p/m");
    f->r = link_new_state(f, &o, RS_REDIS_RESOLVING);
    assert_string_equal(rs_redis_addr(f->r), "");
    free_link_and_check(f);
    f->n_state = 0;

    o = opts_for(f, NULL);
    assert_null(rs_redis_new(f->base, &o, &err));
    assert_non_null(err);
    assert_null(rs_redis_new(f->base, NULL, &err));
    assert_non_null(err);
    o = opts_for(f, "redis://h");
    assert_null(rs_redis_new(NULL, &o, NULL));
    o.client_name = "two words";
    assert_null(rs_redis_new(f->base, &o, &err));
    assert_non_null(strstr(err, "client_name"));
    o.client_name = NULL;
    o.backoff_min_ms = 500;
    o.backoff_max_ms = 100;
    assert_null(rs_redis_new(f->base, &o, &err));
    assert_non_null(strstr(err, "backoff"));

    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        o = opts_for(f, good[i]);
        f->r = link_new_state(f, &o,
                              strncasecmp(good[i], "sentinel", 8) == 0
                                  ? RS_REDIS_RESOLVING
                                  : RS_REDIS_CONNECTING);
        assert_string_equal(rs_redis_errstr(f->r), "");
        free_link_and_check(f);
    }
    /* The only callback was each free's CLOSED. */
    assert_int_equal(f->n_state, sizeof(good) / sizeof(good[0]));
    for (i = 0; i < f->n_state; i++)
        assert_int_equal(f->hist[i], RS_REDIS_CLOSED);
    assert_int_equal(n_replies(f), 0);
}

/* Failing any one allocation of rs_redis_new gives NULL and leaks
 * nothing (ASan's leak check has the last word), for redis:// and for
 * sentinel:// (which also builds the Sentinel watcher). */
static void
alloc_failure_url(struct fixture *f, const char *url)
{
    struct rs_redis_opts o = opts_for(f, url);
    unsigned long n, seen;
    unsigned failed = 0;

    o.client_name = "rs-test";
    for (n = 1; n < 1000; n++) {
        const char *err = NULL;
        struct rs_redis *r;

        tu_alloc_fail_at(n);
        r = rs_redis_new(f->base, &o, &err);
        seen = tu_alloc_count();
        tu_alloc_fail_at(0);
        if (r == NULL) {
            assert_non_null(err);
            assert_string_equal(err, "out of memory");
            assert_int_equal(event_base_get_num_events(
                                 f->base, EVENT_BASE_COUNT_ADDED), 0);
            failed++;
            continue;
        }
        rs_redis_free(r);
        assert_true(seen < n);
        break;
    }
    assert_true(failed >= 3);
    assert_true(n < 1000);
    assert_loop_empty(f);
}

static void
test_alloc_failure(void **state)
{
    struct fixture *f = *state;

    alloc_failure_url(f, "redis://user:secret@127.0.0.1:1/3?");
    alloc_failure_url(f, "sentinel://user:secret@127.0.0.1:1,[::1]:2/m?db=3"
                         "&sentinel-user=su&sentinel-password=sp");
}

/* Over a unix socket: READY, a binary key and value round-trip intact,
 * and free reports CLOSED and leaves the loop empty. */
static void
test_unix_set_get_binary(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o;
    char key[] = { 'k', '\0', 'e', '\r', '\n', 'y' };
    char val[256];
    const char *argv[3];
    size_t lens[3];
    struct rs_redis_stats st;
    size_t i;

    srv_start(f);
    o = opts_for(f, f->url);
    f->r = link_new(f, &o);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    assert_int_equal(f->n_state, 1);
    assert_int_equal(f->hist[0], RS_REDIS_READY);

    for (i = 0; i < sizeof(val); i++)
        val[i] = (char)(255 - i);
    argv[0] = "SET";
    lens[0] = 3;
    argv[1] = key;
    lens[1] = sizeof(key);
    argv[2] = val;
    lens[2] = sizeof(val);
    roundtrip(f, 3, argv, lens);
    assert_int_equal(f->last_type, REDIS_REPLY_STATUS);
    assert_string_equal(f->last_str, "OK");

    argv[0] = "GET";
    roundtrip(f, 2, argv, lens);
    assert_int_equal(f->last_type, REDIS_REPLY_STRING);
    assert_int_equal(f->last_len, sizeof(val));
    assert_memory_equal(f->last_str, val, sizeof(val));

    assert_int_equal(f->n_ok, 2);
    assert_int_equal(n_replies(f), 2);
    rs_redis_stats(f->r, &st);
    assert_int_equal(st.commands, 2);
    assert_int_equal(st.replies, 2);
    assert_int_equal(st.failures, 0);
    assert_int_equal(st.reconnects, 0);
    assert_int_equal(st.pending, 0);
    free_link_and_check(f);
    assert_int_equal(f->n_state, 2);
    assert_int_equal(f->hist[1], RS_REDIS_CLOSED);
    assert_int_equal(n_replies(f), 2);
}

/* Over TCP with user:password@ (percent-encoded), /db and a client name:
 * the handshake authenticates, selects db 2 and names the connection. */
static void
test_tcp_user_password_db_name(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o;
    const char *info[] = { "CLIENT", "INFO" };
    char url[256];

    f->port = free_port();
    f->extra[0] = "--requirepass";
    f->extra[1] = "s3 cr&t@";
    srv_start(f);
    snprintf(url, sizeof(url), "redis://default:s3%%20cr%%26t%%40@127.0.0.1:%d/2",
             f->port);
    o = opts_for(f, url);
    o.client_name = "rs-test";
    f->r = link_new(f, &o);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    ping_ok(f);
    roundtrip(f, 2, info, NULL);
    assert_int_equal(f->last_type, REDIS_REPLY_STRING);
    assert_non_null(strstr(f->last_str, " db=2 "));
    assert_non_null(strstr(f->last_str, " name=rs-test "));
    assert_non_null(strstr(f->last_str, " user=default "));
    assert_non_null(strstr(f->last_str, "addr=127.0.0.1:"));
    assert_int_equal(f->n_ok, 2);
    free_link_and_check(f);
    assert_int_equal(n_replies(f), 2);
}

/* 10,000 pipelined INCRs: each callback runs exactly once, in order, and
 * the stats add up (RTT measured). */
static void
test_pipeline_10000_in_order(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o;
    const char *argv[] = { "INCR", "counter" };
    struct rs_redis_stats st;
    unsigned i;

    srv_start(f);
    o = opts_for(f, f->url);
    f->r = link_new(f, &o);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    for (i = 0; i < 10000; i++)
        cmd(f->r, f, on_incr, 0, 2, argv);
    rs_redis_stats(f->r, &st);
    assert_int_equal(st.pending, 10000);
    LOOP_UNTIL(f, f->seq == 10000, 60000);
    run_for(f, 50);
    assert_int_equal(f->seq, 10000);
    assert_int_equal(f->n_ok, 10000);
    assert_int_equal(f->out_of_order, 0);
    assert_int_equal(n_replies(f), 10000);
    rs_redis_stats(f->r, &st);
    assert_int_equal(st.commands, 10000);
    assert_int_equal(st.replies, 10000);
    assert_int_equal(st.failures, 0);
    assert_int_equal(st.pending, 0);
    assert_true(st.rtt_us_max > 0);
    assert_true(st.rtt_us_sum >= st.rtt_us_max);
    free_link_and_check(f);
    assert_int_equal(n_replies(f), 10000);
}

/* A command sent from on_state(READY) is accepted and answered, after
 * the first connect and after a reconnect alike. */
static void
test_cmd_from_on_state_ready(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o = opts_for(f, f->url);

    o.on_state = on_state_ping;
    o.backoff_min_ms = 20;
    o.backoff_max_ms = 20;
    srv_start(f);
    f->r = link_new(f, &o);
    LOOP_UNTIL(f, f->n_ok == 1, WATCHDOG_MS);
    assert_string_equal(f->last_str, "PONG");
    srv_stop(f);
    LOOP_UNTIL(f, rs_redis_state(f->r) != RS_REDIS_READY, WATCHDOG_MS);
    srv_start(f);
    LOOP_UNTIL(f, f->n_ok == 2, WATCHDOG_MS);
    assert_int_equal(rs_redis_state(f->r), RS_REDIS_READY);
    free_link_and_check(f);
    assert_int_equal(n_replies(f), 2);
}

/* The right ?password= (percent-encoded) authenticates. */
static void
test_auth_right_password(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o;
    char url[600];

    f->extra[0] = "--requirepass";
    f->extra[1] = "pa&ss";
    srv_start(f);
    snprintf(url, sizeof(url), "%s?password=pa%%26ss", f->url);
    o = opts_for(f, url);
    f->r = link_new(f, &o);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    ping_ok(f);
    free_link_and_check(f);
}

/* A wrong password takes the link DOWN with an errstr naming AUTH; no
 * password at all fails the handshake too (NOAUTH). Commands are refused. */
static void
test_auth_wrong_password(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o;
    const char *argv[] = { "PING" };
    char url[600];

    f->extra[0] = "--requirepass";
    f->extra[1] = "right";
    srv_start(f);
    snprintf(url, sizeof(url), "%s?password=wrong", f->url);
    o = opts_for(f, url);
    o.backoff_min_ms = 5000;
    o.backoff_max_ms = 5000;
    f->r = link_new(f, &o);
    LOOP_UNTIL(f, f->n_state >= 1, WATCHDOG_MS);
    assert_int_equal(f->n_state, 1);
    assert_int_equal(f->hist[0], RS_REDIS_DOWN);
    assert_int_equal(rs_redis_state(f->r), RS_REDIS_DOWN);
    assert_non_null(strstr(f->last_err, "AUTH"));
    assert_string_equal(rs_redis_errstr(f->r), f->last_err);
    assert_int_equal(rs_redis_cmd(f->r, 0, on_reply, f, 1, argv, NULL),
                     RS_EAGAIN);
    free_link_and_check(f);

    o = opts_for(f, f->url);
    o.backoff_min_ms = 5000;
    o.backoff_max_ms = 5000;
    f->n_state = 0;
    f->r = link_new(f, &o);
    LOOP_UNTIL(f, f->n_state >= 1, WATCHDOG_MS);
    assert_int_equal(f->hist[0], RS_REDIS_DOWN);
    assert_non_null(strstr(f->last_err, "NOAUTH"));
    free_link_and_check(f);
    assert_int_equal(n_replies(f), 0);
}

/* ?db=3 selects database 3: a key set there is not in db 0. */
static void
test_select_db(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o;
    const char *set[] = { "SET", "where", "db3" };
    const char *get[] = { "GET", "where" };
    const char *info[] = { "CLIENT", "INFO" };
    char url[600];
    unsigned canceled = 0;

    srv_start(f);
    snprintf(url, sizeof(url), "%s?db=3", f->url);
    o = opts_for(f, url);
    f->r = link_new(f, &o);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    roundtrip(f, 3, set, NULL);
    roundtrip(f, 2, get, NULL);
    assert_string_equal(f->last_str, "db3");
    roundtrip(f, 2, info, NULL);
    assert_non_null(strstr(f->last_str, " db=3 "));
    free_link_and_check(f);

    o = opts_for(f, f->url);
    f->r = link_new(f, &o);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    roundtrip(f, 2, get, NULL);
    assert_int_equal(f->last_type, REDIS_REPLY_NIL);
    assert_int_equal(f->n_ok, 4);
    assert_int_equal(f->n_canceled, canceled);
    free_link_and_check(f);
}

/* Not READY (CONNECTING, then DOWN: no server) means RS_EAGAIN at once,
 * and that command's callback never runs. */
static void
test_cmd_not_ready_is_eagain(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o = opts_for(f, f->url);
    const char *argv[] = { "PING" };

    o.backoff_min_ms = 5000;
    o.backoff_max_ms = 5000;
    f->r = link_new(f, &o);
    assert_int_equal(rs_redis_cmd(f->r, 0, on_reply, f, 1, argv, NULL),
                     RS_EAGAIN);
    LOOP_UNTIL(f, f->n_state >= 1, WATCHDOG_MS);
    assert_int_equal(f->hist[0], RS_REDIS_DOWN);
    assert_non_null(strstr(f->last_err, "connect to"));
    assert_non_null(strstr(f->last_err, f->sock));
    assert_int_equal(rs_redis_cmd(f->r, 0, on_reply, f, 1, argv, NULL),
                     RS_EAGAIN);
    run_for(f, 50);
    assert_int_equal(n_replies(f), 0);
    free_link_and_check(f);
    assert_int_equal(n_replies(f), 0);
}

/* redis-server killed with commands in flight: each gets RS_EIO exactly
 * once, the state goes DOWN and on_state says why. */
static void
test_server_killed_fails_in_flight(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o = opts_for(f, f->url);
    const char *block[] = { "BLPOP", "nothing", "0" };
    const char *ping[] = { "PING" };
    struct rs_redis_stats st;
    int i;

    o.backoff_min_ms = 1000;
    o.backoff_max_ms = 1000;
    srv_start(f);
    f->r = link_new(f, &o);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    /* BLPOP holds the connection, so the PINGs behind it stay in flight. */
    cmd(f->r, f, on_reply, RS_REDIS_NO_TIMEOUT, 3, block);
    for (i = 0; i < 5; i++)
        cmd(f->r, f, on_reply, 0, 1, ping);
    run_for(f, 100);
    assert_int_equal(n_replies(f), 0);

    srv_stop(f);
    LOOP_UNTIL(f, f->n_eio == 6, WATCHDOG_MS);
    run_for(f, 100);
    assert_int_equal(f->n_eio, 6);
    assert_int_equal(n_replies(f), 6);
    assert_int_equal(f->hist[0], RS_REDIS_READY);
    assert_int_equal(f->hist[1], RS_REDIS_DOWN);
    assert_non_null(strstr(f->last_err, "lost"));
    assert_int_not_equal(rs_redis_state(f->r), RS_REDIS_READY);
    rs_redis_stats(f->r, &st);
    assert_int_equal(st.failures, 6);
    assert_int_equal(st.replies, 0);
    assert_int_equal(st.pending, 0);
    free_link_and_check(f);
    assert_int_equal(n_replies(f), 6);
}

/* After the server comes back on the same socket the link is READY again
 * by itself (DOWN -> CONNECTING -> READY) and counts the reconnect. */
static void
test_reconnects_after_restart(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o = opts_for(f, f->url);
    struct rs_redis_stats st;
    unsigned i, ready = 0;

    o.backoff_min_ms = 20;
    o.backoff_max_ms = 100;
    srv_start(f);
    f->r = link_new(f, &o);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    srv_stop(f);
    LOOP_UNTIL(f, rs_redis_state(f->r) != RS_REDIS_READY, WATCHDOG_MS);
    run_for(f, 300);                    /* a few refused attempts */
    srv_start(f);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    ping_ok(f);
    rs_redis_stats(f->r, &st);
    assert_int_equal(st.reconnects, 1);
    assert_true(f->n_state >= 4);
    assert_true(f->n_state < HIST_MAX);
    for (i = 0; i < f->n_state; i++)
        ready += f->hist[i] == RS_REDIS_READY;
    assert_int_equal(ready, 2);
    assert_int_equal(f->hist[f->n_state - 1], RS_REDIS_READY);
    assert_int_equal(f->hist[f->n_state - 2], RS_REDIS_CONNECTING);
    free_link_and_check(f);
    assert_int_equal(n_replies(f), 1);
}

/* DEBUG SLEEP 1 with a 200 ms timeout: RS_ETIMEDOUT for it, RS_EIO for the
 * command behind it, the link resets and then recovers by itself. */
static void
test_command_timeout_resets_link(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o = opts_for(f, f->url);
    const char *sleep1[] = { "DEBUG", "SLEEP", "1" };
    const char *ping[] = { "PING" };
    struct rs_redis_stats st;
    uint64_t t0, dt;

    srv_start(f);
    f->r = link_new(f, &o);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    t0 = now_us();
    cmd(f->r, f, on_reply, 200, 3, sleep1);
    cmd(f->r, f, on_reply, 0, 1, ping);
    LOOP_UNTIL(f, n_replies(f) == 2, WATCHDOG_MS);
    dt = now_us() - t0;
    assert_int_equal(f->n_timedout, 1);
    assert_int_equal(f->n_eio, 1);
    assert_true(dt >= 195000);
    assert_true(dt < 900000);
    assert_int_equal(f->hist[1], RS_REDIS_DOWN);
    assert_non_null(strstr(f->last_err, "timed out"));
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    ping_ok(f);
    rs_redis_stats(f->r, &st);
    assert_int_equal(st.reconnects, 1);
    assert_int_equal(st.failures, 2);
    assert_int_equal(st.replies, 1);
    free_link_and_check(f);
    assert_int_equal(n_replies(f), 3);
}

/* The earliest deadline wins even when it is not the oldest command:
 * a 150 ms PING behind a blocking BLPOP (no timeout) and a 5 s GET times
 * out at ~150 ms; the two ahead of it get RS_EIO. */
static void
test_timeout_of_younger_command(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o = opts_for(f, f->url);
    const char *block[] = { "BLPOP", "nothing", "0" };
    const char *get[] = { "GET", "k" };
    const char *ping[] = { "PING" };
    uint64_t t0, dt;

    o.backoff_min_ms = 5000;
    o.backoff_max_ms = 5000;
    srv_start(f);
    f->r = link_new(f, &o);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    t0 = now_us();
    cmd(f->r, f, on_reply, RS_REDIS_NO_TIMEOUT, 3, block);
    cmd(f->r, f, on_reply, 5000, 2, get);
    cmd(f->r, f, on_reply, 150, 1, ping);
    LOOP_UNTIL(f, n_replies(f) == 3, WATCHDOG_MS);
    dt = now_us() - t0;
    assert_int_equal(f->n_timedout, 1);
    assert_int_equal(f->n_eio, 2);
    assert_true(dt >= 145000);
    assert_true(dt < 2000000);
    assert_int_equal(rs_redis_state(f->r), RS_REDIS_DOWN);
    free_link_and_check(f);
    assert_int_equal(n_replies(f), 3);
}

/* max_pending commands in flight: the next one is RS_ETOOBIG and its
 * callback never runs; once answered there is room again. */
static void
test_max_pending_is_etoobig(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o = opts_for(f, f->url);
    const char *ping[] = { "PING" };

    o.max_pending = 3;
    srv_start(f);
    f->r = link_new(f, &o);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    cmd(f->r, f, on_reply, 0, 1, ping);
    cmd(f->r, f, on_reply, 0, 1, ping);
    cmd(f->r, f, on_reply, 0, 1, ping);
    assert_int_equal(rs_redis_cmd(f->r, 0, on_reply, f, 1, ping, NULL),
                     RS_ETOOBIG);
    LOOP_UNTIL(f, n_replies(f) == 3, WATCHDOG_MS);
    ping_ok(f);
    assert_int_equal(f->n_ok, 4);
    assert_int_equal(n_replies(f), 4);
    free_link_and_check(f);
}

/* rs_redis_free with commands in flight: each gets RS_ECANCELED exactly
 * once before free returns, and nothing is left on the loop. */
static void
test_free_cancels_pending(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o = opts_for(f, f->url);
    const char *block[] = { "BLPOP", "nothing", "0" };
    const char *ping[] = { "PING" };
    int i;

    srv_start(f);
    f->r = link_new(f, &o);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    cmd(f->r, f, on_reply, RS_REDIS_NO_TIMEOUT, 3, block);
    for (i = 0; i < 4; i++)
        cmd(f->r, f, on_reply, 0, 1, ping);
    run_for(f, 50);
    assert_int_equal(n_replies(f), 0);
    rs_redis_free(f->r);
    f->r = NULL;
    assert_int_equal(f->n_canceled, 5);
    assert_int_equal(n_replies(f), 5);
    assert_int_equal(f->hist[f->n_state - 1], RS_REDIS_CLOSED);
    assert_loop_empty(f);
    run_for(f, 50);
    assert_int_equal(n_replies(f), 5);
}

/* One link's reply callback may free another link that has commands in
 * flight: those are cancelled exactly once, inside that free. */
static void
test_free_from_other_links_callback(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o = opts_for(f, f->url);
    const char *block[] = { "BLPOP", "nothing", "0" };
    const char *ping[] = { "PING" };

    srv_start(f);
    f->r = link_new(f, &o);
    o.on_state = NULL;
    f->r2 = link_new(f, &o);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY &&
                      rs_redis_state(f->r2) == RS_REDIS_READY,
               WATCHDOG_MS);
    cmd(f->r2, f, on_reply2, RS_REDIS_NO_TIMEOUT, 3, block);
    cmd(f->r2, f, on_reply2, 0, 1, ping);
    cmd(f->r2, f, on_reply2, 0, 1, ping);
    run_for(f, 50);
    cmd(f->r, f, on_reply_free_r2, 0, 1, ping);
    LOOP_UNTIL(f, f->n_ok == 1, WATCHDOG_MS);
    assert_null(f->r2);
    assert_int_equal(f->n2_canceled, 3);
    ping_ok(f);
    free_link_and_check(f);
    assert_int_equal(f->n2_canceled, 3);
    assert_int_equal(n_replies(f), 2);
}

/* Freeing link A from a callback of link B that itself runs inside A's
 * reply callback (hiredis defers A's context free until that callback
 * returns): every callback of both runs exactly once, nothing leaks. */
static void
test_free_chain_through_other_link(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o = opts_for(f, f->url);
    const char *block[] = { "BLPOP", "nothing", "0" };
    const char *ping[] = { "PING" };

    srv_start(f);
    f->r = link_new(f, &o);
    o.on_state = NULL;
    f->r2 = link_new(f, &o);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY &&
                      rs_redis_state(f->r2) == RS_REDIS_READY,
               WATCHDOG_MS);
    cmd(f->r2, f, on_reply2_free_r, RS_REDIS_NO_TIMEOUT, 3, block);
    cmd(f->r, f, on_reply_free_r2_chain, 0, 1, ping);
    cmd(f->r, f, on_reply, 0, 1, ping);
    cmd(f->r, f, on_reply, 0, 1, ping);
    LOOP_UNTIL(f, f->r == NULL, WATCHDOG_MS);
    assert_null(f->r2);
    assert_int_equal(f->n_ok, 1);
    assert_int_equal(f->n_canceled, 2);
    assert_int_equal(f->n2_canceled, 1);
    assert_int_equal(f->hist[f->n_state - 1], RS_REDIS_CLOSED);
    assert_loop_empty(f);
    run_for(f, 50);
    assert_int_equal(n_replies(f), 3);
    assert_int_equal(f->n2_canceled, 1);
}

/* A listener whose accept queue is full drops our SYNs: the TCP connect
 * itself never completes, and the same timeout takes the link DOWN. */
static void
test_connect_timeout_full_backlog(void **state)
{
    struct fixture *f = *state;
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    struct rs_redis_opts o;
    char url[128];
    int fill[8];
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    int i;

    assert_true(lfd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(lfd, 0), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
    for (i = 0; i < 8; i++) {
        fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        assert_true(fill[i] >= 0);
        connect(fill[i], (struct sockaddr *)&sa, sizeof(sa));
    }
    sleep_ms(20);
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", ntohs(sa.sin_port));
    o = opts_for(f, url);
    o.connect_timeout_ms = 200;
    o.backoff_min_ms = 5000;
    o.backoff_max_ms = 5000;
    f->r = link_new(f, &o);
    LOOP_UNTIL(f, f->n_state >= 1, WATCHDOG_MS);
    assert_int_equal(f->hist[0], RS_REDIS_DOWN);
    assert_non_null(strstr(f->last_err, "timed out"));
    free_link_and_check(f);
    for (i = 0; i < 8; i++)
        close(fill[i]);
    close(lfd);
}

/* A peer that accepts the TCP connection but never says a word: the
 * connect/handshake timeout fires and the link goes DOWN. */
static void
test_connect_timeout_silent_peer(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o;
    const char *ping[] = { "PING" };
    char url[128];
    uint64_t t0, dt;
    int port;
    int lfd = tu_loopback_socket(8, &port);   /* never accept()ed */

    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);

    o = opts_for(f, url);
    o.connect_timeout_ms = 200;
    o.backoff_min_ms = 5000;
    o.backoff_max_ms = 5000;
    t0 = now_us();
    f->r = link_new(f, &o);
    LOOP_UNTIL(f, f->n_state >= 1, WATCHDOG_MS);
    dt = now_us() - t0;
    assert_int_equal(f->n_state, 1);
    assert_int_equal(f->hist[0], RS_REDIS_DOWN);
    assert_non_null(strstr(f->last_err, "timed out"));
    assert_true(dt >= 195000);
    assert_true(dt < 2000000);
    assert_int_equal(rs_redis_cmd(f->r, 0, on_reply, f, 1, ping, NULL),
                     RS_EAGAIN);
    free_link_and_check(f);
    close(lfd);
    assert_int_equal(n_replies(f), 0);
}

/* Commands that would desynchronise replies from the FIFO, or undo the
 * handshake, and malformed calls are RS_EINVAL; callbacks never run. */
static void
test_refused_commands(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o = opts_for(f, f->url);
    const char *sub[] = { "SUBSCRIBE", "ch" };
    const char *mon[] = { "monitor" };
    const char *crep[] = { "client", "REPLY", "OFF" };
    const char *sel[] = { "SELECT", "1" };
    const char *ping[] = { "PING" };

    srv_start(f);
    f->r = link_new(f, &o);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    assert_int_equal(rs_redis_cmd(f->r, 0, on_reply, f, 2, sub, NULL),
                     RS_EINVAL);
    assert_int_equal(rs_redis_cmd(f->r, 0, on_reply, f, 1, mon, NULL),
                     RS_EINVAL);
    assert_int_equal(rs_redis_cmd(f->r, 0, on_reply, f, 3, crep, NULL),
                     RS_EINVAL);
    assert_int_equal(rs_redis_cmd(f->r, 0, on_reply, f, 2, sel, NULL),
                     RS_EINVAL);
    assert_int_equal(rs_redis_cmd(f->r, 0, on_reply, f, 0, ping, NULL),
                     RS_EINVAL);
    assert_int_equal(rs_redis_cmd(f->r, 0, NULL, f, 1, ping, NULL),
                     RS_EINVAL);
    run_for(f, 50);
    assert_int_equal(n_replies(f), 0);
    ping_ok(f);
    free_link_and_check(f);
    assert_int_equal(n_replies(f), 1);
}

/* With nobody listening, retries back off: each delay is in
 * [3/4 base, base] with base doubling from backoff_min_ms to
 * backoff_max_ms (upper bounds loose for slow, sanitized runs). */
static void
test_backoff_grows_with_jitter(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_opts o = opts_for(f, f->url);
    static const unsigned base[] = { 40, 80, 160, 160, 160 };
    unsigned i, k = 0;

    o.backoff_min_ms = 40;
    o.backoff_max_ms = 160;
    f->r = link_new(f, &o);
    /* CONNECTING is the initial state; each failure is DOWN then a later
     * CONNECTING: pairs (DOWN, CONNECTING) at hist[2j], hist[2j+1]. */
    LOOP_UNTIL(f, f->n_state >= 11, WATCHDOG_MS);
    for (i = 0; i + 1 < f->n_state && k < 5; i += 2) {
        uint64_t gap;
        assert_int_equal(f->hist[i], RS_REDIS_DOWN);
        assert_int_equal(f->hist[i + 1], RS_REDIS_CONNECTING);
        gap = (f->hist_us[i + 1] - f->hist_us[i]) / 1000u;
        if (gap + 2 < base[k] * 3 / 4 || gap > base[k] + 250)
            fail_msg("retry %u waited %llu ms, base %u", k,
                     (unsigned long long)gap, base[k]);
        k++;
    }
    assert_int_equal(k, 5);
    free_link_and_check(f);
    assert_int_equal(n_replies(f), 0);
}

#define TR(name, fn) { name, fn, setup, teardown, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TR("redis/free_null", test_free_null),
        TR("redis/urls", test_urls),
        TR("redis/alloc_failure", test_alloc_failure),
        TR("redis/unix_set_get_binary", test_unix_set_get_binary),
        TR("redis/tcp_user_password_db_name",
           test_tcp_user_password_db_name),
        TR("redis/pipeline_10000_in_order", test_pipeline_10000_in_order),
        TR("redis/cmd_from_on_state_ready", test_cmd_from_on_state_ready),
        TR("redis/auth_right_password", test_auth_right_password),
        TR("redis/auth_wrong_password", test_auth_wrong_password),
        TR("redis/select_db", test_select_db),
        TR("redis/cmd_not_ready_is_eagain", test_cmd_not_ready_is_eagain),
        TR("redis/server_killed_fails_in_flight",
           test_server_killed_fails_in_flight),
        TR("redis/reconnects_after_restart", test_reconnects_after_restart),
        TR("redis/command_timeout_resets_link",
           test_command_timeout_resets_link),
        TR("redis/timeout_of_younger_command",
           test_timeout_of_younger_command),
        TR("redis/max_pending_is_etoobig", test_max_pending_is_etoobig),
        TR("redis/free_cancels_pending", test_free_cancels_pending),
        TR("redis/free_from_other_links_callback",
           test_free_from_other_links_callback),
        TR("redis/free_chain_through_other_link",
           test_free_chain_through_other_link),
        TR("redis/connect_timeout_silent_peer",
           test_connect_timeout_silent_peer),
        TR("redis/connect_timeout_full_backlog",
           test_connect_timeout_full_backlog),
        TR("redis/refused_commands", test_refused_commands),
        TR("redis/backoff_grows_with_jitter", test_backoff_grows_with_jitter),
    };

    /* hiredis 0.14 writes with write(2); a dead server must not kill us. */
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests_name("redis", tests, NULL, NULL);
}
