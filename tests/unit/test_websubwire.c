/* test_websubwire.c - the hub's WebSub wire formats (hub/websubwire.c,
 * docs/protocol.md 5): the POST /hub form and each of its rules, leases
 * clamped, publish URLs in order, NUL bytes and garbage refused; the
 * verification and denial URLs; the challenge and its echo; the signature
 * (RFC 4231's HMAC-SHA256 vector); a delivery's headers; callback hosts. */
#include "testutil.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rs_alloc.h"
#include "websubwire.h"

static const struct websubwire_leases LEASES = { .min_s = 60, .max_s = 86400,
                                                 .default_s = 3600 };

static int
parse(struct websubwire_form *f, const char *body, const char **why)
{
    return websubwire_form_parse(f, body, strlen(body), &LEASES, why);
}

/* websubwire/subscribe_form: every field read; unknown ones ignored;
 * the lease asked for is clamped, none asked is the default; an empty
 * secret is none. */
static void
test_subscribe(void **state)
{
    (void)state;
    struct websubwire_form f;
    const char *why = "x";
    assert_int_equal(parse(&f, "hub.mode=subscribe&hub.topic=http%3A%2F%2Ft.test%2Fa"
                               "&hub.callback=http://c.test/cb%3Fx%3D1"
                               "&hub.secret=s3cret&hub.lease_seconds=120&foo=bar",
                           &why), 0);
    assert_null(why);
    assert_int_equal(f.mode, WEBSUBWIRE_SUBSCRIBE);
    assert_string_equal(f.topic, "http://t.test/a");
    assert_string_equal(f.callback, "http://c.test/cb?x=1");
    assert_string_equal(f.secret, "s3cret");
    assert_int_equal(f.lease_s, 120);
    websubwire_form_cleanup(&f);

    const char *leases[][2] = { { "", "3600" }, { "&hub.lease_seconds=1", "60" },
                                { "&hub.lease_seconds=99999999", "86400" },
                                { "&hub.lease_seconds=18446744073709551615", "86400" } };
    for (size_t i = 0; i < 4; i++) {
        char body[256];
        snprintf(body, sizeof(body), "hub.mode=unsubscribe&hub.topic=t"
                 "&hub.callback=https://c.test/&hub.secret=%s", leases[i][0]);
        assert_int_equal(parse(&f, body, &why), 0);
        assert_int_equal(f.mode, WEBSUBWIRE_UNSUBSCRIBE);
        assert_null(f.secret);
        assert_int_equal(f.lease_s, strtoull(leases[i][1], NULL, 10));
        websubwire_form_cleanup(&f);
    }
}

/* websubwire/form_rules: each broken rule is RS_EINVAL with its reason
 * (a callback carrying credentials among them); a secret of 199 bytes is
 * taken, 200 is not. */
static void
test_rules(void **state)
{
    (void)state;
    static const struct {
        const char *body, *why;
    } bad[] = {
        { "hub.topic=t&hub.callback=http://c.test/", "missing hub.mode" },
        { "hub.mode=list&hub.topic=t&hub.callback=http://c.test/",
          "hub.mode must be subscribe, unsubscribe or publish" },
        { "hub.mode=subscribe&hub.callback=http://c.test/", "missing hub.topic" },
        { "hub.mode=subscribe&hub.topic=&hub.callback=http://c.test/",
          "missing hub.topic" },
        { "hub.mode=subscribe&hub.topic=t", "missing hub.callback" },
        { "hub.mode=subscribe&hub.topic=t&hub.callback=ftp://c.test/",
          "hub.callback must be an absolute http(s) URL" },
        { "hub.mode=subscribe&hub.topic=t&hub.callback=/cb",
          "hub.callback must be an absolute http(s) URL" },
        /* listed by GET /topics and logged: never a password */
        { "hub.mode=subscribe&hub.topic=t&hub.callback=http://u:pw@c.test/",
          "hub.callback must not carry a user or password (the hub lists "
          "and logs callbacks; hub.secret signs deliveries)" },
        { "hub.mode=unsubscribe&hub.topic=t&hub.callback=http://u@c.test/",
          "hub.callback must not carry a user or password (the hub lists "
          "and logs callbacks; hub.secret signs deliveries)" },
        { "hub.mode=subscribe&hub.topic=t&hub.callback=http://c.test/"
          "&hub.lease_seconds=-5", "hub.lease_seconds must be a whole number" },
        { "hub.mode=subscribe&hub.topic=t&hub.callback=http://c.test/"
          "&hub.lease_seconds=5s", "hub.lease_seconds must be a whole number" },
        { "hub.mode=subscribe&hub.topic=t&hub.callback=http://c.test/"
          "&hub.lease_seconds=", "hub.lease_seconds must be a whole number" },
        { "hub.mode=subscribe&hub.topic=t%00x&hub.callback=http://c.test/",
          "the form holds a NUL byte" },
    };
    struct websubwire_form f;
    const char *why = NULL;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = parse(&f, bad[i].body, &why);
        if (rc != RS_EINVAL || why == NULL || strcmp(why, bad[i].why) != 0)
            fail_msg("%s: rc %d, why %s", bad[i].body, rc, why ? why : "(null)");
        websubwire_form_cleanup(&f);
    }
    /* a raw NUL: len says more than strlen */
    static const char raw[] = "hub.mode=subscribe\0&hub.topic=t";
    assert_int_equal(websubwire_form_parse(&f, raw, sizeof(raw) - 1, &LEASES, &why),
                     RS_EINVAL);
    assert_string_equal(why, "the form holds a NUL byte");
    websubwire_form_cleanup(&f);

    char body[512], secret[WEBSUBWIRE_SECRET_MAX + 2];
    memset(secret, 's', sizeof(secret) - 1);
    secret[sizeof(secret) - 1] = '\0';
    snprintf(body, sizeof(body), "hub.mode=subscribe&hub.topic=t"
             "&hub.callback=http://c.test/&hub.secret=%s", secret);
    assert_int_equal(parse(&f, body, &why), RS_EINVAL);
    assert_string_equal(why, "hub.secret must be less than 200 bytes");
    websubwire_form_cleanup(&f);
    secret[WEBSUBWIRE_SECRET_MAX] = '\0';
    snprintf(body, sizeof(body), "hub.mode=subscribe&hub.topic=t"
             "&hub.callback=http://c.test/&hub.secret=%s", secret);
    assert_int_equal(parse(&f, body, &why), 0);
    assert_int_equal(strlen(f.secret), WEBSUBWIRE_SECRET_MAX);
    websubwire_form_cleanup(&f);
}

/* websubwire/not_a_form: what libevent cannot decode is RS_EPARSE (a 400
 * that is not counted as a refused subscription). */
static void
test_not_a_form(void **state)
{
    (void)state;
    struct websubwire_form f;
    const char *why = NULL;
    assert_int_equal(parse(&f, "hub.mode", &why), RS_EPARSE);
    assert_string_equal(why, "malformed form body");
    websubwire_form_cleanup(&f);
    assert_int_equal(parse(&f, "=x&hub.mode=publish", &why), RS_EPARSE);
    websubwire_form_cleanup(&f);
}

/* websubwire/publish_form: hub.url and hub.topic values listed in order
 * with their keys, unchecked; none at all is an empty list. */
static void
test_publish(void **state)
{
    (void)state;
    struct websubwire_form f;
    const char *why = NULL;
    assert_int_equal(parse(&f, "hub.url=http://a.test/&x=1&hub.topic=b"
                               "&hub.mode=publish&hub.url=http%3A%2F%2Fc.test%2F", &why), 0);
    assert_int_equal(f.mode, WEBSUBWIRE_PUBLISH);
    assert_int_equal(f.nurls, 3);
    assert_string_equal(f.url_keys[0], "hub.url");
    assert_string_equal(f.urls[0], "http://a.test/");
    assert_string_equal(f.url_keys[1], "hub.topic");
    assert_string_equal(f.urls[1], "b");
    assert_string_equal(f.urls[2], "http://c.test/");
    websubwire_form_cleanup(&f);
    assert_int_equal(parse(&f, "hub.mode=publish", &why), 0);
    assert_int_equal(f.nurls, 0);
    assert_null(f.urls);
    websubwire_form_cleanup(&f);
    websubwire_form_cleanup(&f);   /* twice: a no-op */
}

/* websubwire/verify_and_denial_urls: the callback's own query is kept,
 * values URL-encoded, the lease only when subscribing. */
static void
test_urls(void **state)
{
    (void)state;
    char *u = websubwire_verify_url("http://c.test/cb?id=7", WEBSUBWIRE_SUBSCRIBE,
                                    "http://t.test/a b", "abc", 600);
    assert_non_null(u);
    assert_string_equal(u, "http://c.test/cb?id=7&hub.mode=subscribe"
                           "&hub.topic=http%3a%2f%2ft.test%2fa+b"
                           "&hub.challenge=abc&hub.lease_seconds=600");
    rs_free(u);
    u = websubwire_verify_url("http://c.test/cb", WEBSUBWIRE_UNSUBSCRIBE, "t",
                              "abc", 600);
    assert_string_equal(u, "http://c.test/cb?hub.mode=unsubscribe&hub.topic=t"
                           "&hub.challenge=abc");
    rs_free(u);
    u = websubwire_denial_url("http://c.test/cb", "t", "unknown topic");
    assert_string_equal(u, "http://c.test/cb?hub.mode=denied&hub.topic=t"
                           "&hub.reason=unknown+topic");
    rs_free(u);
    assert_null(websubwire_denial_url("no url", "t", "r"));
}

/* websubwire/challenge: 16 bytes are 32 hex digits; the echo must be exact
 * but for trailing CR, LF and spaces. */
static void
test_challenge(void **state)
{
    (void)state;
    unsigned char rnd[WEBSUBWIRE_CHALLENGE_BYTES];
    char c[WEBSUBWIRE_CHALLENGE_BUFSZ];
    for (int i = 0; i < WEBSUBWIRE_CHALLENGE_BYTES; i++)
        rnd[i] = (unsigned char)(i * 17);
    websubwire_challenge(rnd, c);
    assert_string_equal(c, "00112233445566778899aabbccddeeff");
    assert_true(websubwire_challenge_echoed(c, c, 32));
    assert_true(websubwire_challenge_echoed(c, "00112233445566778899aabbccddeeff \r\n", 35));
    assert_false(websubwire_challenge_echoed(c, " 00112233445566778899aabbccddeeff", 33));
    assert_false(websubwire_challenge_echoed(c, c, 31));
    assert_false(websubwire_challenge_echoed(c, "00112233445566778899AABBCCDDEEFF", 32));
    assert_false(websubwire_challenge_echoed(c, "", 0));
}

/* websubwire/signature: HMAC-SHA256 in hex after "sha256=" (RFC 4231,
 * test case 2). */
static void
test_signature(void **state)
{
    (void)state;
    char sig[WEBSUBWIRE_SIG_BUFSZ];
    const char *data = "what do ya want for nothing?";
    websubwire_signature("Jefe", data, strlen(data), sig);
    assert_string_equal(sig, "sha256=5bdcc146bf60754e6a042426089575c7"
                             "5a003f089d2739839dec58b964ec3843");
}

/* websubwire/post_headers: content type as published, the Link pair, the
 * signature only with a secret, X-Hub-Id, X-Hub-Gap only when told, no
 * 100-continue; NULL-terminated. */
static void
test_post_headers(void **state)
{
    (void)state;
    struct websubwire_headers h;
    struct msg_id gap = { 1700000000000, 3 };
    struct websubwire_post p = {
        .ctype = "application/xml", .hub_url = "http://hub.test/hub",
        .topic_uri = "http://t.test/a", .secret = NULL, .body = "<x/>", .len = 4,
        .id = { 1700000000123, 0 }, .gap_after = NULL,
    };
    websubwire_post_headers(&p, &h);
    assert_string_equal(h.v[0], "Content-Type: application/xml");
    assert_string_equal(h.v[1], "Link: <http://hub.test/hub>; rel=\"hub\", "
                                "<http://t.test/a>; rel=\"self\"");
    assert_string_equal(h.v[2], "X-Hub-Id: 1700000000123-0");
    assert_string_equal(h.v[3], "Expect:");
    assert_null(h.v[4]);
    p.secret = "Jefe";
    p.body = "what do ya want for nothing?";
    p.len = strlen(p.body);
    p.gap_after = &gap;
    websubwire_post_headers(&p, &h);
    assert_string_equal(h.v[2], "X-Hub-Signature: sha256=5bdcc146bf60754e6a04"
                                "2426089575c75a003f089d2739839dec58b964ec3843");
    assert_string_equal(h.v[3], "X-Hub-Id: 1700000000123-0");
    assert_string_equal(h.v[4], "X-Hub-Gap: 1700000000000-3");
    assert_string_equal(h.v[5], "Expect:");
    assert_null(h.v[6]);
}

/* websubwire/callback_host: lower-cased, without port or userinfo; an
 * IPv6 literal keeps its brackets; no URL, no host. */
static void
test_callback_host(void **state)
{
    (void)state;
    const char *in[][2] = { { "http://CB.Example.TEST:8080/x?y", "cb.example.test" },
                            { "https://u:p@h.test/", "h.test" },
                            { "http://[::1]:9/cb", "[::1]" },
                            { "http://127.0.0.1/", "127.0.0.1" } };
    for (size_t i = 0; i < 4; i++) {
        char *h = websubwire_callback_host(in[i][0]);
        assert_non_null(h);
        assert_string_equal(h, in[i][1]);
        rs_free(h);
    }
    assert_null(websubwire_callback_host("not a url"));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        { "websubwire/subscribe_form", test_subscribe, NULL, NULL, NULL },
        { "websubwire/form_rules", test_rules, NULL, NULL, NULL },
        { "websubwire/not_a_form", test_not_a_form, NULL, NULL, NULL },
        { "websubwire/publish_form", test_publish, NULL, NULL, NULL },
        { "websubwire/verify_and_denial_urls", test_urls, NULL, NULL, NULL },
        { "websubwire/challenge", test_challenge, NULL, NULL, NULL },
        { "websubwire/signature", test_signature, NULL, NULL, NULL },
        { "websubwire/post_headers", test_post_headers, NULL, NULL, NULL },
        { "websubwire/callback_host", test_callback_host, NULL, NULL, NULL },
    };
    return cmocka_run_group_tests_name("websubwire", tests, NULL, NULL);
}
