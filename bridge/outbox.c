/*
 * outbox.c - one Source's outbox (see outbox.h): rows in SQLite, a lanes
 * row per topic, notifications written from the rows with proto's strict
 * writer, and one rs_publisher per topic reading them through callbacks.
 * Seqs are contiguous (a lane's head grows by one with each row, in the
 * same transaction), so the publisher counts entries by subtraction.
 */
#include "outbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RS_LOG_MODULE "outbox"
#include "rs_alloc.h"
#include "rs_log.h"
#include "rs_pubid.h"
#include "rs_publisher.h"
#include "rs_sqlite.h"
#include "rs_time.h"
#include "rs_write.h"

#define OUTBOX_URL_MAX 8192
/* A notification's bytes other than its entries, and an entry's bytes
 * other than its loc and type, as written (generous: the estimate only
 * has to keep a document under the byte budget). */
#define OUTBOX_HEAD_BYTES 1024
#define OUTBOX_ENTRY_BYTES 600

struct lane {
    struct outbox *ob;
    enum outbox_lane kind;
    char key[RS_PUBID_KEY_MAX + 1];
    int64_t pushed, head, accepted;
    int64_t sent[RS_PUBLISHER_MARKS];
    size_t nsent;
    struct rs_publisher *pub;
};

struct outbox {
    struct outbox_opts o;
    char *bridged, *name;
    struct lane lanes[OUTBOX_LANES];
};

static const char *const lane_names[OUTBOX_LANES] = { "change", "framework" };

int
outbox_caplist_url(const char *bridged, int64_t k, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%scapabilitylist/%lld.xml", bridged,
                     (long long)k);
    return n >= 0 && (size_t)n < len ? 0 : RS_ETOOBIG;
}

/* --------------------------------------------------------------- lanes */

static const char SQL_LANE_GET[] =
    "SELECT key, pushed, head, sent, accepted FROM lanes WHERE src = ?1 "
    "AND lane = ?2";
static const char SQL_LANE_ADD[] =
    "INSERT INTO lanes(src, lane, key, pushed, head) VALUES (?1, ?2, ?3, 0, 0)";
static const char SQL_LANE_HEAD[] =
    "UPDATE lanes SET head = head + 1 WHERE src = ?1 AND lane = ?2 "
    "RETURNING head";
static const char SQL_LANE_READ_HEAD[] =
    "SELECT head FROM lanes WHERE src = ?1 AND lane = ?2";
static const char SQL_LANE_PUSHED[] =
    "UPDATE lanes SET pushed = ?3, sent = ?4, accepted = accepted + ?5 "
    "WHERE src = ?1 AND lane = ?2";
static const char SQL_LANE_SENT[] =
    "UPDATE lanes SET sent = ?3 WHERE src = ?1 AND lane = ?2";
static const char SQL_TRIM[] =
    "DELETE FROM outbox WHERE src = ?1 AND lane = ?2 AND seq <= ?3";
static const char SQL_ADD[] =
    "INSERT INTO outbox(src, lane, seq, k, loc, change, cap, dt, lastmod, "
    "hash, length, type) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
    "?11, ?12)";
static const char SQL_ROWS[] =
    "SELECT seq, k, loc, change, cap, dt, lastmod, hash, length, type FROM "
    "outbox WHERE src = ?1 AND lane = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4";

static void
marks_text(const int64_t *m, size_t n, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && off < len; i++) {
        int k = snprintf(buf + off, len - off, "%s%lld", i > 0 ? "," : "",
                         (long long)m[i]);
        if (k < 0)
            break;
        off += (size_t)k;
    }
}

static void
marks_parse(struct lane *l, const char *s)
{
    l->nsent = 0;
    while (s != NULL && *s != '\0' && l->nsent < RS_PUBLISHER_MARKS) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || (*end != ',' && *end != '\0'))
            break;
        l->sent[l->nsent++] = v;     /* rs_publisher drops what is odd */
        s = *end == ',' ? end + 1 : end;
    }
}

static int
lane_load(struct lane *l, const char **err)
{
    struct outbox *ob = l->ob;
    struct store *st = ob->o.st;
    for (int pass = 0; pass < 2; pass++) {
        sqlite3_stmt *s = store_stmt(st, SQL_LANE_GET);
        if (s == NULL)
            goto fail;
        sqlite3_bind_int64(s, 1, ob->o.src);
        sqlite3_bind_int(s, 2, (int)l->kind);
        int r = sqlite3_step(s);
        if (r == SQLITE_ROW) {
            snprintf(l->key, sizeof(l->key), "%s",
                     (const char *)sqlite3_column_text(s, 0));
            l->pushed = sqlite3_column_int64(s, 1);
            l->head = sqlite3_column_int64(s, 2);
            marks_parse(l, (const char *)sqlite3_column_text(s, 3));
            l->accepted = sqlite3_column_int64(s, 4);
        }
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
        if (r == SQLITE_ROW)
            return rs_pubid_key_ok(l->key) ? 0 : (*err = "a bad KEY in the "
                                                   "state", RS_EINVAL);
        if (r != SQLITE_DONE)
            goto fail;
        /* First start: a KEY of our own for this topic. */
        char key[RS_PUBID_KEY_MAX + 1];
        if (rs_pubid_key_new(key, sizeof(key)) != 0) {
            *err = "cannot draw a random X-Publish-Id key";
            return RS_EIO;
        }
        s = store_stmt(st, SQL_LANE_ADD);
        if (s == NULL)
            goto fail;
        sqlite3_bind_int64(s, 1, ob->o.src);
        sqlite3_bind_int(s, 2, (int)l->kind);
        sqlite3_bind_text(s, 3, key, -1, SQLITE_TRANSIENT);
        if (store_exec(st, s, "a lane") != 0)
            goto fail;
    }
fail:
    *err = store_errstr(st);
    return RS_EIO;
}

static int64_t
lane_read_head(struct lane *l)
{
    sqlite3_stmt *s = store_stmt(l->ob->o.st, SQL_LANE_READ_HEAD);
    if (s == NULL)
        return l->head;
    sqlite3_bind_int64(s, 1, l->ob->o.src);
    sqlite3_bind_int(s, 2, (int)l->kind);
    if (sqlite3_step(s) == SQLITE_ROW)
        l->head = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return l->head;
}

/* ------------------------------------------------- publisher callbacks */

static int64_t
cb_head(void *ud)
{
    struct lane *l = ud;
    return l->head;
}

struct wctx {
    rs_write_cb cb;
    void *ud;
};

static int
link_up(const char *bridged, int64_t k, char *buf, size_t len,
        struct rs_link *ln)
{
    int rc = outbox_caplist_url(bridged, k, buf, len);
    if (rc != 0)
        return rc;
    rs_link_init(ln);
    ln->rel = "up";
    ln->href = buf;
    return 0;
}

static int
cb_build(void *ud, int64_t after, size_t max_entries, size_t max_bytes,
         rs_write_cb cb, void *cbud, int64_t *last, size_t *n, char *errstr)
{
    struct lane *l = ud;
    struct outbox *ob = l->ob;
    struct store *st = ob->o.st;
    *n = 0;
    *last = after;
    errstr[0] = '\0';
    sqlite3_stmt *q = store_stmt(st, SQL_ROWS);
    if (q == NULL) {
        snprintf(errstr, 256, "%s", store_errstr(st));
        return RS_EIO;
    }
    sqlite3_bind_int64(q, 1, ob->o.src);
    sqlite3_bind_int(q, 2, (int)l->kind);
    sqlite3_bind_int64(q, 3, after);
    sqlite3_bind_int64(q, 4, (int64_t)(max_entries ? max_entries
                                                   : RS_MAX_ENTRIES));
    struct rs_writer *w = NULL;
    char up[OUTBOX_URL_MAX];
    int64_t k0 = -1;
    size_t bytes = OUTBOX_HEAD_BYTES;
    int rc = 0, r;
    while ((r = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t seq = sqlite3_column_int64(q, 0);
        int64_t k = sqlite3_column_int64(q, 1);
        const char *loc = (const char *)sqlite3_column_text(q, 2);
        const char *type = (const char *)sqlite3_column_text(q, 9);
        size_t eb = OUTBOX_ENTRY_BYTES + strlen(loc) +
                    (type != NULL ? strlen(type) : 0);
        /* one bridged Capability List per notification: rel="up" */
        if (w != NULL && (k != k0 || bytes + eb > max_bytes))
            break;
        if (w == NULL) {
            struct rs_link ln;
            struct rs_head h;
            rs_head_init(&h);
            h.root = RS_ROOT_URLSET;
            h.has_md = true;
            h.md.capability = l->kind == OUTBOX_CHANGE
                                  ? RS_CAP_CHANGELIST_NOTIFICATION
                                  : RS_CAP_FRAMEWORK_NOTIFICATION;
            if ((rc = link_up(ob->bridged, k, up, sizeof(up), &ln)) != 0)
                break;
            h.links = &ln;
            h.nlinks = 1;
            struct rs_write_opts wo = { .pretty = false };
            w = rs_writer_new(cb, cbud, &wo);
            if (w == NULL) {
                rc = RS_ENOMEM;
                break;
            }
            k0 = k;
            if ((rc = rs_writer_begin(w, &h)) != 0)
                break;
        }
        struct rs_entry e;
        rs_entry_init(&e);
        e.loc = loc;
        e.lastmod = rs_sql_col_time(q, 6);
        e.has_md = true;
        e.md.change = (enum rs_change)sqlite3_column_int(q, 3);
        e.md.datetime = rs_sql_col_time(q, 5);
        if (l->kind == OUTBOX_FRAMEWORK) {
            e.md.capability = (enum rs_capability)sqlite3_column_int(q, 4);
        } else {
            const char *hash = (const char *)sqlite3_column_text(q, 7);
            if (hash != NULL &&
                rs_hashes_parse(hash, strlen(hash), &e.md.hash) != 0)
                e.md.hash.n = 0;
            if (sqlite3_column_type(q, 8) != SQLITE_NULL)
                e.md.length = sqlite3_column_int64(q, 8);
            e.md.type = type;
        }
        if ((rc = rs_writer_entry(w, &e)) != 0)
            break;
        bytes += eb;
        (*n)++;
        *last = seq;
    }
    if (rc == 0 && r != SQLITE_ROW && r != SQLITE_DONE) {
        snprintf(errstr, 256, "outbox: %s", sqlite3_errstr(r));
        rc = RS_EIO;
    }
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    if (w != NULL) {
        if (rc == 0)
            rc = rs_writer_end(w);
        if (rc != 0 && errstr[0] == '\0')
            snprintf(errstr, 256, "%s", rs_writer_errstr(w));
        rs_writer_free(w);
    }
    if (rc != 0)
        *n = 0;
    return rc;
}

static int
cb_accepted(void *ud, int64_t before, int64_t last, size_t n,
            const char *channel, const int64_t *marks, size_t nmarks)
{
    struct lane *l = ud;
    struct outbox *ob = l->ob;
    struct store *st = ob->o.st;
    (void)before;
    char text[RS_PUBLISHER_MARKS * 21 + 1];
    marks_text(marks, nmarks, text, sizeof(text));
    int rc = store_begin(st);
    if (rc != 0)
        return rc;
    sqlite3_stmt *s = store_stmt(st, SQL_LANE_PUSHED);
    if (s == NULL)
        goto fail;
    sqlite3_bind_int64(s, 1, ob->o.src);
    sqlite3_bind_int(s, 2, (int)l->kind);
    sqlite3_bind_int64(s, 3, last);
    sqlite3_bind_text(s, 4, text, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 5, (int64_t)n);
    if (store_exec(st, s, "the watermark") != 0)
        goto fail;
    s = store_stmt(st, SQL_TRIM);
    if (s == NULL)
        goto fail;
    sqlite3_bind_int64(s, 1, ob->o.src);
    sqlite3_bind_int(s, 2, (int)l->kind);
    sqlite3_bind_int64(s, 3, last);
    if (store_exec(st, s, "trim the outbox") != 0 || store_commit(st) != 0)
        goto fail;
    l->pushed = last;
    l->accepted += (int64_t)n;
    if (n > 0 && ob->o.on_accepted != NULL)
        ob->o.on_accepted(ob->o.ud, l->kind, channel);
    return 0;
fail:
    rs_log_kv(RS_LOG_ERROR, "cannot record what the hub accepted", "source",
              ob->name, "error", store_errstr(st), NULL);
    store_rollback(st);
    return RS_EIO;
}

static int
cb_marks(void *ud, const int64_t *marks, size_t nmarks)
{
    struct lane *l = ud;
    struct store *st = l->ob->o.st;
    char text[RS_PUBLISHER_MARKS * 21 + 1];
    marks_text(marks, nmarks, text, sizeof(text));
    sqlite3_stmt *s = store_stmt(st, SQL_LANE_SENT);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, l->ob->o.src);
    sqlite3_bind_int(s, 2, (int)l->kind);
    sqlite3_bind_text(s, 3, text, -1, SQLITE_TRANSIENT);
    return store_exec(st, s, "the marks");
}

/* ------------------------------------------------------------- public */

struct outbox *
outbox_new(const struct outbox_opts *o, const char **err)
{
    *err = "out of memory";
    struct outbox *ob = rs_calloc(1, sizeof(*ob));
    if (ob == NULL)
        return NULL;
    ob->o = *o;
    ob->bridged = rs_strdup(o->bridged);
    ob->name = rs_strdup(o->name);
    if (ob->bridged == NULL || ob->name == NULL)
        goto fail;
    for (int k = 0; k < OUTBOX_LANES; k++) {
        struct lane *l = &ob->lanes[k];
        l->ob = ob;
        l->kind = (enum outbox_lane)k;
        if (lane_load(l, err) != 0)
            goto fail;
        char name[300];
        snprintf(name, sizeof(name), "%s %s", o->name, lane_names[k]);
        struct rs_publisher_opts po = {
            .base = o->base,
            .http = o->http,
            .hub = o->hub,
            .topic = o->topic[k],
            .token = o->token,
            .publish_key = l->key,
            .name = name,
            .batch_ms = o->batch_ms,
            .retry_max_ms = o->retry_max_ms,
            .max_bytes = o->max_bytes,
            .timeout_ms = o->timeout_ms,
            .pushed = l->pushed,
            .sent = l->sent,
            .nsent = l->nsent,
            .head = cb_head,
            .build = cb_build,
            .accepted = cb_accepted,
            .marks = cb_marks,
            .ud = l,
        };
        l->pub = rs_publisher_new(&po, err);
        if (l->pub == NULL)
            goto fail;
    }
    *err = NULL;
    return ob;
fail:
    outbox_free(ob);
    return NULL;
}

void
outbox_free(struct outbox *ob)
{
    if (ob == NULL)
        return;
    for (int k = 0; k < OUTBOX_LANES; k++)
        rs_publisher_free(ob->lanes[k].pub);
    rs_free(ob->bridged);
    rs_free(ob->name);
    rs_free(ob);
}

int
outbox_set_token(struct outbox *ob, const char *token)
{
    for (int k = 0; k < OUTBOX_LANES; k++) {
        int rc = rs_publisher_set_token(ob->lanes[k].pub, token);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int
outbox_add(struct outbox *ob, enum outbox_lane lane,
           const struct outbox_item *it)
{
    struct store *st = ob->o.st;
    sqlite3_stmt *s = store_stmt(st, SQL_LANE_HEAD);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, ob->o.src);
    sqlite3_bind_int(s, 2, (int)lane);
    int64_t seq = -1;
    int r = sqlite3_step(s);
    if (r == SQLITE_ROW)
        seq = sqlite3_column_int64(s, 0);
    /* RETURNING: the update is done only when the statement is */
    while (r == SQLITE_ROW)
        r = sqlite3_step(s);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    if (r != SQLITE_DONE || seq < 1)
        return store_fail(st, "a lane's head");
    s = store_stmt(st, SQL_ADD);
    if (s == NULL)
        return RS_EIO;
    sqlite3_bind_int64(s, 1, ob->o.src);
    sqlite3_bind_int(s, 2, (int)lane);
    sqlite3_bind_int64(s, 3, seq);
    sqlite3_bind_int64(s, 4, it->k);
    sqlite3_bind_text(s, 5, it->loc, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 6, (int)it->change);
    sqlite3_bind_int(s, 7, (int)it->cap);
    rs_sql_bind_time(s, 8, it->datetime);
    rs_sql_bind_time(s, 9, it->lastmod);
    if (it->hash != NULL)
        sqlite3_bind_text(s, 10, it->hash, -1, SQLITE_TRANSIENT);
    if (it->length >= 0)
        sqlite3_bind_int64(s, 11, it->length);
    if (it->type != NULL)
        sqlite3_bind_text(s, 12, it->type, -1, SQLITE_TRANSIENT);
    return store_exec(st, s, "add to the outbox");
}

void
outbox_kick(struct outbox *ob)
{
    for (int k = 0; k < OUTBOX_LANES; k++) {
        lane_read_head(&ob->lanes[k]);
        rs_publisher_kick(ob->lanes[k].pub);
    }
}

void
outbox_flush(struct outbox *ob)
{
    for (int k = 0; k < OUTBOX_LANES; k++)
        rs_publisher_flush(ob->lanes[k].pub);
}

void
outbox_resume(struct outbox *ob)
{
    for (int k = 0; k < OUTBOX_LANES; k++) {
        lane_read_head(&ob->lanes[k]);
        rs_publisher_resume(ob->lanes[k].pub);
    }
}

bool
outbox_idle(const struct outbox *ob)
{
    for (int k = 0; k < OUTBOX_LANES; k++)
        if (!rs_publisher_idle(ob->lanes[k].pub))
            return false;
    return true;
}

void
outbox_stats(const struct outbox *ob, struct outbox_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->hub_failing_since = RS_TIME_NONE;
    for (int k = 0; k < OUTBOX_LANES; k++) {
        const struct lane *l = &ob->lanes[k];
        struct rs_publisher_stats ps;
        rs_publisher_stats(l->pub, &ps);
        out->pending[k] = l->head - l->pushed;
        out->accepted[k] = l->accepted;
        out->stopped[k] = ps.stopped;
        out->posts += ps.posts;
        out->retries += ps.retries;
        out->failures += ps.failures;
        out->duplicates += ps.duplicates;
        out->hub_failing[k] = ps.failing > 0 || ps.stopped;
        if (!out->hub_failing[k])
            continue;
        out->hub_failures += ps.failing;
        if (out->hub_failing_since == RS_TIME_NONE ||
            ps.failing_since < out->hub_failing_since)
            out->hub_failing_since = ps.failing_since;
        /* a refusal (it stopped a topic) says more than a retry */
        if (out->hub_error[0] == '\0' || ps.stopped) {
            char what[32] = "no answer";
            if (ps.last_status != 0)
                snprintf(what, sizeof(what), "HTTP %ld", ps.last_status);
            snprintf(out->hub_error, sizeof(out->hub_error), "%s: %s%s",
                     what, ps.last_error,
                     ps.stopped ? " (refused: the topic waits for SIGHUP "
                                  "or a restart)" : " (retrying)");
        }
    }
}
