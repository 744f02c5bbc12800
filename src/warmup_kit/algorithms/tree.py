"""Tree algorithms (book, Chapter 4).

* ``tree``: a binary tree (heap layout, rank 0 at the root): reduce up,
  broadcast down. About 2 log2 N rounds, each moving the whole buffer.
* ``double_tree``: two complementary binary trees, each carrying half of the
  buffer, as NCCL does (Sanders, Speck and Träff 2009): the interior ranks of
  one tree are the leaves of the other, so no rank's links carry the whole
  buffer twice.
* binomial-tree broadcast and reduce from any root (MPICH's short-message
  algorithms; Thakur, Rabenseifner and Gropp 2005), and binomial gather and
  scatter, whose messages grow (or shrink) as they near the root: log2 N
  rounds, and each rank's block crosses each level once.
"""
from __future__ import annotations

from typing import Sequence

from warmup_kit.schedule import Schedule, Transfer, merge_rounds


def _depth(i: int) -> int:
    return (i + 1).bit_length() - 1


def tree_reduce_rounds(order: Sequence[int], chunks: tuple[int, ...]
                       ) -> list[list[Transfer]]:
    """Reduce ``chunks`` up a heap-shaped binary tree over ``order``.

    ``order[0]`` is the root; the parent of position i is (i - 1) // 2.
    The deepest level sends first.
    """
    n = len(order)
    if n < 2:
        return []
    top = _depth(n - 1)
    return [[Transfer(src=order[i], dst=order[(i - 1) // 2], chunks=chunks,
                      reduce=True)
             for i in range(1, n) if _depth(i) == d]
            for d in range(top, 0, -1)]


def tree_broadcast_rounds(order: Sequence[int], chunks: tuple[int, ...]
                          ) -> list[list[Transfer]]:
    """Broadcast ``chunks`` down the same tree, root first."""
    n = len(order)
    if n < 2:
        return []
    top = _depth(n - 1)
    return [[Transfer(src=order[(i - 1) // 2], dst=order[i], chunks=chunks)
             for i in range(1, n) if _depth(i) == d]
            for d in range(1, top + 1)]


def tree_allreduce(n: int) -> Schedule:
    """Binary-tree all-reduce: reduce to rank 0, then broadcast."""
    order = list(range(n))
    rounds = tree_reduce_rounds(order, (0,)) + tree_broadcast_rounds(order, (0,))
    return Schedule(name="tree", collective="allreduce", ranks=n, chunks=1,
                    rounds=rounds)


def double_tree_allreduce(n: int) -> Schedule:
    """Two mirrored binary trees, one per half of the buffer."""
    a, b = list(range(n)), list(range(n - 1, -1, -1))
    up = merge_rounds(tree_reduce_rounds(a, (0,)), tree_reduce_rounds(b, (1,)))
    down = merge_rounds(tree_broadcast_rounds(a, (0,)),
                        tree_broadcast_rounds(b, (1,)))
    return Schedule(name="double_tree", collective="allreduce", ranks=n,
                    chunks=2, rounds=up + down)


def binomial_broadcast(n: int, root: int = 0) -> Schedule:
    """Binomial-tree broadcast: ceil(log2 N) rounds, the holders double."""
    rounds, mask = [], 1
    while mask < n:
        rounds.append([Transfer(src=(v + root) % n, dst=(v + mask + root) % n,
                               chunks=(0,))
                       for v in range(mask) if v + mask < n])
        mask <<= 1
    return Schedule(name="tree", collective="broadcast", ranks=n, chunks=1,
                    rounds=rounds, root=root)


def binomial_reduce(n: int, root: int = 0) -> Schedule:
    """Binomial-tree reduce: the broadcast run backwards, adding on the way."""
    bcast = binomial_broadcast(n, root)
    rounds = [[Transfer(src=t.dst, dst=t.src, chunks=t.chunks, reduce=True) for t in rnd]
              for rnd in reversed(bcast.rounds)]
    return Schedule(name="tree", collective="reduce", ranks=n, chunks=1,
                    rounds=rounds, root=root)


def binomial_gather(n: int, root: int = 0) -> Schedule:
    """Binomial-tree gather: in round k, every rank whose offset from the
    root has lowest set bit 2^k sends all the blocks it holds 2^k down."""
    rounds, mask = [], 1
    while mask < n:
        rounds.append([
            Transfer(src=(v + root) % n, dst=(v - mask + root) % n,
                     chunks=tuple((u + root) % n
                                  for u in range(v, min(v + mask, n))))
            for v in range(mask, n, 2 * mask)])
        mask <<= 1
    return Schedule(name="tree", collective="gather", ranks=n, chunks=n,
                    rounds=rounds, root=root)


def binomial_scatter(n: int, root: int = 0) -> Schedule:
    """Binomial-tree scatter: the gather run backwards; each message carries
    the blocks of the subtree it is sent to."""
    gather = binomial_gather(n, root)
    rounds = [[Transfer(src=t.dst, dst=t.src, chunks=t.chunks) for t in rnd]
              for rnd in reversed(gather.rounds)]
    return Schedule(name="tree", collective="scatter", ranks=n, chunks=n,
                    rounds=rounds, root=root)
