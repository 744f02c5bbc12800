"""Step time of a parallel transformer training job (Chapters 1, 6).

The driver, :func:`step`, sums one cost function per parallel axis
(:mod:`warmup_kit.parallelism.costs`): per layer and micro-batch, tensor
parallelism (the layer's kernels and its all-reduces), context parallelism
(attention against the other ranks' keys, the exposed KV exchange) and
expert parallelism (the all-to-alls); per iteration, the pipeline (stages,
bubble, imbalance, point-to-point sends) and data parallelism / ZeRO (the
exposed gradient synchronisation, the optimizer step). The job's layout is
one value, :class:`~warmup_kit.parallelism.layout.Layout`;
:func:`iteration_time` is the keyword form the chapters and labs call.

The mechanisms are those of Narayanan et al. 2021 ("Efficient Large-Scale
Language Model Training on GPU Clusters Using Megatron-LM", PTD-P),
section 3, with the newer axes of :mod:`.costs`.

What a result counts (:class:`IterationResult`): ``mfu`` divides the model
FLOPs (no recomputation) by the time, the GPUs and the dense peak of the
precision used; ``hfu`` counts the recomputed forward too;
``tflops_per_gpu`` is the HFU numerator, as Narayanan et al. 2021 report
it. The FLOP formula is named (:data:`FLOP_FORMULAS`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from warmup_kit.model.hardware import Cluster
from warmup_kit.parallelism.costs.common import (
    context, flash_and_fused, params_per_gpu, shapes_of)
from warmup_kit.parallelism.costs.cp import cp_cost
from warmup_kit.parallelism.costs.dp import dp_cost
from warmup_kit.parallelism.costs.ep import ep_cost
from warmup_kit.parallelism.costs.pp import pp_cost
from warmup_kit.parallelism.costs.tp import tp_cost
from warmup_kit.parallelism.layout import Layout, stage_layers
from warmup_kit.parallelism.memory import (
    GIB, Memory, activations_per_gpu, model_state_bytes)

__all__ = ["Transformer", "IterationResult", "Layout", "step", "memory",
           "iteration_time", "stage_layers", "FLOP_FORMULAS"]

#: The FLOP counts a source may use, by name.
FLOP_FORMULAS = {
    "megatron": "Narayanan et al. 2021 appendix: 72 B s l h^2 (1 + s/6h + "
                "V/16lh) per iteration (96 with full recomputation), "
                "generalised to any FFN width and grouped-query attention; "
                "attention counted as the full s x s square",
    "6N+attn": "6 N per token for the N non-embedding parameters (output "
               "layer included) + 12 l h s for attention (torchtitan, "
               "MosaicML, Llama 3); the full s x s square",
    "6N+attn-causal": "as 6N+attn with the attention term halved (causal "
                      "masking: only the lower triangle is computed)",
}


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

    @cached_property
    def kv_dim(self) -> int:
        """Width of K (and of V): kv_heads * head dim (grouped-query
        attention, Ainslie et al. 2023; = hidden without it)."""
        return self.kv_heads * (self.hidden // self.heads)

    @cached_property
    def attn_params_per_layer(self) -> int:
        h = self.hidden
        return 2 * h * h + 2 * h * self.kv_dim + 2 * h + 2 * self.kv_dim

    @cached_property
    def ffn_params_per_layer(self) -> int:
        """FFN weights and biases: one FFN, or ``experts`` of them plus the
        router (Fedus et al. 2022)."""
        h, f = self.hidden, self.ffn
        one = 2 * h * f + f + h
        return one * self.experts + h * self.experts if self.experts else one

    @cached_property
    def active_ffn(self) -> int:
        """FFN width a token passes through: ``top_k`` experts' worth."""
        return self.ffn * (self.top_k if self.experts else 1)

    @cached_property
    def params_per_layer(self) -> int:
        return (self.attn_params_per_layer + self.ffn_params_per_layer
                + 4 * self.hidden)                         # + layer norms

    @cached_property
    def params(self) -> int:
        """Total parameters (tied input/output embedding)."""
        return (self.layers * self.params_per_layer
                + (self.vocab + self.seq) * self.hidden + 2 * self.hidden)

    def flops_per_sample(self, recompute: str = "full",
                         formula: str = "megatron") -> float:
        """Training FLOPs for one sequence, counting recomputed work.

        ``formula`` is a :data:`FLOP_FORMULAS` key: "megatron" counts every
        GEMM of a layer (Narayanan et al. 2021's 72/96 B s l h^2 form);
        "6N+attn" is ``6 N + 12 l h s`` per token (torchtitan's
        ``get_num_flop_per_token``, MosaicML, Llama 3), "6N+attn-causal"
        halves its attention term. Recomputation adds a forward
        (``2 N + 4 l h s`` per token) under "full", the attention core
        under "selective", and under "op" (torchtitan's selective op
        checkpointing) the matmuls it recomputes: wk, wo and a third of
        the FFN (w3), ``2 h kv + 2 h^2 + 4/3 h f`` per token and layer.
        """
        cache = self.__dict__.setdefault("_flops", {})   # frozen: no setattr
        key = (recompute, formula)
        if key not in cache:
            cache[key] = self._flops_per_sample(recompute, formula)
        return cache[key]

    def _flops_per_sample(self, recompute: str, formula: str) -> float:
        if formula not in FLOP_FORMULAS:
            raise ValueError(f"formula must be one of {sorted(FLOP_FORMULAS)}"
                             f", got {formula!r}")
        h, s, f = self.hidden, self.seq, self.active_ffn
        passes = {"none": 3, "selective": 3, "op": 3, "full": 4}[recompute]
        # torchtitan's op checkpointing: wk, wo, w3 again, per token (the
        # FLOPs of what compute.op_recomputed_s times)
        op = (self.layers * (2 * h * self.kv_dim + 2 * h * h + 4 * h * f / 3)
              if recompute == "op" else 0.0)
        if formula != "megatron":
            n = (self.layers * (self.attn_params_per_layer
                                + self.active_ffn_params_per_layer)
                 + self.vocab * h)
            attn = 4 * self.layers * h * s * (
                0.5 if formula.endswith("causal") else 1.0)   # fwd, per token
            extra = attn if recompute == "selective" else 0.0
            return s * (passes * (2 * n + attn) + extra + op)
        fwd_layer = 2 * s * (2 * h * h + 2 * h * self.kv_dim + 2 * h * f)
        core = 4 * s * s * h                     # QK^T and AV
        extra = core if recompute == "selective" else 0.0
        logits = 6 * s * h * self.vocab
        return (self.layers * (passes * (fwd_layer + core) + extra) + logits
                + s * op)

    @cached_property
    def active_ffn_params_per_layer(self) -> float:
        """FFN weights a token passes through (``top_k`` experts)."""
        one = 2 * self.hidden * self.ffn + self.ffn + self.hidden
        return one * self.top_k if self.experts else one


@dataclass
class IterationResult:
    """One training iteration of a layout.

    Attributes:
        total_s: iteration time.
        parts: seconds per mechanism; they add up to ``total_s``.
        tflops_per_gpu: achieved TFLOP/s per GPU, recomputation included
            (how Narayanan et al. 2021 report them): ``hfu * peak``.
        mfu: model FLOPs utilization: model FLOPs (no recomputation) per
            second per GPU over ``peak_tflops``.
        hfu: hardware FLOPs utilization: the same with the recomputed work
            counted.
        memory: bytes per GPU; ``fits`` says whether it fits in HBM.
        flops_formula: the :data:`FLOP_FORMULAS` key both count with.
        peak_tflops: the dense peak they divide by (of ``precision``).
        tokens_per_s_per_gpu: tokens per second per GPU.
        axes: the :class:`~warmup_kit.parallelism.costs.common.AxisCost`
            of each axis.
    """

    total_s: float
    parts: dict[str, float]
    tflops_per_gpu: float
    mfu: float
    memory: Memory
    config: dict = field(default_factory=dict)
    hfu: float = 0.0
    flops_formula: str = "megatron"
    peak_tflops: float = 0.0
    precision: str = "bf16"
    tokens_per_s_per_gpu: float = 0.0
    axes: dict = field(default_factory=dict, repr=False)

    @property
    def fits(self) -> bool:
        return self.memory.fits

    @property
    def memory_gib(self) -> dict[str, float]:
        return self.memory.as_gib()

    @property
    def model_tflops_per_gpu(self) -> float:
        """Model TFLOP/s per GPU: ``mfu * peak``."""
        return self.mfu * self.peak_tflops


def memory(model: Transformer, cluster: Cluster, layout: Layout) -> Memory:
    """Bytes per GPU of ``layout`` without pricing its time (what the
    layout search asks first): the DP axis's model state and the
    pipeline's activations, as :func:`step` reports them."""
    layout.check(model, cluster.n_gpus)
    split = stage_layers(model.layers, layout.pp, layout.layer_split)
    flash, _ = flash_and_fused(layout, cluster.system)
    w, g, o = layout.shards
    weights, grads, opt = model_state_bytes(
        params_per_gpu=params_per_gpu(model, layout, split),
        dp=layout.shard_group or shapes_of(layout, cluster.system)["dp"][0],
        layers_per_stage=max(split), distributed_optimizer=o,
        shard_grads=g, shard_weights=w)
    acts = activations_per_gpu(
        b=layout.micro_batch, s=model.seq // layout.cp, h=model.hidden,
        a=model.heads, vocab=model.vocab, t=layout.tp, p=layout.pp,
        m=layout.m, layers_per_stage=max(split),
        interleave=layout.interleave, recompute=layout.recompute,
        sequence_parallel=layout.sequence_parallel, flash_attention=flash,
        kv_fraction=model.kv_dim / model.hidden)
    return Memory(weights, grads, opt, acts,
                  cluster.system.gpu.hbm_gb * GIB)


def step(model: Transformer, cluster: Cluster, layout: Layout, *,
         flops_formula: str = "megatron") -> IterationResult:
    """One training iteration of ``model`` on ``cluster`` under ``layout``:
    the per-layer axes (TP, CP, EP) make one layer's time, the pipeline
    turns layers into stages and an iteration, DP/ZeRO adds what is left
    of the gradient synchronisation and the optimizer step."""
    ctx = context(model, cluster, layout)
    lay, m = layout, ctx.m
    tp, cp, ep = tp_cost(ctx), cp_cost(ctx), ep_cost(ctx)
    layer_compute = tp.compute_s + cp.compute_s + ep.compute_s
    per_layer = layer_compute + tp.comm_s + cp.comm_s + ep.comm_s
    pp = pp_cost(ctx, per_layer)
    dp = dp_cost(ctx)
    layers = m * ctx.layers_per_gpu          # layer passes per GPU
    parts = {"compute": layers * layer_compute + pp.compute_s,
             "tp_comm": layers * tp.comm_s, **pp.parts, **dp.parts}
    if lay.cp > 1:            # the new axes' parts appear when they are used
        parts["cp_comm"] = layers * cp.comm_s
    if model.experts and lay.ep > 1:
        parts["ep_comm"] = layers * ep.comm_s
    total = sum(parts.values())
    world = lay.world
    peak = ctx.gpu.peak_flops(lay.precision)
    hw = model.flops_per_sample(lay.recompute, flops_formula) \
        * lay.global_batch / total / world
    mf = model.flops_per_sample("none", flops_formula) \
        * lay.global_batch / total / world
    mem = Memory(dp.memory["weights"], dp.memory["grads"],
                 dp.memory["optimizer"], pp.memory["activations"],
                 ctx.gpu.hbm_gb * GIB)
    cfg = dict(tp=lay.tp, pp=lay.pp, dp=lay.dp, cp=lay.cp, ep=lay.ep,
               zero=lay.zero, micro_batch=lay.micro_batch, m=m,
               layer_split=ctx.split, interleave=lay.interleave,
               recompute=lay.recompute, order=lay.order,
               tp_links="nvlink" if ctx.shapes["tp"][1] == 1 else "net",
               dp_allreduce_s=dp.detail["sync_s"], layout=lay)
    return IterationResult(
        total, parts, hw / 1e12, mf / peak, mem, cfg, hfu=hw / peak,
        flops_formula=flops_formula, peak_tflops=peak / 1e12,
        precision=lay.precision,
        tokens_per_s_per_gpu=lay.global_batch * model.seq / total / world,
        axes={"tp": tp, "cp": cp, "ep": ep, "pp": pp, "dp": dp})


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
                   capacity_factor: float = 1.0,
                   attention_kernel: str = "auto", shard_group: int = 0,
                   cp_attention: str = "ring", kernels: str = "fused",
                   flops_formula: str = "megatron") -> IterationResult:
    """Time of one training iteration of ``model`` on ``cluster``: the
    keyword form of :func:`step` (the fields of
    :class:`~warmup_kit.parallelism.layout.Layout`;
    ``distributed_optimizer=True`` is ZeRO stage 1).

    ``cluster`` needs at least ``tp * cp * pp * dp`` GPUs; rank r runs on
    GPU r. Flash attention and fused gradient accumulation default to on
    for Hopper and newer, off on A100 (the software of each era).
    """
    lay = layout_of(tp=tp, pp=pp, dp=dp, global_batch=global_batch,
                    micro_batch=micro_batch, recompute=recompute,
                    interleave=interleave, overlap_dp=overlap_dp,
                    sequence_parallel=sequence_parallel,
                    flash_attention=flash_attention,
                    distributed_optimizer=distributed_optimizer,
                    fused_grad_accumulation=fused_grad_accumulation,
                    order=order, precision=precision,
                    layer_split=layer_split, cp=cp, zero=zero, ep=ep,
                    capacity_factor=capacity_factor,
                    attention_kernel=attention_kernel,
                    shard_group=shard_group, cp_attention=cp_attention,
                    kernels=kernels)
    return step(model, cluster, lay, flops_formula=flops_formula)


def layout_of(*, distributed_optimizer: bool = False, zero: int = 0,
              order=("dp", "pp", "tp"), **kw) -> Layout:
    """A :class:`Layout` from :func:`iteration_time`'s keywords
    (``distributed_optimizer=True`` is ZeRO stage 1)."""
    if distributed_optimizer:
        zero = max(zero, 1)
    return Layout(zero=zero, order=tuple(order), **kw)

