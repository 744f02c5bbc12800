"""Reduce for the bench: the root ends with the reduction of all inputs.

size = count * itemsize; busbw = algbw * 1 (nccl-tests). Only the root's
output is checked.
"""
from __future__ import annotations

from warmup_kit import collectives
from warmup_kit.bench.record import (
    Collective, Layout, mpi_op, pattern, reduced)


def layout(count: int, n: int) -> Layout:
    return Layout(count, count, count)


def init(rank, n, lay, dtype, op, root):
    return pattern(rank, 0, lay.send, dtype, op)


def expected(rank, n, lay, dtype, op, root):
    return reduced(n, 0, lay.recv, dtype, op) if rank == root else None


def run_ours(algorithm, b, comm, op, root, timeout):
    return collectives.reduce(b.send, comm, root=root, out=b.recv, op=op,
                     algorithm=algorithm, timeout=timeout)


def run_mpi(world, b, op, root, rank):
    world.Reduce(b.send, b.recv, op=mpi_op(op), root=root)
    return b.recv


COLLECTIVE = Collective("reduce", layout, init, expected, run_ours, run_mpi)
