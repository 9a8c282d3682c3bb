/*
 * changelog.c - datetimes, Change List membership, rotation and retention
 * of the change log (see changelog.h). Each rotation writes the closed
 * list's until, the new list, and two framework events, in the caller's
 * transaction.
 */
#include "changelog.h"

#include <stdio.h>

#include "rs_alloc.h"

struct changelog {
    struct state *st;
    struct changelog_opts o;
    struct state_clist cur;  /* the open list, mirrored from the state */
    rs_time_t last_dt;       /* datetime of the newest change, or of the
                                open list's from when it is newer */
    bool held;               /* the last tick's retention stopped at
                                keep_from (changelog_held) */
};

void
changelog_name(int64_t num, char *buf)
{
    snprintf(buf, CHANGELOG_NAME_MAX, "changelist-%lld.xml", (long long)num);
}

static int
fw_event(struct changelog *cl, int64_t num, enum rs_change ch, rs_time_t dt)
{
    char name[CHANGELOG_NAME_MAX];
    changelog_name(num, name);
    struct state_fw f = {
        .dt = dt,
        .name = name,
        .cap = RS_CAP_CHANGELIST,
        .change = ch,
        .index = CHANGELOG_INDEX_NAME,
    };
    return state_fw_add(cl->st, &f);
}

/* Close the open list at until and open the next one from until. */
static int
rotate(struct changelog *cl, rs_time_t until)
{
    struct state_clist next = {
        .num = cl->cur.num + 1,
        .from = until,
        .until = RS_TIME_NONE,
        .count = 0,
    };
    cl->cur.until = until;
    int rc = state_clist_set(cl->st, &cl->cur);
    if (rc == 0)
        rc = state_clist_add(cl->st, &next);
    if (rc == 0)
        rc = fw_event(cl, cl->cur.num, RS_CHANGE_UPDATED, until);
    if (rc == 0)
        rc = fw_event(cl, next.num, RS_CHANGE_CREATED, until);
    if (rc == 0) {
        cl->cur = next;
        if (cl->last_dt < until)
            cl->last_dt = until;
    }
    return rc;
}

struct changelog *
changelog_new(struct state *st, const struct changelog_opts *o, rs_time_t now,
              const char **err)
{
    struct changelog *cl = rs_calloc(1, sizeof(*cl));
    if (cl == NULL) {
        *err = "out of memory";
        return NULL;
    }
    cl->st = st;
    cl->o = *o;
    if (cl->o.max_entries <= 0 || cl->o.max_entries > RS_MAX_ENTRIES)
        cl->o.max_entries = RS_MAX_ENTRIES;
    if (cl->o.max_lists <= 0 || cl->o.max_lists > RS_MAX_ENTRIES)
        cl->o.max_lists = RS_MAX_ENTRIES;
    int rc = state_clist_current(st, &cl->cur);
    if (rc == RS_ENOTFOUND) {
        cl->cur = (struct state_clist){ .num = 1, .from = now,
                                        .until = RS_TIME_NONE, .count = 0 };
        rc = state_begin(st);
        if (rc == 0)
            rc = state_clist_add(st, &cl->cur);
        if (rc == 0)
            rc = fw_event(cl, 1, RS_CHANGE_CREATED, now);
        if (rc == 0)
            rc = state_commit(st);
        else
            state_rollback(st);
    } else if (rc == 0 && cl->cur.until != RS_TIME_NONE) {
        /* a crash between closing and opening cannot happen (one
         * transaction), but a hand-edited state can: open the next */
        rc = state_begin(st);
        if (rc == 0) {
            struct state_clist next = { .num = cl->cur.num + 1,
                                        .from = cl->cur.until,
                                        .until = RS_TIME_NONE, .count = 0 };
            rc = state_clist_add(st, &next);
            if (rc == 0)
                cl->cur = next;
            if (rc == 0)
                rc = state_commit(st);
            else
                state_rollback(st);
        }
    }
    if (rc != 0) {
        *err = state_errstr(st);
        rs_free(cl);
        return NULL;
    }
    cl->last_dt = state_change_last_dt(st);
    if (cl->last_dt == RS_TIME_NONE || cl->last_dt < cl->cur.from)
        cl->last_dt = cl->cur.from;
    return cl;
}

void
changelog_free(struct changelog *cl)
{
    rs_free(cl);
}

int
changelog_record(struct changelog *cl, struct state_change *c, rs_time_t now)
{
    /* Strictly increasing: the change log orders by datetime, and a
     * Destination may use a datetime to say where it stopped. */
    rs_time_t dt = now > cl->last_dt ? now : cl->last_dt + 1;
    c->dt = dt;
    c->list = cl->cur.num;
    int rc = state_change_add(cl->st, c);
    if (rc != 0)
        return rc;
    cl->last_dt = dt;
    cl->cur.count++;
    if (cl->cur.count >= cl->o.max_entries)
        return rotate(cl, dt);
    return state_clist_set(cl->st, &cl->cur);
}

/* Drop the oldest closed lists while they are past the retention or too
 * many, but never one holding a change not yet pushed, nor, for its age,
 * one reaching keep_from: dropped, the Source's Change Lists would no
 * longer reach back to the `at` of its Resource List or Dump, and the
 * changes in between would be published nowhere. */
static int
retain(struct changelog *cl, rs_time_t now, int64_t pushed_upto,
       rs_time_t keep_from)
{
    int64_t first_unpushed_list = INT64_MAX;
    struct state_iter *it;
    int rc = state_change_iter(cl->st, 0, pushed_upto, 1, &it);
    if (rc != 0)
        return rc;
    struct state_change c;
    if (state_change_next(it, &c) == 1)
        first_unpushed_list = c.list;
    state_iter_free(it);

    int64_t nlists = state_clist_count(cl->st);
    for (int guard = 0; guard < 1000 && nlists > 1; guard++) {
        rc = state_clist_iter(cl->st, &it);
        if (rc != 0)
            return rc;
        struct state_clist old;
        int r = state_clist_next(it, &old);
        state_iter_free(it);
        if (r != 1 || old.until == RS_TIME_NONE ||
            old.num >= first_unpushed_list)
            return r < 0 ? r : 0;
        bool expired = cl->o.retain_ms > 0 &&
                       old.until < now - cl->o.retain_ms * 1000;
        bool too_many = nlists > cl->o.max_lists;
        /* until == keep_from may hold a change dated `at` itself, which
         * the snapshot may or may not have seen */
        bool needed = keep_from != RS_TIME_NONE && old.until >= keep_from;
        if (!expired && !too_many)
            return 0;
        if (needed)
            cl->held = true;
        if (needed && !too_many)
            return 0;
        rc = state_clist_drop(cl->st, old.num);
        if (rc != 0)
            return rc;
        nlists--;
    }
    return 0;
}

int
changelog_tick(struct changelog *cl, rs_time_t now, int64_t pushed_upto,
               rs_time_t keep_from)
{
    cl->held = false;
    int rc = state_begin(cl->st);
    if (rc != 0)
        return rc;
    if (cl->o.max_age_ms > 0 && cl->cur.count > 0 &&
        now - cl->cur.from >= cl->o.max_age_ms * 1000) {
        rs_time_t until = now > cl->last_dt ? now : cl->last_dt;
        rc = rotate(cl, until);
    }
    if (rc == 0)
        rc = retain(cl, now, pushed_upto, keep_from);
    if (rc == 0)
        return state_commit(cl->st);
    state_rollback(cl->st);
    changelog_reload(cl);
    return rc;
}

void
changelog_reload(struct changelog *cl)
{
    struct state_clist cur;
    if (state_clist_current(cl->st, &cur) == 0)
        cl->cur = cur;
    rs_time_t last = state_change_last_dt(cl->st);
    cl->last_dt = last != RS_TIME_NONE && last > cl->cur.from ? last
                                                              : cl->cur.from;
}

bool
changelog_held(const struct changelog *cl)
{
    return cl->held;
}

int64_t
changelog_current(const struct changelog *cl)
{
    return cl->cur.num;
}

rs_time_t
changelog_last_dt(const struct changelog *cl)
{
    return cl->last_dt;
}
