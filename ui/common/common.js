/* common.js - what both dashboards share: building DOM from data (text
 * nodes only: nothing from a daemon is ever parsed as HTML), JSON polling,
 * number and time formats, rates from successive counter samples, and a
 * small SVG line chart. No library, no build step. */
"use strict";

const RS = (() => {
    /* el("td", {class: "num"}, "12", child...): strings become text nodes;
     * attribute values are set as attributes (never event handlers). */
    function el(tag, attrs, ...kids) {
        const e = document.createElement(tag);
        for (const [k, v] of Object.entries(attrs || {}))
            if (v !== undefined && v !== null && !k.startsWith("on"))
                e.setAttribute(k, String(v));
        for (const k of kids)
            if (k !== undefined && k !== null)
                e.append(k instanceof Node ? k : document.createTextNode(String(k)));
        return e;
    }

    function setText(id, v) {
        const e = document.getElementById(id);
        if (e)
            e.textContent = v === undefined || v === null ? "–" : String(v);
    }

    function pill(text, kind) {
        return el("span", { class: "pill " + (kind || "") }, text);
    }

    function setPill(id, text, kind) {
        const e = document.getElementById(id);
        if (!e)
            return;
        e.textContent = text;
        e.className = "pill " + (kind || "");
    }

    /* Extra headers for the JSON requests (a read token, once the hub
     * asks for one), kept for the tab only. */
    function token() {
        return sessionStorage.getItem("rs-token") || "";
    }

    function setToken(t) {
        if (t)
            sessionStorage.setItem("rs-token", t);
        else
            sessionStorage.removeItem("rs-token");
    }

    function authHeaders() {
        const t = token();
        return t ? { Authorization: "Bearer " + t } : {};
    }

    /* The hub's way for a browser to present a read token on a WebSocket
     * (docs/protocol.md 4): a second subprotocol holding it in base64url,
     * never put in the URL. */
    function wsProtocols() {
        const t = token();
        if (!t)
            return [];
        const b64 = btoa(String.fromCharCode(...new TextEncoder().encode(t)))
            .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
        return ["resourcesync-notification", "rspush.bearer." + b64];
    }

    async function getJSON(url) {
        const r = await fetch(url, { cache: "no-store", headers: authHeaders() });
        if (!r.ok)
            throw new Error(url + ": HTTP " + r.status);
        return r.json();
    }

    function num(n) {
        if (n === undefined || n === null)
            return "–";
        return Number(n).toLocaleString("en-US");
    }

    function rate(r) {
        if (r === undefined || r === null || !isFinite(r))
            return "–";
        return r >= 100 ? r.toFixed(0) : r >= 10 ? r.toFixed(1) : r.toFixed(2);
    }

    function dur(ms) {
        if (ms === undefined || ms === null || ms < 0)
            return "–";
        if (ms < 1000)
            return ms + " ms";
        const s = ms / 1000;
        if (s < 120)
            return s.toFixed(s < 10 ? 1 : 0) + " s";
        if (s < 7200)
            return (s / 60).toFixed(0) + " min";
        return (s / 3600).toFixed(1) + " h";
    }

    function clock(ms) {
        return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
    }

    /* Counter samples → per-second rates over the last `keep` samples.
     * A counter that went down (the daemon restarted) starts afresh. */
    class Rates {
        constructor(names, keep) {
            this.names = names;
            this.keep = keep;
            this.last = null;
            this.series = names.map(() => []);
            this.times = [];
        }
        add(tms, values) {
            if (this.last !== null && tms > this.last.t) {
                const dt = (tms - this.last.t) / 1000;
                this.times.push(tms);
                this.names.forEach((n, i) => {
                    const d = values[i] - this.last.v[i];
                    this.series[i].push(d >= 0 ? d / dt : 0);
                    if (this.series[i].length > this.keep)
                        this.series[i].shift();
                });
                if (this.times.length > this.keep)
                    this.times.shift();
            }
            this.last = { t: tms, v: values };
        }
        current(i) {
            const s = this.series[i];
            return s.length ? s[s.length - 1] : null;
        }
    }

    /* Draw the series of r into an <svg class="chart">: one polyline per
     * series, the span and the highest value on the axis. */
    function chart(svg, r) {
        const NS = "http://www.w3.org/2000/svg";
        /* the drawing's units are the element's pixels: text keeps its
         * size whatever the width */
        const W = Math.max(300, Math.round(svg.getBoundingClientRect().width) || 600);
        const H = 140, L = 40, B = 16;
        const mk = (tag, attrs, text) => {
            const e = document.createElementNS(NS, tag);
            for (const [k, v] of Object.entries(attrs))
                e.setAttribute(k, String(v));
            if (text !== undefined)
                e.textContent = text;
            return e;
        };
        let max = 1;
        for (const s of r.series)
            for (const v of s)
                max = Math.max(max, v);
        max = Math.ceil(max);
        const kids = [
            mk("line", { class: "grid", x1: L, y1: 4, x2: W, y2: 4 }),
            mk("line", { class: "grid", x1: L, y1: H - B, x2: W, y2: H - B }),
            mk("text", { class: "axis", x: 2, y: 12 }, rate(max) + "/s"),
            mk("text", { class: "axis", x: 2, y: H - B }, "0"),
        ];
        /* at least a minute wide (30 samples), growing to r.keep */
        const n = Math.min(r.keep, Math.max(30, r.times.length));
        r.series.forEach((s, i) => {
            const pts = s.map((v, j) => {
                const x = L + (W - L) * (n - s.length + j) / Math.max(1, n - 1);
                const y = H - B - (H - B - 4) * v / max;
                return x.toFixed(1) + "," + y.toFixed(1);
            });
            if (pts.length) {
                kids.push(mk("polyline", { class: "s" + i, points: pts.join(" ") }));
                const [x, y] = pts[pts.length - 1].split(",");
                kids.push(mk("circle", { class: "s" + i, cx: x, cy: y, r: 3 }));
            }
        });
        if (r.times.length > 1) {
            const span = (r.times[r.times.length - 1] - r.times[0]) / 1000;
            kids.push(mk("text", { class: "axis", x: L, y: H - 2 },
                         "last " + dur(span * 1000)));
        }
        svg.setAttribute("viewBox", "0 0 " + W + " " + H);
        svg.replaceChildren(...kids);
    }

    return { el, setText, pill, setPill, getJSON, num, rate, dur, clock,
             Rates, chart, authHeaders, token, setToken, wsProtocols };
})();
