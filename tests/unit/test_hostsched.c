/* test_hostsched.c - per-host admission of the hub's POSTs
 * (hub/hostsched.c): the per-host cap and the suspects' share of it, who
 * is admitted when a slot frees (healthy first, FIFO in each class), a
 * declined admission passing the slot on, cancel, leave and return, and
 * what makes two callbacks one host. */
#include "testutil.h"

#include <stdbool.h>
#include <string.h>

#include "hostsched.h"

#define NT 16

/* The tickets of one test and the order admissions came in. */
struct fx {
    struct hostsched *hs;
    struct hostsched_ticket t[NT];
    int admitted[4 * NT];
    int nadmitted;
    bool decline[NT];         /* the admit callback declines these */
};

static bool
on_admit(void *ud, struct hostsched_ticket *t)
{
    struct fx *f = ud;
    int i = (int)(t - f->t);
    assert_int_equal(t->state, HOSTSCHED_HOLDING);
    f->admitted[f->nadmitted++] = i;
    return !f->decline[i];
}

static void
fx_init(struct fx *f, unsigned conns, const char *url)
{
    memset(f, 0, sizeof(*f));
    f->hs = hostsched_new(conns, on_admit);
    assert_non_null(f->hs);
    for (int i = 0; i < NT; i++) {
        assert_int_equal(hostsched_join(f->hs, &f->t[i], url, f), 0);
        assert_int_equal(f->t[i].state, HOSTSCHED_OUT);
    }
}

static void
fx_cleanup(struct fx *f)
{
    for (int i = 0; i < NT; i++)
        hostsched_leave(f->hs, &f->t[i]);
    assert_int_equal(hostsched_hosts(f->hs), 0);
    hostsched_free(f->hs);
}

/* hostsched/caps: 8 slots a host, suspects hold at most 6 of them; a
 * ticket over a cap waits; the counts follow. Small caps keep one slot
 * free of suspects when they can. */
static void
test_caps(void **state)
{
    (void)state;
    struct fx f;
    fx_init(&f, 0, "http://a.test/cb");
    assert_int_equal(hostsched_conns(f.hs), 8);
    assert_int_equal(hostsched_suspect_cap(f.hs), 6);
    for (int i = 0; i < 6; i++)
        assert_true(hostsched_acquire(f.hs, &f.t[i], true));
    assert_false(hostsched_acquire(f.hs, &f.t[6], true));   /* suspect cap */
    assert_int_equal(f.t[6].state, HOSTSCHED_WAITING);
    assert_true(hostsched_acquire(f.hs, &f.t[7], false));
    assert_true(hostsched_acquire(f.hs, &f.t[8], false));
    assert_false(hostsched_acquire(f.hs, &f.t[9], false));  /* host full */
    assert_int_equal(hostsched_inflight(&f.t[0]), 8);
    assert_int_equal(hostsched_suspect_inflight(&f.t[0]), 6);
    /* asking again changes nothing */
    assert_false(hostsched_acquire(f.hs, &f.t[9], false));
    assert_true(hostsched_acquire(f.hs, &f.t[0], false));
    assert_int_equal(hostsched_inflight(&f.t[0]), 8);
    assert_int_equal(f.nadmitted, 0);
    fx_cleanup(&f);

    struct hostsched *one = hostsched_new(1, on_admit), *two = hostsched_new(2, on_admit),
                     *twelve = hostsched_new(12, on_admit);
    assert_int_equal(hostsched_suspect_cap(one), 1);
    assert_int_equal(hostsched_suspect_cap(two), 1);
    assert_int_equal(hostsched_suspect_cap(twelve), 9);
    hostsched_free(one);
    hostsched_free(two);
    hostsched_free(twelve);
    hostsched_free(NULL);
}

/* hostsched/healthy_first: when slots free, those waiting are admitted
 * healthy first, each class in the order it came, suspects only while
 * under their cap. */
static void
test_healthy_first(void **state)
{
    (void)state;
    struct fx f;
    fx_init(&f, 4, "http://a.test/cb");   /* suspect cap 3 */
    for (int i = 0; i < 4; i++)
        assert_true(hostsched_acquire(f.hs, &f.t[i], false));
    assert_false(hostsched_acquire(f.hs, &f.t[4], true));
    assert_false(hostsched_acquire(f.hs, &f.t[5], false));
    assert_false(hostsched_acquire(f.hs, &f.t[6], true));
    assert_false(hostsched_acquire(f.hs, &f.t[7], false));
    hostsched_release(f.hs, &f.t[0]);
    assert_int_equal(f.nadmitted, 1);
    assert_int_equal(f.admitted[0], 5);
    hostsched_release(f.hs, &f.t[1]);
    assert_int_equal(f.admitted[1], 7);
    hostsched_release(f.hs, &f.t[2]);
    hostsched_release(f.hs, &f.t[3]);
    assert_int_equal(f.nadmitted, 4);
    assert_int_equal(f.admitted[2], 4);
    assert_int_equal(f.admitted[3], 6);
    assert_int_equal(f.t[0].state, HOSTSCHED_OUT);
    assert_int_equal(f.t[6].state, HOSTSCHED_HOLDING);
    assert_int_equal(hostsched_suspect_inflight(&f.t[0]), 2);
    /* a third suspect fits (cap 3), a fourth waits though a slot is free */
    hostsched_release(f.hs, &f.t[5]);
    assert_true(hostsched_acquire(f.hs, &f.t[8], true));
    hostsched_release(f.hs, &f.t[7]);
    assert_false(hostsched_acquire(f.hs, &f.t[9], true));
    assert_int_equal(hostsched_inflight(&f.t[0]), 3);
    /* a suspect slot freeing lets it in */
    hostsched_release(f.hs, &f.t[4]);
    assert_int_equal(f.admitted[f.nadmitted - 1], 9);
    fx_cleanup(&f);
}

/* hostsched/decline_passes_on: an admitted ticket that declines is OUT and
 * its slot goes to the next one waiting, in the same release. */
static void
test_decline(void **state)
{
    (void)state;
    struct fx f;
    fx_init(&f, 1, "http://a.test/cb");
    assert_true(hostsched_acquire(f.hs, &f.t[0], false));
    assert_false(hostsched_acquire(f.hs, &f.t[1], false));
    assert_false(hostsched_acquire(f.hs, &f.t[2], false));
    f.decline[1] = true;
    hostsched_release(f.hs, &f.t[0]);
    assert_int_equal(f.nadmitted, 2);
    assert_int_equal(f.admitted[0], 1);
    assert_int_equal(f.admitted[1], 2);
    assert_int_equal(f.t[1].state, HOSTSCHED_OUT);
    assert_int_equal(f.t[2].state, HOSTSCHED_HOLDING);
    assert_int_equal(hostsched_inflight(&f.t[2]), 1);
    fx_cleanup(&f);
}

/* hostsched/cancel_leave_return: a cancelled ticket is never admitted; a
 * returned slot admits no one (the next release does); leaving while
 * holding gives the slot back; the host goes with its last ticket. */
static void
test_cancel_leave_return(void **state)
{
    (void)state;
    struct fx f;
    fx_init(&f, 1, "http://a.test/cb");
    assert_true(hostsched_acquire(f.hs, &f.t[0], false));
    assert_false(hostsched_acquire(f.hs, &f.t[1], false));
    assert_false(hostsched_acquire(f.hs, &f.t[2], false));
    assert_false(hostsched_acquire(f.hs, &f.t[3], false));
    hostsched_cancel(f.hs, &f.t[2]);
    assert_int_equal(f.t[2].state, HOSTSCHED_OUT);
    hostsched_cancel(f.hs, &f.t[2]);            /* no-op */
    hostsched_return(f.hs, &f.t[0]);
    assert_int_equal(f.nadmitted, 0);
    assert_int_equal(hostsched_inflight(&f.t[0]), 0);
    assert_true(hostsched_acquire(f.hs, &f.t[0], false));
    hostsched_release(f.hs, &f.t[0]);
    assert_int_equal(f.nadmitted, 1);
    assert_int_equal(f.admitted[0], 1);
    hostsched_leave(f.hs, &f.t[1]);             /* holding: slot back */
    assert_int_equal(hostsched_inflight(&f.t[3]), 0);
    assert_int_equal(f.nadmitted, 1);           /* and no one admitted */
    assert_int_equal(f.t[3].state, HOSTSCHED_WAITING);
    hostsched_leave(f.hs, &f.t[3]);             /* waiting: out of the queue */
    assert_true(hostsched_acquire(f.hs, &f.t[0], false));
    hostsched_release(f.hs, &f.t[0]);
    assert_int_equal(f.nadmitted, 1);
    hostsched_release(f.hs, &f.t[0]);           /* not holding: no-op */
    hostsched_leave(f.hs, &f.t[1]);             /* left already: no-op */
    assert_int_equal(hostsched_hosts(f.hs), 1);
    fx_cleanup(&f);
}

/* hostsched/origins: callbacks on one scheme://host[:port] are one host
 * whatever their paths and the host's case; another port or scheme is
 * another host (as rs_url_origin spells it: an explicit default port is
 * another host too); what is not a URL is refused. */
static void
test_origins(void **state)
{
    (void)state;
    struct hostsched *hs = hostsched_new(1, on_admit);
    struct hostsched_ticket a, b, c, d, e;
    assert_non_null(hs);
    assert_int_equal(hostsched_join(hs, &a, "http://A.test/x?q=1", NULL), 0);
    assert_int_equal(hostsched_join(hs, &b, "http://a.test/y#z", NULL), 0);
    assert_int_equal(hostsched_hosts(hs), 1);
    assert_true(hostsched_acquire(hs, &a, false));
    assert_false(hostsched_acquire(hs, &b, false));   /* same host: full */
    hostsched_cancel(hs, &b);
    assert_int_equal(hostsched_join(hs, &c, "http://a.test:8080/x", NULL), 0);
    assert_int_equal(hostsched_join(hs, &d, "https://a.test/x", NULL), 0);
    assert_int_equal(hostsched_hosts(hs), 3);
    assert_true(hostsched_acquire(hs, &c, false));
    assert_true(hostsched_acquire(hs, &d, false));
    assert_int_equal(hostsched_join(hs, &e, "not a url", NULL), RS_EINVAL);
    assert_null(e.host);
    hostsched_leave(hs, &e);                            /* never joined */
    hostsched_leave(hs, &a);
    hostsched_leave(hs, &b);
    hostsched_leave(hs, &c);
    assert_int_equal(hostsched_hosts(hs), 1);
    hostsched_free(hs);                                 /* d still joined */
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        { "hostsched/caps", test_caps, NULL, NULL, NULL },
        { "hostsched/healthy_first", test_healthy_first, NULL, NULL, NULL },
        { "hostsched/decline_passes_on", test_decline, NULL, NULL, NULL },
        { "hostsched/cancel_leave_return", test_cancel_leave_return, NULL, NULL, NULL },
        { "hostsched/origins", test_origins, NULL, NULL, NULL },
    };
    return cmocka_run_group_tests_name("hostsched", tests, NULL, NULL);
}
