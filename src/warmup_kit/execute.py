"""Run a schedule for real on a communicator (DESIGN: one definition, four uses).

:func:`run_schedule` compiles a schedule once per (rank, length, dtype) into a
plan: which slices of the buffer go to which peer each round, which incoming
messages can land straight in the buffer and which need a staging buffer
(reductions, or a slice this rank is sending in the same round). Plans and
their staging buffers are cached, so a repeated call allocates nothing.

The round semantics are those of :mod:`warmup_kit.schedule`; in particular,
several reductions into one chunk are combined in ascending rank order, which
makes results bit-for-bit identical on every rank.

Two things keep the hot path short (they change no result and no byte count):

* ``src=``: run out of place. Chunks this rank has not yet written are read
  from ``src`` (sent from it, or reduced as ``ufunc(recv, src) -> buf``), so
  an out-of-place all-reduce needs no copy of the input first; chunks the
  schedule never writes are copied at the end.
* On a transport with non-blocking point-to-point calls (``MPIComm``), large
  messages travel as slices of :data:`SLICE_BYTES` and each received slice
  is reduced as soon as it lands, while it is still in cache and while the
  other slices are in flight. A round with one message each way and no
  deadline is one ``Sendrecv``. Traffic is counted per schedule transfer, as
  :func:`~warmup_kit.schedule.traffic` predicts.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from .comm.base import Comm
from .ops import reduce_ufunc
from .schedule import Schedule, chunk_bounds

#: large messages travel in slices of this many bytes (fast path only)
SLICE_BYTES = int(os.environ.get("WARMUP_KIT_SLICE_BYTES", 256 << 10))
#: messages below this many bytes are never sliced
SLICE_MIN_BYTES = 2 * SLICE_BYTES


@dataclass
class _Part:
    rs: slice                 # elements of the received message
    bs: slice                 # elements of the buffer they land in
    own_src: bool = False     # the receiver's own operand is still in src


@dataclass
class _Incoming:
    peer: int
    recv: object                           # slice of buf (direct) or array
    direct: bool                           # landed in place already
    reduce: bool
    parts: list[_Part]
    size: int = 0                          # elements


@dataclass
class _Send:
    peer: int
    segs: list[tuple[bool, slice]]         # (read from src, elements)
    stage: np.ndarray | None               # gather several runs here
    size: int = 0                          # elements


@dataclass
class _Round:
    sends: list[_Send]
    incoming: list[_Incoming] = field(default_factory=list)
    fold: bool = False                     # several reduces hit one chunk
    early: bool = True                     # reduce a slice as soon as it lands
    simple: bool = False                   # one small message each way
    wait_first: list = field(default_factory=list)  # earlier sends (k, i)
                                           # whose memory this round writes
    stats: tuple = ()                      # (sent, recvd, nsent, nrecvd,
                                           #  sent_to, received_from)


@dataclass
class Plan:
    """A schedule compiled for one rank and one buffer length."""

    schedule: Schedule
    rank: int
    rounds: list[_Round]
    tail: list[slice] = field(default_factory=list)   # src mode: copy at end
    itemsize: int = 1
    stats: tuple = ()                                  # all rounds' traffic


def _runs(chunks, bounds, key=None) -> list[tuple[object, slice]]:
    """Coalesce a chunk list into contiguous element slices.

    With ``key``, only neighbouring chunks with equal ``key(chunk)`` merge;
    each run comes with its key.
    """
    out: list[tuple[object, slice]] = []
    for c in chunks:
        a, b = bounds[c]
        if b == a:
            continue
        k = key(c) if key else None
        if out and out[-1][1].stop == a and out[-1][0] == k:
            out[-1] = (k, slice(out[-1][1].start, b))
        else:
            out.append((k, slice(a, b)))
    return out


def _overlaps(a: slice, b: slice) -> bool:
    return a.start < b.stop and b.start < a.stop


def _length(runs) -> int:
    return sum(r.stop - r.start for _, r in runs)


def compile_plan(s: Schedule, rank: int, count: int, unit: int,
                 dtype: np.dtype, *, src: bool = False) -> Plan:
    """Turn ``s`` into per-round message lists for ``rank``.

    ``count`` rows of ``unit`` elements each are cut into ``s.chunks``
    pieces; slices in the plan are in elements. With ``src``, the plan reads
    chunks not yet written from a separate input array.
    """
    dtype = np.dtype(dtype)
    bounds = [(a * unit, b * unit) for a, b in chunk_bounds(count, s.chunks)]
    written: set[int] = set()
    in_flight: dict[tuple[int, int], list[slice]] = {}   # sends reading buf

    def fresh(c: int) -> bool:
        return src and c not in written

    rounds = []
    for rnd in s.rounds:
        sends, buf_sends = [], []
        for t in rnd:
            if t.src != rank:
                continue
            runs = _runs(t.chunks, bounds, fresh)
            if not runs:
                continue
            buf_sends.extend(r for from_src, r in runs if not from_src)
            stage = (None if len(runs) == 1
                     else np.empty(_length(runs), dtype))
            sends.append(_Send(t.dst, [(bool(k), r) for k, r in runs], stage,
                               _length(runs)))
        plan = _Round(sends)
        targets: dict[int, int] = {}
        for t in rnd:
            if t.dst == rank:
                for c in t.targets:
                    targets[c] = targets.get(c, 0) + 1
        plan.fold = any(v > 1 for v in targets.values())
        for t in rnd:
            if t.dst != rank:
                continue
            n = _length(_runs(t.chunks, bounds))
            if n == 0:
                continue
            if plan.fold:      # combine chunk by chunk, never a coalesced run
                dst_runs = [(fresh(c), slice(*bounds[c])) for c in t.targets
                            if bounds[c][1] > bounds[c][0]]
            else:
                dst_runs = _runs(t.targets, bounds,
                                 fresh if t.reduce else None)
            if n != _length(dst_runs):
                raise ValueError(f"{s.name}: transfer {t} changes size; "
                                 "chunks must be equal for this collective")
            direct = (not t.reduce and len(dst_runs) == 1 and not any(
                _overlaps(dst_runs[0][1], x) for x in buf_sends))
            parts, off = [], 0
            for k, r in dst_runs:
                ln = r.stop - r.start
                parts.append(_Part(slice(off, off + ln), r, bool(k)))
                off += ln
            recv = dst_runs[0][1] if direct else np.empty(n, dtype)
            plan.incoming.append(_Incoming(t.src, recv, direct, t.reduce,
                                           parts, n))
            # a slice may be reduced before the round's sends are done only
            # if no send reads the buffer where it lands
            if any(_overlaps(p.bs, x) for p in parts for x in buf_sends):
                plan.early = False
        if plan.fold:
            plan.early = False
        # a send may complete in a later round, but before anything lands
        # on the memory it reads
        writes = [p.bs for inc in plan.incoming for p in inc.parts]
        for key, regions in list(in_flight.items()):
            if any(_overlaps(a, b) for a in regions for b in writes):
                plan.wait_first.append(key)
                del in_flight[key]
        for i, snd in enumerate(sends):
            if snd.stage is None and not snd.segs[0][0]:
                in_flight[(len(rounds), i)] = [snd.segs[0][1]]
        for t in rnd:
            if t.dst == rank:
                written.update(t.targets)
        item = dtype.itemsize
        sent_to: dict[int, int] = {}
        received_from: dict[int, int] = {}
        for snd in sends:
            sent_to[snd.peer] = sent_to.get(snd.peer, 0) + snd.size * item
        for inc in plan.incoming:
            received_from[inc.peer] = (received_from.get(inc.peer, 0)
                                       + inc.size * item)
        plan.stats = (sum(sent_to.values()), sum(received_from.values()),
                      len(sends), len(plan.incoming),
                      tuple(sent_to.items()), tuple(received_from.items()))
        plan.simple = (plan.early and len(sends) == 1
                       and sends[0].stage is None
                       and sends[0].size * item < SLICE_MIN_BYTES
                       and len(plan.incoming) == 1 and not plan.fold
                       and plan.incoming[0].size * item < SLICE_MIN_BYTES)
        rounds.append(plan)
    tail = []
    if src:
        tail = [r for _, r in _runs([c for c in range(s.chunks)
                                     if c not in written], bounds)]
    total: list = [0, 0, 0, 0, {}, {}]
    for rnd in rounds:
        for i in range(4):
            total[i] += rnd.stats[i]
        for i in (4, 5):
            for p, b in rnd.stats[i]:
                total[i][p] = total[i].get(p, 0) + b
    total[4], total[5] = tuple(total[4].items()), tuple(total[5].items())
    return Plan(s, rank, rounds, tail, dtype.itemsize, tuple(total))


_PLANS: OrderedDict = OrderedDict()
_UFUNCS: dict = {}
_TRACE = "WARMUP_KIT_TRACE"
try:        # os.environ's own dict: a lookup without re-encoding the key
    _ENV, _TRACE_KEY = os.environ._data, os.environ.encodekey(_TRACE)
except AttributeError:  # pragma: no cover - not CPython on POSIX
    _ENV, _TRACE_KEY = None, _TRACE


def _tracing() -> bool:
    """WARMUP_KIT_TRACE=1 turns on per-round lines (read on every call)."""
    if _ENV is None:  # pragma: no cover
        return os.environ.get(_TRACE) == "1"
    v = _ENV.get(_TRACE_KEY)
    return v is not None and os.environ.decodevalue(v) == "1"
_PLAN_CACHE_SIZE = 64


def get_plan(s: Schedule, rank: int, count: int, unit: int,
             dtype: np.dtype, *, src: bool = False) -> Plan:
    """A cached :func:`compile_plan`."""
    key = (id(s), rank, count, unit, dtype, src)
    hit = _PLANS.get(key)
    if hit is not None and hit.schedule is s:
        _PLANS.move_to_end(key)
        return hit
    plan = compile_plan(s, rank, count, unit, np.dtype(dtype), src=src)
    _PLANS[key] = plan
    if len(_PLANS) > _PLAN_CACHE_SIZE:
        _PLANS.popitem(last=False)
    return plan


def run_schedule(s: Schedule, buf: np.ndarray, comm: Comm, *, op: str = "sum",
                 deadline: float | None = None, unit: int = 1,
                 src: np.ndarray | None = None) -> np.ndarray:
    """Execute ``s`` in place on the 1-d contiguous ``buf``; return ``buf``.

    Args:
        s: the schedule; ``s.ranks`` must equal ``comm.size``.
        buf: this rank's working buffer (``count * unit`` elements).
        comm: the transport.
        op: reduction operator name (see :mod:`warmup_kit.ops`).
        deadline: :func:`time.monotonic` time to give up at.
        unit: elements per row; chunks are cut on row boundaries.
        src: optional input of ``buf``'s size and dtype, not overlapping it:
            run out of place, as if ``buf[:] = src`` came first, without
            that copy. ``src`` is only read.
    """
    if s.ranks != comm.size:
        raise ValueError(f"schedule for {s.ranks} ranks on a "
                         f"communicator of {comm.size}")
    if buf.ndim != 1 or not buf.flags.c_contiguous:
        raise ValueError("run_schedule needs a 1-d contiguous buffer")
    if buf.size % unit:
        raise ValueError(f"buffer of {buf.size} elements is not a whole "
                         f"number of rows of {unit}")
    if src is not None:
        if src is buf:
            src = None
        elif (src.shape != buf.shape or src.dtype != buf.dtype
              or not src.flags.c_contiguous):
            raise ValueError("src must be 1-d, contiguous, and of buf's "
                             "size and dtype")
        elif np.may_share_memory(src, buf):
            raise ValueError("src and buf overlap")
    ufunc = _UFUNCS.get((op, buf.dtype))
    if ufunc is None:
        ufunc = _UFUNCS[(op, buf.dtype)] = reduce_ufunc(op, buf.dtype)
    plan = get_plan(s, comm.rank, buf.size // unit, unit, buf.dtype,
                    src=src is not None)
    trace = _tracing()
    if getattr(comm, "isend", None) is not None:
        _run_p2p(plan, buf, src, comm, ufunc, deadline, trace)
        return buf
    for k, rnd in enumerate(plan.rounds):
        sends = _gather_sends(rnd, buf, src)
        if trace:
            _trace(comm.rank, k, sends)
        recvs = [(inc.peer, buf[inc.recv] if inc.direct else inc.recv)
                 for inc in rnd.incoming]
        comm.exchange(sends, recvs, deadline=deadline)
        if rnd.fold:
            _fold(rnd, buf, src, comm.rank, ufunc)
            continue
        for inc in rnd.incoming:
            _apply(inc, inc.parts, buf, src, comm.rank, ufunc)
    if src is not None:
        for r in plan.tail:
            buf[r] = src[r]
    return buf


def _trace(rank: int, k: int, sends) -> None:
    for peer, a in sends:
        print(f"[rank {rank}] round {k}: send {a.nbytes} B -> rank {peer}",
              flush=True)


def _run_p2p(plan: Plan, buf, src, comm, ufunc, deadline, trace) -> None:
    """All rounds over non-blocking point-to-point calls (MPIComm).

    A rank moves on to the next round as soon as what it receives has
    landed; its sends complete in the background until a later round is
    about to write the memory they read (``_Round.wait_first``), or the end.
    """
    rank = comm.rank
    pending: dict[tuple[int, int], tuple[list, list]] = {}
    for k, rnd in enumerate(plan.rounds):
        for key in rnd.wait_first:
            if key in pending:
                comm.wait(*pending.pop(key), deadline)
        if rnd.simple:           # one small message each way
            snd, inc = rnd.sends[0], rnd.incoming[0]
            from_src, r = snd.segs[0]
            sarr = (src if from_src else buf)[r]
            rarr = buf[inc.recv] if inc.direct else inc.recv
            if trace:
                _trace(rank, k, [(snd.peer, sarr)])
            if deadline is None:     # small sends are eager: done at once
                comm.sendrecv(sarr, snd.peer, rarr, inc.peer)
            else:
                comm.wait([comm.irecv(rarr, inc.peer),
                           comm.isend(sarr, snd.peer)],
                          [("from", inc.peer), ("to", snd.peer)], deadline)
            if not inc.direct:
                _apply(inc, inc.parts, buf, src, rank, ufunc)
            continue
        sends = _gather_sends(rnd, buf, src)
        if trace:
            _trace(rank, k, sends)
        _round_p2p(k, rnd, sends, buf, src, comm, ufunc, deadline,
                   plan.itemsize, pending)
    reqs, labels = [], []
    for r, lab in pending.values():
        reqs.extend(r)
        labels.extend(lab)
    if reqs:
        comm.wait(reqs, labels, deadline)
    _count(comm.stats, plan.stats)
    if src is not None:
        for r in plan.tail:
            buf[r] = src[r]


def _gather_sends(rnd: _Round, buf, src) -> list[tuple[int, np.ndarray]]:
    out = []
    for snd in rnd.sends:
        if snd.stage is None:
            from_src, r = snd.segs[0]
            out.append((snd.peer, (src if from_src else buf)[r]))
            continue
        off = 0
        for from_src, r in snd.segs:
            ln = r.stop - r.start
            snd.stage[off:off + ln] = (src if from_src else buf)[r]
            off += ln
        out.append((snd.peer, snd.stage))
    return out


def _apply(inc: _Incoming, parts, buf, src, rank: int, ufunc,
           lo: int = 0, hi: int | None = None) -> None:
    """Land (copy or reduce) the received elements ``[lo, hi)`` of ``inc``."""
    if inc.direct:
        return
    recv = inc.recv
    for p in parts:
        rs, bs = p.rs, p.bs
        if hi is not None:              # the part's share of one slice
            a, b = max(rs.start, lo), min(rs.stop, hi)
            if a >= b:
                continue
            bs = slice(bs.start + a - rs.start, bs.start + b - rs.start)
            rs = slice(a, b)
        if not inc.reduce:
            buf[bs] = recv[rs]
            continue
        own = (src if p.own_src else buf)[bs]
        if inc.peer < rank:
            ufunc(recv[rs], own, out=buf[bs])
        else:
            ufunc(own, recv[rs], out=buf[bs])


def _pieces(size: int, itemsize: int) -> list[tuple[int, int]]:
    """How a message of ``size`` elements is sliced on the wire.

    A function of the message alone, so sender and receiver agree.
    """
    if size * itemsize < SLICE_MIN_BYTES:
        return [(0, size)]
    step = max(1, SLICE_BYTES // itemsize)
    return [(a, min(a + step, size)) for a in range(0, size, step)]


def _round_p2p(k: int, rnd: _Round, sends, buf, src, comm, ufunc, deadline,
               itemsize: int, pending: dict) -> None:
    """One round: post every slice, land the received ones, leave the sends
    in ``pending`` (unless this round must finish them itself)."""
    incs = rnd.incoming
    reqs, labels, landing = [], [], []
    for inc in incs:
        target = buf[inc.recv] if inc.direct else inc.recv
        for a, b in _pieces(inc.size, itemsize):
            reqs.append(comm.irecv(target[a:b], inc.peer))
            labels.append(("from", inc.peer))
            landing.append((inc, a, b))
    mine = []
    for i, (peer, arr) in enumerate(sends):
        sreqs = [comm.isend(arr[a:b], peer)
                 for a, b in _pieces(arr.size, itemsize)]
        pending[(k, i)] = (sreqs, [("to", peer)] * len(sreqs))
        mine.append((k, i))
    if rnd.early:
        for i, (inc, a, b) in enumerate(landing):
            comm.wait(reqs[i:i + 1], labels[i:i + 1], deadline)
            if not inc.direct:
                _apply(inc, inc.parts, buf, src, comm.rank, ufunc, a, b)
        return
    for key in mine:                 # this round writes what it sends
        r, lab = pending.pop(key)
        reqs.extend(r)
        labels.extend(lab)
    comm.wait(reqs, labels, deadline)
    if rnd.fold:
        _fold(rnd, buf, src, comm.rank, ufunc)
        return
    for inc in incs:
        _apply(inc, inc.parts, buf, src, comm.rank, ufunc)


def _count(stats, rs) -> None:
    """Add one round's precomputed traffic (as ``TrafficStats.count``)."""
    sent, received, nsent, nreceived, sent_to, received_from = rs
    stats.bytes_sent += sent
    stats.bytes_received += received
    stats.messages_sent += nsent
    stats.messages_received += nreceived
    for p, b in sent_to:
        stats.sent_to[p] += b
    for p, b in received_from:
        stats.received_from[p] += b


def _fold(rnd: _Round, buf: np.ndarray, src, rank: int, ufunc) -> None:
    """Several reductions into the same slices: combine in rank order."""
    by_slice: dict[tuple[int, int], list[tuple[int, np.ndarray]]] = {}
    own_src: dict[tuple[int, int], bool] = {}
    for inc in rnd.incoming:
        for p in inc.parts:
            if not inc.reduce:
                buf[p.bs] = inc.recv[p.rs]
                continue
            key = (p.bs.start, p.bs.stop)
            by_slice.setdefault(key, []).append((inc.peer, inc.recv[p.rs]))
            own_src[key] = p.own_src
    for (a, b), items in by_slice.items():
        own = (src if own_src[(a, b)] else buf)[a:b]
        ordered = sorted(items + [(rank, own)], key=lambda pv: pv[0])
        acc = ordered[0][1].copy()
        for _, v in ordered[1:]:
            ufunc(acc, v, out=acc)
        buf[a:b] = acc
