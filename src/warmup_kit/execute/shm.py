"""Run a schedule zero-copy over shared memory (``ShmComm``).

The receiver does the work: it copies or reduces each incoming chunk
straight out of the sender's data segment into its own buffer, one pass per
chunk (``ufunc(peer_view, own, out=own)``, operands in ascending rank order as
:mod:`warmup_kit.schedule` requires), with no message and no staging copy.

Synchronization, per rank and round ``k`` (counters numbered across calls):

* before reading from ``p``: ``DONE[p] >= k`` (``p`` finished round ``k-1``,
  so its buffer holds the state at the start of round ``k``);
* before writing, each rank ``q`` that read from this one in an earlier
  round ``j`` (and not yet waited for) must have ``READ[q] >= j + 1``;
* a round that writes a chunk some peer reads from this rank in the same
  round (e.g. recursive doubling in place) first copies what it reads into a
  private staging buffer, publishes ``READ``, waits for those readers' ``READ``
  and only then applies: the one case with a copy;
* after the round: ``DONE = READ = k + 1``; at the end of the call, every
  reader of this rank has finished, so the caller may reuse ``buf`` at once.

With ``src=`` (out of place, as :func:`~warmup_kit.execute.exchange.run_schedule`),
chunks a rank has not written yet are read from its ``src``: peers read them
there too. ``buf`` and ``src`` must come from :meth:`ShmComm.empty`; other
arrays are copied into a scratch area of the segment and back (correct, not
zero-copy). Traffic is counted per schedule transfer, as
:func:`~warmup_kit.schedule.traffic` predicts: bytes read from a peer are
bytes it sent and this rank received.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from warmup_kit.comm.shm import BUF_OFF, DONE, READ, SRC_OFF, ShmComm
from warmup_kit.execute.plan import _count
from warmup_kit.ops import reduce_ufunc
from warmup_kit.schedule import Schedule, chunk_bounds


@dataclass
class _Land:
    """One target chunk: copy one operand, or fold operands in rank order."""
    bs: slice
    reduce: bool
    operands: list          # (rank, slice, from_src) sorted by rank


@dataclass
class _RoundShm:
    pre: list               # (field, peer, round offset) waits before work
    lands: list
    conflict: bool = False
    readers: list = field(default_factory=list)
    peers: tuple = ()


@dataclass
class ShmPlan:
    rounds: list
    trail: list
    tail: list
    stats: tuple
    stage: dict = field(default_factory=dict)


_PLANS: dict = {}


def compile_shm(s: Schedule, rank: int, count: int, unit: int, itemsize: int,
                src: bool) -> ShmPlan:
    key = (s.name, s.collective, s.ranks, s.chunks, s.root, rank, count,
           unit, itemsize, src)
    plan = _PLANS.get(key)
    if plan is not None and (plan[0] is s or plan[0].rounds == s.rounds):
        return plan[1]
    if len(_PLANS) > 256:
        _PLANS.clear()
    b = [slice(a * unit, z * unit) for a, z in chunk_bounds(count, s.chunks)]
    size = [x.stop - x.start for x in b]
    written = [set() for _ in range(s.ranks)]
    pending: dict[int, int] = {}              # reader -> last round read
    sent_to: dict[int, int] = {}
    recv_from: dict[int, int] = {}
    nsent = nrecv = 0
    rounds = []
    for k, rnd in enumerate(s.rounds):
        def from_src(p, c):
            return src and c not in written[p]
        inc = [t for t in rnd if t.dst == rank
               and any(size[c] for c in t.chunks)]
        out = [t for t in rnd if t.src == rank
               and any(size[c] for c in t.chunks)]
        targets: dict[int, list] = {}
        reduce = {}
        for t in inc:
            n = sum(size[c] for c in t.chunks) * itemsize
            recv_from[t.src] = recv_from.get(t.src, 0) + n
            nrecv += 1
            for c, d in zip(t.chunks, t.targets):
                if size[d]:
                    targets.setdefault(d, []).append((t.src, b[c],
                                                      from_src(t.src, c)))
                    reduce[d] = t.reduce
        for t in out:
            sent_to[t.dst] = sent_to.get(t.dst, 0) + \
                sum(size[c] for c in t.chunks) * itemsize
            nsent += 1
        read_now = {c for t in out for c in t.chunks if not from_src(rank, c)}
        pre = [(DONE, p, k) for p in sorted({t.src for t in inc})]
        if targets:
            pre += [(READ, q, j + 1) for q, j in sorted(pending.items())]
            pending.clear()
        lands = []
        for d in sorted(targets):
            ops = targets[d]
            if reduce[d]:
                ops = sorted(ops + [(rank, b[d], from_src(rank, d))])
            lands.append(_Land(b[d], reduce[d], ops))
        readers = sorted({t.dst for t in out})
        r = _RoundShm(pre, lands, bool(set(targets) & read_now), readers,
                      tuple(sorted({t.src for t in inc})))
        rounds.append(r)
        for q in readers:
            pending[q] = k
        for t in rnd:
            written[t.dst].update(t.targets)
    trail = [(READ, q, j + 1) for q, j in sorted(pending.items())]
    mine = set().union(*[set(t.targets) for rnd in s.rounds for t in rnd
                         if t.dst == rank]) if s.rounds else set()
    tail = [b[c] for c in range(s.chunks) if src and c not in mine and size[c]]
    stats = (sum(sent_to.values()), sum(recv_from.values()), nsent, nrecv,
             tuple(sent_to.items()), tuple(recv_from.items()))
    plan = ShmPlan(rounds, trail, tail, stats)
    _PLANS[key] = (s, plan)
    return plan


def run_schedule_shm(s: Schedule, buf: np.ndarray, comm: ShmComm, *,
                     op: str = "sum", deadline: float | None = None,
                     unit: int = 1, src: np.ndarray | None = None
                     ) -> np.ndarray:
    """Execute ``s`` on ``buf`` in place (or out of place from ``src``)."""
    if s.ranks != comm.size:
        raise ValueError(f"schedule for {s.ranks} ranks on a "
                         f"communicator of {comm.size}")
    if buf.ndim != 1 or not buf.flags.c_contiguous or buf.size % unit:
        raise ValueError("run_schedule_shm needs a 1-d contiguous buffer of "
                         "whole rows")
    if src is buf:
        src = None
    if src is not None and (src.shape != buf.shape or src.dtype != buf.dtype
                            or np.may_share_memory(src, buf)):
        raise ValueError("src must match buf's size and dtype, not overlap")
    ufunc = reduce_ufunc(op, buf.dtype)
    boff = comm.offset(buf)
    soff = -1 if src is None else comm.offset(src)
    if boff < 0 or (src is not None and soff < 0):
        work = comm.scratch(buf.nbytes).view(buf.dtype)
        work[...] = buf if src is None else src
        _run(s, work, None, comm, ufunc, deadline, unit,
             comm.offset(work), -1)
        buf[...] = work
        return buf
    _run(s, buf, src, comm, ufunc, deadline, unit, boff, soff)
    return buf


def _run(s, buf, src, comm, ufunc, deadline, unit, boff, soff) -> None:
    plan = compile_shm(s, comm.rank, buf.size // unit, unit,
                       buf.dtype.itemsize, src is not None)
    ctrl, me = comm.ctrl, comm.rank
    base = comm._base
    comm._base += len(plan.rounds) + 1
    ctrl[me, BUF_OFF], ctrl[me, SRC_OFF] = boff, soff
    ctrl[me, DONE] = ctrl[me, READ] = base
    views: dict = {}

    def view(p, from_src):
        if p == me:
            return src if from_src else buf
        v = views.get((p, from_src))
        if v is None:
            off = int(ctrl[p, SRC_OFF if from_src else BUF_OFF])
            v = views[(p, from_src)] = comm.peer_array(p, off, buf.size,
                                                       buf.dtype)
        return v

    for k, rnd in enumerate(plan.rounds):
        where = f" (round {k} of {s.name} {s.collective})"
        for fld, p, v in rnd.pre:
            comm.wait_ge(fld, p, base + v, deadline, where)
        ops = [[(view(p, fs)[sl], p) for p, sl, fs in land.operands]
               for land in rnd.lands]
        if rnd.conflict:
            ops = [[(_staged(plan, k, i, j, a) if p != me else a, p)
                    for j, (a, p) in enumerate(o)]
                   for i, o in enumerate(ops)]
            ctrl[me, READ] = base + k + 1
            for q in rnd.readers:
                comm.wait_ge(READ, q, base + k + 1, deadline, where)
        for land, o in zip(rnd.lands, ops):
            _land(land, o, buf, me, ufunc, plan, k)
        ctrl[me, DONE] = ctrl[me, READ] = base + k + 1
    for fld, q, v in plan.trail:
        comm.wait_ge(fld, q, base + v, deadline, " (end of call)")
    _count(comm.stats, plan.stats)
    for sl in plan.tail:
        buf[sl] = src[sl]


def _staged(plan, k, i, j, a):
    key = (k, i, j, a.dtype.str, a.size)
    t = plan.stage.get(key)
    if t is None:
        t = plan.stage[key] = np.empty_like(a)
    np.copyto(t, a)
    return t


def _land(land: _Land, ops, buf, me, ufunc, plan, k) -> None:
    out = buf[land.bs]
    if not land.reduce:
        np.copyto(out, ops[0][0])
        return
    arrs = [a for a, _ in ops]
    i = [p for _, p in ops].index(me)
    if len(arrs) == 2:
        ufunc(arrs[0], arrs[1], out=out)
        return
    if i <= 1:
        ufunc(arrs[0], arrs[1], out=out)
        rest = arrs[2:]
    else:
        key = ("acc", k, land.bs.start, out.dtype.str)
        acc = plan.stage.get(key)
        if acc is None or acc.size != out.size:
            acc = plan.stage[key] = np.empty_like(out)
        ufunc(arrs[0], arrs[1], out=acc)
        for a in arrs[2:i]:
            ufunc(acc, a, out=acc)
        ufunc(acc, arrs[i], out=out)
        rest = arrs[i + 1:]
    for a in rest:
        ufunc(out, a, out=out)
