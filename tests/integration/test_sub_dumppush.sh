#!/usr/bin/env bash
# test_sub_dumppush.sh - `rssub run --dump` while its Source keeps
# changing: rssource --hub --dump over 4,000 files (four packages), rshub
# on a private Redis carrying the change notifications, and changes made
# at the Source while rssub's writer threads are in the middle of the
# dump (its stage in the mirror): files of packages already published,
# of the one being written and of those not yet downloaded updated,
# others deleted, new ones created. rssub's loop runs during the writes
# with apply held, so the pushed changes wait for the package and are
# applied after it; the mirror must end equal to the Source, nothing of
# rssub's own left in it, and a SIGTERM and an audit must find it in
# sync. Then the same with a Source changing all through the baseline.
# shellcheck source-path=SCRIPTDIR disable=SC2317 # helpers run through check/wait_until
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"

for b in "$RSSUB" "$RSSOURCE" "$RSHUB"; do
    [ -x "$b" ] || { bad "built: $b"; sub_finish; }
done

# make_tree DIR: 4,000 files of 200-2,200 bytes, 100 to a directory.
make_tree() {
    "$PY" - "$1" <<'EOF'
import os, random, sys
d = sys.argv[1]
r = random.Random(7)
for i in range(4000):
    sub = os.path.join(d, "d%02d" % (i // 100))
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, "f%04d.txt" % i), "wb") as f:
        f.write(r.randbytes(r.randint(200, 2200)))
EOF
}

# change_tree DIR SEED: every 80th file rewritten (across all four
# packages), every 97th deleted, 40 new files in a new directory and 10
# in an old one.
change_tree() {
    "$PY" - "$1" "$2" <<'EOF'
import os, random, sys
d, seed = sys.argv[1], int(sys.argv[2])
r = random.Random(seed)
for i in range(0, 4000, 80):
    p = os.path.join(d, "d%02d" % (i // 100), "f%04d.txt" % i)
    if os.path.exists(p):
        with open(p, "wb") as f:
            f.write(b"changed %d " % seed + r.randbytes(r.randint(10, 3000)))
for i in range(5, 4000, 97):
    p = os.path.join(d, "d%02d" % (i // 100), "f%04d.txt" % i)
    if os.path.exists(p):
        os.unlink(p)
os.makedirs(os.path.join(d, "new%d" % seed), exist_ok=True)
for i in range(40):
    with open(os.path.join(d, "new%d" % seed, "n%02d.txt" % i), "wb") as f:
        f.write(b"new %d %d\n" % (seed, i))
for i in range(10):
    with open(os.path.join(d, "d01", "added-%d-%d.txt" % (seed, i)), "wb") as f:
        f.write(b"added %d %d\n" % (seed, i))
EOF
}

# stage_files MIRROR: files in MIRROR's stage(s) now.
stage_files() {
    find "$1" -maxdepth 1 -name '.rssub-stage.*' -exec find {} -type f \; |
        wc -l
}

# mirror_ok NAME MIRROR: `rssub run --dump` NAME (started in the
# background with the Source changing, by the caller) reaches its first
# sync; a check.
mirror_ok() {
    if sub_start "$1" "$B" "$2" "$TMP/$1.db" --dump; then
        ok "rssub run --dump: first sync applied"
    else
        bad "rssub run --dump: first sync applied" \
            "$(tail -n 30 "${SUB_LOG[$1]}")"
    fi
}

# mirror_in_sync NAME MIRROR: the mirror converges to the Source with
# nothing of rssub's own left in it, rssub exits 0 on SIGTERM, and an
# audit finds the mirror in sync.
mirror_in_sync() {
    check "the mirror converges to the Source" converged 60 "$D" "$2"
    check "nothing of rssub's own left in the mirror" \
        test -z "$(find "$2" -name '.rssub-stage.*' -o -name '.rssub-tmp.*')"
    sub_stop "$1"
    check "SIGTERM: exit 0" test "$SUB_RC" = 0
    sub_cmd "$1.audit" audit "$B" "$2" "$TMP/$1.db"
    check "rssub audit: in sync" test "$SUB_RC" = 0
}

# shellcheck disable=SC2119 # no persistence wanted
redis_start || exit 1
SUB_READY_SECS=90
hub_start h --open || exit 1
HUB=http://127.0.0.1:${HUB_HTTP[h]}/hub

D=$TMP/src
mkdir -p "$D"
make_tree "$D"
if src_start s "$D" --hub "$HUB" --dump --dump-max-files 2000 \
        --resourcelist-refresh 0; then
    ok "rssource starts (--hub --dump)"
else
    bad "rssource starts (--hub --dump)"
    sub_finish
fi
B=$(src_url s)
# one change published, so that the channel is advertised
printf 'first\n' >"$D/first.txt"
caps_ready() {
    local c
    c=$(curl -sf --max-time 5 "${B}resourcesync/capabilitylist.xml") || return 1
    grep -q 'capability="resourcedump"' <<<"$c" &&
        grep -q 'rel="hub"\|websocket' <<<"$c"
}
check "its dump and its channel are advertised" wait_until 60 caps_ready

note "changes while rssub's writer threads are in the middle of the dump"
M=$TMP/m1
mkdir -p "$M"
# the changer: waits for files in a stage, changes the Source at once,
# says how many files the stage held then
(
    i=0
    while [ "$(stage_files "$M")" -lt 1 ] && [ "$i" -lt 3000 ]; do
        sleep 0.01
        i=$((i + 1))
    done
    stage_files "$M" >"$TMP/staged-at-change"
    change_tree "$D" 1
) &
CHANGER=$!
mirror_ok m1 "$M"
wait "$CHANGER"
STAGED=$(cat "$TMP/staged-at-change" 2>/dev/null || echo 0)
check "the Source changed with files in rssub's stage ($STAGED)" \
    test "$STAGED" -ge 1
check "the baseline came from the dump" \
    grep -q 'msg="resource dump unpacked"' "${SUB_LOG[m1]}"
check "the mirror converges to the changed Source" converged 60 "$D" "$M"

note "more changes, pushed after the baseline"
change_tree "$D" 2
mirror_in_sync m1 "$M"

note "a Source changing all through a second mirror's baseline"
M2=$TMP/m2
mkdir -p "$M2"
(
    for s in 3 4 5 6 7 8; do
        change_tree "$D" "$s"
        sleep 0.15
    done
) &
CHANGER=$!
mirror_ok m2 "$M2"
wait "$CHANGER"
mirror_in_sync m2 "$M2"

src_stop s
sub_finish
