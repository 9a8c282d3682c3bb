/*
 * wsclient.h - rssub's WebSocket client seam: one libwebsockets client
 * context on a service thread of its own, and the only place where that
 * thread meets the main libevent loop. It owns connections: connecting,
 * reassembling whole messages, close codes, flow control and idle detection.
 * What a message means, and when to reconnect with which since=, is the
 * caller's business.
 */
#ifndef SUB_WSCLIENT_H
#define SUB_WSCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"

struct event_base;
struct wsclient;
struct wsclient_conn;

/* on_close codes besides the server's own (RFC 6455 section 7.4). */
#define WSCLIENT_CANCELLED 0     /* wsclient_free ended it: do not reconnect */
#define WSCLIENT_NO_STATUS 1005  /* the server's close frame carried no code */
#define WSCLIENT_ABNORMAL 1006   /* connect failure or timeout, connection lost
                                    without a close frame, idle timeout */
#define WSCLIENT_TOO_BIG 1009    /* a message over max_message */
#define WSCLIENT_INTERNAL 1011   /* out of memory on our side */
#define WSCLIENT_REASON_MAX 124  /* a reason is at most 123 bytes + NUL */

struct wsclient_opts {
    struct event_base *base;     /* the main loop: every callback runs on it */
    size_t max_message;          /* a larger message closes the connection
                                    (on_close 1009); 0 = 64 MiB; at most
                                    1 GiB */
    size_t queue_high;           /* bytes of one connection's messages queued
                                    for the main loop above which reading its
                                    socket pauses until the main loop drained
                                    them to half; 0 = 8 MiB */
    unsigned connect_timeout_ms; /* TCP + TLS + upgrade; 0 = 5000 */
    unsigned idle_timeout_ms;    /* nothing received this long (no message, no
                                    pong): the connection is dead (1006,
                                    "idle timeout"). After a third of it in
                                    silence we ping the server ourselves, so a
                                    live but quiet server is never cut. Not
                                    counted while reading is paused. 0 = 75000
                                    (the hub pings every 30 s) */
    const char *user_agent;      /* copied, at most 256 bytes; NULL =
                                    "rssub/VERSION" */
    const char *ca_file;         /* PEM CAs trusted for wss:// besides the
                                    system store; copied; NULL = system only */
};

/* All three run on the main loop thread, never after wsclient_conn_close(c)
 * returned. buf is NUL-terminated (buf[len] == '\0') and valid only during
 * the call; text and binary messages are delivered alike. */
typedef void (*wsclient_open_cb)(void *ud, struct wsclient_conn *c);
typedef void (*wsclient_message_cb)(void *ud, struct wsclient_conn *c,
                                    const char *buf, size_t len);
/* Exactly once per connection that wsclient_connect accepted, whether or not
 * it ever opened, unless wsclient_conn_close came first: code is the
 * server's close code (4001, 1001, ...), 1005 for a close frame without one,
 * 1006 for a failed connect, a timeout or a lost connection, 1009 for a
 * message over max_message, 1011 for out of memory, WSCLIENT_CANCELLED from
 * wsclient_free. reason: the server's text or ours ("connect timeout"),
 * never NULL. c is freed when on_close returns; wsclient_conn_close(c)
 * inside it is a no-op. Note: lws 4.1 reports a server's 1012-1014 (the
 * hub's 1013 "too many channels") as 1002; the server's reason is kept. */
typedef void (*wsclient_close_cb)(void *ud, struct wsclient_conn *c, int code,
                                  const char *reason);

struct wsclient_cbs {
    wsclient_open_cb on_open;          /* may be NULL */
    wsclient_message_cb on_message;    /* may be NULL */
    wsclient_close_cb on_close;        /* may be NULL */
};

struct wsclient_stats {
    size_t queued;       /* message bytes waiting for the main loop now */
    size_t queued_peak;  /* the most that ever waited */
    uint64_t messages;   /* whole messages received */
    uint64_t pauses;     /* times a connection's reading paused (queue_high) */
    unsigned conns;      /* connections not yet freed */
};

/* Creates the context and starts its thread. NULL on failure, with a message
 * in err (when errsz > 0): bad options (no base, a CR/LF in user_agent, an
 * unreadable ca_file), out of memory, no thread. Sets the process-wide lws
 * log hook (lws errors and warnings go to rs_log). Keep one wsclient per
 * process: lws 4.1 leaks the TLS client context of an lws context that was
 * created before another one still alive (a process-wide index is
 * overwritten), about 1 MB each with the system CA store. */
struct wsclient *wsclient_new(const struct wsclient_opts *o, char *err,
                              size_t errsz);

/* Stops the thread after closing every connection (a close frame, 1001,
 * then up to half a second for the handshakes), drops the messages not yet
 * delivered, runs on_close(WSCLIENT_CANCELLED) for every connection that has
 * not had its on_close nor a wsclient_conn_close, and frees everything. Call
 * it from the main loop thread but never from inside a wsclient callback.
 * wsclient_connect from such an on_close fails with RS_ESTATE. NULL is a
 * no-op. */
void wsclient_free(struct wsclient *w);

/* Starts connecting to url (ws:// or wss://HOST[:PORT][/PATH][?QUERY]; a
 * #fragment is dropped; IPv6 literals in brackets) and returns at once;
 * *out (may be NULL) is the handle, valid until on_close returns or
 * wsclient_conn_close. Sends Host (with the port unless the scheme's
 * default), Origin http(s)://HOST[:PORT] (when it fits lws's 128-byte
 * header line) and User-Agent. RS_EINVAL: not such
 * a URL, user info, control characters or spaces, host over 119 or path over
 * 1024 bytes; RS_ENOMEM; RS_ESTATE while wsclient_free runs. On error no
 * callback runs. Host names are resolved by getaddrinfo on the lws thread,
 * which holds up every connection meanwhile and is not bounded by
 * connect_timeout_ms (an IP literal needs no lookup). At most about 250
 * connections at once. */
int wsclient_connect(struct wsclient *w, const char *url,
                     const struct wsclient_cbs *cbs, void *ud,
                     struct wsclient_conn **out) RS_MUST_CHECK;

/* From the main loop, also inside any callback of any connection: no
 * callback for c runs after it returns (events already queued for c are
 * dropped) and c must not be used again. An open connection is closed with
 * 1000 in the background (the server's answer is awaited up to 1 s). NULL
 * is a no-op. */
void wsclient_conn_close(struct wsclient_conn *c);

/* A snapshot; any thread. */
void wsclient_get_stats(struct wsclient *w, struct wsclient_stats *out);

#endif
