#!/usr/bin/env bash
# test_sub_transport.sh - rssub choosing how changes come, again and again,
# not once at start-up (issue: a mirror that starts polling never went back
# to push). A static Source (lib/static_source.py, documents written here)
# whose Capability List is rewritten under a running `rssub run`, and an
# open-mode rshub on a private Redis that carries its topic:
#  1. the list offers no channel: rssub polls; it re-reads the list at
#     every poll interval with conditional GETs (304s);
#  2. the hub's WebSocket channel is added to the list: rssub takes it up
#     within one poll interval, from the position it holds (no baseline,
#     no gap pull), and a change that only push can bring arrives;
#  3. the channel goes from the list: back to polling;
#  4. it comes back, then the hub is killed: past --push-timeout rssub
#     polls; the hub restarted, push again with nothing lost;
#  5. rssource --hub and rssub started at once against an open-mode hub
#     that does not know the Source's topics yet: push within one poll
#     interval of the channel appearing;
#  6. the hub killed, then rssub's wall clock stepped back an hour
#     (libfaketime): past --push-timeout it still polls.
# Each transition is logged once with its reason and counted in
# rssub_transport_changes_total.
# shellcheck source-path=SCRIPTDIR disable=SC2317 # helpers run through check/wait_until
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"

for b in "$RSSUB" "$RSPUB" "$RSHUB" "$RSSOURCE"; do
    [ -x "$b" ] || { bad "built: $b"; sub_finish; }
done

logged() { grep -Eq -- "$2" "${SUB_LOG[$1]}"; }
# transitions NAME TO: how many times rssub NAME logged taking up TO.
transitions() { grep -Ec -- " to=$2( |$)" "${SUB_LOG[$1]}"; }

# shellcheck disable=SC2119 # no persistence wanted
redis_start || exit 1
SUB_READY_SECS=20
HUB_ARGS=(--open)
hub_start h "${HUB_ARGS[@]}" || exit 1
HUB=http://127.0.0.1:${HUB_HTTP[h]}/hub

WWW=$TMP/www
D=$WWW/data
M=$TMP/m/mirror
ST=$TMP/m.db
mkdir -p "$D" "$WWW/.well-known" "$TMP/m"
for i in 1 2 3 4 5 6; do printf 'static %s\n' "$i" >"$D/s$i.txt"; done

SS=$RS_SOURCE_DIR/tests/integration/lib/static_source.py
bg http "$PY" "$SS" serve --root "$WWW" --ready "$TMP/http.ready" \
    2>"$TMP/http.log"
check "static_source serves the static Source" wait_file "$TMP/http.ready" 10
SSPORT=$(sed -n 's/.*"port":\([0-9]*\).*/\1/p' "$TMP/http.ready")
B=http://127.0.0.1:$SSPORT
ssctl() { "$PY" "$SS" ctl --port "$SSPORT" "$@"; }
TOPIC=$B/changes

# docs [WS]: the Source Description, a Capability List (Resource List,
# Change List, the WebSub topic; the WebSocket channel WS when given),
# the Resource List of $D and an empty Change List from the start. Only
# the Capability List is rewritten later: a change made afterwards can
# then only come by push.
docs() {
    "$PY" - "$WWW" "$B" "$HUB" "${1:-}" <<'PYEOF'
import hashlib, os, sys
from datetime import datetime, timezone
www, base, hub, ws = sys.argv[1:5]
now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
NS = ('xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
      'xmlns:rs="http://www.openarchives.org/rs/terms/"')
def write(path, lns, md, urls, keep=False):
    full = os.path.join(www, path)
    if keep and os.path.exists(full):
        return
    body = "".join("<rs:ln %s/>" % l for l in lns) + md + "".join(urls)
    with open(full + ".tmp", "w") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n<urlset %s>%s'
                '</urlset>\n' % (NS, body))
    os.replace(full + ".tmp", full)
up = lambda p: 'rel="up" href="%s/%s"' % (base, p)
write(".well-known/resourcesync", [], '<rs:md capability="description"/>',
      ['<url><loc>%s/capabilitylist.xml</loc>'
       '<rs:md capability="capabilitylist"/></url>' % base], keep=True)
entries = ['<url><loc>%s/resourcelist.xml</loc>'
           '<rs:md capability="resourcelist"/></url>' % base,
           '<url><loc>%s/changelist.xml</loc>'
           '<rs:md capability="changelist"/></url>' % base,
           '<url><loc>%s/changes</loc>'
           '<rs:md capability="changelist-notification"/>'
           '<rs:ln rel="hub" href="%s"/></url>' % (base, hub)]
if ws:
    entries.append('<url><loc>%s</loc>'
                   '<rs:md capability="change-notification"/></url>' % ws)
write("capabilitylist.xml", [up(".well-known/resourcesync")],
      '<rs:md capability="capabilitylist"/>', entries)
urls = []
for f in sorted(os.listdir(os.path.join(www, "data"))):
    b = open(os.path.join(www, "data", f), "rb").read()
    urls.append('<url><loc>%s/data/%s</loc><rs:md hash="md5:%s" '
                'length="%d"/></url>' % (base, f, hashlib.md5(b).hexdigest(),
                                         len(b)))
write("resourcelist.xml", [up("capabilitylist.xml")],
      '<rs:md capability="resourcelist" at="%s"/>' % now, urls, keep=True)
write("changelist.xml", [up("capabilitylist.xml")],
      '<rs:md capability="changelist" from="%s"/>' % now, [], keep=True)
PYEOF
}

# notify CHANGE FILE: rspub a change notification for data/FILE.
notify() {
    local args=(--change "$1" --loc "$B/data/$2")
    if [ "$1" != deleted ]; then
        args+=(--length "$(stat -c %s "$D/$2")"
               --hash "md5:$(md5sum <"$D/$2" | cut -d' ' -f1)")
    fi
    "$RSPUB" --hub "$HUB" --topic "$TOPIC" --up "$B/capabilitylist.xml" \
        "${args[@]}" >/dev/null
}

# ws_of PORT TOPIC: the hub's WebSocket channel for TOPIC (GET /topics).
ws_of() {
    curl -sf "http://127.0.0.1:$1/topics" | "$PY" -c '
import json, sys
for t in json.load(sys.stdin):
    if t.get("topic") == sys.argv[1]:
        print(t.get("websocket") or "")' "$2"
}

caplist_304s() { ssctl counts | "$PY" -c '
import json, sys
print(json.load(sys.stdin).get("/capabilitylist.xml", {}).get("status", {}).get("304", 0))'; }
# Predicates for wait_until (a "$(...)" argument would be expanded once).
c304_ge() { [ "$(caplist_304s)" -ge "$1" ]; }
ws_ge() { [ "$(transitions t websocket)" -ge "$1" ]; }
up_is() { [ "$(sub_metric "$1" rssub_channels_up)" = "$2" ]; }

# ======================================== 1. no channel offered: polling
note "1. the Capability List offers no channel: polling"
docs
# The hub learns the topic (open mode: at its first publish).
check "rspub: a first notification makes the hub carry the topic" \
    notify updated s1.txt
WS=$(ws_of "${HUB_HTTP[h]}" "$TOPIC")
check "the hub has a WebSocket channel for the topic ($WS)" \
    test -n "$WS"
sub_ok() {
    local what=$1
    shift
    if sub_start "$@"; then ok "$what"; else
        bad "$what" "$(tail -n 30 "${SUB_LOG[$1]}")"; sub_finish; fi
}
sub_ok "rssub run --poll-interval 1s" t "$B/" "$M" "$ST" \
    --poll-interval 1s --push-timeout 2s
check "it polls: no channel it can use" \
    logged t 'msg="?polling change lists"? .*from=none to=poll reason="?no websocket channel offered; websub needs --callback-listen'
check "baseline: converged" converged 10 "$D" "$M/data"
check "it re-reads the Capability List with conditional GETs (304)" \
    wait_until 10 c304_ge 2
BASELINES=$(grep -Ec 'msg="?pulling resource list' "${SUB_LOG[t]}")

# ================================== 2. a channel appears: push, at once
note "2. the hub's WebSocket channel is added to the Capability List"
docs "$WS"
T1=$SECONDS
check "rssub takes the channel up within one poll interval" \
    wait_until 5 logged t 'msg="?following"? .*from=poll to=websocket reason="?channel connected'
note "switched after $((SECONDS - T1)) s"
printf 'pushed only\n' >"$D/pushed.txt"
check "rspub: created (not in any Change List: only push can bring it)" \
    notify created pushed.txt
check "it arrives by push" wait_until 5 test -f "$M/data/pushed.txt"
check "the channel is up (metrics)" \
    test "$(sub_metric t rssub_channels_up)" = 1
expect_eq "no second baseline (resource list pulls)" \
    "$(grep -Ec 'msg="?pulling resource list' "${SUB_LOG[t]}")" "$BASELINES"
check "no gap pull at the seam" \
    bash -c "! grep -Eq 'msg=\"?gap in the channel' '${SUB_LOG[t]}'"
expect_eq "taking up the channel was logged once" "$(transitions t websocket)" 1

# ================================= 3. the channel goes: polling again
note "3. the channel is taken out of the Capability List"
docs
# rssub reads the list again at every poll interval, whatever the
# transport (and at once on a framework notification about it).
check "rssub drops the channel and polls again" \
    wait_until 10 logged t 'msg="?polling change lists"? .*from=websocket to=poll'
check "the channel is closed (metrics)" wait_until 5 up_is t 0

# ======================= 4. back again; then the hub is down for a while
note "4. the channel comes back; then the hub is killed and restarted"
docs "$WS"
check "push again" wait_until 10 ws_ge 2
HP=${HUB_HTTP[h]}
HW=${HUB_WS[h]}
hub_kill9 h
check "past --push-timeout rssub polls" wait_until 10 \
    logged t 'msg="?polling change lists"? .*from=websocket to=poll reason="?channel down longer than --push-timeout'
hub_start h "${HUB_ARGS[@]}" --listen "127.0.0.1:$HP" --ws-listen "127.0.0.1:$HW" ||
    bad "rshub restarts on the same ports"
check "the hub back: push again" wait_until 15 ws_ge 3
printf 'after the restart\n' >"$D/after.txt"
check "rspub: created after the restart" notify created after.txt
check "it arrives by push" wait_until 5 test -f "$M/data/after.txt"
N=$(sub_metric t rssub_transport_changes_total 'to="websocket"')
check "metrics: rssub_transport_changes_total{to=\"websocket\"} = 3 (got ${N:-none})" \
    test "${N:-0}" = 3
N=$(sub_metric t rssub_transport_changes_total 'to="poll"')
check "metrics: rssub_transport_changes_total{to=\"poll\"} = 3 (got ${N:-none})" \
    test "${N:-0}" = 3
stopped_ok_t() {
    sub_stop t
    expect_eq "rssub: SIGTERM, exit 0" "$SUB_RC" 0
}
stopped_ok_t
check "the mirror equals the Source" same_tree "$D" "$M/data"

# ========== 5. rssource and rssub at once, the hub not knowing the topics
note "5. rssource --hub and rssub started at once (the hub new to the Source)"
D5=$TMP/src5
M5=$TMP/m5/mirror
mkdir -p "$D5" "$TMP/m5"
for i in 1 2 3; do printf 'five %s\n' "$i" >"$D5/f$i.txt"; done
if src_start r "$D5" --hub "$HUB" --resourcelist-refresh 0; then
    ok "rssource starts (--hub, open-mode hub)"
else
    bad "rssource starts"; sub_finish
fi
B5=$(src_url r)
sub_ok "rssub run right after it" r "$B5" "$M5" "$TMP/m5.db" \
    --poll-interval 2s
printf 'first change\n' >"$D5/first.txt"
check "on push within one poll interval of the channel appearing" \
    wait_until 10 up_is r 1
printf 'by push\n' >"$D5/second.txt"
check "converged" converged 10 "$D5" "$M5"
sub_stop r
expect_eq "rssub: SIGTERM, exit 0" "$SUB_RC" 0

# ========= 6. rssub's wall clock stepped back while the channel is down
note "6. rssub's wall clock stepped back an hour while the channel is down"
# --push-timeout is a duration: kept on the monotonic clock, a wall clock
# stepped back (NTP finding it fast) cannot stretch it to an hour more.
echo "+0" >"$TMP/back.rc"
faketime_wrap "$RSSUB" "$TMP/rssub-stepped" "$TMP/back.rc" ||
    { bad "libfaketime is installed"; sub_finish; }
REAL_RSSUB=$RSSUB
RSSUB=$TMP/rssub-stepped
M6=$TMP/m6/mirror
mkdir -p "$TMP/m6"
sub_ok "rssub run (its clock to be stepped)" k "$B/" "$M6" "$TMP/m6.db" \
    --poll-interval 1s --push-timeout 3s
RSSUB=$REAL_RSSUB
check "it follows the channel" wait_until 15 up_is k 1
hub_kill9 h
echo "-1h" >"$TMP/back.rc"    # libfaketime reads it within a second
check "past --push-timeout it polls, the step back notwithstanding" \
    wait_until 10 logged k 'msg="?polling change lists"? .*from=websocket to=poll reason="?channel down longer than --push-timeout'
sub_stop k
expect_eq "rssub: SIGTERM, exit 0" "$SUB_RC" 0

# ================ 7. rssub restarted while its Source answers nothing
note "7. rssub restarted while its Source is down (503 on every document)"
# A daemon whose mirror holds the Source's resources keeps trying to
# discover it, backing off: the Source may be down for a while. It used to
# exit 1 at once, and outside systemd the mirror stopped following.
ssctl rules '{"/": {"status": 503}, "/.well-known/resourcesync": {"status": 503},
              "/capabilitylist.xml": {"status": 503}}' >/dev/null
SUB_READY_SECS=4 sub_start t "$B/" "$M" "$ST" --poll-interval 1s \
    2>/dev/null && bad "rssub ready while its Source is down"
check "it stays up" sub_alive t
check "...saying discovery failed, and that it will try again" logged t \
    'msg="?discovery failed' 'msg="?will discover the source again"?'
ssctl rules '{}' >/dev/null
check "the Source back: rssub becomes ready" wait_file "$TMP/t.sub.ready" 30
sub_stop t
expect_eq "rssub: SIGTERM, exit 0" "$SUB_RC" 0
# A first start (an empty state) that cannot find its Source still ends:
# a wrong --source is told at once.
mkdir -p "$TMP/m7"
"$RSSUB" run --source "http://127.0.0.1:1/" --mirror "$TMP/m7/mirror" \
    --state "$TMP/m7.db" --log-format logfmt >"$TMP/m7.log" 2>&1 &
P7=$!
if pid_wait "$P7" 20; then
    expect_eq "a first start with an unreachable --source: exit 1" "$WAIT_RC" 1
else
    bad "a first start with an unreachable --source: still running after 20 s"
    kill -KILL "$P7" 2>/dev/null
fi

# ============ 8. polling stands in at --push-timeout, not a poll tick later
note "8. the hub killed: polling from --push-timeout on (--poll-interval 60s)"
# Judged only at channel events and poll ticks, the switch came up to a
# reconnect backoff (doubling to 30 s) or a poll interval late: 51 s with
# the defaults (30 s each) in the run that found it.
docs "$WS"
HP=${HUB_HTTP[h]:-$HP}
if [ -z "${HUB_PID[h]:-}" ]; then
    hub_start h "${HUB_ARGS[@]}" --listen "127.0.0.1:$HP" --ws-listen "127.0.0.1:$HW" ||
        bad "rshub starts"
fi
sub_ok "rssub run --poll-interval 60s --push-timeout 14s" t "$B/" "$M" "$ST" \
    --poll-interval 60s --push-timeout 14s
check "push" wait_until 10 logged t 'msg="?following"? .*to=websocket'
pat='msg="?polling change lists"? .*from=websocket to=poll reason="?channel down longer than --push-timeout'
n8=$(grep -Ec "$pat" "${SUB_LOG[t]}")
switched8() { [ "$(grep -Ec "$pat" "${SUB_LOG[t]}")" -gt "$n8" ]; }
hub_kill9 h
T8=$SECONDS
check "polling within --push-timeout + 3 s" wait_until 17 switched8
note "switched after $((SECONDS - T8)) s"
sub_stop t
sub_finish
