#!/usr/bin/env bash
# test_rsdoc.sh - rsdoc against real HTTP on loopback: a small Python server
# (Debian's python3) serves a Source tree plus the behaviour a static server
# won't produce on demand (Link headers, redirect loops, 500, a stall, big
# bodies). Checks validate/show/explore output, limits and exit codes.
# Needs RS_BUILD_DIR (ctest sets it); stops only the servers it started.
set -u

rsdoc=${RS_BUILD_DIR:?RS_BUILD_DIR not set}/tools/rsdoc
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
# Loopback only: a proxy from the environment must not get in the way.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

pass=0
fail=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rsdoc-test.XXXXXX")
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

# check NAME WANT_RC CMD...: runs CMD, keeps its stdout+stderr in $out.
check_rc() {
    local name=$1 want=$2
    shift 2
    out=$("$@" 2>&1)
    local rc=$?
    if [ "$rc" -eq "$want" ]; then ok "$name (exit $rc)"; else bad "$name: exit $rc, want $want" "$out"; fi
}
# has NAME PATTERN: the last output holds a line matching PATTERN (grep -E).
has() {
    if printf '%s\n' "$out" | grep -Eq -- "$2"; then ok "$1"; else bad "$1: no line matching /$2/" "$out"; fi
}
hasnt() {
    if printf '%s\n' "$out" | grep -Eq -- "$2"; then bad "$1: unexpected /$2/" "$out"; else ok "$1"; fi
}

# ------------------------------------------------------------------ server
cat >"$tmp/server.py" <<'EOF'
# Static files from ROOT plus a few programmed routes; binds 127.0.0.1:0,
# writes the port to PORTFILE, logs every request path to REQLOG.
import http.server, os, sys, time

root, portfile, reqlog = sys.argv[1], sys.argv[2], sys.argv[3]

class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **kw):
        super().__init__(*a, directory=root, **kw)

    def log_message(self, fmt, *args):
        pass

    def redirect(self, where, code=302):
        self.send_response(code)
        self.send_header("Location", where)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        with open(reqlog, "a") as f:
            f.write(self.path + "\n")
        p = self.path
        if p == "/loop-a":
            return self.redirect("/loop-b")
        if p == "/loop-b":
            return self.redirect("/loop-a")
        if p == "/moved-list":
            return self.redirect("/resourcelist-1.xml", 301)
        if p == "/to-ftp":
            return self.redirect("ftp://127.0.0.1/x.xml")
        if p == "/error500":
            body = b"<html>oops</html>"
            self.send_response(500)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if p == "/slow":
            time.sleep(4)
            return self.redirect("/resourcelist-1.xml")
        if p in ("/big-chunked.xml", "/big-announced.xml"):
            head = (b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
                    b' xmlns:rs="http://www.openarchives.org/rs/terms/">'
                    b'<rs:md capability="resourcelist" at="2013-01-01T00:00:00Z"/>')
            n = 2 * 1024 * 1024
            self.send_response(200)
            self.send_header("Content-Type", "application/xml")
            if p == "/big-announced.xml":
                self.send_header("Content-Length", str(n))
            self.end_headers()
            self.wfile.write(head)
            sent = len(head)
            pad = b"<!-- " + b"x" * 1000 + b" -->\n"
            try:
                while sent < n:
                    self.wfile.write(pad)
                    sent += len(pad)
            except (BrokenPipeError, ConnectionResetError):
                pass
            return
        if p == "/res1.txt":
            body = b"just a resource\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Link", '<http://example.com/license>; rel="license"')
            self.send_header("Link", '</capabilitylist.xml>; rel="resourcesync"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        return super().do_GET()

    def guess_type(self, path):
        if path.endswith("resourcesync"):
            return "application/xml"
        return super().guess_type(path)

srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
srv.daemon_threads = True
with open(portfile + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(portfile + ".tmp", portfile)
srv.serve_forever()
EOF

# start_server ROOT NAME: starts a server; sets $port.
start_server() {
    local root=$1 name=$2
    mkdir -p "$root"
    "$py" "$tmp/server.py" "$root" "$tmp/$name.port" "$tmp/$name.requests" \
        >"$tmp/$name.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do
        [ -s "$tmp/$name.port" ] && break
        sleep 0.1
    done
    port=$(cat "$tmp/$name.port" 2>/dev/null) || { echo "server $name did not start"; cat "$tmp/$name.log"; exit 1; }
}

start_server "$tmp/site" site
base="http://127.0.0.1:$port"
start_server "$tmp/site2" site2
base2="http://127.0.0.1:$port"

# ------------------------------------------------------------- Source tree
ns='xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/"'
site=$tmp/site
mkdir -p "$site/.well-known"
cat >"$site/.well-known/resourcesync" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<urlset $ns>
  <rs:ln rel="describedby" href="$base/about.html"/>
  <rs:md capability="description"/>
  <url><loc>$base/capabilitylist.xml</loc><rs:md capability="capabilitylist"/></url>
</urlset>
EOF
cat >"$site/capabilitylist.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<urlset $ns>
  <rs:ln rel="up" href="$base/.well-known/resourcesync"/>
  <rs:md capability="capabilitylist"/>
  <url><loc>$base/resourcelist-index.xml</loc><rs:md capability="resourcelist"/></url>
  <url><loc>$base/changelist.xml</loc><rs:md capability="changelist"/></url>
  <url><loc>$base/missing-dump.xml</loc><rs:md capability="resourcedump"/></url>
  <url><loc>ws://127.0.0.1:9/channels/changes</loc><rs:md capability="changelist-notification"/></url>
  <url><loc>$base/notifications/changes</loc><rs:md capability="changelist-notification"/>
    <rs:ln rel="hub" href="http://hub.example.net/websub"/></url>
</urlset>
EOF
cat >"$site/resourcelist-index.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<sitemapindex $ns>
  <rs:ln rel="up" href="$base/capabilitylist.xml"/>
  <rs:md capability="resourcelist" at="2013-01-03T09:00:00Z"/>
  <sitemap><loc>$base/resourcelist-1.xml</loc><rs:md at="2013-01-03T09:00:00Z"/></sitemap>
  <sitemap><loc>$base/resourcelist-2.xml</loc><rs:md at="2013-01-03T09:03:00Z"/></sitemap>
</sitemapindex>
EOF
cat >"$site/resourcelist-1.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<urlset $ns>
  <rs:ln rel="up" href="$base/capabilitylist.xml"/>
  <rs:ln rel="index" href="$base/resourcelist-index.xml"/>
  <rs:md capability="resourcelist" at="2013-01-03T09:00:00Z"/>
  <url><loc>$base/res1.txt</loc><lastmod>2013-01-02T13:00:00Z</lastmod>
    <rs:md hash="md5:1584abdf8ebdc9802ac0c6a7402c03b6" length="16" type="text/plain"/></url>
  <url><loc>$base/res2.txt</loc><lastmod>2013-01-02T14:00:00Z</lastmod></url>
  <url><loc>$base/res3.txt</loc><lastmod>2013-01-02T15:00:00Z</lastmod>
    <rs:ln rel="duplicate" href="http://mirror.example.com/res3.txt" pri="1"/></url>
</urlset>
EOF
cat >"$site/resourcelist-2.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<urlset $ns>
  <rs:ln rel="up" href="$base/capabilitylist.xml"/>
  <rs:ln rel="index" href="$base/resourcelist-index.xml"/>
  <rs:md capability="resourcelist" at="2013-01-03T09:03:00Z"/>
  <url><loc>$base/res4.txt</loc></url>
  <url><loc>$base/res5.txt</loc></url>
</urlset>
EOF
# Two pages whose next links form a loop: the walk must stop.
cat >"$site/changelist.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<urlset $ns>
  <rs:ln rel="up" href="$base/capabilitylist.xml"/>
  <rs:md capability="changelist" from="2013-01-02T00:00:00Z"/>
  <url><loc>$base/res1.txt</loc><rs:md change="updated" datetime="2013-01-02T13:00:00Z"/></url>
  <url><loc>$base/res6.txt</loc><rs:md change="deleted" datetime="2013-01-02T14:00:00Z"/></url>
  <rs:ln rel="next" href="changelist-2.xml"/>
</urlset>
EOF
cat >"$site/changelist-2.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<urlset $ns>
  <rs:ln rel="up" href="$base/capabilitylist.xml"/>
  <rs:ln rel="next" href="$base/changelist.xml"/>
  <rs:md capability="changelist" from="2013-01-02T14:00:00Z" until="2013-01-03T00:00:00Z"/>
  <url><loc>$base/res7.txt</loc><rs:md change="created" datetime="2013-01-02T15:00:00Z"/></url>
</urlset>
EOF
cat >"$site/page.html" <<EOF
<!DOCTYPE html>
<html><head><title>A page</title>
<link rel="stylesheet" href="/style.css">
<link rel="resourcesync" href="/capabilitylist.xml">
</head><body><p>hello</p></body></html>
EOF
# Well-formed, but a Resource List entry with a relative <loc>: line 6.
cat >"$site/bad.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<urlset $ns>
  <rs:ln rel="up" href="$base/capabilitylist.xml"/>
  <rs:md capability="resourcelist" at="2013-01-03T09:00:00Z"/>
  <url><loc>$base/ok.txt</loc></url>
  <url><loc>not/absolute.txt</loc></url>
</urlset>
EOF
printf '<urlset %s>\n  <rs:md capability="resourcelist" at="2013-01-03T09:00:00Z"/>\n  <url><loc>%s/x</loc>\n' "$ns" "$base" >"$site/cut.xml"

# Site 2: no /.well-known, only robots.txt naming a Resource List.
site2=$tmp/site2
cat >"$site2/robots.txt" <<EOF
User-agent: *
Disallow: /private/
# the lists
Sitemap: $base2/rl.xml
EOF
cat >"$site2/sd.xml" <<EOF
<urlset $ns>
  <rs:md capability="description"/>
  <url><loc>$base2/cl.xml</loc><rs:md capability="capabilitylist"/></url>
</urlset>
EOF
cat >"$site2/cl.xml" <<EOF
<urlset $ns>
  <rs:ln rel="up" href="$base2/sd.xml"/>
  <rs:md capability="capabilitylist"/>
  <url><loc>$base2/rl.xml</loc><rs:md capability="resourcelist"/></url>
</urlset>
EOF
cat >"$site2/rl.xml" <<EOF
<urlset $ns>
  <rs:ln rel="up" href="$base2/cl.xml"/>
  <rs:md capability="resourcelist" at="2013-01-03T09:00:00Z"/>
  <url><loc>$base2/a</loc></url><url><loc>$base2/b</loc></url><url><loc>$base2/c</loc></url>
</urlset>
EOF

# Dumps: each package's manifest linked with rel="contents" (core 11.1,
# 13.1), relative or absolute; manifest2 lists a resource twice; the third
# package's contents link loops back to the dump itself, the fourth has
# none.
mkdir -p "$site/dumps"
d=$base/dumps
cat >"$site/dumps/capabilitylist.xml" <<EOF
<urlset $ns>
  <rs:ln rel="up" href="$base/.well-known/resourcesync"/>
  <rs:md capability="capabilitylist"/>
  <url><loc>$d/resourcedump.xml</loc><rs:md capability="resourcedump"/></url>
  <url><loc>$d/changedump.xml</loc><rs:md capability="changedump"/></url>
</urlset>
EOF
cat >"$site/dumps/resourcedump.xml" <<EOF
<urlset $ns>
  <rs:ln rel="up" href="$d/capabilitylist.xml"/>
  <rs:md capability="resourcedump" at="2013-01-03T09:00:00Z"/>
  <url><loc>$d/p1.zip</loc><rs:md type="application/zip"/><rs:ln rel="contents" href="manifest1.xml" type="application/xml"/></url>
  <url><loc>$d/p2.zip</loc><rs:md type="application/zip"/><rs:ln rel="contents" href="$d/manifest2.xml"/></url>
  <url><loc>$d/p3.zip</loc><rs:md type="application/zip"/><rs:ln rel="contents" href="$d/resourcedump.xml"/></url>
  <url><loc>$d/p4.zip</loc><rs:md type="application/zip"/></url>
</urlset>
EOF
cat >"$site/dumps/manifest1.xml" <<EOF
<urlset $ns>
  <rs:ln rel="up" href="$d/capabilitylist.xml"/>
  <rs:md capability="resourcedump-manifest" at="2013-01-03T09:00:00Z"/>
  <url><loc>$base/res1.txt</loc><rs:md path="/res1.txt"/></url>
  <url><loc>$base/res2.txt</loc><rs:md path="/res2.txt"/></url>
</urlset>
EOF
cat >"$site/dumps/manifest2.xml" <<EOF
<urlset $ns>
  <rs:ln rel="up" href="$d/capabilitylist.xml"/>
  <rs:md capability="resourcedump-manifest" at="2013-01-03T09:00:00Z"/>
  <url><loc>$base/res3.txt</loc><rs:md path="/res3.txt"/></url>
  <url><loc>$base/res4.txt</loc><rs:md path="/res4.txt"/></url>
  <url><loc>$base/res3.txt</loc><rs:md path="/res3-again.txt"/></url>
</urlset>
EOF
cat >"$site/dumps/changedump.xml" <<EOF
<urlset $ns>
  <rs:ln rel="up" href="$d/capabilitylist.xml"/>
  <rs:md capability="changedump" from="2013-01-02T00:00:00Z"/>
  <url><loc>$d/c1.zip</loc><rs:md type="application/zip" from="2013-01-02T00:00:00Z" until="2013-01-03T00:00:00Z"/><rs:ln rel="contents" href="cd-manifest.xml"/></url>
</urlset>
EOF
cat >"$site/dumps/cd-manifest.xml" <<EOF
<urlset $ns>
  <rs:ln rel="up" href="$d/capabilitylist.xml"/>
  <rs:md capability="changedump-manifest" from="2013-01-02T00:00:00Z" until="2013-01-03T00:00:00Z"/>
  <url><loc>$base/res1.txt</loc><rs:md change="created" datetime="2013-01-02T10:00:00Z" path="/1/res1.txt"/></url>
  <url><loc>$base/res1.txt</loc><rs:md change="updated" datetime="2013-01-02T11:00:00Z" path="/2/res1.txt"/></url>
</urlset>
EOF
# A Resource List that lists a resource twice: a should (core 10.1).
cat >"$site/dumps/rl-twice.xml" <<EOF
<urlset $ns>
  <rs:ln rel="up" href="$d/capabilitylist.xml"/>
  <rs:md capability="resourcelist" at="2013-01-03T09:00:00Z"/>
  <url><loc>$base/res1.txt</loc></url>
  <url><loc>$base/res1.txt</loc></url>
</urlset>
EOF

# --------------------------------------------------------------- the CLI
check_rc "help" 0 "$rsdoc" --help
has "help lists every command" '^  explore '
has "help: --lenient" '^  --lenient '
has "help lists exit codes" '^  2  usage error'
check_rc "version" 0 "$rsdoc" --version
has "version line" '^rsdoc [0-9]+\.[0-9]+'
check_rc "no arguments is a usage error" 2 "$rsdoc"
check_rc "unknown command" 2 "$rsdoc" frobnicate
check_rc "unknown option" 2 "$rsdoc" validate --frob x.xml
check_rc "--json only for show" 2 "$rsdoc" validate --json x.xml
check_rc "explore wants a URL" 2 "$rsdoc" explore /etc/hostname

# ---------------------------------------------------------------- validate
check_rc "validate URL" 0 "$rsdoc" validate "$base/resourcelist-1.xml"
has "validate URL: OK line" "^$base/resourcelist-1.xml: OK resourcelist urlset 3 entries\$"
check_rc "options before the command" 0 "$rsdoc" --max-bytes 100000 validate "$base/resourcelist-1.xml"
out=$("$rsdoc" -v --log-format json validate "$base/resourcelist-1.xml" 2>&1 >/dev/null)
has "verbose: each fetch logged as one JSON line on stderr" '^\{"ts":"[0-9T:.-]+Z","level":"debug","app":"rsdoc","msg":"fetched","url":"http://127\.0\.0\.1:[0-9]+/resourcelist-1\.xml","result":"ok"\}$'
check_rc "validate index URL" 0 "$rsdoc" validate "$base/resourcelist-index.xml"
has "validate index: OK line" "^$base/resourcelist-index.xml: OK resourcelist sitemapindex 2 entries\$"
check_rc "validate invalid URL" 1 "$rsdoc" validate "$base/bad.xml"
has "validate invalid: NAME:LINE: error:" "^$base/bad.xml:6: error: .*not/absolute.txt"
check_rc "validate truncated URL" 1 "$rsdoc" validate "$base/cut.xml"
has "validate truncated: error line" "^$base/cut.xml(:[0-9]+)?: error: .*truncated"
check_rc "validate good and bad" 1 "$rsdoc" validate "$base/resourcelist-2.xml" "$base/bad.xml" "$base/changelist.xml"
has "all three reported: good" "^$base/resourcelist-2.xml: OK resourcelist urlset 2 entries\$"
has "all three reported: bad" "^$base/bad.xml:6: error: "
has "all three reported: changelist" "^$base/changelist.xml: OK changelist urlset 2 entries\$"
check_rc "validate 404" 1 "$rsdoc" validate "$base/nothere.xml"
# (Python's server words 404 "File not found"; the reason is the server's.)
has "404 is a clear error" "^$base/nothere.xml: error: HTTP 404 File not found\$"
check_rc "validate 500" 1 "$rsdoc" validate "$base/error500"
has "500 is a clear error" "^$base/error500: error: HTTP 500"
check_rc "validate redirect loop" 1 "$rsdoc" validate "$base/loop-a"
has "redirect loop is a clear error" "^$base/loop-a: error: too many redirects"
check_rc "validate followed redirect" 0 "$rsdoc" validate "$base/moved-list"
has "redirect followed" "^$base/moved-list: OK resourcelist urlset 3 entries\$"
check_rc "validate redirect to ftp" 1 "$rsdoc" validate "$base/to-ftp"
has "non-http redirect refused" "^$base/to-ftp: error: refused to follow a redirect"
check_rc "validate connection refused" 1 "$rsdoc" validate "http://127.0.0.1:1/x.xml"
has "connection refused is a clear error" "^http://127.0.0.1:1/x.xml: error: cannot connect"
start=$(date +%s)
check_rc "validate with --timeout 1 on a stalled server" 1 "$rsdoc" validate --timeout 1 "$base/slow"
has "timeout is a clear error" "^$base/slow: error: timed out"
[ $(( $(date +%s) - start )) -le 3 ] && ok "timeout is prompt" || bad "timeout took too long"

# Size limits: announced, streamed without Content-Length, and a file.
check_rc "body over --max-bytes (Content-Length)" 1 "$rsdoc" validate --max-bytes 100000 "$base/big-announced.xml"
has "announced size refused" "^$base/big-announced.xml: error: response body too large: Content-Length 2097152 exceeds the limit of 100000 bytes"
check_rc "body over --max-bytes (streamed)" 1 "$rsdoc" validate --max-bytes 100000 "$base/big-chunked.xml"
has "streamed size refused" "^$base/big-chunked.xml: error: response body too large"
check_rc "body under --max-bytes" 1 "$rsdoc" validate --max-bytes 3000000 "$base/big-announced.xml"
hasnt "a big body within the limit is read, not refused" "too large"
head -c 200000 /dev/zero | tr '\0' ' ' >"$tmp/big-file.xml"
check_rc "file over --max-bytes" 1 "$rsdoc" validate --max-bytes 100000 "$tmp/big-file.xml"
has "file size refused" "^$tmp/big-file.xml: error: document larger than 100000 bytes"

# Files and stdin.
check_rc "validate file" 0 "$rsdoc" validate "$site/changelist-2.xml"
has "file: OK line" "^$site/changelist-2.xml: OK changelist urlset 1 entries\$"
out=$("$rsdoc" validate - <"$site/resourcelist-1.xml" 2>&1); rc=$?
[ $rc -eq 0 ] && ok "validate - (exit 0)" || bad "validate -: exit $rc" "$out"
has "stdin named -" '^-: OK resourcelist urlset 3 entries$'
out=$("$rsdoc" validate - <"$site/bad.xml" 2>&1); rc=$?
[ $rc -eq 1 ] && ok "validate - invalid (exit 1)" || bad "validate - invalid: exit $rc" "$out"
has "stdin error line" '^-:6: error: '
# A libxml2 message may hold a newline; the verdict must stay one line.
printf '<urlset %s><rs:md capability="resourcelist" at="2013-01-01T00:00:00Z"/><url><loc>%s/caf\xe9-x</loc></url></urlset>' "$ns" "$base" >"$tmp/latin1.xml"
out=$("$rsdoc" validate "$tmp/latin1.xml" 2>/dev/null); rc=$?
[ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && ok "a multi-line parser message stays one line" || bad "multi-line message: exit $rc" "$out"
check_rc "missing file" 1 "$rsdoc" validate "$tmp/none.xml"
has "missing file is a clear error" "^$tmp/none.xml: error: cannot open: No such file or directory\$"
# Warnings go to stderr, the verdict to stdout; --strict makes them errors.
printf '<urlset %s><rs:md capability="resourcelist" at="2013-01-01T00:00:00Z"/><url><loc>%s/a</loc></url></urlset>' "$ns" "$base" >"$tmp/noup.xml"
out=$("$rsdoc" validate "$tmp/noup.xml" 2>/dev/null); rc=$?
[ $rc -eq 0 ] && [ "$out" = "$tmp/noup.xml: OK resourcelist urlset 1 entries" ] && ok "lenient: warning not on stdout" || bad "lenient stdout: exit $rc" "$out"
out=$("$rsdoc" validate "$tmp/noup.xml" 2>&1 >/dev/null)
has "lenient: warning on stderr" "^$tmp/noup.xml:1: warning: "
check_rc "strict: warning becomes an error" 1 "$rsdoc" validate --strict "$tmp/noup.xml"
has "strict: error line" "^$tmp/noup.xml:1: error: "

# The default is the spec: a Change List out of forward chronological
# order breaks a MUST (core 12.1) and is an error; --lenient reads it as
# rssub does, with a warning.
printf '<urlset %s>\n<rs:ln rel="up" href="%s/capabilitylist.xml"/>\n<rs:md capability="changelist" from="2013-01-01T00:00:00Z"/>\n<url><loc>%s/b</loc><rs:md change="updated" datetime="2013-01-02T10:00:00Z"/></url>\n<url><loc>%s/a</loc><rs:md change="created" datetime="2013-01-02T09:00:00Z"/></url>\n</urlset>\n' "$ns" "$base" "$base" "$base" >"$tmp/unordered.xml"
check_rc "spec: a Change List newest first is invalid" 1 "$rsdoc" validate "$tmp/unordered.xml"
has "spec: the order is the error, on the entry's line" "^$tmp/unordered.xml:5: error: entries are not in forward chronological order \\(core 12.1\\)"
check_rc "lenient: the same list is read" 0 "$rsdoc" validate --lenient "$tmp/unordered.xml"
has "lenient: a warning names the order" "^$tmp/unordered.xml:5: warning: entries are not in forward chronological order"
has "lenient: the verdict" "^$tmp/unordered.xml: OK changelist urlset 2 entries\$"
check_rc "--lenient and --strict exclude each other" 2 "$rsdoc" validate --lenient --strict "$tmp/noup.xml"
check_rc "--max-errors is an option of validate" 2 "$rsdoc" show --max-errors 3 "$tmp/noup.xml"
check_rc "--max-errors wants a number" 2 "$rsdoc" validate --max-errors 0 "$tmp/noup.xml"

# Every problem is reported, not only the first: three entries, three
# errors (a relative loc, an unknown change, a pri out of range), then the
# limit.
cat >"$tmp/three.xml" <<EOF3
<urlset $ns>
<rs:ln rel="up" href="$base/capabilitylist.xml"/>
<rs:md capability="changelist" from="2013-01-01T00:00:00Z"/>
<url><loc>relative/a</loc><rs:md change="updated" datetime="2013-01-02T09:00:00Z"/></url>
<url><loc>$base/b</loc><rs:md change="moved" datetime="2013-01-02T10:00:00Z"/></url>
<url><loc>$base/c</loc><rs:md change="created" datetime="2013-01-02T11:00:00Z"/><rs:ln rel="duplicate" href="$base/m/c" pri="0"/></url>
</urlset>
EOF3
out=$("$rsdoc" validate "$tmp/three.xml" 2>/dev/null); rc=$?
[ $rc -eq 1 ] && ok "three errors: exit 1" || bad "three errors: exit $rc" "$out"
[ "$(printf '%s\n' "$out" | grep -c ': error: ')" -eq 3 ] && ok "three errors: three lines" || bad "three errors: lines" "$out"
has "three errors: the loc (line 4)" "^$tmp/three.xml:4: error: .*relative/a"
has "three errors: the change (line 5)" "^$tmp/three.xml:5: error: .*change=\"moved\""
has "three errors: the pri (line 6)" "^$tmp/three.xml:6: error: .*pri=\"0\""
out=$("$rsdoc" validate --max-errors 2 "$tmp/three.xml" 2>/dev/null); rc=$?
[ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | grep -c ':[0-9]*: error: ')" -eq 2 ] && ok "--max-errors 2: two errors" || bad "--max-errors 2" "$out"
has "--max-errors: the stop is said" "^$tmp/three.xml: error: stopped looking after 2 errors"
# Warnings are capped per document: 150 padded locs, 100 warnings told.
{
    printf '<urlset %s><rs:ln rel="up" href="%s/c"/><rs:md capability="resourcelist" at="2013-01-01T00:00:00Z"/>\n' "$ns" "$base"
    for i in $(seq 150); do printf '<url><loc> %s/r%s </loc></url>\n' "$base" "$i"; done
    printf '</urlset>\n'
} >"$tmp/padded.xml"
out=$("$rsdoc" validate "$tmp/padded.xml" 2>&1 >/dev/null)
[ "$(printf '%s\n' "$out" | grep -c ':[0-9]*: warning: ')" -eq 100 ] && ok "warnings: 100 told" || bad "warnings: not 100 told" "$(printf '%s\n' "$out" | tail -3)"
has "warnings: the rest counted" "^$tmp/padded.xml: warning: 50 more warnings not shown\$"

# A loc listed twice: an error in a Resource Dump Manifest (one bitstream
# per resource; rssub refuses the package), naming the loc and both
# entries; a warning in a Resource List (core 10.1: should); nothing in a
# Change Dump Manifest (once per change).
check_rc "manifest: a loc listed twice is invalid" 1 "$rsdoc" validate "$site/dumps/manifest2.xml"
has "manifest: the loc and both entries named" "^$site/dumps/manifest2.xml:6: error: <loc> $base/res3.txt is listed twice \(entry 1, line 4, then entry 3, line 6\): a Resource Dump Manifest"
check_rc "manifest: invalid with --lenient too" 1 "$rsdoc" validate --lenient "$site/dumps/manifest2.xml"
check_rc "change dump manifest: a loc once per change" 0 "$rsdoc" validate --strict "$site/dumps/cd-manifest.xml"
check_rc "resource list: a loc listed twice is a warning" 0 "$rsdoc" validate "$site/dumps/rl-twice.xml"
has "resource list: the warning" "^$site/dumps/rl-twice.xml:5: warning: <loc> $base/res1.txt is listed twice \(entry 1, line 4, then entry 2, line 5\)"
check_rc "resource list: an error under --strict" 1 "$rsdoc" validate --strict "$site/dumps/rl-twice.xml"

# -------------------------------------------------------------------- show
check_rc "show text" 0 "$rsdoc" show "$base/resourcelist-1.xml"
has "show: capability" '^capability +resourcelist$'
has "show: at" '^at +2013-01-03T09:00:00Z$'
has "show: root link" "^link +up $base/capabilitylist.xml\$"
has "show: entry hash" '^  hash +md5:1584abdf8ebdc9802ac0c6a7402c03b6$'
has "show: entry link attributes" '^  link +duplicate http://mirror.example.com/res3.txt pri=1$'
has "show: count" '^3 entries$'

"$rsdoc" show --json "$base/changelist.xml" >"$tmp/show.json" 2>"$tmp/show.err"; rc=$?
[ $rc -eq 0 ] && ok "show --json (exit 0)" || bad "show --json: exit $rc" "$(cat "$tmp/show.err")"
if "$py" -m json.tool "$tmp/show.json" >"$tmp/show.pretty" 2>&1; then ok "show --json is valid JSON"; else bad "show --json: not JSON" "$(cat "$tmp/show.json" "$tmp/show.pretty")"; fi
out=$("$py" - "$tmp/show.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["root"] == "urlset" and d["capability"] == "changelist", d
assert d["md"]["from"] == "2013-01-02T00:00:00Z", d["md"]
assert len(d["entries"]) == 2 and d["count"] == 2
assert d["entries"][1]["md"]["change"] == "deleted"
assert d["entries"][1]["md"]["datetime"] == "2013-01-02T14:00:00Z"
rels = [l["rel"] for l in d["links"]]
assert rels == ["up", "next"], rels      # next came after the entries
assert d["links"][1]["href"] == "changelist-2.xml"
print("fields ok")
EOF
)
has "show --json fields" '^fields ok$'
out=$("$rsdoc" show --json - <"$site/bad.xml" 2>"$tmp/show.err"); rc=$?
[ $rc -eq 1 ] && ok "show --json invalid (exit 1)" || bad "show --json invalid: exit $rc" "$out"
if printf '%s' "$out" | "$py" -c 'import json,sys; d=json.load(sys.stdin); assert d["error"]["line"] == 6 and d["count"] == 1, d' 2>"$tmp/py.err"; then
    ok "show --json failing half-way is still one JSON value with an error"
else
    bad "show --json invalid output" "$out $(cat "$tmp/py.err")"
fi
grep -q '^-:6: error: ' "$tmp/show.err" && ok "show error on stderr" || bad "show error on stderr" "$(cat "$tmp/show.err")"

# ----------------------------------------------------------------- explore
: >"$tmp/site.requests"
check_rc "explore site root" 1 "$rsdoc" explore "$base/"
has "explore: discovery via well-known" "^discovery: $base/.well-known/resourcesync\$"
has "explore: description" "^description $base/.well-known/resourcesync: urlset, 1 entry\$"
has "explore: capability list" "^  capabilitylist $base/capabilitylist.xml: urlset, 5 entries\$"
has "explore: resource list index" "^    resourcelist $base/resourcelist-index.xml: sitemapindex, 2 entries, at 2013-01-03T09:00:00Z\$"
has "explore: part 1" "^      resourcelist $base/resourcelist-1.xml: urlset, 3 entries, at 2013-01-03T09:00:00Z\$"
has "explore: part 2" "^      resourcelist $base/resourcelist-2.xml: urlset, 2 entries, at 2013-01-03T09:03:00Z\$"
has "explore: change list" "^    changelist $base/changelist.xml: urlset, 2 entries, from 2013-01-02T00:00:00Z\$"
has "explore: next page (relative href resolved)" "^    next page: changelist $base/changelist-2.xml: urlset, 1 entry, from 2013-01-02T14:00:00Z, until 2013-01-03T00:00:00Z\$"
has "explore: next loop stops" "^    next page: changelist $base/changelist.xml: shown above\$"
has "explore: unreachable dump shown with its error" "^    resourcedump $base/missing-dump.xml: error: HTTP 404 File not found\$"
has "explore: ws channel" "^    changelist-notification ws://127.0.0.1:9/channels/changes: notification channel\$"
has "explore: WebSub channel with hub" "^    changelist-notification $base/notifications/changes: notification channel, hub http://hub.example.net/websub\$"
has "explore: summary" '^8 documents fetched, 1 problem$'
hasnt "explore: resource entries are not listed" 'res2\.txt'
dups=$(sort "$tmp/site.requests" | uniq -d)
[ -z "$dups" ] && ok "explore: no URL fetched twice" || bad "explore fetched twice" "$dups"
grep -q '^/notifications/changes$' "$tmp/site.requests" && bad "explore fetched a notification channel" || ok "explore: channels not fetched"

check_rc "explore a clean subtree" 0 "$rsdoc" explore "$base/resourcelist-index.xml"
has "subtree: index at top" "^resourcelist $base/resourcelist-index.xml: sitemapindex, 2 entries"
has "subtree: summary" '^3 documents fetched, 0 problems$'

check_rc "explore from an HTML page" 1 "$rsdoc" explore "$base/page.html"
has "HTML <link rel=resourcesync> discovered" "^discovery: $base/page.html links to $base/capabilitylist.xml \\(HTML <link> rel=\"resourcesync\"\\)\$"
has "HTML: tree from the capability list" "^capabilitylist $base/capabilitylist.xml: urlset, 5 entries\$"

check_rc "explore from a resource with a Link header" 1 "$rsdoc" explore "$base/res1.txt"
has "Link header discovered (relative target resolved)" "^discovery: $base/res1.txt links to $base/capabilitylist.xml \\(Link header rel=\"resourcesync\"\\)\$"
has "Link header: tree" "^  resourcelist $base/resourcelist-index.xml: sitemapindex, 2 entries"

check_rc "explore --max-docs 3" 1 "$rsdoc" explore --max-docs 3 "$base/.well-known/resourcesync"
has "max-docs: budget shown" "not fetched \\(--max-docs 3 reached\\)|not fetched: --max-docs 3 reached"
has "max-docs: 3 fetched" '^3 documents fetched'

: >"$tmp/site2.requests"
check_rc "explore via robots.txt" 0 "$rsdoc" explore "$base2/some/page.html"
has "robots: 404 of the page reported" "^discovery: $base2/some/page.html: HTTP 404 File not found\$"
has "robots: sitemap climbed to the description" "^discovery: $base2/robots.txt lists $base2/rl.xml; walking from $base2/sd.xml\$"
has "robots: description" "^description $base2/sd.xml: urlset, 1 entry\$"
has "robots: resource list" "^    resourcelist $base2/rl.xml: urlset, 3 entries, at 2013-01-03T09:00:00Z\$"
dups=$(sort "$tmp/site2.requests" | uniq -d)
[ -z "$dups" ] && ok "robots: climbing and walking fetch each URL once" || bad "robots fetched twice" "$dups"

# Dumps: explore follows each package's rel="contents" link to its
# manifest and validates it; a loop is shown once; --max-docs holds.
: >"$tmp/site.requests"
check_rc "explore dumps" 1 "$rsdoc" explore "$d/capabilitylist.xml"
has "dumps: resource dump" "^  resourcedump $d/resourcedump.xml: urlset, 4 entries, at 2013-01-03T09:00:00Z\$"
has "dumps: a relative contents link followed" "^    contents: resourcedump-manifest $d/manifest1.xml: urlset, 2 entries, at 2013-01-03T09:00:00Z\$"
has "dumps: an invalid manifest shown with its error" "^    contents: resourcedump-manifest $d/manifest2.xml: error: line 6: <loc> $base/res3.txt is listed twice"
has "dumps: a contents loop stops" "^    contents: resourcedump $d/resourcedump.xml: shown above\$"
has "dumps: change dump" "^  changedump $d/changedump.xml: urlset, 1 entry, from 2013-01-02T00:00:00Z\$"
has "dumps: change dump manifest" "^    contents: changedump-manifest $d/cd-manifest.xml: urlset, 2 entries, from 2013-01-02T00:00:00Z, until 2013-01-03T00:00:00Z\$"
has "dumps: summary" '^6 documents fetched, 1 problem$'
if grep -q 'zip$' "$tmp/site.requests"; then bad "explore fetched a package"; else ok "dumps: no package fetched"; fi
dups=$(sort "$tmp/site.requests" | uniq -d)
if [ -z "$dups" ]; then ok "dumps: no URL fetched twice"; else bad "dumps: fetched twice" "$dups"; fi
check_rc "explore dumps --max-docs 3" 1 "$rsdoc" explore --max-docs 3 "$d/capabilitylist.xml"
has "dumps: manifests count against --max-docs" '^    \.\.\. 1 more not fetched \(--max-docs 3 reached\)$'
has "dumps: 3 fetched" '^3 documents fetched'

check_rc "explore finds nothing" 1 "$rsdoc" explore "http://127.0.0.1:1/"
has "nothing found is said" '^no ResourceSync document found from http://127.0.0.1:1/$'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
