#!/usr/bin/env bash
# bench_bigfile.sh - what a large file costs the other clients of rssource
# while its digests are read: two builds side by side (docs/benchmarks.md,
# "Large files' digests off the loop"). For each build in turn, each round:
# rssource over a directory of one small file, a client GETting that file
# every 5 ms, then a file of --size MiB written into the directory; it
# times every GET until the large file's change is in the Change List,
# and prints per build the longest GET wait, the p99, the GETs answered
# and the time from the file's close to its change being listed, with the
# ratios B/A. Starts only its own processes, on loopback, in a private
# temp dir, and stops them by PID.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build_a=""
build_b=$root/build-rel
size=512
rounds=3
tmpdir=/dev/shm
keep=0

usage() {
    cat <<EOF
Usage: $0 --build-a DIR [OPTION]...
  --build-a DIR    the build to compare against (source/rssource; Release)
  --build-b DIR    the build measured (default $build_b)
  --size MIB       the large file's size (default $size)
  --rounds N       rounds of each build, alternating (default $rounds)
  --tmp DIR        where the trees and states go (default $tmpdir, a tmpfs)
  --keep           keep the temp dir
EOF
}

while [ $# -gt 0 ]; do
    case $1 in
    --build-a) build_a=$2; shift ;;
    --build-b) build_b=$2; shift ;;
    --size) size=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --tmp) tmpdir=$2; shift ;;
    --keep) keep=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_bigfile: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

die() { echo "bench_bigfile: $*" >&2; exit 1; }
[ -n "$build_a" ] || { usage >&2; exit 2; }
for b in "$build_a" "$build_b"; do
    [ -x "$b/source/rssource" ] || die "no $b/source/rssource"
done
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
PY=/usr/bin/python3

TMP=$(mktemp -d "$tmpdir/rssource-bigfile.XXXXXX")
PID=
PROBE=
cleanup() {
    local p
    for p in "$PROBE" "$PID"; do
        [ -n "$p" ] || continue
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    if [ "$keep" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

# The client: GETs URL every 5 ms until STOP exists; writes each wait (s).
cat >"$TMP/probe.py" <<'EOF'
import os, sys, time, urllib.request
url, stop, out = sys.argv[1], sys.argv[2], open(sys.argv[3], "w")
while not os.path.exists(stop):
    t = time.monotonic()
    urllib.request.urlopen(url, timeout=60).read()
    out.write("%.6f\n" % (time.monotonic() - t))
    time.sleep(0.005)
EOF
# listed URL PATH: is PATH in the open Change List?
cat >"$TMP/listed.py" <<'EOF'
import sys, time, urllib.request
url, path, deadline = sys.argv[1], sys.argv[2], time.monotonic() + 300
while time.monotonic() < deadline:
    if ("/" + path + "</loc>").encode() in urllib.request.urlopen(url).read():
        sys.exit(0)
    time.sleep(0.01)
sys.exit(1)
EOF

now() { date +%s.%N; }

# one TAG ROUND: a fresh rssource of build TAG, the client, the file
one() {
    local tag=$1 r=$2 bin dir=$TMP/$1.$2 port
    bin=$build_a/source/rssource
    [ "$tag" = b ] && bin=$build_b/source/rssource
    mkdir -p "$dir/tree"
    printf 'small\n' >"$dir/tree/a.txt"
    "$bin" --dir "$dir/tree" --state "$dir/state" --listen 127.0.0.1:0 \
        --ready-file "$dir/ready" --log-format logfmt >"$dir/log" 2>&1 &
    PID=$!
    until [ -s "$dir/ready" ]; do
        kill -0 "$PID" 2>/dev/null || die "rssource $tag exited: $(tail -n 5 "$dir/log")"
        sleep 0.01
    done
    port=$(sed -n 's/.*"http":\([0-9]*\).*/\1/p' "$dir/ready")
    "$PY" "$TMP/probe.py" "http://127.0.0.1:$port/a.txt" "$dir/stop" \
        "$dir/waits" &
    PROBE=$!
    sleep 0.5
    head -c $((size * 1024 * 1024)) /dev/zero | tr '\0' 'b' >"$dir/big.tmp"
    local t0 t1
    t0=$(now)
    mv "$dir/big.tmp" "$dir/tree/big.bin"
    "$PY" "$TMP/listed.py" \
        "http://127.0.0.1:$port/resourcesync/changelist.xml" big.bin ||
        die "big.bin not listed within 300 s ($tag)"
    t1=$(now)
    touch "$dir/stop"
    wait "$PROBE"
    PROBE=
    kill -TERM "$PID"
    wait "$PID" || die "rssource $tag exited with $?"
    PID=
    sort -g "$dir/waits" | awk -v tag="$tag" -v r="$r" -v a="$t0" -v b="$t1" '
        { v[NR] = $1 }
        END { p99 = v[int(NR * 0.99) > 0 ? int(NR * 0.99) : 1]
              printf "%s %d %d %.3f %.3f %.3f\n", tag, r, NR, v[NR], p99, b - a }' \
        >>"$TMP/rounds"
    tail -n 1 "$TMP/rounds" | awk '{ printf "   round %d %s: %d GETs, longest %s s, p99 %s s; listed %s s after the rename\n", $2, $1, $3, $4, $5, $6 }'
    rm -rf "$dir"
}

echo "== a file of $size MiB into a served directory; $rounds rounds each, alternating"
: >"$TMP/rounds"
for r in $(seq 1 "$rounds"); do
    one a "$r"
    one b "$r"
done

echo
# shellcheck source=lib_ab.sh
. "$here/lib_ab.sh"
ab_table "$TMP/rounds" "median of $rounds rounds, a $size MiB file" \
    "$build_a" "$build_b" 3 "GETs answered" "longest GET wait, s" \
    "p99 GET wait, s" "change listed after the rename, s"
