"""Run a schedule for real on a communicator (DESIGN: one definition, four uses).

:func:`run_schedule` compiles a schedule once per (rank, length, dtype) into a
plan: which slices of the buffer go to which peer each round, which incoming
messages can land straight in the buffer and which need a staging buffer
(reductions, or a slice this rank is sending in the same round). Plans and
their staging buffers are cached, so a repeated call allocates nothing.

The round semantics are those of :mod:`warmup_kit.schedule`; in particular,
several reductions into one chunk are combined in ascending rank order, which
makes results bit-for-bit identical on every rank.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from .comm.base import Comm
from .ops import reduce_ufunc
from .schedule import Schedule, chunk_bounds


@dataclass
class _Incoming:
    peer: int
    recv: np.ndarray                       # where the bytes land
    direct: bool                           # landed in place already
    reduce: bool
    parts: list[tuple[slice, slice]]       # (slice of recv, slice of buffer)


@dataclass
class _Round:
    sends: list[tuple[int, object]]        # (peer, slice or list of slices)
    staging: list[np.ndarray | None]
    incoming: list[_Incoming] = field(default_factory=list)
    fold: bool = False                     # several reduces hit one chunk


@dataclass
class Plan:
    """A schedule compiled for one rank and one buffer length."""

    schedule: Schedule
    rank: int
    rounds: list[_Round]


def _runs(chunks, bounds) -> list[slice]:
    """Coalesce a chunk list into contiguous element slices."""
    out: list[slice] = []
    for c in chunks:
        a, b = bounds[c]
        if b == a:
            continue
        if out and out[-1].stop == a:
            out[-1] = slice(out[-1].start, b)
        else:
            out.append(slice(a, b))
    return out


def _overlaps(a: slice, b: slice) -> bool:
    return a.start < b.stop and b.start < a.stop


def compile_plan(s: Schedule, rank: int, count: int, unit: int,
                 dtype: np.dtype) -> Plan:
    """Turn ``s`` into per-round message lists for ``rank``.

    ``count`` rows of ``unit`` elements each are cut into ``s.chunks``
    pieces; slices in the plan are in elements.
    """
    bounds = [(a * unit, b * unit) for a, b in chunk_bounds(count, s.chunks)]
    rounds = []
    for rnd in s.rounds:
        sends, staging, send_slices = [], [], []
        for t in rnd:
            if t.src != rank:
                continue
            runs = _runs(t.chunks, bounds)
            if not runs:
                continue
            send_slices.extend(runs)
            if len(runs) == 1:
                sends.append((t.dst, runs[0]))
                staging.append(None)
            else:
                sends.append((t.dst, runs))
                staging.append(np.empty(sum(r.stop - r.start for r in runs),
                                        dtype))
        plan = _Round(sends, staging)
        targets: dict[int, int] = {}
        for t in rnd:
            if t.dst == rank:
                for c in t.targets:
                    targets[c] = targets.get(c, 0) + 1
        plan_chunks = []
        for t in rnd:
            if t.dst != rank:
                continue
            src_runs = _runs(t.chunks, bounds)
            dst_runs = _runs(t.targets, bounds)
            n = sum(r.stop - r.start for r in src_runs)
            if n == 0:
                continue
            if n != sum(r.stop - r.start for r in dst_runs):
                raise ValueError(f"{s.name}: transfer {t} changes size; "
                                 "chunks must be equal for this collective")
            if any(targets[c] > 1 for c in t.targets):
                plan.fold = True
            direct = (not t.reduce and len(dst_runs) == 1 and not any(
                _overlaps(dst_runs[0], x) for x in send_slices))
            if direct:
                recv = dst_runs[0]
                parts = [(slice(0, n), dst_runs[0])]
            else:
                recv = np.empty(n, dtype)
                parts, off = [], 0
                for r in dst_runs:
                    ln = r.stop - r.start
                    parts.append((slice(off, off + ln), r))
                    off += ln
            plan.incoming.append(_Incoming(t.src, recv, direct, t.reduce,
                                           parts))
            plan_chunks.append((t.chunks, t.targets))
        if plan.fold:      # combine chunk by chunk, never a coalesced run
            for inc, (src_c, dst_c) in zip(plan.incoming, plan_chunks):
                inc.parts, off = [], 0
                for c in dst_c:
                    a, b = bounds[c]
                    inc.parts.append((slice(off, off + b - a), slice(a, b)))
                    off += b - a
        rounds.append(plan)
    return Plan(s, rank, rounds)


_PLANS: OrderedDict = OrderedDict()
_PLAN_CACHE_SIZE = 64


def get_plan(s: Schedule, rank: int, count: int, unit: int,
             dtype: np.dtype) -> Plan:
    """A cached :func:`compile_plan`."""
    key = (id(s), rank, count, unit, np.dtype(dtype).str)
    hit = _PLANS.get(key)
    if hit is not None and hit.schedule is s:
        _PLANS.move_to_end(key)
        return hit
    plan = compile_plan(s, rank, count, unit, np.dtype(dtype))
    _PLANS[key] = plan
    if len(_PLANS) > _PLAN_CACHE_SIZE:
        _PLANS.popitem(last=False)
    return plan


def run_schedule(s: Schedule, buf: np.ndarray, comm: Comm, *, op: str = "sum",
                 deadline: float | None = None, unit: int = 1) -> np.ndarray:
    """Execute ``s`` in place on the 1-d contiguous ``buf``; return ``buf``.

    Args:
        s: the schedule; ``s.ranks`` must equal ``comm.size``.
        buf: this rank's working buffer (``count * unit`` elements).
        comm: the transport.
        op: reduction operator name (see :mod:`warmup_kit.ops`).
        deadline: :func:`time.monotonic` time to give up at.
        unit: elements per row; chunks are cut on row boundaries.
    """
    if s.ranks != comm.size:
        raise ValueError(f"schedule for {s.ranks} ranks on a "
                         f"communicator of {comm.size}")
    if buf.ndim != 1 or not buf.flags.c_contiguous:
        raise ValueError("run_schedule needs a 1-d contiguous buffer")
    if buf.size % unit:
        raise ValueError(f"buffer of {buf.size} elements is not a whole "
                         f"number of rows of {unit}")
    ufunc = reduce_ufunc(op, buf.dtype)
    plan = get_plan(s, comm.rank, buf.size // unit, unit, buf.dtype)
    trace = os.environ.get("WARMUP_KIT_TRACE") == "1"
    for k, rnd in enumerate(plan.rounds):
        sends = []
        for (peer, where), stage in zip(rnd.sends, rnd.staging):
            if stage is None:
                sends.append((peer, buf[where]))
            else:
                off = 0
                for r in where:
                    ln = r.stop - r.start
                    stage[off:off + ln] = buf[r]
                    off += ln
                sends.append((peer, stage))
        recvs = [(inc.peer, buf[inc.recv] if inc.direct else inc.recv)
                 for inc in rnd.incoming]
        if trace:
            for peer, a in sends:
                print(f"[rank {comm.rank}] round {k}: send {a.nbytes} B -> "
                      f"rank {peer}", flush=True)
        comm.exchange(sends, recvs, deadline=deadline)
        if rnd.fold:
            _fold(rnd, buf, comm.rank, ufunc)
            continue
        for inc in rnd.incoming:
            if inc.direct:
                continue
            for rs, bs in inc.parts:
                if not inc.reduce:
                    buf[bs] = inc.recv[rs]
                elif inc.peer < comm.rank:
                    ufunc(inc.recv[rs], buf[bs], out=buf[bs])
                else:
                    ufunc(buf[bs], inc.recv[rs], out=buf[bs])
    return buf


def _fold(rnd: _Round, buf: np.ndarray, rank: int, ufunc) -> None:
    """Several reductions into the same slices: combine in rank order."""
    by_slice: dict[tuple[int, int], list[tuple[int, np.ndarray]]] = {}
    for inc in rnd.incoming:
        for rs, bs in inc.parts:
            if not inc.reduce:
                buf[bs] = inc.recv[rs]
                continue
            by_slice.setdefault((bs.start, bs.stop), []).append(
                (inc.peer, inc.recv[rs]))
    for (a, b), items in by_slice.items():
        own = buf[a:b]
        ordered = sorted(items + [(rank, own)], key=lambda pv: pv[0])
        acc = ordered[0][1].copy()
        for _, v in ordered[1:]:
            ufunc(acc, v, out=acc)
        own[...] = acc
