#!/usr/bin/env bash
# test_websub.sh - rshub's WebSub contract (docs/protocol.md 5, 6;
# shared/PROTOCOL.md 3.1) against a real redis-server and programmable
# callback servers on loopback: subscribe and its verification of intent,
# content distribution (byte-identical body, Content-Type as published,
# Link rel=hub/self, X-Hub-Id, X-Hub-Signature over the exact body), unknown
# parameters ignored, re-subscribe updates (one delivery per notification,
# the new secret), unsubscribe, failed verifications, leases clamped,
# framework notifications, publish pings (plain text and JSON fetched from
# a local server), bad requests, GET /topics and /metrics.
# Retries, 410, lease expiry, isolation: test_websub_delivery.sh. Crash:
# test_websub_crash.sh. Network policy and caps: test_websub_policy.sh. Two
# nodes: test_websub_nodes.sh.
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/websub.sh
. "$(dirname "$0")/lib/websub.sh"

DATA=${RS_TEST_DATA:-$RS_SOURCE_DIR/tests/data}
U=http://example.com/dataset1
NEWS=$U/news
FW=$U/framework

redis_start || { bad "redis-server starts"; finish; }
websub_skip_if_unimplemented

# ------------------------------------------------------------- servers
# C: the subscribers (one path per subscription); S: the Source's topic
# documents for publish pings.
cb_start C --route /cb/wrong:get=wrong --route /cb/404:get=refuse:404 \
    --route /cb/late:get=late:4 --route /cb/keep:get=echo-unsub-refuse ||
    { bad "callback server starts"; finish; }
P=$TMP/ping
mkdir -p "$P"
printf 'line one\r\nline two caf\xc3\xa9\n\tno newline at the end' >"$P/topic.txt"
printf '{"changes":[{"loc":"http://example.com/r1","change":"updated"}],\n "n":1}' \
    >"$P/topic.json"
printf 'reached through redirects\n' >"$P/topic-r.txt"
head -c 100000 /dev/zero | tr '\0' b >"$P/big.txt"
# /r5 -> /r4 -> ... -> /r1 -> /topic-r5.txt: 5 redirects (allowed);
# /s6 -> ... -> /s1 -> /topic-r6.txt: 6 (one too many)
redirects=()
for i in 5 4 3 2; do
    redirects+=(--redirect "/r$i=/r$((i - 1))")
done
redirects+=(--redirect /r1=/topic-r5.txt)
for i in 6 5 4 3 2; do
    redirects+=(--redirect "/s$i=/s$((i - 1))")
done
redirects+=(--redirect /s1=/topic-r6.txt)
cb_start S --static "/topic.txt=$P/topic.txt;text/plain; charset=utf-8" \
    --static "/topic.json=$P/topic.json;application/json" \
    --static "/missing.txt=$P/no-such-file;text/plain" \
    --static "/topic-r5.txt=$P/topic-r.txt;text/plain" \
    --static "/topic-r6.txt=$P/topic-r.txt;text/plain" \
    --static "/big.txt=$P/big.txt;text/plain" "${redirects[@]}" ||
    { bad "topic server starts"; finish; }
PT=$(cb_url S /topic.txt)
PJ=$(cb_url S /topic.json)
PM=$(cb_url S /missing.txt)
PR5=$(cb_url S /r5)
PR6=$(cb_url S /s6)
PB=$(cb_url S /big.txt)

cat >"$TMP/hub.conf" <<EOF
[topic news]
uri = $NEWS
kind = change

[topic fw]
uri = $FW
kind = framework

[topic ptxt]
uri = $PT
kind = change

[topic pjson]
uri = $PJ
kind = change

[topic pmiss]
uri = $PM
kind = change

[topic pr5]
uri = $PR5
kind = change

[topic pr6]
uri = $PR6
kind = change

[topic pbig]
uri = $PB
kind = change
EOF
hub_start A --config "$TMP/hub.conf" "${WS_HUB_ARGS[@]}" --lease-max 30d \
    --max-body 64K ||
    { bad "rshub starts with the WebSub options"; finish; }
HP=${HUB_HTTP[A]}
HUB=http://127.0.0.1:$HP/hub

# verif NAME PATH MODE TOPIC LEASE: the last verification GET on PATH had
# hub.mode=MODE, hub.topic=TOPIC, a non-empty hub.challenge, and
# hub.lease_seconds=LEASE ("-": must be absent; "*": any).
verif() {
    local name=$1 path=$2 mode=$3 topic=$4 lease=$5 j got problems=
    j=$(cbq last-get C --path "$path" 2>&1) || { bad "$name" "$j"; return; }
    got=$(printf '%s' "$j" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(d["mode"]); print(d["topic"]); print(d["challenge"] or ""); print(d["lease"] if d["lease"] is not None else "-")')
    mapfile -t g <<<"$got"
    [ "${g[0]}" = "$mode" ] || problems+="hub.mode '${g[0]}', want '$mode'; "
    [ "${g[1]}" = "$topic" ] || problems+="hub.topic '${g[1]}', want '$topic'; "
    [ -n "${g[2]}" ] || problems+="no hub.challenge; "
    [ "$lease" = "*" ] || [ "${g[3]}" = "$lease" ] ||
        problems+="hub.lease_seconds '${g[3]}', want '$lease'; "
    if [ -z "$problems" ]; then ok "$name"; else bad "$name: $problems" "$j"; fi
}
# accept NAME RESPONSE: 202 with a one-line text body
accept() {
    if [ "$(status_of "$2")" = 202 ] && one_line_body "$2"; then
        ok "$1"
    else
        bad "$1: want 202 with a one-line body" "$2"
    fi
}
# shellcheck disable=SC2317 # called through check
pub() {   # pub OUT TOPIC [publish args]: publish, append 'ID FILE TIME' to OUT
    local out=$1 topic=$2
    shift 2
    cbs publish --http "$HP" --topic "$topic" --out "$out" "$@"
}
last_id() { tail -n 1 "$1" | cut -d' ' -f1; }

# ------------------------------------------------------ subscribe, verify
note "subscribe and verification of intent"
r=$(ws_sub A "$NEWS" "$(cb_url C /cb/a)")
accept "subscribe/202 with a one-line body" "$r"
check "subscribe/verification GET arrives" \
    cbq wait C --path /cb/a --method GET --timeout 10
verif "subscribe/verification: hub.mode=subscribe, hub.topic, hub.challenge, lease = the 10-day default" \
    /cb/a subscribe "$NEWS" 864000
check "subscribe/active in GET /topics after the challenge is echoed" \
    cbs sub-state --http "$HP" --name news --callback "$(cb_url C /cb/a)" \
    --want active --timeout 5

SECRET1='k&e=y +%/s3cret'
ws_subscribe_ok "subscribe/with hub.secret" A "$NEWS" news C /cb/s \
    "hub.secret=$SECRET1"
# unknown parameters (hub.* and others) are ignored; the callback's own
# query is kept (docs/protocol.md 5)
CBQ='x=1&y=a%20b'
r=$(ws_sub A "$NEWS" "$(cb_url C "/cb/q?$CBQ")" foo=bar hub.extra=1 \
    hub.lease_seconds=600 hub.verify=sync)
accept "subscribe/unknown parameters ignored" "$r"
check "subscribe/verification GET for a callback with its own query" \
    cbq wait C --path /cb/q --method GET --timeout 10
verif "subscribe/hub.lease_seconds=600 asked, 600 verified" /cb/q subscribe "$NEWS" 600
check "subscribe/the callback's own query kept in the verification GET" \
    cbq last-get C --path /cb/q --has-arg x=1 --has-arg "y=a b"
cbs sub-state --http "$HP" --name news --callback "$(cb_url C "/cb/q?$CBQ")" \
    --want active --timeout 3 >/dev/null 2>&1 || sleep 0.5
# one callback URL subscribed to two topics (news now, fw later)
ws_subscribe_ok "subscribe/one callback, first topic (news)" A "$NEWS" news C /cb/two
# form parameters with a charset on the Content-Type are still WebSub
r=$(cbs form --http "$HP" --ctype 'application/x-www-form-urlencoded; charset=UTF-8' \
    hub.mode=subscribe "hub.topic=$NEWS" "hub.callback=$(cb_url C /cb/cs)")
accept "subscribe/Content-Type with ;charset=UTF-8 accepted" "$r"

# leases: clamped to --lease-min (1s) .. --lease-max (30d)
r=$(ws_sub A "$NEWS" "$(cb_url C /cb/lmax)" hub.lease_seconds=999999999)
accept "lease/a huge lease: 202" "$r"
ws_wait_active A news C /cb/lmax
verif "lease/clamped to --lease-max 30d (2592000)" /cb/lmax subscribe "$NEWS" 2592000

# verifications that fail: the subscription never becomes active
for p in /cb/wrong /cb/404 /cb/late /cb/keep; do
    r=$(ws_sub A "$NEWS" "$(cb_url C $p)")
    accept "subscribe/$p: 202 (verified later)" "$r"
done
check "verify/challenge echoed wrong: verification GET arrives" \
    cbq wait C --path /cb/wrong --method GET --timeout 10
check "verify/404: verification GET arrives" \
    cbq wait C --path /cb/404 --method GET --timeout 10
check "verify/too late: verification GET arrives" \
    cbq wait C --path /cb/late --method GET --timeout 10
ws_wait_active A news C /cb/keep
ws_wait_active A news C /cb/cs
VSTART=$(date +%s.%N)

# ------------------------------------------------------- distribution
note "content distribution"
# the contract's documents, a generated one, then one as text/xml
: >"$TMP/news.pairs"
check "publish/news: 4 notifications accepted" \
    pub "$TMP/news.pairs" "$NEWS" "$DATA/valid/notif-2017-changelist-notification.xml" \
    "$DATA/valid/notif-2017-changelist-notification-burst.xml" \
    "$DATA/valid/notif-alpha-ex4.1-change-notification.xml"
check "publish/news: one generated, text/xml" \
    pub "$TMP/news.pairs" "$NEWS" --dir "$TMP/docs" --start 1 --ctype text/xml
XID=$(last_id "$TMP/news.pairs")
for p in /cb/a /cb/s /cb/q /cb/keep /cb/cs; do
    cbq wait C --path $p --method POST --n 4 --timeout 15 >/dev/null
done
check "deliver/plain: each once, in order, byte-identical, Content-Type as published, Link hub+self, X-Hub-Id, no signature" \
    cbq check C --path /cb/a --pairs "$TMP/news.pairs" --hub "$HUB" \
    --topic "$NEWS" --ctype application/xml --ctype-of "$XID=text/xml"
check "deliver/secret: X-Hub-Signature = sha256=HMAC(secret, exact body)" \
    cbq check C --path /cb/s --pairs "$TMP/news.pairs" --hub "$HUB" \
    --topic "$NEWS" --ctype application/xml --ctype-of "$XID=text/xml" \
    --secret "$SECRET1"
check "deliver/to the callback with its own query kept" \
    cbq check C --path /cb/q --pairs "$TMP/news.pairs" --hub "$HUB" \
    --topic "$NEWS" --ctype application/xml --ctype-of "$XID=text/xml" \
    --query "$CBQ"

# ------------------------------------------------------- re-subscribe
note "re-subscribe the same (topic, callback)"
SECRET2=another-secret-2
NV=$(cbq count C --path /cb/s --method GET)
r=$(ws_sub A "$NEWS" "$(cb_url C /cb/s)" "hub.secret=$SECRET2")
accept "resubscribe/202" "$r"
check "resubscribe/verified again" \
    cbq wait C --path /cb/s --method GET --n $((NV + 1)) --timeout 10
sleep 0.3
check "resubscribe/listed once in GET /topics, active" \
    cbs sub-state --http "$HP" --name news --callback "$(cb_url C /cb/s)" \
    --want active --timeout 5
: >"$TMP/news2.pairs"
check "publish/news: 2 more" \
    pub "$TMP/news2.pairs" "$NEWS" --dir "$TMP/docs" --start 10 --count 2
NID=$(head -n 1 "$TMP/news2.pairs" | cut -d' ' -f1)
cbq wait C --path /cb/s --method POST --n 6 --timeout 15 >/dev/null
check "resubscribe/one delivery per notification, position kept, the new secret from then on" \
    cbq check C --path /cb/s --pairs "$TMP/news.pairs" --pairs "$TMP/news2.pairs" \
    --hub "$HUB" --topic "$NEWS" --ctype application/xml \
    --ctype-of "$XID=text/xml" --secret "$SECRET1" --secret-of "$NID=$SECRET2"

# ------------------------------------------------------------ unsubscribe
note "unsubscribe"
cbq wait C --path /cb/a --method POST --n 6 --timeout 15 >/dev/null
r=$(ws_unsub A "$NEWS" "$(cb_url C /cb/a)")
accept "unsubscribe/202" "$r"
check "unsubscribe/verification GET arrives" \
    cbq wait C --path /cb/a --method GET --mode unsubscribe --timeout 10
verif "unsubscribe/verification: hub.mode=unsubscribe, hub.topic, hub.challenge" \
    /cb/a unsubscribe "$NEWS" "*"
r=$(ws_unsub A "$NEWS" "$(cb_url C /cb/keep)")
accept "unsubscribe/refused by the subscriber: 202" "$r"
check "unsubscribe/refused: verification GET arrives (answered 404)" \
    cbq wait C --path /cb/keep --method GET --mode unsubscribe --timeout 10
check "unsubscribe/gone from GET /topics" \
    cbs sub-state --http "$HP" --name news --callback "$(cb_url C /cb/a)" \
    --want none --timeout 5
sleep 0.3
: >"$TMP/news3.pairs"
check "publish/news: 1 after the unsubscribe" \
    pub "$TMP/news3.pairs" "$NEWS" --dir "$TMP/docs" --start 20
cbq wait C --path /cb/keep --method POST --n 7 --timeout 15 >/dev/null
cbq wait C --path /cb/cs --method POST --n 7 --timeout 15 >/dev/null
check "unsubscribe/no delivery after it" \
    cbq quiet C --path /cb/a --method POST --secs 1.5
check "deliver/plain: nothing after the unsubscribe (6 delivered)" \
    cbq check C --path /cb/a --pairs "$TMP/news.pairs" --pairs "$TMP/news2.pairs" \
    --hub "$HUB" --topic "$NEWS" --ctype application/xml --ctype-of "$XID=text/xml"
check "unsubscribe/refused by the subscriber: still delivered" \
    cbq check C --path /cb/keep --pairs "$TMP/news.pairs" --pairs "$TMP/news2.pairs" \
    --pairs "$TMP/news3.pairs" --hub "$HUB" --topic "$NEWS" \
    --ctype application/xml --ctype-of "$XID=text/xml"
check "deliver/charset form subscriber got all 7" \
    cbq check C --path /cb/cs --pairs "$TMP/news.pairs" --pairs "$TMP/news2.pairs" \
    --pairs "$TMP/news3.pairs" --hub "$HUB" --topic "$NEWS" \
    --ctype application/xml --ctype-of "$XID=text/xml"

# -------------------------------------------------------------- framework
note "framework notifications"
ws_subscribe_ok "framework/subscribe" A "$FW" fw C /cb/fw
ws_subscribe_ok "framework/the news callback subscribes to fw too" A "$FW" fw C /cb/two
: >"$TMP/fw.pairs"
check "framework/3 notifications accepted" \
    pub "$TMP/fw.pairs" "$FW" "$DATA/valid/notif-2017-framework-notification-index.xml" \
    "$DATA/valid/notif-alpha-ex5.1-framework-notification.xml" \
    "$DATA/valid/notif-alpha-ex5.2-framework-notification-multi.xml"
cbq wait C --path /cb/fw --method POST --n 3 --timeout 15 >/dev/null
check "framework/delivered once each, in order, byte-identical, headers" \
    cbq check C --path /cb/fw --pairs "$TMP/fw.pairs" --hub "$HUB" --topic "$FW" \
    --ctype application/xml
cbq wait C --path /cb/two --method POST --n 10 --timeout 15 >/dev/null
check "framework/one callback on two topics: the fw ones, Link rel=self fw" \
    cbq check C --path /cb/two --only-self "$FW" --pairs "$TMP/fw.pairs" --hub "$HUB" \
    --topic "$FW" --ctype application/xml
check "framework/one callback on two topics: the news ones, Link rel=self news" \
    cbq check C --path /cb/two --only-self "$NEWS" --pairs "$TMP/news.pairs" \
    --pairs "$TMP/news2.pairs" --pairs "$TMP/news3.pairs" --hub "$HUB" \
    --topic "$NEWS" --ctype application/xml --ctype-of "$XID=text/xml"
expect_eq "framework/one callback on two topics: nothing else" \
    "$(cbq count C --path /cb/two --method POST)" 10
check "framework/news subscribers got none of them" \
    cbq check C --path /cb/cs --pairs "$TMP/news.pairs" --pairs "$TMP/news2.pairs" \
    --pairs "$TMP/news3.pairs" --hub "$HUB" --topic "$NEWS" \
    --ctype application/xml --ctype-of "$XID=text/xml"

# ---------------------------------------------------------- publish pings
note "publish pings (hub.mode=publish)"
ws_subscribe_ok "ping/subscribe to the plain-text topic" A "$PT" ptxt C /cb/pt
ws_subscribe_ok "ping/subscribe to the JSON topic" A "$PJ" pjson C /cb/pj
ws_subscribe_ok "ping/subscribe to a topic that cannot be fetched" A "$PM" pmiss C /cb/pm
cp "$P/topic.txt" "$P/txt.1"
cp "$P/topic.json" "$P/json.1"
r=$(ws_form A hub.mode=publish "hub.url=$PT")
accept "ping/hub.url=text topic: 202" "$r"
check "ping/text: the hub fetched the topic" \
    cbq wait S --path /topic.txt --method GET --timeout 10
check "ping/text: delivered" \
    cbq wait C --path /cb/pt --method POST --answered 204 --timeout 10
r=$(ws_form A hub.mode=publish "hub.topic=$PJ")
accept "ping/hub.topic=JSON topic: 202" "$r"
check "ping/JSON: delivered" \
    cbq wait C --path /cb/pj --method POST --answered 204 --timeout 10
# new content, both in one ping (several hub.url)
printf 'second version\n' >"$P/topic.txt"
printf '[1,2,3]' >"$P/topic.json"
cp "$P/topic.txt" "$P/txt.2"
cp "$P/topic.json" "$P/json.2"
r=$(ws_form A hub.mode=publish "hub.url=$PT" "hub.url=$PJ")
accept "ping/two hub.url in one ping: 202" "$r"
cbq wait C --path /cb/pt --method POST --answered 204 --n 2 --timeout 10 >/dev/null
cbq wait C --path /cb/pj --method POST --answered 204 --n 2 --timeout 10 >/dev/null
check "ping/text: the fetched bodies byte-identical, Content-Type of the response, Link, X-Hub-Id" \
    cbs check-bodies --log "${CB_LOG[C]}" --path /cb/pt --topic "$PT" --hub "$HUB" \
    "$P/txt.1=text/plain; charset=utf-8" "$P/txt.2=text/plain; charset=utf-8"
check "ping/JSON: the fetched bodies byte-identical, application/json" \
    cbs check-bodies --log "${CB_LOG[C]}" --path /cb/pj --topic "$PJ" --hub "$HUB" \
    "$P/json.1=application/json" "$P/json.2=application/json"
r=$(ws_form A hub.mode=publish "hub.url=$PM")
accept "ping/a topic answering 404: 202 all the same" "$r"
check "ping/404 topic: the hub tried to fetch it" \
    cbq wait S --path /missing.txt --method GET --timeout 10
check "ping/404 topic: nothing distributed" \
    cbq quiet C --path /cb/pm --method POST --secs 1
ws_subscribe_ok "ping/subscribe to a topic behind 5 redirects" A "$PR5" pr5 C /cb/r5
ws_subscribe_ok "ping/subscribe to a topic behind 6 redirects" A "$PR6" pr6 C /cb/r6
ws_subscribe_ok "ping/subscribe to a topic over --max-body" A "$PB" pbig C /cb/big
r=$(ws_form A hub.mode=publish "hub.url=$PR5")
accept "ping/5 redirects: 202" "$r"
cbq wait C --path /cb/r5 --method POST --answered 204 --timeout 10 >/dev/null
check "ping/5 redirects followed: the final body and Content-Type, Link rel=self the topic" \
    cbs check-bodies --log "${CB_LOG[C]}" --path /cb/r5 --topic "$PR5" --hub "$HUB" \
    "$P/topic-r.txt=text/plain"
r=$(ws_form A hub.mode=publish "hub.url=$PR6")
accept "ping/6 redirects: 202" "$r"
check "ping/6 redirects: the hub followed 5 of them" \
    cbq wait S --path /s1 --method GET --timeout 10
sleep 0.5
expect_eq "ping/6 redirects: not the 6th" \
    "$(cbq count S --path /topic-r6.txt --method GET)" 0
check "ping/6 redirects: nothing distributed" \
    cbq quiet C --path /cb/r6 --method POST --secs 1
r=$(ws_form A hub.mode=publish "hub.url=$PB")
accept "ping/a 100 KB topic over --max-body 64K: 202" "$r"
check "ping/over --max-body: the hub tried to fetch it" \
    cbq wait S --path /big.txt --method GET --timeout 10
check "ping/over --max-body: nothing distributed" \
    cbq quiet C --path /cb/big --method POST --secs 1.5

# ----------------------------------------------------------- bad requests
note "bad requests: 4xx, one-line body, no request to the callback"
# reject NAME STATUS PARAMS...
reject() {
    local name=$1 want=$2 r st
    shift 2
    r=$(ws_form A "$@")
    st=$(status_of "$r")
    if [ "$st" = "$want" ] && one_line_body "$r"; then
        ok "reject/$name"
    else
        bad "reject/$name: status $st, want $want with a one-line body" "$r"
    fi
}
reject4xx() {
    local name=$1 r st
    shift
    r=$(ws_form A "$@")
    st=$(status_of "$r")
    case "$st" in
        4??) one_line_body "$r" && { ok "reject/$name ($st)"; return; } ;;
    esac
    bad "reject/$name: status $st, want 4xx with a one-line body" "$r"
}
reject "missing hub.topic -> 400" 400 hub.mode=subscribe "hub.callback=$(cb_url C /bad/1)"
reject "empty hub.topic -> 400" 400 hub.mode=subscribe hub.topic= "hub.callback=$(cb_url C /bad/2)"
reject "missing hub.callback -> 400" 400 hub.mode=subscribe "hub.topic=$NEWS"
reject "missing hub.mode -> 400" 400 "hub.topic=$NEWS" "hub.callback=$(cb_url C /bad/3)"
reject "bogus hub.mode -> 400" 400 hub.mode=subscribed "hub.topic=$NEWS" \
    "hub.callback=$(cb_url C /bad/4)"
reject "ftp:// callback -> 400" 400 hub.mode=subscribe "hub.topic=$NEWS" \
    "hub.callback=ftp://127.0.0.1:${CB_PORT[C]}/bad/5"
reject "relative callback -> 400" 400 hub.mode=subscribe "hub.topic=$NEWS" \
    hub.callback=/bad/6
reject "callback without a host -> 400" 400 hub.mode=subscribe "hub.topic=$NEWS" \
    hub.callback=http:///bad/7
head -c 200 /dev/zero | tr '\0' s >"$TMP/secret200"
head -c 199 /dev/zero | tr '\0' s >"$TMP/secret199"
reject "secret of 200 bytes -> 400" 400 hub.mode=subscribe "hub.topic=$NEWS" \
    "hub.callback=$(cb_url C /bad/8)" "hub.secret@=$TMP/secret200"
reject "unknown topic (closed mode) -> 404" 404 hub.mode=subscribe \
    hub.topic=http://example.com/not-configured "hub.callback=$(cb_url C /bad/9)"
reject "unsubscribe without hub.callback -> 400" 400 hub.mode=unsubscribe "hub.topic=$NEWS"
reject4xx "publish ping without hub.url or hub.topic" hub.mode=publish
reject4xx "publish ping of an unknown topic (closed mode)" hub.mode=publish \
    hub.url=http://example.com/not-configured
# the secret's limit is in bytes: 100 'é' are 200 bytes
"$PY" -c 'import sys; sys.stdout.write("\u00e9" * 100)' >"$TMP/secret-e200"
reject "secret of 100 'é' (200 bytes UTF-8) -> 400" 400 hub.mode=subscribe \
    "hub.topic=$NEWS" "hub.callback=$(cb_url C /bad/10)" "hub.secret@=$TMP/secret-e200"
reject4xx "hub.lease_seconds not a number" hub.mode=subscribe "hub.topic=$NEWS" \
    "hub.callback=$(cb_url C /bad/11)" hub.lease_seconds=soon
r=$(ws_sub A "$NEWS" "$(cb_url C /cb/s199)" "hub.secret@=$TMP/secret199")
accept "subscribe/secret of 199 bytes accepted" "$r"
check "subscribe/199-byte secret: verified" \
    cbq wait C --path /cb/s199 --method GET --timeout 10
SECRET_U8='clé 日本 ✓'
ws_subscribe_ok "subscribe/a UTF-8 secret" A "$NEWS" news C /cb/u8 "hub.secret=$SECRET_U8"
# https is an absolute http(s) URL: accepted; our plain-HTTP server cannot
# complete TLS, so it is never verified
r=$(ws_sub A "$NEWS" "https://127.0.0.1:${CB_PORT[C]}/cb/tls")
accept "subscribe/https callback accepted (202)" "$r"
# schemes are case-insensitive (RFC 3986 3.1)
r=$(ws_sub A "$NEWS" "HTTP://127.0.0.1:${CB_PORT[C]}/cb/upper")
accept "subscribe/HTTP:// (upper-case scheme) accepted (202)" "$r"
check "subscribe/upper-case scheme: verified" \
    cbq wait C --path /cb/upper --method GET --answered 200 --timeout 10
cbs sub-state --http "$HP" --name news --callback "$(cb_url C /cb/s199)" \
    --want active --timeout 3 >/dev/null 2>&1 || sleep 0.5
ws_subscribe_ok "resubscribe/after an unsubscribe, /cb/a again" A "$NEWS" news C /cb/a
# a 60 KB notification (under --max-body 64K): larger than any buffer
check "subscribe/a new subscription gets only what is accepted after it became active (60 KB)" \
    pub "$TMP/news4.pairs" "$NEWS" --dir "$TMP/docs" --start 30 --pad 60000
cbq wait C --path /cb/s199 --method POST --n 1 --timeout 10 >/dev/null
check "subscribe/199-byte secret: the later notification only, signed with it" \
    cbq check C --path /cb/s199 --pairs "$TMP/news4.pairs" --hub "$HUB" \
    --topic "$NEWS" --ctype application/xml --secret "$(cat "$TMP/secret199")"
cbq wait C --path /cb/u8 --method POST --n 1 --timeout 10 >/dev/null
check "subscribe/UTF-8 secret: HMAC keyed with its UTF-8 bytes" \
    cbq check C --path /cb/u8 --pairs "$TMP/news4.pairs" --hub "$HUB" \
    --topic "$NEWS" --ctype application/xml --secret "$SECRET_U8"
cbq wait C --path /cb/upper --method POST --n 1 --timeout 10 >/dev/null
check "subscribe/upper-case scheme: delivered" \
    cbq check C --path /cb/upper --pairs "$TMP/news4.pairs" --hub "$HUB" \
    --topic "$NEWS" --ctype application/xml
expect_eq "subscribe/https callback: nothing reached our plain-HTTP port as HTTP" \
    "$(cbq count C --path /cb/tls)" 0
cbq wait C --path /cb/a --method POST --n 7 --timeout 10 >/dev/null
check "resubscribe/after an unsubscribe: a new subscription, nothing of what came in between" \
    cbq check C --path /cb/a --pairs "$TMP/news.pairs" --pairs "$TMP/news2.pairs" \
    --pairs "$TMP/news4.pairs" --hub "$HUB" --topic "$NEWS" \
    --ctype application/xml --ctype-of "$XID=text/xml"
# A closed topic in closed mode: 404, and the callback is told
# (hub.mode=denied, docs/protocol.md 5); malformed requests: nothing at all.
check "reject/unknown topic: the callback gets GET hub.mode=denied, hub.topic, hub.reason" \
    cbq wait C --path /bad/9 --method GET --mode denied --timeout 5
check "reject/unknown topic: the denial names the topic" \
    cbq last-get C --path /bad/9 --has-arg hub.topic=http://example.com/not-configured
sleep 0.3
expect_eq "reject/unknown topic: nothing but the denial (no verification)" \
    "$(cbq count C --path /bad/9)" 1
check "reject/no request of any kind reached the callbacks of malformed requests" \
    bash -c "n=\$(grep -v '\"path\": \"/bad/9\"' '${CB_LOG[C]}' | grep -c '\"path\": \"/bad/'); [ \"\$n\" = 0 ] ||
             { grep -v '\"path\": \"/bad/9\"' '${CB_LOG[C]}' | grep '\"path\": \"/bad/' | head -n 3; exit 1; }"

# ----------------------------------------- failed verifications, at the end
note "failed verifications: never active, never delivered"
# /cb/late answers its challenge after 4 s (> --verify-timeout 2s): wait
# until that has happened before judging
now=$(date +%s.%N)
sleep "$("$PY" -c "print(max(0.0, $VSTART + 4.5 - $now))")"
for p in /cb/wrong /cb/404 /cb/late; do
    check "verify/$p: no delivery" \
        bash -c "n=\$('$PY' '$CBS' count --log '${CB_LOG[C]}' --path $p --method POST); [ \"\$n\" = 0 ] || { echo \"\$n POSTs\"; exit 1; }"
    st=$(cbs sub-state --http "$HP" --name news --callback "$(cb_url C $p)" 2>&1)
    check "verify/$p: not active in GET /topics ($st)" test "$st" != active
done

check "denied/any hub.mode=denied GET carries hub.topic and hub.reason ($(cbq denied C 2>&1))" \
    cbq denied C

# ------------------------------------------------------------ Redis layout
note "Redis layout (docs/protocol.md 7)"
CBS_URL=$(cb_url C /cb/s)
check "redis/rshub:sub:news holds /cb/s as JSON {secret, expires, created, state: active}" \
    "$PY" -c '
import json, subprocess, sys
v = subprocess.run(["redis-cli", "-s", sys.argv[1], "hget", "rshub:sub:news", sys.argv[2]],
                   capture_output=True, text=True).stdout.strip()
try:
    d = json.loads(v)
except ValueError:
    sys.exit("not JSON: %r" % v)
if not {"secret", "expires", "created", "state"} <= set(d) or d["state"] != "active":
    sys.exit("record: %r" % v)' "$REDIS_SOCK" "$CBS_URL"
LAST_S=$(cbq ids C --path /cb/s --method POST --answered 204 | tail -n 1 | cut -d' ' -f1)
check "redis/rshub:cur:news holds the id last delivered to /cb/s ($LAST_S)" \
    "$PY" -c '
import subprocess, sys, time
for i in range(20):
    v = subprocess.run(["redis-cli", "-s", sys.argv[1], "hget", "rshub:cur:news", sys.argv[2]],
                       capture_output=True, text=True).stdout.strip()
    if v == sys.argv[3]:
        sys.exit(0)
    time.sleep(0.1)
sys.exit("cursor: %r" % v)' "$REDIS_SOCK" "$CBS_URL" "$LAST_S"
check "redis/rshub:leases has 'news CALLBACK' about 10 days ahead (ms since the epoch)" \
    "$PY" -c '
import subprocess, sys, time
v = subprocess.run(["redis-cli", "-s", sys.argv[1], "zscore", "rshub:leases", "news " + sys.argv[2]],
                   capture_output=True, text=True).stdout.strip()
try:
    ok = abs(float(v) - (time.time() + 864000) * 1000) < 120000
except ValueError:
    ok = False
sys.exit(0 if ok else "score: %r" % v)' "$REDIS_SOCK" "$CBS_URL"

# -------------------------------------------------------- status endpoints
note "GET /topics and /metrics"
check "topics/news lists the subscriptions with their state (secret, charset: active)" \
    bash -c "for cb in '$(cb_url C /cb/s)' '$(cb_url C /cb/cs)' '$(cb_url C /cb/keep)'; do
                 '$PY' '$CBS' sub-state --http $HP --name news --callback \"\$cb\" --want active --timeout 2 || exit 1
             done"
check "topics/the secret is not shown" \
    bash -c "! '$PY' '$HUBTOOL' request --http $HP --method GET --path /topics --ctype none |
             grep -F -e '$SECRET2' -e 'k&e=y'"
ht request --http "$HP" --method GET --path /topics --ctype none >"$TMP/topics.out"
note "GET /topics news: $(sed '1,/^$/d' "$TMP/topics.out" | "$PY" -c 'import json,sys; print(json.dumps([t for t in json.load(sys.stdin) if t["name"]=="news"]))' 2>&1 | cut -c1-600)"
cbs websub-metrics --http "$HP" >"$TMP/metrics.out" 2>&1
note "websub series: $(tr '\n' ' ' <"$TMP/metrics.out" | cut -c1-800)"
# metric NAME REGEX MIN: a websub series matching REGEX whose value is >= MIN
metric() {
    local name=$1 re=$2 min=$3 v
    v=$(grep -E "$re" "$TMP/metrics.out" | awk '{s+=$NF} END {print s+0}')
    if grep -Eq "$re" "$TMP/metrics.out" && "$PY" -c "import sys; sys.exit(0 if $v >= $min else 1)"; then
        ok "metrics/$name ($v)"
    else
        bad "metrics/$name: no series matching /$re/ with a value >= $min (sum $v)" \
            "$(cat "$TMP/metrics.out")"
    fi
}
metric "verifications counted" '^[a-z_]*verif[a-z_]*_total' 10
metric "deliveries counted" '^[a-z_]*deliver[a-z_]*_total' 30
cbs websub-metrics --http "$HP" --grep 'fetch|ping' >>"$TMP/metrics.out" 2>&1
metric "publish-ping fetch failures counted (404, 6 redirects, too big)" \
    '(fetch|ping).*(fail|error)' 3
check "metrics/the whole page still parses" ht metrics --http "$HP"

# ------------------------------------------------------------------ stop
note "SIGTERM"
hub_stop A TERM 10
expect_eq "sigterm/rshub exits 0" "$HUB_RC" 0
hub_asan_check A
finish
