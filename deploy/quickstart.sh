#!/usr/bin/env bash
# Quickstart: install, build, and run the whole system on this machine.
#
#   deploy/quickstart.sh           run until Ctrl-C, printing what to look at
#   deploy/quickstart.sh --smoke   the same, non-interactively; exit 0 when
#                                  the mirror converged to the Source, else 1
#
# In a run directory (default ./run/quickstart) it starts a private
# redis-server with persistence on, rshub with the demo's two topics and a
# publisher token, rssource serving a demo directory and pushing its
# changes to the hub, and rssub mirroring that Source into a second
# directory. Then it changes some demo files and shows each change arrive in
# the mirror with its latency. Everything it started stops when it exits.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
smoke=0
[ "${1:-}" = "--smoke" ] && smoke=1
PY=/usr/bin/python3

bash deploy/install-deps.sh
build=${RS_BUILD_DIR:-$root/build-release}
echo "== building (Release) in $build"
# shellcheck disable=SC2086  # RS_CMAKE_ARGS is a list of -D flags
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DRS_TESTS=OFF -DRS_BENCH=OFF \
      ${RS_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$(nproc)" >/dev/null

run=${RS_RUN_DIR:-$root/run/quickstart}
src=$run/demo-source
mir=$run/demo-mirror
mkdir -p "$run" "$src"
rm -f "$run"/*.ready
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_for() {   # wait_for FILE SECONDS
  for _ in $(seq 1 $(( $2 * 10 ))); do [ -S "$1" ] || [ -s "$1" ] && return 0; sleep 0.1; done
  echo "quickstart: timed out waiting for $1" >&2; return 1
}
port_of() { sed -E "s/.*\"$2\":([0-9]+).*/\\1/" "$1"; }

echo "== redis-server (appendonly, unix socket) in $run"
redis-server --port 0 --unixsocket "$run/redis.sock" --unixsocketperm 700 \
  --dir "$run" --appendonly yes --appendfsync everysec --save "" \
  --logfile "$run/redis.log" &
pids+=($!)
wait_for "$run/redis.sock" 10

# The demo's topics are fixed URIs (not the Source's own address, which is
# only known once it listens), each with the publisher's token.
change_topic=http://localhost/demo/changes
framework_topic=http://localhost/demo/framework
umask 077
[ -s "$run/publisher.token" ] ||
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$run/publisher.token"
token=$(cat "$run/publisher.token")
cat > "$run/rshub.conf" <<CONF
listen = 127.0.0.1:${RS_HUB_PORT:-0}
redis = unix://$run/redis.sock
ready-file = $run/hub.ready
log-file = $run/rshub.log

[topic demo-changes]
uri = $change_topic
kind = change
token = $token

[topic demo-framework]
uri = $framework_topic
kind = framework
token = $token
CONF
umask 022
echo "== rshub"
"$build/hub/rshub" --config "$run/rshub.conf" &
pids+=($!)
wait_for "$run/hub.ready" 10
http=$(port_of "$run/hub.ready" http)
hub="http://127.0.0.1:$http/hub"

echo "== rssource serving $src"
if [ -z "$(ls -A "$src")" ]; then
  mkdir -p "$src/papers" "$src/data"
  for i in 1 2 3; do echo "Paper $i, first version." > "$src/papers/paper$i.txt"; done
  head -c 4096 /dev/urandom > "$src/data/sample.bin"
fi
"$build/source/rssource" --dir "$src" --listen 127.0.0.1:${RS_SOURCE_PORT:-0} \
  --state "$run/source.state" --hub "$hub" --token-file "$run/publisher.token" \
  --change-topic "$change_topic" --framework-topic "$framework_topic" \
  --resourcelist-refresh 0 --settle 100ms \
  --ready-file "$run/source.ready" --log-file "$run/rssource.log" &
pids+=($!)
wait_for "$run/source.ready" 20
source_url="http://127.0.0.1:$(port_of "$run/source.ready" http)/"

# The hub learns each topic's WebSocket channel with the first publish;
# touching one file gets the Capability List its channels now.
date +%s > "$src/papers/started.txt"
sleep 0.5

echo "== rssub mirroring $source_url into $mir"
"$build/subscriber/rssub" run --source "$source_url" --mirror "$mir" \
  --state "$run/mirror.state" --metrics-listen 127.0.0.1:0 \
  --ready-file "$run/sub.ready" --log-file "$run/rssub.log" &
pids+=($!)
wait_for "$run/sub.ready" 30
metrics="http://127.0.0.1:$(port_of "$run/sub.ready" metrics)/metrics"

echo "== changing files at the Source; each arrives in the mirror:"
# change KIND PATH: make the change, then wait (10 s at most) until the
# mirror shows it, printing the latency.
change() {
  "$PY" - "$1" "$src/$2" "$mir/$2" "$2" <<'PY'
import os, sys, time
kind, s, m, name = sys.argv[1:5]
t0 = time.monotonic()
if kind == "delete":
    os.unlink(s)
else:
    os.makedirs(os.path.dirname(s), exist_ok=True)
    with open(s + ".part", "w") as f:
        f.write("%s at %s\n" % (name, time.strftime("%H:%M:%S")))
    os.rename(s + ".part", s)
want = None if kind == "delete" else open(s, "rb").read()
while time.monotonic() - t0 < 10:
    try:
        got = open(m, "rb").read()
    except FileNotFoundError:
        got = None
    if got == want:
        print("  %-7s %-24s in the mirror after %6.1f ms"
              % (kind, name, (time.monotonic() - t0) * 1000))
        sys.exit(0)
    time.sleep(0.0005)
print("  %-7s %-24s NOT in the mirror after 10 s" % (kind, name))
sys.exit(1)
PY
}
failed=0
change create papers/paper4.txt || failed=1
change update papers/paper1.txt || failed=1
change create news/today.txt || failed=1
change delete papers/paper2.txt || failed=1
change update papers/paper4.txt || failed=1

converged() { diff -r "$src" "$mir" >/dev/null 2>&1; }
for _ in $(seq 1 100); do converged && break; sleep 0.1; done
if converged; then
  echo "== the mirror equals the Source ($(find "$mir" -type f | wc -l) files)"
else
  echo "== the mirror differs from the Source:" >&2
  diff -r "$src" "$mir" >&2 || true
  failed=1
fi

if [ $smoke = 1 ]; then
  if [ $failed = 0 ]; then
    echo "quickstart --smoke: OK (rssource -> rshub -> Redis -> rssub: the mirror converged)"
    exit 0
  fi
  echo "quickstart --smoke: FAILED (logs in $run)" >&2
  exit 1
fi

cat <<MSG

Everything is running. Look at:
  ${source_url}.well-known/resourcesync   (the Source: Source Description)
  http://127.0.0.1:$http/topics             (the hub: topics, backlogs, subscribers)
  http://127.0.0.1:$http/metrics            (the hub's Prometheus metrics)
  $metrics       (rssub's metrics)
Change files in $src: they appear in $mir.
  $build/subscriber/rssub status --mirror $mir --state $run/mirror.state
  $build/subscriber/rssub audit --source $source_url --mirror $mir --state $run/mirror.state
Logs: $run/*.log. Ctrl-C stops everything.
MSG
wait
