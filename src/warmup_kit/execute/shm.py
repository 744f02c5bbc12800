"""Run a schedule zero-copy over shared memory (any
:class:`~warmup_kit.comm.shm.ZeroCopyComm`: ``ShmComm``).

The receiver does the work: it copies or reduces each incoming chunk
straight out of the sender's data segment into its own buffer, one pass per
chunk (operands in ascending rank order, :func:`~warmup_kit.execute.land.
reduce_ordered`), with no message and no staging copy.

Synchronization, per rank and round ``k`` (counters numbered across calls):

* before reading from ``p``: ``DONE[p] >= k`` (``p`` finished round ``k-1``,
  so its buffer holds the state at the start of round ``k``), and ``p`` is in
  the same call (its published fingerprint is ours);
* before writing, each rank ``q`` that read from this one in an earlier
  round ``j`` (and not yet waited for) must have ``READ[q] >= j + 1``;
* a round that writes a chunk some peer reads from this rank in the same
  round (e.g. recursive doubling in place) first copies what it reads into a
  private staging buffer, publishes ``READ``, waits for those readers' ``READ``
  and only then applies: the one case with a copy;
* after the round: ``DONE = READ = k + 1``; at the end of the call, every
  reader of this rank has finished, so the caller may reuse ``buf`` at once.

With ``src=`` (out of place), chunks a rank has not written yet are read
from its ``src``: peers read them there too (a rank publishes whether it has
a ``src``, so ranks may differ: a broadcast's root runs out of place, the
others in place). ``buf`` and ``src`` should come
from :meth:`ShmComm.empty`; other arrays go through a scratch area of the
segment (one copy in, one out: correct, not zero-copy). Bytes are counted as
they are read out of a peer's segment (:meth:`ShmComm.took`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from warmup_kit.comm.shm import DONE, READ, BUF_OFF, SRC_OFF, ZeroCopyComm
from warmup_kit.execute.land import reduce_ordered
from warmup_kit.schedule import Schedule, chunk_bounds


@dataclass
class Land:
    """One target chunk: copy one operand, or reduce several in rank order."""
    bs: slice
    reduce: bool
    operands: list          # (rank, slice, not yet written there), by rank


@dataclass
class RoundShm:
    pre: list               # (field, peer, round offset) waits before work
    lands: list
    conflict: bool = False
    readers: list = field(default_factory=list)
    peers: tuple = ()


@dataclass
class ShmPlan:
    schedule: Schedule
    rounds: list
    trail: list
    tail: list
    stage: dict = field(default_factory=dict)


def compile_shm(s: Schedule, rank: int, count: int, unit: int,
                src: bool) -> ShmPlan:
    """Per round: whom to wait for, and which chunks to land from whom."""
    b = [slice(a * unit, z * unit) for a, z in chunk_bounds(count, s.chunks)]
    size = [x.stop - x.start for x in b]
    written = [set() for _ in range(s.ranks)]
    pending: dict[int, int] = {}              # reader -> last round read
    rounds = []
    for k, rnd in enumerate(s.rounds):
        def unwritten(p, c):
            return c not in written[p]
        inc = [t for t in rnd if t.dst == rank
               and any(size[c] for c in t.chunks)]
        out = [t for t in rnd if t.src == rank
               and any(size[c] for c in t.chunks)]
        targets: dict[int, list] = {}
        reduce = {}
        for t in inc:
            for c, d in zip(t.chunks, t.targets):
                if size[d]:
                    targets.setdefault(d, []).append((t.src, b[c],
                                                      unwritten(t.src, c)))
                    reduce[d] = t.reduce
        read_now = {c for t in out for c in t.chunks
                    if not (src and unwritten(rank, c))}
        pre = [(DONE, p, k) for p in sorted({t.src for t in inc})]
        if targets:
            pre += [(READ, q, j + 1) for q, j in sorted(pending.items())]
            pending.clear()
        lands = []
        for d in sorted(targets):
            ops = targets[d]
            if reduce[d]:
                ops = sorted(ops + [(rank, b[d], unwritten(rank, d))])
            lands.append(Land(b[d], reduce[d], ops))
        readers = sorted({t.dst for t in out})
        rounds.append(RoundShm(pre, lands, bool(set(targets) & read_now),
                               readers, tuple(sorted({t.src for t in inc}))))
        for q in readers:
            pending[q] = k
        for t in rnd:
            written[t.dst].update(t.targets)
    trail = [(READ, q, j + 1) for q, j in sorted(pending.items())]
    mine = {d for rnd in s.rounds for t in rnd if t.dst == rank
            for d in t.targets}
    tail = [b[c] for c in range(s.chunks) if src and c not in mine and size[c]]
    return ShmPlan(s, rounds, trail, tail)


def run_shm(s: Schedule, buf: np.ndarray, src, comm: ZeroCopyComm, ufunc,
            deadline, unit: int, tag: int) -> None:
    """Execute ``s`` on ``buf`` in place, or out of place from ``src``."""
    boff = comm.offset(buf)
    soff = -1 if src is None else comm.offset(src)
    if src is not None and soff < 0:           # the input into the segment
        staged = comm.scratch("src", src.nbytes).view(src.dtype)
        np.copyto(staged, src)
        src, soff = staged, comm.offset(staged)
    if boff < 0:                               # work in the segment
        work = comm.scratch("buf", buf.nbytes).view(buf.dtype)
        if src is None:
            np.copyto(work, buf)
        _run(s, work, src, comm, ufunc, deadline, unit, comm.offset(work),
             soff, tag)
        np.copyto(buf, work)
        return
    _run(s, buf, src, comm, ufunc, deadline, unit, boff, soff, tag)


def _plan(comm: ZeroCopyComm, s, count, unit, src: bool) -> ShmPlan:
    key = ("shm-plan", id(s), comm.rank, count, unit, src)
    plan = comm.cache.get(key)
    if plan is None or plan.schedule is not s:
        plan = comm.cache[key] = compile_shm(s, comm.rank, count, unit, src)
    return plan


def _run(s, buf, src, comm: ZeroCopyComm, ufunc, deadline, unit, boff, soff,
         tag) -> None:
    plan = _plan(comm, s, buf.size // unit, unit, src is not None)
    ctrl, me = comm.ctrl, comm.rank
    base = comm.begin(len(plan.rounds), tag, boff, soff)
    views: dict = {}

    def view(p, unwritten):
        """Where rank p's chunk is: its input if not yet written and p runs
        out of place, else its buffer."""
        if p == me:
            return src if unwritten and src is not None else buf
        v = views.get((p, unwritten))
        if v is None:
            off = int(ctrl[p, SRC_OFF]) if unwritten else -1
            if off < 0:
                off = int(ctrl[p, BUF_OFF])
            v = views[(p, unwritten)] = comm.peer_array(p, off, buf.size,
                                                        buf.dtype)
        return v

    for k, rnd in enumerate(plan.rounds):
        where = f" (round {k} of {s.name} {s.collective})"
        for fld, p, v in rnd.pre:
            comm.wait_ge(fld, p, base + v, deadline, where)
            if fld == DONE:
                comm.check_fingerprint(p, tag)
        ops = [[(p, view(p, fs)[sl]) for p, sl, fs in land.operands]
               for land in rnd.lands]
        read: dict[int, int] = {}
        for o in ops:
            for p, a in o:
                if p != me:
                    read[p] = read.get(p, 0) + a.nbytes
        if rnd.conflict:             # read everything now, then let go
            ops = [[(p, _staged(plan, k, i, j, a) if p != me else a)
                    for j, (p, a) in enumerate(o)]
                   for i, o in enumerate(ops)]
            _took(comm, read)
            ctrl[me, READ] = base + k + 1
            for q in rnd.readers:
                comm.wait_ge(READ, q, base + k + 1, deadline, where)
        for land, o in zip(rnd.lands, ops):
            out = buf[land.bs]
            if not land.reduce:
                np.copyto(out, o[0][1])
            else:
                reduce_ordered(o, out, ufunc, own=me, scratch=lambda: _acc(
                    plan, k, land.bs.start, out))
        if not rnd.conflict:
            _took(comm, read)
        ctrl[me, DONE] = ctrl[me, READ] = base + k + 1
    for fld, q, v in plan.trail:
        comm.wait_ge(fld, q, base + v, deadline, " (end of call)")
    comm.settle()
    for sl in plan.tail:
        buf[sl] = src[sl]


def _took(comm: ZeroCopyComm, read: dict) -> None:
    """Count what this round read out of peers' segments (before telling
    them so: a peer settles its sent bytes once its readers are done)."""
    for p, nbytes in read.items():
        comm.took(p, nbytes)


def _staged(plan: ShmPlan, k, i, j, a):
    key = (k, i, j, a.dtype.str, a.size)
    t = plan.stage.get(key)
    if t is None:
        t = plan.stage[key] = np.empty_like(a)
    np.copyto(t, a)
    return t


def _acc(plan: ShmPlan, k, start, out):
    key = ("acc", k, start, out.dtype.str, out.size)
    acc = plan.stage.get(key)
    if acc is None:
        acc = plan.stage[key] = np.empty_like(out)
    return acc
