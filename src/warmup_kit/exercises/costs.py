"""Graders for Chapters 3 and 4: the alpha-beta cost model.

The crossover is found numerically from :mod:`warmup_kit.model.costs`
(the same closed forms the chapters plot), not from a formula typed here.
"""
from __future__ import annotations

from warmup_kit.exercises.result import (
    Result, close, failed, integer, number, off_by, passed)
from warmup_kit.model.costs import allreduce_s


def crossover_bytes(n: int, alpha_s: float, bw_bytes_per_s: float,
                    a: str = "tree", b: str = "ring") -> float:
    """The size V above which ``b`` is faster than ``a`` (bisection on
    the model's all-reduce times; both must cross once between 1 B and
    1 TB)."""
    def gap(v: float) -> float:
        return (allreduce_s(b, v, n, alpha_s, bw_bytes_per_s)
                - allreduce_s(a, v, n, alpha_s, bw_bytes_per_s))
    lo, hi = 1.0, 1e12
    if gap(lo) <= 0 or gap(hi) >= 0:
        raise ValueError(f"{b} does not overtake {a} between 1 B and 1 TB "
                         f"for N={n}")
    for _ in range(200):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if gap(mid) > 0 else (lo, mid)
    return (lo * hi) ** 0.5


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
    truth = crossover_bytes(n, alpha, bw)
    if close(a, truth, rel):
        return passed(ex, f"V* = {a:,.0f} B agrees with the model's "
                      f"ring and tree times (within {rel:.0%})")
    return failed(ex, f"{a:,.0f} B is {off_by(a, truth)} "
                  f"(more than {rel:.0%} off)",
                  "write both times as rounds x alpha + port bytes x beta "
                  "(beta = 1/B), set them equal and solve for V (Chapter 4, "
                  "\"The costs, side by side\"); count the "
                  "tree's levels and whether the last one is full")
