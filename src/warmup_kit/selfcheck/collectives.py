"""Self-checks: the ring's 2(N-1)/N V bytes per rank (Chapters 2, 3, Lab 01)."""
from __future__ import annotations

from collections.abc import Iterable

from warmup_kit.exercises.result import (
    Result, close, failed, integer, number, passed, unanswered)


def ring_bytes(n: int, nbytes: int, answer) -> Result:
    """Grade the bytes one rank sends in a ring all-reduce of ``nbytes`` on
    ``n`` ranks (the answer in bytes; 1% tolerance)."""
    n, v = integer("n", n), integer("nbytes", nbytes)
    ex = f"ring all-reduce bytes per rank, N={n}"
    if answer is ...:
        return unanswered(ex, "the bytes one rank sends, a number")
    x = number("answer", answer, positive=False)
    right = 2 * (n - 1) / n * v
    if close(x, right, 0.01):
        return passed(ex, f"2(N-1)/N * V = {right:,.0f} B: (N-1)/N * V in "
                          "the reduce-scatter, as much in the all-gather")
    if close(x, (n - 1) * v, 0.01) or close(x, n * v, 0.01):
        return failed(ex, "that is what the naive all-gather-then-sum "
                          "sends; the ring sends chunks of V/N")
    if close(x, (n - 1) / n * v, 0.01):
        return failed(ex, "that is one half, the reduce-scatter; the "
                          "all-gather sends as much again")
    if close(x, 2 * v, 0.01) and n > 1:
        return failed(ex, "2V is the limit for large N; for this N, "
                          "count the 2(N-1) steps of V/N bytes")
    return failed(ex, "count the steps (N-1 reduce-scatter, N-1 "
                      "all-gather) and the bytes of each (V/N)")


def byte_count(rows: Iterable[dict]) -> Result:
    """Grade a measured run: rows of :func:`warmup_kit.measure.lab.
    measure_allreduce` for the ring, on one or more world sizes.

    Right when every result was correct, every rank's counted bytes equal
    the schedule's prediction, and each is within one element per step of
    2(N-1)/N * V (chunks of an uneven split differ by one element)."""
    ex = "Lab 01: counted bytes against 2(N-1)/N V"
    rows = list(rows)
    if not rows:
        raise ValueError("no rows: run measure_allreduce first")
    need = {"algorithm", "ranks", "nbytes", "bytes_sent", "predicted_sent",
            "correct"}
    for r in rows:
        if not isinstance(r, dict) or not need <= set(r):
            raise ValueError(f"each row needs the keys {sorted(need)}")
        if r["algorithm"] != "ring":
            raise ValueError(f"byte_count grades the ring, got "
                             f"{r['algorithm']!r}")
    bad = [r for r in rows if not r["correct"]]
    if bad:
        return failed(ex, f"{len(bad)} results were wrong: fix "
                          "correctness before counting bytes")
    off = [r for r in rows if r["bytes_sent"] != r["predicted_sent"]]
    if off:
        return failed(ex, f"{len(off)} ranks sent other than the "
                          "schedule predicts")
    worst = 0.0
    for r in rows:
        n, v = r["ranks"], r["nbytes"]
        slack = 2 * (n - 1) * 8          # one float64 element per step
        gap = abs(r["bytes_sent"] - 2 * (n - 1) / n * v)
        if gap > slack:
            return failed(ex, f"rank {r.get('rank')} on N={n} sent "
                              f"{r['bytes_sent']} B, not 2(N-1)/N V")
        worst = max(worst, r["bytes_sent"] / v)
    sizes = sorted({r["ranks"] for r in rows})
    return passed(ex, f"{len(rows)} rank-runs on N = {sizes}: every count "
                      "equals the schedule and 2(N-1)/N V, at most "
                      f"{worst:.3f} V per rank, below 2V for any N")
