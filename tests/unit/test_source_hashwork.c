/* test_source_hashwork.c - the hashing thread (source/hashwork.c) on a real
 * loop and real files: its digests are the file's, a missing file says
 * so, a path queued twice before its turn is read once, freeing it while
 * it reads a large file does not wait for the whole file, and the shared
 * read loop tells a file that changed while read and honours a stop. */
#include "testutil.h"

#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hashwork.h"
#include "rs_hash.h"
#include "rs_time.h"
#include "tree.h"

struct fx {
    char *dir;
    struct event_base *base;
    struct tree *tree;
    struct hashwork *h;
    struct event *watchdog;
    int n;                       /* results */
    char rel[4][64];
    int rc[4];
    struct stat st[4];
    uint8_t md5[4][16], sha[4][32];
    int want;                    /* stop the loop after this many */
};

static void
on_hashed(void *ud, const struct hashwork_result *r)
{
    struct fx *f = ud;
    if (f->n < 4) {
        snprintf(f->rel[f->n], sizeof(f->rel[0]), "%s", r->rel);
        f->rc[f->n] = r->rc;
        f->st[f->n] = r->st;
        memcpy(f->md5[f->n], r->md5, 16);
        memcpy(f->sha[f->n], r->sha256, 32);
    }
    f->n++;
    if (f->n >= f->want)
        event_base_loopbreak(f->base);
}

static void
on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

/* Run the loop until want results, or 10 s. */
static void
fx_run(struct fx *f, int want)
{
    f->want = want;
    struct timeval tv = { 10, 0 };
    event_add(f->watchdog, &tv);
    event_base_dispatch(f->base);
    event_del(f->watchdog);
}

static void
fx_file(struct fx *f, const char *rel, size_t n, int c)
{
    char p[4200];
    snprintf(p, sizeof(p), "%s/%s", f->dir, rel);
    tu_write_pattern(p, n, c);
}

static int
fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    f->dir = tu_mkdtemp();
    f->base = event_base_new();
    char err[256];
    struct tree_opts to = { .dir = f->dir };
    assert_int_equal(tree_open(&to, &f->tree, err, sizeof(err)), 0);
    struct hashwork_opts o = { .base = f->base, .tree = f->tree,
                               .on_hashed = on_hashed, .ud = f };
    const char *e;
    f->h = hashwork_new(&o, &e);
    assert_non_null(f->h);
    f->watchdog = evtimer_new(f->base, on_watchdog, f->base);
    *state = f;
    return 0;
}

static int
fx_teardown(void **state)
{
    struct fx *f = *state;
    hashwork_free(f->h);
    event_free(f->watchdog);
    tree_free(f->tree);
    event_base_free(f->base);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* hashwork/digests: a 3 MiB file's MD5 and SHA-256, as a hasher fed its
 * bytes directly computes them, with its identity; a missing file. */
static void
test_digests(void **state)
{
    struct fx *f = *state;
    size_t n = 3 * 1024 * 1024 + 17;
    fx_file(f, "sub.bin", n, 'a');
    assert_int_equal(hashwork_submit(f->h, "sub.bin"), 0);
    fx_run(f, 1);
    assert_int_equal(f->n, 1);
    assert_string_equal(f->rel[0], "sub.bin");
    assert_int_equal(f->rc[0], 0);
    assert_int_equal(f->st[0].st_size, (off_t)n);

    char *b = malloc(n);
    for (size_t i = 0; i < n; i++)
        b[i] = (char)tu_pattern_byte('a', i);
    struct rs_hasher *hs =
        rs_hasher_new((1u << RS_HASH_MD5) | (1u << RS_HASH_SHA256));
    assert_int_equal(rs_hasher_update(hs, b, n), 0);
    struct rs_hashes out;
    assert_int_equal(rs_hasher_final(hs, &out), 0);
    rs_hasher_free(hs);
    free(b);
    assert_memory_equal(f->md5[0], rs_hashes_find(&out, RS_HASH_MD5)->bytes,
                        16);
    assert_memory_equal(f->sha[0],
                        rs_hashes_find(&out, RS_HASH_SHA256)->bytes, 32);

    assert_int_equal(hashwork_submit(f->h, "nope.bin"), 0);
    fx_run(f, 2);
    assert_int_equal(f->n, 2);
    assert_int_equal(f->rc[1], RS_ENOTFOUND);
    assert_int_equal(hashwork_pending(f->h), 0);
}

/* hashwork/queued_once: a path submitted again while queued is read
 * once; the first may already be under way, so one or two reads. */
static void
test_queued_once(void **state)
{
    struct fx *f = *state;
    fx_file(f, "a.bin", 2 * 1024 * 1024, 'x');
    for (int i = 0; i < 5; i++)
        assert_int_equal(hashwork_submit(f->h, "a.bin"), 0);
    assert_true(hashwork_pending(f->h) <= 2);
    fx_run(f, 2);
    /* a second result, if any, comes soon after the first */
    struct timeval tv = { 0, 300000 };
    event_base_loopexit(f->base, &tv);
    event_base_dispatch(f->base);
    assert_true(f->n >= 1 && f->n <= 2);
    assert_int_equal(f->rc[0], 0);
}

/* hashwork/free_while_reading: freed in the middle of a 1 GiB (sparse)
 * file, it returns after the chunk being read, not after the file. */
static void
test_free_while_reading(void **state)
{
    struct fx *f = *state;
    char p[4200];
    snprintf(p, sizeof(p), "%s/huge.bin", f->dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)1 << 30), 0);
    close(fd);
    assert_int_equal(hashwork_submit(f->h, "huge.bin"), 0);
    struct timespec ts = { 0, 50 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    assert_int_equal(hashwork_pending(f->h), 1);
    int64_t t0 = rs_time_mono_us();
    hashwork_free(f->h);
    f->h = NULL;
    int64_t took = rs_time_mono_us() - t0;
    assert_true(took < 500 * 1000);
    assert_int_equal(f->n, 0);
}

/* hashwork/digest_fd: the read loop shared with the catalog says
 * RS_EAGAIN for a file that grew after its fstat, RS_ECANCELED when
 * stopped, and hands every byte to the sink. */
static size_t sunk;
static void
sink(void *ud, const void *p, size_t n)
{
    (void)ud;
    (void)p;
    sunk += n;
}

static void
test_digest_fd(void **state)
{
    struct fx *f = *state;
    fx_file(f, "g.bin", 4096, 'g');
    char p[4200];
    snprintf(p, sizeof(p), "%s/g.bin", f->dir);
    struct rs_hasher *hs =
        rs_hasher_new((1u << RS_HASH_MD5) | (1u << RS_HASH_SHA256));
    uint8_t buf[1000], md5[16], sha[32];
    uint64_t total;
    struct stat st;

    int fd = open(p, O_RDONLY);
    assert_int_equal(fstat(fd, &st), 0);
    sunk = 0;
    assert_int_equal(hashwork_digest_fd(fd, &st, hs, buf, sizeof(buf), sink,
                                        NULL, NULL, md5, sha, &total), 0);
    assert_int_equal(total, 4096);
    assert_int_equal(sunk, 4096);

    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    int wfd = open(p, O_WRONLY | O_APPEND);
    assert_int_equal(write(wfd, "more", 4), 4);
    close(wfd);
    assert_int_equal(hashwork_digest_fd(fd, &st, hs, buf, sizeof(buf), NULL,
                                        NULL, NULL, md5, sha, &total),
                     RS_EAGAIN);

    atomic_bool stop;
    atomic_init(&stop, true);
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    assert_int_equal(hashwork_digest_fd(fd, &st, hs, buf, sizeof(buf), NULL,
                                        NULL, &stop, md5, sha, &total),
                     RS_ECANCELED);
    close(fd);
    rs_hasher_free(hs);
}

#define TC(name, fn) { name, fn, fx_setup, fx_teardown, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TC("hashwork/digests", test_digests),
        TC("hashwork/queued_once", test_queued_once),
        TC("hashwork/free_while_reading", test_free_while_reading),
        TC("hashwork/digest_fd", test_digest_fd),
    };
    return cmocka_run_group_tests_name("source_hashwork", tests, NULL, NULL);
}
