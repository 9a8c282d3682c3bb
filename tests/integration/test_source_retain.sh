#!/usr/bin/env bash
# test_source_retain.sh - the Change Lists rssource serves always reach
# back to the `at` of the Resource List and the Resource Dump it serves
# (docs/source.md 5, "Retention"): with --changelist-retain (3 s) far
# shorter than --resourcelist-refresh (1 min), lists past the retention
# that cover time after the Resource List's `at` are kept, with their
# deletions, and a warning says so at start; with a short refresh, the
# Resource List is rebuilt without being asked for, and the retention
# then goes on; with --dump, the Resource Dump's `at` holds them too.
# Before the fix the lists were dropped at the retention: a Destination
# that baselined from the Resource List (or Dump) could find the
# deletions nowhere. About 45 s (rssource's policy ticks every 10 s).
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"

[ -x "$RSSOURCE" ] || { bad "built: $RSSOURCE"; src_finish; }

# Three Sources of the same kind of tree, started together so that their
# ticks line up: a (refresh 1 min), b (refresh 5 s), c (b with --dump and
# a dump interval of an hour).
RETAIN=(--changelist-max-age 2s --changelist-retain 3s)
for n in a b c; do
    mkdir -p "$TMP/$n"
    for i in $(seq 0 39); do echo "file $i" >"$TMP/$n/f$i.txt"; done
done
src_start a "$TMP/a" "${RETAIN[@]}" || { bad "a starts"; src_finish; }
src_start b "$TMP/b" "${RETAIN[@]}" --resourcelist-refresh 5s ||
    { bad "b starts"; src_finish; }
src_start c "$TMP/c" "${RETAIN[@]}" --resourcelist-refresh 5s --dump \
    --dump-interval 1h || { bad "c starts"; src_finish; }
ok "three rssources start"
# shellcheck disable=SC2317 # run through wait_until
dump_published() { grep -q 'msg="resource dump published"' "${SRC_LOG[c]}"; }
check "c publishes its Resource Dump" wait_until 20 dump_published
fetch c resourcesync/resourcedump.xml "$TMP/c.rd.xml" ||
    bad "c's Resource Dump is served"

# The changes: deletions, updates, a creation, in the first list.
for n in a b c; do
    rm "$TMP/$n"/f1*.txt
    for i in 2 3 4; do echo changed >"$TMP/$n/f$i.txt"; done
    echo new >"$TMP/$n/new.txt"
done
WANT=$(printf 'deleted f%s.txt\n' 1 10 11 12 13 14 15 16 17 18 19 | sort)

# reaches_back NAME DOC...: the Change List Index's oldest `from` is not
# after the `at` of any DOC (a saved Resource List or Resource Dump).
# shellcheck disable=SC2317 # run through check
reaches_back() {
    local name=$1
    shift
    fetch "$name" resourcesync/changelist-index.xml "$TMP/$name.idx.xml" ||
        return 1
    "$PY" - "$TMP/$name.idx.xml" "$@" <<'EOF'
import sys
import xml.etree.ElementTree as ET
from datetime import datetime
SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
RS = "{http://www.openarchives.org/rs/terms/}"
def dt(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00"))
idx = ET.parse(sys.argv[1]).getroot()
first = min(dt(u.find(RS + "md").get("from")) for u in idx.findall(SM + "sitemap"))
for doc in sys.argv[2:]:
    at = ET.parse(doc).getroot().find(RS + "md").get("at")
    print("oldest list from %s, %s at %s" % (first, doc.rsplit("/", 1)[-1], at))
    assert first <= dt(at), "a hole between the document's at and the lists"
EOF
}
# deletions NAME: the deletions every Change List served holds, sorted.
deletions() { changes_of "$1" | grep '^deleted' | sort; }
# lists NAME: how many Change Lists the index holds.
lists() {
    fetch "$1" resourcesync/changelist-index.xml "$TMP/$1.n.xml" &&
        xq "$TMP/$1.n.xml" 'len(urls)'
}
# shellcheck disable=SC2317 # run through check
not_rebuilt() { ! grep -q 'msg="Resource List published" generation=2' "${SRC_LOG[$1]}"; }
# shellcheck disable=SC2317 # run through wait_until
rl_gen2() { grep -q 'msg="Resource List published" generation=2' "${SRC_LOG[b]}"; }
# shellcheck disable=SC2317
list1_gone() {
    fetch b resourcesync/changelist-index.xml "$TMP/b.g.xml" &&
        ! grep -q 'changelist-1\.xml' "$TMP/b.g.xml"
}

note "a: --changelist-retain 3s, --resourcelist-refresh 1m"
check "a warns at start that lists wait for the Resource List" \
    grep -q 'msg="Change Lists are kept past --changelist-retain' \
    "${SRC_LOG[a]}"
# Two ticks after the changes: the list holding them closed (max-age) at
# the first and passed the retention at the second.
sleep 25
fetch a resourcesync/resourcelist.xml "$TMP/a.rl.xml" ||
    bad "a serves its Resource List"
check "a serves the Resource List of its start (refresh 1 min)" \
    not_rebuilt a
check "a's Change Lists reach back to its Resource List's at" \
    reaches_back a "$TMP/a.rl.xml"
expect_eq "a's Change Lists hold every deletion since" "$(deletions a)" \
    "$WANT"
check "a's Resource List still lists the deleted files" \
    grep -q '/f10\.txt</loc>' "$TMP/a.rl.xml"

note "b: --resourcelist-refresh 5s: rebuilt unasked, the retention goes on"
check "b builds a Resource List without a request" wait_until 30 rl_gen2
check "b then drops the list the retention let go" wait_until 25 list1_gone
fetch b resourcesync/resourcelist-2.xml "$TMP/b.rl.xml" ||
    bad "b serves generation 2"
check "b's Change Lists reach back to its new Resource List's at" \
    reaches_back b "$TMP/b.rl.xml"
check "b's new Resource List no longer lists the deleted files" \
    test "$(grep -c '/f1[0-9]*\.txt</loc>' "$TMP/b.rl.xml")" = 0

note "c: --dump --dump-interval 1h: the Resource Dump's at holds the lists"
check "c's Change Lists reach back to its Resource Dump's at" \
    reaches_back c "$TMP/c.rd.xml"
expect_eq "c's Change Lists hold every deletion since its dump" \
    "$(deletions c)" "$WANT"
check "c keeps more than the open list" test "$(lists c)" -ge 2

src_finish
