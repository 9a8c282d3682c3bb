/*
 * discovery.h - finding a Source's Capability Lists and what each offers
 * (docs/protocol.md; ResourceSync section 10): from a Capability List, a
 * Source Description, a site root (its /.well-known/resourcesync and
 * robots.txt), an HTML page's <link rel="resourcesync">, any resource's
 * Link header, or a list pointing rel="up". Asynchronous on rs_http; what
 * to do with the channels found is the caller's.
 */
#ifndef SUB_DISCOVERY_H
#define SUB_DISCOVERY_H

#include <stdbool.h>
#include <stddef.h>

#include "rs_error.h"

struct event_base;
struct rs_http;
struct discovery;

enum { DISCOVERY_CHANGE = 0, DISCOVERY_FRAMEWORK = 1 };

/* What one Capability List offers; NULL when absent. URLs are absolute. */
struct discovery_set {
    char *caplist;
    char *resourcelist;      /* a Resource List or its index */
    char *resourcedump;
    char *changelist;        /* a Change List or its index */
    char *changedump;
    char *ws[2];             /* WebSocket channel (ws:// or wss://) */
    char *topic[2];          /* WebSub topic ... */
    char *hub[2];            /* ... and its hub */
};

struct discovery_result {
    char *description;       /* the Source Description read, or NULL */
    struct discovery_set *sets;
    size_t nsets;
};

/* Runs once per discovery_start that returned 0, from the loop. rc == 0:
 * res (at least one set) now belongs to the callee (discovery_result_free).
 * rc != 0: res is NULL and err says what was tried and why it failed. */
typedef void (*discovery_done_cb)(void *ud, int rc, const char *err,
                                  struct discovery_result *res);

struct discovery *discovery_new(struct event_base *base, struct rs_http *http,
                                discovery_done_cb cb, void *ud);
/* Abandons a discovery under way (no callback). NULL ok. Not from inside
 * the callback. */
void discovery_free(struct discovery *d);

/* Start from url. RS_ESTATE if one is under way, RS_EINVAL, RS_ENOMEM. */
int discovery_start(struct discovery *d, const char *url) RS_MUST_CHECK;

void discovery_result_free(struct discovery_result *r);

/* One Capability List document (read from url) into *s, which it then
 * owns (discovery_set_clear); entries that cannot be used are skipped.
 * RS_ENOMEM leaves *s empty. */
struct rs_doc;
int discovery_set_read(struct discovery_set *s, const char *url,
                       const struct rs_doc *doc) RS_MUST_CHECK;
/* A deep copy of src into *dst (its own strings). RS_ENOMEM leaves *dst
 * empty. */
int discovery_set_copy(struct discovery_set *dst,
                       const struct discovery_set *src) RS_MUST_CHECK;
/* Frees what *s holds and zeroes it. NULL ok. */
void discovery_set_clear(struct discovery_set *s);
/* Do a and b offer the same documents and channels? */
bool discovery_set_same(const struct discovery_set *a,
                        const struct discovery_set *b);

#endif
