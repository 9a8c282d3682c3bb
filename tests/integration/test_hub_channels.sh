#!/usr/bin/env bash
# test_hub_channels.sh - rshub's WebSocket channels (docs/protocol.md 4)
# against a real redis-server on loopback: order across 10,000 rapid
# publishes, resume with since (no gap, no duplicate, also while publishing
# goes on), the documented close codes (4001 gap, 4004, 4005, 1001), the
# slow-consumer cut with bounded memory, and keepalive.
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"

U=http://example.com/dataset1
cat >"$TMP/hub.conf" <<EOF
[topic order]
uri = $U/order

[topic resume]
uri = $U/resume

[topic seam]
uri = $U/seam

[topic small]
uri = $U/small
backlog-max = 10

[topic slow]
uri = $U/slow

[topic big]
uri = $U/big

[topic tiny]
uri = $U/tiny
backlog-max = 10

[topic bigreplay]
uri = $U/bigreplay

[topic crowd]
uri = $U/crowd

[topic aged]
uri = $U/aged
backlog-max-age = 1s
EOF

redis_start || { bad "redis-server starts"; finish; }
hub_start A --config "$TMP/hub.conf" --ws-threads 2 ||
    { bad "rshub starts"; finish; }
HP=${HUB_HTTP[A]}
WP=${HUB_WS[A]}

# sub NAME CHAN [hubtool sub args...]: a background subscriber logging to
# $TMP/NAME.sub
sub() {
    local name=$1 chan=$2
    shift 2
    rm -f "$TMP/$name.sub"
    bg_ht "$name" sub --ws "$WP" --chan "$chan" --out "$TMP/$name.sub" "$@"
}
flood() {   # flood TOPIC COUNT OUT [args]
    local topic=$1 count=$2 out=$3
    shift 3
    ht flood --http "$HP" --topic "$U/$topic" --count "$count" --out "$out" "$@"
}
lines() { sed -n "$2,$3p" "$1"; }

# The age bound is applied by a periodic janitor (every 10 s): publish now,
# look at the end of the script.
flood aged 5 "$TMP/aged.acks" --conns 1 >/dev/null

# ------------------------------------------------------------------ order
note "order across 10,000 rapid publishes (4 keep-alive connections)"
sub o1 order --count 10000 --idle 15 --timeout 150
sub o2 order --count 10000 --idle 15 --timeout 150
check "order/two live subscribers attached" \
    ht wait-subs --http "$HP" --name order --n 2
check "order/10,000 publishes acknowledged" \
    flood order 10000 "$TMP/order.acks" --conns 4
bg_wait o1 150
bg_wait o2 150
check "order/subscriber 1: exactly the acknowledged ids, strictly increasing" \
    ht compare --sub "$TMP/o1.sub" --want "$TMP/order.acks"
check "order/subscriber 2: exactly the acknowledged ids, strictly increasing" \
    ht compare --sub "$TMP/o2.sub" --want "$TMP/order.acks"

# ---------------------------------------------------- big and small mixed
note "big documents (frames over 64 KiB) between small ones; client chatter"
for n in 1 2 3 4 5 6; do
    case $n in 2) pad=70000 ;; 4) pad=300000 ;; 5) pad=1100000 ;; *) pad=0 ;; esac
    ht gen --kind change --n "$n" --pad "$pad" >"$TMP/big$n.xml"
done
sub bg1 big --count 6 --idle 10 --timeout 60 --save-data
sub bg2 big --count 6 --idle 10 --timeout 60 --chatter 40
check "big/two clients attached" ht wait-subs --http "$HP" --name big --n 2
check "big/6 documents of 0.5 KB to 1.1 MB accepted" \
    bash -c "'$PY' '$HUBTOOL' publish-many --http $HP --topic '$U/big' \
             $TMP/big1.xml $TMP/big2.xml $TMP/big3.xml $TMP/big4.xml \
             $TMP/big5.xml $TMP/big6.xml >'$TMP/big.pairs'"
bg_wait bg1 60
bg_wait bg2 60
check "big/byte-identical apart from the annotation, in order" \
    bash -c "'$PY' '$HUBTOOL' verify --sub '$TMP/bg1.sub' --pairs '$TMP/big.pairs' &&
             '$PY' '$HUBTOOL' compare --sub '$TMP/bg1.sub' --want '$TMP/big.pairs'"
check "chatter/a client's own messages are ignored, its ping answered" \
    bash -c "grep -q '\"ev\": \"pong\"' '$TMP/bg2.sub' &&
             '$PY' '$HUBTOOL' compare --sub '$TMP/bg2.sub' --want '$TMP/big.pairs'"

note "since=0 over 256 notifications of 100 KB (default limits: 16 MiB hard)"
check "bigreplay/256 notifications of 100 KB accepted" \
    flood bigreplay 256 "$TMP/bigreplay.acks" --pad 100000 --conns 2
sub br bigreplay --since 0 --count 256 --idle 5 --timeout 60 --rcvbuf 4194304
bg_wait br 60
check "bigreplay/a resuming client gets the whole backlog (not cut with 4002)" \
    ht compare --sub "$TMP/br.sub" --want "$TMP/bigreplay.acks"

note "fan-out to 500 concurrent clients"
bg_ht crowd crowd --ws "$WP" --chan crowd --clients 500 --count 100 \
    --out "$TMP/crowd.out"
check "crowd/500 clients attached" \
    ht wait-subs --http "$HP" --name crowd --n 500 --timeout 30
flood crowd 100 "$TMP/crowd.acks" --conns 2 >/dev/null
bg_wait crowd 60
check "crowd/each of the 500 got exactly the 100 ids, in order" \
    ht crowd-check --file "$TMP/crowd.out" --clients 500 --want "$TMP/crowd.acks"

# ----------------------------------------------------------------- resume
note "resume with since"
sub r1 resume --count 5 --timeout 20
check "resume/live subscriber attached" ht wait-subs --http "$HP" --name resume --n 1
flood resume 5 "$TMP/r.acks1" --conns 1 >/dev/null
bg_wait r1 20
check "resume/first connection got the first 5" \
    ht compare --sub "$TMP/r1.sub" --want "$TMP/r.acks1"
LAST=$(ht ids "$TMP/r1.sub" | tail -n 1)
check "resume/subscriber count back to 0 after disconnect" \
    ht wait-subs --http "$HP" --name resume --n 0 --exact --timeout 5
flood resume 7 "$TMP/r.acks2" --conns 1 --start 100 >/dev/null
sub r2 resume --since "$LAST" --idle 2 --timeout 20
check "resume/since=LAST: the missed 7 replayed" \
    ht wait-count --sub "$TMP/r2.sub" --n 7
flood resume 3 "$TMP/r.acks3" --conns 1 --start 200 >/dev/null
bg_wait r2 25
check "resume/since=LAST: exactly the missed ones then the live ones, no duplicate, no gap" \
    ht compare --sub "$TMP/r2.sub" --want "$TMP/r.acks2" --want "$TMP/r.acks3"
sub r3 resume --since 0 --idle 1.5 --timeout 20
bg_wait r3 25
check "resume/since=0: the whole backlog" \
    ht compare --sub "$TMP/r3.sub" --want "$TMP/r.acks1" --want "$TMP/r.acks2" \
    --want "$TMP/r.acks3"
NEWEST=$(tail -n 1 "$TMP/r.acks3")
sub r4 resume --since "$NEWEST" --idle 1.5 --timeout 20
check "resume/since=newest attached" \
    ht wait-subs --http "$HP" --name resume --n 1
flood resume 2 "$TMP/r.acks4" --conns 1 --start 300 >/dev/null
bg_wait r4 25
check "resume/since=newest: nothing replayed, then live" \
    ht compare --sub "$TMP/r4.sub" --want "$TMP/r.acks4"
MS=${NEWEST%-*}
cat "$TMP"/r.acks[1-4] | awk -F- -v ms="$MS" '$1 > ms || ($1 == ms && $2 > 0)' \
    >"$TMP/r.afterms"
sub r5 resume --since "$MS" --idle 1.5 --timeout 20
bg_wait r5 25
check "resume/since=MS (no -SEQ) means MS-0: every entry after it" \
    ht compare --sub "$TMP/r5.sub" --want "$TMP/r.afterms"

note "resume while publishing goes on (replay pages meet the live stream)"
flood seam 1000 "$TMP/seam.acks1" --conns 2 >/dev/null
SINCE=$(lines "$TMP/seam.acks1" 100 100)
lines "$TMP/seam.acks1" 101 1000 >"$TMP/seam.after100"
bg_ht seamflood flood --http "$HP" --topic "$U/seam" --count 1500 \
    --out "$TMP/seam.acks2" --conns 2 --start 5000 >"$TMP/seamflood.out"
sleep 0.3
sub s1 seam --since "$SINCE" --count 2400 --idle 5 --timeout 60
sub s2 seam --since 0 --count 2500 --idle 5 --timeout 60
bg_wait seamflood 60
check "seam/publishes during the replay acknowledged" test "$WAIT_RC" = 0
bg_wait s1 60
bg_wait s2 60
check "seam/since=ID during publishing: every id after ID exactly once, in order" \
    ht compare --sub "$TMP/s1.sub" --want "$TMP/seam.after100" --want "$TMP/seam.acks2"
check "seam/since=0 during publishing: the whole backlog exactly once, in order" \
    ht compare --sub "$TMP/s2.sub" --want "$TMP/seam.acks1" --want "$TMP/seam.acks2"

# ------------------------------------------------------------ close codes
note "close codes"
check "gap/200 publishes to a topic with backlog-max = 10" \
    flood small 200 "$TMP/small.acks" --conns 1
FIRST=$(ht topic --http "$HP" --name small --get backlog.first_id)
LEN=$(ht topic --http "$HP" --name small --get backlog.length)
check "gap/backlog trimmed to between 10 and 10+64 entries (got $LEN)" \
    test "$LEN" -ge 10 -a "$LEN" -le 74
sub g1 small --since "$(head -n 1 "$TMP/small.acks")" --timeout 10
bg_wait g1 15
expect_eq "gap/since older than the backlog -> close 4001" \
    "$(ht closecode "$TMP/g1.sub")" 4001
check "gap/4001 before any message" \
    bash -c "! grep -q '\"ev\": \"msg\"' '$TMP/g1.sub'"
# The newest trimmed id: nothing after it is gone, so no gap.
MARK=$(grep -B1 -x "$FIRST" "$TMP/small.acks" | head -n 1)
grep -A1000 -x "$FIRST" "$TMP/small.acks" >"$TMP/small.kept"
sub g2 small --since "$MARK" --idle 1.5 --timeout 10
bg_wait g2 15
check "gap/since = the newest trimmed id -> the whole backlog, no 4001" \
    ht compare --sub "$TMP/g2.sub" --want "$TMP/small.kept"

# A live client that keeps up with a topic whose backlog is small: appends
# trim all the time, and the hub may really fall behind (a true 4001), but
# a 4001 for a client that had been sent every trimmed id is false: it
# would fall back to pulling for nothing. Up to 4 rounds, 8 publishers.
# A round's client ends with the round's 1,200 (nothing is published
# after them: no trim, no 4001 can follow) or, short of them, 3 s idle
# after a close or the last message.
res="no 4001 seen"
for _ in 1 2 3 4; do
    sub fg tiny --count 1200 --idle 3 --timeout 30 --rcvbuf 4194304
    ht wait-subs --http "$HP" --name tiny --n 1 >/dev/null 2>&1
    flood tiny 1200 "$TMP/tiny.acks" --conns 8 >/dev/null
    bg_wait fg 30
    ht wait-subs --http "$HP" --name tiny --n 0 --exact >/dev/null 2>&1
    res=$(ht false-gap --sub "$TMP/fg.sub" --acks "$TMP/tiny.acks" 2>&1) || break
done
check "gap/no false 4001 for a live client that missed nothing (backlog-max 10)" \
    bash -c "case \"\$1\" in *'false gap'*) echo \"\$1\"; exit 1 ;; esac" _ "$res"

for s in abc "" 1-2-3 -5 12345678901234567890123; do
    sub bs resume --since "$s" --timeout 10
    bg_wait bs 15
    expect_eq "badsince/since='$s' -> close 4005" "$(ht closecode "$TMP/bs.sub")" 4005
done
sub uc nope --timeout 10
bg_wait uc 15
expect_eq "unknown/channel 'nope' (closed mode) -> close 4004" \
    "$(ht closecode "$TMP/uc.sub")" 4004
sub uc2 "order/extra" --timeout 10
bg_wait uc2 15
expect_eq "unknown/channel 'order/extra' -> close 4004" \
    "$(ht closecode "$TMP/uc2.sub")" 4004

# ---------------------------------------------------------- slow consumer
note "slow consumer (--ws-hard-limit 64K)"
# A small ASan quarantine, so that RSS follows what the hub holds rather
# than what it freed.
ASAN_OPTIONS="$ASAN_OPTIONS:quarantine_size_mb=8" \
    hub_start B --config "$TMP/hub.conf" --redis-prefix slowtest: \
    --ws-hard-limit 64K --ws-threads 2 || bad "rshub B starts"
BHP=${HUB_HTTP[B]}
BWP=${HUB_WS[B]}
bg_ht stuck stuck --ws "$BWP" --chan slow --rcvbuf 4096 --hold 120 \
    --ready "$TMP/stuck.ready"
wait_file "$TMP/stuck.ready" 10 || bad "slow/stuck client handshake"
for i in 1 2 3; do
    rm -f "$TMP/n$i.sub"
    bg_ht "n$i" sub --ws "$BWP" --chan slow --out "$TMP/n$i.sub" \
        --count 3000 --idle 15 --timeout 120 --rcvbuf 4194304
done
check "slow/stuck client and 3 normal clients attached" \
    ht wait-subs --http "$BHP" --name slow --n 4
RSS0=$(ht rss --pid "${HUB_PID[B]}")
(
    max=0
    while kill -0 "${HUB_PID[B]}" 2>/dev/null && [ ! -e "$TMP/rss.stop" ]; do
        r=$(awk '/^VmRSS:/ {print $2}' "/proc/${HUB_PID[B]}/status" 2>/dev/null)
        [ -n "$r" ] && [ "$r" -gt "$max" ] && max=$r && echo "$max" >"$TMP/rss.max"
        sleep 0.2
    done
) &
BG_PID["rss"]=$!
# Paced, and the normal clients have roomy socket buffers, so that they
# keep up on a loaded 2-core machine: with a 64 KiB limit a client that
# falls a few hundred messages behind is a slow consumer too.
check "slow/3000 notifications of ~1 KB acknowledged" \
    ht flood --http "$BHP" --topic "$U/slow" --count 3000 --pad 1000 \
    --conns 2 --rate 1000 --out "$TMP/slow.acks"
for i in 1 2 3; do
    bg_wait "n$i" 120
    check "slow/normal client $i received all 3000, in order" \
        ht compare --sub "$TMP/n$i.sub" --want "$TMP/slow.acks"
done
rm -f "$TMP/n4.sub"
ht sub --ws "$BWP" --chan slow --since 0 --out "$TMP/n4.sub" --count 3000 \
    --idle 5 --timeout 60 --rcvbuf 4194304
check "slow/since=0 over those 3000 (a replay page is > 64 KiB) replays all, not 4002" \
    ht compare --sub "$TMP/n4.sub" --want "$TMP/slow.acks"
touch "$TMP/rss.stop"
bg_wait rss 5
DROPS=$(ht metrics --http "$BHP" --get rshub_ws_slow_consumer_drops_total)
check "slow/metrics rshub_ws_slow_consumer_drops_total >= 1 (got $DROPS)" \
    test "${DROPS:-0}" -ge 1
RSS1=$(cat "$TMP/rss.max" 2>/dev/null || echo 0)
check "slow/RSS bounded: max $((RSS1 / 1024)) MiB during the flood, $((RSS0 / 1024)) MiB before (limit +48 MiB)" \
    test "$RSS1" -le $((RSS0 + 48 * 1024))
stop_pid "${BG_PID[stuck]}"
unset "BG_PID[stuck]"
# A second node on the same backlog, paused while node B takes publishes:
# when it resumes it reads them as one batch. Its client is idle and
# caught up: it is no slow consumer.
hub_start B2 --config "$TMP/hub.conf" --redis-prefix slowtest: \
    --ws-hard-limit 64K || bad "rshub B2 starts"
rm -f "$TMP/p1.sub"
bg_ht p1 sub --ws "${HUB_WS[B2]}" --chan slow --out "$TMP/p1.sub" \
    --count 200 --idle 5 --timeout 30 --rcvbuf 4194304
check "slow/a client on node B2 attached" \
    ht wait-subs --http "${HUB_HTTP[B2]}" --name slow --n 1
kill -STOP "${HUB_PID[B2]}"
ht flood --http "$BHP" --topic "$U/slow" --count 200 --pad 1000 --conns 1 \
    --out "$TMP/slow.acks2" >/dev/null
kill -CONT "${HUB_PID[B2]}"
bg_wait p1 30
check "slow/node B2 paused while B took 200: its caught-up client gets all, not 4002" \
    ht compare --sub "$TMP/p1.sub" --want "$TMP/slow.acks2"
hub_stop B2 TERM 10
hub_asan_check B2
hub_stop B TERM 10
expect_eq "slow/rshub B exits 0 on SIGTERM" "$HUB_RC" 0
hub_asan_check B

# -------------------------------------------------------------- keepalive
note "keepalive (--ws-ping 1s)"
hub_start C --config "$TMP/hub.conf" --redis-prefix katest: --ws-ping 1s ||
    bad "rshub C starts"
bg_ht kstuck stuck --ws "${HUB_WS[C]}" --chan resume --hold 30 \
    --ready "$TMP/kstuck.ready"
rm -f "$TMP/kalive.sub"
bg_ht kalive sub --ws "${HUB_WS[C]}" --chan resume --timeout 6 \
    --out "$TMP/kalive.sub"
check "keepalive/a silent client and a ponging client attached" \
    ht wait-subs --http "${HUB_HTTP[C]}" --name resume --n 2
check "keepalive/the client that never answers pings is dropped within 5 s" \
    ht wait-subs --http "${HUB_HTTP[C]}" --name resume --n 1 --exact --timeout 5
bg_wait kalive 10
check "keepalive/the client that answers pings stays connected" \
    bash -c "grep -q '\"why\": \"timeout\"' '$TMP/kalive.sub'"
stop_pid "${BG_PID[kstuck]}"
unset "BG_PID[kstuck]"
hub_stop C TERM 10
hub_asan_check C

# ------------------------------------------------------------ many channels
note "many channels (open mode): live delivery on channel 1,101"
hub_start D --open --redis-prefix manytest: || bad "rshub D starts"
check "many/1,100 channels joined and left" \
    ht touch-channels --ws "${HUB_WS[D]}" --n 1100
r=$(hub_req D --topic http://example.org/many/late --gen change)
CH=$(header_of "$r" X-Hub-Channel)
CH=${CH##*/channel/}
rm -f "$TMP/m1.sub"
bg_ht m1 sub --ws "${HUB_WS[D]}" --chan "$CH" --out "$TMP/m1.sub" --count 5 \
    --idle 5 --timeout 20
check "many/a client on a new channel attached" \
    ht wait-subs --http "${HUB_HTTP[D]}" --name "$CH" --n 1
ht flood --http "${HUB_HTTP[D]}" --topic http://example.org/many/late \
    --count 5 --conns 1 --out "$TMP/many.acks" >/dev/null
bg_wait m1 20
check "many/it receives what is published live" \
    ht compare --sub "$TMP/m1.sub" --want "$TMP/many.acks"
hub_stop D TERM 10
hub_asan_check D

# ---------------------------------------------------------- age bound
note "age bound (backlog-max-age = 1s, janitor every 10 s)"
i=0
while [ "$i" -lt 150 ] &&
      [ "$(ht topic --http "$HP" --name aged --get backlog.length)" != 0 ]; do
    sleep 0.1
    i=$((i + 1))
done
expect_eq "aged/entries older than backlog-max-age trimmed" \
    "$(ht topic --http "$HP" --name aged --get backlog.length)" 0
sub ag aged --since "$(head -n 1 "$TMP/aged.acks")" --timeout 10
bg_wait ag 15
expect_eq "aged/since an aged-out id -> close 4001" "$(ht closecode "$TMP/ag.sub")" 4001

# ---------------------------------------------------------------- SIGTERM
note "SIGTERM"
sub t1 order --timeout 30
sub t2 resume --since 0 --timeout 30
check "sigterm/two clients attached" \
    bash -c "'$PY' '$HUBTOOL' wait-subs --http $HP --name order --n 1 &&
             '$PY' '$HUBTOOL' wait-subs --http $HP --name resume --n 1"
S0=$SECONDS
hub_stop A TERM 10
expect_eq "sigterm/rshub exits 0" "$HUB_RC" 0
check "sigterm/exit within 5 s (took $((SECONDS - S0)) s)" test $((SECONDS - S0)) -le 5
bg_wait t1 10
bg_wait t2 10
expect_eq "sigterm/live client sees close 1001" "$(ht closecode "$TMP/t1.sub")" 1001
expect_eq "sigterm/resumed client sees close 1001" "$(ht closecode "$TMP/t2.sub")" 1001
hub_asan_check A
finish
