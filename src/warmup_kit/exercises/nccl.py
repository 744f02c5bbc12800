"""Graders for Chapters 5 and 6: nccl-tests' bandwidths, NCCL's choice and
where a group sits (:mod:`warmup_kit.model.nccl`, :mod:`~.model.costs`)."""
from __future__ import annotations

from warmup_kit.exercises.result import (
    Result, choice, close, failed, integer, number, off_by, passed)
from warmup_kit.model.costs import BUSBW_FACTORS, busbw_factor
from warmup_kit.model.hardware import SYSTEMS, cluster
from warmup_kit.model.nccl import ALGORITHMS, best
from warmup_kit.model.topology import packed, spread


def check_busbw(answer_gbps, *, collective: str, nbytes: int, time_s: float,
                n: int, rel: float = 0.01) -> Result:
    """nccl-tests' bus bandwidth (GB/s) of one measurement (Chapter 5,
    "nccl-tests vocabulary"): algbw = V / t, busbw = algbw x factor(N)."""
    ex = f"busbw, {collective}"
    a = number("answer_gbps", answer_gbps)
    choice("collective", collective, BUSBW_FACTORS)
    nbytes = integer("nbytes", nbytes)
    t = number("time_s", time_s)
    n = integer("n", n, minimum=2)
    truth = nbytes / t * busbw_factor(collective, n) / 1e9
    if close(a, truth, rel):
        return passed(ex, f"{a:.1f} GB/s agrees with nccl-tests' "
                      "definition")
    return failed(ex, f"{a:.1f} GB/s is {off_by(a, truth)}",
                  "algbw is the size over the time (GB = 1e9 bytes); the "
                  "bus factor depends on the collective and on N")


def check_nccl_choice(answer, *, collective: str, nbytes: int,
                      system: str = "dgx-h100", nodes: int = 2) -> Result:
    """The algorithm the NCCL model picks (Chapter 5, "NCCL's choice, as a
    model"): ``answer`` is an algorithm name, or (algorithm, protocol)."""
    ex = f"NCCL's pick, {collective} of {nbytes:,} B on {nodes} x {system}"
    if isinstance(answer, tuple):
        if len(answer) != 2:
            raise ValueError("answer must be an algorithm or a pair "
                             "(algorithm, protocol)")
        alg, proto = answer
    else:
        alg, proto = answer, None
    choice("algorithm", alg, ALGORITHMS)
    if proto is not None:
        choice("protocol", proto, ("LL", "LL128", "Simple"))
    choice("system", system, SYSTEMS)
    nodes = integer("nodes", nodes)
    pick = best(collective, integer("nbytes", nbytes), cluster(system, nodes))
    if alg != pick.algorithm:
        return failed(ex, f"the model does not pick {alg}",
                      "list every (algorithm, protocol) with "
                      "warmup_kit.model.nccl.choices and compare latency "
                      "and bandwidth terms at this size")
    if proto is not None and proto != pick.protocol:
        return failed(ex, f"{alg} is right, but not with {proto}",
                      "small messages favour the low-latency protocols, "
                      "large ones the full-bandwidth one")
    what = alg if proto is None else f"{alg}/{proto}"
    return passed(ex, f"{what}, as the model picks "
                  f"({pick.time_s * 1e6:.1f} µs)")


def spread_slowdown(nbytes: int, *, system: str = "dgx-h100", tp: int = 8,
                    nodes: int = 2) -> float:
    """How many times longer the model's all-reduce of ``nbytes`` takes on
    a group of ``tp`` GPUs split over ``nodes`` nodes than on one node."""
    c = cluster(system, nodes)
    one = best("allreduce", nbytes, c, packed(c, tp)).time_s
    two = best("allreduce", nbytes, c, spread(c, tp, nodes)).time_s
    return two / one


def check_spread_slowdown(answer, *, nbytes: int, system: str = "dgx-h100",
                          tp: int = 8, nodes: int = 2,
                          rel: float = 0.05) -> Result:
    """Chapter 6, "TP inside the island": the ratio of a TP all-reduce's
    time when its ``tp`` GPUs span ``nodes`` nodes to its time inside one,
    from the NCCL model, within ``rel``."""
    ex = f"TP={tp} spread over {nodes} nodes, {nbytes:,} B"
    a = number("answer", answer)
    choice("system", system, SYSTEMS)
    truth = spread_slowdown(integer("nbytes", nbytes), system=system,
                            tp=integer("tp", tp, minimum=2),
                            nodes=integer("nodes", nodes, minimum=2))
    if close(a, truth, rel):
        return passed(ex, f"{a:.2f}x agrees with the NCCL model")
    return failed(ex, f"{a:.2f}x is {off_by(a, truth)}",
                  "time both groups with warmup_kit.model.nccl.best, "
                  "passing the GPU ids (topology.packed, topology.spread)")
