#!/usr/bin/env bash
# test_sub_pollcost.sh - a polling mirror pays for what changed, not for the
# list (issue 18, goal 4). rssource holds a 5,000-entry open Change List;
# rssub --no-push --poll-interval 500ms follows it. Counted in rssource's
# --access-log: over 10 idle polls every request is a 304 and a poll makes
# at most 2 (the open list's continuation and the Capability List); one new
# change, then 100, are read at a cost that scales with them, not with the
# list, and the mirror converges. Then rotation (a second Source with
# --page-size 40): the tail follows a list that closes into the next one,
# the mirror converges, and idle polls read no closed list again.
# RSSUB_POLL_FULL=1 (rssub's hidden switch: poll as before) makes the
# idle and busy checks fail, which shows they can.
# shellcheck disable=SC2317 # helpers run through check/wait_until
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"

D=$TMP/data
M=$TMP/mirror
LOG=$TMP/access.log
mkdir -p "$D" "$M"

# rounds DIR N R: N files f0..f(N-1), rewritten R times (each round is
# one settled batch per file, so each is a change of its own).
rounds() {
    local dir=$1 n=$2 r=$3 k
    for ((k = 0; k < r; k++)); do
        "$PY" - "$dir" "$n" "$k" <<'EOF'
import os, sys
d, n, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    with open(os.path.join(d, "f%d.txt" % i), "w") as f:
        f.write("file %d round %d\n" % (i, k))
EOF
        sleep 0.4
    done
}

# entries NAME PATH: <url> entries of a document of Source NAME.
entries() { get "$1" "$2" | grep -c '<url>'; }

# window FROM-LINE: the access log's lines after line FROM-LINE.
window() { tail -n +"$(($1 + 1))" "$LOG"; }
lines() { wc -l <"$LOG"; }

# cl_bytes FROM-LINE: body bytes of every Change List request after it.
cl_bytes() {
    window "$1" | awk '$3 ~ /changelist/ { b += $5 } END { print b + 0 }'
}

note "a Source with a 5,000-entry open Change List"
src_start s "$D" --settle 100ms --access-log "$LOG" ||
    { bad "rssource starts"; src_finish; }
rounds "$D" 500 10
check "the open Change List holds 5,000 entries" \
    wait_until 60 test "$(entries s resourcesync/changelist.xml)" -ge 5000
FULL=$(get s resourcesync/changelist.xml | wc -c)
note "the whole open list: $FULL bytes"

note "rssub polls it"
# not through check: its command substitution is a subshell, and the
# PID sub_start records would be lost with it (the rssub left running)
if sub_start p "$(src_url s)" "$M" "$TMP/sub.db" --no-push --poll-interval 500ms; then
    ok "rssub syncs"
else
    bad "rssub syncs"
fi
check "the mirror equals the Source" converged 60 "$D" "$M"
# one poll after the first sync reads the list whole: let it pass
sleep 2.5

note "10 idle polls"
L0=$(lines)
# polls_since FROM-LINE N: N polls (a Change List request each) since it
polls_since() { [ "$(window "$1" | grep -c 'changelist')" -ge "$2" ]; }
wait_until 40 polls_since "$L0" 10 >/dev/null
W=$(window "$L0")
NCL=$(printf '%s\n' "$W" | grep -c 'changelist')
NALL=$(printf '%s\n' "$W" | grep -c ' GET ')
N304=$(printf '%s\n' "$W" | awk '$4 == 304' | grep -c .)
BYTES=$(printf '%s\n' "$W" | awk '{ b += $5 } END { print b + 0 }')
note "idle: $NALL requests ($NCL of Change Lists), $N304 answered 304, $BYTES bytes"
check "10 idle polls happened (a Change List request each)" test "$NCL" -ge 9
expect_eq "every idle request is answered 304" "$N304" "$NALL"
check "at most 2 requests a poll" test "$NALL" -le $((2 * NCL))
expect_eq "idle polls read no bytes" "$BYTES" 0

note "one new change"
L1=$(lines)
printf 'one\n' >"$D/one.txt"
check "the mirror has it" converged 30 "$D" "$M"
sleep 1.5
B1=$(cl_bytes "$L1")
note "1 change: $B1 bytes of Change Lists, the whole list is $FULL"
check "one change costs under 1/50 of the list" test "$B1" -lt $((FULL / 50))
check "...and was read (the continuation came back 200)" \
    sh -c "tail -n +$((L1 + 1)) '$LOG' | grep 'changelist' | grep -q ' 200 '"

note "100 new changes"
L2=$(lines)
for i in $(seq 1 100); do printf 'h %d\n' "$i" >"$D/h$i.txt"; done
check "the mirror has them" converged 30 "$D" "$M"
sleep 1.5
B100=$(cl_bytes "$L2")
note "100 changes: $B100 bytes of Change Lists"
check "100 changes cost more than 1 ..." test "$B100" -gt "$B1"
check "... and under 1/5 of the whole list" test "$B100" -lt $((FULL / 5))
check "a deletion arrives too" sh -c "rm '$D/one.txt'"
check "the mirror follows it" converged 30 "$D" "$M"

note "the documents' validators, by hand"
H=$(curl -s -D - -o /dev/null "$(src_url s resourcesync/changelist-index.xml)" | tr -d '\r')
E=$(printf '%s\n' "$H" | sed -n 's/^ETag: //Ip')
check "the index has an ETag" test -n "$E"
expect_eq "the index with its ETag: 304" \
    "$(status_code s resourcesync/changelist-index.xml -H "If-None-Match: $E")" 304
H=$(curl -s -D - -o /dev/null "$(src_url s resourcesync/resourcelist.xml)" | tr -d '\r')
E=$(printf '%s\n' "$H" | sed -n 's/^ETag: //Ip')
LM=$(printf '%s\n' "$H" | sed -n 's/^Last-Modified: //Ip')
expect_eq "the Resource List with its ETag: 304" \
    "$(status_code s resourcesync/resourcelist.xml -H "If-None-Match: $E")" 304
expect_eq "the Resource List with its Last-Modified: 304" \
    "$(status_code s resourcesync/resourcelist.xml -H "If-Modified-Since: $LM")" 304
expect_eq "a continuation from a change of another list: 404" \
    "$(status_code s 'resourcesync/changelist-1.xml?after=999999')" 404
expect_eq "a malformed continuation: 400" \
    "$(status_code s 'resourcesync/changelist-1.xml?after=x')" 400
sub_stop p
src_stop s

note "rotation: a list that closes is followed into the next"
D2=$TMP/data2
M2=$TMP/mirror2
LOG=$TMP/access2.log
mkdir -p "$D2" "$M2"
src_start r "$D2" --settle 100ms --page-size 40 --access-log "$LOG" ||
    { bad "rssource r starts"; src_finish; }
rounds "$D2" 30 1
if sub_start q "$(src_url r)" "$M2" "$TMP/sub2.db" --no-push --poll-interval 500ms; then
    ok "rssub syncs"
else
    bad "rssub syncs"
fi
sleep 2.5
LQ=$(lines)
rounds "$D2" 30 4
check "the mirror equals the Source across rotations" converged 60 "$D2" "$M2"
NL=$(get r resourcesync/changelist-index.xml | grep -c '<sitemap>')
check "the Source rotated (lists: $NL)" test "$NL" -ge 3
sleep 2.5
L3=$(lines)
wait_until 30 polls_since "$L3" 10 >/dev/null
W=$(window "$L3")
NALL=$(printf '%s\n' "$W" | grep -c ' GET ')
N304=$(printf '%s\n' "$W" | awk '$4 == 304' | grep -c .)
expect_eq "after rotations, idle polls are all 304" "$N304" "$NALL"
check "no Change List is read whole twice while polling" sh -c \
    "! tail -n +$((LQ + 1)) '$LOG' | grep -E 'changelist-[0-9]+\.xml ' | awk '{print \$3}' | sort | uniq -d | grep -q ."
sub_stop q
src_asan_check r
sub_finish
