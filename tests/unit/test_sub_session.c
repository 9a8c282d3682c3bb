/* test_sub_session.c - subscriber/session.c (the sync engine) through its
 * public API (session.h), against a Source served by a real evhttp server
 * (tu_httpd.h) on the session's own loop, with a real ledger, mirror and
 * rs_http in a temp dir, and a real rshub (tu_hub.h) for push: sync (a
 * baseline, then nothing to do), a resource that cannot be had, audit in
 * sync and not, run (ready, a change picked up by polling, drained), a
 * drain during the first sync's dump while a pushed change is being
 * fetched, a --source that is not a URL, two Resource Lists announced
 * at once on the framework channel (one reconcile), and a baseline from a
 * Resource Dump: finished by the Change Lists since its at, or by the
 * reconcile when they begin later, a member failed, or the ledger held
 * resources before. The drain is run as
 * rs_daemon runs it. on_end is counted exactly; every test runs under a
 * watchdog and ends with nothing left on the loop, clean under ASan. */
#include "testutil.h"
#include "tu_httpd.h"
#include "tu_hub.h"

#include <curl/curl.h>
#include <event2/event.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "ledger.h"
#include "mirror.h"
#include "pathmap.h"
#include "rs_alloc.h"
#include "rs_http.h"
#include "session.h"
#include "wsclient.h"

#define WATCHDOG_MS 10000u
#define NS "xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" " \
           "xmlns:rs=\"http://www.openarchives.org/rs/terms/\""
#define URLSET "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset " NS ">"
#define TA "2020-01-01T12:00:00Z"
#define LM "2020-01-01T08:00:00Z"
#define CT_XML "Content-Type: application/xml"
#define CAPLIST(extra)                                                      \
    URLSET "<rs:md capability=\"capabilitylist\"/>"                         \
    "<url><loc>{B}/rl.xml</loc><rs:md capability=\"resourcelist\"/></url>"  \
    "<url><loc>{B}/chl.xml</loc><rs:md capability=\"changelist\"/></url>"   \
    extra "</urlset>"
#define RES(path, len)                                                      \
    "<url><loc>{B}/" path "</loc><lastmod>" LM "</lastmod>"                 \
    "<rs:md length=\"" #len "\"/></url>"
#define RL URLSET "<rs:md capability=\"resourcelist\" at=\"" TA "\"/>"      \
           RES("r1", 3) RES("r2", 4) "</urlset>"
#define CL(entries)                                                         \
    URLSET "<rs:md capability=\"changelist\" from=\"2020-01-01T00:00:00Z\"/>" \
    entries "</urlset>"

struct fx {
    struct tu_hub *g;
    struct tu_loop l;
    struct tu_httpd *srv;
    char *dir;
    char db[4200], ready[4200];
    struct ledger *ledger;
    struct mirror *mirror;
    struct pathmap *pm;
    struct rs_http *http;
    struct session *s;
    struct wsclient *ws;            /* or NULL */
    unsigned ends;
    int code;
    struct tu_route *cl;            /* the Change List's route */
};

static void
on_end(void *ud, int exit_code)
{
    struct fx *f = ud;

    f->ends++;
    f->code = exit_code;
}

static void
fx_open_ledger(struct fx *f, unsigned flags)
{
    char err[512];

    f->ledger = ledger_open(f->db, flags, err, sizeof(err));
    if (f->ledger == NULL)
        fail_msg("ledger_open: %s", err);
}

static int
fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    struct mirror_opts mo = { .fsync = MIRROR_FSYNC_NONE };
    char err[512], mdir[4200];

    assert_non_null(f);
    f->g = *state;
    tu_loop_init(&f->l);
    f->srv = tu_httpd_new(f->l.base);
    f->dir = tu_mkdtemp();
    snprintf(f->db, sizeof(f->db), "%s/state.db", f->dir);
    snprintf(f->ready, sizeof(f->ready), "%s/ready", f->dir);
    snprintf(mdir, sizeof(mdir), "%s/mirror", f->dir);
    fx_open_ledger(f, 0);
    f->mirror = mirror_open(mdir, &mo, err, sizeof(err));
    if (f->mirror == NULL)
        fail_msg("mirror_open: %s", err);
    f->pm = pathmap_new();
    assert_non_null(f->pm);
    assert_int_equal(pathmap_add_prefix(f->pm, f->srv->origin, NULL), 0);
    f->http = rs_http_new(f->l.base, NULL);
    assert_non_null(f->http);
    (void)tu_httpd_add(f->srv, "/caplist.xml", 0, CT_XML, CAPLIST(""));
    (void)tu_httpd_add(f->srv, "/rl.xml", 0, CT_XML, RL);
    f->cl = tu_httpd_add(f->srv, "/chl.xml", 0, CT_XML, CL(""));
    (void)tu_httpd_add(f->srv, "/r1", 0, NULL, "one");
    (void)tu_httpd_add(f->srv, "/r2", 0, NULL, "four");
    *state = f;
    return 0;
}

static int
fx_teardown(void **state)
{
    struct fx *f = *state;
    struct tu_hub *g = f->g;

    session_free(f->s);
    wsclient_free(f->ws);
    rs_http_free(f->http);
    mirror_close(f->mirror);
    pathmap_free(f->pm);
    ledger_close(f->ledger);
    tu_httpd_free(f->srv);
    tu_loop_cleanup(&f->l);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    *state = g;
    return 0;
}

static struct session_opts
fx_opts(struct fx *f, enum session_cmd cmd)
{
    static char source[256];
    struct session_opts o = {
        .cmd = cmd,
        .base = f->l.base, .http = f->http, .ledger = f->ledger,
        .mirror = f->mirror, .pathmap = f->pm,
        .on_end = on_end, .ud = f,
    };

    snprintf(source, sizeof(source), "%s", tu_httpd_url(f->srv,
                                                        "/caplist.xml"));
    o.c.source = source;
    o.c.push = false;
    o.c.poll_ms = 60000;
    o.c.push_timeout_ms = 30000;
    o.c.reconcile_min_ms = 60000;
    o.c.retries = 1;
    o.c.timeout_ms = 5000;
    o.c.state_path = f->db;
    return o;
}

static void
fx_start(struct fx *f, const struct session_opts *o)
{
    char err[256] = "";

    session_free(f->s);
    f->s = session_new(o, err, sizeof(err));
    if (f->s == NULL)
        fail_msg("session_new: %s", err);
    assert_int_equal(session_start(f->s), 0);
}

/* Run a session of cmd to its end: on_end exactly once; its exit code. */
static int
fx_session(struct fx *f, enum session_cmd cmd)
{
    struct session_opts o = fx_opts(f, cmd);
    unsigned before = f->ends;

    fx_start(f, &o);
    TU_LOOP_UNTIL(&f->l, f->ends > before, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 50);
    assert_int_equal(f->ends, before + 1);
    return f->code;
}

static bool
has_file(struct fx *f, const char *path)
{
    struct stat sb;

    return mirror_stat(f->mirror, path, &sb) == 0;
}

/* The drain as rs_daemon runs it (common/daemon.c): session_drain, then
 * session_drained every 100 ms until it holds or drain_ms have passed,
 * then session_stop. Returns whether it timed out. */
static bool
fx_drain(struct fx *f, unsigned drain_ms)
{
    unsigned before = f->ends, waited = 0;
    bool timed_out = false;

    session_drain(f->s);
    while (!session_drained(f->s)) {
        if (waited >= drain_ms) {
            timed_out = true;
            break;
        }
        tu_loop_run_for(&f->l, 100);
        waited += 100;
        assert_int_equal(f->ends, before);
    }
    session_stop(f->s, timed_out);
    TU_LOOP_UNTIL(&f->l, f->ends > before, WATCHDOG_MS);
    assert_int_equal(f->ends, before + 1);
    return timed_out;
}

/* -------------------------------------------------------------- tests */

/* session/sync_then_nothing_to_do: a first sync baselines from the
 * Resource List and applies it (exit 0); the next one reads the Change
 * Lists from where the first left off and fetches nothing. */
static void
test_sync_then_nothing_to_do(void **state)
{
    struct fx *f = *state;

    assert_int_equal(fx_session(f, SESSION_SYNC), 0);
    assert_true(has_file(f, "r1"));
    assert_true(has_file(f, "r2"));
    assert_int_equal(tu_httpd_hits(f->srv, "/r1"), 1);
    /* the list peeked at and read, brought forward by the Change List */
    assert_int_equal(tu_httpd_hits(f->srv, "/rl.xml"), 2);
    assert_int_equal(tu_httpd_hits(f->srv, "/chl.xml"), 1);

    assert_int_equal(fx_session(f, SESSION_SYNC), 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/chl.xml"), 2);
    assert_int_equal(tu_httpd_hits(f->srv, "/rl.xml"), 2);
    assert_int_equal(tu_httpd_hits(f->srv, "/r1"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/r2"), 1);
    assert_int_equal(f->ends, 2);
}

/* session/sync_exit_1_on_a_failure: a resource that cannot be had is
 * given up after --retries, and the sync says so in its exit status. */
static void
test_sync_exit_1_on_a_failure(void **state)
{
    struct fx *f = *state;

    f->srv->routes[4].path[0] = '\0';        /* /r2 is gone: 404 */
    assert_int_equal(fx_session(f, SESSION_SYNC), 1);
    assert_true(has_file(f, "r1"));
    assert_false(has_file(f, "r2"));
}

/* session/audit: an audit of a mirror in step exits 0, of one missing a
 * file 1; the state is opened read-only beside nobody. */
static void
test_audit(void **state)
{
    struct fx *f = *state;

    assert_int_equal(fx_session(f, SESSION_SYNC), 0);
    session_free(f->s);
    f->s = NULL;
    ledger_close(f->ledger);
    fx_open_ledger(f, LEDGER_READONLY);
    struct session_opts o = fx_opts(f, SESSION_AUDIT);
    o.c.readonly = true;
    fx_start(f, &o);
    TU_LOOP_UNTIL(&f->l, f->ends == 2, WATCHDOG_MS);
    assert_int_equal(f->code, 0);

    assert_int_equal(mirror_remove(f->mirror, "r2"), 0);
    fx_start(f, &o);
    TU_LOOP_UNTIL(&f->l, f->ends == 3, WATCHDOG_MS);
    assert_int_equal(f->code, 1);
    tu_loop_run_for(&f->l, 50);
    assert_int_equal(f->ends, 3);
}

/* session/run_ready_then_polls: run becomes ready once the first sync is
 * applied (the ready file is written), picks up a change by polling the
 * Change Lists, and drains to exit 0. How it follows (polling, no push)
 * is in session_list_info and recorded in the state's meta for `rssub
 * status`, a process of its own. */
static void
test_run_ready_then_polls(void **state)
{
    struct fx *f = *state;
    struct session_opts o = fx_opts(f, SESSION_RUN);
    char when[RS_TIME_BUFSZ], cl[1024];
    struct stat sb;

    o.c.ready_file = f->ready;
    o.c.poll_ms = 300;
    fx_start(f, &o);
    TU_LOOP_UNTIL(&f->l, stat(f->ready, &sb) == 0, WATCHDOG_MS);
    assert_true(has_file(f, "r1"));
    assert_true(has_file(f, "r2"));
    struct session_list_info li;
    char *rec = NULL, want[1200];
    assert_int_equal(session_list_info(f->s, 0, &li), 0);
    assert_string_equal(li.transport, "poll");
    assert_string_equal(li.push, "none");
    assert_string_equal(li.why, "--no-push");
    assert_true(li.since != RS_TIME_NONE);
    assert_int_equal(ledger_meta_get(f->ledger, SESSION_META_FOLLOW, &rec), 0);
    snprintf(want, sizeof(want), "%s transport=poll push=none since=",
             tu_httpd_url(f->srv, "/caplist.xml"));
    assert_int_equal(strncmp(rec, want, strlen(want)), 0);
    assert_non_null(strstr(rec, " reason=\"--no-push\"\n"));
    rs_free(rec);

    assert_true(rs_time_format(rs_time_now(), when) > 0);
    snprintf(cl, sizeof(cl), CL("<url><loc>{B}/r3</loc><rs:md change=\""
                                "created\" datetime=\"%s\"/></url>"), when);
    free(f->cl->body);
    f->cl->body = tu_httpd_expand(f->srv, cl, &f->cl->body_len);
    (void)tu_httpd_add(f->srv, "/r3", 0, NULL, "three");
    TU_LOOP_UNTIL(&f->l, has_file(f, "r3"), WATCHDOG_MS);
    assert_int_equal(f->ends, 0);
    assert_false(fx_drain(f, 5000));
    assert_int_equal(f->code, 0);
}

/* The Resource Dump at /rd.xml (at TA) of one package, /p.zip: the
 * manifest man and the members r1 ("one") and, with two, r2 ("four"),
 * built with libzip; the Capability List lists the dump. The package's
 * route. */
static struct tu_route *
fx_serve_package_at(struct fx *f, const char *at, const char *man,
                    int members)
{
    char zpath[4300];
    size_t len = 0;
    int ze = 0;
    zip_t *za;
    struct tu_route *pkg;

    snprintf(zpath, sizeof(zpath), "%s/p.zip", f->dir);
    za = zip_open(zpath, ZIP_CREATE | ZIP_TRUNCATE, &ze);
    assert_non_null(za);
    assert_true(zip_file_add(za, "manifest.xml",
                             zip_source_buffer(za, man, strlen(man), 0),
                             0) >= 0);
    assert_true(zip_file_add(za, "r1", zip_source_buffer(za, "one", 3, 0),
                             0) >= 0);
    if (members > 1)
        assert_true(zip_file_add(za, "r2",
                                 zip_source_buffer(za, "four", 4, 0), 0) >= 0);
    assert_int_equal(zip_close(za), 0);
    pkg = tu_httpd_add(f->srv, "/p.zip", 0, NULL, NULL);
    free(pkg->body);
    pkg->body = tu_read_file(zpath, &len);
    pkg->body_len = len;
    char rd[512];
    snprintf(rd, sizeof(rd), URLSET "<rs:md capability=\"resourcedump\" "
             "at=\"%s\"/><url><loc>{B}/p.zip</loc></url></urlset>", at);
    (void)tu_httpd_add(f->srv, "/rd.xml", 0, CT_XML, rd);
    f->srv->routes[0].path[0] = '\0';
    (void)tu_httpd_add(f->srv, "/caplist.xml", 0, CT_XML, CAPLIST(
        "<url><loc>{B}/rd.xml</loc><rs:md capability=\"resourcedump\"/>"
        "</url>"));
    return pkg;
}

/* fx_serve_package_at, the dump at TA. */
static struct tu_route *
fx_serve_package(struct fx *f, const char *man, int members)
{
    return fx_serve_package_at(f, TA, man, members);
}

/* session/drain_during_the_dump: a drain (SIGTERM) while the first sync
 * unpacks a Resource Dump and a pushed change is being fetched (so the
 * drain waits, up to its drain time): the dump is abandoned with the pull
 * and does not come back to a session that no longer pulls; nothing more
 * is written, and the session ends once (exit 0). */
static void
test_drain_during_the_dump(void **state)
{
    struct fx *f = *state;
    char man[2048], note[1024], when[RS_TIME_BUFSZ], err[256];
    char id[64], chan[256];
    int n;
    struct tu_route *pkg, *slow;

    /* a package of one member, served slowly (4 bytes each 2 ms) */
    snprintf(man, sizeof(man), URLSET "<rs:md capability=\"resourcedump-"
             "manifest\" at=\"" TA "\"/><url><loc>%s/r1</loc><rs:md "
             "length=\"3\" path=\"/r1\"/></url></urlset>", f->srv->origin);
    pkg = fx_serve_package(f, man, 1);
    pkg->pace = 4;

    /* a change pushed through rshub, of a resource that takes its time */
    slow = tu_httpd_add(f->srv, "/slow", 0, NULL, "");
    slow->never = true;
    assert_true(rs_time_format(rs_time_now(), when) > 0);
    n = snprintf(note, sizeof(note), URLSET "<rs:md capability=\"changelist-"
                 "notification\"/><url><loc>%s/slow</loc><rs:md change=\""
                 "updated\" datetime=\"%s\"/></url></urlset>",
                 f->srv->origin, when);
    assert_int_equal(tu_hub_publish(f->g, "http://example.com/session/dump",
                                    note, (size_t)n, id, sizeof(id), chan,
                                    sizeof(chan)), 202);
    struct wsclient_opts wo = { .base = f->l.base };
    f->ws = wsclient_new(&wo, err, sizeof(err));
    assert_non_null(f->ws);

    char *channels[] = { chan, NULL };
    struct session_opts o = fx_opts(f, SESSION_RUN);
    o.c.dump = true;
    o.c.push = true;
    o.c.transport = TRANSPORT_WEBSOCKET;
    o.c.channels = channels;
    o.ws = f->ws;
    fx_start(f, &o);
    TU_LOOP_UNTIL(&f->l, pkg->hits == 1 && slow->hits == 1, WATCHDOG_MS);
    assert_true(fx_drain(f, 1500));             /* /slow never answers */
    assert_int_equal(f->code, 0);
    assert_false(has_file(f, "r1"));
    assert_int_equal(tu_httpd_hits(f->srv, "/r1"), 0);
}

/* A Resource Dump of one package at TA holding r1 ("one") and r2
 * ("four", which the manifest says is r2_len bytes long), in the
 * Capability List; the Change List from cl_from (with {B}), holding
 * cl_entries. */
static void
fx_serve_dump_at(struct fx *f, const char *at, int r2_len,
                 const char *cl_from, const char *cl_entries)
{
    char man[2048], cl[2048];

    snprintf(man, sizeof(man), URLSET "<rs:md capability=\"resourcedump-"
             "manifest\" at=\"%s\"/><url><loc>%s/r1</loc><lastmod>" LM
             "</lastmod><rs:md length=\"3\" path=\"/r1\"/></url><url><loc>"
             "%s/r2</loc><lastmod>" LM "</lastmod><rs:md length=\"%d\" "
             "path=\"/r2\"/></url></urlset>", at, f->srv->origin,
             f->srv->origin, r2_len);
    (void)fx_serve_package_at(f, at, man, 2);
    snprintf(cl, sizeof(cl), URLSET "<rs:md capability=\"changelist\" "
             "from=\"%s\"/>%s</urlset>", cl_from, cl_entries);
    free(f->cl->body);
    f->cl->body = tu_httpd_expand(f->srv, cl, &f->cl->body_len);
}

/* fx_serve_dump_at, the dump at TA. */
static void
fx_serve_dump(struct fx *f, int r2_len, const char *cl_from,
              const char *cl_entries)
{
    fx_serve_dump_at(f, TA, r2_len, cl_from, cl_entries);
}

/* A first sync --dump to its end: its exit code. */
static int
fx_sync_dump(struct fx *f)
{
    struct session_opts o = fx_opts(f, SESSION_SYNC);
    unsigned before = f->ends;

    o.c.dump = true;
    fx_start(f, &o);
    TU_LOOP_UNTIL(&f->l, f->ends > before, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 50);
    assert_int_equal(f->ends, before + 1);
    return f->code;
}

/* session/dump_then_change_lists: a complete Resource Dump into an empty
 * mirror is the baseline as of its at, and the Change Lists since then
 * finish it: the Resource List is never read, no member is fetched, the
 * change after the dump is; the next sync reads the Change Lists only
 * (r3, without a hash, at the mark itself, may be taken again). */
static void
test_dump_then_change_lists(void **state)
{
    struct fx *f = *state;

    fx_serve_dump(f, 4, "2020-01-01T00:00:00Z", "<url><loc>{B}/r3</loc>"
                  "<rs:md change=\"created\" datetime=\"2020-01-01T13:00:00Z\""
                  "/></url>");
    (void)tu_httpd_add(f->srv, "/r3", 0, NULL, "three");
    assert_int_equal(fx_sync_dump(f), 0);
    assert_true(has_file(f, "r1"));
    assert_true(has_file(f, "r2"));
    assert_true(has_file(f, "r3"));
    assert_int_equal(tu_httpd_hits(f->srv, "/p.zip"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/rl.xml"), 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/r1"), 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/r2"), 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/r3"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/chl.xml"), 1);

    assert_int_equal(fx_session(f, SESSION_SYNC), 0);   /* baselined */
    assert_int_equal(tu_httpd_hits(f->srv, "/p.zip"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/rl.xml"), 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/chl.xml"), 2);
    assert_int_equal(tu_httpd_hits(f->srv, "/r1"), 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/r2"), 0);
}

/* session/dump_change_lists_too_short: Change Lists that begin after the
 * dump's at cannot say what changed in between: the Resource List is
 * read (the reconcile), and the mirror is whole. */
static void
test_dump_change_lists_too_short(void **state)
{
    struct fx *f = *state;

    fx_serve_dump(f, 4, "2020-01-01T13:00:00Z", "");
    assert_int_equal(fx_sync_dump(f), 0);
    assert_true(has_file(f, "r1"));
    assert_true(has_file(f, "r2"));
    assert_int_equal(tu_httpd_hits(f->srv, "/p.zip"), 1);
    assert_true(tu_httpd_hits(f->srv, "/rl.xml") >= 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/r1"), 0);
}

/* session/dump_at_in_the_future: a dump whose at is beyond our clock
 * cannot say when it was made: taken as now, the Change Lists would be
 * read from now and r3's change (after the dump's real time) skipped.
 * The dump has no at instead: the reconcile reads the Resource List and
 * the Change Lists since its at, and r3 is fetched. */
static void
test_dump_at_in_the_future(void **state)
{
    struct fx *f = *state;

    fx_serve_dump_at(f, "2999-01-01T00:00:00Z", 4, "2020-01-01T00:00:00Z",
                     "<url><loc>{B}/r3</loc><rs:md change=\"created\" "
                     "datetime=\"2020-01-01T13:00:00Z\"/></url>");
    (void)tu_httpd_add(f->srv, "/r3", 0, NULL, "three");
    assert_int_equal(fx_sync_dump(f), 0);
    assert_true(has_file(f, "r1"));
    assert_true(has_file(f, "r2"));
    assert_true(has_file(f, "r3"));
    assert_true(tu_httpd_hits(f->srv, "/rl.xml") >= 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/r1"), 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/r3"), 1);
}

/* session/dump_change_lists_with_a_hole: after a complete dump, Change
 * Lists of an index that leave a hole (12:30 to 13:30) cannot say what
 * changed in it (r3, created at 13:00, is in no list): as when they
 * begin too late, the Resource List is reconciled, and r3 is fetched. */
static void
test_dump_change_lists_with_a_hole(void **state)
{
    struct fx *f = *state;

    fx_serve_dump(f, 4, "2020-01-01T00:00:00Z", "");
    free(f->cl->body);
    f->cl->body = tu_httpd_expand(f->srv, "<?xml version=\"1.0\"?>\n"
        "<sitemapindex " NS "><rs:md capability=\"changelist\" "
        "from=\"2020-01-01T00:00:00Z\"/>"
        "<sitemap><loc>{B}/cl1.xml</loc><rs:md from=\"2020-01-01T00:00:00Z\" "
        "until=\"2020-01-01T12:30:00Z\"/></sitemap>"
        "<sitemap><loc>{B}/cl2.xml</loc><rs:md from=\"2020-01-01T13:30:00Z\""
        "/></sitemap></sitemapindex>", &f->cl->body_len);
    (void)tu_httpd_add(f->srv, "/cl1.xml", 0, CT_XML, URLSET
        "<rs:md capability=\"changelist\" from=\"2020-01-01T00:00:00Z\" "
        "until=\"2020-01-01T12:30:00Z\"/></urlset>");
    (void)tu_httpd_add(f->srv, "/cl2.xml", 0, CT_XML, URLSET
        "<rs:md capability=\"changelist\" from=\"2020-01-01T13:30:00Z\"/>"
        "</urlset>");
    for (size_t i = 0; i < f->srv->nroutes; i++)
        if (strcmp(f->srv->routes[i].path, "/rl.xml") == 0)
            f->srv->routes[i].path[0] = '\0';
    (void)tu_httpd_add(f->srv, "/rl.xml", 0, CT_XML, URLSET
        "<rs:md capability=\"resourcelist\" at=\"2020-01-01T14:00:00Z\"/>"
        RES("r1", 3) RES("r2", 4) RES("r3", 5) "</urlset>");
    (void)tu_httpd_add(f->srv, "/r3", 0, NULL, "three");
    assert_int_equal(fx_sync_dump(f), 0);
    assert_true(has_file(f, "r1"));
    assert_true(has_file(f, "r2"));
    assert_true(has_file(f, "r3"));
    assert_int_equal(tu_httpd_hits(f->srv, "/p.zip"), 1);
    assert_true(tu_httpd_hits(f->srv, "/rl.xml") >= 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/r1"), 0);
}

/* session/dump_member_failed: a member that fails verification leaves
 * the baseline to the reconcile, which fetches it on its own. */
static void
test_dump_member_failed(void **state)
{
    struct fx *f = *state;

    fx_serve_dump(f, 5, "2020-01-01T00:00:00Z", "");
    assert_int_equal(fx_sync_dump(f), 0);
    assert_true(has_file(f, "r1"));
    assert_true(has_file(f, "r2"));
    assert_true(tu_httpd_hits(f->srv, "/rl.xml") >= 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/r1"), 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/r2"), 1);
}

/* session/dump_into_a_ledger_in_use: a ledger that held resources before
 * the dump may hold some the Source deleted before the dump's at, which
 * no Change List since then names: the reconcile decides. */
static void
test_dump_into_a_ledger_in_use(void **state)
{
    struct fx *f = *state;
    char uri[512];

    fx_serve_dump(f, 4, "2020-01-01T00:00:00Z", "");
    snprintf(uri, sizeof(uri), "%s/r1", f->srv->origin);
    struct ledger_res r = { .uri = uri, .path = "r1", .lastmod = 1,
                            .change_dt = 1, .length = 3 };
    assert_int_equal(ledger_res_put(f->ledger, &r), 0);
    assert_int_equal(fx_sync_dump(f), 0);
    assert_true(has_file(f, "r1"));
    assert_true(has_file(f, "r2"));
    assert_true(tu_httpd_hits(f->srv, "/rl.xml") >= 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/r2"), 0);
}

/* Publish a framework notification of entries (with {B} the Source's
 * origin) to topic; its WebSocket channel into chan. */
static void
fx_publish_framework(struct fx *f, const char *topic, const char *entries,
                     char *chan, size_t chansz)
{
    char id[64], *body;
    size_t len = 0;

    body = tu_httpd_expand(f->srv, entries, &len);
    assert_int_equal(tu_hub_publish(f->g, topic, body, len, id, sizeof(id),
                                    chan, chansz), 202);
    free(body);
}

#define FW(entries)                                                         \
    URLSET "<rs:md capability=\"framework-notification\"/>" entries         \
    "</urlset>"
#define FW_RL                                                               \
    "<url><loc>{B}/rl.xml</loc><rs:md capability=\"resourcelist\" "         \
    "change=\"created\" datetime=\"%s\"/></url>"

/* session/resourcelist_announced_twice: two new Resource Lists announced
 * at once on the framework channel (a Source that rebuilds its list while
 * a mirror starts) make one reconcile now, not one queued right behind it:
 * at most one per --reconcile-min-interval, counted from its start. The
 * second is owed, not dropped (the first may have read the older list):
 * it runs when the interval is up, and then nothing more. */
static void
test_resourcelist_announced_twice(void **state)
{
    struct fx *f = *state;
    char chan_c[256], chan_f[256], caplist[2048], note[1024], when[RS_TIME_BUFSZ];
    char id[64];
    struct stat sb;
    int n;

    assert_int_equal(fx_session(f, SESSION_SYNC), 0);     /* the baseline */
    assert_int_equal(tu_httpd_hits(f->srv, "/rl.xml"), 2);

    /* both channels exist on the hub; the framework one carries a
     * notification rssub ignores (a Change Dump) */
    fx_publish_framework(f, "http://example.com/session/twice-fw",
                         FW("<url><loc>{B}/cd.xml</loc><rs:md capability=\""
                            "changedump\" change=\"created\" datetime=\""
                            TA "\"/></url>"), chan_f, sizeof(chan_f));
    assert_true(rs_time_format(rs_time_now(), when) > 0);
    n = snprintf(note, sizeof(note), URLSET "<rs:md capability=\"changelist-"
                 "notification\"/><url><loc>%s/r1</loc><rs:md change=\""
                 "updated\" datetime=\"%s\"/></url></urlset>",
                 f->srv->origin, when);
    assert_int_equal(tu_hub_publish(f->g, "http://example.com/session/twice",
                                    note, (size_t)n, id, sizeof(id), chan_c,
                                    sizeof(chan_c)), 202);
    snprintf(caplist, sizeof(caplist), CAPLIST(
        "<url><loc>%s</loc><rs:md capability=\"changelist-notification\"/>"
        "</url><url><loc>%s</loc><rs:md capability=\"framework-"
        "notification\"/></url>"), chan_c, chan_f);
    f->srv->routes[0].path[0] = '\0';
    (void)tu_httpd_add(f->srv, "/caplist.xml", 0, CT_XML, caplist);

    char err[256];
    struct wsclient_opts wo = { .base = f->l.base };
    f->ws = wsclient_new(&wo, err, sizeof(err));
    assert_non_null(f->ws);
    struct session_opts o = fx_opts(f, SESSION_RUN);
    o.c.ready_file = f->ready;
    o.c.push = true;
    o.c.transport = TRANSPORT_WEBSOCKET;
    o.c.reconcile_min_ms = 1500;
    o.ws = f->ws;
    fx_start(f, &o);
    TU_LOOP_UNTIL(&f->l, stat(f->ready, &sb) == 0, WATCHDOG_MS);
    /* a restart catches up from the Change Lists: no reconcile */
    assert_int_equal(tu_httpd_hits(f->srv, "/rl.xml"), 2);

    assert_true(rs_time_format(rs_time_now(), when) > 0);
    snprintf(note, sizeof(note), FW(FW_RL FW_RL), when, when);
    fx_publish_framework(f, "http://example.com/session/twice-fw", note,
                         chan_f, sizeof(chan_f));
    TU_LOOP_UNTIL(&f->l, tu_httpd_hits(f->srv, "/rl.xml") >= 4, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 500);
    assert_int_equal(tu_httpd_hits(f->srv, "/rl.xml"), 4);   /* one more */
    /* the owed one, once the interval is up; then no other */
    TU_LOOP_UNTIL(&f->l, tu_httpd_hits(f->srv, "/rl.xml") >= 6, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 2000);
    assert_int_equal(tu_httpd_hits(f->srv, "/rl.xml"), 6);
    assert_int_equal(f->ends, 1);
    assert_false(fx_drain(f, 5000));
    assert_int_equal(f->code, 0);
}

/* session/bad_source: a --source that is not an http(s) URL is refused at
 * start, and on_end never runs. */
static void
test_bad_source(void **state)
{
    struct fx *f = *state;
    struct session_opts o = fx_opts(f, SESSION_SYNC);
    char err[256] = "";

    o.c.source = "ftp://example.com/";
    f->s = session_new(&o, err, sizeof(err));
    assert_non_null(f->s);
    assert_int_equal(session_start(f->s), RS_EINVAL);
    tu_loop_run_for(&f->l, 50);
    assert_int_equal(f->ends, 0);
    session_free(NULL);
}

static int
grp_setup(void **state)
{
    *state = tu_hub_new(NULL);
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
#define T_(name, fn) { "session/" name, fn, fx_setup, fx_teardown, NULL }
    const struct CMUnitTest tests[] = {
        T_("sync_then_nothing_to_do", test_sync_then_nothing_to_do),
        T_("sync_exit_1_on_a_failure", test_sync_exit_1_on_a_failure),
        T_("audit", test_audit),
        T_("run_ready_then_polls", test_run_ready_then_polls),
        T_("bad_source", test_bad_source),
        T_("drain_during_the_dump", test_drain_during_the_dump),
        T_("dump_then_change_lists", test_dump_then_change_lists),
        T_("dump_change_lists_too_short", test_dump_change_lists_too_short),
        T_("dump_member_failed", test_dump_member_failed),
        T_("dump_at_in_the_future", test_dump_at_in_the_future),
        T_("dump_change_lists_with_a_hole",
           test_dump_change_lists_with_a_hole),
        T_("dump_into_a_ledger_in_use", test_dump_into_a_ledger_in_use),
        T_("resourcelist_announced_twice",
           test_resourcelist_announced_twice),
    };
#undef T_
    int rc;

    signal(SIGPIPE, SIG_IGN);
    unsetenv("http_proxy");
    unsetenv("HTTP_PROXY");
    unsetenv("all_proxy");
    unsetenv("ALL_PROXY");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rc = cmocka_run_group_tests_name("sub_session", tests, grp_setup,
                                     grp_teardown);
    curl_global_cleanup();
    return rc;
}
