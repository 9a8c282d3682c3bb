#!/usr/bin/env bash
# test_websub_crash.sh - WebSub delivery is at least once and in order per
# subscription across a hub crash (docs/protocol.md 5 "Content
# distribution", shared/PROTOCOL.md 4): kill -9 of rshub during a burst of
# 500 publishes, restart on the same Redis; every notification acknowledged
# before the kill reaches every subscription (repeats allowed, recognised by
# X-Hub-Id), in order; the subscriptions survive; new publishes flow.
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/websub.sh"

U=http://example.com/dataset1
K=$U/burst

redis_start || { bad "redis-server starts"; finish; }
websub_skip_if_unimplemented

# fast, a little slow (so a backlog builds up), with a secret
cb_start C --route /cb/k2:post=slow:0.005 || { bad "callback server starts"; finish; }
cat >"$TMP/hub.conf" <<EOF
[topic burst]
uri = $K
EOF
hub_start A --config "$TMP/hub.conf" "${WS_HUB_ARGS[@]}" ||
    { bad "rshub starts with the WebSub options"; finish; }
SECRET=crash-secret

note "subscriptions"
ws_subscribe_ok "crash/subscribe k1" A "$K" burst C /cb/k1
ws_subscribe_ok "crash/subscribe k2 (5 ms per delivery)" A "$K" burst C /cb/k2
ws_subscribe_ok "crash/subscribe k3 (secret)" A "$K" burst C /cb/k3 "hub.secret=$SECRET"

note "kill -9 during a burst of 500 publishes"
bg flood "$PY" "$HUBTOOL" flood --http "${HUB_HTTP[A]}" --topic "$K" --count 500 \
    --conns 2 --out "$TMP/acks" --allow-errors --stop-on-error --timeout 60 \
    >"$TMP/flood.out" 2>&1
# kill once some are acknowledged and delivered, the burst still going
i=0
while [ "$i" -lt 200 ]; do
    n=$(ht metrics --http "${HUB_HTTP[A]}" --get rshub_publish_accepted_total 2>/dev/null)
    [ "${n:-0}" -ge 150 ] && break
    sleep 0.02
    i=$((i + 1))
done
hub_kill9 A
bg_wait flood 60 || bad "crash/the publisher stops after the kill" "$(cat "$TMP/flood.out")"
NACK=$(wc -l <"$TMP/acks")
note "$(head -n 1 "$TMP/flood.out"); k1 had $(cbq count C --path /cb/k1 --method POST), k2 $(cbq count C --path /cb/k2 --method POST) POSTs at the kill"
check "crash/publishes acknowledged before the kill ($NACK of 500)" test "$NACK" -ge 150
hub_asan_check A
hub_start A --config "$TMP/hub.conf" "${WS_HUB_ARGS[@]}" ||
    { bad "crash/rshub restarts on the same Redis"; finish; }
T_RESTART=$(date +%s.%N)

# wait until each subscription has every acknowledged id (bounded)
wait_all() {   # wait_all PATH: every id of $TMP/acks answered 2xx on PATH
    local path=$1 i=0
    while [ "$i" -lt 300 ]; do
        cbq check C --path "$path" --pairs "$TMP/acks" --at-least-once \
            --allow-extra --ignore-signature >/dev/null 2>&1 && return 0
        sleep 0.2
        i=$((i + 1))
    done
    return 1
}
for p in k1 k2 k3; do
    wait_all /cb/$p
    # the restarted hub's Link rel=hub is its new URL: check the topic
    # and the bodies' signatures; ids at least once and in order
    if [ "$p" = k3 ]; then sec=(--secret "$SECRET"); else sec=(); fi
    check "crash/$p: every acknowledged id delivered at least once, in order (repeats allowed)" \
        cbq check C --path /cb/$p --pairs "$TMP/acks" --at-least-once \
        --allow-extra --topic "$K" --ctype application/xml "${sec[@]}"
    note "$p: $(cbq check C --path /cb/$p --pairs "$TMP/acks" --at-least-once --allow-extra --ignore-signature 2>&1)"
done
note "caught up $(printf '%.1f' "$("$PY" -c "import time; print(time.time() - $T_RESTART)")") s after the restart"

note "after the restart"
for p in k1 k2 k3; do
    check "crash/$p: the subscription survived the crash (active)" \
        cbs sub-state --http "${HUB_HTTP[A]}" --name burst --callback "$(cb_url C /cb/$p)" \
        --want active --timeout 5
done
check "crash/5 more published after the restart" \
    cbs publish --http "${HUB_HTTP[A]}" --topic "$K" --out "$TMP/after" \
    --dir "$TMP/docs" --start 1000 --count 5
for p in k1 k2 k3; do
    cbq wait C --path /cb/$p --method POST --with-id "$(tail -n 1 "$TMP/after" | cut -d' ' -f1)" \
        --answered 204 --timeout 15 >/dev/null
    # the tail after the restart: strictly once each, the new ones
    # byte-identical with the restarted hub's Link rel=hub
    if [ "$p" = k3 ]; then sec=(--secret "$SECRET"); else sec=(); fi
    check "crash/$p: the new publishes delivered once each, in order, after the rest" \
        cbq check C --path /cb/$p --pairs "$TMP/acks" --pairs "$TMP/after" \
        --at-least-once --allow-extra --topic "$K" --ctype application/xml "${sec[@]}"
    check "crash/$p: no repeat of the new publishes" \
        bash -c "for id in \$(cut -d' ' -f1 '$TMP/after'); do
                     c=\$('$PY' '$CBS' count --log '${CB_LOG[C]}' --path /cb/$p --method POST --with-id \$id --answered 204)
                     [ \"\$c\" = 1 ] || { echo \"\$id delivered \$c times\"; exit 1; }
                 done"
done

note "SIGTERM"
hub_stop A TERM 10
expect_eq "sigterm/rshub exits 0" "$HUB_RC" 0
hub_asan_check A
finish
