"""Check in headless Chromium that a built page's kernel-free widget responds.

Usage (after ``make book``; needs a ``chromium`` binary, not run by CI
unless one is present):

    .venv/bin/python tools/check_widget.py [_build/html/book/ch03_ring.html] \
        [--out _build/widget-check]

Opens the page from disk with the network off, waits for the first widget's
Plotly figure, takes a screenshot, moves each slider with real mouse clicks
(Chrome DevTools Protocol ``Input.dispatchMouseEvent``), and takes a
screenshot after each move. Fails unless the figure's title changes after
every move, i.e. the precomputed frame was switched without any kernel.
Talks CDP over the ``websocket-client`` package that Jupyter already
installs; no Playwright needed.
"""
from __future__ import annotations

import argparse
import base64
import itertools
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import websocket

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update",
         "--no-first-run", "--remote-debugging-port=0",
         "--window-size=1280,1000"]


class Page:
    """A minimal CDP session on one page target."""

    def __init__(self, ws_url: str):
        self.ws = websocket.create_connection(ws_url, timeout=30,
                                              suppress_origin=True)
        self.ids = itertools.count(1)

    def call(self, method: str, **params):
        i = next(self.ids)
        self.ws.send(json.dumps({"id": i, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == i:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def eval(self, expr: str):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True,
                      awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"JS error in {expr[:60]}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expr: str, timeout_s: float = 30.0):
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.eval(expr):
                return
            time.sleep(0.2)
        raise TimeoutError(f"waited {timeout_s}s for {expr}")

    def screenshot(self, path: Path, clip: dict) -> None:
        r = self.call("Page.captureScreenshot", format="png",
                      clip={**clip, "scale": 1})
        path.write_bytes(base64.b64decode(r["data"]))

    def click(self, x: float, y: float) -> None:
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y,
                      button="left", clickCount=1)


def start_chromium(binary: str, profile: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={profile}",
                             "about:blank"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    port_file = Path(profile) / "DevToolsActivePort"
    for _ in range(150):
        if port_file.exists() and port_file.read_text().strip():
            return proc, int(port_file.read_text().split()[0])
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("chromium did not open its DevTools port")


# the first widget on the page that has sliders (plain figures have none)
WIDGET = ("Array.from(document.querySelectorAll('.warmup-widget [data-ready]'))"
          ".find(e => e.querySelector('.slider-rail-touch-rect'))")
TITLE = (f"Array.from({WIDGET}.querySelectorAll('.annotation-text, .gtitle'))"
         ".map(e => e.textContent).join(' | ')")
RAILS = (f"Array.from({WIDGET}.querySelectorAll('.slider-rail-touch-rect'))"
         ".map(e => {const b = e.getBoundingClientRect();"
         " return [b.left, b.top, b.width, b.height];})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", nargs="?", default="_build/html/book/ch03_ring.html")
    ap.add_argument("--out", default="_build/widget-check")
    ap.add_argument("--chromium", default=shutil.which("chromium")
                    or shutil.which("chromium-browser") or "chromium")
    args = ap.parse_args(argv)
    page_path, out = Path(args.page).resolve(), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    profile = tempfile.mkdtemp(prefix="chromium-")
    proc, port = start_chromium(args.chromium, profile)
    try:
        targets = json.load(urllib.request.urlopen(
            f"http://127.0.0.1:{port}/json/list"))
        page = Page(next(t for t in targets if t["type"] == "page")
                    ["webSocketDebuggerUrl"])
        page.call("Network.enable")
        page.call("Network.emulateNetworkConditions", offline=True,
                  latency=0, downloadThroughput=-1, uploadThroughput=-1)
        page.call("Page.enable")
        page.call("Page.navigate", url=page_path.as_uri())
        page.wait(f"!!{WIDGET}")
        page.eval(f"{WIDGET}.scrollIntoView({{block: 'start'}})")
        time.sleep(0.5)
        x, y, w, h = page.eval(
            f"(() => {{const b = {WIDGET}.getBoundingClientRect();"
            " return [b.left + scrollX, b.top + scrollY, b.width, b.height];})()")
        clip = {"x": x, "y": y, "width": w, "height": h}
        titles = [page.eval(TITLE)]
        page.screenshot(out / "0-before.png", clip)
        rails = page.eval(RAILS)
        print(f"{page_path.name}: widget ready, {len(rails)} slider(s); "
              f"title: {titles[0]!r}")
        for i in range(len(rails)):
            # click the far end of the rail; if the slider already sat
            # there, the near end: one of the two is another value
            for frac in (0.97, 0.03):
                rx, ry, rw, rh = page.eval(RAILS)[i]  # fresh: layout moves
                page.click(rx + frac * rw, ry + rh / 2)
                time.sleep(0.8)
                now = page.eval(TITLE)
                if now != titles[-1]:
                    break
            titles.append(now)
            shot = out / f"{i + 1}-after-slider-{i}.png"
            page.screenshot(shot, clip)
            print(f"moved slider {i}: title now {titles[-1]!r} -> {shot}")
        changed = all(a != b for a, b in zip(titles, titles[1:]))
        print("PASS: the figure follows its sliders without a kernel"
              if changed and rails else "FAIL: the figure did not change")
        return 0 if changed and rails else 1
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
