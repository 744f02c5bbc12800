"""Memory per GPU of a 3D-parallel transformer (book, Chapter 1).

* Weights, gradients, optimizer state: mixed-precision Adam keeps bf16
  weights (2 B/param), fp32 gradients (4 B, Megatron's ``main_grad``) and
  fp32 master weights + two moments (12 B): 18 B per parameter
  (Rajbhandari et al. 2019, section 3.1 count 16 with fp16 gradients).
  The distributed optimizer (ZeRO-1) shards the 12 B over DP.
* Activations per layer and micro-batch (Korthikanti et al. 2022,
  section 4, table 2): ``s b h (10 + 24/t + 5 a s / (h t))`` bytes with TP,
  ``s b h / t (34 + 5 a s / h)`` with sequence parallelism, the ``5as/h``
  term dropped by selective recomputation or FlashAttention; full
  recomputation keeps only each layer's input, ``2 s b h`` (``/t`` with SP),
  plus one layer's full set while it is recomputed. Under 1F1B the first
  stage holds ``min(p, m)`` micro-batches in flight (times
  ``1 + (p-1)/(p v)`` when interleaved).
"""
from __future__ import annotations

from dataclasses import dataclass

from warmup_kit.parallelism.layout import RECOMPUTE

GIB = 2 ** 30
RESERVED_BYTES = 3 * GIB   # CUDA context, NCCL buffers, cuBLAS workspace,
#                            allocator fragmentation


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU on the most loaded pipeline stage."""

    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    capacity_bytes: float

    @property
    def total_bytes(self) -> float:
        return (self.weights_bytes + self.grads_bytes + self.optimizer_bytes
                + self.activations_bytes + RESERVED_BYTES)

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    def as_gib(self) -> dict[str, float]:
        """The parts in GiB, for tables."""
        return {"weights": self.weights_bytes / GIB,
                "grads": self.grads_bytes / GIB,
                "optimizer": self.optimizer_bytes / GIB,
                "activations": self.activations_bytes / GIB,
                "reserved": RESERVED_BYTES / GIB,
                "total": self.total_bytes / GIB,
                "capacity": self.capacity_bytes / GIB}


def activation_bytes_per_layer(*, b: int, s: int, h: int, a: int, t: int,
                               recompute: str, sequence_parallel: bool,
                               flash_attention: bool) -> float:
    """Activations one layer keeps for one micro-batch (Korthikanti 2022)."""
    sbh = s * b * h
    attn = 0.0 if flash_attention else 5 * a * s / h
    if recompute == "full":
        return 2 * sbh / (t if sequence_parallel else 1)
    if recompute == "op":
        # torchtitan's op checkpointing keeps the outputs of the matmuls it
        # does not recompute (Q and V projections, w1: 4 h wide in this
        # table's convention) and of the attention kernel, split over t,
        # and the block's input and output
        return sbh * (2 * (1 + 1 + 1 + 4) / t
                      + 2 * 2 / (t if sequence_parallel else 1))
    if recompute == "selective":
        attn = 0.0
    elif recompute != "none":
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got "
                         f"{recompute!r}")
    if sequence_parallel:
        return sbh / t * (34 + attn)
    return sbh * (10 + 24 / t + attn / t)


def activations_per_gpu(*, b: int, s: int, h: int, a: int, vocab: int,
                        t: int, p: int, m: int, layers_per_stage: int,
                        interleave: int, recompute: str,
                        sequence_parallel: bool, flash_attention: bool,
                        kv_fraction: float = 1.0) -> float:
    """Activation bytes the first pipeline stage holds at its peak: the
    layers' stored activations for every micro-batch in flight under 1F1B,
    one layer rebuilt in full under full recomputation, and the fp32 logits
    on a one-stage pipeline. ``kv_fraction`` (K/V width over hidden,
    grouped-query attention) shrinks the K and V part of the activations:
    4 of the 34 bytes per token and hidden unit."""
    per_layer = activation_bytes_per_layer(
        b=b, s=s, h=h, a=a, t=t, recompute=recompute,
        sequence_parallel=sequence_parallel, flash_attention=flash_attention)
    in_flight = min(p, m)
    if interleave > 1 and p > 1:
        in_flight *= 1 + (p - 1) / (p * interleave)
    if kv_fraction != 1.0 and recompute != "full":
        kv_bytes = 2 if recompute == "op" else 4     # V only, or K and V
        per_layer -= kv_bytes * s * b * h / t * (1 - kv_fraction)
    acts = per_layer * layers_per_stage * in_flight
    if recompute == "full":       # one layer rebuilt in full during backward
        acts += activation_bytes_per_layer(
            b=b, s=s, h=h, a=a, t=t, recompute="none",
            sequence_parallel=sequence_parallel,
            flash_attention=flash_attention)
    if p == 1:                    # the same GPU also holds the logits
        acts += 4 * s * b * vocab / t
    return acts


def model_state_bytes(*, params_per_gpu: float, dp: int,
                      layers_per_stage: int,
                      distributed_optimizer: bool = False,
                      shard_grads: bool = False, shard_weights: bool = False
                      ) -> tuple[float, float, float]:
    """(weights, gradients, optimizer state) bytes per GPU: 2 + 4 + 12 per
    parameter, ZeRO stages 1, 2 and 3 sharding the optimizer state, the
    gradients and the weights over ``dp`` ranks (stage 3 also holds one
    layer's gathered weights, twice for prefetch)."""
    opt = 12 * params_per_gpu / (dp if distributed_optimizer else 1)
    grads = 4 * params_per_gpu / (dp if shard_grads else 1)
    weights = 2 * params_per_gpu
    if shard_weights:
        weights = weights / dp + 2 * 2 * params_per_gpu / layers_per_stage
    return weights, grads, opt


def memory_per_gpu(*, params_per_gpu: float, capacity_bytes: float,
                   b: int, s: int, h: int, a: int, vocab: int, t: int, p: int,
                   m: int, layers_per_stage: int, interleave: int,
                   recompute: str, sequence_parallel: bool,
                   flash_attention: bool, dp: int,
                   distributed_optimizer: bool = False,
                   shard_grads: bool = False, shard_weights: bool = False,
                   kv_fraction: float = 1.0) -> Memory:
    """Memory of the first pipeline stage (the one that holds the most):
    :func:`activations_per_gpu` and :func:`model_state_bytes`."""
    acts = activations_per_gpu(
        b=b, s=s, h=h, a=a, vocab=vocab, t=t, p=p, m=m,
        layers_per_stage=layers_per_stage, interleave=interleave,
        recompute=recompute, sequence_parallel=sequence_parallel,
        flash_attention=flash_attention, kv_fraction=kv_fraction)
    weights, grads, opt = model_state_bytes(
        params_per_gpu=params_per_gpu, dp=dp,
        layers_per_stage=layers_per_stage,
        distributed_optimizer=distributed_optimizer, shard_grads=shard_grads,
        shard_weights=shard_weights)
    return Memory(weights, grads, opt, acts, capacity_bytes)
