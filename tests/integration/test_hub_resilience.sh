#!/usr/bin/env bash
# test_hub_resilience.sh - rshub's delivery guarantees (shared/PROTOCOL.md
# 4, docs/protocol.md 3-4, 7) when things fail, against a real
# redis-server (append-only, fsync always) on loopback: kill -9 of the hub
# loses nothing acknowledged; Redis going away gives 503s and readiness
# 503 while WebSocket clients stay, and coming back needs no hub restart;
# two hubs on one Redis act as one (fan-out and resume across nodes).
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"

U=http://example.com/dataset1
cat >"$TMP/hub.conf" <<EOF
[topic k9]
uri = $U/k9

[topic rd]
uri = $U/rd
EOF

redis_start persist || { bad "redis-server starts"; finish; }
hub_start A --config "$TMP/hub.conf" --redis-timeout 10s || { bad "rshub starts"; finish; }

# sub HUB NAME CHAN [hubtool sub args...]: background subscriber on hub
# HUB logging to $TMP/NAME.sub
sub() {
    local hub=$1 name=$2 chan=$3
    shift 3
    rm -f "$TMP/$name.sub"
    bg_ht "$name" sub --ws "${HUB_WS[$hub]}" --chan "$chan" \
        --out "$TMP/$name.sub" "$@"
}
flood() {   # flood HUB TOPIC-URI COUNT OUT [args]
    local hub=$1 topic=$2 count=$3 out=$4
    shift 4
    ht flood --http "${HUB_HTTP[$hub]}" --topic "$topic" --count "$count" \
        --out "$out" "$@"
}

# ----------------------------------------------------------------- kill -9
note "kill -9 of rshub during a publish flood, restart on the same Redis"
sub A k1 k9 --timeout 60
check "kill9/live client attached" ht wait-subs --http "${HUB_HTTP[A]}" --name k9
bg_ht k9flood flood --http "${HUB_HTTP[A]}" --topic "$U/k9" --count 4000 \
    --conns 4 --out "$TMP/k9.acks" --allow-errors --stop-on-error \
    --timeout 60 >"$TMP/k9flood.out"
# kill once a good part is acknowledged, publishes still in flight
i=0
while [ "$i" -lt 100 ]; do
    n=$(ht metrics --http "${HUB_HTTP[A]}" --get rshub_publish_accepted_total 2>/dev/null)
    [ "${n:-0}" -ge 1000 ] && break
    sleep 0.1
    i=$((i + 1))
done
hub_kill9 A
bg_wait k9flood 60
bg_wait k1 10
NACK=$(wc -l <"$TMP/k9.acks")
check "kill9/publishes acknowledged before the kill ($NACK of 4000)" \
    test "$NACK" -ge 1000 -a "$NACK" -lt 4000
hub_start A --config "$TMP/hub.conf" --redis-timeout 10s || bad "kill9/rshub restarts on the same Redis"
LEN=$(ht topic --http "${HUB_HTTP[A]}" --name k9 --get backlog.length)
check "kill9/backlog holds every acknowledged publish ($LEN >= $NACK)" \
    test "$LEN" -ge "$NACK"
sub A k2 k9 --since 0 --count "$LEN" --idle 3 --timeout 60
bg_wait k2 60
check "kill9/since=0 replays every acknowledged id, in order, no duplicate" \
    ht compare --sub "$TMP/k2.sub" --want "$TMP/k9.acks" --allow-extra
GOT=$(ht ids "$TMP/k2.sub" | wc -l)
expect_eq "kill9/since=0 replays the whole backlog (count)" "$GOT" "$LEN"
LAST=$(ht ids "$TMP/k1.sub" | tail -n 1)
check "kill9/the live client got some before the kill" test -n "$LAST"
sub A k3 k9 --since "${LAST:-0}" --idle 3 --timeout 60
bg_wait k3 60
cat "$TMP/k1.sub" "$TMP/k3.sub" | grep -v '"ev": "close"' >"$TMP/k13.sub"
check "kill9/the client resumes with since=LAST on the restarted hub: nothing acknowledged lost" \
    ht compare --sub "$TMP/k13.sub" --want "$TMP/k9.acks" --allow-extra

# ------------------------------------------------------------ Redis down
note "Redis stopped and restarted under a running hub"
sub A d1 rd --count 6 --timeout 90
check "redis/live client attached" ht wait-subs --http "${HUB_HTTP[A]}" --name rd
check "redis/3 publishes before the outage" \
    flood A "$U/rd" 3 "$TMP/rd.acks1" --conns 1
check "redis/the client got them" ht wait-count --sub "$TMP/d1.sub" --n 3
redis_stop
r=$(hub_req A --topic "$U/rd" --gen change)
st=$(status_of "$r")
ra=$(header_of "$r" Retry-After)
expect_eq "redis/publish while Redis is down -> 503 + Retry-After: 1" "$st $ra" "503 1"
check "redis/503 body is one 'error: ...' line" \
    bash -c "[ \"\$(printf '%s\n' \"\$1\" | sed '1,/^\$/d' | grep -c .)\" = 1 ] &&
             printf '%s\n' \"\$1\" | sed '1,/^\$/d' | grep -q '^error: '" _ "$r"
flood A "$U/rd" 20 "$TMP/rd.down" --conns 2 --allow-errors >"$TMP/rd.down.out"
check "redis/nothing acknowledged while Redis is down (20 tries)" \
    bash -c "[ ! -s '$TMP/rd.down' ] && grep -q '\"503\": 20' '$TMP/rd.down.out'" 
check "redis/readyz 503 while Redis is down" \
    ht wait-status --http "${HUB_HTTP[A]}" --path /readyz --status 503 --timeout 5
r=$(hub_req A --method GET --path /healthz)
expect_eq "redis/healthz still 200" "$(status_of "$r")" 200
sub A d2 rd --since 0 --timeout 10
bg_wait d2 15
expect_eq "redis/since=0 while Redis is down -> close 4003" \
    "$(ht closecode "$TMP/d2.sub")" 4003
sleep 1
check "redis/the connected WebSocket client stays connected" \
    bash -c "kill -0 ${BG_PID[d1]} && ! grep -q '\"ev\": \"\(close\|end\)\"' '$TMP/d1.sub'"
redis_start persist || bad "redis/redis-server restarts on the same socket and dir"
check "redis/readyz 200 again, without restarting the hub" \
    ht wait-status --http "${HUB_HTTP[A]}" --path /readyz --status 200 --timeout 15
check "redis/publishing works again" flood A "$U/rd" 3 "$TMP/rd.acks2" --conns 1
bg_wait d1 30
check "redis/the client connected through the outage gets the new ones, no gap, no duplicate" \
    ht compare --sub "$TMP/d1.sub" --want "$TMP/rd.acks1" --want "$TMP/rd.acks2"
sub A d3 rd --since 0 --idle 1.5 --timeout 20
bg_wait d3 25
check "redis/since=0 after the Redis restart: everything acknowledged (append-only file)" \
    ht compare --sub "$TMP/d3.sub" --want "$TMP/rd.acks1" --want "$TMP/rd.acks2"
check "redis/the k9 backlog survived the Redis restart too" \
    test "$(ht topic --http "${HUB_HTTP[A]}" --name k9 --get backlog.length)" = "$LEN"

note "Redis restarted empty (its data lost) under a running hub"
# A client resuming with an id of the lost backlog was told the gap only
# until the next publish; after it, it got the new entries as if nothing
# were missing. One at the newest id the hub knew missed nothing.
OLD=$(ht topic --http "${HUB_HTTP[A]}" --name rd --get backlog.first_id)
LAST=$(ht topic --http "${HUB_HTTP[A]}" --name rd --get backlog.last_id)
redis_stop
rm -rf "$REDIS_DIR"/appendonlydir "$REDIS_DIR"/*.aof
redis_start persist || bad "lost/redis-server restarts, empty"
check "lost/readyz 200 again" \
    ht wait-status --http "${HUB_HTTP[A]}" --path /readyz --status 200 --timeout 15
check "lost/publishing works" flood A "$U/rd" 2 "$TMP/rd.acks3" --conns 1
sub A d4 rd --since "$OLD" --timeout 10
bg_wait d4 15
expect_eq "lost/since= an older id of the lost backlog, after a publish: close 4001" \
    "$(ht closecode "$TMP/d4.sub")" 4001
sub A d4b rd --since "$LAST" --idle 1.5 --timeout 20
bg_wait d4b 25
check "lost/since= its newest id: no gap, what was published since" \
    ht compare --sub "$TMP/d4b.sub" --want "$TMP/rd.acks3"
sub A d5 rd --since 0 --idle 1.5 --timeout 20
bg_wait d5 25
check "lost/since=0: what was published since" \
    ht compare --sub "$TMP/d5.sub" --want "$TMP/rd.acks3"
ID3=$(ht topic --http "${HUB_HTTP[A]}" --name rd --get backlog.first_id)
sub A d6 rd --since "$ID3" --idle 1.5 --timeout 20
bg_wait d6 25
code=$(ht closecode "$TMP/d6.sub")
check "lost/since= an id of the new backlog ($ID3): no gap (close $code)" \
    test -n "$ID3" -a "$code" != 4001

note "Redis down for longer than 10 s: live subscribers are closed 4003"
# Nothing can be published or delivered meanwhile: a subscriber kept
# attached called itself live and waited for the whole outage instead of
# pulling from the Source.
sub A d7 rd --timeout 60
check "long/live client attached" ht wait-subs --http "${HUB_HTTP[A]}" --name rd
n0=$(grep -c 'redis link .*down' "${HUB_LOG[A]}")
redis_stop
bg_wait d7 40
expect_eq "long/the live client is closed 4003 within 20 s" \
    "$(ht closecode "$TMP/d7.sub")" 4003
n1=$(grep -c 'redis link .*down' "${HUB_LOG[A]}")
check "long/'redis link down' once per link, not per reconnect ($((n1 - n0)) lines)" \
    test $((n1 - n0)) -le 3
# one that comes back meanwhile was taken as live until the next close,
# 10 s later, and back again in 100 ms: it never reached --push-timeout
sub A d8 rd --timeout 3
bg_wait d8 10
expect_eq "long/a subscriber that comes meanwhile is closed 4003 at once" \
    "$(ht closecode "$TMP/d8.sub")" 4003
redis_start persist || bad "long/redis-server restarts"
check "long/readyz 200 again" \
    ht wait-status --http "${HUB_HTTP[A]}" --path /readyz --status 200 --timeout 15
sub A d9 rd --timeout 4
check "long/...and taken again once Redis is back" \
    ht wait-subs --http "${HUB_HTTP[A]}" --name rd --timeout 3
bg_wait d9 10

note "504 after a Redis command timeout (--redis-timeout 300ms, Redis busy 1.5 s)"
# The command was sent, so Redis may still run it: 504 says the outcome is
# unknown and a retry may store it twice (docs/protocol.md 3).
hub_start T --config "$TMP/hub.conf" --redis-timeout 300ms || bad "rshub T starts"
LEN0=$(rcli XLEN rshub:s:rd)
bg busy redis-cli -s "$REDIS_SOCK" EVAL "local t0 = redis.call('TIME')
  while true do
    local t = redis.call('TIME')
    if (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > 1500000 then break end
  end
  return 1" 0 >/dev/null
sleep 0.3
r=$(hub_req T --topic "$U/rd" --gen change --n 99)
expect_eq "timeout/a publish Redis does not answer in time -> 504" "$(status_of "$r")" 504
check "timeout/the 504 says the notification may be stored" \
    grep -q "may or may not be stored" <<<"$r"
bg_wait busy 10
ht wait-status --http "${HUB_HTTP[T]}" --path /readyz --status 200 --timeout 10 >/dev/null
LEN1=$(rcli XLEN rshub:s:rd)
check "timeout/504: stored at most once (at least once after a retry)" \
    test "$LEN1" -le $((LEN0 + 1))
hub_stop T TERM 10
hub_asan_check T

note "publishers that hang up while Redis is paused (CLIENT PAUSE)"
LEN0=$(rcli XLEN rshub:s:rd)
rcli CLIENT PAUSE 1500 WRITE >/dev/null
for n in 1 2 3; do
    ht hangup --http "${HUB_HTTP[A]}" --topic "$U/rd" --n "$((500 + n))" --wait 0.1
done
sleep 2
check "gone/the three are stored once Redis resumes (at least once)" \
    test "$(rcli XLEN rshub:s:rd)" -eq $((LEN0 + 3))
r=$(hub_req A --method GET --path /healthz)
expect_eq "gone/the hub still serves" "$(status_of "$r")" 200

note "SIGTERM while a publish waits for Redis (CLIENT PAUSE)"
# (the hub runs with --redis-timeout 10s: the pause must not time out)
rcli CLIENT PAUSE 4000 WRITE >/dev/null
bg_ht inflight request --http "${HUB_HTTP[A]}" --topic "$U/rd" --gen change \
    --n 77 >"$TMP/inflight.out"
check "drain/a publish is waiting for Redis" \
    ht wait-metric --http "${HUB_HTTP[A]}" --get rshub_publish_inflight --min 1 \
    --timeout 3
kill -TERM "${HUB_PID[A]}"
r=$(hub_req A --topic "$U/rd" --gen change --n 78)
expect_eq "drain/a new publish while draining -> 503" "$(status_of "$r")" 503
r=$(hub_req A --method GET --path /readyz)
expect_eq "drain/readyz 503 while draining" "$(status_of "$r")" 503
pid_wait "${HUB_PID[A]}" 10
expect_eq "drain/rshub exits 0 after the drain" "$WAIT_RC" 0
HUB_PID[A]=
bg_wait inflight 10
IFID=$(header_of "$(cat "$TMP/inflight.out")" X-Hub-Id)
expect_eq "drain/the publish in flight at SIGTERM is answered 202" \
    "$(head -n 1 "$TMP/inflight.out")" 202
[ "$(head -n 1 "$TMP/inflight.out")" = 202 ] ||
    sed 's/^/     | /' "$TMP/inflight.out" "${HUB_LOG[A]:-/dev/null}" | tail -n 20
# (an empty id would make XRANGE answer an error, which grep finds too)
check "drain/and stored (XRANGE finds $IFID)" \
    bash -c "[ -n '$IFID' ] && redis-cli -s '$REDIS_SOCK' XRANGE rshub:s:rd '$IFID' '$IFID' | grep -q '^$IFID\$'"
hub_asan_check A

# ------------------------------------------------------------- two nodes
note "two rshub nodes (open mode) on one Redis"
hub_start N1 --open --redis-prefix two: || bad "node 1 starts"
hub_start N2 --open --redis-prefix two: || bad "node 2 starts"
T=http://example.org/two/feed
r=$(hub_req N1 --topic "$T" --gen change)
expect_eq "nodes/first publish on node 1 creates the topic" "$(status_of "$r")" 202
header_of "$r" X-Hub-Id >"$TMP/two.first"
CHAN=$(header_of "$r" X-Hub-Channel)
CHAN=${CHAN##*/channel/}
check "nodes/channel name from X-Hub-Channel ('$CHAN')" test -n "$CHAN"
sub N2 b0 "$CHAN" --count 5 --idle 5 --timeout 30
sub N1 a1 "$CHAN" --count 5 --idle 5 --timeout 30
check "nodes/a client on node 1 attached" \
    ht wait-subs --http "${HUB_HTTP[N1]}" --name "$CHAN"
check "nodes/a client on node 2 attached" \
    ht wait-metric --http "${HUB_HTTP[N2]}" --get rshub_channels_active --min 1
check "nodes/5 publishes on node 1" flood N1 "$T" 5 "$TMP/two.acks" --conns 1
bg_wait b0 30
bg_wait a1 30
check "nodes/publishes on node 1 reach the client on node 2, in order" \
    ht compare --sub "$TMP/b0.sub" --want "$TMP/two.acks"
check "nodes/and the client on node 1" \
    ht compare --sub "$TMP/a1.sub" --want "$TMP/two.acks"
MID=$(ht ids "$TMP/a1.sub" | sed -n 2p)
sed -n '3,$p' "$TMP/two.acks" >"$TMP/two.after2"
sub N2 b1 "$CHAN" --since "$MID" --idle 1.5 --timeout 20
bg_wait b1 25
check "nodes/resume on node 2 with an id got from node 1" \
    ht compare --sub "$TMP/b1.sub" --want "$TMP/two.after2"
sub N2 b2 "$CHAN" --since 0 --idle 1.5 --timeout 20
bg_wait b2 25
check "nodes/since=0 on node 2: the whole backlog node 1 accepted" \
    ht compare --sub "$TMP/b2.sub" --want "$TMP/two.first" --want "$TMP/two.acks"
check "nodes/node 2 lists the topic node 1 created (GET /topics)" \
    ht wait-subs --http "${HUB_HTTP[N2]}" --name "$CHAN" --n 0 --timeout 3
check "nodes/node 2 serves capabilitylist-entries for it" \
    ht caplist --http "${HUB_HTTP[N2]}" --name "$CHAN"
T2=http://example.org/two/other
r=$(hub_req N1 --topic "$T2" --gen change)
expect_eq "nodes/a change notification fixes the kind of a new topic on node 1" \
    "$(status_of "$r")" 202
r=$(hub_req N2 --topic "$T2" --gen framework)
expect_eq "nodes/node 2 refuses a framework notification to that change topic (400)" \
    "$(status_of "$r")" 400
# both nodes publishing at once: one order for everyone
sub N1 c1 "$CHAN" --count 1000 --idle 10 --timeout 60
sub N2 c2 "$CHAN" --count 1000 --idle 10 --timeout 60
check "nodes/clients on both nodes attached" \
    bash -c "'$PY' '$HUBTOOL' wait-subs --http ${HUB_HTTP[N1]} --name '$CHAN' --n 1 &&
             '$PY' '$HUBTOOL' wait-metric --http ${HUB_HTTP[N2]} --get rshub_ws_connections --min 1"
sleep 0.5
bg_ht f1 flood --http "${HUB_HTTP[N1]}" --topic "$T" --count 500 --conns 2 \
    --out "$TMP/two.f1" >/dev/null
bg_ht f2 flood --http "${HUB_HTTP[N2]}" --topic "$T" --count 500 --conns 2 \
    --start 1000 --out "$TMP/two.f2" >/dev/null
bg_wait f1 60
bg_wait f2 60
bg_wait c1 60
bg_wait c2 60
check "nodes/concurrent publishes on both nodes: node 1's client sees all, one order" \
    ht compare --sub "$TMP/c1.sub" --want "$TMP/two.f1" --want "$TMP/two.f2"
check "nodes/node 2's client sees the same" \
    ht compare --sub "$TMP/c2.sub" --want "$TMP/two.f1" --want "$TMP/two.f2"
check "nodes/both clients saw the very same sequence" \
    cmp -s <(ht ids "$TMP/c1.sub") <(ht ids "$TMP/c2.sub")
for n in N1 N2; do
    hub_stop "$n" TERM 10
    expect_eq "nodes/$n exits 0 on SIGTERM" "$HUB_RC" 0
    hub_asan_check "$n"
done
finish
