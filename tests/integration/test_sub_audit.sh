#!/usr/bin/env bash
# test_sub_audit.sh - `rssub audit` judges a mirror against the Resource
# List brought forward by the Change Lists since its `at` (issue: an audit
# reported differences that were not there, because most Sources rebuild
# their Resource List far less often than they change).
#  1. rssource with its default --resourcelist-refresh (a Resource List up
#     to a minute stale), rshub, `rssub run`: files deleted, created and
#     updated at the Source, the mirror converged by push, then an audit
#     within the minute: in sync (exit 0, nothing printed), and `audit
#     --fix` neither fetches a deleted file nor deletes a created one.
#  2. A static Source whose Resource List is three hours older than its
#     Change List (deletions, creations, updates since): sync, then audit
#     in sync; a difference no Change List explains is still found and
#     fixed, never one they explain.
#  3. A change the mirror took that no document shows yet (the Change
#     List lags): too recent to judge, not a difference, not undone by
#     --fix.
#  4. A Source with no Change List: the audit says how old its Resource
#     List is and counts the mirror's later changes as too recent (and
#     --fix undoes none of them).
# shellcheck source-path=SCRIPTDIR disable=SC2317 # helpers run through check/wait_until
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"

for b in "$RSSUB" "$RSHUB" "$RSSOURCE"; do
    [ -x "$b" ] || { bad "built: $b"; sub_finish; }
done

# audit_is NAME URL MIRROR STATE RC [ARGS...]: `rssub audit`, its exit
# status RC, and (RC 0) nothing printed.
audit_is() {
    local name=$1 url=$2 mir=$3 st=$4 want=$5
    shift 5
    sub_cmd "$name" audit "$url" "$mir" "$st" "$@"
    if [ "$SUB_RC" = "$want" ] &&
       { [ "$want" != 0 ] || [ ! -s "$TMP/$name.out" ]; }; then
        ok "$name: rssub audit $* exits $want"
    else
        bad "$name: rssub audit $*: exit $SUB_RC, want $want" \
            "$(head -n 20 "$TMP/$name.out"; grep -E 'audited|judged|error' "$TMP/$name.log" | tail -n 5)"
    fi
}
printed() { grep -Eq -- "$2" "$TMP/$1.out"; }
logged_in() { grep -Eq -- "$2" "$TMP/$1.log"; }

# ================================== 1. rssource, a minute-stale list
note "1. rssource (Resource List rebuilt at most once a minute), push"
# shellcheck disable=SC2119 # no persistence wanted
redis_start || exit 1
hub_start h --open || exit 1
HUB=http://127.0.0.1:${HUB_HTTP[h]}/hub
D=$TMP/src1
M=$TMP/m1/mirror
ST=$TMP/m1.db
mkdir -p "$D/a" "$D/b" "$TMP/m1"
for i in 1 2 3 4 5 6 7 8; do printf 'one %s\n' "$i" >"$D/a/f$i.txt"; done
for i in 1 2 3; do head -c $((i * 3000)) /dev/urandom >"$D/b/g$i.bin"; done
if src_start s "$D" --hub "$HUB"; then ok "rssource starts"; else
    bad "rssource starts"; sub_finish; fi
B=$(src_url s)
printf 'first\n' >"$D/first.txt"
check "the hub's channel is in the Capability List" \
    wait_until 15 caplist_ws s change-notification
SUB_READY_SECS=20
if sub_start r "$B" "$M" "$ST"; then ok "rssub run"; else
    bad "rssub run" "$(tail -n 20 "${SUB_LOG[r]}")"; sub_finish; fi
check "converged" converged 15 "$D" "$M"
audit_is a0 "$B" "$M" "$ST" 0
# The Resource List now stays as it is for a minute.
rm "$D/a/f1.txt" "$D/a/f2.txt" "$D/b/g1.bin"
printf 'new 1\n' >"$D/a/new1.txt"
printf 'new 2\n' >"$D/b/new2.txt"
printf 'one 3, updated at the Source\n' >"$D/a/f3.txt"
head -c 5000 /dev/urandom >"$D/b/g2.bin"
check "the changes reach the mirror by push" converged 15 "$D" "$M"
check "the Source's Resource List still lists a deleted file (stale)" \
    bash -c "curl -sf '$(src_url s resourcesync/resourcelist.xml)' | grep -q 'a/f1.txt'"
audit_is a1 "$B" "$M" "$ST" 0
check "a1: the Change Lists brought the list forward (logged)" \
    logged_in a1 'msg="?audited"? .*brought_forward=([1-9][0-9]*)'
sub_stop r
expect_eq "rssub run: SIGTERM, exit 0" "$SUB_RC" 0
# inodes: every file with its inode number (a file fetched again is
# renamed into place: a new inode).
inodes() { (cd "$1" && find . -type f -printf '%p %i\n' | LC_ALL=C sort); }
BEFORE=$(inodes "$M")
audit_is a2 "$B" "$M" "$ST" 0 --fix
check "audit --fix fetched no deleted file and deleted no new one" \
    same_tree "$D" "$M"
expect_eq "a2: it rewrote nothing (same files, same inodes)" \
    "$(inodes "$M")" "$BEFORE"
# A difference no Change List explains is still one: a file removed from
# the mirror behind rssub's back.
rm "$M/a/f4.txt"
audit_is a3 "$B" "$M" "$ST" 1
check "a3: it names the file removed behind rssub's back" \
    printed a3 "^added $B""a/f4.txt\$"
audit_is a4 "$B" "$M" "$ST" 0 --fix
check "audit --fix brought it back, and only it" same_tree "$D" "$M"
src_stop s

# ============ 2. a static Source: a list three hours older than its changes
note "2. a static Source whose Resource List is 3 h older than its Change List"
WWW=$TMP/www
D2=$WWW/data
M2=$TMP/m2/mirror
ST2=$TMP/m2.db
mkdir -p "$D2" "$WWW/.well-known" "$TMP/m2"
SS=$RS_SOURCE_DIR/tests/integration/lib/static_source.py
bg http "$PY" "$SS" serve --root "$WWW" --ready "$TMP/http.ready" \
    2>"$TMP/http.log"
check "static_source serves the static Source" wait_file "$TMP/http.ready" 10
B2=http://127.0.0.1:$(sed -n 's/.*"port":\([0-9]*\).*/\1/p' "$TMP/http.ready")

# docs2 CHANGES RL_FILES...: the Source Description and Capability List;
# a Resource List made 3 h ago listing RL_FILES (their content as in
# $D2/.rl/, the state then); a Change List from 3 h ago holding CHANGES
# ("KIND:FILE:MINUTES_AGO,...", KIND created|updated|deleted; the hash is
# of $D2/FILE now). "-" for CHANGES: no Change List at all. Times count
# from NOW2, fixed: a change keeps its datetime when the documents are
# written again.
NOW2=$(date +%s.%N)
docs2() {
    "$PY" - "$WWW" "$B2" "$NOW2" "$@" <<'PYEOF'
import hashlib, os, sys
from datetime import datetime, timezone
www, base, now, changes = sys.argv[1:5]
rl_files = sys.argv[5:]
now = float(now)
def ts(t):
    return datetime.fromtimestamp(t, timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")
NS = ('xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
      'xmlns:rs="http://www.openarchives.org/rs/terms/"')
def write(path, lns, md, urls):
    body = "".join("<rs:ln %s/>" % l for l in lns) + md + "".join(urls)
    full = os.path.join(www, path)
    with open(full + ".tmp", "w") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n<urlset %s>%s'
                '</urlset>\n' % (NS, body))
    os.replace(full + ".tmp", full)
def fixity(p):
    b = open(p, "rb").read()
    return 'hash="md5:%s" length="%d"' % (hashlib.md5(b).hexdigest(), len(b))
up = lambda p: 'rel="up" href="%s/%s"' % (base, p)
write(".well-known/resourcesync", [], '<rs:md capability="description"/>',
      ['<url><loc>%s/capabilitylist.xml</loc>'
       '<rs:md capability="capabilitylist"/></url>' % base])
caps = ['<url><loc>%s/resourcelist.xml</loc>'
        '<rs:md capability="resourcelist"/></url>' % base]
if changes != "-":
    caps.append('<url><loc>%s/changelist.xml</loc>'
                '<rs:md capability="changelist"/></url>' % base)
write("capabilitylist.xml", [up(".well-known/resourcesync")],
      '<rs:md capability="capabilitylist"/>', caps)
at = now - 3 * 3600
write("resourcelist.xml", [up("capabilitylist.xml")],
      '<rs:md capability="resourcelist" at="%s"/>' % ts(at),
      ['<url><loc>%s/data/%s</loc><rs:md %s/></url>'
       % (base, f, fixity(os.path.join(www, "data", ".rl", f)))
       for f in rl_files])
if changes != "-":
    urls = []
    for c in filter(None, changes.split(",")):
        kind, f, ago = c.split(":")
        t = ts(now - float(ago) * 60)
        md = 'change="%s" datetime="%s"' % (kind, t)
        if kind != "deleted":
            md += " " + fixity(os.path.join(www, "data", f))
        urls.append('<url><loc>%s/data/%s</loc><rs:md %s/></url>'
                    % (base, f, md))
    write("changelist.xml", [up("capabilitylist.xml")],
          '<rs:md capability="changelist" from="%s"/>' % ts(at), urls)
PYEOF
}
# The Source 3 h ago: a b c d. Since: a deleted (2 h ago), e created
# (1 h ago), b updated (30 min ago). Now: b c d e.
mkdir -p "$D2/.rl"
for f in a b c d; do printf 'then %s\n' "$f" >"$D2/.rl/$f.txt"; done
for f in b c d; do cp "$D2/.rl/$f.txt" "$D2/$f.txt"; done
printf 'now b\n' >"$D2/b.txt"
printf 'created e\n' >"$D2/e.txt"
CH2="deleted:a.txt:120,created:e.txt:60,updated:b.txt:30"
docs2 "$CH2" a.txt b.txt c.txt d.txt
# The mirror's copy of the Source: the resources now, without .rl/.
src_now() { (cd "$D2" && find . -path ./.rl -prune -o -type f -print | LC_ALL=C sort); }
mirror_now() { (cd "$M2/data" && find . -type f -print | LC_ALL=C sort); }
sub_cmd s2 sync "$B2/" "$M2" "$ST2"
sub_exit s2 0
expect_eq "the baseline holds the Source now (a deleted, e created, b new)" \
    "$(mirror_now)" "$(src_now)"
check "...b as it is now" cmp "$D2/b.txt" "$M2/data/b.txt"
audit_is b1 "$B2/" "$M2" "$ST2" 0
check "b1: what the Change Lists explain is not a difference" \
    logged_in b1 'brought_forward=[1-9]'
# Differences no Change List explains: c removed from the mirror; d
# altered in the mirror (found by --deep).
rm "$M2/data/c.txt"
printf 'altered\n' >"$M2/data/d.txt"
audit_is b2 "$B2/" "$M2" "$ST2" 1 --deep
check "b2: names c (added at the Source's side)" printed b2 "^added $B2/data/c.txt\$"
check "b2: names d (updated)" printed b2 "^updated $B2/data/d.txt\$"
check "b2: nothing about a, b or e" \
    bash -c "! grep -Eq '/data/(a|b|e)\\.txt' '$TMP/b2.out'"
audit_is b3 "$B2/" "$M2" "$ST2" 0 --fix --deep
expect_eq "audit --fix: the mirror holds the Source now" "$(mirror_now)" "$(src_now)"
check "...c fetched back" cmp "$D2/c.txt" "$M2/data/c.txt"
check "...a, deleted at the Source, was not fetched" test ! -e "$M2/data/a.txt"
audit_is b4 "$B2/" "$M2" "$ST2" 0 --deep

# ============== 3. a change no document shows yet: too recent to judge
note "3. the Change List lags behind a change the mirror took"
printf 'created f\n' >"$D2/f.txt"
docs2 "$CH2,created:f.txt:1" a.txt b.txt c.txt d.txt
sub_cmd s3 sync "$B2/" "$M2" "$ST2"
sub_exit s3 0
check "f is mirrored" cmp "$D2/f.txt" "$M2/data/f.txt"
# The Source's Change List is rewritten without f's entry (it lags).
docs2 "$CH2" a.txt b.txt c.txt d.txt
audit_is c1 "$B2/" "$M2" "$ST2" 0
check "c1: f counted too recent to judge" \
    logged_in c1 'too_recent_to_judge=1( |$)'
audit_is c2 "$B2/" "$M2" "$ST2" 0 --fix
check "audit --fix leaves f alone" cmp "$D2/f.txt" "$M2/data/f.txt"

# ======================= 4. no Change List: the list's age is said
note "4. a Source with no Change List"
docs2 - a.txt b.txt c.txt d.txt
# Judged against a 3-hour-old list alone, every change the mirror took
# since (a deleted, b updated, e and f created) is too recent to judge;
# c and d agree: in sync.
audit_is d1 "$B2/" "$M2" "$ST2" 0
check "d1: the audit says how old the Resource List is" \
    logged_in d1 'msg="?audited"? .*resourcelist_at=[0-9T:.Z-]+ age_seconds=1[0-9]{4}'
check "d1: ...that it is judged alone" \
    logged_in d1 'no change list: the resource list is judged alone'
check "d1: the mirror's later changes are too recent to judge (a, b, e, f)" \
    logged_in d1 'too_recent_to_judge=4( |$)'
BEFORE=$(inodes "$M2")
audit_is d2 "$B2/" "$M2" "$ST2" 0 --fix
expect_eq "d2: audit --fix undoes none of them" "$(inodes "$M2")" "$BEFORE"
sub_finish
