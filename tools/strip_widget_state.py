"""Remove stored ipywidgets state from notebooks (``metadata.widgets``).

With that state present, the built site loads a widget manager from a CDN
(it cannot, offline) and every page grows by the saved models; the book's
widgets are kernel-free on the site and live in JupyterLab once a cell runs,
so the state is never needed.

Usage: ``python tools/strip_widget_state.py book/*.ipynb``
"""
from __future__ import annotations

import json
import sys


def strip(path: str) -> bool:
    """Drop the state from one notebook; True if it changed."""
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    if "widgets" not in nb.get("metadata", {}):
        return False
    del nb["metadata"]["widgets"]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(nb, f, indent=1, ensure_ascii=False)
        f.write("\n")
    return True


if __name__ == "__main__":
    for p in sys.argv[1:]:
        if strip(p):
            print(f"{p}: widget state removed")
