/*
 * websub.h - the WebSub requests of POST /hub (docs/protocol.md 5):
 * subscribe and unsubscribe (address policy, caps, verification of intent,
 * activation in the store), denial notices, and publish pings (fetch the
 * topic, append what came back). Delivery itself is deliver.c's.
 */
#ifndef HUB_WEBSUB_H
#define HUB_WEBSUB_H

#include <stdint.h>

struct hub;
struct evhttp_request;

struct websub_stats {
    uint64_t requests;            /* form-encoded POSTs */
    uint64_t verified;            /* intents confirmed */
    uint64_t verify_failed;       /* refused, wrong echo, unreachable */
    uint64_t denied;              /* 4xx answers to subscribe requests */
    uint64_t pings;               /* publish pings fetched and appended */
    uint64_t ping_failed;
};

struct websub;

struct websub *websub_new(struct hub *h);
/* Pending verifications hold no callbacks of their own once the HTTP
 * client and Redis are freed; free this after both. */
void websub_free(struct websub *w);

void websub_handle(struct websub *w, struct evhttp_request *req);
void websub_stats(const struct websub *w, struct websub_stats *out);

#endif
