#!/usr/bin/env bash
# test_rspub.sh - rspub against a real rshub on loopback, backed by a private
# redis-server (unix socket, no persistence). The hub runs --open and also
# has one closed topic with a token. A small Python fake hub (Debian's
# python3) covers what a real hub won't do on demand: stalling, a long
# Retry-After, a 500, and logging every request so we can prove nothing
# was sent. Checks the exit codes 0/1/2/3, the printed id, the backlog, the
# stored document, tokens, retries and the config file.
# Needs RS_BUILD_DIR (ctest sets it). Stops only the processes it started.
set -u

build=${RS_BUILD_DIR:?RS_BUILD_DIR not set}
rspub=$build/tools/rspub
rshub=$build/hub/rshub
rsdoc=$build/tools/rsdoc
here=$(cd "$(dirname "$0")" && pwd)
data=${RS_TEST_DATA:-$here/../data}
py=/usr/bin/python3     # Debian's: it has the websockets module
# Loopback only: a proxy from the environment must not get in the way.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
unset RSPUB_TOKEN
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

pass=0
fail=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rspub-test.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() {
    fail=$((fail + 1))
    echo "FAIL $1"
    [ -n "${2:-}" ] && printf '%s\n' "$2" | sed 's/^/     | /'
}

# run CMD...: keeps stdout in $out, stderr in $err, the exit status in $rc.
run() {
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    out=$(cat "$tmp/out")
    err=$(cat "$tmp/err")
}
show() { printf 'exit %s\nstdout: %s\nstderr: %s' "$rc" "$out" "$err"; }
want_rc() {
    if [ "$rc" -eq "$2" ]; then ok "$1 (exit $rc)"; else bad "$1: exit $rc, want $2" "$(show)"; fi
}
# out_has / err_has NAME PATTERN (grep -E)
out_has() {
    if printf '%s\n' "$out" | grep -Eq -- "$2"; then ok "$1"; else bad "$1: stdout lacks /$2/" "$(show)"; fi
}
err_has() {
    if printf '%s\n' "$err" | grep -Eq -- "$2"; then ok "$1"; else bad "$1: stderr lacks /$2/" "$(show)"; fi
}
same() {
    if [ "$2" = "$3" ]; then ok "$1"; else bad "$1: got '$2', want '$3'"; fi
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# wait_for FILE: until it exists and is not empty (10 s).
wait_for() {
    for _ in $(seq 100); do
        [ -s "$1" ] && return 0
        sleep 0.1
    done
    return 1
}

# ------------------------------------------------------------ redis, hub
start_redis() {
    redis-server --port 0 --unixsocket "$tmp/redis.sock" --unixsocketperm 700 \
        --save "" --appendonly no --dir "$tmp" >>"$tmp/redis.log" 2>&1 &
    redis_pid=$!
    pids+=("$redis_pid")
    for _ in $(seq 100); do
        [ "$(redis-cli -s "$tmp/redis.sock" ping 2>/dev/null)" = PONG ] && return 0
        sleep 0.1
    done
    echo "redis-server did not start"; cat "$tmp/redis.log"; exit 1
}
start_redis

token=s3cret-token-for-news
news=http://example.com/news
cat >"$tmp/hub.conf" <<EOF
[topic news]
uri = $news
kind = change
token = $token
EOF
"$rshub" --listen 127.0.0.1:0 --redis "unix://$tmp/redis.sock" --open \
    --max-body 1M --config "$tmp/hub.conf" --ready-file "$tmp/ready" \
    --log-file "$tmp/hub.log" &
pids+=($!)
wait_for "$tmp/ready" || { echo "rshub did not start"; cat "$tmp/hub.log"; exit 1; }
http=$(sed -E 's/.*"http":([0-9]+).*/\1/' "$tmp/ready")
ws=$(sed -E 's/.*"ws":([0-9]+).*/\1/' "$tmp/ready")
hub=http://127.0.0.1:$http/hub

# topic_get URI name|length: from GET /topics ("" / 0 for an unknown topic)
topic_get() {
    "$py" - "$http" "$1" "$2" <<'EOF'
import json, sys, urllib.request
port, uri, field = sys.argv[1:4]
url = "http://127.0.0.1:%s/topics" % port
for t in json.load(urllib.request.urlopen(url, timeout=5)):
    if t["topic"] == uri:
        print(t["name"] if field == "name" else t["backlog"]["length"])
        break
else:
    print("" if field == "name" else 0)
EOF
}

# stored NAME ID: the body the hub stored (stream rshub:s:NAME, field b)
stored() {
    redis-cli -s "$tmp/redis.sock" --raw EVAL \
        "local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])[1]
         for i = 1, #e[2], 2 do if e[2][i] == 'b' then return e[2][i + 1] end end" \
        1 "rshub:s:$1" "$2"
}

# ws_fetch NAME ID FILE: replay the channel from since=0 until the message
# annotated with ID arrives; save it in FILE.
ws_fetch() {
    "$py" - "ws://127.0.0.1:$ws/channel/$1?since=0" "$2" "$3" <<'EOF'
import asyncio, sys, websockets
url, want, path = sys.argv[1:4]
async def main():
    async with websockets.connect(url, open_timeout=5) as ws:
        while True:
            m = await asyncio.wait_for(ws.recv(), 5)
            if 'hub:id="%s"' % want in m:
                with open(path, "w") as f:
                    f.write(m)
                return
asyncio.run(main())
EOF
}

# ------------------------------------------------------------- fake hub
cat >"$tmp/fake.py" <<'EOF'
# Answers POSTs by path; logs "path|content-type|link|authorization" per
# request. Binds 127.0.0.1:0 and writes its port to PORTFILE.
import http.server, os, socketserver, sys, time
portfile, log = sys.argv[1], sys.argv[2]

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, code, body, hdrs=()):
        b = (body + "\n").encode()
        self.send_response(code)
        for k, v in hdrs:
            self.send_header(k, v)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        h = self.headers
        with open(log, "a") as f:
            f.write("|".join([self.path, h.get("Content-Type", "-"),
                              h.get("Link", "-"),
                              h.get("Authorization", "-")]) + "\n")
        if self.path == "/stall":
            time.sleep(30)
        elif self.path == "/accept":
            self.reply(202, "accepted 7-0", [("X-Hub-Id", "7-0"),
                       ("X-Hub-Channel", "ws://127.0.0.1:1/channel/fake")])
        elif self.path == "/busy":
            self.reply(503, "error: busy", [("Retry-After", "2")])
        elif self.path == "/later":
            self.reply(503, "error: come back tomorrow",
                       [("Retry-After", "3600")])
        elif self.path == "/oops":
            self.reply(500, "error: oops")
        elif self.path == "/moved":
            self.reply(307, "moved", [("Location", "/accept")])
        elif self.path == "/toobig":
            self.reply(413, "error: too big")
        else:
            self.reply(400, "error: bad request")

class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

s = S(("127.0.0.1", 0), H)
with open(portfile + ".tmp", "w") as f:
    f.write(str(s.server_address[1]))
os.rename(portfile + ".tmp", portfile)
s.serve_forever()
EOF
"$py" "$tmp/fake.py" "$tmp/fake.port" "$tmp/fake.log" &
pids+=($!)
wait_for "$tmp/fake.port" || { echo "fake hub did not start"; exit 1; }
fake=http://127.0.0.1:$(cat "$tmp/fake.port")
touch "$tmp/fake.log"
requests() { grep -c "^/$1|" "$tmp/fake.log"; }

# A loopback port nobody listens on.
down=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

notif=$data/valid/notif-2017-changelist-notification.xml
framework=$data/valid/notif-alpha-ex5.1-framework-notification.xml

# ------------------------------------------------------------ help, usage
run "$rspub" --help
want_rc "--help" 0
out_has "--help documents the exit codes" '^Exit status: 0 accepted; 1 rejected'
out_has "--help lists the entry options" '--change=TYPE'
run "$rspub" --version
want_rc "--version" 0
run "$rspub" --bogus "$notif"
want_rc "unknown option" 2
err_has "unknown option named" "unknown option '--bogus'"
run "$rspub" --hub "$hub" "$notif"
want_rc "no --topic" 2
run "$rspub" --hub "$hub" --topic "$news" --loc http://example.com/a --change created
want_rc "--loc before --change" 2
run "$rspub" --hub "$hub" --topic "$news" a.xml b.xml
want_rc "two files" 2
run "$rspub" --hub ftp://127.0.0.1/ --topic "$news" "$notif"
want_rc "--hub not http" 2
run "$rspub" --hub "$hub" --topic "$news" --up http://example.com/cl.xml \
    --change moved --loc http://example.com/a
want_rc "bad --change value" 2
run "$rspub" --hub "$hub" --topic "$news" --change created --loc http://example.com/a
want_rc "built without --up" 2
run "$rspub" --hub "$hub" --topic "$news" --up http://example.com/cl.xml "$notif" \
    --change created --loc http://example.com/a
want_rc "FILE and --change together" 2

# --------------------------------------------------------- publish a file
t1=http://example.com/dataset1/changes
before=$(topic_get "$t1" length)
run "$rspub" --hub "$hub" --topic "$t1" "$notif"
want_rc "publish a file" 0
out_has "publish prints the id" '^[0-9]+-[0-9]+$'
same "publish prints one line" "$(printf '%s\n' "$out" | wc -l)" 1
id1=$out
same "backlog grew by one" "$(topic_get "$t1" length)" $((before + 1))
name1=$(topic_get "$t1" name)
same "the stored body is the file" "$(stored "$name1" "$id1")" "$(cat "$notif")"

run "$rspub" --hub "$hub" --topic "$t1" - <"$notif"
want_rc "publish stdin (-)" 0
out_has "stdin publish prints the id" '^[0-9]+-[0-9]+$'
run "$rspub" --hub "$hub" --topic "$t1" --verbose <"$notif"
want_rc "publish stdin (no operand)" 0
err_has "--verbose prints the channel" "channel ws://127\\.0\\.0\\.1:$ws/channel/$name1\$"
same "backlog grew by three" "$(topic_get "$t1" length)" $((before + 3))

# ------------------------------------------------- build one from flags
t2=http://example.com/dataset2/changes
entries=(--up http://example.com/dataset2/capabilitylist.xml
       --change updated --loc http://example.com/res1 --lastmod 2024-05-01T10:00:00Z
       --datetime 2024-05-01T10:00:01Z --hash md5:1584abdf8ebdc9802ac0c6a7402c03b6
       --hash sha-256:854f61290e2e197a11bc91063afce22e43f8ccc655237050ace766adc68dc784
       --length 8876 --type text/html
       --change deleted --loc=http://example.com/res2 --datetime=2024-05-01T10:00:02Z)
run "$rspub" --dry-run "${entries[@]}"
want_rc "--dry-run of a built document" 0
printf '%s\n' "$out" >"$tmp/built.xml"
run "$rsdoc" validate --strict "$tmp/built.xml"
want_rc "the built document is strictly valid" 0
out_has "rsdoc sees a 2-entry change notification" 'OK changelist-notification urlset 2 entries'

run "$rspub" --hub "$hub" --topic "$t2" -v "${entries[@]}"
want_rc "publish a built document" 0
id2=$out
name2=$(topic_get "$t2" name)
err_has "built: --verbose prints the channel" "channel ws://.*/channel/$name2\$"
same "built: the hub stored what --dry-run printed" "$(stored "$name2" "$id2")" "$(cat "$tmp/built.xml")"
if ws_fetch "$name2" "$id2" "$tmp/ws.xml" 2>"$tmp/ws.err"; then
    ok "built: replayed over WebSocket (since=0)"
else
    bad "built: WebSocket replay" "$(cat "$tmp/ws.err")"
fi
run "$rsdoc" validate "$tmp/ws.xml"
want_rc "built: the replayed notification validates" 0
out_has "built: replayed has both entries" 'OK changelist-notification urlset 2 entries'
if grep -q 'md5:1584abdf8ebdc9802ac0c6a7402c03b6 sha-256:854f6' "$tmp/ws.xml" &&
   grep -q '<lastmod>2024-05-01T10:00:00Z</lastmod>' "$tmp/ws.xml"; then
    ok "built: hashes and lastmod arrived"
else
    bad "built: hashes and lastmod arrived" "$(cat "$tmp/ws.xml")"
fi

run "$rspub" --dry-run --up http://example.com/cl.xml --change created --loc http://example.com/now
want_rc "default datetime" 0
out_has "default datetime is now" "datetime=\"$(date -u +%Y-%m-%d)T"

t3=http://example.com/dataset2/framework
run "$rspub" --hub "$hub" --topic "$t3" --framework --up http://example.com/cl.xml \
    --change created --loc http://example.com/resourcelist.xml --capability resourcelist \
    --change updated --loc http://example.com/changelist.xml --capability changelist
want_rc "publish a built framework notification" 0
stored "$(topic_get "$t3" name)" "$out" >"$tmp/fw.xml"
run "$rsdoc" validate --strict "$tmp/fw.xml"
out_has "framework: stored document is a framework-notification" 'OK framework-notification urlset 2 entries'

run "$rspub" --dry-run --framework --up http://example.com/cl.xml \
    --change deleted --loc http://example.com/resourcelist.xml --capability resourcelist
want_rc "framework: a change the rules forbid" 1
err_has "framework: the writer says why" 'not permitted for a resourcelist'
run "$rspub" --dry-run --up http://example.com/cl.xml --change created --loc /relative
want_rc "built: relative --loc" 1
err_has "built: the writer names the entry" 'entry 1: <loc> "/relative" is not an absolute'
run "$rspub" --dry-run --up http://example.com/cl.xml --change created --loc http://example.com/a --capability resourcelist
want_rc "built: --capability without --framework" 2

# --------------------------------------------------------- invalid input
bad_doc=$data/invalid/change-notification-entry-without-change.xml
run "$rspub" --hub "$fake/accept" --topic "$t1" "$bad_doc"
want_rc "invalid document" 1
err_has "invalid: FILE:LINE: error: MESSAGE" "^${bad_doc//./\\.}:[0-9]+: error: "
same "invalid: nothing sent" "$(requests accept)" 0
run "$rspub" --hub "$fake/accept" --topic "$t1" "$data/valid/core-ex14-resourcelist.xml"
want_rc "not a notification" 1
err_has "not a notification: says so" 'capability "resourcelist" is not a notification'
same "not a notification: nothing sent" "$(requests accept)" 0
run "$rspub" --hub "$fake/accept" --topic "$t1" "$tmp/no-such.xml"
want_rc "missing file" 1

# Over the hub's --max-body: refused from Content-Length, before the body
# is sent, and libevent's HTML error page is not printed as the reason.
"$py" - >"$tmp/big.xml" <<'EOF'
print('<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
      'xmlns:rs="http://www.openarchives.org/rs/terms/">'
      '<rs:md capability="changelist-notification"/>')
for i in range(12000):
    print('<url><loc>http://example.com/%s/%d</loc>'
          '<rs:md change="updated" datetime="2024-01-01T00:00:00Z"/></url>'
          % ("x" * 40, i))
print('</urlset>')
EOF
run "$rspub" --hub "$hub" --topic "$t1" --retries 3 "$tmp/big.xml"
want_rc "over the hub's body limit" 1
err_has "body limit: 413, one line" '^rspub: the hub refused the notification: HTTP 413 [A-Za-z ]*(: error: .*)?$'

# --------------------------------------------------------------- dry run
run "$rspub" --dry-run --hub "$fake/accept" --topic "$t1" "$notif"
want_rc "--dry-run of a file" 0
same "--dry-run prints the file" "$out" "$(cat "$notif")"
same "--dry-run sends nothing" "$(requests accept)" 0

# ----------------------------------------------------- the wire, by fake
printf '%s\n' "$token" >"$tmp/tok"
chmod 600 "$tmp/tok"
run "$rspub" --hub "$fake/accept" --topic "$t1" --token-file "$tmp/tok" "$notif"
want_rc "fake: accepted" 0
same "fake: id from X-Hub-Id" "$out" 7-0
same "fake: headers on the wire" "$(tail -n 1 "$tmp/fake.log")" \
    "/accept|application/xml|<$t1>; rel=\"self\", <$fake/accept>; rel=\"hub\"|Bearer $token"

# ------------------------------------------------------------ the tokens
nb=$(topic_get "$news" length)
run "$rspub" --hub "$hub" --topic "$news" --token-file "$tmp/tok" "$notif"
want_rc "right token" 0
out_has "right token: id printed" '^[0-9]+-[0-9]+$'

printf '  %s \r\nsecond line ignored\n' "$token" >"$tmp/tok-spaced"
chmod 600 "$tmp/tok-spaced"
run "$rspub" --hub "$hub" --topic "$news" --token-file "$tmp/tok-spaced" "$notif"
want_rc "token: first line, trimmed" 0

printf 'not-the-token\n' >"$tmp/tok-wrong"
chmod 600 "$tmp/tok-wrong"
run "$rspub" --hub "$hub" --topic "$news" --token-file "$tmp/tok-wrong" -v "$notif"
want_rc "wrong token" 1
err_has "wrong token: the hub's message" 'HTTP 403 Forbidden: error: wrong token'
same "wrong token: 4xx is never retried" "$(grep -c 'attempt ' <<<"$err")" 1

run "$rspub" --hub "$hub" --topic "$news" "$notif"
want_rc "missing token" 1
err_has "missing token: the hub's message" 'HTTP 401 Unauthorized: error: this topic needs Authorization: Bearer'

cp "$tmp/tok" "$tmp/tok-open"
chmod 644 "$tmp/tok-open"
run "$rspub" --hub "$fake/accept" --topic "$news" --token-file "$tmp/tok-open" "$notif"
want_rc "token file readable by others" 1
err_has "readable token file: clear error" 'readable by group or others \(mode 0644\).*--insecure-token-file'
same "readable token file: nothing sent" "$(requests accept)" 1
run "$rspub" --hub "$hub" --topic "$news" --token-file "$tmp/tok-open" --insecure-token-file "$notif"
want_rc "--insecure-token-file" 0

run env RSPUB_TOKEN="$token" "$rspub" --hub "$hub" --topic "$news" "$notif"
want_rc "token from RSPUB_TOKEN" 0
run "$rspub" --hub "$hub" --topic "$news" --token-file "$tmp/no-such-token" "$notif"
want_rc "token file missing" 1
same "news backlog grew by four" "$(topic_get "$news" length)" $((nb + 4))

# ----------------------------------------------------------- config file
cat >"$tmp/rspub.conf" <<EOF
# what a Source's cron job would keep
hub = http://127.0.0.1:$down/hub
topic = $news
token-file = $tmp/tok
retries = 0
EOF
run "$rspub" --config "$tmp/rspub.conf" --hub "$hub" "$notif"
want_rc "config file, --hub flag wins" 0
run "$rspub" --config "$tmp/rspub.conf" "$notif"
want_rc "config file's hub is down" 3
sed -i "s|^hub = .*|hub = $hub|" "$tmp/rspub.conf"
run "$rspub" -c "$tmp/rspub.conf" "$notif"
want_rc "config file alone" 0

# --------------------------------------------------- hub unavailable (3)
t0=$(now_ms)
run "$rspub" --hub "http://127.0.0.1:$down/hub" --topic "$t1" --retries 2 "$notif"
want_rc "hub down" 3
same "hub down: two retries announced" "$(grep -c 'retrying in' <<<"$err")" 2
err_has "hub down: gives up after 3 attempts" 'hub unavailable: .*\(3 attempts\)'
[ $(($(now_ms) - t0)) -lt 5000 ] && ok "hub down: backoff is short" || bad "hub down: took $(($(now_ms) - t0)) ms"

t0=$(now_ms)
run "$rspub" --hub "$fake/busy" --topic "$t1" --retries 1 "$notif"
el=$(($(now_ms) - t0))
want_rc "503 with Retry-After" 3
same "503: one retry" "$(requests busy)" 2
[ "$el" -ge 2000 ] && ok "503: waited Retry-After (${el} ms)" || bad "503: retried after ${el} ms, before Retry-After: 2"
err_has "503: the hub's message" 'HTTP 503 Service Unavailable: error: busy'

run "$rspub" --hub "$fake/later" --topic "$t1" --retries 3 "$notif"
want_rc "503 with a long Retry-After" 3
same "long Retry-After: no retry" "$(requests later)" 1
err_has "long Retry-After: says why" 'asks to retry in 3600 s'

run "$rspub" --hub "$fake/oops" --topic "$t1" --retries 3 "$notif"
want_rc "500" 3
same "500: not retried" "$(requests oops)" 1

run "$rspub" --hub "$fake/bad" --topic "$t1" --retries 3 "$notif"
want_rc "400 from the fake" 1
same "400: not retried" "$(requests bad)" 1

acc0=$(requests accept)
run "$rspub" --hub "$fake/moved" --topic "$t1" --retries 3 "$notif"
want_rc "a redirect: not stored" 1
err_has "...says where to, and what to do" "redirects to $fake/accept: .*give that URL as --hub"
same "...not followed" "$(requests moved) $(requests accept)" "1 $acc0"

run "$rspub" --hub "$fake/toobig" --topic "$t1" "$notif"
want_rc "413" 1
err_has "...says the document's size and to split it" \
    "the document is $(stat -c %s "$notif") bytes, more than the hub takes.*several notifications"

t0=$(now_ms)
run "$rspub" --hub "$fake/stall" --topic "$t1" --timeout 300ms --retries 1 "$notif"
el=$(($(now_ms) - t0))
want_rc "stalled hub" 3
same "stall: one retry" "$(requests stall)" 2
err_has "stall: timed out" '[Tt]imed out'
[ "$el" -lt 5000 ] && ok "stall: bounded by --timeout (${el} ms)" || bad "stall: took ${el} ms"

# Redis goes away under the real hub: 503, then retries succeed once it
# is back.
kill "$redis_pid"
wait "$redis_pid" 2>/dev/null
run "$rspub" --hub "$hub" --topic "$t1" --retries 0 "$notif"
want_rc "real hub without Redis" 3
err_has "real hub without Redis: 503" 'HTTP 503 Service Unavailable: error: not stored'
"$rspub" --hub "$hub" --topic "$t1" --retries 8 "$notif" >"$tmp/late.out" 2>"$tmp/late.err" &
late=$!
pids+=("$late")
sleep 1
start_redis
wait "$late"
rc=$?
out=$(cat "$tmp/late.out")
err=$(cat "$tmp/late.err")
want_rc "retries outlast a Redis restart" 0
out_has "after the restart: id printed" '^[0-9]+-[0-9]+$'
err_has "after the restart: 503 was retried" 'HTTP 503.*retrying in'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
