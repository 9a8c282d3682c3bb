#!/usr/bin/python3
"""hubtool.py - the Python side of the rshub integration tests.

Small, single-purpose subcommands that the test_hub_*.sh scripts drive:
HTTP requests and publish floods (http.client, keep-alive), WebSocket
subscribers (asyncio + websockets 10.4, Debian's python3-websockets) that
log what they see as JSON lines, a raw never-reading WebSocket client for
the slow-consumer test, and the checks that compare what was acknowledged
with what was delivered. Every wait has a timeout; loopback only.

Run with Debian's /usr/bin/python3 (the one python3-websockets is for).
"""
import argparse
import http.client
import json
import os
import re
import socket
import sys
import threading
import time
import xml.etree.ElementTree as ET

HUB_NS = "urn:x-rshub:1"
SM_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
RS_NS = "http://www.openarchives.org/rs/terms/"
ANN_RE = re.compile(r' xmlns:hub="urn:x-rshub:1" hub:id="([0-9]+-[0-9]+)"')


def annotation(hid):
    """The exact bytes docs/protocol.md section 2 says the hub inserts."""
    return ' xmlns:hub="%s" hub:id="%s"' % (HUB_NS, hid)


def id_key(hid):
    ms, _, seq = hid.partition("-")
    return (int(ms), int(seq or 0))


def die(msg, rc=1):
    print("hubtool: " + msg, file=sys.stderr)
    sys.exit(rc)


def write_atomic(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


# ------------------------------------------------------------- documents

def gen_doc(kind, n, pad=0):
    """A valid notification of kind change/framework/resourcelist; n makes
    it unique; pad grows it (more entries) to at least pad bytes."""
    head = ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<urlset xmlns="%s"\n        xmlns:rs="%s">\n'
            '  <rs:ln rel="up" href="http://example.com/dataset1/capabilitylist.xml"/>\n'
            % (SM_NS, RS_NS))
    if kind == "change":
        head += '  <rs:md capability="changelist-notification"/>\n'
    elif kind == "framework":
        head += '  <rs:md capability="framework-notification"/>\n'
    elif kind == "resourcelist":
        head += '  <rs:md capability="resourcelist" at="2024-01-01T00:00:00Z"/>\n'
    else:
        die("unknown kind " + kind, 2)
    tail = "</urlset>\n"

    def entry(i):
        if kind == "change":
            return ('  <url>\n    <loc>http://example.com/res/%d/%d</loc>\n'
                    '    <lastmod>2024-01-02T03:04:05Z</lastmod>\n'
                    '    <rs:md change="updated" datetime="2024-01-02T03:04:05Z"'
                    ' length="%d" type="text/plain"/>\n  </url>\n' % (n, i, n))
        if kind == "framework":
            return ('  <url>\n    <loc>http://example.com/dataset1/changelist-%d-%d.xml</loc>\n'
                    '    <rs:md capability="changelist" change="updated"'
                    ' datetime="2024-01-02T03:04:05Z"/>\n  </url>\n' % (n, i))
        return ('  <url>\n    <loc>http://example.com/res/%d/%d</loc>\n'
                '    <lastmod>2024-01-02T03:04:05Z</lastmod>\n  </url>\n' % (n, i))

    body = [head, entry(0)]
    size = len(head) + len(body[1]) + len(tail)
    i = 1
    while size < pad:
        e = entry(i)
        body.append(e)
        size += len(e)
        i += 1
    body.append(tail)
    return "".join(body).encode()


def cmd_gen(a):
    sys.stdout.buffer.write(gen_doc(a.kind, a.n, a.pad))


# ------------------------------------------------------------------ HTTP

def http_request(port, method, path, body=None, headers=None, timeout=10.0):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        return r.status, r.getheaders(), data
    finally:
        c.close()


def publish_headers(a):
    h = {}
    if a.ctype != "none":
        h["Content-Type"] = a.ctype
    if getattr(a, "no_link", False):
        pass
    elif a.link:
        h["Link"] = a.link
    elif a.topic:
        h["Link"] = '<%s>; rel="self"' % a.topic
    if getattr(a, "auth", None):
        h["Authorization"] = a.auth
    elif a.token:
        h["Authorization"] = "Bearer " + a.token
    for hv in getattr(a, "header", None) or []:
        name, _, value = hv.partition(":")
        h[name.strip()] = value.strip()
    return h


def cmd_request(a):
    """One request; prints STATUS, the headers, a blank line, the body."""
    body = None
    if a.file:
        with open(a.file, "rb") as f:
            body = f.read()
    elif a.data is not None:
        body = a.data.encode()
    elif a.gen:
        body = gen_doc(a.gen, a.n, a.pad)
    headers = publish_headers(a)
    if a.announce is not None:
        # Announce a big body and send none: the hub must answer from the
        # headers alone (docs/protocol.md 3: Content-Length checked first).
        s = socket.create_connection(("127.0.0.1", a.http), timeout=a.timeout)
        req = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n" % (
            a.method, a.path, a.announce)
        for k, v in headers.items():
            req += "%s: %s\r\n" % (k, v)
        s.sendall((req + "\r\n").encode())
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        except socket.timeout:
            die("no answer within %.1fs to an announced %d-byte body"
                % (a.timeout, a.announce))
        s.close()
        head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        print(head[0].split(" ")[1] if head and " " in head[0] else "000")
        for line in head[1:]:
            print(line)
        print()
        return
    try:
        st, hdrs, data = http_request(a.http, a.method, a.path, body, headers,
                                      a.timeout)
    except (OSError, http.client.HTTPException) as e:
        print("000")
        print()
        print("error: %s" % e)
        return
    print(st)
    for k, v in hdrs:
        print("%s: %s" % (k, v))
    print()
    sys.stdout.write(data.decode("utf-8", "replace"))


def cmd_hangup(a):
    """Send a whole publish request, then hang up after wait seconds
    without reading the answer."""
    body = gen_doc(a.kind, a.n, 0)
    h = publish_headers(a)
    req = "POST /hub HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n" % len(body)
    for k, v in h.items():
        req += "%s: %s\r\n" % (k, v)
    s = socket.create_connection(("127.0.0.1", a.http), timeout=a.timeout)
    s.sendall(req.encode() + b"\r\n" + body)
    time.sleep(a.wait)
    s.close()


class Flood:
    """count publishes over conns keep-alive connections; records every
    acknowledged id (X-Hub-Id) and every failure."""

    def __init__(self, a):
        self.a = a
        self.next = 0
        self.lock = threading.Lock()
        self.acked = []
        self.errors = []
        self.status = {}
        self.t0 = time.monotonic()

    def take(self):
        with self.lock:
            if self.next >= self.a.count:
                return None
            k = self.next
            self.next += 1
        if self.a.rate:
            # paced: publish k is due k/rate seconds after the start
            due = self.t0 + k / self.a.rate
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
        return self.a.start + k

    def worker(self):
        a = self.a
        conn = None
        headers = publish_headers(a)
        deadline = time.monotonic() + a.timeout
        while time.monotonic() < deadline:
            n = self.take()
            if n is None:
                break
            body = gen_doc(a.kind, n, a.pad)
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", a.http,
                                                      timeout=10)
                conn.request("POST", "/hub", body=body, headers=headers)
                r = conn.getresponse()
                r.read()
                hid = r.getheader("X-Hub-Id")
                with self.lock:
                    self.status[r.status] = self.status.get(r.status, 0) + 1
                    if r.status == 202 and hid:
                        self.acked.append(hid)
                    else:
                        self.errors.append("n=%d status %d" % (n, r.status))
                if r.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as e:
                with self.lock:
                    self.errors.append("n=%d %s: %s" % (n, type(e).__name__, e))
                if conn is not None:
                    conn.close()
                conn = None
                if a.stop_on_error:
                    break
                time.sleep(0.01)
        if conn is not None:
            conn.close()


def cmd_flood(a):
    fl = Flood(a)
    threads = [threading.Thread(target=fl.worker) for _ in range(a.conns)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.monotonic() - t0
    acked = sorted(fl.acked, key=id_key)
    with open(a.out, "w") as f:
        for hid in acked:
            f.write(hid + "\n")
    print("flood: %d acked, %d failed, %.1fs, statuses %s"
          % (len(acked), len(fl.errors), dt, json.dumps(fl.status)))
    for e in fl.errors[:5]:
        print("  " + e)
    if len(set(acked)) != len(acked):
        die("the hub acknowledged the same id twice")
    if fl.errors and not a.allow_errors:
        sys.exit(1)


def cmd_publish_many(a):
    """Publish each FILE once, in order, one connection; print 'ID FILE'."""
    headers = publish_headers(a)
    conn = http.client.HTTPConnection("127.0.0.1", a.http, timeout=a.timeout)
    bad = 0
    for path in a.files:
        with open(path, "rb") as f:
            body = f.read()
        conn.request("POST", "/hub", body=body, headers=headers)
        r = conn.getresponse()
        r.read()
        if r.status != 202:
            print("status %d for %s" % (r.status, path), file=sys.stderr)
            bad += 1
            continue
        print("%s %s" % (r.getheader("X-Hub-Id"), path))
    conn.close()
    sys.exit(1 if bad else 0)


def get_json(port, path, timeout=10.0):
    st, _, data = http_request(port, "GET", path, timeout=timeout)
    if st != 200:
        raise RuntimeError("GET %s: %d" % (path, st))
    return json.loads(data)


def topic_entry(port, name):
    for t in get_json(port, "/topics"):
        if t.get("name") == name:
            return t
    return None


def cmd_topic(a):
    """Print a field of one topic from GET /topics (dotted path)."""
    t = topic_entry(a.http, a.name)
    if t is None:
        die("no topic %s in GET /topics" % a.name)
    v = t
    for part in a.get.split("."):
        v = v[part]
    print(json.dumps(v) if isinstance(v, (dict, list)) or v is None else v)


def cmd_wait_subs(a):
    """Wait until GET /topics shows at least n subscribers on name (a
    subscriber is counted once the hub attached it to the channel); with
    --exact, exactly n."""
    deadline = time.monotonic() + a.timeout
    last = None
    while time.monotonic() < deadline:
        try:
            t = topic_entry(a.http, a.name)
            last = t
            subs = t.get("subscribers", 0) if t is not None else -1
            if (subs == a.n) if a.exact else (subs >= a.n):
                return
        except (OSError, RuntimeError, ValueError) as e:
            last = str(e)
        time.sleep(0.05)
    die("timeout: %s has not %d subscribers (last: %s)" % (a.name, a.n, last))


def cmd_topics_check(a):
    """GET /topics is a JSON array of objects with the fields of
    docs/protocol.md 6; the one named name has the given topic URI, kind,
    WebSocket and hub URIs, and a backlog holding exactly the ids of the
    PAIRS files (first/last), and optionally that many subscribers."""
    arr = get_json(a.http, "/topics")
    problems = []
    if not isinstance(arr, list):
        die("GET /topics is not a JSON array: %r" % (arr,))
    want_keys = {"name": str, "topic": str, "kind": str, "websocket": str,
                 "hub": str, "backlog": dict, "subscribers": int}
    for t in arr:
        for k, typ in want_keys.items():
            if k not in t:
                problems.append("%s: no field %s" % (t.get("name"), k))
            elif not isinstance(t[k], typ) or isinstance(t[k], bool):
                problems.append("%s: %s is %r" % (t.get("name"), k, t[k]))
        bl = t.get("backlog") or {}
        for k in ("length", "first_id", "last_id"):
            if k not in bl:
                problems.append("%s: no field backlog.%s" % (t.get("name"), k))
        if t.get("kind") not in ("change", "framework"):
            problems.append("%s: kind %r" % (t.get("name"), t.get("kind")))
    t = [x for x in arr if x.get("name") == a.name]
    if len(t) != 1:
        die("%d topics named %s; %s" % (len(t), a.name, "; ".join(problems)))
    t = t[0]
    ids = []
    for p in a.pairs:
        ids.extend(read_ids(p))
    ids.sort(key=id_key)

    def want(field, got, exp):
        if got != exp:
            problems.append("%s: %s is %r, want %r" % (a.name, field, got, exp))
    want("topic", t.get("topic"), a.uri)
    want("kind", t.get("kind"), a.kind)
    want("websocket", t.get("websocket"),
         "ws://127.0.0.1:%d/channel/%s" % (a.ws, a.name))
    want("hub", t.get("hub"), "http://127.0.0.1:%d/hub" % a.http)
    bl = t.get("backlog") or {}
    want("backlog.length", bl.get("length"), len(ids))
    if ids:
        want("backlog.first_id", bl.get("first_id"), ids[0])
        want("backlog.last_id", bl.get("last_id"), ids[-1])
    if a.subscribers is not None:
        want("subscribers", t.get("subscribers"), a.subscribers)
    if problems:
        die("; ".join(problems))
    print("ok: %s" % json.dumps(t))


def cmd_wait_status(a):
    """Wait until GET path answers status."""
    deadline = time.monotonic() + a.timeout
    last = None
    while time.monotonic() < deadline:
        try:
            st, _, _ = http_request(a.http, "GET", a.path, timeout=2)
            last = st
            if st == a.status:
                return
        except (OSError, http.client.HTTPException) as e:
            last = str(e)
        time.sleep(0.1)
    die("timeout: GET %s never answered %d (last: %s)" % (a.path, a.status, last))


PROM_LINE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)'
    r'(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"'
    r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*")*,?)?\})?'
    r' ([-+]?(?:[0-9.]+(?:[eE][-+]?[0-9]+)?|NaN|\+Inf|-Inf))( -?[0-9]+)?$')


def parse_metrics(text):
    """Prometheus text format 0.0.4: every line a comment (# HELP/# TYPE),
    blank, or `name{labels} value`. Returns {series: value}."""
    out = {}
    for i, line in enumerate(text.split("\n"), 1):
        if line == "" or line.startswith("#"):
            if line.startswith("# TYPE "):
                parts = line.split(" ")
                if len(parts) != 4 or parts[3] not in (
                        "counter", "gauge", "histogram", "summary", "untyped"):
                    raise ValueError("line %d: bad TYPE: %r" % (i, line))
            continue
        m = PROM_LINE.match(line)
        if not m:
            raise ValueError("line %d: not `name{labels} value`: %r" % (i, line))
        out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def cmd_metrics(a):
    st, hdrs, data = http_request(a.http, "GET", "/metrics")
    if st != 200:
        die("GET /metrics: %d" % st)
    try:
        m = parse_metrics(data.decode())
    except ValueError as e:
        die("GET /metrics: %s" % e)
    if a.get:
        if a.get not in m:
            die("no series %s in /metrics" % a.get)
        v = m[a.get]
        print(int(v) if v == int(v) else v)
    else:
        print("%d series" % len(m))


def cmd_wait_metric(a):
    """Wait until a /metrics series is >= min."""
    deadline = time.monotonic() + a.timeout
    v = None
    while time.monotonic() < deadline:
        try:
            st, _, data = http_request(a.http, "GET", "/metrics", timeout=2)
            v = parse_metrics(data.decode()).get(a.get)
            if v is not None and v >= a.min:
                return
        except (OSError, ValueError, http.client.HTTPException):
            pass
        time.sleep(0.05)
    die("timeout: %s is %s, want >= %s" % (a.get, v, a.min))


def cmd_caplist(a):
    """Wrap GET /topics/NAME/capabilitylist-entries in a <urlset> with the
    namespaces, parse it and print one line per entry: LOC CAPABILITY HUB."""
    st, hdrs, data = http_request(a.http, "GET",
                                  "/topics/%s/capabilitylist-entries" % a.name)
    if st != 200:
        die("status %d" % st)
    doc = ('<urlset xmlns="%s" xmlns:rs="%s">\n' % (SM_NS, RS_NS)).encode() \
        + data + b"</urlset>\n"
    root = ET.fromstring(doc)
    for u in root.findall("{%s}url" % SM_NS):
        loc = u.findtext("{%s}loc" % SM_NS)
        md = u.find("{%s}md" % RS_NS)
        hub = "-"
        for ln in u.findall("{%s}ln" % RS_NS):
            if ln.get("rel") == "hub":
                hub = ln.get("href")
        print("%s %s %s" % (loc, md.get("capability") if md is not None else "-",
                            hub))


# ------------------------------------------------------------- WebSocket

async def subscribe(a, out):
    import asyncio
    import websockets
    uri = "ws://127.0.0.1:%d/channel/%s" % (a.ws, a.chan)
    if a.since is not None:
        uri += "?since=" + a.since
    got = 0
    deadline = time.monotonic() + a.timeout

    def log(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    extra = {}
    if a.rcvbuf:
        # a roomy receive buffer: a client that briefly loses the CPU on a
        # loaded machine does not look like a slow consumer to the hub
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, a.rcvbuf)
        s.settimeout(10)
        s.connect(("127.0.0.1", a.ws))
        s.setblocking(False)
        extra["sock"] = s
    try:
        ws = await asyncio.wait_for(
            websockets.connect(uri, max_size=None, ping_interval=None,
                               close_timeout=2, max_queue=None, **extra),
            timeout=10)
    except Exception as e:  # handshake refused, timeout, ...
        log({"ev": "end", "why": "connect-failed", "error": repr(e)})
        return
    log({"ev": "open"})
    if a.chatter:
        # docs/protocol.md 4: messages a client sends are ignored, pings
        # are answered
        for i in range(a.chatter):
            await ws.send("hello %d " % i + "x" * (i * 997 % 20000))
        await ws.send(b"\x00\x01binary")
        pong = await ws.ping(b"rshub-test")
        try:
            await asyncio.wait_for(pong, timeout=5)
            log({"ev": "pong"})
        except asyncio.TimeoutError:
            log({"ev": "no-pong"})
    if a.ready:
        write_atomic(a.ready, "open\n")
    why = "timeout"
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            wait = min(left, a.idle) if a.idle else left
            try:
                msg = await asyncio.wait_for(ws.recv(), timeout=wait)
            except asyncio.TimeoutError:
                if a.idle and time.monotonic() < deadline:
                    why = "idle"
                break
            if isinstance(msg, bytes):
                log({"ev": "binary", "len": len(msg)})
                continue
            m = ANN_RE.search(msg)
            rec = {"ev": "msg", "id": m.group(1) if m else None}
            if a.save_data:
                rec["data"] = msg
            log(rec)
            got += 1
            if a.count and got >= a.count:
                why = "count"
                break
            if a.until and rec["id"] and id_key(rec["id"]) >= id_key(a.until):
                why = "until"
                break
    except websockets.exceptions.ConnectionClosed as e:
        rcvd = getattr(e, "rcvd", None)
        log({"ev": "close", "code": rcvd.code if rcvd else None,
             "reason": rcvd.reason if rcvd else None})
        why = "closed"
    if why != "closed":
        try:
            await asyncio.wait_for(ws.close(), timeout=3)
        except Exception:
            pass
    log({"ev": "end", "why": why, "got": got})


async def follow_channel(a, out):
    """One channel followed across hub restarts and closes: each
    connection resumes with since=the last id received (the first with
    --since). Logs every message (with its data) and every connection
    event; ends once --stop exists and --idle seconds passed without a
    message, or at --timeout."""
    import asyncio
    import websockets
    last = a.since
    got = 0
    deadline = time.monotonic() + a.timeout
    quiet_since = time.monotonic()

    def log(obj):
        obj["t"] = round(time.time(), 6)
        out.write(json.dumps(obj) + "\n")
        out.flush()

    def stopping():
        return (a.stop and os.path.exists(a.stop)
                and time.monotonic() - quiet_since >= a.idle)

    while time.monotonic() < deadline and not stopping():
        uri = "ws://127.0.0.1:%d/channel/%s" % (a.ws, a.chan)
        if last is not None:
            uri += "?since=" + last
        try:
            ws = await asyncio.wait_for(
                websockets.connect(uri, max_size=None, ping_interval=None,
                                   close_timeout=2, max_queue=None),
                timeout=5)
        except Exception as e:
            log({"ev": "connect-failed", "error": repr(e)[:200]})
            await asyncio.sleep(0.2)
            continue
        log({"ev": "open", "since": last})
        if a.ready:
            write_atomic(a.ready, "open\n")
        try:
            while time.monotonic() < deadline:
                if stopping():
                    break
                try:
                    msg = await asyncio.wait_for(ws.recv(), timeout=0.2)
                except asyncio.TimeoutError:
                    continue
                quiet_since = time.monotonic()
                if isinstance(msg, bytes):
                    log({"ev": "binary", "len": len(msg)})
                    continue
                m = ANN_RE.search(msg)
                hid = m.group(1) if m else None
                log({"ev": "msg", "id": hid, "data": msg})
                got += 1
                if hid is not None:
                    last = hid
        except websockets.exceptions.ConnectionClosed as e:
            rcvd = getattr(e, "rcvd", None)
            log({"ev": "close", "code": rcvd.code if rcvd else None,
                 "reason": rcvd.reason if rcvd else None})
            await asyncio.sleep(0.2)
            continue
        try:
            await asyncio.wait_for(ws.close(), timeout=3)
        except Exception:
            pass
        break
    log({"ev": "end", "why": "stop" if stopping() else "timeout", "got": got})


def cmd_follow(a):
    import asyncio
    with open(a.out, "a") as out:
        try:
            asyncio.run(follow_channel(a, out))
        except Exception as e:
            out.write(json.dumps({"ev": "end", "why": "error",
                                  "error": repr(e)}) + "\n")


async def touch_channels(a):
    import websockets
    for i in range(a.n):
        ws = await asyncio_wait(websockets.connect(
            "ws://127.0.0.1:%d/channel/%s%05d" % (a.ws, a.prefix, i),
            ping_interval=None), 10)
        await asyncio_wait(ws.close(), 10)


async def asyncio_wait(aw, timeout):
    import asyncio
    return await asyncio.wait_for(aw, timeout=timeout)


def cmd_holdproxy(a):
    """A TCP proxy on 127.0.0.1 (its port in --ready as {"port":N}) to
    127.0.0.1:--to. While the file --hold exists, the upstream's bytes
    are held back from the client (and --held is written once some are):
    the hub has answered, the client has not read it, and can be killed
    in between. Runs until killed."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", a.port))
    srv.listen(128)
    write_atomic(a.ready, '{"port":%d}\n' % srv.getsockname()[1])

    def close(*socks):
        for x in socks:
            try:
                x.close()
            except OSError:
                pass

    def up(c, u):
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    u.shutdown(socket.SHUT_WR)
                    return
                u.sendall(d)
        except OSError:
            close(c, u)

    def down(u, c):
        try:
            while True:
                d = u.recv(65536)
                if not d:
                    break
                while os.path.exists(a.hold):
                    if not os.path.exists(a.held):
                        write_atomic(a.held, "held\n")
                    time.sleep(0.01)
                c.sendall(d)
        except OSError:
            pass
        close(c, u)

    while True:
        c, _ = srv.accept()
        try:
            u = socket.create_connection(("127.0.0.1", a.to), timeout=10)
            u.settimeout(None)
        except OSError:
            close(c)
            continue
        threading.Thread(target=up, args=(c, u), daemon=True).start()
        threading.Thread(target=down, args=(u, c), daemon=True).start()


def cmd_touch_channels(a):
    """Connect to, and leave, n channels PREFIX00000... one after another
    (open mode: each becomes an active channel for a while)."""
    import asyncio
    asyncio.run(touch_channels(a))


def cmd_sub(a):
    import asyncio
    with open(a.out, "w") as out:
        try:
            asyncio.run(subscribe(a, out))
        except Exception as e:
            out.write(json.dumps({"ev": "end", "why": "error",
                                  "error": repr(e)}) + "\n")


def read_events(path):
    ev = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                ev.append(json.loads(line))
    return ev


async def crowd_one(a, i, out):
    import asyncio
    import websockets
    got, err = [], None
    try:
        ws = await asyncio.wait_for(websockets.connect(
            "ws://127.0.0.1:%d/channel/%s" % (a.ws, a.chan),
            ping_interval=None, max_size=None), timeout=20)
    except Exception as e:
        out[i] = {"i": i, "ids": [], "err": "connect: %r" % e}
        return
    try:
        while len(got) < a.count:
            m = await asyncio.wait_for(ws.recv(), timeout=a.idle)
            mm = ANN_RE.search(m)
            got.append(mm.group(1) if mm else None)
    except Exception as e:
        err = "after %d: %r" % (len(got), e)
    try:
        await asyncio.wait_for(ws.close(), timeout=5)
    except Exception:
        pass
    out[i] = {"i": i, "ids": got, "err": err}


async def crowd(a):
    import asyncio
    out = [None] * a.clients
    await asyncio.gather(*[crowd_one(a, i, out) for i in range(a.clients)])
    with open(a.out, "w") as f:
        for r in out:
            f.write(json.dumps(r) + "\n")


def cmd_crowd(a):
    """clients concurrent WebSocket clients on one channel, each until it
    has count messages (or idle seconds pass); one JSON line per client."""
    import asyncio
    asyncio.run(crowd(a))


def cmd_crowd_check(a):
    want = []
    for w in a.want:
        want.extend(read_ids(w))
    bad = []
    n = 0
    with open(a.file) as f:
        for line in f:
            r = json.loads(line)
            n += 1
            if r["ids"] != want:
                bad.append("client %d: %d ids%s" % (
                    r["i"], len(r["ids"]), ", " + r["err"] if r["err"] else
                    " (differ)"))
    if n != a.clients:
        bad.append("%d clients reported, want %d" % (n, a.clients))
    if bad:
        die("%d bad: %s" % (len(bad), "; ".join(bad[:5])))
    print("ok: %d clients, %d ids each" % (n, len(want)))


def cmd_closecode(a):
    """Print the close code the subscriber saw ('none' if it saw none)."""
    for e in read_events(a.sub):
        if e["ev"] == "close":
            print(e["code"])
            return
    print("none")


def cmd_wait_count(a):
    """Wait until the subscriber log holds n messages (or it ended)."""
    deadline = time.monotonic() + a.timeout
    n = 0
    while time.monotonic() < deadline:
        try:
            ev = read_events(a.sub)
        except (OSError, ValueError):
            ev = []
        n = sum(1 for e in ev if e["ev"] == "msg")
        if n >= a.n:
            return
        if any(e["ev"] == "end" for e in ev):
            break
        time.sleep(0.05)
    die("%s: %d messages, want %d" % (a.sub, n, a.n))


def cmd_ids(a):
    for e in read_events(a.sub):
        if e["ev"] == "msg":
            print(e["id"])


def read_ids(path):
    with open(path) as f:
        return [l.split()[0] for l in f if l.strip()]


def cmd_compare(a):
    """The subscriber got exactly the ids of the WANT files (one id per
    line, first word), each once, in strictly increasing order."""
    got = [e["id"] for e in read_events(a.sub) if e["ev"] == "msg"]
    want = []
    for w in a.want:
        want.extend(read_ids(w))
    problems = []
    if None in got:
        problems.append("%d messages without a hub:id" % got.count(None))
        got = [g for g in got if g is not None]
    for i in range(1, len(got)):
        if id_key(got[i]) <= id_key(got[i - 1]):
            problems.append("not strictly increasing at #%d: %s after %s"
                            % (i, got[i], got[i - 1]))
            break
    gs, ws = set(got), set(want)
    if len(gs) != len(got):
        problems.append("%d duplicates" % (len(got) - len(gs)))
    missing = sorted(ws - gs, key=id_key)
    extra = sorted(gs - ws, key=id_key)
    if missing:
        problems.append("%d missing (first %s)" % (len(missing), missing[:3]))
    if extra and not a.allow_extra:
        problems.append("%d unexpected (first %s)" % (len(extra), extra[:3]))
    if problems:
        tail = [e for e in read_events(a.sub) if e["ev"] != "msg"]
        die("got %d, want %d: %s; events %s"
            % (len(got), len(want), "; ".join(problems), tail))
    print("ok: %d ids" % len(got))


def cmd_false_gap(a):
    """Exit 1 when the subscriber was closed with 4001 although it had
    received every acknowledged id the close reason says was trimmed
    ("... (BEFORE < MARK)": entries in (BEFORE, MARK] gone): then nothing
    was lost, the gap is false. Exit 0 otherwise, saying what it saw."""
    ev = read_events(a.sub)
    got = set(e["id"] for e in ev if e["ev"] == "msg")
    close = [e for e in ev if e["ev"] == "close"]
    if not close or close[0]["code"] != 4001:
        print("no 4001 (%s)" % (close[0] if close else "no close"))
        return
    m = re.search(r"\(([0-9]+-[0-9]+) < ([0-9]+-[0-9]+)\)", close[0]["reason"] or "")
    if not m:
        print("4001 without a trimmed range: %r" % close[0]["reason"])
        return
    lo, hi = id_key(m.group(1)), id_key(m.group(2))
    gone = [i for i in read_ids(a.acks) if lo < id_key(i) <= hi]
    missed = [i for i in gone if i not in got]
    if missed:
        print("real gap: %d acknowledged ids trimmed unread" % len(missed))
        return
    die("false gap: closed with 4001 (%s) after %d messages, but every "
        "acknowledged id in (%s, %s] (%d) had been delivered"
        % (close[0]["reason"], len(got), m.group(1), m.group(2), len(gone)))


def cmd_verify(a):
    """Each message of the subscriber whose id is in PAIRS (lines 'ID FILE')
    is FILE's bytes with exactly the documented annotation inserted right
    after the root element's name; every message parses as XML and its
    hub:id attribute is its id."""
    msgs = {}
    for e in read_events(a.sub):
        if e["ev"] == "msg":
            msgs[e["id"]] = e["data"].encode("utf-8")
    problems = []
    n = 0
    with open(a.pairs) as f:
        pairs = [l.split(None, 1) for l in f if l.strip()]
    for hid, path in pairs:
        path = path.strip()
        with open(path, "rb") as f:
            orig = f.read()
        m = msgs.get(hid)
        if m is None:
            problems.append("%s (%s): not received" % (hid, os.path.basename(path)))
            continue
        ann = annotation(hid).encode()
        if m.count(ann) != 1:
            problems.append("%s: annotation found %d times" % (hid, m.count(ann)))
            continue
        at = m.index(ann)
        stripped = m[:at] + m[at + len(ann):]
        if stripped != orig:
            problems.append("%s (%s): differs from the published bytes"
                            % (hid, os.path.basename(path)))
            continue
        # right after the root element's name: the bytes before it end in
        # "<NAME" and are the document's prolog plus that
        pm = re.search(rb"<([A-Za-z_][-A-Za-z0-9_.:]*)$", m[:at])
        if pm is None or pm.group(1).split(b":")[-1] != b"urlset":
            problems.append("%s: annotation not right after the root name" % hid)
            continue
        try:
            root = ET.fromstring(m)
        except ET.ParseError as e:
            problems.append("%s: not well-formed XML: %s" % (hid, e))
            continue
        if root.tag != "{%s}urlset" % SM_NS:
            problems.append("%s: root %s" % (hid, root.tag))
        elif root.get("{%s}id" % HUB_NS) != hid:
            problems.append("%s: hub:id attribute is %r"
                            % (hid, root.get("{%s}id" % HUB_NS)))
        n += 1
    for hid, m in msgs.items():
        try:
            ET.fromstring(m)
        except ET.ParseError as e:
            problems.append("%s: not well-formed XML: %s" % (hid, e))
    if problems:
        die("; ".join(problems))
    print("ok: %d documents byte-identical apart from the annotation" % n)


def cmd_parses(a):
    """The message whose hub annotation carries id parses as XML and its
    root's {urn:x-rshub:1}id attribute is that id."""
    # Readers match the namespace, not the prefix (docs/protocol.md 2): a
    # document that already uses hub: gets the annotation under another one.
    for e in read_events(a.sub):
        if e["ev"] != "msg" or ('id="%s"' % a.id) not in e["data"]:
            continue
        try:
            root = ET.fromstring(e["data"].encode("utf-8"))
        except ET.ParseError as x:
            die("message %s is not well-formed XML: %s; it begins %r"
                % (a.id, x, e["data"][:300]))
        got = root.get("{%s}id" % HUB_NS)
        if got != a.id:
            continue
        print("ok")
        return
    die("no message annotated with %s" % a.id)


def cmd_stuck(a):
    """A WebSocket client that completes the handshake and never reads
    again (small SO_RCVBUF), held until killed or hold seconds pass."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, a.rcvbuf)
    s.settimeout(10)
    s.connect(("127.0.0.1", a.ws))
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    path = a.chan + ("?since=" + a.since if a.since is not None else "")
    s.sendall(("GET /channel/%s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
               "Upgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
               % (path, a.ws, key)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)   # byte by byte: read nothing past the response
        if not chunk:
            die("connection closed during the handshake")
        head += chunk
    if not head.startswith(b"HTTP/1.1 101"):
        die("handshake refused: %r" % head[:80])
    write_atomic(a.ready, "open\n")
    time.sleep(a.hold)
    s.close()


def cmd_rss(a):
    """VmRSS of pid in KiB."""
    with open("/proc/%d/status" % a.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                print(line.split()[1])
                return
    die("no VmRSS for %d" % a.pid)


# -------------------------------------------------------- hostile clients

def ws_upgrade_request(ws_port, path):
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    return ("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
            % (path, ws_port, key)).encode()


def percentile(v, p):
    """The nearest-rank p-th percentile of v (0 for none)."""
    if not v:
        return 0.0
    s = sorted(v)
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[k]


class Publisher:
    """One keep-alive connection publishing small notifications at a
    steady rate; every publish's start time, latency and status kept."""

    def __init__(self, a):
        self.a = a
        self.samples = []        # (t_start, seconds, status)
        self.acked = []          # ids of the 202s, in order
        self.stop = threading.Event()
        self.n = a.start

    def run(self):
        a = self.a
        headers = publish_headers(a)
        conn = None
        t0 = time.monotonic()
        k = 0
        while not self.stop.is_set():
            due = t0 + k / a.rate
            k += 1
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            body = gen_doc("change", self.n, 0)
            self.n += 1
            ts = time.monotonic()
            status = 0
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", a.http,
                                                      timeout=a.pub_timeout)
                conn.request("POST", "/hub", body=body, headers=headers)
                r = conn.getresponse()
                r.read()
                status = r.status
                if status == 202 and r.getheader("X-Hub-Id"):
                    self.acked.append(r.getheader("X-Hub-Id"))
                if r.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException):
                if conn is not None:
                    conn.close()
                conn = None
            self.samples.append((ts, time.monotonic() - ts, status))
        if conn is not None:
            conn.close()


def attack_one(a, i, stats, lock):
    """One anonymous client: upgrade to the channel (since=0 for one in
    --since-every), then hang up at once without reading the answer."""
    src = "127.0.0.%d" % (2 + i % a.sources) if a.sources else None
    since = (i % a.since_every) == 0
    path = "/channel/%s%s" % (a.chan, "?since=0" if since else "")
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(5)
        if src:
            s.bind((src, 0))
        s.connect(("127.0.0.1", a.ws))
        s.sendall(ws_upgrade_request(a.ws, path))
        s.close()
        with lock:
            stats["sent"] += 1
    except OSError as e:
        with lock:
            stats["errors"] += 1
            stats["last_error"] = repr(e)


def reader_one(a, i, res, newest):
    """A client that replays the whole backlog for real (since=0) and
    reads on into the live stream until it has --reader-live ids past
    newest (the last one acknowledged when it started): every id it sees,
    in order."""
    ids, err = [], None
    t0 = time.monotonic()
    try:
        s = socket.create_connection(("127.0.0.1", a.ws), timeout=a.after)
        s.sendall(ws_upgrade_request(a.ws, "/channel/%s?since=0" % a.chan))
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                raise OSError("closed during the handshake")
            buf += chunk
        head, buf = buf.split(b"\r\n\r\n", 1)
        if not head.startswith(b"HTTP/1.1 101"):
            raise OSError("handshake refused: %r" % head[:60])
        live = 0
        deadline = t0 + a.after
        while live < a.reader_live:
            while len(buf) >= 2:
                n = buf[1] & 0x7f
                off = 2
                if n == 126:
                    n, off = int.from_bytes(buf[2:4], "big"), 4
                elif n == 127:
                    n, off = int.from_bytes(buf[2:10], "big"), 10
                if len(buf) < off + n:
                    break
                op = buf[0] & 0x0f
                payload = buf[off:off + n]
                buf = buf[off + n:]
                if op == 8:
                    raise OSError("closed by the hub: %d"
                                  % int.from_bytes(payload[:2], "big"))
                if op != 1:
                    continue
                m = ANN_RE.search(payload[:2000].decode("utf-8", "replace"))
                ids.append(m.group(1) if m else None)
                if m and (newest is None or id_key(m.group(1)) > id_key(newest)):
                    live += 1
            if live >= a.reader_live:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise OSError("timeout after %d ids" % len(ids))
            s.settimeout(left)
            chunk = s.recv(1 << 20)
            if not chunk:
                raise OSError("connection ended after %d ids" % len(ids))
            buf += chunk
        s.close()
    except OSError as e:
        err = str(e)
    res[i] = {"ids": ids, "err": err, "secs": time.monotonic() - t0}


def check_reader(r, backlog, acked):
    """What a reader saw is the whole backlog, then every acknowledged
    id after it up to the last it saw: in order, no gap, no repeat."""
    if r["err"]:
        return r["err"]
    ids = r["ids"]
    if None in ids:
        return "a message without a hub id"
    keys = [id_key(x) for x in ids]
    if keys != sorted(set(keys)):
        return "ids out of order or repeated"
    if ids[:len(backlog)] != backlog:
        return "the replay is not the backlog (%d ids)" % len(ids)
    last = keys[-1]
    first = id_key(backlog[-1]) if backlog else (0, 0)
    want = [x for x in acked if first < id_key(x) <= last]
    got = ids[len(backlog):]
    if got != want:
        return "live part differs: %d ids, want %d" % (len(got), len(want))
    return None


def cmd_hostile(a):
    """A publisher at --rate for --baseline seconds, then --conns anonymous
    WebSocket clients (from --sources loopback addresses, 127.0.0.2...)
    that ask for a replay and hang up at once, while the publisher goes on
    for --after seconds. Prints a JSON summary (to --out too); exits 1
    when a publish during the attack did not answer 202, or its p99
    latency is over max(--factor x baseline p99, baseline p99 +
    --slack-ms)."""
    pub = Publisher(a)
    pt = threading.Thread(target=pub.run)
    pt.start()
    time.sleep(a.baseline)
    t_attack = time.monotonic()
    stats = {"sent": 0, "errors": 0, "last_error": None}
    lock = threading.Lock()
    nxt = [0]

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= a.conns:
                return
            attack_one(a, i, stats, lock)

    backlog = read_ids(a.backlog) if a.backlog else []
    rres = [None] * a.readers
    newest = pub.acked[-1] if pub.acked else None
    rs = [threading.Thread(target=reader_one, args=(a, i, rres, newest))
          for i in range(a.readers)]
    for t in rs:
        t.start()
    ws = [threading.Thread(target=worker) for _ in range(a.threads)]
    for t in ws:
        t.start()
    for t in ws:
        t.join()
    t_sent = time.monotonic()
    for t in rs:
        t.join()
    left = t_attack + a.after - time.monotonic()
    if left > 0:
        time.sleep(left)
    pub.stop.set()
    pt.join()
    base = [s for s in pub.samples if s[0] < t_attack]
    during = [s for s in pub.samples if s[0] >= t_attack]
    failed = [s for s in during + base if s[2] != 202]
    bl = [s[1] * 1000 for s in base]
    dl = [s[1] * 1000 for s in during]
    base_p99 = percentile(bl, 99)
    bound = max(a.factor * base_p99, base_p99 + a.slack_ms)
    statuses = {}
    for s in during:
        statuses[str(s[2])] = statuses.get(str(s[2]), 0) + 1
    fail_span = (max(s[0] for s in failed) - min(s[0] for s in failed)
                 if failed else 0)
    rbad = [e for e in (check_reader(r, backlog, pub.acked) for r in rres) if e]
    out = {
        "readers": a.readers, "readers_bad": len(rbad),
        "reader_secs_max": round(max([r["secs"] for r in rres] or [0]), 1),
        "attack_conns": a.conns, "attack_sent": stats["sent"],
        "attack_errors": stats["errors"], "attack_error": stats["last_error"],
        "attack_secs": round(t_sent - t_attack, 2),
        "baseline_n": len(bl), "baseline_p50_ms": round(percentile(bl, 50), 1),
        "baseline_p99_ms": round(base_p99, 1),
        "during_n": len(dl), "during_p50_ms": round(percentile(dl, 50), 1),
        "during_p99_ms": round(percentile(dl, 99), 1),
        "during_max_ms": round(max(dl) if dl else 0, 1),
        "bound_ms": round(bound, 1), "failed": len(failed),
        "failed_span_s": round(fail_span, 1), "statuses": statuses,
    }
    text = json.dumps(out)
    print(text)
    if a.out:
        write_atomic(a.out, text + "\n")
    if not bl or not dl:
        die("no publishes measured (baseline %d, during %d)" % (len(bl), len(dl)))
    if rbad:
        die("%d readers saw the wrong stream: %s" % (len(rbad), rbad[0]))
    if failed:
        die("%d publishes did not answer 202 (over %.1f s)" % (len(failed), fail_span))
    if out["during_p99_ms"] > bound:
        die("publish p99 %.1f ms during the attack, over the bound %.1f ms"
            % (out["during_p99_ms"], bound))


def ws_frame(opcode, payload, masked=True, fin=True):
    b0 = (0x80 if fin else 0) | opcode
    n = len(payload)
    if n < 126:
        hdr = bytes([b0, (0x80 if masked else 0) | n])
    elif n < 65536:
        hdr = bytes([b0, (0x80 if masked else 0) | 126]) + n.to_bytes(2, "big")
    else:
        hdr = bytes([b0, (0x80 if masked else 0) | 127]) + n.to_bytes(8, "big")
    if not masked:
        return hdr + payload
    key = os.urandom(4)
    return hdr + key + bytes(c ^ key[i % 4] for i, c in enumerate(payload))


def read_ws_close(s, timeout):
    """Read server frames until a close frame; its code, 'eof' when the
    connection ended without one, 'none' on timeout. Data frames are
    skipped (a replay may come first)."""
    buf = b""
    deadline = time.monotonic() + timeout
    while True:
        while len(buf) >= 2:
            n = buf[1] & 0x7f
            off = 2
            if n == 126:
                if len(buf) < 4:
                    break
                n = int.from_bytes(buf[2:4], "big")
                off = 4
            elif n == 127:
                if len(buf) < 10:
                    break
                n = int.from_bytes(buf[2:10], "big")
                off = 10
            if len(buf) < off + n:
                break
            op = buf[0] & 0x0f
            payload = buf[off:off + n]
            buf = buf[off + n:]
            if op == 8:
                return str(int.from_bytes(payload[:2], "big")) if n >= 2 else "1005"
        left = deadline - time.monotonic()
        if left <= 0:
            return "none"
        s.settimeout(left)
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            return "none"
        except OSError:
            return "eof"
        if not chunk:
            return "eof"
        buf += chunk


def cmd_swallow_proxy(a):
    """An HTTP proxy in front of a hub for the publisher-crash tests. It
    passes every request through, except the change POSTs to /hub (their
    Link header holds --match). The first --fake-413 of those get 413 and
    are not forwarded. The next --swallow are forwarded, but their answer
    is withheld: the connection stays open, unanswered, until the client
    goes away, as if the publisher died between the hub's 202 and reading
    it. Each matching POST is logged to --log as a JSON line (n, action,
    status, id, dup, pubid) once the hub's answer is known."""
    import http.server
    import socketserver
    lock = threading.Lock()
    count = [0]
    hop = {"connection", "keep-alive", "proxy-connection", "te", "trailer",
           "transfer-encoding", "upgrade", "expect", "host",
           "content-length"}

    def log(obj):
        with lock:
            with open(a.log, "a") as f:
                f.write(json.dumps(obj) + "\n")

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            pass

        def relay(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n > 0 else None
            link = self.headers.get("Link") or ""
            action = "pass"
            if (self.command == "POST" and self.path == "/hub"
                    and a.match in link):
                with lock:
                    idx = count[0]
                    count[0] += 1
                if idx < a.fake_413:
                    action = "413"
                elif idx < a.fake_413 + a.swallow:
                    action = "swallow"
                else:
                    action = "forward"
                pubid = self.headers.get("X-Publish-Id")
                if action == "413":
                    log({"n": idx, "action": action, "pubid": pubid})
                    msg = b"error: notification larger than the limit\n"
                    self.send_response(413)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(msg)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(msg)
                    self.close_connection = True
                    return
            hdrs = {h: v for h, v in self.headers.items()
                    if h.lower() not in hop}
            c = http.client.HTTPConnection("127.0.0.1", a.upstream,
                                           timeout=30)
            try:
                c.request(self.command, self.path, body=body, headers=hdrs)
                r = c.getresponse()
                data = r.read()
                rh = r.getheaders()
                st = r.status
            finally:
                c.close()
            if action != "pass":
                d = dict((h.lower(), v) for h, v in rh)
                log({"n": idx, "action": action, "status": st,
                     "id": d.get("x-hub-id"),
                     "dup": d.get("x-hub-duplicate") == "1",
                     "pubid": pubid})
            if action == "swallow":
                # hold the connection until the publisher is gone
                self.connection.settimeout(None)
                try:
                    while self.connection.recv(4096):
                        pass
                except OSError:
                    pass
                self.close_connection = True
                return
            self.send_response(st)
            for h, v in rh:
                if h.lower() not in hop:
                    self.send_header(h, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = relay
        do_POST = relay

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    srv = Server(("127.0.0.1", 0), Handler)
    write_atomic(a.ready, json.dumps({"port": srv.server_address[1]}) + "\n")
    srv.serve_forever()


def cmd_wsprobe(a):
    """Open a WebSocket to a channel (raw socket), send one frame of the
    given kind, print the close code the hub answers with ('none' if it
    keeps the connection, 'eof' if it hangs up without a close frame)."""
    s = socket.create_connection(("127.0.0.1", a.ws), timeout=10)
    s.sendall(ws_upgrade_request(a.ws, "/channel/%s" % a.chan))
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            die("connection closed during the handshake")
        head += chunk
    if not head.startswith(b"HTTP/1.1 101"):
        die("handshake refused: %r" % head[:80])
    frames = {
        "masked-text": ws_frame(1, b"hello"),
        "unmasked-text": ws_frame(1, b"hello", masked=False),
        "unmasked-ping": ws_frame(9, b"p", masked=False),
        "bad-utf8": ws_frame(1, b"ok \xc3\x28 no"),
        "bad-utf8-split": ws_frame(1, b"caf\xc3", fin=False)
        + ws_frame(0, b"\x28"),
        "good-utf8-split": ws_frame(1, b"caf\xc3", fin=False)
        + ws_frame(0, b"\xa9"),
    }
    s.sendall(frames[a.frame])
    print(read_ws_close(s, a.timeout))
    s.close()


# ------------------------------------------------------------------ main

def main():
    p = argparse.ArgumentParser(prog="hubtool")
    sub = p.add_subparsers(dest="cmd", required=True)

    def pub_args(q):
        q.add_argument("--http", type=int, required=True)
        q.add_argument("--topic")
        q.add_argument("--link", help="raw Link header (instead of --topic)")
        q.add_argument("--no-link", action="store_true")
        q.add_argument("--auth", help="raw Authorization header")
        q.add_argument("--token")
        q.add_argument("--ctype", default="application/xml")
        q.add_argument("--header", action="append", default=[],
                       help="an extra request header, NAME: VALUE")
        q.add_argument("--timeout", type=float, default=10)

    q = sub.add_parser("gen")
    q.add_argument("--kind", default="change")
    q.add_argument("--n", type=int, default=0)
    q.add_argument("--pad", type=int, default=0)
    q.set_defaults(fn=cmd_gen)

    q = sub.add_parser("request")
    pub_args(q)
    q.add_argument("--method", default="POST")
    q.add_argument("--path", default="/hub")
    q.add_argument("--file")
    q.add_argument("--data")
    q.add_argument("--gen")
    q.add_argument("--n", type=int, default=0)
    q.add_argument("--pad", type=int, default=0)
    q.add_argument("--announce", type=int,
                   help="send only headers announcing this Content-Length")
    q.set_defaults(fn=cmd_request)

    q = sub.add_parser("flood")
    pub_args(q)
    q.add_argument("--count", type=int, required=True)
    q.add_argument("--conns", type=int, default=4)
    q.add_argument("--kind", default="change")
    q.add_argument("--pad", type=int, default=0)
    q.add_argument("--start", type=int, default=0)
    q.add_argument("--rate", type=float, default=0,
                   help="publishes per second, all connections together")
    q.add_argument("--out", required=True)
    q.add_argument("--allow-errors", action="store_true")
    q.add_argument("--stop-on-error", action="store_true")
    q.set_defaults(fn=cmd_flood, timeout=120)

    q = sub.add_parser("hangup")
    pub_args(q)
    q.add_argument("--kind", default="change")
    q.add_argument("--n", type=int, default=0)
    q.add_argument("--wait", type=float, default=0.2)
    q.set_defaults(fn=cmd_hangup)

    q = sub.add_parser("publish-many")
    pub_args(q)
    q.add_argument("files", nargs="+")
    q.set_defaults(fn=cmd_publish_many)

    q = sub.add_parser("topic")
    q.add_argument("--http", type=int, required=True)
    q.add_argument("--name", required=True)
    q.add_argument("--get", required=True)
    q.set_defaults(fn=cmd_topic)

    q = sub.add_parser("wait-subs")
    q.add_argument("--http", type=int, required=True)
    q.add_argument("--name", required=True)
    q.add_argument("--n", type=int, default=1)
    q.add_argument("--exact", action="store_true")
    q.add_argument("--timeout", type=float, default=10)
    q.set_defaults(fn=cmd_wait_subs)

    q = sub.add_parser("topics-check")
    q.add_argument("--http", type=int, required=True)
    q.add_argument("--ws", type=int, required=True)
    q.add_argument("--name", required=True)
    q.add_argument("--uri", required=True)
    q.add_argument("--kind", required=True)
    q.add_argument("--pairs", action="append", default=[])
    q.add_argument("--subscribers", type=int)
    q.set_defaults(fn=cmd_topics_check)

    q = sub.add_parser("wait-status")
    q.add_argument("--http", type=int, required=True)
    q.add_argument("--path", required=True)
    q.add_argument("--status", type=int, required=True)
    q.add_argument("--timeout", type=float, default=10)
    q.set_defaults(fn=cmd_wait_status)

    q = sub.add_parser("metrics")
    q.add_argument("--http", type=int, required=True)
    q.add_argument("--get")
    q.set_defaults(fn=cmd_metrics)

    q = sub.add_parser("wait-metric")
    q.add_argument("--http", type=int, required=True)
    q.add_argument("--get", required=True)
    q.add_argument("--min", type=float, default=1)
    q.add_argument("--timeout", type=float, default=10)
    q.set_defaults(fn=cmd_wait_metric)

    q = sub.add_parser("caplist")
    q.add_argument("--http", type=int, required=True)
    q.add_argument("--name", required=True)
    q.set_defaults(fn=cmd_caplist)

    q = sub.add_parser("sub")
    q.add_argument("--ws", type=int, required=True)
    q.add_argument("--chan", required=True)
    q.add_argument("--since")
    q.add_argument("--count", type=int, default=0)
    q.add_argument("--until", help="stop once an id >= this arrives")
    q.add_argument("--idle", type=float, default=0,
                   help="stop after this long without a message")
    q.add_argument("--timeout", type=float, default=30)
    q.add_argument("--out", required=True)
    q.add_argument("--ready")
    q.add_argument("--save-data", action="store_true")
    q.add_argument("--rcvbuf", type=int, default=0,
                   help="SO_RCVBUF of the client socket (0: the default)")
    q.add_argument("--chatter", type=int, default=0,
                   help="send this many text messages, a binary one and a ping")
    q.set_defaults(fn=cmd_sub)

    q = sub.add_parser("follow")
    q.add_argument("--ws", type=int, required=True)
    q.add_argument("--chan", required=True)
    q.add_argument("--since", help="the first connection's since")
    q.add_argument("--stop", help="end once this file exists (and --idle)")
    q.add_argument("--idle", type=float, default=1)
    q.add_argument("--timeout", type=float, default=600)
    q.add_argument("--out", required=True)
    q.add_argument("--ready")
    q.set_defaults(fn=cmd_follow)

    q = sub.add_parser("holdproxy")
    q.add_argument("--to", type=int, required=True)
    q.add_argument("--port", type=int, default=0)
    q.add_argument("--ready", required=True)
    q.add_argument("--hold", required=True)
    q.add_argument("--held", required=True)
    q.set_defaults(fn=cmd_holdproxy)

    q = sub.add_parser("touch-channels")
    q.add_argument("--ws", type=int, required=True)
    q.add_argument("--prefix", default="c")
    q.add_argument("--n", type=int, required=True)
    q.set_defaults(fn=cmd_touch_channels)

    q = sub.add_parser("crowd")
    q.add_argument("--ws", type=int, required=True)
    q.add_argument("--chan", required=True)
    q.add_argument("--clients", type=int, required=True)
    q.add_argument("--count", type=int, required=True)
    q.add_argument("--idle", type=float, default=20)
    q.add_argument("--out", required=True)
    q.set_defaults(fn=cmd_crowd)

    q = sub.add_parser("crowd-check")
    q.add_argument("--file", required=True)
    q.add_argument("--clients", type=int, required=True)
    q.add_argument("--want", action="append", default=[])
    q.set_defaults(fn=cmd_crowd_check)

    q = sub.add_parser("closecode")
    q.add_argument("sub")
    q.set_defaults(fn=cmd_closecode)

    q = sub.add_parser("wait-count")
    q.add_argument("--sub", required=True)
    q.add_argument("--n", type=int, required=True)
    q.add_argument("--timeout", type=float, default=10)
    q.set_defaults(fn=cmd_wait_count)

    q = sub.add_parser("ids")
    q.add_argument("sub")
    q.set_defaults(fn=cmd_ids)

    q = sub.add_parser("compare")
    q.add_argument("--sub", required=True)
    q.add_argument("--want", action="append", default=[])
    q.add_argument("--allow-extra", action="store_true")
    q.set_defaults(fn=cmd_compare)

    q = sub.add_parser("false-gap")
    q.add_argument("--sub", required=True)
    q.add_argument("--acks", required=True)
    q.set_defaults(fn=cmd_false_gap)

    q = sub.add_parser("verify")
    q.add_argument("--sub", required=True)
    q.add_argument("--pairs", required=True)
    q.set_defaults(fn=cmd_verify)

    q = sub.add_parser("parses")
    q.add_argument("--sub", required=True)
    q.add_argument("--id", required=True)
    q.set_defaults(fn=cmd_parses)

    q = sub.add_parser("stuck")
    q.add_argument("--ws", type=int, required=True)
    q.add_argument("--chan", required=True)
    q.add_argument("--rcvbuf", type=int, default=4096)
    q.add_argument("--hold", type=float, default=120)
    q.add_argument("--ready", required=True)
    q.add_argument("--since", help="ask for a replay after this id")
    q.set_defaults(fn=cmd_stuck)

    q = sub.add_parser("rss")
    q.add_argument("--pid", type=int, required=True)
    q.set_defaults(fn=cmd_rss)

    q = sub.add_parser("hostile")
    pub_args(q)
    q.add_argument("--ws", type=int, required=True)
    q.add_argument("--chan", required=True)
    q.add_argument("--rate", type=float, default=20)
    q.add_argument("--start", type=int, default=100000)
    q.add_argument("--pub-timeout", type=float, default=10)
    q.add_argument("--baseline", type=float, default=3)
    q.add_argument("--after", type=float, default=8)
    q.add_argument("--conns", type=int, default=300)
    q.add_argument("--threads", type=int, default=8)
    q.add_argument("--sources", type=int, default=0,
                   help="spread over this many loopback source addresses")
    q.add_argument("--since-every", type=int, default=1,
                   help="one client in this many asks since=0")
    q.add_argument("--readers", type=int, default=0,
                   help="clients that replay the whole backlog for real")
    q.add_argument("--reader-live", type=int, default=3,
                   help="a reader stops this many ids past the backlog")
    q.add_argument("--backlog", help="file of the backlog's ids (flood --out)")
    q.add_argument("--factor", type=float, default=4)
    q.add_argument("--slack-ms", type=float, default=100)
    q.add_argument("--out")
    q.set_defaults(fn=cmd_hostile)

    q = sub.add_parser("swallow-proxy")
    q.add_argument("--upstream", type=int, required=True,
                   help="the hub's HTTP port on 127.0.0.1")
    q.add_argument("--match", required=True,
                   help="act on POST /hub whose Link header holds this")
    q.add_argument("--fake-413", type=int, default=0)
    q.add_argument("--swallow", type=int, default=0)
    q.add_argument("--log", required=True)
    q.add_argument("--ready", required=True)
    q.set_defaults(fn=cmd_swallow_proxy)

    q = sub.add_parser("wsprobe")
    q.add_argument("--ws", type=int, required=True)
    q.add_argument("--chan", required=True)
    q.add_argument("--frame", required=True,
                   choices=["masked-text", "unmasked-text", "unmasked-ping",
                            "bad-utf8", "bad-utf8-split", "good-utf8-split"])
    q.add_argument("--timeout", type=float, default=3)
    q.set_defaults(fn=cmd_wsprobe)

    a = p.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
