#!/usr/bin/env bash
# test_websub_delivery.sh - rshub's WebSub content distribution when
# subscribers misbehave (docs/protocol.md 5 "Content distribution"), on
# loopback with a real redis-server and programmable callback servers:
# 500 three times then 200 gets everything in order after backed-off
# retries; 410 removes the subscription; a lease expires on time; a
# stalling, a failing and a slow subscriber do not delay a healthy one, nor
# do a dozen stalling ones on its callback host;
# after --retry-window a failing subscription is marked failing, and with
# --drop-failing removed; a subscription the backlog was trimmed past is
# told with X-Hub-Gap on its next delivery; /metrics counts verifications,
# deliveries, retries, failures and gaps.
# Needs RS_BUILD_DIR (ctest sets it); stops only the processes it started.
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/websub.sh
. "$(dirname "$0")/lib/websub.sh"

U=http://example.com/dataset1

redis_start || { bad "redis-server starts"; finish; }
websub_skip_if_unimplemented

cb_start C --route /cb/r:post=fail:3 --route /cb/g:post=gone \
    --route /cb/st:post=stall:30 --route /cb/f:post=status:500 \
    --route /cb/slow:post=slow:0.5 --route /cb/d:post=status:503 \
    --route /cb/rst:post=reset:2 --route /cb/302:post=fail:2:302:/cb/elsewhere ||
    { bad "callback server starts"; finish; }

cat >"$TMP/a.conf" <<EOF
[topic retry]
uri = $U/retry

[topic gone]
uri = $U/gone

[topic lease]
uri = $U/lease

[topic iso]
uri = $U/iso

[topic many]
uri = $U/many

[topic odd]
uri = $U/odd

[topic crowd]
uri = $U/crowd

[topic behind]
uri = $U/behind
backlog-max = 3
EOF
cat >"$TMP/b.conf" <<EOF
[topic drop]
uri = $U/drop
EOF
# A: failing after 5 s of failures, kept; B (its own key prefix on the
# same Redis): after 3 s, dropped.
hub_start A --config "$TMP/a.conf" "${WS_HUB_ARGS[@]}" --retry-window 5s ||
    { bad "rshub A starts with the WebSub options"; finish; }
hub_start B --config "$TMP/b.conf" "${WS_HUB_ARGS[@]}" --retry-window 3s \
    --drop-failing --redis-prefix rshubB: ||
    { bad "rshub B starts with --drop-failing"; finish; }
HA=${HUB_HTTP[A]}
HUB=http://127.0.0.1:$HA/hub

# shellcheck disable=SC2317 # called through check
pub() {   # pub HUB OUT TOPIC [publish args]: 'ID FILE TIME' lines to OUT
    local hub=$1 out=$2 topic=$3
    shift 3
    cbs publish --http "${HUB_HTTP[$hub]}" --topic "$topic" --out "$out" \
        --dir "$TMP/docs" "$@"
}
# attempts_all_of NAME PATH ID MIN: at least MIN POSTs on PATH, each with
# X-Hub-Id ID (the head of the queue is retried, never skipped)
attempts_all_of() {
    local name=$1 path=$2 id=$3 min=$4 ids
    cbq wait C --path "$path" --method POST --n "$min" --timeout 15 >/dev/null
    ids=$(cbq ids C --path "$path" --method POST | cut -d' ' -f1 | sort -u)
    local n
    n=$(cbq count C --path "$path" --method POST)
    if [ "$n" -ge "$min" ] && [ "$ids" = "$id" ]; then
        ok "$name ($n attempts)"
    else
        bad "$name: $n attempts, ids '${ids//$'\n'/ }', want >= $min attempts all of $id"
    fi
}

# cbs_each N ARGS...: `callback_server.py ARGS` for each I in 1..N with
# {i} in ARGS replaced by I, in one Python process (one process each, for
# 40 subscriptions, costs a Python start and a parse of the whole,
# by then large, callback log each); several commands for each I
# separated by ::, run in turn; stops at the first that fails (its status).
# shellcheck disable=SC2317 # called through check
cbs_each() {
    "$PY" -c '
import importlib.util, sys
path, n = sys.argv[1], int(sys.argv[2])
spec = importlib.util.spec_from_file_location("callback_server", path)
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
cmds, cur = [], []
for x in sys.argv[3:]:
    if x == "::":
        cmds.append(cur)
        cur = []
    else:
        cur.append(x)
cmds.append(cur)
for i in range(1, n + 1):
    for c in cmds:
        sys.argv = [path] + [x.replace("{i}", str(i)) for x in c]
        try:
            m.main()
        except SystemExit as e:
            if e.code not in (None, 0):
                sys.exit(e.code)
        sys.stdout.flush()
' "$CBS" "$@"
}
# ws_sub_each N HUB TOPIC CBNAME PATH: subscribe PATH ({i} = 1..N) of
# CBNAME to TOPIC at HUB, one after the other, each as ws_sub does (the
# form POST of `callback_server.py form`), in one Python process; prints
# "PATH STATUS" of each answer that is not 202.
ws_sub_each() {
    "$PY" -c '
import importlib.util, sys, urllib.parse
path, n, port, topic, cb = sys.argv[1:6]
spec = importlib.util.spec_from_file_location("callback_server", path)
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
for i in range(1, int(n) + 1):
    c = cb.replace("{i}", str(i))
    body = urllib.parse.urlencode([("hub.mode", "subscribe"),
                                   ("hub.topic", topic),
                                   ("hub.callback", c)]).encode()
    try:
        st = m.request(int(port), "POST", "/hub", body, {"Content-Type":
                       "application/x-www-form-urlencoded"}, 10.0)[0]
    except Exception as e:
        st = "000 (%s)" % e
    if st != 202:
        print(c, st)
' "$CBS" "$1" "${HUB_HTTP[$2]}" "$3" "$(cb_url "$4" "$5")"
}

# ------------------------------------------------------------- subscribe
note "subscriptions"
# the lease runs from the verification: publish right after it
r=$(ws_sub A "$U/lease" "$(cb_url C /cb/l)" hub.lease_seconds=2)
expect_eq "lease/subscribe with hub.lease_seconds=2: 202" "$(status_of "$r")" 202
check "lease/verified" \
    cbq wait C --path /cb/l --method GET --answered 200 --timeout 10
LEASE_T=$(date +%s.%N)
sleep 0.2
check "lease/1 published while the lease runs" pub A "$TMP/lease.pairs" "$U/lease" --start 100
check "lease/verification GET carries hub.lease_seconds=2" \
    cbq last-get C --path /cb/l --has-arg hub.lease_seconds=2
# /cb/l2: the same 2 s lease, renewed by a re-subscribe for 600 s
r=$(ws_sub A "$U/lease" "$(cb_url C /cb/l2)" hub.lease_seconds=2)
expect_eq "lease/renew: subscribe with a 2 s lease: 202" "$(status_of "$r")" 202
check "lease/renew: verified" \
    cbq wait C --path /cb/l2 --method GET --answered 200 --timeout 10
r=$(ws_sub A "$U/lease" "$(cb_url C /cb/l2)" hub.lease_seconds=600)
expect_eq "lease/renew: re-subscribe with 600 s: 202" "$(status_of "$r")" 202
check "lease/renew: verified again, hub.lease_seconds=600" \
    bash -c "'$PY' '$CBS' wait --log '${CB_LOG[C]}' --path /cb/l2 --method GET --answered 200 --n 2 --timeout 10 >/dev/null &&
             '$PY' '$CBS' last-get --log '${CB_LOG[C]}' --path /cb/l2 --has-arg hub.lease_seconds=600 >/dev/null"
ws_subscribe_ok "retry/subscribe (500 three times, then 204)" A "$U/retry" retry C /cb/r
ws_subscribe_ok "gone/subscribe (410)" A "$U/gone" gone C /cb/g
ws_subscribe_ok "odd/subscribe (connection reset twice)" A "$U/odd" odd C /cb/rst
ws_subscribe_ok "odd/subscribe (302 twice)" A "$U/odd" odd C /cb/302
for p in h st f slow; do
    ws_subscribe_ok "isolation/subscribe /cb/$p" A "$U/iso" iso C /cb/$p
done
ws_subscribe_ok "drop/subscribe on the --drop-failing hub (503)" B "$U/drop" drop C /cb/d

# ------------------------------------------------------------ publishing
note "publishing"
check "retry/5 published" pub A "$TMP/retry.pairs" "$U/retry" --start 200 --count 5
check "gone/1 published" pub A "$TMP/gone.pairs" "$U/gone" --start 300
check "odd/3 published" pub A "$TMP/odd.pairs" "$U/odd" --start 350 --count 3
check "drop/1 published" pub B "$TMP/drop.pairs" "$U/drop" --start 400
check "isolation/10 published, 0.3 s apart" \
    pub A "$TMP/iso.pairs" "$U/iso" --start 500 --count 10 --interval 0.3

# -------------------------------------------------------------- isolation
note "a stalling, a failing and a slow subscriber beside a healthy one"
cbq wait C --path /cb/h --method POST --n 10 --timeout 10 >/dev/null
check "isolation/healthy: every notification within 1.5 s of its 202" \
    cbq latency C --path /cb/h --pairs "$TMP/iso.pairs" --max 1.5
check "isolation/healthy: each once, in order, byte-identical, headers" \
    cbq check C --path /cb/h --pairs "$TMP/iso.pairs" --hub "$HUB" \
    --topic "$U/iso" --ctype application/xml --max-attempts 10
ISO1=$(head -n 1 "$TMP/iso.pairs" | cut -d' ' -f1)
attempts_all_of "isolation/stalling: timed out (--delivery-timeout 2s) and retried, first id only" \
    /cb/st "$ISO1" 2
attempts_all_of "isolation/failing (500): retried, first id only" /cb/f "$ISO1" 3
cbq wait C --path /cb/slow --method POST --n 10 --timeout 15 >/dev/null
check "isolation/slow (0.5 s, within the timeout): each once, in order, no retry" \
    cbq check C --path /cb/slow --pairs "$TMP/iso.pairs" --hub "$HUB" \
    --topic "$U/iso" --ctype application/xml --max-attempts 10

# ------------------------------------------------------------------ retry
note "500 three times, then 204"
cbq wait C --path /cb/r --method POST --answered 204 --n 5 --timeout 20 >/dev/null
check "retry/every notification delivered, in order, no gap: ids = the acknowledged ids" \
    cbq check C --path /cb/r --pairs "$TMP/retry.pairs" --hub "$HUB" \
    --topic "$U/retry" --ctype application/xml --max-attempts 8
R1=$(head -n 1 "$TMP/retry.pairs" | cut -d' ' -f1)
check "retry/the three failures and the success are all of the first id" \
    bash -c "[ \"\$('$PY' '$CBS' ids --log '${CB_LOG[C]}' --path /cb/r --method POST | head -n 4 | tr '\n' ' ')\" = '$R1 500 $R1 500 $R1 500 $R1 204 ' ]"
GAPS=$(cbq gaps C --path /cb/r --method POST --with-id "$R1")
check "retry/backed off: 1 s (+-20 %, capped by --retry-max-delay 1s) between attempts ($GAPS)" \
    "$PY" -c "import sys; g=[float(x) for x in sys.argv[1].split()]; sys.exit(0 if len(g)==3 and all(0.75<=x<=2.5 for x in g) else 1)" "$GAPS"

note "a connection reset, a redirect: failures like any other"
for p in /cb/rst /cb/302; do
    cbq wait C --path $p --method POST --answered 204 --n 3 --timeout 15 >/dev/null
    check "odd/$p: retried, then each once, in order, byte-identical" \
        cbq check C --path $p --pairs "$TMP/odd.pairs" --hub "$HUB" \
        --topic "$U/odd" --ctype application/xml --max-attempts 5
done
expect_eq "odd/the hub did not follow the callback's redirect" \
    "$(cbq count C --path /cb/elsewhere)" 0

# -------------------------------------------------------------------- 410
note "410 Gone"
check "gone/the notification was POSTed, answered 410" \
    cbq wait C --path /cb/g --method POST --answered 410 --timeout 10
check "gone/the subscription is removed (GET /topics)" \
    cbs sub-state --http "$HA" --name gone --callback "$(cb_url C /cb/g)" \
    --want none --timeout 5
check "gone/2 more published" pub A "$TMP/gone.pairs" "$U/gone" --start 301 --count 2
check "gone/no request after the 410" cbq quiet C --path /cb/g --secs 2
expect_eq "gone/exactly one POST in all" "$(cbq count C --path /cb/g --method POST)" 1

# ------------------------------------------------------------------ lease
note "lease expiry"
check "lease/delivered while the lease ran" \
    cbq check C --path /cb/l --pairs "$TMP/lease.pairs" --hub "$HUB" \
    --topic "$U/lease" --ctype application/xml
now=$(date +%s.%N)
sleep "$("$PY" -c "print(max(0.0, $LEASE_T + 3.0 - $now))")"
# on time: a second past the lease nothing more is delivered; the removal
# itself is the lease sweep's (bounded here by 10 s)
check "lease/1 published a second after expiry" pub A "$TMP/lease2.pairs" "$U/lease" --start 101
check "lease/no delivery after expiry" cbq quiet C --path /cb/l --method POST --secs 2
check "lease/after expiry: gone from GET /topics" \
    cbs sub-state --http "$HA" --name lease --callback "$(cb_url C /cb/l)" \
    --want none --timeout 10
check "lease/after expiry: removed from Redis (rshub:sub:lease, rshub:leases)" \
    bash -c "[ \"\$(redis-cli -s '$REDIS_SOCK' hexists rshub:sub:lease '$(cb_url C /cb/l)')\" = 0 ] &&
             [ -z \"\$(redis-cli -s '$REDIS_SOCK' zscore rshub:leases 'lease $(cb_url C /cb/l)')\" ]"
check "lease/renew: still listed active after the first lease ran out" \
    cbs sub-state --http "$HA" --name lease --callback "$(cb_url C /cb/l2)" --want active
cbq wait C --path /cb/l2 --method POST --n 1 --timeout 5 >/dev/null
check "lease/renew: the renewed subscription got the one published after the first lease" \
    cbq check C --path /cb/l2 --pairs "$TMP/lease2.pairs" \
    --hub "$HUB" --topic "$U/lease" --ctype application/xml

# ---------------------------------------------------- failing, dropped
note "--retry-window, --drop-failing"
check "failing/after --retry-window 5s of failures: state failing in GET /topics" \
    cbs sub-state --http "$HA" --name iso --callback "$(cb_url C /cb/f)" \
    --want failing --timeout 15
check "failing/the healthy subscriber of the same topic still active" \
    cbs sub-state --http "$HA" --name iso --callback "$(cb_url C /cb/h)" --want active
check "drop/with --drop-failing, removed after --retry-window 3s" \
    cbs sub-state --http "${HUB_HTTP[B]}" --name drop --callback "$(cb_url C /cb/d)" \
    --want none --timeout 15
check "drop/no request after the removal" cbq quiet C --path /cb/d --secs 2.5
check "drop/removed from Redis too (rshubB:sub:drop, --redis-prefix rshubB:)" \
    bash -c "[ \"\$(redis-cli -s '$REDIS_SOCK' hexists rshubB:sub:drop '$(cb_url C /cb/d)')\" = 0 ]"

note "unsubscribing a failing subscription stops its retries"
r=$(ws_unsub A "$U/iso" "$(cb_url C /cb/f)")
expect_eq "failing/unsubscribe: 202" "$(status_of "$r")" 202
check "failing/unsubscribe verified" \
    cbq wait C --path /cb/f --method GET --mode unsubscribe --answered 200 --timeout 10
sleep 0.5
check "failing/no retry after the unsubscribe" cbq quiet C --path /cb/f --method POST --secs 3
check "failing/gone from GET /topics" \
    cbs sub-state --http "$HA" --name iso --callback "$(cb_url C /cb/f)" --want none

# --------------------------------------------------------------- fan-out
note "40 subscriptions on one topic"
r=$(ws_sub_each 40 A "$U/many" C "/m/{i}")
[ -z "$r" ] || bad "fanout/subscribe: answers not 202" "$r"
check "fanout/40 verifications answered" \
    cbs_each 40 wait --log "${CB_LOG[C]}" --path "/m/{i}" --method GET --answered 200 --timeout 10
check "fanout/the last one active" \
    cbs sub-state --http "$HA" --name many --callback "$(cb_url C /m/40)" --want active
sleep 0.3
check "fanout/20 published" pub A "$TMP/many.pairs" "$U/many" --start 600 --count 20
check "fanout/each of the 40 got the 20 once, in order, byte-identical" \
    cbs_each 40 wait --log "${CB_LOG[C]}" --path "/m/{i}" --method POST --n 20 --timeout 15 :: \
        check --log "${CB_LOG[C]}" --path "/m/{i}" --pairs "$TMP/many.pairs" \
        --hub "$HUB" --topic "$U/many" --ctype application/xml

# ------------------------------------------------- a crowd on one host
# More stalling subscriptions on the healthy one's callback host than the
# hub opens connections to one host (--delivery-host-conns, default 8):
# "one subscription's retries never delay another's" still holds. Last,
# as the stalls go on until the hub stops.
note "12 stalling subscriptions on the healthy one's host"
for i in $(seq 1 12); do cb_ctl C "/crowd/$i" post=stall:30; done
r=$(ws_sub_each 12 A "$U/crowd" C "/crowd/{i}")
[ -z "$r" ] || bad "crowd/subscribe: answers not 202" "$r"
ws_subscribe_ok "crowd/subscribe the healthy one" A "$U/crowd" crowd C /cb/ch
check "crowd/the 12 stalling ones verified" \
    cbs_each 12 wait --log "${CB_LOG[C]}" --path "/crowd/{i}" --method GET --answered 200 --timeout 10
sleep 0.5
# The crowd's first attempt cannot be known to stall: it may hold the
# host's slots for one --delivery-timeout. After it, the crowd is failing,
# and failing subscriptions never delay a healthy one (docs/protocol.md 5).
check "crowd/a first notification makes the crowd's stalls known" \
    pub A "$TMP/crowd0.pairs" "$U/crowd" --start 690 --count 1
cbq wait C --path /cb/ch --method POST --n 1 --timeout 10 >/dev/null
sleep 2.5
check "crowd/10 published, 0.3 s apart" \
    pub A "$TMP/crowd.pairs" "$U/crowd" --start 700 --count 10 --interval 0.3
cbq wait C --path /cb/ch --method POST --n 11 --timeout 20 >/dev/null
check "crowd/healthy: every notification within 1.5 s of its 202" \
    cbq latency C --path /cb/ch --pairs "$TMP/crowd.pairs" --max 1.5
cat "$TMP/crowd0.pairs" "$TMP/crowd.pairs" >"$TMP/crowd-all.pairs"
check "crowd/healthy: each once, in order" \
    cbq check C --path /cb/ch --pairs "$TMP/crowd-all.pairs" --hub "$HUB" \
    --topic "$U/crowd" --ctype application/xml

# ----------------------------------------------------- behind the backlog
note "a subscription the backlog was trimmed past: X-Hub-Gap"
# Topic behind keeps 3 notifications (trimmed when 64 over); the queue of
# a subscription holds 64. While /cb/bh answers 503, 150 are published:
# the queue fills, the subscription lags, the backlog is trimmed past it.
ws_subscribe_ok "behind/subscribe" A "$U/behind" behind C /cb/bh
cb_ctl C /cb/bh post=status:503
check "behind/150 published while its callback answers 503" \
    pub A "$TMP/bh.pairs" "$U/behind" --start 700 --count 150
cbq wait C --path /cb/bh --method POST --n 3 --timeout 15 >/dev/null
cb_ctl C /cb/bh post=ok
LAST_BH=$(tail -n 1 "$TMP/bh.pairs" | cut -d' ' -f1)
check "behind/deliveries resume up to the last one published" \
    cbq wait C --path /cb/bh --method POST --answered 204 --with-id "$LAST_BH" \
    --timeout 30
# The first delivery past the 64 queued ones says X-Hub-Gap: the id of
# the 64th; that delivery is the first one with a later id, and no other
# one says it (the hub stops once one was answered 2xx).
check "behind/X-Hub-Gap on the first delivery after the trimmed span, on no other" \
    "$PY" - "${CB_LOG[C]}" "$TMP/bh.pairs" <<'PYEOF'
import json, sys
ids = [l.split()[0] for l in open(sys.argv[2])]
key = lambda i: tuple(int(x) for x in i.split("-"))
def hdr(r, n):
    return next((v for k, v in r["headers"] if k.lower() == n.lower()), None)
posts = [r for r in map(json.loads, open(sys.argv[1]))
         if r["method"] == "POST" and r["path"] == "/cb/bh"
         and 200 <= r.get("answered", 0) < 300]
gaps = [(hdr(r, "X-Hub-Id"), hdr(r, "X-Hub-Gap")) for r in posts
        if hdr(r, "X-Hub-Gap") is not None]
first_after = next(hdr(r, "X-Hub-Id") for r in posts
                   if key(hdr(r, "X-Hub-Id")) > key(ids[63]))
want = [(first_after, ids[63])]
if gaps != want:
    sys.exit("X-Hub-Gap seen %r, want %r" % (gaps, want))
got = [hdr(r, "X-Hub-Id") for r in posts]
if got[:64] != ids[:64]:
    sys.exit("the 64 queued ones were not delivered first, in order")
if any(key(a) >= key(b) for a, b in zip(got, got[1:])):
    sys.exit("deliveries out of order")
PYEOF
check "behind/the hub counts the gap (rshub_websub_gaps_total 1)" \
    test "$(ht metrics --http "$HA" --get rshub_websub_gaps_total)" = 1

# ---------------------------------------------------------------- metrics
note "/metrics"
cbs websub-metrics --http "$HA" >"$TMP/metrics.out" 2>&1
note "websub series: $(tr '\n' ' ' <"$TMP/metrics.out" | cut -c1-900)"
metric() {   # metric NAME REGEX MIN: series matching REGEX sum to >= MIN
    local name=$1 re=$2 min=$3 v
    v=$(grep -E "$re" "$TMP/metrics.out" | awk '{s+=$NF} END {print s+0}')
    if grep -Eq "$re" "$TMP/metrics.out" && "$PY" -c "import sys; sys.exit(0 if $v >= $min else 1)"; then
        ok "metrics/$name ($v)"
    else
        bad "metrics/$name: no series matching /$re/ with a value >= $min (sum $v)" \
            "$(cat "$TMP/metrics.out")"
    fi
}
metric "verifications" '^[a-z_]*verif[a-z_]*_total' 7
metric "deliveries" '^[a-z_]*deliver[a-z_]*_total' 26
# rshub counts failed attempts (each one retried) rather than retries
metric "retries (500s, stalls): a retries series or failed delivery attempts" \
    '^[a-z_]*(retr[a-z_]*|deliver[a-z_]*fail[a-z_]*)_total' 5
metric "failures" '^[a-z_]*fail[a-z_]*_total' 5

# ------------------------------------------------------------------ stop
note "SIGTERM"
hub_stop A TERM 10
expect_eq "sigterm/rshub A exits 0 (a delivery stalled in flight)" "$HUB_RC" 0
hub_asan_check A
hub_stop B TERM 10
expect_eq "sigterm/rshub B exits 0" "$HUB_RC" 0
hub_asan_check B
finish
