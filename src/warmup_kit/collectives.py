"""The public collectives (book, Chapter 2): what readers call, and what the
benchmarks time.

``allreduce``, ``reduce_scatter``, ``all_gather``, ``broadcast``, ``reduce``,
``gather``, ``scatter`` and ``all_to_all`` (even, or uneven with counts:
MPI's ``Alltoallv``, MoE token routing). Every call checks its input on this
rank before any byte is sent, then runs the chosen algorithm's schedule
with the fast executor of the communicator's transport.

Out of place by default, with no copy of the input: ``out=`` takes a
preallocated result (mpi4py's ``recvbuf``; no allocation at all then), and
``out=x`` runs in place (torch's style) where the shapes allow it. With
``async_op=True`` a call returns a :class:`~warmup_kit.comm.stream.Work`
handle at once; collectives on one communicator complete in the order
issued.

Ranks that pass different arguments (collective, algorithm, op, dtype,
length, root) all raise :class:`~warmup_kit.CallMismatch` naming what
differs, before any payload moves: each call first agrees on them
(:mod:`warmup_kit.callcheck`: how depends on the transport: over sockets
ceil(log2 N) rounds of one small message each, over MPI one
``MPI_Allgather`` of the descriptors, over shared memory no message at all,
each rank reads the others' in the control segment; messages count in
``stats.control_*``; ``comm.check_calls = False`` or
``WARMUP_KIT_CHECK=0`` skips it). Each call's fingerprint is also the tag
on every message, so a rank that receives a message of another call raises
:class:`~warmup_kit.ProtocolError` instead of reducing the wrong bytes.
``WARMUP_KIT_DEBUG=DETAIL`` (or ``comm.debug = True``, like PyTorch's
``TORCH_DISTRIBUTED_DEBUG``) replaces the agreement with an all-to-all of
every field, raising ValueError.

Shapes (N ranks, rank r; "rows" are the first axis):

* ``allreduce(x)``: ``x``'s shape.
* ``reduce_scatter(x)``: rows cut in N near-equal pieces like
  :func:`numpy.array_split`; rank r gets piece r of the reduced array.
* ``all_gather(x)``: every rank's ``x`` along rows, in rank order.
* ``broadcast(x, root)``: the root's ``x`` (every rank passes an array of
  the same shape and dtype; only the root's values matter).
* ``reduce(x, root)``: the reduced array on the root, ``None`` elsewhere.
* ``gather(x, root)``: every rank's ``x`` along rows on the root, ``None``
  elsewhere.
* ``scatter(x, root)``: the root's rows cut in N equal blocks; rank r gets
  block r (every rank passes an array of the root's shape).
* ``all_to_all(x)``: rows cut in N equal blocks; block j goes to rank j; the
  result's block i came from rank i. With ``send_counts`` (rows to each
  rank) the blocks may differ; the result holds what each rank sent here, in
  rank order (``recv_counts``, if not given, are exchanged first).
"""
from __future__ import annotations

import zlib
from functools import lru_cache
from typing import Sequence

import numpy as np

from warmup_kit.algorithms import build
from warmup_kit.callcheck import check_call, describe
from warmup_kit.execute.alltoallv import alltoallv, check_counts
from warmup_kit.comm.base import DEBUG_ENV, TAG_MAX, Comm
from warmup_kit.comm.deadlines import check_timeout, deadline_after
from warmup_kit.execute import execute
from warmup_kit.ops import check_dtype, check_op, reduce_ufunc


# ------------------------------------------------------------ machinery
class Call:
    """One kind of call, checked once and cached: its schedule and the
    fingerprint every message of it carries as its tag."""

    __slots__ = ("collective", "algorithm", "op", "count", "unit", "root",
                 "ranks_per_node", "schedule", "tag", "ufunc", "descriptor")

    def __init__(self, collective, algorithm, n, op, dtype, count, unit,
                 root, ranks_per_node) -> None:
        dtype = np.dtype(dtype).str
        self.collective, self.algorithm, self.op = collective, algorithm, op
        self.count, self.unit, self.root = count, unit, root
        self.ranks_per_node = ranks_per_node
        if op is not None:
            check_op(op, dtype)
        self.ufunc = reduce_ufunc("sum" if op in (None, "avg") else op, dtype)
        self.schedule = build(collective, algorithm, n, root=root,
                              ranks_per_node=ranks_per_node)
        key = (f"{collective}|{algorithm}|{op}|{dtype}|{count}|{unit}|{root}"
               f"|{ranks_per_node}")
        self.tag = zlib.crc32(key.encode()) % TAG_MAX
        self.descriptor = describe(
            collective=collective, algorithm=algorithm, op=op, dtype=dtype,
            count=count, unit=unit, root=root, ranks_per_node=ranks_per_node)

    def run(self, comm: Comm, buf: np.ndarray, src, deadline) -> None:
        """Run on this rank's flat ``buf`` (out of place from ``src``)."""
        if comm.debug:
            agree(comm, {"collective": self.collective,
                         "algorithm": self.algorithm, "op": self.op or "",
                         "dtype": buf.dtype.str, "count": self.count,
                         "unit": self.unit, "root": self.root,
                         "ranks_per_node": self.ranks_per_node or 0},
                  deadline)
        elif comm.check_calls:
            check_call(comm, self.descriptor, deadline)
        execute(self.schedule, buf, src, comm, self.ufunc, deadline,
                self.unit, self.tag)
        if self.op == "avg":
            np.divide(buf, comm.size, out=buf)


#: classes seen to be Comm subclasses (isinstance on an ABC costs more
#: than a set lookup, on every call)
_COMM_CLASSES: set = set()


@lru_cache(maxsize=1024)
def _cached_call(*key) -> Call:
    return Call(*key)


def prepare(collective: str, algorithm: str, comm: Comm, dtype,
            count: int, *, op: str | None = None, unit: int = 1,
            root: int = 0, ranks_per_node: int | None = None) -> Call:
    """The checked :class:`Call` (bad names fail here, on this rank,
    before any byte is sent)."""
    if comm.__class__ not in _COMM_CLASSES:
        if not isinstance(comm, Comm):
            raise TypeError(f"comm must be a warmup_kit Comm, got "
                            f"{type(comm).__name__}")
        _COMM_CLASSES.add(comm.__class__)
    if not isinstance(dtype, np.dtype):
        dtype = np.dtype(dtype)
    try:                          # (equal dtypes have equal .str)
        return _cached_call(collective, algorithm, comm.size, op, dtype,
                            count, unit, root, ranks_per_node)
    except TypeError as exc:
        if "unhashable" not in str(exc):
            raise
        raise TypeError(f"bad argument for {collective}: {exc}") from None


def _submit(comm: Comm, fn, timeout, async_op: bool, what: str):
    """Run ``fn(deadline)`` now, or on the communicator's stream."""
    if timeout is not None:
        check_timeout(timeout)
    if async_op:
        return comm.stream().submit(fn, timeout, what)
    if comm.busy():                       # keep issue order
        return comm.stream().submit(fn, timeout, what).wait()
    return fn(None if timeout is None else deadline_after(timeout))


def agree(comm: Comm, fields: dict, deadline: float | None) -> None:
    """Check that every rank called the same collective with the same layout
    (the debug mode): every rank sends its fields to every other rank and
    compares; on any difference every rank raises the same ValueError naming
    the fields. Counted in ``stats.control_*``."""
    if comm.size == 1:
        return
    names = list(fields)
    mine = np.array([fields[k] if isinstance(fields[k], int) else
                     zlib.crc32(str(fields[k]).encode()) for k in names],
                    dtype=np.int64)
    peers = [p for p in range(comm.size) if p != comm.rank]
    theirs = {p: np.empty_like(mine) for p in peers}
    with comm.control():
        comm.exchange([(p, mine) for p in peers],
                      [(p, theirs[p]) for p in peers], tag=TAG_MAX - 2,
                      deadline=deadline)
    theirs[comm.rank] = mine
    for p in range(1, comm.size):
        diff = [names[i] for i in range(len(names))
                if theirs[p][i] != theirs[0][i]]
        if diff:
            raise ValueError(
                f"ranks disagree on {', '.join(diff)}: rank 0 and rank {p} "
                f"called {fields['collective']} differently; this is rank "
                f"{comm.rank}, with " +
                ", ".join(f"{k}={v}" for k, v in fields.items()))


def _input(x, *, min_ndim: int = 0) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"sendbuf must be a numpy array, got "
                        f"{type(x).__name__}")
    check_dtype(x.dtype)
    if x.ndim < min_ndim:
        raise ValueError(f"sendbuf needs at least {min_ndim} dimension(s)")
    return x


def _output(out, shape, dtype, what: str) -> np.ndarray:
    """``out`` checked (or a new array) of ``shape`` and ``dtype``."""
    if out is None:
        return np.empty(shape, dtype)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array, got "
                        f"{type(out).__name__}")
    if out.shape != tuple(shape) or out.dtype != dtype:
        raise ValueError(f"out must have the {what}'s shape {tuple(shape)} "
                         f"and dtype {dtype}, got {out.shape} {out.dtype}")
    flags = out.flags
    if not flags.c_contiguous or not flags.writeable:
        raise ValueError("out must be C-contiguous and writeable")
    return out


def _flat(x: np.ndarray) -> np.ndarray:
    if x.ndim == 1 and x.flags.c_contiguous:
        return x                      # already flat (no new view per call)
    return np.ascontiguousarray(x).reshape(-1)


def _distinct(out: np.ndarray, x: np.ndarray, what: str) -> None:
    if out is not x and out.base is None and x.base is None:
        return                # two arrays that own their memory: disjoint
    if np.may_share_memory(out, x):
        raise ValueError(f"out must not overlap sendbuf for {what}")


def _rows(x: np.ndarray) -> tuple[int, int]:
    return x.shape[0], int(np.prod(x.shape[1:], dtype=np.int64))


def _root(root, comm: Comm) -> int:
    if (not isinstance(root, (int, np.integer)) or isinstance(root, bool)
            or not 0 <= root < comm.size):
        raise ValueError(f"root must be a rank in [0, {comm.size}), got "
                         f"{root!r}")
    return int(root)


def _scratch(comm: Comm, name: str, n: int, dtype) -> np.ndarray:
    """A work buffer kept on the communicator (allocated once per size)."""
    key = ("scratch", name, n, np.dtype(dtype).str)
    buf = comm.cache.get(key)
    if buf is None:
        buf = comm.cache[key] = np.empty(n, dtype)
    return buf


# ------------------------------------------------------------ the calls
def allreduce(sendbuf: np.ndarray, comm: Comm, *, out=None, op: str = "sum",
              algorithm: str = "ring", timeout: float | None = None,
              async_op: bool = False, ranks_per_node: int | None = None):
    """All-reduce ``sendbuf`` over ``comm`` (book, Chapters 2-4).

    Args:
        sendbuf: numeric numpy array, any shape (only read).
        comm: any :class:`~warmup_kit.comm.Comm` (MPI, sockets, shared
            memory).
        out: the result's array (``sendbuf``'s shape and dtype); ``out=
            sendbuf`` runs in place; None allocates one.
        op: "sum", "prod", "max", "min" or "avg".
        algorithm: one of :data:`warmup_kit.ALGORITHMS`.
        timeout: seconds for the call (None or inf: none); a wait past it
            raises :class:`~warmup_kit.CollectiveTimeout` naming the rank
            the job is stuck on.
        async_op: return a :class:`~warmup_kit.comm.stream.Work` handle at
            once (``handle.wait()`` returns the result).
        ranks_per_node: group size for ``algorithm="hierarchical"``.

    Returns:
        ``out``: the reduction, identical on every rank (or a handle).
    """
    x = _input(sendbuf)
    if ranks_per_node is not None and algorithm != "hierarchical":
        raise ValueError("ranks_per_node applies to algorithm='hierarchical'")
    call = prepare("allreduce", algorithm, comm, x.dtype, x.size, op=op,
                   ranks_per_node=ranks_per_node)
    res = _output(out, x.shape, x.dtype, "input")
    src = None if res is x else _flat(x)
    if src is not None:
        _distinct(res, x, "allreduce (pass out=sendbuf for in place)")

    flat = res if res.ndim == 1 else res.reshape(-1)

    def run(deadline):
        call.run(comm, flat, src, deadline)
        return res
    return _submit(comm, run, timeout, async_op, "allreduce")


def reduce_scatter(sendbuf: np.ndarray, comm: Comm, *, out=None,
                   op: str = "sum", algorithm: str = "ring",
                   timeout: float | None = None, async_op: bool = False):
    """Reduce over all ranks, then keep this rank's piece of the rows."""
    x = _input(sendbuf, min_ndim=1)
    rows, unit = _rows(x)
    call = prepare("reduce_scatter", algorithm, comm, x.dtype, x.size,
                   op=op, unit=unit)
    sizes = [len(a) for a in np.array_split(np.empty(rows), comm.size)]
    start = sum(sizes[:comm.rank]) * unit
    res = _output(out, (sizes[comm.rank],) + x.shape[1:], x.dtype, "piece")
    _distinct(res, x, "reduce_scatter")
    src = _flat(x)

    def run(deadline):
        work = _scratch(comm, "reduce_scatter", x.size, x.dtype)
        call.run(comm, work, src, deadline)
        res.reshape(-1)[:] = work[start:start + res.size]
        return res
    return _submit(comm, run, timeout, async_op, "reduce_scatter")


def all_gather(sendbuf: np.ndarray, comm: Comm, *, out=None,
               algorithm: str = "ring", timeout: float | None = None,
               async_op: bool = False):
    """Concatenate every rank's ``sendbuf`` along rows, in rank order."""
    x = _input(sendbuf)
    if x.ndim == 0:
        x = x.reshape(1)
    rows, unit = _rows(x)
    call = prepare("all_gather", algorithm, comm, x.dtype,
                   comm.size * x.size, unit=unit)
    res = _output(out, (comm.size * rows,) + x.shape[1:], x.dtype, "result")
    _distinct(res, x, "all_gather")

    def run(deadline):
        res[comm.rank * rows:(comm.rank + 1) * rows] = x
        call.run(comm, res.reshape(-1), None, deadline)
        return res
    return _submit(comm, run, timeout, async_op, "all_gather")


def broadcast(buf: np.ndarray, comm: Comm, *, root: int = 0, out=None,
              algorithm: str = "tree", timeout: float | None = None,
              async_op: bool = False):
    """The root's ``buf`` on every rank (``out=buf`` for in place)."""
    x = _input(buf)
    call = prepare("broadcast", algorithm, comm, x.dtype, x.size,
                   root=_root(root, comm))
    res = _output(out, x.shape, x.dtype, "input")
    src = _flat(x) if comm.rank == root and res is not x else None
    if res is not x:
        _distinct(res, x, "broadcast (pass out=buf for in place)")

    def run(deadline):
        call.run(comm, res.reshape(-1), src, deadline)
        return res
    return _submit(comm, run, timeout, async_op, "broadcast")


def reduce(sendbuf: np.ndarray, comm: Comm, *, root: int = 0, out=None,
           op: str = "sum", algorithm: str = "tree",
           timeout: float | None = None, async_op: bool = False):
    """The reduction of every rank's ``sendbuf`` on ``root``; None
    elsewhere (``out`` is used on the root only)."""
    x = _input(sendbuf)
    call = prepare("reduce", algorithm, comm, x.dtype, x.size, op=op,
                   root=_root(root, comm))
    mine = comm.rank == root
    res = _output(out, x.shape, x.dtype, "input") if mine else None
    src = None if res is x else _flat(x)
    if mine and src is not None:
        _distinct(res, x, "reduce (pass out=sendbuf for in place)")

    def run(deadline):
        work = res.reshape(-1) if mine else _scratch(comm, "reduce", x.size,
                                                     x.dtype)
        call.run(comm, work, src, deadline)
        return res
    return _submit(comm, run, timeout, async_op, "reduce")


def gather(sendbuf: np.ndarray, comm: Comm, *, root: int = 0, out=None,
           algorithm: str = "tree", timeout: float | None = None,
           async_op: bool = False):
    """Every rank's ``sendbuf`` along rows on ``root``; None elsewhere."""
    x = _input(sendbuf)
    if x.ndim == 0:
        x = x.reshape(1)
    rows, unit = _rows(x)
    call = prepare("gather", algorithm, comm, x.dtype, comm.size * x.size,
                   unit=unit, root=_root(root, comm))
    mine = comm.rank == root
    res = _output(out, (comm.size * rows,) + x.shape[1:], x.dtype,
                  "result") if mine else None
    if mine:
        _distinct(res, x, "gather")

    def run(deadline):
        work = res.reshape(-1) if mine else _scratch(
            comm, "gather", comm.size * x.size, x.dtype)
        work[comm.rank * x.size:(comm.rank + 1) * x.size] = x.reshape(-1)
        call.run(comm, work, None, deadline)
        return res
    return _submit(comm, run, timeout, async_op, "gather")


def scatter(sendbuf: np.ndarray, comm: Comm, *, root: int = 0, out=None,
            algorithm: str = "tree", timeout: float | None = None,
            async_op: bool = False):
    """Block r of the root's rows to rank r (rows divisible by N; every
    rank passes an array of the root's shape and dtype)."""
    x = _input(sendbuf, min_ndim=1)
    rows, unit = _rows(x)
    if rows % comm.size:
        raise ValueError(f"scatter needs len(sendbuf) divisible by the "
                         f"{comm.size} ranks, got {rows}")
    call = prepare("scatter", algorithm, comm, x.dtype, x.size, unit=unit,
                   root=_root(root, comm))
    block = rows // comm.size
    res = _output(out, (block,) + x.shape[1:], x.dtype, "block")
    _distinct(res, x, "scatter")
    src = _flat(x) if comm.rank == root else None

    def run(deadline):
        work = _scratch(comm, "scatter", x.size, x.dtype)
        call.run(comm, work, src, deadline)
        res.reshape(-1)[:] = work[comm.rank * res.size:
                                  (comm.rank + 1) * res.size]
        return res
    return _submit(comm, run, timeout, async_op, "scatter")


def all_to_all(sendbuf: np.ndarray, comm: Comm, *, out=None,
               send_counts: Sequence[int] | None = None,
               recv_counts: Sequence[int] | None = None,
               algorithm: str = "direct", timeout: float | None = None,
               async_op: bool = False):
    """Block j of the rows to rank j; block i of the result from rank i.

    Args:
        send_counts: rows for each rank (uneven blocks, MPI's
            ``Alltoallv``; MoE routing); None: N equal blocks.
        recv_counts: rows from each rank; None with ``send_counts``: the
            counts are exchanged first (one small all-to-all).
    """
    x = _input(sendbuf, min_ndim=1)
    rows, unit = _rows(x)
    if send_counts is not None or recv_counts is not None:
        return _all_to_all_v(x, comm, out, send_counts, recv_counts,
                             timeout, async_op)
    if rows % comm.size:
        raise ValueError(f"all_to_all needs len(sendbuf) divisible by the "
                         f"{comm.size} ranks, got {rows} (or pass "
                         "send_counts)")
    call = prepare("all_to_all", algorithm, comm, x.dtype, x.size, unit=unit)
    res = _output(out, x.shape, x.dtype, "input")
    src = None if res is x else _flat(x)
    if src is not None:
        _distinct(res, x, "all_to_all (pass out=sendbuf for in place)")

    def run(deadline):
        call.run(comm, res.reshape(-1), src, deadline)
        return res
    return _submit(comm, run, timeout, async_op, "all_to_all")


def _all_to_all_v(x, comm, out, send_counts, recv_counts, timeout,
                  async_op):
    if not isinstance(comm, Comm):
        raise TypeError(f"comm must be a warmup_kit Comm, got "
                        f"{type(comm).__name__}")
    sc = check_counts(send_counts, comm.size, "send_counts")
    if sc is None:
        raise ValueError("recv_counts needs send_counts too")
    if sum(sc) != len(x):
        raise ValueError(f"send_counts add up to {sum(sc)} rows; sendbuf "
                         f"has {len(x)}")
    rc = check_counts(recv_counts, comm.size, "recv_counts")
    res = None
    if rc is not None:
        res = _output(out, (sum(rc),) + x.shape[1:], x.dtype, "result")
        _distinct(res, x, "all_to_all")
    elif out is not None:
        raise ValueError("out= with uneven all_to_all needs recv_counts")

    desc = _v_descriptor(x.dtype.str, int(np.prod(x.shape[1:],
                                                  dtype=np.int64)),
                         rc is not None)

    def run(deadline):
        if comm.check_calls:         # (the debug mode has no v check)
            check_call(comm, desc, deadline)
        return alltoallv(x, comm, sc, rc, res, deadline)
    return _submit(comm, run, timeout, async_op, "all_to_all")


@lru_cache(maxsize=256)
def _v_descriptor(dtype: str, unit: int, given: bool) -> np.ndarray:
    """What uneven all-to-all's ranks must agree on (the counts differ by
    rank; whether recv_counts were given changes the protocol: without
    them, the counts are exchanged first)."""
    return describe(collective="all_to_all_v",
                    algorithm="direct" if given else "direct+counts",
                    op=None, dtype=dtype, count=0, unit=unit, root=0,
                    ranks_per_node=None)


__all__ = ["allreduce", "reduce_scatter", "all_gather", "broadcast",
           "reduce", "gather", "scatter", "all_to_all", "agree", "prepare",
           "Call", "DEBUG_ENV"]
