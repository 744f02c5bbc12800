"""tools/page_hygiene.py: set-up imports folded on the site, no code line
wider than the site's code column, the code's meaning unchanged."""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import page_hygiene as ph  # noqa: E402


def notebook(path: Path, *code: str) -> Path:
    cells = [{"cell_type": "markdown", "id": "t", "metadata": {},
              "source": ["# T"]}]
    cells += [{"cell_type": "code", "id": f"c{i}", "metadata": {},
               "execution_count": None, "outputs": [],
               "source": text.splitlines(keepends=True)}
              for i, text in enumerate(code)]
    path.write_text(json.dumps({"cells": cells, "metadata": {},
                                "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_the_book_is_tidy():
    """Re-run `python tools/page_hygiene.py` after merging notebook edits
    (and wrap by hand what it lists)."""
    assert ph.main(["--check"]) == 0


def test_setup_imports_get_a_folded_cell_of_their_own(tmp_path):
    nb = notebook(tmp_path / "a.ipynb",
                  "import numpy as np\nfrom x import y\n\n# the size\nN = 4",
                  "print(N)")
    assert ph.main([str(nb), "--check"]) == 1
    assert ph.main([str(nb)]) == 0
    cells = json.loads(nb.read_text())["cells"]
    assert "".join(cells[1]["source"]) == "import numpy as np\nfrom x import y"
    assert cells[1]["metadata"]["tags"] == ["hide-input"]
    assert "".join(cells[2]["source"]) == "# the size\nN = 4"
    assert "tags" not in cells[2]["metadata"]
    before = nb.read_text()
    assert ph.main([str(nb)]) == 0 and nb.read_text() == before


LONG = ('plots.Table(["axis", "bytes sent per GPU per step", "calls per step",'
        ' "one call\'s buffer"], [[axis.upper(), human_bytes(t["bytes"]), '
        't["messages"]] for axis, t in traffic.items()])')


def test_a_long_statement_is_filled_under_its_brackets():
    out = ph.wrap(LONG)
    lines = out.split("\n")
    assert max(map(len, lines)) <= ph.WIDTH < len(LONG)
    assert ast.dump(ast.parse(out)) == ast.dump(ast.parse(LONG))
    assert lines[1].startswith(" " * len("plots.Table([") + '"')
    assert lines[-1].lstrip().startswith("for axis, t in")


def test_a_long_string_is_cut_into_the_same_string():
    text = ('print(f"measured {label[\'date\']} on {label[\'cpu\']}, a long '
            'sentence that goes on and on past the column, then ends")')
    out = ph.wrap(text)
    assert max(map(len, out.split("\n"))) <= ph.WIDTH
    assert ast.dump(ast.parse(out)) == ast.dump(ast.parse(text))


def test_a_trailing_comment_moves_above_and_short_code_stays(tmp_path):
    text = "x = 1\nresult = compute(alpha, beta)" + " " * 40 + "# " + "why " * 12
    out = ph.wrap(text)
    assert out.split("\n") == ["x = 1", "# " + ("why " * 12).rstrip(),
                               "result = compute(alpha, beta)"]


def test_what_cannot_be_wrapped_is_listed(tmp_path, capsys):
    nb = notebook(tmp_path / "b.ipynb", "import os",
                  "x = '" + "y" * 100 + "'")
    assert ph.main([str(nb)]) == 1
    out = capsys.readouterr().out
    assert "wider than 86: b.ipynb cell 2: 106 chars" in out


@pytest.mark.parametrize("tag", ["remove-input", "remove-cell"])
def test_hidden_code_is_left_alone(tmp_path, tag):
    nb = notebook(tmp_path / "c.ipynb", "import os", LONG)
    doc = json.loads(nb.read_text())
    doc["cells"][2]["metadata"]["tags"] = [tag]
    nb.write_text(json.dumps(doc))
    assert ph.main([str(nb), "--check"]) == 1      # the import cell's tag
    ph.main([str(nb)])
    assert "".join(json.loads(nb.read_text())["cells"][2]["source"]) == LONG
