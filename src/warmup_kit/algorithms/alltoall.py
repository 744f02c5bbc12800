"""All-to-all (book, Chapter 9: MoE token routing).

Rank r's chunk j is meant for rank j, and lands in rank j's chunk r. The
``direct`` algorithm posts all N-1 exchanges of a rank at once, in one round
(MPICH's medium-message algorithm, Thakur, Rabenseifner and Gropp 2005): every
send reads the buffer before any receive lands, so it works in place. Each
rank sends and receives (N-1)/N of its buffer.
"""
from __future__ import annotations

from warmup_kit.schedule import Schedule, Transfer


def direct_all_to_all(n: int) -> Schedule:
    """One round: every rank sends chunk j straight to rank j."""
    rnd = [Transfer(src=r, dst=j, chunks=(j,), dst_chunks=(r,))
           for r in range(n) for j in range(n) if j != r]
    return Schedule(name="direct", collective="all_to_all", ranks=n, chunks=n,
                    rounds=[rnd] if rnd else [])
