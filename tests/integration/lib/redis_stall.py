#!/usr/bin/python3
"""redis_stall.py - a Redis proxy on a unix socket that holds back one
client's blocking read until an interrupt meant for it has gone past.

rshub reads its channels with XREAD BLOCK on one connection (CLIENT SETNAME
rshub-tail) and wakes that read with CLIENT UNBLOCK sent on another, so
that a channel that becomes active is read at once. Two connections have
no order between them: the XREAD can reach Redis after the CLIENT UNBLOCK
meant for it, which then finds nothing blocked. On one machine that
happens now and then (a few runs in ten of the quickstart); this proxy
makes it happen every time, for the tests that must provoke it
(tests/integration/test_sub_startrace.sh):

  the first XREAD of the connection named --client whose STREAMS do not
  name --without is held (not written to Redis) until a CLIENT UNBLOCK
  from another connection has been written to Redis and --after-ms have
  passed (Redis has then answered it: "not blocked"), or --max-hold
  seconds at most. Everything else is passed on as it comes, both ways.

Events go to --log, one line each: "TIME EVENT DETAIL" (TIME in seconds
since the epoch). Once listening, it writes --ready. Commands are parsed
as RESP arrays, as every client library sends them; a connection that
sends anything else is passed on unparsed.
"""
import argparse
import asyncio
import os
import sys
import time


def log(a, ev, detail=""):
    with open(a.log, "a") as f:
        f.write("%.6f %s %s\n" % (time.time(), ev, detail))


def parse_command(buf):
    """One RESP array of bulk strings from the start of buf: (args, used)
    with args a list of bytes, or (None, 0) while incomplete; raises
    ValueError on anything else."""
    if not buf.startswith(b"*"):
        raise ValueError("not an array")
    nl = buf.find(b"\r\n")
    if nl < 0:
        return None, 0
    n = int(buf[1:nl])
    pos = nl + 2
    args = []
    for _ in range(n):
        if len(buf) < pos + 1:
            return None, 0
        if buf[pos:pos + 1] != b"$":
            raise ValueError("not a bulk string")
        nl = buf.find(b"\r\n", pos)
        if nl < 0:
            return None, 0
        ln = int(buf[pos + 1:nl])
        start = nl + 2
        if len(buf) < start + ln + 2:
            return None, 0
        args.append(buf[start:start + ln])
        pos = start + ln + 2
    return args, pos


class Proxy:
    def __init__(self, a):
        self.a = a
        self.held_once = False          # one XREAD is held, once
        self.unblocked = asyncio.Event()

    async def after_unblock(self):
        await asyncio.sleep(self.a.after_ms / 1000.0)
        self.unblocked.set()

    async def hold(self, streams):
        log(self.a, "hold", "XREAD " + streams)
        try:
            await asyncio.wait_for(self.unblocked.wait(), self.a.max_hold)
            log(self.a, "release", "after a CLIENT UNBLOCK went past")
        except asyncio.TimeoutError:
            log(self.a, "release", "after --max-hold")

    async def upstream(self, cr, rw, name):
        """Client to Redis: command by command, holding the one XREAD."""
        buf = b""
        raw = False
        while True:
            data = await cr.read(65536)
            if not data:
                break
            if raw:
                rw.write(data)
                await rw.drain()
                continue
            buf += data
            while buf:
                try:
                    args, used = parse_command(buf)
                except ValueError:
                    raw = True
                    rw.write(buf)
                    buf = b""
                    break
                if args is None:
                    break
                cmd, buf = buf[:used], buf[used:]
                verb = [x.upper() for x in args[:2]]
                if verb == [b"CLIENT", b"SETNAME"] and len(args) > 2:
                    name[0] = args[2].decode("utf-8", "replace")
                if name[0] == self.a.client and verb[:1] == [b"XREAD"]:
                    keys = args[args.index(b"STREAMS") + 1:] \
                        if b"STREAMS" in args else []
                    keys = keys[:len(keys) // 2]
                    if (not self.held_once and
                            self.a.without.encode() not in keys):
                        self.held_once = True
                        await self.hold(b" ".join(keys).decode())
                    log(self.a, "xread", b" ".join(keys).decode())
                rw.write(cmd)
                await rw.drain()
                if verb == [b"CLIENT", b"UNBLOCK"] and \
                        name[0] != self.a.client:
                    log(self.a, "unblock", "CLIENT UNBLOCK %s written to Redis"
                        % args[2].decode() if len(args) > 2 else "")
                    asyncio.ensure_future(self.after_unblock())
        rw.close()

    async def downstream(self, rr, cw):
        while True:
            data = await rr.read(65536)
            if not data:
                break
            cw.write(data)
            await cw.drain()
        cw.close()

    async def handle(self, cr, cw):
        try:
            rr, rw = await asyncio.open_unix_connection(self.a.redis)
        except OSError:
            cw.close()
            return
        name = [""]
        up = asyncio.ensure_future(self.upstream(cr, rw, name))
        down = asyncio.ensure_future(self.downstream(rr, cw))
        done, pending = await asyncio.wait(
            [up, down], return_when=asyncio.FIRST_COMPLETED)
        for t in pending:
            t.cancel()
        for w in (rw, cw):
            try:
                w.close()
            except Exception:
                pass


async def main(a):
    p = Proxy(a)
    try:
        os.unlink(a.listen)
    except FileNotFoundError:
        pass
    server = await asyncio.start_unix_server(p.handle, a.listen)
    with open(a.ready + ".tmp", "w") as f:
        f.write("listening\n")
    os.rename(a.ready + ".tmp", a.ready)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", required=True, help="unix socket to serve")
    ap.add_argument("--redis", required=True, help="Redis's unix socket")
    ap.add_argument("--client", default="rshub-tail",
                    help="the connection (CLIENT SETNAME) whose XREAD is held")
    ap.add_argument("--without", required=True,
                    help="hold an XREAD whose STREAMS do not name this key")
    ap.add_argument("--after-ms", type=int, default=100)
    ap.add_argument("--max-hold", type=float, default=15)
    ap.add_argument("--log", required=True)
    ap.add_argument("--ready", required=True)
    try:
        asyncio.run(main(ap.parse_args()))
    except KeyboardInterrupt:
        sys.exit(0)
