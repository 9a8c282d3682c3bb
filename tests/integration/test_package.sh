#!/usr/bin/env bash
# test_package.sh - the Debian packages of deploy/package.sh, on this very
# machine: built (a Release tree of their own, cached in
# $RS_BUILD_DIR/package), judged by lintian (no error, no warning),
# installed with dpkg -i (apt-get install -f for what they depend on), and
# run from /usr/bin: rssource pushes a change through rshub (a private
# redis-server on a unix socket) to the mirror of rssub, over the hub's
# WebSocket channel. Then remove (the users, the state and the conffiles
# stay), and purge: nothing dpkg -L listed is left on disk (but directories
# other packages share), no state directory, no system user or group.
# Needs root and dpkg; skipped, saying why, without them, or when an
# rspush package is already installed here (not this test's to purge).
# Two runs on one machine take turns (a lock), since dpkg has one database.
# shellcheck source-path=SCRIPTDIR disable=SC2317 # helpers run through check
set -u

PKGS=(rspush-hub rspush-subscriber rspush-source rspush-bridge rspush-tools)
USERS=(rssub rssource rsbridge)
STATES=(/var/lib/rssub /var/lib/rssource /var/lib/rsbridge)

skip() { echo "skipped: $*"; exit 0; }
[ "$(id -u)" -eq 0 ] || skip "installing packages needs root"
if ! command -v dpkg >/dev/null || ! command -v dpkg-deb >/dev/null; then
    skip "dpkg not found (not a Debian system)"
fi
command -v lintian >/dev/null ||
    skip "lintian not found: run deploy/install-deps.sh"

# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"

exec 9>"${TMPDIR:-/tmp}/rspush-test-package.lock"
flock -w 900 9 || { bad "another test_package.sh held the lock for 15 min"; finish; }

installed() {   # installed PKG: dpkg knows PKG in any state but purged
    local st
    st=$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) || return 1
    [ -n "$st" ] && [ "$st" != not-installed ]
}
for p in "${PKGS[@]}"; do
    installed "$p" && skip "$p is installed on this machine, and not by this" \
        "test: it is left alone (dpkg --purge ${PKGS[*]} to run the test)"
done

# Ours to purge from here on, even when a check fails half-way: the trap
# stops the daemons, then purges whatever of the packages dpkg knows.
OURS=0
pkg_cleanup() {
    sub_cleanup
    if [ "$OURS" = 1 ]; then
        local p left=()
        for p in "${PKGS[@]}"; do installed "$p" && left+=("$p"); done
        [ "${#left[@]}" -eq 0 ] || dpkg --purge "${left[@]}" >/dev/null 2>&1
    fi
}
trap pkg_cleanup EXIT

# ========================================================= 1. build, lint
note "1. build (deploy/package.sh), lintian"
T=$SECONDS
out=$(RS_PKG_BUILD_DIR=${RS_PKG_BUILD_DIR:-$RS_BUILD_DIR/package} RS_JOBS=2 \
      nice -n 5 "$RS_SOURCE_DIR/deploy/package.sh" 2>"$TMP/package.log")
rc=$?
mapfile -t DEBS <<<"$out"
if [ "$rc" -eq 0 ] && [ "${#DEBS[@]}" -eq 5 ]; then
    ok "deploy/package.sh: 5 packages in $((SECONDS - T)) s"
else
    bad "deploy/package.sh: exit $rc, ${#DEBS[@]} paths" "$(tail -n 30 "$TMP/package.log")"
    finish
fi
for d in "${DEBS[@]}"; do
    note "$(basename "$d"): $(stat -c %s "$d") bytes," \
         "$(dpkg-deb -f "$d" Installed-Size) KiB installed"
done
# lintian warns that it runs as root: that line is not a tag.
lint=$(lintian --info --fail-on error,warning "${DEBS[@]}" 2>&1)
rc=$?
lint=$(printf '%s\n' "$lint" | grep -v 'running with root privileges')
if [ "$rc" -eq 0 ]; then
    ok "lintian: no error, no warning${lint:+ ($(printf '%s\n' "$lint" | wc -l) info)}"
else
    bad "lintian: exit $rc" "$lint"
fi
deb_of() { printf '%s\n' "${DEBS[@]}" | grep "/$1_"; }
check "Depends: found by dpkg-shlibdeps (rspush-hub needs libhiredis)" \
    bash -c "dpkg-deb -f '$(deb_of rspush-hub)' Depends | grep -q libhiredis"
check "Depends: adduser for the packages whose postinst adds a user" \
    bash -c "dpkg-deb -f '$(deb_of rspush-subscriber)' Depends | grep -q adduser"
check "conffiles: rspush-hub marks its /etc example" \
    bash -c "dpkg-deb -I '$(deb_of rspush-hub)' conffiles |
             grep -qx /etc/rshub/rshub.conf.example"

# ======================================================== 2. install
note "2. dpkg -i"
OURS=1
if ! dpkg -i "${DEBS[@]}" >"$TMP/dpkg-i.log" 2>&1; then
    note "dpkg -i left dependencies to apt-get install -f"
    apt-get -o DPkg::Lock::Timeout=120 install -f -y -q \
        >>"$TMP/dpkg-i.log" 2>&1
fi
for p in "${PKGS[@]}"; do
    st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)
    expect_eq "$p installed" "$st" installed
done
for b in rshub rspub rssub rssource rsbridge rsdoc; do
    check "/usr/bin/$b --version" "/usr/bin/$b" --version
    check "man page of $b" test -s "/usr/share/man/man1/$b.1.gz"
done
for u in "${USERS[@]}"; do
    check "postinst: system user and group $u" bash -c "
        uid=\$(getent passwd $u | cut -d: -f3) && [ \"\$uid\" -lt 1000 ] &&
        getent group $u >/dev/null"
done
for unit in rshub.service rsbridge.service rssub@t.service rssource@t.service; do
    check "systemd-analyze verify $unit" \
        systemd-analyze verify --man=no "$unit"
done
check "the units run the programs in /usr/bin" \
    bash -c "! grep -l /usr/local /lib/systemd/system/rs*.service"
# postinst again (the users exist): nothing fails
check "dpkg -i again (postinst with the users already there)" \
    dpkg -i "${DEBS[@]}"

# ================================================ 3. the installed programs
note "3. /usr/bin: rssource -> rshub -> rssub"
RSHUB=/usr/bin/rshub
RSSOURCE=/usr/bin/rssource
RSSUB=/usr/bin/rssub
RSDOC=/usr/bin/rsdoc
# shellcheck disable=SC2119 # no persistence wanted
redis_start || finish
hub_start h --open || { bad "installed rshub starts"; finish; }
ok "installed rshub starts"
D=$TMP/src
M=$TMP/m/mirror
mkdir -p "$D" "$TMP/m"
printf 'one\n' >"$D/one.txt"
src_start s "$D" --hub "http://127.0.0.1:${HUB_HTTP[h]}/hub" ||
    { bad "installed rssource starts"; finish; }
ok "installed rssource starts"
B=$(src_url s)
printf 'first\n' >"$D/first.txt"   # its first publish advertises the channel
check "the Source's Capability List names the hub's channel" \
    wait_until 15 caplist_ws s change-notification
caplist_valid() {
    fetch s resourcesync/capabilitylist.xml "$TMP/caplist.xml" &&
        "$RSDOC" validate "$TMP/caplist.xml"
}
check "the installed rsdoc validates the Source's Capability List" caplist_valid
if sub_start m "$B" "$M" "$TMP/m/state.db"; then
    ok "installed rssub: first sync"
else
    bad "installed rssub: first sync" "$(tail -n 30 "${SUB_LOG[m]}")"
    finish
fi
check "rssub's change channel is connected" \
    wait_until 15 grep -Eq 'msg="?channel connected"? uri=ws://.*changes' "${SUB_LOG[m]}"
# hub_counter FAMILY: the sum of FAMILY's samples at the hub's /metrics.
hub_counter() {
    curl -sf --max-time 10 "http://127.0.0.1:${HUB_HTTP[h]}/metrics" |
        awk -v f="$1" '{ n = $1; sub(/\{.*/, "", n) } n == f { s += $NF }
                       END { printf "%d\n", s }'
}
accepted0=$(hub_counter rshub_publish_accepted_total)
printf 'pushed\n' >"$D/pushed.txt"
check "a change published through rshub reaches the mirror" converged 20 "$D" "$M"
accepted=$(hub_counter rshub_publish_accepted_total)
check "rshub accepted the publish (rshub_publish_accepted_total $accepted0 -> $accepted)" \
    test "$accepted" -gt "${accepted0:-0}"
N=$(sub_metric m rssub_changes_applied_total)
check "rssub applied it pushed, not polled (rssub_channels_up 1, applied ${N:-none})" \
    bash -c "[ '$(sub_metric m rssub_channels_up)' = 1 ] && [ '${N:-0}' -gt 0 ]"
sub_stop m
src_stop s
hub_stop h
redis_stop

# ======================================================== 4. remove
note "4. dpkg --remove: users, state, conffiles stay"
# What systemd's StateDirectory= would have made for running instances.
for i in "${!USERS[@]}"; do
    install -d -o "${USERS[$i]}" -g "${USERS[$i]}" -m 700 "${STATES[$i]}/t"
    printf 'state\n' >"${STATES[$i]}/t/state"
done
declare -A LISTED
for p in "${PKGS[@]}"; do
    while IFS= read -r f; do
        [ "$f" = "/." ] || LISTED[$f]=$p
    done < <(dpkg -L "$p")
done
check "dpkg -L lists the packages' files (${#LISTED[@]} paths)" \
    test "${#LISTED[@]}" -gt 30
check "dpkg --remove rspush-subscriber" dpkg --remove rspush-subscriber
check "remove keeps the user rssub" getent passwd rssub
check "remove keeps the state /var/lib/rssub" test -s /var/lib/rssub/t/state
check "remove keeps the conffile" test -f /etc/rssub/rssub.conf.example
check "remove takes the program" test ! -e /usr/bin/rssub
expect_eq "rspush-subscriber: config-files" \
    "$(dpkg-query -W -f='${db:Status-Status}' rspush-subscriber)" config-files

# ========================================================= 5. purge
note "5. dpkg --purge: nothing left"
check "dpkg --purge ${PKGS[*]}" dpkg --purge "${PKGS[@]}"
for p in "${PKGS[@]}"; do
    check "$p: dpkg forgot it" bash -c "! dpkg-query -W '$p' >/dev/null 2>&1 ||
        [ \"\$(dpkg-query -W -f='\${db:Status-Status}' '$p')\" = not-installed ]"
done
# A path listed and still there is left over, unless it is a directory
# another package owns too (/usr/bin, /lib/systemd/system, ...), or its
# real path is (/lib, a symlink to usr/lib on a merged /usr).
left=()
for f in "${!LISTED[@]}"; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    if [ -d "$f" ] && { dpkg -S "$f" || dpkg -S "$(readlink -f "$f")"; } \
           >/dev/null 2>&1; then
        continue
    fi
    left+=("$f (${LISTED[$f]})")
done
if [ "${#left[@]}" -eq 0 ]; then
    ok "nothing dpkg -L listed is left (but directories other packages own)"
else
    bad "left on disk after purge: ${#left[@]}" "$(printf '%s\n' "${left[@]}" | sort)"
fi
for s in "${STATES[@]}" /etc/rshub /etc/rssub /etc/rssource /etc/rsbridge; do
    check "purge: $s is gone" test ! -e "$s"
done
for u in "${USERS[@]}"; do
    check "purge: user and group $u are gone" \
        bash -c "! getent passwd $u && ! getent group $u"
done
OURS=0
sub_finish
