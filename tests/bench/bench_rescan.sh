#!/usr/bin/env bash
# bench_rescan.sh - what a whole-tree rescan costs the GETs rssource serves
# meanwhile, two builds in turn in one run (docs/benchmarks.md, "Rescans
# in steps"). A tree of N small files (default 200,000 in 400
# directories, on tmpfs); each build's rssource serves it with
# --rescan-interval I (default 10s: a build before a30fa0a looked at the
# interval on its 10 s tick, so both rescan as often); once its start-up
# scan is done, a client GETs one
# file over a keep-alive connection every 2 ms for S seconds and records
# each wait. Prints, per build and round, the GETs, their wait p50 / p99 /
# max, and the rescans begun in the window; then the ratios after/before.
# A build whose rescan holds the loop shows it in the max wait: the GET
# waits as long as the walk takes.
# Starts rssource (one at a time) and its client; stops them by PID.
set -euo pipefail

before=""
after=""
files=200000
secs=30
interval=10s
after_args=""
rounds=1
root=/dev/shm
keep=0

usage() {
    cat <<EOF
Usage: $0 --before BUILD_DIR --after BUILD_DIR [OPTION]...
  --before DIR    Release build dir (source/rssource) of the "before" tree
  --after DIR     the same of the "after" tree
  --files N       files in the tree (default $files)
  --seconds S     GET window per build (default $secs)
  --interval D    --rescan-interval of both (default $interval)
  --after-args A  more rssource options for the "after" build (such as
                  "--rescan-step 250")
  --rounds R      before, after; then after, before; ... (default $rounds)
  --root DIR      where the tree and the states go (default $root)
  --keep          keep the temp dir
EOF
}

while [ $# -gt 0 ]; do
    case $1 in
    --before) before=$2; shift ;;
    --after) after=$2; shift ;;
    --files) files=$2; shift ;;
    --seconds) secs=$2; shift ;;
    --interval) interval=$2; shift ;;
    --after-args) after_args=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --root) root=$2; shift ;;
    --keep) keep=1 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
    shift
done
if [ -z "$before" ] || [ -z "$after" ]; then usage >&2; exit 2; fi
for b in "$before" "$after"; do
    [ -x "$b/source/rssource" ] || { echo "no $b/source/rssource" >&2; exit 2; }
done

tmp=$(mktemp -d "$root/bench-rescan.XXXXXX")
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    if [ "$keep" = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

echo "tree: $files files in $tmp/tree"
python3 - "$tmp/tree" "$files" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
per = 500
for i in range(n):
    d = "%s/d%04d" % (root, i // per)
    if i % per == 0:
        os.makedirs(d)
    with open("%s/f%03d" % (d, i % per), "w") as f:
        f.write("file %d\n" % i)
EOF

# run LABEL BUILD: one build's figures as "LABEL gets p50 p99 max rescans"
run() {
    local label=$1 build=$2 st=$tmp/state-$1 log=$tmp/$1.log ready=$tmp/$1.ready
    local more=()
    [ "$label" = after ] && read -r -a more <<<"$after_args"
    rm -rf "$st" "$ready"
    "$build/source/rssource" "${more[@]}" --dir "$tmp/tree" --state "$st" \
        --listen 127.0.0.1:0 --ready-file "$ready" --log-format logfmt \
        --rescan-interval "$interval" --resourcelist-refresh 0 >"$log" 2>&1 &
    pid=$!
    local i=0
    while [ ! -s "$ready" ] && [ $i -lt 6000 ]; do sleep 0.1; i=$((i + 1)); done
    [ -s "$ready" ] || { echo "$label: no ready-file" >&2; tail "$log" >&2; exit 1; }
    local port
    port=$(sed -n 's/.*"http":\([0-9]*\).*/\1/p' "$ready")
    local n0
    n0=$(grep -c 'rescanning the whole tree' "$log" || true)
    python3 - "$port" "$secs" "$label" <<'EOF'
import http.client, sys, time
port, secs, label = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
waits, end = [], time.monotonic() + secs
while time.monotonic() < end:
    t = time.monotonic()
    c.request("GET", "/d0000/f000")
    r = c.getresponse()
    r.read()
    waits.append((time.monotonic() - t) * 1000)
    time.sleep(0.002)
waits.sort()
q = lambda p: waits[min(len(waits) - 1, int(p * len(waits)))]
print("%s %d %.2f %.2f %.1f" % (label, len(waits), q(0.5), q(0.99), waits[-1]),
      end="")
EOF
    local n1 took
    n1=$(grep -c 'rescanning the whole tree' "$log" || true)
    # the rescans' seconds, where the build logs them (a30fa0a on)
    took=$(sed -n 's/.*msg="rescan done" seconds=\([0-9.]*\).*/\1/p' "$log" |
           sort -n | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : "-" }')
    echo " $((n1 - n0)) $took"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=""
}

results=$tmp/results
: >"$results"
for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) = 1 ]; then order="before after"; else order="after before"; fi
    for w in $order; do
        b=$before
        [ "$w" = after ] && b=$after
        run "$w" "$b" | tee -a "$results"
    done
done

python3 - "$results" "$files" "$secs" "$interval" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
print()
print("Rescans in steps: GET waits while rssource rescans %s files "
      "(--rescan-interval %s), %s s per build" % (sys.argv[2], sys.argv[4], sys.argv[3]))
print("| build | GETs | p50 ms | p99 ms | max ms | rescans begun | rescan s (median) |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    print("| %s | %s | %s | %s | %s | %s | %s |" % tuple(r))
def med(label, k):
    v = [float(r[k]) for r in rows if r[0] == label]
    return statistics.median(v)
for k, name in ((2, "p50"), (3, "p99"), (4, "max")):
    b, a = med("before", k), med("after", k)
    print("%s wait: before %.2f ms, after %.2f ms, after/before %.2f"
          % (name, b, a, a / b if b else float("nan")))
EOF
