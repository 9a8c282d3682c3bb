#!/usr/bin/env bash
# test_hub_clock.sh - two rshub nodes on one Redis, one of them with its
# clock 30 days ahead (libfaketime): the hub's clock is Redis's
# (docs/operations.md, "Clocks"). The skewed node says so once (its log,
# rshub_redis_clock_offset_seconds); its janitor does not cut a backlog
# whose age bound (1 day) its own clock says has passed, while a 1 s bound
# is still applied; its lease ticks do not expire a WebSub subscription
# leased for a day on the other node, which goes on receiving what either
# node accepts. On the build before, the skewed node trimmed the backlog
# to nothing and removed the subscription. About 30 s.
# Needs RS_BUILD_DIR (ctest sets it) and faketime (deploy/install-deps.sh);
# stops only the processes it started.
# shellcheck disable=SC2317 # helpers run through check/wait_until
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/websub.sh
. "$(dirname "$0")/lib/websub.sh"

[ -x "$RSHUB" ] || { bad "built: $RSHUB"; finish; }
command -v faketime >/dev/null ||
    { bad "faketime is installed (deploy/install-deps.sh)"; finish; }

U=http://example.com/clock
cat >"$TMP/hub.conf" <<EOF
[topic kept]
uri = $U/kept
backlog-max-age = 1d

[topic aged]
uri = $U/aged
backlog-max-age = 1s

[topic leased]
uri = $U/leased
EOF

# shellcheck disable=SC2119 # no persistence wanted
redis_start || { bad "redis-server starts"; finish; }
hub_start A --config "$TMP/hub.conf" "${WS_HUB_ARGS[@]}" ||
    { bad "rshub A starts"; finish; }
# B: the same rshub 30 days ahead (its wall clock only: libevent's timers
# run on the monotonic clock). ASan would refuse a preload listed before
# its runtime; the order does not matter to what is tested.
# libfaketime preloaded, not the faketime command: that one forks and
# waits, and a SIGTERM would stop it, not rshub.
FTLIB=
for f in /usr/lib/*/faketime/libfaketimeMT.so.1; do [ -e "$f" ] && FTLIB=$f; done
[ -n "$FTLIB" ] || { bad "libfaketimeMT.so.1 is installed"; finish; }
cat >"$TMP/rshub-ahead" <<EOF
#!/bin/sh
ASAN_OPTIONS="\${ASAN_OPTIONS:+\$ASAN_OPTIONS:}verify_asan_link_order=0" \\
LD_PRELOAD="$FTLIB" FAKETIME='+30d' FAKETIME_DONT_FAKE_MONOTONIC=1 \\
    exec "$RSHUB" "\$@"
EOF
chmod +x "$TMP/rshub-ahead"
REAL_RSHUB=$RSHUB
RSHUB=$TMP/rshub-ahead
hub_start B --config "$TMP/hub.conf" "${WS_HUB_ARGS[@]}" ||
    { bad "rshub B (30 days ahead) starts"; finish; }
RSHUB=$REAL_RSHUB
check "B's clock is 30 days ahead" \
    bash -c "[ \"\$(faketime -f +30d date +%s)\" -gt \$((\$(date +%s) + 29 * 86400)) ]"

# B says what it found, once
clock_said() { grep -c "this node's clock differs from Redis's" "${HUB_LOG[B]}"; }
clock_said_once() { [ "$(clock_said)" = 1 ]; }
check "B logs that its clock differs from Redis's" wait_until 10 clock_said_once
said_offset() {
    local v
    v=$(grep -o 'redis_minus_ours_s=-[0-9.]*' "${HUB_LOG[B]}" | cut -d= -f2)
    awk -v v="$v" 'BEGIN { exit !(v != "" && v < -2591000 && v > -2593000) }'
}
check "... by about -30 days (redis_minus_ours_s)" said_offset
metric() {
    curl -sf "http://127.0.0.1:${HUB_HTTP[$1]}/metrics" |
        awk -v m="$2" '$1 == m { print $2 }'
}
offsets_right() {
    awk -v a="$(metric A rshub_redis_clock_offset_seconds)" \
        -v b="$(metric B rshub_redis_clock_offset_seconds)" \
        'BEGIN { exit !(a != "" && b != "" && a * a < 1 &&
                        b < -2591000 && b > -2593000) }'
}
check "rshub_redis_clock_offset_seconds: B about -2592000, A about 0" \
    offsets_right

# Notifications on both bounded topics; a subscription leased for a day
# on A.
ht flood --http "${HUB_HTTP[A]}" --topic "$U/kept" --count 5 \
    --out "$TMP/kept.acks" --conns 1 >/dev/null ||
    bad "5 notifications accepted on kept"
ht flood --http "${HUB_HTTP[A]}" --topic "$U/aged" --count 3 \
    --out "$TMP/aged.acks" --conns 1 >/dev/null ||
    bad "3 notifications accepted on aged"
cb_start cb || { bad "callback server starts"; finish; }
ws_subscribe_ok "a subscription leased for a day, on A" A "$U/leased" leased \
    cb /leased hub.lease_seconds=86400 || finish
length() { ht topic --http "${HUB_HTTP[$1]}" --name "$2" --get backlog.length; }
expect_eq "kept: 5 notifications in the backlog" "$(length A kept)" 5

# The janitors run every 10 s, the lease ticks every 5 s: past both
aged_trimmed() { [ "$(length A aged)" = 0 ]; }
check "aged (1 s bound): trimmed by the janitors" wait_until 25 aged_trimmed
sleep 2
expect_eq "kept (1 day bound): still 5 after B's janitor ran" \
    "$(length A kept)" 5
expect_eq "... as B sees it" "$(length B kept)" 5
expect_eq "the subscription is still active after B's lease ticks" \
    "$(cbs sub-state --http "${HUB_HTTP[A]}" --name leased \
        --callback "$(cb_url cb /leased)" 2>&1)" active

# a notification accepted by B reaches the subscription
cbs publish --http "${HUB_HTTP[B]}" --topic "$U/leased" --dir "$TMP/pub" \
    --out "$TMP/leased.acks" >/dev/null ||
    bad "B accepts a notification on leased"
check "it is delivered to the subscription" \
    cbq wait cb --path /leased --method POST --answered 204 --timeout 15

hub_stop B
expect_eq "B: SIGTERM, exit 0" "$HUB_RC" 0
hub_asan_check B
hub_stop A
expect_eq "A: SIGTERM, exit 0" "$HUB_RC" 0
hub_asan_check A
finish
