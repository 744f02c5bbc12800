"""Large rounds over non-blocking point-to-point calls (``MPIComm``).

A rank posts every receive and send of a round at once, moves on to the next
round as soon as what it receives has landed, and lets its sends complete in
the background until a later round is about to write the memory they read
(``_Round.wait_first``) or the call ends. Messages of :data:`SLICE_BYTES
<warmup_kit.execute.plan.SLICE_BYTES>` or more travel in slices, each reduced
as soon as it lands; a round with one small message each way and no deadline
is one ``Sendrecv``. Traffic is counted per schedule transfer, as
:func:`~warmup_kit.schedule.traffic` predicts.
"""
from __future__ import annotations

from warmup_kit.execute import plan as P
from warmup_kit.execute.plan import (
    Plan, _Round, _apply, _count, _fold, _gather_sends, _trace)


def run_p2p(plan: Plan, buf, src, comm, ufunc, deadline, trace) -> None:
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


def _pieces(size: int, itemsize: int) -> list[tuple[int, int]]:
    """How a message of ``size`` elements is sliced on the wire.

    A function of the message alone, so sender and receiver agree.
    """
    if size * itemsize < P.SLICE_MIN_BYTES:
        return [(0, size)]
    step = max(1, P.SLICE_BYTES // itemsize)
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


