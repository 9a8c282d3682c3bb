#!/usr/bin/env bash
# test_bridge_faults.sh - rsbridge under faults (issue 14), real processes
# on loopback: redis-server, rshub, one rsbridge following three
# pull-only Sources (lib/bridge_source.py: A a Change List Index, B a
# trailing-window ?page=N Change List regenerated per request, C a
# Resource List index only), one mirror of each run as a user runs it,
# and a WebSocket recorder on each Source's channels. While the Sources
# keep changing at random:
#   - kill -9 of the bridge mid-stream, three times, and a restart;
#   - kill -9 after the hub accepted a notification and before the bridge
#     read the answer (a proxy holds it): the restart sends it again and
#     the hub takes it for the duplicate it is (X-Publish-Id);
#   - the hub down for a while (the outbox queues), a kill -9 of the
#     bridge meanwhile, then the hub back;
#   - Sources A and C slow (one request in flight), then answering 503
#     with Retry-After, then garbage, an HTML error page, a truncated
#     document (each until the bridge met it, then correctly until it
#     polled well again), while B goes on being bridged;
#   - history rewritten: A's old entries dropped, reordered, and
#     never-seen entries backdated among them; B's window shrunk: the
#     mirrors asked to reconcile (a Resource List "created"); then a
#     rewrite at A that changes a file behind the mirrors' back, the ask
#     held by the list's minute, a kill -9 meanwhile, the ask sent when
#     the minute is up and the mirror reconciling to the Source.
# In every case: nothing lost, nothing twice, nothing false (the recorded
# streams against the Sources' journals, the mirrors against the
# Sources, rssub audit), framework notifications for a rewritten
# history, and the bridge's politeness in the Sources' access logs (one
# request in flight per Source, Retry-After honoured, --interval the
# floor). Skips (exit 0) while bridge/rsbridge is not built.
# shellcheck disable=SC2317 # helpers run through check/wait_until
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"
# shellcheck source=lib/bridge.sh
. "$(dirname "$0")/lib/bridge.sh"
bridge_require

INTERVAL=1
now() { date +%s.%N; }

note "hub, three Sources, rsbridge, three mirrors, recorders"
redis_start || exit 1
hub_start h --open || exit 1
HP=${HUB_HTTP[h]}
HW=${HUB_WS[h]}
if ! { bsrc_start a A --seed 404 --initial 20 --rotate 12 &&
       bsrc_start b B --seed 505 --initial 20 --page-size 5 &&
       bsrc_start c C --seed 606 --initial 20 --rl-parts 2; }; then
    bad "the three Sources start"
    bridge_finish
fi
# The bridge publishes through a proxy that can hold the hub's answers.
bg proxy "$PY" "$HUBTOOL" holdproxy --to "$HP" --ready "$TMP/proxy.ready" \
    --hold "$TMP/hold" --held "$TMP/held"
wait_file "$TMP/proxy.ready" 10 || { bad "the proxy starts"; bridge_finish; }
PROXY=$(sed -n 's/.*"port":\([0-9]*\).*/\1/p' "$TMP/proxy.ready")
BR_HUB_URL=http://127.0.0.1:$PROXY/hub
BR_ARGS=(--source "$(bsrc_url a)" --source "$(bsrc_url b)" --source "$(bsrc_url c)"
         --interval "${INTERVAL}s")
bridge_start br "${BR_ARGS[@]}" || { bad "rsbridge starts"; bridge_finish; }
for s in a b c; do
    record "r$s" br $s change || bad "$s: a recorder on the change channel"
    record "f$s" br $s framework || bad "$s: a recorder on the framework channel"
    mirror_start "m$s" "$(bridged br $s)" "$TMP/m$s.mirror"
done
for s in a b c; do
    check "$s: the mirror follows the hub's channel" wait_until 40 mirror_following "m$s"
    check "$s: the mirror holds the Source" wait_until 40 mirror_same $s "$TMP/m$s.mirror"
done

# streams_ok WHAT: the recorded streams so far: A and B each change once,
# in order, none of the backdated entries; C replayed on its first
# Resource List ends in the Source's state, nothing false.
streams_ok() {
    local s
    for s in a b; do
        check "$1: $s: every change published once, in order, nothing false" \
            wait_until 30 bsx check-stream $s --sub "$TMP/r$s.rec.jsonl" \
            --bridged "$(bridged br $s)" --mode exact
    done
    check "$1: c: the stream replayed ends in the Source's state, nothing false" \
        wait_until 30 bsx check-stream c --sub "$TMP/rc.rec.jsonl" \
        --bridged "$(bridged br c)" --mode replay --final
}
# mirrors_ok WHAT: the three mirrors hold their Sources.
mirrors_ok() {
    local s
    for s in a b c; do
        check "$1: $s: the mirror converges" wait_until 40 mirror_same $s "$TMP/m$s.mirror"
    done
}
wait_autos() {
    local s
    for s in "$@"; do bs "$s" wait-auto 120 || bad "$s: the changes were made"; done
}

# ------------------------------------------------------------- kill -9

note "kill -9 of the bridge mid-stream, three times"
bs a auto '{"batches":24,"every":0.4,"min":1,"max":4,"seed":1}'
bs b auto '{"batches":24,"every":0.4,"min":1,"max":4,"seed":2}'
bs c auto '{"batches":10,"every":1.0,"min":1,"max":4,"seed":3}'
for pause in 1.7 0.9 2.3; do
    sleep "$pause"
    bridge_kill9 br
    sleep 0.5
    if bridge_start br "${BR_ARGS[@]}"; then
        ok "rsbridge restarts on its state after kill -9"
    else
        bad "rsbridge restarts on its state after kill -9"
        bridge_finish
    fi
done
wait_autos a b c
streams_ok "after kill -9"
mirrors_ok "after kill -9"

note "kill -9 after the hub accepted a notification, before the bridge read the answer"
rm -f "$TMP/held"
touch "$TMP/hold"
bs a change 3 >/dev/null
if wait_file "$TMP/held" 20; then
    ok "the hub answered a publish, held by the proxy"
else
    bad "the hub answered a publish, held by the proxy"
fi
bridge_kill9 br
rm -f "$TMP/hold"
bridge_start br "${BR_ARGS[@]}" || { bad "rsbridge restarts"; bridge_finish; }
resent_dup() { tail -c +$((BR_LOGOFF[br] + 1)) "${BR_LOG[br]}" | grep -q 'duplicate=1'; }
check "the restarted bridge sends it again; the hub says duplicate (X-Publish-Id)" \
    wait_until 20 resent_dup
streams_ok "after a kill -9 between the hub's answer and the commit"

# ------------------------------------------------------------- hub down

note "the hub down for a while (a kill -9 of the bridge meanwhile), then back"
hub_stop h
bs a auto '{"batches":8,"every":0.5,"min":1,"max":3,"seed":4}'
bs b auto '{"batches":8,"every":0.5,"min":1,"max":3,"seed":5}'
pending_some() { [ "$(sources_field br a pending)" != 0 ]; }
check "hub down: changes wait in the outbox (/sources pending)" wait_until 15 pending_some
check "hub down: the bridge still serves /sources" \
    curl -sf --max-time 10 -o /dev/null "$(bridge_url br sources)"
bridge_kill9 br
if bridge_start br "${BR_ARGS[@]}"; then
    ok "hub down: rsbridge restarts after kill -9, its outbox kept"
else
    bad "hub down: rsbridge restarts after kill -9, its outbox kept"
    bridge_finish
fi
check "hub down: the outbox kept what was pending" wait_until 10 pending_some
T_RESTART=$(now)
wait_autos a b
sleep 1
if hub_start h --open --listen "127.0.0.1:$HP" --ws-listen "127.0.0.1:$HW"; then
    ok "the hub is back on its ports"
else
    bad "the hub is back on its ports"
    bridge_finish
fi
for s in a b; do
    check "hub back: $s: the outbox drains" wait_until 30 bridge_idle br $s
done
streams_ok "hub back"
mirrors_ok "hub back"

# --------------------------------------------------------- the Source ill

note "A and C slow, then 503 with Retry-After, garbage, HTML, truncated, then well; B goes on"
T_SLOW=$(now)
for s in a c; do bs $s fault '{"mode":"delay","secs":1.5,"ua":"rsbridge"}'; done
bs a auto '{"batches":4,"every":1.0,"min":1,"max":2,"seed":6}'
sleep 5
wait_autos a
T_F0=$(now)
for s in a c; do
    bs $s fault '{"mode":"status","status":503,"retry_after":3,"ua":"rsbridge"}'
done
E0=$(sources_field br a errors)
EC0=$(sources_field br c errors)
bs a auto '{"batches":20,"every":0.6,"min":1,"max":3,"seed":7}'
bs b auto '{"batches":20,"every":0.6,"min":1,"max":3,"seed":8}'
bs c auto '{"batches":6,"every":2.0,"min":1,"max":3,"seed":9}'
P0=$(sources_field br b changes_published)
for s in a c; do
    check "503: the bridge met it at $s" wait_until 30 bs $s met status "$T_F0"
done
errors_grew() { [ "$(sources_field br a errors)" -gt "$E0" ]; }
check "503: the bridge counts the Source's errors (/sources errors)" wait_until 15 errors_grew
# a retry after the Retry-After met the 503 again at each (what the
# politeness checks below measure between two 503s)
errors_grew2() { [ "$(sources_field br "$1" errors)" -gt "$(($2 + 1))" ]; }
check "503: the bridge retried A after its Retry-After, met it again" \
    wait_until 40 errors_grew2 a "$E0"
check "503: the bridge retried C after its Retry-After, met it again" \
    wait_until 40 errors_grew2 c "$EC0"
check "503: /sources says the last error" \
    bash -c "[ \"\$1\" != null ]" _ "$(sources_field br a last_error)"
b_going() { [ "$(sources_field br b changes_published)" -gt "$P0" ]; }
check "503 at A and C: B's changes are still published" wait_until 20 b_going
# then the truth until it polled well, as after each fault below: a
# success resets the backoff the 503s grew (else the next fault is met,
# and then left, only after a backoff of half a minute)
t=$(now)
for s in a c; do bs $s fault '{"mode":"none"}'; done
for s in a c; do
    check "503 over: the bridge reads $s well again" wait_until 70 bs $s met ok "$t"
done
# each fault until the bridge met it, then the truth until it polled well
# (a success resets its backoff, so each fault is met within seconds).
# Met once: answered to one request (count 1), as a second failed
# rediscovery within one poll (the fault not yet lifted on a loaded
# machine) would read the Source's /, /.well-known/resourcesync and
# robots.txt twice between two reads of the entry document, which the
# politeness checks below take for one poll reading them twice.
for mode in garbage html truncated; do
    t=$(now)
    for s in a c; do
        bs $s fault "{\"mode\":\"$mode\",\"ua\":\"rsbridge\",\"count\":1}"
    done
    for s in a c; do
        check "$mode: the bridge met it at $s" wait_until 40 bs $s met "$mode" "$t"
    done
    t=$(now)
    for s in a c; do bs $s fault '{"mode":"none"}'; done
    for s in a c; do
        check "$mode over: the bridge reads $s well again" wait_until 70 bs $s met ok "$t"
    done
done
T_F1=$(now)
wait_autos a b c
streams_ok "after the faults"
mirrors_ok "after the faults"
check "slow Source: one request in flight" \
    bsx politeness a --interval "$INTERVAL" --t0 "$T_SLOW" --t1 "$T_F0"
check "503: Retry-After honoured, one request in flight, --interval the floor (A)" \
    bsx politeness a --interval "$INTERVAL" --t0 "$T_F0" --t1 "$T_F1"
check "503: the same for C" \
    bsx politeness c --interval "$INTERVAL" --t0 "$T_F0" --t1 "$T_F1"
ra_seen() {
    bsx politeness a --interval "$INTERVAL" --t0 "$T_F0" --t1 "$T_F1" |
        "$PY" -c 'import json,sys; r=json.loads(sys.stdin.readline()); sys.exit(0 if r["retry_after"] > 0 else 1)'
}
check "503: the bridge met the Retry-After answers" ra_seen

# ------------------------------------------------------ history rewritten

# reconciles MIRROR: how many times rssub MIRROR read its Resource List;
# reconciled_since MIRROR N: more than N times.
reconciles() { grep -c 'resource list read' "${SUB_LOG[$1]}"; }
reconciled_since() { [ "$(reconciles "$1")" -gt "$2" ]; }

note "history rewritten: A's old entries dropped, reordered, backdated; B's window shrunk"
RC_A0=$(reconciles ma)
T_RW=$(now)
bs a rewrite '{"mode":"drop","n":3}'
bs a rewrite '{"mode":"reorder"}'
bs a rewrite '{"mode":"backdate","n":2}'
bs b rewrite '{"mode":"shrink","secs":4}'
sleep 3
bs a auto '{"batches":6,"every":0.6,"min":1,"max":3,"seed":10}'
bs b auto '{"batches":6,"every":0.6,"min":1,"max":3,"seed":11}'
wait_autos a b
# fw_after RECORDER T CAPABILITY CHANGE [LOC]: a framework notification
# received after T has an entry of CAPABILITY and CHANGE (about LOC).
fw_after() {
    "$PY" - "$TMP/$1.rec.jsonl" "$2" "$3" "$4" "${5:-}" <<'EOF'
import json, os, sys, xml.etree.ElementTree as ET
SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
RS = "{http://www.openarchives.org/rs/terms/}"
t0, cap, change, loc = float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
seen = []
for line in open(sys.argv[1]):
    ev = json.loads(line)
    if ev.get("ev") != "msg" or ev["t"] < t0:
        continue
    for u in ET.fromstring(ev["data"].encode()).findall(SM + "url"):
        md = u.find(RS + "md").attrib
        seen.append((md.get("capability"), md.get("change"), u.findtext(SM + "loc")))
        if md.get("capability") == cap and md.get("change") == change and \
                loc in ("", u.findtext(SM + "loc")):
            if os.environ.get("FW_PRINT"):
                print(ev["t"])
            sys.exit(0)
sys.exit("not among %r" % seen[:10])
EOF
}
RL_A="$(bsrc_url a)resourcesync/resourcelist.xml"
RL_B="$(bsrc_url b)resourcesync/resourcelist.xml"
check "rewritten history at A: a framework notification (changelist updated)" \
    wait_until 15 fw_after fa "$T_RW" changelist updated
check "shrunk window at B: a framework notification (changelist updated)" \
    wait_until 15 fw_after fb "$T_RW" changelist updated
# rssub takes a changelist notification for "pull the Change Lists", and
# not even that while its WebSocket channel is up: the bridge asks its
# mirrors to reconcile the spec's way, with the Resource List "created"
# (A's Resource List is never regenerated: its minute is free, the ask
# goes at once; B's is, on every change, and told when its minute is up:
# its ask may wait for it, and is checked below, after that minute)
check "rewritten history at A: mirrors asked to reconcile (resourcelist created)" \
    wait_until 15 fw_after fa "$T_RW" resourcelist created "$RL_A"
check "A's mirror reconciled" wait_until 30 reconciled_since ma "$RC_A0"
T_ASK1=$(FW_PRINT=1 fw_after fa "$T_RW" resourcelist created "$RL_A")

# A rewrite that changes a file: the change is never published (it is
# older than what was), so a mirror following the channel holds the old
# content until it reconciles. Made within a minute of the notification
# above, the bridge's ask waits for the list's minute; a kill -9 meanwhile
# does not lose it (the state holds it).
note "history rewritten with a real change at A: the mirror reconciles (the ask waits its minute, across a kill -9)"
RC_A1=$(reconciles ma)
T_BC=$(now)
LOGOFF_BC=$(stat -c %s "${BR_LOG[br]}")
bs a rewrite '{"mode":"backchange","n":1}'
held() {
    tail -c +$((LOGOFF_BC + 1)) "${BR_LOG[br]}" |
        grep -q 'waits for the resource list.s minute'
}
check "the ask to reconcile waits for the list's minute" wait_until 20 held
if mirror_same a "$TMP/ma.mirror" >/dev/null 2>&1; then
    bad "A's mirror does not have the rewritten file (nothing published it)"
else
    ok "A's mirror does not have the rewritten file (nothing published it)"
fi
T_KILL=$(now)
bridge_kill9 br
bridge_start br "${BR_ARGS[@]}" || { bad "rsbridge restarts"; bridge_finish; }
T_RESTART2=$(now)
check "after kill -9 and restart, the ask goes out when the minute is up" \
    wait_until 90 fw_after fa "$T_BC" resourcelist created "$RL_A"
T_ASK2=$(FW_PRINT=1 fw_after fa "$T_BC" resourcelist created "$RL_A")
check "... not before the list's minute was up (the last ask at $T_ASK1, this one at $T_ASK2)" \
    "$PY" -c 'import sys; sys.exit(float(sys.argv[2]) - float(sys.argv[1]) < 59.5)' \
    "${T_ASK1:-0}" "${T_ASK2:-0}"
check "A's mirror reconciles" wait_until 60 reconciled_since ma "$RC_A1"
check "A's mirror holds the Source again" wait_until 30 mirror_same a "$TMP/ma.mirror"
check "shrunk window at B: mirrors asked to reconcile (resourcelist created)" \
    wait_until 60 fw_after fb "$T_RW" resourcelist created "$RL_B"
streams_ok "after the rewrites"
mirrors_ok "after the rewrites"
# (the bridge's politeness log is in memory: a start reads at once)
for s in a b; do
    check "$s: the bridge's requests from its restart with the hub down to the kill -9 of the rewrites: one in flight, --interval the floor, Retry-After" \
        bsx politeness $s --interval "$INTERVAL" --t0 "$T_RESTART" --t1 "$T_KILL"
    check "$s: the same after its last restart" \
        bsx politeness $s --interval "$INTERVAL" --t0 "$T_RESTART2"
done

note "the end: mirrors audit clean"
for s in a b c; do
    sub_stop "m$s"
    expect_eq "$s: the mirror exits 0 on SIGTERM" "$SUB_RC" 0
    check "$s: the mirror audits clean" mirror_audit "m$s" "$(bridged br $s)" "$TMP/m$s.mirror"
done
for s in a b c; do record_stop "r$s"; record_stop "f$s"; done
bridge_finish
