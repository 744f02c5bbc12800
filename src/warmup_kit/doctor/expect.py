"""What the model expects of one result row: the bus bandwidth of every
(algorithm, protocol) NCCL could run for that collective, size and group
shape (:mod:`warmup_kit.model.nccl`), the best of them (NCCL's tuner picks
the fastest), and which one the measured number is nearest to.

The group shape is (ranks, nodes, ranks per node). Ranks sit packed, the
same count on every node (as ``mpirun -N k`` places them).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from warmup_kit.model import nccl
from warmup_kit.model.hardware import Cluster, System
from warmup_kit.model.topology import group_shape, spread

#: nccl-tests collective -> the model's, and a note where it is an
#: approximation. send/recv moves each rank's buffer once to its neighbour:
#: one pipelined ring step, which the model's broadcast prices.
PRICED_AS = {"allreduce": "allreduce", "all_gather": "all_gather",
             "reduce_scatter": "reduce_scatter", "all_to_all": "all_to_all",
             "broadcast": "broadcast", "reduce": "reduce",
             "sendrecv": "broadcast"}
LABELS = {"ring": "ring", "tree": "tree", "nvls": "NVLS",
          "nvls_tree": "NVLS-tree"}


@dataclass(frozen=True)
class Shape:
    """Where a run's ranks sit: ``n`` ranks, ``N`` islands (NVLink
    domains, or nodes without NVLink), ``k`` ranks per island."""

    n: int
    N: int
    k: int


def shape(cluster: Cluster, ranks: int, nodes: int) -> Shape:
    """The group shape of ``ranks`` ranks spread evenly over ``nodes``."""
    gpus = spread(cluster, ranks, nodes)
    N, k = group_shape(cluster, gpus)
    return Shape(ranks, N, k)


@dataclass(frozen=True)
class Expected:
    """The model's numbers for one row.

    Attributes:
        per_algorithm: algorithm -> (best protocol, busbw GB/s), for every
            algorithm NCCL could run here.
        best: the fastest algorithm (NCCL's pick).
    """

    per_algorithm: tuple[tuple[str, str, float], ...]
    best: str
    best_gbps: float

    def gbps(self, algorithm: str) -> float | None:
        for a, _, b in self.per_algorithm:
            if a == algorithm:
                return b
        return None

    def label(self, algorithm: str) -> str:
        for a, p, _ in self.per_algorithm:
            if a == algorithm:
                return f"{LABELS.get(a, a)}/{p}"
        return algorithm

    def nearest(self, measured: float) -> str:
        """The algorithm whose prediction is nearest ``measured`` (ratio on
        a log scale)."""
        if measured <= 0:
            return min(self.per_algorithm, key=lambda t: t[2])[0]
        return min(self.per_algorithm,
                   key=lambda t: abs(math.log(measured / t[2]))
                   if t[2] > 0 else math.inf)[0]


@lru_cache(maxsize=1 << 16)
def expected(collective: str, nbytes: int, system: System, sh: Shape
             ) -> Expected | None:
    """The model's busbw per algorithm for one row; None where the model
    has nothing to say (one rank, a collective it does not price)."""
    coll = PRICED_AS.get(collective)
    if coll is None or sh.n < 2 or nbytes <= 0:
        return None
    per: dict[str, tuple[str, float]] = {}
    for a in nccl.ALGORITHMS:
        for p in nccl.PROTOCOLS:
            t = nccl.time_s(coll, a, p, float(nbytes), system, sh.n, sh.N,
                            sh.k)
            if not math.isfinite(t) or t <= 0:
                continue
            bw = nccl.Choice(coll, a, p, nbytes, sh.n, t).busbw_gbps
            if a not in per or bw > per[a][1]:
                per[a] = (p, bw)
    if not per:
        return None
    best = max(per, key=lambda a: per[a][1])
    return Expected(tuple((a, p, b) for a, (p, b) in per.items()), best,
                    per[best][1])
