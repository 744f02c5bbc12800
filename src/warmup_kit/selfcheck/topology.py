"""Self-checks: the NVLink / network ratio and what TP across nodes costs
(Chapter 6), graded by the hardware table and the parallelism model."""
from __future__ import annotations

from warmup_kit.model.hardware import SYSTEMS, hierarchy_gbps
from warmup_kit.parallelism.placement import tp_share, tp_spread
from warmup_kit.parallelism.step import Transformer
from warmup_kit.exercises.result import (
    Result, close, failed, integer, number, passed, unanswered)


def _system(name) -> str:
    if name not in SYSTEMS:
        raise ValueError(f"unknown system {name!r}; choose from "
                         f"{sorted(SYSTEMS)}")
    return name


def nvlink_nic_ratio(system: str, answer) -> Result:
    """Grade the like-for-like (per GPU, per direction) NVLink / NIC
    bandwidth ratio of ``system`` (10% tolerance)."""
    h = hierarchy_gbps(_system(system))
    if "nvlink" not in h:
        raise ValueError(f"{system} has no NVLink")
    ex = f"NVLink / NIC ratio, {system}"
    if answer is ...:
        return unanswered(ex, "a ratio, e.g. 5 for 5x")
    got = number("answer", answer)
    right = h["nvlink"] / h["nic"]
    why = (f"{h['nvlink']:.0f} GB/s NVLink per direction / "
           f"{h['nic']:.0f} GB/s NIC per direction = {right:.0f}x")
    if close(got, right, 0.10):
        return passed(ex, why)
    if close(got, 2 * right, 0.15):
        return failed(ex, "that divides NVLink's two directions added "
                          "by one direction of the NIC: compare like "
                          "with like")
    return failed(ex, "take both line rates per GPU and per direction "
                      "from the hardware table (Chapter 6)")


def tp_slowdown(model: Transformer, system: str, span: int,
                answer) -> Result:
    """Grade an estimate of the step slowdown (spread / inside, e.g. 1.5)
    when a TP=8 group is spread over ``span`` nodes instead of one, with
    every rail healthy: within 10% of
    :func:`warmup_kit.parallelism.placement.tp_spread`."""
    if not isinstance(model, Transformer):
        raise TypeError("model must be a warmup_kit Transformer")
    span = integer("span", span, minimum=2)
    r = tp_spread(model, _system(system), span=span)
    ex = f"TP=8 spread over {span} nodes of {system}"
    if answer is ...:
        return unanswered(ex, "the ratio of step times, e.g. 1.5")
    got = number("answer", answer)
    right = r["slowdown"]
    share_in, share_out = tp_share(r["inside"]), tp_share(r["spread"])
    why = (f"one TP all-reduce is {r['layer_ratio']:.1f}x slower, but TP "
           f"communication is {share_in:.0%} of the step inside a node "
           f"({share_out:.0%} spread): the step is {right:.2f}x longer "
           "(best case: all rails, no congestion)")
    if close(got, right, 0.10):
        return passed(ex, why)
    if got > right:
        return failed(ex, "the per-layer all-reduce slows by about "
                          f"{r['layer_ratio']:.1f}x, but what share of "
                          "the step is it? Compute does not move")
    return failed(ex, "the TP all-reduce is on the critical path: "
                      "nothing hides its extra time")
