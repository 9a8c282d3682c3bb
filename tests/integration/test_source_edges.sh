#!/usr/bin/env bash
# test_source_edges.sh - rssource at the edges an exploratory tester
# found: base URLs it could not serve under (refused at start, exit 2), a
# request target starting with "//" (no alias URLs), control bytes of a
# request target in the access log, If-Modified-Since within the second a
# file was rewritten, an mtime past 2262 (lastmod saturated, no
# overflow), files that can never be published (a control character in a
# name, too deep, too long: problems, logged), a symlink into the tree
# under --follow-symlinks (not followed), a restart over an empty mount
# point (exit 1) or with another directory's state (exit 2), and the
# served directory deleted (exit 1).
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"

D=$TMP/data
mkdir -p "$D"
printf 'hello\n' >"$D/a.txt"

note "base URLs a Source cannot serve under: exit 2"
long=http://127.0.0.1:1/$(head -c 2100 /dev/zero | tr '\0' x)/
for u in "http://127.0.0.1:1/a/../b/" "http://127.0.0.1:1/a/%2e/b/" \
         "http://127.0.0.1:1/dätä/" "http://127.0.0.1:1//" \
         "http://127.0.0.1:1/a b/" "http://127.0.0.1:1/a%zz/" "$long"; do
    timeout 20 "$RSSOURCE" --dir "$D" --state "$TMP/bad.state" \
        --listen 127.0.0.1:0 --base-url "$u" >"$TMP/bad.log" 2>&1
    rc=$?
    expect_eq "--base-url ${u:0:40}: exit 2" "$rc" 2
    check "--base-url ${u:0:40}: says why" grep -q -- '--base-url: ' "$TMP/bad.log"
done

# Names that can never be published, made before the start: the
# baseline scan must count and log them: a directory 130 levels deep, a
# path of more than 4096 bytes, 12 names with a newline (in path order:
# the first 10 problems are logged one by one, then a count).
for i in $(seq 12); do printf 'x\n' >"$D/zbad$i
name.txt"; done
deep=$D
for _ in $(seq 130); do deep=$deep/d; done
mkdir -p "$deep" && printf 'deep\n' >"$deep/f.txt"
n200=$(head -c 200 /dev/zero | tr '\0' n)
(cd "$D" && for _ in $(seq 21); do mkdir "$n200" && cd "$n200" || exit 1; done &&
 printf 'long\n' >f.txt)

note "start"
if src_start s "$D" --access-log "$TMP/access.log" --settle 200ms \
        --resourcelist-refresh 0; then
    ok "rssource starts"
else
    bad "rssource starts"
    src_finish
fi
B=$(src_url s)
LOG=${SRC_LOG[s]}

note "files never published are problems, logged"
expect_eq "baseline scan: problems=14" \
    "$(sed -n 's/.*msg="baseline scan".* problems=\([0-9]*\).*/\1/p' "$LOG")" 14
expect_eq "10 of them logged one by one" \
    "$(grep -c 'msg="skipped"' "$LOG")" 10
check "then their count" grep -q 'more paths skipped than logged.*count=4' "$LOG"
check "a control character is named" grep -q 'what="a control character' "$LOG"
check "too deep is named" grep -q 'what="deeper than 128 levels' "$LOG"
check "too long is named" grep -q 'what="a path of 4096 bytes or more' "$LOG"
printf 'x\n' >"$D/live
bad.txt"
check "a name made while running is logged" \
    wait_until 10 grep -q 'path="live\\nbad.txt"' "$LOG"

note "request targets"
expect_eq "GET /a.txt: 200" "$(status_code s a.txt)" 200
expect_eq "GET //anything/a.txt: 404, not an alias" \
    "$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 \
        --request-target //anything/a.txt "$B")" 404
expect_eq "GET //127.0.0.1/a.txt: 404" \
    "$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 \
        --request-target "//127.0.0.1:${SRC_HTTP[s]}/a.txt" "$B")" 404

note "access log: control bytes escaped"
exec 3<>"/dev/tcp/127.0.0.1/${SRC_HTTP[s]}"
printf 'GET /f1"\033[31mred\177 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3
timeout 10 cat <&3 >/dev/null
exec 3<&-
check "the request is logged" wait_until 5 grep -q 'f1"' "$TMP/access.log"
expect_eq "no raw ESC or DEL byte in the access log" \
    "$(tr -dc '\033\177' <"$TMP/access.log" | wc -c)" 0
check "ESC and DEL written as \\xHH" \
    grep -qF 'GET /f1"\x1b[31mred\x7f 404' "$TMP/access.log"

note "If-Modified-Since within the second of a rewrite"
# All of it within one second: started early in a second, tried again
# (3 times at most) when a loaded machine let the second pass meanwhile.
for _ in 1 2 3; do
    for _ in $(seq 40); do
        [ "$(date +%N | cut -c1)" -lt 3 ] && break
        sleep 0.03
    done
    t0=$(date +%s)
    printf 'one\n' >"$D/ims.txt"
    h1=$(curl -s -D - -o /dev/null --max-time 20 "${B}ims.txt")
    lm=$(TZ=GMT LC_ALL=C date -r "$D/ims.txt" '+%a, %d %b %Y %H:%M:%S GMT')
    printf 'two\n' >"$D/ims.txt"
    code=$(status_code s ims.txt -H "If-Modified-Since: $lm")
    [ "$(date +%s)" = "$t0" ] && break
done
expect_eq "IMS of the second the file was rewritten in: 200, not 304" \
    "$code" 200
expect_eq "no Last-Modified while its second is not over" \
    "$(printf '%s\n' "$h1" | grep -ci '^Last-Modified:')" 0
sleep 1.1
h2=$(curl -s -D - -o /dev/null --max-time 20 "${B}ims.txt")
lm2=$(printf '%s\n' "$h2" | sed -n 's/^Last-Modified: //Ip' | tr -d '\r')
expect_eq "once the second is over: Last-Modified" "$lm2" "$lm"
expect_eq "and If-Modified-Since of it: 304" \
    "$(status_code s ims.txt -H "If-Modified-Since: $lm2")" 304

note "an mtime past 2262"
printf 'future\n' >"$D/y2300"
touch -d '2300-01-01 00:00:00 UTC' "$D/y2300"
cl_lastmod() {
    fetch s resourcesync/changelist.xml "$TMP/cl.xml" &&
        xq "$TMP/cl.xml" '[u["lastmod"] for u in urls if u["loc"].endswith("/y2300")][-1:]' |
        grep .
}
# the touch's change (one with the file's creation may come first)
# shellcheck disable=SC2317 # run through wait_until
cl_saturated() { [ "$(cl_lastmod)" = "2262-04-11T23:47:16.854775Z" ]; }
check "the change is listed" wait_until 10 cl_saturated
expect_eq "Change List lastmod: saturated at 2262, not wrapped" \
    "$(cl_lastmod | tail -n1)" "2262-04-11T23:47:16.854775Z"
fetch s resourcesync/resourcelist.xml "$TMP/rl.xml"
expect_eq "Resource List lastmod: the same" \
    "$(xq "$TMP/rl.xml" '[u["lastmod"] for u in urls if u["loc"].endswith("/y2300")]')" \
    "2262-04-11T23:47:16.854775Z"
# RFC 9110 8.8.2.1: no Last-Modified later than the reply's Date
h=$(curl -s -D - -o /dev/null "${B}y2300")
expect_eq "GET: no Last-Modified in the future, an ETag" \
    "$(printf '%s\n' "$h" | grep -ci '^Last-Modified:') $(printf '%s\n' "$h" | grep -ci '^ETag:')" \
    "0 1"
check "documents still validate" rsdoc_ok "${B}resourcesync/changelist.xml" \
    "${B}resourcesync/resourcelist.xml"

note "a file made unreadable leaves the lists, and comes back"
# chmod 000 changed no identity: the file stayed listed while a GET of it
# answered 404 (and a baseline told EACCES as "Input/output error").
printf 'secret\n' >"$D/ro.txt"
# shellcheck disable=SC2317 # run through wait_until
last_of() { changes_of s | grep " ro.txt$" | tail -n 1; }
# shellcheck disable=SC2317
last_is() { [ "$(last_of)" = "$1 ro.txt" ]; }
check "ro.txt listed" wait_until 10 last_is created
chmod 000 "$D/ro.txt"
check "chmod 000: deleted from the Change List" wait_until 10 last_is deleted
check "...told, with the OS's reason" \
    grep -q 'msg="skipped" what=read error="Permission denied" path=ro.txt' "$LOG"
chmod 644 "$D/ro.txt"
check "chmod 644: created again" wait_until 10 last_is created

note "--follow-symlinks: a link into the tree is not followed"
# Followed, d/b and dlink/b were one file under two names, watched under
# one: a change was reported as dlink/b while the Resource List's d/b went
# stale, and removing dlink left d unwatched.
L=$TMP/links
mkdir -p "$L/d" "$TMP/outside"
printf 'b\n' >"$L/d/b"
printf 'o\n' >"$TMP/outside/o"
ln -s d "$L/dlink"
ln -s d/b "$L/flink"
ln -s "$TMP/outside" "$L/out"
if src_start f "$L" --follow-symlinks --settle 200ms --resourcelist-refresh 0; then
    fetch f resourcesync/resourcelist.xml "$TMP/frl.xml"
    BF=$(src_url f)
    expect_eq "listed: d/b and what a link out of the tree holds, no alias" \
        "$(xq "$TMP/frl.xml" "[u['loc'][len('$BF'):] for u in urls]" | sort | tr '\n' ' ')" \
        "d/b out/o "
    check "the links into the tree are told" grep -q 'a symlink into the tree' \
        "${SRC_LOG[f]}"
    printf 'b changed\n' >>"$L/d/b"
    rm "$L/dlink"
    sleep 0.5
    printf 'new\n' >"$L/d/new"
    # shellcheck disable=SC2317 # run through wait_until
    both() { changes_of f | grep -qx 'created d/new' && changes_of f | grep -qx 'updated d/b'; }
    check "changes come under the real names, d still watched after the link went" \
        wait_until 10 both
    expect_eq "no change under dlink/ or flink" \
        "$(changes_of f | grep -c -e ' dlink/' -e ' flink$')" 0
    src_stop f
else
    bad "rssource --follow-symlinks starts"
fi

note "a restart over an empty mount point, or another directory's state"
# A restart publishes the difference between the state and the tree: an
# unmounted filesystem (its mount point empty) or a --state of another
# directory made that "every file deleted", pushed to every mirror.
M=$TMP/mnt
mkdir -p "$M" "$TMP/away" "$TMP/other"
for i in 1 2 3; do printf 'm%s\n' "$i" >"$M/m$i.txt"; done
printf 'o\n' >"$TMP/other/o.txt"
# start_once NAME DIR [ARGS]: rssource on DIR with the state of "m", until
# ready or 10 s; its exit status (124: it served, and was stopped).
start_once() {
    local name=$1 dir=$2
    shift 2
    timeout 10 "$RSSOURCE" --dir "$dir" --state "$TMP/m.state" \
        --listen 127.0.0.1:0 --log-format logfmt "$@" >"$TMP/$name.log" 2>&1
}
if src_start m "$M"; then
    src_stop m
    mv "$M"/* "$TMP/away/"
    start_once empty "$M"
    expect_eq "an empty --dir with a state listing files: exit 1" "$?" 1
    check "...saying so" grep -q 'msg="--dir is empty while the state lists files' \
        "$TMP/empty.log"
    mv "$TMP/away"/* "$M/"
    if src_start m "$M"; then
        expect_eq "...mounted again: nothing deleted" \
            "$(sed -n 's/.*msg="start-up scan".* deleted=\([0-9]*\).*/\1/p' "${SRC_LOG[m]}" | tail -n 1)" 0
        src_stop m
    else
        bad "...mounted again: rssource starts"
    fi
    start_once other "$TMP/other"
    expect_eq "another directory's state: exit 2" "$?" 2
    check "...saying so" grep -q 'msg="this state is of another directory' \
        "$TMP/other.log"
    mv "$M" "$TMP/moved"
    if src_start m "$TMP/moved"; then
        check "a directory that moved keeps its state, told" \
            grep -q 'msg="the served directory moved"' "${SRC_LOG[m]}"
        expect_eq "...nothing deleted" \
            "$(sed -n 's/.*msg="start-up scan".* deleted=\([0-9]*\).*/\1/p' "${SRC_LOG[m]}" | tail -n 1)" 0
        src_stop m
    else
        bad "a directory that moved: rssource starts"
    fi
else
    bad "rssource starts on $M"
fi

note "the served directory deleted: exit 1"
rm -rf "$D"
if pid_wait "${SRC_PID[s]}" 5; then
    expect_eq "rm -rf DIR: exit status 1" "$WAIT_RC" 1
else
    bad "rm -rf DIR: rssource still running after 5 s"
    src_stop s
fi
SRC_PID[s]=
check "rm -rf DIR: logged" \
    grep -q 'the served directory was deleted or moved away' "$LOG"
src_asan_check s

mkdir -p "$D"
src_start e "$D" || bad "rssource starts on an empty directory"
rmdir "$D"
if pid_wait "${SRC_PID[e]}" 5; then
    expect_eq "rmdir DIR (empty): exit status 1" "$WAIT_RC" 1
else
    bad "rmdir DIR (empty): rssource still running after 5 s"
    src_stop e
fi
SRC_PID[e]=

src_finish
