#!/usr/bin/env bash
# bench_restart.sh - how long a restarted rssource is not a Source: two
# builds side by side (docs/benchmarks.md, "A restart serves at once").
# Each build gets its own state over one tree (its baseline first, on its
# own port, so that its Resource List stays its own); then, in alternating
# rounds, a few files change while it is stopped and it is started again:
# the time to its ready-file, to the first GET answered and to the end of
# its start-up scan (`msg="start-up scan"` in its log). Prints each round
# and the medians, with the ratio B/A. Starts only its own processes, on
# loopback, in a private temp dir, and stops them by PID.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build_a=""
build_b=$root/build-rel
files=200000
size=256
rounds=5
tmpdir=/dev/shm
keep=0

usage() {
    cat <<EOF
Usage: $0 --build-a DIR [OPTION]...
  --build-a DIR    the build to compare against (source/rssource; Release)
  --build-b DIR    the build measured (default $build_b)
  --files N        files in the tree, 500 a directory (default $files)
  --size BYTES     bytes per file (default $size)
  --rounds N       restarts of each build, alternating (default $rounds)
  --tmp DIR        where the tree and the states go (default $tmpdir, a tmpfs)
  --keep           keep the temp dir
EOF
}

while [ $# -gt 0 ]; do
    case $1 in
    --build-a) build_a=$2; shift ;;
    --build-b) build_b=$2; shift ;;
    --files) files=$2; shift ;;
    --size) size=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --tmp) tmpdir=$2; shift ;;
    --keep) keep=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_restart: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

die() { echo "bench_restart: $*" >&2; exit 1; }
[ -n "$build_a" ] || { usage >&2; exit 2; }
for b in "$build_a" "$build_b"; do
    [ -x "$b/source/rssource" ] || die "no $b/source/rssource"
done
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy

TMP=$(mktemp -d "$tmpdir/rssource-restart.XXXXXX")
PID=
cleanup() {
    if [ -n "$PID" ]; then
        kill -TERM "$PID" 2>/dev/null || true
        wait "$PID" 2>/dev/null || true
    fi
    if [ "$keep" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

now() { date +%s.%N; }
free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start TAG: rssource of build TAG (a or b) on its port; sets PID, waits
# for the ready-file
start() {
    local tag=$1 bin log=$TMP/$1.log
    bin=$build_a/source/rssource
    [ "$tag" = b ] && bin=$build_b/source/rssource
    rm -f "$TMP/$tag.ready"
    : >"$log"
    "$bin" --dir "$TMP/tree" --state "$TMP/$tag.state" \
        --listen "127.0.0.1:${PORT[$tag]}" --ready-file "$TMP/$tag.ready" \
        --log-format logfmt >"$log" 2>&1 &
    PID=$!
    until [ -s "$TMP/$tag.ready" ]; do
        kill -0 "$PID" 2>/dev/null || die "rssource $tag exited: $(tail -n 5 "$log")"
        sleep 0.002
    done
}
stop() {
    kill -TERM "$PID"
    wait "$PID" || die "rssource exited with $?"
    PID=
}

echo "== a tree of $files files of $size bytes in $TMP"
/usr/bin/python3 - "$TMP/tree" "$files" "$size" <<'EOF'
import os, sys
root, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    d = "%s/d%04d" % (root, i // 500)
    if i % 500 == 0:
        os.makedirs(d)
    with open("%s/f%03d.txt" % (d, i % 500), "w") as f:
        f.write(("%d " % i).ljust(size, "x"))
EOF
ndirs=$(( (files + 499) / 500 ))

declare -A PORT=([a]=$(free_port) [b]=$(free_port))
for tag in a b; do
    start "$tag"
    stop
done
echo "== baselines made; $rounds restarts each, alternating"

: >"$TMP/rounds"
for r in $(seq 1 "$rounds"); do
    for tag in a b; do
        # five files change while it is stopped
        for i in 1 2 3 4 5; do
            printf '%s %s %s\n' "$tag" "$r" "$i" \
                >"$TMP/tree/d$(printf %04d $(( (r * 7 + i * 13) % ndirs )))/f00$i.txt"
        done
        t0=$(now)
        start "$tag"
        t1=$(now)
        curl -sf -o /dev/null "http://127.0.0.1:${PORT[$tag]}/d0000/f001.txt" ||
            die "GET failed ($tag)"
        t2=$(now)
        until grep -q 'msg="start-up scan"' "$TMP/$tag.log"; do
            kill -0 "$PID" 2>/dev/null || die "rssource $tag exited"
            sleep 0.002
        done
        t3=$(now)
        stop
        read -r rd gt sc < <(awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" \
            'BEGIN { printf "%.3f %.3f %.3f\n", b - a, c - a, d - a }')
        printf '   round %d %s: ready %s s, first GET answered %s s, start-up scan ended %s s\n' \
            "$r" "$tag" "$rd" "$gt" "$sc"
        echo "$tag $rd $gt $sc" >>"$TMP/rounds"
    done
done

echo
# shellcheck source=lib_ab.sh
. "$here/lib_ab.sh"
ab_table "$TMP/rounds" "median of $rounds restarts, $files files" \
    "$build_a" "$build_b" 2 "ready-file written, s" "first GET answered, s" \
    "start-up scan ended, s"
