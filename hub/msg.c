/*
 * msg.c - shared, pre-encoded WebSocket frames of accepted notifications
 * (msg.h). Encoding once per notification instead of once per subscriber is
 * what lets fan-out batch many frames into one write.
 */
#include <libwebsockets.h>
#include <stdio.h>
#include <string.h>

#include "msg.h"
#include "rs_alloc.h"
#include "rs_doc.h"

/* ----------------------------------------------------------------- ids */

int
msg_id_parse(const char *s, size_t len, struct msg_id *out)
{
    uint64_t part[2] = { 0, 0 };
    int which = 0;
    size_t digits = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '-' && which == 0 && digits > 0) {
            which = 1;
            digits = 0;
            continue;
        }
        if (c < '0' || c > '9' || digits >= 19)
            return RS_EINVAL;
        part[which] = part[which] * 10 + (uint64_t)(c - '0');
        digits++;
    }
    if (digits == 0)
        return RS_EINVAL;
    out->ms = part[0];
    out->seq = part[1];
    return 0;
}

size_t
msg_id_format(struct msg_id id, char *buf)
{
    int n = snprintf(buf, MSG_ID_BUFSZ, "%llu-%llu", (unsigned long long)id.ms,
                     (unsigned long long)id.seq);
    return n > 0 ? (size_t)n : 0;
}

int
msg_id_cmp(struct msg_id a, struct msg_id b)
{
    if (a.ms != b.ms)
        return a.ms < b.ms ? -1 : 1;
    if (a.seq != b.seq)
        return a.seq < b.seq ? -1 : 1;
    return 0;
}

bool
msg_id_is_zero(struct msg_id id)
{
    return id.ms == 0 && id.seq == 0;
}

/* ----------------------------------------------------------- annotation */

static bool
is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Skip past the first occurrence of term at or after *i. */
static bool
skip_past(const char *doc, size_t len, size_t *i, const char *term)
{
    size_t tl = strlen(term);
    for (size_t j = *i; j + tl <= len; j++) {
        if (memcmp(doc + j, term, tl) == 0) {
            *i = j + tl;
            return true;
        }
    }
    return false;
}

int
msg_root_name_end(const char *doc, size_t len, size_t *off)
{
    size_t i = 0;
    if (len >= 3 && memcmp(doc, "\xEF\xBB\xBF", 3) == 0)
        i = 3;
    for (;;) {
        while (i < len && is_space(doc[i]))
            i++;
        if (i + 1 >= len || doc[i] != '<')
            return RS_EINVAL;
        if (doc[i + 1] == '?') {
            if (!skip_past(doc, len, &i, "?>"))
                return RS_EINVAL;
        } else if (len - i >= 4 && memcmp(doc + i, "<!--", 4) == 0) {
            if (!skip_past(doc, len, &i, "-->"))
                return RS_EINVAL;
        } else if (doc[i + 1] == '!') {
            return RS_EINVAL;   /* DOCTYPE: never accepted at ingest */
        } else {
            break;
        }
    }
    size_t j = i + 1;
    while (j < len && !is_space(doc[j]) && doc[j] != '>' && doc[j] != '/')
        j++;
    if (j == i + 1 || j >= len)
        return RS_EINVAL;
    *off = j;
    return 0;
}

/* The namespace prefix for our annotation: "hub", unless the root start
 * tag already uses or declares it (then "rshub", "rshub1", ...), so the
 * result is always namespace-well-formed. Descendants may rebind any prefix
 * locally without conflict. */
static const char *
msg_prefix(const char *doc, size_t len, size_t name_end)
{
    static const char *const cand[] = { "hub", "rshub", "rshub1", "rshub2",
                                         "rshub3", "rshubx" };
    size_t end = name_end;
    char q = 0;
    for (; end < len; end++) {      /* the root start tag ends at an unquoted > */
        char c = doc[end];
        if (q != 0) {
            if (c == q)
                q = 0;
        } else if (c == '"' || c == '\'') {
            q = c;
        } else if (c == '>') {
            break;
        }
    }
    size_t tag0 = name_end;
    while (tag0 > 0 && doc[tag0 - 1] != '<')
        tag0--;
    for (size_t i = 0; i < sizeof(cand) / sizeof(cand[0]); i++) {
        size_t cl = strlen(cand[i]);
        bool used = false;
        for (size_t j = tag0; j + cl < end && !used; j++) {
            /* "P:" as a prefix (after '<', space or '='-free position) */
            if (memcmp(doc + j, cand[i], cl) == 0 && doc[j + cl] == ':' &&
                (j == tag0 || doc[j - 1] == ' ' || doc[j - 1] == '\t' ||
                 doc[j - 1] == '\n' || doc[j - 1] == '\r' || doc[j - 1] == ':'))
                used = true;
        }
        if (!used)
            return cand[i];
    }
    return "rshubx";
}

/* ---------------------------------------------------------------- frames */

struct msg *
msg_new(struct msg_id id, unsigned chan, const char *body, size_t len, int *rc)
{
    size_t at;
    char attr[160];
    char idbuf[MSG_ID_BUFSZ];

    int alen = 0;
    if (msg_root_name_end(body, len, &at) == 0) {
        msg_id_format(id, idbuf);
        const char *px = msg_prefix(body, len, at);
        alen = snprintf(attr, sizeof(attr), " xmlns:%s=\"%s\" %s:id=\"%s\"",
                        px, RS_NS_HUB, px, idbuf);
    } else {
        at = len;   /* not XML (a plain WebSub topic): send it unchanged */
    }
    size_t plen = len + (size_t)alen;
    size_t hlen = plen < 126 ? 2 : plen <= 0xffff ? 4 : 10;

    struct msg *m = rs_malloc(sizeof(*m) + LWS_PRE + hlen + plen);
    if (m == NULL) {
        *rc = RS_ENOMEM;
        return NULL;
    }
    rs_seam_ref_init(&m->ref);
    m->id = id;
    m->chan = chan;
    m->frame = (unsigned char *)(m + 1) + LWS_PRE;
    m->frame_len = hlen + plen;

    /* RFC 6455: FIN + text opcode; server frames are not masked. */
    unsigned char *h = m->frame;
    h[0] = 0x81;
    if (hlen == 2) {
        h[1] = (unsigned char)plen;
    } else if (hlen == 4) {
        h[1] = 126;
        h[2] = (unsigned char)(plen >> 8);
        h[3] = (unsigned char)plen;
    } else {
        h[1] = 127;
        for (int k = 0; k < 8; k++)
            h[2 + k] = (unsigned char)((uint64_t)plen >> (56 - 8 * k));
    }
    unsigned char *p = h + hlen;
    memcpy(p, body, at);
    memcpy(p + at, attr, (size_t)alen);
    memcpy(p + at + (size_t)alen, body + at, len - at);
    *rc = 0;
    return m;
}

struct msg *
msg_ref(struct msg *m)
{
    rs_seam_ref_get(&m->ref);
    return m;
}

void
msg_unref(struct msg *m)
{
    if (m == NULL)
        return;
    if (rs_seam_ref_put(&m->ref))
        rs_free(m);
}
