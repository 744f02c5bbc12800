"""Pipeline parallelism (Narayanan et al. 2021, sections 2.2 and 4.1):
the cost of one iteration.

* The layers are split over ``p`` stages (:func:`stage_layers`); the
  first stage also holds the embedding, the last the output layer and the
  loss (their compute: the vocabulary-parallel GEMM and an fp32 softmax).
* 1F1B, interleaved over ``v`` model chunks per GPU: the bubble is
  ``(p - 1) / v`` of an average stage's time per micro-batch, and the
  slowest stage paces the other ``m`` micro-batches (imbalance).
* Point-to-point sends of ``b s h / t`` per TP rank (scatter/gather,
  section 4.1) per micro-batch, model chunk and direction, on the slowest
  link between consecutive stages, not overlapped.
* Memory: the first stage holds ``min(p, m)`` micro-batches in flight
  (``x (1 + (p-1)/(p v))`` when interleaved).

What the model assumes: the 1F1B family only (no zero-bubble schedules,
whose backward split into input and weight gradients fills the bubble), a
micro-batch count that is a whole multiple of nothing in particular (Llama
3's flexible count is accepted, but its tuning of the schedule to it is
not modelled), and sends that are not overlapped with compute.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from warmup_kit.model.topology import Layout as RankGrid, link_of
from warmup_kit.parallelism.compute import BYTES, logits_fwd_s
from warmup_kit.parallelism.costs.common import AxisCost, Context
from warmup_kit.parallelism.memory import activations_per_gpu


@lru_cache(maxsize=4096)
def stage_link(tp: int, pp: int, dp: int, order: tuple[str, ...],
               gpn: int, domain: int, has_nvlink: bool) -> str:
    """Slowest link class between consecutive pipeline stages."""
    if pp == 1:
        return "nvlink"
    g = np.moveaxis(RankGrid(tp, pp, dp, order).grid, 1, -1).reshape(-1, pp)
    a, b = g[:, :-1].ravel(), g[:, 1:].ravel()
    if has_nvlink and (a // domain == b // domain).all():
        return "nvlink"
    return "pcie" if (a // gpn == b // gpn).all() else "net"


def logits_s(ctx: Context) -> float:
    """Output layer and loss of one micro-batch, forward and backward."""
    model, lay = ctx.model, ctx.layout
    return 3 * logits_fwd_s(ctx.gpu, b=ctx.b, s=ctx.s, h=model.hidden,
                            vocab=model.vocab, t=lay.tp,
                            precision=lay.precision)


def p2p_s(ctx: Context) -> float:
    """Sends of one micro-batch at one stage boundary, both directions,
    every model chunk."""
    lay, sysm = ctx.layout, ctx.system
    if lay.pp == 1:
        return 0.0
    kind = stage_link(lay.tp * lay.cp, lay.pp, lay.dp, lay.order,
                      sysm.gpus_per_node, sysm.nvlink_domain,
                      sysm.nvlink is not None)
    link = link_of(ctx.cluster, kind)
    nbytes = ctx.b * ctx.s * ctx.model.hidden * BYTES / lay.tp
    return 2 * lay.interleave * (link.latency_s + nbytes / link.bytes_per_s)


def bubble_s(stages: list[float], pp: int, interleave: int) -> float:
    """Pipeline fill and drain: ``(p - 1) / v`` average stages."""
    return (pp - 1) * (sum(stages) / pp) / interleave


def pp_cost(ctx: Context, per_layer_s: float) -> AxisCost:
    """One iteration of the pipeline whose layers each take
    ``per_layer_s`` per micro-batch (compute and exposed TP/CP/EP
    communication)."""
    lay, model, m = ctx.layout, ctx.model, ctx.m
    head, p2p = logits_s(ctx), p2p_s(ctx)
    stages = [n * per_layer_s + p2p + (head if i == lay.pp - 1 else 0.0)
              for i, n in enumerate(ctx.split)]
    avg = sum(stages) / lay.pp
    bubble = bubble_s(stages, lay.pp, lay.interleave)
    imbalance = m * (max(stages) - avg)
    acts = activations_per_gpu(
        b=ctx.b, s=ctx.s, h=model.hidden, a=model.heads, vocab=model.vocab,
        t=lay.tp, p=lay.pp, m=m, layers_per_stage=max(ctx.split),
        interleave=lay.interleave, recompute=lay.recompute,
        sequence_parallel=lay.sequence_parallel, flash_attention=ctx.flash,
        kv_fraction=model.kv_dim / model.hidden)
    return AxisCost(compute_s=m * head / lay.pp,
                    comm_s=m * p2p + bubble + imbalance,
                    memory={"activations": acts},
                    parts={"pp_p2p": m * p2p, "pp_bubble": bubble,
                           "pp_imbalance": imbalance},
                    detail={"stages_s": stages, "logits_s": head})
