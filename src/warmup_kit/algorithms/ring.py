"""Ring algorithms (book, Chapter 3; Baidu 2017; Patarasuk and Yuan 2009).

All-reduce = reduce-scatter, then all-gather, around a ring of N ranks. The
buffer is cut into N chunks. Each of the 2(N-1) rounds, every rank sends one
chunk to its right-hand neighbour, so each rank sends 2(N-1)/N of the buffer,
whatever N is.
"""
from __future__ import annotations

import math
from typing import Sequence

from warmup_kit.schedule import LazyRounds, Schedule, Transfer, merge_rounds

Block = tuple[int, ...]


def ring_allreduce(n: int) -> Schedule:
    """Ring all-reduce: N-1 reduce-scatter rounds, then N-1 all-gather rounds.

    After the reduce-scatter, rank r holds chunk r summed over every rank;
    the all-gather then passes each finished chunk once around the ring.
    """
    def make():
        ranks, chunks = range(n), [(c,) for c in range(n)]
        return (reduce_scatter_rounds(ranks, chunks)
                + all_gather_rounds(ranks, chunks))
    return Schedule(name="ring", collective="allreduce", ranks=n, chunks=n,
                    rounds=LazyRounds(2 * (n - 1), make,
                                      lambda: _ring_arrays(n)))


def _ring_arrays(n: int):
    """The ring all-reduce's transfers as arrays, in the order of its
    rounds: round k, rank i sends chunk (i - k - 1) mod n (reduce-scatter,
    k < n - 1) or (i - k) mod n (all-gather) to rank i + 1."""
    import numpy as np
    k = np.repeat(np.arange(2 * (n - 1)), n)
    i = np.tile(np.arange(n), 2 * (n - 1))
    rs = k < n - 1
    chunk = np.where(rs, (i - k - 1) % n, (i - (k - (n - 1))) % n)
    return k, i, (i + 1) % n, rs, chunk


def ring_reduce_scatter(n: int) -> Schedule:
    """Ring reduce-scatter: rank r ends with chunk r reduced over all ranks."""
    rounds = reduce_scatter_rounds(range(n), [(c,) for c in range(n)])
    return Schedule(name="ring", collective="reduce_scatter", ranks=n,
                    chunks=n, rounds=rounds)


def ring_all_gather(n: int) -> Schedule:
    """Ring all-gather: rank r contributes chunk r; all end with all."""
    rounds = all_gather_rounds(range(n), [(c,) for c in range(n)])
    return Schedule(name="ring", collective="all_gather", ranks=n, chunks=n,
                    rounds=rounds)


def reduce_scatter_rounds(members: Sequence[int], blocks: Sequence[Block]
                          ) -> list[list[Transfer]]:
    """Rounds after which ``members[i]`` holds ``blocks[i]`` fully reduced.

    Round k: member i sends block (i - k - 1) mod s to member i + 1, which
    adds it into its own copy. Block b starts at member b + 1 and arrives,
    complete, at member b after s - 1 hops. (The hierarchical all-reduce runs
    this on a subset of the ranks, with several chunks per block.)
    """
    s = len(members)
    return [[Transfer(src=members[i], dst=members[(i + 1) % s],
                      chunks=blocks[(i - k - 1) % s], reduce=True)
             for i in range(s) if blocks[(i - k - 1) % s]]
            for k in range(s - 1)]


def all_gather_rounds(members: Sequence[int], blocks: Sequence[Block]
                      ) -> list[list[Transfer]]:
    """Rounds after which every member holds every ``blocks[i]`` of member i.

    Round k: member i forwards block (i - k) mod s to member i + 1, which
    copies it.
    """
    s = len(members)
    return [[Transfer(src=members[i], dst=members[(i + 1) % s],
                      chunks=blocks[(i - k) % s])
             for i in range(s) if blocks[(i - k) % s]]
            for k in range(s - 1)]


def default_ranks_per_node(n: int) -> int:
    """A square-ish two-level split: largest divisor of N up to sqrt(N)
    (N itself when N is prime, which makes one group: a flat ring)."""
    best = 1
    for g in range(2, math.isqrt(n) + 1):
        if n % g == 0:
            best = g
    return best if best > 1 else n


def rail_ring_allreduce(n: int, ranks_per_node: int | None = None
                        ) -> Schedule:
    """Flat ring all-reduce as NCCL runs it across nodes: one ring per rail.

    With ``g`` ranks per node there are ``g`` rings (NCCL's channels), each
    carrying 1/g of the buffer through every rank. Ring ``c`` visits each
    node's ranks starting at local rank ``c``, so it leaves every node from a
    different local rank: each GPU's NIC carries one ring's node-crossing
    hop, and all g NICs of a node work at once (Chapter 4, "be fair to the
    flat ring"). Per node, the cross-node bytes are those of one ring over
    all N ranks: 2 (N-1)/N * V. Same-pair messages of one round travel as
    one transfer.
    """
    g = default_ranks_per_node(n) if ranks_per_node is None else ranks_per_node
    if g < 1:
        raise ValueError(f"ranks_per_node must be >= 1, got {g}")
    g = min(g, n)
    groups = [list(range(s, min(s + g, n))) for s in range(0, n, g)]
    per_channel = []
    for c in range(g):
        order = [m[(c + j) % len(m)] for m in groups for j in range(len(m))]
        blocks = [(c * n + i,) for i in range(n)]
        per_channel.append(reduce_scatter_rounds(order, blocks)
                           + all_gather_rounds(order, blocks))
    rounds = [_coalesce(r) for r in merge_rounds(*per_channel)]
    return Schedule(name="rail_ring", collective="allreduce", ranks=n,
                    chunks=g * n, rounds=rounds)


def _coalesce(rnd: list[Transfer]) -> list[Transfer]:
    """One transfer per (src, dst, reduce) in a round."""
    by_pair: dict[tuple[int, int, bool], list[int]] = {}
    for t in rnd:
        by_pair.setdefault((t.src, t.dst, t.reduce), []).extend(t.chunks)
    return [Transfer(src=s, dst=d, chunks=tuple(c), reduce=red)
            for (s, d, red), c in by_pair.items()]
