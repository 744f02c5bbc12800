"""All-to-all for the bench: block j of rank i's input ends as block i of
rank j's output.

size = count * itemsize (each rank's whole input); busbw = algbw * (n-1)/n
(nccl-tests: all but one block leave each rank).
"""
from __future__ import annotations

import numpy as np

from warmup_kit import collectives
from warmup_kit.bench.record import Collective, Layout, pattern, whole_blocks


def layout(count: int, n: int) -> Layout:
    count = whole_blocks(count, n)
    return Layout(count, count, count, count // n)


def init(rank, n, lay, dtype, op, root):
    return pattern(rank, 0, lay.send, dtype, None)


def expected(rank, n, lay, dtype, op, root):
    c = lay.block
    return np.concatenate([pattern(j, rank * c, c, dtype, None)
                           for j in range(n)])


def run_ours(algorithm, b, comm, op, root, timeout):
    return collectives.all_to_all(b.send, comm, out=b.recv, algorithm=algorithm,
                         timeout=timeout)


def run_mpi(world, b, op, root, rank):
    world.Alltoall(b.send, b.recv)
    return b.recv


COLLECTIVE = Collective("all_to_all", layout, init, expected, run_ours,
                        run_mpi, reduces=False)
