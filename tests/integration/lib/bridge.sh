# shellcheck shell=bash
# bridge.sh - fixtures of the rsbridge tests, sourced after common.sh and
# sub.sh: programmable pull-only Sources (bridge_source.py), rsbridge
# started with a ready-file and a private state directory (restarted on
# the same port), mirrors run exactly as a user runs them
# (`rssub run --source PUBLIC/s/NAME/ --mirror DIR`), the recorded
# notification streams (hubtool follow), and sanitizer checks of the
# bridge's log. Every wait is bounded; only the processes started here
# are stopped, by their recorded PID.

RSBRIDGE=$RS_BUILD_DIR/bridge/rsbridge
# shellcheck disable=SC2034 # for the scripts that source this
RSDOC=$RS_BUILD_DIR/tools/rsdoc
BSRC_PY=$RS_SOURCE_DIR/tests/integration/lib/bridge_source.py
declare -A BR_PID BR_HTTP BR_PORT BR_LOG BR_LOGOFF BR_ASAN_DONE
declare -A BSRC_PORT BSRC_WWW

# bridge_require: the test cannot run without rsbridge: say so, exit 0.
bridge_require() {
    if [ ! -x "$RSBRIDGE" ]; then
        echo "SKIP: rsbridge not built ($RSBRIDGE)"
        exit 0
    fi
}

# ------------------------------------------------------------ Sources

# bsrc_start NAME SHAPE [SERVE-ARGS...]: a bridge_source.py Source of
# SHAPE (A, B, C) rooted at $TMP/NAME.www; its port in BSRC_PORT[NAME],
# its access log in $TMP/NAME.access.jsonl, its stderr in $TMP/NAME.bsrc.log.
bsrc_start() {
    local name=$1 shape=$2 ready=$TMP/$1.bsrc.ready
    shift 2
    rm -f "$ready"
    BSRC_WWW[$name]=$TMP/$name.www
    bg "bsrc-$name" "$PY" "$BSRC_PY" serve --shape "$shape" \
        --root "${BSRC_WWW[$name]}" --ready "$ready" \
        --access-log "$TMP/$name.access.jsonl" "$@" 2>>"$TMP/$name.bsrc.log"
    wait_file "$ready" 20 || { tail -n 20 "$TMP/$name.bsrc.log" >&2; return 1; }
    BSRC_PORT[$name]=$(sed -n 's/.*"port":\([0-9]*\).*/\1/p' "$ready")
    [ -n "${BSRC_PORT[$name]}" ]
}

# bsrc_url NAME: the Source's URL as the bridge is given it.
bsrc_url() { echo "http://127.0.0.1:${BSRC_PORT[$1]}/"; }
# bsrc_name NAME: the bridged Source's NAME (docs: host_port).
bsrc_name() { echo "127.0.0.1_${BSRC_PORT[$1]}"; }
# bs NAME CTL-ARGS...: bridge_source.py ctl against Source NAME.
bs() {
    local name=$1
    shift
    "$PY" "$BSRC_PY" ctl --port "${BSRC_PORT[$name]}" "$@"
}
# bsx COMMAND NAME ARGS...: another bridge_source.py subcommand
# (check-stream, politeness, load, watch) against Source NAME.
bsx() {
    local cmd=$1 name=$2
    shift 2
    "$PY" "$BSRC_PY" "$cmd" --port "${BSRC_PORT[$name]}" "$@"
}

# ------------------------------------------------------------ rsbridge

# bridge_start NAME [RSBRIDGE-ARGS...]: rsbridge publishing to hub
# ${BR_HUB:-h} (at $BR_HUB_URL when set: a proxy), state in $TMP/NAME.bstate, listening on 127.0.0.1 (the
# port of its first run again on a restart), logging (logfmt, debug,
# appended across restarts) to BR_LOG[NAME]; waits ${BR_READY_SECS:-40} s
# for its ready-file. Sets BR_PID[NAME], BR_HTTP[NAME].
bridge_start() {
    local name=$1
    shift
    local ready=$TMP/$name.bridge.ready hub=${BR_HUB:-h}
    BR_LOG[$name]=$TMP/$name.bridge.log
    rm -f "$ready"
    mkdir -p "$TMP/$name.bstate"
    touch "${BR_LOG[$name]}"
    BR_LOGOFF[$name]=$(stat -c %s "${BR_LOG[$name]}")
    echo "---- rsbridge $*" >>"${BR_LOG[$name]}"
    "$RSBRIDGE" --hub "${BR_HUB_URL:-http://127.0.0.1:${HUB_HTTP[$hub]}/hub}" \
        --listen "127.0.0.1:${BR_PORT[$name]:-0}" --state "$TMP/$name.bstate" \
        --ready-file "$ready" --log-format logfmt \
        --log-level "${BR_LOG_LEVEL:-debug}" "$@" >>"${BR_LOG[$name]}" 2>&1 &
    BR_PID[$name]=$!
    BR_ASAN_DONE[$name]=0
    local i=0 max=$((${BR_READY_SECS:-40} * 10))
    while [ ! -s "$ready" ] && [ "$i" -lt "$max" ]; do
        kill -0 "${BR_PID[$name]}" 2>/dev/null || break
        sleep 0.1
        i=$((i + 1))
    done
    if [ ! -s "$ready" ]; then
        echo "rsbridge $name: no ready-file (exited or too slow):" >&2
        tail -n 20 "${BR_LOG[$name]}" >&2
        return 1
    fi
    BR_HTTP[$name]=$(sed -n 's/.*"http":\([0-9]*\).*/\1/p' "$ready")
    [ -n "${BR_HTTP[$name]}" ] || return 1
    BR_PORT[$name]=${BR_HTTP[$name]}
}

# bridge_url NAME [PATH]: http://127.0.0.1:PORT/PATH on bridge NAME.
bridge_url() { echo "http://127.0.0.1:${BR_HTTP[$1]}/${2:-}"; }
# bridged NAME SOURCE: the bridged Source's URL, PUBLIC/s/NAME/.
bridged() { bridge_url "$1" "s/$(bsrc_name "$2")/"; }

# bridge_stop NAME [SIGNAL] [SECS]: signal (TERM) and wait (20 s); exit
# status in BR_RC (124: did not exit, then killed).
# shellcheck disable=SC2034 # BR_RC is for the callers
bridge_stop() {
    local name=$1 sig=${2:-TERM} secs=${3:-20} pid=${BR_PID[$1]:-}
    BR_RC=
    [ -n "$pid" ] || return 1
    kill "-$sig" "$pid" 2>/dev/null
    if pid_wait "$pid" "$secs" 2>/dev/null; then
        BR_RC=$WAIT_RC
    else
        BR_RC=124
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    fi
    BR_PID[$name]=
}

# bridge_kill9 NAME: kill -9, no sanitizer report to expect of that run.
bridge_kill9() {
    bridge_stop "$1" KILL 10
    BR_ASAN_DONE[$1]=1
}

# bridge_asan_check NAME: no sanitizer report in the last run's log.
bridge_asan_check() {
    local name=$1 log
    local pat='ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:'
    log=$(tail -c +$((${BR_LOGOFF[$name]:-0} + 1)) "${BR_LOG[$name]}")
    if printf '%s\n' "$log" | grep -Eq "$pat"; then
        bad "$name: sanitizer report in rsbridge's log" \
            "$(printf '%s\n' "$log" | grep -E -A14 "$pat" | head -n 40)"
    else
        ok "$name: no sanitizer report in rsbridge's log"
    fi
    BR_ASAN_DONE[$name]=1
}

# sources_field BRIDGE SOURCE FIELD: one field of SOURCE's object in the
# bridge's GET /sources (JSON: null, numbers and strings as they are).
sources_field() {
    curl -sf --max-time 10 "$(bridge_url "$1" sources)" |
        "$PY" -c '
import json, sys
name, field = sys.argv[1], sys.argv[2]
for s in json.load(sys.stdin):
    if s.get("name") == name:
        v = s.get(field)
        print("null" if v is None else v)
        sys.exit(0)
sys.exit(1)' "$(bsrc_name "$2")" "$3"
}

# bridge_idle BRIDGE SOURCE: nothing pending in SOURCE's outbox.
bridge_idle() { [ "$(sources_field "$1" "$2" pending)" = 0 ]; }

# channel_of BRIDGE SOURCE CAPABILITY: the hub channel (the name after
# ws://.../channel/) the bridged Capability List of SOURCE advertises for
# CAPABILITY (change-notification or framework-notification).
channel_of() {
    curl -sf --max-time 10 "$(bridged "$1" "$2")capabilitylist/0.xml" |
        "$PY" -c '
import sys, xml.etree.ElementTree as ET
SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
RS = "{http://www.openarchives.org/rs/terms/}"
for u in ET.fromstring(sys.stdin.buffer.read()).findall(SM + "url"):
    loc, md = u.findtext(SM + "loc") or "", u.find(RS + "md")
    if loc.startswith("ws://") and md is not None and \
            md.get("capability") == sys.argv[1]:
        print(loc.split("/channel/", 1)[1])
        sys.exit(0)
sys.exit(1)' "$3"
}

# record NAME BRIDGE SOURCE KIND: follow SOURCE's change (KIND change) or
# framework (KIND framework) channel from the start (since=0), across
# hub restarts, into $TMP/NAME.rec.jsonl; stopped by touching
# $TMP/NAME.stop (record_stop).
record() {
    local name=$1 chan
    chan=$(channel_of "$2" "$3" "$4-notification") || return 1
    rm -f "$TMP/$name.stop" "$TMP/$name.rec.ready"
    bg_ht "rec-$name" follow --ws "${HUB_WS[${BR_HUB:-h}]}" --chan "$chan" \
        --since 0 --stop "$TMP/$name.stop" --idle 1 --timeout 900 \
        --out "$TMP/$name.rec.jsonl" --ready "$TMP/$name.rec.ready"
    wait_file "$TMP/$name.rec.ready" 10
}
# record_stop NAME: let the recorder end (1 s idle), 15 s at most.
record_stop() {
    touch "$TMP/$1.stop"
    bg_wait "rec-$1" 15
}

# ------------------------------------------------------------ mirrors

# mirror_start NAME URL DIR: `rssub run --source URL --mirror DIR`, no
# other option (the state goes next to DIR, the log to stderr, kept in
# SUB_LOG[NAME]); registered with sub.sh's SUB_PID for sub_stop and the
# trap.
# shellcheck disable=SC2034 # SUB_PID is sub.sh's
mirror_start() {
    local name=$1 url=$2 dir=$3
    SUB_LOG[$name]=$TMP/$name.sub.log
    [[ " ${SUB_LOGS[*]} " == *" ${SUB_LOG[$name]} "* ]] ||
        SUB_LOGS+=("${SUB_LOG[$name]}")
    echo "---- rssub run --source $url --mirror $dir" >>"${SUB_LOG[$name]}"
    "$RSSUB" run --source "$url" --mirror "$dir" >>"${SUB_LOG[$name]}" 2>&1 &
    SUB_PID[$name]=$!
}

# mirror_following NAME: rssub NAME says it follows a WebSocket channel.
mirror_following() {
    grep -Eq 'msg="?following"? .*to=websocket' "${SUB_LOG[$1]}"
}

# mirror_same SOURCE DIR: DIR holds exactly Source SOURCE's resources
# (its data/ tree), byte for byte, and nothing else (rssub's own .rssub*
# names aside).
mirror_same() {
    local extra
    same_tree "${BSRC_WWW[$1]}/data" "$2/data" || return 1
    extra=$(find "$2" -mindepth 1 -maxdepth 1 ! -name '.rssub*' ! -name data)
    [ -z "$extra" ] || { echo "not from the Source: $extra"; return 1; }
}

# mirror_audit NAME URL DIR: `rssub audit` of a stopped mirror: clean.
mirror_audit() {
    timeout 60 "$RSSUB" audit --source "$2" --mirror "$3" \
        >"$TMP/$1.audit.out" 2>"$TMP/$1.audit.log"
    local rc=$?
    SUB_LOGS+=("$TMP/$1.audit.log")
    [ "$rc" = 0 ] || { cat "$TMP/$1.audit.out"; tail -n 20 "$TMP/$1.audit.log"; }
    return "$rc"
}

# ------------------------------------------------------------ the end

bridge_cleanup() {
    local k
    for k in "${!BR_PID[@]}"; do
        [ -n "${BR_PID[$k]}" ] && stop_pid "${BR_PID[$k]}"
    done
    sub_cleanup
}
trap bridge_cleanup EXIT

# bridge_finish: stop every bridge still running, check their logs, then
# sub.sh's finish (mirrors, hubs, tally, exit status).
bridge_finish() {
    local k
    for k in "${!BR_PID[@]}"; do
        if [ -n "${BR_PID[$k]}" ]; then
            bridge_stop "$k"
            if [ "$BR_RC" = 0 ]; then
                ok "$k: rsbridge exits 0 on SIGTERM"
            else
                bad "$k: rsbridge exits $BR_RC on SIGTERM" "$(tail -n 20 "${BR_LOG[$k]}")"
            fi
        fi
    done
    for k in "${!BR_LOG[@]}"; do
        [ "${BR_ASAN_DONE[$k]:-0}" = 1 ] || bridge_asan_check "$k"
    done
    sub_finish
}
