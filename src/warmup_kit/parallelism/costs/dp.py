"""Data parallelism and ZeRO / FSDP (Rajbhandari et al. 2020): the cost of
one iteration.

* Plain DP (stage 0) all-reduces the fp32 gradients of the GPU's
  parameters once per iteration; stages 1-2 reduce-scatter them and
  all-gather the updated bf16 weights; stage 3 (FSDP) gathers the weights
  once more, for the backward. The group is every rank that holds the
  same weights: DP x CP.
* With ``overlap_dp`` the synchronisation runs behind the backward of the
  first stage's layers (twice their forward: input and weight gradients)
  of the last micro-batch, and at stage 3 the forward gather also behind
  their forward; what does not fit is exposed.
* The optimizer step (Adam) is memory-bound: 32 bytes per parameter it
  updates (read fp32 weight, moments and gradient, write weight and
  moments, write the bf16 copy), over the DP group's shards when the
  optimizer state is sharded.
* Memory: 2 + 4 + 12 bytes per parameter, sharded by stage
  (:func:`warmup_kit.parallelism.memory.model_state_bytes`).
"""
from __future__ import annotations

from warmup_kit.parallelism.compute import stream_s
from warmup_kit.parallelism.costs.common import AxisCost, Context, \
    collective_s
from warmup_kit.parallelism.memory import model_state_bytes

ADAM_BYTES_PER_PARAM = 32   # read fp32 w, m, v, grad; write w, m, v; bf16 w
GRAD_BYTES, WEIGHT_BYTES = 4, 2


def sync_s(ctx: Context) -> float:
    """Gradient (and weight) synchronisation of one iteration, unhidden."""
    lay, shape, params = ctx.layout, ctx.shapes["dp"], ctx.params_gpu
    if shape[0] < 2:
        return 0.0
    if lay.zero == 0:         # all-reduce of the fp32 gradients
        return collective_s(ctx.cluster, "allreduce", GRAD_BYTES * params,
                            shape)
    gathers = 2 if lay.zero == 3 else 1
    return (collective_s(ctx.cluster, "reduce_scatter", GRAD_BYTES * params,
                         shape)
            + gathers * collective_s(ctx.cluster, "all_gather",
                                     WEIGHT_BYTES * params, shape))


def overlap_window_s(ctx: Context) -> float:
    """Compute the synchronisation can hide behind: the backward of the
    first stage's layers (2 forwards each), and their forward at stage 3."""
    lay = ctx.layout
    if not lay.overlap_dp:
        return 0.0
    lps = ctx.split[0]
    window = lps * 2 * ctx.fwd_s
    if lay.zero == 3:
        window += lps * ctx.fwd_s
    return window


def optimizer_s(ctx: Context) -> float:
    """The Adam step over the parameters this GPU updates."""
    shard = ctx.layout.shards[2]
    n = ctx.shapes["dp"][0]
    return stream_s(ctx.gpu, ADAM_BYTES_PER_PARAM * ctx.params_gpu
                    / (n if shard else 1))


def dp_cost(ctx: Context) -> AxisCost:
    """One iteration: exposed synchronisation, the optimizer step, and the
    model state in memory."""
    sync = sync_s(ctx)
    exposed = max(0.0, sync - overlap_window_s(ctx))
    w, g, o = ctx.layout.shards
    weights, grads, opt = model_state_bytes(
        params_per_gpu=ctx.params_gpu, dp=ctx.shapes["dp"][0],
        layers_per_stage=max(ctx.split), distributed_optimizer=o,
        shard_grads=g, shard_weights=w)
    opt_s = optimizer_s(ctx)
    return AxisCost(compute_s=opt_s, comm_s=exposed,
                    memory={"weights": weights, "grads": grads,
                            "optimizer": opt},
                    parts={"dp_exposed": exposed, "optimizer": opt_s},
                    detail={"sync_s": sync})
