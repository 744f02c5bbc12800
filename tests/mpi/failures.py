"""A rank that skips a collective, over MPIComm: every other rank must raise
CollectiveTimeout naming a culprit within timeout + 2 s.

Usage: mpiexec -n N python -m mpi4py tests/mpi/failures.py CULPRIT TIMEOUT_S
       ALGORITHM [WARMUP_CALLS]
Rank 0 prints one JSON line: {"ranks": N, "outcomes": [per rank]}, each
{"rank", "kind" (exception type, "ok" or "skipped"), "peer", "message",
"elapsed_s", "is_timeout"}.
"""
import json
import sys
import time

import numpy as np
from mpi4py import MPI

import warmup_kit as wk
from warmup_kit.comm import MPIComm


def main() -> int:
    culprit, timeout = int(sys.argv[1]), float(sys.argv[2])
    algorithm = sys.argv[3]
    warmup = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    world = MPI.COMM_WORLD
    comm = MPIComm()
    x = np.arange(10, dtype=np.float64)
    for _ in range(warmup):          # calls every rank makes, before the skip
        wk.allreduce(x, comm, algorithm=algorithm, timeout=30)
    out = {"rank": comm.rank, "peer": None, "message": "", "elapsed_s": 0.0,
           "is_timeout": False}
    if comm.rank == culprit:
        # alive, but never makes the call: wait (bounded) for the others to
        # be through theirs
        through = world.Ibarrier()
        deadline = time.monotonic() + timeout + 3
        while not through.Test() and time.monotonic() < deadline:
            time.sleep(0.01)
        out["kind"] = "skipped"
    else:
        t0 = time.monotonic()
        try:
            wk.allreduce(x, comm, algorithm=algorithm, timeout=timeout)
            out["kind"] = "ok"
        except Exception as exc:  # noqa: BLE001 - reported
            out.update(kind=type(exc).__name__, message=str(exc),
                       peer=getattr(exc, "peer", None),
                       is_timeout=isinstance(exc, wk.CollectiveTimeout))
        out["elapsed_s"] = time.monotonic() - t0
        world.Ibarrier().Wait()
    gathered = world.gather(out, root=0)
    if world.Get_rank() == 0:
        print(json.dumps({"ranks": world.Get_size(), "outcomes": gathered}),
              flush=True)
    world.Barrier()       # printed before a survivor's exit aborts the job
    return 0


if __name__ == "__main__":
    sys.exit(main())
