"""Where the tensor-parallel group sits, and what it costs (Chapter 6).

Experiments on the step-time model (:mod:`warmup_kit.parallelism.step`) that
move one thing at a time:

* :func:`tp_spread`: the same job with each TP group inside one NVLink
  island, or spread evenly over ``span`` nodes (TP outermost in the rank
  grid, :class:`~warmup_kit.model.topology.Layout`), with its per-layer all-reduce
  priced by :mod:`warmup_kit.model.nccl`;
* :func:`with_rails`: a what-if system in which a node's GPUs reach the
  network through ``rails`` of its NICs instead of one NIC each (a NIC
  down, NCCL restricted to one HCA, a rail not cabled), so each GPU gets
  ``rails / gpus_per_node`` of a NIC's bandwidth when all of them talk.

Everything here is a model output, not a measurement.
"""
from __future__ import annotations

from dataclasses import replace

from warmup_kit.model.hardware import SYSTEMS, Cluster, System
from warmup_kit.model.nccl import best
from warmup_kit.parallelism.step import (
    IterationResult, Transformer, iteration_time)
from warmup_kit.parallelism.compute import BYTES
from warmup_kit.model.topology import Layout

INSIDE = ("dp", "pp", "tp")      # TP innermost: each group in one node
SPREAD = ("tp", "pp", "dp")      # TP outermost: each group over all nodes


def with_rails(system: str | System, rails: int | None = None) -> System:
    """``system`` with only ``rails`` NICs per node in use (None: all)."""
    s = SYSTEMS[system] if isinstance(system, str) else system
    g = s.gpus_per_node
    if rails is None or rails == g:
        return s
    if not 1 <= rails <= g:
        raise ValueError(f"rails must be in 1..{g}, got {rails}")
    nic = replace(s.nic, name=f"{s.nic.name}, {rails} of {g} rails",
                  gbps=s.nic.gbps * rails / g)
    return replace(s, name=f"{s.name}/{rails}-rail", nic=nic)


def tp_spread(model: Transformer, system: str | System, *, tp: int = 8,
              span: int = 2, rails: int | None = None, micro_batch: int = 1,
              batch_per_replica: int = 32, **kwargs) -> dict:
    """One job, TP groups inside a node vs spread over ``span`` nodes.

    The cluster has ``span`` nodes and ``dp = span * gpus_per_node / tp``
    replicas, each with ``batch_per_replica`` sequences per step.

    Returns:
        ``{"inside", "spread"}`` :class:`IterationResult`, ``"slowdown"``
        (spread / inside step time), ``"layer_ratio"`` (one TP all-reduce,
        spread / inside), ``"gpus_per_node"`` of a spread TP group, and the
        two all-reduce :class:`~warmup_kit.model.nccl.Choice` objects.
    """
    s = with_rails(system, rails)
    c = Cluster(s, span)
    dp = c.n_gpus // tp
    kw = dict(tp=tp, pp=1, dp=dp, global_batch=dp * batch_per_replica,
              micro_batch=micro_batch, **kwargs)
    res: dict = {k: iteration_time(model, c, order=o, **kw)
                 for k, o in (("inside", INSIDE), ("spread", SPREAD))}
    nbytes = micro_batch * model.seq * model.hidden * BYTES
    for k, o in (("inside", INSIDE), ("spread", SPREAD)):
        res[f"allreduce_{k}"] = best("allreduce", nbytes, c,
                                     Layout(tp, 1, dp, o).group("tp", 0))
    res["slowdown"] = res["spread"].total_s / res["inside"].total_s
    res["layer_ratio"] = (res["allreduce_spread"].time_s
                          / res["allreduce_inside"].time_s)
    res["gpus_per_node"] = tp // min(tp, span)
    return res


def tp_share(r: IterationResult) -> float:
    """Fraction of the step spent in TP all-reduces."""
    return r.parts["tp_comm"] / r.total_s
