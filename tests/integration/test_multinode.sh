#!/usr/bin/env bash
# test_multinode.sh - three rshub nodes on one private Redis act as one
# hub (closed mode: [topic] sections with a publisher token):
#  (a) notifications published round-robin to the three nodes reach a
#      WebSocket subscriber of every node and a WebSub subscription made
#      on every node exactly once each, in order, byte for byte;
#  (c) kill -9 of the node that delivers the WebSub topic: the others
#      take its deliveries over (lease in Redis) and every notification
#      published after the kill arrives at least once, in order;
#  (b) rssource pushing to node 1, rssub following the change channel
#      on all three nodes (--channel x3): kill -9 of the node rssub is
#      connected to while files keep changing; rssub reconnects to
#      another node, resumes with since= (no gap pull), the mirror
#      converges and `rssub audit` exits 0.
#  (d) one channel URI whose host name has two addresses (two more nodes,
#      on 127.0.0.2 and 127.0.0.3; the name given by a hosts file bound
#      over /etc/hosts in rssub's own mount namespace): kill -9 of the
#      node rssub is on; it reconnects to the name's other address and
#      resumes, no gap pull, the mirror converges, audit exits 0.
# Real redis-server, rshub, rssource, rssub, callback server on loopback.
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
# shellcheck disable=SC2317 # helpers run through check/wait_until
# shellcheck source-path=SCRIPTDIR
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/websub.sh
. "$(dirname "$0")/lib/websub.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"
# shellcheck source=lib/chaos.sh
. "$(dirname "$0")/lib/chaos.sh"     # explain_diff

for b in "$RSSUB" "$RSSOURCE" "$RSHUB"; do
    [ -x "$b" ] || { bad "built: $b"; sub_finish; }
done

T=http://example.com/multi             # the topic of (a) and (c)
CT=http://example.com/src/changes      # rssource's topics, (b)
FT=http://example.com/src/framework
NODES=(N1 N2 N3)
N=45                                   # notifications in (a)
M=30                                   # notifications after the kill, (c)

umask 077
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TMP/token"
umask 022
TOK=$(cat "$TMP/token")
cat >"$TMP/hub.conf" <<EOF
[topic multi]
uri = $T
kind = change
token = $TOK

[topic changes]
uri = $CT
kind = change
token = $TOK

[topic framework]
uri = $FT
kind = framework
token = $TOK
EOF

# node_start NAME [RSHUB-ARGS...]: rshub NAME with the shared config; a
# restart keeps the ports it had.
declare -A NODE_HTTP NODE_WS
node_start() {
    local n=$1 ports=()
    shift
    [ -n "${NODE_HTTP[$n]:-}" ] &&
        ports=(--listen "127.0.0.1:${NODE_HTTP[$n]}" --ws-listen "127.0.0.1:${NODE_WS[$n]}")
    hub_start "$n" --config "$TMP/hub.conf" "${WS_HUB_ARGS[@]}" "${ports[@]}" \
        "$@" || return 1
    NODE_HTTP[$n]=${HUB_HTTP[$n]}
    NODE_WS[$n]=${HUB_WS[$n]}
}
# publish_rr FIRST COUNT OUT NODE...: COUNT notifications numbered from
# FIRST, one at a time, to the NODEs in turn; "ID FILE" per acknowledged
# one appended to OUT. Each is `callback_server.py publish --count 1` (a
# connection of its own), all run in one Python process: a process each
# cost a Python start a publish.
publish_rr() {
    local first=$1 count=$2 out=$3 k ports=()
    shift 3
    for k in "$@"; do ports+=("${NODE_HTTP[$k]}"); done
    "$PY" -c '
import importlib.util, sys
path, first, count, topic, tok, docs, out = sys.argv[1:8]
ports = sys.argv[8:]
spec = importlib.util.spec_from_file_location("callback_server", path)
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
for i in range(int(count)):
    sys.argv = [path, "publish", "--http", ports[i % len(ports)],
                "--topic", topic, "--token", tok, "--count", "1",
                "--start", str(int(first) + i), "--dir", docs, "--out", out]
    try:
        m.main()
    except SystemExit as e:
        if e.code not in (None, 0):
            sys.exit(e.code)
' "$CBS" "$first" "$count" "$T" "$TOK" "$TMP/docs" "$out.raw" "${ports[@]}" ||
        return 1
    cut -d' ' -f1,2 "$out.raw" >"$out"
}
# deliverer: the node whose GET /topics lists topic multi's WebSub
# subscriptions (the holder of rshub:lock:multi).
deliverer() {
    local k
    for k in "${NODES[@]}"; do
        [ -n "${HUB_PID[$k]:-}" ] || continue
        [ "$(ht topic --http "${NODE_HTTP[$k]}" --name multi --get websub 2>/dev/null)" \
            != "[]" ] && { echo "$k"; return 0; }
    done
    return 1
}

# shellcheck disable=SC2119 # no persistence wanted
redis_start || { bad "redis-server starts"; sub_finish; }
for k in "${NODES[@]}"; do
    node_start "$k" || { bad "rshub $k starts"; sub_finish; }
done
ok "three rshub nodes on one Redis"

# ====================================================== (a) exactly once
note "(a) $N notifications round-robin to three nodes ($((SECONDS - T0)) s)"
for k in "${NODES[@]}"; do
    bg_ht "ws$k" sub --ws "${NODE_WS[$k]}" --chan multi --count "$N" \
        --timeout 90 --out "$TMP/ws$k.jsonl" --ready "$TMP/ws$k.ready" \
        --rcvbuf 1048576 --save-data
    wait_file "$TMP/ws$k.ready" 10 || bad "WebSocket subscriber on $k connects"
    ht wait-subs --http "${NODE_HTTP[$k]}" --name multi --n 1 --timeout 10 ||
        bad "$k counts its WebSocket subscriber"
done
cb_start C || { bad "callback server starts"; sub_finish; }
for k in "${NODES[@]}"; do
    ws_subscribe_ok "a: WebSub subscription /cb/$k made on node $k" "$k" "$T" \
        multi C "/cb/$k"
done
check "a: $N notifications acknowledged, published round-robin to N1, N2, N3" \
    publish_rr 0 "$N" "$TMP/a.pairs" N1 N2 N3
expect_eq "a: $N ids acknowledged" "$(wc -l <"$TMP/a.pairs")" "$N"
for k in "${NODES[@]}"; do
    bg_wait "ws$k" 60 || bad "a: WebSocket subscriber on $k ends within 60 s"
    check "a: WebSocket subscriber on $k: every id exactly once, in order" \
        ht compare --sub "$TMP/ws$k.jsonl" --want "$TMP/a.pairs"
    check "a: WebSocket subscriber on $k: each is the published document, annotated" \
        ht verify --sub "$TMP/ws$k.jsonl" --pairs "$TMP/a.pairs"
done
for k in "${NODES[@]}"; do
    cbq wait C --path "/cb/$k" --method POST --n "$N" --timeout 30 >/dev/null
done
sleep 0.5       # a repeat, if any, would arrive now
for k in "${NODES[@]}"; do
    check "a: WebSub /cb/$k: every notification exactly once, in order, byte-identical" \
        cbq check C --path "/cb/$k" --pairs "$TMP/a.pairs" --topic "$T" \
        --ctype application/xml
done
check "a: one node delivers topic multi's WebSub subscriptions" \
    test "$(for k in "${NODES[@]}"; do
               ht topic --http "${NODE_HTTP[$k]}" --name multi --get websub
           done | grep -vc '^\[\]$')" = 1

# ====================================== (c) WebSub deliverer killed
note "(c) kill -9 of the node delivering WebSub ($((SECONDS - T0)) s)"
DK=$(deliverer)
if [ -z "$DK" ]; then
    bad "c: a node lists topic multi's WebSub subscriptions in GET /topics"
    DK=N1
fi
SURV=()
for k in "${NODES[@]}"; do [ "$k" = "$DK" ] || SURV+=("$k"); done
note "node $DK delivers; killing it, publishing on ${SURV[*]}"
hub_kill9 "$DK"
check "c: $M more acknowledged by ${SURV[*]}" \
    publish_rr "$N" "$M" "$TMP/c.pairs" "${SURV[@]}"
LAST=$(tail -n 1 "$TMP/c.pairs" | cut -d' ' -f1)
for k in "${NODES[@]}"; do
    cbq wait C --path "/cb/$k" --method POST --with-id "$LAST" --answered 204 \
        --timeout 45 >/dev/null
    # every notification, the ones before the kill too: at least once,
    # in order (repeats only around the kill, docs/protocol.md 5)
    check "c: WebSub /cb/$k: all $((N + M)) at least once, in order, after the takeover" \
        cbq check C --path "/cb/$k" --pairs "$TMP/a.pairs" --pairs "$TMP/c.pairs" \
        --at-least-once --topic "$T" --ctype application/xml
done
NEW=$(deliverer)
took_over() { [ -n "$NEW" ] && [ "$NEW" != "$DK" ]; }
check "c: a surviving node took the deliveries over (${NEW:-none})" took_over
hub_asan_check "$DK"
node_start "$DK" || bad "c: rshub $DK restarts on its ports"

# ============================== (b) rssub across a node kill
note "(b) rssub on three nodes, the connected one killed ($((SECONDS - T0)) s)"
D=$TMP/src
mkdir -p "$D/a" "$D/b" "$TMP/m"
for i in $(seq 60); do printf 'file %s\n' "$i" >"$D/a/f$i.txt"; done
for i in $(seq 20); do head -c $((i * 300)) /dev/urandom >"$D/b/f$i.bin"; done
if src_start s "$D" --hub "http://127.0.0.1:${NODE_HTTP[N1]}/hub" \
        --token-file "$TMP/token" --change-topic "$CT" --framework-topic "$FT" \
        --resourcelist-refresh 0 --retry-max 500ms; then
    ok "b: rssource starts, pushing to N1 (closed topics, token)"
else
    bad "b: rssource starts"
    sub_finish
fi
B=$(src_url s)
printf 'first\n' >"$D/first.txt"
check "b: the change channel is advertised" \
    wait_until 15 caplist_ws s change-notification
CH=$(caplist_ws s change-notification)
expect_eq "b: the change channel is the configured topic's" "$CH" changes
CHANS=()
for k in "${NODES[@]}"; do
    CHANS+=(--channel "ws://127.0.0.1:${NODE_WS[$k]}/channel/$CH")
done
SUB_READY_SECS=30
if sub_start r "$B" "$TMP/m/mirror" "$TMP/m.db" "${CHANS[@]}"; then
    ok "b: rssub run --channel on N1, N2, N3: first sync applied"
else
    bad "b: rssub run gets ready" "$(tail -n 20 "${SUB_LOG[r]}")"
fi
conv_pat='msg="?channel connected"? uri=ws://127\.0\.0\.1:[0-9]+/channel/changes'
check "b: the change channel is connected" \
    wait_until 10 grep -Eq "$conv_pat" "${SUB_LOG[r]}"
check "b: baseline: the mirror equals the Source" converged 20 "$D" "$TMP/m/mirror"
# node_of_port PORT: the node whose WebSocket port is PORT
node_of_port() {
    local k
    for k in "${NODES[@]}"; do
        [ "${NODE_WS[$k]}" = "$1" ] && { echo "$k"; return; }
    done
}
last_conn_port() {
    grep -E "$conv_pat" "${SUB_LOG[r]}" | tail -n 1 |
        sed -E 's/.*uri=ws:\/\/127\.0\.0\.1:([0-9]+)\/.*/\1/'
}
CONNS=$(grep -Ec "$conv_pat" "${SUB_LOG[r]}")
X=$(node_of_port "$(last_conn_port)")
note "rssub is connected to $X; churn, then kill -9 $X"
bg churn "$PY" -c "$CHURN_PY" "$D" 17 300 0.2 >"$TMP/churn.out"
sleep 2
hub_kill9 "$X"
reconnected() {
    [ "$(grep -Ec "$conv_pat" "${SUB_LOG[r]}")" -gt "$CONNS" ] &&
        [ "$(node_of_port "$(last_conn_port)")" != "$X" ]
}
check "b: rssub reconnects to another node" wait_until 15 reconnected
Y=$(node_of_port "$(last_conn_port)")
note "rssub reconnected to ${Y:-?}"
# rssource pushes to N1 only: when N1 was the one killed, it retries
# until N1 is back (restarted on its ports after rssub moved).
sleep 1
hub_asan_check "$X"
node_start "$X" || bad "b: rshub $X restarts on its ports"
bg_wait churn 90 || bad "b: churn ends within 90 s"
note "churn: $(cat "$TMP/churn.out")"
printf 'after the kill\n' >"$D/last.txt"
if converged 45 "$D" "$TMP/m/mirror" >"$TMP/conv.out" 2>&1; then
    ok "b: the mirror converges (diff -r)"
else
    bad "b: the mirror converges (diff -r)" \
        "$(head -n 8 "$TMP/conv.out"; echo "where the first differences got lost:"
           explain_diff "$D" "$TMP/m/mirror" "$TMP/s.state" rshub:s:changes "$TMP/m.db")"
fi
check "b: still connected to $Y (no further reconnect needed)" \
    test "$(node_of_port "$(last_conn_port)")" = "$Y"
GAPS=$(sub_metric r rssub_fallbacks_total 'reason="gap"')
expect_eq "b: no gap pull was needed (rssub_fallbacks_total{reason=\"gap\"})" \
    "${GAPS:-none}" 0
check "b: rssub's log has no gap and no 4001" \
    bash -c "! grep -Eq 'gap in the channel|code=4001' '${SUB_LOG[r]}'"
sub_stop r
expect_eq "b: rssub: SIGTERM, exit 0" "$SUB_RC" 0
sub_cmd audit audit "$B" "$TMP/m/mirror" "$TMP/m.db"
if [ "$SUB_RC" = 0 ]; then
    ok "b: rssub audit exits 0"
else
    bad "b: rssub audit exits $SUB_RC, want 0" \
        "$(head -n 20 "$TMP/audit.out"; tail -n 10 "$TMP/audit.log")"
fi

# =================================== (d) one channel name, several nodes
note "(d) a channel name with two addresses, the connected node killed ($((SECONDS - T0)) s)"
# The name needs two addresses without touching the machine's /etc/hosts:
# rssub runs in a mount namespace of its own (unshare, as root) where a
# hosts file of ours is bound over /etc/hosts. Two more nodes serve
# WebSocket on one port, on 127.0.0.2 and 127.0.0.3.
if ! unshare --mount true 2>/dev/null; then
    note "skipped: unshare --mount is not allowed here (needs root)"
    sub_finish
fi
node_start N4 --ws-listen 127.0.0.2:0 || bad "d: rshub N4 on 127.0.0.2"
P=${NODE_WS[N4]}
node_start N5 --ws-listen "127.0.0.3:$P" || bad "d: rshub N5 on 127.0.0.3:$P"
{ cat /etc/hosts; printf '127.0.0.2 hubs.test\n127.0.0.3 hubs.test\n'; } \
    >"$TMP/hosts"
# in_ns CMD...: CMD where hubs.test has both addresses (same PID: exec)
printf '#!/bin/sh\nexec unshare --mount sh -c %s "%s" "$@"\n' \
    "'mount --bind \"\$0\" /etc/hosts && exec \"\$@\"'" "$TMP/hosts" \
    >"$TMP/in_ns"
chmod +x "$TMP/in_ns"
printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$TMP/in_ns" "$RSSUB" >"$TMP/rssub-ns"
chmod +x "$TMP/rssub-ns"
expect_eq "d: inside, hubs.test has both addresses" \
    "$("$TMP/in_ns" getent ahostsv4 hubs.test | awk '{ print $1 }' | sort -u | xargs)" \
    "127.0.0.2 127.0.0.3"
mkdir -p "$TMP/m2"
if RSSUB=$TMP/rssub-ns sub_start r2 "$B" "$TMP/m2/mirror" "$TMP/m2.db" \
        --channel "ws://hubs.test:$P/channel/$CH"; then
    ok "d: rssub run --channel ws://hubs.test:$P/...: first sync applied"
else
    bad "d: rssub run gets ready" "$(tail -n 20 "${SUB_LOG[r2]}")"
fi
peer_pat="msg=\"?channel connected\"? uri=ws://hubs\\.test:$P/channel/$CH peer=127\\.0\\.0\\.[23]"
peers() { grep -Eo "$peer_pat" "${SUB_LOG[r2]}" | sed -E 's/.*peer=//'; }
check "d: connected by name, to one of its addresses" \
    wait_until 10 grep -Eq "$peer_pat" "${SUB_LOG[r2]}"
PX=$(peers | tail -n 1)
if [ "$PX" = 127.0.0.2 ]; then KX=N4 PO=127.0.0.3; else KX=N5 PO=127.0.0.2; fi
note "rssub r2 is on $PX ($KX); churn, then kill -9 $KX"
bg churn2 "$PY" -c "$CHURN_PY" "$D" 29 120 0.05 >"$TMP/churn2.out"
sleep 1
hub_kill9 "$KX"
moved() { [ "$(peers | tail -n 1)" = "$PO" ]; }
check "d: rssub reconnects to the name's other address ($PO)" \
    wait_until 15 moved
check "d: the lost connection is logged with the address it was to" \
    grep -Eq "msg=\"?channel closed\"? uri=ws://hubs\\.test:$P/channel/$CH peer=${PX//./\\.} " \
    "${SUB_LOG[r2]}"
hub_asan_check "$KX"
node_start "$KX" --ws-listen "$PX:$P" || bad "d: rshub $KX restarts on $PX:$P"
bg_wait churn2 60 || bad "d: churn ends within 60 s"
note "churn: $(cat "$TMP/churn2.out")"

# A node that accepts connections but never answers (stopped, hung) is
# the case a resolver's own try-the-next-address cannot help with: the
# name's first address is stopped and rssub starts afresh; its first
# connection times out, the next goes to the other address.
sub_stop r2
expect_eq "d: rssub stopped for the restart: exit 0" "$SUB_RC" 0
PF=$("$TMP/in_ns" getent ahostsv4 hubs.test | awk 'NR == 1 { print $1 }')
if [ "$PF" = 127.0.0.2 ]; then KF=N4 PG=127.0.0.3; else KF=N5 PG=127.0.0.2; fi
note "the name's first address is $PF ($KF): SIGSTOP $KF, restart rssub r2"
kill -STOP "${HUB_PID[$KF]}"
NCONN=$(peers | wc -l)
if RSSUB=$TMP/rssub-ns sub_start r2 "$B" "$TMP/m2/mirror" "$TMP/m2.db" \
        --channel "ws://hubs.test:$P/channel/$CH"; then
    ok "d: rssub r2 restarts"
else
    bad "d: rssub r2 restarts" "$(tail -n 20 "${SUB_LOG[r2]}")"
fi
moved_on() { [ "$(peers | wc -l)" -gt "$NCONN" ] && [ "$(peers | tail -n 1)" = "$PG" ]; }
check "d: past the stopped node, to $PG, within one connect timeout" \
    wait_until 20 moved_on
check "d: the stopped node's address timed out" \
    grep -Eq "msg=\"?channel closed\"? uri=ws://hubs\\.test:$P/channel/$CH peer=${PF//./\\.} code=1006 reason=\"connect timeout\"" \
    "${SUB_LOG[r2]}"
kill -CONT "${HUB_PID[$KF]}"
printf 'after the second kill\n' >"$D/last2.txt"
if converged 45 "$D" "$TMP/m2/mirror" >"$TMP/conv2.out" 2>&1; then
    ok "d: the mirror converges (diff -r)"
else
    bad "d: the mirror converges (diff -r)" "$(head -n 8 "$TMP/conv2.out")"
fi
GAPS=$(sub_metric r2 rssub_fallbacks_total 'reason="gap"')
expect_eq "d: no gap pull was needed" "${GAPS:-none}" 0
sub_stop r2
expect_eq "d: rssub: SIGTERM, exit 0" "$SUB_RC" 0
sub_cmd audit2 audit "$B" "$TMP/m2/mirror" "$TMP/m2.db"
expect_eq "d: rssub audit exits 0" "$SUB_RC" 0
sub_finish
