#!/usr/bin/env bash
# test_sub_lenient.sh - rssub mirrors a Source that writes what real
# implementations write rather than what the spec says (issue 11, item 4):
# a plain static web server (python3 -m http.server on 127.0.0.1) serves
# quirky documents - Change Lists newest first, datetimes without a time
# zone (minutes only too), a Change List Index whose root says
# capability="changelistindex", a Resource List with no `at`, padded
# <loc>s, prefixed sitemap elements, <rs:md> before <loc>, empty <rs:ln/>,
# no rel="up" links, a deletion with no time, an attribute of the 2013
# drafts - and the resources. rsdoc says each document breaks the spec
# and reads it with --lenient; `rssub sync` mirrors the Source, then
# follows a second round of changes listed newest first, which only
# applying by datetime (not by position) gets right: a resource deleted
# and created again is kept, one created and deleted is never fetched, two
# changes of one resource fetch it once.
# shellcheck disable=SC2317 # helpers run through check
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"

RSDOC=$RS_BUILD_DIR/tools/rsdoc
WWW=$TMP/www          # the Source's web root
D=$WWW/data           # its resources
M=$TMP/mirror
ST=$TMP/sub.db
HTTP_LOG=$TMP/http.log
mkdir -p "$D/sub" "$WWW/.well-known"

if [ ! -x "$RSSUB" ] || [ ! -x "$RSDOC" ]; then
    bad "rssub and rsdoc are built ($RSSUB, $RSDOC)"
    finish
fi

# ------------------------------------------------------------ the server

# python3 -m http.server on 127.0.0.1:0; it says its port on stdout and
# logs each request ("GET /path HTTP/1.1" STATUS) on stderr.
bg http "$PY" -u -m http.server --bind 127.0.0.1 --directory "$WWW" 0 \
    >"$TMP/http.out" 2>"$HTTP_LOG"
PORT=
for _ in $(seq 100); do
    PORT=$(sed -n 's/.* port \([0-9][0-9]*\) .*/\1/p' "$TMP/http.out")
    [ -n "$PORT" ] && break
    sleep 0.1
done
if [ -z "$PORT" ]; then
    bad "python3 -m http.server starts" "$(cat "$TMP/http.out" "$HTTP_LOG")"
    finish
fi
ok "python3 -m http.server serves the Source on 127.0.0.1:$PORT"
B=http://127.0.0.1:$PORT

# gets PATH: how many GETs of PATH the server has logged since the last
# mark (mark: from now on).
MARK=0
mark() { MARK=$(wc -l <"$HTTP_LOG"); }
gets() { tail -n "+$((MARK + 1))" "$HTTP_LOG" | grep -c "\"GET $1 HTTP"; }

SM=http://www.sitemaps.org/schemas/sitemap/0.9
RS=http://www.openarchives.org/rs/terms/

# ------------------------------------------------------- round 1: baseline

printf 'alpha 1\n' >"$D/a.txt"
printf 'bravo\n' >"$D/b.txt"
printf 'charlie 2\n' >"$D/c.txt"
printf 'golf 1\n' >"$D/sub/g.txt"

# A Source Description with an empty link, no time zone anywhere.
cat >"$WWW/.well-known/resourcesync" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="$SM" xmlns:rs="$RS">
  <rs:ln/>
  <rs:md capability="description"/>
  <url><loc>$B/capabilitylist.xml</loc><rs:md capability="capabilitylist"/></url>
</urlset>
EOF
# Prefixed sitemap elements, no rel="up", rs:md before loc.
cat >"$WWW/capabilitylist.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<sm:urlset xmlns:sm="$SM" xmlns:rs="$RS">
  <rs:md capability="capabilitylist"/>
  <sm:url><rs:md capability="resourcelist"/><sm:loc>$B/resourcelist.xml</sm:loc></sm:url>
  <sm:url><rs:md capability="changelist"/><sm:loc>$B/changelist-index.xml</sm:loc></sm:url>
</sm:urlset>
EOF
# No at, the 2013 beta's modified= instead, padded locs, lastmods without
# a zone (one to the minute), an empty link, rs:md before loc.
cat >"$WWW/resourcelist.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<sm:urlset xmlns:sm="$SM" xmlns:rs="$RS">
  <rs:md capability="resourcelist" modified="2024-01-01T00:00:00"/>
  <sm:url>
    <sm:loc>
      $B/data/a.txt
    </sm:loc>
    <sm:lastmod>2024-01-01T00:00:00</sm:lastmod>
    <rs:ln/>
  </sm:url>
  <sm:url><rs:md length="6"/><sm:loc>$B/data/b.txt</sm:loc><sm:lastmod>2024-01-01T00:00</sm:lastmod></sm:url>
  <sm:url><sm:loc>  $B/data/c.txt  </sm:loc><sm:lastmod>2024-01-01T00:00:00</sm:lastmod></sm:url>
  <sm:url><sm:loc>$B/data/sub/g.txt</sm:loc><sm:lastmod>2024-01-01T00:00:00</sm:lastmod></sm:url>
</sm:urlset>
EOF
# The index's root says changelistindex; its parts' times have no zone.
cat >"$WWW/changelist-index.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<sitemapindex xmlns="$SM" xmlns:rs="$RS">
  <rs:md capability="changelistindex" from="2024-01-01T00:00:00"/>
  <sitemap><loc>$B/changelist-1.xml</loc><rs:md from="2024-01-01T00:00:00" until="2024-01-02T00:00:00"/></sitemap>
  <sitemap><loc>$B/changelist-2.xml</loc><rs:md from="2024-01-02T00:00:00"/></sitemap>
</sitemapindex>
EOF
# Closed, newest first: c.txt created, then updated.
cat >"$WWW/changelist-1.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="$SM" xmlns:rs="$RS">
  <rs:md capability="changelist" from="2024-01-01T00:00:00" until="2024-01-02T00:00:00"/>
  <url><loc>$B/data/c.txt</loc><rs:md change="updated" datetime="2024-01-01T12:00:00"/></url>
  <url><loc>$B/data/c.txt</loc><rs:md change="created" datetime="2024-01-01T10:00:00"/></url>
</urlset>
EOF
write_cl2() {
    cat >"$WWW/changelist-2.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="$SM" xmlns:rs="$RS">
  <rs:md capability="changelist" from="2024-01-02T00:00:00"/>
$1</urlset>
EOF
}
write_cl2 ""

note "the documents break the spec; the reader's view reads them"
docs=("$B/.well-known/resourcesync" "$B/capabilitylist.xml"
      "$B/resourcelist.xml" "$B/changelist-index.xml" "$B/changelist-1.xml")
for u in "${docs[@]}"; do
    out=$("$RSDOC" validate "$u" 2>&1)
    [ $? -eq 1 ] && ok "rsdoc validate ${u#"$B"/}: invalid by default" ||
        bad "rsdoc validate ${u#"$B"/}: exit 0 by default" "$out"
    out=$("$RSDOC" validate --lenient "$u" 2>&1)
    if [ $? -eq 0 ] && printf '%s\n' "$out" | grep -q ': warning: '; then
        ok "rsdoc validate --lenient ${u#"$B"/}: exit 0 with warnings"
    else
        bad "rsdoc validate --lenient ${u#"$B"/}" "$out"
    fi
done
out=$("$RSDOC" validate --lenient "${docs[@]}" 2>&1 >/dev/null)
for w in 'no time zone' 'changelistindex' 'no "at" attribute' \
         'whitespace around' 'after <rs:md>' 'empty <rs:ln/>' \
         'forward chronological order' 'no <rs:ln rel="up">' 'modified='; do
    printf '%s\n' "$out" | grep -qF -- "$w" && ok "--lenient warns: $w" ||
        bad "--lenient warns: $w" "$out"
done

note "round 1: the baseline"
mark
sub_cmd base sync "$B/" "$M" "$ST"
sub_exit base 0
synced_is base "failed=0"
check "the mirror equals the Source" same_tree "$D" "$M/data"
expect_eq "discovered through /.well-known/resourcesync" \
    "$(gets /.well-known/resourcesync)" 1
expect_eq "its resources fetched once each" \
    "$(gets /data/a.txt) $(gets /data/b.txt) $(gets /data/sub/g.txt)" "1 1 1"

# ------------------------------------------- round 2: changes, newest first

note "round 2: changes listed newest first"
# (Past the second the documents were fetched in: Last-Modified has
# one-second resolution.)
sleep 1.1
printf 'alpha 2\n' >"$D/a.txt"            # updated 09:00
rm "$D/b.txt"                             # deleted, time not given
printf 'delta 2\n' >"$D/d.txt"            # created 08:00, updated 11:00
rm -f "$D/e.txt"                          # created 08:30, deleted 09:30
printf 'golf 2\n' >"$D/sub/g.txt"         # deleted 10:30, created 11:30
# md5: NAME's digest (the latest change of each carries one, so that
# reading the list again recognises what the mirror holds).
md5() { md5sum "$D/$1" | cut -c1-32; }
write_cl2 "  <url><loc>$B/data/sub/g.txt</loc><rs:md change=\"created\" datetime=\"2024-01-02T11:30:00\" hash=\"md5:$(md5 sub/g.txt)\"/></url>
  <url><loc>$B/data/d.txt</loc><lastmod>2024-01-02T11:00</lastmod><rs:md change=\"updated\" hash=\"md5:$(md5 d.txt)\"/></url>
  <url><loc>$B/data/sub/g.txt</loc><rs:md change=\"deleted\" datetime=\"2024-01-02T10:30:00\"/></url>
  <url><loc>$B/data/b.txt</loc><rs:md change=\"deleted\"/></url>
  <url><rs:md change=\"deleted\" datetime=\"2024-01-02T09:30:00\"/><loc>$B/data/e.txt</loc></url>
  <url><loc>$B/data/a.txt</loc><rs:md change=\"updated\" datetime=\"2024-01-02T09:00:00\" hash=\"md5:$(md5 a.txt)\"/></url>
  <url><loc>$B/data/e.txt</loc><rs:md change=\"created\" datetime=\"2024-01-02T08:30:00\"/></url>
  <url><loc> $B/data/d.txt </loc><rs:md change=\"created\" datetime=\"2024-01-02T08:00:00\"/></url>
"
out=$("$RSDOC" validate "$B/changelist-2.xml" 2>&1)
printf '%s\n' "$out" | grep -q ':5: error: entries are not in forward chronological order' &&
    ok "rsdoc: the Change List is newest first" || bad "rsdoc: the order" "$out"

mark
sub_cmd inc sync "$B/" "$M" "$ST"
sub_exit inc 0
synced_is inc "failed=0"
check "the mirror equals the Source" same_tree "$D" "$M/data"
check "g.txt, deleted at 10:30 and created at 11:30, is there" \
    cmp "$D/sub/g.txt" "$M/data/sub/g.txt"
check "b.txt, deleted at a time not given, is gone" test ! -e "$M/data/b.txt"
expect_eq "e.txt, created at 08:30 and deleted at 09:30, was never fetched" \
    "$(gets /data/e.txt)" 0
expect_eq "the Change List Index (changelistindex) read" \
    "$(gets /changelist-index.xml)" 1
expect_eq "d.txt, created at 08:00 and updated at 11:00, fetched once" \
    "$(gets /data/d.txt)" 1
expect_eq "a.txt fetched once more" "$(gets /data/a.txt)" 1
expect_eq "g.txt fetched once more" "$(gets /data/sub/g.txt)" 1

note "round 3: nothing new"
sub_cmd again sync "$B/" "$M" "$ST"
sub_exit again 0
synced_is again "fetched=0 deleted=0 failed=0"
check "the mirror still equals the Source" same_tree "$D" "$M/data"

sub_finish
