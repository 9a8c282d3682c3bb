#!/usr/bin/env bash
# bench_source.sh - rssource's figures for docs/benchmarks.md ("Source
# (rssource)"): start-up over a tree of N files, cold (no state: every file
# is read and hashed) then warm (the hash cache: nothing is read), time to
# ready and peak RSS; Resource List generation (a rebuild of the whole
# snapshot) and serving rates (Resource List parts and small resources);
# change-to-notification latency at a steady rate of changes, through a
# real rshub to a WebSocket subscriber. Starts its own redis-server, rshub
# and rssource on loopback in a temp dir; stops only what it started.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build-bench
files=100000
size=2048
rate=100
changes=3000
serve_secs=10
out=""
keep=0
resync=${RS_RESYNC_DIR:-}

usage() {
    cat <<EOF
Usage: $0 [OPTION]...
  --build DIR      build dir with source/rssource and hub/rshub (Release;
                   default $build)
  --files N        files in the tree (default $files)
  --size BYTES     bytes per file (default $size)
  --rate R         changes per second in the latency run (default $rate)
  --changes N      changes in the latency run (default $changes)
  --serve-secs S   seconds per serving-rate run (default $serve_secs)
  --quick          10,000 files, 500 changes, 3 s serving runs
  --resync DIR     also time resync-build (github.com/resync/resync) writing
                   a Resource List with md5 and sha-256 of the same tree
                   (default \$RS_RESYNC_DIR; none: skipped)
  --out FILE       also write the table (markdown) to FILE
  --keep           keep the temp dir
EOF
}

while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift ;;
    --files) files=$2; shift ;;
    --size) size=$2; shift ;;
    --rate) rate=$2; shift ;;
    --changes) changes=$2; shift ;;
    --serve-secs) serve_secs=$2; shift ;;
    --quick) files=10000; changes=500; serve_secs=3 ;;
    --out) out=$2; shift ;;
    --resync) resync=$2; shift ;;
    --keep) keep=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_source: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

die() { echo "bench_source: $*" >&2; exit 1; }
PY=/usr/bin/python3
rssource=$build/source/rssource
rshub=$build/hub/rshub
[ -x "$rssource" ] && [ -x "$rshub" ] ||
    die "no rssource/rshub in $build (cmake -DCMAKE_BUILD_TYPE=Release -B $build)"
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy

TMP=$(mktemp -d "${TMPDIR:-/tmp}/rssource-bench.XXXXXX")
declare -a PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in "${PIDS[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    if [ "$keep" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

getter=$build/tests/bench/bench_source_get
if [ ! -x "$getter" ]; then
    getter=$TMP/bench_source_get
    cc -O2 -pthread -o "$getter" "$here/bench_source_get.c" ||
        die "cannot build bench_source_get"
fi

now() { date +%s.%N; }
elapsed() { echo "$1 $2" | awk '{printf "%.2f", $2 - $1}'; }
# kv FILE MSG KEY: KEY's value on the last log line with msg="MSG"
kv() { grep "msg=\"$2\"" "$1" | tail -n1 | sed -n "s/.* $3=\\([^ ]*\\).*/\\1/p"; }
hwm_mb() { awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

SRC_PID=
src_start() {   # src_start LOG ARGS...: start, wait for ready; sets SRC_PID, PORT
    local log=$1
    shift
    rm -f "$TMP/ready"
    "$rssource" --dir "$TMP/data" --state "$TMP/state" --ready-file "$TMP/ready" \
        --log-format logfmt "$@" >>"$log" 2>&1 &
    SRC_PID=$!
    PIDS+=("$SRC_PID")
    local i=0
    while [ ! -s "$TMP/ready" ]; do
        kill -0 "$SRC_PID" 2>/dev/null || die "rssource exited: $(tail -n 5 "$log")"
        sleep 0.01
        i=$((i + 1))
        [ "$i" -lt 60000 ] || die "rssource not ready in 600 s"
    done
    PORT=$(sed -n 's/.*"http":\([0-9]*\).*/\1/p' "$TMP/ready")
}
src_stop() {
    kill -TERM "$SRC_PID" 2>/dev/null || true
    wait "$SRC_PID" 2>/dev/null || true
}

echo "== generating $files files of $size bytes"
mkdir -p "$TMP/data"
"$PY" "$here/bench_source.py" gen "$TMP/data" "$files" "$size"
du -sh "$TMP/data" | awk '{print "   tree: " $1}'

echo "== start-up, cold (no state: every file read and hashed)"
t0=$(now)
src_start "$TMP/cold.log" --listen 127.0.0.1:0 --resourcelist-refresh 0
t1=$(now)
cold_s=$(elapsed "$t0" "$t1")
cold_rss=$(hwm_mb "$SRC_PID")
cold_scan=$(kv "$TMP/cold.log" "baseline scan" seconds)
cold_hashed=$(kv "$TMP/cold.log" "baseline scan" hashed)
cold_rl=$(kv "$TMP/cold.log" "Resource List published" seconds)
src_stop
echo "   ready in $cold_s s (scan $cold_scan s, $cold_hashed files hashed; Resource List $cold_rl s), peak RSS $cold_rss MB"

peer_row=""
if [ -n "$resync" ]; then
    echo "== peer: resync-build --write-resourcelist --hash md5 --hash sha-256"
    t0=$(now)
    /usr/bin/time -f '%M' -o "$TMP/resync.rss" "$PY" "$resync/resync-build" \
        --write-resourcelist --hash md5 --hash sha-256 \
        --max-sitemap-entries $((files + 1)) --outfile "$TMP/resync-rl.xml" \
        "http://127.0.0.1:1/=$TMP/data" >"$TMP/resync.log" 2>&1 ||
        die "resync-build failed: $(tail -n 3 "$TMP/resync.log")"
    t1=$(now)
    peer_s=$(elapsed "$t0" "$t1")
    peer_rss=$(awk '{printf "%.0f", $1 / 1024}' "$TMP/resync.rss")
    ratio=$(echo "$peer_s $cold_s" | awk '{printf "%.1f", $1 / $2}')
    echo "   $peer_s s, peak RSS $peer_rss MB: rssource's cold start is ${ratio}x faster"
    peer_row="| peer: resync-build, same tree (scan, md5 + sha-256, one Resource List file) | $peer_s s; peak RSS $peer_rss MB (rssource cold start: ${ratio}x faster) |"
fi

echo "== start-up, warm (same tree, hash cache)"
t0=$(now)
# the same port, so the same base URL: the Resource List is still current
src_start "$TMP/warm.log" --listen "127.0.0.1:$PORT" --resourcelist-refresh 0
t1=$(now)
# serving, then the start-up rescan in steps: wait for its end
until grep -q 'msg="start-up scan"' "$TMP/warm.log"; do
    kill -0 "$SRC_PID" 2>/dev/null || die "rssource exited: $(tail -n 5 "$TMP/warm.log")"
    sleep 0.01
done
t2=$(now)
warm_s=$(elapsed "$t0" "$t1")
warm_all=$(elapsed "$t0" "$t2")
warm_rss=$(hwm_mb "$SRC_PID")
warm_scan=$(kv "$TMP/warm.log" "start-up scan" seconds)
warm_hashed=$(kv "$TMP/warm.log" "start-up scan" hashed)
grep -q 'msg="Resource List published"' "$TMP/warm.log" &&
    echo "   (the warm start rebuilt the Resource List: the port changed?)"
echo "   serving in $warm_s s; its start-up rescan, serving meanwhile, done at $warm_all s (scan $warm_scan s, $warm_hashed files hashed), peak RSS $warm_rss MB"

echo "== Resource List generation (rebuild on request after a change)"
gen_times=()
for i in 1 2 3; do
    printf 'change %s\n' "$i" >"$TMP/data/d000/f000000.txt"
    sleep 0.3
    t0=$(now)
    curl -sf -o /dev/null "http://127.0.0.1:$PORT/resourcesync/resourcelist.xml" ||
        die "resourcelist.xml failed"
    t1=$(now)
    gen_times+=("$(elapsed "$t0" "$t1")")
done
gen_s=$(printf '%s\n' "${gen_times[@]}" | sort -n | sed -n 2p)
gen_rate=$(echo "$files $gen_s" | awk '{printf "%.0f", $1 / $2}')
gen_build=$(grep 'msg="Resource List published"' "$TMP/warm.log" |
            sed -n 's/.* seconds=\([^ ]*\).*/\1/p' | sort -n | sed -n 2p)
echo "   $gen_s s for $files entries, request to last byte (median of 3): $gen_rate entries/s; the build alone $gen_build s"

echo "== serving"
curl -sf "http://127.0.0.1:$PORT/resourcesync/resourcelist.xml" -o "$TMP/top.xml"
if grep -q '<sitemapindex' "$TMP/top.xml"; then
    sed -n 's:.*<loc>http\://[^/]*\(/[^<]*\)</loc>.*:\1:p' "$TMP/top.xml" >"$TMP/parts.txt"
else
    echo /resourcesync/resourcelist.xml >"$TMP/parts.txt"
fi
part_bytes=$(curl -sf "http://127.0.0.1:$PORT$(head -n1 "$TMP/parts.txt")" | wc -c)
rl=$("$getter" 127.0.0.1 "$PORT" 4 "$serve_secs" "$TMP/parts.txt")
echo "   Resource List parts ($part_bytes bytes each), 4 connections: $rl"
find "$TMP/data" -name 'f*.txt' | awk 'NR <= 10000' | sed "s:^$TMP/data::" >"$TMP/res.txt"
res=$("$getter" 127.0.0.1 "$PORT" 16 "$serve_secs" "$TMP/res.txt")
echo "   resources ($size bytes), 16 connections: $res"
src_stop

echo "== change -> notification latency at $rate changes/s"
mkdir -p "$TMP/redis"
redis-server --port 0 --unixsocket "$TMP/redis/s.sock" --save "" \
    --appendonly no --daemonize no --logfile "$TMP/redis/log" >/dev/null 2>&1 &
PIDS+=("$!")
for _ in $(seq 50); do
    [ "$(redis-cli -s "$TMP/redis/s.sock" ping 2>/dev/null)" = PONG ] && break
    sleep 0.1
done
"$rshub" --listen 127.0.0.1:0 --redis "unix://$TMP/redis/s.sock" --open \
    --ready-file "$TMP/hub.ready" >"$TMP/hub.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 100); do [ -s "$TMP/hub.ready" ] && break; sleep 0.1; done
HUB_HTTP=$(sed -n 's/.*"http":\([0-9]*\).*/\1/p' "$TMP/hub.ready")
HUB_WS=$(sed -n 's/.*"ws":\([0-9]*\).*/\1/p' "$TMP/hub.ready")
src_start "$TMP/push.log" --listen 127.0.0.1:0 \
    --hub "http://127.0.0.1:$HUB_HTTP/hub"
base="http://127.0.0.1:$PORT/"
printf 'hello hub\n' >"$TMP/data/hello.txt"
chan=""
for _ in $(seq 100); do
    chan=$(curl -sf "${base}resourcesync/capabilitylist.xml" | "$PY" -c '
import sys, xml.etree.ElementTree as ET
S = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
R = "{http://www.openarchives.org/rs/terms/}"
for u in ET.parse(sys.stdin).getroot().findall(S + "url"):
    loc = u.findtext(S + "loc")
    if (loc.startswith("ws") and
            u.find(R + "md").get("capability") == "change-notification"):
        print(loc.split("/channel/")[1])' 2>/dev/null || true)
    [ -n "$chan" ] && break
    sleep 0.1
done
[ -n "$chan" ] || die "no WebSocket channel advertised"
lat=$("$PY" "$here/bench_source.py" latency --ws "$HUB_WS" --chan "$chan" \
      --dir "$TMP/data" --base "$base" --rate "$rate" --count "$changes")
src_stop
int_p50=$(kv "$TMP/push.log" "push latency (change detected to hub accepted)" p50_ms)
int_p99=$(kv "$TMP/push.log" "push latency (change detected to hub accepted)" p99_ms)
echo "   close -> WebSocket subscriber: $lat"
echo "   change detected -> hub 202 (rssource's own count): p50 $int_p50 ms, p99 $int_p99 ms"

jget() { echo "$lat" | "$PY" -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
kvget() { echo "$1" | sed -n "s/.*$2=\\([^ ]*\\).*/\\1/p"; }
table=$(cat <<EOF
| measure | figure |
|---|---|
| tree | $files files of $size bytes |
| start-up, cold (hash every file) | $cold_s s to ready (scan $cold_scan s, $cold_hashed files hashed; first Resource List $cold_rl s); peak RSS $cold_rss MB |
| start-up, warm (hash cache) | serving in $warm_s s; the start-up rescan done at $warm_all s (scan $warm_scan s, $warm_hashed files hashed); peak RSS $warm_rss MB |
$peer_row
| Resource List generation | $gen_s s for $files entries ($gen_rate entries/s), request to last byte; the build alone $gen_build s |
| serving Resource List parts ($part_bytes bytes), 4 conns | $(kvget "$rl" req_per_s) documents/s, $(kvget "$rl" mb_per_s) MB/s |
| serving resources ($size bytes), 16 conns | $(kvget "$res" req_per_s) requests/s, $(kvget "$res" mb_per_s) MB/s |
| latency at $rate changes/s, close -> WebSocket subscriber | p50 $(jget p50_ms) ms, p99 $(jget p99_ms) ms, max $(jget max_ms) ms ($(jget received)/$changes received) |
| latency, change detected -> hub accepted (202) | p50 $int_p50 ms, p99 $int_p99 ms |
EOF
)
table=$(printf '%s\n' "$table" | sed '/^$/d')
echo
echo "$table"
[ -z "$out" ] || echo "$table" >"$out"
