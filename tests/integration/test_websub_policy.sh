#!/usr/bin/env bash
# test_websub_policy.sh - who may subscribe where (docs/protocol.md 5): a
# callback on a denied network gets 403 and never a request (not even
# hub.mode=denied); --open still denies loopback unless allowed; an open
# hub with loopback allowed takes subscriptions to topics it has not seen
# and delivers to them; --max-subs-per-topic and --max-subs-per-host give
# 429 and nothing sent to the callback, a re-subscribe is not a new
# subscription, an unsubscribe frees a slot. Real redis-server and programmable callback servers on loopback.
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/websub.sh
. "$(dirname "$0")/lib/websub.sh"

U=http://example.com/dataset1

redis_start || { bad "redis-server starts"; finish; }
websub_skip_if_unimplemented

cb_start C || { bad "callback server starts"; finish; }
cat >"$TMP/hub.conf" <<EOF
[topic t]
uri = $U/t

[topic capa]
uri = $U/capa

[topic capb]
uri = $U/capb
EOF

# reject HUB NAME STATUS PARAMS...: the answer is STATUS with one line
reject() {
    local hub=$1 name=$2 want=$3 r st
    shift 3
    r=$(ws_form "$hub" "$@")
    st=$(status_of "$r")
    if [ "$st" = "$want" ] && one_line_body "$r"; then
        ok "$name"
    else
        bad "$name: status $st, want $want with a one-line body" "$r"
    fi
}
no_request() {   # no_request NAME PREFIX: nothing reached paths under PREFIX
    check "$1" bash -c "! grep -F '\"path\": \"$2' '${CB_LOG[C]}'"
}

# ------------------------------------------------------------- deny list
note "--callback-deny 127.0.0.0/8 (no allow)"
hub_start D --config "$TMP/hub.conf" --redis-prefix rsD: --callback-deny 127.0.0.0/8 \
    --verify-timeout 2s || { bad "rshub starts with --callback-deny"; finish; }
reject D "deny/callback on 127.0.0.1 -> 403" 403 hub.mode=subscribe "hub.topic=$U/t" \
    "hub.callback=$(cb_url C /deny/1)"
reject D "deny/callback named localhost (resolves to loopback) -> 403" 403 \
    hub.mode=subscribe "hub.topic=$U/t" \
    "hub.callback=http://localhost:${CB_PORT[C]}/deny/2"
reject D "deny/callback on 127.9.9.9 -> 403" 403 hub.mode=subscribe "hub.topic=$U/t" \
    "hub.callback=http://127.9.9.9:${CB_PORT[C]}/deny/3"
reject D "deny/unsubscribe of a denied callback -> 403" 403 hub.mode=unsubscribe \
    "hub.topic=$U/t" "hub.callback=$(cb_url C /deny/4)"
sleep 1
no_request "deny/no request reached a denied callback (no verification, no hub.mode=denied)" /deny/
hub_stop D TERM 10
expect_eq "deny/rshub exits 0" "$HUB_RC" 0
hub_asan_check D

# ------------------------------------------------------- --open defaults
note "--open: loopback denied unless allowed"
hub_start O --open --redis-prefix rsO: --verify-timeout 2s ||
    { bad "rshub --open starts"; finish; }
reject O "open/loopback callback without --callback-allow -> 403" 403 \
    hub.mode=subscribe "hub.topic=$U/open1" "hub.callback=$(cb_url C /open/1)"
reject O "open/[::1] callback without --callback-allow -> 403" 403 \
    hub.mode=subscribe "hub.topic=$U/open1" \
    "hub.callback=http://[::1]:${CB_PORT[C]}/open/2"
# a publish ping names a URL the hub fetches itself: the same policy
# keeps it off loopback (else anyone could make an open hub GET internal
# services)
r=$(ws_form O hub.mode=publish "hub.url=$(cb_url C /open/ping.txt)")
case "$(status_of "$r")" in
    202|403) ok "open/publish ping of a loopback URL: $(status_of "$r")" ;;
    *) bad "open/publish ping of a loopback URL: $(status_of "$r"), want 202 or 403" "$r" ;;
esac
sleep 1
no_request "open/no request reached the denied callbacks, nor the pinged loopback URL" /open/
hub_stop O TERM 10
expect_eq "open/rshub exits 0" "$HUB_RC" 0
hub_asan_check O

note "--open with loopback allowed: topics it has not seen"
hub_start O2 --open --redis-prefix rsO2: "${WS_HUB_ARGS[@]}" ||
    { bad "rshub --open with --callback-allow starts"; finish; }
OT=$U/open-topic
r=$(ws_sub O2 "$OT" "$(cb_url C /cb/o)")
expect_eq "open/subscribe to a topic never published: 202" "$(status_of "$r")" 202
check "open/verified" cbq wait C --path /cb/o --method GET --answered 200 --timeout 10
check "open/GET /topics lists the topic with the subscription active" \
    cbs sub-state --http "${HUB_HTTP[O2]}" --uri "$OT" --callback "$(cb_url C /cb/o)" \
    --want active --timeout 5
check "open/2 published to it" \
    cbs publish --http "${HUB_HTTP[O2]}" --topic "$OT" --out "$TMP/o.pairs" \
    --dir "$TMP/docs" --count 2
cbq wait C --path /cb/o --method POST --n 2 --timeout 10 >/dev/null
check "open/delivered once each, in order, byte-identical, headers" \
    cbq check C --path /cb/o --pairs "$TMP/o.pairs" \
    --hub "http://127.0.0.1:${HUB_HTTP[O2]}/hub" --topic "$OT" --ctype application/xml
hub_stop O2 TERM 10
expect_eq "open/rshub exits 0" "$HUB_RC" 0
hub_asan_check O2

# ------------------------------------------------------------------ caps
note "--max-subs-per-topic 2, --max-subs-per-host 3"
hub_start K --config "$TMP/hub.conf" --redis-prefix rsK: "${WS_HUB_ARGS[@]}" \
    --max-subs-per-topic 2 --max-subs-per-host 3 ||
    { bad "rshub starts with the caps"; finish; }
ws_subscribe_ok "caps/capa: 1st subscription" K "$U/capa" capa C /c/1
ws_subscribe_ok "caps/capa: 2nd subscription" K "$U/capa" capa C /c/2
reject K "caps/capa: 3rd subscription -> 429" 429 hub.mode=subscribe \
    "hub.topic=$U/capa" "hub.callback=$(cb_url C /c/3)"
ws_subscribe_ok "caps/capa: re-subscribing the 1st is an update, not a 3rd" \
    K "$U/capa" capa C /c/1 hub.lease_seconds=100
ws_subscribe_ok "caps/capb: 3rd subscription of the host" K "$U/capb" capb C /c/4
reject K "caps/capb: 4th subscription of the host -> 429" 429 hub.mode=subscribe \
    "hub.topic=$U/capb" "hub.callback=$(cb_url C /c/5)"
# the caps are an error in the request, answered at once: the callback
# hears nothing (no verification, no hub.mode=denied; WebSub 5.1.2)
sleep 0.5
no_request "caps/no request of any kind reached /c/3" /c/3
no_request "caps/no request of any kind reached /c/5" /c/5
r=$(ws_unsub K "$U/capa" "$(cb_url C /c/1)")
expect_eq "caps/unsubscribe the 1st: 202" "$(status_of "$r")" 202
check "caps/unsubscribe verified" \
    cbq wait C --path /c/1 --method GET --mode unsubscribe --answered 200 --timeout 10
check "caps/the 1st gone from GET /topics" \
    cbs sub-state --http "${HUB_HTTP[K]}" --name capa --callback "$(cb_url C /c/1)" \
    --want none --timeout 5
ws_subscribe_ok "caps/capa: the freed slot takes a new subscription" K "$U/capa" capa C /c/3
check "caps/2 published to capa" \
    cbs publish --http "${HUB_HTTP[K]}" --topic "$U/capa" --out "$TMP/capa.pairs" \
    --dir "$TMP/docs" --count 2
for p in /c/2 /c/3; do
    cbq wait C --path $p --method POST --n 2 --timeout 10 >/dev/null
    check "caps/$p: delivered" \
        cbq check C --path $p --pairs "$TMP/capa.pairs" \
        --hub "http://127.0.0.1:${HUB_HTTP[K]}/hub" --topic "$U/capa" --ctype application/xml
done
expect_eq "caps/the unsubscribed one got nothing" "$(cbq count C --path /c/1 --method POST)" 0

hub_stop K TERM 10
expect_eq "caps/rshub exits 0" "$HUB_RC" 0
hub_asan_check K
finish
