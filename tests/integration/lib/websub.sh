# shellcheck shell=bash
# websub.sh - fixtures of the WebSub integration tests (test_websub*.sh,
# docs/protocol.md 5), sourced after common.sh: programmable callback
# servers (lib/callback_server.py) started and stopped like the other
# background helpers, form-encoded WebSub requests, waits for a
# subscription to become active, and the skip used only while rshub
# answers every form-encoded POST /hub with 501.

CBS=$RS_SOURCE_DIR/tests/integration/lib/callback_server.py
cbs() { "$PY" "$CBS" "$@"; }

declare -A CB_PORT CB_LOG

# The options every WebSub test hub gets: callbacks live on loopback, and
# short timeouts keep the tests quick. Scripts add their own.
# shellcheck disable=SC2034 # for the scripts that source this
WS_HUB_ARGS=(--callback-allow 127.0.0.0/8 --verify-timeout 2s
             --delivery-timeout 2s --retry-max-delay 1s --lease-min 1s)

# cb_start NAME [serve ARGS...]: a callback server on 127.0.0.1:0 logging
# to CB_LOG[NAME]; its port in CB_PORT[NAME].
cb_start() {
    local name=$1
    shift
    CB_LOG[$name]=$TMP/cb-$name.jsonl
    rm -f "$TMP/cb-$name.port"
    : >"${CB_LOG[$name]}"
    bg "cb-$name" "$PY" "$CBS" serve --port-file "$TMP/cb-$name.port" \
        --log "${CB_LOG[$name]}" "$@"
    if ! wait_file "$TMP/cb-$name.port" 10; then
        echo "callback server $name did not start" >&2
        return 1
    fi
    CB_PORT[$name]=$(cat "$TMP/cb-$name.port")
}

# cb_url NAME PATH: the URL of PATH on callback server NAME
cb_url() { echo "http://127.0.0.1:${CB_PORT[$1]}$2"; }

# cb_ctl NAME PATH post=SPEC|get=SPEC...: change a path's behaviour
cb_ctl() {
    local name=$1 path=$2 q
    shift 2
    q="path=$path"
    for kv in "$@"; do q+="&$kv"; done
    ht request --http "${CB_PORT[$name]}" --method GET --path "/_ctl?$q" \
        --ctype none >/dev/null
}

# cbq SUBCMD NAME ARGS...: a callback_server.py query on server NAME's log
cbq() {
    local cmd=$1 name=$2
    shift 2
    cbs "$cmd" --log "${CB_LOG[$name]}" "$@"
}

# ws_form HUB PARAMS...: form-encoded POST /hub to hub HUB (k=v, in order)
ws_form() {
    local hub=$1
    shift
    cbs form --http "${HUB_HTTP[$hub]}" "$@"
}

# ws_sub HUB TOPIC CALLBACK [PARAMS...]: subscribe; prints the response
ws_sub() {
    local hub=$1 topic=$2 cb=$3
    shift 3
    ws_form "$hub" hub.mode=subscribe "hub.topic=$topic" "hub.callback=$cb" "$@"
}
ws_unsub() {
    local hub=$1 topic=$2 cb=$3
    shift 3
    ws_form "$hub" hub.mode=unsubscribe "hub.topic=$topic" "hub.callback=$cb" "$@"
}

# ws_wait_active HUB TOPIC-NAME CBNAME PATH [SECS]: wait until callback
# server CBNAME answered a subscribe verification on PATH with the
# challenge, then until GET /topics shows it active (a short grace if
# /topics does not list subscriptions: a check of its own says so).
ws_wait_active() {
    local hub=$1 tname=$2 cb=$3 path=$4 secs=${5:-10}
    cbq wait "$cb" --path "$path" --method GET --mode subscribe \
        --answered 200 --timeout "$secs" >/dev/null || return 1
    if ! cbs sub-state --http "${HUB_HTTP[$hub]}" --name "$tname" \
            --callback "$(cb_url "$cb" "$path")" --want active \
            --timeout 2 >/dev/null 2>&1; then
        sleep 0.3
    fi
    return 0
}

# ws_subscribe_ok NAME HUB TOPIC-URI TOPIC-NAME CBNAME PATH [PARAMS...]:
# a check that subscribing PATH of CBNAME answers 202 and the subscription
# becomes active.
ws_subscribe_ok() {
    local name=$1 hub=$2 uri=$3 tname=$4 cb=$5 path=$6 r st
    shift 6
    r=$(ws_sub "$hub" "$uri" "$(cb_url "$cb" "$path")" "$@")
    st=$(status_of "$r")
    if [ "$st" != 202 ]; then
        bad "$name: subscribe answered $st, want 202" "$r"
        return 1
    fi
    if ! ws_wait_active "$hub" "$tname" "$cb" "$path"; then
        bad "$name: no verification answered within 10 s"
        return 1
    fi
    ok "$name"
}

# one_line_body RESPONSE: true when the body is exactly one line
one_line_body() { [ "$(body_of "$1" | grep -c '')" -le 1 ] && [ -n "$(body_of "$1")" ]; }

# websub_skip_if_unimplemented: before WebSub lands, rshub answers a
# form-encoded POST /hub with 501 and lacks the WebSub options. Only when
# exactly that 501 comes back does the script stop here with exit 0;
# anything else (WebSub present, or broken) runs the tests.
websub_skip_if_unimplemented() {
    local r st
    hub_start probe --open || { bad "rshub starts (probe)"; finish; }
    r=$(ws_form probe hub.mode=subscribe)
    st=$(status_of "$r")
    hub_stop probe TERM 10
    hub_asan_check probe
    if [ "$st" = 501 ]; then
        echo "SKIP: rshub has no WebSub support yet (POST form -> 501)"
        finish
    fi
}
