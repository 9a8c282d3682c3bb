#!/usr/bin/env bash
# rshub out of file descriptors: started with a small descriptor limit and
# flooded with connections on both its ports, it must keep serving what it
# has, count the refusals (rshub_ws_accept_refused_total), not spin, and
# serve new clients normally once descriptors are free again.
set -u
. "$(dirname "$0")/lib/common.sh"

redis_start || { bad "redis-server starts"; finish; }

note "rshub with a soft limit of 128 open files"
old=$(ulimit -Sn)
ulimit -Sn 128
hub_start E --open
hub_started=$?
ulimit -Sn "$old"
[ "$hub_started" = 0 ] || { bad "rshub starts under ulimit -n 128"; finish; }
T=http://example.com/emfile
ht request --http "${HUB_HTTP[E]}" --topic "$T" --gen change --n 1 >/dev/null
CHAN=$(curl -s "http://127.0.0.1:${HUB_HTTP[E]}/topics" |
       "$PY" -c 'import json,sys; print(json.load(sys.stdin)[0]["name"])')

# one subscriber connected before the flood: it must keep its stream
bg_ht early sub --ws "${HUB_WS[E]}" --chan "$CHAN" --count 1 --timeout 60 --out "$TMP/early.sub"
sleep 1

note "hold 300 WebSocket and 150 HTTP connections (more than the hub has descriptors for)"
"$PY" - "${HUB_WS[E]}" "${HUB_HTTP[E]}" "$TMP/hold.ready" "$TMP/hold.stop" <<'PYEOF' &
import os, socket, sys, time
ws, http, ready, stop = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
held = []
for port, n in ((ws, 300), (http, 150)):
    for _ in range(n):
        s = socket.socket()
        s.settimeout(0.2)   # a full listen backlog drops SYNs: move on
        try:
            s.connect(("127.0.0.1", port))   # completes in the kernel backlog
            held.append(s)
        except OSError:
            s.close()
open(ready, "w").write(str(len(held)))
t0 = time.time()
while not os.path.exists(stop) and time.time() - t0 < 60:
    time.sleep(0.1)
for s in held:
    s.close()
PYEOF
HOLD=$!
wait_file "$TMP/hold.ready" 40 || bad "the connections are held"
sleep 2
check "emfile/the hub is alive while out of descriptors" kill -0 "${HUB_PID[E]}"
CPU0=$(awk '{print $14 + $15}' "/proc/${HUB_PID[E]}/stat")
sleep 2
CPU1=$(awk '{print $14 + $15}' "/proc/${HUB_PID[E]}/stat")
# 2 s at 100 ticks/s: a spinning accept loop would burn ~200 ticks
check "emfile/no accept spin: under 50 CPU ticks in 2 s (got $((CPU1 - CPU0)))" \
    test $((CPU1 - CPU0)) -lt 50

note "free the descriptors"
touch "$TMP/hold.stop"
wait "$HOLD" 2>/dev/null
sleep 1
check "emfile/HTTP serves again" \
    ht wait-status --http "${HUB_HTTP[E]}" --path /healthz --status 200 --timeout 10
check "emfile/refusals counted in rshub_ws_accept_refused_total" \
    ht wait-metric --http "${HUB_HTTP[E]}" --get rshub_ws_accept_refused_total --min 1 --timeout 5
ht request --http "${HUB_HTTP[E]}" --topic "$T" --gen change --n 2 >/dev/null
bg_wait early 30
check "emfile/the subscriber connected before the flood got its notification" \
    test "$(grep -c '"ev": "msg"' "$TMP/early.sub" 2>/dev/null)" -ge 1
check "emfile/a new subscriber connects and receives after the flood" \
    bash -c "'$PY' '$HUBTOOL' sub --ws '${HUB_WS[E]}' --chan '$CHAN' --since 0 --count 2 \
             --timeout 15 --out '$TMP/late.sub' >/dev/null 2>&1 &&
             [ \"\$(grep -c '\"ev\": \"msg\"' '$TMP/late.sub')\" -ge 2 ]"
hub_stop E TERM 10
expect_eq "emfile/rshub exits 0" "$HUB_RC" 0
hub_asan_check E
finish
