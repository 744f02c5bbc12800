"""The site checkers themselves, on tiny fake sites and books: the link
checker finds each kind of broken link and nothing else, pages come from
_toc.yml however deep it nests, the launch and download buttons are held to
_config.yml, notebook_times reads jupyter-cache's records and fails past
the limit, and (where chromium is installed) the search and header-menu
checks tell a working page from a broken one."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import check_links  # noqa: E402
import site_expect  # noqa: E402

yaml = pytest.importorskip("yaml")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def page(body: str) -> str:
    return f"<!doctype html><html><body>{body}</body></html>"


# -- check_links -------------------------------------------------------

@pytest.fixture
def site(tmp_path) -> Path:
    s = tmp_path / "html"
    write(s / "index.html", page('<a href="book/a.html">a</a>'))
    write(s / "book/a.html", page(
        '<h1 id="top">A</h1><a href="#top">self</a>'
        '<a href="b.html#sec">b sec</a><a href="b.html#named">b named</a>'
        '<a href="b.html?x=1">query</a><a href="sub/">dir</a>'
        '<a href="https://example.org/nowhere.html#x">external</a>'
        '<a href="mailto:x@example.org">mail</a><a href="#">empty</a>'
        '<img src="../_static/logo.png"><a href="b%20c.html">space</a>'
        '<a href="../_sources/book/a.ipynb">download</a>'))
    write(s / "book/b.html", page('<h2 id="sec">S</h2><a name="named"></a>'))
    write(s / "book/b c.html", page("spaces"))
    write(s / "book/sub/index.html", page("sub"))
    write(s / "_static/logo.png", "png")
    write(s / "_static/macros.html", page('<a href="{{ pathto(x) }}">t</a>'))
    write(s / "_sources/book/a.ipynb", "{}")
    return s


def test_check_links_passes_a_sound_site(site):
    checked, bad = check_links.check_site(site)
    assert bad == []
    # index -> a; in a: #top, #, b#sec, b#named, b?x, sub/, img, space,
    # download (not the externals, nor the template under _static)
    assert checked == 10


@pytest.mark.parametrize("href, why", [
    ("b.html#nosuch", ": no id 'nosuch' in book/b.html"),
    ("#nosuch", ": no id 'nosuch' in book/bad.html"),
    ("missing.html", ": no file book/missing.html"),
    ("../_static/missing.js", ": no file _static/missing.js"),
    ("sub2/", ": no file book/sub2"),
    ("../../outside.html", " points outside the site"),
])
def test_check_links_finds_each_kind_of_broken_link(site, href, why):
    write(site / "book/bad.html", page(f'<a href="{href}">x</a>'))
    _, bad = check_links.check_site(site)
    assert bad == [f"book/bad.html: {href}{why}"]


def test_check_links_main_exit_codes(site, tmp_path, capsys):
    assert check_links.main([str(site)]) == 0
    write(site / "book/a.html", page('<script src="gone.js"></script>'))
    assert check_links.main([str(site)]) == 1
    assert "FAIL book/a.html: gone.js" in capsys.readouterr().out
    assert check_links.main([str(tmp_path / "nothing")]) == 1


# -- pages from _toc.yml ------------------------------------------------

TOC = """\
format: jb-book
root: book/intro
parts:
  - caption: Chapters
    chapters:
      - file: book/ch01
        sections:
          - file: book/ch01_more
            sections:
              - file: book/deep.md
      # - file: book/ch99_planned
  - caption: Reference
    chapters:
      - file: book/glossary
"""


@pytest.fixture
def book(tmp_path) -> Path:
    repo = tmp_path / "repo"
    write(repo / "_toc.yml", TOC)
    for name in ("intro.md", "ch01.ipynb", "ch01_more.ipynb", "deep.md",
                 "glossary.md"):
        write(repo / "book" / name, "{}" if name.endswith("ipynb") else "# x")
    return repo


def test_toc_pages_follow_every_level_in_order(book):
    pages = site_expect.toc_pages(book)
    assert [p for p, _ in pages] == ["book/intro", "book/ch01",
                                     "book/ch01_more", "book/deep",
                                     "book/glossary"]
    assert [s.name for _, s in pages] == ["intro.md", "ch01.ipynb",
                                          "ch01_more.ipynb", "deep.md",
                                          "glossary.md"]


def test_the_real_toc_lists_every_book_page():
    names = {p for p, _ in site_expect.toc_pages(ROOT)}
    on_disk = {str(p.relative_to(ROOT).with_suffix(""))
               for p in (ROOT / "book").glob("*.*")
               if p.suffix in (".md", ".ipynb")}
    assert names == on_disk


def test_check_site_covers_toc_pages_and_reports_unbuilt_ones(book, tmp_path):
    s = tmp_path / "html"
    for name in ("intro", "ch01", "deep", "glossary", "extra"):
        write(s / "book" / f"{name}.html", page(name))
    write(s / "search.html", page("search"))
    write(s / "_static/t.html", page("template"))
    pages, missing = site_expect.pages_to_check(s, book)
    assert [p for p, _, _ in pages] == ["book/intro", "book/ch01", "book/deep",
                                        "book/glossary", "book/extra"]
    assert len(missing) == 1 and missing[0].startswith(
        "book/ch01_more: in _toc.yml, no ")


# -- launch and download buttons -----------------------------------------

CONFIG = """\
repository:
  url: https://github.com/someone/somebook
  branch: pages
  path_to_book: docs
html:
  use_repository_button: true
launch_buttons:
  notebook_interface: jupyterlab
  binderhub_url: https://binder.example.org/
  colab_url: https://colab.example.com
  jupyterhub_url: https://hub.example.org
"""

# what sphinx-book-theme writes for docs/book/ch01.ipynb with CONFIG
GOOD = {
    "Binder": "https://binder.example.org/v2/gh/someone/somebook/pages"
              "?urlpath=lab/tree/docs/book/ch01.ipynb",
    "JupyterHub": "https://hub.example.org/hub/user-redirect/git-pull?repo="
                  "https%3A//github.com/someone/somebook&urlpath=lab/tree/"
                  "somebook/docs/book/ch01.ipynb&branch=pages",
    "Colab": "https://colab.example.com/github/someone/somebook/blob/pages/"
             "docs/book/ch01.ipynb",
}


@pytest.fixture
def cfg(tmp_path) -> dict:
    write(tmp_path / "_config.yml", CONFIG)
    return site_expect.launch_config(tmp_path)


def test_launch_config_reads_the_one_repository_setting(cfg):
    assert cfg["url"] == "https://github.com/someone/somebook"
    assert cfg["branch"] == "pages" and cfg["path_to_book"] == "docs"
    assert cfg["services"] == {"Binder": "https://binder.example.org",
                               "Colab": "https://colab.example.com",
                               "JupyterHub": "https://hub.example.org"}
    assert cfg["repository_button"]


def test_launch_buttons_as_the_theme_writes_them_pass(cfg):
    assert site_expect.check_launch(cfg, "book/ch01", GOOD) == []


@pytest.mark.parametrize("service, old, new", [
    ("Binder", "/pages?", "/main?"),
    ("Binder", "ch01", "ch02"),
    ("Binder", "binder.example.org", "mybinder.org"),
    ("Colab", "someone", "other"),
    ("JupyterHub", "branch=pages", "branch=main"),
    ("JupyterHub", "ch01", "ch02"),
])
def test_launch_buttons_pointing_elsewhere_fail(cfg, service, old, new):
    links = dict(GOOD, **{service: GOOD[service].replace(old, new)})
    bad = site_expect.check_launch(cfg, "book/ch01", links)
    assert len(bad) == 1 and service in bad[0]


def test_missing_and_unconfigured_launch_buttons_fail(cfg):
    links = {k: v for k, v in GOOD.items() if k != "Colab"}
    assert site_expect.check_launch(cfg, "book/ch01", links) == \
        ["no Colab launch button"]
    links = dict(GOOD, Deepnote="https://deepnote.example.com/x")
    assert "not in _config.yml" in site_expect.check_launch(
        cfg, "book/ch01", links)[0]


def test_the_real_config_configures_every_launch_service():
    cfg = site_expect.launch_config(ROOT)
    assert set(cfg["services"]) == {"Binder", "JupyterHub", "Colab"}
    assert cfg["url"].startswith("https://github.com/"), \
        "Colab opens notebooks from GitHub only"


def test_download_button_must_open_the_source_file(tmp_path):
    src = write(tmp_path / "repo/book/ch01.ipynb", '{"cells": []}')
    s = tmp_path / "html"
    built = write(s / "book/ch01.html", page(""))
    write(s / "_sources/book/ch01.ipynb", '{"cells": []}')
    href = "../_sources/book/ch01.ipynb"
    assert site_expect.check_download(s, built, src, [href]) == []
    assert "no download button" in site_expect.check_download(
        s, built, src, ["../_sources/book/other.ipynb"])[0]
    write(s / "_sources/book/ch01.ipynb", '{"cells": [1]}')
    assert "not the same file" in site_expect.check_download(
        s, built, src, [href])[0]


# -- notebook_times ---------------------------------------------------

def _cached_book(tmp_path, seconds: dict[str, float]):
    """A book of notebooks, those in ``seconds`` cached as executed in
    that many seconds, the way myst-nb records it."""
    nbformat = pytest.importorskip("nbformat")
    jc = pytest.importorskip("jupyter_cache")
    from jupyter_cache.base import CacheBundleIn
    repo = tmp_path / "repo"
    names = ["fast", "slow", "never"]
    write(repo / "_toc.yml", "root: book/intro\nchapters:\n" + "".join(
        f"  - file: book/{n}\n" for n in names))
    write(repo / "book/intro.md", "# intro")
    cache = jc.get_cache(str(tmp_path / "cache"))
    for n in names:
        nb = nbformat.v4.new_notebook(cells=[
            nbformat.v4.new_code_cell(f"print({n!r})")])
        nb.metadata["kernelspec"] = {"name": "python3",
                                     "display_name": "Python 3",
                                     "language": "python"}
        path = repo / "book" / f"{n}.ipynb"
        nbformat.write(nb, path)
        if n in seconds:
            cache.cache_notebook_bundle(CacheBundleIn(
                nb, str(path), data={"execution_seconds": seconds[n]}),
                check_validity=False)
    return repo, tmp_path / "cache"


def test_notebook_times_reads_the_cache_records(tmp_path):
    import notebook_times
    repo, cache = _cached_book(tmp_path, {"fast": 1.25, "slow": 75.0})
    rows = {r["notebook"]: r for r in notebook_times.times(repo, cache)}
    assert set(rows) == {"book/fast.ipynb", "book/slow.ipynb",
                         "book/never.ipynb"}
    assert rows["book/fast.ipynb"]["seconds"] == 1.25
    assert rows["book/slow.ipynb"]["seconds"] == 75.0
    assert rows["book/never.ipynb"]["seconds"] is None
    bad = notebook_times.problems(list(rows.values()), 60)
    assert len(bad) == 2
    assert any("slow" in b and "over the 60 s limit" in b for b in bad)
    assert any("never" in b and "no execution record" in b for b in bad)


def test_notebook_times_main_writes_json_and_fails_past_the_limit(tmp_path,
                                                                   capsys):
    import notebook_times
    repo, cache = _cached_book(tmp_path, {"fast": 1.25, "slow": 75.0,
                                          "never": 3.0})
    out = tmp_path / "times.json"
    args = ["--repo", str(repo), "--cache", str(cache), "--json", str(out)]
    assert notebook_times.main(args + ["--limit", "80"]) == 0
    text = capsys.readouterr().out
    assert text.index("book/slow.ipynb") < text.index("book/fast.ipynb"), \
        "slowest first"
    data = json.loads(out.read_text())
    assert data["limit_s"] == 80
    assert {r["notebook"]: r["seconds"] for r in data["notebooks"]} == {
        "book/fast.ipynb": 1.25, "book/slow.ipynb": 75.0,
        "book/never.ipynb": 3.0}
    assert notebook_times.main(args + ["--limit", "60"]) == 1
    assert "FAIL book/slow.ipynb: 75.0 s" in capsys.readouterr().out
    assert notebook_times.main(["--cache", str(tmp_path / "none")]) == 1


# -- search and header menus in a real browser --------------------------

SEARCH_PAGE = """<!doctype html><html><body><div id="search-results"></div>
<script>
const q = new URLSearchParams(location.search).get('q');
setTimeout(() => {
  const hits = %s;
  const out = document.getElementById('search-results');
  out.innerHTML = '<p class="search-summary">found ' + hits.length +
    '</p><ul class="search">' + hits.map(h =>
      '<li><a href="' + h + '#x">' + h + '</a></li>').join('') + '</ul>';
}, 200);
</script></body></html>"""

MENUS = page("""
<div class="dropdown dropdown-{kind}-buttons"><button
  style="position:absolute;left:900px;top:20px;width:40px;height:30px"
  onclick="this.nextElementSibling.style.display='block'">o</button>
<ul class="dropdown-menu" style="display:none;position:absolute;left:800px;
    top:60px">{items}</ul></div>""")


def _browser():
    pytest.importorskip("websocket")
    from cdp import browser, find_chromium
    if not find_chromium():
        pytest.skip("no chromium on PATH")
    return browser(find_chromium())


@pytest.mark.slow                     # starts chromium
@pytest.mark.timeout(120)
@pytest.mark.parametrize("hits, want, ok", [
    ("q === 'ring' ? ['book/ring.html', 'book/intro.html'] : []",
     "book/ring", True),
    ("q === 'ring' ? ['book/intro.html'] : []", "book/ring", False),
    ("['book/ring.html']", "book/ring", False),      # lists pages for anything
])
def test_search_check_tells_working_search_from_broken(tmp_path, hits,
                                                       want, ok):
    from site_nav import check_search
    write(tmp_path / "search.html", SEARCH_PAGE % hits)
    with _browser() as p:
        bad = check_search(p, tmp_path, "ring", want, tmp_path)
    assert (bad == []) is ok, bad


@pytest.mark.slow                     # starts chromium
@pytest.mark.timeout(120)
def test_search_check_fails_when_search_never_finishes(tmp_path):
    from site_nav import check_search
    write(tmp_path / "search.html", page('<div id="search-results"></div>'))
    with _browser() as p:
        bad = check_search(p, tmp_path, "ring", "book/ring", tmp_path,
                           timeout_s=3)
    assert bad == ["search for 'ring' did not finish in 3 s"]


@pytest.mark.slow                     # starts chromium
@pytest.mark.timeout(120)
@pytest.mark.parametrize("opens", [True, False])
def test_menu_check_clicks_the_menu_open(tmp_path, opens):
    from site_nav import open_menu
    items = '<li><a href="x.ipynb">.ipynb</a></li>'
    html = MENUS.format(kind="download", items=items)
    if not opens:
        html = html.replace("onclick=", "data-x=")
    f = write(tmp_path / "p.html", html)
    with _browser() as p:
        p.call("Page.navigate", url=f.as_uri())
        assert p.wait("document.readyState === 'complete'", 30)
        assert open_menu(p, "download", tmp_path / "menu.png") is opens
    assert (tmp_path / "menu.png").exists() is opens
