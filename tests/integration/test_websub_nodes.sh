#!/usr/bin/env bash
# test_websub_nodes.sh - two rshub nodes on one Redis act as one WebSub hub
# (docs/protocol.md 5, 7: rshub:lock:NAME names the one node that delivers
# a topic): subscriptions made on either node, notifications published on
# either, each subscriber gets every notification exactly once, in order;
# when a node is killed (kill -9) the other delivers what follows, at least
# once, in order. Real redis-server and callback servers on loopback.
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/websub.sh
. "$(dirname "$0")/lib/websub.sh"

U=http://example.com/dataset1
T=$U/shared

redis_start || { bad "redis-server starts"; finish; }
websub_skip_if_unimplemented

cb_start C || { bad "callback server starts"; finish; }
cat >"$TMP/hub.conf" <<EOF
[topic shared]
uri = $T
EOF
hub_start A --config "$TMP/hub.conf" "${WS_HUB_ARGS[@]}" ||
    { bad "rshub A starts"; finish; }
hub_start B --config "$TMP/hub.conf" "${WS_HUB_ARGS[@]}" ||
    { bad "rshub B starts"; finish; }

note "subscriptions on either node"
ws_subscribe_ok "nodes/subscribe n1 on A" A "$T" shared C /cb/n1
ws_subscribe_ok "nodes/subscribe n2 on B" B "$T" shared C /cb/n2 hub.secret=node-b

note "publishing on both nodes"
bg pa "$PY" "$CBS" publish --http "${HUB_HTTP[A]}" --topic "$T" --count 50 \
    --start 0 --interval 0.01 --dir "$TMP/docs" --out "$TMP/a.pairs"
bg pb "$PY" "$CBS" publish --http "${HUB_HTTP[B]}" --topic "$T" --count 50 \
    --start 100 --interval 0.01 --dir "$TMP/docs" --out "$TMP/b.pairs"
bg_wait pa 30 && bg_wait pb 30
expect_eq "nodes/100 acknowledged" "$(cat "$TMP/a.pairs" "$TMP/b.pairs" | wc -l)" 100
for p in n1 n2; do
    cbq wait C --path /cb/$p --method POST --n 100 --timeout 20 >/dev/null
done
sleep 0.5
check "nodes/n1: each of the 100 exactly once, in order, byte-identical (one node delivers)" \
    cbq check C --path /cb/n1 --pairs "$TMP/a.pairs" --pairs "$TMP/b.pairs" \
    --topic "$T" --ctype application/xml
check "nodes/n2: the same, signed" \
    cbq check C --path /cb/n2 --pairs "$TMP/a.pairs" --pairs "$TMP/b.pairs" \
    --topic "$T" --ctype application/xml --secret node-b
check "nodes/rshub:lock:shared is held" \
    bash -c "[ -n \"\$(redis-cli -s '$REDIS_SOCK' get rshub:lock:shared)\" ]"

note "kill -9 of node A, publishing on B"
hub_kill9 A
hub_asan_check A
check "nodes/30 published on B" \
    "$PY" "$CBS" publish --http "${HUB_HTTP[B]}" --topic "$T" --count 30 \
    --start 200 --dir "$TMP/docs" --out "$TMP/c.pairs"
LAST=$(tail -n 1 "$TMP/c.pairs" | cut -d' ' -f1)
for p in n1 n2; do
    cbq wait C --path /cb/$p --method POST --with-id "$LAST" --answered 204 \
        --timeout 40 >/dev/null
done
check "nodes/n1: after the kill, everything at least once, in order" \
    cbq check C --path /cb/n1 --pairs "$TMP/a.pairs" --pairs "$TMP/b.pairs" \
    --pairs "$TMP/c.pairs" --at-least-once --topic "$T" --ctype application/xml
check "nodes/n2: after the kill, everything at least once, in order" \
    cbq check C --path /cb/n2 --pairs "$TMP/a.pairs" --pairs "$TMP/b.pairs" \
    --pairs "$TMP/c.pairs" --at-least-once --topic "$T" --ctype application/xml \
    --secret node-b

note "SIGTERM"
hub_stop B TERM 10
expect_eq "sigterm/rshub B exits 0" "$HUB_RC" 0
hub_asan_check B
finish
