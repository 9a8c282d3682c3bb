#!/usr/bin/env bash
# test_source_changedump.sh - rssource --dump's Change Dump end to end: with
# --page-size 5, each closed Change List gets a package holding one
# bitstream per created/updated change, in the list's order, with the
# content of that change (a file updated twice in one list: two bitstreams,
# the old and the new content; a file deleted before the list closed: its
# bitstream as it was created, and the deletion); changedump.xml lists the
# closed lists' packages (rsdoc validates it, the manifests too), the open
# list has none; a restart in the middle of a list (one change made while
# rssource was down) still gives a whole package; a file over
# --changedump-max-bytes leaves its list without a Change Dump, said once
# in the log, and the next list has one again. Restarts keep the port (the
# base URL) but the last, on another port: packages made for the old base
# URL are no longer listed, and the next list's is made for the new one.
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"

D=$TMP/data
mkdir -p "$D/sub"
printf 'a zero\n' >"$D/a.txt"
printf 'b zero\n' >"$D/b.txt"

start_source() {
    src_start s "$D" --dump --page-size 5 --dump-interval 1h \
        --settle 200ms "$@"
}
nchanges() { changes_of s | wc -l; }
count_is() { [ "$(nchanges)" = "$1" ]; }
# chg N CMD...: run CMD (a change), wait until the Change Lists hold N
# changes in all, so that the next change is a change of its own
N=0
chg() {
    N=$((N + 1))
    "$@"
    wait_until 10 count_is "$N" || bad "change $N seen ($*)"
}
put() { printf '%s' "$2" >"$D/$1"; }
cdump_lists() {
    get s resourcesync/changedump.xml -o "$TMP/cd.xml" 2>/dev/null &&
        grep -c '<loc>' "$TMP/cd.xml" >/dev/null &&
        [ "$(grep -o 'changedump-[0-9]*-1\.zip</loc>' "$TMP/cd.xml" |
             wc -l)" = "$1" ]
}
# pkg_check L 'rel:change:content|...' : changedump-L-1.zip (the only
# package of list L) holds exactly these entries in this order, each
# created/updated one a stored bitstream of this content whose md5 and
# length are the manifest's; its manifest, served at changedump-L-1.xml,
# is the same document, and validates
pkg_check() {
    fetch s "resourcesync/changedump-$1-1.zip" "$TMP/p$1.zip" || return 1
    fetch s "resourcesync/changedump-$1-1.xml" "$TMP/m$1.xml" || return 1
    rsdoc_ok "$TMP/m$1.xml" || return 1
    "$PY" - "$TMP/p$1.zip" "$TMP/m$1.xml" "$(src_url s)" "$2" <<'EOF'
import hashlib, sys, zipfile
import xml.etree.ElementTree as ET
SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
RS = "{http://www.openarchives.org/rs/terms/}"
z = zipfile.ZipFile(sys.argv[1])
inner = z.read("manifest.xml")
assert inner == open(sys.argv[2], "rb").read(), "served manifest differs"
m = ET.fromstring(inner)
assert m.find(RS + "md").get("capability") == "changedump-manifest"
want = [w.split(":", 2) for w in sys.argv[4].split("|")]
got = m.findall(SM + "url")
assert len(got) == len(want), (len(got), len(want))
members = {i.filename for i in z.infolist()} - {"manifest.xml"}
used = set()
for e, (rel, change, content) in zip(got, want):
    md = e.find(RS + "md")
    loc = e.findtext(SM + "loc")
    assert loc == sys.argv[3] + rel, (loc, rel)
    assert md.get("change") == change, (rel, md.get("change"), change)
    assert md.get("datetime"), rel
    if change == "deleted":
        assert md.get("path") is None, rel
        continue
    name = md.get("path").lstrip("/")
    data = z.read(name)
    assert z.getinfo(name).compress_type == zipfile.ZIP_STORED
    assert data == content.encode(), (rel, data, content)
    assert int(md.get("length")) == len(data)
    hashes = dict(h.split(":", 1) for h in md.get("hash").split())
    assert hashes["md5"] == hashlib.md5(data).hexdigest(), rel
    used.add(name)
assert used == members, (used, members)
EOF
}

note "rssource --dump --page-size 5"
if start_source; then ok "rssource starts"; else
    bad "rssource starts"; src_finish; fi
SRC_PORT=${SRC_HTTP[s]}      # restarts keep the base URL
chg put c.txt 'c one'
chg put a.txt 'a one'
chg put a.txt 'a two, longer'
chg rm "$D/b.txt"
chg put sub/d.txt 'dee'                   # closes list 1
chg put e.txt 'e, soon gone'
check "the Capability List lists the Change Dump" wait_until 20 sh -c \
    "curl -sf '$(src_url s resourcesync/capabilitylist.xml)' | grep -q '<loc>$(src_url s resourcesync/changedump.xml)</loc>'"
check "changedump.xml lists list 1's package" wait_until 20 cdump_lists 1
check "changedump.xml is valid (strict)" rsdoc_ok "$TMP/cd.xml"
expect_eq "capability" "$(xq "$TMP/cd.xml" 'md["capability"]')" changedump
expect_eq "the package's manifest link" \
    "$(xq "$TMP/cd.xml" 'urls[0]["ln"]["contents"]')" \
    "$(src_url s resourcesync/changedump-1-1.xml)"
expect_eq "the package's length" "$(xq "$TMP/cd.xml" 'urls[0]["length"]')" \
    "$(get s resourcesync/changedump-1-1.zip | wc -c)"
check "list 1's package: one bitstream per change, a.txt twice" pkg_check 1 \
    'c.txt:created:c one|a.txt:updated:a one|a.txt:updated:a two, longer|b.txt:deleted:|sub/d.txt:created:dee'
expect_eq "the open list has no package" \
    "$(status_code s resourcesync/changedump-2-1.zip)" 404
expect_eq "a spool is not served" \
    "$(status_code s resourcesync/spool-2.bin)" 404
expect_eq "a package is served with Range like any file" \
    "$(get s resourcesync/changedump-1-1.zip -r 0-3 | head -c 2)" PK

note "a restart in the middle of list 2"
chg rm "$D/e.txt"
src_stop s
put c.txt 'c changed while down'
N=$((N + 1))
if start_source; then ok "rssource restarts"; else
    bad "rssource restarts"; src_finish; fi
wait_until 10 count_is "$N" || bad "the change made while down is seen"
chg put f.txt 'f'
chg put f2.txt 'f two'                     # closes list 2
check "changedump.xml lists lists 1 and 2" wait_until 20 cdump_lists 2
check "list 2's package: a deleted file's bitstream as it was created" \
    pkg_check 2 'e.txt:created:e, soon gone|e.txt:deleted:|c.txt:updated:c changed while down|f.txt:created:f|f2.txt:created:f two'
check "changedump.xml is valid (strict)" rsdoc_ok "$TMP/cd.xml"

note "a file over --changedump-max-bytes"
src_stop s
if start_source --changedump-max-bytes 4096; then ok "rssource restarts"
else bad "rssource restarts"; src_finish; fi
"$PY" -c 'import sys; open(sys.argv[1], "wb").write(b"H" * 100000)' \
    "$D/huge.bin"
N=$((N + 1))
wait_until 10 count_is "$N" || bad "the huge file is seen"
chg put g.txt 'g'
chg put h.txt 'h'
chg put i.txt 'i'
chg put j.txt 'j'                           # closes list 3
chg put k.txt 'k'
chg put l.txt 'l'
chg put m.txt 'm'
chg put n.txt 'n'
chg put o.txt 'o'                           # closes list 4
check "list 4 gets its package" wait_until 20 cdump_lists 3
expect_eq "list 3 has none" \
    "$(status_code s resourcesync/changedump-3-1.zip)" 404
check "list 4's package" pkg_check 4 \
    'k.txt:created:k|l.txt:created:l|m.txt:created:m|n.txt:created:n|o.txt:created:o'
check "the capture said once that list 3 gets no Change Dump" \
    test "$(grep -c 'change dump capture stopped' "${SRC_LOG[s]}")" = 1
check "and the build why" grep -q 'no change dump for a Change List' \
    "${SRC_LOG[s]}"
check "the spools are freed" sh -c "! ls '$TMP/s.state/dumps' | grep -q 'spool-[1-4]\.bin'"

note "the same state served under another base URL"
OLD=$(src_url s)
src_stop s
SRC_PORT=0
if start_source; then ok "rssource restarts on another port"; else
    bad "rssource restarts on another port"; src_finish; fi
check "its base URL changed" test "$(src_url s)" != "$OLD"
get s resourcesync/changedump.xml -o "$TMP/cd5.xml"
check "changedump.xml names no package of the old base URL" \
    sh -c "! grep -q '$OLD' '$TMP/cd5.xml'"
expect_eq "list 4's package (made for the old one) is gone" \
    "$(status_code s resourcesync/changedump-4-1.zip)" 404
chg put p.txt 'p'
chg put q.txt 'q'
chg put r.txt 'r'
chg put s.txt 's'
chg put t.txt 't'                           # closes list 5
check "list 5 gets its package" wait_until 20 cdump_lists 1
check "list 5's package, made for the new base URL" pkg_check 5 \
    'p.txt:created:p|q.txt:created:q|r.txt:created:r|s.txt:created:s|t.txt:created:t'
check "changedump.xml is valid (strict)" rsdoc_ok "$TMP/cd.xml"

src_finish
