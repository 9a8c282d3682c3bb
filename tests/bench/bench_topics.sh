#!/usr/bin/env bash
# bench_topics.sh - what a hub holding many topics costs (docs/benchmarks.md,
# "Many topics"): a bridge of 10,000 Sources is 10,000 topics on one hub,
# and --max-topics allows 100,000. For each topic count: rshub started with
# that many configured topics (the time until it is ready), then publishes
# at a fixed rate to the topic configured last, with no subscribers (the
# accepted publishes/s and rshub's CPU per 1,000 of them). Two builds, A and
# B, in alternating rounds, each with a redis-server of its own; prints the
# medians with B/A. Builds nothing; starts its own processes on loopback in
# a private temp dir and stops only those, by PID.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build-rel
rshub_b=""
counts="100 10000 100000"
rate=5000
dur=8
rounds=2
ready_max=300

usage() {
    cat <<EOF
Usage: $0 [OPTION]...
A hub with many topics: start-up time, and publishes to the last topic.
  --build DIR        build dir with hub/rshub and tests/bench/wsload (default $build)
  --rshub-b BIN      a second rshub binary, B (default: A again)
  --counts LIST      topic counts (default "$counts")
  --rate R           publishes/s asked (default $rate)
  --seconds S        publishing time per count (default $dur)
  --rounds N         rounds, A and B alternating (default $rounds)
  --ready-max S      longest wait for a hub to be ready (default $ready_max);
                     one that is not is shown with S and not published to
EOF
}

while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift ;;
    --rshub-b) rshub_b=$2; shift ;;
    --counts) counts=$2; shift ;;
    --rate) rate=$2; shift ;;
    --seconds) dur=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --ready-max) ready_max=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
    shift
done

rshub=$build/hub/rshub
wsload=$build/tests/bench/wsload
[ -n "$rshub_b" ] || rshub_b=$rshub
for b in "$rshub" "$rshub_b" "$wsload"; do
    [ -x "$b" ] || { echo "bench_topics: no $b (build it first)" >&2; exit 2; }
done
# shellcheck source=tests/bench/lib_ab.sh
. "$here/lib_ab.sh"

tmp=$(mktemp -d /tmp/rs-bench-topics.XXXXXX)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
die() { echo "bench_topics: $*" >&2; exit 1; }

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# One run: TAG BIN COUNT -> a line "TAG COUNT ready_s accepted_ps cpu_ms_per_1k"
run_one() {
    local tag=$1 bin=$2 n=$3 port rpid hpid t0 t1 i ready hp c0 c1 res acc
    local d=$tmp/$tag-$n
    rm -rf "$d"     # the last round's ready file would say ready at once
    mkdir -p "$d"
    awk -v n="$n" 'BEGIN {
        for (i = 1; i <= n; i++)
            printf "[topic t%d]\nuri = http://bench.example.org/s%d/changelist.xml\n", i, i }' \
        > "$d/hub.conf"
    port=$(free_port)
    redis-server --port "$port" --bind 127.0.0.1 --dir "$d" --save '' \
        --appendonly no --daemonize no --logfile "$d/redis.log" &
    rpid=$!
    pids+=("$rpid")
    for ((i = 0; i < 100; i++)); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    t0=$(date +%s.%N)
    "$bin" -c "$d/hub.conf" -l 127.0.0.1:0 -w 127.0.0.1:0 \
        -r "redis://127.0.0.1:$port" --log-level warn --max-topics "$((n + 10))" \
        --log-file "$d/hub.log" --ready-file "$d/ready" &
    hpid=$!
    pids+=("$hpid")
    for ((i = 0; i < ready_max * 20; i++)); do
        [ -s "$d/ready" ] && break
        kill -0 "$hpid" 2>/dev/null || die "$tag rshub exited (see $d/hub.log)"
        sleep 0.05
    done
    if [ ! -s "$d/ready" ]; then
        echo "$tag $n $ready_max 0 0"
        kill "$hpid" "$rpid" 2>/dev/null || true
        wait "$hpid" "$rpid" 2>/dev/null || true
        return 0
    fi
    t1=$(date +%s.%N)
    ready=$(cat "$d/ready")
    hp=$(sed 's/.*"http":\([0-9]*\).*/\1/' <<<"$ready")
    c0=$(ticks "$hpid")
    "$wsload" --target rshub --http "127.0.0.1:$hp" --channel "t$n" \
        --topic "http://bench.example.org/s$n/changelist.xml" --rate "$rate" \
        --duration "$dur" --drain 5 --pub-conns 16 --label "$tag-$n" \
        > "$d/wsload.out" 2> "$d/wsload.err" || true
    c1=$(ticks "$hpid")
    res=$(grep '^RESULT ' "$d/wsload.out" | tail -1) || die "no wsload result (see $d)"
    acc=$(sed 's/.* accepted=\([0-9]*\) .*/\1/' <<<"$res")
    awk -v tag="$tag" -v n="$n" -v r="$t1" -v s="$t0" -v res="$res" \
        -v acc="$acc" -v c="$((c1 - c0))" -v hz="$hz" 'BEGIN {
        split(res, kv, " "); ps = 0
        for (i in kv) if (kv[i] ~ /^accepted_ps=/) { sub(/.*=/, "", kv[i]); ps = kv[i] }
        printf "%s %d %.3f %.0f %.3f\n", tag, n, r - s, ps,
               (acc > 0 ? 1000 * (c / hz) * 1000 / acc : 0) }'
    kill "$hpid" "$rpid" 2>/dev/null || true
    wait "$hpid" "$rpid" 2>/dev/null || true
}

echo "bench_topics: A=$rshub B=$rshub_b counts=\"$counts\" rate=$rate/s ${dur}s rounds=$rounds" >&2
for ((r = 1; r <= rounds; r++)); do
    for n in $counts; do
        for tag in a b; do
            bin=$rshub
            [ "$tag" = b ] && bin=$rshub_b
            run_one "$tag" "$bin" "$n" > "$tmp/line"
            line=$(cat "$tmp/line")
            echo "   round $r: $line" >&2
            echo "$line" >> "$tmp/rounds.$n"
        done
    done
done

echo
echo "Topics configured, then $rate publishes/s for $dur s to the last one, no subscribers; medians of $rounds rounds (a hub not ready in $ready_max s shows $ready_max, and 0 for the rest)."
echo
for n in $counts; do
    # columns after TAG: count(2) ready(3) accepted_ps(4) cpu(5)
    ab_table "$tmp/rounds.$n" "$n topics" A B 3 \
        "ready after start, s" "publishes accepted/s" "rshub CPU ms per 1,000 publishes"
    echo
done
