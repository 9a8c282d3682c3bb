#!/usr/bin/env bash
# bench_pollcost.sh - what a polling mirror costs the Source per poll
# (docs/benchmarks.md, "Polling cost"; issue 18, goal 4). rssource with a
# 10,000-entry open Change List (1,000 files rewritten 10 times) and its
# --access-log; rssub run --no-push --poll-interval 1s, first polling as
# before (RSSUB_POLL_FULL=1: every list read whole, unconditionally), then
# as it does now (the continuation, If-None-Match), one after the other in
# the same run against the same Source. For each: requests and bytes of
# documents (everything under resourcesync/, so the Capability List's
# re-read too; resources fetched are left out) per idle poll, and for the
# poll that brings 1 and 100 new changes (the window's bytes less the idle
# polls in it). Prints a table and the ratios.
# Builds nothing; starts its own processes on loopback in a temp dir and
# stops only those, by PID.
#   --build DIR   binaries (default: build-release, or $RS_BUILD_DIR)
#   --idle N      idle polls measured (default 10)
#   --keep        keep the temp dir
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${RS_BUILD_DIR:-$root/build-release}
idle=10
keep=0
while [ $# -gt 0 ]; do
    case $1 in
        --build) build=$2; shift 2 ;;
        --idle) idle=$2; shift 2 ;;
        --keep) keep=1; shift ;;
        *) echo "usage: $0 [--build DIR] [--idle N] [--keep]" >&2; exit 2 ;;
    esac
done
RSSOURCE=$build/source/rssource
RSSUB=$build/subscriber/rssub
[ -x "$RSSOURCE" ] && [ -x "$RSSUB" ] || { echo "no binaries in $build" >&2; exit 2; }

TMP=$(mktemp -d /tmp/bench-pollcost.XXXXXX)
SRC_PID=""
SUB_PID=""
cleanup() {
    [ -n "$SUB_PID" ] && kill "$SUB_PID" 2>/dev/null && wait "$SUB_PID" 2>/dev/null
    [ -n "$SRC_PID" ] && kill "$SRC_PID" 2>/dev/null && wait "$SRC_PID" 2>/dev/null
    if [ "$keep" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

D=$TMP/data
LOG=$TMP/access.log
mkdir -p "$D"

write_round() {   # write_round N ROUND [PREFIX]
    python3 - "$D" "$1" "$2" "${3:-f}" <<'EOF'
import os, sys
d, n, k, pre = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
for i in range(n):
    with open(os.path.join(d, "%s%d.txt" % (pre, i)), "w") as f:
        f.write("file %d round %d\n" % (i, k))
EOF
}

lines() { wc -l <"$LOG"; }
# docs FROM: the access log's document requests after line FROM
docs() { tail -n +"$(($1 + 1))" "$LOG" | awk '$3 ~ /^\/(resourcesync|\.well-known)\//'; }
polls() { docs "$1" | grep -c 'capabilitylist' || true; }
reqs() { docs "$1" | grep -c . || true; }
bytes() { docs "$1" | awk '{ b += $5 } END { print b + 0 }'; }

same() { diff -r -q "$D" "$1" >/dev/null 2>&1; }
wait_same() {
    local i
    for ((i = 0; i < 600; i++)); do same "$1" && return 0; sleep 0.1; done
    echo "the mirror did not converge" >&2
    return 1
}

"$RSSOURCE" --dir "$D" --listen 127.0.0.1:0 --state "$TMP/src.state" \
    --ready-file "$TMP/src.ready" --settle 100ms --access-log "$LOG" \
    --log-file "$TMP/src.log" &
SRC_PID=$!
for ((i = 0; i < 200; i++)); do [ -s "$TMP/src.ready" ] && break; sleep 0.1; done
PORT=$(sed -n 's/.*"http":\([0-9]*\).*/\1/p' "$TMP/src.ready")
URL=http://127.0.0.1:$PORT/
for k in $(seq 0 9); do write_round 1000 "$k"; sleep 0.5; done
for ((i = 0; i < 300; i++)); do
    n=$(curl -s "${URL}resourcesync/changelist.xml" | grep -c '<url>' || true)
    [ "$n" -ge 10000 ] && break
    sleep 0.2
done
FULL=$(curl -s "${URL}resourcesync/changelist.xml" | wc -c)
echo "open Change List: $n entries, $FULL bytes"

declare -A R
run_mode() {   # run_mode NAME ENV-VALUE
    local name=$1 full=$2 m=$TMP/mirror-$1 l p b q s
    mkdir -p "$m"
    RSSUB_POLL_FULL=$full "$RSSUB" run --source "$URL" --mirror "$m" \
        --state "$TMP/$name.db" --no-push --poll-interval 1s \
        --log-file "$TMP/$name.log" --no-progress &
    SUB_PID=$!
    wait_same "$m"
    sleep 3                 # the first poll after the sync reads whole
    l=$(lines)
    sleep "$idle.5"
    p=$(polls "$l")
    R[$name.idle.req]=$(echo "scale=2; $(reqs "$l") / $p" | bc)
    R[$name.idle.bytes]=$(( $(bytes "$l") / p ))
    for k in 1 100; do
        l=$(lines)
        write_round "$k" "$RANDOM$k" "n$name$k-"
        wait_same "$m"
        sleep 1.2
        p=$(polls "$l")
        b=$(bytes "$l")
        q=$(reqs "$l")
        # the window's idle polls are what polling costs anyway
        s=$(echo "($p - 1)" | bc)
        R[$name.busy$k.bytes]=$(( b - s * ${R[$name.idle.bytes]} ))
        R[$name.busy$k.req]=$(echo "scale=2; $q - $s * ${R[$name.idle.req]}" | bc)
    done
    kill "$SUB_PID"
    wait "$SUB_PID" || true
    SUB_PID=""
}
run_mode before 1
run_mode now 0

printf '\n%-16s %14s %14s %14s %10s\n' "per poll" "before (req)" "before (bytes)" "now (bytes)" "ratio"
for k in idle busy1 busy100; do
    b=${R[before.$k.bytes]} n=${R[now.$k.bytes]}
    if [ "$n" -gt 0 ]; then r=$(echo "scale=1; $b / $n" | bc); else r="inf"; fi
    printf '%-16s %14s %14s %14s %10s\n' "$k" "${R[before.$k.req]}" "$b" "$n" "$r"
done
printf '%-16s %14s %14s %14s\n' "requests now" "${R[now.idle.req]}" "${R[now.busy1.req]}" "${R[now.busy100.req]}"
echo "(idle: requests per poll, 304s included; busy1/busy100: the poll that reads 1 or 100 new changes)"
