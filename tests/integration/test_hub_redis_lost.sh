#!/usr/bin/env bash
# test_hub_redis_lost.sh - Redis loses the backlog (restarted without
# persistence) while rssub's node is down: two rshub nodes on one Redis,
# rssource pushing to N1, rssub following the change channel on N2 only.
# N2 is killed, files change (accepted through N1), Redis restarts empty,
# N2 restarts: rssub resumes with since= an id neither Redis nor N2 holds
# any more. The hub reads it as "now" and says so in the 101 (X-Hub-Since:
# now); rssub pulls to cover what it cannot be told, and the mirror
# converges at once, not at the next safety pull (10 min).
# Real redis-server, rshub, rssource, rssub on loopback. Needs
# RS_BUILD_DIR (ctest sets it); stops only the processes it started.
# shellcheck disable=SC2317 # helpers run through check/wait_until
# shellcheck source-path=SCRIPTDIR
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"

for b in "$RSSUB" "$RSSOURCE" "$RSHUB"; do
    [ -x "$b" ] || { bad "built: $b"; sub_finish; }
done

declare -A NODE_HTTP NODE_WS
# node_start NAME: rshub NAME in open mode; a restart keeps its ports.
node_start() {
    local n=$1 ports=()
    [ -n "${NODE_HTTP[$n]:-}" ] &&
        ports=(--listen "127.0.0.1:${NODE_HTTP[$n]}" --ws-listen "127.0.0.1:${NODE_WS[$n]}")
    hub_start "$n" --open "${ports[@]}" || return 1
    NODE_HTTP[$n]=${HUB_HTTP[$n]}
    NODE_WS[$n]=${HUB_WS[$n]}
}

# shellcheck disable=SC2119 # no persistence: the point of the test
redis_start || { bad "redis-server starts"; sub_finish; }
node_start N1 || { bad "rshub N1 starts"; sub_finish; }
node_start N2 || { bad "rshub N2 starts"; sub_finish; }

D=$TMP/src
mkdir -p "$D" "$TMP/m"
for i in $(seq 30); do printf 'file %s\n' "$i" >"$D/f$i.txt"; done
src_start s "$D" --hub "http://127.0.0.1:${NODE_HTTP[N1]}/hub" \
    --resourcelist-refresh 0 --retry-max 500ms ||
    { bad "rssource starts"; sub_finish; }
B=$(src_url s)
printf 'first\n' >"$D/first.txt"
check "the change channel is advertised" wait_until 15 caplist_ws s change-notification
CH=$(caplist_ws s change-notification)
SUB_READY_SECS=30
sub_start r "$B" "$TMP/m/mirror" "$TMP/m.db" \
    --channel "ws://127.0.0.1:${NODE_WS[N2]}/channel/$CH" ||
    { bad "rssub run on N2 gets ready" "$(tail -n 20 "${SUB_LOG[r]}")"; sub_finish; }
check "baseline: the mirror equals the Source" converged 20 "$D" "$TMP/m/mirror"
printf 'pushed\n' >"$D/pushed.txt"
check "a change comes by push (rssub holds an id of the backlog)" \
    converged 10 "$D" "$TMP/m/mirror"

backlog_len() { ht topic --http "${NODE_HTTP[N1]}" --name "$CH" --get backlog.length; }
n0=$(backlog_len)
hub_kill9 N2
for i in $(seq 20); do printf 'changed %s\n' "$i" >"$D/f$i.txt"; done
# rssource batches changes into notifications: the 20 come in one or a few
grown() { [ "$(backlog_len)" -gt "${n0:-0}" ]; }
check "the changes are in Redis (through N1)" wait_until 10 grown
sleep 2
redis_stop
redis_start || bad "redis-server restarts, empty"
node_start N2 || bad "rshub N2 restarts on its ports"
check "rssub, back on N2, pulls to cover what the hub cannot tell (X-Hub-Since: now)" \
    wait_until 30 grep -q 'channel live again: pulling change lists' "${SUB_LOG[r]}"
if converged 20 "$D" "$TMP/m/mirror" >"$TMP/conv.out" 2>&1; then
    ok "the mirror converges at once (not at the safety pull)"
else
    bad "the mirror converges at once (not at the safety pull)" "$(head -n 8 "$TMP/conv.out")"
fi
sub_stop r
expect_eq "rssub: SIGTERM, exit 0" "$SUB_RC" 0
sub_finish
