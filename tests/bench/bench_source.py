#!/usr/bin/python3
"""bench_source.py - the Python side of bench_source.sh.

  gen DIR N SIZE        N files of SIZE random bytes, 1,000 per directory
  latency ...           write files at a steady rate and time each one from
                        close() to the arrival of its change notification on
                        the hub's WebSocket channel

Run with Debian's /usr/bin/python3 (python3-websockets is installed for it).
"""
import argparse
import asyncio
import json
import os
import sys
import threading
import time
import xml.etree.ElementTree as ET

SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"


def cmd_gen(a):
    per_dir = 1000
    chunk = os.urandom(a.size + 4096)
    for i in range(a.n):
        d = os.path.join(a.dir, "d%03d" % (i // per_dir))
        if i % per_dir == 0:
            os.makedirs(d, exist_ok=True)
        off = i % 4096
        with open(os.path.join(d, "f%06d.txt" % i), "wb") as f:
            f.write(chunk[off:off + a.size])


def quantile(v, q):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


def cmd_latency(a):
    import websockets

    closed = {}           # loc -> time the writer closed the file
    arrived = {}          # loc -> time its notification arrived
    os.makedirs(os.path.join(a.dir, a.sub), exist_ok=True)
    stop = threading.Event()

    def writer():
        t0 = time.monotonic() + 0.5
        for k in range(a.count):
            due = t0 + k / a.rate
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            name = "%s/l%06d.txt" % (a.sub, k)
            loc = a.base + name
            with open(os.path.join(a.dir, name), "wb") as f:
                f.write(b"latency probe %d\n" % k)
            closed[loc] = time.time()
        stop.set()

    async def subscriber():
        uri = "ws://127.0.0.1:%d/channel/%s" % (a.ws, a.chan)
        async with websockets.connect(uri, max_size=None,
                                      ping_interval=None) as ws:
            th = threading.Thread(target=writer)
            th.start()
            deadline = None
            while True:
                if stop.is_set() and deadline is None:
                    deadline = time.monotonic() + a.drain
                if deadline is not None and (
                        len(arrived) >= a.count or time.monotonic() > deadline):
                    break
                try:
                    msg = await asyncio.wait_for(ws.recv(), timeout=0.5)
                except asyncio.TimeoutError:
                    continue
                t = time.time()
                root = ET.fromstring(msg.encode() if isinstance(msg, str)
                                     else msg)
                for u in root.findall(SM + "url"):
                    loc = u.findtext(SM + "loc")
                    if loc.startswith(a.base + a.sub + "/") and loc not in arrived:
                        arrived[loc] = t
            th.join()

    asyncio.run(subscriber())
    lat = [(arrived[loc] - t) * 1000.0 for loc, t in closed.items()
           if loc in arrived]
    res = {"changes": a.count, "received": len(lat),
           "missing": a.count - len(lat),
           "p50_ms": round(quantile(lat, 0.50), 2),
           "p99_ms": round(quantile(lat, 0.99), 2),
           "max_ms": round(max(lat), 2) if lat else None}
    print(json.dumps(res))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("gen")
    q.add_argument("dir")
    q.add_argument("n", type=int)
    q.add_argument("size", type=int)
    q.set_defaults(fn=cmd_gen)
    q = sub.add_parser("latency")
    q.add_argument("--ws", type=int, required=True)
    q.add_argument("--chan", required=True)
    q.add_argument("--dir", required=True)
    q.add_argument("--base", required=True)
    q.add_argument("--sub", default="latency")
    q.add_argument("--rate", type=float, default=100)
    q.add_argument("--count", type=int, default=3000)
    q.add_argument("--drain", type=float, default=10)
    q.set_defaults(fn=cmd_latency)
    a = p.parse_args()
    a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
