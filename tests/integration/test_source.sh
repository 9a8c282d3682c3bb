#!/usr/bin/env bash
# test_source.sh - rssource as a pull Source, no hub: discovery from
# /.well-known/resourcesync, every document valid (rsdoc --strict), the
# Resource List matching the files (hashes, lengths, types), the resources
# themselves (headers, HEAD, conditional GET), what must never be served,
# changes made on disk showing up in Change Lists and the Resource List,
# paging (index and rel="next") and Change List rotation, and a restart
# that reports what changed while rssource was down.
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"

D=$TMP/data
OUT=$TMP/outside
mkdir -p "$D/sub/deeper" "$D/resourcesync" "$D/.git" "$OUT"
printf 'hello\n' >"$D/a.txt"
printf '{"k":1}\n' >"$D/sub/b.json"
printf 'with space\n' >"$D/sp ace.txt"
head -c 70000 /dev/urandom >"$D/sub/deeper/blob.bin"
printf 'hidden\n' >"$D/.hidden"
printf 'git\n' >"$D/.git/config"
printf 'shadowed\n' >"$D/resourcesync/x.xml"
printf 'tmp\n' >"$D/partial.tmp"
printf 'secret\n' >"$OUT/secret"
ln -s "$OUT/secret" "$D/escape"
ln -s "$OUT" "$D/escdir"
: >"$D/empty.txt"
# Last-Modified comes once the mtime's second is over: not just written
touch -d '3 seconds ago' "$D/a.txt"

# start_ok NAME-OF-CHECK ARGS...: src_start in this shell (not in check's
# subshell, which would lose the PID and port), counted as a check.
start_ok() {
    local what=$1
    shift
    if src_start "$@"; then ok "$what"; else bad "$what"; src_finish; fi
}

note "start"
start_ok "rssource starts" s "$D" --exclude '*.tmp' \
    --resourcelist-refresh 0
B=$(src_url s)
# restarts listen on the same port: the base URL stays
# shellcheck disable=SC2034 # read by src_start (lib/source.sh)
SRC_PORT=${SRC_HTTP[s]}

note "discovery and documents"
fetch s .well-known/resourcesync "$TMP/sd.xml"
expect_eq "Source Description names the Capability List" \
    "$(xq "$TMP/sd.xml" '[u["loc"] + " " + u["capability"] for u in urls]')" \
    "${B}resourcesync/capabilitylist.xml capabilitylist"
fetch s resourcesync/capabilitylist.xml "$TMP/cl.xml"
expect_eq "Capability List: Resource List and Change List Index" \
    "$(xq "$TMP/cl.xml" '[u["capability"] + " " + u["loc"] for u in urls]')" \
    "resourcelist ${B}resourcesync/resourcelist.xml
changelist ${B}resourcesync/changelist-index.xml"
expect_eq "Capability List links up to the Source Description" \
    "$(xq "$TMP/cl.xml" 'ln["up"]')" "${B}.well-known/resourcesync"
check "every document validates strictly" rsdoc_ok \
    "${B}.well-known/resourcesync" "${B}resourcesync/capabilitylist.xml" \
    "${B}resourcesync/resourcelist.xml" "${B}resourcesync/changelist-index.xml" \
    "${B}resourcesync/changelist.xml" "${B}resourcesync/changelist-1.xml"
check "rsdoc explore discovers the Source from its root" \
    bash -c "'$RSDOC' explore '$B' | grep -q 'resourcelist'"

fetch s resourcesync/resourcelist.xml "$TMP/rl.xml"
expect_eq "Resource List: exactly the visible files, in path order" \
    "$(xq "$TMP/rl.xml" '[u["loc"][len("'"$B"'"):] for u in urls]')" \
    "a.txt
empty.txt
sp%20ace.txt
sub/b.json
sub/deeper/blob.bin"
# every entry's hash, length and type against the file on disk
verify_rl() {
    "$PY" - "$1" "$D" "$B" <<'EOF'
import hashlib, os, sys
import xml.etree.ElementTree as ET
from urllib.parse import unquote
SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
RS = "{http://www.openarchives.org/rs/terms/}"
root = ET.parse(sys.argv[1]).getroot()
types = {".txt": "text/plain", ".json": "application/json",
         ".bin": "application/octet-stream"}
bad = []
for u in root.findall(SM + "url"):
    loc = u.findtext(SM + "loc")
    path = os.path.join(sys.argv[2], unquote(loc[len(sys.argv[3]):]))
    data = open(path, "rb").read()
    md = u.find(RS + "md").attrib
    want = "md5:%s sha-256:%s" % (hashlib.md5(data).hexdigest(),
                                  hashlib.sha256(data).hexdigest())
    if md.get("hash") != want:
        bad.append("%s hash %s" % (loc, md.get("hash")))
    if md.get("length") != str(len(data)):
        bad.append("%s length %s" % (loc, md.get("length")))
    if md.get("type") != types[os.path.splitext(path)[1]]:
        bad.append("%s type %s" % (loc, md.get("type")))
    if not u.findtext(SM + "lastmod"):
        bad.append("%s no lastmod" % loc)
if bad:
    sys.exit("; ".join(bad))
EOF
}
check "Resource List hashes, lengths and types match the files" \
    verify_rl "$TMP/rl.xml"
expect_eq "Resource List has at and links up" \
    "$(xq "$TMP/rl.xml" '"%s %s" % ("at" in md, ln["up"])')" \
    "True ${B}resourcesync/capabilitylist.xml"

note "resources"
hdrs=$(curl -s -D - -o "$TMP/a.out" "${B}a.txt")
check "GET a.txt: the bytes" cmp "$TMP/a.out" "$D/a.txt"
expect_eq "GET a.txt: status" "$(printf '%s' "$hdrs" | head -n1 | tr -d '\r')" \
    "HTTP/1.1 200 OK"
hv() { printf '%s\n' "$1" | grep -i "^$2:" | head -n1 | sed 's/^[^:]*: *//' | tr -d '\r'; }
expect_eq "Content-Type" "$(hv "$hdrs" Content-Type)" "text/plain"
expect_eq "Content-Length" "$(hv "$hdrs" Content-Length)" "6"
expect_eq "Link rel=resourcesync" "$(hv "$hdrs" Link)" \
    "<${B}resourcesync/capabilitylist.xml>; rel=\"resourcesync\""
etag=$(hv "$hdrs" ETag)
lm=$(hv "$hdrs" Last-Modified)
check "ETag and Last-Modified present" test -n "$etag" -a -n "$lm"
expect_eq "Last-Modified is the file's mtime" "$lm" \
    "$(TZ=GMT LC_ALL=C date -r "$D/a.txt" '+%a, %d %b %Y %H:%M:%S GMT')"
curl -s -o "$TMP/blob.out" "${B}sub/deeper/blob.bin"
check "GET a 70 kB binary" cmp "$TMP/blob.out" "$D/sub/deeper/blob.bin"
curl -s -o "$TMP/sp.out" "${B}sp%20ace.txt"
check "GET a percent-encoded name" cmp "$TMP/sp.out" "$D/sp ace.txt"
expect_eq "GET an empty file" "$(status_code s empty.txt)" 200
head_out=$(curl -s -I "${B}sub/deeper/blob.bin")
expect_eq "HEAD: Content-Length of the file" \
    "$(hv "$head_out" Content-Length)" 70000
expect_eq "HEAD: no body" \
    "$(curl -s -X HEAD --max-time 5 -o - "${B}a.txt" 2>/dev/null | wc -c)" 0
expect_eq "If-None-Match (same ETag) -> 304" \
    "$(status_code s a.txt -H "If-None-Match: $etag")" 304
expect_eq "If-None-Match W/ and lists -> 304" \
    "$(status_code s a.txt -H "If-None-Match: \"x\", W/$etag")" 304
expect_eq "If-None-Match (other) -> 200" \
    "$(status_code s a.txt -H 'If-None-Match: "other"')" 200
expect_eq "If-Modified-Since (= Last-Modified) -> 304" \
    "$(status_code s a.txt -H "If-Modified-Since: $lm")" 304
expect_eq "If-Modified-Since (older) -> 200" \
    "$(status_code s a.txt -H 'If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT')" 200

note "never served"
for p in .hidden .git/config resourcesync/x.xml partial.tmp escape \
         escdir/secret sub sub/ "" %2e%2e/etc/passwd sub/%2e%2e/a.txt \
         a.txt%00 nonexistent resourcesync/nope.xml \
         resourcesync/changelist-99.xml resourcesync/resourcelist-9.xml; do
    expect_eq "404 for /$p" "$(status_code s "$p" --path-as-is)" 404
done
expect_eq "POST -> 405" "$(status_code s a.txt -X POST -d x)" 405
expect_eq "PUT -> 405" "$(status_code s a.txt -X PUT -d x)" 405

note "changes on disk"
cl_before=$(changes_of s | wc -l)
printf 'new\n' >"$D/new.txt"
printf 'hello again\n' >>"$D/a.txt"
mv "$D/sub/b.json" "$D/sub/b2.json"
rm "$D/empty.txt"
mkdir "$D/made"
printf 'inside\n' >"$D/made/in.txt"
printf 'hidden tmp\n' >"$D/.x.part"
mv "$D/.x.part" "$D/renamed-in.txt"
CL_AFTER=$cl_before check "Change List: created, updated, moved, deleted, new directory" \
    wait_until 10 has_changes s "created new.txt" "updated a.txt" \
    "created sub/b2.json" "deleted sub/b.json" "deleted empty.txt" \
    "created made/in.txt" "created renamed-in.txt"
fetch s resourcesync/changelist.xml "$TMP/chl.xml"
expect_eq "Change List entries are in forward chronological order" \
    "$(xq "$TMP/chl.xml" '"ordered" if all(dt(a["datetime"]) < dt(b["datetime"]) for a, b in zip(urls, urls[1:])) else "unordered"')" \
    ordered
expect_eq "created entries carry lastmod, hash, length, type" \
    "$(xq "$TMP/chl.xml" '[(u["length"], u["type"], len(u["hash"].split())) for u in urls if u["loc"].endswith("/new.txt")]')" \
    "('4', 'text/plain', 2)"
expect_eq "deleted entries carry no hash" \
    "$(xq "$TMP/chl.xml" '[("hash" in u, u["lastmod"]) for u in urls if u["change"] == "deleted"]')" \
    "(False, None)
(False, None)"
check "the Change List validates strictly" rsdoc_ok \
    "${B}resourcesync/changelist.xml"
fetch s resourcesync/resourcelist.xml "$TMP/rl2.xml"
expect_eq "the Resource List follows (refresh 0)" \
    "$(xq "$TMP/rl2.xml" '[u["loc"][len("'"$B"'"):] for u in urls]')" \
    "a.txt
made/in.txt
new.txt
renamed-in.txt
sp%20ace.txt
sub/b2.json
sub/deeper/blob.bin"
check "new Resource List hashes match" verify_rl "$TMP/rl2.xml"
expect_eq "GET a file created meanwhile" "$(get s made/in.txt)" "inside"

note "restart: changes made while down"
src_stop s
expect_eq "SIGTERM: exit status 0" "$SRC_RC" 0
src_asan_check s
printf 'offline\n' >"$D/offline.txt"
printf 'edited offline\n' >"$D/new.txt"
rm "$D/renamed-in.txt"
rm -r "$D/made"
start_ok "rssource restarts" s "$D" --exclude '*.tmp' \
    --resourcelist-refresh 0
check "offline changes are reported after the restart" \
    wait_until 10 has_changes s "deleted made/in.txt" "updated new.txt" \
    "created offline.txt" "deleted renamed-in.txt"
# shellcheck disable=SC2317 # run through wait_until
startup_scanned() { grep -q 'msg="start-up scan"' "${SRC_LOG[s]}"; }
check "the start-up scan ends" wait_until 10 startup_scanned
expect_eq "start-up scan read only what changed" \
    "$(grep 'msg="start-up scan"' "${SRC_LOG[s]}" | tail -n1 | sed -n 's/.* hashed=\([0-9]*\) .*/\1/p')" \
    2

note "paging and rotation (page size 3)"
src_stop s
start_ok "rssource restarts with --page-size 3" s "$D" \
    --exclude '*.tmp' --page-size 3 --resourcelist-refresh 0
fetch s resourcesync/resourcelist.xml "$TMP/rli.xml"
expect_eq "Resource List Index over 2 parts" \
    "$(xq "$TMP/rli.xml" '"%s %d %s" % (root.tag.endswith("sitemapindex"), len(urls), "completed" in md)')" \
    "True 2 True"
parts_total() {
    local t=0 loc n
    for loc in $(xq "$1" '[u["loc"] for u in urls]'); do
        curl -sf "$loc" -o "$TMP/part.xml" || return 1
        rsdoc_ok "$loc" >/dev/null || return 1
        n=$(xq "$TMP/part.xml" 'len(urls) if ln.get("index") else -100')
        t=$((t + n))
    done
    echo "$t"
}
expect_eq "the parts hold every resource once, each with rel=index" \
    "$(parts_total "$TMP/rli.xml")" 6
for i in 1 2 3 4; do printf '%s\n' "$i" >"$D/rot$i.txt"; done
check "four changes rotate the Change List (3 per list)" \
    wait_until 10 has_changes s "created rot1.txt" "created rot2.txt" \
    "created rot3.txt" "created rot4.txt"
fetch s resourcesync/changelist-index.xml "$TMP/cli.xml"
expect_eq "Change List Index: closed lists have until, the last is open" \
    "$(xq "$TMP/cli.xml" '["until" in u for u in urls][-2:]')" "True
False"
check "every Change List validates strictly" bash -c \
    "'$RSDOC' validate --strict \$(sed -n 's:.*<loc>\\(.*\\)</loc>.*:\\1:p' '$TMP/cli.xml')"

src_stop s
start_ok "rssource restarts with rel=next paging" s "$D" \
    --exclude '*.tmp' --page-size 3 --resourcelist-paging next \
    --resourcelist-refresh 0
chain_total() {
    local url=$1 t=0 n next i=0
    while [ -n "$url" ] && [ "$i" -lt 20 ]; do
        curl -sf "$url" -o "$TMP/page.xml" || return 1
        n=$(xq "$TMP/page.xml" 'len(urls)')
        t=$((t + n))
        next=$(xq "$TMP/page.xml" 'ln.get("next")')
        url=$next
        i=$((i + 1))
    done
    echo "$t $i"
}
expect_eq "rel=next chain: 10 resources over 4 pages" \
    "$(chain_total "${B}resourcesync/resourcelist.xml")" "10 4"

note "refused configurations"
"$RSSOURCE" --dir "$D" --state "$D/sub/state" --listen 127.0.0.1:0 \
    >"$TMP/refused.log" 2>&1
expect_eq "a state directory inside --dir: exit status 2" "$?" 2
check "...and nothing is left in the tree" test ! -e "$D/sub/state"
"$RSSOURCE" --dir "$D/a.txt" --listen 127.0.0.1:0 >>"$TMP/refused.log" 2>&1
expect_eq "--dir that is not a directory: exit status 2" "$?" 2
"$RSSOURCE" --listen 127.0.0.1:0 >>"$TMP/refused.log" 2>&1
expect_eq "no --dir: exit status 2" "$?" 2
# (rssource s is running on $TMP/s.state)
"$RSSOURCE" --dir "$D" --state "$TMP/s.state" --listen 127.0.0.1:0 \
    >"$TMP/second.log" 2>&1
expect_eq "a second rssource on a state in use: exit status 2" "$?" 2
check "...saying so" grep -q "s.state/state.db: in use by another rssource" "$TMP/second.log"
expect_eq "...and the first still serves" "$(get s a.txt | head -c 5)" hello

note "a base URL with a path"
src_stop s
P=$B"pub/"
start_ok "rssource with --base-url ${P}" p "$D" --exclude '*.tmp' \
    --base-url "$P"
expect_eq "a resource under the base path" "$(get p pub/offline.txt)" offline
expect_eq "...and not outside it" "$(status_code p offline.txt)" 404
fetch p .well-known/resourcesync "$TMP/sd2.xml"
expect_eq "/.well-known/resourcesync at the host's root" \
    "$(xq "$TMP/sd2.xml" '[u["loc"] for u in urls]')" \
    "${P}resourcesync/capabilitylist.xml"
expect_eq "...and under the base path" \
    "$(status_code p pub/.well-known/resourcesync)" 200
fetch p pub/resourcesync/resourcelist.xml "$TMP/rl3.xml"
expect_eq "every <loc> is built from the base URL" \
    "$(xq "$TMP/rl3.xml" '"ok" if urls and all(u["loc"].startswith("'"$P"'") for u in urls) else "no"')" ok

src_finish
