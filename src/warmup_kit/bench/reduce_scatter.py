"""Reduce-scatter for the bench: rank r ends with block r of the reduction.

size = count * itemsize (the whole input); busbw = algbw * (n-1)/n.
Ours reduces in a work buffer (out of place from the input) and hands back
a view of this rank's block: no copy.
"""
from __future__ import annotations

from warmup_kit.execute.exchange import run_schedule
from warmup_kit.bench.record import (
    Collective, Layout, mpi_op, pattern, reduced, whole_blocks)


def layout(count: int, n: int) -> Layout:
    count = whole_blocks(count, n)
    return Layout(count, count, count // n, count // n)


def init(rank, n, lay, dtype, op, root):
    return pattern(rank, 0, lay.send, dtype, op)


def expected(rank, n, lay, dtype, op, root):
    return reduced(n, rank * lay.block, lay.block, dtype, op)


def run_ours(s, b, comm, op, deadline, root, rank):
    run_schedule(s, b.work, comm, op=op, deadline=deadline, src=b.send)
    c = b.recv.size
    return b.work[rank * c:(rank + 1) * c]


def run_mpi(world, b, op, root, rank):
    world.Reduce_scatter_block(b.send, b.recv, op=mpi_op(op))
    return b.recv


COLLECTIVE = Collective("reduce_scatter", layout, init, expected, run_ours,
                        run_mpi, work=True)
