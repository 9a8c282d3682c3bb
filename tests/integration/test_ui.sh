#!/usr/bin/env bash
# test_ui.sh - the dashboards in a real browser (issue 17): rshub's /ui/
# and rssub's /ui/ on its metrics listener, loaded in headless Chromium
# (Debian's chromium and chromedriver, lib/browser.py) against real
# peers on loopback: a private Redis, rshub (open mode), rssource
# publishing a directory's changes to it, rssub mirroring it over the
# WebSocket channel. On the hub's page a change published while it
# watches appears in the live tail (the page's own WebSocket connection)
# and the counters and the rate chart move; a topic URI holding <script>
# and <img onerror> is shown as text; on a hub whose topics need a read
# token the page lists and tails them only once the token is typed in; on
# rssub's page the mirror is live and the applied change appears. The pages' headers (types, caching, a
# strict Content-Security-Policy) are checked with curl. A screenshot of
# each page is kept in $RS_BUILD_DIR/test-output/ui/. Skipped, saying
# why, without chromium.
# shellcheck source-path=SCRIPTDIR
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"

UICHECK=$RS_SOURCE_DIR/tests/integration/lib/ui_check.py
OUT=$RS_BUILD_DIR/test-output/ui

if ! why=$("$PY" "$UICHECK" check); then
    echo "skipped: $why"
    exit 0
fi
for b in "$RSSUB" "$RSSOURCE" "$RSHUB"; do
    [ -x "$b" ] || { bad "built: $b"; sub_finish; }
done
mkdir -p "$OUT"
rm -f "$OUT"/*.png

# ui_check PAGE ARGS...: run lib/ui_check.py, each of its lines a check.
ui_check() {
    local line rc
    while IFS= read -r line; do
        case $line in
            "ok   "*) ok "${line#ok   }" ;;
            "FAIL "*) bad "${line#FAIL }" ;;
            *) echo "$line" ;;
        esac
    done < <(timeout 60 "$PY" "$UICHECK" "$@" --tmp "$TMP" 2>&1)
    wait $! 2>/dev/null
    rc=$?
    [ "$rc" -eq 0 ] || bad "ui_check.py $1: exit $rc" \
        "$(tail -n 20 "$TMP/browser-$1/chromedriver.log" 2>/dev/null)"
}
# header_has NAME URL HEADER ERE: the GET response's HEADER matches ERE.
header_has() {
    local v
    v=$(curl -s --max-time 5 -D - -o /dev/null "$2" | tr -d '\r' |
        sed -n "s/^$3: //Ip" | head -n 1)
    if printf '%s' "$v" | grep -Eq -- "$4"; then ok "$1"; else bad "$1" "$3: $v"; fi
}
# topic_named URL KIND: the name of the hub's topic of KIND whose URI
# begins with URL (GET /topics).
topic_named() {
    curl -sf --max-time 5 "http://127.0.0.1:${HUB_HTTP[h]}/topics" |
        "$PY" -c 'import json, sys
for t in json.load(sys.stdin):
    if t["topic"].startswith(sys.argv[1]) and t["kind"] == sys.argv[2]:
        print(t["name"])
        break' "$1" "$2"
}

# shellcheck disable=SC2119 # no persistence wanted
redis_start || exit 1
hub_start h --open || exit 1
H=http://127.0.0.1:${HUB_HTTP[h]}

note "rshub's page: headers"
header_has "/ui/ is HTML" "$H/ui/" Content-Type '^text/html; charset=utf-8$'
header_has "/ui/ has a strict Content-Security-Policy (scripts from the hub only)" \
    "$H/ui/" Content-Security-Policy \
    "^default-src 'none'; script-src 'self'; .*connect-src 'self' ws://127\.0\.0\.1:${HUB_WS[h]}$"
header_has "/ui/ is not to be sniffed" "$H/ui/" X-Content-Type-Options '^nosniff$'
header_has "/ui/ is revalidated (no-cache, ETag)" "$H/ui/" Cache-Control '^no-cache$'
header_has "/ui/app.js is JavaScript" "$H/ui/app.js" Content-Type '^text/javascript'
header_has "/ui/style.css is CSS" "$H/ui/style.css" Content-Type '^text/css'
header_has "/ui/node.json is JSON, not stored" "$H/ui/node.json" Cache-Control '^no-store$'
check "/ui/node.json names this node and counts" bash -c \
    "curl -sf '$H/ui/node.json' | '$PY' -c 'import json,sys; n=json.load(sys.stdin); assert len(n[\"node\"]) == 32 and n[\"publish\"][\"accepted\"] == 0 and n[\"redis_up\"]'"
etag=$(curl -s -D - -o /dev/null "$H/ui/app.js" | tr -d '\r' | sed -n 's/^ETag: //Ip')
expect_eq "/ui/app.js with its ETag: 304" \
    "$(curl -s -o /dev/null -w '%{http_code}' -H "If-None-Match: $etag" "$H/ui/app.js")" 304
expect_eq "/ui redirects to /ui/" \
    "$(curl -s -o /dev/null -w '%{http_code} %{redirect_url}' "$H/ui")" "301 $H/ui/"
expect_eq "/ui/missing.js: 404" \
    "$(curl -s -o /dev/null -w '%{http_code}' "$H/ui/missing.js")" 404
# The page never takes markup from the data: a topic URI full of it.
XSS_URI='http://example.org/x"><script>window.__pwned=1</script><img/src=x/onerror=window.__pwned=2>'
XSS_NAME=$(curl -sf --max-time 5 --data-urlencode "topic=$XSS_URI" \
    --data-urlencode kind=change "$H/topics" |
    "$PY" -c 'import json, sys; print(json.load(sys.stdin)["name"])')
check "a topic whose URI holds markup is registered" test -n "$XSS_NAME"

D=$TMP/src
M=$TMP/mirror
mkdir -p "$D"
for i in 1 2 3; do printf 'file %s\n' "$i" >"$D/f$i.txt"; done
if src_start s "$D" --hub "$H/hub"; then ok "rssource starts (--hub)"; else bad "rssource starts"; sub_finish; fi
B=$(src_url s)
printf 'first\n' >"$D/first.txt"   # its first publish registers the topic
check "rssource's change topic is on the hub" \
    wait_until 15 bash -c "[ -n \"\$(curl -sf '$H/topics' | grep -F '\"kind\": \"change\"' )\" ]"
TOPIC=$(topic_named "$B" change)
check "the change topic's name (got '$TOPIC')" test -n "$TOPIC"
if sub_start s "$B" "$M" "$TMP/sub.db"; then
    ok "rssub run: first sync applied"
else
    bad "rssub run" "$(tail -n 30 "${SUB_LOG[s]}")"
    sub_finish
fi
check "rssub's channel is connected" \
    wait_until 15 bash -c "grep -Eq 'msg=\"?channel connected\"?' '${SUB_LOG[s]}'"

note "rshub's page in Chromium"
ui_check hub --url "$H/ui/" --tail "$TOPIC" --touch "$D/seen-by-hub.txt" \
    --loc "${B}seen-by-hub.txt" --xss-name "$XSS_NAME" --xss-uri "$XSS_URI" \
    --shot "$OUT/rshub.png"

note "rssub's page: headers and /status.json"
S=http://127.0.0.1:${SUB_METRICS[s]}
header_has "rssub /ui/ is HTML" "$S/ui/" Content-Type '^text/html; charset=utf-8$'
header_has "rssub /ui/ has a strict Content-Security-Policy" "$S/ui/" \
    Content-Security-Policy "^default-src 'none'; script-src 'self'; .*connect-src 'self'$"
header_has "rssub /status.json is JSON, not stored" "$S/status.json" Cache-Control '^no-store$'
check "rssub /status.json: ready, one Capability List, live" bash -c \
    "curl -sf '$S/status.json' | '$PY' -c 'import json,sys; s=json.load(sys.stdin); assert s[\"state\"] == \"ready\" and len(s[\"lists\"]) == 1 and s[\"lists\"][0][\"mode\"] == \"live\", s'"
check "rssub's metrics listener still serves /metrics" bash -c \
    "curl -sf '$S/metrics' | grep -q '^rssub_pending '"
check "rssub's metrics count the fetches saved" bash -c \
    "curl -sf '$S/metrics' | grep -q '^rssub_fetch_saved 0$'"
expect_eq "rssub /other: 404" "$(curl -s -o /dev/null -w '%{http_code}' "$S/other")" 404

note "rssub's page in Chromium"
ui_check sub --url "$S/ui/" --touch "$D/seen-by-sub.txt" \
    --loc "${B}seen-by-sub.txt" --shot "$OUT/rssub.png"

note "rshub's page, private topics (a hub-wide read token)"
printf 'ui-read-token-1\n' >"$TMP/read.tok"
chmod 600 "$TMP/read.tok"
hub_start p --open --read-token-file "$TMP/read.tok" --redis-prefix p: || exit 1
P=http://127.0.0.1:${HUB_HTTP[p]}
PRIV_NAME=$(curl -sf --max-time 5 --data-urlencode topic=http://example.org/private \
    --data-urlencode kind=change "$P/topics" |
    "$PY" -c 'import json, sys; print(json.load(sys.stdin)["name"])')
check "a private topic is registered" test -n "$PRIV_NAME"
ui_check private --url "$P/ui/" --tail "$PRIV_NAME" --token ui-read-token-1 \
    --publish "$PY $HUBTOOL request --http ${HUB_HTTP[p]} --topic http://example.org/private --gen change --n 42" \
    --loc http://example.com/res/42/0

for p in rshub rssub; do
    check "$p.png kept in test-output/ui, a PNG of some size" bash -c \
        "[ \$(stat -c %s '$OUT/$p.png' 2>/dev/null || echo 0) -gt 5000 ] &&
         [ \"\$(head -c 4 '$OUT/$p.png' | tail -c 3)\" = PNG ]"
done
sub_finish
