/* test_sub_dump.c - subscriber/dump.c (a baseline from a Resource Dump)
 * against a real evhttp server (tu_httpd.h) serving a dump document and
 * its packages, ZIPs built here with libzip's writing API (manifest and
 * members, hashes computed with OpenSSL), into a real mirror and ledger in
 * a temp dir: members verified and written, a bad member left to the
 * reconcile that follows, refused and newer members, packages that 404,
 * lie about their length or are not ZIPs, the dump freed in flight, and
 * a package of 500 members written by 1, 2, 4 and one thread per CPU.
 * on_done is counted exactly; every test runs under a watchdog and ends
 * with nothing left on the loop, clean under ASan. */
#include "testutil.h"
#include "tu_httpd.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <time.h>
#include <zip.h>

#include "apply.h"
#include "dump.h"
#include "ledger.h"
#include "mirror.h"
#include "pathmap.h"
#include "pull.h"
#include "rs_alloc.h"
#include "rs_http.h"

#define WATCHDOG_MS 10000u
#define TA "2020-01-01T12:00:00Z"
#define LM "2020-01-01T08:00:00Z"
#define NS "xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" " \
           "xmlns:rs=\"http://www.openarchives.org/rs/terms/\""
#define DOCSZ 8192

struct fx {
    struct tu_loop l;
    struct tu_httpd *srv;
    char *dir;
    char tmp[4200], tmpbase[4300];
    struct ledger *ledger;
    struct mirror *mirror;
    struct pathmap *pm;
    struct rs_http *http;
    struct apply *a;
    struct dump *d;
    /* on_done */
    unsigned done;
    int rc;
    char err[600];
    struct dump_report r;
    /* on_problem */
    unsigned problems;
    char prob_uri[256], prob_why[512];
    bool prob_refused;
    /* generation_rotated: the dump document served once the first
     * package's last byte is out (on_paced_end) */
    char *next_doc;
    /* a pull after the dump */
    unsigned pulls;
    int pull_rc;
    struct pull_report pr;
};

/* One resource of a package: its path at the Source (and in the ZIP), its
 * content, and the content the manifest describes (NULL: the same). */
struct member {
    const char *path;
    const char *content;
    const char *claimed;
    const char *uri;            /* NULL: {origin}/path */
};

static rs_time_t
T(const char *s)
{
    rs_time_t t;

    assert_int_equal(rs_time_parse(s, strlen(s), &t), 0);
    return t;
}

static void
on_done(void *ud, int rc, const char *err, const struct dump_report *r)
{
    struct fx *f = ud;

    f->done++;
    f->rc = rc;
    snprintf(f->err, sizeof(f->err), "%s", err);
    f->r = *r;
}

static void
on_problem(void *ud, const char *uri, const char *why, bool refused)
{
    struct fx *f = ud;

    f->problems++;
    f->prob_refused = refused;
    snprintf(f->prob_uri, sizeof(f->prob_uri), "%s", uri);
    snprintf(f->prob_why, sizeof(f->prob_why), "%s", why);
}

/* Linked with -Wl,--wrap=pthread_create (tests/CMakeLists.txt): while
 * no_threads is set, every thread our code asks for is refused. */
static bool no_threads;
static unsigned threads_refused;

int __real_pthread_create(pthread_t *th, const pthread_attr_t *attr,
                          void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *th, const pthread_attr_t *attr,
                          void *(*fn)(void *), void *arg);

int
__wrap_pthread_create(pthread_t *th, const pthread_attr_t *attr,
                      void *(*fn)(void *), void *arg)
{
    if (no_threads) {
        threads_refused++;
        return EAGAIN;
    }
    return __real_pthread_create(th, attr, fn, arg);
}

/* And with -Wl,--wrap=mkdirat: while no_stage is set, no stage can be
 * made in the mirror (as in a root rssub may not create entries in). */
static bool no_stage;
static unsigned stages_refused;

int __real_mkdirat(int dirfd, const char *path, mode_t mode);
int __wrap_mkdirat(int dirfd, const char *path, mode_t mode);

int
__wrap_mkdirat(int dirfd, const char *path, mode_t mode)
{
    if (no_stage && strncmp(path, ".rssub-stage.", 13) == 0) {
        stages_refused++;
        errno = EACCES;
        return -1;
    }
    return __real_mkdirat(dirfd, path, mode);
}

/* And with -Wl,--wrap=zip_open_from_source: while opens are held, a
 * package's open (on the opener thread) waits until the test lets it go. */
static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cv = PTHREAD_COND_INITIALIZER;
static bool opens_held;
static unsigned opens_waiting;

zip_t *__real_zip_open_from_source(zip_source_t *src, int flags,
                                   zip_error_t *ze);
zip_t *__wrap_zip_open_from_source(zip_source_t *src, int flags,
                                   zip_error_t *ze);

zip_t *
__wrap_zip_open_from_source(zip_source_t *src, int flags, zip_error_t *ze)
{
    pthread_mutex_lock(&hold_mu);
    if (opens_held) {
        opens_waiting++;
        while (opens_held)
            pthread_cond_wait(&hold_cv, &hold_mu);
        opens_waiting--;
    }
    pthread_mutex_unlock(&hold_mu);
    return __real_zip_open_from_source(src, flags, ze);
}

static void
hold_opens(bool on)
{
    pthread_mutex_lock(&hold_mu);
    opens_held = on;
    pthread_cond_broadcast(&hold_cv);
    pthread_mutex_unlock(&hold_mu);
}

static unsigned
opens_waiting_now(void)
{
    pthread_mutex_lock(&hold_mu);
    unsigned n = opens_waiting;
    pthread_mutex_unlock(&hold_mu);
    return n;
}

/* The dump's options in this fixture. */
static struct dump_opts
fx_dump_opts(struct fx *f, unsigned threads)
{
    return (struct dump_opts){
        .base = f->l.base, .http = f->http, .ledger = f->ledger,
        .mirror = f->mirror, .pathmap = f->pm, .apply = f->a,
        .tmpbase = f->tmpbase, .threads = threads, .on_problem = on_problem,
        .on_done = on_done, .ud = f,
    };
}

static int
fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    struct mirror_opts mo = { .fsync = MIRROR_FSYNC_NONE };
    char err[512], path[4200];

    assert_non_null(f);
    tu_loop_init(&f->l);
    f->srv = tu_httpd_new(f->l.base);
    f->dir = tu_mkdtemp();
    snprintf(path, sizeof(path), "%s/state.db", f->dir);
    f->ledger = ledger_open(path, 0, err, sizeof(err));
    if (f->ledger == NULL)
        fail_msg("ledger_open: %s", err);
    snprintf(path, sizeof(path), "%s/mirror", f->dir);
    f->mirror = mirror_open(path, &mo, err, sizeof(err));
    if (f->mirror == NULL)
        fail_msg("mirror_open: %s", err);
    snprintf(f->tmp, sizeof(f->tmp), "%s/tmp", f->dir);
    assert_int_equal(mkdir(f->tmp, 0700), 0);
    snprintf(f->tmpbase, sizeof(f->tmpbase), "%s/state.db", f->tmp);
    f->pm = pathmap_new();
    assert_non_null(f->pm);
    assert_int_equal(pathmap_add_prefix(f->pm, f->srv->origin, NULL), 0);
    f->http = rs_http_new(f->l.base, NULL);
    assert_non_null(f->http);
    struct apply_opts ao = {
        .base = f->l.base, .http = f->http, .ledger = f->ledger,
        .mirror = f->mirror, .pathmap = f->pm,
    };
    f->a = apply_new(&ao, err, sizeof(err));
    if (f->a == NULL)
        fail_msg("apply_new: %s", err);
    apply_pause(f->a, true);
    struct dump_opts o = fx_dump_opts(f, 0);
    f->d = dump_new(&o);
    assert_non_null(f->d);
    *state = f;
    return 0;
}

static int
fx_teardown(void **state)
{
    struct fx *f = *state;

    no_threads = no_stage = false;    /* a failed no_threads, no_stage */
    hold_opens(false);                /* a failed free_while_opening */
    dump_free(f->d);
    apply_free(f->a);
    rs_http_free(f->http);
    mirror_close(f->mirror);
    pathmap_free(f->pm);
    ledger_close(f->ledger);
    tu_httpd_free(f->srv);
    tu_loop_cleanup(&f->l);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f->next_doc);
    free(f);
    return 0;
}

/* ------------------------------------------------------------ builders */

/* "md5:HEX" of s, with OpenSSL. */
static void
md5_of(const char *s, char *out, size_t outsz)
{
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned dl = 0;
    size_t o;

    assert_int_equal(EVP_Digest(s, strlen(s), d, &dl, EVP_md5(), NULL), 1);
    o = (size_t)snprintf(out, outsz, "md5:");
    for (unsigned i = 0; i < dl; i++)
        o += (size_t)snprintf(out + o, outsz - o, "%02x", d[i]);
}

static void
member_uri(struct fx *f, const struct member *m, char *buf, size_t bufsz)
{
    if (m->uri != NULL)
        snprintf(buf, bufsz, "%s", m->uri);
    else
        snprintf(buf, bufsz, "%s/%s", f->srv->origin, m->path);
}

/* A ZIP of manifest.xml (man) and the members names[i] holding
 * contents[i], built with libzip in the temp dir and served at path; its
 * size. */
static size_t
serve_zip(struct fx *f, const char *path, const char *man,
          const char *const *names, const char *const *contents, size_t n)
{
    char zpath[4300];
    size_t len = 0;
    int ze = 0;
    zip_t *za;
    struct tu_route *r;

    snprintf(zpath, sizeof(zpath), "%s/build.zip", f->dir);
    za = zip_open(zpath, ZIP_CREATE | ZIP_TRUNCATE, &ze);
    assert_non_null(za);
    zip_source_t *src = zip_source_buffer(za, man, strlen(man), 0);
    assert_non_null(src);
    assert_true(zip_file_add(za, "manifest.xml", src, ZIP_FL_ENC_UTF_8) >= 0);
    for (size_t i = 0; i < n; i++) {
        src = zip_source_buffer(za, contents[i], strlen(contents[i]), 0);
        assert_non_null(src);
        assert_true(zip_file_add(za, names[i], src, ZIP_FL_ENC_UTF_8) >= 0);
    }
    assert_int_equal(zip_close(za), 0);

    r = tu_httpd_add(f->srv, path, 0, "Content-Type: application/zip", NULL);
    free(r->body);
    r->body = tu_read_file(zpath, &len);
    assert_non_null(r->body);
    r->body_len = len;
    remove(zpath);
    return len;
}

/* A Resource Dump package of members (manifest at `at`), built with
 * libzip in the temp dir and served at path; its size. */
static size_t
serve_package_at(struct fx *f, const char *path, const char *at,
                 const struct member *m, size_t n)
{
    char *man = malloc(DOCSZ), hash[64], uri[300];
    size_t o, len;

    assert_non_null(man);
    o = (size_t)snprintf(man, DOCSZ, "<?xml version=\"1.0\" encoding=\"UTF-8\""
                         "?>\n<urlset " NS "><rs:md capability=\"resourcedump-"
                         "manifest\" at=\"%s\"/>", at);
    for (size_t i = 0; i < n; i++) {
        const char *c = m[i].claimed != NULL ? m[i].claimed : m[i].content;
        md5_of(c, hash, sizeof(hash));
        member_uri(f, &m[i], uri, sizeof(uri));
        o += (size_t)snprintf(man + o, DOCSZ - o, "<url><loc>%s</loc><lastmod>"
                              LM "</lastmod><rs:md length=\"%zu\" hash=\"%s\" "
                              "path=\"/%s\"/></url>", uri, strlen(c), hash,
                              m[i].path);
    }
    o += (size_t)snprintf(man + o, DOCSZ - o, "</urlset>\n");
    assert_true(o < DOCSZ);

    const char *names[16], *contents[16];
    assert_true(n <= 16);
    for (size_t i = 0; i < n; i++) {
        names[i] = m[i].path;
        contents[i] = m[i].content;
    }
    len = serve_zip(f, path, man, names, contents, n);
    free(man);
    return len;
}

/* serve_package, the manifest at TA. */
static size_t
serve_package(struct fx *f, const char *path, const struct member *m,
              size_t n)
{
    return serve_package_at(f, path, TA, m, n);
}

/* A dump document at `at` listing packages with the lengths given (< 0:
 * none), into doc (DOCSZ). */
static void
dump_doc(char *doc, const char *at, const char *const *pkgs,
         const long long *lens, size_t n)
{
    size_t o;

    o = (size_t)snprintf(doc, DOCSZ, "<?xml version=\"1.0\"?>\n<urlset "
                         NS "><rs:md capability=\"resourcedump\" at=\"%s\"/>",
                         at);
    for (size_t i = 0; i < n; i++) {
        o += (size_t)snprintf(doc + o, DOCSZ - o, "<url><loc>{B}%s</loc>"
                              "<rs:md type=\"application/zip\"", pkgs[i]);
        if (lens[i] >= 0)
            o += (size_t)snprintf(doc + o, DOCSZ - o, " length=\"%lld\"",
                                  lens[i]);
        o += (size_t)snprintf(doc + o, DOCSZ - o, "/></url>");
    }
    snprintf(doc + o, DOCSZ - o, "</urlset>\n");
}

/* The dump document at /rd.xml, at TA, listing packages with the lengths
 * given (< 0: none). */
static void
serve_dump(struct fx *f, const char *const *pkgs, const long long *lens,
           size_t n)
{
    char doc[DOCSZ];

    dump_doc(doc, TA, pkgs, lens, n);
    (void)tu_httpd_add(f->srv, "/rd.xml", 0, "Content-Type: application/xml",
                       doc);
}

/* The dump document at /rd.xml as serve_dump, at `at`. */
static void
serve_dump_at(struct fx *f, const char *at, const char *const *pkgs,
              const long long *lens, size_t n)
{
    char doc[DOCSZ];

    dump_doc(doc, at, pkgs, lens, n);
    (void)tu_httpd_add(f->srv, "/rd.xml", 0, "Content-Type: application/xml",
                       doc);
}

static void
fx_dump(struct fx *f)
{
    unsigned before = f->done;

    assert_int_equal(dump_start(f->d, tu_httpd_url(f->srv, "/rd.xml")), 0);
    TU_LOOP_UNTIL(&f->l, f->done > before, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 30);
    assert_int_equal(f->done, before + 1);
}

/* The mirror's file at path holds content. */
static void
has_file(struct fx *f, const char *path, const char *content)
{
    char full[4400], *got;
    size_t len = 0;

    snprintf(full, sizeof(full), "%s/%s", mirror_root(f->mirror), path);
    got = tu_read_file(full, &len);
    if (got == NULL)
        fail_msg("%s: not in the mirror", path);
    assert_int_equal(len, strlen(content));
    assert_memory_equal(got, content, len);
    free(got);
}

static bool
has_row(struct fx *f, const char *path, struct ledger_res *out, char **buf)
{
    char uri[300];
    int rc;

    snprintf(uri, sizeof(uri), "%s/%s", f->srv->origin, path);
    rc = ledger_res_get(f->ledger, uri, out, buf);
    assert_true(rc == 0 || rc == RS_ENOTFOUND);
    return rc == 0;
}

/* Files the dump left in its temp dir. */
static unsigned
tmp_files(struct fx *f)
{
    DIR *dh = opendir(f->tmp);
    struct dirent *de;
    unsigned n = 0;

    assert_non_null(dh);
    while ((de = readdir(dh)) != NULL)
        if (de->d_name[0] != '.' || strncmp(de->d_name, ".rssub", 6) == 0)
            n++;
    closedir(dh);
    return n;
}

/* Take path's route away (a later tu_httpd_add of it answers instead). */
static void
unroute(struct fx *f, const char *path)
{
    for (size_t i = 0; i < f->srv->nroutes; i++)
        if (strcmp(f->srv->routes[i].path, path) == 0)
            f->srv->routes[i].path[0] = '\0';
}

/* -------------------------------------------------------------- tests */

/* dump/packages_written: every member of every package is verified,
 * written to the mirror and recorded in the ledger as of the dump's at,
 * one package at a time; the temp files go; on_done once. */
static void
test_packages_written(void **state)
{
    struct fx *f = *state;
    const struct member p1[] = { { "res/a", "alpha", NULL, NULL },
                                 { "res/b", "bravo!", NULL, NULL } };
    const struct member p2[] = { { "res/c/d", "charlie", NULL, NULL } };
    const char *pkgs[] = { "/p1.zip", "/p2.zip" };
    long long lens[2];
    struct ledger_res r;
    char *buf = NULL, hash[64];

    lens[0] = (long long)serve_package(f, "/p1.zip", p1, 2);
    lens[1] = (long long)serve_package(f, "/p2.zip", p2, 1);
    serve_dump(f, pkgs, lens, 2);
    fx_dump(f);
    assert_int_equal(f->rc, 0);
    assert_string_equal(f->err, "");
    assert_int_equal(f->r.packages, 2);
    assert_int_equal(f->r.written, 3);
    assert_int_equal(f->r.failed + f->r.skipped, 0);
    assert_int_equal(f->r.bytes, (uint64_t)(lens[0] + lens[1]));
    assert_true(f->r.at == T(TA));
    has_file(f, "res/a", "alpha");
    has_file(f, "res/b", "bravo!");
    has_file(f, "res/c/d", "charlie");
    assert_true(has_row(f, "res/b", &r, &buf));
    assert_true(r.change_dt == T(TA));
    assert_true(r.lastmod == T(LM));
    assert_int_equal(r.length, 6);
    md5_of("bravo!", hash, sizeof(hash));
    assert_string_equal(r.hash, hash);
    assert_string_equal(r.path, "res/b");
    rs_free(buf);
    assert_int_equal(tu_httpd_hits(f->srv, "/p1.zip"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/p2.zip"), 1);
    assert_int_equal(tmp_files(f), 0);
    assert_int_equal(f->problems, 0);
}

static void
on_pull_done(void *ud, int rc, const char *err, const struct pull_report *r)
{
    struct fx *f = ud;

    (void)err;
    f->pulls++;
    f->pull_rc = rc;
    f->pr = *r;
}

/* dump/bad_member_left_to_reconcile: a member that does not match its
 * manifest is not written (on_problem names it), the others are; the
 * reconcile that follows a dump then fetches that one alone. */
static void
test_bad_member_left_to_reconcile(void **state)
{
    struct fx *f = *state;
    const struct member p1[] = { { "res/a", "alpha", NULL, NULL },
                                 { "res/b", "bravo!", "BRAVO!", NULL } };
    const char *pkgs[] = { "/p1.zip" };
    long long lens[1];
    struct ledger_res r;
    char *buf = NULL, ha[64], hb[64], rl[2048];
    struct stat sb;

    lens[0] = (long long)serve_package(f, "/p1.zip", p1, 2);
    serve_dump(f, pkgs, lens, 1);
    fx_dump(f);
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->r.written, 1);
    assert_int_equal(f->r.failed, 1);
    assert_int_equal(f->problems, 1);
    assert_non_null(strstr(f->prob_uri, "/res/b"));
    assert_true(f->prob_why[0] != '\0');
    assert_false(f->prob_refused); /* NEW-API */
    has_file(f, "res/a", "alpha");
    assert_int_equal(mirror_stat(f->mirror, "res/b", &sb), RS_ENOTFOUND);
    assert_false(has_row(f, "res/b", &r, &buf));

    /* the Source's Resource List, as of the dump */
    md5_of("alpha", ha, sizeof(ha));
    md5_of("BRAVO!", hb, sizeof(hb));
    snprintf(rl, sizeof(rl), "<?xml version=\"1.0\"?>\n<urlset " NS "><rs:md "
             "capability=\"resourcelist\" at=\"" TA "\"/>"
             "<url><loc>{B}/res/a</loc><lastmod>" LM "</lastmod><rs:md "
             "length=\"5\" hash=\"%s\"/></url>"
             "<url><loc>{B}/res/b</loc><lastmod>" LM "</lastmod><rs:md "
             "length=\"6\" hash=\"%s\"/></url></urlset>", ha, hb);
    (void)tu_httpd_add(f->srv, "/rl.xml", 0, "Content-Type: application/xml",
                       rl);
    struct pull_opts po = {
        .base = f->l.base, .http = f->http, .ledger = f->ledger,
        .mirror = f->mirror, .apply = f->a, .pathmap = f->pm,
        .on_done = on_pull_done, .ud = f,
    };
    struct pull *p = pull_new(&po);
    assert_non_null(p);
    assert_int_equal(pull_start(p, PULL_RECONCILE,
                                tu_httpd_url(f->srv, "/rl.xml"), NULL,
                                RS_TIME_NONE), 0);
    TU_LOOP_UNTIL(&f->l, f->pulls == 1, WATCHDOG_MS);
    pull_free(p);
    assert_int_equal(f->pull_rc, 0);
    assert_int_equal(f->pr.added, 1);
    assert_int_equal(f->pr.unchanged, 1);
    assert_int_equal(f->pr.updated + f->pr.deleted, 0);
    struct ledger_todo t;
    char uri[300];
    snprintf(uri, sizeof(uri), "%s/res/b", f->srv->origin);
    assert_int_equal(ledger_todo_get(f->ledger, uri, &t, &buf), 0);
    assert_int_equal(t.change, LEDGER_CREATE);
    rs_free(buf);
    assert_int_equal(f->done, 1);
}

/* dump/refused_and_newer: a member outside the mirror's prefixes is
 * refused (on_problem), and one the mirror holds a newer copy of (push
 * brought it after the dump's at) is skipped, its file untouched. */
static void
test_refused_and_newer(void **state)
{
    struct fx *f = *state;
    const struct member p1[] = {
        { "res/a", "alpha", NULL, NULL },
        { "res/n", "newer?", NULL, NULL },
        { "res/x", "foreign", NULL, "http://elsewhere.example/x" },
    };
    const char *pkgs[] = { "/p1.zip" };
    long long lens[1];
    struct mirror_file *mf = NULL;
    char uri[300];

    snprintf(uri, sizeof(uri), "%s/res/n", f->srv->origin);
    assert_int_equal(mirror_begin(f->mirror, "res/n", &mf), 0);
    assert_int_equal(mirror_write(mf, "pushed", 6), 0);
    assert_int_equal(mirror_commit(mf, RS_TIME_NONE), 0);
    struct ledger_res row = { .uri = uri, .path = "res/n",
                              .lastmod = RS_TIME_NONE,
                              .change_dt = T("2020-01-01T12:30:00Z"),
                              .length = 6 };
    assert_int_equal(ledger_res_put(f->ledger, &row), 0);

    lens[0] = (long long)serve_package(f, "/p1.zip", p1, 3);
    serve_dump(f, pkgs, lens, 1);
    fx_dump(f);
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->r.written, 1);
    assert_int_equal(f->r.skipped, 1);
    assert_int_equal(f->r.failed, 1);
    assert_int_equal(f->problems, 1);
    assert_string_equal(f->prob_uri, "http://elsewhere.example/x");
    assert_non_null(strstr(f->prob_why, "refused"));
    assert_true(f->prob_refused); /* NEW-API */
    has_file(f, "res/n", "pushed");
    has_file(f, "res/a", "alpha");
}

/* dump/package_404: a package that cannot be had ends the dump with an
 * error naming it (once); what the packages before it gave stays. */
static void
test_package_404(void **state)
{
    struct fx *f = *state;
    const struct member p1[] = { { "res/a", "alpha", NULL, NULL } };
    const char *pkgs[] = { "/p1.zip", "/p2.zip", "/p3.zip" };
    long long lens[3] = { 0, -1, -1 };

    lens[0] = (long long)serve_package(f, "/p1.zip", p1, 1);
    (void)serve_package(f, "/p3.zip", p1, 1);
    serve_dump(f, pkgs, lens, 3);
    fx_dump(f);
    assert_int_equal(f->rc, RS_EPROTO);
    assert_non_null(strstr(f->err, "/p2.zip"));
    assert_non_null(strstr(f->err, "HTTP 404"));
    assert_int_equal(f->r.packages, 1);
    assert_int_equal(f->r.written, 1);
    has_file(f, "res/a", "alpha");
    assert_int_equal(tu_httpd_hits(f->srv, "/p3.zip"), 0);
    assert_int_equal(tmp_files(f), 0);
}

/* dump/bad_packages: a package whose size is not what the dump announced,
 * a package that is not a ZIP, and a document that is not a Resource Dump
 * each end the dump with RS_EINVALID and a reason. */
static void
test_bad_packages(void **state)
{
    struct fx *f = *state;
    const struct member p1[] = { { "res/a", "alpha", NULL, NULL } };
    const char *pkgs[] = { "/p1.zip" };
    long long lens[1];

    lens[0] = (long long)serve_package(f, "/p1.zip", p1, 1) + 1;
    serve_dump(f, pkgs, lens, 1);
    fx_dump(f);
    assert_int_equal(f->rc, RS_EINVALID);
    assert_non_null(strstr(f->err, "the dump announced"));
    assert_int_equal(f->r.written, 0);

    f->srv->routes[0].body_len = 10;        /* cut: not a ZIP any more */
    f->srv->routes[1].path[0] = '\0';
    lens[0] = -1;
    serve_dump(f, pkgs, lens, 1);
    fx_dump(f);
    assert_int_equal(f->rc, RS_EINVALID);
    assert_non_null(strstr(f->err, "/p1.zip"));

    f->srv->routes[2].path[0] = '\0';
    (void)tu_httpd_add(f->srv, "/rd.xml", 0, "Content-Type: application/xml",
                       "<urlset " NS "><rs:md capability=\"resourcelist\" "
                       "at=\"" TA "\"/></urlset>");
    fx_dump(f);
    assert_int_equal(f->rc, RS_EINVALID);
    assert_non_null(strstr(f->err, "Resource Dump was expected"));
    assert_int_equal(f->done, 3);
    assert_int_equal(f->problems, 0);
    assert_int_equal(tmp_files(f), 0);
}

/* dump/free_in_flight: a second start while one runs is RS_ESTATE; freed
 * while a package is downloading, the dump never calls back, its temp
 * file goes, and the loop ends empty. */
static void
test_free_in_flight(void **state)
{
    struct fx *f = *state;
    const char *pkgs[] = { "/p1.zip" };
    long long lens[1] = { -1 };
    struct tu_route *r;

    r = tu_httpd_add(f->srv, "/p1.zip", 0, NULL, "");
    r->never = true;
    serve_dump(f, pkgs, lens, 1);
    assert_int_equal(dump_start(f->d, tu_httpd_url(f->srv, "/rd.xml")), 0);
    assert_int_equal(dump_start(f->d, tu_httpd_url(f->srv, "/rd.xml")),
                     RS_ESTATE);
    TU_LOOP_UNTIL(&f->l, r->hits == 1, WATCHDOG_MS);
    assert_int_equal(tmp_files(f), 1);
    dump_free(f->d);
    f->d = NULL;
    assert_int_equal(tmp_files(f), 0);
    tu_loop_drain(&f->l, f->http, WATCHDOG_MS);
    assert_int_equal(f->done, 0);
    dump_free(NULL);
}

/* dump/alloc_failures: dump_new fails cleanly (NULL) at every
 * allocation it makes, dump_start with RS_ENOMEM and no on_done; each
 * then succeeds, and the dump it starts ends once. */
static void
test_alloc_failures(void **state)
{
    struct fx *f = *state;
    const struct member p1[] = { { "res/a", "alpha", NULL, NULL } };
    const char *pkgs[] = { "/p1.zip" };
    long long lens[1] = { -1 };
    struct dump_opts o = fx_dump_opts(f, 0);
    struct dump *d = NULL;
    unsigned long n;
    int rc = RS_ENOMEM;

    (void)serve_package(f, "/p1.zip", p1, 1);
    serve_dump(f, pkgs, lens, 1);
    for (n = 1; n < 1000 && d == NULL; n++) {
        tu_alloc_fail_at(n);
        d = dump_new(&o);
        tu_alloc_fail_at(0);
    }
    assert_non_null(d);
    assert_true(n > 2);
    dump_free(f->d);
    f->d = d;
    for (n = 1; n < 1000; n++) {
        tu_alloc_fail_at(n);
        rc = dump_start(f->d, tu_httpd_url(f->srv, "/rd.xml"));
        tu_alloc_fail_at(0);
        if (rc == 0)
            break;
        assert_int_equal(rc, RS_ENOMEM);
    }
    assert_int_equal(rc, 0);
    TU_LOOP_UNTIL(&f->l, f->done == 1, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 30);
    assert_int_equal(f->done, 1);
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->r.written, 1);
}

/* Member k of a many-member package under prefix: its path and content
 * (100 to a directory, so several threads share one). */
static void
many_member(const char *prefix, size_t k, char *path, size_t psz,
            char *content, size_t csz)
{
    snprintf(path, psz, "%s/d%02zu/f%04zu", prefix, k / 100, k);
    snprintf(content, csz, "content of member %zu of %s", k, prefix);
}

/* A package of n members under prefix, every bad_every-th (from the
 * first) with a manifest hash of other content; served at path. */
static size_t
serve_many(struct fx *f, const char *path, const char *prefix, size_t n,
           size_t bad_every)
{
    size_t cap = 512 + n * 400, o, len;
    char *man = malloc(cap), hash[64], mpath[128], content[128];
    const char **names = calloc(n, sizeof(*names));
    const char **contents = calloc(n, sizeof(*contents));
    char *store = malloc(n * 256);

    assert_non_null(man);
    assert_non_null(names);
    assert_non_null(contents);
    assert_non_null(store);
    o = (size_t)snprintf(man, cap, "<?xml version=\"1.0\"?>\n<urlset " NS
                         "><rs:md capability=\"resourcedump-manifest\" at=\""
                         TA "\"/>");
    for (size_t k = 0; k < n; k++) {
        many_member(prefix, k, mpath, sizeof(mpath), content,
                    sizeof(content));
        md5_of(k % bad_every == 0 ? "something else" : content, hash,
               sizeof(hash));
        o += (size_t)snprintf(man + o, cap - o, "<url><loc>%s/%s</loc>"
                              "<lastmod>" LM "</lastmod><rs:md length=\"%zu\" "
                              "hash=\"%s\" path=\"/%s\"/></url>",
                              f->srv->origin, mpath, strlen(content), hash,
                              mpath);
        names[k] = store + k * 256;
        contents[k] = store + k * 256 + 128;
        snprintf(store + k * 256, 128, "%s", mpath);
        snprintf(store + k * 256 + 128, 128, "%s", content);
    }
    o += (size_t)snprintf(man + o, cap - o, "</urlset>\n");
    assert_true(o < cap);
    len = serve_zip(f, path, man, names, contents, n);
    free(store);
    free(contents);
    free(names);
    free(man);
    return len;
}

/* dump/free_mid_body: freed while a package's bytes are arriving (the
 * server paces them), the dump never calls back, the package's file and
 * its scan go, and the server's half-sent reply is ended (the client
 * hung up), not leaked. */
static void
test_free_mid_body(void **state)
{
    struct fx *f = *state;
    const char *pkgs[] = { "/p1.zip" };
    long long lens[1];
    struct tu_route *r;

    lens[0] = (long long)serve_many(f, "/p1.zip", "p1", 3000, 3001);
    r = &f->srv->routes[f->srv->nroutes - 1];
    r->pace = 4096;
    serve_dump(f, pkgs, lens, 1);
    assert_int_equal(dump_start(f->d, tu_httpd_url(f->srv, "/rd.xml")), 0);
    TU_LOOP_UNTIL(&f->l, r->hits == 1, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 20);       /* some of it, not all */
    assert_int_equal(tmp_files(f), 1);
    dump_free(f->d);
    f->d = NULL;
    assert_int_equal(tmp_files(f), 0);
    tu_loop_drain(&f->l, f->http, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 20);       /* the server sees the hang-up */
    assert_int_equal(f->done, 0);
}

/* dump/package_stalled: a package whose bytes stop coming (the server
 * goes silent halfway, the connection open) fails the dump once the
 * stall limit passes (RS_ETIMEDOUT, "stalled"), though the limit of the
 * whole transfer is hours away; its file goes. */
static void
test_package_stalled(void **state)
{
    struct fx *f = *state;
    const char *pkgs[] = { "/p1.zip" };
    long long lens[1];
    struct tu_route *r;
    struct dump_opts o = fx_dump_opts(f, 0);

    dump_free(f->d);
    o.stall_ms = 300; /* NEW-API */
    f->d = dump_new(&o);
    assert_non_null(f->d);
    lens[0] = (long long)serve_many(f, "/p1.zip", "p1", 3000, 3001);
    r = &f->srv->routes[f->srv->nroutes - 1];
    r->pace = 4096;
    serve_dump(f, pkgs, lens, 1);
    assert_int_equal(dump_start(f->d, tu_httpd_url(f->srv, "/rd.xml")), 0);
    TU_LOOP_UNTIL(&f->l, r->hits == 1 && f->srv->pacer.active, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 10);       /* some of it, not all */
    assert_true(f->srv->pacer.active);
    evtimer_del(f->srv->pacer.ev);    /* then silence */
    TU_LOOP_UNTIL(&f->l, f->done == 1, 5000);
    assert_int_equal(f->rc, RS_ETIMEDOUT);
    assert_non_null(strstr(f->err, "stalled"));
    assert_non_null(strstr(f->err, "/p1.zip"));
    assert_int_equal(f->r.packages, 0);
    assert_int_equal(tmp_files(f), 0);
    tu_loop_run_for(&f->l, 20);       /* the server sees the hang-up */
}

/* dump/future_at: a dump whose at (the document's, or a manifest's) is
 * beyond our clock cannot be true: the dump has none (at_future), not an
 * at of now, which would have the Change Lists read from now and skip
 * what changed since its real time; its members are written all the
 * same. */
static void
test_future_at(void **state)
{
    struct fx *f = *state;
    const char *future = "2999-01-01T00:00:00Z";
    const struct member p1[] = { { "res/a", "alpha", NULL, NULL } };
    const struct member p2[] = { { "res/b", "bravo", NULL, NULL } };
    const char *pk1[] = { "/p1.zip" }, *pk2[] = { "/p2.zip" };
    long long lens[1], len1[1];

    len1[0] = (long long)serve_package(f, "/p1.zip", p1, 1);
    serve_dump_at(f, future, pk1, len1, 1);
    fx_dump(f);
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->r.written, 1);
    assert_true(f->r.at == RS_TIME_NONE);
    assert_true(f->r.at_future); /* NEW-API */
    has_file(f, "res/a", "alpha");

    /* the document's at true, a manifest's in the future */
    unroute(f, "/rd.xml");
    lens[0] = (long long)serve_package_at(f, "/p2.zip", future, p2, 1);
    serve_dump(f, pk2, lens, 1);
    fx_dump(f);
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->r.written, 1);
    assert_true(f->r.at == RS_TIME_NONE);
    assert_true(f->r.at_future); /* NEW-API */
    has_file(f, "res/b", "bravo");

    /* and a true at is kept */
    unroute(f, "/rd.xml");
    serve_dump(f, pk1, len1, 1);
    fx_dump(f);
    assert_int_equal(f->rc, 0);
    assert_true(f->r.at == T(TA)); /* NEW-API */
}

/* generation_rotated: once the first package's last byte is out, the
 * Source has a newer dump and the first one's packages are gone. */
static void
on_paced_end_rotate(void *ud)
{
    struct fx *f = ud;
    size_t len = 0;

    for (size_t i = 0; i < f->srv->nroutes; i++)
        if (strcmp(f->srv->routes[i].path, "/rd.xml") == 0) {
            free(f->srv->routes[i].body);
            f->srv->routes[i].body = tu_httpd_expand(f->srv, f->next_doc,
                                                     &len);
            f->srv->routes[i].body_len = len;
        }
}

/* dump/generation_rotated: a package gone (404) because the Source made a
 * newer dump while the older was read: after what the packages before it
 * gave is recorded, the document is read again, once, and the newer
 * generation's packages are unpacked (reread); the dump succeeds. (One
 * gone with no newer generation still fails it: dump/package_404.) */
static void
test_generation_rotated(void **state)
{
    struct fx *f = *state;
    const struct member g1[] = { { "res/a", "alpha-1", NULL, NULL } };
    const struct member g2a[] = { { "res/a", "alpha-2", NULL, NULL } };
    const struct member g2b[] = { { "res/b", "bravo-2", NULL, NULL } };
    const char *pk1[] = { "/g1/p1.zip", "/g1/p2.zip" };
    const char *pk2[] = { "/g2/p1.zip", "/g2/p2.zip" };
    long long l1[2] = { -1, -1 }, l2[2];
    char doc[DOCSZ];

    (void)serve_package(f, "/g1/p1.zip", g1, 1);
    f->srv->routes[f->srv->nroutes - 1].pace = 64;
    l2[0] = (long long)serve_package(f, "/g2/p1.zip", g2a, 1);
    l2[1] = (long long)serve_package(f, "/g2/p2.zip", g2b, 1);
    serve_dump(f, pk1, l1, 2);
    dump_doc(doc, TA, pk2, l2, 2);
    f->next_doc = strdup(doc);
    assert_non_null(f->next_doc);
    f->srv->on_paced_end = on_paced_end_rotate;
    f->srv->ud = f;
    fx_dump(f);
    assert_int_equal(f->rc, 0);
    assert_string_equal(f->err, "");
    assert_true(f->r.reread); /* NEW-API */
    assert_int_equal(tu_httpd_hits(f->srv, "/rd.xml"), 2);
    assert_int_equal(tu_httpd_hits(f->srv, "/g2/p1.zip"), 1);
    assert_int_equal(tu_httpd_hits(f->srv, "/g2/p2.zip"), 1);
    assert_int_equal(f->r.packages, 3);
    has_file(f, "res/a", "alpha-2");
    has_file(f, "res/b", "bravo-2");
    assert_int_equal(tmp_files(f), 0);
}

/* dump/leftovers_swept: a package a crash left beside the state
 * (STATE.dump-XXXXXX) is removed by dump_new; another state's, or a
 * name that is not one dump makes, is not. */
static void
test_leftovers_swept(void **state)
{
    struct fx *f = *state;
    const char *names[] = { "state.db.dump-AbC123", "other.db.dump-AbC123",
                            "state.db.dump-AbC1234", "state.db" };
    char path[4600];
    struct stat sb;

    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", f->tmp, names[i]);
        FILE *fp = fopen(path, "w");
        assert_non_null(fp);
        fclose(fp);
    }
    dump_free(f->d);
    struct dump_opts o = fx_dump_opts(f, 0);
    f->d = dump_new(&o);
    assert_non_null(f->d);
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", f->tmp, names[i]);
        assert_int_equal(stat(path, &sb) == 0, i != 0);
    }
}

/* dump/threads_write_every_member: a package of 500 members, every 50th
 * not matching its manifest, written with 1, 2 and 4 writer threads
 * (and with one per CPU): each good member in the mirror with its
 * ledger row, each bad one neither, reported, the last report the last
 * bad member (recorded in the manifest's order); no temporary left. */
static void
test_threads_write_every_member(void **state)
{
    struct fx *f = *state;
    const unsigned threads[] = { 1, 2, 4, 0 };
    const size_t n = 500, bad_every = 50;

    for (size_t t = 0; t < sizeof(threads) / sizeof(threads[0]); t++) {
        char prefix[32], pkg[64], path[128], content[128], uri[300];
        const char *pkgs[1] = { pkg };
        long long lens[1];
        size_t removed = 1;

        snprintf(prefix, sizeof(prefix), "t%zu", t);
        snprintf(pkg, sizeof(pkg), "/p%zu.zip", t);
        lens[0] = (long long)serve_many(f, pkg, prefix, n, bad_every);
        for (size_t i = 0; i < f->srv->nroutes; i++)   /* the last one's */
            if (strcmp(f->srv->routes[i].path, "/rd.xml") == 0)
                f->srv->routes[i].path[0] = '\0';
        serve_dump(f, pkgs, lens, 1);
        dump_free(f->d);
        struct dump_opts o = fx_dump_opts(f, threads[t]);
        f->d = dump_new(&o);
        assert_non_null(f->d);
        f->problems = 0;
        fx_dump(f);
        assert_int_equal(f->rc, 0);
        assert_int_equal(f->r.written, n - n / bad_every);
        assert_int_equal(f->r.failed, n / bad_every);
        assert_int_equal(f->problems, n / bad_every);
        many_member(prefix, n - bad_every, path, sizeof(path), content,
                    sizeof(content));
        snprintf(uri, sizeof(uri), "%s/%s", f->srv->origin, path);
        assert_string_equal(f->prob_uri, uri);
        for (size_t k = 0; k < n; k++) {
            struct ledger_res r;
            char *buf = NULL, full[4400];
            struct stat sb;
            many_member(prefix, k, path, sizeof(path), content,
                        sizeof(content));
            snprintf(full, sizeof(full), "%s/%s", mirror_root(f->mirror),
                     path);
            if (k % bad_every == 0) {
                assert_int_equal(stat(full, &sb), -1);
                assert_false(has_row(f, path, &r, &buf));
                continue;
            }
            has_file(f, path, content);
            assert_true(has_row(f, path, &r, &buf));
            assert_int_equal(r.length, (int64_t)strlen(content));
            assert_true(r.change_dt == T(TA));
            rs_free(buf);
        }
        assert_int_equal(mirror_sweep_temps(f->mirror, &removed), 0);
        assert_int_equal(removed, 0);
        assert_int_equal(tmp_files(f), 0);
    }
}

/* dump/unpublished_members: the package is written in a stage and then
 * moved into the mirror; a member the mirror has a directory at the path
 * of, or a file where its directory should be, is not moved: reported
 * (why) and not recorded, the mirror's own entries left as they were,
 * the others written and recorded, no stage left behind. */
static void
test_unpublished_members(void **state)
{
    struct fx *f = *state;
    const struct member p1[] = { { "res/a", "alpha", NULL, NULL },
                                 { "res/b", "bravo!", NULL, NULL },
                                 { "res3/d", "delta", NULL, NULL },
                                 { "res2/c", "charlie", NULL, NULL } };
    const char *pkgs[] = { "/p1.zip" };
    long long lens[1];
    struct ledger_res r;
    char *buf = NULL, full[4400];
    struct mirror_file *mf = NULL;

    assert_int_equal(mirror_begin(f->mirror, "res/b/x", &mf), 0);
    assert_int_equal(mirror_commit(mf, RS_TIME_NONE), 0);
    assert_int_equal(mirror_begin(f->mirror, "res2", &mf), 0);
    assert_int_equal(mirror_write(mf, "mine", 4), 0);
    assert_int_equal(mirror_commit(mf, RS_TIME_NONE), 0);
    lens[0] = (long long)serve_package(f, "/p1.zip", p1, 4);
    serve_dump(f, pkgs, lens, 1);
    fx_dump(f);
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->r.written, 2);
    assert_int_equal(f->r.failed, 2);
    assert_int_equal(f->problems, 2);
    assert_non_null(strstr(f->prob_uri, "/res2/c"));
    assert_non_null(strstr(f->prob_why, "a file where a directory is "
                                        "needed"));
    has_file(f, "res/a", "alpha");
    has_file(f, "res3/d", "delta");
    has_file(f, "res2", "mine");
    snprintf(full, sizeof(full), "%s/res/b/x", mirror_root(f->mirror));
    assert_int_equal(access(full, F_OK), 0);
    assert_true(has_row(f, "res/a", &r, &buf));
    rs_free(buf);
    buf = NULL;
    assert_true(has_row(f, "res3/d", &r, &buf));
    rs_free(buf);
    buf = NULL;
    assert_false(has_row(f, "res/b", &r, &buf));
    assert_false(has_row(f, "res2/c", &r, &buf));
    size_t removed = 1;
    assert_int_equal(mirror_sweep_temps(f->mirror, &removed), 0);
    assert_int_equal(removed, 0);
}

/* Whether the mirror's root holds a stage (a package being written). */
static bool
stage_there(struct fx *f)
{
    DIR *dh = opendir(mirror_root(f->mirror));
    struct dirent *de;
    bool there = false;

    assert_non_null(dh);
    while ((de = readdir(dh)) != NULL)
        if (strncmp(de->d_name, MIRROR_STAGE_PREFIX,
                    sizeof(MIRROR_STAGE_PREFIX) - 1) == 0)
            there = true;
    closedir(dh);
    return there;
}

/* Entries under dir named as rssub's own (a stage, a temporary file). */
static size_t
ours_under(const char *dir)
{
    DIR *dh = opendir(dir);
    struct dirent *de;
    size_t n = 0;
    char sub[4400];

    assert_non_null(dh);
    while ((de = readdir(dh)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (strncmp(de->d_name, MIRROR_RESERVED,
                    sizeof(MIRROR_RESERVED) - 1) == 0)
            n++;
        else if (de->d_type == DT_DIR) {
            snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
            n += ours_under(sub);
        }
    }
    closedir(dh);
    return n;
}

/* How many of package prefix's n members (the first, bad, aside) the
 * mirror holds, file and row. */
static size_t
members_there(struct fx *f, const char *prefix, size_t n)
{
    char path[128], content[128], full[4400];
    size_t there = 0;

    for (size_t k = 1; k < n; k++) {
        struct ledger_res r;
        char *buf = NULL;
        many_member(prefix, k, path, sizeof(path), content, sizeof(content));
        snprintf(full, sizeof(full), "%s/%s", mirror_root(f->mirror), path);
        bool file = access(full, F_OK) == 0;
        bool row = has_row(f, path, &r, &buf);
        rs_free(buf);
        assert_true(file == row);     /* never a row without its file */
        there += file;
    }
    return there;
}

/* Packages of sizes[i] members each (the first of each bad), tagged
 * "<tag><i>" (prefix names[i]) and served at "/<tag><i>.zip", and the dump
 * document listing them. Returns the members that will be written. */
static size_t
serve_packages(struct fx *f, char tag, const size_t *sizes, size_t npk,
               char (*names)[8])
{
    char paths[8][16];
    const char *pkgs[8];
    long long lens[8];
    size_t good = 0;

    assert_true(npk <= 8);
    for (size_t i = 0; i < npk; i++) {
        snprintf(names[i], 8, "%c%u", tag, (unsigned)i % 8u);
        snprintf(paths[i], sizeof(paths[i]), "/%s.zip", names[i]);
        pkgs[i] = paths[i];
        lens[i] = (long long)serve_many(f, paths[i], names[i], sizes[i],
                                        sizes[i] + 1);
        good += sizes[i] - 1;
    }
    serve_dump(f, pkgs, lens, npk);
    return good;
}

/* Each package serve_packages served is in the mirror whole but for its
 * bad member, was fetched once, and nothing of the dump's is left (no
 * stage, no temporary file in the mirror, no package file). */
static void
packages_there(struct fx *f, const size_t *sizes, size_t npk,
               char (*names)[8])
{
    char path[16];

    for (size_t i = 0; i < npk; i++) {
        snprintf(path, sizeof(path), "/%s.zip", names[i]);
        assert_int_equal(members_there(f, names[i], sizes[i]), sizes[i] - 1);
        assert_int_equal(tu_httpd_hits(f->srv, path), 1);
    }
    assert_int_equal(ours_under(mirror_root(f->mirror)), 0);
    assert_int_equal(tmp_files(f), 0);
}

/* Dump the packages of sizes (serve_packages) and check each is whole,
 * written and recorded but for its bad member. */
static void
dump_whole(struct fx *f, char tag, const size_t *sizes, size_t npk)
{
    char names[8][8];
    size_t want = serve_packages(f, tag, sizes, npk, names);

    fx_dump(f);
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->r.packages, npk);
    assert_int_equal(f->r.written, want);
    assert_int_equal(f->r.failed, npk);
    packages_there(f, sizes, npk, names);
}

/* dump/pipelined_packages: packages written on threads while the loop
 * downloads and opens the next: each package's members all written and
 * recorded (its bad first member neither), each package fetched once,
 * no stage and no package file left. */
static void
test_pipelined_packages(void **state)
{
    const size_t sizes[] = { 300, 300, 300, 300 };

    dump_whole(*state, 'p', sizes, 4);
}

/* dump/opened_while_downloading: a package is opened on a thread while
 * the next downloads; a small package downloaded while a large one is
 * still being opened waits for the opener (two packages on disk at
 * most). Every package is written and recorded, each fetched once, and
 * nothing is left. */
static void
test_opened_while_downloading(void **state)
{
    const size_t sizes[] = { 1500, 3, 1500, 3, 4, 2 };

    dump_whole(*state, 'o', sizes, 6);
}

/* dump/bad_package_next_downloaded: a package that cannot be opened ends
 * the dump while the next one is downloading or already downloaded:
 * RS_EINVALID naming the bad one, nothing written, no file left. */
static void
test_bad_package_next_downloaded(void **state)
{
    struct fx *f = *state;
    const char *pkgs[] = { "/b0.zip", "/b1.zip" };
    long long lens[2];

    (void)serve_many(f, "/b0.zip", "b0", 3000, 3001);
    f->srv->routes[f->srv->nroutes - 1].body_len = 4000; /* not a ZIP */
    lens[0] = -1;
    lens[1] = (long long)serve_many(f, "/b1.zip", "b1", 10, 11);
    serve_dump(f, pkgs, lens, 2);
    fx_dump(f);
    assert_int_equal(f->rc, RS_EINVALID);
    assert_non_null(strstr(f->err, "/b0.zip"));
    assert_int_equal(f->r.written, 0);
    assert_int_equal(members_there(f, "b1", 10), 0);
    assert_false(stage_there(f));
    assert_int_equal(tmp_files(f), 0);
}

/* dump/no_threads: with no thread to be had, neither an opener nor a
 * writer, the loop's thread opens and writes every package itself: all
 * written and recorded, nothing left. */
static void
test_no_threads(void **state)
{
    const size_t sizes[] = { 300, 300, 300 };

    no_threads = true;
    dump_whole(*state, 'n', sizes, 3);
    no_threads = false;
    assert_true(threads_refused >= 3);      /* an opener each, at least */
}

/* dump/no_stage: when no stage can be made in the mirror, each member is
 * written in place (a temporary file renamed over its path) and recorded
 * as it is written: every package whole, nothing left behind. */
static void
test_no_stage(void **state)
{
    const size_t sizes[] = { 300, 40, 300 };

    no_stage = true;
    dump_whole(*state, 's', sizes, 3);
    no_stage = false;
    assert_true(stages_refused >= 3);       /* one per package, at least */
}

static void *
let_opens_go(void *arg)
{
    (void)arg;
    usleep(100 * 1000);
    hold_opens(false);
    return NULL;
}

/* dump/free_while_opening: dump_free while a package is being opened on
 * the opener thread (held there) and the next is downloading: it waits
 * for the open, then nothing is left (no package file, no stage), no
 * on_done, nothing written. */
static void
test_free_while_opening(void **state)
{
    struct fx *f = *state;
    const size_t sizes[] = { 300, 300 };
    char names[2][8];
    pthread_t th;

    (void)serve_packages(f, 'h', sizes, 2, names);
    hold_opens(true);
    assert_int_equal(dump_start(f->d, tu_httpd_url(f->srv, "/rd.xml")), 0);
    TU_LOOP_UNTIL(&f->l, opens_waiting_now() == 1, WATCHDOG_MS);
    assert_int_equal(__real_pthread_create(&th, NULL, let_opens_go, NULL), 0);
    dump_free(f->d);
    f->d = NULL;
    pthread_join(th, NULL);
    assert_int_equal(tmp_files(f), 0);
    assert_int_equal(ours_under(mirror_root(f->mirror)), 0);
    tu_loop_drain(&f->l, f->http, WATCHDOG_MS);
    assert_int_equal(f->done, 0);
    assert_int_equal(members_there(f, names[0], sizes[0]), 0);
}

/* dump/bad_package_while_writing: a later package that will not open ends
 * the dump while an earlier one is being written on the threads: that one
 * is still written and recorded whole, then the dump ends naming the bad
 * one, and nothing is left. */
static void
test_bad_package_while_writing(void **state)
{
    struct fx *f = *state;
    const char *pkgs[] = { "/q0.zip", "/q1.zip" };
    long long lens[2] = { 0, -1 };
    const size_t junk = 64 * 1024;    /* not a ZIP */
    struct tu_route *r;

    lens[0] = (long long)serve_many(f, "/q0.zip", "q0", 1500, 1501);
    r = tu_httpd_add(f->srv, "/q1.zip", 0, "Content-Type: application/zip",
                     NULL);
    free(r->body);
    r->body = malloc(junk);
    assert_non_null(r->body);
    memset(r->body, 'j', junk);
    r->body_len = junk;
    r->pace = 4096;                   /* in while q0 is being written */
    serve_dump(f, pkgs, lens, 2);
    fx_dump(f);
    assert_int_equal(f->rc, RS_EINVALID);
    assert_non_null(strstr(f->err, "/q1.zip"));
    assert_int_equal(f->r.packages, 1);
    assert_int_equal(f->r.written, 1499);
    assert_int_equal(members_there(f, "q0", 1500), 1499);
    assert_int_equal(ours_under(mirror_root(f->mirror)), 0);
    assert_int_equal(tmp_files(f), 0);
}

/* dump/free_while_writing: dump_free while a package is being written
 * (the loop running meanwhile) stops the threads, removes the stage and
 * the package files, calls no on_done; each package is then in the
 * mirror whole (files and rows) or not at all. */
static void
test_free_while_writing(void **state)
{
    struct fx *f = *state;
    const size_t n = 3000;
    const char *pkgs[] = { "/w0.zip", "/w1.zip" };
    long long lens[2];

    lens[0] = (long long)serve_many(f, "/w0.zip", "w0", n, n + 1);
    lens[1] = (long long)serve_many(f, "/w1.zip", "w1", n, n + 1);
    serve_dump(f, pkgs, lens, 2);
    assert_int_equal(dump_start(f->d, tu_httpd_url(f->srv, "/rd.xml")), 0);
    TU_LOOP_UNTIL(&f->l, stage_there(f), WATCHDOG_MS);
    dump_free(f->d);
    f->d = NULL;
    assert_false(stage_there(f));
    assert_int_equal(tmp_files(f), 0);
    tu_loop_drain(&f->l, f->http, WATCHDOG_MS);
    assert_int_equal(f->done, 0);
    size_t w0 = members_there(f, "w0", n), w1 = members_there(f, "w1", n);
    assert_true(w0 == 0 || w0 == n - 1);
    assert_int_equal(w1, 0);          /* the package after the one freed */
}

/* --------------------------------------------------------- Change Dumps */

#define T0 "2020-01-02T00:00:00Z"    /* the mirror's mark (since) */
#define T1 "2020-01-02T01:00:00Z"
#define T2 "2020-01-02T02:00:00Z"
#define T3 "2020-01-02T03:00:00Z"

/* One change of a Change Dump package: the resource's path at the Source,
 * the kind, its datetime, and its bitstream (NULL for a deletion). */
struct chg {
    const char *path;
    const char *change;
    const char *dt;
    const char *content;
};

/* A Change Dump package of changes covering [from, until), each change's
 * bitstream its own member (changes/K/PATH), served at path; its size. */
static size_t
serve_change_package(struct fx *f, const char *path, const char *from,
                     const char *until, const struct chg *c, size_t n)
{
    char *man = malloc(DOCSZ), hash[64];
    size_t o, len;

    assert_non_null(man);
    o = (size_t)snprintf(man, DOCSZ, "<?xml version=\"1.0\"?>\n<urlset " NS
                         "><rs:md capability=\"changedump-manifest\" from=\"%s"
                         "\" until=\"%s\"/>", from, until);
    for (size_t i = 0; i < n; i++) {
        o += (size_t)snprintf(man + o, DOCSZ - o, "<url><loc>%s/%s</loc>",
                              f->srv->origin, c[i].path);
        if (c[i].content == NULL) {
            o += (size_t)snprintf(man + o, DOCSZ - o, "<rs:md change=\"%s\" "
                                  "datetime=\"%s\"/></url>", c[i].change,
                                  c[i].dt);
            continue;
        }
        md5_of(c[i].content, hash, sizeof(hash));
        o += (size_t)snprintf(man + o, DOCSZ - o, "<lastmod>%s</lastmod>"
                              "<rs:md change=\"%s\" datetime=\"%s\" "
                              "length=\"%zu\" hash=\"%s\" path=\"/changes/"
                              "%zu/%s\"/></url>", c[i].dt, c[i].change,
                              c[i].dt, strlen(c[i].content), hash, i,
                              c[i].path);
    }
    o += (size_t)snprintf(man + o, DOCSZ - o, "</urlset>\n");
    assert_true(o < DOCSZ);

    char member[16][300];
    const char *names[16], *contents[16];
    size_t k = 0;
    assert_true(n <= 16);
    for (size_t i = 0; i < n; i++) {
        if (c[i].content == NULL)
            continue;
        snprintf(member[k], sizeof(member[k]), "changes/%zu/%s", i,
                 c[i].path);
        names[k] = member[k];
        contents[k++] = c[i].content;
    }
    len = serve_zip(f, path, man, names, contents, k);
    free(man);
    return len;
}

/* The Change Dump document at /cd.xml: packages with their intervals. */
static void
serve_change_dump(struct fx *f, const char *const *pkgs,
                  const char *const *from, const char *const *until,
                  size_t n)
{
    char doc[DOCSZ];
    size_t o;

    o = (size_t)snprintf(doc, sizeof(doc), "<?xml version=\"1.0\"?>\n<urlset "
                         NS "><rs:md capability=\"changedump\" from=\"" TA
                         "\"/>");
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(doc + o, sizeof(doc) - o, "<url><loc>{B}%s</loc>"
                              "<rs:md type=\"application/zip\" from=\"%s\" "
                              "until=\"%s\"/></url>", pkgs[i], from[i],
                              until[i]);
    snprintf(doc + o, sizeof(doc) - o, "</urlset>\n");
    (void)tu_httpd_add(f->srv, "/cd.xml", 0, "Content-Type: application/xml",
                       doc);
}

static void
fx_change_dump(struct fx *f, const char *since)
{
    unsigned before = f->done;

    assert_int_equal(dump_start_changes(f->d, tu_httpd_url(f->srv, "/cd.xml"),
                                        T(since)), 0);
    TU_LOOP_UNTIL(&f->l, f->done > before, WATCHDOG_MS);
    tu_loop_run_for(&f->l, 30);
    assert_int_equal(f->done, before + 1);
}

/* A ledger row for path as a change at dt left it (a file written). */
static void
put_row(struct fx *f, const char *path, const char *content, const char *dt)
{
    char uri[300], full[4400];
    struct ledger_res r = { 0 };
    FILE *fp;

    snprintf(full, sizeof(full), "%s/%s", mirror_root(f->mirror), path);
    fp = fopen(full, "w");
    assert_non_null(fp);
    fputs(content, fp);
    fclose(fp);
    snprintf(uri, sizeof(uri), "%s/%s", f->srv->origin, path);
    r.uri = uri;
    r.path = path;
    r.lastmod = T(dt);
    r.change_dt = T(dt);
    r.length = (int64_t)strlen(content);
    assert_int_equal(ledger_res_put(f->ledger, &r), 0);
}

/* changedump/last_change_wins: of a resource changed twice in a package
 * only the last bitstream is written (the first is superseded); a
 * deletion goes to apply as a todo row (no request); what is written is
 * recorded with its change's datetime, verified. */
static void
test_changedump_last_change_wins(void **state)
{
    struct fx *f = *state;
    const struct chg c[] = {
        { "a", "created", T1, "a-one" },
        { "b", "created", T1, "bee" },
        { "a", "updated", T2, "a-two" },
        { "gone", "deleted", T2, NULL },
    };
    const char *pkgs[] = { "/c1.zip" }, *from[] = { T0 }, *until[] = { T3 };
    struct ledger_res r;
    struct ledger_todo t;
    char *buf = NULL, uri[300], hash[64];

    put_row(f, "gone", "old", T0);
    (void)serve_change_package(f, "/c1.zip", T0, T3, c, 4);
    serve_change_dump(f, pkgs, from, until, 1);
    fx_change_dump(f, T0);
    assert_int_equal(f->rc, 0);
    assert_string_equal(f->err, "");
    assert_int_equal(f->r.packages, 1);
    assert_int_equal(f->r.written, 2);
    assert_int_equal(f->r.deleted, 1);
    assert_int_equal(f->r.superseded, 1);
    assert_int_equal(f->r.failed, 0);
    assert_true(f->r.until == T(T3));
    has_file(f, "a", "a-two");
    has_file(f, "b", "bee");
    assert_true(has_row(f, "a", &r, &buf));
    assert_true(r.change_dt == T(T2));
    md5_of("a-two", hash, sizeof(hash));
    assert_string_equal(r.hash, hash);
    rs_free(buf);
    buf = NULL;
    snprintf(uri, sizeof(uri), "%s/gone", f->srv->origin);
    assert_int_equal(ledger_todo_get(f->ledger, uri, &t, &buf), 0);
    assert_int_equal(t.change, LEDGER_DELETE);
    assert_true(t.change_dt == T(T2));
    rs_free(buf);
    assert_int_equal(tmp_files(f), 0);
}

/* changedump/from_the_mark: a package that ends at or before the mark is
 * not downloaded; in one that straddles it, a change at or before the
 * mark, or older than the mirror's copy, is left alone. */
static void
test_changedump_from_the_mark(void **state)
{
    struct fx *f = *state;
    const struct chg old[] = { { "x", "created", T0, "x-old" } };
    const struct chg c[] = {
        { "early", "updated", T0, "early-old" },   /* at the mark */
        { "kept", "updated", T1, "kept-older" },   /* the mirror has T2 */
        { "new", "created", T2, "new!" },
    };
    const char *pkgs[] = { "/c0.zip", "/c1.zip" };
    const char *from[] = { TA, T0 }, *until[] = { T0, T3 };

    put_row(f, "early", "early-mine", T0);
    put_row(f, "kept", "kept-newer", T2);
    (void)serve_change_package(f, "/c0.zip", TA, T0, old, 1);
    (void)serve_change_package(f, "/c1.zip", T0, T3, c, 3);
    serve_change_dump(f, pkgs, from, until, 2);
    fx_change_dump(f, T0);
    assert_int_equal(f->rc, 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/c0.zip"), 0);
    assert_int_equal(tu_httpd_hits(f->srv, "/c1.zip"), 1);
    assert_int_equal(f->r.older, 1);
    assert_int_equal(f->r.packages, 1);
    assert_int_equal(f->r.written, 1);
    assert_int_equal(f->r.skipped, 2);
    has_file(f, "early", "early-mine");
    has_file(f, "kept", "kept-newer");
    has_file(f, "new", "new!");
}

/* changedump/outside_interval: a package whose manifest holds a change
 * dated after its own until (a deletion no Change List has), or before
 * its from, or whose until is beyond our clock, is refused as a whole
 * (RS_EINVALID, saying why), as a malformed package is: nothing of it is
 * applied, and the Change Lists decide. */
static void
test_changedump_outside_interval(void **state)
{
    struct fx *f = *state;
    const struct chg after[] = {
        { "a", "created", T1, "a-one" },
        { "gone", "deleted", "2020-01-02T04:00:00Z", NULL },
    };
    const struct chg before[] = {
        { "b", "created", "2020-01-01T23:00:00Z", "bee" },
    };
    const struct chg fine[] = { { "c", "created", T1, "sea" } };
    const char *future = "2999-01-01T00:00:00Z";
    const char *pk1[] = { "/c1.zip" }, *pk2[] = { "/c2.zip" };
    const char *pk3[] = { "/c3.zip" };
    const char *from[] = { T0 }, *until[] = { T3 }, *ufut[] = { future };
    struct ledger_todo t;
    char *buf = NULL, uri[300];

    put_row(f, "gone", "old", T0);
    (void)serve_change_package(f, "/c1.zip", T0, T3, after, 2);
    serve_change_dump(f, pk1, from, until, 1);
    fx_change_dump(f, T0);
    assert_int_equal(f->rc, RS_EINVALID);
    assert_non_null(strstr(f->err, "after its manifest's until"));
    assert_non_null(strstr(f->err, "/gone"));
    assert_int_equal(f->r.deleted, 0);
    assert_int_equal(f->r.written, 0);
    snprintf(uri, sizeof(uri), "%s/gone", f->srv->origin);
    assert_int_equal(ledger_todo_get(f->ledger, uri, &t, &buf),
                     RS_ENOTFOUND);
    rs_free(buf);
    has_file(f, "gone", "old");

    unroute(f, "/cd.xml");
    (void)serve_change_package(f, "/c2.zip", "2020-01-02T00:30:00Z", T3,
                               before, 1);
    serve_change_dump(f, pk2, from, until, 1);
    fx_change_dump(f, T0);
    assert_int_equal(f->rc, RS_EINVALID);
    assert_non_null(strstr(f->err, "before its manifest's from"));
    assert_int_equal(f->r.written, 0);

    unroute(f, "/cd.xml");
    (void)serve_change_package(f, "/c3.zip", T0, future, fine, 1);
    serve_change_dump(f, pk3, from, ufut, 1);
    fx_change_dump(f, T0);
    assert_int_equal(f->rc, RS_EINVALID);
    assert_non_null(strstr(f->err, "in the future"));
    assert_int_equal(f->r.written, 0);
    assert_int_equal(tmp_files(f), 0);
}

/* changedump/wrong_kind: a Resource Dump document, or a Resource Dump
 * package listed in a Change Dump, ends the catch-up with an error that
 * says so; nothing is written. */
static void
test_changedump_wrong_kind(void **state)
{
    struct fx *f = *state;
    const struct member p1[] = { { "res/a", "alpha", NULL, NULL } };
    const char *pkgs[] = { "/p1.zip" }, *from[] = { T0 }, *until[] = { T3 };
    long long lens[1];

    lens[0] = (long long)serve_package(f, "/p1.zip", p1, 1);
    serve_dump(f, pkgs, lens, 1);
    assert_int_equal(dump_start_changes(f->d, tu_httpd_url(f->srv, "/rd.xml"),
                                        T(T0)), 0);
    TU_LOOP_UNTIL(&f->l, f->done == 1, WATCHDOG_MS);
    assert_int_not_equal(f->rc, 0);
    assert_non_null(strstr(f->err, "Change Dump was expected"));
    serve_change_dump(f, pkgs, from, until, 1);
    fx_change_dump(f, T0);
    assert_int_equal(f->rc, RS_EINVALID);
    assert_non_null(strstr(f->err, "not a Change Dump package"));
    assert_int_equal(f->r.written, 0);
    assert_int_equal(tmp_files(f), 0);
}

int
main(void)
{
    /* as rssub does (rs_tz_pin): with TZ unset glibc re-reads the zone
     * at every mktime() libzip makes, from every writer thread at once */
    setenv("TZ", "UTC", 1);
    tzset();
#define T_(name, fn) { "dump/" name, fn, fx_setup, fx_teardown, NULL }
    const struct CMUnitTest tests[] = {
        T_("packages_written", test_packages_written),
        T_("bad_member_left_to_reconcile", test_bad_member_left_to_reconcile),
        T_("refused_and_newer", test_refused_and_newer),
        T_("package_404", test_package_404),
        T_("package_stalled", test_package_stalled),
        T_("future_at", test_future_at),
        T_("generation_rotated", test_generation_rotated),
        T_("bad_packages", test_bad_packages),
        T_("bad_package_while_writing", test_bad_package_while_writing),
        T_("free_in_flight", test_free_in_flight),
        T_("free_mid_body", test_free_mid_body),
        T_("alloc_failures", test_alloc_failures),
        T_("threads_write_every_member", test_threads_write_every_member),
        T_("leftovers_swept", test_leftovers_swept),
        T_("unpublished_members", test_unpublished_members),
        T_("pipelined_packages", test_pipelined_packages),
        T_("opened_while_downloading", test_opened_while_downloading),
        T_("bad_package_next_downloaded", test_bad_package_next_downloaded),
        T_("no_threads", test_no_threads),
        T_("no_stage", test_no_stage),
        T_("free_while_opening", test_free_while_opening),
        T_("free_while_writing", test_free_while_writing),
        T_("changedump/last_change_wins", test_changedump_last_change_wins),
        T_("changedump/from_the_mark", test_changedump_from_the_mark),
        T_("changedump/wrong_kind", test_changedump_wrong_kind),
        T_("changedump/outside_interval", test_changedump_outside_interval),
    };
#undef T_
    int rc;

    signal(SIGPIPE, SIG_IGN);
    unsetenv("http_proxy");
    unsetenv("HTTP_PROXY");
    unsetenv("all_proxy");
    unsetenv("ALL_PROXY");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rc = cmocka_run_group_tests_name("sub_dump", tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
