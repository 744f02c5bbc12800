"""Two-level (hierarchical) all-reduce (book, Chapters 4 and 6).

Ranks form groups of ``ranks_per_node`` consecutive ranks (one group per
node or NVLink island). Inside each group: ring reduce-scatter, so local
rank l holds block l summed over its group. Across groups: ring all-reduce
of block l among the ranks with the same local rank l (one ring per local
rank, all running side by side: one NIC each, as rails do). Inside each group
again: ring all-gather. Only 2 (G-1)/G * V/g per rank crosses the slow links
(G groups of g ranks), against 2 (N-1)/N * V for a flat ring.

A last group smaller than the others is allowed: its ranks own several blocks.
"""
from __future__ import annotations

from warmup_kit.schedule import Schedule, concat_rounds, merge_rounds
from warmup_kit.algorithms.ring import (  # noqa: F401 (re-exported)
    all_gather_rounds, default_ranks_per_node, reduce_scatter_rounds)
from warmup_kit.algorithms.tree import (tree_broadcast_rounds,
                                        tree_reduce_rounds)


def hierarchical_allreduce(n: int, ranks_per_node: int | None = None
                           ) -> Schedule:
    """Reduce-scatter inside groups, all-reduce across, all-gather inside."""
    g = default_ranks_per_node(n) if ranks_per_node is None else ranks_per_node
    if g < 1:
        raise ValueError(f"ranks_per_node must be >= 1, got {g}")
    g = min(g, n)
    n_groups = -(-n // g)
    groups = [list(range(s, min(s + g, n))) for s in range(0, n, g)]

    def block(b: int) -> tuple[int, ...]:
        return tuple(range(b * n_groups, (b + 1) * n_groups))

    def owned(size: int) -> list[tuple[int, ...]]:
        # local rank l owns the blocks b with b % size == l
        return [tuple(c for b in range(l, g, size) for c in block(b))
                for l in range(size)]

    intra_rs = merge_rounds(*(reduce_scatter_rounds(m, owned(len(m)))
                              for m in groups))
    cross = []
    for b in range(g):
        owners = [m[b % len(m)] for m in groups]
        sub = [(c,) for c in block(b)]
        cross.append(reduce_scatter_rounds(owners, sub)
                     + all_gather_rounds(owners, sub))
    intra_ag = merge_rounds(*(all_gather_rounds(m, owned(len(m)))
                              for m in groups))
    rounds = concat_rounds(intra_rs, merge_rounds(*cross), intra_ag)
    return Schedule(name="hierarchical", collective="allreduce", ranks=n,
                    chunks=g * n_groups, rounds=rounds)


def leader_allreduce(n: int, ranks_per_node: int | None = None) -> Schedule:
    """Two-level all-reduce through one representative per node.

    Inside each group of ``ranks_per_node`` ranks, a binary tree reduces the
    whole buffer to the group's first rank (its leader); the leaders run a
    ring all-reduce among themselves; a binary tree broadcasts the result
    back down each group. The textbook "one representative per island"
    scheme (Chapter 4): few network messages, but all of a node's
    cross-node bytes, 2 (G-1)/G * V, leave through one NIC.
    """
    g = default_ranks_per_node(n) if ranks_per_node is None else ranks_per_node
    if g < 1:
        raise ValueError(f"ranks_per_node must be >= 1, got {g}")
    g = min(g, n)
    groups = [list(range(s, min(s + g, n))) for s in range(0, n, g)]
    n_groups = len(groups)
    every = tuple(range(n_groups))
    leaders = [m[0] for m in groups]
    blocks = [(c,) for c in range(n_groups)]
    up = merge_rounds(*(tree_reduce_rounds(m, every) for m in groups))
    across = (reduce_scatter_rounds(leaders, blocks)
              + all_gather_rounds(leaders, blocks))
    down = merge_rounds(*(tree_broadcast_rounds(m, every) for m in groups))
    return Schedule(name="leader", collective="allreduce", ranks=n,
                    chunks=n_groups, rounds=concat_rounds(up, across, down))
