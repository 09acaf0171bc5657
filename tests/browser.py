"""A real browser for the tests: headless Chromium (Debian's `chromium`) driven through the
DevTools protocol over a websocket, synchronously: open a page, evaluate JavaScript in it,
click and right-click where a person would, take a screenshot."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest


def chromium() -> str:
    """The browser's path, or skip saying why (scripts/test.sh installs it where it can)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium here (scripts/test.sh installs Debian's chromium when run as root "
                "with apt-get)")


class Page:
    """One tab, through its DevTools websocket."""

    def __init__(self, ws_url: str) -> None:
        from websockets.sync.client import connect
        self.ws = connect(ws_url, max_size=None, open_timeout=30)
        self.next_id = 0
        self.events: list[dict] = []  # the protocol's events met while waiting for answers

    def call(self, method: str, timeout: float = 30, **params: object) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)

    def evaluate(self, expression: str, timeout: float = 30) -> object:
        """The value of a JavaScript expression (a promise is awaited)."""
        r = self.call("Runtime.evaluate", timeout=timeout, expression=expression,
                      returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression[:80]}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60) -> object:
        """Poll until the expression is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"still false after {timeout} s: {expression}")
            time.sleep(0.2)

    def open(self, url: str) -> None:
        self.call("Page.enable")
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete'")

    def requested(self) -> list[str]:
        """The URLs the page has asked for since Network.enable (events read so far)."""
        return [e["params"]["request"]["url"] for e in self.events
                if e["method"] == "Network.requestWillBeSent"]

    def blocked(self) -> list[str]:
        """The URLs of those requests the browser refused by the page's security policy."""
        ids = {e["params"]["requestId"] for e in self.events
               if e["method"] == "Network.loadingFailed"
               and e["params"].get("blockedReason") == "csp"}
        return [e["params"]["request"]["url"] for e in self.events
                if e["method"] == "Network.requestWillBeSent" and e["params"]["requestId"] in ids]

    def click(self, x: float, y: float, button: str = "left") -> None:
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button=button,
                      clickCount=0 if kind == "mouseMoved" else 1)

    def screenshot(self, path: Path, width: int = 1280, height: int = 720) -> None:
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        self.ws.close()


class Browser:
    """Headless Chromium for the length of a `with`; page() opens a tab."""

    def __enter__(self) -> "Browser":
        self.profile = tempfile.mkdtemp(prefix="ada-chromium-")
        log = Path(self.profile) / "stderr.log"
        with open(log, "w") as err:  # a file, not a pipe: chromium writes on and never blocks
            self.proc = subprocess.Popen(
                [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
                 "--disable-dev-shm-usage", "--no-first-run", "--remote-debugging-port=0",
                 f"--user-data-dir={self.profile}", "--window-size=1280,720", "about:blank"],
                stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "HOME": self.profile})
        deadline = time.monotonic() + 60
        while True:
            m = re.search(r"DevTools listening on ws://([\d.]+:\d+)/", log.read_text())
            if m:
                self.address = m.group(1)
                return self
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"chromium gave no DevTools address: {log.read_text()[-500:]}")
            time.sleep(0.1)

    def page(self) -> Page:
        request = urllib.request.Request(f"http://{self.address}/json/new?about:blank",
                                         method="PUT")
        with urllib.request.urlopen(request, timeout=30) as r:
            return Page(json.load(r)["webSocketDebuggerUrl"])

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)
