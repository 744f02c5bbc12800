"""A worked answer with its numbers in it, for the self-check pages.

The answer is Markdown written once, with placeholders ``{name}`` or
``{name:fmt}`` for numbers that a code cell computed (``fmt`` is a Python
format spec, ``{gib:.1f}``). :func:`worked_answer` fills them in and shows
the text folded under a title. The same output serves both readers:

* in JupyterLab (with jupyterlab-myst, which ``make venv`` installs) the
  Markdown output renders as a collapsed admonition, numbers filled in by
  the kernel the reader runs: no MyST ``glue`` role, which JupyterLab
  cannot fill;
* on the site, myst-nb parses the output as MyST (the cell's metadata
  ``mystnb.markdown_format: myst``), so the dropdown and ``{cite}`` roles
  render as in any Markdown cell.

Only names given as values are replaced: ``{cite}`key``` and LaTeX
braces (``\\frac{N-1}{N}``) pass through untouched.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

_PLACEHOLDER = re.compile(r"\{([A-Za-z_]\w*)(?::([^{}]*))?\}")


class MarkdownText(str):
    """Markdown that a notebook shows rendered (``text/markdown``)."""

    def _repr_markdown_(self) -> str:
        return str(self)


def fill(text: str, values: Mapping[str, Any]) -> str:
    """``text`` with every ``{name}`` / ``{name:fmt}`` whose ``name`` is in
    ``values`` replaced by ``format(values[name], fmt)``. A name given but
    never used is an error (a typo would silently drop a number)."""
    used: set[str] = set()

    def one(m: re.Match) -> str:
        name, spec = m.group(1), m.group(2) or ""
        if name not in values:
            return m.group(0)
        used.add(name)
        return format(values[name], spec)

    out = _PLACEHOLDER.sub(one, text)
    unused = sorted(set(values) - used)
    if unused:
        raise ValueError(f"values never used in the text: {', '.join(unused)}")
    return out


def worked_answer(text: str, title: str = "Worked answer",
                  **values: Any) -> MarkdownText:
    """``text`` with ``values`` filled in, in a folded MyST admonition."""
    body = fill(text.strip("\n"), values)
    fence = ":" * max(3, 1 + max((len(r) for r in re.findall(
        r"(?m)^\s*(:{3,})", body)), default=0))
    return MarkdownText(f"{fence}{{admonition}} {title}\n:class: dropdown\n\n"
                        f"{body}\n{fence}\n")
