"""Check the live notebooks as a reader meets them in JupyterLab.

Usage (``make test`` runs it where Debian's ``chromium`` is installed):

    .venv/bin/python tools/check_lab.py [book/ch03_ring.ipynb ...] \
        [--out _build/lab-screenshots] [--shard I/N]

Starts JupyterLab on 127.0.0.1 (a random token, the app exposed to the
page), opens each notebook in headless Chromium, runs all cells as a reader
would (Run > Run All Cells), and fails (exit 1, one line per problem)
unless, in every notebook:

* every code cell ran, and none shows an error;
* every image is shown at most at the size it was drawn (a stretched PNG is
  blurred);
* every control's description is shown whole (not cut with an ellipsis);
* moving each live widget's first slider with real mouse clicks redraws
  its figure (the kernel answers);
* no MyST shows wrong (unless ``--no-strict-myst``, which makes each a
  ``note``): no role (``{cite}`x```) or directive (``:::{note}``, a fence
  with ``{name}``) shown as text in a rendered Markdown cell or output
  (JupyterLab without jupyterlab-myst); no cross-reference that the lab
  cannot resolve (jupyterlab-myst shows the bare label: a ``{ref}`` to
  another notebook, which ``tools/lab_parity.py`` turns into a link); no
  role in a Markdown cell's source that the lab cannot render at all
  (``{glue:text}`` shows its key, ``c6_mfu:.1f``, where the number
  belongs: the self-check pages fill numbers with
  ``warmup_kit.viz.answer.worked_answer`` instead).

Without chromium on PATH the check says SKIPPED and passes, except in CI
(``CI=true``), where it fails: a check that cannot run must not pass unseen.

Screenshots of each notebook (and of each widget after its slider moved,
and of each folded answer, opened, numbers and all) go to ``--out``. Default: every notebook of the book (``book/*.ipynb``); a
notebook outside the repository's book/ runs from a folder of its own.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from cdp import BrowserError, browser, find_chromium, no_chromium

ROOT = Path(__file__).resolve().parent.parent

# the notebook's panel (a headless page has no focus, so no "current" one)
NB = ("Array.from(jupyterapp.shell.widgets('main'))"
      ".find(w => w.context && w.context.path === {path})")
READY = (f"!!(window.jupyterapp && {NB} && {NB}.context && "
         f"{NB}.context.isReady && {NB}.sessionContext.session && "
         f"{NB}.sessionContext.session.kernel && "
         f"{NB}.sessionContext.session.kernel.status === 'idle')")
ALL_RAN = (f"{NB}.content.widgets.filter(c => c.model.type === 'code' && "
           "c.model.sharedModel.getSource().trim())"
           ".every(c => c.model.executionCount !== null) && "
           f"{NB}.sessionContext.session.kernel.status === 'idle'")
ERRORS = (f"{NB}.content.widgets.filter(c => c.model.type === 'code')"
          ".flatMap(c => Array.from({{length: c.model.outputs.length}},"
          " (_, i) => c.model.outputs.get(i).toJSON()))"
          ".filter(o => o.output_type === 'error')"
          ".map(o => o.ename + ': ' + o.evalue)")

# (every query of the page is scoped to the notebook checked now, the
# current one: JupyterLab may restore other tabs from its workspace)
PANEL = "jupyterapp.shell.currentWidget.node"
STRETCHED = "Array.from(" + PANEL + r""".querySelectorAll('.jp-Notebook img'))
  .filter(i => i.complete && i.naturalWidth > 0 &&
               i.getBoundingClientRect().width > i.naturalWidth * 1.02)
  .map(i => `${i.naturalWidth} px image shown ${
              Math.round(i.getBoundingClientRect().width)} px wide`)"""
CUT_LABELS = "Array.from(" + PANEL + r""".querySelectorAll(
    '.jp-Notebook .widget-label, .jp-Notebook .widget-label-basic'))
  .filter(l => l.offsetParent && l.scrollWidth > l.clientWidth + 1)
  .map(l => `control label cut: ${JSON.stringify(l.textContent)}`)"""

# MyST a Markdown cell shows as typed: a role is '{name}' just before an
# inline code span; a directive, ':::{name}' on a line of its own, or a
# code fence whose language is '{name}'. JupyterLab's own renderer draws
# '.jp-MarkdownOutput'; jupyterlab-myst draws '.myst', and marks a
# reference it cannot resolve (a citation shows its key, which reads; a
# cross-reference, a bare label, which does not)
RAW_MYST = "Array.from(" + PANEL + r""".querySelectorAll(
    '.jp-Notebook .jp-MarkdownOutput, .jp-Notebook .myst')).flatMap(md => {
  const out = [];
  const walk = document.createTreeWalker(md, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const n = walk.currentNode;
    if (n.parentElement.closest('pre, code')) continue;
    const role = n.textContent.match(/\{([A-Za-z][\w:.-]*)\}$/);
    const next = n.nextSibling;
    if (role && next && next.nodeName === 'CODE')
      out.push(`raw MyST role {${role[1]}}\`${next.textContent}\``);
    const dir = n.textContent.match(/(^|\n)\s*(:{3,}\s*\{[\w:.-]+\})/);
    if (dir) out.push(`raw MyST directive ${dir[2]}`);
  }
  md.querySelectorAll('pre code[class*="language-{"]').forEach(c =>
    out.push('raw MyST directive ```' +
             c.className.match(/language-(\{[^}\s]*\})/)[1]));
  md.querySelectorAll('[title="Cross Reference Not Found"]').forEach(r =>
    out.push(`unresolved MyST reference ${JSON.stringify(r.textContent)}`));
  return out.map(t => t.slice(0, 80));
})"""

# roles jupyterlab-myst draws as meant; any other role in a Markdown cell's
# source is shown wrong (glue: its key where the number belongs)
LAB_ROLES = {"cite", "cite:p", "cite:t", "cite:ps", "cite:ts", "math", "sub",
             "sup", "abbr", "kbd", "u", "underline", "del", "strike",
             "smallcaps", "ref", "numref", "eq", "term", "doc", "download"}
SOURCE_ROLE = re.compile(r"\{([A-Za-z][\w:.-]*)\}`([^`]*)`")
CODE = re.compile(r"(?ms)^(```|~~~).*?^\1|``.*?``|`[^`\n]*`")

# every folded answer (a <details>: jupyterlab-myst's dropdown) opened, and
# the boxes of those in view to photograph
OPEN_ANSWERS = ("Array.from(" + PANEL + ".querySelectorAll('.jp-Notebook "
                "details')).map(d => (d.open = true, 1)).length")
ANSWER_BOX = ("(() => {{ const d = " + PANEL + ".querySelectorAll("
              "'.jp-Notebook details')[{i}]; d.scrollIntoView({{block: "
              "'start'}}); const b = d.getBoundingClientRect(); return "
              "{{x: b.left + scrollX, y: b.top + scrollY, width: b.width, "
              "height: Math.min(b.height, 900)}}; }})()")


def source_roles(nb: Path) -> list[str]:
    """Roles in the Markdown cells of ``nb`` that JupyterLab cannot draw
    (outside code spans and fences), as check lines."""
    out = []
    for cell in json.loads(nb.read_text())["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        src = cell["source"]
        # a role is '{name}' glued to a code span; a role quoted in a
        # code span or fence is not one
        text = src if isinstance(src, str) else "".join(src)
        for m in SOURCE_ROLE.finditer(text):
            inside = any(c.start() < m.start() < c.end()
                         for c in CODE.finditer(text))
            if m.group(1) not in LAB_ROLES and not inside:
                out.append(f"MyST role JupyterLab cannot render: "
                           f"{{{m.group(1)}}}`{m.group(2)}`"[:80])
    return out

# how long Run All may take (a chapter that runs real ranks is slow)
RUN_ALL_S = 300

WIDGET = PANEL + ".querySelectorAll('.jp-Notebook .widget-vbox')"
W = WIDGET + "[{i}]"
HAS_SLIDER = W + ".querySelector('.noUi-base, .widget-slider .ui-slider')"
SLIDER_BOX = ("(() => {{ const s = " + HAS_SLIDER + "; s.scrollIntoView("
              "{{block: 'center'}}); const b = s.getBoundingClientRect();"
              " return [b.left, b.top, b.width, b.height]; }})()")
IMAGE = ("(() => {{ const i = " + W + ".querySelector('img');"
         " return i ? i.src.length + ':' + i.src.slice(-64) : ''; }})()")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(port: int, token: str, settings: Path, root: Path
              ) -> subprocess.Popen:
    """JupyterLab on loopback over ``root``, every notebook cell kept in the
    page (no windowing: the check reads what is drawn), no autosave."""
    ext = settings / "@jupyterlab" / "notebook-extension"
    ext.mkdir(parents=True)
    (ext / "tracker.jupyterlab-settings").write_text(
        json.dumps({"windowingMode": "none"}))
    news = settings / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false"}))
    docs = settings / "@jupyterlab" / "docmanager-extension"
    docs.mkdir(parents=True)
    (docs / "plugin.jupyterlab-settings").write_text(
        json.dumps({"autosave": False}))
    cmd = [str(Path(sys.executable).parent / "jupyter"), "lab",
           "--no-browser", "--expose-app-in-browser",
           f"--ServerApp.port={port}", "--ServerApp.ip=127.0.0.1",
           "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}",
           f"--LabApp.user_settings_dir={settings}",
           # a workspace of its own: no tabs restored from a reader's
           f"--LabApp.workspaces_dir={settings / 'workspaces'}",
           f"--ServerApp.root_dir={root}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/api/status?token={token}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url, timeout=2)
            return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("JupyterLab exited at start") from None
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("JupyterLab did not answer in 60 s")


def move_sliders(page, name: str, out: Path) -> tuple[int, list[str]]:
    """Click near the end of each live widget's first slider; its image
    must change."""
    moved, bad = 0, []
    for i in range(page.eval(f"{WIDGET}.length")):
        if not page.eval(f"!!{HAS_SLIDER.format(i=i)}"):
            continue
        before = page.eval(IMAGE.format(i=i))
        if not before:
            continue                  # controls without a figure
        x, y, w, h = page.eval(SLIDER_BOX.format(i=i))
        time.sleep(0.3)
        x, y, w, h = page.eval(SLIDER_BOX.format(i=i))
        for frac in (0.97, 0.03):
            page.click(x + frac * w, y + h / 2)
            if page.wait(f"{IMAGE.format(i=i)} !== {json.dumps(before)}",
                         20):
                break
        else:
            bad.append(f"widget {i}: slider moved, figure not redrawn")
        moved += 1
        box = page.eval(f"(() => {{ const b = {W.format(i=i)}"
                        ".getBoundingClientRect(); return {x: b.left + "
                        "scrollX, y: b.top + scrollY, width: b.width, "
                        "height: b.height}; })()")
        page.screenshot(out / f"{name}-widget{i}.png", box)
    return moved, bad


def check_notebook(page, port: int, token: str, nb: Path, rel: str,
                   out: Path) -> tuple[list[str], list[str], str]:
    """Problems in notebook ``nb`` (at ``rel`` under the lab's root), raw
    MyST it shows, and a one-line summary."""
    path = json.dumps(rel)
    if page.eval("!!(window.jupyterapp && jupyterapp.commands)"):
        # the app is up (an earlier notebook): open this one in it, as a
        # reader does from the file browser (a reload costs seconds)
        page.eval(f"(jupyterapp.commands.execute('docmanager:open', "
                  f"{{path: {path}, factory: 'Notebook'}}), 0)")
    else:
        page.call("Page.navigate", url=f"http://127.0.0.1:{port}/lab/tree/"
                                       f"{rel}?token={token}")
    if not page.wait(READY.format(path=path), 120):
        return ["the notebook or its kernel did not become ready"], [], ""
    nb_ = NB.format(path=path)
    page.eval(f"jupyterapp.shell.activateById({nb_}.id)")
    # "Run All Cells" runs the current notebook: make sure it is this one
    if not page.wait(f"jupyterapp.shell.currentWidget === {nb_}", 20):
        return ["the notebook could not be made the current one"], [], ""
    # not awaited: a chapter that runs real ranks takes longer than one
    # DevTools call may wait
    page.eval("(jupyterapp.commands.execute('notebook:run-all-cells'), 0)")
    # Run All stops at an error: stop waiting then too
    ran = page.wait(f"({ALL_RAN.format(path=path)}) || "
                    f"{ERRORS.format(path=path)}.length > 0", RUN_ALL_S)
    time.sleep(1.5)                   # outputs and widget views render
    bad = [f"error output: {e}" for e in page.eval(ERRORS.format(path=path))]
    if not ran or bad:
        page.screenshot(out / f"{nb.stem}-stuck.png")
        left = page.eval(
            f"{nb_}.content.widgets.map((c, i) => [i, c.model.type, "
            "c.model.executionCount, c.model.sharedModel.getSource().trim()"
            "]).filter(x => x[1] === 'code' && x[2] === null && x[3])"
            ".map(x => x[0])")
        if left:
            bad.insert(0, f"cells {left} did not run" + (
                "" if ran else f" in {RUN_ALL_S} s"))
        elif not ran:
            bad.insert(0, f"Run All did not finish in {RUN_ALL_S} s")
    bad += page.eval(STRETCHED)
    bad += page.eval(CUT_LABELS)
    myst = page.eval(RAW_MYST) + source_roles(nb)
    moved, wbad = move_sliders(page, nb.stem, out) if ran else (0, [])
    bad += wbad
    answers = page.eval(OPEN_ANSWERS)
    time.sleep(0.5 if answers else 0)
    for i in range(answers):
        page.screenshot(out / f"{nb.stem}-answer{i}.png",
                        page.eval(ANSWER_BOX.format(i=i)))
    page.eval(f"{nb_}.content.node.scrollTop = 0")
    page.screenshot(out / f"{nb.stem}.png")
    # leave no kernel behind, and nothing written back to the notebook
    page.eval(f"{nb_}.context.model.dirty = false")
    page.eval(f"({nb_}.sessionContext.shutdown(), 0)")
    time.sleep(1)
    page.eval(f"{nb_}.dispose()")
    return bad, myst, f"{moved} slider(s) moved" + (
        f", {answers} folded answer(s) opened" if answers else "")


def report(name: str, bad: list[str], myst: list[str], summary: str,
           strict_myst: bool) -> tuple[list[str], bool]:
    """The lines printed for one notebook, and whether it failed: raw MyST
    fails it with ``strict_myst``, and is a note otherwise."""
    if strict_myst:
        bad, notes = bad + myst, []
    else:
        notes = [f"note {name}: {len(myst)} MyST role(s) or directive(s) "
                 f"shown wrong, e.g. {myst[0]} (fails without "
                 "--no-strict-myst)"] if myst else []
    if bad:
        return [f"FAIL {name}: {b}" for b in bad] + notes, True
    return [f"ok   {name}: every cell ran; {summary}"] + notes, False


def lab_root(notebooks: list[Path], root: Path) -> list[str]:
    """Lay out JupyterLab's root: a copy of the repository's book, labs
    and benchmarks (what chapters run; nothing the lab does is written
    back), and each notebook from elsewhere (a test's) in a folder named
    after its own. The notebooks' paths under ``root``, in order."""
    for part in ("book", "labs", "benchmarks"):
        shutil.copytree(ROOT / part, root / part,
                        ignore=shutil.ignore_patterns("__pycache__"))
    rels = []
    for nb in notebooks:
        full = nb.resolve()
        try:
            rel = full.relative_to(ROOT)
        except ValueError:
            rel = None
        if rel is None or rel.parts[0] not in ("book", "labs", "benchmarks"):
            rel = Path("given") / full.parent.name / full.name
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(full, root / rel)
        rels.append(rel.as_posix())
    return rels


def shard(text: str) -> tuple[int, int]:
    """``--shard I/N``'s value: two integers with 1 <= I <= N."""
    m = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not m or not 1 <= int(m[1]) <= int(m[2]):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not I/N with 1 <= I <= N (e.g. 1/2)")
    return int(m[1]), int(m[2])


def in_shard(notebooks: list[Path], which: tuple[int, int] | None
             ) -> list[Path]:
    """Shard I of N: every N-th notebook from the I-th, so the N shards
    split the list, each notebook in exactly one (None: all of them)."""
    if which is None:
        return list(notebooks)
    i, n = which
    return list(notebooks[i - 1::n])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--out", default="_build/lab-screenshots")
    ap.add_argument("--strict-myst", action=argparse.BooleanOptionalAction,
                    default=True,
                    help="fail on MyST roles and directives shown wrong "
                         "(default; --no-strict-myst makes them notes)")
    ap.add_argument("--chromium", default=find_chromium())
    ap.add_argument("--shard", type=shard, metavar="I/N",
                    help="check only every N-th notebook from the I-th "
                         "(1-based): make test runs 1/2 and 2/2 side by "
                         "side, a JupyterLab and a browser each")
    args = ap.parse_args(argv)
    notebooks = args.notebooks or sorted((ROOT / "book").glob("*.ipynb"))
    notebooks = in_shard(notebooks, args.shard)
    missing = [nb for nb in notebooks if not nb.is_file()]
    if missing or not notebooks:
        print(f"check_lab: no notebook {missing[0]}" if missing else
              "check_lab: no notebooks to check")
        return 1
    if not args.chromium:
        return no_chromium("check_lab")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    port, token = free_port(), secrets.token_hex(16)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="check-lab-") as tmp:
        rels = lab_root(notebooks, Path(tmp) / "root")
        try:
            lab = start_lab(port, token, Path(tmp) / "settings",
                            Path(tmp) / "root")
        except RuntimeError as e:
            print(f"check_lab: FAIL {e}")
            return 1
        try:
            with browser(args.chromium, offline=False) as page:
                page.call("Emulation.setDeviceMetricsOverride", width=1280,
                          height=1000, deviceScaleFactor=1, mobile=False)
                for nb, rel in zip(notebooks, rels):
                    bad, myst, summary = check_notebook(page, port, token,
                                                       nb, rel, out)
                    lines, fail = report(nb.name, bad, myst, summary,
                                         args.strict_myst)
                    failed += fail
                    print("\n".join(lines))
        except BrowserError as e:
            print(f"check_lab: FAIL {e}")
            return 1
        finally:
            os.killpg(lab.pid, 15)
            try:
                lab.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(lab.pid, 9)
                lab.wait(5)
    print(f"check_lab: {len(notebooks) - failed} of {len(notebooks)} "
          f"notebooks pass; screenshots in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
