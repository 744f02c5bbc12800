"""Self-check: what one token costs in the KV cache (Chapter 9)."""
from __future__ import annotations

from warmup_kit.exercises.result import (
    Result, close, failed, number, passed, unanswered)
from warmup_kit.serving.models.kv_cache import kv_bytes_per_token
from warmup_kit.serving.models.shapes import model


def kv_cache_bytes(name: str, answer, bytes_per: int = 2) -> Result:
    """Grade the bytes one token adds to the KV cache of model ``name``
    (a :data:`warmup_kit.serving.models.shapes.MODELS` key), every layer, at
    ``bytes_per`` bytes a value (1% tolerance)."""
    m = model(name)
    ex = f"KV-cache bytes per token, {m.name}"
    if answer is ...:
        return unanswered(ex, "a number of bytes per token")
    got = number("answer", answer)
    right = kv_bytes_per_token(m, bytes_per)
    why = (f"{m.layers} layers x 2 (K and V) x {m.kv_heads} KV heads x "
           f"{m.head_dim} x {bytes_per} B = {right:,} B")
    if close(got, right, 0.01):
        return passed(ex, why)
    if m.kv_heads != m.heads and close(got, right * m.heads / m.kv_heads,
                                      0.01):
        return failed(ex, "that counts every query head; with "
                          "grouped-query attention only the KV heads "
                          "are cached")
    if close(got, right / 2, 0.01):
        return failed(ex, "the cache holds keys and values")
    if close(got, right / m.layers, 0.01):
        return failed(ex, "that is one layer; every layer caches its own")
    return failed(ex, "multiply layers, K and V, KV heads, head width "
                      "and bytes per value")
