"""Naive all-reduce: everyone sends its whole buffer to everyone (Chapter 3).

One round; each rank then sums the N buffers in rank order. It moves
(N-1) V per rank, N/2 times what the ring moves: the baseline the book
compares against.
"""
from __future__ import annotations

from warmup_kit.schedule import Schedule, Transfer


def naive_allreduce(n: int) -> Schedule:
    """All-gather every full buffer, then reduce locally."""
    rnd = [Transfer(src=src, dst=dst, chunks=(0,), reduce=True)
           for src in range(n) for dst in range(n) if src != dst]
    return Schedule(name="naive", collective="allreduce", ranks=n, chunks=1,
                    rounds=[rnd] if rnd else [])
