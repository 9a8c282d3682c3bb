#!/usr/bin/env bash
# test_hub_idempotent.sh - publishing once with X-Publish-Id
# (docs/protocol.md 3, 7). Runs a real rshub (two nodes on one private
# redis-server), rspub and rssource.
#   hub: a resend with the same KEY:SEQ, or a lower SEQ, to the same node
#   or to the other one, is answered 202 "duplicate ID" with
#   X-Hub-Duplicate: 1 and is not stored; two KEYs are independent;
#   malformed headers get 400; the per-topic cap on KEYs drops the least
#   recently used one; a WebSocket subscriber sees each notification once;
#   the metrics count it all.
#   rspub: --publish-id, a duplicate exits 0 with a note.
#   rssource: kill -9 after the hub stored a POST and before rssource
#   read the 202 (a proxy withholds the answer), then a restart with more
#   changes waiting, also after a 413 halved the batch. Each change is
#   stored once in the backlog and reaches the subscriber once.
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"

RSPUB=$RS_BUILD_DIR/tools/rspub
T=http://example.com/idem/changes
T2=http://example.com/idem/capped

redis_start || { bad "redis-server starts"; src_finish; }
hub_start A --open --publish-ids-per-topic 3 ||
    { bad "rshub A starts"; src_finish; }
hub_start B --open || { bad "rshub B starts"; src_finish; }
HA=${HUB_HTTP[A]}
HB=${HUB_HTTP[B]}

# pub NODE TOPIC N [KEY:SEQ]: publish document N (hubtool gen) to NODE,
# with X-Publish-Id when given; prints "STATUS DUP BODY", DUP the
# X-Hub-Duplicate header or "-": "202 - accepted ID", "202 1 duplicate ID".
pub() {
    local node=$1 topic=$2 n=$3 pid=${4:-} r d
    local extra=()
    [ -n "$pid" ] && extra=(--header "X-Publish-Id: $pid")
    r=$(hub_req "$node" --topic "$topic" --gen change --n "$n" "${extra[@]}")
    d=$(header_of "$r" X-Hub-Duplicate)
    printf '%s %s %s\n' "$(status_of "$r")" "${d:--}" \
        "$(body_of "$r" | head -n 1)"
}
# stored WHAT ANSWER: a check that pub's ANSWER says stored; prints its id.
stored() {
    case $2 in
        "202 - accepted "*) ok "$1" >&2; echo "${2##* }" ;;
        *) bad "$1" "$2" >&2 ;;
    esac
}
xlen() { rcli XLEN "rshub:s:$1"; }

# ---------------------------------------------------------------- the hub
note "duplicates on one node and across nodes"
r=$(hub_req A --topic "$T" --gen change --n 1 --header "X-Publish-Id: a:1")
expect_eq "a:1 is stored: 202 accepted" "$(status_of "$r") $(body_of "$r" | cut -d' ' -f1)" \
    "202 accepted"
A1=$(header_of "$r" X-Hub-Id)
CHAN=$(header_of "$r" X-Hub-Channel)
CHAN=${CHAN##*/channel/}
[ -n "$CHAN" ] || { bad "the channel of topic $T"; src_finish; }
expect_eq "no X-Hub-Duplicate on a stored publish" "$(header_of "$r" X-Hub-Duplicate)" ""

bg_ht sub sub --ws "${HUB_WS[A]}" --chan "$CHAN" --since 0 --idle 6 \
    --timeout 60 --save-data --out "$TMP/sub.log" --ready "$TMP/sub.ready"
wait_file "$TMP/sub.ready" 10 || bad "the subscriber connects"

r=$(hub_req A --topic "$T" --gen change --n 1 --header "X-Publish-Id: a:1")
expect_eq "a:1 again, same node: 202 with X-Hub-Duplicate: 1" \
    "$(status_of "$r") $(header_of "$r" X-Hub-Duplicate)" "202 1"
expect_eq "  body: duplicate ID of the stored one" "$(body_of "$r")" "duplicate $A1"
expect_eq "  X-Hub-Id: the stored one's" "$(header_of "$r" X-Hub-Id)" "$A1"
expect_eq "  X-Hub-Channel: the topic's channel" \
    "$(header_of "$r" X-Hub-Channel | sed 's,.*/channel/,,')" "$CHAN"
expect_eq "a:1 again, other node: a duplicate of the same id" \
    "$(pub B "$T" 1 a:1)" "202 1 duplicate $A1"
expect_eq "the backlog holds one entry" "$(xlen "$CHAN")" 1

A2=$(stored "a:2 on node B is stored" "$(pub B "$T" 2 a:2)")
expect_eq "a:1 (lower) to A: a duplicate of the entry that set a's highest SEQ" \
    "$(pub A "$T" 3 a:1)" "202 1 duplicate $A2"
expect_eq "a:2 with another body to A: still a duplicate" \
    "$(pub A "$T" 3 a:2)" "202 1 duplicate $A2"

note "two KEYs interleaved"
B1=$(stored "b:1 (a new KEY, SEQ below a's) is stored" "$(pub A "$T" 4 b:1)")
A3=$(stored "a:3 is stored" "$(pub B "$T" 5 a:3)")
expect_eq "b:1 again on B: duplicate of b's entry" "$(pub B "$T" 4 b:1)" \
    "202 1 duplicate $B1"
expect_eq "a:3 again on A: duplicate of a's entry" "$(pub A "$T" 5 a:3)" \
    "202 1 duplicate $A3"
stored "b:2 is stored" "$(pub A "$T" 6 b:2)" >/dev/null
expect_eq "a:2 again: duplicate of a:3's entry" "$(pub A "$T" 2 a:2)" \
    "202 1 duplicate $A3"
stored "SEQ 2^63-1 is stored" "$(pub A "$T" 8 "m:9223372036854775807")" >/dev/null
expect_eq "SEQ 2^63-2 after it is a duplicate" \
    "$(pub B "$T" 9 "m:9223372036854775806" | cut -d' ' -f1,2)" "202 1"
expect_eq "SEQs compare as numbers: 10 after 9 is stored" \
    "$(pub A "$T" 10 n:9 | cut -d' ' -f3) $(pub A "$T" 11 n:10 | cut -d' ' -f3)" \
    "accepted accepted"
expect_eq "without X-Publish-Id nothing changed: twice is stored twice" \
    "$(pub A "$T" 7 | cut -d' ' -f3) $(pub B "$T" 7 | cut -d' ' -f3)" \
    "accepted accepted"
expect_eq "the backlog holds the 9 stored (1 2 4 5 6 8 10 11 7 7: 10 entries)" \
    "$(xlen "$CHAN")" 10
expect_eq "Redis keeps a's highest SEQ with its entry's id" \
    "$(rcli HGET "rshub:pid:$CHAN" a)" "3 $A3"

note "malformed X-Publish-Id: 400, nothing stored"
LONG=$(printf 'k%.0s' $(seq 65))
for v in "a" "a:" ":1" "a:0" "a:-1" "a:+1" "a:1.0" "a:1x" "a b:1" "a/b:1" \
         "$LONG:1" "a:9223372036854775808" "a:1,a:2"; do
    r=$(hub_req A --topic "$T" --gen change --n 99 --header "X-Publish-Id: $v")
    if [ "$(status_of "$r")" = 400 ] &&
       body_of "$r" | grep -q '^error: X-Publish-Id'; then
        ok "400 for X-Publish-Id: $v ($(body_of "$r" | head -n 1))"
    else
        bad "400 for X-Publish-Id: $v" "$r"
    fi
done
r=$(curl -s -w '\n%{http_code}' --max-time 10 -X POST \
    -H 'Content-Type: application/xml' -H "Link: <$T>; rel=\"self\"" \
    -H 'X-Publish-Id: c:1' -H 'X-Publish-Id: c:2' \
    --data-binary "$(ht gen --n 98)" "http://127.0.0.1:$HA/hub")
expect_eq "two X-Publish-Id headers: 400" "$(printf '%s\n' "$r" | tail -n 1)" 400
expect_eq "  and why" "$(printf '%s\n' "$r" | head -n 1)" \
    "error: X-Publish-Id given more than once"
expect_eq "nothing stored by the refusals" "$(xlen "$CHAN")" 10

note "the per-topic cap (--publish-ids-per-topic 3 on A)"
r=$(hub_req A --topic "$T2" --gen change --n 1 --header "X-Publish-Id: k1:1")
C2=$(header_of "$r" X-Hub-Channel)
C2=${C2##*/channel/}
pub A "$T2" 2 k2:1 >/dev/null
pub A "$T2" 3 k3:1 >/dev/null
expect_eq "k1 used again (a duplicate)" "$(pub A "$T2" 1 k1:1 | cut -d' ' -f1,2)" "202 1"
expect_eq "k4: a fourth KEY is stored" "$(pub A "$T2" 4 k4:1 | cut -d' ' -f3)" accepted
expect_eq "the topic keeps 3 KEYs" "$(rcli HLEN "rshub:pid:$C2") $(rcli ZCARD "rshub:pidu:$C2")" "3 3"
expect_eq "k2, the least recently used, was forgotten: its resend is stored" \
    "$(pub A "$T2" 2 k2:1 | cut -d' ' -f3)" accepted
expect_eq "k1 is still known" "$(pub A "$T2" 1 k1:1 | cut -d' ' -f1,2)" "202 1"
expect_eq "k3 went for k2: its resend is stored" \
    "$(pub A "$T2" 3 k3:1 | cut -d' ' -f3)" accepted
expect_eq "the capped topic's backlog" "$(xlen "$C2")" 6

note "the subscriber saw each stored notification once"
bg_wait sub 30 || bad "the subscriber ends"
check "WebSocket: 10 frames, ids unique and increasing, documents 1 2 4 5 6 8 10 11 7 7" \
    "$PY" - "$TMP/sub.log" <<'EOF'
import json, re, sys
ids, ns = [], []
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("ev") != "msg":
        continue
    ids.append(tuple(int(x) for x in e["id"].split("-")))
    ns.append(int(re.search(r"/res/(\d+)/", e["data"]).group(1)))
assert ids == sorted(set(ids)), ids
assert ns == [1, 2, 4, 5, 6, 8, 10, 11, 7, 7], ns
EOF

# ------------------------------------------------------------------ rspub
note "rspub --publish-id"
ht gen --n 50 >"$TMP/r.xml"
out=$("$RSPUB" --hub "http://127.0.0.1:$HA/hub" --topic "$T" \
      --publish-id r:1 "$TMP/r.xml" 2>"$TMP/rspub.err")
rc=$?
expect_eq "the first publish: exit 0, no note" "$rc $(wc -c <"$TMP/rspub.err")" "0 0"
R1=$out
out=$("$RSPUB" --hub "http://127.0.0.1:$HB/hub" --topic "$T" \
      --publish-id ' r:01 ' "$TMP/r.xml" 2>"$TMP/rspub.err")
rc=$?
expect_eq "the resend: exit 0, the stored id on stdout" "$rc $out" "0 $R1"
check "  a note on stderr" grep -q "duplicate, not stored: the hub holds SEQ 1 or a higher one of KEY r (its highest stored as $R1)" \
    "$TMP/rspub.err"
out=$("$RSPUB" --hub "http://127.0.0.1:$HA/hub" --topic "$T" \
      --publish-id r:5 "$TMP/r.xml" 2>/dev/null)
R5=$out
"$RSPUB" --hub "http://127.0.0.1:$HA/hub" --topic "$T" \
    --publish-id r:3 "$TMP/r.xml" >/dev/null 2>"$TMP/rspub.err"
check "a lower SEQ is not said to be held: the highest's id, and that SEQs must increase" \
    grep -q "holds SEQ 3 or a higher one of KEY r (its highest stored as $R5).*must increase" \
    "$TMP/rspub.err"
"$RSPUB" --hub "http://127.0.0.1:$HA/hub" --topic "$T" --publish-id r:x \
    "$TMP/r.xml" >/dev/null 2>"$TMP/rspub.err"
rc=$?
expect_eq "a malformed --publish-id: exit 2" "$rc" 2
check "  saying why" grep -q "SEQ must be decimal digits only" "$TMP/rspub.err"
expect_eq "rspub stored once, then r:5 once" "$(xlen "$CHAN")" 12

note "metrics"
dupA=$(ht metrics --http "$HA" --get rshub_publish_duplicates_total)
dupB=$(ht metrics --http "$HB" --get rshub_publish_duplicates_total)
expect_eq "rshub_publish_duplicates_total: A 8, B 4 (rspub's resends)" "${dupA%.*} ${dupB%.*}" "8 4"
expect_eq "rshub_publish_rejected_total{reason=bad_publish_id} on A" \
    "$(ht metrics --http "$HA" --get 'rshub_publish_rejected_total{reason="bad_publish_id"}' | cut -d. -f1)" 14
acc=$(ht metrics --http "$HA" --get rshub_publish_accepted_total)
expect_eq "duplicates are not counted as accepted (A stored 15)" "${acc%.*}" 15

# --------------------------------------------------------------- rssource
# killed: a proxy in front of hub A forwards rssource's change POSTs but
# withholds the answer of one of them: the hub stored it, and rssource
# never learns. rssource is then killed -9 and started again with more
# changes waiting.

# proxy_start NAME SWALLOW FAKE413: a swallow-proxy in front of A for the
# change topic; sets PROXY_PORT.
proxy_start() {
    rm -f "$TMP/$1.proxy.ready"
    bg_ht "proxy$1" swallow-proxy --upstream "$HA" --match 'resourcesync/changes>' \
        --swallow "$2" --fake-413 "$3" --log "$TMP/$1.proxy.log" \
        --ready "$TMP/$1.proxy.ready"
    wait_file "$TMP/$1.proxy.ready" 10 || return 1
    PROXY_PORT=$(sed -n 's/.*"port": *\([0-9]*\).*/\1/p' "$TMP/$1.proxy.ready")
}
# proxy_line NAME ACTION [true]: the proxy logged a change POST with
# ACTION (413, swallow, forward) whose answer from the hub was a 202
# stored (a duplicate with true); prints its X-Publish-Id.
proxy_line() {
    "$PY" - "$TMP/$1.proxy.log" "$2" "${3:-}" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["action"] != sys.argv[2]:
        continue
    if sys.argv[2] == "413" or (e.get("status") == 202 and
                                str(e.get("dup")).lower() == (sys.argv[3] or "false")):
        print(e.get("pubid"))
        sys.exit(0)
sys.exit(1)
EOF
}
# all_seen SUBLOG BASE WANT: the subscriber has every change of WANT
all_seen() { [ "$(notified "$1" "$2" | sort -u)" = "$3" ]; }
# killed_run NAME FAKE413 NFIRST NMORE: the scenario; checks that each of
# the NFIRST + NMORE created files is stored and delivered once.
killed_run() {
    local name=$1 fake=$2 nfirst=$3 nmore=$4 d=$TMP/$1.dir i ch want
    mkdir -p "$d"
    printf 'base\n' >"$d/base.txt"
    proxy_start "$name" 1 "$fake" || { bad "$name: the proxy starts"; return; }
    local args=(--hub "http://127.0.0.1:$PROXY_PORT/hub" --retry-max 300ms
                --log-level debug)
    unset SRC_PORT
    src_start "$name" "$d" "${args[@]}" || { bad "$name: rssource starts"; return; }
    # shellcheck disable=SC2034 # read by src_start (lib/source.sh)
    SRC_PORT=${SRC_HTTP[$name]}
    wait_until 10 caplist_ws "$name" change-notification >/dev/null ||
        { bad "$name: the change channel is advertised"; return; }
    ch=$(caplist_ws "$name" change-notification)
    # the first start is the baseline: nothing to push. Stop, then make
    # the changes offline, so that the start-up scan records them in one
    # go and the first POST carries them all.
    src_stop "$name"
    for i in $(seq 1 "$nfirst"); do printf '%s\n' "$i" >"$d/f$i.txt"; done
    src_start "$name" "$d" "${args[@]}" ||
        { bad "$name: rssource starts again"; return; }
    if wait_until 20 proxy_line "$name" swallow >/dev/null; then
        ok "$name: the hub stored a POST (X-Publish-Id $(proxy_line "$name" swallow)) whose 202 rssource never read"
    else
        bad "$name: the hub stored a POST whose 202 was withheld" \
            "$(cat "$TMP/$name.proxy.log" 2>/dev/null; tail -n 20 "${SRC_LOG[$name]}")"
        return
    fi
    if [ "$fake" -gt 0 ]; then
        check "$name: before it, a 413 for the whole batch" proxy_line "$name" 413
    fi
    src_stop "$name" KILL
    for i in $(seq $((nfirst + 1)) $((nfirst + nmore))); do
        printf '%s\n' "$i" >"$d/f$i.txt"
    done
    src_start "$name" "$d" "${args[@]}" ||
        { bad "$name: rssource restarts after kill -9"; return; }
    if wait_until 20 proxy_line "$name" forward true >/dev/null; then
        ok "$name: the resend was answered as a duplicate (X-Publish-Id $(proxy_line "$name" forward true))"
    else
        bad "$name: the resend was answered as a duplicate" \
            "$(cat "$TMP/$name.proxy.log")"
    fi
    # since=0: the subscriber replays the whole backlog, so what it gets
    # is what the stream holds
    bg_ht "sub$name" sub --ws "${HUB_WS[A]}" --chan "$ch" --since 0 --idle 4 \
        --timeout 60 --save-data --out "$TMP/$name.sub"
    want=$(for i in $(seq 1 $((nfirst + nmore))); do echo "created f$i.txt"; done | sort)
    wait_until 20 all_seen "$TMP/$name.sub" "$(src_url "$name")" "$want"
    bg_wait "sub$name" 40 || bad "$name: the subscriber ends"
    expect_eq "$name: each change stored and delivered exactly once" \
        "$(notified "$TMP/$name.sub" "$(src_url "$name")" | sort)" "$want"
    src_stop "$name"
    stop_pid "${BG_PID[proxy$name]}"
    unset "BG_PID[proxy$name]"
}

note "rssource killed between the hub's 202 and its commit"
killed_run k1 0 3 2
note "... after a 413 halved the batch"
killed_run k2 1 6 2

src_finish
