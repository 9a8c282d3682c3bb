/*
 * wsclient.h - rssub's WebSocket client seam: a libwebsockets client context
 * on its own thread, the only place that thread meets the main libevent loop.
 * It owns connecting, whole messages, close codes, flow control and idle
 * detection; what a message means and when to reconnect is the caller's.
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
#define WSCLIENT_ABNORMAL 1006   /* connect failed or timed out, connection
                                    lost without a close frame, idle timeout */
#define WSCLIENT_TOO_BIG 1009    /* a message over max_message */
#define WSCLIENT_INTERNAL 1011   /* out of memory on our side */
#define WSCLIENT_REASON_MAX 124  /* a reason: at most 123 bytes + NUL */
/* An upgrade answered 401 or 403 (a hub refusing our credential) closes
 * with that HTTP status as its code, apart from every WebSocket close
 * code; any other answer but 101 is WSCLIENT_ABNORMAL. */
#define WSCLIENT_UNAUTHORIZED 401
#define WSCLIENT_FORBIDDEN 403

struct wsclient_opts {
    struct event_base *base;     /* the main loop: every callback runs on it */
    size_t max_message;          /* larger: closed, 1009; 0 = 64 MiB; <=1 GiB */
    size_t queue_high;           /* a connection's message bytes waiting for
                                    the main loop above which reading pauses
                                    until drained to half; 0 = 8 MiB */
    unsigned connect_timeout_ms; /* TCP + TLS + upgrade; 0 = 5000 */
    unsigned idle_timeout_ms;    /* nothing received this long (message or
                                    pong): dead, 1006 "idle timeout". After a
                                    third of it in silence we ping, so a quiet
                                    live server is never cut; not counted
                                    while reading is paused. 0 = 75000 */
    const char *user_agent;      /* copied, <= 256 bytes; NULL = rssub/VER */
    const char *ca_file;         /* PEM CAs for wss:// besides the system
                                    store; copied; NULL = system only */
    const char *client_cert;     /* PEM certificate for TLS client auth on
                                    wss:// (and its key; NULL: in the
                                    certificate); copied */
    const char *client_key;
    const char *bearer;          /* sent as "Authorization: Bearer X" on
                                    every upgrade request (every connection
                                    of this client goes to a hub; lws
                                    follows no redirect); copied; <= 4096
                                    bytes, no white space; NULL: none */
};

/* All three run on the main loop thread, never after wsclient_conn_close(c)
 * returned. buf is NUL-terminated (buf[len] == '\0') and valid only during
 * the call; text and binary messages are delivered alike. */
typedef void (*wsclient_open_cb)(void *ud, struct wsclient_conn *c);
typedef void (*wsclient_message_cb)(void *ud, struct wsclient_conn *c,
                                    const char *buf, size_t len);
/* Exactly once per connection wsclient_connect accepted, opened or not,
 * unless wsclient_conn_close came first. code: the server's (4001, 1001...),
 * or one of WSCLIENT_* (WSCLIENT_UNAUTHORIZED, _FORBIDDEN: the upgrade was
 * refused with that HTTP status); reason: the server's text or ours ("connect
 * timeout"), never NULL. c is freed when on_close returns (conn_close on it
 * inside is a no-op). lws 4.1 reports a server's 1012-1014 (the hub's 1013
 * "too many channels") as 1002; the server's reason is kept. */
typedef void (*wsclient_close_cb)(void *ud, struct wsclient_conn *c, int code,
                                  const char *reason);

struct wsclient_cbs {                  /* each may be NULL */
    wsclient_open_cb on_open;
    wsclient_message_cb on_message;
    wsclient_close_cb on_close;
};

struct wsclient_stats {
    size_t queued;       /* message bytes waiting for the main loop now */
    size_t queued_peak;  /* the most that ever waited */
    uint64_t messages;   /* whole messages received */
    uint64_t pauses;     /* times a connection's reading paused (queue_high) */
    unsigned conns;      /* connections not yet freed */
};

/* Creates the context and starts its thread. NULL on failure, with a message
 * in err (if errsz > 0): bad options, out of memory, no thread. Sets lws's
 * process-wide log hook (its errors and warnings go to rs_log). Keep one
 * wsclient per process: lws 4.1 leaks the TLS context (~1 MB with the CA
 * store) of an lws context created before another one still alive. */
struct wsclient *wsclient_new(const struct wsclient_opts *o, char *err,
                              size_t errsz);

/* Closes every connection (1001, up to 0.5 s for the handshakes), stops the
 * thread, drops undelivered messages, runs on_close(WSCLIENT_CANCELLED) for
 * each connection not yet closed for the user, frees all. From the main
 * loop thread, never inside a wsclient callback; wsclient_connect from such
 * an on_close fails with RS_ESTATE. NULL is a no-op. */
void wsclient_free(struct wsclient *w);

/* Starts connecting to url (ws:// or wss://HOST[:PORT][/PATH][?QUERY],
 * #fragment dropped, IPv6 in brackets); returns at once. *out (may be NULL):
 * the handle, valid until on_close returns or wsclient_conn_close. Sends
 * Host (port unless default), Origin http(s)://HOST[:PORT] (if it fits lws's
 * 128-byte line), User-Agent. RS_EINVAL: not such a URL, user info, control
 * characters or spaces, host over 119 or path over 1024 bytes; RS_ENOMEM;
 * RS_ESTATE during wsclient_free; then no callback runs. Host names are
 * resolved on the lws thread (blocking it, outside connect_timeout_ms),
 * afresh for each connection. A name with several addresses (hub nodes
 * behind one name) is walked: a connection goes to the address the last
 * one to that name went to, or to the next one when that one failed to
 * open, was lost without a close frame or was closed 1001 (going away).
 * Host header, TLS SNI and certificate check use the name. About 250
 * connections at most. */
int wsclient_connect(struct wsclient *w, const char *url,
                     const struct wsclient_cbs *cbs, void *ud,
                     struct wsclient_conn **out) RS_MUST_CHECK;

/* Main loop, also inside any callback: no callback for c runs after it
 * returns (queued events are dropped); c must not be used again. An open
 * connection is closed with 1000 in the background (answer awaited up to
 * 1 s). NULL is a no-op. */
void wsclient_conn_close(struct wsclient_conn *c);

/* The numeric address c connects or connected to ("127.0.0.2", "::1"),
 * NULL before one was chosen (or if resolving failed). From on_open and
 * on_close on; valid as long as c. */
const char *wsclient_conn_peer(const struct wsclient_conn *c);

/* Did the hub's 101 say it read our since= as "now" (X-Hub-Since: now,
 * docs/protocol.md 6): it holds nothing up to it, so whether anything
 * after it is missing cannot be told? From on_open on. */
bool wsclient_conn_since_now(const struct wsclient_conn *c);

/* A snapshot; any thread. */
void wsclient_get_stats(struct wsclient *w, struct wsclient_stats *out);

#endif
