#!/usr/bin/env bash
# test_bridge.sh - rsbridge end to end (issue 14), real processes on
# loopback: redis-server, rshub, one rsbridge following three pull-only
# Sources (lib/bridge_source.py) of the three shapes: A a Change List
# Index over Change Lists (closed archives and an open one), B a
# trailing-window Change List regenerated per request and paged with
# ?page=N, C a Resource List only (rel="next" pages). For each shape in
# turn, three mirrors run exactly as a user runs them (`rssub run
# --source PUBLIC/s/NAME/ --mirror DIR`) while the Source makes seeded
# random creates, updates and deletes: the mirrors converge and audit
# clean; each change lands in every mirror within --interval + 1 s of the
# Source's documents showing it (measured); a WebSocket recorder on each
# Source's channels shows every change published once, in the Source's
# order, with its original URI, datetime, hashes, length and type. Also:
# the ready-file, GET /sources, GET /healthz, the bridged documents
# (rsdoc validate --strict, the original entries, the hub's channels),
# the topics registered before any change, framework notifications, the
# User-Agent, and the bridge's politeness (one request in flight,
# --interval as the floor) in the Sources' access logs.
# Skips (exit 0) while bridge/rsbridge is not built.
# shellcheck disable=SC2317 # helpers run through check/wait_until
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"
# shellcheck source=lib/bridge.sh
. "$(dirname "$0")/lib/bridge.sh"
bridge_require

INTERVAL=1                  # rsbridge --interval, seconds
BOUND=$((INTERVAL + 1))     # the issue's bound on a change's latency
CONTACT=mailto:bridge-test@example.org

note "hub, three Sources, rsbridge"
redis_start || exit 1
hub_start h --open || exit 1
HUB=http://127.0.0.1:${HUB_HTTP[h]}/hub
if ! { bsrc_start a A --seed 101 --initial 30 --rotate 15 --rl-parts 2 &&
       bsrc_start b B --seed 202 --initial 30 --page-size 6 &&
       bsrc_start c C --seed 303 --initial 30 --rl-pages 3; }; then
    bad "the three Sources start"
    bridge_finish
fi
T_START=$(date +%s.%N)
if bridge_start br --source "$(bsrc_url a)" --source "$(bsrc_url b)" \
        --source "$(bsrc_url c)" --interval "${INTERVAL}s" --contact "$CONTACT"; then
    ok "rsbridge starts and writes its ready-file"
else
    bad "rsbridge starts and writes its ready-file"
    bridge_finish
fi
expect_eq "the ready-file is {\"http\":PORT} (no metrics port without --metrics-listen)" \
    "$(tr -d ' \n' <"$TMP/br.bridge.ready")" "{\"http\":${BR_HTTP[br]}}"
expect_eq "GET /healthz" "$(curl -sf --max-time 10 "$(bridge_url br healthz)")" ok

# GET /sources: one object per Source, the fields of the design, each
# Source read once already (the ready-file says so), nothing published.
sources_ok() {
    curl -sf --max-time 10 "$(bridge_url br sources)" | "$PY" -c '
import json, re, sys
pub, want = sys.argv[1], sys.argv[2:]
arr = json.load(sys.stdin)
dt = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
bad = []
if not isinstance(arr, list) or len(arr) != len(want):
    sys.exit("not an array of %d objects: %r" % (len(want), arr))
by = {s.get("name"): s for s in arr}
for url in want:
    name = "127.0.0.1_" + url.split(":")[2].strip("/")
    s = by.get(name)
    if s is None:
        bad.append("no Source named %s" % name)
        continue
    b = "%s/s/%s/" % (pub, name)
    for k, v in (("source", url), ("url", b), ("topic", b + "changes"),
                 ("framework_topic", b + "framework"), ("changes_published", 0),
                 ("pending", 0), ("errors", 0), ("last_error", None),
                 ("last_change", None)):
        if s.get(k, "absent") != v:
            bad.append("%s: %s is %r, want %r" % (name, k, s.get(k, "absent"), v))
    for k in ("state", "last_poll"):
        if not isinstance(s.get(k), str):
            bad.append("%s: %s is %r" % (name, k, s.get(k)))
    if isinstance(s.get("last_poll"), str) and not dt.match(s["last_poll"]):
        bad.append("%s: last_poll %r is not a W3C datetime" % (name, s["last_poll"]))
    if not isinstance(s.get("framework_published"), int):
        bad.append("%s: framework_published is %r" % (name, s.get("framework_published")))
if bad:
    sys.exit("; ".join(bad))
print("ok")' "http://127.0.0.1:${BR_HTTP[br]}" "$(bsrc_url a)" "$(bsrc_url b)" "$(bsrc_url c)"
}
check "GET /sources: every field of each Source, read once, nothing published" sources_ok

note "the bridged documents"
for s in a b c; do
    U=$(bridged br $s)
    check "$s: the bridged Source Description and Capability List carry the original entries and the hub's channels" \
        bsx check-bridged $s --bridged "$U" --hub "$HUB" --ws "${HUB_WS[h]}"
    check "$s: the bridged documents validate (rsdoc --strict)" "$RSDOC" validate --strict \
        "$U" "${U}.well-known/resourcesync" "${U}capabilitylist/0.xml"
    CH=$(channel_of br $s change-notification)
    expect_eq "$s: the change topic is registered with the hub before any change" \
        "$(ht topic --http "${HUB_HTTP[h]}" --name "$CH" --get topic 2>&1)" "${U}changes"
    FW=$(channel_of br $s framework-notification)
    expect_eq "$s: so is the framework topic" \
        "$(ht topic --http "${HUB_HTTP[h]}" --name "$FW" --get topic 2>&1)" "${U}framework"
    record "r$s" br $s change || bad "$s: a recorder on the change channel"
    record "f$s" br $s framework || bad "$s: a recorder on the framework channel"
done

# ---------------------------------------------------------------- shapes

# all_same SOURCE N: the N mirrors of SOURCE hold the Source.
all_same() {
    local i
    for i in $(seq 1 "$2"); do mirror_same "$1" "$TMP/$1$i.mirror" || return 1; done
}

# latency_ok FILE: every change of the journal landed in every mirror
# (superseded ones count when a later state landed), none later than
# BOUND seconds after the documents showed it. Prints the figures.
latency_ok() {
    "$PY" - "$1" "$2" "$3" "$BOUND" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
n, mirrors, bound = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
print("latency: %d landings, p50 %s s, p95 %s s, max %s s (bound %s s)"
      % (r["n"], r.get("p50"), r.get("p95"), r.get("max"), bound))
miss = sum(m["n_missing"] for m in r["mirrors"].values())
if miss or r["n"] != n * mirrors:
    sys.exit("%d landings, want %d; missing %s" % (r["n"], n * mirrors,
             [m["missing"] for m in r["mirrors"].values()]))
if r["n"] and r["max"] > bound:
    sys.exit("slowest landing %.3f s, over the bound" % r["max"])
EOF
}

# shape SOURCE AUTO-JSON MODE: the phase of one Source (see the header).
shape() {
    local s=$1 churn=$2 mode=$3 i u n lat
    u=$(bridged br "$s")
    note "shape of Source $s: three mirrors, random changes ($churn)"
    for i in 1 2 3; do mirror_start "$s$i" "$u" "$TMP/$s$i.mirror"; done
    for i in 1 2 3; do
        check "$s: mirror $i follows the hub's WebSocket channel" \
            wait_until 40 mirror_following "$s$i"
    done
    check "$s: the three mirrors hold the Source" wait_until 40 all_same "$s" 3
    rm -f "$TMP/$s.watch.stop"
    bg "lat-$s" "$PY" "$BSRC_PY" watch --port "${BSRC_PORT[$s]}" \
        --mirror "$TMP/${s}1.mirror" --mirror "$TMP/${s}2.mirror" \
        --mirror "$TMP/${s}3.mirror" --stop "$TMP/$s.watch.stop" \
        --timeout 150 --out "$TMP/$s.lat.json" >/dev/null
    bs "$s" auto "$churn"
    bs "$s" wait-auto 120 || bad "$s: the changes were made"
    n=$(bs "$s" count-journal)
    note "$s: $n changes made"
    check "$s: the three mirrors converge on the Source" wait_until 40 all_same "$s" 3
    touch "$TMP/$s.watch.stop"
    bg_wait "lat-$s" 60 || bad "$s: the latency watcher ended"
    if lat=$(latency_ok "$TMP/$s.lat.json" "$n" 3 2>&1); then
        ok "$s: each change in every mirror within --interval + 1 s"
    else
        bad "$s: each change in every mirror within --interval + 1 s" "$lat"
    fi
    printf '%s\n' "$lat" | head -n 1 | sed 's/^/     /'
    check "$s: the outbox is empty" wait_until 20 bridge_idle br "$s"
    check "$s: the recorded stream is every change, once, in order ($mode)" \
        wait_until 20 bsx check-stream "$s" --sub "$TMP/r$s.rec.jsonl" \
        --bridged "$u" --mode "$mode"
    if [ "$mode" = exact ]; then
        expect_eq "$s: /sources counts the changes published" \
            "$(sources_field br "$s" changes_published)" "$n"
    fi
    expect_eq "$s: /sources counts no error" "$(sources_field br "$s" errors)" 0
    check "$s: /sources has a last_change" \
        bash -c "[ \"\$1\" != null ]" _ "$(sources_field br "$s" last_change)"
    for i in 1 2 3; do
        sub_stop "$s$i"
        expect_eq "$s: mirror $i exits 0 on SIGTERM" "$SUB_RC" 0
        check "$s: mirror $i audits clean" mirror_audit "$s$i" "$u" "$TMP/$s$i.mirror"
    done
}

shape a '{"batches":12,"every":1.0,"min":1,"max":4}' exact
shape b '{"batches":12,"every":1.0,"min":1,"max":4}' exact
shape c '{"batches":8,"every":2.0,"min":1,"max":4}' gens

note "framework notifications"
# fw_has RECORDER PYTHON-EXPR: a framework notification's entry (e: loc,
# capability, change) satisfies the expression.
fw_has() {
    "$PY" - "$TMP/$1.rec.jsonl" "$2" <<'EOF'
import json, sys, xml.etree.ElementTree as ET
SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
RS = "{http://www.openarchives.org/rs/terms/}"
seen = []
for line in open(sys.argv[1]):
    ev = json.loads(line)
    if ev.get("ev") != "msg":
        continue
    root = ET.fromstring(ev["data"].encode())
    md = root.find(RS + "md")
    assert md is not None and md.get("capability") == "framework-notification", md
    for u in root.findall(SM + "url"):
        e = dict(u.find(RS + "md").attrib)
        e["loc"] = u.findtext(SM + "loc")
        seen.append(e)
        if eval(sys.argv[2]):
            sys.exit(0)
sys.exit("no such entry among %r" % seen[:10])
EOF
}
check "a: a new Change List in the index: a framework notification names it" \
    fw_has fa 'e["loc"].endswith("/changelist-2.xml") and e.get("capability") == "changelist"'
check "c: a regenerated Resource List: framework notification (resourcelist created)" \
    fw_has fc 'e.get("capability") == "resourcelist" and e.get("change") == "created"'

note "politeness"
for s in a b c; do
    check "$s: one request in flight, --interval the floor between two of a document" \
        bsx politeness "$s" --interval "$INTERVAL" --t0 "$T_START"
done
ua_ok() {
    "$PY" - "$TMP/$1.access.jsonl" "$CONTACT" <<'EOF'
import json, re, sys
uas = {json.loads(l)["ua"] for l in open(sys.argv[1])}
br = {u for u in uas if u.startswith("rsbridge")}
want = re.compile(r"^rsbridge/\S+ \(\+%s\)$" % re.escape(sys.argv[2]))
if not br or any(not want.match(u) for u in br):
    sys.exit("the bridge's User-Agents: %r" % sorted(br))
EOF
}
check "the User-Agent is rsbridge/VERSION (+CONTACT)" ua_ok a
# a document the bridge read again unchanged cost a 304 (shape A: static
# documents with an ETag)
check "a: unchanged documents are read with conditional GETs (304s)" bash -c \
    "'$PY' -c 'import json,sys; sys.exit(0 if sum(1 for l in open(sys.argv[1]) if json.loads(l)[\"s\"] == 304 and json.loads(l)[\"ua\"].startswith(\"rsbridge\")) > 0 else 1)' '$TMP/a.access.jsonl'"

for s in a b c; do record_stop "r$s"; record_stop "f$s"; done
bridge_finish
