"""Rewrite the book's notebook Markdown that JupyterLab cannot show right.

Usage:

    .venv/bin/python tools/lab_parity.py [--check] [book/X.ipynb ...]

JupyterLab renders the book's MyST with jupyterlab-myst (``make venv``
installs it): admonitions, dropdowns and ``{cite}`` roles read as on the
site. What it cannot do is resolve a ``{ref}`label``` that points at
another notebook: it shows the bare label, flagged "Cross Reference Not
Found". This tool turns each such role into the link the site draws
anyway, ``[Heading text](chNN_x.ipynb#heading-slug)`` (same heading text,
same anchor: ``myst_heading_anchors`` makes one for every heading), which
both JupyterLab and the site follow. The label line ``(name)=`` stays.

It is idempotent (a second run changes nothing) and touches only Markdown
cell sources, so it can be re-run after merging other notebook edits.
``--check`` changes nothing and exits 1 if a rewrite is due (a test holds
the book to it). Default: every notebook in book/. A label that no
notebook defines is an error (exit 1, one line naming it).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LABEL = re.compile(r"(?m)^\(([\w.:-]+)\)=[ \t]*\n+#{1,6}[ \t]+(.+?)[ \t]*$")
REF = re.compile(r"\{ref\}`([^`<>]+?)(?:\s*<([\w.:-]+)>)?`")


def slug(heading: str) -> str:
    """The anchor myst-parser gives a heading (``myst_heading_anchors``):
    lower case, punctuation dropped, spaces to hyphens."""
    s = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"\s+", "-", s)


def plain(heading: str) -> str:
    """A heading's text without inline Markdown (for a link's text)."""
    return re.sub(r"[*_`]", "", heading).strip()


def _source(cell: dict) -> str:
    src = cell["source"]
    return src if isinstance(src, str) else "".join(src)


def labels(notebooks: list[Path]) -> dict[str, tuple[str, str]]:
    """label -> (notebook file name, heading text), over ``notebooks``."""
    out: dict[str, tuple[str, str]] = {}
    for nb in notebooks:
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] == "markdown":
                for m in LABEL.finditer(_source(cell)):
                    out[m.group(1)] = (nb.name, m.group(2))
    return out


def rewrite(text: str, here: str, known: dict[str, tuple[str, str]]
            ) -> tuple[str, list[str]]:
    """``text`` with each ``{ref}`` to a known label made a Markdown link
    (``here``: the notebook the text is in), and the labels not known."""
    missing: list[str] = []

    def one(m: re.Match) -> str:
        text_, target = m.group(1).strip(), m.group(2)
        label = target or text_
        if label not in known:
            missing.append(label)
            return m.group(0)
        nb, heading = known[label]
        shown = text_ if target else plain(heading)
        where = "" if nb == here else nb
        return f"[{shown}]({where}#{slug(heading)})"

    return REF.sub(one, text), missing


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 if a rewrite is due")
    args = ap.parse_args(argv)
    every = sorted((ROOT / "book").glob("*.ipynb"))
    targets = args.notebooks or every
    for nb in targets:
        if not nb.is_file():
            print(f"lab_parity: no notebook {nb}")
            return 1
    known = labels(sorted(set(every) | set(targets)))
    due, bad = [], []
    for nb in targets:
        doc = json.loads(nb.read_text())
        changed = 0
        for cell in doc["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            old = _source(cell)
            new, missing = rewrite(old, nb.name, known)
            bad += [f"{nb.name}: {{ref}} to unknown label {m!r}"
                    for m in missing]
            if new != old:
                changed += 1
                cell["source"] = (new if isinstance(cell["source"], str)
                                  else _lines(new))
        if changed:
            due.append(f"{nb.name}: {changed} cell(s)")
            if not args.check:
                nb.write_text(json.dumps(doc, indent=1, ensure_ascii=False)
                              + "\n")
    for line in bad:
        print(f"lab_parity: {line}")
    verb = "to rewrite" if args.check else "rewritten"
    for line in due:
        print(f"lab_parity: {verb} {line}")
    if not due and not bad:
        print(f"lab_parity: {len(targets)} notebook(s) up to date")
    return 1 if bad or (args.check and due) else 0


if __name__ == "__main__":
    sys.exit(main())
