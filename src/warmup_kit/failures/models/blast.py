"""Blast radius: what one failed GPU, node or switch stalls, and what the
restart costs (book, Chapter 8).

In a synchronous 3D-parallel job (:class:`~warmup_kit.model.topology.
Layout`, rank r on GPU r) a failure spreads in a fixed order: first the
failed GPU's tensor-parallel group stalls, at its next all-reduce inside
a layer (microseconds); then its pipeline, when the next micro-batch's
activations do not arrive (milliseconds); then every data-parallel peer,
at the gradient all-reduce that ends the step. Within one step the whole
job is waiting. How many groups a failure *touches* depends on the
placement, and that decides what an elastic framework, one that drops
the damaged data-parallel replicas and carries on, has to give up.

A switch fails along the fabric's wiring (:class:`Fabric`): a top-of-rack
switch takes every NIC of its rack's servers (Llama 3's racks: two
servers of 8 GPUs per ToR); a leaf of a rail-optimised fabric (DGX
SuperPOD: NIC i of each of a scalable unit's 32 nodes on leaf i) takes
one GPU's NIC in each of 32 nodes. A GPU without its NIC still computes,
but its cross-node groups are cut: the model counts it as lost.

Costs are GPU-hours, for two recoveries: restart the whole job from the
last checkpoint (every GPU pays the detection, the restart and, on
average, half a checkpoint interval of lost work), or continue elastic
without the touched replicas until they are repaired.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from warmup_kit.model.hardware import Cluster
from warmup_kit.model.topology import Layout

KINDS = ("gpu", "node", "switch")
HOUR = 3600.0


@dataclass(frozen=True)
class Fabric:
    """Which switch each GPU's NIC is cabled to.

    Attributes:
        kind: ``"tor"`` (a switch per rack of ``nodes`` servers, every NIC
            of those servers on it) or ``"rail"`` (rail-optimised: per
            group of ``nodes`` servers, one leaf per rail, NIC i of each
            server on leaf i).
        nodes: servers per rack (tor) or per scalable unit (rail).
    """

    kind: str = "rail"
    nodes: int = 32

    def __post_init__(self) -> None:
        if self.kind not in ("tor", "rail") or self.nodes < 1:
            raise ValueError(f"fabric must be 'tor' or 'rail' with nodes >= "
                             f"1, got {self.kind!r}, {self.nodes}")

    def switch_of(self, cluster: Cluster, gpu: int) -> int:
        """The switch GPU ``gpu``'s NIC hangs off."""
        g = cluster.gpus_per_node
        node, local = divmod(gpu, g)
        group = node // self.nodes
        return group if self.kind == "tor" else group * g + local

    def gpus_behind(self, cluster: Cluster, switch: int) -> list[int]:
        return [x for x in range(cluster.n_gpus)
                if self.switch_of(cluster, x) == switch]


@dataclass(frozen=True)
class Blast:
    """What one failure takes down in one placement."""

    kind: str
    gpus: tuple[int, ...]          # lost (dead, or cut off the network)
    tp_groups: int                 # TP groups with a lost member
    pipelines: int                 # DP replicas (pipelines) touched
    world: int                     # synchronous: every rank stalls
    replica_gpus: int              # GPUs per pipeline (tp * pp)
    dp: int

    @property
    def elastic_loss(self) -> float:
        """Fraction of the job an elastic restart gives up (the touched
        replicas' GPUs)."""
        return self.pipelines / self.dp

    def restart_gpu_h(self, detect_s: float, restart_s: float,
                      interval_s: float) -> float:
        """GPU-hours of a full restart: every GPU waits for the detection
        and the restart and redoes half an interval on average."""
        return self.world * (detect_s + restart_s + interval_s / 2) / HOUR

    def elastic_gpu_h(self, detect_s: float, reconfig_s: float,
                      repair_s: float) -> float:
        """GPU-hours of continuing without the touched replicas: every GPU
        waits for detection and regrouping, and the touched replicas'
        GPUs stand idle until the failure is repaired."""
        return (self.world * (detect_s + reconfig_s)
                + self.pipelines * self.replica_gpus * repair_s) / HOUR


def blast_radius(layout: Layout, cluster: Cluster, kind: str, index: int,
                 fabric: Fabric | None = None) -> Blast:
    """What failing GPU, node or switch ``index`` stalls in ``layout``."""
    if layout.world > cluster.n_gpus:
        raise ValueError(f"{layout.world} ranks on {cluster.n_gpus} GPUs")
    if kind == "gpu":
        gpus = [index]
    elif kind == "node":
        g = cluster.gpus_per_node
        gpus = list(range(index * g, (index + 1) * g))
    elif kind == "switch":
        gpus = (fabric or Fabric()).gpus_behind(cluster, index)
    else:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if not gpus or min(gpus) < 0 or max(gpus) >= cluster.n_gpus:
        raise ValueError(f"no {kind} {index} in a {cluster.nodes}-node "
                         "cluster")
    lost = np.array([x for x in gpus if x < layout.world], dtype=int)
    grid = layout.grid                       # (dp, pp, tp) -> rank
    hit = np.isin(grid, lost)
    return Blast(kind=kind, gpus=tuple(int(x) for x in lost),
                 tp_groups=int(hit.any(axis=2).sum()),
                 pipelines=int(hit.any(axis=(1, 2)).sum()),
                 world=layout.world, replica_gpus=layout.tp * layout.pp,
                 dp=layout.dp)


#: placements compared in the chapter (outermost axis first)
ORDERS = {"TP in a node (dp, pp, tp)": ("dp", "pp", "tp"),
          "Megatron-LM (pp, dp, tp)": ("pp", "dp", "tp"),
          "TP across nodes (tp, pp, dp)": ("tp", "pp", "dp")}


def compare(tp: int, pp: int, dp: int, cluster: Cluster, fabric: Fabric,
            *, detect_s: float = 60.0, restart_s: float = 600.0,
            reconfig_s: float = 60.0, interval_s: float = 1800.0,
            repair_s: float = 4 * HOUR) -> list:
    """One row per placement and failure kind (GPU 0, node 0, switch 0):
    what is lost and stalls, and both recoveries' GPU-hours.

    The defaults are assumptions, not measurements: a watchdog that fires
    after a minute, a restart (reschedule, reload) of ten minutes, an
    elastic regrouping of one, checkpoints every 30 minutes, a repair or
    replacement of four hours."""
    rows = []
    for name, order in ORDERS.items():
        lay = Layout(tp, pp, dp, order)
        for kind in KINDS:
            b = blast_radius(lay, cluster, kind, 0, fabric)
            rows.append({"placement": name, "failure": kind,
                         "gpus_lost": len(b.gpus), "tp_groups": b.tp_groups,
                         "pipelines": b.pipelines, "stalled": b.world,
                         "restart_gpu_h": b.restart_gpu_h(
                             detect_s, restart_s, interval_s),
                         "elastic_gpu_h": b.elastic_gpu_h(
                             detect_s, reconfig_s, repair_s),
                         "elastic_loss": b.elastic_loss})
    return rows
