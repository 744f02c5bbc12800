"""A minimal Chrome DevTools Protocol client for the site checks.

Starts Debian's ``chromium`` headless with its own throw-away profile and
talks CDP over the ``websocket-client`` package that Jupyter already
installs: no Playwright, no download of a browser.
"""
from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import websocket

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update",
         "--no-first-run", "--remote-debugging-port=0"]


class BrowserError(RuntimeError):
    """Chromium could not be started or reached (not a page's fault)."""


def find_chromium() -> str | None:
    """The browser binary on PATH, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def in_ci() -> bool:
    """Whether this runs in CI (``CI`` set to true, as CI services do)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def no_chromium(tool: str) -> int:
    """What a browser check does without chromium, as its exit status:
    in CI it fails (a check that cannot run must not pass unseen); on a
    developer's machine it says SKIPPED and passes."""
    if in_ci():
        print(f"{tool}: FAIL, chromium is missing and CI is set: the check "
              "cannot run (apt-get install chromium)")
        return 1
    print(f"{tool}: SKIPPED, no chromium on PATH (apt-get install chromium)")
    return 0


class Page:
    """A CDP session on one page target; events are kept in ``events``."""

    #: seconds one DevTools call may take: a full-page screenshot of a long
    #: chapter took over 30 s on 2 cores busy with make test's other stages
    CALL_S = 120

    def __init__(self, ws_url: str):
        self.ws = websocket.create_connection(ws_url, timeout=self.CALL_S,
                                              suppress_origin=True)
        self.ids = itertools.count(1)
        self.events: list[dict] = []

    def call(self, method: str, **params):
        i = next(self.ids)
        self.ws.send(json.dumps({"id": i, "method": method, "params": params}))
        while True:
            try:
                msg = json.loads(self.ws.recv())
            except websocket.WebSocketTimeoutException:
                raise TimeoutError(f"{method}: chromium did not answer "
                                   f"within {self.CALL_S} s") from None
            if msg.get("id") == i:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]
            if msg.get("method") == "Page.javascriptDialogOpening":
                # a "leave this page?" question would block the call
                # forever: answer yes
                self.ws.send(json.dumps({
                    "id": next(self.ids), "method": "Page.handleJavaScriptDialog",
                    "params": {"accept": True}}))
            if "method" in msg:
                self.events.append(msg)

    def eval(self, expr: str):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True,
                      awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"JS error in {expr[:60]}: "
                               f"{r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expr: str, timeout_s: float = 30.0) -> bool:
        """Poll ``expr`` until it is truthy; False after ``timeout_s``."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.eval(expr):
                return True
            time.sleep(0.2)
        return False

    def screenshot(self, path: Path, clip: dict | None = None,
                   scale: float = 1.0) -> None:
        whole = clip is None
        if whole:                    # the whole page, below the fold too
            w, h = self.eval("[document.documentElement.scrollWidth,"
                             " document.documentElement.scrollHeight]")
            clip = {"x": 0, "y": 0, "width": w, "height": min(h, 30000)}
        # (capturing beyond the viewport resizes it for a moment: only for
        # the whole page, or the sliders measured next would have moved)
        r = self.call("Page.captureScreenshot", format="png",
                      captureBeyondViewport=whole,
                      clip={**clip, "scale": scale})
        path.write_bytes(base64.b64decode(r["data"]))

    def click(self, x: float, y: float) -> None:
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y,
                      button="left", clickCount=1)

    def close(self) -> None:
        self.ws.close()


@contextmanager
def browser(binary: str, *, offline: bool = True, width: int = 1280,
            height: int = 1000):
    """A headless chromium and a :class:`Page` on its first tab (network
    off by default: the site must work from disk; a ``width`` x ``height``
    window); both closed on exit. Raises :class:`BrowserError` when the
    browser does not start."""
    profile = tempfile.mkdtemp(prefix="chromium-")
    try:
        proc = subprocess.Popen([binary, *FLAGS, f"--window-size={width},"
                                 f"{height}", f"--user-data-dir={profile}",
                                 "about:blank"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    except OSError as e:
        shutil.rmtree(profile, ignore_errors=True)
        raise BrowserError(f"cannot start {binary}: {e}") from None
    page = None
    try:
        try:
            page = _connect(proc, Path(profile), offline)
        except (OSError, RuntimeError, StopIteration, ValueError,
                websocket.WebSocketException) as e:
            raise BrowserError(f"{binary} did not start: {e}") from None
        yield page
    finally:
        if page is not None:
            page.close()
        proc.kill()
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def _connect(proc: subprocess.Popen, profile: Path,
             offline: bool) -> Page:
    """A :class:`Page` on the started browser's first tab, set up."""
    port_file = profile / "DevToolsActivePort"
    for _ in range(300):
        if port_file.exists() and port_file.read_text().strip():
            break
        if proc.poll() is not None:
            raise RuntimeError(f"it exited ({proc.returncode})")
        time.sleep(0.1)
    else:
        raise RuntimeError("no DevTools port in 30 s")
    port = int(port_file.read_text().split()[0])
    targets = json.load(urllib.request.urlopen(
        f"http://127.0.0.1:{port}/json/list", timeout=30))
    page = Page(next(t for t in targets if t["type"] == "page")
                ["webSocketDebuggerUrl"])
    if offline:
        page.call("Network.enable")
        page.call("Network.emulateNetworkConditions", offline=True,
                  latency=0, downloadThroughput=-1, uploadThroughput=-1)
    page.call("Page.enable")
    # a headless tab never has focus; apps that follow focus (JupyterLab's
    # current notebook) need it
    page.call("Emulation.setFocusEmulationEnabled", enabled=True)
    return page
