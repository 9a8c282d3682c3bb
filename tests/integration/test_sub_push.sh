#!/usr/bin/env bash
# test_sub_push.sh - rssub following push against real peers on loopback:
# rssource watching a directory, rshub (private Redis) carrying its change
# notifications, rssub mirroring it. Six groups: (1) a baseline of ~200
# files, then 1,000 seeded random changes pushed over the WebSocket
# channel, metrics, SIGTERM, audit; (2) kill -9 of rssub in a burst, then
# a restart on the same state; (3) a gap (the hub's backlog trimmed, the
# hub killed and restarted while rssub was down): 4001, a Change List
# pull, the channel back; (4) polling a Source without a hub, a periodic
# audit (--audit-fix) repairing a stray and a removed file, and
# --no-push; (5) WebSub callbacks from a static Source (documents written
# here, served by lib/static_source.py) with notifications sent by rspub,
# a deletion racing the resource's first fetch, unsubscribing at SIGTERM;
# (6) hostile notifications (other origins, encoded dot segments, slashes
# and backslashes, reserved names, symlinks planted in the mirror) that
# must write or delete nothing outside the mirror.
# "Converged": the mirror equals the Source directory byte for byte
# (lib/sub.sh same_tree) within a bounded wait. A scenario that leaves the
# mirror out of sync fails its checks, then `rssub audit --fix` resets it
# so that the next one fails only for its own reasons.
# shellcheck source-path=SCRIPTDIR disable=SC2317 # helpers run through check/wait_until
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"

for b in "$RSSUB" "$RSPUB" "$RSSOURCE" "$RSHUB"; do
    [ -x "$b" ] || { bad "built: $b"; sub_finish; }
done

# src_ok WHAT NAME DIR ARGS...: start rssource, a check; stop on failure.
src_ok() {
    local what=$1
    shift
    if src_start "$@"; then ok "$what"; else bad "$what"; sub_finish; fi
}
# sub_ok WHAT NAME URL MIRROR STATE ARGS...: start rssub run, a check.
sub_ok() {
    local what=$1
    shift
    if sub_start "$@"; then
        ok "$what"
    else
        bad "$what" "$(tail -n 30 "${SUB_LOG[$1]}")"
    fi
}
# stopped_ok NAME: sub_stop NAME (TERM) ends with exit 0.
stopped_ok() {
    sub_stop "$1"
    if [ "$SUB_RC" = 0 ]; then
        ok "$1: SIGTERM, exit 0"
    else
        bad "$1: SIGTERM, exit $SUB_RC, want 0" \
            "$(tail -n 30 "${SUB_LOG[$1]}")"
    fi
}
# audit_ok NAME URL MIRROR STATE: `rssub audit` exits 0, prints nothing.
audit_ok() {
    sub_cmd "$1.audit" audit "$2" "$3" "$4"
    if [ "$SUB_RC" = 0 ] && [ ! -s "$TMP/$1.audit.out" ]; then
        ok "$1: rssub audit: in sync (exit 0)"
    else
        bad "$1: rssub audit: exit $SUB_RC, want 0" \
            "$(head -n 20 "$TMP/$1.audit.out"; tail -n 20 "$TMP/$1.audit.log")"
    fi
}
# conv_ok WHAT SECS SRC MIRROR: converged, a check.
conv_ok() { check "$1" converged "$2" "$3" "$4"; }
# logged NAME ERE: rssub NAME's log has a line matching ERE.
logged() { grep -Eq -- "$2" "${SUB_LOG[$1]}"; }

# resync_mirror N URL MIRROR STATE SRC: when scenario N left MIRROR out
# of sync (its checks failed already), `rssub audit --fix` repairs it, so
# that the next scenario starts from an equal mirror and fails only for
# its own reasons. rssub is stopped.
resync_mirror() {
    same_tree "$5" "$3" >/dev/null 2>&1 && return 0
    note "scenario $1 left the mirror out of sync: rssub audit --fix"
    sub_cmd "fix$1" audit "$2" "$3" "$4" --fix
    check "rssub audit --fix repairs it" same_tree "$5" "$3"
}

# make_tree DIR: 200 files in DIR/d0..d7/s0..s2 (text, and random
# binary of many sizes, an empty one among them), a 1 MiB binary, a
# deep path.
make_tree() {
    local d=$1 i j k f
    for i in 0 1 2 3 4 5 6 7; do
        for j in 0 1 2; do
            mkdir -p "$d/d$i/s$j"
            for k in 0 1 2 3 4 5 6 7; do
                f=$d/d$i/s$j/f$k
                if [ $(((i + j + k) % 3)) -eq 0 ]; then
                    head -c $((k * 997 + i * 31)) /dev/urandom >"$f.bin"
                else
                    printf 'text d%s/s%s/f%s\n' "$i" "$j" "$k" >"$f.txt"
                fi
            done
        done
    done
    head -c 1048576 /dev/urandom >"$d/big.bin"
    printf 'read me\n' >"$d/readme.txt"
    : >"$d/empty.txt"
    mkdir -p "$d/deep/a/b/c/d/e"
    printf 'leaf\n' >"$d/deep/a/b/c/d/e/leaf.txt"
    printf 'odd\n' >"$d/name-with_dash.v2.txt"
}

# changes_n DIR PREFIX N: N new files DIR/PREFIX-I.txt, 20 ms apart (one
# notification each: rssource batches changes within 5 ms).
changes_n() {
    local i
    mkdir -p "$1"
    for i in $(seq "$3"); do
        printf '%s %s\n' "$2" "$i" >"$1/$2-$i.txt"
        sleep 0.02
    done
}

# shellcheck disable=SC2119 # no persistence wanted
redis_start || exit 1
SUB_READY_SECS=20
hub_start h --open --callback-allow 127.0.0.0/8 --verify-timeout 2s \
    --delivery-timeout 2s --retry-max-delay 1s || exit 1
HUB=http://127.0.0.1:${HUB_HTTP[h]}/hub

# ===================================================== 1. baseline, push
note "1. baseline, then 1,000 pushed changes"
D=$TMP/src1
M=$TMP/m1/mirror
ST=$TMP/m1.db
mkdir -p "$D" "$TMP/m1"
make_tree "$D"
src_ok "rssource starts (--hub)" s "$D" --hub "$HUB" --resourcelist-refresh 0
B=$(src_url s)
# The hub's channel is advertised once rssource has published once.
printf 'first\n' >"$D/first.txt"
check "the WebSocket channel is in the Capability List" \
    wait_until 15 caplist_ws s change-notification
sub_ok "rssub run: first sync applied (ready-file)" s "$B" "$M" "$ST"
check "rssub follows the hub's WebSocket channel" \
    logged s 'msg="?following"? .*to=websocket'
conv_ok "baseline: the mirror equals the Source" 20 "$D" "$M"
check "the change channel is connected" \
    wait_until 10 logged s 'msg="?channel connected"? uri=ws://.*changes'
note "churn: $(churn "$D" 1 1000 0.3)"
conv_ok "1,000 pushed changes: converged" 45 "$D" "$M"
N=$(sub_metric s rssub_changes_applied_total)
check "metrics: rssub_changes_applied_total > 0 (got ${N:-none})" \
    test "${N:-0}" -gt 0
N=$(sub_metric s rssub_changes_applied_total 'outcome="deleted"')
check "metrics: deletions applied (got ${N:-none})" test "${N:-0}" -gt 0
check "metrics: rssub_channels_up is 1" \
    test "$(sub_metric s rssub_channels_up)" = 1
check "rssub status beside the daemon" \
    "$RSSUB" status --source "$B" --mirror "$M" --state "$ST" \
    --log-format logfmt
# Beside a running daemon, a file that changed in the last minute may be
# one it has written and not yet recorded: not judged a stray.
printf 'by hand\n' >"$M/by-hand.txt"
sub_cmd s.auditlive audit "$B" "$M" "$ST"
check "a report-only audit beside the daemon does not judge a file just put there" \
    bash -c "! grep -q '^stray ' '$TMP/s.auditlive.out' &&
             grep -Eq 'too_recent_to_judge=1( |\$)' '$TMP/s.auditlive.log'"
rm "$M/by-hand.txt"
stopped_ok s
audit_ok s "$B" "$M" "$ST"

# ============================================= 2. kill -9 in a burst
note "2. kill -9 in a burst, restart ($((SECONDS - T0)) s)"
resync_mirror 1 "$B" "$M" "$ST" "$D"
sub_ok "rssub run again (same state)" s "$B" "$M" "$ST"
bg churn2 "$PY" -c "$CHURN_PY" "$D" 2 400 0.5 >"$TMP/churn2.out"
sleep 1.5
check "rssub is running when killed" sub_alive s
check "...in the middle of the burst (the changes still go on)" \
    kill -0 "${BG_PID[churn2]}"
sub_stop s KILL
expect_eq "kill -9 took it" "$SUB_RC" 137
bg_wait churn2 60 || bad "churn 2 ended in 60 s"
note "churn: $(cat "$TMP/churn2.out")"
sub_ok "rssub restarts with the same state" s "$B" "$M" "$ST"
conv_ok "after kill -9 and restart: converged, no .rssub-tmp. left" 45 \
    "$D" "$M"
stopped_ok s
audit_ok s "$B" "$M" "$ST"
check "no .rssub-tmp. file anywhere in the mirror" \
    test -z "$(find "$M" -name '.rssub-tmp.*')"
resync_mirror 2 "$B" "$M" "$ST" "$D"

# ============================================================= 3. gap
note "3. gap: backlog trimmed and the hub killed while rssub is down ($((SECONDS - T0)) s)"
hub_start hg --open --backlog-max 20 --redis-prefix gap: || exit 1
HUBG=http://127.0.0.1:${HUB_HTTP[hg]}/hub
D3=$TMP/src3
M3=$TMP/m3/mirror
ST3=$TMP/m3.db
mkdir -p "$D3/a" "$TMP/m3"
for i in $(seq 30); do printf 'gap %s\n' "$i" >"$D3/a/g$i.txt"; done
src_ok "rssource starts (--hub, backlog-max 20)" g "$D3" --hub "$HUBG" \
    --resourcelist-refresh 0 --retry-max 500ms
B3=$(src_url g)
printf 'first\n' >"$D3/first.txt"
check "the WebSocket channel is in the Capability List" \
    wait_until 15 caplist_ws g change-notification
CH3=$(caplist_ws g change-notification)
sub_ok "rssub run" g "$B3" "$M3" "$ST3"
changes_n "$D3/b" pre 10
conv_ok "pushed changes: converged" 20 "$D3" "$M3"
stopped_ok g
changes_n "$D3/c" off 60
rm -r "$D3/a"
HP=${HUB_HTTP[hg]}
HW=${HUB_WS[hg]}
hub_kill9 hg
changes_n "$D3/d" down 20
printf 'changed while the hub was down\n' >"$D3/first.txt"
hub_start hg --open --backlog-max 20 --redis-prefix gap: \
    --listen "127.0.0.1:$HP" --ws-listen "127.0.0.1:$HW" ||
    bad "rshub restarts on the same ports"
changes_n "$D3/e" up 40
check "the hub's backlog was trimmed past what rssub had" wait_until 20 \
    bash -c "[ -n \"\$('$PY' '$HUBTOOL' topic --http $HP --name '$CH3' --get backlog.trimmed_through)\" ]"
sub_ok "rssub restarts after the gap" g "$B3" "$M3" "$ST3"
check "it was closed 4001 and logs the gap" \
    wait_until 10 logged g 'code=4001'
check "...and pulls change lists" \
    wait_until 10 logged g 'msg="?gap in the channel: pulling change lists'
N=$(sub_metric g rssub_fallbacks_total 'reason="gap"')
check "metrics: rssub_fallbacks_total{reason=\"gap\"} >= 1 (got ${N:-none})" \
    test "${N:-0}" -ge 1
conv_ok "after the gap: converged" 30 "$D3" "$M3"
# (a predicate: wait_until re-runs it; a "$(...)" argument would be
# expanded once)
channels_up_is() { [ "$(sub_metric "$1" rssub_channels_up)" = "$2" ]; }
check "the change channel is connected again" wait_until 10 \
    channels_up_is g 1
changes_n "$D3/f" live 5
conv_ok "push flows again after the gap" 20 "$D3" "$M3"
stopped_ok g
audit_ok g "$B3" "$M3" "$ST3"

# ========================================================= 4. polling
note "4. polling: a Source without a hub ($((SECONDS - T0)) s)"
D4=$TMP/src4
M4=$TMP/m4/mirror
ST4=$TMP/m4.db
mkdir -p "$D4" "$TMP/m4"
for i in 1 2 3 4 5; do
    mkdir -p "$D4/p$i"
    for j in 1 2 3 4; do head -c $((i * j * 100)) /dev/urandom >"$D4/p$i/$j.bin"; done
done
src_ok "rssource starts (no hub)" p "$D4" --resourcelist-refresh 0
B4=$(src_url p)
sub_ok "rssub run --poll-interval 300ms" p "$B4" "$M4" "$ST4" \
    --poll-interval 300ms
check "it polls: no push channel offered" \
    logged p 'msg="?polling change lists"?.*no push channel'
conv_ok "baseline: converged" 20 "$D4" "$M4"
note "churn: $(churn "$D4" 4 150 0.2)"
conv_ok "polled changes: converged" 30 "$D4" "$M4"
check "it read change lists more than once" \
    test "$(grep -c 'msg="\?change lists read' "${SUB_LOG[p]}")" -gt 1
N=$(sub_metric p rssub_fallbacks_total 'reason="poll"')
check "metrics: rssub_fallbacks_total{reason=\"poll\"} > 1 (got ${N:-none})" \
    test "${N:-0}" -gt 1
stopped_ok p
audit_ok p "$B4" "$M4" "$ST4"
# The periodic audit (--audit-interval, --audit-fix) repairs what was done
# behind the daemon's back: a file put into the mirror, one removed.
sub_ok "rssub run --audit-interval 1s --audit-fix" p "$B4" "$M4" "$ST4" \
    --poll-interval 300ms --audit-interval 1s --audit-fix
GONE=$(cd "$M4" && find . -type f -name '*.bin' | sort | head -n 1)
printf 'by hand\n' >"$M4/p1/stray-by-hand.txt"
rm "$M4/$GONE"
conv_ok "the periodic audit removes the stray and fetches $GONE again" 20 \
    "$D4" "$M4"
check "its log names the stray" \
    logged p 'msg="?audit: stray file"? path=p1/stray-by-hand.txt'
N=$(sub_metric p rssub_audit_strays_total)
check "metrics: rssub_audit_strays_total >= 1 (got ${N:-none})" \
    test "${N:-0}" -ge 1
stopped_ok p
src_stop p
M4B=$TMP/m4b/mirror
mkdir -p "$TMP/m4b"
sub_ok "rssub run --no-push on scenario 1's Source (it has a hub)" n "$B" \
    "$M4B" "$TMP/m4b.db" --no-push --poll-interval 300ms
check "it polls: --no-push" logged n 'msg="?polling change lists"?.*no-push'
check "it opens no channel" test "$(sub_metric n rssub_channels_up)" = 0
printf 'polled\n' >"$D/polled.txt"
rm -f "$D/readme.txt"
conv_ok "--no-push: converged" 20 "$D" "$M4B"
stopped_ok n
rm -rf "$TMP/m4b"

# =========================================================== 5. WebSub
note "5. WebSub: a static Source whose Capability List offers only WebSub ($((SECONDS - T0)) s)"
WWW=$TMP/www
D5=$WWW/data
M5=$TMP/m5/mirror
ST5=$TMP/m5.db
mkdir -p "$D5/sub5/y" "$WWW/.well-known" "$TMP/m5"
for i in 1 2 3 4 5 6 7 8; do printf 'static %s\n' "$i" >"$D5/s$i.txt"; done
head -c 30000 /dev/urandom >"$D5/sub5/y/blob.bin"

# static_docs: the Source Description, a Capability List (Resource List
# and a changelist-notification WebSub topic with rel="hub", no ws://
# channel) and the Resource List of $D5 (md5, length, lastmod).
static_docs() {
    "$PY" - "$WWW" "$B5" "$HUB" <<'PYEOF'
import hashlib, os, sys, time
from datetime import datetime, timezone
www, base, hub = sys.argv[1:4]
now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
NS = ('xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
      'xmlns:rs="http://www.openarchives.org/rs/terms/"')
def write(path, root, lns, cap, urls, at=True):
    md = '<rs:md capability="%s"%s/>' % (cap, ' at="%s"' % now if at else "")
    body = "".join("<rs:ln %s/>" % l for l in lns) + md + "".join(urls)
    tmp = os.path.join(www, path + ".tmp")
    with open(tmp, "w") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n<%s %s>%s</%s>\n'
                % (root, NS, body, root))
    os.replace(tmp, os.path.join(www, path))
write(".well-known/resourcesync", "urlset", [], "description",
      ['<url><loc>%s/capabilitylist.xml</loc>'
       '<rs:md capability="capabilitylist"/></url>' % base], at=False)
write("capabilitylist.xml", "urlset",
      ['rel="up" href="%s/.well-known/resourcesync"' % base],
      "capabilitylist",
      ['<url><loc>%s/resourcelist.xml</loc>'
       '<rs:md capability="resourcelist"/></url>' % base,
       '<url><loc>%s/changes</loc><rs:md capability="changelist-notification"/>'
       '<rs:ln rel="hub" href="%s"/></url>' % (base, hub)], at=False)
urls = []
for d, ds, fs in os.walk(os.path.join(www, "data")):
    ds.sort()
    for f in sorted(fs):
        p = os.path.join(d, f)
        b = open(p, "rb").read()
        lm = time.strftime("%Y-%m-%dT%H:%M:%SZ",
                           time.gmtime(os.stat(p).st_mtime))
        urls.append('<url><loc>%s/%s</loc><lastmod>%s</lastmod>'
                    '<rs:md hash="md5:%s" length="%d"/></url>'
                    % (base, os.path.relpath(p, www), lm,
                       hashlib.md5(b).hexdigest(), len(b)))
write("resourcelist.xml", "urlset",
      ['rel="up" href="%s/capabilitylist.xml"' % base], "resourcelist", urls)
PYEOF
}

# notify5 CHANGE PATH...: rspub a changelist-notification for the files
# PATH (relative to $WWW) to the static Source's topic.
notify5() {
    local change=$1 p args=()
    shift
    for p in "$@"; do
        args+=(--change "$change" --loc "$B5/$p")
        if [ "$change" != deleted ]; then
            args+=(--length "$(stat -c %s "$WWW/$p")"
                   --hash "md5:$(md5sum <"$WWW/$p" | cut -d' ' -f1)")
        fi
    done
    "$RSPUB" --hub "$HUB" --topic "$B5/changes" --up "$B5/capabilitylist.xml" \
        "${args[@]}" >/dev/null
}

# lib/static_source.py (test_sub_sync.sh's) serves $WWW as it is, with
# faults on demand: here a slow body.
SS=$RS_SOURCE_DIR/tests/integration/lib/static_source.py
bg http "$PY" "$SS" serve --root "$WWW" --ready "$TMP/http.ready" \
    2>"$TMP/http.log"
check "static_source serves the static Source" wait_file "$TMP/http.ready" 10
SSPORT=$(sed -n 's/.*"port":\([0-9]*\).*/\1/p' "$TMP/http.ready")
B5=http://127.0.0.1:$SSPORT
ssctl() { "$PY" "$SS" ctl --port "$SSPORT" "$@"; }
static_docs
check "its documents validate strictly" "$RSDOC" validate --strict \
    "$B5/.well-known/resourcesync" "$B5/capabilitylist.xml" \
    "$B5/resourcelist.xml"
# An open-mode hub learns a topic at its first publish.
check "rspub: a first notification makes the hub carry the topic" \
    notify5 updated data/s1.txt
sub_ok "rssub run --callback-listen 127.0.0.1:0" w "$B5/" "$M5" "$ST5" \
    --callback-listen 127.0.0.1:0
check "rssub follows the topic by WebSub (no ws:// offered)" \
    logged w 'msg="?subscribing by websub"? .*topic='"$B5/changes"
check "the subscription becomes active" \
    wait_until 15 logged w 'msg="?websub subscription"? .*state=active'
conv_ok "baseline: converged" 20 "$D5" "$M5/data"
expect_eq "the mirror holds data/ only" "$(ls -A "$M5")" data
printf 'new by websub\n' >"$D5/sub5/new.txt"
printf 'updated by websub\n' >>"$D5/s2.txt"
head -c 40000 /dev/urandom >"$D5/sub5/y/blob.bin"
rm "$D5/s3.txt"
static_docs
check "rspub: created and updated" notify5 created data/sub5/new.txt
check "rspub: updated" notify5 updated data/s2.txt data/sub5/y/blob.bin
check "rspub: deleted" notify5 deleted data/s3.txt
conv_ok "WebSub deliveries: converged" 20 "$D5" "$M5/data"
# A resource created, then deleted while rssub's first GET of it is still
# in flight (its body takes 3 s): the deletion must win.
head -c 100000 /dev/urandom >"$D5/sub5/slow.bin"
static_docs
ssctl rules '{"/data/sub5/slow.bin": {"slow": 3}}'
check "rspub: created (a slow resource)" notify5 created data/sub5/slow.bin
slow_asked() { [ "$(ssctl count /data/sub5/slow.bin)" -ge 1 ]; }
check "rssub's GET of it has started" wait_until 10 slow_asked
rm "$D5/sub5/slow.bin"
static_docs
check "rspub: deleted, while the GET is in flight" \
    notify5 deleted data/sub5/slow.bin
sleep 4     # the slow body is over
conv_ok "the deletion wins over the fetch in flight: converged" 5 \
    "$D5" "$M5/data"
ssctl rules '{}'
N=$(sub_metric w rssub_changes_applied_total)
check "metrics: changes applied (got ${N:-none})" test "${N:-0}" -gt 0
check "metrics: no WebSocket channel up" \
    test "$(sub_metric w rssub_channels_up)" = 0
stopped_ok w
# websub_subs TOPIC: how many WebSub subscriptions hub h holds for TOPIC.
websub_subs() {
    curl -sf --max-time 10 "http://127.0.0.1:${HUB_HTTP[h]}/topics" |
        "$PY" -c 'import json, sys
print(sum(len(t.get("websub") or []) for t in json.load(sys.stdin)
          if t["topic"] == sys.argv[1]))' "$1"
}
no_websub_subs() { [ "$(websub_subs "$1")" = 0 ]; }
check "SIGTERM unsubscribed: the hub holds no subscription for the topic" \
    wait_until 10 no_websub_subs "$B5/changes"
audit_ok w "$B5/" "$M5" "$ST5"

# ================================================ 6. hostile notifications
note "6. hostile notifications ($((SECONDS - T0)) s)"
OUT=$TMP/outside
VICT=$TMP/victims
mkdir -p "$OUT" "$VICT"
printf 'keep me\n' >"$VICT/victim2.txt"
printf 'keep me too\n' >"$TMP/m1/victim.txt"   # beside the mirror
sub_ok "rssub run (scenario 1's mirror)" s "$B" "$M" "$ST"
ln -s "$OUT" "$M/evil"
ln -s "$VICT" "$M/evil2"
PORT=${SRC_HTTP[s]}
mkdir -p "$D/a/etc"
printf 'under a/etc\n' >"$D/a/etc/x"
printf 'top x\n' >"$D/x"
conv_wait() { [ -f "$M/x" ] && [ -f "$M/a/etc/x" ]; }
check "...the Source's own files arrive" wait_until 15 conv_wait
hostile() {
    "$RSPUB" --hub "$HUB" --topic "${B}resourcesync/changes" \
        --up "${B}resourcesync/capabilitylist.xml" "$@" >/dev/null
}
check "rspub: another origin" hostile --change created \
    --loc http://evil.example/x --change created --loc http://evil.example/
check "rspub: encoded dot segments" hostile \
    --change created --loc "http://127.0.0.1:$PORT/a/%2e%2e/%2e%2e/etc/x" \
    --change updated --loc "http://127.0.0.1:$PORT/a/etc/%2E%2E/%2e%2E/%2e%2e/x" \
    --change deleted --loc "http://127.0.0.1:$PORT/%2e%2e/victim.txt"
check "rspub: encoded slashes" hostile \
    --change created --loc "http://127.0.0.1:$PORT/a%2fetc%2fx" \
    --change created --loc "http://127.0.0.1:$PORT/a%2F..%2F..%2Fx" \
    --change deleted --loc "http://127.0.0.1:$PORT/..%2fvictim.txt" \
    --change created --loc "http://127.0.0.1:$PORT/a%5c..%5c..%5cx"
check "rspub: rssub's reserved names" hostile \
    --change created --loc "http://127.0.0.1:$PORT/.rssub-tmp.x" \
    --change created --loc "http://127.0.0.1:$PORT/.RSSUB.db"
# A file the Source really has, under a name that is a symlink out of the
# mirror; deleting through the other symlink.
mkdir -p "$D/evil"
printf 'through a symlink\n' >"$D/evil/x"
check "rspub: a path through a symlink in the mirror" hostile \
    --change created --loc "${B}evil/x" \
    --change deleted --loc "${B}evil2/victim2.txt"
sleep 2
printf 'after the hostile ones\n' >"$D/after.txt"
check "a normal change afterwards still arrives" \
    wait_until 15 cmp -s "$D/after.txt" "$M/after.txt"
check "rssub keeps running" sub_alive s
for u in http://evil.example/x "a/%2e%2e/%2e%2e/etc/x" \
         "a/etc/%2E%2E/%2e%2E/%2e%2e/x" "a%2fetc%2fx" "a%2F..%2F..%2Fx" \
         "a%5c..%5c..%5cx" ".rssub-tmp.x" ".RSSUB.db"; do
    check "refused and logged: $u" \
        logged s "msg=\"?resource refused\"? uri=[^ ]*$u error=\"?refused"
done
check "failed and logged: evil/x (a symlink on the way)" \
    logged s 'msg="?resource failed"? uri=[^ ]*/evil/x error=.*symlink'
check "nothing written through the symlink (its target stays empty)" \
    test -z "$(ls -A "$OUT")"
expect_eq "the file behind the other symlink is not deleted" \
    "$(cat "$VICT/victim2.txt")" "keep me"
expect_eq "nothing new beside the mirror, nothing deleted there" \
    "$(ls -A "$TMP/m1")" "mirror
victim.txt"
check "no file named x anywhere but in the Source and the mirror" \
    test -z "$(find "$TMP" \( -path "$M" -o -path "$D" \) -prune -o \
        -name x -print)"
expect_eq "the symlinks are as planted" \
    "$(readlink "$M/evil") $(readlink "$M/evil2")" "$OUT $VICT"
rm "$M/evil" "$M/evil2"
rm -r "$D/evil"
conv_ok "without the planted symlinks: converged" 20 "$D" "$M"
stopped_ok s
sub_cmd s.audit6 audit "$B" "$M" "$ST"
audit6_rc=$SUB_RC
check "rssub audit: no resource differs" \
    test -z "$(grep -E '^(added|updated|deleted) ' "$TMP/s.audit6.out")"
sub_cmd s.status6 status "$B" "$M" "$ST"
check "evil/x, deleted at the Source since, is not left 'failed'" \
    test -z "$(grep -E 'msg="?not mirrored"? uri=[^ ]*/evil/x ' \
        "$TMP/s.status6.log")"
# Refused URIs are logged and counted, not kept as failures: the mirror
# is not behind for refusing them, so the audit is clean.
expect_eq "rssub audit: nothing reported, refused URIs included" \
    "$(cat "$TMP/s.audit6.out")" ""
expect_eq "rssub audit exits 0" "$audit6_rc" 0

sub_finish
