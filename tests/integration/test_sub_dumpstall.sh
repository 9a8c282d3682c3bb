#!/usr/bin/env bash
# test_sub_dumpstall.sh - rssub --dump against a Source whose package
# download stalls: rssource --dump behind a small proxy (a real peer does
# not stall on demand) that sends half of every package and then nothing,
# the connection open. `rssub sync --dump --timeout 3s` must not wait
# forever: the package fails once no byte came for 3 s ("stalled"), and
# the baseline falls back to the Resource List, one request per file, as
# for any package that cannot be had; the mirror equals the Source. A
# package that is only slow (every byte late, none later than --timeout)
# is not a stall: it is taken from the dump. Stopped (SIGTERM) during the
# dump, rssub says the baseline is incomplete.
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"

D=$TMP/data
mkdir -p "$D/sub"
"$PY" - "$D" <<'EOF'
import os, random, sys
r = random.Random(11)
for i in range(40):
    with open(os.path.join(sys.argv[1], "sub", "f%02d.txt" % i), "wb") as f:
        f.write(r.randbytes(r.randint(2000, 6000)))
EOF

# The proxy: every GET relayed; a package (*.zip) cut to its first half
# and then held silent for 120 s (MODE "stall"), or sent whole in 8
# pieces 1 s apart (MODE "slow"). MODE is read from a file at each
# request.
PX=$TMP/proxy
cat >"$PX.py" <<'EOF'
import http.client, http.server, json, os, sys, time
ready, upstream, modefile, logf = sys.argv[1:5]

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, fmt, *args):
        pass
    def do_GET(self):
        port = int(open(upstream).read().strip())
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", self.path)
        r = c.getresponse()
        body = r.read()
        c.close()
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("connection", "keep-alive",
                                 "transfer-encoding", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        mode = open(modefile).read().strip()
        with open(logf, "a") as f:
            f.write("GET %s %d\n" % (self.path, r.status))
        if not self.path.endswith(".zip") or r.status != 200:
            self.wfile.write(body)
        elif mode == "stall":
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            time.sleep(120)
        else:
            n = len(body) // 8 + 1
            for i in range(0, len(body), n):
                self.wfile.write(body[i:i + n])
                self.wfile.flush()
                time.sleep(1)

class S(http.server.ThreadingHTTPServer):
    daemon_threads = True
    def handle_error(self, request, client_address):
        pass

srv = S(("127.0.0.1", 0), H)
with open(ready + ".tmp", "w") as f:
    json.dump({"port": srv.server_address[1]}, f)
os.rename(ready + ".tmp", ready)
srv.serve_forever()
EOF
echo stall >"$PX.mode"
bg proxy "$PY" "$PX.py" "$PX.ready" "$PX.upstream" "$PX.mode" "$PX.log"
wait_file "$PX.ready" 10 || { bad "the proxy starts"; src_finish; }
PP=$(sed -n 's/.*"port": *\([0-9]*\).*/\1/p' "$PX.ready")
B=http://127.0.0.1:$PP/

# (not through check: its subshell would keep rssource's PID and port)
if src_start s "$D" --base-url "$B" --dump --dump-interval 1h \
        --resourcelist-refresh 1h &&
        echo "${SRC_HTTP[s]}" >"$PX.upstream"; then
    ok "rssource starts"
else
    bad "rssource starts"; src_finish
fi
check "the Resource Dump is published" wait_until 20 sh -c \
    "curl -sf '${B}resourcesync/resourcedump.xml' | grep -q '\\.zip<'"

note "a package that stalls halfway: rssub --timeout 3s gives up on it"
t0=$(date +%s)
sub_cmd m sync "$B" "$TMP/m" "$TMP/m.state" --dump --timeout 3s
t1=$(date +%s)
sub_exit m 0
check "it ends within 30 s (took $((t1 - t0)) s)" [ $((t1 - t0)) -lt 30 ]
check "the package is said to have stalled" \
    grep -q 'resource dump failed.*stalled' "$TMP/m.log"
check "the mirror equals the Source" same_tree "$D" "$TMP/m"
check "the files were fetched one by one" \
    grep -q 'GET /sub/f00.txt 200' "$PX.log"

note "a package that is only slow (a piece a second) is no stall"
echo slow >"$PX.mode"
: >"$PX.log"
sub_cmd m2 sync "$B" "$TMP/m2" "$TMP/m2.state" --dump --timeout 3s
sub_exit m2 0
check "the dump is unpacked" grep -q 'resource dump unpacked' "$TMP/m2.log"
check "the mirror equals the Source" same_tree "$D" "$TMP/m2"
check "no file fetched on its own" sh -c \
    "! grep -q 'GET /sub/' '$PX.log'"

note "stopped (SIGTERM) in the middle of the dump: rssub says so"
echo stall >"$PX.mode"
: >"$PX.log"
timeout 60 "$RSSUB" sync --source "$B" --mirror "$TMP/m3" \
    --state "$TMP/m3.state" --log-format logfmt --no-progress --dump \
    --timeout 60s >"$TMP/m3.out" 2>"$TMP/m3.log" &
P3=$!
SUB_LOGS+=("$TMP/m3.log")
check "a package is being downloaded" wait_until 20 grep -q '\.zip 200' \
    "$PX.log"
kill -TERM "$P3"
wait "$P3"
SUB_RC=$?
sub_exit m3 1
check "the log says the baseline is incomplete" grep -q \
    'stopped during the baseline from the resource dump: the mirror is incomplete' \
    "$TMP/m3.log"

sub_finish
