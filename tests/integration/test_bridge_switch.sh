#!/usr/bin/env bash
# test_bridge_switch.sh - a Capability List that names another Change List
# (docs/bridge.md 4, "A Change List replaced"), real rsbridge processes
# killed with -9, a static Source (lib/static_source.py serving documents
# this script writes):
#   - the switch noticed (the old list gone: 404, the Capability List read
#     again), the new list answering 503, then kill -9: nothing of it
#     committed; the next process publishes the changes made meanwhile -
#     after the old list's position, and one at exactly it - and not the
#     ones the old list had;
#   - the new list's next change once, and a kill -9 and restart after it
#     publish nothing again;
#   - a list whose window begins after the position: its newer entries
#     published, the mirrors asked to reconcile (changelist "updated").
# No hub: what is published waits in the outbox, read from the state.
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

SS=$RS_SOURCE_DIR/tests/integration/lib/static_source.py
W=$TMP/sw.www
mkdir -p "$W"
bg ss "$PY" "$SS" serve --root "$W" --ready "$TMP/ss.ready" 2>>"$TMP/ss.log"
wait_file "$TMP/ss.ready" 10 || { bad "the Source starts"; bridge_finish; }
P=$(sed -n 's/.*"port":\([0-9]*\).*/\1/p' "$TMP/ss.ready")
B=http://127.0.0.1:$P
ssctl() { "$PY" "$SS" ctl --port "$P" "$@"; }
BR_HUB_URL=http://127.0.0.1:9/hub
NS='xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/"'

# dt SEC: 2025-01-01T00:00:SECZ
dt() { printf '2025-01-01T00:%02d:%02dZ' $(($1 / 60)) $(($1 % 60)); }
# caplist LIST: the Capability List names Change List LIST (and a
# Resource List, to reconcile with)
caplist() {
    cat >"$W/caplist.xml" <<EOF
<urlset $NS><rs:md capability="capabilitylist"/>
<url><loc>$B/rl.xml</loc><rs:md capability="resourcelist"/></url>
<url><loc>$B/$1</loc><rs:md capability="changelist"/></url>
</urlset>
EOF
}
# changelist FILE FROM NAME:CHANGE:SEC...: a Change List declaring from
changelist() {
    local file=$1 from=$2 e name change sec
    shift 2
    {
        echo "<urlset $NS><rs:md capability=\"changelist\" from=\"$(dt "$from")\"/>"
        for e in "$@"; do
            IFS=: read -r name change sec <<<"$e"
            echo "<url><loc>$B/data/$name</loc><rs:md change=\"$change\" datetime=\"$(dt "$sec")\"/></url>"
        done
        echo "</urlset>"
    } >"$W/$file.tmp"
    mv "$W/$file.tmp" "$W/$file"
}
cat >"$W/rl.xml" <<EOF
<urlset $NS><rs:md capability="resourcelist" at="$(dt 0)"/></urlset>
EOF

# outbox LANE [LOC-NAME CHANGE]: entries waiting in the outbox (lane 0
# change, 1 framework), of /data/LOC-NAME with CHANGE when given
outbox() {
    "$PY" - "$TMP/sw.bstate/bridge.db" "$B" "$@" <<'EOF'
import sqlite3, sys
db, base, lane = sys.argv[1], sys.argv[2], int(sys.argv[3])
changes = {"created": 1, "updated": 2, "deleted": 3}
c = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=10)
if len(sys.argv) > 4:
    n = c.execute("SELECT count(*) FROM outbox WHERE lane = ? AND loc = ? "
                  "AND change = ?", (lane, "%s/data/%s" % (base, sys.argv[4]),
                                     changes[sys.argv[5]])).fetchone()[0]
else:
    n = c.execute("SELECT count(*) FROM outbox WHERE lane = ?",
                  (lane,)).fetchone()[0]
print(n)
EOF
}
changes_are() { [ "$(outbox 0)" = "$1" ]; }
run_log() { tail -c +$((${BR_LOGOFF[$1]:-0} + 1)) "${BR_LOG[$1]}"; }

note "the first list, its baseline"
caplist cl1.xml
changelist cl1.xml 0 r0:created:0 r1:created:1
bridge_start sw --source "$B/caplist.xml" --interval 1s ||
    { bad "rsbridge starts"; bridge_finish; }
says_baseline() { run_log sw | grep -q "change lists baseline.*cl1.xml"; }
check "the first list is the baseline" wait_until 10 says_baseline
expect_eq "...nothing published" "$(outbox 0)" 0

note "the Capability List switches lists; kill -9 before the new one is read"
ssctl rules '{"/cl2.xml": {"status": 503}}'
changelist cl2.xml 0 r0:created:0 r1:created:1 r1:updated:1 r2:created:2
caplist cl2.xml
rm -f "$W/cl1.xml"
asked_503() { [ "$(ssctl count /cl2.xml 503)" -ge 1 ]; }
check "the switch noticed: the new list asked for (503)" wait_until 20 asked_503
bridge_kill9 sw
expect_eq "...nothing published before the kill" "$(outbox 0)" 0
ssctl rules '{}'
bridge_start sw --source "$B/caplist.xml" --interval 1s ||
    { bad "rsbridge starts again"; bridge_finish; }
check "the next process publishes what changed meanwhile" wait_until 20 changes_are 2
expect_eq "...r2 created (after the old position)" "$(outbox 0 r2 created)" 1
expect_eq "...r1 updated (at exactly it, not in the old list)" "$(outbox 0 r1 updated)" 1
expect_eq "...not r1 created, which the old list had" "$(outbox 0 r1 created)" 0
says_replaced() { run_log sw | grep -q "a change list replaces another.*published=2 unsure=0"; }
check "...saying it took over from the old list" says_replaced
sleep 3
expect_eq "...once" "$(outbox 0)" 2

note "the new list's next change, and a restart after it"
changelist cl2.xml 0 r0:created:0 r1:created:1 r1:updated:1 r2:created:2 r3:created:3
check "the next change is published" wait_until 20 changes_are 3
bridge_kill9 sw
bridge_start sw --source "$B/caplist.xml" --interval 1s ||
    { bad "rsbridge starts a third time"; bridge_finish; }
sleep 4
expect_eq "a restart publishes nothing again" "$(outbox 0)" 3
no_replace() { ! run_log sw | grep -q "a change list replaces another"; }
check "...no takeover again" no_replace

note "a list whose window begins after the position"
fw_before=$(outbox 1)
changelist cl3.xml 10 r11:created:11
caplist cl3.xml
rm -f "$W/cl2.xml"
check "its newer entry is published" wait_until 20 changes_are 4
expect_eq "...r11" "$(outbox 0 r11 created)" 1
says_unsure() { run_log sw | grep -q "does not reach back to the old one's position"; }
check "...the gap is said" says_unsure
asked_reconcile() {
    "$PY" - "$TMP/sw.bstate/bridge.db" "$B/cl3.xml" <<'EOF'
import sqlite3, sys
c = sqlite3.connect("file:%s?mode=ro" % sys.argv[1], uri=True, timeout=10)
n = c.execute("SELECT count(*) FROM outbox WHERE lane = 1 AND loc = ? AND "
              "change = 2", (sys.argv[2],)).fetchone()[0]
sys.exit(0 if n == 1 else 1)
EOF
}
check "...the mirrors asked to reconcile (changelist updated)" asked_reconcile
more_fw() { [ "$(outbox 1)" -gt "$fw_before" ]; }
check "...in the framework lane" more_fw

bridge_finish
