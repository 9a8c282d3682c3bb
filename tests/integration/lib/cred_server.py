#!/usr/bin/python3
"""cred_server.py - a static web server that records what credentials
reach it, for rssub's credential and TLS tests
(tests/integration/test_sub_credentials.sh).

`serve` serves ROOT (files as they are on disk; a missing file, a
directory or a path with "." or ".." segments: 404) on 127.0.0.1 at a
port the kernel picks, written to --ready as {"port":N}, over HTTP or,
with --tls CERT KEY, HTTPS. With --client-ca CA it asks for a client
certificate (optional) and records whether one was shown and verified
against CA. Every request is recorded as one JSON line in --log: method,
path, the request headers, "client_cert" (true/false). Options:
  --token T            every request needs "Authorization: Bearer T":
                       401 (WWW-Authenticate: Bearer) without, 403 other
  --basic USER:PASS    every request needs this basic auth (401 without)
  --redirect P=BASE    a path starting with P answers 302, Location BASE
                       followed by the path (another origin, say)
  --forbid-dirs        a directory (the root too) answers 403, as nginx
                       does without an index and autoindex off
  --forbid PATH        this path answers 403 (a file the web server may
                       not read), and with a trailing "/" every path
                       below it; repeatable
`show` prints the recorded requests of a log whose path contains a
string, with the headers asked for (one line each; "-" when absent), so
that the shell test can grep them.

Debian's /usr/bin/python3, standard library only; loopback only.
"""
import argparse
import base64
import json
import mimetypes
import os
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.dont_write_bytecode = True


def make_handler(args, log_lock):
    redirects = []
    for r in args.redirect or []:
        p, _, base = r.partition("=")
        redirects.append((p, base))
    basic = None
    if args.basic:
        basic = "Basic " + base64.b64encode(args.basic.encode()).decode()

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):
            pass

        def record(self, status):
            cert = False
            if isinstance(self.connection, ssl.SSLSocket):
                try:
                    cert = bool(self.connection.getpeercert())
                except ValueError:
                    cert = False
            rec = {"method": self.command, "path": self.path,
                   "status": status, "client_cert": cert,
                   "headers": {k.lower(): v for k, v in self.headers.items()}}
            with log_lock:
                with open(args.log, "a") as f:
                    f.write(json.dumps(rec) + "\n")

        def answer(self, status, body=b"", headers=None):
            self.record(status)
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True   # the client hung up

        def do_GET(self):
            auth = self.headers.get("Authorization")
            if args.token is not None:
                if auth is None or not auth.startswith("Bearer "):
                    return self.answer(401, b"token needed\n",
                                       {"WWW-Authenticate": "Bearer"})
                if auth[7:] != args.token:
                    return self.answer(403, b"wrong token\n")
            if basic is not None and auth != basic:
                return self.answer(401, b"login needed\n",
                                   {"WWW-Authenticate": 'Basic realm="t"'})
            path = self.path.split("?", 1)[0]
            for p, base in redirects:
                if path.startswith(p):
                    return self.answer(302, b"moved\n",
                                       {"Location": base + path})
            segs = [s for s in path.split("/") if s]
            if any(s in (".", "..") for s in segs):
                return self.answer(404, b"no\n")
            fp = os.path.join(args.root, *segs)
            if any(path == f or (f.endswith("/") and path.startswith(f))
                   for f in args.forbid or []):
                return self.answer(403, b"forbidden\n")
            if args.forbid_dirs and os.path.isdir(fp):
                return self.answer(403, b"directory listing forbidden\n")
            if path.endswith("/") or not os.path.isfile(fp):
                return self.answer(404, b"not found\n")
            with open(fp, "rb") as f:
                data = f.read()
            ctype = mimetypes.guess_type(fp)[0] or "application/octet-stream"
            if fp.endswith(".xml"):
                ctype = "application/xml"
            self.answer(200, data, {"Content-Type": ctype})

        do_HEAD = do_GET

    return H


def cmd_serve(args):
    lock = threading.Lock()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(args, lock))
    srv.daemon_threads = True
    if args.tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls[0], args.tls[1])
        if args.client_ca:
            ctx.load_verify_locations(args.client_ca)
            ctx.verify_mode = ssl.CERT_OPTIONAL
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    tmp = args.ready + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps({"port": srv.server_address[1]}))
    os.rename(tmp, args.ready)
    srv.serve_forever()


def cmd_show(args):
    try:
        lines = open(args.log).read().splitlines()
    except FileNotFoundError:
        return
    for line in lines:
        r = json.loads(line)
        if args.path not in r["path"]:
            continue
        vals = ["%s=%s" % (h, r["headers"].get(h.lower(), "-"))
                for h in args.header]
        print(r["method"], r["path"], r["status"],
              "client_cert=%s" % str(r["client_cert"]).lower(), *vals)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sp = ap.add_subparsers(dest="cmd", required=True)
    p = sp.add_parser("serve")
    p.add_argument("--root", required=True)
    p.add_argument("--ready", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    p.add_argument("--client-ca")
    p.add_argument("--token")
    p.add_argument("--basic")
    p.add_argument("--redirect", action="append")
    p.add_argument("--forbid-dirs", action="store_true")
    p.add_argument("--forbid", action="append")
    p = sp.add_parser("show")
    p.add_argument("--log", required=True)
    p.add_argument("--path", default="")
    p.add_argument("header", nargs="*")
    args = ap.parse_args()
    {"serve": cmd_serve, "show": cmd_show}[args.cmd](args)


if __name__ == "__main__":
    main()
