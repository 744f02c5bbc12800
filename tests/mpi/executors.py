"""Every fast executor against the reference executor, bit for bit.

For every collective and algorithm and a few (dtype, op, length) cases,
each rank runs the schedule twice on the same input: with
``execute.run_reference`` (round by round, as Chapter 3 tells it) and with
``execute.run_schedule`` (the fast executor of the transport: MPI or socket
point-to-point, or zero-copy shared memory), in place and out of place.
Results must match bit for bit, and both runs' counted bytes must equal
``traffic()``.

Usage: mpiexec -n N python -m mpi4py tests/mpi/executors.py  (rank 0 prints
one JSON line); or ``check`` through ``warmup_kit.launch``.
"""
import json
import sys
import time

import numpy as np

from warmup_kit.algorithms import REGISTRY, build
from warmup_kit.comm.shm import ShmComm
from warmup_kit.execute import run_reference, run_schedule
from warmup_kit.schedule import ROOTED, traffic

CASES = [("float64", "sum", 13), ("float32", "max", 7), ("int32", "prod", 5),
         ("int64", "sum", 0), ("float64", "min", 1), ("float16", "sum", 29)]


def _input(rank, count, dtype):
    return (((np.arange(count) * 7 + 3 * rank) % 11) + 1).astype(dtype)


def _deadline():
    return time.monotonic() + 30


def check(comm) -> dict:
    """Rank function: ``{"checked": k, "bad": [...]}``."""
    n, rank = comm.size, comm.rank
    bad, checked = [], 0
    for coll, table in REGISTRY.items():
        for alg in table:
            root = n - 1 if coll in ROOTED else 0
            s = build(coll, alg, n, root=root)
            for dtype, op, length in CASES:
                unit = 1 if coll in ("allreduce", "broadcast", "reduce") \
                    else 2
                count = (n * (length % 4) if coll in ("all_to_all",
                                                       "scatter")
                         else length) * unit
                x = _input(rank, count, dtype)
                want = x.copy()
                comm.reset_stats()
                run_reference(s, want, comm, op=op, unit=unit,
                              deadline=_deadline())
                ref_stats = (comm.stats.bytes_sent, comm.stats.bytes_received)
                tr = traffic(s, x.nbytes, itemsize=x.itemsize, unit=unit)
                pred = (tr.bytes_sent[rank], tr.bytes_received[rank])
                for mode in ("inplace", "src"):
                    got = comm.empty(count, dtype)
                    src = None
                    if mode == "src":
                        src = comm.empty(count, dtype)
                        src[:] = x
                    else:
                        got[:] = x
                    comm.reset_stats()
                    run_schedule(s, got, comm, op=op, unit=unit, src=src,
                                 deadline=_deadline())
                    stats = (comm.stats.bytes_sent, comm.stats.bytes_received)
                    checked += 1
                    if got.tobytes() != want.tobytes():
                        bad.append(f"{coll}/{alg} {dtype} {op} {count} "
                                   f"{mode}: result differs from reference")
                    if stats != pred or ref_stats != pred:
                        bad.append(f"{coll}/{alg} {dtype} {op} {count} "
                                   f"{mode}: bytes fast {stats}, reference "
                                   f"{ref_stats}, traffic() {pred}")
            if isinstance(comm, ShmComm):
                comm.arena.top = 0        # reuse the shared segment
                comm.cache.clear()
    return {"checked": checked, "bad": bad}


def main() -> int:
    from mpi4py import MPI

    from warmup_kit.comm import MPIComm
    world = MPI.COMM_WORLD
    comm = MPIComm()
    out = check(comm)
    comm.close()
    gathered = world.gather(out, root=0)
    if world.Get_rank() == 0:
        print(json.dumps({"ranks": world.Get_size(), "per_rank": gathered}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
