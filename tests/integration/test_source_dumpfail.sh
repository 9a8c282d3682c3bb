#!/usr/bin/env bash
# test_source_dumpfail.sh - a Resource Dump build that fails (a full disk:
# RLIMIT_FSIZE lowered from outside with prlimit, SIGXFSZ ignored) is
# tried again after 1 s, 2 s, ... up to --dump-interval, each failure
# logged once with retry_in_seconds, while the previous dump goes on
# being served; once there is room, the next try publishes (docs/source.md
# 6a, "When"). Before the fix every failed build was tried again the next
# second, each reading the whole tree and rewriting packages. About 25 s.
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"

[ -x "$RSSOURCE" ] || { bad "built: $RSSOURCE"; src_finish; }

D=$TMP/data
mkdir -p "$D"
for i in $(seq 0 49); do head -c 2000 /dev/urandom >"$D/f$i.bin"; done
if ! RSSOURCE=$(full_disk_wrap "$RSSOURCE") src_start s "$D" --dump \
    --dump-interval 4s --settle 0; then
    bad "rssource starts under the wrapper"
    src_finish
fi
ok "rssource --dump --dump-interval 4s starts"
# shellcheck disable=SC2317 # run through wait_until
published() { grep -c 'msg="resource dump published"' "${SRC_LOG[s]}"; }
# shellcheck disable=SC2317
published_at_least() { [ "$(published)" -ge "$1" ]; }
# shellcheck disable=SC2317
failed() { grep -c 'msg="resource dump failed"' "${SRC_LOG[s]}"; }
# shellcheck disable=SC2317
failed_at_least() { [ "$(failed)" -ge "$1" ]; }
check "the first dump is published" wait_until 20 published_at_least 1
fetch s resourcesync/resourcedump.xml "$TMP/rd1.xml" ||
    bad "the dump is served"

if ! full_disk "${SRC_PID[s]}" $((1024 * 1024)); then
    note "SKIP the full disk: prlimit(2) on another process is not allowed here"
    src_finish
fi
# A file larger than the limit: the package holding it cannot be written.
head -c $((3 * 1024 * 1024)) /dev/urandom >"$D/zbig.bin"
check "the next build fails" wait_until 20 failed_at_least 1
sleep 12
n=$(failed)
note "failed builds in the 12 s after the first failure: $((n - 1))"
# 1, 2, 4, 4, ... s apart: 4 more at most (every second: 12)
check "tried again, backing off (not every second)" \
    test "$n" -ge 3 -a "$n" -le 6
check "each failure says when the next try is" \
    grep -q 'msg="resource dump failed".*retry_in_seconds=[1-4]' \
    "${SRC_LOG[s]}"
fetch s resourcesync/resourcedump.xml "$TMP/rd2.xml" ||
    bad "the dump is served on a full disk"
check "the previous dump is still served" cmp -s "$TMP/rd1.xml" "$TMP/rd2.xml"
full_disk "${SRC_PID[s]}" inf || bad "the limit is lifted"
check "once there is room the next try publishes" \
    wait_until 10 published_at_least 2

src_finish
