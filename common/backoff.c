/*
 * backoff.c - exponential backoff with a cap and jitter (rs_backoff.h).
 * The generator is xorshift64 (Marsaglia 2003): jitter only has to keep
 * retriers that failed together from coming back together, not to be
 * unpredictable. Timers and failure counts are the callers'.
 */
#include "rs_backoff.h"

/* Any non-zero state will do; xorshift64 stays at 0 for ever. */
#define BACKOFF_SEED_ZERO 0x9e3779b97f4a7c15ull

void
rs_backoff_seed(struct rs_backoff *b, uint64_t seed)
{
    b->rng = seed != 0 ? seed : BACKOFF_SEED_ZERO;
}

uint64_t
rs_backoff_rand(struct rs_backoff *b)
{
    uint64_t x = b->rng != 0 ? b->rng : BACKOFF_SEED_ZERO;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b->rng = x;
    return x;
}

static uint64_t
backoff_cap(const struct rs_backoff *b)
{
    return b->max_ms != 0 ? b->max_ms : UINT64_MAX;
}

uint64_t
rs_backoff_base(const struct rs_backoff *b, unsigned n)
{
    uint64_t cap = backoff_cap(b), base = b->first_ms;

    for (unsigned i = 1; i < n && base < cap; i++)
        base = base > cap / 2 ? cap : base * 2;
    return base < cap ? base : cap;
}

/* floor(v * pct / 100) without overflowing for any v (pct <= 100). */
static uint64_t
backoff_share(uint64_t v, unsigned pct)
{
    if (pct > 100)
        pct = 100;
    return v / 100 * pct + v % 100 * pct / 100;
}

uint64_t
rs_backoff_delay(struct rs_backoff *b, unsigned n)
{
    uint64_t base = rs_backoff_base(b, n);
    uint64_t lo = base - backoff_share(base, b->below_pct);
    uint64_t up = backoff_share(base, b->above_pct);
    uint64_t hi = up > UINT64_MAX - base ? UINT64_MAX : base + up;
    uint64_t d = lo;

    if (hi > lo) {
        uint64_t span = hi - lo;
        d = lo + (span == UINT64_MAX ? rs_backoff_rand(b)
                                     : rs_backoff_rand(b) % (span + 1));
    }
    if (b->clamp) {
        uint64_t cap = backoff_cap(b);
        if (d < b->first_ms)
            d = b->first_ms;
        if (d > cap)
            d = cap;   /* also when the cap is under the first delay */
    }
    return d;
}
