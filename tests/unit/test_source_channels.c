/* test_source_channels.c - learning the hub's channels (source/channels.c)
 * from a small programmable hub on loopback (an evhttp server on the same
 * loop): POST /topics for each topic (form, token), then the
 * capabilitylist-entries of each name it gave; the fallback to GET /topics
 * for a hub without POST /topics; a topic the hub refuses; a hub that is
 * down; an answer about another topic. Every test checks the advertised
 * set, counts on_change and on_settled (once), and ends with a loop that
 * holds nothing. */
#include "testutil.h"
#include "tu_httpd.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "channels.h"
#include "rs_http.h"

#define TOPIC_C "http://src.example/rs/changes"
#define TOPIC_F "http://src.example/rs/framework"
#define MAXREQ 16

struct req_seen {
    char method[8];
    char path[128];
    char body[256];
    char auth[64];
    char ctype[64];
};

struct fx {
    struct tu_loop loop;
    struct evhttp *srv;
    int port;
    char hub[64];
    struct rs_http *http;
    struct channels *ch;
    /* the fake hub's script */
    bool no_post;                   /* POST /topics: 405 (an older hub) */
    int post_status[2];             /* per kind (change, framework); 0: 200 */
    bool wrong_topic;               /* 200 naming another topic */
    /* what it saw */
    struct req_seen seen[MAXREQ];
    unsigned nseen;
    unsigned posts, lists, entries;
    /* what channels told */
    unsigned changes, settled;
};

static void
reply(struct evhttp_request *req, int status, const char *ctype,
      const char *body)
{
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    evbuffer_add(b, body, strlen(body));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      ctype);
    evhttp_send_reply(req, status, "Scripted", b);
    evbuffer_free(b);
}

static void
on_hub(struct evhttp_request *req, void *arg)
{
    struct fx *f = arg;
    struct req_seen *s = &f->seen[f->nseen < MAXREQ ? f->nseen : MAXREQ - 1];
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    const char *h, *path = evhttp_request_get_uri(req);
    bool post = evhttp_request_get_command(req) == EVHTTP_REQ_POST;
    char buf[512];

    f->nseen++;
    memset(s, 0, sizeof(*s));
    snprintf(s->method, sizeof(s->method), "%s", post ? "POST" : "GET");
    snprintf(s->path, sizeof(s->path), "%s", path);
    h = evhttp_find_header(in, "Authorization");
    snprintf(s->auth, sizeof(s->auth), "%s", h != NULL ? h : "");
    h = evhttp_find_header(in, "Content-Type");
    snprintf(s->ctype, sizeof(s->ctype), "%s", h != NULL ? h : "");
    struct evbuffer *b = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(b);
    assert_true(n < sizeof(s->body));
    evbuffer_copyout(b, s->body, n);

    if (post && strcmp(path, "/topics") == 0) {
        f->posts++;
        if (f->no_post) {
            reply(req, 405, "text/plain", "error: method not allowed\n");
            return;
        }
        struct evkeyvalq form;
        memset(&form, 0, sizeof(form));
        assert_int_equal(evhttp_parse_query_str(s->body, &form), 0);
        const char *topic = evhttp_find_header(&form, "topic");
        const char *kind = evhttp_find_header(&form, "kind");
        assert_non_null(topic);
        assert_non_null(kind);
        int k = strcmp(kind, "framework") == 0;
        int st = f->post_status[k] != 0 ? f->post_status[k] : 200;
        if (st != 200) {
            reply(req, st, "text/plain", "error: wrong token for this topic\n");
        } else {
            snprintf(buf, sizeof(buf),
                     "{\"name\": \"%s\", \"topic\": \"%s\", \"kind\": \"%s\"}",
                     k ? "fw" : "chg", f->wrong_topic ? "http://x.test/" : topic,
                     kind);
            reply(req, 200, "application/json", buf);
        }
        evhttp_clear_headers(&form);
        return;
    }
    if (!post && strcmp(path, "/topics") == 0) {
        f->lists++;
        reply(req, 200, "application/json",
              "[{\"name\": \"chg\", \"topic\": \"" TOPIC_C "\"},"
              " {\"name\": \"fw\", \"topic\": \"" TOPIC_F "\"},"
              " {\"name\": \"other\", \"topic\": \"http://x.test/\"}]");
        return;
    }
    const char *name = NULL;
    if (!post && strcmp(path, "/topics/chg/capabilitylist-entries") == 0)
        name = "chg";
    else if (!post && strcmp(path, "/topics/fw/capabilitylist-entries") == 0)
        name = "fw";
    if (name != NULL) {
        bool fw = strcmp(name, "fw") == 0;
        f->entries++;
        snprintf(buf, sizeof(buf),
                 "<url><loc>ws://127.0.0.1:9/channel/%s</loc>"
                 "<rs:md capability=\"%s\"/></url>\n"
                 "<url><loc>%s</loc><rs:md capability=\"%s\"/>"
                 "<rs:ln rel=\"hub\" href=\"http://hub.test/hub\"/></url>\n",
                 name, fw ? "framework-notification" : "change-notification",
                 fw ? TOPIC_F : TOPIC_C,
                 fw ? "framework-notification" : "changelist-notification");
        reply(req, 200, "application/xml", buf);
        return;
    }
    reply(req, 404, "text/plain", "error: no such resource\n");
}

static void
on_change(void *ud)
{
    ((struct fx *)ud)->changes++;
}

static void
on_settled(void *ud)
{
    ((struct fx *)ud)->settled++;
}

static int
fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    tu_loop_init(&f->loop);
    f->srv = evhttp_new(f->loop.base);
    assert_non_null(f->srv);
    evhttp_set_allowed_methods(f->srv, EVHTTP_REQ_GET | EVHTTP_REQ_POST);
    evhttp_set_gencb(f->srv, on_hub, f);
    f->port = tu_httpd_listen(f->srv);
    snprintf(f->hub, sizeof(f->hub), "http://127.0.0.1:%d/hub", f->port);
    f->http = rs_http_new(f->loop.base, NULL);
    assert_non_null(f->http);
    *state = f;
    return 0;
}

static int
fx_teardown(void **state)
{
    struct fx *f = *state;
    rs_http_free(f->http);
    channels_free(f->ch);
    evhttp_free(f->srv);
    tu_loop_cleanup(&f->loop);
    free(f);
    return 0;
}

/* Start channels against hub (NULL: the fake) and run until settled. */
static void
fx_run(struct fx *f, const char *hub, const char *token)
{
    struct channels_opts o = {
        .base = f->loop.base,
        .http = f->http,
        .hub = hub != NULL ? hub : f->hub,
        .topic = { TOPIC_C, TOPIC_F },
        .token = token,
        .on_change = on_change,
        .on_settled = on_settled,
        .ud = f,
    };
    const char *err = NULL;
    f->ch = channels_new(&o, &err);
    assert_non_null(f->ch);
    assert_null(err);
    channels_refresh(f->ch);
    TU_LOOP_UNTIL(&f->loop, f->settled > 0, 10000);
    tu_loop_run_for(&f->loop, 50);     /* nothing else is on its way */
    assert_int_equal(f->settled, 1);
}

/* "capability loc [hub]" of the advertised entry i. */
static const char *
entry(struct fx *f, size_t i)
{
    static char buf[256];
    size_t n = 0;
    const struct docs_channel *c = channels_get(f->ch, &n);
    if (i >= n)
        return "none";
    snprintf(buf, sizeof(buf), "%s %s%s%s",
             c[i].alpha ? "change-notification" : rs_capability_name(c[i].cap),
             c[i].loc, c[i].hub != NULL ? " " : "",
             c[i].hub != NULL ? c[i].hub : "");
    return buf;
}

static size_t
nentries(struct fx *f)
{
    size_t n = 0;
    (void)channels_get(f->ch, &n);
    return n;
}

/* channels/register_then_entries: one POST /topics per topic (a form with
 * the topic and its kind, the bearer token), then the entries of each name
 * the hub gave: both ws:// channels advertised, no GET /topics needed. */
static void
test_register(void **state)
{
    struct fx *f = *state;
    fx_run(f, NULL, "tok");
    assert_int_equal(f->posts, 2);
    assert_int_equal(f->lists, 0);
    assert_int_equal(f->entries, 2);
    assert_string_equal(f->seen[0].method, "POST");
    assert_string_equal(f->seen[0].path, "/topics");
    assert_string_equal(f->seen[0].body,
                        "topic=http%3A%2F%2Fsrc.example%2Frs%2Fchanges&kind=change");
    assert_string_equal(f->seen[0].ctype, "application/x-www-form-urlencoded");
    assert_string_equal(f->seen[0].auth, "Bearer tok");
    assert_string_equal(f->seen[1].body,
                        "topic=http%3A%2F%2Fsrc.example%2Frs%2Fframework&kind=framework");
    assert_string_equal(f->seen[2].path, "/topics/chg/capabilitylist-entries");
    assert_string_equal(f->seen[3].path, "/topics/fw/capabilitylist-entries");
    assert_int_equal(nentries(f), 4);
    assert_string_equal(entry(f, 0), "changelist-notification " TOPIC_C
                                     " http://hub.test/hub");
    assert_string_equal(entry(f, 1),
                        "change-notification ws://127.0.0.1:9/channel/chg");
    assert_string_equal(entry(f, 2), "framework-notification " TOPIC_F
                                     " http://hub.test/hub");
    assert_string_equal(entry(f, 3),
                        "framework-notification ws://127.0.0.1:9/channel/fw");
    assert_int_equal(f->changes, 2);
    /* asking again changes nothing */
    f->settled = 0;
    channels_refresh(f->ch);
    TU_LOOP_UNTIL(&f->loop, f->entries == 4, 10000);
    tu_loop_run_for(&f->loop, 50);
    assert_int_equal(f->posts, 4);
    assert_int_equal(f->changes, 2);
    assert_int_equal(f->settled, 0);   /* once only */
}

/* channels/old_hub_falls_back: a hub that answers POST /topics 405 (no
 * such endpoint) is asked GET /topics, as before: the same channels. */
static void
test_old_hub(void **state)
{
    struct fx *f = *state;
    f->no_post = true;
    fx_run(f, NULL, NULL);
    assert_int_equal(f->posts, 2);
    assert_int_equal(f->lists, 1);
    assert_int_equal(f->entries, 2);
    assert_string_equal(f->seen[0].auth, "");
    assert_int_equal(nentries(f), 4);
    assert_string_equal(entry(f, 1),
                        "change-notification ws://127.0.0.1:9/channel/chg");
    assert_string_equal(entry(f, 3),
                        "framework-notification ws://127.0.0.1:9/channel/fw");
    assert_int_equal(f->changes, 2);
}

/* channels/refused_topic: a topic the hub refuses (403: the token) gets no
 * channel, and is not looked up behind the hub's back; the other one does. */
static void
test_refused(void **state)
{
    struct fx *f = *state;
    f->post_status[0] = 403;
    fx_run(f, NULL, "wrong");
    assert_int_equal(f->posts, 2);
    assert_int_equal(f->lists, 0);
    assert_int_equal(f->entries, 1);
    assert_int_equal(nentries(f), 3);
    char want[256];
    snprintf(want, sizeof(want), "changelist-notification " TOPIC_C " %s",
             f->hub);
    assert_string_equal(entry(f, 0), want);
    assert_string_equal(entry(f, 2),
                        "framework-notification ws://127.0.0.1:9/channel/fw");
    assert_int_equal(f->changes, 1);
}

/* channels/hub_down_settles: nothing listens: the first round is over at
 * once (rssource serves), the configured WebSub entries stay advertised. */
static void
test_hub_down(void **state)
{
    struct fx *f = *state;
    fx_run(f, "http://127.0.0.1:1/hub", NULL);
    assert_int_equal(f->nseen, 0);
    assert_int_equal(f->changes, 0);
    assert_int_equal(nentries(f), 2);
    assert_string_equal(entry(f, 0), "changelist-notification " TOPIC_C
                                     " http://127.0.0.1:1/hub");
    assert_string_equal(entry(f, 1), "framework-notification " TOPIC_F
                                     " http://127.0.0.1:1/hub");
}

/* channels/answer_about_another_topic: a 200 naming another topic is not
 * taken: nothing is asked with that name, nothing advertised. */
static void
test_wrong_topic(void **state)
{
    struct fx *f = *state;
    f->wrong_topic = true;
    fx_run(f, NULL, NULL);
    assert_int_equal(f->posts, 1);
    assert_int_equal(f->entries, 0);
    assert_int_equal(f->changes, 0);
    assert_int_equal(nentries(f), 2);
}

#define TC(name, fn) { name, fn, fx_setup, fx_teardown, NULL }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TC("channels/register_then_entries", test_register),
        TC("channels/old_hub_falls_back", test_old_hub),
        TC("channels/refused_topic", test_refused),
        TC("channels/hub_down_settles", test_hub_down),
        TC("channels/answer_about_another_topic", test_wrong_topic),
    };
    return cmocka_run_group_tests_name("source_channels", tests, NULL, NULL);
}
