#!/usr/bin/env bash
# bench_sub.sh - rssub's figures for docs/benchmarks.md ("Subscriber
# (rssub)"), three parts:
#   baseline  a baseline of N small files (1-4 KiB) served by rssource,
#             rssub sync side by side with the Python reference client
#             (resync-sync --baseline), interleaved, R runs each: res/s,
#             peak RSS, CPU, rssource's CPU, and both mirrors diffed;
#   million   rssub sync and audit of a static Source of 1,000,000
#             resources (Resource List Index of 20 x 50,000, one nginx
#             location answers every resource): peak RSS and res/s, with a
#             100,000-entry run of the same Source for comparison;
#             --rssub-b BIN runs each of these syncs with a second rssub
#             too, in turn (A/B in one run);
#   push      redis-server + rshub + rssource --hub + rssub run (WebSocket):
#             bench_sub_push creates files at 100/s and 1,000/s and times
#             each one from send to its rename into the mirror (inotify).
# Builds nothing; starts its own processes on loopback in a temp dir and
# stops only those, by PID.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build-bench-sub
resync=${RS_RESYNC_DIR:-}
parts="baseline million push"
files=10000
reps=3
million=1000000
mpart=50000
msmall=2
mreps=1
push_rates="100 1000"
push_secs=10
push_drain=10
push_files=1000
rssub_args=""
rssub_b=""
out=""
keep=0
nice_n=""
client_timeout=600
million_timeout=3600
mirror_roots="disk"

usage() {
    cat <<EOF
Usage: $0 [OPTION]...
rssub's benchmark (docs/benchmarks.md, "Subscriber (rssub)").
  --build DIR         build dir with subscriber/rssub, source/rssource,
                      hub/rshub, tests/bench/bench_sub_push (Release;
                      default $build)
  --resync DIR        checkout of github.com/resync/resync: resync-sync
                      --baseline runs side by side (default \$RS_RESYNC_DIR;
                      none: the peer is skipped)
  --parts LIST        of: baseline million push (default "$parts")
  --files N           baseline: files in the tree (default $files)
  --reps N            baseline and push: runs of each, interleaved (default $reps)
  --mirror-roots LIST where mirrors and rssub's state go; every part runs
                      once per root, in turn: "disk" (the temp dir) or a
                      directory such as /dev/shm (a tmpfs: file creation
                      without the disk filesystem's cost; a private
                      directory is made in it) (default "$mirror_roots")
  --million N         million: resources of the static Source (default $million)
  --million-part N    million: entries per Resource List part (default $mpart)
  --million-small K   million: also a run over the first K parts, the
                      memory comparison point (default $msmall; 0: none)
  --million-reps N    million: runs of the full sync (default $mreps)
  --rssub-b BIN       million: a second rssub binary; every sync and audit
                      runs with it too, in turn with the build's (which one
                      goes first alternates between runs): A/B in one run
  --push-rates LIST   push: changes/s (default "$push_rates")
  --push-seconds S    push: writing time per run (default $push_secs)
  --push-drain S      push: longest wait for the last arrivals (default $push_drain)
  --push-files N      push: files in the Source before rssub starts (default $push_files)
  --rssub-args "..."  extra options for every rssub command (e.g. "--parallel 64")
  --timeout S         longest run of one sync client (default $client_timeout)
  --million-timeout S longest rssub sync or audit in "million" (default $million_timeout)
  --quick             2,000 files, 1 run, 100,000 resources, 3 s pushes
  --nice N            run at nice N (negative: root)
  --out FILE          also write the tables (markdown) to FILE
  --keep              keep the temp dir (logs, mirrors)
EOF
}

while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift ;;
    --resync) resync=$2; shift ;;
    --parts) parts=$2; shift ;;
    --files) files=$2; shift ;;
    --reps) reps=$2; shift ;;
    --million) million=$2; shift ;;
    --million-part) mpart=$2; shift ;;
    --million-small) msmall=$2; shift ;;
    --million-reps) mreps=$2; shift ;;
    --push-rates) push_rates=$2; shift ;;
    --push-seconds) push_secs=$2; shift ;;
    --push-drain) push_drain=$2; shift ;;
    --push-files) push_files=$2; shift ;;
    --rssub-args) rssub_args=$2; shift ;;
    --rssub-b) rssub_b=$2; shift ;;
    --mirror-roots) mirror_roots=$2; shift ;;
    --timeout) client_timeout=$2; shift ;;
    --million-timeout) million_timeout=$2; shift ;;
    --quick) files=2000; reps=1; million=100000; msmall=1; push_secs=3 ;;
    --nice) nice_n=$2; shift ;;
    --out) out=$2; shift ;;
    --keep) keep=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_sub: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

die() { echo "bench_sub: $*" >&2; exit 1; }
note() { echo "$*" >&2; }
has_part() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }

PY=/usr/bin/python3
rssub=$build/subscriber/rssub
rssource=$build/source/rssource
rshub=$build/hub/rshub
pusher=$build/tests/bench/bench_sub_push
need=("$rssource")
has_part push && need+=("$rshub" "$pusher")
for b in "${need[@]}"; do
    [ -x "$b" ] || die "no $b; build it first:
  cmake -S $root -B $build -DCMAKE_BUILD_TYPE=Release
  make -C $build -j2 rssub rssource rshub bench_sub_push"
done
have_rssub=1
[ -x "$rssub" ] || { have_rssub=0; note "bench_sub: no $rssub: rssub's side is skipped"; }
if [ -n "$rssub_b" ] && [ ! -x "$rssub_b" ]; then
    die "--rssub-b $rssub_b is not an executable"
fi
if [ -n "$resync" ] && [ ! -f "$resync/resync-sync" ]; then
    die "--resync $resync holds no resync-sync"
fi
for c in curl diff /usr/bin/time timeout; do
    command -v "$c" >/dev/null || die "$c is missing"
done
if has_part push; then
    command -v redis-server >/dev/null || die "redis-server is missing"
fi
if has_part million; then
    command -v nginx >/dev/null || die "nginx is missing (deploy/install-deps.sh --bench: nginx-light)"
fi
if [ -n "$nice_n" ]; then
    renice -n "$nice_n" -p $$ >/dev/null || die "cannot renice to $nice_n"
fi
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy no_proxy
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
read -ra RSSUB_ARGS <<<"$rssub_args"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_sub.XXXXXX")
pids=()   # everything started, in order; stopped in reverse
extra_dirs=()   # private directories made outside $tmp (--mirror-roots)

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
        note "bench_sub: kept $tmp ${extra_dirs[*]+"${extra_dirs[*]}"}"
    else
        rm -rf "$tmp" "${extra_dirs[@]+"${extra_dirs[@]}"}"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# stop PID: stop one process started here; its status in STOP_RC.
STOP_RC=0
stop_one() {
    local pid=$1 i keep_pids=() p
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    STOP_RC=0
    wait "$pid" 2>/dev/null || STOP_RC=$?
    for p in "${pids[@]}"; do [ "$p" = "$pid" ] || keep_pids+=("$p"); done
    pids=("${keep_pids[@]+"${keep_pids[@]}"}")
}

wait_file() {   # FILE PID WHAT SECONDS
    local i
    for ((i = 0; i < $4 * 10; i++)); do
        [ -s "$1" ] && return 0
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
    done
    return 1
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

hz=$(getconf CLK_TCK)
cpu_ticks() {   # PID -> utime+stime, clock ticks (0 when gone)
    local f
    [ -r "/proc/$1/stat" ] || { echo 0; return; }
    f=$(sed 's/.*) //' "/proc/$1/stat")
    # shellcheck disable=SC2086
    set -- $f
    echo $((${12} + ${13}))
}
hwm_mb() { awk '/^VmHWM:/ {printf "%.1f", $2 / 1024}' "/proc/$1/status" 2>/dev/null || echo "-"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
median() {   # numbers -> median ("-" when none)
    printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -g |
        awk '{a[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else printf "%g\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}
maxof() { printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -g | tail -n1; }
minof() { printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -g | head -n1; }
div() { awk -v a="$1" -v b="$2" -v f="${3:-%.1f}" 'BEGIN {if (b + 0 == 0 || a == "-" || b == "-") print "-"; else printf f "\n", a / b}'; }
# kv LINE KEY: KEY's value in a line of key=value pairs
kv() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1; }

# timed PREFIX SECONDS CMD...: run CMD (bounded) under /usr/bin/time;
# stdout+stderr in PREFIX.log. Sets T_RC, T_WALL (s), T_RSS (MB), T_CPU (s).
timed() {
    local prefix=$1 secs=$2 line
    shift 2
    T_RC=0
    /usr/bin/time -f '%e %M %U %S' -o "$prefix.time" \
        timeout --signal=TERM --kill-after=10 "$secs" "$@" \
        >"$prefix.log" 2>&1 || T_RC=$?
    line=$(tail -n1 "$prefix.time")
    T_WALL=$(echo "$line" | awk '{print $1}')
    T_RSS=$(echo "$line" | awk '{printf "%.1f", $2 / 1024}')
    T_CPU=$(echo "$line" | awk '{printf "%.2f", $3 + $4}')
}

# src_start DIR STATE LOG [ARGS...]: rssource on 127.0.0.1:0; sets SRC_PID, SRC_PORT
src_start() {
    local dir=$1 state=$2 log=$3
    shift 3
    local ready=$log.ready
    rm -f "$ready"
    "$rssource" --dir "$dir" --state "$state" --listen 127.0.0.1:0 \
        --ready-file "$ready" --log-format logfmt "$@" >"$log" 2>&1 &
    SRC_PID=$!
    pids+=("$SRC_PID")
    wait_file "$ready" "$SRC_PID" rssource 600 ||
        die "rssource did not start: $(tail -n 5 "$log")"
    SRC_PORT=$(sed -n 's/.*"http":\([0-9]*\).*/\1/p' "$ready")
}

# root_enter ROOT PART: a fresh private directory for PART's mirrors on
# ROOT ("disk" or a directory); sets MROOT and ROOT_NAME ("where (fs)").
# The first time a root is used, its floor: empty files created per second.
declare -A FLOOR
root_enter() {
    local root=$1 part=$2 fs
    if [ "$root" = disk ]; then
        MROOT=$tmp/$part-disk
        mkdir -p "$MROOT"
        fs=$(df -PT "$tmp" | awk 'NR == 2 {print $2}')
        ROOT_NAME="disk ($fs)"
        ROOT_TAG=disk
    else
        MROOT=$(mktemp -d "$root/bench_sub.XXXXXX") || die "cannot use $root"
        extra_dirs+=("$MROOT")
        fs=$(df -PT "$root" | awk 'NR == 2 {print $2}')
        ROOT_NAME="$root ($fs)"
        ROOT_TAG=${root//\//_}
    fi
    if [ -z "${FLOOR[$ROOT_NAME]:-}" ]; then
        FLOOR[$ROOT_NAME]=$("$PY" "$here/bench_sub.py" floor "$MROOT" 5000)
        emit_floor+="$ROOT_NAME ${FLOOR[$ROOT_NAME]} empty files created/s; "
    fi
    note "   mirrors on $ROOT_NAME (floor: ${FLOOR[$ROOT_NAME]} empty files created/s)"
}
root_leave() {   # remove the mirrors of a root (kept with --keep only on disk)
    case $MROOT in
    "$tmp"/*) [ $keep -eq 1 ] || rm -rf "$MROOT" ;;
    *) rm -rf "$MROOT" ;;
    esac
}
emit_floor=""

tables=""
emit() { tables+="$*"$'\n'; echo "$*"; }
machine_note="load average at start: $(loadavg); $(nproc) CPUs"

# ------------------------------------------------------------- baseline

# Baseline results, per client (peer, rssub, rssub-nofsync): space-separated
# per-run figures.
declare -A B_RATE B_WALL B_RSS B_CPU B_SRC B_BAD
declare -A B_NAME=([peer]="resync-sync --baseline" [rssub]="rssub sync"
                   [rssub-nofsync]="rssub sync --fsync none")

# base_record CLIENT ROUND OK C0 C1: the figures of one run (T_*), filed
# under "$ROOT_NAME|CLIENT".
base_record() {
    local c=$ROOT_NAME\|$1 r=$2 ok=$3 rate src
    rate=$(div "$files" "$T_WALL" %.0f)
    src=$(awk -v t=$(($5 - $4)) -v hz="$hz" -v w="$T_WALL" 'BEGIN {printf "%.0f", 100 * t / hz / w}')
    B_RATE[$c]+=" $rate"; B_WALL[$c]+=" $T_WALL"; B_RSS[$c]+=" $T_RSS"
    B_CPU[$c]+=" $T_CPU"; B_SRC[$c]+=" $src"
    [ "$ok" = yes ] || B_BAD[$c]+=" round $r: $ok;"
    note "   ${B_NAME[$1]} ($ROOT_NAME), round $r: exit $T_RC, $T_WALL s, $rate res/s, peak RSS $T_RSS MB, CPU $T_CPU s, rssource CPU $src %, mirror equal: $ok"
}

run_resync() {   # ROUND
    local r=$1 d=$tmp/base/peer-$1 m=$MROOT/mirror c0 c1
    rm -rf "$m" "$d.cwd"
    mkdir -p "$m" "$d.cwd"
    c0=$(cpu_ticks "$SRC_PID")
    # resync keeps its client state in the working directory
    (cd "$d.cwd" && timed "$d" "$client_timeout" "$PY" "$resync/resync-sync" \
        --baseline "$BASE" "$m"
     echo "$T_RC $T_WALL $T_RSS $T_CPU" >"$d.t")
    c1=$(cpu_ticks "$SRC_PID")
    read -r T_RC T_WALL T_RSS T_CPU <"$d.t"
    local ok=yes ndiff
    # resync-sync exits 0 even after a FatalError: its status line says
    grep -Eq 'Status: +SYNCED' "$d.log" || ok="no (not SYNCED)"
    ndiff=$(diff -rq "$tmp/base/data" "$m" 2>&1 | wc -l || true)
    [ "$ndiff" = 0 ] || ok="no ($ndiff differences)"
    base_record peer "$r" "$ok" "$c0" "$c1"
    [ "$ok" = yes ] || grep -E 'Error|rror:' "$d.log" | head -n 3 >&2 || true
}

run_rssub_sync() {   # CLIENT ROUND
    local c=$1 r=$2 d=$tmp/base/$1-$2 m=$MROOT/mirror c0 c1 extra=()
    [ "$c" = rssub-nofsync ] && extra=(--fsync none)
    rm -rf "$m" "$MROOT/rssub.db"*
    mkdir -p "$m"
    c0=$(cpu_ticks "$SRC_PID")
    timed "$d" "$client_timeout" "$rssub" sync --source "$BASE" \
        --mirror "$m" --state "$MROOT/rssub.db" --log-format logfmt \
        "${extra[@]+"${extra[@]}"}" "${RSSUB_ARGS[@]+"${RSSUB_ARGS[@]}"}"
    c1=$(cpu_ticks "$SRC_PID")
    local ok=yes ndiff fin
    fin=$(grep 'msg=.\{0,1\}synced' "$d.log" | tail -n1 || true)
    [ "$T_RC" = 0 ] || ok="no (exit $T_RC)"
    ndiff=$(diff -rq "$tmp/base/data" "$m" 2>&1 | wc -l || true)
    [ "$ndiff" = 0 ] || ok="no ($ndiff differences)"
    base_record "$c" "$r" "$ok" "$c0" "$c1"
    note "      ${fin:-(no msg=synced line)}"
    if [ "$ok" != yes ]; then
        tail -n 5 "$d.log" >&2
        diff -rq "$tmp/base/data" "$m" 2>&1 | head -n 5 >&2 || true
    fi
}

part_baseline() {
    note "== baseline: $files files of 1-4 KiB served by rssource, $reps runs each"
    mkdir -p "$tmp/base/data"
    "$PY" "$here/bench_sub.py" tree "$tmp/base/data" "$files"
    local bytes
    bytes=$(du -sb "$tmp/base/data" | cut -f1)
    src_start "$tmp/base/data" "$tmp/base/src.state" "$tmp/base/rssource.log"
    BASE=http://127.0.0.1:$SRC_PORT/
    note "   tree: $files files, $bytes bytes; rssource at $BASE"
    local clients=() r i c n root roots=()
    [ -z "$resync" ] || clients+=(peer)
    [ $have_rssub = 0 ] || clients+=(rssub rssub-nofsync)
    n=${#clients[@]}
    for root in $mirror_roots; do
        root_enter "$root" base
        roots+=("$ROOT_NAME")
        for ((r = 1; r <= reps; r++)); do
            # each round starts with another client, so a slow spell of the
            # machine does not always hit the same one
            for ((i = 0; i < n; i++)); do
                c=${clients[$(((i + r - 1) % n))]}
                if [ "$c" = peer ]; then run_resync "$r"; else run_rssub_sync "$c" "$r"; fi
            done
        done
        root_leave
    done
    stop_one "$SRC_PID"

    emit ""
    emit "#### Baseline: $files files ($bytes bytes), rssource on loopback, $reps runs each (median; min-max)"
    emit ""
    emit "| mirror on (empty files created/s there) | client | res/s | wall s | peak RSS MB | CPU s (user+sys) | rssource CPU % of one core | mirror equal (diff -r) |"
    emit "|---|---|---:|---:|---:|---:|---:|---|"
    local k
    for root in "${roots[@]}"; do
        for c in "${clients[@]}"; do
            k="$root|$c"
            # shellcheck disable=SC2086
            emit "| $root (${FLOOR[$root]}) | ${B_NAME[$c]} | $(median ${B_RATE[$k]}) ($(minof ${B_RATE[$k]})-$(maxof ${B_RATE[$k]})) | $(median ${B_WALL[$k]}) | $(median ${B_RSS[$k]}) ($(maxof ${B_RSS[$k]})) | $(median ${B_CPU[$k]}) | $(median ${B_SRC[$k]}) | $([ -z "${B_BAD[$k]:-}" ] && echo "yes, every run" || echo "NO:${B_BAD[$k]}") |"
        done
    done
    [ -n "$resync" ] && [ $have_rssub = 1 ] || return 0
    local pr ratio verdict
    emit ""
    for root in "${roots[@]}"; do
        # shellcheck disable=SC2086
        pr=$(median ${B_RATE[$root|peer]})
        for c in rssub rssub-nofsync; do
            k="$root|$c"
            # shellcheck disable=SC2086
            ratio=$(div "$(median ${B_RATE[$k]})" "$pr")
            verdict=$(awk -v x="$ratio" 'BEGIN {print (x != "-" && x >= 20) ? "met" : "NOT met"}')
            [ -z "${B_BAD[$k]:-}" ] || verdict="NOT met (wrong mirror)"
            # shellcheck disable=SC2086
            emit "- $root, ${B_NAME[$c]} / resync-sync: **${ratio}x** the resources/s (goal >= 20x: $verdict), $(div "$(median ${B_RSS[$root|peer]})" "$(median ${B_RSS[$k]})")x less peak RSS; against the issue's 880 res/s for resync: $(div "$(median ${B_RATE[$k]})" 880)x."
        done
        emit "- $root, per run (res/s): resync-sync${B_RATE[$root|peer]}; rssub${B_RATE[$root|rssub]}; rssub --fsync none${B_RATE[$root|rssub-nofsync]}."
    done
}

# -------------------------------------------------------------- million

nginx_start() {   # ROOT PORT
    local ng=$tmp/nginx
    mkdir -p "$ng"
    cat >"$ng/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $ng/nginx.pid;
error_log $ng/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $ng/body;
    proxy_temp_path $ng/proxy;
    fastcgi_temp_path $ng/fastcgi;
    uwsgi_temp_path $ng/uwsgi;
    scgi_temp_path $ng/scgi;
    keepalive_requests 100000000;
    server {
        listen 127.0.0.1:$2;
        root $1;
        default_type application/xml;
        location /r/ { default_type text/plain; return 200 "x"; }
    }
}
EOF
    nginx -c "$ng/nginx.conf" -p "$ng" -e "$ng/error.log" &
    NGINX_PID=$!
    pids+=("$NGINX_PID")
    local i
    for ((i = 0; i < 100; i++)); do
        curl -sf -o /dev/null "http://127.0.0.1:$2/.well-known/resourcesync" && return 0
        kill -0 "$NGINX_PID" 2>/dev/null || break
        sleep 0.1
    done
    die "nginx did not start: $(tail -n 5 "$ng/error.log")"
}

# msync KEY SOURCE-URL EXPECT [BIN]: rssub sync (BIN, default the build's)
# into a fresh mirror, then rssub audit; checks the mirror holds EXPECT
# files of one byte "x".
msync() {
    local key=$1 url=$2 expect=$3 bin=${4:-$rssub} d=$tmp/m/$1-$ROOT_TAG
    rm -rf "$MROOT/mirror" "$MROOT/state.db"*
    mkdir -p "$MROOT/mirror"
    note "   $key: rssub sync of $expect resources"
    timed "$d.sync" "$million_timeout" "$bin" sync --source "$url" \
        --mirror "$MROOT/mirror" --state "$MROOT/state.db" --log-format logfmt \
        "${RSSUB_ARGS[@]+"${RSSUB_ARGS[@]}"}"
    local src=$T_RC sw=$T_WALL srss=$T_RSS scpu=$T_CPU fin nf nx ok=yes
    fin=$(grep 'msg=.\{0,1\}synced' "$d.sync.log" | tail -n1 || true)
    nf=$(find "$MROOT/mirror" -type f | wc -l)
    nx=$(find "$MROOT/mirror" -type f -print0 | xargs -0r cat | tr -d x | wc -c)
    [ "$src" = 0 ] || ok="no (exit $src)"
    [ "$nf" = "$expect" ] || ok="no ($nf files)"
    [ "$nx" = 0 ] || ok="no ($nx bytes other than x)"
    note "      rc $src, $sw s, $(div "$expect" "$sw" %.0f) res/s, peak RSS $srss MB, CPU $scpu s; mirror: $nf files; $ok"
    note "      ${fin:-(no msg=synced line)}"
    [ "$ok" = yes ] || tail -n 5 "$d.sync.log" >&2
    note "   $key: rssub audit"
    timed "$d.audit" "$million_timeout" "$bin" audit --source "$url" \
        --mirror "$MROOT/mirror" --state "$MROOT/state.db" --log-format logfmt \
        "${RSSUB_ARGS[@]+"${RSSUB_ARGS[@]}"}"
    note "      rc $T_RC, $T_WALL s, peak RSS $T_RSS MB, CPU $T_CPU s: $(grep -E 'msg=.?audited' "$d.audit.log" | tail -n 1)"
    [ "$T_RC" = 0 ] || note "      audit lists $(grep -cvE '^ts=' "$d.audit.log") differences, e.g. $(grep -vE '^ts=' "$d.audit.log" | head -n 3 | tr '\n' ' ')"
    M_PEAKS+=("$srss" "$T_RSS")
    M_ROWS+=("| $ROOT_NAME | $key | $expect | $sw | $(div "$expect" "$sw" %.0f) | **$srss** | $scpu | $ok | $T_RC ($([ "$T_RC" = 0 ] && echo "in sync" || echo "NOT in sync")) | $T_WALL | $T_RSS |")
}

# msync_ab RUN KEY SOURCE-URL EXPECT: msync with the build's rssub and, with
# --rssub-b, with that one too (key suffix "-rssub-b"); an even RUN starts
# with rssub-b, so a slow spell of the machine does not always hit one.
msync_ab() {
    local r=$1 key=$2
    shift 2
    if [ -z "$rssub_b" ]; then
        msync "$key" "$@"
    elif [ $((r % 2)) = 1 ]; then
        msync "$key" "$@"
        msync "$key-rssub-b" "$@" "$rssub_b"
    else
        msync "$key-rssub-b" "$@" "$rssub_b"
        msync "$key" "$@"
    fi
}

part_million() {
    [ $have_rssub = 1 ] || { note "== million: skipped (no rssub)"; return; }
    local nparts=$(((million + mpart - 1) / mpart))
    note "== million: static Source of $million resources ($nparts parts of $mpart), nginx"
    local port url root r
    port=$(free_port)
    url=http://127.0.0.1:$port/
    mkdir -p "$tmp/m"
    "$PY" "$here/bench_sub.py" static "$tmp/m/www" "$url" "$million" "$mpart" \
        --bounded "$((msmall > 0 ? msmall : 1))"
    nginx_start "$tmp/m/www" "$port"
    M_ROWS=(); M_PEAKS=()
    for root in $mirror_roots; do
        root_enter "$root" million
        # a tiny file costs an inode and a 4 KiB block (on a tmpfs: memory);
        # the state a few hundred bytes an entry
        local avail_kb ifree need_kb fit=$nparts
        avail_kb=$(df -Pk "$MROOT" | awk 'NR == 2 {print $4}')
        ifree=$(df -Pi "$MROOT" | awk 'NR == 2 {print $4}')
        if [ "$root" != disk ]; then
            avail_kb=$(awk -v a="$avail_kb" '/^MemAvailable:/ {print (a < $2 - 4194304) ? a : $2 - 4194304}' /proc/meminfo)
        fi
        need_kb=$((million * 6 + 2 * 1024 * 1024))
        note "   free: $((avail_kb / 1024)) MB, $ifree inodes (need about $((need_kb / 1024)) MB, $million inodes)"
        if [ "$avail_kb" -lt "$need_kb" ] || { [ "$ifree" != 0 ] && [ "$ifree" -lt $((million + 100000)) ]; }; then
            fit=$(( (avail_kb - 2 * 1024 * 1024) / 6 / mpart ))
            [ "$fit" -gt 0 ] || fit=0
            note "   not enough room for all $nparts parts: only the audit runs over the full list"
        fi
        if [ "$msmall" -gt 0 ] && [ "$msmall" -lt "$nparts" ]; then
            msync_ab 1 "first-$msmall-parts" "${url}bounded/capabilitylist.xml" $((msmall * mpart))
        fi
        if [ "$fit" -ge "$nparts" ]; then
            for ((r = 1; r <= mreps; r++)); do
                msync_ab "$r" "all-$nparts-parts-run$r" "${url}.well-known/resourcesync" "$million"
            done
        else
            note "   the full list: rssub audit only (the mirror holds what fitted)"
            local b tag
            for b in "$rssub" ${rssub_b:+"$rssub_b"}; do
                tag=""
                [ "$b" = "$rssub" ] || tag=" (rssub-b)"
                timed "$tmp/m/audit-full" "$million_timeout" "$b" audit --source "${url}.well-known/resourcesync" \
                    --mirror "$MROOT/mirror" --state "$MROOT/state.db" --log-format logfmt \
                    "${RSSUB_ARGS[@]+"${RSSUB_ARGS[@]}"}"
                M_PEAKS+=("$T_RSS")
                M_ROWS+=("| $ROOT_NAME | audit only, all $nparts parts$tag | $million | - | - | - | - | - | $T_RC | $T_WALL | **$T_RSS** |")
            done
        fi
        root_leave
    done
    stop_one "$NGINX_PID"
    emit ""
    emit "#### A static Source of $million resources (index of $nparts x $mpart), nginx answers every resource with \"x\""
    emit ""
    emit "| mirror on | run | resources | sync wall s | res/s | sync peak RSS MB | sync CPU s | mirror complete (files, content) | audit exit | audit wall s | audit peak RSS MB |"
    emit "|---|---|---:|---:|---:|---:|---:|---|---|---:|---:|"
    for r in "${M_ROWS[@]}"; do emit "$r"; done
    emit ""
    emit "Goal: constant memory, under 64 MB, for the $million-entry list: largest peak RSS above $(maxof "${M_PEAKS[@]}") MB ($(awk -v x="$(maxof "${M_PEAKS[@]}")" 'BEGIN {print (x != "" && x < 64) ? "met" : "NOT met"}'))."
}

# ----------------------------------------------------------------- push

part_push() {
    [ $have_rssub = 1 ] || { note "== push: skipped (no rssub)"; return; }
    local root
    for root in $mirror_roots; do
        push_one "$root"
    done
}

# push_one ROOT: a fresh redis-server, rshub, rssource (--hub) and rssub
# run, the mirror on ROOT; every rate, $reps rounds.
push_one() {
    root_enter "$1" push
    note "== push ($ROOT_NAME): redis-server + rshub + rssource --hub + rssub run (WebSocket)"
    # logs in $p; the Source's directory and the mirror both on ROOT, so
    # that the writer's file creation costs what rssub's does
    local p=$tmp/push-$ROOT_TAG
    local m=$MROOT/mirror data=$MROOT/data
    mkdir -p "$p/redis" "$data" "$m"
    "$PY" "$here/bench_sub.py" tree "$data" "$push_files"
    redis-server --port 0 --unixsocket "$p/redis/s.sock" --save "" \
        --appendonly no --daemonize no --dir "$p/redis" \
        --logfile "$p/redis/log" >/dev/null 2>&1 &
    local redis_pid=$!
    pids+=("$redis_pid")
    local i
    for ((i = 0; i < 100; i++)); do
        [ "$(redis-cli -s "$p/redis/s.sock" ping 2>/dev/null)" = PONG ] && break
        sleep 0.1
    done
    "$rshub" --listen 127.0.0.1:0 --ws-listen 127.0.0.1:0 \
        --redis "unix://$p/redis/s.sock" --open --log-format logfmt \
        --ready-file "$p/hub.ready" >"$p/hub.log" 2>&1 &
    local hub_pid=$!
    pids+=("$hub_pid")
    wait_file "$p/hub.ready" "$hub_pid" rshub 20 || die "rshub did not start: $(tail -n 5 "$p/hub.log")"
    local hub_http
    hub_http=$(sed -n 's/.*"http":\([0-9]*\).*/\1/p' "$p/hub.ready")
    src_start "$data" "$p/src.state" "$p/rssource.log" \
        --hub "http://127.0.0.1:$hub_http/hub"
    local base=http://127.0.0.1:$SRC_PORT/
    # the hub knows the topic once rssource has published to it
    printf 'hello hub\n' >"$data/hello.txt"
    local chan=""
    for ((i = 0; i < 100; i++)); do
        chan=$(curl -sf "${base}resourcesync/capabilitylist.xml" | grep -o '<loc>ws[^<]*</loc>' | head -n1 || true)
        [ -n "$chan" ] && break
        sleep 0.1
    done
    [ -n "$chan" ] || die "rssource advertises no WebSocket channel (see $p)"
    chan=${chan#<loc>}
    note "   Source $base, channel ${chan%</loc>}"
    "$rssub" run --source "$base" --mirror "$m" --state "$MROOT/rssub.db" \
        --ready-file "$p/rssub.ready" --log-format logfmt \
        "${RSSUB_ARGS[@]+"${RSSUB_ARGS[@]}"}" >"$p/rssub.log" 2>&1 &
    local sub_pid=$!
    pids+=("$sub_pid")
    if ! wait_file "$p/rssub.ready" "$sub_pid" rssub 300; then
        note "   rssub run did not become ready in 300 s (or exited):"
        tail -n 20 "$p/rssub.log" >&2
        emit ""
        emit "#### Push apply ($ROOT_NAME): rssub run did not become ready (see the log above)"
        stop_one "$sub_pid"; stop_one "$SRC_PID"; stop_one "$hub_pid"; stop_one "$redis_pid"
        root_leave
        return
    fi
    local nd
    nd=$(diff -rq "$data" "$m" 2>&1 | wc -l || true)
    note "   rssub ready ($(cat "$p/rssub.ready")); baseline mirror vs Source: $nd differences"
    [ "$nd" = 0 ] || diff -rq "$data" "$m" 2>&1 | head -n 5 >&2 || true
    local c0 s0 h0 r rate key line
    c0=$(cpu_ticks "$sub_pid"); s0=$(cpu_ticks "$SRC_PID"); h0=$(cpu_ticks "$hub_pid")
    declare -A P50 P99 PMAX LOST DUP TORN LATE RUNS
    for rate in $push_rates; do
        P50[$rate]=""; P99[$rate]=""; PMAX[$rate]=""; LOST[$rate]=0; DUP[$rate]=0
        TORN[$rate]=0; LATE[$rate]=""; RUNS[$rate]=""
    done
    for ((r = 1; r <= reps; r++)); do
        for rate in $push_rates; do
            key=r$r-$rate
            line=$(timeout $((push_secs + push_drain + 60)) "$pusher" \
                --src "$data" --mirror "$m" --tag "$key" --rate "$rate" \
                --seconds "$push_secs" --drain "$push_drain" \
                --lat-out "$p/$key.lat" 2>"$p/$key.err") ||
                die "bench_sub_push failed: $(cat "$p/$key.err")"
            note "   $key: $line"
            P50[$rate]+=" $(kv "$line" p50_ms)"; P99[$rate]+=" $(kv "$line" p99_ms)"
            PMAX[$rate]+=" $(kv "$line" max_ms)"; LATE[$rate]+=" $(kv "$line" late_max_ms)"
            LOST[$rate]=$((LOST[$rate] + $(kv "$line" lost)))
            DUP[$rate]=$((DUP[$rate] + $(kv "$line" dup)))
            TORN[$rate]=$((TORN[$rate] + $(kv "$line" torn)))
            RUNS[$rate]+=" $(kv "$line" p50_ms)/$(kv "$line" p99_ms)"
            sleep 1
        done
    done
    local c1 s1 h1 hwm rss
    c1=$(cpu_ticks "$sub_pid"); s1=$(cpu_ticks "$SRC_PID"); h1=$(cpu_ticks "$hub_pid")
    hwm=$(hwm_mb "$sub_pid")
    rss=$(awk '/^VmRSS:/ {printf "%.1f", $2 / 1024}' "/proc/$sub_pid/status" 2>/dev/null || echo -)
    nd=$(diff -rq "$data" "$m" 2>&1 | wc -l || true)
    stop_one "$sub_pid"
    local sub_rc=$STOP_RC
    stop_one "$SRC_PID"; stop_one "$hub_pid"; stop_one "$redis_pid"
    root_leave
    note "   rssub: exit $sub_rc on SIGTERM; peak RSS $hwm MB; mirror vs Source at the end: $nd differences"
    [ "$nd" = 0 ] || diff -rq "$data" "$m" 2>&1 | head -n 5 >&2 || true
    emit ""
    emit "#### Push apply, Source and mirror on $ROOT_NAME: file created in the Source -> renamed into rssub's mirror ($push_files-file Source; $reps runs of ${push_secs} s per rate, interleaved)"
    emit ""
    emit "| changes/s | changes | p50 ms (median of runs) | p99 ms (median of runs) | max ms (worst run) | lost | duplicated | torn | writer late max ms | per run p50/p99 ms |"
    emit "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    for rate in $push_rates; do
        # shellcheck disable=SC2086
        emit "| $rate | $(awk -v a="$rate" -v b="$push_secs" -v n="$reps" 'BEGIN {printf "%d", a * b * n}') | $(median ${P50[$rate]}) | $(median ${P99[$rate]}) | $(maxof ${PMAX[$rate]}) | ${LOST[$rate]} | ${DUP[$rate]} | ${TORN[$rate]} | $(maxof ${LATE[$rate]}) |${RUNS[$rate]} |"
    done
    emit ""
    emit "During the pushes: rssub CPU $(awk -v t=$((c1 - c0)) -v hz="$hz" 'BEGIN {printf "%.1f", t / hz}') s, rssource $(awk -v t=$((s1 - s0)) -v hz="$hz" 'BEGIN {printf "%.1f", t / hz}') s, rshub $(awk -v t=$((h1 - h0)) -v hz="$hz" 'BEGIN {printf "%.1f", t / hz}') s. rssub RSS $rss MB, peak $hwm MB; exit $sub_rc on SIGTERM. Mirror vs Source at the end: $nd differences."
}

has_part baseline && part_baseline
has_part million && part_million
has_part push && part_push

emit ""
emit "Machine: $machine_note; at the end: $(loadavg). Floor: ${emit_floor%; }."
emit " rssub $( [ $have_rssub = 1 ] && echo "from $build" || echo "not built" )${rssub_b:+; rssub-b: $rssub_b}; resync: ${resync:-not run}."
[ -z "$out" ] || printf '%s' "$tables" >"$out"
