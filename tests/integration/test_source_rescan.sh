#!/usr/bin/env bash
# test_source_rescan.sh - rssource's rescans in steps (docs/source.md 4):
# a tree of 12,000 files rescanned every 200 ms, 5 files a loop turn,
# while files are created, rewritten and deleted all over it. Every
# change the Change Lists report is one that was made (no file the walk
# found taken for gone, none created twice), every change made is
# reported, rescans come at the interval, GETs are answered while they
# walk, a restart serves before its start-up rescan (which reports the
# changes made while stopped, each once, even after a kill -9 in its
# middle) and keeps the Resource List of before until it ends, a rescan
# that fails (a full disk) is tried again until it can be
# recorded, and with the kernel's inotify watch limit reached directories
# without a watch are followed by rescans. About 30 s.
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"

[ -x "$RSSOURCE" ] || { bad "built: $RSSOURCE"; src_finish; }

D=$TMP/data
"$PY" - "$D" <<'EOF'
import os, sys
root = sys.argv[1]
for d in range(60):
    os.makedirs("%s/d%02d" % (root, d))
    for f in range(200):
        with open("%s/d%02d/f%03d" % (root, d, f), "w") as fp:
            fp.write("base %d %d\n" % (d, f))
EOF
find "$D" -type f -printf '%P\n' | sort >"$TMP/base.list"

# --rescan-step 5 and --settle 0: a rescan is 2,400 loop turns, and the
# watch's batches run while the walk is inside the directories they touch
# (the race of a directory listed before a file was created in it)
if src_start s "$D" --rescan-interval 200ms --rescan-step 5 --settle 0 \
        --resourcelist-refresh 0; then
    ok "rssource starts on 12,000 files"
else
    bad "rssource starts"
    src_finish
fi
# rescans: how many have ended; rescans_at_least N
rescans() { grep -c 'msg="rescan done"' "${SRC_LOG[s]}"; }
# shellcheck disable=SC2317 # run through wait_until
rescans_at_least() { [ "$(rescans)" -ge "$1" ]; }
check "a rescan ends within 10 s (--rescan-interval 200ms)" \
    wait_until 10 rescans_at_least 1

# The churn: ~250 operations a second for 8 s, in every directory, each
# written down; GETs of one file meanwhile, each one's wait recorded.
note "churn and GETs while rescans walk"
before=$(rescans)
# (scripts in files: a background command's stdin is /dev/null)
cat >"$TMP/churn.py" <<'EOF'
import os, random, sys, time
root, log = sys.argv[1], open(sys.argv[2], "w")
rng = random.Random(7)
live = sorted(os.path.join(dp, f)[len(root) + 1:]
              for dp, _, fs in os.walk(root) for f in fs)
live = set(live)
k = 0
end = time.monotonic() + 8
while time.monotonic() < end:
    op = rng.random()
    if op < 0.4:
        rel = "d%02d/n%05d" % (rng.randrange(60), k)
        k += 1
        with open(os.path.join(root, rel), "w") as fp:
            fp.write("new %d\n" % k)
        live.add(rel)
        log.write("created %s\n" % rel)
    elif op < 0.7 and live:
        rel = rng.choice(sorted(live)) if k % 50 == 0 else \
            "d%02d/f%03d" % (rng.randrange(60), rng.randrange(200))
        if rel in live:
            with open(os.path.join(root, rel), "w") as fp:
                fp.write("rewritten %d\n" % k)
            log.write("updated %s\n" % rel)
    else:
        rel = "d%02d/f%03d" % (rng.randrange(60), rng.randrange(200))
        if rel in live:
            os.unlink(os.path.join(root, rel))
            live.discard(rel)
            log.write("deleted %s\n" % rel)
    k += 1
    time.sleep(0.004)
log.close()
EOF
cat >"$TMP/gets.py" <<'EOF'
import http.client, sys, time
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=20)
waits, end = [], time.monotonic() + 8
while time.monotonic() < end:
    t = time.monotonic()
    c.request("GET", "/d59/f199")
    r = c.getresponse()
    r.read()
    waits.append(time.monotonic() - t)
    time.sleep(0.005)
with open(sys.argv[2], "w") as f:
    f.write("%d %.3f\n" % (len(waits), max(waits)))
EOF
bg churn "$PY" "$TMP/churn.py" "$D" "$TMP/ops"
bg gets "$PY" "$TMP/gets.py" "${SRC_HTTP[s]}" "$TMP/gets"
bg_wait churn 30 || bad "the churn ends"
bg_wait gets 30 || bad "the GETs end"
# quiet: two rescans that end after the churn did
now=$(rescans)
check "rescans come one after another while the tree changes ($((now - before)) in 8 s)" \
    test $((now - before)) -ge 2
check "two more rescans after the churn" \
    wait_until 20 rescans_at_least $((now + 2))
ngets=0 maxwait=-
[ -s "$TMP/gets" ] && read -r ngets maxwait <"$TMP/gets"
slowest=$(sed -n 's/.*msg="rescan done" seconds=\([0-9.]*\).*/\1/p' "${SRC_LOG[s]}" |
          sort -n | tail -n 1)
note "GETs while rescans walked: $ngets, the longest wait ${maxwait} s; the longest rescan ${slowest} s"
check "GETs answered while rescans walk ($ngets, none failed)" test "$ngets" -gt 100

# What the Change Lists say against what was done
changes_of s >"$TMP/reported" || bad "the Change Lists are read"
"$PY" - "$TMP/base.list" "$TMP/ops" "$TMP/reported" "$D" >"$TMP/verdict" 2>&1 <<'EOF'
import os, sys
base = set(open(sys.argv[1]).read().split())
ops = [l.split() for l in open(sys.argv[2]) if l.strip()]
rep = [l.split() for l in open(sys.argv[3]) if l.strip()]
root = sys.argv[4]
made = {"created": set(), "updated": set(), "deleted": set()}
for c, p in ops:
    made[c].add(p)
problems = []
# each reported change is one the churn made (a rewrite of a file created
# in the same instant may read as created + updated: both were made)
for c, p in rep:
    if c == "deleted" and p not in made["deleted"]:
        problems.append("deleted %s: never deleted (a file the walk found, taken for gone)" % p)
    if c == "created" and p not in made["created"] and p not in base:
        problems.append("created %s: never created" % p)
    if c == "created" and p in base and p not in made["deleted"]:
        problems.append("created %s: there all along" % p)
    if c == "updated" and p not in made["updated"] and p not in made["created"]:
        problems.append("updated %s: never written" % p)
# replaying the reports on the baseline gives the tree
have = set(base)
for c, p in rep:
    if c == "deleted":
        have.discard(p)
    else:
        have.add(p)
tree = set(os.path.join(dp, f)[len(root) + 1:]
           for dp, _, fs in os.walk(root) for f in fs)
if have != tree:
    problems.append("replayed %d files, the tree holds %d: missing %s, extra %s"
                    % (len(have), len(tree), sorted(tree - have)[:3],
                       sorted(have - tree)[:3]))
for c in ("created", "deleted"):
    got = {p for cc, p in rep if cc == c}
    lost = made[c] - got
    # a file created and deleted again within a batch may never be seen
    if c == "created":
        lost -= made["deleted"]
    if lost:
        problems.append("%d %s never reported (first %s)" % (len(lost), c, sorted(lost)[:3]))
print("%d operations, %d reported changes" % (len(ops), len(rep)))
for p in problems[:10]:
    print("PROBLEM " + p)
sys.exit(1 if problems else 0)
EOF
rc=$?
if [ "$rc" = 0 ]; then
    ok "every reported change was made, every change made reported: $(head -n 1 "$TMP/verdict")"
else
    bad "every reported change was made, every change made reported" "$(head -n 12 "$TMP/verdict")"
fi

# Changes while stopped: rssource serves at once on a restart, and a
# rescan in steps (one file a loop turn here: 12,000 turns) reports what
# changed; until it ends, the Resource List of before the stop is served
# as it is (one built meanwhile would list at its `at` files already gone).
# Then the same with a kill -9 in the middle of that rescan: the next
# start reports each change once.
fetch s resourcesync/resourcelist.xml "$TMP/rl.before.xml" ||
    bad "the Resource List is read"
rl_at() { xq "$1" 'md.get("at")'; }
rl_has() { xq "$1" '[u["loc"] for u in urls]' | grep -qx "$(src_url s)$2"; }
rl_lacks() { ! rl_has "$@"; }
at0=$(rl_at "$TMP/rl.before.xml")
src_stop s
expect_eq "rssource: SIGTERM, exit 0" "$SRC_RC" 0
n0=$(wc -l <"$TMP/reported")
printf 'while down\n' >"$D/d00/down.txt"
victim=$(find "$D/d30" -type f -printf '%f\n' | sort | head -n 1)
rm -f "$D/d30/$victim"
# this run's log: run_log
run_log() { tail -c +$((SRC_LOGOFF[s] + 1)) "${SRC_LOG[s]}"; }
# shellcheck disable=SC2317 # run through wait_until
startup_scanned() { run_log | grep -q 'msg="start-up scan"'; }
SRC_PORT=${SRC_HTTP[s]} src_start s "$D" --rescan-step 1 \
    --resourcelist-refresh 0 || bad "rssource restarts"
fetch s resourcesync/resourcelist.xml "$TMP/rl.mid.xml" ||
    bad "the Resource List is read during the start-up rescan"
if startup_scanned; then
    note "the start-up rescan ended before the Resource List was read: its hold not checked"
else
    expect_eq "during the start-up rescan, the Resource List of before the stop" \
        "$(rl_at "$TMP/rl.mid.xml")" "$at0"
    check "... which still lists the file deleted while down" \
        rl_has "$TMP/rl.mid.xml" "d30/$victim"
fi
CL_AFTER=$n0 check "the restart reports what changed while down" \
    wait_until 30 has_changes s "created d00/down.txt" "deleted d30/$victim"
check "the start-up scan ends" wait_until 30 startup_scanned
expect_eq "serving came first, the start-up scan after" \
    "$(run_log | grep -o 'msg="serving"\|msg="start-up scan"' | tr '\n' ' ')" \
    'msg="serving" msg="start-up scan" '
expect_eq "it counts what changed" \
    "$(run_log | sed -n 's/.*msg="start-up scan".* created=\([0-9]*\) updated=\([0-9]*\) deleted=\([0-9]*\) .*/\1 \2 \3/p')" \
    "1 0 1"
fetch s resourcesync/resourcelist.xml "$TMP/rl.after.xml" ||
    bad "the Resource List is read after the start-up rescan"
check "after it, a new Resource List" \
    test "$(rl_at "$TMP/rl.after.xml")" '>' "$at0"
check "... with the file created while down" \
    rl_has "$TMP/rl.after.xml" d00/down.txt
check "... and without the one deleted" \
    rl_lacks "$TMP/rl.after.xml" "d30/$victim"
n1=$(changes_of s | wc -l)
src_stop s

printf 'while down again\n' >"$D/d59/down2.txt"
rm -f "$D/d00/down.txt"
SRC_PORT=${SRC_HTTP[s]} src_start s "$D" --rescan-step 1 \
    --resourcelist-refresh 0 || bad "rssource restarts again"
if startup_scanned; then
    note "the start-up rescan ended before the kill -9: a kill in its middle not checked"
fi
src_stop s KILL
SRC_PORT=${SRC_HTTP[s]} src_start s "$D" --rescan-step 50 \
    --resourcelist-refresh 0 || bad "rssource restarts after kill -9"
check "after a kill -9 in the start-up rescan, the next start ends it" \
    wait_until 30 startup_scanned
CL_AFTER=$n1 check "... and each change while down is reported once" \
    has_changes s "created d59/down2.txt" "deleted d00/down.txt"
src_stop s

# A full disk: the batch of a change cannot be recorded, and neither can
# the rescan that makes up for it; the rescan is tried again (1 s, 2 s,
# ...) until the disk has room, without --rescan-interval. The disk fills
# through RLIMIT_FSIZE, lowered from outside: every write past 4 kB fails.
note "a full disk: the failed rescan is tried again"
F=$TMP/small
mkdir -p "$F"
for i in 1 2 3 4 5; do echo "$i" >"$F/f$i"; done
# shellcheck disable=SC2317 # run through wait_until
failed() { grep -c 'msg="rescan failed"' "${SRC_LOG[f]}"; }
# shellcheck disable=SC2317
failed_at_least() { [ "$(failed)" -ge "$1" ]; }
if ! RSSOURCE=$(full_disk_wrap "$RSSOURCE") src_start f "$F" --settle 0 \
        --resourcelist-refresh 0; then
    bad "rssource starts under the wrapper"
elif ! full_disk "${SRC_PID[f]}" 4096; then
    note "SKIP the full disk: prlimit(2) on another process is not allowed here"
else
    n0=$(changes_of f | wc -l)
    echo lost >"$F/lost.txt"
    check "the batch fails and the rescan after it fails too" \
        wait_until 10 failed_at_least 1
    check "the failed rescan is tried again, without --rescan-interval" \
        wait_until 10 failed_at_least 2
    check "GETs are answered on a full disk" get f f1
    full_disk "${SRC_PID[f]}" inf || bad "the limit is lifted"
    CL_AFTER=$n0 check "room again: a retry reports the change the batch lost" \
        wait_until 20 has_changes f "created lost.txt"
    check "the retry's rescan ends" grep -q 'msg="rescan done"' "${SRC_LOG[f]}"
    check "the retries wait longer each time" \
        grep -q 'msg="rescan failed".*retry_in_seconds=2' "${SRC_LOG[f]}"
fi
src_stop f

# The kernel's inotify watch limit: rssource logs it once, keeps serving,
# and rescans on a timer (--rescan-interval, or every 10 minutes) so that
# directories without a watch are still followed. The limit is lowered
# to 10 watches in a user namespace of rssource's own (the system's is
# untouched); 30 directories, so two thirds go unwatched.
note "the inotify watch limit: directories without a watch are rescanned"
W=$TMP/watchless
for d in $(seq 30); do mkdir -p "$W/d$d" && echo "$d" >"$W/d$d/f"; done
cat >"$TMP/rssource-10-watches" <<EOF
#!/bin/sh
exec unshare -U -r sh -c 'echo 10 >/proc/sys/user/max_inotify_watches && exec "\$0" "\$@"' "$RSSOURCE" "\$@"
EOF
chmod +x "$TMP/rssource-10-watches"
if ! unshare -U -r sh -c 'echo 10 >/proc/sys/user/max_inotify_watches' 2>/dev/null; then
    note "SKIP the watch limit: no user namespace of our own here (unshare -U)"
elif ! RSSOURCE=$TMP/rssource-10-watches src_start w "$W" --rescan-interval 2s \
        --resourcelist-refresh 0; then
    bad "rssource starts with 10 inotify watches for 31 directories"
else
    expect_eq "the limit is logged once" \
        "$(grep -c 'inotify watch limit reached' "${SRC_LOG[w]}")" 1
    n0=$(changes_of w | wc -l)
    echo new >"$W/d1/watched.txt"
    CL_AFTER=$n0 check "a change in a watched directory is reported at once" \
        wait_until 1 has_changes w "created d1/watched.txt"
    echo new >"$W/d30/unwatched.txt"
    CL_AFTER=$n0 check "one in a directory without a watch, by the next rescan" \
        wait_until 10 has_changes w "created d1/watched.txt" "created d30/unwatched.txt"
    check "... which says why it runs" \
        grep -q 'msg="rescanning the whole tree" why="directories without a watch"' \
        "${SRC_LOG[w]}"
    check "GETs are answered" get w d30/unwatched.txt
fi
src_finish
