#!/usr/bin/env python3
"""browser.py - a real browser for the integration tests: Debian's
chromium, headless, driven by Debian's chromedriver over the W3C WebDriver
protocol (plain JSON over HTTP on loopback: urllib, no selenium).

    with Browser(tmpdir) as b:
        b.get("http://127.0.0.1:PORT/ui/")
        b.wait("return document.querySelectorAll('li').length > 0", 10)
        b.screenshot("page.png")

Browser.available() says why it cannot run (None when it can), so that a
test can skip with a clear message. chromedriver and chromium are started
here and stopped by their own process handle, never by name.
"""
import base64
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request

CHROMIUM = ("/usr/lib/chromium/chromium", "/usr/bin/chromium")
DRIVER = ("/usr/lib/chromium/chromedriver", "/usr/bin/chromedriver")


def _first(paths):
    for p in paths:
        if os.access(p, os.X_OK):
            return p
    return None


class BrowserError(Exception):
    pass


class Browser:
    """One chromedriver, one headless chromium session."""

    @staticmethod
    def available():
        if _first(CHROMIUM) is None:
            return "chromium is not installed (deploy/install-deps.sh)"
        if _first(DRIVER) is None:
            return "chromedriver is not installed (chromium-driver)"
        return None

    def __init__(self, tmpdir, width=1280, height=1000, timeout=20):
        self.tmpdir = tmpdir
        self.size = (width, height)
        self.timeout = timeout
        self.proc = None
        self.base = None
        self.sid = None
        self.log = os.path.join(tmpdir, "chromedriver.log")

    # ------------------------------------------------------ lifecycle

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        why = self.available()
        if why:
            raise BrowserError(why)
        os.makedirs(self.tmpdir, exist_ok=True)
        logf = open(self.log, "wb")
        # --port=0: the kernel's choice, read back from the banner.
        self.proc = subprocess.Popen(
            [_first(DRIVER), "--port=0", "--log-path=" + self.log + ".verbose"],
            stdout=logf, stderr=subprocess.STDOUT)
        logf.close()
        deadline = time.monotonic() + self.timeout
        port = None
        while port is None and time.monotonic() < deadline:
            with open(self.log, "rb") as f:
                m = re.search(rb"started successfully on port (\d+)", f.read())
            if m:
                port = int(m.group(1))
            elif self.proc.poll() is not None:
                break
            else:
                time.sleep(0.05)
        if port is None:
            self.stop()
            raise BrowserError("chromedriver did not start: " + self._tail())
        self.base = "http://127.0.0.1:%d" % port
        profile = os.path.join(self.tmpdir, "profile")
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": _first(CHROMIUM),
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--no-first-run",
                         "--no-default-browser-check", "--disable-extensions",
                         "--disable-background-networking", "--mute-audio",
                         "--window-size=%d,%d" % self.size,
                         "--user-data-dir=" + profile],
            }}}}
        try:
            v = self._call("POST", "/session", caps)
        except BrowserError:
            self.stop()
            raise
        self.sid = v["sessionId"]

    def stop(self):
        if self.sid is not None and self.proc is not None:
            try:
                self._call("DELETE", "/session/" + self.sid, timeout=10)
            except (BrowserError, OSError):
                pass
            self.sid = None
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
            self.proc = None
        shutil.rmtree(os.path.join(self.tmpdir, "profile"), ignore_errors=True)

    def _tail(self):
        try:
            with open(self.log, "rb") as f:
                return f.read()[-2000:].decode("utf-8", "replace")
        except OSError:
            return ""

    # ------------------------------------------------------ protocol

    def _call(self, method, path, body=None, timeout=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout + 40) as r:
                out = json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            try:
                v = json.loads(e.read()).get("value", {})
                msg = "%s: %s" % (v.get("error"), v.get("message", "")[:500])
            except ValueError:
                msg = str(e)
            raise BrowserError("%s %s: %s" % (method, path, msg)) from None
        except (urllib.error.URLError, OSError) as e:
            raise BrowserError("%s %s: %s" % (method, path, e)) from None
        return out.get("value")

    def _s(self, method, rel, body=None):
        return self._call(method, "/session/%s%s" % (self.sid, rel), body)

    # ------------------------------------------------------ commands

    def get(self, url):
        self._s("POST", "/url", {"url": url})

    def run(self, script, *args):
        """The value the script returns (a function body, as WebDriver's
        Execute Script: `arguments[i]` are args)."""
        return self._s("POST", "/execute/sync", {"script": script,
                                                 "args": list(args)})

    def wait(self, script, secs, *args, interval=0.1):
        """Run script until it returns a true value; that value, or
        BrowserError after secs with the last value."""
        deadline = time.monotonic() + secs
        last = None
        while True:
            last = self.run(script, *args)
            if last:
                return last
            if time.monotonic() >= deadline:
                raise BrowserError("not within %g s: %s (last: %r)" %
                                   (secs, script[:200], last))
            time.sleep(interval)

    def screenshot(self, path):
        """A PNG of the viewport; its size in bytes."""
        png = base64.b64decode(self._s("GET", "/screenshot"))
        with open(path, "wb") as f:
            f.write(png)
        return len(png)

    def full_screenshot(self, path):
        """The whole page: the window grown to the document's height
        (capped at 4000 px) for one shot, then restored."""
        h = int(self.run("return Math.min(4000, Math.max("
                         "document.documentElement.scrollHeight, 400));"))
        self._s("POST", "/window/rect", {"width": self.size[0],
                                         "height": h + 200})
        try:
            time.sleep(0.2)
            return self.screenshot(path)
        finally:
            self._s("POST", "/window/rect", {"width": self.size[0],
                                             "height": self.size[1]})

    def console(self):
        """The browser's console entries since the last call (messages of
        the page and of the browser: CSP violations, failed loads)."""
        try:
            return self._s("POST", "/se/log", {"type": "browser"}) or []
        except BrowserError:
            return []


if __name__ == "__main__":
    import sys
    why = Browser.available()
    if why:
        print("unavailable:", why)
        sys.exit(2)
    with Browser(sys.argv[2] if len(sys.argv) > 2 else "/tmp/browser-py") as b:
        b.get(sys.argv[1])
        print(b.run("return document.title"))
