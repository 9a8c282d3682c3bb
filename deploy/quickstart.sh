#!/usr/bin/env bash
# Quickstart: install, build, and run the whole system on this machine.
#
#   deploy/quickstart.sh           run until Ctrl-C, printing what to look at
#   deploy/quickstart.sh --smoke   the same, non-interactively; exit 0 when
#                                  the mirror converged to the Source, else 1
#   deploy/quickstart.sh --reset   (with or without --smoke) first delete what
#                                  earlier runs left: demo files, states,
#                                  Redis data, logs; the demo starts afresh
#
# In a run directory (default ./run/quickstart) it starts a private
# redis-server with persistence on, rshub with the demo's two topics and a
# publisher token, rssource serving a demo directory and pushing its
# changes to the hub, and rssub mirroring that Source into a second
# directory. Then it changes some demo files and shows each change arrive in
# the mirror with its latency. Everything it started stops when it exits.
#
# Run it as often as you like. The run directory keeps the demo files (your
# own changes too), the Redis data and both states; each daemon gets the
# port it had the last time, so the URLs stay the same; rssub audits the
# mirror first (--fix --deep), repairing files changed there by hand. A
# port that another program took meanwhile is replaced by a free one; when
# that changes the Source's address, the mirror starts afresh. Daemons left
# running by a quickstart that was killed (kill -9) are stopped first; a
# quickstart still running in the same run directory is reported, and this
# one exits. A daemon that fails to start, or stops: its last log lines are
# printed and the quickstart exits 1 at once.
#
# Environment:
#   RS_RUN_DIR       the run directory (default ./run/quickstart)
#   RS_BUILD_DIR     the Release build tree (default ./build-release)
#   RS_CMAKE_ARGS    more -D flags for that build
#   RS_BIN_DIR       a build tree whose programs (hub/rshub, source/rssource,
#                    subscriber/rssub) are already built: use them, and
#                    neither install nor build (the tests use their own)
#   RS_HUB_PORT, RS_SOURCE_PORT
#                    exactly these ports (0: any free one), no fallback
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
smoke=0
reset=0
for arg in "$@"; do
  case $arg in
    --smoke) smoke=1 ;;
    --reset) reset=1 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "quickstart: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
PY=/usr/bin/python3

run=${RS_RUN_DIR:-$root/run/quickstart}
mkdir -p "$run"
# Absolute: our daemons are recognised by it in their command lines.
run=$(cd "$run" && pwd)
src=$run/demo-source
mir=$run/demo-mirror

# ----------------------------------------------------------------- daemons

pids=()
declare -A pid_of=() log_of=() logoff_of=()
# id_of PID: PID:STARTTIME, which names one process for good (a pid alone
# is soon another process's where pid_max is 32768 and the machine busy).
id_of() {
  local st
  st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20)
  [ -n "$st" ] && echo "$1:$st"
}
# running PID|ID: the process exists and has not exited (a zombie has);
# given an ID, it is that very process.
running() {
  local pid=${1%%:*}
  case $1 in
    *:*) [ "$(id_of "$pid")" = "$1" ] || return 1 ;;
    *) [ -e "/proc/$pid" ] || return 1 ;;
  esac
  ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null
}
# stop PID|ID: SIGTERM, then SIGKILL after 15 s (the longest drain is 10 s).
stop() {
  local pid=${1%%:*}
  running "$1" || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 150); do running "$1" || return 0; sleep 0.1; done
  { running "$1" && kill -KILL "$pid"; } 2>/dev/null || true
  for _ in $(seq 1 50); do running "$1" || return 0; sleep 0.1; done
}
cleanup() {
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    stop "${pids[i]}"
    wait "${pids[i]}" 2>/dev/null || true
  done
  pids=()
  if [ "${locked:-0}" = 1 ]; then
    rm -f "$run/pids" "$run/quickstart.pid" "$run"/*.ready
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 129' HUP
trap 'exit 143' TERM

# fail NAME WHY: NAME's own last log lines (this run's), then exit 1.
fail() {
  local name=$1
  echo "quickstart: $name $2; the end of its log (${log_of[$name]}):" >&2
  tail -c +"$((logoff_of[$name] + 1))" "${log_of[$name]}" | tail -n 25 |
    sed 's/^/  | /' >&2
  echo "quickstart: stopping. Logs: $run/*.log;" \
       "to start the demo afresh: deploy/quickstart.sh --reset" >&2
  exit 1
}
# gone NAME WHEN: daemon NAME has exited: fail with its status.
gone() {
  local rc=0
  wait "${pid_of[$1]}" 2>/dev/null || rc=$?
  fail "$1" "exited (status $rc) $2"
}
# start NAME READY SECS CMD...: start daemon NAME (stdout and stderr appended
# to $run/NAME.log, where it logs too), then wait until READY (a file, or
# redis's socket) appears. Exits 1 with NAME's log lines as soon as it ends
# before that, or after SECS.
start() {
  local name=$1 ready=$2 secs=$3 log=$run/$1.log
  shift 3
  touch "$log"
  log_of[$name]=$log
  logoff_of[$name]=$(stat -c %s "$log")
  "$@" >>"$log" 2>&1 </dev/null 9>&- &
  pid_of[$name]=$!
  pids+=($!)
  echo "$name $(id_of $!)" >> "$run/pids"
  for _ in $(seq 1 $((secs * 10))); do
    { [ -S "$ready" ] || [ -s "$ready" ]; } && return 0
    running "${pid_of[$name]}" || gone "$name" "before it was ready"
    sleep 0.1
  done
  fail "$name" "was not ready within $secs s"
}
# alive: exits 1 with the log of the first daemon that has stopped.
alive() {
  local name
  for name in "${!pid_of[@]}"; do
    running "${pid_of[$name]}" || gone "$name" "while the quickstart was running"
  done
}

# -------------------------------------------------- one quickstart at a time

# The lock is held by this shell alone (the daemons get fd 9 closed), so it
# is free again the moment this shell is gone, however it went.
exec 9>>"$run/quickstart.lock"
if ! flock -n 9; then
  other=$(cat "$run/quickstart.pid" 2>/dev/null || true)
  echo "quickstart: another quickstart${other:+ (pid $other)} is running in $run." >&2
  echo "  Stop it first (Ctrl-C in its terminal${other:+, or kill $other})," \
       "or give this one another RS_RUN_DIR." >&2
  exit 1
fi
echo $$ > "$run/quickstart.pid"
locked=1

# ours PID NAME: PID is a NAME started for this run directory (a pid reused
# by an unrelated process does not name our run directory).
ours() {
  local cmd
  cmd=$(tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null) || return 1
  case $cmd in *"$2"*"$run/"*) return 0 ;; esac
  return 1
}

# A quickstart killed with no chance to clean up leaves its daemons running,
# listed in $run/pids: stop them, the last started first.
if [ -s "$run/pids" ]; then
  while read -r name id; do
    [[ $id =~ ^[1-9][0-9]*:[0-9]+$ ]] && running "$id" &&
      ours "${id%%:*}" "$name" || continue
    echo "quickstart: stopping $name (pid ${id%%:*}), left running by an" \
         "earlier quickstart that could not stop it"
    stop "$id"
    if running "$id"; then
      echo "quickstart: $name (pid ${id%%:*}) does not stop, even with" \
           "SIGKILL; try again when it has" >&2
      exit 1
    fi
  done < <(tac "$run/pids")
fi
rm -f "$run/pids" "$run"/*.ready

if [ $reset = 1 ]; then
  echo "== --reset: deleting the demo, the states, the Redis data and the logs in $run"
  rm -rf "$src" "$mir" "$run/source.state" "$run"/mirror.state* \
         "$run/mirror.source" "$run/appendonlydir" "$run/appendonly.aof" \
         "$run/dump.rdb" "$run/redis.sock" "$run/ports" "$run/publisher.token" \
         "$run/rshub.conf" "$run"/*.log
fi

# ---------------------------------------------------------------- programs

if [ -n "${RS_BIN_DIR:-}" ]; then
  bin=$RS_BIN_DIR
  echo "== using the programs built in $bin"
else
  bash deploy/install-deps.sh
  bin=${RS_BUILD_DIR:-$root/build-release}
  echo "== building (Release) in $bin"
  # shellcheck disable=SC2086  # RS_CMAKE_ARGS is a list of -D flags
  cmake -S . -B "$bin" -DCMAKE_BUILD_TYPE=Release -DRS_TESTS=OFF -DRS_BENCH=OFF \
        ${RS_CMAKE_ARGS:-} >/dev/null
  cmake --build "$bin" -j "$(nproc)" >/dev/null
fi
for p in hub/rshub source/rssource subscriber/rssub; do
  [ -x "$bin/$p" ] || { echo "quickstart: $bin/$p is missing" >&2; exit 1; }
done

# ------------------------------------------------------------------- ports

# $run/ports: NAME=PORT lines, the ports of the last run.
declare -A port=()
if [ -s "$run/ports" ]; then
  while IFS='=' read -r k v; do
    case $k in hub_http|hub_ws|source|metrics) ;; *) continue ;; esac
    [[ $v =~ ^[0-9]{1,5}$ ]] && port[$k]=$v
  done < "$run/ports"
fi
save_ports() {
  local k
  for k in "${!port[@]}"; do echo "$k=${port[$k]}"; done > "$run/ports.tmp"
  mv "$run/ports.tmp" "$run/ports"
}
# Binds as the daemons do (SO_REUSEADDR: a port of our last run in
# TIME_WAIT is free).
port_free() {
  "$PY" - "$1" <<'PY'
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
PY
}
# pick NAME WHAT: the port for NAME: the last run's when it is free, else 0
# (the daemon takes a free one and says which in its ready-file).
pick() {
  local last=${port[$1]:-0}
  [ "$last" = 0 ] && { echo 0; return; }
  port_free "$last" && { echo "$last"; return; }
  echo "quickstart: port $last ($2, the last run's) is in use by another" \
       "program: taking a free one" >&2
  echo 0
}
port_of() { sed -E "s/.*\"$2\":([0-9]+).*/\\1/" "$1"; }

echo "== redis-server (appendonly, unix socket) in $run"
# A redis answering on our socket was not started by a quickstart we know
# of: starting ours would take its socket and share its data files.
if [ -S "$run/redis.sock" ] && redis-cli -s "$run/redis.sock" ping >/dev/null 2>&1; then
  echo "quickstart: a redis-server already serves $run/redis.sock;" \
       "stop it, or use another RS_RUN_DIR" >&2
  exit 1
fi
rm -f "$run/redis.sock"
start redis "$run/redis.sock" 10 \
  redis-server --port 0 --unixsocket "$run/redis.sock" --unixsocketperm 700 \
  --dir "$run" --appendonly yes --appendfsync everysec --save "" \
  --logfile "$run/redis.log"

# The demo's topics are fixed URIs (not the Source's own address, which is
# only known once it listens), each with the publisher's token.
change_topic=http://localhost/demo/changes
framework_topic=http://localhost/demo/framework
umask 077
[ -s "$run/publisher.token" ] ||
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$run/publisher.token"
token=$(cat "$run/publisher.token")
if [ -n "${RS_HUB_PORT:-}" ]; then
  hub_listen="listen = 127.0.0.1:$RS_HUB_PORT"   # ws: the hub's default
else
  hub_listen="listen = 127.0.0.1:$(pick hub_http "rshub's HTTP")
ws-listen = 127.0.0.1:$(pick hub_ws "rshub's WebSocket")"
fi
cat > "$run/rshub.conf" <<CONF
$hub_listen
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
start rshub "$run/hub.ready" 10 "$bin/hub/rshub" --config "$run/rshub.conf"
port[hub_http]=$(port_of "$run/hub.ready" http)
port[hub_ws]=$(port_of "$run/hub.ready" ws)
save_ports
http=${port[hub_http]}
hub="http://127.0.0.1:$http/hub"

echo "== rssource serving $src"
mkdir -p "$src"
if [ -z "$(ls -A "$src")" ]; then
  mkdir -p "$src/papers" "$src/data"
  for i in 1 2 3; do echo "Paper $i, first version." > "$src/papers/paper$i.txt"; done
  head -c 4096 /dev/urandom > "$src/data/sample.bin"
fi
start rssource "$run/source.ready" 20 \
  "$bin/source/rssource" --dir "$src" \
  --listen "127.0.0.1:${RS_SOURCE_PORT:-$(pick source "rssource's")}" \
  --state "$run/source.state" --hub "$hub" --token-file "$run/publisher.token" \
  --change-topic "$change_topic" --framework-topic "$framework_topic" \
  --resourcelist-refresh 0 --settle 100ms \
  --ready-file "$run/source.ready" --log-file "$run/rssource.log"
port[source]=$(port_of "$run/source.ready" http)
save_ports
source_url="http://127.0.0.1:${port[source]}/"

# rssub's state belongs to one Source address: a new address (a port taken
# meanwhile, an RS_SOURCE_PORT) is a new Source, so a new mirror.
if [ -e "$run/mirror.state" ] &&
   [ "$(cat "$run/mirror.source" 2>/dev/null)" != "$source_url" ]; then
  echo "== the Source's address changed (it was" \
       "$(cat "$run/mirror.source" 2>/dev/null || echo "not recorded")): a new mirror"
  rm -rf "$mir" "$run"/mirror.state*
fi
echo "$source_url" > "$run/mirror.source"
if [ -e "$run/mirror.state" ]; then
  # rssub does not watch its mirror: files changed there by hand since the
  # last run stay as they are unless an audit compares every one. Done
  # before started.txt changes, so that it judges the mirror as the last
  # run left it.
  echo "== rssub audit --fix --deep: is the mirror as the last run left it?"
  touch "$run/audit.log"
  log_of[rssub audit]=$run/audit.log
  logoff_of[rssub audit]=$(stat -c %s "$run/audit.log")
  rc=0
  # shellcheck disable=SC2094  # its log and its stderr: both append
  "$bin/subscriber/rssub" audit --fix --deep --source "$source_url" \
    --mirror "$mir" --state "$run/mirror.state" --no-progress \
    --log-file "$run/audit.log" 2>>"$run/audit.log" </dev/null 9>&- |
    sed 's/^/   audit: /' || rc=$?
  # 0: in sync (after repairs), 1: differences left (the diff below shows them)
  [ $rc -le 1 ] || fail "rssub audit" "exited (status $rc)"
fi
# The hub learns each topic's WebSocket channel with the first publish;
# touching one file gets the Capability List its channels now.
mkdir -p "$src/papers"
date +%s > "$src/papers/started.txt"
sleep 0.5

echo "== rssub mirroring $source_url into $mir"
start rssub "$run/sub.ready" 30 \
  "$bin/subscriber/rssub" run --source "$source_url" --mirror "$mir" \
  --state "$run/mirror.state" \
  --metrics-listen "127.0.0.1:$(pick metrics "rssub's metrics")" \
  --ready-file "$run/sub.ready" --log-file "$run/rssub.log"
port[metrics]=$(port_of "$run/sub.ready" metrics)
save_ports
metrics="http://127.0.0.1:${port[metrics]}/metrics"

echo "== changing files at the Source; each arrives in the mirror:"
# change write|delete PATH: make the change, then wait (10 s at most) until
# the mirror shows it, printing the latency. A write is a create or an
# update, whichever the demo directory (changed by hand?) makes it.
change() {
  "$PY" - "$1" "$src/$2" "$mir/$2" "$2" <<'PY'
import datetime, os, sys, time
op, s, m, name = sys.argv[1:5]
t0 = time.monotonic()
if op == "delete":
    kind = "delete"
    os.unlink(s)
else:
    kind = "update" if os.path.exists(s) else "create"
    os.makedirs(os.path.dirname(s), exist_ok=True)
    with open(s + ".part", "w") as f:
        f.write("%s at %s\n" % (name, datetime.datetime.now().time()))
    os.rename(s + ".part", s)
want = None if op == "delete" else open(s, "rb").read()
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
# Every run makes the same changes, whatever the last one left: paper4 is
# created and deleted again.
failed=0
change write papers/paper4.txt || failed=1
change write papers/paper1.txt || failed=1
change write news/today.txt || failed=1
change write papers/paper4.txt || failed=1
change delete papers/paper4.txt || failed=1
alive

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
  $bin/subscriber/rssub status --mirror $mir --state $run/mirror.state
  $bin/subscriber/rssub audit --source $source_url --mirror $mir --state $run/mirror.state
Logs: $run/*.log. Ctrl-C stops everything; running this again resumes.
MSG
# Until Ctrl-C, or until a daemon stops on its own.
while :; do
  done_pid=
  rc=0
  wait -n -p done_pid "${pids[@]}" || rc=$?
  for name in "${!pid_of[@]}"; do
    [ "${pid_of[$name]}" = "$done_pid" ] || continue
    fail "$name" "exited (status $rc) while the quickstart was running"
  done
done
