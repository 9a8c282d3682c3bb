#!/usr/bin/env bash
# test_chaos.sh - the CI run of the chaos scenario (lib/chaos.sh): a
# seeded writer changes a 2,000-file Source served by rssource, which
# pushes to two rshub nodes on one persistent Redis; three rssub mirrors
# follow it (WebSocket over both nodes, WebSub, polling) while seeded
# events kill -9 and restart a hub node, a mirror, rssource and Redis,
# reset every connection between the daemons (ss -K, Redis CLIENT KILL),
# and pause mirrors with SIGSTOP (one until the backlog is trimmed past
# it). Then every mirror must equal the Source byte for byte within
# 60 s, leave no failed fetch waiting more than 15 s past its backoff,
# audit clean, and no notification the hub acknowledged may be lost.
# About two minutes. RS_CHAOS_SEED picks (and reproduces) a run;
# RS_CHAOS_SECS sets how long the events go on (default 45).
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
# shellcheck source-path=SCRIPTDIR
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"
# shellcheck source=lib/chaos.sh
. "$(dirname "$0")/lib/chaos.sh"

for b in "$RSSUB" "$RSSOURCE" "$RSHUB"; do
    [ -x "$b" ] || { bad "built: $b"; sub_finish; }
done
SUB_READY_SECS=20

chaos_setup || sub_finish
note "chaos for ${RS_CHAOS_SECS:-45} s ($((SECONDS - T0)) s)"
chaos_run "${RS_CHAOS_SECS:-45}"
note "convergence ($((SECONDS - T0)) s)"
chaos_converge
note "checks ($((SECONDS - T0)) s)"
chaos_finish_checks
sub_finish
