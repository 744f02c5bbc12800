"""The KV cache: bytes per token, per request, per GPU of a TP group.

Book, Chapter 9. Every layer keeps, for every token seen, one key and one
value vector per key/value head:

    bytes per token = layers x 2 x kv_heads x head_dim x bytes

(Kwon et al. 2023, section 3, for multi-head attention, where kv_heads x
head_dim = hidden; grouped-query attention shrinks it by heads / kv_heads).
Tensor parallelism splits the heads over the group, so each GPU keeps
``kv_heads / tp`` of them; when the group is larger than the number of KV
heads a head cannot be split, and each GPU keeps one: the cache is
*replicated* ``tp / kv_heads`` times (as vLLM and Megatron-LM do). A sliding
window (Mistral 7B) caps what a request keeps at ``window`` tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

from warmup_kit.serving.models.shapes import ModelShape

#: bytes per cached element: bf16/fp16, fp8, fp32
KV_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}


def kv_bytes_per_token(m: ModelShape, bytes_per: int = 2) -> int:
    """Bytes one token adds to the cache, over every layer."""
    return m.layers * 2 * m.kv_heads * m.head_dim * bytes_per


def cached_tokens(m: ModelShape, context: int) -> int:
    """Tokens a request of ``context`` tokens keeps (its window at most)."""
    if context < 0:
        raise ValueError(f"context must be >= 0, got {context}")
    return context if m.window is None else min(context, m.window)


def kv_bytes_per_request(m: ModelShape, context: int,
                         bytes_per: int = 2) -> int:
    """Bytes of one request's cache at ``context`` tokens."""
    return cached_tokens(m, context) * kv_bytes_per_token(m, bytes_per)


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    """KV heads each of ``tp`` GPUs keeps: ``kv_heads / tp``, or one
    (replicated) when the group outnumbers them. One must divide the
    other (a head is never split)."""
    if tp < 1 or kv_heads < 1:
        raise ValueError("kv_heads and tp must be >= 1")
    if kv_heads >= tp:
        if kv_heads % tp:
            raise ValueError(f"tp = {tp} must divide the {kv_heads} KV heads")
        return kv_heads // tp
    if tp % kv_heads:
        raise ValueError(f"tp = {tp} must be a multiple of the {kv_heads} "
                         "KV heads")
    return 1


@dataclass(frozen=True)
class KVSplit:
    """How a TP group holds the cache.

    Attributes:
        tp: GPUs in the group.
        heads_per_rank: KV heads each GPU keeps.
        per_rank_bytes_per_token: what one GPU stores per token.
        group_bytes_per_token: what the group stores (replicas included).
        replication: copies of every head (1 when tp <= kv_heads).
    """

    tp: int
    heads_per_rank: int
    per_rank_bytes_per_token: int
    group_bytes_per_token: int
    replication: float


def kv_split(m: ModelShape, tp: int, bytes_per: int = 2) -> KVSplit:
    """The cache of ``m`` split over a TP group of ``tp`` GPUs."""
    per = kv_heads_per_rank(m.kv_heads, tp)
    one = m.layers * 2 * per * m.head_dim * bytes_per
    return KVSplit(tp, per, one, tp * one, tp * per / m.kv_heads)


def kv_per_gpu_bytes(m: ModelShape, tp: int, *, batch: int, context: int,
                     bytes_per: int = 2) -> int:
    """Cache bytes on each GPU of the group for ``batch`` requests of
    ``context`` tokens."""
    return (batch * cached_tokens(m, context)
            * kv_split(m, tp, bytes_per).per_rank_bytes_per_token)


def max_cached_tokens(m: ModelShape, tp: int, hbm_bytes: float, *,
                      weight_bytes_per: float = 2, kv_bytes: int = 2,
                      reserve: float = 0.1) -> int:
    """Tokens (over all requests) whose cache fits on each GPU beside its
    share of the weights, keeping ``reserve`` of the memory for
    activations and the runtime; 0 if the weights alone do not fit."""
    free = hbm_bytes * (1 - reserve) - m.weight_bytes(weight_bytes_per) / tp
    if free <= 0:
        return 0
    return int(free // kv_split(m, tp, kv_bytes).per_rank_bytes_per_token)


__all__ = ["KVSplit", "KV_BYTES", "cached_tokens", "kv_bytes_per_request",
           "kv_bytes_per_token", "kv_heads_per_rank", "kv_per_gpu_bytes",
           "kv_split", "max_cached_tokens"]
