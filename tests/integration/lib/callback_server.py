#!/usr/bin/python3
"""callback_server.py - the Python side of the WebSub integration tests
(tests/integration/test_websub*.sh, docs/protocol.md 5).

`serve` is a programmable WebSub subscriber on 127.0.0.1:0: it answers the
hub's verification GETs (echo hub.challenge, or refuse, or echo something
else, or too late), answers content distribution POSTs per path (ok, fail N
times then ok, always 410, stall, slow, any status), serves static topic
bodies (and redirects to them) for publish pings, and records every
request it gets (method, path, query, headers, body bytes, time, what it
answered) as JSON lines. The other subcommands drive the hub (form-encoded
WebSub requests, publishes) and check what a `serve` recorded against what
the hub acknowledged. Every wait has a timeout; loopback only.

Run with Debian's /usr/bin/python3 (the tests never use a pyenv python3).

Behaviour specs (per path; --route PATH:post=SPEC,get=SPEC or POST /_ctl):
  post: ok | fail:N[:CODE[:LOCATION]] (CODE, default 500, N times, then
        204; with a Location header if given) | reset:N (close with a TCP
        RST N times, then 204) | gone (410 always) | status:CODE |
        stall:SECS (answer 204 after SECS: longer than the hub's
        --delivery-timeout) | slow:SECS (answer 204 after SECS)
  get:  echo (200, body = hub.challenge) | wrong (200, another body) |
        refuse:CODE (e.g. refuse:404) | late:SECS (echo after SECS) |
        echo-unsub-refuse (echo for subscribe, 404 for unsubscribe)
A GET without hub.challenge (hub.mode=denied) is answered 200 "ok".
"""
import argparse
import base64
import hashlib
import hmac
import http.client
import json
import os
import re
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LIB = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True     # no __pycache__ in the source tree


def die(msg, rc=1):
    print("callback_server: " + msg, file=sys.stderr)
    sys.exit(rc)


def id_key(hid):
    ms, _, seq = hid.partition("-")
    return (int(ms), int(seq or 0))


def write_atomic(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


# ------------------------------------------------------------------ serve

class State:
    def __init__(self, a):
        self.lock = threading.Lock()
        self.log = open(a.log, "a")
        self.seq = 0
        self.routes = {}        # path -> {"post": spec, "get": spec}
        self.fails = {}         # path -> POSTs answered 500 so far
        self.static = {}        # path -> (file name, content type)
        self.default_post = a.default_post
        self.default_get = a.default_get
        for r in a.route:
            path, _, specs = r.partition(":")
            self.set_route(path, specs)
        for s in a.static:
            path, _, rest = s.partition("=")
            f, _, ctype = rest.partition(";")
            self.set_static(path, f, ctype)
        self.redirects = {}     # path -> target (answered 302)
        for r in a.redirect:
            path, _, target = r.partition("=")
            self.redirects[path] = target

    def set_route(self, path, specs):
        with self.lock:
            r = self.routes.setdefault(path, {})
            for kv in specs.split(","):
                if not kv:
                    continue
                k, _, v = kv.partition("=")
                if k not in ("post", "get"):
                    raise ValueError("bad route spec %r" % kv)
                r[k] = v
                if k == "post":
                    self.fails[path] = 0

    def set_static(self, path, fname, ctype):
        # read at every GET: a test changes the topic by rewriting the file
        with self.lock:
            self.static[path] = (fname, ctype)

    def spec(self, path, kind):
        with self.lock:
            r = self.routes.get(path, {})
            return r.get(kind, self.default_post if kind == "post"
                         else self.default_get)

    def record(self, rec):
        with self.lock:
            self.seq += 1
            rec["seq"] = self.seq
            self.log.write(json.dumps(rec) + "\n")
            self.log.flush()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "wsub-callback/1"

    def log_message(self, fmt, *args):
        pass

    def read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            out = b""
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return out, True
                out += self.rfile.read(size)
                self.rfile.readline(3)
        n = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(n) if n > 0 else b""
        if len(data) < n:
            raise ConnectionResetError("body cut short: %d of %d bytes"
                                       % (len(data), n))
        return data, False

    def reset(self):
        """Close the connection with a TCP RST, answering nothing."""
        import socket
        import struct
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass
        self.close_connection = True
        self.was_reset = True

    def finish(self):
        if getattr(self, "was_reset", False):
            return      # the socket is gone: nothing to flush
        super().finish()

    def answer(self, status, body=b"", ctype="text/plain", extra=()):
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            for k, v in extra:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
        except OSError:
            # the hub gave up (stall past its timeout): nothing to answer
            self.close_connection = True

    def base_record(self, body, chunked):
        u = urllib.parse.urlsplit(self.path)
        return {
            "t": time.time(),
            "method": self.command,
            "path": u.path,
            "query": u.query,
            "args": urllib.parse.parse_qs(u.query, keep_blank_values=True),
            "headers": [[k, v] for k, v in self.headers.items()],
            "body": base64.b64encode(body).decode(),
            "chunked": chunked,
        }

    def do_ctl(self):
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        st = self.server.st
        try:
            path = q["path"][0]
            specs = []
            for k in ("post", "get"):
                if k in q:
                    specs.append("%s=%s" % (k, q[k][0]))
            if specs:
                st.set_route(path, ",".join(specs))
            if "static" in q:
                st.set_static(path, q["static"][0], q.get("ctype", [""])[0])
        except (KeyError, ValueError, OSError) as e:
            self.answer(400, ("error: %s\n" % e).encode())
            return
        self.answer(200, b"ok\n")

    def do_GET(self):
        body, chunked = self.read_body()
        u = urllib.parse.urlsplit(self.path)
        st = self.server.st
        if u.path == "/_ctl":
            self.do_ctl()
            return
        rec = self.base_record(body, chunked)
        with st.lock:
            static = st.static.get(u.path)
            target = st.redirects.get(u.path)
        if target is not None:
            rec["answered"] = 302
            st.record(rec)
            try:
                self.send_response(302)
                self.send_header("Location", target)
                self.send_header("Content-Length", "0")
                self.end_headers()
            except OSError:
                self.close_connection = True
            return
        if static is not None:
            try:
                with open(static[0], "rb") as f:
                    data = f.read()
                status = 200
            except OSError:
                data, status = b"not found", 404
            rec["answered"] = status
            st.record(rec)
            self.answer(status, data, static[1])
            return
        args = rec["args"]
        challenge = args.get("hub.challenge", [None])[0]
        mode = args.get("hub.mode", [None])[0]
        spec = st.spec(u.path, "get")
        delay = 0.0
        if challenge is None:
            status, out = 200, b"ok"
        elif spec == "echo":
            status, out = 200, challenge.encode()
        elif spec == "echo-unsub-refuse":
            if mode == "unsubscribe":
                status, out = 404, b"no"
            else:
                status, out = 200, challenge.encode()
        elif spec == "wrong":
            status, out = 200, b"not-" + challenge.encode()
        elif spec.startswith("refuse:"):
            status, out = int(spec[7:]), b"no"
        elif spec.startswith("late:"):
            delay = float(spec[5:])
            status, out = 200, challenge.encode()
        else:
            status, out = 500, b"bad get spec"
        rec["answered"] = status
        rec["delay"] = delay
        st.record(rec)     # when it arrived; the answer may come later
        if delay:
            time.sleep(delay)
        self.answer(status, out)

    def do_POST(self):
        body, chunked = self.read_body()
        u = urllib.parse.urlsplit(self.path)
        st = self.server.st
        if u.path == "/_ctl":
            self.do_ctl()
            return
        rec = self.base_record(body, chunked)
        spec = st.spec(u.path, "post")
        delay = 0.0
        status = 204
        if spec == "ok":
            pass
        elif spec.startswith("fail:") or spec.startswith("reset:"):
            # fail:N[:CODE[:LOCATION]] / reset:N: the first N POSTs fail
            parts = spec.split(":", 3)
            with st.lock:
                n = st.fails.get(u.path, 0)
                failing = n < int(parts[1])
                if failing:
                    st.fails[u.path] = n + 1
            if failing and parts[0] == "reset":
                rec["answered"] = 0
                st.record(rec)
                self.reset()
                return
            if failing:
                status = int(parts[2]) if len(parts) > 2 else 500
                if len(parts) > 3:
                    rec["answered"] = status
                    rec["delay"] = 0.0
                    st.record(rec)
                    self.answer(status, b"x", extra=[("Location", parts[3])])
                    return
        elif spec == "gone":
            status = 410
        elif spec.startswith("status:"):
            status = int(spec[7:])
        elif spec.startswith("stall:") or spec.startswith("slow:"):
            delay = float(spec.partition(":")[2])
        else:
            status = 500
        rec["answered"] = status
        rec["delay"] = delay
        st.record(rec)
        if delay:
            time.sleep(delay)
        self.answer(status, b"" if status == 204 else b"x")

    do_PUT = do_POST
    do_DELETE = do_POST


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A hub killed mid-request resets its connections: a request cut
        # short is not recorded (it was not delivered); say so quietly.
        e = sys.exc_info()[1]
        if isinstance(e, (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def cmd_serve(a):
    st = State(a)
    srv = Server(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.st = st
    write_atomic(a.port_file, "%d\n" % srv.server_address[1])
    try:
        srv.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass


# ----------------------------------------------------------- hub requests

def request(port, method, path, body=None, headers=None, timeout=10.0):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.getheaders(), r.read()
    finally:
        c.close()


def print_response(st, hdrs, data):
    print(st)
    for k, v in hdrs:
        print("%s: %s" % (k, v))
    print()
    sys.stdout.write(data.decode("utf-8", "replace"))


def cmd_form(a):
    """A form-encoded POST /hub with the params in order (k=v, repeatable
    keys; k@=FILE reads the value from FILE); prints STATUS, headers, a
    blank line, the body (as hubtool request does)."""
    pairs = []
    for p in a.params:
        k, sep, v = p.partition("=")
        if k.endswith("@"):
            with open(v) as f:
                v = f.read()
            k = k[:-1]
        pairs.append((k, v))
    body = urllib.parse.urlencode(pairs).encode()
    if a.raw is not None:
        body = a.raw.encode()
    try:
        st, hdrs, data = request(a.http, "POST", a.path, body,
                                 {"Content-Type": a.ctype}, a.timeout)
    except (OSError, http.client.HTTPException) as e:
        print("000")
        print()
        print("error: %s" % e)
        return
    print_response(st, hdrs, data)


def cmd_form_many(a):
    """--count subscribe requests for --topic, --concurrency at a time, the
    callback of request i being --callback with {i} replaced by i; prints
    the tally of answers ("202=40 429=80"), one status per line with
    --each FILE ("i status"). Showing the caps hold under concurrency
    needs requests that overlap, so all wait for one start signal."""
    tally = {}
    each = {}
    lock = threading.Lock()
    next_i = [0]
    start = threading.Event()

    def worker():
        start.wait()
        while True:
            with lock:
                i = next_i[0]
                if i >= a.count:
                    return
                next_i[0] += 1
            pairs = [("hub.mode", a.mode), ("hub.topic", a.topic),
                     ("hub.callback", a.callback.replace("{i}", str(i)))]
            body = urllib.parse.urlencode(pairs).encode()
            try:
                st, _, _ = request(a.http, "POST", "/hub", body,
                                   {"Content-Type":
                                    "application/x-www-form-urlencoded"},
                                   a.timeout)
            except (OSError, http.client.HTTPException):
                st = 0
            with lock:
                tally[st] = tally.get(st, 0) + 1
                each[i] = st

    threads = [threading.Thread(target=worker) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    start.set()
    for t in threads:
        t.join()
    if a.each:
        with open(a.each, "w") as f:
            for i in sorted(each):
                f.write("%d %d\n" % (i, each[i]))
    print(" ".join("%d=%d" % (k, tally[k]) for k in sorted(tally)))


def cmd_raw(a):
    """Send raw bytes (--data, with Python escapes such as \r\n and \x00,
    or --file) over one TCP connection and print what came back: the
    status line, the body's first line, and "closed" or "open" (whether
    the hub closed the connection within --wait seconds of answering).
    For requests a real client refuses to send (two Content-Length
    headers, a name with a space before its colon)."""
    import socket
    if a.file:
        with open(a.file, "rb") as f:
            data = f.read()
    else:
        data = a.data.encode("latin-1").decode("unicode_escape") \
            .encode("latin-1")
    s = socket.create_connection(("127.0.0.1", a.http), timeout=a.timeout)
    s.sendall(data)
    got = b""
    closed = False
    deadline = time.monotonic() + a.timeout
    s.settimeout(a.wait)
    while time.monotonic() < deadline:
        try:
            b = s.recv(65536)
        except socket.timeout:
            if got:
                break
            continue
        except OSError:
            closed = True
            break
        if not b:
            closed = True
            break
        got += b
    s.close()
    text = got.decode("latin-1")
    head, _, rest = text.partition("\r\n\r\n")
    status = head.split("\r\n", 1)[0] if head else "no answer"
    responses = text.count("HTTP/1.")
    print(status)
    print(rest.split("\n", 1)[0] if rest else "")
    print("%s responses=%d" % ("closed" if closed else "open", responses))


def cmd_publish(a):
    """Publish --count generated notifications (or FILEs), one connection,
    --interval apart; writes 'ID FILE TIME' per acknowledged one to --out
    (TIME: when the 202 arrived)."""
    sys.path.insert(0, LIB)
    import hubtool
    files = list(a.files)
    if not files:
        os.makedirs(a.dir, exist_ok=True)
        for i in range(a.count):
            n = a.start + i
            p = os.path.join(a.dir, "%s-%d.xml" % (a.kind, n))
            with open(p, "wb") as f:
                f.write(hubtool.gen_doc(a.kind, n, a.pad))
            files.append(p)
    headers = {"Content-Type": a.ctype, "Link": '<%s>; rel="self"' % a.topic}
    if a.token:
        headers["Authorization"] = "Bearer " + a.token
    conn = http.client.HTTPConnection("127.0.0.1", a.http, timeout=a.timeout)
    bad = 0
    with open(a.out, "a") as out:
        for i, p in enumerate(files):
            if i and a.interval:
                time.sleep(a.interval)
            with open(p, "rb") as f:
                body = f.read()
            try:
                conn.request("POST", "/hub", body=body, headers=headers)
                r = conn.getresponse()
                r.read()
            except (OSError, http.client.HTTPException) as e:
                print("publish %s: %s" % (p, e), file=sys.stderr)
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", a.http,
                                                  timeout=a.timeout)
                bad += 1
                continue
            if r.status != 202:
                print("publish %s: status %d" % (p, r.status), file=sys.stderr)
                bad += 1
                continue
            out.write("%s %s %.6f\n" % (r.getheader("X-Hub-Id"), p, time.time()))
            out.flush()
    conn.close()
    sys.exit(1 if bad else 0)


# ------------------------------------------------------------ the record

def read_log(path):
    recs = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        recs.append(json.loads(line))
                    except ValueError:
                        pass    # a line being written
    except OSError:
        pass
    return recs


def hdr(rec, name):
    for k, v in rec["headers"]:
        if k.lower() == name.lower():
            return v
    return None


def hdrs(rec, name):
    return [v for k, v in rec["headers"] if k.lower() == name.lower()]


def body(rec):
    return base64.b64decode(rec["body"])


def select(recs, a):
    out = []
    for r in recs:
        if a.path and r["path"] != a.path:
            continue
        if getattr(a, "path_prefix", None) and \
                not r["path"].startswith(a.path_prefix):
            continue
        if a.method and r["method"] != a.method:
            continue
        if getattr(a, "mode", None):
            if r["args"].get("hub.mode", [None])[0] != a.mode:
                continue
        if getattr(a, "answered", None) is not None:
            if r.get("answered") != a.answered:
                continue
        if getattr(a, "after", None) is not None and r["t"] < a.after:
            continue
        if getattr(a, "with_id", None) and hdr(r, "X-Hub-Id") != a.with_id:
            continue
        out.append(r)
    return out


def filter_args(q):
    q.add_argument("--log", required=True)
    q.add_argument("--path")
    q.add_argument("--path-prefix", help="paths starting with this")
    q.add_argument("--method")
    q.add_argument("--mode", help="hub.mode of a GET")
    q.add_argument("--answered", type=int, help="the status we answered")
    q.add_argument("--after", type=float, help="epoch seconds")
    q.add_argument("--with-id", help="X-Hub-Id")


def cmd_count(a):
    print(len(select(read_log(a.log), a)))


def cmd_wait(a):
    """Wait until at least --n requests match (exit 1 with what was seen on
    timeout)."""
    deadline = time.monotonic() + a.timeout
    n = 0
    while time.monotonic() < deadline:
        n = len(select(read_log(a.log), a))
        if n >= a.n:
            print(n)
            return
        time.sleep(0.05)
    die("timeout after %.1fs: %d matching requests on %s, want >= %d"
        % (a.timeout, n, a.path, a.n))


def cmd_quiet(a):
    """Watch for --secs: no new matching request may arrive (exit 1 if one
    does)."""
    n0 = len(select(read_log(a.log), a))
    deadline = time.monotonic() + a.secs
    while time.monotonic() < deadline:
        recs = select(read_log(a.log), a)
        if len(recs) > n0:
            r = recs[n0]
            die("a request arrived: %s %s?%s X-Hub-Id=%s"
                % (r["method"], r["path"], r["query"], hdr(r, "X-Hub-Id")))
        time.sleep(0.05)
    print("quiet for %.1fs (%d before)" % (a.secs, n0))


def cmd_ids(a):
    for r in select(read_log(a.log), a):
        print("%s %s" % (hdr(r, "X-Hub-Id"), r.get("answered")))


def cmd_last_get(a):
    """The last matching GET as JSON: {mode, topic, challenge, lease, query
    args, answered}."""
    a.method = "GET"
    recs = select(read_log(a.log), a)
    if not recs:
        die("no GET on %s" % a.path)
    r = recs[-a.nth] if a.nth else recs[-1]
    g = lambda k: r["args"].get(k, [None])[0]
    out = {"mode": g("hub.mode"), "topic": g("hub.topic"),
           "challenge": g("hub.challenge"), "lease": g("hub.lease_seconds"),
           "reason": g("hub.reason"), "answered": r.get("answered"),
           "args": r["args"]}
    bad = []
    for kv in a.has_arg:
        k, _, v = kv.partition("=")
        if r["args"].get(k) != [v]:
            bad.append("%s=%r, want [%r]" % (k, r["args"].get(k), v))
    if bad:
        die("GET %s?%s: %s" % (r["path"], r["query"], "; ".join(bad)))
    if a.get:
        v = out.get(a.get)
        print("" if v is None else
              json.dumps(v) if isinstance(v, (dict, list)) else v)
    else:
        print(json.dumps(out, sort_keys=True))


def cmd_denied(a):
    """Every hub.mode=denied GET (docs/protocol.md 5) carries a non-empty
    hub.topic and hub.reason and no hub.challenge; prints how many came,
    per path."""
    recs = [r for r in read_log(a.log) if r["method"] == "GET"
            and r["args"].get("hub.mode") == ["denied"]]
    problems = []
    for r in recs:
        g = r["args"]
        if not g.get("hub.topic", [""])[0] or not g.get("hub.reason", [""])[0]:
            problems.append("%s?%s: no hub.topic or hub.reason" % (r["path"], r["query"]))
        if "hub.challenge" in g:
            problems.append("%s?%s: a challenge in a denial" % (r["path"], r["query"]))
    if problems:
        die("; ".join(problems))
    paths = {}
    for r in recs:
        paths[r["path"]] = paths.get(r["path"], 0) + 1
    print("%d denials %s" % (len(recs), json.dumps(paths, sort_keys=True)))


def parse_link(value):
    """Link header -> list of (uri, {param: value}); tolerant of spacing
    and quoting."""
    out = []
    for m in re.finditer(r'<([^>]*)>((?:\s*;\s*[^;,]+)*)', value or ""):
        params = {}
        for p in m.group(2).split(";"):
            p = p.strip()
            if not p:
                continue
            k, _, v = p.partition("=")
            params[k.strip().lower()] = v.strip().strip('"')
        out.append((m.group(1), params))
    return out


def link_rels(values):
    rels = {}
    for v in values:
        for uri, params in parse_link(v):
            for rel in params.get("rel", "").split():
                rels.setdefault(rel.lower(), []).append(uri)
    return rels


def read_pairs(paths):
    """'ID FILE [TIME]' lines -> ordered list of (id, file, time)."""
    out = []
    for p in paths:
        with open(p) as f:
            for line in f:
                w = line.split()
                if not w:
                    continue
                out.append((w[0], w[1] if len(w) > 1 else None,
                            float(w[2]) if len(w) > 2 else None))
    return out


def cmd_check(a):
    """The POSTs on --path against the publishes in --pairs:
    - exactly (or, with --at-least-once, at least) one 2xx-answered POST
      per acknowledged id, no id the hub did not acknowledge (unless
      --allow-extra), and the ids in strictly increasing order (first
      occurrences, with --at-least-once); retries of one id come before
      the next id is tried (in order: never ahead of an undelivered one);
    - each body byte-identical to the published file (ids with a file);
    - Content-Type as published (--ctype, or per id with --ctype-of);
    - Link: rel="hub" = --hub, rel="self" = --topic;
    - X-Hub-Signature = sha256=HMAC(--secret, body) exactly when a secret
      is given (--secret-of ID=SECRET overrides it from that id on);
    - with --query, the callback's own query string (parsed) on each."""
    pairs = read_pairs(a.pairs)
    want_ids = [p[0] for p in pairs]
    files = {p[0]: p[1] for p in pairs if p[1] and p[1] != "-"}
    recs = [r for r in read_log(a.log)
            if r["method"] == "POST" and r["path"] == a.path]
    if a.only_self:
        recs = [r for r in recs
                if link_rels(hdrs(r, "Link")).get("self") == [a.only_self]]
    problems = []
    ctype_of = {}
    for c in a.ctype_of:
        k, _, v = c.partition("=")
        ctype_of[k] = v
    secret_from = []
    for s in a.secret_of:
        k, _, v = s.partition("=")
        secret_from.append((id_key(k), v))
    secret_from.sort()

    def secret_for(hid):
        s = a.secret
        for k, v in secret_from:
            if id_key(hid) >= k:
                s = v
        return s

    cache = {}
    seen = []           # ids in arrival order (every attempt)
    done = []           # ids answered 2xx, in arrival order
    for i, r in enumerate(recs):
        hid = hdr(r, "X-Hub-Id")
        tag = "POST #%d (X-Hub-Id %s)" % (i, hid)
        if hid is None or not re.match(r"^[0-9]+-[0-9]+$", hid):
            problems.append("%s: no or bad X-Hub-Id" % tag)
            continue
        seen.append(hid)
        b = body(r)
        if hid in files:
            if files[hid] not in cache:
                with open(files[hid], "rb") as f:
                    cache[files[hid]] = f.read()
            if b != cache[files[hid]]:
                problems.append("%s: body differs from %s (%d vs %d bytes)"
                                % (tag, os.path.basename(files[hid]), len(b),
                                   len(cache[files[hid]])))
        ct = hdr(r, "Content-Type")
        want_ct = ctype_of.get(hid, a.ctype)
        if want_ct is not None and ct != want_ct:
            problems.append("%s: Content-Type %r, want %r" % (tag, ct, want_ct))
        rels = link_rels(hdrs(r, "Link"))
        if a.hub and rels.get("hub") != [a.hub]:
            problems.append("%s: Link rel=hub %r, want [%r] (Link: %r)"
                            % (tag, rels.get("hub"), a.hub, hdrs(r, "Link")))
        if a.topic and rels.get("self") != [a.topic]:
            problems.append("%s: Link rel=self %r, want [%r] (Link: %r)"
                            % (tag, rels.get("self"), a.topic, hdrs(r, "Link")))
        sig = hdr(r, "X-Hub-Signature")
        sec = secret_for(hid)
        if sec is None:
            if sig is not None and not a.ignore_signature:
                problems.append("%s: X-Hub-Signature %r without a secret"
                                % (tag, sig))
        else:
            want = "sha256=" + hmac.new(sec.encode(), b,
                                        hashlib.sha256).hexdigest()
            if sig is None:
                problems.append("%s: no X-Hub-Signature" % tag)
            elif not hmac.compare_digest(sig.lower(), want):
                problems.append("%s: X-Hub-Signature %r, want %r"
                                % (tag, sig, want))
        if a.query is not None:
            got_q = urllib.parse.parse_qs(r["query"], keep_blank_values=True)
            want_q = urllib.parse.parse_qs(a.query, keep_blank_values=True)
            if got_q != want_q:
                problems.append("%s: query %r, want %r" % (tag, r["query"], a.query))
        if 200 <= r.get("answered", 0) < 300:
            done.append(hid)
    # order: attempts never go back to an id before one already delivered
    # (except --at-least-once after a crash: then only first occurrences
    # must increase); never ahead of an undelivered id.
    order = done
    if a.at_least_once:
        first = []
        got = set()
        for h in done:
            if h not in got:
                first.append(h)
                got.add(h)
        order = first
    else:
        if len(set(done)) != len(done):
            problems.append("%d duplicate deliveries" % (len(done) - len(set(done))))
        # every attempt's id is the current head: an id is not attempted
        # after a later id was attempted
        for i in range(1, len(seen)):
            if id_key(seen[i]) < id_key(seen[i - 1]):
                problems.append("attempt #%d is %s after %s: out of order"
                                % (i, seen[i], seen[i - 1]))
                break
    for i in range(1, len(order)):
        if id_key(order[i]) <= id_key(order[i - 1]):
            problems.append("deliveries not in order at #%d: %s after %s"
                            % (i, order[i], order[i - 1]))
            break
    ws, ds = set(want_ids), set(done)
    missing = sorted(ws - ds, key=id_key)
    extra = sorted(ds - ws, key=id_key)
    if missing:
        problems.append("%d of %d not delivered (first %s)"
                        % (len(missing), len(ws), missing[:3]))
    if extra and not a.allow_extra:
        problems.append("%d delivered that were not published here (first %s)"
                        % (len(extra), extra[:3]))
    if a.max_attempts is not None and len(seen) > a.max_attempts:
        problems.append("%d attempts, want at most %d" % (len(seen), a.max_attempts))
    if problems:
        die("%s: %d POSTs, %d delivered: %s"
            % (a.path, len(recs), len(done), "; ".join(problems[:12])))
    print("ok: %s: %d POSTs, %d distinct ids delivered (%d repeats)"
          % (a.path, len(recs), len(ds), len(done) - len(ds)))


def cmd_check_bodies(a):
    """The 2xx-answered POSTs on --path, in order, carry exactly the bodies
    of the FILEs (byte-identical) with the Content-Types given (FILE=CTYPE)
    and the Link rel=self of --topic / rel=hub of --hub (publish pings:
    no id known in advance)."""
    recs = [r for r in read_log(a.log) if r["method"] == "POST"
            and r["path"] == a.path and 200 <= r.get("answered", 0) < 300]
    problems = []
    if len(recs) != len(a.files):
        problems.append("%d deliveries, want %d" % (len(recs), len(a.files)))
    prev = None
    for i, (r, fc) in enumerate(zip(recs, a.files)):
        fn, _, ct = fc.partition("=")
        with open(fn, "rb") as f:
            want = f.read()
        b = body(r)
        if b != want:
            problems.append("#%d: body %r, want %r" % (i, b[:80], want[:80]))
        if hdr(r, "Content-Type") != ct:
            problems.append("#%d: Content-Type %r, want %r"
                            % (i, hdr(r, "Content-Type"), ct))
        rels = link_rels(hdrs(r, "Link"))
        if a.topic and rels.get("self") != [a.topic]:
            problems.append("#%d: Link rel=self %r, want %r"
                            % (i, rels.get("self"), a.topic))
        if a.hub and rels.get("hub") != [a.hub]:
            problems.append("#%d: Link rel=hub %r, want %r"
                            % (i, rels.get("hub"), a.hub))
        hid = hdr(r, "X-Hub-Id")
        if hid is None or not re.match(r"^[0-9]+-[0-9]+$", hid):
            problems.append("#%d: X-Hub-Id %r" % (i, hid))
        elif prev is not None and id_key(hid) <= id_key(prev):
            problems.append("#%d: X-Hub-Id %s after %s" % (i, hid, prev))
        else:
            prev = hid
    if problems:
        die("%s: %s" % (a.path, "; ".join(problems)))
    print("ok: %d bodies" % len(recs))


def cmd_latency(a):
    """For each acknowledged id in --pairs (ID FILE TIME), the first 2xx
    POST with it on --path arrived at most --max seconds after the 202."""
    pairs = read_pairs([a.pairs])
    first = {}
    for r in read_log(a.log):
        if r["method"] == "POST" and r["path"] == a.path and \
                200 <= r.get("answered", 0) < 300:
            first.setdefault(hdr(r, "X-Hub-Id"), r["t"])
    worst = 0.0
    problems = []
    for hid, _, t in pairs:
        if hid not in first:
            problems.append("%s never delivered" % hid)
            continue
        d = first[hid] - t
        worst = max(worst, d)
        if d > a.max:
            problems.append("%s delivered %.2fs after the publish" % (hid, d))
    if problems:
        die("%s: %s" % (a.path, "; ".join(problems[:8])))
    print("ok: %d deliveries, worst %.3fs after the publish" % (len(pairs), worst))


def cmd_gaps(a):
    """Print the seconds between consecutive matching requests."""
    recs = select(read_log(a.log), a)
    print(" ".join("%.3f" % (recs[i]["t"] - recs[i - 1]["t"])
                   for i in range(1, len(recs))))


# ----------------------------------------------------- the hub's status

def get_json(port, path):
    st, _, data = request(port, "GET", path, timeout=5)
    if st != 200:
        raise RuntimeError("GET %s: %d" % (path, st))
    return json.loads(data)


def find_subs(obj, callback):
    """States of callback in a topic object of GET /topics, whatever the
    shape (docs/protocol.md 6 does not fix it): a dict holding the callback
    as a value (with "state"), or a dict keyed by the callback."""
    found = []

    def walk(o):
        if isinstance(o, dict):
            if callback in o.values():
                found.append(o.get("state", o.get("status")))
            for k, v in o.items():
                if k == callback:
                    if isinstance(v, dict):
                        found.append(v.get("state", v.get("status")))
                    else:
                        found.append(v)
                else:
                    walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)
    walk(obj)
    return found


def topic_obj(port, name, uri=None):
    for t in get_json(port, "/topics"):
        if (uri is None and t.get("name") == name) or \
                (uri is not None and t.get("topic") == uri):
            return t
    return None


def cmd_sub_state(a):
    """Print the state GET /topics shows for callback on topic name (or the
    topic whose URI is --uri): 'none' if it is not listed; with --want, wait
    until it is that (--timeout)."""
    deadline = time.monotonic() + a.timeout
    last = None
    while True:
        try:
            t = topic_obj(a.http, a.name, a.uri)
            st = find_subs(t, a.callback) if t is not None else []
            last = st[0] if st else "none"
            if len(st) > 1:
                last = "listed %d times: %s" % (len(st), st)
        except (OSError, RuntimeError, ValueError) as e:
            last = "error: %s" % e
        if a.want is None or last == a.want:
            print(last)
            return
        if time.monotonic() >= deadline:
            t = None
            try:
                t = topic_obj(a.http, a.name, a.uri)
            except Exception:
                pass
            die("GET /topics: %s is %r, want %r (topic: %s)"
                % (a.callback, last, a.want, json.dumps(t)))
        time.sleep(0.05)


def cmd_websub_metrics(a):
    """Print the /metrics series whose name matches --grep (WebSub words;
    the WebSocket series rshub_ws_* excluded)."""
    st, _, data = request(a.http, "GET", "/metrics", timeout=5)
    if st != 200:
        die("GET /metrics: %d" % st)
    for line in data.decode().split("\n"):
        name = re.split(r"[{ ]", line, 1)[0]
        if line and not line.startswith("#") and re.search(a.grep, name) \
                and not name.startswith("rshub_ws_"):
            print(line)


# ------------------------------------------------------------------ main

def main():
    p = argparse.ArgumentParser(prog="callback_server")
    sub = p.add_subparsers(dest="cmd", required=True)

    q = sub.add_parser("serve")
    q.add_argument("--port-file", required=True)
    q.add_argument("--log", required=True)
    q.add_argument("--route", action="append", default=[],
                   help="PATH:post=SPEC,get=SPEC")
    q.add_argument("--static", action="append", default=[],
                   help="PATH=FILE;CONTENT-TYPE (answered to any GET)")
    q.add_argument("--redirect", action="append", default=[],
                   help="PATH=TARGET: answer GETs of PATH with 302 to TARGET")
    q.add_argument("--default-post", default="ok")
    q.add_argument("--default-get", default="echo")
    q.set_defaults(fn=cmd_serve)

    q = sub.add_parser("form")
    q.add_argument("--http", type=int, required=True)
    q.add_argument("--path", default="/hub")
    q.add_argument("--ctype", default="application/x-www-form-urlencoded")
    q.add_argument("--raw", help="send this body instead of the params")
    q.add_argument("--timeout", type=float, default=10)
    q.add_argument("params", nargs="*")
    q.set_defaults(fn=cmd_form)

    q = sub.add_parser("form-many")
    q.add_argument("--http", type=int, required=True)
    q.add_argument("--topic", required=True)
    q.add_argument("--callback", required=True, help="URL; {i} = request #")
    q.add_argument("--mode", default="subscribe")
    q.add_argument("--count", type=int, required=True)
    q.add_argument("--concurrency", type=int, default=16)
    q.add_argument("--each", help="write 'i status' lines here")
    q.add_argument("--timeout", type=float, default=20)
    q.set_defaults(fn=cmd_form_many)

    q = sub.add_parser("raw")
    q.add_argument("--http", type=int, required=True)
    q.add_argument("--data", help="bytes, with Python escapes")
    q.add_argument("--file")
    q.add_argument("--wait", type=float, default=1.0)
    q.add_argument("--timeout", type=float, default=10)
    q.set_defaults(fn=cmd_raw)

    q = sub.add_parser("publish")
    q.add_argument("--http", type=int, required=True)
    q.add_argument("--topic", required=True)
    q.add_argument("--token")
    q.add_argument("--ctype", default="application/xml")
    q.add_argument("--kind", default="change")
    q.add_argument("--count", type=int, default=1)
    q.add_argument("--start", type=int, default=0)
    q.add_argument("--pad", type=int, default=0)
    q.add_argument("--interval", type=float, default=0)
    q.add_argument("--dir")
    q.add_argument("--out", required=True)
    q.add_argument("--timeout", type=float, default=10)
    q.add_argument("files", nargs="*")
    q.set_defaults(fn=cmd_publish)

    q = sub.add_parser("count")
    filter_args(q)
    q.set_defaults(fn=cmd_count)

    q = sub.add_parser("wait")
    filter_args(q)
    q.add_argument("--n", type=int, default=1)
    q.add_argument("--timeout", type=float, default=10)
    q.set_defaults(fn=cmd_wait)

    q = sub.add_parser("quiet")
    filter_args(q)
    q.add_argument("--secs", type=float, required=True)
    q.set_defaults(fn=cmd_quiet)

    q = sub.add_parser("ids")
    filter_args(q)
    q.set_defaults(fn=cmd_ids)

    q = sub.add_parser("last-get")
    filter_args(q)
    q.add_argument("--nth", type=int, default=0, help="nth from the end")
    q.add_argument("--get")
    q.add_argument("--has-arg", action="append", default=[],
                   help="K=V: the query has exactly this one value for K")
    q.set_defaults(fn=cmd_last_get)

    q = sub.add_parser("denied")
    q.add_argument("--log", required=True)
    q.set_defaults(fn=cmd_denied)

    q = sub.add_parser("check")
    q.add_argument("--log", required=True)
    q.add_argument("--path", required=True)
    q.add_argument("--pairs", action="append", default=[])
    q.add_argument("--ctype")
    q.add_argument("--ctype-of", action="append", default=[], help="ID=CTYPE")
    q.add_argument("--hub")
    q.add_argument("--topic")
    q.add_argument("--secret")
    q.add_argument("--secret-of", action="append", default=[],
                   help="ID=SECRET: the secret from that id on")
    q.add_argument("--ignore-signature", action="store_true")
    q.add_argument("--at-least-once", action="store_true")
    q.add_argument("--allow-extra", action="store_true")
    q.add_argument("--max-attempts", type=int)
    q.add_argument("--query", help="the callback's own query, kept")
    q.add_argument("--only-self", help="only the POSTs with this Link rel=self "
                   "(a callback subscribed to several topics)")
    q.set_defaults(fn=cmd_check)

    q = sub.add_parser("check-bodies")
    q.add_argument("--log", required=True)
    q.add_argument("--path", required=True)
    q.add_argument("--topic")
    q.add_argument("--hub")
    q.add_argument("files", nargs="*", help="FILE=CONTENT-TYPE")
    q.set_defaults(fn=cmd_check_bodies)

    q = sub.add_parser("latency")
    q.add_argument("--log", required=True)
    q.add_argument("--path", required=True)
    q.add_argument("--pairs", required=True)
    q.add_argument("--max", type=float, required=True)
    q.set_defaults(fn=cmd_latency)

    q = sub.add_parser("gaps")
    filter_args(q)
    q.set_defaults(fn=cmd_gaps)

    q = sub.add_parser("sub-state")
    q.add_argument("--http", type=int, required=True)
    q.add_argument("--name")
    q.add_argument("--uri", help="find the topic by its URI, not its name")
    q.add_argument("--callback", required=True)
    q.add_argument("--want")
    q.add_argument("--timeout", type=float, default=5)
    q.set_defaults(fn=cmd_sub_state)

    q = sub.add_parser("websub-metrics")
    q.add_argument("--http", type=int, required=True)
    q.add_argument("--grep",
                   default="websub|verif|callback|subscri|lease|ping")
    q.set_defaults(fn=cmd_websub_metrics)

    a = p.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
