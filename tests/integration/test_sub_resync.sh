#!/usr/bin/env bash
# test_sub_resync.sh - rssub against a Source whose documents the reference
# Python tools (github.com/resync/resync, kept outside this tree) wrote:
# resync-build writes the Source Description (/.well-known/resourcesync),
# Capability List, Resource List, Change Lists and the Resource Dump's ZIP
# packages for a tree of ~200 files (the Resource Dump document listing
# the packages through resync's Python API: resync-build writes only the
# packages); python3 -m http.server serves it all on loopback. rssub makes
# a baseline from the Resource List and another from the Resource Dump
# (--dump), then follows two rounds of changes through the Change List.
# Every time the mirror must equal the tree byte for byte and `rssub audit`
# must pass; a damaged mirror must fail the audit.
#
# Optional: runs only when RS_RESYNC_DIR names a checkout (e.g.
# RS_RESYNC_DIR=/tmp/resync-src); otherwise it says SKIP and passes.
# resync needs Debian's python3-dateutil, python3-defusedxml and
# python3-distutils (deploy/install-deps.sh).
#
# What resync writes, and rssub must read leniently: no `at`/`from` on
# some roots, manifest paths without the leading '/', and Change Lists
# grouped by change type (updated, deleted, created) rather than in time
# order, whose deleted entries carry the resource's old <lastmod>.
# shellcheck disable=SC2317 # helpers run through check/wait_until
set -u
if [ -z "${RS_RESYNC_DIR:-}" ]; then
    echo "SKIP: RS_RESYNC_DIR not set (a checkout of github.com/resync/resync)"
    echo "0 passed, 0 failed"
    exit 0
fi
if [ ! -f "$RS_RESYNC_DIR/resync-build" ]; then
    echo "RS_RESYNC_DIR=$RS_RESYNC_DIR holds no resync-build"
    echo "0 passed, 1 failed"
    exit 1
fi
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"

RSDOC=$RS_BUILD_DIR/tools/rsdoc
WWW=$TMP/www          # the web server's root
D=$WWW/data           # the resources: URIs $B/data/...
MIR=$TMP/mirror       # baseline from the Resource List
MIR2=$TMP/mirror2     # baseline from the Resource Dump
mkdir -p "$D" "$WWW/.well-known" "$WWW/dump" "$TMP/cwd" "$MIR" "$MIR2"

if [ ! -x "$RSSUB" ]; then
    bad "rssub is built ($RSSUB)"
    finish
fi

# ------------------------------------------------------------ the tree

# 192 files in d0..d7/s0..s2 (text, and random binary of many sizes,
# an empty one among them), a 1 MiB binary, a deep path, odd names.
make_tree() {
    local i j k f
    for i in 0 1 2 3 4 5 6 7; do
        for j in 0 1 2; do
            mkdir -p "$D/d$i/s$j"
            for k in 0 1 2 3 4 5 6 7; do
                f=$D/d$i/s$j/f$k
                if [ $(((i + j + k) % 3)) -eq 0 ]; then
                    head -c $((k * 997 + i * 31)) /dev/urandom >"$f.bin"
                else
                    printf 'text d%s/s%s/f%s\nsecond line\n' "$i" "$j" "$k" \
                        >"$f.txt"
                fi
            done
        done
    done
    head -c 1048576 /dev/urandom >"$D/big.bin"
    printf 'read me\n' >"$D/readme.txt"
    : >"$D/empty.txt"
    mkdir -p "$D/deep/a/b/c/d/e"
    printf 'leaf\n' >"$D/deep/a/b/c/d/e/leaf.txt"
    printf 'odd\n' >"$D/name-with_dash.v2.txt"
    printf '{"k": [1, 2, 3]}\n' >"$D/deep/data.json"
}

# --------------------------------------------------------- the server

# python3 -m http.server on 127.0.0.1, port chosen by the kernel (it
# prints the one it got).
start_http() {
    bg http "$PY" -u -m http.server 0 --bind 127.0.0.1 --directory "$WWW" \
        >"$TMP/http.log" 2>&1
    local i=0
    PORT=
    while [ "$i" -lt 100 ] && [ -z "$PORT" ]; do
        PORT=$(sed -n 's/^Serving HTTP on 127\.0\.0\.1 port \([0-9]*\).*/\1/p' \
               "$TMP/http.log")
        [ -n "$PORT" ] || sleep 0.1
        i=$((i + 1))
    done
    [ -n "$PORT" ]
}

# --------------------------------------------------- resync's documents

# rb ARGS...: resync-build in $TMP/cwd, 120 s at most, output appended to
# $TMP/resync-build.log.
rb() {
    echo "+ resync-build $*" >>"$TMP/resync-build.log"
    (cd "$TMP/cwd" &&
        timeout 120 "$PY" "$RS_RESYNC_DIR/resync-build" "$@") \
        >>"$TMP/resync-build.log" 2>&1
}
UP() { echo "--capabilitylist-link=$B/capabilitylist.xml"; }

write_resourcelist() {
    rb --write-resourcelist --hash md5 --hash sha-256 "$(UP)" \
        --outfile "$WWW/resourcelist.xml" "$B/data/=$D"
}

# The packages with resync-build, then the Resource Dump listing them
# (rel="contents" to the manifest resync writes beside each package).
write_resourcedump() {
    rm -f "$WWW"/dump/rd*
    rb --write-resourcedump --hash md5 "$(UP)" --outfile "$WWW/dump/rd" \
        "$B/data/=$D" || return 1
    local z args=()
    for z in "$WWW"/dump/rd*.zip; do
        [ -f "$z" ] || return 1
        args+=("$z|$B/dump/$(basename "$z")|$B/dump/$(basename "$z" .zip).xml")
    done
    "$PY" - "$RS_RESYNC_DIR" "$WWW/resourcedump.xml" "$B/capabilitylist.xml" \
        "${args[@]}" >>"$TMP/resync-build.log" 2>&1 <<'EOF'
import os
import sys
sys.path.insert(0, sys.argv[1])
from resync.resource import Resource
from resync.resource_dump import ResourceDump
from resync.w3c_datetime import datetime_to_str
rd = ResourceDump(ln=[{'rel': 'up', 'href': sys.argv[3]}])
rd.md_at = datetime_to_str()
for arg in sys.argv[4:]:
    path, uri, manifest = arg.split('|')
    rd.add(Resource(uri=uri, length=os.path.getsize(path),
                    mime_type='application/zip',
                    ln=[{'rel': 'contents', 'href': manifest,
                         'type': 'application/xml'}]))
rd.write(basename=sys.argv[2])
EOF
}

# write_changelist REFERENCE: the changes from the Resource List
# REFERENCE to the files now on disk.
write_changelist() {
    rb --write-changelist --reference "$1" --hash md5 --hash sha-256 "$(UP)" \
        --outfile "$WWW/changelist.xml" "$B/data/=$D"
}

write_source() {
    rb --write-sourcedescription "$B/capabilitylist.xml" \
        --outfile "$WWW/.well-known/resourcesync" &&
    rb --write-capabilitylist \
        "resourcelist=$B/resourcelist.xml,resourcedump=$B/resourcedump.xml,changelist=$B/changelist.xml" \
        --sourcedescription-link "$B/.well-known/resourcesync" \
        --outfile "$WWW/capabilitylist.xml" &&
    rb --write-changelist --empty "$(UP)" --outfile "$WWW/changelist.xml" &&
    write_resourcelist &&
    write_resourcedump
}

# changes_are "updated N" "deleted N" "created N": what resync's Change
# List holds.
changes_are() {
    local want got c
    for want in "$@"; do
        c=${want% *}
        got=$(grep -o "change=\"$c\"" "$WWW/changelist.xml" | wc -l)
        [ "$c $got" = "$want" ] || { echo "changelist: $c $got, want $want"; return 1; }
    done
}

# How many <url> entries a document has.
entries_of() { grep -o '<url>' "$1" | wc -l; }

# ------------------------------------------------------------- rssub

# sub NAME COMMAND MIRROR STATE [ARGS...]: one rssub run against the site
# root (discovery through /.well-known/resourcesync), 300 s at most;
# output in $TMP/NAME.log, exit status in SUB_RC.
sub() {
    local name=$1 cmd=$2 mir=$3 state=$4
    shift 4
    timeout 300 "$RSSUB" "$cmd" --source "$B/" --mirror "$mir" \
        --state "$state" --log-format logfmt "$@" >"$TMP/$name.log" 2>&1
    SUB_RC=$?
    SUB_LOGS+=("$TMP/$name.log")
}

# same_tree MIRROR: the mirror holds exactly the Source's files, byte for
# byte (rssub's own ".rssub*" names aside; empty directories are not
# resources, so either side may keep some), and no temp file is left.
same_tree() {
    local m=$1 a b f extra tmpf
    a=$(cd "$D" && find . ! -type d | sort)
    b=$(cd "$m/data" && find . -name '.rssub*' -prune -o ! -type d -print |
        sort)
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

# ------------------------------------------------------------ baseline

make_tree
NFILES=$(find "$D" -type f | wc -l)
if start_http; then
    ok "http.server serves the Source on 127.0.0.1:$PORT"
else
    bad "http.server starts" "$(cat "$TMP/http.log")"
    finish
fi
B=http://127.0.0.1:$PORT

note "resync writes the Source ($NFILES files)"
check "resync-build writes every document" write_source
check "resync-build wrote the documents" test -s "$WWW/resourcelist.xml" \
    -a -s "$WWW/capabilitylist.xml" -a -s "$WWW/.well-known/resourcesync" \
    -a -s "$WWW/changelist.xml" -a -s "$WWW/resourcedump.xml"
expect_eq "the Resource List lists every file" \
    "$(entries_of "$WWW/resourcelist.xml")" "$NFILES"
expect_eq "the Resource Dump's manifests list every file" \
    "$(cat "$WWW"/dump/rd*.xml | grep -o '<url>' | wc -l)" "$NFILES"
check "rsdoc reads resync's Resource List, Capability List, Resource Dump" \
    "$RSDOC" validate "$WWW/resourcelist.xml" "$WWW/capabilitylist.xml" \
    "$WWW/.well-known/resourcesync" "$WWW/resourcedump.xml"
check "the well-known URI is served" \
    curl -fsS -o /dev/null "$B/.well-known/resourcesync"
cp "$WWW/resourcelist.xml" "$TMP/rl0.xml"

note "baseline from the Resource List"
sub base sync "$MIR" "$TMP/sub.db"
sub_exit base 0
synced_is base "fetched=$NFILES deleted=0 failed=0"
check "the mirror equals the Source" same_tree "$MIR"
sub audit0 audit "$MIR" "$TMP/sub.db"
sub_exit audit0 0

note "a second sync finds nothing to do"
sub again sync "$MIR" "$TMP/sub.db"
sub_exit again 0
synced_is again "fetched=0 deleted=0 failed=0"
check "the mirror still equals the Source" same_tree "$MIR"

note "baseline from the Resource Dump"
sub dump sync "$MIR2" "$TMP/sub2.db" --dump
sub_exit dump 0
synced_is dump "failed=0"
check "the dump's mirror equals the Source" same_tree "$MIR2"
sub audit0d audit "$MIR2" "$TMP/sub2.db"
sub_exit audit0d 0

# ------------------------------------------------------------ round 1

note "round 1: 8 updated, 12 deleted, 6 created"
sleep 1   # new <lastmod>s after the baseline's
for f in d0/s1/f0.txt d1/s0/f1.txt d2/s2/f3.txt d4/s1/f6.txt; do
    printf 'edited in round 1\n' >>"$D/$f"
done
head -c 1048576 /dev/urandom >"$D/big.bin"
head -c $((3 * 997)) /dev/urandom >"$D/d0/s0/f3.bin"   # same length, new bytes
head -c $((6 * 997 + 31)) /dev/urandom >"$D/d1/s2/f6.bin"
: >"$D/readme.txt"                                     # now empty
rm "$D/d3/s0/f1.txt" "$D/d5/s1/f2.txt" "$D/name-with_dash.v2.txt" \
    "$D/deep/a/b/c/d/e/leaf.txt"
rm -r "$D/d7/s2"                                       # 8 files
mkdir -p "$D/new/deeper"
printf 'new 1\n' >"$D/new/one.txt"
printf 'new 2\n' >"$D/new/deeper/two.txt"
head -c 77777 /dev/urandom >"$D/new/deeper/three.bin"
printf 'new top\n' >"$D/top-new.txt"
printf 'in an old dir\n' >"$D/d0/s0/added.txt"
: >"$D/d2/empty-new.txt"
check "resync-build writes the Change List" write_changelist "$TMP/rl0.xml"
check "it lists the changes" changes_are "updated 8" "deleted 12" "created 6"
check "resync-build rewrites the Resource List" write_resourcelist
check "resync-build rewrites the Resource Dump" write_resourcedump
cp "$WWW/resourcelist.xml" "$TMP/rl1.xml"
# Not a check: what our strict side (rsdoc) says about resync's Change
# List, for whoever reads the log when rssub trips over it.
if ! "$RSDOC" validate "$WWW/changelist.xml" >"$TMP/cl1.validate" 2>&1; then
    note "rsdoc on resync's Change List:" \
        "$(grep -m 1 ': error: ' "$TMP/cl1.validate" | sed 's|^.*/www/||')"
fi

sub inc1 sync "$MIR" "$TMP/sub.db"
sub_exit inc1 0
synced_is inc1 "fetched=14 deleted=12 failed=0"
check "the mirror equals the Source after round 1" same_tree "$MIR"
sub audit1 audit "$MIR" "$TMP/sub.db"
sub_exit audit1 0

sub inc1d sync "$MIR2" "$TMP/sub2.db"
sub_exit inc1d 0
synced_is inc1d "fetched=14 deleted=12 failed=0"
check "the dump's mirror equals the Source after round 1" same_tree "$MIR2"

# ------------------------------------------------------------ round 2

note "round 2: a file becomes a directory, a deleted file comes back"
sleep 1
rm "$D/d0/s1/f1.txt"
mkdir "$D/d0/s1/f1.txt"
printf 'was a file\n' >"$D/d0/s1/f1.txt/inside.txt"
mkdir -p "$D/d7/s2"
head -c 217 /dev/urandom >"$D/d7/s2/f0.bin"              # new bytes
printf 'edited in round 2\n' >>"$D/d0/s1/f0.txt"
rm -r "$D/new/deeper"                                  # 2 files
check "resync-build writes the Change List" write_changelist "$TMP/rl1.xml"
check "it lists the changes" changes_are "updated 1" "deleted 3" "created 2"
check "resync-build rewrites the Resource List" write_resourcelist
check "resync-build rewrites the Resource Dump" write_resourcedump

sub inc2 sync "$MIR" "$TMP/sub.db"
sub_exit inc2 0
synced_is inc2 "fetched=3 deleted=3 failed=0"
check "the mirror equals the Source after round 2" same_tree "$MIR"
sub audit2 audit "$MIR" "$TMP/sub.db"
sub_exit audit2 0

# ------------------------------------------------------ audit can fail

note "a damaged mirror fails the audit; --fix repairs it"
printf 'damage' >>"$MIR/data/d1/s0/f1.txt" 2>/dev/null
rm -f "$MIR/data/d2/s2/f3.txt"
sub audit3 audit "$MIR" "$TMP/sub.db"
sub_exit audit3 1
check "the audit names the damaged resources" \
    grep -q "$B/data/d1/s0/f1.txt" "$TMP/audit3.log"
check "the audit names the missing resource" \
    grep -q "$B/data/d2/s2/f3.txt" "$TMP/audit3.log"
sub fix audit "$MIR" "$TMP/sub.db" --fix
check "the mirror equals the Source after audit --fix" same_tree "$MIR"
sub audit4 audit "$MIR" "$TMP/sub.db"
sub_exit audit4 0

sub status status "$MIR" "$TMP/sub.db"
sub_exit status 0
sub_finish
