#!/usr/bin/env bash
# test_bridge_edges.sh - rsbridge at its edges, real processes on
# loopback (redis-server, rshub with closed topics and a publish token,
# a pull-only Source of lib/bridge_source.py):
#   - a Source URL with credentials (user:password@, in --source or a
#     [source NAME] url) is refused at start, exit 2, the password not
#     echoed: it would be published to every mirror (rel="via"), shown in
#     /sources and logged;
#   - a wrong hub token stops the topic (403, the outbox keeps the
#     change); the token file fixed and SIGHUP, the bridge reads it again
#     and the held change and the next ones are published.
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

note "credentials in a Source's URL"
out=$(timeout 10 "$RSBRIDGE" --source 'http://alice:s3cret@127.0.0.1:9/rs/cap.xml' \
    --hub http://127.0.0.1:9/hub --state "$TMP/cred.bstate" 2>&1)
expect_eq "--source with user:password@: exit 2" "$?" 2
no_password() { ! grep -q s3cret <<<"$1"; }
says_unsupported() { grep -q 'credentials in a Source.s URL .* not supported' <<<"$1"; }
check "...saying credentials in a Source's URL are not supported" says_unsupported "$out"
check "...without echoing the password" no_password "$out"
cat >"$TMP/cred.conf" <<EOF
hub = http://127.0.0.1:9/hub
state = $TMP/cred.bstate

[source alice]
url = http://alice:s3cret@127.0.0.1:9/
EOF
out=$(timeout 10 "$RSBRIDGE" -c "$TMP/cred.conf" 2>&1)
expect_eq "a [source NAME] url with user:password@: exit 2" "$?" 2
check "...saying credentials in a Source's URL are not supported" says_unsupported "$out"
check "...without echoing the password" no_password "$out"
# an @ past the host is no credential: refused later, for its --state
out=$(timeout 10 "$RSBRIDGE" --source 'http://127.0.0.1:9/a@b/cap.xml' --hub http://127.0.0.1:9/hub \
    --state /dev/null/bstate 2>&1)
says_state() { grep -q -- '--state /dev/null/bstate' <<<"$1" && ! says_unsupported "$1"; }
check "an @ in a Source URL's path is no credential" says_state "$out"

note "SIGHUP reads the hub token file again"
# shellcheck disable=SC2119 # no persistence wanted
redis_start || exit 1
bsrc_start a A --seed 71 --initial 5 || { bad "the Source starts"; bridge_finish; }
TOPIC=http://bridge.test/s/$(bsrc_name a)
cat >"$TMP/hub.conf" <<EOF
[topic bchg]
uri = $TOPIC/changes
kind = change
token = good-token
[topic bfw]
uri = $TOPIC/framework
kind = framework
token = good-token
EOF
hub_start hc -c "$TMP/hub.conf" || exit 1
TOK=$TMP/hub.token
printf 'wrong-token\n' >"$TOK"
chmod 600 "$TOK"
BR_HUB=hc
bridge_start br --source "$(bsrc_url a)" --interval 1s \
    --public-url http://bridge.test --token-file "$TOK" ||
    { bad "rsbridge starts"; bridge_finish; }
bs a change 1 >/dev/null
check "a wrong token: 403, the topic stops" \
    wait_until 20 grep -q 'hub refused a notification.*status=403' "${BR_LOG[br]}"
pending_some() { [ "$(sources_field br a pending)" -ge 1 ]; }
check "...and the outbox keeps the change" pending_some
backlog() { ht topic --http "${HUB_HTTP[hc]}" --name bchg --get backlog.length; }
expect_eq "...the hub stored nothing" "$(backlog)" 0
printf 'good-token\n' >"$TOK"
kill -HUP "${BR_PID[br]}"
check "the token fixed, SIGHUP: the held change is published" \
    wait_until 20 bridge_idle br a
check "...the bridge says it took a new token" \
    grep -q 'a new hub token from the token file' "${BR_LOG[br]}"
backlog_has() { [ "$(backlog)" -ge "$1" ]; }
check "...the hub has it" wait_until 10 backlog_has 1
n=$(backlog)
bs a change 1 >/dev/null
check "...and the next change goes too" wait_until 20 backlog_has $((n + 1))
check "...nothing left in the outbox" wait_until 10 bridge_idle br a

bridge_finish
