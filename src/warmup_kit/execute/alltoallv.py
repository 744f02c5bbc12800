"""All-to-all with uneven blocks (MPI's ``Alltoallv``; book, Chapter 9).

Mixture-of-experts routing sends each token to the rank that holds its
expert, so rank i sends ``send_counts[j]`` rows to rank j and the counts
differ from pair to pair and from step to step. A rank posts a receive
from every other rank straight into its slot of the result and a send of
every block straight out of the input (MPICH's pairwise-exchange idea, all
at once), then copies its own block. If the receive counts are not known,
they are exchanged first: one all-to-all of N integers.
"""
from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np

from warmup_kit.comm.base import TAG_MAX, Comm

_COUNTS_TAG = TAG_MAX - 3


def check_counts(counts, n: int, name: str) -> list[int] | None:
    """``counts`` as N non-negative ints, or None."""
    if counts is None:
        return None
    try:
        out = [int(c) for c in counts]
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be {n} integers, got {counts!r}") \
            from None
    if len(out) != n or any(c < 0 for c in out) or any(
            c != v for c, v in zip(out, counts)):
        raise ValueError(f"{name} must be {n} non-negative integers (one per "
                         f"rank), got {list(counts)}")
    return out


def exchange_counts(comm: Comm, send_counts: Sequence[int],
                    deadline) -> list[int]:
    """Every rank learns how many rows each other rank sends it."""
    mine = np.asarray(send_counts, np.int64)
    got = np.empty(comm.size, np.int64)
    got[comm.rank] = mine[comm.rank]
    one = {p: got[p:p + 1] for p in range(comm.size) if p != comm.rank}
    with comm.control():             # metadata, apart from the payload
        comm.exchange([(p, mine[p:p + 1]) for p in one], list(one.items()),
                      tag=_COUNTS_TAG, deadline=deadline)
    return [int(c) for c in got]


def alltoallv(x: np.ndarray, comm: Comm, send_counts: list[int],
              recv_counts: list[int] | None, out: np.ndarray | None,
              deadline) -> np.ndarray:
    """Rows ``send_counts[j]`` of ``x`` to rank j; the rows from every rank
    in rank order. Bytes and messages are counted by the transport."""
    if recv_counts is None:
        recv_counts = exchange_counts(comm, send_counts, deadline)
    unit = int(np.prod(x.shape[1:], dtype=np.int64))
    if out is None:
        out = np.empty((sum(recv_counts),) + x.shape[1:], x.dtype)
    src = np.ascontiguousarray(x).reshape(-1)
    dst = out.reshape(-1)
    soff = np.concatenate([[0], np.cumsum(send_counts)]) * unit
    roff = np.concatenate([[0], np.cumsum(recv_counts)]) * unit
    tag = zlib.crc32(f"all_to_allv|{x.dtype.str}|{unit}".encode()) % TAG_MAX
    me = comm.rank
    if recv_counts[me] != send_counts[me]:
        raise ValueError(f"rank {me}: recv_counts[{me}] = {recv_counts[me]} "
                         f"but send_counts[{me}] = {send_counts[me]}")
    reqs = [comm.irecv(dst[roff[p]:roff[p + 1]], p, tag)
            for p in range(comm.size) if p != me and recv_counts[p]]
    reqs += [comm.isend(src[soff[p]:soff[p + 1]], p, tag)
             for p in range(comm.size) if p != me and send_counts[p]]
    dst[roff[me]:roff[me + 1]] = src[soff[me]:soff[me + 1]]
    comm.waitall(reqs, deadline)
    return out
