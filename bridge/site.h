/*
 * site.h - rsbridge's HTTP surface, on an evhttp server behind the HTTP
 * guard: for each Source under PUBLIC/s/NAME/ its bridged Source
 * Description (at the prefix and at .well-known/resourcesync) and one
 * bridged Capability List per original one (capabilitylist/K.xml: the
 * original's entries at their original URLs, then the hub's channels for
 * the Source's topics), GET /sources (JSON) and GET /healthz. Documents
 * are written with proto's writer and carry a strong ETag (conditional
 * GETs answer 304). Binding the listener is rsbridge.c's; what the
 * documents hold is the pollers'.
 */
#ifndef BRIDGE_SITE_H
#define BRIDGE_SITE_H

#include <stddef.h>
#include <stdint.h>

struct rs_httpguard;
struct poller;
struct site;

struct site_opts {
    struct rs_httpguard *guard;    /* handlers are installed on it */
    struct poller *const *pollers; /* the Sources, in their order */
    size_t npollers;
};

struct site_stats {
    uint64_t requests, documents, not_modified, not_found, unavailable;
};

struct site *site_new(const struct site_opts *o);   /* NULL: ENOMEM */
/* Unsets the guard's handler. Before evhttp_free. NULL ok. */
void site_free(struct site *s);

void site_stats(const struct site *s, struct site_stats *out);

/* The bridged Source Description and Capability List K of p, written
 * into a new buffer (*out, rs_free; *len). For tests and site.c alike.
 * RS_ENOTFOUND: no such list; RS_EAGAIN: not read yet. */
int site_description(const struct poller *p, char **out, size_t *len);
int site_caplist(const struct poller *p, int64_t k, char **out, size_t *len);

#endif
