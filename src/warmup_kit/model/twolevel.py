"""Flat vs hierarchical all-reduce across nodes, compared fairly (Ch. 4, 6).

Four schedules of :mod:`warmup_kit.algorithms` on ``nodes`` full nodes,
each simulated by :func:`~warmup_kit.model.simulate.simulate`:

* ``textbook ring``: one ring through all ranks, lock-step rounds, so every
  one of its 2(N-1) rounds waits for a network hop and the whole node's
  cross-node traffic rides the one or two NICs the ring crosses at;
* ``NCCL flat ring``: one ring per rail (``rail_ring``), pipelined: every
  NIC carries one ring's crossing, and the network latency is paid only on
  the hops that cross nodes;
* ``hierarchical``: reduce-scatter in the node, one ring per local rank
  across nodes, all-gather in the node (pipelined);
* ``leader``: reduce to one representative per node, ring among the
  representatives, broadcast back (pipelined).

Next to them, the NCCL model's pick (:func:`warmup_kit.model.nccl.best`),
which may use in-switch reduction (NVLS) that no schedule here can.
"""
from __future__ import annotations

from warmup_kit.algorithms import build
from warmup_kit.model.hardware import SYSTEMS, Cluster, System
from warmup_kit.model.nccl import best
from warmup_kit.model.simulate import simulate

#: (label, algorithm, pipelined)
VARIANTS: tuple[tuple[str, str, bool], ...] = (
    ("textbook ring", "ring", False),
    ("NCCL flat ring", "rail_ring", True),
    ("hierarchical", "hierarchical", True),
    ("leader", "leader", True),
)


def compare(system: str | System, nodes: int, nbytes: int) -> list[dict]:
    """One row per variant: time and per-island cross-island traffic.

    Args:
        system: a :data:`~warmup_kit.model.hardware.SYSTEMS` key or a
            :class:`System` (e.g. :func:`~warmup_kit.model.hardware.with_nics`).
        nodes: number of full NVLink islands (a DGX node; an NVL72 rack),
            every GPU a rank; the two-level schemes group ranks by island.
        nbytes: all-reduce buffer per rank, bytes.

    Returns:
        dicts with ``variant``, ``time_ms``, ``busbw_gbps`` (nccl-tests
        bus bandwidth), ``net_bytes_per_node`` (bytes leaving each node, in
        units of the buffer V: ``net_v_per_node``) and, for the pipelined
        ones, ``latency_us``.
    """
    s = SYSTEMS[system] if isinstance(system, str) else system
    per = max(1, s.nvlink_domain // s.gpus_per_node) if s.nvlink else 1
    c = Cluster(s, nodes * per)
    n, g = c.n_gpus, per * s.gpus_per_node
    rows = []
    for label, algorithm, pipelined in VARIANTS:
        sched = build("allreduce", algorithm, n, ranks_per_node=g)
        r = simulate(sched, c, nbytes, pipelined=pipelined)
        net = r.bytes_by_class["net"] / nodes
        rows.append({"variant": label, "algorithm": algorithm,
                     "pipelined": pipelined, "time_ms": r.total_s * 1e3,
                     "busbw_gbps": _busbw(nbytes, n, r.total_s),
                     "net_bytes_per_node": net,
                     "net_v_per_node": net / nbytes,
                     "latency_us": r.latency_s * 1e6})
    ch = best("allreduce", nbytes, c)
    rows.append({"variant": f"NCCL model ({ch.algorithm}/{ch.protocol})",
                 "algorithm": "nccl_model", "pipelined": True,
                 "time_ms": ch.time_s * 1e3,
                 "busbw_gbps": ch.busbw_gbps, "net_bytes_per_node": None,
                 "net_v_per_node": None, "latency_us": None})
    return rows


def _busbw(nbytes: int, n: int, t: float) -> float:
    return nbytes / t / 1e9 * 2 * (n - 1) / n if t else 0.0


def table(system: str | System, nodes=(2, 4, 16),
          sizes=(2 ** 20, 2 ** 26, 2 ** 30)) -> list[dict]:
    """:func:`compare` over node counts and sizes, flattened; each row also
    carries ``nodes``, ``nbytes`` and ``vs_flat`` (NCCL flat ring time /
    this time: above 1, this variant is faster than the fair flat ring)."""
    out = []
    for k in nodes:
        for nbytes in sizes:
            rows = compare(system, k, nbytes)
            flat = next(r["time_ms"] for r in rows
                        if r["algorithm"] == "rail_ring")
            for r in rows:
                r.update(nodes=k, nbytes=nbytes,
                         vs_flat=flat / r["time_ms"])
                out.append(r)
    return out
