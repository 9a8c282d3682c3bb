/*
 * fuzz_link_header.c - libFuzzer target for rs_discover.h: the same bytes
 * as a Link header, a robots.txt and an HTML page. Every delivered string
 * is read in full (so ASan sees any overrun) and checked for the promises
 * the header makes: a target always, NUL-terminated strings, the cap.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rs_discover.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fl_count {
    size_t n;
    size_t sum;      /* keeps the reads from being optimised away */
};

static size_t
fl_touch(const char *s)
{
    return s == NULL ? 0 : strlen(s) + (unsigned char)s[0];
}

static int
fl_on_link(void *ud, const struct rs_weblink *l)
{
    struct fl_count *c = ud;
    if (l->target == NULL || ++c->n > RS_DISCOVER_MAX_LINKS)
        abort();
    c->sum += fl_touch(l->target) + fl_touch(l->rel) + fl_touch(l->type)
              + fl_touch(l->anchor) + fl_touch(l->title);
    (void)rs_rel_has(l->rel, "resourcesync");
    /* stop now and then, to exercise the early exits */
    return (c->sum & 0xff) == 0x5a;
}

static int
fl_on_url(void *ud, const char *url)
{
    struct fl_count *c = ud;
    if (url == NULL || url[0] == '\0' || ++c->n > RS_DISCOVER_MAX_LINKS)
        abort();
    c->sum += fl_touch(url);
    return 0;
}

static void
fl_check_rc(int rc, bool may_stop)
{
    if (rc == 0 || rc == RS_EINVAL || rc == RS_ETOOBIG)
        return;
    if (rc == RS_ESTOPPED && may_stop)
        return;
    abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    struct fl_count c = { 0, 0 };
    int rc = rs_link_header_parse(s, size, fl_on_link, &c);
    fl_check_rc(rc, true);
    /* rel lists from the input itself */
    if (size > 0 && memchr(s, '\0', size) != NULL)
        (void)rs_rel_has(s, s + strlen(s) + 1 < s + size ? "up" : s);

    c.n = 0;
    rc = rs_robots_sitemaps(s, size, fl_on_url, &c);
    fl_check_rc(rc, false);
    if (rc == RS_EINVAL)
        abort();                    /* robots.txt has no malformed state */

    c.n = 0;
    rc = rs_html_links(s, size, fl_on_link, &c);
    fl_check_rc(rc, true);
    if (rc == RS_EINVAL)
        abort();                    /* the HTML parser always recovers */
    return 0;
}
