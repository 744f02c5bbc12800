"""The timeline model of one data-parallel step (book, Chapter 7).

Inputs: each backward layer's compute time (last layer first), after which
layer each bucket is full, and each bucket's collective cost (from the fitted
host model, :func:`warmup_kit.train.analysis.bucket_costs`). One communication
channel runs the buckets in issue order: bucket ``k`` starts when it is full
(with overlap; after the whole backward pass without) and the channel is
free, and lasts its cost. The step is the forward pass, then the later of
the backward pass's end and the last bucket's end, then the optimizer; the
exposed communication is how far the last bucket ends after the backward
pass. A straggler (``lag_s``) holds every collective back until the
slowest rank has issued it. On a CPU the two threads of a rank share its
cores: while both run, each goes at ``share`` of its speed (processor
sharing, :func:`cpu_share`); on a GPU the collective runs on other engines
and ``share`` is 1. Two
limits hold by construction (and are tested): with one bucket nothing
overlaps, and with free communication the step is the compute.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


@dataclass(frozen=True)
class Span:
    """One bar of a Gantt chart: ``lane`` ("compute" or "comm")."""
    lane: str
    label: str
    start_s: float
    end_s: float


@dataclass
class Timeline:
    """One step: its spans and totals (seconds)."""
    step_s: float
    compute_s: float
    comm_s: float
    exposed_s: float
    spans: list[Span] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"step_s": self.step_s, "compute_s": self.compute_s,
                "comm_s": self.comm_s, "exposed_s": self.exposed_s}


def step_timeline(layer_s: Sequence[float], ready_after: Sequence[int],
                  cost_s: Sequence[float], *, forward_s: float = 0.0,
                  optimizer_s: float = 0.0, overlap: bool = True,
                  share: float = 1.0, lag_s: float = 0.0) -> Timeline:
    """The model's step.

    Args:
        layer_s: backward compute of each layer, in backward order (the last
            layer first), as measured with nothing running beside it.
        ready_after: for each bucket, in issue order, the position in
            ``layer_s`` after which its last gradient is written.
        cost_s: each bucket's collective time, alone.
        forward_s, optimizer_s: before and after the backward pass.
        overlap: issue a bucket when full (True) or after the backward.
        share: the speed of compute and of communication while both run
            (1: separate engines, a GPU's SMs and its copy engines or
            NVLink DMA; 0.5: two threads taking turns on one core, see
            :func:`cpu_share`).
        lag_s: how far the slowest rank runs behind this one (a straggler):
            a collective cannot start before every rank has issued it.

    Returns:
        :class:`Timeline` with one span per layer and per bucket.
    """
    if len(ready_after) != len(cost_s):
        raise ValueError("one cost per bucket")
    if any(not 0 <= j < len(layer_s) for j in ready_after):
        raise ValueError("ready_after must index layer_s")
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share}")
    if list(ready_after) != sorted(ready_after):
        raise ValueError("buckets must be in issue order")
    spans = [Span("compute", "forward", 0.0, forward_s)] if forward_s else []
    n_layers, n_buckets = len(layer_s), len(cost_s)
    ready = [None] * n_buckets
    t, j, k = forward_s, 0, 0
    left_c = layer_s[0] if n_layers else 0.0
    left_m = cost_s[0] if n_buckets else 0.0
    c_start, m_start = t, None
    while j < n_layers or k < n_buckets:
        computing = j < n_layers
        talking = (k < n_buckets and ready[k] is not None
                   and ready[k] <= t + 1e-15)
        if k < n_buckets and ready[k] is not None and not talking \
                and not computing:
            t = ready[k]                             # wait for a straggler
            continue
        if talking and m_start is None:
            m_start = t
        rate = share if computing and talking else 1.0
        dt_c = left_c / rate if computing else float("inf")
        dt_m = left_m / rate if talking else float("inf")
        dt_r = (ready[k] - t if k < n_buckets and ready[k] is not None
                and not talking else float("inf"))   # a bucket becomes due
        dt = min(dt_c, dt_m, dt_r)
        t += dt
        if computing:
            left_c -= dt * rate
        if talking:
            left_m -= dt * rate
        if talking and dt_m <= min(dt_c, dt_r):      # a bucket is done
            spans.append(Span("comm", f"bucket {k}", m_start, t))
            k, m_start = k + 1, None
            left_m = cost_s[k] if k < n_buckets else 0.0
        if computing and dt_c <= min(dt_m, dt_r):    # a layer is done
            spans.append(Span("compute", f"bwd {j}", c_start, t))
            for b in range(n_buckets):
                if ready[b] is None and (ready_after[b] == j if overlap
                                         else j == n_layers - 1):
                    ready[b] = t + lag_s
            j, c_start = j + 1, t
            left_c = layer_s[j] if j < n_layers else 0.0
    backward_end = max([s.end_s for s in spans if s.label.startswith("bwd")]
                       or [forward_s])
    comm_end = max(t, backward_end)
    step = comm_end + optimizer_s
    if optimizer_s:
        spans.append(Span("compute", "optimizer", comm_end, step))
    return Timeline(step_s=step,
                    compute_s=forward_s + sum(layer_s) + optimizer_s,
                    comm_s=float(sum(cost_s)),
                    exposed_s=comm_end - backward_end, spans=spans)


def cpu_share(cores: int, ranks: int) -> float:
    """Speed of each of a rank's two busy threads (compute, communication)
    relative to one alone, ranks spread evenly over ``cores`` CPU cores.

    A rank with two or more cores to itself runs both at full speed (1.0);
    with one core or less, the two take turns (0.5): what was measured alone
    was already slowed by the other ranks.
    """
    per_rank = cores / ranks
    return min(1.0, per_rank / 2) / min(1.0, per_rank)


def ready_positions(members: Sequence[Sequence[int]], layers: int,
                    layer_of: Sequence[int]) -> list[int]:
    """For each bucket, the backward position (0 = last layer) after which
    all its parameters' gradients exist."""
    return [max(layers - 1 - layer_of[i] for i in m) for m in members]
