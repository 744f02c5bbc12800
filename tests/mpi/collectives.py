"""Every collective case of collective_cases.py over MPIComm, checked against
numpy and against MPI's own Allreduce / Reduce_scatter / Allgather / Bcast /
Reduce / Gather / Scatter / Alltoall(v) on the same inputs ("avg": MPI's SUM
divided by N).

Usage: mpiexec -n N python -m mpi4py tests/mpi/collectives.py
Rank 0 prints one JSON line: {"ranks": N, "cases": ..., "report": {group:
{case id: [problems]}}}.
"""
import json
import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import collective_cases as cc  # noqa: E402

from warmup_kit.comm import MPIComm  # noqa: E402

MPI_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}


def mpi_reference(world):
    """MPI's own collective on the same input (implicit datatypes)."""
    n, rank = world.Get_size(), world.Get_rank()

    def ref(case, x):
        out = ref_sum(case, x)
        if case.op == "avg" and out is not None:   # MPI has no average
            out = out / out.dtype.type(n)
        return out

    def ref_sum(case, x):
        x = np.array(x, order="C")     # (ascontiguousarray makes 0-d 1-d)
        flat = x.reshape(-1)
        op = MPI_OPS["sum" if case.op == "avg" else case.op]
        col = case.collective
        if col == "allreduce":
            out = np.empty_like(flat)
            world.Allreduce(flat, out, op=op)
            return out.reshape(x.shape)
        if col == "reduce":
            out = np.empty_like(flat)
            world.Reduce(flat, out, op=op, root=case.root)
            return out.reshape(x.shape) if rank == case.root else None
        if col == "reduce_scatter":
            unit = int(np.prod(x.shape[1:], dtype=np.int64))
            counts = [len(p) * unit for p in np.array_split(np.arange(
                x.shape[0]), n)]
            out = np.empty(counts[rank], x.dtype)
            world.Reduce_scatter(flat, out, recvcounts=counts, op=op)
            return out.reshape((-1,) + x.shape[1:])
        if col == "all_gather":
            rows = x.reshape((-1,) + x.shape[1:]) if x.ndim else x.reshape(1)
            out = np.empty((n * rows.shape[0],) + rows.shape[1:], x.dtype)
            world.Allgather(flat, out.reshape(-1))
            return out
        if col == "broadcast":
            out = x.copy()
            world.Bcast(out.reshape(-1), root=case.root)
            return out
        if col == "gather":
            rows = x.reshape((-1,) + x.shape[1:]) if x.ndim else x.reshape(1)
            out = np.empty((n * rows.shape[0],) + rows.shape[1:], x.dtype)
            world.Gather(flat, out.reshape(-1), root=case.root)
            return out if rank == case.root else None
        if col == "scatter":
            out = np.empty((x.shape[0] // n,) + x.shape[1:], x.dtype)
            world.Scatter(flat, out.reshape(-1), root=case.root)
            return out
        if case.uneven:
            unit = int(np.prod(x.shape[1:], dtype=np.int64))
            sc = [c * unit for c in cc.send_counts(case, n, rank)]
            rc = [cc.send_counts(case, n, r)[rank] * unit for r in range(n)]
            out = np.empty(sum(rc), x.dtype)
            world.Alltoallv([flat, sc], [out, rc])
            return out.reshape((-1,) + x.shape[1:])
        out = np.empty_like(flat)                       # all_to_all
        world.Alltoall(flat, out)
        return out.reshape(x.shape)
    return ref


def main() -> int:
    world = MPI.COMM_WORLD
    comm = MPIComm()
    records = cc.run_all(
        comm, mpi_reference=mpi_reference(world),
        any_failed=lambda failed: world.allreduce(failed, op=MPI.LOR))
    comm.close()
    gathered = world.gather(records, root=0)      # test harness only
    if world.Get_rank() == 0:
        n = world.Get_size()
        print(json.dumps({"ranks": n, "cases": len(records),
                          "report": cc.report(n, gathered)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
