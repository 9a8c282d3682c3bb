#!/usr/bin/env python3
"""ui_check.py - the dashboards' checks in headless Chromium (browser.py),
for tests/integration/test_ui.sh. Each check prints one line, "ok   WHAT"
or "FAIL WHAT: WHY", which the test counts; the exit status is 1 when the
browser could not be driven at all.

  ui_check.py hub --url URL --tail NAME --touch FILE --loc URL
                  --xss-name NAME --xss-uri URI --shot PNG --tmp DIR
      rshub's /ui/: the page polls, tails NAME's channel (live), a new
      file written to FILE (rssource publishes it) appears in the tail
      with its URL (--loc) and the counters move; a topic URI holding
      markup (--xss-*) is shown as text, nothing of it runs or becomes an
      element; no Content-Security-Policy violation; a screenshot.
  ui_check.py private --url URL --tail NAME --token T --publish CMD --loc URL
                      --tmp DIR
      rshub's /ui/ on a hub whose topics are private: NAME is not listed
      without a token; with T typed in, it is, its tail opens live (the
      token as the rspush.bearer. subprotocol) and the notification CMD
      publishes appears in it.
  ui_check.py sub --url URL --touch FILE --loc URL --shot PNG --tmp DIR
      rssub's /ui/: the mirror is live, a file written to FILE appears
      among the recent changes (created) and the counter moves; a
      screenshot.
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from browser import Browser, BrowserError  # noqa: E402

failed = 0


def ok(what):
    print("ok   " + what, flush=True)


def bad(what, why):
    global failed
    failed += 1
    print("FAIL %s: %s" % (what, str(why).replace("\n", " ")[:600]), flush=True)


def check(what, fn):
    """ok when fn() returns without an exception (BrowserError, an
    assertion), else FAIL with the reason; fn's value."""
    try:
        v = fn()
        ok(what)
        return v
    except (BrowserError, AssertionError) as e:
        bad(what, e or "assertion")
        return None


def count(b, selector):
    return b.run("return document.querySelectorAll(arguments[0]).length;",
                 selector)


def number(b, id_):
    """A counter's figure (its text, thousands separators removed)."""
    t = b.run("const e = document.getElementById(arguments[0]);"
              "return e ? e.textContent : '';", id_)
    t = (t or "").replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


def touch(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def csp_violations(b):
    return [e.get("message", "") for e in b.console()
            if "Content Security Policy" in e.get("message", "")
            or "Content-Security-Policy" in e.get("message", "")]


def shot(b, path, what):
    def take():
        n = b.full_screenshot(path)
        with open(path, "rb") as f:
            head = f.read(8)
        assert head == b"\x89PNG\r\n\x1a\n", "not a PNG"
        assert n > 5000, "only %d bytes" % n
        return n
    n = check("%s: screenshot %s" % (what, os.path.basename(path)), take)
    if n:
        print("---- %s: %d bytes" % (path, n), flush=True)


def hub(b, a):
    b.get(a.url + "#tail=" + a.tail)
    check("hub page: loaded, polled /topics and /ui/node.json",
          lambda: b.wait("return +document.body.getAttribute('data-polls') >= 1", 15))
    check("hub page: the topic and its backlog are listed",
          lambda: b.wait("const r = document.querySelector("
                         "'#topics tr[data-name=\"' + arguments[0] + '\"]');"
                         "return r && r.cells.length >= 9 && /\\d/.test(r.cells[3].textContent);",
                         10, a.tail))
    check("hub page: the tail is live on the topic's WebSocket channel",
          lambda: b.wait("return document.getElementById('tail-state').textContent === 'live'",
                         10))
    check("hub page: the hub counts the page's WebSocket client",
          lambda: b.wait("const r = document.querySelector("
                         "'#topics tr[data-name=\"' + arguments[0] + '\"]');"
                         "return r && +r.cells[7].textContent >= 1;", 10, a.tail))
    acc0 = number(b, "c-accepted") or 0
    frames0 = number(b, "c-frames") or 0
    tail0 = count(b, "#tail li.note")
    touch(a.touch, "published while the dashboard watched\n")
    check("hub page: the new notification appears in the live tail",
          lambda: b.wait("for (const li of document.querySelectorAll('#tail li.note'))"
                         "  if (li.textContent.includes(arguments[0]) && li.dataset.id)"
                         "    return li.dataset.id;"
                         "return null;", 15, a.loc))
    check("hub page: one notification more in the tail",
          lambda: b.wait("return document.querySelectorAll('#tail li.note').length > arguments[0]",
                         5, tail0))
    check("hub page: accepted and WebSocket frame counters moved",
          lambda: b.wait("const n = id => +document.getElementById(id).textContent.replace(/,/g, '');"
                         "return n('c-accepted') > arguments[0] && n('c-frames') > arguments[1];",
                         10, acc0, frames0))
    # The chart's baseline is y = 124 (common.js): a point above it is
    # a rate above 0.
    check("hub page: the rate chart shows publishes and deliveries above 0",
          lambda: b.wait("const up = c => [...document.querySelectorAll('#chart polyline.' + c)]"
                         "  .some(p => p.getAttribute('points').split(' ')"
                         "    .some(xy => parseFloat(xy.split(',')[1]) < 123.5));"
                         "return up('s0') && up('s1');", 10))

    # Markup in a topic URI is text: shown as given, no element made of
    # it, nothing of it run (innerHTML would make the <img>, whose
    # onerror the policy would block but the DOM would still show).
    def xss():
        r = b.wait("return document.querySelector('#topics tr[data-name=\"' + arguments[0] + '\"]')"
                   " !== null", 10, a.xss_name)
        assert r
        cell = b.run("return document.querySelector('#topics tr[data-name=\"' +"
                     " arguments[0] + '\"]').cells[1].textContent;", a.xss_name)
        assert cell == a.xss_uri, "cell shows %r" % cell
        n = count(b, "#topics script, #topics img, #websub script, #websub img, "
                     "#tail script, #tail img, select script")
        assert n == 0, "%d elements made from data" % n
        pwned = b.run("return window.__pwned === undefined ? null : String(window.__pwned);")
        assert pwned is None, "a script from the data ran: %r" % pwned
    check("hub page: a topic URI holding <script> and <img onerror> is rendered as text", xss)
    v = csp_violations(b)
    if v:
        bad("hub page: no Content-Security-Policy violation", "; ".join(v[:3]))
    else:
        ok("hub page: no Content-Security-Policy violation")
    # a few more polls, so that the chart in the picture has a shape
    check("hub page: still polling", lambda: b.wait(
        "return +document.body.getAttribute('data-polls') >= 5", 12))
    shot(b, a.shot, "hub page")


def private(b, a):
    row = "return document.querySelector('#topics tr[data-name=\"' + arguments[0] + '\"]') !== null;"
    b.get(a.url)
    check("private hub page: loaded and polled",
          lambda: b.wait("return +document.body.getAttribute('data-polls') >= 2", 15))

    def hidden():
        assert not b.run(row, a.tail), "listed"
        assert b.run("return document.querySelector('#topics td.empty') !== null;")
    check("private hub page: without a token the private topic is not listed", hidden)
    b.run("document.getElementById('token').value = arguments[0];"
          "document.getElementById('token-use').click();", a.token)
    check("private hub page: with the read token typed in, it is listed",
          lambda: b.wait(row, 10, a.tail))
    b.run("document.querySelector('#topics button[data-name=\"' + arguments[0] + '\"]').click();",
          a.tail)
    check("private hub page: its tail is live (token as the rspush.bearer. subprotocol)",
          lambda: b.wait("return document.getElementById('tail-state').textContent === 'live'", 10))
    r = subprocess.run(a.publish, shell=True, capture_output=True, timeout=20)
    if r.returncode != 0:
        bad("private hub page: publish", r.stderr.decode(errors="replace")[-300:])
    check("private hub page: the notification appears in the tail",
          lambda: b.wait("return [...document.querySelectorAll('#tail li.note')]"
                         ".some(li => li.textContent.includes(arguments[0]))", 10, a.loc))
    check("private hub page: the token stays out of the page's URL",
          lambda: b.wait("return !location.href.includes(arguments[0])", 1, a.token))


def sub(b, a):
    b.get(a.url)
    check("rssub page: loaded, polled /status.json",
          lambda: b.wait("return +document.body.getAttribute('data-polls') >= 1", 15))
    check("rssub page: the session is ready",
          lambda: b.wait("return document.getElementById('state').textContent === 'ready'", 10))
    check("rssub page: the Capability List's mirror is live (push channel up)",
          lambda: b.wait("return document.querySelector('#lists td.mode[data-mode=\"live\"]') !== null",
                         15))
    created0 = number(b, "c-created") or 0
    touch(a.touch, "mirrored while the dashboard watched\n")
    check("rssub page: the change appears among the recent changes, created",
          lambda: b.wait("for (const tr of document.querySelectorAll('#recent tbody tr'))"
                         "  if (tr.cells.length >= 3 && tr.cells[2].textContent === arguments[0]"
                         "      && tr.cells[1].textContent === 'created') return true;"
                         "return false;", 20, a.loc))
    check("rssub page: the created counter moved",
          lambda: b.wait("return +document.getElementById('c-created').textContent.replace(/,/g, '')"
                         " > arguments[0]", 10, created0))
    check("rssub page: no resource failed, lag back to 0",
          lambda: b.wait("return document.getElementById('c-failed').textContent === '0' &&"
                         " document.getElementById('c-lag').textContent === '0'", 10))
    v = csp_violations(b)
    if v:
        bad("rssub page: no Content-Security-Policy violation", "; ".join(v[:3]))
    else:
        ok("rssub page: no Content-Security-Policy violation")
    check("rssub page: still polling", lambda: b.wait(
        "return +document.body.getAttribute('data-polls') >= 5", 12))
    shot(b, a.shot, "rssub page")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("page", choices=["hub", "private", "sub", "check"])
    p.add_argument("--url")
    p.add_argument("--tail")
    p.add_argument("--touch")
    p.add_argument("--loc")
    p.add_argument("--xss-name")
    p.add_argument("--xss-uri")
    p.add_argument("--shot")
    p.add_argument("--token")
    p.add_argument("--publish")
    p.add_argument("--tmp", default="/tmp")
    a = p.parse_args()
    if a.page == "check":
        why = Browser.available()
        print(why or "ok")
        return 1 if why else 0
    try:
        with Browser(os.path.join(a.tmp, "browser-" + a.page)) as b:
            {"hub": hub, "private": private, "sub": sub}[a.page](b, a)
    except BrowserError as e:
        bad("the browser runs", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
