/*
 * stray.c - the ledger's live paths as a hash set, then one walk of the
 * mirror against it (stray.h).
 */
#include "stray.h"

#include "ledger.h"
#include "mirror.h"
#include "uriset.h"

struct scan {
    struct uriset paths;
    rs_time_t not_before;
    stray_cb cb;
    void *ud;
    struct stray_stats st;
};

static int
on_row(void *ud, const struct ledger_res *r)
{
    struct scan *sc = ud;

    if (r->path == NULL || r->path[0] == '\0')
        return 0;
    return uriset_add(&sc->paths, r->path) < 0 ? RS_ENOMEM : 0;
}

static int
on_file(void *ud, const char *rel, const struct stat *st)
{
    struct scan *sc = ud;

    sc->st.files++;
    if (uriset_has(&sc->paths, rel))
        return 0;
    if (sc->not_before != RS_TIME_NONE &&
        (rs_time_t)st->st_ctim.tv_sec * 1000000 + st->st_ctim.tv_nsec / 1000
            >= sc->not_before) {
        sc->st.recent++;
        return 0;
    }
    sc->st.strays++;
    return sc->cb != NULL ? sc->cb(sc->ud, rel, st) : 0;
}

int
stray_scan(struct ledger *l, struct mirror *m, rs_time_t not_before,
           stray_cb cb, void *ud, struct stray_stats *out)
{
    struct scan sc = { .not_before = not_before, .cb = cb, .ud = ud };
    int rc = ledger_res_each(l, false, -1, on_row, &sc);

    if (rc == 0)
        rc = mirror_walk(m, on_file, &sc);
    uriset_clear(&sc.paths);
    if (out != NULL)
        *out = sc.st;
    return rc;
}
