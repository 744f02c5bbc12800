"""Tensor-parallel decode and prefill, as costs (book, Chapter 9).

One decode step gives every one of ``batch`` sequences its next token. On
each GPU of a TP group of ``tp`` (Shoeybi et al. 2019, section 3: QKV and
FFN-in split by columns, attention output and FFN-out by rows):

* **compute** is memory-bound at small batch: each linear layer reads its
  ``1/tp`` of the weights once for the whole batch (a roofline per GEMM:
  the slower of its FLOPs at ``GPU.gemm_flops`` (the precision's GEMM
  efficiency of peak) and its bytes at
  ``hbm_efficiency`` of HBM, :mod:`warmup_kit.parallelism.compute`), and
  attention reads the GPU's share of every sequence's KV cache
  (:mod:`warmup_kit.serving.models.kv_cache`). A mixture-of-experts layer reads
  the experts its tokens touch (:meth:`ModelShape.experts_touched`).
* **communication** is two all-reduces per layer (after the attention
  output and after the FFN) of ``batch x hidden`` activations: a few KB to
  a few hundred KB, so each costs its latency, not its bytes. They are
  priced by NCCL's own cost model (:mod:`warmup_kit.model.nccl`), which
  picks the LL protocol for them, on the links the group spans: one NVLink
  island, or ``islands`` of them (nodes, on a DGX) joined by InfiniBand.

The step takes ``compute + communication`` (NCCL's kernels and the model's
run one after the other on the critical path). Left out: kernel launch
gaps (CUDA graphs remove most), sampling, the vocabulary-parallel output
layer's gather, and the scheduler of a real server.

Prefill runs the prompt through the same layers at once: compute-bound
GEMMs and attention (FlashAttention, :func:`~warmup_kit.parallelism.compute.
layer_times`) and two all-reduces per layer of ``batch x prompt x hidden``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from warmup_kit.model.hardware import GPU, SYSTEMS, System
from warmup_kit.model.nccl import Choice, best_for_shape
from warmup_kit.parallelism.compute import layer_times, stream_s
from warmup_kit.serving.models.kv_cache import (
    cached_tokens, kv_heads_per_rank, kv_split)
from warmup_kit.serving.models.shapes import ModelShape

ACT_BYTES = 2            # bf16 activations on the wire


def linear_s(gpu: GPU, m: float, n: float, k: float, *,
             weight_bytes: float = 2, precision: str = "bf16") -> float:
    """Roofline time of (m x k) @ (k x n) with weights of ``weight_bytes``
    each and bf16 activations."""
    flops = 2.0 * m * n * k
    nbytes = weight_bytes * k * n + ACT_BYTES * (m * k + m * n)
    return max(flops / gpu.gemm_flops(precision),
               stream_s(gpu, nbytes))


def island_size(s: System) -> int:
    """GPUs of one NVLink island (a node without NVLink)."""
    return s.nvlink_domain if s.nvlink is not None else s.gpus_per_node


def group_shape(s: System, tp: int, islands: int | None = None
                ) -> tuple[int, int, int]:
    """(n, islands, GPUs per island) of a TP group of ``tp`` GPUs spread
    evenly over ``islands`` NVLink islands (default: as few as fit)."""
    size = island_size(s)
    if islands is None:
        islands = math.ceil(tp / size)
    if islands < 1 or tp % islands or tp // islands > size:
        raise ValueError(f"tp = {tp} does not split evenly over {islands} "
                         f"islands of {size} GPUs")
    return tp, islands, tp // islands


def tp_allreduce(s: System, nbytes: float, tp: int,
                 islands: int | None = None) -> Choice:
    """NCCL's pick (algorithm, protocol, time) for one TP all-reduce."""
    n, N, k = group_shape(s, tp, islands)
    return best_for_shape("allreduce", float(nbytes), s, n, N, k)


@dataclass(frozen=True)
class Step:
    """One decode step (or one prefill) on each GPU of the TP group.

    Attributes:
        compute_s: the GPU's kernels; ``weights_s`` and ``kv_s`` are its
            two memory-bound parts in decode (0 in prefill).
        comm_s: the ``2 x layers`` all-reduces.
        allreduce: NCCL's choice and time for one of them.
        tokens: tokens this step produces (``batch`` in decode).
        kv_bytes_per_gpu, weight_bytes_per_gpu: memory held on each GPU.
        hbm_bytes: the GPU's memory.
    """

    compute_s: float
    comm_s: float
    allreduce: Choice
    tokens: int
    weights_s: float = 0.0
    kv_s: float = 0.0
    kv_bytes_per_gpu: float = 0.0
    weight_bytes_per_gpu: float = 0.0
    hbm_bytes: float = 0.0

    @property
    def step_s(self) -> float:
        return self.compute_s + self.comm_s

    @property
    def tokens_per_s(self) -> float:
        """Tokens the group produces per second."""
        return self.tokens / self.step_s

    @property
    def comm_share(self) -> float:
        return self.comm_s / self.step_s

    @property
    def fits(self) -> bool:
        """Weights and cache fit in the GPU's memory."""
        return self.kv_bytes_per_gpu + self.weight_bytes_per_gpu <= \
            self.hbm_bytes


def _system(system: str | System) -> System:
    return SYSTEMS[system] if isinstance(system, str) else system


def _check(m: ModelShape, tp: int, batch: int) -> None:
    if m.heads % tp or m.ffn % tp:
        raise ValueError(f"{m.name}: tp = {tp} must divide the {m.heads} "
                         f"heads and the FFN width {m.ffn}")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")


def decode_step(m: ModelShape, system: str | System, *, tp: int,
                batch: int, context: int, islands: int | None = None,
                weight_bytes: float = 2, kv_bytes: int = 2,
                precision: str = "bf16") -> Step:
    """One decode step of ``batch`` sequences at ``context`` tokens each.

    Args:
        m: the model.
        system: a :data:`~warmup_kit.model.hardware.SYSTEMS` key or System.
        tp: tensor-parallel GPUs.
        islands: NVLink islands the group spans (default: the fewest).
        weight_bytes, kv_bytes: bytes per weight and per cached element
            (1 for FP8).
        precision: of the GEMMs' peak (only matters at large batch).
    """
    s = _system(system)
    _check(m, tp, batch)
    gpu = s.gpu
    h, f, d = m.hidden, m.ffn, m.head_dim
    kvh = kv_heads_per_rank(m.kv_heads, tp)
    lin = {"weight_bytes": weight_bytes, "precision": precision}
    attn = (linear_s(gpu, batch, (m.q_dim / tp + 2 * kvh * d), h, **lin)
            + linear_s(gpu, batch, h, m.q_dim / tp, **lin))
    width = (2 if m.gated else 1) * f / tp
    if m.moe:
        touched = m.experts_touched(batch)
        rows = batch * m.top_k / touched
        ffn = touched * (linear_s(gpu, rows, width, h, **lin)
                         + linear_s(gpu, rows, h, f / tp, **lin))
        ffn += linear_s(gpu, batch, m.experts, h, **lin)        # router
    else:
        ffn = (linear_s(gpu, batch, width, h, **lin)
               + linear_s(gpu, batch, h, f / tp, **lin))
    split = kv_split(m, tp, kv_bytes)
    kv_gpu = batch * cached_tokens(m, context) * split.per_rank_bytes_per_token
    kv_s = stream_s(gpu, kv_gpu)
    head = linear_s(gpu, batch, m.vocab / tp, h, **lin)
    weights_s = m.layers * (attn + ffn) + head
    ar = tp_allreduce(s, batch * h * ACT_BYTES, tp, islands)
    comm = 2 * m.layers * ar.time_s
    return Step(weights_s + kv_s, comm, ar, batch, weights_s=weights_s,
                kv_s=kv_s, kv_bytes_per_gpu=kv_gpu,
                weight_bytes_per_gpu=m.weight_bytes(weight_bytes) / tp,
                hbm_bytes=gpu.hbm_gb * 1e9)


def prefill(m: ModelShape, system: str | System, *, tp: int, batch: int,
            prompt: int, islands: int | None = None,
            precision: str = "bf16") -> Step:
    """The prompt pass of ``batch`` requests of ``prompt`` tokens: its time
    is the time to the first token (without queueing)."""
    s = _system(system)
    _check(m, tp, batch)
    if prompt < 1:
        raise ValueError(f"prompt must be >= 1 token, got {prompt}")
    width = m.ffn * (1.5 if m.gated else 1.0) * (m.top_k if m.moe else 1)
    lt = layer_times(s.gpu, b=batch, s=prompt, h=m.hidden, a=m.heads,
                     ffn=width, t=tp, flash_attention=True,
                     precision=precision, kv_dim=m.kv_dim)
    head = linear_s(s.gpu, batch, m.vocab / tp, m.hidden,
                    precision=precision)             # the last token only
    ar = tp_allreduce(s, batch * prompt * m.hidden * ACT_BYTES, tp, islands)
    return Step(m.layers * lt.fwd_s + head, 2 * m.layers * ar.time_s, ar,
                batch, weight_bytes_per_gpu=m.weight_bytes() / tp,
                hbm_bytes=s.gpu.hbm_gb * 1e9)


def allreduce_bytes_per_token(m: ModelShape, tp: int, batch: int = 1,
                              act_bytes: int = ACT_BYTES) -> float:
    """Bytes each GPU sends per decode step in its TP all-reduces, ring
    algorithm: ``2 layers x 2 (tp-1)/tp x batch x hidden x bytes``."""
    if tp < 2:
        return 0.0
    return 2 * m.layers * 2 * (tp - 1) / tp * batch * m.hidden * act_bytes


__all__ = ["ACT_BYTES", "Step", "allreduce_bytes_per_token", "decode_step",
           "group_shape", "island_size", "linear_s", "prefill",
           "tp_allreduce"]
