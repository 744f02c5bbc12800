"""The site's navigation as a reader uses it, in headless Chromium (a
:class:`cdp.Page`): the header buttons (launch, download, repository),
opened with real clicks, and the search page. Part of ``check_site.py``;
what the buttons must point to comes from ``site_expect.py``.
"""
from __future__ import annotations

from pathlib import Path

from site_expect import check_download, check_launch

# a word no page of the book contains: search must find nothing for it
NO_SUCH_WORD = "qzxjvwpfk"

BUTTONS = r"""(() => {
  const q = (s) => Array.from(document.querySelectorAll(s));
  return {launch: q('.dropdown-launch-buttons a').map(
            a => [a.textContent.trim(), a.getAttribute('href')]),
          download: q('.dropdown-download-buttons a').map(
            a => a.getAttribute('href')),
          repo: q('.btn-source-repository-button').map(
            a => a.getAttribute('href'))};
})()"""
MENU = "document.querySelector('.dropdown-{0}-buttons')"
SHOWN = (MENU + " && Array.from(" + MENU + ".querySelectorAll('.dropdown-menu"
         " a')).some(a => a.getBoundingClientRect().height > 0)")


def open_menu(page, kind: str, shot: Path) -> bool:
    """Click a header menu open (as a reader does) and screenshot it."""
    page.eval("window.scrollTo(0, 0)")
    box = page.eval(f"(() => {{const b = {MENU.format(kind)}.querySelector("
                    "'button').getBoundingClientRect();"
                    " return [b.left + b.width / 2, b.top + b.height / 2];})()")
    page.click(*box)
    shown = page.wait(SHOWN.format(kind), 5)
    width, height = page.eval("[innerWidth, innerHeight]")
    if shown:                            # the header's right half
        page.screenshot(shot, {"x": width - 640, "y": 0, "width": 640,
                               "height": 300})
    page.click(10, height - 10)          # close it again
    return shown


def check_buttons(page, site: Path, path: Path, stem: str,
                  source: Path | None, cfg: dict, out: Path) -> list[str]:
    """The header buttons of the page loaded now (see the docstring)."""
    got = page.eval(BUTTONS)
    bad = check_download(site, path, source, got["download"])
    if source is not None and not open_menu(page, "download",
                                            out / f"{_name(stem)}-download.png"):
        bad.append("download menu does not open on a click")
    if cfg["repository_button"] and got["repo"] != [cfg["url"]]:
        bad.append(f"repository button {got['repo']}, not {cfg['url']}")
    if source is not None and source.suffix == ".ipynb" and cfg["services"]:
        bad += check_launch(cfg, stem, dict(got["launch"]))
        if not open_menu(page, "launch", out / f"{_name(stem)}-launch.png"):
            bad.append("launch menu does not open on a click")
    return bad


SEARCH_DONE = ("(document.querySelector('#search-results .search-summary')"
               " || {}).innerText")
HITS = ("Array.from(document.querySelectorAll('#search-results ul.search li"
        " a')).map(a => a.getAttribute('href').split('#')[0])")


def check_search(page, site: Path, term: str, want: str, out: Path,
                 timeout_s: float = 60) -> list[str]:
    """search.html finds ``want`` (a page name) for ``term`` and nothing
    for a word no page contains (the caller reads the console)."""
    bad = []
    for query in (term, NO_SUCH_WORD):
        page.call("Page.navigate",
                  url=(site / "search.html").resolve().as_uri() + "?q=" + query)
        if not (page.wait("document.readyState === 'complete'", timeout_s)
                and page.wait(SEARCH_DONE, timeout_s)):
            return [f"search for {query!r} did not finish in {timeout_s:g} s"]
        hits = page.eval(HITS)
        if query == term:
            page.screenshot(out / "search.png", scale=0.5)
            if f"{want}.html" not in hits:
                bad.append(f"search for {term!r}: {len(hits)} hits, none is "
                           f"{want}.html ({hits[:5]})")
        elif hits:
            bad.append(f"search for {query!r} (in no page) lists {hits[:5]}")
    return bad


def _name(stem: str) -> str:
    return stem.replace("/", "-")
