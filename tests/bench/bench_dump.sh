#!/usr/bin/env bash
# bench_dump.sh - a baseline from rssource's Resource Dump against the
# per-file baseline, for docs/benchmarks.md ("Baselines from a Resource
# Dump"). For each tree size N (small files, 1-4 KiB, in a tmpfs when one is
# available): rssource --dump serves the tree; `rssub sync` (one GET per
# file) and `rssub sync --dump` (the packages) each make a fresh mirror,
# interleaved, R runs each, every mirror diffed against the tree. Prints
# wall seconds, files/s, rssub's peak RSS and CPU, and the ratio, per run;
# also the time rssource took to build the dump, and the floor: the same
# files written as a mirror writes them and nothing else (floor_files: a
# temporary name, the bytes, the mtime, a rename), on one thread and on one
# per CPU (as rssub's dump writes them), with each client's time over
# them. With --vs OTHER_BUILD it instead times the dump of --build's rssub
# against OTHER_BUILD's, pair by pair (ABBA..., one rssource of --build's),
# and prints each pair's ratio of wall and of CPU and their medians: the
# A/B figures of docs/benchmarks.md; with --vs-source too, B's runs pull
# from OTHER_BUILD's own rssource (a second one, its own state, the same
# tree), so a change to rssource is in the ratio as well. Wall seconds are bash's EPOCHREALTIME
# around the run, CPU seconds bash's `times` (both to the millisecond;
# /usr/bin/time's are hundredths). Builds nothing; starts its own
# processes on loopback in a private directory and stops only those, by
# PID.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build-release
sizes="10000 100000"
reps=1
where=""
keep=0
nice_n=""
timeout_s=1800
vs=""
vs_source=0
ab_client=dump

usage() {
    cat <<EOF
Usage: $0 [OPTION]...
  --build DIR     build dir with source/rssource and subscriber/rssub
                  (Release; default $build)
  --files LIST    tree sizes (default "$sizes")
  --reps N        runs of each client per size, interleaved (default $reps)
  --root DIR      where the tree, rssource's state and the mirrors go: a
                  private directory is made in it (default /dev/shm when it
                  is a tmpfs, else \$TMPDIR); a disk's directory to see
                  what --fsync costs there
  --nice N        run everything under nice -n N
  --timeout S     longest rssub run (default $timeout_s)
  --vs DIR        A/B: the dump of --build's rssub against DIR's
                  (subscriber/rssub), --reps pairs per size, no per-file runs
  --vs-source     with --vs: B's runs pull from DIR's rssource (A's from
                  --build's), each serving the same tree
  --ab-per-file   with --vs: the pairs are per-file baselines, not dumps
  --keep          keep the directory (and on a disk every run's mirror:
                  a removal makes the next minutes' runs slower, see run)
EOF
}

while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift ;;
    --files) sizes=$2; shift ;;
    --reps) reps=$2; shift ;;
    --root) where=$2; shift ;;
    --nice) nice_n=$2; shift ;;
    --timeout) timeout_s=$2; shift ;;
    --vs) vs=$2; shift ;;
    --vs-source) vs_source=1 ;;
    --ab-per-file) ab_client=per-file ;;
    --keep) keep=1 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
    shift
done

rssub=$build/subscriber/rssub
rssource=$build/source/rssource
floor=$build/tests/bench/floor_files
rssub_vs=""
rssource_vs=""
[ -z "$vs" ] || rssub_vs=$vs/subscriber/rssub
[ "$vs_source" = 0 ] || rssource_vs=$vs/source/rssource
[ "$vs_source" = 0 ] || [ -n "$vs" ] ||
    { echo "bench_dump: --vs-source needs --vs" >&2; exit 2; }
[ "$ab_client" = dump ] || [ -n "$vs" ] ||
    { echo "bench_dump: --ab-per-file needs --vs" >&2; exit 2; }
for p in "$rssub" "$rssource" "$floor" /usr/bin/time curl $rssub_vs \
    $rssource_vs; do
    [ -x "$p" ] || command -v "$p" >/dev/null ||
        { echo "bench_dump: missing $p" >&2; exit 2; }
done
if [ -z "$where" ]; then
    if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ]; then
        where=/dev/shm
    else
        where=${TMPDIR:-/tmp}
    fi
fi
W=$(mktemp -d "$where/bench-dump.XXXXXX")
on_tmpfs=0
[ "$(stat -f -c %T "$W")" != tmpfs ] || on_tmpfs=1
NICE=()
[ -z "$nice_n" ] || NICE=(nice -n "$nice_n")
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
SRC_PID=""
SRC_B_PID=""

cleanup() {
    local p
    for p in "$SRC_PID" "$SRC_B_PID"; do
        [ -n "$p" ] || continue
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    if [ "$keep" = 1 ]; then echo "kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT

# make_tree DIR N: N files of 1-4 KiB, 100 to a directory.
make_tree() {
    /usr/bin/python3 - "$1" "$2" <<'EOF'
import os, random, sys
d, n = sys.argv[1], int(sys.argv[2])
r = random.Random(18)
for i in range(n):
    sub = os.path.join(d, "d%04d" % (i // 100))
    if i % 100 == 0:
        os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, "f%06d.txt" % i), "wb") as f:
        f.write(r.randbytes(r.randint(1024, 4096)))
EOF
}

wait_dump() {
    local base=$1
    for _ in $(seq 1 1200); do
        if curl -sf --max-time 5 "${base}resourcesync/capabilitylist.xml" |
            grep -q 'capability="resourcedump"'; then
            return 0
        fi
        sleep 0.5
    done
    return 1
}

# src_cpu: rssource's CPU seconds so far (user + system).
src_cpu() {
    awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' \
        "/proc/$SRC_PID/stat"
}

# kids_cpu FILE: the children's CPU seconds (user + system) in FILE, the
# output of bash's `times` (to the millisecond; its second line).
kids_cpu() {
    awk 'NR == 2 { n = 0
        for (i = 1; i <= 2; i++) { split($i, p, "m"); sub("s", "", p[2])
                                   n += p[1] * 60 + p[2] }
        printf "%.3f", n }' "$1"
}

# run NAME ARGS...: one rssub sync ($RSSUB, else --build's) into a fresh
# mirror and state; prints "seconds peak_kB cpu_s rssource_cpu_s" and
# checks the mirror. cpu_s is to the millisecond (bash's `times` around
# the run; it counts time(1) and timeout(1) too, a millisecond or two).
run() {
    local name=$1
    shift
    local c0 t0 t1
    # On a disk (--root) each run gets new directories, removed only after
    # the size's last run: ext4 skips inodes deleted in the last minutes
    # when it allocates (recently_deleted), so a run right after the
    # removal of 10,000 files spent seconds of system time looking for
    # free inodes. And what is written is synced before the clock starts.
    local m=$W/m st=$W/st
    if [ "$on_tmpfs" = 1 ]; then
        rm -rf "$m" "$st"
    else
        m=$W/m.$name st=$W/st.$name
        sync -f "$W"
    fi
    c0=$(src_cpu)
    times >"$W/times.0"
    t0=$EPOCHREALTIME
    "${NICE[@]}" /usr/bin/time -f '%e %M %U %S' -o "$W/$name.time" \
        timeout "$timeout_s" "${RSSUB:-$rssub}" sync --source "$BASE" \
        --mirror "$m" \
        --state "$st" --log-format logfmt --no-progress "$@" \
        >"$W/$name.out" 2>"$W/$name.log" ||
        { echo "bench_dump: $name failed:" >&2; tail -5 "$W/$name.log" >&2;
          exit 1; }
    t1=$EPOCHREALTIME
    times >"$W/times.1"
    diff -r "$W/tree" "$m" >/dev/null ||
        { echo "bench_dump: $name: the mirror differs" >&2; exit 1; }
    awk -v c0="$c0" -v c1="$(src_cpu)" -v t0="$t0" -v t1="$t1" \
        -v k0="$(kids_cpu "$W/times.0")" -v k1="$(kids_cpu "$W/times.1")" \
        '{ printf "%.3f %s %.3f %.2f\n", t1 - t0, $2, k1 - k0, c1 - c0 }' \
        "$W/$name.time"
}

# ab N: --reps pairs of dumps, --build's rssub (A) against --vs's (B), in
# ABBA order; each run's line, then the pairs' A/B ratios of wall and of
# CPU and their medians (on two busy cores the CPU is the steadier).
ab() {
    local n=$1 r c res secs kb cpu scpu ratios="" cratios=""
    local ab_args=(--dump)
    [ "$ab_client" = dump ] || ab_args=()
    for r in $(seq 1 "$reps"); do
        local order="A B"
        [ $((r % 2)) -eq 1 ] || order="B A"
        for c in $order; do
            if [ "$c" = A ]; then
                res=$(run "ab-$c.$n.$r" "${ab_args[@]}")
            elif [ -n "$SRC_B_PID" ]; then
                res=$(RSSUB=$rssub_vs BASE=$BASE_B SRC_PID=$SRC_B_PID \
                      run "ab-$c.$n.$r" "${ab_args[@]}")
            else
                res=$(RSSUB=$rssub_vs run "ab-$c.$n.$r" "${ab_args[@]}")
            fi
            read -r secs kb cpu scpu <<<"$res"
            printf '%-8s %-9s %4s %9s %10.0f %12.1f %8s %10s\n' \
                "$n" "$ab_client-$c" "$r" "$secs" "$(awk -v n="$n" -v s="$secs" \
                'BEGIN { print n / s }')" "$(awk -v k="$kb" \
                'BEGIN { print k / 1024 }')" "$cpu" "$scpu"
            eval "t_$c=$secs c_$c=$cpu"
        done
        # shellcheck disable=SC2154
        ratios="$ratios $(awk -v a="$t_A" -v b="$t_B" \
            'BEGIN { printf "%.3f", a / b }')"
        # shellcheck disable=SC2154
        cratios="$cratios $(awk -v a="$c_A" -v b="$c_B" \
            'BEGIN { printf "%.3f", a / b }')"
    done
    echo "$n A/B pairs:$ratios; median $(median "$ratios")" \
        "(A $rssub, B $rssub_vs)"
    echo "$n A/B CPU pairs:$cratios; median $(median "$cratios")"
}

# start_source BIN NAME: rssource BIN serving the tree with --dump, its
# state in $W/NAME.state; sets STARTED_PID, and STARTED_BASE once its
# Capability List advertises the dump.
start_source() {
    local port
    rm -rf "$W/$2.state" "$W/$2.ready"
    "${NICE[@]}" "$1" --dir "$W/tree" --listen 127.0.0.1:0 \
        --state "$W/$2.state" --ready-file "$W/$2.ready" --dump \
        --log-format logfmt >"$W/$2.$n.log" 2>&1 &
    STARTED_PID=$!
    for _ in $(seq 1 600); do [ -s "$W/$2.ready" ] && break; sleep 0.1; done
    port=$(sed -n 's/.*"http":\([0-9]*\).*/\1/p' "$W/$2.ready")
    STARTED_BASE=http://127.0.0.1:$port/
    wait_dump "$STARTED_BASE" || { echo "bench_dump: no dump" >&2; exit 1; }
}

# median "X Y Z...": the median of the numbers.
median() {
    tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ v[NR] = $1 }
        END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
              printf "%.3f", m }'
}

echo "bench_dump: $(nproc) cores; tree, state and mirrors in $W"
echo "rssub: $rssub"
printf '%-8s %-9s %4s %9s %10s %12s %8s %10s\n' files client run seconds \
    "files/s" "peak RSS MB" "CPU s" "source CPU"
for n in $sizes; do
    rm -rf "$W/tree"
    make_tree "$W/tree" "$n"
    t0=$(date +%s.%N)
    start_source "$rssource" src
    SRC_PID=$STARTED_PID
    BASE=$STARTED_BASE
    t1=$(date +%s.%N)
    pk=$(grep -o 'packages=[0-9]*' "$W/src.$n.log" | tail -1)
    du=$(du -sm "$W/src.state/dumps" | cut -f1)
    echo "# $n files: rssource start + scan + dump $(awk -v a="$t0" \
        -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s, $pk, $du MB of packages"
    runs=$reps
    if [ -n "$rssource_vs" ]; then
        start_source "$rssource_vs" src-b
        SRC_B_PID=$STARTED_PID
        BASE_B=$STARTED_BASE
        echo "# B's rssource: $rssource_vs, $BASE_B"
    fi
    if [ -n "$vs" ]; then
        ab "$n"
        runs=0                        # no per-file runs, no floor
    fi
    for r in $(seq 1 "$runs"); do
        for c in per-file dump; do
            if [ "$c" = dump ]; then
                res=$(run "$c.$n.$r" --dump)
            else
                res=$(run "$c.$n.$r")
            fi
            read -r secs kb cpu scpu <<<"$res"
            awk -v n="$n" -v c="$c" -v r="$r" -v s="$secs" -v kb="$kb" \
                -v cpu="$cpu" -v scpu="$scpu" 'BEGIN { printf \
                "%-8s %-9s %4s %9s %10.0f %12.1f %8s %10s\n",
                n, c, r, s, n / s, kb / 1024, cpu, scpu }'
            eval "t_${c//-/_}=$secs"
            eval "all_${c//-/_}=\"\${all_${c//-/_}:-} $secs\""
        done
        for th in 1 "$(nproc)"; do
            fdir=$W/floor
            # on a disk, new directories each run (see run)
            [ "$on_tmpfs" = 1 ] || { fdir=$W/floor.$r.$th; sync -f "$W"; }
            rm -rf "$fdir"
            s=$("${NICE[@]}" "$floor" "$W/tree" "$fdir" "$th" |
                sed -n 's/.*seconds=\([0-9.]*\).*/\1/p')
            [ "$on_tmpfs" = 0 ] || rm -rf "$fdir"
            awk -v n="$n" -v r="$r" -v s="$s" -v c="floor-$th" 'BEGIN {
                printf "%-8s %-9s %4s %9s %10.0f\n", n, c, r, s, n / s }'
            if [ "$th" = 1 ]; then fl=$s; else flp=$s; fi
        done
        # shellcheck disable=SC2154
        awk -v n="$n" -v r="$r" -v a="$t_per_file" -v b="$t_dump" \
            -v f="$fl" -v fp="$flp" -v c="$(nproc)" 'BEGIN { printf \
            "%-8s ratio     %4s %9.2fx  (per-file / dump; over the " \
            "floor on 1 and %d threads: per-file %.1fx %.1fx, dump %.1fx " \
            "%.1fx; 5x needs the dump within %.1fx of the %d-thread " \
            "floor)\n", n, r, a / b, c, a / f, a / fp, b / f, b / fp,
            a / 5 / fp, c }'
    done
    # over every run of this size: the ratio of the medians (one run's
    # ratio swings with whichever of the pair a busy moment hit)
    if [ "$runs" -gt 1 ]; then
        # shellcheck disable=SC2154
        awk -v n="$n" -v a="$(median "$all_per_file")" \
            -v b="$(median "$all_dump")" -v r="$runs" 'BEGIN { printf \
            "%-8s medians   %4s %9.2fx  (per-file %.3f s / dump %.3f s, " \
            "medians of the %d runs)\n", n, "all", a / b, a, b, r }'
    fi
    all_per_file=""
    all_dump=""
    for p in "$SRC_PID" "$SRC_B_PID"; do
        [ -n "$p" ] || continue
        kill "$p"
        wait "$p" 2>/dev/null || true
    done
    SRC_PID=""
    SRC_B_PID=""
    [ "$keep" = 1 ] || rm -rf "$W"/m.* "$W"/st.* "$W"/floor.*
done
