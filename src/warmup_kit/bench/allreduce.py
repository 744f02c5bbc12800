"""All-reduce for the bench: every rank ends with the reduction of all inputs.

size = count * itemsize; busbw = algbw * 2(n-1)/n (nccl-tests
doc/PERFORMANCE.md: each rank sends and receives 2(n-1)/n of the buffer).
Ours is the public call, out of place into the preallocated output, as the
library's is.
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
    return reduced(n, 0, lay.recv, dtype, op)


def run_ours(algorithm, b, comm, op, root, timeout):
    return collectives.allreduce(b.send, comm, out=b.recv, algorithm=algorithm, op=op,
                        timeout=timeout)


def run_mpi(world, b, op, root, rank):
    world.Allreduce(b.send, b.recv, op=mpi_op(op))
    return b.recv


COLLECTIVE = Collective("allreduce", layout, init, expected, run_ours, run_mpi)
