"""Executors: a schedule run for real on a communicator.

* :mod:`~warmup_kit.execute.reference`: round by round, as Chapter 3 tells
  it; every fast executor is tested against it, bit for bit;
* :mod:`~warmup_kit.execute.p2p`: a compiled plan over any transport's
  point-to-point calls (MPI, sockets, shared-memory mailboxes);
* :mod:`~warmup_kit.execute.shm`: zero-copy over shared memory;
* :mod:`~warmup_kit.execute.alltoallv`: the all-to-all with uneven blocks,
  which no schedule describes: point to point, straight into place.

:func:`run_schedule` picks the fast one for the communicator.
"""
from __future__ import annotations

import numpy as np

from warmup_kit.comm.base import TRACE_ENV, Comm
from warmup_kit.execute.p2p import run_p2p
from warmup_kit.execute.plan import get_plan
from warmup_kit.execute.reference import run_reference
from warmup_kit.execute.shm import run_shm
from warmup_kit.ops import reduce_ufunc
from warmup_kit.schedule import Schedule


def run_schedule(s: Schedule, buf: np.ndarray, comm: Comm, *,
                 op: str = "sum", deadline: float | None = None,
                 unit: int = 1, src: np.ndarray | None = None,
                 tag: int = 0) -> np.ndarray:
    """Execute ``s`` on this rank's 1-d contiguous ``buf``; return ``buf``.

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
        tag: checked on every message (the collectives pass the call's
            fingerprint).
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
    execute(s, buf, src, comm, reduce_ufunc(op, buf.dtype), deadline, unit,
            tag)
    return buf


def execute(s: Schedule, buf: np.ndarray, src: np.ndarray | None,
            comm: Comm, ufunc: np.ufunc, deadline: float | None = None,
            unit: int = 1, tag: int = 0) -> None:
    """:func:`run_schedule` for a caller that has checked its arguments (the
    collectives check each call's once, on this rank): the transport's fast
    executor, with nothing checked again."""
    if comm.shared_memory:
        run_shm(s, buf, src, comm, ufunc, deadline, unit, tag)
        return
    plan = get_plan(comm.cache, s, comm.rank, buf.size // unit, unit,
                    buf.dtype, src=src is not None)
    run_p2p(plan, buf, src, comm, ufunc, deadline, tag, comm.tracing)


__all__ = ["run_schedule", "execute", "run_reference", "TRACE_ENV"]
