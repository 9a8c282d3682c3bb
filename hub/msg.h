/*
 * msg.h - one accepted notification as the WebSocket side sends it: an
 * immutable, reference-counted buffer holding a complete, pre-encoded
 * WebSocket text frame (header + the document with the hub id annotation),
 * built once and shared by every subscriber on every thread. Also the hub
 * id type (a Redis Stream id). It owns no I/O.
 */
#ifndef HUB_MSG_H
#define HUB_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rs_error.h"
#include "rs_seam.h"

/* A Redis Stream id, MS-SEQ. {0,0} sorts first and means "before all". */
struct msg_id {
    uint64_t ms;
    uint64_t seq;
};

#define MSG_ID_BUFSZ 44   /* "18446744073709551615-18446744073709551615" + NUL */

/* Parse "MS-SEQ" or "MS" (seq 0). RS_EINVAL for anything else. */
int msg_id_parse(const char *s, size_t len, struct msg_id *out) RS_MUST_CHECK;
size_t msg_id_format(struct msg_id id, char *buf);   /* buf: MSG_ID_BUFSZ */
int msg_id_cmp(struct msg_id a, struct msg_id b);    /* <0, 0, >0 */
bool msg_id_is_zero(struct msg_id id);

/* Written once by msg_new on the main loop, then only read, by every
 * service thread it is handed to (rs_seam.h: published by the push). */
struct msg {
    struct rs_seam_ref ref;
    struct msg_id id;
    unsigned chan;           /* channel index (fanout.h) */
    size_t frame_len;        /* bytes of frame[] to send */
    unsigned char *frame;    /* points into the same allocation, after
                                LWS_PRE bytes of headroom */
};

/*
 * Build the frame for document body (len bytes) with id: the hub
 * annotation (docs/protocol.md 2) is inserted after the root element's
 * name; a body with no XML root element is framed unchanged. Returns a
 * message holding one reference, or NULL with *rc = RS_ENOMEM.
 */
struct msg *msg_new(struct msg_id id, unsigned chan, const char *body,
                    size_t len, int *rc);

/* Reference counting is thread-safe (rs_seam_ref); the last unref frees.
 * unref(NULL) is a no-op. */
struct msg *msg_ref(struct msg *m);
void msg_unref(struct msg *m);

/* Offset just after the root element's name in an XML document (skipping a
 * BOM, the XML declaration, comments, processing instructions and white
 * space), or RS_EINVAL when there is none. Exposed for tests. */
int msg_root_name_end(const char *doc, size_t len, size_t *off) RS_MUST_CHECK;

#endif
