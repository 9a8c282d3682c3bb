#!/usr/bin/env bash
# Quickstart: install, build, and run the system on this machine.
#
#   deploy/quickstart.sh           run until Ctrl-C, printing what to look at
#   deploy/quickstart.sh --smoke   the same, non-interactively; exit 0 if a
#                                  notification published went all the way
#                                  through (Redis, hub, WebSocket), else 1
#
# It starts, in a run directory (default ./run/quickstart), a private
# redis-server with persistence on, rshub with one configured topic and a
# publisher token, and a WebSocket subscriber; then validates the example
# documents with rsdoc and publishes a few change notifications with rspub,
# showing them arrive with their latency. Everything it started stops when
# it exits.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
smoke=0
[ "${1:-}" = "--smoke" ] && smoke=1

bash deploy/install-deps.sh
build=${RS_BUILD_DIR:-$root/build-release}
echo "== building (Release) in $build"
# shellcheck disable=SC2086  # RS_CMAKE_ARGS is a list of -D flags
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DRS_TESTS=OFF -DRS_BENCH=OFF \
      ${RS_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$(nproc)" >/dev/null

run=${RS_RUN_DIR:-$root/run/quickstart}
mkdir -p "$run"
rm -f "$run/ready" "$run/sub.ready" "$run"/*.pid
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

wait_for() {   # wait_for FILE SECONDS
  for _ in $(seq 1 $(( $2 * 10 ))); do [ -e "$1" ] && return 0; sleep 0.1; done
  echo "quickstart: timed out waiting for $1" >&2; return 1
}

echo "== redis-server (appendonly, unix socket) in $run"
redis-server --port 0 --unixsocket "$run/redis.sock" --unixsocketperm 700 \
  --dir "$run" --appendonly yes --appendfsync everysec --save "" \
  --logfile "$run/redis.log" &
pids+=($!)
wait_for "$run/redis.sock" 10

token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
umask 077
printf '%s\n' "$token" > "$run/publisher.token"
cat > "$run/rshub.conf" <<CONF
listen = 127.0.0.1:${RS_HUB_PORT:-0}
redis = unix://$run/redis.sock
ready-file = $run/ready
log-file = $run/rshub.log

[topic demo]
uri = http://localhost/demo/changes
kind = change
token = $token
CONF
umask 022
echo "== rshub"
"$build/hub/rshub" --config "$run/rshub.conf" &
pids+=($!)
wait_for "$run/ready" 10
http=$(sed -E 's/.*"http":([0-9]+).*/\1/' "$run/ready")
ws=$(sed -E 's/.*"ws":([0-9]+).*/\1/' "$run/ready")
hub="http://127.0.0.1:$http/hub"
channel="ws://127.0.0.1:$ws/channel/demo"

echo "== rsdoc validates the spec examples"
"$build/proto/rsdoc" validate tests/data/valid/core-ex1[2-4]-*.xml tests/data/valid/core-ex19-*.xml || true

n=3
echo "== a WebSocket subscriber on $channel"
/usr/bin/python3 deploy/demo-subscriber.py "$channel" --ready "$run/sub.ready" \
  $([ $smoke = 1 ] && echo "--count $n --timeout 20") &
sub=$!
pids+=($sub)
wait_for "$run/sub.ready" 10

echo "== rspub publishes $n change notifications"
for i in $(seq 1 $n); do
  id=$(RSPUB_TOKEN=$token "$build/hub/rspub" --hub "$hub" \
         --topic http://localhost/demo/changes \
         --change updated --loc "http://localhost/demo/file$i.txt" \
         --up http://localhost/demo/capabilitylist.xml)
  echo "  published $id"
done

if [ $smoke = 1 ]; then
  if wait "$sub"; then
    echo "quickstart --smoke: OK ($n notifications went Source -> hub -> Redis -> subscriber)"
    exit 0
  fi
  echo "quickstart --smoke: FAILED (see $run/rshub.log)" >&2
  exit 1
fi

cat <<MSG

The hub is running. Look at:
  $hub                      (POST notifications here; token in $run/publisher.token)
  http://127.0.0.1:$http/topics              (topics, backlog, subscribers)
  http://127.0.0.1:$http/metrics             (Prometheus metrics)
  $channel?since=0   (WebSocket: the whole backlog, then live)
Publish more:  RSPUB_TOKEN=\$(cat $run/publisher.token) $build/hub/rspub --hub $hub \\
                 --topic http://localhost/demo/changes --change created --loc http://localhost/demo/x
Ctrl-C stops everything.
MSG
wait "$sub" || true
wait
