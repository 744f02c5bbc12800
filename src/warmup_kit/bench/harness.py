"""The shared harness: what to sweep, the ranks' contexts, timing, checking.

Modelled on nccl-tests (``src/common.cu``): one harness, one small file per
collective. Every size is checked before it is timed (``#wrong``). What is
timed is the public call a reader makes (``warmup_kit.allreduce(sendbuf,
comm, out=recvbuf, algorithm=...)``, default settings otherwise) and, under
MPI, the library's own collective ("mpi"), interleaved iteration by
iteration so a noisy machine disturbs them alike. An iteration's time is
the slowest rank's; the table shows the median over iterations and its
spread (interquartile range, % of the median).
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np

from warmup_kit.algorithms import algorithms_for, default_algorithm
from warmup_kit.bench.record import Collective, wrong
from warmup_kit.ops import check_dtype
from warmup_kit.units import human_bytes

TYPE_NAMES = {"float64": "double", "float32": "float", "float16": "half",
              "int8": "int8", "uint8": "uint8", "int32": "int32",
              "uint32": "uint32", "int64": "int64", "uint64": "uint64"}


@dataclass
class Options:
    """What to sweep (the nccl-tests flags, plus ours)."""

    collective: str = "allreduce"
    algorithms: tuple = ()          # empty: the default algorithm (+ "mpi")
    minbytes: int = 8
    maxbytes: int = 64 << 20
    stepfactor: int = 2
    stepbytes: int = 0              # > 0: add instead of multiply
    iters: int = 20
    warmup: int = 5
    check: bool = True
    dtype: str = "float64"
    op: str = "sum"
    root: int = 0
    timeout: float | None = None    # per call; None: like MPI, no deadline
    progress: bool = False
    sizes: tuple = field(default=())  # explicit sizes override the sweep
    passes: int = 1                 # > 1: sweep again, -n iterations each
                                    # pass, so a burst of load elsewhere
                                    # hits a fraction of each size's samples

    def sweep(self) -> list[int]:
        """Byte sizes, -b to -e by factor -f (or by -i bytes).

        Raises:
            ValueError: an empty or inverted range, or a step that does not
                grow.
        """
        if self.sizes:
            return list(self.sizes)
        if self.minbytes > self.maxbytes:
            raise ValueError(f"empty sweep: -b {self.minbytes} is above -e "
                             f"{self.maxbytes}")
        if self.stepbytes <= 0 and self.stepfactor < 2:
            raise ValueError("-f must be >= 2 (or give -i bytes)")
        out, v = [], self.minbytes
        while v <= self.maxbytes:
            out.append(v)
            nxt = v + self.stepbytes if self.stepbytes else v * self.stepfactor
            if nxt <= v:
                break
            v = nxt
        return out


# -------------------------------------------------------------- contexts
class MPIContext:
    """Ranks under mpiexec: our MPIComm plus the library's communicator."""

    transport = "mpi"

    def __init__(self) -> None:
        from mpi4py import MPI

        from warmup_kit.comm.mpi import MPIComm
        self.world = MPI.COMM_WORLD.Dup()
        self.comm = MPIComm(self.world)
        self.rank, self.size = self.world.Get_rank(), self.world.Get_size()

    def barrier(self) -> None:
        self.world.Barrier()

    def gather(self, obj):
        return self.world.gather(obj, root=0)   # small result rows only

    def close(self) -> None:
        self.world.Barrier()      # no rank exits with a send in flight
        self.comm.close()
        self.world.Free()


class LaunchContext:
    """One rank of :func:`warmup_kit.launch` (sockets or shared memory; no
    library baseline)."""

    def __init__(self, comm, transport: str) -> None:
        self.comm, self.world, self.transport = comm, None, transport
        self.rank, self.size = comm.rank, comm.size

    def barrier(self) -> None:
        self.comm.barrier()


# ----------------------------------------------------------------- timing
#: an algorithm name ending in this is timed with the collectives' default
#: argument agreement off (``comm.check_calls = False``), beside the same
#: algorithm with it on: what the check costs
NOCHECK = "+nocheck"


def implementations(opts: Options, transport: str) -> list[str]:
    """The algorithms to time: ``opts.algorithms``, or the collective's
    default plus the library's own ("mpi") where there is one.

    Raises:
        ValueError: an unknown algorithm, or "mpi" without MPI.
    """
    names = list(opts.algorithms) or [default_algorithm(opts.collective)]
    if not opts.algorithms and transport == "mpi":
        names.append("mpi")
    known = algorithms_for(opts.collective) + ("mpi",)
    bad = [a for a in names if a not in known and not (
        a.endswith(NOCHECK) and a[:-len(NOCHECK)] in known[:-1])]
    if bad:
        raise ValueError(f"unknown {opts.collective} algorithm(s) {bad}; "
                         f"choose from {list(known)}")
    if "mpi" in names and transport != "mpi":
        raise ValueError(f"'mpi' (the MPI library's own {opts.collective}) "
                         f"needs ranks under mpiexec, not {transport}")
    return names


def bench_rank(ctx, opts: Options, coll: Collective) -> list[dict]:
    """Every size and implementation on this rank: check, warm up, time.

    Returns one row per (size, implementation) with this rank's
    per-iteration times (seconds) and its count of wrong elements.
    """
    n, rank = ctx.size, ctx.rank
    dtype = check_dtype(opts.dtype)
    op = opts.op if coll.reduces else None
    impls = implementations(opts, ctx.transport)
    sizes = opts.sweep()
    times: dict = {}
    bad: dict = {}
    counts: dict = {}
    passes = max(1, opts.passes)
    checking = ctx.comm.check_calls
    for p in range(passes):
        for k, nbytes in enumerate(sizes):
            lay = coll.layout(nbytes // dtype.itemsize, n)
            if lay.count == 0:
                continue
            counts[k] = lay.count
            bufs = coll.alloc(lay, dtype, ctx.comm.empty)
            bufs.send[:] = coll.init(rank, n, lay, dtype, op, opts.root)

            def call(a):
                if a == "mpi":
                    return coll.run_mpi(ctx.world, bufs, opts.op, opts.root,
                                        rank)
                off = a.endswith(NOCHECK)
                ctx.comm.check_calls = checking and not off
                return coll.run_ours(a[:-len(NOCHECK)] if off else a, bufs,
                                     ctx.comm, opts.op, opts.root,
                                     opts.timeout)
            if p == 0:
                want = (coll.expected(rank, n, lay, dtype, op, opts.root)
                        if opts.check else None)
                for a in impls:
                    bufs.recv.fill(_sentinel(dtype))
                    ctx.barrier()
                    bad[(k, a)] = wrong(call(a), want) if opts.check else 0
            for it in range(opts.warmup + opts.iters):
                for a in impls:
                    ctx.barrier()
                    t0 = time.perf_counter()
                    call(a)
                    dt = time.perf_counter() - t0
                    if it >= opts.warmup:
                        times.setdefault((k, a), []).append(dt)
            if opts.progress and rank == 0:
                _progress(p * len(sizes) + k + 1, passes * len(sizes),
                          coll.name, nbytes)
    ctx.comm.check_calls = checking
    if opts.progress and rank == 0:
        print(file=sys.stderr)
    return [{"size": counts[k] * dtype.itemsize, "count": counts[k],
             "algorithm": a, "times": times[(k, a)], "wrong": bad[(k, a)]}
            for k in sorted(counts) for a in impls]


def _sentinel(dtype: np.dtype):
    return np.nan if dtype.kind in "fc" else np.iinfo(dtype).max


def _progress(done: int, total: int, name: str, nbytes: int) -> None:
    width = 30
    fill = int(width * done / total)
    sys.stderr.write(f"\r[warmup-bench] {name} [{'#' * fill}"
                     f"{'.' * (width - fill)}] {done}/{total} sizes "
                     f"({human_bytes(nbytes)})  ")
    sys.stderr.flush()


def merge(per_rank: list[list[dict]], opts: Options, coll: Collective,
          n: int) -> list[dict]:
    """One result row per (size, implementation) from every rank's rows.

    An iteration lasts as long as its slowest rank; the median over
    iterations is the time, the interquartile range its spread.
    """
    out = []
    factor = coll.busbw_factor(n)
    for i, row in enumerate(per_rank[0]):
        t = np.max([np.asarray(rows[i]["times"]) for rows in per_rank], axis=0)
        med = float(np.median(t))
        q1, q3 = np.percentile(t, [25, 75])
        algbw = row["size"] / med / 1e9 if med > 0 else 0.0
        out.append({
            "collective": coll.name, "ranks": n, "size": row["size"],
            "count": row["count"],
            "type": TYPE_NAMES.get(opts.dtype, opts.dtype),
            "redop": opts.op if coll.reduces else "none",
            "root": opts.root if coll.name in ("broadcast", "reduce") else -1,
            "algorithm": row["algorithm"], "time_us": med * 1e6,
            "spread_pct": float((q3 - q1) / med * 100) if med > 0 else 0.0,
            "min_us": float(t.min() * 1e6), "max_us": float(t.max() * 1e6),
            "algbw_gbps": algbw, "busbw_gbps": algbw * factor,
            "wrong": int(sum(rows[i]["wrong"] for rows in per_rank)),
            "times_us": [float(x * 1e6) for x in t]})
    return out
