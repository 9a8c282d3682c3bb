/* app.js - rshub's dashboard: polls GET /topics (topics, backlogs, this
 * node's WebSocket subscribers, the WebSub subscriptions it delivers) and
 * /ui/node.json (counters, for rates), and tails one topic over its real
 * WebSocket channel. Everything from the hub is rendered as text. */
"use strict";

const POLL_MS = 2000;
const TAIL_MAX = 200;
const { el, setText, setPill, getJSON, num, rate, dur, clock } = RS;

const rates = new RS.Rates(["publishes", "deliveries"], 150);
let topics = [];
let polls = 0;

/* ------------------------------------------------------------ polling */

function backlogCells(b) {
    if (!b)
        return [el("td", { class: "num empty" }, "?"), el("td"), el("td"), el("td")];
    return [
        el("td", { class: "num" }, num(b.length)),
        el("td", { class: "mono" }, b.first_id || "–"),
        el("td", { class: "mono" }, b.last_id || "–"),
        el("td", { class: "mono" }, b.trimmed_through || "–"),
    ];
}

function renderTopics() {
    const rows = topics.map(t => {
        const btn = el("button", { type: "button", "data-name": t.name }, "tail");
        btn.addEventListener("click", () => tailOpen(t.name));
        return el("tr", { "data-name": t.name },
            el("td", { class: "mono" }, t.name),
            el("td", { class: "uri" }, t.topic),
            el("td", {}, t.kind),
            ...backlogCells(t.backlog),
            el("td", { class: "num" }, num(t.subscribers)),
            el("td", { class: "num" }, num((t.websub || []).length)),
            el("td", {}, btn));
    });
    const tb = document.querySelector("#topics tbody");
    if (!rows.length)
        rows.push(el("tr", {}, el("td", { colspan: 10, class: "empty" }, "no topic yet")));
    tb.replaceChildren(...rows);
    setText("n-topics", topics.length);

    const subs = [];
    for (const t of topics)
        for (const s of t.websub || []) {
            const kind = s.state === "active" ? "ok" : s.state === "failing" ? "bad" : "warn";
            subs.push(el("tr", {},
                el("td", { class: "mono" }, t.name),
                el("td", { class: "uri" }, s.callback),
                el("td", {}, RS.pill(s.state, kind)),
                el("td", { class: "mono" }, s.cursor),
                el("td", { class: "num" }, num(s.attempts)),
                el("td", { class: "num" }, num(s.delivered)),
                el("td", { class: "num" }, dur(s.lag_ms)),
                el("td", {}, s.lease_expires_ms ? clock(s.lease_expires_ms) : "–")));
        }
    if (!subs.length)
        subs.push(el("tr", {}, el("td", { colspan: 8, class: "empty" }, "none on this node")));
    document.querySelector("#websub tbody").replaceChildren(...subs);
    setText("n-websub", subs.length === 1 && subs[0].querySelector(".empty") ? 0 : subs.length);

    /* the tail's choice list follows the topics */
    const sel = document.getElementById("tail-select");
    const want = tail.name || sel.value;
    sel.replaceChildren(el("option", { value: "" }, "(choose a topic)"),
        ...topics.map(t => el("option", { value: t.name }, t.name)));
    sel.value = topics.some(t => t.name === want) ? want : "";
}

function renderNode(n) {
    rates.add(n.time_ms, [n.publish.accepted,
                          n.websocket.frames + n.websub.delivered]);
    setText("node-id", "node " + n.node);
    setText("hub-url", n.hub);
    setText("r-pub", rate(rates.current(0)));
    setText("r-del", rate(rates.current(1)));
    setText("c-accepted", num(n.publish.accepted));
    setText("c-rejected", num(n.publish.rejected));
    setText("c-frames", num(n.websocket.frames));
    setText("c-wsopen", num(n.websocket.open));
    setText("c-wsdel", num(n.websub.delivered));
    setText("c-wslag", dur(n.websub.lag_max_ms));
    RS.chart(document.getElementById("chart"), rates);
    if (n.draining)
        setPill("state", "draining", "warn");
    else if (!n.redis_up)
        setPill("state", "Redis unreachable", "bad");
    else
        setPill("state", "ready", "ok");
}

async function poll() {
    try {
        const [n, t] = await Promise.all([getJSON("node.json"), getJSON("../topics")]);
        topics = Array.isArray(t) ? t : [];
        renderNode(n);
        renderTopics();
        if (!tail.name && !tail.ws) {
            const h = new URLSearchParams(location.hash.slice(1)).get("tail");
            if (h && topics.some(x => x.name === h))
                tailOpen(h);
        }
        polls++;
        document.body.setAttribute("data-polls", polls);
    } catch (e) {
        setPill("state", "unreachable: " + e.message, "bad");
    }
    setTimeout(poll, POLL_MS);
}

/* --------------------------------------------------------------- tail */

/* The channel is read as any subscriber reads it (docs/protocol.md 4):
 * one notification per text frame, reconnecting with since=LAST. */
const tail = { name: "", ws: null, last: "", count: 0, retry: null };

function tailOpen(name) {
    tailClose();
    const t = topics.find(x => x.name === name);
    tail.name = name;
    document.getElementById("tail-select").value = name;
    history.replaceState(null, "", "#tail=" + encodeURIComponent(name));
    if (!t || !t.websocket) {
        setPill("tail-state", "no channel", "bad");
        return;
    }
    const url = t.websocket + (tail.last ? "?since=" + encodeURIComponent(tail.last) : "");
    let ws;
    try {
        ws = new WebSocket(url, RS.wsProtocols());
    } catch (e) {
        setPill("tail-state", "cannot open: " + e.message, "bad");
        return;
    }
    tail.ws = ws;
    setPill("tail-state", "connecting", "warn");
    ws.onopen = () => setPill("tail-state", "live", "ok");
    ws.onmessage = ev => tailAdd(String(ev.data));
    ws.onclose = ev => {
        if (tail.ws !== ws)
            return;
        tail.ws = null;
        setPill("tail-state", "closed " + ev.code + (ev.reason ? " " + ev.reason : ""),
                ev.code === 1000 ? "" : "warn");
        /* 4001: the backlog no longer holds what followed LAST: live again */
        if (ev.code === 4001)
            tail.last = "";
        tail.retry = setTimeout(() => { if (tail.name === name) tailOpen(name); }, 2000);
    };
}

function tailClose() {
    clearTimeout(tail.retry);
    if (tail.ws) {
        const ws = tail.ws;
        tail.ws = null;
        ws.close(1000);
    }
}

/* Stream ids "MS-SEQ" in order. */
function idCmp(a, b) {
    const re = /^\d+-\d+$/;
    if (!re.test(a) || !re.test(b))
        return 1;
    const [am, as] = a.split("-").map(x => BigInt(x || 0));
    const [bm, bs] = b.split("-").map(x => BigInt(x || 0));
    return am !== bm ? (am < bm ? -1 : 1) : as === bs ? 0 : as < bs ? -1 : 1;
}

function tailAdd(xml) {
    const doc = new DOMParser().parseFromString(xml, "application/xml");
    const root = doc.documentElement;
    const id = root ? root.getAttributeNS("urn:x-rshub:1", "id") || "" : "";
    if (id && tail.last && idCmp(id, tail.last) <= 0)
        return;   /* a repeat at a reconnection */
    if (id)
        tail.last = id;
    const RS_NS = "http://www.openarchives.org/rs/terms/";
    const items = [];
    for (const u of Array.from(doc.getElementsByTagNameNS("http://www.sitemaps.org/schemas/sitemap/0.9", "url")).slice(0, 20)) {
        const loc = u.getElementsByTagNameNS("http://www.sitemaps.org/schemas/sitemap/0.9", "loc")[0];
        const md = u.getElementsByTagNameNS(RS_NS, "md")[0];
        items.push(el("div", { class: "item" },
            el("span", { class: "change" }, md ? md.getAttribute("change") || "" : ""),
            el("span", { class: "mono" }, loc ? loc.textContent : "")));
    }
    const li = el("li", { class: "note", "data-id": id },
        el("span", { class: "meta mono" }, new Date().toISOString().slice(11, 23)),
        el("span", { class: "meta mono" }, id),
        ...items,
        el("details", {}, el("summary", {}, "XML"), el("pre", {}, xml)));
    const ol = document.getElementById("tail");
    ol.prepend(li);
    while (ol.children.length > TAIL_MAX)
        ol.lastElementChild.remove();
    tail.count++;
    setText("n-tail", tail.count);
}

document.getElementById("tail-select").addEventListener("change", ev => {
    tail.last = "";
    if (ev.target.value)
        tailOpen(ev.target.value);
    else {
        tail.name = "";
        tailClose();
        setPill("tail-state", "closed", "");
    }
});
document.getElementById("tail-clear").addEventListener("click", () => {
    document.getElementById("tail").replaceChildren();
    tail.count = 0;
    setText("n-tail", 0);
});
document.getElementById("token").value = RS.token();
document.getElementById("token-use").addEventListener("click", () => {
    RS.setToken(document.getElementById("token").value.trim());
    if (tail.name)
        tailOpen(tail.name);
});
poll();
