#!/usr/bin/env bash
# test_sub_badentry.sh - one malformed entry in a Source's list does not
# stop the mirror, and never deletes (docs/subscriber.md, Malformed
# entries). A plain static web server (python3 -m http.server on
# 127.0.0.1) serves hand-written documents:
#   A. a Change List with an entry whose <loc> has a raw space among good
#      ones: the good ones are mirrored, the bad one logged with its
#      document and line, and the mirror follows the changes after it;
#   B. a Resource List (read by a reconcile, --force-delete) whose entry
#      for a mirrored file has a bad <lastmod>, and which no longer lists
#      another mirrored file: neither is deleted on that run, the good
#      entries are mirrored, the log says why; once the list is mended,
#      the file it leaves out goes.
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"

WWW=$TMP/www
D=$WWW/data
mkdir -p "$D" "$WWW/.well-known" "$WWW/b"

if [ ! -x "$RSSUB" ]; then
    bad "rssub is built ($RSSUB)"
    finish
fi

bg http "$PY" -u -m http.server --bind 127.0.0.1 --directory "$WWW" 0 \
    >"$TMP/http.out" 2>"$TMP/http.log"
PORT=
for _ in $(seq 100); do
    PORT=$(sed -n 's/.* port \([0-9][0-9]*\) .*/\1/p' "$TMP/http.out")
    [ -n "$PORT" ] && break
    sleep 0.1
done
if [ -z "$PORT" ]; then
    bad "python3 -m http.server starts" "$(cat "$TMP/http.out")"
    finish
fi
ok "python3 -m http.server serves the Sources on 127.0.0.1:$PORT"
B=http://127.0.0.1:$PORT
SM=http://www.sitemaps.org/schemas/sitemap/0.9
RS=http://www.openarchives.org/rs/terms/

# logged NAME TEXT: sub_cmd NAME's log has a line holding TEXT.
logged() { grep -qF -- "$2" "$TMP/$1.log"; }

# ------------------------------------------------ A: a Change List entry

M=$TMP/mirror-a
ST=$TMP/a.db
printf 'alpha\n' >"$D/a.txt"
cat >"$WWW/capabilitylist.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="$SM" xmlns:rs="$RS">
  <rs:md capability="capabilitylist"/>
  <url><loc>$B/resourcelist.xml</loc><rs:md capability="resourcelist"/></url>
  <url><loc>$B/changelist.xml</loc><rs:md capability="changelist"/></url>
</urlset>
EOF
cat >"$WWW/resourcelist.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="$SM" xmlns:rs="$RS">
  <rs:md capability="resourcelist" at="2024-01-01T00:00:00Z"/>
  <url><loc>$B/data/a.txt</loc></url>
</urlset>
EOF
write_cl() {
    cat >"$WWW/changelist.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="$SM" xmlns:rs="$RS">
  <rs:md capability="changelist" from="2024-01-01T00:00:00Z"/>
$1</urlset>
EOF
}
write_cl ""

note "A: the baseline"
sub_cmd a0 sync "$B/capabilitylist.xml" "$M" "$ST"
sub_exit a0 0
check "a.txt mirrored" cmp "$D/a.txt" "$M/data/a.txt"

note "A: a Change List with a <loc> holding a raw space"
printf 'x\n' >"$D/x.txt"
printf 'y\n' >"$D/y.txt"
write_cl "  <url><loc>$B/data/x.txt</loc><rs:md change=\"created\" datetime=\"2024-01-02T10:00:00Z\"/></url>
  <url><loc>$B/data/bad file.txt</loc><rs:md change=\"created\" datetime=\"2024-01-02T11:00:00Z\"/></url>
  <url><loc>$B/data/y.txt</loc><rs:md change=\"created\" datetime=\"2024-01-02T12:00:00Z\"/></url>
"
sub_cmd a1 sync "$B/capabilitylist.xml" "$M" "$ST"
sub_exit a1 1
check "x.txt, before the bad entry, mirrored" cmp "$D/x.txt" "$M/data/x.txt"
check "y.txt, after it, mirrored" cmp "$D/y.txt" "$M/data/y.txt"
check "the bad entry is logged with its document and line" \
    grep -q "skipped a malformed entry.*url=$B/changelist.xml.*line=5" \
    "$TMP/a1.log"
check "... and why" logged a1 'is not an absolute http(s) URI'
expect_eq "... once" "$(grep -c 'skipped a malformed entry' "$TMP/a1.log")" 1
check "the pull did not fail" sh -c "! grep -q 'pull failed' '$TMP/a1.log'"

note "A: the mirror follows the changes after it"
printf 'z\n' >"$D/z.txt"
write_cl "  <url><loc>$B/data/x.txt</loc><rs:md change=\"created\" datetime=\"2024-01-02T10:00:00Z\"/></url>
  <url><loc>$B/data/bad file.txt</loc><rs:md change=\"created\" datetime=\"2024-01-02T11:00:00Z\"/></url>
  <url><loc>$B/data/y.txt</loc><rs:md change=\"created\" datetime=\"2024-01-02T12:00:00Z\"/></url>
  <url><loc>$B/data/z.txt</loc><rs:md change=\"created\" datetime=\"2024-01-02T13:00:00Z\"/></url>
"
sub_cmd a2 sync "$B/capabilitylist.xml" "$M" "$ST"
check "z.txt, a later change, mirrored" cmp "$D/z.txt" "$M/data/z.txt"
check "nothing deleted" test -e "$M/data/a.txt"

# ------------------------------------------------ B: a Resource List entry

M=$TMP/mirror-b
ST=$TMP/b.db
for f in keep old n; do printf '%s\n' "$f" >"$D/$f.txt"; done
# No Change List: every sync reconciles with the Resource List.
cat >"$WWW/b/capabilitylist.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="$SM" xmlns:rs="$RS">
  <rs:md capability="capabilitylist"/>
  <url><loc>$B/b/resourcelist.xml</loc><rs:md capability="resourcelist"/></url>
</urlset>
EOF
write_rl() {
    cat >"$WWW/b/resourcelist.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="$SM" xmlns:rs="$RS">
  <rs:md capability="resourcelist" at="$1"/>
$2</urlset>
EOF
}
write_rl 2024-01-01T00:00:00Z "  <url><loc>$B/data/a.txt</loc></url>
  <url><loc>$B/data/keep.txt</loc></url>
  <url><loc>$B/data/old.txt</loc></url>
"
note "B: the baseline"
sub_cmd b0 sync "$B/b/capabilitylist.xml" "$M" "$ST" --force-delete
sub_exit b0 0
check "keep.txt and old.txt mirrored" test -e "$M/data/keep.txt" -a \
    -e "$M/data/old.txt"

note "B: keep.txt's entry malformed, old.txt no longer listed, n.txt new"
write_rl 2024-01-03T00:00:00Z "  <url><loc>$B/data/a.txt</loc></url>
  <url><loc>$B/data/keep.txt</loc><lastmod>yesterday</lastmod></url>
  <url><loc>$B/data/n.txt</loc></url>
"
sub_cmd b1 sync "$B/b/capabilitylist.xml" "$M" "$ST" --force-delete
sub_exit b1 1
check "n.txt, a good entry, mirrored" cmp "$D/n.txt" "$M/data/n.txt"
check "keep.txt, the bad entry's, not deleted" test -e "$M/data/keep.txt"
check "old.txt, not listed, not deleted on that list's word" \
    test -e "$M/data/old.txt"
check "the bad entry is logged with its document and line" \
    grep -q "skipped a malformed entry.*url=$B/b/resourcelist.xml.*line=5" \
    "$TMP/b1.log"
check "... and why" logged b1 '<lastmod>yesterday</lastmod> is not a W3C'
check "the log says why nothing was deleted" \
    logged b1 'nothing is deleted on its word this run'

note "B: the list mended, what it leaves out goes"
write_rl 2024-01-04T00:00:00Z "  <url><loc>$B/data/a.txt</loc></url>
  <url><loc>$B/data/keep.txt</loc></url>
  <url><loc>$B/data/n.txt</loc></url>
"
sub_cmd b2 sync "$B/b/capabilitylist.xml" "$M" "$ST" --force-delete
sub_exit b2 0
check "old.txt deleted" test ! -e "$M/data/old.txt"
check "keep.txt kept" cmp "$D/keep.txt" "$M/data/keep.txt"

sub_finish
