/*
 * netpolicy.c - CIDR allow/deny lists for outgoing connections made on a
 * subscriber's behalf (netpolicy.h). Ranges are kept as 16-byte IPv6
 * prefixes, IPv4 as IPv4-mapped, so one comparison serves both.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netpolicy.h"
#include "rs_alloc.h"

struct range {
    uint8_t addr[16];
    unsigned bits;      /* prefix length over the 128-bit form */
};

struct rlist {
    struct range *v;
    size_t n, cap;
};

struct netpolicy {
    struct rlist allow, deny;
};

static const char *const default_deny[] = {
    "0.0.0.0/8",        /* "this network" */
    "10.0.0.0/8",       /* private */
    "100.64.0.0/10",    /* carrier-grade NAT */
    "127.0.0.0/8",      /* loopback */
    "169.254.0.0/16",   /* link-local (and cloud metadata services) */
    "172.16.0.0/12",    /* private */
    "192.0.0.0/24",     /* IETF protocol assignments */
    "192.168.0.0/16",   /* private */
    "198.18.0.0/15",    /* benchmarking */
    "224.0.0.0/4",      /* multicast */
    "240.0.0.0/4",      /* reserved, broadcast */
    "::/128",           /* unspecified */
    "::1/128",          /* loopback */
    "64:ff9b:1::/48",   /* local-use NAT64 (RFC 8215): where it carries the
                           IPv4 address depends on the operator's prefix
                           length, so that address cannot be judged */
    "fc00::/7",         /* unique local */
    "fe80::/10",        /* link-local */
    "ff00::/8",         /* multicast */
};

/*
 * IPv6 addresses that carry an IPv4 address a packet may end up at, judged
 * by it as well (an IPv4-mapped address is stored as one already): the
 * well-known NAT64 prefix (RFC 6052), IPv4-compatible addresses (RFC 4291,
 * deprecated), 6to4 (RFC 3056) and Teredo's client (RFC 4380, its bits
 * inverted). Without this, [64:ff9b::7f00:1] would reach 127.0.0.1 through
 * a NAT64 gateway.
 */
struct embed {
    uint8_t prefix[16];
    unsigned bits;
    unsigned at;           /* offset of the 4 bytes */
    uint8_t flip;          /* XORed with them */
};

static const struct embed embeds[] = {
    { { 0x00, 0x64, 0xff, 0x9b }, 96, 12, 0x00 },   /* 64:ff9b::/96 */
    { { 0 }, 96, 12, 0x00 },                        /* ::/96 */
    { { 0x20, 0x02 }, 16, 2, 0x00 },                /* 2002::/16 */
    { { 0x20, 0x01, 0x00, 0x00 }, 32, 12, 0xff },   /* 2001::/32 */
};

static void
to_mapped(const struct in_addr *a4, uint8_t out[16])
{
    memset(out, 0, 10);
    out[10] = 0xff;
    out[11] = 0xff;
    memcpy(out + 12, &a4->s_addr, 4);
}

static int
range_parse(const char *cidr, struct range *r)
{
    char buf[INET6_ADDRSTRLEN + 8];
    if (strlen(cidr) >= sizeof(buf))
        return RS_EINVAL;
    memcpy(buf, cidr, strlen(cidr) + 1);
    char *slash = strchr(buf, '/');
    long bits = -1;
    if (slash != NULL) {
        char *end;
        *slash = '\0';
        bits = strtol(slash + 1, &end, 10);
        if (end == slash + 1 || *end != '\0' || bits < 0)
            return RS_EINVAL;
    }
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, buf, &a4) == 1) {
        if (bits > 32)
            return RS_EINVAL;
        to_mapped(&a4, r->addr);
        r->bits = 96 + (unsigned)(bits < 0 ? 32 : bits);
    } else if (inet_pton(AF_INET6, buf, &a6) == 1) {
        if (bits > 128)
            return RS_EINVAL;
        memcpy(r->addr, &a6, 16);
        r->bits = (unsigned)(bits < 0 ? 128 : bits);
    } else {
        return RS_EINVAL;
    }
    return 0;
}

static bool
range_match(const struct range *r, const uint8_t a[16])
{
    unsigned full = r->bits / 8, rest = r->bits % 8;
    if (memcmp(r->addr, a, full) != 0)
        return false;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (r->addr[full] & mask) == (a[full] & mask);
}

static int
rlist_add(struct rlist *l, const char *cidr)
{
    struct range r;
    if (range_parse(cidr, &r) != 0)
        return RS_EINVAL;
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 16;
        struct range *nv = rs_realloc(l->v, ncap * sizeof(*nv));
        if (nv == NULL)
            return RS_ENOMEM;
        l->v = nv;
        l->cap = ncap;
    }
    l->v[l->n++] = r;
    return 0;
}

static bool
rlist_match(const struct rlist *l, const uint8_t a[16])
{
    for (size_t i = 0; i < l->n; i++)
        if (range_match(&l->v[i], a))
            return true;
    return false;
}

struct netpolicy *
netpolicy_new(void)
{
    struct netpolicy *np = rs_calloc(1, sizeof(*np));
    if (np == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof(default_deny) / sizeof(default_deny[0]); i++) {
        if (rlist_add(&np->deny, default_deny[i]) != 0) {
            netpolicy_free(np);
            return NULL;
        }
    }
    return np;
}

void
netpolicy_free(struct netpolicy *np)
{
    if (np == NULL)
        return;
    rs_free(np->allow.v);
    rs_free(np->deny.v);
    rs_free(np);
}

int
netpolicy_allow(struct netpolicy *np, const char *cidr)
{
    return rlist_add(&np->allow, cidr);
}

int
netpolicy_deny(struct netpolicy *np, const char *cidr)
{
    return rlist_add(&np->deny, cidr);
}

void
netpolicy_clear_denied(struct netpolicy *np)
{
    np->deny.n = 0;
}

static bool
policy_judge_one(const struct netpolicy *np, const uint8_t a[16])
{
    if (rlist_match(&np->allow, a))
        return true;
    return !rlist_match(&np->deny, a);
}

/* An address that carries an IPv4 address is permitted only when both
 * are: the IPv6 ranges of the lists still apply to it. */
static bool
policy_judge(const struct netpolicy *np, const uint8_t a[16])
{
    if (!policy_judge_one(np, a))
        return false;
    for (size_t i = 0; i < sizeof(embeds) / sizeof(embeds[0]); i++) {
        struct range r;
        memcpy(r.addr, embeds[i].prefix, 16);
        r.bits = embeds[i].bits;
        if (!range_match(&r, a))
            continue;
        uint8_t m[16];
        memset(m, 0, 10);
        m[10] = 0xff;
        m[11] = 0xff;
        for (int k = 0; k < 4; k++)
            m[12 + k] = (uint8_t)(a[embeds[i].at + (unsigned)k] ^ embeds[i].flip);
        if (!policy_judge_one(np, m))
            return false;
    }
    return true;
}

bool
netpolicy_permits(const struct netpolicy *np, const struct sockaddr *sa)
{
    uint8_t a[16];
    if (sa->sa_family == AF_INET) {
        to_mapped(&((const struct sockaddr_in *)(const void *)sa)->sin_addr, a);
    } else if (sa->sa_family == AF_INET6) {
        memcpy(a, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
    } else {
        return false;
    }
    return policy_judge(np, a);
}

bool
netpolicy_permits_str(const struct netpolicy *np, const char *addr)
{
    struct range r;
    if (strchr(addr, '/') != NULL || range_parse(addr, &r) != 0)
        return false;
    return policy_judge(np, r.addr);
}
