/* script.c - Lua scripts loaded per connection and called by SHA (script.h). */
#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>

#define RS_LOG_MODULE "script"
#include "rs_alloc.h"
#include "rs_log.h"
#include "script.h"

void
script_init(struct script *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char md[SHA_DIGEST_LENGTH];
        SHA1((const unsigned char *)v[i].src, strlen(v[i].src), md);
        for (int j = 0; j < SHA_DIGEST_LENGTH; j++)
            snprintf(&v[i].sha[j * 2], 3, "%02x", md[j]);
    }
}

static void
on_loaded(void *ud, int rc, const redisReply *r)
{
    (void)ud;
    if (rc == 0 && r->type == REDIS_REPLY_ERROR)
        rs_log(RS_LOG_ERROR, "SCRIPT LOAD: %.*s", (int)r->len, r->str);
}

void
script_load_all(struct rs_redis *r, const struct script *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *argv[3] = { "SCRIPT", "LOAD", v[i].src };
        if (rs_redis_cmd(r, 0, on_loaded, NULL, 3, argv, NULL) != 0)
            rs_log(RS_LOG_WARN, "cannot queue SCRIPT LOAD");
    }
}

int
script_call(struct rs_redis *r, const struct script *sc, int nkeys,
            const char *const *keys, int nargs, const char *const *args,
            const size_t *lens, rs_redis_reply_cb cb, void *ud)
{
    const char *sv[19], **argv = sv;
    size_t sl[19], *alen = sl;
    char nk[16];
    int argc = 3 + nkeys + nargs;
    if (nkeys < 0 || nargs < 0)
        return RS_EINVAL;
    if (argc > 19) {
        argv = rs_calloc((size_t)argc, sizeof(*argv));
        alen = rs_calloc((size_t)argc, sizeof(*alen));
        if (argv == NULL || alen == NULL) {
            rs_free(argv);
            rs_free(alen);
            return RS_ENOMEM;
        }
    }
    snprintf(nk, sizeof(nk), "%d", nkeys);
    argv[0] = "EVALSHA";
    argv[1] = sc->sha;
    argv[2] = nk;
    for (int i = 0; i < 3; i++)
        alen[i] = strlen(argv[i]);
    for (int i = 0; i < nkeys; i++) {
        argv[3 + i] = keys[i];
        alen[3 + i] = strlen(keys[i]);
    }
    for (int i = 0; i < nargs; i++) {
        argv[3 + nkeys + i] = args[i];
        alen[3 + nkeys + i] = lens != NULL ? lens[i] : strlen(args[i]);
    }
    int rc = rs_redis_cmd(r, 0, cb, ud, argc, argv, alen);
    if (argv != sv) {
        rs_free(argv);
        rs_free(alen);
    }
    return rc;
}
