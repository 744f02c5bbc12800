"""Where ranks sit: link classes, rank placement, the 3D rank grid.

Book, Chapters 1 and 6. A *placement* maps rank ``r`` to a global GPU id
(``node * gpus_per_node + local``). Two GPUs talk over NVLink when they share
an NVLink domain, over PCIe when they share a node without one, and over
their NICs otherwise.

:class:`Layout` is the one object that computes the 3D-parallel rank grid
(picotron-style: the world reshaped to dp x pp x tp, TP innermost by
default, as in Narayanan et al. 2021, section 3.3: "tensor parallelism inside
a node, pipeline and data parallelism across nodes"). Nothing else
recomputes which ranks form a TP, PP or DP group.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np

from warmup_kit.model.hardware import Cluster

LINK_CLASSES = ("nvlink", "pcie", "net")
NVLINK, PCIE, NET = 0, 1, 2
AXES = ("dp", "pp", "tp")


def link_class_ids(cluster: Cluster, src_gpu: np.ndarray,
                   dst_gpu: np.ndarray) -> np.ndarray:
    """Vectorized link class (``NVLINK``, ``PCIE``, ``NET``) per GPU pair."""
    s = cluster.system
    src_gpu, dst_gpu = np.asarray(src_gpu), np.asarray(dst_gpu)
    same_domain = (src_gpu // s.nvlink_domain) == (dst_gpu // s.nvlink_domain)
    same_node = (src_gpu // s.gpus_per_node) == (dst_gpu // s.gpus_per_node)
    out = np.full(src_gpu.shape, NET, dtype=np.int64)
    out[same_node] = PCIE
    if s.nvlink is not None:
        out[same_domain] = NVLINK
    return out


def link_class(cluster: Cluster, gpu_a: int, gpu_b: int) -> str:
    """``"nvlink"``, ``"pcie"`` or ``"net"``: the link GPUs a and b use."""
    for g in (gpu_a, gpu_b):
        if not 0 <= g < cluster.n_gpus:
            raise ValueError(f"GPU {g} not in a {cluster.n_gpus}-GPU cluster")
    return LINK_CLASSES[int(link_class_ids(cluster, np.array(gpu_a),
                                           np.array(gpu_b)))]


def link_of(cluster: Cluster, kind: str):
    """The :class:`~warmup_kit.model.hardware.Link` of class ``kind``."""
    s = cluster.system
    return {"nvlink": s.nvlink, "pcie": s.pcie, "net": s.nic}[kind]


def packed(cluster: Cluster, n: int) -> tuple[int, ...]:
    """Ranks 0..n-1 on GPUs 0..n-1: fill node 0, then node 1, ..."""
    if n > cluster.n_gpus:
        raise ValueError(f"{n} ranks do not fit on {cluster.n_gpus} GPUs")
    return tuple(range(n))


def spread(cluster: Cluster, n: int, nodes: int) -> tuple[int, ...]:
    """``n`` ranks split evenly over the first ``nodes`` nodes.

    ``spread(c, 8, 2)`` on a DGX puts ranks 0-3 on node 0 and 4-7 on node 1:
    the "TP group spread over two nodes" of Lab 02.
    """
    if n % nodes:
        raise ValueError(f"{n} ranks do not split evenly over {nodes} nodes")
    per = n // nodes
    g = cluster.gpus_per_node
    if nodes > cluster.nodes or per > g:
        raise ValueError(f"{n} ranks over {nodes} nodes do not fit")
    return tuple(node * g + i for node in range(nodes) for i in range(per))


def group_shape(cluster: Cluster, gpus: Sequence[int]) -> tuple[int, int]:
    """(islands, ranks per island) of a group of GPUs.

    An island is an NVLink domain (a node without NVLink). Uneven groups
    report the smallest island count per island: the bottleneck one.
    """
    s = cluster.system
    size = s.nvlink_domain if s.nvlink is not None else s.gpus_per_node
    isl = np.asarray(gpus) // size
    _, counts = np.unique(isl, return_counts=True)
    return len(counts), int(counts.min())


@dataclass(frozen=True)
class Layout:
    """The rank grid of a 3D-parallel job (Narayanan et al. 2021, sec. 3).

    The world of ``tp * pp * dp`` ranks is reshaped to a grid whose axes are
    ``order`` (outermost first); rank ``r`` sits on GPU ``r``. The default
    ``("dp", "pp", "tp")`` keeps each TP group on consecutive GPUs, i.e.
    inside a node; ``("pp", "dp", "tp")`` is Megatron-LM's order;
    ``("tp", "pp", "dp")`` spreads TP groups across nodes (the bad choice).

    Attributes:
        tp, pp, dp: group sizes.
        order: the axes, outermost first; a permutation of ``AXES``.
    """

    tp: int
    pp: int
    dp: int
    order: tuple[str, ...] = ("dp", "pp", "tp")

    def __post_init__(self) -> None:
        if sorted(self.order) != sorted(AXES):
            raise ValueError(f"order must be a permutation of {AXES}")
        if min(self.tp, self.pp, self.dp) < 1:
            raise ValueError("tp, pp and dp must be >= 1")

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    @cached_property
    def grid(self) -> np.ndarray:
        """Array of shape (dp, pp, tp): ``grid[d, p, t]`` is the rank."""
        sizes = {"dp": self.dp, "pp": self.pp, "tp": self.tp}
        g = np.arange(self.world).reshape([sizes[a] for a in self.order])
        return np.transpose(g, [self.order.index(a) for a in AXES])

    def coords(self, rank: int) -> dict[str, int]:
        """``{"dp": d, "pp": p, "tp": t}`` of ``rank``."""
        d, p, t = (int(x[0]) for x in np.nonzero(self.grid == rank))
        return {"dp": d, "pp": p, "tp": t}

    def groups(self, axis: str) -> list[tuple[int, ...]]:
        """All groups along ``axis`` ("tp", "pp" or "dp"), each a tuple of
        ranks ordered by their coordinate on that axis."""
        k = AXES.index(axis)
        moved = np.moveaxis(self.grid, k, -1).reshape(-1, self.grid.shape[k])
        return [tuple(int(r) for r in row) for row in moved]

    def group(self, axis: str, rank: int) -> tuple[int, ...]:
        """The ``axis`` group that contains ``rank``."""
        for g in self.groups(axis):
            if rank in g:
                return g
        raise ValueError(f"rank {rank} not in a {self.world}-rank layout")

    def neighbours(self, rank: int) -> dict[str, int | None]:
        """Previous and next pipeline stage of ``rank`` (None at the ends)."""
        g = self.group("pp", rank)
        i = g.index(rank)
        return {"prev": g[i - 1] if i else None,
                "next": g[i + 1] if i + 1 < len(g) else None}

    def group_links(self, cluster: Cluster, axis: str) -> str:
        """Slowest link class inside the ``axis`` groups on ``cluster``."""
        if self.world > cluster.n_gpus:
            raise ValueError(f"{self.world} ranks on {cluster.n_gpus} GPUs")
        worst = NVLINK
        for g in self.groups(axis):
            a = np.array(g)
            if len(a) > 1:
                worst = max(worst, int(link_class_ids(
                    cluster, a, np.roll(a, -1)).max()))
        return LINK_CLASSES[worst]

    def describe(self, cluster: Cluster) -> list[str]:
        """One line per rank: node, local GPU, dp/pp/tp coordinates."""
        g = cluster.gpus_per_node
        out = []
        for r in range(self.world):
            c = self.coords(r)
            out.append(f"rank {r:4d}: node {r // g} gpu {r % g}  "
                       f"dp {c['dp']} pp {c['pp']} tp {c['tp']}")
        return out
