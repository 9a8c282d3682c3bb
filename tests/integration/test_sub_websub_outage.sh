#!/usr/bin/env bash
# test_sub_websub_outage.sh - rssub following by WebSub when things break
# (rssource --hub, an open-mode rshub, `rssub run --transport websub`):
#  1. rssub killed -9 and started again on the same state: it subscribes
#     with the callback it had (kept in the state), so the hub holds one
#     subscription for it, not one per crash; a POST to a callback path
#     it does not know is answered 410 (the hub drops such leftovers);
#  2. the hub killed: past --push-timeout rssub polls the Change Lists (a
#     file created meanwhile arrives), and says so in /status.json and in
#     `rssub status`; the hub back on its port: WebSub again, and a change
#     comes by push.
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
# shellcheck source-path=SCRIPTDIR disable=SC2317 # helpers run through check/wait_until
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"
# shellcheck source=lib/websub.sh
. "$(dirname "$0")/lib/websub.sh"

# shellcheck disable=SC2119 # no persistence wanted
redis_start || { bad "redis-server starts"; sub_finish; }
# a restarted hub (a new node) waits out the dead one's delivery lock
HUB_ARGS=(--open "${WS_HUB_ARGS[@]}" --delivery-lock-ttl 1s)
hub_start h "${HUB_ARGS[@]}" || { bad "rshub starts"; sub_finish; }
HP=${HUB_HTTP[h]}
HW=${HUB_WS[h]}
D=$TMP/src
M=$TMP/mirror
ST=$TMP/w.state
mkdir -p "$D"
for i in 1 2 3; do echo "file $i" >"$D/f$i"; done
src_start s "$D" --hub "http://127.0.0.1:$HP/hub" --resourcelist-refresh 0 ||
    { bad "rssource starts"; sub_finish; }
B=$(src_url s)
# a fixed callback port: a restart must give the hub the same callback URL
CBP=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
SUB_ARGS=(--transport websub --callback-listen "127.0.0.1:$CBP"
          --poll-interval 1s --push-timeout 2s)
start_w() {
    if sub_start w "$B" "$M" "$ST" "${SUB_ARGS[@]}"; then ok "$1"; else
        bad "$1" "$(tail -n 20 "${SUB_LOG[w]}")"; sub_finish; fi
}
logged() { grep -Ec -- "$1" "${SUB_LOG[w]}"; }
logged_ge() { [ "$(logged "$1")" -ge "$2" ]; }
ACTIVE='msg="?websub subscription"? .*state=active'
# subs_of_ours: the subscriptions the hub lists with our callback listener
subs_of_ours() {
    curl -sf "http://127.0.0.1:$HP/topics" | "$PY" -c '
import json, sys
print(sum(1 for t in json.load(sys.stdin) for w in (t.get("websub") or [])
          if w.get("callback", "").startswith(sys.argv[1])))' \
        "http://127.0.0.1:$CBP/"
}
subs_are() { [ "$(subs_of_ours)" = "$1" ]; }
# status_json KEY: lists[0][KEY] of rssub's /status.json
status_json() {
    curl -sf "http://127.0.0.1:${SUB_METRICS[w]}/status.json" |
        "$PY" -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["lists"][0][sys.argv[1]]))' "$1"
}
status_is() { [ "$(status_json "$1")" = "$2" ]; }
status_cmd_says() {
    sub_cmd st status "$B" "$M" "$ST"
    grep -Eq -- "$1" "$TMP/st.out"
}

# ================================================ 1. killed and restarted
note "1. rssub killed -9 and started again: the same subscription"
start_w "rssub run --transport websub"
# rssource offers two topics (changes, framework): two subscriptions
check "its subscriptions are active" wait_until 10 logged_ge "$ACTIVE" 2
check "the hub holds two subscriptions of ours" wait_until 5 subs_are 2
sub_stop w KILL
start_w "rssub run again on the same state"
check "its subscriptions are active again" wait_until 10 logged_ge "$ACTIVE" 4
check "the hub still holds two subscriptions of ours (got $(subs_of_ours))" \
    subs_are 2
CODE=$(curl -s -o /dev/null -w '%{http_code}' -X POST --data x \
    "http://127.0.0.1:$CBP/cb/0123456789abcdef0123456789abcdef")
expect_eq "a POST to a callback path it does not know: 410 Gone" "$CODE" 410
echo "pushed" >"$D/p1"
check "a change comes by push to the restarted rssub" \
    wait_until 10 test -f "$M/p1"
check "following by websub" \
    wait_until 5 status_cmd_says 'follow .* transport=websub push=ok'

# ===================================================== 2. the hub is down
note "2. the hub killed: polling within --push-timeout; back: WebSub again"
hub_kill9 h
T0=$SECONDS
POLL='msg="?polling change lists"? .*from=websub to=poll'
check "rssub polls past --push-timeout (2 s)" wait_until 8 logged_ge "$POLL" 1
note "switched after $((SECONDS - T0)) s"
echo "while the hub is down" >"$D/down1"
check "a change made while the hub is down arrives (polled)" \
    wait_until 8 test -f "$M/down1"
check "/status.json: websub_failing" status_is websub_failing true
check "/status.json: transport poll" status_is transport '"poll"'
check "/status.json: push failing" status_is push '"failing"'
check "rssub status: polling, push failing, and why" \
    status_cmd_says 'follow .* transport=poll push=failing .*reason=".*websub unreachable'
hub_start h "${HUB_ARGS[@]}" --listen "127.0.0.1:$HP" --ws-listen "127.0.0.1:$HW" ||
    { bad "rshub restarts on its port"; sub_finish; }
check "the hub back: following by websub again" \
    wait_until 10 logged_ge 'msg="?following"? .*from=poll to=websub' 1
check "/status.json: push ok" status_is push '"ok"'
echo "after the hub came back" >"$D/up1"
check "a change made after it came back arrives" wait_until 10 test -f "$M/up1"
check "the mirror equals the Source" converged 5 "$D" "$M"
sub_stop w
expect_eq "rssub: SIGTERM, exit 0" "$SUB_RC" 0
check "rssub status: the daemon stopped" status_cmd_says '^daemon stopped'
sub_finish
