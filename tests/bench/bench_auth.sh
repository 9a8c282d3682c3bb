#!/usr/bin/env bash
# bench_auth.sh - the cost of rshub's read check (issue 16): WebSocket
# connection set-up rate and idle memory per connection for a public topic
# without a credential and for a private topic with a static read-token, an
# HS256 JWT, an ES256 JWT and an RS256 JWT, interleaved in one run
# (a b c d e, then e d c b a: the machine is shared and noisy) and printed
# per run and as medians with each case's ratio to the public topic.
#
# Set-up rate: one rshub (Release) serves every run; wsload opens N
# connections as fast as it can (64 handshakes in flight per thread) with
# the case's "Authorization: Bearer" and reports completed upgrades per
# second and the upgrade's round trip (request written -> 101 read). The
# rshub's CPU over the run, per upgrade, is the check's cost without the
# load tool's. The one public key rshub takes decides ES256 or RS256: the
# key file is swapped and rshub reloaded (SIGHUP) between those cases.
# Idle memory: Pss growth of a fresh rshub (same build, configuration and
# Redis) per measurement / connections, with M idle connections held:
# a process that already held and closed thousands of connections reuses
# its freed heap and would show almost no growth for whatever came second.
# Everything it starts (redis-server, rshub, wsload) it stops by PID.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/../.." && pwd)/build-bench
conns=5000
idle=10000
rounds=1
cases="a b c d e"
keep=0
out=""
nice_n=""

usage() {
    cat <<EOF
Usage: $0 [OPTION]...
The cost of rshub's read check on WebSocket upgrades (docs/benchmarks.md,
"Read access (issue 16)").
  --build DIR       build dir with hub/rshub and tests/bench/wsload
                    (default $build; Release)
  --conns N         connections per set-up-rate run (default $conns)
  --idle N          idle connections per memory run (default $idle)
  --rounds R        each round runs the cases forward then backward
                    (default $rounds: every case twice)
  --cases LIST      of: a (public, no credential), b (private, static
                    token), c (HS256 JWT), d (ES256 JWT), e (RS256 JWT)
                    (default "$cases")
  --quick           --conns 1000 --idle 2000
  --nice N          run rshub, Redis and wsload at nice N
  --out FILE        also write the tables (markdown) to FILE
  --keep            keep the temp dir (logs, keys, configuration)
EOF
}

while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift ;;
    --conns) conns=$2; shift ;;
    --idle) idle=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --cases) cases=$2; shift ;;
    --quick) conns=1000; idle=2000 ;;
    --nice) nice_n=$2; shift ;;
    --out) out=$2; shift ;;
    --keep) keep=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_auth: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

die() { echo "bench_auth: $*" >&2; exit 1; }

rshub=$build/hub/rshub
wsload=$build/tests/bench/wsload
[ -x "$rshub" ] && [ -x "$wsload" ] ||
    die "no $rshub or $wsload; build them first:
  cmake -S $(dirname "$here")/.. -B $build -DCMAKE_BUILD_TYPE=Release -DRS_BENCH=ON
  cmake --build $build -j2 --target rshub wsload"
command -v redis-server >/dev/null || die "redis-server is missing (apt-get install -y redis-server)"
command -v openssl >/dev/null || die "openssl is missing"
# PyJWT from Debian (python3-jwt), whatever python3 comes first in PATH
py=/usr/bin/python3
"$py" -c 'import jwt, cryptography' 2>/dev/null ||
    die "python3-jwt is missing (apt-get install -y python3-jwt)"
for c in $cases; do
    case $c in a|b|c|d|e) ;; *) die "unknown case $c" ;; esac
done

if [ -n "$nice_n" ]; then
    renice -n "$nice_n" -p $$ >/dev/null || die "cannot renice to $nice_n"
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
nofile=$(ulimit -n)
[ "$nofile" = unlimited ] && nofile=1048576
[ "$idle" -le $((nofile - 500)) ] || die "--idle $idle needs more than $nofile open files"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_auth.XXXXXX")
pids=()

stop_pid() {   # PID: TERM, up to 5 s, then KILL
    local p=$1 i
    kill -TERM "$p" 2>/dev/null || return 0
    for ((i = 0; i < 50; i++)); do
        kill -0 "$p" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
}

cleanup() {
    local i
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        stop_pid "${pids[i]}"
    done
    if [ $keep -eq 1 ]; then
        echo "bench_auth: logs kept in $tmp" >&2
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

forget_pid() {   # PID: no longer ours to stop
    local i
    for i in "${!pids[@]}"; do
        [ "${pids[i]}" = "$1" ] && unset 'pids[i]'
    done
    pids=("${pids[@]}")
}

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

# ------------------------------------------------------------ credentials
umask 077
openssl rand -hex 32 > "$tmp/jwt.secret"
openssl ecparam -name prime256v1 -genkey -noout -out "$tmp/ec.key" 2>/dev/null
openssl ec -in "$tmp/ec.key" -pubout -out "$tmp/ec.pub" 2>/dev/null
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$tmp/rsa.key" 2>/dev/null
openssl rsa -in "$tmp/rsa.key" -pubout -out "$tmp/rsa.pub" 2>/dev/null
cp "$tmp/ec.pub" "$tmp/read-jwt.pub"
static_token=$(openssl rand -base64 32 | tr '+/' '-_' | tr -d '=\n')

mint() {   # ALG KEYFILE: a JWT for the private topic, valid one hour
    "$py" - "$1" "$2" <<'EOF'
import sys, time, jwt
alg, keyfile = sys.argv[1], sys.argv[2]
key = open(keyfile, "rb").read()
if alg == "HS256":
    key = key.splitlines()[0]
print(jwt.encode({"exp": int(time.time()) + 3600, "topics": ["priv"]}, key, alg))
EOF
}
declare -A token
token[a]=""
token[b]=$static_token
token[c]=$(mint HS256 "$tmp/jwt.secret")
token[d]=$(mint ES256 "$tmp/ec.key")
token[e]=$(mint RS256 "$tmp/rsa.key")
declare -A chan=([a]=pub [b]=priv [c]=priv [d]=priv [e]=priv)
declare -A what=([a]="public topic, no credential" [b]="private, static read-token"
                 [c]="private, HS256 JWT" [d]="private, ES256 JWT" [e]="private, RS256 JWT")
declare -A keyalg=([a]="" [b]="" [c]="" [d]=ec [e]=rsa)

cat > "$tmp/rshub.conf" <<EOF
[topic pub]
uri = http://bench.example.org/public/changelist.xml

[topic priv]
uri = http://bench.example.org/private/changelist.xml
read-token = $static_token
EOF

# ---------------------------------------------------------------- servers
rport=$(free_port)
mkdir -p "$tmp/redis"
redis-server --port "$rport" --bind 127.0.0.1 --dir "$tmp/redis" \
    --save '' --appendonly no --daemonize no --logfile "$tmp/redis/redis.log" &
pids+=("$!")
for ((i = 0; i < 100; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$rport") 2>/dev/null && break
    sleep 0.1
done

# rshub with both JWT keys (as a hub that takes both kinds); the per-address
# upgrade rate limit is off: the run opens thousands a second from 254
# loopback addresses.
start_rshub() {   # NAME -> hub_pid, hub_ws
    local name=$1 i
    rm -f "$tmp/$name.ready"
    "$rshub" -c "$tmp/rshub.conf" -l 127.0.0.1:0 -w 127.0.0.1:0 \
        -r "redis://127.0.0.1:$rport" --redis-prefix "$name:" \
        --read-jwt-secret-file "$tmp/jwt.secret" \
        --read-jwt-public-key-file "$tmp/read-jwt.pub" \
        --ws-conn-rate 0 --log-level warn \
        --log-file "$tmp/$name.log" --ready-file "$tmp/$name.ready" &
    hub_pid=$!
    pids+=("$hub_pid")
    for ((i = 0; i < 100; i++)); do
        [ -s "$tmp/$name.ready" ] && break
        sleep 0.1
    done
    [ -s "$tmp/$name.ready" ] || die "rshub did not start (see $tmp/$name.log)"
    hub_ws=127.0.0.1:$(sed 's/.*"ws":\([0-9]*\).*/\1/' "$tmp/$name.ready")
}

cpu_ticks() {   # PID -> utime+stime, clock ticks
    local f
    f=$(sed 's/.*) //' "/proc/$1/stat")
    set -- $f
    echo $((${12} + ${13}))
}

pss_kb() {
    awk '/^Pss:/ {print $2; exit}' "/proc/$1/smaps_rollup"
}

hz=$(getconf CLK_TCK)
declare -A R

parse_result() {   # KEY FILE
    local line kv
    line=$(grep '^RESULT ' "$2" | tail -1 || true)
    [ -n "$line" ] || die "$1: wsload gave no result (see $2, ${2%.out}.err)"
    for kv in ${line#RESULT }; do
        R[$1.${kv%%=*}]=${kv#*=}
    done
}

# wsload holding N connections on WS with case C's credential until
# CONNECTED; leaves its pid in ws_pid.
wsload_hold() {   # KEY C N WS THREADS
    local key=$1 c=$2 n=$3 ws=$4 th=$5 i
    local hdr=()
    [ -n "${token[$c]}" ] && hdr=(--header "Authorization: Bearer ${token[$c]}")
    # no older file of that name may answer the wait below
    rm -f "$tmp/$key.out" "$tmp/$key.err"
    "$wsload" --target rshub --ws "$ws" --channel "${chan[$c]}" --subs "$n" \
        --threads "$th" --hold 600 --connect-timeout 120 --label "$key" \
        "${hdr[@]}" > "$tmp/$key.out" 2> "$tmp/$key.err" &
    ws_pid=$!
    pids+=("$ws_pid")
    for ((i = 0; i < 1800; i++)); do
        grep -q CONNECTED "$tmp/$key.out" 2>/dev/null && return 0
        kill -0 "$ws_pid" 2>/dev/null || break
        sleep 0.1
    done
    die "$key: wsload did not connect (see $tmp/$key.err)"
}

wsload_release() {   # KEY
    stop_pid "$ws_pid"
    forget_pid "$ws_pid"
    parse_result "$1" "$tmp/$1.out"
    sed 's/^/   /' "$tmp/$1.err" >&2
}

# ------------------------------------------------------------ the checks
# The run measures a check only if the check is made: the private topic
# refuses no credential and a wrong one, and lets each case's in.
start_rshub hub
main_pid=$hub_pid
main_ws=$hub_ws
current_key=ec
probes=0

use_key() {   # ec|rsa: the main rshub's public key, reloaded by SIGHUP
    local k=$1 i
    [ -z "$k" ] || [ "$k" = "$current_key" ] && return 0
    cp "$tmp/$k.pub" "$tmp/read-jwt.pub"
    kill -HUP "$main_pid"
    current_key=$k
    # reloaded once a token of the new key is let in
    local c=d
    [ "$k" = rsa ] && c=e
    for ((i = 0; i < 50; i++)); do
        probes=$((probes + 1))
        wsload_hold "probe-$probes" "$c" 1 "$main_ws" 1
        wsload_release "probe-$probes" 2>/dev/null
        [ "${R[probe-$probes.open]}" = 1 ] && return 0
        sleep 0.1
    done
    die "rshub did not take the $k key on SIGHUP (see $tmp/hub.log)"
}

check_case() {   # C EXPECT-OPEN (of 4) HEADER...
    local c=$1 want=$2 key=check-$1-$2
    shift 2
    "$wsload" --target rshub --ws "$main_ws" --channel "$c" --subs 4 \
        --threads 1 --hold 0 --connect-timeout 6 "$@" > "$tmp/$key.out" 2> "$tmp/$key.err" || true
    parse_result "$key" "$tmp/$key.out"
    [ "${R[$key.open]}" = "$want" ] ||
        die "check: channel $c with '$*': ${R[$key.open]} of 4 open, expected $want"
}
check_case priv 0
check_case priv 0 --header "Authorization: Bearer wrong-$static_token"
check_case pub 4
for c in $cases; do
    [ "$c" = a ] && continue
    use_key "${keyalg[$c]}"
    check_case priv 4 --header "Authorization: Bearer ${token[$c]}"
done
echo "bench_auth: checks passed (private topic: no credential and a wrong one refused; every case's credential let in)" >&2

# ------------------------------------------------------------------- runs
order=()
for ((r = 0; r < rounds; r++)); do
    read -r -a fwd <<<"$cases"
    order+=("${fwd[@]}")
    for ((i = ${#fwd[@]} - 1; i >= 0; i--)); do order+=("${fwd[i]}"); done
done

run_rate() {   # KEY C: set-up rate on the main rshub
    local key=$1 c=$2 t0 t1
    use_key "${keyalg[$c]}"
    sleep 1   # the previous run's closes are done
    t0=$(cpu_ticks "$main_pid")
    echo "== $key: ${what[$c]}: $conns upgrades" >&2
    wsload_hold "$key" "$c" "$conns" "$main_ws" 2
    t1=$(cpu_ticks "$main_pid")
    wsload_release "$key"
    R[$key.cpu_us]=$(awk -v d=$((t1 - t0)) -v hz="$hz" -v n="${R[$key.upgrades]}" \
        'BEGIN {if (n > 0) printf "%.0f", d / hz * 1e6 / n; else print "-"}')
}

run_mem() {   # KEY C: idle memory on a fresh rshub
    local key=$1 c=$2 m0 m1
    [ -z "${keyalg[$c]}" ] || cp "$tmp/${keyalg[$c]}.pub" "$tmp/read-jwt.pub"
    start_rshub "$key"
    sleep 1
    m0=$(pss_kb "$hub_pid")
    echo "== $key: ${what[$c]}: $idle idle connections on a fresh rshub" >&2
    wsload_hold "$key" "$c" "$idle" "$hub_ws" 2
    sleep 3   # the hub finishes its per-connection work
    m1=$(pss_kb "$hub_pid")
    wsload_release "$key"
    stop_pid "$hub_pid"
    forget_pid "$hub_pid"
    cp "$tmp/$current_key.pub" "$tmp/read-jwt.pub"
    R[$key.mem]=$(awk -v a="$m0" -v b="$m1" -v n="${R[$key.open]}" \
        'BEGIN {if (n > 0) printf "%.0f", (b - a) * 1024 / n; else print "-"}')
    R[$key.m0]=$m0
    R[$key.m1]=$m1
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
busy0=$(awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat)
n=0
runs=()
for c in "${order[@]}"; do
    n=$((n + 1))
    run_rate "rate-$n" "$c"
    run_mem "mem-$n" "$c"
    runs+=("$n:$c")
done
busy1=$(awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat)

# ------------------------------------------------------------------ tables
median() {   # VALUES... -> median, or -
    printf '%s\n' "$@" | awk '$1 != "-" && $1 != "" {print $1}' | sort -g |
        awk '{v[NR] = $1} END {if (NR == 0) print "-";
             else if (NR % 2) print v[(NR + 1) / 2];
             else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

ratio() {
    awk -v a="${1:--}" -v b="${2:--}" 'BEGIN {
        if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'
}

declare -A M
{
    echo
    echo "Load average before: $load0; after: $(cut -d' ' -f1-3 /proc/loadavg); all CPUs busy $(awk -v b=$((busy1 - busy0)) -v hz="$hz" 'BEGIN {printf "%.0f", b / hz}') CPU-s during the runs"
    echo "Machine: $(nproc) CPUs ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(awk '/MemTotal/ {printf "%.0f GB", $2 / 1048576}' /proc/meminfo), Linux $(uname -r); rshub $("$rshub" --version 2>&1 | head -1 | awk '{print $NF}') ($build), $(redis-server --version | awk '{print $3}' | sed 's/v=/redis /'), $(openssl version | awk '{print $1, $2}'); nice ${nice_n:-0}"
    echo "Load: wsload, 2 threads, 64 upgrades in flight per thread; $conns upgrades per set-up run (one rshub); $idle idle connections per memory run (a fresh rshub each); tokens: static ${#static_token} chars, HS256 ${#token[c]}, ES256 ${#token[d]}, RS256 ${#token[e]}"
    echo
    echo "Per run (in the order run):"
    echo
    echo "| run | case | upgrades | failed | upgrades/s | round trip p50 ms | p99 ms | max ms | hub CPU µs/upgrade | idle conns | Pss before kB | after kB | bytes/conn |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    for x in "${runs[@]}"; do
        i=${x%%:*}
        c=${x#*:}
        r=rate-$i
        m=mem-$i
        echo "| $i | $c | ${R[$r.upgrades]} | ${R[$r.conn_fail]} | ${R[$r.up_ps]} | ${R[$r.up_p50_ms]} | ${R[$r.up_p99_ms]} | ${R[$r.up_max_ms]} | ${R[$r.cpu_us]} | ${R[$m.open]} | ${R[$m.m0]} | ${R[$m.m1]} | ${R[$m.mem]} |"
    done
    echo
    echo "Median over the runs of each case, and its ratio to (a):"
    echo
    echo "| case | runs | upgrades/s | ratio | round trip p50 ms | ratio | p99 ms | ratio | hub CPU µs/upgrade | ratio | bytes/conn | ratio |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    for c in $cases; do
        for f in up_ps up_p50_ms up_p99_ms cpu_us; do
            vals=()
            for x in "${runs[@]}"; do
                [ "${x#*:}" = "$c" ] && vals+=("${R[rate-${x%%:*}.$f]}")
            done
            M[$c.$f]=$(median "${vals[@]}")
        done
        vals=()
        k=0
        for x in "${runs[@]}"; do
            [ "${x#*:}" = "$c" ] || continue
            vals+=("${R[mem-${x%%:*}.mem]}")
            k=$((k + 1))
        done
        M[$c.mem]=$(median "${vals[@]}")
        M[$c.n]=$k
    done
    for c in $cases; do
        echo "| ($c) ${what[$c]} | ${M[$c.n]} | ${M[$c.up_ps]} | $(ratio "${M[$c.up_ps]}" "${M[a.up_ps]:--}") | ${M[$c.up_p50_ms]} | $(ratio "${M[$c.up_p50_ms]}" "${M[a.up_p50_ms]:--}") | ${M[$c.up_p99_ms]} | $(ratio "${M[$c.up_p99_ms]}" "${M[a.up_p99_ms]:--}") | ${M[$c.cpu_us]} | $(ratio "${M[$c.cpu_us]}" "${M[a.cpu_us]:--}") | ${M[$c.mem]} | $(ratio "${M[$c.mem]}" "${M[a.mem]:--}") |"
    done
} | tee "$tmp/table.md"
if [ -n "$out" ]; then cp "$tmp/table.md" "$out"; fi
exit 0
