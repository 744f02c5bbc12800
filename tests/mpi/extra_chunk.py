"""Lab 01's byte check must catch a schedule that sends one chunk too many.

``with_extra_chunk`` wraps the collectives' schedule builder so the ring
all-reduce gains one more round: rank 0 copies chunk 0 (already final
everywhere, so the result stays right) to rank 1 once more. Lab 01 still
predicts the plain ring's bytes, so the transport's counters must differ
from the prediction by exactly that chunk on ranks 0 and 1.

Used by tests/test_lab01.py over sockets and shared memory
(warmup_kit.launch, fork: the patch is inherited) and, as a script, under
mpiexec (rank 0 prints {"ranks": N, "rows": [...]}).
"""
from __future__ import annotations

import json
import sys
from dataclasses import replace

import warmup_kit.collectives as collectives
from warmup_kit.measure.lab import measure_allreduce
from warmup_kit.schedule import Transfer

NBYTES = 8 * 96         # 96 float64: 32 per chunk on 3 ranks


def with_extra_chunk() -> None:
    """Patch the builder the public collectives use (this process only)."""
    plain = collectives.build

    def build(collective, algorithm, n, **kw):
        s = plain(collective, algorithm, n, **kw)
        if collective == "allreduce" and algorithm == "ring" and n > 1:
            extra = (Transfer(0, 1, (0,)),)
            s = replace(s, rounds=s.rounds + (extra,))
        return s
    collectives.build = build
    collectives._cached_call.cache_clear()


def measure(comm) -> dict:
    with_extra_chunk()
    return measure_allreduce(comm, "ring", NBYTES, iters=0, timeout=30)


def main() -> int:
    from mpi4py import MPI

    from warmup_kit.comm import MPIComm
    rows = MPI.COMM_WORLD.gather(measure(MPIComm()), root=0)
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(json.dumps({"ranks": len(rows), "rows": rows}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
