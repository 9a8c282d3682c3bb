#!/usr/bin/env bash
# test_sub_changedump.sh - rssub --dump catches up from rssource's Change
# Dump: a mirror made, then away while ten changes close two Change Lists
# (--page-size 5: a file updated twice in one list, a deletion, creations)
# and one more stays in the open list. At its next sync rssub reads the two
# packages (requests counted by a logging proxy rssource's base URL points
# at) and asks for no file they gave: only the open list's change is
# fetched on its own. The mirror equals the Source. A package the proxy
# tampers with has its member refused and that file fetched alone, a
# sync with nothing new since the last close fetches no package at all,
# and a catch-up killed halfway (-9) is finished by the next sync.
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"

D=$TMP/data
mkdir -p "$D/sub"
for i in 0 1 2 3 4 5; do printf 'file %s, as it began\n' "$i" >"$D/sub/f$i.txt"; done

PX=$TMP/proxy
bg proxy "$PY" "$RS_SOURCE_DIR/tests/integration/lib/dump_proxy.py" \
    --ready "$PX.ready" --upstream-file "$PX.upstream" \
    --tamper-file "$PX.tamper" --log "$PX.log"
wait_file "$PX.ready" 10 || { bad "the proxy starts"; src_finish; }
PP=$(sed -n 's/.*"port": *\([0-9]*\).*/\1/p' "$PX.ready")
B=http://127.0.0.1:$PP/

# resource_gets: GETs (200) of anything but the documents and packages
resource_gets() { grep -E '^GET /[^ ]* 200$' "$PX.log" | grep -v ' /resourcesync/\| /robots.txt \| /.well-known/' || true; }
count() { grep -cE "^GET $1 200\$" "$PX.log"; }

note "rssource --dump --page-size 5, a mirror from its Resource Dump"
if src_start s "$D" --base-url "$B" --dump --page-size 5 --dump-interval 1h \
        --settle 200ms && echo "${SRC_HTTP[s]}" >"$PX.upstream"; then
    ok "rssource starts"
else
    bad "rssource starts"; src_finish
fi
check "the Resource Dump is published" wait_until 20 sh -c \
    "curl -sf '${B}resourcesync/resourcedump.xml' | grep -q 'resourcedump-1-1.zip'"
sub_cmd m sync "$B" "$TMP/m" "$TMP/m.state" --dump
sub_exit m 0
check "the mirror equals the Source" same_tree "$D" "$TMP/m"
sub_cmd m2 sync "$B" "$TMP/m2" "$TMP/m2.state" --dump
sub_exit m2 0

note "the mirror away: two Change Lists close, one change stays open"
nchanges() { changes_of s | wc -l; }
count_is() { [ "$(nchanges)" = "$1" ]; }
N=$(nchanges)
chg() {
    N=$((N + 1))
    "$@"
    wait_until 10 count_is "$N" || bad "change $N seen ($*)"
}
put() { printf '%s' "$2" >"$D/$1"; }
chg put sub/f0.txt 'f0, first change'
chg put new1.txt 'new one'
chg put sub/f0.txt 'f0, second change, longer'
chg rm "$D/sub/f1.txt"
chg put sub/f2.txt 'f2 changed'
chg put new2.txt 'new two'
chg put new3.txt 'new three'
chg put sub/f3.txt 'f3 changed'
chg put new4.txt 'new four'
chg put new5.txt 'new five'
chg put open.txt 'in the open list'
# the lists close at 5 entries: which ones the changes above fall in
# depends on what the start-up scan recorded, so wait for every list but
# the open one to have its package
closed_lists() {
    curl -sf "${B}resourcesync/changelist-index.xml" |
        grep -o 'changelist-[0-9]*\.xml' | sort -u | wc -l
}
packaged() {
    local want=$(( $(closed_lists) - 1 ))
    [ "$want" -ge 2 ] &&
        [ "$(curl -sf "${B}resourcesync/changedump.xml" |
             grep -o 'changedump-[0-9]*-[0-9]*\.zip</loc>' | wc -l)" -ge "$want" ]
}
check "every closed list has its package" wait_until 30 packaged
NPKG=$(curl -sf "${B}resourcesync/changedump.xml" | grep -o 'changedump-[0-9]*-[0-9]*\.zip</loc>' | wc -l)

note "rssub sync --dump catches up from the packages"
: >"$PX.log"
sub_cmd m sync "$B" "$TMP/m" "$TMP/m.state" --dump
sub_exit m 0
check "the mirror equals the Source" same_tree "$D" "$TMP/m"
check "rssub unpacked the change dump" grep -q 'msg="change dump unpacked"' "$TMP/m.log"
check "f0's first change was superseded within its package" \
    grep -qE 'msg="change dump unpacked" .*superseded=[1-9]' "$TMP/m.log"
check "the deletion came from the package" \
    grep -qE 'msg="change dump unpacked" .*deleted=1 ' "$TMP/m.log"
check "packages were downloaded" test "$(count '/resourcesync/changedump-[0-9]+-[0-9]+\.zip')" -ge 1
expect_eq "resource requests: only the open list's change" \
    "$(resource_gets)" "GET /open.txt 200"

note "nothing closed since: no package fetched"
chg put open2.txt 'second in the open list'
: >"$PX.log"
sub_cmd m sync "$B" "$TMP/m" "$TMP/m.state" --dump
sub_exit m 0
check "the mirror equals the Source" same_tree "$D" "$TMP/m"
expect_eq "no package requested" \
    "$(count '/resourcesync/changedump-[0-9]+-[0-9]+\.zip')" 0
expect_eq "resource requests: the new change" "$(resource_gets)" "GET /open2.txt 200"

note "a tampered member: refused, that file fetched on its own"
# a package whose first stored member (the one the proxy flips) is its
# resource's last change there, so that rssub reads and checks it
curl -sf "${B}resourcesync/changedump.xml" -o "$TMP/cd.xml"
TP=$("$PY" - "$TMP/cd.xml" <<'EOF'
import io, sys, urllib.request, zipfile
import xml.etree.ElementTree as ET
SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
RS = "{http://www.openarchives.org/rs/terms/}"
for u in ET.parse(sys.argv[1]).getroot().findall(SM + "url"):
    loc = u.findtext(SM + "loc")
    z = zipfile.ZipFile(io.BytesIO(urllib.request.urlopen(loc).read()))
    first = next(i.filename for i in z.infolist()
                 if i.filename != "manifest.xml" and i.file_size > 0)
    ents = [(e.findtext(SM + "loc"), e.find(RS + "md").get("path"))
            for e in ET.fromstring(z.read("manifest.xml")).findall(SM + "url")]
    k = [n for n, (_, p) in enumerate(ents) if p == "/" + first][0]
    if all(l != ents[k][0] for l, _ in ents[k + 1:]):
        print(loc.rsplit("/", 1)[1], ents[k][0].split("/", 3)[3])
        break
EOF
)
check "a package to tamper with" test -n "$TP"
echo "${TP%% *}" >"$PX.tamper"
: >"$PX.log"
sub_cmd m2 sync "$B" "$TMP/m2" "$TMP/m2.state" --dump
sub_exit m2 0
: >"$PX.tamper"
check "the proxy tampered with it" grep -q "^TAMPERED ${TP%% *} " "$PX.log"
check "rssub refused the member" grep -q 'not taken from the dump' "$TMP/m2.log"
check "the mirror equals the Source" same_tree "$D" "$TMP/m2"
expect_eq "resource requests: the refused member and the open list's two" \
    "$(resource_gets | sort)" \
    "$(printf 'GET /%s 200\nGET /open.txt 200\nGET /open2.txt 200\n' "${TP#* }" | sort)"

note "rssub killed in the middle of a catch-up, then run again"
# another Source (--page-size 1000): a mirror of it, then 3,000 files
# created while it is away (three closed lists, packages of 500); the
# catch-up is killed (-9) once some are written, and the next sync --dump
# finishes it
BD=$TMP/big
mkdir -p "$BD"
printf 'seed\n' >"$BD/seed.txt"
src_start big "$BD" --dump --page-size 1000 --dump-max-files 500 \
    --dump-interval 1h --settle 200ms || bad "rssource starts"
BB=$(src_url big)
sub_cmd k sync "$BB" "$TMP/k" "$TMP/k.state"
sub_exit k 0
"$PY" - "$BD" <<'EOF2'
import os, sys
for i in range(3000):
    d = os.path.join(sys.argv[1], "n%02d" % (i // 100))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%04d.txt" % i), "w") as f:
        f.write("new file %d\n" % i * (1 + i % 30))
EOF2
big_packaged() {
    [ "$(changes_of big | wc -l)" -ge 3000 ] &&
        [ "$(curl -sf "${BB}resourcesync/changedump.xml" |
             grep -o 'changedump-[0-9]*-[0-9]*\.zip</loc>' | wc -l)" -ge 6 ]
}
check "the three closed lists are packed" wait_until 60 big_packaged
# (the mirror holds seed.txt already: 201 files is 200 new ones, 3001 all)
sub_sync_killed_halfway k "$BB" "$TMP/k" "$TMP/k.state" 201 3001 --dump
sub_cmd k sync "$BB" "$TMP/k" "$TMP/k.state" --dump
sub_exit k 0
check "the mirror equals the Source" same_tree "$BD" "$TMP/k"
check "the catch-up came from the change dump again" \
    grep -q 'msg="change dump unpacked"' "$TMP/k.log"
check "no package left beside the state" \
    test -z "$(find "$TMP" -maxdepth 1 -name 'k.state.dump-*')"
src_stop big

sub_finish
