"""The public collectives: allreduce, reduce_scatter, all_gather, broadcast,
reduce and all_to_all (book, Chapter 2).

Every call checks its input locally (before any byte is sent), then checks
that all ranks agree on what they are doing (a small header exchange, counted
apart from the payload), then runs the chosen algorithm's schedule. The input
array is never modified; the result is a new array.

Shapes (N ranks, rank r; "rows" are the first axis):

* ``allreduce(x)``: same shape as ``x``.
* ``reduce_scatter(x)``: rows cut in N near-equal pieces like
  :func:`numpy.array_split`; rank r gets piece r of the reduced array.
* ``all_gather(x)``: every rank's ``x`` concatenated along rows, in rank order
  (``(N * len(x), ...)``).
* ``broadcast(x, root)``: a copy of the root's ``x`` (others pass an array of
  the same shape and dtype, whose values are ignored).
* ``reduce(x, root)``: the reduced array on the root, ``None`` elsewhere.
* ``all_to_all(x)``: rows cut in N equal blocks (len(x) divisible by N); block
  j goes to rank j; the result's block i is what rank i sent to this rank.
"""
from __future__ import annotations

import zlib

import numpy as np

from warmup_kit.algorithms import build, default_algorithm
from warmup_kit.comm.base import Comm, deadline_after
from warmup_kit.execute.exchange import run_schedule
from warmup_kit.ops import OPS, check_dtype, reduce_ufunc
from warmup_kit.schedule import COLLECTIVES


def _as_input(sendbuf, *, min_ndim: int = 0) -> np.ndarray:
    if not isinstance(sendbuf, np.ndarray):
        raise TypeError("sendbuf must be a numpy array, got "
                        f"{type(sendbuf).__name__}")
    check_dtype(sendbuf.dtype)
    if sendbuf.ndim < min_ndim:
        raise ValueError(f"sendbuf needs at least {min_ndim} dimension(s)")
    return sendbuf


def _code(text: str) -> int:
    return zlib.crc32(text.encode())


def agree(comm: Comm, fields: dict, deadline: float | None) -> None:
    """Check that every rank called the same collective with the same layout.

    Every rank sends its fields to every other rank (one small all-to-all,
    counted in ``stats.control_*``) and compares; on any difference every rank
    raises the same ValueError naming the ranks that differ.
    """
    if comm.size == 1:
        return
    names = list(fields)
    mine = np.array([fields[k] if isinstance(fields[k], int) else
                     _code(str(fields[k])) for k in names], dtype=np.int64)
    peers = [p for p in range(comm.size) if p != comm.rank]
    theirs = {p: np.empty_like(mine) for p in peers}
    comm.exchange([(p, mine) for p in peers],
                  [(p, theirs[p]) for p in peers],
                  deadline=deadline, control=True)
    theirs[comm.rank] = mine
    ref = theirs[0]
    for p in range(1, comm.size):
        diff = [names[i] for i in range(len(names)) if theirs[p][i] != ref[i]]
        if diff:
            detail = ", ".join(f"{k}" for k in diff)
            raise ValueError(
                f"ranks disagree on {detail}: rank 0 and rank {p} called "
                f"{fields['collective']} differently (same length, dtype, "
                "op and algorithm are required on every rank); "
                f"this is rank {comm.rank}, with {describe(fields)}")


def describe(fields: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in fields.items())


def _run(collective: str, work: np.ndarray, comm: Comm, *, algorithm: str,
         op: str, timeout: float | None, unit: int, root: int = 0,
         ranks_per_node: int | None = None, shape=(), handshake: bool = True
         ) -> np.ndarray:
    if not isinstance(comm, Comm):
        raise TypeError(f"comm must be a warmup_kit Comm, got {type(comm)}")
    reduce_ufunc(op, work.dtype)
    s = build(collective, algorithm, comm.size, root=root,
              ranks_per_node=ranks_per_node)
    deadline = deadline_after(timeout)
    if handshake:
        agree(comm, {"collective": collective, "algorithm": algorithm,
                     "op": op, "dtype": work.dtype.str, "shape": tuple(shape),
                     "root": root, "ranks_per_node": ranks_per_node or 0},
              deadline)
    return run_schedule(s, work, comm, op=op, deadline=deadline, unit=unit)


def allreduce(sendbuf: np.ndarray, comm: Comm, *, algorithm: str = "ring",
              op: str = "sum", timeout: float | None = None,
              ranks_per_node: int | None = None, handshake: bool = True
              ) -> np.ndarray:
    """All-reduce ``sendbuf`` over ``comm`` with the named algorithm.

    Args:
        sendbuf: numeric numpy array, any shape (not modified).
        comm: :class:`~warmup_kit.comm.MPIComm` or
            :class:`~warmup_kit.comm.SocketComm`.
        algorithm: one of :data:`warmup_kit.ALGORITHMS`.
        op: "sum", "prod", "max" or "min".
        timeout: seconds for the whole call; a wait past it raises
            :class:`~warmup_kit.CollectiveTimeout` naming the peer.
        ranks_per_node: group size for ``algorithm="hierarchical"``.
        handshake: check first that all ranks agree on length and dtype.

    Returns:
        A new array of ``sendbuf``'s shape and dtype, identical on all ranks.
    """
    _as_input(sendbuf)
    if ranks_per_node is not None and algorithm != "hierarchical":
        raise ValueError("ranks_per_node applies to algorithm='hierarchical'")
    work = np.array(sendbuf, copy=True, order="C").reshape(-1)
    _run("allreduce", work, comm, algorithm=algorithm, op=op, timeout=timeout,
         unit=1, ranks_per_node=ranks_per_node, shape=sendbuf.shape,
         handshake=handshake)
    return work.reshape(sendbuf.shape)


def _rows(x: np.ndarray) -> tuple[int, int]:
    unit = int(np.prod(x.shape[1:], dtype=np.int64))
    return x.shape[0], unit


def reduce_scatter(sendbuf: np.ndarray, comm: Comm, *, op: str = "sum",
                   algorithm: str = "ring", timeout: float | None = None
                   ) -> np.ndarray:
    """Reduce over all ranks, then keep this rank's piece of the rows."""
    _as_input(sendbuf, min_ndim=1)
    rows, unit = _rows(sendbuf)
    work = np.array(sendbuf, copy=True, order="C").reshape(-1)
    _run("reduce_scatter", work, comm, algorithm=algorithm, op=op,
         timeout=timeout, unit=unit, shape=sendbuf.shape)
    piece = np.array_split(work.reshape(sendbuf.shape), comm.size)[comm.rank]
    return piece.copy()


def all_gather(sendbuf: np.ndarray, comm: Comm, *, algorithm: str = "ring",
               timeout: float | None = None) -> np.ndarray:
    """Concatenate every rank's ``sendbuf`` along rows, in rank order."""
    x = _as_input(sendbuf)
    if x.ndim == 0:
        x = x.reshape(1)
    rows, unit = _rows(x)
    work = np.empty((comm.size * rows,) + x.shape[1:], dtype=x.dtype)
    work[comm.rank * rows:(comm.rank + 1) * rows] = x
    flat = work.reshape(-1)
    _run("all_gather", flat, comm, algorithm=algorithm, op="sum",
         timeout=timeout, unit=unit, shape=x.shape)
    return work


def broadcast(buf: np.ndarray, comm: Comm, *, root: int = 0,
              algorithm: str = "tree", timeout: float | None = None
              ) -> np.ndarray:
    """A copy of the root's ``buf`` on every rank."""
    _as_input(buf)
    _check_root(root, comm)
    work = np.array(buf, copy=True, order="C").reshape(-1)
    _run("broadcast", work, comm, algorithm=algorithm, op="sum",
         timeout=timeout, unit=1, root=root, shape=buf.shape)
    return work.reshape(buf.shape)


def reduce(sendbuf: np.ndarray, comm: Comm, *, root: int = 0, op: str = "sum",
           algorithm: str = "tree", timeout: float | None = None
           ) -> np.ndarray | None:
    """The reduction of every rank's ``sendbuf`` on ``root``; None elsewhere."""
    _as_input(sendbuf)
    _check_root(root, comm)
    work = np.array(sendbuf, copy=True, order="C").reshape(-1)
    _run("reduce", work, comm, algorithm=algorithm, op=op, timeout=timeout,
         unit=1, root=root, shape=sendbuf.shape)
    return work.reshape(sendbuf.shape) if comm.rank == root else None


def all_to_all(sendbuf: np.ndarray, comm: Comm, *, algorithm: str = "direct",
               timeout: float | None = None) -> np.ndarray:
    """Block j of the rows to rank j; block i of the result from rank i."""
    _as_input(sendbuf, min_ndim=1)
    rows, unit = _rows(sendbuf)
    if rows % comm.size:
        raise ValueError(f"all_to_all needs len(sendbuf) divisible by the "
                         f"{comm.size} ranks, got {rows}")
    work = np.array(sendbuf, copy=True, order="C").reshape(-1)
    _run("all_to_all", work, comm, algorithm=algorithm, op="sum",
         timeout=timeout, unit=unit, shape=sendbuf.shape)
    return work.reshape(sendbuf.shape)


def _check_root(root: int, comm: Comm) -> None:
    if not isinstance(root, (int, np.integer)) or not 0 <= root < comm.size:
        raise ValueError(f"root must be a rank in [0, {comm.size}), got {root}")


__all__ = ["allreduce", "reduce_scatter", "all_gather", "broadcast", "reduce",
           "all_to_all", "agree", "OPS", "COLLECTIVES", "default_algorithm"]
