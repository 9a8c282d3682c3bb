#!/usr/bin/python3
"""ha_tool.py - the Python side of the failover tests of issue 15
(tests/integration/test_ha_*.sh, tests/soak/failover.sh,
tests/bench/bench_ha.sh; docs/internals/failover.md).

  publish   a paced publisher over keep-alive connections to one or more
            rshub nodes, until a stop file: one JSON line per publish
            (when sent, when answered, status, X-Hub-Id, the reason of a
            refusal), so that every acknowledged id and every refusal is
            on record with its time
  report    what a publish log says about a fault at a given time: the
            statuses and reasons, the first 202 after the fault, and the
            checks (202s again within a bound, refusals only 503/504 with
            a one-line reason, ids causally monotonic); writes the
            acknowledged ids
  follow    a WebSocket subscriber that hangs up every few seconds
            (seeded) and resumes with since= the last id it got, on the
            next node's port in turn; logs every id and connection event
  check     a subscriber's ids against the stream (the new primary's ids,
            in order) and the acknowledged ids: no skip, no id the
            stream does not hold, every acknowledged id, in order; and
            each message's bytes against the stream's entry of its id
            (an entry the failover lost may share its id with a later
            one of the new primary)
  websub    the same bytes check for a WebSub subscriber's deliveries
  latency   publish latency percentiles and the accepted rate of a log

Uses hubtool.py's document generator and id helpers. Loopback only; every
wait has a timeout. Run with Debian's /usr/bin/python3 (websockets 10.4).
"""
import argparse
import hashlib
import http.client
import json
import os
import random
import sys
import threading
import time

sys.dont_write_bytecode = True     # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hubtool import ANN_RE, annotation, gen_doc, id_key  # noqa: E402


def die(msg, rc=1):
    print("ha_tool: " + msg, file=sys.stderr)
    sys.exit(rc)


# --------------------------------------------------------------- publish

class Publisher:
    """conns threads, connection i to ports[i % len(ports)]; publish k is
    due k/rate seconds after the start. A publish that waits for its
    answer (a failover) does not make the others pile up: a slot more
    than catchup seconds late is given up (counted), so the rate never
    goes above rate."""

    def __init__(self, a):
        self.a = a
        self.lock = threading.Lock()
        self.n = a.start
        self.due = time.monotonic()
        self.skipped = 0
        self.out = open(a.out, "w")
        self.stop_at = time.monotonic() + a.duration

    def stopping(self):
        return ((self.a.stop and os.path.exists(self.a.stop))
                or time.monotonic() >= self.stop_at
                or (self.a.count and self.n >= self.a.start + self.a.count))

    def take(self):
        with self.lock:
            if self.stopping():
                return None
            now = time.monotonic()
            if self.a.rate:
                late = now - self.due
                if late > self.a.catchup:
                    gone = int(late * self.a.rate)
                    self.skipped += gone
                    self.due += gone / self.a.rate
                due = self.due
                self.due += 1.0 / self.a.rate
            else:
                due = now
            k = self.n
            self.n += 1
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        return k

    def log(self, rec):
        with self.lock:
            self.out.write(json.dumps(rec) + "\n")
            self.out.flush()

    def worker(self, i):
        a = self.a
        port = a.http[i % len(a.http)]
        headers = {"Content-Type": "application/xml",
                   "Link": '<%s>; rel="self"' % a.topic}
        if a.token:
            headers["Authorization"] = "Bearer " + a.token
        conn = None
        while True:
            k = self.take()
            if k is None:
                break
            body = gen_doc("change", k, a.pad)
            rec = {"n": k, "port": port, "t0": time.time()}
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port,
                                                      timeout=a.timeout)
                conn.request("POST", "/hub", body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
                rec["t1"] = time.time()
                rec["st"] = r.status
                rec["id"] = r.getheader("X-Hub-Id")
                if r.status != 202:
                    rec["why"] = data.decode("utf-8", "replace")
                if r.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as e:
                rec["t1"] = time.time()
                rec["st"] = 0
                rec["why"] = "%s: %s" % (type(e).__name__, e)
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.05)
            self.log(rec)
        if conn is not None:
            conn.close()


def cmd_publish(a):
    p = Publisher(a)
    if a.ready:
        with open(a.ready, "w") as f:
            f.write("started\n")
    threads = [threading.Thread(target=p.worker, args=(i,))
               for i in range(a.conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    p.out.close()
    print("publish: %d sent, %d slots given up (late)"
          % (p.n - a.start, p.skipped))


def read_jsonl(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out


def cmd_report(a):
    recs = read_jsonl(a.log)
    problems = []
    acks = [r for r in recs if r["st"] == 202]
    if any(not r.get("id") for r in acks):
        problems.append("%d 202s without X-Hub-Id"
                        % sum(1 for r in acks if not r.get("id")))
        acks = [r for r in acks if r.get("id")]
    ids = [r["id"] for r in acks]
    if len(set(ids)) != len(ids):
        problems.append("%d ids acknowledged twice" % (len(ids) - len(set(ids))))
    with open(a.acked, "w") as f:
        for hid in sorted(set(ids), key=id_key):
            f.write(hid + "\n")
    st = {}
    for r in recs:
        st[r["st"]] = st.get(r["st"], 0) + 1
    print("publishes: %d, statuses %s" % (len(recs), json.dumps(st, sort_keys=True)))
    reasons = {}
    for r in recs:
        if r["st"] != 202:
            w = (r.get("why") or "").strip()
            reasons[(r["st"], w)] = reasons.get((r["st"], w), 0) + 1
            if r["st"] not in (503, 504):
                problems.append("n=%d: status %s (%s), want 202, 503 or 504"
                                % (r["n"], r["st"], w[:100]))
            elif not w or "\n" in w:
                problems.append("n=%d: %d without a one-line reason: %r"
                                % (r["n"], r["st"], w[:200]))
    for (s, w), c in sorted(reasons.items(), key=lambda x: -x[1])[:6]:
        print("  %5d x %s %s" % (c, s, w[:120]))
    # causal order: a publish sent after another's 202 arrived gets a
    # greater id, whatever happened to Redis in between
    by_t1 = sorted(acks, key=lambda r: r["t1"])
    j, top, topr = 0, None, None
    for r in sorted(acks, key=lambda r: r["t0"]):
        while j < len(by_t1) and by_t1[j]["t1"] < r["t0"]:
            if top is None or id_key(by_t1[j]["id"]) > id_key(top):
                top, topr = by_t1[j]["id"], by_t1[j]
            j += 1
        if top is not None and id_key(r["id"]) <= id_key(top):
            problems.append("id went back: n=%d sent at %.3f got %s, but n=%d "
                            "was acknowledged %s at %.3f"
                            % (r["n"], r["t0"], r["id"], topr["n"], top,
                               topr["t1"]))
            break
    out = {"publishes": len(recs), "acked": len(ids),
           "refused": len(recs) - len(acks), "resume_s": []}
    # a fault is "BEGAN:DONE" (or one time for both): refusals answered
    # before the next one began are this one's; the first 202 and the
    # resume time count from DONE (nothing sent later reached the node)
    faults = []
    for x in a.fault or []:
        b0, _, b1 = x.partition(":")
        faults.append((float(b0), float(b1 or b0)))
    faults.sort()
    for i, (_, f) in enumerate(faults):
        nxt = faults[i + 1][0] if i + 1 < len(faults) else float("inf")
        before = [r for r in acks if r["t1"] <= f]
        after = [r for r in acks if f < r["t0"] < nxt]
        # refusals of this fault's window: sent after it, answered before
        # the next one (a publish in flight at the next fault is its)
        refused = [r for r in recs if r["st"] != 202 and f < r["t0"]
                   and r["t1"] < nxt]
        if not before:
            problems.append("fault %d: no 202 before it" % i)
        if not after:
            problems.append("fault %d: no 202 for a publish sent after it" % i)
            continue
        first = min(after, key=lambda r: r["t1"])
        d = first["t1"] - f
        out["resume_s"].append(round(d, 3))
        print("fault %d: first 202 %.3f s after it (n=%d, %s), %d refused"
              % (i, d, first["n"], first["id"], len(refused)))
        if a.bound is not None and d > a.bound:
            problems.append("fault %d: the first 202 came %.1f s after it, "
                            "bound %.1f s" % (i, d, a.bound))
        # once publishing resumed it stays up (Sentinel settled): a
        # refusal later than settle seconds after resuming is a fault
        if a.settle is not None:
            late = [r for r in refused if r["t0"] > first["t1"] + a.settle]
            if late:
                problems.append("fault %d: %d refusals more than %.0f s after "
                                "publishing resumed (first n=%d %s %s)"
                                % (i, len(late), a.settle, late[0]["n"],
                                   late[0]["st"], late[0].get("why", "")[:80]))
    # nobody acknowledged alone: no publish sent after a fault was
    # answered 202 before Sentinel promoted a replica (the new primary)
    for q in a.quiet or []:
        qf, _, qu = q.partition(":")
        qf, qu = float(qf), float(qu)
        early = [r for r in acks if r["t0"] > qf and r["t1"] < qu]
        if qu <= qf:
            problems.append("no promotion after the fault at %.3f (%.3f)" % (qf, qu))
        elif early:
            problems.append("%d publishes sent after the fault at %.3f were "
                            "acknowledged before the promotion (%.3f s after "
                            "it): first n=%d %s at +%.3f s"
                            % (len(early), qf, qu - qf, early[0]["n"],
                               early[0]["id"], early[0]["t1"] - qf))
        else:
            print("quiet: no 202 between the fault at %.3f and the promotion "
                  "%.3f s later" % (qf, qu - qf))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f)
    if problems:
        die("; ".join(problems[:10]))
    print("ok: %s" % json.dumps(out))


def cmd_acked_after(a):
    """Exit 0 once the log holds --n 202s of publishes sent after --t."""
    n = 0
    try:
        with open(a.log) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue            # a line being written
                if r["st"] == 202 and r["t0"] > a.t:
                    n += 1
    except OSError:
        pass
    print(n)
    sys.exit(0 if n >= a.n else 1)


# --------------------------------------------------------------- latency

def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * len(xs) + 0.5)) - 1))
    return xs[k]


def cmd_latency(a):
    recs = read_jsonl(a.log)
    ok = [r for r in recs if r["st"] == 202]
    lat = [(r["t1"] - r["t0"]) * 1000 for r in ok]
    span = (max(r["t1"] for r in recs) - min(r["t0"] for r in recs)) if recs else 0
    out = {"sent": len(recs), "acked": len(ok),
           "p50_ms": round(pct(lat, 50), 3), "p99_ms": round(pct(lat, 99), 3),
           "rate": round(len(ok) / span, 1) if span > 0 else 0}
    print(json.dumps(out))


# ---------------------------------------------------------------- follow

async def follow(a, log):
    import asyncio
    import websockets
    rng = random.Random(a.seed)
    last = a.since
    got = 0
    hop = 0
    deadline = time.monotonic() + a.timeout
    quiet = [time.monotonic()]

    def stopping():
        return (a.stop and os.path.exists(a.stop)
                and time.monotonic() - quiet[0] >= a.idle)

    while time.monotonic() < deadline and not stopping():
        port = a.ws[hop % len(a.ws)]
        hop += 1
        uri = "ws://127.0.0.1:%d/channel/%s" % (port, a.chan)
        if last is not None:
            uri += "?since=" + last
        try:
            ws = await asyncio.wait_for(
                websockets.connect(uri, max_size=None, ping_interval=None,
                                   close_timeout=2, max_queue=None), timeout=5)
        except Exception as e:
            log({"ev": "connect-failed", "port": port, "error": repr(e)[:200]})
            await asyncio.sleep(0.2)
            continue
        log({"ev": "open", "port": port, "since": last})
        if a.ready and got == 0:
            with open(a.ready, "w") as f:
                f.write("open\n")
        until = time.monotonic() + (rng.uniform(a.hop_min, a.hop_max)
                                    if a.hop_max > 0 else 1e9)
        why = "hop"
        try:
            while time.monotonic() < min(until, deadline):
                if stopping():
                    why = "stop"
                    break
                try:
                    msg = await asyncio.wait_for(ws.recv(), timeout=0.2)
                except asyncio.TimeoutError:
                    continue
                quiet[0] = time.monotonic()
                if isinstance(msg, bytes):
                    log({"ev": "binary", "len": len(msg)})
                    continue
                m = ANN_RE.search(msg)
                hid = m.group(1) if m else None
                rec = {"ev": "msg", "id": hid}
                if hid is not None:
                    # the bytes stored in the stream: the message less the
                    # hub's annotation (docs/protocol.md 2)
                    raw = msg.encode("utf-8").replace(
                        annotation(hid).encode(), b"", 1)
                    rec["h"] = hashlib.sha1(raw).hexdigest()
                if a.mark and a.mark in msg:
                    rec["mark"] = True
                log(rec)
                got += 1
                # resume from the newest id received, as rssub does
                # (follow.c): a repeat a node behind since= sends must not
                # move the next since= back, or the node after replays
                # ids above it the client already has
                if hid is not None and (last is None or
                                        id_key(hid) > id_key(last)):
                    last = hid
        except websockets.exceptions.ConnectionClosed as e:
            rcvd = getattr(e, "rcvd", None)
            log({"ev": "close", "port": port,
                 "code": rcvd.code if rcvd else None,
                 "reason": rcvd.reason if rcvd else None})
            await asyncio.sleep(0.1)
            continue
        log({"ev": "hangup", "why": why})
        try:
            await asyncio.wait_for(ws.close(), timeout=3)
        except Exception:
            pass
    log({"ev": "end", "got": got})


def cmd_follow(a):
    import asyncio
    with open(a.out, "a") as out:
        def log(obj):
            obj["t"] = round(time.time(), 6)
            out.write(json.dumps(obj) + "\n")
            out.flush()
        try:
            asyncio.run(follow(a, log))
        except Exception as e:
            log({"ev": "end", "error": repr(e)})


# ----------------------------------------------------------------- check

def read_ids(path):
    with open(path) as f:
        return [l.split()[0] for l in f if l.strip()]


def read_sums(path):
    out = {}
    with open(path) as f:
        for line in f:
            w = line.split()
            if len(w) >= 2:
                out[w[0]] = w[1]
    return out


def sum_problems(pairs, sums_path):
    """(id, sha1 of the bytes received) against the stream's 'ID SHA1':
    the same id with other bytes is an entry the failover lost, under an
    id the new primary gave to another entry."""
    sums = read_sums(sums_path)
    differ = [hid for hid, h in pairs if hid in sums and sums[hid] != h]
    if differ:
        return ["%d messages differ from the stream's entry of their id "
                "(first %s): an entry the failover lost, its id reused"
                % (len(differ), differ[:3])]
    return []


def cmd_websub(a):
    """The 2xx-answered POSTs on --path of a callback_server.py log: each
    body is the stream's entry of its X-Hub-Id (--sums), none holds
    --mark."""
    from callback_server import body, hdr, read_log
    pairs, marked, n = [], [], 0
    for r in read_log(a.log):
        if r["method"] != "POST" or r["path"] != a.path or \
                not 200 <= r.get("answered", 0) < 300:
            continue
        n += 1
        b = body(r)
        hid = hdr(r, "X-Hub-Id")
        pairs.append((hid, hashlib.sha1(b).hexdigest()))
        if a.mark and a.mark.encode() in b:
            marked.append(hid)
    problems = sum_problems(pairs, a.sums)
    if marked:
        problems.append("%d deliveries hold the mark %r (ids %s)"
                        % (len(marked), a.mark, marked[:3]))
    if problems:
        die("%s: %d deliveries: %s" % (a.path, n, "; ".join(problems)))
    print("ok: %d deliveries, each the stream's entry of its id" % n)


def cmd_check(a):
    """The subscriber's ids (follow log, or 'ID ...' lines with --ids)
    against the stream's ids (in order) and the acknowledged ones."""
    if a.ids:
        got = read_ids(a.sub)
    else:
        got = [e.get("id") for e in read_jsonl(a.sub) if e["ev"] == "msg"]
    stream = read_ids(a.stream)
    acked = set(read_ids(a.acked)) if a.acked else set()
    problems = []
    if None in got:
        problems.append("%d messages without a hub:id" % got.count(None))
        got = [g for g in got if g is not None]
    pos = {h: i for i, h in enumerate(stream)}
    foreign = [g for g in got if g not in pos]
    if foreign:
        problems.append("%d ids the stream does not hold (first %s): an entry "
                        "the failover lost reached the subscriber"
                        % (len(foreign), foreign[:3]))
    # order, repeats
    repeats = 0
    had = set(got[:1])
    top = got[0] if got else None
    # the since= of the connection each message came on: a node whose
    # cursor is behind since=X attaches the client live after its cursor
    # and may repeat ids <= X, which clients drop (docs/internals/fanout.md,
    # "Joining without gap or duplicate"): a repeat of an id the client
    # had, at or below its since, is that and allowed
    conn_since = []
    if not a.ids:
        cur = None
        for e in read_jsonl(a.sub):
            if e["ev"] == "open":
                cur = e.get("since")
            elif e["ev"] == "msg" and e.get("id") is not None:
                conn_since.append(cur)
    since_repeats = 0
    for i in range(1, len(got)):
        if id_key(got[i]) <= id_key(top):
            cs = conn_since[i] if i < len(conn_since) else None
            if got[i] in had and cs is not None and \
                    id_key(got[i]) <= id_key(cs):
                since_repeats += 1
                continue
            if got[i] in had and a.allow_repeats:
                repeats += 1
                continue
            problems.append("not increasing at #%d: %s after %s (%s, "
                            "on a connection with since=%s)"
                            % (i, got[i], top,
                               "a repeat" if got[i] in had else "new",
                               conn_since[i] if i < len(conn_since)
                               else None))
            break
        had.add(got[i])
        top = got[i]
    first = {}
    for g in got:
        first.setdefault(g, True)
    seen = [g for g in first if g in pos]
    if seen:
        lo = pos[seen[0]]
        if a.from_start:
            lo = 0
        want = stream[lo:]
        gs = set(seen)
        skipped = [h for h in want if h not in gs]
        if skipped:
            problems.append("%d ids of the stream skipped (first %s)"
                            % (len(skipped), skipped[:3]))
    elif stream:
        problems.append("no id received, the stream holds %d" % len(stream))
    miss = sorted(acked - set(got), key=id_key)
    if miss:
        problems.append("%d acknowledged ids not received (first %s)"
                        % (len(miss), miss[:3]))
    opens = 0
    if not a.ids:
        opens = sum(1 for e in read_jsonl(a.sub) if e["ev"] == "open")
        if opens < a.min_opens:
            problems.append("%d connections, want at least %d (resumes with "
                            "since=)" % (opens, a.min_opens))
    if not a.ids:
        msgs = [e for e in read_jsonl(a.sub) if e["ev"] == "msg"]
        marked = [e.get("id") for e in msgs if e.get("mark")]
        if marked:
            problems.append("%d messages hold the mark %r (ids %s)"
                            % (len(marked), a.mark, marked[:3]))
        if a.sums:
            problems += sum_problems(
                [(e.get("id"), e.get("h")) for e in msgs if e.get("h")],
                a.sums)
    if problems:
        die("%s: %d ids: %s" % (os.path.basename(a.sub), len(got),
                                "; ".join(problems)))
    print("ok: %d ids, %d repeats, %d repeats at or below since= (fanout.md), "
          "%d connections; the stream's %d from the first received, every one "
          "of %d acknowledged"
          % (len(got), repeats, since_repeats, opens, len(set(got)), len(acked)))


def main():
    p = argparse.ArgumentParser(prog="ha_tool")
    sub = p.add_subparsers(dest="cmd", required=True)

    q = sub.add_parser("publish")
    q.add_argument("--http", type=int, action="append", required=True)
    q.add_argument("--topic", required=True)
    q.add_argument("--token")
    q.add_argument("--rate", type=float, default=200)
    q.add_argument("--conns", type=int, default=8)
    q.add_argument("--catchup", type=float, default=0.5)
    q.add_argument("--start", type=int, default=0)
    q.add_argument("--count", type=int, default=0)
    q.add_argument("--pad", type=int, default=0)
    q.add_argument("--stop", help="stop once this file exists")
    q.add_argument("--duration", type=float, default=300)
    q.add_argument("--timeout", type=float, default=15,
                   help="seconds one request may take")
    q.add_argument("--out", required=True)
    q.add_argument("--ready")
    q.set_defaults(fn=cmd_publish)

    q = sub.add_parser("report")
    q.add_argument("--log", required=True)
    q.add_argument("--acked", required=True, help="write the acked ids here")
    q.add_argument("--fault", action="append",
                   help="epoch seconds of a fault, BEGAN[:DONE] (repeatable)")
    q.add_argument("--bound", type=float,
                   help="the first 202 after the fault within this")
    q.add_argument("--settle", type=float,
                   help="no refusal this long after publishing resumed")
    q.add_argument("--quiet", action="append",
                   help="FAULT:PROMOTION (epoch seconds): no publish sent "
                   "after FAULT is acknowledged before PROMOTION (repeatable)")
    q.add_argument("--json", help="write the figures here")
    q.set_defaults(fn=cmd_report)

    q = sub.add_parser("acked-after")
    q.add_argument("--log", required=True)
    q.add_argument("--t", type=float, required=True, help="epoch seconds")
    q.add_argument("--n", type=int, default=1)
    q.set_defaults(fn=cmd_acked_after)

    q = sub.add_parser("latency")
    q.add_argument("--log", required=True)
    q.set_defaults(fn=cmd_latency)

    q = sub.add_parser("follow")
    q.add_argument("--ws", type=int, action="append", required=True)
    q.add_argument("--chan", required=True)
    q.add_argument("--since")
    q.add_argument("--seed", type=int, default=1)
    q.add_argument("--hop-min", type=float, default=1)
    q.add_argument("--hop-max", type=float, default=4,
                   help="hang up after a seeded time in [min, max] (0: never)")
    q.add_argument("--stop")
    q.add_argument("--idle", type=float, default=2)
    q.add_argument("--timeout", type=float, default=600)
    q.add_argument("--out", required=True)
    q.add_argument("--ready")
    q.add_argument("--mark", help="flag the messages holding this")
    q.set_defaults(fn=cmd_follow)

    q = sub.add_parser("check")
    q.add_argument("--sub", required=True)
    q.add_argument("--ids", action="store_true",
                   help="--sub holds 'ID ...' lines, not a follow log")
    q.add_argument("--stream", required=True)
    q.add_argument("--acked")
    q.add_argument("--from-start", action="store_true",
                   help="the subscriber must have the whole stream")
    q.add_argument("--allow-repeats", action="store_true")
    q.add_argument("--min-opens", type=int, default=0)
    q.add_argument("--sums", help="the stream's 'ID SHA1' lines: each "
                   "message must be its id's entry")
    q.add_argument("--mark", help="no message may hold this")
    q.set_defaults(fn=cmd_check)

    q = sub.add_parser("websub")
    q.add_argument("--log", required=True)
    q.add_argument("--path", required=True)
    q.add_argument("--sums", required=True)
    q.add_argument("--mark")
    q.set_defaults(fn=cmd_websub)

    a = p.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
