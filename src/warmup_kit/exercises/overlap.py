"""Grader for Chapter 7: a DDP bucket cap, checked by the step-timeline
model (:mod:`warmup_kit.train.buckets`, :mod:`warmup_kit.train.timeline`).

Each bucket's all-reduce costs ``alpha + V / B`` (the chapter's alpha-beta
view of one bucket); the grader times the step for the reader's cap and
for every power-of-two cap from 64 KiB to the whole model, and passes a cap
within ``rel`` of the best step.
"""
from __future__ import annotations

from typing import Sequence

from warmup_kit.exercises.result import Result, failed, integer, number, \
    passed
from warmup_kit.train.buckets import assign_buckets
from warmup_kit.train.timeline import ready_positions, step_timeline


def step_s(bucket_bytes: int, layer_s: Sequence[float],
           layer_bytes: Sequence[int], alpha_s: float,
           bw_bytes_per_s: float) -> float:
    """Modeled step (backward plus exposed communication) for one cap;
    layers are in forward order, the backward runs them last first."""
    members = assign_buckets(list(layer_bytes), bucket_bytes)
    ready = ready_positions(members, len(layer_s), range(len(layer_s)))
    cost = [alpha_s + sum(layer_bytes[i] for i in m) / bw_bytes_per_s
            for m in members]
    return step_timeline(list(layer_s)[::-1], ready, cost).step_s


def check_bucket_cap(bucket_bytes, *, layer_s: Sequence[float],
                     layer_bytes: Sequence[int], alpha_s: float,
                     bw_bytes_per_s: float, rel: float = 0.02) -> Result:
    """Passes when the cap's modeled step is within ``rel`` of the best
    cap's (Chapter 7, "The timeline, measured and modelled")."""
    cap = integer("bucket_bytes", bucket_bytes)
    if isinstance(layer_s, (str, bytes)) or isinstance(layer_bytes,
                                                       (str, bytes)):
        raise TypeError("layer_s and layer_bytes must be sequences of "
                        "numbers")
    ls = [number("layer_s[i]", x) for x in layer_s]
    lb = [integer("layer_bytes[i]", x) for x in layer_bytes]
    if len(ls) != len(lb) or not ls:
        raise ValueError("need one compute time and one byte count per "
                         "layer")
    a = number("alpha_s", alpha_s, positive=False)
    bw = number("bw_bytes_per_s", bw_bytes_per_s)
    caps, c = [], 64 << 10
    while c < 2 * sum(lb):
        caps.append(c)
        c *= 2
    times = {c: step_s(c, ls, lb, a, bw) for c in caps}
    best_cap = min(times, key=times.get)
    best = times[best_cap]
    mine = step_s(cap, ls, lb, a, bw)
    n = len(assign_buckets(lb, cap))
    ex = f"bucket cap {cap / 2**20:g} MiB"
    if mine <= best * (1 + rel):
        return passed(ex, f"{n} buckets, step {mine * 1e3:.2f} ms, within "
                      f"{rel:.0%} of the best cap (model)")
    few = "too few (large)" if cap > best_cap else "too many (small)"
    return failed(ex, f"{n} buckets, step {mine * 1e3:.2f} ms, "
                  f"{mine / best - 1:.0%} slower than the best cap",
                  f"probably {few} buckets: each bucket pays alpha once, "
                  "and the last one cannot start before the backward "
                  "pass has produced its gradients")
