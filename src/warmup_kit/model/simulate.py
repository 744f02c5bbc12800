"""Time of any schedule on a placed cluster (book, Chapters 4 and 6).

The alpha-beta(-gamma) model of Hockney (1994) and Thakur, Rabenseifner and
Gropp (2005, section 3), applied round by round to a
:class:`~warmup_kit.schedule.Schedule`:

* a transfer of ``b`` bytes on link class ``c`` (NVLink, PCIe or the NIC,
  see :func:`~warmup_kit.model.topology.link_class`) costs ``alpha_c + b / bw_c``;
* transfers of one round that share a port share its bandwidth: the ports are
  each GPU's NVLink egress and ingress, PCIe egress and ingress, and its NIC's
  egress and ingress (NVSwitch and the IB fabric are non-blocking). A
  transfer's bandwidth term is the larger of its two ports' loads
  ``sum(bytes through port) / bw``;
* with ``gamma_s_per_byte``, the receiver spends ``gamma`` per byte it
  reduces in that round;
* a round lasts as long as its slowest transfer; rounds run one after the
  other (``pipelined=False``: the lock-step textbook execution, where every
  round of a ring that crosses nodes pays the network latency);
* or, with ``pipelined=True``, the schedule runs as NCCL runs its rings: each
  transfer starts as soon as its data has arrived, and bytes stream through
  the ports, so the time is the latency of the slowest chain of dependent
  transfers (each hop pays its own link's latency: the network's only where
  it crosses nodes) plus the busiest port's bytes over its bandwidth. This
  is NCCL's own ``latency + bytes / bandwidth`` form (``src/graph/tuning.cc``).

The schedule is flattened once into numpy arrays (:func:`compile_schedule`,
cached), and the port bookkeeping of a placement once more, so costing a
1,024-rank ring for another message size is a few vectorized passes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from itertools import chain
from operator import itemgetter

import numpy as np

from warmup_kit.model.hardware import Cluster
from warmup_kit.schedule import LazyRounds, Schedule, chunk_sizes
from warmup_kit.model.topology import (LINK_CLASSES, NET, link_class_ids,
                                      packed)


@dataclass(frozen=True)
class Compiled:
    """A schedule flattened to arrays, one entry per transfer."""

    round_of: np.ndarray     # round index of each transfer (non-decreasing)
    src: np.ndarray
    dst: np.ndarray
    reduce: np.ndarray       # bool
    flat_transfer: np.ndarray  # transfer index of each carried chunk
    flat_chunk: np.ndarray     # chunk index of each carried chunk
    n_rounds: int


_COMPILED: dict[int, tuple[Schedule, Compiled]] = {}
_PLACED: dict[tuple, tuple] = {}


def compile_schedule(s: Schedule) -> Compiled:
    """Flatten ``s`` into arrays (cached per schedule object)."""
    hit = _COMPILED.get(id(s))
    if hit is not None and hit[0] is s:
        return hit[1]
    if isinstance(s.rounds, LazyRounds):          # arrays, no tuples
        r, src, dst, red, chunk = s.rounds.arrays()
        t = np.arange(len(src))
        c = Compiled(r, src, dst, red.astype(bool), t, chunk, len(s.rounds))
        if len(_COMPILED) > 64:
            _COMPILED.clear()
        _COMPILED[id(s)] = (s, c)
        return c
    per_round = np.array([len(r) for r in s.rounds], dtype=np.int64)
    flat = [t for r in s.rounds for t in r]
    # read the transfer tuples with C-level getters: two million of them for
    # a ring on 1,024 ranks, where attribute access per transfer took seconds
    n = len(flat)

    def column(i: int, dtype) -> np.ndarray:
        return np.fromiter(map(itemgetter(i), flat), dtype, n)
    chunks = list(map(itemgetter(2), flat))
    lens = np.fromiter(map(len, chunks), np.int64, n)
    c = Compiled(np.repeat(np.arange(len(s.rounds)), per_round),
                 column(0, np.int64), column(1, np.int64), column(3, bool),
                 np.repeat(np.arange(n), lens),
                 np.fromiter(chain.from_iterable(chunks), np.int64,
                             int(lens.sum())),
                 len(s.rounds))
    if len(_COMPILED) > 64:
        _COMPILED.clear()
    _COMPILED[id(s)] = (s, c)
    return c


@dataclass
class SimResult:
    """Simulated time of one schedule.

    Attributes:
        total_s: sum of the round times (lock-step), or latency_s +
            bandwidth_s (pipelined).
        round_s: time of each round (lock-step; empty when pipelined).
        bytes_by_class: payload bytes carried by each link class.
        steps: number of rounds.
        latency_s: pipelined only: the slowest chain of hop latencies.
        bandwidth_s: pipelined only: the busiest port's bytes / bandwidth.
    """

    total_s: float
    round_s: np.ndarray
    bytes_by_class: dict[str, float]
    steps: int
    latency_s: float = 0.0
    bandwidth_s: float = 0.0

    def algbw_gbps(self, nbytes: int) -> float:
        """nccl-tests algorithm bandwidth: buffer size / time, GB/s."""
        return nbytes / self.total_s / 1e9 if self.total_s else float("inf")


def _placed(s: Schedule, comp: Compiled, cluster: Cluster,
            placement: tuple[int, ...]):
    """Link class, port ids and receiver ids per transfer (cached)."""
    key = (id(s), cluster, placement)
    hit = _PLACED.get(key)
    if hit is not None and hit[0] is s:
        return hit[1:]
    gpu = np.asarray(placement, dtype=np.int64)
    gs, gd = gpu[comp.src], gpu[comp.dst]
    cls = link_class_ids(cluster, gs, gd)
    sysm = cluster.system
    n_gpu = cluster.n_gpus
    # port id = (class * n_gpu + owner) * 2 + direction; the owner of a NIC
    # port is the first GPU of the GPUs that share that NIC (each GPU its
    # own NIC unless the system says fewer NICs per node)
    share = sysm.gpus_per_node // (sysm.nics_per_node or sysm.gpus_per_node)
    ps = np.where(cls == NET, gs // share * share, gs)
    pd = np.where(cls == NET, gd // share * share, gd)
    out_port = (cls * n_gpu + ps) * 2
    in_port = (cls * n_gpu + pd) * 2 + 1
    n_ports = len(LINK_CLASSES) * n_gpu * 2
    r = comp.round_of
    # dense (round, used port) bins: O(transfers), no sort
    ports = np.concatenate([out_port, in_port])
    used = np.zeros(n_ports, dtype=bool)
    used[ports] = True
    remap = np.cumsum(used) - 1
    n_used = int(used.sum())
    inverse = np.concatenate([r, r]) * n_used + remap[ports]
    n_keys = comp.n_rounds * n_used
    rx_inverse = r * n_gpu + gd
    n_rx = comp.n_rounds * n_gpu
    links = [sysm.nvlink, sysm.pcie, sysm.nic]
    bw = np.array([l.bytes_per_s if l is not None else np.nan for l in links])
    alpha = np.array([l.latency_s if l is not None else np.nan
                      for l in links])
    starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]]) if len(r) else r
    res = (cls, inverse, n_keys, rx_inverse, n_rx, bw, alpha,
           starts, inverse % n_used, n_used)
    if len(_PLACED) > 64:
        _PLACED.clear()
    _PLACED[key] = (s,) + res
    return res


def simulate(s: Schedule, cluster: Cluster, nbytes: int, *,
             placement: Sequence[int] | None = None,
             gamma_s_per_byte: float = 0.0, itemsize: int = 1,
             pipelined: bool = False) -> SimResult:
    """Cost schedule ``s`` for a buffer of ``nbytes`` on ``cluster``.

    Args:
        s: the schedule (any algorithm of :mod:`warmup_kit.algorithms`).
        cluster: from :func:`warmup_kit.model.hardware.cluster`.
        nbytes: buffer size per rank, bytes (as in nccl-tests).
        placement: GPU id of each rank; default ranks packed on GPUs 0..N-1.
        gamma_s_per_byte: reduction time per received byte on the receiver.
        itemsize: element size; chunks are cut on element boundaries as the
            executor cuts them.
        pipelined: cost the dataflow execution (critical path of hop
            latencies + busiest port) instead of lock-step rounds.

    Returns:
        :class:`SimResult` with the total and per-round times.
    """
    placement = tuple(packed(cluster, s.ranks) if placement is None
                      else placement)
    if len(placement) != s.ranks:
        raise ValueError(f"placement has {len(placement)} GPUs for "
                         f"{s.ranks} ranks")
    if len(set(placement)) != len(placement) or \
            max(placement, default=0) >= cluster.n_gpus:
        raise ValueError("placement must name distinct GPUs of the cluster")
    comp = compile_schedule(s)
    if not len(comp.src):
        return SimResult(0.0, np.zeros(comp.n_rounds), {k: 0.0 for k in
                                                        LINK_CLASSES}, s.steps)
    (cls, inverse, n_keys, rx_inv, n_rx, bw, alpha, starts, port_of,
     n_ports) = _placed(s, comp, cluster, placement)
    if np.isnan(bw[cls]).any():
        raise ValueError(f"{cluster.system.name} has no NVLink")
    sizes = np.asarray(chunk_sizes(nbytes // itemsize, s.chunks),
                       dtype=np.float64) * itemsize
    tbytes = np.bincount(comp.flat_transfer, weights=sizes[comp.flat_chunk],
                         minlength=len(comp.src))
    n_t = len(tbytes)
    if pipelined:
        return _pipelined(s, comp, cls, tbytes, bw, alpha, port_of, n_ports,
                          gamma_s_per_byte, placement, cluster)
    load = np.bincount(inverse, weights=np.concatenate([tbytes, tbytes]),
                       minlength=n_keys)
    port_s = load[inverse] / np.concatenate([bw[cls], bw[cls]])
    t = alpha[cls] + np.maximum(port_s[:n_t], port_s[n_t:])
    if gamma_s_per_byte:
        rx = np.bincount(rx_inv, weights=tbytes * comp.reduce, minlength=n_rx)
        t = t + gamma_s_per_byte * rx[rx_inv]
    t = np.where(tbytes > 0, t, 0.0)
    round_s = np.zeros(comp.n_rounds)
    round_s[comp.round_of[starts]] = np.maximum.reduceat(t, starts)
    by_class = np.bincount(cls, weights=tbytes, minlength=len(LINK_CLASSES))
    return SimResult(float(round_s.sum()), round_s,
                     dict(zip(LINK_CLASSES, by_class.tolist())), s.steps)


def _pipelined(s, comp, cls, tbytes, bw, alpha, port_of, n_ports, gamma,
               placement, cluster) -> SimResult:
    """Dataflow cost: critical path of hop latencies + the busiest port."""
    both = np.concatenate([tbytes, tbytes])
    port_load = np.bincount(port_of, weights=both, minlength=n_ports)
    port_bw = np.zeros(n_ports)
    port_bw[port_of] = np.concatenate([bw[cls], bw[cls]])
    bandwidth_s = float((port_load / port_bw).max())
    if gamma:
        rx = np.bincount(comp.dst, weights=tbytes * comp.reduce,
                         minlength=s.ranks)
        bandwidth_s = max(bandwidth_s, gamma * float(rx.max()))
    latency_s = critical_latency_s(s, cluster, tuple(placement))
    by_class = np.bincount(cls, weights=tbytes, minlength=len(LINK_CLASSES))
    return SimResult(latency_s + bandwidth_s, np.zeros(0),
                     dict(zip(LINK_CLASSES, by_class.tolist())), s.steps,
                     latency_s, bandwidth_s)


_LATENCY: dict[tuple, tuple[Schedule, float]] = {}


def critical_latency_s(s: Schedule, cluster: Cluster,
                       placement: tuple[int, ...]) -> float:
    """Latency of the slowest chain of dependent transfers of ``s``.

    Each chunk a transfer carries moves on as soon as it has reached the
    sender (a pipelined transfer streams its chunks independently) and
    takes the link's latency; chunks a rank starts with are ready at time
    0. (Cached per schedule and placement; it does not depend on the
    message size.)
    """
    key = (id(s), cluster, placement)
    hit = _LATENCY.get(key)
    if hit is not None and hit[0] is s:
        return hit[1]
    comp = compile_schedule(s)
    gpu = np.asarray(placement, dtype=np.int64)
    cls = link_class_ids(cluster, gpu[comp.src], gpu[comp.dst])
    sysm = cluster.system
    links = [sysm.nvlink, sysm.pcie, sysm.nic]
    lat = np.array([l.latency_s if l is not None else np.nan
                    for l in links])[cls]
    ready = np.zeros(s.ranks * s.chunks)
    # per carried chunk: the cell it is read from and the cell it lands in
    t_of = comp.flat_transfer
    read = comp.src[t_of] * s.chunks + comp.flat_chunk
    write = comp.dst[t_of] * s.chunks + _targets(s, comp)
    r_of_flat = comp.round_of[t_of]
    bounds = np.searchsorted(r_of_flat, np.arange(comp.n_rounds + 1))
    lat_flat = lat[t_of]
    for k in range(comp.n_rounds):
        a, b = bounds[k], bounds[k + 1]
        if a < b:
            np.maximum.at(ready, write[a:b], ready[read[a:b]] + lat_flat[a:b])
    out = float(ready.max()) if len(ready) else 0.0
    if len(_LATENCY) > 64:
        _LATENCY.clear()
    _LATENCY[key] = (s, out)
    return out


def _targets(s: Schedule, comp: Compiled) -> np.ndarray:
    """Chunk index each carried chunk lands in on the receiver."""
    if isinstance(s.rounds, LazyRounds) or \
            all(t[4] is None for r in s.rounds for t in r):
        return comp.flat_chunk
    return np.fromiter((c for r in s.rounds for t in r for c in t.targets),
                       np.int64, len(comp.flat_chunk))
