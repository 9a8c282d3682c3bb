#!/usr/bin/env bash
# chaos.sh - the soak run of the chaos scenario (tests/integration/
# lib/chaos.sh, the same as tests/integration/test_chaos.sh): a seeded
# writer changes a 2,000-file Source while seeded events kill -9 and
# restart hub nodes, mirrors, rssource and Redis and pause mirrors, for
# --minutes N; then every mirror must converge, retry each failed fetch
# when its backoff says (the same bounds for all three), audit clean, and
# no acknowledged notification may be lost. Prints the checks and a
# summary (events, writes, notifications, gap pulls, convergence times,
# retries past due); exit 0 when every check passed.
#   RS_BUILD_DIR=build tests/soak/chaos.sh --minutes 30 [--seed N]
#       [--converge SECS] [--retry-slack SECS] [--keep]
# --keep (or RS_KEEP_TMP=1) keeps the temp dir: every daemon's log, the
# Source, the mirrors, their state. Stops only the processes it started.
# shellcheck source-path=SCRIPTDIR
set -u
usage() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1 && !/shellcheck/ { sub(/^# ?/, ""); print }' "$0" >&2
    exit 2
}
MINUTES=10
while [ $# -gt 0 ]; do
    case $1 in
        --minutes) MINUTES=${2:?}; shift 2 ;;
        --seed) export RS_CHAOS_SEED=${2:?}; shift 2 ;;
        --converge) export RS_CHAOS_CONVERGE_SECS=${2:?}; shift 2 ;;
        --retry-slack) export RS_CHAOS_RETRY_SLACK_SECS=${2:?}; shift 2 ;;
        --keep) export RS_KEEP_TMP=1; shift ;;
        -h|--help) usage ;;
        *) echo "chaos.sh: unknown argument $1" >&2; usage ;;
    esac
done
case $MINUTES in
    ''|*[!0-9]*) echo "chaos.sh: --minutes wants a whole number" >&2; exit 2 ;;
esac
export RS_SOURCE_DIR=${RS_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
LIB=$RS_SOURCE_DIR/tests/integration/lib
# shellcheck source=../integration/lib/common.sh
. "$LIB/common.sh"
# shellcheck source=../integration/lib/source.sh
. "$LIB/source.sh"
# shellcheck source=../integration/lib/sub.sh
. "$LIB/sub.sh"
# shellcheck source=../integration/lib/chaos.sh
. "$LIB/chaos.sh"

for b in "$RSSUB" "$RSSOURCE" "$RSHUB"; do
    [ -x "$b" ] || { bad "built: $b"; sub_finish; }
done
# shellcheck disable=SC2034 # read by lib/sub.sh
SUB_READY_SECS=60

chaos_setup || sub_finish
note "chaos for $MINUTES min ($((SECONDS - T0)) s)"
chaos_run $((MINUTES * 60))
note "convergence ($((SECONDS - T0)) s)"
chaos_converge
note "checks ($((SECONDS - T0)) s)"
chaos_finish_checks
sub_finish
