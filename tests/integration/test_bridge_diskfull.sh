#!/usr/bin/env bash
# test_bridge_diskfull.sh - rsbridge on a full disk: redis-server, rshub,
# one pull-only Source (lib/bridge_source.py, shape A), rsbridge, a
# WebSocket recorder on the bridged change channel and an rssub mirror.
# The bridge's disk fills (RLIMIT_FSIZE lowered from outside: every write
# of its state fails) while the Source changes twice: the bridge stays up,
# says why its polls fail and retries them; once the disk has room the
# recorded stream is every change of the Source, once, in order, and the
# mirror holds the Source. About 15 s.
# Needs RS_BUILD_DIR; stops only the processes it started.
# shellcheck disable=SC2317 # helpers run through check/wait_until
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"
# shellcheck source=lib/bridge.sh
. "$(dirname "$0")/lib/bridge.sh"
bridge_require

# shellcheck disable=SC2119 # no persistence wanted
redis_start || exit 1
hub_start h --open || exit 1
if ! bsrc_start a A --seed 404 --initial 30 --rotate 15; then
    bad "the Source starts"
    bridge_finish
fi
REAL_RSBRIDGE=$RSBRIDGE
RSBRIDGE=$(full_disk_wrap "$REAL_RSBRIDGE")
if bridge_start br --source "$(bsrc_url a)" --interval 500ms \
        --contact mailto:bridge-test@example.org; then
    ok "rsbridge starts"
else
    bad "rsbridge starts"
    bridge_finish
fi
RSBRIDGE=$REAL_RSBRIDGE
U=$(bridged br a)
record r br a change || bad "a recorder on the change channel"
if sub_start m "$U" "$TMP/m.mirror" "$TMP/m.state"; then
    ok "rssub follows the bridged Source"
else
    bad "rssub follows the bridged Source" "$(tail -n 20 "${SUB_LOG[m]}")"
fi
check "the mirror follows the hub's channel" wait_until 30 mirror_following m
check "the mirror holds the Source" wait_until 30 mirror_same a "$TMP/m.mirror"

note "the bridge's disk is full while the Source changes"
if ! full_disk "${BR_PID[br]}" 0; then
    note "SKIP the rest: prlimit(2) on another process is not allowed here"
    bridge_finish
fi
bs a change 20 >/dev/null || bad "the Source changes"
poll_failed() {
    grep -q 'msg="poll failed, will retry".*disk I/O error' "${BR_LOG[br]}"
}
check "the bridge says its polls fail, and why" wait_until 15 poll_failed
bs a change 10 >/dev/null || bad "the Source changes again"
sleep 2
check "the bridge is still running" kill -0 "${BR_PID[br]}"
retries=$(grep -c 'msg="poll failed, will retry"' "${BR_LOG[br]}")
check "it retried ($retries failed polls logged)" test "$retries" -ge 2

note "room again"
full_disk "${BR_PID[br]}" inf || bad "the limit is lifted"
bs a change 5 >/dev/null || bad "the Source changes once more"
check "the mirror holds the Source" wait_until 40 mirror_same a "$TMP/m.mirror"
check "the outbox is empty" wait_until 20 bridge_idle br a
check "the recorded stream is every change, once, in order" \
    wait_until 20 bsx check-stream a --sub "$TMP/r.rec.jsonl" \
    --bridged "$U" --mode exact
record_stop r
bridge_finish
