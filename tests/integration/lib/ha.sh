# shellcheck shell=bash
# ha.sh - a highly available Redis for the tests of issue 15 (rshub on
# Sentinel, docs/internals/failover.md), sourced after common.sh (and
# after source.sh / sub.sh when the test uses them: its trap runs theirs):
# a primary, one or two replicas (replicaof) and three Sentinels
# (redis-server CONF --sentinel, quorum 2), all on 127.0.0.1 ports picked
# free in the test's $TMP, no persistence. Then the faults of the tests:
# kill -9 of the primary, SIGSTOP (a partition: it neither answers nor
# replicates) and SIGCONT, a replica stopped and started again; and the
# waits for Sentinel's failover. Every wait is bounded; only the processes
# started here are stopped, by their recorded PID.
#
#   ha_start [REPLICAS]        r0 the primary, r1.. replicas (default 1),
#                              Sentinels s0 s1 s2; waits until they see
#                              each other
#   ha_url [NAME]              sentinel://127.0.0.1:P,...,127.0.0.1:P/NAME
#   ha_primary                 host:port of the primary (asks a Sentinel)
#   ha_primary_node            its node name (r0, r1...)
#   ha_kill9_primary           kill -9 it (HA_OLD = its node, HA_FAULT_T =
#                              the epoch second of the fault)
#   ha_stop_primary / ha_cont  SIGSTOP it / SIGCONT it
#   ha_switchover              SENTINEL FAILOVER (it stays up, demoted)
#   ha_wait_failover SECS      every Sentinel names a primary other than
#                              HA_OLD, and it answers ROLE master (HA_NEW)
#   ha_wait_replica NODE PRIMARY SECS  NODE replicates from PRIMARY
#                              (host:port), link up
#   ha_stop_replica [NODE]     SIGTERM a replica (the first by default)
#   ha_start_replica NODE      start it again as a replica of the primary
#   ha_restart NODE            same for a node killed by ha_kill9_primary
#   ha_add_replica NODE        one more replica, seen by the Sentinels
#   ha_cli NODE ARGS...        redis-cli to data node NODE
#   ha_scli S ARGS...          redis-cli to Sentinel S
# Call ha_start and the faults directly, not in $(...) or through check:
# the PIDs and names they record must stay in the test's shell.
# HA_FAULT_T0, HA_FAULT_T, HA_NEW, HA_FAILOVER_T are for the callers:
# shellcheck disable=SC2034

HA_NAME=${HA_NAME:-rsmaster}
HA_DOWN_MS=${HA_DOWN_MS:-1000}         # Sentinel's down-after-milliseconds
HA_FAILOVER_MS=${HA_FAILOVER_MS:-3000}
HA_DIR=$TMP/ha
HA_SENTINELS=(s0 s1 s2)
HA_NODES=()
HA_OLD=             # the node the last fault was made to
HA_FAULT_T0=        # when it began (epoch seconds, with a fraction)
HA_FAULT_T=         # when it was done: nothing sent later reached the node
HA_STOPPED=         # the node SIGSTOPped now, if any
HA_NEW=             # the primary ha_wait_failover saw elected
HA_FAILOVER_T=      # when (epoch seconds)
declare -A HA_PID HA_PORT HA_KNOWN

# ha_free_port: a TCP port on 127.0.0.1 nobody listens on now. A race with
# another process is possible: the starts below retry with a new port.
ha_free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

ha_cli() {
    local n=$1
    shift
    redis-cli -h 127.0.0.1 -p "${HA_PORT[$n]}" "$@"
}
ha_scli() {
    local s=$1
    shift
    redis-cli -h 127.0.0.1 -p "${HA_PORT[$s]}" "$@"
}

# ha_node_of HOST:PORT: the node listening there ("" when none)
ha_node_of() {
    local n
    for n in "${HA_NODES[@]}"; do
        [ "127.0.0.1:${HA_PORT[$n]}" = "$1" ] && { echo "$n"; return 0; }
    done
    return 1
}

# ha_launch NAME WAITCMD CMD...: run CMD (a redis-server) in the
# background as NAME and wait (10 s) until WAITCMD succeeds; a port
# another process took first ("Address already in use") is the caller's
# to retry (exit status 2).
ha_launch() {
    local name=$1 waitcmd=$2 i=0
    shift 2
    "$@" >>"$HA_DIR/$name.out" 2>&1 &
    HA_PID[$name]=$!
    while [ "$i" -lt 100 ]; do
        $waitcmd "$name" >/dev/null 2>&1 && return 0
        kill -0 "${HA_PID[$name]}" 2>/dev/null || break
        sleep 0.1
        i=$((i + 1))
    done
    stop_pid "${HA_PID[$name]}"
    HA_PID[$name]=
    if grep -q 'Address already in use' "$HA_DIR/$name.log" "$HA_DIR/$name.out" \
            2>/dev/null; then
        return 2
    fi
    echo "$name did not start:" >&2
    tail -n 20 "$HA_DIR/$name.log" "$HA_DIR/$name.out" >&2
    return 1
}

ha_pong() { [ "$(ha_cli "$1" ping 2>/dev/null)" = PONG ]; }

# ha_node_start NODE [PRIMARY-HOST:PORT]: a data node on its port (a new
# free one the first time), a replica of PRIMARY when given. Diskless
# replication without delay: a replica (re)synchronizes in milliseconds.
ha_node_start() {
    local n=$1 of=${2:-} rc args
    mkdir -p "$HA_DIR/$n"
    [[ " ${HA_NODES[*]} " == *" $n "* ]] || HA_NODES+=("$n")
    for _ in 1 2 3 4 5; do
        [ -n "${HA_PORT[$n]:-}" ] || HA_PORT[$n]=$(ha_free_port)
        args=(--port "${HA_PORT[$n]}" --bind 127.0.0.1 --dir "$HA_DIR/$n"
              --save "" --appendonly no --daemonize no
              --logfile "$HA_DIR/$n.log"
              --repl-diskless-sync yes --repl-diskless-sync-delay 0)
        [ -n "$of" ] && args+=(--replicaof "${of%:*}" "${of##*:}")
        ha_launch "$n" ha_pong redis-server "${args[@]}"
        rc=$?
        [ "$rc" = 2 ] || return "$rc"
        # a node Sentinel knows keeps its port (taken for a moment by
        # someone's outgoing connection: try again); a new one moves
        if [ -z "${HA_KNOWN[$n]:-}" ]; then
            HA_PORT[$n]=
            rm -f "$HA_DIR/$n.log" "$HA_DIR/$n.out"
        else
            sleep 1
        fi
    done
    return 1
}

ha_sentinel_pong() { [ "$(ha_scli "$1" ping 2>/dev/null)" = PONG ]; }

# ha_sentinel_start S PRIMARY-HOST:PORT: Sentinel S watching PRIMARY as
# HA_NAME (quorum 2). Its config file is its own to rewrite.
ha_sentinel_start() {
    local s=$1 of=$2 try rc
    mkdir -p "$HA_DIR/$s"
    for try in 1 2 3 4 5; do
        HA_PORT[$s]=$(ha_free_port)
        cat >"$HA_DIR/$s/sentinel.conf" <<EOF
port ${HA_PORT[$s]}
bind 127.0.0.1
daemonize no
dir $HA_DIR/$s
logfile $HA_DIR/$s.log
sentinel resolve-hostnames no
sentinel monitor $HA_NAME ${of%:*} ${of##*:} 2
sentinel down-after-milliseconds $HA_NAME $HA_DOWN_MS
sentinel failover-timeout $HA_NAME $HA_FAILOVER_MS
sentinel parallel-syncs $HA_NAME 2
EOF
        ha_launch "$s" ha_sentinel_pong redis-server "$HA_DIR/$s/sentinel.conf" \
            --sentinel
        rc=$?
        [ "$rc" = 2 ] || return "$rc"
        rm -f "$HA_DIR/$s.log"
    done
    return 1
}

# ha_smaster S FIELD: a field of `SENTINEL MASTER HA_NAME` at Sentinel S
ha_smaster() {
    ha_scli "$1" sentinel master "$HA_NAME" 2>/dev/null |
        awk -v f="$2" 'NR % 2 == 1 && $0 == f { getline; print; exit }'
}

# ha_link_up NODE PRIMARY-HOST:PORT: NODE is a replica of PRIMARY with its
# link up
ha_link_up() {
    local info
    info=$(ha_cli "$1" info replication 2>/dev/null | tr -d '\r')
    grep -qx 'role:slave' <<<"$info" &&
        grep -qx "master_host:${2%:*}" <<<"$info" &&
        grep -qx "master_port:${2##*:}" <<<"$info" &&
        grep -qx 'master_link_status:up' <<<"$info"
}

# ha_wait_replica NODE PRIMARY-HOST:PORT SECS
ha_wait_replica() {
    wait_until "$3" ha_link_up "$1" "$2"
}

# ha_sentinels_see NREPLICAS: every Sentinel knows the other two and
# NREPLICAS replicas of a primary it holds up
ha_sentinels_see() {
    local s
    for s in "${HA_SENTINELS[@]}"; do
        [ "$(ha_smaster "$s" num-other-sentinels)" = 2 ] || return 1
        [ "$(ha_smaster "$s" num-slaves)" = "$1" ] || return 1
        [ "$(ha_smaster "$s" flags)" = master ] || return 1
    done
}

# ha_start [REPLICAS]: the primary r0, REPLICAS replicas r1.. (default 1),
# Sentinels s0 s1 s2; waits (30 s) until the replicas are in sync and
# every Sentinel sees the whole set.
ha_start() {
    local nrep=${1:-1} i p
    mkdir -p "$HA_DIR"
    ha_node_start r0 || return 1
    p=127.0.0.1:${HA_PORT[r0]}
    for ((i = 1; i <= nrep; i++)); do
        ha_node_start "r$i" "$p" || return 1
    done
    for i in "${HA_NODES[@]}"; do HA_KNOWN[$i]=1; done
    for ((i = 1; i <= nrep; i++)); do
        ha_wait_replica "r$i" "$p" 15 >/dev/null ||
            { echo "replica r$i is not in sync within 15 s" >&2; return 1; }
    done
    for i in "${HA_SENTINELS[@]}"; do
        ha_sentinel_start "$i" "$p" || return 1
    done
    # Sentinels find each other through the primary's hello channel (every
    # 2 s) and the replicas through its INFO (every 10 s, the first at once)
    if ! wait_until 30 ha_sentinels_see "$nrep"; then
        echo "the Sentinels do not see each other and $nrep replicas within 30 s:" >&2
        for i in "${HA_SENTINELS[@]}"; do
            echo "$i: others=$(ha_smaster "$i" num-other-sentinels)" \
                "replicas=$(ha_smaster "$i" num-slaves) flags=$(ha_smaster "$i" flags)" >&2
        done
        return 1
    fi
}

# ha_url [NAME]: the --redis address of the set
ha_url() {
    local s hosts=()
    for s in "${HA_SENTINELS[@]}"; do hosts+=("127.0.0.1:${HA_PORT[$s]}"); done
    local IFS=,
    echo "sentinel://${hosts[*]}/${1:-$HA_NAME}"
}

# ha_primary [S]: host:port of the primary, as Sentinel S (or the first
# that answers) names it
ha_primary() {
    local s out
    for s in ${1:-${HA_SENTINELS[@]}}; do
        out=$(ha_scli "$s" sentinel get-master-addr-by-name "$HA_NAME" 2>/dev/null |
              tr -d '\r' | paste -sd:)
        case $out in
            *:*) echo "$out"; return 0 ;;
        esac
    done
    return 1
}
ha_primary_node() { ha_node_of "$(ha_primary)"; }

ha_now() { date +%s.%N | cut -c1-17; }

# ha_kill9_primary: kill -9 the primary (HA_OLD, HA_FAULT_T)
ha_kill9_primary() {
    local n
    n=$(ha_primary_node) || { echo "no primary known" >&2; return 1; }
    HA_FAULT_T0=$(ha_now)
    kill -KILL "${HA_PID[$n]}" 2>/dev/null
    wait "${HA_PID[$n]}" 2>/dev/null
    # the time is taken once it is gone: nothing sent after it reached it
    HA_FAULT_T=$(ha_now)
    HA_PID[$n]=
    HA_OLD=$n
}

# ha_stop_primary: SIGSTOP the primary (HA_OLD, HA_FAULT_T, HA_STOPPED)
ha_stop_primary() {
    local n
    n=$(ha_primary_node) || { echo "no primary known" >&2; return 1; }
    HA_FAULT_T0=$(ha_now)
    kill -STOP "${HA_PID[$n]}"
    HA_OLD=$n
    HA_STOPPED=$n
    # the time is taken once it is stopped (state T): nothing sent after
    # it is run until SIGCONT
    wait_until 5 ha_is_stopped "${HA_PID[$n]}" || return 1
    HA_FAULT_T=$(ha_now)
}

# ha_is_stopped PID: the process is in state T (stopped by a signal)
ha_is_stopped() { [ "$(sed 's/.*) //; s/ .*//' "/proc/$1/stat" 2>/dev/null)" = T ]; }

# ha_switchover: a failover an operator asks for (SENTINEL FAILOVER) while
# the primary is healthy: it keeps running, and taking writes, until
# Sentinel makes it a replica of the promoted one (seconds later); only
# +switch-master tells its clients to move (HA_OLD, HA_FAULT_T)
ha_switchover() {
    local n
    n=$(ha_primary_node) || { echo "no primary known" >&2; return 1; }
    HA_FAULT_T0=$(ha_now)
    HA_FAULT_T=$HA_FAULT_T0
    [ "$(ha_scli s0 sentinel failover "$HA_NAME" | tr -d '\r')" = OK ] || return 1
    HA_OLD=$n
}

# ha_cont: SIGCONT the node ha_stop_primary stopped
ha_cont() {
    [ -n "$HA_STOPPED" ] || return 0
    kill -CONT "${HA_PID[$HA_STOPPED]}" 2>/dev/null
    HA_STOPPED=
}

# ha_failed_over: every Sentinel names the same primary, not HA_OLD, and
# that node says it is a master
ha_failed_over() {
    local s p first=
    for s in "${HA_SENTINELS[@]}"; do
        p=$(ha_primary "$s") || return 1
        [ -z "$first" ] && first=$p
        [ "$p" = "$first" ] || return 1
    done
    [ "$first" != "127.0.0.1:${HA_PORT[$HA_OLD]}" ] || return 1
    [ "$(ha_cli "$(ha_node_of "$first")" role 2>/dev/null | head -n 1)" = master ]
}

# ha_wait_failover SECS: wait for the failover after a fault; sets HA_NEW
# (the new primary's node) and HA_FAILOVER_T (epoch seconds, when seen).
# Not in a subshell (no $(...), no check): the variables are the caller's.
ha_wait_failover() {
    HA_NEW=
    if wait_until "$1" ha_failed_over; then
        HA_FAILOVER_T=$(ha_now)
        HA_NEW=$(ha_primary_node)
        return 0
    fi
    return 1
}

# ha_replicas: the nodes running that are not the primary (nor stopped)
ha_replicas() {
    local n p
    p=$(ha_primary_node) || return 1
    for n in "${HA_NODES[@]}"; do
        [ "$n" != "$p" ] && [ -n "${HA_PID[$n]:-}" ] && [ "$n" != "$HA_STOPPED" ] &&
            echo "$n"
    done
}

# ha_stop_replica [NODE]: SIGTERM a replica (the first running one);
# prints its name
ha_stop_replica() {
    local n=${1:-}
    [ -n "$n" ] || n=$(ha_replicas | head -n 1)
    [ -n "$n" ] && [ -n "${HA_PID[$n]:-}" ] || return 1
    stop_pid "${HA_PID[$n]}"
    HA_PID[$n]=
    echo "$n"
}

# ha_start_replica NODE: start NODE again on its port, a replica of the
# current primary, and wait (15 s) until it is in sync
ha_start_replica() {
    local p
    p=$(ha_primary) || return 1
    ha_node_start "$1" "$p" || return 1
    ha_wait_replica "$1" "$p" 15
}
ha_restart() { ha_start_replica "$@"; }

# ha_add_replica NODE: a new data node NODE, a replica of the primary, in
# sync (15 s) and seen by every Sentinel (30 s)
ha_add_replica() {
    local p nrep
    p=$(ha_primary) || return 1
    ha_node_start "$1" "$p" || return 1
    HA_KNOWN[$1]=1
    ha_wait_replica "$1" "$p" 15 >/dev/null || return 1
    nrep=$((${#HA_NODES[@]} - 1))
    wait_until 30 ha_sentinels_see "$nrep" >/dev/null
}

# ha_teardown: SIGCONT what is stopped, then SIGTERM every process started
# here (KILL after 5 s), by PID
ha_teardown() {
    local k
    for k in "${!HA_PID[@]}"; do
        [ -n "${HA_PID[$k]}" ] && kill -CONT "${HA_PID[$k]}" 2>/dev/null
    done
    for k in "${!HA_PID[@]}"; do
        [ -n "${HA_PID[$k]}" ] && kill -TERM "${HA_PID[$k]}" 2>/dev/null
    done
    for k in "${!HA_PID[@]}"; do
        [ -n "${HA_PID[$k]}" ] && stop_pid "${HA_PID[$k]}"
        HA_PID[$k]=
    done
}

# The trap: the fixtures sourced before (sub.sh, source.sh, common.sh)
# stop their processes and remove $TMP after ours stopped.
ha_cleanup() {
    ha_teardown
    if declare -F sub_cleanup >/dev/null; then
        sub_cleanup
    elif declare -F src_cleanup >/dev/null; then
        src_cleanup
    else
        cleanup
    fi
}
trap ha_cleanup EXIT
