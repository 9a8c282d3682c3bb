#!/usr/bin/python3
"""static_source.py - a programmable static ResourceSync Source for the
subscriber's pull-side tests (tests/integration/test_sub_sync.sh).

`serve` serves a directory tree as it is on disk (the documents the test
wrote with the `write-*` subcommands, and the resources), on 127.0.0.1 at a
port the kernel picks, written to --ready as {"port":N}. HTTP/1.1 with
keep-alive, a strong ETag (the MD5 of the bytes, so a file rewritten with
the same content still answers 304), Last-Modified, If-None-Match and
If-Modified-Since (304), HEAD. Paths are percent-decoded per segment; a "."
or ".." segment, a decoded '/' or NUL, a directory, a missing file: 404.

Faults, per raw request path (as sent, percent-encoding kept, query
dropped), set at run time through the control URL (POST /_ctl/rules, a JSON
object PATH -> RULE, replacing the table and its counters). A RULE applies
to the next "count" requests of PATH (every request without "count"), then
PATH is served normally again:
  status:N [retry_after:S]  answer N (a one-line body), with Retry-After
  corrupt:true              the file's bytes with every byte flipped (same
                            length, another hash)
  body:TEXT                 TEXT instead of the file
  truncate:N                Content-Length of the whole body, N bytes of
                            it, then the connection is closed
  slow:SECS                 the body in 10 pieces over SECS seconds
  delay:SECS                wait SECS before answering
  headers:{NAME:VALUE}      extra response headers (with any other fault,
                            or alone)
Every request but /_ctl/ ones is counted per path (total, per status, and
its time): GET /_ctl/counts returns them, POST /_ctl/reset clears them.
Each request is also logged to stderr: "TIME METHOD PATH STATUS".

`ctl` is the test's client of the control URL. `write-source`,
`write-resourcelist` (plain, an index with parts, or rel="next" pages) and
`write-changelist` (one list, and the Change List Index over every
changelist-*.xml present) write ResourceSync 1.1 documents for a directory
with md5 and sha-256 hashes, lengths, types, lastmods (the files' mtimes)
and datetimes (now, in microseconds, strictly increasing). `doc-time`
prints a document's at (or from).

Debian's /usr/bin/python3, standard library only; loopback only.
"""
import argparse
import email.utils
import hashlib
import json
import os
import socket
import sys
import threading
import time
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.sax.saxutils import escape, quoteattr

sys.dont_write_bytecode = True     # no __pycache__ in the source tree

SM_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
RS_NS = "http://www.openarchives.org/rs/terms/"
TYPES = {".xml": "application/xml", ".txt": "text/plain",
         ".html": "text/html", ".json": "application/json"}


def die(msg, rc=1):
    print("static_source: " + msg, file=sys.stderr)
    sys.exit(rc)


def write_atomic(path, data):
    if isinstance(data, str):
        data = data.encode()
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.rename(path + ".tmp", path)


def content_type(path):
    if path.endswith("/.well-known/resourcesync"):
        return "application/xml"
    return TYPES.get(os.path.splitext(path)[1], "application/octet-stream")


# ------------------------------------------------------------- the server

class State:
    """Rules and counters, shared by the handler threads (one lock)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rules = {}
        self.fired = {}
        self.counts = {}

    def take_rule(self, path):
        """The rule that applies to this request of path, or None."""
        with self.lock:
            r = self.rules.get(path)
            if r is None:
                return None
            n = self.fired.get(path, 0)
            if "count" in r and n >= int(r["count"]):
                # spent: only its extra headers stay
                return {"headers": r["headers"]} if "headers" in r else None
            self.fired[path] = n + 1
            return r

    def count(self, path, status):
        with self.lock:
            c = self.counts.setdefault(path, {"n": 0, "status": {},
                                              "times": []})
            c["n"] += 1
            c["status"][str(status)] = c["status"].get(str(status), 0) + 1
            c["times"].append(time.monotonic())


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "static_source/1"

    def setup(self):
        super().setup()
        # headers and body are two writes: without this, Nagle and the
        # client's delayed ACK add 40 ms to every keep-alive request
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):
        pass

    def log_req(self, status):
        sys.stderr.write("%.3f %s %s %s\n" % (time.time(), self.command,
                                              self.path, status))
        sys.stderr.flush()

    def do_GET(self):
        self.serve(head=False)

    def do_HEAD(self):
        self.serve(head=True)

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n > 0 else b""
        st = self.server.state
        if path == "/_ctl/rules":
            try:
                rules = json.loads(body or b"{}")
                assert isinstance(rules, dict)
            except (ValueError, AssertionError):
                return self.reply(400, b"bad rules\n")
            with st.lock:
                st.rules = rules
                st.fired = {}
            return self.reply(200, b"ok\n")
        if path == "/_ctl/reset":
            with st.lock:
                st.counts = {}
            return self.reply(200, b"ok\n")
        self.reply(405, b"method not allowed\n")

    def reply(self, status, body, ctype="text/plain", headers=None,
              head=False):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def file_of(self, path):
        """The file a request path names, or None."""
        segs = path.split("/")[1:]
        out = []
        for s in segs:
            d = urllib.parse.unquote(s, errors="strict")
            if d in (".", "..") or "/" in d or "\0" in d:
                return None
            out.append(d)
        f = os.path.join(self.server.root, *out)
        if not os.path.isfile(f):
            return None
        real = os.path.realpath(f)
        if not real.startswith(self.server.root + os.sep):
            return None
        return f

    def serve(self, head):
        path = self.path.split("?", 1)[0]
        st = self.server.state
        if path == "/_ctl/counts":
            with st.lock:
                body = json.dumps(st.counts).encode()
            return self.reply(200, body, "application/json", head=head)
        rule = st.take_rule(path) or {}
        extra = dict(rule.get("headers") or {})
        if "delay" in rule:
            time.sleep(float(rule["delay"]))
        if "status" in rule:
            status = int(rule["status"])
            if "retry_after" in rule:
                extra["Retry-After"] = str(rule["retry_after"])
            st.count(path, status)
            self.log_req(status)
            return self.reply(status, b"fault %d\n" % status, headers=extra,
                              head=head)
        try:
            f = self.file_of(path)
        except UnicodeDecodeError:
            f = None
        if f is None:
            st.count(path, 404)
            self.log_req(404)
            return self.reply(404, b"not found\n", headers=extra, head=head)
        with open(f, "rb") as fh:
            data = fh.read()
        mtime = os.stat(f).st_mtime
        etag = '"%s"' % hashlib.md5(data).hexdigest()
        lm = email.utils.formatdate(mtime, usegmt=True)
        inm = self.headers.get("If-None-Match")
        ims = self.headers.get("If-Modified-Since")
        fresh = False
        if inm is not None:
            tags = [t.strip() for t in inm.split(",")]
            fresh = "*" in tags or etag in [t[2:] if t.startswith("W/")
                                            else t for t in tags]
        elif ims is not None:
            try:
                since = email.utils.parsedate_to_datetime(ims).timestamp()
                fresh = int(mtime) <= since
            except (TypeError, ValueError):
                fresh = False
        if fresh and not rule.keys() - {"headers"}:
            st.count(path, 304)
            self.log_req(304)
            self.send_response(304)
            self.send_header("ETag", etag)
            self.send_header("Last-Modified", lm)
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()
            return
        if rule.get("corrupt"):
            data = bytes(b ^ 0xff for b in data)
        if "body" in rule:
            data = rule["body"].encode()
        st.count(path, 200)
        self.log_req(200)
        self.send_response(200)
        self.send_header("Content-Type", content_type(f))
        self.send_header("Content-Length", str(len(data)))
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", lm)
        for k, v in extra.items():
            self.send_header(k, v)
        self.end_headers()
        if head:
            return
        try:
            self.send_body(rule, data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True    # the client gave up: fine

    def send_body(self, rule, data):
        if "truncate" in rule:
            self.wfile.write(data[:int(rule["truncate"])])
            self.wfile.flush()
            self.close_connection = True
            return
        if "slow" in rule:
            pieces = 10
            step = (len(data) + pieces - 1) // pieces or 1
            for i in range(0, max(len(data), 1), step):
                self.wfile.write(data[i:i + step])
                self.wfile.flush()
                time.sleep(float(rule["slow"]) / pieces)
            return
        self.wfile.write(data)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def cmd_serve(a):
    srv = Server(("127.0.0.1", a.port), Handler)
    srv.root = os.path.realpath(a.root)
    srv.state = State()
    port = srv.server_address[1]
    if a.ready:
        write_atomic(a.ready, '{"port":%d}\n' % port)
    print("serving %s on 127.0.0.1:%d" % (srv.root, port), file=sys.stderr,
          flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


# ------------------------------------------------------------- the client

def ctl_url(a, path):
    return "http://127.0.0.1:%d%s" % (a.port, path)


def ctl_post(a, path, body):
    req = urllib.request.Request(ctl_url(a, path), data=body.encode(),
                                 method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        r.read()


def ctl_counts(a):
    with urllib.request.urlopen(ctl_url(a, "/_ctl/counts"), timeout=10) as r:
        return json.loads(r.read())


def cmd_ctl(a):
    """rules JSON | reset | counts | count PATH [STATUS] | gap PATH |
    paths PREFIX [STATUS]"""
    op = a.args[0] if a.args else ""
    if op == "rules" and len(a.args) == 2:
        json.loads(a.args[1])           # refuse a typo here, not in serve
        ctl_post(a, "/_ctl/rules", a.args[1])
    elif op == "reset":
        ctl_post(a, "/_ctl/reset", "")
    elif op == "counts":
        print(json.dumps(ctl_counts(a), indent=1, sort_keys=True))
    elif op == "count" and len(a.args) in (2, 3):
        c = ctl_counts(a).get(a.args[1])
        if c is None:
            print(0)
        elif len(a.args) == 3:
            print(c["status"].get(a.args[2], 0))
        else:
            print(c["n"])
    elif op == "gap" and len(a.args) == 2:
        # the shortest time between two requests of PATH, in seconds
        t = (ctl_counts(a).get(a.args[1]) or {}).get("times", [])
        gaps = [y - x for x, y in zip(t, t[1:])]
        print("%.3f" % min(gaps) if gaps else "none")
    elif op == "paths" and len(a.args) in (2, 3):
        # every path under PREFIX requested (with STATUS), one per line
        for p, c in sorted(ctl_counts(a).items()):
            if p.startswith(a.args[1]) and (
                    len(a.args) == 2 or c["status"].get(a.args[2], 0) > 0):
                print(p)
    else:
        die("ctl: bad arguments: %s" % " ".join(a.args), 2)


# -------------------------------------------------------------- documents

class Clock:
    """Now in UTC microseconds, strictly increasing within one run."""

    def __init__(self):
        self.last = 0

    def now(self):
        t = max(int(time.time() * 1e6), self.last + 1)
        self.last = t
        return t


def fmt_time(us):
    d = datetime.fromtimestamp(us // 1000000, tz=timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S") + ".%06dZ" % (us % 1000000)


def parse_time(s):
    d = datetime.fromisoformat(s.replace("Z", "+00:00"))
    return int(d.timestamp()) * 1000000 + d.microsecond


def head(root, md, links):
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<%s xmlns="%s" xmlns:rs="%s">' % (root, SM_NS, RS_NS)]
    for rel, href in links:
        out.append('  <rs:ln rel=%s href=%s/>' % (quoteattr(rel),
                                                   quoteattr(href)))
    out.append('  <rs:md %s/>' % " ".join('%s=%s' % (k, quoteattr(v))
                                          for k, v in md))
    return out


def url_entry(tag, loc, lastmod=None, md=(), links=()):
    s = '  <%s><loc>%s</loc>' % (tag, escape(loc))
    if lastmod is not None:
        s += '<lastmod>%s</lastmod>' % lastmod
    if md:
        s += '<rs:md %s/>' % " ".join('%s=%s' % (k, quoteattr(v))
                                      for k, v in md)
    for rel, href in links:
        s += '<rs:ln rel=%s href=%s/>' % (quoteattr(rel), quoteattr(href))
    return s + '</%s>' % tag


def file_md(path):
    with open(path, "rb") as f:
        data = f.read()
    return [("hash", "md5:%s sha-256:%s" % (hashlib.md5(data).hexdigest(),
                                            hashlib.sha256(data).hexdigest())),
            ("length", str(len(data))), ("type", content_type(path))]


def file_lastmod(path):
    return fmt_time(os.stat(path).st_mtime_ns // 1000)


def loc_of(base, rel):
    return base.rstrip("/") + "/" + urllib.parse.quote(rel)


def resources(www, sub):
    """Relative paths (from www) of every file under www/sub, sorted."""
    out = []
    for d, dirs, files in os.walk(os.path.join(www, sub)):
        dirs.sort()
        for f in files:
            out.append(os.path.relpath(os.path.join(d, f), www))
    return sorted(out)


def cmd_write_source(a):
    b = a.base.rstrip("/")
    os.makedirs(os.path.join(a.www, ".well-known"), exist_ok=True)
    sd = head("urlset", [("capability", "description")], [])
    sd.append(url_entry("url", b + "/capabilitylist.xml",
                        md=[("capability", "capabilitylist")]))
    sd.append("</urlset>")
    write_atomic(os.path.join(a.www, ".well-known", "resourcesync"),
                 "\n".join(sd) + "\n")
    cl = head("urlset", [("capability", "capabilitylist")],
              [("up", b + "/.well-known/resourcesync")])
    cl.append(url_entry("url", b + "/resourcelist.xml",
                        md=[("capability", "resourcelist")]))
    cl.append(url_entry("url", b + "/changelist-index.xml",
                        md=[("capability", "changelist")]))
    cl.append("</urlset>")
    write_atomic(os.path.join(a.www, "capabilitylist.xml"),
                 "\n".join(cl) + "\n")


def cmd_write_resourcelist(a):
    b = a.base.rstrip("/")
    up = [("up", b + "/capabilitylist.xml")]
    at = fmt_time(Clock().now())
    for f in os.listdir(a.www):
        if f.startswith("resourcelist-") and f.endswith(".xml"):
            os.remove(os.path.join(a.www, f))
    entries = [url_entry("url", loc_of(b, r),
                         file_lastmod(os.path.join(a.www, r)),
                         file_md(os.path.join(a.www, r)))
               for r in resources(a.www, a.dir)]
    n = max(1, a.parts or a.pages or 1)
    size = (len(entries) + n - 1) // n or 1
    chunks = [entries[i:i + size] for i in range(0, len(entries), size)] \
        or [[]]
    md = [("capability", "resourcelist"), ("at", at), ("completed", at)]
    if a.parts:
        idx = head("sitemapindex", md, up)
        for i, c in enumerate(chunks, 1):
            name = "resourcelist-%d.xml" % i
            doc = head("urlset", md, up + [("index",
                                            b + "/resourcelist.xml")])
            write_atomic(os.path.join(a.www, name),
                         "\n".join(doc + c + ["</urlset>"]) + "\n")
            idx.append(url_entry("sitemap", b + "/" + name))
        idx.append("</sitemapindex>")
        write_atomic(os.path.join(a.www, "resourcelist.xml"),
                     "\n".join(idx) + "\n")
        return
    for i, c in enumerate(chunks, 1):
        name = "resourcelist.xml" if i == 1 else "resourcelist-%d.xml" % i
        links = list(up)
        if i < len(chunks):
            links.append(("next", b + "/resourcelist-%d.xml" % (i + 1)))
        doc = head("urlset", md, links)
        write_atomic(os.path.join(a.www, name),
                     "\n".join(doc + c + ["</urlset>"]) + "\n")


def write_changelist_index(a, b):
    lists = sorted(f for f in os.listdir(a.www)
                   if f.startswith("changelist-") and f.endswith(".xml")
                   and f != "changelist-index.xml")
    import xml.etree.ElementTree as ET
    idx_from = None
    kids = []
    for f in lists:
        root = ET.parse(os.path.join(a.www, f)).getroot()
        md = root.find("{%s}md" % RS_NS).attrib
        kmd = [("capability", "changelist"), ("from", md["from"])]
        if "until" in md:
            kmd.append(("until", md["until"]))
        if idx_from is None or parse_time(md["from"]) < parse_time(idx_from):
            idx_from = md["from"]
        kids.append(url_entry("sitemap", b + "/" + f, md=kmd))
    md = [("capability", "changelist"),
          ("from", idx_from or fmt_time(Clock().now()))]
    idx = head("sitemapindex", md, [("up", b + "/capabilitylist.xml")])
    write_atomic(os.path.join(a.www, "changelist-index.xml"),
                 "\n".join(idx + kids + ["</sitemapindex>"]) + "\n")


def cmd_write_changelist(a):
    """CHANGE:PATH... (PATH relative to www) into changelist-N.xml, then
    the index over every changelist-*.xml present."""
    b = a.base.rstrip("/")
    clock = Clock()
    entries = []
    for ch in a.changes:
        change, _, rel = ch.partition(":")
        if change not in ("created", "updated", "deleted") or not rel:
            die("write-changelist: bad change %r" % ch, 2)
        dt = fmt_time(clock.now())
        f = os.path.join(a.www, rel)
        if change == "deleted":
            entries.append(url_entry("url", loc_of(b, rel), md=[
                ("change", "deleted"), ("datetime", dt)]))
        else:
            entries.append(url_entry("url", loc_of(b, rel), file_lastmod(f),
                                     [("change", change), ("datetime", dt)]
                                     + file_md(f)))
    md = [("capability", "changelist"), ("from", a.from_)]
    if a.until:
        md.append(("until", a.until))
    doc = head("urlset", md, [("up", b + "/capabilitylist.xml"),
                              ("index", b + "/changelist-index.xml")])
    write_atomic(os.path.join(a.www, "changelist-%d.xml" % a.n),
                 "\n".join(doc + entries + ["</urlset>"]) + "\n")
    write_changelist_index(a, b)


def cmd_doc_time(a):
    import xml.etree.ElementTree as ET
    md = ET.parse(a.file).getroot().find("{%s}md" % RS_NS).attrib
    print(md.get("at") or md.get("from") or "")


def cmd_now(a):
    print(fmt_time(Clock().now()))


def main():
    ap = argparse.ArgumentParser(prog="static_source.py")
    sp = ap.add_subparsers(dest="cmd", required=True)
    p = sp.add_parser("serve", help="serve ROOT on 127.0.0.1")
    p.add_argument("--root", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ready", help='write {"port":N} here once listening')
    p.set_defaults(fn=cmd_serve)
    p = sp.add_parser("ctl", help="talk to a serve: " + cmd_ctl.__doc__)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("args", nargs="*")
    p.set_defaults(fn=cmd_ctl)
    p = sp.add_parser("write-source",
                      help="Source Description and Capability List")
    p.add_argument("--www", required=True)
    p.add_argument("--base", required=True)
    p.set_defaults(fn=cmd_write_source)
    p = sp.add_parser("write-resourcelist",
                      help="resourcelist.xml over every file under DIR")
    p.add_argument("--www", required=True)
    p.add_argument("--base", required=True)
    p.add_argument("--dir", default="data")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--parts", type=int, default=0,
                   help="an index over N parts")
    g.add_argument("--pages", type=int, default=0,
                   help='N pages chained by rel="next"')
    p.set_defaults(fn=cmd_write_resourcelist)
    p = sp.add_parser("write-changelist",
                      help="changelist-N.xml and changelist-index.xml")
    p.add_argument("--www", required=True)
    p.add_argument("--base", required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--from", dest="from_", required=True)
    p.add_argument("--until")
    p.add_argument("changes", nargs="*", help="created|updated|deleted:PATH")
    p.set_defaults(fn=cmd_write_changelist)
    p = sp.add_parser("doc-time", help="a document's at (or from)")
    p.add_argument("file")
    p.set_defaults(fn=cmd_doc_time)
    p = sp.add_parser("now", help="now, as the documents write it")
    p.set_defaults(fn=cmd_now)
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
