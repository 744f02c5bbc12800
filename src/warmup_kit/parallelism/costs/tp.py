"""Tensor parallelism (Shoeybi et al. 2019, section 3; Narayanan et al.
2021, section 2.3): the cost of one layer for one micro-batch.

* compute: the layer's kernels on ``1/t`` of the heads and FFN columns
  (:func:`warmup_kit.parallelism.compute.layer_times`), forward once,
  backward twice (a fused attention core's 2.5 times), plus the recomputed
  forward (all of it under full recomputation, the attention core under
  selective, torchtitan's choice of matmuls and every elementwise kernel
  under "op"); without fused
  gradient accumulation each micro-batch also adds its bf16 weight
  gradients into the fp32 buffer, a memory-bound pass of 10 bytes per
  parameter of the layer;
* communication: all-reduces of the ``b s h`` activations, 2 in the
  forward (after attention, after the FFN), 2 in the backward, 2 more when
  the forward is recomputed, each on the TP group's links and on the
  critical path (no overlap; with sequence parallelism each is a
  reduce-scatter plus an all-gather, the same bytes);
* memory: the activations the layer keeps for the backward
  (Korthikanti et al. 2022, :func:`activation_bytes_per_layer`; the
  pipeline multiplies it by the layers and micro-batches in flight).
"""
from __future__ import annotations

from warmup_kit.parallelism.compute import BYTES, stream_s
from warmup_kit.parallelism.costs.common import AxisCost, Context, \
    collective_s
from warmup_kit.parallelism.memory import activation_bytes_per_layer

#: bytes per parameter of the unfused gradient accumulation: read the bf16
#: gradient (2), read and write the fp32 buffer (4 + 4)
GRAD_ACCUMULATE_BYTES = 10


def allreduces_per_layer(recompute: str) -> int:
    """TP all-reduces per layer and micro-batch: 2 forward + 2 backward,
    + 2 for the recomputed forward."""
    n_ar = 6 if recompute == "full" else 4
    return n_ar


def layer_compute_s(ctx: Context) -> float:
    """Kernel seconds of one layer, one micro-batch, on one TP rank (the
    attention of its own ``s`` tokens against themselves; CP adds the
    rest)."""
    lt, rc = ctx.lt, ctx.layout.recompute
    recomputed = {"full": lt.fwd_s, "selective": lt.attn_core_fwd_s,
                  "op": lt.op_recompute_fwd_s, "none": 0.0}[rc]
    out = lt.fwd_s + lt.bwd_s + recomputed
    if not ctx.fused:
        model, lay = ctx.model, ctx.layout
        out += stream_s(ctx.gpu, GRAD_ACCUMULATE_BYTES
                        * model.params_per_layer / lay.tp
                        / (lay.ep if model.experts else 1))
    return out


def tp_cost(ctx: Context) -> AxisCost:
    """One layer, one micro-batch: compute, TP all-reduces, activations."""
    lay, model = ctx.layout, ctx.model
    act = ctx.b * ctx.s * model.hidden * BYTES
    one = collective_s(ctx.cluster, "allreduce", act, ctx.shapes["tp"])
    per_layer_act = activation_bytes_per_layer(
        b=ctx.b, s=ctx.s, h=model.hidden, a=model.heads, t=lay.tp,
        recompute=lay.recompute, sequence_parallel=lay.sequence_parallel,
        flash_attention=ctx.flash)
    return AxisCost(compute_s=layer_compute_s(ctx),
                    comm_s=allreduces_per_layer(lay.recompute) * one,
                    memory={"activations_per_layer": per_layer_act},
                    detail={"allreduce_s": one, "allreduce_bytes": act},
                    per="layer")
