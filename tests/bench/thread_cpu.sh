#!/usr/bin/env bash
# thread_cpu.sh - the CPU each thread of some processes uses, sampled: for
# docs/benchmarks.md's "where the time goes" beside a running benchmark
# (is one thread saturated, or the machine?). Every INTERVAL seconds, for
# COUNT samples, reads /proc/PID/task/*/stat of each process named, and
# prints per thread "time pid tid comm user% sys%" for the interval (% of
# one CPU). Reads only; stops by itself.
#
#   thread_cpu.sh [--interval S] [--count N] NAME...    (e.g. rssub rssource)
set -euo pipefail

interval=2
count=14
while [ $# -gt 0 ]; do
    case $1 in
    --interval) interval=$2; shift 2 ;;
    --count) count=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "thread_cpu: name at least one process" >&2; exit 2; }
hz=$(getconf CLK_TCK)

# ticks: "pid tid comm utime stime" per thread of the processes named
ticks() {
    local name p t line comm
    for name in "$@"; do
        for p in $(pgrep -x "$name" || true); do
            for t in /proc/"$p"/task/*; do
                read -r line 2>/dev/null <"$t/stat" || continue
                comm=$(cat "$t/comm" 2>/dev/null || echo "?")
                # fields after the ")" of comm: utime is the 12th, stime 13th
                # shellcheck disable=SC2086
                set -- ${line#*) }
                echo "$p ${t##*/} $comm ${12} ${13}"
            done
        done
    done
}

prev=$(ticks "$@")
for _ in $(seq 1 "$count"); do
    sleep "$interval"
    cur=$(ticks "$@")
    now=$(date +%T)
    awk -v now="$now" -v hz="$hz" -v dt="$interval" '
        NR == FNR { u[$1 " " $2] = $4; s[$1 " " $2] = $5; next }
        ($1 " " $2) in u {
            printf "%s %s %s %s %.0f %.0f\n", now, $1, $2, $3,
                   100 * ($4 - u[$1 " " $2]) / hz / dt,
                   100 * ($5 - s[$1 " " $2]) / hz / dt }' \
        <(printf '%s\n' "$prev") <(printf '%s\n' "$cur")
    prev=$cur
done
