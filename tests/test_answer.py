"""warmup_kit.viz.answer: worked answers with computed numbers, as Markdown
that JupyterLab (jupyterlab-myst) and the site (myst-nb) both render."""
import json
import re
from pathlib import Path

import pytest

from warmup_kit.viz.answer import fill, worked_answer

ROOT = Path(__file__).resolve().parents[1]


def test_fill_formats_only_the_names_given():
    text = r"$2\frac{N-1}{N}V$ = {b:,.0f} B, {n} ranks {cite}`key` {c}"
    assert fill(text, {"b": 117440512.0, "n": 8}) == (
        r"$2\frac{N-1}{N}V$ = 117,440,512 B, 8 ranks {cite}`key` {c}")


def test_a_value_never_used_is_an_error():
    with pytest.raises(ValueError, match="never used in the text: typo"):
        fill("{a:.1f}", {"a": 1.0, "typo": 2.0})


def test_worked_answer_is_a_folded_admonition_in_markdown():
    md = worked_answer("\nThe MFU is {mfu:.1f}%.\n", mfu=41.26)
    assert md._repr_markdown_() == (
        ":::{admonition} Worked answer\n:class: dropdown\n\n"
        "The MFU is 41.3%.\n:::\n")


def test_a_nested_fence_gets_a_longer_outer_fence():
    md = worked_answer(":::{note}\ninner\n:::", title="T")
    assert md.startswith("::::{admonition} T\n") and md.endswith("\n::::\n")


SELF_CHECK = ["success_criteria.ipynb", "interview.ipynb"]


@pytest.mark.parametrize("name", SELF_CHECK)
def test_self_check_pages_have_no_glue_role(name):
    """JupyterLab cannot fill a {glue:text} role (jupyterlab-myst shows its
    key, 'c6_mfu:.1f', as if it were the number): the numbers come from
    worked_answer cells the reader runs, parsed as MyST on the site."""
    nb = json.loads((ROOT / "book" / name).read_text())
    glue = [i for i, c in enumerate(nb["cells"])
            if re.search(r"\{glue(:\w+)?\}`", "".join(c["source"]))]
    assert not glue, f"{name}: cells {glue} use glue roles"
    answers = [c for c in nb["cells"] if c["cell_type"] == "code"
               and "".join(c["source"]).startswith("worked_answer(")]
    assert answers
    for c in answers:
        assert "remove-input" in c["metadata"].get("tags", [])
        assert c["metadata"].get("mystnb", {}).get("markdown_format") == "myst"
        assert c["metadata"].get("jupyter", {}).get("source_hidden") is True
