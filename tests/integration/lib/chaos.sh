# shellcheck shell=bash
# chaos.sh - the chaos scenario shared by tests/integration/test_chaos.sh
# (CI, about two minutes) and tests/soak/chaos.sh (--minutes N): a seeded
# writer changing a 2,000-file Source, two rshub nodes on one persistent
# Redis, three rssub mirrors (WebSocket over both nodes, WebSub, polling),
# and seeded kill -9 / restart / SIGSTOP / connection-reset events; then
# the mirrors must converge, audit clean, and no acknowledged notification
# may be lost.
# Sourced after common.sh, source.sh and sub.sh (their trap stops every
# process started here, by recorded PID). Reproduce a run: RS_CHAOS_SEED.
# The arrays and counters used here unseen (HUB_PID, HUB_ASAN_DONE,
# pass, fail...) are common.sh's and source.sh's, associative arrays:
# shellcheck disable=SC2004,SC2034,SC2154

CHAOS_SEED=${RS_CHAOS_SEED:-20261122}
# Every mirror (WebSocket, WebSub, polling) is held to the same two bounds
# once the writer stops: it equals the Source within CHAOS_CONVERGE_SECS,
# and no failed fetch waits for its retry longer than its backoff (the
# row's not_before) plus CHAOS_RETRY_SLACK_SECS, whatever else the mirror
# has to do - convergence is bounded by the backoff, not by luck. The
# slack is the time a mirror paused or cut off until the writer stopped
# may need to work through the retries that came due meanwhile (10 s
# seen: hundreds, behind a 73,000-entry gap pull); a retry left waiting
# (issue 11: 60 s and more) is far beyond it.
CHAOS_CONVERGE_SECS=${RS_CHAOS_CONVERGE_SECS:-60}
CHAOS_RETRY_SLACK_SECS=${RS_CHAOS_RETRY_SLACK_SECS:-15}
# The backlog is small so that a paused mirror really falls behind it.
CHAOS_BACKLOG=200
# Small slow-consumer limits: a paused mirror is cut (4002) within
# seconds, not only once megabytes are queued for it.
CHAOS_HUB_ARGS=(--open --backlog-max "$CHAOS_BACKLOG"
                --ws-soft-limit 64K --ws-soft-time 1s --ws-hard-limit 1M
                --callback-allow 127.0.0.0/8 --verify-timeout 2s
                --delivery-timeout 2s --retry-max-delay 1s --lease-min 1s)
CHAOS_SRC=$TMP/src
CHAOS_MIRRORS=(ws websub poll)
declare -A CH_COUNT CH_CONV CH_OVERDUE CH_OVERDUE_ROW MIR_ARGS
CH_EVENTS=()       # "T+SECS kind detail", in order
CHAOS_T0=
CHAOS_STOP_AT=     # when the writer stopped, seconds since the epoch

# ------------------------------------------------------------ the writer

# The seeded writer, CHAOS_WRITER_PY ROOT SEED MODE ...:
#   init N          N files in ROOT/d0..d9/s0..s9 (one seed, one tree)
#   run STOP OUT    change the tree until the file STOP exists, then
#                   write "creates=N updates=N ..." to OUT
#   flood STOP N    at most N bursts, 20 ms apart, until STOP: each
#                   rewrites ROOT/flood/fK.txt (K < 50), large
#                   notifications that fill a paused client's queue fast
#                   (and few files: a mirror's todo rows collapse)
# run keeps its own list of the tree (it is the only writer under d*), so
# the sequence of changes depends on the seed only, not on timing. Moves
# rename files and whole directories; names never change kind (f* files,
# d*/s*/m* directories), so no path is a file and a directory in turn.
CHAOS_WRITER_PY=$(cat <<'EOF'
import os, random, shutil, sys, time
root, seed, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = random.Random(seed)
serial = [0]
def name(prefix, ext=""):
    serial[0] += 1
    return "%s%d-%d%s" % (prefix, seed % 1000, serial[0], ext)
def body():
    r = rng.random()
    if r < 0.4:
        return rng.randbytes(rng.choice([0, 1, 100, 1000, 4096, 20000, 65536]))
    return ("line %d\n" % rng.randrange(10**9) * rng.randrange(1, 60)).encode()
def write(p, data, mode="wb"):
    with open(p, mode) as f:
        f.write(data)
if mode == "init":
    for i in range(int(sys.argv[4])):
        d = os.path.join(root, "d%d" % (i % 10), "s%d" % (i // 10 % 10))
        os.makedirs(d, exist_ok=True)
        write(os.path.join(d, "f%d.%s" % (i, rng.choice(["txt", "bin"]))), body())
    sys.exit(0)
if mode == "flood":
    stop, n = sys.argv[4], int(sys.argv[5])
    d = os.path.join(root, "flood")
    os.makedirs(d, exist_ok=True)
    for i in range(n):
        if os.path.exists(stop):
            break
        for j in range(50):
            write(os.path.join(d, "f%d.txt" % j), b"flood %d %d\n" % (i, j))
        time.sleep(0.02)
    sys.exit(0)
stop, out = sys.argv[4], sys.argv[5]
files, dirs = [], set()
for d, ds, fs in os.walk(root):
    ds[:] = sorted(x for x in ds if x != "flood")
    rel = os.path.relpath(d, root)
    if rel.count("/") == 1:
        dirs.add(rel)
    files += [os.path.join(rel, f) for f in sorted(fs)] if rel != "." else []
files.sort()
dirs = sorted(dirs)
cnt = dict(creates=0, updates=0, moves=0, deletes=0, dirmoves=0, dirdeletes=0,
           bursts=0)
def op():
    r = rng.random()
    if len(files) > 2100 and r < 0.30:
        r = 0.80                      # keep the tree near 2,000 files:
    elif len(files) < 1900 and r >= 0.72:
        r = 0.0                       # deletions turn into creations
    if r < 0.30 or not files:
        d = rng.choice(dirs)
        p = os.path.join(d, name("f", rng.choice([".txt", ".bin"])))
        write(os.path.join(root, p), body())
        files.append(p)
        cnt["creates"] += 1
    elif r < 0.60:
        p = rng.choice(files)
        write(os.path.join(root, p), body(), rng.choice(["wb", "ab"]))
        cnt["updates"] += 1
    elif r < 0.72:
        i = rng.randrange(len(files))
        q = os.path.join(rng.choice(dirs), name("f", ".txt"))
        os.rename(os.path.join(root, files[i]), os.path.join(root, q))
        files[i] = q
        cnt["moves"] += 1
    elif r < 0.92:
        p = files.pop(rng.randrange(len(files)))
        os.unlink(os.path.join(root, p))
        cnt["deletes"] += 1
    elif r < 0.97 and len(dirs) > 20:
        d = dirs.pop(rng.randrange(len(dirs)))
        q = os.path.join("d%d" % rng.randrange(10), name("m"))
        os.rename(os.path.join(root, d), os.path.join(root, q))
        files[:] = [q + f[len(d):] if f.startswith(d + "/") else f
                    for f in files]
        dirs.append(q)
        cnt["dirmoves"] += 1
    elif r < 0.985 and len(dirs) > 20:
        d = dirs.pop(rng.randrange(len(dirs)))
        shutil.rmtree(os.path.join(root, d))
        files[:] = [f for f in files if not f.startswith(d + "/")]
        cnt["dirdeletes"] += 1
    else:
        d = os.path.join("d%d" % rng.randrange(10), name("m"))
        os.makedirs(os.path.join(root, d))
        dirs.append(d)
while not os.path.exists(stop):
    if rng.random() < 0.04:
        cnt["bursts"] += 1
        for _ in range(rng.randint(20, 150)):
            op()
    else:
        op()
    time.sleep(rng.uniform(0.01, 0.12))
with open(out, "w") as f:
    f.write(" ".join("%s=%d" % kv for kv in cnt.items()) + " files=%d\n" % len(files))
EOF
)

# ------------------------------------------------------------- helpers

# rnd N: R = a seeded random number in [0, N) (bash's RANDOM, seeded in
# chaos_setup; never called in a subshell, or the sequence would fork).
rnd() { R=$((RANDOM % $1)); }
# rnd_secs MIN_TENTHS SPAN_TENTHS: S = MIN + [0, SPAN) tenths of a second
rnd_secs() {
    rnd "$2"
    S=$((($1 + R) / 10)).$((($1 + R) % 10))
}
elapsed() { echo $((SECONDS - CHAOS_T0)); }
event() {
    CH_COUNT[$1]=$((${CH_COUNT[$1]:-0} + 1))
    CH_EVENTS+=("T+$(elapsed)s $*")
    echo "     chaos T+$(elapsed)s: $*"
}
# id_ge A B: hub id A >= B (<ms>-<seq>)
id_ge() {
    local a=${1%-*} b=${2%-*}
    [ "$a" -gt "$b" ] || { [ "$a" -eq "$b" ] && [ "${1#*-}" -ge "${2#*-}" ]; }
}
# free_port: a TCP port nobody listens on now (for the WebSub mirror's
# callback, which must keep its URL across restarts)
free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ------------------------------------------------------------- daemons

chaos_hub_start() {
    local n=$1
    if [ -n "${CH_HUB_HTTP[$n]:-}" ]; then
        hub_start "$n" "${CHAOS_HUB_ARGS[@]}" --listen "127.0.0.1:${CH_HUB_HTTP[$n]}" \
            --ws-listen "127.0.0.1:${CH_HUB_WS[$n]}"
    else
        hub_start "$n" "${CHAOS_HUB_ARGS[@]}" || return 1
        CH_HUB_HTTP[$n]=${HUB_HTTP[$n]}
        CH_HUB_WS[$n]=${HUB_WS[$n]}
    fi
}
declare -A CH_HUB_HTTP CH_HUB_WS

chaos_src_start() {
    # --log-level debug: rssource logs the id of every notification the
    # hub acknowledged ("notification accepted"), the loss check's input
    SRC_PORT=${CH_SRC_PORT:-0} src_start s "$CHAOS_SRC" \
        --hub "http://127.0.0.1:${CH_HUB_HTTP[A]}/hub" --retry-max 500ms \
        --resourcelist-refresh 5s --log-level debug || return 1
    CH_SRC_PORT=${SRC_HTTP[s]}
}

# chaos_mirror_start NAME: rssub run for mirror NAME (its options in
# MIR_ARGS); a check that it got ready, failing without stopping the run.
chaos_mirror_start() {
    local m=$1 args
    read -r -a args <<<"${MIR_ARGS[$m]}"
    mkdir -p "$TMP/$m"
    # debug: every resource's outcome is logged, for the post-mortem
    if sub_start "$m" "$CH_BASE" "$TMP/$m/mirror" "$TMP/$m.db" "${args[@]}" \
            --log-level debug; then
        return 0
    fi
    bad "$m: rssub run is not ready within ${SUB_READY_SECS:-60} s (T+$(elapsed)s)" \
        "$(grep -v 'framework notification' "${SUB_LOG[$m]}" | tail -n 15)"
    return 1
}

# chaos_alive: every daemon that should run does; one that exited on its
# own is a failure (its log tail shown) and is started again so that the
# run goes on.
chaos_alive() {
    local k pid rc
    for k in A B; do
        pid=${HUB_PID[$k]:-}
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid" 2>/dev/null
            rc=$?
            bad "rshub $k exited on its own (status $rc, T+$(elapsed)s)" \
                "$(tail -n 30 "${HUB_LOG[$k]}")"
            HUB_PID[$k]=
            chaos_hub_start "$k" || bad "rshub $k restarts"
        fi
    done
    pid=${SRC_PID[s]:-}
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid" 2>/dev/null
        rc=$?
        bad "rssource exited on its own (status $rc, T+$(elapsed)s)" \
            "$(tail -n 30 "${SRC_LOG[s]}")"
        SRC_PID[s]=
        chaos_src_start || bad "rssource restarts"
    fi
    for k in "${CHAOS_MIRRORS[@]}"; do
        pid=${SUB_PID[$k]:-}
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid" 2>/dev/null
            rc=$?
            bad "rssub $k exited on its own (status $rc, T+$(elapsed)s)" \
                "$(grep -v 'framework notification' "${SUB_LOG[$k]}" | tail -n 30)"
            SUB_PID[$k]=
            chaos_mirror_start "$k"
        fi
    done
    if ! kill -0 "$REDIS_PID" 2>/dev/null; then
        bad "redis-server exited on its own (T+$(elapsed)s)" \
            "$(tail -n 20 "$REDIS_DIR/redis.log")"
        redis_start || bad "redis-server restarts"
    fi
}

# explain_diff SRC MIRROR SRCSTATE STREAM SUBSTATE: for a post-mortem,
# where the first few paths that differ between SRC and MIRROR got lost:
# the Source's change log (rssource's state), the hub's backlog (Redis
# stream STREAM: the entries naming the path, with their ids; trimmed ones
# are gone), and the mirror's ledger (resource row, todo row).
# sqlq DB SQL: the rows of a read-only query, one per line, columns joined
# by '|' (Python's sqlite3 module: the sqlite3 CLI is not installed by
# deploy/install-deps.sh, and need not be).
sqlq() {
    "$PY" -c 'import sqlite3, sys
db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
for sql in sys.argv[2].split(";"):
    if sql.strip():
        for row in db.execute(sql):
            print("|".join("" if v is None else str(v) for v in row))' "$1" "$2"
}

explain_diff() {
    local src=$1 mir=$2 sst=$3 key=$4 dst=$5 rel
    { diff <(cd "$src" && find . -type f ! -name '.rssub-tmp.*' | LC_ALL=C sort) \
           <(cd "$mir" && find . -type f ! -name '.rssub-tmp.*' | LC_ALL=C sort) |
          sed -n 's/^[<>] \.\///p'
      (cd "$src" && find . -type f | while IFS= read -r f; do
          [ -f "$mir/$f" ] && ! cmp -s "$f" "$mir/$f" && echo "${f#./}"
      done); } | head -n 4 | while IFS= read -r rel; do
        echo "$rel:"
        echo "  source: $(sqlq "$sst/state.db" \
            "select group_concat(change || '@' || dt, ' ') from (select change, dt from changes where path = '$rel' order by seq)" 2>&1)"
        echo "  hub backlog: $(rcli xrange "$key" - + 2>/dev/null |
            "$PY" -c 'import re, sys
rel = sys.argv[1]
text = sys.stdin.read()
out = []
parts = re.split(r"^([0-9]+-[0-9]+)$", text, flags=re.M)
for i in range(1, len(parts) - 1, 2):
    for u in re.finditer(r"<loc>[^<]*/" + re.escape(rel) + r"</loc>\s*(?:<lastmod>[^<]*</lastmod>\s*)?<rs:md change=\"([a-z]+)\" datetime=\"([^\"]+)\"", parts[i + 1]):
        out.append("%s@%s(%s)" % (u.group(1), u.group(2), parts[i]))
print(" ".join(out) or "none (trimmed, or never accepted)")' "$rel")"
        echo "  mirror: $(sqlq "$dst" \
            "select 'res change_dt=' || ifnull(change_dt, '') || ' deleted=' || deleted from res where uri like '%/$rel'; select 'todo change=' || change || ' attempts=' || attempts || ' failed=' || failed || ' ' || ifnull(last_error, '') from todo where uri like '%/$rel'" 2>&1 | tr '\n' ' ')"
    done
}

# OVERDUE_PY STOP NAME=DB...: for each mirror's ledger (read-only, beside
# the running rssub), the retry that is most overdue: a todo row not
# failed whose not_before (set by a failed attempt's backoff; 0 for a
# change due at once) has passed. Prints "NAME TENTHS ROW" per mirror:
# how long it is past due, in tenths of a second, counted from STOP
# (seconds since the epoch) at the earliest - the chaos events before it
# (a mirror paused or restarted) excuse what they delayed. 0 and no ROW
# when none is past due; a row in flight counts from its due time.
OVERDUE_PY=$(cat <<'EOF'
import sqlite3, sys, time
stop = int(float(sys.argv[1]) * 1e6)
for arg in sys.argv[2:]:
    name, db = arg.split("=", 1)
    now = int(time.time() * 1e6)
    try:
        con = sqlite3.connect("file:" + db + "?mode=ro", uri=True, timeout=2)
        row = con.execute(
            "select not_before, uri, attempts, last_error from todo where "
            "failed = 0 and not_before > 0 and not_before <= ? "
            "order by not_before limit 1", (now,)).fetchone()
        con.close()
    except sqlite3.Error:
        continue
    if row is None:
        print("%s 0" % name)
    else:
        print("%s %d %s attempts=%d due %.1f s ago: %s" % (
            name, (now - max(row[0], stop)) // 100000, row[1], row[2],
            (now - row[0]) / 1e6, row[3] or ""))
EOF
)

# chaos_overdue: sample every mirror's most overdue retry (OVERDUE_PY);
# keep the worst of each in CH_OVERDUE (tenths of a second) and
# CH_OVERDUE_ROW.
chaos_overdue() {
    local m dbs=() name tenths row
    for m in "${CHAOS_MIRRORS[@]}"; do
        dbs+=("$m=$TMP/$m.db")
    done
    while read -r name tenths row; do
        [ -n "$name" ] || continue
        if [ -z "${CH_OVERDUE[$name]:-}" ] || [ "$tenths" -gt "${CH_OVERDUE[$name]}" ]; then
            CH_OVERDUE[$name]=$tenths
            CH_OVERDUE_ROW[$name]=$row
        fi
    done < <("$PY" -c "$OVERDUE_PY" "$CHAOS_STOP_AT" "${dbs[@]}" 2>/dev/null)
}
# secs TENTHS: tenths of a second as seconds ("?" stays "?")
secs() {
    case $1 in ''|*[!0-9]*) echo "${1:-?}" ;; *) echo "$(($1 / 10)).$(($1 % 10))" ;; esac
}

# ---------------------------------------------------------------- setup

# chaos_setup: Redis (append-only, fsync always), rshub A and B, the
# 2,000-file Source, rssource pushing to A, three mirrors, their
# baselines. Fails (returns 1) only when the run cannot go on at all.
chaos_setup() {
    RANDOM=$CHAOS_SEED
    note "chaos seed $CHAOS_SEED (RS_CHAOS_SEED=$CHAOS_SEED reproduces the schedule and the writes)"
    redis_start persist || { bad "redis-server starts"; return 1; }
    chaos_hub_start A || { bad "rshub A starts"; return 1; }
    chaos_hub_start B || { bad "rshub B starts"; return 1; }
    mkdir -p "$CHAOS_SRC"
    "$PY" -c "$CHAOS_WRITER_PY" "$CHAOS_SRC" "$CHAOS_SEED" init 2000 ||
        { bad "the Source's 2,000 files are written"; return 1; }
    chaos_src_start || { bad "rssource starts"; return 1; }
    CH_BASE=$(src_url s)
    # the hub's channel is advertised once rssource has published once
    mkdir -p "$CHAOS_SRC/flood"
    printf 'first\n' >"$CHAOS_SRC/flood/f0.txt"
    if ! wait_until 20 caplist_ws s change-notification >/dev/null; then
        bad "rssource advertises the hub's WebSocket channel"
        return 1
    fi
    CH_CHAN=$(caplist_ws s change-notification)
    MIR_ARGS[ws]="--channel ws://127.0.0.1:${CH_HUB_WS[A]}/channel/$CH_CHAN --channel ws://127.0.0.1:${CH_HUB_WS[B]}/channel/$CH_CHAN"
    # rssub prefers WebSocket when the Capability List offers it (and
    # rssource's does): --transport websub makes this one a WebSub mirror.
    # Both keep the default safety pull (10 min, beyond the run): they
    # must converge by push and gap pulls alone - for WebSub, a delivery
    # the hub trimmed before it could send it is told by X-Hub-Gap.
    CH_CB_PORT=$(free_port)
    MIR_ARGS[websub]="--transport websub --callback-listen 127.0.0.1:$CH_CB_PORT"
    MIR_ARGS[poll]="--no-push --poll-interval 500ms"
    local m t
    for m in "${CHAOS_MIRRORS[@]}"; do
        t=$SECONDS
        if chaos_mirror_start "$m"; then
            ok "$m: rssub run: baseline of 2,000 files applied ($((SECONDS - t)) s)"
        fi
    done
    check "websub: the mirror follows by WebSub" \
        grep -Eq 'msg="?following"? .*websub=' "${SUB_LOG[websub]}"
    check "ws: the mirror follows both hub nodes' channel" \
        grep -Eq 'msg="?channel connected"? uri=ws://.*'"$CH_CHAN" "${SUB_LOG[ws]}"
    check "poll: the mirror polls (--no-push)" \
        grep -Eq 'msg="?polling change lists"?.*no-push' "${SUB_LOG[poll]}"
    return 0
}

# -------------------------------------------------------------- events

ev_hub() {
    local n
    rnd 2
    n=$([ "$R" = 0 ] && echo A || echo B)
    rnd_secs 3 25
    event hub "kill -9 rshub $n, restart after $S s"
    hub_kill9 "$n"
    sleep "$S"
    chaos_hub_start "$n" || bad "rshub $n restarts on its ports (T+$(elapsed)s)"
}

ev_mirror() {
    rnd 3
    local m=${CHAOS_MIRRORS[$R]}
    rnd_secs 3 20
    event mirror "kill -9 rssub $m, restart after $S s"
    sub_stop "$m" KILL
    sleep "$S"
    chaos_mirror_start "$m"
}

ev_source() {
    rnd_secs 3 20
    event source "kill -9 rssource, restart after $S s"
    src_stop s KILL
    sleep "$S"
    chaos_src_start || bad "rssource restarts on its port (T+$(elapsed)s)"
}

ev_redis() {
    rnd_secs 3 20
    event redis "kill -9 redis-server, restart after $S s (appendfsync always)"
    kill -KILL "$REDIS_PID" 2>/dev/null
    wait "$REDIS_PID" 2>/dev/null
    sleep "$S"
    redis_start || bad "redis-server restarts (T+$(elapsed)s)"
}

# hubs_sum SERIES: SERIES summed over both hub nodes (this run of each)
hubs_sum() {
    local k n t=0
    for k in A B; do
        n=$(ht metrics --http "${CH_HUB_HTTP[$k]}" --get "$1" 2>/dev/null)
        t=$((t + ${n:-0}))
    done
    echo "$t"
}
# drops: slow-consumer cuts (4002) both hub nodes made
drops() { hubs_sum rshub_ws_slow_consumer_drops_total; }
# trimmed_past ID: the hub's backlog was trimmed through ID or later
trimmed_past() {
    local tt
    tt=$(ht topic --http "${CH_HUB_HTTP[B]}" --name "$CH_CHAN" \
        --get backlog.trimmed_through 2>/dev/null)
    [ -n "$tt" ] && [ "$tt" != null ] && id_ge "$tt" "$1"
}
# fell_behind: WebSub subscriptions the hubs found trimmed past (all runs)
fell_behind() { cat "${HUB_LOG[A]}" "${HUB_LOG[B]}" | grep -c 'fell behind the backlog'; }
# told_gaps: X-Hub-Gap deliveries the WebSub mirror acted on (all runs)
told_gaps() { grep -c 'X-Hub-Gap' "${SUB_LOG[websub]}"; }
# more_than N CMD...: CMD prints a number over N (for wait_until, which
# must run CMD each time, not a number expanded once)
more_than() {
    local n=$1
    shift
    [ "$("$@")" -gt "$n" ]
}
# ev_trim: SIGSTOP the WebSocket and WebSub mirrors and flood the Source
# until a hub cut the first as a slow consumer (its queue over
# --ws-soft-limit), and then until the backlog is trimmed past the newest
# id the hub held at that moment: what the mirrors did not get is gone
# from the hub. SIGCONT: the WebSocket mirror reconnects with since= and
# must be told 4001 and pull; the WebSub mirror's next delivery must say
# X-Hub-Gap, and it must pull (its safety pull is 10 min away).
ev_trim() {
    local last d0 t0=$SECONDS t1 t2 stop=$TMP/flood.stop cut=no fb0 tg0 wsub
    [ -n "${SUB_PID[ws]:-}" ] || { bad "trim: rssub ws is not running"; return; }
    wsub=${SUB_PID[websub]:-}
    d0=$(drops)
    fb0=$(fell_behind)
    tg0=$(told_gaps)
    event trim "SIGSTOP rssub ws and websub until cut (4002) and trimmed past"
    kill -STOP "${SUB_PID[ws]}"
    [ -n "$wsub" ] && kill -STOP "$wsub"
    rm -f "$stop"
    rnd 1000
    bg flood "$PY" -c "$CHAOS_WRITER_PY" "$CHAOS_SRC" "$R" flood "$stop" 6000
    # (deadlines in seconds: each look at the hub costs a Python start)
    while [ $((SECONDS - t0)) -lt 30 ]; do
        [ "$(drops)" -gt "$d0" ] && { cut=yes; break; }
        sleep 0.1
    done
    t1=$((SECONDS - t0))
    last=$(ht topic --http "${CH_HUB_HTTP[B]}" --name "$CH_CHAN" \
        --get backlog.last_id 2>/dev/null)
    [ "$last" != null ] || last=
    t2=$SECONDS
    while [ $((SECONDS - t2)) -lt 30 ] && ! { [ -n "$last" ] && trimmed_past "$last"; }; do
        sleep 0.1
    done
    touch "$stop"
    bg_wait flood 10
    if [ -n "$last" ] && trimmed_past "$last"; then
        echo "     chaos T+$(elapsed)s: cut as a slow consumer: $cut (after $t1 s); trimmed past $last (after $((SECONDS - t0)) s): SIGCONT"
    else
        bad "trim: the backlog was not trimmed past ${last:-?} within 30 s"
    fi
    [ "$cut" = yes ] && CH_CUTS=$((${CH_CUTS:-0} + 1))
    kill -CONT "${SUB_PID[ws]}"
    [ -n "$wsub" ] || return 0
    kill -CONT "$wsub"
    # deliveries resume after the hub's retry backoff (1 s here)
    if wait_until 30 more_than "$fb0" fell_behind; then
        wait_until 30 more_than "$tg0" told_gaps ||
            bad "trim: a hub fell behind for the WebSub mirror, which was not told (X-Hub-Gap) within 30 s"
    else
        echo "     chaos: the WebSub subscription kept up (no hub fell behind for it)"
    fi
}

# ss_kill_works: `ss -K` destroys TCP sockets here (root, and a kernel
# with SOCK_DESTROY); probed on a connection of our own.
ss_kill_works() {
    "$PY" - <<'EOF'
import socket, subprocess, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
p = s.getsockname()[1]
c = socket.create_connection(("127.0.0.1", p))
a, _ = s.accept()
subprocess.run(["ss", "-K", "-t", "( dport = :%d )" % p],
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
c.settimeout(2)
try:
    sys.exit(0 if c.recv(1) == b"" else 1)
except OSError:
    sys.exit(0)
EOF
}
# hub_reconnects: Redis reconnections both hub nodes made
hub_reconnects() { hubs_sum rshub_redis_reconnects_total; }
# ws_closes: channel closes the WebSocket mirror logged (all runs)
ws_closes() { grep -Ec 'msg="?channel closed"?' "${SUB_LOG[ws]}"; }
# ev_drop: the network between the daemons fails at once, and nobody is
# restarted: every TCP connection to the hub nodes (WebSocket channels,
# publishes, WebSub requests), to rssource (fetches, pulls) and to the
# WebSub mirror's callback (deliveries) is reset (ss -K), and every Redis
# client link (the hubs') is cut (CLIENT KILL). Each must notice and
# reconnect by itself; the WebSocket mirror resumes with since=.
ev_drop() {
    local p c0 r0 ports=("${CH_HUB_HTTP[A]}" "${CH_HUB_HTTP[B]}"
                          "${CH_HUB_WS[A]}" "${CH_HUB_WS[B]}" "$CH_SRC_PORT"
                          "$CH_CB_PORT")
    event drop "reset every TCP connection between the daemons; CLIENT KILL every Redis client"
    c0=$(ws_closes)
    r0=$(hub_reconnects)
    if [ "${CH_SS_KILL:-}" = "" ]; then
        if ss_kill_works; then CH_SS_KILL=yes; else CH_SS_KILL=no; fi
    fi
    if [ "$CH_SS_KILL" = yes ]; then
        for p in "${ports[@]}"; do
            ss -K -t "( dport = :$p or sport = :$p )" >/dev/null 2>&1
        done
    else
        echo "     chaos: ss -K cannot reset connections here: Redis links only"
    fi
    rcli CLIENT KILL TYPE normal >/dev/null 2>&1
    if [ "$CH_SS_KILL" = yes ]; then
        wait_until 10 more_than "$c0" ws_closes ||
            bad "drop: the ws mirror saw no channel closed (T+$(elapsed)s)"
    fi
    wait_until 10 more_than "$r0" hub_reconnects ||
        bad "drop: no hub reconnected to Redis (T+$(elapsed)s)"
}

ev_pause() {
    rnd 3
    local m=${CHAOS_MIRRORS[$R]}
    rnd_secs 20 40
    event pause "SIGSTOP rssub $m for $S s"
    [ -n "${SUB_PID[$m]:-}" ] || { bad "pause: rssub $m is not running"; return; }
    kill -STOP "${SUB_PID[$m]}"
    sleep "$S"
    kill -CONT "${SUB_PID[$m]}"
}

# chaos_run SECS: the writer runs while seeded events are injected for
# SECS seconds: first each kind once (in a seeded order), then kinds at
# random, 1-5 s apart.
chaos_run() {
    local secs=$1 kinds=(hub mirror source redis trim pause drop) order=() k i
    CHAOS_T0=$SECONDS
    rm -f "$TMP/writer.stop"
    bg writer "$PY" -c "$CHAOS_WRITER_PY" "$CHAOS_SRC" "$CHAOS_SEED" run \
        "$TMP/writer.stop" "$TMP/writer.out"
    # a seeded shuffle (Fisher-Yates) of the kinds: the first round
    order=("${kinds[@]}")
    for ((i = ${#order[@]} - 1; i > 0; i--)); do
        rnd $((i + 1))
        k=${order[$i]}
        order[i]=${order[$R]}
        order[R]=$k
    done
    i=0
    while [ "$(elapsed)" -lt "$secs" ]; do
        rnd_secs 10 40
        sleep "$S"
        chaos_alive
        if [ "$i" -lt "${#order[@]}" ]; then
            k=${order[$i]}
        else
            rnd "${#kinds[@]}"
            k=${kinds[$R]}
        fi
        i=$((i + 1))
        "ev_$k"
    done
    chaos_alive
    touch "$TMP/writer.stop"
    if bg_wait writer 30 && [ "$WAIT_RC" = 0 ]; then
        ok "the writer stopped: $(cat "$TMP/writer.out")"
    else
        bad "the writer ended badly (status $WAIT_RC)"
    fi
    CHAOS_WRITES=$(cat "$TMP/writer.out" 2>/dev/null)
    # when the writer stopped (its last act): retries are judged from then
    CHAOS_STOP_AT=$(stat -c %.6Y "$TMP/writer.out" 2>/dev/null || date +%s.%N)
}

# -------------------------------------------------------------- checks

# chaos_converge: every mirror equals the Source (byte for byte, no
# temp files) within CHAOS_CONVERGE_SECS of the writer's stop; the time
# each took in CH_CONV. Meanwhile, the retries each one has waiting are
# sampled (chaos_overdue; judged by chaos_retries).
chaos_converge() {
    local t0=$SECONDS m left=("${CHAOS_MIRRORS[@]}") still
    while [ "${#left[@]}" -gt 0 ] && [ $((SECONDS - t0)) -lt "$CHAOS_CONVERGE_SECS" ]; do
        chaos_overdue
        still=()
        for m in "${left[@]}"; do
            if same_tree "$CHAOS_SRC" "$TMP/$m/mirror" >/dev/null 2>&1; then
                CH_CONV[$m]=$((SECONDS - t0))
            else
                still+=("$m")
            fi
        done
        left=("${still[@]}")
        [ "${#left[@]}" -eq 0 ] || sleep 0.5
    done
    chaos_alive
    for m in "${CHAOS_MIRRORS[@]}"; do
        if [ -n "${CH_CONV[$m]:-}" ]; then
            ok "$m: the mirror equals the Source (diff -r) ${CH_CONV[$m]} s after the writer stopped"
        else
            CH_CONV[$m]=never
            bad "$m: the mirror does not equal the Source $CHAOS_CONVERGE_SECS s after the writer stopped" \
                "$(same_tree "$CHAOS_SRC" "$TMP/$m/mirror" 2>&1 | head -n 8
                   echo "where the first differences got lost:"
                   explain_diff "$CHAOS_SRC" "$TMP/$m/mirror" "$TMP/s.state" \
                       "rshub:s:$CH_CHAN" "$TMP/$m.db")"
        fi
    done
}

# chaos_acked: the change notifications rssource says the hub accepted
# (its log) are all durable in Redis: each id after the trim mark is in
# the stream; and the WebSocket mirror's channel position reached the
# newest of them.
chaos_acked() {
    local acked=$TMP/acked.ids stream=$TMP/stream.ids mark pos
    grep -h 'msg="\?notification accepted' "${SRC_LOG[s]}" |
        grep 'topic=change ' | sed -n 's/.* id=\([0-9]*-[0-9]*\).*/\1/p' >"$acked"
    CH_ACKED=$(wc -l <"$acked")
    if [ "$CH_ACKED" -eq 0 ]; then
        bad "rssource logged no acknowledged change notification"
        return
    fi
    mark=$(rcli get "rshub:t:$CH_CHAN")
    rcli xrange "rshub:s:$CH_CHAN" - + COUNT 1000000 |
        grep -E '^[0-9]+-[0-9]+$' >"$stream"
    check "every acknowledged change notification ($CH_ACKED) after the trim mark (${mark:-none}) is in Redis's stream" \
        "$PY" - "$acked" "$stream" "${mark:-0-0}" <<'EOF'
import sys
key = lambda s: tuple(int(x) for x in s.split("-"))
acked = [l.strip() for l in open(sys.argv[1]) if l.strip()]
have = set(l.strip() for l in open(sys.argv[2]))
mark = key(sys.argv[3])
lost = [a for a in acked if key(a) > mark and a not in have]
if lost:
    print("%d acknowledged ids are not in the stream: %s" % (len(lost), lost[:10]))
    sys.exit(1)
EOF
    CH_LAST_ACK=$(sort -t- -k1,1n -k2,2n "$acked" | tail -n 1)
    pos=$(sqlq "$TMP/ws.db" \
        "select id from pos where channel like '%#change'" 2>&1)
    if id_ge "${pos:-0-0}" "$CH_LAST_ACK"; then
        ok "ws: the mirror's channel position ($pos) reached the newest acknowledged id ($CH_LAST_ACK)"
    elif gap_pull_after "${SUB_LOG[ws]}" "${CH_LAST_ACK%-*}"; then
        # after a gap rssub pulls, then replays from a time mark taken
        # before the pull: what the pull covered is not replayed, so the
        # position may stay below ids the pull brought in
        ok "ws: the newest acknowledged id ($CH_LAST_ACK) is past the channel position ($pos) but was covered by a gap pull"
    else
        bad "ws: the mirror's channel position (${pos:-none}) is below the newest acknowledged id ($CH_LAST_ACK), and no gap pull covered it"
    fi
}

# gap_pull_after LOG MS: rssub's LOG has a Change List pull, asked for by
# a gap, that ended after MS (ms since the epoch)
gap_pull_after() {
    "$PY" - "$1" "$2" <<'PYEOF'
import re, sys
from datetime import datetime, timezone
gap, last = False, 0
for l in open(sys.argv[1], errors="replace"):
    if "gap in the channel" in l:
        gap = True
    elif gap and re.search(r'msg="?change lists read', l):
        m = re.match(r"ts=(\S+)Z ", l)
        if m:
            t = datetime.fromisoformat(m.group(1)).replace(tzinfo=timezone.utc)
            last = max(last, int(t.timestamp() * 1000))
        gap = False
sys.exit(0 if last > int(sys.argv[2]) else 1)
PYEOF
}

# chaos_retries: no mirror left a failed fetch waiting past its backoff
# by more than CHAOS_RETRY_SLACK_SECS after the writer stopped (sampled
# during convergence and once more now, before the mirrors stop): the
# same bound for every mirror.
chaos_retries() {
    local m
    chaos_overdue
    for m in "${CHAOS_MIRRORS[@]}"; do
        if [ -z "${CH_OVERDUE[$m]:-}" ]; then
            CH_OVERDUE[$m]='?'
            bad "$m: its ledger could not be read for retries past due"
        elif [ "${CH_OVERDUE[$m]}" -le $((CHAOS_RETRY_SLACK_SECS * 10)) ]; then
            ok "$m: after the writer stopped, no retry waited more than $CHAOS_RETRY_SLACK_SECS s past its backoff (worst $(secs "${CH_OVERDUE[$m]}") s)"
        else
            bad "$m: after the writer stopped, a retry waited $(secs "${CH_OVERDUE[$m]}") s past its backoff (bound $CHAOS_RETRY_SLACK_SECS s)" \
                "${CH_OVERDUE_ROW[$m]}"
        fi
    done
}

# chaos_scan_logs: no sanitizer report in any log of any run (a daemon
# killed and restarted appends to its log: every run is scanned).
chaos_scan_logs() {
    local pat='ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|ERROR: ThreadSanitizer'
    local f hits=()
    for f in "${HUB_LOG[@]}" "${SRC_LOG[@]}" "${SUB_LOGS[@]}"; do
        [ -f "$f" ] && grep -Eq "$pat" "$f" && hits+=("$f")
    done
    if [ "${#hits[@]}" -eq 0 ]; then
        ok "no sanitizer report in any daemon's log (every run)"
    else
        bad "sanitizer report in: ${hits[*]}" \
            "$(grep -E -A14 "$pat" "${hits[@]}" | head -n 40)"
    fi
}

# chaos_pending M: the todo rows of mirror M not failed (due or waiting
# for a retry), read beside the running rssub; empty when unreadable.
chaos_pending() {
    sqlq "$TMP/$1.db" "select count(*) from todo where failed = 0" 2>/dev/null
}
chaos_settled() { [ "$(chaos_pending "$1")" = 0 ]; }

# chaos_finish_checks: the retries past due, every mirror done with its
# work (a mirror equal to the Source can still be retrying a notification
# of a resource deleted since: its last attempts end it, within the
# backoff's 15 s), stop the mirrors (exit 0), audit each (read-only: it
# reports pending rows), the loss check, the log scan; then the summary.
chaos_finish_checks() {
    local m gaps
    chaos_retries
    for m in "${CHAOS_MIRRORS[@]}"; do
        [ -n "${SUB_PID[$m]:-}" ] || continue
        if wait_until 60 chaos_settled "$m"; then
            ok "$m: nothing left to apply or retry"
        else
            bad "$m: $(chaos_pending "$m") changes still to apply or retry 60 s on"
        fi
    done
    for m in "${CHAOS_MIRRORS[@]}"; do
        [ -n "${SUB_PID[$m]:-}" ] || continue
        sub_stop "$m"
        if [ "$SUB_RC" = 0 ]; then
            ok "$m: SIGTERM, exit 0"
        else
            bad "$m: SIGTERM, exit $SUB_RC, want 0" "$(tail -n 20 "${SUB_LOG[$m]}")"
        fi
        sub_cmd "$m.audit" audit "$CH_BASE" "$TMP/$m/mirror" "$TMP/$m.db"
        if [ "$SUB_RC" = 0 ]; then
            ok "$m: rssub audit exits 0"
        else
            bad "$m: rssub audit exits $SUB_RC, want 0" \
                "$(head -n 20 "$TMP/$m.audit.out"; tail -n 10 "$TMP/$m.audit.log")"
        fi
    done
    chaos_acked
    src_stop s
    expect_eq "rssource: SIGTERM, exit 0" "$SRC_RC" 0
    SRC_ASAN_DONE[s]=1
    for m in A B; do
        hub_stop "$m"
        expect_eq "rshub $m: SIGTERM, exit 0" "$HUB_RC" 0
        HUB_ASAN_DONE[$m]=1
    done
    chaos_scan_logs
    gaps=
    for m in "${CHAOS_MIRRORS[@]}"; do
        gaps+=" $m=$(grep -c 'gap in the channel' "${SUB_LOG[$m]}")"
    done
    echo "==== chaos summary (seed $CHAOS_SEED, $(elapsed) s of chaos)"
    printf '  events:'
    for m in hub mirror source redis trim pause drop; do
        printf ' %s=%s' "$m" "${CH_COUNT[$m]:-0}"
    done
    echo
    printf '    %s\n' "${CH_EVENTS[@]}"
    echo "  writer: ${CHAOS_WRITES:-?}"
    echo "  change notifications acknowledged by the hub: ${CH_ACKED:-?} (newest ${CH_LAST_ACK:-?})"
    echo "  paused WebSocket mirror cut as a slow consumer: ${CH_CUTS:-0} of ${CH_COUNT[trim]:-0} trim events"
    echo "  gap pulls (\"gap in the channel\" in rssub's logs):$gaps"
    echo "  WebSub deliveries the hubs trimmed before sending (\"fell behind the backlog\"): $(cat "${HUB_LOG[@]}" | grep -c 'fell behind the backlog')"
    echo "  ...gap pulls the WebSub mirror made when told (X-Hub-Gap): $(grep -c 'X-Hub-Gap' "${SUB_LOG[websub]}")"
    echo "  convergence after the writer stopped: ws=${CH_CONV[ws]:-?} s websub=${CH_CONV[websub]:-?} s poll=${CH_CONV[poll]:-?} s (bound $CHAOS_CONVERGE_SECS s)"
    echo "  retries after the writer stopped, most past due: ws=$(secs "${CH_OVERDUE[ws]:-}") s websub=$(secs "${CH_OVERDUE[websub]:-}") s poll=$(secs "${CH_OVERDUE[poll]:-}") s (bound $CHAOS_RETRY_SLACK_SECS s)"
    echo "  checks: $pass passed, $fail failed"
}
