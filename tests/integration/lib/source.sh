# shellcheck shell=bash
# source.sh - fixtures of the rssource integration tests (sourced after
# common.sh, which brings redis, rshub, the check counters and the trap):
# rssource instances started with a ready-file and a private state
# directory, HTTP helpers (curl), document checks (rsdoc and a small
# inline Python over ElementTree), and waits. Every wait is bounded; only
# processes started here are stopped, by their recorded PID.

RSSOURCE=$RS_BUILD_DIR/source/rssource
RSDOC=$RS_BUILD_DIR/tools/rsdoc
declare -A SRC_PID SRC_HTTP SRC_LOG SRC_LOGOFF SRC_ASAN_DONE

# src_start NAME DIR [RSSOURCE-ARGS...]: start rssource serving DIR with
# its state in $TMP/NAME.state, wait (20 s) for its ready-file; sets
# SRC_HTTP[NAME] and SRC_PID[NAME]; logs to SRC_LOG[NAME] (appended
# across restarts). SRC_PORT, when set, is the port to listen on (a
# restart keeps the base URL).
src_start() {
    local name=$1 dir=$2
    shift 2
    local ready=$TMP/$name.src.ready
    SRC_LOG[$name]=$TMP/$name.src.log
    rm -f "$ready"
    touch "${SRC_LOG[$name]}"
    SRC_LOGOFF[$name]=$(stat -c %s "${SRC_LOG[$name]}")
    "$RSSOURCE" --dir "$dir" --listen "127.0.0.1:${SRC_PORT:-0}" \
        --state "$TMP/$name.state" --ready-file "$ready" --log-format logfmt \
        "$@" >>"${SRC_LOG[$name]}" 2>&1 &
    SRC_PID[$name]=$!
    SRC_ASAN_DONE[$name]=0
    if ! wait_file "$ready" 20; then
        echo "rssource $name: no ready-file within 20 s" >&2
        tail -n 20 "${SRC_LOG[$name]}" >&2
        return 1
    fi
    SRC_HTTP[$name]=$(sed -n 's/.*"http":\([0-9]*\).*/\1/p' "$ready")
    [ -n "${SRC_HTTP[$name]}" ]
}

# src_stop NAME [SIGNAL]: signal (TERM) and wait (10 s); status in SRC_RC.
# shellcheck disable=SC2034 # SRC_RC is for the callers
src_stop() {
    local name=$1 sig=${2:-TERM} pid=${SRC_PID[$1]:-}
    SRC_RC=
    [ -n "$pid" ] || return 1
    kill "-$sig" "$pid" 2>/dev/null
    if pid_wait "$pid" 10; then
        SRC_RC=$WAIT_RC
    else
        SRC_RC=124
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    fi
    SRC_PID[$name]=
}

# src_asan_check NAME: no sanitizer report in the last run's log.
src_asan_check() {
    local name=$1 log
    local pat='ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:'
    log=$(tail -c +$((${SRC_LOGOFF[$name]:-0} + 1)) "${SRC_LOG[$name]}")
    if printf '%s\n' "$log" | grep -Eq "$pat"; then
        bad "$name: sanitizer report in rssource's log" \
            "$(printf '%s\n' "$log" | grep -E -A14 "$pat" | head -n 40)"
    else
        ok "$name: no sanitizer report in rssource's log"
    fi
    SRC_ASAN_DONE[$name]=1
}

# src_url NAME [PATH]: http://127.0.0.1:PORT/PATH
src_url() { echo "http://127.0.0.1:${SRC_HTTP[$1]}/${2:-}"; }

# get NAME PATH [CURL-ARGS...]: the body on stdout (fails on non-2xx).
get() {
    local name=$1 path=$2
    shift 2
    curl -sf --max-time 20 "$@" "$(src_url "$name" "$path")"
}

# status_code NAME PATH [CURL-ARGS...]
status_code() {
    local name=$1 path=$2
    shift 2
    curl -s -o /dev/null -w '%{http_code}' --max-time 20 "$@" \
        "$(src_url "$name" "$path")"
}

# rsdoc_ok URL...: every document validates strictly.
rsdoc_ok() { "$RSDOC" validate --strict "$@"; }

# xq FILE EXPR: evaluate a Python expression over the parsed document:
# `root` (ElementTree root), `urls` (list of dicts: loc, lastmod, and the
# rs:md attributes; ln: {rel: href}), `md` (root rs:md attributes), `ln`
# (root rs:ln rel -> href), dt(S) (a W3C datetime as a datetime). Prints
# the result (lists and tuples one item per line).
xq() {
    "$PY" - "$1" "$2" <<'EOF'
import sys
import xml.etree.ElementTree as ET
from datetime import datetime
def dt(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00"))
SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
RS = "{http://www.openarchives.org/rs/terms/}"
root = ET.parse(sys.argv[1]).getroot()
md = dict(root.find(RS + "md").attrib) if root.find(RS + "md") is not None else {}
ln = {l.get("rel"): l.get("href") for l in root.findall(RS + "ln")}
urls = []
for u in list(root.findall(SM + "url")) + list(root.findall(SM + "sitemap")):
    d = {"loc": u.findtext(SM + "loc"), "lastmod": u.findtext(SM + "lastmod")}
    m = u.find(RS + "md")
    if m is not None:
        d.update(m.attrib)
    d["ln"] = {l.get("rel"): l.get("href") for l in u.findall(RS + "ln")}
    urls.append(d)
r = eval(sys.argv[2])
if isinstance(r, (list, tuple)):
    for x in r:
        print(x)
elif r is not None:
    print(r)
EOF
}

# fetch NAME PATH FILE: save a document (fails on non-2xx).
fetch() { get "$1" "$2" -o "$3"; }

# changes_of NAME [dt]: "change path" per line of every Change List, in
# order (through the Change List Index); with dt, "change path datetime".
changes_of() {
    local name=$1 idx=$TMP/$1.clidx.xml loc base extra=""
    [ "${2:-}" = dt ] && extra=" + ' ' + u['datetime']"
    fetch "$name" resourcesync/changelist-index.xml "$idx" || return 1
    base=$(src_url "$name")
    for loc in $(xq "$idx" '[u["loc"] for u in urls]'); do
        curl -sf --max-time 20 "$loc" -o "$TMP/$name.cl.xml" || return 1
        xq "$TMP/$name.cl.xml" \
            "[u['change'] + ' ' + u['loc'][len('$base'):]$extra for u in urls]"
    done
}

# notified SUBLOG BASE [dt|fw]: the entries of every notification a
# hubtool subscriber saved (--save-data), in the order received: "change
# path" (with dt: "change path datetime"; fw: "change capability name").
notified() {
    "$PY" - "$1" "$2" "${3:-}" <<'EOF2'
import json, sys
import xml.etree.ElementTree as ET
SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
RS = "{http://www.openarchives.org/rs/terms/}"
base, mode = sys.argv[2], sys.argv[3]
for line in open(sys.argv[1]):
    ev = json.loads(line)
    if ev.get("ev") != "msg" or "data" not in ev:
        continue
    root = ET.fromstring(ev["data"].encode())
    for u in root.findall(SM + "url"):
        loc = u.findtext(SM + "loc")
        md = u.find(RS + "md").attrib
        if mode == "fw":
            print(md.get("change"), md.get("capability"), loc.rsplit("/", 1)[1])
        elif mode == "dt":
            print(md.get("change"), loc[len(base):], md.get("datetime"))
        else:
            print(md.get("change"), loc[len(base):])
EOF2
}

# notified_has SUBLOG BASE MODE WANT...: WANT lines appear, in this order,
# among what the subscriber received.
notified_has() {
    local log=$1 base=$2 mode=$3
    shift 3
    notified "$log" "$base" "$mode" | "$PY" -c '
import sys
got = [l.rstrip("\n") for l in sys.stdin]
want = sys.argv[1:]
i = 0
for g in got:
    if i < len(want) and g == want[i]:
        i += 1
sys.exit(0 if i == len(want) else 1)' "$@"
}

# caplist_ws NAME CAPABILITY: the name of the hub channel (ws://.../channel/
# NAME) rssource advertises for CAPABILITY (change-notification or
# framework-notification); fails until it advertises one.
caplist_ws() {
    fetch "$1" resourcesync/capabilitylist.xml "$TMP/$1.caplist.xml" || return 1
    local ws
    ws=$(xq "$TMP/$1.caplist.xml" \
        '[u["loc"] for u in urls if u["loc"].startswith("ws://") and u["capability"] == "'"$2"'"]')
    [ -n "$ws" ] || return 1
    echo "${ws##*/channel/}"
}

# has_changes NAME WANT...: the change log ends with these lines, in any
# order: changes made within one read of inotify's queue are recorded
# existing-paths-first (catalog_observe_batch), so their order depends on
# where the kernel's reads fell, which a loaded machine moves. The order of
# the datetimes is checked on its own. Prints both sides when they differ.
#
# With CL_AFTER=N set, the lines compared are all those after the first N,
# and "updated P" is dropped where "created P" is among them: a file
# written into a directory just made can be caught empty by the scan of
# the new directory and then again written, which is two honest entries
# for what the step means as one creation (test_source saw it once in 115
# runs).
has_changes() {
    local name=$1 got want
    shift
    if [ -n "${CL_AFTER:-}" ]; then
        got=$(changes_of "$name" | tail -n +$((CL_AFTER + 1)) |
              awk '{ line[NR] = $0; if ($1 == "created") made[$2] = 1 }
                   END { for (i = 1; i <= NR; i++) {
                             split(line[i], f, " ")
                             if (!(f[1] == "updated" && (f[2] in made)))
                                 print line[i]
                         } }' | sort)
    else
        got=$(changes_of "$name" | tail -n $# | sort)
    fi
    want=$(printf '%s\n' "$@" | sort)
    [ "$got" = "$want" ] && return 0
    printf 'got:\n%s\nwant:\n%s\n' "$got" "$want"
    return 1
}

# src_cleanup: stop the sources, then common.sh's cleanup.
src_cleanup() {
    local k
    for k in "${!SRC_PID[@]}"; do
        [ -n "${SRC_PID[$k]}" ] && stop_pid "${SRC_PID[$k]}"
    done
    cleanup
}
trap src_cleanup EXIT

# src_finish: stop every source still running, check their logs, then
# common.sh's finish (hubs, tally, exit status).
src_finish() {
    local k
    for k in "${!SRC_PID[@]}"; do
        [ -n "${SRC_PID[$k]}" ] && src_stop "$k"
    done
    for k in "${!SRC_LOG[@]}"; do
        [ "${SRC_ASAN_DONE[$k]:-0}" = 1 ] || src_asan_check "$k"
    done
    finish
}
