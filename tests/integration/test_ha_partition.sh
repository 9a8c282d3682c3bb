#!/usr/bin/env bash
# test_ha_partition.sh - issue 15: the Redis primary SIGSTOPped under load
# (a partition: it answers nobody and replicates nothing) must not go on
# acknowledging alone, and when it runs again after the failover it comes
# back as a replica without its unreplicated writes reaching anyone
# (docs/internals/failover.md). The scenario of test_ha_failover.sh
# (lib/ha_scenario.sh: two rshub nodes on sentinel://... with
# --ack-replicas 1, a publisher at 200/s, three WebSocket subscribers
# resuming with since=, a WebSub subscriber, an rssub mirror of an
# rssource Source), with SIGSTOP instead of kill -9. While it is stopped,
# rshub's writes queued to it and a canary entry written straight to it
# wait in its sockets; SIGCONT two seconds after Sentinel's failover runs
# them on the old primary alone, until Sentinel makes it a replica (within
# 30 s). Then: nothing sent after the stop was acknowledged before a
# replica was promoted; every acknowledged id is in the new primary's
# stream, the canary is not; every subscriber got exactly that stream,
# byte for byte (nothing the old primary held alone), in order, no skip;
# the replicas, the old primary among them, hold the same stream; the
# mirror converges with no gap pull.
# About a minute.
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
hs_fault stop
sleep 4                     # publishing goes on past the failover
hs_stop_load
note "churn: $(cat "$TMP/churn.out"); checks ($((SECONDS - T0)) s)"
hs_checks
sub_finish
