"""Step time of a 3D-parallel (DP x PP x TP) transformer (Chapters 1, 6).

The mechanisms of Narayanan et al. 2021 ("Efficient Large-Scale Language
Model Training on GPU Clusters Using Megatron-LM", PTD-P), section 3:

* compute: every GEMM and memory-bound kernel of a layer
  (:mod:`warmup_kit.parallelism.compute`), forward once, backward twice,
  plus the recomputed forward (full or selective);
* tensor parallelism: 2 all-reduces of ``b s h`` activations per layer in the
  forward, 2 in the backward, 2 more when the forward is recomputed (section
  2.3), timed on the TP group's actual links by :mod:`warmup_kit.model.nccl`
  and not overlapped;
* pipeline: 1F1B, bubble ``(p - 1) / (m v)`` of a stage's work (section
  2.2), the slowest stage (the one with the output layer) paces the rest,
  and point-to-point sends of ``b s h / t`` per TP rank (scatter/gather
  optimization, section 4.1) per micro-batch and direction;
* data parallelism: the gradient all-reduce on the DP group's links,
  overlapped with the last micro-batch's backward pass or not;
* the optimizer step, memory-bound.

FLOP/s are counted as in the paper (section 5.1, appendix): with full
recomputation ``96 B s l h^2 (1 + s/6h + V/16lh)`` per iteration.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from warmup_kit.model.hardware import Cluster
from warmup_kit.model.nccl import best_for_shape
from warmup_kit.parallelism.compute import (
    BYTES, layer_times, logits_fwd_s, stream_s)
from warmup_kit.parallelism.memory import GIB, Memory, memory_per_gpu
from warmup_kit.model.topology import Layout, link_of

ADAM_BYTES_PER_PARAM = 32   # read fp32 w, m, v, grad; write w, m, v; bf16 w


@dataclass(frozen=True)
class Transformer:
    """A GPT-style decoder. ``ffn`` defaults to ``4 * hidden``.

    Attributes:
        layers, hidden, heads, seq, vocab: l, h, a, s, V in the paper.
    """

    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    ffn: int | None = None

    def __post_init__(self) -> None:
        if self.ffn is None:
            object.__setattr__(self, "ffn", 4 * self.hidden)
        if self.hidden % self.heads:
            raise ValueError("hidden must be a multiple of heads")

    @property
    def params_per_layer(self) -> int:
        h, f = self.hidden, self.ffn
        return 4 * h * h + 2 * h * f + 5 * h + f + 4 * h  # weights, biases, LN

    @property
    def params(self) -> int:
        """Total parameters (tied input/output embedding)."""
        return (self.layers * self.params_per_layer
                + (self.vocab + self.seq) * self.hidden + 2 * self.hidden)

    def flops_per_sample(self, recompute: str = "full") -> float:
        """Training FLOPs for one sequence, counting recomputed work."""
        h, s, f = self.hidden, self.seq, self.ffn
        fwd_layer = 2 * s * (4 * h * h + 2 * h * f)
        core = 4 * s * s * h                     # QK^T and AV
        passes = {"none": 3, "selective": 3, "full": 4}[recompute]
        extra = core if recompute == "selective" else 0.0
        logits = 6 * s * h * self.vocab
        return self.layers * (passes * (fwd_layer + core) + extra) + logits


@dataclass
class IterationResult:
    """One training iteration of a layout.

    Attributes:
        total_s: iteration time.
        parts: seconds per mechanism; they add up to ``total_s``.
        tflops_per_gpu: achieved TFLOP/s per GPU, recomputation included
            (how Narayanan et al. 2021 report them).
        mfu: model FLOPs utilization (no recomputation counted).
        memory: bytes per GPU; ``fits`` says whether it fits in HBM.
    """

    total_s: float
    parts: dict[str, float]
    tflops_per_gpu: float
    mfu: float
    memory: Memory
    config: dict = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.memory.fits

    @property
    def memory_gib(self) -> dict[str, float]:
        return self.memory.as_gib()


@lru_cache(maxsize=4096)
def _group_shape(tp: int, pp: int, dp: int, order: tuple[str, ...],
                 axis: str, island: int) -> tuple[int, int, int]:
    """(n, islands, ranks per island) of the worst ``axis`` group."""
    lay = Layout(tp, pp, dp, order)
    k = ("dp", "pp", "tp").index(axis)
    g = np.moveaxis(lay.grid, k, -1).reshape(-1, lay.grid.shape[k]) // island
    g = np.sort(g, axis=1)
    N = int((np.diff(g, axis=1) != 0).sum(axis=1).max()) + 1
    n = g.shape[1]
    return n, N, max(1, n // N)


@lru_cache(maxsize=4096)
def _pp_link(tp: int, pp: int, dp: int, order: tuple[str, ...],
             gpn: int, domain: int, has_nvlink: bool) -> str:
    """Slowest link between consecutive pipeline stages."""
    if pp == 1:
        return "nvlink"
    lay = Layout(tp, pp, dp, order)
    g = np.moveaxis(lay.grid, 1, -1).reshape(-1, pp)
    a, b = g[:, :-1].ravel(), g[:, 1:].ravel()
    if has_nvlink and (a // domain == b // domain).all():
        return "nvlink"
    return "pcie" if (a // gpn == b // gpn).all() else "net"


def _allreduce_s(cluster: Cluster, nbytes: float, shape) -> float:
    n, N, k = shape
    return best_for_shape("allreduce", float(nbytes), cluster.system,
                          n, N, k).time_s


def iteration_time(model: Transformer, cluster: Cluster, *, tp: int, pp: int,
                   dp: int, global_batch: int, micro_batch: int,
                   recompute: str = "full", interleave: int = 1,
                   overlap_dp: bool = True, sequence_parallel: bool = False,
                   flash_attention: bool | None = None,
                   distributed_optimizer: bool = False,
                   fused_grad_accumulation: bool | None = None,
                   order: tuple[str, ...] = ("dp", "pp", "tp"),
                   precision: str = "bf16") -> IterationResult:
    """Time of one training iteration of ``model`` on ``cluster``.

    Args:
        model: the transformer.
        cluster: needs at least ``tp * pp * dp`` GPUs; rank r runs on GPU r.
        tp, pp, dp: parallel sizes; ``order`` places them (see
            :class:`~warmup_kit.model.topology.Layout`).
        global_batch, micro_batch: sequences per iteration and per
            micro-batch; ``m = global_batch / (dp * micro_batch)``.
        recompute: "full", "selective" or "none".
        interleave: virtual stages per GPU (interleaved 1F1B, section 2.2.2).
        overlap_dp: overlap the gradient all-reduce with the last backward.
        flash_attention: default: on for Hopper and newer, off on A100 (the
            kernels of the 2021 measurements).
        fused_grad_accumulation: the weight-gradient GEMM accumulates
            straight into the fp32 gradient buffer (Megatron-LM since 2022).
            Off, every micro-batch's backward adds its bf16 gradients into
            the fp32 buffer: a memory-bound pass over the stage's
            parameters (10 B each) per micro-batch. Default: off on A100,
            on for newer systems.

    Returns:
        :class:`IterationResult`.
    """
    world = tp * pp * dp
    if world > cluster.n_gpus:
        raise ValueError(f"tp*pp*dp = {world} > {cluster.n_gpus} GPUs")
    if global_batch % (dp * micro_batch):
        raise ValueError("global_batch must be a multiple of dp*micro_batch")
    if model.layers % (pp * interleave):
        raise ValueError("layers must be a multiple of pp * interleave")
    if model.heads % tp or model.ffn % tp:
        raise ValueError("heads and ffn must be multiples of tp")
    sysm, gpu = cluster.system, cluster.system.gpu
    modern = "A100" not in gpu.name       # the software of each era
    if flash_attention is None:
        flash_attention = modern
    if fused_grad_accumulation is None:
        fused_grad_accumulation = modern
    m = global_batch // (dp * micro_batch)
    b, s, h, a, V = (micro_batch, model.seq, model.hidden, model.heads,
                     model.vocab)
    lps = model.layers // pp
    lt = layer_times(gpu, b=b, s=s, h=h, a=a, ffn=model.ffn, t=tp,
                     sequence_parallel=sequence_parallel,
                     flash_attention=flash_attention, precision=precision)
    recompute_fwd = {"full": lt.fwd_s, "selective": lt.attn_core_fwd_s,
                     "none": 0.0}[recompute]
    layer_comp = 3 * lt.fwd_s + recompute_fwd
    if not fused_grad_accumulation:
        layer_comp += stream_s(gpu, 10 * model.params_per_layer / tp)
    island = sysm.nvlink_domain if sysm.nvlink else sysm.gpus_per_node
    tp_shape = _group_shape(tp, pp, dp, order, "tp", island)
    n_ar = 6 if recompute == "full" else 4
    layer_tp = n_ar * _allreduce_s(cluster, b * s * h * BYTES, tp_shape)
    logits = 3 * logits_fwd_s(gpu, b=b, s=s, h=h, vocab=V, t=tp,
                              precision=precision)
    # p2p: each TP rank sends b s h / t each way per micro-batch and chunk
    p2p = 0.0
    if pp > 1:
        kind = _pp_link(tp, pp, dp, order, sysm.gpus_per_node,
                        sysm.nvlink_domain, sysm.nvlink is not None)
        link = link_of(cluster, kind)
        p2p = 2 * interleave * (link.latency_s + b * s * h * BYTES / tp
                                / link.bytes_per_s)
    stage_comp = lps * layer_comp
    stage_tp = lps * layer_tp
    avg = stage_comp + stage_tp + p2p + logits / pp
    slowest = stage_comp + stage_tp + p2p + logits
    bubble = (pp - 1) * avg / interleave
    imbalance = m * (slowest - avg)
    # data parallel: gradients of the first stage (embedding included)
    params_gpu = (lps * model.params_per_layer
                  + (V + s) * h) / tp
    dp_shape = _group_shape(tp, pp, dp, order, "dp", island)
    dp_s = _allreduce_s(cluster, 4 * params_gpu, dp_shape) if dp > 1 else 0.0
    window = lps * 2 * lt.fwd_s if overlap_dp else 0.0
    dp_exposed = max(0.0, dp_s - window)
    opt_s = stream_s(gpu, ADAM_BYTES_PER_PARAM * params_gpu
                     / (dp if distributed_optimizer else 1))
    parts = {"compute": m * (stage_comp + logits / pp),
             "tp_comm": m * stage_tp, "pp_p2p": m * p2p,
             "pp_bubble": bubble, "pp_imbalance": imbalance,
             "dp_exposed": dp_exposed, "optimizer": opt_s}
    total = sum(parts.values())
    hw_flops = model.flops_per_sample(recompute) * global_batch
    model_flops = model.flops_per_sample("none") * global_batch
    mem = memory_per_gpu(
        params_per_gpu=params_gpu, capacity_bytes=gpu.hbm_gb * GIB,
        b=b, s=s, h=h, a=a, vocab=V, t=tp, p=pp, m=m, layers_per_stage=lps,
        interleave=interleave, recompute=recompute,
        sequence_parallel=sequence_parallel, flash_attention=flash_attention,
        dp=dp, distributed_optimizer=distributed_optimizer)
    cfg = dict(tp=tp, pp=pp, dp=dp, micro_batch=micro_batch, m=m,
               interleave=interleave, recompute=recompute, order=order,
               tp_links="nvlink" if tp_shape[1] == 1 else "net",
               dp_allreduce_s=dp_s)
    return IterationResult(
        total, parts, hw_flops / total / world / 1e12,
        model_flops / total / world / gpu.peak_flops(precision), mem, cfg)

