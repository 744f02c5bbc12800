"""Top-k routing with an expert capacity (book, Chapter 9).

The router of a mixture-of-experts layer scores each token against every
expert; the token goes to its ``top_k`` best, weighted by a softmax over
those k scores (Mixtral's router, Jiang et al. 2024, section 2.1). Each
expert takes at most

    capacity = ceil(capacity_factor x tokens x top_k / experts)

tokens from one group (GShard, Lepikhin et al. 2021, section 2.2; Switch
Transformer, Fedus et al. 2022, section 2.2). First choices are served
before second choices, each in token order, and a choice past its
expert's capacity is dropped (the token then skips that expert: its
output has no share of it).

Pure numpy: the real MoE layer on a communicator
(:mod:`warmup_kit.serving.moe_layer`) and its single-process reference
both route with :func:`route`, and the cost model counts its bytes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Routing:
    """Where each of T tokens goes.

    Attributes:
        expert: (T, k) expert index of each choice, best first.
        weight: (T, k) its gate weight (softmax over the k scores).
        keep: (T, k) False for a choice dropped at capacity.
        capacity: tokens an expert takes.
        experts: experts of the layer.
    """

    expert: np.ndarray
    weight: np.ndarray
    keep: np.ndarray
    capacity: int
    experts: int

    @property
    def tokens(self) -> int:
        return self.expert.shape[0]

    @property
    def dropped(self) -> int:
        return int((~self.keep).sum())

    def per_expert(self) -> np.ndarray:
        """Kept choices per expert."""
        return np.bincount(self.expert[self.keep], minlength=self.experts)

    def per_rank(self, ep: int) -> np.ndarray:
        """Kept choices per rank, experts laid out in ``ep`` contiguous
        blocks (rank r holds experts ``r E/ep .. (r+1) E/ep - 1``)."""
        return self.per_expert().reshape(ep, -1).sum(axis=1)


def capacity(tokens: int, experts: int, top_k: int,
             capacity_factor: float | None) -> int:
    """Tokens one expert takes from a group of ``tokens`` (None: no cap)."""
    if capacity_factor is None:
        return tokens * top_k
    if capacity_factor <= 0:
        raise ValueError(f"capacity_factor must be > 0, got "
                         f"{capacity_factor}")
    return math.ceil(capacity_factor * tokens * top_k / experts)


def route(scores: np.ndarray, top_k: int,
          capacity_factor: float | None = None) -> Routing:
    """Route tokens by their (T, E) router ``scores``.

    Args:
        scores: router logits, one row per token.
        top_k: experts per token.
        capacity_factor: expert capacity as a multiple of the even share
            (1.0 = exactly ``T k / E``); None: no capacity (dropless).
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2:
        raise ValueError("scores must be (tokens, experts)")
    t, e = scores.shape
    if not 1 <= top_k <= e:
        raise ValueError(f"top_k must be in 1..{e}, got {top_k}")
    # best first; ties go to the lower expert index (stable)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :top_k]
    top = np.take_along_axis(scores, order, axis=1)
    w = np.exp(top - top[:, :1])
    w /= w.sum(axis=1, keepdims=True)
    cap = capacity(t, e, top_k, capacity_factor)
    keep = np.zeros((t, top_k), dtype=bool)
    load = np.zeros(e, dtype=np.int64)
    for j in range(top_k):                  # first choices first
        for i in range(t):
            x = order[i, j]
            if load[x] < cap:
                load[x] += 1
                keep[i, j] = True
    return Routing(order, w, keep, cap, e)


def dispatch_bytes(counts: np.ndarray, hidden: int, itemsize: int
                   ) -> np.ndarray:
    """Bytes each rank sends in one dispatch, from the (ep, ep) matrix
    ``counts[i, j]`` = rows rank i sends to rank j (its own block stays).
    The combine sends the transpose: ``dispatch_bytes(counts.T, ...)``."""
    c = np.asarray(counts, dtype=np.int64)
    if c.ndim != 2 or c.shape[0] != c.shape[1]:
        raise ValueError("counts must be a square (ep, ep) matrix")
    return (c.sum(axis=1) - np.diag(c)) * hidden * itemsize


__all__ = ["Routing", "capacity", "dispatch_bytes", "route"]
