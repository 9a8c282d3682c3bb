/*
 * rs_sock.h - the port a listening socket was given (port 0 asks the kernel
 * for a free one; the daemons report the one they got in their ready files
 * and logs).
 */
#ifndef RS_SOCK_H
#define RS_SOCK_H

#include <arpa/inet.h>
#include <netinet/in.h>
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

#endif
