#!/usr/bin/env bash
# test_ha_failover.sh - issue 15: kill -9 of the Redis primary mid-burst
# loses no acknowledged notification (docs/internals/failover.md).
# A primary, two replicas and three Sentinels on loopback (lib/ha.sh);
# two rshub nodes on sentinel://... with --ack-replicas 1; a publisher at
# 200 notifications/s over both nodes recording every 202 and every
# refusal; three WebSocket subscribers resuming with since= (two hop
# between the nodes every few seconds); a WebSub subscriber; an rssub
# mirror of an rssource Source publishing through the hub while its files
# change (lib/ha_scenario.sh). Four seconds into the burst the primary is
# killed: Sentinel promotes a replica, publishing resumes by itself within
# 20 s, nothing sent after the kill is acknowledged before the promotion,
# every acknowledged id is in the new primary's stream, every subscriber
# got that stream in order with no skip (WebSub may repeat), the mirror
# converges with no gap pull and audits clean, and the hubs name the new
# primary. About a minute.
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
# shellcheck source-path=SCRIPTDIR
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/websub.sh
. "$(dirname "$0")/lib/websub.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"
# Sentinel's down-after-milliseconds: 1 s (lib/ha.sh's default) let a
# loaded 2-CPU machine judge the promoted primary down too and fail over a
# second time, outside what this test is about (seen once in a full run)
HA_DOWN_MS=${HA_DOWN_MS:-3000}
# shellcheck source=lib/ha.sh
. "$(dirname "$0")/lib/ha.sh"
# shellcheck source=lib/ha_scenario.sh
. "$(dirname "$0")/lib/ha_scenario.sh"

for b in "$RSSUB" "$RSSOURCE" "$RSHUB"; do
    [ -x "$b" ] || { bad "built: $b"; sub_finish; }
done

hs_setup
note "publishing at $HS_RATE/s, the Source changing ($((SECONDS - T0)) s)"
hs_publish_start
bg churn "$PY" -c "$CHURN_PY" "$HS_SRC" 15 150 0.1 >"$TMP/churn.out"
check "202s under load before the fault" wait_until 10 hs_some_acked_after 0 200
sleep 2
hs_fault kill9
sleep 4                     # publishing goes on past the failover
hs_stop_load
note "churn: $(cat "$TMP/churn.out"); checks ($((SECONDS - T0)) s)"
hs_checks
sub_finish
