#!/usr/bin/env bash
# test_sub_credentials.sh - rssub against Sources and hubs that want
# credentials, every process real on loopback (issue 16): (1) rssource
# --read-token-file mirrored with --source-token-file, refused clearly
# without it (exit 1, one line naming the URL and 401) and with a wrong
# one (403), a group-readable token file refused, `rssub run` without the
# token in a failing state with its metrics and no tight loop; (2)
# --header-file headers and the token arrive at the Source, and a
# redirect to another origin (another port, recorded by
# lib/cred_server.py) gets no Authorization, no Cookie, no header-file
# header; a header file setting Host or holding a CR is refused;
# --netrc-file basic auth; (3) TLS with a private CA made here by
# openssl: --cacert mirrors over https, a wrong CA is refused clearly,
# --client-cert reaches the Source's origin and not the other origin a
# redirect leads to; (4) wss: rssub follows rshub's channel through nginx
# terminating TLS, and --hub-token-file's bearer arrives on the upgrade
# (recorded by nginx's access log); with nginx asking for a client
# certificate, --client-cert's is shown and verified, and without one the
# channel is refused.
# shellcheck disable=SC2317 # helpers run through check/wait_until
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/source.sh
. "$(dirname "$0")/lib/source.sh"
# shellcheck source=lib/sub.sh
. "$(dirname "$0")/lib/sub.sh"

CS=$RS_SOURCE_DIR/tests/integration/lib/cred_server.py
SS=$RS_SOURCE_DIR/tests/integration/lib/static_source.py
NGINX=${NGINX:-/usr/sbin/nginx}
declare -A CPORT CLOG
umask 077

# cs_start NAME ROOT [CRED-SERVER-ARGS...]: a recording server; its port
# in CPORT[NAME], its request log CLOG[NAME].
cs_start() {
    local name=$1 root=$2
    shift 2
    # a second server under one name would orphan the first (cleanup
    # stops the PID a name holds last)
    [ -z "${BG_PID[cs-$name]:-}" ] ||
        { bad "cs_start: a server named $name is running already"; return 1; }
    CLOG[$name]=$TMP/$name.cs.jsonl
    rm -f "$TMP/$name.cs.ready"
    bg "cs-$name" "$PY" "$CS" serve --root "$root" --ready "$TMP/$name.cs.ready" \
        --log "${CLOG[$name]}" "$@"
    wait_file "$TMP/$name.cs.ready" 10 || return 1
    CPORT[$name]=$(sed -n 's/.*"port": *\([0-9]*\).*/\1/p' "$TMP/$name.cs.ready")
}
cs_show() { local name=$1; shift; "$PY" "$CS" show --log "${CLOG[$name]}" "$@"; }
# sync NAME URL [ARGS...]: rssub sync into a fresh mirror $TMP/NAME.m
sync() {
    local name=$1 url=$2
    shift 2
    rm -rf "$TMP/$name.m" "$TMP/$name.db"
    mkdir -p "$TMP/$name.m"
    sub_cmd "$name" sync "$url" "$TMP/$name.m" "$TMP/$name.db" "$@"
}
logged_in() { grep -Eq -- "$2" "$TMP/$1.log"; }

if [ ! -x "$RSSUB" ] || [ ! -x "$RSSOURCE" ]; then
    bad "rssub and rssource are built"
    sub_finish
fi

# ----------------------------------------------------------- secrets, CA
printf 'sekrit-token-1\n' >"$TMP/tok"
printf 'not-the-token\n' >"$TMP/badtok"
chmod 600 "$TMP/tok" "$TMP/badtok"
cp "$TMP/tok" "$TMP/tok-open"
chmod 644 "$TMP/tok-open"

PKI=$TMP/pki
mkdir -p "$PKI"
mkca() {
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$1" \
        -keyout "$PKI/$1.key" -out "$PKI/$1.pem" 2>/dev/null
}
# mkcert NAME CA EXT: a key and a certificate signed by CA
mkcert() {
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$1" -keyout "$PKI/$1.key" \
        -out "$PKI/$1.csr" 2>/dev/null &&
    printf '%s\n' "$3" >"$PKI/$1.ext" &&
    openssl x509 -req -in "$PKI/$1.csr" -CA "$PKI/$2.pem" -CAkey "$PKI/$2.key" \
        -CAcreateserial -days 2 -extfile "$PKI/$1.ext" -out "$PKI/$1.pem" 2>/dev/null
}
if mkca testca && mkca otherca &&
   mkcert server testca 'subjectAltName=IP:127.0.0.1,DNS:localhost' &&
   mkcert client testca 'extendedKeyUsage=clientAuth'; then
    ok "a private CA, a server and a client certificate (openssl)"
else
    bad "openssl made the CA and certificates"
    sub_finish
fi

# ====================================== 1. rssource --read-token-file
note "1. rssource --read-token-file, rssub --source-token-file"
D=$TMP/src
mkdir -p "$D/sub"
for i in 1 2 3; do printf 'file %s\n' "$i" >"$D/f$i.txt"; done
printf 'deep\n' >"$D/sub/deep.txt"
src_start s "$D" --read-token-file "$TMP/tok" || { bad "rssource starts"; sub_finish; }
B=$(src_url s)
expect_eq "rssource: a document without a token is 401" \
    "$(curl -s -o /dev/null -w '%{http_code}' "$B.well-known/resourcesync")" 401
expect_eq "rssource: 401 says WWW-Authenticate: Bearer" \
    "$(curl -s -D - -o /dev/null "${B}f1.txt" | tr -d '\r' |
       sed -n 's/^WWW-Authenticate: \(Bearer\).*/\1/ip')" Bearer
expect_eq "rssource: a wrong token is 403" \
    "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer nope' "${B}f1.txt")" 403
expect_eq "rssource: the token reads a file" \
    "$(curl -s -H 'Authorization: Bearer sekrit-token-1' "${B}f1.txt")" "file 1"

sync s1 "$B" --source-token-file "$TMP/tok"
sub_exit s1 0
check "with the token: the mirror equals the Source" same_tree "$D" "$TMP/s1.m"

sync s2 "$B"
sub_exit s2 1
check "without the token: one line naming the URL and 401" \
    logged_in s2 "msg=\"the source refused access.*url=$B.* status=401"
sync s3 "$B" --source-token-file "$TMP/badtok"
sub_exit s3 1
check "a wrong token: one line naming the URL and 403" \
    logged_in s3 'msg="the source refused access.* status=403'
check "nothing mirrored without the right token" \
    test -z "$(find "$TMP/s3.m" -type f)"

sync s4 "$B" --source-token-file "$TMP/tok-open"
sub_exit s4 2
check "a group-readable token file: refused, saying what to do" \
    logged_in s4 'readable by group or others \(mode 0644\).*--insecure-token-file'
sync s5 "$B" --source-token-file "$TMP/tok-open" --insecure-token-file
sub_exit s5 0

# run without the token: not ready, failing state in the metrics, and
# retries that back off (1 s, 2 s, 4 s...), not a tight loop
SUB_READY_SECS=3 sub_start r "$B" "$TMP/r.m" "$TMP/r.db" 2>/dev/null
check "run without the token: still running, not ready" sub_alive r
sub_metrics_port r
check "run: rssub_source_access{state=\"refused\"} is 1" \
    wait_until 10 test "$(sub_metric r rssub_source_access 'state="refused"')" = 1
sleep 5
N=$(sub_metric r rssub_source_auth_failures_total)
check "run: refusals counted (${N:-none})" test "${N:-0}" -ge 1
# each discovery asks a few URLs (root, well-known...); the attempts back
# off 1 s, 2 s, 4 s: at most 5 in these ~8 s, a tight loop makes hundreds
N=$(grep -c 'msg="discovery failed"' "${SUB_LOG[r]}")
check "run: discovery retried with backoff ($N attempts in ~8 s: 2..5)" \
    test "$N" -ge 2 -a "$N" -le 5
check "run: said once, not per retry" \
    test "$(grep -c 'msg="the source refused access' "${SUB_LOG[r]}")" = 1
sub_stop r
src_stop s

# ============================ 2. header file, cross-origin redirect, netrc
note "2. --header-file, a redirect to another origin, --netrc-file"
W=$TMP/www
mkdir -p "$W/data/r"
printf 'here\n' >"$W/data/a.txt"
printf 'moved away\n' >"$W/data/r/b.txt"
cs_start other "$W" || bad "the other origin's server starts"
cs_start o1 "$W" --token sekrit-token-1 \
    --redirect "/data/r/=http://127.0.0.1:${CPORT[other]}" ||
    bad "the Source's server starts"
B1=http://127.0.0.1:${CPORT[o1]}/
"$PY" "$SS" write-source --www "$W" --base "$B1" >/dev/null
"$PY" "$SS" write-resourcelist --www "$W" --base "$B1" >/dev/null
printf 'X-Custom: from-header-file\r\nCookie: session=abc\n# a comment\n\n' \
    >"$TMP/hdrs"
sync h1 "$B1" --source-token-file "$TMP/tok" --header-file "$TMP/hdrs"
sub_exit h1 0
check "the redirected resource is mirrored" \
    cmp "$W/data/r/b.txt" "$TMP/h1.m/data/r/b.txt"
check "the Source got the token and the header file's headers" \
    grep -q "GET /data/a.txt 200 client_cert=false authorization=Bearer sekrit-token-1 x-custom=from-header-file cookie=session=abc" \
    <(cs_show o1 --path /data/a.txt authorization x-custom cookie)
check "the Source answered the redirect" \
    grep -q "GET /data/r/b.txt 302 .*authorization=Bearer sekrit-token-1" \
    <(cs_show o1 --path /data/r/b.txt authorization)
OUT=$(cs_show other --path /data/r/b.txt authorization x-custom cookie)
check "the other origin got the request" grep -q "GET /data/r/b.txt 200" <<<"$OUT"
check "the other origin got no Authorization, no Cookie, no header-file header" \
    grep -q "authorization=- x-custom=- cookie=-" <<<"$OUT"
check "the other origin got nothing else of ours" \
    test -z "$(grep -v 'authorization=- x-custom=- cookie=-' <<<"$OUT")"

printf 'Host: evil.example\n' >"$TMP/hdrs-host"
sync h2 "$B1" --header-file "$TMP/hdrs-host"
sub_exit h2 2
check "a header file setting Host: refused, naming the line" \
    logged_in h2 'cannot use --header-file.*line=1 error="a header rssub sets itself"'
printf 'X-Ok: 1\nX-Bad: a\rInjected: 1\n' >"$TMP/hdrs-cr"
sync h3 "$B1" --header-file "$TMP/hdrs-cr"
sub_exit h3 2
check "a header file with a CR inside a line: refused" \
    logged_in h3 'line=2 error="a CR inside a line"'
chmod 640 "$TMP/hdrs"
sync h4 "$B1" --source-token-file "$TMP/tok" --header-file "$TMP/hdrs"
sub_exit h4 2
chmod 600 "$TMP/hdrs"

W3=$TMP/www3
mkdir -p "$W3/data"
printf 'basic\n' >"$W3/data/c.txt"
cs_start o3 "$W3" --basic "alice:pa55word" || bad "the basic-auth Source starts"
B3=http://127.0.0.1:${CPORT[o3]}/
"$PY" "$SS" write-source --www "$W3" --base "$B3" >/dev/null
"$PY" "$SS" write-resourcelist --www "$W3" --base "$B3" >/dev/null
printf 'machine 127.0.0.1 login alice password pa55word\n' >"$TMP/netrc"
sync n1 "$B3" --netrc-file "$TMP/netrc"
sub_exit n1 0
check "--netrc-file: mirrored with basic auth" cmp "$W3/data/c.txt" "$TMP/n1.m/data/c.txt"
sync n2 "$B3"
sub_exit n2 1
check "without the netrc: refused clearly (401)" \
    logged_in n2 'msg="the source refused access.* status=401'

# A static Source whose web server refuses the root (403, nginx without
# an index): discovery goes on to /.well-known/resourcesync, no refusal
WF=$TMP/www-forbid
mkdir -p "$WF/data"
printf 'static\n' >"$WF/data/d.txt"
cs_start forbid "$WF" --forbid-dirs || bad "the static Source starts"
BF=http://127.0.0.1:${CPORT[forbid]}/
"$PY" "$SS" write-source --www "$WF" --base "$BF" >/dev/null
"$PY" "$SS" write-resourcelist --www "$WF" --base "$BF" >/dev/null
expect_eq "its root answers 403" \
    "$(curl -s -o /dev/null -w '%{http_code}' "$BF")" 403
sync fb "$BF"
sub_exit fb 0
check "a root refused (403): mirrored through /.well-known" \
    cmp "$WF/data/d.txt" "$TMP/fb.m/data/d.txt"
check "and no refusal said" sh -c "! grep -q 'the source refused access' '$TMP/fb.log'"

# A static Source whose web server refuses one file (403) among many: that
# file fails on its own (after its retries), the others are mirrored, and
# the sync says so in its exit status, not as a refusal of the Source
WS=$TMP/www-secret
mkdir -p "$WS/data"
for i in $(seq 1 30); do printf 'public %s\n' "$i" >"$WS/data/p$i.txt"; done
printf 'secret\n' >"$WS/data/secret.txt"
cs_start secret "$WS" --forbid /data/secret.txt || bad "the Source starts"
BS=http://127.0.0.1:${CPORT[secret]}/
"$PY" "$SS" write-source --www "$WS" --base "$BS" >/dev/null
"$PY" "$SS" write-resourcelist --www "$WS" --base "$BS" >/dev/null
expect_eq "its secret.txt answers 403" \
    "$(curl -s -o /dev/null -w '%{http_code}' "${BS}data/secret.txt")" 403
sync fs "$BS" --retries 2
sub_exit fs 1
check "one file refused (403): the 30 others mirrored" \
    test "$(find "$TMP/fs.m/data" -name 'p*.txt' | wc -l)" = 30
check "the refused one is not in the mirror" test ! -e "$TMP/fs.m/data/secret.txt"
check "it is reported failed, with its 403" \
    logged_in fs 'msg="resource failed" uri=[^ ]*secret.txt error="GET: HTTP 403"'
check "and the Source is not said to refuse access" \
    sh -c "! grep -q 'the source refused access' '$TMP/fs.log'"
# ...but every resource refused (a token revoked halfway, say) is the
# Source refusing: said once and the sync ends, not after every retry
cs_start secret2 "$WS" --forbid /data/ || bad "the Source starts"
BS2=http://127.0.0.1:${CPORT[secret2]}/
"$PY" "$SS" write-source --www "$WS" --base "$BS2" >/dev/null
"$PY" "$SS" write-resourcelist --www "$WS" --base "$BS2" >/dev/null
REFUSED_T0=$(date +%s)
sync fa "$BS2" --retries 8
sub_exit fa 1
check "every resource refused: the source refused access, said" \
    logged_in fa 'msg="the source refused access.* status=403'
check "and the sync ends within 10 s, not after 8 retries of each" \
    test $(($(date +%s) - REFUSED_T0)) -le 10
# (its own names: part 3 has an o4 and a www4 of its own, and a server
# started twice under one name is not stopped at the end)

# ============================================================ 3. TLS
note "3. https with a private CA, mutual TLS, a wrong CA"
W4=$TMP/www4
mkdir -p "$W4/data/r"
printf 'over tls\n' >"$W4/data/t.txt"
printf 'tls elsewhere\n' >"$W4/data/r/u.txt"
TLSARGS=(--tls "$PKI/server.pem" "$PKI/server.key" --client-ca "$PKI/testca.pem")
cs_start other4 "$W4" "${TLSARGS[@]}" || bad "the other TLS origin starts"
cs_start o4 "$W4" "${TLSARGS[@]}" \
    --redirect "/data/r/=https://127.0.0.1:${CPORT[other4]}" ||
    bad "the TLS Source starts"
B4=https://127.0.0.1:${CPORT[o4]}/
"$PY" "$SS" write-source --www "$W4" --base "$B4" >/dev/null
"$PY" "$SS" write-resourcelist --www "$W4" --base "$B4" >/dev/null
sync t1 "$B4" --cacert "$PKI/testca.pem" --client-cert "$PKI/client.pem" \
    --client-key "$PKI/client.key" --source-token-file "$TMP/tok"
sub_exit t1 0
check "https: mirrored with --cacert" cmp "$W4/data/t.txt" "$TMP/t1.m/data/t.txt"
check "https: the redirected resource too" cmp "$W4/data/r/u.txt" "$TMP/t1.m/data/r/u.txt"
check "mutual TLS: the Source's origin saw the client certificate" \
    grep -q "GET /data/t.txt 200 client_cert=true" <(cs_show o4 --path /data/t.txt)
OUT=$(cs_show other4 --path /data/r/u.txt authorization)
check "the other TLS origin got the request" grep -q "GET /data/r/u.txt 200" <<<"$OUT"
check "the other TLS origin saw no client certificate, no Authorization" \
    test -z "$(grep -v 'client_cert=false authorization=-' <<<"$OUT")"
sync t2 "$B4" --cacert "$PKI/otherca.pem"
sub_exit t2 1
check "a wrong CA: refused, saying why" \
    logged_in t2 'discovery failed.*(certificate|SSL)'
chmod 644 "$PKI/client.key"
sync t4 "$B4" --cacert "$PKI/testca.pem" --client-cert "$PKI/client.pem" \
    --client-key "$PKI/client.key"
sub_exit t4 2
check "a client key readable by others: refused" \
    logged_in t4 'option=--client-key.*readable by group or others'
chmod 600 "$PKI/client.key"

# ============================================ 4. wss through nginx, hub token
note "4. wss: nginx terminating TLS in front of rshub, --hub-token-file"
if [ ! -x "$NGINX" ]; then
    bad "nginx is installed ($NGINX)"
    sub_finish
fi
redis_start || exit 1
hub_start h --open || exit 1
HUB=http://127.0.0.1:${HUB_HTTP[h]}/hub
D5=$TMP/src5
mkdir -p "$D5"
printf 'one\n' >"$D5/one.txt"
src_start p "$D5" --hub "$HUB" || bad "rssource --hub starts"
printf 'first\n' >"$D5/first.txt"
check "rssource's channel is in its Capability List" wait_until 15 caplist_ws p change-notification
CH=$(caplist_ws p change-notification)
NG=$TMP/nginx
mkdir -p "$NG/logs"
NGPORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
NGPORT2=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$NG/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
pid $NG/nginx.pid;
error_log $NG/logs/error.log warn;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $NG/body;
    proxy_temp_path $NG/proxy;
    fastcgi_temp_path $NG/fastcgi;
    uwsgi_temp_path $NG/uwsgi;
    scgi_temp_path $NG/scgi;
    log_format rec '\$request_uri auth="\$http_authorization" upgrade="\$http_upgrade" status=\$status';
    server {
        listen 127.0.0.1:$NGPORT ssl;
        ssl_certificate $PKI/server.pem;
        ssl_certificate_key $PKI/server.key;
        access_log $NG/logs/access.log rec;
        location / {
            proxy_pass http://127.0.0.1:${HUB_WS[h]};
            proxy_http_version 1.1;
            proxy_set_header Upgrade \$http_upgrade;
            proxy_set_header Connection "upgrade";
            proxy_set_header Authorization \$http_authorization;
            proxy_read_timeout 300s;
        }
    }
    # the same, for clients with a certificate of testca only
    log_format mtls '\$request_uri verify=\$ssl_client_verify status=\$status';
    server {
        listen 127.0.0.1:$NGPORT2 ssl;
        ssl_certificate $PKI/server.pem;
        ssl_certificate_key $PKI/server.key;
        ssl_verify_client on;
        ssl_client_certificate $PKI/testca.pem;
        access_log $NG/logs/mtls.log mtls;
        location / {
            proxy_pass http://127.0.0.1:${HUB_WS[h]};
            proxy_http_version 1.1;
            proxy_set_header Upgrade \$http_upgrade;
            proxy_set_header Connection "upgrade";
            proxy_read_timeout 300s;
        }
    }
}
CONF
bg nginx "$NGINX" -p "$NG" -c "$NG/nginx.conf" -e "$NG/logs/error.log"
check "nginx listens (TLS)" wait_until 10 \
    curl -s -o /dev/null --cacert "$PKI/testca.pem" "https://127.0.0.1:$NGPORT/"
WSS=wss://127.0.0.1:$NGPORT/channel/$CH
printf 'hub-token-2\n' >"$TMP/hubtok"
SUB_READY_SECS=30
if sub_start w "$(src_url p)" "$TMP/w.m" "$TMP/w.db" --channel "$WSS" \
        --cacert "$PKI/testca.pem" --hub-token-file "$TMP/hubtok" \
        --push-timeout 60s --poll-interval 60s --pull-interval 0; then
    ok "rssub run with --channel wss://, --cacert: ready"
else
    bad "rssub run with a wss channel" "$(tail -n 20 "${SUB_LOG[w]}")"
fi
check "the wss channel is connected" wait_until 15 \
    grep -Eq 'msg="?channel connected"? uri=wss://' "${SUB_LOG[w]}"
printf 'pushed\n' >"$D5/pushed.txt"
check "a change arrives over wss" wait_until 20 cmp "$D5/pushed.txt" "$TMP/w.m/pushed.txt"
check "rssub's metrics: the channel is up" test "$(sub_metric w rssub_channels_up)" = 1
sub_stop w
# nginx logs a WebSocket request when its connection ends
check "the hub token was on the upgrade (nginx's record)" wait_until 5 \
    grep -q "/channel/$CH.* auth=\"Bearer hub-token-2\" upgrade=\"websocket\" status=101" \
    "$NG/logs/access.log"
bad_wss() {
    sub_start x "$(src_url p)" "$TMP/x.m" "$TMP/x.db" --channel "$WSS" \
        --cacert "$PKI/otherca.pem" --push-timeout 60s --poll-interval 60s
}
SUB_READY_SECS=20
bad_wss 2>/dev/null
check "wss with a wrong CA: refused, said why" wait_until 15 \
    grep -q 'lws: SSL error: unable to get local issuer certificate' "${SUB_LOG[x]}"
check "wss with a wrong CA: the channel never connected" \
    test -z "$(grep -E 'msg="?channel connected"? uri=wss://' "${SUB_LOG[x]}")"
sub_stop x

# a client certificate over wss: nginx asks for one of testca
WSS2=wss://127.0.0.1:$NGPORT2/channel/$CH
SUB_READY_SECS=30
if sub_start c "$(src_url p)" "$TMP/c.m" "$TMP/c.db" --channel "$WSS2" \
        --cacert "$PKI/testca.pem" --client-cert "$PKI/client.pem" \
        --client-key "$PKI/client.key" \
        --push-timeout 60s --poll-interval 60s --pull-interval 0; then
    ok "rssub run with a wss channel and --client-cert: ready"
else
    bad "rssub run with a wss channel and --client-cert" "$(tail -n 20 "${SUB_LOG[c]}")"
fi
check "wss with a client certificate: the channel is connected" wait_until 15 \
    grep -Eq "msg=\"?channel connected\"? uri=wss://127.0.0.1:$NGPORT2/" "${SUB_LOG[c]}"
printf 'pushed over mutual tls\n' >"$D5/mtls.txt"
check "a change arrives over it" wait_until 20 cmp "$D5/mtls.txt" "$TMP/c.m/mtls.txt"
sub_stop c
check "nginx verified the certificate on the upgrade" wait_until 5 \
    grep -q "/channel/$CH[^ ]* verify=SUCCESS status=101" "$NG/logs/mtls.log"
SUB_READY_SECS=20
sub_start y "$(src_url p)" "$TMP/y.m" "$TMP/y.db" --channel "$WSS2" \
    --cacert "$PKI/testca.pem" --push-timeout 60s --poll-interval 60s \
    2>/dev/null
sleep 3
check "without one: the channel never connects" \
    test -z "$(grep -E 'msg="?channel connected"? uri=wss://' "${SUB_LOG[y]}")"
check "nginx refused the upgrade (no certificate)" \
    grep -q "/channel/$CH[^ ]* verify=NONE status=400" "$NG/logs/mtls.log"
check "and rssub said so" \
    grep -q "lws_client_handshake: got bad HTTP response '400'" "${SUB_LOG[y]}"
sub_stop y
stop_pid "${BG_PID[nginx]}"
unset "BG_PID[nginx]"
src_stop p
src_stop s 2>/dev/null
sub_finish
