#!/usr/bin/env bash
# test_source_dump.sh - rssource --dump end to end with rssub --dump: the
# Capability List advertises the Resource Dump, its document and every
# package manifest are valid; `rssub sync --dump` mirrors the Source from
# the packages (requests counted by a logging proxy rssource's base URL
# points at: the packages, not one request per file, except a file changed
# after the dump, which comes through the Change Lists); a package with a
# tampered member (the proxy flips one byte) has that one member refused
# and fetched on its own; a restart with a short --dump-interval rebuilds
# the stale dump, and a new mirror from it needs no resource request.
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"

N=300
D=$TMP/data
mkdir -p "$D/sub/deeper" "$D/odd names"
"$PY" - "$D" "$N" <<'EOF'
import os, random, sys
d, n = sys.argv[1], int(sys.argv[2])
r = random.Random(7)
for i in range(n):
    sub = ("sub", "sub/deeper", "odd names", ".")[i % 4]
    with open(os.path.join(d, sub, "f%04d.txt" % i), "wb") as f:
        f.write(r.randbytes(r.randint(1000, 4000)))
EOF
printf 'a file with a space\n' >"$D/odd names/a b.txt"
NFILES=$((N + 1))

# The proxy first: rssource's base URL is the proxy's.
PX=$TMP/proxy
bg proxy "$PY" "$RS_SOURCE_DIR/tests/integration/lib/dump_proxy.py" \
    --ready "$PX.ready" --upstream-file "$PX.upstream" \
    --tamper-file "$PX.tamper" --log "$PX.log"
wait_file "$PX.ready" 10 || { bad "the proxy starts"; src_finish; }
PP=$(sed -n 's/.*"port": *\([0-9]*\).*/\1/p' "$PX.ready")
B=http://127.0.0.1:$PP/

start_source() {
    src_start s "$D" --base-url "$B" --dump --dump-max-files 100 \
        --resourcelist-refresh 1h "$@" &&
        echo "${SRC_HTTP[s]}" >"$PX.upstream"
}
caplist_has_dump() {
    curl -sf --max-time 5 "${B}resourcesync/capabilitylist.xml" |
        grep -q "<loc>${B}resourcesync/resourcedump.xml</loc>"
}
# count REGEX: proxy log lines (GET, 200) whose path matches REGEX
count() { grep -cE "^GET $1 200\$" "$PX.log"; }
resource_gets() { grep -E '^GET /[^ ]* 200$' "$PX.log" | grep -vc ' /resourcesync/\| /robots.txt \| /.well-known/'; }

note "rssource --dump"
# (not through check: its subshell would keep rssource's PID and port)
if start_source --dump-interval 1h; then ok "rssource starts"; else
    bad "rssource starts"; src_finish; fi
check "the Capability List advertises the Resource Dump" \
    wait_until 20 caplist_has_dump
curl -sf "${B}resourcesync/resourcedump.xml" -o "$TMP/rd.xml"
check "the Resource Dump is valid (strict)" rsdoc_ok "$TMP/rd.xml"
NPKG=$(xq "$TMP/rd.xml" 'len(urls)')
expect_eq "packages of 100 files" "$NPKG" 4
expect_eq "capability" "$(xq "$TMP/rd.xml" 'md["capability"]')" resourcedump
AT=$(xq "$TMP/rd.xml" 'md["at"]')
check "each package is a ZIP of its announced length, its manifest valid and served on its own (rel=contents), the same bytes" \
    "$PY" - "$TMP/rd.xml" "$NFILES" <<'EOF'
import io, sys, urllib.request, zipfile
import xml.etree.ElementTree as ET
SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
RS = "{http://www.openarchives.org/rs/terms/}"
total = 0
for u in ET.parse(sys.argv[1]).getroot().findall(SM + "url"):
    body = urllib.request.urlopen(u.findtext(SM + "loc")).read()
    assert len(body) == int(u.find(RS + "md").get("length")), "length"
    z = zipfile.ZipFile(io.BytesIO(body))
    links = [l for l in u.findall(RS + "ln") if l.get("rel") == "contents"]
    assert len(links) == 1, "contents link"
    served = urllib.request.urlopen(links[0].get("href")).read()
    assert served == z.read("manifest.xml"), "served manifest"
    m = ET.fromstring(z.read("manifest.xml"))
    assert m.find(RS + "md").get("capability") == "resourcedump-manifest"
    for e in m.findall(SM + "url"):
        md = e.find(RS + "md")
        data = z.read(md.get("path").lstrip("/"))
        assert len(data) == int(md.get("length"))
        total += 1
    for i in z.infolist():
        if i.filename != "manifest.xml":
            assert i.compress_type == zipfile.ZIP_STORED, i.filename
assert total == int(sys.argv[2]), total
EOF
curl -sf "${B}resourcesync/resourcedump-1-1.zip" -o "$TMP/p1.zip"
"$PY" -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("manifest.xml"))' \
    "$TMP/p1.zip" "$TMP/manifest1.xml"
check "a package manifest is valid (strict)" rsdoc_ok "$TMP/manifest1.xml"

note "a change after the dump"
sleep 1.1
printf 'changed after the dump\n' >"$D/sub/f0000.txt"
printf 'created after the dump\n' >"$D/new.txt"
NFILES=$((NFILES + 1))
check "the changes are in the Change List" wait_until 10 has_changes s \
    "updated sub/f0000.txt" "created new.txt"
sleep 2
expect_eq "the dump was not rebuilt (--dump-interval 1h)" \
    "$(curl -sf "${B}resourcesync/resourcedump.xml" | grep -c 'resourcedump-1-[0-9]*\.zip')" 4

note "rssub sync --dump"
: >"$PX.log"
sub_cmd m1 sync "$B" "$TMP/m1" "$TMP/m1.state" --dump
sub_exit m1 0
check "the mirror equals the Source" same_tree "$D" "$TMP/m1"
expect_eq "package requests" "$(count '/resourcesync/resourcedump-1-[0-9]+\.zip')" "$NPKG"
expect_eq "resource requests: only the two changed after the dump" \
    "$(resource_gets)" 2
check "they are the changed files" grep -qE '^GET /(sub/f0000\.txt|new\.txt) 200$' "$PX.log"
check "rssub unpacked the dump" grep -q 'msg="resource dump unpacked" packages=4 written=301 failed=0' "$TMP/m1.log"
check "the Change Lists since the dump finished the baseline" \
    grep -q 'msg="baseline from the resource dump and the change lists since"' "$TMP/m1.log"
expect_eq "Resource List requests: none (the dump is newer)" \
    "$(count '/resourcesync/resourcelist[^ ]*')" 0

note "a tampered member"
echo resourcedump-1-2.zip >"$PX.tamper"
: >"$PX.log"
sub_cmd m2 sync "$B" "$TMP/m2" "$TMP/m2.state" --dump
sub_exit m2 0
BADM=$(sed -n 's/^TAMPERED resourcedump-1-2.zip //p' "$PX.log")
check "the proxy tampered with a member" test -n "$BADM"
check "rssub refused it" grep -q 'not taken from the dump' "$TMP/m2.log"
check "the mirror equals the Source" same_tree "$D" "$TMP/m2"
BADP=$("$PY" -c 'import sys, urllib.parse; print("/" + sys.argv[1])' "$BADM")
expect_eq "resource requests: the refused member and the two changes" \
    "$(resource_gets)" 3
check "the refused member was fetched on its own" grep -qF "GET $BADP 200" "$PX.log"
check "a dump short of a member: the Resource List is reconciled" \
    test "$(count '/resourcesync/resourcelist[^ ]*')" -ge 1
: >"$PX.tamper"

note "the dump rebuilt"
src_stop s
if start_source --dump-interval 1s; then ok "rssource restarts"; else
    bad "rssource restarts"; src_finish; fi
rebuilt() {
    local at
    at=$(curl -sf "${B}resourcesync/resourcedump.xml" |
        sed -n 's/.*capability="resourcedump" at="\([^"]*\)".*/\1/p')
    [ -n "$at" ] && [ "$at" != "$AT" ]
}
check "a new generation is published" wait_until 20 rebuilt
check "its packages are generation 2" \
    sh -c "curl -sf '${B}resourcesync/resourcedump.xml' | grep -q 'resourcedump-2-1.zip'"
expect_eq "generation 1 still served (a Destination may be downloading it)" \
    "$(curl -s -o /dev/null -w '%{http_code}' "${B}resourcesync/resourcedump-1-1.zip")" 200
: >"$PX.log"
sub_cmd m3 sync "$B" "$TMP/m3" "$TMP/m3.state" --dump
sub_exit m3 0
check "the mirror equals the Source" same_tree "$D" "$TMP/m3"
expect_eq "resource requests: none" "$(resource_gets)" 0
check "written from the dump" grep -q "written=$NFILES failed=0" "$TMP/m3.log"
expect_eq "a temporary name is not served" \
    "$(curl -s -o /dev/null -w '%{http_code}' "${B}resourcesync/resourcedump-1-1.zip.tmp")" 404

note "the same state served under another base URL"
# rssource restarted without the proxy: its own address is the base now,
# and a dump made for the proxy's names resources it no longer serves
src_stop s
src_start s "$D" --dump --dump-max-files 100 --resourcelist-refresh 1h \
    --dump-interval 1h || bad "rssource restarts on its own address"
B2=$(src_url s)
new_base_dump() {
    curl -sf --max-time 5 "${B2}resourcesync/resourcedump.xml" >"$TMP/rd2.xml" &&
        grep -q "<loc>${B2}resourcesync/resourcedump-" "$TMP/rd2.xml"
}
check "a dump for the new base is published (not the old one, 1h or not)" \
    wait_until 20 new_base_dump
check "no package URL of the old base" sh -c "! grep -q '$B' '$TMP/rd2.xml'"
sub_cmd m4 sync "$B2" "$TMP/m4" "$TMP/m4.state" --dump
sub_exit m4 0
check "the mirror equals the Source" same_tree "$D" "$TMP/m4"
check "written from the dump, nothing refused" \
    grep -q "written=$NFILES failed=0" "$TMP/m4.log"
check "and finished by the Change Lists" \
    grep -q 'msg="baseline from the resource dump and the change lists since"' "$TMP/m4.log"

note "rssub killed in the middle of the dump, then run again"
# 6,000 files in 60 packages: killed (-9) once a few hundred are written,
# with writer threads in the middle of members; the next sync --dump
# cleans up and finishes
BIG=$TMP/big
"$PY" - "$BIG" <<'EOF2'
import os, sys
for i in range(6000):
    d = os.path.join(sys.argv[1], "d%02d" % (i // 200))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%04d.txt" % i), "w") as f:
        f.write("file %d\n" % i * (1 + i % 40))
EOF2
src_start big "$BIG" --dump --dump-max-files 100 --resourcelist-refresh 1h ||
    bad "rssource starts on 6,000 files"
BB=$(src_url big)
big_dump() {
    curl -sf --max-time 5 "${BB}resourcesync/capabilitylist.xml" |
        grep -q 'capability="resourcedump"'
}
check "its dump is published" wait_until 60 big_dump
sub_sync_killed_halfway m5 "$BB" "$TMP/m5" "$TMP/m5.state" 300 6000 --dump
LEFT=$(find "$TMP" -maxdepth 1 -name 'm5.state.dump-*' | wc -l)
STAGES=$(find "$TMP/m5" -maxdepth 1 -name '.rssub-stage.*' | wc -l)
note "packages the kill left beside the state: $LEFT, stages in the mirror: $STAGES"
# resync_after_kill NAME URL: the next `rssub sync --dump` into NAME's
# mirror and state finishes it: the mirror equals the Source, nothing of
# rssub's own (temporaries, a stage) left in it
resync_after_kill() {
    sub_cmd "$1" sync "$2" "$TMP/$1" "$TMP/$1.state" --dump
    sub_exit "$1" 0
    check "the mirror equals the Source" same_tree "$BIG" "$TMP/$1"
    check "no temporary file or stage left in the mirror" \
        test -z "$(find "$TMP/$1" -name '.rssub-tmp.*' -o \
                   -name '.rssub-stage.*')"
}
resync_after_kill m5 "$BB"
check "no package left beside the state" \
    test -z "$(find "$TMP" -maxdepth 1 -name 'm5.state.dump-*')"

src_stop big

note "rssub killed while a package is in its stage, then run again"
# the files a stage holds are in no ledger row and under no final name:
# the next start removes the stage, the next sync writes them again.
# Packages of up to 6,000 files (1,000, 1,500, 3,000, 500 with the ramp),
# one writer thread: a stage holds files for a good while
src_start big2 "$BIG" --dump --dump-max-files 6000 \
    --resourcelist-refresh 1h || bad "rssource starts on 6,000 files"
BB2=$(src_url big2)
big2_dump() {
    curl -sf --max-time 5 "${BB2}resourcesync/capabilitylist.xml" |
        grep -q 'capability="resourcedump"'
}
check "its dump is published" wait_until 60 big2_dump
mkdir -p "$TMP/m6"
"$RSSUB" sync --source "$BB2" --mirror "$TMP/m6" --state "$TMP/m6.state" \
    --log-format logfmt --no-progress --dump --dump-threads 1 \
    >/dev/null 2>"$TMP/m6.killed.log" &
M6_PID=$!
SUB_LOGS+=("$TMP/m6.killed.log")
staged() {
    [ "$(find "$TMP/m6" -maxdepth 1 -name '.rssub-stage.*' \
        -exec find {} -type f \; | wc -l)" -ge 20 ]
}
i=0
while ! staged && [ "$i" -lt 1500 ] && kill -0 "$M6_PID" 2>/dev/null; do
    sleep 0.02
    i=$((i + 1))
done
STAGED=$(find "$TMP/m6" -maxdepth 1 -name '.rssub-stage.*' \
    -exec find {} -type f \; | wc -l)
{ kill -KILL "$M6_PID" && wait "$M6_PID"; } 2>/dev/null
check "killed with files in a stage ($STAGED)" test "$STAGED" -ge 20
resync_after_kill m6 "$BB2"
check "the log says what the start removed" \
    grep -q "removed what an interrupted run left in the mirror" "$TMP/m6.log"
src_stop big2

sub_finish
