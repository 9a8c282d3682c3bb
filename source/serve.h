/*
 * serve.h - rssource's HTTP handlers on evhttp: the ResourceSync documents
 * (Source Description, Capability List, Resource List snapshots, Change
 * Lists and their index) and the resources themselves (GET and HEAD,
 * Content-Type, Last-Modified, ETag, conditional requests, the
 * rel="resourcesync" Link header). Only regular files that tree.c allows
 * are served; directories are never listed. With a read token, every one
 * of them needs it (Authorization: Bearer). Binding the listener and the
 * loop are rssource.c's business.
 */
#ifndef SOURCE_SERVE_H
#define SOURCE_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "docs.h"
#include "changedump.h"
#include "dumpw.h"
#include "snapshot.h"
#include "state.h"
#include "tree.h"

struct rs_httpguard;

struct serve_opts {
    struct rs_httpguard *guard;    /* the guarded server: handlers are
                                      installed on it */
    struct tree *tree;
    const struct docs *docs;
    struct state *st;
    struct snapshot *snap;
    /* A stale Resource List is rebuilt when asked for, at most this often
     * (ms); meanwhile the previous snapshot is served. */
    int64_t rl_refresh_ms;
    /* The notification channels to advertise (NULL: none). */
    const struct docs_channel *(*channels)(void *ud, size_t *n);
    void *channels_ud;
    /* Every document and file needs "Authorization: Bearer TOKEN": 401
     * (WWW-Authenticate: Bearer) without one, 403 with another. Only its
     * SHA-256 is kept. NULL: open. */
    const char *read_token;
    /* The Resource Dump's document and packages (BASE/resourcesync/
     * resourcedump*), or NULL: none. */
    const struct dumpw *dump;
    /* The Change Dump's document, packages and manifests (BASE/
     * resourcesync/changedump*), or NULL: none. */
    const struct changedump *cdump;
    /* Every reply, once sent: method, request URI, status, body bytes
     * (0 for HEAD and 304). May be NULL. */
    void (*on_access)(void *ud, const char *method, const char *uri,
                      int status, size_t bytes);
    void *access_ud;
};

struct serve_stats {
    uint64_t requests;
    uint64_t resources;            /* 200 with a body or HEAD */
    uint64_t not_modified;         /* 304 */
    uint64_t documents;
    uint64_t not_found;
    uint64_t unauthorized;         /* 401: no bearer token */
    uint64_t forbidden;            /* 403: another token */
    uint64_t bytes;                /* body bytes of every reply */
};

struct serve;

struct serve *serve_new(const struct serve_opts *o);
/* Requests waiting for a Resource List get 503; the guard's handler is
 * unset. Call before evhttp_free. NULL ok. */
void serve_free(struct serve *s);

/* Tell the server a snapshot build ended (snapshot's on_done). */
void serve_snapshot_done(struct serve *s, int rc);
/* While held, the current Resource List is served as it is, even when it
 * misses changes: rssource's start-up rescan has not found all that
 * changed while it was stopped, and a list built then would state at its
 * `at` a tree half of which is from before. */
void serve_hold_resourcelist(struct serve *s, bool hold);

const struct serve_stats *serve_stats(const struct serve *s);

#endif
