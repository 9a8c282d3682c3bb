#!/usr/bin/env bash
# bench_bridge.sh - rsbridge's figures for docs/benchmarks.md ("Bridge"),
# issue 14, three parts, all on loopback with pull-only Sources served by
# tests/integration/lib/bridge_source.py (shape A: a Change List Index
# over Change Lists, changing at random):
#   scale    one rsbridge following --sources Sources (100) at --interval
#            (1 s) while each changes now and then: the bridge's CPU and
#            RSS, its requests, what it published;
#   load     requests to one Source per minute, documents and resources,
#            with 1 and with --mirrors (50) rssub mirrors behind the
#            bridge, against --mirrors rssub polling it directly
#            (--transport poll --poll-interval INTERVAL): the ratio;
#   latency  a change in the Source's Change List -> the file in a
#            mirror: one mirror through the bridge, one polling directly
#            at the same interval, the same changes (p50, p95, max).
# Uses the integration tests' fixtures (tests/integration/lib: redis,
# rshub, bridge_source.py, rsbridge, rssub), so starts its own processes
# in a private temp dir and stops only those, by PID. Builds nothing.
# shellcheck disable=SC2317 # helpers run through wait_until
set -u

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build-bench-bridge
parts="scale load latency"
nsrc=100
interval=1
mirrors=50
window=60
changes=200
out=""
nice_n=""

usage() {
    cat <<EOF
Usage: $0 [OPTION]...
rsbridge's benchmark (docs/benchmarks.md, "Bridge").
  --build DIR      build dir with bridge/rsbridge, hub/rshub, subscriber/rssub
                   (Release; default $build)
  --parts LIST     of: scale load latency (default "$parts")
  --sources N      scale: Sources the bridge follows (default $nsrc)
  --interval S     the bridge's --interval and the direct pollers'
                   --poll-interval, seconds (default $interval)
  --mirrors N      load: mirrors behind the bridge, and direct pollers
                   (default $mirrors)
  --window S       seconds measured in each part and phase (default $window)
  --changes N      latency: changes made, about one a second (default $changes)
  --quick          about 3 minutes: 20 Sources, 10 mirrors, 20 s windows,
                   30 changes
  --nice N         run at nice N (negative: root)
  --out FILE       also write the figures (markdown) to FILE
  --keep           keep the temp dir (logs, access logs)
EOF
}

keep=0
cmdline="$0 $*"
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift ;;
    --parts) parts=$2; shift ;;
    --sources) nsrc=$2; shift ;;
    --interval) interval=$2; shift ;;
    --mirrors) mirrors=$2; shift ;;
    --window) window=$2; shift ;;
    --changes) changes=$2; shift ;;
    --quick) nsrc=20; mirrors=10; window=20; changes=30 ;;
    --nice) nice_n=$2; shift ;;
    --out) out=$2; shift ;;
    --keep) keep=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_bridge: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

die() { echo "bench_bridge: $*" >&2; exit 1; }
for b in bridge/rsbridge hub/rshub subscriber/rssub; do
    [ -x "$build/$b" ] || die "no $build/$b; build it first:
  cmake -S $root -B $build -DCMAKE_BUILD_TYPE=Release -DRS_TESTS=OFF -DRS_BENCH=ON
  cmake --build $build -j2 --target rsbridge rshub rssub"
done
command -v redis-server >/dev/null || die "redis-server is missing"
if [ -n "$nice_n" ]; then
    renice -n "$nice_n" -p $$ >/dev/null || die "cannot renice to $nice_n"
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

export RS_BUILD_DIR=$build RS_SOURCE_DIR=$root RS_KEEP_TMP=$keep
export BR_LOG_LEVEL=info BR_READY_SECS=300
# shellcheck source=../integration/lib/common.sh
. "$root/tests/integration/lib/common.sh"
# shellcheck source=../integration/lib/sub.sh
. "$root/tests/integration/lib/sub.sh"
# shellcheck source=../integration/lib/bridge.sh
. "$root/tests/integration/lib/bridge.sh"

hz=$(getconf CLK_TCK)
cpu_ticks() {   # PID -> utime+stime, clock ticks
    local f
    f=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
    # shellcheck disable=SC2086
    set -- $f
    echo $((${12} + ${13}))
}
status_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status" 2>/dev/null; }
now() { date +%s.%N; }
calc() { awk "BEGIN { printf \"$1\", $2 }"; }

text=""
emit() { text+="$*"$'\n'; echo "$*"; }
emit "## rsbridge benchmark ($(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$root" rev-parse --short HEAD 2>/dev/null))"
emit ""
emit "Command: \`$cmdline\`; --interval ${interval} s; $(nproc) CPUs; load average at start $(cut -d' ' -f1-3 /proc/loadavg)."
emit ""

redis_start || die "redis-server did not start"
hub_start h --open || die "rshub did not start"

# srcs_start PREFIX N [SERVE-ARGS...]: N Sources PREFIX1..PREFIXN (shape
# A), started together; seeded 1..N unless SERVE-ARGS give --seed.
srcs_start() {
    local pre=$1 n=$2 i
    shift 2
    for i in $(seq 1 "$n"); do
        BSRC_WWW[$pre$i]=$TMP/$pre$i.www
        bg "bsrc-$pre$i" "$PY" "$BSRC_PY" serve --shape A --root "$TMP/$pre$i.www" \
            --ready "$TMP/$pre$i.bsrc.ready" --access-log "$TMP/$pre$i.access.jsonl" \
            --seed "$i" "$@" 2>>"$TMP/$pre$i.bsrc.log"
    done
    for i in $(seq 1 "$n"); do
        wait_file "$TMP/$pre$i.bsrc.ready" 60 || die "Source $pre$i did not start"
        BSRC_PORT[$pre$i]=$(sed -n 's/.*"port":\([0-9]*\).*/\1/p' "$TMP/$pre$i.bsrc.ready")
    done
}

# load_of SOURCE T0 T1: "bridge_docs sub_docs sub_res" in [T0, T1].
load_of() {
    bsx load "$1" --t0 "$2" --t1 "$3" | "$PY" -c '
import json, sys
r = json.load(sys.stdin)
print(r["bridge_docs"], r["sub_docs"], r["sub_res"])'
}

# ------------------------------------------------------------------ scale

if [[ " $parts " == *" scale "* ]]; then
    echo "== scale: one bridge, $nsrc Sources, --interval ${interval}s, $window s" >&2
    srcs_start s "$nsrc" --initial 20 --rotate 1000
    args=()
    for i in $(seq 1 "$nsrc"); do args+=(--source "$(bsrc_url "s$i")"); done
    t=$(now)
    bridge_start bs "${args[@]}" --interval "${interval}s" || die "rsbridge did not start"
    ready_s=$(calc %.1f "$(now) - $t")
    pid=${BR_PID[bs]}
    # each Source changes every 2 to 6 s, 1 or 2 changes at a time
    for i in $(seq 1 "$nsrc"); do
        bs "s$i" auto "{\"batches\":$((window / 4 + 1)),\"every\":4,\"min\":1,\"max\":2,\"seed\":$i}"
    done
    c0=$(cpu_ticks "$pid")
    t0=$(now)
    sleep "$window"
    c1=$(cpu_ticks "$pid")
    t1=$(now)
    rss=$(status_kb "$pid" VmRSS)
    hwm=$(status_kb "$pid" VmHWM)
    secs=$(calc %.1f "$t1 - $t0")
    cpu=$(calc %.1f "($c1 - $c0) / $hz / $secs * 100")
    reqs=0 made=0
    for i in $(seq 1 "$nsrc"); do
        read -r bd _ _ <<<"$(load_of "s$i" "$t0" "$t1")"
        reqs=$((reqs + bd))
        made=$((made + $(bs "s$i" count-journal)))
    done
    published=$(curl -sf --max-time 30 "$(bridge_url bs sources)" | "$PY" -c '
import json, sys
a = json.load(sys.stdin)
print(sum(s["changes_published"] for s in a), sum(s["errors"] for s in a),
      sum(1 for s in a if s["last_poll"]))')
    read -r pub errs polled <<<"$published"
    emit "### One bridge, $nsrc Sources at --interval ${interval} s"
    emit ""
    emit "| Sources | ready after, s | window, s | bridge CPU, % of one core | RSS, MiB | peak RSS, MiB | requests to the Sources / s | requests per Source / min | changes made | published | errors |"
    emit "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    emit "| $nsrc | $ready_s | $secs | $cpu | $(calc %.1f "$rss / 1024") | $(calc %.1f "$hwm / 1024") | $(calc %.1f "$reqs / $secs") | $(calc %.1f "$reqs / $nsrc / $secs * 60") | $made | $pub | $errs |"
    emit ""
    [ "$polled" = "$nsrc" ] || echo "   WARNING: only $polled of $nsrc Sources polled" >&2
    bridge_stop bs
    for i in $(seq 1 "$nsrc"); do bg_wait "bsrc-s$i" 0 2>/dev/null; done
fi

# ------------------------------------------------------------------- load

# phase NAME SOURCE HOW N: N mirrors of SOURCE (HOW: bridged or direct),
# ready, then the window measured while the Source changes. Sets ROW.
phase() {
    local name=$1 s=$2 how=$3 n=$4 i url t0 t1 secs bd sd sr m
    echo "== load: $name" >&2
    for i in $(seq 1 "$n"); do
        m=$name$i
        if [ "$how" = bridged ]; then
            mirror_start "$m" "$(bridged bl "$s")" "$TMP/$m.mirror"
        else
            SUB_LOG[$m]=$TMP/$m.sub.log
            "$RSSUB" run --source "$(bsrc_url "$s")" --mirror "$TMP/$m.mirror" \
                --transport poll --poll-interval "${interval}s" \
                >>"${SUB_LOG[$m]}" 2>&1 &
            SUB_PID[$m]=$!
        fi
    done
    all_same_n() {
        local k
        for k in $(seq 1 "$n"); do mirror_same "$s" "$TMP/$name$k.mirror" || return 1; done
    }
    wait_until 300 all_same_n >/dev/null || echo "   WARNING: $name: mirrors not all equal to the Source" >&2
    sleep 2
    bs "$s" auto "{\"batches\":$((window / 2)),\"every\":2,\"min\":1,\"max\":2,\"seed\":42}"
    t0=$(now)
    sleep "$window"
    t1=$(now)
    bs "$s" wait-auto 60 || true
    wait_until 60 all_same_n >/dev/null || echo "   WARNING: $name: mirrors not all equal to the Source after the changes" >&2
    secs=$(calc %.1f "$t1 - $t0")
    read -r bd sd sr <<<"$(load_of "$s" "$t0" "$t1")"
    ROW="$name $n $secs $bd $sd $sr"
    for i in $(seq 1 "$n"); do sub_stop "$name$i" TERM 20; done
}

if [[ " $parts " == *" load "* ]]; then
    echo "== load: one Source, 1 and $mirrors mirrors behind the bridge, $mirrors polling it" >&2
    # the three Sources make the same changes at the same pace
    srcs_start l 3 --initial 50 --rotate 1000 --seed 42
    bridge_start bl --source "$(bsrc_url l1)" --source "$(bsrc_url l2)" \
        --interval "${interval}s" || die "rsbridge did not start"
    rows=()
    phase b1 l1 bridged 1; rows+=("$ROW")
    phase "b$mirrors" l2 bridged "$mirrors"; rows+=("$ROW")
    phase "d$mirrors" l3 direct "$mirrors"; rows+=("$ROW")
    bridge_stop bl
    emit "### Requests to one Source per minute (50 resources; the same changes in each phase: 1 or 2 every 1 to 3 s)"
    emit ""
    emit "| mirrors | following | window, s | documents / min (bridge) | documents / min (mirrors) | resources / min | all / min |"
    emit "|---:|---|---:|---:|---:|---:|---:|"
    declare -A ALL DOCS
    for r in "${rows[@]}"; do
        read -r name n secs bd sd sr <<<"$r"
        how="through the bridge"; [ "${name:0:1}" = d ] && how="polling directly"
        ALL[$name]=$(calc %.0f "($bd + $sd + $sr) / $secs * 60")
        DOCS[$name]=$(calc %.0f "($bd + $sd) / $secs * 60")
        emit "| $n | $how | $secs | $(calc %.0f "$bd / $secs * 60") | $(calc %.0f "$sd / $secs * 60") | $(calc %.0f "$sr / $secs * 60") | ${ALL[$name]} |"
    done
    emit ""
    emit "Ratio, $mirrors polling directly / $mirrors through the bridge: documents $(calc %.1f "${DOCS[d$mirrors]} / (${DOCS[b$mirrors]} > 0 ? ${DOCS[b$mirrors]} : 1)") x, all requests $(calc %.1f "${ALL[d$mirrors]} / (${ALL[b$mirrors]} > 0 ? ${ALL[b$mirrors]} : 1)") x; $mirrors mirrors / 1 mirror through the bridge, documents: $(calc %.2f "${DOCS[b$mirrors]} / (${DOCS[b1]} > 0 ? ${DOCS[b1]} : 1)") x."
    emit ""
fi

# ---------------------------------------------------------------- latency

if [[ " $parts " == *" latency "* ]]; then
    echo "== latency: $changes changes, one mirror through the bridge, one polling" >&2
    srcs_start t 1 --initial 50 --rotate 1000
    bridge_start bt --source "$(bsrc_url t1)" --interval "${interval}s" ||
        die "rsbridge did not start"
    mirror_start lb "$(bridged bt t1)" "$TMP/lb.mirror"
    SUB_LOG[lp]=$TMP/lp.sub.log
    "$RSSUB" run --source "$(bsrc_url t1)" --mirror "$TMP/lp.mirror" \
        --transport poll --poll-interval "${interval}s" >>"${SUB_LOG[lp]}" 2>&1 &
    SUB_PID[lp]=$!
    both_same() { mirror_same t1 "$TMP/lb.mirror" && mirror_same t1 "$TMP/lp.mirror"; }
    wait_until 120 both_same >/dev/null || die "the mirrors did not start"
    wait_until 60 mirror_following lb || echo "   WARNING: the bridged mirror does not follow the hub" >&2
    bg lat "$PY" "$BSRC_PY" watch --port "${BSRC_PORT[t1]}" --mirror "$TMP/lb.mirror" \
        --mirror "$TMP/lp.mirror" --stop "$TMP/lat.stop" \
        --timeout $((changes * 3 + 120)) --out "$TMP/lat.json" >/dev/null
    bs t1 auto "{\"batches\":$changes,\"every\":1,\"min\":1,\"max\":1}"
    bs t1 wait-auto $((changes * 3)) || true
    touch "$TMP/lat.stop"
    bg_wait lat 120 || echo "   WARNING: the latency watcher did not end" >&2
    emit "### A change in the Source's Change List -> the file in a mirror ($changes changes, about one a second)"
    emit ""
    emit "| mirror | p50 s | p95 s | max s | changes | missing |"
    emit "|---|---:|---:|---:|---:|---:|"
    emit "$("$PY" - "$TMP/lat.json" "$TMP/lb.mirror" "$TMP/lp.mirror" "$interval" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
for path, what in ((sys.argv[2], "through the bridge (push, --interval %s s)" % sys.argv[4]),
                   (sys.argv[3], "polling directly (--poll-interval %s s)" % sys.argv[4])):
    m = r["mirrors"][path]
    print("| %s | %s | %s | %s | %d | %d |" % (what, m["p50"], m.get("p95", "-"),
          m["max"], m["n"], m["n_missing"]))
EOF
)"
    emit ""
    sub_stop lb
    sub_stop lp
    bridge_stop bt
fi

[ -z "$out" ] || printf '%s' "$text" >"$out"
