#!/usr/bin/env bash
# test_bridge_names.sh - a Source's NAME stays with its URL across
# restarts (docs/bridge.md 1), real rsbridge processes on one state. Two
# Sources on one host (names HOST and HOST-2 by --source order):
#   - restarted with the order swapped, each keeps its name, and neither
#     is taken for a new Source (no "a new source" in the log);
#   - the first removed, the second keeps HOST-2; a new URL on the host
#     gets a name the state gives no other URL (HOST-3), not HOST;
#   - a [source HOST] section for another URL while the URL the state
#     names HOST is still a --source: refused (exit 2), saying which;
#   - the same section once that URL is no longer configured: it takes
#     the name (explicit wins), the --source keeps HOST-2.
# No Source answers and no hub is needed: the polls fail, /sources tells
# the names. Skips (exit 0) while bridge/rsbridge is not built.
# shellcheck disable=SC2317 # helpers run through check/wait_until
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"
# shellcheck source=lib/bridge.sh
. "$(dirname "$0")/lib/bridge.sh"
bridge_require

# a closed port: discovery fails at once, each poller is ready after its
# first poll (and the hub's 2 s)
U=http://127.0.0.1:9
N=127.0.0.1_9
BR_HUB_URL=http://127.0.0.1:9/hub
export BR_READY_SECS=20

# names BRIDGE: "NAME=URL" per Source of GET /sources, in its order.
names() {
    curl -sf --max-time 10 "$(bridge_url "$1" sources)" |
        "$PY" -c '
import json, sys
print(" ".join("%s=%s" % (s["name"], s["source"]) for s in json.load(sys.stdin)))'
}
# run_log BRIDGE: the log of its last run.
run_log() { tail -c +$((${BR_LOGOFF[$1]:-0} + 1)) "${BR_LOG[$1]}"; }
no_new_source() { ! run_log "$1" | grep -q 'a new source'; }
# restart BRIDGE ARGS...: stop the run (SIGTERM, exit 0), start another.
restart() {
    local name=$1
    shift
    bridge_stop "$name"
    expect_eq "$name: a run exits 0" "$BR_RC" 0
    bridge_asan_check "$name"
    bridge_start "$name" "$@" || { bad "$name: rsbridge starts again"; bridge_finish; }
}

note "two Sources on one host, then their order swapped"
bridge_start nm --source "$U/a/" --source "$U/b/" ||
    { bad "rsbridge starts"; bridge_finish; }
expect_eq "first run: by --source order" "$(names nm)" "$N=$U/a/ $N-2=$U/b/"
restart nm --source "$U/b/" --source "$U/a/"
expect_eq "order swapped: each URL keeps its name" "$(names nm)" \
    "$N-2=$U/b/ $N=$U/a/"
check "...and neither is a new Source (the state kept)" no_new_source nm

note "the first removed, a new URL added"
restart nm --source "$U/b/"
expect_eq "the first removed: the second keeps its name" "$(names nm)" \
    "$N-2=$U/b/"
restart nm --source "$U/c/" --source "$U/b/"
expect_eq "a new URL: a name the state gives no other URL" "$(names nm)" \
    "$N-3=$U/c/ $N-2=$U/b/"
says_new_c() { run_log nm | grep -q "a new source.*url=$U/c/"; }
check "...a new Source" says_new_c
no_new_source_b() { ! run_log nm | grep -q "a new source.*url=$U/b/"; }
check "...the one before is not" no_new_source_b

note "a [source NAME] section taking the name the state gives a --source"
bridge_stop nm
bridge_asan_check nm
cat >"$TMP/names.conf" <<EOF
[source $N]
url = $U/d/
EOF
refused=$(timeout 20 "$RSBRIDGE" -c "$TMP/names.conf" --source "$U/a/" \
    --hub "$BR_HUB_URL" --state "$TMP/nm.bstate" --listen 127.0.0.1:0 2>&1)
expect_eq "the URL it names still configured: exit 2" "$?" 2
says_which() {
    grep -q "section takes the name the state gives a --source.*section=$N .*name_of=$U/a/" \
        <<<"$refused"
}
check "...saying which name and which URL" says_which
bridge_start nm -c "$TMP/names.conf" --source "$U/b/" ||
    { bad "rsbridge starts with the section"; bridge_finish; }
expect_eq "that URL no longer configured: the section takes the name" \
    "$(names nm)" "$N=$U/d/ $N-2=$U/b/"
says_taken() { run_log nm | grep -q "a \[source NAME\] section takes"; }
check "...and says whose it was" says_taken
restart nm --source "$U/a/" --source "$U/b/"
expect_eq "the URL that lost its name: a name no other URL has" \
    "$(names nm)" "$N-4=$U/a/ $N-2=$U/b/"

bridge_finish
