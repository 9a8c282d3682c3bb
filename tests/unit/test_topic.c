/* test_topic.c - the hub's topic registry (hub/topic.c): the open-mode cap
 * that publishing and POST /topics share (learning stops at max_topics,
 * topics already held stay reachable, topics another node registered are
 * still remembered), the checks on a topic URI named in a request, the
 * derived names, the registry record round trip. */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

#include "rs_alloc.h"
#include "topic.h"

/* topic/learn_capped: an open registry learns up to max_topics topics,
 * counting configured ones; then learning fails and says why, while a
 * topic it holds is still found. */
static void
test_learn_capped(void **state)
{
    (void)state;
    const char *why = NULL;
    struct topics *ts = topics_new(true, 0, 0, 3);
    assert_non_null(ts);
    assert_int_equal(topics_max(ts), 3);
    assert_int_equal(topics_add(ts, "conf", "http://c.test/", TOPIC_CHANGE,
                                NULL, 0, 0, &why), 0);
    bool created = false;
    struct topic *a = topics_learn(ts, "http://a.test/", &created, &why);
    assert_non_null(a);
    assert_true(created);
    assert_int_equal(a->kind, TOPIC_ANY);
    assert_false(topics_full(ts));
    assert_non_null(topics_learn(ts, "http://b.test/", &created, &why));
    assert_true(topics_full(ts));
    assert_null(topics_learn(ts, "http://d.test/", &created, &why));
    assert_false(created);
    assert_null(why);                 /* full, not refused */
    assert_ptr_equal(topics_learn(ts, "http://a.test/", &created, &why), a);
    assert_false(created);
    assert_int_equal(topics_count(ts), 3);
    /* another node's topic is remembered whatever the cap */
    assert_int_equal(topics_remember(ts, "e", "http://e.test/", TOPIC_FRAMEWORK), 0);
    assert_int_equal(topics_count(ts), 4);
    assert_true(topics_by_name(ts, "e")->registered);
    topics_free(ts);
    topics_free(NULL);
}

/* topic/closed_learns_nothing: a closed registry is never full and never
 * learns; the default cap is TOPICS_MAX_DEFAULT. */
static void
test_closed(void **state)
{
    (void)state;
    struct topics *ts = topics_new(false, 0, 0, 0);
    assert_non_null(ts);
    assert_int_equal(topics_max(ts), TOPICS_MAX_DEFAULT);
    bool created = true;
    const char *why = "x";
    assert_null(topics_learn(ts, "http://a.test/", &created, &why));
    assert_null(why);
    assert_false(created);
    assert_false(topics_full(ts));
    topics_free(ts);
}

/* topic/uri_checks: what POST /topics accepts as a topic URI. */
static void
test_uri_ok(void **state)
{
    (void)state;
    const char *why = NULL;
    char big[TOPIC_URI_MAX + 2];
    assert_true(topic_uri_ok("http://a.test/x?y=1#z", &why));
    assert_null(why);
    assert_false(topic_uri_ok("", &why));
    assert_string_equal(why, "topic is empty");
    assert_false(topic_uri_ok("http://a.test/a b", &why));
    assert_false(topic_uri_ok("http://a.test/a\nb", &why));
    assert_false(topic_uri_ok("http://a.test/a\x7f", &why));
    assert_string_equal(why, "topic holds a space or a control character");
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_false(topic_uri_ok(big, &why));
    assert_string_equal(why, "topic is longer than 2048 bytes");
    big[TOPIC_URI_MAX] = '\0';
    assert_true(topic_uri_ok(big, &why));
}

/* topic/new_uri_checks: what open mode takes as a new topic, from a
 * publish, a registration or a WebSub request alike: a URI (ASCII: the
 * registry's JSON records must be UTF-8, and a byte beyond ASCII once
 * made a topic with no record: a false "Redis unavailable" 503 and a
 * topic listed without its URI), absolute http(s). Refused ones are not
 * learned, and say why. */
static void
test_new_uri_ok(void **state)
{
    (void)state;
    const char *why = NULL;
    bool created = true;
    struct topics *ts = topics_new(true, 0, 0, 0);
    assert_non_null(ts);
    assert_true(topic_new_uri_ok("http://a.test/%C3%A9", &why));
    assert_null(why);
    assert_false(topic_new_uri_ok("http://a.test/\xc3\xa9\xff", &why));
    assert_non_null(strstr(why, "beyond ASCII"));
    assert_null(topics_learn(ts, "http://a.test/\xc3\xa9", &created, &why));
    assert_non_null(strstr(why, "beyond ASCII"));
    assert_false(created);
    assert_false(topic_new_uri_ok("urn:x:y", &why));
    assert_string_equal(why, "a new topic must be an absolute http(s) URI");
    assert_null(topics_learn(ts, "/t1", &created, &why));
    assert_string_equal(why, "a new topic must be an absolute http(s) URI");
    assert_null(topics_learn(ts, "ftp://a.test/x", &created, &why));
    assert_null(topics_learn(ts, "", &created, &why));
    assert_string_equal(why, "topic is empty");
    assert_int_equal(topics_count(ts), 0);
    assert_non_null(topics_learn(ts, "https://a.test/x", &created, &why));
    assert_null(why);
    assert_true(created);
    topics_free(ts);
}

/* topic/derived_names: readable, distinct for distinct URIs, valid
 * channel names. */
static void
test_names(void **state)
{
    (void)state;
    char a[128], b[128];
    assert_int_equal(topics_derive_name("http://Ex.org/a/changes", a, sizeof(a)), 0);
    assert_int_equal(strncmp(a, "ex.org-a-changes-", 17), 0);
    assert_int_equal(strlen(a), 17 + 8);
    assert_int_equal(topics_derive_name("http://ex.org/a/changes/", b, sizeof(b)), 0);
    assert_string_not_equal(a, b);
    assert_int_equal(topics_derive_name("x", a, 50), RS_EINVAL);
}

/* topic/record_round_trip: the registry record and its kinds. */
static void
test_record(void **state)
{
    (void)state;
    struct topics *ts = topics_new(true, 0, 0, 0);
    bool created;
    const char *why;
    struct topic *t = topics_learn(ts, "http://a.test/\"q\"", &created, &why);
    assert_non_null(t);
    t->kind = TOPIC_FRAMEWORK;
    char *rec = topic_record(t);
    assert_non_null(rec);
    char *uri = NULL;
    enum topic_kind k = TOPIC_ANY;
    assert_int_equal(topic_record_parse(rec, strlen(rec), &uri, &k), 0);
    assert_string_equal(uri, "http://a.test/\"q\"");
    assert_int_equal(k, TOPIC_FRAMEWORK);
    rs_free(uri);
    rs_free(rec);
    assert_int_equal(topic_record_parse("{\"topic\":\"x\",\"kind\":\"nope\"}",
                                        27, &uri, &k), RS_EINVAL);
    assert_null(uri);
    topics_free(ts);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        { "topic/learn_capped", test_learn_capped, NULL, NULL, NULL },
        { "topic/closed_learns_nothing", test_closed, NULL, NULL, NULL },
        { "topic/uri_checks", test_uri_ok, NULL, NULL, NULL },
        { "topic/new_uri_checks", test_new_uri_ok, NULL, NULL, NULL },
        { "topic/derived_names", test_names, NULL, NULL, NULL },
        { "topic/record_round_trip", test_record, NULL, NULL, NULL },
    };
    return cmocka_run_group_tests_name("topic", tests, NULL, NULL);
}
