r"""Check the built site as a reader sees it, in headless Chromium.

Usage (after ``make book``; ``make test`` runs it; needs Debian's
``chromium``, which ``.ci/run`` installs when it can):

    .venv/bin/python tools/check_site.py [_build/html] [--out _build/screenshots]
    .venv/bin/python tools/check_site.py SITE --pages [PAGE ...]

Opens every page of ``_toc.yml`` (and any other page the build wrote) from
disk with the network off, in a 1400 px wide window, and fails (exit 1,
one line per problem, naming it) unless every toc entry was built and, on
every page:

* the console shows no error and no script throws (a page that tries to
  fetch something from the network fails here: the site must work offline);
* no raw Markdown or TeX is left in the rendered text, outside code and
  preformatted output: a pipe table's rule ``|:--`` or row (``raw Markdown
  table``), a literal ``**`` (``raw Markdown emphasis``), a line that
  starts with ``#`` (``raw Markdown heading``), ``$$``, ``$...$`` with TeX
  in it, ``\(`` or ``\[`` (``raw formula``);
* every table of the source (pipe tables in Markdown cells, HTML tables in
  outputs) is a ``<table>`` on the page;
* every image, figure and Plotly widget has a non-zero size, and no
  Plotly figure's text (titles, labels, ticks, legend, the sliders'
  labels) runs off its edges, before or after a slider moves;
* every formula was typeset by MathJax;
* the page does not scroll sideways; nor does any code block, input or
  output (``--no-strict-code-width`` makes each page note how many do
  instead; ``tools/page_hygiene.py`` wraps code cells to fit the theme's
  768 px column);
* every kernel-free widget responds to its sliders: moving each slider with
  real mouse clicks changes the figure (its titles or its traces' data)
  without any kernel;
* its buttons point where ``_config.yml`` says: on a notebook page the
  launch menu (opened with a click) has Binder, JupyterHub and Colab
  entries for this notebook in ``repository.url`` at ``repository.branch``;
  the download menu links the page's source file (the stored notebook) and
  that link opens the very file; the repository button goes to
  ``repository.url``.

And the search page (``search.html?q=...``) lists the page that ``--search``
names for its term, and no page for a word no page contains.

``--pages`` checks only the named pages of SITE (all of them when none is
named) and skips what needs the book (``_toc.yml``, the header buttons,
search): the tests run it on the fixture pages of tests/fixtures/site/.

Without chromium on PATH the check says SKIPPED and passes, except in CI
(``CI=true``), where it fails: a check that cannot run must not pass unseen.

A screenshot of each page (half scale) goes to ``--out``, and one of each
widget after each slider move.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from cdp import BrowserError, browser, find_chromium, no_chromium
from site_expect import expected_tables, launch_config, pages_to_check
from site_nav import NO_SUCH_WORD, check_buttons, check_search


RAW_MARKDOWN = r"""(() => {
  const skip = 'pre, code, script, style, textarea, .math, .MathJax,' +
               ' .MathJax_Display, .MathJax_Preview, .highlight';
  // each pattern names the defect a reader sees: Markdown or TeX that was
  // shown as typed instead of rendered (Sphinx's smartquotes turn a
  // table rule's '---' into an em dash)
  const pats = [
    [/\|\s*:?(-{3,}|[\u2013\u2014]+)/, 'raw Markdown table (a |--- rule)'],
    [/^\s*\|[^|\n]+\|[^|\n]+\|/m, 'raw Markdown table (a | row |)'],
    [/\*\*\S/, 'raw Markdown emphasis (literal **)'],
    [/\$\$/, 'raw formula (literal $$)'],
    [/\$[^$\s][^$\n]*[\\^_{}][^$\n]*\$/, 'raw formula ($...$ as text)'],
    [/\\\(|\\\[/, 'raw formula (\\( or \\[ as text)']];
  const root = document.querySelector('main') || document.body;
  const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const bad = [];
  while (walk.nextNode()) {
    const node = walk.currentNode;
    if (!node.parentElement || node.parentElement.closest(skip)) continue;
    for (const [re, what] of pats)
      if (re.test(node.textContent))
        bad.push(what + ': ' + JSON.stringify(node.textContent.trim()
                                                 .slice(0, 70)));
  }
  // a heading's '#' on a paragraph's line (a text node may start
  // mid-line, after a link: '<a>..</a> # of GPUs' is no heading)
  root.querySelectorAll('p, li, dd').forEach(e => {
    if (e.closest(skip)) return;
    const m = e.innerText.match(/(^|\n)\s*(#{1,6}\s+\S[^\n]*)/);
    if (m) bad.push('raw Markdown heading (literal #): ' +
                    JSON.stringify(m[2].trim().slice(0, 70)));
  });
  return bad;
})()"""

SIZES = r"""(() => {
  const root = document.querySelector('main') || document.body;
  const bad = [];
  const sized = (e) => { const b = e.getBoundingClientRect();
                         return b.width > 0 && b.height > 0; };
  const name = (e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') +
                      (e.getAttribute('alt') ? ' ' + e.getAttribute('alt') : '');
  root.querySelectorAll('img').forEach(e => {
    if (!e.complete || e.naturalWidth === 0) bad.push('image not loaded: ' +
                                                     name(e));
    // (a closed menu's icons: its buttons are checked by opening it)
    else if (!sized(e) && !e.closest('details:not([open]), .dropdown-menu'))
      bad.push('image has no size: ' + name(e)); });
  root.querySelectorAll('.js-plotly-plot, .warmup-widget').forEach(e => {
    if (!sized(e) && !e.closest('details:not([open])'))
      bad.push('figure has no size: ' + name(e)); });
  return bad;
})()"""

# MathJax 2 (the copy shipped in _static) leaves a script[type^=math/tex]
# in every formula it typeset, next to its rendering
MATH_DONE = ("window.MathJax && MathJax.Hub && MathJax.Hub.queue && "
             "MathJax.Hub.queue.pending === 0 && !MathJax.Hub.queue.running")
# Sphinx's formulas (MathJax's own output has spans of class "math" too)
FORMULAS = "document.querySelectorAll('.math.notranslate')"
MATH_LEFT = r"""Array.from(document.querySelectorAll('.math.notranslate'))
  .filter(e => !e.querySelector('script[type^="math/tex"]'))
  .map(e => e.textContent.trim().slice(0, 50))"""

FIRST_TABLE = r"""(() => {
  const t = (document.querySelector('main') || document.body)
              .querySelector('table');
  t.scrollIntoView({block: 'center'});
  const b = t.getBoundingClientRect();
  return {x: b.left + scrollX - 8, y: b.top + scrollY - 8,
          width: b.width + 16, height: b.height + 16};
})()"""

# a figure's texts (titles, axis labels, ticks, legend, slider labels)
# that run past its left, right or top edge: cut off on the page. Widgets
# are named by their index among widgets (as drive_widgets names them), a
# Plotly figure outside any widget by its index among figures.
SPILL = r"""(() => { const out = [];
  const widgets = Array.from(document.querySelectorAll('.warmup-widget'));
  document.querySelectorAll('.js-plotly-plot').forEach((gd, j) => {
    const w = gd.closest('.warmup-widget');
    const name = w ? 'widget ' + widgets.indexOf(w) : 'figure ' + j;
    const b = gd.getBoundingClientRect();
    gd.querySelectorAll('.annotation-text, .gtitle, .g-xtitle text,' +
        ' .g-ytitle text, .xtick text, .ytick text, .legendtext,' +
        ' .slider-label, .slider-current-value')
      .forEach(t => { const r = t.getBoundingClientRect();
        if (r.width && (r.left < b.left - 1 || r.right > b.right + 1 ||
                        r.top < b.top - 1))
          out.push(name + ': text runs off the figure: ' +
                   JSON.stringify(t.textContent.slice(0, 60))); }); });
  return out; })()"""

# the page, or a code block (input or output), wider than the window: the
# reader has to scroll sideways (at the check's window width, WIDTH_PX):
# {page: [...], code: [...]}
SIDEWAYS = r"""(() => { const out = {page: [], code: []};
  const d = document.documentElement;
  if (d.scrollWidth > innerWidth + 1)
    out.page.push('page scrolls sideways at ' + innerWidth + ' px: ' +
                  d.scrollWidth + ' px wide');
  const root = document.querySelector('main') || document.body;
  root.querySelectorAll('pre').forEach(e => {
    if (e.offsetParent && !e.closest('details:not([open])') &&
        e.scrollWidth > e.clientWidth + 1)
      out.code.push('code block scrolls sideways at ' + innerWidth +
        ' px (' + e.scrollWidth + ' px in ' + e.clientWidth + '): ' +
        JSON.stringify(e.textContent.trim().split('\n')
                        .reduce((a, l) => l.length > a.length ? l : a, '')
                        .slice(0, 60)));
  });
  return out; })()"""

# the window the pages are checked in (a reader's laptop; no page or code
# block may scroll sideways at this width)
WIDTH_PX = 1400
WIDGETS = "document.querySelectorAll('.warmup-widget')"
# how long a widget may take to redraw after its slider moved (slow on a
# loaded machine: a late redraw must not be taken for a missed one)
REDRAW_S = 30
W = "document.querySelectorAll('.warmup-widget')[{i}]"
# what a figure shows: its titles and annotations, and a hash of its traces'
# data (a slider may change the bars and not the title)
TITLE = ("(() => {{const w = " + W + "; const t = Array.from(w.querySelectorAll("
         "'.annotation-text, .gtitle')).map(e => e.textContent).join(' | ');"
         " const gd = w.querySelector('.js-plotly-plot');"
         " const s = gd && gd.data ? JSON.stringify(gd.data.map(d =>"
         " [d.x, d.y, d.z, d.text, d.visible])) : '';"
         " let h = 5381; for (let j = 0; j < s.length; j++)"
         " h = ((h * 33) ^ s.charCodeAt(j)) >>> 0;"
         " return t + ' #' + h.toString(16);}})()")
# each slider's step (Plotly sets it as soon as a click takes)
ACTIVE = ("Array.from(" + W + ".querySelector('.js-plotly-plot').layout"
          ".sliders || []).map(s => s.active)")
# how many steps each slider has
STEPS = ("Array.from(" + W + ".querySelector('.js-plotly-plot').layout"
         ".sliders || []).map(s => s.steps.length)")
RAIL = W + ".querySelectorAll('.slider-rail-touch-rect')[{k}]"
# what a click at (x, y) would reach, '' when it is slider k's rail (or its
# grip, which sits on the rail)
HIT = ("(() => {{const e = document.elementFromPoint({x}, {y});"
       " const g = " + RAIL + ".closest('.slider-group');"
       " if (e && g.contains(e)) return '';"
       " if (!e) return 'nothing (outside the viewport ' + innerWidth + 'x' +"
       " innerHeight + ')';"
       " return e.tagName.toLowerCase() + (e.className && e.className.baseVal"
       " !== undefined ? '.' + e.className.baseVal : e.className ? '.' +"
       " e.className : '');}})()")
RAILS = ("Array.from(" + W + ".querySelectorAll('.slider-rail-touch-rect'))"
         ".map(e => {{const b = e.getBoundingClientRect();"
         " return [b.left, b.top, b.width, b.height];}})")


def console_errors(events: list[dict]) -> list[str]:
    bad = []
    for ev in events:
        m, p = ev["method"], ev.get("params", {})
        if m == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            bad.append("script error: " + d.get("exception", {}).get(
                "description", d.get("text", "")).splitlines()[0])
        elif m == "Runtime.consoleAPICalled" and p.get("type") == "error":
            bad.append("console error: " + " ".join(
                str(a.get("value", a.get("description", "")))
                for a in p.get("args", []))[:160])
        elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
            e = p["entry"]
            bad.append(f"console error: {e['text'][:120]} "
                       f"{e.get('url', '')}".rstrip())
    return bad


def settle(page, expr: str, timeout_s: float = 10):
    """``expr``'s value (positions) once two reads 0.3 s apart agree: a
    loaded page may still move things after a scroll or a redraw, and a
    click aimed at a stale position misses."""
    last = page.eval(expr)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        time.sleep(0.3)
        now = page.eval(expr)
        if now == last:
            return now
        last = now
    return last


def _clip(page, i: int) -> dict:
    """Widget ``i``'s box in page coordinates, scrolled to its top: taken
    again for every screenshot (a late redraw above it moves it)."""
    page.eval(f"{W.format(i=i)}.scrollIntoView({{block: 'start'}})")
    settle(page, RAILS.format(i=i))
    x, y, w, h = page.eval(
        f"(() => {{const b = {W.format(i=i)}.getBoundingClientRect();"
        " return [b.left + scrollX, b.top + scrollY, b.width, b.height];})()")
    return {"x": x, "y": y, "width": w, "height": h}


def rail_ends(step: int, n_steps: int) -> tuple[float, float]:
    """Where along a slider's rail to click, in order: the far end, or the
    near end first when ``step`` is the last of ``n_steps`` already (a
    click there changes nothing, and waiting to see it change cost 10 s a
    slider)."""
    return (0.03, 0.97) if step >= n_steps - 1 else (0.97, 0.03)


def _click_slider(page, i: int, k: int) -> tuple[bool, str]:
    """Click slider ``k`` of widget ``i`` until its step changes: (whether
    it did, what a click would land on if not the rail)."""
    # The rail itself is brought to the middle of the viewport: a tall
    # widget's last slider, scrolled to by the widget's top, can sit a few
    # pixels from the bottom edge, and a click outside the viewport reaches
    # nothing. Click the end of the rail the step is not at (the far end,
    # or the near one when the step is the last already); if the step does
    # not change, the other end: one of the two is another value.
    # A page still settling (a redraw above, a scrollbar coming or going)
    # can move the rail between measuring it and clicking: one more round.
    # "Changed" is the slider's own step, not the grip's pixels, which such
    # a redraw moves too.
    for _ in range(2):
        page.eval(f"({RAIL.format(i=i, k=k)})"
                  ".scrollIntoView({block: 'center'})")
        ends = rail_ends(page.eval(ACTIVE.format(i=i))[k],
                         page.eval(STEPS.format(i=i))[k])
        for frac in ends:
            step = page.eval(ACTIVE.format(i=i))[k]
            rx, ry, rw, rh = settle(page, RAILS.format(i=i))[k]
            x, y = rx + frac * rw, ry + rh / 2
            hit = page.eval(HIT.format(i=i, k=k, x=x, y=y))
            if hit:
                return False, f"a click at ({x:.0f}, {y:.0f}) lands on {hit}"
            page.click(x, y)
            if page.wait(f"({ACTIVE.format(i=i)})[{k}] !== {step}", 10):
                return True, ""
    return False, ""


def drive_widgets(page, name: str, out: Path) -> tuple[int, list[str]]:
    """Move every slider of every widget; (sliders moved, problems)."""
    moved, bad = 0, []
    for i in range(page.eval(f"{WIDGETS}.length")):
        rails = page.eval(RAILS.format(i=i))
        if not rails:
            continue                  # a plain figure
        _clip(page, i)
        before = page.eval(TITLE.format(i=i))
        for k in range(len(rails)):
            took, hit = _click_slider(page, i, k)
            # then wait for the redraw, slow on a loaded machine (a late
            # redraw must not be taken for a click that missed)
            if hit:
                bad.append(f"widget {i}: slider {k}: {hit}")
            elif not took:
                bad.append(f"widget {i}: slider {k} does not move on a click")
            elif not page.wait(f"({TITLE.format(i=i)}) !== "
                               f"{json.dumps(before)}", REDRAW_S):
                bad.append(f"widget {i}: slider {k} moved, figure unchanged "
                           f"({before!r})")
            time.sleep(0.2)
            before = page.eval(TITLE.format(i=i))
            moved += took
            # (check_page drops a spill seen twice)
            bad += [b for b in page.eval(SPILL) if b.startswith(f"widget {i}:")]
            page.screenshot(out / f"{name}-widget{i}-slider{k}.png",
                            _clip(page, i))
    return moved, bad


def check_page(page, path: Path, site: Path, source: Path | None, out: Path,
               strict_code: bool = False) -> tuple[list[str], list[str], str]:
    """Problems found on one page, notes (code blocks that scroll sideways,
    unless ``strict_code`` makes them problems), and a one-line summary."""
    page.events.clear()
    if 'http-equiv="refresh"' in path.read_text(encoding="utf-8").lower():
        return [], [], "a redirect"
    page.call("Page.navigate", url=path.resolve().as_uri())
    bad = []
    if not page.wait("document.readyState === 'complete'", 60):
        return ["page did not finish loading in 60 s"], [], ""
    n_math = page.eval(f"{FORMULAS}.length")
    if n_math:
        if not page.wait(MATH_DONE, 60):
            bad.append("MathJax did not finish (is it loaded?)")
        bad += [f"formula not typeset: {t!r}" for t in page.eval(MATH_LEFT)]
    n_widgets = page.eval(f"{WIDGETS}.length")
    if n_widgets and not page.wait(
            f"Array.from({WIDGETS}).every(e => e.querySelector("
            "'[data-ready]'))", 60):
        bad.append("a widget never became ready")
    time.sleep(0.3)
    bad += page.eval(RAW_MARKDOWN)
    bad += page.eval(SIZES)
    bad += page.eval(SPILL)
    sideways = page.eval(SIDEWAYS)
    bad += sideways["page"]
    if strict_code:
        bad += sideways["code"]
        notes = []
    else:
        notes = [f"{len(sideways['code'])} code blocks scroll sideways at "
                 f"{WIDTH_PX} px (fails without --no-strict-code-width)"
                 ] if sideways["code"] else []
    want = expected_tables(source)
    got = page.eval("(document.querySelector('main') || document.body)"
                    ".querySelectorAll('table').length")
    if got < want:
        bad.append(f"{want} tables in the source, {got} <table> on the page")
    name = str(path.relative_to(site).with_suffix("")).replace("/", "-")
    page.screenshot(out / f"{name}.png", scale=0.5)
    if got:                           # the first table, at full scale
        box = page.eval(FIRST_TABLE)
        page.screenshot(out / f"{name}-table0.png", box)
    moved, wbad = drive_widgets(page, name, out)
    bad = list(dict.fromkeys(bad + wbad))     # (a spill seen twice, once)
    time.sleep(0.2)
    page.eval("0")                    # collect the last console events
    bad += console_errors(page.events)
    return bad, notes, (f"{got} tables, {n_math} formulas, {n_widgets} widgets, "
                 f"{moved} sliders moved")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("site", nargs="?", default="_build/html")
    ap.add_argument("--out", default="_build/screenshots")
    ap.add_argument("--repo", default=".", help="where the sources are")
    ap.add_argument("--search", default="ring=book/ch03_ring",
                    help="TERM=PAGE: searching TERM must list PAGE")
    ap.add_argument("--pages", nargs="*", metavar="PAGE",
                    help="check only these pages of SITE (every .html "
                         "under it when none is named): no _toc.yml, "
                         "header buttons or search")
    ap.add_argument("--strict-code-width", default=True,
                    action=argparse.BooleanOptionalAction,
                    help="fail on code blocks that scroll sideways "
                         "(default; --no-strict-code-width makes each page "
                         "note how many do)")
    ap.add_argument("--chromium", default=find_chromium())
    args = ap.parse_args(argv)
    if not args.chromium:
        return no_chromium("check_site")
    site, out, repo = Path(args.site), Path(args.out), Path(args.repo)
    term, _, want = args.search.partition("=")
    out.mkdir(parents=True, exist_ok=True)
    if args.pages is None:
        pages, missing = pages_to_check(site, repo)
    else:
        pages, missing = given_pages(site, args.pages)
    for m in missing:
        print(f"FAIL {m}")
    if not pages:
        print(f"check_site: no pages under {site}")
        return 1
    cfg = launch_config(repo)
    failed = len(missing)
    try:
        with browser(args.chromium, width=WIDTH_PX) as page:
            failed += check_pages(page, site, pages, cfg, out,
                                  buttons=args.pages is None,
                                  strict_code=args.strict_code_width)
            if args.pages is None:
                failed += check_search_page(page, site, term, want, out)
    except BrowserError as e:
        print(f"check_site: FAIL {e}")
        return 1
    total = len(pages) + len(missing) + (args.pages is None)
    print(f"check_site: {total - failed} of {total} checks pass (pages"
          f"{' and search' if args.pages is None else ''}); screenshots "
          f"in {out}")
    return 1 if failed else 0


def given_pages(site: Path, names: list[str]
                ) -> tuple[list[tuple[str, Path, None]], list[str]]:
    """(name, file, no source) for the named pages of ``site``, or for
    every page under it; and the named ones that are not there."""
    if not names:
        names = [str(p.relative_to(site)) for p in sorted(site.rglob("*.html"))
                 if not p.relative_to(site).parts[0].startswith("_")]
    pages, missing = [], []
    for n in names:
        path = site / n
        if path.is_file():
            pages.append((str(Path(n).with_suffix("")), path, None))
        else:
            missing.append(f"{n}: no {path}")
    return pages, missing


def check_pages(page, site: Path, pages, cfg: dict, out: Path, *,
                buttons: bool, strict_code: bool = False) -> int:
    """Check each page (and its header buttons, with ``buttons``), print
    one line per problem or one ``ok`` line, then its notes; how many
    pages failed."""
    failed = 0
    page.call("Runtime.enable")
    page.call("Log.enable")
    for stem, path, src in pages:
        bad, notes, summary = check_page(page, path, site, src, out,
                                         strict_code)
        if buttons and summary != "a redirect":
            page.events.clear()       # (check_page read the console so far)
            bad += check_buttons(page, site, path, stem, src, cfg, out)
            page.eval("0")
            bad += console_errors(page.events)
        rel = path.relative_to(site)
        if bad:
            failed += 1
            for b in bad:
                print(f"FAIL {rel}: {b}")
        else:
            print(f"ok   {rel}: {summary}")
        for n in notes:
            print(f"note {rel}: {n}")
    return failed


def check_search_page(page, site: Path, term: str, want: str, out: Path
                      ) -> int:
    """The search check, printed; 1 when it fails."""
    page.events.clear()
    bad = check_search(page, site, term, want, out)
    page.eval("0")                    # collect the last console events
    bad += console_errors(page.events)
    for b in bad:
        print(f"FAIL search.html: {b}")
    if not bad:
        print(f"ok   search.html: {term!r} finds {want}.html; "
              f"{NO_SUCH_WORD!r} finds nothing")
    return int(bool(bad))


if __name__ == "__main__":
    sys.exit(main())
