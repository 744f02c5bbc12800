"""Broadcast for the bench: every rank ends with the root's buffer.

size = count * itemsize; busbw = algbw * 1 (nccl-tests: the root's link
carries the whole buffer once whatever the algorithm).
"""
from __future__ import annotations

from warmup_kit import collectives
from warmup_kit.bench.record import Collective, Layout, pattern


def layout(count: int, n: int) -> Layout:
    return Layout(count, count, count)


def init(rank, n, lay, dtype, op, root):
    return pattern(rank, 0, lay.send, dtype, None)


def expected(rank, n, lay, dtype, op, root):
    return pattern(root, 0, lay.recv, dtype, None)


def run_ours(algorithm, b, comm, op, root, timeout):
    return collectives.broadcast(b.send, comm, root=root, out=b.recv,
                        algorithm=algorithm, timeout=timeout)


def run_mpi(world, b, op, root, rank):
    if rank == root:
        b.recv[:] = b.send
    world.Bcast(b.recv, root=root)
    return b.recv


COLLECTIVE = Collective("broadcast", layout, init, expected, run_ours,
                        run_mpi, reduces=False)
