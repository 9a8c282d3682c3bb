#!/usr/bin/env bash
# test_hub_private.sh - read access per topic (issue 16, docs/protocol.md 4,
# 5 and 6): a real rshub and redis-server. Channels refused without a
# credential (401) and with a wrong one (403); served with a static token,
# with HS256, RS256 and ES256 JWTs (keys made here with openssl, tokens
# signed by PyJWT), and the browser's way (the rspush.bearer. subprotocol,
# never echoed); alg none and HS256 signed with the public key refused; a
# JWT cut with 4008 at its exp; a static token removed by SIGHUP cutting
# its connection with 4008 while another stays; WebSub subscribe refused
# with no request reaching the callback; /topics and capabilitylist
# entries redacted, full for admin; refusals counted; no token in the log;
# token files readable by others refused.
set -u
# shellcheck source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/websub.sh
. "$(dirname "$0")/lib/websub.sh"

if ! "$PY" -c 'import jwt, cryptography, websockets' 2>/dev/null; then
    echo "SKIP: needs python3-jwt, python3-cryptography, python3-websockets"
    echo "0 passed, 0 failed"
    exit 0
fi

PT=$TMP/privtool.py
cat >"$PT" <<'EOF'
"""The test's own client: raw upgrades (status and body of a refusal),
websockets sessions that report how they end, JWTs, WebSub forms."""
import asyncio, base64, http.client, json, os, sys, time, urllib.parse
sys.path.insert(0, os.environ["LIB"])
sys.dont_write_bytecode = True
import hubtool  # noqa: E402
import jwt  # noqa: E402
import websockets  # noqa: E402


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def raw_upgrade(port, path, headers):
    import socket
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    req = ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
           "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" % path)
    for h in headers:
        req += h + "\r\n"
    s.sendall((req + "\r\n").encode())
    data = b""
    while b"\r\n\r\n" not in data:
        d = s.recv(4096)
        if not d:
            break
        data += d
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    hdrs = dict(l.split(": ", 1) for l in lines[1:] if ": " in l)
    if lines[0].split()[1] != "101":
        n = int(hdrs.get("Content-Length", "0"))
        while len(body) < n:
            d = s.recv(4096)
            if not d:
                break
            body += d
    s.close()
    return int(lines[0].split()[1]), hdrs, body.decode(errors="replace")


def cmd_upgrade(a):
    """upgrade PORT PATH [HEADER...]: prints 'STATUS|BODY|HEADERS-JSON'."""
    st, hdrs, body = raw_upgrade(int(a[0]), a[1], a[2:])
    print("%d|%s|%s" % (st, body.strip(), json.dumps(hdrs)))


async def session(port, name, auth, sub, hold, publish, topic, hub_http):
    hdrs = {"Authorization": "Bearer " + auth} if auth else {}
    protos = ["resourcesync-notification"]
    if sub:
        protos.append("rspush.bearer." + b64u(sub.encode()))
    out = {"connected": False}
    t0 = time.time()
    try:
        ws = await websockets.connect("ws://127.0.0.1:%d/channel/%s" % (port, name),
                                      extra_headers=hdrs, subprotocols=protos,
                                      ping_interval=None, open_timeout=5)
    except websockets.exceptions.InvalidStatusCode as e:
        out["status"] = e.status_code
        return out
    out["connected"] = True
    out["subprotocol"] = ws.subprotocol
    if publish:
        st, _, _ = hubtool.http_request(
            hub_http, "POST", "/hub", body=hubtool.gen_doc("change", 1),
            headers={"Content-Type": "application/xml",
                     "Link": '<%s>; rel="self"' % topic})
        out["published"] = st
        try:
            msg = await asyncio.wait_for(ws.recv(), 5)
            out["got"] = "changelist-notification" in msg
        except Exception as e:  # noqa: BLE001
            out["got"] = False
            out["recv_error"] = repr(e)
    # hold, or until the hub closes
    try:
        await asyncio.wait_for(ws.wait_closed(), hold)
    except asyncio.TimeoutError:
        pass
    out["closed_after"] = round(time.time() - t0, 2)
    out["close_code"] = ws.close_code
    out["close_reason"] = ws.close_reason
    await ws.close()
    return out


def cmd_session(a):
    """session PORT NAME AUTH SUB HOLD [publish TOPIC HTTP]: JSON outcome."""
    port, name, auth, sub, hold = int(a[0]), a[1], a[2], a[3], float(a[4])
    pub = len(a) > 5 and a[5] == "publish"
    r = asyncio.run(session(port, name, auth if auth != "-" else None,
                            sub if sub != "-" else None, hold, pub,
                            a[6] if pub else None, int(a[7]) if pub else 0))
    print(json.dumps(r), flush=True)


def cmd_jwt(a):
    """jwt ALG KEYFILE EXP_IN TOPICS|- [admin]: a signed token."""
    alg, keyf, exp_in, topics = a[0], a[1], int(a[2]), a[3]
    claims = {}
    if exp_in != 0:
        claims["exp"] = int(time.time()) + exp_in
    if topics != "-":
        claims["topics"] = topics.split(",")
    if len(a) > 4 and a[4] == "admin":
        claims["admin"] = True
    if alg == "none":
        h = b64u(json.dumps({"alg": "none", "typ": "JWT"}).encode())
        p = b64u(json.dumps(claims).encode())
        print("%s.%s." % (h, p))
        return
    key = open(keyf, "rb").read()
    if alg == "HS256-with-pubkey":
        # algorithm confusion: HMAC keyed with the public key's PEM
        import hashlib, hmac
        h = b64u(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        p = b64u(json.dumps(claims).encode())
        sig = hmac.new(key, ("%s.%s" % (h, p)).encode(), hashlib.sha256).digest()
        print("%s.%s.%s" % (h, p, b64u(sig)))
        return
    if alg == "HS256":
        key = key.split(b"\n")[0]
    print(jwt.encode(claims, key, algorithm=alg))


def cmd_form(a):
    """form HTTP AUTH|- k=v...: POST /hub form; prints 'STATUS|BODY'."""
    port, auth = int(a[0]), a[1]
    body = urllib.parse.urlencode([tuple(kv.split("=", 1)) for kv in a[2:]])
    h = {"Content-Type": "application/x-www-form-urlencoded"}
    if auth != "-":
        h["Authorization"] = auth
    st, _, data = hubtool.http_request(port, "POST", "/hub", body=body.encode(),
                                       headers=h)
    print("%d|%s" % (st, data.decode().strip()))


def cmd_get(a):
    """get HTTP PATH AUTH|-: prints 'STATUS|BODY'."""
    h = {"Authorization": a[2]} if a[2] != "-" else {}
    st, _, data = hubtool.http_request(int(a[0]), "GET", a[1], headers=h)
    print("%d|%s" % (st, data.decode()))


def cmd_names(a):
    """names HTTP AUTH|-: the names GET /topics lists, sorted, comma-joined."""
    h = {"Authorization": a[1]} if a[1] != "-" else {}
    st, _, data = hubtool.http_request(int(a[0]), "GET", "/topics", headers=h)
    if st != 200:
        print("status %d" % st)
        return
    print(",".join(sorted(t["name"] for t in json.loads(data))))


{"upgrade": cmd_upgrade, "session": cmd_session, "jwt": cmd_jwt,
 "form": cmd_form, "get": cmd_get, "names": cmd_names}[sys.argv[1]](sys.argv[2:])
EOF
export LIB=$RS_SOURCE_DIR/tests/integration/lib
pt() { "$PY" "$PT" "$@"; }
jf() { "$PY" -c "import json,sys; d=json.loads(sys.stdin.read()); print(d.get('$1'))"; }

# --------------------------------------------------------------- set-up
K=$TMP/keys
mkdir -p "$K"
openssl rand -hex 32 >"$K/hs.secret"
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$K/rsa.pem" 2>/dev/null
openssl pkey -in "$K/rsa.pem" -pubout -out "$K/rsa.pub"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$K/ec.pem" 2>/dev/null
openssl pkey -in "$K/ec.pem" -pubout -out "$K/ec.pub"
printf '# admin\nadm1n-t0ken-xyz\n' >"$K/admin"
chmod 600 "$K/hs.secret" "$K/admin"

CONF=$TMP/hub.conf
write_conf() {   # write_conf READ-TOKEN-LINES...
    {
        echo "[topic pub]"
        echo "uri = http://example.com/pub"
        echo "[topic priv]"
        echo "uri = http://example.com/priv"
        for t in "$@"; do echo "read-token = $t"; done
        echo "[topic jwtonly]"
        echo "uri = http://example.com/jwtonly"
        echo "read-private = true"
    } >"$CONF"
}
write_conf s3cret-AAA s3cret-BBB

redis_start || exit 1
hub_start h1 -c "$CONF" "${WS_HUB_ARGS[@]}" --admin-token-file "$K/admin" \
    --read-jwt-secret-file "$K/hs.secret" --read-jwt-public-key-file "$K/rsa.pub" ||
    { bad "rshub starts with read credentials"; finish; }
WS=${HUB_WS[h1]}
HTTP=${HUB_HTTP[h1]}

up() { pt upgrade "$WS" "$@" | cut -d'|' -f1; }
upbody() { pt upgrade "$WS" "$@" | cut -d'|' -f2; }

# ---------------------------------------------------------- WebSocket
note "channels: who gets in"
expect_eq "public channel: no credential needed (101)" "$(up /channel/pub)" 101
r=$(pt upgrade "$WS" /channel/priv)
expect_eq "private channel, no credential: 401" "${r%%|*}" 401
check "401 says why in one line" grep -q 'error: this topic needs a read credential' <<<"$r"
check "401 carries WWW-Authenticate: Bearer" grep -q 'WWW-Authenticate.*Bearer' <<<"$r"
expect_eq "private channel, wrong token: 403" \
    "$(up /channel/priv 'Authorization: Bearer nope')" 403
check "403 says why" grep -q 'not valid' <<<"$(upbody /channel/priv 'Authorization: Bearer nope')"
expect_eq "an unknown channel looks private to a caller without a credential" \
    "$(up /channel/nosuch)" 401
expect_eq "two Authorization headers: 400" \
    "$(up /channel/priv 'Authorization: Bearer s3cret-AAA' 'Authorization: Bearer x')" 400

out=$(pt session "$WS" priv s3cret-AAA - 0.5 publish http://example.com/priv "$HTTP")
expect_eq "static token: served, and the notification arrives" "$(jf got <<<"$out")" True
expect_eq "static token in Authorization, any case of 'bearer'" \
    "$(up /channel/priv 'authorization: bEaReR s3cret-BBB')" 101
expect_eq "a jwtonly channel refuses a static topic token (403)" \
    "$(up /channel/jwtonly 'Authorization: Bearer s3cret-AAA')" 403
expect_eq "admin token reads every channel" \
    "$(up /channel/jwtonly 'Authorization: Bearer adm1n-t0ken-xyz')" 101

note "signed tokens"
HS=$(pt jwt HS256 "$K/hs.secret" 300 priv)
expect_eq "HS256 JWT naming the topic: 101" "$(up /channel/priv "Authorization: Bearer $HS")" 101
HSP=$(pt jwt HS256 "$K/hs.secret" 300 'http://example.com/pri*')
expect_eq "HS256 JWT with a URI pattern: 101" "$(up /channel/priv "Authorization: Bearer $HSP")" 101
HSO=$(pt jwt HS256 "$K/hs.secret" 300 other,pub)
expect_eq "JWT for other topics: 403" "$(up /channel/priv "Authorization: Bearer $HSO")" 403
check "403 says not allowed" grep -q 'does not allow' <<<"$(upbody /channel/priv "Authorization: Bearer $HSO")"
HSX=$(pt jwt HS256 "$K/hs.secret" -10 priv)
expect_eq "expired JWT: 403" "$(up /channel/priv "Authorization: Bearer $HSX")" 403
HSN=$(pt jwt HS256 "$K/hs.secret" 0 priv)
expect_eq "JWT without exp: 403" "$(up /channel/priv "Authorization: Bearer $HSN")" 403
RS=$(pt jwt RS256 "$K/rsa.pem" 300 'jwt*')
expect_eq "RS256 JWT (pattern jwt*): 101 on jwtonly" \
    "$(up /channel/jwtonly "Authorization: Bearer $RS")" 101
ESW=$(pt jwt ES256 "$K/ec.pem" 300 jwtonly)
expect_eq "ES256 JWT while the hub holds an RSA key: 403" \
    "$(up /channel/jwtonly "Authorization: Bearer $ESW")" 403
NONE=$(pt jwt none - 300 jwtonly admin)
expect_eq "alg none refused (403)" "$(up /channel/jwtonly "Authorization: Bearer $NONE")" 403
CONF_TOK=$(pt jwt HS256-with-pubkey "$K/rsa.pub" 300 jwtonly admin)
expect_eq "HS256 signed with the public key refused (403)" \
    "$(up /channel/jwtonly "Authorization: Bearer $CONF_TOK")" 403
ADMJ=$(pt jwt HS256 "$K/hs.secret" 300 - admin)
expect_eq "admin JWT reads every channel" "$(up /channel/jwtonly "Authorization: Bearer $ADMJ")" 101

note "the browser's way: Sec-WebSocket-Protocol"
out=$(pt session "$WS" priv - s3cret-BBB 0.3)
expect_eq "rspush.bearer.<base64url> subprotocol: served" "$(jf connected <<<"$out")" True
expect_eq "the hub echoes resourcesync-notification, never the token" \
    "$(jf subprotocol <<<"$out")" resourcesync-notification
B64=$("$PY" -c 'import base64,sys; print(base64.urlsafe_b64encode(sys.argv[1].encode()).rstrip(b"=").decode())' "$RS")
r=$(pt upgrade "$WS" /channel/jwtonly "Sec-WebSocket-Protocol: resourcesync-notification, rspush.bearer.$B64")
expect_eq "a JWT by subprotocol: 101" "${r%%|*}" 101
check "the 101 names only resourcesync-notification" \
    grep -q '"Sec-WebSocket-Protocol": "resourcesync-notification"' <<<"$r"
expect_eq "a wrong token by subprotocol: 403" \
    "$(up /channel/priv "Sec-WebSocket-Protocol: resourcesync-notification, rspush.bearer.$(printf 'wrong' | base64 | tr -d '=')")" 403
expect_eq "a subprotocol token that is not base64url: 400" \
    "$(up /channel/priv 'Sec-WebSocket-Protocol: rspush.bearer.a+b/c')" 400

note "expiry and reload: 4008"
EXP=$(pt jwt HS256 "$K/hs.secret" 3 priv)
t0=$(date +%s.%N)
out=$(pt session "$WS" priv "$EXP" - 10)
expect_eq "a JWT at its exp: closed with 4008" "$(jf close_code <<<"$out")" 4008
check "closed between 1.5 s and 5 s after connecting (exp was 3 s away)" \
    "$PY" -c "import sys; a=float(sys.argv[1]); sys.exit(0 if 1.5 <= a <= 5.0 else 1)" \
    "$(jf closed_after <<<"$out")"
check "the close reason says why" grep -q 'expired or revoked' <<<"$(jf close_reason <<<"$out")"

"$PY" "$PT" session "$WS" priv s3cret-BBB - 12 >"$TMP/keepB.json" &
BG_PID[keepB]=$!
"$PY" "$PT" session "$WS" priv s3cret-AAA - 8 >"$TMP/keepA.json" &
BG_PID[keepA]=$!
"$PY" "$PT" session "$WS" pub - - 8 >"$TMP/keepP.json" &
BG_PID[keepP]=$!
sleep 1.5
write_conf s3cret-AAA
kill -HUP "${HUB_PID[h1]}"
bg_wait keepB 15
outB=$(cat "$TMP/keepB.json")
expect_eq "SIGHUP removed s3cret-BBB: its connection closed with 4008" \
    "$(jf close_code <<<"$outB")" 4008
check "... within seconds of the reload" \
    "$PY" -c "import sys; sys.exit(0 if float(sys.argv[1]) < 6 else 1)" "$(jf closed_after <<<"$outB")"
bg_wait keepA 15
bg_wait keepP 15
expect_eq "the s3cret-AAA connection stays open through the reload" \
    "$(jf close_code <<<"$(cat "$TMP/keepA.json")")" None
expect_eq "the public connection stays open through the reload" \
    "$(jf close_code <<<"$(cat "$TMP/keepP.json")")" None
expect_eq "after the reload s3cret-BBB is refused (403)" \
    "$(up /channel/priv 'Authorization: Bearer s3cret-BBB')" 403
check "the reload was logged" grep -q 'read credentials in force again' "${HUB_LOG[h1]}"

# --------------------------------------------------------------- WebSub
note "WebSub: subscribe needs the credential"
cb_start cb || { bad "callback server"; finish; }
CB=$(cb_url cb /c1)
r=$(pt form "$HTTP" - hub.mode=subscribe hub.topic=http://example.com/priv "hub.callback=$CB")
expect_eq "subscribe without Authorization: 401" "${r%%|*}" 401
r=$(pt form "$HTTP" "Bearer wrong" hub.mode=subscribe hub.topic=http://example.com/priv "hub.callback=$CB")
expect_eq "subscribe with a wrong token: 403" "${r%%|*}" 403
r=$(pt form "$HTTP" - hub.mode=unsubscribe hub.topic=http://example.com/priv "hub.callback=$CB")
expect_eq "unsubscribe without Authorization: 401" "${r%%|*}" 401
r=$(pt form "$HTTP" - hub.mode=subscribe hub.topic=http://example.com/priv "hub.callback=$CB" hub.read_token=s3cret-AAA)
expect_eq "a token as a form parameter is not taken (401)" "${r%%|*}" 401
sleep 1
expect_eq "no request reached the callback server" "$(wc -l <"${CB_LOG[cb]}")" 0
r=$(pt form "$HTTP" "Bearer s3cret-AAA" hub.mode=subscribe hub.topic=http://example.com/priv "hub.callback=$CB")
expect_eq "subscribe with the token: 202" "${r%%|*}" 202
check "and its verification reaches the callback (the server records)" \
    cbq wait cb --path /c1 --method GET --mode subscribe --timeout 5

# --------------------------------------------------------------- status
note "/topics and capabilitylist entries"
expect_eq "/topics without a credential lists the public topic only" \
    "$(pt names "$HTTP" -)" pub
expect_eq "/topics with a topic token lists that topic too" \
    "$(pt names "$HTTP" 'Bearer s3cret-AAA')" priv,pub
expect_eq "/topics with an RS256 JWT for jwt*" "$(pt names "$HTTP" "Bearer $RS")" jwtonly,pub
expect_eq "/topics for admin lists every topic" \
    "$(pt names "$HTTP" 'Bearer adm1n-t0ken-xyz')" jwtonly,priv,pub
expect_eq "/topics with a bad credential: 403" "$(pt names "$HTTP" 'Bearer nope')" "status 403"
r=$(pt get "$HTTP" /topics/priv/capabilitylist-entries -)
expect_eq "capabilitylist entries of a private topic, no credential: 404 (hidden)" "${r%%|*}" 404
r=$(pt get "$HTTP" /topics/priv/capabilitylist-entries 'Bearer adm1n-t0ken-xyz')
expect_eq "... for admin: 200" "${r%%|*}" 200
r=$(pt get "$HTTP" /metrics -)
check "/metrics names no private topic" bash -c '! grep -q "priv\|jwtonly" <<<"$1"' _ "$r"

# -------------------------------------------------------------- counting
note "refusals counted and logged, never the token"
m=$(pt get "$HTTP" /metrics -)
for reason in no_credential bad_credential expired not_allowed; do
    check "rshub_read_refused_total{reason=\"$reason\"} counted" \
        "$PY" -c "import re,sys; m=re.search(r'rshub_read_refused_total\{reason=\"$reason\"\} (\d+)', sys.argv[1]); sys.exit(0 if m and int(m.group(1)) > 0 else 1)" "$m"
done
check "a refusal is logged with its reason" grep -q 'read access refused.*reason=' "${HUB_LOG[h1]}"
leaked=0
for tok in s3cret-AAA s3cret-BBB adm1n-t0ken-xyz "$HS" "$RS" "$B64" "$(head -n1 "$K/hs.secret")"; do
    grep -qF -- "$tok" "${HUB_LOG[h1]}" && leaked=$((leaked + 1))
done
expect_eq "no token or secret in rshub's log" "$leaked" 0
hub_stop h1
expect_eq "rshub exits 0" "$HUB_RC" 0
hub_asan_check h1

# ---------------------------------------------------------------- ES256
note "ES256 and the file checks"
hub_start h2 -c "$CONF" --read-jwt-public-key-file "$K/ec.pub" ||
    { bad "rshub starts with an EC key"; finish; }
WS=${HUB_WS[h2]}
ES=$(pt jwt ES256 "$K/ec.pem" 300 jwtonly)
expect_eq "ES256 JWT: 101" "$(up /channel/jwtonly "Authorization: Bearer $ES")" 101
expect_eq "RS256 JWT at an EC-keyed hub: 403" "$(up /channel/jwtonly "Authorization: Bearer $RS")" 403
hub_stop h2
hub_asan_check h2

cp "$K/admin" "$K/admin-open"
chmod 644 "$K/admin-open"
"$RSHUB" -c "$CONF" --listen 127.0.0.1:0 --redis "unix://$REDIS_SOCK" \
    --admin-token-file "$K/admin-open" >"$TMP/open.log" 2>&1
expect_eq "a token file readable by others: exit 2" "$?" 2
check "... saying so" grep -q 'readable by group or others' "$TMP/open.log"
printf 'short\n' >"$K/short.secret"
chmod 600 "$K/short.secret"
"$RSHUB" -c "$CONF" --listen 127.0.0.1:0 --redis "unix://$REDIS_SOCK" \
    --read-jwt-secret-file "$K/short.secret" >"$TMP/short.log" 2>&1
expect_eq "an HS256 secret under 32 bytes: exit 2" "$?" 2

finish
