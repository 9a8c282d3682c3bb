#!/usr/bin/env bash
# test_hub_publish.sh - rshub's publish contract (docs/protocol.md 2, 3, 6)
# against a real redis-server on loopback: what a WebSocket client receives
# is the published document byte for byte plus exactly the documented id
# annotation; two topics stay on their own channels; each bad publish gets
# its documented status and stores nothing; the status endpoints answer as
# documented; SIGTERM exits 0 with a clean ASan log. Then the
# configuration: a repeated [topic] section or scalar key, a bad topic
# value (an overflowing backlog-max-age, an empty token, a URI that is
# none) and a WebSocket port past 65535 are refused (exit 2, FILE:LINE);
# topic booleans take what global ones take; no Redis password (user info,
# password=, sentinel-password=) reaches rshub's log or its errors.
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"

NEWS_URI=http://example.com/dataset1/changes
FW_URI=http://example.com/dataset1/framework
TOKEN=s3cret
DATA=${RS_TEST_DATA:-$RS_SOURCE_DIR/tests/data}

cat >"$TMP/hub.conf" <<EOF
[topic news]
uri = $NEWS_URI
kind = change
token = $TOKEN
token = second-token

[topic fw]
uri = $FW_URI
kind = framework
EOF

# --------------------------------------------------------------- documents
# Published as they are: the delivered message must be these bytes plus
# the annotation. Prologs, CRLF, a BOM, a prefixed root, odd spacing after
# the root name: the places where "inserted right after the root element's
# name" can go wrong.
D=$TMP/docs
mkdir -p "$D"
NS='xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
RSNS='xmlns:rs="http://www.openarchives.org/rs/terms/"'
printf '<?xml version="1.0" encoding="UTF-8"?>\r\n<!-- caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac <urlset> in a comment -->\r\n<?rshub-test keep me?>\r\n<urlset\t%s %s>\r\n  <rs:md capability="changelist-notification"/>\r\n  <url><loc>http://example.com/r%%C3%%A9s</loc><lastmod>2024-01-02T03:04:05Z</lastmod><rs:md change="created" datetime="2024-01-02T03:04:05Z"/></url>\r\n</urlset>\r\n' \
    "$NS" "$RSNS" >"$D/prolog-crlf.xml"
printf '\xef\xbb\xbf<urlset %s %s><rs:md capability="changelist-notification"/><url><loc>http://example.com/bom</loc><rs:md change="deleted" datetime="2024-01-02T03:04:05Z"/></url></urlset>' \
    "$NS" "$RSNS" >"$D/bom-oneline.xml"
printf '<sm:urlset xmlns:sm="http://www.sitemaps.org/schemas/sitemap/0.9" %s>\n <rs:md capability="changelist-notification"/>\n <sm:url><sm:loc>http://example.com/p</sm:loc><rs:md change="updated" datetime="2024-01-02T03:04:05Z"/></sm:url>\n</sm:urlset>\n' \
    "$RSNS" >"$D/prefixed-root.xml"
printf "<urlset\n xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'\n xmlns:rs='http://www.openarchives.org/rs/terms/'><rs:md capability='changelist-notification'/><url><loc>http://example.com/q?a=1&amp;b=2</loc><rs:md change='updated' datetime='2024-01-02T03:04:05Z'/></url></urlset>" \
    >"$D/newline-quotes.xml"
NEWS_DOCS=("$DATA/valid/notif-2017-changelist-notification.xml"
           "$DATA/valid/notif-2017-changelist-notification-burst.xml"
           "$DATA/valid/notif-alpha-ex4.1-change-notification.xml"
           "$D/prolog-crlf.xml" "$D/bom-oneline.xml" "$D/prefixed-root.xml"
           "$D/newline-quotes.xml")
FW_DOCS=("$DATA/valid/notif-2017-framework-notification-index.xml"
         "$DATA/valid/notif-alpha-ex5.1-framework-notification.xml"
         "$DATA/valid/notif-alpha-ex5.2-framework-notification-multi.xml")

redis_start || { bad "redis-server starts"; finish; }
hub_start A --config "$TMP/hub.conf" --max-body 2K ||
    { bad "rshub starts"; finish; }
HP=${HUB_HTTP[A]}
WP=${HUB_WS[A]}

# ------------------------------------------------------------ status first
note "status endpoints"
r=$(hub_req A --method GET --path /healthz)
expect_eq "status/healthz: 200 ok" "$(status_of "$r") $(body_of "$r")" "200 ok"
r=$(hub_req A --method GET --path /readyz)
expect_eq "status/readyz: 200 ready" "$(status_of "$r") $(body_of "$r")" "200 ready"
check "status/metrics: Prometheus text format" ht metrics --http "$HP"
check "status/topics: configured topics with empty backlogs" \
    ht topics-check --http "$HP" --ws "$WP" --name news --uri "$NEWS_URI" \
    --kind change --subscribers 0

# ------------------------------------------------- publish -> WebSocket
note "publish -> WebSocket"
# each ends once it has its topic's documents (--idle only bounds a
# silence: on a loaded machine the first publish may come seconds later)
bg_ht subnews sub --ws "$WP" --chan news --count "${#NEWS_DOCS[@]}" --idle 15 \
    --timeout 30 --save-data --out "$TMP/news.sub" --ready "$TMP/news.ready"
bg_ht subfw sub --ws "$WP" --chan fw --count "${#FW_DOCS[@]}" --idle 15 \
    --timeout 30 --save-data --out "$TMP/fw.sub" --ready "$TMP/fw.ready"
check "publish/subscribers attached to news and fw" \
    bash -c "ht() { '$PY' '$HUBTOOL' \"\$@\"; }
             ht wait-subs --http $HP --name news --n 1 &&
             ht wait-subs --http $HP --name fw --n 1"

r=$(hub_req A --topic "$NEWS_URI" --token "$TOKEN" --file "${NEWS_DOCS[0]}")
id0=$(header_of "$r" X-Hub-Id)
expect_eq "publish/202 with X-Hub-Id and 'accepted ID'" \
    "$(status_of "$r") $(body_of "$r")" "202 accepted $id0"
expect_eq "publish/X-Hub-Channel is the news WebSocket URI" \
    "$(header_of "$r" X-Hub-Channel)" "ws://127.0.0.1:$WP/channel/news"
echo "$id0 ${NEWS_DOCS[0]}" >"$TMP/news.pairs"
check "publish/the other news documents accepted (second token too)" \
    bash -c "'$PY' '$HUBTOOL' publish-many --http $HP --topic '$NEWS_URI' \
             --token second-token ${NEWS_DOCS[*]:1} >>'$TMP/news.pairs'"
check "publish/framework documents accepted on fw (no token needed)" \
    bash -c "'$PY' '$HUBTOOL' publish-many --http $HP --topic '$FW_URI' \
             ${FW_DOCS[*]} >'$TMP/fw.pairs'"
bg_wait subnews 40
bg_wait subfw 40
check "publish/news: byte-identical apart from the annotation, parses, hub:id = X-Hub-Id" \
    ht verify --sub "$TMP/news.sub" --pairs "$TMP/news.pairs"
check "publish/fw: byte-identical apart from the annotation, parses, hub:id = X-Hub-Id" \
    ht verify --sub "$TMP/fw.sub" --pairs "$TMP/fw.pairs"
check "publish/news channel got exactly the news ids, in order" \
    ht compare --sub "$TMP/news.sub" --want "$TMP/news.pairs"
check "publish/fw channel got exactly the fw ids, in order" \
    ht compare --sub "$TMP/fw.sub" --want "$TMP/fw.pairs"
check "status/subscribers back to 0 after the clients left" \
    ht wait-subs --http "$HP" --name news --n 0 --exact --timeout 5
NACCEPTED=$(cat "$TMP/news.pairs" "$TMP/fw.pairs" | wc -l)

# ---------------------------------------------------------- bad publishes
note "bad publishes: status, and nothing stored"
backlog_total() {
    echo $(( $(ht topic --http "$HP" --name news --get backlog.length) +
             $(ht topic --http "$HP" --name fw --get backlog.length) ))
}
BEFORE=$(backlog_total)
# reject NAME STATUS [HEADER-NAME HEADER-PREFIX] -- REQUEST-ARGS...
reject() {
    local name=$1 want=$2 hname='' hwant='' r st after problems=''
    shift 2
    if [ "$1" != -- ]; then hname=$1; hwant=$2; shift 2; fi
    shift
    r=$(hub_req A "$@")
    st=$(status_of "$r")
    [ "$st" = "$want" ] || problems+="status $st, want $want; "
    if [ -n "$hname" ]; then
        case "$(header_of "$r" "$hname")" in
            "$hwant"*) ;;
            *) problems+="$hname: '$(header_of "$r" "$hname")', want '$hwant...'; " ;;
        esac
    fi
    # 413 comes from libevent with its HTML page (docs/protocol.md 3)
    if [ "$want" != 405 ] && [ "$want" != 413 ]; then
        [ "$(body_of "$r" | grep -c .)" = 1 ] && body_of "$r" | grep -q '^error: ' ||
            problems+="body is not one 'error: ...' line; "
    fi
    after=$(backlog_total)
    [ "$after" = "$BEFORE" ] || problems+="backlogs grew from $BEFORE to $after; "
    if [ -z "$problems" ]; then ok "reject/$name"; else bad "reject/$name: $problems" "$r"; fi
}
TOK=(--topic "$NEWS_URI" --token "$TOKEN")
reject "not XML -> 400" 400 -- "${TOK[@]}" --data "this is not XML"
reject "malformed XML (truncated) -> 400" 400 -- "${TOK[@]}" \
    --file "$DATA/invalid/truncated-in-loc.xml"
reject "invalid UTF-8 (a WebSocket text frame must be UTF-8) -> 400" 400 -- \
    "${TOK[@]}" --file "$DATA/invalid/utf8-invalid-bytes.xml"
reject "DOCTYPE (billion laughs) -> 400" 400 -- "${TOK[@]}" \
    --file "$DATA/invalid/billion-laughs.xml"
reject "a resourcelist is not a notification -> 400" 400 -- "${TOK[@]}" \
    --gen resourcelist
reject "a capabilitylist is not a notification -> 400" 400 -- "${TOK[@]}" \
    --file "$DATA/valid/notif-2017-capabilitylist-websub.xml"
reject "missing Link -> 400" 400 -- --no-link --token "$TOKEN" --gen change
r=$(hub_req A --token "$TOKEN" --gen change --link "<$NEWS_URI; rel=self")
expect_eq "a Link header that cannot be read -> 400, said so (not 'missing')" \
    "$(status_of "$r") $(body_of "$r")" \
    "400 error: a Link header that cannot be read (\"<$NEWS_URI; rel=self\"): expected Link: <TOPIC-URI>; rel=\"self\""
reject "Link without rel=self -> 400" 400 -- --token "$TOKEN" --gen change \
    --link "<$NEWS_URI>; rel=\"alternate\", <http://127.0.0.1:$HP/hub>; rel=\"hub\""
reject "body over --max-body 2K -> 413" 413 -- "${TOK[@]}" --gen change --pad 3000
reject "announced Content-Length over the limit -> 413 before the body" 413 -- \
    "${TOK[@]}" --announce 100000000 --timeout 5
reject "unknown topic (closed mode) -> 404" 404 -- \
    --topic http://example.com/not-configured --token "$TOKEN" --gen change
reject "no token -> 401 + WWW-Authenticate: Bearer" 401 WWW-Authenticate Bearer -- \
    --topic "$NEWS_URI" --gen change
reject "Basic credentials -> 401" 401 WWW-Authenticate Bearer -- \
    --topic "$NEWS_URI" --gen change --auth "Basic dXNlcjpzM2NyZXQ="
reject "wrong token -> 403" 403 -- --topic "$NEWS_URI" --token wrong --gen change
reject "framework notification to a change topic -> 400" 400 -- "${TOK[@]}" \
    --gen framework
reject "change notification to a framework topic -> 400" 400 -- \
    --topic "$FW_URI" --gen change
reject "Content-Type text/plain -> 415" 415 -- "${TOK[@]}" --gen change \
    --ctype text/plain
reject "no Content-Type -> 415" 415 -- "${TOK[@]}" --gen change --ctype none
reject "GET /hub -> 405 + Allow: POST" 405 Allow POST -- --method GET
reject "form-encoded without hub.mode (WebSub) -> 400" 400 -- \
    --ctype application/x-www-form-urlencoded --data "hub.topic=$NEWS_URI"
# the +xml and text/xml spellings are accepted (and stored: count them)
for ct in text/xml "application/rss+xml; charset=utf-8"; do
    r=$(hub_req A "${TOK[@]}" --gen change --ctype "$ct")
    expect_eq "publish/Content-Type $ct accepted" "$(status_of "$r")" 202
    echo "$(header_of "$r" X-Hub-Id) -" >>"$TMP/news.pairs"
done
NACCEPTED=$((NACCEPTED + 2))

# ------------------------------------------------------- status endpoints
note "status endpoints after publishing"
check "status/metrics parses; rshub_publish_accepted_total = $NACCEPTED" \
    bash -c "v=\$('$PY' '$HUBTOOL' metrics --http $HP --get rshub_publish_accepted_total) &&
             [ \"\$v\" = $NACCEPTED ] || { echo \"got \$v\"; exit 1; }"
check "status/metrics: the tail has not paused and holds nothing (a quiet hub)" \
    bash -c "p=\$('$PY' '$HUBTOOL' metrics --http $HP --get rshub_fanout_tail_pauses_total) &&
             h=\$('$PY' '$HUBTOOL' metrics --http $HP --get rshub_fanout_tail_holds) &&
             [ \"\$p/\$h\" = 0/0 ] || { echo \"got \$p/\$h\"; exit 1; }"
check "status/topics: news fields, backlog length/first/last per docs" \
    ht topics-check --http "$HP" --ws "$WP" --name news --uri "$NEWS_URI" \
    --kind change --subscribers 0 --pairs "$TMP/news.pairs"
check "status/topics: fw fields and backlog per docs" \
    ht topics-check --http "$HP" --ws "$WP" --name fw --uri "$FW_URI" \
    --kind framework --subscribers 0 --pairs "$TMP/fw.pairs"
r=$(ht caplist --http "$HP" --name news 2>&1)
expect_eq "status/capabilitylist-entries news: WebSocket + WebSub entries parse" "$r" \
"ws://127.0.0.1:$WP/channel/news change-notification -
$NEWS_URI changelist-notification http://127.0.0.1:$HP/hub"
r=$(ht caplist --http "$HP" --name fw 2>&1)
expect_eq "status/capabilitylist-entries fw: framework-notification both" "$r" \
"ws://127.0.0.1:$WP/channel/fw framework-notification -
$FW_URI framework-notification http://127.0.0.1:$HP/hub"
r=$(hub_req A --method GET --path /topics/nope/capabilitylist-entries)
expect_eq "status/capabilitylist-entries of an unknown topic: 404" "$(status_of "$r")" 404

# ------------------------------------------- documents using the hub prefix
note "documents that already use the hub: prefix"
# A Source may use the prefix hub for a namespace of its own, or publish a
# document it got from a hub. The delivered message must still be one a
# plain client can parse, carrying this hub's id (or the hub refuses it).
printf '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/" xmlns:hub="http://other.example/ns" hub:flag="1">\n<rs:md capability="changelist-notification"/>\n<url><loc>http://example.com/h</loc><rs:md change="updated" datetime="2024-01-02T03:04:05Z"/></url>\n</urlset>\n' \
    >"$D/own-hub-prefix.xml"
LASTNEWS=$(ht topic --http "$HP" --name news --get backlog.last_id)
bg_ht subpfx sub --ws "$WP" --chan news --since "$LASTNEWS" --idle 2 \
    --timeout 20 --save-data --out "$TMP/pfx.sub"
for f in "$DATA/valid/notif-hub-annotated.xml" "$D/own-hub-prefix.xml"; do
    r=$(hub_req A "${TOK[@]}" --file "$f")
    echo "$(status_of "$r") $(header_of "$r" X-Hub-Id) $f" >>"$TMP/pfx.res"
done
bg_wait subpfx 25
while read -r st hid f; do
    n="prefix/$(basename "$f"): delivered well-formed with this hub's id, or refused 400"
    case $st in
        400) ok "$n (refused)" ;;
        202) check "$n" ht parses --sub "$TMP/pfx.sub" --id "$hid" ;;
        *) bad "$n: status $st" ;;
    esac
done <"$TMP/pfx.res"

# ------------------------------------------------- Redis refuses writes
# Redis out of memory under maxmemory (noeviction) answers the append
# with an error: not a timeout (504) and not "nothing stored" (503), but
# 502 with Redis' own words and Retry-After; a publish after it has room
# is accepted again.
note "Redis refuses writes (maxmemory)"
len0=$(ht topic --http "$HP" --name news --get backlog.length)
policy=$(rcli config get maxmemory-policy | tail -n 1)
used=$(rcli info memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p' | tr -d '\r')
rcli config set maxmemory-policy noeviction >/dev/null
rcli config set maxmemory $((used / 2)) >/dev/null
r=$(hub_req A "${TOK[@]}" --gen change)
# Redis reachable but taking no writes: a load balancer must stop sending
# publishes here (it was 200 "ready")
ready=$(hub_req A --method GET --path /readyz)
rcli config set maxmemory 0 >/dev/null
rcli config set maxmemory-policy "$policy" >/dev/null
expect_eq "oom/a publish Redis refuses: 502" "$(status_of "$r")" 502
expect_eq "oom/readyz 503 while Redis refuses writes" "$(status_of "$ready")" 503
check "oom/... saying so, with Redis' words" \
    grep -q "redis refuses writes: OOM" <<<"$(body_of "$ready")"
check "oom/... with Redis' words" grep -q "error: Redis refused it: OOM" <<<"$(body_of "$r")"
expect_eq "oom/... and Retry-After: 1" "$(header_of "$r" Retry-After)" 1
expect_eq "oom/nothing stored (the script stopped at its XADD)" \
    "$(ht topic --http "$HP" --name news --get backlog.length)" "$len0"
r=$(hub_req A "${TOK[@]}" --gen change)
expect_eq "oom/with room again: 202" "$(status_of "$r")" 202
expect_eq "oom/...and readyz 200 at once" \
    "$(status_of "$(hub_req A --method GET --path /readyz)")" 200

# ------------------------------------------------- configuration errors
note "configuration refused at start-up (exit 2, FILE:LINE)"
# refused_flags NAME WANT RSHUB-ARGS...: rshub with RSHUB-ARGS (and our
# Redis) exits 2 at once, saying WANT. An rshub that starts instead is
# stopped after 5 s (status 124).
refused_flags() {
    local name=$1 want=$2 out rc
    shift 2
    out=$(timeout 5 "$RSHUB" "$@" --redis "unix://$REDIS_SOCK" 2>&1)
    rc=$?
    if [ "$rc" = 2 ] && grep -qF -- "$want" <<<"$out"; then
        ok "$name"
    else
        bad "$name: exit $rc, want 2 saying '$want'" "$out"
    fi
}
# refused NAME WANT CONF-TEXT [RSHUB-ARGS...]: the same for rshub -c with
# CONF-TEXT (printf %b).
refused() {
    local name=$1 want=$2 text=$3
    shift 3
    printf '%b' "$text" >"$TMP/bad.conf"
    refused_flags "$name" "$want" -c "$TMP/bad.conf" --listen 127.0.0.1:0 \
        --ws-listen 127.0.0.1:0 "$@"
}
BC=$TMP/bad.conf
refused "config/a [topic] section given twice" \
    "$BC:5: [topic a] already defined at line 1" \
    '[topic a]\nuri = http://x.test/a\ntoken = tokA\n\n[topic a]\nuri = http://x.test/b\ntoken = tokB\n'
refused "config/...spelled with other spaces, after another section" \
    "$BC:5: [topic a] already defined at line 1" \
    '[topic a]\nuri = http://x.test/a\n[topic b]\nuri = http://x.test/b\n[ topic  a ]\nkind = change\n'
refused "config/uri twice in one section" \
    "$BC:3: [topic a] uri: already set at line 2" \
    '[topic a]\nuri = http://x.test/a\nuri = http://x.test/b\n'
refused "config/one uri for two topics" \
    "$BC:4: [topic b] uri: already the uri of [topic a] (line 2)" \
    '[topic a]\nuri = http://x.test/a\n[topic b]\nuri = http://x.test/a\n'
refused "config/a topic without uri" "$BC:2: [topic a] has no uri" \
    '[topic a]\nkind = change\n'
refused "config/backlog-max-age past 2^63 ms: refused, not wrapped" \
    "$BC:3: [topic a] backlog-max-age: expected a duration like" \
    '[topic a]\nuri = http://x.test/a\nbacklog-max-age = 18446744073709552s\n'
refused "config/backlog-max past --backlog-max's range" \
    "$BC:3: [topic a] backlog-max: expected an integer from 0 to 1000000000" \
    '[topic a]\nuri = http://x.test/a\nbacklog-max = 1000000001\n'
refused "config/an empty token" "$BC:3: [topic a] token: empty" \
    '[topic a]\nuri = http://x.test/a\ntoken =\n'
refused "config/a uri that is none" "$BC:2: [topic a] uri: " \
    '[topic a]\nuri = not a uri\n'
refused "config/a uri that is not http(s)" \
    "$BC:2: [topic a] uri: expected an absolute http(s) URI" \
    '[topic a]\nuri = ftp://x.test/a\n'
refused "config/kind: the message names every kind" \
    "$BC:3: [topic a] kind: expected change, framework or any" \
    '[topic a]\nuri = http://x.test/a\nkind = bogus\n'
refused_flags "config/--listen port 65535 without --ws-listen: exit 2" \
    "the WebSocket port (--listen's port + 1) would be 65536: give --ws-listen" \
    --listen 127.0.0.1:65535 --open

# a configuration holding tokens that others may read: told (a token file
# is refused for it; a configuration is not, not to stop a hub at upgrade)
printf '%s\n' '[topic t]' 'uri = http://x.test/t' 'token = tokT' >"$TMP/open.conf"
chmod 644 "$TMP/open.conf"
out=$(timeout 2 "$RSHUB" -c "$TMP/open.conf" --listen 127.0.0.1:0 \
    --ws-listen 127.0.0.1:0 --redis "unix://$REDIS_SOCK" 2>&1)
if grep -qF "open.conf is readable by group or others (mode 0644): chmod 600" <<<"$out"; then
    ok "config/tokens in a file others may read: warned"
else
    bad "config/tokens in a file others may read: no warning" "$out"
fi
chmod 600 "$TMP/open.conf"
out=$(timeout 2 "$RSHUB" -c "$TMP/open.conf" --listen 127.0.0.1:0 \
    --ws-listen 127.0.0.1:0 --redis "unix://$REDIS_SOCK" 2>&1)
if grep -q "readable by group" <<<"$out"; then
    bad "config/...mode 600: warned all the same" "$out"
else
    ok "config/...mode 600: not warned"
fi

# a --listen host that does not resolve: said so in the log's format
out=$(timeout 5 "$RSHUB" --listen nosuchhost.invalid:8080 --open \
    --log-format logfmt --redis "unix://$REDIS_SOCK" 2>&1)
if grep -q 'cannot listen on nosuchhost.invalid:8080: the host does not resolve' <<<"$out" &&
    ! grep -q '^\[warn\]' <<<"$out"; then
    ok "config/a --listen host that does not resolve: said, no bare libevent line"
else
    bad "config/a --listen host that does not resolve" "$out"
fi

# advertised URLs a client cannot use
refused_flags "config/--public-url not-a-url: exit 2" "--public-url: expected" \
    --listen 127.0.0.1:0 --open --public-url not-a-url
refused_flags "config/--ws-public-url http://x.test: exit 2" \
    "--ws-public-url: expected" --listen 127.0.0.1:0 --open \
    --ws-public-url http://x.test

note "configuration accepted: topic booleans as global ones"
printf '%s\n' '[topic p1]' 'uri = http://x.test/p1' 'read-private = on' \
    '[topic p2]' 'uri = http://x.test/p2' 'read-private = 1' 'kind = any' \
    'backlog-max-age = 106751991167d' >"$TMP/bool.conf"
if hub_start B -c "$TMP/bool.conf" --redis-prefix bool:; then
    ok "config/read-private = on and = 1, kind = any, the longest age: starts"
    expect_eq "config/...its topics private (hidden from /topics)" \
        "$(curl -s "http://127.0.0.1:${HUB_HTTP[B]}/topics" | grep -c 'x.test/p')" 0
    hub_stop B
    hub_asan_check B
else
    bad "config/read-private = on and = 1, kind = any, the longest age: starts"
fi

# ------------------------------------------------------------------ stop
note "SIGUSR1, SIGUSR2: told, not fatal"
# their default ends a process, and a logrotate recipe copied from another
# daemon sends SIGUSR1
kill -USR1 "${HUB_PID[A]}"
kill -USR2 "${HUB_PID[A]}"
sleep 0.5
check "rshub lives on" kill -0 "${HUB_PID[A]}"
check "...saying what the signals it acts on do" \
    grep -q 'SIGUSR1 ignored: SIGHUP reopens the log file' "${HUB_LOG[A]}"
kill -HUP "${HUB_PID[A]}"
check "SIGHUP is said (logging to stderr: nothing to reopen)" \
    wait_until 5 grep -q 'SIGHUP: reloading' "${HUB_LOG[A]}"
mkdir -p "$TMP/logs"
hub_start L --open --redis-prefix logs: --log-file "$TMP/logs/hub.log" ||
    bad "sighup/rshub starts with --log-file"
mv "$TMP/logs" "$TMP/logs.rotated"
kill -HUP "${HUB_PID[L]}"
check "sighup/a log file that cannot be reopened: its path and why, on the old one" \
    wait_until 5 grep -q "cannot reopen the log file $TMP/logs/hub.log: No such file or directory" \
    "$TMP/logs.rotated/hub.log"
mkdir -p "$TMP/logs"
kill -HUP "${HUB_PID[L]}"
check "sighup/...and once it can, the new file says so" \
    wait_until 5 grep -q "SIGHUP: log file $TMP/logs/hub.log reopened" "$TMP/logs/hub.log"
hub_stop L

note "SIGTERM"
hub_stop A TERM 10
expect_eq "sigterm/rshub exits 0" "$HUB_RC" 0
hub_asan_check A

# ------------------------------------------------------ Redis passwords
note "Redis passwords stay out of the log"
PW=s3cret-redis-pw
rcli config set requirepass "$PW" >/dev/null
hub_start P --open --redis-prefix pw: --redis "unix://$REDIS_SOCK?password=$PW" ||
    bad "password/rshub starts with ?password="
check "password/...and reaches Redis with it" ht wait-status \
    --http "${HUB_HTTP[P]}" --path /readyz --status 200 --timeout 10
check "password/...and logs the URL with *** for it" \
    grep -qF "redis=\"unix://$REDIS_SOCK?password=***\"" "${HUB_LOG[P]}"
hub_stop P
# no_redis_start NAME REDIS-URL: an open-mode rshub whose Redis nothing
# answers (port 1, 2): it starts all the same and says where; up to its
# ready-file (hub_start would wait for /readyz, which never comes).
no_redis_start() {
    local name=$1 ready=$TMP/$1.ready
    HUB_LOG[$name]=$TMP/$name.log
    HUB_LOGOFF[$name]=0
    HUB_ASAN_DONE[$name]=0
    "$RSHUB" --open --listen 127.0.0.1:0 --ws-listen 127.0.0.1:0 \
        --redis "$2" --ready-file "$ready" >"${HUB_LOG[$name]}" 2>&1 &
    HUB_PID[$name]=$!
    wait_file "$ready" 10
}
no_redis_start U 'redis://alice:s3cret-user-pw@127.0.0.1:1/2' ||
    bad "password/rshub starts with user info"
check "password/user info: redis://alice:***@127.0.0.1:1/2 logged" \
    grep -qF 'redis=redis://alice:***@127.0.0.1:1/2 ' "${HUB_LOG[U]}"
hub_stop U
no_redis_start S \
    'sentinel://:s3cret-node-pw@127.0.0.1:1,127.0.0.1:2/mymaster?sentinel-password=TOPSECRET-sent&db=3' ||
    bad "password/rshub starts with sentinel://"
check "password/sentinel://: both passwords *** in the log" \
    grep -qF 'redis="sentinel://:***@127.0.0.1:1,127.0.0.1:2/mymaster?sentinel-password=***&db=3"' \
    "${HUB_LOG[S]}"
hub_stop S
out=$(timeout 5 "$RSHUB" --open --listen 127.0.0.1:0 --ws-listen 127.0.0.1:0 \
    --redis 'redis://:s3cret-bad-port@127.0.0.1:99999' 2>&1)
rc=$?
expect_eq "password/a URL rshub refuses: exit 2" "$rc" 2
check "password/...its error shows redis://:***@127.0.0.1:99999" \
    grep -qF 'redis://:***@127.0.0.1:99999: bad port' <<<"$out"
leaked=0
for f in "${HUB_LOG[P]}" "${HUB_LOG[U]}" "${HUB_LOG[S]}"; do
    grep -qE 's3cret-|TOPSECRET' "$f" && leaked=$((leaked + 1))
done
grep -qE 's3cret-|TOPSECRET' <<<"$out" && leaked=$((leaked + 1))
expect_eq "password/no password in any log or error" "$leaked" 0
rcli -a "$PW" --no-auth-warning config set requirepass "" >/dev/null
finish
