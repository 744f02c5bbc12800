"""Self-check: what one token costs in the KV cache (Chapter 9)."""
from __future__ import annotations

from warmup_kit.selfcheck.verdict import Verdict, near, number, unanswered
from warmup_kit.serving.kv_cache import kv_bytes_per_token
from warmup_kit.serving.shapes import model


def kv_cache_bytes(name: str, answer, bytes_per: int = 2) -> Verdict:
    """Grade the bytes one token adds to the KV cache of model ``name``
    (a :data:`warmup_kit.serving.shapes.MODELS` key), every layer, at
    ``bytes_per`` bytes a value (1% tolerance)."""
    m = model(name)
    if answer is ...:
        return unanswered("a number of bytes per token")
    got = number(answer, "answer")
    right = kv_bytes_per_token(m, bytes_per)
    why = (f"{m.layers} layers x 2 (K and V) x {m.kv_heads} KV heads x "
           f"{m.head_dim} x {bytes_per} B = {right:,} B")
    if near(got, right, 0.01):
        return Verdict(True, why)
    if m.kv_heads != m.heads and near(got, right * m.heads / m.kv_heads,
                                      0.01):
        return Verdict(False, "that counts every query head; with "
                              "grouped-query attention only the KV heads "
                              "are cached")
    if near(got, right / 2, 0.01):
        return Verdict(False, "the cache holds keys and values")
    if near(got, right / m.layers, 0.01):
        return Verdict(False, "that is one layer; every layer caches its own")
    return Verdict(False, "multiply layers, K and V, KV heads, head width "
                          "and bytes per value")
