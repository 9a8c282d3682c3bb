#!/usr/bin/env bash
# test_bridge_load.sh - the load a bridged Source carries (issue 14):
# twenty mirrors (`rssub run --source PUBLIC/s/NAME/ --mirror DIR`, as a
# user runs them) behind one rsbridge following one pull-only Source
# (lib/bridge_source.py, shape A: a Change List Index) while it changes
# at random. The Source's access log, split by User-Agent, shows one
# poller (the bridge: each document at most once per --interval), each
# mirror's own start-up reads, and then only resource fetches (each
# changed resource about once per mirror): no mirror polls the Source.
# All twenty converge. Skips (exit 0) while bridge/rsbridge is not built.
# shellcheck disable=SC2317 # helpers run through check/wait_until
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"
# shellcheck source=lib/bridge.sh
. "$(dirname "$0")/lib/bridge.sh"
bridge_require

INTERVAL=1
N=${RS_BRIDGE_MIRRORS:-20}
now() { date +%s.%N; }

note "hub, one Source, rsbridge"
redis_start || exit 1
hub_start h --open || exit 1
# no rotation and no new Resource List while measured: no framework
# notification asks the mirrors to read the Change Lists again
bsrc_start a A --seed 707 --initial 40 --rotate 1000 --rl-parts 2 ||
    { bad "the Source starts"; bridge_finish; }
bridge_start br --source "$(bsrc_url a)" --interval "${INTERVAL}s" ||
    { bad "rsbridge starts"; bridge_finish; }
U=$(bridged br a)

note "$N mirrors start"
TA=$(now)
for i in $(seq 1 "$N"); do mirror_start "m$i" "$U" "$TMP/m$i.mirror"; done
all_following() {
    local i
    for i in $(seq 1 "$N"); do mirror_following "m$i" || return 1; done
}
all_same() {
    local i
    for i in $(seq 1 "$N"); do mirror_same a "$TMP/m$i.mirror" || return 1; done
}
check "$N mirrors follow the hub's channel" wait_until 90 all_following
check "$N mirrors hold the Source" wait_until 60 all_same
sleep 1
TB=$(now)

note "random changes at the Source"
bs a auto '{"batches":10,"every":1.0,"min":1,"max":3}'
bs a wait-auto 60 || bad "the changes were made"
check "$N mirrors converge" wait_until 60 all_same
sleep 2
TC=$(now)

STARTUP=$(bsx load a --t0 "$TA" --t1 "$TB")
STEADY=$(bsx load a --t0 "$TB" --t1 "$TC")
FETCHABLE=$(bs a journal | "$PY" -c 'import json,sys; print(sum(1 for e in json.load(sys.stdin) if e["change"] != "deleted"))')
echo "     start-up ($N mirrors): $STARTUP"
echo "     changes ($FETCHABLE to fetch): $STEADY"
load_ok() {
    "$PY" - "$STARTUP" "$STEADY" "$N" "$FETCHABLE" "$TB" "$TC" "$INTERVAL" <<'EOF'
import json, sys
up, st = json.loads(sys.argv[1]), json.loads(sys.argv[2])
n, fetchable = int(sys.argv[3]), int(sys.argv[4])
secs, interval = float(sys.argv[6]) - float(sys.argv[5]), float(sys.argv[7])
bad = []
# one poller: each document at most once an interval
polls = secs / interval + 1
for p, k in st["bridge_paths"].items():
    if k > polls:
        bad.append("the bridge read %s %d times in %.1f s" % (p, k, secs))
# no mirror reads the Source's documents once it follows the bridge
if st["sub_docs"]:
    bad.append("the mirrors read the Source's documents %d times while "
               "following push: %r" % (st["sub_docs"], st["sub_paths"]))
# each changed resource fetched about once per mirror (retries aside)
if st["sub_res"] > n * fetchable * 1.2 + n:
    bad.append("%d resource fetches for %d changes and %d mirrors"
               % (st["sub_res"], fetchable, n))
if st["sub_res"] < fetchable:
    bad.append("only %d resource fetches for %d changes" % (st["sub_res"], fetchable))
# start-up: each mirror reads the documents a baseline needs, a few each
docs = len(up["sub_paths"])
if up["sub_docs"] > n * docs * 2:
    bad.append("start-up: %d document reads by %d mirrors (%d documents)"
               % (up["sub_docs"], n, docs))
print("bridge: %d document requests in %.1f s (%.0f a minute); mirrors: "
      "%d at start-up, %d after, %d resource fetches"
      % (st["bridge_docs"], secs, st["bridge_docs"] * 60 / secs,
         up["sub_docs"], st["sub_docs"], st["sub_res"]))
if bad:
    sys.exit("; ".join(bad))
EOF
}
check "the Source sees one poller, not $N" load_ok
check "one request in flight, --interval the floor" \
    bsx politeness a --interval "$INTERVAL" --t0 "$TA"
for i in $(seq 1 "$N"); do sub_stop "m$i"; done
bridge_finish
