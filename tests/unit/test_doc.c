/* test_doc.c - the model's token tables, initialisers and link lookup. */
#include "testutil.h"

#include <string.h>

#include "rs_alloc.h"
#include "rs_doc.h"
#include "rs_error.h"

/* doc/capability_tokens: every capability round-trips through its name,
 * and the 2013 alpha spelling maps to the change notification. */
static void
test_capability_tokens(void **state)
{
    (void)state;
    for (int c = RS_CAP_DESCRIPTION; c < RS_CAP_OTHER; c++) {
        bool alpha = true;
        assert_int_equal(rs_capability_from(rs_capability_name(c), &alpha), c);
        assert_false(alpha);
    }
    bool alpha = false;
    assert_int_equal(rs_capability_from("change-notification", &alpha),
                     RS_CAP_CHANGELIST_NOTIFICATION);
    assert_true(alpha);
    assert_int_equal(rs_capability_from("frobnicate", NULL), RS_CAP_OTHER);
    assert_int_equal(rs_capability_from("", NULL), RS_CAP_NONE);
    assert_int_equal(rs_capability_from(NULL, NULL), RS_CAP_NONE);
    assert_true(rs_capability_is_notification(RS_CAP_FRAMEWORK_NOTIFICATION));
    assert_false(rs_capability_is_notification(RS_CAP_CHANGELIST));
}

/* doc/change_and_freq_tokens: change and changefreq tokens round-trip;
 * unknown ones are NONE (case matters: the spec's tokens are lower-case). */
static void
test_change_and_freq_tokens(void **state)
{
    (void)state;
    for (int c = RS_CHANGE_CREATED; c <= RS_CHANGE_DELETED; c++)
        assert_int_equal(rs_change_from(rs_change_name(c)), c);
    assert_int_equal(rs_change_from("Updated"), RS_CHANGE_NONE);
    for (int f = RS_FREQ_ALWAYS; f <= RS_FREQ_NEVER; f++)
        assert_int_equal(rs_changefreq_from(rs_changefreq_name(f)), f);
    assert_int_equal(rs_changefreq_from("sometimes"), RS_FREQ_NONE);
    assert_string_equal(rs_root_name(RS_ROOT_SITEMAPINDEX), "sitemapindex");
}

/* doc/links_find_pri: the lowest pri wins among links of one relation; an
 * absent pri counts as 999999; relations compare case-insensitively. */
static void
test_links_find_pri(void **state)
{
    (void)state;
    struct rs_link l[3];
    for (int i = 0; i < 3; i++)
        rs_link_init(&l[i]);
    l[0].rel = "duplicate"; l[0].href = "http://a/";
    l[1].rel = "duplicate"; l[1].href = "http://b/"; l[1].pri = 2;
    l[2].rel = "up"; l[2].href = "http://c/";
    assert_string_equal(rs_links_find(l, 3, "DUPLICATE")->href, "http://b/");
    assert_string_equal(rs_links_find(l, 3, "up")->href, "http://c/");
    assert_null(rs_links_find(l, 3, "next"));
}

/* doc/init_absent: initialisers mark every optional field absent. */
static void
test_init_absent(void **state)
{
    (void)state;
    struct rs_entry e;
    rs_entry_init(&e);
    assert_null(e.loc);
    assert_true(e.lastmod == RS_TIME_NONE);
    assert_true(e.md.at == RS_TIME_NONE && e.md.datetime == RS_TIME_NONE);
    assert_int_equal(e.md.length, -1);
    assert_int_equal(e.md.hash.n, 0);
    rs_doc_free(NULL);
}

/* doc/strerror: every code has a message, unknown ones too. */
static void
test_strerror(void **state)
{
    (void)state;
    for (int rc = 0; rc >= RS_EDENIED; rc--)
        assert_true(strlen(rs_strerror(rc)) > 0);
    assert_string_equal(rs_strerror(-9999), "unknown error");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capability_tokens),
        cmocka_unit_test(test_change_and_freq_tokens),
        cmocka_unit_test(test_links_find_pri),
        cmocka_unit_test(test_init_absent),
        cmocka_unit_test(test_strerror),
    };
    return cmocka_run_group_tests_name("doc", tests, NULL, NULL);
}
