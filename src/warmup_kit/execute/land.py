"""Landing what arrived: copy it, or reduce it in ascending rank order.

The one place the round semantics of :mod:`warmup_kit.schedule` meet the
arithmetic: when several ranks' values reduce into one chunk, they are
combined in ascending order of the rank they come from, with the
receiver's own value keyed by its own rank. Every rank that computes a chunk
then applies the operator to the same operands in the same order, so
results are bit-for-bit identical on every rank. Every executor (the
reference, the point-to-point one, the shared-memory one) lands through
:func:`reduce_ordered`.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from warmup_kit.execute.plan import Incoming, Round


def reduce_ordered(operands: Sequence[tuple[int, np.ndarray]],
                   out: np.ndarray, ufunc, *, own: int | None = None,
                   scratch: Callable[[], np.ndarray] | None = None) -> None:
    """``out = op(operands...)``, combined in ascending rank order.

    Args:
        operands: ``(rank, array)`` pairs, each of ``out``'s size.
        out: where the result goes; it may be the array of the operand of
            rank ``own`` (the receiver's own value, reduced in place).
        ufunc: the reduction (``np.add``...).
        own: the rank whose operand may share memory with ``out``.
        scratch: returns an array like ``out``, for the one case that needs
            one: ``own``'s operand comes third or later, so ``out`` cannot
            hold the partial result before ``own``'s value has been read.
    """
    if len(operands) == 2:           # the common case, kept cheap
        (r0, a0), (r1, a1) = operands
        if r0 > r1:
            a0, a1 = a1, a0
        ufunc(a0, a1, out=out)
        return
    ops = sorted(operands, key=lambda rv: rv[0])
    arrs = [a for _, a in ops]
    if len(arrs) == 1:
        if arrs[0] is not out:
            np.copyto(out, arrs[0])
        return
    i = next((k for k, (r, _) in enumerate(ops) if r == own), 0)
    if i <= 1:
        ufunc(arrs[0], arrs[1], out=out)
        rest = arrs[2:]
    else:
        acc = scratch() if scratch is not None else np.empty_like(out)
        ufunc(arrs[0], arrs[1], out=acc)
        for a in arrs[2:i]:
            ufunc(acc, a, out=acc)
        ufunc(acc, arrs[i], out=out)
        rest = arrs[i + 1:]
    for a in rest:
        ufunc(out, a, out=out)


def land(inc: Incoming, buf: np.ndarray, src, rank: int, ufunc,
         lo: int = 0, hi: int | None = None) -> None:
    """Land the received elements ``[lo, hi)`` of ``inc`` (copy or reduce
    into ``buf``; the receiver's own operand read from ``src`` where it
    still is there)."""
    if inc.direct:
        return
    recv = inc.recv
    for p in inc.parts:
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
        reduce_ordered([(inc.peer, recv[rs]), (rank, own)], buf[bs], ufunc,
                       own=rank)


def fold(rnd: Round, buf: np.ndarray, src, rank: int, ufunc) -> None:
    """A round in which several reductions hit the same chunk: gather each
    chunk's operands, then :func:`reduce_ordered` them."""
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
        reduce_ordered(items + [(rank, own)], buf[a:b], ufunc, own=rank)
