"""tools/lab_parity.py makes {ref} roles links JupyterLab and the site both
follow; check_lab's source scan finds roles JupyterLab cannot draw (the
self-check pages' old glue roles) and passes the book as it is now."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import check_lab  # noqa: E402
import lab_parity  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "lab"


def notebook(path: Path, *markdown: str) -> Path:
    cells = [{"cell_type": "markdown", "id": f"m{i}", "metadata": {},
              "source": text.splitlines(keepends=True)}
             for i, text in enumerate(markdown)]
    path.write_text(json.dumps({"cells": cells, "metadata": {},
                                "nbformat": 4, "nbformat_minor": 5}))
    return path


@pytest.fixture
def book(tmp_path):
    a = notebook(tmp_path / "ch01_a.ipynb",
                 "(a-newer)=\n## The newer axes: *sequence*, context\n\ntext",
                 "See {ref}`b-bubble` and {ref}`a-newer`, or "
                 "{ref}`the bubble <b-bubble>`; `{ref}` in code stays.")
    b = notebook(tmp_path / "lab02.ipynb", "(b-bubble)=\n## The pipeline bubble")
    return a, b


def test_refs_become_links_to_the_heading_anchor(book):
    a, b = book
    assert lab_parity.main([str(a), str(b)]) == 0
    cells = json.loads(a.read_text())["cells"]
    assert "".join(cells[1]["source"]) == (
        "See [The pipeline bubble](lab02.ipynb#the-pipeline-bubble) and "
        "[The newer axes: sequence, context](#the-newer-axes-sequence-context),"
        " or [the bubble](lab02.ipynb#the-pipeline-bubble); `{ref}` in code "
        "stays.")
    # the label lines stay; a second run changes nothing
    assert "(a-newer)=" in "".join(cells[0]["source"])
    before = a.read_text()
    assert lab_parity.main([str(a), str(b), "--check"]) == 0
    assert lab_parity.main([str(a), str(b)]) == 0 and a.read_text() == before


def test_check_reports_a_due_rewrite_and_changes_nothing(book, capsys):
    a, b = book
    before = a.read_text()
    assert lab_parity.main([str(a), str(b), "--check"]) == 1
    assert a.read_text() == before
    assert "to rewrite ch01_a.ipynb: 1 cell(s)" in capsys.readouterr().out


def test_an_unknown_label_is_named(tmp_path, capsys):
    nb = notebook(tmp_path / "x.ipynb", "see {ref}`nowhere`")
    assert lab_parity.main([str(nb)]) == 1
    assert "x.ipynb: {ref} to unknown label 'nowhere'" in (
        capsys.readouterr().out)


def test_the_book_is_up_to_date():
    """Re-run `python tools/lab_parity.py` after merging notebook edits."""
    assert lab_parity.main(["--check"]) == 0


def test_slug_matches_myst_parser():
    slugify = pytest.importorskip(
        "myst_parser.mdit_to_docutils.base").default_slugify
    for h in ("Why nothing can do better: the lower bound",
              "Checklist: \"MFU is 50%\"", "Flat or hierarchical, compared"):
        assert lab_parity.slug(h) == slugify(h)


def test_source_scan_catches_the_old_self_check_page():
    found = check_lab.source_roles(FIXTURES / "selfcheck_before.ipynb")
    assert found and all("{glue:text}`c5_" in f for f in found)
    assert check_lab.source_roles(FIXTURES / "selfcheck_after.ipynb") == []


@pytest.mark.parametrize("name", sorted(p.name for p in
                                        (ROOT / "book").glob("*.ipynb")))
def test_no_notebook_has_a_role_jupyterlab_cannot_draw(name):
    assert check_lab.source_roles(ROOT / "book" / name) == []


def test_a_role_quoted_in_code_is_not_one(tmp_path):
    nb = notebook(tmp_path / "q.ipynb",
                  "a `{glue:text}`-free page; ``{glue:text}`x` `` quoted\n\n"
                  "```\n{glue:text}`y`\n```\n{glue:text}`z`")
    assert check_lab.source_roles(nb) == [
        "MyST role JupyterLab cannot render: {glue:text}`z`"]
