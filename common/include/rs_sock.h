/*
 * rs_sock.h - the port a listening socket was given (port 0 asks the kernel
 * for a free one; the daemons report the one they got in their ready files
 * and logs), and the URL a local client reaches a listener at.
 */
#ifndef RS_SOCK_H
#define RS_SOCK_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* The local port of fd (IPv4 or IPv6), or -1. */
static inline int
rs_sock_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

/* "http://HOST:PORT" (no slash after) for a listener on host:port: a
 * wildcard or empty host is reached at 127.0.0.1, an IPv6 one in brackets.
 * 0, or -1 when buf is too small. */
static inline int
rs_sock_http_url(const char *host, int port, char *buf, size_t n)
{
    const char *h = host != NULL && host[0] != '\0' &&
                            strcmp(host, "0.0.0.0") != 0 &&
                            strcmp(host, "::") != 0
                        ? host
                        : "127.0.0.1";
    int v6 = strchr(h, ':') != NULL;
    int k = snprintf(buf, n, "http://%s%s%s:%d", v6 ? "[" : "", h,
                     v6 ? "]" : "", port);
    return k >= 0 && (size_t)k < n ? 0 : -1;
}

#endif
