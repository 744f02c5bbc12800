"""A picture of the built site for the README, taken in headless Chromium.

Usage (after ``make book``; ``make site-picture`` runs it):

    .venv/bin/python tools/site_picture.py _build/html/book/ch03_ring.html docs/site.png

Opens the page from disk (network off), waits for its formulas and
widgets, scrolls so that its first widget sits below the header, and saves
the window (1280 x 800) at ``--scale`` as a PNG, which must stay under
``--max-kb`` (exit 1 otherwise: the README's picture is kept small).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from cdp import browser, find_chromium

READY = ("document.readyState === 'complete' && (!window.MathJax ||"
         " !MathJax.Hub || MathJax.Hub.queue.pending === 0) &&"
         " Array.from(document.querySelectorAll('.warmup-widget'))"
         ".every(e => e.querySelector('[data-ready]'))")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", help="a built page, e.g. _build/html/book/x.html")
    ap.add_argument("png")
    ap.add_argument("--scale", type=float, default=0.6)
    ap.add_argument("--max-kb", type=int, default=300)
    ap.add_argument("--scroll-to", default=".warmup-widget",
                    help="CSS selector to bring into view (none: the top)")
    ap.add_argument("--chromium", default=find_chromium())
    args = ap.parse_args(argv)
    if not args.chromium:
        print("site_picture: no chromium on PATH (apt-get install chromium)")
        return 1
    page_file, png = Path(args.page), Path(args.png)
    if not page_file.is_file():
        print(f"site_picture: no page {page_file} (run `make book` first)")
        return 1
    with browser(args.chromium) as page:
        page.call("Page.navigate", url=page_file.resolve().as_uri())
        if not page.wait(READY, 60):
            print("site_picture: the page did not finish loading in 60 s")
            return 1
        page.eval(f"(() => {{const e = document.querySelector("
                  f"{args.scroll_to!r}); if (e) {{ e.scrollIntoView("
                  f"{{block: 'start'}}); scrollBy(0, -120); }} }})()")
        time.sleep(0.5)
        png.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(png, {"x": 0, "y": page.eval("scrollY"),
                              "width": 1280, "height": 800}, args.scale)
    kb = png.stat().st_size / 1024
    print(f"site_picture: {png} ({kb:.0f} KB)")
    if kb > args.max_kb:
        print(f"site_picture: over {args.max_kb} KB; lower --scale")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
