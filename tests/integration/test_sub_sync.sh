#!/usr/bin/env bash
# test_sub_sync.sh - rssub's pull side against a programmable static Source
# (lib/static_source.py: the documents this script writes, served as they
# are, with faults set at run time and a request counter per path):
# baselines from the site root, the Capability List, an HTML page's <link>
# and a Link header, Resource Lists as an index (a part failing once, a
# part missing) and as rel="next" pages, a Resource List slow to arrive;
# incremental syncs through Change Lists (only what changed is fetched, a
# conditional GET answered 304), Change Lists that do not reach back (a
# reconcile), resource faults (hash mismatch, truncated body, 404, 500
# then OK, 503 with Retry-After, a body slower than --timeout) and their
# repair on the next sync, audits (--deep, --fix, stray files), hostile documents (URIs
# outside the origin or the mirror, malformed, DOCTYPE, oversized), refused
# states (inside the mirror, of another Source, in use), the attic, a
# change dated in the future, and gzipped documents.
# rssub is an ASan build in CI: no log of it may hold a sanitizer report.
# shellcheck disable=SC2317 # helpers run through check/wait_until
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"

RSDOC=$RS_BUILD_DIR/tools/rsdoc
SS=$RS_SOURCE_DIR/tests/integration/lib/static_source.py
WWW=$TMP/www          # the Source's web root
D=$WWW/data           # its resources: URIs $B/data/...
M=$TMP/mirror         # the mirror followed from the baseline to the end
ST=$TMP/sub.db
mkdir -p "$D"

if [ ! -x "$RSSUB" ]; then
    bad "rssub is built ($RSSUB)"
    finish
fi

# ------------------------------------------------------------ helpers

declare -A PORT
ss() { "$PY" "$SS" "$@"; }

# ss_start NAME ROOT: a static_source serving ROOT; its port in PORT[NAME],
# its request log in $TMP/NAME.http.log.
ss_start() {
    local name=$1 root=$2 ready=$TMP/$1.ready
    rm -f "$ready"
    bg "$name" "$PY" "$SS" serve --root "$root" --ready "$ready" \
        2>>"$TMP/$name.http.log"
    wait_file "$ready" 10 || return 1
    PORT[$name]=$(sed -n 's/.*"port":\([0-9]*\).*/\1/p' "$ready")
    [ -n "${PORT[$name]}" ]
}
# ctl NAME ARGS...: static_source ctl (rules JSON | reset | count PATH
# [STATUS] | gap PATH | paths PREFIX [STATUS] | counts).
ctl() {
    local name=$1
    shift
    ss ctl --port "${PORT[$name]}" "$@"
}

# sub NAME COMMAND MIRROR STATE [ARGS...]: one rssub run against
# $SUB_SOURCE (default the site root), 60 s at most; stdout and stderr in
# $TMP/NAME.log, exit status in SUB_RC (124: it hung and was killed).
sub() {
    local name=$1 cmd=$2 mir=$3 state=$4
    shift 4
    timeout -k 5 60 "$RSSUB" "$cmd" --source "${SUB_SOURCE:-$B/}" \
        --mirror "$mir" --state "$state" --log-format logfmt "$@" \
        >"$TMP/$name.log" 2>&1
    SUB_RC=$?
    SUB_LOGS+=("$TMP/$name.log")
}

# logged NAME PATTERN...: every (grep -E) PATTERN is in run NAME's log.
logged() {
    local name=$1 p
    shift
    for p in "$@"; do
        grep -Eq -- "$p" "$TMP/$name.log" ||
            { echo "no /$p/ in $name.log:"; tail -n 20 "$TMP/$name.log";
              return 1; }
    done
}

# same_tree MIRROR: the mirror holds exactly the Source's files under
# data/, byte for byte (rssub's own ".rssub*" names aside; empty
# directories are not resources, so either side may keep some), nothing
# else, and no temp file.
same_tree() {
    local m=$1 a b f extra tmpf
    a=$(cd "$D" && find . ! -type d | sort)
    b=$(cd "$m/data" 2>/dev/null &&
        find . -name '.rssub*' -prune -o ! -type d -print | sort)
    if [ "$a" != "$b" ]; then
        echo "the file lists differ (< Source, > mirror):"
        diff <(printf '%s\n' "$a") <(printf '%s\n' "$b")
        return 1
    fi
    while IFS= read -r f; do
        cmp "$D/$f" "$m/data/$f" || return 1
    done <<<"$a"
    extra=$(find "$m" -mindepth 1 -maxdepth 1 ! -name '.rssub*' ! -name data)
    [ -z "$extra" ] || { echo "not from the Source: $extra"; return 1; }
    tmpf=$(find "$m" -name '.rssub-tmp.*')
    [ -z "$tmpf" ] || { echo "temp files left: $tmpf"; return 1; }
}

# Documents (static_source.py write-*). write_rl [--parts N|--pages N];
# write_cl N FROM CHANGE:PATH... (the older Change Lists are rotated away
# first, so the index holds this one only).
write_rl() { ss write-resourcelist --www "$WWW" --base "$B" "$@"; }
write_cl() {
    local n=$1 from=$2
    shift 2
    rm -f "$WWW"/changelist-*.xml
    ss write-changelist --www "$WWW" --base "$B" --n "$n" --from "$from" "$@"
}
rl_at() { ss doc-time "$WWW/resourcelist.xml"; }

# data_paths [STATUS]: the resource paths requested since the last reset
# (with STATUS), one per line.
data_paths() { ctl s paths /data/ "$@"; }

# st_field NAME FIELD: a field of `rssub status` run NAME ("failed 0").
st_field() { sed -n "s/^$2 //p" "$TMP/$1.log" | head -n 1; }

# ------------------------------------------------------------ the tree

printf 'alpha\n' >"$D/a.txt"
printf 'bravo\n' >"$D/b.txt"
printf 'charlie\n' >"$D/c.txt"
printf 'with a space\n' >"$D/sp ace.txt"
: >"$D/empty.txt"
head -c 5000 /dev/urandom >"$D/g.bin"
mkdir -p "$D/sub/deeper" "$D/n"
printf '{"k": 1}\n' >"$D/sub/d.json"
head -c 70000 /dev/urandom >"$D/sub/deeper/e.bin"
printf 'foxtrot\n' >"$D/sub/f.txt"
for i in 0 1 2 3 4 5 6 7 8 9 10 11; do
    printf 'file %s\n' "$i" >"$D/n/f$i.txt"
done
NFILES=$(find "$D" -type f | wc -l)

if ss_start s "$WWW"; then
    ok "static_source serves the Source on 127.0.0.1:${PORT[s]}"
else
    bad "static_source starts" "$(cat "$TMP/s.http.log")"
    finish
fi
B=http://127.0.0.1:${PORT[s]}
cat >"$WWW/about.html" <<EOF
<!DOCTYPE html>
<html><head><title>about</title>
<link rel="stylesheet" href="/style.css">
<link rel="resourcesync" href="/capabilitylist.xml">
</head><body>about this Source</body></html>
EOF

# ====================================================== 1. baselines

note "1. baselines ($NFILES files)"
ss write-source --www "$WWW" --base "$B"
write_rl
# Every Change List but section 3's starts at this first snapshot, so it
# reaches back to whatever sync came after.
SNAP0=$(rl_at)
check "the documents written validate strictly" "$RSDOC" validate --strict \
    "$B/.well-known/resourcesync" "$B/capabilitylist.xml" \
    "$B/resourcelist.xml"

ctl s reset
sub base sync "$M" "$ST"
sub_exit base 0
synced_is base "fetched=$NFILES deleted=0 failed=0"
check "site root: the mirror equals the Source" same_tree "$M"
expect_eq "site root: discovered through /.well-known/resourcesync" \
    "$(ctl s count /.well-known/resourcesync 200)" 1
sub audit0 audit "$M" "$ST"
sub_exit audit0 0
expect_eq "audit: no difference line" \
    "$(grep -cE '^(added|updated|deleted) ' "$TMP/audit0.log")" 0
sub status0 status "$M" "$ST"
sub_exit status0 0
expect_eq "status: every resource" "$(st_field status0 resources)" "$NFILES"
expect_eq "status: none failed" "$(st_field status0 failed)" 0

# The same state as rssub of schema version 1 left it (its todo had no
# pos): status and a read-only audit read it as it is, a command that
# writes upgrades it (audit --fix: no change list yet for a sync).
user_version() {
    python3 -c 'import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute("PRAGMA user_version").fetchone()[0])' "$1"
}
python3 - "$ST" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.executescript("""DROP INDEX todo_due; ALTER TABLE todo DROP COLUMN pos;
CREATE INDEX todo_due ON todo(failed, not_before, seq);
PRAGMA user_version = 1;""")
db.close()
PY
sub status_v1 status "$M" "$ST"
sub_exit status_v1 0
expect_eq "status of a version 1 state: every resource" \
    "$(st_field status_v1 resources)" "$NFILES"
sub audit_v1 audit "$M" "$ST"
sub_exit audit_v1 0
expect_eq "a reader leaves a version 1 state as it is" "$(user_version "$ST")" 1
sub fix_v1 audit "$M" "$ST" --fix
sub_exit fix_v1 0
expect_eq "audit --fix upgrades a version 1 state" "$(user_version "$ST")" 2

ctl s reset
SUB_SOURCE=$B/capabilitylist.xml sub base_cl sync "$TMP/m-cl" "$TMP/cl.db"
sub_exit base_cl 0
check "from the Capability List: the mirror equals the Source" \
    same_tree "$TMP/m-cl"
expect_eq "...without /.well-known/resourcesync" \
    "$(ctl s count /.well-known/resourcesync)" 0

ctl s reset
SUB_SOURCE=$B/about.html sub base_html sync "$TMP/m-html" "$TMP/html.db"
sub_exit base_html 0
check "from an HTML page's <link rel=resourcesync>: the mirror equals the Source" \
    same_tree "$TMP/m-html"
expect_eq "...the page read, not /.well-known/resourcesync" \
    "$(ctl s count /about.html 200) $(ctl s count /.well-known/resourcesync)" \
    "1 0"

ctl s reset
ctl s rules '{"/data/a.txt": {"headers":
  {"Link": "<../capabilitylist.xml>; rel=\"resourcesync\""}}}'
SUB_SOURCE=$B/data/a.txt sub base_link sync "$TMP/m-link" "$TMP/link.db"
sub_exit base_link 0
check "from a resource's Link header: the mirror equals the Source" \
    same_tree "$TMP/m-link"
expect_eq "...without /.well-known/resourcesync" \
    "$(ctl s count /.well-known/resourcesync)" 0
ctl s rules '{}'

write_rl --parts 3
ctl s reset
sub base_parts sync "$TMP/m-parts" "$TMP/parts.db"
sub_exit base_parts 0
check "Resource List index over 3 parts: the mirror equals the Source" \
    same_tree "$TMP/m-parts"
expect_eq "...each part read once" \
    "$(ctl s count /resourcelist-1.xml) $(ctl s count /resourcelist-2.xml) $(ctl s count /resourcelist-3.xml)" \
    "1 1 1"
# a part that cannot be read: the walk is incomplete, so nothing the
# parts left unread list may count as gone
ctl s rules '{"/resourcelist-2.xml": {"status": 404}}'
sub parts_audit audit "$TMP/m-parts" "$TMP/parts.db"
sub_exit parts_audit 3
sub parts_fix audit "$TMP/m-parts" "$TMP/parts.db" --fix
sub_exit parts_fix 3
check "a part answering 404: audit --fix deletes nothing" \
    same_tree "$TMP/m-parts"
# a part answering 500 once: read again after a pause
ctl s reset
ctl s rules '{"/resourcelist-2.xml": {"status": 500, "count": 1}}'
sub base_parts500 sync "$TMP/m-parts500" "$TMP/parts500.db"
sub_exit base_parts500 0
synced_is base_parts500 "fetched=$NFILES deleted=0 failed=0"
check "a part answering 500 once: the mirror equals the Source" \
    same_tree "$TMP/m-parts500"
expect_eq "...part 2 read again" \
    "$(ctl s count /resourcelist-2.xml 500) $(ctl s count /resourcelist-2.xml 200)" \
    "1 1"
ctl s rules '{}'

write_rl --pages 3
ctl s reset
sub base_pages sync "$TMP/m-pages" "$TMP/pages.db"
sub_exit base_pages 0
check "Resource List in 3 rel=next pages: the mirror equals the Source" \
    same_tree "$TMP/m-pages"
# The first page twice: a baseline reads the list's head alone first (its
# at: the Change Lists since then bring the list forward), stopping the
# transfer there; then every page once.
expect_eq "...each page read once (the first also for its head)" \
    "$(ctl s count /resourcelist.xml) $(ctl s count /resourcelist-2.xml) $(ctl s count /resourcelist-3.xml)" \
    "2 1 1"

# resources fetched while the Resource List still streams in are as
# listed as the others
write_rl
ctl s rules '{"/resourcelist.xml": {"slow": 2}}'
sub base_slow sync "$TMP/m-slow" "$TMP/slow.db"
sub_exit base_slow 0
synced_is base_slow "fetched=$NFILES deleted=0 failed=0"
check "a Resource List that takes 2 s to arrive: the mirror equals the Source" \
    same_tree "$TMP/m-slow"
ctl s rules '{}'

# ===================================================== 2. incremental

note "2. incremental: a Change List from the baseline"
sleep 0.05
printf 'alpha, edited\n' >>"$D/a.txt"
head -c 70000 /dev/urandom >"$D/sub/deeper/e.bin"      # same length
rm "$D/b.txt" "$D/sub/f.txt"
printf 'new\n' >"$D/new.txt"
mkdir -p "$D/new/deep"
printf 'deep new\n' >"$D/new/deep/x.txt"
printf 'charlie\n' >"$D/c.txt"                          # same bytes, new mtime
write_cl 1 "$SNAP0" updated:data/a.txt updated:data/sub/deeper/e.bin \
    deleted:data/b.txt deleted:data/sub/f.txt created:data/new.txt \
    created:data/new/deep/x.txt updated:data/c.txt
write_rl
check "the Change List and its index validate strictly" "$RSDOC" validate \
    --strict "$B/changelist-index.xml" "$B/changelist-1.xml"
ctl s reset
sub inc1 sync "$M" "$ST"
sub_exit inc1 0
synced_is inc1 "fetched=4 deleted=2 failed=0"
check "the mirror equals the Source" same_tree "$M"
check "the Change Lists were read, not the Resource List" \
    logged inc1 'msg="change lists read"'
expect_eq "no Resource List read" "$(ctl s count /resourcelist.xml)" 0
expect_eq "only the changed resources fetched" "$(data_paths 200)" \
    "/data/a.txt
/data/new.txt
/data/new/deep/x.txt
/data/sub/deeper/e.bin"
expect_eq "the rewritten, same-bytes c.txt: a conditional GET, 304" \
    "$(ctl s count /data/c.txt 304) $(ctl s count /data/c.txt 200)" "1 0"
expect_eq "no other resource requested" "$(data_paths | grep -vc -e a.txt \
    -e new.txt -e x.txt -e e.bin -e c.txt)" 0
sub audit1 audit "$M" "$ST"
sub_exit audit1 0

ctl s reset
sub inc1b sync "$M" "$ST"
sub_exit inc1b 0
synced_is inc1b "fetched=0 deleted=0 failed=0"
expect_eq "a second sync fetches no resource" "$(data_paths | wc -l)" 0

# ======================================== 3. Change Lists too short

note "3. Change Lists that do not reach back: reconcile"
sleep 0.05
rm "$D/g.bin" "$D/n/f3.txt"
printf 'file 4, edited\n' >"$D/n/f4.txt"
printf 'late\n' >"$D/late.txt"
# the older lists rotated away: the only one left starts after the last sync
write_cl 2 "$(ss now)" created:data/late.txt
write_rl
ctl s reset
sub inc2 sync "$M" "$ST"
sub_exit inc2 0
check "rssub says the Change Lists do not reach back and reconciles" \
    logged inc2 'level=warn .*do not reach back.*reconciling with the resource list'
expect_eq "...with the Resource List (its head, then the whole)" \
    "$(ctl s count /resourcelist.xml)" 2
synced_is inc2 "fetched=2 deleted=2 failed=0"
check "the mirror equals the Source (what is gone is deleted)" same_tree "$M"

# ============================================================ 4. faults

note "4a. transient faults: 500 twice, 503 + Retry-After, a document's 503"
sleep 0.05
printf 'file 5, edited\n' >"$D/n/f5.txt"
printf 'file 6, edited\n' >"$D/n/f6.txt"
printf 'transient\n' >"$D/t1.txt"
write_cl 3 "$SNAP0" updated:data/n/f5.txt updated:data/n/f6.txt \
    created:data/t1.txt
write_rl
ctl s reset
ctl s rules '{"/data/n/f5.txt": {"status": 500, "count": 2},
  "/data/n/f6.txt": {"status": 503, "retry_after": 1, "count": 1},
  "/data/t1.txt": {"status": 503, "retry_after": 1, "count": 1},
  "/changelist-index.xml": {"status": 503, "retry_after": 1, "count": 1}}'
sub f1 sync "$M" "$ST"
sub_exit f1 0
synced_is f1 "fetched=3 failed=0"
check "the mirror equals the Source" same_tree "$M"
expect_eq "500 twice then OK: three requests" \
    "$(ctl s count /data/n/f5.txt 500) $(ctl s count /data/n/f5.txt 200)" "2 1"
check "the retries are logged" \
    logged f1 'msg="resource will be retried" uri=http://[^ ]*/data/n/f5.txt'
gap_ok() {   # gap_ok PATH: the second request came >= 0.9 s after the first
    local g
    g=$(ctl s gap "$1")
    echo "gap $g"
    [ "$g" != none ] && "$PY" -c 'import sys; sys.exit(float(sys.argv[1]) < 0.9)' "$g"
}
check "503 + Retry-After: 1 on a resource: honoured" gap_ok /data/n/f6.txt
check "...on another resource: honoured" gap_ok /data/t1.txt
check "503 + Retry-After: 1 on the Change List Index: honoured" \
    gap_ok /changelist-index.xml

note "4b. lasting faults: hash mismatch, truncated, 404, too slow"
sleep 0.05
cp "$M/data/n/f7.txt" "$TMP/f7.old"
cp "$M/data/n/f8.txt" "$TMP/f8.old"
printf 'file 7, edited\n' >"$D/n/f7.txt"
printf 'file 8, edited: a longer line\n' >"$D/n/f8.txt"
printf 'hash mismatch\n' >"$D/hm.txt"
head -c 50000 /dev/urandom >"$D/tr.bin"
printf 'not found\n' >"$D/nf.txt"
printf 'slow\n' >"$D/sl.txt"
write_cl 4 "$SNAP0" updated:data/n/f7.txt updated:data/n/f8.txt \
    created:data/hm.txt created:data/tr.bin created:data/nf.txt \
    created:data/sl.txt
write_rl
ctl s reset
ctl s rules '{"/data/n/f7.txt": {"corrupt": true},
  "/data/hm.txt": {"body": "hash mismatch!"},
  "/data/tr.bin": {"truncate": 1000},
  "/data/n/f8.txt": {"truncate": 10},
  "/data/nf.txt": {"status": 404},
  "/data/sl.txt": {"slow": 4}}'
FAILED="/data/n/f7.txt /data/n/f8.txt /data/hm.txt /data/tr.bin /data/nf.txt /data/sl.txt"
sub f2 sync "$M" "$ST" --retries 2 --timeout 1s
sub_exit f2 1
synced_is f2 "failed=6"
for p in $FAILED; do
    check "$p: named in a level=error line of the sync" \
        logged f2 "level=error .*msg=\"(resource failed|not mirrored)\" uri=$B$p( |\$)"
done
check "the hash mismatch is said" \
    logged f2 "uri=$B/data/hm.txt error=\"hash mismatch"
check "the old f7.txt stays (hash mismatch)" cmp "$TMP/f7.old" "$M/data/n/f7.txt"
check "the old f8.txt stays (truncated)" cmp "$TMP/f8.old" "$M/data/n/f8.txt"
for f in hm.txt tr.bin nf.txt sl.txt; do
    check "no $f in the mirror" test ! -e "$M/data/$f"
done
check "no temp file left" test -z "$(find "$M" -name '.rssub-tmp.*')"
expect_eq "--retries 2: two attempts at each" \
    "$(ctl s count /data/hm.txt) $(ctl s count /data/nf.txt)" "2 2"
sub status_f2 status "$M" "$ST"
sub_exit status_f2 0
expect_eq "status: 6 failed" "$(st_field status_f2 failed)" 6
for p in $FAILED; do
    check "status names $p" logged status_f2 "uri=$B$p( |\$)"
done
check "status: its last error names the resource, not only why" \
    logged status_f2 "^last_error [^ ]+ $B/data/[^ ]+: "

note "4c. the Source fixed: the failed resources are retried"
ctl s rules '{}'
ctl s reset
sub f3 sync "$M" "$ST"
sub_exit f3 0
check "the failed resources are taken up again" \
    logged f3 'msg="retrying resources that failed before" count=6'
check "the mirror equals the Source" same_tree "$M"
expect_eq "each failed resource fetched again" "$(data_paths 200)" \
    "/data/hm.txt
/data/n/f7.txt
/data/n/f8.txt
/data/nf.txt
/data/sl.txt
/data/tr.bin"
sub status_f3 status "$M" "$ST"
expect_eq "status: none failed" "$(st_field status_f3 failed)" 0

# ============================================================ 5. audit

note "5. audit"
# same size, same mtime, other bytes: only hashing can tell
tr '[:lower:]' '[:upper:]' <"$M/data/a.txt" >"$TMP/a.upper"
cat "$TMP/a.upper" >"$M/data/a.txt"
touch -r "$D/a.txt" "$M/data/a.txt"
sub au1 audit "$M" "$ST" --deep
sub_exit au1 1
check "audit --deep names the altered file" logged au1 "^updated $B/data/a.txt\$"
rm "$M/data/c.txt"
sub au2 audit "$M" "$ST"
sub_exit au2 1
check "audit names the deleted file" \
    logged au2 "^(added|updated) $B/data/c.txt\$"
sub au3 audit "$M" "$ST" --fix
sub_exit au3 0
sub au4 audit "$M" "$ST"
sub_exit au4 0
check "audit --fix brought the deleted file back" cmp "$D/c.txt" "$M/data/c.txt"
sub au5 audit "$M" "$ST" --fix --deep
sub_exit au5 0
sub au6 audit "$M" "$ST" --deep
sub_exit au6 0
check "after audit --fix --deep the mirror equals the Source" same_tree "$M"
# files no resource accounts for (put there by hand): reported by path,
# and with --fix removed (here: moved to the attic)
mkdir -p "$M/data/by-hand"
printf 'mine\n' >"$M/data/by-hand/x.txt"
printf 'mine too\n' >"$M/stray-top.txt"
sub au7 audit "$M" "$ST"
sub_exit au7 1
check "audit names the stray files by their paths" \
    logged au7 "^stray data/by-hand/x.txt\$" "^stray stray-top.txt\$"
expect_eq "...and no resource as differing" \
    "$(grep -cE '^(added|updated|deleted) ' "$TMP/au7.log")" 0
check "a report-only audit leaves them" test -f "$M/data/by-hand/x.txt"
sub au8 audit "$M" "$ST" --fix --attic "$TMP/attic-strays"
sub_exit au8 0
check "audit --fix moves them to the attic" \
    cmp <(printf 'mine\n') "$TMP/attic-strays/data/by-hand/x.txt"
check "...both" test -f "$TMP/attic-strays/stray-top.txt"
check "after it the mirror equals the Source (no empty directory left)" \
    same_tree "$M"
# ...but not past the valve a reconcile has: a --mirror naming the wrong
# directory (or a mapping changed) must not be emptied by a --fix
mkdir -p "$M/home"
for i in $(seq 1 30); do printf '%s\n' "$i" >"$M/home/f$i"; done
sub sv1 audit "$M" "$ST" --fix --max-delete 5
sub_exit sv1 1
check "audit --fix, 30 strays past --max-delete 5: held, and told" \
    logged sv1 'msg="the mirror holds more stray files than'
expect_eq "...none removed" "$(find "$M/home" -type f | wc -l)" 30
sub sv2 audit "$M" "$ST" --fix
sub_exit sv2 1
expect_eq "...nor past --max-delete-share (50 %: 30 of $((NFILES + 30)) files)" \
    "$(find "$M/home" -type f | wc -l)" 30
sub sv3 audit "$M" "$ST" --fix --force-delete
sub_exit sv3 0
check "...--force-delete removes them: the mirror equals the Source" \
    same_tree "$M"
sub au9 audit "$M" "$ST"
sub_exit au9 0

# ============================ 5b. a broken Resource List never wipes a mirror

note "5b. a Resource List that loops or leaves out most of the mirror"
cp "$WWW/resourcelist.xml" "$TMP/rl.good"
NS_RS='xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/"'
# rl_index FILE KID...: FILE (under $WWW) a Resource List Index of KIDs.
rl_index() {
    local f=$1 k
    shift
    {
        echo '<?xml version="1.0" encoding="UTF-8"?>'
        echo "<sitemapindex $NS_RS>"
        echo "<rs:ln rel=\"up\" href=\"$B/capabilitylist.xml\"/>"
        echo "<rs:md capability=\"resourcelist\" at=\"$(ss now)\"/>"
        for k in "$@"; do echo "<sitemap><loc>$B/$k</loc></sitemap>"; done
        echo '</sitemapindex>'
    } >"$WWW/$f"
}
no_diff_lines() { [ "$(grep -cE '^(added|updated|deleted) ' "$TMP/$1.log")" = 0 ]; }
rl_index resourcelist.xml resourcelist.xml
sub lp1 audit "$M" "$ST"
sub_exit lp1 3
check "an index listing itself: an error naming the loop" \
    logged lp1 'resourcelist.xml: read twice in one walk'
check "...and no resource reported deleted" no_diff_lines lp1
sub lp2 audit "$M" "$ST" --fix
sub_exit lp2 3
check "audit --fix on it deletes nothing" same_tree "$M"
rl_index resourcelist.xml rl-b.xml
rl_index rl-b.xml resourcelist.xml
sub lp3 audit "$M" "$ST" --fix
sub_exit lp3 3
check "A -> B -> A: an error, nothing deleted" same_tree "$M"
# A list that names one resource of the mirror's many: held back.
"$PY" - "$TMP/rl.good" "$WWW/resourcelist.xml" <<'PYEOF'
import re, sys
doc = open(sys.argv[1]).read()
urls = re.findall(r"<url>.*?</url>", doc, re.S)
head = doc[:doc.index("<url>")]
open(sys.argv[2], "w").write(head + urls[0] + "\n</urlset>\n")
PYEOF
NRES=$(grep -c '<url>' "$TMP/rl.good")
sub mv1 audit "$M" "$ST" --fix
sub_exit mv1 1
check "a list leaving out $((NRES - 1)) of $NRES: nothing deleted" same_tree "$M"
check "...and said: would_delete=$((NRES - 1))" \
    logged mv1 "leaves out too much of the mirror.*would_delete=$((NRES - 1)) mirror_live=$NRES"
sub mv2 audit "$M" "$ST" --fix --max-delete-share 0 --max-delete 2
sub_exit mv2 1
check "--max-delete 2 holds them back as well" same_tree "$M"
# The daemon keeps following, says so, and counts.
SUB_READY_SECS=20
if sub_start dv "$B/" "$M" "$ST" --audit-interval 1s --audit-fix \
        --poll-interval 500ms --log-format logfmt; then
    ok "rssub run --audit-fix against the thin list"
else
    bad "rssub run --audit-fix against the thin list" "$(tail -n 20 "${SUB_LOG[dv]}")"
fi
check "the daemon holds the deletions back and says so" wait_until 10 \
    grep -q 'leaves out too much of the mirror' "${SUB_LOG[dv]}"
N=$(sub_metric dv rssub_deletions_held_total)
check "metrics: rssub_deletions_held_total >= $((NRES - 1)) (got ${N:-none})" \
    test "${N:-0}" -ge $((NRES - 1))
check "...and keeps running" sub_alive dv
sub_stop dv
check "the mirror is whole" same_tree "$M"
# A Source that really means it is one explicit flag away.
sub mv3 audit "$M" "$ST" --fix --force-delete
sub_exit mv3 0
expect_eq "--force-delete: the mirror holds what the list names" \
    "$(cd "$M/data" && find . -type f ! -name '.rssub*' | wc -l)" 1
cp "$TMP/rl.good" "$WWW/resourcelist.xml"
sub mv4 audit "$M" "$ST" --fix
sub_exit mv4 0
check "the list whole again: audit --fix restores the mirror" same_tree "$M"
# A listed resource this mirror may not hold (another origin): said, and
# not a difference.
"$PY" - "$WWW/resourcelist.xml" <<'PYEOF'
import sys
p = sys.argv[1]
doc = open(p).read().replace(
    "</urlset>", "<url><loc>http://127.0.0.1:1/foreign.txt</loc></url>\n</urlset>")
open(p, "w").write(doc)
PYEOF
sub rf1 audit "$M" "$ST"
sub_exit rf1 0
check "a listed URI refused here: logged as refused, not a difference" \
    logged rf1 'listed but refused here.*foreign.txt'
check "...and not printed as added" no_diff_lines rf1
cp "$TMP/rl.good" "$WWW/resourcelist.xml"

# ======================================================== 6. hostile

note "6. hostile documents"
H=$TMP/h              # the hostile Source's web root
HM=$TMP/hm            # its mirrors: $HM/NAME
mkdir -p "$H/data" "$H/.well-known" "$TMP/o"
printf 'ok\n' >"$H/data/ok.txt"
printf 'escaped\n' >"$H/escape.txt"
printf 'other origin\n' >"$TMP/o/other.txt"
if ! ss_start h "$H" || ! ss_start o "$TMP/o"; then
    bad "the hostile Source and another origin start"
    finish
fi
HB=http://127.0.0.1:${PORT[h]}
OB=http://127.0.0.1:${PORT[o]}
ss write-source --www "$H" --base "$HB"
cat >"$H/capabilitylist.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:ln rel="up" href="$HB/.well-known/resourcesync"/>
  <rs:md capability="capabilitylist"/>
  <url><loc>$HB/resourcelist.xml</loc><rs:md capability="resourcelist"/></url>
</urlset>
EOF
# hostile_rl ENTRY-LOCS...: a Resource List naming these URIs.
hostile_rl() {
    {
        echo '<?xml version="1.0" encoding="UTF-8"?>'
        echo '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">'
        echo "  <rs:ln rel=\"up\" href=\"$HB/capabilitylist.xml\"/>"
        echo "  <rs:md capability=\"resourcelist\" at=\"$(ss now)\"/>"
        local u
        for u in "$@"; do
            echo "  <url><loc>$u</loc></url>"
        done
        echo '</urlset>'
    } >"$H/resourcelist.xml"
}
# outside_ok: nothing appeared in $TMP but what the hostile runs may write
# (their mirrors and states, our logs), and no file of a name the hostile
# URIs could write exists but the two put there. The mirrors are 3 levels
# below $TMP, so even 4 ".." from data/ would land in $TMP.
snap_outside() {
    find "$TMP" -path "$HM" -prune -o -path "$TMP/o" -prune -o -path "$H" \
        -prune -o ! -name '*.log' ! -name 'hs*.db*' -print | sort
}
outside_ok() {
    local now names
    now=$(snap_outside)
    [ "$now" = "$OUTSIDE0" ] ||
        { diff <(printf '%s\n' "$OUTSIDE0") <(printf '%s\n' "$now"); return 1; }
    names=$(find "$TMP" \( -name escape.txt -o -name ash.txt -o -name other.txt \
        -o -name '*nul.txt' -o -name '.rssub-tmp.x' \) -print | sort)
    [ "$names" = "$H/escape.txt
$TMP/o/other.txt" ] || { echo "found: $names"; return 1; }
}
OUTSIDE0=$(snap_outside)

HOSTILE=("$OB/other.txt" "http://localhost:${PORT[h]}/data/ok.txt"
         "$HB/data/%2e%2e/escape.txt"
         "$HB/data/%2E%2E/%2e%2e/%2e%2e/%2e%2e/escape.txt"
         "$HB/data/sub/%2e%2e%2F%2e%2e%2F%2e%2e%2Fescape.txt"
         "$HB/data/sl%2Fash.txt" "$HB/data/.rssub-tmp.x"
         "$HB/data/%00nul.txt")
hostile_rl "$HB/data/ok.txt" "${HOSTILE[@]}"
ctl h reset
SUB_SOURCE=$HB/ sub h1 sync "$HM/x/y/h1" "$TMP/hs1.db"
sub_exit h1 1
check "the legitimate resource is mirrored" \
    cmp "$H/data/ok.txt" "$HM/x/y/h1/data/ok.txt"
expect_eq "...and nothing else is in the mirror" \
    "$(cd "$HM/x/y/h1" && find . ! -type d ! -name '.rssub*' | sort)" \
    "./data/ok.txt"
for u in "${HOSTILE[@]}"; do
    check "refused, with a level=error line: $u" \
        logged h1 "level=error .*uri=$u( |\$)"
done
expect_eq "no request to the other origin" "$(ctl o count /other.txt)" 0
expect_eq "no resource requested but ok.txt, once" \
    "$(ctl h paths / | grep -v -e '\.xml$' -e '^/$' -e '^/robots.txt$' \
       -e '^/.well-known/resourcesync$') $(ctl h count /data/ok.txt)" \
    "/data/ok.txt 1"
check "nothing written outside the mirror" outside_ok

# malformed XML, a DOCTYPE, too many entries, too many bytes
printf '%s\n' '<?xml version="1.0" encoding="UTF-8"?>' \
    '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">' \
    '  <rs:md capability="resourcelist" at="2026-01-01T00:00:00Z"/>' \
    "  <url><loc>$HB/data/ok.txt</loc></url>" \
    "  <url><loc>$HB/data/ok.txt</url>" '</urlset>' >"$H/resourcelist.xml"
SUB_SOURCE=$HB/ sub h2 sync "$HM/h2" "$TMP/hs2.db"
sub_exit h2 1
check "malformed XML: a pull failed line naming the document and line" \
    logged h2 "level=error .*msg=\"pull failed\" .*error=\"$HB/resourcelist.xml:[0-9]+: "

printf '%s\n' '<?xml version="1.0" encoding="UTF-8"?>' \
    '<!DOCTYPE urlset [ <!ENTITY x SYSTEM "file:///etc/passwd"> ]>' \
    '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">' \
    '  <rs:md capability="resourcelist" at="2026-01-01T00:00:00Z"/>' \
    "  <url><loc>$HB/data/ok.txt?&x;</loc></url>" '</urlset>' \
    >"$H/resourcelist.xml"
SUB_SOURCE=$HB/ sub h3 sync "$HM/h3" "$TMP/hs3.db"
sub_exit h3 1
check "DOCTYPE with an external entity: refused, said" \
    logged h3 'level=error .*msg="pull failed" .*(DOCTYPE|doctype)'
check "...and /etc/passwd is nowhere in the mirror" \
    test -z "$(grep -rl 'root:' "$HM/h3" 2>/dev/null)"

"$PY" - "$H/resourcelist.xml" "$HB" <<'EOF'
import sys
with open(sys.argv[1], "w") as f:
    f.write('<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://'
            'www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.'
            'openarchives.org/rs/terms/">\n<rs:md capability="resourcelist"'
            ' at="2026-01-01T00:00:00Z"/>\n')
    for i in range(50001):
        f.write('<url><loc>%s/data/n%d.txt</loc></url>\n' % (sys.argv[2], i))
    f.write('</urlset>\n')
EOF
SUB_SOURCE=$HB/ sub h4 sync "$HM/h4" "$TMP/hs4.db" --retries 1
sub_exit h4 1
check "50,001 entries: refused, said" \
    logged h4 'level=error .*msg="pull failed" .*resourcelist.xml'

"$PY" - "$H/resourcelist.xml" <<'EOF'
import sys
with open(sys.argv[1], "w") as f:
    f.write('<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://'
            'www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.'
            'openarchives.org/rs/terms/">\n<rs:md capability="resourcelist"'
            ' at="2026-01-01T00:00:00Z"/>\n<!-- ')
    pad = "x" * 1048576
    for _ in range(51):
        f.write(pad)
    f.write(' -->\n</urlset>\n')
EOF
SUB_SOURCE=$HB/ sub h5 sync "$HM/h5" "$TMP/hs5.db"
sub_exit h5 1
check "a document over 50 MiB: refused, said" \
    logged h5 'level=error .*msg="pull failed" .*resourcelist.xml'
rm -f "$H/resourcelist.xml"
check "nothing written outside the mirrors after all that" outside_ok

# a rel="next" that points back at the page itself
{
    echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">'
    echo "  <rs:ln rel=\"next\" href=\"$HB/resourcelist.xml\"/>"
    echo "  <rs:md capability=\"resourcelist\" at=\"$(ss now)\"/>"
    echo "  <url><loc>$HB/data/ok.txt</loc></url>"
    echo '</urlset>'
} >"$H/resourcelist.xml"
ctl h reset
SUB_SOURCE=$HB/ sub h6 sync "$HM/h6" "$TMP/hs6.db"
sub_exit h6 1
check "a rel=next loop: an error for the list, which names the loop" \
    logged h6 'pull failed.*resourcelist.xml: read twice in one walk'
expect_eq "...the page read once" "$(ctl h count /resourcelist.xml)" 1

note "6b. refused states"
SUB_SOURCE=$B/capabilitylist.xml sub other sync "$M" "$ST"
sub_exit other 2
check "a state of another --source: said" \
    logged other 'this state belongs to another source'
sub sin sync "$M" "$M/data/state.db"
sub_exit sin 2
check "--state inside the mirror: said" logged sin 'must not be inside the mirror'
check "...and not created" test ! -e "$M/data/state.db" -a ! -e "$M/data/state.db.lock"
sub sin2 sync "$M" "$TMP/mirror/data/../x.db"
sub_exit sin2 2
check "--state spelled through ..: still refused" test ! -e "$M/x.db"
# A --mirror that is a symlink is refused; the state made for it (by
# default beside it) would only sit beside the wrong directory.
mkdir -p "$TMP/real-m" && ln -s "$TMP/real-m" "$TMP/link-m"
sub symm sync "$TMP/link-m" "$TMP/symm.db"
sub_exit symm 1
check "a symlinked --mirror: said" logged symm 'is a symlink; give the directory'
check "...and the state made for it removed" \
    test ! -e "$TMP/symm.db" -a ! -e "$TMP/symm.db.lock" -a ! -e "$TMP/symm.db-wal"

note "6c. two syncs on one state at once"
ctl s rules '{"/data/a.txt": {"slow": 3}}'
bg first "$RSSUB" sync --source "$B/" --mirror "$TMP/m-two" \
    --state "$TMP/two.db" --log-format logfmt >"$TMP/first.log" 2>&1
SUB_LOGS+=("$TMP/first.log")
FIRST=${BG_PID[first]}
check "the first sync holds the lock" wait_until 10 test -s "$TMP/two.db.lock"
sub second sync "$TMP/m-two" "$TMP/two.db"
if [ "$SUB_RC" = 0 ] || [ "$SUB_RC" = 124 ]; then
    bad "the second sync is refused (exit $SUB_RC)" "$(tail -n 10 "$TMP/second.log")"
else
    ok "the second sync is refused (exit $SUB_RC)"
fi
check "...saying the state is in use, by whom" \
    logged second "in use by another rssub \\(pid $FIRST\\)"
bg_wait first 30
expect_eq "the first sync goes on and finishes: exit" "$WAIT_RC" 0
check "...its mirror equals the Source" same_tree "$TMP/m-two"
ctl s rules '{}'

note "6d. a Capability List on one origin naming lists on another (a bridge)"
# The Source Description and Capability List are served by the other
# origin ($OB); the lists they name, and the resources, by the Source
# ($B). Without --prefix, rssub fetches from where the lists are, and
# maps paths as a direct mirror of $B does (no host directory).
mkdir -p "$TMP/o/.well-known"
"$PY" - "$TMP/o" "$OB" "$B" <<'PYEOF'
import os, sys
root, ob, b = sys.argv[1:4]
NS = ('xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
      'xmlns:rs="http://www.openarchives.org/rs/terms/"')
def w(path, body):
    with open(os.path.join(root, path), "w") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n<urlset %s>%s</urlset>\n'
                % (NS, body))
w(".well-known/resourcesync", '<rs:md capability="description"/>'
  '<url><loc>%s/bridged-cl.xml</loc><rs:md capability="capabilitylist"/></url>' % ob)
w("bridged-cl.xml", '<rs:ln rel="up" href="%s/.well-known/resourcesync"/>'
  '<rs:md capability="capabilitylist"/>'
  '<url><loc>%s/resourcelist.xml</loc><rs:md capability="resourcelist"/></url>'
  '<url><loc>%s/changelist-index.xml</loc><rs:md capability="changelist"/></url>'
  % (ob, b, b))
PYEOF
SUB_SOURCE=$OB/ sub bridged sync "$TMP/m-bridged" "$TMP/bridged.db"
sub_exit bridged 0
check "the resources come from the lists' origin, at the paths a direct mirror has" \
    same_tree "$TMP/m-bridged"
check "...and nothing from the other origin" test ! -e "$TMP/m-bridged/other.txt"

# ============================================================ 7. attic

note "7. --attic"
sleep 0.05
cp "$D/n/f9.txt" "$TMP/f9.old"
rm "$D/n/f9.txt" "$D/sub/d.json"
write_cl 5 "$SNAP0" deleted:data/n/f9.txt deleted:data/sub/d.json
write_rl
sub attic sync "$M" "$ST" --attic "$TMP/attic"
sub_exit attic 0
synced_is attic "deleted=2 failed=0"
check "the mirror equals the Source" same_tree "$M"
check "the deleted file is in the attic" cmp "$TMP/f9.old" "$TMP/attic/data/n/f9.txt"
check "...and the other one" test -f "$TMP/attic/data/sub/d.json"

# ======================================== 8. a change dated in the future

note "8. a change dated in the future (a Source's clock years wrong)"
# Taken as it came, 2099 became the mark the next sync reads from, and the
# change that followed it was skipped (fetched=0, exit 0): rssub blind
# until 2099. It is taken as of now, and told.
sleep 0.05
printf 'alpha, from the future\n' >>"$D/a.txt"
write_cl 6 "$SNAP0" updated:data/a.txt
sed -i 's|change="updated" datetime="[^"]*"|change="updated" datetime="2099-01-01T00:00:00Z"|' \
    "$WWW/changelist-6.xml"
sub fut1 sync "$M" "$ST"
sub_exit fut1 0
synced_is fut1 "fetched=1 deleted=0 failed=0"
check "...and told" logged fut1 'msg="times in the future in the Source.s documents'
sleep 0.05
printf 'charlie, after it\n' >>"$D/c.txt"
write_cl 7 "$SNAP0" updated:data/c.txt
sub fut2 sync "$M" "$ST"
sub_exit fut2 0
synced_is fut2 "fetched=1 deleted=0 failed=0"
check "the change after it is taken: the mirror equals the Source" same_tree "$M"

# A state an earlier rssub left blinded: the 2099 taken as it came, as
# the mark the next pull reads from and as a.txt's change time; the real
# changes after it, skipped. Such marks are cleared once per state, and
# the next pull reconciles with the Resource List.
python3 - "$ST" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
fut = 4070908800 * 1000000      # 2099-01-01, in microseconds
n = db.execute("UPDATE pos SET dt = ? WHERE channel LIKE '%#source'", (fut,)).rowcount
m = db.execute("UPDATE res SET change_dt = ? WHERE uri LIKE '%/data/a.txt'", (fut,)).rowcount
db.execute("DELETE FROM meta WHERE key = 'future_checked'")
db.commit()
assert n == 1 and m == 1, (n, m)
PY
sleep 0.05
printf 'alpha, after the blinded state\n' >>"$D/a.txt"
printf 'charlie, after the blinded state\n' >>"$D/c.txt"
write_cl 8 "$SNAP0" updated:data/a.txt updated:data/c.txt
write_rl
sub fut3 sync "$M" "$ST"
sub_exit fut3 0
check "a state with marks in the future: told" \
    logged fut3 'msg="the state held change times in the future' 'count=2'
check "...and the changes after them taken: the mirror equals the Source" \
    same_tree "$M"
sub fut4 sync "$M" "$ST"
sub_exit fut4 0
expect_eq "...once: the next sync does not clear or tell again" \
    "$(grep -c 'change times in the future' "$TMP/fut4.log")" 0

# ============================================== 9. gzipped documents

note "9. gzipped documents: resourcelist.xml.gz, Content-Encoding: gzip"
# The Sitemaps protocol lets a Source serve its lists gzipped as files
# (a Capability List naming resourcelist.xml.gz, served as
# application/octet-stream); a server may also send Content-Encoding: gzip.
# Both were "a NUL byte at offset 3: not XML text".
write_rl
WWW2=$TMP/www-gz
cp -a "$WWW" "$WWW2"
if ss_start gz "$WWW2"; then
    B2=http://127.0.0.1:${PORT[gz]}
    for f in "$WWW2"/*.xml "$WWW2/.well-known/resourcesync"; do
        sed -i "s|$B|$B2|g" "$f"
    done
    sed -i 's|/resourcelist.xml<|/resourcelist.xml.gz<|' "$WWW2/capabilitylist.xml"
    gzip -9 "$WWW2/resourcelist.xml"
    gzip -c "$WWW2/capabilitylist.xml" >"$WWW2/cl.gz" &&
        mv "$WWW2/cl.gz" "$WWW2/capabilitylist.xml"
    ctl gz rules '{"/capabilitylist.xml": {"headers": {"Content-Encoding": "gzip"}}}'
    check "rsdoc validates the gzipped file as it is" "$RSDOC" validate \
        "$WWW2/resourcelist.xml.gz"
    SUB_SOURCE=$B2/ sub gz1 sync "$TMP/m-gz" "$TMP/gz.db"
    sub_exit gz1 0
    check "a baseline from a gzipped Resource List: the mirror equals the Source" \
        same_tree "$TMP/m-gz"
    expect_eq "...read as the .gz the Capability List names (its head, then all)" \
        "$(ctl gz count /resourcelist.xml.gz 200)" 2
    # a gzip cut short is an error, not a shorter list
    head -c 200 "$WWW2/resourcelist.xml.gz" >"$WWW2/short.gz" &&
        mv "$WWW2/short.gz" "$WWW2/resourcelist.xml.gz"
    SUB_SOURCE=$B2/ sub gz2 audit "$TMP/m-gz" "$TMP/gz.db"
    sub_exit gz2 3
    check "...a gzip cut short fails the read, and says so" \
        logged gz2 'gzip stream cut short|unexpected end of file'
else
    bad "static_source serves the gzipped copy" "$(cat "$TMP/gz.http.log")"
fi

sub_finish
