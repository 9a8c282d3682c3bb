#!/usr/bin/env bash
# test_sub_diskfull.sh - rssub on a full disk (docs/subscriber.md,
# "A full disk"): redis-server, rshub, rssource --hub and three `rssub run`
# mirrors, following the WebSocket channel, WebSub and polling. Their disk
# fills (RLIMIT_FSIZE lowered from outside: every write fails, of mirror
# files and of the state alike) while the Source creates, rewrites and
# deletes files: neither exits, each says it cannot save its state, and
# once the disk has room again the mirrors converge to the Source with
# nothing more than the wait (the build before this test never did: the
# changes of the lost batches were taken for done), push goes on, an
# audit finds them in sync, and a restart finds nothing to redo. Then a
# one-shot `rssub sync` on a full disk stops with exit 1 and a clear
# message, and the next one with room completes the mirror. About 30 s.
# Needs RS_BUILD_DIR; stops only the processes it started.
# shellcheck disable=SC2317 # helpers run through check/wait_until
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"
# shellcheck source=lib/websub.sh
. "$(dirname "$0")/lib/websub.sh"

for b in "$RSSUB" "$RSSOURCE" "$RSHUB"; do
    [ -x "$b" ] || { bad "built: $b"; sub_finish; }
done

# shellcheck disable=SC2119 # no persistence wanted
redis_start || { bad "redis-server starts"; sub_finish; }
hub_start h --open "${WS_HUB_ARGS[@]}" || { bad "rshub starts"; sub_finish; }
D=$TMP/src
mkdir -p "$D/d"
for i in $(seq 40); do echo "file $i" >"$D/f$i"; done
for i in $(seq 10); do echo "deep $i" >"$D/d/g$i"; done
src_start s "$D" --hub "http://127.0.0.1:${HUB_HTTP[h]}/hub" \
    --resourcelist-refresh 0 || { bad "rssource starts"; sub_finish; }
B=$(src_url s)
REAL_RSSUB=$RSSUB
RSSUB=$(full_disk_wrap "$REAL_RSSUB")

if sub_start ws "$B" "$TMP/ws.mirror" "$TMP/ws.state"; then
    ok "rssub run (WebSocket) starts"
else
    bad "rssub run (WebSocket) starts" "$(tail -n 20 "${SUB_LOG[ws]}")"
    sub_finish
fi
if sub_start poll "$B" "$TMP/poll.mirror" "$TMP/poll.state" --no-push \
        --poll-interval 1s; then
    ok "rssub run (polling) starts"
else
    bad "rssub run (polling) starts" "$(tail -n 20 "${SUB_LOG[poll]}")"
    sub_finish
fi
if sub_start wsub "$B" "$TMP/wsub.mirror" "$TMP/wsub.state" \
        --transport websub --callback-listen 127.0.0.1:0 --poll-interval 60s; then
    ok "rssub run (WebSub) starts"
else
    bad "rssub run (WebSub) starts" "$(tail -n 20 "${SUB_LOG[wsub]}")"
    sub_finish
fi
MIRRORS="ws wsub poll"
# shellcheck disable=SC2016
websub_active() { grep -Eq 'msg="?websub subscription"? .*state=active' "${SUB_LOG[wsub]}"; }
check "the WebSub mirror's subscription is active" wait_until 20 websub_active
# shellcheck disable=SC2016
ws_open() { grep -q 'msg="channel connected" uri=ws://[^ ]*changes' "${SUB_LOG[ws]}"; }
check "the WebSocket mirror follows the change channel" wait_until 20 ws_open
for m in $MIRRORS; do
    check "$m: the mirror holds the Source" converged 20 "$D" "$TMP/$m.mirror"
done

note "the disk is full: every write of the three rssub fails"
for m in $MIRRORS; do
    if ! full_disk "${SUB_PID[$m]}" 0; then
        note "SKIP the rest: prlimit(2) on another process is not allowed here"
        sub_finish
    fi
done
for i in $(seq 1 10); do echo "rewritten $i" >>"$D/f$i"; done
for i in $(seq 41 55); do echo "new $i" >"$D/f$i"; done
mkdir -p "$D/e"
for i in 1 2 3; do echo "new deep $i" >"$D/e/h$i"; done
rm -f "$D"/f2[0-9] "$D/d/g1" "$D/d/g2"
cant_save() { grep -q 'msg="cannot save state: its changes are taken in again"' "${SUB_LOG[$1]}"; }
for m in $MIRRORS; do
    check "$m: rssub says it cannot save its state" wait_until 15 cant_save "$m"
done
n=$(sub_metric ws rssub_state_errors_total) || n=0
check "ws: rssub_state_errors_total counts the failed commits ($n)" test "$n" -ge 1
sleep 3      # some retries meet the full disk too
for m in $MIRRORS; do
    check "$m: rssub is still running" sub_alive "$m"
    check "$m: the mirror lacks the changes while the disk is full" \
        test ! -e "$TMP/$m.mirror/f41"
done

note "room again"
for m in $MIRRORS; do
    full_disk "${SUB_PID[$m]}" inf || bad "$m: the limit is lifted"
done
for m in $MIRRORS; do
    check "$m: the mirror converges to the Source" \
        converged 30 "$D" "$TMP/$m.mirror"
done
echo "after the disk was full" >"$D/f60"
rm -f "$D/f1"
check "WebSocket: a change after it comes by push" \
    converged 15 "$D" "$TMP/ws.mirror"
RSSUB=$REAL_RSSUB
sub_cmd ws.audit audit "$B" "$TMP/ws.mirror" "$TMP/ws.state"
if [ "$SUB_RC" = 0 ] && [ ! -s "$TMP/ws.audit.out" ]; then
    ok "rssub audit: the WebSocket mirror is in sync (exit 0)"
else
    bad "rssub audit: exit $SUB_RC, want 0" \
        "$(head -n 20 "$TMP/ws.audit.out"; tail -n 20 "$TMP/ws.audit.log")"
fi
sub_stop ws
expect_eq "WebSocket: SIGTERM, exit 0" "$SUB_RC" 0
sub_stop poll
expect_eq "polling: SIGTERM, exit 0" "$SUB_RC" 0
sub_stop wsub
expect_eq "WebSub: SIGTERM, exit 0" "$SUB_RC" 0
if sub_start ws "$B" "$TMP/ws.mirror" "$TMP/ws.state"; then
    synced=$(grep 'msg="synced"' "${SUB_LOG[ws]}" | tail -n 1)
    check "a restart finds nothing left to fetch ($synced)" \
        grep -q 'msg="synced" fetched=0 ' <<<"$synced"
else
    bad "rssub run restarts" "$(tail -n 20 "${SUB_LOG[ws]}")"
fi
sub_stop ws

note "a one-shot sync on a full disk stops, the next completes"
sub_cmd once sync "$B" "$TMP/once.mirror" "$TMP/once.state"
expect_eq "rssub sync: exit 0" "$SUB_RC" 0
mkdir -p "$D/many"
for i in $(seq 300); do echo "one-shot $i" >"$D/many/m$i"; done
echo "rewritten for the one-shot" >>"$D/f2"
rm -f "$D/f3"
# 36 kB: the state opens (its 32 kB shared-memory index fits), the
# mirror's small files fit, the commit of 300 new rows does not
export FULL_DISK_AT=36864
RSSUB=$(full_disk_wrap "$REAL_RSSUB")
sub_cmd once.full sync "$B" "$TMP/once.mirror" "$TMP/once.state"
unset FULL_DISK_AT
expect_eq "rssub sync on a full disk: exit 1" "$SUB_RC" 1
check "... saying it cannot save its state" \
    grep -q 'msg="cannot save state: stopping' "$TMP/once.full.log"
RSSUB=$REAL_RSSUB
sub_cmd once.room sync "$B" "$TMP/once.mirror" "$TMP/once.state"
expect_eq "rssub sync with room: exit 0" "$SUB_RC" 0
check "... and the mirror holds the Source" same_tree "$D" "$TMP/once.mirror"
sub_finish
