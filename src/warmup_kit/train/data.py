"""Deterministic synthetic data: a fixed random teacher network's outputs.

Every rank computes the same global batch of step ``k`` from the seed and
keeps its own contiguous shard, so data-parallel training on N ranks sees
exactly the samples single-process training sees.
"""
from __future__ import annotations

import numpy as np


def global_batch(step: int, batch: int, d_in: int, d_out: int,
                 seed: int = 1234, dtype=np.float64
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and targets of step ``step``: ``x ~ N(0, 1)``,
    ``t = tanh(x A)`` for a teacher matrix ``A`` fixed by ``seed``."""
    teacher = np.random.default_rng(seed).standard_normal((d_in, d_out))
    teacher /= np.sqrt(d_in)
    x = np.random.default_rng([seed, step]).standard_normal((batch, d_in))
    return x.astype(dtype), np.tanh(x @ teacher).astype(dtype)


def shard(a: np.ndarray, rank: int, size: int) -> np.ndarray:
    """Rank ``rank``'s rows of a global batch (N equal contiguous pieces)."""
    if len(a) % size:
        raise ValueError(f"global batch of {len(a)} does not split into "
                         f"{size} equal shards")
    k = len(a) // size
    return a[rank * k:(rank + 1) * k]
