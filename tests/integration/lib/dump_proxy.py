#!/usr/bin/python3
"""dump_proxy.py - a logging reverse proxy in front of one rssource, for
tests/integration/test_source_dump.sh: rssource runs with --base-url set to
this proxy, so every request a Destination makes (documents, dump
packages, resources) passes here and is logged, one "METHOD PATH STATUS"
line each, to --log.

The upstream port is read from --upstream-file at every request (the proxy
starts first: rssource needs its URL). Tampering, also re-read at every
request: --tamper-file holds package names (resourcedump-G-K.zip), one a
line; such a package is served with the first byte of its first stored
member (other than manifest.xml) flipped - same length, same ZIP
structure, wrong content - so a Destination must refuse that one member
and fetch it on its own.

Usage: dump_proxy.py --ready FILE --upstream-file FILE --tamper-file FILE
                     --log FILE
"""
import argparse
import http.client
import http.server
import io
import json
import os
import struct
import threading
import zipfile


def tamper(body):
    """Flip the first content byte of the first stored member other than
    manifest.xml: its local header is 30 bytes plus name and extra."""
    zf = zipfile.ZipFile(io.BytesIO(body))
    for info in zf.infolist():
        if info.filename == "manifest.xml" or info.file_size == 0:
            continue
        off = info.header_offset
        nlen, xlen = struct.unpack("<HH", body[off + 26:off + 30])
        at = off + 30 + nlen + xlen
        b = bytearray(body)
        b[at] ^= 0xFF
        return bytes(b), info.filename
    return body, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ready", required=True)
    ap.add_argument("--upstream-file", required=True)
    ap.add_argument("--tamper-file", required=True)
    ap.add_argument("--log", required=True)
    a = ap.parse_args()
    lock = threading.Lock()

    def log(line):
        with lock, open(a.log, "a") as f:
            f.write(line + "\n")

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            pass

        def relay(self, head):
            with open(a.upstream_file) as f:
                port = int(f.read().strip())
            try:
                with open(a.tamper_file) as f:
                    bad = set(x.strip() for x in f if x.strip())
            except FileNotFoundError:
                bad = set()
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            hdrs = {k: v for k, v in self.headers.items()
                    if k.lower() not in ("connection", "keep-alive")}
            c.request(self.command, self.path, headers=hdrs)
            r = c.getresponse()
            body = r.read()
            c.close()
            name = self.path.rsplit("/", 1)[-1]
            if r.status == 200 and not head and name in bad:
                body, member = tamper(body)
                log("TAMPERED %s %s" % (name, member))
            self.send_response(r.status)
            for k, v in r.getheaders():
                if k.lower() not in ("connection", "keep-alive",
                                     "transfer-encoding", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length",
                             r.getheader("Content-Length", "0") if head
                             else str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)
            log("%s %s %d" % (self.command, self.path, r.status))

        def do_GET(self):
            self.relay(False)

        def do_HEAD(self):
            self.relay(True)

    class S(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            pass                # a client that hung up: nothing to report

    srv = S(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    tmp = a.ready + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"port": srv.server_address[1]}, f)
    os.rename(tmp, a.ready)
    srv.serve_forever()


if __name__ == "__main__":
    main()
