"""Which rank is a stuck job really waiting for? (book, Chapter 8)

When a synchronous collective stalls, most ranks are waiting for a rank
that is itself waiting: rank 0 waits for 1, which waits for 3, which is the
one that stopped. A rank that gives up should name rank 3, not its own
neighbour. Each transport gathers a *wait-for graph* (``waits_for[a] = b``:
rank a is blocked on rank b) from what the ranks report: shared memory
publishes it in the control segment, TCP ranks send notices to each other.
The culprit is where the chain of waits ends: a rank that reports no wait
(stopped, crashed, or busy outside the collective), or a rank known lost.
"""
from __future__ import annotations

from typing import Mapping


def culprit(start: int, waits_for: Mapping[int, int],
            lost: set[int] = frozenset()) -> tuple[int, list[int]]:
    """Follow the chain of waits from ``start``.

    Args:
        start: the rank this rank is blocked on.
        waits_for: rank -> the rank it reports being blocked on.
        lost: ranks known to be gone (a chain stops there).

    Returns:
        ``(culprit, chain)``: the last rank of the chain and the chain
        itself. A cycle (ranks waiting on each other: a deadlock, e.g.
        mismatched calls) names its lowest rank.
    """
    chain, seen = [start], {start}
    x = start
    while x not in lost and x in waits_for:
        x = waits_for[x]
        if x in seen:
            cycle = chain[chain.index(x):]
            return min(cycle), chain + [x]
        chain.append(x)
        seen.add(x)
    return x, chain


def describe(chain: list[int]) -> str:
    """' (which waits for rank 3 -> rank 5)' for a chain longer than one."""
    if len(chain) < 2:
        return ""
    return " (which waits for " + " -> ".join(f"rank {c}"
                                              for c in chain[1:]) + ")"
