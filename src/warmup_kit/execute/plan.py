"""Plans: a schedule compiled for one rank and one buffer, and the steps that
carry a plan's rounds out (used by :mod:`warmup_kit.execute.exchange` on any transport
and :mod:`warmup_kit.execute.p2p` on non-blocking point-to-point).

:func:`compile_plan` says, per round, which slices of the buffer go to which
peer, which incoming messages can land straight in the buffer and which need
a staging buffer (reductions, or a slice this rank is sending in the same
round); :func:`get_plan` caches plans with their staging buffers, so a
repeated call allocates nothing. :func:`_apply` lands (copies or reduces)
what arrived; :func:`_fold` combines several reductions into one chunk in
ascending rank order, so results are bit-for-bit identical on every rank.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from warmup_kit.schedule import Schedule, chunk_bounds

#: large messages travel in slices of this many bytes (fast path only).
#: Each slice costs a wait, and on a loaded or oversubscribed host a wait
#: that blocks costs a trip through the scheduler: measured on the 2-core
#: test machine (ring all-reduce, interleaved with MPI_Allreduce), 4 MiB
#: slices beat 256 KiB ones by 10-40% at 1-64 MiB for N = 2 and 4, and were
#: within noise of not slicing at all.
SLICE_BYTES = int(os.environ.get("WARMUP_KIT_SLICE_BYTES", 4 << 20))
#: messages below this many bytes are never sliced
SLICE_MIN_BYTES = 2 * SLICE_BYTES
#: a round with one message each way, both below this, and no deadline is
#: one blocking ``Sendrecv`` (an eager-sized message: its send is done at
#: once, so deferring its completion buys nothing)
SENDRECV_MAX_BYTES = 512 << 10


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
                       and sends[0].size * item < SENDRECV_MAX_BYTES
                       and len(plan.incoming) == 1 and not plan.fold
                       and plan.incoming[0].size * item
                       < SENDRECV_MAX_BYTES)
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


def _trace(rank: int, k: int, sends) -> None:
    for peer, a in sends:
        print(f"[rank {rank}] round {k}: send {a.nbytes} B -> rank {peer}",
              flush=True)




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
