#!/usr/bin/python3
"""Quickstart demo: a plain WebSocket client of an rshub channel.

Prints each notification it receives (its hub id, and each entry's change and
URI) with the delay since the hub accepted it, which the id itself tells: a
hub id is <milliseconds since the epoch>-<sequence> (docs/protocol.md 2).
Exits after --count messages or --timeout seconds; exit 0 only if all came.
Uses Debian's python3-websockets.
"""
import argparse
import asyncio
import sys
import time
import xml.etree.ElementTree as ET

import websockets

SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
RS = "{http://www.openarchives.org/rs/terms/}"
HUB = "{urn:x-rshub:1}"


def describe(doc):
    root = ET.fromstring(doc)
    hub_id = root.get(HUB + "id", "?")
    entries = []
    for url in root.iter(SM + "url"):
        loc = url.findtext(SM + "loc", "").strip()
        md = url.find(RS + "md")
        entries.append("%s %s" % (md.get("change", "?") if md is not None else "?", loc))
    return hub_id, entries


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=0)
    ap.add_argument("--ready", help="create this file once connected")
    a = ap.parse_args()
    got = 0
    deadline = time.time() + a.timeout if a.timeout else None
    async with websockets.connect(a.url, max_size=64 << 20) as ws:
        if a.ready:
            open(a.ready, "w").close()
        while not a.count or got < a.count:
            left = deadline - time.time() if deadline else None
            if left is not None and left <= 0:
                break
            try:
                msg = await asyncio.wait_for(ws.recv(), left)
            except asyncio.TimeoutError:
                break
            hub_id, entries = describe(msg)
            ms = int(hub_id.split("-")[0]) if hub_id[0].isdigit() else 0
            delay = time.time() * 1000 - ms
            print("  received %s  (%.1f ms after the hub accepted it): %s"
                  % (hub_id, delay, "; ".join(entries)), flush=True)
            got += 1
    return 0 if not a.count or got == a.count else 1


sys.exit(asyncio.run(main()))
