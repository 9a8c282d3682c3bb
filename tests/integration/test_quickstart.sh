#!/usr/bin/env bash
# test_quickstart.sh - deploy/quickstart.sh run again and again in one run
# directory, as a new user runs it: --smoke twice in a row (the same
# Source address); demo files changed by hand, at the Source and in the
# mirror; an interactive run, a second quickstart beside it, Ctrl-C, and a
# run after it; a run whose shell was killed with kill -9 (its daemons left
# running), and one killed whole (stale socket, pid and ready files); a
# daemon killed under an interactive run; the last run's ports taken by
# another program; a daemon that cannot start (its port taken, its state
# broken) ending the quickstart at once with the daemon's own log lines;
# --reset. It uses this build's programs (RS_BIN_DIR: nothing is installed
# or built) and a run directory in its temp dir, never ./run/quickstart.
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"

QS=$RS_SOURCE_DIR/deploy/quickstart.sh
RUN=$TMP/run
CHECKOUT_RUN=$RS_SOURCE_DIR/run/quickstart
checkout_run_before=$(ls -la --time-style=full-iso "$CHECKOUT_RUN" 2>&1)
# Background jobs in their own process group, as a terminal runs them: a
# shell without job control starts them with SIGINT ignored, and Ctrl-C is
# a SIGINT to the whole group (the quickstart and its daemons).
set -m
QS_BG=        # the interactive quickstart in the background: pid and group
QS_SEEN=()    # the daemons of the runs, as ids (below)

# A daemon is known by its id, PID:STARTTIME: pid_max is 32768 here and
# the machine is busy, so a pid is soon another process's.
id_of() {
    local st
    st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20) || return 0
    [ -n "$st" ] && echo "$1:$st"
}
# running ID: that very process exists and has not exited (a zombie has).
running() {
    local pid=${1%%:*}
    [ "$(id_of "$pid")" = "$1" ] &&
        ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null
}
# daemon_ids: the ids of the daemons listed in $RUN/pids ("NAME ID"
# lines) that still run.
daemon_ids() {
    local id
    [ -s "$RUN/pids" ] || return 0
    while read -r _ id; do
        [[ $id =~ ^[1-9][0-9]*:[0-9]+$ ]] && running "$id" && echo "$id"
    done <"$RUN/pids"
    return 0
}
remember_daemons() {
    local id
    while read -r id; do QS_SEEN+=("$id"); done < <(daemon_ids)
}
qs_cleanup() {
    local id
    if [ -n "$QS_BG" ] && kill -0 -- "-$QS_BG" 2>/dev/null; then
        kill -TERM -- "-$QS_BG" 2>/dev/null
        for _ in $(seq 1 200); do
            kill -0 -- "-$QS_BG" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL -- "-$QS_BG" 2>/dev/null
    fi
    remember_daemons
    for id in "${QS_SEEN[@]}"; do
        running "$id" && kill -KILL "${id%%:*}" 2>/dev/null
    done
    cleanup
}
trap qs_cleanup EXIT

# qs OUT ARGS...: a quickstart to its end (120 s at most), its output in
# OUT; its status in QS_RC, its duration in QS_SECS.
qs() {
    local out=$1 t0=$SECONDS
    shift
    PREV_PORT=$(port_in source 2>/dev/null)
    QS_RC=0
    env -u RS_BUILD_DIR RS_BIN_DIR="$RS_BUILD_DIR" RS_RUN_DIR="$RUN" \
        timeout -k 5 120 bash "$QS" "$@" >"$out" 2>&1 </dev/null || QS_RC=$?
    QS_SECS=$((SECONDS - t0))
    remember_daemons
}
# qs_bg OUT: an interactive quickstart in the background, until it says
# it is running (60 s); QS_BG is its pid, and its process group's.
qs_bg() {
    QS_OUT=$1
    env -u RS_BUILD_DIR RS_BIN_DIR="$RS_BUILD_DIR" RS_RUN_DIR="$RUN" \
        bash "$QS" >"$QS_OUT" 2>&1 </dev/null &
    QS_BG=$!
    for _ in $(seq 1 600); do
        if grep -q '^Everything is running' "$QS_OUT"; then
            remember_daemons
            return 0
        fi
        kill -0 "$QS_BG" 2>/dev/null || break
        sleep 0.1
    done
    cat "$QS_OUT"
    return 1
}
# qs_bg_wait SECS: wait for the background quickstart's shell; its status
# in QS_RC (124: still running).
qs_bg_wait() {
    pid_wait "$QS_BG" "$1"
    QS_RC=$WAIT_RC
}
# none_running IDS...: none of these processes is left.
none_running() {
    local id left=
    for id in "$@"; do running "$id" && left="$left ${id%%:*}"; done
    [ -z "$left" ] && return 0
    for id in $left; do
        echo "still running: $id $(grep '^State:' "/proc/$id/status" 2>/dev/null)" \
             "$(tr '\0' ' ' <"/proc/$id/cmdline" 2>/dev/null)"
    done
    return 1
}
all_running() {
    local id
    for id in "$@"; do running "$id" || { echo "$id is gone"; return 1; }; done
}
smoke_ok() {   # smoke_ok NAME OUT: the run passed
    if [ "$QS_RC" = 0 ] && grep -q '^quickstart --smoke: OK' "$2"; then
        ok "$1"
    else
        bad "$1 (status $QS_RC)" "$(cat "$2")"
    fi
}
source_of() { sed -n 's/^== rssub mirroring \(http[^ ]*\) into .*/\1/p' "$1"; }
# same_source NAME OUT: run OUT's Source has the address of the run
# before it, or it says which program took that port (other tests run
# beside this one).
same_source() {
    local got want=http://127.0.0.1:$PREV_PORT/
    got=$(source_of "$2")
    if [ -n "$PREV_PORT" ] && [ "$got" = "$want" ]; then
        ok "$1"
    elif [ -n "$PREV_PORT" ] &&
         grep -q "^quickstart: port $PREV_PORT (rssource's, the last run's) is in use" "$2"; then
        ok "$1 (another program took the port meanwhile, and it says so)"
    else
        bad "$1: got '$got', want '$want'"
    fi
}
port_in() { sed -n "s/^$1=\\([0-9]*\\)\$/\\1/p" "$RUN/ports"; }
# occupy NAME PORT: another program listening on PORT.
occupy() {
    bg "$1" "$PY" -c '
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
open(sys.argv[2], "w").write("listening\n")
time.sleep(600)' "$2" "$TMP/$1.up"
    wait_file "$TMP/$1.up" 10
}

note "--smoke, twice in a row"
qs "$TMP/smoke1.out" --smoke
smoke_ok "a first --smoke run" "$TMP/smoke1.out"
qs "$TMP/smoke2.out" --smoke
smoke_ok "a second --smoke run in the same run directory" "$TMP/smoke2.out"
same_source "the second run's Source has the first one's address" "$TMP/smoke2.out"

note "demo files changed by hand"
mkdir -p "$RUN/demo-source/hand"
echo "made by hand" >"$RUN/demo-source/hand/new.txt"
echo "edited by hand" >>"$RUN/demo-source/papers/paper3.txt"
sed -i 's/^Paper 2/Pxper 2/' "$RUN/demo-mirror/papers/paper2.txt"   # same size
echo "not from the Source" >"$RUN/demo-mirror/stray.txt"
qs "$TMP/hand.out" --smoke
smoke_ok "a run after the demo and the mirror were changed by hand" "$TMP/hand.out"
check "the file made at the Source by hand is in the mirror" \
    cmp "$RUN/demo-source/hand/new.txt" "$RUN/demo-mirror/hand/new.txt"
check "the mirror file changed by hand is the Source's again" \
    cmp "$RUN/demo-source/papers/paper2.txt" "$RUN/demo-mirror/papers/paper2.txt"
check "the file put in the mirror by hand is gone" \
    test ! -e "$RUN/demo-mirror/stray.txt"

note "an interactive run; a second quickstart beside it; Ctrl-C; again"
if qs_bg "$TMP/inter1.out"; then
    ok "an interactive run says that everything is running"
else
    bad "an interactive run says that everything is running"
fi
mapfile -t D1 < <(daemon_ids)
expect_eq "it runs four daemons" "${#D1[@]}" 4
qs "$TMP/beside.out" --smoke
if [ "$QS_RC" = 1 ] && [ "$QS_SECS" -le 10 ] &&
   grep -q "another quickstart (pid $QS_BG) is running in $RUN" "$TMP/beside.out"; then
    ok "a second quickstart in the same run directory says so and exits 1 at once"
else
    bad "a second quickstart in the same run directory says so and exits 1 at once" \
        "status $QS_RC after $QS_SECS s: $(cat "$TMP/beside.out")"
fi
check "the first one runs on, untouched" all_running "$(id_of "$QS_BG")" "${D1[@]}"
kill -INT -- "-$QS_BG"
qs_bg_wait 30
expect_eq "Ctrl-C ends the interactive run (status 130)" "$QS_RC" 130
check "Ctrl-C stopped every daemon it started" none_running "${D1[@]}"
QS_BG=
qs "$TMP/after-int.out" --smoke
smoke_ok "a run after an interrupted interactive run" "$TMP/after-int.out"
same_source "... with the same Source address" "$TMP/after-int.out"

note "the quickstart's shell killed with kill -9, its daemons left running"
qs_bg "$TMP/inter2.out" || bad "the interactive run started"
mapfile -t D2 < <(daemon_ids)
kill -KILL "$QS_BG"
qs_bg_wait 10
check "its daemons outlive it" all_running "${D2[@]}"
qs "$TMP/after-kill.out" --smoke
smoke_ok "a run after that" "$TMP/after-kill.out"
D2_RSSUB=${D2[3]:-none}
check "... stopped the daemons left running, saying so" \
    grep -q "stopping rssub (pid ${D2_RSSUB%%:*}), left running" "$TMP/after-kill.out"
check "... and none of them is left" none_running "${D2[@]}"
QS_BG=

note "a run killed whole with kill -9 (stale socket, pid and ready files)"
qs_bg "$TMP/inter3.out" || bad "the interactive run started"
kill -KILL -- "-$QS_BG"
qs_bg_wait 10
check "the stale redis socket and pid files are there" \
    test -S "$RUN/redis.sock" -a -s "$RUN/pids" -a -s "$RUN/sub.ready"
qs "$TMP/after-kill9.out" --smoke
smoke_ok "a run after that" "$TMP/after-kill9.out"
same_source "... with the same Source address" "$TMP/after-kill9.out"
QS_BG=

note "a daemon that stops while the interactive run is up"
qs_bg "$TMP/inter4.out" || bad "the interactive run started"
mapfile -t D4 < <(daemon_ids)
# rssource, by its pid alone (an empty pid would make kill's 0, our group)
if [ -n "${D4[2]:-}" ] && running "${D4[2]}"; then
    kill -KILL "${D4[2]%%:*}"
else
    kill -TERM -- "-$QS_BG"
fi
qs_bg_wait 30
if [ "$QS_RC" = 1 ] &&
   grep -q "^quickstart: rssource exited (status 137) while the quickstart was running" \
       "$TMP/inter4.out"; then
    ok "the quickstart says which daemon stopped and exits 1"
else
    bad "the quickstart says which daemon stopped and exits 1" \
        "status $QS_RC: $(cat "$TMP/inter4.out")"
fi
check "... stopping the others" none_running "${D4[@]}"
QS_BG=

note "the last run's ports taken by another program"
SRC_PORT=$(port_in source)
HUB_PORT=$(port_in hub_http)
occupy occ_src "$SRC_PORT" || bad "a program listens on rssource's port"
occupy occ_hub "$HUB_PORT" || bad "a program listens on rshub's port"
qs "$TMP/taken.out" --smoke
smoke_ok "a run whose ports are taken uses others" "$TMP/taken.out"
check "... saying so" grep -q "port $SRC_PORT (rssource's, the last run's) is in use" \
    "$TMP/taken.out"
check "... with a new mirror for the Source's new address" \
    grep -q "^== the Source's address changed" "$TMP/taken.out"

note "a daemon that cannot start"
RS_HUB_PORT=$HUB_PORT qs "$TMP/hubfail.out" --smoke
if [ "$QS_RC" = 1 ] && [ "$QS_SECS" -le 15 ] &&
   grep -q "quickstart: rshub exited (status 1) before it was ready" "$TMP/hubfail.out" &&
   grep -q "  | .*cannot listen on 127.0.0.1:$HUB_PORT: Address already in use" \
       "$TMP/hubfail.out"; then
    ok "rshub on a taken port (RS_HUB_PORT): exit 1 at once with rshub's log lines"
else
    bad "rshub on a taken port (RS_HUB_PORT): exit 1 at once with rshub's log lines" \
        "status $QS_RC after $QS_SECS s: $(cat "$TMP/hubfail.out")"
fi
bg_wait occ_src 0 || true
bg_wait occ_hub 0 || true
rm -f "$RUN"/mirror.state-*
printf 'this is not a database, it was overwritten by hand\n%.0s' $(seq 1 100) \
    >"$RUN/mirror.state"
qs "$TMP/subfail.out" --smoke
if [ "$QS_RC" = 1 ] && [ "$QS_SECS" -le 25 ] &&
   grep -q "^quickstart: rssub.* exited (status [0-9]*)" "$TMP/subfail.out" &&
   grep -q "  | .*cannot open the state" "$TMP/subfail.out"; then
    ok "rssub with a broken state: exit 1 at once with rssub's log lines"
else
    bad "rssub with a broken state: exit 1 at once with rssub's log lines" \
        "status $QS_RC after $QS_SECS s: $(cat "$TMP/subfail.out")"
fi
check "... and says how to start afresh" grep -q -- "afresh: deploy/quickstart.sh --reset" \
    "$TMP/subfail.out"

note "--reset"
qs "$TMP/reset.out" --smoke --reset
smoke_ok "--reset starts the demo afresh" "$TMP/reset.out"
check "... without the files made by hand" test ! -e "$RUN/demo-source/hand/new.txt"
qs "$TMP/last.out" --smoke
smoke_ok "and a run after that" "$TMP/last.out"

note "what the runs left"
check "no daemon of any run is left running" none_running "${QS_SEEN[@]}"
pat='ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:'
if grep -Eq "$pat" "$RUN"/*.log; then
    bad "no sanitizer report in the daemons' logs" \
        "$(grep -E -A14 "$pat" "$RUN"/*.log | head -n 40)"
else
    ok "no sanitizer report in the daemons' logs"
fi
expect_eq "the checkout's run/quickstart is untouched" \
    "$(ls -la --time-style=full-iso "$CHECKOUT_RUN" 2>&1)" "$checkout_run_before"
finish
