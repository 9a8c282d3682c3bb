/*
 * script.h - Lua scripts on a Redis link: each script's SHA1 computed once,
 * loaded on every (re)connection before anything else is sent (so EVALSHA
 * never meets an empty script cache on that connection), and called by
 * SHA with binary-safe keys and arguments. Shared by the hub's stores.
 */
#ifndef HUB_SCRIPT_H
#define HUB_SCRIPT_H

#include <stddef.h>

#include "rs_redis.h"

struct script {
    const char *src;
    char sha[41];
};

/* Compute the SHA of each of n scripts. */
void script_init(struct script *v, size_t n);

/* Queue SCRIPT LOAD of each script on r (call from the link's READY). */
void script_load_all(struct rs_redis *r, const struct script *v, size_t n);

/* EVALSHA sc with nkeys keys then nargs arguments (lens NULL for C
 * strings). Contract of rs_redis_cmd. */
int script_call(struct rs_redis *r, const struct script *sc, int nkeys,
                const char *const *keys, int nargs, const char *const *args,
                const size_t *lens, rs_redis_reply_cb cb, void *ud) RS_MUST_CHECK;

#endif
