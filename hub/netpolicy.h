/*
 * netpolicy.h - which network addresses the hub may connect to on behalf
 * of a subscriber (WebSub callbacks, publish-ping fetches): an allow list
 * and a deny list of CIDR ranges. An address in an allowed range is
 * permitted; otherwise one in a denied range is refused; anything else is
 * permitted. The default deny list covers loopback, private, link-local,
 * carrier-grade NAT, multicast and unspecified ranges, so the hub cannot
 * be used to reach internal services unless the operator allows it. An
 * IPv6 address that carries an IPv4 address (IPv4-mapped, NAT64 64:ff9b::/96,
 * IPv4-compatible, 6to4, Teredo) is judged by that IPv4 address too.
 */
#ifndef HUB_NETPOLICY_H
#define HUB_NETPOLICY_H

#include <stdbool.h>
#include <sys/socket.h>

#include "rs_error.h"

struct netpolicy;

/* A policy with the default deny list and an empty allow list. */
struct netpolicy *netpolicy_new(void);
void netpolicy_free(struct netpolicy *np);

/* Add "ADDR/BITS" or a bare address (a /32 or /128) to a list. RS_EINVAL
 * for anything else. */
int netpolicy_allow(struct netpolicy *np, const char *cidr) RS_MUST_CHECK;
int netpolicy_deny(struct netpolicy *np, const char *cidr) RS_MUST_CHECK;

/* Drop the default deny list (an operator who wants none). */
void netpolicy_clear_denied(struct netpolicy *np);

/* May we connect to sa? IPv4-mapped IPv6 addresses are judged as IPv4;
 * other IPv6 forms that carry an IPv4 address are permitted only when both
 * it and the IPv4 address are. Families other than IPv4/IPv6 are refused. */
bool netpolicy_permits(const struct netpolicy *np, const struct sockaddr *sa);

/* Same for a literal address string; false if it is not one. */
bool netpolicy_permits_str(const struct netpolicy *np, const char *addr);

#endif
