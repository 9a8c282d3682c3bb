#!/usr/bin/env bash
# test_source_bigfile.sh - rssource reads large files' digests on a
# thread of its own (docs/source.md 3, "Large files are read on a thread
# of their own"): while a 256 MiB file is hashed, GETs are answered
# without waiting for it; its change carries the file's true MD5 and
# length; a file rewritten while it is read is recorded with the digests
# of what it finally holds; and a stop in the middle of a read neither
# waits for the read nor loses the file (the next start reports it).
# About 10 s.
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"

[ -x "$RSSOURCE" ] || { bad "built: $RSSOURCE"; src_finish; }

D=$TMP/data
mkdir -p "$D"
printf 'small\n' >"$D/a.txt"
if src_start s "$D" --resourcelist-refresh 0; then
    ok "rssource starts"
else
    bad "rssource starts"
    src_finish
fi
# shellcheck disable=SC2034 # read by src_start (lib/source.sh)
SRC_PORT=${SRC_HTTP[s]}

# last_md: "md5 length" of the last Change List entry of PATH
last_md() {
    local path=$1
    fetch s resourcesync/changelist-index.xml "$TMP/idx.xml" || return 1
    local loc
    loc=$(xq "$TMP/idx.xml" '[u["loc"] for u in urls][-1]')
    curl -sf "$loc" -o "$TMP/cl.xml" || return 1
    xq "$TMP/cl.xml" "[u.get('hash', '').split()[0][4:] + ' ' + u.get('length', '') for u in urls if u['loc'].endswith('/$path')][-1:]"
}
# shellcheck disable=SC2317 # run through wait_until
md_is() { [ "$(last_md "$1")" = "$2" ]; }
want_md() { echo "$(md5sum <"$1" | cut -d' ' -f1) $(stat -c %s "$1")"; }

# The prober: GETs a.txt every 10 ms until told to stop, and prints the
# longest wait and how many took over 300 ms.
cat >"$TMP/probe.py" <<'EOF'
import os, sys, time, urllib.request
url, stop = sys.argv[1], sys.argv[2]
longest, slow, n = 0.0, 0, 0
while not os.path.exists(stop):
    t = time.monotonic()
    urllib.request.urlopen(url, timeout=30).read()
    d = time.monotonic() - t
    longest, n = max(longest, d), n + 1
    slow += d > 0.3
    time.sleep(0.01)
print("%d %.3f %d" % (n, longest, slow))
EOF

note "a 256 MiB file: hashed off the loop"
"$PY" "$TMP/probe.py" "$(src_url s a.txt)" "$TMP/probe.stop" >"$TMP/probe.out" 2>&1 &
probe=$!
sleep 0.3
head -c $((256 * 1024 * 1024)) /dev/zero | tr '\0' 'b' >"$D/big.bin"
check "its change carries its MD5 and length" \
    wait_until 30 md_is big.bin "$(want_md "$D/big.bin")"
touch "$TMP/probe.stop"
wait "$probe"
read -r n longest slow <"$TMP/probe.out"
note "GETs meanwhile: $n, the longest ${longest:-?} s"
check "GETs were answered meanwhile, none waiting over 300 ms" \
    test "${n:-0}" -gt 20 -a "${slow:-1}" = 0

note "rewritten while it is read"
head -c $((128 * 1024 * 1024)) /dev/zero >"$D/grow.bin"
sleep 0.05
head -c $((64 * 1024 * 1024)) /dev/zero | tr '\0' 'g' >>"$D/grow.bin"
check "recorded with what it finally holds" \
    wait_until 30 md_is grow.bin "$(want_md "$D/grow.bin")"

note "stopped in the middle of a read"
truncate -s 1G "$D/sparse.bin"
sleep 0.3
t0=$(date +%s%N)
src_stop s
took=$(( ($(date +%s%N) - t0) / 1000000 ))
expect_eq "SIGTERM: exit 0" "$SRC_RC" 0
check "without waiting for the read (${took} ms)" test "$took" -lt 3000
src_asan_check s
if src_start s "$D" --resourcelist-refresh 0; then
    ok "rssource restarts"
else
    bad "rssource restarts"
    src_finish
fi
check "the next start reports the file" \
    wait_until 60 md_is sparse.bin "$(want_md "$D/sparse.bin")"
src_stop s
src_asan_check s

src_finish
