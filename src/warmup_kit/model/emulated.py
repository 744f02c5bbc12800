"""A two-tier cluster described by calibration, and its predictions (book,
Chapter 6 and Lab 02: "measured on an emulated cluster").

The emulated cluster of :mod:`warmup_kit.cluster` has ``nodes`` network
namespaces of ``ranks_per_node`` ranks each: ranks of one node talk over
shared memory (the fast tier, our NVLink), nodes over a rate-limited link
(the slow tier, our NIC; one uplink per node, shared by its ranks). A
:class:`TwoTier` holds what calibration measured
(:mod:`warmup_kit.measure.cluster`): each tier's latency and bandwidth per
direction, the executor's reduction time per byte ``gamma`` and its fixed
cost per call.

Nothing here is a closed form written for the occasion: each algorithm's own
:class:`~warmup_kit.schedule.Schedule` (the one the ranks execute) is costed
round by round, lock-step as the point-to-point executor runs it, by the
rules of :func:`warmup_kit.model.simulate.simulate` (a transfer costs its
tier's alpha plus the larger of its two ports' loads over their bandwidth,
plus gamma per byte its receiver reduces that round; a round lasts as long
as its slowest transfer) on :meth:`TwoTier.cluster`, a
:class:`~warmup_kit.model.hardware.System` whose NVLink is the fast tier and
whose one NIC per node is the slow tier. One mechanism of the emulated link
is added: its token bucket (``tc tbf``). A node's uplink charges only the
bytes beyond the tokens it holds; tokens refill at the link's rate while the
uplink idles (in a round where it waits on others, between rounds, and in
the ``gap_s`` between two calls of a benchmark loop), up to
``burst_bytes``. Calls repeat until the tokens at the start of a call settle
(the steady state a median of repeated calls measures). A real NIC has no
such bucket; with ``burst_bytes=0`` the cost is :func:`simulate`'s, which
the tests check.

One cost of the public call is not the schedule's: ``allreduce(x, comm)``
returns a new array, and a new array of :data:`FRESH_MIN_BYTES` or more
is always fresh memory from the kernel (glibc serves any allocation of
its largest dynamic mmap threshold, 32 MiB on 64-bit Linux, or more with
a new ``mmap``, and ``free`` unmaps it), so every call faults in all of
its output and the kernel zeroes each page before the call writes it.
:attr:`TwoTier.touch_s_per_byte` (calibrated: a fresh output against a
reused one) prices that, once per call, for outputs of that size and up;
``out=`` avoids it. Smaller outputs usually come back warm from the heap's
free lists (not always: the heap's state decides, and the model leaves
that out).

The public call also runs out of place: the first time a rank reduces
into a chunk, its own operand is still in the caller's input, so the
reduction reads two arrays and writes a third, where an in-place one
writes back what it read. :attr:`TwoTier.oop_s_per_byte` prices those
bytes beyond gamma (:func:`src_bytes` finds them in the schedule), and
:attr:`TwoTier.copy_s_per_byte` the chunks a rank never writes and copies
from its input at the end (none in an all-reduce; calibration's exchanges
have them). Calibration times its exchanges both ways to tell them apart.

The fast tier is memory work, and memory is faster while the data fits in
the CPU's last-level cache: when every rank's working set together
(:func:`working_set`: output, input, the buffers received messages are
reduced from) fits in :attr:`TwoTier.cache_bytes`, every per-byte cost of
the fast tier (its bandwidth, gamma, the out-of-place and copy costs) is
scaled by :attr:`TwoTier.cached_factor`. All the emulated nodes share one
machine's cache, which a real cluster's nodes do not.

With equal tiers the predictions reduce to the closed forms of
:mod:`warmup_kit.model.costs` (``tests/test_emulated_model.py``).

The model never imports a transport: it only reads numbers.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from warmup_kit.algorithms import build
from warmup_kit.algorithms.ring import all_gather_rounds, reduce_scatter_rounds
from warmup_kit.model.hardware import SYSTEMS, Cluster, Link, System
from warmup_kit.model.simulate import compile_schedule
from warmup_kit.schedule import (Schedule, chunk_sizes, concat_rounds,
                                 merge_rounds)

#: the experiments' all-reduce variants: label -> registered algorithm
VARIANTS: dict[str, str] = {
    "flat ring": "ring",
    "hierarchical": "hierarchical",
    "two-level leader": "leader",
}

#: outputs of this many bytes or more come from a fresh mmap on every call
#: (glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: 4 MiB * sizeof(long))
FRESH_MIN_BYTES = 32 << 20

#: the TP experiment's two placements of each 2-rank TP group
TP_PLACEMENTS = ("inside one node", "split across two")


@dataclass(frozen=True)
class Tier:
    """One tier, per direction.

    Attributes:
        alpha_s: latency of one message (one round of a schedule).
        bw_bytes_per_s: bandwidth of one port: a rank's own for the fast
            tier, the node's uplink (shared by its ranks) for the slow one.
    """

    alpha_s: float
    bw_bytes_per_s: float

    def __post_init__(self) -> None:
        if not self.alpha_s >= 0 or not self.bw_bytes_per_s > 0:
            raise ValueError(f"a tier needs alpha_s >= 0 and "
                             f"bw_bytes_per_s > 0, got {self}")


@dataclass(frozen=True)
class TwoTier:
    """A calibrated two-tier cluster.

    Attributes:
        nodes: number of nodes.
        ranks_per_node: ranks in each node.
        intra: the fast tier (inside a node).
        inter: the slow tier (across nodes; one uplink per node).
        gamma_s_per_byte: reduction time of the executor per byte received.
        call_s: fixed cost of one collective call (Python, plan lookup).
        burst_bytes: depth of each uplink's token bucket (each direction);
            0 for a link without one.
        gap_s: time between two calls of the benchmark loop (a barrier),
            when the buckets refill.
        cores: cores the ranks share (0: as many as ranks). A message's
            latency is mostly CPU work (Python, system calls, polling), and
            calibration measures it with every rank busy at once: a round in
            which only ``k`` ranks take part pays ``max(1, k / cores) /
            max(1, ranks / cores)`` of it (the cores-shared rule of
            :mod:`warmup_kit.measure.fit_host`).
        touch_s_per_byte: first-touch cost of a fresh output (page fault and
            zeroing), per byte, with every rank busy at once; a call whose
            output is :data:`FRESH_MIN_BYTES` or more pays it on all of it.
        oop_s_per_byte: what an out-of-place reduction costs per byte beyond
            ``gamma_s_per_byte`` (its own operand read from the input, the
            result written to a third array).
        copy_s_per_byte: the executor's copy, per byte, of a chunk a rank
            never writes, from its input into its output at the end.
        cache_bytes: the last-level cache the ranks share (0: none).
        cached_factor: what the fast tier's per-byte costs are multiplied
            by when a call's working set fits in ``cache_bytes``.
    """

    nodes: int
    ranks_per_node: int
    intra: Tier
    inter: Tier
    gamma_s_per_byte: float = 0.0
    call_s: float = 0.0
    burst_bytes: float = 0.0
    gap_s: float = 0.0
    cores: int = 0
    touch_s_per_byte: float = 0.0
    oop_s_per_byte: float = 0.0
    copy_s_per_byte: float = 0.0
    cache_bytes: float = 0.0
    cached_factor: float = 1.0

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.ranks_per_node < 1:
            raise ValueError("need nodes >= 1 and ranks_per_node >= 1")
        if min(self.gamma_s_per_byte, self.call_s, self.burst_bytes,
               self.gap_s, self.touch_s_per_byte, self.oop_s_per_byte,
               self.copy_s_per_byte) < 0:
            raise ValueError("gamma_s_per_byte, call_s, burst_bytes, gap_s, "
                             "touch_s_per_byte, oop_s_per_byte and "
                             "copy_s_per_byte must be >= 0")
        if self.cache_bytes < 0 or not self.cached_factor > 0:
            raise ValueError("need cache_bytes >= 0 and cached_factor > 0")

    def start_tokens(self) -> float:
        """Tokens an uplink that was busy to the end of the last call holds
        at the start of the next (refilled over the gap and the call's
        fixed cost)."""
        return min(self.burst_bytes,
                   self.inter.bw_bytes_per_s * (self.gap_s + self.call_s))

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def ratio(self) -> float:
        """Fast-tier bandwidth over slow-tier bandwidth, per direction."""
        return self.intra.bw_bytes_per_s / self.inter.bw_bytes_per_s

    def system(self) -> System:
        """This cluster as a :class:`System`: NVLink = fast tier, one NIC
        per node = slow tier (PCIe is never used: the node is one domain)."""
        gpu = SYSTEMS["dgx-h100"].gpu     # unused by the collective model
        fast = Link("shared memory", self.intra.bw_bytes_per_s / 1e9, 1.0,
                    self.intra.alpha_s, "calibrated")
        slow = Link("emulated link", self.inter.bw_bytes_per_s / 1e9, 1.0,
                    self.inter.alpha_s, "calibrated")
        return System("emulated", gpu, gpus_per_node=self.ranks_per_node,
                      nvlink_domain=self.ranks_per_node, nvlink=fast,
                      nic=slow, pcie=fast, nics_per_node=1)

    def cluster(self) -> Cluster:
        return Cluster(self.system(), self.nodes)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TwoTier":
        return cls(d["nodes"], d["ranks_per_node"], Tier(**d["intra"]),
                   Tier(**d["inter"]), d.get("gamma_s_per_byte", 0.0),
                   d.get("call_s", 0.0), d.get("burst_bytes", 0.0),
                   d.get("gap_s", 0.0), d.get("cores", 0),
                   d.get("touch_s_per_byte", 0.0),
                   d.get("oop_s_per_byte", 0.0),
                   d.get("copy_s_per_byte", 0.0),
                   d.get("cache_bytes", 0.0), d.get("cached_factor", 1.0))

    def scale(self, working_set_bytes: float) -> float:
        """The factor on the fast tier's per-byte costs of a call whose
        working set per rank is ``working_set_bytes``."""
        if self.cache_bytes and \
                self.ranks * working_set_bytes <= self.cache_bytes:
            return self.cached_factor
        return 1.0

    def output_s(self, nbytes: int) -> float:
        """First-touch seconds of the new output array of a public call
        of ``nbytes`` per rank (0 below
        :data:`FRESH_MIN_BYTES`)."""
        return self.touch_s_per_byte * nbytes if nbytes >= FRESH_MIN_BYTES \
            else 0.0


def _chunk_bytes(s: Schedule, nbytes: int, itemsize: int) -> np.ndarray:
    """Bytes of each chunk of ``s`` for a buffer of ``nbytes``."""
    return np.asarray(chunk_sizes(nbytes // itemsize, s.chunks),
                      dtype=np.float64) * itemsize


def src_bytes(s: Schedule, nbytes: int, *, itemsize: int = 8
              ) -> tuple[np.ndarray, np.ndarray]:
    """What running ``s`` out of place reads from each rank's input:
    per round and rank, the bytes it reduces into chunks it has not yet
    written (its own operand comes from the input: an out-of-place
    reduction; each target chunk counted once a round), and per rank the
    bytes of the chunks it never writes (copied from the input at the
    end, as the executors do)."""
    sizes = _chunk_bytes(s, nbytes, itemsize)
    oop = np.zeros((len(s.rounds), s.ranks))
    written = [set() for _ in range(s.ranks)]
    for k, rnd in enumerate(s.rounds):
        seen = set()
        for t in rnd:
            if not t.reduce:
                continue
            for d in t.targets:
                if d not in written[t.dst] and (t.dst, d) not in seen:
                    seen.add((t.dst, d))
                    oop[k, t.dst] += sizes[d]
        for t in rnd:
            written[t.dst].update(t.targets)
    tail = np.array([sizes[[c for c in range(s.chunks)
                            if c not in written[r]]].sum()
                     for r in range(s.ranks)])
    return oop, tail


def working_set(s: Schedule, nbytes: int, *, itemsize: int = 8,
                src: bool = False) -> float:
    """Bytes one rank touches in a call of ``s`` (the largest over ranks):
    its output, its input if out of place, and a buffer for each message
    it reduces (the executor receives those apart, then reduces)."""
    sizes = _chunk_bytes(s, nbytes, itemsize)
    staged = np.zeros(s.ranks)
    for rnd in s.rounds:
        for t in rnd:
            if t.reduce:
                staged[t.dst] += sizes[list(t.chunks)].sum()
    return float(nbytes * (2 if src else 1) + staged.max())


def round_times(tt: TwoTier, s: Schedule, nbytes: int, *,
                itemsize: int = 8, tokens: float | None = None,
                oop: np.ndarray | None = None, scale: float = 1.0
                ) -> tuple[np.ndarray, float]:
    """Seconds of each round of ``s`` on ``tt`` (ranks packed node by
    node), lock-step, with the uplinks' token buckets (see the module
    docstring), and the fewest tokens an uplink holds at the end.

    ``tokens``: each uplink's tokens at the start (default: full).
    ``oop``: run out of place, these bytes reduced from the input per
    round and rank (:func:`src_bytes`; :attr:`TwoTier.oop_s_per_byte`).
    ``scale``: the factor on the fast tier's per-byte costs
    (:meth:`TwoTier.scale`)."""
    if s.ranks != tt.ranks:
        raise ValueError(f"schedule for {s.ranks} ranks on a {tt.ranks}-rank "
                         "cluster")
    comp = compile_schedule(s)
    sizes = _chunk_bytes(s, nbytes, itemsize)
    tb = np.bincount(comp.flat_transfer, weights=sizes[comp.flat_chunk],
                     minlength=len(comp.src))
    g, n = tt.ranks_per_node, tt.ranks
    cross = comp.src // g != comp.dst // g
    # ports: rank egress/ingress (fast tier), node egress/ingress (uplink)
    out_port = np.where(cross, 2 * n + comp.src // g, comp.src)
    in_port = np.where(cross, 2 * n + tt.nodes + comp.dst // g, n + comp.dst)
    bw = np.where(cross, tt.inter.bw_bytes_per_s,
                  tt.intra.bw_bytes_per_s / scale)
    alpha = np.where(cross, tt.inter.alpha_s, tt.intra.alpha_s)
    n_ports = 2 * n + 2 * tt.nodes
    cap = np.zeros(n_ports)
    cap[2 * n:] = tt.burst_bytes
    have = cap.copy() if tokens is None else np.minimum(cap, tokens)
    rate = tt.inter.bw_bytes_per_s
    cores = tt.cores or n
    full = max(1.0, n / cores)
    out = np.zeros(comp.n_rounds)
    for k in range(comp.n_rounds):
        sel = np.flatnonzero((comp.round_of == k) & (tb > 0))
        if not len(sel):
            continue
        load = np.bincount(np.r_[out_port[sel], in_port[sel]],
                           weights=np.r_[tb[sel], tb[sel]], minlength=n_ports)
        charged = np.maximum(load - have, 0.0)
        have = np.maximum(have - load, 0.0)
        port_s = np.maximum(charged[out_port[sel]], charged[in_port[sel]])
        busy = len(np.union1d(comp.src[sel], comp.dst[sel]))
        t = alpha[sel] * (max(1.0, busy / cores) / full) + port_s / bw[sel]
        if tt.gamma_s_per_byte:
            red = np.bincount(comp.dst[sel], weights=tb[sel] *
                              comp.reduce[sel], minlength=n)
            t = t + scale * tt.gamma_s_per_byte * red[comp.dst[sel]]
        if oop is not None:
            t = t + scale * tt.oop_s_per_byte * oop[k, comp.dst[sel]]
        out[k] = t.max()
        # an uplink refills while it is not sending at the rate
        have = np.minimum(cap, have + rate * np.maximum(
            out[k] - charged / rate, 0.0))
    return out, float(have[2 * n:].min()) if tt.nodes else 0.0


def time_schedule(tt: TwoTier, s: Schedule, nbytes: int, *,
                  itemsize: int = 8, src: bool = False) -> float:
    """Seconds of one call of schedule ``s`` on ``tt``, in the steady state
    of repeated calls (``gap_s`` apart); ``src``: out of place."""
    tokens = tt.burst_bytes
    rounds = np.zeros(0)
    oop, tail = src_bytes(s, nbytes, itemsize=itemsize) if src and (
        tt.oop_s_per_byte or tt.copy_s_per_byte) else (None, np.zeros(1))
    scale = tt.scale(working_set(s, nbytes, itemsize=itemsize, src=src)) \
        if tt.cache_bytes else 1.0
    for _ in range(32):
        rounds, left = round_times(tt, s, nbytes, itemsize=itemsize,
                                   tokens=tokens, oop=oop, scale=scale)
        nxt = min(tt.burst_bytes, left + tt.inter.bw_bytes_per_s *
                  (tt.gap_s + tt.call_s))
        if abs(nxt - tokens) <= 1e-9 * max(1.0, tt.burst_bytes):
            break
        tokens = nxt
    return float(rounds.sum() + tt.call_s
                 + scale * tt.copy_s_per_byte * tail.max())


def predict(tt: TwoTier, algorithm: str, nbytes: int, *,
            itemsize: int = 8) -> float:
    """Seconds of one all-reduce of ``nbytes`` per rank over all ranks with
    a registered ``algorithm`` (``"ring"``, ``"hierarchical"``,
    ``"leader"``, ...), as :func:`warmup_kit.allreduce` runs it (a new
    output array, out of place: :meth:`TwoTier.output_s`,
    :attr:`TwoTier.oop_s_per_byte`)."""
    s = build("allreduce", algorithm, tt.ranks,
              ranks_per_node=tt.ranks_per_node)
    return time_schedule(tt, s, nbytes, itemsize=itemsize, src=True) + \
        tt.output_s(nbytes)


def tp_groups(tt: TwoTier, spread: bool) -> list[tuple[int, ...]]:
    """The TP groups of size ``ranks_per_node``: each node's ranks (inside),
    or local rank ``l`` of every node taken ``ranks_per_node`` at a time
    across nodes (split: each group's ranks on different nodes)."""
    g, n = tt.ranks_per_node, tt.ranks
    if not spread:
        return [tuple(range(a, a + g)) for a in range(0, n, g)]
    if tt.nodes < g:
        raise ValueError(f"cannot split groups of {g} over {tt.nodes} nodes")
    by_slot = [r for l in range(g) for r in range(l, n, g)]
    return [tuple(by_slot[a:a + g]) for a in range(0, n, g)]


def tp_schedule(tt: TwoTier, spread: bool) -> Schedule:
    """All TP groups' ring all-reduces side by side, as one schedule on all
    ranks (every group of a real TP x DP job reduces at the same time)."""
    groups = tp_groups(tt, spread)
    g = len(groups[0])
    blocks = [(c,) for c in range(g)]
    rounds = merge_rounds(*(reduce_scatter_rounds(list(m), blocks)
                            + all_gather_rounds(list(m), blocks)
                            for m in groups))
    return Schedule(name="tp ring", collective="allreduce", ranks=tt.ranks,
                    chunks=g, rounds=concat_rounds(rounds))


def predict_tp(tt: TwoTier, nbytes: int, *, spread: bool,
               itemsize: int = 8) -> float:
    """Seconds of the TP all-reduce (ring in each group, all groups at once)
    with groups inside a node or split across nodes (a new output array
    each call, as :func:`predict`)."""
    return time_schedule(tt, tp_schedule(tt, spread), nbytes,
                         itemsize=itemsize, src=True) + tt.output_s(nbytes)


def predictions(tt: TwoTier, sizes, *, itemsize: int = 8) -> list[dict]:
    """One row per (experiment, size, variant): ``experiment``
    (``"allreduce"`` or ``"tp"``), ``nbytes``, ``variant``, ``model_ms``."""
    rows = []
    for nbytes in sizes:
        for label, alg in VARIANTS.items():
            rows.append({"experiment": "allreduce", "nbytes": nbytes,
                         "variant": label, "algorithm": alg,
                         "model_ms": predict(tt, alg, nbytes,
                                             itemsize=itemsize) * 1e3})
        for label, spread in zip(TP_PLACEMENTS, (False, True)):
            rows.append({"experiment": "tp", "nbytes": nbytes,
                         "variant": label, "algorithm": "ring",
                         "model_ms": predict_tp(tt, nbytes, spread=spread,
                                                itemsize=itemsize) * 1e3})
    return rows


def winners(rows: list[dict], key: str) -> dict[tuple[str, int], str]:
    """Fastest variant by ``key`` ("model_ms" or "measured_ms") per
    (experiment, size)."""
    best: dict[tuple[str, int], tuple[float, str]] = {}
    for r in rows:
        k = (r["experiment"], r["nbytes"])
        if r.get(key) is None:
            continue
        if k not in best or r[key] < best[k][0]:
            best[k] = (r[key], r["variant"])
    return {k: v[1] for k, v in best.items()}
