"""Plans: a schedule compiled for one rank and one buffer.

:func:`compile_plan` says, per round, which slices of the buffer go to which
peer, which incoming messages can land straight in the buffer and which need
a staging buffer (reductions, or a slice this rank is sending in the same
round), and which earlier sends must finish before a round writes the
memory they read. :func:`get_plan` caches plans, with their staging
buffers, on the communicator: a repeated call allocates nothing.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from warmup_kit.schedule import Schedule, chunk_bounds

#: large messages travel in slices of this many bytes (the fast executor).
#: Each slice costs a wait, and on a loaded or oversubscribed host a wait
#: that blocks costs a trip through the scheduler: measured on the 2-core
#: test machine (ring all-reduce, interleaved with MPI_Allreduce), 4 MiB
#: slices beat 256 KiB ones by 10-40% at 1-64 MiB for N = 2 and 4, and were
#: within noise of not slicing at all.
SLICE_BYTES = int(os.environ.get("WARMUP_KIT_SLICE_BYTES", 4 << 20))
#: messages below this many bytes are never sliced
SLICE_MIN_BYTES = 2 * SLICE_BYTES
#: a round with one message each way, both below this, is one ``sendrecv``
#: (an eager-sized message: its send is done at once, so deferring its
#: completion buys nothing)
SENDRECV_MAX_BYTES = 512 << 10
#: plans kept per communicator
PLAN_CACHE_SIZE = 64


@dataclass
class Part:
    rs: slice                 # elements of the received message
    bs: slice                 # elements of the buffer they land in
    own_src: bool = False     # the receiver's own operand is still in src


@dataclass
class Incoming:
    peer: int
    recv: object                           # slice of buf (direct) or array
    direct: bool                           # landed in place already
    reduce: bool
    parts: list[Part]
    size: int = 0                          # elements


@dataclass
class Send:
    peer: int
    segs: list[tuple[bool, slice]]         # (read from src, elements)
    stage: np.ndarray | None               # gather several runs here
    size: int = 0                          # elements


@dataclass
class Round:
    sends: list[Send]
    incoming: list[Incoming] = field(default_factory=list)
    fold: bool = False                     # several reduces hit one chunk
    early: bool = True                     # reduce a slice as soon as it lands
    simple: bool = False                   # at most one small message each
                                           # way (one call, no request)
    wait_first: list = field(default_factory=list)  # earlier sends (k, i)
                                           # whose memory this round writes
    quick: tuple | None = None             # a simple round, precomputed


@dataclass
class Plan:
    """A schedule compiled for one rank and one buffer length."""

    schedule: Schedule
    rank: int
    rounds: list[Round]
    tail: list[slice] = field(default_factory=list)   # src mode: copy at end
    itemsize: int = 1
    #: every round simple (or idle): each round's ``quick`` (None: idle)
    quick: list | None = None


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
            sends.append(Send(t.dst, [(bool(k), r) for k, r in runs], stage,
                               _length(runs)))
        plan = Round(sends)
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
                parts.append(Part(slice(off, off + ln), r, bool(k)))
                off += ln
            recv = dst_runs[0][1] if direct else np.empty(n, dtype)
            plan.incoming.append(Incoming(t.src, recv, direct, t.reduce,
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
        plan.simple = (plan.early and not plan.fold
                       and 0 < len(sends) + len(plan.incoming)
                       and len(sends) <= 1 and len(plan.incoming) <= 1
                       and all(x.stage is None
                               and x.size * item < SENDRECV_MAX_BYTES
                               for x in sends)
                       and all(x.size * item < SENDRECV_MAX_BYTES
                               for x in plan.incoming))
        if plan.simple:
            plan.quick = _quick(plan, rank, count * unit)
        rounds.append(plan)
    tail = []
    if src:
        tail = [r for _, r in _runs([c for c in range(s.chunks)
                                     if c not in written], bounds)]
    quick = None
    if all(r.simple or not (r.sends or r.incoming) for r in rounds):
        quick = [r.quick for r in rounds]
    return Plan(s, rank, rounds, tail, dtype.itemsize, quick)


def _quick(rnd: Round, rank: int, total: int) -> tuple:
    """A simple round as the flat tuple the executor's shortcut reads:
    ``(send peer or -1, send reads src, send slice, receive peer or -1,
    lands in place, receive slice or staging array, landing steps)``; a
    slice of the whole buffer is None (the buffer itself, no new view).
    Each landing step is ``(reduce, received elements, buffer slice,
    own operand in src, peer's operand first)``: the order
    :func:`~warmup_kit.execute.land.reduce_ordered` applies."""
    def whole(r: slice):
        return None if r.start == 0 and r.stop == total else r
    sp, from_src, ssl = -1, False, None
    if rnd.sends:
        snd = rnd.sends[0]
        sp, (from_src, r) = snd.peer, snd.segs[0]
        ssl = whole(r)
    rp, direct, target, steps = -1, True, None, ()
    if rnd.incoming:
        inc = rnd.incoming[0]
        rp, direct = inc.peer, inc.direct
        target = whole(inc.recv) if direct else inc.recv
        if not direct:
            steps = tuple((bool(inc.reduce), inc.recv[p.rs], whole(p.bs),
                           p.own_src, inc.peer < rank) for p in inc.parts)
    return (sp, from_src, ssl, rp, direct, target, steps)


def get_plan(cache: dict, s: Schedule, rank: int, count: int, unit: int,
             dtype: np.dtype, *, src: bool = False) -> Plan:
    """A :func:`compile_plan` cached in ``cache`` (a communicator's
    ``cache``: staging buffers are never shared between communicators)."""
    key = ("plan", id(s), rank, count, unit, dtype, src)
    hit = cache.get(key)
    if hit is not None and hit.schedule is s:
        return hit
    plan = compile_plan(s, rank, count, unit, np.dtype(dtype), src=src)
    plans = [k for k in cache if k[0] == "plan"]
    if len(plans) >= PLAN_CACHE_SIZE:
        del cache[plans[0]]
    cache[key] = plan
    return plan
