#!/usr/bin/env bash
# test_ha_switchover.sh - issue 15: a failover asked of Sentinel (SENTINEL
# FAILOVER, a planned switchover) while the primary is healthy. The old
# primary stays up and a master until Sentinel turns it into a replica,
# about ten seconds later, and meanwhile takes whatever a client still
# sends it; its replicas no longer confirm anything. Only +switch-master
# tells rshub to move (docs/internals/failover.md). The scenario of
# test_ha_failover.sh (lib/ha_scenario.sh: two rshub nodes on
# sentinel://... with --ack-replicas 1, a publisher at 200/s, WebSocket
# subscribers resuming with since=, a WebSub subscriber, an rssub mirror
# of an rssource Source) with the switchover as the fault: both hubs name
# the new primary within 5 s of its promotion; every acknowledged
# id is in the new primary's stream; every subscriber got that stream, in
# order, no skip; the old primary ends a replica holding the same stream;
# the mirror converges with no gap pull. About a minute.
# With --ack-replicas 2 of the 2 replicas: with 1 of 2 the old primary,
# still a primary until Sentinel reconfigures it, has its other replica
# confirm writes that the promoted one never gets, and they are lost after
# being answered 202 and delivered (94-196 per run; docs/internals/
# failover.md, "Switchovers"). HS_ACK_REPLICAS=1 shows that loss.
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
# shellcheck source=lib/ha.sh
. "$(dirname "$0")/lib/ha.sh"
HS_ACK_REPLICAS=${HS_ACK_REPLICAS:-2}
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
hs_fault switch
sleep 4                     # publishing goes on past the failover
hs_stop_load
note "churn: $(cat "$TMP/churn.out"); checks ($((SECONDS - T0)) s)"
hs_checks
sub_finish
