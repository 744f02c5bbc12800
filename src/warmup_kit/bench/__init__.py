"""nccl-tests-style benchmarks of warmup_kit's collectives (book, Chapter 5).

``python -m warmup_kit.bench`` (or the ``warmup-bench`` console script)
sweeps message sizes for one collective and prints the nccl-tests columns:
size, count, type, redop, root, time, algbw, busbw and ``#wrong``. What it
times is the public call a reader makes (``warmup_kit.allreduce(sendbuf,
comm, out=recvbuf, algorithm=...)``), every result checked first, side by
side with the MPI library's own collective ("mpi"). Under MPI::

    mpiexec -n 4 python -m mpi4py -m warmup_kit.bench -b 8 -e 64M -f 2 \\
        --algorithms ring,tree,mpi

without MPI, over TCP sockets or shared memory on this host::

    python -m warmup_kit.bench --world 4 -b 8 -e 16M [--transport shm]

One shared harness (:mod:`.harness`) and one small file per collective
(:mod:`.allreduce`, :mod:`.reduce_scatter`, ...), each filling the
:class:`~.record.Collective` record, as nccl-tests does.
"""
from __future__ import annotations

import os
import sys

from warmup_kit.bench import (
    all_gather, all_to_all, allreduce, broadcast, reduce, reduce_scatter)
from warmup_kit.bench.cli import options, parse_args
from warmup_kit.bench.harness import (
    LaunchContext, MPIContext, Options, bench_rank, implementations, merge)
from warmup_kit.bench.output import (
    machine, parse_table, table, write_csv, write_json)
from warmup_kit.bench.record import Collective
from warmup_kit.comm.mpirun import MPICH_YIELD_ENV, launched_by_mpi
from warmup_kit.machine import cores

#: name -> record, one per collective file
COLLECTIVES: dict[str, Collective] = {
    m.COLLECTIVE.name: m.COLLECTIVE
    for m in (allreduce, reduce_scatter, all_gather, broadcast, reduce,
              all_to_all)}


def run_launched(opts: Options, world: int, transport: str = "sockets",
                 timeout: float = 900.0,
                 collective: Collective | None = None) -> list[dict]:
    """The sweep on ``world`` ranks of this host (``warmup_kit.launch``:
    sockets or shared memory); merged rows."""
    from warmup_kit.comm import launch
    coll = collective or COLLECTIVES[opts.collective]
    implementations(opts, transport)          # refuse bad names up front
    nbytes = max(opts.sweep(), default=0)
    per_rank = launch(_launched_rank, world, args=(opts, coll, transport),
                      transport=transport, timeout=timeout,
                      shm_bytes=4 * nbytes + (16 << 20))
    return merge(per_rank, opts, coll, world)


def _launched_rank(comm, opts, coll, transport):
    return bench_rank(LaunchContext(comm, transport), opts, coll)


def run_mpi_ranks(opts: Options, collective: Collective | None = None
                  ) -> list[dict] | None:
    """The sweep on this MPI job's ranks; merged rows on rank 0, else None."""
    coll = collective or COLLECTIVES[opts.collective]
    implementations(opts, "mpi")
    ctx = MPIContext()
    try:
        rows = bench_rank(ctx, opts, coll)
        gathered = ctx.gather(rows)
        n, rank = ctx.size, ctx.rank
    finally:
        ctx.close()
    return merge(gathered, opts, coll, n) if rank == 0 else None


def header(opts: Options, n: int, transport: str) -> dict:
    """What the table's comment lines say about the run."""
    from dataclasses import asdict
    coll = COLLECTIVES[opts.collective]
    impls = implementations(opts, transport)
    timed = coll.call
    if "mpi" in impls:
        timed += f"; and the library's {coll.mpi_call} ('mpi')"
    return {"collective": opts.collective, "ranks": n,
            "transport": transport,
            "type": {"float64": "double", "float32": "float"}.get(
                opts.dtype, opts.dtype),
            "redop": opts.op, "iters": opts.iters, "warmup": opts.warmup,
            "check": opts.check, "timed": timed,
            "machine": machine(transport), "options": asdict(opts)}


def _oversubscribed(n: int, transport: str) -> None:
    c = cores()
    if n <= c:
        return
    how = ""
    if transport == "mpi":
        got = {k: os.environ.get(k) for k in MPICH_YIELD_ENV}
        how = (" MPICH yield settings in effect: " + ", ".join(
            f"{k}={v}" for k, v in got.items()) if any(got.values()) else
               " MPICH is not told to yield: set " + " ".join(
                   f"{k}={v}" for k, v in MPICH_YIELD_ENV.items()))
    print(f"warmup-bench: {n} ranks share {c} cores; timings include waits "
          f"for a core.{how}", file=sys.stderr)


def main(argv=None) -> int:
    """Console entry point: parse flags, sweep, print the table.

    Exits 1 if any result was wrong, 2 on bad flags.
    """
    args = parse_args(argv)
    try:
        opts = options(args)
        if launched_by_mpi():
            if args.world is not None:
                raise ValueError("--world starts its own ranks: do not run "
                                 "it under mpiexec (use -n there instead)")
            results, transport = run_mpi_ranks(opts), "mpi"
            if results is None:           # not rank 0
                return 0
            n = results[0]["ranks"] if results else 0
        else:
            n = args.world if args.world is not None else 2
            if n < 1:
                raise ValueError("--world must be >= 1")
            transport = args.transport
            _oversubscribed(n, transport)
            results = run_launched(opts, n, transport)
    except ValueError as exc:
        print(f"warmup-bench: error: {exc}", file=sys.stderr)
        return 2
    if transport == "mpi":
        _oversubscribed(n, transport)
    head = header(opts, n, transport)
    print(table(results, head), flush=True)
    if args.csv:
        write_csv(args.csv, results)
    if args.json:
        write_json(args.json, head, results)
    return 1 if any(r["wrong"] for r in results) else 0


__all__ = ["COLLECTIVES", "Collective", "Options", "bench_rank", "header",
           "main", "merge", "parse_table", "run_launched", "run_mpi_ranks",
           "table"]
