/* test_bridge_poller.c - one Source's poller (bridge/poller.c) against a
 * programmable Source on loopback (test_bridge_src.h) that holds its
 * answers back: one request in flight, no document asked for again within
 * --interval of its last answer, conditional GETs, a 503's Retry-After
 * honoured, errors counted and polling going on once the Source is well
 * again, garbage publishing nothing; history rewritten asking the mirrors
 * to reconcile (a Resource List "created"), at most once a minute per
 * list, a held ask kept in the state across restarts and sent once when
 * due; a Capability List switched to another Change List losing none of
 * the changes made meanwhile, across a restart in the middle. The hub is
 * unreachable: what is published stays in the outbox, where the tests
 * read it. */
#include "testutil.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poller.h"
#include "rs_doc.h"
#include "rs_http.h"
#include "rs_time.h"
#include "store.h"
#include "test_bridge_src.h"
#include "tu_httpd.h"

#define INTERVAL_MS 300
#define T0 (1735689600LL * 1000000)   /* 2025-01-01T00:00:00Z */
#define MINUTE_US (60LL * 1000000)

struct fx {
    struct tu_loop l;
    struct tbs *src;
    char *dir;
    struct store *st;
    struct rs_http *http, *hub_http;
    struct poller *p;
    int ready;
    const char *start;           /* the Source's URL (key); NULL: caplist */
};

static void
on_ready(void *ud)
{
    struct fx *f = ud;
    f->ready++;
}

static void
serve(struct fx *f, int n)
{
    char body[8192], e[512];
    size_t off = 0;
    body[0] = '\0';
    for (int i = 0; i < n; i++) {
        char dt[RS_TIME_BUFSZ], loc[64];
        assert_true(rs_time_format(1735689600LL * 1000000 +
                                   (rs_time_t)i * 1000000, dt) > 0);
        snprintf(loc, sizeof(loc), "{B}/data/r%d", i);
        tbs_change(e, sizeof(e), loc, "created", dt);
        off += (size_t)snprintf(body + off, sizeof(body) - off, "%s", e);
    }
    tbs_putf(f->src, "/cl.xml", "<urlset " TBS_NS "><rs:md capability="
             "\"changelist\" from=\"2025-01-01T00:00:00Z\"/>%s</urlset>",
             body);
}

static const char CAPLIST[] =
    "<urlset " TBS_NS "><rs:md capability=\"capabilitylist\"/>"
    "<url><loc>{B}/cl.xml</loc><rs:md capability=\"changelist\"/>"
    "</url></urlset>";
/* A Capability List that names a Resource List too: the one an ask to
 * reconcile is about. */
static const char CAPLIST_RL[] =
    "<urlset " TBS_NS "><rs:md capability=\"capabilitylist\"/>"
    "<url><loc>{B}/rl.xml</loc><rs:md capability=\"resourcelist\"/></url>"
    "<url><loc>{B}/cl.xml</loc><rs:md capability=\"changelist\"/>"
    "</url></urlset>";

/* A poller on the Source, started, read once: a start of the bridge. */
static void
poller_up(struct fx *f)
{
    struct rs_http_opts ho = { .user_agent = "rsbridge/test" };
    f->http = rs_http_new(f->l.base, &ho);
    f->hub_http = rs_http_new(f->l.base, &ho);
    assert_true(f->http != NULL && f->hub_http != NULL);
    struct poller_opts po = {
        .base = f->l.base,
        .http = f->http,
        .hub_http = f->hub_http,
        .st = f->st,
        .name = "src",
        .url = tbs_url(f->src, f->start != NULL ? f->start : "/caplist.xml"),
        .bridged = "http://bridge.example/s/src/",
        .hub = "http://127.0.0.1:1/hub",
        .interval_ms = INTERVAL_MS,
        .timeout_ms = 5000,
        .batch_ms = 1,
        .retry_max_ms = 1000,
        .on_ready = on_ready,
        .ud = f,
    };
    const char *perr = NULL;
    f->ready = 0;
    f->p = poller_new(&po, &perr);
    assert_non_null(f->p);
    poller_start(f->p);
    TU_LOOP_UNTIL(&f->l, f->ready == 1, 10000);
}

/* The poller stopped and gone (the state stays): an end of the bridge. */
static void
poller_down(struct fx *f)
{
    /* the answer held back goes out, later ones at once: then stop */
    int hold = f->src->hold_ms;
    f->src->hold_ms = 0;
    TU_LOOP_UNTIL(&f->l, f->src->inflight == 0, 3000);
    poller_drain(f->p);
    rs_http_free(f->http);
    rs_http_free(f->hub_http);
    poller_free(f->p);
    f->p = NULL;
    tu_loop_settle(&f->l);
    f->src->hold_ms = hold;
}

static int
setup_with(void **state, const char *caplist)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    tu_loop_init(&f->l);
    f->src = tbs_new(f->l.base);
    f->src->hold_ms = 100;
    tbs_put(f->src, "/caplist.xml", caplist);
    tbs_put(f->src, "/rl.xml",
            "<urlset " TBS_NS "><rs:md capability=\"resourcelist\" "
            "at=\"2025-01-01T00:00:00Z\"/></urlset>");
    serve(f, 2);
    f->dir = tu_mkdtemp();
    char db[600], err[256];
    snprintf(db, sizeof(db), "%s/bridge.db", f->dir);
    assert_int_equal(store_open(db, &f->st, err, sizeof(err)), 0);
    poller_up(f);
    *state = f;
    return 0;
}

static int
setup(void **state)
{
    return setup_with(state, CAPLIST);
}

/* A Source Description naming its Capability List by a URL that
 * redirects (301) to where it is: the poller starts from the SD. */
static const char SD_OLD[] =
    "<urlset " TBS_NS "><rs:md capability=\"description\"/>"
    "<url><loc>{B}/old/cap.xml</loc><rs:md capability=\"capabilitylist\"/>"
    "</url></urlset>";

static int
setup_redirect(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    tu_loop_init(&f->l);
    f->src = tbs_new(f->l.base);
    tbs_put(f->src, "/sd.xml", SD_OLD);
    tbs_put(f->src, "/new/cap.xml", CAPLIST);
    char loc[128];            /* under tbs_doc's headers */
    snprintf(loc, sizeof(loc), "Location: %s\n",
             tbs_url(f->src, "/new/cap.xml"));
    tbs_status(f->src, "/old/cap.xml", 301, loc);
    serve(f, 2);
    f->dir = tu_mkdtemp();
    char db[600], err[256];
    snprintf(db, sizeof(db), "%s/bridge.db", f->dir);
    assert_int_equal(store_open(db, &f->st, err, sizeof(err)), 0);
    f->start = "/sd.xml";
    poller_up(f);
    *state = f;
    return 0;
}

static int
setup_rl(void **state)
{
    return setup_with(state, CAPLIST_RL);
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    poller_down(f);
    store_free(f->st);
    tu_loop_settle(&f->l);
    tbs_free(f->src);
    tu_loop_cleanup(&f->l);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* poller/polite: one request in flight; no document asked for again
 * within --interval of the answer to its last request (counted from the
 * answer: a Source counts from when a request arrived, and a request may
 * leave a busy loop later than it was made); conditional GETs, and 304s
 * for what did not change. */
static void
test_polite(void **state)
{
    struct fx *f = *state;
    tu_loop_run_for(&f->l, 2500);
    assert_int_equal(f->src->max_inflight, 1);
    unsigned polls = tbs_count(f->src, "GET /cl.xml");
    assert_true(polls >= 3);
    for (size_t i = 0; i < f->src->nlog; i++) {
        for (size_t j = i + 1; j < f->src->nlog; j++) {
            if (strcmp(f->src->log[i], f->src->log[j]) != 0)
                continue;
            double gap = f->src->t0[j] - f->src->t1[i];
            if (gap < INTERVAL_MS / 1000.0 - 0.01)
                fail_msg("%s asked for again %.3f s after its answer",
                         f->src->log[j], gap);
            break;
        }
    }
    assert_true(f->src->not_modified >= polls - 1);
    struct poller_stats ps;
    poller_stats(f->p, &ps);
    assert_int_equal(ps.errors, 0);
    assert_true(ps.polls >= 3);
}

/* poller/retry_after: a 503 with Retry-After: 1 is a failed poll
 * (counted, its reason kept), and no request follows before a second has
 * passed; once the Source is well again, polls go on and the new entries
 * are found. */
static void
test_retry_after(void **state)
{
    struct fx *f = *state;
    tu_loop_run_for(&f->l, 400);
    tbs_status(f->src, "/cl.xml", 503, "Retry-After: 1\n");
    size_t from = f->src->nlog;
    struct poller_stats ps;
    tu_loop_arm(&f->l, 5000);
    do {
        event_base_loop(f->l.base, EVLOOP_ONCE);
        poller_stats(f->p, &ps);
    } while (ps.errors == 0 && !f->l.expired);
    tu_loop_disarm(&f->l);
    assert_int_equal(ps.errors, 1);
    assert_non_null(ps.last_error);
    assert_non_null(strstr(ps.last_error, "503"));
    tbs_status(f->src, "/cl.xml", 0, NULL);
    serve(f, 4);
    tu_loop_run_for(&f->l, 2000);
    size_t k = from;
    while (k < f->src->nlog && strcmp(f->src->log[k], "GET /cl.xml") != 0)
        k++;
    assert_true(k + 1 < f->src->nlog);
    double gap = f->src->t0[k + 1] - f->src->t1[k];
    if (gap < 0.99)
        fail_msg("the next request %.3f s after a Retry-After of 1 s", gap);
    poller_stats(f->p, &ps);
    assert_int_equal(ps.errors, 1);
    assert_true(ps.last_change != RS_TIME_NONE);   /* r2, r3 found */
    assert_int_equal(ps.outbox.pending[OUTBOX_CHANGE], 2);
}

/* poller/garbage: a document that is not ResourceSync fails the poll and
 * publishes nothing; polling goes on. */
static void
test_garbage(void **state)
{
    struct fx *f = *state;
    tbs_put(f->src, "/cl.xml", "\x01garbage<<<not xml");
    struct poller_stats ps;
    tu_loop_arm(&f->l, 5000);
    do {
        event_base_loop(f->l.base, EVLOOP_ONCE);
        poller_stats(f->p, &ps);
    } while (ps.errors == 0 && !f->l.expired);
    tu_loop_disarm(&f->l);
    assert_int_equal(ps.errors, 1);
    assert_int_equal(ps.outbox.pending[OUTBOX_CHANGE], 0);
    serve(f, 3);
    tu_loop_arm(&f->l, 5000);
    do {
        event_base_loop(f->l.base, EVLOOP_ONCE);
        poller_stats(f->p, &ps);
    } while (ps.outbox.pending[OUTBOX_CHANGE] == 0 && !f->l.expired);
    tu_loop_disarm(&f->l);
    assert_int_equal(ps.outbox.pending[OUTBOX_CHANGE], 1);
    assert_string_equal(poller_name(f->p), "src");
}

/* ---------------------------------------------- asks to reconcile */

/* Page n of a Change List paged with ?page=N (/cl.xml the first), one
 * entry r<S> for each S of secs, rel="next" to page next (0: none). */
static void
serve_page(struct fx *f, const char *key, int next, const int *secs,
           size_t n)
{
    char body[8192], e[512], ln[128] = "";
    size_t off = 0;
    body[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        char dt[RS_TIME_BUFSZ], loc[64];
        assert_true(rs_time_format(T0 + (rs_time_t)secs[i] * 1000000, dt) > 0);
        snprintf(loc, sizeof(loc), "{B}/data/r%d", secs[i]);
        tbs_change(e, sizeof(e), loc, "created", dt);
        off += (size_t)snprintf(body + off, sizeof(body) - off, "%s", e);
    }
    if (next > 0)
        snprintf(ln, sizeof(ln), "<rs:ln rel=\"next\" href=\"{B}/cl.xml?"
                 "page=%d\"/>", next);
    tbs_putf(f->src, key, "<urlset " TBS_NS "><rs:md capability="
             "\"changelist\" from=\"2025-01-01T00:00:00Z\"/>%s%s</urlset>",
             ln, body);
}

/* The Change List: one entry r<S> created at T0 + S seconds for each S of
 * secs (serve's r0, r1 are S 0, 1; a never-seen one older than the newest
 * is history rewritten). */
static void
serve_secs(struct fx *f, const int *secs, size_t n)
{
    serve_page(f, "/cl.xml", 0, secs, n);
}

/* Framework notifications waiting in the outbox (the hub is unreachable)
 * of capability cap, about loc (NULL: any). */
static int
fw_count(struct fx *f, enum rs_capability cap, const char *loc)
{
    static const char sql[] =
        "SELECT count(*) FROM outbox WHERE lane = ?1 AND cap = ?2 AND "
        "(?3 IS NULL OR loc = ?3)";
    sqlite3_stmt *q = store_stmt(f->st, sql);
    assert_non_null(q);
    sqlite3_bind_int(q, 1, OUTBOX_FRAMEWORK);
    sqlite3_bind_int(q, 2, (int)cap);
    if (loc != NULL)
        sqlite3_bind_text(q, 3, loc, -1, SQLITE_TRANSIENT);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    int n = sqlite3_column_int(q, 0);
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return n;
}

/* The Resource List's feed, as the state holds it. */
static void
rl_feed(struct fx *f, struct store_feed *out)
{
    int64_t src;
    bool fresh;
    assert_int_equal(store_source(f->st, "src", tbs_url(f->src,
                                                        "/caplist.xml"),
                                  &src, &fresh), 0);
    assert_false(fresh);
    assert_int_equal(store_feed_get(f->st, src, STORE_FEED_RESOURCES,
                                    tbs_url(f->src, "/rl.xml"), 0, out), 0);
}

/* An ask to reconcile held for the Resource List (its minute not up). */
static bool
rl_feed_held(struct fx *f)
{
    struct store_feed *fd = malloc(sizeof(*fd));
    assert_non_null(fd);
    rl_feed(f, fd);
    bool held = fd->ask_due != RS_TIME_NONE;
    free(fd);
    return held;
}

/* poller/reconcile_gate: history rewritten asks the mirrors to reconcile
 * with the Capability List's Resource List ("created"), besides the
 * Change List's "updated"; a second rewrite within the list's minute
 * holds the ask (in the state, due when the minute is up) and sends
 * nothing; a third joins the held one. */
static void
test_reconcile_gate(void **state)
{
    struct fx *f = *state;
    char rl[256];
    snprintf(rl, sizeof(rl), "%s", tbs_url(f->src, "/rl.xml"));
    static const int base[] = { 0, 1, 10, 11 }, rw1[] = { 0, 1, 5, 10, 11 },
                     rw2[] = { 0, 1, 5, 6, 10, 11 },
                     rw3[] = { 0, 1, 5, 6, 7, 10, 11 };
    serve_secs(f, base, 4);
    tu_loop_run_for(&f->l, 3 * INTERVAL_MS);
    assert_int_equal(fw_count(f, RS_CAP_CHANGELIST, NULL), 0);
    assert_int_equal(fw_count(f, RS_CAP_RESOURCELIST, NULL), 0);

    serve_secs(f, rw1, 5);
    TU_LOOP_UNTIL(&f->l, fw_count(f, RS_CAP_CHANGELIST, NULL) == 1, 5000);
    assert_int_equal(fw_count(f, RS_CAP_RESOURCELIST, rl), 1);
    struct store_feed *fd = malloc(sizeof(*fd));
    assert_non_null(fd);
    rl_feed(f, fd);
    rs_time_t told = fd->fw_at;
    assert_true(told != RS_TIME_NONE);
    assert_true(fd->ask_due == RS_TIME_NONE);

    serve_secs(f, rw2, 6);
    TU_LOOP_UNTIL(&f->l, fw_count(f, RS_CAP_CHANGELIST, NULL) == 2, 5000);
    assert_int_equal(fw_count(f, RS_CAP_RESOURCELIST, NULL), 1);
    rl_feed(f, fd);
    assert_true(fd->fw_at == told);
    assert_true(fd->ask_due == told + MINUTE_US);

    serve_secs(f, rw3, 7);
    TU_LOOP_UNTIL(&f->l, fw_count(f, RS_CAP_CHANGELIST, NULL) == 3, 5000);
    tu_loop_run_for(&f->l, 3 * INTERVAL_MS);
    assert_int_equal(fw_count(f, RS_CAP_RESOURCELIST, NULL), 1);
    rl_feed(f, fd);
    assert_true(fd->ask_due == told + MINUTE_US);   /* one ask, one due */
    free(fd);
}

/* poller/reconcile_due_later: a held ask due in the future survives a
 * restart and goes out when it is due, not before, once. */
static void
test_reconcile_due_later(void **state)
{
    struct fx *f = *state;
    char rl[256];
    snprintf(rl, sizeof(rl), "%s", tbs_url(f->src, "/rl.xml"));
    static const int base[] = { 0, 1, 10, 11 }, rw1[] = { 0, 1, 5, 10, 11 },
                     rw2[] = { 0, 1, 5, 6, 10, 11 };
    serve_secs(f, base, 4);
    tu_loop_run_for(&f->l, 3 * INTERVAL_MS);
    serve_secs(f, rw1, 5);
    TU_LOOP_UNTIL(&f->l, fw_count(f, RS_CAP_RESOURCELIST, rl) == 1, 5000);
    serve_secs(f, rw2, 6);
    TU_LOOP_UNTIL(&f->l, fw_count(f, RS_CAP_CHANGELIST, NULL) == 2, 5000);
    struct store_feed *fd = malloc(sizeof(*fd));
    assert_non_null(fd);
    rl_feed(f, fd);
    assert_true(fd->ask_due != RS_TIME_NONE);

    /* the bridge stops; its minute is nearly up when it starts again */
    poller_down(f);
    rs_time_t due = rs_time_now() + 1500000;
    assert_int_equal(store_feed_told(f->st, fd->id, fd->fw_at, due), 0);
    poller_up(f);
    while (rs_time_now() < due - 300000)
        tu_loop_run_for(&f->l, 50);
    assert_int_equal(fw_count(f, RS_CAP_RESOURCELIST, NULL), 1);
    TU_LOOP_UNTIL(&f->l, fw_count(f, RS_CAP_RESOURCELIST, rl) == 2, 5000);
    assert_true(rs_time_now() >= due);
    rl_feed(f, fd);
    assert_true(fd->ask_due == RS_TIME_NONE);
    assert_true(fd->fw_at >= due);
    tu_loop_run_for(&f->l, 3 * INTERVAL_MS);
    assert_int_equal(fw_count(f, RS_CAP_RESOURCELIST, NULL), 2);
    free(fd);
}

/* poller/reconcile_due_past: a held ask whose time passed while the
 * bridge was down goes out at the start, once: not again at the next
 * start. */
static void
test_reconcile_due_past(void **state)
{
    struct fx *f = *state;
    char rl[256];
    snprintf(rl, sizeof(rl), "%s", tbs_url(f->src, "/rl.xml"));
    struct store_feed *fd = malloc(sizeof(*fd));
    assert_non_null(fd);
    rl_feed(f, fd);               /* the first poll made it */
    poller_down(f);
    rs_time_t now = rs_time_now();
    assert_int_equal(store_feed_told(f->st, fd->id, now - 2 * MINUTE_US,
                                     now - MINUTE_US), 0);
    poller_up(f);
    TU_LOOP_UNTIL(&f->l, fw_count(f, RS_CAP_RESOURCELIST, rl) == 1, 3000);
    rl_feed(f, fd);
    assert_true(fd->ask_due == RS_TIME_NONE);
    tu_loop_run_for(&f->l, 3 * INTERVAL_MS);
    poller_down(f);
    poller_up(f);
    tu_loop_run_for(&f->l, 3 * INTERVAL_MS);
    assert_int_equal(fw_count(f, RS_CAP_RESOURCELIST, NULL), 1);
    assert_int_equal(fw_count(f, RS_CAP_CHANGELIST, NULL), 0);
    free(fd);
}

/* poller/reconcile_no_rl: history rewritten at a Capability List that
 * names no Resource List: the Change List's "updated", nothing to ask. */
static void
test_reconcile_no_rl(void **state)
{
    struct fx *f = *state;
    static const int base[] = { 0, 1, 10, 11 }, rw1[] = { 0, 1, 5, 10, 11 };
    serve_secs(f, base, 4);
    tu_loop_run_for(&f->l, 3 * INTERVAL_MS);
    serve_secs(f, rw1, 5);
    TU_LOOP_UNTIL(&f->l, fw_count(f, RS_CAP_CHANGELIST, NULL) == 1, 5000);
    tu_loop_run_for(&f->l, 2 * INTERVAL_MS);
    assert_int_equal(fw_count(f, RS_CAP_RESOURCELIST, NULL), 0);
}

static int64_t
pending(struct fx *f)
{
    struct poller_stats ps;
    poller_stats(f->p, &ps);
    return ps.outbox.pending[OUTBOX_CHANGE];
}

/* poller/chain_gone_answered_with_the_first_page: a paged Change List
 * known as four pages loses its fourth, and the server answers the
 * unknown ?page=4 with the first page (as servers that ignore a bad
 * query value do): the tail-first walk meets page 2 twice and fails, and
 * forgets the chain, so the next walk reads forwards and finds the new
 * entry on page 3 - not every poll failing the same way forever. */
static void
test_chain_gone(void **state)
{
    struct fx *f = *state;
    static const int p1[] = { 1 }, p2[] = { 2 }, p3[] = { 3 }, p4[] = { 4 },
                     p3b[] = { 3, 30 };
    serve_page(f, "/cl.xml", 2, p1, 1);
    serve_page(f, "/cl.xml?page=2", 3, p2, 1);
    serve_page(f, "/cl.xml?page=3", 4, p3, 1);
    serve_page(f, "/cl.xml?page=4", 0, p4, 1);
    /* read forwards once, then from the tail */
    TU_LOOP_UNTIL(&f->l, tbs_count(f->src, "GET /cl.xml?page=4") >= 2, 5000);
    tu_loop_run_for(&f->l, INTERVAL_MS);
    int64_t before = pending(f);
    serve_page(f, "/cl.xml?page=3", 0, p3b, 2);
    serve_page(f, "/cl.xml?page=4", 2, p1, 1);
    TU_LOOP_UNTIL(&f->l, pending(f) == before + 1, 8000);
}

/* poller/changelist_moved: the Capability List names another Change
 * List and the old one answers 404: the Capability List is read again
 * (rediscovery), and the new Change List is followed (its first walk a
 * baseline, then its changes published) - not the old URL retried
 * forever. */
static void
test_changelist_moved(void **state)
{
    struct fx *f = *state;
    static const int c2[] = { 0, 1 }, c2b[] = { 0, 1, 2 };
    tu_loop_run_for(&f->l, INTERVAL_MS);
    tbs_put(f->src, "/caplist.xml",
            "<urlset " TBS_NS "><rs:md capability=\"capabilitylist\"/>"
            "<url><loc>{B}/cl2.xml</loc><rs:md capability=\"changelist\"/>"
            "</url></urlset>");
    tbs_drop(f->src, "/cl.xml");
    serve_page(f, "/cl2.xml", 0, c2, 2);
    TU_LOOP_UNTIL(&f->l, tbs_count(f->src, "GET /cl2.xml") >= 1, 8000);
    int64_t before = pending(f);
    serve_page(f, "/cl2.xml", 0, c2b, 3);
    TU_LOOP_UNTIL(&f->l, pending(f) == before + 1, 8000);
}

/* poller/changelist_moved_garbled: the same, the old URL answering an
 * HTML page (200) instead of a 404: after three polls in a row failed on
 * it, the Capability List is read again and the new one followed. */
static void
test_changelist_moved_garbled(void **state)
{
    struct fx *f = *state;
    static const int c2[] = { 0, 1 };
    tu_loop_run_for(&f->l, INTERVAL_MS);
    tbs_put(f->src, "/caplist.xml",
            "<urlset " TBS_NS "><rs:md capability=\"capabilitylist\"/>"
            "<url><loc>{B}/cl2.xml</loc><rs:md capability=\"changelist\"/>"
            "</url></urlset>");
    tbs_put(f->src, "/cl.xml", "<html><body>moved</body></html>");
    serve_page(f, "/cl2.xml", 0, c2, 2);
    TU_LOOP_UNTIL(&f->l, tbs_count(f->src, "GET /cl2.xml") >= 1, 15000);
    struct poller_stats ps;
    poller_stats(f->p, &ps);
    assert_true(ps.errors >= 3);
}

/* The numbers of the Capability Lists the poller serves, and how many the
 * state has numbered. */
static void
caps_served(struct fx *f, int64_t *ks, size_t *nks, int *in_state)
{
    *nks = 0;
    for (size_t i = 0; i < poller_ncaps(f->p); i++) {
        struct poller_cap c;
        if (poller_cap(f->p, i, &c) && c.doc != NULL)
            ks[(*nks)++] = c.k;
    }
    sqlite3_stmt *q = store_stmt(f->st, "SELECT count(*) FROM feeds WHERE "
                                 "kind = 1");
    assert_non_null(q);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    *in_state = sqlite3_column_int(q, 0);
    sqlite3_reset(q);
}

/* poller/caplist_behind_a_redirect: a Source Description naming its
 * Capability List by a URL that redirects (discovery gives where it
 * led, the SD the URL it names): one Capability List, one number (0),
 * served all along, across a restart and a Source Description read
 * again - not two numbers taking turns, nor one told deleted. */
static void
test_caplist_redirect(void **state)
{
    struct fx *f = *state;
    int64_t ks[8];
    size_t nks;
    int n;
    for (int round = 0; round < 2; round++) {
        tu_loop_run_for(&f->l, 8 * INTERVAL_MS);
        assert_true(tbs_count(f->src, "GET /sd.xml") >= 2);
        caps_served(f, ks, &nks, &n);
        assert_int_equal(nks, 1);
        assert_int_equal(ks[0], 0);
        assert_int_equal(n, 1);
        assert_int_equal(fw_count(f, RS_CAP_CAPABILITYLIST, NULL), 0);
        struct poller_stats ps;
        poller_stats(f->p, &ps);
        assert_int_equal(ps.errors, 0);
        /* a restart, and a Source Description read anew */
        poller_down(f);
        char sd[1024];
        snprintf(sd, sizeof(sd), "%s<!-- %d -->", SD_OLD, round);
        tbs_put(f->src, "/sd.xml", sd);
        poller_up(f);
    }
}

/* poller/empty_resource_list: the Resource List of a Capability List
 * with a Change List is watched head-only; one without entries (its head
 * comes with its end, at the parser's finish) is read well, not a failed
 * poll. */
static void
test_empty_resource_list(void **state)
{
    struct fx *f = *state;
    tu_loop_run_for(&f->l, 4 * INTERVAL_MS);
    assert_true(tbs_count(f->src, "GET /rl.xml") >= 2);
    struct poller_stats ps;
    poller_stats(f->p, &ps);
    if (ps.errors != 0)
        fail_msg("%llu failed polls: %s", (unsigned long long)ps.errors,
                 ps.last_error);
    assert_true(ps.polls >= 2);
}

/* ------------------------------------------- a Change List replaced */

/* A Change List entry: /data/NAME, change, at T0 + sec seconds. */
struct clent {
    const char *name;
    const char *change;
    int sec;
};

/* The Change List at key, declaring from T0 + from_sec. */
static void
serve_cl(struct fx *f, const char *key, int from_sec, const struct clent *es,
         size_t n)
{
    char body[8192], e[512], from[RS_TIME_BUFSZ];
    size_t off = 0;
    body[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        char dt[RS_TIME_BUFSZ], loc[64];
        assert_true(rs_time_format(T0 + (rs_time_t)es[i].sec * 1000000,
                                   dt) > 0);
        snprintf(loc, sizeof(loc), "{B}/data/%s", es[i].name);
        tbs_change(e, sizeof(e), loc, es[i].change, dt);
        off += (size_t)snprintf(body + off, sizeof(body) - off, "%s", e);
    }
    assert_true(rs_time_format(T0 + (rs_time_t)from_sec * 1000000, from) > 0);
    tbs_putf(f->src, key, "<urlset " TBS_NS "><rs:md capability="
             "\"changelist\" from=\"%s\"/>%s</urlset>", from, body);
}

/* Changes waiting in the outbox about /data/NAME with change. */
static int
change_count(struct fx *f, const char *name, enum rs_change change)
{
    static const char sql[] =
        "SELECT count(*) FROM outbox WHERE lane = ?1 AND loc = ?2 AND "
        "change = ?3";
    char loc[256];
    snprintf(loc, sizeof(loc), "%s/data/%s", f->src->origin, name);
    sqlite3_stmt *q = store_stmt(f->st, sql);
    assert_non_null(q);
    sqlite3_bind_int(q, 1, OUTBOX_CHANGE);
    sqlite3_bind_text(q, 2, loc, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(q, 3, (int)change);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    int n = sqlite3_column_int(q, 0);
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return n;
}

/* The Capability List names /cl2.xml (and the Resource List, with_rl)
 * instead of /cl.xml, which is gone. */
static void
switch_to_cl2(struct fx *f, bool with_rl)
{
    tbs_putf(f->src, "/caplist.xml",
             "<urlset " TBS_NS "><rs:md capability=\"capabilitylist\"/>%s"
             "<url><loc>{B}/cl2.xml</loc><rs:md capability=\"changelist\"/>"
             "</url></urlset>",
             with_rl ? "<url><loc>{B}/rl.xml</loc><rs:md capability="
                       "\"resourcelist\"/></url>" : "");
    tbs_drop(f->src, "/cl.xml");
}

/* poller/changelist_switch: the Capability List names another Change
 * List (the old one gone); the changes made meanwhile - after the old
 * list's position, and one at exactly its time that the old list did not
 * have - are published when the new list is first read, the ones the old
 * list had are not; a restart between noticing the switch and the new
 * list's first read (that read failed: nothing committed) loses nothing;
 * the next change is published once, and a restart after publishes
 * nothing again. */
static void
test_changelist_switch(void **state)
{
    struct fx *f = *state;
    tu_loop_run_for(&f->l, INTERVAL_MS);
    assert_int_equal(pending(f), 0);          /* r0, r1: the baseline */
    static const struct clent c2[] = {
        { "r0", "created", 0 }, { "r1", "created", 1 },
        { "r1", "updated", 1 }, { "r2", "created", 2 },
    };
    serve_cl(f, "/cl2.xml", 0, c2, 4);
    tbs_status(f->src, "/cl2.xml", 503, NULL);
    switch_to_cl2(f, false);
    TU_LOOP_UNTIL(&f->l, tbs_count(f->src, "GET /cl2.xml") >= 1, 8000);
    struct poller_stats ps;
    poller_stats(f->p, &ps);
    uint64_t errors = ps.errors;          /* the old list's 404 */
    tu_loop_arm(&f->l, 5000);
    do {
        event_base_loop(f->l.base, EVLOOP_ONCE);
        poller_stats(f->p, &ps);
    } while (ps.errors == errors && !f->l.expired);
    tu_loop_disarm(&f->l);
    assert_int_equal(pending(f), 0);
    assert_non_null(strstr(ps.last_error, "503"));

    /* "kill -9": the switch noticed, the new list never read whole */
    poller_down(f);
    tbs_status(f->src, "/cl2.xml", 0, NULL);
    poller_up(f);
    TU_LOOP_UNTIL(&f->l, pending(f) >= 2, 8000);
    tu_loop_run_for(&f->l, 3 * INTERVAL_MS);
    assert_int_equal(pending(f), 2);
    assert_int_equal(change_count(f, "r2", RS_CHANGE_CREATED), 1);
    assert_int_equal(change_count(f, "r1", RS_CHANGE_UPDATED), 1);
    assert_int_equal(change_count(f, "r0", RS_CHANGE_CREATED), 0);
    assert_int_equal(change_count(f, "r1", RS_CHANGE_CREATED), 0);
    /* the window covers the old position: nothing to reconcile */
    assert_int_equal(fw_count(f, RS_CAP_CHANGELIST, NULL), 0);

    /* the next walks: the new list's next change, once */
    static const struct clent c3[] = {
        { "r0", "created", 0 }, { "r1", "created", 1 },
        { "r1", "updated", 1 }, { "r2", "created", 2 },
        { "r3", "created", 3 },
    };
    serve_cl(f, "/cl2.xml", 0, c3, 5);
    TU_LOOP_UNTIL(&f->l, pending(f) == 3, 8000);
    poller_down(f);
    poller_up(f);
    tu_loop_run_for(&f->l, 4 * INTERVAL_MS);
    assert_int_equal(pending(f), 3);
    assert_int_equal(change_count(f, "r3", RS_CHANGE_CREATED), 1);
    assert_int_equal(fw_count(f, RS_CAP_CHANGELIST, NULL), 0);
}

/* poller/changelist_switch_gap: the new Change List's window begins after
 * the old list's position: what changed between the two cannot be told.
 * Its entries newer than the position are published, and the mirrors are
 * asked to reconcile (the Change List "updated", the Resource List
 * "created"); once, not again at the next walks. */
static void
test_changelist_switch_gap(void **state)
{
    struct fx *f = *state;
    tu_loop_run_for(&f->l, INTERVAL_MS);
    assert_int_equal(pending(f), 0);
    char rl[256];
    snprintf(rl, sizeof(rl), "%s", tbs_url(f->src, "/rl.xml"));
    int asks = fw_count(f, RS_CAP_RESOURCELIST, rl);
    static const struct clent c2[] = {
        { "r6", "created", 6 }, { "r7", "created", 7 },
    };
    serve_cl(f, "/cl2.xml", 5, c2, 2);
    switch_to_cl2(f, true);
    TU_LOOP_UNTIL(&f->l, pending(f) == 2, 8000);
    TU_LOOP_UNTIL(&f->l, fw_count(f, RS_CAP_CHANGELIST,
                                  tbs_url(f->src, "/cl2.xml")) == 1, 3000);
    assert_int_equal(change_count(f, "r6", RS_CHANGE_CREATED), 1);
    assert_int_equal(change_count(f, "r7", RS_CHANGE_CREATED), 1);
    assert_true(fw_count(f, RS_CAP_RESOURCELIST, rl) +
                (rl_feed_held(f) ? 1 : 0) == asks + 1);
    tu_loop_run_for(&f->l, 4 * INTERVAL_MS);
    assert_int_equal(pending(f), 2);
    assert_int_equal(fw_count(f, RS_CAP_CHANGELIST, NULL), 1);
}

/* A Source Description naming two Capability Lists, /cap0.xml and
 * /cap1.xml, both naming /cl.xml at first. */
static const char SD_TWO[] =
    "<urlset " TBS_NS "><rs:md capability=\"description\"/>"
    "<url><loc>{B}/cap0.xml</loc><rs:md capability=\"capabilitylist\"/>"
    "</url><url><loc>{B}/cap1.xml</loc><rs:md capability="
    "\"capabilitylist\"/></url></urlset>";

static int
setup_two(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    tu_loop_init(&f->l);
    f->src = tbs_new(f->l.base);
    tbs_put(f->src, "/sd.xml", SD_TWO);
    tbs_put(f->src, "/cap0.xml", CAPLIST);
    tbs_put(f->src, "/cap1.xml", CAPLIST);
    serve(f, 2);
    f->dir = tu_mkdtemp();
    char db[600], err[256];
    snprintf(db, sizeof(db), "%s/bridge.db", f->dir);
    assert_int_equal(store_open(db, &f->st, err, sizeof(err)), 0);
    f->start = "/sd.xml";
    poller_up(f);
    *state = f;
    return 0;
}

/* poller/changelist_switch_still_followed: /cap0.xml switches to /cl2.xml
 * while /cap1.xml still names /cl.xml: cl2 takes over from cl's position
 * (its changes made meanwhile published, the ones cl had not), not a
 * baseline; cl walks on with its rows (its own new change published once,
 * nothing of it again), across restarts. */
static void
test_changelist_switch_followed(void **state)
{
    struct fx *f = *state;
    tu_loop_run_for(&f->l, 2 * INTERVAL_MS);
    assert_int_equal(pending(f), 0);          /* r0, r1: the baseline */
    poller_down(f);
    static const struct clent c2[] = {
        { "r0", "created", 0 }, { "r1", "created", 1 },
        { "r2", "created", 2 }, { "r3", "created", 3 },
    };
    static const struct clent c1[] = {
        { "r0", "created", 0 }, { "r1", "created", 1 },
        { "r9", "created", 9 },
    };
    serve_cl(f, "/cl2.xml", 0, c2, 4);
    serve_cl(f, "/cl.xml", 0, c1, 3);
    tbs_put(f->src, "/cap0.xml",
            "<urlset " TBS_NS "><rs:md capability=\"capabilitylist\"/>"
            "<url><loc>{B}/cl2.xml</loc><rs:md capability=\"changelist\"/>"
            "</url></urlset>");
    poller_up(f);
    TU_LOOP_UNTIL(&f->l, pending(f) >= 3, 8000);
    tu_loop_run_for(&f->l, 4 * INTERVAL_MS);
    assert_int_equal(change_count(f, "r2", RS_CHANGE_CREATED), 1);
    assert_int_equal(change_count(f, "r3", RS_CHANGE_CREATED), 1);
    assert_int_equal(change_count(f, "r9", RS_CHANGE_CREATED), 1);
    assert_int_equal(pending(f), 3);
    assert_int_equal(fw_count(f, RS_CAP_CHANGELIST, NULL), 0);
    poller_down(f);
    poller_up(f);
    tu_loop_run_for(&f->l, 4 * INTERVAL_MS);
    assert_int_equal(pending(f), 3);
}

/* The Capability List names the Resource List alone (with_cl: and the
 * Change List /cl.xml too). */
static void
caplist_rl(struct fx *f, bool with_cl)
{
    tbs_putf(f->src, "/caplist.xml",
             "<urlset " TBS_NS "><rs:md capability=\"capabilitylist\"/>"
             "<url><loc>{B}/rl.xml</loc><rs:md capability=\"resourcelist\"/>"
             "</url>%s</urlset>",
             with_cl ? "<url><loc>{B}/cl.xml</loc><rs:md capability="
                       "\"changelist\"/></url>" : "");
}

/* The Resource List: r0 .. r(n-1), lastmod second i, at `at`. */
static void
serve_rl(struct fx *f, int n, int at)
{
    char body[8192], dt[RS_TIME_BUFSZ];
    size_t off = 0;
    assert_true(rs_time_format(1735689600LL * 1000000 +
                               (rs_time_t)at * 1000000, dt) > 0);
    off += (size_t)snprintf(body, sizeof(body), "<urlset " TBS_NS "><rs:md "
                            "capability=\"resourcelist\" at=\"%s\"/>", dt);
    for (int i = 0; i < n; i++) {
        assert_true(rs_time_format(1735689600LL * 1000000 +
                                   (rs_time_t)i * 1000000, dt) > 0);
        off += (size_t)snprintf(body + off, sizeof(body) - off,
                                "<url><loc>{B}/data/r%d</loc><lastmod>%s"
                                "</lastmod></url>", i, dt);
    }
    snprintf(body + off, sizeof(body) - off, "</urlset>");
    tbs_put(f->src, "/rl.xml", body);
}

/* poller/changelist_after_resourcelist: a Capability List followed
 * through its Resource List for a while (it named no Change List; its
 * first diff the baseline, a later one published r2) names its Change
 * List again: the changes the diffs published are not published again
 * (r2, older than the list's `at`), the ones after are, once (r3). */
static void
test_changelist_after_rl(void **state)
{
    struct fx *f = *state;
    tu_loop_run_for(&f->l, 2 * INTERVAL_MS);
    assert_int_equal(pending(f), 0);
    poller_down(f);
    caplist_rl(f, false);
    serve_rl(f, 2, 4);
    poller_up(f);
    tu_loop_run_for(&f->l, 2 * INTERVAL_MS);
    serve_rl(f, 3, 5);
    TU_LOOP_UNTIL(&f->l, change_count(f, "r2", RS_CHANGE_CREATED) == 1,
                  8000);
    tu_loop_run_for(&f->l, 2 * INTERVAL_MS);
    poller_down(f);
    static const struct clent c1[] = {
        { "r0", "created", 0 }, { "r1", "created", 1 },
        { "r2", "created", 2 }, { "r3", "created", 7 },
    };
    serve_cl(f, "/cl.xml", 0, c1, 4);
    caplist_rl(f, true);
    poller_up(f);
    TU_LOOP_UNTIL(&f->l, change_count(f, "r3", RS_CHANGE_CREATED) == 1,
                  8000);
    tu_loop_run_for(&f->l, 4 * INTERVAL_MS);
    assert_int_equal(change_count(f, "r2", RS_CHANGE_CREATED), 1);
    assert_int_equal(change_count(f, "r3", RS_CHANGE_CREATED), 1);
    assert_int_equal(fw_count(f, RS_CAP_CHANGELIST, NULL), 0);
}

/* poller/rl_after_changelist: a Resource List only watched while its
 * Capability List named a Change List (its head read, never diffed) is
 * followed when the Change List goes: its first diff is a baseline - not
 * every resource it lists published as created - and, the list being
 * newer than the Change List's position, the mirrors are asked to
 * reconcile with it (a "created" of the list); its next diffs publish
 * what changes, once. */
static void
test_rl_after_changelist(void **state)
{
    struct fx *f = *state;
    serve_rl(f, 0, 0);
    tu_loop_run_for(&f->l, 3 * INTERVAL_MS);     /* the head watched */
    struct store_feed rl;
    rl_feed(f, &rl);
    assert_true(rl.gen > 0);
    assert_int_equal(pending(f), 0);
    int asks = fw_count(f, RS_CAP_RESOURCELIST, NULL);
    poller_down(f);
    caplist_rl(f, false);
    serve_rl(f, 3, 5);          /* r0, r1 the Change List had; r2 new */
    poller_up(f);
    tu_loop_run_for(&f->l, 3 * INTERVAL_MS);
    for (int i = 0; i < 3; i++) {
        char n[8];
        snprintf(n, sizeof(n), "r%d", i);
        if (change_count(f, n, RS_CHANGE_CREATED) != 0)
            fail_msg("%s published as created by the first diff of a list "
                     "only watched before (%lld changes pending)", n,
                     (long long)pending(f));
    }
    assert_int_equal(pending(f), 0);
    assert_int_equal(fw_count(f, RS_CAP_RESOURCELIST, NULL), asks + 1);
    /* diffed from now on: a change is published once */
    serve_rl(f, 4, 6);
    TU_LOOP_UNTIL(&f->l, change_count(f, "r3", RS_CHANGE_CREATED) == 1,
                  8000);
    tu_loop_run_for(&f->l, 2 * INTERVAL_MS);
    assert_int_equal(change_count(f, "r3", RS_CHANGE_CREATED), 1);
    assert_int_equal(pending(f), 1);
    /* the hub (nothing listens on port 1) fails the publish: said */
    struct poller_stats ps;
    poller_stats(f->p, &ps);
    assert_true(ps.outbox.hub_failing[OUTBOX_CHANGE]);
    assert_true(ps.outbox.hub_failing_since != RS_TIME_NONE);
    assert_true(ps.outbox.hub_failures >= 1);
    assert_non_null(strstr(ps.outbox.hub_error, "no answer: "));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_polite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retry_after, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chain_gone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_changelist_moved, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_changelist_switch, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_changelist_switch_gap, setup_rl,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_changelist_switch_followed,
                                        setup_two, teardown),
        cmocka_unit_test_setup_teardown(test_changelist_after_rl, setup_rl,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_rl_after_changelist, setup_rl,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_changelist_moved_garbled, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_caplist_redirect,
                                        setup_redirect, teardown),
        cmocka_unit_test_setup_teardown(test_empty_resource_list, setup_rl,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_reconcile_gate, setup_rl,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_reconcile_due_later, setup_rl,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_reconcile_due_past, setup_rl,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_reconcile_no_rl, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
