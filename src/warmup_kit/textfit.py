"""Text that fits the book's code column: :data:`WIDTH` characters, the
widest line the site shows without a sideways scroll bar (tools/
check_site.py checks it) and a comfortable terminal width.

``fit(text)`` wraps each longer line at spaces; a continuation line is
indented ``hang`` (2) past its line's own indent, and a ``#`` comment line
goes on as a comment. Lines that fit (table rows) are left as they are.
"""
from __future__ import annotations

import textwrap

#: the longest line the kit prints for a page
WIDTH = 86


def fit(text: str, width: int = WIDTH, hang: int = 2) -> str:
    """``text`` with every line longer than ``width`` wrapped."""
    out: list[str] = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        body = line.lstrip()
        lead = line[:len(line) - len(body)]
        sub = lead + ("#   " if body.startswith("#") else " " * hang)
        out.extend(textwrap.wrap(body, width, initial_indent=lead,
                                 subsequent_indent=sub,
                                 break_on_hyphens=False,
                                 break_long_words=False) or [line])
    return "\n".join(out)


__all__ = ["WIDTH", "fit"]
