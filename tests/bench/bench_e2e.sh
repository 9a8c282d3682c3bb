#!/usr/bin/env bash
# bench_e2e.sh - the end-to-end figure of issue 7 for docs/benchmarks.md
# ("End to end (issue 7)"): a file changed at the Source -> the file in
# three rssub mirrors, one per way of following (WebSocket, WebSub,
# polling Change Lists). One redis-server (appendonly), rshub, rssource
# --hub over a directory, three `rssub run`; bench_sub_push writes creates
# and updates at a rising rate and watches the three mirrors (inotify);
# after each rate the mirrors are diffed against the Source. It prints,
# per rate and mirror, p50/p99/max, lost/duplicated, and the time until
# the mirror equals the Source, and the highest rate with zero divergence.
# Builds nothing; starts its own processes on loopback in a private temp
# dir and stops only those, by PID.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build-bench-e2e
mroot=/dev/shm
rates="100 200 500 1000 2000 5000 10000"
secs=20
drain=20
files=1000
updates=0.5
p99_limit=3000
until_div=0
poll_interval=1s
rssub_args=""
out=""
keep=0
mirrors="ws websub poll"
nice_n=""

usage() {
    cat <<EOF
Usage: $0 [OPTION]...
End to end: file changed at the Source -> file in three rssub mirrors
(WebSocket, WebSub, polling), at rising rates (docs/benchmarks.md, "End to
end (issue 7)").
  --build DIR          build dir with subscriber/rssub, source/rssource,
                       hub/rshub, tests/bench/bench_sub_push (Release;
                       default $build)
  --root DIR           where the Source's directory, the three mirrors and
                       the daemons' state go: a directory (a private one is
                       made in it) or "disk" for the temp dir (default
                       $mroot, a tmpfs: the VM's ext4 creates files slowly)
  --rates LIST         changes/s, in turn (default "$rates"); the ramp stops
                       when no mirror is left (each leaves at its first
                       divergence or p99 over --p99-limit), or when the
                       writer cannot produce the rate
  --seconds S          writing time per rate (default $secs)
  --drain S            after the writer stops, how long every change may
                       take to arrive and each mirror to equal the Source
                       (diff -r); later is divergence (default $drain)
  --files N            files in the Source before the mirrors start (default $files)
  --updates F          share of changes that rewrite a file of the run
                       instead of creating one (default $updates)
  --p99-limit MS       a mirror whose p99 is above this has fallen behind:
                       it leaves the ramp (default $p99_limit)
  --until-divergence   a mirror leaves the ramp only when it diverges (its
                       p99 is still reported against --p99-limit)
  --poll-interval D    the polling mirror's --poll-interval (default $poll_interval)
  --rssub-args "..."   extra options for every rssub
  --mirrors LIST       which mirrors to run, of "ws websub poll" (default all
                       three; "ws" alone measures the WebSocket path with
                       nothing else competing for the CPUs)
  --quick              under 2 minutes: rates "100 500 2000 5000", 5 s each,
                       drain 10 s, 200 files
  --nice N             run at nice N (negative: root)
  --out FILE           also write the tables (markdown) to FILE
  --keep               keep the temp dirs (logs, mirrors)
EOF
}

while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift ;;
    --root) mroot=$2; shift ;;
    --rates) rates=$2; shift ;;
    --seconds) secs=$2; shift ;;
    --drain) drain=$2; shift ;;
    --files) files=$2; shift ;;
    --updates) updates=$2; shift ;;
    --p99-limit) p99_limit=$2; shift ;;
    --until-divergence) until_div=1 ;;
    --poll-interval) poll_interval=$2; shift ;;
    --rssub-args) rssub_args=$2; shift ;;
    --mirrors) mirrors=$2; shift ;;
    --quick) rates="100 500 2000 5000"; secs=5; drain=10; files=200 ;;
    --nice) nice_n=$2; shift ;;
    --out) out=$2; shift ;;
    --keep) keep=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_e2e: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

die() { echo "bench_e2e: $*" >&2; exit 1; }
note() { echo "$*" >&2; }

PY=/usr/bin/python3
rssub=$build/subscriber/rssub
rssource=$build/source/rssource
rshub=$build/hub/rshub
pusher=$build/tests/bench/bench_sub_push
for b in "$rssub" "$rssource" "$rshub" "$pusher"; do
    [ -x "$b" ] || die "no $b; build it first:
  cmake -S $root -B $build -DCMAKE_BUILD_TYPE=Release -DRS_TESTS=OFF -DRS_BENCH=ON
  make -C $build -j2 rssub rssource rshub bench_sub_push"
done
for c in curl diff redis-server redis-cli timeout; do
    command -v "$c" >/dev/null || die "$c is missing"
done
if [ -n "$nice_n" ]; then
    renice -n "$nice_n" -p $$ >/dev/null || die "cannot renice to $nice_n"
fi
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy no_proxy
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
read -ra RSSUB_ARGS <<<"$rssub_args"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_e2e.XXXXXX")
if [ "$mroot" = disk ]; then
    work=$tmp/work
    mkdir -p "$work"
else
    work=$(mktemp -d "$mroot/bench_e2e.XXXXXX") || die "cannot use $mroot"
fi
pids=()   # everything started, in order; stopped in reverse

stop_pids() {   # PID...: TERM, up to 10 s, then KILL; only these
    local pid i alive
    for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
    for ((i = 0; i < 100; i++)); do
        alive=0
        for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ $alive -eq 0 ] && break
        sleep 0.1
    done
    for pid in "$@"; do kill -KILL "$pid" 2>/dev/null || true; done
    for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
}

cleanup() {
    local rev=() i
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do rev+=("${pids[i]}"); done
    [ ${#rev[@]} -eq 0 ] || stop_pids "${rev[@]}"
    if [ $keep -eq 1 ]; then
        note "bench_e2e: kept $tmp $work"
    else
        rm -rf "$tmp" "$work"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# stop_one PID: stop one process started here; its exit status in STOP_RC.
STOP_RC=0
stop_one() {
    local pid=$1 i keep_pids=() p
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    STOP_RC=0
    wait "$pid" 2>/dev/null || STOP_RC=$?
    for p in "${pids[@]}"; do [ "$p" = "$pid" ] || keep_pids+=("$p"); done
    pids=("${keep_pids[@]+"${keep_pids[@]}"}")
}

wait_file() {   # FILE PID SECONDS
    local i
    for ((i = 0; i < $3 * 10; i++)); do
        [ -s "$1" ] && return 0
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
    done
    return 1
}

hz=$(getconf CLK_TCK)
cpu_ticks() {   # PID -> utime+stime, clock ticks (0 when gone)
    local f
    [ -r "/proc/$1/stat" ] || { echo 0; return; }
    f=$(sed 's/.*) //' "/proc/$1/stat")
    # shellcheck disable=SC2086
    set -- $f
    echo $((${12} + ${13}))
}
busy_ticks() {   # the whole machine's busy time, clock ticks
    awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat
}
secs_of() { awk -v t="$1" -v hz="$hz" 'BEGIN {printf "%.1f", t / hz}'; }
hwm_mb() { awk '/^VmHWM:/ {printf "%.1f", $2 / 1024}' "/proc/$1/status" 2>/dev/null || echo "-"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
now_us() { date +%s%6N; }
# kv LINE KEY: KEY's value in a line of key=value pairs
kv() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1; }
same_tree() { diff -rq "$1" "$2" >/dev/null 2>&1; }

tables=""
emit() { tables+="$*"$'\n'; echo "$*"; }
load_start=$(loadavg)

# ---------------------------------------------------------------- setup

data=$work/data
mkdir -p "$data" "$tmp/redis"
note "== setup: Source of $files files in $data; logs in $tmp"
"$PY" "$here/bench_sub.py" tree "$data" "$files"

# Redis persists as a production hub's would: the append-only file,
# fsynced every second (on the temp dir's filesystem).
redis-server --port 0 --unixsocket "$tmp/redis/s.sock" --save "" \
    --appendonly yes --appendfsync everysec --daemonize no \
    --dir "$tmp/redis" --logfile "$tmp/redis/log" >/dev/null 2>&1 &
redis_pid=$!
pids+=("$redis_pid")
for ((i = 0; i < 100; i++)); do
    [ "$(redis-cli -s "$tmp/redis/s.sock" ping 2>/dev/null)" = PONG ] && break
    sleep 0.1
done
[ "$(redis-cli -s "$tmp/redis/s.sock" ping 2>/dev/null)" = PONG ] ||
    die "redis-server did not start: $(tail -n 5 "$tmp/redis/log")"

"$rshub" --listen 127.0.0.1:0 --ws-listen 127.0.0.1:0 \
    --redis "unix://$tmp/redis/s.sock" --open --callback-allow 127.0.0.0/8 \
    --log-format logfmt --ready-file "$tmp/hub.ready" >"$tmp/rshub.log" 2>&1 &
hub_pid=$!
pids+=("$hub_pid")
wait_file "$tmp/hub.ready" "$hub_pid" 20 || die "rshub did not start: $(tail -n 5 "$tmp/rshub.log")"
hub_http=$(sed -n 's/.*"http":\([0-9]*\).*/\1/p' "$tmp/hub.ready")

"$rssource" --dir "$data" --state "$work/rssource.state" --listen 127.0.0.1:0 \
    --hub "http://127.0.0.1:$hub_http/hub" --ready-file "$tmp/rssource.ready" \
    --log-format logfmt >"$tmp/rssource.log" 2>&1 &
src_pid=$!
pids+=("$src_pid")
wait_file "$tmp/rssource.ready" "$src_pid" 300 || die "rssource did not start: $(tail -n 5 "$tmp/rssource.log")"
src_port=$(sed -n 's/.*"http":\([0-9]*\).*/\1/p' "$tmp/rssource.ready")
base=http://127.0.0.1:$src_port/
# an open hub knows the topic once rssource has published to it
printf 'hello hub\n' >"$data/hello.txt"
chan=""
for ((i = 0; i < 100; i++)); do
    chan=$(curl -sf "${base}resourcesync/capabilitylist.xml" | grep -o '<loc>ws[^<]*</loc>' | head -n1 || true)
    [ -n "$chan" ] && break
    sleep 0.1
done
[ -n "$chan" ] || die "rssource advertises no WebSocket channel (see $tmp)"
chan=${chan#<loc>}
note "   Source $base, hub http://127.0.0.1:$hub_http/hub, channel ${chan%</loc>}"

# The three mirrors: name, how it follows, the rssub options that say so.
read -ra names <<<"$mirrors"
for n in "${names[@]}"; do
    case $n in ws|websub|poll) ;; *) die "--mirrors: unknown mirror $n" ;; esac
done
[ ${#names[@]} -gt 0 ] || die "--mirrors: none given"
declare -A HOW=([ws]="WebSocket (default)"
                [websub]="WebSub (--transport websub)"
                [poll]="polling (--transport poll --poll-interval $poll_interval)")
declare -A SUBARGS=([ws]=""
                    [websub]="--transport websub --callback-listen 127.0.0.1:0"
                    [poll]="--transport poll --poll-interval $poll_interval")
declare -A SUB_PID MIRROR
for n in "${names[@]}"; do
    MIRROR[$n]=$work/mirror-$n
    mkdir -p "${MIRROR[$n]}"
    read -ra extra <<<"${SUBARGS[$n]}"
    "$rssub" run --source "$base" --mirror "${MIRROR[$n]}" \
        --state "$work/rssub-$n.db" --ready-file "$tmp/rssub-$n.ready" \
        --log-format logfmt \
        "${extra[@]+"${extra[@]}"}" "${RSSUB_ARGS[@]+"${RSSUB_ARGS[@]}"}" \
        >"$tmp/rssub-$n.log" 2>&1 &
    SUB_PID[$n]=$!
    pids+=("${SUB_PID[$n]}")
done
for n in "${names[@]}"; do
    if ! wait_file "$tmp/rssub-$n.ready" "${SUB_PID[$n]}" 300; then
        tail -n 20 "$tmp/rssub-$n.log" >&2
        die "rssub ($n) did not become ready in 300 s (or exited); log above"
    fi
done
# WebSub: the subscription must be verified before the clock starts
if [ -n "${SUB_PID[websub]:-}" ]; then
    for ((i = 0; i < 200; i++)); do
        grep -Eq 'msg="?websub subscription"? .*state=active' "$tmp/rssub-websub.log" && break
        sleep 0.1
    done
    grep -Eq 'msg="?websub subscription"? .*state=active' "$tmp/rssub-websub.log" ||
        note "   WARNING: rssub (websub) has no active WebSub subscription after 20 s"
fi
for n in "${names[@]}"; do
    note "   rssub ($n): $(grep -E 'msg="?(following|polling change lists)"?' "$tmp/rssub-$n.log" | head -n1 | sed 's/^ts=[^ ]* //')"
done
sleep 1
for n in "${names[@]}"; do
    if same_tree "$data" "${MIRROR[$n]}"; then
        note "   mirror $n equals the Source after its baseline"
    else
        note "   WARNING: mirror $n differs from the Source after its baseline:"
        diff -rq "$data" "${MIRROR[$n]}" 2>&1 | head -n 5 >&2 || true
    fi
done

# -------------------------------------------------------------- the ramp

# Per mirror (and "all"): CLEAN, no divergence yet, and BEST, the highest
# such rate; OKP, no divergence and p99 within --p99-limit yet, and BESTP;
# LEFT, the first rate that was not ok and why. The ramp goes on while
# some mirror is still OKP (with --until-divergence: still CLEAN).
declare -A CLEAN OKP BEST BESTP LEFT
for n in "${names[@]}" all; do
    CLEAN[$n]=1; OKP[$n]=1; BEST[$n]="none"; BESTP[$n]="none"; LEFT[$n]=""
done
ROWS=()
CPU_ROWS=()
last_tried=none
mirror_args=()
for n in "${names[@]}"; do mirror_args+=(--mirror "${MIRROR[$n]}"); done
labels=("${names[@]}" all)

for rate in $rates; do
    any=0
    for n in "${names[@]}"; do
        if [ "${OKP[$n]}" = 1 ] || { [ $until_div = 1 ] && [ "${CLEAN[$n]}" = 1 ]; }; then
            any=1
        fi
    done
    [ $any = 1 ] || break
    note "== $rate changes/s for $secs s (updates $updates), drain up to $drain s"
    tag=r$rate
    last_tried=$rate
    declare -A C0=() C1=()
    for n in "${names[@]}"; do C0[$n]=$(cpu_ticks "${SUB_PID[$n]}"); done
    C0[src]=$(cpu_ticks "$src_pid"); C0[hub]=$(cpu_ticks "$hub_pid")
    C0[redis]=$(cpu_ticks "$redis_pid"); C0[busy]=$(busy_ticks)
    t0_us=$(now_us)
    # all three mirrors are always watched: "all" is a change in every one.
    # In the background, so that a signal to this script is handled at once
    # (bash runs traps only between foreground commands).
    timeout $((secs + drain + 120)) "$pusher" --src "$data" \
        "${mirror_args[@]}" --tag "$tag" --rate "$rate" --seconds "$secs" \
        --drain "$drain" --updates "$updates" --lat-out "$tmp/$tag.lat" \
        >"$tmp/$tag.out" 2>"$tmp/$tag.err" &
    push_pid=$!
    pids+=("$push_pid")
    wait "$push_pid" || die "bench_sub_push failed: $(cat "$tmp/$tag.err")"
    unset 'pids[${#pids[@]}-1]'
    # the daemons' work is done; diff -r below is the script's own
    for n in "${names[@]}"; do C1[$n]=$(cpu_ticks "${SUB_PID[$n]}"); done
    C1[src]=$(cpu_ticks "$src_pid"); C1[hub]=$(cpu_ticks "$hub_pid")
    C1[redis]=$(cpu_ticks "$redis_pid"); C1[busy]=$(busy_ticks)
    span=$(awk -v a="$(now_us)" -v b="$t0_us" 'BEGIN {printf "%.1f", (a - b) / 1e6}')
    declare -A L=()
    while read -r line; do
        m=$(kv "$line" mirror)
        case $m in
        all) L[all]=$line ;;
        [0-9]*) L[${names[$m]}]=$line ;;
        esac
    done <"$tmp/$tag.out"
    # one mirror: the probe prints no mirror=all line; its own line is all
    [ -n "${L[all]:-}" ] || L[all]=${L[${names[0]}]}
    wend=$(kv "${L[all]}" writer_end_us)
    # each mirror equals the Source (diff -r) within the drain, counted from
    # the writer's last change; checked in turn, so each time is an upper
    # bound by the diff's own duration
    declare -A EQ=()
    deadline=$((wend + drain * 1000000))
    for n in "${names[@]}"; do EQ[$n]=-; done
    while :; do
        left=0
        for n in "${names[@]}"; do
            [ "${EQ[$n]}" = - ] || continue
            if same_tree "$data" "${MIRROR[$n]}"; then
                EQ[$n]=$(awk -v a="$(now_us)" -v b="$wend" 'BEGIN {printf "%.1f", (a - b) / 1e6}')
            else
                left=1
            fi
        done
        [ $left = 0 ] && break
        [ "$(now_us)" -lt "$deadline" ] || break
        sleep 0.2
    done
    EQ[all]=-
    all_eq=1
    for n in "${names[@]}"; do [ "${EQ[$n]}" != - ] || all_eq=0; done
    if [ $all_eq = 1 ]; then
        EQ[all]=$(for n in "${names[@]}"; do echo "${EQ[$n]}"; done | sort -g | tail -n1)
    fi
    probe=$(awk -v c="$(kv "${L[all]}" cpu_ms)" 'BEGIN {printf "%.1f", c / 1000}')
    ours=0
    for k in "${names[@]}" src hub redis; do ours=$((ours + C1[$k] - C0[$k])); done
    other=$(awk -v b=$((C1[busy] - C0[busy] - ours)) -v hz="$hz" -v p="$probe" 'BEGIN {x = b / hz - p; printf "%.1f", (x < 0) ? 0 : x}')
    row="| $rate | $span |"
    for n in "${names[@]}"; do row+=" $(secs_of $((C1[$n] - C0[$n]))) |"; done
    CPU_ROWS+=("$row $(secs_of $((C1[src] - C0[src]))) | $(secs_of $((C1[hub] - C0[hub]))) | $(secs_of $((C1[redis] - C0[redis]))) | $probe | $other |")

    sent=$(kv "${L[all]}" sent)
    wrote=$(kv "${L[all]}" wrote_ms)
    late=$(kv "${L[all]}" late_max_ms)
    achieved=$(awk -v n="$sent" -v w="$wrote" 'BEGIN {printf "%.0f", (w > 0) ? n / (w / 1000) : 0}')
    nfiles=$(kv "${L[all]}" files)
    # a writer more than 1 s behind its schedule did not produce the rate:
    # it counts for no mirror, and the ramp ends
    writer_ok=$(awk -v l="$late" 'BEGIN {print (l > 1000) ? 0 : 1}')
    note "   writer: $sent changes ($nfiles files) in $wrote ms ($achieved/s), late max $late ms"
    for n in "${labels[@]}"; do
        line=${L[$n]}
        lost=$(kv "$line" lost)
        p99=$(kv "$line" p99_ms)
        verdict=ok
        diverged=0
        if [ "$lost" != 0 ] || [ "${EQ[$n]}" = - ]; then
            verdict="**diverged**"
            diverged=1
        elif awk -v p="$p99" -v l="$p99_limit" 'BEGIN {exit !(p > l)}'; then
            verdict="behind (p99 > $p99_limit ms)"
        fi
        what=$n
        [ "$n" != all ] || what="all ${#names[@]}"
        if [ "${OKP[$n]}" = 0 ]; then
            [ "$n" = all ] || [ $until_div = 1 ] || verdict="$verdict (left the ramp at ${LEFT[$n]%%:*})"
        elif [ "$verdict" != ok ]; then
            OKP[$n]=0
            LEFT[$n]="$rate/s: ${verdict//\*/}"
        elif [ "$writer_ok" = 1 ]; then
            BESTP[$n]=$rate
        fi
        if [ $diverged = 1 ]; then
            CLEAN[$n]=0
        elif [ "${CLEAN[$n]}" = 1 ] && [ "$writer_ok" = 1 ]; then
            BEST[$n]=$rate
        fi
        comp=$(kv "$line" complete_ms)
        comp=$(awk -v c="$comp" 'BEGIN {print (c < 0) ? "never" : sprintf("%.2f", c / 1000)}')
        ROWS+=("| $rate | $achieved | $what | $sent | $(kv "$line" p50_ms) | **$p99** | $(kv "$line" max_ms) | $lost | $(kv "$line" superseded) | $(kv "$line" dup) | $(kv "$line" stale) / $(kv "$line" torn) | $comp | ${EQ[$n]} | $verdict |")
        note "   $what: p50 $(kv "$line" p50_ms) p99 $p99 max $(kv "$line" max_ms) ms, lost $lost, superseded $(kv "$line" superseded), dup $(kv "$line" dup), stale $(kv "$line" stale), torn $(kv "$line" torn), last arrival +$comp s, equal +${EQ[$n]} s: $verdict"
    done
    for n in "${names[@]}"; do
        if [ "${EQ[$n]}" = - ]; then
            note "   mirror $n vs Source: $(diff -rq "$data" "${MIRROR[$n]}" 2>&1 | wc -l) differences, e.g.:"
            diff -rq "$data" "${MIRROR[$n]}" 2>&1 | head -n 3 >&2 || true
        fi
    done
    if [ "$writer_ok" = 0 ]; then
        note "   the writer ran $late ms behind its schedule: this machine cannot produce $rate/s here; the ramp stops"
        for n in "${names[@]}"; do
            [ "${OKP[$n]}" = 0 ] || LEFT[$n]="still ok; the writer could not produce $rate/s"
            OKP[$n]=0
        done
        break
    fi
    sleep 2
done
for n in "${names[@]}"; do
    [ "${OKP[$n]}" = 0 ] || LEFT[$n]="still ok at the last rate"
done
# a mirror that never diverged: its figure is only the highest rate tried
declare -A BNOTE
for n in "${names[@]}" all; do
    BNOTE[$n]=""
    if [ "${CLEAN[$n]}" = 1 ] && [ "${BEST[$n]}" != none ]; then
        BNOTE[$n]=" (no divergence at any rate tried)"
    fi
done

# ----------------------------------------------------------- the daemons

declare -A HWM RC NWARN NERR
for n in "${names[@]}"; do HWM[$n]=$(hwm_mb "${SUB_PID[$n]}"); done
for n in "${names[@]}"; do
    stop_one "${SUB_PID[$n]}"
    RC[$n]=$STOP_RC
done
stop_one "$src_pid"; RC[src]=$STOP_RC
stop_one "$hub_pid"; RC[hub]=$STOP_RC
stop_one "$redis_pid"
# log_kinds LOG: its warnings and errors by level, message and the error's
# first words (before a colon), most frequent first
log_kinds() {
    grep -E 'level=(warn|error)' "$1" | awk '{
        l = m = e = ""
        if (match($0, /level=[a-z]+/)) l = substr($0, RSTART, RLENGTH)
        if (match($0, /msg="[^"]*"/)) m = substr($0, RSTART, RLENGTH)
        if (match($0, /error="[^":]*/)) e = substr($0, RSTART, RLENGTH) "\""
        print l, m, e
    }' | sort | uniq -c | sort -rn
}
logs=()
for n in "${names[@]}"; do logs+=("rssub-$n"); done
logs+=(rssource rshub)
for l in "${logs[@]}"; do
    NWARN[$l]=$(grep -c 'level=warn' "$tmp/$l.log" || true)
    NERR[$l]=$(grep -c 'level=error' "$tmp/$l.log" || true)
    if [ "${NWARN[$l]}" != 0 ] || [ "${NERR[$l]}" != 0 ]; then
        note "   $l: ${NERR[$l]} errors, ${NWARN[$l]} warnings; most frequent:"
        log_kinds "$tmp/$l.log" | head -n 5 >&2 || true
    fi
done

# ---------------------------------------------------------------- tables

fs=$(df -PT "$work" | awk 'NR == 2 {print $2}')
emit ""
emit "#### File changed at the Source -> file in each mirror ($files-file Source; $secs s per rate, $(awk -v u="$updates" 'BEGIN {printf "%.0f", u * 100}') % of changes rewrite a file of the run; Source and mirrors on $([ "$mroot" = disk ] && echo "the temp dir" || echo "$mroot") ($fs))"
emit ""
emit "| changes/s asked | written/s | mirror | changes | p50 ms | p99 ms | max ms | lost | superseded | dup | stale / torn | last change arrived, s after the writer stopped | equal to the Source (diff -r), s after | verdict |"
emit "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|"
for r in "${ROWS[@]}"; do emit "$r"; done
emit ""
emit "Highest rate with zero divergence: no change lost, and the mirror equal to the Source within $drain s of the writer's stop, at that rate and at every lower one. A mirror left the ramp at its first divergence$([ $until_div = 1 ] || echo " or p99 above $p99_limit ms"); the last rate tried was $last_tried/s."
emit ""
emit "| mirror | follows by | highest rate with zero divergence | and with p99 <= $p99_limit ms | where it left the ramp |"
emit "|---|---|---:|---:|---|"
for n in "${names[@]}"; do
    emit "| $n | ${HOW[$n]} | **${BEST[$n]}**${BNOTE[$n]} | ${BESTP[$n]} | ${LEFT[$n]} |"
done
emit "| all ${#names[@]} | | **${BEST[all]}**${BNOTE[all]} | ${BESTP[all]} | |"
emit ""
emit "CPU seconds over each rate (the writing and until the last arrival, *wall s*; $(nproc) CPUs give $(nproc) CPU seconds a second): each process of the run, and the rest of the machine's busy time (*other*: other work on the shared VM, the noise, and kernel threads such as disk writeback):"
emit ""
hdr="| changes/s | wall s |"; sep="|---:|---:|"
for n in "${names[@]}"; do hdr+=" rssub $n |"; sep+="---:|"; done
emit "$hdr rssource | rshub | redis | bench_sub_push | other |"
emit "$sep---:|---:|---:|---:|---:|"
for r in "${CPU_ROWS[@]}"; do emit "$r"; done
emit ""
rss="" rcs="" lls=""
for n in "${names[@]}"; do
    rss+="${rss:+, }$n ${HWM[$n]} MB"; rcs+="${rcs:+, }$n ${RC[$n]}"
    lls+="${lls:+, }$n ${NERR[rssub-$n]}/${NWARN[rssub-$n]}"
done
emit "rssub peak RSS: $rss. Exit on SIGTERM: rssub $rcs; rssource ${RC[src]}; rshub ${RC[hub]}."
emit "Log lines (errors/warnings): rssub $lls; rssource ${NERR[rssource]}/${NWARN[rssource]}; rshub ${NERR[rshub]}/${NWARN[rshub]}."
tree_rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain -- proto common hub source subscriber 2>/dev/null | wc -l)
[ "$dirty" = 0 ] || tree_rev="$tree_rev (with $dirty uncommitted edits under proto common hub source subscriber)"
emit "Machine: $(nproc) CPUs; load average at start: $load_start; at the end: $(loadavg). Binaries from $build; the tree is at $tree_rev."
[ -z "$out" ] || printf '%s' "$tables" >"$out"
