"""All-gather for the bench: every rank ends with every rank's block.

size = count * itemsize (the whole output); busbw = algbw * (n-1)/n.
Ours places its own block in the output, then runs in place.
"""
from __future__ import annotations

import numpy as np

from warmup_kit import collectives
from warmup_kit.bench.record import Collective, Layout, pattern, whole_blocks


def layout(count: int, n: int) -> Layout:
    count = whole_blocks(count, n)
    return Layout(count, count // n, count, count // n)


def init(rank, n, lay, dtype, op, root):
    return pattern(rank, 0, lay.send, dtype, None)


def expected(rank, n, lay, dtype, op, root):
    return np.concatenate([pattern(r, 0, lay.block, dtype, None)
                           for r in range(n)])


def run_ours(algorithm, b, comm, op, root, timeout):
    return collectives.all_gather(b.send, comm, out=b.recv, algorithm=algorithm,
                         timeout=timeout)


def run_mpi(world, b, op, root, rank):
    world.Allgather(b.send, b.recv)
    return b.recv


COLLECTIVE = Collective("all_gather", layout, init, expected, run_ours,
                        run_mpi, reduces=False)
