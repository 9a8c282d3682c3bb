/* test_pubid.c - X-Publish-Id values (common/pubid.c): KEY:SEQ as the hub
 * reads it (the limits of KEY and SEQ, blanks around the value) and every
 * malformed value refused with a reason; formatting, and new random KEYs
 * that the parser takes back. */
#include "testutil.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "rs_pubid.h"

static void
parses(const char *v, const char *key, uint64_t seq)
{
    struct rs_pubid id;
    const char *why = NULL;
    if (rs_pubid_parse(v, &id, &why) != 0)
        fail_msg("\"%s\" refused: %s", v, why);
    assert_string_equal(id.key, key);
    assert_true(id.seq == seq);
    assert_null(why);
}

static void
refused(const char *v, const char *want_why)
{
    struct rs_pubid id;
    const char *why = NULL;
    if (rs_pubid_parse(v, &id, &why) != RS_EINVAL)
        fail_msg("\"%s\" accepted", v ? v : "(null)");
    assert_non_null(why);
    if (strstr(why, want_why) == NULL)
        fail_msg("\"%s\": reason \"%s\" lacks \"%s\"", v ? v : "(null)", why,
                 want_why);
}

/* pubid/parse: KEY of 1 to 64 of [A-Za-z0-9._-], SEQ 1..2^63-1 in
 * decimal (leading zeros read as the number), blanks around ignored. */
static void
test_parse(void **state)
{
    (void)state;
    char key64[65], v[100];
    memset(key64, 'k', 64);
    key64[64] = '\0';
    parses("a:1", "a", 1);
    parses("Src.topic_1-x:42", "Src.topic_1-x", 42);
    parses(" \tk:7\t ", "k", 7);
    parses("k:007", "k", 7);
    parses("k:9223372036854775807", "k", UINT64_C(9223372036854775807));
    snprintf(v, sizeof(v), "%s:5", key64);
    parses(v, key64, 5);
}

/* pubid/refused: whatever is not KEY:SEQ gets a reason a 400 can carry. */
static void
test_refused(void **state)
{
    (void)state;
    char v[100];
    memset(v, 'k', 65);
    snprintf(v + 65, sizeof(v) - 65, ":1");
    refused(v, "longer than 64");
    refused(NULL, "KEY:SEQ");
    refused("", "KEY:SEQ");
    refused("k", "KEY:SEQ");
    refused("k1", "KEY:SEQ");
    refused(":1", "empty KEY");
    refused("k:", "empty SEQ");
    refused("k:0", "at least 1");
    refused("k:000", "at least 1");
    refused("k:-1", "digits only");
    refused("k:+1", "digits only");
    refused("k:1.5", "digits only");
    refused("k:1 2", "digits only");
    refused("k:1x", "digits only");
    refused("k:0x10", "digits only");
    refused("k:1:2", "digits only");
    refused("k:9223372036854775808", "above");
    refused("k:18446744073709551616", "above");
    refused("k:99999999999999999999999", "above");
    refused("a b:1", "only A-Z");
    refused("a/b:1", "only A-Z");
    refused("k\xc3\xa9:1", "only A-Z");
    refused("a:1, a:2", "digits only");   /* two values folded by a proxy */
}

/* pubid/format_and_new: KEY:SEQ written back as parsed; bad parts and
 * short buffers refused; new KEYs are 32 hex digits, differ, and parse. */
static void
test_format_new(void **state)
{
    (void)state;
    char buf[RS_PUBID_BUFSZ], k1[40], k2[40];
    assert_int_equal(rs_pubid_format("k", 12, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "k:12");
    char key64[65];
    memset(key64, 'z', 64);
    key64[64] = '\0';
    assert_int_equal(rs_pubid_format(key64, RS_PUBID_SEQ_MAX, buf,
                                     sizeof(buf)), 0);
    assert_int_equal(strlen(buf), 64 + 1 + 19);
    assert_int_equal(rs_pubid_format("k", 0, buf, sizeof(buf)), RS_EINVAL);
    assert_int_equal(rs_pubid_format("k", RS_PUBID_SEQ_MAX + 1, buf,
                                     sizeof(buf)), RS_EINVAL);
    assert_int_equal(rs_pubid_format("", 1, buf, sizeof(buf)), RS_EINVAL);
    assert_int_equal(rs_pubid_format("k:", 1, buf, sizeof(buf)), RS_EINVAL);
    assert_int_equal(rs_pubid_format("k", 123, buf, 5), RS_EINVAL);
    assert_false(rs_pubid_key_ok(NULL));
    assert_true(rs_pubid_key_ok(key64));

    assert_int_equal(rs_pubid_key_new(k1, sizeof(k1)), 0);
    assert_int_equal(rs_pubid_key_new(k2, sizeof(k2)), 0);
    assert_int_equal(strlen(k1), RS_PUBID_NEWKEY_LEN);
    assert_int_equal(strspn(k1, "0123456789abcdef"), RS_PUBID_NEWKEY_LEN);
    assert_string_not_equal(k1, k2);
    assert_int_equal(rs_pubid_format(k1, 1, buf, sizeof(buf)), 0);
    struct rs_pubid id;
    const char *why;
    assert_int_equal(rs_pubid_parse(buf, &id, &why), 0);
    assert_string_equal(id.key, k1);
    assert_int_equal(rs_pubid_key_new(k1, RS_PUBID_NEWKEY_LEN), RS_EINVAL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_format_new),
    };
    return cmocka_run_group_tests_name("pubid", tests, NULL, NULL);
}
