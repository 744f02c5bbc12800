"""The record every benchmarked collective fills in, as nccl-tests does.

nccl-tests (``src/common.h``, ``struct testColl``) describes a collective by
five things: its name, how a byte size becomes element counts, how to fill
the input and predict the output, its bus-bandwidth factor, and how to run
it. :class:`Collective` is that record; each collective has a small file in
this package that builds one (book, Chapter 5: nccl-tests vocabulary).

Inputs are small integers (stored in any numeric dtype) so that every
summation order gives the exact same answer: a result that differs from the
prediction in any element is a real bug, counted in the ``#wrong`` column.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from warmup_kit.model.costs import BUSBW_FACTORS
from warmup_kit.ops import OPS


MPI_NAMES = {"allreduce": "MPI_Allreduce",
             "reduce_scatter": "MPI_Reduce_scatter_block",
             "all_gather": "MPI_Allgather", "broadcast": "MPI_Bcast",
             "reduce": "MPI_Reduce", "all_to_all": "MPI_Alltoall"}


@dataclass
class Layout:
    """Element counts of one call: per-rank input, output and work buffer."""

    count: int          # elements in the reported size (nccl-tests "count")
    send: int
    recv: int
    block: int = 0      # elements per rank's block, where that applies


@dataclass
class Buffers:
    """Buffers allocated once per size (nccl-tests allocates once, too)."""

    send: np.ndarray
    recv: np.ndarray


@dataclass(frozen=True)
class Collective:
    """One collective for the harness: the five fields of nccl-tests.

    Attributes:
        name: a collective of :data:`warmup_kit.schedule.COLLECTIVES`.
        layout: ``(count, n) -> Layout``; ``count`` elements make the size
            reported in the table (rounded so every rank gets whole blocks).
        init: ``(rank, n, layout, dtype, op, root) -> sendbuf``.
        expected: ``(rank, n, layout, dtype, op, root) -> array or None``
            (None: this rank's output is not defined, e.g. reduce off-root).
        run_ours: ``(algorithm, bufs, comm, op, root, timeout) -> result``:
            the public call of :mod:`warmup_kit.collectives` a reader makes.
        run_mpi: ``(mpi_comm, bufs, op, root, rank) -> result`` with the MPI
            library's own collective.
        reduces: whether ``op`` applies.
    """

    name: str
    layout: Callable[[int, int], Layout]
    init: Callable
    expected: Callable
    run_ours: Callable
    run_mpi: Callable
    reduces: bool = True

    @property
    def call(self) -> str:
        """The public call timed as ours."""
        return (f"warmup_kit.{self.name}(sendbuf, comm, out=recvbuf, "
                "algorithm=...)")

    @property
    def mpi_call(self) -> str:
        return MPI_NAMES[self.name]

    def busbw_factor(self, n: int) -> float:
        """algbw -> busbw (nccl-tests doc/PERFORMANCE.md), from the one
        table of the model, :data:`warmup_kit.model.costs.BUSBW_FACTORS`."""
        return BUSBW_FACTORS[self.name](n)

    def alloc(self, lay: Layout, dtype, empty=np.empty) -> Buffers:
        """Buffers for one size, from ``empty(n, dtype)`` (the
        communicator's allocator: shared memory for ``ShmComm``)."""
        return Buffers(empty(lay.send, dtype), empty(lay.recv, dtype))


# ------------------------------------------------------------------ data
def pattern(rank: int, start: int, length: int, dtype, op: str | None
            ) -> np.ndarray:
    """Rank ``rank``'s input elements ``[start, start + length)``.

    Reductions get values in 1..23 ("prod": 1 or 2), so sums over up to 89
    ranks (products over 24) are exact even in float16 / float32. Copies
    (gather, broadcast, all-to-all) get values in 0..1020 that depend on
    the rank, so a block that lands in the wrong place shows.
    """
    i = np.arange(start, start + length, dtype=np.int64)
    if op == "prod":
        v = 1 + (i + rank) % 2
    elif op is None:
        v = (i * 7 + rank * 131 + 3) % 1021
    else:
        v = (i * 7 + rank * 13 + 3) % 23 + 1
    return v.astype(dtype)


def reduced(n: int, start: int, length: int, dtype, op: str) -> np.ndarray:
    """The reduction over ranks 0..n-1 of :func:`pattern` (exact)."""
    ufunc = OPS[op]
    acc = pattern(0, start, length, dtype, op)
    for r in range(1, n):
        ufunc(acc, pattern(r, start, length, dtype, op), out=acc)
    return acc


def wrong(result: np.ndarray | None, expected: np.ndarray | None) -> int:
    """Elements of ``result`` that differ from ``expected`` (nccl-tests'
    ``#wrong``); a missing or mis-shaped result counts every element."""
    if expected is None:
        return 0
    if result is None or result.shape != expected.shape:
        return int(expected.size)
    return int(np.count_nonzero(result != expected))


def mpi_op(op: str):
    """The MPI reduction operator named ``op``."""
    from mpi4py import MPI
    if op == "avg":
        raise ValueError("the MPI library has no 'avg' reduction")
    return {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX,
            "min": MPI.MIN}[op]


def whole_blocks(count: int, n: int) -> int:
    """``count`` rounded down to a multiple of ``n`` (nccl-tests does so)."""
    return count // n * n
