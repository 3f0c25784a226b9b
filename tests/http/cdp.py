"""A headless Chromium from the OS packages, driven over the Chrome DevTools protocol.

No Playwright, no browser download: /usr/bin/chromium (Debian's `chromium`, installed by
scripts/install-tools.sh) is started with a remote-debugging port, and the `websockets`
client the server already depends on speaks CDP to it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from websockets.sync.client import connect

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--autoplay-policy=no-user-gesture-required", "--remote-debugging-port=0",
         "--window-size=1100,900"]


class Browser:
    """One browser, one page. `events` keeps every CDP event seen (console, exceptions)."""

    def __init__(self) -> None:
        assert os.path.exists(CHROMIUM), ("chromium not found: run scripts/install-tools.sh "
                                          "(installs the Debian package)")
        self._profile = tempfile.mkdtemp(prefix="orpheus-chromium-")
        # TMPDIR: Chromium's own scratch directories go inside the profile, removed with it
        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={self._profile}",
                                      "about:blank"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "TMPDIR": self._profile})
        url = None
        for line in self.proc.stderr:  # Chromium prints its DevTools address on start-up
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                url = m.group(1)
                break
        assert url, "chromium did not start its DevTools endpoint"
        self._stack = contextlib.ExitStack()
        self._ws = self._stack.enter_context(connect(url, max_size=64 * 2**20, open_timeout=30))
        self._ids = itertools.count(1)
        self.events: list[dict] = []
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget",
                                 {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.send(f"{domain}.enable", session=True)

    def send(self, method: str, params: dict | None = None, session: bool = False,
             timeout: float = 60) -> dict:
        msg_id = next(self._ids)
        msg = {"id": msg_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        self._ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self._ws.recv(timeout=timeout))
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def evaluate(self, expression: str, gesture: bool = False):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True, "userGesture": gesture},
                           session=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 120):
        """Poll a page expression until truthy (waits on the page's own state)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"page never satisfied {expression!r}")

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", {"url": url}, session=True)
        self.wait_for("document.readyState === 'complete'")

    def screenshot(self) -> bytes:
        import base64
        data = self.send("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
        return base64.b64decode(data)

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and browser log errors seen so far."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e.get("method") == "Runtime.exceptionThrown":
                out.append(json.dumps(p.get("exceptionDetails", {}))[:500])
            elif e.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(json.dumps(p.get("args", []))[:500])
            elif e.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", "")[:500])
        return out

    def close(self) -> None:
        try:
            self._stack.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            shutil.rmtree(self._profile, ignore_errors=True)
