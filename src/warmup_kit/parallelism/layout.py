"""A training job's parallel layout as one value (book, Chapters 1 and 6).

:class:`Layout` holds what a training launcher's flags say: the five
parallel sizes (TP, CP, PP, DP, EP), the ZeRO stage, the batch split into
micro-batches, the pipeline schedule (interleaving, layer split), and the
kernel choices (recomputation, sequence parallelism, FlashAttention,
precision). The step model (:func:`warmup_kit.parallelism.step.step`) takes
a model, a cluster and a layout; every axis's cost function reads only the
fields it needs.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

RECOMPUTE = ("full", "selective", "op", "none")
#: fused attention kernels the step model prices
#: (:func:`warmup_kit.parallelism.compute.attention_efficiency`)
ATTENTION_KERNELS = ("auto", "fa2", "fa3", "triton")
#: ZeRO stage -> (weights, gradients, optimizer state) sharded over DP
ZERO_SHARDS = {0: (False, False, False), 1: (False, False, True),
               2: (False, True, True), 3: (True, True, True)}
DEFAULT_ORDER = ("dp", "pp", "tp")


@dataclass(frozen=True)
class Layout:
    """How one training job is split over GPUs.

    Attributes:
        tp, pp, dp: tensor-, pipeline- and data-parallel sizes.
        global_batch, micro_batch: sequences per iteration and per
            micro-batch; ``m = global_batch / (dp * micro_batch)``.
        cp: context-parallel size (the sequence split ``cp`` ways).
        ep: expert-parallel size (divides ``dp`` and the experts).
        zero: ZeRO stage 0-3 over the DP (x CP) group; 3 is FSDP.
        interleave: virtual pipeline stages per GPU (interleaved 1F1B).
        recompute: "full", "selective" (Korthikanti et al. 2022: the
            attention core), "op" (torchtitan's selective op checkpointing:
            every second matmul of a block and its elementwise ops; the
            attention saved) or "none".
        overlap_dp: overlap the gradient synchronisation with the backward.
        sequence_parallel: norms and dropouts split over the TP group.
        flash_attention, fused_grad_accumulation: ``None`` = the default of
            the GPU's era (on for Hopper and newer, off on A100).
        order: rank-grid order of (dp, pp, tp), outermost first.
        precision: "bf16" or "fp8" for the linear layers' GEMMs.
        layer_split: layers per pipeline stage (``None``: as even as
            possible, the first and last stages lighter).
        capacity_factor: MoE expert capacity (tokens padded to it).
        kernels: "fused" or "eager-llama" (elementwise kernels as eager
            PyTorch runs a Llama block).
        cp_attention: "ring" (ring attention, overlapped) or "allgather"
            (all-gather K/V first, as Llama 3 does).
        shard_group: HSDP (FSDP's hybrid sharding, Zhao et al. 2023,
            section 3.2.2): ZeRO-3 shards over groups of this many
            consecutive DP ranks and replicates across the groups
            (0: shard over the whole DP group).
        attention_kernel: "auto", "fa2", "fa3" or "triton": the fused
            attention's efficiency (:func:`warmup_kit.parallelism.compute.
            attention_efficiency`).
    """

    tp: int
    pp: int
    dp: int
    global_batch: int
    micro_batch: int = 1
    cp: int = 1
    ep: int = 1
    zero: int = 0
    interleave: int = 1
    recompute: str = "full"
    overlap_dp: bool = True
    sequence_parallel: bool = False
    flash_attention: bool | None = None
    fused_grad_accumulation: bool | None = None
    order: tuple[str, ...] = DEFAULT_ORDER
    precision: str = "bf16"
    layer_split: tuple[int, ...] | None = None
    capacity_factor: float = 1.0
    attention_kernel: str = "auto"
    shard_group: int = 0
    cp_attention: str = "ring"
    kernels: str = "fused"

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "cp", "ep", "micro_batch",
                     "interleave", "global_batch"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if self.global_batch % (self.dp * self.micro_batch):
            raise ValueError("global_batch must be a multiple of "
                             "dp*micro_batch")
        if self.zero not in ZERO_SHARDS:
            raise ValueError("zero must be 0, 1, 2 or 3")
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"recompute must be one of {RECOMPUTE}, got "
                             f"{self.recompute!r}")
        object.__setattr__(self, "order", tuple(self.order))
        if self.layer_split is not None:
            object.__setattr__(self, "layer_split",
                               tuple(int(x) for x in self.layer_split))
        if self.cp > 1 and self.order != DEFAULT_ORDER:
            raise ValueError("cp > 1 needs the default order")
        if self.cp_attention not in ("ring", "allgather"):
            raise ValueError("cp_attention must be 'ring' or 'allgather'")
        if self.attention_kernel not in ATTENTION_KERNELS:
            raise ValueError(f"attention_kernel must be one of "
                             f"{ATTENTION_KERNELS}, got "
                             f"{self.attention_kernel!r}")
        if self.shard_group and (self.zero != 3 or self.dp % self.shard_group
                                 or self.cp > 1
                                 or self.order != DEFAULT_ORDER):
            raise ValueError("shard_group (HSDP) needs zero=3, cp=1, the "
                             "default order, and must divide dp")
        if self.dp % self.ep:
            raise ValueError("ep must divide dp and the number of experts")

    @property
    def world(self) -> int:
        """GPUs the job uses: ``tp * cp * pp * dp``."""
        return self.tp * self.cp * self.pp * self.dp

    @property
    def m(self) -> int:
        """Micro-batches per iteration per pipeline."""
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def shards(self) -> tuple[bool, bool, bool]:
        """(weights, gradients, optimizer) sharded over DP at this stage."""
        return ZERO_SHARDS[self.zero]

    def check(self, model, n_gpus: int) -> None:
        """Raise ``ValueError`` if the layout cannot run ``model`` on
        ``n_gpus`` GPUs."""
        if self.world > n_gpus:
            raise ValueError(f"tp*cp*pp*dp = {self.world} > {n_gpus} GPUs")
        if model.layers < self.pp * self.interleave:
            raise ValueError("fewer layers than pp * interleave model chunks")
        if model.heads % self.tp or model.ffn % self.tp:
            raise ValueError("heads and ffn must be multiples of tp")
        if model.seq % self.cp:
            raise ValueError("seq must be a multiple of cp")
        if self.ep > 1 and (not model.experts or model.experts % self.ep):
            raise ValueError("ep must divide dp and the number of experts")


def stage_layers(layers: int, pp: int,
                 split: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Layers of each pipeline stage.

    ``split`` (any positive counts adding up to ``layers``) is taken as
    given. By default the layers are split as evenly as possible, and when
    they do not divide, the first and last stages (which also hold the
    embedding and the output layer) get the fewer: 126 layers over 16
    stages is 7, 8 x 14, 7.
    """
    return _stage_layers(layers, pp, None if split is None
                         else tuple(int(x) for x in split))


@lru_cache(maxsize=4096)
def _stage_layers(layers: int, pp: int,
                  split: tuple[int, ...] | None) -> tuple[int, ...]:
    if split is not None:
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
