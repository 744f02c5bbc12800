"""Keep the book's code cells tidy on the site: set-up imports folded,
no code line wider than the page's code column.

Usage:

    .venv/bin/python tools/page_hygiene.py [--check] [book/X.ipynb ...]

For each notebook (default: every one in book/):

* the set-up imports: the first code cell's leading ``import`` block is a
  cell of its own, tagged ``hide-input`` (folded on the site, "Show code
  cell source"; visible as usual in JupyterLab). When the first cell also
  defines things (``N = 4``), the definitions move to a new cell just
  after it, which stays shown.
* code lines: in a shown code cell (not ``remove-input``/``remove-cell``)
  each statement with a line over ``WIDTH`` characters is re-filled: broken
  after commas inside brackets, each new line under its bracket, as the
  book's cells are written by hand; the rest of the cell is left as
  written, and the code's meaning is unchanged (its syntax tree is
  compared). A line that cannot be wrapped so (a long string or comment,
  no bracket) is listed for a person to fix.

``WIDTH`` (86) is what fits the site's code column at the 1400 px window
``tools/check_site.py`` checks at (its ``--strict-code-width``, on by
default). Idempotent; touches code cells only. ``--check`` changes nothing
and exits 1 if any notebook needs a change (tests hold the book to it).
"""
from __future__ import annotations

import argparse
import ast
import io
import json
import re
import sys
import tokenize
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 86
HIDDEN = {"remove-input", "remove-cell"}


def _source(cell: dict) -> str:
    src = cell["source"]
    return src if isinstance(src, str) else "".join(src)


def _set(cell: dict, text: str) -> None:
    cell["source"] = (text if isinstance(cell["source"], str)
                      else text.splitlines(keepends=True))


def split_imports(text: str) -> tuple[str, str] | None:
    """(the leading import block, the rest) of a cell, or None when the
    cell does not start with imports or holds nothing else."""
    try:
        body = ast.parse(text).body
    except SyntaxError:
        return None
    if not body or not isinstance(body[0], (ast.Import, ast.ImportFrom)):
        return None
    rest = next((s for s in body
                 if not isinstance(s, (ast.Import, ast.ImportFrom))), None)
    if rest is None:
        return None
    lines = text.split("\n")
    cut = rest.lineno - 1
    while cut > 0 and lines[cut - 1].lstrip().startswith("#"):
        cut -= 1                      # a comment goes with what it explains
    head = "\n".join(lines[:cut]).rstrip()
    tail = "\n".join(lines[cut:]).strip("\n")
    return head, tail


def wide_lines(text: str) -> list[str]:
    return [line for line in text.split("\n") if len(line) > WIDTH]


OPEN, CLOSE = "([{", ")]}"


def _logical_lines(text: str) -> list[list[tokenize.TokenInfo]]:
    """The cell's tokens, one list per logical line (a statement, or a
    compound statement's header)."""
    out, cur = [], []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.INDENT, tokenize.DEDENT,
                        tokenize.ENDMARKER):
            continue
        if tok.type == tokenize.NL and not cur:
            continue
        cur.append(tok)
        if tok.type == tokenize.NEWLINE:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def _words(toks: list[tokenize.TokenInfo]) -> list[list] | None:
    """[text, space before, break depth or None] for each token: a line
    may break after a comma inside brackets (not in a comprehension's
    ``for x, y`` target) or before a comprehension's ``for``/``if``; the
    depth is how many brackets are open there. None for a comment."""
    words, prev, depth, target = [], None, 0, set()
    for tok in toks:
        if tok.type in (tokenize.NL, tokenize.NEWLINE):
            continue
        if tok.type == tokenize.COMMENT:
            return None
        if prev is None:
            space = ""
        elif prev.end[0] == tok.start[0]:
            space = tok.line[prev.end[1]:tok.start[1]]
        else:
            space = ("" if prev.string in OPEN or tok.string in CLOSE
                     else " ")
        if tok.string in CLOSE:
            target.discard(depth)
            depth -= 1
        if tok.type == tokenize.NAME and depth > 0:
            if tok.string in ("for", "if") and words:
                words[-1][2] = depth
            if tok.string == "for":
                target.add(depth)
            elif tok.string == "in":
                target.discard(depth)
        if tok.type == tokenize.STRING and prev is not None and \
                prev.type == tokenize.STRING and depth > 0 and words:
            words[-1][2] = depth      # between two parts of one string
        words.append([tok.string, space, None])
        if tok.string in OPEN:
            depth += 1
        if tok.string == "," and depth > 0 and depth not in target:
            words[-1][2] = depth
        prev = tok
    return words


def _fill(words: list[list], indent: int) -> list[str]:
    """Lay ``words`` out from column ``indent``: at each break point, break
    when what follows up to the next break at the same depth or shallower
    (the rest of this argument, say) does not fit on the line."""
    size = [len(t) + len(sp) for t, sp, _ in words]
    lines, line, col, stack = [], " " * indent, indent, []
    for i, (t, sp, _) in enumerate(words):
        brk = words[i - 1][2] if i else None
        if brk is not None and line.strip() and stack:
            j = i
            while j < len(words) and (j == i or words[j - 1][2] is None
                                      or words[j - 1][2] > brk):
                j += 1
            if col + sum(size[i:j]) - len(sp) * 0 > WIDTH:
                lines.append(line.rstrip())
                col = stack[-1] + 1
                line, sp = " " * col, ""
        line += sp
        col += len(sp)
        if t in OPEN:
            stack.append(col)
        elif t in CLOSE and stack:
            stack.pop()
        line += t
        col += len(t)
    lines.append(line.rstrip())
    return lines


def reflow(toks: list[tokenize.TokenInfo], indent: int) -> list[str] | None:
    """One logical line re-laid out up to ``WIDTH`` (:func:`_fill`), each
    new line under the bracket it is in (the book's own style). None when
    it holds a comment (kept as written)."""
    words = _words(toks)
    return None if words is None else _fill(words, indent)


def _split_literal(tok: str, col: int) -> tuple[str, str] | None:
    """A string literal starting at ``col`` cut at a space (outside an
    f-string's braces) into two adjacent literals, the first ending by
    ``WIDTH``; None if it cannot be."""
    m = re.match(r"([rRbBfFuU]*)([\"'])(.*)\2$", tok, re.S)
    if not m or "\n" in tok or m.group(3).startswith(m.group(2) * 2):
        return None
    pre, q, body = m.groups()
    is_f = "f" in pre.lower()
    depth, cuts = 0, []
    for i, ch in enumerate(body):
        if is_f and ch in "{}":
            depth += 1 if ch == "{" else -1
        elif ch == " " and depth == 0:
            cuts.append(i + 1)
    room = WIDTH - col - len(pre) - 2
    cuts = [c for c in cuts if 10 < c <= room and c < len(body)]
    if len(body) < 50:                # a short one (a key): break elsewhere
        return None
    if not cuts:
        return None
    a, b = body[:cuts[-1]], body[cuts[-1]:]

    def prefix(part: str) -> str:
        return pre if not is_f or "{" in part else re.sub("[fF]", "", pre)
    return f"{prefix(a)}{q}{a}{q}", f"{prefix(b)}{q}{b}{q}"


def split_strings(text: str) -> str:
    """``text`` with each long string literal inside brackets, on a line
    over ``WIDTH``, cut into adjacent literals on two lines (the same
    string)."""
    for _ in range(200):
        lines = text.split("\n")
        depth = 0
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.OP and tok.string in OPEN:
                depth += 1
            elif tok.type == tokenize.OP and tok.string in CLOSE:
                depth -= 1
            elif (tok.type == tokenize.STRING and depth > 0
                  and tok.start[0] == tok.end[0]
                  and len(lines[tok.start[0] - 1]) > WIDTH):
                parts = _split_literal(tok.string, tok.start[1])
                if parts:
                    row, (c0, c1) = tok.start[0] - 1, (tok.start[1],
                                                       tok.end[1])
                    line = lines[row]
                    lines[row] = (line[:c0] + parts[0] + "\n" + " " * c0
                                  + parts[1] + line[c1:])
                    text = "\n".join(lines)
                    break
        else:
            return text
    return text


def _reflow_pass(text: str) -> str:
    """Each logical line with a physical line over ``WIDTH`` re-filled
    (:func:`reflow`); a comment that ends it first moved above it."""
    src = text.split("\n")
    for toks in reversed(_logical_lines(text)):
        first, last = toks[0].start[0], toks[-1].end[0]
        span = src[first - 1:last]
        if not any(len(line) > WIDTH for line in span):
            continue
        notes = [t for t in toks if t.type == tokenize.COMMENT]
        if len(notes) == 1 and toks[-2] is notes[0] and \
                notes[0].start[0] == last:
            # a comment at the end goes on a line of its own, above
            toks = toks[:-2] + toks[-1:]
            src[last - 1] = src[last - 1][:notes[0].start[1]].rstrip()
            src.insert(first - 1, " " * toks[0].start[1]
                       + notes[0].string.rstrip())
            first, last = first + 1, last + 1
            span = src[first - 1:last]
            if not any(len(line) > WIDTH for line in span):
                continue
        new = reflow(toks, toks[0].start[1])
        if new is None or max(map(len, new)) > WIDTH:
            continue                  # no good layout: a person's job
        src[first - 1:last] = new
    return "\n".join(src)


def wrap(text: str) -> str:
    """``text`` with its lines over ``WIDTH`` wrapped: statements re-filled
    (:func:`reflow`), then long strings cut (:func:`split_strings`) and
    re-filled again; the rest as its author wrote it. Unchanged unless the
    syntax tree is the same (the code means the same)."""
    original = text
    # a long `from m import a, b` gets brackets, so it can break
    text = "\n".join(
        re.sub(r"^(\s*from\s+\S+\s+import\s+)([^(#]+)$", r"\1(\2)", line)
        if len(line) > WIDTH else line for line in text.split("\n"))
    out = _reflow_pass(split_strings(_reflow_pass(text)))
    return out if ast.dump(ast.parse(out)) == ast.dump(ast.parse(original)) \
        else original


def tidy(nb: dict, name: str, can_wrap: bool) -> tuple[int, list[str]]:
    """Fix ``nb`` in place: (changes made, lines left for a person)."""
    changes, left = 0, []
    cells = nb["cells"]
    first = next((i for i, c in enumerate(cells) if c["cell_type"] == "code"),
                 None)
    if first is not None:
        cell = cells[first]
        parts = split_imports(_source(cell))
        if parts:
            head, tail = parts
            _set(cell, head)
            cell["outputs"], cell["execution_count"] = [], None
            new = {"cell_type": "code", "execution_count": None,
                   "id": uuid.uuid4().hex[:8], "metadata": {},
                   "outputs": [], "source": cell["source"]}
            _set(new, tail)
            cells.insert(first + 1, new)
            changes += 1
        try:
            only_imports = all(isinstance(s, (ast.Import, ast.ImportFrom))
                               for s in ast.parse(_source(cell)).body)
        except SyntaxError:
            only_imports = False
        tags = cell["metadata"].setdefault("tags", [])
        if only_imports and not HIDDEN & set(tags) and "hide-input" not in tags:
            tags.append("hide-input")
            changes += 1
        if not tags:
            del cell["metadata"]["tags"]
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code" or HIDDEN & set(
                cell["metadata"].get("tags", [])):
            continue
        text = _source(cell)
        if not wide_lines(text):
            continue
        if can_wrap:
            try:
                new = wrap(text)
            except (SyntaxError, tokenize.TokenError):   # a magic, ...
                new = text
            if new != text:
                _set(cell, new)
                changes += 1
                text = new
        left += [f"{name} cell {i}: {len(line)} chars: {line.strip()[:60]}"
                 for line in wide_lines(text)]
    return changes, left


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 if a change is due")
    args = ap.parse_args(argv)
    targets = args.notebooks or sorted((ROOT / "book").glob("*.ipynb"))
    for nb in targets:
        if not nb.is_file():
            print(f"page_hygiene: no notebook {nb}")
            return 1
    can_wrap = not args.check
    due, left = [], []
    for path in targets:
        nb = json.loads(path.read_text())
        changes, wide = tidy(nb, path.name, can_wrap)
        left += wide
        if changes:
            due.append(f"{path.name}: {changes} change(s)")
            if not args.check:
                path.write_text(json.dumps(nb, indent=1, ensure_ascii=False)
                                + "\n")
    verb = "due" if args.check else "made"
    for line in due:
        print(f"page_hygiene: {verb} {line}")
    for line in left:
        print(f"page_hygiene: wider than {WIDTH}: {line}")
    if not due and not left:
        print(f"page_hygiene: {len(targets)} notebook(s) tidy")
    return 1 if left or (args.check and due) else 0


if __name__ == "__main__":
    sys.exit(main())
