#!/usr/bin/env bash
# bench_hub.sh - rshub against nchan (memory store and Redis-backed), side by
# side in one run on loopback, with the same ~1 KB change notification and
# the same load tool (wsload). Starts its own redis-servers, rshub and
# nginx+nchan from a private config in a temp dir, measures each server's
# CPU (/proc/PID/stat utime+stime) and memory (Pss of its processes), prints
# one table with ratios and the goals of docs/benchmarks.md. Everything it
# starts, it stops; it never touches a system nginx or redis.
# --targets "rshub floor" sets rshub against floor_ws, a minimal epoll
# broadcast server without persistence (the latency floor), and
# --rshub-b BIN adds a second rshub build (target rshub-b) for A/B runs;
# --repeat N runs the fan-out scenario N times, targets interleaved.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/../.." && pwd)/build-bench
dur=20
drain=10
rates="100 1000 5000 10000"
heavy_rates="10 100"
subs=1000
heavy_subs=10000
idle_subs=19000
ingest_rate=50000
pub_conns=32
threads=2
nchan_workers=auto
targets="rshub nchan nchan-redis"
scenarios="idle fanout heavy ingest"
out=""
keep=0
nice_n=""
repeat=1
rshub_b=""
rshub_a=""
floor_args="-t $(nproc) -H"
rshub_args=""

usage() {
    cat <<EOF
Usage: $0 [OPTION]...
Runs rshub and nchan side by side on loopback (see docs/benchmarks.md).
  --build DIR          build dir with hub/rshub and tests/bench/wsload
                       (default $build; Release: -DCMAKE_BUILD_TYPE=Release)
  --quick              5 s per scenario, 5 s drain
  --duration S         seconds per scenario (default $dur)
  --drain S            longest wait for late deliveries (default $drain)
  --scenarios LIST     of: idle fanout heavy ingest (default "$scenarios")
  --targets LIST       of: rshub rshub-b floor nchan nchan-redis
                       (default "$targets"); floor = floor_ws, the latency
                       floor; rshub-b = the binary given by --rshub-b
  --rshub BIN          the rshub binary (default: the build dir's)
  --floor-args ARGS    floor_ws options (default "$floor_args": one loop per
                       CPU for subscribers, publishes on a loop of their
                       own, as rshub's main loop and service threads)
  --rshub-args ARGS    more rshub options, for both rshub targets
  --rshub-b BIN        a second rshub binary (A/B in one run)
  --repeat N           run the fanout scenario N times, targets interleaved,
                       and print the ratios to the floor per run (default 1)
  --rates LIST         fan-out publish rates (default "$rates")
  --pub-conns N        keep-alive publish connections (default $pub_conns)
  --nchan-workers N    nginx worker_processes (default $nchan_workers)
  --out FILE           also write the table (markdown) to FILE
  --keep               keep the temp dir (logs, configs)
  --nice N             run everything (servers, Redis, wsload) at nice N;
                       a negative N (root) shields the figures from other
                       work on a shared machine, all targets alike
EOF
}

while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift ;;
    --quick) dur=5; drain=5 ;;
    --duration) dur=$2; shift ;;
    --drain) drain=$2; shift ;;
    --scenarios) scenarios=$2; shift ;;
    --targets) targets=$2; shift ;;
    --rates) rates=$2; shift ;;
    --pub-conns) pub_conns=$2; shift ;;
    --nchan-workers) nchan_workers=$2; shift ;;
    --out) out=$2; shift ;;
    --keep) keep=1 ;;
    --nice) nice_n=$2; shift ;;
    --repeat) repeat=$2; shift ;;
    --rshub-b) rshub_b=$2; shift ;;
    --rshub) rshub_a=$2; shift ;;
    --floor-args) floor_args=$2; shift ;;
    --rshub-args) rshub_args=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_hub: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

die() { echo "bench_hub: $*" >&2; exit 1; }

# ------------------------------------------------------------ prerequisites
# The project's own script installs the peers (nginx with nchan) if missing.
bash "$(dirname "$here")/../deploy/install-deps.sh" --bench ||
    die "cannot install the benchmark's dependencies (deploy/install-deps.sh --bench)"
rshub=${rshub_a:-$build/hub/rshub}
wsload=$build/tests/bench/wsload
floor_ws=$build/tests/bench/floor_ws
nchan_mod=/usr/lib/nginx/modules/ngx_nchan_module.so
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$rshub" ] && [ -x "$wsload" ] ||
    die "no $rshub or $wsload; build them first:
  cmake -S $(dirname "$here")/.. -B $build -DCMAKE_BUILD_TYPE=Release -DRS_TESTS=OFF -DRS_BENCH=ON
  cmake --build $build -j2 --target rshub wsload"
command -v redis-server >/dev/null || die "redis-server is missing (apt-get install -y redis-server)"
case " $targets " in
*" floor "*) [ -x "$floor_ws" ] || die "no $floor_ws; build it: cmake --build $build --target floor_ws" ;;
esac
case " $targets " in
*" rshub-b "*) [ -x "$rshub_b" ] || die "--targets rshub-b needs --rshub-b BIN" ;;
esac
case " $targets " in
*nchan*)
    [ -x "$nginx_bin" ] && [ -f "$nchan_mod" ] ||
        die "nginx with nchan is missing: apt-get install -y nginx-light libnginx-mod-nchan" ;;
esac

if [ -n "$nice_n" ]; then
    renice -n "$nice_n" -p $$ >/dev/null || die "cannot renice to $nice_n"
fi

# The hard limit here is 20,000 open files per process; every run below is
# sized to stay under it (the 19,000 idle subscribers use two wsloads).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
nofile=$(ulimit -n)
[ "$nofile" = unlimited ] && nofile=1048576
if [ "$idle_subs" -gt $((nofile - 500)) ]; then
    idle_subs=$((nofile - 500))
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_hub.XXXXXX")
pids=()

cleanup() {
    local pid i
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        pid=${pids[i]}
        kill -TERM "$pid" 2>/dev/null || true
    done
    for ((i = 0; i < 50; i++)); do
        local alive=0
        for pid in "${pids[@]}"; do
            kill -0 "$pid" 2>/dev/null && alive=1
        done
        [ $alive -eq 0 ] && break
        sleep 0.1
    done
    for pid in "${pids[@]}"; do
        kill -KILL "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    if [ $keep -eq 1 ]; then
        echo "bench_hub: logs kept in $tmp" >&2
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

start_redis() {   # NAME PORT -> pid in redis_pid
    mkdir -p "$tmp/$1"
    redis-server --port "$2" --bind 127.0.0.1 --dir "$tmp/$1" \
        --save '' --appendonly no --daemonize no \
        --logfile "$tmp/$1/redis.log" &
    redis_pid=$!
    pids+=("$redis_pid")
    wait_port "$2"
}

# ---------------------------------------------------------------- servers
declare -A srv_pid redis_of http_of ws_of channel_of
topic_uri=http://bench.example.org/dataset1/changelist.xml

for t in $targets; do
    case $t in
    rshub|rshub-b)
        bin=$rshub
        [ "$t" = rshub-b ] && bin=$rshub_b
        port=$(free_port)
        start_redis "redis-$t" "$port"
        redis_of[$t]=$redis_pid
        printf '[topic bench]\nuri = %s\n' "$topic_uri" > "$tmp/$t.conf"
        "$bin" -c "$tmp/$t.conf" -l 127.0.0.1:0 -w 127.0.0.1:0 \
            -r "redis://127.0.0.1:$port" --log-level warn \
            --log-file "$tmp/$t.log" --ready-file "$tmp/$t.ready" $rshub_args &
        srv_pid[$t]=$!
        pids+=("$!")
        for ((i = 0; i < 100; i++)); do
            [ -s "$tmp/$t.ready" ] && break
            sleep 0.1
        done
        [ -s "$tmp/$t.ready" ] || die "$t did not start (see $tmp/$t.log)"
        ready=$(cat "$tmp/$t.ready")
        hp=$(sed 's/.*"http":\([0-9]*\).*/\1/' <<<"$ready")
        wp=$(sed 's/.*"ws":\([0-9]*\).*/\1/' <<<"$ready")
        http_of[$t]=127.0.0.1:$hp
        ws_of[$t]=127.0.0.1:$wp
        ;;
    floor)
        # shellcheck disable=SC2086
        "$floor_ws" $floor_args -r "$tmp/floor.ready" 2> "$tmp/floor.log" &
        srv_pid[floor]=$!
        pids+=("$!")
        for ((i = 0; i < 100; i++)); do
            [ -s "$tmp/floor.ready" ] && break
            sleep 0.1
        done
        [ -s "$tmp/floor.ready" ] || die "floor_ws did not start (see $tmp/floor.log)"
        redis_of[floor]=""
        read -r wp hp < "$tmp/floor.ready"
        ws_of[floor]=127.0.0.1:$wp
        http_of[floor]=127.0.0.1:${hp:-$wp}
        ;;
    nchan|nchan-redis)
        dir=$tmp/$t
        mkdir -p "$dir"
        : > "$dir/upstream.conf"
        : > "$dir/storage.conf"
        redis_of[$t]=""
        if [ "$t" = nchan-redis ]; then
            port=$(free_port)
            start_redis redis-nchan "$port"
            redis_of[$t]=$redis_pid
            sed "s|@REDIS_PORT@|$port|g" "$here/nchan/redis-upstream.conf.in" \
                > "$dir/upstream.conf"
            cp "$here/nchan/redis-storage.conf.in" "$dir/storage.conf"
        fi
        port=$(free_port)
        sed -e "s|@MODULE@|$nchan_mod|; s|@WORKERS@|$nchan_workers|" \
            -e "s|@NOFILE@|$nofile|g; s|@DIR@|$dir|g; s|@PORT@|$port|" \
            -e "/@UPSTREAM@/{r $dir/upstream.conf" -e "d}" \
            -e "/@STORAGE@/{r $dir/storage.conf" -e "d}" \
            "$here/nchan/nginx.conf.in" > "$dir/nginx.conf"
        "$nginx_bin" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" &
        srv_pid[$t]=$!
        pids+=("$!")
        wait_port "$port"
        http_of[$t]=127.0.0.1:$port
        ws_of[$t]=127.0.0.1:$port
        ;;
    *) die "unknown target $t" ;;
    esac
done

# ------------------------------------------------------------ measurement
server_pids() {   # TARGET: the server process and its children (workers)
    local p=${srv_pid[$1]}
    echo "$p"
    pgrep -P "$p" 2>/dev/null || true
}

cpu_ticks() {   # PID... -> utime+stime summed, in clock ticks
    local sum=0 p f
    for p in "$@"; do
        [ -r "/proc/$p/stat" ] || continue
        f=$(sed 's/.*) //' "/proc/$p/stat")
        set -- $f
        sum=$((sum + ${12} + ${13}))
    done
    echo "$sum"
}

pss_kb() {   # PID... -> Pss summed, kB (= the VmRSS of a lone process
             # less its share of libraries mapped elsewhere)
    local sum=0 p v
    for p in "$@"; do
        v=$(awk '/^Pss:/ {print $2; exit}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)
        sum=$((sum + ${v:-0}))
    done
    echo "$sum"
}

hz=$(getconf CLK_TCK)

busy_ticks() {   # every CPU's non-idle time, clock ticks
    awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat
}

rshub_metric() {   # TARGET NAME -> value from that rshub's /metrics
    local hp=${http_of[$1]}
    shift
    exec 3<>"/dev/tcp/${hp%:*}/${hp#*:}"
    printf 'GET /metrics HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$hp" >&3
    local v
    v=$(awk -v n="$1" '$1 == n {print $2; exit}' <&3)
    exec 3<&-
    echo "${v:-0}"
}

declare -A R
rows=()
seq_no=0

parse_result() {   # KEY FILE: RESULT key=value ... into R[KEY.key]
    local line kv
    line=$(grep '^RESULT ' "$2" | tail -1 || true)
    [ -n "$line" ] || { echo "bench_hub: $1: no result (see $2)" >&2; return 1; }
    for kv in ${line#RESULT }; do
        R[$1.${kv%%=*}]=${kv#*=}
    done
}

# One wsload run against one target; KEY names the row.
run_case() {   # KEY TARGET WSLOAD-ARGS...
    local key=$1 t=$2
    shift 2
    local tgt=rshub ch=bench
    if [[ $t == nchan* ]]; then
        tgt=nchan
        seq_no=$((seq_no + 1))
        ch=b$seq_no-$RANDOM
    fi
    local sp rp
    sp=$(server_pids "$t")
    rp=${redis_of[$t]}
    local c0 r0 d0=0 w0=0
    c0=$(cpu_ticks $sp)
    r0=$(cpu_ticks $rp)
    if [[ $t == rshub* ]]; then
        d0=$(rshub_metric "$t" rshub_ws_deliveries_total)
        w0=$(rshub_metric "$t" rshub_ws_writes_total)
    fi
    local b0 b1
    b0=$(busy_ticks)
    echo "== $key: $t $*" >&2
    timeout --signal=TERM $((dur + drain + 240)) \
        /usr/bin/time -f '%U %S' -o "$tmp/$key.time" "$wsload" --target "$tgt" --http "${http_of[$t]}" --ws "${ws_of[$t]}" \
        --channel "$ch" --topic "$topic_uri" --threads "$threads" \
        --pub-conns "$pub_conns" --duration "$dur" --drain "$drain" \
        --label "$key" "$@" > "$tmp/$key.out" 2> "$tmp/$key.err" || true
    sed 's/^/   /' "$tmp/$key.err" >&2
    local c1 r1
    c1=$(cpu_ticks $sp)
    r1=$(cpu_ticks $rp)
    b1=$(busy_ticks)
    parse_result "$key" "$tmp/$key.out" || return 0
    R[$key.lcpu]=$(awk '{printf "%.2f", $1 + $2; exit}' "$tmp/$key.time" 2>/dev/null || echo -)
    # CPU used by anything else on the machine meanwhile: noise
    R[$key.ocpu]=$(awk -v b=$((b1 - b0)) -v c=$((c1 - c0)) -v r=$((${r1:-0} - ${r0:-0})) \
        -v l="${R[$key.lcpu]}" -v hz="$hz" 'BEGIN {v = (b - c - r) / hz - l; printf "%.2f", v < 0 ? 0 : v}')
    R[$key.cpu]=$(awk -v a="$c0" -v b="$c1" -v hz="$hz" 'BEGIN {printf "%.2f", (b - a) / hz}')
    R[$key.rcpu]=-
    [ -z "$rp" ] || R[$key.rcpu]=$(awk -v a="$r0" -v b="$r1" -v hz="$hz" 'BEGIN {printf "%.2f", (b - a) / hz}')
    R[$key.fpw]=-
    if [[ $t == rshub* ]]; then
        local d1 w1
        d1=$(rshub_metric "$t" rshub_ws_deliveries_total)
        w1=$(rshub_metric "$t" rshub_ws_writes_total)
        R[$key.fpw]=$(awk -v d=$((d1 - d0)) -v w=$((w1 - w0)) 'BEGIN {if (w > 0) printf "%.1f", d / w; else print "-"}')
    fi
    R[$key.srv]=$t
    R[$key.mem]=-
    rows+=("$key")
}

# 19,000 idle subscribers in two wsload processes (each under the fd cap).
run_idle() {   # KEY TARGET
    local key=$1 t=$2 tgt=rshub ch=bench half=$((idle_subs / 2))
    [[ $t == nchan* ]] && { tgt=nchan; ch=idle$RANDOM; }
    local sp m0 m1 a b i
    sp=$(server_pids "$t")
    m0=$(pss_kb $sp)
    echo "== $key: $t $idle_subs idle subscribers" >&2
    "$wsload" --target "$tgt" --ws "${ws_of[$t]}" --channel "$ch" \
        --subs "$half" --threads 1 --sources 2-128 --hold 600 \
        --label "$key" > "$tmp/$key.a.out" 2> "$tmp/$key.a.err" &
    a=$!
    pids+=("$a")
    "$wsload" --target "$tgt" --ws "${ws_of[$t]}" --channel "$ch" \
        --subs $((idle_subs - half)) --threads 1 --sources 129-254 --hold 600 \
        --label "$key" > "$tmp/$key.b.out" 2> "$tmp/$key.b.err" &
    b=$!
    pids+=("$b")
    for ((i = 0; i < 1800; i++)); do
        grep -q CONNECTED "$tmp/$key.a.out" 2>/dev/null &&
            grep -q CONNECTED "$tmp/$key.b.out" 2>/dev/null && break
        sleep 0.1
    done
    sleep 3   # let the server finish its per-connection work
    sp=$(server_pids "$t")
    m1=$(pss_kb $sp)
    kill -TERM "$a" "$b" 2>/dev/null || true
    wait "$a" "$b" 2>/dev/null || true
    cat "$tmp/$key.a.err" "$tmp/$key.b.err" | sed 's/^/   /' >&2
    parse_result "$key.a" "$tmp/$key.a.out" || return 0
    parse_result "$key.b" "$tmp/$key.b.out" || return 0
    local open=$((R[$key.a.open] + R[$key.b.open]))
    R[$key.srv]=$t
    R[$key.subs]=$idle_subs
    R[$key.open]=$open
    R[$key.conn_fail]=$((R[$key.a.conn_fail] + R[$key.b.conn_fail]))
    R[$key.closed]=$((R[$key.a.closed] + R[$key.b.closed]))
    R[$key.mem]=$(awk -v a="$m0" -v b="$m1" -v n="$open" 'BEGIN {if (n > 0) printf "%.0f", (b - a) * 1024 / n; else print "-"}')
    R[$key.mem0]=$m0
    R[$key.mem1]=$m1
    rows+=("$key")
    sleep 2   # the closes settle before the next run
}

# --------------------------------------------------------------- scenarios
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for sc in $scenarios; do
    case $sc in
    idle)
        for t in $targets; do run_idle "idle-$t" "$t"; done ;;
    fanout)
        for ((rep_i = 1; rep_i <= repeat; rep_i++)); do
            sfx=""
            [ "$rep_i" -gt 1 ] && sfx=-run$rep_i
            for r in $rates; do
                for t in $targets; do
                    run_case "fanout-$r$sfx-$t" "$t" --subs "$subs" --rate "$r"
                done
            done
        done ;;
    heavy)
        for r in $heavy_rates; do
            for t in $targets; do
                run_case "heavy-$r-$t" "$t" --subs "$heavy_subs" --rate "$r" \
                    --connect-timeout 120
            done
        done ;;
    ingest)
        for n in 0 "$subs"; do
            for t in $targets; do
                [ "$t" = nchan ] && continue   # memory store: nothing persisted
                run_case "ingest-$n-$t" "$t" --subs "$n" --rate "$ingest_rate"
            done
        done ;;
    *) die "unknown scenario $sc" ;;
    esac
done

# ------------------------------------------------------------------- table
fmt() { [ -n "${1:-}" ] && echo "$1" || echo -; }

ratio() {   # A B -> A/B with 2 decimals, or -
    awk -v a="${1:--}" -v b="${2:--}" 'BEGIN {
        if (a == "-" || b == "-" || b + 0 == 0 || a + 0 < 0 || b + 0 < 0) print "-";
        else printf "%.2f", a / b }'
}

table() {
    echo "| scenario | target | subs (open) | asked/s | accepted/s | deliveries/s | hub CPU s | Redis CPU s | wsload CPU s | other CPU s | p50 ms | p99 ms | p99.9 ms | max ms | lost | closed | conn fail | frames/write | bytes/conn |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    local k prev="" base
    for k in "${rows[@]}"; do
        local t=${R[$k.srv]}
        base=${k%-"$t"}
        if [ -n "$prev" ] && [ "$base" != "$prev" ]; then
            ratio_rows "$prev"
        fi
        prev=$base
        if [[ $k == idle-* ]]; then
            echo "| idle | $t | $idle_subs ($(fmt "${R[$k.open]}")) | - | - | - | - | - | - | - | - | - | - | - | - | $(fmt "${R[$k.closed]}") | $(fmt "${R[$k.conn_fail]}") | - | $(fmt "${R[$k.mem]}") |"
            continue
        fi
        echo "| $base | $t | ${R[$k.subs]} (${R[$k.open]}) | ${R[$k.rate]} | ${R[$k.accepted_ps]} | ${R[$k.deliveries_ps]} | ${R[$k.cpu]} | ${R[$k.rcpu]} | ${R[$k.lcpu]} | ${R[$k.ocpu]} | ${R[$k.p50_ms]} | ${R[$k.p99_ms]} | ${R[$k.p999_ms]} | ${R[$k.max_ms]} | ${R[$k.lost]} | ${R[$k.closed]} | ${R[$k.conn_fail]} | ${R[$k.fpw]} | - |"
    done
    if [ -n "$prev" ]; then ratio_rows "$prev"; fi
}

ratio_rows() {   # BASE: rshub/nchan, rshub/nchan-redis, rshub/floor
    local base=$1 o a b
    a=$base-rshub
    if [ -n "${R[$base-floor.srv]:-}" ]; then
        for o in rshub rshub-b; do
            a=$base-$o
            b=$base-floor
            [ -n "${R[$a.srv]:-}" ] || continue
            echo "| $base | **$o/floor** | | | $(ratio "${R[$a.accepted_ps]}" "${R[$b.accepted_ps]}") | $(ratio "${R[$a.deliveries_ps]}" "${R[$b.deliveries_ps]}") | $(ratio "${R[$a.cpu]}" "${R[$b.cpu]}") | | | | $(ratio "${R[$a.p50_ms]}" "${R[$b.p50_ms]}") | $(ratio "${R[$a.p99_ms]}" "${R[$b.p99_ms]}") | $(ratio "${R[$a.p999_ms]}" "${R[$b.p999_ms]}") | $(ratio "${R[$a.max_ms]}" "${R[$b.max_ms]}") | | | | | |"
        done
        a=$base-rshub
    fi
    [ -n "${R[$a.srv]:-}" ] || return 0
    for o in nchan nchan-redis; do
        b=$base-$o
        [ -n "${R[$b.srv]:-}" ] || continue
        if [[ $base == idle ]]; then
            echo "| idle | **rshub/$o** | | | | | | | | | | | | | | | | | $(ratio "${R[$a.mem]}" "${R[$b.mem]}") |"
        else
            echo "| $base | **rshub/$o** | | | $(ratio "${R[$a.accepted_ps]}" "${R[$b.accepted_ps]}") | $(ratio "${R[$a.deliveries_ps]}" "${R[$b.deliveries_ps]}") | $(ratio "${R[$a.cpu]}" "${R[$b.cpu]}") | | | | $(ratio "${R[$a.p50_ms]}" "${R[$b.p50_ms]}") | $(ratio "${R[$a.p99_ms]}" "${R[$b.p99_ms]}") | $(ratio "${R[$a.p999_ms]}" "${R[$b.p999_ms]}") | $(ratio "${R[$a.max_ms]}" "${R[$b.max_ms]}") | | | | | |"
        fi
    done
}

# ------------------------------------------------------------------- goals
goal() {   # TEXT OK(1/0/-) DETAIL
    local v=MISSED
    [ "$2" = 1 ] && v=met
    [ "$2" = - ] && v="not measured"
    echo "- $1: **$v** ($3)"
}

median() {   # VALUES... (- ignored) -> median, or -
    printf '%s\n' "$@" | grep -v '^-$' | sort -g |
        awk '{v[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

gt() { awk -v a="${1:--}" -v b="${2:--}" 'BEGIN {print (a != "-" && b != "-" && a + 0 >= b + 0) ? 1 : 0}'; }

maxof() {   # FIELD KEY... -> max numeric value
    local f=$1 m=- k v
    shift
    for k in "$@"; do
        v=${R[$k.$f]:-}
        [ -z "$v" ] && continue
        m=$(awk -v a="$m" -v b="$v" 'BEGIN {print (a == "-" || b + 0 > a + 0) ? b : a}')
    done
    echo "$m"
}

goals() {
    local r=rshub k
    if [[ " $scenarios " == *" fanout "* ]]; then
        local rs nc="-" ncr
        rs=$(maxof deliveries_ps $(for x in $rates; do echo "fanout-$x-rshub"; done))
        nc=$(maxof deliveries_ps $(for x in $rates; do echo "fanout-$x-nchan"; echo "fanout-$x-nchan-redis"; done))
        ncr=$(awk -v n="$nc" 'BEGIN {print (n == "-") ? "-" : 2 * n}')
        goal "deliveries/s at $subs subscribers >= 2x nchan's best" "$( [ "$nc" = - ] && echo - || gt "$rs" "$ncr")" "rshub $rs/s, best nchan $nc/s, ratio $(ratio "$rs" "$nc")"
        k=fanout-100-rshub
        if [ -n "${R[$k.p99_ms]:-}" ]; then
            local ok
            ok=$(awk -v p="${R[$k.p99_ms]}" 'BEGIN {print (p >= 0 && p <= 15) ? 1 : 0}')
            goal "p99 <= 15 ms at $subs subscribers, 100 publishes/s" "$ok" "rshub ${R[$k.p99_ms]} ms, nchan ${R[fanout-100-nchan.p99_ms]:--} ms, nchan-redis ${R[fanout-100-nchan-redis.p99_ms]:--} ms"
        fi
    fi
    if [[ " $scenarios " == *" heavy "* ]]; then
        k=heavy-100
        local a=${R[$k-rshub.accepted_ps]:--} b
        b=$(maxof accepted_ps "$k-nchan" "$k-nchan-redis")
        local need
        need=$(awk -v n="$b" 'BEGIN {print (n == "-") ? "-" : 3 * n}')
        goal "accepted publishes/s at $heavy_subs subscribers (100 asked) >= 3x nchan's" "$( [ "$b" = - ] && echo - || gt "$a" "$need")" "rshub $a/s, best nchan $b/s, ratio $(ratio "$a" "$b")"
    fi
    if [[ " $scenarios " == *" idle "* ]]; then
        local m=${R[idle-rshub.mem]:--}
        goal "<= 5 kB per idle connection" "$(awk -v m="$m" 'BEGIN {print (m != "-" && m <= 5000) ? 1 : 0}')" "rshub $m B, nchan ${R[idle-nchan.mem]:--} B, nchan-redis ${R[idle-nchan-redis.mem]:--} B"
    fi
    if [[ " $targets " == *" floor "* ]] && [[ " $scenarios " == *" fanout "* ]]; then
        local o i sfx k50 k99 l50 l99
        for o in rshub rshub-b; do
            [[ " $targets " == *" $o "* ]] || continue
            l50="" l99=""
            for ((i = 1; i <= repeat; i++)); do
                sfx=""
                [ "$i" -gt 1 ] && sfx=-run$i
                k50=$(ratio "${R[fanout-100$sfx-$o.p50_ms]:-}" "${R[fanout-100$sfx-floor.p50_ms]:-}")
                k99=$(ratio "${R[fanout-100$sfx-$o.p99_ms]:-}" "${R[fanout-100$sfx-floor.p99_ms]:-}")
                l50="$l50 $k50" l99="$l99 $k99"
            done
            local m50 m99
            m50=$(median $l50)
            m99=$(median $l99)
            goal "$o p99 within 1.3x the floor's at $subs subscribers, 100 publishes/s (median of runs)" "$(awk -v m="$m99" 'BEGIN {print (m != "-" && m <= 1.3) ? 1 : 0}')" "p99 ratio per run:$l99; median $m99"
            goal "$o p50 within 1.5x the floor's (median of runs)" "$(awk -v m="$m50" 'BEGIN {print (m != "-" && m <= 1.5) ? 1 : 0}')" "p50 ratio per run:$l50; median $m50"
        done
    fi
    local lost=0 closed=0 nohub=0 runs=""
    for k in "${rows[@]}"; do
        [[ ${R[$k.srv]} == rshub* ]] || continue
        [[ $k == idle-* ]] && continue
        lost=$((lost + ${R[$k.lost]:-0}))
        closed=$((closed + ${R[$k.closed]:-0}))
        nohub=$((nohub + ${R[$k.no_hub_id]:-0}))
        if [ "${R[$k.lost]:-0}" != 0 ]; then runs="$runs $k"; fi
    done
    goal "zero loss (rshub, every run)" "$([ $lost -eq 0 ] && echo 1 || echo 0)" "lost $lost, closed by the hub $closed${runs:+; in:$runs}"
    goal "persisted before delivered (every delivery carries its stream id)" "$([ $nohub -eq 0 ] && echo 1 || echo 0)" "$nohub deliveries without hub:id"
}

{
    echo
    echo "Load average before: $load0; after: $(cut -d' ' -f1-3 /proc/loadavg) (other CPU s: what else ran on the machine during each run)"
    echo "Machine: $(nproc) CPUs ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(awk '/MemTotal/ {printf "%.0f GB", $2 / 1048576}' /proc/meminfo), Linux $(uname -r), open files $nofile"
    echo "Versions: rshub $("$rshub" --version 2>&1 | head -1 | awk '{print $NF}'), $("$nginx_bin" -v 2>&1 | sed 's/.*: //') + nchan $(dpkg-query -W -f '${Version}' libnginx-mod-nchan 2>/dev/null || echo '?') ($nchan_workers workers), $(redis-server --version | awk '{print $3}' | sed 's/v=/redis /')"
    echo "Load: wsload, $threads subscriber threads, $pub_conns publish connections, ${dur} s per scenario, drain up to ${drain} s; nice ${nice_n:-0}; CPU = utime+stime of the server's processes; bytes/conn = Pss growth / connections"
    case " $targets " in *" floor "*) echo "floor_ws $floor_args; rshub: $rshub${rshub_b:+, rshub-b: $rshub_b}${rshub_args:+, options $rshub_args}" ;; esac
    echo
    table
    echo
    goals
} | tee "$tmp/table.md"
if [ -n "$out" ]; then cp "$tmp/table.md" "$out"; fi
exit 0
