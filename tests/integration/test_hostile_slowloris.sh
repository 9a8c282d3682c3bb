#!/usr/bin/env bash
# test_hostile_slowloris.sh - slow and greedy HTTP clients against every
# HTTP listener (issue 12, item 3; docs/operations.md, Limits): connections
# that trickle a byte a second, heads never finished, a body that crawls.
#  1. rshub with its defaults and a small descriptor limit (256): 400 slow
#     connections from one address (127.0.0.2) must not take /healthz and
#     publishes from another (the per-address cap; before the guard they
#     used up the descriptors and health checks hung).
#  2. rshub with short deadlines and low caps set by options: a flood from
#     127.0.0.2 (past its per-address cap) and from 12 more addresses (past
#     the overall cap): /healthz and an authenticated publish answer within
#     2 s throughout, on the main port and on --publish-listen; every slow
#     connection is closed by the head deadline (no admitted one lives past
#     it), a crawling body by the body deadline; the caps refuse what is
#     past them (exactly at the cap); all counted in rshub_http_*_total.
#  3. rssource, rssub's metrics listener and rssub's WebSub callback
#     listener: a slow client is closed within the deadline while a normal
#     request works; rssource's per-address cap.
# Bounded: a few hundred connections on loopback, about a minute.
# shellcheck source-path=SCRIPTDIR disable=SC2317 # helpers run through check/timed
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"

for b in "$RSHUB" "$RSSOURCE" "$RSSUB"; do
    [ -x "$b" ] || { bad "built: $b"; sub_finish; }
done

# ------------------------------------------------------------ slow peers
# slow.py MODE ...: the hostile clients (one process, non-blocking sockets).
#   flood PORT SRCS CONNS SECS OUT: keep CONNS connections spread over the
#     comma-separated source addresses SRCS for SECS seconds; each sends a
#     request head that never ends, a byte a second, and is reopened half a
#     second after the server closes it. OUT gets a JSON summary: per source
#     the connections refused (503 within 0.3 s), cut (408 or closed later)
#     and the longest life of one that was not refused.
#   slowbody PORT SECS OUT: one POST announcing 100000 bytes, its body sent
#     at 100 bytes a second; OUT: how long until the server closed it.
#   hold PORT SRC N OUT: open N connections one after the other (no bytes);
#     OUT: the indexes (0-based) answered 503 at once.
cat >"$TMP/slow.py" <<'PYEOF'
import json, selectors, socket, sys, time

def connect(port, src):
    s = socket.socket()
    s.bind((src, 0))
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    return s

def flood(port, srcs, conns, secs, out):
    srcs = srcs.split(",")
    sel = selectors.DefaultSelector()
    st = {a: {"refused": 0, "cut": 0, "max_life": 0.0}
          for a in srcs}
    live = {}            # sock -> [src, t0, got, next_send]
    pending = []         # (t, src): reopen at t
    t_end = time.time() + secs
    for i in range(conns):
        pending.append((0.0, srcs[i % len(srcs)]))
    while time.time() < t_end:
        now = time.time()
        keep = []
        for t, a in pending:
            if t <= now:
                try:
                    s = connect(port, a)
                except OSError:
                    keep.append((now + 0.5, a))
                    continue
                live[s] = [a, now, b"", now + 0.05]
                sel.register(s, selectors.EVENT_READ)
            else:
                keep.append((t, a))
        pending = keep
        for s, c in list(live.items()):
            if c[3] <= now:
                first = c[3] - c[1] < 0.1
                try:
                    s.send(b"POST /hub HTTP/1.1\r\nX-Slow: " if first else b"a")
                except OSError:
                    pass
                c[3] = now + 1.0
        for key, _ in sel.select(timeout=0.05):
            s = key.fileobj
            c = live[s]
            try:
                d = s.recv(4096)
            except OSError:
                d = b""
            if d:
                c[2] += d
                continue
            life = time.time() - c[1]
            a = c[0]
            if c[2].startswith(b"HTTP/1.1 503") and life < 0.3:
                st[a]["refused"] += 1
            else:
                st[a]["cut"] += 1
                st[a]["max_life"] = max(st[a]["max_life"], life)
            sel.unregister(s)
            s.close()
            del live[s]
            pending.append((time.time() + 0.5, a))
    for s, c in live.items():   # still open at the end: not refused
        a = c[0]
        st[a]["max_life"] = max(st[a]["max_life"], time.time() - c[1])
        s.close()
    json.dump(st, open(out, "w"))

def slowbody(port, secs, out):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(0.1)
    s.sendall(b"POST /hub HTTP/1.1\r\nHost: x\r\nContent-Type: application/xml"
              b"\r\nContent-Length: 100000\r\n\r\n")
    t0 = time.time()
    closed = None
    while time.time() - t0 < secs and closed is None:
        try:
            s.send(b"<" * 10)
        except OSError:
            closed = time.time() - t0
            break
        try:
            d = s.recv(4096)
            if not d:
                closed = time.time() - t0
        except socket.timeout:
            pass
        except OSError:
            closed = time.time() - t0
    json.dump({"closed_after": closed}, open(out, "w"))

def hold(port, src, n, out):
    socks, refused = [], []
    for i in range(n):        # in order: the server admits in that order
        s = socket.socket()
        s.bind((src, 0))
        s.connect(("127.0.0.1", port))
        socks.append(s)
    time.sleep(0.3)           # a refusal is immediate; deadlines are longer
    for i, s in enumerate(socks):
        s.setblocking(False)
        try:
            if s.recv(64).startswith(b"HTTP/1.1 503"):
                refused.append(i)
        except BlockingIOError:
            pass
        except OSError:
            refused.append(-1)
    json.dump({"refused": refused}, open(out, "w"))
    for s in socks:
        s.close()

m = sys.argv[1]
if m == "flood":
    flood(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]),
          float(sys.argv[5]), sys.argv[6])
elif m == "slowbody":
    slowbody(int(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
else:
    hold(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5])
PYEOF
slow() { "$PY" "$TMP/slow.py" "$@"; }
# jq-less JSON: js FILE EXPR (a Python expression over j)
js() { "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }

# timed NAME BOUND_S CMD...: CMD's first line must be $WANT (set by the
# caller: WANT=200 timed ...) within BOUND_S seconds; records the worst
# time in WORST_MS.
WANT=
WORST_MS=0
timed() {
    local name=$1 bound=$2 t0 t1 out ms
    shift 2
    t0=$(date +%s%N)
    out=$("$@" 2>&1 | head -n 1)
    t1=$(date +%s%N)
    ms=$(((t1 - t0) / 1000000))
    [ "$ms" -gt "$WORST_MS" ] && WORST_MS=$ms
    if [ "$out" = "$WANT" ] && [ "$ms" -le $((bound * 1000)) ]; then
        return 0
    fi
    echo "$name: got '$out' after $ms ms (want $WANT within ${bound}s)"
    return 1
}
healthz() { curl -s -o /dev/null -w '%{http_code}\n' --max-time 5 "http://127.0.0.1:$1/healthz"; }
publish() { ht request --http "$1" --topic "$NEWS_URI" --token "$TOKEN" --gen change --n "$2" --timeout 5; }

NEWS_URI=http://example.com/slowloris/changes
TOKEN=s3cret
cat >"$TMP/hub.conf" <<EOF
[topic news]
uri = $NEWS_URI
kind = change
token = $TOKEN
EOF

# shellcheck disable=SC2119 # no persistence wanted
redis_start || { bad "redis-server starts"; sub_finish; }

# =========================== 1. the defaults, a small descriptor limit
note "1. rshub with its defaults under ulimit -n 256: 400 slow connections from 127.0.0.2"
old=$(ulimit -Sn)
ulimit -Sn 256
hub_start D --config "$TMP/hub.conf"
started=$?
ulimit -Sn "$old"
if [ "$started" = 0 ]; then ok "rshub starts with its defaults"; else
    bad "rshub starts with its defaults"; sub_finish; fi
slow flood "${HUB_HTTP[D]}" 127.0.0.2 400 7 "$TMP/d.flood" &
FL=$!
sleep 2
fails=0
for i in 1 2 3 4 5 6; do
    WANT=200 timed "defaults/healthz $i" 2 healthz "${HUB_HTTP[D]}" || fails=$((fails + 1))
    WANT=202 timed "defaults/publish $i" 2 publish "${HUB_HTTP[D]}" "$i" || fails=$((fails + 1))
    sleep 0.5
done
check "defaults/under the flood, /healthz and publishes from 127.0.0.1 answer within 2 s (6 + 6; worst ${WORST_MS} ms)" \
    test "$fails" -eq 0
wait "$FL"
check "defaults/the per-address cap (64) refused most of 127.0.0.2's connections" \
    test "$(js "$TMP/d.flood" 'j["127.0.0.2"]["refused"]')" -gt 100
check "defaults/refusals counted: rshub_http_refused_total{reason=\"per_address\"}" \
    ht wait-metric --http "${HUB_HTTP[D]}" --get 'rshub_http_refused_total{listener="http",reason="per_address"}' --min 100 --timeout 5
hub_stop D TERM 10
expect_eq "defaults/rshub exits 0" "$HUB_RC" 0
hub_asan_check D

# ============================ 2. short deadlines, low caps, two floods
note "2. rshub --http-head-time 2s --http-body-time 1s --http-max-conns 150 --http-max-conns-per-addr 40 --publish-listen"
if hub_start A --config "$TMP/hub.conf" --publish-listen 127.0.0.1:0 \
        --http-head-time 2s --http-body-time 1s --http-body-rate 64K \
        --http-max-conns 150 --http-max-conns-per-addr 40; then
    ok "rshub starts with the guard's options"
else
    bad "rshub starts with the guard's options"; sub_finish
fi
HP=${HUB_HTTP[A]}
PP=$(sed -n 's/.*"publish":\([0-9]*\).*/\1/p' "$TMP/A.ready")
check "the ready-file names the publish port" test -n "$PP"
MANY=127.0.0.3,127.0.0.4,127.0.0.5,127.0.0.6,127.0.0.7,127.0.0.8,127.0.0.9,127.0.0.10,127.0.0.11,127.0.0.12,127.0.0.13,127.0.0.14
# 127.0.0.2 alone first (its cap holds, the head deadline closes what it
# got in); from the third check on, 12 addresses more, 25 connections each:
# past the overall cap, the oldest heads make room.
slow flood "$HP" 127.0.0.2 300 10 "$TMP/one.flood" &
F1=$!
slow slowbody "$HP" 8 "$TMP/body.json" &
F3=$!
sleep 2.5
WORST_MS=0
fails=0
maxopen=0
for i in 1 2 3 4 5 6 7 8; do
    if [ "$i" = 3 ]; then
        slow flood "$HP" "$MANY" 300 5 "$TMP/many.flood" &
        F2=$!
        sleep 1
    fi
    WANT=200 timed "healthz $i" 2 healthz "$HP" || fails=$((fails + 1))
    WANT=200 timed "publish-port healthz $i" 2 healthz "$PP" || fails=$((fails + 1))
    if [ $((i % 2)) = 0 ]; then
        WANT=202 timed "publish $i" 2 publish "$HP" $((100 + i)) || fails=$((fails + 1))
        WANT=202 timed "publish-port publish $i" 2 publish "$PP" $((200 + i)) || fails=$((fails + 1))
    fi
    n=$(ht metrics --http "$PP" --get 'rshub_http_connections{listener="http"}' 2>/dev/null)
    [ "${n:-0}" -gt "$maxopen" ] && maxopen=$n
    sleep 0.5
done
check "flood/health checks and authenticated publishes answer within 2 s, main port and --publish-listen (24 requests; worst ${WORST_MS} ms)" \
    test "$fails" -eq 0
check "flood/never more than --http-max-conns (150) open on the main port (saw $maxopen)" \
    test "$maxopen" -gt 40 -a "$maxopen" -le 150
wait "$F1" "$F2" "$F3"
j1=$TMP/one.flood
j2=$TMP/many.flood
check "flood/127.0.0.2: past its cap of 40, connections refused at once" \
    test "$(js "$j1" 'j["127.0.0.2"]["refused"]')" -gt 50
check "flood/every slow connection admitted was closed by the 2 s head deadline (longest $(js "$j1" 'round(j["127.0.0.2"]["max_life"], 2)') s, $(js "$j2" 'round(max(v["max_life"] for v in j.values()), 2)') s)" \
    js "$j1" 'exit(0 if j["127.0.0.2"]["max_life"] < 3.5 and j["127.0.0.2"]["cut"] > 0 else 1)'
check "flood/the 12 addresses too" \
    js "$j2" 'exit(0 if max(v["max_life"] for v in j.values()) < 3.5 else 1)'
check "flood/a body sent at 100 B/s was closed by the body deadline ($(js "$TMP/body.json" 'j["closed_after"]') s)" \
    js "$TMP/body.json" 'exit(0 if j["closed_after"] is not None and j["closed_after"] < 3.0 else 1)'
for r in 'refused_total{listener="http",reason="per_address"}' \
         'closed_total{listener="http",reason="head_timeout"}' \
         'closed_total{listener="http",reason="evicted"}' \
         'closed_total{listener="http",reason="body_timeout"}'; do
    check "flood/counted: rshub_http_$r > 0" \
        ht wait-metric --http "$PP" --get "rshub_http_$r" --min 1 --timeout 5
done
check "flood/one log line per address and minute, not one per connection" \
    test "$(grep -c 'http connection' "${HUB_LOG[A]}")" -le 40
slow hold "$HP" 127.0.0.15 41 "$TMP/hold.json"
check "flood/the per-address cap is exact: the 41st connection of 127.0.0.15 is refused, the first 40 are not" \
    js "$TMP/hold.json" 'exit(0 if j["refused"] == [40] else 1)'
WANT=202 check "after the flood a publish on the main port is accepted" \
    timed "publish after" 2 publish "$HP" 300
hub_stop A TERM 10
expect_eq "rshub exits 0" "$HUB_RC" 0
hub_asan_check A

# ============================== 3. rssource, rssub's metrics and callback
note "3. rssource and rssub (metrics and WebSub callback listeners)"
# one_slow PORT OUT: a head trickled a byte every 0.2 s, for at most 14 s;
# OUT: seconds until the server closed it (or "open").
cat >"$TMP/one_slow.py" <<'PYEOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.settimeout(0.2)
s.sendall(b"GET /x HTTP/1.1\r\nX-Slow: ")
t0 = time.time()
res = "open"
while time.time() - t0 < 14:
    try:
        if not s.recv(4096):
            res = "%.2f" % (time.time() - t0)
            break
    except socket.timeout:
        try:
            s.send(b"a")
        except OSError:
            res = "%.2f" % (time.time() - t0)
            break
    except OSError:
        res = "%.2f" % (time.time() - t0)
        break
open(sys.argv[2], "w").write(res)
PYEOF
one_slow() { "$PY" "$TMP/one_slow.py" "$@"; }
# two_lengths PORT PATH: a request with two different Content-Length
# headers (a smuggling shape, RFC 9112 6.3); prints the status line.
two_lengths() {
    "$PY" - "$1" "$2" <<'PYEOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"GET " + sys.argv[2].encode() + b" HTTP/1.1\r\nHost: x\r\n"
          b"Content-Length: 0\r\nContent-Length: 3\r\n\r\nabc")
print(s.recv(4096).split(b"\r\n")[0].decode())
PYEOF
}
within() { [ "$(cat "$1")" != open ] && "$PY" -c "import sys; sys.exit(0 if $2 <= float(open('$1').read()) <= $3 else 1)"; }

S=$TMP/src
mkdir -p "$S/a"
for i in 1 2 3; do printf 'file %s\n' "$i" >"$S/a/f$i.txt"; done
if src_start s "$S" --http-head-time 1s --http-max-conns-per-addr 5; then
    ok "rssource starts with the guard's options"
else
    bad "rssource starts with the guard's options"; sub_finish
fi
SP=${SRC_HTTP[s]}
one_slow "$SP" "$TMP/src.slow" &
SL=$!
sleep 0.3
check "rssource: a file is served while a slow client trickles" \
    test "$(curl -s --max-time 3 "http://127.0.0.1:$SP/a/f1.txt")" = "file 1"
wait "$SL"
check "rssource: the slow client was closed by the 1 s head deadline ($(cat "$TMP/src.slow") s)" \
    within "$TMP/src.slow" 0.7 2.5
check "rssource: logged (reason=head_timeout)" \
    grep -q 'http connection closed.*reason=head_timeout' "${SRC_LOG[s]}"
expect_eq "rssource: two Content-Length headers are refused" \
    "$(two_lengths "$SP" /a/f1.txt)" "HTTP/1.1 400 Bad Request"
slow hold "$SP" 127.0.0.2 6 "$TMP/src.hold"
check "rssource: the 6th connection of an address is refused (--http-max-conns-per-addr 5)" \
    js "$TMP/src.hold" 'exit(0 if j["refused"] == [5] else 1)'

SUB_READY_SECS=30
if sub_start r "http://127.0.0.1:$SP/" "$TMP/mirror" "$TMP/r.db" \
        --callback-listen 127.0.0.1:0 --http-head-time 1s; then
    ok "rssub run with --metrics-listen, --callback-listen and the guard's options"
else
    bad "rssub run with the guard's options"; sub_finish
fi
MP=${SUB_METRICS[r]}
one_slow "$MP" "$TMP/metrics.slow" &
SL=$!
sleep 0.3
check "rssub metrics: /metrics answers while a slow client trickles" \
    bash -c "curl -sf --max-time 3 http://127.0.0.1:$MP/metrics | grep -q '^rssub_'"
wait "$SL"
check "rssub metrics: the slow client was closed by the 1 s head deadline ($(cat "$TMP/metrics.slow") s)" \
    within "$TMP/metrics.slow" 0.7 2.5
check "rssub metrics: counted in rssub_http_closed_total{listener=\"metrics\",reason=\"head_timeout\"}" \
    test "$(sub_metric r rssub_http_closed_total 'listener="metrics",reason="head_timeout"')" = 1
CP=
for p in $(ss -ltnH 2>/dev/null | awk '{ sub(/.*:/, "", $4); print $4 }'); do
    [ "$p" = "$MP" ] && continue
    ss -ltnpH "sport = :$p" 2>/dev/null | grep -q "pid=${SUB_PID[r]}," && CP=$p
done
check "rssub: its callback port is found" test -n "$CP"
expect_eq "rssub metrics: two Content-Length headers are refused" \
    "$(two_lengths "$MP" /metrics)" "HTTP/1.1 400 Bad Request"
expect_eq "rssub callback: two Content-Length headers are refused" \
    "$(two_lengths "$CP" /cb/0123)" "HTTP/1.1 400 Bad Request"
one_slow "$CP" "$TMP/cb.slow" &
SL=$!
sleep 0.3
check "rssub callback: an unknown callback path answers 404 while a slow client trickles" \
    test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "http://127.0.0.1:$CP/cb/0123")" = 404
wait "$SL"
# The callback listener takes --http-head-time (1 s here) too.
check "rssub callback: the slow client was closed by the head deadline ($(cat "$TMP/cb.slow") s)" \
    within "$TMP/cb.slow" 0.7 2.5
check "rssub callback: counted in rssub_http_closed_total{listener=\"callback\",reason=\"head_timeout\"}" \
    test "$(sub_metric r rssub_http_closed_total 'listener="callback",reason="head_timeout"')" = 1
sub_stop r
expect_eq "rssub exits 0" "$SUB_RC" 0
src_stop s
expect_eq "rssource exits 0" "$SRC_RC" 0
src_asan_check s
sub_finish
