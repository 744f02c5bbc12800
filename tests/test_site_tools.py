"""The site checkers themselves, on tiny fake sites and books: the link
checker finds each kind of broken link and nothing else, pages come from
_toc.yml however deep it nests, the launch and download buttons are held to
_config.yml, notebook_times reads jupyter-cache's records and fails past
the limit, and (where chromium is installed) the search and header-menu
checks tell a working page from a broken one."""
from __future__ import annotations

import argparse
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


def _need_chromium() -> str:
    """chromium's path; without it a developer's run skips the test, CI's
    fails it (as the checks themselves do)."""
    pytest.importorskip("websocket")
    from cdp import find_chromium, in_ci
    if not find_chromium():
        if in_ci():
            pytest.fail("no chromium on PATH, and CI is set")
        pytest.skip("no chromium on PATH")
    return find_chromium()


def _browser():
    from cdp import browser
    return browser(_need_chromium())


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


# -- every defect the browser checks look for, on fixture pages -----------
# (tests/fixtures/: one small page or notebook per defect, and a clean one;
# each defect must fail its check with a message that names it)

FIXTURES = ROOT / "tests" / "fixtures"
SITE_DEFECTS = {                      # page: what check_site must say
    "raw_table.html": "raw Markdown table",
    "raw_emphasis.html": "raw Markdown emphasis",
    "raw_heading.html": "raw Markdown heading",
    "raw_formula_dollar.html": "raw formula ($...$",
    "raw_formula_paren.html": "raw formula (\\(",
    "figure_spill.html": "figure 0: text runs off the figure",
    "slider_dead.html": "widget 0: slider 0 moved, figure unchanged",
    "console_error.html": "console error: fixture: something broke",
    "script_error.html": "script error: ReferenceError",
    "page_sideways.html": "page scrolls sideways at 1400 px",
    "code_sideways.html": "code block scrolls sideways at 1400 px",
}
CLEAN_PAGES = ["clean.html", "clean_at_end.html"]   # check_site passes
LAB_DEFECTS = {                       # notebook: what check_lab must say
    "raises.ipynb": "error output: ZeroDivisionError",
    "error_output.ipynb": "error output: KeyError",
    "stretched.ipynb": "16 px image shown 400 px wide",
    "myst_raw.ipynb": "MyST role JupyterLab cannot render: {glue:text}`value:.1f`",
    # Check yourself as it was (numbers in glue roles): fails, where
    # selfcheck_after.ipynb (the page now) passes
    "selfcheck_before.ipynb":
        "MyST role JupyterLab cannot render: {glue:text}`c5_nvlink:.0f`",
}


def _lines(out: str, name: str) -> list[str]:
    return [line for line in out.splitlines()
            if line.split(" ", 1)[-1].lstrip().startswith(name + ":")]


def _run_main(main, args) -> tuple[int, str]:
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(args)
    return rc, buf.getvalue()


@pytest.fixture(scope="module")
def site_run(tmp_path_factory):
    """check_site (strict about code width by default) over every fixture
    page, in one chromium, and with --no-strict-code-width over the wide
    code block's page: (exit
    status, output) of each."""
    _need_chromium()
    import check_site
    plotly = pytest.importorskip("plotly.offline")
    import shutil
    site = tmp_path_factory.mktemp("fixture-site") / "html"
    shutil.copytree(FIXTURES / "site", site)
    (site / "_static").mkdir()
    (site / "_static" / "plotly.min.js").write_text(plotly.get_plotlyjs(),
                                                    encoding="utf-8")
    out = ["--out", str(site.parent / "shots")]
    redraw, check_site.REDRAW_S = check_site.REDRAW_S, 5
    try:      # (the dead slider waits REDRAW_S for a redraw that never comes)
        every = _run_main(check_site.main, [str(site), "--pages"] + out)
        lenient = _run_main(check_site.main, [
            str(site), "--no-strict-code-width", "--pages",
            "code_sideways.html"] + out)
    finally:
        check_site.REDRAW_S = redraw
    return every, lenient


@pytest.mark.slow                     # starts chromium
@pytest.mark.timeout(240)
@pytest.mark.parametrize("name, why", sorted(SITE_DEFECTS.items()))
def test_check_site_names_each_defect(site_run, name, why):
    (rc, out), _ = site_run
    assert rc == 1
    lines = _lines(out, name)
    assert lines and all(line.startswith("FAIL ") for line in lines), out
    # the page's one defect, and nothing else
    assert all(why in line for line in lines), lines


@pytest.mark.slow                     # starts chromium
@pytest.mark.timeout(240)
def test_check_site_passes_the_clean_pages_and_moves_their_sliders(site_run):
    (_, out), _ = site_run
    for name in CLEAN_PAGES:          # (one slider starts at its last step)
        assert _lines(out, name) == [f"ok   {name}: 1 tables, 0 formulas, "
                                     "1 widgets, 1 sliders moved"]
    assert set(SITE_DEFECTS) | set(CLEAN_PAGES) == {
        p.name for p in (FIXTURES / "site").glob("*.html")}, \
        "a fixture page without its expected defect"
    n = len(SITE_DEFECTS) + len(CLEAN_PAGES)
    assert out.splitlines()[-1].startswith(
        f"check_site: {len(CLEAN_PAGES)} of {n} checks pass (pages); "
        "screenshots in ")


@pytest.mark.parametrize("step, n_steps, ends", [
    (0, 3, (0.97, 0.03)), (1, 3, (0.97, 0.03)), (2, 3, (0.03, 0.97)),
    (0, 1, (0.03, 0.97))])
def test_a_slider_is_clicked_first_at_the_end_it_is_not_at(step, n_steps,
                                                           ends):
    from check_site import rail_ends
    assert rail_ends(step, n_steps) == ends


@pytest.mark.slow                     # starts chromium
@pytest.mark.timeout(240)
def test_wide_code_blocks_fail_unless_no_strict_code_width(site_run):
    _, (rc, out) = site_run
    assert rc == 0, out
    assert out.splitlines()[:2] == [
        "ok   code_sideways.html: 0 tables, 0 formulas, 0 widgets, 0 sliders"
        " moved",
        "note code_sideways.html: 1 code blocks scroll sideways at 1400 px "
        "(fails without --no-strict-code-width)"]


@pytest.fixture(scope="module")
def lab_run(tmp_path_factory):
    """check_lab (strict about MyST by default) over every fixture notebook
    (one JupyterLab, one chromium): (exit status, output, screenshots)."""
    _need_chromium()
    import check_lab
    out = tmp_path_factory.mktemp("lab-shots")
    nbs = sorted((FIXTURES / "lab").glob("*.ipynb"))
    rc, text = _run_main(check_lab.main, [str(n) for n in nbs] +
                         ["--out", str(out)])
    return rc, text, out


@pytest.mark.slow                     # starts JupyterLab and chromium
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name, why", sorted(LAB_DEFECTS.items()))
def test_check_lab_names_each_defect(lab_run, name, why):
    rc, out, _ = lab_run
    assert rc == 1
    lines = _lines(out, name)
    assert lines and all(line.startswith("FAIL ") for line in lines), out
    assert any(why in line for line in lines), lines


@pytest.mark.slow                     # starts JupyterLab and chromium
@pytest.mark.timeout(300)
def test_check_lab_details(lab_run):
    _, out, shots = lab_run
    assert _lines(out, "clean.ipynb") == [
        "ok   clean.ipynb: every cell ran; 0 slider(s) moved"], out
    assert set(LAB_DEFECTS) | {"clean.ipynb", "selfcheck_after.ipynb"} == {
        p.name for p in (FIXTURES / "lab").glob("*.ipynb")}
    # the page as it is now passes, its worked answer opened and
    # photographed with the numbers in it
    assert _lines(out, "selfcheck_after.ipynb") == [
        "ok   selfcheck_after.ipynb: every cell ran; 0 slider(s) moved, "
        "1 folded answer(s) opened"], out
    assert (shots / "selfcheck_after-answer0.png").stat().st_size > 5000
    before = _lines(out, "selfcheck_before.ipynb")
    assert len(before) == 5 and all("{glue:text}`c5_" in b for b in before)
    # Run All stops at the raising cell; the notebook is then left alone
    assert "FAIL raises.ipynb: cells [3] did not run" in out
    # every form of raw MyST, and no other notebook's defects
    myst = _lines(out, "myst_raw.ipynb")
    # jupyterlab-myst (make venv installs it) draws the admonition, the
    # note and the {cite} (its key); the glue role and the {ref} to a
    # label it cannot resolve are shown wrong
    for form in ("{glue:text}`value:.1f`",
                 'unresolved MyST reference "elsewhere-label"'):
        assert any(form in line for line in myst), myst
    assert len(myst) == 2, myst
    assert all("MyST" in line for line in myst), myst
    assert not any("MyST" in line for n in LAB_DEFECTS
                   if n not in ("myst_raw.ipynb", "selfcheck_before.ipynb")
                   for line in _lines(out, n))


def test_raw_myst_fails_unless_no_strict_myst():
    import check_lab
    myst = ["raw MyST role {cite}`x`", "raw MyST directive :::{note}"]
    lines, failed = check_lab.report("a.ipynb", [], myst, "0 moved", False)
    assert not failed and lines == [
        "ok   a.ipynb: every cell ran; 0 moved",
        "note a.ipynb: 2 MyST role(s) or directive(s) shown wrong, e.g. "
        "raw MyST role {cite}`x` (fails without --no-strict-myst)"]
    lines, failed = check_lab.report("a.ipynb", [], myst, "0 moved", True)
    assert failed and lines == ["FAIL a.ipynb: raw MyST role {cite}`x`",
                                "FAIL a.ipynb: raw MyST directive :::{note}"]
    assert check_lab.report("a.ipynb", [], [], "0 moved", False) == (
        ["ok   a.ipynb: every cell ran; 0 moved"], False)
    lines, failed = check_lab.report("a.ipynb", ["error output: E: x"], myst,
                                     "", False)
    assert failed and lines[0] == "FAIL a.ipynb: error output: E: x"


def test_lab_shards_split_the_book_each_notebook_once():
    """make test runs check_lab as shards 1/2 and 2/2: together they check
    every notebook of the book, none twice."""
    import check_lab
    book = sorted((ROOT / "book").glob("*.ipynb"))
    for n in (1, 2, 3, len(book)):
        parts = [check_lab.in_shard(book, (i, n)) for i in range(1, n + 1)]
        assert sorted(sum(parts, [])) == book, n
        assert all(parts), n            # no shard is empty on the book
    assert check_lab.in_shard(book, None) == book
    assert check_lab.shard("2/3") == (2, 3)
    for bad in ("0/2", "3/2", "2", "a/b", "1/0"):
        with pytest.raises(argparse.ArgumentTypeError, match="I/N"):
            check_lab.shard(bad)


def test_a_bad_shard_is_a_one_line_usage_error(capsys):
    import check_lab
    with pytest.raises(SystemExit) as e:
        check_lab.main(["--shard", "3/2"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "'3/2' is not I/N" in err and "Traceback" not in err


# -- without chromium: SKIPPED for a developer, a failure in CI ----------

@pytest.fixture
def no_chromium_path(tmp_path, monkeypatch):
    """A PATH with no chromium on it (an empty folder)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CI", raising=False)
    return monkeypatch


@pytest.mark.parametrize("tool", ["check_site", "check_lab"])
@pytest.mark.parametrize("ci, rc, said", [
    (None, 0, "SKIPPED, no chromium on PATH"),
    ("true", 1, "FAIL, chromium is missing and CI is set"),
    ("1", 1, "FAIL, chromium is missing and CI is set"),
    ("false", 0, "SKIPPED, no chromium on PATH"),
])
def test_a_missing_chromium_fails_in_ci_only(no_chromium_path, tmp_path,
                                            capsys, tool, ci, rc, said):
    pytest.importorskip("websocket")
    import importlib
    main = importlib.import_module(tool).main
    if ci is not None:
        no_chromium_path.setenv("CI", ci)
    site = tmp_path / "html"
    write(site / "a.html", page("a"))
    args = ([str(site), "--pages", "--out", str(tmp_path / "o")]
            if tool == "check_site" else
            [str(FIXTURES / "lab" / "clean.ipynb"), "--out",
             str(tmp_path / "o")])
    assert main(args) == rc
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1 and out.startswith(f"{tool}: {said}")


@pytest.mark.slow                     # runs the CLI
@pytest.mark.timeout(60)
def test_check_site_cli_fails_in_ci_without_chromium(tmp_path):
    """The command `make check-site` runs, as CI runs it, with a PATH that
    has no chromium: exit 1 and one line that says why."""
    from conftest import run_command
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {"PATH": str(empty), "CI": "true", "HOME": str(tmp_path)}
    r = run_command([sys.executable, str(ROOT / "tools" / "check_site.py"),
                     str(tmp_path), "--out", str(tmp_path / "o")],
                    timeout=50, env=env)
    assert r.returncode == 1, r.describe()
    assert r.stdout.startswith(
        "check_site: FAIL, chromium is missing and CI is set"), r.describe()
    assert r.stderr == "", r.describe()


# -- what the tools import is declared ------------------------------------

def test_every_package_the_tools_import_is_declared():
    """Each third-party module a tool imports comes from a distribution
    that pyproject.toml names (installed transitively today is not enough:
    a dependency may drop it), and requirements.lock pins it."""
    import ast
    import importlib.metadata as md
    import re
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"]) + [
        r for extra in project["optional-dependencies"].values() for r in extra]

    def norm(name):
        return re.sub(r"[-_.]+", "-", name).lower()
    declared = {norm(re.match(r"[A-Za-z0-9._-]+", r).group(0)) for r in reqs}
    pinned = {norm(line.split("==")[0]) for line in (
        ROOT / "requirements.lock").read_text().splitlines()
        if "==" in line and not line.startswith("#")}
    local = {p.stem for p in (ROOT / "tools").glob("*.py")} | {"warmup_kit"}
    dists = md.packages_distributions()
    seen = {}
    for tool in sorted((ROOT / "tools").glob("*.py")):
        for node in ast.walk(ast.parse(tool.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for top in {n.split(".")[0] for n in names} - local - set(
                    sys.stdlib_module_names):
                seen.setdefault(top, tool.name)
    assert {"websocket", "yaml"} <= set(seen)
    for module, tool in sorted(seen.items()):
        owners = {norm(d) for d in dists.get(module, [])}
        assert owners, f"{tool} imports {module}, which is not installed"
        assert owners & declared, (
            f"{tool} imports {module} ({sorted(owners)}), not declared in "
            "pyproject.toml")
        assert owners & pinned, f"{module} is not pinned in requirements.lock"
