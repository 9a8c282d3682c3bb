#!/usr/bin/env bash
# test_source_resync.sh - interoperability with the reference Python
# client, resync-sync (github.com/resync/resync), kept outside this tree:
# it baseline-syncs a copy of an rssource Source, audits it clean, then
# follows the Change List through two rounds of changes (incremental
# sync) and audits clean again. Optional: runs only when RS_RESYNC_DIR
# names a checkout (e.g. RS_RESYNC_DIR=/tmp/resync-src); otherwise it
# says so and passes. resync-sync needs Debian's python3-requests,
# python3-dateutil and python3-defusedxml.
#
# resync reads one Change List per incremental sync (its ChangeList
# class cannot read a Change List Index), so it is pointed at
# resourcesync/changelist.xml, the open Change List.
set -u
if [ -z "${RS_RESYNC_DIR:-}" ]; then
    echo "skipped: set RS_RESYNC_DIR to a checkout of github.com/resync/resync"
    echo "0 passed, 0 failed"
    exit 0
fi
if [ ! -f "$RS_RESYNC_DIR/resync-sync" ]; then
    echo "RS_RESYNC_DIR=$RS_RESYNC_DIR holds no resync-sync"
    echo "0 passed, 1 failed"
    exit 1
fi
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"

D=$TMP/data
DST=$TMP/dest
mkdir -p "$D/sub/deeper" "$DST" "$TMP/cwd"
printf 'alpha\n' >"$D/a.txt"
printf 'beta\n' >"$D/sub/b.txt"
head -c 50000 /dev/urandom >"$D/sub/deeper/c.bin"
printf 'hidden\n' >"$D/.hidden"

if src_start s "$D" --resourcelist-refresh 0; then
    ok "rssource starts"
else
    bad "rssource starts"
    src_finish
fi
B=$(src_url s)

# resync LOGNAME ARGS...: run resync-sync in $TMP/cwd (where it keeps its
# client state), 60 s at most; output in $TMP/LOGNAME.out.
resync() {
    local name=$1
    shift
    (cd "$TMP/cwd" && timeout 60 "$PY" "$RS_RESYNC_DIR/resync-sync" "$@") \
        >"$TMP/$name.out" 2>&1
}
same_tree() {
    diff -r --exclude='.*' "$D" "$DST"
}

note "baseline"
check "resync-sync --baseline" resync baseline --baseline --delete "$B" "$DST"
check "baseline: SYNCED" grep -q 'Status: *SYNCED' "$TMP/baseline.out"
check "the copy equals the Source" same_tree
check "resync-sync --audit" resync audit1 --audit "$B" "$DST"
check "audit: IN SYNC" grep -q 'Status: *IN SYNC' "$TMP/audit1.out"

note "incremental, twice"
printf 'alpha, edited\n' >"$D/a.txt"
printf 'new\n' >"$D/new.txt"
rm "$D/sub/b.txt"
mkdir "$D/made"
printf 'in a new directory\n' >"$D/made/x.txt"
check "the changes are in the Change List" wait_until 10 has_changes s \
    "updated a.txt" "created new.txt" "deleted sub/b.txt" "created made/x.txt"
check "resync-sync --incremental" resync inc1 --incremental --delete \
    --changelist-uri "${B}resourcesync/changelist.xml" "$B" "$DST"
check "incremental: CHANGES APPLIED" grep -q 'CHANGES APPLIED' "$TMP/inc1.out"
check "the copy equals the Source" same_tree
check "audit after the incremental sync" resync audit2 --audit "$B" "$DST"
check "audit: IN SYNC" grep -q 'Status: *IN SYNC' "$TMP/audit2.out"

mv "$D/new.txt" "$D/renamed.txt"
head -c 20000 /dev/urandom >>"$D/sub/deeper/c.bin"
check "the second round is in the Change List" wait_until 10 has_changes s \
    "created renamed.txt" "deleted new.txt" "updated sub/deeper/c.bin"
check "resync-sync --incremental (from the stored timestamp)" resync inc2 \
    --incremental --delete --changelist-uri "${B}resourcesync/changelist.xml" \
    "$B" "$DST"
check "the copy equals the Source" same_tree
check "audit after the second round" resync audit3 --audit "$B" "$DST"
check "audit: IN SYNC" grep -q 'Status: *IN SYNC' "$TMP/audit3.out"

src_finish
