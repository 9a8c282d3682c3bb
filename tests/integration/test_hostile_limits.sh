#!/usr/bin/env bash
# test_hostile_limits.sh - limits that hold whatever a client does (issue
# 12, items 4 and 5): the WebSub caps per callback host and per topic under
# many requests at once (a slot is reserved in Redis when a request is
# accepted, released when its verification fails, and a reservation whose
# hub died runs out); the --max-topics cap answers 503 to WebSub, not 404;
# requests whose framing two HTTP parsers could read differently (two
# Content-Length values, Transfer-Encoding other than chunked, a header
# name with a space before its colon) get 400 and a closed connection on
# every rshub endpoint; a NAT64 callback address that embeds loopback is
# refused; a NUL byte in a body is told as what it is; open mode refuses
# a new topic whose URI cannot be one (not ASCII, not absolute http(s)).
# Real redis-server, rshub and callback servers on loopback; a few hundred
# requests, bounded in time.
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/websub.sh
. "$(dirname "$0")/lib/websub.sh"

U=http://example.com/limits

redis_start || { bad "redis-server starts"; finish; }
cat >"$TMP/hub.conf" <<EOF
[topic h]
uri = $U/h

[topic p]
uri = $U/p

[topic r]
uri = $U/r

[topic t]
uri = $U/t
EOF

# callback servers: verification answered after 0.3 s (so that many
# requests overlap), refused, and at once
cb_start S --default-get late:0.3 || { bad "callback server S starts"; finish; }
cb_start F --default-get refuse:404 || { bad "callback server F starts"; finish; }
cb_start E || { bad "callback server E starts"; finish; }

# active PREFIX TOPIC: subscriptions stored for TOPIC
active() { rcli HLEN "${1}sub:$2"; }
host_count() { rcli HGET "${1}hosts" 127.0.0.1; }
# settle PREFIX TOPIC SECS: wait until TOPIC's count has not moved for 1 s
settle() {
    local last=-1 n i=0 still=0
    while [ "$i" -lt $(($3 * 10)) ]; do
        n=$(active "$1" "$2")
        if [ "$n" = "$last" ]; then
            still=$((still + 1))
            [ "$still" -ge 10 ] && return 0
        else
            still=0
            last=$n
        fi
        sleep 0.1
        i=$((i + 1))
    done
    return 0
}
# tally_of TALLY STATUS: how many answers of STATUS in "202=40 429=80"
tally_of() {
    local x
    for x in $1; do
        [ "${x%%=*}" = "$2" ] && { echo "${x#*=}"; return; }
    done
    echo 0
}

# ------------------------------------------------- the cap per callback host
note "--max-subs-per-host 40: 120 subscriptions at once, 24 in flight"
hub_start H --config "$TMP/hub.conf" --redis-prefix rsH: "${WS_HUB_ARGS[@]}" \
    --verify-timeout 10s --max-subs-per-host 40 --max-subs-per-topic 0 ||
    { bad "rshub starts with --max-subs-per-host 40"; finish; }
t=$(cbs form-many --http "${HUB_HTTP[H]}" --topic "$U/h" \
    --callback "$(cb_url S "/h/{i}")" --count 120 --concurrency 24)
n202=$(tally_of "$t" 202)
expect_eq "host/40 accepted (202), the others refused at once ($t)" "$n202" 40
expect_eq "host/80 answered 429" "$(tally_of "$t" 429)" 80
cbq wait S --method GET --mode subscribe --path-prefix /h/ --n "$n202" \
    --timeout 30 >/dev/null 2>&1 || true
settle rsH: h 20
expect_eq "host/40 subscriptions active, not more" "$(active rsH: h)" 40
expect_eq "host/the host's count is 40" "$(host_count rsH:)" 40
r=$(ws_sub H "$U/h" "$(cb_url E /h/one-more)")
expect_eq "host/one more afterwards: 429" "$(status_of "$r")" 429
hub_stop H TERM 10
expect_eq "host/rshub exits 0" "$HUB_RC" 0
hub_asan_check H

# ------------------------------------------------------ the cap per topic
note "--max-subs-per-topic 30: 100 subscriptions at once, 32 in flight"
hub_start P --config "$TMP/hub.conf" --redis-prefix rsP: "${WS_HUB_ARGS[@]}" \
    --verify-timeout 10s --max-subs-per-topic 30 --max-subs-per-host 0 ||
    { bad "rshub starts with --max-subs-per-topic 30"; finish; }
t=$(cbs form-many --http "${HUB_HTTP[P]}" --topic "$U/p" \
    --callback "$(cb_url S "/p/{i}")" --count 100 --concurrency 32)
n202=$(tally_of "$t" 202)
expect_eq "topic/30 accepted (202), the others refused at once ($t)" "$n202" 30
cbq wait S --method GET --mode subscribe --path-prefix /p/ --n "$n202" \
    --timeout 30 >/dev/null 2>&1 || true
settle rsP: p 20
expect_eq "topic/30 subscriptions active, not more" "$(active rsP: p)" 30
r=$(ws_sub P "$U/p" "$(cb_url E /p/one-more)")
expect_eq "topic/one more afterwards: 429" "$(status_of "$r")" 429
# another topic of the same host is not concerned
ws_subscribe_ok "topic/another topic still takes one" P "$U/t" t E /p/other
hub_stop P TERM 10
expect_eq "topic/rshub exits 0" "$HUB_RC" 0
hub_asan_check P

# -------------------------------------- released when verification fails
note "a refused verification gives its slot back"
hub_start F --config "$TMP/hub.conf" --redis-prefix rsF: "${WS_HUB_ARGS[@]}" \
    --max-subs-per-host 6 ||
    { bad "rshub starts with --max-subs-per-host 6"; finish; }
t=$(cbs form-many --http "${HUB_HTTP[F]}" --topic "$U/r" \
    --callback "$(cb_url F "/f/{i}")" --count 6 --concurrency 6)
expect_eq "release/6 accepted, to a callback that refuses" "$(tally_of "$t" 202)" 6
check "release/6 verifications refused" \
    cbq wait F --method GET --mode subscribe --answered 404 --n 6 --timeout 10
sleep 0.5
t=$(cbs form-many --http "${HUB_HTTP[F]}" --topic "$U/r" \
    --callback "$(cb_url E "/f/{i}")" --count 6 --concurrency 6)
expect_eq "release/6 more accepted: the slots were given back" "$(tally_of "$t" 202)" 6
cbq wait E --method GET --mode subscribe --path-prefix /f/ --n 6 --timeout 10 \
    >/dev/null 2>&1 || true
settle rsF: r 10
expect_eq "release/6 active" "$(active rsF: r)" 6
expect_eq "release/no reservation left" "$(rcli ZCARD "rsF:pend:r")" 0
hub_stop F TERM 10
expect_eq "release/rshub exits 0" "$HUB_RC" 0
hub_asan_check F

# ------------------------------- a reservation outlives no hub for long
note "the reservations of a hub killed while verifying run out"
hub_start K --config "$TMP/hub.conf" --redis-prefix rsK: "${WS_HUB_ARGS[@]}" \
    --max-subs-per-host 5 --verify-timeout 3s --redis-timeout 1s ||
    { bad "rshub starts with --max-subs-per-host 5"; finish; }
for i in 0 1 2 3 4; do cb_ctl S "/k/$i" get=late:30; done
t=$(cbs form-many --http "${HUB_HTTP[K]}" --topic "$U/r" \
    --callback "$(cb_url S "/k/{i}")" --count 5 --concurrency 5)
expect_eq "ttl/5 accepted, verifications under way" "$(tally_of "$t" 202)" 5
r=$(ws_sub K "$U/r" "$(cb_url E /k/6)")
expect_eq "ttl/a 6th while they verify: 429 (the slots are taken)" \
    "$(status_of "$r")" 429
hub_kill9 K
HUB_ASAN_DONE[K]=1    # killed: no exit report to check
t0=$SECONDS
hub_start K --config "$TMP/hub.conf" --redis-prefix rsK: "${WS_HUB_ARGS[@]}" \
    --max-subs-per-host 5 --verify-timeout 3s --redis-timeout 1s ||
    { bad "rshub restarts"; finish; }
# the reservations end 3 s + 2 x 1 s + 1 s after they were made
ok_after=
for _ in $(seq 1 100); do
    r=$(ws_sub K "$U/r" "$(cb_url E /k/after)")
    if [ "$(status_of "$r")" = 202 ]; then ok_after=$((SECONDS - t0)); break; fi
    sleep 0.2
done
if [ -n "$ok_after" ] && [ "$ok_after" -le 12 ]; then
    ok "ttl/after a restart the dead hub's reservations ran out (${ok_after} s)"
else
    bad "ttl/after a restart, no slot within 20 s (${ok_after:-never})"
fi
hub_stop K TERM 10
expect_eq "ttl/rshub exits 0" "$HUB_RC" 0
hub_asan_check K

# ---------------------------- a reservation that ran out is not a free pass
note "verified after its reservation ran out and the room was taken: refused"
hub_start X --config "$TMP/hub.conf" --redis-prefix rsX: "${WS_HUB_ARGS[@]}" \
    --max-subs-per-host 1 ||
    { bad "rshub starts with --max-subs-per-host 1"; finish; }
cb_ctl S /x/a get=late:1.5
r=$(ws_sub X "$U/r" "$(cb_url S /x/a)")
expect_eq "ranout/the first accepted (its verification takes 1.5 s)" "$(status_of "$r")" 202
# what a reservation's end does, at once: as if its node had been slow
rcli DEL rsX:pend:r rsX:phost:127.0.0.1 >/dev/null
r=$(ws_sub X "$U/r" "$(cb_url E /x/b)")
expect_eq "ranout/a second takes the room" "$(status_of "$r")" 202
check "ranout/the first is told it was refused (hub.mode=denied)" \
    cbq wait S --path /x/a --method GET --mode denied --timeout 10
expect_eq "ranout/one subscription stored, the second's" \
    "$(rcli HKEYS rsX:sub:r)" "$(cb_url E /x/b)"
expect_eq "ranout/the host's count is 1" "$(host_count rsX:)" 1
hub_stop X TERM 10
expect_eq "ranout/rshub exits 0" "$HUB_RC" 0
hub_asan_check X

# ------------------------------------------------ --max-topics and WebSub
note "--open --max-topics 1: WebSub on a new topic answers 503, not 404"
DOC='<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/"><rs:md capability="changelist-notification"/><url><loc>http://example.com/r</loc><rs:md change="updated" datetime="2024-01-01T00:00:00Z"/></url></urlset>'
DOCLEN=$(printf '%b' "$DOC" | wc -c)
if hub_start M --open --max-topics 1 --redis-prefix rsM: "${WS_HUB_ARGS[@]}"; then
    # URIs that cannot be a new topic: 400 saying why, no topic made (the
    # one room left stays free). A byte beyond ASCII made a topic with no
    # registry record: a false "Redis unavailable" 503 that a publisher
    # retries forever, and /topics listing it without its URI.
    for link in 'http://example.com/\xc3\xa9\xff' '/t1' 'urn:x:y' \
        'ftp://example.com/x'; do
        out=$(cbs raw --http "${HUB_HTTP[M]}" --data "POST /hub HTTP/1.1\r\nHost: x\r\nContent-Type: application/xml\r\nLink: <$link>; rel=\"self\"\r\nContent-Length: $DOCLEN\r\nConnection: close\r\n\r\n$DOC")
        case "$out" in
            "HTTP/1.1 400 "*) ok "topics/publish to <$link>: 400 ($(printf '%s\n' "$out" | grep -m1 -o 'error: .*' | cut -c1-60))" ;;
            *) bad "topics/publish to <$link>: want 400" "$out" ;;
        esac
    done
    r=$(ws_sub M "not a uri at all" "$(cb_url E /m/0)")
    expect_eq "topics/subscribe to 'not a uri at all': 400" "$(status_of "$r")" 400
    out=$(cbs raw --http "${HUB_HTTP[M]}" --data "POST /topics HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 40\r\nConnection: close\r\n\r\ntopic=http://example.com/%FF&kind=change")
    case "$out" in
        "HTTP/1.1 400 "*) ok "topics/POST /topics of http://example.com/%FF (decoded: a byte 0xFF): 400" ;;
        *) bad "topics/POST /topics of http://example.com/%FF: want 400" "$out" ;;
    esac
    expect_eq "topics/...the publishes counted as bad_topic" "$(ht metrics \
        --http "${HUB_HTTP[M]}" --get 'rshub_publish_rejected_total{reason="bad_topic"}')" 4
    expect_eq "topics/...and none of them made a topic" \
        "$(curl -s "http://127.0.0.1:${HUB_HTTP[M]}/topics" | "$PY" -c 'import json, sys; print(len(json.load(sys.stdin)))')" 0
    r=$(ws_sub M "$U/m1" "$(cb_url E /m/1)")
    expect_eq "topics/subscribe to a first topic: 202" "$(status_of "$r")" 202
    r=$(ws_sub M "$U/m2" "$(cb_url E /m/2)")
    expect_eq "topics/subscribe to a second topic: 503" "$(status_of "$r")" 503
    check "topics/... saying --max-topics" \
        bash -c "printf '%s' '$(body_of "$r")' | grep -q -- --max-topics"
    r=$(ws_form M hub.mode=publish "hub.url=$U/m3")
    expect_eq "topics/publish ping of a third topic: 503" "$(status_of "$r")" 503
    sleep 0.3
    expect_eq "topics/no request reached /m/2" "$(cbq count E --path /m/2)" 0
    hub_stop M TERM 10
    expect_eq "topics/rshub exits 0" "$HUB_RC" 0
    hub_asan_check M
else
    bad "rshub --open --max-topics 1 starts"
    hub_stop M KILL 5
    HUB_ASAN_DONE[M]=1
fi

# --------------------------------------------------- request framing
note "framing: 400 and a closed connection"
hub_start W --config "$TMP/hub.conf" --redis-prefix rsW: "${WS_HUB_ARGS[@]}" ||
    { bad "rshub starts"; finish; }
PUBH="POST /hub HTTP/1.1\r\nHost: x\r\nContent-Type: application/xml\r\nLink: <$U/t>; rel=\"self\"\r\n"
FORM="hub.mode=subscribe&hub.topic=$U/t&hub.callback=$(cb_url E /w/1)"
FORMLEN=${#FORM}
FORMH="POST /hub HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
REGB="topic=$U/t&kind=change"
REGH="POST /topics HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
CHUNKED=$(printf '%x' "$DOCLEN")"\r\n$DOC\r\n0\r\n\r\n"
# framing NAME DATA: a check that DATA is answered 400 (or 501) alone,
# with the connection closed, and that nothing was stored
framing() {
    local name=$1 data=$2 out before after
    before=$(rcli XLEN rsW:s:t)
    out=$(cbs raw --http "${HUB_HTTP[W]}" --data "$data")
    after=$(rcli XLEN rsW:s:t)
    case "$(printf '%s\n' "$out" | head -n 1)" in
        "HTTP/1.1 400 "*|"HTTP/1.1 501 "*) ;;
        *) bad "$name: not refused" "$out"; return ;;
    esac
    if ! printf '%s\n' "$out" | grep -q '^closed responses=1$'; then
        bad "$name: refused, but the connection stayed open or went on" "$out"
        return
    fi
    [ "$before" = "$after" ] || { bad "$name: refused, but stored" "$out"; return; }
    ok "$name ($(printf '%s\n' "$out" | sed -n 2p | cut -c1-70))"
}
framing "framing/publish, two Content-Length values" \
    "${PUBH}Content-Length: $DOCLEN\r\nContent-Length: 5\r\n\r\n$DOC"
framing "framing/publish, Content-Length: +N" \
    "${PUBH}Content-Length: +$DOCLEN\r\n\r\n$DOC"
framing "framing/publish, 'Content-Length :' (a space before the colon)" \
    "${PUBH}Content-Length : 3\r\nTransfer-Encoding: chunked\r\n\r\n$CHUNKED"
framing "framing/publish, Transfer-Encoding: gzip, chunked" \
    "${PUBH}Transfer-Encoding: gzip, chunked\r\n\r\n$CHUNKED"
framing "framing/publish, Transfer-Encoding: gzip (no length)" \
    "${PUBH}Transfer-Encoding: gzip\r\n\r\n$DOC"
framing "framing/publish, Content-Length and Transfer-Encoding" \
    "${PUBH}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n$CHUNKED"
framing "framing/WebSub subscribe, two Content-Length values" \
    "${FORMH}Content-Length: $FORMLEN\r\nContent-Length: 20\r\n\r\n$FORM"
framing "framing/WebSub subscribe, 'Transfer-Encoding :' and Content-Length" \
    "${FORMH}Transfer-Encoding : chunked\r\nContent-Length: $FORMLEN\r\n\r\n$FORM"
framing "framing/POST /topics, two Content-Length values" \
    "${REGH}Content-Length: ${#REGB}\r\nContent-Length: 4\r\n\r\n$REGB"
framing "framing/GET /healthz, two Content-Length values" \
    "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 3\r\n\r\n"
sleep 0.3
expect_eq "framing/no verification reached /w/1" "$(cbq count E --path /w/1)" 0
out=$(cbs raw --http "${HUB_HTTP[W]}" \
    --data "${PUBH}Content-Length: $DOCLEN\r\nContent-Length: $DOCLEN\r\n\r\n$DOC")
case "$out" in
    "HTTP/1.1 202 "*) ok "framing/two equal Content-Length values are one (202)" ;;
    *) bad "framing/two equal Content-Length values: not 202" "$out" ;;
esac

# ----------------------------------------------------------- NUL bytes
note "a NUL byte is told as one"
out=$(cbs raw --http "${HUB_HTTP[W]}" \
    --data "${PUBH}Content-Length: $DOCLEN\r\n\r\n$(printf '%b' "$DOC" | sed 's/<url>/\\x00url>/')")
case "$out" in
    "HTTP/1.1 400 "*"NUL byte at offset"*) ok "nul/publish with a NUL byte: 400 naming it" ;;
    *) bad "nul/publish with a NUL byte: want 400 naming it" "$out" ;;
esac
case "$out" in
    *UTF-16*|*UCS-4*) bad "nul/... and not called UTF-16 or UCS-4" "$out" ;;
    *) ok "nul/... and not called UTF-16 or UCS-4" ;;
esac
r=$(ws_form W --raw "hub.mode=subscribe&hub.topic=$U/t%00x&hub.callback=$(cb_url E /w/2)")
expect_eq "nul/WebSub form with an encoded NUL: 400" "$(status_of "$r")" 400
check "nul/... saying NUL" bash -c "printf '%s' '$(body_of "$r")' | grep -q NUL"
hub_stop W TERM 10
expect_eq "framing/rshub exits 0" "$HUB_RC" 0
hub_asan_check W

# -------------------------------------------------------------- NAT64
note "NAT64 addresses are judged by the IPv4 address they embed"
hub_start N --config "$TMP/hub.conf" --redis-prefix rsN: --verify-timeout 2s ||
    { bad "rshub starts without --callback-allow"; finish; }
for a in "64:ff9b::7f00:1" "64:ff9b::a00:1" "64:ff9b::c0a8:101" "64:ff9b::a9fe:a9fe"; do
    r=$(ws_sub N "$U/t" "http://[$a]:${CB_PORT[E]}/n/1")
    expect_eq "nat64/callback [$a]: 403" "$(status_of "$r")" 403
done
hub_stop N TERM 10
expect_eq "nat64/rshub exits 0" "$HUB_RC" 0
hub_asan_check N

finish
