"""How long each notebook of the book took to execute, from jupyter-cache.

Usage (after ``make book``, which runs it):

    .venv/bin/python tools/notebook_times.py [--cache _build/.jupyter_cache]
        [--json _build/notebook_times.json] [--limit 60]

For every notebook in ``_toc.yml`` it finds the cache record that matches
the notebook's current code cells (the one the build used) and reads the
seconds its execution took, as myst-nb stored them (``execution_seconds``).
It prints a table, writes it as JSON, and exits 1 when a notebook took
longer than ``--limit`` seconds or has no record in the cache (not
executed by the build). A notebook the build took from the cache shows the
time of the run that filled it and when that was (``executed``).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import nbformat

from site_expect import toc_pages


def toc_notebooks(repo: Path) -> list[Path]:
    """The ``.ipynb`` pages of the book, in toc order."""
    return [src for _, src in toc_pages(repo)
            if src is not None and src.suffix == ".ipynb"]


def times(repo: Path, cache_dir: Path) -> list[dict]:
    """One row per toc notebook: its path, seconds (None when not in the
    cache) and when that execution ran."""
    from jupyter_cache import get_cache
    cache = get_cache(str(cache_dir))
    rows = []
    for path in toc_notebooks(repo):
        nb = nbformat.read(path, as_version=4)
        row = {"notebook": str(path.relative_to(repo)), "seconds": None,
               "executed": None}
        try:
            rec = cache.match_cache_notebook(nb)
        except KeyError:
            rec = None
        if rec is not None:
            s = (rec.data or {}).get("execution_seconds")
            row["seconds"] = None if s is None else round(float(s), 2)
            row["executed"] = rec.created.isoformat(timespec="seconds")
        rows.append(row)
    return rows


def problems(rows: list[dict], limit_s: float) -> list[str]:
    bad = []
    for r in rows:
        if r["seconds"] is None:
            bad.append(f"{r['notebook']}: no execution record in the cache "
                       "(did the build execute it?)")
        elif r["seconds"] > limit_s:
            bad.append(f"{r['notebook']}: {r['seconds']:.1f} s, over the "
                       f"{limit_s:g} s limit")
    return bad


def table(rows: list[dict]) -> str:
    width = max([len("notebook")] + [len(r["notebook"]) for r in rows])
    lines = [f"{'notebook':<{width}}  {'seconds':>8}  executed (UTC)"]
    for r in sorted(rows, key=lambda r: -(r["seconds"] or float("inf"))):
        s = "-" if r["seconds"] is None else f"{r['seconds']:.1f}"
        lines.append(f"{r['notebook']:<{width}}  {s:>8}  {r['executed'] or '-'}")
    total = sum(r["seconds"] or 0 for r in rows)
    lines.append(f"{'total':<{width}}  {total:>8.1f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", default=".", help="where _toc.yml is")
    ap.add_argument("--cache", default="_build/.jupyter_cache")
    ap.add_argument("--json", default="_build/notebook_times.json")
    ap.add_argument("--limit", type=float, default=60.0,
                    help="seconds a notebook may take (default 60)")
    args = ap.parse_args(argv)
    repo, cache = Path(args.repo), Path(args.cache)
    if not (cache / "global.db").is_file():
        print(f"notebook_times: no jupyter cache at {cache} "
              "(run `make book` first)")
        return 1
    rows = times(repo, cache)
    print(table(rows))
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"limit_s": args.limit, "notebooks": rows},
                              indent=1) + "\n", encoding="utf-8")
    bad = problems(rows, args.limit)
    for b in bad:
        print(f"FAIL {b}")
    print(f"notebook_times: {len(rows) - len(bad)} of {len(rows)} notebooks "
          f"within {args.limit:g} s; table in {out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
