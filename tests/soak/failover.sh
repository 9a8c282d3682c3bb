#!/usr/bin/env bash
# failover.sh - the soak run of the failover scenario of issue 15
# (tests/integration/lib/ha_scenario.sh, the same as test_ha_failover.sh
# and test_ha_partition.sh): a primary, two replicas, three Sentinels; two
# rshub nodes on sentinel://... with --ack-replicas 2 (every replica: the
# switchovers lose acknowledged entries with fewer, docs/internals/
# failover.md; HS_ACK_REPLICAS=1 to see it); a publisher at
# 200/s; three WebSocket subscribers resuming with since=; a WebSub
# subscriber; an rssub mirror of a changing rssource Source. For --minutes
# N, seeded faults of the primary, kill -9, SIGSTOP and a switchover
# (SENTINEL FAILOVER) in turn (the first picked by the seed), 5 to 15 s
# apart (seeded): each waits for Sentinel's failover, brings the old
# primary back as a replica (restart, SIGCONT, or Sentinel's own doing)
# and for publishing to resume. Then the same checks as the tests, over
# the whole run: every fault resumed within 20 s; nothing acknowledged
# between a fault and the promotion; every acknowledged id in the final
# primary's stream; every subscriber got that stream in order with no
# skip; the mirror converges with no gap pull and audits clean. Prints a
# summary (faults, failover and resume times, publishes, refusals, the
# writes the stopped primaries held alone) and stops by itself.
#   RS_BUILD_DIR=build tests/soak/failover.sh --minutes 10 [--seed N] [--keep]
# The topic's backlog is not trimmed during the run (every id is checked
# against the stream): about 100 MB per Redis node per 10 minutes.
# --keep (or RS_KEEP_TMP=1) keeps the temp dir. Stops only the processes
# it started.
# shellcheck source-path=SCRIPTDIR
set -u
usage() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1 && !/shellcheck/ { sub(/^# ?/, ""); print }' "$0" >&2
    exit 2
}
MINUTES=10
SEED=${RS_HA_SEED:-20261127}
while [ $# -gt 0 ]; do
    case $1 in
        --minutes) MINUTES=${2:?}; shift 2 ;;
        --seed) SEED=${2:?}; shift 2 ;;
        --keep) export RS_KEEP_TMP=1; shift ;;
        -h|--help) usage ;;
        *) echo "failover.sh: unknown argument $1" >&2; usage ;;
    esac
done
case $MINUTES$SEED in
    *[!0-9]*) echo "failover.sh: --minutes and --seed want whole numbers" >&2; exit 2 ;;
esac
export RS_SOURCE_DIR=${RS_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
LIB=$RS_SOURCE_DIR/tests/integration/lib
# shellcheck source=../integration/lib/common.sh
. "$LIB/common.sh"
# shellcheck source=../integration/lib/websub.sh
. "$LIB/websub.sh"
# shellcheck source=../integration/lib/source.sh
. "$LIB/source.sh"
# shellcheck source=../integration/lib/sub.sh
. "$LIB/sub.sh"
# shellcheck source=../integration/lib/ha.sh
. "$LIB/ha.sh"
HS_ACK_REPLICAS=${HS_ACK_REPLICAS:-2}
# shellcheck source=../integration/lib/ha_scenario.sh
. "$LIB/ha_scenario.sh"

for b in "$RSSUB" "$RSSOURCE" "$RSHUB"; do
    [ -x "$b" ] || { bad "built: $b"; sub_finish; }
done
RANDOM=$SEED
# shellcheck disable=SC2034 # read by lib/ha_scenario.sh
HS_SEED=$SEED HS_BACKLOG_MAX=0 HS_PUB_MAX_SECS=$((MINUTES * 60 + 300))
note "seed $SEED, $MINUTES min"

hs_setup
hs_publish_start
check "202s under load before the first fault" wait_until 10 hs_some_acked_after 0 200
END=$((SECONDS + MINUTES * 60))
KINDS=(kill9 stop switch)
ki=$((RANDOM % 3))
round=0
declare -a FO_SECS
declare -A CNT=([kill9]=0 [stop]=0 [switch]=0)
while [ "$SECONDS" -lt "$END" ]; do
    sleep $((5 + RANDOM % 11))
    round=$((round + 1))
    # the Source changes across each fault (seeded, a new seed per round)
    bg "churn$round" "$PY" -c "$CHURN_PY" "$HS_SRC" $((SEED + round)) 40 0.1 \
        >"$TMP/churn$round.out"
    sleep 1
    kind=${KINDS[$ki]}
    ki=$(((ki + 1) % 3))
    CNT[$kind]=$((CNT[$kind] + 1))
    hs_fault "$kind" || break
    FO_SECS+=("$(awk -v a="$HA_FAILOVER_T" -v b="$HA_FAULT_T" 'BEGIN { printf "%.1f", a - b }')")
    bg_wait "churn$round" 60 || bad "round $round: the churn ends within 60 s"
    # both replicas in sync with the new primary before the next fault
    for n in $(ha_replicas); do
        ha_wait_replica "$n" "$(ha_primary)" 30 >/dev/null ||
            bad "round $round: $n replicates from the new primary within 30 s"
    done
done
hs_stop_load
note "checks ($((SECONDS - T0)) s)"
hs_checks

# ---------------------------------------------------------------- summary
unrepl=0
for f in "$TMP"/old.*.ids; do
    [ -e "$f" ] || continue
    unrepl=$((unrepl + $(comm -23 <(sort "$f") <(sort "$TMP/stream.ids") | wc -l)))
done
note "summary (seed $SEED, $MINUTES min)"
echo "     faults: $round (kill -9: ${CNT[kill9]}, SIGSTOP: ${CNT[stop]}, SENTINEL FAILOVER: ${CNT[switch]}), failovers seen: ${#FO_SECS[@]}"
echo "     failover seen by the test (s): ${FO_SECS[*]:-none}"
echo "     first 202 after each fault (s): $("$PY" -c 'import json,sys; print(" ".join("%.1f" % x for x in json.load(open(sys.argv[1]))["resume_s"]))' "$TMP/report.json" 2>/dev/null)"
echo "     publishes: $("$PY" -c 'import json,sys; r = json.load(open(sys.argv[1])); print("%d sent, %d acknowledged, %d refused" % (r["publishes"], r["acked"], r["refused"]))' "$TMP/report.json" 2>/dev/null)"
echo "     entries the stopped primaries held alone (lost, reached nobody): $unrepl"
echo "     the final stream: $(wc -l <"$TMP/stream.ids") entries"
sub_finish
