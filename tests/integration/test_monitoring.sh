#!/usr/bin/env bash
# test_monitoring.sh - deploy/monitoring/ against the daemons: promtool
# checks the alert rules (syntax, and deploy/monitoring/rules-test.yml: each
# alert fires on the series it is about, and not without them), the Grafana
# dashboard is well-formed JSON whose panels each query something, and
# every metric name the rules and the dashboard use is one the daemons
# export: rshub (private Redis, WebSub on; a second node with
# --ack-replicas), rssource pushing to it, rssub mirroring it, rsbridge
# following a Source of lib/bridge_source.py, each on loopback, their
# /metrics scraped (a histogram's _bucket, _sum and _count count as its
# name). rssource has no metrics endpoint. Skipped,
# saying so, without promtool (Debian's prometheus package).
# shellcheck source-path=SCRIPTDIR disable=SC2317 # helpers run through check
set -u

command -v promtool >/dev/null || {
    echo "skipped: promtool not found (apt-get install prometheus, or deploy/install-deps.sh)"
    exit 0
}

# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"
# shellcheck source=lib/bridge.sh
. "$(dirname "$0")/lib/bridge.sh"

MON=$RS_SOURCE_DIR/deploy/monitoring
RULES=$MON/rspush-alerts.yml
DASH=$MON/rspush-dashboard.json

# ============================================================ 1. promtool
note "1. promtool"
check "promtool check rules $(basename "$RULES")" promtool check rules "$RULES"
# promtool test rules resolves rule_files against the test file's directory.
check "promtool test rules: each alert fires on its series, not without" \
    promtool test rules "$MON/rules-test.yml"
check "the dashboard is JSON with panels that each query something" \
    "$PY" - "$DASH" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
panels = [p for p in d["panels"] if p.get("type") != "row"]
assert len(panels) >= 10, "only %d panels" % len(panels)
for p in panels:
    exprs = [t.get("expr", "") for t in p.get("targets", [])]
    assert exprs and all(exprs), "panel %r has no query" % p.get("title")
ids = [p["id"] for p in d["panels"]]
assert len(ids) == len(set(ids)), "panel ids repeat"
EOF

# ============================================================ 2. the daemons
note "2. rshub, rssource, rssub, rsbridge on loopback"
bridge_require
# shellcheck disable=SC2119 # no persistence wanted
redis_start || finish
hub_start h --open --callback-allow 127.0.0.0/8 || { bad "rshub starts"; finish; }
HUB=http://127.0.0.1:${HUB_HTTP[h]}/hub
# A second node with --ack-replicas, for the series only it exports
# (rshub_ack_*); our Redis has no replica, so it never reports ready.
hub_start a --ack-replicas 1 --ack-timeout 100ms ||
    { bad "rshub --ack-replicas 1 starts"; finish; }
D=$TMP/src
mkdir -p "$D" "$TMP/m"
printf 'one\n' >"$D/one.txt"
src_start s "$D" --hub "$HUB" || { bad "rssource starts"; finish; }
printf 'first\n' >"$D/first.txt"
check "rssource's channel is advertised" wait_until 15 caplist_ws s change-notification
sub_start m "$(src_url s)" "$TMP/m/mirror" "$TMP/m/state.db" ||
    { bad "rssub starts" "$(tail -n 20 "${SUB_LOG[m]}")"; finish; }
ok "rssub starts (metrics on port ${SUB_METRICS[m]})"
bsrc_start a A --seed 7 --initial 5 || { bad "a Source for rsbridge starts"; finish; }
bridge_start br --source "$(bsrc_url a)" --metrics-listen 127.0.0.1:0 --interval 1s ||
    { bad "rsbridge starts"; finish; }
BR_METRICS=$(sed -n 's/.*"metrics":\([0-9]*\).*/\1/p' "$TMP/br.bridge.ready")
ok "rsbridge starts (metrics on port $BR_METRICS)"
printf 'two\n' >"$D/two.txt"
check "a change reaches the mirror" converged 20 "$D" "$TMP/m/mirror"

# ============================================================ 3. the names
note "3. every name the rules and the dashboard use is exported"
declare -A SCRAPE=([h]=${HUB_HTTP[h]} [a]=${HUB_HTTP[a]} [m]=${SUB_METRICS[m]} [br]=$BR_METRICS)
for k in "${!SCRAPE[@]}"; do
    check "scrape $k /metrics" curl -sf --max-time 10 -o "$TMP/$k.metrics" \
        "http://127.0.0.1:${SCRAPE[$k]}/metrics"
done
# exported: every family named by # TYPE, with its histogram series.
cat "$TMP"/*.metrics | awk '
    $1 == "#" && $2 == "TYPE" {
        print $3
        if ($4 == "histogram") { print $3 "_bucket"; print $3 "_sum"; print $3 "_count" }
        if ($4 == "summary") { print $3 "_sum"; print $3 "_count" }
        next
    }
    $1 !~ /^#/ && NF { n = $1; sub(/\{.*/, "", n); print n }' |
    LC_ALL=C sort -u >"$TMP/exported"
note "exported: $(wc -l <"$TMP/exported") names"
# used: the identifiers of our daemons' prefixes in rules and dashboard.
grep -ohE '\b(rshub|rssub|rssource|rsbridge)_[a-z0-9_]+' "$RULES" "$DASH" |
    LC_ALL=C sort -u >"$TMP/used"
note "used: $(wc -l <"$TMP/used") names"
check "the rules and the dashboard use some names (grep works)" \
    test "$(wc -l <"$TMP/used")" -gt 20
unknown=$(LC_ALL=C comm -23 "$TMP/used" "$TMP/exported")
if [ -z "$unknown" ]; then
    ok "every name used is exported"
else
    bad "names used but not exported by any daemon" "$unknown"
fi
# An alert without a severity reaches no route; one without a summary
# tells the person paged nothing.
check "every rule has an alert name, an expression, a severity and a summary" \
    "$PY" - "$RULES" <<'EOF'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
n = 0
for g in doc["groups"]:
    for r in g["rules"]:
        assert r.get("alert") and r.get("expr"), r
        assert r.get("annotations", {}).get("summary"), r["alert"]
        assert r.get("labels", {}).get("severity") in ("page", "ticket"), r["alert"]
        n += 1
assert n >= 10, n
EOF

bridge_finish
