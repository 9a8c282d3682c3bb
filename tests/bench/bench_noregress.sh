#!/usr/bin/env bash
# bench_noregress.sh - the "no regression elsewhere" figures of issue 18
# (goal 5), before and after, A/B in one run (docs/benchmarks.md, "No
# regression (issue 18 goal 5)"). It measures nothing itself: it calls
#   bench_hub.sh --targets "rshub rshub-b"  (both rshubs up at once, every
#       scenario run against one then the other): deliveries/s at 1,000
#       subscribers (fanout), accepted publishes/s at 10,000 subscribers
#       (heavy, 100 asked), bytes per idle connection (19,000 idle);
#       --hub-rounds N runs it N times, the binary that goes first swapped
#       each round, so each figure has N samples per binary and the spread
#       of a binary's own samples is the run's noise;
#   bench_sub.sh --parts million --rssub-b: rssub's baseline (sync) of a
#       static 1,000,000-entry Resource List served by nginx, both rssubs
#       in turn: peak RSS and wall time;
# and prints one table: figure, before, after, after/before, noise, goal.
# Starts only the called scripts (they start and stop their own servers
# by PID) and a load-average sampler; stops those, by PID.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
before=""
after=""
parts="hub sub"
hub_scenarios="idle fanout heavy"
hub_rounds=2
dur=10
drain=5
rates="1000 5000"
million=1000000
mpart=50000
mreps=1
mroot=/dev/shm
nice_n=""
out=""
keep=0

usage() {
    cat <<EOF
Usage: $0 --before BUILD_DIR --after BUILD_DIR [OPTION]...
Issue 18 goal 5: rshub's and rssub's figures before and after, A/B in one
run, through bench_hub.sh and bench_sub.sh (see docs/benchmarks.md).
  --before DIR       Release build dir of the "before" tree (hub/rshub,
                     subscriber/rssub, source/rssource)
  --after DIR        Release build dir of the "after" tree (the same, and
                     tests/bench/wsload, the load tool of both hub runs)
  --parts LIST       of: hub sub (default "$parts")
  --hub-scenarios L  bench_hub.sh scenarios, of: idle fanout heavy
                     (default "$hub_scenarios"; fewer to rerun one figure)
  --hub-rounds N     bench_hub.sh runs; the binary that goes first swaps
                     every round (default $hub_rounds)
  --duration S       seconds per hub scenario (default $dur)
  --drain S          longest wait for late deliveries (default $drain)
  --rates LIST       fan-out publish rates at 1,000 subscribers (default
                     "$rates": every notification delivered at 1,000/s;
                     more than the machine can deliver at 5,000/s)
  --million N        entries of the static Resource List (default $million)
  --million-reps N   rssub syncs per binary; the first alternates (default $mreps)
  --mirror-root DIR  where rssub's mirrors and state go (default $mroot:
                     a tmpfs, so that the disk's file creation, about
                     2,200 files/s here, does not set the wall time)
  --quick            a short check: 1 hub round of 3 s, rate 1000 only,
                     100,000 entries
  --nice N           passed to both scripts (everything they start runs
                     at nice N; negative: root)
  --out FILE         also write the table (markdown) to FILE
  --keep             keep the logs and the called scripts' tables
Whole run with the defaults: about 7 minutes on 2 CPUs (--quick: 1).
EOF
}

while [ $# -gt 0 ]; do
    case $1 in
    --before) before=$2; shift ;;
    --after) after=$2; shift ;;
    --parts) parts=$2; shift ;;
    --hub-rounds) hub_rounds=$2; shift ;;
    --hub-scenarios) hub_scenarios=$2; shift ;;
    --duration) dur=$2; shift ;;
    --drain) drain=$2; shift ;;
    --rates) rates=$2; shift ;;
    --million) million=$2; shift ;;
    --million-reps) mreps=$2; shift ;;
    --mirror-root) mroot=$2; shift ;;
    --quick) hub_rounds=1; dur=3; drain=2; rates=1000; million=100000 ;;
    --nice) nice_n=$2; shift ;;
    --out) out=$2; shift ;;
    --keep) keep=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_noregress: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

die() { echo "bench_noregress: $*" >&2; exit 1; }
note() { echo "$*" >&2; }
has_part() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }

[ -n "$before" ] && [ -n "$after" ] || { usage >&2; exit 2; }
before=$(cd "$before" && pwd) || die "no build dir $before"
after=$(cd "$after" && pwd) || die "no build dir $after"
for d in "$before" "$after"; do
    bt=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$d/CMakeCache.txt" 2>/dev/null || true)
    [ "$bt" = Release ] || die "$d is not a Release build (CMAKE_BUILD_TYPE=${bt:-?})"
    need=()
    has_part hub && need+=(hub/rshub)
    has_part sub && need+=(subscriber/rssub source/rssource)
    [ "$d" = "$after" ] && has_part hub && need+=(tests/bench/wsload)
    for b in "${need[@]}"; do
        [ -x "$d/$b" ] || die "no $d/$b; build it: cmake --build $d -j2 --target $(basename "$b")"
    done
done
case $hub_rounds in ''|*[!0-9]*|0) die "--hub-rounds wants a positive number" ;; esac
nice_args=()
[ -z "$nice_n" ] || nice_args=(--nice "$nice_n")

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_noregress.XXXXXX")
child=""     # the called script running now
sampler=""   # the load-average sampler

cleanup() {
    local p
    for p in $child $sampler; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in $child $sampler; do
        wait "$p" 2>/dev/null || true
    done
    if [ $keep -eq 1 ]; then note "bench_noregress: kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run LOG CMD...: one called script, in the background so that a signal
# here can stop it (its own trap then stops what it started).
run() {
    local log=$1 rc=0
    shift
    "$@" >"$log" 2>&1 &
    child=$!
    wait "$child" || rc=$?
    child=""
    return $rc
}

busy_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat; }
all_ticks() { awk '/^cpu / {s = 0; for (i = 2; i <= NF; i++) s += $i; print s; exit}' /proc/stat; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# the machine's load while this runs: one-minute load average every 5 s
( while :; do echo "$(date +%s) $(cut -d' ' -f1 /proc/loadavg)"; sleep 5; done ) \
    >"$tmp/load.txt" 2>/dev/null &
sampler=$!
t_start=$(date +%s)
b0=$(busy_ticks)
a0=$(all_ticks)
load_start=$(loadavg)
ps -eo pid,ni,pcpu,etime,comm --sort=-pcpu | head -n 8 >"$tmp/ps-start.txt"

# ------------------------------------------------------------------ hub
# R[figure.who] = samples (space separated), who = before / after
declare -A R
declare -A NOTE
part_secs=""

hub_field() {   # FILE SCENARIO TARGET COLUMN (1 = scenario) -> value
    awk -F'|' -v s="$2" -v t="$3" -v c="$4" '
        { for (i = 2; i <= NF; i++) gsub(/^ +| +$/, "", $i) }
        $2 == s && $3 == t { print $(c + 1); exit }' "$1"
}

if has_part hub; then
    declare -A BIN=([before]="$before/hub/rshub" [after]="$after/hub/rshub")
    for ((round = 1; round <= hub_rounds; round++)); do
        # odd rounds: before is "rshub" (runs first), after is "rshub-b";
        # even rounds the other way round
        if [ $((round % 2)) = 1 ]; then a=before; b=after; else a=after; b=before; fi
        note "== hub round $round/$hub_rounds: rshub = $a, rshub-b = $b (load $(loadavg))"
        t0=$(date +%s)
        run "$tmp/hub-$round.log" "$here/bench_hub.sh" --build "$after" \
            --rshub "${BIN[$a]}" --rshub-b "${BIN[$b]}" --targets "rshub rshub-b" \
            --scenarios "$hub_scenarios" --rates "$rates" \
            --duration "$dur" --drain "$drain" "${nice_args[@]+"${nice_args[@]}"}" \
            --out "$tmp/hub-$round.md" ||
            die "bench_hub.sh failed (round $round): $(tail -n 5 "$tmp/hub-$round.log")"
        part_secs+="hub round $round $(($(date +%s) - t0)) s; "
        f=$tmp/hub-$round.md
        for who in before after; do
            t=rshub
            [ "$who" = "$b" ] && t=rshub-b
            R[idle.$who]+=" $(hub_field "$f" idle "$t" 19)"
            for r in $rates; do
                R[fanout-$r.$who]+=" $(hub_field "$f" "fanout-$r" "$t" 6)"
                R[fanout-$r-cpu.$who]+=" $(hub_field "$f" "fanout-$r" "$t" 7)"
                lost=$(hub_field "$f" "fanout-$r" "$t" 15)
                closed=$(hub_field "$f" "fanout-$r" "$t" 16)
                if [ "${lost:-0}" != 0 ] || [ "${closed:-0}" != 0 ]; then
                    NOTE[fanout-$r]+=" round $round $who: $closed closed, $lost lost;"
                fi
            done
            R[heavy-100.$who]+=" $(hub_field "$f" heavy-100 "$t" 5)"
            R[heavy-100-del.$who]+=" $(hub_field "$f" heavy-100 "$t" 6)"
            R[heavy-100-cpu.$who]+=" $(hub_field "$f" heavy-100 "$t" 7)"
            lost=$(hub_field "$f" heavy-100 "$t" 15)
            closed=$(hub_field "$f" heavy-100 "$t" 16)
            if [ "${lost:-0}" != 0 ] || [ "${closed:-0}" != 0 ]; then
                NOTE[heavy-100]+=" round $round $who: $closed closed, $lost lost;"
            fi
        done
        other=$(awk -F'|' 'NR > 2 && $11 ~ /[0-9]/ {s += $11} END {printf "%.0f", s}' "$f")
        NOTE[hub-other]+=" round $round: $other;"
        sed 's/^/   /' "$f" >&2
    done
fi

# ------------------------------------------------------------------ sub
sub_field() {   # FILE RUN-KEY COLUMN (1 = mirror on) -> value
    awk -F'|' -v k="$2" -v c="$3" '
        { for (i = 2; i <= NF; i++) { gsub(/^ +| +$/, "", $i); gsub(/\*/, "", $i) } }
        $3 == k { print $(c + 1); exit }' "$1"
}

if has_part sub; then
    nparts=$(((million + mpart - 1) / mpart))
    note "== rssub: baseline of a static $million-entry list ($nparts parts), before and after in turn (load $(loadavg))"
    t0=$(date +%s)
    run "$tmp/sub.log" "$here/bench_sub.sh" --build "$before" \
        --rssub-b "$after/subscriber/rssub" --parts million \
        --million "$million" --million-part "$mpart" --million-small 0 \
        --million-reps "$mreps" --mirror-roots "$mroot" \
        "${nice_args[@]+"${nice_args[@]}"}" --out "$tmp/sub.md" ||
        die "bench_sub.sh failed: $(tail -n 5 "$tmp/sub.log")"
    part_secs+="rssub $(($(date +%s) - t0)) s; "
    f=$tmp/sub.md
    for ((r = 1; r <= mreps; r++)); do
        for who in before after; do
            k=all-$nparts-parts-run$r
            [ "$who" = after ] && k=$k-rssub-b
            R[mrss.$who]+=" $(sub_field "$f" "$k" 6)"
            R[mwall.$who]+=" $(sub_field "$f" "$k" 4)"
            R[maudit.$who]+=" $(sub_field "$f" "$k" 11)"
            ok=$(sub_field "$f" "$k" 8)
            [ "$ok" = yes ] || NOTE[mrss]+=" run $r $who: mirror complete: ${ok:-no row};"
        done
    done
    sed 's/^/   /' "$f" >&2
fi

kill -TERM "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
sampler=""
t_end=$(date +%s)
busy=$(awk -v b=$(($(busy_ticks) - b0)) -v a=$(($(all_ticks) - a0)) 'BEGIN {printf "%.0f", (a > 0) ? 100 * b / a : 0}')
ps -eo pid,ni,pcpu,etime,comm --sort=-pcpu | head -n 8 >"$tmp/ps-end.txt"

# ------------------------------------------------------------------ table
# stats SAMPLES -> "mean min max n"
stats() {
    printf '%s\n' "$@" | grep -E '^-?[0-9.]+$' |
        awk '{s += $1; if (NR == 1 || $1 < mn) mn = $1; if (NR == 1 || $1 > mx) mx = $1}
             END {if (NR == 0) print "- - - 0"; else printf "%.6g %s %s %d\n", s / NR, mn, mx, NR}'
}
# cell SAMPLES -> "mean (s1; s2)" with thousands separators
fmtn() { awk -v v="$1" -v d="${2:-0}" 'BEGIN {if (v == "-") {print "-"; exit}
    s = sprintf("%." d "f", v); n = split(s, p, "."); i = p[1]; o = ""
    neg = (substr(i, 1, 1) == "-"); if (neg) i = substr(i, 2)
    while (length(i) > 3) {o = "," substr(i, length(i) - 2) o; i = substr(i, 1, length(i) - 3)}
    print (neg ? "-" : "") i o (n > 1 ? "." p[2] : "")}'; }
cell() {   # DECIMALS SAMPLES...
    local d=$1 mean n x list=""
    shift
    read -r mean _ _ n <<<"$(stats "$@")"
    [ "$n" != 0 ] || { echo "-"; return; }
    if [ "$n" -gt 1 ]; then
        for x in "$@"; do list+="${list:+; }$(fmtn "$x" "$d")"; done
        echo "$(fmtn "$mean" "$d") ($list)"
    else
        fmtn "$mean" "$d"
    fi
}

rows=()
worse=()
# row NAME KEY DIRECTION(higher/lower) DECIMALS GOAL
row() {
    local name=$1 key=$2 dir=$3 dec=$4 goal=$5
    local sb sa
    read -ra sb <<<"${R[$key.before]:-}"
    read -ra sa <<<"${R[$key.after]:-}"
    [ ${#sb[@]} -gt 0 ] || [ ${#sa[@]} -gt 0 ] || return 0
    local mb mnb mxb nb ma mna mxa na
    read -r mb mnb mxb nb <<<"$(stats "${sb[@]+"${sb[@]}"}")"
    read -r ma mna mxa na <<<"$(stats "${sa[@]+"${sa[@]}"}")"
    local ratio noise verdict
    ratio=$(awk -v a="$ma" -v b="$mb" 'BEGIN {if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.3f", a / b}')
    # noise: the largest spread of one binary's own samples, relative to its mean
    noise=$(awk -v mnb="$mnb" -v mxb="$mxb" -v mb="$mb" -v nb="$nb" -v mna="$mna" -v mxa="$mxa" -v ma="$ma" -v na="$na" 'BEGIN {
        n = -1
        if (nb > 1 && mb + 0 != 0) n = (mxb - mnb) / mb
        if (na > 1 && ma + 0 != 0) { x = (mxa - mna) / ma; if (x > n) n = x }
        if (n < 0) print "-"; else printf "%.1f", 100 * n }')
    verdict=$(awk -v r="$ratio" -v n="$noise" -v d="$dir" 'BEGIN {
        if (r == "-") { print "-"; exit }
        w = (d == "higher") ? 1 - r : r - 1      # > 0: after is worse
        lim = (n == "-") ? 0.05 : n / 100; if (lim < 0.02) lim = 0.02
        if (w > lim) printf "**worse by %.1f %%, beyond the noise**\n", 100 * w
        else if (-w > lim) printf "better by %.1f %%\n", -100 * w
        else print "same within noise" }')
    [[ $verdict == *beyond* ]] && worse+=("$name")
    rows+=("| $name | $(cell "$dec" "${sb[@]+"${sb[@]}"}") | $(cell "$dec" "${sa[@]+"${sa[@]}"}") | $ratio | ${noise}$([ "$noise" = - ] || echo " %") | $verdict | $goal |")
}

goal_idle=$(awk -v s="${R[idle.after]:-}" 'BEGIN {n = split(s, v, " "); if (n == 0) {print "about 1.7 kB"; exit}
    t = 0; for (i = 1; i <= n; i++) t += v[i]; m = t / n
    printf "about 1.7 kB (1,741 B): %s\n", (m <= 1741) ? "met" : "**NOT met**"}')
goal_mrss=$(awk -v s="${R[mrss.after]:-}" 'BEGIN {n = split(s, v, " "); if (n == 0) {print "< 64 MB"; exit}
    mx = 0; for (i = 1; i <= n; i++) if (v[i] > mx) mx = v[i]
    printf "< 64 MB: %s\n", (mx < 64) ? "met" : "**NOT met**"}')
for r in $rates; do
    row "deliveries/s, 1,000 subscribers, $(fmtn "$r") publishes/s asked" "fanout-$r" higher 0 "no regression"
done
for r in $rates; do
    row "hub CPU s, 1,000 subscribers, $(fmtn "$r")/s for ${dur} s" "fanout-$r-cpu" lower 2 "(where it goes)"
done
row "accepted publishes/s, 10,000 subscribers (100 asked)" heavy-100 higher 1 "no regression"
row "deliveries/s, 10,000 subscribers (100 asked)" heavy-100-del higher 0 "no regression"
row "hub CPU s, 10,000 subscribers, 100/s for ${dur} s" heavy-100-cpu lower 2 "(where it goes)"
row "bytes per idle connection (19,000 idle)" idle lower 0 "$goal_idle"
row "rssub peak RSS MB, baseline of a $(fmtn "$million")-entry list" mrss lower 1 "$goal_mrss"
row "rssub wall s, baseline of a $(fmtn "$million")-entry list" mwall lower 2 "no regression"
row "rssub audit peak RSS MB, same list" maudit lower 1 "< 64 MB"

load_avg=$(awk '{s += $2; if ($2 > mx) mx = $2; if (NR == 1 || $2 < mn) mn = $2} END {if (NR) printf "mean %.2f, min %.2f, max %.2f over %d samples", s / NR, mn, mx, NR}' "$tmp/load.txt")
{
    echo
    echo "Before: $before; after: $after"
    echo "Run: $(date -u -d "@$t_start" '+%Y-%m-%d %H:%M') UTC, $((t_end - t_start)) s (${part_secs%; }); nice ${nice_n:-0}; hub: $hub_rounds round(s) of bench_hub.sh (the first binary swapped each round), ${dur} s per scenario, drain up to ${drain} s; rssub: $mreps sync(s) per binary on $mroot"
    echo "Machine: $(nproc) CPUs; load average at start $load_start, at the end $(loadavg); 1-minute load average during the run: $load_avg; all CPUs busy $busy % of the run${NOTE[hub-other]:+; CPU-s used by others during the hub runs (sum of the other-CPU column of bench_hub):${NOTE[hub-other]}}"
    echo
    echo "| figure | before | after | after/before | noise (spread of a binary's own samples) | verdict | goal |"
    echo "|---|---:|---:|---:|---:|---|---|"
    printf '%s\n' "${rows[@]}"
    echo
    for k in "${!NOTE[@]}"; do
        [ "$k" = hub-other ] && continue
        echo "- $k:${NOTE[$k]}"
    done
    if [ ${#worse[@]} -gt 0 ]; then
        echo "- worse beyond the noise: $(printf '%s; ' "${worse[@]}")rerun that part (--parts, --hub-rounds) to confirm"
    else
        echo "- no figure worse beyond the run's noise"
    fi
} | tee "$tmp/table.md"
[ -z "$out" ] || cp "$tmp/table.md" "$out"
exit 0
