/* test_sub_pull.c - subscriber/pull.c (Change List pulls, reconciles and
 * audits) against a real evhttp server (tu_httpd.h) serving each test's
 * documents, with a real ledger (SQLite), apply and mirror in a temp dir.
 * The appliers stay paused unless a test lets them run: what a pull queues
 * is read back from the ledger's todo rows. The mirror's state is made by
 * hand (files written through mirror, rows through the ledger) so that each
 * test says exactly what the Source and the mirror hold. The open list's
 * continuation (tail_*) is followed with conditional requests, and left
 * for the list when it closes, goes, or cannot be validated. Every pull runs
 * under a watchdog, on_done is counted exactly, and every test ends with
 * nothing left on the loop, clean under ASan. */
#include "testutil.h"
#include "tu_httpd.h"

#include <curl/curl.h>
#include <event2/event.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "apply.h"
#include "ledger.h"
#include "mirror.h"
#include "pathmap.h"
#include "pull.h"
#include "rs_alloc.h"
#include "rs_http.h"

#define WATCHDOG_MS 10000u
#define MAXDIFF 32

/* Documents; {B} is http://127.0.0.1:PORT of the test's server. */
#define NS "xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" " \
           "xmlns:rs=\"http://www.openarchives.org/rs/terms/\""
#define URLSET "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset " NS ">"
#define INDEX "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<sitemapindex " \
              NS ">"
#define RL(md, entries)                                                     \
    URLSET "<rs:md capability=\"resourcelist\"" md "/>" entries "</urlset>"
#define CL(md, entries)                                                     \
    URLSET "<rs:md capability=\"changelist\"" md "/>" entries "</urlset>"
#define AT(t) " at=\"" t "\""
#define FROM(t) " from=\"" t "\""
/* A Resource List entry: its lastmod is LM, its length len. */
#define LM "2020-01-01T08:00:00Z"
#define RES(path, len)                                                      \
    "<url><loc>{B}/" path "</loc><lastmod>" LM "</lastmod>"                 \
    "<rs:md length=\"" #len "\"/></url>"
#define CH(path, change, dt)                                                \
    "<url><loc>{B}/" path "</loc><rs:md change=\"" change "\" "             \
    "datetime=\"" dt "\"/></url>"
#define CT_XML "Content-Type: application/xml"

/* The times the documents speak of: a Resource List made at TA (noon),
 * Change Lists from T0. */
#define T0 "2020-01-01T00:00:00Z"
#define TA "2020-01-01T12:00:00Z"

struct fx {
    struct tu_loop l;
    struct tu_httpd *srv;
    char *dir;
    char db[4200];
    struct ledger *ledger;
    struct mirror *mirror;
    struct pathmap *pm;
    struct rs_http *http;
    struct apply *a;
    struct pull *p;
    struct pull_opts po;
    /* on_done */
    unsigned done;
    int rc;
    char err[600];
    struct pull_report r;
    /* on_diff: "what path", in order */
    char diffs[MAXDIFF][160];
    unsigned ndiffs;
    unsigned progress;
    unsigned results[APPLY_OUTCOMES];
};

static rs_time_t
T(const char *s)
{
    rs_time_t t;

    assert_int_equal(rs_time_parse(s, strlen(s), &t), 0);
    return t;
}

static const char *
short_uri(struct fx *f, const char *uri)
{
    size_t n = strlen(f->srv->origin);

    return strncmp(uri, f->srv->origin, n) == 0 ? uri + n + 1 : uri;
}

static void
on_done(void *ud, int rc, const char *err, const struct pull_report *r)
{
    struct fx *f = ud;

    f->done++;
    f->rc = rc;
    snprintf(f->err, sizeof(f->err), "%s", err);
    f->r = *r;
}

static void
on_diff(void *ud, const char *uri, const char *what)
{
    struct fx *f = ud;

    assert_true(f->ndiffs < MAXDIFF);
    snprintf(f->diffs[f->ndiffs++], sizeof(f->diffs[0]), "%s %s", what,
             short_uri(f, uri));
}

static void
on_progress(void *ud, uint64_t entries)
{
    (void)entries;
    ((struct fx *)ud)->progress++;
}

static void
on_result(void *ud, const char *uri, enum apply_outcome o, const char *what)
{
    (void)uri;
    (void)what;
    ((struct fx *)ud)->results[o]++;
}

static void
fx_pull_new(struct fx *f)
{
    pull_free(f->p);
    f->p = pull_new(&f->po);
    assert_non_null(f->p);
}

static int
fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    struct mirror_opts mo = { .fsync = MIRROR_FSYNC_NONE };
    char err[512], mdir[4200];

    assert_non_null(f);
    tu_loop_init(&f->l);
    f->srv = tu_httpd_new(f->l.base);
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
    assert_int_equal(pathmap_add_prefix(f->pm, f->srv->origin, NULL), 0);
    f->http = rs_http_new(f->l.base, NULL);
    assert_non_null(f->http);
    struct apply_opts ao = {
        .base = f->l.base, .http = f->http, .ledger = f->ledger,
        .mirror = f->mirror, .pathmap = f->pm, .timeout_ms = 5000,
        .on_result = on_result, .ud = f,
    };
    f->a = apply_new(&ao, err, sizeof(err));
    if (f->a == NULL)
        fail_msg("apply_new: %s", err);
    apply_pause(f->a, true);
    f->po = (struct pull_opts){
        .base = f->l.base, .http = f->http, .ledger = f->ledger,
        .mirror = f->mirror, .apply = f->a, .pathmap = f->pm,
        .on_diff = on_diff, .on_progress = on_progress, .on_done = on_done,
        .ud = f,
    };
    fx_pull_new(f);
    *state = f;
    return 0;
}

static int
fx_teardown(void **state)
{
    struct fx *f = *state;

    pull_free(f->p);
    apply_free(f->a);
    rs_http_free(f->http);
    mirror_close(f->mirror);
    pathmap_free(f->pm);
    ledger_close(f->ledger);
    tu_httpd_free(f->srv);
    tu_loop_cleanup(&f->l);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static void
serve(struct fx *f, const char *path, const char *body)
{
    (void)tu_httpd_add(f->srv, path, 0, CT_XML, body);
}

/* One pull, run to its end: on_done exactly once. */
static void
fx_pull(struct fx *f, enum pull_kind k, const char *path,
        const char *changes, rs_time_t since)
{
    unsigned before = f->done;
    char cl[256];

    f->ndiffs = 0;
    if (changes != NULL)
        snprintf(cl, sizeof(cl), "%s", tu_httpd_url(f->srv, changes));
    assert_int_equal(pull_start(f->p, k, tu_httpd_url(f->srv, path),
                                changes != NULL ? cl : NULL, since), 0);
    assert_true(pull_busy(f->p));
    TU_LOOP_UNTIL(&f->l, f->done > before, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 30);
    assert_int_equal(f->done, before + 1);
    assert_false(pull_busy(f->p));
}

/* The mirror holds path with content, as taken at change_dt (lastmod LM,
 * the length of content, no hash). */
static void
put_res(struct fx *f, const char *path, const char *content,
        rs_time_t change_dt)
{
    struct mirror_file *mf = NULL;
    char uri[300];
    struct ledger_res r = { 0 };

    snprintf(uri, sizeof(uri), "%s/%s", f->srv->origin, path);
    assert_int_equal(mirror_begin(f->mirror, path, &mf), 0);
    assert_int_equal(mirror_write(mf, content, strlen(content)), 0);
    assert_int_equal(mirror_commit(mf, T(LM)), 0);
    r.uri = uri;
    r.path = path;
    r.lastmod = T(LM);
    r.change_dt = change_dt;
    r.length = (int64_t)strlen(content);
    assert_int_equal(apply_txn(f->a), 0);
    assert_int_equal(ledger_res_put(f->ledger, &r), 0);
}

/* The pending change of path (0: none); its origin into origin (may be
 * NULL) and its change time into dt (may be NULL). */
static int
todo_of(struct fx *f, const char *path, char *origin, size_t osz,
        rs_time_t *dt)
{
    struct ledger_todo t;
    char uri[300], *buf = NULL;
    int rc, ch;

    snprintf(uri, sizeof(uri), "%s/%s", f->srv->origin, path);
    rc = ledger_todo_get(f->ledger, uri, &t, &buf);
    assert_true(rc == 0 || rc == RS_ENOTFOUND);
    if (rc != 0)
        return 0;
    ch = (int)t.change;
    if (origin != NULL)
        snprintf(origin, osz, "%s", t.origin != NULL ? t.origin : "");
    if (dt != NULL)
        *dt = t.change_dt;
    rs_free(buf);
    return ch;
}

static int64_t
todo_count(struct fx *f)
{
    int64_t due = 0, waiting = 0, failed = 0;

    assert_int_equal(ledger_todo_count(f->ledger, rs_time_now(), &due,
                                       &waiting, &failed), 0);
    return due + waiting + failed;
}

static bool
has_diff(struct fx *f, const char *line)
{
    for (unsigned i = 0; i < f->ndiffs; i++)
        if (strcmp(f->diffs[i], line) == 0)
            return true;
    return false;
}

/* ------------------------------------------------------------ CHANGES */

#define CL_SINCE                                                            \
    CL(FROM(T0), CH("a", "created", "2020-01-01T10:00:00Z")                 \
                 CH("b", "updated", "2020-01-01T11:59:57Z")                 \
                 CH("c", "created", "2020-01-01T12:00:10Z")                 \
                 CH("d", "deleted", "2020-01-01T12:00:20Z")                 \
                 CH("e", "updated", "2020-01-01T12:00:30Z"))

/* pull/changes_since: a Change List read from a since takes the changes
 * from 5 s before it on (an older one is skipped), queues what the mirror
 * lacks and counts what it holds already (a newer copy); it reaches back
 * when the list's from is at or before since. */
static void
test_changes_since(void **state)
{
    struct fx *f = *state;

    serve(f, "/cl.xml", CL_SINCE);
    put_res(f, "d", "dddd", T("2020-01-01T11:00:00Z"));
    put_res(f, "e", "eeeee", T("2020-01-01T12:00:40Z"));
    fx_pull(f, PULL_CHANGES, "/cl.xml", NULL, T(TA));
    assert_int_equal(f->rc, 0);
    assert_int_equal(todo_of(f, "a", NULL, 0, NULL), 0);
    assert_int_equal(todo_of(f, "b", NULL, 0, NULL), LEDGER_UPDATE);
    assert_int_equal(todo_of(f, "c", NULL, 0, NULL), LEDGER_CREATE);
    assert_int_equal(todo_of(f, "d", NULL, 0, NULL), LEDGER_DELETE);
    assert_int_equal(todo_of(f, "e", NULL, 0, NULL), 0);
    assert_int_equal(todo_count(f), 3);
    assert_int_equal(f->r.kind, PULL_CHANGES);
    assert_int_equal(f->r.added, 1);
    assert_int_equal(f->r.updated, 1);
    assert_int_equal(f->r.deleted, 1);
    assert_int_equal(f->r.unchanged, 1);
    assert_int_equal(f->r.entries, 5);
    assert_int_equal(f->r.docs, 1);
    assert_true(f->r.reached_back);
    assert_true(f->r.newest == T("2020-01-01T12:00:30Z"));
    assert_true(f->progress >= 1);
}

/* pull/changes_not_reached_back: lists that begin after since, or a pull
 * from no since at all, do not reach back (a reconcile is due); every
 * entry is taken. */
static void
test_changes_not_reached_back(void **state)
{
    struct fx *f = *state;

    serve(f, "/cl.xml", CL_SINCE);
    fx_pull(f, PULL_CHANGES, "/cl.xml", NULL, T("2019-12-31T00:00:00Z"));
    assert_int_equal(f->rc, 0);
    assert_false(f->r.reached_back);
    assert_int_equal(f->r.entries, 5);
    assert_int_equal(f->r.added, 2);
    assert_int_equal(f->r.updated, 2);
    assert_int_equal(f->r.unchanged, 1);    /* d: never had, a tombstone */
    assert_int_equal(todo_count(f), 4);

    fx_pull(f, PULL_CHANGES, "/cl.xml", NULL, RS_TIME_NONE);
    assert_int_equal(f->rc, 0);
    assert_false(f->r.reached_back);
    assert_int_equal(f->r.entries, 5);
    assert_int_equal(f->r.unchanged, 5);    /* queued by the first pull */
    assert_int_equal(f->done, 2);
}

/* pull/closed_lists_skipped: an index's closed Change List that ended
 * before since (less the 5 s overlap) is not fetched, though its from
 * still counts for reaching back; one that ended inside the overlap is. */
static void
test_closed_lists_skipped(void **state)
{
    struct fx *f = *state;

    serve(f, "/cli.xml", INDEX
          "<rs:md capability=\"changelist\"" FROM(T0) "/>"
          "<sitemap><loc>{B}/cl1.xml</loc><rs:md capability=\"changelist\" "
          "from=\"" T0 "\" until=\"2020-01-01T06:00:00Z\"/></sitemap>"
          "<sitemap><loc>{B}/cl2.xml</loc><rs:md capability=\"changelist\" "
          "from=\"2020-01-01T06:00:00Z\"/></sitemap></sitemapindex>");
    serve(f, "/cl1.xml", CL(FROM(T0) " until=\"2020-01-01T06:00:00Z\"",
                            CH("old", "created", "2020-01-01T05:00:00Z")));
    serve(f, "/cl2.xml", CL(FROM("2020-01-01T06:00:00Z"),
                            CH("new", "created", "2020-01-01T13:00:00Z")));
    fx_pull(f, PULL_CHANGES, "/cli.xml", NULL, T(TA));
    assert_int_equal(f->rc, 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/cl1.xml"), 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/cl2.xml"), 1);
    assert_true(f->r.reached_back);
    assert_int_equal(f->r.entries, 1);
    assert_int_equal(todo_of(f, "new", NULL, 0, NULL), LEDGER_CREATE);
    assert_int_equal(todo_of(f, "old", NULL, 0, NULL), 0);

    /* ended 3 s before since: within the overlap, read */
    fx_pull(f, PULL_CHANGES, "/cli.xml", NULL, T("2020-01-01T06:00:03Z"));
    assert_int_equal(tu_httpd_hits(f->srv, "/cl1.xml"), 1);
    assert_int_equal(f->r.entries, 2);
    assert_int_equal(f->done, 2);
}

/* The open list's headers: its ETag and its continuation. */
#define TAIL_HDRS(etag, after)                                              \
    CT_XML "\nETag: \"" etag "\"\nLink: <" after ">; "                      \
    "rel=\"urn:rspush:changes-after\""
#define T1 "2020-01-01T01:00:00Z"
#define T2 "2020-01-01T02:00:00Z"
#define T3 "2020-01-01T03:00:00Z"

/* Make route path answer status (0: 200) with headers and body (a new
 * route: its hits start at 0). */
static void
reroute(struct fx *f, const char *path, int status, const char *headers,
        const char *body)
{
    for (size_t i = 0; i < f->srv->nroutes; i++)
        if (strcmp(f->srv->routes[i].path, path) == 0)
            f->srv->routes[i].path[0] = '\0';
    (void)tu_httpd_add(f->srv, path, status, headers, body);
}

/* An index of a closed list [T0, 06:00] and an open one from `from2`. */
#define HOLE_INDEX(from2)                                                   \
    INDEX "<rs:md capability=\"changelist\"" FROM(T0) "/>"                  \
    "<sitemap><loc>{B}/cl1.xml</loc><rs:md capability=\"changelist\" "     \
    "from=\"" T0 "\" until=\"2020-01-01T06:00:00Z\"/></sitemap>"           \
    "<sitemap><loc>{B}/cl2.xml</loc><rs:md capability=\"changelist\" "     \
    "from=\"" from2 "\"/></sitemap></sitemapindex>"

/* pull/hole_between_lists: an index whose lists leave a hole between one's
 * until and the next one's from does not reach back over it: a change in
 * the hole is in no list, so a pull from before it asks for a reconcile
 * (reached_back false), and so does the reconcile's own reading (changes
 * do not reach back to the snapshot). A pull from after the hole reaches
 * back, and lists a second apart (datetimes cut to the second) meet. */
static void
test_hole_between_lists(void **state)
{
    struct fx *f = *state;

    serve(f, "/cli.xml", HOLE_INDEX("2020-01-01T09:00:00Z"));
    serve(f, "/cl1.xml", CL(FROM(T0) " until=\"2020-01-01T06:00:00Z\"",
                            CH("old", "created", "2020-01-01T05:00:00Z")));
    serve(f, "/cl2.xml", CL(FROM("2020-01-01T09:00:00Z"),
                            CH("new", "created", "2020-01-01T13:00:00Z")));
    /* since inside the first list: the hole 06:00-09:00 is after it */
    fx_pull(f, PULL_CHANGES, "/cli.xml", NULL, T("2020-01-01T04:00:00Z"));
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->r.entries, 2);
    assert_false(f->r.reached_back);
    /* since after the hole: nothing missing */
    fx_pull(f, PULL_CHANGES, "/cli.xml", NULL, T("2020-01-01T10:00:00Z"));
    assert_int_equal(f->rc, 0);
    assert_true(f->r.reached_back);
    /* a reconcile of a list at 04:00: its changes do not reach back */
    serve(f, "/rl.xml", RL(AT("2020-01-01T04:00:00Z"), RES("old", 3)));
    fx_pull(f, PULL_RECONCILE, "/rl.xml", "/cli.xml", RS_TIME_NONE);
    assert_int_equal(f->rc, 0);
    assert_true(f->r.changes_read);
    assert_false(f->r.changes_reach_back);

    /* lists a second apart meet */
    reroute(f, "/cli.xml", 0, CT_XML, HOLE_INDEX("2020-01-01T06:00:01Z"));
    reroute(f, "/cl2.xml", 0, CT_XML,
            CL(FROM("2020-01-01T06:00:01Z"),
               CH("new", "created", "2020-01-01T13:00:00Z")));
    fx_pull(f, PULL_CHANGES, "/cli.xml", NULL, T("2020-01-01T04:00:00Z"));
    assert_int_equal(f->rc, 0);
    assert_true(f->r.reached_back);
}

/* pull/tail_follows_the_open_list: an open Change List that names its
 * continuation (Link rel="urn:rspush:changes-after") and has an ETag is
 * read whole once; the next pulls ask its continuation with If-None-Match:
 * a 304 costs nothing and reaches back, new entries are queued and move
 * the continuation on, and the list itself is not read again. A pull
 * from before what was read walks the list again. */
static void
test_tail_follows_the_open_list(void **state)
{
    struct fx *f = *state;

    reroute(f, "/ocl.xml", 0, TAIL_HDRS("v1", "/tail1.xml"),
            CL(FROM(T0), CH("a", "created", T1)));
    fx_pull(f, PULL_CHANGES, "/ocl.xml", NULL, T(T0));
    assert_int_equal(f->rc, 0);
    assert_int_equal(todo_of(f, "a", NULL, 0, NULL), LEDGER_CREATE);
    assert_int_equal(tu_httpd_hits(f->srv, "/ocl.xml"), 1);

    /* nothing new: the continuation, conditionally, answered 304 */
    reroute(f, "/tail1.xml", 304, NULL, NULL);
    fx_pull(f, PULL_CHANGES, "/ocl.xml", NULL, T(T1));
    assert_int_equal(f->rc, 0);
    assert_true(f->r.reached_back);
    assert_int_equal(f->r.entries, 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/tail1.xml"), 1);
    assert_string_equal(f->srv->inm, "\"v1\"");
    assert_int_equal(tu_httpd_hits(f->srv, "/ocl.xml"), 1);

    /* one new entry: read from the continuation, which moves on */
    reroute(f, "/tail1.xml", 0, TAIL_HDRS("v2", "/tail2.xml"),
            CL(FROM(T1), CH("b", "created", T2)));
    fx_pull(f, PULL_CHANGES, "/ocl.xml", NULL, T(T1));
    assert_int_equal(f->rc, 0);
    assert_true(f->r.reached_back);
    assert_int_equal(f->r.entries, 1);
    assert_int_equal(todo_of(f, "b", NULL, 0, NULL), LEDGER_CREATE);
    assert_int_equal(tu_httpd_hits(f->srv, "/tail1.xml"), 1);  /* rerouted */
    assert_string_equal(f->srv->inm, "\"v1\"");
    assert_int_equal(tu_httpd_hits(f->srv, "/ocl.xml"), 1);
    reroute(f, "/tail2.xml", 304, NULL, NULL);
    fx_pull(f, PULL_CHANGES, "/ocl.xml", NULL, T(T2));
    assert_int_equal(tu_httpd_hits(f->srv, "/tail2.xml"), 1);
    assert_string_equal(f->srv->inm, "\"v2\"");
    assert_int_equal(tu_httpd_hits(f->srv, "/ocl.xml"), 1);

    /* a pull from before what the tail has read (a gap): the list whole */
    reroute(f, "/ocl.xml", 0, TAIL_HDRS("v2", "/tail2.xml"),
            CL(FROM(T0), CH("a", "created", T1) CH("b", "created", T2)));
    fx_pull(f, PULL_CHANGES, "/ocl.xml", NULL, T(T0));
    assert_int_equal(f->rc, 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/ocl.xml"), 1);  /* rerouted */
    assert_int_equal(tu_httpd_hits(f->srv, "/tail2.xml"), 1);
    assert_int_equal(f->r.entries, 2);
}

/* pull/tail_closed_or_gone: a continuation that answers a closed list
 * (until), or 404 (the change it reads on from is gone), sends the pull
 * back to what it was asked to read, which names what follows; a list
 * without a validator, or without a continuation, is read whole each
 * time. */
static void
test_tail_closed_or_gone(void **state)
{
    struct fx *f = *state;

    reroute(f, "/ocl.xml", 0, TAIL_HDRS("v1", "/tail1.xml"),
            CL(FROM(T0), CH("a", "created", T1)));
    fx_pull(f, PULL_CHANGES, "/ocl.xml", NULL, T(T0));
    assert_int_equal(tu_httpd_hits(f->srv, "/ocl.xml"), 1);

    /* closed: the list is read again from the start */
    reroute(f, "/tail1.xml", 0, CT_XML,
            CL(FROM(T1) " until=\"" T3 "\"", CH("c", "created", T2)));
    fx_pull(f, PULL_CHANGES, "/ocl.xml", NULL, T(T1));
    assert_int_equal(f->rc, 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/tail1.xml"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/ocl.xml"), 2);
    assert_int_equal(todo_of(f, "c", NULL, 0, NULL), LEDGER_CREATE);

    /* (this server's list still names the same continuation, which the
     * walk took up again) gone (404): likewise */
    reroute(f, "/tail1.xml", 404, CT_XML, "no such change");
    fx_pull(f, PULL_CHANGES, "/ocl.xml", NULL, T(T1));
    assert_int_equal(f->rc, 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/tail1.xml"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/ocl.xml"), 3);

    /* no validator: no tail, the list each time */
    reroute(f, "/plain.xml", 0,
            CT_XML "\nLink: </tail9.xml>; rel=\"urn:rspush:changes-after\"",
            CL(FROM(T0), CH("d", "created", T1)));
    fx_pull(f, PULL_CHANGES, "/plain.xml", NULL, T(T0));
    fx_pull(f, PULL_CHANGES, "/plain.xml", NULL, T(T1));
    assert_int_equal(tu_httpd_hits(f->srv, "/plain.xml"), 2);
    /* no continuation: likewise */
    reroute(f, "/nolink.xml", 0, CT_XML "\nETag: \"v1\"",
            CL(FROM(T0), CH("e", "created", T1)));
    fx_pull(f, PULL_CHANGES, "/nolink.xml", NULL, T(T0));
    fx_pull(f, PULL_CHANGES, "/nolink.xml", NULL, T(T1));
    assert_int_equal(tu_httpd_hits(f->srv, "/nolink.xml"), 2);
    assert_int_equal(f->srv->misses, 0);
}

/* ---------------------------------------------------------- RECONCILE */

/* pull/baseline_then_applied: a reconcile of an empty mirror queues every
 * entry as a creation dated at the list's at; applied, the mirror holds
 * them, and the same reconcile again finds nothing to do. */
static void
test_baseline_then_applied(void **state)
{
    struct fx *f = *state;
    rs_time_t dt = RS_TIME_NONE;
    struct stat sb;

    serve(f, "/rl.xml", RL(AT(TA), RES("r1", 3) RES("r2", 4) RES("r3", 5)));
    (void)tu_httpd_add(f->srv, "/r1", 0, NULL, "one");
    (void)tu_httpd_add(f->srv, "/r2", 0, NULL, "four");
    (void)tu_httpd_add(f->srv, "/r3", 0, NULL, "three");
    fx_pull(f, PULL_RECONCILE, "/rl.xml", NULL, RS_TIME_NONE);
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->r.added, 3);
    assert_int_equal(f->r.entries, 3);
    assert_int_equal(f->r.docs, 1);
    assert_true(f->r.snapshot == T(TA));
    assert_true(f->r.newest == T(TA));
    assert_false(f->r.changes_read);
    assert_string_equal(f->r.changes_error, "");
    assert_int_equal(todo_of(f, "r2", NULL, 0, &dt), LEDGER_CREATE);
    assert_true(dt == T(TA));
    assert_int_equal(todo_count(f), 3);

    apply_pause(f->a, false);
    apply_kick(f->a);
    TU_LOOP_UNTIL(&f->l, f->results[APPLY_CREATED] == 3, WATCHDOG_MS);
    assert_int_equal(mirror_stat(f->mirror, "r3", &sb), 0);
    assert_int_equal(sb.st_size, 5);
    assert_int_equal(todo_count(f), 0);

    fx_pull(f, PULL_RECONCILE, "/rl.xml", NULL, RS_TIME_NONE);
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->r.unchanged, 3);
    assert_int_equal(f->r.added + f->r.updated + f->r.deleted, 0);
    assert_int_equal(todo_count(f), 0);
    assert_int_equal(f->results[APPLY_CREATED], 3);
}

/* pull/reconcile_deletes_unseen: a live row the list does not name and
 * that changed before its at is deleted (dated at); one that changed
 * after it (push brought it) is too recent and kept; a listed file that
 * differs from its row is fetched again as a repair. */
static void
test_reconcile_deletes_unseen(void **state)
{
    struct fx *f = *state;
    char origin[64];
    rs_time_t dt = RS_TIME_NONE;

    serve(f, "/rl.xml", RL(AT(TA), RES("a", 3) RES("b", 3)));
    put_res(f, "a", "aaa", T("2020-01-01T09:00:00Z"));
    put_res(f, "b", "bbb", T("2020-01-01T09:00:00Z"));
    put_res(f, "c", "ccc", T("2020-01-01T09:00:00Z"));
    put_res(f, "d", "ddd", T("2020-01-01T12:30:00Z"));
    /* b's file changed behind the mirror's back */
    struct mirror_file *mf = NULL;
    assert_int_equal(mirror_begin(f->mirror, "b", &mf), 0);
    assert_int_equal(mirror_write(mf, "b", 1), 0);
    assert_int_equal(mirror_commit(mf, RS_TIME_NONE), 0);

    fx_pull(f, PULL_RECONCILE, "/rl.xml", NULL, RS_TIME_NONE);
    assert_int_equal(f->rc, 0);
    assert_int_equal(todo_of(f, "a", NULL, 0, NULL), 0);
    assert_int_equal(todo_of(f, "b", origin, sizeof(origin), NULL),
                     LEDGER_UPDATE);
    assert_string_equal(origin, APPLY_ORIGIN_REPAIR);
    assert_int_equal(todo_of(f, "c", NULL, 0, &dt), LEDGER_DELETE);
    assert_true(dt == T(TA));
    assert_int_equal(todo_of(f, "d", NULL, 0, NULL), 0);
    assert_int_equal(f->r.unchanged, 1);
    assert_int_equal(f->r.updated, 1);
    assert_int_equal(f->r.deleted, 1);
    assert_int_equal(f->r.recent, 1);
    assert_int_equal(f->r.deletions_held, 0);
}

/* pull/brought_forward: a Resource List older than its Change Lists is
 * brought forward by them: the list is peeked for its at, the changes
 * since are offered first, an entry a later change superseded is left to
 * it (nothing fetched that a later change deleted, nothing deleted that a
 * later change created), and a mirror change newer than every document is
 * too recent to judge. */
static void
test_brought_forward(void **state)
{
    struct fx *f = *state;

    serve(f, "/rl.xml", RL(AT(TA), RES("x", 3) RES("k", 3) RES("m", 3)));
    serve(f, "/cl.xml", CL(FROM("2020-01-01T11:00:00Z"),
                           CH("x", "deleted", "2020-01-01T12:00:10Z")
                           CH("y", "created", "2020-01-01T12:00:20Z")
                           CH("m", "deleted", "2020-01-01T12:00:30Z")));
    put_res(f, "k", "kkk", T("2020-01-01T09:00:00Z"));
    put_res(f, "m", "mmm", T("2020-01-01T09:00:00Z"));
    put_res(f, "y", "yyy", T("2020-01-01T12:00:25Z"));    /* pushed */
    put_res(f, "z", "zzz", T("2020-01-01T13:00:00Z"));    /* pushed */
    put_res(f, "w", "www", T("2020-01-01T11:00:00Z"));    /* gone */
    fx_pull(f, PULL_RECONCILE, "/rl.xml", "/cl.xml", RS_TIME_NONE);
    assert_int_equal(f->rc, 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/rl.xml"), 2);   /* peek, list */
    assert_int_equal(tu_httpd_hits(f->srv, "/cl.xml"), 1);
    /* x: listed, deleted after at: not fetched (a tombstone, no row) */
    assert_int_equal(todo_of(f, "x", NULL, 0, NULL), 0);
    assert_int_equal(todo_of(f, "k", NULL, 0, NULL), 0);
    assert_int_equal(todo_of(f, "m", NULL, 0, NULL), LEDGER_DELETE);
    /* y: created after at, not listed: kept */
    assert_int_equal(todo_of(f, "y", NULL, 0, NULL), 0);
    assert_int_equal(todo_of(f, "z", NULL, 0, NULL), 0);
    assert_int_equal(todo_of(f, "w", NULL, 0, NULL), LEDGER_DELETE);
    assert_int_equal(todo_count(f), 2);
    assert_true(f->r.snapshot == T(TA));
    assert_true(f->r.changes_read);
    assert_true(f->r.changes_reach_back);
    assert_string_equal(f->r.changes_error, "");
    assert_int_equal(f->r.changes, 3);
    assert_int_equal(f->r.explained, 3);      /* x, m in the list; y */
    assert_int_equal(f->r.recent, 1);         /* z */
    assert_int_equal(f->r.deleted, 2);        /* m (announced), w */
    assert_int_equal(f->r.unchanged, 3);      /* x, y offered; k */
    assert_int_equal(f->r.added + f->r.updated, 0);
    assert_true(f->r.newest == T("2020-01-01T12:00:30Z"));
    assert_int_equal(f->r.docs, 1);
    assert_int_equal(f->r.entries, 6);
}

/* pull/no_at: a Resource List without at cannot be brought forward (the
 * Change Lists are not even read, and the report says why); the time it
 * speaks for is its newest lastmod. */
static void
test_no_at(void **state)
{
    struct fx *f = *state;

    serve(f, "/rl.xml", RL("",
          "<url><loc>{B}/p</loc><lastmod>2020-01-01T10:00:00Z</lastmod>"
          "</url><url><loc>{B}/q</loc><lastmod>2020-01-01T07:00:00Z"
          "</lastmod></url>"));
    serve(f, "/cl.xml", CL(FROM(T0), ""));
    fx_pull(f, PULL_RECONCILE, "/rl.xml", "/cl.xml", RS_TIME_NONE);
    assert_int_equal(f->rc, 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/cl.xml"), 0);
    assert_true(f->r.snapshot == RS_TIME_NONE);
    assert_false(f->r.changes_read);
    assert_non_null(strstr(f->r.changes_error, "no at"));
    assert_true(f->r.newest == T("2020-01-01T10:00:00Z"));
    assert_int_equal(f->r.added, 2);
}

/* pull/future_times: a time of the Source's beyond our clock's skew (a
 * change's datetime, a list's at, a lastmod: a clock years wrong, or a
 * hostile publisher) is taken as of now and counted. Taken as it came, it
 * became the mark the next pull reads from, and every later change looked
 * older than it: rssub was blind until 2099. A time within the skew is
 * taken as it is. */
static void
test_future_times(void **state)
{
    struct fx *f = *state;
    char near[RS_TIME_BUFSZ];

    rs_time_format(rs_time_now() + RS_TIME_SKEW_US / 2, near);
    char cl[1024];
    snprintf(cl, sizeof(cl), "%s",
             CL(FROM(T0), CH("a", "updated", "2099-01-01T00:00:00Z")
                          CH("b", "created", "2020-01-01T10:00:00Z")
                          "<url><loc>{B}/c</loc><rs:md change=\"created\" "
                          "datetime=\"NEAR\"/></url>"));
    char *at = strstr(cl, "NEAR");
    char body[1100];
    snprintf(body, sizeof(body), "%.*s%s%s", (int)(at - cl), cl, near,
             at + 4);
    serve(f, "/cl.xml", body);
    rs_time_t before = rs_time_now();
    fx_pull(f, PULL_CHANGES, "/cl.xml", NULL, T(T0));
    rs_time_t after = rs_time_now();
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->r.future, 1);
    rs_time_t dt = RS_TIME_NONE;
    assert_int_equal(todo_of(f, "a", NULL, 0, &dt), LEDGER_UPDATE);
    assert_true(dt >= before && dt <= after);
    assert_int_equal(todo_of(f, "c", NULL, 0, &dt), LEDGER_CREATE);
    assert_true(dt == T(near));
    /* the mark: the newest change, the one within the skew */
    assert_true(f->r.newest == T(near));

    /* A Resource List made "in 2099", lastmods too: the snapshot it
     * speaks for is now. */
    serve(f, "/rl.xml", RL(AT("2099-01-01T00:00:00Z"),
          "<url><loc>{B}/p</loc><lastmod>2098-01-01T10:00:00Z</lastmod>"
          "</url>"));
    before = rs_time_now();
    fx_pull(f, PULL_RECONCILE, "/rl.xml", NULL, RS_TIME_NONE);
    after = rs_time_now();
    assert_int_equal(f->rc, 0);
    assert_true(f->r.snapshot >= before && f->r.snapshot <= after);
    assert_true(f->r.newest >= before && f->r.newest <= after);
    assert_int_equal(f->r.future, 2);           /* its at, p's lastmod */
    assert_int_equal(todo_of(f, "p", NULL, 0, &dt), LEDGER_CREATE);
    assert_true(dt >= before && dt <= after);
}

/* pull/delete_valve: a reconcile whose list would delete more than
 * max_delete, or more than max_delete_share percent of the live mirror,
 * deletes none of them and says how many it held; under the limits, or
 * with force_delete, all go. */
static void
test_delete_valve(void **state)
{
    struct fx *f = *state;

    serve(f, "/rl.xml", RL(AT(TA), RES("a", 3)));
    put_res(f, "a", "aaa", T("2020-01-01T09:00:00Z"));
    put_res(f, "b", "bbb", T("2020-01-01T09:00:00Z"));
    put_res(f, "c", "ccc", T("2020-01-01T09:00:00Z"));
    put_res(f, "d", "ddd", T("2020-01-01T09:00:00Z"));

    f->po.max_delete = 2;
    fx_pull_new(f);
    fx_pull(f, PULL_RECONCILE, "/rl.xml", NULL, RS_TIME_NONE);
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->r.deletions_held, 3);
    assert_int_equal(f->r.deleted, 0);
    assert_int_equal(todo_count(f), 0);

    f->po.max_delete = 0;
    f->po.max_delete_share = 50;
    fx_pull_new(f);
    fx_pull(f, PULL_RECONCILE, "/rl.xml", NULL, RS_TIME_NONE);
    assert_int_equal(f->r.deletions_held, 3);
    assert_int_equal(f->r.mirror_live, 4);
    assert_int_equal(todo_count(f), 0);

    f->po.max_delete = 1;
    f->po.max_delete_share = 0;
    f->po.force_delete = true;
    fx_pull_new(f);
    fx_pull(f, PULL_RECONCILE, "/rl.xml", NULL, RS_TIME_NONE);
    assert_int_equal(f->r.deletions_held, 0);
    assert_int_equal(f->r.deleted, 3);
    assert_int_equal(todo_of(f, "b", NULL, 0, NULL), LEDGER_DELETE);
    assert_int_equal(todo_of(f, "c", NULL, 0, NULL), LEDGER_DELETE);
    assert_int_equal(todo_of(f, "d", NULL, 0, NULL), LEDGER_DELETE);
    assert_int_equal(todo_count(f), 3);
    assert_int_equal(f->done, 3);
}

/* pull/valve_counts_only_the_list: deletions the Change Lists announce
 * are the Source's own word and are not counted by the valve
 * (docs/subscriber.md, pull.h): one deletion the list asks for is within
 * max_delete 1 even when a Change List also deleted something. */
static void
test_valve_counts_only_the_list(void **state)
{
    struct fx *f = *state;

    serve(f, "/rl.xml", RL(AT(TA), RES("a", 3) RES("b", 3)));
    serve(f, "/cl.xml", CL(FROM("2020-01-01T11:00:00Z"),
                           CH("b", "deleted", "2020-01-01T12:00:10Z")));
    put_res(f, "a", "aaa", T("2020-01-01T09:00:00Z"));
    put_res(f, "b", "bbb", T("2020-01-01T09:00:00Z"));
    put_res(f, "c", "ccc", T("2020-01-01T09:00:00Z"));
    f->po.max_delete = 1;
    fx_pull_new(f);
    fx_pull(f, PULL_RECONCILE, "/rl.xml", "/cl.xml", RS_TIME_NONE);
    assert_int_equal(f->rc, 0);
    assert_int_equal(todo_of(f, "b", NULL, 0, NULL), LEDGER_DELETE);
    assert_int_equal(f->r.deletions_held, 0);
    assert_int_equal(todo_of(f, "c", NULL, 0, NULL), LEDGER_DELETE);
    assert_int_equal(f->r.deleted, 2);
}

/* pull/list_that_loops: an index that lists itself fails the pull (the
 * walk meets a document twice), and nothing the mirror holds is deleted. */
static void
test_list_that_loops(void **state)
{
    struct fx *f = *state;

    serve(f, "/rli.xml", INDEX "<rs:md capability=\"resourcelist\"" AT(TA)
          "/><sitemap><loc>{B}/rl1.xml</loc></sitemap>"
          "<sitemap><loc>{B}/rli.xml</loc></sitemap></sitemapindex>");
    serve(f, "/rl1.xml", RL(AT(TA), RES("a", 3)));
    put_res(f, "a", "aaa", T("2020-01-01T09:00:00Z"));
    put_res(f, "b", "bbb", T("2020-01-01T09:00:00Z"));
    fx_pull(f, PULL_RECONCILE, "/rli.xml", NULL, RS_TIME_NONE);
    assert_true(f->rc < 0);
    assert_true(f->err[0] != '\0');
    assert_int_equal(todo_count(f), 0);
    assert_int_equal(f->r.deleted, 0);
}

/* -------------------------------------------------------------- AUDIT */

#define AUDIT_RL                                                            \
    RL(AT(TA), RES("k", 3) RES("u", 7) RES("n", 3) RES("x", 3)              \
               "<url><loc>http://elsewhere.example/o</loc></url>")
#define AUDIT_CL                                                            \
    CL(FROM("2020-01-01T11:00:00Z"),                                        \
       CH("v", "created", "2020-01-01T12:00:10Z")                           \
       CH("x", "deleted", "2020-01-01T12:00:20Z"))

static void
audit_mirror(struct fx *f)
{
    put_res(f, "k", "kkk", T("2020-01-01T09:00:00Z"));    /* in step */
    put_res(f, "u", "uuuuu", T("2020-01-01T09:00:00Z"));  /* other length */
    put_res(f, "g", "ggg", T("2020-01-01T09:00:00Z"));    /* gone */
    put_res(f, "x", "xxx", T("2020-01-01T09:00:00Z"));    /* deleted since */
    put_res(f, "z", "zzz", T("2020-01-01T13:00:00Z"));    /* too recent */
    assert_int_equal(apply_flush(f->a), 0);
}

static void
audit_check(struct fx *f)
{
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->ndiffs, 6);
    assert_true(has_diff(f, "added n"));
    assert_true(has_diff(f, "added v"));
    assert_true(has_diff(f, "updated u"));
    assert_true(has_diff(f, "deleted g"));
    assert_true(has_diff(f, "deleted x"));
    assert_true(has_diff(f, "refused http://elsewhere.example/o"));
    assert_int_equal(f->r.kind, PULL_AUDIT);
    assert_int_equal(f->r.added, 2);
    assert_int_equal(f->r.updated, 1);
    assert_int_equal(f->r.deleted, 2);
    assert_int_equal(f->r.refused, 1);
    assert_int_equal(f->r.unchanged, 1);
    assert_int_equal(f->r.explained, 1);
    assert_int_equal(f->r.recent, 1);
    assert_int_equal(f->r.changes, 2);
    assert_true(f->r.snapshot == T(TA));
    assert_true(f->r.changes_read && f->r.changes_reach_back);
    assert_int_equal(todo_count(f), 0);
}

/* pull/audit: an audit reports each difference through on_diff (added,
 * updated, deleted; a listed URI the mirror may not hold is "refused", not
 * a difference), judges what the Change Lists changed after the list by
 * those changes, counts what is too recent, and queues nothing. */
static void
test_audit(void **state)
{
    struct fx *f = *state;

    serve(f, "/rl.xml", AUDIT_RL);
    serve(f, "/cl.xml", AUDIT_CL);
    audit_mirror(f);
    fx_pull(f, PULL_AUDIT, "/rl.xml", "/cl.xml", RS_TIME_NONE);
    audit_check(f);
}

/* pull/audit_readonly: the same audit on a read-only ledger beside the
 * writer (rssub audit next to a running daemon) finds the same, keeping
 * what it saw in memory, and writes nothing (no generation taken). */
static void
test_audit_readonly(void **state)
{
    struct fx *f = *state;
    char err[256], *gen = NULL;
    struct ledger *ro;
    struct apply *ra;

    serve(f, "/rl.xml", AUDIT_RL);
    serve(f, "/cl.xml", AUDIT_CL);
    audit_mirror(f);
    ro = ledger_open(f->db, LEDGER_READONLY, err, sizeof(err));
    assert_non_null(ro);
    struct apply_opts ao = { .base = f->l.base, .http = f->http,
                             .ledger = ro, .mirror = f->mirror,
                             .pathmap = f->pm };
    ra = apply_new(&ao, err, sizeof(err));
    assert_non_null(ra);
    apply_pause(ra, true);
    f->po.ledger = ro;
    f->po.apply = ra;
    f->po.readonly = true;
    fx_pull_new(f);
    fx_pull(f, PULL_AUDIT, "/rl.xml", "/cl.xml", RS_TIME_NONE);
    audit_check(f);
    assert_int_equal(ledger_meta_get(f->ledger, "gen", &gen), RS_ENOTFOUND);
    pull_free(f->p);
    f->p = NULL;
    apply_free(ra);
    ledger_close(ro);
}

/* --------------------------------------------------------------- API */

/* pull/busy_and_free_in_flight: a second start while one runs is
 * RS_ESTATE; freed while a document is out, the pull never calls back and
 * the loop ends empty. */
static void
test_busy_and_free_in_flight(void **state)
{
    struct fx *f = *state;
    struct tu_route *r = tu_httpd_add(f->srv, "/rl.xml", 0, CT_XML, "");

    r->never = true;
    assert_int_equal(pull_start(f->p, PULL_RECONCILE,
                                tu_httpd_url(f->srv, "/rl.xml"), NULL,
                                RS_TIME_NONE), 0);
    assert_int_equal(pull_start(f->p, PULL_CHANGES,
                                tu_httpd_url(f->srv, "/rl.xml"), NULL,
                                RS_TIME_NONE), RS_ESTATE);
    TU_LOOP_UNTIL(&f->l, f->srv->requests == 1, WATCHDOG_MS);
    pull_free(f->p);
    f->p = NULL;
    tu_loop_drain(&f->l, f->http, WATCHDOG_MS);
    assert_int_equal(f->done, 0);
    pull_free(NULL);
}

/* pull/alloc_failures: pull_new fails cleanly (NULL) at every allocation
 * it makes, and pull_start with RS_ENOMEM and no on_done, the pull left
 * idle; each then succeeds, and the pull it starts ends once. */
static void
test_alloc_failures(void **state)
{
    struct fx *f = *state;
    struct pull *p = NULL;
    unsigned long n;
    int rc = RS_ENOMEM;

    serve(f, "/rl.xml", RL(AT(TA), RES("a", 3)));
    for (n = 1; n < 1000 && p == NULL; n++) {
        tu_alloc_fail_at(n);
        p = pull_new(&f->po);
        tu_alloc_fail_at(0);
    }
    assert_non_null(p);
    assert_true(n > 2);
    pull_free(f->p);
    f->p = p;
    for (n = 1; n < 1000; n++) {
        tu_alloc_fail_at(n);
        rc = pull_start(f->p, PULL_RECONCILE, tu_httpd_url(f->srv, "/rl.xml"),
                        tu_httpd_url(f->srv, "/cl.xml"), RS_TIME_NONE);
        tu_alloc_fail_at(0);
        if (rc == 0)
            break;
        assert_int_equal(rc, RS_ENOMEM);
        assert_false(pull_busy(f->p));
    }
    assert_int_equal(rc, 0);
    assert_true(n > 1);
    TU_LOOP_UNTIL(&f->l, f->done == 1, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 30);
    assert_int_equal(f->done, 1);
    assert_int_equal(f->rc, 0);
}

int
main(void)
{
#define T_(name, fn) { "pull/" name, fn, fx_setup, fx_teardown, NULL }
    const struct CMUnitTest tests[] = {
        T_("changes_since", test_changes_since),
        T_("changes_not_reached_back", test_changes_not_reached_back),
        T_("closed_lists_skipped", test_closed_lists_skipped),
        T_("hole_between_lists", test_hole_between_lists),
        T_("tail_follows_the_open_list", test_tail_follows_the_open_list),
        T_("tail_closed_or_gone", test_tail_closed_or_gone),
        T_("baseline_then_applied", test_baseline_then_applied),
        T_("reconcile_deletes_unseen", test_reconcile_deletes_unseen),
        T_("brought_forward", test_brought_forward),
        T_("no_at", test_no_at),
        T_("future_times", test_future_times),
        T_("delete_valve", test_delete_valve),
        T_("valve_counts_only_the_list", test_valve_counts_only_the_list),
        T_("list_that_loops", test_list_that_loops),
        T_("audit", test_audit),
        T_("audit_readonly", test_audit_readonly),
        T_("busy_and_free_in_flight", test_busy_and_free_in_flight),
        T_("alloc_failures", test_alloc_failures),
    };
#undef T_
    int rc;

    signal(SIGPIPE, SIG_IGN);
    unsetenv("http_proxy");
    unsetenv("HTTP_PROXY");
    unsetenv("all_proxy");
    unsetenv("ALL_PROXY");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rc = cmocka_run_group_tests_name("sub_pull", tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
