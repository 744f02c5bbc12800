"""Graders for Chapters 3 and 4: the alpha-beta cost model.

The crossover is found numerically by
:func:`warmup_kit.model.costs.crossover_bytes` (the same closed forms the
chapters plot), not from a formula typed here.
"""
from __future__ import annotations

from warmup_kit.exercises.result import (
    Result, close, failed, integer, number, off_by, passed)
from warmup_kit.model.costs import crossover_bytes


def check_crossover(answer, *, n: int, alpha_s: float,
                    bw_bytes_per_s: float, rel: float = 0.02) -> Result:
    """The buffer size V* (bytes) where the ring all-reduce overtakes the
    binary tree (book, Chapter 4, "The costs, side by side"), within
    ``rel``."""
    ex = f"ring/tree crossover, N={n}"
    a = number("answer", answer)
    n = integer("n", n, minimum=3)
    alpha = number("alpha_s", alpha_s)
    bw = number("bw_bytes_per_s", bw_bytes_per_s)
    truth = crossover_bytes("ring", "tree", n, alpha, bw, lo=1.0, hi=1e12)
    if truth is None:
        raise ValueError(f"the ring does not overtake the tree between 1 B "
                         f"and 1 TB for N={n}")
    if close(a, truth, rel):
        return passed(ex, f"V* = {a:,.0f} B agrees with the model's "
                      f"ring and tree times (within {rel:.0%})")
    return failed(ex, f"{a:,.0f} B is {off_by(a, truth)} "
                  f"(more than {rel:.0%} off)",
                  "write both times as rounds x alpha + port bytes x beta "
                  "(beta = 1/B), set them equal and solve for V (Chapter 4, "
                  "\"The costs, side by side\"); count the "
                  "tree's levels and whether the last one is full")
