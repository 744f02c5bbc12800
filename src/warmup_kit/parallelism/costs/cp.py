"""Context parallelism (ring attention: Liu et al. 2023; Megatron-LM's
``context_parallel_size``): the cost of one layer for one micro-batch.

The sequence is split over ``cp`` ranks, each holding ``s / cp`` tokens
(with causal load balancing: every rank holds two mirrored chunks, so each
does the same share of the causal attention). In every layer each rank

* computes attention of its queries against all ``s`` keys: ``cp`` times
  the attention core of its own block (compute, every pass that runs the
  attention core: forward, backward (2.5 forwards when fused), recomputed
  forward);
* passes its K and V blocks around the CP ring, ``cp - 1`` steps of
  ``b (s/cp) 2 kv_dim / t`` elements per pass, overlapped with the
  attention of the blocks it already holds; only what the attention cannot
  cover is exposed, and the hidden part still costs most of its time
  (:mod:`.overlap`).

With ``cp_attention="allgather"`` (the variant Llama 3 describes: Llama
Team 2024, section 3.3.2) each rank instead all-gathers the full K and V
of the sequence before its attention and reduce-scatters their gradients
after the backward; with grouped-query attention these are small, and
they are not overlapped (exposed in full, in every pass).
"""
from __future__ import annotations

from warmup_kit.parallelism.compute import BYTES
from warmup_kit.parallelism.costs.common import AxisCost, Context, \
    collective_s
from warmup_kit.parallelism.costs.overlap import contention_s


def ring_pass_s(ctx: Context) -> float:
    """One pass (forward) of ring attention's KV exchange for one layer:
    ``cp - 1`` point-to-point steps of a K and a V block."""
    cp = ctx.layout.cp
    if cp < 2:
        return 0.0
    _, N, _ = ctx.shapes["cp"]
    sysm = ctx.system
    # across nodes every GPU of the CP group sends at once: its share of
    # the node's NIC ports (one whole port only on a one-NIC-per-GPU node)
    link = sysm.gpu_nic if N > 1 else (sysm.nvlink or sysm.pcie)
    block = ctx.b * ctx.s * 2 * ctx.model.kv_dim / ctx.layout.tp * BYTES
    return (cp - 1) * (link.latency_s + block / link.bytes_per_s)


def allgather_kv_s(ctx: Context) -> tuple[float, float]:
    """(all-gather of K and V, reduce-scatter of their gradients) of one
    layer on the CP group: each rank's share is its block, ``b (s/cp)
    2 kv_dim / t`` elements."""
    block = ctx.b * ctx.s * 2 * ctx.model.kv_dim / ctx.layout.tp * BYTES
    full = block * ctx.layout.cp
    return (collective_s(ctx.cluster, "all_gather", full, ctx.shapes["cp"]),
            collective_s(ctx.cluster, "reduce_scatter", full,
                         ctx.shapes["cp"]))


def cp_cost(ctx: Context) -> AxisCost:
    """One layer, one micro-batch: the attention against the other ranks'
    keys, and the KV exchange left exposed."""
    cp, rc = ctx.layout.cp, ctx.layout.recompute
    if cp < 2:
        return AxisCost(per="layer")
    own = ctx.lt.attn_core_fwd_s
    # fwd, bwd (x2, x2.5 fused), recomputed fwd
    runs = 1 + ctx.lt.attn_core_bwd_ratio + (rc in ("full", "selective"))
    if ctx.layout.cp_attention == "allgather":
        ag, rs = allgather_kv_s(ctx)
        gathers = 1 + (rc == "full") + 1         # fwd, recomputed fwd, bwd
        return AxisCost(compute_s=runs * (cp - 1) * own,
                        comm_s=gathers * ag + rs,
                        detail={"kv_allgather_s": ag, "kv_grad_rs_s": rs},
                        per="layer")
    exchange = ring_pass_s(ctx)
    exposed = ctx.passes * max(0.0, exchange - cp * own)
    lost = contention_s(ctx.passes * min(exchange, cp * own),
                        ctx.shapes["cp"])
    return AxisCost(compute_s=runs * (cp - 1) * own + lost, comm_s=exposed,
                    detail={"kv_exchange_s": exchange}, per="layer")
