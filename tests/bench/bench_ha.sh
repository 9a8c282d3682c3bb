#!/usr/bin/env bash
# bench_ha.sh - what replicated acknowledgement and a Sentinel failover
# cost rshub (issue 15, docs/internals/failover.md), in one run on
# loopback: a primary, one replica and three Sentinels (redis-server
# --sentinel, down-after-milliseconds 1000; tests/integration/lib/ha.sh),
# rshub on sentinel://... with --ack-replicas 0 and then 1:
#  - publish latency (p50/p99, wsload, the same ~1 KB notification as
#    bench_hub.sh) at a paced 200/s and at the highest rate it accepts
#    (wsload asking --max-rate/s over 32 connections), and that rate,
#    side by side with the ratio 1:0 (--rounds runs each, the two modes
#    taking turns, medians);
#  - then a second replica joins, and --faults times: kill -9 of the
#    primary under a 200/s publisher (ha_tool.py publish), the time from
#    the kill to the first 202 of a publish sent after it, next to
#    Sentinel's down-after-milliseconds (the floor: nothing is promoted
#    before the primary has been down that long), as a ratio; the old
#    primary restarted as a replica before the next.
# Everything it starts, it stops (by PID); never a system redis.
#   tests/bench/bench_ha.sh [--build DIR] [--duration S] [--rounds N]
#       [--faults N] [--max-rate R] [--out FILE] [--keep]
# shellcheck disable=SC2119 # ha_url's NAME is optional
set -u

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$src/build-release
dur=15
faults=3
rounds=3
max_rate=50000
out=""

usage() {
    cat <<EOF
Usage: $0 [OPTION]...
  --build DIR      build dir with hub/rshub and tests/bench/wsload, Release
                   (default $build)
  --duration S     seconds per publish measurement (default $dur)
  --rounds N       publish runs per mode, the modes taking turns, the
                   median reported (default $rounds)
  --faults N       kill -9 failovers timed (default $faults)
  --max-rate R     the rate asked in the saturation run (default $max_rate)
  --out FILE       also write the tables (markdown) to FILE
  --keep           keep the temp dir (logs)
EOF
}
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift ;;
    --duration) dur=$2; shift ;;
    --faults) faults=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --max-rate) max_rate=$2; shift ;;
    --out) out=$2; shift ;;
    --keep) export RS_KEEP_TMP=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_ha: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
die() { echo "bench_ha: $*" >&2; exit 1; }

build=$(cd "$build" 2>/dev/null && pwd) || die "no build dir $build"
wsload=$build/tests/bench/wsload
if [ ! -x "$build/hub/rshub" ] || [ ! -x "$wsload" ]; then
    die "no $build/hub/rshub or $wsload; build them first:
  cmake -S $src -B $build -DCMAKE_BUILD_TYPE=Release -DRS_BENCH=ON
  cmake --build $build -j2 --target rshub wsload"
fi
grep -q 'CMAKE_BUILD_TYPE:STRING=Release' "$build/CMakeCache.txt" 2>/dev/null ||
    echo "bench_ha: $build is not a Release build: the figures are not comparable" >&2

export RS_BUILD_DIR=$build RS_SOURCE_DIR=$src
LIB=$src/tests/integration/lib
# shellcheck source-path=SCRIPTDIR/../integration/lib
# shellcheck source=../integration/lib/common.sh
. "$LIB/common.sh"
# shellcheck source=../integration/lib/source.sh
. "$LIB/source.sh"
# shellcheck source=../integration/lib/ha.sh
. "$LIB/ha.sh"
hat() { "$PY" "$LIB/ha_tool.py" "$@"; }

TOPIC=http://bench.example.org/dataset1/changelist.xml
printf '[topic bench]\nuri = %s\n' "$TOPIC" >"$TMP/hub.conf"

ha_start 1 || die "the Redis set does not start"
echo "== Redis: primary $(ha_primary), 1 replica, Sentinels $(ha_url)" >&2

# wsrun KEY RATE CONNS: wsload publishing only, RESULT fields in R[KEY.*]
declare -A R
wsrun() {
    local key=$1 rate=$2 conns=$3 line kv
    "$wsload" --target rshub --http "127.0.0.1:${HUB_HTTP[H]}" --channel bench \
        --topic "$TOPIC" --subs 0 --rate "$rate" --duration "$dur" \
        --pub-conns "$conns" --label "$key" >"$TMP/$key.out" 2>"$TMP/$key.err"
    line=$(grep '^RESULT ' "$TMP/$key.out") || die "wsload $key: no RESULT (see $TMP)"
    for kv in $line; do
        case $kv in *=*) R[$key.${kv%%=*}]=${kv#*=} ;; esac
    done
    echo "   $key: accepted ${R[$key.accepted_ps]}/s of $rate asked," \
        "p50 ${R[$key.ack_p50_ms]} ms, p99 ${R[$key.ack_p99_ms]} ms," \
        "refused ${R[$key.refused]}" >&2
}

# the modes take turns (0 1 0 1 ...): a drift of the shared machine's load
# falls on both
for ((j = 1; j <= rounds; j++)); do
    for n in 0 1; do
        hub_start H --config "$TMP/hub.conf" --redis "$(ha_url)" --ack-replicas "$n" \
            --log-level warn || die "rshub --ack-replicas $n does not start"
        echo "== round $j, rshub --ack-replicas $n" >&2
        wsrun "paced-$n-$j" 200 8
        wsrun "max-$n-$j" "$max_rate" 32
        hub_stop H
    done
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for k in paced max; do
    for n in 0 1; do
        for f in ack_p50_ms ack_p99_ms accepted_ps refused; do
            vals=()
            for ((j = 1; j <= rounds; j++)); do vals+=("${R[$k-$n-$j.$f]}"); done
            R[$k-$n.$f]=$(median "${vals[@]}")
            R[$k-$n.$f.all]="${vals[*]}"
        done
    done
done

# ---------------------------------------------------- kill -9 to first 202
ha_add_replica r2 || die "a second replica does not join"
hub_start H --config "$TMP/hub.conf" --redis "$(ha_url)" --ack-replicas 1 \
    --log-level warn || die "rshub does not start"
echo "== kill -9 of the primary, $faults times, rshub --ack-replicas 1, 2 replicas" >&2
RES=()
for ((i = 1; i <= faults; i++)); do
    rm -f "$TMP/pub.stop"
    bg pub "$PY" "$LIB/ha_tool.py" publish --http "${HUB_HTTP[H]}" --topic "$TOPIC" \
        --rate 200 --conns 8 --stop "$TMP/pub.stop" --out "$TMP/pub$i.jsonl"
    sleep 3
    ha_kill9_primary || die "no primary to kill"
    ha_wait_failover 30 || die "no failover within 30 s"
    wait_until 30 hat acked-after --log "$TMP/pub$i.jsonl" --t "$HA_FAULT_T" >/dev/null
    sleep 3
    : >"$TMP/pub.stop"
    bg_wait pub 30 || die "the publisher does not stop"
    hat report --log "$TMP/pub$i.jsonl" --acked "$TMP/acked$i" \
        --fault "$HA_FAULT_T" --json "$TMP/r$i.json" >"$TMP/r$i.out" 2>&1 ||
        { cat "$TMP/r$i.out" >&2; die "fault $i: publishing did not resume"; }
    RES+=("$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["resume_s"][0])' "$TMP/r$i.json")")
    echo "   fault $i: $HA_OLD killed, $HA_NEW promoted; Sentinel saw it after" \
        "$(awk -v a="$HA_FAILOVER_T" -v b="$HA_FAULT_T" 'BEGIN { printf "%.2f", a - b }') s," \
        "first new 202 after ${RES[-1]} s" >&2
    ha_restart "$HA_OLD" || die "the old primary does not come back as a replica"
    wait_until 30 ha_sentinels_see 2 >/dev/null || die "the Sentinels do not settle"
done
hub_stop H

# ------------------------------------------------------------------ tables
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "-"; else printf "%.2f", a / b }'
}
table() {
    echo "| publish, median of $rounds | --ack-replicas 0 | --ack-replicas 1 | 1 : 0 | each run (0; 1) |"
    echo "|---|---|---|---|---|"
    local k f
    for k in paced max; do
        for f in ack_p50_ms ack_p99_ms; do
            echo "| $k: $f | ${R[$k-0.$f]} | ${R[$k-1.$f]} | $(ratio "${R[$k-1.$f]}" "${R[$k-0.$f]}") | ${R[$k-0.$f.all]}; ${R[$k-1.$f.all]} |"
        done
        echo "| $k: accepted/s (asked $([ $k = paced ] && echo 200 || echo "$max_rate")) | ${R[$k-0.accepted_ps]} | ${R[$k-1.accepted_ps]} | $(ratio "${R[$k-1.accepted_ps]}" "${R[$k-0.accepted_ps]}") | ${R[$k-0.accepted_ps.all]}; ${R[$k-1.accepted_ps.all]} |"
        echo "| $k: refused | ${R[$k-0.refused]} | ${R[$k-1.refused]} | | ${R[$k-0.refused.all]}; ${R[$k-1.refused.all]} |"
    done
    echo
    local med
    med=$(median "${RES[@]}")
    echo "| kill -9 of the primary to the first new 202 | s | / down-after-milliseconds (1 s) |"
    echo "|---|---|---|"
    for ((i = 0; i < ${#RES[@]}; i++)); do
        echo "| fault $((i + 1)) | ${RES[i]} | $(ratio "${RES[i]}" 1) |"
    done
    echo "| median of ${#RES[@]} | $med | $(ratio "$med" 1) |"
    echo
    echo "Machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the end;" \
        "Redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'); ${dur} s per publish run, $rounds rounds;" \
        "$(git -C "$src" rev-parse --short HEAD 2>/dev/null)"
}
table
[ -n "$out" ] && table >"$out"
finish
