/*
 * ingest.h - what Sources send rshub: publishes (POST /hub with a
 * notification, persisted in the backlog before the 202), and topic
 * registrations (POST /topics, docs/protocol.md 6). WebSub's form requests
 * on POST /hub are handed to websub.h.
 */
#ifndef HUB_INGEST_H
#define HUB_INGEST_H

struct hub;
struct evhttp_request;

/* POST /hub */
void ingest_handle(struct hub *h, struct evhttp_request *req);

/* POST /topics: register (open mode) or look up a topic before any
 * publish (docs/source.md 8). */
void ingest_register(struct hub *h, struct evhttp_request *req);

#endif
