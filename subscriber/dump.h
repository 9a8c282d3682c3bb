/*
 * dump.h - a baseline from a Resource Dump, and a catch-up from a Change
 * Dump: the packages its document lists are downloaded in turn to a
 * temporary file (the next while one is written), unpacked through dumpzip
 * (every member verified against the manifest) into a stage of the mirror
 * on as many threads as there are CPUs, published into the mirror and
 * recorded in the ledger. While the threads write, the loop runs on with
 * apply held (apply_hold: no other writer of the mirror), or, when apply
 * has a job in flight, waits for the package. A member that
 * fails is left to what follows a dump (the reconcile after a Resource
 * Dump, the Change Lists after a Change Dump, which fetch whatever the
 * dump did not give); when to use a dump is the caller's decision.
 */
#ifndef SUB_DUMP_H
#define SUB_DUMP_H

#include <stdint.h>

#include "rs_error.h"
#include "rs_time.h"

struct event_base;
struct rs_http;
struct ledger;
struct mirror;
struct pathmap;
struct apply;
struct dump;

struct dump_report {
    uint64_t packages;       /* unpacked */
    uint64_t written;        /* resources written */
    uint64_t skipped;        /* the mirror held a newer copy */
    uint64_t failed;         /* members refused or not verified */
    uint64_t bytes;          /* package bytes downloaded */
    bool fresh;              /* a Resource Dump begun with no resource
                                row in the ledger (not even a deleted
                                one) */
    rs_time_t at;            /* the dump's snapshot time: the earliest at of
                                its document and manifests, or
                                RS_TIME_NONE (also when one of them is
                                beyond our clock: at_future) */
    bool at_future;          /* an at beyond now + RS_TIME_SKEW_US: it
                                cannot be true, so the dump has none */
    bool reread;             /* a package was gone (404, 410): the
                                document was read again and a newer
                                generation's packages unpacked */
    /* Change Dumps only: */
    uint64_t deleted;        /* deletions handed to apply */
    uint64_t superseded;     /* changes with a later one in the package */
    uint64_t older;          /* packages not fetched: they end before since */
    rs_time_t until;         /* the latest end of a package unpacked */
};

struct dump_opts {
    struct event_base *base;
    struct rs_http *http;
    struct ledger *ledger;
    struct mirror *mirror;
    const struct pathmap *pathmap;
    struct apply *apply;     /* its batch carries the ledger writes */
    const char *tmpbase;     /* packages are downloaded to
                                TMPBASE.dump-XXXXXX (not in the mirror):
                                the state's path, whose writer lock makes
                                such names this process's alone; those a
                                crash left are removed by dump_new.
                                Copied */
    uint64_t max_package;    /* bytes; 0 = 16 GiB */
    unsigned threads;        /* members are written on this many threads
                                (each its own reader and mirror handle;
                                the loop's is one); 0: one per CPU this
                                process may use; at most 16 */
    unsigned stall_ms;       /* a package download whose bytes stop
                                coming this long fails (RS_ETIMEDOUT):
                                a stall limit, not a total one (a
                                package may take long); 0: 120 s */
    /* A member not mirrored: refused (its URI is not for this mirror:
     * outside the prefixes, an unsafe path; nothing will fetch it), or
     * not taken (a verification failure: left to what follows). */
    void (*on_problem)(void *ud, const char *uri, const char *why,
                       bool refused);
    /* Exactly once per dump_start that returned 0, from the loop. */
    void (*on_done)(void *ud, int rc, const char *err,
                    const struct dump_report *r);
    void *ud;
};

struct dump *dump_new(const struct dump_opts *o);
/* Abandons a dump under way (no on_done); its temporary file goes. */
void dump_free(struct dump *d);

/* Start from the Resource Dump document at url. RS_ESTATE if busy.
 * A package that is gone (404, 410: the Source made a newer dump and
 * removed the generation read) makes the document be read again, once,
 * after the packages before it are recorded: when it lists other
 * packages they are unpacked (a Resource Dump's all of them, a Change
 * Dump's from since as before), else the dump fails. */
int dump_start(struct dump *d, const char *url) RS_MUST_CHECK;

/* Start from the Change Dump document at url: the packages that end after
 * since, and of their changes those after since. A package is refused
 * (the dump fails, RS_EINVALID) whose manifest's until, or a change's
 * time, is beyond now + RS_TIME_SKEW_US, or a change of which falls
 * outside the manifest's own from and until. RS_ESTATE if busy. */
int dump_start_changes(struct dump *d, const char *url, rs_time_t since)
    RS_MUST_CHECK;

#endif
