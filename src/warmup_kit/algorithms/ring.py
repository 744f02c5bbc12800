"""Ring algorithms (book, Chapter 3; Baidu 2017; Patarasuk and Yuan 2009).

All-reduce = reduce-scatter then all-gather around a ring of N ranks. The
buffer is cut into N chunks; each of the 2(N-1) rounds every rank sends one
chunk to its right neighbour, so each rank sends 2(N-1)/N of the buffer.
"""
from __future__ import annotations

from typing import Sequence

from warmup_kit.schedule import Schedule, Transfer, fast_transfer

Block = tuple[int, ...]


def ring_reduce_scatter_rounds(members: Sequence[int],
                               blocks: Sequence[Block]) -> list[list[Transfer]]:
    """Rounds after which ``members[i]`` holds ``blocks[i]`` fully reduced.

    Round k: member i sends block (i - k - 1) mod s to member i + 1, which
    adds it into its own copy. Block b starts at member b + 1 and arrives,
    complete, at member b after s - 1 hops.
    """
    s = len(members)
    nxt = [members[(i + 1) % s] for i in range(s)]
    return [[fast_transfer(members[i], nxt[i], blocks[(i - k - 1) % s], True)
             for i in range(s) if blocks[(i - k - 1) % s]]
            for k in range(s - 1)]


def ring_all_gather_rounds(members: Sequence[int],
                           blocks: Sequence[Block]) -> list[list[Transfer]]:
    """Rounds after which every member holds every ``blocks[i]`` of member i.

    Round k: member i forwards block (i - k) mod s to member i + 1.
    """
    s = len(members)
    nxt = [members[(i + 1) % s] for i in range(s)]
    return [[fast_transfer(members[i], nxt[i], blocks[(i - k) % s])
             for i in range(s) if blocks[(i - k) % s]]
            for k in range(s - 1)]


def _one_chunk_each(n: int) -> list[Block]:
    return [(i,) for i in range(n)]


def ring_allreduce(n: int) -> Schedule:
    """Ring all-reduce: N-1 reduce-scatter rounds, N-1 all-gather rounds."""
    members, blocks = range(n), _one_chunk_each(n)
    rounds = (ring_reduce_scatter_rounds(members, blocks)
              + ring_all_gather_rounds(members, blocks))
    return Schedule("ring", "allreduce", n, n, rounds)


def ring_reduce_scatter(n: int) -> Schedule:
    """Ring reduce-scatter: rank r ends with chunk r reduced over all ranks."""
    rounds = ring_reduce_scatter_rounds(range(n), _one_chunk_each(n))
    return Schedule("ring", "reduce_scatter", n, n, rounds)


def ring_all_gather(n: int) -> Schedule:
    """Ring all-gather: rank r contributes chunk r; all end with all."""
    rounds = ring_all_gather_rounds(range(n), _one_chunk_each(n))
    return Schedule("ring", "all_gather", n, n, rounds)
