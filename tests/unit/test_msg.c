/* test_msg.c - hub ids and the shared pre-encoded frames (hub/msg.c), also
 * as the service threads share them. */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "msg.h"

/* msg/id_parse_format: MS-SEQ and MS forms parse, round-trip through
 * format, compare numerically; junk is refused. */
static void
test_id_parse_format(void **state)
{
    (void)state;
    struct msg_id a, b;
    char buf[MSG_ID_BUFSZ];
    assert_int_equal(msg_id_parse("1700000000000-7", 15, &a), 0);
    assert_true(a.ms == 1700000000000ull && a.seq == 7);
    msg_id_format(a, buf);
    assert_string_equal(buf, "1700000000000-7");
    assert_int_equal(msg_id_parse("9", 1, &b), 0);
    assert_true(b.ms == 9 && b.seq == 0);
    assert_true(msg_id_cmp(b, a) < 0 && msg_id_cmp(a, b) > 0 && msg_id_cmp(a, a) == 0);
    struct msg_id c = { 1700000000000ull, 10 };
    assert_true(msg_id_cmp(a, c) < 0);   /* 7 < 10 numerically, not as text */
    const char *bad[] = { "", "-", "1-", "-1", "1-2-3", "a", "1 2", "12345678901234567890" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(msg_id_parse(bad[i], strlen(bad[i]), &a), RS_EINVAL);
    assert_true(msg_id_is_zero((struct msg_id){ 0, 0 }));
}

static const char *
payload(const struct msg *m, size_t *len)
{
    const unsigned char *h = m->frame;
    size_t hl = (h[1] & 0x7f) < 126 ? 2 : (h[1] & 0x7f) == 126 ? 4 : 10;
    *len = m->frame_len - hl;
    return (const char *)h + hl;
}

/* msg/annotation: the hub attributes go right after the root element's
 * name, past a BOM, the XML declaration and comments; nothing else moves. */
static void
test_annotation(void **state)
{
    (void)state;
    static const char doc[] = "\xEF\xBB\xBF<?xml version=\"1.0\"?>\n<!-- c -->\n"
                              "<urlset xmlns=\"x\"><url/></urlset>";
    int rc;
    struct msg *m = msg_new((struct msg_id){ 5, 1 }, 3, doc, sizeof(doc) - 1, &rc);
    assert_non_null(m);
    size_t len;
    const char *p = payload(m, &len);
    static const char want[] = "\xEF\xBB\xBF<?xml version=\"1.0\"?>\n<!-- c -->\n"
                               "<urlset xmlns:hub=\"urn:x-rshub:1\" hub:id=\"5-1\""
                               " xmlns=\"x\"><url/></urlset>";
    assert_int_equal(len, sizeof(want) - 1);
    assert_memory_equal(p, want, len);
    assert_int_equal(m->chan, 3);
    assert_true(m->frame[0] == 0x81);   /* FIN, text */
    msg_unref(msg_ref(m));
    msg_unref(m);
    msg_unref(NULL);
}

/* msg/frame_lengths: 7-bit, 16-bit and 64-bit payload lengths are encoded
 * as RFC 6455 says, and a body without a root element is framed as is. */
static void
test_frame_lengths(void **state)
{
    (void)state;
    size_t sizes[] = { 10, 125 - 46, 300, 70000 };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i];
        char *body = malloc(n);
        memset(body, 'x', n);
        memcpy(body, "<r>", 3);
        int rc;
        struct msg *m = msg_new((struct msg_id){ 1, 0 }, 0, body, n, &rc);
        size_t len;
        (void)payload(m, &len);
        size_t want = n + strlen(" xmlns:hub=\"urn:x-rshub:1\" hub:id=\"1-0\"");
        assert_int_equal(len, want);
        unsigned char b1 = m->frame[1];
        if (want < 126)
            assert_int_equal(b1, want);
        else if (want <= 0xffff)
            assert_true(b1 == 126 && ((size_t)m->frame[2] << 8 | m->frame[3]) == want);
        else
            assert_true(b1 == 127 && ((size_t)m->frame[7] << 16 |
                                      (size_t)m->frame[8] << 8 | m->frame[9]) == want);
        msg_unref(m);
        free(body);
    }
    int rc;
    struct msg *m = msg_new((struct msg_id){ 1, 0 }, 0, "plain text", 10, &rc);
    size_t len;
    const char *p = payload(m, &len);
    assert_int_equal(len, 10);
    assert_memory_equal(p, "plain text", 10);
    msg_unref(m);
}

/* msg/prefix_free: a root that already binds or uses the "hub" prefix
 * gets the annotation under another prefix, so the result stays
 * namespace-well-formed (a duplicate attribute made it unparseable). */
static void
test_prefix_free(void **state)
{
    (void)state;
    static const char doc[] = "<urlset xmlns:hub=\"http://other/ns\" hub:x=\"1\"><u/></urlset>";
    int rc;
    struct msg *m = msg_new((struct msg_id){ 2, 0 }, 0, doc, sizeof(doc) - 1, &rc);
    size_t len;
    const char *p = payload(m, &len);
    static const char want[] = "<urlset xmlns:rshub=\"urn:x-rshub:1\" rshub:id=\"2-0\""
                               " xmlns:hub=\"http://other/ns\" hub:x=\"1\"><u/></urlset>";
    assert_int_equal(len, sizeof(want) - 1);
    assert_memory_equal(p, want, len);
    msg_unref(m);
    /* "hub" inside a value or a longer prefix does not count as used */
    static const char doc2[] = "<r a=\"hub:x\" xmlns:myhub=\"u\">x</r>";
    m = msg_new((struct msg_id){ 3, 0 }, 0, doc2, sizeof(doc2) - 1, &rc);
    p = payload(m, &len);
    assert_memory_equal(p, "<r xmlns:hub=", 13);
    msg_unref(m);
}

struct holder {
    struct msg *m;
    atomic_size_t *sum;
};

/* Each thread holds its own reference and reads the frame; it lets go when
 * done, in whatever order the threads end. */
static void *
hold_and_read(void *arg)
{
    struct holder *h = arg;
    size_t sum = 0;
    for (int k = 0; k < 1000; k++) {
        struct msg *extra = msg_ref(h->m);
        for (size_t i = 0; i < extra->frame_len; i++)
            sum += extra->frame[i];
        msg_unref(extra);
    }
    atomic_fetch_add(h->sum, sum);
    msg_unref(h->m);
    return NULL;
}

/* msg/shared: one frame held by several threads at once is read intact by
 * each and freed once, by whichever lets go last (ASan: no leak, no use
 * after free); unref(NULL) is a no-op; an allocation failure is
 * RS_ENOMEM. */
static void
test_shared(void **state)
{
    (void)state;
    static const char doc[] = "<urlset><url/></urlset>";
    int rc;
    struct msg *m = msg_new((struct msg_id){ 7, 1 }, 2, doc, sizeof(doc) - 1, &rc);
    assert_non_null(m);
    size_t one = 0;
    for (size_t i = 0; i < m->frame_len; i++)
        one += m->frame[i];
    atomic_size_t sum;
    atomic_init(&sum, 0);
    enum { N = 4 };
    pthread_t tid[N];
    struct holder h[N];
    for (int i = 0; i < N; i++) {
        h[i] = (struct holder){ msg_ref(m), &sum };
        assert_int_equal(pthread_create(&tid[i], NULL, hold_and_read, &h[i]), 0);
    }
    msg_unref(m);   /* the threads now hold the only references */
    for (int i = 0; i < N; i++)
        pthread_join(tid[i], NULL);
    assert_int_equal(atomic_load(&sum), (size_t)N * 1000 * one);
    msg_unref(NULL);

    tu_alloc_fail_at(1);
    m = msg_new((struct msg_id){ 1, 0 }, 0, doc, sizeof(doc) - 1, &rc);
    tu_alloc_fail_at(0);
    assert_null(m);
    assert_int_equal(rc, RS_ENOMEM);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_id_parse_format),
        cmocka_unit_test(test_annotation),
        cmocka_unit_test(test_frame_lengths),
        cmocka_unit_test(test_prefix_free),
        cmocka_unit_test(test_shared),
    };
    return cmocka_run_group_tests_name("msg", tests, NULL, NULL);
}
