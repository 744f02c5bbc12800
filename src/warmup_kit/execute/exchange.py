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
* On a transport with non-blocking point-to-point calls (``MPIComm``),
  :mod:`warmup_kit.execute.p2p` runs the rounds: sends complete in the
  background, very large messages travel as slices of :data:`SLICE_BYTES`
  each reduced as soon as it lands, and a round with one small message each
  way and no deadline is one ``Sendrecv``. Traffic is counted per schedule
  transfer, as :func:`~warmup_kit.schedule.traffic` predicts.

Plans and the steps that land messages live in :mod:`warmup_kit.execute.plan`.
"""
from __future__ import annotations

import os

import numpy as np

from warmup_kit.comm.base import Comm
from warmup_kit.execute.p2p import run_p2p
from warmup_kit.execute.plan import (
    SLICE_BYTES, SLICE_MIN_BYTES, Plan, _apply, _fold, _gather_sends, _trace, compile_plan, get_plan)
from warmup_kit.ops import reduce_ufunc
from warmup_kit.schedule import Schedule

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
        run_p2p(plan, buf, src, comm, ufunc, deadline, trace)
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


