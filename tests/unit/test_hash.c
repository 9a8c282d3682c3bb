/* test_hash.c - the hash attribute's parse/format, list comparison and the
 * streaming hasher (proto/hash.c). */
#include "testutil.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "rs_alloc.h"
#include "rs_hash.h"

#define MD5_ABC "900150983cd24fb0d6963f7d28e17f72"
#define SHA1_ABC "a9993e364706816aba3e25717850c26c9cd0d89d"
#define SHA256_ABC \
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define SHA512_ABC \
    "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a" \
    "2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f"
#define MD5_EMPTY "d41d8cd98f00b204e9800998ecf8427e"
#define SHA1_EMPTY "da39a3ee5e6b4b0d3255bfef95601890afd80709"
#define SHA256_EMPTY \
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define SHA512_EMPTY \
    "cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce" \
    "47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e"
#define SHA256_MILLION_A \
    "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"

#define ALL_ALGOS ((1u << RS_HASH_MD5) | (1u << RS_HASH_SHA1) \
                   | (1u << RS_HASH_SHA256) | (1u << RS_HASH_SHA512))

static struct rs_hashes
th_parse(const char *s)
{
    struct rs_hashes h;
    int rc = rs_hashes_parse(s, strlen(s), &h);
    if (rc != 0)
        fail_msg("\"%s\" refused (%d)", s, rc);
    return h;
}

static void
th_refused(const char *s)
{
    struct rs_hashes h;
    h.n = 3;
    int rc = rs_hashes_parse(s, strlen(s), &h);
    if (rc != RS_EINVAL || h.n != 3)
        fail_msg("\"%s\" accepted or out changed (%d)", s, rc);
}

/* The attribute text of h. */
static const char *
th_format(const struct rs_hashes *h)
{
    static char buf[RS_HASHES_BUFSZ];
    size_t n = rs_hashes_format(h, buf);
    assert_int_equal(n, strlen(buf));
    return buf;
}

/* hash/parse_known: each known algorithm is recognised with its exact
 * digest length, and formats back to the same text. */
static void
test_parse_known(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        enum rs_hash_algo algo;
        unsigned len;
    } cases[] = {
        { "md5:" MD5_ABC, RS_HASH_MD5, 16 },
        { "sha-1:" SHA1_ABC, RS_HASH_SHA1, 20 },
        { "sha-256:" SHA256_ABC, RS_HASH_SHA256, 32 },
        { "sha-512:" SHA512_ABC, RS_HASH_SHA512, 64 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct rs_hashes h = th_parse(cases[i].s);
        assert_int_equal(h.n, 1);
        assert_int_equal(h.d[0].algo, cases[i].algo);
        assert_int_equal(h.d[0].len, cases[i].len);
        assert_string_equal(th_format(&h), cases[i].s);
    }
    struct rs_hashes h = th_parse("md5:" MD5_ABC);
    assert_int_equal(h.d[0].bytes[0], 0x90);
    assert_int_equal(h.d[0].bytes[15], 0x72);
    assert_string_equal(h.d[0].name, "md5");
}

/* hash/parse_list: several items separated by any XML whitespace, with
 * leading and trailing whitespace, keep their order. */
static void
test_parse_list(void **state)
{
    (void)state;
    struct rs_hashes h = th_parse(" \tmd5:" MD5_ABC "\n\r sha-256:" SHA256_ABC
                                  "  sha-1:" SHA1_ABC "\t");
    assert_int_equal(h.n, 3);
    assert_int_equal(h.d[0].algo, RS_HASH_MD5);
    assert_int_equal(h.d[1].algo, RS_HASH_SHA256);
    assert_int_equal(h.d[2].algo, RS_HASH_SHA1);
    assert_string_equal(th_format(&h), "md5:" MD5_ABC " sha-256:" SHA256_ABC
                                       " sha-1:" SHA1_ABC);
}

/* hash/parse_case: algorithm tokens are case-insensitive and stored in
 * lower case; hex digits may be either case and format in lower case. */
static void
test_parse_case(void **state)
{
    (void)state;
    struct rs_hashes h = th_parse("MD5:900150983CD24FB0D6963F7D28E17F72 "
                                  "Sha-256:" SHA256_ABC " X-Blake:AbCd");
    assert_int_equal(h.n, 3);
    assert_int_equal(h.d[0].algo, RS_HASH_MD5);
    assert_string_equal(h.d[0].name, "md5");
    assert_int_equal(h.d[1].algo, RS_HASH_SHA256);
    assert_string_equal(h.d[1].name, "sha-256");
    assert_int_equal(h.d[2].algo, RS_HASH_OTHER);
    assert_string_equal(h.d[2].name, "x-blake");
    assert_string_equal(th_format(&h), "md5:" MD5_ABC " sha-256:" SHA256_ABC
                                       " x-blake:abcd");
}

/* hash/parse_unknown: unknown names of letters, digits and '-' up to 15
 * characters are kept by name with any even-length digest up to 64 bytes;
 * near-miss spellings of known names are unknown, not aliases. */
static void
test_parse_unknown(void **state)
{
    (void)state;
    struct rs_hashes h = th_parse("sha-224:0123456789abcdef0123456789abcdef"
                                  "0123456789abcdef01234567");
    assert_int_equal(h.d[0].algo, RS_HASH_OTHER);
    assert_int_equal(h.d[0].len, 28);
    h = th_parse("sha256:" SHA256_ABC);
    assert_int_equal(h.d[0].algo, RS_HASH_OTHER);
    assert_string_equal(h.d[0].name, "sha256");
    h = th_parse("abcdefghijklmn5:00");
    assert_string_equal(h.d[0].name, "abcdefghijklmn5");
    assert_int_equal(h.d[0].len, 1);
    h = th_parse("x:" SHA512_ABC);
    assert_int_equal(h.d[0].len, 64);
    th_refused("abcdefghijklmn56:00");       /* 16 characters */
    th_refused("sha_256:00");
    th_refused("sha.256:00");
    th_refused("x:" SHA512_ABC "00");        /* 65 bytes */
}

/* hash/parse_bad_items: wrong digest lengths, odd or non-hex digits,
 * missing parts and separators are refused, output untouched. */
static void
test_parse_bad_items(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "md5:900150983cd24fb0d6963f7d28e17f",          /* 15 bytes */
        "md5:900150983cd24fb0d6963f7d28e17f7200",      /* 17 bytes */
        "md5:" SHA1_ABC,
        "sha-1:" MD5_ABC,
        "sha-256:" SHA512_ABC,
        "sha-512:" SHA256_ABC,
        "md5:900150983cd24fb0d6963f7d28e17f7",         /* odd */
        "x:abc",
        "x:a",
        "md5:900150983cd24fb0d6963f7d28e17g72",        /* not hex */
        "md5:0x0150983cd24fb0d6963f7d28e17f72",
        "md5:",
        "md5",
        ":00",
        "md5::" MD5_ABC,
        "md5:" MD5_ABC ",sha-1:" SHA1_ABC,
        "md5 :" MD5_ABC,
        "md5: " MD5_ABC,
        "md5:" MD5_ABC " :",
        "m\xc3\xa9:00",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        th_refused(bad[i]);
    struct rs_hashes h;
    assert_int_equal(rs_hashes_parse(NULL, 0, &h), RS_EINVAL);
    assert_int_equal(rs_hashes_parse("x:00", 4, NULL), RS_EINVAL);
    /* only len bytes count */
    assert_int_equal(rs_hashes_parse("x:0011", 4, &h), 0);
    assert_int_equal(h.d[0].len, 1);
    assert_int_equal(rs_hashes_parse("x:00\0", 5, &h), RS_EINVAL);
}

/* hash/parse_list_limits: empty and blank attributes, more than
 * RS_HASH_MAX items and any algorithm given twice are refused. */
static void
test_parse_list_limits(void **state)
{
    (void)state;
    th_refused("");
    th_refused(" \t\r\n ");
    struct rs_hashes h = th_parse("md5:" MD5_ABC " sha-1:" SHA1_ABC
                                  " sha-256:" SHA256_ABC " x:00");
    assert_int_equal(h.n, RS_HASH_MAX);
    th_refused("md5:" MD5_ABC " sha-1:" SHA1_ABC " sha-256:" SHA256_ABC
               " x:00 y:00");
    th_refused("a:00 b:00 c:00 d:00 e:00");
    th_refused("md5:" MD5_ABC " md5:" MD5_EMPTY);
    th_refused("md5:" MD5_ABC " MD5:" MD5_ABC);
    th_refused("x:00 X:11");
    h = th_parse("x:00 y:11");
    assert_int_equal(h.n, 2);
}

/* hash/format: lower-case hex, single spaces, an empty string for an empty
 * list, canonical names for hand-built digests, and the longest possible
 * list fits RS_HASHES_BUFSZ. */
static void
test_format(void **state)
{
    (void)state;
    struct rs_hashes h;
    memset(&h, 0, sizeof(h));
    char buf[RS_HASHES_BUFSZ];
    assert_int_equal(rs_hashes_format(&h, buf), 0);
    assert_string_equal(buf, "");
    assert_int_equal(rs_hashes_format(NULL, buf), 0);

    h.n = 1;
    h.d[0].algo = RS_HASH_SHA1;
    h.d[0].len = 20;
    memset(h.d[0].bytes, 0xab, 20);
    assert_string_equal(th_format(&h),
                        "sha-1:abababababababababababababababababababab");

    memset(&h, 0, sizeof(h));
    h.n = RS_HASH_MAX;
    for (int i = 0; i < RS_HASH_MAX; i++) {
        h.d[i].algo = RS_HASH_OTHER;
        memset(h.d[i].name, 'a' + i, RS_HASH_NAMELEN - 1);
        h.d[i].len = RS_HASH_MAXLEN;
        memset(h.d[i].bytes, 0xff, RS_HASH_MAXLEN);
    }
    size_t n = rs_hashes_format(&h, buf);
    assert_int_equal(n, RS_HASH_MAX * (RS_HASH_NAMELEN + 2 * RS_HASH_MAXLEN)
                            + 3);
    assert_true(n < RS_HASHES_BUFSZ);
    struct rs_hashes back;
    assert_int_equal(rs_hashes_parse(buf, n, &back), 0);
    assert_int_equal(back.n, RS_HASH_MAX);
    assert_memory_equal(back.d[3].bytes, h.d[3].bytes, RS_HASH_MAXLEN);
}

/* hash/find: the digest of one algorithm, or NULL when the list (or the
 * list pointer) has none. */
static void
test_find(void **state)
{
    (void)state;
    struct rs_hashes h = th_parse("md5:" MD5_ABC " sha-256:" SHA256_ABC);
    const struct rs_digest *d = rs_hashes_find(&h, RS_HASH_SHA256);
    assert_non_null(d);
    assert_int_equal(d->bytes[0], 0xba);
    assert_ptr_equal(rs_hashes_find(&h, RS_HASH_MD5), &h.d[0]);
    assert_null(rs_hashes_find(&h, RS_HASH_SHA1));
    assert_null(rs_hashes_find(&h, RS_HASH_OTHER));
    assert_null(rs_hashes_find(NULL, RS_HASH_MD5));
}

/* hash/strongest: sha-256 before sha-512, sha-1 and md5, whatever the
 * order written; RS_HASH_OTHER when only unknown algorithms (or none). */
static void
test_strongest(void **state)
{
    (void)state;
    struct rs_hashes h = th_parse("md5:" MD5_ABC " sha-256:" SHA256_ABC);
    assert_int_equal(rs_hashes_strongest(&h), RS_HASH_SHA256);
    h = th_parse("sha-256:" SHA256_ABC " md5:" MD5_ABC);
    assert_int_equal(rs_hashes_strongest(&h), RS_HASH_SHA256);
    h = th_parse("md5:" MD5_ABC);
    assert_int_equal(rs_hashes_strongest(&h), RS_HASH_MD5);
    h = th_parse("x-crc:00ff");
    assert_int_equal(rs_hashes_strongest(&h), RS_HASH_OTHER);
    struct rs_hashes none = { 0 };
    assert_int_equal(rs_hashes_strongest(&none), RS_HASH_OTHER);
    assert_int_equal(rs_hashes_strongest(NULL), RS_HASH_OTHER);
}

/* hash/match: 1 when the shared algorithms all agree, -1 when any differs,
 * 0 when none is shared; unknown algorithms never count, even when their
 * names match. */
static void
test_match(void **state)
{
    (void)state;
    struct rs_hashes md5 = th_parse("md5:" MD5_ABC);
    struct rs_hashes md5_other = th_parse("md5:" MD5_EMPTY);
    struct rs_hashes both = th_parse("sha-256:" SHA256_ABC " md5:" MD5_ABC);
    struct rs_hashes both_bad = th_parse("md5:" MD5_ABC " sha-256:"
                                         SHA256_EMPTY);
    struct rs_hashes sha = th_parse("sha-256:" SHA256_ABC);
    struct rs_hashes sha1 = th_parse("sha-1:" SHA1_ABC);
    struct rs_hashes x1 = th_parse("x:00");
    struct rs_hashes x2 = th_parse("x:00 sha-1:" SHA1_EMPTY);
    struct rs_hashes empty;
    memset(&empty, 0, sizeof(empty));

    assert_int_equal(rs_hashes_match(&md5, &md5), 1);
    assert_int_equal(rs_hashes_match(&md5, &both), 1);
    assert_int_equal(rs_hashes_match(&sha, &both), 1);
    assert_int_equal(rs_hashes_match(&md5, &md5_other), -1);
    assert_int_equal(rs_hashes_match(&both, &both_bad), -1);
    assert_int_equal(rs_hashes_match(&md5, &both_bad), 1);
    assert_int_equal(rs_hashes_match(&md5, &sha), 0);
    assert_int_equal(rs_hashes_match(&x1, &x1), 0);
    assert_int_equal(rs_hashes_match(&x1, &x2), 0);
    assert_int_equal(rs_hashes_match(&sha1, &x2), -1);
    assert_int_equal(rs_hashes_match(&empty, &md5), 0);
    assert_int_equal(rs_hashes_match(&empty, &empty), 0);
    assert_int_equal(rs_hashes_match(NULL, &md5), 0);
}

/* Digest of one buffer with every algorithm, formatted. */
static const char *
th_digest_all(struct rs_hasher *h, const char *data)
{
    struct rs_hashes out;
    assert_int_equal(rs_hasher_update(h, data, strlen(data)), 0);
    assert_int_equal(rs_hasher_final(h, &out), 0);
    return th_format(&out);
}

/* hash/hasher_vectors: the four digests of "abc" and of no data match the
 * published test vectors, in ascending algorithm order. */
static void
test_hasher_vectors(void **state)
{
    (void)state;
    struct rs_hasher *h = rs_hasher_new(ALL_ALGOS);
    assert_non_null(h);
    assert_string_equal(th_digest_all(h, "abc"),
                        "md5:" MD5_ABC " sha-1:" SHA1_ABC " sha-256:"
                        SHA256_ABC " sha-512:" SHA512_ABC);
    assert_string_equal(th_digest_all(h, ""),
                        "md5:" MD5_EMPTY " sha-1:" SHA1_EMPTY " sha-256:"
                        SHA256_EMPTY " sha-512:" SHA512_EMPTY);
    rs_hasher_free(h);
}

/* hash/hasher_chunks: content fed in uneven chunks hashes like one piece
 * (one million 'a', the FIPS 180 long vector). */
static void
test_hasher_chunks(void **state)
{
    (void)state;
    static char a[4096];
    memset(a, 'a', sizeof(a));
    struct rs_hasher *h = rs_hasher_new(1u << RS_HASH_SHA256);
    assert_non_null(h);
    size_t left = 1000000, step = 1;
    while (left > 0) {
        size_t n = step < left ? step : left;
        assert_int_equal(rs_hasher_update(h, a, n), 0);
        left -= n;
        step = step * 7 % 4093 + 1;
    }
    assert_int_equal(rs_hasher_update(h, NULL, 0), 0);
    struct rs_hashes out;
    assert_int_equal(rs_hasher_final(h, &out), 0);
    assert_int_equal(out.n, 1);
    assert_string_equal(th_format(&out), "sha-256:" SHA256_MILLION_A);
    rs_hasher_free(h);
}

/* hash/hasher_reuse: after final the hasher starts afresh, so the next
 * content's digest does not depend on the previous one. */
static void
test_hasher_reuse(void **state)
{
    (void)state;
    struct rs_hasher *h = rs_hasher_new((1u << RS_HASH_MD5)
                                        | (1u << RS_HASH_SHA512));
    assert_non_null(h);
    char first[RS_HASHES_BUFSZ];
    snprintf(first, sizeof(first), "%s", th_digest_all(h, "earlier content"));
    assert_string_equal(th_digest_all(h, "earlier content"), first);
    assert_string_equal(th_digest_all(h, "abc"),
                        "md5:" MD5_ABC " sha-512:" SHA512_ABC);
    struct rs_hashes out;
    assert_int_equal(rs_hasher_final(h, &out), 0);
    assert_string_equal(th_format(&out),
                        "md5:" MD5_EMPTY " sha-512:" SHA512_EMPTY);
    /* a hasher's output parses back and matches itself */
    struct rs_hashes back = th_parse(th_format(&out));
    assert_int_equal(rs_hashes_match(&out, &back), 1);
    rs_hasher_free(h);
}

/* hash/hasher_mask: a mask naming no supported algorithm gives NULL,
 * unknown bits are ignored, bad arguments are EINVAL, free(NULL) is a
 * no-op. */
static void
test_hasher_mask(void **state)
{
    (void)state;
    assert_null(rs_hasher_new(0));
    assert_null(rs_hasher_new(1u << RS_HASH_OTHER));
    assert_null(rs_hasher_new(1u << 20));
    struct rs_hasher *h = rs_hasher_new((1u << 31) | (1u << RS_HASH_SHA1)
                                        | (1u << RS_HASH_OTHER));
    assert_non_null(h);
    assert_int_equal(rs_hasher_update(h, NULL, 1), RS_EINVAL);
    assert_int_equal(rs_hasher_update(NULL, "a", 1), RS_EINVAL);
    assert_int_equal(rs_hasher_final(h, NULL), RS_EINVAL);
    assert_string_equal(th_digest_all(h, "abc"), "sha-1:" SHA1_ABC);
    rs_hasher_free(h);
    rs_hasher_free(NULL);
}

/* hash/hasher_alloc_fail: failing each of the hasher's allocations in turn
 * gives NULL and leaks nothing (ASan); once all succeed it works. */
static void
test_hasher_alloc_fail(void **state)
{
    (void)state;
    tu_alloc_fail_at(ULONG_MAX);
    struct rs_hasher *h = rs_hasher_new(ALL_ALGOS);
    unsigned long need = tu_alloc_count();
    tu_alloc_fail_at(0);
    assert_non_null(h);
    assert_true(need >= 1);
    rs_hasher_free(h);

    for (unsigned long n = 1; n <= need; n++) {
        tu_alloc_fail_at(n);
        h = rs_hasher_new(ALL_ALGOS);
        tu_alloc_fail_at(0);
        assert_null(h);
    }
    tu_alloc_fail_at(need + 1);
    h = rs_hasher_new(ALL_ALGOS);
    tu_alloc_fail_at(0);
    assert_non_null(h);
    assert_string_equal(th_digest_all(h, "abc"),
                        "md5:" MD5_ABC " sha-1:" SHA1_ABC " sha-256:"
                        SHA256_ABC " sha-512:" SHA512_ABC);
    rs_hasher_free(h);
}

#define TH(name, fn) { name, fn, NULL, NULL, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TH("hash/parse_known", test_parse_known),
        TH("hash/parse_list", test_parse_list),
        TH("hash/parse_case", test_parse_case),
        TH("hash/parse_unknown", test_parse_unknown),
        TH("hash/parse_bad_items", test_parse_bad_items),
        TH("hash/parse_list_limits", test_parse_list_limits),
        TH("hash/format", test_format),
        TH("hash/find", test_find),
        TH("hash/strongest", test_strongest),
        TH("hash/match", test_match),
        TH("hash/hasher_vectors", test_hasher_vectors),
        TH("hash/hasher_chunks", test_hasher_chunks),
        TH("hash/hasher_reuse", test_hasher_reuse),
        TH("hash/hasher_mask", test_hasher_mask),
        TH("hash/hasher_alloc_fail", test_hasher_alloc_fail),
    };
    return cmocka_run_group_tests_name("hash", tests, NULL, NULL);
}
