"""Check every internal link of the built site: each ``href`` and ``src``
that points inside the site names a file that exists, and each ``#anchor``
names an ``id`` (or ``<a name>``) on the page it points to.

Usage (after ``make book``; ``make check-site`` runs it):

    .venv/bin/python tools/check_links.py [_build/html]

External links (``https:``, ``mailto:``, ...) are not followed: the site
is checked offline. Pages are every ``.html`` file except the theme's
template fragments under ``_static/`` (checked as targets, not read). Exit 1, one line per broken link, when any is broken.
Sphinx's ``-n`` catches broken cross-references in the sources; this
catches what it cannot see: links written as raw HTML or Markdown URLs,
theme buttons, download links, anchors into other pages.
"""
from __future__ import annotations

import argparse
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

# attributes that load or link to another resource
LINK_ATTRS = {("a", "href"), ("link", "href"), ("img", "src"),
              ("script", "src"), ("iframe", "src"), ("source", "src")}

# Sphinx's copies of the theme's files and of the sources: not pages
ASSET_DIRS = {"_static", "_sources", "_images"}


class _Page(HTMLParser):
    """The ids a page defines and the links it makes."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        d = dict(attrs)
        if d.get("id"):
            self.ids.add(d["id"])
        if tag == "a" and d.get("name"):
            self.ids.add(d["name"])
        for t, attr in LINK_ATTRS:
            if tag == t and d.get(attr):
                self.links.append(d[attr].strip())

    handle_startendtag = handle_starttag


def parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    page.close()
    return page


def is_external(url: str) -> bool:
    """A link with a scheme or a host (``https://``, ``//cdn``,
    ``mailto:``, ``javascript:``, ``data:``) leaves the site."""
    parts = urlsplit(url)
    return bool(parts.scheme or parts.netloc)


def check_site(site: Path) -> tuple[int, list[str]]:
    """(links checked, one message per broken link) for every HTML page
    under ``site``."""
    site = site.resolve()
    pages = sorted(p for p in site.rglob("*.html")
                   if p.relative_to(site).parts[0] not in ASSET_DIRS)
    parsed: dict[Path, _Page] = {}

    def page_of(path: Path) -> _Page:
        if path not in parsed:
            parsed[path] = parse(path)
        return parsed[path]

    checked, bad = 0, []
    for path in pages:
        rel = path.relative_to(site)
        for url in page_of(path).links:
            if not url or is_external(url):
                continue
            checked += 1
            parts = urlsplit(url)
            target = (path.parent / unquote(parts.path)).resolve() \
                if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            if site != target and site not in target.parents:
                bad.append(f"{rel}: {url} points outside the site")
                continue
            if not target.is_file():
                bad.append(f"{rel}: {url}: no file "
                           f"{target.relative_to(site)}")
                continue
            anchor = unquote(parts.fragment)
            if anchor and target.suffix == ".html" \
                    and anchor not in page_of(target).ids:
                bad.append(f"{rel}: {url}: no id {anchor!r} in "
                           f"{target.relative_to(site)}")
    return checked, bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("site", nargs="?", default="_build/html")
    args = ap.parse_args(argv)
    site = Path(args.site)
    if not (site / "index.html").is_file():
        print(f"check_links: no site at {site} (run `make book` first)")
        return 1
    checked, bad = check_site(site)
    for b in bad:
        print(f"FAIL {b}")
    print(f"check_links: {checked} internal links checked, {len(bad)} broken")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
