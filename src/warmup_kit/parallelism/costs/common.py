"""What every axis's cost function reads: the job's :class:`Context`, and
what each returns: an :class:`AxisCost`.

The context is computed once per (model, cluster, layout): the micro-batch
count, the layers of each pipeline stage, the kernel times of one layer
(:mod:`warmup_kit.parallelism.compute`), the shapes of the TP, CP, DP and
EP groups on the cluster (``(n, islands, ranks per island)``, what the NCCL
model prices), and the parameters one GPU holds.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from warmup_kit.model.hardware import Cluster, GPU, System
from warmup_kit.model.nccl import best_for_shape
from warmup_kit.model.topology import Layout as RankGrid
from warmup_kit.parallelism.compute import LayerTimes, layer_times
from warmup_kit.parallelism.layout import Layout, stage_layers


@dataclass(frozen=True)
class AxisCost:
    """What one parallel axis costs.

    Attributes:
        compute_s: seconds of computation on the critical path.
        comm_s: seconds of communication left exposed (not hidden).
        memory: bytes per GPU this axis accounts for, by part.
        parts: named seconds for :class:`IterationResult.parts`.
        detail: other figures worth reporting (unexposed times, ...).
        per: "layer" (per layer and micro-batch) or "iteration".
    """

    compute_s: float = 0.0
    comm_s: float = 0.0
    memory: dict = field(default_factory=dict)
    parts: dict = field(default_factory=dict)
    detail: dict = field(default_factory=dict)
    per: str = "iteration"

    @property
    def total_s(self) -> float:
        return self.compute_s + self.comm_s


@dataclass(frozen=True)
class Context:
    """One job, as the cost functions see it.

    Attributes:
        model, cluster, layout: the inputs.
        m: micro-batches per iteration.
        b, s: micro-batch and tokens per GPU per sequence (``seq / cp``).
        split: layers of each pipeline stage.
        flash, fused: FlashAttention and fused gradient accumulation.
        lt: kernel times of one layer, one micro-batch, ``s`` tokens.
        shapes: ``{"tp" | "cp" | "dp" | "ep": (n, islands, per island)}``;
            "dp" is the group that shares weights (DP x CP ranks).
        params_gpu: parameters on the most loaded GPU (heaviest stage).
    """

    model: object
    cluster: Cluster
    layout: Layout
    m: int
    b: int
    s: int
    split: tuple[int, ...]
    flash: bool
    fused: bool
    lt: LayerTimes
    shapes: dict
    params_gpu: float

    @property
    def gpu(self) -> GPU:
        return self.cluster.system.gpu

    @property
    def system(self) -> System:
        return self.cluster.system

    @property
    def passes(self) -> int:
        """Forward-equivalent passes per layer: forward, backward (twice
        the forward), plus a recomputed forward with full recomputation."""
        return 3 + (self.layout.recompute == "full")

    @property
    def fwd_s(self) -> float:
        """Forward of one layer for one micro-batch, its queries against
        all ``seq`` keys (CP included)."""
        return (self.lt.fwd_s
                + (self.layout.cp - 1) * self.lt.attn_core_fwd_s)

    @property
    def layers_per_gpu(self) -> float:
        """Average layers per pipeline stage."""
        return sum(self.split) / self.layout.pp


def island(system: System) -> int:
    """GPUs that share the fast fabric: the NVLink domain, else the node."""
    return system.nvlink_domain if system.nvlink else system.gpus_per_node


def shape_of_ranks(ranks: np.ndarray, isl: int) -> tuple[int, int, int]:
    """(n, islands, ranks per island) of the worst of several groups;
    ``ranks`` has one group per row, GPU ids = ranks."""
    g = np.sort(np.asarray(ranks) // isl, axis=1)
    N = int((np.diff(g, axis=1) != 0).sum(axis=1).max()) + 1
    n = g.shape[1]
    return n, N, max(1, n // N)


@lru_cache(maxsize=4096)
def _grid_shape(tp: int, pp: int, dp: int, order: tuple[str, ...],
                axis: str, isl: int) -> tuple[int, int, int]:
    """(n, islands, ranks per island) of the worst ``axis`` group of a
    (dp, pp, tp) rank grid placed in ``order``."""
    grid = RankGrid(tp, pp, dp, order).grid
    k = ("dp", "pp", "tp").index(axis)
    return shape_of_ranks(np.moveaxis(grid, k, -1).reshape(
        -1, grid.shape[k]), isl)


@lru_cache(maxsize=4096)
def group_shapes(tp: int, cp: int, pp: int, dp: int, ep: int,
                 isl: int) -> dict[str, tuple[int, int, int]]:
    """Shapes of the CP, DP (x CP: the ranks that share weights) and EP
    groups in the grid (dp, pp, cp, tp), TP innermost."""
    grid = np.arange(tp * cp * pp * dp).reshape(dp, pp, cp, tp)
    cp_groups = np.moveaxis(grid, 2, -1).reshape(-1, cp)
    dpcp = np.moveaxis(grid, (0, 2), (-2, -1)).reshape(-1, dp * cp)
    ep_groups = np.moveaxis(grid, 0, -1).reshape(-1, dp)
    ep_groups = ep_groups.reshape(-1, dp // ep, ep).reshape(-1, ep)
    return {"cp": shape_of_ranks(cp_groups, isl),
            "dp": shape_of_ranks(dpcp, isl),
            "ep": shape_of_ranks(ep_groups, isl)}


@lru_cache(maxsize=4096)
def hsdp_shapes(tp: int, pp: int, dp: int, g: int,
                isl: int) -> dict[str, tuple[int, int, int]]:
    """Shapes of HSDP's shard groups (``g`` consecutive DP ranks) and
    replica groups (one rank of each shard group)."""
    grid = np.arange(tp * pp * dp).reshape(dp, pp, tp)
    by_dp = np.moveaxis(grid, 0, -1).reshape(-1, dp // g, g)
    return {"shard": shape_of_ranks(by_dp.reshape(-1, g), isl),
            "replica": shape_of_ranks(
                np.moveaxis(by_dp, 1, -1).reshape(-1, dp // g), isl)}


def shapes_of(lay: Layout, system: System) -> dict:
    """Shapes of the TP, CP, DP and EP groups of ``lay`` on ``system``
    (and HSDP's shard and replica groups)."""
    isl = island(system)
    tp, pp, dp, cp, ep = lay.tp, lay.pp, lay.dp, lay.cp, lay.ep
    if lay.shard_group:
        out = shapes_of(replace(lay, shard_group=0), system)
        return {**out, **hsdp_shapes(tp, pp, dp, lay.shard_group, isl)}
    if cp == 1 and ep == 1:
        return {"tp": _grid_shape(tp, pp, dp, lay.order, "tp", isl),
                "dp": _grid_shape(tp, pp, dp, lay.order, "dp", isl),
                "cp": (1, 1, 1), "ep": (1, 1, 1)}
    t = _grid_shape(tp * cp, pp, dp, lay.order, "tp", isl)
    out = dict(group_shapes(tp, cp, pp, dp, ep, isl))
    out["tp"] = (tp, t[1] if tp > isl else 1, min(tp, isl))
    return out


@lru_cache(maxsize=256)
def concurrent_system(system: System) -> System:
    """``system`` as a layout's collectives meet it. Every GPU of a node
    runs its own group's collective at the same time (the DP, CP or EP
    groups of all TP ranks at once), so on a node with fewer NIC ports than
    GPUs each group reaches the network through its ranks' share of the
    ports (:attr:`System.gpu_nic`), not the whole port the NCCL model gives
    a group that runs alone (nccl-tests' view). Nodes with a port per GPU
    are unchanged."""
    if system.rails >= system.gpus_per_node:
        return system
    return replace(system, nic=system.gpu_nic, nics_per_node=None,
                   nic_count=None)


def collective_s(cluster: Cluster, collective: str, nbytes: float,
                 shape: tuple[int, int, int]) -> float:
    """NCCL-model time of one collective on a group of ``shape``, beside
    the same collective of every other group of the layout
    (:func:`concurrent_system`)."""
    n, N, k = shape
    if n < 2:
        return 0.0
    return best_for_shape(collective, float(nbytes),
                          concurrent_system(cluster.system), n, N, k).time_s


def params_per_gpu(model, lay: Layout, split: tuple[int, ...]) -> float:
    """Parameters on the GPU of the heaviest pipeline stage: its layers
    (experts split ``ep`` ways) plus the embedding on the first stage or
    the output layer on the last (tied: counted once on one stage), over
    TP."""
    h, V, s = model.hidden, model.vocab, model.seq
    ppl = model.params_per_layer
    if model.experts:
        ppl = (model.attn_params_per_layer + 4 * h
               + model.ffn_params_per_layer / lay.ep)
    emb = (V + s) * h
    if lay.pp > 1:
        heavy = max([split[0] * ppl + emb, split[-1] * ppl + V * h]
                    + [n * ppl for n in split[1:-1]])
    else:
        heavy = split[0] * ppl + emb
    return heavy / lay.tp


def flash_and_fused(lay: Layout, system: System) -> tuple[bool, bool]:
    """FlashAttention and fused gradient accumulation: as the layout says,
    else the software of the GPU's era (on for Hopper and newer)."""
    modern = "A100" not in system.gpu.name
    return (modern if lay.flash_attention is None else lay.flash_attention,
            modern if lay.fused_grad_accumulation is None
            else lay.fused_grad_accumulation)


def context(model, cluster: Cluster, lay: Layout) -> Context:
    """The :class:`Context` of ``model`` on ``cluster`` under ``lay``."""
    lay.check(model, cluster.n_gpus)
    split = stage_layers(model.layers, lay.pp, lay.layer_split)
    flash, fused = flash_and_fused(lay, cluster.system)
    b, s = lay.micro_batch, model.seq // lay.cp
    ffn = model.active_ffn * (lay.capacity_factor if model.experts else 1.0)
    lt = layer_times(cluster.system.gpu, b=b, s=s, h=model.hidden,
                     a=model.heads, ffn=ffn, t=lay.tp,
                     sequence_parallel=lay.sequence_parallel,
                     flash_attention=flash, precision=lay.precision,
                     kv_dim=model.kv_dim,
                     attention_kernel=lay.attention_kernel,
                     kernels=lay.kernels)
    return Context(model, cluster, lay, lay.m, b, s, split, flash, fused, lt,
                   shapes_of(lay, cluster.system),
                   params_per_gpu(model, lay, split))
