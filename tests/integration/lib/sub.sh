# shellcheck shell=bash
# sub.sh - fixtures of the rssub integration tests, sourced after
# common.sh (and source.sh when the test runs rssource): rssub daemons
# started with a ready-file and a metrics port, one-shot commands (sync,
# audit, status), a metric reader, the mirror-equals-Source comparison,
# a seeded change generator, and sanitizer checks of every rssub log.
# Every wait is bounded; only the rssub processes started here are
# stopped, by their recorded PID.

RSSUB=$RS_BUILD_DIR/subscriber/rssub
# shellcheck disable=SC2034 # for the scripts that source this
RSPUB=$RS_BUILD_DIR/tools/rspub
declare -A SUB_PID SUB_LOG SUB_METRICS
SUB_LOGS=()     # every rssub log written (daemons and one-shot commands)

# sub_start NAME URL MIRROR STATE [RSSUB-ARGS...]: `rssub run` in the
# background, logging (logfmt, appended across restarts) to SUB_LOG[NAME];
# waits SUB_READY_SECS (default 60) for its ready-file, which it writes
# once the first sync is applied; sets SUB_PID[NAME], SUB_METRICS[NAME]
# (the metrics port). Fails when rssub exits or is not ready in time (the
# process is then left to sub_stop or the trap; SUB_METRICS[NAME] is then
# looked up with sub_metrics_port).
sub_start() {
    local name=$1 url=$2 mir=$3 state=$4
    shift 4
    local ready=$TMP/$name.sub.ready
    SUB_LOG[$name]=$TMP/$name.sub.log
    [[ " ${SUB_LOGS[*]} " == *" ${SUB_LOG[$name]} "* ]] ||
        SUB_LOGS+=("${SUB_LOG[$name]}")
    rm -f "$ready"
    SUB_METRICS[$name]=
    echo "---- rssub run $*" >>"${SUB_LOG[$name]}"
    "$RSSUB" run --source "$url" --mirror "$mir" --state "$state" \
        --ready-file "$ready" --metrics-listen 127.0.0.1:0 \
        --log-format logfmt --no-progress "$@" >>"${SUB_LOG[$name]}" 2>&1 &
    SUB_PID[$name]=$!
    local i=0 max=$((${SUB_READY_SECS:-60} * 10))
    while [ ! -s "$ready" ] && [ "$i" -lt "$max" ]; do
        kill -0 "${SUB_PID[$name]}" 2>/dev/null || break
        sleep 0.1
        i=$((i + 1))
    done
    if [ ! -s "$ready" ]; then
        echo "rssub $name: no ready-file (exited or too slow)" >&2
        sub_metrics_port "$name"
        return 1
    fi
    SUB_METRICS[$name]=$(sed -n 's/.*"metrics":\([0-9]*\).*/\1/p' "$ready")
    [ -n "${SUB_METRICS[$name]}" ]
}

# sub_metrics_port NAME: without a ready-file, find the metrics port
# among the ports daemon NAME listens on (ss), so that its metrics can
# still be read; sets SUB_METRICS[NAME] when found.
sub_metrics_port() {
    local p
    command -v ss >/dev/null || return 1
    for p in $(ss -ltnpH 2>/dev/null |
               grep "pid=${SUB_PID[$1]}," | awk '{ sub(/.*:/, "", $4); print $4 }'); do
        if curl -sf --max-time 5 "http://127.0.0.1:$p/metrics" |
           grep -q '^rssub_'; then
            SUB_METRICS[$1]=$p
            return 0
        fi
    done
    return 1
}

# sub_stop NAME [SIGNAL] [SECS]: signal (TERM) and wait (20 s, rssub
# drains fetches in flight); exit status in SUB_RC (124: did not exit,
# then killed). KILL is sub_stop NAME KILL.
# shellcheck disable=SC2034 # SUB_RC is for the callers
sub_stop() {
    local name=$1 sig=${2:-TERM} secs=${3:-20} pid=${SUB_PID[$1]:-}
    SUB_RC=
    [ -n "$pid" ] || return 1
    kill "-$sig" "$pid" 2>/dev/null
    # 2>/dev/null: no "Killed" job notice from bash after a KILL
    if pid_wait "$pid" "$secs" 2>/dev/null; then
        SUB_RC=$WAIT_RC
    else
        SUB_RC=124
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    fi
    SUB_PID[$name]=
}

# sub_alive NAME: the daemon still runs.
sub_alive() { [ -n "${SUB_PID[$1]:-}" ] && kill -0 "${SUB_PID[$1]}" 2>/dev/null; }

# sub_files MIRROR: how many files MIRROR holds, rssub's own .rssub* names
# (and what is under them) aside.
sub_files() {
    find "$1" -name '.rssub*' -prune -o -type f -print | wc -l
}

# sub_sync_kill NAME URL MIRROR STATE MIN [RSSUB-ARGS...]: `rssub sync` in
# the background, killed (-9) once MIRROR holds MIN files (rssub's own
# .rssub* names aside: temporaries, a dump's stage), within 30 s; its log is
# $TMP/NAME.killed.log. SUB_KILLED: the files in the mirror by then. Fails
# when MIN never came.
# shellcheck disable=SC2034 # SUB_KILLED is for the callers
sub_sync_kill() {
    local name=$1 url=$2 mir=$3 state=$4 min=$5 pid i=0
    shift 5
    mkdir -p "$mir"
    "$RSSUB" sync --source "$url" --mirror "$mir" --state "$state" \
        --log-format logfmt --no-progress "$@" \
        >/dev/null 2>"$TMP/$name.killed.log" &
    pid=$!
    SUB_LOGS+=("$TMP/$name.killed.log")
    while [ "$(sub_files "$mir")" -lt "$min" ] &&
          [ "$i" -lt 300 ] && kill -0 "$pid" 2>/dev/null; do
        sleep 0.1
        i=$((i + 1))
    done
    { kill -KILL "$pid" && wait "$pid"; } 2>/dev/null
    SUB_KILLED=$(sub_files "$mir")
    [ "$SUB_KILLED" -ge "$min" ]
}

# sub_sync_killed_halfway NAME URL MIRROR STATE MIN TOTAL [RSSUB-ARGS...]:
# sub_sync_kill, as two checks: it was killed once MIN files were in the
# mirror, and before the mirror held all TOTAL.
sub_sync_killed_halfway() {
    local name=$1 total=$6
    if sub_sync_kill "$1" "$2" "$3" "$4" "$5" "${@:7}"; then
        ok "killed once some files are written"
    else
        bad "killed once some files are written" \
            "$(tail -n 5 "$TMP/$name.killed.log")"
    fi
    check "it was killed halfway ($SUB_KILLED of $total in the mirror)" \
        test "$SUB_KILLED" -lt "$total"
}

# sub_cmd NAME COMMAND URL MIRROR STATE [ARGS...]: one `rssub COMMAND`
# (sync, audit, status), 60 s at most; stdout in $TMP/NAME.out, the log
# in $TMP/NAME.log, exit status in SUB_RC.
# shellcheck disable=SC2034 # SUB_RC is for the callers
sub_cmd() {
    local name=$1 cmd=$2 url=$3 mir=$4 state=$5
    shift 5
    timeout 60 "$RSSUB" "$cmd" --source "$url" --mirror "$mir" \
        --state "$state" --log-format logfmt --no-progress "$@" \
        >"$TMP/$name.out" 2>"$TMP/$name.log"
    SUB_RC=$?
    SUB_LOGS+=("$TMP/$name.log")
}

# sub_metric NAME FAMILY [LABEL="VALUE"]: the sum of FAMILY's samples
# (those whose labels include LABEL="VALUE") at daemon NAME's /metrics.
sub_metric() {
    curl -sf --max-time 10 "http://127.0.0.1:${SUB_METRICS[$1]}/metrics" |
        awk -v f="$2" -v l="${3:-}" '
            { n = $1; sub(/\{.*/, "", n) }
            n == f && (l == "" || index($1, l) > 0) { s += $NF; hit = 1 }
            END { if (!hit) exit 1; printf "%d\n", s }'
}

# same_tree SRC MIRROR: MIRROR holds exactly SRC's files and symlinks,
# byte for byte (empty directories are not resources: either side may
# keep some), and no temp file of rssub (.rssub-tmp.*) is left. Prints
# what differs.
same_tree() {
    local src=$1 mir=$2 a b f tmpf
    a=$(cd "$src" && find . ! -type d | LC_ALL=C sort)
    b=$(cd "$mir" && find . ! -type d | LC_ALL=C sort)
    if [ "$a" != "$b" ]; then
        echo "the file lists differ (< Source, > mirror):"
        diff <(printf '%s\n' "$a") <(printf '%s\n' "$b") | head -n 20
        return 1
    fi
    while IFS= read -r f; do
        [ -z "$f" ] || cmp "$src/$f" "$mir/$f" || return 1
    done <<<"$a"
    tmpf=$(find "$mir" -name '.rssub-tmp.*')
    [ -z "$tmpf" ] || { echo "temp files left: $tmpf"; return 1; }
}

# converged SECS SRC MIRROR: same_tree within SECS (0.2 s steps).
converged() {
    local secs=$1 i=0
    shift
    while [ "$i" -lt "$((secs * 5))" ]; do
        same_tree "$@" >/dev/null 2>&1 && return 0
        sleep 0.2
        i=$((i + 1))
    done
    same_tree "$@"
}

# churn DIR SEED N [PAUSE]: N seeded random changes under DIR in bursts
# of 1..120 changes, PAUSE seconds (default 0.3) between bursts: new
# files in new or existing nested directories (text and binary, up to
# 64 KiB), rewrites and appends, deletions, whole subdirectories removed,
# deleted files created again. Prints "creates=N updates=N deletes=N
# rmdirs=N". A name is a file (f*) or a directory (d*), never both.
# In the background: bg NAME "$PY" -c "$CHURN_PY" DIR SEED N [PAUSE].
churn() { "$PY" -c "$CHURN_PY" "$@"; }
CHURN_PY=$(cat <<'EOF'
import os, random, shutil, sys, time
root, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pause = float(sys.argv[4]) if len(sys.argv) > 4 else 0.3
rng = random.Random(seed)
def files():
    out = []
    for d, dirs, fs in os.walk(root):
        dirs.sort()
        out += [os.path.join(d, f) for f in sorted(fs)]
    return out
def dirs():
    out = [root]
    for d, ds, _ in os.walk(root):
        ds.sort()
        out += [os.path.join(d, x) for x in ds]
    return out
def body():
    if rng.random() < 0.3:
        return rng.randbytes(rng.choice([0, 1, 100, 4096, 65536]))
    return ("line %d\n" % rng.randrange(10**9) * rng.randrange(1, 40)).encode()
def write(p, data, mode="wb"):
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, mode) as f:
        f.write(data)
cnt = dict(creates=0, updates=0, deletes=0, rmdirs=0)
gone, done = [], 0
while done < n:
    burst = min(n - done, rng.randint(1, 120))
    for _ in range(burst):
        fs, r = files(), rng.random()
        if r < 0.30 or not fs:
            d = rng.choice(dirs())
            for _ in range(rng.randint(0, 2)):
                d = os.path.join(d, "d%d" % rng.randrange(8))
            p = os.path.join(d, "f%d.%s" % (rng.randrange(10**6),
                                           rng.choice(["txt", "bin"])))
            write(p, body())
            cnt["creates"] += 1
        elif r < 0.60:
            write(rng.choice(fs), body(), rng.choice(["wb", "ab"]))
            cnt["updates"] += 1
        elif r < 0.80:
            p = rng.choice(fs)
            os.unlink(p)
            gone.append(p)
            cnt["deletes"] += 1
        elif r < 0.85 and len(dirs()) > 1:
            d = rng.choice(dirs()[1:])
            gone += [f for f in files() if f.startswith(d + "/")]
            shutil.rmtree(d)
            cnt["rmdirs"] += 1
        elif gone:
            p = gone.pop(rng.randrange(len(gone)))
            if not os.path.exists(p):
                write(p, body())
                cnt["creates"] += 1
        else:
            continue
        done += 1
    time.sleep(pause)
print(" ".join("%s=%d" % kv for kv in cnt.items()))
EOF
)

# sub_exit NAME WANT: the one-shot run NAME (its log $TMP/NAME.log, its
# status in SUB_RC) exited WANT (the log's tail on failure).
sub_exit() {
    if [ "$SUB_RC" = "$2" ]; then
        ok "$1: exit $2"
    else
        bad "$1: exit $SUB_RC, want $2" "$(tail -n 30 "$TMP/$1.log")"
    fi
}

# synced_is NAME "fetched=N deleted=N failed=N": the counts of the final
# msg=synced line of run NAME ($TMP/NAME.log; a field left out is not
# checked; logfmt may quote the message).
synced_is() {
    local name=$1 line kv
    line=$(grep -E 'msg="?synced"?( |$)' "$TMP/$name.log" | tail -n 1)
    if [ -z "$line" ]; then
        bad "$name: a msg=synced line" "$(tail -n 20 "$TMP/$name.log")"
        return
    fi
    for kv in $2; do
        case " $line " in
            *" $kv "*) ok "$name: $kv" ;;
            *) bad "$name: $kv" "$line" ;;
        esac
    done
}

# sub_asan_check: no sanitizer report in any rssub log (all runs).
sub_asan_check() {
    local pat='ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' f
    local hits=()
    for f in "${SUB_LOGS[@]}"; do
        grep -Eq "$pat" "$f" && hits+=("$f")
    done
    if [ "${#hits[@]}" -eq 0 ]; then
        ok "no sanitizer report in rssub's logs"
    else
        bad "sanitizer report in rssub's logs: ${hits[*]}" \
            "$(grep -E -A14 "$pat" "${hits[@]}" | head -n 40)"
    fi
}

# sub_cleanup: stop the rssub daemons, then the sourced fixtures' cleanup.
sub_cleanup() {
    local k
    for k in "${!SUB_PID[@]}"; do
        [ -n "${SUB_PID[$k]}" ] && stop_pid "${SUB_PID[$k]}"
    done
    if declare -F src_cleanup >/dev/null; then src_cleanup; else cleanup; fi
}
trap sub_cleanup EXIT

# sub_finish: stop every rssub still running, check all rssub logs, then
# the sourced fixtures' finish (sources, hubs, tally, exit status).
sub_finish() {
    local k
    for k in "${!SUB_PID[@]}"; do
        [ -n "${SUB_PID[$k]}" ] && sub_stop "$k"
    done
    sub_asan_check
    if declare -F src_finish >/dev/null; then src_finish; else finish; fi
}
