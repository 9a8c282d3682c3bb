# shellcheck shell=bash
# common.sh - fixtures shared by the rshub integration tests (sourced, not
# run): a private redis-server on a unix socket in a temp dir, rshub nodes
# started with a ready-file, background helpers, check counters, and a trap
# that stops only the processes this script started (by recorded PID).
# Every wait is bounded, so a hung hub fails the test instead of CI.
#
# Needs RS_BUILD_DIR (ctest sets it); RS_SOURCE_DIR defaults to this tree.
# RS_KEEP_TMP=1 keeps the temp dir (logs, captures) for a post-mortem.

set -u

RS_BUILD_DIR=${RS_BUILD_DIR:?RS_BUILD_DIR not set}
RS_SOURCE_DIR=${RS_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)}
RSHUB=$RS_BUILD_DIR/hub/rshub
# Debian's python3: python3-websockets is installed for it, not for a
# pyenv python3 that may come first in PATH.
PY=/usr/bin/python3
HUBTOOL=$RS_SOURCE_DIR/tests/integration/lib/hubtool.py
# Loopback only: a proxy from the environment must not get in the way.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy no_proxy NO_PROXY
# The binaries are ASan builds in CI: leaks fail the test (checked in the
# hub's log when it stops). Keep options the caller set, add detect_leaks.
case "${ASAN_OPTIONS:-}" in
    *detect_leaks=*) ;;
    "") export ASAN_OPTIONS=detect_leaks=1 ;;
    *) export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=1" ;;
esac

pass=0
fail=0
T0=$SECONDS
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rshub-it.XXXXXX")
declare -A HUB_PID HUB_HTTP HUB_WS HUB_LOG HUB_LOGOFF HUB_ASAN_DONE BG_PID
REDIS_PID=
REDIS_SOCK=$TMP/redis/redis.sock
REDIS_DIR=$TMP/redis
REDIS_PERSIST=0

ht() { "$PY" "$HUBTOOL" "$@"; }

ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() {
    fail=$((fail + 1))
    echo "FAIL $1"
    [ -n "${2:-}" ] && printf '%s\n' "$2" | tail -n 40 | sed 's/^/     | /'
    return 0
}
# check NAME CMD...: CMD's exit status decides; its output is shown on failure.
check() {
    local name=$1 out rc
    shift
    out=$("$@" 2>&1)
    rc=$?
    if [ "$rc" -eq 0 ]; then ok "$name"; else bad "$name" "$out"; fi
    return $rc
}
# expect_eq NAME GOT WANT
expect_eq() {
    if [ "$2" = "$3" ]; then ok "$1"; else bad "$1: got '$2', want '$3'"; fi
}
note() { echo "---- $*"; }

# ------------------------------------------------------------ processes

# pid_wait PID SECS: wait for a child to exit within SECS; its status in
# $WAIT_RC (124 on timeout, the process left running).
pid_wait() {
    local pid=$1 secs=$2 i=0 max
    max=$((secs * 10))
    while kill -0 "$pid" 2>/dev/null && [ "$i" -lt "$max" ]; do
        sleep 0.1
        i=$((i + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        WAIT_RC=124
        return 124
    fi
    wait "$pid" 2>/dev/null
    WAIT_RC=$?
    return 0
}

# stop_pid PID: TERM, then KILL after 5 s; never anything but PID.
stop_pid() {
    local pid=$1
    [ -n "$pid" ] || return 0
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return 0; }
    kill -TERM "$pid" 2>/dev/null
    if ! pid_wait "$pid" 5; then
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    fi
}

# bg NAME CMD...: run the external command CMD in the background,
# remembered for cleanup. Not a shell function: then $! would be a subshell
# whose children outlive a kill (and hold the caller's stdout open).
bg() {
    local name=$1
    shift
    "$@" &
    BG_PID[$name]=$!
}
# bg_ht NAME HUBTOOL-ARGS...: bg of a hubtool command.
bg_ht() {
    local name=$1
    shift
    bg "$name" "$PY" "$HUBTOOL" "$@"
}

# bg_wait NAME SECS: wait for a background helper; its status in $WAIT_RC.
bg_wait() {
    local pid=${BG_PID[$1]:-}
    [ -n "$pid" ] || { WAIT_RC=127; return 1; }
    if ! pid_wait "$pid" "$2"; then
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        unset "BG_PID[$1]"
        return 1
    fi
    unset "BG_PID[$1]"
    return 0
}

# ------------------------------------------------------------ full disks

# full_disk_wrap BIN: the path of a wrapper ($TMP) that runs BIN with
# SIGXFSZ ignored and its stdout and stderr piped on, so that a write past
# RLIMIT_FSIZE fails with EFBIG (a full disk, to the process) instead of
# killing it, and its log and output, which the limit would stop too, go
# on. With FULL_DISK_AT=BYTES in its environment, it starts with that
# limit.
full_disk_wrap() {
    local w
    w=$TMP/full-disk.$(basename "$1")
    [ -f "$TMP/full_disk.py" ] || cat >"$TMP/full_disk.py" <<'EOF'
import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
for fd in (1, 2):
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(w)
        while True:
            b = os.read(r, 65536)
            if not b:
                os._exit(0)
            os.write(fd, b)
    os.close(r)
    os.dup2(w, fd)
    os.close(w)
at = os.environ.pop("FULL_DISK_AT", "")
if at:   # not before: the copies of the output above write to files
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(at), hard))
os.execv(sys.argv[1], sys.argv[1:])
EOF
    printf '#!/bin/sh\nexec %s %s %s "$@"\n' "$PY" "$TMP/full_disk.py" "$1" >"$w"
    chmod +x "$w"
    echo "$w"
}

# full_disk PID BYTES|inf: the soft RLIMIT_FSIZE of a running process
# (prlimit): past BYTES every write of it fails; inf lifts it. Fails
# where prlimit(2) on another process is not allowed.
full_disk() {
    "$PY" -c 'import resource as r, sys
n = r.RLIM_INFINITY if sys.argv[2] == "inf" else int(sys.argv[2])
r.prlimit(int(sys.argv[1]), r.RLIMIT_FSIZE, (n, r.getrlimit(r.RLIMIT_FSIZE)[1]))' "$1" "$2"
}

# wait_until SECS CMD...: retry CMD every 0.1 s until it succeeds (the
# last try's output shown).
wait_until() {
    local secs=$1 i=0 max
    shift
    max=$((secs * 10))
    while [ "$i" -lt "$max" ]; do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
        i=$((i + 1))
    done
    "$@"
}

# faketime_wrap BIN OUT OFFSET_FILE: write OUT, a wrapper that runs BIN
# with libfaketime preloaded: its wall clock offset by what OFFSET_FILE
# holds ("+30d", "-1h"; read again at most once a second), its monotonic
# clock untouched (libevent's timers run on it). Not the faketime
# command: that one forks and waits, and a signal would stop it, not BIN.
# ASan refuses a preload listed before its runtime unless told that the
# order does not matter (it does not, here). 1 when libfaketime is missing.
faketime_wrap() {
    local bin=$1 out=$2 offs=$3 lib="" f
    for f in /usr/lib/*/faketime/libfaketimeMT.so.1; do
        [ -e "$f" ] && lib=$f
    done
    [ -n "$lib" ] || return 1
    cat >"$out" <<EOF
#!/bin/sh
ASAN_OPTIONS="\${ASAN_OPTIONS:+\$ASAN_OPTIONS:}verify_asan_link_order=0" \\
LD_PRELOAD="$lib" FAKETIME_TIMESTAMP_FILE="$offs" FAKETIME_CACHE_DURATION=1 \\
FAKETIME_DONT_FAKE_MONOTONIC=1 exec "$bin" "\$@"
EOF
    chmod +x "$out"
}

# wait_file PATH SECS
wait_file() {
    local i=0 max=$(($2 * 10))
    while [ ! -s "$1" ] && [ "$i" -lt "$max" ]; do
        sleep 0.1
        i=$((i + 1))
    done
    [ -s "$1" ]
}

# ---------------------------------------------------------------- redis

# redis_start [persist]: a private redis-server on $REDIS_SOCK. With
# "persist", an append-only file fsynced on every write, so a restart of
# Redis keeps everything it acknowledged. The same dir and socket are
# reused by a restart.
redis_start() {
    [ "${1:-}" = persist ] && REDIS_PERSIST=1
    mkdir -p "$REDIS_DIR"
    local args=(--port 0 --unixsocket "$REDIS_SOCK" --unixsocketperm 700
                --dir "$REDIS_DIR" --save "" --daemonize no
                --logfile "$REDIS_DIR/redis.log")
    if [ "$REDIS_PERSIST" = 1 ]; then
        args+=(--appendonly yes --appendfsync always)
    else
        args+=(--appendonly no)
    fi
    redis-server "${args[@]}" >/dev/null 2>&1 &
    REDIS_PID=$!
    local i=0
    while [ "$i" -lt 100 ]; do
        if [ -S "$REDIS_SOCK" ] &&
           [ "$(redis-cli -s "$REDIS_SOCK" ping 2>/dev/null)" = PONG ]; then
            return 0
        fi
        kill -0 "$REDIS_PID" 2>/dev/null || break
        sleep 0.1
        i=$((i + 1))
    done
    echo "redis-server did not start:" >&2
    tail -n 20 "$REDIS_DIR/redis.log" >&2
    return 1
}

# redis_stop: SIGTERM (Redis flushes its append-only file), wait.
redis_stop() {
    stop_pid "$REDIS_PID"
    REDIS_PID=
}

rcli() { redis-cli -s "$REDIS_SOCK" "$@"; }

# ------------------------------------------------------------------ rshub

# hub_start NAME [RSHUB-ARGS...]: start rshub on 127.0.0.1:0 against our
# Redis, wait (10 s) for its ready-file; sets HUB_HTTP[NAME], HUB_WS[NAME],
# HUB_PID[NAME]; logs to HUB_LOG[NAME] (appended across restarts).
hub_start() {
    local name=$1
    shift
    local ready=$TMP/$name.ready
    HUB_LOG[$name]=$TMP/$name.log
    rm -f "$ready"
    touch "${HUB_LOG[$name]}"
    HUB_LOGOFF[$name]=$(stat -c %s "${HUB_LOG[$name]}")
    "$RSHUB" --listen 127.0.0.1:0 --redis "unix://$REDIS_SOCK" \
        --ready-file "$ready" "$@" >>"${HUB_LOG[$name]}" 2>&1 &
    HUB_PID[$name]=$!
    HUB_ASAN_DONE[$name]=0
    if ! wait_file "$ready" 10; then
        echo "rshub $name: no ready-file within 10 s" >&2
        tail -n 20 "${HUB_LOG[$name]}" >&2
        return 1
    fi
    HUB_HTTP[$name]=$(sed -n 's/.*"http":\([0-9]*\).*/\1/p' "$ready")
    HUB_WS[$name]=$(sed -n 's/.*"ws":\([0-9]*\).*/\1/p' "$ready")
    [ -n "${HUB_HTTP[$name]}" ] && [ -n "${HUB_WS[$name]}" ] || return 1
    # ready-file is written once listening; wait for Redis too
    ht wait-status --http "${HUB_HTTP[$name]}" --path /readyz --status 200 \
        --timeout 10 >/dev/null 2>&1 || true
}

# hub_stop NAME [SIGNAL] [SECS]: signal (TERM) and wait; exit status in
# $HUB_RC (124: did not exit, then killed).
# shellcheck disable=SC2034 # HUB_RC and WAIT_RC are for the callers
hub_stop() {
    local name=$1 sig=${2:-TERM} secs=${3:-10} pid=${HUB_PID[$1]:-}
    HUB_RC=
    [ -n "$pid" ] || return 1
    kill "-$sig" "$pid" 2>/dev/null
    if pid_wait "$pid" "$secs"; then
        HUB_RC=$WAIT_RC
    else
        HUB_RC=124
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    fi
    HUB_PID[$name]=
    return 0
}

# hub_kill9 NAME
hub_kill9() {
    local pid=${HUB_PID[$1]:-}
    [ -n "$pid" ] || return 1
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    HUB_PID[$1]=
}

# hub_asan_check NAME: a check that the log of hub NAME's last run holds
# no sanitizer report (call after it stopped).
hub_asan_check() {
    local name=$1 log
    local pat='ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:'
    log=$(tail -c +$((${HUB_LOGOFF[$name]:-0} + 1)) "${HUB_LOG[$name]}")
    if printf '%s\n' "$log" | grep -Eq "$pat"; then
        bad "$name: sanitizer report in rshub's log" \
            "$(printf '%s\n' "$log" | grep -E -A14 "$pat" | head -n 40)"
    else
        ok "$name: no sanitizer report in rshub's log"
    fi
    HUB_ASAN_DONE[$name]=1
}

# hub_pub NAME ARGS...: one request to hub NAME (hubtool request).
hub_req() {
    local name=$1
    shift
    ht request --http "${HUB_HTTP[$name]}" "$@"
}
status_of() { printf '%s\n' "$1" | head -n 1; }
header_of() {   # header_of RESPONSE NAME
    printf '%s\n' "$1" | sed -n '2,/^$/p' | grep -i "^$2:" | head -n 1 |
        sed 's/^[^:]*: *//' | tr -d '\r'
}
body_of() { printf '%s\n' "$1" | sed '1,/^$/d'; }

# --------------------------------------------------------------- cleanup

cleanup() {
    local k
    for k in "${!BG_PID[@]}"; do
        kill -KILL "${BG_PID[$k]}" 2>/dev/null
        wait "${BG_PID[$k]}" 2>/dev/null
    done
    for k in "${!HUB_PID[@]}"; do
        [ -n "${HUB_PID[$k]}" ] && stop_pid "${HUB_PID[$k]}"
    done
    stop_pid "$REDIS_PID"
    if [ "${RS_KEEP_TMP:-0}" = 1 ]; then
        echo "kept $TMP"
    else
        rm -rf "$TMP"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# finish: stop every hub still running, check their logs, print the tally.
finish() {
    local k
    for k in "${!HUB_PID[@]}"; do
        if [ -n "${HUB_PID[$k]}" ]; then
            hub_stop "$k"
        fi
    done
    for k in "${!HUB_LOG[@]}"; do
        [ "${HUB_ASAN_DONE[$k]:-0}" = 1 ] || hub_asan_check "$k"
    done
    echo "---- $(basename "$0"): $((SECONDS - T0)) s"
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
    exit $?
}
