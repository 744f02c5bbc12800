"""The fast executor: a compiled plan over any communicator's point-to-point
calls (MPI, sockets, shared-memory mailboxes).

What it does beyond the reference executor (it changes no result, and the
transport counts the same payload bytes):

* out of place (``src=``): chunks this rank has not yet written are sent
  from, and reduced out of, the caller's input; no copy of it first;
* a rank posts every receive and send of a round at once and moves on to
  the next round as soon as what it receives has landed; its sends complete
  in the background until a later round is about to write the memory they
  read (``Round.wait_first``) or the call ends;
* messages of :data:`~warmup_kit.execute.plan.SLICE_BYTES` or more travel in
  slices, each reduced as soon as it lands (a large transfer then counts as
  several transport messages);
* a round with at most one small message each way is one blocking call
  (``sendrecv``, ``send_wait`` or ``recv_wait``).
"""
from __future__ import annotations

import os

from warmup_kit.comm.base import Comm
from warmup_kit.execute import plan as P
from warmup_kit.execute.land import fold, land


def trace(rank: int, k: int, peer: int, nbytes: int) -> None:
    """One whole line per message on stderr (``WARMUP_KIT_TRACE=1``)."""
    os.write(2, f"[rank {rank}] round {k}: send {nbytes} B -> rank "
                f"{peer}\n".encode())


def gather_sends(rnd: P.Round, buf, src) -> list:
    """(peer, array) of each send of a round (staged if several runs)."""
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


def run_p2p(plan: P.Plan, buf, src, comm: Comm, ufunc, deadline,
            tag: int, tracing: bool = False) -> None:
    """Every round of ``plan`` on this rank."""
    if plan.quick is not None:          # every round one blocking call
        for k, q in enumerate(plan.quick):
            if q is not None:
                _simple(k, q, buf, src, comm, ufunc, deadline, tag, tracing)
        if src is not None:
            for r in plan.tail:
                buf[r] = src[r]
        return
    rank = comm.rank
    pending: dict[tuple[int, int], list] = {}
    for k, rnd in enumerate(plan.rounds):
        for key in rnd.wait_first:
            if key in pending:
                comm.waitall(pending.pop(key), deadline)
        if rnd.simple:           # at most one small message each way
            _simple(k, rnd.quick, buf, src, comm, ufunc, deadline, tag,
                    tracing)
            continue
        sends = gather_sends(rnd, buf, src)
        if tracing:
            for peer, arr in sends:
                trace(rank, k, peer, arr.nbytes)
        _round(k, rnd, sends, buf, src, comm, ufunc, deadline, tag,
               plan.itemsize, pending)
    reqs = [r for rs in pending.values() for r in rs]
    if reqs:
        comm.waitall(reqs, deadline)
    if src is not None:
        for r in plan.tail:
            buf[r] = src[r]


def _simple(k: int, q: tuple, buf, src, comm: Comm, ufunc, deadline,
            tag: int, tracing: bool) -> None:
    """A round of one small send and/or one small receive (``q``: the
    round's :attr:`~warmup_kit.execute.plan.Round.quick`): one blocking
    call (``sendrecv``, ``send_wait`` or ``recv_wait``), then land."""
    sp, from_src, ssl, rp, direct, target, steps = q
    if sp >= 0:
        sarr = src if from_src else buf
        if ssl is not None:
            sarr = sarr[ssl]
        if tracing:
            trace(comm.rank, k, sp, sarr.nbytes)
        if rp < 0:
            comm.send_wait(sarr, sp, tag, deadline=deadline)
            return
    if direct:
        rarr = buf if target is None else buf[target]
    else:
        rarr = target
    if sp >= 0:
        comm.sendrecv(sarr, sp, rarr, rp, tag, deadline=deadline)
    else:
        comm.recv_wait(rarr, rp, tag, deadline=deadline)
    for reduce, got, bs, own_src, peer_first in steps:
        out = buf if bs is None else buf[bs]
        if not reduce:
            out[...] = got
            continue
        own = src if own_src else buf
        if bs is not None:
            own = own[bs]
        if peer_first:           # ascending rank order, as reduce_ordered
            ufunc(got, own, out=out)
        else:
            ufunc(own, got, out=out)


def pieces(size: int, itemsize: int) -> list[tuple[int, int]]:
    """How a message of ``size`` elements is sliced on the wire.

    A function of the message alone, so sender and receiver agree.
    """
    if size * itemsize < P.SLICE_MIN_BYTES:
        return [(0, size)]
    step = max(1, P.SLICE_BYTES // itemsize)
    return [(a, min(a + step, size)) for a in range(0, size, step)]


def _round(k: int, rnd: P.Round, sends, buf, src, comm, ufunc, deadline,
           tag: int, itemsize: int, pending: dict) -> None:
    """One round: post every slice, land the received ones, leave the sends
    in ``pending`` (unless this round must finish them itself)."""
    reqs, landing = [], []
    for inc in rnd.incoming:
        target = buf[inc.recv] if inc.direct else inc.recv
        for a, b in pieces(inc.size, itemsize):
            reqs.append(comm.irecv(target[a:b], inc.peer, tag))
            landing.append((inc, a, b))
    mine = []
    for i, (peer, arr) in enumerate(sends):
        pending[(k, i)] = [comm.isend(arr[a:b], peer, tag)
                           for a, b in pieces(arr.size, itemsize)]
        mine.append((k, i))
    if rnd.early:
        for req, (inc, a, b) in zip(reqs, landing):
            comm.waitall([req], deadline)
            if not inc.direct:
                land(inc, buf, src, comm.rank, ufunc, a, b)
        return
    for key in mine:                 # this round writes what it sends
        reqs.extend(pending.pop(key))
    comm.waitall(reqs, deadline)
    if rnd.fold:
        fold(rnd, buf, src, comm.rank, ufunc)
        return
    for inc in rnd.incoming:
        land(inc, buf, src, comm.rank, ufunc)
