"""Reduce-scatter for the bench: rank r ends with block r of the reduction.

size = count * itemsize (the whole input); busbw = algbw * (n-1)/n.
Ours is the public call: it reduces in a work buffer kept on the communicator
(out of place from the input) and copies this rank's block into ``out``.
"""
from __future__ import annotations

from warmup_kit import collectives
from warmup_kit.bench.record import (
    Collective, Layout, mpi_op, pattern, reduced, whole_blocks)


def layout(count: int, n: int) -> Layout:
    count = whole_blocks(count, n)
    return Layout(count, count, count // n, count // n)


def init(rank, n, lay, dtype, op, root):
    return pattern(rank, 0, lay.send, dtype, op)


def expected(rank, n, lay, dtype, op, root):
    return reduced(n, rank * lay.block, lay.block, dtype, op)


def run_ours(algorithm, b, comm, op, root, timeout):
    return collectives.reduce_scatter(b.send, comm, out=b.recv, algorithm=algorithm,
                             op=op, timeout=timeout)


def run_mpi(world, b, op, root, rank):
    world.Reduce_scatter_block(b.send, b.recv, op=mpi_op(op))
    return b.recv


COLLECTIVE = Collective("reduce_scatter", layout, init, expected, run_ours,
                        run_mpi)
