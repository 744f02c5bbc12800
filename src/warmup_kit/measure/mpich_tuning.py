"""MPICH's built-in algorithm selection, read from the installed library.

Book, Chapter 4 ("how libraries switch"). MPICH 4 and later choose a
collective's algorithm from a decision tree written in JSON and compiled
into ``libmpi`` (``src/mpi/coll/src/csel_container`` and the
``coll_tuning.json`` defaults; a site can replace it with
``MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE``). :func:`selection_table`
finds that JSON in the shared library beside this Python and returns it, so
the book can print the thresholds of the MPICH the reader actually runs,
next to the ones Thakur, Rabenseifner and Gropp (2005) published.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

MARK = b'{"collective='


def find_libmpi() -> Path | None:
    """``libmpi.so*`` of the venv (the mpich wheel's), or None."""
    lib = Path(sys.prefix) / "lib"
    hits = sorted(p for p in lib.glob("libmpi.so*") if not p.is_symlink()
                  and p.stat().st_size > 1 << 20)
    return hits[0] if hits else None


def selection_table(path: str | Path | None = None) -> dict | None:
    """MPICH's generic (MPIR-level) JSON decision tree compiled into
    libmpi, or None if not found. (The library holds others, for its
    shared-memory and network layers.)"""
    path = Path(path) if path else find_libmpi()
    if path is None or not path.exists():
        return None
    data, start = path.read_bytes(), 0
    while (start := data.find(MARK, start)) >= 0:
        end = data.find(b"\0", start)
        blob, start = data[start:end], end
        if b"MPIR_Allreduce_intra" in blob:     # the generic (MPIR) tree
            try:
                return json.loads(blob.decode())
            except ValueError:
                return None
    return None


def rules(table: dict, collective: str, comm_type: str = "intra") -> list[str]:
    """One line per leaf of ``collective``'s tree: conditions -> algorithm."""
    out: list[str] = []

    def walk(node: dict, path: list[str]) -> None:
        for key, sub in node.items():
            if key.startswith("algorithm="):
                name = key.split("=", 1)[1].removeprefix("MPIR_")
                out.append(f"{' & '.join(path) or 'always'} -> {name}")
            else:
                walk(sub, path + [key])
    walk(table[f"collective={collective}"].get(f"comm_type={comm_type}", {}),
         [])
    return out
