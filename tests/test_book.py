"""The book's frame: every page in the toc exists, every notebook is in the
toc, and notebooks are stored executed without errors (book/intro)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"


def toc_files() -> list[str]:
    """`- file: book/x` entries of _toc.yml (commented lines are plans)."""
    text = (ROOT / "_toc.yml").read_text()
    root = re.search(r"^root:\s*(\S+)", text, re.M).group(1)
    files = re.findall(r"^\s*-\s*file:\s*(\S+)", text, re.M)
    return [root] + files


def notebooks() -> list[Path]:
    return sorted(p for p in BOOK.rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts)


def test_toc_entries_exist():
    for entry in toc_files():
        hits = [p for p in (ROOT / f"{entry}.ipynb", ROOT / f"{entry}.md")
                if p.exists()]
        assert len(hits) == 1, f"_toc.yml entry {entry!r}: found {hits}"


def test_every_notebook_is_in_toc():
    listed = set(toc_files())
    missing = [str(p.relative_to(ROOT).with_suffix("")) for p in notebooks()
               if str(p.relative_to(ROOT).with_suffix("")) not in listed]
    assert not missing, f"notebooks not in _toc.yml: {missing}"


def test_every_page_is_in_toc():
    listed = set(toc_files())
    pages = [p for p in BOOK.rglob("*.md")]
    missing = [str(p.relative_to(ROOT)) for p in pages
               if str(p.relative_to(ROOT).with_suffix("")) not in listed]
    assert not missing, f"pages not in _toc.yml: {missing}"


@pytest.mark.parametrize("path", notebooks(), ids=lambda p: p.name)
def test_notebook_stored_executed_without_errors(path: Path):
    nb = json.loads(path.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"
            and "".join(c["source"]).strip()]
    assert code, "a chapter runs code"
    counts = [c["execution_count"] for c in code]
    assert all(counts), f"{path.name}: cells not executed: {counts}"
    assert counts == list(range(1, len(code) + 1)), \
        f"{path.name}: not run top to bottom in one fresh kernel: {counts}"
    for c in code:
        for out in c["outputs"]:
            assert out["output_type"] != "error", \
                f"{path.name}: error output {out.get('ename')}"
            if out["output_type"] == "stream":
                assert out["name"] != "stderr" or not out["text"].strip(), \
                    f"{path.name}: stderr output: {''.join(out['text'])[:200]}"


@pytest.mark.parametrize("path", notebooks(), ids=lambda p: p.name)
def test_notebook_keeps_code_short(path: Path):
    """A chapter shows the idea; reusable code lives in warmup_kit."""
    nb = json.loads(path.read_text())
    for c in nb["cells"]:
        if c["cell_type"] != "code":
            continue
        src = "".join(c["source"]).splitlines()
        starts = [i for i, line in enumerate(src) if line.startswith("def ")]
        for i in starts:
            body = 1
            while i + body < len(src) and (src[i + body].startswith((" ", "\t"))
                                           or not src[i + body].strip()):
                body += 1
            assert body <= 16, f"{path.name}: {src[i]!r} is {body} lines"


def test_references_cited_keys_exist():
    bib = (BOOK / "references.bib").read_text()
    keys = set(re.findall(r"@\w+\{([^,]+),", bib))
    cited: set[str] = set()
    for p in list(BOOK.rglob("*.ipynb")) + list(BOOK.rglob("*.md")):
        for group in re.findall(r"\{cite[:a-z]*\}`([^`]+)`", p.read_text()):
            cited.update(k.strip() for k in group.split(","))
    assert cited <= keys, f"cited but not in references.bib: {cited - keys}"
