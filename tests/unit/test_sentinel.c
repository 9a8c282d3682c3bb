/* test_sentinel.c - the Sentinel watcher (rs_sentinel.h) and the Redis link
 * on a sentinel:// URL (rs_redis.h) against real processes on loopback,
 * started in a temp dir and stopped by PID for each test: a primary, a
 * replica and three Sentinels (redis-server --sentinel, quorum 2,
 * down-after 1 s). Resolving, forced and kill -9 failovers, a SIGSTOPped
 * primary (only +switch-master can tell an idle link), READONLY, a wrong
 * master name, Sentinels down then up, Sentinel AUTH, and teardown. */
#include "testutil.h"

#include <arpa/inet.h>
#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rs_redis.h"
#include "rs_sentinel.h"
#include "tu_proc.h"

#define MASTER "rsmaster"
#define N_SENT 3
#define HIST_MAX 256
#define WATCHDOG_MS 20000u

struct node {
    int port;
    pid_t pid;
    char dir[300];
};

struct fixture {
    struct event_base *base;
    struct event *watchdog;
    bool expired;
    char *dir;
    struct node redis[2];       /* [0] starts as primary, [1] its replica */
    struct node sent[N_SENT];
    const char *sent_pass;      /* requirepass of the Sentinels, or NULL */
    char url[600];
    struct rs_redis *r;
    struct rs_sentinel *s;

    unsigned n_state;
    enum rs_redis_state hist[HIST_MAX];
    char errs[HIST_MAX][256];   /* errstr of each DOWN */

    unsigned n_ok, n_err, n_eio, n_other;
    char last_str[256];

    unsigned n_resolved, n_switch;
    int resolved_rc, switch_port, resolved_port;
    char resolved_err[400];
};

/* ---------------------------------------------------------------- helpers */

static uint64_t
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
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

#define LOOP_UNTIL(f, cond, ms)                                             \
    do {                                                                    \
        wd_start((f), (ms));                                                \
        while (!(cond) && !(f)->expired)                                    \
            event_base_loop((f)->base, EVLOOP_ONCE);                        \
        event_del((f)->watchdog);                                           \
        if (!(cond))                                                        \
            fail_msg("timed out after %u ms: %s (link: %s)", (unsigned)(ms),\
                     #cond, (f)->r ? rs_redis_errstr((f)->r) : "-");       \
    } while (0)

static void
run_for(struct fixture *f, unsigned ms)
{
    wd_start(f, ms);
    while (!f->expired)
        event_base_loop(f->base, EVLOOP_ONCE);
    event_del(f->watchdog);
}

/* A port nothing listens on (yet). */
static int
free_port(void)
{
    int port;
    close(tu_loopback_socket(0, &port));
    return port;
}

/* One blocking command to 127.0.0.1:port (test side only); NULL when the
 * node does not answer. Free with freeReplyObject. */
static redisReply *
admin(int port, const char *pass, const char *fmt, ...)
{
    struct timeval tv = { 1, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *rep = NULL;
    va_list ap;

    if (c == NULL || c->err != 0)
        goto out;
    redisSetTimeout(c, tv);
    if (pass != NULL) {
        rep = redisCommand(c, "AUTH %s", pass);
        if (rep == NULL)
            goto out;
        freeReplyObject(rep);
        rep = NULL;
    }
    va_start(ap, fmt);
    rep = redisvCommand(c, fmt, ap);
    va_end(ap);
out:
    if (c != NULL)
        redisFree(c);
    return rep;
}

/* INFO section of the node at port holds needle. */
static bool
info_has(int port, const char *pass, const char *section, const char *needle)
{
    redisReply *rep = admin(port, pass, "INFO %s", section);
    bool ok = rep != NULL && rep->type == REDIS_REPLY_STRING &&
              strstr(rep->str, needle) != NULL;

    if (rep != NULL)
        freeReplyObject(rep);
    return ok;
}

static void
node_spawn(struct fixture *f, struct node *n, const char *const argv[])
{
    char log[400];
    uint64_t give_up = now_ms() + 10000;
    redisReply *rep;

    snprintf(log, sizeof(log), "%s/log", n->dir);
    n->pid = tu_proc_spawn(argv, log);
    if (n->pid <= 0)
        fail_msg("cannot start redis-server");
    for (;;) {
        rep = admin(n->port, n == &f->sent[0] || n == &f->sent[1] ||
                                     n == &f->sent[2] ? f->sent_pass : NULL,
                    "PING");
        if (rep != NULL) {
            freeReplyObject(rep);
            return;
        }
        if (now_ms() > give_up)
            fail_msg("redis-server on %d did not answer (see %s)", n->port,
                     log);
        usleep(20000);
    }
}

static void
node_dir(struct fixture *f, struct node *n, const char *name)
{
    snprintf(n->dir, sizeof(n->dir), "%s/%s", f->dir, name);
    assert_int_equal(mkdir(n->dir, 0700), 0);
}

static void
redis_start(struct fixture *f, int i, int primary_port)
{
    struct node *n = &f->redis[i];
    char port[16], mport[16];
    const char *argv[20];
    int a = 0;

    snprintf(port, sizeof(port), "%d", n->port);
    snprintf(mport, sizeof(mport), "%d", primary_port);
    argv[a++] = "redis-server";
    argv[a++] = "--port";
    argv[a++] = port;
    argv[a++] = "--bind";
    argv[a++] = "127.0.0.1";
    argv[a++] = "--dir";
    argv[a++] = n->dir;
    argv[a++] = "--save";
    argv[a++] = "";
    argv[a++] = "--appendonly";
    argv[a++] = "no";
    /* a replica's first sync at once, not after the 5 s Redis 7 waits
     * for more replicas to share it */
    argv[a++] = "--repl-diskless-sync-delay";
    argv[a++] = "0";
    if (primary_port > 0) {
        argv[a++] = "--replicaof";
        argv[a++] = "127.0.0.1";
        argv[a++] = mport;
    }
    argv[a] = NULL;
    node_spawn(f, n, argv);
}

static void
sentinel_start(struct fixture *f, int i)
{
    struct node *n = &f->sent[i];
    char conf[400];
    const char *argv[] = { "redis-server", conf, "--sentinel", NULL };
    FILE *fp;

    snprintf(conf, sizeof(conf), "%s/sentinel.conf", n->dir);
    fp = fopen(conf, "w");
    assert_non_null(fp);
    fprintf(fp,
            "port %d\nbind 127.0.0.1\ndir %s\n"
            "sentinel monitor " MASTER " 127.0.0.1 %d 2\n"
            "sentinel down-after-milliseconds " MASTER " 1000\n"
            "sentinel failover-timeout " MASTER " 3000\n",
            n->port, n->dir, f->redis[0].port);
    /* What the Sentinels would learn from the primary's INFO and from
     * each other's hellos (seconds of each test), declared up front as
     * Sentinel writes it into its own configuration. */
    fprintf(fp, "sentinel myid %040x\n", i + 1);
    fprintf(fp, "sentinel known-replica " MASTER " 127.0.0.1 %d\n",
            f->redis[1].port);
    for (int k = 0; k < N_SENT; k++)
        if (k != i)
            fprintf(fp, "sentinel known-sentinel " MASTER " 127.0.0.1 %d "
                        "%040x\n", f->sent[k].port, k + 1);
    if (f->sent_pass != NULL)
        fprintf(fp, "requirepass %s\nsentinel sentinel-pass %s\n",
                f->sent_pass, f->sent_pass);
    fclose(fp);
    node_spawn(f, n, argv);
}

/* Sentinel i knows the replica and both other Sentinels: a failover can
 * be agreed. */
static bool
sentinel_settled(struct fixture *f, int i)
{
    redisReply *rep = admin(f->sent[i].port, f->sent_pass,
                            "SENTINEL master %s", MASTER);
    bool sents = false, slaves = false;
    size_t k;

    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY) {
        if (rep != NULL)
            freeReplyObject(rep);
        return false;
    }
    for (k = 0; k + 1 < rep->elements; k += 2) {
        const char *key = rep->element[k]->str;
        const char *val = rep->element[k + 1]->str;
        if (key == NULL || val == NULL)
            continue;
        if (strcmp(key, "num-other-sentinels") == 0)
            sents = strcmp(val, "2") == 0;
        if (strcmp(key, "num-slaves") == 0)
            slaves = strcmp(val, "1") == 0;
    }
    freeReplyObject(rep);
    return sents && slaves;
}

static void
sentinels_start_all(struct fixture *f)
{
    uint64_t give_up;
    int i;

    for (i = 0; i < N_SENT; i++)
        sentinel_start(f, i);
    give_up = now_ms() + 20000;
    for (i = 0; i < N_SENT; i++) {
        while (!sentinel_settled(f, i)) {
            if (now_ms() > give_up)
                fail_msg("Sentinel %d did not learn its peers in 20 s", i);
            usleep(100000);
        }
    }
}

/* The primary and its replica, in sync. */
static void
pair_start(struct fixture *f)
{
    uint64_t give_up = now_ms() + 10000;

    redis_start(f, 0, 0);
    redis_start(f, 1, f->redis[0].port);
    while (!info_has(f->redis[1].port, NULL, "replication",
                     "master_link_status:up")) {
        if (now_ms() > give_up)
            fail_msg("the replica did not sync in 10 s");
        usleep(50000);
    }
}

static void
url_make(struct fixture *f, const char *master, const char *query)
{
    snprintf(f->url, sizeof(f->url),
             "sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/%s%s",
             f->sent[0].port, f->sent[1].port, f->sent[2].port, master,
             query ? query : "");
}

static void
node_stop(struct node *n)
{
    tu_proc_stop(n->pid);
    n->pid = 0;
}

static void
node_kill9(struct node *n)
{
    kill(n->pid, SIGKILL);
    tu_proc_stop(n->pid);
    n->pid = 0;
}

static int
setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    int i;

    if (f == NULL)
        return -1;
    f->base = event_base_new();
    f->watchdog = evtimer_new(f->base, on_watchdog, f);
    if (f->base == NULL || f->watchdog == NULL)
        return -1;
    f->dir = tu_mkdtemp();
    for (i = 0; i < 2; i++) {
        char name[16];
        snprintf(name, sizeof(name), "redis%d", i);
        node_dir(f, &f->redis[i], name);
        f->redis[i].port = free_port();
    }
    for (i = 0; i < N_SENT; i++) {
        char name[16];
        snprintf(name, sizeof(name), "sentinel%d", i);
        node_dir(f, &f->sent[i], name);
        f->sent[i].port = free_port();
    }
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fixture *f = *state;
    int i;

    rs_redis_free(f->r);
    rs_sentinel_free(f->s);
    for (i = 0; i < N_SENT; i++)
        node_stop(&f->sent[i]);
    for (i = 0; i < 2; i++) {
        if (f->redis[i].pid > 0)
            kill(f->redis[i].pid, SIGCONT);
        node_stop(&f->redis[i]);
    }
    event_free(f->watchdog);
    event_base_free(f->base);
    tu_rmtree(f->dir);
    free(f->dir);
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
        snprintf(f->errs[f->n_state], sizeof(f->errs[0]), "%s",
                 errstr ? errstr : "");
    }
    f->n_state++;
    if (st == RS_REDIS_DOWN)
        assert_non_null(errstr);
}

static void
on_reply(void *ud, int rc, const redisReply *reply)
{
    struct fixture *f = ud;

    if (rc == RS_EIO) {
        f->n_eio++;
    } else if (rc != 0) {
        f->n_other++;
    } else if (reply->type == REDIS_REPLY_ERROR) {
        f->n_err++;
        snprintf(f->last_str, sizeof(f->last_str), "%s", reply->str);
    } else {
        f->n_ok++;
        snprintf(f->last_str, sizeof(f->last_str), "%s",
                 reply->str ? reply->str : "");
    }
}

static void
on_resolved(void *ud, int rc, const char *host, int port, const char *errstr)
{
    struct fixture *f = ud;

    f->n_resolved++;
    f->resolved_rc = rc;
    f->resolved_port = port;
    if (rc == 0) {
        assert_string_equal(host, "127.0.0.1");
        assert_null(errstr);
    } else if (rc != RS_ECANCELED) {
        assert_non_null(errstr);
        snprintf(f->resolved_err, sizeof(f->resolved_err), "%s", errstr);
    }
}

static void
on_switch(void *ud, const char *host, int port)
{
    struct fixture *f = ud;

    assert_string_equal(host, "127.0.0.1");
    f->n_switch++;
    f->switch_port = port;
}

/* Frees the watcher from inside its own callback. */
static void
on_resolved_free(void *ud, int rc, const char *host, int port,
                 const char *errstr)
{
    struct fixture *f = ud;

    on_resolved(ud, rc, host, port, errstr);
    rs_sentinel_free(f->s);
    f->s = NULL;
}

/* ---------------------------------------------------------- link helpers */

static void
link_open(struct fixture *f)
{
    struct rs_redis_opts o;
    const char *err = "unset";

    memset(&o, 0, sizeof(o));
    o.url = f->url;
    o.client_name = "rs-sentinel-test";
    o.connect_timeout_ms = 500;
    o.backoff_min_ms = 50;
    o.backoff_max_ms = 500;
    o.on_state = on_state;
    o.ud = f;
    f->r = rs_redis_new(f->base, &o, &err);
    if (f->r == NULL)
        fail_msg("rs_redis_new(%s): %s", f->url, err);
    assert_int_equal(rs_redis_state(f->r), RS_REDIS_RESOLVING);
    assert_string_equal(rs_redis_addr(f->r), "");
}

static void
link_cmd(struct fixture *f, int argc, const char **argv)
{
    unsigned before = f->n_ok + f->n_err + f->n_eio + f->n_other;

    assert_int_equal(rs_redis_cmd(f->r, 0, on_reply, f, argc, argv, NULL),
                     0);
    LOOP_UNTIL(f, f->n_ok + f->n_err + f->n_eio + f->n_other == before + 1,
               WATCHDOG_MS);
}

/* SET then GET on the link: it writes to a primary. */
static void
link_write_ok(struct fixture *f, const char *val)
{
    const char *set[] = { "SET", "k", val };
    const char *get[] = { "GET", "k" };
    unsigned ok = f->n_ok;

    link_cmd(f, 3, set);
    link_cmd(f, 2, get);
    assert_int_equal(f->n_ok, ok + 2);
    assert_string_equal(f->last_str, val);
}

static void
addr_of(char *buf, size_t sz, const struct node *n)
{
    snprintf(buf, sz, "127.0.0.1:%d", n->port);
}

static bool
hist_has(const struct fixture *f, enum rs_redis_state st, const char *needle)
{
    unsigned i;

    for (i = 0; i < f->n_state && i < HIST_MAX; i++) {
        if (f->hist[i] == st &&
            (needle == NULL || strstr(f->errs[i], needle) != NULL))
            return true;
    }
    return false;
}

static void
free_all_and_check(struct fixture *f)
{
    rs_redis_free(f->r);
    f->r = NULL;
    rs_sentinel_free(f->s);
    f->s = NULL;
    assert_int_equal(event_base_get_num_events(f->base,
                                               EVENT_BASE_COUNT_ADDED), 0);
}

/* ------------------------------------------------------------------ tests */

/* rs_sentinel_free(NULL) is a no-op; bad options are refused. */
static void
test_free_null_and_opts(void **state)
{
    struct fixture *f = *state;
    struct rs_sentinel_node nodes[RS_SENTINEL_MAX_NODES + 1];
    struct rs_sentinel_opts o;
    const char *err;
    size_t i;

    rs_sentinel_free(NULL);
    for (i = 0; i <= RS_SENTINEL_MAX_NODES; i++)
        nodes[i] = (struct rs_sentinel_node){ "127.0.0.1", 1 };
    memset(&o, 0, sizeof(o));
    o.nodes = nodes;
    o.n_nodes = RS_SENTINEL_MAX_NODES + 1;
    o.master = MASTER;
    assert_null(rs_sentinel_new(f->base, &o, &err));
    assert_non_null(strstr(err, "too many"));
    o.n_nodes = 0;
    assert_null(rs_sentinel_new(f->base, &o, &err));
    o.n_nodes = 1;
    o.master = "";
    assert_null(rs_sentinel_new(f->base, &o, &err));
    o.master = MASTER;
    nodes[0].port = 0;
    assert_null(rs_sentinel_new(f->base, &o, &err));
    assert_int_equal(event_base_get_num_events(f->base,
                                               EVENT_BASE_COUNT_ADDED), 0);
}

/* The link finds the primary through the Sentinels, checks ROLE, runs
 * commands; no failover counted. rs_sentinel alone names the same address,
 * also when the first Sentinel asked is down, and its watch subscribes. */
static void
test_resolve_and_commands(void **state)
{
    struct fixture *f = *state;
    struct rs_sentinel_node nodes[2];
    struct rs_sentinel_opts so;
    struct rs_redis_stats st;
    char want[64];
    const char *role[] = { "ROLE" };

    pair_start(f);
    sentinels_start_all(f);
    url_make(f, MASTER, NULL);
    link_open(f);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    addr_of(want, sizeof(want), &f->redis[0]);
    assert_string_equal(rs_redis_addr(f->r), want);
    assert_int_equal(f->hist[0], RS_REDIS_CONNECTING);
    assert_int_equal(f->hist[1], RS_REDIS_READY);
    link_write_ok(f, "one");
    link_cmd(f, 1, role);
    rs_redis_stats(f->r, &st);
    assert_int_equal(st.failovers, 0);

    /* A dead Sentinel first: the next one answers. */
    nodes[0] = (struct rs_sentinel_node){ "127.0.0.1", free_port() };
    nodes[1] = (struct rs_sentinel_node){ "127.0.0.1", f->sent[1].port };
    memset(&so, 0, sizeof(so));
    so.nodes = nodes;
    so.n_nodes = 2;
    so.master = MASTER;
    so.timeout_ms = 500;
    so.on_switch = on_switch;
    so.ud = f;
    f->s = rs_sentinel_new(f->base, &so, NULL);
    assert_non_null(f->s);
    assert_int_equal(rs_sentinel_resolve(f->s, on_resolved, f), 0);
    assert_int_equal(rs_sentinel_resolve(f->s, on_resolved, f), RS_ESTATE);
    assert_int_equal(f->n_resolved, 0);
    LOOP_UNTIL(f, f->n_resolved == 1, WATCHDOG_MS);
    assert_int_equal(f->resolved_rc, 0);
    assert_int_equal(f->resolved_port, f->redis[0].port);
    /* The watch gave up on the dead one and subscribed to the other. */
    LOOP_UNTIL(f, rs_sentinel_watching(f->s), WATCHDOG_MS);
    snprintf(want, sizeof(want), "127.0.0.1:%d", f->sent[1].port);
    assert_string_equal(rs_sentinel_watch_addr(f->s), want);
    assert_int_equal(f->n_switch, 0);
    free_all_and_check(f);
}

/* SENTINEL FAILOVER: the link ends up on the new primary by itself, its
 * address changes, one failover is counted, writes work there; the
 * watcher reported +switch-master with the new address. */
static void
test_forced_failover(void **state)
{
    struct fixture *f = *state;
    struct rs_sentinel_node nodes[1];
    struct rs_sentinel_opts so;
    struct rs_redis_stats st;
    redisReply *rep;
    char want[64];

    pair_start(f);
    sentinels_start_all(f);
    url_make(f, MASTER, NULL);
    link_open(f);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    link_write_ok(f, "before");

    nodes[0] = (struct rs_sentinel_node){ "127.0.0.1", f->sent[2].port };
    memset(&so, 0, sizeof(so));
    so.nodes = nodes;
    so.n_nodes = 1;
    so.master = MASTER;
    so.on_switch = on_switch;
    so.ud = f;
    f->s = rs_sentinel_new(f->base, &so, NULL);
    assert_non_null(f->s);
    LOOP_UNTIL(f, rs_sentinel_watching(f->s), WATCHDOG_MS);

    rep = admin(f->sent[0].port, NULL, "SENTINEL FAILOVER %s", MASTER);
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_STATUS);
    freeReplyObject(rep);

    addr_of(want, sizeof(want), &f->redis[1]);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY &&
                      strcmp(rs_redis_addr(f->r), want) == 0, 30000);
    LOOP_UNTIL(f, f->n_switch == 1, WATCHDOG_MS);
    assert_int_equal(f->switch_port, f->redis[1].port);
    rs_redis_stats(f->r, &st);
    assert_int_equal(st.failovers, 1);
    link_write_ok(f, "after");
    free_all_and_check(f);
}

/* kill -9 of the primary: the Sentinels promote the replica and the link
 * follows within a bounded time (down-after 1 s + election + backoff). */
static void
test_kill9_primary(void **state)
{
    struct fixture *f = *state;
    struct rs_redis_stats st;
    char want[64];
    uint64_t t0;

    pair_start(f);
    sentinels_start_all(f);
    url_make(f, MASTER, NULL);
    link_open(f);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    link_write_ok(f, "before");
    t0 = now_ms();
    node_kill9(&f->redis[0]);
    addr_of(want, sizeof(want), &f->redis[1]);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY &&
                      strcmp(rs_redis_addr(f->r), want) == 0, 15000);
    print_message("link on the new primary %llu ms after kill -9\n",
                  (unsigned long long)(now_ms() - t0));
    assert_true(hist_has(f, RS_REDIS_DOWN, "lost"));
    rs_redis_stats(f->r, &st);
    assert_int_equal(st.failovers, 1);
    link_write_ok(f, "after");
    free_all_and_check(f);
}

/* The primary SIGSTOPped under an idle link: no command fails and the
 * connection stays open, so only the Sentinels' +switch-master can move
 * the link; it does, to the promoted replica. */
static void
test_stopped_primary_idle_link(void **state)
{
    struct fixture *f = *state;
    char want[64];

    pair_start(f);
    sentinels_start_all(f);
    url_make(f, MASTER, NULL);
    link_open(f);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    /* Let the watch subscribe before the failover starts. */
    run_for(f, 300);
    assert_int_equal(kill(f->redis[0].pid, SIGSTOP), 0);
    addr_of(want, sizeof(want), &f->redis[1]);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY &&
                      strcmp(rs_redis_addr(f->r), want) == 0, 15000);
    assert_true(hist_has(f, RS_REDIS_DOWN, "moved"));
    link_write_ok(f, "after");
    free_all_and_check(f);
}

/* A master name no Sentinel monitors: DOWN with a reason that names it
 * and says how many Sentinels were asked; it keeps asking, no crash. */
static void
test_wrong_master_name(void **state)
{
    struct fixture *f = *state;

    pair_start(f);
    sentinels_start_all(f);
    url_make(f, "nosuchmaster", NULL);
    link_open(f);
    LOOP_UNTIL(f, f->n_state >= 4, WATCHDOG_MS);
    assert_int_equal(f->hist[0], RS_REDIS_DOWN);
    assert_non_null(strstr(f->errs[0], "'nosuchmaster'"));
    assert_non_null(strstr(f->errs[0], "3 asked"));
    assert_non_null(strstr(f->errs[0], "does not know"));
    assert_int_equal(f->hist[1], RS_REDIS_RESOLVING);
    assert_int_equal(f->hist[2], RS_REDIS_DOWN);
    assert_string_equal(rs_redis_addr(f->r), "");
    free_all_and_check(f);
}

/* No Sentinel up: DOWN, asking again with backoff; once they are up the
 * link becomes READY by itself. */
static void
test_sentinels_down_then_up(void **state)
{
    struct fixture *f = *state;

    pair_start(f);
    url_make(f, MASTER, NULL);
    link_open(f);
    LOOP_UNTIL(f, f->n_state >= 2, WATCHDOG_MS);
    assert_int_equal(f->hist[0], RS_REDIS_DOWN);
    assert_non_null(strstr(f->errs[0], "3 asked"));
    assert_non_null(strstr(f->errs[0], MASTER));
    sentinels_start_all(f);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    link_write_ok(f, "up");
    free_all_and_check(f);
}

/* The node the link is on turns replica behind the Sentinels' back: a
 * write gets READONLY (its callback sees the error), the link drops and
 * asks again; ROLE keeps it off the replica until it is primary again. */
static void
test_readonly_reresolves(void **state)
{
    struct fixture *f = *state;
    const char *set[] = { "SET", "k", "v" };
    redisReply *rep;
    unsigned before;

    pair_start(f);
    sentinels_start_all(f);
    url_make(f, MASTER, NULL);
    link_open(f);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    rep = admin(f->redis[0].port, NULL, "REPLICAOF 127.0.0.1 %d",
                free_port());
    assert_non_null(rep);
    freeReplyObject(rep);
    before = f->n_state;
    link_cmd(f, 3, set);
    assert_int_equal(f->n_err, 1);
    assert_non_null(strstr(f->last_str, "READONLY"));
    LOOP_UNTIL(f, f->n_state > before, WATCHDOG_MS);
    assert_int_equal(f->hist[before], RS_REDIS_DOWN);
    assert_non_null(strstr(f->errs[before], "READONLY"));
    LOOP_UNTIL(f, hist_has(f, RS_REDIS_DOWN, "not the primary"),
               WATCHDOG_MS);
    rep = admin(f->redis[0].port, NULL, "REPLICAOF NO ONE");
    assert_non_null(rep);
    freeReplyObject(rep);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    link_write_ok(f, "again");
    free_all_and_check(f);
}

/* Sentinels with requirepass: the right sentinel-password resolves, a
 * wrong one is DOWN with AUTH's answer in the reason. */
static void
test_sentinel_password(void **state)
{
    struct fixture *f = *state;

    f->sent_pass = "s3cret";
    pair_start(f);
    sentinels_start_all(f);
    url_make(f, MASTER, "?sentinel-password=wrong");
    link_open(f);
    LOOP_UNTIL(f, f->n_state >= 1, WATCHDOG_MS);
    assert_int_equal(f->hist[0], RS_REDIS_DOWN);
    assert_non_null(strstr(f->errs[0], "AUTH"));
    rs_redis_free(f->r);
    f->r = NULL;
    url_make(f, MASTER, "?sentinel-password=s3cret");
    link_open(f);
    LOOP_UNTIL(f, rs_redis_state(f->r) == RS_REDIS_READY, WATCHDOG_MS);
    link_write_ok(f, "auth");
    free_all_and_check(f);
}

/* Teardown: freeing the link while it resolves, the watcher from inside
 * its own resolve callback, and one with a resolve in flight (callback
 * cancelled, exactly once): nothing left on the loop, ASan clean. The
 * resolve in flight asks a Sentinel that accepts and never answers: a
 * real one could answer within the loop's turns before the free (it did,
 * once, in CI). */
static void
test_free_midway(void **state)
{
    struct fixture *f = *state;
    struct rs_sentinel_node nodes[1];
    struct rs_sentinel_opts so;

    pair_start(f);
    sentinel_start(f, 0);
    url_make(f, MASTER, NULL);
    link_open(f);
    event_base_loop(f->base, EVLOOP_NONBLOCK);
    rs_redis_free(f->r);
    f->r = NULL;

    nodes[0] = (struct rs_sentinel_node){ "127.0.0.1", f->sent[0].port };
    memset(&so, 0, sizeof(so));
    so.nodes = nodes;
    so.n_nodes = 1;
    so.master = MASTER;
    so.on_switch = on_switch;
    so.ud = f;
    f->s = rs_sentinel_new(f->base, &so, NULL);
    assert_non_null(f->s);
    assert_int_equal(rs_sentinel_resolve(f->s, on_resolved_free, f), 0);
    LOOP_UNTIL(f, f->s == NULL, WATCHDOG_MS);
    assert_int_equal(f->n_resolved, 1);
    assert_int_equal(f->resolved_rc, 0);
    run_for(f, 100);

    int mute_port;
    int mute = tu_loopback_socket(8, &mute_port);   /* never answers */
    nodes[0] = (struct rs_sentinel_node){ "127.0.0.1", mute_port };
    f->s = rs_sentinel_new(f->base, &so, NULL);
    assert_non_null(f->s);
    assert_int_equal(rs_sentinel_resolve(f->s, on_resolved, f), 0);
    run_for(f, 50);                   /* connected, asked, waiting */
    assert_int_equal(f->n_resolved, 1);
    rs_sentinel_free(f->s);
    f->s = NULL;
    assert_int_equal(f->n_resolved, 2);
    assert_int_equal(f->resolved_rc, RS_ECANCELED);
    free_all_and_check(f);
    run_for(f, 100);
    assert_int_equal(f->n_resolved, 2);
    close(mute);
}

#define TS(name, fn) { name, fn, setup, teardown, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TS("sentinel/free_null_and_opts", test_free_null_and_opts),
        TS("sentinel/resolve_and_commands", test_resolve_and_commands),
        TS("sentinel/forced_failover", test_forced_failover),
        TS("sentinel/kill9_primary", test_kill9_primary),
        TS("sentinel/stopped_primary_idle_link",
           test_stopped_primary_idle_link),
        TS("sentinel/wrong_master_name", test_wrong_master_name),
        TS("sentinel/sentinels_down_then_up", test_sentinels_down_then_up),
        TS("sentinel/readonly_reresolves", test_readonly_reresolves),
        TS("sentinel/sentinel_password", test_sentinel_password),
        TS("sentinel/free_midway", test_free_midway),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests_name("sentinel", tests, NULL, NULL);
}
