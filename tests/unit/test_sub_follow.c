/* test_sub_follow.c - subscriber/follow.c (push channels, positions, gap
 * signals) against a REAL rshub and redis-server started from this build
 * tree (tu_hub.h), through the real WebSocket client (wsclient) and a real
 * ledger, apply and mirror in a temp dir. The hub keeps one entry a topic
 * (--backlog-max 1, trimmed 64 entries past it), so a topic published 66
 * times has a trim mark and a since= below it is a gap (4001); a since the
 * hub cannot parse is 4005 and a channel name it cannot hold 4004, all from
 * the real peer. The appliers are paused: what follow queues stays in the
 * ledger to be read. Every wait runs under a watchdog; every test counts
 * its callbacks exactly and ends with nothing left on the loop, clean under
 * ASan. */
#include "testutil.h"
#include "tu_httpd.h"
#include "tu_hub.h"

#include <curl/curl.h>
#include <event2/event.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apply.h"
#include "discovery.h"
#include "follow.h"
#include "ledger.h"
#include "mirror.h"
#include "pathmap.h"
#include "rs_alloc.h"
#include "rs_http.h"
#include "rs_wsclose.h"
#include "wsclient.h"

#define WATCHDOG_MS 10000u
#define KEY "http://example.com/follow/capabilitylist.xml"
#define TRIM_AT 66                  /* publishes that make a trim mark */
#define MAXPUB 80

/* ------------------------------------------------------------ fixture */

struct fx {
    struct tu_hub *g;
    struct tu_loop l;
    char *dir;
    char db[4200];
    struct ledger *ledger;
    struct mirror *mirror;
    struct pathmap *pm;
    struct rs_http *http;
    struct apply *a;
    struct wsclient *ws;
    struct follow *fo;
    /* callbacks */
    unsigned gaps, lives, ups, downs, frameworks;
    int last_code;
    char last_uri[256], last_why[300], up_uri[256];
    int64_t down_at[4];             /* when the first downs came
                                       (rs_time_mono_us) */
    enum rs_capability fw_cap[8];
    enum rs_change fw_change[8];
    char fw_loc[8][128];
    /* the test's topic */
    char topic[256];
    char chan[256];                 /* its ws:// channel URI */
    char ids[MAXPUB][64];           /* ids of its publishes, 1-based */
    int npub;
    pid_t node;                     /* a hub of the test's own, or 0 */
};

static void
on_gap(void *ud, const char *why)
{
    struct fx *f = ud;

    f->gaps++;
    snprintf(f->last_why, sizeof(f->last_why), "%s", why);
}

static void
on_live(void *ud)
{
    ((struct fx *)ud)->lives++;
}

static void
on_framework(void *ud, enum rs_capability cap, enum rs_change ch,
             const char *loc)
{
    struct fx *f = ud;

    if (f->frameworks < 8) {
        f->fw_cap[f->frameworks] = cap;
        f->fw_change[f->frameworks] = ch;
        snprintf(f->fw_loc[f->frameworks], sizeof(f->fw_loc[0]), "%s", loc);
    }
    f->frameworks++;
}

static void
on_channel(void *ud, const char *uri, const char *peer, bool up, int code,
           const char *why)
{
    struct fx *f = ud;

    (void)peer;
    assert_non_null(why);
    if (up) {
        f->ups++;
        snprintf(f->up_uri, sizeof(f->up_uri), "%s", uri);
        return;
    }
    if (f->downs < 4)
        f->down_at[f->downs] = rs_time_mono_us();
    f->downs++;
    f->last_code = code;
    snprintf(f->last_uri, sizeof(f->last_uri), "%s", uri);
}

static int
fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    struct mirror_opts mo = { .fsync = MIRROR_FSYNC_NONE };
    struct wsclient_opts wo = { 0 };
    char err[512], mdir[4200];

    assert_non_null(f);
    f->g = *state;
    tu_loop_init(&f->l);
    f->dir = tu_mkdtemp();
    snprintf(f->db, sizeof(f->db), "%s/state.db", f->dir);
    snprintf(mdir, sizeof(mdir), "%s/mirror", f->dir);
    f->ledger = ledger_open(f->db, 0, err, sizeof(err));
    if (f->ledger == NULL)
        fail_msg("ledger_open: %s", err);
    f->mirror = mirror_open(mdir, &mo, err, sizeof(err));
    if (f->mirror == NULL)
        fail_msg("mirror_open: %s", err);
    f->pm = pathmap_new();
    assert_non_null(f->pm);
    assert_int_equal(pathmap_add_prefix(f->pm, "http://example.com/", NULL),
                     0);
    f->http = rs_http_new(f->l.base, NULL);
    assert_non_null(f->http);
    struct apply_opts ao = {
        .base = f->l.base, .http = f->http, .ledger = f->ledger,
        .mirror = f->mirror, .pathmap = f->pm,
        /* one batch until apply_flush, unless the loop runs 0.9 s (not
         * 1 s or more: apply.c makes its timeval of commit_ms * 1000 us) */
        .commit_ms = 900,
    };
    f->a = apply_new(&ao, err, sizeof(err));
    if (f->a == NULL)
        fail_msg("apply_new: %s", err);
    apply_pause(f->a, true);        /* the rows stay to be read */
    wo.base = f->l.base;
    wo.connect_timeout_ms = 2000;
    f->ws = wsclient_new(&wo, err, sizeof(err));
    if (f->ws == NULL)
        fail_msg("wsclient_new: %s", err);
    *state = f;
    return 0;
}

static int
fx_teardown(void **state)
{
    struct fx *f = *state;
    struct tu_hub *g = f->g;

    follow_free(f->fo);
    wsclient_free(f->ws);
    tu_proc_stop(f->node);
    apply_free(f->a);
    rs_http_free(f->http);
    mirror_close(f->mirror);
    pathmap_free(f->pm);
    ledger_close(f->ledger);
    tu_loop_cleanup(&f->l);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    *state = g;
    return 0;
}

/* follow_new for the change channel at change[] and the framework channel
 * at framework[] (either NULL). */
static void
fx_follow(struct fx *f, const char *const *change,
          const char *const *framework)
{
    char err[256] = "";
    struct follow_opts o = {
        .base = f->l.base, .ledger = f->ledger, .apply = f->a, .ws = f->ws,
        .key = KEY, .change_ws = change, .framework_ws = framework,
        .on_gap = on_gap, .on_live = on_live, .on_framework = on_framework,
        .on_channel = on_channel, .ud = f,
    };

    f->fo = follow_new(&o, err, sizeof(err));
    if (f->fo == NULL)
        fail_msg("follow_new: %s", err);
}

static struct follow_stats
fx_stats(struct fx *f)
{
    struct follow_stats st;

    follow_stats(f->fo, &st);
    return st;
}

/* --------------------------------------------------------- documents */

#define NS "xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" " \
           "xmlns:rs=\"http://www.openarchives.org/rs/terms/\""

/* The URI of resource n of the test's topic. */
static void
res_uri(const struct fx *f, int n, char *buf, size_t bufsz)
{
    snprintf(buf, bufsz, "http://example.com/%s/r%d",
             f->topic + strlen("http://example.com/topics/"), n);
}

/* A change notification: resource n updated at dt. */
static char *
notif(const struct fx *f, int n, rs_time_t dt, size_t *len)
{
    char uri[300], when[RS_TIME_BUFSZ], *s = malloc(1024);
    int k;

    assert_non_null(s);
    res_uri(f, n, uri, sizeof(uri));
    assert_true(rs_time_format(dt, when) > 0);
    k = snprintf(s, 1024, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                 "<urlset " NS "><rs:ln rel=\"up\" href=\"" KEY "\"/>"
                 "<rs:md capability=\"changelist-notification\"/>"
                 "<url><loc>%s</loc><rs:md change=\"updated\" "
                 "datetime=\"%s\"/></url></urlset>\n", uri, when);
    assert_true(k > 0 && k < 1024);
    *len = (size_t)k;
    return s;
}

/* Name the test's topic (one per test: the hub outlives the tests). */
static void
fx_topic(struct fx *f, const char *name)
{
    snprintf(f->topic, sizeof(f->topic), "http://example.com/topics/%s",
             name);
    f->npub = 0;
    f->chan[0] = '\0';
}

/* Publish resource npub+1's change, dated dt, on the test's topic; its
 * id into f->ids[npub+1], the channel into f->chan. */
static void
fx_publish_at(struct fx *f, rs_time_t dt)
{
    size_t len;
    int n = ++f->npub;
    char *body;
    long st;

    assert_true(n < MAXPUB);
    body = notif(f, n, dt, &len);
    st = tu_hub_publish(f->g, f->topic, body, len, f->ids[n],
                        sizeof(f->ids[n]), f->chan, sizeof(f->chan));
    free(body);
    if (st != 202)
        fail_msg("publish %d: HTTP %ld", n, st);
    assert_true(strncmp(f->chan, "ws://127.0.0.1:", 15) == 0);
}

/* fx_publish_at, dated now */
static void
fx_publish(struct fx *f)
{
    fx_publish_at(f, rs_time_now());
}

/* A time mark strictly between the ids published so far and those to
 * come: the hub's ids are Redis's milliseconds. */
static rs_time_t
fx_mark(void)
{
    rs_time_t m;

    usleep(3000);
    m = rs_time_now();
    usleep(3000);
    return m;
}

static unsigned long long
id_ms(const char *id)
{
    return strtoull(id, NULL, 10);
}

static bool
has_todo(struct fx *f, int n)
{
    struct ledger_todo t;
    char uri[300], *buf = NULL;
    int rc;

    res_uri(f, n, uri, sizeof(uri));
    rc = ledger_todo_get(f->ledger, uri, &t, &buf);
    rs_free(buf);
    assert_true(rc == 0 || rc == RS_ENOTFOUND);
    return rc == 0;
}

/* The id held for the change channel (NULL: none; rs_free). */
static char *
pos_id(struct ledger *l, const char *which, rs_time_t *dt)
{
    char key[300], *id = NULL;

    snprintf(key, sizeof(key), "%s%s", KEY, which);
    assert_int_equal(ledger_pos_get(l, key, &id, dt), 0);
    return id;
}

static void
set_pos(struct fx *f, const char *id)
{
    assert_int_equal(apply_txn(f->a), 0);
    assert_int_equal(ledger_pos_set(f->ledger, KEY "#change", id,
                                    RS_TIME_NONE), 0);
}

/* A port nothing listens on. */
static int
closed_port(void)
{
    struct sockaddr_in sa = { .sin_family = AF_INET };
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    assert_true(fd >= 0);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* Publish until the hub trims the topic: its trim mark is then the id of
 * publish TRIM_AT - 1, and f->ids[] holds all. Returns a mark between the
 * last two publishes. */
static rs_time_t
fx_trimmed_topic(struct fx *f)
{
    rs_time_t m = RS_TIME_NONE;

    for (int i = 1; i <= TRIM_AT; i++) {
        if (i == TRIM_AT)
            m = fx_mark();
        fx_publish(f);
    }
    assert_true(id_ms(f->ids[TRIM_AT - 1]) < (unsigned long long)(m / 1000));
    assert_true((unsigned long long)(m / 1000) < id_ms(f->ids[TRIM_AT]));
    return m;
}

/* -------------------------------------------------------------- tests */

/* follow/resume_from_the_ledger: a channel with a stored id connects with
 * since=ID and gets only what came after it; each message becomes a todo
 * row and moves the position and the #source mark in the same batch (a
 * reader of the committed state sees neither, then both). */
static void
test_resume_from_the_ledger(void **state)
{
    struct fx *f = *state;
    struct ledger *ro;
    char err[256], *id;
    rs_time_t dt;

    fx_topic(f, "resume");
    fx_publish(f);
    fx_publish(f);
    fx_publish(f);
    set_pos(f, f->ids[2]);
    assert_int_equal(apply_flush(f->a), 0);
    const char *uris[] = { f->chan, NULL };
    fx_follow(f, uris, NULL);
    follow_start(f->fo, RS_TIME_NONE);
    TU_LOOP_UNTIL(&f->l, fx_stats(f).notifications == 1, WATCHDOG_MS);

    ro = ledger_open(f->db, LEDGER_READONLY, err, sizeof(err));
    assert_non_null(ro);
    id = pos_id(ro, "#change", NULL);
    assert_string_equal(id, f->ids[2]);         /* not committed yet */
    rs_free(id);
    assert_int_equal(apply_flush(f->a), 0);
    id = pos_id(ro, "#change", NULL);
    assert_string_equal(id, f->ids[3]);
    rs_free(id);
    id = pos_id(ro, "#source", &dt);
    assert_null(id);
    assert_true(dt != RS_TIME_NONE);
    ledger_close(ro);
    assert_true(has_todo(f, 3));
    assert_false(has_todo(f, 2));
    assert_false(has_todo(f, 1));

    tu_loop_run_for(&f->l, 200);                /* nothing more comes */
    struct follow_stats st = fx_stats(f);
    assert_int_equal(st.notifications, 1);
    assert_int_equal(st.duplicates, 0);
    assert_int_equal(st.reconnects, 1);
    assert_true(st.connected[DISCOVERY_CHANGE]);
    assert_false(st.connected[DISCOVERY_FRAMEWORK]);
    assert_true(st.down_since_us == 0);
    assert_int_equal(f->ups, 1);
    assert_string_equal(f->up_uri, f->chan);
    assert_int_equal(f->downs + f->gaps + f->lives, 0);
}

/* follow/start_from_the_mark: a channel without a position asks for what
 * the hub accepted after the mark (since=MS-0): what came before it is
 * the caller's pull's, and is not taken again. */
static void
test_start_from_the_mark(void **state)
{
    struct fx *f = *state;
    rs_time_t mark;

    fx_topic(f, "mark");
    fx_publish(f);
    mark = fx_mark();
    fx_publish(f);
    fx_publish(f);
    const char *uris[] = { f->chan, NULL };
    fx_follow(f, uris, NULL);
    follow_start(f->fo, mark);
    TU_LOOP_UNTIL(&f->l, fx_stats(f).notifications == 2, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 200);
    assert_int_equal(fx_stats(f).notifications, 2);
    assert_false(has_todo(f, 1));
    assert_true(has_todo(f, 2));
    assert_true(has_todo(f, 3));
    char *id = pos_id(f->ledger, "#change", NULL);
    assert_string_equal(id, f->ids[3]);
    rs_free(id);
    assert_int_equal(f->ups, 1);
    assert_int_equal(f->downs + f->gaps, 0);
}

/* follow/future_dated: a notification dated beyond our clock's skew (a
 * Source's clock years ahead, or anyone publishing on an open hub) is
 * taken as of now and counted: taken as it came, it moved the #source mark
 * to 2099 and the resource's change time with it, and every later change
 * looked older (rssub blind until then). The change after it is taken. */
static void
test_future_dated(void **state)
{
    struct fx *f = *state;
    rs_time_t dt, before = rs_time_now();

    fx_topic(f, "future");
    fx_publish_at(f, rs_time_now() + 75LL * 365 * 86400 * 1000000);
    const char *uris[] = { f->chan, NULL };
    fx_follow(f, uris, NULL);
    follow_start(f->fo, before - 1000000);
    TU_LOOP_UNTIL(&f->l, fx_stats(f).notifications == 1, WATCHDOG_MS);
    fx_publish(f);
    TU_LOOP_UNTIL(&f->l, fx_stats(f).notifications == 2, WATCHDOG_MS);
    rs_time_t after = rs_time_now();
    assert_int_equal(fx_stats(f).future, 1);
    assert_int_equal(apply_flush(f->a), 0);
    char *id = pos_id(f->ledger, "#source", &dt);
    rs_free(id);
    assert_true(dt >= before && dt <= after);
    struct ledger_todo t;
    char uri[300], *buf = NULL;
    res_uri(f, 1, uri, sizeof(uri));
    assert_int_equal(ledger_todo_get(f->ledger, uri, &t, &buf), 0);
    assert_true(t.change_dt >= before && t.change_dt <= after);
    rs_free(buf);
    assert_true(has_todo(f, 2));
}

/* follow/repeats_dropped: a position ahead of the hub (a clock ahead of
 * Redis's) is read by the hub as "now"; what it sends then has ids at or
 * below the position and is dropped as a repeat: no row, the position
 * stays. */
static void
test_repeats_dropped(void **state)
{
    struct fx *f = *state;
    char ahead[64];

    fx_topic(f, "repeats");
    fx_publish(f);                  /* the channel exists */
    snprintf(ahead, sizeof(ahead), "%llu-0",
             (unsigned long long)(rs_time_now() / 1000 + 600000));
    set_pos(f, ahead);
    const char *uris[] = { f->chan, NULL };
    fx_follow(f, uris, NULL);
    follow_start(f->fo, RS_TIME_NONE);
    TU_LOOP_UNTIL(&f->l, f->ups == 1, WATCHDOG_MS);
    rs_time_t last = fx_stats(f).last_message;
    fx_publish(f);
    TU_LOOP_UNTIL(&f->l, fx_stats(f).duplicates == 1, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 100);
    struct follow_stats st = fx_stats(f);
    assert_int_equal(st.duplicates, 1);
    assert_int_equal(st.notifications, 0);
    assert_true(st.last_message == last);       /* a repeat is no news */
    assert_false(has_todo(f, 1));
    assert_false(has_todo(f, 2));
    char *id = pos_id(f->ledger, "#change", NULL);
    assert_string_equal(id, ahead);
    rs_free(id);
}

/* follow/gap_then_resume: a position older than the hub's backlog is
 * closed 4001 (rshub opens the connection, then closes it): on_gap once,
 * the channel waits (no reconnect of its own, down_since_us set) until
 * follow_resume, which replays from the mark given: only what came after
 * it. */
static void
test_gap_then_resume(void **state)
{
    struct fx *f = *state;
    rs_time_t mark, before;

    fx_topic(f, "gap");
    mark = fx_trimmed_topic(f);
    set_pos(f, "1-0");
    const char *uris[] = { f->chan, NULL };
    fx_follow(f, uris, NULL);
    before = rs_time_mono_us();
    follow_start(f->fo, RS_TIME_NONE);
    TU_LOOP_UNTIL(&f->l, f->gaps == 1, WATCHDOG_MS);
    assert_non_null(strstr(f->last_why, "4001"));
    assert_int_equal(f->downs, 1);
    assert_int_equal(f->last_code, RS_WSCLOSE_GAP);
    tu_loop_run_for(&f->l, 300);
    struct follow_stats st = fx_stats(f);
    assert_int_equal(st.gaps, 1);
    assert_int_equal(st.reconnects, 1);         /* waits for the caller */
    assert_false(st.connected[DISCOVERY_CHANGE]);
    assert_true(st.down_since_us >= before &&
                st.down_since_us <= rs_time_mono_us());

    follow_resume(f->fo, mark);
    TU_LOOP_UNTIL(&f->l, fx_stats(f).notifications == 1, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 200);
    st = fx_stats(f);
    assert_int_equal(st.notifications, 1);
    assert_int_equal(st.gaps, 1);
    assert_int_equal(st.reconnects, 2);
    assert_true(st.down_since_us == 0);
    assert_true(has_todo(f, TRIM_AT));
    assert_false(has_todo(f, TRIM_AT - 1));
    char *id = pos_id(f->ledger, "#change", NULL);
    assert_string_equal(id, f->ids[TRIM_AT]);
    rs_free(id);
    assert_int_equal(f->ups, 1);      /* not the one rshub closed 4001 */
    assert_int_equal(f->downs, 1);
    assert_int_equal(f->lives, 0);
}

/* follow/second_gap_goes_live: when the mark itself is older than the
 * backlog (a second 4001 before any message), the next resume connects
 * live, asks on_live once the channel is open (the caller's pull covers
 * the seam), and takes what comes from then on, replaying nothing. */
static void
test_second_gap_goes_live(void **state)
{
    struct fx *f = *state;
    rs_time_t old = rs_time_now() - 1000000;

    fx_topic(f, "gap2");
    (void)fx_trimmed_topic(f);
    set_pos(f, "1-0");
    const char *uris[] = { f->chan, NULL };
    fx_follow(f, uris, NULL);
    follow_start(f->fo, RS_TIME_NONE);
    TU_LOOP_UNTIL(&f->l, f->gaps == 1, WATCHDOG_MS);
    follow_resume(f->fo, old);
    TU_LOOP_UNTIL(&f->l, f->gaps == 2, WATCHDOG_MS);
    assert_int_equal(f->lives, 0);
    follow_resume(f->fo, old);
    TU_LOOP_UNTIL(&f->l, f->lives == 1, WATCHDOG_MS);
    assert_int_equal(f->ups, 1);
    fx_publish(f);
    TU_LOOP_UNTIL(&f->l, fx_stats(f).notifications == 1, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 200);
    struct follow_stats st = fx_stats(f);
    assert_int_equal(st.notifications, 1);
    assert_int_equal(st.gaps, 2);
    assert_int_equal(st.reconnects, 3);
    assert_int_equal(f->lives, 1);
    assert_int_equal(f->downs, 2);
    assert_true(has_todo(f, TRIM_AT + 1));
    assert_false(has_todo(f, TRIM_AT));
}

/* follow/bad_since_is_a_gap: a position the hub cannot parse is closed
 * 4005, handled like a gap: on_gap, then follow_resume replays from the
 * mark. */
static void
test_bad_since_is_a_gap(void **state)
{
    struct fx *f = *state;
    rs_time_t mark;

    fx_topic(f, "badsince");
    mark = fx_mark();
    fx_publish(f);
    set_pos(f, "not-an-id");
    const char *uris[] = { f->chan, NULL };
    fx_follow(f, uris, NULL);
    follow_start(f->fo, RS_TIME_NONE);
    TU_LOOP_UNTIL(&f->l, f->gaps == 1, WATCHDOG_MS);
    assert_int_equal(f->last_code, RS_WSCLOSE_BAD_SINCE);
    assert_int_equal(fx_stats(f).gaps, 1);
    follow_resume(f->fo, mark);
    TU_LOOP_UNTIL(&f->l, fx_stats(f).notifications == 1, WATCHDOG_MS);
    assert_true(has_todo(f, 1));
    assert_int_equal(f->ups, 1);
    assert_int_equal(f->downs, 1);
    assert_int_equal(f->gaps, 1);
    assert_int_equal(f->lives, 0);
}

static void
gap_within(rs_time_t us, long lo_ms, long hi_ms)
{
    if (us < lo_ms * 1000LL || us >= hi_ms * 1000LL)
        fail_msg("waited %lld ms, want %ld to %ld", (long long)(us / 1000),
                 lo_ms, hi_ms);
}

/* Follow a channel rshub refuses with 4004 (a name it cannot hold): it
 * accepts the upgrade, then closes. */
static void
fx_follow_refused(struct fx *f, char *bad, size_t badsz)
{
    snprintf(bad, badsz, "ws://127.0.0.1:%d/channel/no+such", f->g->ws_port);
    const char *uris[] = { bad, NULL };
    fx_follow(f, uris, NULL);
    follow_start(f->fo, RS_TIME_NONE);
    TU_LOOP_UNTIL(&f->l, f->downs == 1, WATCHDOG_MS);
    assert_int_equal(f->last_code, RS_WSCLOSE_UNKNOWN_CHANNEL);
    assert_int_equal(fx_stats(f).reconnects, 1);
}

/* follow/unknown_channel_backs_off: a channel the hub refuses with 4004 is
 * tried again on the same URI after a second (not the 100 ms of other
 * closes), then after two: "retried from 1 s, doubling to a minute"
 * (docs/subscriber.md); never a gap. */
static void
test_unknown_channel_backs_off(void **state)
{
    struct fx *f = *state;
    char bad[128];

    fx_follow_refused(f, bad, sizeof(bad));
    tu_loop_run_for(&f->l, 800);
    assert_int_equal(fx_stats(f).reconnects, 1);        /* still waiting */
    TU_LOOP_UNTIL(&f->l, f->downs == 2, WATCHDOG_MS);
    /* libevent times the pause from its loop turn's cached time, which
     * came a little before the close was seen: 950 ms, not 1000 */
    gap_within(f->down_at[1] - f->down_at[0], 950, 1900);
    assert_string_equal(f->last_uri, bad);
    TU_LOOP_UNTIL(&f->l, f->downs == 3, WATCHDOG_MS);
    gap_within(f->down_at[2] - f->down_at[1], 1950, 2900);
    struct follow_stats st = fx_stats(f);
    assert_int_equal(st.reconnects, 3);
    assert_int_equal(st.gaps, 0);
    assert_false(st.connected[DISCOVERY_CHANGE]);
    assert_int_equal(f->gaps + f->lives, 0);
}

/* follow/refused_channel_stays_down: while the hub keeps refusing the
 * channel, the channel is down since the first refusal (down_since_us), not
 * since the last: that is what lets --push-timeout hand the Source over
 * to polling (session.c, transport_now). */
static void
test_refused_channel_stays_down(void **state)
{
    struct fx *f = *state;
    char bad[128];

    fx_follow_refused(f, bad, sizeof(bad));
    TU_LOOP_UNTIL(&f->l, f->downs == 2, WATCHDOG_MS);
    struct follow_stats st = fx_stats(f);
    assert_false(st.connected[DISCOVERY_CHANGE]);
    assert_true(st.down_since_us != 0);
    assert_true(st.down_since_us <= f->down_at[0]);
    assert_int_equal(f->gaps + f->lives, 0);
}

/* follow/next_uri_after_a_failure: a channel with several URIs (nodes of
 * one hub) goes to the next one when a connection fails, after a short
 * pause, and follows from there. */
static void
test_next_uri_after_a_failure(void **state)
{
    struct fx *f = *state;
    char dead[128];

    fx_topic(f, "nexturi");
    fx_publish(f);
    snprintf(dead, sizeof(dead), "ws://127.0.0.1:%d/channel/x",
             closed_port());
    const char *uris[] = { dead, f->chan, NULL };
    fx_follow(f, uris, NULL);
    follow_start(f->fo, RS_TIME_NONE);
    TU_LOOP_UNTIL(&f->l, f->ups == 1, WATCHDOG_MS);
    assert_int_equal(f->downs, 1);
    assert_string_equal(f->last_uri, dead);
    assert_int_equal(f->last_code, WSCLIENT_ABNORMAL);
    assert_string_equal(f->up_uri, f->chan);
    fx_publish(f);
    TU_LOOP_UNTIL(&f->l, fx_stats(f).notifications == 1, WATCHDOG_MS);
    assert_true(has_todo(f, 2));
    assert_false(has_todo(f, 1));   /* no position, no mark: live */
    assert_int_equal(fx_stats(f).reconnects, 2);
    assert_int_equal(f->gaps, 0);
}

/* follow/hub_restart_resumes_from_last: a hub node that shuts down closes
 * 1001; the channel goes to the next node of the cluster with since= the
 * id it holds, and what was published meanwhile arrives once. */
static void
test_hub_restart_resumes_from_last(void **state)
{
    struct fx *f = *state;
    int ws_port = 0;
    char other[256];

    fx_topic(f, "restart");
    fx_publish(f);
    /* a second node of the same cluster (same Redis prefix) */
    (void)tu_hub_spawn(f->g, 0, "rshub:", NULL, &f->node, &ws_port);
    const char *name = strstr(f->chan, "/channel/");
    assert_non_null(name);
    snprintf(other, sizeof(other), "ws://127.0.0.1:%d%s", ws_port, name);
    const char *uris[] = { other, f->chan, NULL };
    fx_follow(f, uris, NULL);
    follow_start(f->fo, fx_mark() - 60000000);
    TU_LOOP_UNTIL(&f->l, fx_stats(f).notifications == 1, WATCHDOG_MS);
    assert_string_equal(f->up_uri, other);
    tu_proc_stop(f->node);
    f->node = 0;
    TU_LOOP_UNTIL(&f->l, f->downs == 1, WATCHDOG_MS);
    assert_int_equal(f->last_code, RS_WSCLOSE_GOING_AWAY);
    fx_publish(f);
    TU_LOOP_UNTIL(&f->l, fx_stats(f).notifications == 2, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 200);
    struct follow_stats st = fx_stats(f);
    assert_int_equal(st.notifications, 2);
    assert_int_equal(st.duplicates, 0);
    assert_int_equal(st.reconnects, 2);
    assert_int_equal(f->ups, 2);
    assert_string_equal(f->up_uri, f->chan);
    assert_true(has_todo(f, 1));
    assert_true(has_todo(f, 2));
    char *id = pos_id(f->ledger, "#change", NULL);
    assert_string_equal(id, f->ids[2]);
    rs_free(id);
}

/* follow/set_uris_moves_the_channel: new URIs close the old connection
 * (no callback from it), clear the id held (it belongs to the old
 * stream) and replay the new channel from the mark given; the same URIs
 * again change nothing; none turn the channel off. */
static void
test_set_uris_moves_the_channel(void **state)
{
    struct fx *f = *state;
    char chan_a[256];
    rs_time_t mark;
    int a1;

    fx_topic(f, "move-a");
    fx_publish(f);
    a1 = f->npub;
    snprintf(chan_a, sizeof(chan_a), "%s", f->chan);
    const char *uris_a[] = { chan_a, NULL };
    fx_follow(f, uris_a, NULL);
    follow_start(f->fo, fx_mark() - 60000000);
    TU_LOOP_UNTIL(&f->l, fx_stats(f).notifications == 1, WATCHDOG_MS);
    assert_true(has_todo(f, a1));

    fx_topic(f, "move-b");
    fx_publish(f);
    mark = fx_mark();
    fx_publish(f);
    const char *uris_b[] = { f->chan, NULL };
    assert_int_equal(follow_set_uris(f->fo, DISCOVERY_CHANGE, uris_b, mark),
                     0);
    char *id = pos_id(f->ledger, "#change", NULL);
    assert_null(id);
    TU_LOOP_UNTIL(&f->l, fx_stats(f).notifications == 2, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 200);
    assert_int_equal(fx_stats(f).notifications, 2);
    assert_false(has_todo(f, 1));   /* move-b's first: before the mark */
    assert_true(has_todo(f, 2));
    id = pos_id(f->ledger, "#change", NULL);
    assert_string_equal(id, f->ids[2]);
    rs_free(id);
    assert_int_equal(f->ups, 2);
    assert_string_equal(f->up_uri, f->chan);
    assert_int_equal(f->downs, 0);

    /* the same URIs: nothing happens */
    assert_int_equal(follow_set_uris(f->fo, DISCOVERY_CHANGE, uris_b, mark),
                     0);
    tu_loop_run_for(&f->l, 100);
    assert_int_equal(fx_stats(f).reconnects, 2);
    assert_true(fx_stats(f).connected[DISCOVERY_CHANGE]);

    /* none: off, and not "down" */
    assert_int_equal(follow_set_uris(f->fo, DISCOVERY_CHANGE, NULL,
                                     RS_TIME_NONE), 0);
    tu_loop_run_for(&f->l, 100);
    struct follow_stats st = fx_stats(f);
    assert_false(st.connected[DISCOVERY_CHANGE]);
    assert_true(st.down_since_us == 0);
    assert_int_equal(st.reconnects, 2);
    assert_int_equal(f->ups + f->downs, 2);
}

/* follow/take_websub: a body handed over (WebSub) queues its changes
 * without moving any position or the #source mark; a framework
 * notification is told entry by entry; anything else is refused and
 * counted. */
static void
test_take_websub(void **state)
{
    struct fx *f = *state;
    size_t len;
    char *body, *fw, *id = NULL;
    rs_time_t dt;

    fx_topic(f, "take");
    fx_follow(f, NULL, NULL);
    follow_start(f->fo, RS_TIME_NONE);
    body = notif(f, 1, rs_time_now(), &len);
    assert_int_equal(follow_take(f->fo, body, len, "websub"), 0);
    free(body);
    assert_true(has_todo(f, 1));
    assert_int_equal(ledger_pos_get(f->ledger, KEY "#source", &id, &dt),
                     RS_ENOTFOUND);
    assert_int_equal(ledger_pos_get(f->ledger, KEY "#change", &id, &dt),
                     RS_ENOTFOUND);

    assert_int_equal(follow_take(f->fo, "not xml", 7, "websub"),
                     RS_EINVALID);
    const char *rl = "<urlset " NS "><rs:md capability=\"resourcelist\" "
                     "at=\"2020-01-01T00:00:00Z\"/></urlset>";
    assert_int_equal(follow_take(f->fo, rl, strlen(rl), "websub"),
                     RS_EINVALID);

    fw = tu_read_data("valid/notif-2017-framework-notification-index.xml",
                      &len);
    assert_int_equal(follow_take(f->fo, fw, len, "websub"), 0);
    free(fw);
    assert_int_equal(f->frameworks, 7);
    assert_int_equal(f->fw_cap[0], RS_CAP_RESOURCELIST);
    assert_int_equal(f->fw_change[0], RS_CHANGE_CREATED);
    assert_string_equal(f->fw_loc[0],
                        "http://example.com/dataset1/resourcelist-part3.xml");
    assert_int_equal(f->fw_cap[3], RS_CAP_CHANGELIST);
    assert_int_equal(f->fw_change[3], RS_CHANGE_UPDATED);
    assert_int_equal(f->fw_cap[5], RS_CAP_CAPABILITYLIST);
    assert_int_equal(f->fw_change[5], RS_CHANGE_DELETED);

    struct follow_stats st = fx_stats(f);
    assert_int_equal(st.notifications, 1);
    assert_int_equal(st.framework, 1);
    assert_int_equal(st.invalid, 2);
    assert_int_equal(st.reconnects, 0);
    assert_true(st.down_since_us == 0);   /* nothing followed */
    assert_int_equal(f->ups + f->downs + f->gaps, 0);
}

/* follow/framework_channel_and_free_open: the framework channel is
 * followed beside the change channel (its entries told, its own
 * position); follow_free with both open closes them without a callback. */
static void
test_framework_channel_and_free_open(void **state)
{
    struct fx *f = *state;
    char chan_c[256], fwid[64], fwchan[256];
    size_t len;
    char *fw;

    fx_topic(f, "free-change");
    fx_publish(f);
    snprintf(chan_c, sizeof(chan_c), "%s", f->chan);
    fw = tu_read_data("valid/notif-2017-framework-notification-index.xml",
                      &len);
    assert_int_equal(tu_hub_publish(f->g, "http://example.com/topics/fw",
                                    fw, len, fwid, sizeof(fwid), fwchan,
                                    sizeof(fwchan)), 202);
    const char *uc[] = { chan_c, NULL }, *uf[] = { fwchan, NULL };
    fx_follow(f, uc, uf);
    follow_start(f->fo, fx_mark() - 60000000);
    TU_LOOP_UNTIL(&f->l, f->ups == 2 && fx_stats(f).framework == 1 &&
                  fx_stats(f).notifications == 1, WATCHDOG_MS);
    struct follow_stats st = fx_stats(f);
    assert_true(st.connected[DISCOVERY_CHANGE]);
    assert_true(st.connected[DISCOVERY_FRAMEWORK]);
    assert_int_equal(f->frameworks, 7);
    char *id = pos_id(f->ledger, "#framework", NULL);
    assert_string_equal(id, fwid);
    rs_free(id);
    free(fw);

    follow_free(f->fo);
    f->fo = NULL;
    wsclient_free(f->ws);
    f->ws = NULL;
    tu_loop_run_for(&f->l, 100);
    assert_int_equal(f->ups, 2);
    assert_int_equal(f->downs + f->gaps + f->lives, 0);
    follow_free(NULL);
}

/* follow/id_cmp: hub ids compare as two numbers (not as strings); a
 * malformed id sorts first. */
static void
test_id_cmp(void **state)
{
    (void)state;
    assert_true(follow_id_cmp("1-2", "1-10") < 0);
    assert_true(follow_id_cmp("2-0", "1-99") > 0);
    assert_true(follow_id_cmp("10-0", "9-0") > 0);
    assert_int_equal(follow_id_cmp("5-5", "5-5"), 0);
    assert_int_equal(follow_id_cmp("5", "5-0"), 0);
    assert_true(follow_id_cmp("junk", "0-1") < 0);
}

/* follow/new_alloc_failures: follow_new fails cleanly (NULL, a reason,
 * nothing leaked) at every allocation it makes, then succeeds. */
static void
test_new_alloc_failures(void **state)
{
    struct fx *f = *state;
    const char *uris[] = { "ws://127.0.0.1:9/channel/a",
                           "ws://127.0.0.1:9/channel/b", NULL };
    struct follow_opts o = {
        .base = f->l.base, .ledger = f->ledger, .apply = f->a, .ws = f->ws,
        .key = KEY, .change_ws = uris, .framework_ws = uris, .ud = f,
    };
    struct follow *fo = NULL;
    unsigned long n;

    for (n = 1; n < 1000 && fo == NULL; n++) {
        char err[128] = "";
        tu_alloc_fail_at(n);
        fo = follow_new(&o, err, sizeof(err));
        tu_alloc_fail_at(0);
        if (fo == NULL)
            assert_true(err[0] != '\0');
    }
    assert_non_null(fo);
    assert_true(n > 2);
    follow_free(fo);
}

#define TEST(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

static int
grp_setup(void **state)
{
    static const char *const args[] = { "--backlog-max", "1", NULL };

    *state = tu_hub_new(args);
    return 0;
}

static int
grp_teardown(void **state)
{
    tu_hub_free(*state);
    return 0;
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        { "follow/resume_from_the_ledger", test_resume_from_the_ledger,
          fx_setup, fx_teardown, NULL },
        { "follow/start_from_the_mark", test_start_from_the_mark, fx_setup,
          fx_teardown, NULL },
        { "follow/repeats_dropped", test_repeats_dropped, fx_setup,
          fx_teardown, NULL },
        { "follow/future_dated", test_future_dated, fx_setup, fx_teardown,
          NULL },
        { "follow/gap_then_resume", test_gap_then_resume, fx_setup,
          fx_teardown, NULL },
        { "follow/second_gap_goes_live", test_second_gap_goes_live, fx_setup,
          fx_teardown, NULL },
        { "follow/bad_since_is_a_gap", test_bad_since_is_a_gap, fx_setup,
          fx_teardown, NULL },
        { "follow/unknown_channel_backs_off", test_unknown_channel_backs_off,
          fx_setup, fx_teardown, NULL },
        { "follow/refused_channel_stays_down",
          test_refused_channel_stays_down, fx_setup, fx_teardown, NULL },
        { "follow/next_uri_after_a_failure", test_next_uri_after_a_failure,
          fx_setup, fx_teardown, NULL },
        { "follow/hub_restart_resumes_from_last",
          test_hub_restart_resumes_from_last, fx_setup, fx_teardown, NULL },
        { "follow/set_uris_moves_the_channel",
          test_set_uris_moves_the_channel, fx_setup, fx_teardown, NULL },
        { "follow/take_websub", test_take_websub, fx_setup, fx_teardown,
          NULL },
        { "follow/framework_channel_and_free_open",
          test_framework_channel_and_free_open, fx_setup, fx_teardown, NULL },
        { "follow/id_cmp", test_id_cmp, NULL, NULL, NULL },
        { "follow/new_alloc_failures", test_new_alloc_failures, fx_setup,
          fx_teardown, NULL },
    };
    int rc;

    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rc = cmocka_run_group_tests_name("sub_follow", tests, grp_setup,
                                     grp_teardown);
    curl_global_cleanup();
    return rc;
}
