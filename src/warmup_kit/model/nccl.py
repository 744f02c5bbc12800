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
* NVLS-tree: NVLS inside islands, a tree across them (algbw = half the
  island's NICs, or all of them on two islands: :func:`nvls_tree_share`).

Protocols scale bandwidth as tuning.cc does, with its ceilings: ring LL
at half the bus bandwidth capped by ``llMaxBws`` (by GPU architecture on
one node, by CPU vendor and node count across nodes), ring LL128 at 0.92
capped per channel, tree LL at 1/3.8 of the tree bandwidth capped by
``llMaxBws``, tree LL128 at 7/9 (one node) or 120/128 capped per channel;
and latency (tuning.cc ``baseLat`` and ``hwLat``). Bus bandwidth follows nccl-tests:
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

# --- protocol ceilings, GB/s, from NCCL src/graph/tuning.cc (NCCL 2.2x).
# Each table is indexed [row][min(nodes, 3) - 1 mapped to N1, N2, N4+]:
# tuning.cc's index2 = nNodes <= 2 ? nNodes - 1 : 2.
#: tuning.cc llMaxBws, single node: the row of the GPU architecture
#: (Volta 39.0, Ampere 87.7, Hopper 141.0, Blackwell 2 x 141.0).
LL_MAX_GBPS_ONE_NODE = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0,
                        "blackwell": 282.0}
#: tuning.cc llMaxBws, several nodes: the row of the CPU vendor (index1 = 1
#: for AMD or mixed CPUs, else 0), columns N2 and N4+; the N2 value is
#: commented there as the average of ring and tree.
LL_MAX_GBPS_MULTI_NODE = {"intel": (39.0, 20.4), "amd": (22.5, 19.0)}
#: tuning.cc perChMaxRingLL128Bws: LL128 ring ceiling per channel (N1/N2/N4).
RING_LL128_PER_CH_GBPS = {"volta": (20.0, 20.0, 20.0),
                          "ampere": (20.0, 20.0, 20.0),
                          "hopper": (36.7, 36.7, 36.7),
                          "blackwell": (40.0, 40.0, 40.0)}
#: tuning.cc perChMaxTreeLL128Bws: LL128 tree ceiling per channel.
TREE_LL128_PER_CH_GBPS = {"volta": (20.0, 20.0, 20.0),
                          "ampere": (20.0, 20.0, 20.0),
                          "hopper": (36.7, 36.7, 29.0),
                          "blackwell": (55.6, 31.67, 20.0)}
#: tuning.cc perChMaxTreeBws: tree all-reduce ceiling per channel.
TREE_PER_CH_GBPS = {"volta": (26.5, 18.5, 10.0),
                    "ampere": (24.0, 23.6, 17.8),
                    "hopper": (38.7, 41.4, 36.0)}
#: tuning.cc: ring LL busBw = min(llMaxBw, busBw * .5)
RING_LL_FACTOR = 0.5
#: tuning.cc: ring LL128 busBw = min(busBw * 0.92, nChannels * perCh...)
RING_LL128_FACTOR = 0.92
#: tuning.cc: tree LL busBw = min(busBw * 1.0/3.8, llMaxBw) (the tree LL
#: factor), applied after the tree correction .92
TREE_LL_FACTOR = 1.0 / 3.8
#: tuning.cc: tree LL128 busBw *= 7/9 on one node, 120/128 across nodes
TREE_LL128_FACTOR = {True: 7.0 / 9.0, False: 120.0 / 128.0}
#: CPU vendor of each system (multi-node LL ceilings depend on it): DGX
#: A100 has AMD EPYC 7742 CPUs (DGX A100 user guide); DGX H100 and DGX B200
#: Intel Xeon Platinum (user guides); GB200's Grace is neither AMD nor mixed,
#: which tuning.cc treats like Intel (index1 = 0).
CPU_VENDOR = {"dgx-a100": "amd"}


def arch(s: System) -> str:
    """NCCL's compute-capability class of the system's GPU."""
    name = s.gpu.name
    if "A100" in name or "L40" in name:     # sm80 / sm89: tuning.cc's
        return "ampere"                     # AMPERE row (compCap >= 80)
    if "H100" in name or "H200" in name:
        return "hopper"
    if "B200" in name or "B100" in name:
        return "blackwell"
    if "MI300" in name:     # RCCL's own tables are not modelled: the
        return "hopper"     # Hopper row stands in (LL/LL128 caps only)
    return "volta"


def channels(k: int) -> int:
    """Channels NCCL runs for a group with ``k`` ranks per island: two per
    GPU/NIC up to 32 (NCCL's usual 16 on an 8-GPU DGX node, as its
    ``NCCL_DEBUG=INFO`` log reports; an assumption of this model, not a
    tuning.cc constant). Only the per-channel ceilings use it."""
    return max(2, min(32, 2 * k))


def protocol_busbw(algorithm: str, protocol: str, bus_gbps: float,
                   s: System, N: int, k: int) -> float:
    """Bus bandwidth (GB/s) NCCL's tuning model grants ``algorithm`` with
    ``protocol``, from the hardware bus bandwidth ``bus_gbps``, with the
    LL / LL128 ceilings (tuning.cc, see the tables above)."""
    a = arch(s)
    col = min(N, 3) - 1
    if N == 1:
        ll_max = LL_MAX_GBPS_ONE_NODE[a]
    else:
        ll_max = LL_MAX_GBPS_MULTI_NODE[
            CPU_VENDOR.get(s.name.split("/")[0], "intel")][min(col, 2) - 1]
    nch = channels(k)
    if algorithm == "ring":
        if protocol == "LL":
            return min(ll_max, bus_gbps * RING_LL_FACTOR)
        if protocol == "LL128":
            return min(bus_gbps * RING_LL128_FACTOR,
                       nch * RING_LL128_PER_CH_GBPS[a][col])
        return bus_gbps
    # tree all-reduce
    per_ch = TREE_PER_CH_GBPS.get(a, TREE_PER_CH_GBPS["hopper"])[col]
    tree = min(bus_gbps * TREE_CORRECTION, nch * per_ch)
    if protocol == "LL":
        return min(tree * TREE_LL_FACTOR, ll_max)
    if protocol == "LL128":
        return min(tree * TREE_LL128_FACTOR[N == 1],
                   nch * TREE_LL128_PER_CH_GBPS[a][col])
    return tree


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
    """(intra class, intra B/s, inter B/s, inter class) of a group with
    ``k`` ranks in each of ``N`` islands (packed placement).

    Inside an island a rank has its NVLink (a mesh: ``k - 1`` of its
    ``nvlink_domain - 1`` links) or, without NVLink, its PCIe link. Between
    islands an island has its ranks' share of the NICs or, where islands
    are smaller than a node (bridged PCIe cards) and the group fits in one
    node, its ranks' PCIe links.
    """
    intra = "nvlink" if s.nvlink is not None else "pcie"
    bw_intra = (s.nvlink or s.pcie).bytes_per_s
    if s.nvlink is not None and s.intra == "mesh":
        bw_intra *= max(1, k - 1) / max(1, s.nvlink_domain - 1)
    nics = k if s.nics_per_node is None else max(
        1, k * s.nics_per_node // s.gpus_per_node)
    bw_x, inter = nics * s.nic.bytes_per_s, "net"
    if s.nvlink is not None and s.nvlink_domain < s.gpus_per_node:
        bw_pcie = k * s.pcie.bytes_per_s
        if N * s.nvlink_domain <= s.gpus_per_node:
            bw_x, inter = bw_pcie, "pcie"
        else:
            bw_x = min(bw_x, bw_pcie)
    return intra, bw_intra, bw_x, inter


def time_s(collective: str, algorithm: str, protocol: str, nbytes: float,
           s: System, n: int, N: int, k: int) -> float:
    """Predicted time of one (algorithm, protocol); ``inf`` if NCCL would
    not run it on this group."""
    if n < 2:
        return 0.0
    frac, base, lat = PROTOCOLS[protocol]
    intra, bw_i, bw_x, net = _tiers(s, k, N)
    bus = min(bw_i if k > 1 else math.inf, bw_x if N > 1 else math.inf)
    if algorithm == "ring":
        if collective == "all_to_all":
            return _all_to_all_s(nbytes, s, n, N, k, frac, base, lat)
        ar = collective == "allreduce"
        steps = 2 * (n - 1) if ar else n - 1
        inter = (2 if ar else 1) * (N - 1)
        t_lat = base + (steps - inter) * lat[intra] + inter * lat[net]
        volume = {"allreduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n,
                  "all_gather": (n - 1) / n}.get(collective, 1.0)
        bw = protocol_busbw("ring", protocol, bus / 1e9, s, N, k) * 1e9
        return t_lat + volume * nbytes / bw
    if collective != "allreduce":
        return math.inf
    if algorithm == "tree":
        tl = TREE_LAT_S[protocol]
        t_lat = base + 2 * ((k - 1) * tl[intra]
                            + math.ceil(math.log2(N)) * tl[net])
        bw = protocol_busbw("tree", protocol, bus / 1e9, s, N, k) * 1e9
        return t_lat + nbytes / (0.5 * bw)
    if protocol != "Simple" or not s.nvls_efficiency or k < 2:
        return math.inf
    nvls_bw = bw_i * s.nvls_efficiency * k / (k + 1)
    if algorithm == "nvls" and N == 1:
        return base + NVLS_LAT_S + nbytes / nvls_bw
    if algorithm == "nvls_tree" and N > 1:
        tree_bw = nvls_tree_share(N) * bw_x * TREE_CORRECTION
        t_lat = base + NVLS_LAT_S + 2 * math.ceil(math.log2(N)) * lat["net"]
        return t_lat + nbytes / min(nvls_bw, tree_bw)
    return math.inf


def nvls_tree_share(N: int) -> float:
    """The share of an island's NIC bandwidth that NVLS-tree's all-reduce
    moves as algorithm bandwidth across ``N`` islands.

    NCCL splits the data over two binary trees. With three or more islands
    some island is an inner node of one tree: its NICs carry V/2 up and
    V/2 down to each of two children and its parent, 2V each way in all,
    so the algorithm bandwidth is half the NICs'. With two islands both
    trees are one root and one leaf: each island's NICs carry V/2 of each
    tree each way, V in all, and the full NIC bandwidth is the algorithm
    bandwidth (tuning.cc: NVLS_TREE's ``bwInter`` is halved only when
    ``nNodes > 2``). This is why two-node NVLS systems report a busbw
    near twice their NICs' line rate.
    """
    return 1.0 if N == 2 else 0.5


def _all_to_all_s(nbytes, s, n, N, k, frac, base, lat) -> float:
    """Direct all-to-all: (k-1)/n of the buffer over NVLink, (n-k)/n over
    the GPU's share of its island's NICs (its own NIC on a DGX),
    concurrently."""
    intra, bw_i, bw_x, net = _tiers(s, k, N)
    t_i = (k - 1) / n * nbytes / (bw_i * frac)
    t_x = (n - k) / n * nbytes / (bw_x / k * frac)
    return base + (lat[net] if N > 1 else lat[intra]) + max(t_i, t_x)


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
