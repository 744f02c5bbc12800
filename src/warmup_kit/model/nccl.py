"""NCCL's choice of algorithm and protocol, as a cost model (Chapter 5).

NCCL predicts ``time = latency + bytes / bandwidth`` for every algorithm
(ring, tree, NVLS, NVLS-tree) and protocol (LL, LL128, Simple) and runs the
fastest (``src/graph/tuning.cc``). This module does the same with the
figures of :mod:`warmup_kit.model.hardware`, for a group of ``n`` ranks spread
over ``N`` NVLink islands with ``k`` ranks in each:

* ring (multi-channel, one channel per NIC rail): bus bandwidth = the
  slower of one GPU's NVLink and the island's ``k`` NICs; 2(n-1) steps.
* tree (NCCL's double binary tree across islands, chains inside): algbw
  = half the bottleneck bandwidth, x0.92 (NCCL's tree correction);
  2 (k - 1 + log2 N) steps.
* NVLS (NVLink SHARP, one island, Hopper+): the switch reduces; each GPU
  sends and receives V (k+1)/k, at ``nvls_efficiency`` of NVLink.
* NVLS-tree: NVLS inside islands, a tree across them.

Protocols scale bandwidth (LL 0.5, LL128 0.92, Simple 1) and latency
(tuning.cc ``baseLat`` and ``hwLat``). Bus bandwidth follows nccl-tests:
``busbw = nbytes / time * BUSBW_FACTORS[collective](n)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from warmup_kit.model.costs import busbw_factor
from warmup_kit.model.hardware import Cluster, System
from warmup_kit.model.topology import group_shape, packed

#: protocol -> (bandwidth fraction, base latency s, per-step latency s on
#: NVLink / PCIe / network) for ring; tree uses TREE_LAT_S. From NCCL
#: src/graph/tuning.cc (baseLat, hwLat), rounded.
PROTOCOLS: dict[str, tuple[float, float, dict[str, float]]] = {
    "LL": (0.5, 6.6e-6, {"nvlink": 0.6e-6, "pcie": 1.0e-6, "net": 2.7e-6}),
    "LL128": (0.92, 14e-6, {"nvlink": 1.9e-6, "pcie": 2.5e-6,
                            "net": 4.0e-6}),
    "Simple": (1.0, 8.4e-6, {"nvlink": 3.4e-6, "pcie": 5.7e-6,
                             "net": 14e-6}),
}
TREE_LAT_S = {"LL": {"nvlink": 0.6e-6, "pcie": 1.0e-6, "net": 5.0e-6},
              "LL128": {"nvlink": 1.25e-6, "pcie": 1.9e-6, "net": 8.5e-6},
              "Simple": {"nvlink": 4.0e-6, "pcie": 4.0e-6, "net": 14e-6}}
NVLS_LAT_S = 25e-6          # tuning.cc hwLat NVLS / NVLS-tree, Simple
TREE_CORRECTION = 0.92      # tuning.cc: tree busBw *= .92
ALGORITHMS = ("ring", "tree", "nvls", "nvls_tree")


@dataclass(frozen=True)
class Choice:
    """One (algorithm, protocol) prediction for a collective."""

    collective: str
    algorithm: str
    protocol: str
    nbytes: int
    n: int
    time_s: float

    @property
    def algbw_gbps(self) -> float:
        return self.nbytes / self.time_s / 1e9 if self.time_s else 0.0

    @property
    def busbw_gbps(self) -> float:
        return self.algbw_gbps * busbw_factor(self.collective, self.n)


def _tiers(s: System, k: int, N: int):
    """(intra class, intra B/s, inter B/s) of one rank's links."""
    intra = "nvlink" if s.nvlink is not None else "pcie"
    bw_intra = (s.nvlink or s.pcie).bytes_per_s
    nics = k if s.nics_per_node is None else max(
        1, k * s.nics_per_node // s.gpus_per_node)
    return intra, bw_intra, nics * s.nic.bytes_per_s


def time_s(collective: str, algorithm: str, protocol: str, nbytes: float,
           s: System, n: int, N: int, k: int) -> float:
    """Predicted time of one (algorithm, protocol); ``inf`` if NCCL would
    not run it on this group."""
    if n < 2:
        return 0.0
    frac, base, lat = PROTOCOLS[protocol]
    intra, bw_i, bw_x = _tiers(s, k, N)
    bus = min(bw_i if k > 1 else math.inf, bw_x if N > 1 else math.inf)
    if algorithm == "ring":
        if collective == "all_to_all":
            return _all_to_all_s(nbytes, s, n, N, k, frac, base, lat)
        ar = collective == "allreduce"
        steps = 2 * (n - 1) if ar else n - 1
        inter = (2 if ar else 1) * (N - 1)
        t_lat = base + (steps - inter) * lat[intra] + inter * lat["net"]
        volume = {"allreduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n,
                  "all_gather": (n - 1) / n}.get(collective, 1.0)
        return t_lat + volume * nbytes / (bus * frac)
    if collective != "allreduce":
        return math.inf
    if algorithm == "tree":
        tl = TREE_LAT_S[protocol]
        t_lat = base + 2 * ((k - 1) * tl[intra]
                            + math.ceil(math.log2(N)) * tl["net"])
        return t_lat + nbytes / (0.5 * bus * frac * TREE_CORRECTION)
    if protocol != "Simple" or not s.nvls_efficiency or k < 2:
        return math.inf
    nvls_bw = bw_i * s.nvls_efficiency * k / (k + 1)
    if algorithm == "nvls" and N == 1:
        return base + NVLS_LAT_S + nbytes / nvls_bw
    if algorithm == "nvls_tree" and N > 1:
        tree_bw = 0.5 * bw_x * TREE_CORRECTION
        t_lat = base + NVLS_LAT_S + 2 * math.ceil(math.log2(N)) * lat["net"]
        return t_lat + nbytes / min(nvls_bw, tree_bw)
    return math.inf


def _all_to_all_s(nbytes, s, n, N, k, frac, base, lat) -> float:
    """Direct all-to-all: (k-1)/n of the buffer over NVLink, (n-k)/n over
    the GPU's own NIC, concurrently."""
    intra, bw_i, _ = _tiers(s, k, N)
    t_i = (k - 1) / n * nbytes / (bw_i * frac)
    t_x = (n - k) / n * nbytes / (s.nic.bytes_per_s * frac)
    return base + (lat["net"] if N > 1 else lat[intra]) + max(t_i, t_x)


@lru_cache(maxsize=65536)
def best_for_shape(collective: str, nbytes: float, s: System, n: int, N: int,
                   k: int) -> Choice:
    """Fastest (algorithm, protocol) for a group of shape (n, N, k)."""
    busbw_factor(collective, n)     # validates the name
    if n < 2:
        return Choice(collective, "none", "none", int(nbytes), n, 0.0)
    cands = [Choice(collective, a, p, int(nbytes), n,
                    time_s(collective, a, p, nbytes, s, n, N, k))
             for a in ALGORITHMS for p in PROTOCOLS]
    return min(cands, key=lambda c: c.time_s)


def shape_of(cluster: Cluster, ranks: int | Sequence[int] | None
             ) -> tuple[int, int, int]:
    """(n, islands, ranks per island) of a rank group on ``cluster``."""
    if ranks is None:
        ranks = cluster.n_gpus
    gpus = packed(cluster, ranks) if isinstance(ranks, int) else tuple(ranks)
    if not gpus or max(gpus) >= cluster.n_gpus or min(gpus) < 0:
        raise ValueError("ranks must name GPUs of the cluster")
    N, k = group_shape(cluster, gpus)
    return len(gpus), N, k


def best(collective: str, nbytes: int, cluster: Cluster,
         ranks: int | Sequence[int] | None = None) -> Choice:
    """The (algorithm, protocol) NCCL's model would pick, with its time.

    Args:
        collective: a key of :data:`warmup_kit.model.costs.BUSBW_FACTORS`.
        nbytes: the nccl-tests "size" (bytes per rank; for all-gather the
            output size).
        cluster: from :func:`warmup_kit.model.hardware.cluster`.
        ranks: ``None`` (every GPU), a count (packed from GPU 0) or GPU ids.
    """
    n, N, k = shape_of(cluster, ranks)
    return best_for_shape(collective, float(nbytes), cluster.system, n, N, k)


def busbw(collective: str, nbytes: int, cluster: Cluster,
          ranks: int | Sequence[int] | None = None) -> float:
    """Predicted nccl-tests bus bandwidth (GB/s) of the best algorithm."""
    return best(collective, nbytes, cluster, ranks).busbw_gbps


def choices(collective: str, nbytes: int, cluster: Cluster,
            ranks: int | Sequence[int] | None = None) -> list[Choice]:
    """Every runnable (algorithm, protocol) with its predicted time."""
    n, N, k = shape_of(cluster, ranks)
    out = [Choice(collective, a, p, int(nbytes), n,
                  time_s(collective, a, p, nbytes, cluster.system, n, N, k))
           for a in ALGORITHMS for p in PROTOCOLS]
    return sorted((c for c in out if math.isfinite(c.time_s)),
                  key=lambda c: c.time_s)
