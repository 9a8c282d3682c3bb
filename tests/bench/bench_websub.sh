#!/usr/bin/env bash
# bench_websub.sh - rshub's WebSub content distribution on loopback: wsload
# publishes ~1 KB notifications at a set rate, cbrecv (one evhttp loop, one
# 127.77.x.y address per subscriber) receives them as N callbacks and
# measures publish-to-callback latency, repeats and X-Hub-Id order. Each
# scenario gets a fresh redis-server (temp dir) and rshub (Release build),
# subscribes its callbacks (hub.mode=subscribe, waits until GET /topics shows
# them active), warms up, then measures. Prints one table and the goals of
# docs/benchmarks.md ("WebSub delivery (rshub)"). Everything it starts, it
# stops; nothing else is touched.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/../.." && pwd)/build-wsbench
dur=20
drain=10
rates="10 20 50"
subs=1000
small_subs=100
small_rate=100
bad_pct=10
stall=0
host_conns=8
delivery_timeout=1s
retry_max_delay=500ms
max_delivery_timeout=10s
reps=3
pub_conns=8
scenarios="max fanout fail stall"
out=""
keep=0
nice_n=""
perf=0

usage() {
    cat <<EOF
Usage: $0 [OPTION]...
Benchmarks rshub's WebSub delivery on loopback (see docs/benchmarks.md).
  --build DIR               build dir with hub/rshub, tests/bench/wsload and
                            tests/bench/cbrecv (default $build; Release)
  --quick                   5 s per scenario, 5 s drain
  --duration S              publishing time per scenario (default $dur)
  --drain S                 longest wait for the last deliveries (default $drain)
  --scenarios LIST          of: max fanout fail stall (default "$scenarios")
  --rates LIST              publishes/s of "max", to $subs callbacks (default "$rates")
  --subs N                  callbacks of "max" (default $subs)
  --small-subs N            callbacks of fanout/fail/stall (default $small_subs)
  --small-rate R            publishes/s of fanout/fail/stall (default $small_rate)
  --bad-pct P               share of failing/stalling callbacks (default $bad_pct)
  --stall S                 stalling callbacks answer after S s (0: never; default $stall)
  --delivery-host-conns N   rshub's per-host connection cap (default $host_conns)
  --delivery-timeout D      rshub --delivery-timeout in fanout/fail/stall
                            (default $delivery_timeout: failing callbacks retry within the run)
  --retry-max-delay D       rshub --retry-max-delay in fanout/fail/stall
                            (default $retry_max_delay)
  --max-delivery-timeout D  rshub --delivery-timeout in "max" (default
                            $max_delivery_timeout, rshub's own default)
  --reps N                  rounds of fanout, fail, stall, interleaved so
                            that machine noise hits all three (default $reps)
  --pub-conns N             keep-alive publish connections (default $pub_conns)
  --perf                    perf record (DWARF call graphs) rshub during each run
                            (kept in the temp dir; implies --keep)
  --nice N                  run everything at nice N (negative: root)
  --out FILE                also write the table (markdown) to FILE
  --keep                    keep the temp dir (logs)
EOF
}

while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift ;;
    --quick) dur=5; drain=5; reps=1 ;;
    --duration) dur=$2; shift ;;
    --drain) drain=$2; shift ;;
    --scenarios) scenarios=$2; shift ;;
    --rates) rates=$2; shift ;;
    --subs) subs=$2; shift ;;
    --small-subs) small_subs=$2; shift ;;
    --small-rate) small_rate=$2; shift ;;
    --bad-pct) bad_pct=$2; shift ;;
    --stall) stall=$2; shift ;;
    --delivery-host-conns) host_conns=$2; shift ;;
    --delivery-timeout) delivery_timeout=$2; shift ;;
    --retry-max-delay) retry_max_delay=$2; shift ;;
    --max-delivery-timeout) max_delivery_timeout=$2; shift ;;
    --reps) reps=$2; shift ;;
    --pub-conns) pub_conns=$2; shift ;;
    --perf) perf=1; keep=1 ;;
    --nice) nice_n=$2; shift ;;
    --out) out=$2; shift ;;
    --keep) keep=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_websub: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

die() { echo "bench_websub: $*" >&2; exit 1; }

rshub=$build/hub/rshub
wsload=$build/tests/bench/wsload
cbrecv=$build/tests/bench/cbrecv
for b in "$rshub" "$wsload" "$cbrecv"; do
    [ -x "$b" ] || die "no $b; build it first:
  cmake -S $(dirname "$here")/.. -B $build -DCMAKE_BUILD_TYPE=Release -DRS_TESTS=OFF -DRS_BENCH=ON
  cmake --build $build -j2 --target rshub wsload cbrecv"
done
for c in redis-server curl jq; do
    command -v "$c" >/dev/null || die "$c is missing (apt-get install -y redis-server curl jq)"
done
if [ $perf -eq 1 ]; then
    command -v perf >/dev/null || die "perf is missing"
fi
if [ -n "$nice_n" ]; then
    renice -n "$nice_n" -p $$ >/dev/null || die "cannot renice to $nice_n"
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_websub.XXXXXX")
pids=()   # everything started, in order; stopped in reverse

stop_pids() {   # PID...: TERM, up to 5 s, then KILL; only these
    local pid i alive
    for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
    for ((i = 0; i < 50; i++)); do
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
        echo "bench_websub: logs kept in $tmp" >&2
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    local p i
    for ((i = 0; i < 200; i++)); do
        p=$((20000 + RANDOM % 20000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return
        fi
    done
    die "no free port"
}

wait_port() {
    local i
    for ((i = 0; i < 100; i++)); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    die "nothing listens on 127.0.0.1:$1 (see $tmp)"
}

wait_file() {   # FILE PID WHAT
    local i
    for ((i = 0; i < 100; i++)); do
        [ -s "$1" ] && return 0
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
    done
    die "$3 did not start (see $tmp)"
}

hz=$(getconf CLK_TCK)

cpu_ticks() {   # PID... -> utime+stime (all threads), clock ticks
    local sum=0 p f
    for p in "$@"; do
        [ -r "/proc/$p/stat" ] || continue
        f=$(sed 's/.*) //' "/proc/$p/stat")
        set -- $f
        sum=$((sum + ${12} + ${13}))
    done
    echo "$sum"
}

busy_ticks() {   # every CPU's non-idle time, clock ticks
    awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat
}

status_kb() {   # PID FIELD -> kB from /proc/PID/status (VmRSS, VmHWM)
    awk -v f="$2:" '$1 == f {print $2; exit}' "/proc/$1/status" 2>/dev/null || echo 0
}

secs() { awk -v a="$1" -v b="$2" -v hz="$hz" 'BEGIN {printf "%.2f", (b - a) / hz}'; }

declare -A R
rows=()

kv_into() {   # PREFIX LINE: "RESULT k=v ..." into R[PREFIX.k]
    local kv
    for kv in ${2#RESULT }; do
        R[$1.${kv%%=*}]=${kv#*=}
    done
}

ctl() { curl -s --max-time 5 "http://127.0.0.1:$ctl_port$1"; }

stats() {   # EXPECT -> R[cur.healthy.*], R[cur.bad.*]
    local out line k
    for k in "${!R[@]}"; do
        [[ $k == cur.* ]] && unset "R[$k]"
    done
    out=$(ctl "/stats?expect=$1") || return 1
    while IFS= read -r line; do
        case $line in
        *" group=healthy "*) kv_into cur.healthy "$line" ;;
        *" group=bad "*) kv_into cur.bad "$line" ;;
        *" group=all "*) kv_into cur.all "$line" ;;
        esac
    done <<<"$out"
}

hub_metric() {   # NAME -> value from rshub's /metrics
    curl -s --max-time 5 "http://$hub_http/metrics" |
        awk -v n="$1" '$1 == n {print $2; f = 1; exit} END {if (!f) print 0}'
}

topic_uri=http://bench.example.org/dataset1/changelist.xml

# One scenario: fresh Redis, rshub and cbrecv; subscribe, warm up, measure.
# BAD-MODE none: every callback healthy; ok: as none, but the callbacks that
# fail or stall in the other modes are kept apart (group "bad"), so that the
# "healthy" figures of fanout, fail and stall cover the same callbacks.
run_case() {   # KEY SUBS RATE BAD-MODE(none|ok|fail|stall) DELIVERY-TIMEOUT RETRY-MAX-DELAY
    local key=$1 n=$2 rate=$3 mode=$4 dto=$5 rmd=$6 i
    local dir=$tmp/$key
    mkdir -p "$dir"
    echo "== $key: $n callbacks, $rate publishes/s, bad: $mode" >&2

    local rport
    rport=$(free_port)
    redis-server --port "$rport" --bind 127.0.0.1 --dir "$dir" --save '' \
        --appendonly no --daemonize no --logfile "$dir/redis.log" &
    local redis_pid=$!
    pids+=("$redis_pid")
    wait_port "$rport"

    "$rshub" --open --callback-allow 127.0.0.0/8 -l 127.0.0.1:0 -w 127.0.0.1:0 \
        -r "redis://127.0.0.1:$rport" --delivery-host-conns "$host_conns" \
        --delivery-timeout "$dto" --retry-max-delay "$rmd" \
        --max-subs-per-topic 0 \
        --max-subs-per-host 0 --log-level warn --log-file "$dir/rshub.log" \
        --ready-file "$dir/rshub.ready" &
    local hub_pid=$!
    pids+=("$hub_pid")
    wait_file "$dir/rshub.ready" "$hub_pid" rshub
    hub_http=127.0.0.1:$(sed 's/.*"http":\([0-9]*\).*/\1/' "$dir/rshub.ready")

    local bad=0 bmode=ok
    [ "$mode" = none ] || { bad=$bad_pct; bmode=$mode; }
    "$cbrecv" --subs "$n" --bad-pct "$bad" --bad-mode "$bmode" --stall "$stall" \
        --hub "http://$hub_http/hub" --topic "$topic_uri" --label "$key" \
        --ready-file "$dir/cbrecv.ready" > "$dir/cbrecv.out" 2> "$dir/cbrecv.err" &
    local cb_pid=$!
    pids+=("$cb_pid")
    wait_file "$dir/cbrecv.ready" "$cb_pid" cbrecv
    ctl_port=$(sed 's/ctl=//' "$dir/cbrecv.ready")

    # Every callback verified, and the hub delivers to each of them.
    local active=0
    for ((i = 0; i < 600; i++)); do
        stats 0 || true
        active=$(curl -s --max-time 5 "http://$hub_http/topics" |
            jq --arg t "$topic_uri" '[.[] | select(.topic == $t) | .websub[]? | select(.state == "active")] | length' 2>/dev/null || echo 0)
        [ "${R[cur.healthy.verified_all]:-0}" -ge "$n" ] && [ "${active:-0}" -ge "$n" ] && break
        sleep 0.1
    done
    echo "   subscribed: ${R[cur.healthy.sub_ok]:-0} accepted, ${R[cur.healthy.verified_all]:-0} verified, $active active in GET /topics" >&2
    [ "${active:-0}" -ge "$n" ] || die "$key: only $active of $n subscriptions active (see $dir)"

    # Warm-up: 20 publishes; every healthy callback has all of them and
    # every bad one has been reached (keep-alive connections are open).
    "$wsload" --target rshub --http "$hub_http" --topic "$topic_uri" --subs 0 \
        --rate 20 --duration 1 --drain 5 --pub-conns "$pub_conns" \
        --label "$key-warm" > "$dir/warm.out" 2> "$dir/warm.err" || true
    local nb wacc
    wacc=$(sed -n 's/^RESULT .* accepted=\([0-9]*\) .*/\1/p' "$dir/warm.out")
    for ((i = 0; i < 300; i++)); do
        stats 0 || true
        nb=${R[cur.bad.subs]:-0}
        [ "${R[cur.healthy.missing]:-1}" = 0 ] &&
            [ "${R[cur.all.union]:-0}" -ge "${wacc:-20}" ] &&
            [ "${R[cur.bad.reached]:-0}" -ge "$nb" ] && break
        sleep 0.1
    done
    [ "${R[cur.healthy.missing]:-1}" = 0 ] ||
        echo "   warm-up: ${R[cur.healthy.missing]:-?} warm-up deliveries still missing" >&2

    # Measure: publish for $dur s, then wait up to $drain s until every
    # healthy callback has every notification that reached any callback, and
    # those are at least as many as the publisher had accepted.
    ctl /reset >/dev/null
    local c0 r0 k0 b0 d0 f0 t0
    c0=$(cpu_ticks "$hub_pid")
    r0=$(cpu_ticks "$redis_pid")
    k0=$(cpu_ticks "$cb_pid")
    b0=$(busy_ticks)
    d0=$(hub_metric rshub_websub_deliveries_total)
    f0=$(hub_metric rshub_websub_delivery_failures_total)
    t0=$(date +%s.%N)
    local perf_pid=""
    if [ $perf -eq 1 ]; then
        perf record --call-graph dwarf,16384 -F 250 -p "$hub_pid" -o "$dir/perf.data" \
            -- sleep "$dur" > "$dir/perf.log" 2>&1 &
        perf_pid=$!
        pids+=("$perf_pid")
    fi
    timeout --signal=TERM $((dur + 60)) /usr/bin/time -f '%U %S' -o "$dir/wsload.time" \
        "$wsload" --target rshub --http "$hub_http" --topic "$topic_uri" \
        --subs 0 --rate "$rate" --duration "$dur" --drain 5 \
        --pub-conns "$pub_conns" --label "$key" > "$dir/wsload.out" \
        2> "$dir/wsload.err" || true
    local line
    line=$(grep '^RESULT ' "$dir/wsload.out" | tail -1 || true)
    [ -n "$line" ] || die "$key: wsload printed no result (see $dir)"
    kv_into "$key.pub" "$line"
    local sent=${R[$key.pub.sent]} acc=${R[$key.pub.accepted]}
    local deadline
    deadline=$(awk -v t="$(date +%s.%N)" -v d="$drain" 'BEGIN {printf "%.0f", (t + d) * 10}')
    while :; do
        stats "$sent" || true
        [ "${R[cur.healthy.missing]:-1}" = 0 ] &&
            [ "${R[cur.all.union]:-0}" -ge "$acc" ] && break
        [ "$(awk -v t="$(date +%s.%N)" 'BEGIN {printf "%.0f", t * 10}')" -ge "$deadline" ] && break
        sleep 0.1
    done
    if [ -n "$perf_pid" ]; then wait "$perf_pid" 2>/dev/null || true; fi
    local c1 r1 k1 b1 d1 f1 t1
    c1=$(cpu_ticks "$hub_pid")
    r1=$(cpu_ticks "$redis_pid")
    k1=$(cpu_ticks "$cb_pid")
    b1=$(busy_ticks)
    d1=$(hub_metric rshub_websub_deliveries_total)
    f1=$(hub_metric rshub_websub_delivery_failures_total)
    t1=$(date +%s.%N)
    stats "$sent" || true
    local g f
    for g in healthy bad all; do
        for f in subs attempts delivered deliveries_ps union missing missing_subs repeats dup_ids no_id posts err late held conns p50_ms p99_ms p999_ms max_ms stale; do
            R[$key.$g.$f]=${R[cur.$g.$f]:--}
        done
    done
    # Lower bounds: accepted publishes that reached no callback, and
    # publishes answered non-2xx that reached one all the same.
    R[$key.lost]=$(( acc > ${R[$key.all.union]:-0} ? acc - ${R[$key.all.union]:-0} : 0 ))
    R[$key.unacked]=$(( ${R[$key.all.union]:-0} > acc ? ${R[$key.all.union]:-0} - acc : 0 ))
    R[$key.open]=$(ss -tnH state established '( dst 127.77.0.0/16 )' 2>/dev/null | wc -l)
    R[$key.rss]=$(awk -v k="$(status_kb "$hub_pid" VmRSS)" 'BEGIN {printf "%.1f", k / 1024}')
    R[$key.hwm]=$(awk -v k="$(status_kb "$hub_pid" VmHWM)" 'BEGIN {printf "%.1f", k / 1024}')
    R[$key.wall]=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
    R[$key.cpu]=$(secs "$c0" "$c1")
    R[$key.rcpu]=$(secs "$r0" "$r1")
    R[$key.kcpu]=$(secs "$k0" "$k1")
    R[$key.lcpu]=$(awk '{printf "%.2f", $1 + $2; exit}' "$dir/wsload.time" 2>/dev/null || echo -)
    R[$key.ocpu]=$(awk -v b=$((b1 - b0)) -v c=$((c1 - c0 + r1 - r0 + k1 - k0)) \
        -v l="${R[$key.lcpu]}" -v hz="$hz" 'BEGIN {v = (b - c) / hz - l; printf "%.2f", v < 0 ? 0 : v}')
    R[$key.hub_ok]=$((${d1%.*} - ${d0%.*}))
    R[$key.hub_fail]=$((${f1%.*} - ${f0%.*}))
    R[$key.n]=$n
    R[$key.rate]=$rate
    R[$key.mode]=$mode
    rows+=("$key")
    sed 's/^/   /' "$dir/wsload.err" | grep -v '^   *$' >&2 || true
    echo "   healthy: ${R[$key.healthy.delivered]} delivered (${R[$key.healthy.deliveries_ps]}/s), missing ${R[$key.healthy.missing]}, p50 ${R[$key.healthy.p50_ms]} ms, p99 ${R[$key.healthy.p99_ms]} ms; hub CPU ${R[$key.cpu]} s in ${R[$key.wall]} s" >&2

    # one by one, so that each goes while what it talks to is still up
    stop_pids "$cb_pid"
    stop_pids "$hub_pid"
    stop_pids "$redis_pid"
    local keep_pids=() p
    for p in "${pids[@]}"; do
        [ "$p" = "$cb_pid" ] || [ "$p" = "$hub_pid" ] || [ "$p" = "$redis_pid" ] ||
            [ "$p" = "$perf_pid" ] || keep_pids+=("$p")
    done
    pids=("${keep_pids[@]}")
    grep '^RESULT ' "$dir/cbrecv.out" > "$dir/cbrecv.result" 2>/dev/null || true
    if grep -qiE 'assert|segfault|abort' "$dir/rshub.log" 2>/dev/null; then
        echo "   rshub log mentions a crash, see $dir/rshub.log" >&2
    fi
}

# --------------------------------------------------------------- scenarios
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for sc in $scenarios; do
    case $sc in
    max)
        for r in $rates; do
            run_case "max-$r" "$subs" "$r" none "$max_delivery_timeout" 10m
        done ;;
    fanout|fail|stall) ;;
    *) die "unknown scenario $sc" ;;
    esac
done
# fanout (the baseline), fail and stall, round by round
small=()
for sc in fanout fail stall; do
    [[ " $scenarios " == *" $sc "* ]] && small+=("$sc")
done
for ((rd = 1; rd <= reps && ${#small[@]} > 0; rd++)); do
    for sc in "${small[@]}"; do
        m=ok
        [ "$sc" = fanout ] || m=$sc
        run_case "$sc-$small_rate-r$rd" "$small_subs" "$small_rate" "$m" \
            "$delivery_timeout" "$retry_max_delay"
    done
done

# ------------------------------------------------------------------- table
ratio() {   # A B -> A/B, 2 decimals, or -
    awk -v a="${1:--}" -v b="${2:--}" 'BEGIN {
        if (a == "-" || b == "-" || b + 0 <= 0 || a + 0 < 0) print "-";
        else printf "%.2f", a / b }'
}

table() {
    echo "| scenario | callbacks | asked pub/s | asked deliv/s | accepted/s | deliveries/s | p50 ms | p99 ms | p99.9 ms | max ms | p99 all ms | refused | delivered though refused | lost | undelivered | repeats | new conns (bad) | open conns | bad attempts | hub CPU s | hub CPU % | Redis CPU s | cbrecv CPU s | wsload CPU s | other CPU s | hub RSS MB | hub peak MB |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    local k nb asked pct who badc atts
    for k in "${rows[@]}"; do
        nb=${R[$k.bad.subs]:-0}
        [ "$nb" = - ] && nb=0
        case ${R[$k.mode]} in
        none) who="${R[$k.n]}"; asked=$((R[$k.rate] * R[$k.n])) ;;
        ok) who="${R[$k.n]} (${nb} apart, healthy)"; asked=$((R[$k.rate] * R[$k.n])) ;;
        fail) who="${R[$k.n]} (${nb} answer 500)"; asked=$((R[$k.rate] * (R[$k.n] - nb))) ;;
        stall) who="${R[$k.n]} (${nb} never answer)"; asked=$((R[$k.rate] * (R[$k.n] - nb))) ;;
        esac
        badc=-
        atts=-
        case ${R[$k.mode]} in
        fail|stall) badc=${R[$k.bad.conns]}; atts=${R[$k.bad.attempts]} ;;
        esac
        pct=$(awk -v c="${R[$k.cpu]}" -v w="${R[$k.wall]}" 'BEGIN {v = 0; if (w > 0) v = 100 * c / w; printf "%.0f", v}')
        echo "| $k | $who | ${R[$k.rate]} | $asked | ${R[$k.pub.accepted_ps]} | ${R[$k.all.deliveries_ps]} | ${R[$k.healthy.p50_ms]} | ${R[$k.healthy.p99_ms]} | ${R[$k.healthy.p999_ms]} | ${R[$k.healthy.max_ms]} | ${R[$k.all.p99_ms]} | ${R[$k.pub.refused]} | ${R[$k.unacked]} | ${R[$k.lost]} | ${R[$k.healthy.missing]} | $(( ${R[$k.healthy.repeats]:-0} + ${R[$k.healthy.dup_ids]:-0} )) | ${R[$k.healthy.conns]} ($badc) | ${R[$k.open]} | $atts | ${R[$k.cpu]} | $pct | ${R[$k.rcpu]} | ${R[$k.kcpu]} | ${R[$k.lcpu]} | ${R[$k.ocpu]} | ${R[$k.rss]} | ${R[$k.hwm]} |"
    done
    local rd m base
    for ((rd = 1; rd <= reps; rd++)); do
        base=fanout-$small_rate-r$rd
        [ -n "${R[$base.n]:-}" ] || continue
        for m in fail stall; do
            k=$m-$small_rate-r$rd
            [ -n "${R[$k.n]:-}" ] || continue
            echo "| **$k / $base** (same healthy callbacks) | | | | | | $(ratio "${R[$k.healthy.p50_ms]}" "${R[$base.healthy.p50_ms]}") | $(ratio "${R[$k.healthy.p99_ms]}" "${R[$base.healthy.p99_ms]}") | $(ratio "${R[$k.healthy.p999_ms]}" "${R[$base.healthy.p999_ms]}") | | | | | | | | | | | $(ratio "${R[$k.cpu]}" "${R[$base.cpu]}") | | | | | | | |"
        done
    done
}

median() {   # VALUE... (numbers or -) -> the median of the numbers, or -
    printf '%s\n' "$@" | grep -v '^-$' | sort -g |
        awk '{v[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

# FIELD MODE -> the median over rounds of MODE's healthy FIELD
med_of() {
    local rd vals=()
    for ((rd = 1; rd <= reps; rd++)); do
        vals+=("${R[$2-$small_rate-r$rd.healthy.$1]:--}")
    done
    median "${vals[@]}"
}

# FIELD -> the median over rounds of fanout's FIELD over all its callbacks
med_all() {
    local rd vals=()
    for ((rd = 1; rd <= reps; rd++)); do
        vals+=("${R[fanout-$small_rate-r$rd.all.$1]:--}")
    done
    median "${vals[@]}"
}

# MODE -> the median over rounds of MODE's p99 / fanout's p99 (same round)
med_ratio() {
    local rd vals=()
    for ((rd = 1; rd <= reps; rd++)); do
        vals+=("$(ratio "${R[$1-$small_rate-r$rd.healthy.p99_ms]:--}" "${R[fanout-$small_rate-r$rd.healthy.p99_ms]:--}")")
    done
    median "${vals[@]}"
}

# ------------------------------------------------------------------- goals
goal() {   # TEXT OK(1/0/-) DETAIL
    local v=MISSED
    [ "$2" = 1 ] && v=met
    [ "$2" = - ] && v="not measured"
    echo "- $1: **$v** ($3)"
}

goals() {
    local k best=- bestk="" ok rd
    for k in "${rows[@]}"; do
        [[ $k == max-* ]] || continue
        # sustained cleanly: everything accepted and delivered once
        [ "${R[$k.healthy.missing]}" = 0 ] && [ "${R[$k.lost]}" = 0 ] &&
            [ "${R[$k.pub.refused]}" = 0 ] &&
            [ $(( ${R[$k.healthy.repeats]:-0} + ${R[$k.healthy.dup_ids]:-0} )) = 0 ] || continue
        best=$(awk -v a="$best" -v b="${R[$k.healthy.deliveries_ps]}" 'BEGIN {print (a == "-" || b + 0 > a + 0) ? b : a}')
        [ "$best" = "${R[$k.healthy.deliveries_ps]}" ] && bestk=$k
    done
    if [[ " $scenarios " == *" max "* ]]; then
        ok=$(awk -v b="$best" 'BEGIN {print (b != "-" && b + 0 >= 10000) ? 1 : 0}')
        goal ">= 10,000 deliveries/s to $subs callbacks, sustained (nothing refused, lost or repeated)" "$ok" "best $best/s${bestk:+ ($bestk)}"
        local conns=0 dl=0
        for k in "${rows[@]}"; do
            [[ $k == max-* ]] || continue
            conns=$((conns + ${R[$k.healthy.conns]:-0}))
            dl=$((dl + ${R[$k.healthy.delivered]:-0}))
        done
        ok=$(awk -v c="$conns" -v d="$dl" 'BEGIN {print (d > 0 && c <= d / 1000) ? 1 : 0}')
        goal "keep-alive: no connection per delivery (<= 1 per 1,000)" "$ok" "$conns connections opened during $dl measured deliveries, after the warm-up had opened one per callback"
    fi
    if [ -n "${R[fanout-$small_rate-r1.n]:-}" ]; then
        local p99 p50 m r all
        p99=$(med_all p99_ms)
        p50=$(med_all p50_ms)
        ok=$(awk -v p="$p99" 'BEGIN {print (p != "-" && p >= 0 && p < 50) ? 1 : 0}')
        all=""
        for ((rd = 1; rd <= reps; rd++)); do all="$all ${R[fanout-$small_rate-r$rd.all.p99_ms]:--}"; done
        goal "p99 < 50 ms at $small_rate publishes/s to $small_subs callbacks" "$ok" "all $small_subs callbacks, median of $reps rounds: p99 $p99 ms, p50 $p50 ms; p99 per round:$all ms"
        for m in fail stall; do
            [ -n "${R[$m-$small_rate-r1.n]:-}" ] || continue
            r=$(med_ratio "$m")
            ok=$(awk -v r="$r" 'BEGIN {print (r != "-" && r < 1.10) ? 1 : 0}')
            all=""
            for ((rd = 1; rd <= reps; rd++)); do
                all="$all $(ratio "${R[$m-$small_rate-r$rd.healthy.p99_ms]:--}" "${R[fanout-$small_rate-r$rd.healthy.p99_ms]:--}")"
            done
            goal "$bad_pct % ${m}ing callbacks raise the others' p99 by < 10 %" "$ok" "the same $((small_subs - ${R[fanout-$small_rate-r1.bad.subs]:-0})) callbacks' p99 x$r (median of the rounds' ratios; per round:$all); median p99 $(med_of p99_ms "$m") ms vs $(med_of p99_ms fanout) ms"
        done
    fi
    local miss=0 rep=0 noid=0 where="" rwhere="" r1 lost=0 unack=0 uwhere=""
    for k in "${rows[@]}"; do
        lost=$((lost + ${R[$k.lost]:-0}))
        unack=$((unack + ${R[$k.unacked]:-0}))
        [ "${R[$k.unacked]:-0}" = 0 ] || uwhere="$uwhere $k"
        miss=$((miss + ${R[$k.healthy.missing]:-0}))
        r1=$((${R[$k.healthy.repeats]:-0} + ${R[$k.healthy.dup_ids]:-0}))
        rep=$((rep + r1))
        noid=$((noid + ${R[$k.healthy.no_id]:-0}))
        [ "${R[$k.healthy.missing]:-0}" = 0 ] || where="$where $k"
        [ "$r1" = 0 ] || rwhere="$rwhere $k"
    done
    goal "healthy callbacks: every notification once, in order, with X-Hub-Id" "$([ $((miss + rep + noid + lost)) -eq 0 ] && echo 1 || echo 0)" "accepted but delivered to none (at least) $lost, undelivered at the end of the drain $miss${where:+ (in:$where)}, repeated or out of order $rep${rwhere:+ (in:$rwhere)}, without X-Hub-Id $noid"
    goal "a publish answered non-2xx is not delivered (503 = nothing stored)" "$([ $unack -eq 0 ] && echo 1 || echo 0)" "delivered though refused (at least) $unack${uwhere:+ (in:$uwhere)}"
}

{
    echo
    echo "Load average before: $load0; after: $(cut -d' ' -f1-3 /proc/loadavg) (other CPU s: what else ran on the machine during each run)"
    echo "Machine: $(nproc) CPUs ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(awk '/MemTotal/ {printf "%.0f GB", $2 / 1048576}' /proc/meminfo), Linux $(uname -r), open files $(ulimit -n)"
    echo "Versions: rshub $("$rshub" --version 2>&1 | head -1 | awk '{print $NF}'), $(redis-server --version | awk '{print $3}' | sed 's/v=/redis /'), libcurl $(curl-config --version 2>/dev/null | awk '{print $2}' || echo '?'), libevent $(pkg-config --modversion libevent 2>/dev/null || echo '?')"
    echo "Setup: rshub --open --callback-allow 127.0.0.0/8 --delivery-host-conns $host_conns; \"max\": --delivery-timeout $max_delivery_timeout, fanout/fail/stall: --delivery-timeout $delivery_timeout --retry-max-delay $retry_max_delay, $reps interleaved round(s); one 127.77.x.y address per callback; wsload publisher, $pub_conns keep-alive connections, ${dur} s per scenario, drain up to ${drain} s; bad = $bad_pct % of callbacks ($(if [ "$stall" = 0 ]; then echo 'stall: never answer'; else echo "stall: answer after $stall s"; fi)); nice ${nice_n:-0}"
    echo
    table
    echo
    goals
} | tee "$tmp/table.md"
if [ -n "$out" ]; then cp "$tmp/table.md" "$out"; fi
exit 0
