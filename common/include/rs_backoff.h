/*
 * rs_backoff.h - the one retry schedule of every daemon and tool: a delay
 * that doubles with each consecutive failure up to a cap, with optional
 * jitter drawn from a seeded generator. Pure computation: no clock, no
 * I/O, no global state. The caller keeps the failure count (it knows what
 * a success is) and the timer; the policy and the generator are here, so
 * one policy can serve many retriers (each subscription of the hub, say).
 */
#ifndef RS_BACKOFF_H
#define RS_BACKOFF_H

#include <stdint.h>

/*
 * The delay after n consecutive failures (n >= 1) is drawn uniformly from
 *   [base - base * below_pct / 100, base + base * above_pct / 100]
 * (whole milliseconds, each bound rounded towards base), where
 *   base = first_ms * 2^(n - 1), at most max_ms.
 * With clamp the drawn delay is then held within [first_ms, max_ms] (jitter
 * never takes it past the cap nor under the first delay; when max_ms is
 * below first_ms, every delay is max_ms). below_pct and
 * above_pct of 0 mean no jitter: the delay is base. Fill the fields, then
 * seed; the struct is plain data (copy it, embed it).
 */
struct rs_backoff {
    uint64_t first_ms;          /* the delay after the first failure */
    uint64_t max_ms;            /* no base is larger (below first_ms: every
                                   base is max_ms); 0: no cap */
    unsigned below_pct;         /* 0..100: how far under base a delay may be */
    unsigned above_pct;         /* 0..100: how far over it */
    int clamp;                  /* non-zero: delays within [first, max] */
    uint64_t rng;               /* xorshift64 state; set by rs_backoff_seed */
};

/* Seed the generator (any value; 0 is replaced by a fixed non-zero one).
 * Two policies seeded alike draw the same delays: seed from something
 * that differs between processes (time, pid) where that matters. */
void rs_backoff_seed(struct rs_backoff *b, uint64_t seed);

/* base for n consecutive failures (n 0 and 1: the first delay), without
 * jitter. */
uint64_t rs_backoff_base(const struct rs_backoff *b, unsigned n);

/* The delay to wait after n consecutive failures: base with its jitter
 * drawn (advances the generator when there is jitter to draw). */
uint64_t rs_backoff_delay(struct rs_backoff *b, unsigned n);

/* The next value of the generator: for the odd caller that needs its own
 * draw from the same seeded stream. */
uint64_t rs_backoff_rand(struct rs_backoff *b);

#endif
