#!/usr/bin/python3
"""bridge_source.py - a programmable pull-only ResourceSync Source for the
rsbridge tests (tests/integration/test_bridge*.sh) and its benchmark
(tests/bench/bench_bridge.sh).

`serve` keeps a directory of resources (ROOT/data) and applies seeded
random creates, updates and deletes to it when told to (the control URL),
reflecting each in its documents with its datetime, hashes, length, type
and lastmod. It answers on 127.0.0.1 at a port the kernel picks (written
to --ready as {"port":N}) in one of three shapes:

  A  Source Description, Capability List, a Resource List (written at
     start and on /_ctl/regen; plain, --rl-parts or --rl-pages), and a
     Change List Index over Change Lists: closed archives (`until`) and
     one open list, rotated every --rotate entries.
  B  a trailing-window Change List regenerated on every request, as in
     ../shared/spec/source-user-guide-example.txt: `from` is now minus
     --window, `until` is now, entries oldest first, --page-size a page,
     paged with ?page=N and rel="next"/"prev" (new entries land on the
     last page); --latest-only lists each resource once (its last
     change, as a list driven by a record's updated_at does). Its
     Resource List is paged the same way.
  C  a Resource List only (plain, an index over parts, or rel="next"
     pages), regenerated after every batch of changes: one generation a
     batch, each generation's parts and pages under their own names.

Documents are served from memory (also written under ROOT for a
post-mortem) with a strong ETag (the MD5 of the bytes), Last-Modified,
If-None-Match / If-Modified-Since (304) and HEAD; resources are served by
static_source.py's handler, whose fault rules (/_ctl/rules) apply to them.

Control URL (never logged):
  GET  /_ctl/status             shape, journal length, files, generation
  GET  /_ctl/journal[?from=K]   the changes applied, in order, each with
                                the time the documents first showed it
  GET  /_ctl/log[?from=K]       the access log (also --access-log, JSON
                                lines): t0, t1 (start, end), method, path,
                                status, user agent, conditional headers,
                                Retry-After, the fault applied, the
                                generation served
  GET  /_ctl/gens               shape C: every generation's state
  POST /_ctl/change  {"n":K}                  one batch of K changes now
  POST /_ctl/auto    {"batches":B,"every":S,"min":1,"max":K}
                                a thread applying B batches of 1..K
                                changes, 0.5 S to 1.5 S apart
  POST /_ctl/fault   {"mode":M,...}  documents (or "scope":"all") answer:
        status  "status":N [,"retry_after":S]
        garbage 200 and random bytes (their own ETag)
        html    200 and an HTML error page
        truncated  200 and the first half of the right document
        delay   "secs":S, then the right answer
        none    no fault
      with "ua":TEXT only for user agents holding TEXT, "count":N only
      the next N requests
  POST /_ctl/rewrite {"mode":M,"n":K}  rewrite history:
        drop      the K oldest entries leave the Change Lists
        reorder   A: the oldest Change List's entries shuffled in place
        backdate  K never-seen entries inserted among old ones (never
                  to be published: marked "bogus" in the journal)
        backchange  A, B: K files changed now, each listed with a datetime
                  among old entries (bogus too: a mirror following the
                  bridge learns of it only by reconciling)
        shrink    B: the window becomes "secs" seconds
  POST /_ctl/regen              A: a new Resource List (new `at`)

Offline subcommands, against a running serve: `ctl` (the client),
`check-stream` (a recorded notification stream against the journal:
exactly once, in order, nothing false), `politeness` (the bridge's
requests: one in flight, --interval as the floor, Retry-After),
`load` (requests per kind of client in a time window), `watch` (when each
change lands in each mirror: latency from the documents showing it).

Debian's /usr/bin/python3, standard library only; loopback only.
"""
import sys

sys.dont_write_bytecode = True     # no __pycache__ in the source tree

import argparse                    # noqa: E402
import email.utils                 # noqa: E402
import hashlib                     # noqa: E402
import heapq                       # noqa: E402
import json                        # noqa: E402
import os                          # noqa: E402
import random                      # noqa: E402
import urllib.error                 # noqa: E402
import threading                   # noqa: E402
import time                        # noqa: E402
import urllib.parse                # noqa: E402
import urllib.request              # noqa: E402
import xml.etree.ElementTree as ET  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import static_source as ss         # noqa: E402

SM = "{%s}" % ss.SM_NS
RS = "{%s}" % ss.RS_NS
LOG_CAP = 500000          # access log entries kept in memory
KEEP_GENS = 4             # shape C: generations whose parts stay served
NOISE = 0.15              # politeness: the server's lateness forgiven, s


def die(msg, rc=1):
    print("bridge_source: " + msg, file=sys.stderr)
    sys.exit(rc)


def digest(data):
    return hashlib.md5(data).hexdigest(), hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------- the model

class Model:
    """The Source: its resources, the journal of changes, the documents.
    Every field is guarded by lock; documents are rebuilt under it."""

    def __init__(self, a, root, base):
        self.lock = threading.RLock()
        self.shape = a.shape
        self.root = root
        self.data = os.path.join(root, "data")
        self.base = base
        self.rd = base + "/resourcesync/"
        self.rng = random.Random(a.seed)
        self.grng = random.Random(a.seed + 1)    # garbage bytes
        self.clock = ss.Clock()
        self.files = {}          # rel -> metadata of the current content
        self.journal = []        # every change, in datetime order
        self.lists = []          # A: {"n","from","until","seqs","order"}
        self.rotate = a.rotate
        self.page = a.page_size
        self.window_us = int(a.window * 1e6)
        self.latest_only = a.latest_only
        self.rl_parts, self.rl_pages = a.rl_parts, a.rl_pages
        self.gens = []           # Resource List generations
        self.etag_gen = {}       # ETag of resourcelist.xml -> generation
        self.docs = {}           # path -> (bytes, etag, lastmod epoch)
        self.fault = None
        self.names = 0
        self.gone = []           # deleted rels, to create again
        self.auto = {"running": False, "done": 0}
        self.events = []         # rewrites and faults, with their time
        os.makedirs(self.data, exist_ok=True)
        # the Change Lists reach back to the first Resource List
        start = self.clock.now()
        for _ in range(a.initial):
            self.create(self.new_name())
        self.rl_at = self.clock.now()
        if self.shape == "A":
            self.lists.append({"n": 1, "from": start,
                               "until": None, "seqs": [], "order": None})
        self.write_static()
        self.write_rl()
        if self.shape == "A":
            self.write_lists({1}, index=True)

    # ---- resources

    def new_name(self):
        self.names += 1
        if self.rng.random() < 0.4:
            return "data/d%d/f%05d.%s" % (self.rng.randrange(4), self.names,
                                          self.rng.choice(["txt", "bin"]))
        return "data/f%05d.%s" % (self.names, self.rng.choice(["txt", "bin"]))

    def body(self):
        if self.rng.random() < 0.3:
            return self.rng.randbytes(self.rng.choice([1, 100, 4096]))
        return ("line %d\n" % self.rng.randrange(10 ** 9)
                * self.rng.randrange(1, 30)).encode()

    def write_file(self, rel, data, us):
        p = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        ss.write_atomic(p, data)
        os.utime(p, ns=(us * 1000, us * 1000))
        md5, sha = digest(data)
        self.files[rel] = {"md5": md5, "sha256": sha, "length": len(data),
                           "type": ss.content_type(p), "lastmod": us}

    def create(self, rel):
        us = self.clock.now()
        self.write_file(rel, self.body(), us)
        return us

    def loc(self, rel):
        return self.base + "/" + urllib.parse.quote(rel)

    def change_one(self):
        """One random change; its journal entry (not yet shown)."""
        r = self.rng.random()
        live = sorted(self.files)
        if self.gone and r < 0.08:
            rel = self.gone.pop(self.rng.randrange(len(self.gone)))
            change = "created"
        elif r < 0.45 or len(live) < 3:
            rel, change = self.new_name(), "created"
        elif r < 0.80:
            rel, change = self.rng.choice(live), "updated"
        else:
            rel, change = self.rng.choice(live), "deleted"
        if change == "deleted":
            us = self.clock.now()
            os.unlink(os.path.join(self.root, rel))
            del self.files[rel]
            self.gone.append(rel)
            meta = {}
        else:
            old = self.files.get(rel, {}).get("md5")
            while True:
                us = self.clock.now()
                self.write_file(rel, self.body(), us)
                if self.files[rel]["md5"] != old:
                    break
            meta = dict(self.files[rel])
        e = {"seq": len(self.journal), "rel": rel, "loc": self.loc(rel),
             "change": change, "dt": us, "shown": None, "bogus": False,
             "hidden": False}
        e.update(meta)
        self.journal.append(e)
        if self.shape == "A":
            self.list_add(e)
        return e

    def apply_batch(self, n):
        with self.lock:
            touched = set()
            index = False
            new = []
            for _ in range(n):
                e = self.change_one()
                new.append(e)
                if self.shape == "A":
                    touched.add(self.lists[-1]["n"])
                    if len(self.lists[-1]["seqs"]) >= self.rotate:
                        self.rotate_list()
                        touched.add(self.lists[-1]["n"])
                        index = True
            if self.shape == "A":
                self.write_lists(touched, index)
            elif self.shape == "C":
                self.rl_at = self.clock.now()
                self.write_rl()
            else:
                self.rl_at = self.clock.now()
            shown = time.time()
            for e in new:
                e["shown"] = shown
            return new

    # ---- shape A: Change Lists

    def list_add(self, e):
        self.lists[-1]["seqs"].append(e["seq"])

    def rotate_list(self):
        t = self.clock.now()
        self.lists[-1]["until"] = t
        self.lists.append({"n": self.lists[-1]["n"] + 1, "from": t,
                           "until": None, "seqs": [], "order": None})

    def change_entry(self, e):
        md = [("change", e["change"]), ("datetime", ss.fmt_time(e["dt"]))]
        if e["change"] == "deleted":
            return ss.url_entry("url", e["loc"], md=md)
        md += [("hash", "md5:%s sha-256:%s" % (e["md5"], e["sha256"])),
               ("length", str(e["length"])), ("type", e["type"])]
        return ss.url_entry("url", e["loc"], ss.fmt_time(e["lastmod"]), md)

    def list_doc(self, lst):
        md = [("capability", "changelist"), ("from", ss.fmt_time(lst["from"]))]
        if lst["until"] is not None:
            md.append(("until", ss.fmt_time(lst["until"])))
        out = ss.head("urlset", md, [("up", self.rd + "capabilitylist.xml"),
                                     ("index", self.rd + "changelist-index.xml")])
        for s in lst["order"] or lst["seqs"]:
            if not self.journal[s]["hidden"]:
                out.append(self.change_entry(self.journal[s]))
        return "\n".join(out + ["</urlset>"]) + "\n"

    def write_lists(self, ns, index):
        for lst in self.lists:
            if lst["n"] in ns:
                self.put("/resourcesync/changelist-%d.xml" % lst["n"],
                         self.list_doc(lst))
        if not index and "/resourcesync/changelist-index.xml" in self.docs:
            return
        md = [("capability", "changelist"),
              ("from", ss.fmt_time(self.lists[0]["from"]))]
        out = ss.head("sitemapindex", md, [("up", self.rd + "capabilitylist.xml")])
        for lst in self.lists:
            kmd = [("capability", "changelist"),
                   ("from", ss.fmt_time(lst["from"]))]
            if lst["until"] is not None:
                kmd.append(("until", ss.fmt_time(lst["until"])))
            out.append(ss.url_entry("sitemap", self.rd + "changelist-%d.xml"
                                    % lst["n"], md=kmd))
        self.put("/resourcesync/changelist-index.xml",
                 "\n".join(out + ["</sitemapindex>"]) + "\n")

    # ---- shape B: the trailing window, built per request

    def window_entries(self, now):
        frm = now - self.window_us
        es = [e for e in self.journal
              if not e["hidden"] and e["dt"] >= frm]
        es.sort(key=lambda e: e["dt"])
        if self.latest_only:
            last = {}
            for e in es:
                last[e["loc"]] = e["seq"]
            es = [e for e in es if last[e["loc"]] == e["seq"]]
        return frm, es

    def paged(self, path, page, entries, md, root="urlset"):
        npages = max(1, (len(entries) + self.page - 1) // self.page)
        if page < 1 or page > npages:
            return None
        links = [("up", self.rd + "capabilitylist.xml")]
        if page < npages:
            links.append(("next", "%s%s?page=%d" % (self.base, path, page + 1)))
        if page > 1:
            links.append(("prev", "%s%s?page=%d" % (self.base, path, page - 1)))
        out = ss.head(root, md, links)
        out += entries[(page - 1) * self.page:page * self.page]
        return "\n".join(out + ["</%s>" % root]) + "\n"

    def dynamic(self, path, query):
        """Shape B's documents, built now: (bytes, lastmod) or None."""
        try:
            page = int(urllib.parse.parse_qs(query).get("page", ["1"])[0])
        except ValueError:
            return None
        with self.lock:
            if path == "/resourcesync/changelist.xml":
                now = self.clock.now()
                frm, es = self.window_entries(now)
                md = [("capability", "changelist"), ("from", ss.fmt_time(frm)),
                      ("until", ss.fmt_time(now))]
                doc = self.paged(path, page, [self.change_entry(e) for e in es],
                                 md)
                return (None if doc is None else doc.encode()), time.time()
            if path == "/resourcesync/resourcelist.xml":
                at = ss.fmt_time(self.rl_at)
                md = [("capability", "resourcelist"), ("at", at),
                      ("completed", at)]
                doc = self.paged(path, page, self.rl_entries(), md)
                return (None if doc is None else doc.encode()), self.rl_at / 1e6
        return None

    # ---- Resource Lists (A, C: written; B: dynamic)

    def rl_entries(self):
        out = []
        for rel in sorted(self.files):
            f = self.files[rel]
            out.append(ss.url_entry(
                "url", self.loc(rel), ss.fmt_time(f["lastmod"]),
                [("hash", "md5:%s sha-256:%s" % (f["md5"], f["sha256"])),
                 ("length", str(f["length"])), ("type", f["type"])]))
        return out

    def write_rl(self):
        g = len(self.gens) + 1
        snap = {"gen": g, "at": self.rl_at,
                "state": {self.loc(r): dict(f) for r, f in self.files.items()}}
        if self.shape == "B":
            self.gens.append(snap)      # the state the Source started from
            return
        at = ss.fmt_time(self.rl_at)
        md = [("capability", "resourcelist"), ("at", at), ("completed", at)]
        up = [("up", self.rd + "capabilitylist.xml")]
        entries = self.rl_entries()
        n = max(1, self.rl_parts or self.rl_pages or 1)
        size = max(1, (len(entries) + n - 1) // n)
        chunks = [entries[i:i + size] for i in range(0, len(entries), size)] \
            or [[]]
        name = "/resourcesync/resourcelist-%d-%%d.xml" % g
        if self.rl_parts:
            idx = ss.head("sitemapindex", md, up)
            for i, c in enumerate(chunks, 1):
                doc = ss.head("urlset", md, up + [
                    ("index", self.rd + "resourcelist.xml")])
                self.put(name % i, "\n".join(doc + c + ["</urlset>"]) + "\n")
                idx.append(ss.url_entry("sitemap", self.base + name % i))
            first = "\n".join(idx + ["</sitemapindex>"]) + "\n"
        else:
            first = None
            for i, c in enumerate(chunks, 1):
                links = list(up)
                if i < len(chunks):
                    links.append(("next", self.base + name % (i + 1)))
                if i > 1:
                    links.append(("prev", self.rd + "resourcelist.xml" if i == 2
                                  else self.base + name % (i - 1)))
                doc = "\n".join(ss.head("urlset", md, links) + c
                                + ["</urlset>"]) + "\n"
                if i == 1:
                    first = doc
                else:
                    self.put(name % i, doc)
        etag = self.put("/resourcesync/resourcelist.xml", first)
        self.etag_gen[etag] = g
        self.gens.append(snap)
        old = g - KEEP_GENS
        if old >= 1:
            for p in [p for p in self.docs
                      if p.startswith("/resourcesync/resourcelist-%d-" % old)]:
                del self.docs[p]
                try:
                    os.unlink(self.root + p)
                except OSError:
                    pass

    # ---- Source Description and Capability List

    def write_static(self):
        sd = ss.head("urlset", [("capability", "description")], [])
        sd.append(ss.url_entry("url", self.rd + "capabilitylist.xml",
                               md=[("capability", "capabilitylist")]))
        self.put("/.well-known/resourcesync", "\n".join(sd + ["</urlset>"]) + "\n")
        cl = ss.head("urlset", [("capability", "capabilitylist")],
                     [("up", self.base + "/.well-known/resourcesync")])
        cl.append(ss.url_entry("url", self.rd + "resourcelist.xml",
                               md=[("capability", "resourcelist")]))
        if self.shape == "A":
            cl.append(ss.url_entry("url", self.rd + "changelist-index.xml",
                                   md=[("capability", "changelist")]))
        elif self.shape == "B":
            cl.append(ss.url_entry("url", self.rd + "changelist.xml",
                                   md=[("capability", "changelist")]))
        self.put("/resourcesync/capabilitylist.xml",
                 "\n".join(cl + ["</urlset>"]) + "\n")

    def put(self, path, text):
        data = text.encode()
        etag = '"%s"' % hashlib.md5(data).hexdigest()
        old = self.docs.get(path)
        if old is not None and old[1] == etag:
            return etag
        self.docs[path] = (data, etag, time.time())
        f = self.root + path
        os.makedirs(os.path.dirname(f), exist_ok=True)
        ss.write_atomic(f, data)
        return etag

    # ---- history rewritten

    def list_after(self, before, e):
        """A: e listed right after before; the lists touched."""
        touched = set()
        if self.shape != "A":
            return touched      # B's window is built from the journal
        for lst in self.lists:
            if before["seq"] in lst["seqs"]:
                i = lst["seqs"].index(before["seq"])
                lst["seqs"].insert(i + 1, e["seq"])
                if lst["order"] is not None:
                    lst["order"].append(e["seq"])
                touched.add(lst["n"])
        return touched

    def backchange(self, live):
        """A live file changed now, its entry dated right after an old
        one (the older half), among files no later entry names (so the
        lists still say what the file holds); its journal entry (with
        _before), or None."""
        last = {}
        for x in self.journal:
            last[x["rel"]] = max(last.get(x["rel"], 0), x["dt"])
        ks = list(range(len(live) // 2 + 1))
        self.rng.shuffle(ks)
        for k in ks:
            before = live[k]
            dt = before["dt"] + 1
            rels = [r for r in sorted(self.files) if last.get(r, 0) < before["dt"]]
            if not rels or any(x["dt"] == dt for x in self.journal):
                continue
            rel = self.rng.choice(rels)
            old = self.files[rel]["md5"]
            while self.files[rel]["md5"] == old:
                self.write_file(rel, self.body(), dt)
            e = {"seq": len(self.journal), "rel": rel, "loc": self.loc(rel),
                 "change": "updated", "dt": dt, "shown": None, "bogus": True,
                 "hidden": False}
            e.update(self.files[rel])
            self.journal.append(e)
            return dict(e, _before=before)
        return None

    def rewrite(self, mode, n, secs):
        with self.lock:
            live = [e for e in self.journal if not e["hidden"] and not e["bogus"]]
            touched = set()
            if mode == "drop":
                for e in live[:n]:
                    e["hidden"] = True
                    touched |= {l["n"] for l in self.lists if e["seq"] in l["seqs"]}
            elif mode == "reorder":
                if self.shape != "A":
                    return "reorder: shape A only"
                lst = next((l for l in self.lists if len(l["seqs"]) > 1), None)
                if lst is None:
                    return "reorder: no list with two entries"
                order = list(lst["seqs"])
                while order == lst["seqs"]:
                    self.rng.shuffle(order)
                lst["order"] = order
                touched.add(lst["n"])
            elif mode == "backdate":
                if len(live) < 2 or not self.files:
                    return "backdate: too few entries"
                for _ in range(n):
                    k = self.rng.randrange(len(live) // 2 + 1)
                    before = live[k]
                    rel = self.rng.choice(sorted(self.files))
                    e = {"seq": len(self.journal), "rel": rel,
                         "loc": self.loc(rel), "change": "updated",
                         "dt": before["dt"] + 1, "shown": None,
                         "bogus": True, "hidden": False}
                    e.update(self.files[rel])
                    if any(x["dt"] == e["dt"] for x in self.journal):
                        continue
                    self.journal.append(e)
                    touched |= self.list_after(before, e)
            elif mode == "backchange":
                if self.shape not in ("A", "B") or len(live) < 2:
                    return "backchange: shape A or B, two entries"
                done = 0
                for _ in range(n):
                    e = self.backchange(live)
                    if e is not None:
                        done += 1
                        touched |= self.list_after(e.pop("_before"), e)
                if done == 0:
                    return "backchange: no file to change"
            elif mode == "shrink":
                if self.shape != "B":
                    return "shrink: shape B only"
                self.window_us = int(secs * 1e6)
            else:
                return "unknown mode %r" % mode
            if self.shape == "A":
                self.write_lists(touched, index=False)
            self.events.append({"t": time.time(), "rewrite": mode, "n": n})
            return None


# ------------------------------------------------------------- the server

class Handler(ss.Handler):
    server_version = "bridge_source/1"

    def send_response(self, code, message=None):
        self._status = code
        super().send_response(code, message)

    def send_header(self, keyword, value):
        if keyword.lower() == "etag":
            self._etag = value
        elif keyword.lower() == "retry-after":
            self._ra = value
        super().send_header(keyword, value)

    def do_GET(self):
        self.logged(False)

    def do_HEAD(self):
        self.logged(True)

    def logged(self, head):
        path, _, query = self.path.partition("?")
        if path.startswith("/_ctl/"):
            return self.ctl_get(path, query, head)
        srv = self.server
        self._status, self._etag, self._ra, self._fault = 0, None, None, None
        t0 = time.time()
        try:
            self.route(path, query, head)
        finally:
            rec = {"t0": round(t0, 6), "t1": round(time.time(), 6),
                   "m": self.command, "p": self.path, "s": self._status,
                   "ua": self.headers.get("User-Agent", ""),
                   "inm": self.headers.get("If-None-Match") is not None,
                   "ims": self.headers.get("If-Modified-Since") is not None}
            if self._ra is not None:
                rec["ra"] = self._ra
            if self._fault is not None:
                rec["fault"] = self._fault
            if path == "/resourcesync/resourcelist.xml" and self._status == 200:
                rec["gen"] = srv.model.etag_gen.get(self._etag)
            if not path.startswith("/data/"):   # static_source counts those
                srv.state.count(path, self._status)
            with srv.log_lock:
                if len(srv.log) < LOG_CAP:
                    srv.log.append(rec)
                if srv.log_file is not None:
                    srv.log_file.write(json.dumps(rec) + "\n")
                    srv.log_file.flush()

    def take_fault(self, path):
        m = self.server.model
        with m.lock:
            f = m.fault
            if f is None:
                return None
            if f.get("scope", "docs") == "docs" and path.startswith("/data/"):
                return None
            if f.get("ua") and f["ua"] not in self.headers.get("User-Agent", ""):
                return None
            if "count" in f:
                if f["count"] <= 0:
                    m.fault = None
                    return None
                f["count"] -= 1
            return dict(f)

    def route(self, path, query, head):
        m = self.server.model
        f = self.take_fault(path) or {}
        mode = self._fault = f.get("mode")
        if mode == "delay":
            time.sleep(float(f.get("secs", 1)))
        elif mode == "status":
            extra = {}
            if "retry_after" in f:
                extra["Retry-After"] = str(f["retry_after"])
            return self.reply(int(f["status"]), b"fault %d\n" % int(f["status"]),
                              headers=extra, head=head)
        elif mode in ("garbage", "html"):
            if mode == "garbage":
                with m.lock:
                    body = b"\x00\x1fgarbage<<" + m.grng.randbytes(200) + b">>"
            else:
                body = (b"<html><head><title>Service Unavailable</title></head>"
                        b"<body><h1>We are down for maintenance</h1></body>"
                        b"</html>\n")
            etag = '"%s"' % hashlib.md5(body).hexdigest()
            return self.reply(200, body, "application/xml",
                              headers={"ETag": etag}, head=head)
        if path.startswith("/data/"):
            return self.serve(head)
        doc = self.doc(path, query)
        if doc is None:
            return self.reply(404, b"not found\n", head=head)
        data, etag, lm = doc
        if mode == "truncated":
            data = data[:len(data) // 2]
            etag = '"%s"' % hashlib.md5(data).hexdigest()
        self.conditional(data, etag, lm, head)

    def doc(self, path, query):
        m = self.server.model
        if m.shape == "B" and path in ("/resourcesync/changelist.xml",
                                       "/resourcesync/resourcelist.xml"):
            got = m.dynamic(path, query)
            if got is None or got[0] is None:
                return None
            data, lm = got
            return data, '"%s"' % hashlib.md5(data).hexdigest(), lm
        if query:
            return None
        with m.lock:
            return m.docs.get(path)

    def conditional(self, data, etag, lm, head):
        inm = self.headers.get("If-None-Match")
        ims = self.headers.get("If-Modified-Since")
        fresh = False
        if inm is not None:
            tags = [t.strip() for t in inm.split(",")]
            fresh = "*" in tags or etag in [t[2:] if t.startswith("W/") else t
                                            for t in tags]
        elif ims is not None:
            try:
                since = email.utils.parsedate_to_datetime(ims).timestamp()
                fresh = int(lm) <= since
            except (TypeError, ValueError):
                fresh = False
        hdrs = {"ETag": etag,
                "Last-Modified": email.utils.formatdate(lm, usegmt=True)}
        if fresh:
            self.send_response(304)
            for k, v in hdrs.items():
                self.send_header(k, v)
            self.end_headers()
            return
        self.reply(200, data, "application/xml", headers=hdrs, head=head)

    def ctl_get(self, path, query, head):
        srv = self.server
        m = srv.model
        q = urllib.parse.parse_qs(query)
        frm = int(q.get("from", ["0"])[0])
        if path == "/_ctl/counts":
            return self.serve(head)
        with m.lock:
            if path == "/_ctl/status":
                body = {"shape": m.shape, "journal": len(m.journal),
                        "files": len(m.files), "gens": len(m.gens),
                        "auto": dict(m.auto), "fault": m.fault,
                        "window": m.window_us / 1e6, "events": m.events,
                        "lists": len(m.lists)}
            elif path == "/_ctl/journal":
                body = m.journal[frm:]
            elif path == "/_ctl/gens":
                body = m.gens[frm:]
            elif path == "/_ctl/files":
                body = {m.loc(r): f for r, f in m.files.items()}
            elif path == "/_ctl/log":
                with srv.log_lock:
                    body = srv.log[frm:]
            else:
                return self.reply(404, b"no such control\n", head=head)
            data = json.dumps(body).encode()
        self.reply(200, data, "application/json", head=head)

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        if path in ("/_ctl/rules", "/_ctl/reset"):
            return super().do_POST()
        n = int(self.headers.get("Content-Length") or 0)
        try:
            arg = json.loads(self.rfile.read(n) or b"{}") if n else {}
            assert isinstance(arg, dict)
        except (ValueError, AssertionError):
            return self.reply(400, b"bad json\n")
        m = self.server.model
        out = {"ok": True}
        if path == "/_ctl/change":
            out = m.apply_batch(int(arg.get("n", 1)))
        elif path == "/_ctl/auto":
            with m.lock:
                if m.auto["running"]:
                    return self.reply(409, b"auto already running\n")
                m.auto = {"running": True, "done": 0}
            threading.Thread(target=auto_churn, args=(m, arg),
                             daemon=True).start()
        elif path == "/_ctl/fault":
            with m.lock:
                m.fault = None if arg.get("mode", "none") == "none" else arg
                m.events.append({"t": time.time(), "fault": arg})
        elif path == "/_ctl/rewrite":
            err = m.rewrite(arg.get("mode"), int(arg.get("n", 1)),
                            float(arg.get("secs", 0)))
            if err:
                return self.reply(400, (err + "\n").encode())
        elif path == "/_ctl/regen":
            with m.lock:
                m.rl_at = m.clock.now()
                m.write_rl()
                m.events.append({"t": time.time(), "regen": len(m.gens)})
        else:
            return self.reply(404, b"no such control\n")
        self.reply(200, json.dumps(out).encode(), "application/json")


def auto_churn(m, arg):
    every = float(arg.get("every", 0.5))
    lo, hi = int(arg.get("min", 1)), int(arg.get("max", 3))
    # jittered (0.5 to 1.5 times "every"), so that the batches do not
    # keep one phase against a poller's clock
    jit = random.Random(int(arg.get("seed", 7)))
    for _ in range(int(arg.get("batches", 10))):
        with m.lock:
            k = m.rng.randint(lo, hi)
        m.apply_batch(k)
        with m.lock:
            m.auto["done"] += 1
        time.sleep(every * jit.uniform(0.5, 1.5))
    with m.lock:
        m.auto["running"] = False


class Server(ss.Server):
    request_queue_size = 128


def cmd_serve(a):
    srv = Server(("127.0.0.1", a.port), Handler)
    root = os.path.realpath(a.root)
    os.makedirs(root, exist_ok=True)
    srv.root = root
    srv.state = ss.State()
    srv.log = []
    srv.log_lock = threading.Lock()
    srv.log_file = open(a.access_log, "a") if a.access_log else None
    port = srv.server_address[1]
    srv.model = Model(a, root, "http://127.0.0.1:%d" % port)
    if a.ready:
        ss.write_atomic(a.ready, '{"port":%d}\n' % port)
    print("bridge_source: shape %s, %s on 127.0.0.1:%d"
          % (a.shape, root, port), file=sys.stderr, flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


# ------------------------------------------------------------- the client

def ctl_get(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path),
                                timeout=30) as r:
        return json.loads(r.read())


def ctl_post(port, path, body):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        die("POST %s: %d %s" % (path, e.code, e.read().decode().strip()))


def cmd_ctl(a):
    """status | journal | log | gens | files | change N | auto JSON |
    fault JSON | rewrite JSON | regen | count-journal | wait-auto SECS |
    met MODE|ok TIME [UA]"""
    op, args = (a.args[0] if a.args else ""), a.args[1:]
    if op in ("status", "journal", "log", "gens", "files") and not args:
        print(json.dumps(ctl_get(a.port, "/_ctl/" + op), indent=1))
    elif op == "change" and len(args) == 1:
        print(len(ctl_post(a.port, "/_ctl/change", {"n": int(args[0])})))
    elif op in ("auto", "fault", "rewrite") and len(args) == 1:
        ctl_post(a.port, "/_ctl/" + op, json.loads(args[0]))
    elif op == "regen" and not args:
        ctl_post(a.port, "/_ctl/regen", {})
    elif op == "count-journal" and not args:
        print(sum(1 for e in ctl_get(a.port, "/_ctl/journal") if not e["bogus"]))
    elif op == "met" and len(args) in (2, 3):
        # a request of the bridge (or of user agents holding ARGS[2])
        # at or after time ARGS[1] was answered with fault ARGS[0]; "ok":
        # with no fault, 200 or 304
        ua = args[2] if len(args) == 3 else "rsbridge"
        t = float(args[1])
        for r in ctl_get(a.port, "/_ctl/log"):
            if r["t0"] >= t and ua in r["ua"] and (
                    r.get("fault") == args[0] if args[0] != "ok" else
                    r.get("fault") is None and r["s"] in (200, 304)):
                return
        die("no request met %s since %s" % (args[0], args[1]))
    elif op == "wait-auto" and len(args) == 1:
        deadline = time.monotonic() + float(args[0])
        while time.monotonic() < deadline:
            if not ctl_get(a.port, "/_ctl/status")["auto"]["running"]:
                return
            time.sleep(0.1)
        die("the automatic changes did not end within %s s" % args[0])
    else:
        die("ctl: bad arguments: %s" % " ".join(a.args), 2)


# ---------------------------------------------------- the recorded stream

def parse_dt(s):
    try:
        return ss.parse_time(s)
    except (ValueError, TypeError, AttributeError):
        return None


def notifications(path):
    """Every notification a hubtool subscriber saved (--save-data), in
    the order received: [(hub id, root md, root links, [entry])], entry a
    dict of loc, lastmod and the rs:md attributes."""
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            ev = json.loads(line)
            if ev.get("ev") != "msg" or "data" not in ev:
                continue
            try:
                root = ET.fromstring(ev["data"].encode())
            except ET.ParseError as e:
                out.append((ev.get("id"), {"error": str(e)}, {}, []))
                continue
            md = root.find(RS + "md")
            links = {ln.get("rel"): ln.get("href")
                     for ln in root.findall(RS + "ln")}
            entries = []
            for u in root.findall(SM + "url"):
                d = {"loc": u.findtext(SM + "loc"),
                     "lastmod": u.findtext(SM + "lastmod"), "_t": ev.get("t")}
                m = u.find(RS + "md")
                if m is not None:
                    d.update(m.attrib)
                entries.append(d)
            out.append((ev.get("id"), dict(md.attrib) if md is not None else {},
                        links, entries))
    return out


def hashes(s):
    out = {}
    for part in (s or "").split():
        k, _, v = part.partition(":")
        out[k] = v
    return out


def entry_problems(got, want):
    """Where a notified entry differs from the journal entry it is."""
    p = []
    if got.get("change") != want["change"]:
        p.append("change %s, want %s" % (got.get("change"), want["change"]))
    if parse_dt(got.get("datetime")) != want["dt"]:
        p.append("datetime %s, want %s" % (got.get("datetime"),
                                           ss.fmt_time(want["dt"])))
    if want["change"] != "deleted":
        h = hashes(got.get("hash"))
        if h.get("md5") != want["md5"] or h.get("sha-256", want["sha256"]) \
                != want["sha256"]:
            p.append("hash %s, want md5:%s" % (got.get("hash"), want["md5"]))
        if got.get("length") != str(want["length"]):
            p.append("length %s, want %d" % (got.get("length"), want["length"]))
        if got.get("type") != want["type"]:
            p.append("type %s, want %s" % (got.get("type"), want["type"]))
        if parse_dt(got.get("lastmod")) != want["lastmod"]:
            p.append("lastmod %s, want %s" % (got.get("lastmod"),
                                              ss.fmt_time(want["lastmod"])))
    return p


def stream_entries(a, problems):
    notes = notifications(a.sub)
    got = []
    for hid, md, links, entries in notes:
        if "error" in md:
            problems.append("notification %s is not XML: %s" % (hid, md["error"]))
            continue
        if md.get("capability") != "changelist-notification":
            problems.append("notification %s: capability %r" % (hid, md.get("capability")))
        up = links.get("up") or ""
        if a.bridged and not up.startswith(a.bridged + "capabilitylist/"):
            problems.append("notification %s: rel=up %r is not a bridged "
                            "Capability List under %s" % (hid, up, a.bridged))
        for e in entries:
            e["_id"] = hid
            got.append(e)
    return notes, got


def check_exact(got, want, problems):
    """got (notified entries, in order) is want (journal entries), each
    once, in order, every field right."""
    key = {(e["loc"], e["dt"]): e for e in want}
    index = {id(e): i for i, e in enumerate(want)}
    seen = {}
    last = -1
    matched = 0
    for i, g in enumerate(got):
        k = (g.get("loc"), parse_dt(g.get("datetime")))
        if k in seen:
            problems.append("duplicate: %s %s %s (notifications %s and %s)"
                            % (g.get("change"), k[0], g.get("datetime"),
                               seen[k], g["_id"]))
            continue
        seen[k] = g["_id"]
        w = key.get(k)
        if w is None:
            problems.append("not a change of the Source (false): %s %s %s"
                            % (g.get("change"), k[0], g.get("datetime")))
            continue
        matched += 1
        pos = index[id(w)]
        if pos < last:
            problems.append("out of order: %s %s after an entry of %s"
                            % (w["change"], w["loc"], ss.fmt_time(want[last]["dt"])))
        last = max(last, pos)
        for p in entry_problems(g, w):
            problems.append("%s %s: %s" % (w["change"], w["loc"], p))
    missing = [w for w in want if (w["loc"], w["dt"]) not in seen]
    if missing:
        problems.append("%d missing (first: %s)" % (len(missing), "; ".join(
            "%s %s %s" % (w["change"], w["loc"], ss.fmt_time(w["dt"]))
            for w in missing[:3])))
    return matched


def gen_diff(old, new):
    """The changes from one Resource List generation to the next: a set of
    (change, loc, md5)."""
    out = set()
    for loc, f in new.items():
        o = old.get(loc)
        if o is None:
            out.add(("created", loc, f["md5"]))
        elif o["md5"] != f["md5"]:
            out.add(("updated", loc, f["md5"]))
    for loc in old:
        if loc not in new:
            out.add(("deleted", loc, None))
    return out


def check_gens(a, got, problems):
    """Shape C: the generations served to the bridge (200s of the Resource
    List, in order; the first is the baseline) give the expected stream:
    each generation's differences, as a set, generation after
    generation. Returns the number of entries matched."""
    log = ctl_get(a.port, "/_ctl/log")
    gens = {g["gen"]: g for g in ctl_get(a.port, "/_ctl/gens")}
    served = []
    for r in log:
        if a.ua in r["ua"] and r.get("gen") and (not served or served[-1] != r["gen"]):
            served.append(r["gen"])
    if not served:
        problems.append("the bridge never read the Resource List")
        return 0
    i = 0
    for prev, cur in zip(served, served[1:]):
        want = gen_diff(gens[prev]["state"], gens[cur]["state"])
        at = gens[cur]["at"]
        chunk = got[i:i + len(want)]
        i += len(want)
        have = set()
        for g in chunk:
            h = hashes(g.get("hash")).get("md5") if g.get("change") != "deleted" else None
            have.add((g.get("change"), g.get("loc"), h))
            st = gens[cur]["state"].get(g.get("loc"))
            want_dt = st["lastmod"] if g.get("change") != "deleted" and st else at
            if parse_dt(g.get("datetime")) != want_dt:
                problems.append("generation %d: %s %s: datetime %s, want %s"
                                % (cur, g.get("change"), g.get("loc"),
                                   g.get("datetime"), ss.fmt_time(want_dt)))
        if have != want:
            problems.append("generation %d->%d: missing %s; unexpected %s"
                            % (prev, cur, sorted(want - have)[:3],
                               sorted(have - want)[:3]))
            return i
    if i < len(got):
        problems.append("%d entries after the last generation the bridge read "
                        "(first %s %s)" % (len(got) - i, got[i].get("change"),
                                           got[i].get("loc")))
    return i


def check_replay(a, got, problems):
    """Any shape, any history: replaying the stream on the state the
    bridge started from never creates what exists, updates or deletes
    what does not, or repeats a state; each entry is a state the Source
    had shown before the entry arrived (a deletion the Source made, a
    content it served: nothing false); with --final, the replay ends in
    the Source's present state (nothing lost)."""
    journal = ctl_get(a.port, "/_ctl/journal")
    gens = ctl_get(a.port, "/_ctl/gens")
    base = gens[a.baseline_gen - 1 if a.baseline_gen else 0]
    shown = {}          # (loc, md5 or None for absent) -> first time shown
    for e in journal:
        if e["bogus"] or e["shown"] is None:
            continue
        k = (e["loc"], None if e["change"] == "deleted" else e["md5"])
        shown[k] = min(shown.get(k, e["shown"]), e["shown"])
    for loc, f in base["state"].items():
        shown[(loc, f["md5"])] = 0
    state = {l: f["md5"] for l, f in base["state"].items()}
    for g in got:
        loc, ch = g.get("loc"), g.get("change")
        h = hashes(g.get("hash")).get("md5")
        if ch == "created":
            if loc in state:
                problems.append("created %s, which exists (a duplicate)" % loc)
            state[loc] = h
        elif ch == "updated":
            if loc not in state:
                problems.append("updated %s, which does not exist" % loc)
            elif state[loc] == h:
                problems.append("updated %s to the content it has (a duplicate)" % loc)
            state[loc] = h
        elif ch == "deleted":
            if loc not in state:
                problems.append("deleted %s, which does not exist (a duplicate)" % loc)
            state.pop(loc, None)
            h = None
        else:
            problems.append("change %r for %s" % (ch, loc))
            continue
        t = shown.get((loc, h))
        if t is None or (g.get("_t") is not None and t > g["_t"] + a.slack):
            problems.append("%s %s%s: the Source never showed that state%s (false)"
                            % (ch, loc, "" if h is None else " md5:" + h,
                               "" if t is None else " before it was published"))
    if a.final:
        now = {l: f["md5"] for l, f in ctl_get(a.port, "/_ctl/files").items()}
        if now != state:
            diff = sorted(set(now.items()) ^ set(state.items()))
            problems.append("the replayed stream ends %d resources away from "
                            "the Source (first %s)" % (len(diff), diff[:3]))


def cmd_check_stream(a):
    problems = []
    notes, got = stream_entries(a, problems)
    journal = ctl_get(a.port, "/_ctl/journal")
    if a.mode == "exact":
        want = [e for e in journal if not e["bogus"]
                and (a.from_seq is None or e["seq"] >= a.from_seq)]
        matched = check_exact(got, want, problems)
        bogus = {(e["loc"], e["dt"]) for e in journal if e["bogus"]}
        for g in got:
            if (g.get("loc"), parse_dt(g.get("datetime"))) in bogus:
                problems.append("a rewritten-history entry was published: %s %s"
                                % (g.get("loc"), g.get("datetime")))
    elif a.mode == "gens":
        matched = check_gens(a, got, problems)
    else:
        check_replay(a, got, problems)
        matched = len(got)
    if problems:
        for p in problems[:20]:
            print(p)
        if len(problems) > 20:
            print("... %d problems in all" % len(problems))
        sys.exit(1)
    print("ok: %d entries in %d notifications, each once, in order"
          % (matched, len(notes)))


# ------------------------------------------------------- bridged documents

def fetch_xml(url, problems):
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return ET.fromstring(r.read())
    except (OSError, ET.ParseError) as e:
        problems.append("%s: %s" % (url, e))
        return None


def doc_parts(root):
    md = root.find(RS + "md")
    links = {ln.get("rel"): ln.get("href") for ln in root.findall(RS + "ln")}
    entries = []
    for u in root.findall(SM + "url"):
        m = u.find(RS + "md")
        entries.append({"loc": u.findtext(SM + "loc"),
                        "capability": m.get("capability") if m is not None else None,
                        "ln": {ln.get("rel"): ln.get("href")
                               for ln in u.findall(RS + "ln")}})
    return (dict(md.attrib) if md is not None else {}), links, entries


def cmd_check_bridged(a):
    """The bridged Source Description (at PUBLIC/s/NAME/ and under
    .well-known) and Capability List of the Source on --port, as
    docs say: the original's entries unchanged, then the hub's WebSocket
    channels and WebSub topics for this Source."""
    problems = []
    b = a.bridged
    orig = "http://127.0.0.1:%d/resourcesync/capabilitylist.xml" % a.port
    sd1 = fetch_xml(b, problems)
    sd2 = fetch_xml(b + ".well-known/resourcesync", problems)
    if sd1 is None or sd2 is None:
        die("; ".join(problems))
    if ET.tostring(sd1) != ET.tostring(sd2):
        problems.append("the Source Description differs at %s and under "
                        ".well-known" % b)
    md, _, entries = doc_parts(sd1)
    if md.get("capability") != "description":
        problems.append("Source Description: capability %r" % md.get("capability"))
    caps = [e["loc"] for e in entries if e["capability"] == "capabilitylist"]
    if caps != [b + "capabilitylist/0.xml"]:
        problems.append("Source Description lists %r, want [%scapabilitylist/0.xml]"
                        % (caps, b))
    cl = fetch_xml(b + "capabilitylist/0.xml", problems)
    oc = fetch_xml(orig, problems)
    if cl is None or oc is None:
        die("; ".join(problems))
    md, links, entries = doc_parts(cl)
    _, _, oentries = doc_parts(oc)
    if md.get("capability") != "capabilitylist":
        problems.append("Capability List: capability %r" % md.get("capability"))
    if links.get("up") not in (b, b + ".well-known/resourcesync"):
        problems.append("Capability List: rel=up %r, want the bridged Source "
                        "Description" % links.get("up"))
    if links.get("via") != orig:
        problems.append("Capability List: rel=via %r, want %s" % (links.get("via"), orig))
    n = len(oentries)
    got = [(e["loc"], e["capability"]) for e in entries[:n]]
    want = [(e["loc"], e["capability"]) for e in oentries]
    if got != want:
        problems.append("Capability List: the original entries %r, want %r" % (got, want))
    rest = entries[n:]
    ws = {e["capability"]: e["loc"] for e in rest if (e["loc"] or "").startswith("ws://")}
    web = {e["capability"]: e for e in rest if not (e["loc"] or "").startswith("ws://")}
    for cap in ("change-notification", "framework-notification"):
        if not (ws.get(cap) or "").startswith("ws://127.0.0.1:%d/channel/" % a.ws):
            problems.append("no WebSocket %s channel of the hub (%r)" % (cap, ws.get(cap)))
    for cap, topic in (("changelist-notification", b + "changes"),
                       ("framework-notification", b + "framework")):
        e = web.get(cap)
        if e is None or e["loc"] != topic or e["ln"].get("hub") != a.hub:
            problems.append("WebSub %s: %r, want %s with rel=hub %s"
                            % (cap, e, topic, a.hub))
    if len(rest) != 4:
        problems.append("%d entries after the original ones, want 4" % len(rest))
    if problems:
        for p in problems:
            print(p)
        sys.exit(1)
    print("ok: %d original entries and 4 channels" % n)


# ------------------------------------------------------------ politeness

def entry_path(log):
    """The document each poll begins with: among those read in (nearly)
    every poll, the one whose requests follow the longest idle time (the
    time between polls; a walk's next document follows the previous one
    closely, however loaded the machine)."""
    counts = {}
    for r in log:
        counts[r["p"]] = counts.get(r["p"], 0) + 1
    if not counts:
        return None
    top = max(counts.values())
    idle = {}
    for prev, r in zip(log, log[1:]):
        if counts[r["p"]] >= 0.8 * top:
            idle.setdefault(r["p"], []).append(r["t0"] - prev["t1"])
    if not idle:
        return max(counts, key=counts.get)
    return max(idle, key=lambda p: sum(idle[p]) / len(idle[p]))


def cmd_politeness(a):
    """The requests of user agents holding --ua: how many were in flight
    at once (max; --max-inflight allowed); among the documents, the polls
    (each begins with a request of the entry document, --entry or found
    by entry_path) and the shortest time between two (--interval is the
    floor, retries included); a document read twice within one poll;
    whether each Retry-After was honoured (no request before it
    passed). Prints JSON; exits 1 on a violation."""
    every = [r for r in ctl_get(a.port, "/_ctl/log")
             if a.ua in r["ua"] and r["t0"] >= a.t0 and (a.t1 is None or r["t0"] <= a.t1)]
    every.sort(key=lambda r: r["t0"])
    log = [r for r in every if not r["p"].startswith("/data/")]
    viol = []
    inflight, worst = 0, None
    ends = []           # heap of the end times of the requests in flight
    for r in every:
        while ends and ends[0] - a.tol <= r["t0"]:
            heapq.heappop(ends)
        heapq.heappush(ends, r["t1"])
        if len(ends) > inflight:
            inflight, worst = len(ends), r
    if inflight > a.max_inflight:
        viol.append("%d requests in flight at %.3f (%s)"
                    % (inflight, worst["t0"], worst["p"]))
    entry = a.entry or entry_path(log)
    starts = [r for r in log if r["p"] == entry]
    pgaps = []
    late = 0.0
    for p, q in zip(starts, starts[1:]):
        g = q["t0"] - p["t0"]
        pgaps.append(g)
        # The times are the server's: a request it began to handle late
        # (a loaded machine) makes the next gap look short by as much.
        # The previous gap's excess, up to NOISE, excuses that much.
        if g < a.interval - a.tol - late:
            viol.append("a poll began %.3f s after the previous one (%s; "
                        "--interval %.3g s)" % (g, entry, a.interval))
        late = min(NOISE, max(0.0, g - a.interval))
    seen = set()
    twice = 0
    for r in log:
        if r["p"] == entry:
            seen = set()
        elif r["p"] in seen:
            twice += 1
            if twice <= 3:
                viol.append("%s read twice in one poll (at %.3f)" % (r["p"], r["t0"]))
        seen.add(r["p"])
    ra_ok, ra_n = 0, 0
    for i, r in enumerate(every):
        if r["s"] in (429, 503) and "ra" in r:
            ra_n += 1
            wait = float(r["ra"])
            nxt = next((q for q in every[i + 1:]), None)
            if nxt is None:
                ra_ok += 1
                continue
            # from the answer's start: the client has it no earlier
            if nxt["t0"] < r["t0"] + wait - a.tol:
                viol.append("Retry-After %s at %.3f, next request %.3f s later (%s)"
                            % (r["ra"], r["t0"], nxt["t0"] - r["t0"], nxt["p"]))
            else:
                ra_ok += 1
    cond = sum(1 for r in log if r["inm"] or r["ims"])
    out = {"requests": len(every), "documents": len(log), "entry": entry,
           "polls": len(starts),
           "max_inflight": inflight,
           "min_poll_gap": round(min(pgaps), 3) if pgaps else None,
           "read_twice_in_a_poll": twice,
           "retry_after": ra_n, "retry_after_honoured": ra_ok,
           "conditional": cond, "not_modified": sum(1 for r in log if r["s"] == 304),
           "statuses": {}}
    for r in log:
        out["statuses"][str(r["s"])] = out["statuses"].get(str(r["s"]), 0) + 1
    print(json.dumps(out))
    for v in viol[:10]:
        print("violation: " + v)
    sys.exit(1 if viol else 0)


def cmd_load(a):
    """Requests in [t0, t1] by kind of client (--ua-bridge, --ua-sub)
    and of path (documents, resources): JSON."""
    out = {"bridge_docs": 0, "bridge_res": 0, "sub_docs": 0, "sub_res": 0,
           "other": 0, "bridge_paths": {}, "sub_paths": {}}
    for r in ctl_get(a.port, "/_ctl/log"):
        if r["t0"] < a.t0 or (a.t1 is not None and r["t0"] > a.t1):
            continue
        res = r["p"].startswith("/data/")
        if a.ua_bridge in r["ua"]:
            who = "bridge"
        elif a.ua_sub in r["ua"]:
            who = "sub"
        else:
            out["other"] += 1
            continue
        out["%s_%s" % (who, "res" if res else "docs")] += 1
        if not res:
            d = out["%s_paths" % who]
            d[r["p"]] = d.get(r["p"], 0) + 1
    print(json.dumps(out, sort_keys=True))


# ---------------------------------------------------------------- latency

def mirror_md5(path):
    try:
        with open(path, "rb") as f:
            return hashlib.md5(f.read()).hexdigest()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def cmd_watch(a):
    """Follow the journal and the mirrors: for each change (bogus entries
    aside) and each mirror, the time from the documents first showing it
    to the mirror holding it (or a later state of the same resource).
    Runs until --stop exists and nothing is pending, or --timeout; writes
    JSON to --out and prints a summary."""
    mirrors = a.mirror
    pending = {m: {} for m in mirrors}     # mirror -> rel -> [entry]
    lat = {m: [] for m in mirrors}
    seen = 0
    deadline = time.monotonic() + a.timeout
    next_fetch = 0.0
    stop_seen = False
    while time.monotonic() < deadline:
        now_m = time.monotonic()
        if now_m >= next_fetch:
            try:
                new = ctl_get(a.port, "/_ctl/journal?from=%d" % seen)
            except OSError:
                new = []
            seen += len(new)
            for e in new:
                if e["bogus"] or (a.from_seq is not None and e["seq"] < a.from_seq):
                    continue
                for m in mirrors:
                    pending[m].setdefault(e["rel"], []).append(e)
            next_fetch = now_m + 0.1
            stop_seen = bool(a.stop) and os.path.exists(a.stop)
        t = time.time()
        for m in mirrors:
            for rel in list(pending[m]):
                es = pending[m][rel]
                cur = mirror_md5(os.path.join(m, rel))
                hit = None
                for k in range(len(es) - 1, -1, -1):
                    want = None if es[k]["change"] == "deleted" else es[k]["md5"]
                    if want == cur and es[k]["shown"] is not None:
                        hit = k
                        break
                if hit is None:
                    continue
                for e in es[:hit + 1]:
                    lat[m].append((e["seq"], t - e["shown"]))
                del es[:hit + 1]
                if not es:
                    del pending[m][rel]
        if stop_seen and not any(pending[m] for m in mirrors):
            break
        time.sleep(a.step)
    allv = sorted(v for m in mirrors for _, v in lat[m])
    res = {"mirrors": {}, "n": len(allv)}
    for m in mirrors:
        v = sorted(x for _, x in lat[m])
        res["mirrors"][m] = {
            "n": len(v), "max": round(v[-1], 3) if v else None,
            "p50": round(v[len(v) // 2], 3) if v else None,
            "p95": round(v[min(len(v) - 1, int(len(v) * 0.95))], 3) if v else None,
            "missing": sorted("%s#%d" % (rel, e["seq"]) for rel, es
                              in pending[m].items() for e in es)[:10],
            "n_missing": sum(len(es) for es in pending[m].values())}
    if allv:
        res.update({"max": round(allv[-1], 3), "p50": round(allv[len(allv) // 2], 3),
                    "p95": round(allv[min(len(allv) - 1, int(len(allv) * 0.95))], 3)})
    if a.out:
        ss.write_atomic(a.out, json.dumps(res) + "\n")
    print(json.dumps(res))


# ------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(prog="bridge_source.py")
    sp = ap.add_subparsers(dest="cmd", required=True)
    p = sp.add_parser("serve", help="serve a Source on 127.0.0.1")
    p.add_argument("--shape", choices=["A", "B", "C"], required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ready", help='write {"port":N} here once listening')
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--initial", type=int, default=20,
                   help="resources present at start (in the Resource List)")
    p.add_argument("--rotate", type=int, default=25,
                   help="A: entries in a Change List before it is closed")
    p.add_argument("--page-size", type=int, default=10,
                   help="B: entries per page")
    p.add_argument("--window", type=float, default=3600,
                   help="B: the trailing window, seconds")
    p.add_argument("--latest-only", action="store_true",
                   help="B: each resource once, its last change")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--rl-parts", type=int, default=0,
                   help="A, C: the Resource List an index over N parts")
    g.add_argument("--rl-pages", type=int, default=0,
                   help='A, C: the Resource List N pages (rel="next")')
    p.add_argument("--access-log", help="append the access log here")
    p.set_defaults(fn=cmd_serve)

    p = sp.add_parser("ctl", help="talk to a serve: " + cmd_ctl.__doc__)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("args", nargs="*")
    p.set_defaults(fn=cmd_ctl)

    p = sp.add_parser("check-stream", help="a recorded stream against the "
                      "Source's journal")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--sub", required=True, help="hubtool sub/follow log")
    p.add_argument("--bridged", help="PUBLIC/s/NAME/: rel=up must be under it")
    p.add_argument("--mode", choices=["exact", "gens", "replay"], default="exact")
    p.add_argument("--from-seq", type=int, help="exact: journal from this seq")
    p.add_argument("--ua", default="rsbridge")
    p.add_argument("--baseline-gen", type=int, default=0,
                   help="replay: the generation the bridge started from")
    p.add_argument("--final", action="store_true",
                   help="replay: the stream ends in the Source's state")
    p.add_argument("--slack", type=float, default=0.05,
                   help="replay: clock slack, seconds")
    p.set_defaults(fn=cmd_check_stream)

    p = sp.add_parser("check-bridged", help="the bridged documents")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--bridged", required=True, help="PUBLIC/s/NAME/")
    p.add_argument("--hub", required=True, help="the hub's publish URL")
    p.add_argument("--ws", type=int, required=True, help="the hub's WebSocket port")
    p.set_defaults(fn=cmd_check_bridged)

    p = sp.add_parser("politeness", help="the bridge's requests")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ua", default="rsbridge")
    p.add_argument("--interval", type=float, required=True)
    p.add_argument("--t0", type=float, default=0)
    p.add_argument("--t1", type=float)
    p.add_argument("--tol", type=float, default=0.05)
    p.add_argument("--max-inflight", type=int, default=1)
    p.add_argument("--entry", help="the document each poll begins with "
                   "(default: found in the log)")
    p.set_defaults(fn=cmd_politeness)

    p = sp.add_parser("load", help="requests per kind of client")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--t0", type=float, default=0)
    p.add_argument("--t1", type=float)
    p.add_argument("--ua-bridge", default="rsbridge")
    p.add_argument("--ua-sub", default="rspush/",
                   help="rssub's User-Agent (common/http.c: rspush/VERSION)")
    p.set_defaults(fn=cmd_load)

    p = sp.add_parser("watch", help="latency from the documents to mirrors")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mirror", action="append", required=True)
    p.add_argument("--out")
    p.add_argument("--stop", help="end once this file exists and all landed")
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--step", type=float, default=0.02)
    p.add_argument("--from-seq", type=int)
    p.set_defaults(fn=cmd_watch)
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
