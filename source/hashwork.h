/*
 * hashwork.h - rssource's hashing thread: the MD5 and SHA-256 of large
 * files read away from the event loop, so that a file of gigabytes does
 * not hold every GET and every push for the seconds its digests take.
 * Owns the thread, its queue of paths and the hand-back of results to the
 * loop (an eventfd), and the one read-and-digest loop the catalog also
 * uses for small files. Which files come here, and what a result means
 * for the catalog, are catalog.c's and rssource.c's.
 */
#ifndef SOURCE_HASHWORK_H
#define SOURCE_HASHWORK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "rs_error.h"
#include "rs_hash.h"
#include "tree.h"

struct event_base;

struct hashwork_result {
    const char *rel;             /* valid during the call */
    int rc;                      /* 0, RS_EAGAIN (it changed while read),
                                    RS_ENOTFOUND, RS_EIO, RS_ENOMEM */
    struct stat st;              /* the file as read (rc 0) */
    uint8_t md5[16], sha256[32];
};

struct hashwork_opts {
    struct event_base *base;
    const struct tree *tree;     /* files opened beneath its root, on the
                                    thread: never freed while hashwork
                                    lives */
    /* A queued path was read, on the loop thread. */
    void (*on_hashed)(void *ud, const struct hashwork_result *r);
    void *ud;
};

struct hashwork;

/* Starts the thread. NULL with *err. */
struct hashwork *hashwork_new(const struct hashwork_opts *o, const char **err);
/* Stops the thread (a file being read is left after its current chunk)
 * and drops what is queued and what was read but not handed over: the
 * next start's scan finds those files again. NULL ok. */
void hashwork_free(struct hashwork *h);

/* Queue rel, unless it is queued already and not yet begun (a file
 * written in several goes is read once, as it is when its turn comes).
 * 0 or RS_ENOMEM. */
int hashwork_submit(struct hashwork *h, const char *rel) RS_MUST_CHECK;
/* Paths queued or being read. */
size_t hashwork_pending(struct hashwork *h);

/*
 * The MD5 and SHA-256 of fd, opened as *st says, read to its end (each
 * chunk also handed to sink when not NULL; *total gets the bytes read).
 * 0 when all of it was read and it did not change meanwhile (its size and
 * mtime after are st's), RS_EAGAIN when it did, RS_EIO on a read error
 * (errno set), RS_ECANCELED once *stop is true (looked at between chunks;
 * NULL: never), RS_ENOMEM. The hasher (of both algorithms) is reset.
 */
int hashwork_digest_fd(int fd, const struct stat *st,
                       struct rs_hasher *hasher, uint8_t *buf, size_t len,
                       void (*sink)(void *ud, const void *p, size_t n),
                       void *ud, const atomic_bool *stop, uint8_t md5[16],
                       uint8_t sha256[32], uint64_t *total) RS_MUST_CHECK;

#endif
