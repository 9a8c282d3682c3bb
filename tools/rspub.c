/*
 * rspub.c - rshub's command-line publisher. It takes a prepared notification
 * (a file or standard input) or builds one from entry options, validates it
 * with proto, then POSTs it to a hub (docs/protocol.md 3) with libcurl,
 * retrying while the hub is unavailable. The document rules belong to proto
 * and option parsing to rs_config; this file decides what to send and what to
 * report.
 *
 * With --publish-id the hub stores the notification at most once for that
 * KEY:SEQ. A duplicate answer counts as accepted: what was asked for is
 * stored.
 *
 * Exit status: 0 accepted (the hub's id is printed on stdout); 1 rejected by
 * the hub (4xx) or invalid input (document, token, unreadable file); 2 usage
 * error; 3 hub unavailable (5xx, connection failure or timeout, after the
 * retries).
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rs_alloc.h"
#include "rs_backoff.h"
#include "rs_config.h"
#include "rs_doc.h"
#include "rs_hash.h"
#include "rs_parse.h"
#include "rs_pubid.h"
#include "rs_retry_after.h"
#include "rs_time.h"
#include "rs_tokenfile.h"
#include "rs_url.h"
#include "rs_write.h"

#define RSPUB_OK 0
#define RSPUB_REJECTED 1        /* the hub said no (4xx), or bad input */
#define RSPUB_USAGE 2
#define RSPUB_UNAVAILABLE 3     /* 5xx, no connection, timeout */

#define RSPUB_CHUNK 65536               /* read size for files and stdin */
#define RSPUB_TOKEN_MAX RS_TOKENFILE_MAX  /* bytes of a token, after trimming */
#define RSPUB_REPLY_MAX 4096            /* reply body kept for messages */
#define RSPUB_BACKOFF_MS 500L           /* first retry delay; doubles */
#define RSPUB_BACKOFF_MAX_MS 8000L
/* A hub asking for a longer pause than this gets no more retries:
 * retrying sooner would ignore what it asked for, and waiting longer would
 * leave a script hanging with no output. */
#define RSPUB_RETRY_AFTER_MAX_MS 60000L

static struct {
    char *hub;
    char *topic;
    char *token_file;
    char *up;
    char *publish_id;
    bool insecure_token_file;
    bool framework;
    bool dry_run;
    bool verbose;
    int64_t timeout_ms;
    int64_t retries;
} conf;

/* --publish-id as sent ("" without it) */
static char publish_id[RS_PUBID_BUFSZ];

static const struct rs_config_opt options[] = {
    RS_CONFIG_STRING("hub", 0, &conf.hub, "URL", NULL,
                     "the hub's publish URL, e.g. http://HOST:PORT/hub"),
    RS_CONFIG_STRING("topic", 0, &conf.topic, "URI", NULL,
                     "the topic, sent as Link: <URI>; rel=\"self\""),
    RS_CONFIG_STRING("token-file", 0, &conf.token_file, "FILE", NULL,
                     "bearer token: the first line of FILE (mode 600)"),
    RS_CONFIG_BOOL("insecure-token-file", 0, &conf.insecure_token_file,
                   "false", "accept a token file readable by group or others"),
    RS_CONFIG_DURATION("timeout", 0, &conf.timeout_ms, "10s", 100, 3600000,
                       "time limit of each attempt"),
    RS_CONFIG_INT("retries", 0, &conf.retries, "3", 0, 10,
                  "retries after 502/503/504, a failed connection or a "
                  "timeout"),
    RS_CONFIG_BOOL("framework", 0, &conf.framework, "false",
                   "build a framework-notification (entries need "
                   "--capability)"),
    RS_CONFIG_STRING("up", 0, &conf.up, "URL", NULL,
                     "built documents: rs:ln rel=\"up\" to the Capability "
                     "List"),
    RS_CONFIG_STRING("publish-id", 0, &conf.publish_id, "KEY:SEQ", NULL,
                     "send X-Publish-Id: KEY:SEQ; the hub stores a SEQ not "
                     "above the highest it has for KEY only once (a "
                     "duplicate exits 0)"),
    RS_CONFIG_BOOL("dry-run", 'n', &conf.dry_run, "false",
                   "print the document on stdout instead of sending it"),
    RS_CONFIG_BOOL("verbose", 'v', &conf.verbose, "false",
                   "print the channel and each attempt on stderr"),
    RS_CONFIG_END,
};

static const char usage_text[] =
    "Usage: rspub --hub URL --topic URI [OPTION]... [FILE|-]\n"
    "       rspub --hub URL --topic URI [OPTION]... --up URL\n"
    "             --change TYPE --loc URL [ENTRY OPTION]... [--change ...]\n"
    "Publish a ResourceSync notification to an rshub hub (POST /hub). The\n"
    "document is a changelist-notification or framework-notification. It\n"
    "is read from FILE or standard input, or built from entry options.\n"
    "It is validated here first. On acceptance the hub's id is printed\n"
    "on stdout.\n"
    "The bearer token comes from --token-file or, failing that, the\n"
    "RSPUB_TOKEN environment variable, never from the command line.\n"
    "\n"
    "Entry options (order matters: each --change starts an entry and the\n"
    "options after it describe that entry):\n"
    "  --change=TYPE       created, updated or deleted\n"
    "  --loc=URL           the resource (with --framework: the capability\n"
    "                      document)\n"
    "  --lastmod=TIME      W3C datetime of the resource's last change\n"
    "  --datetime=TIME     when the change happened (default: now)\n"
    "  --hash=ALGO:HEX     fixity, e.g. md5:HEX (repeatable)\n"
    "  --length=N          size in bytes\n"
    "  --type=MIME         media type\n"
    "  --capability=CAP    with --framework: resourcelist, changelist,\n"
    "                      resourcedump, changedump, capabilitylist or\n"
    "                      description\n"
    "\n"
    "With --publish-id, a SEQ not above the highest the hub holds for KEY\n"
    "is answered as a duplicate and not stored: right for a resend, a loss\n"
    "for a different notification (a KEY's SEQs must increase); rspub exits\n"
    "0 and says so on stderr.\n"
    "\n"
    "Exit status: 0 accepted; 1 rejected by the hub (4xx, or a redirect,\n"
    "not followed) or invalid input (document, token); 2 usage error; 3 hub\n"
    "unavailable (5xx, connection failure or timeout, after the retries).";

/* ================================================================ helpers */

static void usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

static void
usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("rspub: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'rspub --help'.\n", stderr);
}

/* Up to len bytes of src, ending at its first line break, into dst. Other
 * control characters become spaces and trailing white space is trimmed,
 * so a header or a reply body always prints as one line. */
static void
copy_line(char *dst, size_t dstsz, const char *src, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len && src[i] != '\r' && src[i] != '\n' &&
                       n + 1 < dstsz; i++) {
        unsigned char c = (unsigned char)src[i];
        dst[n++] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
    }
    while (n > 0 && dst[n - 1] == ' ')
        n--;
    dst[n] = '\0';
}

/* A growing byte buffer, capped at one document's limit. */
struct buf {
    char *p;          /* NUL-terminated when not NULL */
    size_t len;
    size_t cap;
};

static int
buf_append(struct buf *b, const char *s, size_t n)
{
    if (n > RS_MAX_DOC_BYTES - b->len)
        return RS_ETOOBIG;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap != 0 ? b->cap : RSPUB_CHUNK;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = rs_realloc(b->p, cap);
        if (p == NULL)
            return RS_ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

/* ========================================================= entry options */

/*
 * Entry options are not rows of the rs_config table. They depend on order:
 * each --change opens an entry, and the --loc, --hash... after it belong to
 * that entry. rs_config keeps one list per option and loses how the lists
 * interleave. They also describe one publish, so they have no place in a
 * config file. So main() first splits argv in two. Entry options go, in
 * order, into the entry groups here. Every other word keeps its order in a
 * second argv that goes to rs_config. To split correctly, the scanner must
 * know which other options take the next word as their value
 * (--topic URI). It reads that from the same table rs_config uses, so the
 * two always agree.
 */
enum entry_field {
    EF_CHANGE,
    EF_LOC,
    EF_LASTMOD,
    EF_DATETIME,
    EF_HASH,
    EF_LENGTH,
    EF_TYPE,
    EF_CAPABILITY,
    EF_COUNT,
};

static const char *const entry_flag_names[EF_COUNT] = {
    "change", "loc", "lastmod", "datetime", "hash", "length", "type",
    "capability",
};

/* One --change group, values as given on the command line (argv owns
 * them). v[EF_HASH] is unused: hashes may repeat. */
struct entry_args {
    const char *v[EF_COUNT];
    const char *hash[RS_HASH_MAX];
    size_t nhash;
};

struct cmdline {
    char **argv;                /* argv minus entry options, for rs_config */
    int argc;
    struct entry_args *entries; /* room for one per argv word */
    size_t nentries;
    char err[256];              /* why the split failed, if it did */
};

static int
entry_flag(const char *name, size_t len)
{
    for (int i = 0; i < EF_COUNT; i++)
        if (strlen(entry_flag_names[i]) == len &&
            strncmp(entry_flag_names[i], name, len) == 0)
            return i;
    return -1;
}

/* Does --NAME, written without "=VALUE", take the next word as its value? */
static bool
long_takes_value(const char *name, size_t len)
{
    if (len == 6 && strncmp(name, "config", 6) == 0)
        return true;
    for (const struct rs_config_opt *o = options; o->name != NULL; o++)
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
            return o->type != RS_CONFIG_TYPE_BOOL;
    return false;
}

static bool
short_takes_value(char c)
{
    if (c == 'c')
        return true;
    for (const struct rs_config_opt *o = options; o->name != NULL; o++)
        if (o->letter == c)
            return o->type != RS_CONFIG_TYPE_BOOL;
    return false;
}

/* A cluster of short options ("-vc"): is the next word the value of its
 * last letter? */
static bool
short_word_needs_next(const char *w)
{
    for (const char *p = w + 1; *p != '\0'; p++)
        if (short_takes_value(*p))
            return p[1] == '\0';
    return false;
}

static bool
entry_add(struct cmdline *cl, int f, const char *val)
{
    if (f == EF_CHANGE)
        cl->nentries++;
    if (cl->nentries == 0) {
        snprintf(cl->err, sizeof(cl->err),
                 "--%s comes before any --change (each entry starts with "
                 "--change)", entry_flag_names[f]);
        return false;
    }
    struct entry_args *ea = &cl->entries[cl->nentries - 1];
    if (f == EF_HASH) {
        if (ea->nhash == RS_HASH_MAX) {
            snprintf(cl->err, sizeof(cl->err),
                     "entry %zu: at most %d --hash options", cl->nentries,
                     RS_HASH_MAX);
            return false;
        }
        ea->hash[ea->nhash++] = val;
        return true;
    }
    if (ea->v[f] != NULL) {
        snprintf(cl->err, sizeof(cl->err),
                 "entry %zu: --%s given twice (a --change missing?)",
                 cl->nentries, entry_flag_names[f]);
        return false;
    }
    ea->v[f] = val;
    return true;
}

/* Split argv as described above. Returns 0, RS_ENOMEM, or RS_EINVAL with
 * cl->err saying why. cl->argv is complete either way, so --help still
 * works on a command line with broken entry options. */
static int
cmdline_split(int argc, char **argv, struct cmdline *cl)
{
    bool ok = true;
    cl->argv = rs_calloc((size_t)argc + 1, sizeof(*cl->argv));
    cl->entries = rs_calloc((size_t)argc, sizeof(*cl->entries));
    if (cl->argv == NULL || cl->entries == NULL)
        return RS_ENOMEM;
    cl->argv[cl->argc++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *w = argv[i];
        if (strcmp(w, "--") == 0) {
            while (i < argc)
                cl->argv[cl->argc++] = argv[i++];
            break;
        }
        if (w[0] == '-' && w[1] == '-') {
            const char *name = w + 2;
            size_t len = strcspn(name, "=");
            int f = entry_flag(name, len);
            if (f >= 0) {
                const char *val = NULL;
                if (name[len] == '=')
                    val = name + len + 1;
                else if (i + 1 < argc)
                    val = argv[++i];
                if (val == NULL) {
                    if (ok)
                        snprintf(cl->err, sizeof(cl->err),
                                 "--%s: missing value", entry_flag_names[f]);
                    ok = false;
                } else if (ok) {
                    ok = entry_add(cl, f, val);
                }
                continue;
            }
            cl->argv[cl->argc++] = argv[i];
            if (name[len] == '\0' && long_takes_value(name, len) &&
                i + 1 < argc)
                cl->argv[cl->argc++] = argv[++i];
            continue;
        }
        cl->argv[cl->argc++] = argv[i];
        if (w[0] == '-' && w[1] != '\0' && short_word_needs_next(w) &&
            i + 1 < argc)
            cl->argv[cl->argc++] = argv[++i];
    }
    cl->argv[cl->argc] = NULL;
    return ok ? 0 : RS_EINVAL;
}

static void
cmdline_cleanup(struct cmdline *cl)
{
    rs_free(cl->argv);
    rs_free(cl->entries);
}

/* ======================================================== building one */

static bool
parse_time_arg(const char *s, rs_time_t *out)
{
    return rs_time_parse(s, strlen(s), out) == 0;
}

static bool
parse_length_arg(const char *s, int64_t *out)
{
    char *end;
    if (s[0] < '0' || s[0] > '9')
        return false;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = (int64_t)v;
    return true;
}

/* All --hash values of one entry as one attribute ("md5:.. sha-256:.."),
 * so that rs_hashes_parse also catches a repeated algorithm. */
static bool
parse_hash_args(const struct entry_args *ea, struct rs_hashes *out)
{
    char joined[RS_HASHES_BUFSZ * 2];
    size_t n = 0;
    for (size_t i = 0; i < ea->nhash; i++) {
        int k = snprintf(joined + n, sizeof(joined) - n, "%s%s",
                         i > 0 ? " " : "", ea->hash[i]);
        if (k < 0 || (size_t)k >= sizeof(joined) - n)
            return false;
        n += (size_t)k;
    }
    return rs_hashes_parse(joined, n, out) == 0;
}

/* Turn group i (1-based in messages) into an entry whose strings point
 * into argv. 0, or RSPUB_USAGE with the reason in err. */
static int
entry_build(const struct entry_args *ea, size_t i, rs_time_t now,
            struct rs_entry *e, char *err, size_t errsz)
{
    const char *const *v = ea->v;
    rs_entry_init(e);
    e->has_md = true;
    for (int f = 0; f < EF_COUNT; f++)
        if (v[f] != NULL && v[f][0] == '\0') {
            snprintf(err, errsz, "entry %zu: --%s: empty value", i,
                     entry_flag_names[f]);
            return RSPUB_USAGE;
        }
    e->md.change = rs_change_from(v[EF_CHANGE]);
    if (e->md.change == RS_CHANGE_NONE) {
        snprintf(err, errsz, "entry %zu: --change: expected created, updated "
                 "or deleted, got '%s'", i, v[EF_CHANGE]);
        return RSPUB_USAGE;
    }
    e->loc = v[EF_LOC];
    if (e->loc == NULL) {
        snprintf(err, errsz, "entry %zu (--change %s): no --loc", i,
                 v[EF_CHANGE]);
        return RSPUB_USAGE;
    }
    if (v[EF_LASTMOD] != NULL && !parse_time_arg(v[EF_LASTMOD], &e->lastmod)) {
        snprintf(err, errsz, "entry %zu: --lastmod: expected a W3C datetime "
                 "such as 2024-05-01T10:00:00Z, got '%s'", i, v[EF_LASTMOD]);
        return RSPUB_USAGE;
    }
    e->md.datetime = now;
    if (v[EF_DATETIME] != NULL &&
        !parse_time_arg(v[EF_DATETIME], &e->md.datetime)) {
        snprintf(err, errsz, "entry %zu: --datetime: expected a W3C datetime "
                 "such as 2024-05-01T10:00:00Z, got '%s'", i, v[EF_DATETIME]);
        return RSPUB_USAGE;
    }
    if (v[EF_LENGTH] != NULL &&
        !parse_length_arg(v[EF_LENGTH], &e->md.length)) {
        snprintf(err, errsz, "entry %zu: --length: expected a number of "
                 "bytes, got '%s'", i, v[EF_LENGTH]);
        return RSPUB_USAGE;
    }
    e->md.type = v[EF_TYPE];
    if (ea->nhash > 0 && !parse_hash_args(ea, &e->md.hash)) {
        snprintf(err, errsz, "entry %zu: --hash: expected ALGO:HEX (md5, "
                 "sha-1, sha-256... with a digest of the right length, each "
                 "algorithm once)", i);
        return RSPUB_USAGE;
    }
    const char *cap = v[EF_CAPABILITY];
    if (cap != NULL && !conf.framework) {
        snprintf(err, errsz, "entry %zu: --capability belongs to "
                 "--framework notifications", i);
        return RSPUB_USAGE;
    }
    if (conf.framework) {
        if (cap == NULL) {
            snprintf(err, errsz, "entry %zu: --framework entries need "
                     "--capability (resourcelist, changelist...)", i);
            return RSPUB_USAGE;
        }
        e->md.capability = rs_capability_from(cap, NULL);
        if (e->md.capability == RS_CAP_NONE ||
            e->md.capability == RS_CAP_OTHER) {
            snprintf(err, errsz, "entry %zu: --capability: unknown "
                     "capability '%s'", i, cap);
            return RSPUB_USAGE;
        }
    }
    return 0;
}

static int
on_write(void *ud, const char *s, size_t n)
{
    return buf_append(ud, s, n);
}

/* Build the notification from the entry groups with the strict writer.
 * The streaming writer (not rs_write_buf) is used because rs_write_buf
 * gives only a code; rs_writer_errstr says which entry broke which rule. */
static int
doc_build(const struct cmdline *cl, struct buf *doc)
{
    int rc = RSPUB_REJECTED;
    char err[512];
    struct rs_writer *w = NULL;
    struct rs_entry *entries = rs_calloc(cl->nentries, sizeof(*entries));
    if (entries == NULL) {
        fputs("rspub: out of memory\n", stderr);
        goto out;
    }
    /* One "now" for every entry without --datetime: they are one change
     * set, and equal times keep the chronological check satisfied. */
    rs_time_t now = rs_time_now();
    for (size_t i = 0; i < cl->nentries; i++) {
        rc = entry_build(&cl->entries[i], i + 1, now, &entries[i], err,
                         sizeof(err));
        if (rc != 0) {
            usage_error("%s", err);
            goto out;
        }
    }

    struct rs_link up;
    struct rs_head head;
    rs_link_init(&up);
    up.rel = "up";
    up.href = conf.up;
    rs_head_init(&head);
    head.root = RS_ROOT_URLSET;
    head.has_md = true;
    head.md.capability = conf.framework ? RS_CAP_FRAMEWORK_NOTIFICATION
                                        : RS_CAP_CHANGELIST_NOTIFICATION;
    head.links = &up;
    head.nlinks = 1;

    rc = RSPUB_REJECTED;
    w = rs_writer_new(on_write, doc, NULL);
    if (w == NULL) {
        fputs("rspub: out of memory\n", stderr);
        goto out;
    }
    bool ok = rs_writer_begin(w, &head) == 0;
    for (size_t i = 0; ok && i < cl->nentries; i++)
        ok = rs_writer_entry(w, &entries[i]) == 0;
    if (ok)
        ok = rs_writer_end(w) == 0;
    if (!ok) {
        fprintf(stderr, "rspub: cannot build the notification: %s\n",
                rs_writer_errstr(w));
        goto out;
    }
    rc = RSPUB_OK;
out:
    rs_writer_free(w);
    rs_free(entries);
    return rc;
}

/* ===================================================== reading one given */

/* The whole of NAME ("-": standard input) into doc. */
static int
input_read(const char *name, struct buf *doc)
{
    int rc = RSPUB_REJECTED;
    int fd = STDIN_FILENO;
    char *chunk = rs_malloc(RSPUB_CHUNK);
    if (chunk == NULL) {
        fputs("rspub: out of memory\n", stderr);
        goto out;
    }
    if (strcmp(name, "-") != 0) {
        fd = open(name, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            fprintf(stderr, "rspub: %s: cannot open: %s\n", name,
                    strerror(errno));
            goto out;
        }
    }
    for (;;) {
        ssize_t n = read(fd, chunk, RSPUB_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            fprintf(stderr, "rspub: %s: read error: %s\n", name,
                    strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        int brc = buf_append(doc, chunk, (size_t)n);
        if (brc != 0) {
            fprintf(stderr, "rspub: %s: %s\n", name,
                    brc == RS_ETOOBIG ? "larger than a notification may be "
                                        "(50 MB)"
                                      : "out of memory");
            goto out;
        }
    }
    rc = RSPUB_OK;
out:
    if (fd != STDIN_FILENO && fd >= 0)
        close(fd);
    rs_free(chunk);
    return rc;
}

/* rsdoc's diagnostic form, one line whatever the message holds. */
static void
print_diag(const char *name, unsigned line, const char *sev, const char *msg)
{
    char out[1024];
    rs_diag_line(out, sizeof(out), name, line, sev, msg);
    fprintf(stderr, "%s\n", out);
}

static void
on_parse_warning(void *ud, unsigned line, const char *msg)
{
    print_diag(ud, line, "warning", msg);
}

static int
on_validate_head(void *ud, const struct rs_head *h)
{
    enum rs_capability *cap = ud;
    *cap = h->md.capability;
    return rs_capability_is_notification(*cap) ? 0 : RS_EINVALID;
}

/* What the hub will check, checked here first so that nothing is sent
 * that it would refuse. Leniently, like the hub: warnings are printed. */
static int
input_validate(const char *name, const struct buf *doc)
{
    enum rs_capability cap = RS_CAP_NONE;
    const struct rs_parser_cbs cbs = { .on_head = on_validate_head };
    const struct rs_parse_opts po = {
        .on_warning = on_parse_warning,
        .warning_ud = (void *)(uintptr_t)name,
    };
    struct rs_parser *p = rs_parser_new(&po, &cbs, &cap);
    if (p == NULL) {
        fputs("rspub: out of memory\n", stderr);
        return RSPUB_REJECTED;
    }
    int rc = rs_parser_feed(p, doc->p != NULL ? doc->p : "", doc->len);
    if (rc == 0)
        rc = rs_parser_finish(p);
    if (rc != 0) {
        const struct rs_diag *d = rs_parser_error(p);
        char msg[256];
        if (cap != RS_CAP_NONE && !rs_capability_is_notification(cap))
            snprintf(msg, sizeof(msg), "capability \"%s\" is not a "
                     "notification (changelist-notification or "
                     "framework-notification)",
                     cap == RS_CAP_OTHER ? "?" : rs_capability_name(cap));
        else
            snprintf(msg, sizeof(msg), "%s",
                     d != NULL ? d->msg : rs_strerror(rc));
        print_diag(name, d != NULL ? d->line : 0, "error", msg);
        rc = RSPUB_REJECTED;
    }
    rs_parser_free(p);
    return rc;
}

/* ================================================================= token */

/* Trim src[0..len) into tok. A token is one HTTP header value: no white
 * space inside, no control characters. */
static int
token_set(char *tok, size_t toksz, const char *src, size_t len,
          const char *from)
{
    while (len > 0 && (*src == ' ' || *src == '\t')) {
        src++;
        len--;
    }
    while (len > 0 && (src[len - 1] == ' ' || src[len - 1] == '\t' ||
                       src[len - 1] == '\r'))
        len--;
    if (len == 0) {
        fprintf(stderr, "rspub: %s: empty token\n", from);
        return RSPUB_REJECTED;
    }
    if (len >= toksz) {
        fprintf(stderr, "rspub: %s: token longer than %zu bytes\n", from,
                toksz - 1);
        return RSPUB_REJECTED;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c <= 0x20 || c == 0x7f) {
            fprintf(stderr, "rspub: %s: the token holds white space or a "
                    "control character\n", from);
            return RSPUB_REJECTED;
        }
    }
    memcpy(tok, src, len);
    tok[len] = '\0';
    return RSPUB_OK;
}

/* The first line of the token file, read by the daemons' own reader (mode
 * checked on the open descriptor, trimmed, one header value). */
static int
token_from_file(const char *path, char *tok, size_t toksz)
{
    char err[512];
    if (rs_tokenfile_read(path, conf.insecure_token_file, tok, toksz, err,
                          sizeof(err)) != 0) {
        fprintf(stderr, "rspub: %s\n", err);
        return RSPUB_REJECTED;
    }
    return RSPUB_OK;
}

/* --token-file (flag or config file) wins over RSPUB_TOKEN; with neither,
 * tok is "" and no Authorization header is sent. */
static int
token_load(char *tok, size_t toksz)
{
    tok[0] = '\0';
    if (conf.token_file != NULL)
        return token_from_file(conf.token_file, tok, toksz);
    const char *env = getenv("RSPUB_TOKEN");
    if (env != NULL && env[0] != '\0')
        return token_set(tok, toksz, env, strlen(env), "RSPUB_TOKEN");
    return RSPUB_OK;
}

/* ================================================================== HTTP */

/* What one attempt brought back. */
struct reply {
    long status;                  /* 0: no HTTP answer */
    char reason[64];              /* the status line's reason phrase */
    bool text;                    /* body is text/plain: the hub's words */
    char id[128];                 /* X-Hub-Id */
    char channel[512];            /* X-Hub-Channel */
    bool duplicate;               /* X-Hub-Duplicate: 1 */
    long retry_after_ms;          /* -1: no Retry-After */
    char body[RSPUB_REPLY_MAX];   /* the start of the body, NUL-terminated */
    size_t body_len;
    char curl_err[CURL_ERROR_SIZE];
};

static void
reply_reset(struct reply *r)
{
    r->status = 0;
    r->id[0] = r->channel[0] = r->body[0] = r->curl_err[0] = '\0';
    r->reason[0] = '\0';
    r->text = false;
    r->duplicate = false;
    r->body_len = 0;
    r->retry_after_ms = -1;
}

/* If the header line buf is "NAME: value", the value (trimmed). */
static const char *
header_value(const char *buf, size_t len, const char *name, size_t *vlen)
{
    size_t nl = strlen(name);
    if (len <= nl || strncasecmp(buf, name, nl) != 0 || buf[nl] != ':')
        return NULL;
    const char *v = buf + nl + 1;
    size_t n = len - nl - 1;
    while (n > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        n--;
    }
    *vlen = n;
    return v;
}

/* Retry-After (delta-seconds or an HTTP-date), at most a day; -1 when
 * absent or unreadable. */
static long
parse_retry_after(const char *v, size_t len)
{
    char s[128];
    uint64_t ms = 0;
    copy_line(s, sizeof(s), v, len);
    if (rs_retry_after_parse(s, (int64_t)time(NULL), &ms) != 0)
        return -1;
    return ms > 86400 * 1000 ? 86400L * 1000 : (long)ms;
}

static size_t
on_header(char *buf, size_t size, size_t nmemb, void *ud)
{
    struct reply *r = ud;
    size_t len = size * nmemb, vlen = 0;
    const char *v;
    /* A new status line (after "100 Continue"): forget the interim one. */
    if (len >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
        r->id[0] = r->channel[0] = r->reason[0] = '\0';
        r->text = false;
        r->duplicate = false;
        r->retry_after_ms = -1;
        /* "HTTP/1.1 503 Service Unavailable": the text after the code */
        const char *code = memchr(buf, ' ', len);
        const char *end = NULL;
        if (code != NULL)
            end = memchr(code + 1, ' ', len - (size_t)(code + 1 - buf));
        if (end != NULL)
            copy_line(r->reason, sizeof(r->reason), end + 1,
                      len - (size_t)(end + 1 - buf));
        return len;
    }
    v = header_value(buf, len, "Content-Type", &vlen);
    if (v != NULL)
        r->text = vlen >= 10 && strncasecmp(v, "text/plain", 10) == 0;
    v = header_value(buf, len, "X-Hub-Id", &vlen);
    if (v != NULL)
        copy_line(r->id, sizeof(r->id), v, vlen);
    v = header_value(buf, len, "X-Hub-Channel", &vlen);
    if (v != NULL)
        copy_line(r->channel, sizeof(r->channel), v, vlen);
    v = header_value(buf, len, "X-Hub-Duplicate", &vlen);
    if (v != NULL)
        r->duplicate = vlen >= 1 && v[0] == '1';
    v = header_value(buf, len, "Retry-After", &vlen);
    if (v != NULL)
        r->retry_after_ms = parse_retry_after(v, vlen);
    return len;
}

/* Keeps the start of the body for messages; the rest is read and dropped
 * so the connection ends cleanly. */
static size_t
on_body(char *buf, size_t size, size_t nmemb, void *ud)
{
    struct reply *r = ud;
    size_t len = size * nmemb;
    size_t room = sizeof(r->body) - 1 - r->body_len;
    size_t k = len < room ? len : room;
    memcpy(r->body + r->body_len, buf, k);
    r->body_len += k;
    r->body[r->body_len] = '\0';
    return len;
}

enum outcome {
    OUT_ACCEPTED,
    OUT_REJECTED,      /* exit 1: retrying cannot help */
    OUT_RETRY,         /* transient: try again if retries are left */
    OUT_UNAVAILABLE,   /* exit 3 at once */
};

static enum outcome
classify(CURLcode cc, long status)
{
    /* The hub answered 4xx, then closed while the body was still going
     * out (e.g. 413): its answer counts, not the broken send. */
    if (status >= 400 && status < 500)
        return OUT_REJECTED;
    if (cc != CURLE_OK) {
        switch (cc) {
        case CURLE_COULDNT_RESOLVE_PROXY:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_CONNECT:
        case CURLE_OPERATION_TIMEDOUT:
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
            /* After a timeout or a broken read the hub may have stored
             * the notification already, so a retry can repeat it. That
             * is within the contract: delivery is at least once, and a
             * change announced twice only makes a subscriber look twice
             * (shared/PROTOCOL.md 4). Losing it would break the contract.
             * With --publish-id the retry is answered as a duplicate
             * instead, and nothing is repeated. */
            return OUT_RETRY;
        default:
            return OUT_UNAVAILABLE;   /* TLS trouble and the like */
        }
    }
    if (status >= 200 && status < 300)
        return OUT_ACCEPTED;
    /* 503 is the hub's "nothing stored, try again"; 502 and 504 come
     * from a proxy in front of a hub that is restarting. */
    if (status == 502 || status == 503 || status == 504)
        return OUT_RETRY;
    if (status >= 500)
        return OUT_UNAVAILABLE;
    return OUT_REJECTED;   /* 1xx/3xx: not an answer a hub gives */
}

/* "HTTP 403 Forbidden: error: wrong token", or curl's reason, for
 * messages. The body is the hub's one-line text/plain answer; anything
 * else (a proxy's or libevent's HTML page) would print as markup noise. */
static void
describe(CURLcode cc, const struct reply *r, char *buf, size_t sz)
{
    char line[512] = "";
    if (r->status == 0) {
        snprintf(buf, sz, "%s", r->curl_err[0] != '\0'
                                    ? r->curl_err : curl_easy_strerror(cc));
        return;
    }
    if (r->text)
        copy_line(line, sizeof(line), r->body, r->body_len);
    snprintf(buf, sz, "HTTP %ld%s%s%s%s", r->status,
             r->reason[0] != '\0' ? " " : "", r->reason,
             line[0] != '\0' ? ": " : "", line);
}

/* The wait after failed attempt n (1-based): never sooner than the hub's
 * Retry-After. */
static long
retry_delay_ms(struct rs_backoff *b, unsigned n, long retry_after_ms)
{
    long d = (long)rs_backoff_delay(b, n);
    return retry_after_ms > d ? retry_after_ms : d;
}

static void
sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static bool
slist_add(struct curl_slist **h, const char *line)
{
    struct curl_slist *t = curl_slist_append(*h, line);
    if (t == NULL)
        return false;
    *h = t;
    return true;
}

/* The request headers of docs/protocol.md 3. Expect: 100-continue stays
 * as curl sets it for large bodies: the hub checks Content-Length first,
 * so it refuses an oversized body before a byte of it is sent. */
static struct curl_slist *
headers_build(const char *token)
{
    struct curl_slist *h = NULL;
    char auth[RSPUB_TOKEN_MAX + 64];
    size_t n = strlen(conf.topic) + strlen(conf.hub) + 64;
    char *link = rs_malloc(n);
    bool ok = link != NULL;
    if (ok)
        snprintf(link, n, "Link: <%s>; rel=\"self\", <%s>; rel=\"hub\"",
                 conf.topic, conf.hub);
    ok = ok && slist_add(&h, "Content-Type: application/xml") &&
         slist_add(&h, "Accept: text/plain") && slist_add(&h, link);
    if (ok && publish_id[0] != '\0') {
        char pid[sizeof(RS_PUBID_HEADER) + 2 + RS_PUBID_BUFSZ];
        snprintf(pid, sizeof(pid), RS_PUBID_HEADER ": %s", publish_id);
        ok = slist_add(&h, pid);
    }
    if (ok && token[0] != '\0') {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        ok = slist_add(&h, auth);
        explicit_bzero(auth, sizeof(auth));
    }
    rs_free(link);
    if (!ok) {
        curl_slist_free_all(h);
        return NULL;
    }
    return h;
}

/* curl keeps its own copy of each header: wipe the token from it too. */
static void
headers_free(struct curl_slist *h)
{
    for (struct curl_slist *s = h; s != NULL; s = s->next)
        if (strncasecmp(s->data, "Authorization:", 14) == 0)
            explicit_bzero(s->data, strlen(s->data));
    curl_slist_free_all(h);
}

/* POST the document; report the outcome. Returns the exit status. */
static int
publish(const struct buf *doc, const char *token)
{
    int rc = RSPUB_UNAVAILABLE;
    struct reply *r = rs_calloc(1, sizeof(*r));
    struct curl_slist *hdrs = headers_build(token);
    CURL *c = curl_easy_init();
    if (r == NULL || hdrs == NULL || c == NULL) {
        fputs("rspub: out of memory\n", stderr);
        rc = RSPUB_REJECTED;
        goto out;
    }
    curl_easy_setopt(c, CURLOPT_URL, conf.hub);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, doc->p);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)doc->len);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "rspub/" RS_VERSION);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)conf.timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r->curl_err);

    /* Jitter, so that many scripts told "503" together do not come back
     * together: between half and all of 500 ms * 2^(n-1), at most 8 s. */
    struct rs_backoff backoff = { .first_ms = RSPUB_BACKOFF_MS,
                                  .max_ms = RSPUB_BACKOFF_MAX_MS,
                                  .below_pct = 50 };
    rs_backoff_seed(&backoff,
                    (uint64_t)rs_time_now() ^ ((uint64_t)getpid() << 32));
    unsigned attempts = (unsigned)conf.retries + 1;
    enum outcome o = OUT_UNAVAILABLE;
    CURLcode cc = CURLE_OK;
    char what[700];
    unsigned attempt;
    for (attempt = 1;; attempt++) {
        reply_reset(r);
        cc = curl_easy_perform(c);
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
        o = classify(cc, r->status);
        describe(cc, r, what, sizeof(what));
        if (conf.verbose)
            fprintf(stderr, "rspub: attempt %u of %u: %s\n", attempt,
                    attempts, what);
        if (o != OUT_RETRY || attempt == attempts)
            break;
        if (r->retry_after_ms > RSPUB_RETRY_AFTER_MAX_MS) {
            fprintf(stderr, "rspub: the hub asks to retry in %ld s; giving "
                    "up\n", r->retry_after_ms / 1000);
            break;
        }
        long delay = retry_delay_ms(&backoff, attempt, r->retry_after_ms);
        fprintf(stderr, "rspub: hub unavailable (%s); retrying in %.1f s\n",
                what, (double)delay / 1000.0);
        sleep_ms(delay);
    }

    switch (o) {
    case OUT_ACCEPTED: {
        /* The id is in X-Hub-Id; the body "accepted ID" says the same. */
        char id[128];
        snprintf(id, sizeof(id), "%s", r->id);
        if (id[0] == '\0' && strncmp(r->body, "accepted ", 9) == 0)
            copy_line(id, sizeof(id), r->body + 9, r->body_len - 9);
        if (id[0] == '\0' && strncmp(r->body, "duplicate ", 10) == 0)
            copy_line(id, sizeof(id), r->body + 10, r->body_len - 10);
        if (r->duplicate) {
            /* The hub says only that SEQ is not above the highest it holds
             * for KEY (equal: a resend; below: a different notification,
             * dropped), and ID is the highest's: say both cases. */
            const char *colon = strrchr(publish_id, ':');
            int klen = colon != NULL ? (int)(colon - publish_id) : 0;
            fprintf(stderr, "rspub: duplicate, not stored: the hub holds SEQ "
                    "%s or a higher one of KEY %.*s (its highest stored as "
                    "%s). Right for a resend; a different notification sent "
                    "with a SEQ not above one stored is lost: a KEY's SEQs "
                    "must increase\n", colon != NULL ? colon + 1 : "?",
                    klen, publish_id, id[0] != '\0' ? id : "an unknown id");
        }
        if (id[0] == '\0')
            fprintf(stderr, "rspub: accepted (HTTP %ld), but the hub gave no "
                    "id\n", r->status);
        else
            printf("%s\n", id);
        if (conf.verbose && r->channel[0] != '\0')
            fprintf(stderr, "rspub: channel %s\n", r->channel);
        rc = RSPUB_OK;
        break;
    }
    case OUT_REJECTED: {
        fprintf(stderr, "rspub: the hub refused the notification: %s\n", what);
        char *to = NULL;
        if (r->status >= 300 && r->status < 400 &&
            curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &to) == CURLE_OK &&
            to != NULL)
            /* a proxy's http -> https, say: sending the publish on to a
             * URL the answer names is the user's decision, not ours */
            fprintf(stderr, "rspub: the hub redirects to %s: a publish is "
                    "not sent on to another URL; give that URL as --hub\n",
                    to);
        else if (r->status == 413)
            fprintf(stderr, "rspub: the document is %zu bytes, more than the "
                    "hub takes (its --max-body): send its entries in several "
                    "notifications\n", doc->len);
        rc = RSPUB_REJECTED;
        break;
    }
    case OUT_RETRY:
    case OUT_UNAVAILABLE:
        fprintf(stderr, "rspub: hub unavailable: %s (%u attempt%s)\n", what,
                attempt, attempt == 1 ? "" : "s");
        rc = RSPUB_UNAVAILABLE;
        break;
    }
out:
    if (c != NULL)
        curl_easy_cleanup(c);
    headers_free(hdrs);
    rs_free(r);
    return rc;
}

/* ================================================================== main */

/* An absolute URI that fits between the Link header's angle brackets. */
static bool
topic_ok(const char *s)
{
    size_t scheme = strspn(s, "abcdefghijklmnopqrstuvwxyz"
                              "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.");
    if (scheme == 0 || s[scheme] != ':' || s[scheme + 1] == '\0' ||
        !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z')))
        return false;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p <= 0x20 || *p == 0x7f || *p == '<' || *p == '>' || *p == '"')
            return false;
    return true;
}

/* Which combinations of options make sense; 0 or RSPUB_USAGE (printed). */
static int
check_usage(const struct cmdline *cl, int nargs)
{
    bool build = cl->nentries > 0;
    if (nargs > 1) {
        usage_error("one FILE at most (got %d)", nargs);
        return RSPUB_USAGE;
    }
    if (build && nargs > 0) {
        usage_error("give a FILE or --change entries, not both");
        return RSPUB_USAGE;
    }
    if (!build && nargs == 0 && isatty(STDIN_FILENO)) {
        usage_error("no notification: give FILE, - (standard input) or "
                    "--change entries");
        return RSPUB_USAGE;
    }
    if (build && conf.up == NULL) {
        usage_error("a notification built from --change needs --up URL (its "
                    "Capability List: strict writing requires the "
                    "rel=\"up\" link)");
        return RSPUB_USAGE;
    }
    if (!conf.dry_run && (conf.hub == NULL || conf.topic == NULL)) {
        usage_error("--%s is required (or '%s = ...' in the config file)",
                    conf.hub == NULL ? "hub" : "topic",
                    conf.hub == NULL ? "hub" : "topic");
        return RSPUB_USAGE;
    }
    if (conf.hub != NULL && !rs_url_is_http(conf.hub)) {
        usage_error("--hub: expected an http(s) URL, got '%s'", conf.hub);
        return RSPUB_USAGE;
    }
    if (conf.publish_id != NULL) {
        struct rs_pubid pid;
        const char *why = NULL;
        if (rs_pubid_parse(conf.publish_id, &pid, &why) != 0) {
            usage_error("--publish-id: %s, got '%s'", why, conf.publish_id);
            return RSPUB_USAGE;
        }
        /* written the way the hub reads it (no blanks, no leading
         * zeros), for the header and the messages */
        if (rs_pubid_format(pid.key, pid.seq, publish_id,
                            sizeof(publish_id)) != 0) {
            usage_error("--publish-id: cannot use '%s'", conf.publish_id);
            return RSPUB_USAGE;
        }
    }
    if (conf.topic != NULL && !topic_ok(conf.topic)) {
        usage_error("--topic: expected an absolute URI without spaces, "
                    "quotes or angle brackets, got '%s'", conf.topic);
        return RSPUB_USAGE;
    }
    return RSPUB_OK;
}

int
main(int argc, char **argv)
{
    int rc = RSPUB_USAGE;
    struct cmdline cl;
    struct buf doc = { NULL, 0, 0 };
    struct rs_config *cfg = NULL;
    char token[RSPUB_TOKEN_MAX + 1] = "";
    bool curl_up = false;
    int argind = 0;
    memset(&cl, 0, sizeof(cl));

    int split = cmdline_split(argc, argv, &cl);
    const struct rs_config_info info = {
        .program = "rspub",
        .usage = usage_text,
        .opts = options,
    };
    cfg = rs_config_new(&info);
    if (split == RS_ENOMEM || cfg == NULL) {
        fputs("rspub: out of memory\n", stderr);
        rc = RSPUB_REJECTED;
        goto out;
    }
    int prc = rs_config_parse(cfg, cl.argc, cl.argv, &argind);
    if (prc == RS_CONFIG_WANT_HELP || prc == RS_CONFIG_WANT_VERSION) {
        prc = prc == RS_CONFIG_WANT_HELP ? rs_config_help(cfg, stdout)
                                         : rs_config_version(cfg, stdout);
        rc = prc == 0 ? RSPUB_OK : RSPUB_REJECTED;
        goto out;
    }
    if (split != 0) {
        usage_error("%s", cl.err);
        goto out;
    }
    if (prc != 0) {
        usage_error("%s", rs_config_errstr(cfg));
        goto out;
    }
    int nargs = cl.argc - argind;
    rc = check_usage(&cl, nargs);
    if (rc != 0)
        goto out;
    if (cl.nentries > 0) {
        rc = doc_build(&cl, &doc);
    } else {
        const char *name = nargs > 0 ? cl.argv[argind] : "-";
        rc = input_read(name, &doc);
        if (rc == 0)
            rc = input_validate(name, &doc);
    }
    if (rc != 0)
        goto out;

    if (conf.dry_run) {
        fwrite(doc.p, 1, doc.len, stdout);
        rc = RSPUB_OK;
        goto out;
    }
    rc = token_load(token, sizeof(token));
    if (rc != 0)
        goto out;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fputs("rspub: cannot initialise libcurl\n", stderr);
        rc = RSPUB_REJECTED;
        goto out;
    }
    curl_up = true;
    rc = publish(&doc, token);
out:
    explicit_bzero(token, sizeof(token));
    if (curl_up)
        curl_global_cleanup();
    rs_free(doc.p);
    rs_config_free(cfg);
    cmdline_cleanup(&cl);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "rspub: cannot write to stdout: %s\n",
                strerror(errno));
        if (rc == RSPUB_OK)
            rc = RSPUB_REJECTED;
    }
    return rc;
}
