"""nccl-tests-style benchmarks of warmup_kit's collectives (book, Chapter 5).

``python -m warmup_kit.bench`` (or the ``warmup-bench`` console script)
sweeps message sizes for one collective and prints the nccl-tests columns:
size, count, type, redop, root, time, algbw, busbw and ``#wrong``, with
every result checked, our algorithms timed side by side with the MPI
library's own collective ("mpi"). Under MPI::

    mpiexec -n 4 python -m warmup_kit.bench -b 8 -e 64M -f 2 \\
        --algorithms ring,tree,mpi

without MPI, over TCP sockets on this host::

    python -m warmup_kit.bench --world 4 -b 8 -e 16M

One shared harness (:mod:`.harness`) and one small file per collective
(:mod:`.allreduce`, :mod:`.reduce_scatter`, ...), each filling the
:class:`~.record.Collective` record, as nccl-tests does.
"""
from __future__ import annotations

import sys

from warmup_kit.bench import (
    all_gather, all_to_all, allreduce, broadcast, reduce, reduce_scatter)
from warmup_kit.bench.harness import (
    Options, bench_rank, merge, parse_table, report, table, under_mpi)
from warmup_kit.bench.record import Collective

#: name -> record, one per collective file
COLLECTIVES: dict[str, Collective] = {
    m.COLLECTIVE.name: m.COLLECTIVE
    for m in (allreduce, reduce_scatter, all_gather, broadcast, reduce,
              all_to_all)}


def run_sockets(opts: Options, world: int, timeout: float = 900.0,
                collective: Collective | None = None) -> list[dict]:
    """The sweep on ``world`` socket ranks of this host; merged rows."""
    from warmup_kit.comm import launch
    coll = collective or COLLECTIVES[opts.collective]
    per_rank = launch(_socket_rank, world, args=(opts, coll), timeout=timeout)
    return merge(per_rank, opts, coll, world)


def _socket_rank(comm, opts, coll):
    from warmup_kit.bench.harness import SocketContext
    return bench_rank(SocketContext(comm), opts, coll)


def run_mpi_ranks(opts: Options, collective: Collective | None = None
                  ) -> list[dict] | None:
    """The sweep on this MPI job's ranks; merged rows on rank 0, else None."""
    from warmup_kit.bench.harness import MPIContext
    coll = collective or COLLECTIVES[opts.collective]
    ctx = MPIContext()
    try:
        rows = bench_rank(ctx, opts, coll)
        gathered = ctx.gather(rows)
        n, rank = ctx.size, ctx.rank
    finally:
        ctx.close()
    return merge(gathered, opts, coll, n) if rank == 0 else None


def main(argv=None) -> int:
    """Console entry point: parse flags, sweep, print the table.

    Exits 1 if any result was wrong, 2 on bad flags.
    """
    from warmup_kit.bench.harness import options, parse_args
    args = parse_args(argv)
    try:
        opts = options(args)
        if args.world is not None or not under_mpi():
            world = args.world or 2
            if world < 1:
                raise ValueError("--world must be >= 1")
            results, n, transport = run_sockets(opts, world), world, "sockets"
        else:
            results, transport = run_mpi_ranks(opts), "mpi"
            if results is None:           # not rank 0
                return 0
            n = results[0]["ranks"] if results else 0
    except ValueError as exc:
        print(f"warmup-bench: {exc}", file=sys.stderr)
        return 2
    report(results, opts, n, transport, args)
    return 1 if any(r["wrong"] for r in results) else 0


__all__ = ["COLLECTIVES", "Collective", "Options", "bench_rank", "main",
           "merge", "parse_table", "run_mpi_ranks", "run_sockets", "table"]
