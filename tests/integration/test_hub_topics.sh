#!/usr/bin/env bash
# test_hub_topics.sh - a Source advertises the hub's channels from the
# first Capability List it serves (issue 11, item 1), before it has
# published anything: rssource --hub registers (open mode) or looks up
# (closed mode) its topics with POST /topics at start-up, and answers no
# request before the hub has named its channels (or refused, or is down, or
# 2 s passed). The first GET a fresh rssource answers is checked in every
# case: an open-mode hub (two nodes on one Redis: the other node knows the
# topic too), a closed-mode hub with configured topics and a token, a
# token the hub refuses, a hub that is down (then comes up: the channel
# appears), a hub that never answers. Then POST /topics itself: idempotence,
# the kind rules, hostile forms, tokens, --max-topics, metrics, Redis down.
# Real redis-server, rshub, rssource on loopback; a stalling listener is the
# only fake. Needs RS_BUILD_DIR (ctest sets it); stops only what it started.
# shellcheck disable=SC2317 # helpers run through check/wait_until
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"

for b in "$RSHUB" "$RSSOURCE"; do
    [ -x "$b" ] || { bad "built: $b"; src_finish; }
done

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# firstget.py PORT PATH OUT: connect to PORT as soon as something listens
# there, send one GET, save the whole response (head and body) in OUT. Run
# before rssource starts, it sees the very first answer rssource gives.
cat >"$TMP/firstget.py" <<'EOF'
import socket, sys, time
port, path, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
deadline = time.monotonic() + 30
while True:
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("nothing listened on %d within 30 s" % port)
        time.sleep(0.002)
s.sendall(("GET %s HTTP/1.0\r\nHost: 127.0.0.1:%d\r\n\r\n" % (path, port)).encode())
data = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    data += b
with open(out, "wb") as f:
    f.write(data)
EOF

# first_caplist NAME DIR RSSOURCE-ARGS...: start rssource NAME on a fresh
# port with a client already knocking; the first answer's body is in
# $TMP/NAME.first.xml (its status line in FIRST_STATUS).
first_caplist() {
    local name=$1 dir=$2 port
    shift 2
    port=$(free_port)
    rm -f "$TMP/$name.first.http"
    bg "first-$name" "$PY" "$TMP/firstget.py" "$port" \
        /resourcesync/capabilitylist.xml "$TMP/$name.first.http"
    SRC_PORT=$port src_start "$name" "$dir" "$@" || return 1
    bg_wait "first-$name" 30 || return 1
    FIRST_STATUS=$(head -n 1 "$TMP/$name.first.http" | tr -d '\r')
    sed '1,/^\r\{0,1\}$/d' "$TMP/$name.first.http" >"$TMP/$name.first.xml"
}
# ws_of FILE CAPABILITY: the ws:// locs of a Capability List.
ws_of() {
    xq "$1" '[u["loc"] for u in urls if u["loc"].startswith("ws") and u["capability"] == "'"$2"'"]'
}
# reg PORT CURL-ARGS...: POST /topics; the status on stdout, the body in
# $TMP/reg.out, the headers in $TMP/reg.hdr.
reg() {
    local port=$1
    shift
    curl -s -o "$TMP/reg.out" -D "$TMP/reg.hdr" -w '%{http_code}' --max-time 10 \
        -X POST "$@" "http://127.0.0.1:$port/topics"
}
# form PORT BODY [CURL-ARGS...]: reg with a form body.
form() {
    local port=$1 body=$2
    shift 2
    reg "$port" -H 'Content-Type: application/x-www-form-urlencoded' \
        --data-raw "$body" "$@"
}
field() {   # field KEY: from $TMP/reg.out (a JSON object)
    "$PY" -c 'import json, sys; v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v[k]
print(json.dumps(v) if v is None or isinstance(v, bool) else v)' "$TMP/reg.out" "$1"
}
expect_reg() {   # expect_reg NAME WANT-STATUS WANT-BODY-SUBSTRING GOT-STATUS
    if [ "$4" = "$2" ] && grep -qF -- "$3" "$TMP/reg.out"; then
        ok "$1"
    else
        bad "$1: got $4, want $2 with '$3'" "$(cat "$TMP/reg.out")"
    fi
}
metric() { ht metrics --http "$1" --get "$2"; }

D=$TMP/data
mkdir -p "$D"
printf 'one\n' >"$D/one.txt"

redis_start || exit 1

# ------------------------------------------------------------- open mode
note "open mode: the first Capability List rssource serves"
hub_start h1 --open || exit 1
hub_start h2 --open || exit 1
HUB1=http://127.0.0.1:${HUB_HTTP[h1]}/hub
if first_caplist a "$D" --hub "$HUB1"; then
    ok "rssource --hub starts (open-mode hub)"
else
    bad "rssource --hub starts (open-mode hub)"
fi
expect_eq "its first answer is 200" "$(echo "${FIRST_STATUS:-}" | cut -d' ' -f2)" 200
B=$(src_url a)
expect_eq "the first Capability List carries the hub's change channel" \
    "$(ws_of "$TMP/a.first.xml" change-notification | sed 's,/channel/.*,,')" \
    "ws://127.0.0.1:${HUB_WS[h1]}"
expect_eq "...and its framework channel" \
    "$(ws_of "$TMP/a.first.xml" framework-notification | sed 's,/channel/.*,,')" \
    "ws://127.0.0.1:${HUB_WS[h1]}"
expect_eq "...and the WebSub entries with the hub's rel=hub" \
    "$(xq "$TMP/a.first.xml" '[u["capability"] + " " + u["loc"] + " " + u["ln"].get("hub", "-") for u in urls if u["capability"].endswith("-notification") and not u["loc"].startswith("ws")]')" \
    "changelist-notification ${B}resourcesync/changes $HUB1
framework-notification ${B}resourcesync/framework $HUB1"
CH=$(ws_of "$TMP/a.first.xml" change-notification)
CH=${CH##*/channel/}
FW=$(ws_of "$TMP/a.first.xml" framework-notification)
FW=${FW##*/channel/}
expect_eq "the channel is the hub's for our change topic, of kind change" \
    "$(ht topic --http "${HUB_HTTP[h1]}" --name "$CH" --get topic) $(ht topic --http "${HUB_HTTP[h1]}" --name "$CH" --get kind)" \
    "${B}resourcesync/changes change"
expect_eq "nothing was published to it: no change was made" \
    "$(ht topic --http "${HUB_HTTP[h1]}" --name "$CH" --get backlog.length)" 0
expect_eq "the topics were registered with POST /topics" \
    "$(metric "${HUB_HTTP[h1]}" 'rshub_topic_registrations_total{result="claimed"}')" 2
check "rssource served once the hub had answered" \
    grep -q 'msg="serving" .*hub_channels=asked' "${SRC_LOG[a]}"
expect_eq "the other node on the same Redis knows the topic and its kind" \
    "$(ht topic --http "${HUB_HTTP[h2]}" --name "$CH" --get kind)" change
check "...and gives its own channel for it" bash -c \
    "curl -sf 'http://127.0.0.1:${HUB_HTTP[h2]}/topics/$CH/capabilitylist-entries' | grep -qF 'ws://127.0.0.1:${HUB_WS[h2]}/channel/$CH<'"
# A node listening on every address advertises what reaches it here,
# not ws://0.0.0.0 (no address a subscriber can use), and says so.
hub_start hw --open --listen 0.0.0.0:0 || exit 1
check "a node listening on 0.0.0.0 advertises its channel at 127.0.0.1" bash -c \
    "curl -sf 'http://127.0.0.1:${HUB_HTTP[hw]}/topics/$CH/capabilitylist-entries' | grep -qF 'ws://127.0.0.1:${HUB_WS[hw]}/channel/$CH<'"
check "...and warns that only this host reaches it, naming the option" \
    grep -q 'msg="listening on every address.* url=ws://127.0.0.1:.* set=--ws-public-url' "${HUB_LOG[hw]}"
hub_stop hw
bg_ht subc sub --ws "${HUB_WS[h1]}" --chan "$CH" --save-data --timeout 60 \
    --out "$TMP/subc.log"
wait_until 10 grep -q open "$TMP/subc.log"
printf 'two\n' >"$D/two.txt"
check "a subscriber of the advertised channel gets the first change" \
    wait_until 15 notified_has "$TMP/subc.log" "$B" "" "created two.txt"
bg_wait subc 1 || true

# ----------------------------------------------------------- closed mode
note "closed mode: configured topics, a token"
TOK=$TMP/token
printf 's3cret-token\n' >"$TOK"
chmod 600 "$TOK"
cat >"$TMP/closed.conf" <<EOF
[topic srcchg]
uri = http://source.test/rs/changes
kind = change
token = s3cret-token
[topic srcfw]
uri = http://source.test/rs/framework
kind = framework
token = s3cret-token
[topic public]
uri = http://source.test/public
kind = change
EOF
hub_start hc -c "$TMP/closed.conf" --redis-prefix closed: || exit 1
HUBC=http://127.0.0.1:${HUB_HTTP[hc]}/hub
D2=$TMP/data2
mkdir -p "$D2"
printf 'x\n' >"$D2/x.txt"
if first_caplist b "$D2" --hub "$HUBC" --token-file "$TOK" \
    --change-topic http://source.test/rs/changes \
    --framework-topic http://source.test/rs/framework; then
    ok "rssource --hub starts (closed-mode hub, token)"
else
    bad "rssource --hub starts (closed-mode hub, token)"
fi
expect_eq "the first Capability List carries the configured channels" \
    "$(ws_of "$TMP/b.first.xml" change-notification) $(ws_of "$TMP/b.first.xml" framework-notification)" \
    "ws://127.0.0.1:${HUB_WS[hc]}/channel/srcchg ws://127.0.0.1:${HUB_WS[hc]}/channel/srcfw"
expect_eq "nothing was published to the change topic" \
    "$(ht topic --http "${HUB_HTTP[hc]}" --name srcchg --get backlog.length)" 0
expect_eq "the topics were looked up, not registered" \
    "$(metric "${HUB_HTTP[hc]}" 'rshub_topic_registrations_total{result="found"}') $(rcli hlen closed:topics)" "2 0"

note "closed mode: no token"
D3=$TMP/data3
mkdir -p "$D3"
if first_caplist c "$D3" --hub "$HUBC" \
    --change-topic http://source.test/rs/changes \
    --framework-topic http://source.test/rs/framework; then
    ok "rssource --hub starts (closed-mode hub, no token)"
else
    bad "rssource --hub starts (closed-mode hub, no token)"
fi
expect_eq "no channel is advertised for topics the hub refuses us" \
    "$(ws_of "$TMP/c.first.xml" change-notification)$(ws_of "$TMP/c.first.xml" framework-notification)" ""
check "the refusal is logged with the hub's status" \
    grep -q 'the hub refuses our topic.*status=401' "${SRC_LOG[c]}"
src_stop c

# ------------------------------------------------------- hub down, stalled
note "the hub is down at start-up, then comes up"
HP=$(free_port)
WP=$(free_port)
D4=$TMP/data4
mkdir -p "$D4"
T0S=$SECONDS
if first_caplist d "$D4" --hub "http://127.0.0.1:$HP/hub"; then
    ok "rssource --hub starts while the hub is down"
else
    bad "rssource --hub starts while the hub is down"
fi
check "...without waiting for it (a refused connection is an answer)" \
    grep -q 'msg="serving" .*hub_channels=asked' "${SRC_LOG[d]}"
expect_eq "its first Capability List has the WebSub entries, no channel" \
    "$(xq "$TMP/d.first.xml" '[u["capability"] for u in urls if u["capability"].endswith("-notification")]')" \
    "changelist-notification
framework-notification"
hub_start hd --open --redis-prefix down: --listen "127.0.0.1:$HP" \
    --ws-listen "127.0.0.1:$WP" || bad "rshub starts on the port rssource asks"
check "the channel appears once the hub is up" \
    wait_until 30 caplist_ws d change-notification
DFW=$(caplist_ws d framework-notification)
check "the Capability List update is announced (framework topic)" \
    wait_until 15 bash -c "[ \"\$('$PY' '$HUBTOOL' topic --http $HP --name '$DFW' --get backlog.length)\" -ge 1 ]"
src_stop d

note "a hub that never answers"
# shellcheck disable=SC2016
bg stall "$PY" -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)' "$TMP/stall.port"
wait_file "$TMP/stall.port" 10
SP=$(cat "$TMP/stall.port")
T0S=$SECONDS
if first_caplist e "$D4" --hub "http://127.0.0.1:$SP/hub"; then
    ok "rssource --hub starts against a hub that never answers"
else
    bad "rssource --hub starts against a hub that never answers"
fi
check "...serving after its 2 s wait, not after the hub's timeouts" \
    test $((SECONDS - T0S)) -lt 15
check "...and says so" grep -q 'msg="serving" .*hub_channels=wait_expired' "${SRC_LOG[e]}"
expect_eq "...having waited 2 s" \
    "$(sed -n 's/.*msg="serving" .*startup_seconds=\([0-9]*\)\..*/\1/p' "${SRC_LOG[e]}")" 2
expect_eq "its Capability List has the WebSub entries" \
    "$(xq "$TMP/e.first.xml" '[u["capability"] for u in urls if u["capability"].endswith("-notification")]')" \
    "changelist-notification
framework-notification"
src_stop e
bg_wait stall 0 || true

# ----------------------------------------------------------- POST /topics
note "POST /topics: open mode"
P1=${HUB_HTTP[h1]}
P2=${HUB_HTTP[h2]}
T=http://example.org/set/changes
ET=http%3A%2F%2Fexample.org%2Fset%2Fchanges
st=$(form "$P1" "topic=$ET&kind=change")
expect_reg "a new topic: 200" 200 '"topic": "http://example.org/set/changes"' "$st"
N=$(field name)
expect_eq "...its GET /topics element" \
    "$(field kind) $(field configured) $(field websocket) $(field hub) $(field backlog.length)" \
    "change false ws://127.0.0.1:${HUB_WS[h1]}/channel/$N http://127.0.0.1:$P1/hub 0"
expect_eq "...in the registry in Redis" "$(rcli hget rshub:topics "$N")" \
    "{\"topic\":\"$T\",\"kind\":\"change\"}"
HL=$(rcli hlen rshub:topics)
st=$(form "$P1" "topic=$ET&kind=change")
expect_reg "again: 200, the same topic (idempotent)" 200 "\"name\": \"$N\"" "$st"
expect_eq "...and no new record" "$(rcli hlen rshub:topics)" "$HL"
st=$(form "$P1" "topic=$ET&kind=framework")
expect_reg "the other kind: 409" 409 "is a change topic, not framework" "$st"
st=$(form "$P2" "topic=$ET&kind=framework")
expect_reg "the other node knows its kind: 409 there too" 409 "is a change topic" "$st"
st=$(form "$P2" "topic=$ET&kind=change")
expect_reg "...and answers 200 with the same name" 200 "\"name\": \"$N\"" "$st"
expect_eq "...and lists it" "$(ht topic --http "$P2" --name "$N" --get kind)" change
R=$(hub_req h2 --gen framework --topic "$T")
expect_eq "a framework notification to it is refused as publishing's rule says" \
    "$(status_of "$R")" 400
st=$(form "$P1" "topic=http://example.org/fw&kind=framework")
expect_reg "a framework topic: 200" 200 '"kind": "framework"' "$st"
R=$(hub_req h1 --gen framework --topic http://example.org/fw)
expect_eq "...a framework notification to it is accepted" "$(status_of "$R")" 202

note "POST /topics: hostile forms"
BAD0=$(metric "$P1" 'rshub_topic_registrations_total{result="bad_request"}')
nbad=0
bad_form() {   # bad_form NAME BODY WANT-SUBSTRING
    local st
    st=$(form "$P1" "$2")
    expect_reg "$1: 400" 400 "$3" "$st"
    nbad=$((nbad + 1))
}
bad_form "no topic" "kind=change" "missing topic"
bad_form "no kind" "topic=$ET" "missing kind"
bad_form "topic twice" "topic=$ET&topic=http://x.test/&kind=change" "more than once"
bad_form "kind twice" "topic=$ET&kind=change&kind=framework" "more than once"
bad_form "kind any" "topic=$ET&kind=any" "kind must be change or framework"
bad_form "kind unknown" "topic=$ET&kind=resourcelist" "kind must be change or framework"
bad_form "not http" "topic=ftp%3A%2F%2Fexample.org%2Fx&kind=change" "absolute http(s)"
bad_form "relative" "topic=%2Fchanges&kind=change" "absolute http(s)"
bad_form "encoded NUL" "topic=http%3A%2F%2Fx.test%2Fa%00b&kind=change" "NUL"
bad_form "encoded newline" "topic=http%3A%2F%2Fx.test%2Fa%0Ab&kind=change" "control character"
bad_form "space" "topic=http%3A%2F%2Fx.test%2Fa+b&kind=change" "space"
bad_form "empty topic" "topic=&kind=change" "topic is empty"
LONG=http://x.test/$(head -c 2040 /dev/zero | tr '\0' a)
bad_form "a topic over 2048 bytes" "topic=$LONG&kind=change" "longer than 2048"
bad_form "not a form" "just some text" "malformed form"
expect_eq "each counted as bad_request" \
    "$(metric "$P1" 'rshub_topic_registrations_total{result="bad_request"}')" \
    "$((BAD0 + nbad))"
st=$(form "$P1" "topic=http://x.test/$(head -c 2030 /dev/zero | tr '\0' a)&kind=change")
expect_reg "a topic of 2048 bytes is fine" 200 '"kind": "change"' "$st"
st=$(reg "$P1" -H 'Content-Type: application/json' --data-raw '{"topic":"x"}')
expect_reg "not form-encoded: 415" 415 "application/x-www-form-urlencoded" "$st"
st=$(reg "$P1" --data-raw "topic=$ET&kind=change" -H 'Content-Type:')
expect_reg "no Content-Type: 415" 415 "application/x-www-form-urlencoded" "$st"
head -c 9000 /dev/zero | tr '\0' a >"$TMP/big.form"
st=$(reg "$P1" -H 'Content-Type: application/x-www-form-urlencoded' \
    --data-binary "@$TMP/big.form")
expect_reg "a form over 8 KiB: 413" 413 "larger than 8192 bytes" "$st"
printf 'topic=http://x.test/a\0b&kind=change' >"$TMP/nul.form"
st=$(reg "$P1" -H 'Content-Type: application/x-www-form-urlencoded' \
    --data-binary "@$TMP/nul.form")
expect_reg "a raw NUL: 400" 400 "NUL" "$st"
expect_eq "GET /topics still answers the list" \
    "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$P1/topics")" 200
expect_eq "POST elsewhere: 405 with Allow" \
    "$(curl -s -o /dev/null -w '%{http_code}' -X POST --data x "http://127.0.0.1:$P1/readyz") $(curl -s -D - -o /dev/null -X POST --data x "http://127.0.0.1:$P1/readyz" | grep -i '^Allow:' | tr -d '\r')" \
    "405 Allow: GET, HEAD"
check "the hub is still healthy" curl -sf "http://127.0.0.1:$P1/healthz"

note "POST /topics: closed mode"
PC=${HUB_HTTP[hc]}
counts() {
    local r out=""
    for r in unknown_topic no_token bad_token wrong_kind; do
        out="$out $(metric "$PC" "rshub_topic_registrations_total{result=\"$r\"}")"
    done
    echo "${out# }"
}
read -r UT0 NT0 BT0 WK0 <<<"$(counts)"
st=$(form "$PC" "topic=http%3A%2F%2Fsource.test%2Fnone&kind=change")
expect_reg "an unknown topic: 404" 404 "unknown topic" "$st"
st=$(form "$PC" "topic=http%3A%2F%2Fsource.test%2Frs%2Fchanges&kind=change")
expect_reg "a topic with tokens, no token: 401" 401 "Bearer" "$st"
check "...with WWW-Authenticate" grep -qi '^WWW-Authenticate: Bearer' "$TMP/reg.hdr"
st=$(form "$PC" "topic=http%3A%2F%2Fsource.test%2Frs%2Fchanges&kind=change" \
    -H 'Authorization: Bearer nope')
expect_reg "a wrong token: 403" 403 "wrong token" "$st"
st=$(form "$PC" "topic=http%3A%2F%2Fsource.test%2Frs%2Fchanges&kind=change" \
    -H 'Authorization: Bearer s3cret-token')
expect_reg "the right token: 200" 200 '"name": "srcchg"' "$st"
expect_eq "...a configured topic" "$(field configured) $(field kind)" "true change"
st=$(form "$PC" "topic=http%3A%2F%2Fsource.test%2Frs%2Fchanges&kind=framework" \
    -H 'Authorization: Bearer s3cret-token')
expect_reg "the right token, the other kind: 409" 409 "is a change topic" "$st"
st=$(form "$PC" "topic=http%3A%2F%2Fsource.test%2Fpublic&kind=change")
expect_reg "a topic without tokens: 200 without one" 200 '"name": "public"' "$st"
st=$(form "$PC" "topic=ftp%3A%2F%2Fsource.test%2Fnone&kind=change")
expect_reg "closed mode creates nothing: an unknown topic is 404" 404 "unknown topic" "$st"
expect_eq "the closed hub's registry stays empty" "$(rcli hlen closed:topics)" 0
expect_eq "refusals counted" "$(counts)" \
    "$((UT0 + 2)) $((NT0 + 1)) $((BT0 + 1)) $((WK0 + 1))"

note "--max-topics"
hub_start hm --open --redis-prefix cap: --max-topics 2 || exit 1
PM=${HUB_HTTP[hm]}
st=$(form "$PM" "topic=http://m.test/1&kind=change")
expect_reg "topic 1 of 2" 200 '"kind": "change"' "$st"
st=$(form "$PM" "topic=http://m.test/2&kind=framework")
expect_reg "topic 2 of 2" 200 '"kind": "framework"' "$st"
st=$(form "$PM" "topic=http://m.test/3&kind=change")
expect_reg "topic 3: 503" 503 "holds 2 topics already (--max-topics)" "$st"
st=$(form "$PM" "topic=http://m.test/1&kind=change")
expect_reg "a topic it holds: still 200" 200 '"kind": "change"' "$st"
R=$(hub_req hm --gen change --n 1 --topic http://m.test/4)
expect_eq "a publish to a new topic is refused the same way" \
    "$(status_of "$R") $(body_of "$R")" \
    "503 error: this hub holds 2 topics already (--max-topics)"
expect_eq "counted" \
    "$(metric "$PM" 'rshub_topic_registrations_total{result="too_many_topics"}') $(metric "$PM" 'rshub_publish_rejected_total{reason="too_many_topics"}')" \
    "1 1"
expect_eq "the registry holds two topics" "$(rcli hlen cap:topics)" 2

note "20,000 configured topics (a bridge's Sources are a topic each)"
# Sections, topics, channels and read credentials were found by linear
# scans: 20,000 topics took 38 s to start (Release), 50,000 over 300 s.
awk 'BEGIN { for (i = 1; i <= 20000; i++)
    printf "[topic t%d]\nuri = http://many.test/s%d/changelist.xml\n", i, i }' \
    >"$TMP/many.conf"
printf '[topic tok]\nuri = http://many.test/tok\ntoken = many-tok\n' >>"$TMP/many.conf"
ready=no
hub_start hx -c "$TMP/many.conf" --redis-prefix many: --max-topics 20001 \
    --ws-soft-limit 16M --ws-hard-limit 8M && ready=yes
expect_eq "ready within hub_start's 10 s" "$ready" yes
R=$(hub_req hx --gen change --n 1 --topic http://many.test/s20000/changelist.xml)
expect_eq "the last of them takes a publish" "$(status_of "$R")" 202
R=$(hub_req hx --gen change --n 1 --topic http://many.test/tok --token many-tok)
expect_eq "...and the one after them, with its token" "$(status_of "$R")" 202
check "a soft limit above the hard one is told" \
    grep -q "ws-soft-limit (16777216 bytes) is not below --ws-hard-limit" "${HUB_LOG[hx]}"
hub_stop hx

note "Redis down"
src_stop a
redis_stop
wait_until 10 bash -c "[ \"\$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$P1/readyz)\" = 503 ]"
st=$(form "$P1" "topic=$ET&kind=change")
expect_reg "a topic the node knows: 200" 200 "\"name\": \"$N\"" "$st"
expect_eq "...its backlog unknown" "$(field backlog)" null
st=$(form "$P1" "topic=http%3A%2F%2Fnew.test%2Fx&kind=change")
expect_reg "a new topic: 503 (the registry is unavailable)" 503 "registry" "$st"
check "...with Retry-After" grep -qi '^Retry-After: 1' "$TMP/reg.hdr"

src_finish
