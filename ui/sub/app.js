/* app.js - rssub's dashboard: polls /status.json (the session, each
 * Capability List's mode, lag, pending and failed resources, positions,
 * the recent changes) and draws the rate of changes applied. Everything
 * from the daemon is rendered as text. */
"use strict";

const POLL_MS = 2000;
const { el, setText, setPill, getJSON, num, rate, dur, clock } = RS;

const rates = new RS.Rates(["applied", "failed"], 150);
let polls = 0;

const MODE_KIND = { live: "ok", polling: "warn", pulling: "warn",
                    reconnecting: "bad", waiting: "" };
const OUTCOME_KIND = { created: "ok", updated: "ok", deleted: "ok",
                       unchanged: "", retry: "warn", failed: "bad", refused: "bad" };

function rows(tbody, list, cols, empty) {
    const out = list.map(x => el("tr", {}, ...cols(x)));
    if (!out.length)
        out.push(el("tr", {}, el("td", { colspan: 8, class: "empty" }, empty)));
    document.querySelector(tbody).replaceChildren(...out);
}

function render(st) {
    const a = st.applied || {};
    rates.add(st.time_ms, [(a.created || 0) + (a.updated || 0) + (a.deleted || 0),
                           (a.failed || 0) + (a.retry || 0)]);
    setText("source", st.source);
    const kind = st.state === "ready" ? "ok" : st.state === "draining" ? "warn" : "";
    setPill("state", st.state, kind);
    setText("r-applied", rate(rates.current(0)));
    setText("c-lag", st.lag_s > 0 ? dur(Math.round(st.lag_s * 1000)) : "0");
    setText("c-pending", st.pending < 0 ? "?" : num(st.pending));
    setText("c-failed", st.failed < 0 ? "?" : num(st.failed));
    setText("c-created", num(a.created));
    setText("c-updated", num(a.updated));
    setText("c-deleted", num(a.deleted));
    RS.chart(document.getElementById("chart"), rates);

    rows("#lists tbody", st.lists || [], l => [
        el("td", { class: "uri" }, l.caplist),
        el("td", { class: "mode", "data-mode": l.mode }, RS.pill(l.mode, MODE_KIND[l.mode])),
        el("td", {}, l.phase + (st.pulling === l.caplist ? " (pull running)" : "")),
        el("td", {}, l.transport),
        el("td", {}, l.transport === "websocket" ? (l.channel_up ? "up" : "down")
                      : l.transport === "websub" ? (l.websub_failing ? "failing" : "subscribed") : "–"),
        el("td", {}, l.baselined ? "done" : "not yet"),
    ], "no Capability List found yet");
    setText("n-lists", (st.lists || []).length);

    rows("#recent tbody", st.recent || [], r => [
        el("td", { class: "mono" }, clock(r.at_ms)),
        el("td", { class: "outcome" }, RS.pill(r.outcome, OUTCOME_KIND[r.outcome])),
        el("td", { class: "uri" }, r.uri),
        el("td", {}, r.what),
    ], "nothing applied in this run yet");
    setText("n-recent", (st.recent || []).length);

    rows("#failed tbody", st.failed_resources || [], f => [
        el("td", { class: "uri" }, f.uri),
        el("td", { class: "num" }, num(f.attempts)),
        el("td", { class: "mono" }, f.failed_ms ? clock(f.failed_ms) : "–"),
        el("td", {}, f.error),
    ], "none");
    setText("n-failed", (st.failed_resources || []).length);

    rows("#positions tbody", st.positions || [], p => [
        el("td", { class: "uri" }, p.channel),
        el("td", { class: "mono" }, p.id || "–"),
        el("td", { class: "mono" }, p.change_ms ? clock(p.change_ms) : "–"),
        el("td", { class: "mono" }, p.updated_ms ? clock(p.updated_ms) : "–"),
    ], "none yet");
}

async function poll() {
    try {
        render(await getJSON("../status.json"));
        polls++;
        document.body.setAttribute("data-polls", polls);
    } catch (e) {
        setPill("state", "unreachable: " + e.message, "bad");
    }
    setTimeout(poll, POLL_MS);
}

poll();
