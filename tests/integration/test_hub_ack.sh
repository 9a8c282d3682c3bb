#!/usr/bin/env bash
# test_hub_ack.sh - replicated acknowledgement (--ack-replicas, issue 15;
# docs/internals/failover.md). A real primary and one replica (replicaof,
# no Sentinel), hub A with --ack-replicas 1 --ack-timeout 500ms, hub Z
# with --ack-replicas 0 on the same Redis.
#   1. replica up: publishes are 202, a WebSocket subscriber (since=0: the
#      replay pages, then live) gets them in order; /readyz 200.
#   2. replica stopped (SIGSTOP: it neither answers nor replicates):
#      publishes get 504 "not replicated: 0 of 1 replicas confirmed within
#      500ms" within the timeout (never 202), the subscriber gets nothing,
#      /readyz 503, the metrics count the timeouts. Replica continued:
#      /readyz 200, publishes 202 again, and the entries stored during the
#      outage reach the subscriber once replicated, in order, no gap
#      (docs/protocol.md 3 says so: a 504 publish may be delivered).
#   3. --ack-replicas 0 (hub Z) is unchanged: 202 and delivery while the
#      replica is stopped, ready, no ack link, no ack metrics.
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"   # wait_until, which ha.sh uses
# shellcheck source=lib/ha.sh
. "$(dirname "$0")/lib/ha.sh"

TA=http://example.com/ack/changes
TZ=http://example.com/ack0/changes

mkdir -p "$HA_DIR"
ha_node_start r0 || { bad "primary starts"; finish; }
P0=127.0.0.1:${HA_PORT[r0]}
ha_node_start r1 "$P0" || { bad "replica starts"; finish; }
ha_wait_replica r1 "$P0" 15 || { bad "replica in sync"; finish; }
hub_start A --open --redis "redis://$P0" --ack-replicas 1 --ack-timeout 500ms ||
    { bad "rshub A (--ack-replicas 1) starts"; finish; }
hub_start Z --open --redis "redis://$P0" ||
    { bad "rshub Z (--ack-replicas 0) starts"; finish; }
# L: an --ack-timeout longer than --redis-timeout (appends queued behind
# a WAIT must not time out the publish link)
hub_start L --open --redis "redis://$P0" --ack-replicas 1 --ack-timeout 2s \
    --redis-timeout 1s || { bad "rshub L (--ack-timeout 2s > --redis-timeout 1s) starts"; finish; }

# pub NODE TOPIC N: publish document N; sets PUB (the status line's
# code), SECS (how long it took), BODY and CHAN (the channel's name).
pub() {
    local t0 t1 r
    t0=$(date +%s.%N)
    r=$(hub_req "$1" --topic "$2" --gen change --n "$3")
    t1=$(date +%s.%N)
    CHAN=$(header_of "$r" X-Hub-Channel)
    CHAN=${CHAN##*/}
    PUB=$(status_of "$r" | cut -d' ' -f2)
    SECS=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    BODY=$(body_of "$r" | head -n 1)
}
# lt A B: A < B (decimals)
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }
# ids FILE: the ids a subscriber got, one a line
ids() { grep -o '"id": "[0-9-]*"' "$1" | cut -d'"' -f4; }
metric() { ht metrics --http "${HUB_HTTP[$1]}" --get "$2" 2>/dev/null; }
readyz() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${HUB_HTTP[$1]}/readyz"; }
# wait_ready NODE CODE SECS
wait_ready() {
    ht wait-status --http "${HUB_HTTP[$1]}" --path /readyz --status "$2" \
        --timeout "$3" >/dev/null 2>&1
}
# wait_ids FILE N SECS: until FILE holds N ids
wait_ids() {
    local i=0
    while [ "$(ids "$1" | wc -l)" -lt "$2" ] && [ "$i" -lt $(($3 * 10)) ]; do
        sleep 0.1
        i=$((i + 1))
    done
    [ "$(ids "$1" | wc -l)" -ge "$2" ]
}

# ------------------------------------------------------ 1. replica up
note "1. --ack-replicas 1, replica up"
wait_ready A 200 10
expect_eq "A: /readyz 200 with the replica up" "$(readyz A)" 200
pub A "$TA" 1
expect_eq "A: publish with the replica up is 202" "$PUB" 202
CH=$CHAN
SUB=$TMP/sub.out
bg_ht sub sub --ws "${HUB_WS[A]}" --chan "$CH" --since 0 --count 6 \
    --timeout 60 --out "$SUB"
for n in 2 3; do
    pub A "$TA" "$n"
    expect_eq "A: publish $n is 202" "$PUB" 202
done
wait_ids "$SUB" 3 10
expect_eq "subscriber (since=0) got the three, replayed then live" \
    "$(ids "$SUB" | wc -l)" 3
before=$(ids "$SUB")

# ------------------------------------------------- 2. replica stopped
note "2. replica stopped"
kill -STOP "${HA_PID[r1]}"
for n in 4 5; do
    pub A "$TA" "$n"
    expect_eq "A: publish $n with the replica stopped is 504" "$PUB" 504
    # 500 ms, and slack for a loaded machine and the ASan build
    check "A: ...within --ack-timeout (took $SECS s)" lt "$SECS" 2
    case $BODY in
        *"not replicated: 0 of 1 replicas confirmed within 500ms"*)
            ok "A: ...with the reason" ;;
        *) bad "A: ...with the reason" "$BODY" ;;
    esac
done
expect_eq "both are stored on the primary (never acknowledged)" \
    "$(ha_cli r0 XLEN "rshub:s:$CH")" 5
# three publishes to L at once: the second and third queue behind the
# first's WAIT (2 s, longer than L's 1 s link timeout) and are answered
# by the next one: each a 504 "not replicated", the link never reset
lpids=()
for n in 1 2 3; do
    ( pub L "$TA-long" "$n"; printf '%s %s\n' "$PUB" "$BODY" >"$TMP/L.$n" ) &
    lpids+=("$!")
done
wait "${lpids[@]}"
for n in 1 2 3; do
    case $(cat "$TMP/L.$n") in
        "504 "*"not replicated: 0 of 1 replicas confirmed within 2s"*)
            ok "L: concurrent publish $n is 504 not replicated" ;;
        *) bad "L: concurrent publish $n is 504 not replicated" "$(cat "$TMP/L.$n")" ;;
    esac
done
if grep -q 'redis link down' "${HUB_LOG[L]}"; then
    bad "L: no Redis link timed out behind the WAIT" "$(grep 'redis link down' "${HUB_LOG[L]}" | head -3)"
else
    ok "L: no Redis link timed out behind the WAIT"
fi
sleep 1.5
expect_eq "the subscriber got nothing while no replica confirmed" \
    "$(ids "$SUB")" "$before"
wait_ready A 503 5
expect_eq "A: /readyz 503 while WAIT falls short" "$(readyz A)" 503
check "A: /readyz says why" sh -c "curl -s http://127.0.0.1:${HUB_HTTP[A]}/readyz | grep -q 'fewer replicas'"
check "A: rshub_ack_timeouts_total{link=publish} counts the two" \
    test "$(metric A 'rshub_ack_timeouts_total{link="publish"}')" -ge 2
expect_eq "A: rshub_publish_rejected_total{reason=not_replicated}" \
    "$(metric A 'rshub_publish_rejected_total{reason="not_replicated"}')" 2
check "A: rshub_fanout_ack_holds is there" \
    test -n "$(metric A rshub_fanout_ack_holds)"
expect_eq "A: rshub_redis_primary_info names the primary" \
    "$(metric A "rshub_redis_primary_info{addr=\"$P0\"}")" 1
check "A: logged that acknowledgement needs replicas" \
    grep -q 'acknowledgement needs replicas: fewer' "${HUB_LOG[A]}"

# ------------------------------------------- 3. --ack-replicas 0 as before
note "3. --ack-replicas 0, replica still stopped"
pub Z "$TZ" 1
ZCH=$CHAN
# (a WAIT would have counted 0 replicas: the 202 itself shows there was none)
expect_eq "Z: publish is 202 with the replica stopped" "$PUB" 202
SUBZ=$TMP/subz.out
bg_ht subz sub --ws "${HUB_WS[Z]}" --chan "$ZCH" --since 0 --count 2 \
    --timeout 30 --out "$SUBZ"
pub Z "$TZ" 2
expect_eq "Z: second publish is 202" "$PUB" 202
wait_ids "$SUBZ" 2 10
expect_eq "Z: its subscriber gets both while the replica is stopped" \
    "$(ids "$SUBZ" | wc -l)" 2
expect_eq "Z: /readyz 200" "$(readyz Z)" 200
expect_eq "Z: no rshub_ack metrics" \
    "$(curl -s "http://127.0.0.1:${HUB_HTTP[Z]}/metrics" | grep -c '^rshub_ack_')" 0
expect_eq "one ack link in Redis for each of A and L, none for Z" \
    "$(ha_cli r0 CLIENT LIST | grep -c 'name=rshub-ack ')" 2

# ------------------------------------------------------ replica back
note "2b. replica continued"
kill -CONT "${HA_PID[r1]}"
wait_ready A 200 10
expect_eq "A: /readyz 200 again" "$(readyz A)" 200
check "A: logged the recovery" \
    grep -q 'acknowledgement needs replicas: confirmed again' "${HUB_LOG[A]}"
pub A "$TA" 6
expect_eq "A: publish 6 is 202 again" "$PUB" 202
wait_ids "$SUB" 6 15
got=$(ids "$SUB")
expect_eq "the subscriber has all six, once each" "$(echo "$got" | sort -u | wc -l)" 6
expect_eq "...in stream order" "$got" "$(echo "$got" | sort -t- -k1,1n -k2,2n)"
expect_eq "...exactly the stream (the outage's two included, no gap)" \
    "$got" "$(ha_cli r0 XRANGE "rshub:s:$CH" - + | grep -E '^[0-9]+-[0-9]+$')"
bg_wait sub 20
bg_wait subz 20
finish
