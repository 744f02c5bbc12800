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
    kv_heads: int | None = None
    experts: int = 0
    top_k: int = 1

    def __post_init__(self) -> None:
        if self.ffn is None:
            object.__setattr__(self, "ffn", 4 * self.hidden)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.hidden % self.heads:
            raise ValueError("hidden must be a multiple of heads")
        if self.kv_heads < 1 or self.heads % self.kv_heads:
            raise ValueError("heads must be a multiple of kv_heads")
        if self.experts and not 1 <= self.top_k <= self.experts:
            raise ValueError("top_k must be in 1..experts")

    @property
    def kv_dim(self) -> int:
        """Width of K (and of V): kv_heads * head dim (grouped-query
        attention, Ainslie et al. 2023; = hidden without it)."""
        return self.kv_heads * (self.hidden // self.heads)

    @property
    def attn_params_per_layer(self) -> int:
        h = self.hidden
        return 2 * h * h + 2 * h * self.kv_dim + 2 * h + 2 * self.kv_dim

    @property
    def ffn_params_per_layer(self) -> int:
        """FFN weights and biases: one FFN, or ``experts`` of them plus the
        router (Fedus et al. 2022)."""
        h, f = self.hidden, self.ffn
        one = 2 * h * f + f + h
        return one * self.experts + h * self.experts if self.experts else one

    @property
    def active_ffn(self) -> int:
        """FFN width a token passes through: ``top_k`` experts' worth."""
        return self.ffn * (self.top_k if self.experts else 1)

    @property
    def params_per_layer(self) -> int:
        return (self.attn_params_per_layer + self.ffn_params_per_layer
                + 4 * self.hidden)                         # + layer norms

    @property
    def params(self) -> int:
        """Total parameters (tied input/output embedding)."""
        return (self.layers * self.params_per_layer
                + (self.vocab + self.seq) * self.hidden + 2 * self.hidden)

    def flops_per_sample(self, recompute: str = "full") -> float:
        """Training FLOPs for one sequence, counting recomputed work."""
        h, s, f = self.hidden, self.seq, self.active_ffn
        fwd_layer = 2 * s * (2 * h * h + 2 * h * self.kv_dim + 2 * h * f)
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


def stage_layers(layers: int, pp: int,
                 split: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Layers of each pipeline stage.

    ``split`` (any positive counts adding up to ``layers``) is taken as
    given. By default the layers are split as evenly as possible, and when
    they do not divide, the first and last stages (which also hold the
    embedding and the output layer) get the fewer: 126 layers over 16
    stages is 7, 8 x 14, 7.
    """
    if split is not None:
        split = tuple(int(x) for x in split)
        if len(split) != pp or min(split) < 1 or sum(split) != layers:
            raise ValueError(f"layer_split must be {pp} positive counts "
                             f"adding up to {layers}, got {split}")
        return split
    if layers < pp:
        raise ValueError(f"{layers} layers cannot fill {pp} stages")
    base, extra = divmod(layers, pp)
    if not extra:
        return (base,) * pp
    # hand out base + 1 to the middle stages first
    out = [base] * pp
    order = sorted(range(pp), key=lambda i: (i in (0, pp - 1),
                                             abs(i - (pp - 1) / 2)))
    for i in order[:extra]:
        out[i] += 1
    return tuple(out)


def iteration_time(model: Transformer, cluster: Cluster, *, tp: int, pp: int,
                   dp: int, global_batch: int, micro_batch: int,
                   recompute: str = "full", interleave: int = 1,
                   overlap_dp: bool = True, sequence_parallel: bool = False,
                   flash_attention: bool | None = None,
                   distributed_optimizer: bool = False,
                   fused_grad_accumulation: bool | None = None,
                   order: tuple[str, ...] = ("dp", "pp", "tp"),
                   precision: str = "bf16",
                   layer_split: tuple[int, ...] | None = None, cp: int = 1,
                   zero: int = 0, ep: int = 1,
                   capacity_factor: float = 1.0) -> IterationResult:
    """Time of one training iteration of ``model`` on ``cluster``.

    Args:
        model: the transformer (grouped-query attention through
            ``kv_heads``, mixture of experts through ``experts``/``top_k``).
        cluster: needs at least ``tp * cp * pp * dp`` GPUs; rank r runs on
            GPU r.
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
        layer_split: layers per pipeline stage (default: :func:`stage_layers`;
            any split is accepted); the slowest stage paces the pipeline.
        cp: context-parallel size (ring attention, :mod:`.axes`); needs the
            default ``order``.
        zero: ZeRO stage 0-3 over the DP (x CP) group; 3 is FSDP.
            ``distributed_optimizer=True`` is stage 1.
        ep: expert-parallel size (MoE models; ``ep`` divides ``dp`` and
            ``model.experts``).
        capacity_factor: MoE expert capacity (tokens padded to it).

    Returns:
        :class:`IterationResult`.
    """
    from warmup_kit.parallelism.axes import (
        ZERO_SHARDS, collective_s, group_shapes, moe_all_to_all_s,
        ring_attention_s)
    world = tp * cp * pp * dp
    if world > cluster.n_gpus:
        raise ValueError(f"tp*cp*pp*dp = {world} > {cluster.n_gpus} GPUs")
    if global_batch % (dp * micro_batch):
        raise ValueError("global_batch must be a multiple of dp*micro_batch")
    if model.layers < pp * interleave:
        raise ValueError("fewer layers than pp * interleave model chunks")
    if model.heads % tp or model.ffn % tp:
        raise ValueError("heads and ffn must be multiples of tp")
    if cp < 1 or model.seq % cp:
        raise ValueError("seq must be a multiple of cp")
    if cp > 1 and tuple(order) != ("dp", "pp", "tp"):
        raise ValueError("cp > 1 needs the default order")
    if zero not in ZERO_SHARDS:
        raise ValueError("zero must be 0, 1, 2 or 3")
    if ep < 1 or dp % ep or (ep > 1 and (not model.experts
                                         or model.experts % ep)):
        raise ValueError("ep must divide dp and the number of experts")
    if distributed_optimizer:
        zero = max(zero, 1)
    split = stage_layers(model.layers, pp, layer_split)
    sysm, gpu = cluster.system, cluster.system.gpu
    modern = "A100" not in gpu.name       # the software of each era
    if flash_attention is None:
        flash_attention = modern
    if fused_grad_accumulation is None:
        fused_grad_accumulation = modern
    m = global_batch // (dp * micro_batch)
    b, s, h, a, V = (micro_batch, model.seq, model.hidden, model.heads,
                     model.vocab)
    s_loc = s // cp
    moe = bool(model.experts)
    ffn_tokens = model.active_ffn * (capacity_factor if moe else 1.0)
    lt = layer_times(gpu, b=b, s=s_loc, h=h, a=a, ffn=ffn_tokens, t=tp,
                     sequence_parallel=sequence_parallel,
                     flash_attention=flash_attention, precision=precision,
                     kv_dim=model.kv_dim)
    # ring attention: each rank's queries meet all s keys, not s / cp
    attn_core = lt.attn_core_fwd_s * cp
    fwd = lt.fwd_s + attn_core - lt.attn_core_fwd_s
    recompute_fwd = {"full": fwd, "selective": attn_core,
                     "none": 0.0}[recompute]
    passes = 3 + (recompute == "full")
    layer_comp = 3 * fwd + recompute_fwd
    if not fused_grad_accumulation:
        layer_comp += stream_s(gpu, 10 * model.params_per_layer / tp
                               / (ep if moe else 1))
    island = sysm.nvlink_domain if sysm.nvlink else sysm.gpus_per_node
    if cp == 1 and ep == 1:
        tp_shape = _group_shape(tp, pp, dp, order, "tp", island)
        dp_shape = _group_shape(tp, pp, dp, order, "dp", island)
        shapes = {"cp": (1, 1, 1), "ep": (1, 1, 1), "dp": dp_shape}
    else:
        tp_shape = _group_shape(tp * cp, pp, dp, order, "tp", island)
        tp_shape = (tp, tp_shape[1] if tp > island else 1,
                    min(tp, island))
        shapes = group_shapes(tp, cp, pp, dp, ep, island)
    n_ar = 6 if recompute == "full" else 4
    layer_tp = n_ar * _allreduce_s(cluster, b * s_loc * h * BYTES, tp_shape)
    # context parallelism: KV exchange per pass, hidden behind attention
    cp_pass = ring_attention_s(cluster, b=b, s_local=s_loc, kv_dim=model.kv_dim,
                               t=tp, cp=cp, bytes_per=BYTES,
                               shape=shapes["cp"])
    layer_cp = passes * max(0.0, cp_pass - attn_core)
    layer_moe = 0.0
    if moe and ep > 1:
        layer_moe = passes * moe_all_to_all_s(
            cluster, tokens=b * s_loc, hidden=h, top_k=model.top_k,
            capacity_factor=capacity_factor, bytes_per=BYTES,
            shape=shapes["ep"])
    logits = 3 * logits_fwd_s(gpu, b=b, s=s_loc, h=h, vocab=V, t=tp,
                              precision=precision)
    # p2p: each TP rank sends b s h / t each way per micro-batch and chunk
    p2p = 0.0
    if pp > 1:
        kind = _pp_link(tp * cp, pp, dp, order, sysm.gpus_per_node,
                        sysm.nvlink_domain, sysm.nvlink is not None)
        link = link_of(cluster, kind)
        p2p = 2 * interleave * (link.latency_s + b * s_loc * h * BYTES / tp
                                / link.bytes_per_s)
    per_layer = layer_comp + layer_tp + layer_cp + layer_moe
    stages = [n * per_layer + p2p + (logits if i == pp - 1 else 0.0)
              for i, n in enumerate(split)]
    avg, slowest = sum(stages) / pp, max(stages)
    bubble = (pp - 1) * avg / interleave
    imbalance = m * (slowest - avg)
    # weights per GPU: the heaviest stage (embedding on the first, output
    # layer on the last; tied, so counted once on one-stage pipelines)
    ppl = model.params_per_layer
    if moe:
        ppl = (model.attn_params_per_layer + 4 * h
               + model.ffn_params_per_layer / ep)
    emb = (V + s) * h
    heavy = max([split[0] * ppl + emb, split[-1] * ppl + V * h]
                + [n * ppl for n in split[1:-1]]) if pp > 1 \
        else split[0] * ppl + emb
    params_gpu = heavy / tp
    shard_w, shard_g, shard_o = ZERO_SHARDS[zero]
    dpn = shapes["dp"][0]                       # dp * cp ranks share weights
    if dpn > 1 and zero == 0:     # all-reduce of the fp32 gradients
        dp_s = _allreduce_s(cluster, 4 * params_gpu, shapes["dp"])
    elif dpn > 1:                 # reduce-scatter them, all-gather bf16
        dp_s = (collective_s(cluster, "reduce_scatter", 4 * params_gpu,
                             shapes["dp"])
                + (2 if zero == 3 else 1) * collective_s(
                    cluster, "all_gather", 2 * params_gpu, shapes["dp"]))
    else:
        dp_s = 0.0
    lps = split[0]
    window = lps * 2 * fwd if overlap_dp else 0.0
    if zero == 3:                # the forward gather hides behind forward
        window += lps * fwd if overlap_dp else 0.0
    dp_exposed = max(0.0, dp_s - window)
    opt_s = stream_s(gpu, ADAM_BYTES_PER_PARAM * params_gpu
                     / (dpn if shard_o else 1))
    parts = {"compute": m * (sum(split) / pp * layer_comp + logits / pp),
             "tp_comm": m * sum(split) / pp * layer_tp,
             "pp_p2p": m * p2p,
             "pp_bubble": bubble, "pp_imbalance": imbalance,
             "dp_exposed": dp_exposed, "optimizer": opt_s}
    if cp > 1:           # the new axes' parts appear when they are used
        parts["cp_comm"] = m * sum(split) / pp * layer_cp
    if moe and ep > 1:
        parts["ep_comm"] = m * sum(split) / pp * layer_moe
    total = sum(parts.values())
    hw_flops = model.flops_per_sample(recompute) * global_batch
    model_flops = model.flops_per_sample("none") * global_batch
    mem = memory_per_gpu(
        params_per_gpu=params_gpu, capacity_bytes=gpu.hbm_gb * GIB,
        b=b, s=s_loc, h=h, a=a, vocab=V, t=tp, p=pp, m=m,
        layers_per_stage=max(split), interleave=interleave,
        recompute=recompute, sequence_parallel=sequence_parallel,
        flash_attention=flash_attention, dp=dpn,
        distributed_optimizer=shard_o, shard_grads=shard_g,
        shard_weights=shard_w, kv_fraction=model.kv_dim / h)
    cfg = dict(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, zero=zero,
               micro_batch=micro_batch, m=m, layer_split=split,
               interleave=interleave, recompute=recompute, order=order,
               tp_links="nvlink" if tp_shape[1] == 1 else "net",
               dp_allreduce_s=dp_s)
    return IterationResult(
        total, parts, hw_flops / total / world / 1e12,
        model_flops / total / world / gpu.peak_flops(precision), mem, cfg)
