#!/usr/bin/env bash
# test_hub_clock.sh - rshub nodes on one Redis whose wall clocks are off
# (libfaketime). One 30 days ahead: the hub's clock is Redis's
# (docs/operations.md, "Clocks"). The skewed node says so once (its log,
# rshub_redis_clock_offset_seconds); its janitor does not cut a backlog
# whose age bound (1 day) its own clock says has passed, while a 1 s bound
# is still applied; its lease ticks do not expire a WebSub subscription
# leased for a day on the other node, which goes on receiving what either
# node accepts. On the build before, the skewed node trimmed the backlog
# to nothing and removed the subscription. Then a third node's wall clock
# is stepped an hour forward while a client that reads nothing is over the
# soft limit: it is not cut (before: cut at once, 4002). About 25 s.
# Needs RS_BUILD_DIR (ctest sets it) and faketime (deploy/install-deps.sh);
# stops only the processes it started.
# shellcheck disable=SC2317 # helpers run through check/wait_until
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/websub.sh
. "$(dirname "$0")/lib/websub.sh"

[ -x "$RSHUB" ] || { bad "built: $RSHUB"; finish; }

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

[topic stepped]
uri = $U/stepped
EOF

# shellcheck disable=SC2119 # no persistence wanted
redis_start || { bad "redis-server starts"; finish; }
hub_start A --config "$TMP/hub.conf" "${WS_HUB_ARGS[@]}" ||
    { bad "rshub A starts"; finish; }
# B: the same rshub 30 days ahead (its wall clock only)
echo "+30d" >"$TMP/ahead.rc"
faketime_wrap "$RSHUB" "$TMP/rshub-ahead" "$TMP/ahead.rc" ||
    { bad "libfaketime is installed"; finish; }
REAL_RSHUB=$RSHUB
RSHUB=$TMP/rshub-ahead
hub_start B --config "$TMP/hub.conf" "${WS_HUB_ARGS[@]}" ||
    { bad "rshub B (30 days ahead) starts"; finish; }
RSHUB=$REAL_RSHUB
# clock_at LOG: the time (epoch s) of LOG's last line, by the clock of
# the process that wrote it
clock_at() { date -d "$(sed -n 's/^ts=\([^ ]*\) .*/\1/p' "$1" | tail -n 1)" +%s; }
ahead_log() { [ "$(clock_at "${HUB_LOG[B]}")" -gt $(($(date +%s) + 29 * 86400)) ]; }
check "B's clock is 30 days ahead (its log's times)" ahead_log

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

# C: a node whose wall clock is stepped an hour forward (as NTP steps a
# clock found late) while a WebSocket client that reads nothing is over
# the soft limit (4 KiB) for less than --ws-soft-time (60 s): the time
# over it is a duration, kept on the monotonic clock, so the step does not
# cut the client. libfaketime reads the offset from a file, at most once a
# second.
note "a wall clock stepped forward does not cut a slow client early"
echo "+0" >"$TMP/step.rc"
faketime_wrap "$RSHUB" "$TMP/rshub-stepped" "$TMP/step.rc"
RSHUB=$TMP/rshub-stepped
hub_start C --config "$TMP/hub.conf" --ws-soft-limit 4K --ws-soft-time 60s \
    --ws-hard-limit 64M || { bad "rshub C starts"; finish; }
RSHUB=$REAL_RSHUB
bg_ht stuck stuck --ws "${HUB_WS[C]}" --chan stepped --rcvbuf 4096 \
    --hold 60 --ready "$TMP/stuck.ready"
wait_file "$TMP/stuck.ready" 10 || bad "a client that reads nothing is open"
check "it is attached" ht wait-subs --http "${HUB_HTTP[C]}" --name stepped --n 1
# enough to fill the socket buffers and go over 4 KiB in rshub's queue
ht flood --http "${HUB_HTTP[C]}" --topic "$U/stepped" --count 3000 \
    --pad 1000 --conns 2 --out "$TMP/stepped.acks" >/dev/null ||
    bad "3000 notifications accepted on stepped"
attached() {
    [ "$(ht topic --http "${HUB_HTTP[C]}" --name stepped --get subscribers)" = 1 ]
}
check "the client is still attached, over the soft limit" attached
echo "+1h" >"$TMP/step.rc"
sleep 2
ht flood --http "${HUB_HTTP[C]}" --topic "$U/stepped" --count 20 \
    --pad 1000 --conns 1 --out "$TMP/stepped2.acks" >/dev/null ||
    bad "20 more accepted after the step"
sleep 1
expect_eq "after the step, no client cut as a slow consumer" \
    "$(metric C rshub_ws_slow_consumer_drops_total)" 0
stop_pid "${BG_PID[stuck]}"
hub_stop C
expect_eq "C: SIGTERM, exit 0" "$HUB_RC" 0
stepped_log() { [ "$(clock_at "${HUB_LOG[C]}")" -gt $(($(date +%s) + 3000)) ]; }
check "C's clock had stepped an hour forward (its last log line's time)" \
    stepped_log
hub_asan_check C

hub_stop B
expect_eq "B: SIGTERM, exit 0" "$HUB_RC" 0
hub_asan_check B
hub_stop A
expect_eq "A: SIGTERM, exit 0" "$HUB_RC" 0
hub_asan_check A
finish
