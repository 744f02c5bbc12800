"""Data parallelism and ZeRO / FSDP (Rajbhandari et al. 2020): the cost of
one iteration.

* Plain DP (stage 0) all-reduces the fp32 gradients of the GPU's
  parameters once per iteration; stages 1-2 reduce-scatter them and
  all-gather the updated bf16 weights; stage 3 (FSDP) gathers the weights
  once more, for the backward. The group is every rank that holds the
  same weights: DP x CP.
* With ``overlap_dp`` the synchronisation of stages 0-2 runs behind the
  backward of the first stage's layers (twice their forward: input and
  weight gradients) of the last micro-batch; what does not fit is exposed.
* Stage 3 (FSDP, as PyTorch FSDP2 / torchtitan run it: Zhao et al. 2023,
  section 3.3) works layer by layer, every micro-batch: an all-gather of
  the layer's bf16 weights before its forward and again before its
  backward (the weights are freed after the forward), and a
  reduce-scatter of its fp32 gradients after its backward. With prefetch
  (depth 1) each layer's gather runs while the previous layer computes,
  so a layer exposes only what its collectives take beyond its
  neighbour's compute; the first layer's forward gather and the last
  reduce-scatter have nothing to hide behind and are exposed in full.
  Small per-GPU batches shrink the compute and expose the gathers; a DP
  group over many nodes makes them slower (the NCCL model picks ring or
  tree for the group's shape).
* HSDP (``shard_group``): the per-layer gathers and scatters run on the
  shard group only (inside a node when it fits), and once per iteration
  the gradient shards are all-reduced across the replicas, behind the last
  backward like plain DP; the model state is sharded over the shard group.
* The optimizer step (Adam) is memory-bound: 32 bytes per parameter it
  updates (read fp32 weight, moments and gradient, write weight and
  moments, write the bf16 copy), over the DP group's shards when the
  optimizer state is sharded.
* Hidden synchronisation is not free: beside the compute it slows both,
  and overlap realises about a fifth of the saving it promises
  (:mod:`.overlap`).
* Memory: 2 + 4 + 12 bytes per parameter, sharded by stage
  (:func:`warmup_kit.parallelism.memory.model_state_bytes`).
"""
from __future__ import annotations

from warmup_kit.parallelism.compute import stream_s
from warmup_kit.parallelism.costs.common import AxisCost, Context, \
    collective_s
from warmup_kit.parallelism.costs.overlap import contention_s
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


def fsdp_layer_collectives_s(ctx: Context) -> tuple[float, float]:
    """(all-gather of one layer's bf16 weights, reduce-scatter of its fp32
    gradients) on the DP (x CP) group."""
    shape = ctx.shapes["shard" if ctx.layout.shard_group else "dp"]
    layer = ctx.params_gpu / max(ctx.split)
    return (collective_s(ctx.cluster, "all_gather", WEIGHT_BYTES * layer,
                         shape),
            collective_s(ctx.cluster, "reduce_scatter", GRAD_BYTES * layer,
                         shape))


def fsdp_exposed_s(ctx: Context) -> float:
    """FSDP's exposed collectives in one iteration (stage 3, per layer,
    every micro-batch, prefetch depth 1)."""
    ag, rs = fsdp_layer_collectives_s(ctx)
    layers = max(ctx.split)
    if not ctx.layout.overlap_dp:
        return ctx.m * layers * (2 * ag + rs)
    fwd = ctx.fwd_s
    bwd = (ctx.passes - 1) * fwd           # backward (+ recomputed forward)
    per_mb = (ag + rs                      # first gather, last scatter
              + (layers - 1) * max(0.0, ag - fwd)
              + (layers - 1) * max(0.0, ag + rs - bwd)
              + max(0.0, ag - bwd))        # the first layer's bwd gather
    return ctx.m * per_mb


def replica_allreduce_s(ctx: Context) -> float:
    """HSDP: the all-reduce of each rank's fp32 gradient shard across the
    replica group, once per iteration."""
    return collective_s(ctx.cluster, "allreduce",
                        GRAD_BYTES * ctx.params_gpu / ctx.layout.shard_group,
                        ctx.shapes["replica"])


def overlap_window_s(ctx: Context) -> float:
    """Compute the synchronisation of stages 0-2 can hide behind: the
    backward of the first stage's layers (2 forwards each)."""
    if not ctx.layout.overlap_dp:
        return 0.0
    lps = ctx.split[0]
    window = lps * 2 * ctx.fwd_s
    return window


def optimizer_s(ctx: Context) -> float:
    """The Adam step over the parameters this GPU updates."""
    shard = ctx.layout.shards[2]
    n = ctx.layout.shard_group or ctx.shapes["dp"][0]
    return stream_s(ctx.gpu, ADAM_BYTES_PER_PARAM * ctx.params_gpu
                    / (n if shard else 1))


def dp_cost(ctx: Context) -> AxisCost:
    """One iteration: exposed synchronisation, the optimizer step, and the
    model state in memory."""
    shard_n = ctx.shapes["dp"][0]
    if ctx.layout.zero == 3 and ctx.shapes["dp"][0] > 1:
        ag, rs = fsdp_layer_collectives_s(ctx)
        sync = ctx.m * max(ctx.split) * (2 * ag + rs)
        exposed = fsdp_exposed_s(ctx)
        if ctx.layout.shard_group:
            shard_n = ctx.layout.shard_group
            replicas = replica_allreduce_s(ctx)
            sync += replicas
            exposed += max(0.0, replicas - overlap_window_s(ctx))
    else:
        sync = sync_s(ctx)
        exposed = max(0.0, sync - overlap_window_s(ctx))
    w, g, o = ctx.layout.shards
    weights, grads, opt = model_state_bytes(
        params_per_gpu=ctx.params_gpu, dp=shard_n,
        layers_per_stage=max(ctx.split), distributed_optimizer=o,
        shard_grads=g, shard_weights=w)
    opt_s = optimizer_s(ctx)
    # hidden collectives slow the compute they run beside
    lost = contention_s(sync - exposed, ctx.shapes["dp"])
    return AxisCost(compute_s=opt_s + lost, comm_s=exposed,
                    memory={"weights": weights, "grads": grads,
                            "optimizer": opt},
                    parts={"dp_exposed": exposed, "optimizer": opt_s,
                           "dp_contention": lost},
                    detail={"sync_s": sync})
