/*
 * cbrecv.c - WebSub callback receiver for bench_websub.sh: N subscribers on
 * one libevent loop (evhttp), each listening on its own loopback address
 * (127.77.X.Y, own port, path /cb/I), so the hub treats them as N hosts. It
 * subscribes them at a hub, echoes the verification challenges, and answers
 * deliveries 204 (healthy), 500 (failing) or late / never (stalling). It
 * measures publish-to-callback latency from the send time wsload stamps in
 * every body, per group (healthy, bad), and counts repeats and X-Hub-Id
 * order. Figures come from a control listener (GET /stats) and at exit.
 *
 * Why evhttp and not a hand-written server like wsload's client: the hub is
 * what is measured and the receiver runs next to it, but a callback is an
 * ordinary HTTP/1.1 server and evhttp is what a small C subscriber would
 * use; its per-request cost (~10-20 us) is well under the hub's.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

/* The payload marker wsload writes in <loc>: seq and send time (us). */
#define MARK "/res/s"
#define SEQ_DIGITS 10
#define TS_DIGITS 16
#define SEQ_MAX (1u << 24)        /* larger seqs are counted as unparsed */
#define HELD_MAX 100000           /* stalled requests held at once */
#define SUB_CONNS 8               /* keep-alive connections to the hub */

enum mode { MODE_FAIL, MODE_STALL, MODE_OK };
/* G_ALL: both groups merged, in reports only */
enum { G_HEALTHY, G_BAD, G_N, G_ALL = G_N };

struct opts {
    unsigned subs, hosts;
    unsigned bad_pct;
    enum mode bad_mode;
    double stall;             /* stall: answer 204 after this; 0 = never */
    const char *net;          /* first two octets of the listen addresses */
    const char *hub;          /* subscribe at this hub URL */
    const char *topic;
    unsigned lease;
    const char *ready_file;
    double duration;          /* 0: until SIGTERM or GET /quit */
    const char *label;
};

static struct opts opt = {
    .subs = 1000,
    .bad_mode = MODE_FAIL,
    .net = "127.77",
    .topic = "http://bench.example.org/dataset1/changelist.xml",
    .label = "",
};

static uint64_t
now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ------------------------------------------------------------ histogram */

/* Log-linear buckets in microseconds, as in wsload.c: values below 128
 * exactly, above that 64 buckets per power of two (1.6 % resolution). */
#define HIST_SUB 64
#define HIST_N (2 * HIST_SUB + 57 * HIST_SUB)

struct hist {
    uint64_t b[HIST_N];
    uint64_t count, max;
};

static unsigned
hist_index(uint64_t v)
{
    if (v < 2 * HIST_SUB)
        return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);   /* >= 7 */
    unsigned shift = msb - 6;
    return 2 * HIST_SUB + (msb - 7) * HIST_SUB +
           (unsigned)((v >> shift) - HIST_SUB);
}

/* Highest value that lands in bucket i (reported figures err high). */
static uint64_t
hist_upper(unsigned i)
{
    if (i < 2 * HIST_SUB)
        return i;
    unsigned k = i - 2 * HIST_SUB;
    unsigned shift = 1 + k / HIST_SUB;
    uint64_t low = (uint64_t)(HIST_SUB + k % HIST_SUB) << shift;
    return low + ((uint64_t)1 << shift) - 1;
}

static void
hist_merge(struct hist *dst, const struct hist *src)
{
    for (unsigned i = 0; i < HIST_N; i++)
        dst->b[i] += src->b[i];
    dst->count += src->count;
    if (src->max > dst->max)
        dst->max = src->max;
}

static void
hist_add(struct hist *h, uint64_t v)
{
    h->b[hist_index(v)]++;
    h->count++;
    if (v > h->max)
        h->max = v;
}

/* Percentile p (0..100) in milliseconds; -1 when empty. */
static double
hist_pct(const struct hist *h, double p)
{
    if (h->count == 0)
        return -1;
    uint64_t want = (uint64_t)ceil((double)h->count * p / 100.0);
    if (want == 0)
        want = 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < HIST_N; i++) {
        seen += h->b[i];
        if (seen >= want) {
            uint64_t v = hist_upper(i);
            return (double)(v < h->max ? v : h->max) / 1000.0;
        }
    }
    return (double)h->max / 1000.0;
}

/* ------------------------------------------------------------- state */

struct cbsub {
    unsigned idx;
    int group;
    bool verified;            /* answered a subscribe challenge */
    bool reached;             /* at least one POST since start */
    uint64_t *bits;           /* measured seqs received */
    size_t words;
    uint64_t got;             /* distinct measured seqs */
    uint64_t ok_ms, ok_seq;   /* X-Hub-Id of the last POST answered 2xx */
    bool have_ok;
};

struct group {
    const char *name;
    unsigned subs;
    struct hist lat;          /* first arrival of each measured seq, us */
    uint64_t attempts;        /* every POST since the reset, any seq */
    uint64_t posts;           /* measured POSTs, every attempt */
    uint64_t delivered;       /* distinct measured seqs, over subscribers */
    uint64_t repeats;         /* measured POSTs of a seq already received */
    uint64_t dup_ids;         /* X-Hub-Id not above the last one acked */
    uint64_t no_id, unparsed, stale, warm;
    uint64_t ok, err, late;   /* answered 2xx, 5xx, 204 after a stall */
    uint64_t conns;           /* connections accepted since the reset */
    uint64_t conns_all;       /* ... since start */
    uint64_t first_ts, last_rx;
    struct evhttp *http;
};

struct held {
    struct evhttp_request *req;
    struct event *timer;      /* NULL: held until exit */
    struct held *prev, *next;
};

static struct event_base *base;
static struct cbsub *subs;
static struct group groups[G_N] = { { .name = "healthy" }, { .name = "bad" } };
static struct held *held_head;
static unsigned held_n;
static uint64_t held_max_seen, held_refused;
static uint64_t t_start, t_reset;
static uint64_t sub_sent, sub_ok, sub_err, verified, denied;
static int sub_err_code;
static struct evhttp_connection *sub_conns[SUB_CONNS];
static struct evhttp_uri *hub_uri;

/* Host h is bad when the spread of bad_pct over hosts puts one there:
 * floor((h+1)p/100) > floor(hp/100), so bad hosts are evenly spaced. */
static bool
host_is_bad(unsigned h)
{
    return ((h + 1) * opt.bad_pct) / 100 > (h * opt.bad_pct) / 100;
}

/* ------------------------------------------------------------- payload */

static bool
get_digits(const unsigned char *p, unsigned width, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < width; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    *out = v;
    return true;
}

/* seq and send time from wsload's marker: MARK seq "/t" ts */
static bool
body_mark(struct evbuffer *in, uint64_t *seq, uint64_t *ts)
{
    size_t need = strlen(MARK) + SEQ_DIGITS + 2 + TS_DIGITS;
    struct evbuffer_ptr p = evbuffer_search(in, MARK, strlen(MARK), NULL);
    if (p.pos < 0 || evbuffer_get_length(in) < (size_t)p.pos + need)
        return false;
    unsigned char buf[64];
    if (evbuffer_copyout_from(in, &p, buf, need) != (ev_ssize_t)need)
        return false;
    const unsigned char *d = buf + strlen(MARK);
    return get_digits(d, SEQ_DIGITS, seq) && d[SEQ_DIGITS] == '/' &&
           d[SEQ_DIGITS + 1] == 't' &&
           get_digits(d + SEQ_DIGITS + 2, TS_DIGITS, ts);
}

static bool
parse_hub_id(const char *s, uint64_t *ms, uint64_t *seq)
{
    char *end;
    errno = 0;
    unsigned long long a = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '-')
        return false;
    const char *b = end + 1;
    unsigned long long c = strtoull(b, &end, 10);
    if (errno != 0 || end == b || *end != '\0')
        return false;
    *ms = a;
    *seq = c;
    return true;
}

/* Mark seq received by s; false if it already was. */
static bool
sub_mark(struct cbsub *s, uint64_t seq)
{
    size_t w = (size_t)(seq / 64);
    if (w >= s->words) {
        size_t nw = s->words ? s->words : 64;
        while (nw <= w)
            nw *= 2;
        uint64_t *nb = realloc(s->bits, nw * sizeof(*nb));
        if (nb == NULL)
            return true;   /* out of memory: counted, not tracked */
        memset(nb + s->words, 0, (nw - s->words) * sizeof(*nb));
        s->bits = nb;
        s->words = nw;
    }
    uint64_t m = (uint64_t)1 << (seq % 64);
    bool was = (s->bits[w] & m) != 0;
    s->bits[w] |= m;
    return !was;
}

/* ------------------------------------------------------------- replies */

static void
reply_text(struct evhttp_request *req, int code, const char *reason,
           const char *text)
{
    struct evbuffer *b = evbuffer_new();
    if (b != NULL)
        evbuffer_add(b, text, strlen(text));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain");
    evhttp_send_reply(req, code, reason, b);
    if (b != NULL)
        evbuffer_free(b);
}

static void
held_unlink(struct held *h)
{
    if (h->prev != NULL)
        h->prev->next = h->next;
    else
        held_head = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
    held_n--;
    if (h->timer != NULL)
        event_free(h->timer);
    free(h);
}

/* A stalled delivery's time is up: answer it. If the hub gave up
 * meanwhile, libevent detached the request from its connection and the
 * reply just frees it. */
static void
on_stall_done(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct held *h = arg;
    groups[G_BAD].late++;
    evhttp_send_reply(h->req, 204, "No Content", NULL);
    held_unlink(h);
}

static void
hold(struct evhttp_request *req)
{
    struct held *h = calloc(1, sizeof(*h));
    if (h == NULL || held_n >= HELD_MAX) {
        free(h);
        held_refused++;
        evhttp_send_reply(req, 503, "Service Unavailable", NULL);
        return;
    }
    h->req = req;
    if (opt.stall > 0) {
        struct timeval tv = { (time_t)opt.stall,
                              (suseconds_t)((opt.stall - floor(opt.stall)) * 1e6) };
        h->timer = evtimer_new(base, on_stall_done, h);
        if (h->timer == NULL || evtimer_add(h->timer, &tv) != 0) {
            if (h->timer != NULL)
                event_free(h->timer);
            free(h);
            evhttp_send_reply(req, 204, "No Content", NULL);
            return;
        }
    }
    h->next = held_head;
    if (held_head != NULL)
        held_head->prev = h;
    held_head = h;
    if (++held_n > held_max_seen)
        held_max_seen = held_n;
}

/* ------------------------------------------------------------- callbacks */

static struct cbsub *
sub_of(const char *path)
{
    if (path == NULL || strncmp(path, "/cb/", 4) != 0)
        return NULL;
    char *end;
    errno = 0;
    unsigned long i = strtoul(path + 4, &end, 10);
    if (errno != 0 || end == path + 4 || *end != '\0' || i >= opt.subs)
        return NULL;
    return &subs[i];
}

/* GET: verification of intent, or a denial notice. */
static void
on_verify(struct evhttp_request *req, struct cbsub *s)
{
    const char *q = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    struct evkeyvalq kv;
    memset(&kv, 0, sizeof(kv));   /* empty; parse_query_str re-inits */
    if (q == NULL || evhttp_parse_query_str(q, &kv) != 0) {
        reply_text(req, 400, "Bad Request", "no query");
        evhttp_clear_headers(&kv);
        return;
    }
    const char *mode = evhttp_find_header(&kv, "hub.mode");
    const char *ch = evhttp_find_header(&kv, "hub.challenge");
    if (mode != NULL && strcmp(mode, "denied") == 0) {
        denied++;
        const char *why = evhttp_find_header(&kv, "hub.reason");
        fprintf(stderr, "cbrecv: subscription %u denied: %s\n", s->idx,
                why != NULL ? why : "?");
        reply_text(req, 200, "OK", "");
    } else if (mode == NULL || ch == NULL) {
        reply_text(req, 400, "Bad Request", "no hub.mode or hub.challenge");
    } else {
        if (strcmp(mode, "subscribe") == 0 && !s->verified) {
            s->verified = true;
            verified++;
        }
        reply_text(req, 200, "OK", ch);
    }
    evhttp_clear_headers(&kv);
}

/* POST: a delivery. */
static void
on_delivery(struct evhttp_request *req, struct cbsub *s)
{
    uint64_t now = now_us();
    struct group *g = &groups[s->group];
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    const char *idh = evhttp_find_header(evhttp_request_get_input_headers(req),
                                         "X-Hub-Id");
    uint64_t seq = 0, ts = 0, id_ms = 0, id_seq = 0;
    bool have_id = idh != NULL && parse_hub_id(idh, &id_ms, &id_seq);
    s->reached = true;
    g->attempts++;
    if (!have_id)
        g->no_id++;
    if (!body_mark(in, &seq, &ts) || seq >= SEQ_MAX) {
        g->unparsed++;
    } else if (seq == 0) {
        g->warm++;                /* wsload's warm-up publishes */
    } else if (ts < t_reset) {
        g->stale++;               /* published before the reset */
    } else {
        g->posts++;
        if (sub_mark(s, seq)) {
            s->got++;
            g->delivered++;
            hist_add(&g->lat, now > ts ? now - ts : 0);
            if (g->first_ts == 0 || ts < g->first_ts)
                g->first_ts = ts;
            if (now > g->last_rx)
                g->last_rx = now;
        } else {
            g->repeats++;
        }
    }
    bool ok = s->group == G_HEALTHY || opt.bad_mode == MODE_OK;
    if (!ok && opt.bad_mode == MODE_STALL) {
        hold(req);
        return;
    }
    if (have_id) {
        /* the hub re-sent, or sent out of order, what was acknowledged */
        if (ok && s->have_ok &&
            (id_ms < s->ok_ms || (id_ms == s->ok_ms && id_seq <= s->ok_seq)))
            g->dup_ids++;
        if (ok) {
            s->ok_ms = id_ms;
            s->ok_seq = id_seq;
            s->have_ok = true;
        }
    }
    if (ok) {
        g->ok++;
        evhttp_send_reply(req, 204, "No Content", NULL);
    } else {
        g->err++;
        reply_text(req, 500, "Internal Server Error", "failing on purpose");
    }
}

static void
on_request(struct evhttp_request *req, void *arg)
{
    (void)arg;
    struct cbsub *s = sub_of(evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req)));
    if (s == NULL) {
        reply_text(req, 404, "Not Found", "no such callback");
        return;
    }
    switch (evhttp_request_get_command(req)) {
    case EVHTTP_REQ_GET:
        on_verify(req, s);
        break;
    case EVHTTP_REQ_POST:
        on_delivery(req, s);
        break;
    default:
        reply_text(req, 405, "Method Not Allowed", "GET or POST");
        break;
    }
}

/* Every accepted connection makes its bufferevent here: count them. */
static struct bufferevent *
on_new_conn(struct event_base *b, void *arg)
{
    struct group *g = arg;
    g->conns++;
    g->conns_all++;
    return bufferevent_socket_new(b, -1, 0);
}

/* ------------------------------------------------------------- subscribe */

static void
on_subscribed(struct evhttp_request *req, void *arg)
{
    (void)arg;
    int code = req != NULL ? evhttp_request_get_response_code(req) : 0;
    if (code == 202) {
        sub_ok++;
        return;
    }
    if (sub_err++ == 0)
        sub_err_code = code;
    if (sub_err <= 3)
        fprintf(stderr, "cbrecv: subscribe answered %d\n", code);
}

static int
subscribe_all(const unsigned short *ports)
{
    hub_uri = evhttp_uri_parse(opt.hub);
    const char *host = hub_uri != NULL ? evhttp_uri_get_host(hub_uri) : NULL;
    int port = hub_uri != NULL ? evhttp_uri_get_port(hub_uri) : -1;
    const char *path = hub_uri != NULL ? evhttp_uri_get_path(hub_uri) : NULL;
    if (host == NULL || port <= 0) {
        fprintf(stderr, "cbrecv: --hub wants http://HOST:PORT/PATH\n");
        return -1;
    }
    if (path == NULL || *path == '\0')
        path = "/hub";
    for (unsigned i = 0; i < SUB_CONNS; i++) {
        sub_conns[i] = evhttp_connection_base_new(base, NULL, host,
                                                  (unsigned short)port);
        if (sub_conns[i] == NULL)
            return -1;
        evhttp_connection_set_timeout(sub_conns[i], 60);
    }
    char *etopic = evhttp_encode_uri(opt.topic);
    if (etopic == NULL)
        return -1;
    int rc = 0;
    for (unsigned i = 0; i < opt.subs && rc == 0; i++) {
        unsigned h = i % opt.hosts;
        char cb[128], hosthdr[300];
        snprintf(cb, sizeof(cb), "http://%s.%u.%u:%u/cb/%u", opt.net, h / 250,
                 h % 250 + 1, ports[h], i);
        char *ecb = evhttp_encode_uri(cb);
        struct evhttp_request *req = evhttp_request_new(on_subscribed, NULL);
        if (ecb == NULL || req == NULL) {
            free(ecb);
            if (req != NULL)
                evhttp_request_free(req);
            rc = -1;
            break;
        }
        struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
        snprintf(hosthdr, sizeof(hosthdr), "%s:%d", host, port);
        evhttp_add_header(oh, "Host", hosthdr);
        evhttp_add_header(oh, "Content-Type", "application/x-www-form-urlencoded");
        evbuffer_add_printf(evhttp_request_get_output_buffer(req),
                            "hub.mode=subscribe&hub.topic=%s&hub.callback=%s",
                            etopic, ecb);
        if (opt.lease > 0)
            evbuffer_add_printf(evhttp_request_get_output_buffer(req),
                                "&hub.lease_seconds=%u", opt.lease);
        free(ecb);
        if (evhttp_make_request(sub_conns[i % SUB_CONNS], req, EVHTTP_REQ_POST,
                                path) != 0)
            rc = -1;   /* libevent freed req */
        else
            sub_sent++;
    }
    free(etopic);
    return rc;
}

/* ------------------------------------------------------------- reporting */

/* Both groups' figures as one (latency histogram merged). */
static void
group_sum(struct group *all)
{
    memset(all, 0, sizeof(*all));
    all->name = "all";
    for (int gi = 0; gi < G_N; gi++) {
        const struct group *g = &groups[gi];
        all->subs += g->subs;
        hist_merge(&all->lat, &g->lat);
        all->attempts += g->attempts;
        all->posts += g->posts;
        all->delivered += g->delivered;
        all->repeats += g->repeats;
        all->dup_ids += g->dup_ids;
        all->no_id += g->no_id;
        all->unparsed += g->unparsed;
        all->stale += g->stale;
        all->warm += g->warm;
        all->ok += g->ok;
        all->err += g->err;
        all->late += g->late;
        all->conns += g->conns;
        all->conns_all += g->conns_all;
        if (g->first_ts != 0 && (all->first_ts == 0 || g->first_ts < all->first_ts))
            all->first_ts = g->first_ts;
        if (g->last_rx > all->last_rx)
            all->last_rx = g->last_rx;
    }
}

/* The measured seqs any subscriber received (seq 0 and seqs above expect,
 * if expect > 0, left out): what the hub must have stored. Caller frees. */
static uint64_t *
union_bits(uint64_t expect, size_t *nwords, uint64_t *count)
{
    size_t n = 0;
    for (unsigned i = 0; i < opt.subs; i++)
        if (subs[i].words > n)
            n = subs[i].words;
    if (expect > 0 && n > expect / 64 + 1)
        n = (size_t)(expect / 64 + 1);
    uint64_t *u = calloc(n ? n : 1, sizeof(*u));
    *nwords = 0;
    *count = 0;
    if (u == NULL)
        return NULL;
    for (unsigned i = 0; i < opt.subs; i++)
        for (size_t w = 0; w < n && w < subs[i].words; w++)
            u[w] |= subs[i].bits[w];
    if (n > 0)
        u[0] &= ~(uint64_t)1;
    if (expect > 0 && n > 0 && expect % 64 != 63)
        u[n - 1] &= ((uint64_t)1 << (expect % 64 + 1)) - 1;
    for (size_t w = 0; w < n; w++)
        *count += (uint64_t)__builtin_popcountll(u[w]);
    *nwords = n;
    return u;
}

/* One line per group (healthy, bad if any, all). "union" counts the seqs
 * that reached at least one subscriber; a subscriber's "missing" are the
 * seqs of that union it has not received (so a publish the hub refused and
 * never stored is missing for nobody; one it stored but delivered to no one
 * shows as union < the publisher's accepted count). */
static void
report(struct evbuffer *out, FILE *f, uint64_t expect)
{
    static struct group all;   /* large (histogram): not on the stack */
    size_t nu;
    uint64_t nunion;
    uint64_t *u = union_bits(expect, &nu, &nunion);
    group_sum(&all);
    for (int gi = 0; gi <= G_ALL; gi++) {
        struct group *g = gi == G_ALL ? &all : &groups[gi];
        if (g->subs == 0 && gi == G_BAD)
            continue;
        uint64_t nver = 0, nreach = 0, missing = 0, missing_subs = 0;
        for (unsigned i = 0; i < opt.subs; i++) {
            struct cbsub *s = &subs[i];
            if (gi != G_ALL && s->group != gi)
                continue;
            nver += s->verified;
            nreach += s->reached;
            uint64_t miss = 0;
            for (size_t w = 0; u != NULL && w < nu; w++)
                miss += (uint64_t)__builtin_popcountll(
                    u[w] & ~(w < s->words ? s->bits[w] : 0));
            missing += miss;
            missing_subs += miss > 0;
        }
        double secs = g->last_rx > g->first_ts
                          ? (double)(g->last_rx - g->first_ts) / 1e6 : 0;
        char line[1400];
        snprintf(line, sizeof(line),
                 "RESULT label=%s group=%s subs=%u verified=%" PRIu64
                 " reached=%" PRIu64 " attempts=%" PRIu64 " posts=%" PRIu64
                 " delivered=%" PRIu64
                 " deliveries_ps=%.0f union=%" PRIu64 " missing=%" PRIu64
                 " missing_subs=%" PRIu64 " repeats=%" PRIu64 " dup_ids=%"
                 PRIu64 " no_id=%" PRIu64 " unparsed=%" PRIu64 " stale=%" PRIu64
                 " warm=%" PRIu64 " ok=%" PRIu64 " err=%" PRIu64 " late=%" PRIu64
                 " held=%u held_max=%" PRIu64 " conns=%" PRIu64 " conns_all=%"
                 PRIu64 " p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f max_ms=%.3f"
                 " span_s=%.3f sub_sent=%" PRIu64 " sub_ok=%" PRIu64
                 " sub_err=%" PRIu64 " sub_err_code=%d denied=%" PRIu64
                 " verified_all=%" PRIu64 "\n",
                 opt.label[0] ? opt.label : "-", g->name, g->subs, nver, nreach,
                 g->attempts, g->posts, g->delivered, secs > 0 ? (double)g->delivered / secs : 0,
                 nunion, missing, missing_subs, g->repeats, g->dup_ids, g->no_id,
                 g->unparsed, g->stale, g->warm, g->ok, g->err, g->late,
                 gi != G_HEALTHY ? held_n : 0,
                 gi != G_HEALTHY ? held_max_seen : 0,
                 g->conns, g->conns_all, hist_pct(&g->lat, 50),
                 hist_pct(&g->lat, 99), hist_pct(&g->lat, 99.9),
                 (double)g->lat.max / 1000.0, secs, sub_sent, sub_ok, sub_err,
                 sub_err_code, denied, verified);
        if (out != NULL)
            evbuffer_add(out, line, strlen(line));
        if (f != NULL)
            fputs(line, f);
    }
    free(u);
}

/* Start a measurement: counters, histograms and seq maps cleared;
 * deliveries of what was published before now count as stale. */
static void
reset_stats(void)
{
    t_reset = now_us();
    for (int gi = 0; gi < G_N; gi++) {
        struct group *g = &groups[gi];
        memset(&g->lat, 0, sizeof(g->lat));
        g->attempts = g->posts = g->delivered = g->repeats = g->dup_ids = g->no_id = 0;
        g->unparsed = g->stale = g->warm = g->ok = g->err = g->late = 0;
        g->conns = 0;
        g->first_ts = g->last_rx = 0;
    }
    for (unsigned i = 0; i < opt.subs; i++) {
        if (subs[i].bits != NULL)
            memset(subs[i].bits, 0, subs[i].words * sizeof(uint64_t));
        subs[i].got = 0;
    }
}

/* Control: GET /stats[?expect=N], POST|GET /reset, GET /quit. */
static void
on_ctl(struct evhttp_request *req, void *arg)
{
    (void)arg;
    const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
    const char *path = evhttp_uri_get_path(u);
    const char *q = evhttp_uri_get_query(u);
    if (path == NULL) {
        reply_text(req, 404, "Not Found", "?");
    } else if (strcmp(path, "/stats") == 0) {
        uint64_t expect = 0;
        struct evkeyvalq kv;
        memset(&kv, 0, sizeof(kv));   /* empty; parse_query_str re-inits */
        if (q != NULL && evhttp_parse_query_str(q, &kv) == 0) {
            const char *e = evhttp_find_header(&kv, "expect");
            if (e != NULL)
                expect = strtoull(e, NULL, 10);
        }
        evhttp_clear_headers(&kv);
        if (expect >= SEQ_MAX)
            expect = SEQ_MAX - 1;
        struct evbuffer *b = evbuffer_new();
        if (b == NULL) {
            evhttp_send_reply(req, 500, "Internal Server Error", NULL);
            return;
        }
        report(b, NULL, expect);
        evhttp_send_reply(req, 200, "OK", b);
        evbuffer_free(b);
    } else if (strcmp(path, "/reset") == 0) {
        reset_stats();
        reply_text(req, 200, "OK", "reset\n");
    } else if (strcmp(path, "/quit") == 0) {
        reply_text(req, 200, "OK", "bye\n");
        event_base_loopexit(base, NULL);
    } else {
        reply_text(req, 404, "Not Found", "GET /stats, /reset or /quit\n");
    }
}

static void
on_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    event_base_loopexit(base, NULL);
}

/* ------------------------------------------------------------------ main */

static bool
parse_num(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static void
usage(FILE *f)
{
    fprintf(f,
"Usage: cbrecv [OPTION]...\n"
"WebSub callback receiver for hub benchmarks, loopback only. Subscriber I\n"
"is http://NET.X.Y:PORT/cb/I, host I %% HOSTS at NET.(H/250).(H%%250+1).\n"
"  --subs N            subscribers (default 1000)\n"
"  --hosts H           listening addresses (default: one per subscriber)\n"
"  --net A.B           first octets of the addresses (default 127.77)\n"
"  --bad-pct P         percent of hosts that misbehave (default 0)\n"
"  --bad-mode M        fail (answer 500), stall, or ok (answer 204 like the\n"
"                      others: a baseline for the same healthy group)\n"
"  --stall S           stall: answer 204 after S seconds (0: never)\n"
"  --hub URL           subscribe every callback at this hub (POST, form)\n"
"  --topic URI         hub.topic (default %s)\n"
"  --lease S           hub.lease_seconds (default: the hub's)\n"
"  --ready-file PATH   write 'ctl=PORT' here once listening\n"
"  --duration S        exit after S seconds (default: SIGTERM, GET /quit)\n"
"  --label TEXT        copied into the RESULT lines\n"
"Control on 127.0.0.1:ctl: GET /stats[?expect=N], GET /reset, GET /quit.\n"
"Prints one 'RESULT group=healthy|bad|all key=value ...' line per group at exit.\n",
            opt.topic);
}

static int
parse_args(int argc, char **argv)
{
    enum { O_SUBS = 256, O_HOSTS, O_NET, O_BADPCT, O_BADMODE, O_STALL, O_HUB,
           O_TOPIC, O_LEASE, O_READY, O_DURATION, O_LABEL, O_HELP };
    static const struct option lo[] = {
        { "subs", 1, NULL, O_SUBS }, { "hosts", 1, NULL, O_HOSTS },
        { "net", 1, NULL, O_NET }, { "bad-pct", 1, NULL, O_BADPCT },
        { "bad-mode", 1, NULL, O_BADMODE }, { "stall", 1, NULL, O_STALL },
        { "hub", 1, NULL, O_HUB }, { "topic", 1, NULL, O_TOPIC },
        { "lease", 1, NULL, O_LEASE }, { "ready-file", 1, NULL, O_READY },
        { "duration", 1, NULL, O_DURATION }, { "label", 1, NULL, O_LABEL },
        { "help", 0, NULL, O_HELP }, { NULL, 0, NULL, 0 },
    };
    int c;
    double v;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case O_SUBS:
            ok = parse_num(optarg, 1, 15000, &v);
            opt.subs = (unsigned)v;
            break;
        case O_HOSTS:
            ok = parse_num(optarg, 1, 15000, &v);
            opt.hosts = (unsigned)v;
            break;
        case O_NET: {
            unsigned a, b;
            char tail;
            ok = sscanf(optarg, "%u.%u%c", &a, &b, &tail) == 2 && a == 127 &&
                 b <= 255;
            opt.net = optarg;
            break;
        }
        case O_BADPCT:
            ok = parse_num(optarg, 0, 100, &v);
            opt.bad_pct = (unsigned)v;
            break;
        case O_BADMODE:
            if (strcmp(optarg, "fail") == 0)
                opt.bad_mode = MODE_FAIL;
            else if (strcmp(optarg, "stall") == 0)
                opt.bad_mode = MODE_STALL;
            else if (strcmp(optarg, "ok") == 0)
                opt.bad_mode = MODE_OK;
            else
                ok = false;
            break;
        case O_STALL: ok = parse_num(optarg, 0, 86400, &opt.stall); break;
        case O_HUB: opt.hub = optarg; break;
        case O_TOPIC: opt.topic = optarg; break;
        case O_LEASE:
            ok = parse_num(optarg, 1, 1e9, &v);
            opt.lease = (unsigned)v;
            break;
        case O_READY: opt.ready_file = optarg; break;
        case O_DURATION: ok = parse_num(optarg, 0, 86400, &opt.duration); break;
        case O_LABEL: opt.label = optarg; break;
        case O_HELP: usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
        if (!ok) {
            fprintf(stderr, "cbrecv: bad value for --%s: %s\n",
                    lo[c - O_SUBS].name, optarg);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "cbrecv: unexpected argument %s\n", argv[optind]);
        return -1;
    }
    if (opt.hosts == 0 || opt.hosts > opt.subs)
        opt.hosts = opt.subs;
    if (opt.hosts > 250 * 256) {
        fprintf(stderr, "cbrecv: at most %u hosts\n", 250 * 256);
        return -1;
    }
    return 0;
}

static int
bound_port(struct evhttp_bound_socket *bs)
{
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    if (getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&sa,
                    &sl) != 0)
        return -1;
    return ntohs(sa.sin_port);
}

int
main(int argc, char **argv)
{
    if (parse_args(argc, argv) != 0)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    int rc = 1, ctl_port = -1;
    struct evhttp_bound_socket *cbs;
    struct event *ev_term = NULL, *ev_int = NULL, *ev_dur = NULL;
    unsigned short *ports = calloc(opt.hosts, sizeof(*ports));
    subs = calloc(opt.subs, sizeof(*subs));
    base = event_base_new();
    if (ports == NULL || subs == NULL || base == NULL) {
        fprintf(stderr, "cbrecv: out of memory\n");
        return 1;
    }
    struct evhttp *ctl = evhttp_new(base);
    for (int gi = 0; gi < G_N; gi++) {
        struct group *g = &groups[gi];
        g->http = evhttp_new(base);
        if (g->http == NULL || ctl == NULL) {
            fprintf(stderr, "cbrecv: out of memory\n");
            return 1;
        }
        evhttp_set_gencb(g->http, on_request, g);
        evhttp_set_bevcb(g->http, on_new_conn, g);
        evhttp_set_timeout(g->http, 3600);   /* keep-alive: the hub decides */
        evhttp_set_allowed_methods(g->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST);
    }
    for (unsigned i = 0; i < opt.subs; i++) {
        subs[i].idx = i;
        subs[i].group = host_is_bad(i % opt.hosts) ? G_BAD : G_HEALTHY;
        groups[subs[i].group].subs++;
    }
    for (unsigned h = 0; h < opt.hosts; h++) {
        char addr[32];
        snprintf(addr, sizeof(addr), "%s.%u.%u", opt.net, h / 250, h % 250 + 1);
        struct evhttp *http = groups[host_is_bad(h) ? G_BAD : G_HEALTHY].http;
        struct evhttp_bound_socket *bs =
            evhttp_bind_socket_with_handle(http, addr, 0);
        int port = bs != NULL ? bound_port(bs) : -1;
        if (port <= 0) {
            fprintf(stderr, "cbrecv: cannot listen on %s: %s\n", addr,
                    strerror(errno));
            goto out;
        }
        ports[h] = (unsigned short)port;
    }
    evhttp_set_gencb(ctl, on_ctl, NULL);
    cbs = evhttp_bind_socket_with_handle(ctl, "127.0.0.1", 0);
    ctl_port = cbs != NULL ? bound_port(cbs) : -1;
    if (ctl_port <= 0) {
        fprintf(stderr, "cbrecv: cannot listen on 127.0.0.1\n");
        goto out;
    }
    ev_term = evsignal_new(base, SIGTERM, on_stop, NULL);
    ev_int = evsignal_new(base, SIGINT, on_stop, NULL);
    ev_dur = evtimer_new(base, on_stop, NULL);
    if (ev_term == NULL || ev_int == NULL || ev_dur == NULL ||
        event_add(ev_term, NULL) != 0 || event_add(ev_int, NULL) != 0)
        goto out;
    if (opt.duration > 0) {
        struct timeval tv = { (time_t)opt.duration,
                              (suseconds_t)((opt.duration - floor(opt.duration)) * 1e6) };
        if (evtimer_add(ev_dur, &tv) != 0)
            goto out;
    }
    t_start = t_reset = now_us();
    if (opt.hub != NULL && subscribe_all(ports) != 0) {
        fprintf(stderr, "cbrecv: cannot send the subscriptions\n");
        goto out;
    }
    if (opt.ready_file != NULL) {
        FILE *f = fopen(opt.ready_file, "w");
        if (f == NULL || fprintf(f, "ctl=%d\n", ctl_port) < 0 || fclose(f) != 0) {
            fprintf(stderr, "cbrecv: cannot write %s\n", opt.ready_file);
            goto out;
        }
    }
    fprintf(stderr, "cbrecv: %u subscribers (%u healthy, %u %s) on %u "
            "addresses %s.0.1.., control 127.0.0.1:%d\n", opt.subs,
            groups[G_HEALTHY].subs, groups[G_BAD].subs,
            opt.bad_mode == MODE_FAIL    ? "failing"
            : opt.bad_mode == MODE_STALL ? "stalling"
                                         : "bad-but-answering",
            opt.hosts,
            opt.net, ctl_port);
    event_base_dispatch(base);
    report(NULL, stdout, 0);
    fflush(stdout);
    rc = 0;
    /* Answer what is held (a detached request is just freed), then let
     * evhttp_free close the connections. */
    while (held_head != NULL) {
        struct held *h = held_head;
        evhttp_send_reply(h->req, 503, "Service Unavailable", NULL);
        held_unlink(h);
    }
out:
    if (ev_term != NULL)
        event_free(ev_term);
    if (ev_int != NULL)
        event_free(ev_int);
    if (ev_dur != NULL)
        event_free(ev_dur);
    for (unsigned i = 0; i < SUB_CONNS; i++)
        if (sub_conns[i] != NULL)
            evhttp_connection_free(sub_conns[i]);
    if (hub_uri != NULL)
        evhttp_uri_free(hub_uri);
    for (int gi = 0; gi < G_N; gi++)
        if (groups[gi].http != NULL)
            evhttp_free(groups[gi].http);
    if (ctl != NULL)
        evhttp_free(ctl);
    for (unsigned i = 0; i < opt.subs; i++)
        free(subs[i].bits);
    free(subs);
    free(ports);
    event_base_free(base);
    return rc;
}
