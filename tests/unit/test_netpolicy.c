/* test_netpolicy.c - the allow/deny lists for connections made for a
 * subscriber (hub/netpolicy.c). */
#include "testutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <string.h>

#include "netpolicy.h"

/* netpolicy/default_denies_internal: loopback, private, link-local (cloud
 * metadata) and the IPv6 equivalents are refused by default; public
 * addresses are permitted. */
static void
test_default_denies_internal(void **state)
{
    (void)state;
    struct netpolicy *np = netpolicy_new();
    const char *denied[] = { "127.0.0.1", "10.1.2.3", "172.16.0.1", "172.31.255.255",
                             "192.168.1.1", "169.254.169.254", "100.64.0.1",
                             "0.0.0.0", "224.0.0.1", "::1", "fe80::1", "fd00::1",
                             "::ffff:127.0.0.1", "::ffff:10.0.0.1" };
    const char *permitted[] = { "93.184.216.34", "172.32.0.1", "8.8.8.8",
                                "2001:db8::1", "2606:4700::1111" };
    for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++)
        if (netpolicy_permits_str(np, denied[i]))
            fail_msg("%s permitted", denied[i]);
    for (size_t i = 0; i < sizeof(permitted) / sizeof(permitted[0]); i++)
        if (!netpolicy_permits_str(np, permitted[i]))
            fail_msg("%s denied", permitted[i]);
    netpolicy_free(np);
    netpolicy_free(NULL);
}

/* netpolicy/default_edges: each default range holds its first and last
 * address and not the ones just outside it (the prefixes that do not end
 * on a byte: /10, /15, /4, /7, /12 and the /48). */
static void
test_default_edges(void **state)
{
    (void)state;
    struct netpolicy *np = netpolicy_new();
    static const struct {
        const char *addr;
        bool permitted;
    } v[] = {
        { "0.255.255.255", false }, { "1.0.0.0", true },
        { "9.255.255.255", true }, { "10.255.255.255", false }, { "11.0.0.0", true },
        { "100.63.255.255", true }, { "100.64.0.0", false },
        { "100.127.255.255", false }, { "100.128.0.0", true },
        { "126.255.255.255", true }, { "127.255.255.255", false }, { "128.0.0.0", true },
        { "169.253.255.255", true }, { "169.254.0.0", false },
        { "169.254.255.255", false }, { "169.255.0.0", true },
        { "172.15.255.255", true }, { "172.16.0.0", false },
        { "191.255.255.255", true }, { "192.0.0.0", false },
        { "192.0.0.255", false }, { "192.0.1.0", true },
        { "192.167.255.255", true }, { "192.168.255.255", false },
        { "192.169.0.0", true },
        { "198.17.255.255", true }, { "198.18.0.0", false },
        { "198.19.255.255", false }, { "198.20.0.0", true },
        { "223.255.255.255", true }, { "224.0.0.0", false },
        { "239.255.255.255", false }, { "240.0.0.0", false },
        { "255.255.255.255", false },
        { "::", false }, { "::2", false /* IPv4-compatible 0.0.0.2 */ },
        { "::1:0:0:1", true },
        { "64:ff9b:1::", false }, { "64:ff9b:1:ffff:ffff:ffff:ffff:ffff", false },
        { "64:ff9b:2::", true },
        { "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true }, { "fc00::", false },
        { "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false }, { "fe00::", true },
        { "fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true }, { "fe80::", false },
        { "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false }, { "fec0::", true },
        { "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true }, { "ff00::", false },
        { "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false },
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        if (netpolicy_permits_str(np, v[i].addr) != v[i].permitted)
            fail_msg("%s %s", v[i].addr, v[i].permitted ? "denied" : "permitted");
    netpolicy_free(np);
}

/* netpolicy/allow_wins: an allowed range wins over the deny list, only
 * for the addresses it covers (prefix boundaries are exact). */
static void
test_allow_wins(void **state)
{
    (void)state;
    struct netpolicy *np = netpolicy_new();
    assert_int_equal(netpolicy_allow(np, "127.0.0.0/8"), 0);
    assert_int_equal(netpolicy_allow(np, "10.1.0.0/23"), 0);
    assert_true(netpolicy_permits_str(np, "127.0.0.1"));
    assert_true(netpolicy_permits_str(np, "::ffff:127.9.9.9"));
    assert_true(netpolicy_permits_str(np, "10.1.1.255"));
    assert_false(netpolicy_permits_str(np, "10.1.2.0"));
    assert_false(netpolicy_permits_str(np, "::1"));
    netpolicy_free(np);
}

/* netpolicy/deny_added_and_cleared: operators add ranges or drop the
 * defaults; sockaddr and string forms agree. */
static void
test_deny_added_and_cleared(void **state)
{
    (void)state;
    struct netpolicy *np = netpolicy_new();
    assert_int_equal(netpolicy_deny(np, "93.184.216.0/24"), 0);
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    inet_pton(AF_INET, "93.184.216.34", &sin.sin_addr);
    assert_false(netpolicy_permits(np, (struct sockaddr *)&sin));
    netpolicy_clear_denied(np);
    assert_true(netpolicy_permits(np, (struct sockaddr *)&sin));
    assert_true(netpolicy_permits_str(np, "127.0.0.1"));
    struct sockaddr sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_family = AF_UNIX;
    assert_false(netpolicy_permits(np, &sa));
    netpolicy_free(np);
}

/* netpolicy/bad_cidrs: malformed ranges are refused, not half-applied. */
static void
test_bad_cidrs(void **state)
{
    (void)state;
    struct netpolicy *np = netpolicy_new();
    const char *bad[] = { "", "1.2.3", "1.2.3.4/33", "::1/129", "1.2.3.4/",
                          "1.2.3.4/-1", "host.example", "1.2.3.4/8x" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(netpolicy_allow(np, bad[i]), RS_EINVAL);
        assert_int_equal(netpolicy_deny(np, bad[i]), RS_EINVAL);
    }
    assert_false(netpolicy_permits_str(np, "not an address"));
    assert_false(netpolicy_permits_str(np, "1.2.3.4/32"));
    netpolicy_free(np);
}

/* netpolicy/embedded_ipv4_judged: IPv6 addresses that carry an IPv4
 * address (NAT64, IPv4-compatible, 6to4, Teredo's inverted client) are
 * denied when that address is, permitted when it is public; local-use
 * NAT64 is denied (its layout is the operator's); sockaddr and string
 * forms agree; an allowed IPv4 range covers its NAT64 form as it covers
 * its IPv4-mapped form, and an IPv6 rule still applies to the address. */
static void
test_embedded_ipv4_judged(void **state)
{
    (void)state;
    struct netpolicy *np = netpolicy_new();
    const char *denied[] = {
        "64:ff9b::7f00:1", "64:ff9b::127.0.0.1", "64:ff9b::a00:1",
        "64:ff9b::c0a8:101", "64:ff9b::a9fe:a9fe", "64:ff9b::6440:1",
        "64:ff9b::", "::127.0.0.1", "::10.0.0.1", "2002:7f00:1::1",
        "2002:c0a8:101::", "2001:0:4136:e378:8000:63bf:80ff:fffe",
        "64:ff9b:1::808:808", "64:ff9b:1:ffff::1",
    };
    const char *permitted[] = {
        "64:ff9b::808:808", "64:ff9b::93.184.216.34", "::8.8.8.8",
        "2002:808:808::1", "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
        "2001:db8::1", "64:ff9a::7f00:1", "64:ff9b:0:1::7f00:1",
    };
    for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++)
        if (netpolicy_permits_str(np, denied[i]))
            fail_msg("%s permitted", denied[i]);
    for (size_t i = 0; i < sizeof(permitted) / sizeof(permitted[0]); i++)
        if (!netpolicy_permits_str(np, permitted[i]))
            fail_msg("%s denied", permitted[i]);

    struct sockaddr_in6 s6;
    memset(&s6, 0, sizeof(s6));
    s6.sin6_family = AF_INET6;
    inet_pton(AF_INET6, "64:ff9b::7f00:1", &s6.sin6_addr);
    assert_false(netpolicy_permits(np, (struct sockaddr *)&s6));
    inet_pton(AF_INET6, "64:ff9b::808:808", &s6.sin6_addr);
    assert_true(netpolicy_permits(np, (struct sockaddr *)&s6));

    assert_int_equal(netpolicy_allow(np, "127.0.0.0/8"), 0);
    assert_true(netpolicy_permits_str(np, "64:ff9b::7f00:1"));
    assert_true(netpolicy_permits_str(np, "::ffff:127.0.0.1"));
    assert_false(netpolicy_permits_str(np, "64:ff9b::a00:1"));
    assert_int_equal(netpolicy_deny(np, "64:ff9b::/96"), 0);
    assert_false(netpolicy_permits_str(np, "64:ff9b::7f00:1"));
    assert_false(netpolicy_permits_str(np, "64:ff9b::808:808"));
    assert_true(netpolicy_permits_str(np, "::ffff:8.8.8.8"));
    netpolicy_free(np);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_denies_internal),
        cmocka_unit_test(test_default_edges),
        cmocka_unit_test(test_allow_wins),
        cmocka_unit_test(test_deny_added_and_cleared),
        cmocka_unit_test(test_bad_cidrs),
        cmocka_unit_test(test_embedded_ipv4_judged),
    };
    return cmocka_run_group_tests_name("netpolicy", tests, NULL, NULL);
}
