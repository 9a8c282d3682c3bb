#!/usr/bin/env bash
# test_sub_mirrorlock.sh - the mirror directory of rssub, against rssource
# (polled, no hub):
#  1. One writer per mirror: a second rssub with another state is refused
#     the mirror a daemon holds (sync exit 1, audit --fix exit 3, naming
#     the holder's pid; through a symlinked spelling too), and deletes
#     nothing of it; a report-only audit still runs beside the daemon.
#  2. The audit beside the daemon with the daemon's config (metrics-listen
#     on the daemon's port): it serves no metrics, exits 0, in sync.
#  3. The mirror moved while the daemon runs: it stops with an error
#     (exit 1) within seconds, writing nothing more into it.
#  4. The mirror missing at the next start: refused (exit 1, not created);
#     an empty mirror: everything fetched again, loudly (last_error).
# shellcheck source-path=SCRIPTDIR disable=SC2317 # helpers run through check
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"

for b in "$RSSUB" "$RSSOURCE"; do
    [ -x "$b" ] || { bad "built: $b"; sub_finish; }
done

N=20
D=$TMP/src
M=$TMP/m/mirror
ST=$TMP/m.db
mkdir -p "$D/a" "$TMP/m" "$TMP/other"
for i in $(seq 1 $N); do echo "file $i" >"$D/a/f$i.txt"; done
src_start s "$D" || { bad "rssource starts"; sub_finish; }
URL=$(src_url s)

logged_in() { grep -Eq -- "$2" "$TMP/$1.log"; }
not_logged() { ! grep -Eq -- "$2" "$TMP/$1.log"; }

# ================================================ 1. one writer per mirror
note "1. a second rssub on a mirror a daemon holds"
if sub_start A "$URL" "$M" "$ST" --transport poll --poll-interval 1s; then
    ok "daemon A mirrors the Source"
else
    bad "daemon A starts" "$(tail -n 20 "${SUB_LOG[A]}")"
    sub_finish
fi
check "A's mirror is complete" test "$(sub_files "$M")" = "$N"
sub_cmd B sync "$URL" "$M" "$TMP/other/b.db"
sub_exit B 1
check "B names the mirror in use and A's pid" \
    logged_in B "in use by another rssub.*pid=${SUB_PID[A]}"
check "B's refused state is not left behind" test ! -e "$TMP/other/b.db"
ln -s "$TMP/m" "$TMP/m-link"
sub_cmd Bfix audit "$URL" "$TMP/m-link/mirror/" "$TMP/other/c.db" --fix
sub_exit Bfix 3
check "audit --fix through a symlinked spelling is refused too" \
    logged_in Bfix "in use by another rssub"
check "the mirror lost nothing" test "$(sub_files "$M")" = "$N"
sub_cmd Bro audit "$URL" "$M" "$ST"
sub_exit Bro 0

# ============================ 2. audit beside the daemon with its config
note "2. audit -c with the daemon's metrics-listen"
cat >"$TMP/rssub.conf" <<EOF
[rssub]
source = $URL
metrics-listen = 127.0.0.1:${SUB_METRICS[A]}
EOF
timeout 60 "$RSSUB" audit -c "$TMP/rssub.conf" --mirror "$M" --state "$ST" \
    --log-format logfmt --no-progress >"$TMP/Ac.out" 2>"$TMP/Ac.log"
SUB_RC=$?
SUB_LOGS+=("$TMP/Ac.log")
sub_exit Ac 0
check "it did not try to serve metrics" \
    not_logged Ac "cannot serve metrics"
check "it said nothing on stdout (in sync)" test ! -s "$TMP/Ac.out"

# ================================================ 3. moved while running
note "3. the mirror moved under the daemon"
mv "$M" "$TMP/m/moved"
i=0
while sub_alive A && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
if sub_alive A; then
    bad "A stops within 10 s of its mirror moving"
    sub_stop A
else
    ok "A stops within 10 s of its mirror moving"
    pid_wait "${SUB_PID[A]}" 5
    SUB_RC=$WAIT_RC
    SUB_PID[A]=
fi
check "A exits 1 (got $SUB_RC)" test "$SUB_RC" = 1
check "A says why" grep -q "no longer where it was configured" "${SUB_LOG[A]}"
check "nothing made at the configured path" test ! -e "$M"

# ============================================ 4. missing, then empty
note "4. restart: the mirror missing, then empty"
sub_cmd C sync "$URL" "$M" "$ST"
sub_exit C 1
check "C refuses a missing mirror whose state lists files" \
    logged_in C "mirror directory is missing"
check "C did not create it" test ! -e "$M"
mkdir "$M"
sub_cmd E sync "$URL" "$M" "$ST"
sub_exit E 0
check "E says the mirror held none of the state's files" \
    logged_in E "holds none of the files the state lists"
synced_is E "fetched=$N failed=0"
check "E refilled the mirror" test "$(sub_files "$M")" = "$N"
sub_cmd Es status "$URL" "$M" "$ST"
check "status says so (last_error)" \
    grep -q "last_error .*held none of the files" "$TMP/Es.out"

sub_finish
